/* kernels/cuda/elementwise.cu: unary and binary math, where, cast, the
 * INIT fill and dropout on a CUDA device: the GPU twins of
 * kernels/cpu/elementwise.c, the INIT part of kernels/cpu/init.c and the
 * dropout of kernels/cpu/nn.c, with the same dtypes, the same checks and
 * messages ("... on the GPU" where the CPU says "on the CPU") and the same
 * formulas.
 *
 * Every kernel is a grid-stride loop over flat output positions i in
 * [0, n), 64-bit; an empty output launches nothing.
 *
 * Index math, against the CPU:
 *   - unary, cast, dropout, INIT: output element i reads input element i
 *     (same shape, row-major), as the CPU's flat loops do; dropout's mask
 *     uses counter attrs.start + i, the CPU's `offset + i`.
 *   - binary and where: tfg_cuda_index_broadcast (common.cuh) is the CPU's
 *     bcast_init line for line: operand k gets, per output axis i, stride
 *     0 when its right-aligned dim is 1 or missing, else the product of its
 *     dims right of that axis; size-1 output axes are dropped and contiguous
 *     axes merged. The CPU walks that simplified shape row by row with
 *     bcast_seek/bcast_advance; here each output position pos is decomposed
 *     directly (tfg_cuda_offsets: idx_i = pos mod dim_i from the last axis,
 *     off_k = sum idx_i * st[k][i]), which is what bcast_seek computes for
 *     any pos. Operand order: binary a = 0, b = 1; where c = 0, a = 1,
 *     b = 2, as in the CPU's bcast_init calls. Outputs are written at i.
 *
 * Numerics, against the CPU: f32 math is done in f32 with the same libm
 * functions (CUDA's expf, logf, tanhf, powf: within 1-4 ulp of glibc),
 * f64 in double; gelu runs in double for f32 as the CPU does (erfc form);
 * rsqrt is 1 / sqrt (not the approximate rsqrtf); the CPU's sigmoid and
 * NaN rules for relu/maximum/minimum are copied. Integer math wraps
 * through the unsigned twin as on the CPU. Cast converts f16/bf16 with
 * the CPU's own bit-level rounding code (round to nearest even directly
 * from the source, never through f32), so casts are bit-identical.
 * Random fills and dropout draw base/rng.h's counter-based numbers
 * (__host__ __device__), and their mul/add steps use unfused _rn
 * arithmetic so they round exactly as the CPU's do (nvcc would contract
 * them into FMAs); only the device's double log/cos inside
 * tfg_rng_normal may differ from glibc by an ulp.
 *
 * Integer division by zero: the CPU scans the divisor before dividing and
 * fails with TFG_ERR_NUMERIC. The data lives on the device here, so the
 * kernel itself finds it, writes 0 there and raises the device error
 * flag (code ERR_DIV_ZERO below; the backend reports it at its next
 * synchronize). */
#include <string.h>

#include <type_traits>

#include "base/rng.h"
#include "kernels/cuda/common.cuh"

/* The device error code of an integer division by zero. cuda.h's enum
 * has no name for it yet (TFG_CUDA_E_NONE, _ID_RANGE, _LABEL_RANGE); it
 * takes the next value, which cuda.h should name TFG_CUDA_E_DIV_ZERO. */
enum { ERR_DIV_ZERO = TFG_CUDA_E_LABEL_RANGE + 1 };

#define THREADS TFG_CUDA_THREADS

/* Device functions whose results do not depend on the device's libm
 * (integer ops, the cast conversions) are also compiled for the host, so
 * a host test can compare them bit for bit with the CPU kernels'. */
#define HD static __host__ __device__ __forceinline__

/* ---- unary ------------------------------------------------------------------ */

/* The CPU's sigmoid: only e^-|x| is formed, so it cannot overflow. */
static __device__ __forceinline__ float sigmoid_(float x) {
  float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e);
  return x >= 0 ? s : e * s;
}
static __device__ __forceinline__ double sigmoid_(double x) {
  double e = exp(-fabs(x)), s = 1.0 / (1.0 + e);
  return x >= 0 ? s : e * s;
}

/* The CPU's gelu: x * erfc(-x / sqrt 2) / 2, in double for both dtypes
 * (for f32 the product is rounded once to float at the end). */
#define INV_SQRT2 0.70710678118654752440
static __device__ __forceinline__ float gelu_(float x) { return (float)(0.5 * x * erfc(-x * INV_SQRT2)); }
static __device__ __forceinline__ double gelu_(double x) { return 0.5 * x * erfc(-x * INV_SQRT2); }

static __device__ __forceinline__ float exp_(float x) { return expf(x); }
static __device__ __forceinline__ double exp_(double x) { return exp(x); }
static __device__ __forceinline__ float log_(float x) { return logf(x); }
static __device__ __forceinline__ double log_(double x) { return log(x); }
static __device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
static __device__ __forceinline__ double tanh_(double x) { return tanh(x); }
static __device__ __forceinline__ float abs_(float x) { return fabsf(x); }
static __device__ __forceinline__ double abs_(double x) { return fabs(x); }
static __device__ __forceinline__ float pow_(float x, float y) { return powf(x, y); }
static __device__ __forceinline__ double pow_(double x, double y) { return pow(x, y); }

