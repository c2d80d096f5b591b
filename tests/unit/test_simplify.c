/* tests/unit/test_simplify.c: CSE and exact simplification
 * (compiler/simplify.h): duplicates merge (the same matmul written
 * twice) but never dropout or random draws; each identity rule holds and
 * its near misses (x + 0.0, a broadcasting x * ones, an inverse that is
 * not) stay; roots keep running; and a training program compiled with
 * the passes (the default) and with TFG_OPT=0 gives the same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/fold.h"
#include "compiler/simplify.h"
#include "runtime/session.h"
#include "runtime/train.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* Runs folding then simplify on b's graph as the driver does; returns
 * the marks (the caller frees them). */
static uint8_t *passes(built *b, int *nsimplified) {
  tfg_graph *g = b->p->graph;
  uint8_t *roots = program_printed_roots(b->p), *mark = calloc((size_t)g->nnodes + 1, 1);
  tfg_fold_constants(g, roots, mark);
  int n = tfg_simplify(g, roots, mark);
  if (nsimplified) *nsimplified = n;
  free(roots);
  return mark;
}

START_TEST(cse_merges_duplicates) {
  built b;
  program_build(&b,
                "param w: f32[4, 3] = normal(seed = 1)\n"
                "x = normal([2, 4], seed = 2)\n"
                "a = matmul(x, w)\n"
                "b = matmul(x, w)\n"                       /* merges with a */
                "r1 = normal([2, 3], seed = 5)\n"
                "r2 = normal([2, 3], seed = 5)\n"          /* random: never merged */
                "d1 = dropout(a, 0.5, seed = 3)\n"
                "d2 = dropout(a, 0.5, seed = 3)\n"         /* dropout: never merged */
                "print relu(a) + relu(b), r1 + r2, d1 - d2, matmul(x, w)\n",
                &(build_opts){0});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  tfg_graph *g = b.p->graph;
  int32_t n0 = g->nnodes;
  int count = 0;
  uint8_t *mark = passes(&b, &count);
  ck_assert_int_eq(g->nnodes, n0);
  /* relu(a) + relu(b): both relus read a, then the second relu is a's
   * relu again: the add reads one relu twice */
  tfg_node_id s = program_printed(b.p, 0);
  ck_assert_int_eq(g->nodes[s].op, TFG_OP_ADD);
  ck_assert_int_eq(g->nodes[s].inputs[0], g->nodes[s].inputs[1]);
  tfg_node_id relu = g->nodes[s].inputs[0], a = g->nodes[relu].inputs[0];
  ck_assert_int_eq(g->nodes[a].op, TFG_OP_MATMUL);
  ck_assert_int_eq(mark[a], TFG_FOLD_KEPT);
  int matmuls = 0, removed = 0;
  for (tfg_node_id i = 0; i < n0; i++) {
    if (g->nodes[i].op == TFG_OP_MATMUL && mark[i] == TFG_FOLD_KEPT) matmuls++;
    removed += mark[i] == TFG_FOLD_SIMPLIFIED;
  }
  /* the printed matmul(x, w) is a root: it keeps running (its id answers) */
  tfg_node_id m = program_printed(b.p, 3);
  ck_assert_int_ne(m, a);
  ck_assert_int_eq(mark[m], TFG_FOLD_KEPT);
  ck_assert_int_eq(matmuls, 2);
  ck_assert_int_eq(removed, 2); /* b and its relu */
  ck_assert_int_eq(count, 3);   /* and the root, replaced for its readers (none) */
  /* r1 + r2 and d1 - d2 still read two different nodes */
  tfg_node_id rr = program_printed(b.p, 1), dd = program_printed(b.p, 2);
  ck_assert_int_ne(g->nodes[rr].inputs[0], g->nodes[rr].inputs[1]);
  ck_assert_int_ne(g->nodes[dd].inputs[0], g->nodes[dd].inputs[1]);
  ck_assert_int_eq(g->nodes[g->nodes[dd].inputs[0]].op, TFG_OP_DROPOUT);
  ck_assert_int_eq(g->nodes[g->nodes[dd].inputs[1]].op, TFG_OP_DROPOUT);
  for (tfg_node_id i = 0; i < n0; i++)
    if (g->nodes[i].op == TFG_OP_DROPOUT || g->nodes[i].op == TFG_OP_INIT || g->nodes[i].op == TFG_OP_PARAM)
      ck_assert_int_eq(mark[i], TFG_FOLD_KEPT);
  free(mark);
  program_free(&b);
}
END_TEST

