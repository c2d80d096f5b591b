/* tests/unit/test_kernels_half.c: every op x dtype the op's shape rule
 * accepts runs on the CPU (issue 13, item 9), and the f16/bf16 kernels
 * (kernels/cpu/half.c) against f64 references.
 *
 * op_dtype_coverage walks the op registry: for each op with a CPU kernel
 * a small case (inputs, attrs, built through the op's own shape rule as
 * a program builds it) per dtype; a dtype the shape rule accepts must run
 * (the ops autodiff builds, "" signature, only for the float dtypes, the
 * ones autodiff builds them for). An op with a CPU kernel and no case here
 * is a failure, so a new op cannot be forgotten.
 *
 * half_vs_f64 runs each case in f16 and bf16 and again in f64 on the same
 * values (the 16-bit inputs widened, exactly) and compares the results,
 * element by element, |got - ref| <= ulp/2 + slack, ulp being the output
 * dtype's spacing at ref:
 *   - elementwise ops: slack 8 u32 |ref| (u32 = 2^-24): the kernels compute
 *     in f32 and round once, so the error is half an ulp of the 16-bit
 *     format plus the f32 formula's own (glibc's expf, logf, tanhf, powf
 *     are within 1 ulp of f32, sigmoid and rsqrt a few roundings: at most
 *     4 ulp = 8 u32 relative); + - * / sqrt are then exact roundings;
 *   - everything else (sums, products, rows, losses, gradients, updates):
 *     slack 2^-14 max|ref| over the tensor: these run f32 kernels whose
 *     sums of at most ~100 terms err by ~100 u32 (2^-17) of the terms'
 *     magnitudes, which the output's largest bounds up to a factor 8 of
 *     cancellation here; 2^-14 is still a quarter ulp of f16 (2^-8 of
 *     bf16) at that scale, so a wrong formula or a lost term (errors of
 *     the values' own size) cannot pass.
 * Integer and bool outputs (argmax, comparisons) must be equal. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/rng.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "tests/unit/unit.h"

enum { MAXIN = 6 };

/* An input's values: uniform floats in [-2, 2] (or [0.25, 2] when
 * positive), or integer ids in [0, lim). */
typedef struct hin {
  tfg_node_id id;
  char role; /* 'f' float, 'p' positive float, 'i' ids */
  int64_t lim;
} hin;

typedef struct hcase {
  tfg_dtype dt;
  tfg_graph *g;
  tfg_diag *d;
  int nin;
  hin in[MAXIN];
  tfg_node_id node;
  bool refused, elementwise;
  uint32_t inplace; /* inputs the op updates, compared too */
} hcase;

#define SH(...) ((tfg_shape){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}})

static tfg_node_id h_in(hcase *c, char role, tfg_shape s, int64_t lim) {
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(c->g, TFG_OP_INPUT, NULL, 0, &loc);
  tfg_node *n = tfg_graph_node(c->g, id);
  n->dtype = role == 'i' ? TFG_DTYPE_I32 : c->dt;
  n->shape = s;
  n->name = "x";
  c->in[c->nin++] = (hin){id, role, lim};
  return id;
}

static tfg_node_id h_op(hcase *c, tfg_op_id op, tfg_attrs a, int n, const tfg_node_id *ins) {
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(c->g, op, ins, n, &loc);
  tfg_node *nd = tfg_graph_node(c->g, id);
  nd->attrs = a;
  if (!c->refused && tfg_op_get(op)->infer(c->g, nd, c->d) != TFG_OK) c->refused = true;
  c->node = id;
  return id;
}
#define OP(c, op, a, ...) \
  h_op(c, op, a, (int)(sizeof((tfg_node_id[]){__VA_ARGS__}) / sizeof(tfg_node_id)), (tfg_node_id[]){__VA_ARGS__})

static tfg_attrs iv(int n, const int64_t *v) {
  tfg_attrs a = {.niv = n};
  for (int i = 0; i < n; i++) a.iv[i] = v[i];
  return a;
}

/* Builds op's case in dtype dt; false when there is none. The ops
 * autodiff builds take their attrs from the forward node, as it does. */
