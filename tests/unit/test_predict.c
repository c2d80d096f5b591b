/* tests/unit/test_predict.c: the step-time predictor (compiler/predict.h)
 * on real plans with cost tables set by hand, so each prediction can be
 * computed by hand: launches one after another on a device's stream, an
 * all-reduce's formula, the network's part across processes, and the
 * all-reduce hidden behind the backward pass. Sim devices: no host
 * device is measured, every number is the table's. */
#include <math.h>
#include <stdlib.h>

#include "compiler/predict.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* A 2-replica MLP: its gradients all-reduced in one bucket. */
static const char *MLP = "x = normal([8, 16], seed = 1)\n"
                         "param w: f32[16, 32] = glorot(seed = 2)\n"
                         "param v: f32[32, 4] = glorot(seed = 3)\n"
                         "train mean(matmul(relu(matmul(x, w)), v)) {\n"
                         "  optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1])\n"
                         "}\n";

/* MLP on sim:h100*2 into *b, with a table where only launch_s costs:
 * each launch 1 us, copies and all-reduces free, so a device's time is
 * its launches. */
static void launches_only(built *b, tfg_cost_table *t) {
  program_build(b, MLP, &(build_opts){.steps = 1, .devices = "sim:h100*2"});
  ck_assert_msg(b->st == TFG_OK, "%s", b->errs);
  tfg_cost_table_init(t, b->plan, NULL);
  for (int d = 0; d < t->ndev; d++)
    t->dev[d] = (tfg_cost_device){.flops = 1e30, .mem_bw = 1e30, .copy_bw = 1e30, .launch_s = 1e-6};
}

/* The launches of device d the step's run needs. */
static int needed_launches(const tfg_plan *p, const tfg_train_step *st, int d) {
  int nf = st->nreplicas + st->nupdates, n = 0;
  tfg_node_id *fetch = malloc(sizeof *fetch * (size_t)nf);
  uint8_t *need = malloc((size_t)p->g->nnodes);
  for (int k = 0; k < st->nreplicas; k++) fetch[n++] = st->losses[k];
  for (int k = 0; k < st->nupdates; k++) fetch[n++] = st->updates[k];
  tfg_plan_mark_needed(p, fetch, n, need);
  int count = 0;
  for (int s = 0; s < p->dev[d].nsteps; s++) {
    const tfg_plan_step *ps = &p->dev[d].steps[s];
    count += ps->kind == TFG_PLAN_LAUNCH && need[ps->node] && p->g->nodes[ps->node].op != TFG_OP_INPUT;
  }
  free(fetch);
  free(need);
  return count;
}

/* Each replica's launches run one after another: gpu:0's compute time is
 * its needed launches times 1 us, exactly. */
START_TEST(launches_add_up) {
  built b;
  tfg_cost_table t;
  launches_only(&b, &t);
  tfg_prediction r;
  tfg_predict(b.plan, &t, &b.steps[0], &r);
  int n = needed_launches(b.plan, &b.steps[0], 1);
  ck_assert_int_gt(n, 5);
  ck_assert_msg(fabs(r.dev[1].compute_s - n * 1e-6) < 1e-12, "gpu:0 computes %g s, want %d launches of 1 us",
                r.dev[1].compute_s, n);
  ck_assert(r.step_s >= r.dev[1].compute_s);
  tfg_prediction_free(&r);
  tfg_cost_table_free(&t);
  program_free(&b);
}
END_TEST

/* The bucket's all-reduce over 2 ranks at 1 GB/s, nothing else costing:
 * B bytes copied in, then 2 (R - 1) / R of B moved (the ring), reduction
 * free: 2 B / 1e9 s. Across 2 processes at 0.5 GB/s with 10 us per
 * message: 2 (N - 1) / N B / 0.5e9 + 2 (N - 1) 10 us more. */
START_TEST(allreduce_formula) {
  built b;
  tfg_cost_table t;
  launches_only(&b, &t);
  ck_assert_int_eq(b.plan->nbuckets, 1);
  double B = (double)b.plan->buckets[0].bytes;
  ck_assert(B == (16 * 32 + 32 * 4) * 4.0); /* both gradients, f32 */
  for (int d = 0; d < t.ndev; d++) t.dev[d].launch_s = 0, t.dev[d].copy_bw = 1e9;
  tfg_prediction r;
  tfg_predict(b.plan, &t, &b.steps[0], &r);
  ck_assert_msg(fabs(r.dev[1].allreduce_s - 2 * B / 1e9) < 1e-15, "all-reduce %g s, want %g", r.dev[1].allreduce_s,
                2 * B / 1e9);
  ck_assert(fabs(r.dev[2].allreduce_s - r.dev[1].allreduce_s) < 1e-18);
  tfg_prediction_free(&r);
  t.ranks = 2, t.net_bw = 0.5e9, t.net_s = 10e-6;
  tfg_predict(b.plan, &t, &b.steps[0], &r);
  double want = 2 * B / 1e9 + B / 0.5e9 + 2 * 10e-6;
  ck_assert_msg(fabs(r.dev[1].allreduce_s - want) < 1e-15, "across 2 ranks %g s, want %g", r.dev[1].allreduce_s, want);
  tfg_prediction_free(&r);
  tfg_cost_table_free(&t);
  program_free(&b);
}
END_TEST

/* Launches of 1 us and an all-reduce of 3 us (the copy-in and two ring
 * steps, one launch each): on a GPU its stream runs beside the compute
 * stream, and the backward launches still to come after the bucket
 * closes hide some of it. Made long (copy-in 1 s, ring 1 s), the step
 * waits for it (the updates read the mean): it ends 2 s later, and the
 * part hidden is at most the launches between, a few us. */
START_TEST(hidden_behind_compute) {
  built b;
  tfg_cost_table t;
  launches_only(&b, &t);
  tfg_prediction r;
  tfg_predict(b.plan, &t, &b.steps[0], &r);
  double ar = r.dev[1].allreduce_s, end = r.step_s;
  tfg_prediction_free(&r);
  ck_assert_msg(fabs(ar - 3e-6) < 1e-12, "all-reduce %g s, want 3 us", ar);
  for (int d = 0; d < t.ndev; d++) t.dev[d].copy_bw = (double)b.plan->buckets[0].bytes; /* 1 s to copy in */
  tfg_predict(b.plan, &t, &b.steps[0], &r);
  ck_assert_msg(r.dev[1].allreduce_s > 1.9 && r.step_s > end + 1.9, "all-reduce %g s, step %g s",
                r.dev[1].allreduce_s, r.step_s);
  ck_assert_msg(r.dev[1].hidden_s < 100e-6, "%g s of a 2 s all-reduce hidden behind the updates that wait for it",
                r.dev[1].hidden_s);
  tfg_prediction_free(&r);
  tfg_cost_table_free(&t);
  program_free(&b);
}
END_TEST

Suite *suite_predict(void) {
  Suite *s = suite_create("predict");
  TCase *tc = tcase_create("predict");
  tcase_add_test(tc, launches_add_up);
  tcase_add_test(tc, allreduce_formula);
  tcase_add_test(tc, hidden_behind_compute);
  suite_add_tcase(s, tc);
  return s;
}
