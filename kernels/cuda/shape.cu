/* kernels/cuda/shape.cu: reshape/flatten, transpose, concat, slice and
 * broadcast on a CUDA device: the GPU twins of kernels/cpu/shape.c. They
 * only move elements, so they work on element bytes (unsigned integers of
 * the element's size) and support every dtype, bit for bit, with the
 * CPU's checks and messages.
 *
 * Index math, against the CPU:
 *   - RESHAPE, FLATTEN: same elements in the same order; a device-to-device
 *     copy (nothing when the output is the input's buffer), as tfg_cpu_copy.
 *   - TRANSPOSE: output axis i is input axis perm[i] (attrs.perm, "output
 *     axis i is input axis perm[i]", ir/graph.h). As on the CPU the
 *     input's row-major strides inst[] are formed and output axis i reads
 *     at st[i] = inst[perm[i]]: out[idx] = in[sum_i idx_i * inst[perm[i]]].
 *   - BROADCAST: the CPU's right alignment: output axis i reads input axis
 *     j = i - (out rank - in rank); stride 0 when j < 0 or that dim is 1,
 *     else the product of the input dims right of j.
 *   Both are a gather over the output (tfg_index_gather,
 *   kernels/index_math.h, which the CPU's gather_init calls too: size-1
 *   axes dropped, contiguous ones merged). Output position pos, decomposed over the simplified dims from
 *   the last axis, reads the input at sum idx_i * st_i; the CPU's
 *   gather_rows computes the same offset row by row. Where the last output
 *   axis strides through the input (st > 1) and another output axis A has
 *   input stride 1, the gather goes through 32 x 32 tiles in shared memory
 *   (the CPU's gather_tiles idea): a tile is read with threads along A
 *   (contiguous in the input) and written with threads along the last axis
 *   (contiguous in the output). Element (a, l) of a tile sits at
 *   tile[l - l0][a - a0] between the two phases.
 *   - CONCAT: out viewed as [outer, out_dim[axis] * inner] rows with outer
 *     = prod dims before axis, inner = prod dims after it (times the element
 *     size, in bytes); input q is [outer, len_q] with len_q = in_q.dim[axis]
 *     * inner, copied to columns [at_q, at_q + len_q) of every row, at_q
 *     the sum of len of the inputs before q: the CPU's rows_job with dstep =
 *     out_dim[axis] * inner, doff = at_q, sstep = len_q.
 *   - SLICE: rows of len = (end - start) * inner bytes from offset start *
 *     inner of each input row of sstep = in_dim[axis] * inner, packed in
 *     the output (dstep = len): the CPU's rows_job for slice.
 *   Row copies move the widest unit (16, 8, 4, 2 or 1 bytes) that divides
 *   every length, step, offset and both base addresses. */
#include <string.h>

#include "kernels/cuda/common.cuh"

#define TILE 32
#define TILE_ROWS 8 /* a tile block is TILE x TILE_ROWS threads */

/* ---- gather (transpose, broadcast) ---------------------------------------- */

/* dst[i] = src[off(i)] over the simplified output. */
template <typename T, typename I>
static __global__ void gather_kernel(tfg_index_map ix, const T *src, T *dst, int64_t n) {
  TFG_CUDA_LOOP(i, n) {
    I off[1];
    tfg_cuda_offsets<I, 1>(ix, (I)i, off);
    dst[i] = src[off[0]];
  }
}

/* The tiled gather: output axes (simplified) dim[], their input strides
 * ist[] and output strides ost[] (row-major); L = rank - 1 is the last
 * axis (ost 1, ist > 1) and A < L the axis with ist 1. Tile t covers
 * A in [a0, a0 + TILE), L in [l0, l0 + TILE) at one index of the other
 * ("outer") axes: t = (outer * nA + at) * nL + lt. */
typedef struct tile_plan {
  int rank, A;
  int64_t dim[TFG_MAX_RANK], ist[TFG_MAX_RANK], ost[TFG_MAX_RANK];
  int64_t nA, nL, tiles;
} tile_plan;

/* Where tile t starts: its first input and output element offsets and
 * its first indices a0 along A and l0 along L. */
