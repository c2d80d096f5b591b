/* kernels/cuda/common.cuh: device helpers the kernel files of kernels/cuda
 * share: the C headers with C linkage, grid sizes and grid-stride loops,
 * strided/broadcast index math, element-size dispatch, arithmetic that is
 * never fused into an FMA, and the device error flag.
 *
 *   #include "kernels/cuda/common.cuh"
 *
 *   tfg_cuda_index ix;                       // host: out = f(a, b) broadcast
 *   if (!tfg_cuda_index_broadcast(&ix, &out->shape, in, 2)) ...fail...
 *   kern<<<tfg_cuda_blocks(cx, n, TFG_CUDA_THREADS), TFG_CUDA_THREADS, 0, cx->stream>>>(ix, ...);
 *   TFG_CUDA_LAUNCHED(ctx);
 *
 *   __global__ void kern(tfg_cuda_index ix, ...) {   // device
 *     TFG_CUDA_LOOP(i, n) {
 *       uint64_t off[2];
 *       tfg_cuda_offsets<uint64_t, 2>(ix, (uint64_t)i, off);  // a[off[0]], b[off[1]]
 *     }
 *   }
 *
 * The index math is the CPU's (kernels/cpu/elementwise.c bcast_init,
 * kernels/cpu/shape.c gather_init): each operand gets a stride per output
 * axis (0 along a broadcast axis), size-1 output axes are dropped and an
 * axis merges into the one before it when every operand walks the pair as
 * one axis, so a same-shape operation becomes one flat axis of stride 1.
 * Output element pos (row-major over the simplified dims) reads operand
 * k at sum over axes i of idx_i(pos) * st[k][i]. */
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
#include "compiler/graph.h"
#include "compiler/ops.h"
#include "kernels/kernel.h"
}
#include "kernels/cuda/cuda.h"

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

/* ---- names -------------------------------------------------------------- */

/* The op's name ("add") for messages; kernels do not depend on the op
 * registry (compiler/ops.c), as the CPU kernels do not. */
static inline const char *tfg_cuda_op_name(int op) {
  static const char *const names[] = {
#define TFG_CUDA_OP_NAME_(id, name, sig) name,
      TFG_OPS(TFG_CUDA_OP_NAME_)
#undef TFG_CUDA_OP_NAME_
  };
  return op >= 0 && op < TFG_OP_COUNT ? names[op] : "?";
}

/* ---- strided and broadcast indexing -------------------------------------- */

#define TFG_CUDA_MAX_OPERANDS 3

/* Up to three operands read at strides over one output shape, simplified
 * (rank >= 1; dims > 1 except for a one-element output). Passed to kernels
 * by value. */
typedef struct tfg_cuda_index {
  int rank, nin;
  int64_t dim[TFG_MAX_RANK];
  int64_t st[TFG_CUDA_MAX_OPERANDS][TFG_MAX_RANK]; /* in elements; 0: broadcast */
} tfg_cuda_index;

/* Fills x for output shape out and operand strides st[k][i] (elements, per
 * output axis i): drops size-1 output axes and merges axis i into the kept
 * axis before it when, for every operand, that axis's stride equals
 * st[k][i] * dim[i]. The same rule as the CPU's bcast_init/gather_init. */
static inline void tfg_cuda_index_simplify(tfg_cuda_index *x, const tfg_shape *out,
                                           int64_t st[][TFG_MAX_RANK], int nin) {
  x->nin = nin;
  x->rank = 0;
  for (int i = 0; i < out->rank; i++) {
    if (out->dim[i] == 1) continue; /* index always 0: contributes nothing */
    int p = x->rank - 1;
    bool merge = p >= 0;
    for (int k = 0; k < nin && merge; k++) merge = x->st[k][p] == st[k][i] * out->dim[i];
    if (merge) {
      x->dim[p] *= out->dim[i];
      for (int k = 0; k < nin; k++) x->st[k][p] = st[k][i];
    } else {
      x->dim[x->rank] = out->dim[i];
      for (int k = 0; k < nin; k++) x->st[k][x->rank] = st[k][i];
      x->rank++;
    }
  }
  if (x->rank == 0) { /* every axis has size 1 (or a scalar): one element */
    x->rank = 1;
    x->dim[0] = 1;
    for (int k = 0; k < nin; k++) x->st[k][0] = 0;
  }
  for (int k = nin; k < TFG_CUDA_MAX_OPERANDS; k++)
    for (int i = 0; i < TFG_MAX_RANK; i++) x->st[k][i] = 0;
  for (int i = x->rank; i < TFG_MAX_RANK; i++) {
    x->dim[i] = 1;
    for (int k = 0; k < TFG_CUDA_MAX_OPERANDS; k++) x->st[k][i] = 0;
  }
}

