/* tests/unit/test_cpu_math.c: the CPU kernels' two math layers under
 * every kernel: tfg_cpu_gemm (kernels/cpu/blas.h), which splits matrix
 * products over the pool, and the row-wise erfc/exp (kernels/cpu/vmath.h).
 *
 * gemm: every split (by rows, by columns, none), both transposes, beta 0
 * and 1, f32 and f64, against a long double reference within Higham's
 * dot-product bound (2 K u times sum |a b|, as test_kernels_nn's
 * matmul); c is a window of a wider matrix (ldc > n), whose other
 * columns must stay untouched; the same pool twice gives the same bits,
 * and a pool of one thread gives gemm's own bits.
 *
 * vmath: erfc and exp against erfcl/expl over their whole useful ranges
 * within 4 ulp (libmvec documents 2 or less; glibc's scalar ones 1); the
 * IEEE special values, exp's arguments far below its underflow (masked
 * attention scores) giving +0; the f32 gelu rows against the long double
 * formulas; and a row cut anywhere gives the bits of the whole row (the
 * property fused and unfused gelu rely on). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/vmath.h"
#include "tests/unit/unit.h"

/* ---- gemm ---------------------------------------------------------------- */

typedef struct gemm_case {
  int64_t m, n, k;
} gemm_case;

/* m >= n: split by rows; n > m: by columns; the last is too small to
 * split at all. 700, 520 and 300 are not multiples of the 16-wide blocks. */
static const gemm_case GEMMS[] = {{700, 96, 300}, {96, 700, 300}, {520, 600, 40}, {300, 200, 64}, {40, 30, 20}};
enum { NGEMMS = sizeof GEMMS / sizeof GEMMS[0] };

static double value(uint64_t seed, int64_t i) { return (double)(float)(2 * tfg_rng_uniform(seed, (uint64_t)i) - 1); }

static void put(bool f64, void *p, int64_t i, double v) {
  if (f64) ((double *)p)[i] = v;
  else ((float *)p)[i] = (float)v;
}
static double at(bool f64, const void *p, int64_t i) {
  return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

/* _i: case, transposes (2 bits), beta (1 bit), dtype (1 bit). */
START_TEST(gemm_splits_match_reference) {
  const gemm_case *gc = &GEMMS[_i % NGEMMS];
  int v = _i / NGEMMS;
  bool ta = v & 1, tb = v & 2, beta1 = v & 4, f64 = v & 8;
  int64_t m = gc->m, n = gc->n, k = gc->k, ldc = n + 3;
  int64_t lda = ta ? m : k, ldb = tb ? k : n;
  size_t es = f64 ? sizeof(double) : sizeof(float);
  void *a = malloc((size_t)(m * k) * es), *b = malloc((size_t)(k * n) * es);
  void *c0 = malloc((size_t)(m * ldc) * es), *c[4];
  for (int64_t i = 0; i < m * k; i++) put(f64, a, i, value(1, i));
  for (int64_t i = 0; i < k * n; i++) put(f64, b, i, value(2, i));
  for (int64_t i = 0; i < m * ldc; i++) put(f64, c0, i, value(3, i));
  /* c[0]: gemm itself; c[1]: a pool of one; c[2], c[3]: two threads twice */
  tfg_pool *p1 = tfg_pool_new(1), *p2 = tfg_pool_new(2);
  tfg_pool *pools[4] = {NULL, p1, p2, p2};
  for (int r = 0; r < 4; r++) {
    c[r] = malloc((size_t)(m * ldc) * es);
    memcpy(c[r], c0, (size_t)(m * ldc) * es);
    if (r == 0)
      tfg_cpu_gemm_here(f64, ta, tb, m, n, k, a, lda, b, ldb, beta1, c[r], ldc);
    else
      tfg_cpu_gemm(pools[r], f64, ta, tb, m, n, k, a, lda, b, ldb, beta1, c[r], ldc);
  }
  size_t bytes = (size_t)(m * ldc) * es;
  ck_assert_msg(memcmp(c[0], c[1], bytes) == 0, "a pool of one thread changed gemm's bits");
  ck_assert_msg(memcmp(c[2], c[3], bytes) == 0, "two runs on the same pool differ");
  /* One assertion at the end: Check records every ck_assert it passes,
   * too slow for a million elements. */
  double u = f64 ? 0x1p-53 : 0x1p-24;
  int64_t bad = 0, bi = -1, bj = -1, br = -1;
  double bgot = 0, bwant = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < ldc; j++) {
      double c_old = at(f64, c0, i * ldc + j);
      long double s = beta1 ? c_old : 0, mag = beta1 ? fabs(c_old) : 0;
      for (int64_t l = 0; j < n && l < k; l++) {
        long double x = at(f64, a, ta ? l * lda + i : i * lda + l);
        long double y = at(f64, b, tb ? j * ldb + l : l * ldb + j);
        s += x * y;
        mag += fabsl(x * y);
      }
      /* outside the window (j >= n): untouched, c_old exactly */
      double want = j < n ? (double)s : c_old;
      double tol = j < n ? 2.0 * (double)(k + 1) * u * (double)mag + 1e-300 : 0;
      for (int r = 0; r < 4; r++) {
        double got = at(f64, c[r], i * ldc + j);
        if (fabs(got - want) <= tol) continue;
        if (bad++ == 0) bi = i, bj = j, br = r, bgot = got, bwant = want;
      }
    }
  ck_assert_msg(bad == 0,
                "gemm %lldx%lldx%lld ta %d tb %d beta %d %s: %lld wrong, first run %lld c[%lld][%lld] = %.17g, "
                "want %.17g",
                (long long)m, (long long)n, (long long)k, ta, tb, beta1, f64 ? "f64" : "f32", (long long)bad,
                (long long)br, (long long)bi, (long long)bj, bgot, bwant);
  for (int r = 0; r < 4; r++) free(c[r]);
  free(a);
  free(b);
  free(c0);
  tfg_pool_free(p1);
  tfg_pool_free(p2);
}
END_TEST

