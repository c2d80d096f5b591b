/* tests/unit/test_plan.c: the planner through the real pipeline: programs
 * are parsed, evaluated, given their training steps, placed and planned;
 * every plan must pass the validator. Then exact offsets and peaks checked
 * by hand, best fit's choices, the validator catching broken plans, the
 * out-of-memory error, and graphs of 10,000 and 100,000 ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/autodiff.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "lang/interp.h"
#include "lang/parse.h"
#include "runtime/device.h"
#include "tests/unit/unit.h"

/* A program taken through the pipeline up to its plan. */
typedef struct planned {
  tfg_diag *d;
  tfg_arena a;
  tfg_interp *I;
  tfg_program *p;
  tfg_train_step steps[4];
  int nsteps;
  tfg_devices *ds;
  tfg_placement *pl;
  tfg_plan *plan;
  tfg_status st; /* of the plan (the stages before must succeed) */
  char *errs;
} planned;

static void plan_program(planned *b, const char *text, const char *devices) {
  static const tfg_interp_opts o = {.stdlib_dir = "stdlib"};
  memset(b, 0, sizeof *b);
  b->d = tfg_diag_new();
  tfg_arena_init(&b->a);
  const tfg_source *src = tfg_diag_add_source(b->d, "t.tfg", text, strlen(text));
  tfg_ast *prog = NULL;
  ck_assert_int_eq(tfg_parse(src, b->d, &b->a, &prog, NULL), TFG_OK);
  b->I = tfg_interp_new(b->d, &o);
  tfg_status st = tfg_interp_eval(b->I, src, prog);
  if (st == TFG_OK) st = tfg_interp_finish(b->I);
  b->p = tfg_interp_program(b->I);
  for (int i = 0; i < b->p->nactions && st == TFG_OK; i++)
    if (b->p->actions[i].kind == TFG_ACTION_TRAIN) {
      ck_assert_int_lt(b->nsteps, 4);
      st = tfg_autodiff_train_step(b->p->graph, &b->p->actions[i], b->p, &b->steps[b->nsteps], b->d);
      if (st == TFG_OK) b->nsteps++;
    }
  if (st == TFG_OK) st = tfg_devices_parse(b->d, devices, &b->ds);
  if (st == TFG_OK) st = tfg_place(b->p->graph, b->ds, b->steps, b->nsteps, NULL, b->d, &b->pl);
  if (st != TFG_OK) {
    char *e = test_render(b->d, false);
    ck_abort_msg("building the program failed: %s", e);
  }
  b->st = tfg_plan_build(b->p->graph, b->pl, b->ds, b->d, &b->plan);
  b->errs = test_render(b->d, false);
}

static void unplan(planned *b) {
  tfg_plan_free(b->plan);
  tfg_placement_free(b->pl);
  tfg_devices_free(b->ds);
  for (int i = 0; i < b->nsteps; i++) tfg_train_step_free(&b->steps[i]);
  tfg_interp_free(b->I);
  tfg_arena_free(&b->a);
  tfg_diag_free(b->d);
  free(b->errs);
}

static char *print_plan(const tfg_plan *p) {
  tfg_strbuf out = {0};
  tfg_plan_print(p, &out);
  return tfg_strbuf_take(&out);
}

/* Asserts the plan is valid, showing it when not. */
static void expect_valid(const tfg_plan *p) {
  tfg_strbuf why = {0};
  bool ok = tfg_plan_validate(p, &why);
  if (!ok) {
    char *text = print_plan(p);
    ck_abort_msg("invalid plan: %s\n%s", why.data, text);
    free(text);
  }
  ck_assert_ptr_null(why.data);
  tfg_strbuf_free(&why);
}

/* Asserts the validator rejects p with a message containing want. */
static void expect_invalid(const tfg_plan *p, const char *want) {
  tfg_strbuf why = {0};
  ck_assert_msg(!tfg_plan_validate(p, &why), "a broken plan passed (want \"%s\")", want);
  ck_assert_msg(why.data && strstr(why.data, want), "validator said \"%s\", want \"%s\"", why.data ? why.data : "",
                want);
  tfg_strbuf_free(&why);
}

