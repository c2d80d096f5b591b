/* ir/graph.c: dtypes, shapes and the node array. */
#include "ir/graph.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "base/strbuf.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[TFG_DTYPE_COUNT] = {
    [TFG_DTYPE_F32] = {"f32", 4}, [TFG_DTYPE_F64] = {"f64", 8},  [TFG_DTYPE_F16] = {"f16", 2},
    [TFG_DTYPE_BF16] = {"bf16", 2}, [TFG_DTYPE_I32] = {"i32", 4}, [TFG_DTYPE_I64] = {"i64", 8},
    [TFG_DTYPE_BOOL] = {"bool", 1},
};

size_t tfg_dtype_size(tfg_dtype t) { return dtypes[t].size; }
const char *tfg_dtype_name(tfg_dtype t) { return dtypes[t].name; }

const char *tfg_dtype_article(tfg_dtype t) {
  return t == TFG_DTYPE_BOOL || t == TFG_DTYPE_BF16 ? "a" : "an"; /* "an eff-32", "a bee-eff-16" */
}

bool tfg_dtype_is_float(tfg_dtype t) {
  return t == TFG_DTYPE_F32 || t == TFG_DTYPE_F64 || t == TFG_DTYPE_F16 || t == TFG_DTYPE_BF16;
}

bool tfg_dtype_is_int(tfg_dtype t) { return t == TFG_DTYPE_I32 || t == TFG_DTYPE_I64; }

int tfg_dtype_from_name(const char *s) {
  for (int i = 0; i < TFG_DTYPE_COUNT; i++)
    if (strcmp(s, dtypes[i].name) == 0) return i;
  return -1;
}

int64_t tfg_node_bytes(const tfg_node *n) { return tfg_shape_numel(&n->shape) * (int64_t)tfg_dtype_size(n->dtype); }

int64_t tfg_shape_numel(const tfg_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dim[i];
  return n;
}

bool tfg_shape_fits(const tfg_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->dim[i] == 0) return true;
    if (s->dim[i] < 0 || n > TFG_MAX_ELEMENTS / s->dim[i]) return false;
    n *= s->dim[i];
  }
  return true;
}

bool tfg_shape_eq(const tfg_shape *a, const tfg_shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i] != b->dim[i]) return false;
  return true;
}

void tfg_shape_format(tfg_strbuf *b, tfg_dtype t, const tfg_shape *s) {
  tfg_strbuf_printf(b, "%s[", tfg_dtype_name(t));
  for (int i = 0; i < s->rank; i++) tfg_strbuf_printf(b, "%s%lld", i ? "," : "", (long long)s->dim[i]);
  tfg_strbuf_putc(b, ']');
}

tfg_graph *tfg_graph_new(void) {
  tfg_graph *g = calloc(1, sizeof *g);
  TFG_ASSERT(g != NULL);
  tfg_arena_init(&g->arena);
  return g;
}

void tfg_graph_free(tfg_graph *g) {
  if (!g) return;
  tfg_arena_free(&g->arena);
  free(g->nodes);
  free(g);
}

tfg_node_id tfg_graph_add(tfg_graph *g, tfg_op_id op, const tfg_node_id *inputs, int ninputs,
                          const tfg_loc *loc) {
  TFG_GROW(g->nodes, g->nnodes, g->cap, 64);
  tfg_node *n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->ninputs = ninputs;
  if (ninputs) {
    tfg_node_id *in = tfg_arena_alloc(&g->arena, sizeof *in * (size_t)ninputs);
    for (int i = 0; i < ninputs; i++) {
      TFG_ASSERT(inputs[i] >= 0 && inputs[i] < g->nnodes); /* topological order */
      in[i] = inputs[i];
    }
    n->inputs = in;
  }
  if (loc) n->loc = *loc;
  return g->nnodes++;
}

void tfg_graph_truncate(tfg_graph *g, int32_t n) {
  TFG_ASSERT(n >= 0 && n <= g->nnodes);
  g->nnodes = n; /* arena memory stays until the graph is freed */
}

void tfg_graph_reorder(tfg_graph *g, int32_t from, const tfg_node_id *order, tfg_node_id *map) {
  TFG_ASSERT(from >= 0 && from <= g->nnodes);
  int32_t n = g->nnodes - from;
  for (int32_t i = 0; i < from; i++) map[i] = i;
  for (int32_t k = 0; k < n; k++) map[order[k]] = from + k;
  tfg_node *moved = malloc(sizeof *moved * ((size_t)n + 1));
  TFG_ASSERT(moved != NULL);
  for (int32_t k = 0; k < n; k++) moved[k] = g->nodes[order[k]];
  for (int32_t k = 0; k < n; k++) {
    tfg_node *nd = &g->nodes[from + k];
    *nd = moved[k];
    /* each node's inputs are its own arena array (tfg_graph_add copies them) */
    tfg_node_id *in = (tfg_node_id *)(uintptr_t)nd->inputs;
    for (int i = 0; i < nd->ninputs; i++) {
      in[i] = map[in[i]];
      TFG_ASSERT(in[i] < from + k); /* still topological */
    }
  }
  free(moved);
}
