/* tests/unit/test_diag.c: located diagnostics and their rendering. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/diag.h"
#include "tests/unit/unit.h"

/* Renders d and its error count. */
static char *render(tfg_diag *d) { return test_render(d, true); }

START_TEST(positions_from_offsets) {
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source(d, "a.tfg", "ab\ncd\n\nx", 8);
  ck_assert_uint_eq(s->nlines, 4);
  uint32_t line, col;
  tfg_source_position(s, 0, &line, &col); ck_assert_uint_eq(line, 1); ck_assert_uint_eq(col, 1);
  tfg_source_position(s, 2, &line, &col); ck_assert_uint_eq(line, 1); ck_assert_uint_eq(col, 3);
  tfg_source_position(s, 3, &line, &col); ck_assert_uint_eq(line, 2); ck_assert_uint_eq(col, 1);
  tfg_source_position(s, 6, &line, &col); ck_assert_uint_eq(line, 3); ck_assert_uint_eq(col, 1);
  tfg_source_position(s, 7, &line, &col); ck_assert_uint_eq(line, 4); ck_assert_uint_eq(col, 1);
  tfg_source_position(s, 99, &line, &col); ck_assert_uint_eq(line, 4); ck_assert_uint_eq(col, 2);
  tfg_diag_free(d);
}
END_TEST

START_TEST(render_caret_under_span) {
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source(d, "m.tfg", "let x = foo(1)\n", 15);
  tfg_loc l = tfg_source_loc(s, 8, 3);
  ck_assert(tfg_diag_error(d, &l, "unknown name `%s`", "foo"));
  tfg_diag_help(d, "did you mean `%s`?", "for");
  char *out = render(d);
  ck_assert_str_eq(out, "m.tfg:1:9: error: unknown name `foo`\n"
                        " 1 | let x = foo(1)\n"
                        "   |         ^~~\n"
                        "help: did you mean `for`?\n"
                        "1 error\n");
  free(out);
  tfg_diag_free(d);
}
END_TEST

START_TEST(render_display_columns_and_tabs) {
  /* "é" is two bytes but one column; a tab is kept so the caret aligns. */
  tfg_diag *d = tfg_diag_new();
  const char *text = "\tlet \xC3\xA9 = 1\n";
  const tfg_source *s = tfg_diag_add_source(d, "u.tfg", text, strlen(text));
  tfg_loc l = tfg_source_loc(s, 8, 1); /* the '=' */
  ck_assert_uint_eq(l.col, 9);
  ck_assert_uint_eq(tfg_loc_display_col(&l), 8);
  tfg_diag_error(d, &l, "x");
  char *out = render(d);
  ck_assert_str_eq(out, "u.tfg:1:8: error: x\n"
                        " 1 | \tlet \xC3\xA9 = 1\n"
                        "   | \t      ^\n"
                        "1 error\n");
  free(out);
  tfg_diag_free(d);
}
END_TEST

START_TEST(render_note_and_unlocated) {
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source(d, "n.tfg", "f(\n1\n", 5);
  tfg_loc at = tfg_source_loc(s, 4, 0), open = tfg_source_loc(s, 1, 1);
  tfg_diag_error(d, &at, "expected ')'");
  tfg_diag_note(d, &open, "'(' opened here");
  tfg_diag_error(d, NULL, "cannot open '%s'", "x.tfg");
  char *out = render(d);
  ck_assert_str_eq(out, "n.tfg:2:2: error: expected ')'\n"
                        " 2 | 1\n"
                        "   |  ^\n"
                        "n.tfg:1:2: note: '(' opened here\n"
                        " 1 | f(\n"
                        "   |  ^\n"
                        "tfg: error: cannot open 'x.tfg'\n"
                        "2 errors\n");
  free(out);
  tfg_diag_free(d);
}
END_TEST