static void build_ok(planned *b, const char *text, const char *devices) {
  plan_program(b, text, devices);
  ck_assert_msg(b->st == TFG_OK, "%s", b->errs);
  if (getenv("TFG_TEST_SHOW_PLAN")) { /* for a person reading along */
    char *shown = print_plan(b->plan);
    fprintf(stderr, "%s----\n", shown);
    free(shown);
  }
  expect_valid(b->plan);
}

/* The last node with op `op`. */
static tfg_node_id last_op(const tfg_graph *g, tfg_op_id op) {
  for (tfg_node_id i = g->nnodes - 1; i >= 0; i--)
    if (g->nodes[i].op == op) return i;
  ck_abort_msg("no %s node", tfg_op_get(op)->name);
  return -1;
}

static int count_steps(const tfg_plan *p, int dev, tfg_plan_step_kind kind, tfg_node_id node) {
  int n = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++)
      if ((dev < 0 || d == dev) && p->dev[d].steps[s].kind == kind && (node < 0 || p->dev[d].steps[s].node == node)) n++;
  return n;
}

static const tfg_plan_buffer *buffer_of(const tfg_plan_device *pd, tfg_node_id node, bool copy) {
  for (int i = 0; i < pd->nbuffers; i++)
    if (pd->buffers[i].node == node && pd->buffers[i].copy == copy) return &pd->buffers[i];
  return NULL;
}

static void remove_step(tfg_plan_device *pd, int s) {
  memmove(&pd->steps[s], &pd->steps[s + 1], sizeof *pd->steps * (size_t)(pd->nsteps - s - 1));
  pd->nsteps--;
}

/* The index of the first step of device pd with this kind and stream. */
static int find_step(const tfg_plan_device *pd, tfg_plan_step_kind kind, int stream) {
  for (int s = 0; s < pd->nsteps; s++)
    if (pd->steps[s].kind == kind && pd->steps[s].stream == stream) return s;
  ck_abort_msg("no such step");
  return -1;
}

/* ---- valid plans ----------------------------------------------------------- */

START_TEST(single_device) {
  planned b;
  build_ok(&b,
           "x = normal([8, 16], seed = 1)\nparam w: f32[16, 32]\nh = relu(matmul(x, w))\ny = sum(h)\nprint y\n",
           "host*1:64M");
  const tfg_plan *p = b.plan;
  ck_assert_int_eq(p->ndev, 2);
  ck_assert_int_eq(p->nevents, 0);
  ck_assert_int_eq(p->dev[0].nsteps, 0); /* cpu:0 idle */
  ck_assert_int_eq(count_steps(p, -1, TFG_PLAN_COPY, -1), 0);
  /* one launch per op, persistent w not launched */
  ck_assert_int_eq(count_steps(p, 1, TFG_PLAN_LAUNCH, -1), b.p->graph->nnodes - 1);
  const tfg_plan_device *pd = &p->dev[1];
  ck_assert(pd->buffers[0].persistent);
  ck_assert_int_eq(pd->buffers[0].offset, 0);
  ck_assert_int_eq(pd->buffers[0].bytes, 16 * 32 * 4);
  ck_assert_int_eq(pd->buffers[0].first, 0);
  ck_assert_int_eq(pd->buffers[0].last, pd->nsteps - 1);
  ck_assert_int_eq(pd->persistent_bytes, 16 * 32 * 4);
  unplan(&b);
}
END_TEST

static const char MODEL_PARALLEL[] = "x = normal([8, 16], seed = 1)\n"
                                     "param w1: f32[16, 32]\n"
                                     "param w2: f32[32, 4]\n"
                                     "param w3: f32[32, 4]\n"
                                     "@gpu:0 h = relu(matmul(x, w1))\n"
                                     "@gpu:1 a = matmul(h, w2)\n"
                                     "@gpu:1 c = matmul(h, w3)\n"
                                     "@gpu:1 y = a + c\n"
                                     "print y\n";

