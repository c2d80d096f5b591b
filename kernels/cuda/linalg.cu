/* kernels/cuda/linalg.cu: MATMUL on the GPU, through cuBLASLt and cuBLAS.
 *
 * What it computes is the CPU kernel's contract (kernels/cpu/linalg.c):
 * out [..., M, N] = op(a) [..., M, K] @ op(b) [..., K, N], op transposing
 * the last two dims when attrs.transpose_a / transpose_b is set, the
 * batch dims broadcasting NumPy-style (aligned on the right, a dim of 1
 * repeats), every tensor dense and row-major.
 *
 * Row-major through a column-major library. A row-major r x c matrix
 * with leading dimension ld is, read column-major, its c x r transpose
 * with the same ld. So the row-major product C = op(A) @ op(B) is asked
 * of cuBLAS as its transpose, C^T = op(B)^T @ op(A)^T, with the operands
 * swapped and no data moved:
 *     cuBLAS A' = tfg b, opA' = transpose_b ? T : N, lda' = b's last dim
 *     cuBLAS B' = tfg a, opB' = transpose_a ? T : N, ldb' = a's last dim
 *     cuBLAS C' = out,   m' = N, n' = M, k' = K,     ldc' = N
 * Checking the shapes cuBLAS expects: without transpose_b, b is stored
 * [K, N] row-major = N x K column-major with ld N >= m' (opA' = N wants
 * A' as m' x k'); with it, b is stored [N, K] = K x N column-major with
 * ld K >= k' (opA' = T wants A' stored k' x m'). Likewise for a: stored
 * [M, K] = K x M column-major, ld K (opB' = N wants k' x n'), or stored
 * [K, M] = M x K, ld M (opB' = T wants n' x k'). C' is N x M with ld N:
 * exactly out's row-major memory.
 *
 * Cases, in the order they are tried:
 *   - an empty output: nothing to do; K = 0 (an empty sum): the output
 *     is zeroed with cudaMemsetAsync (all-zero bits are 0.0 in every
 *     float dtype);
 *   - batch dims of size 1 in the output are dropped first (they index
 *     nothing), then a batched a [..., M, K] times one shared b [K, N]
 *     with a neither broadcast nor transposed is ONE product with
 *     n' = batch * M rows, as on the CPU (a's rows and out's rows are
 *     both contiguous in batch order);
 *   - otherwise the output's batch dims are split into an outer prefix
 *     and the longest inner suffix over which both operands advance by a
 *     fixed number of matrices per output matrix (0 for an operand
 *     broadcast along the whole suffix). The suffix is one strided
 *     batched product (strideA' = b's step * K * N, strideB' = a's step
 *     * M * K, strideC' = M * N elements); the outer prefix, non-empty
 *     only for mixed broadcasting like [B, 1] x [1, C], loops on the
 *     host, one batched call per outer index.
 *
 * A product the layout pass folded transposes into (attrs.views:
 * its operands and product strided views, ir/matmul_view.h) goes to
 * cuBLAS alone (permuted_matmul): strided-batched over the longest run of
 * batch dims with uniform element steps, a host loop over the rest.
 *
 * Each other product goes to cuBLASLt first (f32, f16, bf16), with ctx's
 * workspace and the heuristic's best algorithm for the shapes, the
 * pointers' real alignments and the workspace size (cached per device
 * and shape, since the heuristic query costs host time on every step).
 * When Lt has no algorithm, for f64, for a broadcast operand inside a
 * batch (a batch stride of 0, which the cuBLASLt documentation does not
 * promise to support) or a batch count past int32, the product goes to
 * cuBLAS: cublasGemmStridedBatchedEx_64 / cublasGemmEx_64, or
 * cublasDgemmStridedBatched_64 / cublasDgemm_64 for f64 (the 64-bit
 * integer API, so no dimension limit short of memory, unlike the CPU's
 * 32-bit BLAS).
 *
 * Dtypes: a, b and out share one dtype (the shape rule insists):
 *   f32   CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 only when
 *         ctx->tf32 (--tf32) allows TF32 tensor cores;
 *   f64   cublasDgemm (compute 64F);
 *   f16   CUDA_R_16F in and out, CUBLAS_COMPUTE_32F (f32 accumulation
 *         and f32 alpha/beta), the output rounded once;
 *   bf16  CUDA_R_16BF likewise.
 * The CPU kernel refuses f16 and bf16 (OpenBLAS has no such gemm) but the
 * shape rule (ir/ops.c infer_matmul) accepts every float dtype, and
 * kernels/cuda/cuda.h promises matmul in f16/bf16 with f32 accumulation,
 * so on CUDA they work. Split-K reductions are kept in the compute type
 * (cuBLAS CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION; cuBLASLt's
 * OUTPUT_TYPE reduction scheme excluded), so f16/bf16 are rounded once.
 *
 * The cuBLAS handle is shared with the rest of the backend, so its math
 * and pointer modes are saved, set to what these calls need (default
 * math: no TF32 unless the compute type asks, no FP64 emulation; host
 * pointers for alpha and beta) and restored afterwards. cuBLASLt takes
 * everything explicitly and needs no such care.
 *
 * Assumption: ctx->workspace is not used by anything else queued on
 * another stream while this kernel's work runs (the backend owns one
 * workspace per ctx, and a ctx's launches share one stream at a time). */
