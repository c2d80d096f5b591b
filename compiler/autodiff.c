/* compiler/autodiff.c: reverse-mode differentiation over the graph IR.
 *
 * One backward sweep in reverse id order (ids are topological): a node's
 * adjoint is complete once every consumer, all with larger ids, has been
 * visited. Each rule builds its input gradients from ordinary ops
 * (matmul with transposes, sums over broadcast axes, where) or from the
 * gradient ops of ir/ops.h where a fused kernel is clearly better
 * (relu, cross_entropy, layer_norm, conv2d, pooling, embedding). */
#include "compiler/autodiff.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"
#include "kernels/optim_math.h"
#include "kernels/kernel.h"

typedef struct ad {
  tfg_graph *g;
  tfg_diag *diag;
  /* The forward node being differentiated, by value: adding nodes may
   * move the node array. New nodes take its location and device pin. */
  tfg_loc loc;
  tfg_devspec pin;
  /* The rewrites that change a rule's shape but not its value (the flat
   * weight gradient of matmul_shared_grad); off with sw.no_opt. */
  bool opt;
  /* attention's gradient as ATTENTION_GRAD ops; off with
   * sw.no_attention_grad (then matmuls over the probabilities) */
  bool fused_attention;
  /* the packed attention gradient last made: for forward node att_fwd
   * and output gradient att_dy (its three inputs' rules share it) */
  tfg_node_id att_fwd, att_dy, att_pack;
  /* per node: it depends on a param the gradient is for (from), it
   * reaches the loss (to): the inputs whose gradients are wanted */
  const uint8_t *from, *to;
  /* tfg_autodiff_traced: the forward node `at` last chose (cur), and per
   * node added since origin_from, the forward node it was made for */
  tfg_node_id cur;
  tfg_node_id *origin;
  int32_t origin_from, origin_cap;
  /* recompute: per forward node, its replay for this backward, or -1 */
  tfg_node_id *replayed;
} ad;

static void at(ad *c, tfg_node_id id) {
  c->loc = c->g->nodes[id].loc;
  c->pin = c->g->nodes[id].pin;
  c->cur = id;
}

/* Records that node id (just added) was made for the current forward node. */
static void trace_origin(ad *c, tfg_node_id id) {
  int32_t k = id - c->origin_from;
  if (k >= c->origin_cap) {
    c->origin_cap = c->origin_cap ? 2 * c->origin_cap : 256;
    c->origin = realloc(c->origin, sizeof *c->origin * (size_t)c->origin_cap);
    TFG_ASSERT(c->origin != NULL);
  }
  c->origin[k] = c->cur;
}

/* Adds a node; its shape rule must accept it (anything else is a bug). */
static tfg_node_id add(ad *c, tfg_op_id op, const tfg_node_id *in, int nin, const tfg_attrs *attrs) {
  tfg_node_id id = tfg_graph_add(c->g, op, in, nin, &c->loc);
  tfg_node *n = tfg_graph_node(c->g, id);
  if (attrs) n->attrs = *attrs;
  n->pin = c->pin;
  n->backward = true;
  tfg_status s = tfg_op_get(op)->infer(c->g, n, c->diag);
  TFG_ASSERT(s == TFG_OK);
  if (c->origin_from > 0) trace_origin(c, id);
  return id;
}

static const tfg_node *node(ad *c, tfg_node_id id) { return &c->g->nodes[id]; }

static tfg_node_id op1(ad *c, tfg_op_id op, tfg_node_id a) { return add(c, op, &a, 1, NULL); }

static tfg_node_id op2(ad *c, tfg_op_id op, tfg_node_id a, tfg_node_id b) {
  tfg_node_id in[2] = {a, b};
  return add(c, op, in, 2, NULL);
}

static tfg_node_id scalar(ad *c, double v, tfg_dtype dt) {
  void *data = tfg_arena_alloc(&c->g->arena, 8);
  tfg_kernel_store_f64(dt, data, v);
  tfg_attrs a = {.data = data};
  tfg_node_id id = add(c, TFG_OP_CONST, NULL, 0, &a);
  tfg_node *n = tfg_graph_node(c->g, id);
  n->dtype = dt;
  n->shape.rank = 0;
  return id;
}

static tfg_node_id filled(ad *c, tfg_init_kind k, tfg_dtype dt, const tfg_shape *s) {
  tfg_attrs a = {.init = k};
  tfg_node_id id = add(c, TFG_OP_INIT, NULL, 0, &a);
  tfg_node *n = tfg_graph_node(c->g, id);
  n->dtype = dt;
  n->shape = *s;
  return id;
}

static tfg_node_id reshape(ad *c, tfg_node_id x, const tfg_shape *s) {
  if (tfg_shape_eq(&node(c, x)->shape, s)) return x;
  tfg_attrs a = {.niv = s->rank};
  for (int i = 0; i < s->rank; i++) a.iv[i] = s->dim[i];
  return add(c, TFG_OP_RESHAPE, &x, 1, &a);
}

static tfg_node_id broadcast(ad *c, tfg_node_id x, const tfg_shape *s) {
  if (tfg_shape_eq(&node(c, x)->shape, s)) return x;
  tfg_attrs a = {.niv = s->rank};
  for (int i = 0; i < s->rank; i++) a.iv[i] = s->dim[i];
  return add(c, TFG_OP_BROADCAST, &x, 1, &a);
}

/* Sum over the given axes of x, keeping them as size 1. */
static tfg_node_id sum_keep(ad *c, tfg_node_id x, uint32_t axes) {
  tfg_attrs a = {.keepdims = true};
  int r = node(c, x)->shape.rank;
  for (int i = 0; i < r; i++)
    if (axes & (1u << i)) a.iv[a.niv++] = i;
  return add(c, TFG_OP_SUM, &x, 1, &a);
}

/* The gradient of a broadcast operand: dy summed over the axes that were
 * broadcast, reshaped to the operand's shape. */
static tfg_node_id sum_to(ad *c, tfg_node_id dy, const tfg_shape *want) {
  const tfg_shape *have = &node(c, dy)->shape;
  if (tfg_shape_eq(have, want)) return dy;
  uint32_t axes = 0;
  int lead = have->rank - want->rank;
  for (int i = 0; i < have->rank; i++)
    if (i < lead || (want->dim[i - lead] == 1 && have->dim[i] != 1)) axes |= 1u << i;
  tfg_node_id s = axes ? sum_keep(c, dy, axes) : dy;
  return reshape(c, s, want);
}

/* dy of a reduction over axes, back to the input's shape x. */
static tfg_node_id unreduce(ad *c, tfg_node_id dy, const tfg_node *x, uint32_t axes) {
  tfg_shape keep = x->shape;
  for (int i = 0; i < keep.rank; i++)
    if (axes & (1u << i)) keep.dim[i] = 1;
  return broadcast(c, reshape(c, dy, &keep), &x->shape);
}

static tfg_node_id where(ad *c, tfg_node_id cond, tfg_node_id a, tfg_node_id b) {
  tfg_node_id in[3] = {cond, a, b};
  return add(c, TFG_OP_WHERE, in, 3, NULL);
}

