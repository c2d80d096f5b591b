/* tests/unit/test_kernels_basic.c: the CPU kernels of init.c,
 * elementwise.c, reduce.c and shape.c, and the CPU registry (registry.c).
 *
 * Each op gets small hand-computed cases, and every float op is also run
 * in f32 and f64 on random inputs, large enough that a 2-thread pool
 * splits the work (chunks of 8K-32K elements), against a straightforward
 * reference in long double. Tolerances are stated where used, with the
 * reason. Large loops count failures and assert once at the end: Check's
 * per-assert bookkeeping is too slow for a million asserts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "ir/ops.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "tests/unit/unit.h"

/* ---- helpers -------------------------------------------------------------------- */

static tfg_shape shape_of(int rank, const int64_t *d) {
  tfg_shape s = {.rank = rank};
  for (int i = 0; i < rank; i++) s.dim[i] = d[i];
  return s;
}

#define SHAPE(...)                                                                 \
  shape_of((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),            \
           (int64_t[]){__VA_ARGS__})
static const tfg_shape SCALAR = {.rank = 0};

static tfg_tensor tensor_new(tfg_dtype dt, tfg_shape s) {
  size_t bytes = (size_t)tfg_shape_numel(&s) * tfg_dtype_size(dt);
  tfg_tensor t = {.data = calloc(1, bytes ? bytes : 1), .dtype = dt, .shape = s};
  ck_assert_ptr_nonnull(t.data);
  return t;
}

static tfg_tensor tensor_from(tfg_dtype dt, tfg_shape s, const void *data) {
  tfg_tensor t = tensor_new(dt, s);
  memcpy(t.data, data, (size_t)tfg_shape_numel(&s) * tfg_dtype_size(dt));
  return t;
}

static void tensor_free(tfg_tensor *t) {
  free(t->data);
  t->data = NULL;
}

static tfg_node node_new(tfg_op_id op, tfg_dtype dt, tfg_shape s, int ninputs) {
  tfg_node n = {.op = op, .dtype = dt, .shape = s, .ninputs = ninputs};
  return n;
}

/* Runs kernel fn with a fresh context on pool; on failure copies the
 * message into msg (when given). */
static tfg_status run_kernel(tfg_kernel_fn fn, tfg_pool *pool, const tfg_node *n,
                             const tfg_tensor *in, tfg_tensor *out, char *msg, size_t cap) {
  tfg_kernel_ctx ctx = {.pool = pool};
  tfg_status s = fn(&ctx, n, in, out);
  if (msg && cap) snprintf(msg, cap, "%s", ctx.err.data ? ctx.err.data : "");
  tfg_strbuf_free(&ctx.err);
  return s;
}

/* Runs fn on node n and asserts success. */
static void run_ok(tfg_kernel_fn fn, tfg_pool *pool, const tfg_node *n, const tfg_tensor *in,
                   tfg_tensor *out) {
  char msg[256];
  tfg_status s = run_kernel(fn, pool, n, in, out, msg, sizeof msg);
  ck_assert_msg(s == TFG_OK, "kernel failed: %s (%s)", tfg_status_str(s), msg);
}

/* The op's name, without linking the op registry (ir/ops.c). */
static const char *op_name(tfg_op_id op) {
  static const char *const names[] = {
#define OP_NAME(id, name, sig) name,
      TFG_OPS(OP_NAME)
#undef OP_NAME
  };
  return names[op];
}

/* Uniform in [lo, hi) from a test-only stream. */
static double urand(uint64_t seed, uint64_t i, double lo, double hi) {
  return lo + (hi - lo) * tfg_rng_uniform(seed ^ 0x5EED5EEDull, i);
}

/* |got - want| <= tol * |want|, NaN equal to NaN, infinities exact. */
static bool close_rel(long double got, long double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabsl(got - want) <= tol * fabsl(want);
}

static double getd(const tfg_tensor *t, int64_t i) {
  switch (t->dtype) {
  case TFG_DTYPE_F32: return ((const float *)t->data)[i];
  case TFG_DTYPE_F64: return ((const double *)t->data)[i];
  case TFG_DTYPE_I32: return ((const int32_t *)t->data)[i];
  case TFG_DTYPE_I64: return (double)((const int64_t *)t->data)[i];
  case TFG_DTYPE_BOOL: return ((const uint8_t *)t->data)[i];
  default: ck_abort_msg("getd: dtype"); return 0;
  }
}

static void setd(tfg_tensor *t, int64_t i, double v) {
  switch (t->dtype) {
  case TFG_DTYPE_F32: ((float *)t->data)[i] = (float)v; break;
  case TFG_DTYPE_F64: ((double *)t->data)[i] = v; break;
  case TFG_DTYPE_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
  case TFG_DTYPE_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
  case TFG_DTYPE_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
  default: ck_abort_msg("setd: dtype");
  }
}

/* Flat row-major index <-> multi-index. */
static void unflatten(const tfg_shape *s, int64_t flat, int64_t *idx) {
  for (int i = s->rank - 1; i >= 0; i--) {
    idx[i] = flat % s->dim[i];
    flat /= s->dim[i];
  }
}

static int64_t flatten_idx(const tfg_shape *s, const int64_t *idx) {
  int64_t f = 0;
  for (int i = 0; i < s->rank; i++) f = f * s->dim[i] + idx[i];
  return f;
}

/* The flat index in input shape s (right-aligned) of output multi-index
 * idx (rank r), NumPy broadcasting. */
static int64_t bcast_index(const tfg_shape *s, int r, const int64_t *idx) {
  int64_t f = 0;
  for (int j = 0; j < s->rank; j++) {
    int i = j + r - s->rank;
    f = f * s->dim[j] + (s->dim[j] == 1 ? 0 : idx[i]);
  }
  return f;
}

/* ---- unary -------------------------------------------------------------------------- */

/* Runs unary op on n f64 values via dtype dt; results back as double. */
static void unary_vals(tfg_op_id op, tfg_dtype dt, const double *x, double *y, int n) {
  tfg_tensor in = tensor_new(dt, SHAPE(n)), out = tensor_new(dt, SHAPE(n));
  for (int i = 0; i < n; i++) setd(&in, i, x[i]);
  tfg_node nd = node_new(op, dt, SHAPE(n), 1);
  run_ok(tfg_cpu_unary, NULL, &nd, &in, &out);
  for (int i = 0; i < n; i++) y[i] = getd(&out, i);
  tensor_free(&in);
  tensor_free(&out);
}

START_TEST(unary_small) {
  static const tfg_dtype dts[] = {TFG_DTYPE_F32, TFG_DTYPE_F64};
  for (int d = 0; d < 2; d++) {
    tfg_dtype dt = dts[d];
    double y[4];
    unary_vals(TFG_OP_RELU, dt, (double[]){-1, 0, 2, -0.5}, y, 4);
    ck_assert(y[0] == 0 && y[1] == 0 && y[2] == 2 && y[3] == 0);
    unary_vals(TFG_OP_NEG, dt, (double[]){-1, 0, 2.5, 3}, y, 4);
    ck_assert(y[0] == 1 && y[1] == 0 && signbit(y[1]) && y[2] == -2.5 && y[3] == -3);
    unary_vals(TFG_OP_ABS, dt, (double[]){-1.5, 0, 2, -7}, y, 4);
    ck_assert(y[0] == 1.5 && y[1] == 0 && y[2] == 2 && y[3] == 7);
    unary_vals(TFG_OP_EXP, dt, (double[]){0, 1, -1, 1000}, y, 4);
    ck_assert(y[0] == 1 && fabs(y[1] - M_E) < 1e-6 && fabs(y[2] - 1 / M_E) < 1e-7 &&
              isinf(y[3]));
    unary_vals(TFG_OP_LOG, dt, (double[]){1, M_E, 0, -1}, y, 4);
    ck_assert(y[0] == 0 && fabs(y[1] - 1) < 1e-6 && isinf(y[2]) && y[2] < 0 && isnan(y[3]));
    unary_vals(TFG_OP_SQRT, dt, (double[]){4, 0, 2.25, 1e6}, y, 4);
    ck_assert(y[0] == 2 && y[1] == 0 && y[2] == 1.5 && y[3] == 1000);
    unary_vals(TFG_OP_RSQRT, dt, (double[]){4, 0.25, 1, 0}, y, 4);
    ck_assert(y[0] == 0.5 && y[1] == 2 && y[2] == 1 && isinf(y[3]));
    unary_vals(TFG_OP_TANH, dt, (double[]){0, 1, -1, 50}, y, 4);
    ck_assert(y[0] == 0 && fabs(y[1] - 0.7615941559557649) < 1e-7 &&
              fabs(y[2] + 0.7615941559557649) < 1e-7 && y[3] == 1);
    /* gelu(1) = Phi(1) = 0.8413447460685429; gelu(-1) = -(1 - Phi(1)). */
    unary_vals(TFG_OP_GELU, dt, (double[]){0, 1, -1, 3}, y, 4);
    ck_assert(y[0] == 0 && fabs(y[1] - 0.8413447460685429) < 1e-7 &&
              fabs(y[2] + 0.15865525393145707) < 1e-7 && fabs(y[3] - 2.9959503059051) < 1e-6);
    /* sigmoid: exact at 0, no overflow (and no NaN) at +-1000, and full
     * relative accuracy deep in the left tail: sigmoid(-80) = e^-80 / (1 + e^-80). */
    unary_vals(TFG_OP_SIGMOID, dt, (double[]){0, 1000, -1000, -80}, y, 4);
    ck_assert(y[0] == 0.5 && y[1] == 1 && y[2] == 0 && !isnan(y[2]));
    ck_assert(fabs(y[3] / 1.8048513878454153e-35 - 1) < 1e-6);
  }
}
END_TEST

START_TEST(unary_int) {
  int32_t x32[] = {-3, 0, 5, INT32_MIN};
  int64_t x64[] = {-3, 0, 5, INT64_MIN};
  tfg_tensor a = tensor_from(TFG_DTYPE_I32, SHAPE(4), x32), o = tensor_new(TFG_DTYPE_I32, SHAPE(4));
  tfg_tensor b = tensor_from(TFG_DTYPE_I64, SHAPE(4), x64), p = tensor_new(TFG_DTYPE_I64, SHAPE(4));
  int32_t *r32 = o.data;
  int64_t *r64 = p.data;
  tfg_node n = node_new(TFG_OP_NEG, TFG_DTYPE_I32, SHAPE(4), 1);
  run_ok(tfg_cpu_unary, NULL, &n, &a, &o);
  ck_assert(r32[0] == 3 && r32[1] == 0 && r32[2] == -5 && r32[3] == INT32_MIN); /* wraps */
  n.op = TFG_OP_ABS;
  run_ok(tfg_cpu_unary, NULL, &n, &a, &o);
  ck_assert(r32[0] == 3 && r32[1] == 0 && r32[2] == 5 && r32[3] == INT32_MIN);
  n.op = TFG_OP_RELU;
  run_ok(tfg_cpu_unary, NULL, &n, &a, &o);
  ck_assert(r32[0] == 0 && r32[1] == 0 && r32[2] == 5 && r32[3] == 0);
  n = node_new(TFG_OP_NEG, TFG_DTYPE_I64, SHAPE(4), 1);
  run_ok(tfg_cpu_unary, NULL, &n, &b, &p);
  ck_assert(r64[0] == 3 && r64[1] == 0 && r64[2] == -5 && r64[3] == INT64_MIN);
  n.op = TFG_OP_RELU;
  run_ok(tfg_cpu_unary, NULL, &n, &b, &p);
  ck_assert(r64[0] == 0 && r64[1] == 0 && r64[2] == 5 && r64[3] == 0);
  n.op = TFG_OP_ABS;
  run_ok(tfg_cpu_unary, NULL, &n, &b, &p);
  ck_assert(r64[0] == 3 && r64[2] == 5);
  /* exp on integers is not an op: a clean error, not garbage */
  n.op = TFG_OP_EXP;
  char msg[128];
  ck_assert_int_eq(run_kernel(tfg_cpu_unary, NULL, &n, &b, &p, msg, sizeof msg), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(msg, "i64"));
  tensor_free(&a); tensor_free(&o); tensor_free(&b); tensor_free(&p);
}
END_TEST

/* The reference, in long double (64-bit significand on x86: 11 bits more
 * than f64, so its own error is negligible at the tolerances below). */
static long double unary_ref(tfg_op_id op, long double x) {
  switch (op) {
  case TFG_OP_NEG: return -x;
  case TFG_OP_EXP: return expl(x);
  case TFG_OP_LOG: return logl(x);
  case TFG_OP_SQRT: return sqrtl(x);
  case TFG_OP_RSQRT: return 1 / sqrtl(x);
  case TFG_OP_ABS: return fabsl(x);
  case TFG_OP_RELU: return x < 0 ? 0 : x;
  case TFG_OP_GELU: return 0.5L * x * erfcl(-x / sqrtl(2));
  case TFG_OP_TANH: return tanhl(x);
  case TFG_OP_SIGMOID: return 1 / (1 + expl(-x));
  default: return 0;
  }
}

START_TEST(unary_random_vs_reference) {
  /* Domains keep results finite and normal in f32 (exp(80) < FLT_MAX,
   * sigmoid(-80) > FLT_MIN). */
  static const struct {
    tfg_op_id op;
    double lo, hi;
    double tol32, tol64;
  } cases[] = {
      /* exact ops: one rounding-free result */
      {TFG_OP_NEG, -10, 10, 0, 0},
      {TFG_OP_ABS, -10, 10, 0, 0},
      {TFG_OP_RELU, -10, 10, 0, 0},
      /* sqrt is correctly rounded (half an ulp: 6e-8 / 1.1e-16); rsqrt adds
       * one division: under 2 ulp (2.4e-7 / 4.4e-16) */
      {TFG_OP_SQRT, 1e-3, 1e3, 1.2e-7, 2.3e-16},
      {TFG_OP_RSQRT, 1e-3, 1e3, 2.4e-7, 4.5e-16},
      /* glibc's float and double exp/log/tanh are within ~1 ulp; sigmoid
       * adds an add, a division and a product: budget 8 ulp in f32
       * (1e-6) and ~5 ulp in f64 (1e-15) */
      {TFG_OP_EXP, -80, 80, 1e-6, 1e-15},
      {TFG_OP_LOG, 1e-3, 1e3, 1e-6, 1e-15},
      {TFG_OP_TANH, -10, 10, 1e-6, 1e-15},
      {TFG_OP_SIGMOID, -80, 80, 1e-6, 1e-15},
      /* f32 gelu runs in double (one final rounding). In f64 the argument
       * x/sqrt 2 carries two roundings (the constant and the product,
       * 2^-53 each) that erfc amplifies ~2z^2 = x^2 times: 64x at |x| = 8,
       * so up to ~1.4e-14 plus erfc's own ulp; bound 3e-14 */
      {TFG_OP_GELU, -8, 8, 1e-6, 3e-14},
  };
  enum { N = 100003 }; /* > the 32K grain: the pool splits every op */
  tfg_pool *pool = tfg_pool_new(2);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int d = 0; d < 2; d++) {
      tfg_dtype dt = d ? TFG_DTYPE_F64 : TFG_DTYPE_F32;
      tfg_tensor in = tensor_new(dt, SHAPE(N)), out = tensor_new(dt, SHAPE(N));
      for (int64_t i = 0; i < N; i++) setd(&in, i, urand(c, (uint64_t)i, cases[c].lo, cases[c].hi));
      tfg_node nd = node_new(cases[c].op, dt, SHAPE(N), 1);
      run_ok(tfg_cpu_unary, pool, &nd, &in, &out);
      double tol = d ? cases[c].tol64 : cases[c].tol32, worst = 0;
      int64_t bad = 0, at = -1;
      for (int64_t i = 0; i < N; i++) {
        long double want = unary_ref(cases[c].op, getd(&in, i));
        long double got = getd(&out, i);
        if (!close_rel(got, want, tol)) {
          bad++;
          if (at < 0) at = i;
        }
        if (want != 0) {
          double e = (double)fabsl((got - want) / want);
          if (e > worst) worst = e;
        }
      }
      ck_assert_msg(bad == 0, "%s %s: %lld values off by more than %g (first at x=%.9g), worst %g",
                    op_name(cases[c].op), tfg_dtype_name(dt), (long long)bad, tol,
                    at >= 0 ? getd(&in, at) : 0.0, worst);
      tensor_free(&in);
      tensor_free(&out);
    }
  }
  tfg_pool_free(pool);
}
END_TEST