#include <array>
#include <map>
#include <mutex>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/common.cuh" /* with tfg's C headers, in C linkage */
#include "ir/matmul_view.h"

namespace {

/* One column-major product in cuBLAS's terms, possibly strided-batched:
 * C'[i] = op(A'[i]) @ op(B'[i]) for i < batch, with A'[i] = A + i *
 * stride_a elements and so on. */
struct gemm_call {
  tfg_dtype dt;
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;
  const char *a;
  int64_t lda, stride_a;
  const char *b;
  int64_t ldb, stride_b;
  char *c;
  int64_t ldc, stride_c;
  int64_t batch;
  /* Bytes by which the pointers move between the host loop's calls
   * (OR-ed together): the alignment the cached algorithm must accept. */
  uint64_t vary_a, vary_b, vary_c;
};

cudaDataType_t cuda_type(tfg_dtype dt) {
  switch (dt) {
    case TFG_DTYPE_F64: return CUDA_R_64F;
    case TFG_DTYPE_F16: return CUDA_R_16F;
    case TFG_DTYPE_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

cublasComputeType_t compute_type(tfg_dtype dt, bool tf32) {
  if (dt == TFG_DTYPE_F64) return CUBLAS_COMPUTE_64F;
  if (dt == TFG_DTYPE_F32 && tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

/* The largest power of two (at most 256) dividing every address a buffer
 * is used at: its base, and base plus any multiple of the bytes in vary. */
uint32_t alignment(const void *p, uint64_t vary) {
  uint64_t v = (uint64_t)(uintptr_t)p | vary | 256;
  return (uint32_t)(v & (~v + 1));
}

/* ---- cuBLASLt ------------------------------------------------------------ */

/* The heuristic's answer for one shape, cached: found = false means Lt
 * has no algorithm and cuBLAS is used. */
struct lt_choice {
  bool found;
  cublasLtMatmulHeuristicResult_t result;
};

typedef std::array<int64_t, 20> lt_key;

std::mutex lt_mutex;
std::map<lt_key, lt_choice> lt_cache;
/* The cache only grows with distinct shapes; a graph has few. Past this
 * many (a shape sweep), it starts over rather than grow without bound. */
const size_t LT_CACHE_MAX = 4096;

/* The Lt objects of one call, destroyed on every path out (in reverse:
 * pref first, desc last). */
struct lt_objects {
  tfg_cuda_handle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  tfg_cuda_handle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, lc;
  tfg_cuda_handle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
};

/* A column-major layout of a stored rows x cols matrix, batched. */
tfg_status lt_layout(tfg_kernel_ctx *ctx, cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
                     int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  TFG_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    TFG_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                           sizeof count));
    TFG_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                           &stride, sizeof stride));
  }
  return TFG_OK;
}

/* Runs g through cuBLASLt; *done = false (and nothing queued) when Lt
 * has no algorithm for it. */