static tfg_node_id matmul(ad *c, tfg_node_id a, tfg_node_id b, bool ta, bool tb) {
  tfg_node_id in[2] = {a, b};
  tfg_attrs at = {.transpose_a = ta, .transpose_b = tb};
  return add(c, TFG_OP_MATMUL, in, 2, &at);
}

/* x with its last two axes swapped. */
static tfg_node_id swap_last2(ad *c, tfg_node_id x) {
  int r = node(c, x)->shape.rank;
  tfg_attrs a = {.niv = r};
  for (int i = 0; i < r; i++) a.iv[i] = i;
  a.iv[r - 2] = r - 1;
  a.iv[r - 1] = r - 2;
  return add(c, TFG_OP_TRANSPOSE, &x, 1, &a);
}

/* x [..., R, C] as the matrix [P * R, C] (P: the product of its leading
 * axes): its rows in order, so a reshape. */
static tfg_node_id rows2d(ad *c, tfg_node_id x) {
  const tfg_shape *s = &node(c, x)->shape;
  tfg_shape m = {.rank = 2, .dim = {tfg_shape_numel(s) / s->dim[s->rank - 1], s->dim[s->rank - 1]}};
  return reshape(c, x, &m);
}

/* The gradient of the 2-D operand k of matmul y whose other operand has
 * batch axes (the weight of x[B, T, d] @ w[d, n]): ONE 2-D product over
 * the flattened batch, dW = X^T @ Y with X, Y of P * rows rows, instead
 * of a batched product to [P, d, n] and a sum over P. With y = op(a) @
 * op(b), A = op(a) [P, M, K], B = op(b) [P, K, N], dy [P, M, N]:
 *   dB = sum_p A_p^T dy_p = A_flat^T dy_flat       (rows P*M: A [P*M, K], dy [P*M, N])
 *   dA = sum_p dy_p B_p^T = dyT_flat^T BT_flat     (rows P*N: dy^T [P*N, M], B^T [P*N, K])
 * and db = dB^T, da = dA^T where the operand is transposed (swapping X
 * and Y). Flattening is a reshape where the rows are already in order
 * (a not transposed, b transposed, i.e. stored as A and B^T); otherwise
 * one transpose of the batched operand, and of dy for dA. The value is
 * the same sum in another order (float rounding differs). */
static tfg_node_id matmul_shared_grad(ad *c, const tfg_node *y, int k, tfg_node_id dy) {
  bool ta = y->attrs.transpose_a, tb = y->attrs.transpose_b;
  tfg_node_id a = y->inputs[0], b = y->inputs[1], xr, yr;
  if (k == 1) { /* rows of A and dy */
    tfg_node_id af = rows2d(c, ta ? swap_last2(c, a) : a), dyf = rows2d(c, dy);
    xr = tb ? dyf : af;
    yr = tb ? af : dyf;
  } else { /* rows of dy^T and B^T */
    tfg_node_id dyt = rows2d(c, swap_last2(c, dy)), bt = rows2d(c, tb ? b : swap_last2(c, b));
    xr = ta ? bt : dyt;
    yr = ta ? dyt : bt;
  }
  return matmul(c, xr, yr, true, false);
}

/* The shape of a node as attrs.iv, for gradient ops shaped by request. */
static tfg_attrs target(const tfg_attrs *base, const tfg_shape *s) {
  tfg_attrs a = *base;
  a.niv = s->rank;
  for (int i = 0; i < s->rank; i++) a.iv[i] = s->dim[i];
  return a;
}

/* ---- the rules ------------------------------------------------------------ */

/* Computes the gradient of input k of node y (id yid) given its adjoint
 * dy, or -1 when there is none. */