/* ---- binary ------------------------------------------------------------------------- */

/* Runs binary op on small tensors given as doubles; the output dtype is
 * bool for comparisons. */
static void binary_vals(tfg_op_id op, tfg_dtype dt, tfg_shape sa, const double *a, tfg_shape sb,
                        const double *b, tfg_shape so, double *y) {
  tfg_dtype odt = op == TFG_OP_EQUAL || op == TFG_OP_GREATER ? TFG_DTYPE_BOOL : dt;
  tfg_tensor in[2] = {tensor_new(dt, sa), tensor_new(dt, sb)};
  tfg_tensor out = tensor_new(odt, so);
  for (int64_t i = 0; i < tfg_shape_numel(&sa); i++) setd(&in[0], i, a[i]);
  for (int64_t i = 0; i < tfg_shape_numel(&sb); i++) setd(&in[1], i, b[i]);
  tfg_node nd = node_new(op, odt, so, 2);
  run_ok(tfg_cpu_binary, NULL, &nd, in, &out);
  for (int64_t i = 0; i < tfg_shape_numel(&so); i++) y[i] = getd(&out, i);
  tensor_free(&in[0]);
  tensor_free(&in[1]);
  tensor_free(&out);
}

static void assert_vals(const double *got, const double *want, int n) {
  for (int i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])),
                  "element %d: got %.17g, want %.17g", i, got[i], want[i]);
}

START_TEST(binary_small) {
  double y[8];
  const double a[] = {1, -2, 3.5, 8}, b[] = {2, 4, -0.5, 8};
  tfg_shape s4 = SHAPE(4);
  static const tfg_dtype dts[] = {TFG_DTYPE_F32, TFG_DTYPE_F64};
  for (int d = 0; d < 2; d++) {
    tfg_dtype dt = dts[d];
    binary_vals(TFG_OP_ADD, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){3, 2, 3, 16}, 4);
    binary_vals(TFG_OP_SUB, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){-1, -6, 4, 0}, 4);
    binary_vals(TFG_OP_MUL, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){2, -8, -1.75, 64}, 4);
    binary_vals(TFG_OP_DIV, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){0.5, -0.5, -7, 1}, 4);
    binary_vals(TFG_OP_POW, dt, s4, (double[]){2, 9, 4, 10}, s4, (double[]){10, 0.5, -1, 0}, s4, y);
    assert_vals(y, (double[]){1024, 3, 0.25, 1}, 4);
    binary_vals(TFG_OP_MAXIMUM, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){2, 4, 3.5, 8}, 4);
    binary_vals(TFG_OP_MINIMUM, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){1, -2, -0.5, 8}, 4);
    binary_vals(TFG_OP_EQUAL, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){0, 0, 0, 1}, 4);
    binary_vals(TFG_OP_GREATER, dt, s4, a, s4, b, s4, y);
    assert_vals(y, (double[]){0, 0, 1, 0}, 4);
    /* NaN: maximum/minimum propagate it from either side (PyTorch);
     * NaN is equal to nothing and greater than nothing */
    binary_vals(TFG_OP_MAXIMUM, dt, s4, (double[]){NAN, 1, NAN, 0}, s4, (double[]){1, NAN, NAN, -1},
                s4, y);
    ck_assert(isnan(y[0]) && isnan(y[1]) && isnan(y[2]) && y[3] == 0);
    binary_vals(TFG_OP_MINIMUM, dt, s4, (double[]){NAN, 1, 2, 0}, s4, (double[]){1, NAN, 3, -1},
                s4, y);
    ck_assert(isnan(y[0]) && isnan(y[1]) && y[2] == 2 && y[3] == -1);
    binary_vals(TFG_OP_EQUAL, dt, s4, (double[]){NAN, 1, 0, -0.0}, s4, (double[]){NAN, NAN, -0.0, 0},
                s4, y);
    assert_vals(y, (double[]){0, 0, 1, 1}, 4);
    binary_vals(TFG_OP_DIV, dt, s4, (double[]){1, -1, 0, 1}, s4, (double[]){0, 0, 0, INFINITY}, s4,
                y);
    ck_assert(isinf(y[0]) && y[0] > 0 && isinf(y[1]) && y[1] < 0 && isnan(y[2]) && y[3] == 0);
  }
}
END_TEST

START_TEST(binary_int) {
  double y[8];
  tfg_shape s4 = SHAPE(4);
  static const tfg_dtype dts[] = {TFG_DTYPE_I32, TFG_DTYPE_I64};
  for (int d = 0; d < 2; d++) {
    tfg_dtype dt = dts[d];
    /* division truncates toward zero, whatever the signs */
    binary_vals(TFG_OP_DIV, dt, s4, (double[]){7, -7, 7, -7}, s4, (double[]){2, 2, -2, -2}, s4, y);
    assert_vals(y, (double[]){3, -3, -3, 3}, 4);
    binary_vals(TFG_OP_ADD, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){10, 20, 30, -4}, s4, y);
    assert_vals(y, (double[]){11, 18, 33, 0}, 4);
    binary_vals(TFG_OP_SUB, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){10, 20, 30, -4}, s4, y);
    assert_vals(y, (double[]){-9, -22, -27, 8}, 4);
    binary_vals(TFG_OP_MUL, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){10, 20, 30, -4}, s4, y);
    assert_vals(y, (double[]){10, -40, 90, -16}, 4);
    binary_vals(TFG_OP_MAXIMUM, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){0, -1, 3, 5}, s4, y);
    assert_vals(y, (double[]){1, -1, 3, 5}, 4);
    binary_vals(TFG_OP_MINIMUM, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){0, -1, 3, 5}, s4, y);
    assert_vals(y, (double[]){0, -2, 3, 4}, 4);
    binary_vals(TFG_OP_EQUAL, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){0, -2, 3, 5}, s4, y);
    assert_vals(y, (double[]){0, 1, 1, 0}, 4);
    binary_vals(TFG_OP_GREATER, dt, s4, (double[]){1, -2, 3, 4}, s4, (double[]){0, -2, 2, 5}, s4, y);
    assert_vals(y, (double[]){1, 0, 1, 0}, 4);
  }
  /* wrapping, not UB: INT32_MAX + 1, INT32_MIN / -1 */
  int32_t a[] = {INT32_MAX, INT32_MIN, INT32_MIN, 6}, b[] = {1, -1, 1, -1};
  tfg_tensor in[2] = {tensor_from(TFG_DTYPE_I32, s4, a), tensor_from(TFG_DTYPE_I32, s4, b)};
  tfg_tensor out = tensor_new(TFG_DTYPE_I32, s4);
  tfg_node nd = node_new(TFG_OP_ADD, TFG_DTYPE_I32, s4, 2);
  run_ok(tfg_cpu_binary, NULL, &nd, in, &out);
  ck_assert_int_eq(((int32_t *)out.data)[0], INT32_MIN);
  nd.op = TFG_OP_DIV;
  run_ok(tfg_cpu_binary, NULL, &nd, in, &out);
  ck_assert_int_eq(((int32_t *)out.data)[1], INT32_MIN);
  ck_assert_int_eq(((int32_t *)out.data)[2], INT32_MIN);
  ck_assert_int_eq(((int32_t *)out.data)[3], -6);
  /* integer division by zero: TFG_ERR_NUMERIC with the message */
  ((int32_t *)in[1].data)[2] = 0;
  char msg[128];
  ck_assert_int_eq(run_kernel(tfg_cpu_binary, NULL, &nd, in, &out, msg, sizeof msg),
                   TFG_ERR_NUMERIC);
  ck_assert_str_eq(msg, "integer division by zero");
  /* pow is float-only; mixed dtypes are refused */
  nd.op = TFG_OP_POW;
  ck_assert_int_eq(run_kernel(tfg_cpu_binary, NULL, &nd, in, &out, NULL, 0), TFG_ERR_DEVICE);
  tensor_free(&in[1]);
  in[1] = tensor_new(TFG_DTYPE_I64, s4);
  nd.op = TFG_OP_ADD;
  ck_assert_int_eq(run_kernel(tfg_cpu_binary, NULL, &nd, in, &out, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&in[0]);
  tensor_free(&in[1]);
  tensor_free(&out);
}
END_TEST

START_TEST(binary_bool_compare) {
  double y[4];
  tfg_shape s4 = SHAPE(4);
  binary_vals(TFG_OP_EQUAL, TFG_DTYPE_BOOL, s4, (double[]){0, 0, 1, 1}, s4, (double[]){0, 1, 0, 1},
              s4, y);
  assert_vals(y, (double[]){1, 0, 0, 1}, 4);
  binary_vals(TFG_OP_GREATER, TFG_DTYPE_BOOL, s4, (double[]){0, 0, 1, 1}, s4,
              (double[]){0, 1, 0, 1}, s4, y);
  assert_vals(y, (double[]){0, 0, 1, 0}, 4);
  /* i64 comparisons beyond 2^53 are exact (not through double) */
  int64_t a[] = {(1ll << 60) + 1, 5, -1, 0}, b[] = {1ll << 60, 5, 0, 0};
  tfg_tensor in[2] = {tensor_from(TFG_DTYPE_I64, s4, a), tensor_from(TFG_DTYPE_I64, s4, b)};
  tfg_tensor out = tensor_new(TFG_DTYPE_BOOL, s4);
  tfg_node nd = node_new(TFG_OP_GREATER, TFG_DTYPE_BOOL, s4, 2);
  run_ok(tfg_cpu_binary, NULL, &nd, in, &out);
  ck_assert_int_eq(memcmp(out.data, (uint8_t[]){1, 0, 0, 0}, 4), 0);
  nd.op = TFG_OP_EQUAL;
  run_ok(tfg_cpu_binary, NULL, &nd, in, &out);
  ck_assert_int_eq(memcmp(out.data, (uint8_t[]){0, 1, 0, 1}, 4), 0);
  /* ADD on bool is not an op */
  tensor_free(&in[0]);
  tensor_free(&in[1]);
  in[0] = tensor_new(TFG_DTYPE_BOOL, s4);
  in[1] = tensor_new(TFG_DTYPE_BOOL, s4);
  nd = node_new(TFG_OP_ADD, TFG_DTYPE_BOOL, s4, 2);
  ck_assert_int_eq(run_kernel(tfg_cpu_binary, NULL, &nd, in, &out, NULL, 0), TFG_ERR_DEVICE);
  tensor_free(&in[0]);
  tensor_free(&in[1]);
  tensor_free(&out);
}
END_TEST

START_TEST(binary_broadcast_small) {
  double y[64];
  /* [3,1] + [1,4] -> [3,4]: y[i][j] = a[i] + b[j] */
  binary_vals(TFG_OP_ADD, TFG_DTYPE_F32, SHAPE(3, 1), (double[]){10, 20, 30}, SHAPE(1, 4),
              (double[]){1, 2, 3, 4}, SHAPE(3, 4), y);
  assert_vals(y, (double[]){11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34}, 12);
  /* scalar (rank 0) with [2,3], on either side */
  binary_vals(TFG_OP_MUL, TFG_DTYPE_F64, SCALAR, (double[]){2}, SHAPE(2, 3),
              (double[]){1, 2, 3, 4, 5, 6}, SHAPE(2, 3), y);
  assert_vals(y, (double[]){2, 4, 6, 8, 10, 12}, 6);
  binary_vals(TFG_OP_SUB, TFG_DTYPE_I32, SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, SCALAR,
              (double[]){1}, SHAPE(2, 3), y);
  assert_vals(y, (double[]){0, 1, 2, 3, 4, 5}, 6);
  /* scalar with scalar */
  binary_vals(TFG_OP_DIV, TFG_DTYPE_F32, SCALAR, (double[]){3}, SCALAR, (double[]){4}, SCALAR, y);
  ck_assert(y[0] == 0.75);
  /* rank 1 [4] with rank 3 [2,3,4] */
  double big[24], want[24];
  for (int i = 0; i < 24; i++) big[i] = i;
  for (int i = 0; i < 24; i++) want[i] = i - (i % 4) * 10;
  binary_vals(TFG_OP_SUB, TFG_DTYPE_F64, SHAPE(2, 3, 4), big, SHAPE(4), (double[]){0, 10, 20, 30},
              SHAPE(2, 3, 4), y);
  assert_vals(y, want, 24);
  /* size-1 dims on both sides: [2,1,3] > [1,4,1] -> [2,4,3] */
  double a[6] = {0, 5, 10, 15, 20, 25}, b[4] = {1, 9, 16, 30};
  binary_vals(TFG_OP_GREATER, TFG_DTYPE_I64, SHAPE(2, 1, 3), a, SHAPE(1, 4, 1), b, SHAPE(2, 4, 3),
              y);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 3; k++) ck_assert(y[(i * 4 + j) * 3 + k] == (a[i * 3 + k] > b[j]));
  /* output dims of size 1 among larger ones: [1,3,1] * [2,1,1] -> [2,3,1] */
  binary_vals(TFG_OP_MUL, TFG_DTYPE_F32, SHAPE(1, 3, 1), (double[]){1, 2, 3}, SHAPE(2, 1, 1),
              (double[]){1, -1}, SHAPE(2, 3, 1), y);
  assert_vals(y, (double[]){1, 2, 3, -1, -2, -3}, 6);
  /* zero-sized dims: nothing to write, and no error */
  binary_vals(TFG_OP_ADD, TFG_DTYPE_F32, SHAPE(0, 3), NULL, SHAPE(1, 3), (double[]){1, 2, 3},
              SHAPE(0, 3), y);
  binary_vals(TFG_OP_ADD, TFG_DTYPE_F32, SHAPE(2, 0), NULL, SHAPE(1), (double[]){1}, SHAPE(2, 0), y);
  /* even an integer division by a zero divisor: no element is computed */
  binary_vals(TFG_OP_DIV, TFG_DTYPE_I32, SHAPE(0, 2), NULL, SHAPE(1, 2), (double[]){0, 0},
              SHAPE(0, 2), y);
  /* shapes that do not broadcast are refused, not read out of bounds */
  tfg_tensor in[2] = {tensor_new(TFG_DTYPE_F32, SHAPE(3)), tensor_new(TFG_DTYPE_F32, SHAPE(4))};
  tfg_tensor out = tensor_new(TFG_DTYPE_F32, SHAPE(4));
  tfg_node nd = node_new(TFG_OP_ADD, TFG_DTYPE_F32, SHAPE(4), 2);
  ck_assert_int_eq(run_kernel(tfg_cpu_binary, NULL, &nd, in, &out, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&in[0]);
  tensor_free(&in[1]);
  tensor_free(&out);
}
END_TEST

