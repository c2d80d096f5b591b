/* kernels/cuda/half.cu: f16 and bf16 on a CUDA device for the ops whose
 * kernels compute only in f32 and f64: the staging that runs an op's f32
 * kernel on widened copies of its operands (tfg_cuda_staged, called by
 * kernels/cuda/registry.cu for the ops its table marks as not native),
 * and the conversion kernels it queues. The GPU twin of
 * kernels/cpu/half.c's tfg_cpu_staged, with the same semantics: the
 * 16-bit float inputs are widened to f32 (exactly), the op's f32 kernel
 * computes and accumulates as it does for f32 tensors, and its output
 * (and each input the op updates in place) is rounded once back to the
 * 16-bit format, to nearest even. Both sides then round the same kind of
 * f32 value once, so they agree to the f32 kernels' own tolerance plus
 * one ulp of the 16-bit format (tests/gpu/conformance.c), and exactly
 * where the f32 results are equal.
 *
 * Cost: an f32 copy of every 16-bit float operand and of the output
 * (twice the bytes of the 16-bit tensor), in one stream-ordered scratch
 * allocation (cudaMallocAsync on the launch's stream, cudaFreeAsync after
 * the last conversion: legal inside a CUDA-graph capture, where it
 * becomes the graph's allocation nodes), plus one read and one write of
 * each such tensor by the conversion kernels, which are memory-bound.
 * Conversions move four elements per thread and per access (8-byte
 * 16-bit loads, 16-byte f32 stores) when both buffers are aligned for
 * it, one at a time otherwise. They use CUDA's intrinsics
 * (__half2float, __float2half_rn, __float2bfloat16_rn: round to nearest
 * even, f16 subnormals kept, overflow to infinity); only NaN goes through
 * kernels/cast_math.h's bit functions, so a NaN keeps the payload bits the
 * CPU keeps (the intrinsics return a canonical NaN) and the bits of a
 * staged result equal the CPU's wherever its f32 value does. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"

/* Inputs at most (tfg_cpu_staged's limit too); every op has fewer. */
enum { MAX_STAGED = 8 };
/* Each staged buffer starts on this boundary of the one scratch block. */
static const size_t SCRATCH_ALIGN = 256;

/* Element i of src into dst: widened to f32 when WIDEN, else rounded
 * from f32 to the 16-bit format. */
template <bool BF16, bool WIDEN>
static __device__ __forceinline__ void convert1(const void *__restrict__ src, void *__restrict__ dst, int64_t i) {
  if (WIDEN) ((float *)dst)[i] = tfg_cuda_widen1<BF16>(((const uint16_t *)src)[i]);
  else ((uint16_t *)dst)[i] = tfg_cuda_narrow1<BF16>(((const float *)src)[i]);
}

/* Elements 4i .. 4i + 3 in one 8-byte (16-bit side) and one 16-byte (f32
 * side) access. */
template <bool BF16, bool WIDEN>
static __device__ __forceinline__ void convert4(const void *__restrict__ src, void *__restrict__ dst, int64_t i) {
  if (WIDEN) {
    uint2 v = ((const uint2 *)src)[i];
    ((float4 *)dst)[i] =
        make_float4(tfg_cuda_widen1<BF16>((uint16_t)(v.x & 0xFFFFu)), tfg_cuda_widen1<BF16>((uint16_t)(v.x >> 16)),
                    tfg_cuda_widen1<BF16>((uint16_t)(v.y & 0xFFFFu)), tfg_cuda_widen1<BF16>((uint16_t)(v.y >> 16)));
  } else {
    float4 f = ((const float4 *)src)[i];
    ((uint2 *)dst)[i] =
        make_uint2((uint32_t)tfg_cuda_narrow1<BF16>(f.x) | (uint32_t)tfg_cuda_narrow1<BF16>(f.y) << 16,
                   (uint32_t)tfg_cuda_narrow1<BF16>(f.z) | (uint32_t)tfg_cuda_narrow1<BF16>(f.w) << 16);
  }
}

/* dst[i] = src[i] converted (convert1) for i < n; VEC: four at a time
 * (the 16-bit side 8-byte and the f32 side 16-byte aligned), the tail of
 * n % 4 by the first threads. */
template <bool BF16, bool WIDEN, bool VEC>
static __global__ void convert_kernel(const void *__restrict__ src, void *__restrict__ dst, int64_t n) {
  int64_t done = 0;
  if (VEC) {
    done = n / 4 * 4;
    TFG_CUDA_LOOP(i, n / 4) convert4<BF16, WIDEN>(src, dst, i);
  }
  TFG_CUDA_LOOP(j, n - done) convert1<BF16, WIDEN>(src, dst, done + j);
}

