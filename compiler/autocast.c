/* compiler/autocast.c: precision = bf16 | f16 as a clone of the train's
 * forward cone with its products in the low dtype (compiler/autocast.h). */
#include "compiler/autocast.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"

/* The ops torch.autocast runs in the low dtype that tfg has: its
 * lower-precision list's matmul/linear/bmm, conv2d and
 * scaled_dot_product_attention. */
static bool low_op(tfg_op_id op) { return op == TFG_OP_MATMUL || op == TFG_OP_CONV2D || op == TFG_OP_ATTENTION; }

typedef struct cast_run {
  tfg_graph *g;
  tfg_diag *d;
  tfg_dtype low;
  tfg_node_id *map;  /* [top + 1]: the clone's node for each cone node (itself where nothing changed) */
  tfg_node_id *low_of; /* [nnodes at the start]: the CAST of a value to low, once made; -1 before */
  tfg_node_id *ins;
  int cap;
} cast_run;

/* Adds node src (by value: adding moves the array) with inputs ins, at
 * its location and pin, its dtype and shape inferred again. */
static tfg_node_id add_like(cast_run *c, const tfg_node *src, const tfg_node_id *ins) {
  tfg_node_id id = tfg_graph_add(c->g, src->op, ins, src->ninputs, &src->loc);
  tfg_node *m = tfg_graph_node(c->g, id);
  m->attrs = src->attrs;
  m->name = src->name;
  m->pin = src->pin;
  tfg_status st = tfg_op_get(src->op)->infer(c->g, m, c->d);
  TFG_ASSERT(st == TFG_OK); /* the same op on the same shapes (the dtype aside) */
  return id;
}

/* x cast to dtype dt, where and as `at` is (its location and pin). */
static tfg_node_id cast_to(cast_run *c, tfg_node_id x, tfg_dtype dt, const tfg_node *at) {
  tfg_node cast = {.op = TFG_OP_CAST, .ninputs = 1, .loc = at->loc, .pin = at->pin};
  cast.attrs.dtype = dt;
  return add_like(c, &cast, &x);
}

tfg_node_id *tfg_autocast(tfg_graph *g, const tfg_action *a, tfg_action *out, tfg_diag *d) {
  *out = *a;
  const tfg_train_config *cfg = &a->config;
  int nm = cfg->nmetrics;
  tfg_node_id *metrics = NULL;
  if (nm > 0) {
    metrics = malloc(sizeof *metrics * (size_t)nm);
    TFG_ASSERT(metrics != NULL);
    memcpy(metrics, cfg->metrics, sizeof *metrics * (size_t)nm);
    out->config.metrics = metrics;
  }
  if (cfg->precision == TFG_DTYPE_F32 || cfg->precision == 0) return metrics;

  /* The cone of the loss and metrics. */
  int32_t top = a->loss;
  for (int k = 0; k < nm; k++)
    if (metrics[k] > top) top = metrics[k];
  size_t span = (size_t)top + 1;
  uint8_t *cone = calloc(span, 1);
  cast_run c = {.g = g, .d = d, .low = cfg->precision};
  c.map = calloc(span, sizeof *c.map);
  c.low_of = calloc(span, sizeof *c.low_of);
  TFG_ASSERT(cone && c.map && c.low_of);
  for (size_t i = 0; i < span; i++) {
    c.map[i] = (tfg_node_id)i;
    c.low_of[i] = -1;
  }
  cone[a->loss] = 1;
  for (int k = 0; k < nm; k++) cone[metrics[k]] = 1;
  for (int32_t i = top; i >= 0; i--)
    if (cone[i])
      for (int k = 0; k < g->nodes[i].ninputs; k++) cone[g->nodes[i].inputs[k]] = 1;

  /* In id order (inputs first): a product on f32 reads its float inputs
   * cast to low and is cast back; any other node is cloned when one of
   * its inputs was, else kept. */
  for (int32_t i = 0; i <= top; i++) {
    if (!cone[i]) continue;
    const tfg_node nd = g->nodes[i];
    if (nd.ninputs > c.cap) {
      c.cap = nd.ninputs * 2;
      c.ins = realloc(c.ins, sizeof *c.ins * (size_t)c.cap);
      TFG_ASSERT(c.ins != NULL);
    }
    bool changed = false;
    for (int k = 0; k < nd.ninputs; k++) {
      c.ins[k] = c.map[nd.inputs[k]];
      changed |= c.ins[k] != nd.inputs[k];
    }
    if (low_op(nd.op) && nd.dtype == TFG_DTYPE_F32) {
      for (int k = 0; k < nd.ninputs; k++) {
        tfg_node_id x = nd.inputs[k];
        if (g->nodes[c.ins[k]].dtype != TFG_DTYPE_F32) continue;
        if (c.low_of[x] < 0) c.low_of[x] = cast_to(&c, c.ins[k], c.low, &g->nodes[x]);
        c.ins[k] = c.low_of[x];
      }
      tfg_node_id prod = add_like(&c, &nd, c.ins);
      c.map[i] = cast_to(&c, prod, TFG_DTYPE_F32, &nd);
    } else if (changed) {
      c.map[i] = add_like(&c, &nd, c.ins);
    }
  }
  out->loss = c.map[a->loss];
  for (int k = 0; k < nm; k++) metrics[k] = c.map[metrics[k]];
  free(cone);
  free(c.map);
  free(c.low_of);
  free(c.ins);
  return metrics;
}