static long double binary_ref(tfg_op_id op, long double x, long double y) {
  switch (op) {
  case TFG_OP_ADD: return x + y;
  case TFG_OP_SUB: return x - y;
  case TFG_OP_MUL: return x * y;
  case TFG_OP_DIV: return x / y;
  case TFG_OP_POW: return powl(x, y);
  case TFG_OP_MAXIMUM: return x > y ? x : y;
  case TFG_OP_MINIMUM: return x < y ? x : y;
  case TFG_OP_EQUAL: return x == y;
  case TFG_OP_GREATER: return x > y;
  default: return 0;
  }
}

START_TEST(binary_random_vs_reference) {
  /* add/sub/mul/div of exact inputs are correctly rounded: within half
   * an ulp of the exact result, relative 2^-24 (f32) / 2^-53 (f64), even
   * under cancellation. pow is within ~1 ulp in glibc: 2.4e-7 / 4.5e-16.
   * max/min/compare are exact. */
  static const struct {
    tfg_op_id op;
    double tol32, tol64;
  } ops[] = {
      {TFG_OP_ADD, 0x1p-24, 0x1p-53}, {TFG_OP_SUB, 0x1p-24, 0x1p-53},
      {TFG_OP_MUL, 0x1p-24, 0x1p-53}, {TFG_OP_DIV, 0x1p-24, 0x1p-53},
      {TFG_OP_POW, 2.4e-7, 4.5e-16},  {TFG_OP_MAXIMUM, 0, 0},
      {TFG_OP_MINIMUM, 0, 0},         {TFG_OP_EQUAL, 0, 0},
      {TFG_OP_GREATER, 0, 0},
  };
  /* Same shape (the flat fast path), a row broadcast, an outer product
   * and a middle-axis broadcast: all > 32K outputs, so the pool cuts
   * rows in the middle. */
  struct {
    tfg_shape a, b, o;
  } shapes[] = {
      {SHAPE(100003), SHAPE(100003), SHAPE(100003)},
      {SHAPE(400, 301), SHAPE(301), SHAPE(400, 301)},
      {SHAPE(401, 1), SHAPE(1, 300), SHAPE(401, 300)},
      {SHAPE(30, 1, 50), SHAPE(1, 70, 50), SHAPE(30, 70, 50)},
      {SHAPE(30, 70, 1), SHAPE(70, 50), SHAPE(30, 70, 50)},
  };
  tfg_pool *pool = tfg_pool_new(2);
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    tfg_op_id op = ops[o].op;
    bool cmp = op == TFG_OP_EQUAL || op == TFG_OP_GREATER;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      for (int d = 0; d < 2; d++) {
        tfg_dtype dt = d ? TFG_DTYPE_F64 : TFG_DTYPE_F32;
        tfg_tensor in[2] = {tensor_new(dt, shapes[s].a), tensor_new(dt, shapes[s].b)};
        tfg_tensor out = tensor_new(cmp ? TFG_DTYPE_BOOL : dt, shapes[s].o);
        for (int k = 0; k < 2; k++) {
          int64_t n = tfg_shape_numel(&in[k].shape);
          for (int64_t i = 0; i < n; i++) {
            double v;
            if (op == TFG_OP_POW) v = k ? urand(k + 7 * o, (uint64_t)i, -5, 5) : urand(k, (uint64_t)i, 0.1, 10);
            else if (op == TFG_OP_DIV && k) v = urand(9, (uint64_t)i, 0.5, 10) * (i % 2 ? -1 : 1);
            else if (cmp) v = floor(urand(k + 3, (uint64_t)i, -4, 4)); /* many ties */
            else v = urand(k + 5, (uint64_t)i, -10, 10);
            setd(&in[k], i, v);
          }
        }
        tfg_node nd = node_new(op, out.dtype, shapes[s].o, 2);
        run_ok(tfg_cpu_binary, pool, &nd, in, &out);
        double tol = d ? ops[o].tol64 : ops[o].tol32;
        int64_t n = tfg_shape_numel(&shapes[s].o), bad = 0, at = -1, idx[TFG_MAX_RANK];
        int r = shapes[s].o.rank;
        for (int64_t i = 0; i < n; i++) {
          unflatten(&shapes[s].o, i, idx);
          long double x = getd(&in[0], bcast_index(&shapes[s].a, r, idx));
          long double y = getd(&in[1], bcast_index(&shapes[s].b, r, idx));
          if (!close_rel(getd(&out, i), binary_ref(op, x, y), tol)) {
            bad++;
            if (at < 0) at = i;
          }
        }
        ck_assert_msg(bad == 0, "%s %s shape #%zu: %lld bad, first at %lld",
                      op_name(op), tfg_dtype_name(dt), s, (long long)bad, (long long)at);
        tensor_free(&in[0]);
        tensor_free(&in[1]);
        tensor_free(&out);
      }
    }
  }
  tfg_pool_free(pool);
}
END_TEST

/* ---- where -------------------------------------------------------------------------- */

START_TEST(where_small_and_large) {
  /* c [2,1], a [1,3], b scalar -> [2,3] */
  uint8_t c[] = {1, 0};
  float a[] = {1, 2, 3}, b = -1;
  tfg_tensor in[3] = {tensor_from(TFG_DTYPE_BOOL, SHAPE(2, 1), c),
                      tensor_from(TFG_DTYPE_F32, SHAPE(1, 3), a),
                      tensor_from(TFG_DTYPE_F32, SCALAR, &b)};
  tfg_tensor out = tensor_new(TFG_DTYPE_F32, SHAPE(2, 3));
  tfg_node nd = node_new(TFG_OP_WHERE, TFG_DTYPE_F32, SHAPE(2, 3), 3);
  run_ok(tfg_cpu_where, NULL, &nd, in, &out);
  const float want[] = {1, 2, 3, -1, -1, -1};
  ck_assert_int_eq(memcmp(out.data, want, sizeof want), 0);
  for (int k = 0; k < 3; k++) tensor_free(&in[k]);
  tensor_free(&out);

  /* any dtype moves bit for bit: f16 patterns (NaN included), i64, bool */
  uint16_t h1[] = {0x7E01, 0x3C00, 0x0001}, h2[] = {0xFC00, 0x8000, 0x7BFF};
  uint8_t c3[] = {1, 0, 1};
  tfg_tensor hin[3] = {tensor_from(TFG_DTYPE_BOOL, SHAPE(3), c3),
                       tensor_from(TFG_DTYPE_F16, SHAPE(3), h1),
                       tensor_from(TFG_DTYPE_F16, SHAPE(3), h2)};
  tfg_tensor hout = tensor_new(TFG_DTYPE_F16, SHAPE(3));
  nd = node_new(TFG_OP_WHERE, TFG_DTYPE_F16, SHAPE(3), 3);
  run_ok(tfg_cpu_where, NULL, &nd, hin, &hout);
  ck_assert_int_eq(memcmp(hout.data, (uint16_t[]){0x7E01, 0x8000, 0x0001}, 6), 0);
  for (int k = 0; k < 3; k++) tensor_free(&hin[k]);
  tensor_free(&hout);

  /* large, f64 and i64, with a pool: c [500, 1], a [500, 300], b [300] */
  tfg_pool *pool = tfg_pool_new(2);
  static const tfg_dtype dts[] = {TFG_DTYPE_F64, TFG_DTYPE_I64};
  for (int d = 0; d < 2; d++) {
    tfg_tensor L[3] = {tensor_new(TFG_DTYPE_BOOL, SHAPE(500, 1)), tensor_new(dts[d], SHAPE(500, 300)),
                       tensor_new(dts[d], SHAPE(300))};
    for (int i = 0; i < 500; i++) ((uint8_t *)L[0].data)[i] = urand(1, (uint64_t)i, 0, 1) < 0.5;
    for (int i = 0; i < 500 * 300; i++) setd(&L[1], i, i);
    for (int i = 0; i < 300; i++) setd(&L[2], i, -i);
    tfg_tensor lo = tensor_new(dts[d], SHAPE(500, 300));
    nd = node_new(TFG_OP_WHERE, dts[d], SHAPE(500, 300), 3);
    run_ok(tfg_cpu_where, pool, &nd, L, &lo);
    int64_t bad = 0;
    for (int i = 0; i < 500; i++)
      for (int j = 0; j < 300; j++) {
        double w = ((uint8_t *)L[0].data)[i] ? i * 300 + j : -j;
        bad += getd(&lo, i * 300 + j) != w;
      }
    ck_assert_int_eq(bad, 0);
    for (int k = 0; k < 3; k++) tensor_free(&L[k]);
    tensor_free(&lo);
  }
  tfg_pool_free(pool);
}
END_TEST

/* ---- cast --------------------------------------------------------------------------- */

/* Casts n elements of src (dtype from) to dtype to; dst must hold them. */
static void cast_raw(tfg_dtype from, const void *src, tfg_dtype to, void *dst, int64_t n,
                     tfg_pool *pool) {
  tfg_tensor in = {.data = (void *)src, .dtype = from, .shape = SHAPE(n)};
  tfg_tensor out = {.data = dst, .dtype = to, .shape = SHAPE(n)};
  tfg_node nd = node_new(TFG_OP_CAST, to, SHAPE(n), 1);
  nd.attrs.dtype = to;
  run_ok(tfg_cpu_cast, pool, &nd, &in, &out);
}

static uint16_t f32_to_h(float x) {
  uint16_t h;
  cast_raw(TFG_DTYPE_F32, &x, TFG_DTYPE_F16, &h, 1, NULL);
  return h;
}

static uint16_t f64_to_h(double x) {
  uint16_t h;
  cast_raw(TFG_DTYPE_F64, &x, TFG_DTYPE_F16, &h, 1, NULL);
  return h;
}

static uint16_t f32_to_b(float x) {
  uint16_t h;
  cast_raw(TFG_DTYPE_F32, &x, TFG_DTYPE_BF16, &h, 1, NULL);
  return h;
}

static float h_to_f32(uint16_t h) {
  float x;
  cast_raw(TFG_DTYPE_F16, &h, TFG_DTYPE_F32, &x, 1, NULL);
  return x;
}

static float b_to_f32(uint16_t h) {
  float x;
  cast_raw(TFG_DTYPE_BF16, &h, TFG_DTYPE_F32, &x, 1, NULL);
  return x;
}

/* An independent decoder for a 16-bit float (mbits fraction bits, ebits
 * exponent bits), straight from the IEEE definition. */
static double ref_decode(uint16_t h, int mbits, int ebits) {
  int bias = (1 << (ebits - 1)) - 1;
  int e = (h >> mbits) & ((1 << ebits) - 1), f = h & ((1 << mbits) - 1);
  double v;
  if (e == (1 << ebits) - 1) v = f ? NAN : INFINITY;
  else if (e == 0) v = ldexp(f, 1 - bias - mbits);
  else v = ldexp(f + (1 << mbits), e - bias - mbits);
  return h & 0x8000 ? -v : v;
}

/* The correctly rounded (nearest, ties to even) 16-bit pattern of x by
 * search over the positive finite patterns, which increase with their
 * value; past max + ulp/2 it is infinity. */
static uint16_t ref_encode(double x, int mbits, int ebits) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double ax = fabs(x);
  uint16_t inf = (uint16_t)(((1 << ebits) - 1) << mbits), maxf = (uint16_t)(inf - 1);
  double vmax = ref_decode(maxf, mbits, ebits), ulp = vmax - ref_decode(maxf - 1, mbits, ebits);
  if (ax >= vmax + ulp / 2) return sign | inf;
  uint16_t lo = 0, hi = maxf; /* largest pattern with value <= ax */
  while (lo < hi) {
    uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
    if (ref_decode(mid, mbits, ebits) <= ax) lo = mid; else hi = mid - 1;
  }
  if (lo == maxf) return sign | lo;
  double below = ax - ref_decode(lo, mbits, ebits), above = ref_decode(lo + 1, mbits, ebits) - ax;
  uint16_t r = below < above ? lo : above < below ? lo + 1 : (lo & 1) ? lo + 1 : lo;
  return sign | r;
}

