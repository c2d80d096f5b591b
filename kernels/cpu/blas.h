/* kernels/cpu/blas.h: every CPU matrix product goes through here: one
 * OpenBLAS gemm, run on the threads of the kernel pool.
 *
 *   if (!tfg_cpu_fits_blasint(m) || ...) return TFG_ERR_LIMIT;
 *   tfg_cpu_gemm(ctx->pool, false, false, true, m, n, k, a, k, b, k, 0.0, c, n);
 *
 * OpenBLAS itself always runs on the thread that calls it (one thread).
 * A product big enough to split is cut into blocks of rows or columns of
 * c, one gemm call per block, and the blocks run on the pool. The kernel
 * pool and OpenBLAS then never both own the cores: OpenBLAS's own worker
 * threads, when it has them, wait for work by spinning on sched_yield
 * for about 2^28 cycles after every product, which on a busy 2-core
 * machine took a fifth of a training step away from the elementwise
 * kernels that ran between the products.
 *
 * The split depends only on the shapes and the pool's thread count, so a
 * product gives the same bits on every run with the same threads. Not
 * across thread counts: OpenBLAS's summation order depends on the size
 * of the block it is given (a 256-row product and the same rows as two
 * 128-row products differ in the last bits), exactly as its own threading
 * already made results depend on OPENBLAS_NUM_THREADS (bench/matmul: the
 * largest difference over a 1024-term f32 product, against OpenBLAS's
 * own threading, is 2.7e-5, within the rounding of the sum).
 *
 * The switch no_gemm_split (TFG_GEMM_SPLIT=0, kernels/cpu/config.h: set
 * once for the process) turns all this off, for comparison: each product is one gemm on the caller that OpenBLAS
 * threads itself with the threads it started with, and a batch of big
 * products runs one after another, as before the pool ran them. */
#ifndef TFG_CPU_BLAS_H
#define TFG_CPU_BLAS_H

#include <cblas.h> /* blasint: its width decides tfg_cpu_fits_blasint */
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/parallel.h"

/* Whether v fits blasint, the integer every gemm dimension and leading
 * dimension is passed as (32 bits unless OpenBLAS was built with
 * INTERFACE64). Kernels check their dimensions with it before any gemm
 * and fail with TFG_ERR_LIMIT rather than let a cast wrap. */
static inline bool tfg_cpu_fits_blasint(int64_t v) {
  return sizeof(blasint) >= sizeof(int64_t) || v <= (int64_t)INT32_MAX;
}

/* c [m, n] = op(a) @ op(b) + beta * c, row-major, in f64 or else f32;
 * op(a) [m, k] (stored [k, m] when ta), op(b) [k, n] (stored [n, k] when
 * tb), leading dimensions lda, ldb, ldc as stored. With beta 0, c is
 * only written (its old contents, NaN included, are ignored). Splits over
 * pool (NULL: runs on the caller); must not be called from inside a
 * tfg_parallel_for body on the same pool. The caller has checked every
 * dimension with tfg_cpu_fits_blasint. */
void tfg_cpu_gemm(tfg_pool *pool, bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                  int64_t ldc);

/* One gemm on the caller's thread, never split: for a kernel that runs
 * many products from its own tfg_parallel_for body. Same arguments as
 * tfg_cpu_gemm. */
void tfg_cpu_gemm_here(bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                       int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* Whether products run on the pool (false under no_gemm_split). */
bool tfg_cpu_gemm_pooled(void);

/* The thread count OpenBLAS started with (OPENBLAS_NUM_THREADS, else the
 * cores): the default share of a host device. Read once, before the
 * first product pins OpenBLAS to one thread. */
int tfg_cpu_blas_default_threads(void);

#endif