START_TEST(render_long_line_window) {
  /* A 1 MB line prints as a short excerpt around the span. */
  size_t n = 1u << 20;
  char *text = malloc(n + 1);
  memset(text, 'a', n);
  text[n] = '\0';
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source(d, "big.tfg", text, n);
  tfg_loc l = tfg_source_loc(s, 500000, 3);
  tfg_diag_error(d, &l, "here");
  char *out = render(d);
  ck_assert_uint_lt(strlen(out), 400);
  ck_assert_ptr_nonnull(strstr(out, "big.tfg:1:500001: error: here\n"));
  ck_assert_ptr_nonnull(strstr(out, "| ...aaaa"));
  ck_assert_ptr_nonnull(strstr(out, "aaa...\n"));
  /* The caret sits under the span: 3 + 40 columns after "| ". */
  const char *caret = strstr(out, "^~~\n");
  ck_assert_ptr_nonnull(caret);
  const char *bar = caret;
  while (bar[-1] != '|') bar--;
  ck_assert_int_eq(caret - bar, 1 + 3 + 40);
  free(out);
  free(text);
  tfg_diag_free(d);
}
END_TEST

START_TEST(control_bytes_rendered_safely) {
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source(d, "c.tfg", "a\0b\xFF\x1b[31m\n", 9);
  tfg_loc l = tfg_source_loc(s, 1, 1);
  tfg_diag_error(d, &l, "unexpected NUL byte");
  char *out = render(d);
  ck_assert_ptr_nonnull(strstr(out, " 1 | a?b??[31m\n"));
  ck_assert_ptr_null(strchr(out, '\x1b'));
  free(out);
  tfg_diag_free(d);
}
END_TEST

START_TEST(error_limit_drops_and_notes) {
  tfg_diag *d = tfg_diag_new();
  tfg_diag_set_limit(d, 2);
  ck_assert(tfg_diag_error(d, NULL, "one"));
  ck_assert(tfg_diag_error(d, NULL, "two"));
  ck_assert(!tfg_diag_limit_reached(d));
  ck_assert(!tfg_diag_error(d, NULL, "three"));
  tfg_diag_help(d, "dropped with its error");
  ck_assert(tfg_diag_limit_reached(d));
  ck_assert_uint_eq(tfg_diag_error_count(d), 2);
  char *out = render(d);
  ck_assert_str_eq(out, "tfg: error: one\ntfg: error: two\n"
                        "tfg: note: too many errors; stopped after 2\n2 errors\n");
  free(out);
  tfg_diag_clear(d);
  ck_assert_uint_eq(tfg_diag_error_count(d), 0);
  ck_assert(!tfg_diag_limit_reached(d));
  tfg_diag_free(d);
}
END_TEST

START_TEST(render_is_incremental) {
  /* The REPL prints per input: a second render prints only what is new. */
  tfg_diag *d = tfg_diag_new();
  tfg_diag_error(d, NULL, "first");
  char *a = render(d);
  tfg_diag_warning(d, NULL, "second");
  char *b = render(d);
  ck_assert_str_eq(a, "tfg: error: first\n1 error\n");
  ck_assert_str_eq(b, "tfg: warning: second\n1 error\n1 warning\n");
  free(a);
  free(b);
  tfg_diag_free(d);
}
END_TEST

START_TEST(load_missing_file) {
  tfg_diag *d = tfg_diag_new();
  ck_assert_ptr_null(tfg_diag_load(d, "/nonexistent/dir/x.tfg"));
  ck_assert_uint_eq(tfg_diag_error_count(d), 1);
  char *out = render(d);
  ck_assert_str_eq(out, "tfg: error: cannot open '/nonexistent/dir/x.tfg': No such file or directory\n"
                        "1 error\n");
  free(out);
  tfg_diag_free(d);
}
END_TEST

START_TEST(line_numbers_continue_across_sources) {
  /* The REPL's inputs: each its own source, numbered on from the last. */
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source_at(d, "<stdin>", "a = 1\nb = \tq\n", 13, 9);
  tfg_loc l = tfg_source_loc(s, 11, 1);
  ck_assert_uint_eq(l.line, 11);
  ck_assert_uint_eq(l.col, 6);
  tfg_diag_error(d, &l, "unknown name 'q'");
  char *out = render(d);
  ck_assert_str_eq(out, "<stdin>:11:6: error: unknown name 'q'\n"
                        " 11 | b = \tq\n"
                        "    |     \t^\n"
                        "1 error\n");
  free(out);
  tfg_diag_free(d);
}
END_TEST

