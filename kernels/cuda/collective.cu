/* kernels/cuda/collective.cu: the CUDA backend's own kernels
 * (kernels/cuda/backend_kernels.h): reduce_peer's elementwise
 * dst = (dst + src) * scale, which the ring all-reduce of
 * runtime/collective.c is built from on GPUs, the x * scale that follows
 * an NCCL sum when the scale is not NCCL's own mean, the NaN/Inf scan
 * of --check-numerics, and set_step's one-thread write of the step block.
 *
 * Both are grid-stride loops over 64-bit indices with a grid of a few
 * waves of the device's multiprocessors. The reduction rounds like the
 * host backend's loop (one IEEE add, then one multiply when scale is not
 * 1; the _rn intrinsics keep nvcc from fusing them into an FMA), so a
 * ring over GPUs gives the same bits as one over host devices. */
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/backend_kernels.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/half.cuh"

namespace {

const int THREADS = 256;

/* Blocks for n items: enough for every thread to get one, at most 8 per
 * multiprocessor (the device's count, read once per call: cheap, cached
 * by the runtime). */
unsigned blocks_for(size_t n) {
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  size_t want = (n + THREADS - 1) / THREADS, cap = (size_t)(sms > 0 ? sms : 132) * 8;
  if (want > cap) want = cap;
  return want ? (unsigned)want : 1u;
}

__global__ void reduce_f32(float *d, const float *x, size_t n, float scale, bool scaled) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = __fadd_rn(d[i], x[i]);
    d[i] = scaled ? __fmul_rn(v, scale) : v;
  }
}

__global__ void reduce_f64(double *d, const double *x, size_t n, double scale, bool scaled) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    double v = __dadd_rn(d[i], x[i]);
    d[i] = scaled ? __dmul_rn(v, scale) : v;
  }
}

/* 16-bit elements through f32: one add and (scaled) one multiply in f32,
 * rounded once to f16 or bf16 (kernels/cuda/half.cuh), the bits of the
 * host's reduce_half. */
template <bool BF16>
__global__ void reduce_half(uint16_t *d, const uint16_t *x, size_t n, float scale, bool scaled) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = __fadd_rn(tfg_cuda_widen1<BF16>(d[i]), tfg_cuda_widen1<BF16>(x[i]));
    d[i] = tfg_cuda_narrow1<BF16>(scaled ? __fmul_rn(v, scale) : v);
  }
}

__global__ void scale_f32(float *x, size_t n, float scale) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __fmul_rn(x[i], scale);
}

__global__ void scale_f64(double *x, size_t n, double scale) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __dmul_rn(x[i], scale);
}

template <typename T>
__global__ void check_finite(const T *x, size_t n, unsigned long long tag, tfg_cuda_numerics *flag) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    T v = x[i];
    if (isfinite(v)) continue;
    unsigned long long kind = isnan(v) ? 0ull : v > 0 ? 1ull : 2ull;
    /* The first scan to find one claims the flag; its threads (and only
     * its) then keep the lowest index. */
    unsigned long long owner = atomicCAS(&flag->tag, 0ull, tag);
    if (owner == 0ull || owner == tag) atomicMax(&flag->inv, ~(((unsigned long long)i << 2) | kind));
  }
}

/* reduce_all: the buffers by value (a kernel argument: a CUDA graph
 * keeps them with the launch). */
struct bufs8 {
  void *p[8];
};

/* One rounded add and multiply (no FMA contraction), as the host's. */
__device__ __forceinline__ float radd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double radd(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float rmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double rmul(double a, double b) { return __dmul_rn(a, b); }

/* The rank loops below run to the constant 8 with a guard, so they
 * unroll: each b.p[r] is then a register (a loop to n would index the
 * argument at run time, through a copy in local memory) and the loads of
 * the ranks issue together. */

/* One element i of every buffer: their sum in order, scaled once. */
template <typename T>
__device__ __forceinline__ void reduce_all_one(const bufs8 &b, int n, size_t i, T scale, bool scaled) {
  T acc = ((const T *)b.p[0])[i];
#pragma unroll
  for (int r = 1; r < 8; r++)
    if (r < n) acc = radd(acc, ((const T *)b.p[r])[i]);
  if (scaled) acc = rmul(acc, scale);
#pragma unroll
  for (int r = 0; r < 8; r++)
    if (r < n) ((T *)b.p[r])[i] = acc;
}

template <typename T>
__global__ void reduce_all_scalar(bufs8 b, int n, size_t count, T scale, bool scaled) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    reduce_all_one<T>(b, n, i, scale, scaled);
}

/* 16 bytes per load: V elements of T (float4: 4, double2: 2) at a time,
 * each lane's sum in the scalar order; the last count % V by the scalar
 * step. */
template <typename T, typename V, int W>
__global__ void reduce_all_vec(bufs8 b, int n, size_t count, T scale, bool scaled) {
  size_t nv = count / W, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += stride) {
    V acc = ((const V *)b.p[0])[v];
    T *a = (T *)&acc;
#pragma unroll
    for (int r = 1; r < 8; r++) {
      if (r >= n) break;
      V x = ((const V *)b.p[r])[v];
      const T *xs = (const T *)&x;
#pragma unroll
      for (int k = 0; k < W; k++) a[k] = radd(a[k], xs[k]);
    }
    if (scaled)
#pragma unroll
      for (int k = 0; k < W; k++) a[k] = rmul(a[k], scale);
#pragma unroll
    for (int r = 0; r < 8; r++)
      if (r < n) ((V *)b.p[r])[v] = acc;
  }
  size_t i = nv * W + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) reduce_all_one<T>(b, n, i, scale, scaled);
}