START_TEST(model_parallel_one_copy) {
  planned b;
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  const tfg_plan *p = b.plan;
  tfg_node_id h = last_op(b.p->graph, TFG_OP_RELU);
  ck_assert_int_eq(tfg_placement_device(b.pl, h), 1);
  /* h is read twice on gpu:1 and copied once */
  ck_assert_int_eq(count_steps(p, -1, TFG_PLAN_COPY, -1), 1);
  ck_assert_int_eq(count_steps(p, 2, TFG_PLAN_COPY, h), 1);
  ck_assert_int_eq(p->nevents, 2);
  /* gpu:0: ... launch h, record 0; gpu:1: wait 0, copy, record 1, wait 1, launch */
  const tfg_plan_device *g0 = &p->dev[1], *g1 = &p->dev[2];
  int s = find_step(g0, TFG_PLAN_RECORD, 0);
  ck_assert_int_eq(g0->steps[s - 1].kind, TFG_PLAN_LAUNCH);
  ck_assert_int_eq(g0->steps[s - 1].node, h);
  ck_assert_int_eq(g0->steps[s].event, 0);
  ck_assert_int_eq(g1->steps[0].kind, TFG_PLAN_WAIT);
  ck_assert_int_eq(g1->steps[0].stream, 1);
  ck_assert_int_eq(g1->steps[0].event, 0);
  ck_assert_int_eq(g1->steps[1].kind, TFG_PLAN_COPY);
  ck_assert_int_eq(g1->steps[1].src, 1);
  ck_assert_int_eq(g1->steps[2].kind, TFG_PLAN_RECORD);
  ck_assert_int_eq(g1->steps[2].event, 1);
  /* one WAIT before the first reader only */
  ck_assert_int_eq(count_steps(p, 2, TFG_PLAN_WAIT, -1), 2);
  /* the sent h lives to the end of gpu:0's list; its copy to its last reader */
  const tfg_plan_buffer *hb = buffer_of(g0, h, false), *hc = buffer_of(g1, h, true);
  ck_assert_ptr_nonnull(hb);
  ck_assert_ptr_nonnull(hc);
  ck_assert_int_eq(hb->last, g0->nsteps - 1);
  ck_assert_int_eq(hc->first, 1);
  ck_assert_int_eq(g1->steps[hc->last].kind, TFG_PLAN_LAUNCH);
  ck_assert_int_eq(g1->steps[hc->last].node, last_op(b.p->graph, TFG_OP_MATMUL));
  char *text = print_plan(p);
  ck_assert_ptr_nonnull(strstr(text, "copy     copy    n"));
  ck_assert_ptr_nonnull(strstr(text, "relu (t.tfg:5) from gpu:0"));
  ck_assert_ptr_nonnull(strstr(text, "record  event 0 -> gpu:1 copy"));
  ck_assert_ptr_nonnull(strstr(text, "wait    event 1 <- gpu:1 copy"));
  free(text);
  unplan(&b);
}
END_TEST

START_TEST(parallel_branches) {
  planned b;
  build_ok(&b, "x = normal([8, 16], seed = 1)\na = relu(x)\nc = tanh(x)\ne = exp(x)\ny = a + c + e\nprint y\n",
           "host*2:64M");
  unplan(&b);
  /* pinned apart: x goes to both sides, the branches come back */
  build_ok(&b,
           "@gpu:0 x = normal([8, 16], seed = 1)\n@gpu:0 a = relu(x)\n@gpu:1 c = tanh(x)\n@gpu:1 e = exp(x)\n"
           "@gpu:0 y = a + c + e\nprint y\n",
           "host*2:64M");
  ck_assert_int_eq(count_steps(b.plan, 2, TFG_PLAN_COPY, last_op(b.p->graph, TFG_OP_INIT)), 1);
  ck_assert_int_eq(count_steps(b.plan, 1, TFG_PLAN_COPY, -1), 2);
  unplan(&b);
  /* one device: the three branches are live at once */
  build_ok(&b, "x = normal([8, 16], seed = 1)\na = relu(x)\nc = tanh(x)\ne = exp(x)\ny = a + c + e\nprint y\n",
           "host*1:64M");
  const tfg_plan_device *pd = &b.plan->dev[1];
  /* x (512 B), a, c, e at 512, 1024, 1536; x is read last by e, so a + c
   * takes x's place, and (a + c) + e the gap a and c leave: peak 4 * 512 */
  ck_assert_int_eq(pd->peak, 4 * 512);
  ck_assert_int_eq(pd->buffers[4].offset, 0);
  ck_assert_int_eq(pd->buffers[5].offset, 512);
  unplan(&b);
}
END_TEST