tfg_status lt_gemm(tfg_kernel_ctx *ctx, const gemm_call &g, bool *done) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  *done = false;
  cudaDataType_t t = cuda_type(g.dt);
  cublasComputeType_t ct = compute_type(g.dt, cx->tf32);
  uint32_t al_a = alignment(g.a, g.vary_a | (g.batch > 1 ? (uint64_t)g.stride_a * tfg_dtype_size(g.dt) : 0));
  uint32_t al_b = alignment(g.b, g.vary_b | (g.batch > 1 ? (uint64_t)g.stride_b * tfg_dtype_size(g.dt) : 0));
  uint32_t al_c = alignment(g.c, g.vary_c | (g.batch > 1 ? (uint64_t)g.stride_c * tfg_dtype_size(g.dt) : 0));
  uint64_t ws = cx->workspace ? (uint64_t)cx->workspace_bytes : 0;

  lt_objects o;
  TFG_CUBLAS_CHECK(ctx, cublasLtMatmulDescCreate(&o.desc.h, ct, CUDA_R_32F));
  int32_t ta = (int32_t)g.op_a, tb = (int32_t)g.op_b;
  TFG_CUBLAS_CHECK(ctx, cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  TFG_CUBLAS_CHECK(ctx, cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  /* Stored shapes: op N stores A' as m x k, op T as k x m; B' is k x n
   * under N and n x k under T; C' is m x n. */
  bool na = g.op_a == CUBLAS_OP_N, nb = g.op_b == CUBLAS_OP_N;
  tfg_status s = lt_layout(ctx, &o.la.h, t, na ? g.m : g.k, na ? g.k : g.m, g.lda, g.batch, g.stride_a);
  if (s != TFG_OK) return s;
  s = lt_layout(ctx, &o.lb.h, t, nb ? g.k : g.n, nb ? g.n : g.k, g.ldb, g.batch, g.stride_b);
  if (s != TFG_OK) return s;
  s = lt_layout(ctx, &o.lc.h, t, g.m, g.n, g.ldc, g.batch, g.stride_c);
  if (s != TFG_OK) return s;

  lt_key key = {cx->device, g.dt,     g.op_a,  g.op_b,  g.m,  g.n,  g.k,  g.lda,  g.ldb,  g.ldc,
                g.batch,    g.stride_a, g.stride_b, g.stride_c, al_a, al_b, al_c, (int64_t)ws, cx->tf32, 0};
  lt_choice choice = {};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(lt_mutex);
    auto it = lt_cache.find(key);
    if (it != lt_cache.end()) {
      choice = it->second;
      cached = true;
    }
  }
  if (!cached) {
    TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceCreate(&o.pref.h));
    TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &ws, sizeof ws));
    if (g.dt == TFG_DTYPE_F16 || g.dt == TFG_DTYPE_BF16) { /* no split-K partial sums rounded to 16 bits */
      uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                 &scheme, sizeof scheme));
    }
    TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                               &al_a, sizeof al_a));
    TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                               &al_b, sizeof al_b));
    TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                               &al_c, sizeof al_c));
    TFG_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                               &al_c, sizeof al_c));
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cx->cublaslt, o.desc, o.la, o.lb, o.lc, o.lc, o.pref, 1,
                                                       &choice.result, &found);
    /* NOT_SUPPORTED is the heuristic's "no algorithm": cuBLAS takes it. */
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      return tfg_cuda_fail_call(ctx, "cublasLtMatmulAlgoGetHeuristic", cublasGetStatusString(st), __FILE__,
                                __LINE__);
    choice.found = st == CUBLAS_STATUS_SUCCESS && found > 0 && choice.result.state == CUBLAS_STATUS_SUCCESS &&
                   choice.result.workspaceSize <= ws;
    std::lock_guard<std::mutex> lock(lt_mutex);
    if (lt_cache.size() >= LT_CACHE_MAX) lt_cache.clear();
    lt_cache[key] = choice;
  }
  if (!choice.found) return TFG_OK;

  float one = 1.0f, zero = 0.0f;
  TFG_CUBLAS_CHECK(ctx, cublasLtMatmul(cx->cublaslt, o.desc, &one, g.a, o.la, g.b, o.lb, &zero, g.c, o.lc, g.c,
                                       o.lc, &choice.result.algo, choice.result.workspaceSize ? cx->workspace : nullptr,
                                       choice.result.workspaceSize, cx->stream));
  *done = true;
  return TFG_OK;
}

/* ---- cuBLAS -------------------------------------------------------------- */

/* Sets the shared cuBLAS handle's math and pointer modes for our calls
 * and puts the previous ones back (restore(), checked, on the normal
 * path; the destructor, unchecked, when an error returns early). */
