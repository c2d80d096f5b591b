/* kernels/elementwise_math.h: the per-element formulas of the elementwise
 * ops, one function per op and element type: tfg_em_<formula>_<S>, S f32
 * or f64, and i32 and i64 for the ops that take integers (the lines of
 * TFG_OPS_UNARY and TFG_OPS_BINARY, ir/op_list.h, name each op's formula
 * and say whether it takes integers), written once for every kernel that
 * computes them: the CPU ops (kernels/cpu/elementwise.c), the CPU fused
 * chain (kernels/cpu/fused.c), the CUDA ops (kernels/cuda/elementwise.cu),
 * the CUDA fused chain (kernels/cuda/fused.cu) and the source NVRTC
 * compiles for a chain (kernels/fused_codegen.c). Each of them generates
 * its switch over the ops from those lists, so a formula added here with
 * its line there runs everywhere; a chain fused by the planner gives the
 * same bits as its ops run one at a time, on either backend.
 *
 *   float y = tfg_em_gelu_f32(x);                      // one op
 *   double z = tfg_em_binary_f64(TFG_OP_POW, x, p);    // by op id
 *   float w = tfg_em_unary(TFG_OP_EXP, x);             // C++: by type
 *
 * C includes it as static inline functions; nvcc as __host__ __device__
 * ones (kernels/hostdev.h). The four arithmetic operations and sqrt are
 * TFG_RN_*: never contracted into an FMA, in device code either, so a * b
 * + c across two ops rounds twice, as the ops do one at a time.
 * Transcendentals call the platform's math library (glibc on the host,
 * CUDA's libdevice on the GPU), so GPU results match the CPU's within
 * those libraries' ulp bounds, not bit for bit.
 *
 * Integer ops wrap (two's complement, as PyTorch and NumPy do) instead of
 * being undefined behaviour: they compute in the unsigned type of the
 * same width.
 *
 * The tfg_em_unary_* and tfg_em_binary_* dispatchers switch on the op per
 * call; the CPU loops call the per-op functions instead, with the switch
 * outside the loop, so each loop stays a simple one the compiler
 * vectorizes. With a constant op (a template argument in the CUDA
 * kernels) the switch folds away. */
#ifndef TFG_KERNELS_ELEMENTWISE_MATH_H
#define TFG_KERNELS_ELEMENTWISE_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/op_list.h"
#include "kernels/hostdev.h"

/* The element type of each suffix S, for code generated per suffix from
 * the lists of ir/op_list.h (TFG_EM_T_f32 is float). */
#define TFG_EM_T_f32 float
#define TFG_EM_T_f64 double
#define TFG_EM_T_i32 int32_t
#define TFG_EM_T_i64 int64_t

/* 1 / sqrt(2), the digits of glibc's M_SQRT1_2 (the same double), which
 * strict C11 and nvcc's device code do not both define. */
#define TFG_EM_SQRT1_2 0.70710678118654752440

/* ---- f32, f64 ----------------------------------------------------------------- */

/* The float formulas, written once for both suffixes S of element type T:
 * F is the suffix of libm's function for T (f for float, none for double)
 * and B the width of its TFG_RN_* arithmetic (32, 64).
 *   - relu keeps NaN (NaN < 0 is false), as PyTorch does.
 *   - sigmoid only ever exponentiates -|x|, so it cannot overflow for any
 *     x: s = 1 / (1 + e^-|x|) for x >= 0, and e^-|x| * s = e^x / (1 + e^x)
 *     below, which keeps full relative accuracy down to the smallest
 *     results.
 *   - maximum/minimum propagate NaN from either side, as PyTorch does: a
 *     comparison with NaN is false, so x != x picks a NaN x and the fall
 *     through to y picks a NaN y. */