static const char TRAINING[] = "x = normal([8, 4], seed = 1)\n"
                               "y = tensor([0, 1, 2, 0, 1, 2, 0, 1], dtype = i32)\n"
                               "param w1: f32[4, 16] = normal(seed = 2)\n"
                               "param b1: f32[16]\n"
                               "param w2: f32[16, 3] = normal(seed = 3)\n"
                               "@gpu:0 h = relu(matmul(x, w1) + b1)\n"
                               "@gpu:1 logits = matmul(h, w2)\n"
                               "loss = cross_entropy(logits, y)\n"
                               "train loss { optimizer = adam(lr = 0.01); steps = 1 }\n";

START_TEST(training_step) {
  planned b;
  build_ok(&b, TRAINING, "host*2:64M");
  const tfg_plan *p = b.plan;
  const tfg_graph *g = b.p->graph;
  int persistent = 0, updates = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int i = 0; i < p->dev[d].nbuffers; i++) {
      const tfg_plan_buffer *bf = &p->dev[d].buffers[i];
      persistent += bf->persistent;
      updates += g->nodes[bf->node].op == TFG_OP_ADAM_UPDATE;
      if (i > 0 && bf->persistent) { /* first, in node order, packed upwards */
        ck_assert(p->dev[d].buffers[i - 1].persistent);
        ck_assert_int_lt(p->dev[d].buffers[i - 1].node, bf->node);
        ck_assert_int_eq(bf->offset, (p->dev[d].buffers[i - 1].offset + p->dev[d].buffers[i - 1].bytes + 255) / 256 * 256);
      }
    }
  ck_assert_int_eq(persistent, 3 + 2 * 3); /* three params, exp_avg and exp_avg_sq of each */
  ck_assert_int_eq(updates, 0);            /* updates have no buffer */
  /* every update is launched once, beside its param */
  for (int i = 0; i < b.steps[0].nparams; i++) {
    int dev = tfg_placement_device(b.pl, b.steps[0].params[i]);
    ck_assert_int_eq(count_steps(p, dev, TFG_PLAN_LAUNCH, b.steps[0].updates[i]), 1);
  }
  /* forward h to gpu:1, gradient back to gpu:0 */
  ck_assert_int_ge(count_steps(p, 1, TFG_PLAN_COPY, -1), 1);
  ck_assert_int_ge(count_steps(p, 2, TFG_PLAN_COPY, -1), 1);
  unplan(&b);
  /* unpinned on one device, with SGD and momentum (one state per param) */
  build_ok(&b,
           "x = normal([8, 4], seed = 1)\ny = tensor([0, 1, 2, 0, 1, 2, 0, 1], dtype = i32)\n"
           "param w1: f32[4, 16] = normal(seed = 2)\nparam w2: f32[16, 3] = normal(seed = 3)\n"
           "loss = cross_entropy(matmul(relu(matmul(x, w1)), w2), y)\n"
           "train loss { optimizer = sgd(lr = 0.1, momentum = 0.9); steps = 1 }\n",
           "host*1:64M");
  ck_assert_int_eq(count_steps(b.plan, -1, TFG_PLAN_COPY, -1), 0);
  /* w1 (256 B), w2 (192 B), then their momentum buffers, each at a multiple of 256 */
  ck_assert_int_eq(b.plan->dev[1].persistent_bytes, 4 * 256);
  ck_assert_int_eq(b.plan->dev[1].buffers[3].offset, 3 * 256);
  ck_assert_int_eq(b.plan->dev[1].buffers[3].bytes, 192);
  unplan(&b);
}
END_TEST

/* ---- exact offsets ------------------------------------------------------------ */