START_TEST(cast_f16_special_values) {
  /* decoding */
  ck_assert(isinf(h_to_f32(0x7C00)) && h_to_f32(0x7C00) > 0);
  ck_assert(isinf(h_to_f32(0xFC00)) && h_to_f32(0xFC00) < 0);
  ck_assert(isnan(h_to_f32(0x7E00)) && isnan(h_to_f32(0x7C01)) && isnan(h_to_f32(0xFFFF)));
  ck_assert(h_to_f32(0x0001) == 0x1p-24f);  /* smallest subnormal */
  ck_assert(h_to_f32(0x03FF) == 1023 * 0x1p-24f); /* largest subnormal */
  ck_assert(h_to_f32(0x0400) == 0x1p-14f);  /* smallest normal */
  ck_assert(h_to_f32(0x3C00) == 1.0f && h_to_f32(0xC000) == -2.0f);
  ck_assert(h_to_f32(0x7BFF) == 65504.0f);  /* largest finite */
  ck_assert(h_to_f32(0x8000) == 0 && signbit(h_to_f32(0x8000)));
  /* encoding: ties to even on the normal grid (spacing 2^-10 at 1) */
  ck_assert_uint_eq(f32_to_h(1.0f + 0x1p-11f), 0x3C00);     /* tie: down to even 0x3C00 */
  ck_assert_uint_eq(f32_to_h(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie: up to even 0x3C02 */
  ck_assert_uint_eq(f32_to_h(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01); /* past the tie */
  ck_assert_uint_eq(f32_to_h(65504.0f), 0x7BFF);
  ck_assert_uint_eq(f32_to_h(65519.0f), 0x7BFF); /* below the midpoint 65520 */
  ck_assert_uint_eq(f32_to_h(65520.0f), 0x7C00); /* tie with 65536: even is infinity */
  ck_assert_uint_eq(f32_to_h(1e6f), 0x7C00);
  ck_assert_uint_eq(f32_to_h(-1e6f), 0xFC00);
  ck_assert_uint_eq(f32_to_h(INFINITY), 0x7C00);
  /* subnormals (spacing 2^-24) */
  ck_assert_uint_eq(f32_to_h(0x1p-24f), 0x0001);
  ck_assert_uint_eq(f32_to_h(0x1p-25f), 0x0000);          /* tie between 0 and 1: even 0 */
  ck_assert_uint_eq(f32_to_h(0x1.000002p-25f), 0x0001);   /* just past the tie */
  ck_assert_uint_eq(f32_to_h(3 * 0x1p-25f), 0x0002);      /* tie between 1 and 2: even 2 */
  ck_assert_uint_eq(f32_to_h(5 * 0x1p-25f), 0x0002);      /* tie between 2 and 3: even 2 */
  ck_assert_uint_eq(f32_to_h(0x1p-26f), 0x0000);
  ck_assert_uint_eq(f32_to_h(-0x1p-30f), 0x8000);         /* underflow keeps the sign */
  ck_assert_uint_eq(f32_to_h(1023.5f * 0x1p-24f), 0x0400); /* tie rounds up into the normals */
  ck_assert_uint_eq(f32_to_h(0x1p-14f), 0x0400);
  ck_assert_uint_eq(f32_to_h(-0.0f), 0x8000);
  /* NaN stays a (quiet) NaN and keeps its sign */
  uint16_t hn = f32_to_h(NAN);
  ck_assert((hn & 0x7C00) == 0x7C00 && (hn & 0x03FF) != 0);
  ck_assert((f32_to_h(-NAN) & 0x8000) != 0);
  /* f64 -> f16 rounds once: 1 + 2^-11 + 2^-40 is just above the tie, so
   * 0x3C01; through f32 (which drops the 2^-40) it would be 0x3C00 */
  ck_assert_uint_eq(f64_to_h(1.0 + 0x1p-11 + 0x1p-40), 0x3C01);
  ck_assert_uint_eq(f64_to_h(65519.99), 0x7BFF);
  ck_assert_uint_eq(f64_to_h(0x1p-1074), 0x0000); /* double subnormal */
  ck_assert_uint_eq(f64_to_h(1e300), 0x7C00);
}
END_TEST

START_TEST(cast_bf16_special_values) {
  ck_assert(isinf(b_to_f32(0x7F80)) && b_to_f32(0x7F80) > 0);
  ck_assert(isinf(b_to_f32(0xFF80)) && b_to_f32(0xFF80) < 0);
  ck_assert(isnan(b_to_f32(0x7FC0)) && isnan(b_to_f32(0x7F81)));
  ck_assert(b_to_f32(0x3F80) == 1.0f && b_to_f32(0x0001) == 0x1p-133f);
  ck_assert_uint_eq(f32_to_b(1.0f + 0x1p-8f), 0x3F80);     /* tie: even */
  ck_assert_uint_eq(f32_to_b(1.0f + 3 * 0x1p-8f), 0x3F82); /* tie: even */
  ck_assert_uint_eq(f32_to_b(1.0f + 0x1p-8f + 0x1p-23f), 0x3F81);
  ck_assert_uint_eq(f32_to_b(3.4028235e38f), 0x7F80);      /* FLT_MAX rounds to inf */
  ck_assert_uint_eq(f32_to_b(0x1p-133f), 0x0001);          /* subnormal */
  ck_assert_uint_eq(f32_to_b(0x1p-134f), 0x0000);          /* tie: even 0 */
  ck_assert_uint_eq(f32_to_b(3 * 0x1p-134f), 0x0002);      /* tie: even 2 */
  ck_assert_uint_eq(f32_to_b(-0.0f), 0x8000);
  uint16_t bn = f32_to_b(NAN);
  ck_assert((bn & 0x7F80) == 0x7F80 && (bn & 0x007F) != 0);
  /* i64 -> bf16 rounds once: 2^62 + 2^54 + 1 is just above the tie
   * between 2^62 and 2^62 + 2^55 (0x5E80, 0x5E81); through double the
   * +1 is lost and the tie would go to 0x5E80 */
  int64_t v = (1ll << 62) + (1ll << 54) + 1;
  uint16_t h;
  cast_raw(TFG_DTYPE_I64, &v, TFG_DTYPE_BF16, &h, 1, NULL);
  ck_assert_uint_eq(h, 0x5E81);
  v = -((1ll << 62) + (1ll << 54));
  cast_raw(TFG_DTYPE_I64, &v, TFG_DTYPE_BF16, &h, 1, NULL);
  ck_assert_uint_eq(h, 0xDE80);
  v = INT64_MIN;
  cast_raw(TFG_DTYPE_I64, &v, TFG_DTYPE_BF16, &h, 1, NULL);
  ck_assert_uint_eq(h, 0xDF00); /* -2^63 */
  /* i32 -> f16: spacing is 2 at 2048 */
  int32_t iv[] = {2049, 2051, 70000, -3, 0};
  uint16_t hv[5];
  cast_raw(TFG_DTYPE_I32, iv, TFG_DTYPE_F16, hv, 5, NULL);
  ck_assert_uint_eq(hv[0], 0x6800); /* tie 2048/2050: even 2048 */
  ck_assert_uint_eq(hv[1], 0x6802); /* tie 2050/2052: even 2052 */
  ck_assert_uint_eq(hv[2], 0x7C00);
  ck_assert_uint_eq(hv[3], 0xC200);
  ck_assert_uint_eq(hv[4], 0x0000);
}
END_TEST

START_TEST(cast_16bit_exhaustive) {
  /* Every f16 and bf16 pattern: decodes to the IEEE value; round trips
   * through f32 and f64 unchanged (NaN stays NaN). */
  enum { N = 65536 };
  uint16_t *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back);
  float *f = malloc(N * sizeof *f);
  double *d = malloc(N * sizeof *d);
  ck_assert(h && back && f && d);
  for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
  static const tfg_dtype half[] = {TFG_DTYPE_F16, TFG_DTYPE_BF16};
  for (int k = 0; k < 2; k++) {
    int mbits = k ? 7 : 10, ebits = k ? 8 : 5;
    cast_raw(half[k], h, TFG_DTYPE_F32, f, N, NULL);
    cast_raw(half[k], h, TFG_DTYPE_F64, d, N, NULL);
    int bad = 0;
    for (int i = 0; i < N; i++) {
      double want = ref_decode((uint16_t)i, mbits, ebits);
      bool nan = isnan(want);
      bad += nan ? !(isnan(f[i]) && isnan(d[i]))
                 : !(f[i] == want && d[i] == want && !signbit(f[i]) == !signbit(want));
    }
    ck_assert_msg(bad == 0, "%s decode: %d bad", tfg_dtype_name(half[k]), bad);
    cast_raw(TFG_DTYPE_F32, f, half[k], back, N, NULL);
    for (int i = 0; i < N; i++)
      bad += isnan(f[i]) ? (back[i] & 0x7FFF) <= (uint16_t)(((1 << ebits) - 1) << mbits)
                         : back[i] != h[i];
    cast_raw(TFG_DTYPE_F64, d, half[k], back, N, NULL);
    for (int i = 0; i < N; i++)
      bad += isnan(d[i]) ? (back[i] & 0x7FFF) <= (uint16_t)(((1 << ebits) - 1) << mbits)
                         : back[i] != h[i];
    ck_assert_msg(bad == 0, "%s round trip: %d bad", tfg_dtype_name(half[k]), bad);
  }
  free(h);
  free(back);
  free(f);
  free(d);
}
END_TEST

START_TEST(cast_16bit_random_vs_reference) {
  /* Random f32 and f64 values across each format's whole range (normal,
   * subnormal, overflow) against the search-based reference encoder;
   * f32 -> bf16 has its own bit-trick path, so it is also checked
   * against the f64 path. The pool splits the 200K elements. */
  enum { N = 200000 };
  tfg_pool *pool = tfg_pool_new(2);
  float *f = malloc(N * sizeof *f);
  double *d = malloc(N * sizeof *d);
  uint16_t *hf = malloc(N * sizeof *hf), *hd = malloc(N * sizeof *hd);
  ck_assert(f && d && hf && hd);
  static const tfg_dtype half[] = {TFG_DTYPE_F16, TFG_DTYPE_BF16};
  for (int k = 0; k < 2; k++) {
    int mbits = k ? 7 : 10, ebits = k ? 8 : 5;
    int emin = k ? -136 : -27, emax = k ? 129 : 17;
    for (int i = 0; i < N; i++) {
      double m = urand(10 + k, (uint64_t)i, 1, 2), e = floor(urand(20 + k, (uint64_t)i, emin, emax));
      d[i] = ldexp(m, (int)e) * (i % 2 ? -1 : 1);
      f[i] = (float)d[i];
      if (i % 3 == 0) d[i] = f[i]; /* a third exactly representable in f32 */
    }
    cast_raw(TFG_DTYPE_F32, f, half[k], hf, N, pool);
    cast_raw(TFG_DTYPE_F64, d, half[k], hd, N, pool);
    int bad = 0, first = -1;
    for (int i = 0; i < N; i++) {
      bool ok = hf[i] == ref_encode(f[i], mbits, ebits) && hd[i] == ref_encode(d[i], mbits, ebits);
      if (!ok && first < 0) first = i;
      bad += !ok;
    }
    ck_assert_msg(bad == 0, "%s: %d bad, first %.17g", tfg_dtype_name(half[k]), bad,
                  first >= 0 ? d[first] : 0.0);
  }
  /* f32 -> bf16 fast path == generic path, on random bit patterns */
  for (int i = 0; i < N; i++) {
    uint32_t u = (uint32_t)tfg_rng_bits(77, (uint64_t)i);
    memcpy(&f[i], &u, 4);
    d[i] = f[i];
  }
  cast_raw(TFG_DTYPE_F32, f, TFG_DTYPE_BF16, hf, N, pool);
  cast_raw(TFG_DTYPE_F64, d, TFG_DTYPE_BF16, hd, N, pool);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += isnan(f[i]) ? (hf[i] & 0x7F80) != 0x7F80 || !(hf[i] & 0x7F) : hf[i] != hd[i];
  ck_assert_int_eq(bad, 0);
  free(f);
  free(d);
  free(hf);
  free(hd);
  tfg_pool_free(pool);
}
END_TEST

START_TEST(cast_numeric) {
  /* float -> int truncates toward zero; NaN -> 0; out of range saturates */
  float fv[] = {1.9f, -1.9f, 0.5f, -0.5f, NAN, 1e10f, -1e10f, 2147483520.0f};
  int32_t iv[8];
  cast_raw(TFG_DTYPE_F32, fv, TFG_DTYPE_I32, iv, 8, NULL);
  ck_assert(iv[0] == 1 && iv[1] == -1 && iv[2] == 0 && iv[3] == 0 && iv[4] == 0);
  ck_assert(iv[5] == INT32_MAX && iv[6] == INT32_MIN && iv[7] == 2147483520);
  double dv[] = {-7.99, 1e19, -1e19, 9007199254740993.0};
  int64_t lv[4];
  cast_raw(TFG_DTYPE_F64, dv, TFG_DTYPE_I64, lv, 4, NULL);
  ck_assert(lv[0] == -7 && lv[1] == INT64_MAX && lv[2] == INT64_MIN &&
            lv[3] == 9007199254740992ll);
  /* to bool: nonzero is 1 (NaN too), -0 is 0 */
  float bv[] = {0, -0.0f, 2, NAN, -1e-30f};
  uint8_t b[5];
  cast_raw(TFG_DTYPE_F32, bv, TFG_DTYPE_BOOL, b, 5, NULL);
  ck_assert_int_eq(memcmp(b, (uint8_t[]){0, 0, 1, 1, 1}, 5), 0);
  int64_t li[] = {0, -5, 1ll << 40};
  cast_raw(TFG_DTYPE_I64, li, TFG_DTYPE_BOOL, b, 3, NULL);
  ck_assert_int_eq(memcmp(b, (uint8_t[]){0, 1, 1}, 3), 0);
  uint16_t hb[] = {0x0000, 0x8000, 0x0001};
  cast_raw(TFG_DTYPE_F16, hb, TFG_DTYPE_BOOL, b, 3, NULL);
  ck_assert_int_eq(memcmp(b, (uint8_t[]){0, 0, 1}, 3), 0);
  /* bool -> numbers */
  uint8_t bb[] = {0, 1};
  double bd[2];
  cast_raw(TFG_DTYPE_BOOL, bb, TFG_DTYPE_F64, bd, 2, NULL);
  ck_assert(bd[0] == 0 && bd[1] == 1);
  int32_t bi[2];
  cast_raw(TFG_DTYPE_BOOL, bb, TFG_DTYPE_I32, bi, 2, NULL);
  ck_assert(bi[0] == 0 && bi[1] == 1);
  uint16_t bh[2];
  cast_raw(TFG_DTYPE_BOOL, bb, TFG_DTYPE_BF16, bh, 2, NULL);
  ck_assert(bh[0] == 0 && bh[1] == 0x3F80);
  /* i64 -> i32 wraps modulo 2^32; i32 -> i64 sign-extends */
  int64_t wide[] = {(1ll << 32) + 5, -1, (1ll << 31)};
  int32_t narrow[3];
  cast_raw(TFG_DTYPE_I64, wide, TFG_DTYPE_I32, narrow, 3, NULL);
  ck_assert(narrow[0] == 5 && narrow[1] == -1 && narrow[2] == INT32_MIN);
  cast_raw(TFG_DTYPE_I32, narrow, TFG_DTYPE_I64, wide, 3, NULL);
  ck_assert(wide[0] == 5 && wide[1] == -1 && wide[2] == INT32_MIN);
  /* f16 -> i32 truncates */
  uint16_t hh[] = {0x3E00 /* 1.5 */, 0xC500 /* -5 */, 0x7C00};
  cast_raw(TFG_DTYPE_F16, hh, TFG_DTYPE_I32, iv, 3, NULL);
  ck_assert(iv[0] == 1 && iv[1] == -5 && iv[2] == INT32_MAX);
  /* f64 -> f32 rounds to nearest; i64 -> f64 too (2^53 + 1 is a tie: even) */
  double dd[] = {0.1, 1e39, 0x1p-150, 0x1.0000003p0};
  float ff[4];
  cast_raw(TFG_DTYPE_F64, dd, TFG_DTYPE_F32, ff, 4, NULL);
  ck_assert(ff[0] == 0.1f && isinf(ff[1]) && ff[2] == 0 && ff[3] == 0x1.000000p0f);
  int64_t big = (1ll << 53) + 1;
  double bigd;
  cast_raw(TFG_DTYPE_I64, &big, TFG_DTYPE_F64, &bigd, 1, NULL);
  ck_assert(bigd == 0x1p53);
  /* same dtype: a copy */
  float same[3];
  cast_raw(TFG_DTYPE_F32, fv, TFG_DTYPE_F32, same, 3, NULL);
  ck_assert_int_eq(memcmp(same, fv, sizeof same), 0);
}
END_TEST

START_TEST(cast_large_round_trip) {
  /* f32 -> f64 -> f32 and i32 -> f64 -> i32 are exact; f64 -> f32
   * equals C's (float) conversion (round to nearest), with the pool. */
  enum { N = 300001 };
  tfg_pool *pool = tfg_pool_new(2);
  float *f = malloc(N * sizeof *f), *f2 = malloc(N * sizeof *f2);
  double *d = malloc(N * sizeof *d);
  int32_t *iv = malloc(N * sizeof *iv), *iv2 = malloc(N * sizeof *iv2);
  ck_assert(f && f2 && d && iv && iv2);
  for (int i = 0; i < N; i++) {
    f[i] = (float)urand(1, (uint64_t)i, -1e6, 1e6);
    iv[i] = (int32_t)tfg_rng_bits(3, (uint64_t)i);
  }
  cast_raw(TFG_DTYPE_F32, f, TFG_DTYPE_F64, d, N, pool);
  cast_raw(TFG_DTYPE_F64, d, TFG_DTYPE_F32, f2, N, pool);
  ck_assert_int_eq(memcmp(f, f2, N * sizeof *f), 0);
  cast_raw(TFG_DTYPE_I32, iv, TFG_DTYPE_F64, d, N, pool);
  cast_raw(TFG_DTYPE_F64, d, TFG_DTYPE_I32, iv2, N, pool);
  ck_assert_int_eq(memcmp(iv, iv2, N * sizeof *iv), 0);
  for (int i = 0; i < N; i++) d[i] = urand(2, (uint64_t)i, -1, 1) * 1e10;
  cast_raw(TFG_DTYPE_F64, d, TFG_DTYPE_F32, f2, N, pool);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += f2[i] != (float)d[i];
  ck_assert_int_eq(bad, 0);
  free(f);
  free(f2);
  free(d);
  free(iv);
  free(iv2);
  tfg_pool_free(pool);
}
END_TEST

/* ---- reductions --------------------------------------------------------------------- */

/* The output shape of reducing s over mask. */
static tfg_shape reduced_shape(const tfg_shape *s, uint32_t mask, bool keepdims) {
  tfg_shape o = {.rank = 0};
  for (int i = 0; i < s->rank; i++) {
    if (!(mask >> i & 1)) o.dim[o.rank++] = s->dim[i];
    else if (keepdims) o.dim[o.rank++] = 1;
  }
  return o;
}

/* Runs SUM/MEAN/MAX on x over mask into a fresh tensor. */
static tfg_tensor reduce_run(tfg_op_id op, const tfg_tensor *x, uint32_t mask, bool keepdims,
                             tfg_pool *pool) {
  tfg_shape os = reduced_shape(&x->shape, mask, keepdims);
  tfg_tensor out = tensor_new(x->dtype, os);
  tfg_node nd = node_new(op, x->dtype, os, 1);
  nd.attrs.axes = mask;
  nd.attrs.keepdims = keepdims;
  run_ok(tfg_cpu_reduce, pool, &nd, x, &out);
  return out;
}

START_TEST(reduce_small) {
  /* x = [[1, 2, 3], [4, 5, 6]] */
  double xv[] = {1, 2, 3, 4, 5, 6};
  static const tfg_dtype dts[] = {TFG_DTYPE_F32, TFG_DTYPE_F64, TFG_DTYPE_I32, TFG_DTYPE_I64};
  for (int d = 0; d < 4; d++) {
    tfg_tensor x = tensor_new(dts[d], SHAPE(2, 3));
    for (int i = 0; i < 6; i++) setd(&x, i, xv[i]);
    bool fl = d < 2;
    for (int kd = 0; kd < 2; kd++) {
      tfg_tensor o = reduce_run(TFG_OP_SUM, &x, 1, kd, NULL);
      ck_assert_int_eq(o.shape.rank, kd ? 2 : 1);
      ck_assert(getd(&o, 0) == 5 && getd(&o, 1) == 7 && getd(&o, 2) == 9);
      tensor_free(&o);
      o = reduce_run(TFG_OP_SUM, &x, 2, kd, NULL);
      ck_assert(getd(&o, 0) == 6 && getd(&o, 1) == 15);
      tensor_free(&o);
      o = reduce_run(TFG_OP_SUM, &x, 3, kd, NULL);
      ck_assert_int_eq(o.shape.rank, kd ? 2 : 0);
      ck_assert(getd(&o, 0) == 21);
      tensor_free(&o);
      o = reduce_run(TFG_OP_MAX, &x, 1, kd, NULL);
      ck_assert(getd(&o, 0) == 4 && getd(&o, 1) == 5 && getd(&o, 2) == 6);
      tensor_free(&o);
      o = reduce_run(TFG_OP_MAX, &x, 2, kd, NULL);
      ck_assert(getd(&o, 0) == 3 && getd(&o, 1) == 6);
      tensor_free(&o);
      if (fl) {
        o = reduce_run(TFG_OP_MEAN, &x, 2, kd, NULL);
        ck_assert(getd(&o, 0) == 2 && getd(&o, 1) == 5);
        tensor_free(&o);
        o = reduce_run(TFG_OP_MEAN, &x, 3, kd, NULL);
        ck_assert(getd(&o, 0) == 3.5);
        tensor_free(&o);
      }
    }
    /* no axes: a copy */
    tfg_tensor o = reduce_run(TFG_OP_SUM, &x, 0, false, NULL);
    for (int i = 0; i < 6; i++) ck_assert(getd(&o, i) == xv[i]);
    tensor_free(&o);
    tensor_free(&x);
  }
  /* MAX propagates NaN; a scalar input reduces to itself */
  float nv[] = {1, NAN, 3, 4, 5, 6};
  tfg_tensor x = tensor_from(TFG_DTYPE_F32, SHAPE(2, 3), nv);
  tfg_tensor o = reduce_run(TFG_OP_MAX, &x, 2, false, NULL);
  ck_assert(isnan(getd(&o, 0)) && getd(&o, 1) == 6);
  tensor_free(&o);
  o = reduce_run(TFG_OP_MAX, &x, 1, false, NULL);
  ck_assert(getd(&o, 0) == 4 && isnan(getd(&o, 1)) && getd(&o, 2) == 6);
  tensor_free(&o);
  o = reduce_run(TFG_OP_MAX, &x, 3, false, NULL);
  ck_assert(isnan(getd(&o, 0)));
  tensor_free(&o);
  tensor_free(&x);
  float sv = 2.5f;
  x = tensor_from(TFG_DTYPE_F32, SCALAR, &sv);
  o = reduce_run(TFG_OP_MEAN, &x, 0, false, NULL);
  ck_assert(getd(&o, 0) == 2.5);
  tensor_free(&o);
  tensor_free(&x);
  /* i64 sums are exact beyond 2^53; i32 sums wrap like i32 arithmetic */
  int64_t lv[] = {(1ll << 60) + 1, 1, 1};
  x = tensor_from(TFG_DTYPE_I64, SHAPE(3), lv);
  o = reduce_run(TFG_OP_SUM, &x, 1, false, NULL);
  ck_assert(((int64_t *)o.data)[0] == (1ll << 60) + 3);
  tensor_free(&o);
  tensor_free(&x);
  int32_t iv[] = {INT32_MAX, 1};
  x = tensor_from(TFG_DTYPE_I32, SHAPE(2), iv);
  o = reduce_run(TFG_OP_SUM, &x, 1, false, NULL);
  ck_assert(((int32_t *)o.data)[0] == INT32_MIN);
  tensor_free(&o);
  /* MEAN on integers would need a float output: refused */
  tfg_node nd = node_new(TFG_OP_MEAN, TFG_DTYPE_I32, SCALAR, 1);
  nd.attrs.axes = 1;
  o = tensor_new(TFG_DTYPE_I32, SCALAR);
  ck_assert_int_eq(run_kernel(tfg_cpu_reduce, NULL, &nd, &x, &o, NULL, 0), TFG_ERR_DEVICE);
  tensor_free(&o);
  tensor_free(&x);
}
END_TEST

START_TEST(reduce_several_axes) {
  /* x[i][j][k] = 100 i + 10 j + k over [2, 3, 4] */
  tfg_tensor x = tensor_new(TFG_DTYPE_F64, SHAPE(2, 3, 4));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) setd(&x, (i * 3 + j) * 4 + k, 100 * i + 10 * j + k);
  /* axes {0, 2}: sum over i, k of 100 i + 10 j + k = 400 + 80 j + 12 */
  for (int kd = 0; kd < 2; kd++) {
    tfg_tensor o = reduce_run(TFG_OP_SUM, &x, 5, kd, NULL);
    ck_assert_int_eq(o.shape.rank, kd ? 3 : 1);
    if (kd) ck_assert(o.shape.dim[0] == 1 && o.shape.dim[1] == 3 && o.shape.dim[2] == 1);
    for (int j = 0; j < 3; j++) ck_assert(getd(&o, j) == 412 + 80 * j);
    tensor_free(&o);
    o = reduce_run(TFG_OP_MEAN, &x, 5, kd, NULL);
    for (int j = 0; j < 3; j++) ck_assert(getd(&o, j) == (412 + 80 * j) / 8.0);
    tensor_free(&o);
    o = reduce_run(TFG_OP_MAX, &x, 5, kd, NULL);
    for (int j = 0; j < 3; j++) ck_assert(getd(&o, j) == 103 + 10 * j);
    tensor_free(&o);
    /* axes {0, 1}: per k, sum of 100 i + 10 j + k = 300 + 60 + 6 k */
    o = reduce_run(TFG_OP_SUM, &x, 3, kd, NULL);
    for (int k = 0; k < 4; k++) ck_assert(getd(&o, k) == 360 + 6 * k);
    tensor_free(&o);
    /* axes {1, 2}: per i, 1200 i + 120 + 18 */
    o = reduce_run(TFG_OP_SUM, &x, 6, kd, NULL);
    for (int i = 0; i < 2; i++) ck_assert(getd(&o, i) == 1200 * i + 138);
    tensor_free(&o);
    /* axis {1}: out[i][k] = 300 i + 30 + 3 k */
    o = reduce_run(TFG_OP_SUM, &x, 2, kd, NULL);
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 4; k++) ck_assert(getd(&o, i * 4 + k) == 300 * i + 30 + 3 * k);
    tensor_free(&o);
  }
  tensor_free(&x);
}
END_TEST