static tfg_node_id rule(ad *c, tfg_node_id yid, int k, tfg_node_id dy) {
  /* Copies: adding nodes may move the array. */
  const tfg_node y = *node(c, yid), xcopy = *node(c, y.inputs[k]);
  const tfg_node *x = &xcopy;
  tfg_node_id xid = y.inputs[k];
  tfg_dtype dt = y.dtype;
  switch (y.op) {
  case TFG_OP_NEG: return op1(c, TFG_OP_NEG, dy);
  case TFG_OP_EXP: return op2(c, TFG_OP_MUL, dy, yid);
  case TFG_OP_LOG: return op2(c, TFG_OP_DIV, dy, xid);
  case TFG_OP_SQRT: return op2(c, TFG_OP_DIV, op2(c, TFG_OP_MUL, dy, scalar(c, 0.5, dt)), yid);
  case TFG_OP_RSQRT: { /* d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3 */
    tfg_node_id y3 = op2(c, TFG_OP_MUL, op2(c, TFG_OP_MUL, yid, yid), yid);
    return op2(c, TFG_OP_MUL, op2(c, TFG_OP_MUL, dy, scalar(c, -0.5, dt)), y3);
  }
  case TFG_OP_ABS: { /* sign(x) dy, and 0 at 0 as PyTorch */
    tfg_node_id zero = scalar(c, 0, dt);
    tfg_node_id neg = where(c, op2(c, TFG_OP_GREATER, zero, xid), op1(c, TFG_OP_NEG, dy), broadcast(c, zero, &y.shape));
    return where(c, op2(c, TFG_OP_GREATER, xid, zero), dy, neg);
  }
  case TFG_OP_RELU: return op2(c, TFG_OP_RELU_GRAD, xid, dy);
  case TFG_OP_GELU: return op2(c, TFG_OP_GELU_GRAD, xid, dy);
  case TFG_OP_TANH: /* 1 - y^2 */
    return op2(c, TFG_OP_MUL, dy, op2(c, TFG_OP_SUB, scalar(c, 1, dt), op2(c, TFG_OP_MUL, yid, yid)));
  case TFG_OP_SIGMOID: /* y (1 - y) */
    return op2(c, TFG_OP_MUL, dy, op2(c, TFG_OP_MUL, yid, op2(c, TFG_OP_SUB, scalar(c, 1, dt), yid)));
  case TFG_OP_CAST: {
    if (!tfg_dtype_is_float(x->dtype) || !tfg_dtype_is_float(y.dtype)) return -1;
    tfg_attrs a = {.dtype = x->dtype};
    return add(c, TFG_OP_CAST, &dy, 1, &a);
  }
  case TFG_OP_ADD: return sum_to(c, dy, &x->shape);
  case TFG_OP_SUB: return sum_to(c, k == 0 ? dy : op1(c, TFG_OP_NEG, dy), &x->shape);
  case TFG_OP_MUL: return sum_to(c, op2(c, TFG_OP_MUL, dy, y.inputs[1 - k]), &x->shape);
  case TFG_OP_DIV:
    if (k == 0) return sum_to(c, op2(c, TFG_OP_DIV, dy, y.inputs[1]), &x->shape);
    /* d(a/b)/db = -a/b^2 = -y/b */
    return sum_to(c, op1(c, TFG_OP_NEG, op2(c, TFG_OP_DIV, op2(c, TFG_OP_MUL, dy, yid), y.inputs[1])), &x->shape);
  case TFG_OP_POW: {
    tfg_node_id base = y.inputs[0], p = y.inputs[1];
    if (k == 0) { /* p x^(p-1) */
      tfg_node_id pm1 = op2(c, TFG_OP_SUB, p, scalar(c, 1, dt));
      tfg_node_id g = op2(c, TFG_OP_MUL, p, op2(c, TFG_OP_POW, base, pm1));
      return sum_to(c, op2(c, TFG_OP_MUL, dy, g), &x->shape);
    }
    /* x^p log x */
    return sum_to(c, op2(c, TFG_OP_MUL, dy, op2(c, TFG_OP_MUL, yid, op1(c, TFG_OP_LOG, base))), &x->shape);
  }
  case TFG_OP_MAXIMUM:
  case TFG_OP_MINIMUM: { /* the larger (smaller) side takes dy; a tie splits it, as PyTorch */
    tfg_node_id a = y.inputs[k], b = y.inputs[1 - k];
    tfg_node_id wins = y.op == TFG_OP_MAXIMUM ? op2(c, TFG_OP_GREATER, a, b) : op2(c, TFG_OP_GREATER, b, a);
    tfg_node_id zero = broadcast(c, scalar(c, 0, dt), &y.shape);
    tfg_node_id half = op2(c, TFG_OP_MUL, dy, scalar(c, 0.5, dt));
    tfg_node_id g = where(c, wins, dy, where(c, op2(c, TFG_OP_EQUAL, a, b), half, zero));
    return sum_to(c, g, &x->shape);
  }
  case TFG_OP_WHERE: {
    if (k == 0) return -1;
    tfg_node_id zero = broadcast(c, scalar(c, 0, dt), &y.shape);
    tfg_node_id g = k == 1 ? where(c, y.inputs[0], dy, zero) : where(c, y.inputs[0], zero, dy);
    return sum_to(c, g, &x->shape);
  }
  case TFG_OP_MATMUL: {
    bool ta = y.attrs.transpose_a, tb = y.attrs.transpose_b;
    tfg_node_id a = y.inputs[0], b = y.inputs[1], g;
    if (c->opt && x->shape.rank == 2 && node(c, y.inputs[1 - k])->shape.rank > 2)
      return matmul_shared_grad(c, &y, k, dy);
    if (k == 0) g = ta ? matmul(c, b, dy, tb, true) : matmul(c, dy, b, false, !tb);
    else g = tb ? matmul(c, dy, a, true, ta) : matmul(c, a, dy, !ta, false);
    return sum_to(c, g, &x->shape);
  }
  case TFG_OP_SUM: return unreduce(c, dy, x, y.attrs.axes);
  case TFG_OP_MEAN: {
    double count = (double)tfg_shape_numel(&x->shape) / (double)tfg_shape_numel(&y.shape);
    return unreduce(c, op2(c, TFG_OP_DIV, dy, scalar(c, count, dt)), x, y.attrs.axes);
  }
  case TFG_OP_MAX: { /* spread evenly over the maxima, as torch.amax */
    tfg_node_id mask = op2(c, TFG_OP_EQUAL, xid, unreduce(c, yid, x, y.attrs.axes));
    tfg_attrs cast = {.dtype = dt};
    tfg_node_id m = add(c, TFG_OP_CAST, &mask, 1, &cast);
    tfg_node_id count = broadcast(c, sum_keep(c, m, y.attrs.axes), &x->shape);
    return op2(c, TFG_OP_DIV, op2(c, TFG_OP_MUL, m, unreduce(c, dy, x, y.attrs.axes)), count);
  }
  case TFG_OP_RESHAPE:
  case TFG_OP_FLATTEN: return reshape(c, dy, &x->shape);
  case TFG_OP_TRANSPOSE: {
    tfg_attrs a = {.niv = y.shape.rank};
    for (int i = 0; i < y.shape.rank; i++) a.iv[y.attrs.perm[i]] = i; /* the inverse permutation */
    return add(c, TFG_OP_TRANSPOSE, &dy, 1, &a);
  }
  case TFG_OP_CONCAT: {
    int64_t start = 0;
    for (int i = 0; i < k; i++) start += node(c, y.inputs[i])->shape.dim[y.attrs.axis];
    tfg_attrs a = {.axis = y.attrs.axis, .start = start, .end = start + x->shape.dim[y.attrs.axis]};
    return add(c, TFG_OP_SLICE, &dy, 1, &a);
  }
  case TFG_OP_SLICE: { /* zeros around dy */
    int64_t ax = y.attrs.axis, before = y.attrs.start, after = x->shape.dim[ax] - y.attrs.end;
    tfg_node_id parts[3];
    int n = 0;
    tfg_shape s = x->shape;
    if (before) { s.dim[ax] = before; parts[n++] = filled(c, TFG_INIT_ZEROS, dt, &s); }
    parts[n++] = dy;
    if (after) { s.dim[ax] = after; parts[n++] = filled(c, TFG_INIT_ZEROS, dt, &s); }
    if (n == 1) return dy;
    tfg_attrs a = {.axis = ax};
    return add(c, TFG_OP_CONCAT, parts, n, &a);
  }
  case TFG_OP_BROADCAST: return sum_to(c, dy, &x->shape);
  case TFG_OP_SOFTMAX: { /* y (dy - sum(dy y)) */
    tfg_node_id s = broadcast(c, sum_keep(c, op2(c, TFG_OP_MUL, dy, yid), 1u << y.attrs.axis), &y.shape);
    return op2(c, TFG_OP_MUL, yid, op2(c, TFG_OP_SUB, dy, s));
  }
  case TFG_OP_ATTENTION: {
    if (c->fused_attention) { /* fused: no Tq x Tk tensor (kernels/cpu/attention.c) */
      tfg_node_id in[4] = {y.inputs[0], y.inputs[1], y.inputs[2], dy};
      tfg_attrs a = y.attrs;
      /* copies: adding nodes may move the node array */
      tfg_shape qs = node(c, y.inputs[0])->shape, ks = node(c, y.inputs[1])->shape;
      int r = qs.rank;
      int64_t hd = qs.dim[r - 1], hdv = node(c, y.inputs[2])->shape.dim[r - 1];
      int wanted = 0; /* of q, k and v: one alone is cheaper by its own op (no products for the others) */
      const tfg_node_id *fin = node(c, c->cur)->inputs; /* the forward's own (y may be its replay) */
      for (int m = 0; m < 3; m++) wanted += c->from[fin[m]] && c->to[fin[m]];
      if (qs.dim[r - 2] != ks.dim[r - 2] || wanted < 2) { /* Tq != Tk, or one input: one op per input */
        a.axis = k;
        return add(c, TFG_OP_ATTENTION_GRAD, in, 4, &a);
      }
      /* Self-attention: one op computes all three side by side (the
       * probabilities and dS once), each input's gradient a slice of it;
       * made once for the three inputs (the pass needs no CSE for it). */
      if (c->att_fwd != yid || c->att_dy != dy) {
        a.axis = TFG_ATTENTION_GRAD_PACKED;
        c->att_pack = add(c, TFG_OP_ATTENTION_GRAD, in, 4, &a);
        c->att_fwd = yid;
        c->att_dy = dy;
      }
      int64_t start = k == 0 ? 0 : k == 1 ? hd : 2 * hd;
      tfg_attrs sl = {.axis = r - 1, .start = start, .end = start + (k == 2 ? hdv : hd)};
      return add(c, TFG_OP_SLICE, &c->att_pack, 1, &sl);
    }
    /* Unfused (TFG_ATTENTION_GRAD=0): o = P v, P = softmax(S), S = q k^T scale (masked): P again from
     * ATTENTION_PROBS (the forward kept no T x T tensor), then
     *   dv = P^T do,  dP = do v^T,  dS = P (dP - sum(dP P)) scale (softmax's rule),
     *   dq = dS k,  dk = dS^T q.
     * Each input's rule builds the shared nodes anew; CSE merges them. */
    tfg_node_id qk[2] = {y.inputs[0], y.inputs[1]};
    tfg_node_id p = add(c, TFG_OP_ATTENTION_PROBS, qk, 2, &y.attrs);
    if (k == 2) return matmul(c, p, dy, true, false);
    tfg_shape ps = node(c, p)->shape; /* a copy: adding nodes may move the node array */
    int r = ps.rank;
    tfg_node_id dp = matmul(c, dy, y.inputs[2], false, true);
    tfg_node_id sp = broadcast(c, sum_keep(c, op2(c, TFG_OP_MUL, dp, p), 1u << (r - 1)), &ps);
    /* the scale on dS (it joins dS's fused chain), so that dq and dk are
     * matmuls whose output transposes the layout pass can fold */
    tfg_node_id ds = op2(c, TFG_OP_MUL, op2(c, TFG_OP_MUL, p, op2(c, TFG_OP_SUB, dp, sp)), scalar(c, y.attrs.value, dt));
    return k == 0 ? matmul(c, ds, y.inputs[1], false, false) : matmul(c, ds, y.inputs[0], true, false);
  }
  case TFG_OP_LOG_SOFTMAX: { /* dy - exp(y) sum(dy) */
    tfg_node_id s = broadcast(c, sum_keep(c, dy, 1u << y.attrs.axis), &y.shape);
    return op2(c, TFG_OP_SUB, dy, op2(c, TFG_OP_MUL, op1(c, TFG_OP_EXP, yid), s));
  }
  case TFG_OP_CROSS_ENTROPY: {
    if (k != 0) return -1;
    tfg_node_id in[3] = {y.inputs[0], y.inputs[1], dy};
    return add(c, TFG_OP_CROSS_ENTROPY_GRAD, in, 3, NULL);
  }
  case TFG_OP_MSE: { /* 2 (a - b) / n, and its negative for b */
    double n = (double)tfg_shape_numel(&x->shape);
    tfg_node_id diff = op2(c, TFG_OP_SUB, y.inputs[0], y.inputs[1]);
    tfg_node_id g = op2(c, TFG_OP_MUL, diff, op2(c, TFG_OP_MUL, dy, scalar(c, 2.0 / n, dt)));
    return k == 0 ? g : op1(c, TFG_OP_NEG, g);
  }
  case TFG_OP_CONV2D: {
    if (k == 0) {
      tfg_node_id in[2] = {dy, y.inputs[1]};
      tfg_attrs a = target(&y.attrs, &x->shape);
      return add(c, TFG_OP_CONV2D_GRAD_INPUT, in, 2, &a);
    }
    tfg_node_id in[2] = {y.inputs[0], dy};
    tfg_attrs a = target(&y.attrs, &x->shape);
    return add(c, TFG_OP_CONV2D_GRAD_WEIGHT, in, 2, &a);
  }
  case TFG_OP_MAX_POOL: {
    tfg_node_id in[2] = {xid, dy};
    return add(c, TFG_OP_MAX_POOL_GRAD, in, 2, &y.attrs);
  }
  case TFG_OP_AVG_POOL: {
    tfg_attrs a = target(&y.attrs, &x->shape);
    return add(c, TFG_OP_AVG_POOL_GRAD, &dy, 1, &a);
  }
  case TFG_OP_LAYER_NORM: {
    const tfg_node *in0 = node(c, y.inputs[0]);
    int r = in0->shape.rank;
    uint32_t lead = r > 1 ? (1u << (r - 1)) - 1 : 0; /* every axis but the last */
    if (k == 0) {
      tfg_node_id in[3] = {y.inputs[0], y.inputs[1], dy};
      return add(c, TFG_OP_LAYER_NORM_GRAD, in, 3, &y.attrs);
    }
    tfg_shape d = x->shape; /* [D] */
    if (k == 2) return sum_to(c, dy, &d);
    /* dgamma = sum(dy * xhat), xhat = layer_norm(x, 1, 0) */
    tfg_node_id ln[3] = {y.inputs[0], filled(c, TFG_INIT_ONES, dt, &d), filled(c, TFG_INIT_ZEROS, dt, &d)};
    tfg_node_id xhat = add(c, TFG_OP_LAYER_NORM, ln, 3, &y.attrs);
    tfg_node_id prod = op2(c, TFG_OP_MUL, dy, xhat);
    return reshape(c, lead ? sum_keep(c, prod, lead) : prod, &d);
  }
  case TFG_OP_DROPOUT: /* the same mask: dropout's mask is a function of (seed, step, i) */
    return add(c, TFG_OP_DROPOUT, &dy, 1, &y.attrs);
  case TFG_OP_EMBEDDING: {
    if (k != 0) return -1;
    tfg_node_id in[2] = {y.inputs[1], dy};
    tfg_attrs a = {.n = x->shape.dim[0]};
    return add(c, TFG_OP_EMBEDDING_GRAD, in, 2, &a);
  }
  /* No gradient: sources, comparisons, integer and metric outputs, the
   * gradient ops themselves, updates, collectives and fused chains (built
   * after autodiff). Every op is listed, here or above, and there is no
   * default: -Wswitch names an op added without deciding its gradient. */
  case TFG_OP_CONST: case TFG_OP_PARAM: case TFG_OP_INPUT: case TFG_OP_INIT: case TFG_OP_STATE:
  case TFG_OP_EQUAL: case TFG_OP_GREATER: case TFG_OP_ARGMAX: case TFG_OP_ONE_HOT: case TFG_OP_ACCURACY:
  case TFG_OP_RELU_GRAD: case TFG_OP_GELU_GRAD: case TFG_OP_CROSS_ENTROPY_GRAD: case TFG_OP_LAYER_NORM_GRAD:
  case TFG_OP_CONV2D_GRAD_INPUT: case TFG_OP_CONV2D_GRAD_WEIGHT: case TFG_OP_MAX_POOL_GRAD:
  case TFG_OP_AVG_POOL_GRAD: case TFG_OP_ATTENTION_PROBS: case TFG_OP_ATTENTION_GRAD: case TFG_OP_EMBEDDING_GRAD:
  case TFG_OP_SGD_UPDATE: case TFG_OP_ADAM_UPDATE: case TFG_OP_GRAD_ACCUMULATE: case TFG_OP_AMP_UPDATE:
  case TFG_OP_ALLREDUCE: case TFG_OP_REDUCE_SCATTER: case TFG_OP_ALL_GATHER: case TFG_OP_SEND: case TFG_OP_RECV:
  case TFG_OP_FUSED:
    return -1;
  case TFG_OP_COUNT: break;
  }
  TFG_ASSERT(!"a node's op is an op");
  return -1;
}

