/* tests/unit/test_lexer.c: tokens, values, positions, newline rules and
 * lexical errors. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lang/lexer.h"
#include "parser.tab.h"
#include "tests/unit/unit.h"

typedef struct lexed {
  tfg_diag *d;
  tfg_arena a;
  tfg_lexer lx;
  tfg_token t[64];
  int n;
} lexed;

/* Lexes text to the end (at most 64 tokens, END included). */
static void lex(lexed *L, const char *text, size_t len) {
  L->d = tfg_diag_new();
  tfg_arena_init(&L->a);
  const tfg_source *s = tfg_diag_add_source(L->d, "t.tfg", text, len);
  tfg_lexer_init(&L->lx, s, L->d, &L->a);
  L->n = 0;
  do {
    tfg_lexer_next(&L->lx, &L->t[L->n]);
  } while (L->t[L->n++].kind != TFG_TOK_END && L->n < 64);
}

static void unlex(lexed *L) {
  tfg_lexer_free(&L->lx);
  tfg_arena_free(&L->a);
  tfg_diag_free(L->d);
}

static void expect_kinds(lexed *L, const int *kinds, int n) {
  ck_assert_int_eq(L->n, n);
  for (int i = 0; i < n; i++) ck_assert_int_eq(L->t[i].kind, kinds[i]);
}

#define LEX(L, s) lex(L, s, sizeof(s) - 1)

START_TEST(keywords_and_names) {
  lexed L;
  LEX(&L, "let letter = fn_ in input _x gpu cpu none");
  int k[] = {TFG_TOK_LET, TFG_TOK_IDENT, TFG_TOK_ASSIGN, TFG_TOK_IDENT, TFG_TOK_IN,
             TFG_TOK_INPUT, TFG_TOK_IDENT, TFG_TOK_GPU, TFG_TOK_CPU, TFG_TOK_NONE, TFG_TOK_END};
  expect_kinds(&L, k, 11);
  ck_assert_str_eq(L.t[1].s, "letter");
  ck_assert_str_eq(L.t[3].s, "fn_");
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 0);
  unlex(&L);
}
END_TEST

START_TEST(numbers_and_ranges) {
  lexed L;
  LEX(&L, "42 1.5 1e-3 2.5E+4 0..4 9223372036854775807 3e2");
  int k[] = {TFG_TOK_INT, TFG_TOK_FLOAT, TFG_TOK_FLOAT, TFG_TOK_FLOAT, TFG_TOK_INT,
             TFG_TOK_DOTDOT, TFG_TOK_INT, TFG_TOK_INT, TFG_TOK_FLOAT, TFG_TOK_END};
  expect_kinds(&L, k, 10);
  ck_assert_int_eq(L.t[0].i, 42);
  ck_assert_double_eq(L.t[1].f, 1.5);
  ck_assert_double_eq(L.t[2].f, 1e-3);
  ck_assert_double_eq(L.t[3].f, 25000.0);
  ck_assert_int_eq(L.t[4].i, 0);
  ck_assert_int_eq(L.t[6].i, 4);
  ck_assert_int_eq(L.t[7].i, INT64_MAX);
  ck_assert_double_eq(L.t[8].f, 300.0);
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 0);
  unlex(&L);
}
END_TEST

START_TEST(bad_numbers) {
  const char *bad[] = {"1.", ".5", "1e", "1e+", "0x10", "12abc", "9223372036854775808", "1e999",
                       "1.5e3x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lexed L;
    lex(&L, bad[i], strlen(bad[i]));
    ck_assert_msg(tfg_diag_error_count(L.d) == 1, "%s: %zu errors", bad[i],
                  tfg_diag_error_count(L.d));
    /* One number token (value 0) and the end: no cascade. */
    ck_assert_msg(L.n == 2, "%s: %d tokens", bad[i], L.n);
    unlex(&L);
  }
}
END_TEST

START_TEST(strings_decode_escapes) {
  lexed L;
  LEX(&L, "\"a\\\"b\\\\c\\nd\\te\" \"\" \"caf\xC3\xA9\"");
  ck_assert_int_eq(L.n, 4);
  ck_assert_int_eq(L.t[0].kind, TFG_TOK_STRING);
  ck_assert_str_eq(L.t[0].s, "a\"b\\c\nd\te");
  ck_assert_uint_eq(L.t[0].len, 9);
  ck_assert_str_eq(L.t[1].s, "");
  ck_assert_str_eq(L.t[2].s, "caf\xC3\xA9");
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 0);
  unlex(&L);
}
END_TEST

