/* tests/unit/test_kernels_nn.c: the CPU kernels of kernels/cpu/linalg.c,
 * nn.c and conv.c: matmul, softmax/log_softmax, cross_entropy, mse,
 * layer_norm, dropout, embedding, one_hot, accuracy, conv2d and pools.
 *
 * Nodes are filled in directly (no graph): a kernel reads only op, attrs
 * and the tensors. Each kernel gets small hand-computed cases with exact
 * expected values, and the math kernels are also compared, in f32 and
 * f64, against plain reference loops here that accumulate in long double
 * (so the reference's own error is far below the tolerances; every
 * tolerance is the kernel's error bound with some margin, derived where
 * it is used). Tolerances are written in units of the dtype's unit
 * roundoff u: 2^-24 for f32, 2^-53 for f64. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "tests/unit/tensors.h"
#include "tests/unit/unit.h"

/* ---- helpers --------------------------------------------------------- */

/* Uniform in [lo, hi) from stream seed; rounded to the tensor's dtype,
 * so the references below see exactly the kernel's inputs. */
static void fill(tfg_tensor *t, uint64_t seed, double lo, double hi) {
  for (int64_t i = 0; i < numel(t); i++)
    set(t, i, lo + (hi - lo) * tfg_rng_uniform(seed, (uint64_t)i));
}

/* Unit roundoff of a float dtype. */
static double unit_roundoff(tfg_dtype dt) { return dt == TFG_DTYPE_F32 ? 0x1p-24 : 0x1p-53; }

static tfg_node mknode(tfg_op_id op, const tfg_tensor *out, int ninputs) {
  tfg_node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.dtype = out->dtype;
  n.shape = out->shape;
  n.ninputs = ninputs;
  return n;
}

static char last_err[512];

/* Runs kernel fn with a fresh context; the error message, if any, is left
 * in last_err. */
static tfg_status run(tfg_kernel_fn fn, const tfg_node *n, const tfg_tensor *in, tfg_tensor *out,
                      tfg_pool *pool, bool training) {
  tfg_kernel_ctx ctx = {.pool = pool, .training = training};
  tfg_status st = fn(&ctx, n, in, out);
  snprintf(last_err, sizeof last_err, "%s", ctx.err.data ? ctx.err.data : "");
  tfg_strbuf_free(&ctx.err);
  return st;
}

static void ck_ok(tfg_status st) {
  ck_assert_msg(st == TFG_OK, "kernel failed (%s): %s", tfg_status_str(st), last_err);
}

/* Asserts |got[i] - want[i]| <= tol[i] for every element. */
static void ck_close(const tfg_tensor *got, const double *want, const double *tol, const char *what) {
  for (int64_t i = 0; i < numel(got); i++) {
    double g = get(got, i);
    ck_assert_msg(fabs(g - want[i]) <= tol[i], "%s [%lld]: got %.17g, want %.17g (tol %.3g)", what,
                  (long long)i, g, want[i], tol[i]);
  }
}

/* Asserts got equals want exactly (the values are representable). */
static void ck_exact(const tfg_tensor *got, const double *want, const char *what) {
  for (int64_t i = 0; i < numel(got); i++)
    ck_assert_msg(get(got, i) == want[i], "%s [%lld]: got %.17g, want %.17g", what, (long long)i,
                  get(got, i), want[i]);
}


/* ---- hand-computed cases ------------------------------------------------ */

/* A hand case's tensor: dtype (VAR: the dtype the case runs in), shape,
 * and values (NULL: zeros). */
#define VAR TFG_DTYPE_COUNT
typedef struct hand_tensor {
  tfg_dtype dt;
  tfg_shape s;
  const double *v;
} hand_tensor;

/* One kernel on inputs written out by hand, whose exact result is want
 * (every value representable). It runs twice: VAR is f32 then f64, or
 * with ids, i32 then i64. out.v is what the output holds before the
 * kernel runs, where every element must be overwritten. */
typedef struct hand_case {
  const char *what;
  tfg_kernel_fn fn;
  tfg_op_id op;
  tfg_attrs attrs;
  bool ids;
  int nin;
  hand_tensor in[3], out;
  const double *want;
} hand_case;

#define V(...) ((const double[]){__VA_ARGS__})
#define SHP(...) {(int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), {__VA_ARGS__}}

static const hand_case HAND[] = {
    {"a @ b", tfg_cpu_matmul, TFG_OP_MATMUL, {0}, false, 2,
     {{VAR, SHP(2, 3), V(1, 2, 3, 4, 5, 6)}, {VAR, SHP(3, 2), V(7, 8, 9, 10, 11, 12)}},
     {VAR, SHP(2, 2), NULL}, V(58, 64, 139, 154)},
    /* transpose_a with a stored as [3, 2] = a^T: the same product */
    {"a^T @ b", tfg_cpu_matmul, TFG_OP_MATMUL, {.transpose_a = true}, false, 2,
     {{VAR, SHP(3, 2), V(1, 4, 2, 5, 3, 6)}, {VAR, SHP(3, 2), V(7, 8, 9, 10, 11, 12)}},
     {VAR, SHP(2, 2), NULL}, V(58, 64, 139, 154)},
    {"K = 0 gives zeros", tfg_cpu_matmul, TFG_OP_MATMUL, {0}, false, 2,
     {{TFG_DTYPE_F32, SHP(2, 0), NULL}, {TFG_DTYPE_F32, SHP(0, 3), NULL}},
     {TFG_DTYPE_F32, SHP(2, 3), V(7, 7, 7, 7, 7, 7)}, V(0, 0, 0, 0, 0, 0)},
    /* (0 + 4 + 0 + 16) / 4 */
    {"mse", tfg_cpu_mse, TFG_OP_MSE, {0}, false, 2,
     {{VAR, SHP(2, 2), V(1, 2, 3, 4)}, {VAR, SHP(2, 2), V(1, 0, 3, 0)}}, {VAR, {0, {0}}, NULL}, V(5)},
    /* 5 and -1 are out of range: zero rows; every element must be written */
    {"one_hot", tfg_cpu_one_hot, TFG_OP_ONE_HOT, {.n = 3}, true, 1, {{VAR, SHP(2, 2), V(0, 2, 5, -1)}},
     {TFG_DTYPE_F32, SHP(2, 2, 3), V(9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9)},
     V(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0)},
    /* argmax (first maximum): 2, 0, 1, 0, 1; labels right in rows 0, 1, 4 */
    {"accuracy", tfg_cpu_accuracy, TFG_OP_ACCURACY, {0}, false, 2,
     {{VAR, SHP(5, 3), V(1, 2, 3, 3, 3, 1, 0, 5, 5, 1, 0, 0, -1, 0, -1)},
      {TFG_DTYPE_I32, SHP(5), V(2, 0, 2, 1, 1)}},
     {TFG_DTYPE_F32, {0, {0}}, NULL}, V((double)0.6f)},
    /* a 3x3 box sum with padding 1: the sums of each 3x3 neighbourhood */
    {"box sum", tfg_cpu_conv2d, TFG_OP_CONV2D, {.stride = {1, 1}, .pad = {1, 1, 1, 1}}, false, 2,
     {{VAR, SHP(1, 1, 3, 3), V(1, 2, 3, 4, 5, 6, 7, 8, 9)},
      {VAR, SHP(1, 1, 3, 3), V(1, 1, 1, 1, 1, 1, 1, 1, 1)}},
     {VAR, SHP(1, 1, 3, 3), NULL}, V(12, 21, 16, 27, 45, 33, 24, 39, 28)},
    /* kernel [[1, 2], [3, 4]], no padding: a correlation (not flipped),
     * as PyTorch and TensorFlow compute it */
    {"2x2 correlation", tfg_cpu_conv2d, TFG_OP_CONV2D, {.stride = {1, 1}}, false, 2,
     {{VAR, SHP(1, 1, 3, 3), V(1, 2, 3, 4, 5, 6, 7, 8, 9)}, {VAR, SHP(1, 1, 2, 2), V(1, 2, 3, 4)}},
     {VAR, SHP(1, 1, 2, 2), NULL}, V(37, 47, 67, 77)},
    /* stride 2 with padding top 1, left 1 only: output positions (-1,-1),
     * (-1, 1), (1, -1), (1, 1) of the window's top-left corner */
    {"stride 2, padded top-left", tfg_cpu_conv2d, TFG_OP_CONV2D, {.stride = {2, 2}, .pad = {1, 0, 1, 0}},
     false, 2,
     {{VAR, SHP(1, 1, 3, 3), V(1, 2, 3, 4, 5, 6, 7, 8, 9)}, {VAR, SHP(1, 1, 2, 2), V(1, 2, 3, 4)}},
     {VAR, SHP(1, 1, 2, 2), NULL}, V(4 * 1, 3 * 2 + 4 * 3, 2 * 4 + 4 * 7, 1 * 5 + 2 * 6 + 3 * 8 + 4 * 9)},
    {"max_pool", tfg_cpu_pool, TFG_OP_MAX_POOL, {.size = {2, 2}, .stride = {2, 2}}, false, 1,
     {{VAR, SHP(1, 1, 4, 4), V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)}},
     {VAR, SHP(1, 1, 2, 2), NULL}, V(6, 8, 14, 16)},
    {"avg_pool", tfg_cpu_pool, TFG_OP_AVG_POOL, {.size = {2, 2}, .stride = {2, 2}}, false, 1,
     {{VAR, SHP(1, 1, 4, 4), V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)}},
     {VAR, SHP(1, 1, 2, 2), NULL}, V(3.5, 5.5, 11.5, 13.5)},
};

