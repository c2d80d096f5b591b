/* kernels/cuda/common.cuh: what the kernel files of kernels/cuda share:
 * the C headers with C linkage, grid sizes and grid-stride loops, launch
 * and scratch checks that do not return, the registration of a file's
 * kernels from its table, library handles destroyed on every path out, the device side of strided and broadcast index math,
 * element-size dispatch and the device error flag.
 *
 *   #include "kernels/cuda/common.cuh"
 *
 *   tfg_index_map ix;                        // host: out = f(a, b) broadcast
 *   if (!tfg_index_broadcast(&ix, &out->shape, in, 2)) ...fail...
 *   kern<<<tfg_cuda_blocks(cx, n, TFG_CUDA_THREADS), TFG_CUDA_THREADS, 0, cx->stream>>>(ix, ...);
 *   TFG_CUDA_LAUNCHED(ctx);
 *
 *   __global__ void kern(tfg_index_map ix, ...) {   // device
 *     TFG_CUDA_LOOP(i, n) {
 *       uint64_t off[2];
 *       tfg_cuda_offsets<uint64_t, 2>(ix, (uint64_t)i, off);  // a[off[0]], b[off[1]]
 *     }
 *   }
 *
 * The index map is the CPU's (kernels/index_math.h: each operand gets a
 * stride per output axis, 0 along a broadcast axis; size-1 axes dropped,
 * contiguous ones merged). Output element pos (row-major over the
 * simplified dims) reads operand k at sum over axes i of idx_i(pos) *
 * st[k][i]; tfg_cuda_offsets computes that per position on the device.
 * Formulas that must round like the CPU's live in the shared headers of
 * kernels/ (kernels/hostdev.h and those built on it). */
#ifndef TFG_KERNELS_CUDA_COMMON_CUH
#define TFG_KERNELS_CUDA_COMMON_CUH

/* The system headers first, so that the extern "C" block below only
 * wraps tfg's own C declarations. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* tfg's headers have no extern "C" guards of their own; without this the
 * C functions they declare (tfg_kernel_fail, tfg_shape_numel, ...) would be
 * referenced under C++ mangled names and fail to link. */
extern "C" {
#include "base/status.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "kernels/kernel.h"
}
#include "kernels/cuda/cuda.h"
#include "kernels/index_math.h"

/* ---- grids -------------------------------------------------------------- */

/* Threads per block of the flat (grid-stride) kernels. */
#define TFG_CUDA_THREADS 256

/* Blocks for a grid-stride loop over n items with `threads` threads per
 * block: one item per thread up to a few waves of the device's
 * multiprocessors, after which each thread loops. Never 0 (callers skip
 * the launch for n == 0 anyway). */
static inline unsigned tfg_cuda_blocks(const tfg_cuda_ctx *cx, int64_t n, int threads) {
  int64_t sms = cx && cx->sms > 0 ? cx->sms : 132;
  int64_t cap = sms * (2048 / threads) * 4; /* 4 waves of full occupancy */
  int64_t b = (n + threads - 1) / threads;
  if (b > cap) b = cap;
  if (b < 1) b = 1;
  return (unsigned)b;
}

/* for (i over [0, n)) spread over the whole grid, 64-bit. */
#define TFG_CUDA_LOOP(i, n)                                                              \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n); \
       i += (int64_t)blockDim.x * gridDim.x)

/* Launches the flat (grid-stride) kernel kern over n > 0 items, one per
 * thread (tfg_cuda_blocks' grid of TFG_CUDA_THREADS-thread blocks) on the
 * launch's stream, with arguments args (converted to kern's parameter
 * types), and returns its launch error as TFG_CUDA_LAUNCHED would at the
 * call site:
 *   return TFG_CUDA_LAUNCH(ctx, n, fill_kernel<float>, (float *)out->data, n, v); */
#define TFG_CUDA_LAUNCH(ctx, n, ...) tfg_cuda_launch_((ctx), (n), __FILE__, __LINE__, __VA_ARGS__)

template <typename... P, typename... A>
static tfg_status tfg_cuda_launch_(tfg_kernel_ctx *ctx, int64_t n, const char *file, int line, void (*kern)(P...),
                                   A... args) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  kern<<<tfg_cuda_blocks(cx, n, TFG_CUDA_THREADS), TFG_CUDA_THREADS, 0, cx->stream>>>(args...);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return tfg_cuda_fail_call(ctx, "cudaGetLastError()", cudaGetErrorString(e), file, line);
  return TFG_OK;
}

/* The most blocks tfg_cuda_grid gives a launch. */
#define TFG_CUDA_GRID_CAP (1LL << 20)

/* Blocks for a grid-stride kernel over `work` items that each block takes
 * `per_block` at a time (one per thread, per warp, per block...):
 * ceil(work / per_block), at least 1, at most TFG_CUDA_GRID_CAP (the
 * kernel loops over the rest). For kernels that size their grid by the
 * work rather than by the device (tfg_cuda_blocks). */
static inline unsigned tfg_cuda_grid(int64_t work, int64_t per_block) {
  int64_t b = (work + per_block - 1) / per_block;
  return (unsigned)(b < 1 ? 1 : b > TFG_CUDA_GRID_CAP ? TFG_CUDA_GRID_CAP : b);
}

/* ---- checks that do not return ------------------------------------------- */

/* TFG_CUDA_LAUNCHED and TFG_CUDA_CHECK (cuda.h) return at once; a kernel
 * that holds stream-ordered scratch must free it first. These record the
 * first failure in *s instead (a later one is dropped), naming the call
 * and the caller's file:line. */
