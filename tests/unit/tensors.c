/* tests/unit/tensors.c: the helpers of tests/unit/tensors.h. */
#include "tests/unit/tensors.h"

#include <check.h>
#include <stdarg.h>
#include <stdlib.h>

tfg_shape shp(int rank, ...) {
  tfg_shape s = {.rank = rank};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) s.dim[i] = va_arg(ap, int);
  va_end(ap);
  return s;
}

tfg_tensor tnew(tfg_dtype dt, tfg_shape s) {
  int64_t n = tfg_shape_numel(&s);
  tfg_tensor t = {.dtype = dt, .shape = s};
  t.data = calloc((size_t)(n > 0 ? n : 1), tfg_dtype_size(dt));
  ck_assert_ptr_nonnull(t.data);
  return t;
}

int64_t numel(const tfg_tensor *t) { return tfg_shape_numel(&t->shape); }

double get(const tfg_tensor *t, int64_t i) {
  switch (t->dtype) {
  case TFG_DTYPE_F32: return ((const float *)t->data)[i];
  case TFG_DTYPE_F64: return ((const double *)t->data)[i];
  case TFG_DTYPE_I32: return ((const int32_t *)t->data)[i];
  case TFG_DTYPE_I64: return (double)((const int64_t *)t->data)[i];
  default: ck_abort_msg("get: unexpected dtype"); return 0;
  }
}

void set(tfg_tensor *t, int64_t i, double v) {
  switch (t->dtype) {
  case TFG_DTYPE_F32: ((float *)t->data)[i] = (float)v; break;
  case TFG_DTYPE_F64: ((double *)t->data)[i] = v; break;
  case TFG_DTYPE_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
  case TFG_DTYPE_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
  default: ck_abort_msg("set: unexpected dtype");
  }
}

void set_all(tfg_tensor *t, const double *v) {
  for (int64_t i = 0; i < numel(t); i++) set(t, i, v[i]);
}

void free_all(tfg_tensor *t, int n) {
  for (int i = 0; i < n; i++) free(t[i].data);
}


const tfg_dtype FLOATS[2] = {TFG_DTYPE_F32, TFG_DTYPE_F64};

tfg_pool *test_pool;

void test_pool_make(void) { test_pool = tfg_pool_new(4); }

void test_pool_free(void) {
  tfg_pool_free(test_pool);
  test_pool = NULL;
}