/* One unary op on a float T (f32, f64). */
template <int OP, typename T>
static __device__ __forceinline__ T unary_float(T x) {
  if constexpr (OP == TFG_OP_NEG) return -x;
  else if constexpr (OP == TFG_OP_EXP) return exp_(x);
  else if constexpr (OP == TFG_OP_LOG) return log_(x);
  else if constexpr (OP == TFG_OP_SQRT) return tfg_cuda_sqrt(x);
  else if constexpr (OP == TFG_OP_RSQRT) return tfg_cuda_div((T)1, tfg_cuda_sqrt(x));
  else if constexpr (OP == TFG_OP_ABS) return abs_(x);
  else if constexpr (OP == TFG_OP_RELU) return x < 0 ? (T)0 : x; /* keeps NaN */
  else if constexpr (OP == TFG_OP_GELU) return gelu_(x);
  else if constexpr (OP == TFG_OP_TANH) return tanh_(x);
  else return sigmoid_(x); /* TFG_OP_SIGMOID */
}

/* NEG ABS RELU on a signed integer T: negation wraps (INT_MIN stays). */
template <int OP, typename T>
HD T unary_int(T x) {
  typedef typename std::make_unsigned<T>::type U;
  if constexpr (OP == TFG_OP_NEG) return (T)((U)0 - (U)x);
  else if constexpr (OP == TFG_OP_ABS) return x < 0 ? (T)((U)0 - (U)x) : x;
  else return x < 0 ? (T)0 : x; /* TFG_OP_RELU */
}

template <int OP, typename T>
static __global__ void unary_kernel(const T *x, T *y, int64_t n) {
  TFG_CUDA_LOOP(i, n) {
    if constexpr (std::is_floating_point<T>::value) y[i] = unary_float<OP, T>(x[i]);
    else y[i] = unary_int<OP, T>(x[i]);
  }
}

template <int OP, typename T>
static tfg_status launch_unary(tfg_kernel_ctx *ctx, const void *x, void *y, int64_t n) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  unary_kernel<OP, T><<<tfg_cuda_blocks(cx, n, THREADS), THREADS, 0, cx->stream>>>((const T *)x, (T *)y, n);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

template <typename T>
static tfg_status unary_float_dispatch(tfg_kernel_ctx *ctx, int op, const void *x, void *y, int64_t n) {
  switch (op) {
  case TFG_OP_NEG: return launch_unary<TFG_OP_NEG, T>(ctx, x, y, n);
  case TFG_OP_EXP: return launch_unary<TFG_OP_EXP, T>(ctx, x, y, n);
  case TFG_OP_LOG: return launch_unary<TFG_OP_LOG, T>(ctx, x, y, n);
  case TFG_OP_SQRT: return launch_unary<TFG_OP_SQRT, T>(ctx, x, y, n);
  case TFG_OP_RSQRT: return launch_unary<TFG_OP_RSQRT, T>(ctx, x, y, n);
  case TFG_OP_ABS: return launch_unary<TFG_OP_ABS, T>(ctx, x, y, n);
  case TFG_OP_RELU: return launch_unary<TFG_OP_RELU, T>(ctx, x, y, n);
  case TFG_OP_GELU: return launch_unary<TFG_OP_GELU, T>(ctx, x, y, n);
  case TFG_OP_TANH: return launch_unary<TFG_OP_TANH, T>(ctx, x, y, n);
  default: return launch_unary<TFG_OP_SIGMOID, T>(ctx, x, y, n);
  }
}

template <typename T>
static tfg_status unary_int_dispatch(tfg_kernel_ctx *ctx, int op, const void *x, void *y, int64_t n) {
  switch (op) {
  case TFG_OP_NEG: return launch_unary<TFG_OP_NEG, T>(ctx, x, y, n);
  case TFG_OP_ABS: return launch_unary<TFG_OP_ABS, T>(ctx, x, y, n);
  default: return launch_unary<TFG_OP_RELU, T>(ctx, x, y, n);
  }
}

/* NEG EXP LOG SQRT RSQRT ABS RELU GELU TANH SIGMOID on f32/f64; NEG ABS
 * RELU also on i32/i64 (the CPU's tfg_cpu_unary). */
static tfg_status cuda_unary(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  int op = node->op;
  tfg_dtype dt = in[0].dtype;
  bool int_ok = op == TFG_OP_NEG || op == TFG_OP_ABS || op == TFG_OP_RELU;
  bool supported = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64 ||
                   (int_ok && (dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64));
  switch (op) {
  case TFG_OP_NEG: case TFG_OP_EXP: case TFG_OP_LOG: case TFG_OP_SQRT: case TFG_OP_RSQRT:
  case TFG_OP_ABS: case TFG_OP_RELU: case TFG_OP_GELU: case TFG_OP_TANH: case TFG_OP_SIGMOID:
    break;
  default:
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a unary op", tfg_cuda_op_name(op));
  }
  if (!supported || out->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the GPU",
                           tfg_cuda_op_name(op), tfg_dtype_name(dt));
  int64_t n = tfg_shape_numel(&out->shape);
  if (tfg_shape_numel(&in[0].shape) != n)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "unary op: input and output sizes differ");
  if (n == 0) return TFG_OK;
  switch (dt) {
  case TFG_DTYPE_F32: return unary_float_dispatch<float>(ctx, op, in[0].data, out->data, n);
  case TFG_DTYPE_F64: return unary_float_dispatch<double>(ctx, op, in[0].data, out->data, n);
  case TFG_DTYPE_I32: return unary_int_dispatch<int32_t>(ctx, op, in[0].data, out->data, n);
  default: return unary_int_dispatch<int64_t>(ctx, op, in[0].data, out->data, n);
  }
}

/* ---- binary ----------------------------------------------------------------- */