START_TEST(reduce_empty) {
  /* [2, 0] over axis 1: SUM is 0, MEAN NaN (0/0), MAX has no value */
  tfg_tensor x = tensor_new(TFG_DTYPE_F32, SHAPE(2, 0));
  tfg_tensor o = reduce_run(TFG_OP_SUM, &x, 2, false, NULL);
  ck_assert(getd(&o, 0) == 0 && getd(&o, 1) == 0);
  tensor_free(&o);
  o = reduce_run(TFG_OP_MEAN, &x, 2, false, NULL);
  ck_assert(isnan(getd(&o, 0)) && isnan(getd(&o, 1)));
  tensor_free(&o);
  tfg_node nd = node_new(TFG_OP_MAX, TFG_DTYPE_F32, SHAPE(2), 1);
  nd.attrs.axes = 2;
  o = tensor_new(TFG_DTYPE_F32, SHAPE(2));
  char msg[128];
  ck_assert_int_ne(run_kernel(tfg_cpu_reduce, NULL, &nd, &x, &o, msg, sizeof msg), TFG_OK);
  ck_assert_ptr_nonnull(strstr(msg, "empty"));
  tensor_free(&o);
  /* over axis 0 the output itself is empty: nothing to do */
  o = reduce_run(TFG_OP_MAX, &x, 1, false, NULL);
  ck_assert_int_eq(tfg_shape_numel(&o.shape), 0);
  tensor_free(&o);
  tensor_free(&x);
}
END_TEST

/* Straightforward reference for SUM/MEAN/MAX in long double: loop over
 * input elements, add each into its output slot. sumabs gets sum |x|
 * per output (for the error bound). */
static void reduce_ref(tfg_op_id op, const tfg_tensor *x, uint32_t mask, long double *ref,
                       long double *sumabs, int64_t nout) {
  for (int64_t o = 0; o < nout; o++) {
    ref[o] = op == TFG_OP_MAX ? -INFINITY : 0;
    sumabs[o] = 0;
  }
  tfg_shape ks = reduced_shape(&x->shape, mask, true);
  int64_t n = tfg_shape_numel(&x->shape), idx[TFG_MAX_RANK], count = n / nout;
  for (int64_t i = 0; i < n; i++) {
    unflatten(&x->shape, i, idx);
    for (int a = 0; a < x->shape.rank; a++)
      if (mask >> a & 1) idx[a] = 0;
    int64_t o = flatten_idx(&ks, idx);
    long double v = getd(x, i);
    if (op == TFG_OP_MAX) {
      if (v > ref[o] || isnan(v)) ref[o] = isnan(ref[o]) ? ref[o] : v;
    } else {
      ref[o] += v;
    }
    sumabs[o] += fabsl(v);
  }
  if (op == TFG_OP_MEAN)
    for (int64_t o = 0; o < nout; o++) {
      ref[o] /= count;
      sumabs[o] /= count;
    }
}

START_TEST(reduce_random_vs_reference) {
  /* Bound: the kernel sums in double, so its error is at most
   * count * 2^-53 * sum|x| (the standard recursive-summation bound), plus
   * the final rounding to the output dtype (2^-24 or 2^-53 relative).
   * MAX is exact. */
  struct {
    tfg_shape s;
    uint32_t masks[8];
    int nmasks;
  } cases[] = {
      {SHAPE(37, 50, 41), {1, 2, 4, 3, 5, 6, 7}, 7},
      {SHAPE(5, 1, 300, 1, 40), {1, 4, 16, 5, 21, 31, 2, 20}, 8},
      {SHAPE(3, 70000), {1, 2}, 2}, /* few outputs, long rows / columns */
      {SHAPE(300007), {1}, 1},      /* one output from 10 blocks */
  };
  tfg_pool *pool = tfg_pool_new(2);
  static const tfg_op_id ops[] = {TFG_OP_SUM, TFG_OP_MEAN, TFG_OP_MAX};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int d = 0; d < 2; d++) {
      tfg_dtype dt = d ? TFG_DTYPE_F64 : TFG_DTYPE_F32;
      tfg_tensor x = tensor_new(dt, cases[c].s);
      int64_t n = tfg_shape_numel(&cases[c].s);
      for (int64_t i = 0; i < n; i++) setd(&x, i, urand(c, (uint64_t)i, -1, 3));
      for (int m = 0; m < cases[c].nmasks; m++) {
        for (int o = 0; o < 3; o++) {
          uint32_t mask = cases[c].masks[m];
          bool kd = (m + o) % 2;
          tfg_tensor out = reduce_run(ops[o], &x, mask, kd, pool);
          int64_t nout = tfg_shape_numel(&out.shape);
          long double *ref = malloc((size_t)nout * sizeof *ref);
          long double *sa = malloc((size_t)nout * sizeof *sa);
          ck_assert(ref && sa);
          reduce_ref(ops[o], &x, mask, ref, sa, nout);
          int64_t count = n / nout, bad = 0;
          double eps = d ? 0x1p-53 : 0x1p-24;
          for (int64_t i = 0; i < nout; i++) {
            long double got = getd(&out, i);
            long double tol = ops[o] == TFG_OP_MAX ? 0 : count * 0x1p-53L * sa[i] + eps * fabsl(ref[i]);
            bad += !(fabsl(got - ref[i]) <= tol);
          }
          ck_assert_msg(bad == 0, "case %zu %s mask %u %s: %lld bad", c, tfg_dtype_name(dt), mask,
                        op_name(ops[o]), (long long)bad);
          free(ref);
          free(sa);
          tensor_free(&out);
        }
      }
      tensor_free(&x);
    }
  }
  tfg_pool_free(pool);
}
END_TEST