START_TEST(string_errors_recover) {
  lexed L;
  LEX(&L, "x = \"abc\nlet y = \"a\\qb\"\n\"end");
  /* unterminated (line 1), bad escape (line 2), unterminated at EOF (line 3) */
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 3);
  int k[] = {TFG_TOK_IDENT, TFG_TOK_ASSIGN, TFG_TOK_STRING, TFG_TOK_NEWLINE, TFG_TOK_LET,
             TFG_TOK_IDENT, TFG_TOK_ASSIGN, TFG_TOK_STRING, TFG_TOK_NEWLINE, TFG_TOK_STRING,
             TFG_TOK_END};
  expect_kinds(&L, k, 11);
  ck_assert_str_eq(L.t[2].s, "abc");
  ck_assert_str_eq(L.t[7].s, "ab");
  ck_assert_uint_eq(L.t[9].loc.line, 3);
  unlex(&L);
}
END_TEST

START_TEST(positions) {
  lexed L;
  LEX(&L, "let a = 1\n  b = [2,\n 3]\n");
  /* let a = 1 NL b = [ 2 , 3 ] NL END */
  ck_assert_int_eq(L.n, 14);
  ck_assert_uint_eq(L.t[0].loc.line, 1); ck_assert_uint_eq(L.t[0].loc.col, 1);
  ck_assert_uint_eq(L.t[0].loc.len, 3);
  ck_assert_uint_eq(L.t[3].loc.col, 9);
  ck_assert_int_eq(L.t[4].kind, TFG_TOK_NEWLINE);
  ck_assert_uint_eq(L.t[4].loc.line, 1); ck_assert_uint_eq(L.t[4].loc.col, 10);
  ck_assert_uint_eq(L.t[5].loc.line, 2); ck_assert_uint_eq(L.t[5].loc.col, 3);
  ck_assert(L.t[5].bol);
  ck_assert_int_eq(L.t[10].kind, TFG_TOK_INT); /* the newline inside [ ] is gone */
  ck_assert_uint_eq(L.t[10].loc.line, 3); ck_assert_uint_eq(L.t[10].loc.col, 2);
  ck_assert_int_eq(L.t[11].kind, TFG_TOK_RBRACKET);
  ck_assert_int_eq(L.t[11].i, 1); /* matched its '[' */
  ck_assert_int_eq(L.t[12].kind, TFG_TOK_NEWLINE);
  unlex(&L);
}
END_TEST

START_TEST(newlines_in_braces_inside_parens) {
  /* Newlines count inside { } even within ( ): the innermost bracket rules. */
  lexed L;
  LEX(&L, "(\n{\na\n}\n)");
  int k[] = {TFG_TOK_LPAREN, TFG_TOK_LBRACE, TFG_TOK_NEWLINE, TFG_TOK_IDENT, TFG_TOK_NEWLINE,
             TFG_TOK_RBRACE, TFG_TOK_RPAREN, TFG_TOK_END};
  expect_kinds(&L, k, 8);
  unlex(&L);
}
END_TEST

START_TEST(else_on_next_line) {
  lexed L;
  LEX(&L, "}\n  # why\n\nelse {\n}\nelsewhere");
  int k[] = {TFG_TOK_RBRACE, TFG_TOK_ELSE, TFG_TOK_LBRACE, TFG_TOK_NEWLINE, TFG_TOK_RBRACE,
             TFG_TOK_NEWLINE, TFG_TOK_IDENT, TFG_TOK_END};
  expect_kinds(&L, k, 8);
  ck_assert_uint_eq(L.t[1].loc.line, 4);
  ck_assert_int_eq(L.t[0].i, 0); /* a '}' with no '{' is reported unmatched */
  unlex(&L);
}
END_TEST

START_TEST(comments_and_crlf) {
  lexed L;
  LEX(&L, "a # c\xC3\xA9 ( [ \"\r\nb;c # end");
  int k[] = {TFG_TOK_IDENT, TFG_TOK_NEWLINE, TFG_TOK_IDENT, TFG_TOK_SEMI, TFG_TOK_IDENT,
             TFG_TOK_END};
  expect_kinds(&L, k, 6);
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 0);
  unlex(&L);
}
END_TEST

