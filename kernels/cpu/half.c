/* kernels/cpu/half.c: f16 and bf16 on the CPU: block conversions to and
 * from f32, and the staging that runs an op's f32 kernel for them.
 *
 * f16 and bf16 are storage formats here, as in PyTorch's CPU kernels:
 * values are widened to f32 (exactly), the op computes in f32 (sums and
 * products accumulate in f32 or, where the f32 kernel does, in double),
 * and each result is rounded once to the 16-bit format, to nearest even
 * (kernels/cast_math.h). For + - * / and sqrt that is the correctly
 * rounded result: f32 carries more than 2p + 2 bits for both formats
 * (p = 11 for f16, 8 for bf16), so rounding twice cannot differ from
 * rounding once; for the other ops the result is within half an ulp of
 * the 16-bit format plus the f32 computation's own error.
 *
 * Two ways in:
 *   - the elementwise ops, the reductions and softmax convert a block or
 *     a row at a time into an f32 scratch on the stack (or a row buffer)
 *     and run their f32 loops on it (tfg_cpu_half_load/_store);
 *   - every other op (matmul, conv2d and the pools, the losses, norms,
 *     dropout, their gradients, the optimizer updates) is staged whole:
 *     tfg_cpu_staged converts the 16-bit inputs to f32 tensors, runs the
 *     op's f32 kernel and rounds its output (and any input the op updates
 *     in place) back. matmul and conv need whole f32 operands anyway:
 *     OpenBLAS has no f16 gemm, and Debian's has no sbgemm for bf16 either,
 *     so a product is cblas_sgemm on the widened operands; the scatter
 *     gradients (pools, conv, embedding) accumulate in f32 and round once
 *     instead of rounding every addition into a 16-bit output. */
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"

#if defined(__GNUC__) && !defined(__clang__)
/* See kernels/cpu/elementwise.c: lets GCC -O2 vectorize the loops. */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Elements per parallel chunk of a whole-tensor conversion (memory-bound). */
enum { GRAIN_CONVERT = 32768, MAX_STAGED = 8 };

/* x86's F16C converts 8 f16 values per instruction, with the same
 * results as kernels/cast_math.h's bit work (round to nearest even,
 * subnormals, NaN quieted with its top payload bits: the unit test
 * half_block_conversions compares them over every f16 and a spread of
 * f32 patterns). Used when the CPU has it (any x86 since 2012); the
 * portable loops below otherwise, and for bf16, whose widening is a shift
 * the compiler vectorizes anyway. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_F16C_PATH 1

__attribute__((target("avx,f16c"))) static void f16c_load(const uint16_t *s, float *d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  for (; i < n; i++) d[i] = tfg_cast_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f16c_store(const float *s, uint16_t *d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) d[i] = tfg_cast_f32_to_f16(s[i]);
}

static bool has_f16c(void) {
  static int known = -1; /* a benign race: every thread computes the same answer */
  if (known < 0) known = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return known;
}
#endif

/* Converts n values from f16 to f32 (widen) or back with F16C when the
 * build and the CPU have it; false, with nothing converted, when not:
 * then the portable loops do it. */
static bool f16c_convert(bool widen, const void *from, void *to, int64_t n) {
#ifdef HAVE_F16C_PATH
  if (has_f16c()) {
    if (widen)
      f16c_load(from, to, n);
    else
      f16c_store(from, to, n);
    return true;
  }
#endif
  (void)widen, (void)from, (void)to, (void)n;
  return false;
}

void tfg_cpu_half_load(tfg_dtype dt, const void *src, float *dst, int64_t n) {
  const uint16_t *s = src;
  if (dt == TFG_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) dst[i] = tfg_cast_bf16_to_f32(s[i]);
  else if (!f16c_convert(true, s, dst, n))
    for (int64_t i = 0; i < n; i++) dst[i] = tfg_cast_f16_to_f32(s[i]);
}

void tfg_cpu_half_store(tfg_dtype dt, const float *src, void *dst, int64_t n) {
  uint16_t *d = dst;
  if (dt == TFG_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) d[i] = tfg_cast_f32_to_bf16(src[i]);
  else if (!f16c_convert(false, src, d, n))
    for (int64_t i = 0; i < n; i++) d[i] = tfg_cast_f32_to_f16(src[i]);
}

