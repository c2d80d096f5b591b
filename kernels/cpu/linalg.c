/* kernels/cpu/linalg.c: MATMUL on the CPU, through OpenBLAS.
 *
 * Every product is an OpenBLAS gemm (kernels/cpu/blas.h); the work here
 * is only mapping tfg's operands onto gemm arguments. Transposes become
 * gemm's trans flags and leading dimensions (no copies: the flags, and
 * the strided views of transposes the layout pass folded into the node,
 * ir/matmul_view.h), and batched products walk the broadcast batch
 * dimensions, giving each output matrix the element offsets of its two
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
#include "ir/matmul_view.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_MATMUL, tfg_cpu_matmul},
};

void tfg_cpu_register_linalg(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

/* Products per chunk when a batch is spread over the pool: about this
 * many multiply-adds each, so a chunk outweighs its hand-off. */
#define CHUNK_MACS (1 << 18)

typedef struct mm_job {
  tfg_matmul_geom g; /* the gemm calls (ir/matmul_view.h) */
  bool f64;
  tfg_pool *pool; /* splits each product (NULL: the batch is what is split) */
  const char *a, *b;
  char *c;
  size_t es;
} mm_job;

/* The product for output matrix number bi (row-major over the batch dims). */
static void mm_one(const mm_job *j, int64_t bi) {
  const tfg_matmul_geom *g = &j->g;
  int64_t ai = 0, bj = 0, ci = 0, rest = bi;
  for (int d = g->nbatch - 1; d >= 0; d--) {
    int64_t idx = rest % g->dim[d];
    rest /= g->dim[d];
    ai += idx * g->astep[d];
    bj += idx * g->bstep[d];
    ci += idx * g->cstep[d];
  }
  tfg_cpu_gemm(j->pool, j->f64, g->ta, g->tb, g->m, g->n, g->k, j->a + (size_t)ai * j->es, g->lda,
               j->b + (size_t)bj * j->es, g->ldb, 0.0, j->c + (size_t)ci * j->es, g->ldc);
}

static void mm_chunk(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  (void)chunk;
  for (int64_t bi = lo; bi < hi; bi++) mm_one(arg, bi);
}

/* MATMUL: out [..., M, N] = op(a) [..., M, K] @ op(b) [..., K, N], where
 * op transposes the last two dims when attrs.transpose_a/_b is set and
 * the batch dims broadcast; a, b and the product read and written
 * through their views (ir/matmul_view.h) when the layout pass folded
 * transposes into the node. f32 and f64 only (TFG_ERR_DEVICE otherwise);
 * a dimension beyond OpenBLAS's integer range is TFG_ERR_LIMIT. */
TFG_CPU_KERNEL(tfg_cpu_matmul) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_matmul);
  const tfg_tensor *a = &in[0], *b = &in[1];
  tfg_dtype dt = out->dtype;
  if ((dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) || a->dtype != dt || b->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE,
                           "matmul of %s and %s is not supported on the CPU (f32 and f64 are)",
                           tfg_dtype_name(a->dtype), tfg_dtype_name(b->dtype));
  tfg_matmul_geom g;
  const char *bad = tfg_matmul_geometry(node, &a->shape, &b->shape, &out->shape, &g);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "matmul: %s", bad);
  size_t es = tfg_dtype_size(dt);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (g.k == 0) { /* an empty sum; gemm would reject lda = 0 */
    memset(out->data, 0, (size_t)total * es);
    return TFG_OK;
  }
  mm_job j = {.g = g, .f64 = dt == TFG_DTYPE_F64, .a = a->data, .b = b->data, .c = out->data, .es = es};
  bool a_whole = true, b_shared = true; /* a has every batch dim; b has none */
  for (int d = 0; d < g.nbatch; d++) {
    a_whole = a_whole && (g.astep[d] != 0 || g.dim[d] == 1);
    b_shared = b_shared && g.bstep[d] == 0;
  }
  int64_t nmat = total / (g.m * g.n);

  /* One tall product when b is shared and a's batch rows are contiguous
   * in output order (a not transposed, not broadcast, nothing folded). */
  if (node->attrs.views == 0 && b_shared && a_whole && !g.ta && tfg_cpu_fits_blasint(nmat * g.m)) {
    j.g.m = nmat * g.m;
    nmat = 1;
    j.g.nbatch = 0;
  }
  if (!tfg_cpu_fits_blasint(j.g.m) || !tfg_cpu_fits_blasint(g.n) || !tfg_cpu_fits_blasint(g.k) ||
      !tfg_cpu_fits_blasint(g.lda) || !tfg_cpu_fits_blasint(g.ldb) || !tfg_cpu_fits_blasint(g.ldc))
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT,
                           "matmul dimensions (M %lld, N %lld, K %lld) exceed the BLAS "
                           "integer range",
                           (long long)j.g.m, (long long)g.n, (long long)g.k);

  double macs = (double)g.m * (double)g.n * (double)g.k;
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