#define TFG_CUDA_NOTE_LAUNCH(ctx, s, what) tfg_cuda_note_launch_((ctx), (s), (what), __FILE__, __LINE__)
#define TFG_CUDA_FREE_SCRATCH(ctx, s, p) tfg_cuda_free_scratch_((ctx), (s), (p), __FILE__, __LINE__)

/* After a launch: its launch error, as `what` ("kern<<<>>>"). */
static inline void tfg_cuda_note_launch_(tfg_kernel_ctx *ctx, tfg_status *s, const char *what, const char *file,
                                         int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess && *s == TFG_OK) *s = tfg_cuda_fail_call(ctx, what, cudaGetErrorString(e), file, line);
}

/* Frees p (cudaMallocAsync scratch, or NULL) on the launch's stream. */
static inline void tfg_cuda_free_scratch_(tfg_kernel_ctx *ctx, tfg_status *s, void *p, const char *file, int line) {
  if (!p) return;
  cudaError_t e = cudaFreeAsync(p, tfg_cuda_of(ctx)->stream);
  if (e != cudaSuccess && *s == TFG_OK)
    *s = tfg_cuda_fail_call(ctx, "cudaFreeAsync", cudaGetErrorString(e), file, line);
}

/* ---- registration ------------------------------------------------------- */

/* One row of a file's kernels: an op and the kernel that runs it. A file
 * lists its rows a line per kernel, with every op that kernel runs. */
struct tfg_cuda_kernel_row {
  int op;
  tfg_kernel_fn fn;
};

/* Registers a file's kernels, its table of rows, in the registry's table
 * (indexed by op id): table[row.op] = row.fn for each row. */
template <size_t N>
static inline void tfg_cuda_register_rows(tfg_kernel_fn *table, const tfg_cuda_kernel_row (&rows)[N]) {
  for (const tfg_cuda_kernel_row &r : rows) table[r.op] = r.fn;
}

/* ---- library handles ---------------------------------------------------- */

/* A cuDNN descriptor or cuBLASLt object that is destroyed on every path
 * out of the scope holding it, if it was created: create it into &x.h,
 * pass x where the handle goes. Destroy only frees host memory, so its
 * status has nowhere to go. */
template <typename H, auto Destroy>
struct tfg_cuda_handle {
  H h = nullptr;
  tfg_cuda_handle() = default;
  tfg_cuda_handle(const tfg_cuda_handle &) = delete;
  tfg_cuda_handle &operator=(const tfg_cuda_handle &) = delete;
  ~tfg_cuda_handle() {
    if (h) (void)Destroy(h);
  }
  operator H() const { return h; }
};

/* ---- strided and broadcast indexing -------------------------------------- */

/* The offsets off[0..NIN) of the operands at flat output position pos.
 * I is the index type: uint32_t when every operand's offsets and the
 * output's element count fit in 32 bits (the divisions are then 32-bit,
 * several times cheaper), else uint64_t. Axis 0 needs no division.
 * Also callable on the host (tests of the index math). */
#ifdef __CUDA_ARCH__
#define TFG_CUDA_UNROLL_ _Pragma("unroll")
#else /* the host compiler knows no unroll pragma (-Wunknown-pragmas) */
#define TFG_CUDA_UNROLL_
#endif
template <typename I, int NIN>
static __host__ __device__ __forceinline__ void tfg_cuda_offsets(const tfg_index_map &x, I pos, I *off) {
  TFG_CUDA_UNROLL_
  for (int k = 0; k < NIN; k++) off[k] = 0;
  TFG_CUDA_UNROLL_
  for (int i = TFG_MAX_RANK - 1; i >= 1; i--) {
    if (i < x.rank) {
      I d = (I)x.dim[i], q = pos / d, r = pos - q * d;
      TFG_CUDA_UNROLL_
      for (int k = 0; k < NIN; k++) off[k] += r * (I)x.st[k][i];
      pos = q;
    }
  }
  TFG_CUDA_UNROLL_
  for (int k = 0; k < NIN; k++) off[k] += pos * (I)x.st[k][0];
}

/* Whether n elements (and offsets below n) fit the 32-bit index path. */
static inline bool tfg_cuda_fits32(int64_t n) { return n <= (int64_t)UINT32_MAX; }

/* ---- element-size dispatch ------------------------------------------------ */

/* Runs the statements after T with T an unsigned integer type of esz
 * bytes (1, 2, 4, 8): ops that only move elements are dtype-blind and keep
 * every bit (NaN payloads included). Other sizes do nothing: check
 * before. Variadic so the statements may contain commas. */
#define TFG_CUDA_BY_SIZE(esz, T, ...)                     \
  switch (esz) {                                          \
  case 1: { typedef uint8_t T; __VA_ARGS__; } break;      \
  case 2: { typedef uint16_t T; __VA_ARGS__; } break;     \
  case 4: { typedef uint32_t T; __VA_ARGS__; } break;     \
  case 8: { typedef uint64_t T; __VA_ARGS__; } break;     \
  default: break;                                         \
  }

/* ---- the device error flag ---------------------------------------------- */

/* Records a data error in e (cuda.h's tfg_cuda_error) unless one is
 * already there: the first error of the device wins, later ones are
 * dropped. node is the reporting node's id where the kernel knows it,
 * else -1. The backend reads *e at its next synchronize. */
static __device__ __forceinline__ void tfg_cuda_flag(tfg_cuda_error *e, int code, int node,
                                                     long long value, long long limit) {
  if (e && atomicCAS(&e->code, 0, code) == 0) {
    e->node = node;
    e->value = value;
    e->limit = limit;
  }
}

#endif