/* One binary op on a float T; EQUAL and GREATER give 0 or 1 (the caller
 * stores it as a bool byte). maximum/minimum propagate NaN from either
 * side: x != x picks a NaN x, a comparison with a NaN y falls through to y. */
template <int OP, typename T>
static __device__ __forceinline__ T binary_float(T x, T y) {
  if constexpr (OP == TFG_OP_ADD) return x + y;
  else if constexpr (OP == TFG_OP_SUB) return x - y;
  else if constexpr (OP == TFG_OP_MUL) return x * y;
  else if constexpr (OP == TFG_OP_DIV) return tfg_cuda_div(x, y);
  else if constexpr (OP == TFG_OP_POW) return pow_(x, y);
  else if constexpr (OP == TFG_OP_MAXIMUM) return (x > y || x != x) ? x : y;
  else if constexpr (OP == TFG_OP_MINIMUM) return (x < y || x != x) ? x : y;
  else if constexpr (OP == TFG_OP_EQUAL) return x == y;
  else return x > y; /* TFG_OP_GREATER */
}

/* One binary op on a signed integer T, wrapping through its unsigned twin.
 * Division truncates toward zero; x / -1 is the wrapped negation (INT_MIN
 * / -1 would overflow); a zero divisor gives 0 and sets *zero. */
template <int OP, typename T>
HD T binary_int(T x, T y, bool *zero) {
  typedef typename std::make_unsigned<T>::type U;
  if constexpr (OP == TFG_OP_ADD) return (T)((U)x + (U)y);
  else if constexpr (OP == TFG_OP_SUB) return (T)((U)x - (U)y);
  else if constexpr (OP == TFG_OP_MUL) return (T)((U)x * (U)y);
  else if constexpr (OP == TFG_OP_DIV) {
    if (y == 0) {
      *zero = true;
      return 0;
    }
    return y == -1 ? (T)((U)0 - (U)x) : x / y;
  } else if constexpr (OP == TFG_OP_MAXIMUM) return x > y ? x : y;
  else if constexpr (OP == TFG_OP_MINIMUM) return x < y ? x : y;
  else if constexpr (OP == TFG_OP_EQUAL) return x == y;
  else return x > y; /* TFG_OP_GREATER */
}

/* o[i] = a[off_a(i)] OP b[off_b(i)]; T the inputs' type, TO the output's
 * (T, or uint8_t for EQUAL/GREATER). KIND: 0 float, 1 signed integer,
 * 2 bool (uint8_t, EQUAL/GREATER only). */
template <int OP, int KIND, typename T, typename TO, typename I>
static __global__ void binary_kernel(tfg_cuda_index ix, const T *a, const T *b, TO *o, int64_t n,
                                     tfg_cuda_error *err) {
  bool zero = false;
  TFG_CUDA_LOOP(i, n) {
    I off[2];
    tfg_cuda_offsets<I, 2>(ix, (I)i, off);
    T x = a[off[0]], y = b[off[1]];
    if constexpr (KIND == 0) o[i] = (TO)binary_float<OP, T>(x, y);
    else if constexpr (KIND == 1) o[i] = (TO)binary_int<OP, T>(x, y, &zero);
    else o[i] = (TO)(OP == TFG_OP_EQUAL ? x == y : x > y);
  }
  if (KIND == 1 && OP == TFG_OP_DIV && zero) tfg_cuda_flag(err, ERR_DIV_ZERO, -1, 0, 0);
}

template <int OP, int KIND, typename T, typename TO>
static tfg_status launch_binary(tfg_kernel_ctx *ctx, const tfg_cuda_index &ix, const tfg_tensor *in,
                                tfg_tensor *out, int64_t n) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  unsigned blocks = tfg_cuda_blocks(cx, n, THREADS);
  const T *a = (const T *)in[0].data, *b = (const T *)in[1].data;
  TO *o = (TO *)out->data;
  if (tfg_cuda_fits32(n))
    binary_kernel<OP, KIND, T, TO, uint32_t><<<blocks, THREADS, 0, cx->stream>>>(ix, a, b, o, n, cx->error);
  else
    binary_kernel<OP, KIND, T, TO, uint64_t><<<blocks, THREADS, 0, cx->stream>>>(ix, a, b, o, n, cx->error);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* The op switch for inputs of type T (KIND as binary_kernel's). POW is
 * only instantiated for floats (the caller refuses it on integers). */
template <int KIND, typename T>
static tfg_status binary_dispatch(tfg_kernel_ctx *ctx, int op, const tfg_cuda_index &ix,
                                  const tfg_tensor *in, tfg_tensor *out, int64_t n) {
  switch (op) {
  case TFG_OP_ADD: return launch_binary<TFG_OP_ADD, KIND, T, T>(ctx, ix, in, out, n);
  case TFG_OP_SUB: return launch_binary<TFG_OP_SUB, KIND, T, T>(ctx, ix, in, out, n);
  case TFG_OP_MUL: return launch_binary<TFG_OP_MUL, KIND, T, T>(ctx, ix, in, out, n);
  case TFG_OP_DIV: return launch_binary<TFG_OP_DIV, KIND, T, T>(ctx, ix, in, out, n);
  case TFG_OP_POW:
    if constexpr (KIND == 0) return launch_binary<TFG_OP_POW, KIND, T, T>(ctx, ix, in, out, n);
    else break;
  case TFG_OP_MAXIMUM: return launch_binary<TFG_OP_MAXIMUM, KIND, T, T>(ctx, ix, in, out, n);
  case TFG_OP_MINIMUM: return launch_binary<TFG_OP_MINIMUM, KIND, T, T>(ctx, ix, in, out, n);
  case TFG_OP_EQUAL: return launch_binary<TFG_OP_EQUAL, KIND, T, uint8_t>(ctx, ix, in, out, n);
  case TFG_OP_GREATER: return launch_binary<TFG_OP_GREATER, KIND, T, uint8_t>(ctx, ix, in, out, n);
  default: break;
  }
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the GPU",
                         tfg_cuda_op_name(op), tfg_dtype_name(in[0].dtype));
}