/* ---- vmath --------------------------------------------------------------- */

enum { NV = 20011 };

/* Relative error in units of the double ulp of the exact value. */
static double ulps(double got, long double want) {
  if (want == 0) return got == 0 ? 0 : INFINITY;
  return (double)fabsl(((long double)got - want) / want) / DBL_EPSILON;
}

START_TEST(vmath_erfc_exp_within_4_ulp) {
  double *x = malloc(NV * sizeof *x), *y = malloc(NV * sizeof *y);
  /* erfc: [-6, 26.5]: from 2 down to ~1e-307, still normal */
  for (int i = 0; i < NV; i++) x[i] = -6 + 32.5 * tfg_rng_uniform(7, (uint64_t)i);
  tfg_vm_erfc(x, y, NV);
  for (int i = 0; i < NV; i++) {
    double e = ulps(y[i], erfcl(x[i]));
    if (e > 4)
      ck_assert_msg(0, "%s erfc(%.17g) = %.17g, want %.17Lg (%.2f ulp)", tfg_vm_impl(), x[i], y[i],
                    erfcl(x[i]), e);
  }
  /* exp: [-700, 700], normal results */
  for (int i = 0; i < NV; i++) x[i] = -700 + 1400 * tfg_rng_uniform(8, (uint64_t)i);
  tfg_vm_exp(x, y, NV);
  for (int i = 0; i < NV; i++) {
    double e = ulps(y[i], expl(x[i]));
    if (e > 4)
      ck_assert_msg(0, "%s exp(%.17g) = %.17g, want %.17Lg (%.2f ulp)", tfg_vm_impl(), x[i], y[i],
                  expl(x[i]), e);
  }
  free(x);
  free(y);
}
END_TEST

START_TEST(vmath_special_values) {
  double x[8] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, -1e9, -746, -745}, y[8];
  tfg_vm_erfc(x, y, 5);
  ck_assert(isnan(y[0]));
  ck_assert(y[1] == 0 && y[2] == 2 && y[3] == 1 && y[4] == 1);
  tfg_vm_exp(x, y, 8);
  ck_assert(isnan(y[0]));
  ck_assert(y[1] == INFINITY && y[2] == 0 && y[3] == 1 && y[4] == 1);
  ck_assert(y[5] == 0 && y[6] == 0 && y[7] == 0x1p-1074); /* exp(-745) is the least subnormal */
}
END_TEST

/* Relative error in units of the float ulp (2^-23) of the exact value. */
static double ulpsf(float got, long double want) {
  if (want == 0) return got == 0 ? 0 : INFINITY;
  return (double)fabsl(((long double)got - want) / want) / FLT_EPSILON;
}

/* gelu and its gradient in f32 against the long double formulas over
 * [-9, 9] (gelu's tails included): gelu within 1 ulp of its value (in
 * double, rounded once: 0.5 measured); the gradient dy (Phi + x phi)
 * within 4 ulp of dy (Phi + |x| phi) (its two terms cancel for x < 0,
 * and each carries its function's error; measured 2.0 on AVX2's float
 * lanes, 0.5 in double). */