static bool build(hcase *c, tfg_op_id op) {
  tfg_attrs none = {0};
  tfg_shape s23 = SH(5, 7), s4 = SH(2, 3, 6, 6);
  switch (op) {
  case TFG_OP_NEG: case TFG_OP_EXP: case TFG_OP_ABS: case TFG_OP_RELU: case TFG_OP_GELU:
  case TFG_OP_TANH: case TFG_OP_SIGMOID:
    c->elementwise = true;
    OP(c, op, none, h_in(c, 'f', s23, 0));
    return true;
  case TFG_OP_LOG: case TFG_OP_SQRT: case TFG_OP_RSQRT:
    c->elementwise = true;
    OP(c, op, none, h_in(c, 'p', s23, 0));
    return true;
  case TFG_OP_CAST: {
    c->elementwise = true;
    tfg_attrs a = {.dtype = TFG_DTYPE_F32};
    OP(c, op, a, h_in(c, 'f', s23, 0));
    return true;
  }
  case TFG_OP_ADD: case TFG_OP_SUB: case TFG_OP_MUL: case TFG_OP_DIV: case TFG_OP_MAXIMUM:
  case TFG_OP_MINIMUM: case TFG_OP_EQUAL: case TFG_OP_GREATER:
    c->elementwise = true;
    OP(c, op, none, h_in(c, 'f', s23, 0), h_in(c, 'f', SH(7), 0)); /* b broadcast along rows */
    return true;
  case TFG_OP_POW:
    c->elementwise = true;
    OP(c, op, none, h_in(c, 'p', s23, 0), h_in(c, 'f', SH(5, 1), 0));
    return true;
  case TFG_OP_WHERE: {
    tfg_node_id a = h_in(c, 'f', s23, 0), b = h_in(c, 'f', s23, 0);
    c->elementwise = true;
    OP(c, op, none, OP(c, TFG_OP_GREATER, none, a, b), a, b);
    return true;
  }
  case TFG_OP_MATMUL: {
    tfg_attrs a = {.transpose_b = true};
    OP(c, op, a, h_in(c, 'f', SH(2, 4, 9), 0), h_in(c, 'f', SH(5, 9), 0));
    return true;
  }
  case TFG_OP_SUM: case TFG_OP_MEAN: case TFG_OP_MAX: {
    tfg_attrs a = iv(1, (int64_t[]){1});
    OP(c, op, a, h_in(c, 'f', SH(3, 300, 4), 0)); /* 300: over a 256-element block */
    return true;
  }
  case TFG_OP_ARGMAX: {
    tfg_attrs a = {.axis = 0};
    OP(c, op, a, h_in(c, 'f', s23, 0));
    return true;
  }
  case TFG_OP_RESHAPE: OP(c, op, iv(2, (int64_t[]){7, 5}), h_in(c, 'f', s23, 0)); return true;
  case TFG_OP_FLATTEN: OP(c, op, none, h_in(c, 'f', s4, 0)); return true;
  case TFG_OP_TRANSPOSE: {
    tfg_attrs a = {.iv_none = true};
    OP(c, op, a, h_in(c, 'f', s23, 0));
    return true;
  }
  case TFG_OP_CONCAT: OP(c, op, none, h_in(c, 'f', s23, 0), h_in(c, 'f', SH(2, 7), 0)); return true;
  case TFG_OP_SLICE: {
    tfg_attrs a = {.axis = 1, .start = 2, .end = 6};
    OP(c, op, a, h_in(c, 'f', s23, 0));
    return true;
  }
  case TFG_OP_BROADCAST: OP(c, op, iv(3, (int64_t[]){2, 5, 7}), h_in(c, 'f', SH(5, 1), 0)); return true;
  case TFG_OP_SOFTMAX: case TFG_OP_LOG_SOFTMAX: {
    tfg_attrs a = {.axis = 1}; /* not the last axis: lines are strided */
    OP(c, op, a, h_in(c, 'f', SH(3, 10, 4), 0));
    return true;
  }
  case TFG_OP_CROSS_ENTROPY: case TFG_OP_ACCURACY:
    OP(c, op, none, h_in(c, 'f', SH(6, 5), 0), h_in(c, 'i', SH(6), 5));
    return true;
  case TFG_OP_CROSS_ENTROPY_GRAD:
    OP(c, op, none, h_in(c, 'f', SH(6, 5), 0), h_in(c, 'i', SH(6), 5), h_in(c, 'f', SH(1), 0));
    return true;
  case TFG_OP_MSE: OP(c, op, none, h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0)); return true;
  case TFG_OP_CONV2D: case TFG_OP_CONV2D_GRAD_INPUT: case TFG_OP_CONV2D_GRAD_WEIGHT: {
    tfg_attrs a = {.stride = {2, 2}, .pad_mode = TFG_PAD_SAME};
    tfg_node_id x = h_in(c, 'f', s4, 0), w = h_in(c, 'f', SH(4, 3, 3, 3), 0);
    tfg_node_id y = OP(c, TFG_OP_CONV2D, a, x, w);
    if (op == TFG_OP_CONV2D || c->refused) return true;
    const tfg_node *yn = tfg_graph_node(c->g, y);
    tfg_shape t = op == TFG_OP_CONV2D_GRAD_INPUT ? s4 : SH(4, 3, 3, 3);
    tfg_attrs g = yn->attrs;
    g.niv = t.rank;
    for (int i = 0; i < t.rank; i++) g.iv[i] = t.dim[i];
    tfg_node_id dy = h_in(c, 'f', yn->shape, 0);
    if (op == TFG_OP_CONV2D_GRAD_INPUT) OP(c, op, g, dy, w);
    else OP(c, op, g, x, dy);
    return true;
  }
  case TFG_OP_MAX_POOL: case TFG_OP_AVG_POOL: case TFG_OP_MAX_POOL_GRAD: case TFG_OP_AVG_POOL_GRAD: {
    bool is_max = op == TFG_OP_MAX_POOL || op == TFG_OP_MAX_POOL_GRAD;
    tfg_attrs a = {.size = {3, 3}, .stride = {2, 2}}; /* overlapping windows */
    tfg_node_id x = h_in(c, 'f', s4, 0);
    tfg_node_id y = OP(c, is_max ? TFG_OP_MAX_POOL : TFG_OP_AVG_POOL, a, x);
    if (op == TFG_OP_MAX_POOL || op == TFG_OP_AVG_POOL || c->refused) return true;
    const tfg_node *yn = tfg_graph_node(c->g, y);
    tfg_attrs g = yn->attrs;
    tfg_node_id dy = h_in(c, 'f', yn->shape, 0);
    if (is_max) {
      OP(c, op, g, x, dy);
    } else {
      g.niv = 4;
      for (int i = 0; i < 4; i++) g.iv[i] = s4.dim[i];
      OP(c, op, g, dy);
    }
    return true;
  }
  case TFG_OP_LAYER_NORM: case TFG_OP_LAYER_NORM_GRAD: {
    tfg_attrs a = {.value = 1e-5};
    tfg_node_id x = h_in(c, 'f', SH(4, 33), 0), gm = h_in(c, 'p', SH(33), 0);
    if (op == TFG_OP_LAYER_NORM) OP(c, op, a, x, gm, h_in(c, 'f', SH(33), 0));
    else OP(c, op, a, x, gm, h_in(c, 'f', SH(4, 33), 0));
    return true;
  }
  case TFG_OP_ATTENTION: case TFG_OP_ATTENTION_PROBS: case TFG_OP_ATTENTION_GRAD: {
    tfg_attrs a = {.causal = true, .value = 0.5, .axis = 1}; /* the gradient: k's */
    tfg_node_id q = h_in(c, 'f', SH(2, 5, 4), 0), k = h_in(c, 'f', SH(2, 7, 4), 0);
    if (op == TFG_OP_ATTENTION) OP(c, op, a, q, k, h_in(c, 'f', SH(2, 7, 3), 0));
    else if (op == TFG_OP_ATTENTION_GRAD) OP(c, op, a, q, k, h_in(c, 'f', SH(2, 7, 3), 0), h_in(c, 'f', SH(2, 5, 3), 0));
    else OP(c, op, a, q, k);
    return true;
  }
  case TFG_OP_DROPOUT: {
    tfg_attrs a = {.value = 0.25, .seed = 11};
    c->elementwise = true;
    OP(c, op, a, h_in(c, 'f', SH(40, 30), 0));
    return true;
  }
  case TFG_OP_EMBEDDING: OP(c, op, none, h_in(c, 'f', SH(6, 4), 0), h_in(c, 'i', SH(2, 5), 6)); return true;
  case TFG_OP_EMBEDDING_GRAD: {
    tfg_attrs a = {.n = 6};
    OP(c, op, a, h_in(c, 'i', SH(2, 5), 6), h_in(c, 'f', SH(2, 5, 4), 0));
    return true;
  }
  case TFG_OP_ONE_HOT: {
    tfg_attrs a = {.n = 4};
    OP(c, op, a, h_in(c, 'i', SH(3, 2), 4));
    return true;
  }
  case TFG_OP_RELU_GRAD: case TFG_OP_GELU_GRAD:
    OP(c, op, none, h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0));
    return true;
  case TFG_OP_SGD_UPDATE: {
    tfg_attrs a = {.opt = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}};
    OP(c, op, a, h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0));
    c->inplace = 0x5;
    return true;
  }
  case TFG_OP_GRAD_ACCUMULATE: {
    tfg_attrs a = {.value = 1};
    OP(c, op, a, h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0));
    c->inplace = 0x1;
    return true;
  }
  case TFG_OP_ADAM_UPDATE: {
    tfg_attrs a = {.opt = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .decoupled = true}};
    OP(c, op, a, h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0), h_in(c, 'f', s23, 0), h_in(c, 'p', s23, 0));
    c->inplace = 0xD;
    return true;
  }
  default: return false;
  }
}