START_TEST(chain_offsets) {
  planned b;
  build_ok(&b, "param w: f32[10]\nx = zeros([10, 10])\nh = x * w\ny = sum(h)\nprint y\n", "host*1:64M");
  const tfg_plan_device *pd = &b.plan->dev[1];
  /* w: 40 B, persistent at 0 (the region rounds up to 256); x: 400 B at
   * 256, steps 0-1; h: 400 B, x is live at step 1 -> the top, 768; y: 4 B
   * at step 2, x is gone -> the gap [256, 768). Peak 768 + 400. */
  ck_assert_int_eq(pd->nsteps, 3);
  ck_assert_int_eq(pd->nbuffers, 4);
  ck_assert_int_eq(pd->persistent_bytes, 256);
  ck_assert_int_eq(pd->peak, 1168);
  const int64_t want[4][4] = {{0, 40, 0, 2}, {256, 400, 0, 1}, {768, 400, 1, 2}, {256, 4, 2, 2}};
  for (int i = 0; i < 4; i++) {
    const tfg_plan_buffer *bf = &pd->buffers[i];
    ck_assert_int_eq(bf->node, i);
    ck_assert_int_eq(bf->offset, want[i][0]);
    ck_assert_int_eq(bf->bytes, want[i][1]);
    ck_assert_int_eq(bf->first, want[i][2]);
    ck_assert_int_eq(bf->last, want[i][3]);
  }
  char *text = print_plan(b.plan);
  const char *golden = "plan: 2 devices, 0 copies, 0 events\n"
                       "\n"
                       "cpu:0: 2 streams (0 compute, 1 copy-in), 0 steps, 0 buffers, persistent 0 B, peak 0 B (0 bytes)\n"
                       "\n"
                       "gpu:0: 2 streams (0 compute, 1 copy-in), 3 steps, 4 buffers, persistent 256 B, peak 1.1 KiB (1168 bytes)\n"
                       "   step  stream   kind    what\n"
                       "      0  compute  launch  n1 init (t.tfg:2)\n"
                       "      1  compute  launch  n2 mul (t.tfg:3)\n"
                       "      2  compute  launch  n3 sum (t.tfg:4)\n"
                       "      offset       bytes  live         tensor\n"
                       "           0          40  always       n0 param w (t.tfg:1), persistent\n"
                       "         256         400  0-1          n1 init (t.tfg:2)\n"
                       "         768         400  1-2          n2 mul (t.tfg:3)\n"
                       "         256           4  2-2          n3 sum (t.tfg:4)\n";
  ck_assert_str_eq(text, golden);
  free(text);
  unplan(&b);
}
END_TEST

START_TEST(best_fit) {
  planned b;
  /* a 256 at 0, b 512 at 256, c 256 at 768, d 256 at 1024, e 256 at 1280,
   * f = concat(b, d) 768 on top at 1536; then b and d are free: gaps of 512
   * at 256 and 256 at 1024: g (256) takes the smaller, not the lower.
   * f and g are read by nothing: results, live to the end. At h only a, b
   * and d are gone: one gap of 768 at 0, and h takes 0. */
  build_ok(&b,
           "a = zeros([64])\nb = zeros([128])\nc = zeros([64])\nd = zeros([64])\ne = zeros([64])\n"
           "f = concat([b, d])\ng = neg(a)\nh = c + e\nprint f, g, h\n",
           "host*1:64M");
  const tfg_plan_device *pd = &b.plan->dev[1];
  const int64_t want[] = {0, 256, 768, 1024, 1280, 1536, 1024, 0};
  ck_assert_int_eq(pd->nbuffers, 8);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(pd->buffers[i].offset, want[i]);
  ck_assert_int_eq(pd->peak, 1536 + 768);
  unplan(&b);
  /* a tie: b and d leave two gaps of 256 between a, c and e, all live
   * (c and e are read later): g takes the lower */
  build_ok(&b,
           "a = zeros([64])\nb = zeros([64])\nc = zeros([64])\nd = zeros([64])\ne = zeros([64])\n"
           "f = b + d\ng = neg(a)\nh = c + e\nprint f, g, h\n",
           "host*1:64M");
  pd = &b.plan->dev[1];
  ck_assert_int_eq(pd->buffers[5].offset, 1280);
  ck_assert_int_eq(pd->buffers[6].offset, 256);
  unplan(&b);
}
END_TEST

/* ---- the validator catches broken plans --------------------------------------------- */

