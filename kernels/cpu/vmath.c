/* kernels/cpu/vmath.c: row-wise erfc and exp over libmvec (contract and
 * accuracy: kernels/cpu/vmath.h). */
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>

#include "kernels/cpu/config.h"

#if defined(__x86_64__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)) && !defined(TFG_NO_LIBMVEC)
#define TFG_LIBMVEC 1
#else
#define TFG_LIBMVEC 0
#endif

typedef void (*row_fn)(const double *x, double *y, int64_t n);

static void erfc_libm(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = erfc(x[i]);
}
static void exp_libm(const double *x, double *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = exp(x[i]);
}

/* Below these, exp rounds to +0: e^-745.2 is under half the smallest
 * double subnormal (2^-1075 = e^-745.13), e^-104 under half the smallest
 * float one (2^-150 = e^-103.97). */
#define EXP_ZERO (-745.2)
#define EXPF_ZERO (-104.0f)

#if TFG_LIBMVEC
#include <immintrin.h>

/* libmvec's entry points, named by the x86-64 vector function ABI:
 * _ZGV, the ISA (b SSE, d AVX2), N (unmasked), the lanes, v (one vector
 * argument). Declared here because math.h declares them only under
 * -ffast-math, which this build does not use. */
__m128d _ZGVbN2v_erfc(__m128d x);
__m128d _ZGVbN2v_exp(__m128d x);

/* libmvec sends a vector with any lane outside its fast range through a
 * scalar path, lane by lane, at tens of times the cost; masked attention
 * scores (x - max with x = -1e9: half of a causal softmax) are such
 * lanes. Their exp is +0 on any path, so those lanes get a harmless
 * argument (0) and a 0 result: andnot with the lanes' mask. NaN compares
 * false and goes through. */
static inline __m128d exp_sse(__m128d v) {
  __m128d z = _mm_cmplt_pd(v, _mm_set1_pd(EXP_ZERO));
  return _mm_andnot_pd(z, _ZGVbN2v_exp(_mm_andnot_pd(z, v)));
}

/* A row through FN, W elements of T at a time, LOAD and STORE unaligned.
 * Elements past the last whole vector go through a zero-padded vector
 * too, so every element of a row is computed by the same code whatever
 * n is and wherever the row was cut. */
#define ROW(NAME, T, FN, W, LOAD, STORE)                           \
  static void NAME(const T *x, T *y, int64_t n) {                  \
    int64_t i = 0;                                                 \
    for (; i + W <= n; i += W) STORE(y + i, FN(LOAD(x + i)));      \
    if (i < n) {                                                   \
      T t[W] = {0};                                                \
      for (int64_t k = i; k < n; k++) t[k - i] = x[k];             \
      STORE(t, FN(LOAD(t)));                                       \
      for (int64_t k = i; k < n; k++) y[k] = t[k - i];             \
    }                                                              \
  }
ROW(erfc_row_sse, double, _ZGVbN2v_erfc, 2, _mm_loadu_pd, _mm_storeu_pd)
ROW(exp_row_sse, double, exp_sse, 2, _mm_loadu_pd, _mm_storeu_pd)

#pragma GCC push_options
#pragma GCC target("avx2,fma")
__m256d _ZGVdN4v_erfc(__m256d x);
__m256d _ZGVdN4v_exp(__m256d x);
__m256 _ZGVdN8v_erfcf(__m256 x);
__m256 _ZGVdN8v_expf(__m256 x);

static inline __m256d exp_avx2(__m256d v) {
  __m256d z = _mm256_cmp_pd(v, _mm256_set1_pd(EXP_ZERO), _CMP_LT_OQ);
  return _mm256_andnot_pd(z, _ZGVdN4v_exp(_mm256_andnot_pd(z, v)));
}
static inline __m256 expf_avx2(__m256 v) {
  __m256 z = _mm256_cmp_ps(v, _mm256_set1_ps(EXPF_ZERO), _CMP_LT_OQ);
  return _mm256_andnot_ps(z, _ZGVdN8v_expf(_mm256_andnot_ps(z, v)));
}

ROW(erfc_row_avx2, double, _ZGVdN4v_erfc, 4, _mm256_loadu_pd, _mm256_storeu_pd)
ROW(exp_row_avx2, double, exp_avx2, 4, _mm256_loadu_pd, _mm256_storeu_pd)

