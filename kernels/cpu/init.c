/* kernels/cpu/init.c: constants and initializers (CONST, INIT, and the
 * fill behind PARAM values).
 *
 * Random initializers draw element i from base/rng.h at counter i of
 * stream attrs.seed, computed in double and rounded once to the tensor's
 * dtype. Because every element is a pure function of (seed, i), the
 * values do not depend on how the fill is split over threads, and a
 * param initialized on the CPU equals the same param initialized by a
 * GPU kernel using the same generator. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

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

/* fan_in and fan_out of a weight of shape s, as cpu.h defines them (the
 * PyTorch convention for conv weights [out, in, kh, kw]; matmul weights
 * here are [in, out] because the layer computes matmul(x, w)). */
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

typedef enum fill_kind { FILL_CONST, FILL_NORMAL, FILL_UNIFORM } fill_kind;

/* Element i is c for FILL_CONST, p + q * N(0,1) for FILL_NORMAL and
 * p + (q - p) * U[0,1) for FILL_UNIFORM. */
typedef struct fill_job {
  fill_kind kind;
  tfg_dtype dt;
  void *y;
  double c, p, q;
  uint64_t seed;
} fill_job;

/* Float to integer as cast does: truncate toward zero, NaN to 0,
 * saturate out of range (full(1e10) on i32 must not be undefined).
 * (double)INT64_MAX rounds up to 2^63, the first double out of range, so
 * the >= test is exact for i64 too. */
static int64_t to_int(double v, int64_t lo, int64_t hi) {
  if (v != v) return 0;
  if (v >= (double)hi) return hi;
  if (v <= (double)lo) return lo;
  return (int64_t)v;
}

static void fill_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const fill_job *j = arg;
  if (j->kind == FILL_CONST) {
    double c = j->c;
    switch (j->dt) {
    case TFG_DTYPE_F32: for (int64_t i = lo; i < hi; i++) ((float *)j->y)[i] = (float)c; break;
    case TFG_DTYPE_F64: for (int64_t i = lo; i < hi; i++) ((double *)j->y)[i] = c; break;
    case TFG_DTYPE_I32: {
      int32_t v = (int32_t)to_int(c, INT32_MIN, INT32_MAX);
      for (int64_t i = lo; i < hi; i++) ((int32_t *)j->y)[i] = v;
      break;
    }
    case TFG_DTYPE_I64: {
      int64_t v = to_int(c, INT64_MIN, INT64_MAX);
      for (int64_t i = lo; i < hi; i++) ((int64_t *)j->y)[i] = v;
      break;
    }
    case TFG_DTYPE_BOOL: memset((uint8_t *)j->y + lo, c != 0, (size_t)(hi - lo)); break;
    default: break;
    }
    return;
  }
  for (int64_t i = lo; i < hi; i++) {
    double v = j->kind == FILL_NORMAL
                   ? j->p + j->q * tfg_rng_normal(j->seed, (uint64_t)i)
                   : j->p + (j->q - j->p) * tfg_rng_uniform(j->seed, (uint64_t)i);
    if (j->dt == TFG_DTYPE_F32) ((float *)j->y)[i] = (float)v;
    else ((double *)j->y)[i] = v;
  }
}

/* Sets up the fill of t per a; TFG_ERR_DEVICE when the initializer does
 * not apply to t's dtype (random ones need f32/f64; f16/bf16 are not
 * filled on the CPU). */
static tfg_status fill_plan(const tfg_tensor *t, const tfg_attrs *a, fill_job *j) {
  *j = (fill_job){.kind = FILL_CONST, .dt = t->dtype, .y = t->data, .seed = a->seed};
  bool is_float = t->dtype == TFG_DTYPE_F32 || t->dtype == TFG_DTYPE_F64;
  bool is_exact = t->dtype == TFG_DTYPE_I32 || t->dtype == TFG_DTYPE_I64 ||
                  t->dtype == TFG_DTYPE_BOOL;
  double fan_in, fan_out;
  fans(&t->shape, &fan_in, &fan_out);
  switch (a->init) {
  case TFG_INIT_ZEROS: j->c = 0; return is_float || is_exact ? TFG_OK : TFG_ERR_DEVICE;
  case TFG_INIT_ONES: j->c = 1; return is_float || is_exact ? TFG_OK : TFG_ERR_DEVICE;
  case TFG_INIT_FULL: j->c = a->value; return is_float || is_exact ? TFG_OK : TFG_ERR_DEVICE;
  case TFG_INIT_NORMAL:
    j->kind = FILL_NORMAL;
    j->p = a->a;
    j->q = a->b;
    break;
  case TFG_INIT_UNIFORM:
    j->kind = FILL_UNIFORM;
    j->p = a->a;
    j->q = a->b;
    break;
  case TFG_INIT_GLOROT: {
    double l = sqrt(6.0 / (fan_in + fan_out));
    j->kind = FILL_UNIFORM;
    j->p = -l;
    j->q = l;
    break;
  }
  case TFG_INIT_HE:
    j->kind = FILL_NORMAL;
    j->p = 0;
    j->q = sqrt(2.0 / fan_in);
    break;
  default:
    return TFG_ERR_DEVICE;
  }
  return is_float ? TFG_OK : TFG_ERR_DEVICE;
}

static tfg_status fill(tfg_tensor *t, const tfg_attrs *a, tfg_pool *pool) {
  fill_job j;
  tfg_status s = fill_plan(t, a, &j);
  if (s != TFG_OK) return s;
  int64_t n = tfg_shape_numel(&t->shape);
  tfg_parallel_for(pool, n, j.kind == FILL_CONST ? GRAIN_CONST : GRAIN_RANDOM, fill_chunk, &j);
  return TFG_OK;
}

tfg_status tfg_cpu_init_fill(tfg_tensor *t, const tfg_attrs *a) { return fill(t, a, NULL); }

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

/* INIT: fills out per node->attrs, split over ctx->pool (the values are
 * the same as tfg_cpu_init_fill's whatever the split). */
TFG_CPU_KERNEL(tfg_cpu_init) {
  (void)in;
  tfg_status s = fill(out, &node->attrs, ctx->pool);
  if (s != TFG_OK)
    return tfg_kernel_fail(ctx, s, "%s() cannot fill a %s tensor on the CPU",
                           init_name(node->attrs.init), tfg_dtype_name(out->dtype));
  return TFG_OK;
}