static tfg_tensor hand_tensor_new(const hand_tensor *h, tfg_dtype var) {
  tfg_tensor t = tnew(h->dt == VAR ? var : h->dt, h->s);
  if (h->v) set_all(&t, h->v);
  return t;
}

/* HAND[_i] in both of its dtypes (once where it has no VAR). */
START_TEST(hand_cases) {
  const hand_case *h = &HAND[_i];
  static const tfg_dtype IDS[2] = {TFG_DTYPE_I32, TFG_DTYPE_I64};
  bool varies = h->out.dt == VAR;
  for (int k = 0; k < h->nin; k++) varies |= h->in[k].dt == VAR;
  for (int d = 0; d < (varies ? 2 : 1); d++) {
    tfg_dtype var = h->ids ? IDS[d] : FLOATS[d];
    tfg_tensor in[3];
    for (int k = 0; k < h->nin; k++) in[k] = hand_tensor_new(&h->in[k], var);
    tfg_tensor out = hand_tensor_new(&h->out, var);
    tfg_node n = mknode(h->op, &out, h->nin);
    n.attrs = h->attrs;
    ck_ok(run(h->fn, &n, in, &out, NULL, false));
    ck_exact(&out, h->want, h->what);
    free_all(in, h->nin);
    free(out.data);
  }
}
END_TEST

#undef V
#undef SHP

/* ---- matmul ---------------------------------------------------------- */

/* out = op(a) @ op(b) with broadcast batch dims, accumulated in long
 * double; scale[i] = sum_k |a_ik b_kj|, the size of the sum's terms. */
static void ref_matmul(const tfg_tensor *a, const tfg_tensor *b, bool ta, bool tb,
                       const tfg_shape *os, double *ref, double *scale) {
  int ro = os->rank, nbatch = ro - 2, ra = a->shape.rank, rb = b->shape.rank;
  int64_t m = os->dim[ro - 2], n = os->dim[ro - 1];
  int64_t k = ta ? a->shape.dim[ra - 2] : a->shape.dim[ra - 1];
  int64_t nmat = tfg_shape_numel(os) / (m * n);
  for (int64_t bi = 0; bi < nmat; bi++) {
    int64_t idx[TFG_MAX_RANK], rest = bi;
    for (int d = nbatch - 1; d >= 0; d--) {
      idx[d] = rest % os->dim[d];
      rest /= os->dim[d];
    }
    int64_t ai = 0, bj = 0;
    for (int d = 0; d < nbatch; d++) {
      int da = d - (nbatch - (ra - 2)), db = d - (nbatch - (rb - 2));
      if (da >= 0) ai = ai * a->shape.dim[da] + (a->shape.dim[da] == 1 ? 0 : idx[d]);
      if (db >= 0) bj = bj * b->shape.dim[db] + (b->shape.dim[db] == 1 ? 0 : idx[d]);
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        long double s = 0, sc = 0;
        for (int64_t t = 0; t < k; t++) {
          double av = get(a, ai * m * k + (ta ? t * m + i : i * k + t));
          double bv = get(b, bj * k * n + (tb ? j * k + t : t * n + j));
          s += (long double)av * bv;
          sc += fabsl((long double)av * bv);
        }
        ref[(bi * m + i) * n + j] = (double)s;
        scale[(bi * m + i) * n + j] = (double)sc;
      }
  }
}

/* An operand's stored shape: batch dims, then the matrix [r, c], or
 * [c, r] when transposed. */
static tfg_shape operand(int nbatch, const int *batch, int64_t r, int64_t c, bool t) {
  tfg_shape s = {.rank = nbatch + 2};
  for (int i = 0; i < nbatch; i++) s.dim[i] = batch[i];
  s.dim[nbatch] = t ? c : r;
  s.dim[nbatch + 1] = t ? r : c;
  return s;
}

/* Compares one configuration against ref_matmul, without a pool and on
 * one (which splits big products into blocks, one gemm each, and so may
 * round differently: kernels/cpu/blas.h); a second run on the pool must
 * give the same bits (the split depends on the shapes and threads only).
 * Tolerance: a dot product of K terms computed in any order, with or
 * without FMA, is off by at most gamma_K * sum |a_ik b_kj|, gamma_K =
 * K u / (1 - K u) (Higham, Accuracy and Stability, 3.1); we allow 2 K u
 * times that scale. The inputs are exact in both computations. */