START_TEST(validator_catches) {
  planned b;
  /* the compute stream's WAIT for the copy */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_WAIT, 0));
  expect_invalid(b.plan, "without waiting for it");
  unplan(&b);
  /* the copy stream's WAIT for the producer */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_WAIT, 1));
  expect_invalid(b.plan, "before gpu:0 has computed it");
  unplan(&b);
  /* the COPY */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_COPY, 1));
  expect_invalid(b.plan, "not copied in");
  unplan(&b);
  /* a RECORD */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[1], find_step(&b.plan->dev[1], TFG_PLAN_RECORD, 0));
  expect_invalid(b.plan, "gpu:1 step 0: waits on event 0, which is never recorded");
  unplan(&b);
  /* an event waited on before it is recorded: the copy stream waits on
   * the event it records itself after the copy */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  b.plan->dev[2].steps[0].event = 1;
  expect_invalid(b.plan, "which can never be recorded before it");
  unplan(&b);

  /* a LAUNCH */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_LAUNCH, 0));
  expect_invalid(b.plan, "n6 matmul (t.tfg:6) is never launched (it is placed on gpu:1)");
  unplan(&b);
  /* two launches out of graph order */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  {
    tfg_plan_device *g1 = &b.plan->dev[2];
    int s = find_step(g1, TFG_PLAN_LAUNCH, 0);
    tfg_plan_step t = g1->steps[s];
    g1->steps[s] = g1->steps[s + 1];
    g1->steps[s + 1] = t;
    expect_invalid(b.plan, "gpu:1 step 5: n6 matmul (t.tfg:6) is launched after n7 matmul (t.tfg:7), out of graph order");
  }
  unplan(&b);
  /* a RECORD nobody waits on */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  {
    tfg_plan_device *g0 = &b.plan->dev[1];
    g0->steps = realloc(g0->steps, sizeof *g0->steps * (size_t)(g0->nsteps + 1));
    g0->steps[g0->nsteps++] = (tfg_plan_step){.kind = TFG_PLAN_RECORD, .node = -1, .src = -1, .event = b.plan->nevents++};
    expect_invalid(b.plan, "event 2 (recorded on gpu:0 step 4) is never waited on");
  }
  unplan(&b);

  /* two live buffers overlapping; a wrong peak */
  const char *chain = "param w: f32[10]\nx = zeros([10, 10])\nh = x * w\ny = sum(h)\nprint y\n";
  build_ok(&b, chain, "host*1:64M");
  b.plan->dev[1].buffers[2].offset = 512; /* h over x (both live at step 1) */
  b.plan->dev[1].peak = 912;
  expect_invalid(b.plan, "gpu:0: the buffers of n1 init (t.tfg:2) [256, 656) and n2 mul (t.tfg:3) [512, 912) overlap");
  b.plan->dev[1].buffers[2].offset = 768;
  b.plan->dev[1].buffers[3].offset = 256 + 512; /* y over h: both live at step 2 */
  expect_invalid(b.plan, "overlap while both are live (from step 2)");
  b.plan->dev[1].buffers[3].offset = 256;
  b.plan->dev[1].peak = 1168;
  expect_valid(b.plan);
  b.plan->dev[1].peak = 2048;
  expect_invalid(b.plan, "gpu:0: the peak is 2048 bytes but the highest buffer end is 1168");
  b.plan->dev[1].peak = 1168;
  /* a buffer freed before its last read */
  b.plan->dev[1].buffers[1].last = 0;
  expect_invalid(b.plan, "gpu:0 step 1: n2 mul (t.tfg:3) reads n1 init (t.tfg:2), whose buffer lives only at steps 0-0");
  b.plan->dev[1].buffers[1].last = 1;
  /* a persistent buffer in the activations' way */
  b.plan->dev[1].buffers[1].offset = 0;
  expect_invalid(b.plan, "inside the persistent region");
  b.plan->dev[1].buffers[1].offset = 256;
  expect_valid(b.plan);
  unplan(&b);

  /* a sent tensor freed early on its own device */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  tfg_plan_device *g0 = &b.plan->dev[1];
  for (int i = 0; i < g0->nbuffers; i++)
    if (g0->buffers[i].node == last_op(b.p->graph, TFG_OP_RELU)) g0->buffers[i].last = g0->buffers[i].first;
  expect_invalid(b.plan, "a tensor sent elsewhere lives to the end");
  unplan(&b);
}
END_TEST