/* Ops with a CPU kernel that are not run here: CONST (the executor copies
 * its payload), INIT (init_half below), FUSED (its chains are tested in
 * test_fuse.c), ALLREDUCE, REDUCE_SCATTER and ALL_GATHER (copies of any dtype), AMP_UPDATE (f32 and bool
 * scalars only, never 16-bit: test_kernels_grad.c), SEND and RECV (bytes
 * to and from another rank: tests/mpi.sh). */
static bool skipped(tfg_op_id op) {
  return op == TFG_OP_CONST || op == TFG_OP_INIT || op == TFG_OP_FUSED || tfg_op_bucketed(op) ||
         op == TFG_OP_AMP_UPDATE || op == TFG_OP_SEND || op == TFG_OP_RECV;
}

static hcase case_new(tfg_op_id op, tfg_dtype dt, bool *has) {
  hcase c = {.dt = dt, .g = tfg_graph_new(), .d = tfg_diag_new()};
  *has = build(&c, op);
  return c;
}

static void case_free(hcase *c) {
  tfg_graph_free(c->g);
  tfg_diag_free(c->d);
}

/* Input k's values for dtype dt, from a stream fixed by k (so the f64
 * run gets the f16/bf16 run's values: `as` the dtype they are rounded
 * to first). */
static tfg_tensor make_input(const hcase *c, int k, tfg_dtype dt, tfg_dtype as) {
  const tfg_node *n = tfg_graph_node(c->g, c->in[k].id);
  tfg_tensor t = {.dtype = c->in[k].role == 'i' ? TFG_DTYPE_I32 : dt, .shape = n->shape};
  int64_t cnt = tfg_shape_numel(&n->shape);
  t.data = calloc((size_t)(cnt ? cnt : 1), 8);
  ck_assert_ptr_nonnull(t.data);
  for (int64_t i = 0; i < cnt; i++) {
    double u = tfg_rng_uniform(tfg_rng_mix(100 + (uint64_t)k), (uint64_t)i);
    if (c->in[k].role == 'i') {
      ((int32_t *)t.data)[i] = (int32_t)(u * (double)c->in[k].lim);
      continue;
    }
    double v = c->in[k].role == 'p' ? 0.25 + 1.75 * u : -2 + 4 * u;
    if (as == TFG_DTYPE_F16) v = tfg_cast_f16_to_f64(tfg_cast_f64_to_f16(v));
    else if (as == TFG_DTYPE_BF16) v = tfg_cast_bf16_to_f64(tfg_cast_f64_to_bf16(v));
    switch (t.dtype) {
    case TFG_DTYPE_F64: ((double *)t.data)[i] = v; break;
    case TFG_DTYPE_F32: ((float *)t.data)[i] = (float)v; break;
    case TFG_DTYPE_F16: ((uint16_t *)t.data)[i] = tfg_cast_f64_to_f16(v); break;
    case TFG_DTYPE_BF16: ((uint16_t *)t.data)[i] = tfg_cast_f64_to_bf16(v); break;
    case TFG_DTYPE_I32: ((int32_t *)t.data)[i] = (int32_t)floor(v * 3); break;
    case TFG_DTYPE_I64: ((int64_t *)t.data)[i] = (int64_t)floor(v * 3); break;
    default: ((uint8_t *)t.data)[i] = v > 0; break;
    }
  }
  return t;
}