static void check_matmul(tfg_dtype dt, int m, int k, int n, bool ta, bool tb, int nba,
                         const int *ba, int nbb, const int *bb, tfg_pool *pool) {
  tfg_tensor in[2] = {tnew(dt, operand(nba, ba, m, k, ta)), tnew(dt, operand(nbb, bb, k, n, tb))};
  fill(&in[0], 11, -1, 1);
  fill(&in[1], 12, -1, 1);
  tfg_shape os = {.rank = (nba > nbb ? nba : nbb) + 2};
  int nbo = os.rank - 2;
  for (int d = 0; d < nbo; d++) {
    int da = d - (nbo - nba), db = d - (nbo - nbb);
    int64_t x = da >= 0 ? ba[da] : 1, y = db >= 0 ? bb[db] : 1;
    os.dim[d] = x > y ? x : y;
  }
  os.dim[nbo] = m;
  os.dim[nbo + 1] = n;
  tfg_tensor out = tnew(dt, os), out2 = tnew(dt, os);
  tfg_node nd = mknode(TFG_OP_MATMUL, &out, 2);
  nd.attrs.transpose_a = ta;
  nd.attrs.transpose_b = tb;
  tfg_tensor out3 = tnew(dt, os);
  ck_ok(run(tfg_cpu_matmul, &nd, in, &out, NULL, false));
  ck_ok(run(tfg_cpu_matmul, &nd, in, &out2, pool, false));
  ck_ok(run(tfg_cpu_matmul, &nd, in, &out3, pool, false));
  int64_t total = numel(&out);
  ck_assert_int_eq(memcmp(out2.data, out3.data, (size_t)total * tfg_dtype_size(dt)), 0);
  double *ref = malloc(sizeof *ref * (size_t)total), *tol = malloc(sizeof *tol * (size_t)total);
  ref_matmul(&in[0], &in[1], ta, tb, &os, ref, tol);
  for (int64_t i = 0; i < total; i++) tol[i] = 2.0 * k * unit_roundoff(dt) * tol[i] + 1e-300;
  ck_close(&out, ref, tol, "matmul");
  ck_close(&out2, ref, tol, "matmul on a pool");
  free(out3.data);
  free(ref);
  free(tol);
  free(out.data);
  free(out2.data);
  free_all(in, 2);
}

START_TEST(matmul_random_transposes_and_batches) {
  /* batch configurations: (a's batch dims, b's batch dims) */
  static const int b21[] = {2, 1}, b3[] = {3}, b23[] = {2, 3}, b4[] = {4};
  struct { int na; const int *a; int nb; const int *b; } cfg[] = {
      {0, NULL, 0, NULL}, /* plain 2-D */
      {2, b21, 1, b3},    /* [2,1] x [3] -> [2,3]: both broadcast */
      {0, NULL, 2, b23},  /* a shared by every batch */
      {2, b23, 0, NULL},  /* b shared: one tall gemm unless transpose_a */
      {1, b4, 1, b4},     /* plain batch */
  };
  for (int t = 0; t < 4; t++)
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
      check_matmul(FLOATS[_i], 5, 7, 3, t & 1, t >> 1, cfg[c].na, cfg[c].a, cfg[c].nb, cfg[c].b,
                   test_pool);
}
END_TEST

/* Products big enough that OpenBLAS threads them (the batch loop stays
 * on the caller), K = 96. */
START_TEST(matmul_large_batched) {
  static const int b21[] = {2, 1}, b3[] = {3};
  check_matmul(FLOATS[_i], 80, 96, 72, true, false, 2, b21, 1, b3, test_pool);
  check_matmul(FLOATS[_i], 130, 96, 70, false, true, 1, b3, 0, NULL, test_pool);
}
END_TEST

/* (K = 0 is a hand case.) */
START_TEST(matmul_bad_dtype) {
  tfg_tensor ii[2] = {tnew(TFG_DTYPE_I32, shp(2, 2, 2)), tnew(TFG_DTYPE_I32, shp(2, 2, 2))};
  tfg_tensor io = tnew(TFG_DTYPE_I32, shp(2, 2, 2));
  tfg_node n = mknode(TFG_OP_MATMUL, &io, 2);
  ck_assert_int_eq(run(tfg_cpu_matmul, &n, ii, &io, NULL, false), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(last_err, "i32"));
  free_all(ii, 2);
  free(io.data);
}
END_TEST

/* ---- softmax, log_softmax --------------------------------------------- */

START_TEST(softmax_hand_and_stability) {
  tfg_dtype dt = FLOATS[_i];
  double u = unit_roundoff(dt);
  tfg_tensor x = tnew(dt, shp(2, 4, 2)), y = tnew(dt, shp(2, 4, 2));
  /* rows: [0, ln 3] -> [1/4, 3/4]; [1000, 1000]; [1000, -1000]; [-1000, -1000] */
  set_all(&x, (double[]){0, log(3.0), 1000, 1000, 1000, -1000, -1000, -1000});
  tfg_node n = mknode(TFG_OP_SOFTMAX, &y, 1);
  n.attrs.axis = 1;
  ck_ok(run(tfg_cpu_softmax, &n, &x, &y, NULL, false));
  /* row 0: ln 3 is rounded to the dtype, so 3 is off by a few u */
  double tol0[8] = {4 * u, 4 * u, 0, 0, 0, 0, 0, 0};
  ck_close(&y, (double[]){0.25, 0.75, 0.5, 0.5, 1, 0, 0.5, 0.5}, tol0, "softmax");
  n.op = TFG_OP_LOG_SOFTMAX;
  ck_ok(run(tfg_cpu_softmax, &n, &x, &y, NULL, false));
  /* -ln 2 is not representable: within one rounding */
  double l2 = log(2.0);
  double tol1[8] = {8 * u, 8 * u, 2 * u, 2 * u, 0, 0, 2 * u, 2 * u};
  ck_close(&y, (double[]){-log(4.0), log(0.75), -l2, -l2, 0, -2000, -l2, -l2}, tol1,
           "log_softmax");
  for (int64_t i = 0; i < 8; i++) ck_assert(isfinite(get(&y, i)));
  free(x.data);
  free(y.data);
}
END_TEST

/* Reference softmax along axis 1 of [A, L, B], in long double. */
static void ref_softmax(const tfg_tensor *x, bool lg, double *ref) {
  int64_t A = x->shape.dim[0], L = x->shape.dim[1], B = x->shape.dim[2];
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++) {
      long double s = 0;
      for (int64_t l = 0; l < L; l++) s += expl((long double)get(x, (a * L + l) * B + b));
      for (int64_t l = 0; l < L; l++) {
        long double v = get(x, (a * L + l) * B + b);
        ref[(a * L + l) * B + b] = (double)(lg ? v - logl(s) : expl(v) / s);
      }
    }
}

/* Along a middle axis, logits in [-3, 3). Error: x - m is rounded (at
 * most 6u absolute, so a relative 6u on exp(x - m)), exp itself < 1 ulp,
 * the denominator inherits the same relative error, and the result is
 * rounded once more: about 15u relative on softmax. log_softmax adds
 * absolute errors of the same size: (x - m) within 6u, log(sum) within
 * 8u, a final rounding of u|y|. We allow 32u (relative, resp. absolute
 * times 1 + |y|). */
