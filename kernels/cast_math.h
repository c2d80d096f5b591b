/* kernels/cast_math.h: the element conversions of CAST between f32 f64
 * f16 bf16 i32 i64 (and the float-to-integer rule INIT's constants use),
 * written once for the CPU kernels (kernels/cpu/elementwise.c,
 * kernels/cpu/init.c) and the CUDA ones (kernels/cuda/elementwise.cu), so
 * a cast gives the same bits on either.
 *
 *   uint16_t h = tfg_cast_f64_to_f16(x);     // round to nearest even
 *   double d = tfg_cast_f16_to_f64(h);       // exact
 *   int32_t k = tfg_cast_f_to_i32(x);        // truncate, NaN 0, saturate
 *
 * f16 and bf16 are storage formats: a value is rounded to them directly
 * from its source (a double, or a 64-bit integer), to nearest even with
 * subnormals, overflow to infinity and NaN kept, never through f32 first,
 * which would round twice. Everything is integer work on the bits, so the
 * device computes exactly what the host does. C includes it as static
 * inline functions, nvcc as __host__ __device__ ones (kernels/hostdev.h). */
#ifndef TFG_KERNELS_CAST_MATH_H
#define TFG_KERNELS_CAST_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/hostdev.h"

/* Leading zero bits of m (m > 0). */
TFG_HD int tfg_cast_clz64(uint64_t m) {
#ifdef __CUDA_ARCH__
  return __clzll((long long)m);
#else
  return __builtin_clzll(m);
#endif
}

/* Rounds the positive value m * 2^ex (m > 0) to nearest-even in a binary
 * format with `mbits` fraction bits and `ebits` exponent bits (IEEE
 * layout, no sign), returning its bit pattern: subnormals where the value
 * is below the smallest normal, infinity past the largest finite value.
 * Taking an integer significand lets doubles and 64-bit integers both
 * round exactly once. */
TFG_HD uint32_t tfg_cast_round_small(uint64_t m, int ex, int mbits, int ebits) {
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  int p = 63 - tfg_cast_clz64(m); /* value in [2^(p+ex), 2^(p+ex+1)) */
  int e = p + ex;
  if (e > bias) return inf; /* at least 2^(bias+1): past the largest finite */
  int qexp = (e < emin ? emin : e) - mbits; /* exponent of the last kept bit */
  int shift = qexp - ex;
  uint64_t q;
  if (shift <= 0) {
    q = m << -shift; /* exact: q < 2^(mbits+1) */
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
  /* A subnormal encodes q itself; a normal stores q without its leading
   * bit. A carry out of the fraction (q = 2^mbits for a subnormal,
   * 2^(mbits+1) for a normal) lands in the exponent field, which is
   * exactly the next binade, up to infinity. */
  uint64_t enc = e < emin ? q : ((uint64_t)(e + bias) << mbits) + (q - (1ull << mbits));
  return enc >= inf ? inf : (uint32_t)enc;
}

/* double to a 16-bit float (f16: 10/5, bf16: 7/8). NaN stays a quiet NaN
 * keeping the sign and the top payload bits. */
TFG_HD uint16_t tfg_cast_f64_to_small(double d, int mbits, int ebits) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint32_t sign = (uint32_t)(u >> 48) & 0x8000u;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  uint64_t exf = (u >> 52) & 0x7FF, frac = u & ((1ull << 52) - 1);
  if (exf == 0x7FF) {
    if (frac == 0) return (uint16_t)(sign | inf);
    return (uint16_t)(sign | inf | (1u << (mbits - 1)) | (uint32_t)(frac >> (52 - mbits)));
  }
  /* Zeros, and double subnormals (below 2^-1022): far under half of
   * either format's smallest subnormal, so they round to a signed zero. */
  if (exf == 0) return (uint16_t)sign;
  return (uint16_t)(sign | tfg_cast_round_small(frac | (1ull << 52), (int)exf - 1075, mbits, ebits));
}

/* A 64-bit integer to a 16-bit float, rounded once. */
TFG_HD uint16_t tfg_cast_i64_to_small(int64_t v, int mbits, int ebits) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 0x8000u : 0;
  uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  return (uint16_t)(sign | tfg_cast_round_small(mag, 0, mbits, ebits));
}

