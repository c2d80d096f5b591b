/* kernels/cpu/init.c: constants and initializers (CONST, INIT, and the
 * fill behind PARAM values).
 *
 * Random initializers draw element i from base/rng.h at counter i of
 * stream attrs.seed, computed in double and rounded once to the tensor's
 * dtype. Because every element is a pure function of (seed, i), the
 * values do not depend on how the fill is split over threads, and a
 * param initialized on the CPU equals the same param initialized by the
 * GPU kernel: both take the plan and the formula from
 * kernels/init_math.h. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cast_math.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/init_math.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_CONST, tfg_cpu_const},
    {TFG_OP_INIT, tfg_cpu_init},
};

void tfg_cpu_register_init(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

enum { GRAIN_CONST = 32768, GRAIN_RANDOM = 8192 };

/* Copies the node's constant payload (attrs.data: numel * dtype-size
 * bytes, laid out in the node's dtype and shape). */
TFG_CPU_KERNEL(tfg_cpu_const) {
  (void)in;
  size_t bytes = (size_t)tfg_shape_numel(&out->shape) * tfg_dtype_size(out->dtype);
  if (bytes == 0) return TFG_OK;
  if (!node->attrs.data)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "constant has no data");
  memcpy(out->data, node->attrs.data, bytes);
  return TFG_OK;
}

/* Element i is c for a constant fill, else tfg_init_random_at's value of
 * the random fill `kind` with parameters p, q. */
typedef struct fill_job {
  tfg_init_fill kind;
  tfg_dtype dt;
  void *y;
  double c, p, q;
  uint64_t seed;
} fill_job;

static void fill_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const fill_job *j = arg;
  if (j->kind == TFG_INIT_FILL_CONST) {
    double c = j->c;
    switch (j->dt) {
    case TFG_DTYPE_F32: for (int64_t i = lo; i < hi; i++) ((float *)j->y)[i] = (float)c; break;
    case TFG_DTYPE_F64: for (int64_t i = lo; i < hi; i++) ((double *)j->y)[i] = c; break;
    case TFG_DTYPE_I32: {
      /* as cast converts: truncate toward zero, NaN to 0, saturate out of
       * range (full(1e10) on i32 must not be undefined) */
      int32_t v = tfg_cast_f_to_i32(c);
      for (int64_t i = lo; i < hi; i++) ((int32_t *)j->y)[i] = v;
      break;
    }
    case TFG_DTYPE_I64: {
      int64_t v = tfg_cast_f_to_i64(c);
      for (int64_t i = lo; i < hi; i++) ((int64_t *)j->y)[i] = v;
      break;
    }
    case TFG_DTYPE_BOOL: memset((uint8_t *)j->y + lo, c != 0, (size_t)(hi - lo)); break;
    case TFG_DTYPE_F16:
    case TFG_DTYPE_BF16: {
      uint16_t v = j->dt == TFG_DTYPE_F16 ? tfg_cast_f64_to_f16(c) : tfg_cast_f64_to_bf16(c);
      for (int64_t i = lo; i < hi; i++) ((uint16_t *)j->y)[i] = v;
      break;
    }
    default: break;
    }
    return;
  }
  for (int64_t i = lo; i < hi; i++) {
    double v = tfg_init_random_at(j->kind, j->seed, i, j->p, j->q);
    switch (j->dt) {
    case TFG_DTYPE_F32: ((float *)j->y)[i] = (float)v; break;
    case TFG_DTYPE_F16: ((uint16_t *)j->y)[i] = tfg_cast_f64_to_f16(v); break;
    case TFG_DTYPE_BF16: ((uint16_t *)j->y)[i] = tfg_cast_f64_to_bf16(v); break;
    default: ((double *)j->y)[i] = v; break;
    }
  }
}

/* Fills t per a; TFG_ERR_DEVICE when the initializer does not apply to
 * t's dtype (tfg_init_supports: random ones need a float dtype). The CPU
 * also fills f16 and bf16, every initializer: each value formed in
 * double, as for f32, and rounded once to the 16-bit format. */
static tfg_status fill(tfg_tensor *t, const tfg_attrs *a, tfg_pool *pool) {
  fill_job j = {.dt = t->dtype, .y = t->data, .seed = a->seed};
  j.kind = tfg_init_plan(a, &t->shape, &j.c, &j.p, &j.q);
  bool half = (t->dtype == TFG_DTYPE_F16 || t->dtype == TFG_DTYPE_BF16) && j.kind != TFG_INIT_FILL_NONE;
  if (!tfg_init_supports(j.kind, t->dtype) && !half) return TFG_ERR_DEVICE;
  int64_t n = tfg_shape_numel(&t->shape);
  tfg_parallel_for(pool, n, j.kind == TFG_INIT_FILL_CONST ? GRAIN_CONST : GRAIN_RANDOM, fill_chunk,
                   &j);
  return TFG_OK;
}

tfg_status tfg_cpu_init_fill(tfg_tensor *t, const tfg_attrs *a) { return fill(t, a, NULL); }

/* INIT: fills out per node->attrs, split over ctx->pool (the values are
 * the same as tfg_cpu_init_fill's whatever the split). */
TFG_CPU_KERNEL(tfg_cpu_init) {
  (void)in;
  tfg_status s = fill(out, &node->attrs, ctx->pool);
  if (s != TFG_OK)
    return tfg_kernel_fail(ctx, s, "%s() cannot fill a %s tensor on the CPU",
                           tfg_init_name(node->attrs.init), tfg_dtype_name(out->dtype));
  return TFG_OK;
}