/* ADD SUB MUL DIV POW MAXIMUM MINIMUM on f32/f64 (and, but POW, on
 * i32/i64); EQUAL GREATER on f32 f64 i32 i64 bool with a bool output
 * (the CPU's tfg_cpu_binary). Both inputs share a dtype and broadcast to
 * out's shape. */
static tfg_status cuda_binary(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  int op = node->op;
  tfg_dtype dt = in[0].dtype;
  bool cmp = op == TFG_OP_EQUAL || op == TFG_OP_GREATER;
  bool is_int = dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64;
  bool supported = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64 || (is_int && op != TFG_OP_POW) ||
                   (cmp && dt == TFG_DTYPE_BOOL);
  switch (op) {
  case TFG_OP_ADD: case TFG_OP_SUB: case TFG_OP_MUL: case TFG_OP_DIV: case TFG_OP_POW:
  case TFG_OP_MAXIMUM: case TFG_OP_MINIMUM: case TFG_OP_EQUAL: case TFG_OP_GREATER:
    break;
  default:
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a binary op", tfg_cuda_op_name(op));
  }
  if (in[1].dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: input dtypes %s and %s differ",
                           tfg_cuda_op_name(op), tfg_dtype_name(dt), tfg_dtype_name(in[1].dtype));
  if (!supported || out->dtype != (cmp ? TFG_DTYPE_BOOL : dt))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the GPU",
                           tfg_cuda_op_name(op), tfg_dtype_name(dt));
  tfg_cuda_index ix;
  if (!tfg_cuda_index_broadcast(&ix, &out->shape, in, 2))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: inputs do not broadcast to the output",
                           tfg_cuda_op_name(op));
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  switch (dt) {
  case TFG_DTYPE_F32: return binary_dispatch<0, float>(ctx, op, ix, in, out, n);
  case TFG_DTYPE_F64: return binary_dispatch<0, double>(ctx, op, ix, in, out, n);
  case TFG_DTYPE_I32: return binary_dispatch<1, int32_t>(ctx, op, ix, in, out, n);
  case TFG_DTYPE_I64: return binary_dispatch<1, int64_t>(ctx, op, ix, in, out, n);
  default: /* bool: EQUAL GREATER */
    if (op == TFG_OP_EQUAL) return launch_binary<TFG_OP_EQUAL, 2, uint8_t, uint8_t>(ctx, ix, in, out, n);
    return launch_binary<TFG_OP_GREATER, 2, uint8_t, uint8_t>(ctx, ix, in, out, n);
  }
}

/* ---- where ------------------------------------------------------------------ */

/* o[i] = c[off_c(i)] ? a[off_a(i)] : b[off_b(i)], whole elements moved as
 * unsigned integers of their size T (every dtype, NaN payloads kept). */