/* Runs the case's node on inputs made in dtype dt (values rounded to
 * `as`); returns the kernel's status, the output in *out (and the inputs,
 * updated in place, in ins). */
static tfg_status run(const hcase *c, tfg_dtype dt, tfg_dtype as, tfg_tensor *ins, tfg_tensor *out, char *msg,
                      size_t cap) {
  const tfg_node *nd = tfg_graph_node(c->g, c->node);
  tfg_tensor t[MAXIN];
  for (int k = 0; k < nd->ninputs; k++) {
    int at = -1;
    for (int q = 0; q < c->nin; q++)
      if (c->in[q].id == nd->inputs[k]) at = q;
    if (at >= 0) {
      t[k] = make_input(c, at, dt, as);
    } else { /* where's condition: the greater node of its two inputs */
      t[k] = (tfg_tensor){.dtype = TFG_DTYPE_BOOL, .shape = tfg_graph_node(c->g, nd->inputs[k])->shape};
      int64_t cnt = tfg_shape_numel(&t[k].shape);
      t[k].data = malloc((size_t)cnt);
      for (int64_t i = 0; i < cnt; i++) ((uint8_t *)t[k].data)[i] = (uint8_t)(i % 3 == 0);
    }
  }
  tfg_node n = *nd;
  tfg_dtype odt = nd->dtype == c->dt ? dt : nd->dtype;
  *out = (tfg_tensor){.dtype = odt, .shape = nd->shape};
  int64_t cnt = tfg_shape_numel(&nd->shape);
  out->data = calloc((size_t)(cnt ? cnt : 1), 8);
  tfg_kernel_ctx ctx = {.training = true, .step = 1, .seed = 3, .node = -1};
  tfg_status st = tfg_cpu_kernel(nd->op)(&ctx, &n, t, out);
  if (st != TFG_OK && msg) snprintf(msg, cap, "%s", ctx.err.data ? ctx.err.data : "");
  tfg_strbuf_free(&ctx.err);
  for (int k = 0; k < nd->ninputs; k++) {
    if (ins) ins[k] = t[k];
    else free(t[k].data);
  }
  return st;
}

