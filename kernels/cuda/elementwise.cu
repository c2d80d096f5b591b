/* kernels/cuda/elementwise.cu: unary and binary math, where, cast, the
 * INIT fill and dropout on a CUDA device: the GPU twins of
 * kernels/cpu/elementwise.c, the INIT part of kernels/cpu/init.c and the
 * dropout of kernels/cpu/nn.c, with the same dtypes, the same checks and
 * messages ("... on the GPU" where the CPU says "on the CPU") and the same
 * formulas. f16 and bf16: where, cast and INIT take them natively (INIT
 * rounds each double value once, as the CPU's fill); the unary and binary
 * math and dropout are f32/f64 only and run staged for them
 * (kernels/cuda/registry.cu, half.cu), as the CPU computes them in f32.
 *
 * Every kernel is a grid-stride loop over flat output positions i in
 * [0, n), 64-bit; an empty output launches nothing.
 *
 * Index math, against the CPU:
 *   - unary, cast, dropout, INIT: output element i reads input element i
 *     (same shape, row-major), as the CPU's flat loops do; dropout's mask
 *     uses counter attrs.offset + i, the CPU's `offset + i`.
 *   - binary and where: tfg_index_broadcast (kernels/index_math.h), the
 *     CPU's own: operand k gets, per output axis i, stride 0 when its
 *     right-aligned dim is 1 or missing, else the product of its dims
 *     right of that axis; size-1 output axes are dropped and contiguous
 *     axes merged. The CPU walks that simplified shape row by row with
 *     bcast_seek/bcast_advance; here each output position pos is decomposed
 *     directly (tfg_cuda_offsets: idx_i = pos mod dim_i from the last axis,
 *     off_k = sum idx_i * st[k][i]), which is what bcast_seek computes for
 *     any pos. Operand order: binary a = 0, b = 1; where c = 0, a = 1,
 *     b = 2, as in the CPU's calls. Outputs are written at i.
 *
 * Numerics, against the CPU: the per-element formulas are the CPU's own
 * text, kernels/elementwise_math.h (unary and binary math, integer
 * wrapping), kernels/cast_math.h (casts, f16/bf16 rounded to nearest even
 * directly from the source) and kernels/init_math.h (initializer
 * parameters and values), compiled for the device; their + - * / and
 * sqrt are never contracted into FMAs. Casts and integer math are
 * therefore bit-identical; float math is too, but for the transcendentals
 * (CUDA's expf, logf, tanhf, powf, erfc: within 1-4 ulp of glibc), and a
 * fused chain (fused.cu) gives the bits of these kernels run one at a
 * time. Random fills and dropout draw base/rng.h's counter-based numbers;
 * only the device's double log/cos inside tfg_rng_normal may differ from
 * glibc by an ulp.
 *
 * Integer division by zero: the CPU scans the divisor before dividing and
 * fails with TFG_ERR_NUMERIC. The data lives on the device here, so the
 * kernel itself finds it, writes 0 there and raises the device error
 * flag (TFG_CUDA_E_DIV_ZERO; the backend reports it at its next
 * synchronize). */
#include <string.h>

#include <type_traits>

#include "base/rng.h"
#include "kernels/cuda/common.cuh"

#include "kernels/cast_math.h"
#include "kernels/elementwise_math.h"
#include "kernels/init_math.h"

/* ---- unary ------------------------------------------------------------------ */

/* y[i] = OP(x[i]) on T (f32 f64 i32 i64): kernels/elementwise_math.h's
 * formula, the CPU's and the fused kernels'. OP is a constant, so the
 * dispatcher's switch folds away. */
template <int OP, typename T>
static __global__ void unary_kernel(const T *x, T *y, int64_t n) {
  TFG_CUDA_LOOP(i, n) y[i] = tfg_em_unary(OP, x[i]);
}

template <int OP, typename T>
static tfg_status launch_unary(tfg_kernel_ctx *ctx, const void *x, void *y, int64_t n) {
  return TFG_CUDA_LAUNCH(ctx, n, unary_kernel<OP, T>, (const T *)x, (T *)y, n);
}