static __host__ __device__ __forceinline__ void tile_origin(const tile_plan &tp, int64_t t, int64_t *ibase,
                                                            int64_t *obase, int64_t *a0, int64_t *l0) {
  const int L = tp.rank - 1, A = tp.A;
  int64_t rest = t;
  int64_t lt = rest % tp.nL;
  rest /= tp.nL;
  int64_t at = rest % tp.nA;
  rest /= tp.nA;
  int64_t ib = 0, ob = 0;
  for (int i = L - 1; i >= 0; i--) { /* the outer index, row-major over the axes other than A and L */
    if (i == A) continue;
    int64_t d = tp.dim[i], idx = rest % d;
    rest /= d;
    ib += idx * tp.ist[i];
    ob += idx * tp.ost[i];
  }
  *a0 = at * TILE;
  *l0 = lt * TILE;
  *ibase = ib + *a0 + *l0 * tp.ist[L]; /* ist[A] = 1 */
  *obase = ob + *a0 * tp.ost[A] + *l0; /* ost[L] = 1 */
}

/* Thread (tx, ty)'s reads of a tile: threads along A, contiguous in the
 * input; element (a0 + tx, l0 + j) goes to tile[j][tx]. */
template <typename T>
static __host__ __device__ __forceinline__ void tile_read(const tile_plan &tp, int64_t ibase, int64_t a0, int64_t l0,
                                                          int tx, int ty, const T *src, T (*tile)[TILE + 1]) {
  const int64_t dA = tp.dim[tp.A], dL = tp.dim[tp.rank - 1], sL = tp.ist[tp.rank - 1];
  for (int j = ty; j < TILE; j += TILE_ROWS)
    if (a0 + tx < dA && l0 + j < dL) tile[j][tx] = src[ibase + tx + j * sL];
}

/* Thread (tx, ty)'s writes of a tile: threads along L, contiguous in the
 * output; element (a0 + j, l0 + tx) comes from tile[tx][j]. */
template <typename T>
static __host__ __device__ __forceinline__ void tile_write(const tile_plan &tp, int64_t obase, int64_t a0, int64_t l0,
                                                           int tx, int ty, T *dst, T (*tile)[TILE + 1]) {
  const int64_t dA = tp.dim[tp.A], dL = tp.dim[tp.rank - 1], oA = tp.ost[tp.A];
  for (int j = ty; j < TILE; j += TILE_ROWS)
    if (a0 + j < dA && l0 + tx < dL) dst[obase + j * oA + tx] = tile[tx][j];
}

template <typename T>
static __global__ void gather_tiles_kernel(tile_plan tp, const T *src, T *dst) {
  __shared__ T tile[TILE][TILE + 1]; /* +1: column reads hit distinct banks */
  for (int64_t t = blockIdx.x; t < tp.tiles; t += gridDim.x) {
    int64_t ibase, obase, a0, l0;
    tile_origin(tp, t, &ibase, &obase, &a0, &l0);
    tile_read<T>(tp, ibase, a0, l0, threadIdx.x, threadIdx.y, src, tile);
    __syncthreads();
    tile_write<T>(tp, obase, a0, l0, threadIdx.x, threadIdx.y, dst, tile);
    __syncthreads(); /* the tile is reused by this block's next t */
  }
}

/* The tile plan of gather ix over n > 0 elements: false when the tiled
 * path does not apply (the last axis is contiguous in the input, or no
 * axis is). */
static bool tile_plan_make(const tfg_index_map &ix, int64_t n, tile_plan *tp) {
  int R = ix.rank, A = -1;
  if (R >= 2 && ix.st[0][R - 1] > 1)
    for (int i = 0; i < R - 1; i++)
      if (ix.st[0][i] == 1) A = i;
  if (A < 0) return false;
  memset(tp, 0, sizeof *tp);
  tp->rank = R;
  tp->A = A;
  int64_t stride = 1;
  for (int i = R - 1; i >= 0; i--) {
    tp->dim[i] = ix.dim[i];
    tp->ist[i] = ix.st[0][i];
    tp->ost[i] = stride;
    stride *= ix.dim[i];
  }
  tp->nA = (ix.dim[A] + TILE - 1) / TILE;
  tp->nL = (ix.dim[R - 1] + TILE - 1) / TILE;
  tp->tiles = n / (ix.dim[A] * ix.dim[R - 1]) * tp->nA * tp->nL;
  return true;
}