template <typename T, typename I>
static __global__ void where_kernel(tfg_cuda_index ix, const uint8_t *c, const T *a, const T *b, T *o,
                                    int64_t n) {
  TFG_CUDA_LOOP(i, n) {
    I off[3];
    tfg_cuda_offsets<I, 3>(ix, (I)i, off);
    o[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

/* out = c ? a : b elementwise; c is bool, a and b share out's dtype (any
 * dtype); all three broadcast to out's shape (the CPU's tfg_cpu_where). */
static tfg_status cuda_where(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  if (in[0].dtype != TFG_DTYPE_BOOL)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: the condition is %s, not bool",
                           tfg_dtype_name(in[0].dtype));
  if (in[1].dtype != out->dtype || in[2].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: the value dtypes differ");
  tfg_cuda_index ix;
  if (!tfg_cuda_index_broadcast(&ix, &out->shape, in, 3))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: inputs do not broadcast to the output");
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  size_t esz = tfg_dtype_size(out->dtype);
  if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "where on %s is not supported on the GPU",
                           tfg_dtype_name(out->dtype));
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  unsigned blocks = tfg_cuda_blocks(cx, n, THREADS);
  const uint8_t *c = (const uint8_t *)in[0].data;
  bool small = tfg_cuda_fits32(n);
  TFG_CUDA_BY_SIZE(esz, T, {
    if (small)
      where_kernel<T, uint32_t><<<blocks, THREADS, 0, cx->stream>>>(ix, c, (const T *)in[1].data,
                                                                    (const T *)in[2].data, (T *)out->data, n);
    else
      where_kernel<T, uint64_t><<<blocks, THREADS, 0, cx->stream>>>(ix, c, (const T *)in[1].data,
                                                                    (const T *)in[2].data, (T *)out->data, n);
  })
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* ---- cast: f16 and bf16 (the CPU's bit-level conversions, on the device) --- */


HD int clz64(uint64_t m) {
#ifdef __CUDA_ARCH__
  return __clzll((long long)m);
#else
  return __builtin_clzll(m);
#endif
}

HD uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

HD double f64_from(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

HD float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Rounds the positive value m * 2^ex (m > 0) to nearest-even in a binary
 * format with mbits fraction and ebits exponent bits (no sign): its bit
 * pattern, subnormals below the smallest normal, infinity past the largest
 * finite value. The CPU's round_small, __clzll for __builtin_clzll. */
HD uint32_t round_small(uint64_t m, int ex, int mbits, int ebits) {
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  int p = 63 - clz64(m); /* value in [2^(p+ex), 2^(p+ex+1)) */
  int e = p + ex;
  if (e > bias) return inf;
  int qexp = (e < emin ? emin : e) - mbits; /* exponent of the last kept bit */
  int shift = qexp - ex;
  uint64_t q;
  if (shift <= 0) {
    q = m << -shift;
  } else {
    if (shift > p + 1) return 0; /* below half the smallest subnormal */
    if (shift == 64) {           /* fold the lowest bit into a sticky bit */
      m = (m >> 1) | (m & 1);
      shift = 63;
    }
    uint64_t half = 1ull << (shift - 1), rem = m & ((1ull << shift) - 1);
    q = m >> shift;
    if (rem > half || (rem == half && (q & 1))) q++;
  }
  uint64_t enc = e < emin ? q : ((uint64_t)(e + bias) << mbits) + (q - (1ull << mbits));
  return enc >= inf ? inf : (uint32_t)enc;
}

/* double to a 16-bit float (f16: 10/5, bf16: 7/8); NaN stays a quiet NaN
 * keeping the sign and the top payload bits. */
HD uint16_t f64_to_small(double d, int mbits, int ebits) {
  uint64_t u = f64_bits(d);
  uint32_t sign = (uint32_t)(u >> 48) & 0x8000u;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  uint64_t exf = (u >> 52) & 0x7FF, frac = u & ((1ull << 52) - 1);
  if (exf == 0x7FF) {
    if (frac == 0) return (uint16_t)(sign | inf);
    return (uint16_t)(sign | inf | (1u << (mbits - 1)) | (uint32_t)(frac >> (52 - mbits)));
  }
  if (exf == 0) return (uint16_t)sign; /* zeros and double subnormals */
  return (uint16_t)(sign | round_small(frac | (1ull << 52), (int)exf - 1075, mbits, ebits));
}

HD uint16_t i64_to_small(int64_t v, int mbits, int ebits) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 0x8000u : 0;
  uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  return (uint16_t)(sign | round_small(mag, 0, mbits, ebits));
}

/* A 16-bit float to double, exactly; NaN payloads move to the top of the
 * double's fraction. */
HD double small_to_f64(uint16_t h, int mbits, int ebits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t emax = (1u << ebits) - 1;
  uint32_t e = ((uint32_t)h >> mbits) & emax, f = h & ((1u << mbits) - 1);
  uint64_t sign = (uint64_t)(h & 0x8000u) << 48, u;
  if (e == emax) {
    u = sign | (0x7FFull << 52) | ((uint64_t)f << (52 - mbits));
  } else if (e == 0) {
    double v = ldexp((double)f, 1 - bias - mbits);
    return h & 0x8000u ? -v : v;
  } else {
    u = sign | ((uint64_t)((int)e - bias + 1023) << 52) | ((uint64_t)f << (52 - mbits));
  }
  return f64_from(u);
}

/* f32 to bf16 in one add on the bits; equal to f64_to_small((double)x, 7, 8). */
HD uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

HD float bf16_to_f32(uint16_t h) { return f32_from((uint32_t)h << 16); }

/* Float to integer: truncation toward zero, NaN to 0, saturation out of
 * range (the CPU's f_to_i32 / f_to_i64). */
HD int32_t f_to_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483648.0) return INT32_MAX;
  if (x <= -2147483649.0) return INT32_MIN;
  return (int32_t)x;
}

HD int64_t f_to_i64(double x) {
  if (x != x) return 0;
  if (x >= 0x1p63) return INT64_MAX;
  if (x < -0x1p63) return INT64_MIN;
  return (int64_t)x;
}

/* The storage type of each dtype. */
template <int DT> struct storage;
template <> struct storage<TFG_DTYPE_F32> { typedef float T; };
template <> struct storage<TFG_DTYPE_F64> { typedef double T; };
template <> struct storage<TFG_DTYPE_F16> { typedef uint16_t T; };
template <> struct storage<TFG_DTYPE_BF16> { typedef uint16_t T; };
template <> struct storage<TFG_DTYPE_I32> { typedef int32_t T; };
template <> struct storage<TFG_DTYPE_I64> { typedef int64_t T; };
template <> struct storage<TFG_DTYPE_BOOL> { typedef uint8_t T; };

/* One element from dtype FROM to dtype TO (FROM != TO), exactly as the
 * CPU's cast_chunk: a float source is loaded as float (f32) or double
 * (f64, and f16/bf16 widened exactly) and converted once; an integer or
 * bool source is converted from its own type (i64 to f32 rounds once,
 * never through double). */
template <int FROM, int TO>
HD typename storage<TO>::T cast_one(typename storage<FROM>::T s) {
  typedef typename storage<TO>::T D;
  constexpr bool from_float = FROM == TFG_DTYPE_F32 || FROM == TFG_DTYPE_F64 ||
                              FROM == TFG_DTYPE_F16 || FROM == TFG_DTYPE_BF16;
  if constexpr (FROM == TFG_DTYPE_F32 && TO == TFG_DTYPE_BF16) {
    return f32_to_bf16(s);
  } else if constexpr (FROM == TFG_DTYPE_BF16 && TO == TFG_DTYPE_F32) {
    return bf16_to_f32(s);
  } else if constexpr (from_float) {
    typedef typename std::conditional<FROM == TFG_DTYPE_F32, float, double>::type TX;
    TX x;
    if constexpr (FROM == TFG_DTYPE_F16) x = small_to_f64(s, 10, 5);
    else if constexpr (FROM == TFG_DTYPE_BF16) x = small_to_f64(s, 7, 8);
    else x = s;
    if constexpr (TO == TFG_DTYPE_F32) return (D)(float)x;
    else if constexpr (TO == TFG_DTYPE_F64) return (D)(double)x;
    else if constexpr (TO == TFG_DTYPE_F16) return f64_to_small((double)x, 10, 5);
    else if constexpr (TO == TFG_DTYPE_BF16) return f64_to_small((double)x, 7, 8);
    else if constexpr (TO == TFG_DTYPE_I32) return f_to_i32((double)x);
    else if constexpr (TO == TFG_DTYPE_I64) return f_to_i64((double)x);
    else return (D)(x != 0);
  } else { /* i32, i64, bool */
    if constexpr (TO == TFG_DTYPE_F32) return (float)s;
    else if constexpr (TO == TFG_DTYPE_F64) return (double)s;
    else if constexpr (TO == TFG_DTYPE_F16) return i64_to_small((int64_t)s, 10, 5);
    else if constexpr (TO == TFG_DTYPE_BF16) return i64_to_small((int64_t)s, 7, 8);
    else if constexpr (TO == TFG_DTYPE_I32) return (int32_t)(uint32_t)s; /* wraps modulo 2^32 */
    else if constexpr (TO == TFG_DTYPE_I64) return (int64_t)s;
    else return (D)(s != 0);
  }
}

template <int FROM, int TO>
static __global__ void cast_kernel(const typename storage<FROM>::T *x, typename storage<TO>::T *y, int64_t n) {
  TFG_CUDA_LOOP(i, n) y[i] = cast_one<FROM, TO>(x[i]);
}

template <int FROM, int TO>
static tfg_status launch_cast(tfg_kernel_ctx *ctx, const void *x, void *y, int64_t n) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  cast_kernel<FROM, TO><<<tfg_cuda_blocks(cx, n, THREADS), THREADS, 0, cx->stream>>>(
      (const typename storage<FROM>::T *)x, (typename storage<TO>::T *)y, n);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

template <int FROM>
static tfg_status cast_from(tfg_kernel_ctx *ctx, tfg_dtype to, const void *x, void *y, int64_t n) {
  switch (to) {
  case TFG_DTYPE_F32: return launch_cast<FROM, TFG_DTYPE_F32>(ctx, x, y, n);
  case TFG_DTYPE_F64: return launch_cast<FROM, TFG_DTYPE_F64>(ctx, x, y, n);
  case TFG_DTYPE_F16: return launch_cast<FROM, TFG_DTYPE_F16>(ctx, x, y, n);
  case TFG_DTYPE_BF16: return launch_cast<FROM, TFG_DTYPE_BF16>(ctx, x, y, n);
  case TFG_DTYPE_I32: return launch_cast<FROM, TFG_DTYPE_I32>(ctx, x, y, n);
  case TFG_DTYPE_I64: return launch_cast<FROM, TFG_DTYPE_I64>(ctx, x, y, n);
  default: return launch_cast<FROM, TFG_DTYPE_BOOL>(ctx, x, y, n);
  }
}

/* Converts in[0] to out's dtype between any two of f32 f64 f16 bf16 i32
 * i64 bool (the CPU's tfg_cpu_cast): to f16/bf16 round to nearest even
 * with subnormals, overflow to infinity, NaN kept; float to int truncates
 * toward zero, NaN to 0, saturating; to bool: nonzero (NaN too) is 1; a
 * same-dtype cast is a copy. */
static tfg_status cuda_cast(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  tfg_dtype from = in[0].dtype, to = out->dtype;
  if (from >= TFG_DTYPE_COUNT || to >= TFG_DTYPE_COUNT || (int)from < 0 || (int)to < 0)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "cast: unknown dtype");
  int64_t n = tfg_shape_numel(&out->shape);
  if (tfg_shape_numel(&in[0].shape) != n)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "cast: input and output sizes differ");
  if (n == 0) return TFG_OK;
  if (from == to) {
    if (in[0].data != out->data)
      TFG_CUDA_CHECK(ctx, cudaMemcpyAsync(out->data, in[0].data, (size_t)n * tfg_dtype_size(to),
                                          cudaMemcpyDeviceToDevice, tfg_cuda_of(ctx)->stream));
    return TFG_OK;
  }
  const void *x = in[0].data;
  void *y = out->data;
  switch (from) {
  case TFG_DTYPE_F32: return cast_from<TFG_DTYPE_F32>(ctx, to, x, y, n);
  case TFG_DTYPE_F64: return cast_from<TFG_DTYPE_F64>(ctx, to, x, y, n);
  case TFG_DTYPE_F16: return cast_from<TFG_DTYPE_F16>(ctx, to, x, y, n);
  case TFG_DTYPE_BF16: return cast_from<TFG_DTYPE_BF16>(ctx, to, x, y, n);
  case TFG_DTYPE_I32: return cast_from<TFG_DTYPE_I32>(ctx, to, x, y, n);
  case TFG_DTYPE_I64: return cast_from<TFG_DTYPE_I64>(ctx, to, x, y, n);
  default: return cast_from<TFG_DTYPE_BOOL>(ctx, to, x, y, n);
  }
}