/* The launch of unary op OP (a constant: one kernel per op) on T, for the
 * ops of TFG_OPS_UNARY (ir/op_list.h); on integers (std::is_integral) only
 * those whose line says ints: the others have no integer formula. op and
 * dtype are checked before (tfg_kernel_check_unary), so the failure after
 * the switch is for a caller that did not check. */
#define LAUNCH_U(T, ID, formula, ints, flops, cheap)                          \
  case TFG_OP_##ID:                                                           \
    if constexpr (ints || !std::is_integral<T>::value) return launch_unary<TFG_OP_##ID, T>(ctx, x, y, n); \
    else break;

template <typename T>
static tfg_status unary_dispatch(tfg_kernel_ctx *ctx, int op, const void *x, void *y, int64_t n) {
  switch (op) {
    TFG_OPS_UNARY(LAUNCH_U, T)
  default: break;
  }
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a unary op the GPU computes on this dtype",
                         tfg_kernel_op_name(op));
}

/* ---- binary ----------------------------------------------------------------- */

/* o[i] = a[off_a(i)] OP b[off_b(i)]; T the inputs' type (f32 f64 i32
 * i64, or bool's uint8_t for EQUAL/GREATER), TO the output's (T, or
 * uint8_t for EQUAL/GREATER). The arithmetic is kernels/elementwise_math.h's
 * (integers wrap; x / -1 is the wrapped negation). An integer zero
 * divisor gives 0 and raises the device error flag. */
/* Whether OP is a comparison (TFG_OPS_COMPARE), and x OP y for one. */
static constexpr __host__ __device__ bool is_compare(int op) {
#define IS_CMP(A, ID, formula, oper) op == TFG_OP_##ID ||
  return TFG_OPS_COMPARE(IS_CMP, ) false;
#undef IS_CMP
}
template <int OP, typename T>
TFG_HD bool compare(T x, T y) {
  switch (OP) {
#define CMP(A, ID, formula, oper) case TFG_OP_##ID: return x oper y;
    TFG_OPS_COMPARE(CMP, )
#undef CMP
  default: TFG_HD_UNREACHABLE(); /* instantiated for comparisons only */
  }
}

template <int OP, typename T, typename TO, typename I>
static __global__ void binary_kernel(tfg_index_map ix, const T *a, const T *b, TO *o, int64_t n,
                                     tfg_cuda_error *err, int node) {
  constexpr bool int_div = OP == TFG_OP_DIV && std::is_integral<T>::value;
  bool zero = false;
  TFG_CUDA_LOOP(i, n) {
    I off[2];
    tfg_cuda_offsets<I, 2>(ix, (I)i, off);
    T x = a[off[0]], y = b[off[1]];
    if constexpr (is_compare(OP)) o[i] = (TO)compare<OP>(x, y);
    else if (int_div && y == 0) {
      zero = true;
      o[i] = 0;
    } else {
      o[i] = tfg_em_binary(OP, x, y);
    }
  }
  if (int_div && zero) tfg_cuda_flag(err, TFG_CUDA_E_DIV_ZERO, node, 0, 0);
}

template <int OP, typename T, typename TO>
static tfg_status launch_binary(tfg_kernel_ctx *ctx, const tfg_index_map &ix, const tfg_tensor *in,
                                tfg_tensor *out, int64_t n) {
  const T *a = (const T *)in[0].data, *b = (const T *)in[1].data;
  TO *o = (TO *)out->data;
  tfg_cuda_error *err = tfg_cuda_of(ctx)->error;
  if (tfg_cuda_fits32(n))
    return TFG_CUDA_LAUNCH(ctx, n, binary_kernel<OP, T, TO, uint32_t>, ix, a, b, o, n, err, (int)ctx->node);
  return TFG_CUDA_LAUNCH(ctx, n, binary_kernel<OP, T, TO, uint64_t>, ix, a, b, o, n, err, (int)ctx->node);
}

/* The launch of binary op or comparison OP (a constant: one kernel per
 * op) on inputs of type T (f32 f64 i32 i64, or bool's uint8_t), for the
 * ops of TFG_OPS_BINARY and TFG_OPS_COMPARE (ir/op_list.h): a binary op on
 * floats, or on integers where its line says ints (POW does not); a
 * comparison on any of them, into bools. op and dtype are checked before
 * (tfg_kernel_check_binary), so the failure after the switch is for a
 * caller that did not check. */