struct cublas_modes {
  cublasHandle_t h;
  cublasMath_t math;
  cublasPointerMode_t ptr;
  bool saved = false;
  explicit cublas_modes(cublasHandle_t handle) : h(handle), math(CUBLAS_DEFAULT_MATH), ptr(CUBLAS_POINTER_MODE_HOST) {}
  tfg_status set(tfg_kernel_ctx *ctx) {
    TFG_CUBLAS_CHECK(ctx, cublasGetMathMode(h, &math));
    TFG_CUBLAS_CHECK(ctx, cublasGetPointerMode(h, &ptr));
    saved = true;
    TFG_CUBLAS_CHECK(ctx, cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    TFG_CUBLAS_CHECK(ctx, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    return TFG_OK;
  }
  tfg_status restore(tfg_kernel_ctx *ctx) {
    if (!saved) return TFG_OK;
    saved = false;
    TFG_CUBLAS_CHECK(ctx, cublasSetMathMode(h, math));
    TFG_CUBLAS_CHECK(ctx, cublasSetPointerMode(h, ptr));
    return TFG_OK;
  }
  ~cublas_modes() {
    if (saved) {
      (void)cublasSetMathMode(h, math);
      (void)cublasSetPointerMode(h, ptr);
    }
  }
};

/* Runs g through cuBLAS (the handle's modes already set). */
tfg_status blas_gemm(tfg_kernel_ctx *ctx, const gemm_call &g) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  if (g.dt == TFG_DTYPE_F64) {
    double one = 1.0, zero = 0.0;
    const double *a = (const double *)g.a, *b = (const double *)g.b;
    double *c = (double *)g.c;
    if (g.batch == 1)
      TFG_CUBLAS_CHECK(ctx, cublasDgemm_64(cx->cublas, g.op_a, g.op_b, g.m, g.n, g.k, &one, a, g.lda, b, g.ldb, &zero,
                                           c, g.ldc));
    else
      TFG_CUBLAS_CHECK(ctx, cublasDgemmStridedBatched_64(cx->cublas, g.op_a, g.op_b, g.m, g.n, g.k, &one, a, g.lda,
                                                         g.stride_a, b, g.ldb, g.stride_b, &zero, c, g.ldc,
                                                         g.stride_c, g.batch));
    return TFG_OK;
  }
  float one = 1.0f, zero = 0.0f;
  cudaDataType_t t = cuda_type(g.dt);
  cublasComputeType_t ct = compute_type(g.dt, cx->tf32);
  if (g.batch == 1)
    TFG_CUBLAS_CHECK(ctx, cublasGemmEx_64(cx->cublas, g.op_a, g.op_b, g.m, g.n, g.k, &one, g.a, t, g.lda, g.b, t,
                                          g.ldb, &zero, g.c, t, g.ldc, ct, CUBLAS_GEMM_DEFAULT));
  else
    TFG_CUBLAS_CHECK(ctx, cublasGemmStridedBatchedEx_64(cx->cublas, g.op_a, g.op_b, g.m, g.n, g.k, &one, g.a, t,
                                                        g.lda, g.stride_a, g.b, t, g.ldb, g.stride_b, &zero, g.c, t,
                                                        g.ldc, g.stride_c, g.batch, ct, CUBLAS_GEMM_DEFAULT));
  return TFG_OK;
}

/* ---- MATMUL --------------------------------------------------------------- */

/* Fills the batch steps (in matrices) of an operand of shape s against
 * the output's nbatch batch dims outdim, aligned on the right; returns
 * false when a dim neither matches nor is 1 (the shape rule forbids
 * it). *mats: the operand's number of matrices. */
bool batch_steps(const tfg_shape *s, int nbatch, const int64_t *outdim, int64_t *step, int64_t *mats) {
  int own = s->rank - 2;
  if (own > nbatch) return false;
  int64_t stride = 1;
  for (int d = nbatch - 1; d >= 0; d--) {
    int sd = d - (nbatch - own);
    int64_t n = sd >= 0 ? s->dim[sd] : 1;
    if (n != outdim[d] && n != 1) return false;
    step[d] = n == 1 ? 0 : stride;
    stride *= n;
  }
  *mats = stride;
  return true;
}

/* MATMUL with transposes folded in (attrs.views, ir/matmul_view.h):
 * each operand and the product a strided view of its tensor. Every
 * product through cuBLAS (not Lt, whose layouts this path does not
 * describe): strided-batched over the longest suffix of batch dims over
 * which a, b and the product each advance by a fixed element step, a
 * host loop over the rest. */
tfg_status permuted_matmul(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *a, const tfg_tensor *b,
                           tfg_tensor *out) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  tfg_matmul_geom mg;
  const char *bad = tfg_matmul_geometry(node, &a->shape, &b->shape, &out->shape, &mg);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "matmul: %s", bad);
  size_t es = tfg_dtype_size(out->dtype);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (mg.k == 0) {
    TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, 0, (size_t)total * es, cx->stream));
    return TFG_OK;
  }
  int nb = 0;
  int64_t dim[TFG_MAX_RANK], astep[TFG_MAX_RANK], bstep[TFG_MAX_RANK], cstep[TFG_MAX_RANK];
  for (int d = 0; d < mg.nbatch; d++) { /* the dims of size 1 index nothing */
    if (mg.dim[d] == 1) continue;
    dim[nb] = mg.dim[d];
    astep[nb] = mg.astep[d];
    bstep[nb] = mg.bstep[d];
    cstep[nb] = mg.cstep[d];
    nb++;
  }
  /* cuBLAS's view (see the top of the file): A' = b, B' = a. */
  gemm_call g;
  memset(&g, 0, sizeof g);
  g.dt = out->dtype;
  g.op_a = mg.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.op_b = mg.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = mg.n;
  g.n = mg.m;
  g.k = mg.k;
  g.lda = mg.ldb;
  g.ldb = mg.lda;
  g.ldc = mg.ldc;
  int split = nb;
  int64_t inner = 1;
  while (split > 0) { /* the uniform suffix */
    int d = split - 1;
    if (split < nb && (astep[d] != g.stride_b * inner || bstep[d] != g.stride_a * inner || cstep[d] != g.stride_c * inner))
      break;
    if (split == nb) {
      g.stride_b = astep[d];
      g.stride_a = bstep[d];
      g.stride_c = cstep[d];
    }
    inner *= dim[d];
    split--;
  }
  g.batch = inner;
  int64_t outer = 1;
  for (int d = 0; d < split; d++) outer *= dim[d];
  for (int d = 0; d < split; d++) {
    g.vary_a |= (uint64_t)bstep[d] * es;
    g.vary_b |= (uint64_t)astep[d] * es;
    g.vary_c |= (uint64_t)cstep[d] * es;
  }
  cublas_modes modes(cx->cublas);
  tfg_status st = modes.set(ctx);
  if (st != TFG_OK) return st;
  for (int64_t o = 0; o < outer; o++) {
    int64_t ai = 0, bi = 0, ci = 0, rest = o;
    for (int d = split - 1; d >= 0; d--) {
      int64_t idx = rest % dim[d];
      rest /= dim[d];
      ai += idx * astep[d];
      bi += idx * bstep[d];
      ci += idx * cstep[d];
    }
    g.a = (const char *)b->data + (size_t)bi * es;
    g.b = (const char *)a->data + (size_t)ai * es;
    g.c = (char *)out->data + (size_t)ci * es;
    st = blas_gemm(ctx, g);
    if (st != TFG_OK) return st;
  }
  return modes.restore(ctx);
}

