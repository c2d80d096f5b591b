/* kernels/cuda/half.cuh: one f16 or bf16 element to f32 and back on the
 * device, with the CPU's bits (kernels/cast_math.h): the staging of
 * kernels/cuda/half.cu and the 16-bit reduction of collective.cu use it.
 *
 *   float x = tfg_cuda_widen1<false>(h);            // f16 bits -> f32, exact
 *   uint16_t b = tfg_cuda_narrow1<true>(x);         // f32 -> bf16 bits, to nearest even
 *
 * CUDA's intrinsics round to nearest even, keep f16 subnormals and
 * overflow to infinity, as the CPU does; only NaN goes through
 * cast_math.h's bit functions, because the intrinsics return a canonical
 * NaN where the CPU keeps the payload's top bits. */
#ifndef TFG_KERNELS_CUDA_HALF_CUH
#define TFG_KERNELS_CUDA_HALF_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cast_math.h"

template <bool BF16>
static __device__ __forceinline__ float tfg_cuda_widen1(uint16_t h) {
  if (BF16) return __bfloat162float(__ushort_as_bfloat16(h)); /* a shift: NaN payloads kept */
  if ((h & 0x7FFFu) > 0x7C00u) return tfg_cast_f16_to_f32(h);
  return __half2float(__ushort_as_half(h));
}

template <bool BF16>
static __device__ __forceinline__ uint16_t tfg_cuda_narrow1(float x) {
  if (isnan(x)) return BF16 ? tfg_cast_f32_to_bf16(x) : tfg_cast_f32_to_f16(x);
  if (BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return __half_as_ushort(__float2half_rn(x));
}

#endif
