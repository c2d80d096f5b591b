/* tests/unit/test_base.c: arena, strbuf, utf8, status. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "tests/unit/unit.h"

START_TEST(arena_alloc_zeroed_aligned) {
  tfg_arena a;
  tfg_arena_init(&a);
  for (int i = 1; i < 5000; i += 7) {
    unsigned char *p = tfg_arena_alloc(&a, (size_t)i);
    ck_assert_uint_eq((uintptr_t)p % _Alignof(max_align_t), 0);
    /* One check per block, not per byte: Check's assertions are costly
     * under ASan, and this loop reads 1.7 MB. */
    int nonzero = 0;
    for (int j = 0; j < i; j++) nonzero |= p[j];
    ck_assert_int_eq(nonzero, 0);
    memset(p, 0xAB, (size_t)i);
  }
  /* Bigger than any block so far: gets a block of its own. */
  char *big = tfg_arena_alloc(&a, 1u << 20);
  big[(1u << 20) - 1] = 1;
  char *s = tfg_arena_strndup(&a, "hello world", 5);
  ck_assert_str_eq(s, "hello");
  tfg_arena_free(&a);
  ck_assert_ptr_null(a.head);
}
END_TEST

START_TEST(strbuf_printf_grows) {
  tfg_strbuf b = {0};
  for (int i = 0; i < 1000; i++) tfg_strbuf_printf(&b, "%d,", i);
  ck_assert_uint_eq(b.len, strlen(b.data));
  ck_assert(strncmp(b.data, "0,1,2,3,", 8) == 0);
  ck_assert(strcmp(b.data + b.len - 4, "999,") == 0);
  tfg_strbuf_clear(&b);
  ck_assert_str_eq(b.data, "");
  tfg_strbuf_putn(&b, "ab\0cd", 5);
  ck_assert_uint_eq(b.len, 5);
  char *t = tfg_strbuf_take(&b);
  ck_assert_ptr_null(b.data);
  ck_assert_int_eq(memcmp(t, "ab\0cd", 6), 0);
  free(t);
  t = tfg_strbuf_take(&b); /* an empty buffer still gives a string */
  ck_assert_str_eq(t, "");
  free(t);
}
END_TEST

static int dec(const char *s, size_t n, uint32_t *cp) {
  return tfg_utf8_decode((const unsigned char *)s, n, cp);
}

START_TEST(utf8_valid) {
  uint32_t cp;
  ck_assert_int_eq(dec("A", 1, &cp), 1); ck_assert_uint_eq(cp, 0x41);
  ck_assert_int_eq(dec("\xC3\xA9", 2, &cp), 2); ck_assert_uint_eq(cp, 0xE9);
  ck_assert_int_eq(dec("\xE2\x88\x92", 3, &cp), 3); ck_assert_uint_eq(cp, 0x2212);
  ck_assert_int_eq(dec("\xF0\x9F\x98\x80", 4, &cp), 4); ck_assert_uint_eq(cp, 0x1F600);
  ck_assert_int_eq(dec("\xF4\x8F\xBF\xBF", 4, &cp), 4); ck_assert_uint_eq(cp, 0x10FFFF);
}
END_TEST

START_TEST(utf8_invalid) {
  uint32_t cp;
  ck_assert_int_eq(dec("\x80", 1, &cp), 0);             /* lone continuation */
  ck_assert_int_eq(dec("\xC0\xAF", 2, &cp), 0);         /* overlong '/' */
  ck_assert_int_eq(dec("\xE0\x80\xAF", 3, &cp), 0);     /* overlong, 3 bytes */
  ck_assert_int_eq(dec("\xED\xA0\x80", 3, &cp), 0);     /* surrogate U+D800 */
  ck_assert_int_eq(dec("\xF4\x90\x80\x80", 4, &cp), 0); /* above U+10FFFF */
  ck_assert_int_eq(dec("\xE2\x88", 2, &cp), 0);         /* truncated */
  ck_assert_int_eq(dec("\xE2\x41\x92", 3, &cp), 0);     /* bad continuation */
  ck_assert_int_eq(dec("\xFF", 1, &cp), 0);
  ck_assert_uint_eq(tfg_utf8_width("a\xE2\x88\x92" "b\xFF", 6), 4);
}
END_TEST

START_TEST(status_exit_codes) {
  ck_assert_int_eq(tfg_status_exit_code(TFG_OK), 0);
  ck_assert_int_eq(tfg_status_exit_code(TFG_ERR_SYNTAX), 1);
  ck_assert_int_eq(tfg_status_exit_code(TFG_ERR_SHAPE), 1);
  ck_assert_int_eq(tfg_status_exit_code(TFG_ERR_USAGE), 2);
  ck_assert_int_eq(tfg_status_exit_code(TFG_ERR_OOM), 3);
  ck_assert_int_eq(tfg_status_exit_code(TFG_ERR_IO), 3);
  ck_assert_str_eq(tfg_status_str(TFG_ERR_SYNTAX), "syntax error");
  /* Build-time arithmetic (division by zero, overflow): a program error. */
  ck_assert_int_eq(tfg_status_exit_code(TFG_ERR_ARITH), 1);
  ck_assert_str_eq(tfg_status_str(TFG_ERR_ARITH), "arithmetic error");
}
END_TEST

Suite *suite_base(void) {
  Suite *s = suite_create("base");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, arena_alloc_zeroed_aligned);
  tcase_add_test(tc, strbuf_printf_grows);
  tcase_add_test(tc, utf8_valid);
  tcase_add_test(tc, utf8_invalid);
  tcase_add_test(tc, status_exit_codes);
  suite_add_tcase(s, tc);
  return s;
}