/* The ops where gradients stopped on their way to the params: the first
 * few, for a warning that names them. */
typedef struct cuts {
  tfg_node_id id[4];
  int n;
} cuts;

static void cut_at(cuts *c, tfg_node_id id) {
  if (!c) return;
  for (int i = 0; i < c->n; i++)
    if (c->id[i] == id) return;
  if (c->n < (int)(sizeof c->id / sizeof c->id[0])) c->id[c->n++] = id;
}

/* The value of forward node id that its backward reads: the node
 * itself, or, for one recompute drops (tfg_node.recompute), its replay,
 * made once per differentiation when the backward first needs it, so
 * just before the backward of its call: the same op, attrs and device
 * on the replays of its inputs from the same call, and on the forward's
 * own values of the others (the call's inputs, params, constants). So
 * the replay computes the same values, and the forward's own are read
 * by the forward alone (compiler/recompute.h). */
static tfg_node_id replay(ad *c, tfg_node_id id) {
  if (!node(c, id)->recompute || node(c, id)->ninputs == 0) return id;
  if (c->replayed[id] >= 0) return c->replayed[id];
  /* post-order without recursion: a call may hold thousands of ops */
  tfg_node_id *stack = malloc(sizeof *stack * 64);
  int n = 0, cap = 64;
  TFG_ASSERT(stack != NULL);
  stack[n++] = id;
  while (n > 0) {
    tfg_node_id top = stack[n - 1];
    const tfg_node *t = node(c, top);
    bool ready = true;
    for (int k = 0; k < t->ninputs; k++) {
      tfg_node_id x = t->inputs[k];
      const tfg_node *nx = node(c, x);
      if (nx->recompute != t->recompute || nx->ninputs == 0 || c->replayed[x] >= 0) continue;
      if (n == cap) {
        cap *= 2;
        stack = realloc(stack, sizeof *stack * (size_t)cap);
        TFG_ASSERT(stack != NULL);
      }
      stack[n++] = x;
      ready = false;
    }
    if (!ready) continue;
    n--;
    if (c->replayed[top] >= 0) continue; /* reached twice before its replay */
    const tfg_node f = *t; /* a copy: adding moves the array */
    tfg_node_id *in = malloc(sizeof *in * ((size_t)f.ninputs + 1));
    TFG_ASSERT(in != NULL);
    for (int k = 0; k < f.ninputs; k++) {
      tfg_node_id x = f.inputs[k];
      in[k] = node(c, x)->recompute == f.recompute && c->replayed[x] >= 0 ? c->replayed[x] : x;
    }
    tfg_node_id r = tfg_graph_add(c->g, f.op, in, f.ninputs, &f.loc);
    free(in);
    tfg_node *rn = tfg_graph_node(c->g, r);
    rn->dtype = f.dtype;
    rn->shape = f.shape;
    rn->attrs = f.attrs;
    rn->pin = f.pin;
    rn->call = f.call;
    rn->replay = true;
    if (c->origin_from > 0) trace_origin(c, r);
    c->replayed[top] = r;
  }
  free(stack);
  return c->replayed[id];
}

