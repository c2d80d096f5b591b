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

/* ---- f32 -------------------------------------------------------------------- */

TFG_HD float tfg_em_neg_f32(float x) { return -x; }
TFG_HD float tfg_em_exp_f32(float x) { return expf(x); }
TFG_HD float tfg_em_log_f32(float x) { return logf(x); }
TFG_HD float tfg_em_sqrt_f32(float x) { return TFG_RN_SQRT32(x); }
TFG_HD float tfg_em_rsqrt_f32(float x) { return TFG_RN_DIV32(1.0f, TFG_RN_SQRT32(x)); }
TFG_HD float tfg_em_abs_f32(float x) { return fabsf(x); }
/* relu keeps NaN (NaN < 0 is false), as PyTorch does. */
TFG_HD float tfg_em_relu_f32(float x) { return x < 0 ? 0.0f : x; }
/* gelu(x) = x * (1 + erf(x / sqrt 2)) / 2, written with erfc(-x / sqrt 2),
 * which equals 1 + erf(x / sqrt 2) but keeps full relative accuracy where
 * that sum cancels (x below about -4). The f32 version also runs in
 * double: the relative error of erfc(z) is about 2z^2 times that of z, so
 * merely rounding x / sqrt 2 to f32 would cost ~30 ulp at x = -8. */
TFG_HD float tfg_em_gelu_f32(float x) {
  double xd = x;
  return (float)TFG_RN_MUL64(TFG_RN_MUL64(0.5, xd), erfc(TFG_RN_MUL64(-xd, TFG_EM_SQRT1_2)));
}
TFG_HD float tfg_em_tanh_f32(float x) { return tanhf(x); }
/* sigmoid only ever exponentiates -|x|, so it cannot overflow for any x:
 * s = 1 / (1 + e^-|x|) for x >= 0, and e^-|x| * s = e^x / (1 + e^x) below,
 * which keeps full relative accuracy down to the smallest results. */
TFG_HD float tfg_em_sigmoid_f32(float x) {
  float e = expf(-fabsf(x)), s = TFG_RN_DIV32(1.0f, TFG_RN_ADD32(1.0f, e));
  return x >= 0 ? s : TFG_RN_MUL32(e, s);
}

TFG_HD float tfg_em_add_f32(float x, float y) { return TFG_RN_ADD32(x, y); }
TFG_HD float tfg_em_sub_f32(float x, float y) { return TFG_RN_SUB32(x, y); }
TFG_HD float tfg_em_mul_f32(float x, float y) { return TFG_RN_MUL32(x, y); }
TFG_HD float tfg_em_div_f32(float x, float y) { return TFG_RN_DIV32(x, y); }
TFG_HD float tfg_em_pow_f32(float x, float y) { return powf(x, y); }
/* maximum/minimum propagate NaN from either side, as PyTorch does: a
 * comparison with NaN is false, so x != x picks a NaN x and the fall
 * through to y picks a NaN y. */
TFG_HD float tfg_em_maximum_f32(float x, float y) { return (x > y || x != x) ? x : y; }
TFG_HD float tfg_em_minimum_f32(float x, float y) { return (x < y || x != x) ? x : y; }

/* ---- f64 (the same formulas) ------------------------------------------------------ */

TFG_HD double tfg_em_neg_f64(double x) { return -x; }
TFG_HD double tfg_em_exp_f64(double x) { return exp(x); }
TFG_HD double tfg_em_log_f64(double x) { return log(x); }
TFG_HD double tfg_em_sqrt_f64(double x) { return TFG_RN_SQRT64(x); }
TFG_HD double tfg_em_rsqrt_f64(double x) { return TFG_RN_DIV64(1.0, TFG_RN_SQRT64(x)); }
TFG_HD double tfg_em_abs_f64(double x) { return fabs(x); }
TFG_HD double tfg_em_relu_f64(double x) { return x < 0 ? 0.0 : x; }
TFG_HD double tfg_em_gelu_f64(double x) {
  return TFG_RN_MUL64(TFG_RN_MUL64(0.5, x), erfc(TFG_RN_MUL64(-x, TFG_EM_SQRT1_2)));
}
TFG_HD double tfg_em_tanh_f64(double x) { return tanh(x); }
TFG_HD double tfg_em_sigmoid_f64(double x) {
  double e = exp(-fabs(x)), s = TFG_RN_DIV64(1.0, TFG_RN_ADD64(1.0, e));
  return x >= 0 ? s : TFG_RN_MUL64(e, s);
}

TFG_HD double tfg_em_add_f64(double x, double y) { return TFG_RN_ADD64(x, y); }
TFG_HD double tfg_em_sub_f64(double x, double y) { return TFG_RN_SUB64(x, y); }
TFG_HD double tfg_em_mul_f64(double x, double y) { return TFG_RN_MUL64(x, y); }
TFG_HD double tfg_em_div_f64(double x, double y) { return TFG_RN_DIV64(x, y); }
TFG_HD double tfg_em_pow_f64(double x, double y) { return pow(x, y); }
TFG_HD double tfg_em_maximum_f64(double x, double y) { return (x > y || x != x) ? x : y; }
TFG_HD double tfg_em_minimum_f64(double x, double y) { return (x < y || x != x) ? x : y; }

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