static double value_at(const tfg_tensor *t, int64_t i) {
  switch (t->dtype) {
  case TFG_DTYPE_F64: return ((double *)t->data)[i];
  case TFG_DTYPE_F32: return ((float *)t->data)[i];
  case TFG_DTYPE_F16: return tfg_cast_f16_to_f64(((uint16_t *)t->data)[i]);
  case TFG_DTYPE_BF16: return tfg_cast_bf16_to_f64(((uint16_t *)t->data)[i]);
  case TFG_DTYPE_I32: return ((int32_t *)t->data)[i];
  case TFG_DTYPE_I64: return (double)((int64_t *)t->data)[i];
  default: return ((uint8_t *)t->data)[i];
  }
}

/* The spacing of dtype dt's values at |v| (subnormal spacing below). */
static double ulp_at(tfg_dtype dt, double v) {
  int mbits = dt == TFG_DTYPE_F16 ? 10 : dt == TFG_DTYPE_BF16 ? 7 : dt == TFG_DTYPE_F32 ? 23 : 52;
  int emin = dt == TFG_DTYPE_F16 ? -14 : dt == TFG_DTYPE_F64 ? -1022 : -126;
  int e;
  frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
  e -= 1;
  if (e < emin || v == 0) e = emin;
  return ldexp(1.0, e - mbits);
}

