/* tests/unit/test_fold.c: constant folding (compiler/fold.h): a constant
 * subgraph becomes one CONST holding the values computed by hand in f64,
 * the ops only it read are removed (no step, no buffer in the plan);
 * random ops, params and what reads them are never folded, nor an op
 * whose value is not finite; and a program compiled with folding (the
 * default) and with TFG_OPT=0 computes and trains to the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/fold.h"
#include "compiler/place.h"
#include "runtime/session.h"
#include "runtime/train.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* y = sqrt(2 i + 1) over i in arange(0, 5), in f64, read by a param's
 * product: y folds into one CONST, its ops (arange, cast, mul, add, pow
 * and their scalar constants) are removed. */
START_TEST(subgraph_becomes_const) {
  built b;
  program_build(&b,
                "a = cast(arange(0, 5), f64)\n"
                "y = pow(a * 2.0 + 1.0, 0.5)\n"
                "param w: f64[5] = ones()\n"
                "print w * y\n",
                &(build_opts){0});
  ck_assert_int_eq(b.st, TFG_OK);
  tfg_graph *g = b.p->graph;
  int32_t n = g->nnodes;
  tfg_node_id z = program_printed(b.p, 0), y = g->nodes[z].inputs[1];
  ck_assert_int_eq(g->nodes[y].op, TFG_OP_POW);
  uint8_t *roots = program_printed_roots(b.p), *mark = calloc((size_t)n, 1);
  int folded = tfg_fold_constants(g, roots, mark);
  ck_assert_int_eq(g->nnodes, n); /* in place: ids unchanged */
  /* y is a CONST now, f64[5], holding sqrt(2 i + 1) exactly as computed in f64 */
  const tfg_node *ny = &g->nodes[y];
  ck_assert_int_eq(ny->op, TFG_OP_CONST);
  ck_assert_int_eq(ny->ninputs, 0);
  ck_assert_int_eq(ny->dtype, TFG_DTYPE_F64);
  ck_assert_int_eq(ny->shape.rank, 1);
  ck_assert_int_eq(ny->shape.dim[0], 5);
  ck_assert_int_eq(ny->loc.line, 2); /* still points at the source that built it */
  ck_assert_int_eq(mark[y], TFG_FOLD_CONST);
  const double *v = ny->attrs.data;
  for (int i = 0; i < 5; i++) ck_assert(v[i] == pow((double)i * 2.0 + 1.0, 0.5));
  /* everything y was computed from is removed; the param and the product stay */
  int removed = 0;
  for (tfg_node_id i = 0; i < y; i++) {
    if (g->nodes[i].op == TFG_OP_PARAM) {
      ck_assert_int_eq(mark[i], TFG_FOLD_KEPT);
      continue;
    }
    ck_assert_msg(mark[i] == TFG_FOLD_REMOVED, "n%d (%d) not removed", i, g->nodes[i].op);
    removed++;
  }
  ck_assert_int_ge(removed, 5); /* arange, cast, mul, add and the scalars */
  ck_assert_int_eq(folded, removed + 1);
  ck_assert_int_eq(mark[z], TFG_FOLD_KEPT);
  ck_assert_int_eq(g->nodes[z].op, TFG_OP_MUL);

  /* The plan: y persistent, no step for the removed ops, nor a buffer */
  ck_assert_int_eq(tfg_devices_parse(b.d, "host", &b.ds), TFG_OK);
  tfg_placement *pl = NULL;
  ck_assert_int_eq(tfg_place(g, b.ds, NULL, 0, NULL, mark, b.d, &pl), TFG_OK);
  /* the placer records what folding removed as such, and counts it nowhere:
   * the product and the const y and the param are the 3 ops that remain */
  for (tfg_node_id i = 0; i < n; i++)
    ck_assert_int_eq(tfg_placement_record(pl, i)->cause == TFG_CAUSE_REMOVED, mark[i] == TFG_FOLD_REMOVED);
  ck_assert_int_eq(tfg_placement_totals(pl, tfg_placement_device(pl, z)).ops, 3);
  tfg_strbuf why = {0};
  tfg_place_explain(pl, &why);
  ck_assert_msg(strstr(why.data, "removed before placement: computed at compile time (constant folding)"), "%s",
                why.data);
  tfg_strbuf_clear(&why);
  tfg_place_json(pl, &why);
  ck_assert_msg(strstr(why.data, "\"device\": null, \"pass\": 0, \"cause\": \"removed\", \"by\": \"fold\""), "%s",
                why.data);
  tfg_strbuf_free(&why);
  tfg_plan *p = NULL;
  ck_assert_int_eq(tfg_plan_build_with(g, pl, b.ds, &(tfg_plan_opts){.folded = mark}, b.d, &p), TFG_OK);
  plan_expect_valid(p);
  int dz = tfg_placement_device(pl, z);
  const tfg_plan_device *pd = &p->dev[dz];
  ck_assert_int_eq(pd->nsteps, 1); /* the product alone */
  ck_assert_int_eq(pd->steps[0].node, z);
  bool y_persistent = false;
  for (int i = 0; i < pd->nbuffers; i++) {
    ck_assert_int_ne(mark[pd->buffers[i].node], TFG_FOLD_REMOVED);
    y_persistent |= pd->buffers[i].node == y && pd->buffers[i].persistent;
  }
  ck_assert(y_persistent);
  char *text = plan_text(p);
  ck_assert_msg(strstr(text, "folded into 1 constant") && strstr(text, "persistent, folded"), "%s", text);
  free(text);
  /* the validator refuses a step for a removed node */
  tfg_node_id gone = g->nodes[z].inputs[0] - 1; /* a node before the param: removed */
  for (; gone >= 0 && mark[gone] != TFG_FOLD_REMOVED; gone--) {}
  ck_assert_int_ge(gone, 0);
  tfg_plan_step saved = p->dev[dz].steps[0];
  p->dev[dz].steps[0].node = gone;
  plan_expect_invalid(p, "constant folding removed it");
  p->dev[dz].steps[0] = saved;

  tfg_plan_free(p);
  tfg_placement_free(pl);
  free(roots);
  free(mark);
  program_free(&b);
}
END_TEST

