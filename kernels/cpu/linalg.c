/* kernels/cpu/linalg.c: MATMUL on the CPU, through OpenBLAS.
 *
 * Every product is an OpenBLAS gemm (kernels/cpu/blas.h); the work here
 * is only mapping tfg's operands onto gemm arguments. Transposes become
 * gemm's trans flags (no copies), and batched products walk the broadcast
 * batch dimensions, giving each output matrix the offsets of its two
 * operand matrices. Two shortcuts keep the calls large or cheap:
 *   - a batched a [..., M, K] times a shared b [K, N] is one gemm over
 *     [B * M, K] rows, because the batch rows of a and of the output are
 *     already contiguous in the same order;
 *   - a batch of at least as many products as the pool has threads is
 *     split over ctx->pool by whole products, each one gemm on one
 *     thread; fewer, bigger products are each split into blocks by
 *     tfg_cpu_gemm. */
#include <stdint.h>
#include <string.h>

#include "base/assert.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"

/* Products per chunk when a batch is spread over the pool: about this
 * many multiply-adds each, so a chunk outweighs its hand-off. */
#define CHUNK_MACS (1 << 18)

typedef struct mm_job {
  bool f64, ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  tfg_pool *pool; /* splits each product (NULL: the batch is what is split) */
  const char *a, *b;
  char *c;
  size_t a_mat, b_mat, c_mat; /* bytes per matrix of a, b and the output */
  /* batch dims of the output, and per dim the step in matrices of a and
   * b (0 where that operand is broadcast along the dim) */
  int nbatch;
  int64_t dim[TFG_MAX_RANK];
  int64_t astep[TFG_MAX_RANK], bstep[TFG_MAX_RANK];
} mm_job;

/* The product for output matrix number bi (row-major over the batch dims). */
static void mm_one(const mm_job *j, int64_t bi) {
  int64_t ai = 0, bj = 0, rest = bi;
  for (int d = j->nbatch - 1; d >= 0; d--) {
    int64_t idx = rest % j->dim[d];
    rest /= j->dim[d];
    ai += idx * j->astep[d];
    bj += idx * j->bstep[d];
  }
  const void *a = j->a + (size_t)ai * j->a_mat;
  const void *b = j->b + (size_t)bj * j->b_mat;
  void *c = j->c + (size_t)bi * j->c_mat;
  tfg_cpu_gemm(j->pool, j->f64, j->ta, j->tb, j->m, j->n, j->k, a, j->lda, b, j->ldb, 0.0, c,
               j->ldc);
}

static void mm_chunk(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  (void)chunk;
  for (int64_t bi = lo; bi < hi; bi++) mm_one(arg, bi);
}

/* Fills the batch steps of one operand of rank r (its last two dims are
 * the matrix) against the output's nbatch batch dims, aligning on the
 * right as NumPy does; returns the operand's number of matrices. */
static int64_t batch_steps(const tfg_shape *s, int nbatch, const int64_t *outdim, int64_t *step) {
  int own = s->rank - 2;
  int64_t stride = 1;
  for (int d = nbatch - 1; d >= 0; d--) {
    int sd = d - (nbatch - own);
    int64_t n = sd >= 0 ? s->dim[sd] : 1;
    TFG_ASSERT(n == outdim[d] || n == 1);
    step[d] = n == 1 ? 0 : stride;
    stride *= n;
  }
  return stride;
}

/* MATMUL: out [..., M, N] = op(a) [..., M, K] @ op(b) [..., K, N], where
 * op transposes the last two dims when attrs.transpose_a/_b is set and
 * the batch dims broadcast. f32 and f64 only (TFG_ERR_DEVICE otherwise);
 * a dimension beyond OpenBLAS's integer range is TFG_ERR_LIMIT. */