/* A 16-bit float to double: exact. NaN payloads move to the top of the
 * double's fraction, so a NaN cast back keeps them. */
TFG_HD double tfg_cast_small_to_f64(uint16_t h, int mbits, int ebits) {
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
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

TFG_HD uint16_t tfg_cast_f64_to_f16(double d) { return tfg_cast_f64_to_small(d, 10, 5); }
TFG_HD uint16_t tfg_cast_f64_to_bf16(double d) { return tfg_cast_f64_to_small(d, 7, 8); }
TFG_HD uint16_t tfg_cast_i64_to_f16(int64_t v) { return tfg_cast_i64_to_small(v, 10, 5); }
TFG_HD uint16_t tfg_cast_i64_to_bf16(int64_t v) { return tfg_cast_i64_to_small(v, 7, 8); }
TFG_HD double tfg_cast_f16_to_f64(uint16_t h) { return tfg_cast_small_to_f64(h, 10, 5); }
TFG_HD double tfg_cast_bf16_to_f64(uint16_t h) { return tfg_cast_small_to_f64(h, 7, 8); }

/* f32 to bf16 is the hot conversion (mixed precision); bf16 is the top
 * half of an f32, so rounding is one add on the bits. Same results as
 * tfg_cast_f64_to_bf16((double)x). */
TFG_HD uint16_t tfg_cast_f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

TFG_HD float tfg_cast_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* f16 to f32: exact (every f16 is an f32), integer work on the bits. A
 * subnormal f16 is f * 2^-24 with f < 2^10: normalized by its leading
 * bit. Same bits as (float)tfg_cast_f16_to_f64(h), NaN made quiet as
 * that conversion does. */
TFG_HD float tfg_cast_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7FFFu, u;
  if (em > 0x7C00u) { /* NaN: quiet, the payload at the top of the fraction */
    u = sign | 0x7FC00000u | ((em & 0x3FFu) << 13);
  } else if (em == 0x7C00u) {
    u = sign | 0x7F800000u;
  } else if (em >= 0x0400u) { /* normal: rebias the exponent 15 -> 127 */
    u = sign | ((em << 13) + ((uint32_t)(127 - 15) << 23));
  } else if (em == 0) {
    u = sign;
  } else { /* subnormal: value em * 2^-24, leading bit at position p < 10 */
    int p = 63 - tfg_cast_clz64(em);
    u = sign | ((uint32_t)(p - 24 + 127) << 23) | ((em << (23 - p)) & 0x7FFFFFu);
  }
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* f32 to f16, round to nearest even with subnormals, overflow to
 * infinity, NaN quiet with the top payload bits (as
 * tfg_cast_f64_to_f16((double)x), which it equals for every x). The hot
 * conversion of f16 kernels that compute in f32 (kernels/cpu/half.c). */
TFG_HD uint16_t tfg_cast_f32_to_f16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((u >> 13) & 0x3FFu));
  if (u >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* 65520 and up: past the largest (65504) */
  if (u < 0x38800000u) {                                      /* below 2^-14: an f16 subnormal or zero */
    if (u <= 0x33000000u) return sign;                        /* at most 2^-25, half the smallest: 0 (a tie goes to even 0) */
    uint32_t e = u >> 23, m = (u & 0x7FFFFFu) | 0x800000u;    /* value m * 2^(e - 150) */
    uint32_t shift = 126 - e;                                 /* to units of 2^-24: 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q); /* q = 2^10 carries into the smallest normal, as it should */
  }
  /* normal: rebias, keep 10 fraction bits, round the 13 dropped ones to
   * nearest even; a carry moves into the exponent (up to infinity) */
  uint32_t r = u - ((uint32_t)(127 - 15) << 23);
  r += 0x0FFFu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

/* Float to integer: truncation toward zero. C leaves NaN and
 * out-of-range values undefined; here NaN gives 0 and the rest saturate,
 * so a cast never traps and never depends on the compiler. */
TFG_HD int32_t tfg_cast_f_to_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483648.0) return INT32_MAX;
  if (x <= -2147483649.0) return INT32_MIN;
  return (int32_t)x;
}

TFG_HD int64_t tfg_cast_f_to_i64(double x) {
  if (x != x) return 0;
  if (x >= 0x1p63) return INT64_MAX;
  if (x < -0x1p63) return INT64_MIN;
  return (int64_t)x;
}

#endif
