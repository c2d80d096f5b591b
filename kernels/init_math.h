/* kernels/init_math.h: the initializers (LANGUAGE.md section 5) as the
 * INIT kernels compute them, written once for the CPU (kernels/cpu/init.c,
 * which also fills PARAM values) and the GPU (kernels/cuda/elementwise.cu):
 * which fill an initializer is, its parameters from the tensor's fans, and
 * the value of element i, so a param initialized on either device gets
 * the same numbers.
 *
 *   double c, p, q;
 *   tfg_init_fill f = tfg_init_plan(&node->attrs, &t->shape, &c, &p, &q);
 *   if (!tfg_init_supports(f, t->dtype)) ...fail, naming tfg_init_name(...)...
 *   // FILL_CONST: every element c (ints by tfg_cast_f_to_i32/i64, bool c != 0)
 *   // else: element i is (T)tfg_init_random_at(f, attrs.seed, i, p, q)
 *
 * Random elements are pure functions of (seed, i) (base/rng.h), computed
 * in double with never-contracted arithmetic and rounded once to the
 * dtype, so they do not depend on how a fill is split over threads or
 * devices; only the device's double log/cos inside tfg_rng_normal may
 * differ from glibc's by an ulp. tfg_init_random_at is host and device
 * code (kernels/hostdev.h); the rest runs on the host. */
#ifndef TFG_KERNELS_INIT_MATH_H
#define TFG_KERNELS_INIT_MATH_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/rng.h"
#include "kernels/hostdev.h"

TFG_C_BEGIN
#include "ir/graph.h"
TFG_C_END

/* What an initializer writes. */
typedef enum tfg_init_fill {
  TFG_INIT_FILL_NONE,    /* not an initializer tfg knows */
  TFG_INIT_FILL_CONST,   /* zeros, ones, full: one value */
  TFG_INIT_FILL_NORMAL,  /* normal, he: p + q * N(0,1) */
  TFG_INIT_FILL_UNIFORM, /* uniform, glorot: p + (q - p) * U[0,1) */
} tfg_init_fill;

/* fan_in and fan_out of a weight of shape s (kernels/cpu/cpu.h): rank < 2
 * both the element count; rank 2 [in, out] (matmul weights are [in, out]
 * because the layer computes matmul(x, w)); rank >= 3 [out, in, k...],
 * the PyTorch convention for conv weights. */
static inline void tfg_init_fans(const tfg_shape *s, double *fan_in, double *fan_out) {
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

/* The fill of initializer a (attrs.init, value, a, b) for a tensor of
 * shape s: the constant in *c, or the random parameters in *p and *q
 * (glorot: uniform(+-sqrt(6 / (fan_in + fan_out))); he: normal(0,
 * sqrt(2 / fan_in))). What a fill does not use is left alone. */
static inline tfg_init_fill tfg_init_plan(const tfg_attrs *a, const tfg_shape *s, double *c, double *p,
                                          double *q) {
  double fan_in, fan_out;
  switch (a->init) {
  case TFG_INIT_ZEROS: *c = 0; return TFG_INIT_FILL_CONST;
  case TFG_INIT_ONES: *c = 1; return TFG_INIT_FILL_CONST;
  case TFG_INIT_FULL: *c = a->value; return TFG_INIT_FILL_CONST;
  case TFG_INIT_NORMAL:
    *p = a->a;
    *q = a->b;
    return TFG_INIT_FILL_NORMAL;
  case TFG_INIT_UNIFORM:
    *p = a->a;
    *q = a->b;
    return TFG_INIT_FILL_UNIFORM;
  case TFG_INIT_GLOROT: {
    tfg_init_fans(s, &fan_in, &fan_out);
    double l = sqrt(6.0 / (fan_in + fan_out));
    *p = -l;
    *q = l;
    return TFG_INIT_FILL_UNIFORM;
  }
  case TFG_INIT_HE:
    tfg_init_fans(s, &fan_in, &fan_out);
    *p = 0;
    *q = sqrt(2.0 / fan_in);
    return TFG_INIT_FILL_NORMAL;
  }
  return TFG_INIT_FILL_NONE;
}

/* Whether fill f can fill a tensor of dtype dt: constants fill f32 f64
 * i32 i64 bool, random fills f32 and f64 (f16/bf16 are not filled: cast
 * an f32 fill). */
static inline bool tfg_init_supports(tfg_init_fill f, tfg_dtype dt) {
  bool is_float = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64;
  bool is_exact = dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64 || dt == TFG_DTYPE_BOOL;
  return f != TFG_INIT_FILL_NONE && (is_float || (f == TFG_INIT_FILL_CONST && is_exact));
}

/* Element i of random fill f (NORMAL or UNIFORM) with parameters p, q
 * from stream seed, in double (the caller rounds it once to the dtype). */
TFG_HD double tfg_init_random_at(tfg_init_fill f, uint64_t seed, int64_t i, double p, double q) {
  return f == TFG_INIT_FILL_NORMAL
             ? TFG_RN_ADD64(p, TFG_RN_MUL64(q, tfg_rng_normal(seed, (uint64_t)i)))
             : TFG_RN_ADD64(p, TFG_RN_MUL64(TFG_RN_SUB64(q, p), tfg_rng_uniform(seed, (uint64_t)i)));
}

/* The initializer's name for messages ("zeros", "he"). */
static inline const char *tfg_init_name(tfg_init_kind k) {
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

#endif