/* ---- out of memory -------------------------------------------------------------------- */

START_TEST(out_of_memory) {
  planned b;
  plan_program(&b, "x = zeros([64, 1])\nw = zeros([1, 64])\ny = matmul(x, w)\nprint y\n", "host*1:1K");
  ck_assert_int_eq(b.st, TFG_ERR_OOM);
  ck_assert_ptr_null(b.plan);
  ck_assert_msg(strstr(b.errs, "t.tfg:3:5: error: out of memory on gpu:0: matmul needs 16.0 KiB for its output but only "
                               "512 B is available") != NULL,
                "%s", b.errs);
  ck_assert_msg(strstr(b.errs, "note: gpu:0 has 1.0 KiB: 0 B persistent, 512 B held by 2 tensors live at this step") != NULL,
                "%s", b.errs);
  unplan(&b);
}
END_TEST

/* ---- scale ------------------------------------------------------------------------------ */

/* A chain of n relus (after one input) built straight into a graph, or,
 * wide, n relus of one input summed pairwise in a second half. */
static tfg_graph *big_graph(int n, bool wide) {
  tfg_graph *g = tfg_graph_new();
  tfg_loc loc = {0};
  tfg_node_id x = tfg_graph_add(g, TFG_OP_INIT, NULL, 0, &loc);
  tfg_graph_node(g, x)->dtype = TFG_DTYPE_F32;
  tfg_graph_node(g, x)->shape = (tfg_shape){1, {64}};
  tfg_node_id prev = x;
  int first = g->nnodes;
  for (int i = 0; i < n; i++) {
    tfg_node_id in[2] = {wide ? x : prev, 0};
    int nin = 1;
    tfg_op_id op = TFG_OP_RELU;
    if (wide && i >= n / 2) { /* the second half adds up the first */
      in[0] = i == n / 2 ? first : prev;
      in[1] = first + (i - n / 2);
      nin = 2;
      op = TFG_OP_ADD;
    }
    prev = tfg_graph_add(g, op, in, nin, &loc);
    tfg_graph_node(g, prev)->dtype = TFG_DTYPE_F32;
    tfg_graph_node(g, prev)->shape = (tfg_shape){1, {64}};
  }
  return g;
}

static void plan_big(int n, bool wide, const char *devices) {
  tfg_graph *g = big_graph(n, wide);
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  ck_assert_int_eq(tfg_devices_parse(d, devices, &ds), TFG_OK);
  tfg_placement *pl = NULL;
  ck_assert_int_eq(tfg_place(g, ds, NULL, 0, NULL, d, &pl), TFG_OK);
  tfg_plan *p = NULL;
  ck_assert_int_eq(tfg_plan_build(g, pl, ds, d, &p), TFG_OK);
  expect_valid(p);
  int steps = 0;
  for (int i = 0; i < p->ndev; i++) steps += p->dev[i].nsteps;
  ck_assert_int_ge(steps, n + 1);
  tfg_plan_free(p);
  tfg_placement_free(pl);
  tfg_devices_free(ds);
  tfg_diag_free(d);
  tfg_graph_free(g);
}

/* A random DAG of n ops with random sizes: each reads one or two earlier
 * values of the same shape, or starts a new shape class. */
static tfg_graph *random_graph(int n, unsigned seed) {
  tfg_graph *g = tfg_graph_new();
  tfg_loc loc = {0};
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned r = seed >> 8;
    tfg_node_id in[2];
    int nin = 0;
    tfg_op_id op = TFG_OP_INIT;
    if (i > 0 && r % 5) { /* mostly ops that read recent values */
      in[0] = i - 1 - (tfg_node_id)((r >> 4) % (unsigned)(i < 12 ? i : 12));
      op = TFG_OP_RELU;
      nin = 1;
      for (int back = 1; back <= i && back < 16; back++) {
        tfg_node_id c = i - back;
        if (c != in[0] && tfg_shape_eq(&g->nodes[c].shape, &g->nodes[in[0]].shape) && (r >> 10) % 2) {
          in[1] = c;
          nin = 2;
          op = TFG_OP_ADD;
          break;
        }
      }
    }
    tfg_node_id id = tfg_graph_add(g, op, in, nin, &loc);
    tfg_node *nd = tfg_graph_node(g, id);
    nd->dtype = TFG_DTYPE_F32;
    nd->shape = nin ? g->nodes[in[0]].shape : (tfg_shape){1, {1 + (int64_t)((r >> 12) % 700)}};
  }
  return g;
}