START_TEST(softmax_random_middle_axis) {
  for (int lg = 0; lg < 2; lg++) {
    tfg_dtype dt = FLOATS[_i];
    double u = unit_roundoff(dt);
    tfg_tensor x = tnew(dt, shp(3, 6, 5, 7)), y = tnew(dt, shp(3, 6, 5, 7));
    fill(&x, 21, -3, 3);
    tfg_node n = mknode(lg ? TFG_OP_LOG_SOFTMAX : TFG_OP_SOFTMAX, &y, 1);
    n.attrs.axis = 1;
    ck_ok(run(tfg_cpu_softmax, &n, &x, &y, test_pool, false));
    double ref[210], tol[210];
    ref_softmax(&x, lg, ref);
    for (int i = 0; i < 210; i++) tol[i] = 32 * u * (lg ? 1 + fabs(ref[i]) : ref[i]);
    ck_close(&y, ref, tol, lg ? "log_softmax" : "softmax");
    free(x.data);
    free(y.data);
  }
}
END_TEST

START_TEST(softmax_bad_dtype) {
  tfg_tensor x = tnew(TFG_DTYPE_I32, shp(1, 4)), y = tnew(TFG_DTYPE_I32, shp(1, 4));
  tfg_node n = mknode(TFG_OP_SOFTMAX, &y, 1);
  ck_assert_int_eq(run(tfg_cpu_softmax, &n, &x, &y, NULL, false), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(last_err, "i32"));
  free(x.data);
  free(y.data);
}
END_TEST

/* ---- attention --------------------------------------------------------- */

/* attention and attention_probs against a long double reference over
 * [B, Tq, hd] x [B, Tk, hd] x [B, Tk, hdv], causal or not, across the
 * kernel's 32-row query blocks, Tq below and above Tk. Error: a score
 * q.k carries the gemm's bound (2 hd u sum |q k|) and the scale's
 * rounding, which exp turns into that relative error of its term (and of
 * the denominator: twice); the output is a gemm over the probabilities
 * (2 Tk u sum p |v|) and p's own rounding. The bound: (2 (2 hd u sum|qk|
 * scale + 2u) + 4u) sum p |v| + 2 Tk u sum p |v|, per element. */
static const struct att_case {
  int64_t b, tq, tk, hd, hdv;
  bool causal;
  double scale; /* 0: the default 1 / sqrt(hd) */
} ATT[] = {
    {2, 5, 5, 4, 6, true, 0},     {3, 40, 70, 8, 3, false, 0.3}, {1, 70, 40, 5, 5, true, 0},
    {2, 33, 33, 16, 8, true, 0},  {1, 1, 1, 1, 1, true, 0},      {2, 3, 9, 2, 4, true, 1.5},
};
#define NATT (int)(sizeof ATT / sizeof ATT[0])

START_TEST(attention_random_vs_reference) {
  const struct att_case *c = &ATT[_i / 2];
  tfg_dtype dt = FLOATS[_i % 2];
  double u = unit_roundoff(dt), scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->hd);
  tfg_tensor in[3] = {tnew(dt, shp(3, (int)c->b, (int)c->tq, (int)c->hd)),
                      tnew(dt, shp(3, (int)c->b, (int)c->tk, (int)c->hd)),
                      tnew(dt, shp(3, (int)c->b, (int)c->tk, (int)c->hdv))};
  for (int k = 0; k < 3; k++) fill(&in[k], 40 + (uint64_t)k, -1, 1);
  tfg_tensor o = tnew(dt, shp(3, (int)c->b, (int)c->tq, (int)c->hdv));
  tfg_tensor pr = tnew(dt, shp(3, (int)c->b, (int)c->tq, (int)c->tk));
  tfg_node n = mknode(TFG_OP_ATTENTION, &o, 3), np = mknode(TFG_OP_ATTENTION_PROBS, &pr, 2);
  n.attrs.causal = np.attrs.causal = c->causal;
  n.attrs.value = np.attrs.value = scale;
  ck_ok(run(tfg_cpu_kernel(TFG_OP_ATTENTION), &n, in, &o, test_pool, false));
  ck_ok(run(tfg_cpu_kernel(TFG_OP_ATTENTION_PROBS), &np, in, &pr, test_pool, false));
  int64_t no = numel(&o), np_ = numel(&pr);
  double *want = malloc(sizeof *want * (size_t)no), *tol = malloc(sizeof *tol * (size_t)no);
  double *pwant = malloc(sizeof *pwant * (size_t)np_), *ptol = malloc(sizeof *ptol * (size_t)np_);
  long double *p = malloc(sizeof *p * (size_t)c->tk);
  for (int64_t b = 0; b < c->b; b++)
    for (int64_t i = 0; i < c->tq; i++) {
      int64_t vis = c->causal ? (i + 1 < c->tk ? i + 1 : c->tk) : c->tk;
      long double m = -INFINITY, sum = 0, sqk = 0;
      for (int64_t j = 0; j < vis; j++) {
        long double s = 0, a = 0;
        for (int64_t t = 0; t < c->hd; t++) {
          long double x = get(&in[0], (b * c->tq + i) * c->hd + t) * (long double)get(&in[1], (b * c->tk + j) * c->hd + t);
          s += x;
          a += fabsl(x);
        }
        p[j] = s * scale;
        if (p[j] > m) m = p[j];
        if (a > sqk) sqk = a;
      }
      for (int64_t j = 0; j < vis; j++) sum += p[j] = expl(p[j] - m);
      double rel = 2 * (2 * c->hd * u * (double)sqk * scale + 2 * u) + 4 * u;
      for (int64_t j = 0; j < c->tk; j++) {
        int64_t at = (b * c->tq + i) * c->tk + j;
        pwant[at] = j < vis ? (double)(p[j] / sum) : 0;
        ptol[at] = rel * pwant[at] + 1e-300;
      }
      for (int64_t e = 0; e < c->hdv; e++) {
        long double acc = 0, mag = 0;
        for (int64_t j = 0; j < vis; j++) {
          long double vj = get(&in[2], (b * c->tk + j) * c->hdv + e);
          acc += p[j] / sum * vj;
          mag += p[j] / sum * fabsl(vj);
        }
        int64_t at = (b * c->tq + i) * c->hdv + e;
        want[at] = (double)acc;
        tol[at] = (rel + 2 * (double)c->tk * u) * (double)mag + 1e-300;
      }
    }
  ck_close(&o, want, tol, "attention");
  ck_close(&pr, pwant, ptol, "attention_probs");
  free_all(in, 3);
  free(o.data);
  free(pr.data);
  free(want);
  free(tol);
  free(pwant);
  free(ptol);
  free(p);
}
END_TEST

/* No keys: the output is zeros (an empty sum), not NaN. */
START_TEST(attention_no_keys) {
  tfg_tensor in[3] = {tnew(TFG_DTYPE_F32, shp(3, 2, 3, 4)), tnew(TFG_DTYPE_F32, shp(3, 2, 0, 4)),
                      tnew(TFG_DTYPE_F32, shp(3, 2, 0, 5))};
  fill(&in[0], 1, -1, 1);
  tfg_tensor o = tnew(TFG_DTYPE_F32, shp(3, 2, 3, 5));
  set(&o, 0, 7.0);
  tfg_node n = mknode(TFG_OP_ATTENTION, &o, 3);
  n.attrs.value = 0.5;
  ck_ok(run(tfg_cpu_kernel(TFG_OP_ATTENTION), &n, in, &o, test_pool, false));
  for (int64_t i = 0; i < numel(&o); i++) ck_assert(get(&o, i) == 0);
  free_all(in, 3);
  free(o.data);
}
END_TEST