/* The f32 gelu_grad rows on AVX2: erfc and exp in float lanes (8 per
 * vector, and cheaper ones than double's 4), in registers. The argument
 * z = -x / sqrt 2 is formed in double and rounded to float, zf; its
 * rounding c = z - zf would cost erfc up to 2 |z| |c| of its value where
 * x < 0 (1e-6 relative at x = -4), so it is corrected to first order,
 * erfc(z) = erfc(zf) - c (2 / sqrt pi) exp(-zf^2), and exp(-z^2) for c
 * and for the rounding q of -zf^2: exp(-z^2) = exp(-zf^2 rounded) (1 + q
 * - 2 zf c). What is left: erfcf's and expf's own errors (libmvec:
 * within 2 and 3 float ulp) and the final rounding. Each lane is
 * computed alone and a row's tail goes through a zero-padded vector, so
 * a row's bits do not depend on where it was cut. Per half of the 8
 * lanes (4 doubles): cdf2 = erfc(z) and pdf = exp(-z^2). (gelu itself
 * stays in double: its values are what programs print, and the float
 * lanes would cost them their correct rounding for ~15% of its time.) */
static inline __m256d half_pd(__m256 v, int h) {
  return _mm256_cvtps_pd(h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v));
}
static inline __m256d zero_nan(__m256d v) { return _mm256_and_pd(v, _mm256_cmp_pd(v, v, _CMP_ORD_Q)); }

static inline void gelu_parts_avx2(__m256 x, __m256d *cdf2, __m256d *pdf) {
  __m256d zd[2];
  for (int h = 0; h < 2; h++) zd[h] = _mm256_mul_pd(half_pd(x, h), _mm256_set1_pd(-M_SQRT1_2));
  __m256 zf = _mm256_set_m128(_mm256_cvtpd_ps(zd[1]), _mm256_cvtpd_ps(zd[0]));
  __m256 ef = _mm256_xor_ps(_mm256_mul_ps(zf, zf), _mm256_set1_ps(-0.0f));
  __m256 er = _ZGVdN8v_erfcf(zf), ex = expf_avx2(ef);
  for (int h = 0; h < 2; h++) {
    __m256d zfd = half_pd(zf, h), e = half_pd(ex, h);
    __m256d c = zero_nan(_mm256_sub_pd(zd[h], zfd));
    cdf2[h] = _mm256_sub_pd(half_pd(er, h), _mm256_mul_pd(_mm256_mul_pd(c, _mm256_set1_pd(M_2_SQRTPI)), e));
    __m256d q = zero_nan(_mm256_sub_pd(_mm256_xor_pd(_mm256_mul_pd(zfd, zfd), _mm256_set1_pd(-0.0)), half_pd(ef, h)));
    __m256d corr = _mm256_sub_pd(_mm256_add_pd(_mm256_set1_pd(1.0), q),
                                 _mm256_mul_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), zfd), c));
    pdf[h] = _mm256_mul_pd(e, corr);
  }
}

/* Loads 8 floats from p, or the n < 8 there and zeros. */
static inline __m256 load8(const float *p, int64_t n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  float t[8] = {0};
  for (int64_t k = 0; k < n; k++) t[k] = p[k];
  return _mm256_loadu_ps(t);
}
static inline void store8(float *p, int64_t n, __m256d lo, __m256d hi) {
  __m256 v = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  float t[8];
  _mm256_storeu_ps(t, v);
  for (int64_t k = 0; k < n; k++) p[k] = t[k];
}

static void gelu_grad_f32_avx2(const float *x, const float *dy, float *dx, int64_t n) {
  const __m256d k = _mm256_set1_pd(M_2_SQRTPI * M_SQRT1_2 * 0.5);
  for (int64_t i = 0; i < n; i += 8) {
    __m256 v = load8(x + i, n - i), d = load8(dy + i, n - i);
    __m256d cdf2[2], pdf[2], r[2];
    gelu_parts_avx2(v, cdf2, pdf);
    for (int h = 0; h < 2; h++) {
      __m256d g = _mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(0.5), cdf2[h]),
                                _mm256_mul_pd(half_pd(v, h), _mm256_mul_pd(pdf[h], k)));
      r[h] = _mm256_mul_pd(half_pd(d, h), g);
    }
    store8(dx + i, n - i, r[0], r[1]);
  }
}
#pragma GCC pop_options
#endif