#define LAUNCH_B(T, ID, formula, sig, ints, flops, cheap)                                  \
  case TFG_OP_##ID:                                                                        \
    if constexpr (std::is_floating_point<T>::value || (ints && !std::is_same<T, uint8_t>::value)) \
      return launch_binary<TFG_OP_##ID, T, T>(ctx, ix, in, out, n);                        \
    else break;
#define LAUNCH_C(T, ID, formula, oper) \
  case TFG_OP_##ID: return launch_binary<TFG_OP_##ID, T, uint8_t>(ctx, ix, in, out, n);

template <typename T>
static tfg_status binary_dispatch(tfg_kernel_ctx *ctx, int op, const tfg_index_map &ix,
                                  const tfg_tensor *in, tfg_tensor *out, int64_t n) {
  switch (op) {
    TFG_OPS_BINARY(LAUNCH_B, T)
    TFG_OPS_COMPARE(LAUNCH_C, T)
  default: break;
  }
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the GPU",
                         tfg_kernel_op_name(op), tfg_dtype_name(in[0].dtype));
}

/* The launch of op on inputs of type T by the dispatcher of its kind:
 * unary, or binary (a comparison too), which alone reads ix. */
template <typename T>
static tfg_status elementwise_dispatch(tfg_kernel_ctx *ctx, bool unary, int op, const tfg_index_map &ix,
                                       const tfg_tensor *in, tfg_tensor *out, int64_t n) {
  if (unary) return unary_dispatch<T>(ctx, op, in[0].data, out->data, n);
  return binary_dispatch<T>(ctx, op, ix, in, out, n);
}

/* The ops of TFG_OPS_UNARY and TFG_OPS_BINARY on f32/f64, and on i32/i64
 * those whose line says ints; those of TFG_OPS_COMPARE on f32 f64 i32 i64
 * bool with a bool output (the CPU's tfg_cpu_unary and tfg_cpu_binary).
 * A binary op's inputs share a dtype and broadcast to out's shape. The op's
 * kind (ir/ops.h) picks the checks and the dispatcher. */
static tfg_status cuda_elementwise(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                   tfg_tensor *out) {
  bool unary = tfg_op_get(node->op)->kind == TFG_OP_KIND_UNARY;
  tfg_index_map ix;
  tfg_status st = unary ? tfg_kernel_check_unary(ctx, node, in, out, "GPU")
                        : tfg_kernel_check_binary(ctx, node, in, out, "GPU", &ix);
  if (st != TFG_OK) return st;
  int op = node->op;
  tfg_dtype dt = in[0].dtype;
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  switch (dt) {
  case TFG_DTYPE_F32: return elementwise_dispatch<float>(ctx, unary, op, ix, in, out, n);
  case TFG_DTYPE_F64: return elementwise_dispatch<double>(ctx, unary, op, ix, in, out, n);
  case TFG_DTYPE_I32: return elementwise_dispatch<int32_t>(ctx, unary, op, ix, in, out, n);
  case TFG_DTYPE_I64: return elementwise_dispatch<int64_t>(ctx, unary, op, ix, in, out, n);
  case TFG_DTYPE_BOOL: /* comparisons */
    if (!unary) return binary_dispatch<uint8_t>(ctx, op, ix, in, out, n);
    break;
  default: break; /* checked: not reached */
  }
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the GPU", tfg_kernel_op_name(op),
                         tfg_dtype_name(dt));
}

/* ---- where ------------------------------------------------------------------ */

/* o[i] = c[off_c(i)] ? a[off_a(i)] : b[off_b(i)], whole elements moved as
 * unsigned integers of their size T (every dtype, NaN payloads kept). */