START_TEST(reduce_deterministic_across_threads) {
  /* A full f64 sum of 10^6 values cut into fixed blocks: the same bits
   * with no pool, 2 threads and 3 threads. */
  enum { N = 1000003 };
  tfg_tensor x = tensor_new(TFG_DTYPE_F64, SHAPE(N));
  for (int64_t i = 0; i < N; i++) setd(&x, i, urand(4, (uint64_t)i, -1, 1) * 1e3);
  tfg_pool *p2 = tfg_pool_new(2), *p3 = tfg_pool_new(3);
  tfg_tensor a = reduce_run(TFG_OP_SUM, &x, 1, false, NULL);
  tfg_tensor b = reduce_run(TFG_OP_SUM, &x, 1, false, p2);
  tfg_tensor c = reduce_run(TFG_OP_SUM, &x, 1, false, p3);
  ck_assert_int_eq(memcmp(a.data, b.data, 8), 0);
  ck_assert_int_eq(memcmp(a.data, c.data, 8), 0);
  tensor_free(&a);
  tensor_free(&b);
  tensor_free(&c);
  tfg_pool_free(p2);
  tfg_pool_free(p3);
  tensor_free(&x);
}
END_TEST

/* Column reductions, x[R, L] (or [B, T, L]) over every leading axis to
 * [L] (reduce.c's colsum): against the long double reference at shapes
 * around the vector width, the column tile (1024) and the short-row
 * grouping (L < 64), with one and with many row blocks, and n = 1; f32
 * and f64 within the bound of reduce_random_vs_reference, i32 exactly.
 * Then the same bits with no pool, 2 and 3 threads. */
START_TEST(reduce_columns_vs_reference) {
  static const int64_t shapes[][3] = {
      {2, 1, 0},     {5, 3, 0},     {1000, 7, 0},  {33, 8, 0},     {20011, 3, 0}, {3001, 63, 0},
      {257, 64, 0},  {999, 65, 0},  {130, 100, 0}, {40, 1023, 0},  {70, 1024, 0}, {37, 1025, 0},
      {9, 2500, 0},  {4, 33, 17},   {8, 128, 1},   {3, 41, 256},   {100003, 1, 0},
  };
  static const tfg_op_id ops[] = {TFG_OP_SUM, TFG_OP_MEAN, TFG_OP_MAX};
  static const tfg_dtype dts[] = {TFG_DTYPE_F32, TFG_DTYPE_F64, TFG_DTYPE_I32};
  tfg_pool *p2 = tfg_pool_new(2), *p3 = tfg_pool_new(3);
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    tfg_shape s = shapes[c][2] ? SHAPE(shapes[c][0], shapes[c][1], shapes[c][2]) : SHAPE(shapes[c][0], shapes[c][1]);
    uint32_t mask = shapes[c][2] ? 3 : 1;
    for (int d = 0; d < 3; d++) {
      tfg_dtype dt = dts[d];
      tfg_tensor x = tensor_new(dt, s);
      int64_t n = tfg_shape_numel(&s);
      for (int64_t i = 0; i < n; i++)
        setd(&x, i, dt == TFG_DTYPE_I32 ? floor(urand(c + 50, (uint64_t)i, -100, 100)) : urand(c + 50, (uint64_t)i, -1, 3));
      for (int o = 0; o < 3; o++) {
        if (dt == TFG_DTYPE_I32 && ops[o] == TFG_OP_MEAN) continue;
        tfg_tensor out = reduce_run(ops[o], &x, mask, o == 1, p2);
        int64_t nout = tfg_shape_numel(&out.shape), count = n / nout, bad = 0;
        long double *ref = malloc((size_t)nout * sizeof *ref), *sa = malloc((size_t)nout * sizeof *sa);
        ck_assert(ref && sa);
        reduce_ref(ops[o], &x, mask, ref, sa, nout);
        double eps = dt == TFG_DTYPE_F64 ? 0x1p-53 : 0x1p-24;
        for (int64_t i = 0; i < nout; i++) {
          long double got = getd(&out, i);
          long double tol = ops[o] == TFG_OP_MAX || dt == TFG_DTYPE_I32 ? 0 : count * 0x1p-53L * sa[i] + eps * fabsl(ref[i]);
          bad += !(fabsl(got - ref[i]) <= tol);
        }
        ck_assert_msg(bad == 0, "[%lld, %lld, %lld] %s %s: %lld bad", (long long)shapes[c][0], (long long)shapes[c][1],
                      (long long)shapes[c][2], tfg_dtype_name(dt), op_name(ops[o]), (long long)bad);
        tfg_tensor one = reduce_run(ops[o], &x, mask, o == 1, NULL), three = reduce_run(ops[o], &x, mask, o == 1, p3);
        size_t bytes = (size_t)nout * tfg_dtype_size(dt);
        ck_assert_msg(memcmp(one.data, out.data, bytes) == 0 && memcmp(three.data, out.data, bytes) == 0,
                      "[%lld, %lld, %lld] %s %s: the bits depend on the threads", (long long)shapes[c][0],
                      (long long)shapes[c][1], (long long)shapes[c][2], tfg_dtype_name(dt), op_name(ops[o]));
        tensor_free(&one);
        tensor_free(&three);
        free(ref);
        free(sa);
        tensor_free(&out);
      }
      tensor_free(&x);
    }
  }
  tfg_pool_free(p2);
  tfg_pool_free(p3);
}
END_TEST

/* ---- argmax ------------------------------------------------------------------------- */

static tfg_tensor argmax_run(const tfg_tensor *x, int64_t axis, tfg_pool *pool) {
  tfg_shape os = {.rank = 0};
  for (int i = 0; i < x->shape.rank; i++)
    if (i != axis) os.dim[os.rank++] = x->shape.dim[i];
  tfg_tensor out = tensor_new(TFG_DTYPE_I32, os);
  tfg_node nd = node_new(TFG_OP_ARGMAX, TFG_DTYPE_I32, os, 1);
  nd.attrs.axis = axis;
  run_ok(tfg_cpu_argmax, pool, &nd, x, &out);
  return out;
}

START_TEST(argmax_small) {
  /* [[1, 3, 3], [2, 2, 1]]: ties go to the first */
  float v[] = {1, 3, 3, 2, 2, 1};
  tfg_tensor x = tensor_from(TFG_DTYPE_F32, SHAPE(2, 3), v);
  tfg_tensor o = argmax_run(&x, 1, NULL);
  ck_assert(((int32_t *)o.data)[0] == 1 && ((int32_t *)o.data)[1] == 0);
  tensor_free(&o);
  o = argmax_run(&x, 0, NULL);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){1, 0, 0}, 12), 0);
  tensor_free(&o);
  tensor_free(&x);
  /* NaN counts as the maximum; the first NaN wins */
  double nv[] = {1, NAN, 5, NAN, NAN, 0, 9, 9, -INFINITY, -INFINITY, 7, 9};
  x = tensor_from(TFG_DTYPE_F64, SHAPE(3, 4), nv);
  o = argmax_run(&x, 1, NULL);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){1, 0, 3}, 12), 0);
  tensor_free(&o);
  /* along axis 0 (columns: inner > 1): [1,NaN,-inf], [NaN,0,-inf], [5,9,7], [NaN,9,9] */
  o = argmax_run(&x, 0, NULL);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){1, 0, 1, 0}, 16), 0);
  tensor_free(&o);
  tensor_free(&x);
  /* integers, and a 3-D middle axis */
  int64_t iv[] = {5, 1, 5, 7, 2, 7, -1, 8};
  x = tensor_from(TFG_DTYPE_I64, SHAPE(2, 2, 2), iv);
  o = argmax_run(&x, 1, NULL); /* [[5,1],[5,7]] -> [0,1]; [[2,7],[-1,8]] -> [0,1] */
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){0, 1, 0, 1}, 16), 0);
  tensor_free(&o);
  o = argmax_run(&x, 2, NULL);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){0, 1, 1, 1}, 16), 0);
  tensor_free(&o);
  tensor_free(&x);
  int32_t i1[] = {3};
  x = tensor_from(TFG_DTYPE_I32, SHAPE(1), i1);
  o = argmax_run(&x, 0, NULL);
  ck_assert_int_eq(((int32_t *)o.data)[0], 0);
  tensor_free(&o);
  tensor_free(&x);
}
END_TEST

START_TEST(argmax_random_vs_reference) {
  /* Small integer values (many ties) with ~1% NaN, every axis of a
   * [30, 200, 20] tensor, f32 and f64, with the pool. */
  tfg_pool *pool = tfg_pool_new(2);
  tfg_shape s = SHAPE(30, 200, 20);
  int64_t n = tfg_shape_numel(&s);
  for (int d = 0; d < 2; d++) {
    tfg_tensor x = tensor_new(d ? TFG_DTYPE_F64 : TFG_DTYPE_F32, s);
    for (int64_t i = 0; i < n; i++) {
      double u = urand(d, (uint64_t)i, 0, 1);
      setd(&x, i, u < 0.001 ? NAN : floor(u * 50));
    }
    for (int axis = 0; axis < 3; axis++) {
      tfg_tensor o = argmax_run(&x, axis, pool);
      int64_t len = s.dim[axis], inner = 1, bad = 0;
      for (int i = axis + 1; i < 3; i++) inner *= s.dim[i];
      for (int64_t k = 0; k < tfg_shape_numel(&o.shape); k++) {
        int64_t base = (k / inner) * len * inner + k % inner, best = 0;
        for (int64_t a = 0; a < len; a++) {
          double v = getd(&x, base + a * inner), b = getd(&x, base + best * inner);
          if (isnan(b)) break;
          if (isnan(v) || v > b) best = a;
        }
        bad += ((int32_t *)o.data)[k] != best;
      }
      ck_assert_msg(bad == 0, "axis %d: %lld bad", axis, (long long)bad);
      tensor_free(&o);
    }
    tensor_free(&x);
  }
  tfg_pool_free(pool);
}
END_TEST

/* ---- shape ops -------------------------------------------------------------------------- */

static tfg_tensor transpose_run(const tfg_tensor *x, const int *perm, tfg_pool *pool) {
  tfg_shape os = {.rank = x->shape.rank};
  for (int i = 0; i < os.rank; i++) os.dim[i] = x->shape.dim[perm[i]];
  tfg_tensor out = tensor_new(x->dtype, os);
  tfg_node nd = node_new(TFG_OP_TRANSPOSE, x->dtype, os, 1);
  for (int i = 0; i < os.rank; i++) nd.attrs.perm[i] = perm[i];
  run_ok(tfg_cpu_transpose, pool, &nd, x, &out);
  return out;
}

/* Checks out == transpose(x, perm) element by element (as raw bytes). */
static int64_t transpose_bad(const tfg_tensor *x, const tfg_tensor *out, const int *perm) {
  int64_t n = tfg_shape_numel(&out->shape), idx[TFG_MAX_RANK], src[TFG_MAX_RANK], bad = 0;
  size_t esz = tfg_dtype_size(x->dtype);
  for (int64_t i = 0; i < n; i++) {
    unflatten(&out->shape, i, idx);
    for (int a = 0; a < out->shape.rank; a++) src[perm[a]] = idx[a];
    int64_t j = flatten_idx(&x->shape, src);
    bad += memcmp((char *)out->data + i * (int64_t)esz, (char *)x->data + j * (int64_t)esz, esz) != 0;
  }
  return bad;
}

START_TEST(transpose_small_and_4d) {
  /* 2-D by hand: [[1,2,3],[4,5,6]]^T = [[1,4],[2,5],[3,6]] */
  float v[] = {1, 2, 3, 4, 5, 6};
  tfg_tensor x = tensor_from(TFG_DTYPE_F32, SHAPE(2, 3), v);
  tfg_tensor o = transpose_run(&x, (int[]){1, 0}, NULL);
  ck_assert(o.shape.dim[0] == 3 && o.shape.dim[1] == 2);
  ck_assert_int_eq(memcmp(o.data, (float[]){1, 4, 2, 5, 3, 6}, 24), 0);
  tensor_free(&o);
  tensor_free(&x);
  /* every permutation of a [2,3,4,5] tensor, in 1-, 2-, 4- and 8-byte dtypes */
  static const tfg_dtype dts[] = {TFG_DTYPE_BOOL, TFG_DTYPE_F16, TFG_DTYPE_I32, TFG_DTYPE_F64};
  for (int d = 0; d < 4; d++) {
    tfg_tensor t = tensor_new(dts[d], SHAPE(2, 3, 4, 5));
    size_t bytes = 120 * tfg_dtype_size(dts[d]);
    for (size_t i = 0; i < bytes; i++) ((uint8_t *)t.data)[i] = (uint8_t)(i * 7 + 3);
    int perm[4];
    for (int p = 0; p < 24; p++) { /* the p-th permutation, factorial number system */
      int avail[4] = {0, 1, 2, 3}, rest = p;
      for (int i = 0; i < 4; i++) {
        int f = i == 0 ? 6 : i == 1 ? 2 : 1, k = i < 3 ? rest / f : 0;
        rest = i < 3 ? rest % f : rest;
        perm[i] = avail[k];
        for (int j = k; j < 3 - i; j++) avail[j] = avail[j + 1];
      }
      tfg_tensor out = transpose_run(&t, perm, NULL);
      ck_assert_msg(transpose_bad(&t, &out, perm) == 0, "%s perm %d%d%d%d",
                    tfg_dtype_name(dts[d]), perm[0], perm[1], perm[2], perm[3]);
      tensor_free(&out);
    }
    tensor_free(&t);
  }
  /* a 4-D perm by hand: [1,2,1,3] perm (3,1,0,2) -> [3,2,1,1], out[l][j][0][0] = x[0][j][0][l] */
  int32_t iv[] = {0, 1, 2, 10, 11, 12};
  x = tensor_from(TFG_DTYPE_I32, SHAPE(1, 2, 1, 3), iv);
  o = transpose_run(&x, (int[]){3, 1, 0, 2}, NULL);
  ck_assert(o.shape.rank == 4 && o.shape.dim[0] == 3 && o.shape.dim[1] == 2);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){0, 10, 1, 11, 2, 12}, 24), 0);
  tensor_free(&o);
  tensor_free(&x);
  /* a bad perm is refused */
  x = tensor_new(TFG_DTYPE_F32, SHAPE(2, 3));
  o = tensor_new(TFG_DTYPE_F32, SHAPE(3, 2));
  tfg_node nd = node_new(TFG_OP_TRANSPOSE, TFG_DTYPE_F32, SHAPE(3, 2), 1);
  nd.attrs.perm[0] = 1;
  nd.attrs.perm[1] = 1;
  ck_assert_int_eq(run_kernel(tfg_cpu_transpose, NULL, &nd, &x, &o, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&o);
  tensor_free(&x);
}
END_TEST