/* `print relu(EXPR)` over params w f32[2,3] and v f64[2,3,4]: whether
 * the relu reads the param itself after the passes (EXPR an identity of
 * it), and then EXPR's op is removed. */
static void rule(const char *expr, bool identity) {
  char text[512];
  snprintf(text, sizeof text,
           "param w: f32[2, 3] = normal(seed = 1)\n"
           "param v: f64[2, 3, 4] = normal(seed = 2)\n"
           "print relu(%s)\n",
           expr);
  built b;
  program_build(&b, text, &(build_opts){0});
  ck_assert_msg(b.st == TFG_OK, "%s: %s", expr, b.errs);
  tfg_graph *g = b.p->graph;
  tfg_node_id r = program_printed(b.p, 0), e = g->nodes[r].inputs[0];
  uint8_t *mark = passes(&b, NULL);
  tfg_node_id now = g->nodes[r].inputs[0];
  if (identity) {
    ck_assert_msg(g->nodes[now].op == TFG_OP_PARAM, "%s: relu reads op %d", expr, g->nodes[now].op);
    ck_assert_msg(mark[e] == TFG_FOLD_SIMPLIFIED, "%s: not removed", expr);
    ck_assert(g->nodes[now].dtype == g->nodes[r].dtype && tfg_shape_eq(&g->nodes[now].shape, &g->nodes[r].shape));
  } else {
    ck_assert_msg(now == e && mark[e] == TFG_FOLD_KEPT, "%s: simplified", expr);
  }
  free(mark);
  program_free(&b);
}

START_TEST(identities) {
  rule("w * 1.0", true);
  rule("1.0 * w", true);
  rule("w / 1.0", true);
  rule("w * ones([2, 3])", true);
  rule("w + -0.0", true);
  rule("-0.0 + w", true);
  rule("w - 0.0", true);
  rule("w - zeros([3])", true); /* the constant broadcasts, w does not: w's shape */
  rule("transpose(transpose(w))", true);
  rule("transpose(transpose(v, [1, 2, 0]), [2, 0, 1])", true);
  rule("cast(w, f32)", true);
  rule("reshape(w, [2, 3])", true);
  rule("flatten(w)", true);
  /* near misses */
  rule("w + 0.0", false);                  /* -0.0 + 0.0 is +0.0 */
  rule("w - -0.0", false);                 /* the same */
  rule("w * 2.0", false);
  rule("w * ones([4, 2, 3])", false);      /* broadcasts: another shape */
  rule("transpose(transpose(v, [1, 2, 0]), [1, 2, 0])", false);
  rule("cast(w, f64)", false);
  rule("reshape(w, [3, 2])", false);
}
END_TEST

/* ---- the same results with and without ---------------------------------------- */

/* A small model with a duplicated product and identities, trained 5
 * steps with Adam. */
static const char MODEL[] = "x = normal([4, 8], seed = 1)\n"
                            "param w1: f32[8, 8] = normal(std = 0.1, seed = 2)\n"
                            "param w2: f32[8, 8] = normal(std = 0.1, seed = 3)\n"
                            "h = relu(matmul(x, w1)) * 1.0 + relu(matmul(x, w1))\n"
                            "t = transpose(transpose(h))\n"
                            "loss = mean(matmul(cast(t, f32), w2) - 0.0) + mean(reshape(h, [4, 8]) * 1.0)\n"
                            "train loss { optimizer = adam(lr = 0.1); steps = 5 }\n"
                            "print loss, w1, w2\n";

START_TEST(same_bits_with_and_without) {
  trained on, off;
  program_train_fetch(MODEL, NULL, 3, &on);
  program_train_fetch(MODEL, &(tfg_switches){.no_opt = true}, 3, &off);
  ck_assert_int_ge(on.nsimplified, 6); /* the second matmul and relu, * 1.0 twice, the transposes, cast, - 0.0, reshape */
  ck_assert_int_eq(off.nsimplified, 0);
  trained_expect_same(&on, &off);
}
END_TEST

Suite *suite_simplify(void) {
  Suite *s = suite_create("simplify");
  TCase *tc = tcase_create("simplify");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, cse_merges_duplicates);
  tcase_add_test(tc, identities);
  tcase_add_test(tc, same_bits_with_and_without);
  suite_add_tcase(s, tc);
  return s;
}