/* tfg_autodiff, noting in *cut (when not NULL) each op on a path from a
 * wrt node to the loss that the gradient could not cross: an op with a
 * value no gradient is carried by (argmax's i32, a comparison's bool, a
 * cast to an integer), or one without a gradient rule (accuracy). The
 * rules' choices come from sw (NULL: the defaults): no_opt, the switch
 * that shows every pass's gain side by side (docs/plan.md), and
 * no_attention_grad. */
static void differentiate(tfg_graph *g, tfg_node_id loss, const tfg_node_id *wrt, int n, tfg_node_id *grads,
                          const tfg_switches *sw, cuts *cut, tfg_node_id **origin) {
  int32_t count = loss + 1;
  /* Relevant nodes: reachable from a wrt node and reaching the loss. */
  uint8_t *from = calloc((size_t)count, 1), *to = calloc((size_t)count, 1);
  tfg_node_id *adj = malloc(sizeof *adj * (size_t)count);
  TFG_ASSERT(from && to && adj);
  for (int i = 0; i < n; i++)
    if (wrt[i] < count) from[wrt[i]] = 1;
  for (int32_t i = 0; i < count; i++) {
    adj[i] = -1;
    const tfg_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->ninputs && !from[i]; k++) from[i] = from[nd->inputs[k]];
  }
  to[loss] = 1;
  for (int32_t i = loss; i >= 0; i--)
    if (to[i])
      for (int k = 0; k < g->nodes[i].ninputs; k++) to[g->nodes[i].inputs[k]] = 1;

  ad c = {.g = g, .opt = !(sw && sw->no_opt), .fused_attention = !(sw && sw->no_attention_grad),
          .att_fwd = -1, .att_dy = -1, .att_pack = -1, .from = from, .to = to, .cur = loss,
          .origin_from = origin ? g->nnodes : 0};
  c.replayed = malloc(sizeof *c.replayed * (size_t)count);
  TFG_ASSERT(c.replayed != NULL);
  for (int32_t i = 0; i < count; i++) c.replayed[i] = -1;
  at(&c, loss);
  adj[loss] = scalar(&c, 1.0, g->nodes[loss].dtype);
  for (int32_t i = loss; i >= 0; i--) {
    if (adj[i] < 0 || !from[i] || !to[i]) continue;
    int nin = g->nodes[i].ninputs;
    for (int k = 0; k < nin; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      if (!from[x] || !to[x]) continue;
      if (!tfg_dtype_is_float(g->nodes[x].dtype)) {
        cut_at(cut, x);
        continue;
      }
      at(&c, i);
      tfg_node_id gk = rule(&c, replay(&c, i), k, adj[i]);
      if (gk < 0) {
        cut_at(cut, i);
        continue;
      }
      adj[x] = adj[x] < 0 ? gk : op2(&c, TFG_OP_ADD, adj[x], gk); /* a tensor used several times */
    }
  }
  for (int i = 0; i < n; i++) grads[i] = wrt[i] < count ? adj[wrt[i]] : -1;
  if (origin) *origin = c.origin;
  free(c.replayed);
  free(from);
  free(to);
  free(adj);
}

tfg_status tfg_autodiff(tfg_graph *g, tfg_node_id loss, const tfg_node_id *wrt, int n, tfg_node_id *grads,
                        const tfg_switches *sw) {
  differentiate(g, loss, wrt, n, grads, sw, NULL, NULL);
  return TFG_OK;
}

tfg_node_id *tfg_autodiff_traced(tfg_graph *g, tfg_node_id loss, const tfg_node_id *wrt, int n, tfg_node_id *grads,
                                 const tfg_switches *sw) {
  TFG_ASSERT(g->nnodes > 0); /* the loss exists: origin_from 0 means "not tracing" */
  tfg_node_id *origin = NULL;
  differentiate(g, loss, wrt, n, grads, sw, NULL, &origin);
  return origin;
}

