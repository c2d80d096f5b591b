/* compiler/simplify.c: CSE and exact simplification (simplify.h): one
 * sweep in graph order maps every node to its representative (itself, an
 * equal earlier node, or the operand it is an identity of), rewriting
 * each node's inputs to representatives first, so a chain of duplicates
 * collapses in the one sweep; a hash table of the kept nodes finds equal
 * ones. A second sweep, in reverse, removes what the first made dead. */
#include "compiler/simplify.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/fold.h"
#include "ir/ops.h"
#include "kernels/kernel.h"


static bool same_bits(const double *a, const double *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* Whether a and b's attrs are the same in every field an op reads (the
 * raw arguments too, conservatively). Doubles compare by bits, so -0.0
 * and 0.0 differ and a NaN equals itself. CONST's data by content. */
static bool same_attrs(const tfg_node *na, const tfg_node *nb) {
  const tfg_attrs *a = &na->attrs, *b = &nb->attrs;
  if (a->axis != b->axis || a->start != b->start || a->end != b->end || a->axes != b->axes ||
      a->keepdims != b->keepdims || a->transpose_a != b->transpose_a || a->transpose_b != b->transpose_b ||
      a->causal != b->causal || a->views != b->views ||
      a->dtype != b->dtype || a->init != b->init || a->seed != b->seed || a->seeded != b->seeded || a->n != b->n ||
      a->niv != b->niv || a->iv_none != b->iv_none || a->pad_mode != b->pad_mode)
    return false;
  if (memcmp(a->stride, b->stride, sizeof a->stride) || memcmp(a->pad, b->pad, sizeof a->pad) ||
      memcmp(a->size, b->size, sizeof a->size) || memcmp(a->perm, b->perm, sizeof a->perm) ||
      memcmp(a->iv, b->iv, sizeof a->iv) || memcmp(a->view_perm, b->view_perm, sizeof a->view_perm))
    return false;
  if (!same_bits(&a->value, &b->value, 1) || !same_bits(&a->a, &b->a, 1) || !same_bits(&a->b, &b->b, 1)) return false;
  if (a->opt.nesterov != b->opt.nesterov || a->opt.decoupled != b->opt.decoupled) return false;
  double oa[7] = {a->opt.lr, a->opt.momentum, a->opt.dampening, a->opt.beta1, a->opt.beta2, a->opt.eps, a->opt.weight_decay};
  double ob[7] = {b->opt.lr, b->opt.momentum, b->opt.dampening, b->opt.beta1, b->opt.beta2, b->opt.eps, b->opt.weight_decay};
  if (!same_bits(oa, ob, 7)) return false;
  if (na->op == TFG_OP_CONST) {
    size_t bytes = (size_t)tfg_node_bytes(na);
    return bytes == 0 || (a->data && b->data && memcmp(a->data, b->data, bytes) == 0);
  }
  return a->data == NULL && b->data == NULL; /* any other op's data: not compared, not merged */
}

/* Whether a and b (both pure, inputs already representatives)
 * compute the same value on the same device. */
