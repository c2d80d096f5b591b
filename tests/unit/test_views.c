/* tests/unit/test_views.c: views (docs/plan.md, Views): a reshape or
 * flatten of a value on its own device shares that value's buffer: no
 * LAUNCH, no buffer of its own, its base's buffer live to the view's last
 * read; one whose input is on another device reads the copy as before;
 * TFG_OPT=0 turns views off; the validator rejects a view that is not
 * one; a fetched view (of a constant, of a computed value) has its
 * base's values; and a program trained and fetched (a printed reshape among the
 * results) gives the same bits with views and with TFG_OPT=0. */
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"
#include "runtime/train.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* The steps of device d that LAUNCH node id. */
static int launches_of(const tfg_plan *p, int d, tfg_node_id id) {
  int k = 0;
  for (int s = 0; s < p->dev[d].nsteps; s++)
    k += p->dev[d].steps[s].kind == TFG_PLAN_LAUNCH && p->dev[d].steps[s].node == id;
  return k;
}

/* The buffer of device d whose node is id (not a copy), or -1. */
static int buffer_of(const tfg_plan *p, int d, tfg_node_id id) {
  for (int i = 0; i < p->dev[d].nbuffers; i++)
    if (p->dev[d].buffers[i].node == id && !p->dev[d].buffers[i].copy) return i;
  return -1;
}

/* The last step of device d that LAUNCHes an op reading id, or -1. */
static int last_reader_step(const tfg_plan *p, int d, tfg_node_id id) {
  int last = -1;
  for (int s = 0; s < p->dev[d].nsteps; s++) {
    const tfg_plan_step *st = &p->dev[d].steps[s];
    if (st->kind != TFG_PLAN_LAUNCH) continue;
    int n;
    const tfg_node_id *in = tfg_plan_step_inputs(p, st, &n);
    for (int k = 0; k < n; k++)
      if (in[k] == id) last = s;
  }
  return last;
}

static const char CHAIN[] = "x = normal([4, 6], seed = 1)\n"
                            "param w: f32[6, 8] = normal(std = 0.1, seed = 2)\n"
                            "h = relu(matmul(x, w))\n"
                            "r = reshape(h, [4, 2, 4])\n"
                            "f = flatten(r)\n"
                            "y = matmul(f, w, transpose_b = true)\n"
                            "z = exp(x)\n"
                            "print sum(y + z)\n";

/* reshape(h) and flatten(reshape(h)) are views of h: no launch, no
 * buffer, h's buffer live until y reads f; the plan prints them. */
START_TEST(reshape_is_view) {
  built b;
  program_build(&b, CHAIN, &(build_opts){.devices = "host*1:64M"});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  plan_expect_valid(b.plan);
  const tfg_graph *g = b.p->graph;
  tfg_node_id r = graph_last_op(g, TFG_OP_RESHAPE), f = graph_last_op(g, TFG_OP_FLATTEN);
  tfg_node_id h = g->nodes[r].inputs[0];
  ck_assert_ptr_nonnull(b.plan->view_of);
  ck_assert_int_eq(b.plan->view_of[r], h);
  ck_assert_int_eq(b.plan->view_of[f], h); /* a view of a view shares the base */
  ck_assert_int_eq(b.plan->view_of[h], -1);
  int d = tfg_placement_device(b.pl, h);
  ck_assert_int_eq(tfg_placement_device(b.pl, r), d);
  ck_assert_int_eq(launches_of(b.plan, d, r), 0);
  ck_assert_int_eq(launches_of(b.plan, d, f), 0);
  ck_assert_int_eq(buffer_of(b.plan, d, r), -1);
  ck_assert_int_eq(buffer_of(b.plan, d, f), -1);
  /* liveness: h's buffer lives to the matmul reading f */
  int hb = buffer_of(b.plan, d, h), yr = last_reader_step(b.plan, d, f);
  ck_assert_int_ge(hb, 0);
  ck_assert_int_gt(yr, b.plan->dev[d].buffers[hb].first);
  ck_assert_int_ge(b.plan->dev[d].buffers[hb].last, yr);
  char *t = plan_text(b.plan);
  ck_assert_msg(strstr(t, "2 views (no launch, no copy)") != NULL, "%s", t);
  ck_assert_msg(strstr(t, "view of n") != NULL, "%s", t);
  free(t);
  program_free(&b);
}
END_TEST