/* Gathers out (all of it) from src at per-output-axis strides st. */
static tfg_status gather_run(tfg_kernel_ctx *ctx, const tfg_shape *oshape, const int64_t *st, const void *src,
                             void *dst, size_t esz) {
  int64_t n = tfg_shape_numel(oshape);
  if (n == 0) return TFG_OK;
  if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "elements of %zu bytes are not supported on the GPU", esz);
  tfg_index_map ix;
  tfg_index_gather(&ix, oshape, st);
  tile_plan tp;
  if (tile_plan_make(ix, n, &tp)) {
    tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
    dim3 threads(TILE, TILE_ROWS);
    unsigned blocks = tfg_cuda_blocks(cx, tp.tiles * (TILE * TILE_ROWS), TILE * TILE_ROWS); /* a tile a block */
    TFG_CUDA_BY_SIZE(esz, T, gather_tiles_kernel<T><<<blocks, threads, 0, cx->stream>>>(tp, (const T *)src, (T *)dst))
    TFG_CUDA_LAUNCHED(ctx);
    return TFG_OK;
  }
  TFG_CUDA_BY_SIZE(esz, T, {
    if (tfg_cuda_fits32(n)) return TFG_CUDA_LAUNCH(ctx, n, gather_kernel<T, uint32_t>, ix, (const T *)src, (T *)dst, n);
    return TFG_CUDA_LAUNCH(ctx, n, gather_kernel<T, uint64_t>, ix, (const T *)src, (T *)dst, n);
  })
  return TFG_OK; /* not reached: esz is one of the four */
}

/* ---- row copies (concat, slice) ------------------------------------------- */

/* Row o (o < outer) of len bytes: dst[o * dstep + doff + k] = src[o * sstep
 * + soff + k], k < len; all in units of U (every quantity divisible by
 * sizeof(U): the caller passes them in units). */
template <typename U, typename I>
static __host__ __device__ __forceinline__ void rows_one(int64_t i, const U *src, U *dst, int64_t len, int64_t dstep,
                                                         int64_t doff, int64_t sstep, int64_t soff) {
  I o = (I)i / (I)len, k = (I)i - o * (I)len;
  dst[(int64_t)o * dstep + doff + (int64_t)k] = src[(int64_t)o * sstep + soff + (int64_t)k];
}

template <typename U, typename I>
static __global__ void rows_kernel(const U *src, U *dst, int64_t outer, int64_t len, int64_t dstep, int64_t doff,
                                   int64_t sstep, int64_t soff) {
  TFG_CUDA_LOOP(i, outer * len) rows_one<U, I>(i, src, dst, len, dstep, doff, sstep, soff);
}

template <typename U>
static tfg_status rows_launch(tfg_kernel_ctx *ctx, const char *src, char *dst, int64_t outer, int64_t len,
                              int64_t dstep, int64_t doff, int64_t sstep, int64_t soff) {
  const int64_t w = (int64_t)sizeof(U);
  int64_t n = outer * (len / w);
  if (tfg_cuda_fits32(n))
    return TFG_CUDA_LAUNCH(ctx, n, rows_kernel<U, uint32_t>, (const U *)src, (U *)dst, outer, len / w, dstep / w,
                           doff / w, sstep / w, soff / w);
  return TFG_CUDA_LAUNCH(ctx, n, rows_kernel<U, uint64_t>, (const U *)src, (U *)dst, outer, len / w, dstep / w,
                         doff / w, sstep / w, soff / w);
}

/* The widest unit (16, 8, 4, 2, 1 bytes) dividing every length, step,
 * offset and base address of a row copy. */
static int rows_unit(const void *src, const void *dst, int64_t len, int64_t dstep, int64_t doff, int64_t sstep,
                     int64_t soff) {
  uint64_t all = (uint64_t)len | (uint64_t)dstep | (uint64_t)doff | (uint64_t)sstep | (uint64_t)soff |
                 (uint64_t)(uintptr_t)src | (uint64_t)(uintptr_t)dst;
  return all % 16 == 0 ? 16 : all % 8 == 0 ? 8 : all % 4 == 0 ? 4 : all % 2 == 0 ? 2 : 1;
}

/* Copies outer rows of len bytes (see rows_kernel; all in bytes) in the
 * widest unit that divides every length, step, offset and address. */
