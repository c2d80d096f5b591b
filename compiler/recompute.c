/* compiler/recompute.c: the calls whose activations recompute drops
 * (compiler/recompute.h). */
#include "compiler/recompute.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"

uint8_t *tfg_recompute_named(const tfg_program *p, const tfg_action *a) {
  uint8_t *chosen = calloc((size_t)p->ncalls + 1, 1);
  TFG_ASSERT(chosen != NULL);
  for (int32_t q = 0; q < p->ncalls; q++)
    for (int k = 0; k < a->config.nrecompute && !chosen[q]; k++)
      chosen[q] = strcmp(p->calls[q].fn, a->config.recompute[k]) == 0;
  return chosen;
}

void tfg_recompute_mark(tfg_graph *g, const tfg_program *p, const uint8_t *chosen) {
  if (!chosen) return;
  /* per call (1-based): the outermost chosen call it is in, or 0 */
  int32_t *region = calloc((size_t)p->ncalls + 1, sizeof *region);
  TFG_ASSERT(region != NULL);
  for (int32_t q = 1; q <= p->ncalls; q++) { /* a parent began before its calls: it is done first */
    int32_t parent = p->calls[q - 1].parent;
    region[q] = parent ? region[parent] : 0;
    if (!region[q] && chosen[q - 1]) region[q] = q;
  }
  for (int32_t i = 0; i < g->nnodes; i++) {
    int32_t q = g->nodes[i].call;
    g->nodes[i].recompute = q > 0 && q <= p->ncalls ? region[q] : 0;
  }
  free(region);
}

void tfg_recompute_clear(tfg_graph *g) {
  for (int32_t i = 0; i < g->nnodes; i++) g->nodes[i].recompute = 0;
}

static int by_cost_per_byte(const void *x, const void *y) {
  const tfg_recompute_candidate *a = x, *b = y;
  double ra = a->flops / (a->bytes > 0 ? a->bytes : 1), rb = b->flops / (b->bytes > 0 ? b->bytes : 1);
  if (ra != rb) return ra < rb ? -1 : 1;
  return (a->call > b->call) - (a->call < b->call);
}

/* Per call: the bytes and FLOPs of the ops of a's loss it (or a call in
 * it) built; calls[] (ncalls entries) with .call set. */
static tfg_recompute_candidate *call_costs(const tfg_graph *g, const tfg_program *p, const tfg_action *a) {
  int32_t nc = p->ncalls;
  uint8_t *cone = calloc((size_t)a->loss + 1, 1);
  tfg_recompute_candidate *c = calloc((size_t)nc + 1, sizeof *c);
  TFG_ASSERT(cone && c);
  for (int32_t q = 0; q < nc; q++) c[q].call = q;
  cone[a->loss] = 1;
  for (int32_t i = a->loss; i >= 0; i--)
    for (int k = 0; cone[i] && k < g->nodes[i].ninputs; k++) cone[g->nodes[i].inputs[k]] = 1;
  /* each op of the loss's forward counts for every call it is in */
  for (int32_t i = 0; i <= a->loss; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (!cone[i] || nd->ninputs == 0) continue;
    for (int32_t q = nd->call; q > 0; q = p->calls[q - 1].parent) {
      c[q - 1].bytes += (double)tfg_node_bytes(nd);
      c[q - 1].flops += tfg_op_get(nd->op)->flops(g, nd);
    }
  }
  free(cone);
  return c;
}

void tfg_recompute_explain(const tfg_graph *g, const tfg_program *p, const tfg_action *a, const uint8_t *chosen,
                           tfg_strbuf *out) {
  tfg_recompute_candidate *c = call_costs(g, p, a);
  int n = 0;
  double bytes = 0, flops = 0;
  tfg_strbuf fns = {0};
  for (int32_t q = 0; q < p->ncalls; q++) {
    bool outer = chosen[q];
    for (int32_t up = p->calls[q].parent; up > 0 && outer; up = p->calls[up - 1].parent) outer = !chosen[up - 1];
    if (!outer || c[q].bytes == 0) continue; /* counted with the call it is in, or built none of the loss */
    n++;
    bytes += c[q].bytes;
    flops += c[q].flops;
  }
  for (int k = 0; k < a->config.nrecompute; k++)
    tfg_strbuf_printf(&fns, "%s\"%s\"", k ? ", " : "", a->config.recompute[k]);
  if (n > 0)
    tfg_strbuf_printf(out, "recompute = [%s] (train at line %u): %d call%s replayed for the backward, %.3g GFLOP a "
                      "step; the %.3g MB of activations made in them are not kept for it\n", fns.data, a->loc.line, n, n == 1 ? "" : "s", flops / 1e9, bytes / 1e6);
  tfg_strbuf_free(&fns);
  free(c);
}

int tfg_recompute_candidates(const tfg_graph *g, const tfg_program *p, const tfg_action *a,
                             tfg_recompute_candidate **out) {
  int32_t nc = p->ncalls;
  int *depth = malloc(sizeof *depth * ((size_t)nc + 1));
  tfg_recompute_candidate *c = call_costs(g, p, a);
  int *count = calloc((size_t)nc + 2, sizeof *count); /* calls per depth with loss ops */
  TFG_ASSERT(depth && count);
  for (int32_t q = 0; q < nc; q++) depth[q] = p->calls[q].parent ? depth[p->calls[q].parent - 1] + 1 : 0;
  for (int32_t q = 0; q < nc; q++) count[depth[q]] += c[q].bytes > 0;
  int level = -1;
  for (int dl = 0; dl <= nc && level < 0; dl++) level = count[dl] >= 2 ? dl : -1;
  int n = 0;
  for (int32_t q = 0; q < nc && level >= 0; q++)
    if (depth[q] == level && c[q].bytes > 0) c[n++] = c[q];
  qsort(c, (size_t)n, sizeof *c, by_cost_per_byte);
  free(depth);
  free(count);
  *out = c;
  return n;
}