/* no_opt (TFG_OPT=0): no views, the reshape and flatten are launched. */
START_TEST(opt_0_launches) {
  built b;
  program_build(&b, CHAIN, &(build_opts){.devices = "host*1:64M", .sw = {.no_opt = true}});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  plan_expect_valid(b.plan);
  const tfg_graph *g = b.p->graph;
  ck_assert_ptr_null(b.plan->view_of);
  tfg_node_id r = graph_last_op(g, TFG_OP_RESHAPE), f = graph_last_op(g, TFG_OP_FLATTEN);
  ck_assert_int_eq(launches_of(b.plan, tfg_placement_device(b.pl, r), r), 1);
  ck_assert_int_eq(launches_of(b.plan, tfg_placement_device(b.pl, f), f), 1);
  program_free(&b);
}
END_TEST

/* A reshape whose input is on another device reads the copy: launched
 * there, not a view; a reshape of a param (updated in place) is not one
 * either; a reshape on the same device as its input is. */
START_TEST(cross_device_and_param_not_views) {
  built b;
  program_build(&b,
                "x = normal([8, 16], seed = 1)\n"
                "param w1: f32[16, 32]\n"
                "param w2: f32[4, 4]\n"
                "@gpu:0 h = relu(matmul(x, w1))\n"
                "@gpu:1 a = reshape(h, [32, 8])\n"
                "@gpu:0 c = reshape(h, [16, 16])\n"
                "@gpu:1 y = sum(a) + sum(c) + sum(reshape(w2, [16]))\n"
                "print y\n",
                &(build_opts){.devices = "host*2:64M"});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  plan_expect_valid(b.plan);
  const tfg_graph *g = b.p->graph;
  /* the program's last three reshapes, in source order (the stdlib may hold others) */
  tfg_node_id a = -1, c = -1, rw = -1;
  for (tfg_node_id i = g->nnodes - 1; i >= 0 && a < 0; i--) {
    if (g->nodes[i].op != TFG_OP_RESHAPE) continue;
    if (rw < 0) rw = i;
    else if (c < 0) c = i;
    else a = i;
  }
  ck_assert_int_eq(g->nodes[g->nodes[rw].inputs[0]].op, TFG_OP_PARAM);
  ck_assert_int_eq(g->nodes[a].shape.dim[0], 32);
  ck_assert(a >= 0 && c >= 0 && rw >= 0);
  int da = tfg_placement_device(b.pl, a), dc = tfg_placement_device(b.pl, c);
  ck_assert_int_ne(da, dc);
  ck_assert_int_eq(b.plan->view_of[a], -1);
  ck_assert_int_eq(launches_of(b.plan, da, a), 1);
  ck_assert_int_eq(b.plan->view_of[c], g->nodes[c].inputs[0]);
  ck_assert_int_eq(launches_of(b.plan, dc, c), 0);
  ck_assert_int_eq(b.plan->view_of[rw], -1);
  program_free(&b);
}
END_TEST

/* The validator checks views without trusting the builder. */
START_TEST(validator_rejects_false_views) {
  built b;
  program_build(&b, CHAIN, &(build_opts){.devices = "host*1:64M"});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_graph *g = b.p->graph;
  tfg_node_id r = graph_last_op(g, TFG_OP_RESHAPE), h = g->nodes[r].inputs[0];
  tfg_node_id e = graph_last_op(g, TFG_OP_EXP), x = g->nodes[e].inputs[0];
  /* a view of something that is not its input */
  b.plan->view_of[r] = x;
  plan_expect_invalid(b.plan, "neither its input nor its input's base");
  b.plan->view_of[r] = h;
  plan_expect_valid(b.plan);
  /* a launched op claimed as a view: the exp */
  b.plan->view_of[e] = x;
  plan_expect_invalid(b.plan, "only a reshape or flatten");
  b.plan->view_of[e] = -1;
  /* a view's base freed before the view's last read */
  int d = tfg_placement_device(b.pl, h), hb = buffer_of(b.plan, d, h);
  ck_assert_int_ge(hb, 0);
  int keep = b.plan->dev[d].buffers[hb].last;
  b.plan->dev[d].buffers[hb].last = b.plan->dev[d].buffers[hb].first;
  plan_expect_invalid(b.plan, "whose buffer lives only at steps");
  b.plan->dev[d].buffers[hb].last = keep;
  plan_expect_valid(b.plan);
  program_free(&b);
}
END_TEST