/* ---- INIT ------------------------------------------------------------------- */

/* y[i] = v for every i: one element's bits, T an unsigned type of its size. */
template <typename T>
static __global__ void fill_const_kernel(T *y, T v, int64_t n) {
  TFG_CUDA_LOOP(i, n) y[i] = v;
}

/* Element i of a random fill, exactly as the CPU's fill_chunk: normal
 * p + q * N(0,1), uniform p + (q - p) * U[0,1), in double with unfused
 * operations, rounded once to T. */
template <typename T, bool NORMAL>
HD T fill_random_one(int64_t i, uint64_t seed, double p, double q) {
  double v = NORMAL ? tfg_cuda_add(p, tfg_cuda_mul(q, tfg_rng_normal(seed, (uint64_t)i)))
                    : tfg_cuda_add(p, tfg_cuda_mul(tfg_cuda_sub(q, p), tfg_rng_uniform(seed, (uint64_t)i)));
  return (T)v;
}

template <typename T, bool NORMAL>
static __global__ void fill_random_kernel(T *y, int64_t n, uint64_t seed, double p, double q) {
  TFG_CUDA_LOOP(i, n) y[i] = fill_random_one<T, NORMAL>(i, seed, p, q);
}

/* The CPU's fans (kernels/cpu/cpu.h tfg_cpu_init_fill): rank < 2 both the
 * element count; rank 2 [in, out]; rank >= 3 [out, in, k...]. */
