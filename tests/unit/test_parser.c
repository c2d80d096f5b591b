/* tests/unit/test_parser.c: the grammar, the tree it builds, and error
 * recovery. Trees are compared through the --ast dump, which shows
 * structure (and so precedence) exactly. */
#include <stdlib.h>
#include <string.h>

#include "lang/parse.h"
#include "tests/unit/unit.h"

/* The dump of text, which must parse. */
static char *ok(const char *text) {
  char *errs = NULL;
  char *dump = test_parse(text, strlen(text), &errs, NULL);
  ck_assert_msg(dump != NULL, "did not parse: %s\n%s", text, errs);
  free(errs);
  return dump;
}

#define AST_EQ(text, want)          \
  do {                              \
    char *got_ = ok(text);          \
    ck_assert_str_eq(got_, want);   \
    free(got_);                     \
  } while (0)

/* text must fail to parse with exactly n errors, and each of the NULL-
 * terminated msgs must be in their rendered text. */
static void expect_errors(const char *text, size_t n, const char *const *msgs) {
  size_t got;
  char *errs = NULL;
  char *dump = test_parse(text, strlen(text), &errs, &got);
  ck_assert_ptr_null(dump);
  ck_assert_msg(got == n, "%zu errors:\n%s", got, errs);
  for (; *msgs; msgs++) ck_assert_msg(strstr(errs, *msgs) != NULL, "no '%s' in:\n%s", *msgs, errs);
  free(errs);
}

START_TEST(precedence) {
  AST_EQ("a + b * c - d / e % f", "1:1     (expr (- (+ a (* b c)) (% (/ d e) f)))\n");
  AST_EQ("-a * !b", "1:1     (expr (* (- a) (! b)))\n");
  AST_EQ("a < b == c >= d", "1:1     (expr (>= (== (< a b) c) d))\n");
  AST_EQ("a || b && c || d", "1:1     (expr (|| (|| a (&& b c)) d))\n");
  AST_EQ("0..n + 1", "1:1     (expr (.. 0 (+ n 1)))\n");
  AST_EQ("-x.y[0](z)", "1:1     (expr (- (call (index (. x y) 0) z)))\n");
  AST_EQ("(a + b) * c", "1:1     (expr (* (+ a b) c))\n");
}
END_TEST

START_TEST(literals) {
  AST_EQ("x = [1, 2.0, 1e-3, \"s\\n\", true, false, none, [], [[1],],]",
         "1:1     (assign x [1 2.0 0.001 \"s\\n\" true false none [] [[1]]])\n");
  AST_EQ("d = [cpu, cpu:1, gpu:0, gpu:*, gpu:(i + 1)]",
         "1:1     (assign d [cpu cpu:1 gpu:0 gpu:* gpu:(+ i 1)])\n");
}
END_TEST

START_TEST(statements) {
  AST_EQ("import nn\nimport nn as n\nimport \"lib/b.tfg\" as blk\nimport \"x.tfg\"",
         "1:1     (import nn)\n2:1     (import nn as n)\n"
         "3:1     (import \"lib/b.tfg\" as blk)\n4:1     (import \"x.tfg\")\n");
  AST_EQ("param w: f32[64, 4 * h] = glorot(seed = 1)\nparam b: f32[]",
         "1:1     (param w f32[64 (* 4 h)] (call glorot (seed = 1)))\n2:1     (param b f32[])\n");
  AST_EQ("input x: f32[b, 64] from digits.x\ninput z: i32[b]",
         "1:1     (input x f32[b 64] from (. digits x))\n2:1     (input z i32[b])\n");
  AST_EQ("data d = csv(\"a.csv\", label = -1)",
         "1:1     (data d (call csv \"a.csv\" (label = (- 1))))\n");
  AST_EQ("print loss, accuracy(l, y)", "1:1     (print loss (call accuracy l y))\n");
}
END_TEST

START_TEST(blocks) {
  AST_EQ("fn dense(x, units, act = relu,) {\n  return act(x)\n}",
         "1:1     (fn dense [x units (act = relu)]\n"
         "2:3       (return (call act x)))\n");
  AST_EQ("fn f() { return }", "1:1     (fn f []\n1:10      (return))\n");
  AST_EQ("with gpu:0 { a = 1; b = 2 }",
         "1:1     (with gpu:0\n1:14      (assign a 1)\n1:21      (assign b 2))\n");
  AST_EQ("scope enc {\n}", "1:1     (scope enc)\n");
  AST_EQ("for i in 0..4 { for j in xs { h = j } }",
         "1:1     (for i (.. 0 4)\n1:17      (for j xs\n1:31        (assign h j)))\n");
  AST_EQ("@gpu:1 h = f(x)\n@d y = 1\n@(devs[0]) z = 2",
         "1:1     (@ gpu:1 (assign h (call f x)))\n2:1     (@ d (assign y 1))\n"
         "3:1     (@ (index devs 0) (assign z 2))\n");
}
END_TEST