void tfg_cpu_half_load_strided(tfg_dtype dt, const void *src, int64_t stride, float *dst, int64_t n) {
  if (stride == 1) {
    tfg_cpu_half_load(dt, src, dst, n);
    return;
  }
  const uint16_t *s = src;
  if (dt == TFG_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) dst[i] = tfg_cast_bf16_to_f32(s[i * stride]);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = tfg_cast_f16_to_f32(s[i * stride]);
}

void tfg_cpu_half_store_strided(tfg_dtype dt, const float *src, void *dst, int64_t stride, int64_t n) {
  if (stride == 1) {
    tfg_cpu_half_store(dt, src, dst, n);
    return;
  }
  uint16_t *d = dst;
  if (dt == TFG_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) d[i * stride] = tfg_cast_f32_to_bf16(src[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i * stride] = tfg_cast_f32_to_f16(src[i]);
}

/* ---- staging ------------------------------------------------------------------ */

/* One whole-tensor conversion, split over the pool by element range. */
typedef struct convert_job {
  tfg_dtype dt; /* the 16-bit side's dtype */
  bool widen;   /* 16-bit -> f32 (else f32 -> 16-bit) */
  void *half;
  float *f32;
} convert_job;

static void convert_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const convert_job *j = arg;
  uint16_t *h = (uint16_t *)j->half + lo;
  if (j->widen) tfg_cpu_half_load(j->dt, h, j->f32 + lo, hi - lo);
  else tfg_cpu_half_store(j->dt, j->f32 + lo, h, hi - lo);
}

static void convert(tfg_kernel_ctx *ctx, tfg_dtype dt, bool widen, void *half, float *f32, int64_t n) {
  convert_job j = {dt, widen, half, f32};
  if (n > 0) tfg_parallel_for(ctx->pool, n, GRAIN_CONVERT, convert_chunk, &j);
}

/* t as an f32 tensor: a new buffer (widened from t when `fill`) when t
 * is f16/bf16, else t itself. false when out of memory. */
static bool stage(tfg_kernel_ctx *ctx, const tfg_tensor *t, bool fill, tfg_tensor *f) {
  *f = *t;
  if (!tfg_cpu_is_half(t->dtype)) return true;
  int64_t n = tfg_shape_numel(&t->shape);
  f->dtype = TFG_DTYPE_F32;
  f->data = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!f->data) return false;
  if (fill) convert(ctx, t->dtype, true, t->data, f->data, n);
  return true;
}

tfg_status tfg_cpu_staged(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out,
                          tfg_kernel_fn f32) {
  uint32_t writeback = tfg_op_get(node->op)->inplace;
  int nin = node->ninputs;
  if (nin > MAX_STAGED) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: too many inputs to stage", tfg_kernel_op_name(node->op));
  tfg_tensor sin[MAX_STAGED], sout;
  int staged = 0;
  bool ok = true;
  for (; staged < nin && ok; staged++) ok = stage(ctx, &in[staged], true, &sin[staged]);
  bool out_ok = ok && stage(ctx, out, false, &sout);
  tfg_status st = TFG_ERR_NOMEM;
  if (out_ok) {
    st = f32(ctx, node, sin, &sout);
    if (st == TFG_OK) {
      if (sout.data != out->data) convert(ctx, out->dtype, false, out->data, sout.data, tfg_shape_numel(&out->shape));
      for (int k = 0; k < nin; k++)
        if ((writeback >> k & 1) && sin[k].data != in[k].data)
          convert(ctx, in[k].dtype, false, in[k].data, sin[k].data, tfg_shape_numel(&in[k].shape));
    }
  }
  if (out_ok && sout.data != out->data) free(sout.data);
  for (int k = 0; k < staged; k++)
    if (sin[k].data != in[k].data) free(sin[k].data);
  if (!out_ok)
    return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory for the f32 copies of %s's operands",
                           tfg_kernel_op_name(node->op));
  return st;
}
