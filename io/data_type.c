/* io/data_type.c: element types of data files and their conversion to
 * tensor dtypes (io/data_type.h). */
#include "io/data_type.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "base/assert.h"
#include "base/strbuf.h"

/* One row per type: its name, its size, and the dtype that holds it as
 * it is (a conversion to that dtype is a copy), or -1. */
static const struct {
  const char *name;
  size_t size;
  int same;
} data_types[] = {
    [TFG_DATA_F32] = {"f32", 4, TFG_DTYPE_F32}, [TFG_DATA_F64] = {"f64", 8, TFG_DTYPE_F64},
    [TFG_DATA_I32] = {"i32", 4, TFG_DTYPE_I32}, [TFG_DATA_I64] = {"i64", 8, TFG_DTYPE_I64},
    [TFG_DATA_U8] = {"u8", 1, -1},              [TFG_DATA_BOOL] = {"bool", 1, TFG_DTYPE_BOOL},
};
#define DATA_NTYPES (sizeof data_types / sizeof data_types[0])

const char *tfg_data_type_name(tfg_data_type t) {
  return (unsigned)t < DATA_NTYPES ? data_types[t].name : "?";
}

size_t tfg_data_type_size(tfg_data_type t) {
  TFG_ASSERT((unsigned)t < DATA_NTYPES && "bad tfg_data_type");
  return data_types[t].size;
}

bool tfg_data_convertible(tfg_data_type t, tfg_dtype dt) {
  if (tfg_dtype_is_float(dt)) return true; /* every data type is numeric or bool */
  if (tfg_dtype_is_int(dt)) return t != TFG_DATA_F32 && t != TFG_DATA_F64;
  if (dt == TFG_DTYPE_BOOL) return t == TFG_DATA_BOOL;
  return false;
}

/* ---- range -------------------------------------------------------------- */

/* The index of the first of n elements of type t at src that dtype dt
 * cannot hold, or -1. Only i64 into i32 can fail: u8, bool and i32 fit
 * every integer dtype, and floats into a narrower float round (or go to
 * inf) as NumPy's astype does. */
static int64_t first_out_of_range(tfg_data_type t, const void *src, int64_t n, tfg_dtype dt) {
  if (t != TFG_DATA_I64 || dt != TFG_DTYPE_I32) return -1;
  const int64_t *v = src;
  for (int64_t i = 0; i < n; i++)
    if (v[i] < INT32_MIN || v[i] > INT32_MAX) return i;
  return -1;
}

tfg_status tfg_data_check_values(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type t,
                                 const tfg_shape *shape, const void *data, tfg_dtype dt) {
  TFG_ASSERT(d && path && shape && data);
  int64_t i = first_out_of_range(t, data, tfg_shape_numel(shape), dt);
  if (i < 0) return TFG_OK;
  int64_t idx[TFG_MAX_RANK], rest = i; /* i as a NumPy index into shape */
  for (int k = shape->rank - 1; k >= 0; k--) {
    idx[k] = rest % shape->dim[k];
    rest /= shape->dim[k];
  }
  tfg_strbuf at = {0};
  for (int k = 0; k < shape->rank; k++) tfg_strbuf_printf(&at, "%s%lld", k ? ", " : "", (long long)idx[k]);
  tfg_diag_error(d, loc, "'%s': the value at [%s] is %lld, out of range for %s (%d to %d)", path, at.data ? at.data : "",
                 (long long)((const int64_t *)data)[i], tfg_dtype_name(dt), INT32_MIN, INT32_MAX);
  tfg_diag_help(d, "tfg neither wraps nor clamps such values: fix the data, or declare the input i64");
  tfg_strbuf_free(&at);
  return TFG_ERR_SHAPE;
}

/* ---- conversion --------------------------------------------------------- */

/* The bits of x rounded to nearest even in a 16-bit float with mant
 * mantissa bits and exponent bias bias (f16: 10, 15; bf16: 7, 127),
 * straight from the double so there is one rounding only. */
static uint16_t half_bits(double x, int mant, int bias) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  uint16_t inf = (uint16_t)((2 * bias + 1) << mant);
  if (isnan(x)) return (uint16_t)(sign | inf | (1u << (mant - 1)));
  double a = fabs(x);
  /* At or past the midpoint between the largest finite value and 2^(bias+1). */
  if (a >= ldexp(2.0 - ldexp(1.0, -(mant + 1)), bias)) return sign | inf;
  if (a == 0) return sign;
  int k;
  frexp(a, &k);
  int e = k - 1; /* a in [2^e, 2^(e+1)) */
  if (e < 1 - bias) /* subnormal: count units of the smallest subnormal */
    return (uint16_t)(sign | (uint16_t)rint(ldexp(a, bias - 1 + mant)));
  /* r in [2^mant, 2^(mant+1)]; a carry into the exponent is the right answer. */
  int64_t r = (int64_t)rint(ldexp(a, mant - e));
  return (uint16_t)(sign | (uint16_t)(((int64_t)(e + bias) << mant) + r - ((int64_t)1 << mant)));
}

static int32_t sat_i32(int64_t v) {
  return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

/* One loop per (source, destination) pair: EXPR converts v of type ST. */
#define DATA_LOOP(ST, DT, EXPR)                     \
  do {                                              \
    const ST *s_ = src;                             \
    DT *o_ = dst;                                   \
    for (int64_t i_ = 0; i_ < n; i_++) {            \
      ST v = s_[i_];                                \
      o_[i_] = (EXPR);                              \
    }                                               \
  } while (0)

#define DATA_FROM_ANY(DT, EXPR)                                      \
  switch (t) {                                                      \
  case TFG_DATA_F32: DATA_LOOP(float, DT, EXPR); break;             \
  case TFG_DATA_F64: DATA_LOOP(double, DT, EXPR); break;            \
  case TFG_DATA_I32: DATA_LOOP(int32_t, DT, EXPR); break;           \
  case TFG_DATA_I64: DATA_LOOP(int64_t, DT, EXPR); break;           \
  case TFG_DATA_U8: case TFG_DATA_BOOL: DATA_LOOP(uint8_t, DT, EXPR); break; \
  }

void tfg_data_convert(tfg_data_type t, const void *src, tfg_dtype dt, void *dst, int64_t n) {
  if (data_types[t].same == (int)dt) {
    memcpy(dst, src, (size_t)n * tfg_data_type_size(t));
    return;
  }
  switch (dt) {
  case TFG_DTYPE_F32: DATA_FROM_ANY(float, (float)v); break;
  case TFG_DTYPE_F64: DATA_FROM_ANY(double, (double)v); break;
  case TFG_DTYPE_F16: DATA_FROM_ANY(uint16_t, half_bits((double)v, 10, 15)); break;
  case TFG_DTYPE_BF16: DATA_FROM_ANY(uint16_t, half_bits((double)v, 7, 127)); break;
  case TFG_DTYPE_I32: DATA_FROM_ANY(int32_t, sat_i32((int64_t)v)); break;
  case TFG_DTYPE_I64: DATA_FROM_ANY(int64_t, (int64_t)v); break;
  case TFG_DTYPE_BOOL: DATA_FROM_ANY(uint8_t, (uint8_t)(v != 0)); break;
  case TFG_DTYPE_COUNT: TFG_ASSERT(!"bad dtype"); break;
  }
}