START_TEST(stray_bytes) {
  lexed L;
  /* '$', NUL, 0xFF, U+2212, a control character: five errors, tokens go on. */
  lex(&L, "a $ \0 \xFF \xE2\x88\x92 \x07 b", 15);
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 5);
  int k[] = {TFG_TOK_IDENT, TFG_TOK_IDENT, TFG_TOK_END};
  expect_kinds(&L, k, 3);
  ck_assert_str_eq(L.t[1].s, "b");
  unlex(&L);
}
END_TEST

START_TEST(nul_in_comment_and_bom) {
  lexed L;
  /* The NUL is reported; the rest of the comment stays a comment. */
  lex(&L, "a # see \"quote\0 more \"here\nb", 28);
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 1);
  int k[] = {TFG_TOK_IDENT, TFG_TOK_NEWLINE, TFG_TOK_IDENT, TFG_TOK_END};
  expect_kinds(&L, k, 4);
  unlex(&L);
  LEX(&L, "\xEF\xBB\xBFlet");
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 0);
  ck_assert_int_eq(L.t[0].kind, TFG_TOK_LET);
  unlex(&L);
}
END_TEST

START_TEST(messages_never_carry_control_bytes) {
  lexed L;
  LEX(&L, "x = \"a\\\x1b[2J\" \xE2\x80\xAE");
  char *errs = test_render(L.d, false);
  ck_assert_uint_eq(tfg_diag_error_count(L.d), 2);
  ck_assert_ptr_null(strchr(errs, '\x1b'));
  ck_assert_ptr_null(strstr(errs, "\xE2\x80\xAE"));
  ck_assert_ptr_nonnull(strstr(errs, "followed by byte 0x1B"));
  ck_assert_ptr_nonnull(strstr(errs, "unexpected character U+202E\n"));
  free(errs);
  unlex(&L);
}
END_TEST

START_TEST(blank_lines_are_linear) {
  /* A million blank and comment lines: the else look-ahead is shared. */
  size_t n = 1000000;
  char *text = malloc(3 * n + 8);
  for (size_t i = 0; i < n; i++) memcpy(text + 3 * i, "#c\n", 3);
  memcpy(text + 3 * n, "else", 5);
  lexed L;
  lex(&L, text, 3 * n + 4);
  ck_assert_int_eq(L.t[0].kind, TFG_TOK_ELSE);
  ck_assert_uint_eq(L.t[0].loc.line, n + 1);
  unlex(&L);
  free(text);
}
END_TEST

START_TEST(end_location) {
  lexed L;
  LEX(&L, "let a = 1\n\n\n");
  const tfg_token *end = &L.t[L.n - 1];
  ck_assert_int_eq(end->kind, TFG_TOK_END);
  ck_assert_uint_eq(end->loc.line, 1);
  ck_assert_uint_eq(end->loc.col, 10); /* right after the last text */
  unlex(&L);
}
END_TEST

START_TEST(error_limit_ends_input) {
  lexed L;
  LEX(&L, "$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$$ a");
  ck_assert_uint_eq(tfg_diag_error_count(L.d), TFG_DIAG_DEFAULT_LIMIT);
  ck_assert(tfg_diag_limit_reached(L.d));
  ck_assert_int_eq(L.t[0].kind, TFG_TOK_END); /* the name after them is never reached */
  unlex(&L);
}
END_TEST

Suite *suite_lexer(void) {
  Suite *s = suite_create("lexer");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, keywords_and_names);
  tcase_add_test(tc, numbers_and_ranges);
  tcase_add_test(tc, bad_numbers);
  tcase_add_test(tc, strings_decode_escapes);
  tcase_add_test(tc, string_errors_recover);
  tcase_add_test(tc, positions);
  tcase_add_test(tc, newlines_in_braces_inside_parens);
  tcase_add_test(tc, else_on_next_line);
  tcase_add_test(tc, comments_and_crlf);
  tcase_add_test(tc, stray_bytes);
  tcase_add_test(tc, end_location);
  tcase_add_test(tc, nul_in_comment_and_bom);
  tcase_add_test(tc, messages_never_carry_control_bytes);
  tcase_add_test(tc, blank_lines_are_linear);
  tcase_add_test(tc, error_limit_ends_input);
  suite_add_tcase(s, tc);
  return s;
}