/* Compares got (dtype of the 16-bit run) with ref (the f64 run); the
 * number of elements outside the tolerance, the worst described in msg. */
static int64_t compare(const hcase *c, const tfg_tensor *got, const tfg_tensor *ref, char *msg, size_t cap) {
  int64_t n = tfg_shape_numel(&ref->shape), bad = 0;
  bool exact = !tfg_dtype_is_float(got->dtype);
  double scale = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(value_at(ref, i)));
  for (int64_t i = 0; i < n; i++) {
    double g = value_at(got, i), r = value_at(ref, i);
    if ((g != g && r != r) || g == r) continue;
    double tol = exact ? 0 : 0.5 * ulp_at(got->dtype, r) + (c->elementwise ? 8 * 0x1p-24 * fabs(r) : 0x1p-14 * scale);
    if (!(fabs(g - r) <= tol)) {
      if (!bad) snprintf(msg, cap, "element %lld: %.9g, f64 reference %.9g (tolerance %.3g)", (long long)i, g, r, tol);
      bad++;
    }
  }
  return bad;
}

static const tfg_dtype ALL[] = {TFG_DTYPE_F32, TFG_DTYPE_F64, TFG_DTYPE_F16, TFG_DTYPE_BF16,
                                TFG_DTYPE_I32, TFG_DTYPE_I64, TFG_DTYPE_BOOL};

/* Every op with a CPU kernel has a case, and every dtype its shape rule
 * accepts runs. */
START_TEST(op_dtype_coverage) {
  int accepted = 0, failures = 0;
  for (int op = 0; op < TFG_OP_COUNT; op++) {
    const tfg_op_def *def = tfg_op_get((tfg_op_id)op);
    if (!tfg_cpu_kernel(op) || skipped((tfg_op_id)op)) continue;
    bool built_only = def->sig[0] == '\0'; /* autodiff's: float dtypes only */
    for (size_t d = 0; d < sizeof ALL / sizeof ALL[0]; d++) {
      if (built_only && !tfg_dtype_is_float(ALL[d])) continue;
      bool has;
      hcase c = case_new((tfg_op_id)op, ALL[d], &has);
      if (!has) {
        fprintf(stderr, "op_dtype_coverage: no case for %s\n", def->name);
        failures++;
        case_free(&c);
        break;
      }
      if (!c.refused) {
        char msg[256] = "";
        tfg_tensor out, ins[MAXIN];
        tfg_status st = run(&c, ALL[d], ALL[d], ins, &out, msg, sizeof msg);
        accepted++;
        if (st != TFG_OK) {
          fprintf(stderr, "op_dtype_coverage: %s on %s passes its shape rule, fails on the CPU: %s\n", def->name,
                  tfg_dtype_name(ALL[d]), msg);
          failures++;
        }
        for (int k = 0; k < tfg_graph_node(c.g, c.node)->ninputs; k++) free(ins[k].data);
        free(out.data);
      }
      case_free(&c);
    }
  }
  ck_assert_int_eq(failures, 0);
  ck_assert_int_gt(accepted, 100);
}
END_TEST