template <typename T, typename I>
static __global__ void where_kernel(tfg_index_map ix, const uint8_t *c, const T *a, const T *b, T *o,
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
  tfg_index_map ix;
  tfg_status st = tfg_kernel_check_where(ctx, in, out, &ix);
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  size_t esz = tfg_dtype_size(out->dtype);
  if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "where on %s is not supported on the GPU",
                           tfg_dtype_name(out->dtype));
  const uint8_t *c = (const uint8_t *)in[0].data;
  TFG_CUDA_BY_SIZE(esz, T, {
    const T *a = (const T *)in[1].data, *b = (const T *)in[2].data;
    if (tfg_cuda_fits32(n)) return TFG_CUDA_LAUNCH(ctx, n, where_kernel<T, uint32_t>, ix, c, a, b, (T *)out->data, n);
    return TFG_CUDA_LAUNCH(ctx, n, where_kernel<T, uint64_t>, ix, c, a, b, (T *)out->data, n);
  })
  return TFG_OK; /* not reached: esz is one of the four */
}

/* ---- cast ------------------------------------------------------------------- */

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
TFG_HD typename storage<TO>::T cast_one(typename storage<FROM>::T s) {
  typedef typename storage<TO>::T D;
  constexpr bool from_float = FROM == TFG_DTYPE_F32 || FROM == TFG_DTYPE_F64 ||
                              FROM == TFG_DTYPE_F16 || FROM == TFG_DTYPE_BF16;
  if constexpr (FROM == TFG_DTYPE_F32 && TO == TFG_DTYPE_BF16) {
    return tfg_cast_f32_to_bf16(s);
  } else if constexpr (FROM == TFG_DTYPE_BF16 && TO == TFG_DTYPE_F32) {
    return tfg_cast_bf16_to_f32(s);
  } else if constexpr (from_float) {
    typedef typename std::conditional<FROM == TFG_DTYPE_F32, float, double>::type TX;
    TX x;
    if constexpr (FROM == TFG_DTYPE_F16) x = tfg_cast_f16_to_f64(s);
    else if constexpr (FROM == TFG_DTYPE_BF16) x = tfg_cast_bf16_to_f64(s);
    else x = s;
    if constexpr (TO == TFG_DTYPE_F32) return (D)(float)x;
    else if constexpr (TO == TFG_DTYPE_F64) return (D)(double)x;
    else if constexpr (TO == TFG_DTYPE_F16) return tfg_cast_f64_to_f16((double)x);
    else if constexpr (TO == TFG_DTYPE_BF16) return tfg_cast_f64_to_bf16((double)x);
    else if constexpr (TO == TFG_DTYPE_I32) return tfg_cast_f_to_i32((double)x);
    else if constexpr (TO == TFG_DTYPE_I64) return tfg_cast_f_to_i64((double)x);
    else return (D)(x != 0);
  } else { /* i32, i64, bool */
    if constexpr (TO == TFG_DTYPE_F32) return (float)s;
    else if constexpr (TO == TFG_DTYPE_F64) return (double)s;
    else if constexpr (TO == TFG_DTYPE_F16) return tfg_cast_i64_to_f16((int64_t)s);
    else if constexpr (TO == TFG_DTYPE_BF16) return tfg_cast_i64_to_bf16((int64_t)s);
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
  return TFG_CUDA_LAUNCH(ctx, n, cast_kernel<FROM, TO>, (const typename storage<FROM>::T *)x,
                         (typename storage<TO>::T *)y, n);
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
  case TFG_DTYPE_BOOL: return launch_cast<FROM, TFG_DTYPE_BOOL>(ctx, x, y, n);
  case TFG_DTYPE_COUNT: break; /* cuda_cast refuses it first */
  }
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "cast: unknown dtype");
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
  case TFG_DTYPE_BOOL: return cast_from<TFG_DTYPE_BOOL>(ctx, to, x, y, n);
  case TFG_DTYPE_COUNT: break; /* refused above */
  }
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "cast: unknown dtype");
}

/* ---- INIT ------------------------------------------------------------------- */

/* y[i] = v for every i: one element's bits, T an unsigned type of its size. */
template <typename T>
static __global__ void fill_const_kernel(T *y, T v, int64_t n) {
  TFG_CUDA_LOOP(i, n) y[i] = v;
}

