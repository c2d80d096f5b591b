/* tests/unit/test_format.c: NumPy-style printing of tensors. Expected
 * strings are what NumPy 1.24 prints for the same arrays (with tfg's
 * true/false for bools), checked by hand. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/format.h"
#include "tests/unit/unit.h"

static char *fmt(void *data, tfg_dtype dt, tfg_shape s, bool all) {
  tfg_tensor t = {data, dt, s};
  tfg_strbuf b = {0};
  tfg_format_tensor(&b, &t, all);
  return tfg_strbuf_take(&b);
}

#define FMT_EQ(data, dt, shape, all, want)             \
  do {                                                 \
    char *got_ = fmt(data, dt, shape, all);            \
    ck_assert_str_eq(got_, want);                      \
    free(got_);                                        \
  } while (0)

START_TEST(floats) {
  float a[] = {1, -2, 3, -4, 5, -6};
  FMT_EQ(a, TFG_DTYPE_F32, ((tfg_shape){2, {2, 3}}), false, "[[ 1. -2.  3.]\n [-4.  5. -6.]]");
  float b[] = {1.5f, 2.25f, 3};
  FMT_EQ(b, TFG_DTYPE_F32, ((tfg_shape){1, {3}}), false, "[1.5  2.25 3.  ]");
  float c[] = {0.1f, 0.2f};
  FMT_EQ(c, TFG_DTYPE_F32, ((tfg_shape){1, {2}}), false, "[0.1 0.2]");  /* f32 shortest, not 0.100000001 */
  double d[] = {0.1, 1.0 / 3};
  FMT_EQ(d, TFG_DTYPE_F64, ((tfg_shape){1, {2}}), false, "[0.1        0.33333333]");
  double e[] = {1e-5, 1.0};
  FMT_EQ(e, TFG_DTYPE_F64, ((tfg_shape){1, {2}}), false, "[1.e-05 1.e+00]");
  double f[] = {NAN, INFINITY, -1.5};
  FMT_EQ(f, TFG_DTYPE_F64, ((tfg_shape){1, {3}}), false, "[ nan  inf -1.5]");
  float s = 3.25f;
  FMT_EQ(&s, TFG_DTYPE_F32, ((tfg_shape){0, {0}}), false, "3.25");
}
END_TEST

START_TEST(ints_bools_empty) {
  int32_t i[] = {1, -20, 300};
  FMT_EQ(i, TFG_DTYPE_I32, ((tfg_shape){1, {3}}), false, "[  1 -20 300]");
  int64_t l[] = {7};
  FMT_EQ(l, TFG_DTYPE_I64, ((tfg_shape){2, {1, 1}}), false, "[[7]]");
  uint8_t b[] = {1, 0};
  FMT_EQ(b, TFG_DTYPE_BOOL, ((tfg_shape){1, {2}}), false, "[ true false]");
  FMT_EQ(l, TFG_DTYPE_I64, ((tfg_shape){1, {0}}), false, "[]");
}
END_TEST

START_TEST(summarized) {
  int32_t v[100];
  for (int k = 0; k < 100; k++) v[k] = k;
  FMT_EQ(v, TFG_DTYPE_I32, ((tfg_shape){1, {10}}), false, "[0 1 2 ... 7 8 9]");
  FMT_EQ(v, TFG_DTYPE_I32, ((tfg_shape){1, {7}}), true, "[0 1 2 3 4 5 6]");
  FMT_EQ(v, TFG_DTYPE_I32, ((tfg_shape){1, {6}}), false, "[0 1 2 3 4 5]");
  FMT_EQ(v, TFG_DTYPE_I32, ((tfg_shape){2, {8, 2}}), false,
         "[[ 0  1]\n [ 2  3]\n [ 4  5]\n ...\n [10 11]\n [12 13]\n [14 15]]");
}
END_TEST

START_TEST(rank3_blank_lines) {
  int32_t v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  FMT_EQ(v, TFG_DTYPE_I32, ((tfg_shape){3, {2, 2, 2}}), false, "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]");
}
END_TEST

START_TEST(half_precision) {
  uint16_t h[] = {0x3C00, 0xC000, 0x0001, 0x7C00};
  ck_assert(tfg_half_to_float(h[0]) == 1.0f);
  ck_assert(tfg_half_to_float(h[1]) == -2.0f);
  ck_assert(tfg_half_to_float(h[2]) == ldexpf(1, -24));
  ck_assert(isinf(tfg_half_to_float(h[3])));
  ck_assert(tfg_bf16_to_float(0x3F80) == 1.0f);
}
END_TEST

Suite *suite_format(void) {
  Suite *s = suite_create("format");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, floats);
  tcase_add_test(tc, ints_bools_empty);
  tcase_add_test(tc, summarized);
  tcase_add_test(tc, rank3_blank_lines);
  tcase_add_test(tc, half_precision);
  suite_add_tcase(s, tc);
  return s;
}