START_TEST(transpose_large) {
  /* Sizes that are not multiples of the 32 tile, with the pool. */
  tfg_pool *pool = tfg_pool_new(2);
  struct {
    tfg_shape s;
    int perm[4];
    tfg_dtype dt;
  } cases[] = {
      {SHAPE(513, 700), {1, 0}, TFG_DTYPE_F32},
      {SHAPE(50, 61, 70), {2, 1, 0}, TFG_DTYPE_F64},
      {SHAPE(50, 61, 70), {0, 2, 1}, TFG_DTYPE_F16},
      {SHAPE(50, 61, 70), {1, 0, 2}, TFG_DTYPE_I32},
      {SHAPE(7, 33, 3, 129), {3, 0, 2, 1}, TFG_DTYPE_BOOL},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    tfg_tensor x = tensor_new(cases[c].dt, cases[c].s);
    size_t bytes = (size_t)tfg_shape_numel(&cases[c].s) * tfg_dtype_size(cases[c].dt);
    for (size_t i = 0; i < bytes; i++) ((uint8_t *)x.data)[i] = (uint8_t)tfg_rng_bits(5, i);
    tfg_tensor o = transpose_run(&x, cases[c].perm, pool);
    ck_assert_msg(transpose_bad(&x, &o, cases[c].perm) == 0, "case %zu", c);
    tensor_free(&o);
    tensor_free(&x);
  }
  tfg_pool_free(pool);
}
END_TEST

START_TEST(concat_three_middle_axis) {
  /* [2,1,3], [2,2,3], [2,3,3] along axis 1 -> [2,6,3]; input q holds 100 q + position */
  tfg_tensor in[4];
  for (int q = 0; q < 3; q++) {
    in[q] = tensor_new(TFG_DTYPE_F32, SHAPE(2, q + 1, 3));
    for (int i = 0; i < 2 * (q + 1) * 3; i++) setd(&in[q], i, 100 * q + i);
  }
  tfg_tensor out = tensor_new(TFG_DTYPE_F32, SHAPE(2, 6, 3));
  tfg_node nd = node_new(TFG_OP_CONCAT, TFG_DTYPE_F32, SHAPE(2, 6, 3), 3);
  nd.attrs.axis = 1;
  run_ok(tfg_cpu_concat, NULL, &nd, in, &out);
  const float want[] = {0,   1,   2,   100, 101, 102, 103, 104, 105,
                        200, 201, 202, 203, 204, 205, 206, 207, 208,
                        3,   4,   5,   106, 107, 108, 109, 110, 111,
                        209, 210, 211, 212, 213, 214, 215, 216, 217};
  ck_assert_int_eq(memcmp(out.data, want, sizeof want), 0);
  tensor_free(&out);
  /* along axis 0 and the last axis, with an empty input among them */
  for (int q = 0; q < 3; q++) tensor_free(&in[q]);
  int64_t iv[] = {1, 2, 3, 4};
  in[0] = tensor_from(TFG_DTYPE_I64, SHAPE(2, 2), iv);
  in[1] = tensor_new(TFG_DTYPE_I64, SHAPE(2, 0));
  in[2] = tensor_from(TFG_DTYPE_I64, SHAPE(2, 1), (int64_t[]){9, 8});
  out = tensor_new(TFG_DTYPE_I64, SHAPE(2, 3));
  nd = node_new(TFG_OP_CONCAT, TFG_DTYPE_I64, SHAPE(2, 3), 3);
  nd.attrs.axis = 1;
  run_ok(tfg_cpu_concat, NULL, &nd, in, &out);
  ck_assert_int_eq(memcmp(out.data, (int64_t[]){1, 2, 9, 3, 4, 8}, 48), 0);
  tensor_free(&out);
  tensor_free(&in[1]);
  in[1] = tensor_from(TFG_DTYPE_I64, SHAPE(1, 2), (int64_t[]){5, 6});
  out = tensor_new(TFG_DTYPE_I64, SHAPE(5, 2));
  nd = node_new(TFG_OP_CONCAT, TFG_DTYPE_I64, SHAPE(5, 2), 3);
  nd.attrs.axis = 0;
  tensor_free(&in[2]);
  in[2] = tensor_from(TFG_DTYPE_I64, SHAPE(2, 2), (int64_t[]){7, 8, 9, 10});
  run_ok(tfg_cpu_concat, NULL, &nd, in, &out);
  ck_assert_int_eq(memcmp(out.data, (int64_t[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 80), 0);
  tensor_free(&out);
  /* sizes that do not add up are refused */
  out = tensor_new(TFG_DTYPE_I64, SHAPE(6, 2));
  nd.shape = SHAPE(6, 2);
  ck_assert_int_eq(run_kernel(tfg_cpu_concat, NULL, &nd, in, &out, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&out);
  for (int q = 0; q < 3; q++) tensor_free(&in[q]);
}
END_TEST

START_TEST(concat_many_large) {
  /* 11 inputs (more than one pass of 8) of [300, k, 40] along axis 1,
   * with the pool; checked against a per-element reference. */
  tfg_pool *pool = tfg_pool_new(2);
  enum { Q = 11 };
  tfg_tensor in[Q];
  int64_t total = 0;
  for (int q = 0; q < Q; q++) {
    in[q] = tensor_new(TFG_DTYPE_F64, SHAPE(300, q % 4 + 1, 40));
    for (int64_t i = 0; i < tfg_shape_numel(&in[q].shape); i++) setd(&in[q], i, q * 1e6 + i);
    total += q % 4 + 1;
  }
  tfg_tensor out = tensor_new(TFG_DTYPE_F64, SHAPE(300, total, 40));
  tfg_node nd = node_new(TFG_OP_CONCAT, TFG_DTYPE_F64, out.shape, Q);
  nd.attrs.axis = 1;
  run_ok(tfg_cpu_concat, pool, &nd, in, &out);
  int64_t bad = 0;
  for (int64_t i = 0; i < 300; i++) {
    int64_t at = 0;
    for (int q = 0; q < Q; q++) {
      int64_t k = q % 4 + 1;
      for (int64_t j = 0; j < k; j++)
        for (int64_t l = 0; l < 40; l++)
          bad += getd(&out, (i * total + at + j) * 40 + l) != q * 1e6 + (i * k + j) * 40 + l;
      at += k;
    }
  }
  ck_assert_int_eq(bad, 0);
  tensor_free(&out);
  for (int q = 0; q < Q; q++) tensor_free(&in[q]);
  tfg_pool_free(pool);
}
END_TEST

static tfg_tensor slice_run(const tfg_tensor *x, int64_t axis, int64_t start, int64_t end,
                            tfg_pool *pool) {
  tfg_shape os = x->shape;
  os.dim[axis] = end - start;
  tfg_tensor out = tensor_new(x->dtype, os);
  tfg_node nd = node_new(TFG_OP_SLICE, x->dtype, os, 1);
  nd.attrs.axis = axis;
  nd.attrs.start = start;
  nd.attrs.end = end;
  run_ok(tfg_cpu_slice, pool, &nd, x, &out);
  return out;
}

START_TEST(slice_cases) {
  /* [3,5] = 0..14 */
  int32_t v[15];
  for (int i = 0; i < 15; i++) v[i] = i;
  tfg_tensor x = tensor_from(TFG_DTYPE_I32, SHAPE(3, 5), v);
  tfg_tensor o = slice_run(&x, 1, 1, 4, NULL);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){1, 2, 3, 6, 7, 8, 11, 12, 13}, 36), 0);
  tensor_free(&o);
  o = slice_run(&x, 0, 2, 3, NULL);
  ck_assert_int_eq(memcmp(o.data, (int32_t[]){10, 11, 12, 13, 14}, 20), 0);
  tensor_free(&o);
  o = slice_run(&x, 1, 2, 2, NULL); /* empty */
  ck_assert_int_eq(tfg_shape_numel(&o.shape), 0);
  tensor_free(&o);
  o = slice_run(&x, 0, 0, 3, NULL); /* everything */
  ck_assert_int_eq(memcmp(o.data, v, sizeof v), 0);
  tensor_free(&o);
  /* out of range is refused */
  tfg_node nd = node_new(TFG_OP_SLICE, TFG_DTYPE_I32, SHAPE(3, 3), 1);
  nd.attrs.axis = 1;
  nd.attrs.start = 3;
  nd.attrs.end = 6;
  o = tensor_new(TFG_DTYPE_I32, SHAPE(3, 3));
  ck_assert_int_eq(run_kernel(tfg_cpu_slice, NULL, &nd, &x, &o, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&o);
  tensor_free(&x);
  /* large, middle axis, with the pool: [200, 50, 30][:, 7:41, :] */
  tfg_pool *pool = tfg_pool_new(2);
  x = tensor_new(TFG_DTYPE_F32, SHAPE(200, 50, 30));
  for (int64_t i = 0; i < 300000; i++) setd(&x, i, (double)i);
  o = slice_run(&x, 1, 7, 41, pool);
  int64_t bad = 0;
  for (int64_t i = 0; i < 200; i++)
    for (int64_t j = 0; j < 34; j++)
      for (int64_t k = 0; k < 30; k++)
        bad += getd(&o, (i * 34 + j) * 30 + k) != (double)((i * 50 + j + 7) * 30 + k);
  ck_assert_int_eq(bad, 0);
  tensor_free(&o);
  tensor_free(&x);
  tfg_pool_free(pool);
}
END_TEST

START_TEST(broadcast_and_copy) {
  /* [3,1] -> [2,3,4]: out[i][j][k] = x[j] */
  float v[] = {1, 2, 3};
  tfg_tensor x = tensor_from(TFG_DTYPE_F32, SHAPE(3, 1), v);
  tfg_tensor o = tensor_new(TFG_DTYPE_F32, SHAPE(2, 3, 4));
  tfg_node nd = node_new(TFG_OP_BROADCAST, TFG_DTYPE_F32, SHAPE(2, 3, 4), 1);
  run_ok(tfg_cpu_broadcast, NULL, &nd, &x, &o);
  for (int i = 0; i < 24; i++) ck_assert(getd(&o, i) == v[(i / 4) % 3]);
  tensor_free(&o);
  tensor_free(&x);
  /* scalar -> [2,2]; [4] -> [3,4]; f16 bits kept */
  uint16_t h = 0x7E01;
  x = tensor_from(TFG_DTYPE_F16, SCALAR, &h);
  o = tensor_new(TFG_DTYPE_F16, SHAPE(2, 2));
  nd = node_new(TFG_OP_BROADCAST, TFG_DTYPE_F16, SHAPE(2, 2), 1);
  run_ok(tfg_cpu_broadcast, NULL, &nd, &x, &o);
  ck_assert_int_eq(memcmp(o.data, (uint16_t[]){h, h, h, h}, 8), 0);
  tensor_free(&o);
  tensor_free(&x);
  x = tensor_from(TFG_DTYPE_I64, SHAPE(4), (int64_t[]){1, 2, 3, 4});
  o = tensor_new(TFG_DTYPE_I64, SHAPE(3, 4));
  nd = node_new(TFG_OP_BROADCAST, TFG_DTYPE_I64, SHAPE(3, 4), 1);
  run_ok(tfg_cpu_broadcast, NULL, &nd, &x, &o);
  for (int i = 0; i < 12; i++) ck_assert(((int64_t *)o.data)[i] == i % 4 + 1);
  tensor_free(&o);
  /* to a zero-sized shape: nothing written, no error; an impossible one: refused */
  o = tensor_new(TFG_DTYPE_I64, SHAPE(0, 4));
  nd.shape = SHAPE(0, 4);
  run_ok(tfg_cpu_broadcast, NULL, &nd, &x, &o);
  tensor_free(&o);
  o = tensor_new(TFG_DTYPE_I64, SHAPE(3, 5));
  ck_assert_int_eq(run_kernel(tfg_cpu_broadcast, NULL, &nd, &x, &o, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&o);
  tensor_free(&x);
  /* large, with the pool: [300, 1, 200] -> [4, 300, 20, 200] */
  tfg_pool *pool = tfg_pool_new(2);
  x = tensor_new(TFG_DTYPE_F32, SHAPE(300, 1, 200));
  for (int i = 0; i < 60000; i++) setd(&x, i, i);
  o = tensor_new(TFG_DTYPE_F32, SHAPE(4, 300, 20, 200));
  nd = node_new(TFG_OP_BROADCAST, TFG_DTYPE_F32, o.shape, 1);
  run_ok(tfg_cpu_broadcast, pool, &nd, &x, &o);
  int64_t bad = 0, n = tfg_shape_numel(&o.shape), idx[4];
  for (int64_t i = 0; i < n; i++) {
    unflatten(&o.shape, i, idx);
    bad += getd(&o, i) != (double)(idx[1] * 200 + idx[3]);
  }
  ck_assert_int_eq(bad, 0);
  tensor_free(&o);
  /* reshape/flatten: the same bytes */
  tfg_tensor r = tensor_new(TFG_DTYPE_F32, SHAPE(300, 200));
  nd = node_new(TFG_OP_RESHAPE, TFG_DTYPE_F32, r.shape, 1);
  run_ok(tfg_cpu_copy, pool, &nd, &x, &r);
  ck_assert_int_eq(memcmp(r.data, x.data, 60000 * 4), 0);
  nd.op = TFG_OP_FLATTEN;
  memset(r.data, 0, 60000 * 4);
  run_ok(tfg_cpu_copy, NULL, &nd, &x, &r);
  ck_assert_int_eq(memcmp(r.data, x.data, 60000 * 4), 0);
  tensor_free(&r);
  r = tensor_new(TFG_DTYPE_F32, SHAPE(7));
  nd.shape = r.shape;
  ck_assert_int_eq(run_kernel(tfg_cpu_copy, NULL, &nd, &x, &r, NULL, 0), TFG_ERR_SHAPE);
  tensor_free(&r);
  tensor_free(&x);
  tfg_pool_free(pool);
}
END_TEST

/* ---- const and initializers ----------------------------------------------------------- */

START_TEST(const_copies_data) {
  static const double v[] = {1.5, -2, 3e100, 0};
  tfg_tensor o = tensor_new(TFG_DTYPE_F64, SHAPE(2, 2));
  tfg_node nd = node_new(TFG_OP_CONST, TFG_DTYPE_F64, SHAPE(2, 2), 0);
  nd.attrs.data = v;
  run_ok(tfg_cpu_const, NULL, &nd, NULL, &o);
  ck_assert_int_eq(memcmp(o.data, v, sizeof v), 0);
  tensor_free(&o);
  uint8_t b[] = {1, 0, 1};
  o = tensor_new(TFG_DTYPE_BOOL, SHAPE(3));
  nd = node_new(TFG_OP_CONST, TFG_DTYPE_BOOL, SHAPE(3), 0);
  nd.attrs.data = b;
  run_ok(tfg_cpu_const, NULL, &nd, NULL, &o);
  ck_assert_int_eq(memcmp(o.data, b, 3), 0);
  tensor_free(&o);
}
END_TEST

/* Runs INIT on a fresh tensor of dtype dt and shape s. */
static tfg_tensor init_run(tfg_dtype dt, tfg_shape s, tfg_attrs a, tfg_pool *pool) {
  tfg_tensor t = tensor_new(dt, s);
  memset(t.data, 0xAB, (size_t)tfg_shape_numel(&s) * tfg_dtype_size(dt)); /* not zeros */
  tfg_node nd = node_new(TFG_OP_INIT, dt, s, 0);
  nd.attrs = a;
  run_ok(tfg_cpu_init, pool, &nd, NULL, &t);
  return t;
}

static void mean_std(const tfg_tensor *t, double *mean, double *sd, double *lo, double *hi) {
  int64_t n = tfg_shape_numel(&t->shape);
  long double s = 0, s2 = 0;
  *lo = INFINITY;
  *hi = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double v = getd(t, i);
    s += v;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
  }
  *mean = (double)(s / n);
  for (int64_t i = 0; i < n; i++) s2 += (getd(t, i) - *mean) * (getd(t, i) - *mean);
  *sd = sqrt((double)(s2 / (n - 1)));
}

START_TEST(init_constants) {
  static const tfg_dtype dts[] = {TFG_DTYPE_F32, TFG_DTYPE_F64, TFG_DTYPE_I32, TFG_DTYPE_I64,
                                  TFG_DTYPE_BOOL};
  for (int d = 0; d < 5; d++) {
    tfg_tensor t = init_run(dts[d], SHAPE(3, 5), (tfg_attrs){.init = TFG_INIT_ZEROS}, NULL);
    for (int i = 0; i < 15; i++) ck_assert(getd(&t, i) == 0);
    tensor_free(&t);
    t = init_run(dts[d], SHAPE(3, 5), (tfg_attrs){.init = TFG_INIT_ONES}, NULL);
    for (int i = 0; i < 15; i++) ck_assert(getd(&t, i) == 1);
    tensor_free(&t);
    t = init_run(dts[d], SHAPE(70000), (tfg_attrs){.init = TFG_INIT_FULL, .value = -2.75}, NULL);
    double want = d < 2 ? -2.75 : d < 4 ? -2 : 1; /* ints truncate; bool: nonzero */
    int64_t bad = 0;
    for (int i = 0; i < 70000; i++) bad += getd(&t, i) != want;
    ck_assert_int_eq(bad, 0);
    tensor_free(&t);
  }
  /* full on i32 saturates instead of overflowing */
  tfg_tensor t = init_run(TFG_DTYPE_I32, SHAPE(2), (tfg_attrs){.init = TFG_INIT_FULL, .value = 1e12},
                          NULL);
  ck_assert(((int32_t *)t.data)[0] == INT32_MAX);
  tensor_free(&t);
  /* a scalar */
  t = init_run(TFG_DTYPE_F64, SCALAR, (tfg_attrs){.init = TFG_INIT_FULL, .value = 7}, NULL);
  ck_assert(getd(&t, 0) == 7);
  tensor_free(&t);
  /* random initializers need a float dtype (f16 and bf16 are filled too:
   * tests/unit/test_kernels_half.c) */
  t = tensor_new(TFG_DTYPE_I32, SHAPE(4));
  tfg_node nd = node_new(TFG_OP_INIT, TFG_DTYPE_I32, SHAPE(4), 0);
  nd.attrs.init = TFG_INIT_NORMAL;
  char msg[128];
  ck_assert_int_eq(run_kernel(tfg_cpu_init, NULL, &nd, NULL, &t, msg, sizeof msg), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(msg, "normal"));
  tensor_free(&t);
  t = tensor_new(TFG_DTYPE_BF16, SHAPE(4));
  tfg_attrs a = {.init = TFG_INIT_ONES};
  ck_assert_int_eq(tfg_cpu_init_fill(&t, &a), TFG_OK);
  ck_assert_int_eq(((uint16_t *)t.data)[3], 0x3F80); /* bf16 1.0 */
  tensor_free(&t);
}
END_TEST

START_TEST(init_normal_statistics) {
  /* 100k samples of normal(3, 2): the sample mean has standard error
   * 2/sqrt(1e5) = 0.0063 and the sample std ~2/sqrt(2e5) = 0.0045; the
   * bounds are 5 standard errors (a false failure is ~1e-6 likely; the
   * stream is fixed, so the test is deterministic anyway). Also the
   * fraction within one std is 68.27% +- 5 * 0.0015. */
  enum { N = 100000 };
  tfg_pool *pool = tfg_pool_new(2);
  static const tfg_dtype dts[] = {TFG_DTYPE_F32, TFG_DTYPE_F64};
  for (int d = 0; d < 2; d++) {
    tfg_attrs a = {.init = TFG_INIT_NORMAL, .a = 3, .b = 2, .seed = 42};
    tfg_tensor t = init_run(dts[d], SHAPE(N), a, pool);
    double mean, sd, lo, hi;
    mean_std(&t, &mean, &sd, &lo, &hi);
    ck_assert_msg(fabs(mean - 3) < 5 * 2 / sqrt(N), "mean %g", mean);
    ck_assert_msg(fabs(sd - 2) < 5 * 2 / sqrt(2.0 * N), "std %g", sd);
    int within = 0;
    for (int i = 0; i < N; i++) within += fabs(getd(&t, i) - 3) < 2;
    ck_assert_msg(fabs(within / (double)N - 0.6827) < 5 * 0.0015, "within %d", within);
    /* element i is exactly mean + std * tfg_rng_normal(seed, i) */
    for (int i = 0; i < 100; i++) {
      double want = 3 + 2 * tfg_rng_normal(42, (uint64_t)i);
      ck_assert(getd(&t, i) == (d ? want : (double)(float)want));
    }
    tensor_free(&t);
  }
  tfg_pool_free(pool);
}
END_TEST

START_TEST(init_uniform_glorot_he) {
  enum { N = 100000 };
  tfg_pool *pool = tfg_pool_new(2);
  /* uniform(-1, 5): all in [-1, 5); mean 2 with standard error
   * 6/sqrt(12 N) = 0.0055, bound 5 of those; the extremes come within
   * 0.001 of the ends (missing by more has probability (1 - 1/6000)^N ~ e^-16) */
  tfg_attrs a = {.init = TFG_INIT_UNIFORM, .a = -1, .b = 5, .seed = 7};
  tfg_tensor t = init_run(TFG_DTYPE_F64, SHAPE(N), a, pool);
  double mean, sd, lo, hi;
  mean_std(&t, &mean, &sd, &lo, &hi);
  ck_assert(lo >= -1 && hi < 5 && lo < -0.999 && hi > 4.999);
  ck_assert_msg(fabs(mean - 2) < 5 * 6 / sqrt(12.0 * N), "mean %g", mean);
  ck_assert_msg(fabs(sd - 6 / sqrt(12.0)) < 0.01, "sd %g", sd);
  tensor_free(&t);
  /* glorot on a [200, 300] matmul weight: l = sqrt(6 / 500); every |v| <= l
   * (as f32, rounding is monotonic so (float)l bounds it), the extremes
   * reach 0.999 l, variance l^2 / 3 */
  a = (tfg_attrs){.init = TFG_INIT_GLOROT, .seed = 1};
  t = init_run(TFG_DTYPE_F32, SHAPE(200, 300), a, pool);
  double l = sqrt(6.0 / 500);
  mean_std(&t, &mean, &sd, &lo, &hi);
  ck_assert(lo >= -(double)(float)l && hi <= (double)(float)l);
  ck_assert(lo < -0.999 * l && hi > 0.999 * l);
  ck_assert_msg(fabs(sd - l / sqrt(3)) < 0.01 * l, "sd %g", sd);
  ck_assert(fabs(mean) < 5 * l / sqrt(3 * 60000.0));
  tensor_free(&t);
  /* glorot on a conv weight [64, 32, 3, 3]: fan_in 288, fan_out 576 */
  t = init_run(TFG_DTYPE_F64, SHAPE(64, 32, 3, 3), a, pool);
  l = sqrt(6.0 / (288 + 576));
  mean_std(&t, &mean, &sd, &lo, &hi);
  ck_assert(lo >= -l && hi <= l && hi > 0.99 * l);
  tensor_free(&t);
  /* he on the conv weight: std sqrt(2 / 288); 18432 samples, so the
   * sample std is within 5 * 1/sqrt(2 * 18432) = 2.6% of it */
  a = (tfg_attrs){.init = TFG_INIT_HE, .seed = 3};
  t = init_run(TFG_DTYPE_F32, SHAPE(64, 32, 3, 3), a, pool);
  mean_std(&t, &mean, &sd, &lo, &hi);
  double s = sqrt(2.0 / 288);
  ck_assert_msg(fabs(sd / s - 1) < 0.026, "he sd %g want %g", sd, s);
  tensor_free(&t);
  /* he on a [784, 10] matmul weight: fan_in is 784 */
  t = init_run(TFG_DTYPE_F64, SHAPE(784, 100), a, pool);
  mean_std(&t, &mean, &sd, &lo, &hi);
  ck_assert_msg(fabs(sd / sqrt(2.0 / 784) - 1) < 5 / sqrt(2 * 78400.0), "he sd %g", sd);
  tensor_free(&t);
  tfg_pool_free(pool);
}
END_TEST

START_TEST(init_seeds) {
  /* the same seed gives the same values (with or without a pool, through
   * INIT or tfg_cpu_init_fill); different seeds give different values */
  enum { N = 50000 };
  tfg_pool *pool = tfg_pool_new(2);
  tfg_attrs a = {.init = TFG_INIT_NORMAL, .a = 0, .b = 1, .seed = 11};
  tfg_tensor t1 = init_run(TFG_DTYPE_F32, SHAPE(N), a, pool);
  tfg_tensor t2 = init_run(TFG_DTYPE_F32, SHAPE(N), a, NULL);
  tfg_tensor t3 = tensor_new(TFG_DTYPE_F32, SHAPE(N));
  ck_assert_int_eq(tfg_cpu_init_fill(&t3, &a), TFG_OK);
  ck_assert_int_eq(memcmp(t1.data, t2.data, N * 4), 0);
  ck_assert_int_eq(memcmp(t1.data, t3.data, N * 4), 0);
  a.seed = 12;
  tfg_tensor t4 = init_run(TFG_DTYPE_F32, SHAPE(N), a, pool);
  int same = 0;
  for (int i = 0; i < N; i++) same += ((float *)t1.data)[i] == ((float *)t4.data)[i];
  ck_assert_int_lt(same, 5);
  /* uniform and glorot too */
  a = (tfg_attrs){.init = TFG_INIT_GLOROT, .seed = 5};
  tfg_tensor g1 = init_run(TFG_DTYPE_F64, SHAPE(100, 500), a, pool);
  tfg_tensor g2 = init_run(TFG_DTYPE_F64, SHAPE(100, 500), a, NULL);
  ck_assert_int_eq(memcmp(g1.data, g2.data, N * 8), 0);
  a.seed = 6;
  tfg_tensor g3 = init_run(TFG_DTYPE_F64, SHAPE(100, 500), a, NULL);
  same = 0;
  for (int i = 0; i < N; i++) same += ((double *)g1.data)[i] == ((double *)g3.data)[i];
  ck_assert_int_eq(same, 0);
  tensor_free(&t1);
  tensor_free(&t2);
  tensor_free(&t3);
  tensor_free(&t4);
  tensor_free(&g1);
  tensor_free(&g2);
  tensor_free(&g3);
  tfg_pool_free(pool);
}
END_TEST

/* ---- the registry ------------------------------------------------------------------- */

/* Every op has a CPU kernel but the sources the executor places itself,
 * listed here by hand: a row dropped from a tfg_cpu_register_* (or a new
 * op without a CPU kernel) fails, as does a kernel for a listed source. */
START_TEST(registry_has_every_kernel) {
  static const tfg_op_id none[] = {TFG_OP_PARAM, TFG_OP_INPUT, TFG_OP_STATE};
  int with = 0;
  for (int op = 0; op < TFG_OP_COUNT; op++) {
    bool listed = false;
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) listed |= none[i] == (tfg_op_id)op;
    ck_assert_msg((tfg_cpu_kernel(op) == NULL) == listed, "op %s: %s CPU kernel", tfg_op_get((tfg_op_id)op)->name,
                  listed ? "has a" : "has no");
    with += !listed;
  }
  ck_assert_int_eq(with, TFG_OP_COUNT - 3);
  ck_assert_ptr_null(tfg_cpu_kernel(-1));
  ck_assert_ptr_null(tfg_cpu_kernel(TFG_OP_COUNT));
  /* ops of one family share the family's kernel */
  ck_assert(tfg_cpu_kernel(TFG_OP_LOG_SOFTMAX) == tfg_cpu_softmax);
  ck_assert(tfg_cpu_kernel(TFG_OP_AVG_POOL_GRAD) == tfg_cpu_pool_grad);
  ck_assert(tfg_cpu_kernel(TFG_OP_FLATTEN) == tfg_cpu_copy);
}
END_TEST