/* Element i of random fill F (normal or uniform), kernels/init_math.h's
 * value rounded once to T, as on the CPU. */
template <typename T, tfg_init_fill F>
static __global__ void fill_random_kernel(T *y, int64_t n, uint64_t seed, double p, double q) {
  TFG_CUDA_LOOP(i, n) y[i] = (T)tfg_init_random_at(F, seed, i, p, q);
}

/* The same for f16 (BF16 false) and bf16: the double value rounded once
 * to the 16-bit format (kernels/cast_math.h), as the CPU's fill does. */
template <bool BF16, tfg_init_fill F>
static __global__ void fill_random_half_kernel(uint16_t *y, int64_t n, uint64_t seed, double p, double q) {
  TFG_CUDA_LOOP(i, n) {
    double v = tfg_init_random_at(F, seed, i, p, q);
    y[i] = BF16 ? tfg_cast_f64_to_bf16(v) : tfg_cast_f64_to_f16(v);
  }
}

template <typename T>
static tfg_status launch_fill_random(tfg_kernel_ctx *ctx, tfg_init_fill fill, void *y, int64_t n, uint64_t seed,
                                     double p, double q) {
  if (fill == TFG_INIT_FILL_NORMAL)
    return TFG_CUDA_LAUNCH(ctx, n, fill_random_kernel<T, TFG_INIT_FILL_NORMAL>, (T *)y, n, seed, p, q);
  return TFG_CUDA_LAUNCH(ctx, n, fill_random_kernel<T, TFG_INIT_FILL_UNIFORM>, (T *)y, n, seed, p, q);
}

template <bool BF16>
static tfg_status launch_fill_random_half(tfg_kernel_ctx *ctx, tfg_init_fill fill, void *y, int64_t n,
                                          uint64_t seed, double p, double q) {
  if (fill == TFG_INIT_FILL_NORMAL)
    return TFG_CUDA_LAUNCH(ctx, n, fill_random_half_kernel<BF16, TFG_INIT_FILL_NORMAL>, (uint16_t *)y, n, seed, p, q);
  return TFG_CUDA_LAUNCH(ctx, n, fill_random_half_kernel<BF16, TFG_INIT_FILL_UNIFORM>, (uint16_t *)y, n, seed, p, q);
}

/* INIT: fills out per node->attrs (the CPU's tfg_cpu_init / fill_plan):
 * zeros, ones, full(value) on f32 f64 f16 bf16 i32 i64 bool; normal(a, b),
 * uniform(a, b), glorot, he on f32 f64 f16 bf16, element i from
 * base/rng.h stream attrs.seed at counter i. f16 and bf16 natively, as
 * the CPU fills them: each value formed in double and rounded once to
 * the 16-bit format (never through f32), so the bits equal the CPU's. */
