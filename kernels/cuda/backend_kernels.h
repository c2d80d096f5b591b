/* kernels/cuda/backend_kernels.h: the kernels the CUDA backend itself
 * queues (runtime/backend_cuda.c), not the ops': the reduction under the
 * ring all-reduce (reduce_peer), the scaling after an NCCL sum, and the
 * --check-numerics scan. Defined in kernels/cuda/collective.cu. Plain C
 * declarations; each queues on the given stream of the current device and
 * returns the launch's error.
 *
 *   tfg_cuda_reduce_peer(dst, src, n, true, 0.5, stream);    // dst = (dst + src) * 0.5, f64
 *   tfg_cuda_reduce_peer_half(dst, src, n, false, 1, stream); // dst = dst + src, f16
 *   tfg_cuda_scale(x, n, false, 0.25, stream);               // x = x * 0.25, f32
 *   tfg_cuda_check_finite(out, n, false, tag, flag, stream);  // f32
 *   tfg_cuda_set_step(block, 12, seed, stream);              // block->step = 12 */
#ifndef TFG_KERNELS_CUDA_BACKEND_KERNELS_H
#define TFG_KERNELS_CUDA_BACKEND_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where tfg_cuda_check_finite reports, in device memory (zeroed by the
 * backend): the first launch (in the order the GPU reaches the scans) to
 * find a NaN or Inf claims the flag with its tag, and among that launch's
 * elements the lowest index wins. */
typedef struct tfg_cuda_numerics {
  unsigned long long tag; /* 0: nothing found; else the tag of the scan that found one */
  /* ~((index << 2) | kind) of the lowest bad index found (kind 0 NaN,
   * 1 +Inf, 2 -Inf), so that atomicMax picks the lowest index and 0 means
   * none; tfg_cuda_numerics_decode reads it. */
  unsigned long long inv;
} tfg_cuda_numerics;

/* The index and value (NaN, +Inf or -Inf) that a claimed flag holds. */
static inline void tfg_cuda_numerics_decode(const tfg_cuda_numerics *f, long long *index, double *value) {
  unsigned long long p = ~f->inv;
  *index = (long long)(p >> 2);
  unsigned kind = (unsigned)(p & 3u);
  *value = kind == 0 ? __builtin_nan("") : kind == 1 ? __builtin_inf() : -__builtin_inf();
}

/* dst[i] = (dst[i] + src[i]) * scale for i < count, in f64 when f64 is
 * set, else f32 (scale rounded to f32 first, as the host backend does);
 * scale 1 adds only, so a sum is exact. dst == src is allowed (each
 * element doubles); other overlaps are not. src must be addressable from
 * the current device (the same GPU, or a peer with access enabled). */
cudaError_t tfg_cuda_reduce_peer(void *dst, const void *src, size_t count, bool f64, double scale,
                                 cudaStream_t stream);

/* The same for 16-bit floats (bf16 when bf16 is set, else f16), as the
 * host backend reduces them and as NCCL does: each element widened to
 * f32, (dst + src) * scale in f32 (scale rounded to f32), rounded once to
 * the 16-bit format, to nearest even. */
cudaError_t tfg_cuda_reduce_peer_half(void *dst, const void *src, size_t count, bool bf16, double scale,
                                      cudaStream_t stream);

/* For i < count, every bufs[r][i] (r < n, 1 <= n <= 8) becomes
 * (bufs[0][i] + ... + bufs[n-1][i]) * scale, summed in that order in dt
 * (f32, f64; f16/bf16 in f32, rounded once), scale 1 not multiplied:
 * the shared all-reduce's one pass (runtime/backend.h reduce_all). Every
 * buffer addressable from the current device. 16-byte loads and stores
 * when every buffer is 16-byte aligned. cudaErrorInvalidValue for
 * another dtype or n. */
cudaError_t tfg_cuda_reduce_all(void *const *bufs, int n, size_t count, int dt, double scale, cudaStream_t stream);

/* x[i] = x[i] * scale for i < count, in f64 when f64 is set, else f32
 * (scale rounded to f32 first): one rounding, as reduce_peer's multiply. */
cudaError_t tfg_cuda_scale(void *x, size_t count, bool f64, double scale, cudaStream_t stream);

/* Scans x[0..n) (f64 when f64 is set, else f32) for NaN and Inf and
 * records the first in *flag under tag (nonzero). */
/* Writes {step, seed} into the step block (kernels/cuda/cuda.h's
 * tfg_cuda_step) in stream order: the values travel as kernel arguments,
 * so calls may follow each other without waiting (a copy from one host
 * buffer would read it when it runs, not when it was queued). */
struct tfg_cuda_step;
cudaError_t tfg_cuda_set_step(struct tfg_cuda_step *block, long long step, unsigned long long seed,
                              cudaStream_t stream);

cudaError_t tfg_cuda_check_finite(const void *x, size_t n, bool f64, unsigned long long tag,
                                  tfg_cuda_numerics *flag, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