static bool is_half(tfg_dtype t) { return t == TFG_DTYPE_F16 || t == TFG_DTYPE_BF16; }

static bool aligned(const void *p, size_t a) { return (uintptr_t)p % a == 0; }

template <bool BF16, bool WIDEN>
static tfg_status launch_convert(tfg_kernel_ctx *ctx, const void *src, void *dst, int64_t n, bool vec) {
  if (vec) return TFG_CUDA_LAUNCH(ctx, n / 4, convert_kernel<BF16, WIDEN, true>, src, dst, n); /* a thread per four */
  return TFG_CUDA_LAUNCH(ctx, n, convert_kernel<BF16, WIDEN, false>, src, dst, n);
}

/* Queues the conversion of n elements between half (dtype dt) and f32:
 * widening when widen, else rounding f32 back into half. */
static tfg_status convert(tfg_kernel_ctx *ctx, tfg_dtype dt, bool widen, void *half, float *f32, int64_t n) {
  if (n == 0) return TFG_OK;
  bool vec = aligned(half, 8) && aligned(f32, 16) && n >= 4;
  const void *src = widen ? (const void *)half : (const void *)f32;
  void *dst = widen ? (void *)f32 : half;
  if (dt == TFG_DTYPE_BF16)
    return widen ? launch_convert<true, true>(ctx, src, dst, n, vec) : launch_convert<true, false>(ctx, src, dst, n, vec);
  return widen ? launch_convert<false, true>(ctx, src, dst, n, vec) : launch_convert<false, false>(ctx, src, dst, n, vec);
}

static size_t round_up(size_t x) { return (x + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN; }

extern "C" tfg_status tfg_cuda_staged(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                      tfg_tensor *out, tfg_kernel_fn f32, uint32_t writeback) {
  int nin = node->ninputs;
  if (nin > MAX_STAGED)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: too many inputs to stage", tfg_kernel_op_name(node->op));
  /* One scratch block: each 16-bit tensor's f32 copy at its offset. */
  tfg_tensor sin[MAX_STAGED], sout;
  size_t off[MAX_STAGED + 1], total = 0;
  for (int k = 0; k <= nin; k++) {
    const tfg_tensor *t = k < nin ? &in[k] : out;
    off[k] = total;
    int64_t n = tfg_shape_numel(&t->shape);
    if (is_half(t->dtype)) total += round_up((size_t)(n > 0 ? n : 1) * sizeof(float)); /* nonzero: staged even when empty */
  }
  if (total == 0) return f32(ctx, node, in, out); /* nothing 16-bit: the op as it is */
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  char *scratch = NULL;
  cudaError_t e = cudaMallocAsync((void **)&scratch, total, cx->stream);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); /* not sticky; clear it for later checks */
    return tfg_kernel_fail(ctx, TFG_ERR_OOM, "%s: out of device memory for the f32 copies of its f16/bf16 operands (%zu bytes)",
                           tfg_kernel_op_name(node->op), total);
  }
  if (e != cudaSuccess) return tfg_cuda_fail_call(ctx, "cudaMallocAsync", cudaGetErrorString(e), __FILE__, __LINE__);
  tfg_status st = TFG_OK;
  for (int k = 0; k <= nin; k++) {
    const tfg_tensor *t = k < nin ? &in[k] : out;
    tfg_tensor *s = k < nin ? &sin[k] : &sout;
    *s = *t;
    if (!is_half(t->dtype)) continue;
    s->dtype = TFG_DTYPE_F32;
    s->data = scratch + off[k];
    if (k < nin && st == TFG_OK) st = convert(ctx, t->dtype, true, t->data, (float *)s->data, tfg_shape_numel(&t->shape));
  }
  if (st == TFG_OK) st = f32(ctx, node, sin, &sout);
  if (st == TFG_OK && sout.data != out->data)
    st = convert(ctx, out->dtype, false, out->data, (float *)sout.data, tfg_shape_numel(&out->shape));
  for (int k = 0; k < nin && st == TFG_OK; k++)
    if ((writeback >> k & 1) && sin[k].data != in[k].data)
      st = convert(ctx, in[k].dtype, false, in[k].data, (float *)sin[k].data, tfg_shape_numel(&in[k].shape));
  TFG_CUDA_FREE_SCRATCH(ctx, &st, scratch); /* after the queued work in stream order */
  return st;
}