/* Warns at train action a, whose loss reads params but whose gradient
 * reaches none of them (the interpreter refuses a loss that reads no
 * param at all): every step would leave them as they are. Names the ops
 * in cut, where the gradient stopped. */
static void warn_untrained(const tfg_graph *g, const tfg_action *a, const cuts *cut, tfg_diag *d) {
  tfg_loc l = a->loc;
  l.len = 5; /* the keyword */
  tfg_diag_warning(d, &l, "no gradient flows to any param: training this loss changes nothing");
  for (int i = 0; i < cut->n; i++) {
    const tfg_node *nd = &g->nodes[cut->id[i]];
    const char *op = tfg_op_get(nd->op)->name;
    if (tfg_dtype_is_float(nd->dtype))
      tfg_diag_note(d, &nd->loc, "the gradient stops at %s, which has none", op);
    else
      tfg_diag_note(d, &nd->loc, "the gradient stops at %s: its %s result carries none", op, tfg_dtype_name(nd->dtype));
  }
  tfg_diag_help(d, "argmax, comparisons, casts to integers and accuracy have no gradient: "
                   "a loss must reach its params through ops that do");
}

int tfg_autodiff_trained_params(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_switches *sw,
                                tfg_node_id *params, tfg_diag *d) {
  tfg_node_id *grads = malloc(sizeof *grads * (size_t)(p->nparams + 1));
  TFG_ASSERT(grads != NULL);
  int32_t mark = g->nnodes;
  cuts cut = {0};
  differentiate(g, a->loss, p->params, p->nparams, grads, sw, &cut, NULL);
  tfg_graph_truncate(g, mark);
  int n = 0;
  for (int i = 0; i < p->nparams; i++)
    if (grads[i] >= 0) params[n++] = p->params[i];
  if (n == 0) warn_untrained(g, a, &cut, d);
  free(grads);
  return n;
}

/* ---- the training step --------------------------------------------------------- */

/* A STATE node named "PARAM:SLOT" shaped like the param. */
static tfg_node_id add_state(ad *c, const tfg_node *param, const char *slot) {
  size_t n = strlen(param->name) + strlen(slot) + 2;
  char *name = tfg_arena_alloc(&c->g->arena, n);
  snprintf(name, n, "%s:%s", param->name, slot);
  tfg_dtype dt = param->dtype;
  tfg_shape shape = param->shape;
  tfg_node_id id = add(c, TFG_OP_STATE, NULL, 0, NULL);
  tfg_node *s = tfg_graph_node(c->g, id);
  s->name = name;
  s->dtype = dt;
  s->shape = shape;
  s->attrs.init = TFG_INIT_ZEROS;
  return id;
}

/* The update attrs of optimizer o and schedule s (their arguments were
 * checked where the calls are written). */
static void update_attrs(const tfg_optimizer_config *o, const tfg_lr_schedule *s, tfg_attrs *ua) {
  memset(ua, 0, sizeof *ua);
  ua->opt.lr = o->lr;
  ua->opt.lr_kind = (int)s->kind;
  ua->opt.warmup = s->warmup;
  ua->opt.total = s->total;
  ua->opt.min = s->min;
  ua->opt.every = s->every;
  ua->opt.gamma = s->gamma;
  ua->opt.weight_decay = o->weight_decay;
  if (o->kind == TFG_OPTIMIZER_SGD) {
    ua->opt.momentum = o->momentum;
    ua->opt.nesterov = o->nesterov;
  } else {
    ua->opt.beta1 = o->b1;
    ua->opt.beta2 = o->b2;
    ua->opt.eps = o->eps;
    ua->opt.decoupled = o->kind == TFG_OPTIMIZER_ADAMW;
  }
}

/* x cast to dt, or x itself when it has that dtype. */
static tfg_node_id as_dtype(ad *c, tfg_node_id x, tfg_dtype dt) {
  if (node(c, x)->dtype == dt) return x;
  tfg_attrs to = {.dtype = dt};
  return add(c, TFG_OP_CAST, &x, 1, &to);
}

/* clip_grad_norm: grads[0..n) scaled as torch.nn.utils.clip_grad_norm_
 * does, by min(1, max / (norm + 1e-6)), norm the 2-norm of all of them
 * together, into out. The squares are summed per gradient in its dtype,
 * the sums and the coefficient in f64 (a model of f32 and f64 params
 * has one norm), the coefficient cast back to each gradient's dtype. */
tfg_node_id tfg_autodiff_sumsq(tfg_graph *g, tfg_diag *d, const tfg_node_id *grads, int n) {
  ad c = {.g = g, .diag = d};
  at(&c, grads[0]);
  tfg_node_id total = -1;
  for (int i = 0; i < n; i++) {
    tfg_attrs all = {.iv_none = true};
    tfg_node_id sq = op2(&c, TFG_OP_MUL, grads[i], grads[i]);
    tfg_node_id s = add(&c, TFG_OP_SUM, &sq, 1, &all);
    if (node(&c, s)->dtype != TFG_DTYPE_F64) {
      tfg_attrs to = {.dtype = TFG_DTYPE_F64};
      s = add(&c, TFG_OP_CAST, &s, 1, &to);
    }
    total = total < 0 ? s : op2(&c, TFG_OP_ADD, total, s);
  }
  return total;
}

void tfg_autodiff_clip(tfg_graph *g, tfg_diag *d, double max, const tfg_node_id *grads, int n, tfg_node_id *out) {
  tfg_autodiff_clip_by(g, d, max, tfg_autodiff_sumsq(g, d, grads, n), 1.0, grads, n, out);
}

void tfg_autodiff_clip_by(tfg_graph *g, tfg_diag *d, double max, tfg_node_id total, double factor,
                          const tfg_node_id *grads, int n, tfg_node_id *out) {
  ad c = {.g = g, .diag = d};
  at(&c, total);
  if (factor != 1.0) total = op2(&c, TFG_OP_MUL, total, scalar(&c, factor, TFG_DTYPE_F64));
  tfg_node_id norm = op1(&c, TFG_OP_SQRT, total);
  tfg_node_id coef = op2(&c, TFG_OP_DIV, scalar(&c, max, TFG_DTYPE_F64),
                         op2(&c, TFG_OP_ADD, norm, scalar(&c, 1e-6, TFG_DTYPE_F64)));
  coef = op2(&c, TFG_OP_MINIMUM, coef, scalar(&c, 1.0, TFG_DTYPE_F64));
  for (int i = 0; i < n; i++) {
    at(&c, grads[i]); /* each scaled gradient where its gradient is */
    out[i] = op2(&c, TFG_OP_MUL, grads[i], as_dtype(&c, coef, node(&c, grads[i])->dtype));
  }
}