static tfg_status rows_run(tfg_kernel_ctx *ctx, const void *src, void *dst, int64_t outer, int64_t len, int64_t dstep,
                           int64_t doff, int64_t sstep, int64_t soff) {
  if (outer == 0 || len == 0) return TFG_OK;
  int w = rows_unit(src, dst, len, dstep, doff, sstep, soff);
  const char *s = (const char *)src;
  char *d = (char *)dst;
  if (w == 16) return rows_launch<uint4>(ctx, s, d, outer, len, dstep, doff, sstep, soff);
  if (w == 8) return rows_launch<uint64_t>(ctx, s, d, outer, len, dstep, doff, sstep, soff);
  if (w == 4) return rows_launch<uint32_t>(ctx, s, d, outer, len, dstep, doff, sstep, soff);
  if (w == 2) return rows_launch<uint16_t>(ctx, s, d, outer, len, dstep, doff, sstep, soff);
  return rows_launch<uint8_t>(ctx, s, d, outer, len, dstep, doff, sstep, soff);
}

/* ---- RESHAPE FLATTEN ----------------------------------------------------------- */

/* Same elements, same order, new shape: a device copy (nothing when the
 * runtime gave the output the input's buffer). */
static tfg_status cuda_copy(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  int64_t n = tfg_shape_numel(&out->shape);
  if (tfg_shape_numel(&in[0].shape) != n || in[0].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "reshape: %lld elements into %lld",
                           (long long)tfg_shape_numel(&in[0].shape), (long long)n);
  if (in[0].data != out->data && n > 0)
    TFG_CUDA_CHECK(ctx, cudaMemcpyAsync(out->data, in[0].data, (size_t)n * tfg_dtype_size(out->dtype),
                                        cudaMemcpyDeviceToDevice, tfg_cuda_of(ctx)->stream));
  return TFG_OK;
}

/* ---- TRANSPOSE ------------------------------------------------------------------ */

/* Output axis i is input axis attrs.perm[i]. */
static tfg_status cuda_transpose(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  int64_t st[TFG_MAX_RANK];
  tfg_status s = tfg_kernel_transpose_strides(ctx, node, in, out, st);
  if (s != TFG_OK) return s;
  return gather_run(ctx, &out->shape, st, in[0].data, out->data, tfg_dtype_size(out->dtype));
}

/* ---- BROADCAST ------------------------------------------------------------------ */

/* NumPy broadcast of in[0] to out's shape: the input is aligned to the
 * right, its size-1 and missing axes repeat. */
static tfg_status cuda_broadcast(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  int64_t st[TFG_MAX_RANK];
  tfg_status s = tfg_kernel_broadcast_strides(ctx, in, out, st);
  if (s != TFG_OK) return s;
  return gather_run(ctx, &out->shape, st, in[0].data, out->data, tfg_dtype_size(out->dtype));
}

/* ---- CONCAT SLICE ------------------------------------------------------------- */

/* node->ninputs inputs joined along attrs.axis; all other dims equal. */
static tfg_status cuda_concat(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  int64_t axis = node->attrs.axis, outer, inner;
  tfg_status s = tfg_kernel_concat_rows(ctx, node, in, out, &outer, &inner);
  if (s != TFG_OK) return s;
  const tfg_shape *os = &out->shape;
  /* One launch per input, each writing its own columns of every row. */
  int64_t at = 0, dstep = os->dim[axis] * inner;
  for (int q = 0; q < node->ninputs; q++) {
    int64_t len = in[q].shape.dim[axis] * inner;
    s = rows_run(ctx, in[q].data, out->data, outer, len, dstep, at, len, 0);
    if (s != TFG_OK) return s;
    at += len;
  }
  return TFG_OK;
}

/* Elements [attrs.start, attrs.end) of in[0] along attrs.axis. */
static tfg_status cuda_slice(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  int64_t axis = node->attrs.axis, start = node->attrs.start, end = node->attrs.end, outer, inner;
  tfg_status s = tfg_kernel_slice_rows(ctx, node, in, out, &outer, &inner);
  if (s != TFG_OK) return s;
  int64_t len = (end - start) * inner;
  return rows_run(ctx, in[0].data, out->data, outer, len, len, 0, in[0].shape.dim[axis] * inner, start * inner);
}

/* ---- registration ------------------------------------------------------------- */

extern "C" void tfg_cuda_register_shape(tfg_kernel_fn *table) {
  static const tfg_cuda_kernel_row rows[] = {
      {TFG_OP_RESHAPE, cuda_copy}, {TFG_OP_FLATTEN, cuda_copy},
      {TFG_OP_TRANSPOSE, cuda_transpose},
      {TFG_OP_CONCAT, cuda_concat},
      {TFG_OP_SLICE, cuda_slice},
      {TFG_OP_BROADCAST, cuda_broadcast},
  };
  tfg_cuda_register_rows(table, rows);
}