static void fans(const tfg_shape *s, double *fan_in, double *fan_out) {
  if (s->rank < 2) {
    *fan_in = *fan_out = (double)tfg_shape_numel(s);
  } else if (s->rank == 2) {
    *fan_in = (double)s->dim[0];
    *fan_out = (double)s->dim[1];
  } else {
    double field = 1;
    for (int i = 2; i < s->rank; i++) field *= (double)s->dim[i];
    *fan_in = (double)s->dim[1] * field;
    *fan_out = (double)s->dim[0] * field;
  }
}

/* The parameters of a random initializer (the CPU's fill_plan): element
 * i is p + q * N(0,1) when this returns true (normal, he), else
 * p + (q - p) * U[0,1) (uniform, glorot). */
static bool random_params(const tfg_attrs *a, const tfg_shape *shape, double *p, double *q) {
  double fan_in, fan_out;
  fans(shape, &fan_in, &fan_out);
  switch (a->init) {
  case TFG_INIT_NORMAL: case TFG_INIT_UNIFORM:
    *p = a->a;
    *q = a->b;
    break;
  case TFG_INIT_GLOROT: {
    double l = sqrt(6.0 / (fan_in + fan_out));
    *p = -l;
    *q = l;
    break;
  }
  default: /* he */
    *p = 0;
    *q = sqrt(2.0 / fan_in);
    break;
  }
  return a->init == TFG_INIT_NORMAL || a->init == TFG_INIT_HE;
}

/* The CPU's to_int: truncation toward zero, NaN to 0, saturation. */
static int64_t to_int(double v, int64_t lo, int64_t hi) {
  if (v != v) return 0;
  if (v >= (double)hi) return hi;
  if (v <= (double)lo) return lo;
  return (int64_t)v;
}

static const char *init_name(tfg_init_kind k) {
  switch (k) {
  case TFG_INIT_ZEROS: return "zeros";
  case TFG_INIT_ONES: return "ones";
  case TFG_INIT_FULL: return "full";
  case TFG_INIT_NORMAL: return "normal";
  case TFG_INIT_UNIFORM: return "uniform";
  case TFG_INIT_GLOROT: return "glorot";
  case TFG_INIT_HE: return "he";
  }
  return "unknown initializer";
}

/* INIT: fills out per node->attrs (the CPU's tfg_cpu_init / fill_plan):
 * zeros, ones, full(value) on f32 f64 i32 i64 bool; normal(a, b),
 * uniform(a, b), glorot, he on f32 f64, element i from base/rng.h stream
 * attrs.seed at counter i. */
static tfg_status cuda_init(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)in;
  const tfg_attrs *a = &node->attrs;
  tfg_dtype dt = out->dtype;
  bool is_float = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64;
  bool is_exact = dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64 || dt == TFG_DTYPE_BOOL;
  bool constant = a->init == TFG_INIT_ZEROS || a->init == TFG_INIT_ONES || a->init == TFG_INIT_FULL;
  bool known = constant || a->init == TFG_INIT_NORMAL || a->init == TFG_INIT_UNIFORM ||
               a->init == TFG_INIT_GLOROT || a->init == TFG_INIT_HE;
  if (!known || !(is_float || (constant && is_exact)))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s() cannot fill a %s tensor on the GPU",
                           init_name(a->init), tfg_dtype_name(dt));
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  unsigned blocks = tfg_cuda_blocks(cx, n, THREADS);
  if (constant) {
    double c = a->init == TFG_INIT_ZEROS ? 0 : a->init == TFG_INIT_ONES ? 1 : a->value;
    switch (dt) {
    case TFG_DTYPE_F32: {
      float v = (float)c;
      uint32_t bits;
      memcpy(&bits, &v, sizeof bits);
      fill_const_kernel<uint32_t><<<blocks, THREADS, 0, cx->stream>>>((uint32_t *)out->data, bits, n);
      break;
    }
    case TFG_DTYPE_F64: {
      uint64_t bits;
      memcpy(&bits, &c, sizeof bits);
      fill_const_kernel<uint64_t><<<blocks, THREADS, 0, cx->stream>>>((uint64_t *)out->data, bits, n);
      break;
    }
    case TFG_DTYPE_I32: {
      uint32_t v = (uint32_t)(int32_t)to_int(c, INT32_MIN, INT32_MAX);
      fill_const_kernel<uint32_t><<<blocks, THREADS, 0, cx->stream>>>((uint32_t *)out->data, v, n);
      break;
    }
    case TFG_DTYPE_I64: {
      uint64_t v = (uint64_t)to_int(c, INT64_MIN, INT64_MAX);
      fill_const_kernel<uint64_t><<<blocks, THREADS, 0, cx->stream>>>((uint64_t *)out->data, v, n);
      break;
    }
    default: /* bool */
      TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, c != 0, (size_t)n, cx->stream));
      return TFG_OK;
    }
    TFG_CUDA_LAUNCHED(ctx);
    return TFG_OK;
  }
  double p, q;
  bool normal = random_params(a, &out->shape, &p, &q);
  if (dt == TFG_DTYPE_F32) {
    if (normal) fill_random_kernel<float, true><<<blocks, THREADS, 0, cx->stream>>>((float *)out->data, n, a->seed, p, q);
    else fill_random_kernel<float, false><<<blocks, THREADS, 0, cx->stream>>>((float *)out->data, n, a->seed, p, q);
  } else {
    if (normal) fill_random_kernel<double, true><<<blocks, THREADS, 0, cx->stream>>>((double *)out->data, n, a->seed, p, q);
    else fill_random_kernel<double, false><<<blocks, THREADS, 0, cx->stream>>>((double *)out->data, n, a->seed, p, q);
  }
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* ---- dropout ---------------------------------------------------------------- */