/* MATMUL: see the top of the file. a, b and out share one float dtype;
 * any other combination is TFG_ERR_DEVICE (the shape rule prevents it).
 * Queues its work on ctx's stream and returns. */
tfg_status cuda_matmul(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  const tfg_tensor *a = &in[0], *b = &in[1];
  tfg_dtype dt = out->dtype;
  if (!tfg_dtype_is_float(dt) || a->dtype != dt || b->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE,
                           "matmul of %s and %s into %s is not supported on CUDA (f32, f64, f16 and bf16 are)",
                           tfg_dtype_name(a->dtype), tfg_dtype_name(b->dtype), tfg_dtype_name(dt));
  if (node->attrs.views) return permuted_matmul(ctx, node, a, b, out);
  int ra = a->shape.rank, rb = b->shape.rank, ro = out->shape.rank;
  if (ra < 2 || rb < 2 || ro != (ra > rb ? ra : rb))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "matmul: operand ranks %d and %d do not give rank %d", ra, rb, ro);
  bool ta = node->attrs.transpose_a, tb = node->attrs.transpose_b;
  int64_t m = out->shape.dim[ro - 2], n = out->shape.dim[ro - 1];
  int64_t k = ta ? a->shape.dim[ra - 2] : a->shape.dim[ra - 1];
  if ((ta ? a->shape.dim[ra - 1] : a->shape.dim[ra - 2]) != m ||
      (tb ? b->shape.dim[rb - 1] : b->shape.dim[rb - 2]) != k ||
      (tb ? b->shape.dim[rb - 2] : b->shape.dim[rb - 1]) != n)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "matmul: operand shapes do not match the output's");

  size_t es = tfg_dtype_size(dt);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (k == 0) { /* an empty sum */
    TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, 0, (size_t)total * es, cx->stream));
    return TFG_OK;
  }

  /* The output's batch dims, and each operand's step along them. */
  int nbatch = ro - 2;
  int64_t dim[TFG_MAX_RANK], astep[TFG_MAX_RANK], bstep[TFG_MAX_RANK], amats, bmats;
  for (int d = 0; d < nbatch; d++) dim[d] = out->shape.dim[d];
  if (!batch_steps(&a->shape, nbatch, dim, astep, &amats) || !batch_steps(&b->shape, nbatch, dim, bstep, &bmats))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "matmul: batch dimensions do not broadcast to the output's");
  /* Drop the dims of size 1: they index nothing. */
  int nb = 0;
  int64_t nmat = 1;
  for (int d = 0; d < nbatch; d++) {
    if (dim[d] == 1) continue;
    dim[nb] = dim[d];
    astep[nb] = astep[d];
    bstep[nb] = bstep[d];
    nb++;
    nmat *= dim[d];
  }

  /* cuBLAS's view (see the top of the file): A' = b, B' = a. */
  gemm_call g;
  memset(&g, 0, sizeof g);
  g.dt = dt;
  g.op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = n;
  g.n = m;
  g.k = k;
  g.lda = b->shape.dim[rb - 1];
  g.ldb = a->shape.dim[ra - 1];
  g.ldc = n;
  g.stride_c = m * n;

  int64_t outer = 1;
  int split = nb; /* dims [0, split) loop on the host, [split, nb) are the batch */
  if (nmat > 1 && bmats == 1 && amats == nmat && !ta) {
    /* One tall product: a's batch rows are contiguous in output order. */
    g.n = nmat * m;
    g.batch = 1;
    split = 0;
  } else {
    /* The longest suffix of batch dims over which both operands advance
     * by a fixed step per output matrix (sa, sb, in matrices). */
    int64_t inner = 1, sa = 0, sb = 0;
    while (split > 0) {
      int d = split - 1;
      if (split == nb) {
        sa = astep[d];
        sb = bstep[d];
      } else if (astep[d] != sa * inner || bstep[d] != sb * inner) {
        break;
      }
      inner *= dim[d];
      split--;
    }
    outer = nmat / inner;
    g.batch = inner;
    g.stride_a = sb * k * n;
    g.stride_b = sa * m * k;
  }
  size_t a_mat = (size_t)(m * k) * es, b_mat = (size_t)(k * n) * es, c_mat = (size_t)(m * n) * es;
  for (int d = 0; d < split; d++) {
    g.vary_a |= (uint64_t)bstep[d] * b_mat;
    g.vary_b |= (uint64_t)astep[d] * a_mat;
  }
  if (outer > 1) g.vary_c = (uint64_t)g.batch * c_mat;

  /* cuBLASLt where it can (not f64; no zero batch stride; int32 batch). */
  bool try_lt = dt != TFG_DTYPE_F64 && g.batch <= INT32_MAX &&
                (g.batch == 1 || (g.stride_a != 0 && g.stride_b != 0));
  cublas_modes modes(cx->cublas);
  for (int64_t o = 0; o < outer; o++) {
    int64_t ai = 0, bi = 0, rest = o;
    for (int d = split - 1; d >= 0; d--) {
      int64_t idx = rest % dim[d];
      rest /= dim[d];
      ai += idx * astep[d];
      bi += idx * bstep[d];
    }
    g.a = (const char *)b->data + (size_t)bi * b_mat;
    g.b = (const char *)a->data + (size_t)ai * a_mat;
    g.c = (char *)out->data + (size_t)o * (size_t)g.batch * c_mat;
    bool done = false;
    if (try_lt) {
      tfg_status s = lt_gemm(ctx, g, &done);
      if (s != TFG_OK) return s;
    }
    if (!done) {
      if (!modes.saved) {
        tfg_status s = modes.set(ctx);
        if (s != TFG_OK) return s;
      }
      tfg_status s = blas_gemm(ctx, g);
      if (s != TFG_OK) return s;
    }
  }
  return modes.restore(ctx);
}

} /* namespace */

extern "C" void tfg_cuda_register_linalg(tfg_kernel_fn *table) { table[TFG_OP_MATMUL] = cuda_matmul; }