void tfg_autodiff_accumulate(tfg_graph *g, int k, const tfg_node_id *params, tfg_node_id *grads, int n,
                             tfg_node_id *accs, tfg_node_id *first, tfg_node_id *add_to, tfg_diag *d) {
  for (int i = 0; i < n; i++) {
    ad c = {.g = g, .diag = d};
    at(&c, params[i]); /* where the param and its update are */
    const tfg_node param = g->nodes[params[i]];
    accs[i] = add_state(&c, &param, "grad_acc");
    tfg_node_id in[2] = {accs[i], grads[i]};
    tfg_attrs set = {.value = 0}, sum = {.value = 1};
    first[i] = add(&c, TFG_OP_GRAD_ACCUMULATE, in, 2, &set);
    add_to[i] = add(&c, TFG_OP_GRAD_ACCUMULATE, in, 2, &sum);
    /* the mean as (sum) / k, as a loss averaged over the k x batch has it */
    grads[i] = op2(&c, TFG_OP_DIV, op2(&c, TFG_OP_ADD, accs[i], grads[i]), scalar(&c, (double)k, param.dtype));
  }
}

/* The accumulation of a single step's gradients (accumulate = k > 1) into
 * st's arrays (tfg_autodiff_accumulate). */
static void accumulate_step(tfg_graph *g, int k, tfg_train_step *st, tfg_node_id *grads, int n, tfg_diag *d) {
  st->accumulate = k > 1 ? k : 1;
  if (k <= 1) return;
  st->accs = malloc(sizeof *st->accs * (size_t)(n + 1));
  st->acc_first = malloc(sizeof *st->acc_first * (size_t)(n + 1));
  st->acc_add = malloc(sizeof *st->acc_add * (size_t)(n + 1));
  TFG_ASSERT(st->accs && st->acc_first && st->acc_add);
  tfg_autodiff_accumulate(g, k, st->params, grads, n, st->accs, st->acc_first, st->acc_add, d);
}

/* An f32 scalar STATE named name, filled with v at the start. */
static tfg_node_id scalar_state(ad *c, const char *name, double v) {
  tfg_attrs init = {.init = v == 0 ? TFG_INIT_ZEROS : TFG_INIT_FULL, .value = v};
  tfg_node_id id = add(c, TFG_OP_STATE, NULL, 0, &init);
  tfg_node *s = tfg_graph_node(c->g, id);
  s->name = name;
  s->dtype = TFG_DTYPE_F32;
  s->shape.rank = 0;
  return id;
}

tfg_node_id tfg_autodiff_scale_loss(tfg_graph *g, tfg_node_id loss, tfg_amp *amp) {
  ad c = {.g = g};
  at(&c, loss);
  if (!amp->made) {
    amp->scale = scalar_state(&c, "grad_scaler:scale", TFG_AMP_INIT_SCALE);
    amp->tracker = scalar_state(&c, "grad_scaler:growth_tracker", 0);
    amp->skipped = scalar_state(&c, "grad_scaler:skipped", 0);
    amp->update = -1;
    amp->made = true;
  }
  tfg_node_id k = amp->scale;
  tfg_dtype dt = node(&c, loss)->dtype;
  if (dt != TFG_DTYPE_F32) {
    tfg_attrs to = {.dtype = dt};
    k = add(&c, TFG_OP_CAST, &k, 1, &to);
  }
  return op2(&c, TFG_OP_MUL, loss, k);
}

/* The scaler's part of a step (tfg_amp): grads[0..n) times 1 / scale into
 * out, the flag that they are all finite (a bool scalar: the sum of each
 * times 0 is 0 unless one is Inf or NaN), and the AMP_UPDATE that moves
 * the scale by it, beside the scale. Returns the flag. */
static tfg_node_id unscale(tfg_graph *g, tfg_diag *d, tfg_amp *amp, const tfg_node_id *grads, int n, tfg_node_id *out) {
  ad c = {.g = g, .diag = d};
  at(&c, amp->scale);
  tfg_attrs f64 = {.dtype = TFG_DTYPE_F64}, f32 = {.dtype = TFG_DTYPE_F32};
  tfg_node_id s64 = add(&c, TFG_OP_CAST, &amp->scale, 1, &f64);
  tfg_node_id inv64 = op2(&c, TFG_OP_DIV, scalar(&c, 1.0, TFG_DTYPE_F64), s64);
  tfg_node_id inv = add(&c, TFG_OP_CAST, &inv64, 1, &f32); /* PyTorch: scale.double().reciprocal().float() */
  tfg_node_id total = -1;
  for (int i = 0; i < n; i++) {
    at(&c, grads[i]);
    tfg_dtype dt = node(&c, grads[i])->dtype;
    out[i] = op2(&c, TFG_OP_MUL, grads[i], as_dtype(&c, inv, dt));
    tfg_attrs all = {.iv_none = true};
    tfg_node_id z = op2(&c, TFG_OP_MUL, out[i], scalar(&c, 0.0, dt));
    z = add(&c, TFG_OP_SUM, &z, 1, &all);
    if (dt != TFG_DTYPE_F64) z = add(&c, TFG_OP_CAST, &z, 1, &f64);
    total = total < 0 ? z : op2(&c, TFG_OP_ADD, total, z);
  }
  at(&c, amp->scale);
  tfg_node_id finite = total < 0 ? add(&c, TFG_OP_EQUAL, (tfg_node_id[]){s64, s64}, 2, NULL)
                                 : op2(&c, TFG_OP_EQUAL, total, total); /* NaN != NaN */
  tfg_node_id in[4] = {amp->scale, finite, amp->tracker, amp->skipped};
  amp->update = add(&c, TFG_OP_AMP_UPDATE, in, 4, NULL);
  return finite;
}

tfg_status tfg_autodiff_updates(tfg_graph *g, const tfg_action *a, const tfg_node_id *params, const tfg_node_id *grads,
                                int n, tfg_amp *amp, tfg_node_id *updates, tfg_node_id *states, int *nstates,
                                tfg_diag *d) {
  tfg_node_id *clipped = NULL, *unscaled = NULL, finite = -1;
  if (amp) {
    unscaled = malloc(sizeof *unscaled * (size_t)(n + 1));
    TFG_ASSERT(unscaled != NULL);
    finite = unscale(g, d, amp, grads, n, unscaled);
    grads = unscaled;
  }
  if (a->config.clip_grad_norm > 0 && n > 0) {
    clipped = malloc(sizeof *clipped * (size_t)n);
    TFG_ASSERT(clipped != NULL);
    tfg_autodiff_clip(g, d, a->config.clip_grad_norm, grads, n, clipped);
    grads = clipped;
  }
  tfg_attrs ua;
  update_attrs(&a->config.optimizer, &a->config.lr_schedule, &ua);
  bool sgd = a->config.optimizer.kind == TFG_OPTIMIZER_SGD;
  double wd = ua.opt.weight_decay;
  for (int i = 0; i < n; i++) {
    ad c = {.g = g, .diag = d};
    tfg_node_id pid = params[i];
    at(&c, pid);
    const tfg_node param = g->nodes[pid];
    /* no_decay: a param whose name matches a pattern gets weight_decay 0 */
    ua.opt.weight_decay = wd;
    for (int k = 0; k < a->config.nno_decay && param.name; k++)
      if (fnmatch(a->config.no_decay[k], param.name, 0) == 0) ua.opt.weight_decay = 0;
    if (sgd) {
      /* The momentum buffer exists only with momentum, as in PyTorch;
       * without, the kernel never reads its third input. */
      tfg_node_id buf = grads[i];
      if (ua.opt.momentum != 0) {
        buf = add_state(&c, &param, "momentum_buffer");
        states[(*nstates)++] = buf;
      }
      tfg_node_id in[5] = {pid, grads[i], buf, finite, amp ? amp->skipped : -1};
      updates[i] = add(&c, TFG_OP_SGD_UPDATE, in, amp ? 5 : 3, &ua);
    } else {
      tfg_node_id m = add_state(&c, &param, "exp_avg");
      tfg_node_id v = add_state(&c, &param, "exp_avg_sq");
      states[(*nstates)++] = m;
      states[(*nstates)++] = v;
      tfg_node_id in[6] = {pid, grads[i], m, v, finite, amp ? amp->skipped : -1};
      updates[i] = add(&c, TFG_OP_ADAM_UPDATE, in, amp ? 6 : 4, &ua);
    }
  }
  free(clipped);
  free(unscaled);
  return TFG_OK;
}

