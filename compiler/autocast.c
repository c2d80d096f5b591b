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
} cast_run;

/* Adds node src (by value: adding moves the array) with inputs ins, at
 * its location and pin, its dtype and shape inferred again. */
static tfg_node_id add_like(cast_run *c, const tfg_node *src, const tfg_node_id *ins) {
  tfg_node_id id = tfg_graph_add(c->g, src->op, ins, src->ninputs, &src->loc);
  tfg_node *m = tfg_graph_node(c->g, id);
  m->attrs = src->attrs;
  m->name = src->name;
  m->pin = src->pin;
  m->call = src->call; /* in the fn call its source is in (recompute's regions) */
  tfg_status st = tfg_op_get(src->op)->infer(c->g, m, c->d);
  TFG_ASSERT(st == TFG_OK); /* the same op on the same shapes (the dtype aside) */
  return id;
}

/* x cast to dtype dt, where and as `at` is (its location and pin). */
static tfg_node_id cast_to(cast_run *c, tfg_node_id x, tfg_dtype dt, const tfg_node *at) {
  tfg_node cast = {.op = TFG_OP_CAST, .ninputs = 1, .loc = at->loc, .pin = at->pin, .call = at->call};
  cast.attrs.dtype = dt;
  return add_like(c, &cast, &x);
}

/* A transpose or reshape: exact in any dtype, so a product's operand
 * that is one is taken in the low dtype below it (the layout pass can
 * then read it through strides, as in f32). */
static bool view_op(const tfg_node *n) {
  return (n->op == TFG_OP_TRANSPOSE || n->op == TFG_OP_RESHAPE) && n->ninputs == 1;
}

enum { NEED_F32 = 1, NEED_LOW = 2 };

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
  if (cfg->precision != TFG_DTYPE_BF16 && cfg->precision != TFG_DTYPE_F16) return metrics;

  int32_t top = a->loss;
  for (int k = 0; k < nm; k++)
    if (metrics[k] > top) top = metrics[k];
  size_t span = (size_t)top + 1;
  cast_run c = {.g = g, .d = d, .low = cfg->precision};
  uint8_t *need = calloc(span, 1);
  tfg_node_id *f32v = calloc(span, sizeof *f32v), *lowv = calloc(span, sizeof *lowv);
  tfg_node_id *ins = NULL;
  int cap = 0;
  TFG_ASSERT(need && f32v && lowv);

  /* What each node of the cone is needed as, from the roots back: its
   * value (f32), its value in the low dtype (a product's operand), or
   * both. A product computes low from low operands; a view of a low value
   * is a low view; anything else is cast from its f32 value. */
  need[a->loss] |= NEED_F32;
  for (int k = 0; k < nm; k++) need[metrics[k]] |= NEED_F32;
  for (int32_t i = top; i >= 0; i--) {
    const tfg_node *n = &g->nodes[i];
    bool product = low_op(n->op) && n->dtype == TFG_DTYPE_F32;
    if (!need[i]) continue;
    if (product || ((need[i] & NEED_LOW) && view_op(n))) {
      if (product) need[i] |= NEED_LOW; /* its f32 value is its low one cast */
      for (int k = 0; k < n->ninputs; k++)
        need[n->inputs[k]] |= g->nodes[n->inputs[k]].dtype == TFG_DTYPE_F32 ? NEED_LOW : NEED_F32;
      if (!product && (need[i] & NEED_F32))
        for (int k = 0; k < n->ninputs; k++) need[n->inputs[k]] |= NEED_F32;
      continue;
    }
    need[i] |= NEED_F32; /* a low value of it is its f32 one cast */
    for (int k = 0; k < n->ninputs; k++) need[n->inputs[k]] |= NEED_F32;
  }

  /* In id order (inputs first), each node as it is needed; a node whose
   * f32 value reads only unchanged inputs is itself. */
  for (int32_t i = 0; i <= top; i++) {
    f32v[i] = lowv[i] = i;
    if (!need[i]) continue;
    const tfg_node nd = g->nodes[i];
    bool product = low_op(nd.op) && nd.dtype == TFG_DTYPE_F32;
    if (nd.ninputs > cap) {
      cap = nd.ninputs * 2;
      ins = realloc(ins, sizeof *ins * (size_t)cap);
      TFG_ASSERT(ins != NULL);
    }
    if (product || ((need[i] & NEED_LOW) && view_op(&nd))) {
      for (int k = 0; k < nd.ninputs; k++) {
        tfg_node_id x = nd.inputs[k];
        ins[k] = g->nodes[x].dtype == TFG_DTYPE_F32 ? lowv[x] : f32v[x];
      }
      lowv[i] = add_like(&c, &nd, ins);
      if (product) {
        if (need[i] & NEED_F32) f32v[i] = cast_to(&c, lowv[i], TFG_DTYPE_F32, &nd);
        continue;
      }
    }
    if (need[i] & NEED_F32) {
      bool changed = false;
      for (int k = 0; k < nd.ninputs; k++) {
        ins[k] = f32v[nd.inputs[k]];
        changed |= ins[k] != nd.inputs[k];
      }
      if (changed) f32v[i] = add_like(&c, &nd, ins);
    }
    if ((need[i] & NEED_LOW) && !view_op(&nd)) {
      const tfg_node *v = &g->nodes[f32v[i]];
      /* a value cast up from the low dtype is that value: no round trip */
      if (v->op == TFG_OP_CAST && g->nodes[v->inputs[0]].dtype == c.low) lowv[i] = v->inputs[0];
      else lowv[i] = cast_to(&c, f32v[i], c.low, &nd);
    }
  }
  out->loss = f32v[a->loss];
  for (int k = 0; k < nm; k++) metrics[k] = f32v[metrics[k]];
  free(need);
  free(f32v);
  free(lowv);
  free(ins);
  return metrics;
}