/* A long name echoed in a message is cut to TFG_DIAG_WORD_MAX bytes and
 * "..."; shorter names and other text are kept whole (issue 13). */
START_TEST(long_names_cut_in_messages) {
  tfg_diag *d = tfg_diag_new();
  char name[200], want[200];
  memset(name, 'a', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  snprintf(want, sizeof want, "tfg: error: unknown name '%.*s...' or 'b_c'\n1 error\n", TFG_DIAG_WORD_MAX, name);
  tfg_diag_error(d, NULL, "unknown name '%s' or 'b_c'", name);
  char *out = render(d);
  ck_assert_str_eq(out, want);
  free(out);
  tfg_diag_clear(d);
  name[TFG_DIAG_WORD_MAX] = '\0'; /* exactly the limit: whole */
  tfg_diag_note(d, NULL, "x");     /* (dropped: no error yet) */
  tfg_diag_error(d, NULL, "%s", name);
  out = render(d);
  ck_assert_uint_eq(strlen(out), strlen("tfg: error: \n1 error\n") + TFG_DIAG_WORD_MAX);
  free(out);
  tfg_diag_free(d);
}
END_TEST

/* An import is read without blocking and only from a regular file: a
 * FIFO or a directory is a located error at once (issue 13). */
START_TEST(load_file_refuses_what_is_not_a_file) {
  char dir[] = "/tmp/tfg-diag-XXXXXX", fifo[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/f.tfg", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  tfg_diag *d = tfg_diag_new();
  const tfg_source *s = tfg_diag_add_source(d, "m.tfg", "import \"f.tfg\"\n", 16);
  tfg_loc at = tfg_source_loc(s, 0, 15);
  ck_assert_ptr_null(tfg_diag_load_file(d, fifo, "f.tfg", &at, NULL));
  ck_assert_ptr_null(tfg_diag_load_file(d, dir, "lib", &at, NULL));
  char *out = render(d);
  ck_assert_str_eq(out, "m.tfg:1:1: error: cannot open 'f.tfg': it is a FIFO (named pipe), not a regular file\n"
                        " 1 | import \"f.tfg\"\n"
                        "   | ^~~~~~~~~~~~~~\n"
                        "m.tfg:1:1: error: cannot open 'lib': Is a directory\n"
                        " 1 | import \"f.tfg\"\n"
                        "   | ^~~~~~~~~~~~~~\n"
                        "2 errors\n");
  free(out);
  /* A regular file reads, and two paths of it have one identity. */
  char file[64], other[80];
  snprintf(file, sizeof file, "%s/g.tfg", dir);
  snprintf(other, sizeof other, "%s/./g.tfg", dir);
  FILE *f = fopen(file, "w");
  fputs("let a = 1\n", f);
  fclose(f);
  tfg_file_id id1, id2;
  const tfg_source *g = tfg_diag_load_file(d, file, NULL, &at, &id1);
  ck_assert_ptr_nonnull(g);
  ck_assert_str_eq(g->text, "let a = 1\n");
  ck_assert_ptr_nonnull(tfg_diag_load_file(d, other, NULL, &at, &id2));
  ck_assert(id1.dev == id2.dev && id1.ino == id2.ino);
  tfg_diag_free(d);
  unlink(fifo);
  unlink(file);
  rmdir(dir);
}
END_TEST

Suite *suite_diag(void) {
  Suite *s = suite_create("diag");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, positions_from_offsets);
  tcase_add_test(tc, render_caret_under_span);
  tcase_add_test(tc, render_display_columns_and_tabs);
  tcase_add_test(tc, render_note_and_unlocated);
  tcase_add_test(tc, render_long_line_window);
  tcase_add_test(tc, control_bytes_rendered_safely);
  tcase_add_test(tc, error_limit_drops_and_notes);
  tcase_add_test(tc, render_is_incremental);
  tcase_add_test(tc, load_missing_file);
  tcase_add_test(tc, line_numbers_continue_across_sources);
  tcase_add_test(tc, long_names_cut_in_messages);
  tcase_add_test(tc, load_file_refuses_what_is_not_a_file);
  suite_add_tcase(s, tc);
  return s;
}