tfg_status tfg_autodiff_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_switches *sw,
                                   tfg_train_step *out, tfg_diag *d) {
  memset(out, 0, sizeof *out);
  const tfg_train_config *c = &a->config;
  if (c->metrics) {
    out->nmetrics = c->nmetrics;
    out->metrics = malloc(sizeof *out->metrics * (size_t)(c->nmetrics + 1));
    out->replica_metrics = malloc(sizeof *out->replica_metrics * (size_t)(c->nmetrics + 1));
    TFG_ASSERT(out->metrics && out->replica_metrics);
    for (int k = 0; k < c->nmetrics; k++) out->metrics[k] = out->replica_metrics[k] = c->metrics[k];
  }
  out->optimizer = tfg_optimizer_name(c->optimizer.kind);
  out->loss = a->loss;
  out->nreplicas = 1;
  out->losses = malloc(sizeof *out->losses);
  TFG_ASSERT(out->losses != NULL);
  out->losses[0] = a->loss;

  /* The params this loss trains. */
  tfg_node_id *grads = malloc(sizeof *grads * (size_t)(p->nparams + 1));
  TFG_ASSERT(grads != NULL);
  cuts cut = {0};
  tfg_amp amp = {0}, *scaler = c->precision == TFG_DTYPE_F16 ? &amp : NULL;
  tfg_node_id loss = scaler ? tfg_autodiff_scale_loss(g, a->loss, scaler) : a->loss;
  differentiate(g, loss, p->params, p->nparams, grads, sw, &cut, NULL);
  out->params = malloc(sizeof *out->params * (size_t)(p->nparams + 1));
  out->updates = malloc(sizeof *out->updates * (size_t)(p->nparams + 1));
  out->states = malloc(sizeof *out->states * (size_t)(2 * p->nparams + 1));
  TFG_ASSERT(out->params && out->updates && out->states);
  int n = 0;
  for (int i = 0; i < p->nparams; i++)
    if (grads[i] >= 0) {
      out->params[n] = p->params[i];
      grads[n++] = grads[i];
    }
  out->nparams = out->nupdates = n;
  if (n == 0) warn_untrained(g, a, &cut, d);
  accumulate_step(g, c->accumulate, out, grads, n, d);
  tfg_status st =
      tfg_autodiff_updates(g, a, out->params, grads, n, scaler, out->updates, out->states, &out->nstates, d);
  TFG_ASSERT(st == TFG_OK);
  if (scaler) {
    out->nscalers = 1;
    out->scalers = malloc(sizeof *out->scalers);
    TFG_ASSERT(out->scalers != NULL);
    out->scalers[0] = amp.update;
  }
  free(grads);
  return TFG_OK;
}

/* Every id of ids[0..n) through map (NULL ids: none). */
static void remap(tfg_node_id *ids, int n, const tfg_node_id *map) {
  for (int i = 0; ids && i < n; i++) ids[i] = map[ids[i]];
}

void tfg_train_step_remap(tfg_train_step *st, const tfg_node_id *map) {
  int W = st->nreplicas, P = st->nparams;
  st->loss = map[st->loss];
  remap(st->params, P, map);
  remap(st->updates, st->nupdates, map);
  remap(st->states, st->nstates, map);
  remap(st->metrics, st->nmetrics, map);
  remap(st->losses, W, map);
  remap(st->replica_metrics, W * st->nmetrics, map);
  remap(st->mirror_src, st->nmirrors, map);
  remap(st->mirror_dst, st->nmirrors, map);
  remap(st->worker_grads, W * P, map);
  remap(st->worker_params, W * P, map);
  remap(st->grad_inputs, P, map);
  remap(st->accs, st->nupdates, map);
  remap(st->acc_first, st->nupdates, map);
  remap(st->acc_add, st->nupdates, map);
  remap(st->scalers, st->nscalers, map);
  remap(st->staged, st->nstaged, map);
  remap(st->state_shards, st->nstates * st->local_shards, map);
  remap(st->state_param, st->nstates, map);
}

tfg_node_id tfg_autodiff_part(tfg_graph *g, tfg_node_id loss, int k) {
  if (k == 1) return loss;
  ad c = {.g = g};
  at(&c, loss);
  return op2(&c, TFG_OP_DIV, loss, scalar(&c, (double)k, g->nodes[loss].dtype));
}

void tfg_autodiff_micro_sum(tfg_graph *g, int k, const tfg_node_id *params, const tfg_node_id *grads, int stride,
                            int n, tfg_node_id *out, tfg_train_step *st) {
  if (k > 1) {
    st->staged = realloc(st->staged, sizeof *st->staged * ((size_t)st->nstaged + (size_t)n * (size_t)k));
    TFG_ASSERT(st->staged != NULL);
  }
  for (int i = 0; i < n; i++) {
    out[i] = grads[i];
    if (k == 1) continue;
    ad c = {.g = g};
    at(&c, params[i]); /* where the param and its update are */
    for (int m = 1; m < k; m++) {
      out[i] = op2(&c, TFG_OP_ADD, out[i], grads[m * stride + i]);
      if (m < k - 1) st->staged[st->nstaged++] = out[i]; /* the last sum is the gradient itself */
    }
  }
}

void tfg_train_step_explain(tfg_train_step *st, const char *lines, bool first) {
  tfg_strbuf b = {0};
  const char *old = st->explain ? st->explain : "";
  tfg_strbuf_printf(&b, "%s%s", first ? lines : old, first ? old : lines);
  free(st->explain);
  st->explain = tfg_strbuf_take(&b);
}

void tfg_train_step_free(tfg_train_step *st) {
  free(st->params);
  free(st->updates);
  free(st->states);
  free(st->metrics);
  free(st->losses);
  free(st->replica_metrics);
  free(st->mirror_src);
  free(st->mirror_dst);
  free(st->worker_grads);
  free(st->worker_params);
  free(st->grad_inputs);
  free(st->accs);
  free(st->acc_first);
  free(st->acc_add);
  free(st->scalers);
  free(st->staged);
  free(st->state_shards);
  free(st->state_param);
  free(st->explain);
  free(st->pipe_unit);
  memset(st, 0, sizeof *st);
}