/* Element i is kept when tfg_rng_uniform(seed, offset + i) >= rate, and is
 * then x * scale formed in double and rounded once to T (the CPU's
 * dropout_f32/f64). */
template <typename T>
HD T dropout_one(T x, uint64_t seed, int64_t i, double rate, double scale) {
  return tfg_rng_uniform(seed, (uint64_t)i) >= rate ? (T)tfg_cuda_mul((double)x, scale) : (T)0;
}

template <typename T>
static __global__ void dropout_kernel(const T *x, T *y, int64_t n, uint64_t seed, int64_t offset, double rate,
                                      double scale) {
  TFG_CUDA_LOOP(i, n) y[i] = dropout_one<T>(x[i], seed, offset + i, rate, scale);
}

/* DROPOUT (the CPU's tfg_cpu_dropout): identity unless ctx->training;
 * then keeps each element with probability 1 - rate (rate = attrs.value)
 * from the stream tfg_rng_dropout_stream(attrs.seed, ctx->seed,
 * ctx->step) at counter attrs.start + i, and scales the kept ones by
 * 1 / (1 - rate); rate 1 gives zeros. f32 and f64. */
static tfg_status cuda_dropout(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0];
  if (x->dtype != TFG_DTYPE_F32 && x->dtype != TFG_DTYPE_F64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "dropout of dtype %s is not supported on the GPU",
                           tfg_dtype_name(x->dtype));
  if (out->dtype != x->dtype || !tfg_shape_eq(&out->shape, &x->shape))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "dropout: the output differs from the input");
  int64_t n = tfg_shape_numel(&x->shape);
  size_t bytes = (size_t)n * tfg_dtype_size(x->dtype);
  double rate = node->attrs.value;
  if (!(rate >= 0 && rate <= 1))
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC, "dropout rate %g is outside [0, 1]", rate);
  if (n == 0) return TFG_OK;
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  if (!ctx->training) {
    if (out->data != x->data)
      TFG_CUDA_CHECK(ctx, cudaMemcpyAsync(out->data, x->data, bytes, cudaMemcpyDeviceToDevice, cx->stream));
    return TFG_OK;
  }
  if (rate >= 1) { /* nothing kept; 1 / (1 - rate) would be infinite */
    TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, 0, bytes, cx->stream));
    return TFG_OK;
  }
  uint64_t seed = tfg_rng_dropout_stream(node->attrs.seed, ctx->seed, ctx->step);
  double scale = 1.0 / (1.0 - rate);
  unsigned blocks = tfg_cuda_blocks(cx, n, THREADS);
  if (x->dtype == TFG_DTYPE_F32)
    dropout_kernel<float><<<blocks, THREADS, 0, cx->stream>>>((const float *)x->data, (float *)out->data, n, seed,
                                                              node->attrs.start, rate, scale);
  else
    dropout_kernel<double><<<blocks, THREADS, 0, cx->stream>>>((const double *)x->data, (double *)out->data, n,
                                                               seed, node->attrs.start, rate, scale);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* ---- registration ------------------------------------------------------------- */

extern "C" void tfg_cuda_register_elementwise(tfg_kernel_fn *table) {
  static const int unary[] = {TFG_OP_NEG, TFG_OP_EXP, TFG_OP_LOG, TFG_OP_SQRT, TFG_OP_RSQRT,
                              TFG_OP_ABS, TFG_OP_RELU, TFG_OP_GELU, TFG_OP_TANH, TFG_OP_SIGMOID};
  static const int binary[] = {TFG_OP_ADD, TFG_OP_SUB, TFG_OP_MUL, TFG_OP_DIV, TFG_OP_POW,
                               TFG_OP_MAXIMUM, TFG_OP_MINIMUM, TFG_OP_EQUAL, TFG_OP_GREATER};
  for (int op : unary) table[op] = cuda_unary;
  for (int op : binary) table[op] = cuda_binary;
  table[TFG_OP_WHERE] = cuda_where;
  table[TFG_OP_CAST] = cuda_cast;
  table[TFG_OP_INIT] = cuda_init;
  table[TFG_OP_DROPOUT] = cuda_dropout;
}