/* A view of a constant (what folding leaves unfolded: the planner alone,
 * here) is fetched as its constant is: before any step, the constant's
 * bytes under the view's shape; a view of a computed value is fetched when
 * its base is written. */
START_TEST(fetch_views) {
  built b;
  program_build(&b,
                "a = tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])\n"
                "print reshape(a, [3, 2]), flatten(reshape(a * 2.0, [1, 2, 3]))\n",
                &(build_opts){.devices = "host*1:64M"});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  plan_expect_valid(b.plan);
  const tfg_graph *g = b.p->graph;
  tfg_node_id f = graph_last_op(g, TFG_OP_FLATTEN), r = g->nodes[f].inputs[0], c = r - 1;
  while (g->nodes[c].op != TFG_OP_RESHAPE) c--; /* reshape(a, [3, 2]) */
  ck_assert_int_eq(g->nodes[b.plan->view_of[c]].op, TFG_OP_CONST);
  ck_assert_int_eq(g->nodes[b.plan->view_of[f]].op, TFG_OP_MUL);
  tfg_session *s = tfg_session_new(b.p, b.d, &(tfg_session_opts){.threads = 1, .plan = b.plan});
  ck_assert_ptr_nonnull(s);
  tfg_node_id fetch[2] = {c, f};
  tfg_tensor t[2];
  ck_assert_int_eq(tfg_session_run(s, fetch, 2, t), TFG_OK);
  ck_assert_int_eq(t[0].shape.rank, 2);
  ck_assert_int_eq(t[0].shape.dim[0], 3);
  ck_assert_int_eq(t[1].shape.rank, 2);
  const float *v0 = t[0].data, *v1 = t[1].data;
  for (int i = 0; i < 6; i++) {
    ck_assert(v0[i] == (float)(i + 1));
    ck_assert(v1[i] == (float)(2 * (i + 1)));
  }
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

/* ---- the same results with and without ---------------------------------------- */

/* Heads split and merged by reshapes, a flatten, a printed reshape. */
static const char HEADS[] = "x = normal([4, 8], seed = 1)\n"
                            "param wq: f32[8, 8] = normal(std = 0.1, seed = 2)\n"
                            "param wk: f32[8, 8] = normal(std = 0.1, seed = 3)\n"
                            "q = transpose(reshape(matmul(x, wq), [4, 2, 4]), [1, 0, 2])\n"
                            "k = transpose(reshape(matmul(x, wk), [4, 2, 4]), [1, 0, 2])\n"
                            "s = softmax(matmul(q, k, transpose_b = true) * 0.5)\n"
                            "o = reshape(transpose(matmul(s, k), [1, 0, 2]), [4, 8])\n"
                            "f = flatten(reshape(o, [2, 2, 8]))\n"
                            "loss = mean(gelu(f) * f)\n"
                            "train loss { optimizer = adam(lr = 0.1); steps = 5 }\n"
                            "print loss, wq, f, reshape(wk, [64])\n";

START_TEST(same_bits_with_and_without) {
  trained on, off;
  program_train_fetch(HEADS, NULL, 4, &on);
  program_train_fetch(HEADS, &(tfg_switches){.no_opt = true}, 4, &off);
  ck_assert_int_ge(on.nviews, 4); /* the heads' reshapes, the flatten, their gradients */
  ck_assert_int_eq(off.nviews, 0);
  trained_expect_same(&on, &off);
}
END_TEST

Suite *suite_views(void) {
  Suite *s = suite_create("views");
  TCase *tc = tcase_create("views");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reshape_is_view);
  tcase_add_test(tc, opt_0_launches);
  tcase_add_test(tc, cross_device_and_param_not_views);
  tcase_add_test(tc, validator_rejects_false_views);
  tcase_add_test(tc, fetch_views);
  tcase_add_test(tc, same_bits_with_and_without);
  suite_add_tcase(s, tc);
  return s;
}
