/* kernels/cpu/blas.c: matrix products on the kernel pool, one
 * single-threaded OpenBLAS gemm per block (why: kernels/cpu/blas.h). */
#include "kernels/cpu/blas.h"

#include <pthread.h>

#include "kernels/cpu/config.h"

/* OpenBLAS's own controls (declared by its cblas.h in most builds; here
 * so the build does not depend on which). */
extern void openblas_set_num_threads(int n);
extern int openblas_get_num_threads(void);

/* Below this many multiply-adds a product is not worth splitting: the
 * pool's wake-up (tens of microseconds) would cost more than it saves. */
#define SPLIT_MACS (1 << 20)
/* Blocks are whole multiples of this many rows or columns (OpenBLAS's
 * register tiles are at most 16 wide), and no thinner than MIN_BLOCK. */
#define BLOCK_ALIGN 16
#define MIN_BLOCK 64

static int blas_default = 1;
static bool pooled = true; /* no_gemm_split (TFG_GEMM_SPLIT=0): false */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_init(void) {
  blas_default = openblas_get_num_threads();
  if (blas_default < 1) blas_default = 1;
  pooled = !tfg_cpu_config_get()->no_gemm_split;
}

bool tfg_cpu_gemm_pooled(void) {
  pthread_once(&blas_once, blas_init);
  return pooled;
}

int tfg_cpu_blas_default_threads(void) {
  pthread_once(&blas_once, blas_init);
  return blas_default;
}

/* Keeps OpenBLAS on its caller's thread. Checked per product, not once:
 * a program that links tfg may set OpenBLAS's threads itself between
 * runs (bench/matmul.c does, to time OpenBLAS alone). */
static void blas_on_caller(void) {
  if (!tfg_cpu_gemm_pooled()) return; /* OpenBLAS threads each product itself */
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void tfg_cpu_gemm_here(bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                       int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
  blas_on_caller();
  enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
  if (f64)
    cblas_dgemm(CblasRowMajor, oa, ob, (blasint)m, (blasint)n, (blasint)k, 1.0, a, (blasint)lda,
                b, (blasint)ldb, beta, c, (blasint)ldc);
  else
    cblas_sgemm(CblasRowMajor, oa, ob, (blasint)m, (blasint)n, (blasint)k, 1.0f, a,
                (blasint)lda, b, (blasint)ldb, (float)beta, c, (blasint)ldc);
}

/* A product split into blocks: tfg_cpu_gemm's arguments (a, b and c as
 * bytes, es per element), then the split. */
typedef struct gemm_job {
  bool f64, ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  const char *a, *b;
  char *c;
  double beta;
  size_t es;
  bool by_rows;        /* blocks of rows of c (else of columns) */
  int64_t step, total; /* rows or columns per block, and in all of c */
} gemm_job;

/* Blocks [lo, hi) of the job. Rows s..e of c are rows s..e of op(a):
 * rows of a, or columns of a when it is stored transposed; columns of c
 * are columns of op(b) likewise. */
static void gemm_blocks(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const gemm_job *j = arg;
  (void)chunk;
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t s = blk * j->step, e = s + j->step < j->total ? s + j->step : j->total;
    if (s >= e) continue;
    if (j->by_rows) {
      const char *a = j->a + (size_t)(j->ta ? s : s * j->lda) * j->es;
      tfg_cpu_gemm_here(j->f64, j->ta, j->tb, e - s, j->n, j->k, a, j->lda, j->b, j->ldb, j->beta,
                        j->c + (size_t)(s * j->ldc) * j->es, j->ldc);
    } else {
      const char *b = j->b + (size_t)(j->tb ? s * j->ldb : s) * j->es;
      tfg_cpu_gemm_here(j->f64, j->ta, j->tb, j->m, e - s, j->k, j->a, j->lda, b, j->ldb, j->beta,
                        j->c + (size_t)s * j->es, j->ldc);
    }
  }
}

void tfg_cpu_gemm(tfg_pool *pool, bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                  int64_t ldc) {
  int threads = tfg_pool_threads(pool);
  double macs = (double)m * (double)n * (double)k;
  /* Split the longer side of c: each block re-packs the other operand
   * whole, so that operand should be the smaller one. */
  bool by_rows = m >= n;
  int64_t total = by_rows ? m : n;
  if (!tfg_cpu_gemm_pooled() || threads < 2 || macs < SPLIT_MACS || total < 2 * MIN_BLOCK) {
    tfg_cpu_gemm_here(f64, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  int64_t step = (total + threads - 1) / threads;
  step = (step + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
  if (step < MIN_BLOCK) step = MIN_BLOCK;
  int64_t blocks = (total + step - 1) / step;
  gemm_job j = {
      .f64 = f64, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
      .a = a, .b = b, .c = c, .beta = beta, .es = f64 ? sizeof(double) : sizeof(float),
      .by_rows = by_rows, .step = step, .total = total,
  };
  tfg_parallel_for(pool, blocks, 1, gemm_blocks, &j);
}