/* tests/unit/test_kernels_half.c: every op x dtype, and f16/bf16 against f64. */
TCase *tcase_kernels_half(void);

Suite *suite_kernels_basic(void) {
  Suite *s = suite_create("kernels_basic");
  suite_add_tcase(s, tcase_kernels_half());
  TCase *tc = tcase_create("elementwise");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, unary_small);
  tcase_add_test(tc, unary_int);
  tcase_add_test(tc, unary_random_vs_reference);
  tcase_add_test(tc, binary_small);
  tcase_add_test(tc, binary_int);
  tcase_add_test(tc, binary_bool_compare);
  tcase_add_test(tc, binary_broadcast_small);
  tcase_add_test(tc, binary_random_vs_reference);
  tcase_add_test(tc, where_small_and_large);
  suite_add_tcase(s, tc);
  tc = tcase_create("cast");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, cast_f16_special_values);
  tcase_add_test(tc, cast_bf16_special_values);
  tcase_add_test(tc, cast_16bit_exhaustive);
  tcase_add_test(tc, cast_16bit_random_vs_reference);
  tcase_add_test(tc, cast_numeric);
  tcase_add_test(tc, cast_large_round_trip);
  suite_add_tcase(s, tc);
  tc = tcase_create("reduce");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reduce_small);
  tcase_add_test(tc, reduce_several_axes);
  tcase_add_test(tc, reduce_empty);
  tcase_add_test(tc, reduce_random_vs_reference);
  tcase_add_test(tc, reduce_deterministic_across_threads);
  tcase_add_test(tc, reduce_columns_vs_reference);
  tcase_add_test(tc, argmax_small);
  tcase_add_test(tc, argmax_random_vs_reference);
  suite_add_tcase(s, tc);
  tc = tcase_create("shape");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, transpose_small_and_4d);
  tcase_add_test(tc, transpose_large);
  tcase_add_test(tc, concat_three_middle_axis);
  tcase_add_test(tc, concat_many_large);
  tcase_add_test(tc, slice_cases);
  tcase_add_test(tc, broadcast_and_copy);
  suite_add_tcase(s, tc);
  tc = tcase_create("init");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, const_copies_data);
  tcase_add_test(tc, init_constants);
  tcase_add_test(tc, init_normal_statistics);
  tcase_add_test(tc, init_uniform_glorot_he);
  tcase_add_test(tc, init_seeds);
  suite_add_tcase(s, tc);
  tc = tcase_create("registry");
  tcase_add_test(tc, registry_has_every_kernel);
  suite_add_tcase(s, tc);
  return s;
}