#define TFG_EM_FLOAT(S, T, F, B)                                                      \
  TFG_HD T tfg_em_neg_##S(T x) { return -x; }                                         \
  TFG_HD T tfg_em_exp_##S(T x) { return exp##F(x); }                                  \
  TFG_HD T tfg_em_log_##S(T x) { return log##F(x); }                                  \
  TFG_HD T tfg_em_sqrt_##S(T x) { return TFG_RN_SQRT##B(x); }                         \
  TFG_HD T tfg_em_rsqrt_##S(T x) { return TFG_RN_DIV##B((T)1, TFG_RN_SQRT##B(x)); }   \
  TFG_HD T tfg_em_abs_##S(T x) { return fabs##F(x); }                                 \
  TFG_HD T tfg_em_relu_##S(T x) { return x < 0 ? (T)0 : x; }                          \
  TFG_HD T tfg_em_tanh_##S(T x) { return tanh##F(x); }                                \
  TFG_HD T tfg_em_sigmoid_##S(T x) {                                                  \
    T e = exp##F(-fabs##F(x)), s = TFG_RN_DIV##B((T)1, TFG_RN_ADD##B((T)1, e));       \
    return x >= 0 ? s : TFG_RN_MUL##B(e, s);                                          \
  }                                                                                   \
  TFG_HD T tfg_em_add_##S(T x, T y) { return TFG_RN_ADD##B(x, y); }                   \
  TFG_HD T tfg_em_sub_##S(T x, T y) { return TFG_RN_SUB##B(x, y); }                   \
  TFG_HD T tfg_em_mul_##S(T x, T y) { return TFG_RN_MUL##B(x, y); }                   \
  TFG_HD T tfg_em_div_##S(T x, T y) { return TFG_RN_DIV##B(x, y); }                   \
  TFG_HD T tfg_em_pow_##S(T x, T y) { return pow##F(x, y); }                          \
  TFG_HD T tfg_em_maximum_##S(T x, T y) { return (x > y || x != x) ? x : y; }         \
  TFG_HD T tfg_em_minimum_##S(T x, T y) { return (x < y || x != x) ? x : y; }

TFG_EM_FLOAT(f32, float, f, 32)
TFG_EM_FLOAT(f64, double, , 64)

#undef TFG_EM_FLOAT

/* gelu(x) = x * (1 + erf(x / sqrt 2)) / 2, written with erfc(-x / sqrt 2),
 * which equals 1 + erf(x / sqrt 2) but keeps full relative accuracy where
 * that sum cancels (x below about -4). The f32 version runs in double,
 * rounded once: the relative error of erfc(z) is about 2z^2 times that of
 * z, so merely rounding x / sqrt 2 to f32 would cost ~30 ulp at x = -8. */
TFG_HD double tfg_em_gelu_f64(double x) {
  return TFG_RN_MUL64(TFG_RN_MUL64(0.5, x), erfc(TFG_RN_MUL64(-x, TFG_EM_SQRT1_2)));
}
TFG_HD float tfg_em_gelu_f32(float x) { return (float)tfg_em_gelu_f64(x); }

/* ---- by op id ------------------------------------------------------------------ */

/* The formula of op (one of TFG_OPS_UNARY; of TFG_OPS_BINARY) of x (and
 * y) in S. The callers pass checked ops only (tfg_kernel_check_unary and
 * _binary, tfg_fused_check), so any other op is a bug: it stops there
 * (TFG_HD_UNREACHABLE) rather than computing something. */
#define TFG_EM_UNARY_CASE_(S, ID, formula, ints, flops, cheap) \
  case TFG_OP_##ID: return tfg_em_##formula##_##S(x);
#define TFG_EM_BINARY_CASE_(S, ID, formula, sig, ints, flops, cheap) \
  case TFG_OP_##ID: return tfg_em_##formula##_##S(x, y);
#define TFG_EM_BY_OP(S, T)                                                  \
  TFG_HD T tfg_em_unary_##S(int op, T x) {                                  \
    switch (op) {                                                           \
    TFG_OPS_UNARY(TFG_EM_UNARY_CASE_, S)                                    \
    default: TFG_HD_UNREACHABLE();                                          \
    }                                                                       \
  }                                                                         \
  TFG_HD T tfg_em_binary_##S(int op, T x, T y) {                            \
    switch (op) {                                                           \
    TFG_OPS_BINARY(TFG_EM_BINARY_CASE_, S)                                  \
    default: TFG_HD_UNREACHABLE();                                          \
    }                                                                       \
  }