static tfg_status cuda_init(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)in;
  const tfg_attrs *a = &node->attrs;
  tfg_dtype dt = out->dtype;
  double c = 0, p = 0, q = 0;
  tfg_init_fill fill = tfg_init_plan(a, &out->shape, &c, &p, &q);
  bool half = (dt == TFG_DTYPE_F16 || dt == TFG_DTYPE_BF16) && fill != TFG_INIT_FILL_NONE;
  if (!tfg_init_supports(fill, dt) && !half)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s() cannot fill a %s tensor on the GPU",
                           tfg_init_name(a->init), tfg_dtype_name(dt));
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  if (fill == TFG_INIT_FILL_CONST) {
    switch (dt) {
    case TFG_DTYPE_F16:
    case TFG_DTYPE_BF16:
      return TFG_CUDA_LAUNCH(ctx, n, fill_const_kernel<uint16_t>, (uint16_t *)out->data,
                             dt == TFG_DTYPE_F16 ? tfg_cast_f64_to_f16(c) : tfg_cast_f64_to_bf16(c), n);
    case TFG_DTYPE_F32: {
      float v = (float)c;
      uint32_t bits;
      memcpy(&bits, &v, sizeof bits);
      return TFG_CUDA_LAUNCH(ctx, n, fill_const_kernel<uint32_t>, (uint32_t *)out->data, bits, n);
    }
    case TFG_DTYPE_F64: {
      uint64_t bits;
      memcpy(&bits, &c, sizeof bits);
      return TFG_CUDA_LAUNCH(ctx, n, fill_const_kernel<uint64_t>, (uint64_t *)out->data, bits, n);
    }
    case TFG_DTYPE_I32:
      return TFG_CUDA_LAUNCH(ctx, n, fill_const_kernel<uint32_t>, (uint32_t *)out->data,
                             (uint32_t)tfg_cast_f_to_i32(c), n);
    case TFG_DTYPE_I64:
      return TFG_CUDA_LAUNCH(ctx, n, fill_const_kernel<uint64_t>, (uint64_t *)out->data,
                             (uint64_t)tfg_cast_f_to_i64(c), n);
    case TFG_DTYPE_BOOL:
      TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, c != 0, (size_t)n, tfg_cuda_of(ctx)->stream));
      return TFG_OK;
    case TFG_DTYPE_COUNT: break; /* tfg_init_supports refuses it first */
    }
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "init: unknown dtype");
  }
  if (dt == TFG_DTYPE_F32) return launch_fill_random<float>(ctx, fill, out->data, n, a->seed, p, q);
  if (dt == TFG_DTYPE_F16) return launch_fill_random_half<false>(ctx, fill, out->data, n, a->seed, p, q);
  if (dt == TFG_DTYPE_BF16) return launch_fill_random_half<true>(ctx, fill, out->data, n, a->seed, p, q);
  return launch_fill_random<double>(ctx, fill, out->data, n, a->seed, p, q);
}

/* ---- dropout ---------------------------------------------------------------- */

/* Element i is kept when tfg_rng_uniform(seed, offset + i) >= rate, and is
 * then x * scale formed in double and rounded once to T (the CPU's
 * dropout_f32/f64). */
template <typename T>
TFG_HD T dropout_one(T x, uint64_t seed, int64_t i, double rate, double scale) {
  return tfg_rng_uniform(seed, (uint64_t)i) >= rate ? (T)TFG_RN_MUL64((double)x, scale) : (T)0;
}

/* The mask's stream comes from the step block (tfg_cuda_ctx.step): a
 * replayed CUDA Graph keeps the kernel's arguments, and the mask changes
 * with the step. */
template <typename T>
static __global__ void dropout_kernel(const T *x, T *y, int64_t n, uint64_t op_seed, const tfg_cuda_step *st,
                                      int64_t offset, double rate, double scale) {
  uint64_t seed = tfg_rng_dropout_stream(op_seed, st->seed, st->step);
  TFG_CUDA_LOOP(i, n) y[i] = dropout_one<T>(x[i], seed, offset + i, rate, scale);
}

/* DROPOUT (the CPU's tfg_cpu_dropout): identity unless ctx->training;
 * then keeps each element with probability 1 - rate (rate = attrs.value)
 * from the stream tfg_rng_dropout_stream(attrs.seed, seed, step) (the
 * run's seed and step from the step block) at counter attrs.offset + i, and scales the kept ones by
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
  double scale = 1.0 / (1.0 - rate);
  if (x->dtype == TFG_DTYPE_F32)
    return TFG_CUDA_LAUNCH(ctx, n, dropout_kernel<float>, (const float *)x->data, (float *)out->data, n,
                           node->attrs.seed, cx->step, node->attrs.offset, rate, scale);
  return TFG_CUDA_LAUNCH(ctx, n, dropout_kernel<double>, (const double *)x->data, (double *)out->data, n,
                         node->attrs.seed, cx->step, node->attrs.offset, rate, scale);
}

/* ---- registration ------------------------------------------------------------- */

/* The kernels of every op of ir/op_list.h's elementwise lists, by line. */
extern "C" void tfg_cuda_register_elementwise(tfg_kernel_fn *table) {
  tfg_kernel_register_elementwise(table, cuda_elementwise, cuda_elementwise);
  table[TFG_OP_WHERE] = cuda_where;
  table[TFG_OP_CAST] = cuda_cast;
  table[TFG_OP_INIT] = cuda_init;
  table[TFG_OP_DROPOUT] = cuda_dropout;
}