START_TEST(if_chains) {
  AST_EQ("if a { x = 1 } else if b { x = 2 }\nelse { x = 3 }",
         "1:1     (if a\n1:8       (assign x 1)\n"
         "        else\n1:21      (if b\n1:28        (assign x 2)\n"
         "          else\n2:8         (assign x 3)))\n");
}
END_TEST

START_TEST(train) {
  AST_EQ("train loss {\n  optimizer = adam(lr = 1e-3); steps = 5\n\n  strategy = mirrored([gpu:0, gpu:1])\n}",
         "1:1     (train loss\n"
         "2:3       (optimizer = (call adam (lr = 0.001)))\n"
         "2:32      (steps = 5)\n"
         "4:3       (strategy = (call mirrored [gpu:0 gpu:1])))\n");
  AST_EQ("train a {}\ntrain b { steps = 1 }",
         "1:1     (train a)\n2:1     (train b\n2:11      (steps = 1))\n");
}
END_TEST

START_TEST(separators_and_blank_input) {
  AST_EQ("", "");
  AST_EQ("\n\n# only a comment\n;;\n", "");
  AST_EQ("a = 1;; b = 2;\r\nc = 3", "1:1     (assign a 1)\n1:9     (assign b 2)\n2:1     (assign c 3)\n");
  AST_EQ("f(a,\n  b, # why\n  k = 2)", "1:1     (expr (call f a b (k = 2)))\n");
}
END_TEST

/* Errors in separate statements are all reported, each once. */
START_TEST(recovery_reports_each_error) {
  /* Line 4 continues line 3 (newlines inside ( ) join lines): the error
   * is the '=' there, and the unclosed '(' is dropped for recovery. */
  expect_errors("let = 1\nlet b = 2\nx = (1 +\ny = 3\nfn f( { }\nz = )\nw = 4 4\n", 5,
                (const char *const[]){"t.tfg:1:5: error: expected a name after keyword 'let', found '='",
                                      "t.tfg:4:3: error: expected ')' to close '(' at 3:5, found '='",
                                      "t.tfg:5:7: error: expected a name or ')' after '(', found '{'",
                                      "t.tfg:6:5: error: unmatched ')'",
                                      "t.tfg:7:7: error: expected end of statement, found integer `4`", NULL});
}
END_TEST

/* Each case: a program and how many errors it has; recovery must find
 * every one (and no more). */
START_TEST(recovery_after_brackets_and_blocks) {
  const struct { const char *text; size_t n; const char *first; } cases[] = {
      /* a missing ')' before the block's '}' */
      {"fn f(x) {\n  return g(x\n}\nlet y = 1\nlet z = = 2\n", 2, "t.tfg:3:1: error: expected ')' to close '(' at 2:11, found '}'"},
      /* a mismatched closer */
      {"x = g(1, 2]\ny = = 1\nz = 3 3\n", 3, "t.tfg:1:11: error: expected ',' or ')' to close '(' at 1:6, found ']'"},
      /* a typo in an if condition: one error, not one per else */
      {"if x = 1 {\n a = 1\n} else if y > 2 {\n b = 2\n} else {\n c = 3\n}\nd = = 4\n", 2,
       "t.tfg:1:6: error: expected '{', found '='"},
      /* an extra ')' inside a block */
      {"fn f(x) {\n  h = relu(x))\n}\ng = = 1\n", 2, "t.tfg:2:14: error: unmatched ')'"},
      /* a deep statement does not end the parse */
      {"y = = 1\nx = ---------------------------------------------------------------1\nz = = 2\n", 2,
       "t.tfg:1:5: error"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n;
    char *errs = NULL;
    ck_assert_ptr_null(test_parse(cases[i].text, strlen(cases[i].text), &errs, &n));
    ck_assert_msg(n == cases[i].n, "case %zu: %zu errors:\n%s", i, n, errs);
    ck_assert_msg(strncmp(errs, cases[i].first, strlen(cases[i].first)) == 0, "case %zu:\n%s", i, errs);
    free(errs);
  }
}
END_TEST

START_TEST(unclosed_at_eof) {
  char *errs = NULL;
  const char *text = "x = f(1,\n      2";
  ck_assert_ptr_null(test_parse(text, strlen(text), &errs, NULL));
  ck_assert_str_eq(errs, "t.tfg:2:8: error: expected ',' or ')' to close '(' at 1:6, found end of file\n"
                         " 2 |       2\n"
                         "   |        ^\n"
                         "t.tfg:1:6: note: '(' opened here\n"
                         " 1 | x = f(1,\n"
                         "   |      ^\n");
  free(errs);
}
END_TEST

START_TEST(at_eof_flag) {
  /* The REPL's continuation test: unfinished input vs wrong input. */
  const char *cases[][2] = {
      {"fn f(x) {", "1"}, {"x = (1 +", "1"}, {"let a =", "1"}, {"print", "1"},
      {"x = 1 +\n", "0"}, /* the newline ends the statement: wrong, not unfinished */
      {"let = 1", "0"},   {")", "0"},
      {"s = (\"abc", "0"}, /* a lexical error first: more input cannot fix it */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tfg_diag *d = tfg_diag_new();
    tfg_arena a;
    tfg_arena_init(&a);
    const tfg_source *s = tfg_diag_add_source(d, "<stdin>", cases[i][0], strlen(cases[i][0]));
    tfg_ast *prog;
    bool at_eof = false;
    ck_assert_int_eq(tfg_parse(s, d, &a, &prog, &at_eof), TFG_ERR_SYNTAX);
    ck_assert_msg(at_eof == (cases[i][1][0] == '1'), "%s", cases[i][0]);
    tfg_arena_free(&a);
    tfg_diag_free(d);
  }
}
END_TEST

START_TEST(nesting_limits) {
  /* Deep nesting of every kind ends in one located error, never a crash. */
  size_t n = 200000;
  char *text = malloc(n * 2 + 16);
  const char *fills[] = {"(", "[", "-", "!", "+1", ".a", "[0]", "()"};
  for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
    size_t len = (size_t)sprintf(text, "x = a");
    if (strlen(fills[f]) == 1) /* prefix operators and openers */
      len = (size_t)sprintf(text, "x = ");
    size_t w = strlen(fills[f]);
    for (size_t i = 0; i < n / w; i++) {
      memcpy(text + len, fills[f], w);
      len += w;
    }
    size_t nerr;
    char *errs = NULL;
    ck_assert_ptr_null(test_parse(text, len, &errs, &nerr));
    ck_assert_msg(strstr(errs, "nesting is too deep") != NULL, "%s: %s", fills[f], errs);
    ck_assert_uint_eq(nerr, 1);
    free(errs);
  }
  free(text);
}
END_TEST