template <bool BF16>
__global__ void reduce_all_half(bufs8 b, int n, size_t count, float scale, bool scaled) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    float acc = tfg_cuda_widen1<BF16>(((const uint16_t *)b.p[0])[i]);
#pragma unroll
    for (int r = 1; r < 8; r++)
      if (r < n) acc = __fadd_rn(acc, tfg_cuda_widen1<BF16>(((const uint16_t *)b.p[r])[i]));
    uint16_t out = tfg_cuda_narrow1<BF16>(scaled ? __fmul_rn(acc, scale) : acc);
#pragma unroll
    for (int r = 0; r < 8; r++)
      if (r < n) ((uint16_t *)b.p[r])[i] = out;
  }
}

}  // namespace

extern "C" cudaError_t tfg_cuda_reduce_all(void *const *bufs, int n, size_t count, int dt, double scale,
                                           cudaStream_t stream) {
  if (n < 1 || n > 8) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  bufs8 b = {};
  bool aligned = true;
  for (int r = 0; r < n; r++) {
    b.p[r] = bufs[r];
    aligned = aligned && (uintptr_t)bufs[r] % 16 == 0;
  }
  float sc = (float)scale;
  switch (dt) {
  case TFG_DTYPE_F32:
    if (aligned)
      reduce_all_vec<float, float4, 4><<<blocks_for(count / 4 + 1), THREADS, 0, stream>>>(b, n, count, sc, sc != 1.0f);
    else
      reduce_all_scalar<float><<<blocks_for(count), THREADS, 0, stream>>>(b, n, count, sc, sc != 1.0f);
    break;
  case TFG_DTYPE_F64:
    if (aligned)
      reduce_all_vec<double, double2, 2><<<blocks_for(count / 2 + 1), THREADS, 0, stream>>>(b, n, count, scale,
                                                                                             scale != 1.0);
    else
      reduce_all_scalar<double><<<blocks_for(count), THREADS, 0, stream>>>(b, n, count, scale, scale != 1.0);
    break;
  case TFG_DTYPE_BF16: reduce_all_half<true><<<blocks_for(count), THREADS, 0, stream>>>(b, n, count, sc, sc != 1.0f); break;
  case TFG_DTYPE_F16: reduce_all_half<false><<<blocks_for(count), THREADS, 0, stream>>>(b, n, count, sc, sc != 1.0f); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t tfg_cuda_reduce_peer(void *dst, const void *src, size_t count, bool f64, double scale,
                                            cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  unsigned b = blocks_for(count);
  if (f64)
    reduce_f64<<<b, THREADS, 0, stream>>>((double *)dst, (const double *)src, count, scale, scale != 1.0);
  else
    reduce_f32<<<b, THREADS, 0, stream>>>((float *)dst, (const float *)src, count, (float)scale,
                                          (float)scale != 1.0f);
  return cudaGetLastError();
}

extern "C" cudaError_t tfg_cuda_reduce_peer_half(void *dst, const void *src, size_t count, bool bf16, double scale,
                                                 cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  unsigned b = blocks_for(count);
  float sc = (float)scale;
  if (bf16)
    reduce_half<true><<<b, THREADS, 0, stream>>>((uint16_t *)dst, (const uint16_t *)src, count, sc, sc != 1.0f);
  else
    reduce_half<false><<<b, THREADS, 0, stream>>>((uint16_t *)dst, (const uint16_t *)src, count, sc, sc != 1.0f);
  return cudaGetLastError();
}

extern "C" cudaError_t tfg_cuda_scale(void *x, size_t count, bool f64, double scale, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  unsigned b = blocks_for(count);
  if (f64)
    scale_f64<<<b, THREADS, 0, stream>>>((double *)x, count, scale);
  else
    scale_f32<<<b, THREADS, 0, stream>>>((float *)x, count, (float)scale);
  return cudaGetLastError();
}

extern "C" cudaError_t tfg_cuda_check_finite(const void *x, size_t n, bool f64, unsigned long long tag,
                                             tfg_cuda_numerics *flag, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  unsigned b = blocks_for(n);
  if (f64)
    check_finite<double><<<b, THREADS, 0, stream>>>((const double *)x, n, tag, flag);
  else
    check_finite<float><<<b, THREADS, 0, stream>>>((const float *)x, n, tag, flag);
  return cudaGetLastError();
}

static __global__ void set_step(tfg_cuda_step *block, long long step, unsigned long long seed) {
  block->step = step;
  block->seed = seed;
}

extern "C" cudaError_t tfg_cuda_set_step(tfg_cuda_step *block, long long step, unsigned long long seed,
                                         cudaStream_t stream) {
  set_step<<<1, 1, 0, stream>>>(block, step, seed);
  return cudaGetLastError();
}