/* ---- cross_entropy ---------------------------------------------------- */

START_TEST(cross_entropy_hand) {
  for (int li = 0; li < 2; li++) {
    tfg_dtype dt = FLOATS[_i], lt = li ? TFG_DTYPE_I64 : TFG_DTYPE_I32;
    double u = unit_roundoff(dt);
    tfg_tensor in[2] = {tnew(dt, shp(2, 2, 2)), tnew(lt, shp(1, 2))};
    tfg_tensor out = tnew(dt, shp(0));
    tfg_node n = mknode(TFG_OP_CROSS_ENTROPY, &out, 2);
    /* row 0: softmax [1/4, 3/4], label 0: ln 4; row 1: [1/2, 1/2]: ln 2 */
    set_all(&in[0], (double[]){0, log(3.0), 0, 0});
    set_all(&in[1], (double[]){0, 1});
    ck_ok(run(tfg_cpu_cross_entropy, &n, in, &out, NULL, false));
    ck_close(&out, (double[]){1.5 * log(2.0)}, (double[]){8 * u}, "cross_entropy");
    /* logits of +-1000: losses 0 and 2000, mean 1000 exactly */
    set_all(&in[0], (double[]){1000, -1000, 1000, -1000});
    set_all(&in[1], (double[]){0, 1});
    ck_ok(run(tfg_cpu_cross_entropy, &n, in, &out, NULL, false));
    ck_exact(&out, (double[]){1000}, "cross_entropy at +-1000");
    set_all(&in[0], (double[]){-1000, 1000, 1000, 1000});
    set_all(&in[1], (double[]){1, 0});
    ck_ok(run(tfg_cpu_cross_entropy, &n, in, &out, NULL, false));
    ck_close(&out, (double[]){0.5 * log(2.0)}, (double[]){2 * u}, "cross_entropy, tied rows");
    free_all(in, 2);
    free(out.data);
  }
}
END_TEST

START_TEST(cross_entropy_label_out_of_range) {
  for (int li = 0; li < 2; li++) {
    tfg_tensor in[2] = {tnew(TFG_DTYPE_F32, shp(2, 3, 3)),
                        tnew(li ? TFG_DTYPE_I64 : TFG_DTYPE_I32, shp(1, 3))};
    tfg_tensor out = tnew(TFG_DTYPE_F32, shp(0));
    tfg_node n = mknode(TFG_OP_CROSS_ENTROPY, &out, 2);
    set_all(&in[1], (double[]){0, 3, 1});
    ck_assert_int_eq(run(tfg_cpu_cross_entropy, &n, in, &out, NULL, false), TFG_ERR_NUMERIC);
    ck_assert_msg(strstr(last_err, "row 1") && strstr(last_err, "label 3"), "message: %s",
                  last_err);
    set_all(&in[1], (double[]){0, 1, -1});
    ck_assert_int_eq(run(tfg_cpu_cross_entropy, &n, in, &out, NULL, false), TFG_ERR_NUMERIC);
    ck_assert_msg(strstr(last_err, "row 2") && strstr(last_err, "label -1"), "message: %s",
                  last_err);
    free_all(in, 2);
    free(out.data);
  }
}
END_TEST

/* N = 300 rows of C = 10 logits in [-4, 4). Per row the loss is
 * log(sum exp(x - m)) + (m - x[label]): the exp terms carry at most
 * (8 + 1)u relative error (rounded x - m, then exp), so log(sum) is off
 * by at most about 10u; m - x[label] and the mean are formed in double.
 * 32u (1 + |loss|) covers f32; in f64 the 300-term mean adds at most
 * 300 u |loss|, so f64 gets (32 + 300)u (1 + |loss|). */
