/* kernels/cpu/vmath.c: row-wise erfc and exp over libmvec (contract and
 * accuracy: kernels/cpu/vmath.h). */
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>

#include "base/env.h"

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

#if TFG_LIBMVEC
#include <immintrin.h>

/* libmvec's entry points, named by the x86-64 vector function ABI:
 * _ZGV, the ISA (b SSE, d AVX2), N (unmasked), the lanes, v (one vector
 * argument). Declared here because math.h declares them only under
 * -ffast-math, which this build does not use. */
__m128d _ZGVbN2v_erfc(__m128d x);
__m128d _ZGVbN2v_exp(__m128d x);

/* A row through FN, W doubles at a time, LOAD and STORE unaligned.
 * Elements past the last whole vector go through a zero-padded vector
 * too, so every element of a row is computed by the same code whatever
 * n is and wherever the row was cut. */
#define ROW(NAME, FN, W, LOAD, STORE)                              \
  static void NAME(const double *x, double *y, int64_t n) {        \
    int64_t i = 0;                                                 \
    for (; i + W <= n; i += W) STORE(y + i, FN(LOAD(x + i)));      \
    if (i < n) {                                                   \
      double t[W] = {0};                                           \
      for (int64_t k = i; k < n; k++) t[k - i] = x[k];             \
      STORE(t, FN(LOAD(t)));                                       \
      for (int64_t k = i; k < n; k++) y[k] = t[k - i];             \
    }                                                              \
  }
ROW(erfc_sse, _ZGVbN2v_erfc, 2, _mm_loadu_pd, _mm_storeu_pd)
ROW(exp_sse, _ZGVbN2v_exp, 2, _mm_loadu_pd, _mm_storeu_pd)

#pragma GCC push_options
#pragma GCC target("avx2,fma")
__m256d _ZGVdN4v_erfc(__m256d x);
__m256d _ZGVdN4v_exp(__m256d x);

ROW(erfc_avx2, _ZGVdN4v_erfc, 4, _mm256_loadu_pd, _mm256_storeu_pd)
ROW(exp_avx2, _ZGVdN4v_exp, 4, _mm256_loadu_pd, _mm256_storeu_pd)
#pragma GCC pop_options
#endif

static row_fn erfc_row = erfc_libm, exp_row = exp_libm;
static const char *impl = "libm";
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
#if TFG_LIBMVEC
  long long on;
  if (tfg_env_int("TFG_VMATH", &on) && on == 0) return;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    erfc_row = erfc_avx2, exp_row = exp_avx2, impl = "libmvec-avx2";
  } else {
    erfc_row = erfc_sse, exp_row = exp_sse, impl = "libmvec-sse";
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
  void tfg_vm_gelu_##SFX(const T *x, T *y, int64_t n) {                       \
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
  void tfg_vm_gelu_grad_##SFX(const T *x, const T *dy, T *dx, int64_t n) {           \
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
