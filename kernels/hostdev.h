/* kernels/hostdev.h: what the headers shared by the CPU kernels (C) and
 * the CUDA kernels (kernels/cuda, C++ under nvcc) need to be one piece of
 * code for both: a function qualifier, and arithmetic that rounds the
 * same on both.
 *
 *   #include "kernels/hostdev.h"
 *
 *   TFG_HD float twice_plus(float x, float y) {      // C: static inline;
 *     return TFG_RN_ADD32(TFG_RN_MUL32(2.0f, x), y);  // nvcc: host and device
 *   }
 *
 * The headers built on it: kernels/elementwise_math.h (elementwise
 * formulas), kernels/cast_math.h (dtype conversions), kernels/index_math.h
 * (broadcast, gather and reduction shapes), kernels/init_math.h
 * (initializers) and kernels/optim_math.h (optimizer updates). A kernel
 * of either backend calls them, so the two compute the same thing from
 * one text; tests can run the device formulas on the host.
 *
 * Never contracted: nvcc contracts a * b + c into one FMA by default,
 * which rounds once where the CPU, computing the same expression, rounds
 * twice (C in ISO mode, -std=c11, never contracts). A formula that must
 * round like the CPU's is written with TFG_RN_*: in device code they are
 * the _rn intrinsics, which are never contracted and stay IEEE under
 * --use_fast_math; on the host the plain operators. */
#ifndef TFG_KERNELS_HOSTDEV_H
#define TFG_KERNELS_HOSTDEV_H

#if defined(__CUDACC__)
#define TFG_HD static __host__ __device__ __forceinline__
#else
#define TFG_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define TFG_RN_ADD32(x, y) __fadd_rn((x), (y))
#define TFG_RN_SUB32(x, y) __fsub_rn((x), (y))
#define TFG_RN_MUL32(x, y) __fmul_rn((x), (y))
#define TFG_RN_DIV32(x, y) __fdiv_rn((x), (y))
#define TFG_RN_SQRT32(x) __fsqrt_rn(x)
#define TFG_RN_ADD64(x, y) __dadd_rn((x), (y))
#define TFG_RN_SUB64(x, y) __dsub_rn((x), (y))
#define TFG_RN_MUL64(x, y) __dmul_rn((x), (y))
#define TFG_RN_DIV64(x, y) __ddiv_rn((x), (y))
#define TFG_RN_SQRT64(x) __dsqrt_rn(x)
#else
#define TFG_RN_ADD32(x, y) ((x) + (y))
#define TFG_RN_SUB32(x, y) ((x) - (y))
#define TFG_RN_MUL32(x, y) ((x) * (y))
#define TFG_RN_DIV32(x, y) ((x) / (y))
#define TFG_RN_SQRT32(x) sqrtf(x)
#define TFG_RN_ADD64(x, y) ((x) + (y))
#define TFG_RN_SUB64(x, y) ((x) - (y))
#define TFG_RN_MUL64(x, y) ((x) * (y))
#define TFG_RN_DIV64(x, y) ((x) / (y))
#define TFG_RN_SQRT64(x) sqrt(x)
#endif

/* TFG_HD_UNREACHABLE(): a point the checks before it exclude, such as
 * the default of a switch over ops that were checked: it stops there
 * instead of computing a value for the wrong op. On the device a trap
 * (the launch fails, and the backend reports it at its next
 * synchronize), on the host an abort. Either way the compiler knows that
 * nothing follows, so a function may end in one without a return. */
#if defined(__CUDA_ARCH__)
#define TFG_HD_UNREACHABLE() do { __trap(); __builtin_unreachable(); } while (0)
#else
#define TFG_HD_UNREACHABLE() __builtin_trap()
#endif

/* GCC never contracts in ISO C mode; clang does by default, unless told.
 * The pragma holds to the end of the including file, which is what a
 * kernel file that rounds like this wants anyway. */
#if defined(__clang__) && !defined(__CUDACC__)
#pragma STDC FP_CONTRACT OFF
#endif

/* tfg's own headers are C; included from a .cu file they must keep C
 * linkage (common.cuh does the same for its includes). Wrap them in
 * TFG_C_BEGIN / TFG_C_END. */
#ifdef __cplusplus
#define TFG_C_BEGIN extern "C" {
#define TFG_C_END }
#else
#define TFG_C_BEGIN
#define TFG_C_END
#endif

#endif