START_TEST(cross_entropy_random) {
  tfg_dtype dt = FLOATS[_i];
  int64_t N = 300, C = 10;
  tfg_tensor in[2] = {tnew(dt, shp(2, (int)N, (int)C)), tnew(TFG_DTYPE_I64, shp(1, (int)N))};
  fill(&in[0], 31, -4, 4);
  for (int64_t r = 0; r < N; r++) set(&in[1], r, (double)(tfg_rng_bits(32, (uint64_t)r) % 10));
  tfg_tensor out = tnew(dt, shp(0));
  tfg_node n = mknode(TFG_OP_CROSS_ENTROPY, &out, 2);
  ck_ok(run(tfg_cpu_cross_entropy, &n, in, &out, test_pool, false));
  long double total = 0;
  for (int64_t r = 0; r < N; r++) {
    long double s = 0;
    for (int64_t c = 0; c < C; c++) s += expl((long double)get(&in[0], r * C + c));
    total += logl(s) - get(&in[0], r * C + (int64_t)get(&in[1], r));
  }
  double ref = (double)(total / N);
  double tol = (_i == 0 ? 32 : 332) * unit_roundoff(dt) * (1 + fabs(ref));
  ck_close(&out, &ref, &tol, "cross_entropy");
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* ---- mse --------------------------------------------------------------- */

/* 100000 elements (several chunks). The differences and squares are
 * formed in double (within 2 * 2^-53 relative each), and a sum of
 * 1e5 positive terms in double, in any order, is within
 * gamma_1e5 = 1e5 * 2^-53 relative; then the result is rounded once
 * to the dtype (u). So 2u + (1e5 + 2) * 2^-53, relative: tight for
 * f32, and the rigorous worst case (far above the typical error of
 * about sqrt(1e5) * 2^-53) for f64. (The hand-computed mse is a hand
 * case.) */
START_TEST(mse_random) {
  tfg_dtype dt = FLOATS[_i];
  tfg_tensor in[2] = {tnew(dt, shp(2, 400, 250)), tnew(dt, shp(2, 400, 250))};
  tfg_tensor out = tnew(dt, shp(0));
  tfg_node n = mknode(TFG_OP_MSE, &out, 2);
  fill(&in[0], 41, -2, 2);
  fill(&in[1], 42, -2, 2);
  ck_ok(run(tfg_cpu_mse, &n, in, &out, test_pool, false));
  long double s = 0;
  for (int64_t i = 0; i < 100000; i++) {
    long double df = (long double)get(&in[0], i) - get(&in[1], i);
    s += df * df;
  }
  double ref = (double)(s / 100000), tol = (2 * unit_roundoff(dt) + 100002 * 0x1p-53) * ref;
  ck_close(&out, &ref, &tol, "mse random");
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* ---- layer_norm ---------------------------------------------------------- */

START_TEST(layer_norm_hand) {
  tfg_dtype dt = FLOATS[_i];
  double u = unit_roundoff(dt);
  /* x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25 */
  tfg_tensor in[3] = {tnew(dt, shp(2, 2, 4)), tnew(dt, shp(1, 4)), tnew(dt, shp(1, 4))};
  set_all(&in[0], (double[]){1, 2, 3, 4, 0, 2, 0, 2});
  set_all(&in[1], (double[]){2, 1, 1, 1});
  set_all(&in[2], (double[]){0, 0, 0, 1});
  tfg_tensor out = tnew(dt, shp(2, 2, 4));
  tfg_node n = mknode(TFG_OP_LAYER_NORM, &out, 3);
  n.attrs.value = 1.0; /* eps: row 1 has mean 1, variance 1, so 1 / sqrt(1 + 1) */
  ck_ok(run(tfg_cpu_layer_norm, &n, in, &out, NULL, false));
  double r0 = 1 / sqrt(1.25 + 1.0), r1 = 1 / sqrt(2.0);
  double want[8] = {-1.5 * r0 * 2, -0.5 * r0, 0.5 * r0, 1.5 * r0 + 1,
                    -r1 * 2,       r1,        -r1,      r1 + 1};
  /* about five roundings (sqrt, division, products, sum) on |y| <= 3 */
  double tol[8];
  for (int i = 0; i < 8; i++) tol[i] = 8 * u * (1 + fabs(want[i]));
  ck_close(&out, want, tol, "layer_norm");
  free_all(in, 3);
  free(out.data);
}
END_TEST

/* x [5, 3, 16] in [-1, 1) plus a per-row offset up to 8 (a mean the two-
 * pass variance has to survive), gamma in [0.5, 2), beta in [-1, 1),
 * eps 1e-5. The f32 path computes in double and rounds once, so its
 * error is u |y| plus double-precision noise: 4u (1 + |y|). In f64 the
 * mean of 16 terms is off by 16u * 9, amplified by rstd (about 1.7) and
 * gamma (< 2); with the variance and final steps (2D + 32)u (1 + |y|)
 * times 8 leaves a margin. */
START_TEST(layer_norm_random) {
  tfg_dtype dt = FLOATS[_i];
  double u = unit_roundoff(dt);
  int64_t rows = 15, D = 16;
  tfg_tensor in[3] = {tnew(dt, shp(3, 5, 3, (int)D)), tnew(dt, shp(1, (int)D)),
                      tnew(dt, shp(1, (int)D))};
  for (int64_t i = 0; i < rows * D; i++)
    set(&in[0], i, (double)(i / D % 9) + 2 * tfg_rng_uniform(51, (uint64_t)i) - 1);
  fill(&in[1], 52, 0.5, 2);
  fill(&in[2], 53, -1, 1);
  tfg_tensor out = tnew(dt, in[0].shape);
  tfg_node n = mknode(TFG_OP_LAYER_NORM, &out, 3);
  n.attrs.value = 1e-5;
  ck_ok(run(tfg_cpu_layer_norm, &n, in, &out, test_pool, false));
  double ref[240], tol[240];
  for (int64_t r = 0; r < rows; r++) {
    long double mean = 0, var = 0;
    for (int64_t t = 0; t < D; t++) mean += get(&in[0], r * D + t);
    mean /= D;
    for (int64_t t = 0; t < D; t++) {
      long double dv = get(&in[0], r * D + t) - mean;
      var += dv * dv;
    }
    var /= D;
    for (int64_t t = 0; t < D; t++) {
      long double y = (get(&in[0], r * D + t) - mean) / sqrtl(var + 1e-5L) * get(&in[1], t) +
                      get(&in[2], t);
      ref[r * D + t] = (double)y;
      tol[r * D + t] = (_i == 0 ? 4 : 8 * (2 * D + 32)) * u * (1 + fabs((double)y));
    }
  }
  ck_close(&out, ref, tol, "layer_norm");
  free_all(in, 3);
  free(out.data);
}
END_TEST

/* ---- dropout ------------------------------------------------------------ */

START_TEST(dropout_identity_outside_training) {
  tfg_tensor x = tnew(FLOATS[_i], shp(2, 10, 10)), y = tnew(FLOATS[_i], shp(2, 10, 10));
  fill(&x, 61, -1, 1);
  tfg_node n = mknode(TFG_OP_DROPOUT, &y, 1);
  n.attrs.value = 0.5;
  n.attrs.seed = 3;
  ck_ok(run(tfg_cpu_dropout, &n, &x, &y, NULL, false));
  ck_assert_int_eq(memcmp(x.data, y.data, 100 * tfg_dtype_size(FLOATS[_i])), 0);
  free(x.data);
  free(y.data);
}
END_TEST

/* Training, rate 0.3, 100000 elements. Each element is kept
 * independently with probability p = 0.7, so the kept count is binomial
 * with mean 70000 and standard deviation sqrt(n p (1 - p)) = 144.9; we
 * accept 6 standard deviations (870), which a correct generator misses
 * with probability about 2e-9. Beyond the count: the mask is exactly the
 * documented rule (uniform(stream, i) >= rate, the stream derived from the
 * op's seed, the run's seed and the step), every kept value is exactly
 * x * (1 / (1 - rate)) rounded once, the run repeats bit for bit from the
 * seed (also on a pool), and another seed gives another mask. */
START_TEST(dropout_training) {
  tfg_dtype dt = FLOATS[_i];
  int64_t N = 100000;
  double rate = 0.3, scale = 1.0 / (1.0 - rate);
  tfg_tensor x = tnew(dt, shp(2, 250, 400)), y = tnew(dt, x.shape), y2 = tnew(dt, x.shape);
  for (int64_t i = 0; i < N; i++) set(&x, i, 1 + (double)(i % 7)); /* never 0 */
  tfg_node n = mknode(TFG_OP_DROPOUT, &y, 1);
  n.attrs.value = rate;
  n.attrs.seed = 1234;
  ck_ok(run(tfg_cpu_dropout, &n, &x, &y, NULL, true));
  int64_t kept = 0;
  for (int64_t i = 0; i < N; i++) {
    bool keep = tfg_rng_uniform(tfg_rng_dropout_stream(1234, 0, 0), (uint64_t)i) >= rate;
    double want = 0;
    if (keep) {
      want = dt == TFG_DTYPE_F32 ? (double)(float)(get(&x, i) * scale) : get(&x, i) * scale;
      kept++;
    }
    ck_assert_msg(get(&y, i) == want, "element %lld: got %.17g, want %.17g", (long long)i,
                  get(&y, i), want);
  }
  ck_assert_msg(llabs(kept - 70000) <= 870, "kept %lld of 100000 at rate 0.3", (long long)kept);
  size_t bytes = (size_t)N * tfg_dtype_size(dt);
  ck_ok(run(tfg_cpu_dropout, &n, &x, &y2, test_pool, true));
  ck_assert_int_eq(memcmp(y.data, y2.data, bytes), 0);
  n.attrs.seed = 1235;
  ck_ok(run(tfg_cpu_dropout, &n, &x, &y2, test_pool, true));
  ck_assert_int_ne(memcmp(y.data, y2.data, bytes), 0);
  /* rate 1/2: the scale is exactly 2 */
  n.attrs.value = 0.5;
  ck_ok(run(tfg_cpu_dropout, &n, &x, &y2, test_pool, true));
  for (int64_t i = 0; i < N; i++) {
    double g = get(&y2, i);
    ck_assert(g == 0 || g == 2 * get(&x, i));
  }
  /* rate 1: nothing survives */
  n.attrs.value = 1;
  ck_ok(run(tfg_cpu_dropout, &n, &x, &y2, test_pool, true));
  for (int64_t i = 0; i < N; i++) ck_assert(get(&y2, i) == 0);
  free(x.data);
  free(y.data);
  free(y2.data);
}
END_TEST

/* ---- embedding, one_hot, accuracy ----------------------------------------- */

START_TEST(embedding_gathers_rows) {
  for (int li = 0; li < 2; li++) {
    tfg_dtype dt = FLOATS[_i], it = li ? TFG_DTYPE_I64 : TFG_DTYPE_I32;
    tfg_tensor in[2] = {tnew(dt, shp(2, 4, 3)), tnew(it, shp(2, 2, 2))};
    for (int v = 0; v < 4; v++)
      for (int c = 0; c < 3; c++) set(&in[0], v * 3 + c, 10 * v + c);
    set_all(&in[1], (double[]){3, 0, 1, 3});
    tfg_tensor out = tnew(dt, shp(3, 2, 2, 3));
    tfg_node n = mknode(TFG_OP_EMBEDDING, &out, 2);
    ck_ok(run(tfg_cpu_embedding, &n, in, &out, NULL, false));
    ck_exact(&out, (double[]){30, 31, 32, 0, 1, 2, 10, 11, 12, 30, 31, 32}, "embedding");
    set_all(&in[1], (double[]){3, 0, 4, 3});
    ck_assert_int_eq(run(tfg_cpu_embedding, &n, in, &out, NULL, false), TFG_ERR_NUMERIC);
    ck_assert_msg(strstr(last_err, "id 4") && strstr(last_err, "position 2"), "message: %s",
                  last_err);
    set_all(&in[1], (double[]){-2, 0, 1, 3});
    ck_assert_int_eq(run(tfg_cpu_embedding, &n, in, &out, NULL, false), TFG_ERR_NUMERIC);
    ck_assert_msg(strstr(last_err, "id -2"), "message: %s", last_err);
    free_all(in, 2);
    free(out.data);
  }
}
END_TEST

START_TEST(embedding_large_on_pool) {
  tfg_tensor in[2] = {tnew(TFG_DTYPE_F32, shp(2, 50, 64)), tnew(TFG_DTYPE_I32, shp(1, 5000))};
  fill(&in[0], 71, -1, 1);
  for (int64_t i = 0; i < 5000; i++) set(&in[1], i, (double)(tfg_rng_bits(72, (uint64_t)i) % 50));
  tfg_tensor out = tnew(TFG_DTYPE_F32, shp(2, 5000, 64));
  tfg_node n = mknode(TFG_OP_EMBEDDING, &out, 2);
  ck_ok(run(tfg_cpu_embedding, &n, in, &out, test_pool, false));
  for (int64_t i = 0; i < 5000; i++)
    ck_assert_int_eq(memcmp((float *)out.data + i * 64,
                            (float *)in[0].data + (int64_t)get(&in[1], i) * 64, 64 * sizeof(float)),
                     0);
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* Many rows on a pool, i64 labels: the count must be exact (the first
 * maximum wins: the hand case "accuracy"). */
START_TEST(accuracy_on_pool) {
  int64_t N = 4000, C = 7;
  tfg_tensor in[2] = {tnew(TFG_DTYPE_F64, shp(2, (int)N, (int)C)), tnew(TFG_DTYPE_I64, shp(1, (int)N))};
  fill(&in[0], 81, -1, 1);
  int64_t right = 0;
  for (int64_t r = 0; r < N; r++) {
    int64_t lab = (int64_t)(tfg_rng_bits(82, (uint64_t)r) % (uint64_t)C), best = 0;
    set(&in[1], r, (double)lab);
    for (int64_t c = 1; c < C; c++)
      if (get(&in[0], r * C + c) > get(&in[0], r * C + best)) best = c;
    right += best == lab;
  }
  tfg_tensor out = tnew(TFG_DTYPE_F32, shp(0));
  tfg_node n = mknode(TFG_OP_ACCURACY, &out, 2);
  ck_ok(run(tfg_cpu_accuracy, &n, in, &out, test_pool, false));
  ck_exact(&out, (double[]){(double)(float)((double)right / (double)N)}, "accuracy on a pool");
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* ---- conv2d ---------------------------------------------------------------- */

/* Direct convolution in long double; scale = sum of |x w| over the
 * window (padding contributes exact zeros). */
static void ref_conv(const tfg_tensor *x, const tfg_tensor *w, const tfg_node *n,
                     const tfg_shape *os, double *ref, double *scale) {
  int64_t N = x->shape.dim[0], C = x->shape.dim[1], H = x->shape.dim[2], W = x->shape.dim[3];
  int64_t O = w->shape.dim[0], KH = w->shape.dim[2], KW = w->shape.dim[3];
  int64_t OH = os->dim[2], OW = os->dim[3];
  for (int64_t b = 0; b < N; b++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t oy = 0; oy < OH; oy++)
        for (int64_t ox = 0; ox < OW; ox++) {
          long double s = 0, sc = 0;
          for (int64_t c = 0; c < C; c++)
            for (int64_t ky = 0; ky < KH; ky++)
              for (int64_t kx = 0; kx < KW; kx++) {
                int64_t iy = oy * n->attrs.stride[0] + ky - n->attrs.pad[0];
                int64_t ix = ox * n->attrs.stride[1] + kx - n->attrs.pad[2];
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                long double p = (long double)get(x, ((b * C + c) * H + iy) * W + ix) *
                                get(w, ((o * C + c) * KH + ky) * KW + kx);
                s += p;
                sc += fabsl(p);
              }
          int64_t i = ((b * O + o) * OH + oy) * OW + ox;
          ref[i] = (double)s;
          scale[i] = (double)sc;
        }
}

/* Random conv2d against ref_conv. The kernel is a gemm with
 * K = C * KH * KW terms per output: tolerance 2 K u times the sum of
 * |x w| (see check_matmul). Runs without a pool and twice on one: the
 * pool splits the gemm into blocks (kernels/cpu/blas.h), so its result
 * is checked against the reference too, and the two pool runs must give
 * the same bits. */
typedef struct conv_case {
  int N, C, H, W, O, KH, KW, sh, sw, pt, pb, pl, pr;
} conv_case;

static void check_conv(tfg_dtype dt, const conv_case *k) {
  int N = k->N, C = k->C, H = k->H, W = k->W, O = k->O, KH = k->KH, KW = k->KW;
  int sh = k->sh, sw = k->sw, pt = k->pt, pb = k->pb, pl = k->pl, pr = k->pr;
  tfg_tensor in[2] = {tnew(dt, shp(4, N, C, H, W)), tnew(dt, shp(4, O, C, KH, KW))};
  fill(&in[0], 91, -1, 1);
  fill(&in[1], 92, -1, 1);
  tfg_shape os = shp(4, N, O, (H + pt + pb - KH) / sh + 1, (W + pl + pr - KW) / sw + 1);
  tfg_tensor out = tnew(dt, os), out2 = tnew(dt, os);
  tfg_node n = mknode(TFG_OP_CONV2D, &out, 2);
  n.attrs.stride[0] = sh;
  n.attrs.stride[1] = sw;
  n.attrs.pad[0] = pt;
  n.attrs.pad[1] = pb;
  n.attrs.pad[2] = pl;
  n.attrs.pad[3] = pr;
  tfg_tensor out3 = tnew(dt, os);
  ck_ok(run(tfg_cpu_conv2d, &n, in, &out, NULL, false));
  ck_ok(run(tfg_cpu_conv2d, &n, in, &out2, test_pool, false));
  ck_ok(run(tfg_cpu_conv2d, &n, in, &out3, test_pool, false));
  int64_t total = numel(&out);
  ck_assert_int_eq(memcmp(out2.data, out3.data, (size_t)total * tfg_dtype_size(dt)), 0);
  double *ref = malloc(sizeof *ref * (size_t)total), *tol = malloc(sizeof *tol * (size_t)total);
  ref_conv(&in[0], &in[1], &n, &os, ref, tol);
  for (int64_t i = 0; i < total; i++)
    tol[i] = 2.0 * C * KH * KW * unit_roundoff(dt) * tol[i] + 1e-300;
  ck_close(&out, ref, tol, "conv2d");
  ck_close(&out2, ref, tol, "conv2d on a pool");
  free(out3.data);
  free(ref);
  free(tol);
  free(out.data);
  free(out2.data);
  free_all(in, 2);
}

static const conv_case CONV_RANDOM[] = {
    /* N  C  H  W  O KH KW sh sw pt pb pl pr */
    {3, 2, 7, 6, 4, 3, 2, 2, 2, 1, 0, 2, 1}, /* stride 2, padding top 1, bottom 0, left 2, right 1 */
    {2, 3, 5, 9, 2, 2, 3, 1, 3, 0, 2, 3, 0}, /* different strides per axis, padding wider than the kernel's reach */
    {2, 3, 4, 5, 4, 1, 1, 1, 1, 0, 0, 0, 0}, /* 1x1, stride 1, no padding: the no-im2col path */
    {2, 3, 5, 5, 4, 1, 1, 2, 2, 0, 0, 0, 0}, /* 1x1 with stride 2: im2col again */
};
#define NCONV_RANDOM ((int)(sizeof CONV_RANDOM / sizeof CONV_RANDOM[0]))

/* _i over the cases in f32, then in f64. */
START_TEST(conv2d_random_stride_and_asymmetric_padding) {
  check_conv(FLOATS[_i / NCONV_RANDOM], &CONV_RANDOM[_i % NCONV_RANDOM]);
}
END_TEST

/* Images big enough that the scratch budget splits the batch into a
 * group of three and a group of one (the direct-write path). */
START_TEST(conv2d_grouped_batch) {
  check_conv(TFG_DTYPE_F32, &(conv_case){4, 8, 128, 128, 8, 3, 3, 1, 1, 1, 1, 1, 1});
}
END_TEST

/* ---- pools ------------------------------------------------------------------ */

/* The hand cases' 4x4 max_pool, with a NaN in the first window: it wins
 * the max. */
START_TEST(pool_nan_wins_max) {
  tfg_tensor x = tnew(FLOATS[_i], shp(4, 1, 1, 4, 4));
  for (int i = 0; i < 16; i++) set(&x, i, i + 1);
  tfg_tensor y = tnew(FLOATS[_i], shp(4, 1, 1, 2, 2));
  tfg_node n = mknode(TFG_OP_MAX_POOL, &y, 1);
  n.attrs.size[0] = n.attrs.size[1] = 2;
  n.attrs.stride[0] = n.attrs.stride[1] = 2;
  set(&x, 5, NAN);
  ck_ok(run(tfg_cpu_pool, &n, &x, &y, NULL, false));
  ck_assert(isnan(get(&y, 0)));
  ck_assert(get(&y, 1) == 8);
  free(x.data);
  free(y.data);
}
END_TEST

/* Window 3x2, stride 2x3 on [2, 3, 7, 8]: max must match exactly; the
 * mean of 6 values in [-1, 1) is summed in double and rounded once (f32)
 * or carries about 7u of summation and scaling error (f64): 8u. */
START_TEST(pool_random) {
  for (int avg = 0; avg < 2; avg++) {
    tfg_dtype dt = FLOATS[_i];
    tfg_tensor x = tnew(dt, shp(4, 2, 3, 7, 8)), y = tnew(dt, shp(4, 2, 3, 3, 3));
    fill(&x, 101, -1, 1);
    tfg_node n = mknode(avg ? TFG_OP_AVG_POOL : TFG_OP_MAX_POOL, &y, 1);
    n.attrs.size[0] = 3;
    n.attrs.size[1] = 2;
    n.attrs.stride[0] = 2;
    n.attrs.stride[1] = 3;
    ck_ok(run(tfg_cpu_pool, &n, &x, &y, test_pool, false));
    double ref[54], tol[54];
    for (int p = 0; p < 6; p++)
      for (int oy = 0; oy < 3; oy++)
        for (int ox = 0; ox < 3; ox++) {
          long double s = 0, m = -INFINITY;
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 2; kx++) {
              double v = get(&x, (p * 7 + oy * 2 + ky) * 8 + ox * 3 + kx);
              s += v;
              if (v > m) m = v;
            }
          int i = (p * 3 + oy) * 3 + ox;
          ref[i] = avg ? (double)(s / 6) : (double)m;
          tol[i] = avg ? 8 * unit_roundoff(dt) : 0;
        }
    ck_close(&y, ref, tol, avg ? "avg_pool" : "max_pool");
    free(x.data);
    free(y.data);
  }
}
END_TEST

Suite *suite_kernels_nn(void) {
  Suite *s = suite_create("kernels_nn");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, test_pool_make, test_pool_free);
  tcase_add_loop_test(tc, hand_cases, 0, (int)(sizeof HAND / sizeof HAND[0]));
  tcase_add_loop_test(tc, matmul_random_transposes_and_batches, 0, 2);
  tcase_add_loop_test(tc, matmul_large_batched, 0, 2);
  tcase_add_test(tc, matmul_bad_dtype);
  tcase_add_loop_test(tc, softmax_hand_and_stability, 0, 2);
  tcase_add_loop_test(tc, softmax_random_middle_axis, 0, 2);
  tcase_add_test(tc, softmax_bad_dtype);
  tcase_add_loop_test(tc, cross_entropy_hand, 0, 2);
  tcase_add_test(tc, cross_entropy_label_out_of_range);
  tcase_add_loop_test(tc, cross_entropy_random, 0, 2);
  tcase_add_loop_test(tc, mse_random, 0, 2);
  tcase_add_loop_test(tc, layer_norm_hand, 0, 2);
  tcase_add_loop_test(tc, layer_norm_random, 0, 2);
  tcase_add_loop_test(tc, dropout_identity_outside_training, 0, 2);
  tcase_add_loop_test(tc, dropout_training, 0, 2);
  tcase_add_loop_test(tc, embedding_gathers_rows, 0, 2);
  tcase_add_test(tc, embedding_large_on_pool);
  tcase_add_test(tc, accuracy_on_pool);
  tcase_add_loop_test(tc, attention_random_vs_reference, 0, 2 * NATT);
  tcase_add_test(tc, attention_no_keys);
  tcase_add_loop_test(tc, conv2d_random_stride_and_asymmetric_padding, 0, 2 * NCONV_RANDOM);
  tcase_add_test(tc, conv2d_grouped_batch);
  tcase_add_loop_test(tc, pool_nan_wins_max, 0, 2);
  tcase_add_loop_test(tc, pool_random, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}