/* x = - - ... - 1 with n minus signs: n + 1 expression levels, plus one
 * for the assignment. */
static char *minus_chain(int n, size_t *len) {
  char *text = malloc((size_t)n + 16);
  *len = (size_t)sprintf(text, "x = ");
  for (int i = 0; i < n; i++) text[(*len)++] = '-';
  text[(*len)++] = '1';
  return text;
}

START_TEST(depth_at_the_limit) {
  /* The statement is TFG_AST_MAX_DEPTH deep: accepted. */
  size_t len;
  char *text = minus_chain(TFG_AST_MAX_DEPTH - 2, &len);
  char *dump = test_parse(text, len, NULL, NULL);
  ck_assert_ptr_nonnull(dump);
  free(dump);
  free(text);
  /* One level more: one located error. */
  text = minus_chain(TFG_AST_MAX_DEPTH - 1, &len);
  size_t n;
  char *errs = NULL;
  ck_assert_ptr_null(test_parse(text, len, &errs, &n));
  ck_assert_uint_eq(n, 1);
  ck_assert_ptr_nonnull(strstr(errs, "nesting is too deep (more than 1000 levels)"));
  free(errs);
  free(text);
  /* A long else-if chain is a sequence, not nesting. */
  tfg_strbuf b = {0};
  tfg_strbuf_puts(&b, "if a { x = 0 }");
  for (int i = 0; i < 1500; i++) tfg_strbuf_printf(&b, " else if b { x = %d }", i);
  dump = test_parse(b.data, b.len, &errs, &n);
  ck_assert_msg(dump != NULL, "%s", errs);
  free(dump);
  free(errs);
  tfg_strbuf_free(&b);
}
END_TEST

/* `@` then a statement: the name was read as the device; the message
 * says the device is missing, at the name (issue 13). */
START_TEST(at_without_device) {
  expect_errors("@ h = 1\n@gpu:0 x = 1\n@ d\n", 2,
                (const char *const[]){"t.tfg:1:3: error: expected a device after '@'\n",
                                      /* `@d` alone: the statement is what is missing. */
                                      "t.tfg:3:4: error: expected a statement, found end of line", NULL});
}
END_TEST

Suite *suite_parser(void) {
  Suite *s = suite_create("parser");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, precedence);
  tcase_add_test(tc, literals);
  tcase_add_test(tc, statements);
  tcase_add_test(tc, blocks);
  tcase_add_test(tc, if_chains);
  tcase_add_test(tc, train);
  tcase_add_test(tc, separators_and_blank_input);
  tcase_add_test(tc, recovery_reports_each_error);
  tcase_add_test(tc, unclosed_at_eof);
  tcase_add_test(tc, at_eof_flag);
  tcase_add_test(tc, nesting_limits);
  tcase_add_test(tc, depth_at_the_limit);
  tcase_add_test(tc, recovery_after_brackets_and_blocks);
  tcase_add_test(tc, at_without_device);
  suite_add_tcase(s, tc);
  return s;
}