/* f16 and bf16 against f64 on the same values, per the tolerances atop. */
START_TEST(half_vs_f64) {
  int failures = 0, compared = 0;
  for (int op = 0; op < TFG_OP_COUNT; op++) {
    const tfg_op_def *def = tfg_op_get((tfg_op_id)op);
    if (!tfg_cpu_kernel(op) || skipped((tfg_op_id)op)) continue;
    for (int h = 0; h < 2; h++) {
      tfg_dtype dt = h ? TFG_DTYPE_BF16 : TFG_DTYPE_F16;
      bool has;
      hcase c = case_new((tfg_op_id)op, dt, &has);
      if (!has || c.refused) {
        case_free(&c);
        continue;
      }
      char msg[256] = "";
      tfg_tensor got, ref, gin[MAXIN], rin[MAXIN];
      tfg_status st = run(&c, dt, dt, gin, &got, msg, sizeof msg);
      tfg_status sr = run(&c, TFG_DTYPE_F64, dt, rin, &ref, NULL, 0);
      ck_assert_msg(st == TFG_OK && sr == TFG_OK, "%s on %s: %s", def->name, tfg_dtype_name(dt), msg);
      int64_t bad = c.inplace ? 0 : compare(&c, &got, &ref, msg, sizeof msg);
      int ninputs = tfg_graph_node(c.g, c.node)->ninputs;
      for (int k = 0; k < ninputs; k++)
        if (c.inplace >> k & 1) bad += compare(&c, &gin[k], &rin[k], msg, sizeof msg);
      if (bad) {
        fprintf(stderr, "half_vs_f64: %s on %s: %lld elements off, first %s\n", def->name, tfg_dtype_name(dt),
                (long long)bad, msg);
        failures++;
      }
      compared++;
      for (int k = 0; k < ninputs; k++) {
        free(gin[k].data);
        free(rin[k].data);
      }
      free(got.data);
      free(ref.data);
      case_free(&c);
    }
  }
  ck_assert_int_eq(failures, 0);
  ck_assert_int_gt(compared, 70);
}
END_TEST

/* The block conversions (F16C on x86) and the portable f32 ones of
 * kernels/cast_math.h equal the f64 conversions cast uses: every f16 and
 * bf16 widened, and f32 values spread over every exponent (a stride
 * through the 2^32 patterns, plus values next to f16 rounding ties)
 * rounded. */
START_TEST(half_block_conversions) {
  static uint16_t h[65536];
  static float f[65536];
  for (int dtk = 0; dtk < 2; dtk++) {
    tfg_dtype dt = dtk ? TFG_DTYPE_BF16 : TFG_DTYPE_F16;
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    tfg_cpu_half_load(dt, h, f, 65536);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
      double want = dtk ? tfg_cast_bf16_to_f64(h[i]) : tfg_cast_f16_to_f64(h[i]);
      float one = dtk ? tfg_cast_bf16_to_f32(h[i]) : tfg_cast_f16_to_f32(h[i]); /* the portable path */
      bad += !(f[i] == want || (f[i] != f[i] && want != want)) + !(one == want || (one != one && want != want));
      bad += f[i] != f[i] && memcmp(&f[i], &one, 4) != 0; /* NaN payloads: the same bits either way */
    }
    ck_assert_int_eq(bad, 0);
    for (uint64_t base = 0; base < (1ull << 32); base += 65536ull * 251) {
      for (uint32_t i = 0; i < 65536; i++) {
        uint32_t u = (uint32_t)(base + (uint64_t)i * 65521u);
        if (i < 4096) u = (uint32_t)((base >> 16) << 16) | ((i & 1) ? 0x1000u : 0x0FFFu) | (i << 20); /* near f16 ties */
        memcpy(&f[i], &u, 4);
      }
      tfg_cpu_half_store(dt, f, h, 65536);
      for (uint32_t i = 0; i < 65536; i++) {
        uint16_t want = dtk ? tfg_cast_f64_to_bf16(f[i]) : tfg_cast_f64_to_f16(f[i]);
        uint16_t one = dtk ? tfg_cast_f32_to_bf16(f[i]) : tfg_cast_f32_to_f16(f[i]); /* the portable path */
        bad += (h[i] != want) + (one != want);
      }
    }
    ck_assert_int_eq(bad, 0);
  }
}
END_TEST

/* INIT and param fills in f16/bf16: every initializer, each value the f64
 * fill's rounded once. */