TFG_CPU_KERNEL(tfg_cpu_matmul) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_matmul, 0);
  const tfg_tensor *a = &in[0], *b = &in[1];
  tfg_dtype dt = out->dtype;
  if ((dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) || a->dtype != dt || b->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE,
                           "matmul of %s and %s is not supported on the CPU (f32 and f64 are)",
                           tfg_dtype_name(a->dtype), tfg_dtype_name(b->dtype));
  int ra = a->shape.rank, rb = b->shape.rank, ro = out->shape.rank;
  TFG_ASSERT(ra >= 2 && rb >= 2 && ro == (ra > rb ? ra : rb));
  bool ta = node->attrs.transpose_a, tb = node->attrs.transpose_b;
  int64_t m = out->shape.dim[ro - 2], n = out->shape.dim[ro - 1];
  int64_t k = ta ? a->shape.dim[ra - 2] : a->shape.dim[ra - 1];
  TFG_ASSERT((ta ? a->shape.dim[ra - 1] : a->shape.dim[ra - 2]) == m);
  TFG_ASSERT((tb ? b->shape.dim[rb - 1] : b->shape.dim[rb - 2]) == k);
  TFG_ASSERT((tb ? b->shape.dim[rb - 2] : b->shape.dim[rb - 1]) == n);

  size_t es = tfg_dtype_size(dt);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (k == 0) { /* an empty sum; gemm would reject lda = 0 */
    memset(out->data, 0, (size_t)total * es);
    return TFG_OK;
  }

  mm_job j = {
      .f64 = dt == TFG_DTYPE_F64,
      .ta = ta,
      .tb = tb,
      .a = a->data, .b = b->data, .c = out->data,
      .a_mat = (size_t)(m * k) * es, .b_mat = (size_t)(k * n) * es, .c_mat = (size_t)(m * n) * es,
      .nbatch = ro - 2,
  };
  for (int d = 0; d < j.nbatch; d++) j.dim[d] = out->shape.dim[d];
  int64_t nmat = total / (m * n);
  int64_t amats = batch_steps(&a->shape, j.nbatch, j.dim, j.astep);
  int64_t bmats = batch_steps(&b->shape, j.nbatch, j.dim, j.bstep);
  int64_t lda = a->shape.dim[ra - 1], ldb = b->shape.dim[rb - 1];

  /* One tall product when b is shared and a's batch rows are contiguous
   * in output order (a not transposed and not broadcast). */
  int64_t rows = m;
  if (bmats == 1 && amats == nmat && !ta && tfg_cpu_fits_blasint(nmat * m)) {
    rows = nmat * m;
    nmat = 1;
    j.nbatch = 0;
  }
  if (!tfg_cpu_fits_blasint(rows) || !tfg_cpu_fits_blasint(n) || !tfg_cpu_fits_blasint(k) || !tfg_cpu_fits_blasint(lda) ||
      !tfg_cpu_fits_blasint(ldb))
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT,
                           "matmul dimensions (M %lld, N %lld, K %lld) exceed the BLAS "
                           "integer range",
                           (long long)rows, (long long)n, (long long)k);
  j.m = rows;
  j.n = n;
  j.k = k;
  j.lda = lda;
  j.ldb = ldb;
  j.ldc = n;

  double macs = (double)m * (double)n * (double)k;
  bool spread = tfg_cpu_gemm_pooled() ? nmat >= tfg_pool_threads(ctx->pool) : macs < CHUNK_MACS;
  if (nmat > 1 && spread) {
    int64_t grain = macs >= CHUNK_MACS ? 1 : (int64_t)(CHUNK_MACS / macs);
    tfg_parallel_for(ctx->pool, nmat, grain, mm_chunk, &j);
  } else {
    j.pool = ctx->pool;
    mm_chunk(&j, 0, nmat, 0);
  }
  return TFG_OK;
}

void tfg_cpu_register_linalg(tfg_kernel_fn *table) { table[TFG_OP_MATMUL] = tfg_cpu_matmul; }