START_TEST(vmath_gelu_f32_rows) {
  float *x = malloc(NV * sizeof *x), *dy = malloc(NV * sizeof *dy), *y = malloc(NV * sizeof *y);
  for (int i = 0; i < NV; i++) {
    x[i] = (float)(-9 + 18 * tfg_rng_uniform(12, (uint64_t)i));
    dy[i] = (float)(0.5 + tfg_rng_uniform(13, (uint64_t)i));
  }
  tfg_vm_gelu_f32(x, y, NV);
  double worst = 0;
  for (int i = 0; i < NV; i++) worst = fmax(worst, ulpsf(y[i], 0.5L * x[i] * erfcl(-x[i] / sqrtl(2))));
  ck_assert_msg(worst <= 1, "%s gelu f32: %.2f ulp", tfg_vm_impl(), worst);
  tfg_vm_gelu_grad_f32(x, dy, y, NV);
  worst = 0;
  for (int i = 0; i < NV; i++) {
    long double v = x[i], cdf = 0.5L * erfcl(-v / sqrtl(2)), phi = expl(-v * v / 2) / sqrtl(2 * M_PI);
    long double want = dy[i] * (cdf + v * phi), scale = dy[i] * (cdf + fabsl(v) * phi);
    worst = fmax(worst, (double)(fabsl(y[i] - want) / scale) / FLT_EPSILON);
  }
  ck_assert_msg(worst <= 4, "%s gelu_grad f32: %.2f ulp of its terms", tfg_vm_impl(), worst);
  float sx[4] = {NAN, INFINITY, 0.0f, -0.0f}, sy[4];
  tfg_vm_gelu_f32(sx, sy, 4);
  ck_assert(isnan(sy[0]) && sy[1] == INFINITY && sy[2] == 0 && sy[3] == 0);
  free(x);
  free(dy);
  free(y);
}
END_TEST

/* Any cut of a row gives the whole row's bits: the tail of each piece
 * goes through a padded vector like every other element. */
typedef void (*rowd_fn)(const double *, double *, int64_t);
typedef void (*rowf_fn)(const float *, float *, int64_t);
/* gelu_grad's rows with dy fixed: the CUT_ROW signature */
static const float *cut_dy;
static void gelu_grad_cut(const float *x, float *y, int64_t n) { tfg_vm_gelu_grad_f32(x, cut_dy, y, n); }

/* Feeds fn the row x[0..N) whole, into whole, and then in pieces of 1,
 * 2, 3, 5, 7, 64 and 255 elements, into cut (gelu_grad_cut's dy moves
 * with the piece). */
#define CUT_ROW(fn, x, whole, cut, N)                            \
  do {                                                           \
    fn(x, whole, N);                                             \
    static const int pieces_[] = {1, 2, 3, 5, 7, 64, 255};       \
    int at_ = 0, p_ = 0;                                         \
    while (at_ < N) {                                            \
      int len_ = pieces_[p_++ % 7];                              \
      if (len_ > N - at_) len_ = N - at_;                        \
      cut_dy += at_;                                             \
      fn(x + at_, cut + at_, len_);                              \
      cut_dy -= at_;                                             \
      at_ += len_;                                               \
    }                                                            \
  } while (0)

/* Any cut of a row gives the whole row's bits: the tail of each piece
 * goes through a padded vector like every other element. */
START_TEST(vmath_rows_cut_anywhere) {
  enum { N = 1003 };
  double x[N], whole[N], cut[N];
  float xf[N], wf[N], cf[N];
  static float dyf[N];
  for (int i = 0; i < N; i++) {
    x[i] = -5 + 10 * tfg_rng_uniform(9, (uint64_t)i);
    xf[i] = (float)x[i];
    dyf[i] = 1.0f - (float)i / 4096;
  }
  cut_dy = dyf;
  static const rowd_fn fd[] = {tfg_vm_exp, tfg_vm_erfc, tfg_vm_gelu_f64};
  static const char *nd[] = {"exp", "erfc", "gelu f64"};
  for (int f = 0; f < 3; f++) {
    CUT_ROW(fd[f], x, whole, cut, N);
    ck_assert_msg(memcmp(whole, cut, sizeof whole) == 0, "%s: a cut row differs from the whole", nd[f]);
  }
  static const rowf_fn ff[] = {tfg_vm_gelu_f32, gelu_grad_cut};
  static const char *nf[] = {"gelu f32", "gelu_grad f32"};
  for (int f = 0; f < 2; f++) {
    CUT_ROW(ff[f], xf, wf, cf, N);
    ck_assert_msg(memcmp(wf, cf, sizeof wf) == 0, "%s: a cut row differs from the whole", nf[f]);
  }
}
END_TEST

Suite *suite_cpu_math(void) {
  Suite *s = suite_create("cpu_math");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, gemm_splits_match_reference, 0, NGEMMS * 16);
  tcase_add_test(tc, vmath_erfc_exp_within_4_ulp);
  tcase_add_test(tc, vmath_special_values);
  tcase_add_test(tc, vmath_gelu_f32_rows);
  tcase_add_test(tc, vmath_rows_cut_anywhere);
  suite_add_tcase(s, tc);
  return s;
}