/* NumPy broadcasting of in[0..nin) (nin <= 3) to shape out: each input is
 * aligned to the right; a missing or size-1 axis gets stride 0. False when
 * an input does not broadcast to out (rank too high, or a dim that is
 * neither 1 nor the output's). */
static inline bool tfg_cuda_index_broadcast(tfg_cuda_index *x, const tfg_shape *out,
                                            const tfg_tensor *in, int nin) {
  int r = out->rank;
  int64_t st[TFG_CUDA_MAX_OPERANDS][TFG_MAX_RANK];
  if (nin < 1 || nin > TFG_CUDA_MAX_OPERANDS || r < 0 || r > TFG_MAX_RANK) return false;
  for (int k = 0; k < nin; k++) {
    const tfg_shape *s = &in[k].shape;
    if (s->rank > r) return false;
    int64_t stride = 1;
    for (int i = r - 1; i >= 0; i--) {
      int j = i - (r - s->rank);
      int64_t d = j >= 0 ? s->dim[j] : 1;
      if (d != 1 && d != out->dim[i]) return false;
      st[k][i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  tfg_cuda_index_simplify(x, out, st, nin);
  return true;
}

/* One operand read at strides st[i] (elements) per axis i of out: the
 * gather behind transpose and broadcast. */
static inline void tfg_cuda_index_gather(tfg_cuda_index *x, const tfg_shape *out,
                                         const int64_t *st) {
  int64_t s[1][TFG_MAX_RANK];
  for (int i = 0; i < out->rank; i++) s[0][i] = st[i];
  tfg_cuda_index_simplify(x, out, s, 1);
}

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
static __host__ __device__ __forceinline__ void tfg_cuda_offsets(const tfg_cuda_index &x, I pos, I *off) {
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

/* ---- unfused arithmetic ----------------------------------------------------- */

/* nvcc contracts a * b + c into one FMA by default (one rounding instead
 * of two). Where a formula must round like the CPU kernel's, which never
 * fuses (ISO C mode), write it with these: the _rn intrinsics are never
 * contracted and stay IEEE under --use_fast_math. The host versions
 * (plain operators) serve host tests of device formulas. */
#ifdef __CUDA_ARCH__
#define TFG_CUDA_RN_(dev, host) return dev
#else
#define TFG_CUDA_RN_(dev, host) return host
#endif
#define TFG_CUDA_HD_ static __host__ __device__ __forceinline__
TFG_CUDA_HD_ float tfg_cuda_add(float a, float b) { TFG_CUDA_RN_(__fadd_rn(a, b), a + b); }
TFG_CUDA_HD_ float tfg_cuda_sub(float a, float b) { TFG_CUDA_RN_(__fsub_rn(a, b), a - b); }
TFG_CUDA_HD_ float tfg_cuda_mul(float a, float b) { TFG_CUDA_RN_(__fmul_rn(a, b), a * b); }
TFG_CUDA_HD_ float tfg_cuda_div(float a, float b) { TFG_CUDA_RN_(__fdiv_rn(a, b), a / b); }
TFG_CUDA_HD_ float tfg_cuda_sqrt(float a) { TFG_CUDA_RN_(__fsqrt_rn(a), sqrtf(a)); }
TFG_CUDA_HD_ double tfg_cuda_add(double a, double b) { TFG_CUDA_RN_(__dadd_rn(a, b), a + b); }
TFG_CUDA_HD_ double tfg_cuda_sub(double a, double b) { TFG_CUDA_RN_(__dsub_rn(a, b), a - b); }
TFG_CUDA_HD_ double tfg_cuda_mul(double a, double b) { TFG_CUDA_RN_(__dmul_rn(a, b), a * b); }
TFG_CUDA_HD_ double tfg_cuda_div(double a, double b) { TFG_CUDA_RN_(__ddiv_rn(a, b), a / b); }
TFG_CUDA_HD_ double tfg_cuda_sqrt(double a) { TFG_CUDA_RN_(__dsqrt_rn(a), sqrt(a)); }
#undef TFG_CUDA_HD_
#undef TFG_CUDA_RN_

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