TFG_EM_BY_OP(f32, float)
TFG_EM_BY_OP(f64, double)
#undef TFG_EM_BY_OP

/* ---- i32, i64 ---------------------------------------------------------------- */

/* S the suffix, T the signed type, U its unsigned twin. Negation is done
 * unsigned, so INT_MIN wraps to itself; division truncates toward zero
 * (C's), and x / -1 is the wrapped negation because INT_MIN / -1
 * overflows (and traps on x86). The divisor must not be 0: the kernels
 * check for it before dividing (a CPU scan, a device flag on the GPU). */
#define TFG_EM_INT(S, T, U)                                                                        \
  TFG_HD T tfg_em_neg_##S(T x) { return (T)((U)0 - (U)x); }                                        \
  TFG_HD T tfg_em_abs_##S(T x) { return x < 0 ? (T)((U)0 - (U)x) : x; }                            \
  TFG_HD T tfg_em_relu_##S(T x) { return x < 0 ? (T)0 : x; }                                       \
  TFG_HD T tfg_em_add_##S(T x, T y) { return (T)((U)x + (U)y); }                                   \
  TFG_HD T tfg_em_sub_##S(T x, T y) { return (T)((U)x - (U)y); }                                   \
  TFG_HD T tfg_em_mul_##S(T x, T y) { return (T)((U)x * (U)y); }                                   \
  TFG_HD T tfg_em_div_##S(T x, T y) { return y == -1 ? (T)((U)0 - (U)x) : (T)(x / y); }            \
  TFG_HD T tfg_em_maximum_##S(T x, T y) { return x > y ? x : y; }                                  \
  TFG_HD T tfg_em_minimum_##S(T x, T y) { return x < y ? x : y; }

TFG_EM_INT(i32, int32_t, uint32_t)
TFG_EM_INT(i64, int64_t, uint64_t)

#undef TFG_EM_INT

/* ---- C++: by type ----------------------------------------------------------------- */

#ifdef __cplusplus
/* The dispatchers overloaded on the element type, for templates (the CUDA
 * kernels). The integer ones know the ops whose line says ints. */
TFG_HD float tfg_em_unary(int op, float x) { return tfg_em_unary_f32(op, x); }
TFG_HD double tfg_em_unary(int op, double x) { return tfg_em_unary_f64(op, x); }
TFG_HD float tfg_em_binary(int op, float x, float y) { return tfg_em_binary_f32(op, x, y); }
TFG_HD double tfg_em_binary(int op, double x, double y) { return tfg_em_binary_f64(op, x, y); }

#define TFG_EM_INT_UNARY_CASE_(S, ID, formula, ints, flops, cheap) \
  TFG_OPS_IF(ints, TFG_EM_UNARY_CASE_(S, ID, formula, ints, flops, cheap))
#define TFG_EM_INT_BINARY_CASE_(S, ID, formula, sig, ints, flops, cheap) \
  TFG_OPS_IF(ints, TFG_EM_BINARY_CASE_(S, ID, formula, sig, ints, flops, cheap))
#define TFG_EM_INT_BY_OP(S, T)                                              \
  TFG_HD T tfg_em_unary(int op, T x) {                                      \
    switch (op) {                                                           \
    TFG_OPS_UNARY(TFG_EM_INT_UNARY_CASE_, S)                                \
    default: TFG_HD_UNREACHABLE();                                          \
    }                                                                       \
  }                                                                         \
  TFG_HD T tfg_em_binary(int op, T x, T y) {                                \
    switch (op) {                                                           \
    TFG_OPS_BINARY(TFG_EM_INT_BINARY_CASE_, S)                              \
    default: TFG_HD_UNREACHABLE();                                          \
    }                                                                       \
  }
TFG_EM_INT_BY_OP(i32, int32_t)
TFG_EM_INT_BY_OP(i64, int64_t)
#undef TFG_EM_INT_BY_OP
#undef TFG_EM_INT_UNARY_CASE_
#undef TFG_EM_INT_BINARY_CASE_
#endif

#undef TFG_EM_UNARY_CASE_
#undef TFG_EM_BINARY_CASE_

#endif