static row_fn erfc_row = erfc_libm, exp_row = exp_libm;
/* The f32 gelu_grad rows in AVX2 registers, or NULL: the double ones. */
static void (*gelu_grad_f32_fast)(const float *x, const float *dy, float *dx, int64_t n);
static const char *impl = "libm";
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
#if TFG_LIBMVEC
  if (tfg_cpu_config_get()->no_vmath) return;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    erfc_row = erfc_row_avx2, exp_row = exp_row_avx2, impl = "libmvec-avx2";
    gelu_grad_f32_fast = gelu_grad_f32_avx2;
  } else {
    erfc_row = erfc_row_sse, exp_row = exp_row_sse, impl = "libmvec-sse";
  }
#endif
}

void tfg_vm_erfc(const double *x, double *y, int64_t n) {
  pthread_once(&once, choose);
  erfc_row(x, y, n);
}

void tfg_vm_exp(const double *x, double *y, int64_t n) {
  pthread_once(&once, choose);
  exp_row(x, y, n);
}

const char *tfg_vm_impl(void) {
  pthread_once(&once, choose);
  return impl;
}

/* ---- gelu ------------------------------------------------------------- */

/* Elements per block: the block's doubles (2 KiB each) stay in L1. */
enum { VBLOCK = 256 };

/* gelu = 0.5 x * erfc(-x / sqrt 2); T is float or double, computed in
 * double, rounded once to T. */
#define DEFINE_GELU(T, SFX)                                                   \
  static void gelu_double_##SFX(const T *x, T *y, int64_t n) {                \
    double z[VBLOCK];                                                         \
    for (int64_t b = 0; b < n; b += VBLOCK) {                                 \
      int64_t m = n - b < VBLOCK ? n - b : VBLOCK;                            \
      for (int64_t i = 0; i < m; i++) z[i] = -(double)x[b + i] * M_SQRT1_2;   \
      tfg_vm_erfc(z, z, m);                                                   \
      for (int64_t i = 0; i < m; i++) y[b + i] = (T)((0.5 * (double)x[b + i]) * z[i]); \
    }                                                                         \
  }
DEFINE_GELU(float, f32)
DEFINE_GELU(double, f64)

/* gelu'(x) = Phi(x) + x phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 (exact
 * where 1 + erf(x / sqrt 2) would cancel), phi(x) = exp(-x^2 / 2) /
 * sqrt(2 pi); times dy, in double, rounded once. */
#define DEFINE_GELU_GRAD(T, SFX)                                                     \
  static void gelu_grad_double_##SFX(const T *x, const T *dy, T *dx, int64_t n) {    \
    double cdf[VBLOCK], pdf[VBLOCK];                                                 \
    for (int64_t b = 0; b < n; b += VBLOCK) {                                        \
      int64_t m = n - b < VBLOCK ? n - b : VBLOCK;                                   \
      for (int64_t i = 0; i < m; i++) {                                              \
        double v = x[b + i];                                                         \
        cdf[i] = -v * M_SQRT1_2;                                                     \
        pdf[i] = -0.5 * v * v;                                                       \
      }                                                                              \
      tfg_vm_erfc(cdf, cdf, m);                                                      \
      tfg_vm_exp(pdf, pdf, m);                                                       \
      for (int64_t i = 0; i < m; i++) {                                              \
        double v = x[b + i];                                                         \
        double g = 0.5 * cdf[i] + v * (pdf[i] * (M_2_SQRTPI * M_SQRT1_2 * 0.5));     \
        dx[b + i] = (T)((double)dy[b + i] * g);                                      \
      }                                                                              \
    }                                                                                \
  }
DEFINE_GELU_GRAD(float, f32)
DEFINE_GELU_GRAD(double, f64)

void tfg_vm_gelu_f64(const double *x, double *y, int64_t n) { gelu_double_f64(x, y, n); }

void tfg_vm_gelu_grad_f64(const double *x, const double *dy, double *dx, int64_t n) {
  gelu_grad_double_f64(x, dy, dx, n);
}

void tfg_vm_gelu_f32(const float *x, float *y, int64_t n) { gelu_double_f32(x, y, n); }

void tfg_vm_gelu_grad_f32(const float *x, const float *dy, float *dx, int64_t n) {
  pthread_once(&once, choose);
  (gelu_grad_f32_fast ? gelu_grad_f32_fast : gelu_grad_double_f32)(x, dy, dx, n);
}