static bool same_node(const tfg_node *a, const tfg_node *b) {
  if (a->op != b->op || a->dtype != b->dtype || !tfg_shape_eq(&a->shape, &b->shape) || a->ninputs != b->ninputs)
    return false;
  if (a->pin.kind != b->pin.kind || (a->pin.kind != TFG_DEV_NONE && a->pin.index != b->pin.index)) return false;
  if (a->replay != b->replay) return false; /* recompute's replay is the point: never the forward's own */
  for (int k = 0; k < a->ninputs; k++)
    if (a->inputs[k] != b->inputs[k]) return false;
  return same_attrs(a, b);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

/* A hash of what same_node compares (a part of it: equal nodes hash alike). */
static uint64_t node_hash(const tfg_node *n) {
  uint64_t h = mix(mix(mix(0, (uint64_t)n->op), (uint64_t)n->dtype), (uint64_t)n->ninputs);
  for (int d = 0; d < n->shape.rank; d++) h = mix(h, (uint64_t)n->shape.dim[d]);
  for (int k = 0; k < n->ninputs; k++) h = mix(h, (uint64_t)n->inputs[k]);
  h = mix(mix(h, (uint64_t)n->attrs.axis), (uint64_t)n->attrs.axes);
  if (n->op == TFG_OP_CONST && n->attrs.data) {
    size_t bytes = (size_t)tfg_node_bytes(n);
    const unsigned char *p = n->attrs.data;
    for (size_t i = 0; i < bytes && i < 64; i++) h = mix(h, p[i]);
  }
  return h;
}

/* Every element of constant node n is exactly the value named by want:
 * 1 (one), -0.0 (negzero: the float sign bit set, zero otherwise) or an
 * integer 0 (zero). A CONST is read; INIT ones/zeros/full by its attrs. */
enum { ONE, NEGZERO, INTZERO };

static bool all_are(const tfg_node *n, int want) {
  bool fl = tfg_dtype_is_float(n->dtype);
  if ((want == NEGZERO && !fl) || (want == INTZERO && !tfg_dtype_is_int(n->dtype))) return false;
  if (n->op == TFG_OP_INIT) {
    double v = n->attrs.init == TFG_INIT_ONES ? 1.0 : n->attrs.init == TFG_INIT_ZEROS ? 0.0 : n->attrs.value;
    if (n->attrs.init != TFG_INIT_ONES && n->attrs.init != TFG_INIT_ZEROS && n->attrs.init != TFG_INIT_FULL) return false;
    if (want == ONE) return v == 1.0;
    if (want == INTZERO) return v == 0.0;
    return v == 0.0 && n->attrs.init == TFG_INIT_FULL && __builtin_signbit(v);
  }
  if (n->op != TFG_OP_CONST || !n->attrs.data || n->dtype == TFG_DTYPE_BOOL) return false;
  /* The wanted element's bits: 1 has one encoding in every dtype, and
   * -0.0 is the float whose only set bit is the sign. */
  unsigned char bits[8];
  tfg_kernel_store_f64(n->dtype, bits, want == ONE ? 1.0 : want == NEGZERO ? -0.0 : 0.0);
  int64_t count = tfg_shape_numel(&n->shape);
  size_t es = tfg_dtype_size(n->dtype);
  for (int64_t i = 0; i < count; i++)
    if (memcmp((const char *)n->attrs.data + (size_t)i * es, bits, es) != 0) return false;
  return true;
}

/* Whether x can stand for n: the same dtype and shape (no broadcast, no
 * promotion hidden in the identity). */
static bool fits(const tfg_node *n, const tfg_node *x) {
  return n->dtype == x->dtype && tfg_shape_eq(&n->shape, &x->shape);
}

/* The node n (inputs already representatives) is an identity of, or -1. */
static tfg_node_id identity_of(const tfg_graph *g, const tfg_node *n) {
  const tfg_node *nd = g->nodes;
  switch (n->op) {
  case TFG_OP_MUL: /* x * 1, 1 * x */
    for (int k = 0; k < 2; k++)
      if (fits(n, &nd[n->inputs[k]]) && all_are(&nd[n->inputs[1 - k]], ONE)) return n->inputs[k];
    return -1;
  case TFG_OP_DIV: /* x / 1 */
    return fits(n, &nd[n->inputs[0]]) && all_are(&nd[n->inputs[1]], ONE) ? n->inputs[0] : -1;
  case TFG_OP_ADD: /* x + -0.0, -0.0 + x; integers x + 0, 0 + x */
    for (int k = 0; k < 2; k++) {
      const tfg_node *c = &nd[n->inputs[1 - k]];
      /* integer 0 only into an integer sum: a float x + 0 is x + +0.0 */
      if (fits(n, &nd[n->inputs[k]]) && (all_are(c, NEGZERO) || (tfg_dtype_is_int(n->dtype) && all_are(c, INTZERO))))
        return n->inputs[k];
    }
    return -1;
  case TFG_OP_SUB: { /* x - 0.0 (x - +0.0 is x + -0.0); integers x - 0 */
    const tfg_node *c = &nd[n->inputs[1]];
    if (!fits(n, &nd[n->inputs[0]])) return -1;
    bool zero = all_are(c, INTZERO);
    if (!zero && tfg_dtype_is_float(c->dtype)) {
      /* +0.0: not -0.0, and equal to 0 */
      zero = c->op == TFG_OP_INIT ? c->attrs.init == TFG_INIT_ZEROS ||
                                        (c->attrs.init == TFG_INIT_FULL && c->attrs.value == 0.0 && !__builtin_signbit(c->attrs.value))
                                  : false;
      if (c->op == TFG_OP_CONST && c->attrs.data) {
        int64_t count = tfg_shape_numel(&c->shape);
        size_t es = tfg_dtype_size(c->dtype);
        static const unsigned char zeros[8];
        zero = true;
        for (int64_t i = 0; zero && i < count; i++) zero = memcmp((const char *)c->attrs.data + (size_t)i * es, zeros, es) == 0;
      }
    }
    return zero ? n->inputs[0] : -1;
  }
  case TFG_OP_CAST:
  case TFG_OP_RESHAPE:
  case TFG_OP_FLATTEN:
  case TFG_OP_BROADCAST:
    return fits(n, &nd[n->inputs[0]]) ? n->inputs[0] : -1;
  case TFG_OP_TRANSPOSE: {
    const tfg_node *in = &nd[n->inputs[0]];
    int r = n->shape.rank;
    bool id = true;
    for (int i = 0; i < r; i++) id = id && n->attrs.perm[i] == i;
    if (id) return fits(n, in) ? n->inputs[0] : -1;
    if (in->op != TFG_OP_TRANSPOSE || in->shape.rank != r) return -1;
    /* out axis i = in axis perm[i] = x axis in->perm[perm[i]] */
    for (int i = 0; i < r; i++)
      if (in->attrs.perm[n->attrs.perm[i]] != i) return -1;
    return fits(n, &nd[in->inputs[0]]) ? in->inputs[0] : -1;
  }
  default: return -1;
  }
}

int tfg_simplify(tfg_graph *g, const uint8_t *roots, uint8_t *mark) {
  int32_t n = g->nnodes;
  tfg_node_id *rep = malloc(sizeof *rep * ((size_t)n + 1));
  int *readers = calloc((size_t)n + 1, sizeof *readers); /* by nodes not removed */
  bool *had = calloc((size_t)n + 1, sizeof *had);         /* read before the pass */
  size_t cap = 64;
  while (cap < (size_t)n * 2) cap *= 2;
  tfg_node_id *table = malloc(sizeof *table * cap);
  TFG_ASSERT(rep && readers && had && table);
  for (size_t i = 0; i < cap; i++) table[i] = -1;
  for (int32_t i = 0; i < n; i++)
    if (!tfg_fold_removed(mark[i]))
      for (int k = 0; k < g->nodes[i].ninputs; k++) had[g->nodes[i].inputs[k]] = true;

  int count = 0;
  for (int32_t i = 0; i < n; i++) {
    rep[i] = i;
    if (tfg_fold_removed(mark[i])) continue;
    tfg_node *nd = &g->nodes[i];
    /* Read representatives. */
    bool changed = false;
    for (int k = 0; k < nd->ninputs; k++) changed = changed || rep[nd->inputs[k]] != nd->inputs[k];
    if (changed) {
      tfg_node_id *ins = tfg_arena_alloc(&g->arena, sizeof *ins * (size_t)nd->ninputs);
      for (int k = 0; k < nd->ninputs; k++) ins[k] = rep[nd->inputs[k]];
      nd->inputs = ins;
    }
    for (int k = 0; k < nd->ninputs; k++) readers[nd->inputs[k]]++;
    if (!tfg_op_pure(nd)) continue;
    tfg_node_id to = identity_of(g, nd);
    if (to < 0) {
      size_t h = (size_t)node_hash(nd) & (cap - 1);
      for (; table[h] >= 0; h = (h + 1) & (cap - 1))
        if (same_node(&g->nodes[table[h]], nd)) break;
      if (table[h] >= 0) to = table[h];
      else table[h] = i;
    }
    if (to < 0) continue;
    rep[i] = to;
    count++;
    if (!(roots && roots[i])) {
      mark[i] = TFG_FOLD_SIMPLIFIED;
      for (int k = 0; k < nd->ninputs; k++) readers[nd->inputs[k]]--; /* it no longer runs */
    }
  }
  /* What has no reader left (and is no root, nor a source, random op or
   * update) runs for nobody: removed, in reverse, so its inputs' counts
   * drop before they are looked at. With roots, that is also a result no
   * run fetches (the program's own forward pass of a loss a strategy
   * cloned); without, every result is kept. */
  for (int32_t i = n - 1; i >= 0; i--) {
    tfg_node *nd = &g->nodes[i];
    if (tfg_fold_removed(mark[i]) || readers[i] > 0 || (roots ? roots[i] : !had[i])) continue;
    /* sources and updates (which write what they read) are kept; a random
     * op has no effect but its value, so an unread one goes too (the
     * program's own forward of a cloned loss, dropout and all) */
    if (!tfg_op_pure(nd) && nd->op != TFG_OP_DROPOUT && nd->op != TFG_OP_INIT) continue;
    mark[i] = TFG_FOLD_SIMPLIFIED;
    count++;
    for (int k = 0; k < nd->ninputs; k++) readers[nd->inputs[k]]--;
  }
  free(rep);
  free(readers);
  free(had);
  free(table);
  return count;
}