/* The best-fit rule of plan.h, the slow obvious way: for each buffer in
 * order, the buffers placed before it and still live at its first step,
 * sorted by offset; the smallest gap between them that fits, else the top. */
static void check_best_fit(const tfg_plan_device *pd) {
  int nb = pd->nbuffers;
  int64_t *want = calloc((size_t)nb + 1, sizeof *want);
  int *live = calloc((size_t)nb + 1, sizeof *live);
  for (int i = 0; i < nb; i++) {
    const tfg_plan_buffer *bf = &pd->buffers[i];
    if (bf->persistent) {
      want[i] = bf->offset;
      continue;
    }
    int nl = 0;
    for (int j = 0; j < i; j++)
      if (!pd->buffers[j].persistent && pd->buffers[j].last >= bf->first) live[nl++] = j;
    for (int a = 1; a < nl; a++) /* insertion sort by offset */
      for (int c = a; c > 0 && want[live[c]] < want[live[c - 1]]; c--) {
        int t = live[c];
        live[c] = live[c - 1];
        live[c - 1] = t;
      }
    int64_t need = (bf->bytes + 255) / 256 * 256, below = pd->persistent_bytes, best = -1, best_gap = 0;
    for (int k = 0; k < nl; k++) {
      int64_t gap = want[live[k]] - below;
      if (gap >= need && (best < 0 || gap < best_gap)) {
        best = below;
        best_gap = gap;
      }
      below = (want[live[k]] + pd->buffers[live[k]].bytes + 255) / 256 * 256;
    }
    want[i] = best >= 0 ? best : below;
    ck_assert_msg(bf->offset == want[i], "buffer %d: offset %lld, the rule gives %lld", i, (long long)bf->offset,
                  (long long)want[i]);
  }
  free(want);
  free(live);
}

START_TEST(random_graphs) {
  const char *specs[] = {"host*1:64M", "host*3:64M"};
  for (unsigned seed = 1; seed <= 40; seed++) {
    tfg_graph *g = random_graph(300, seed);
    tfg_diag *d = tfg_diag_new();
    tfg_devices *ds = NULL;
    ck_assert_int_eq(tfg_devices_parse(d, specs[seed % 2], &ds), TFG_OK);
    tfg_placement *pl = NULL;
    ck_assert_int_eq(tfg_place(g, ds, NULL, 0, NULL, d, &pl), TFG_OK);
    tfg_plan *p = NULL;
    ck_assert_int_eq(tfg_plan_build(g, pl, ds, d, &p), TFG_OK);
    expect_valid(p);
    for (int i = 0; i < p->ndev; i++) check_best_fit(&p->dev[i]);
    tfg_plan_free(p);
    tfg_placement_free(pl);
    tfg_devices_free(ds);
    tfg_diag_free(d);
    tfg_graph_free(g);
  }
}
END_TEST

START_TEST(scale) {
  plan_big(10000, false, "host*1:64M");
  plan_big(10000, true, "host*1:64M");
  plan_big(10000, true, "host*4:64M");
  plan_big(100000, false, "host*1:64M");
}
END_TEST

Suite *suite_plan(void) {
  Suite *s = suite_create("plan");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, single_device);
  tcase_add_test(tc, model_parallel_one_copy);
  tcase_add_test(tc, parallel_branches);
  tcase_add_test(tc, training_step);
  tcase_add_test(tc, chain_offsets);
  tcase_add_test(tc, best_fit);
  tcase_add_test(tc, validator_catches);
  tcase_add_test(tc, out_of_memory);
  tcase_add_test(tc, random_graphs);
  tcase_add_test(tc, scale);
  suite_add_tcase(s, tc);
  return s;
}