/* Random draws, dropout, params and what reads them stay; so does an op
 * whose value is not finite (the run reports it there), while its
 * constant input folds. */
START_TEST(varying_not_folded) {
  built b;
  program_build(&b,
                "r = normal([4], seed = 1) * 2.0\n"             /* random: stays */
                "param w: f32[4] = ones()\n"
                "h = w + ones([4]) * 3.0\n"                     /* ones * 3 folds; the add stays */
                "d = dropout(h, 0.5)\n"                         /* dropout stays */
                "bad = log(zeros([2]) - 1.0)\n"                 /* NaN: log stays, its input folds */
                "print r, d, bad\n",
                &(build_opts){0});
  ck_assert_int_eq(b.st, TFG_OK);
  tfg_graph *g = b.p->graph;
  int32_t n = g->nnodes;
  uint8_t *roots = program_printed_roots(b.p), *mark = calloc((size_t)n, 1);
  tfg_fold_constants(g, roots, mark);
  tfg_node_id r = program_printed(b.p, 0), d = program_printed(b.p, 1), bad = program_printed(b.p, 2);
  ck_assert_int_eq(g->nodes[r].op, TFG_OP_MUL);
  ck_assert_int_eq(mark[r], TFG_FOLD_KEPT);
  ck_assert_int_eq(g->nodes[g->nodes[r].inputs[0]].op, TFG_OP_INIT); /* the draw */
  ck_assert_int_eq(mark[g->nodes[r].inputs[0]], TFG_FOLD_KEPT);
  ck_assert_int_eq(g->nodes[d].op, TFG_OP_DROPOUT);
  tfg_node_id h = g->nodes[d].inputs[0];
  ck_assert_int_eq(g->nodes[h].op, TFG_OP_ADD);
  ck_assert_int_eq(mark[h], TFG_FOLD_KEPT);
  tfg_node_id three = g->nodes[h].inputs[1];
  ck_assert_int_eq(g->nodes[three].op, TFG_OP_CONST);
  ck_assert_int_eq(mark[three], TFG_FOLD_CONST);
  for (int i = 0; i < 4; i++) ck_assert(((const float *)g->nodes[three].attrs.data)[i] == 3.0f);
  ck_assert_int_eq(g->nodes[bad].op, TFG_OP_LOG);
  ck_assert_int_eq(mark[bad], TFG_FOLD_KEPT);
  tfg_node_id m1 = g->nodes[bad].inputs[0];
  ck_assert_int_eq(mark[m1], TFG_FOLD_CONST);
  for (int i = 0; i < 2; i++) ck_assert(((const float *)g->nodes[m1].attrs.data)[i] == -1.0f);
  for (tfg_node_id i = 0; i < n; i++) {
    tfg_op_id op = g->nodes[i].op;
    if (op == TFG_OP_PARAM || op == TFG_OP_DROPOUT || (op == TFG_OP_INIT && g->nodes[i].attrs.init == TFG_INIT_NORMAL))
      ck_assert_int_eq(mark[i], TFG_FOLD_KEPT);
  }
  free(roots);
  free(mark);
  program_free(&b);
}
END_TEST

/* ---- the same results with and without ---------------------------------------- */

/* A causal attention's mask and scale, trained 5 steps with Adam. */
static const char ATTENTION[] = "d = 8\nheads = 2\n"
                                "x = normal([4, 8], seed = 1)\n"
                                "param wq: f32[8, 8] = normal(std = 0.1, seed = 2)\n"
                                "param wk: f32[8, 8] = normal(std = 0.1, seed = 3)\n"
                                "mask = cast(greater(arange(0, 4), reshape(arange(0, 4), [4, 1])), f32) * -1e9\n"
                                "scale = 1.0 / pow(d / heads, 0.5)\n"
                                "s = matmul(matmul(x, wq), matmul(x, wk), transpose_b = true) * scale + mask\n"
                                "loss = mean(matmul(softmax(s), x))\n"
                                "train loss { optimizer = adam(lr = 0.1); steps = 5 }\n"
                                "print loss, wq, softmax(s)\n";

START_TEST(same_bits_with_and_without) {
  trained on, off;
  program_train_fetch(ATTENTION, NULL, 3, &on);
  program_train_fetch(ATTENTION, &(tfg_switches){.no_opt = true}, 3, &off);
  ck_assert_int_ge(on.nfolded, 8); /* the mask's ops, the scale's, the mean's gradient */
  ck_assert_int_eq(off.nfolded, 0);
  trained_expect_same(&on, &off);
}
END_TEST

Suite *suite_fold(void) {
  Suite *s = suite_create("fold");
  TCase *tc = tcase_create("fold");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, subgraph_becomes_const);
  tcase_add_test(tc, varying_not_folded);
  tcase_add_test(tc, same_bits_with_and_without);
  suite_add_tcase(s, tc);
  return s;
}