START_TEST(init_half) {
  static const tfg_init_kind kinds[] = {TFG_INIT_ZEROS, TFG_INIT_ONES, TFG_INIT_FULL, TFG_INIT_NORMAL,
                                        TFG_INIT_UNIFORM, TFG_INIT_GLOROT, TFG_INIT_HE};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (int dtk = 0; dtk < 2; dtk++) {
      tfg_attrs a = {.init = kinds[k], .value = 2.5, .a = -1, .b = 3, .seed = 5};
      tfg_tensor h = {.dtype = dtk ? TFG_DTYPE_BF16 : TFG_DTYPE_F16, .shape = SH(30, 20)};
      tfg_tensor d = {.dtype = TFG_DTYPE_F64, .shape = h.shape};
      h.data = calloc(600, 2);
      d.data = calloc(600, 8);
      ck_assert_int_eq(tfg_cpu_init_fill(&h, &a), TFG_OK);
      ck_assert_int_eq(tfg_cpu_init_fill(&d, &a), TFG_OK);
      int bad = 0;
      for (int i = 0; i < 600; i++) {
        double v = ((double *)d.data)[i];
        uint16_t want = dtk ? tfg_cast_f64_to_bf16(v) : tfg_cast_f64_to_f16(v);
        bad += ((uint16_t *)h.data)[i] != want;
      }
      ck_assert_msg(bad == 0, "init kind %d on %s: %d values differ", (int)kinds[k], tfg_dtype_name(h.dtype), bad);
      free(h.data);
      free(d.data);
    }
}
END_TEST

/* A pool splits f16 elementwise and reduction work (the block scratch per
 * chunk): the results equal the single-threaded ones bit for bit. */
START_TEST(half_pool_split) {
  tfg_pool *pool = tfg_pool_new(2);
  int64_t n = 200003;
  tfg_tensor x = {.dtype = TFG_DTYPE_F16, .shape = SH(n)}, y1 = x, y2 = x;
  x.data = malloc((size_t)n * 2);
  y1.data = malloc((size_t)n * 2);
  y2.data = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++)
    ((uint16_t *)x.data)[i] = tfg_cast_f64_to_f16(tfg_rng_uniform(9, (uint64_t)i) * 4 - 2);
  tfg_node nd = {.op = TFG_OP_TANH, .dtype = TFG_DTYPE_F16, .shape = x.shape, .ninputs = 1};
  tfg_kernel_ctx c1 = {0}, c2 = {.pool = pool};
  ck_assert_int_eq(tfg_cpu_unary(&c1, &nd, &x, &y1), TFG_OK);
  ck_assert_int_eq(tfg_cpu_unary(&c2, &nd, &x, &y2), TFG_OK);
  ck_assert(memcmp(y1.data, y2.data, (size_t)n * 2) == 0);
  tfg_node sum = {.op = TFG_OP_SUM, .dtype = TFG_DTYPE_F16, .shape = {0}, .ninputs = 1};
  sum.attrs.axes = 1;
  uint16_t s1, s2;
  tfg_tensor o1 = {&s1, TFG_DTYPE_F16, {0}}, o2 = {&s2, TFG_DTYPE_F16, {0}};
  ck_assert_int_eq(tfg_cpu_reduce(&c1, &sum, &x, &o1), TFG_OK);
  ck_assert_int_eq(tfg_cpu_reduce(&c2, &sum, &x, &o2), TFG_OK);
  ck_assert_int_eq(s1, s2);
  double want = 0;
  for (int64_t i = 0; i < n; i++) want += tfg_cast_f16_to_f64(((uint16_t *)x.data)[i]);
  ck_assert_int_eq(s1, tfg_cast_f64_to_f16(want)); /* the double sum of exact values, rounded once */
  free(x.data);
  free(y1.data);
  free(y2.data);
  tfg_pool_free(pool);
}
END_TEST

/* Added to the kernels_basic suite (tests/unit/test_kernels_basic.c). */
TCase *tcase_kernels_half(void);
TCase *tcase_kernels_half(void) {
  TCase *tc = tcase_create("half");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, op_dtype_coverage);
  tcase_add_test(tc, half_vs_f64);
  tcase_add_test(tc, half_block_conversions);
  tcase_add_test(tc, init_half);
  tcase_add_test(tc, half_pool_split);
  return tc;
}
