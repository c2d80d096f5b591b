/* tests/unit/test_plan.c: the planner through the real pipeline: programs
 * are parsed, evaluated, given their training steps, placed and planned;
 * every plan must pass the validator. Then exact offsets and peaks checked
 * by hand, best fit's choices, the validator catching broken plans, the
 * out-of-memory error, and graphs of 10,000 and 100,000 ops. Collectives
 * on graphs built by hand (replicas' gradients, ALLREDUCE nodes, their
 * readers, pinned per replica): buckets, their steps and events, and the
 * validator catching broken ones; copies ordered after the compute
 * steps that last used their memory; and updates ordered after the
 * copies of what they overwrite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* Builds text with its train steps, placed with tfg_place over devices
 * and planned: the plan may fail (b->st, b->errs), the stages before not. */
static void plan_program(built *b, const char *text, const char *devices) {
  program_build(b, text, &(build_opts){.steps = BUILT_MAX_STEPS, .devices = devices});
}

static void build_ok(built *b, const char *text, const char *devices) {
  plan_program(b, text, devices);
  ck_assert_msg(b->st == TFG_OK, "%s", b->errs);
  plan_show(b->plan);
  plan_expect_valid(b->plan);
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
  built b;
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
  program_free(&b);
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
  built b;
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  const tfg_plan *p = b.plan;
  tfg_node_id h = graph_last_op(b.p->graph, TFG_OP_RELU);
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
  ck_assert_int_eq(g1->steps[hc->last].node, graph_last_op(b.p->graph, TFG_OP_MATMUL));
  char *text = plan_text(p);
  ck_assert_ptr_nonnull(strstr(text, "copy     copy    n"));
  ck_assert_ptr_nonnull(strstr(text, "relu (t.tfg:5) from gpu:0"));
  ck_assert_ptr_nonnull(strstr(text, "record  event 0 -> gpu:1 copy"));
  ck_assert_ptr_nonnull(strstr(text, "wait    event 1 <- gpu:1 copy"));
  free(text);
  program_free(&b);
}
END_TEST

START_TEST(parallel_branches) {
  built b;
  build_ok(&b, "x = normal([8, 16], seed = 1)\na = relu(x)\nc = tanh(x)\ne = exp(x)\ny = a + c + e\nprint y\n",
           "host*2:64M");
  program_free(&b);
  /* pinned apart: x goes to both sides, the branches come back */
  build_ok(&b,
           "@gpu:0 x = normal([8, 16], seed = 1)\n@gpu:0 a = relu(x)\n@gpu:1 c = tanh(x)\n@gpu:1 e = exp(x)\n"
           "@gpu:0 y = a + c + e\nprint y\n",
           "host*2:64M");
  ck_assert_int_eq(count_steps(b.plan, 2, TFG_PLAN_COPY, graph_last_op(b.p->graph, TFG_OP_INIT)), 1);
  ck_assert_int_eq(count_steps(b.plan, 1, TFG_PLAN_COPY, -1), 2);
  program_free(&b);
  /* one device: the three branches are live at once */
  build_ok(&b, "x = normal([8, 16], seed = 1)\na = relu(x)\nc = tanh(x)\ne = exp(x)\ny = a + c + e\nprint y\n",
           "host*1:64M");
  const tfg_plan_device *pd = &b.plan->dev[1];
  /* x (512 B), a, c, e at 512, 1024, 1536; x is read last by e, so a + c
   * takes x's place, and (a + c) + e the gap a and c leave: peak 4 * 512 */
  ck_assert_int_eq(pd->peak, 4 * 512);
  ck_assert_int_eq(pd->buffers[4].offset, 0);
  ck_assert_int_eq(pd->buffers[5].offset, 512);
  program_free(&b);
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
  built b;
  build_ok(&b, TRAINING, "host*2:64M");
  const tfg_plan *p = b.plan;
  const tfg_graph *g = b.p->graph;
  int persistent = 0, constants = 0, updates = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int i = 0; i < p->dev[d].nbuffers; i++) {
      const tfg_plan_buffer *bf = &p->dev[d].buffers[i];
      bool is_const = g->nodes[bf->node].op == TFG_OP_CONST;
      ck_assert(!is_const || bf->persistent); /* a constant is written once, never per step */
      persistent += bf->persistent && !is_const;
      constants += is_const;
      updates += g->nodes[bf->node].op == TFG_OP_ADAM_UPDATE;
      if (i > 0 && bf->persistent) { /* first, in node order, packed upwards */
        ck_assert(p->dev[d].buffers[i - 1].persistent);
        ck_assert_int_lt(p->dev[d].buffers[i - 1].node, bf->node);
        ck_assert_int_eq(bf->offset, (p->dev[d].buffers[i - 1].offset + p->dev[d].buffers[i - 1].bytes + 255) / 256 * 256);
      }
    }
  ck_assert_int_eq(persistent, 3 + 2 * 3); /* three params, exp_avg and exp_avg_sq of each */
  ck_assert_int_ge(constants, 1);          /* the labels y at least */
  ck_assert_int_eq(updates, 0);            /* updates have no buffer */
  /* every update is launched once, beside its param */
  for (int i = 0; i < b.steps[0].nparams; i++) {
    int dev = tfg_placement_device(b.pl, b.steps[0].params[i]);
    ck_assert_int_eq(count_steps(p, dev, TFG_PLAN_LAUNCH, b.steps[0].updates[i]), 1);
  }
  /* forward h to gpu:1, gradient back to gpu:0 */
  ck_assert_int_ge(count_steps(p, 1, TFG_PLAN_COPY, -1), 1);
  ck_assert_int_ge(count_steps(p, 2, TFG_PLAN_COPY, -1), 1);
  program_free(&b);
  /* unpinned on one device, with SGD and momentum (one state per param) */
  build_ok(&b,
           "x = normal([8, 4], seed = 1)\ny = tensor([0, 1, 2, 0, 1, 2, 0, 1], dtype = i32)\n"
           "param w1: f32[4, 16] = normal(seed = 2)\nparam w2: f32[16, 3] = normal(seed = 3)\n"
           "loss = cross_entropy(matmul(relu(matmul(x, w1)), w2), y)\n"
           "train loss { optimizer = sgd(lr = 0.1, momentum = 0.9); steps = 1 }\n",
           "host*1:64M");
  ck_assert_int_eq(count_steps(b.plan, -1, TFG_PLAN_COPY, -1), 0);
  /* w1 (256 B), w2 (192 B), their momentum buffers and two constants (the
   * labels y, the loss's seed gradient), each at a multiple of 256, in
   * node order: the momentum of w2 last */
  ck_assert_int_eq(b.plan->dev[1].persistent_bytes, 6 * 256);
  ck_assert_int_eq(b.plan->dev[1].buffers[5].offset, 5 * 256);
  ck_assert_int_eq(b.plan->dev[1].buffers[5].bytes, 192);
  ck_assert_int_eq(b.p->graph->nodes[b.plan->dev[1].buffers[5].node].op, TFG_OP_STATE);
  program_free(&b);
}
END_TEST

/* ---- exact offsets ------------------------------------------------------------ */

START_TEST(chain_offsets) {
  built b;
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
  /* at its fullest, step 1: w (40 B, a param), x and h (400 B each,
   * activations) live together; the peak's other 328 B are the region's
   * rounding of w up to 256 and the gap h's offset leaves */
  tfg_plan_memory m;
  tfg_plan_memory_of(b.plan, 1, &m);
  ck_assert_int_eq(m.step, 1);
  ck_assert_int_eq(m.params, 40);
  ck_assert_int_eq(m.activations, 800);
  ck_assert_int_eq(m.grads + m.state, 0);
  ck_assert_int_eq(m.gaps, 1168 - 840);
  char *text = plan_text(b.plan);
  const char *golden = "plan: 2 devices, 0 copies, 0 events\n"
                       "\n"
                       "cpu:0: 2 streams (0 compute, 1 copy-in), 0 steps, 0 buffers, persistent 0 B, peak 0 B (0 bytes)\n"
                       "\n"
                       "gpu:0: 2 streams (0 compute, 1 copy-in), 3 steps, 4 buffers, persistent 256 B, peak 1.1 KiB (1168 bytes)\n"
                       "  at its fullest (step 1): params 40 B, gradients 0 B, optimizer state 0 B, activations 800 B, free gaps 328 B\n"
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
  program_free(&b);
}
END_TEST

START_TEST(best_fit) {
  built b;
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
  program_free(&b);
  /* a tie: b and d leave two gaps of 256 between a, c and e, all live
   * (c and e are read later): g takes the lower */
  build_ok(&b,
           "a = zeros([64])\nb = zeros([64])\nc = zeros([64])\nd = zeros([64])\ne = zeros([64])\n"
           "f = b + d\ng = neg(a)\nh = c + e\nprint f, g, h\n",
           "host*1:64M");
  pd = &b.plan->dev[1];
  ck_assert_int_eq(pd->buffers[5].offset, 1280);
  ck_assert_int_eq(pd->buffers[6].offset, 256);
  program_free(&b);
}
END_TEST

/* ---- the validator catches broken plans --------------------------------------------- */

START_TEST(validator_catches) {
  built b;
  /* the compute stream's WAIT for the copy */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_WAIT, 0));
  plan_expect_invalid(b.plan, "without waiting for it");
  program_free(&b);
  /* the copy stream's WAIT for the producer */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_WAIT, 1));
  plan_expect_invalid(b.plan, "before gpu:0 has computed it");
  program_free(&b);
  /* the COPY */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_COPY, 1));
  plan_expect_invalid(b.plan, "not copied in");
  program_free(&b);
  /* a RECORD */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[1], find_step(&b.plan->dev[1], TFG_PLAN_RECORD, 0));
  plan_expect_invalid(b.plan, "gpu:1 step 0: waits on event 0, which is never recorded");
  program_free(&b);
  /* an event waited on before it is recorded: the copy stream waits on
   * the event it records itself after the copy */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  b.plan->dev[2].steps[0].event = 1;
  plan_expect_invalid(b.plan, "which can never be recorded before it");
  program_free(&b);

  /* a LAUNCH */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  remove_step(&b.plan->dev[2], find_step(&b.plan->dev[2], TFG_PLAN_LAUNCH, 0));
  plan_expect_invalid(b.plan, "n6 matmul (t.tfg:6) is never launched (it is placed on gpu:1)");
  program_free(&b);
  /* two launches out of graph order */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  {
    tfg_plan_device *g1 = &b.plan->dev[2];
    int s = find_step(g1, TFG_PLAN_LAUNCH, 0);
    tfg_plan_step t = g1->steps[s];
    g1->steps[s] = g1->steps[s + 1];
    g1->steps[s + 1] = t;
    plan_expect_invalid(b.plan,
                        "gpu:1 step 5: n6 matmul (t.tfg:6) is launched after n7 matmul (t.tfg:7), out of graph order");
  }
  program_free(&b);
  /* a RECORD nobody waits on */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  {
    tfg_plan_device *g0 = &b.plan->dev[1];
    g0->steps = realloc(g0->steps, sizeof *g0->steps * (size_t)(g0->nsteps + 1));
    g0->steps[g0->nsteps++] = (tfg_plan_step){.kind = TFG_PLAN_RECORD, .node = -1, .src = -1, .event = b.plan->nevents++};
    plan_expect_invalid(b.plan, "event 2 (recorded on gpu:0 step 4) is never waited on");
  }
  program_free(&b);

  /* two live buffers overlapping; a wrong peak */
  const char *chain = "param w: f32[10]\nx = zeros([10, 10])\nh = x * w\ny = sum(h)\nprint y\n";
  build_ok(&b, chain, "host*1:64M");
  b.plan->dev[1].buffers[2].offset = 512; /* h over x (both live at step 1) */
  b.plan->dev[1].peak = 912;
  plan_expect_invalid(b.plan,
                      "gpu:0: the buffers of n1 init (t.tfg:2) [256, 656) and n2 mul (t.tfg:3) [512, 912) overlap");
  b.plan->dev[1].buffers[2].offset = 768;
  b.plan->dev[1].buffers[3].offset = 256 + 512; /* y over h: both live at step 2 */
  plan_expect_invalid(b.plan, "overlap while both are live (from step 2)");
  b.plan->dev[1].buffers[3].offset = 256;
  b.plan->dev[1].peak = 1168;
  plan_expect_valid(b.plan);
  b.plan->dev[1].peak = 2048;
  plan_expect_invalid(b.plan, "gpu:0: the peak is 2048 bytes but the highest buffer end is 1168");
  b.plan->dev[1].peak = 1168;
  /* a buffer freed before its last read */
  b.plan->dev[1].buffers[1].last = 0;
  plan_expect_invalid(b.plan,
                      "gpu:0 step 1: n2 mul (t.tfg:3) reads n1 init (t.tfg:2), whose buffer lives only at steps 0-0");
  b.plan->dev[1].buffers[1].last = 1;
  /* a persistent buffer in the activations' way */
  b.plan->dev[1].buffers[1].offset = 0;
  plan_expect_invalid(b.plan, "inside the persistent region");
  b.plan->dev[1].buffers[1].offset = 256;
  plan_expect_valid(b.plan);
  program_free(&b);

  /* a sent tensor freed early on its own device */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  tfg_plan_device *g0 = &b.plan->dev[1];
  for (int i = 0; i < g0->nbuffers; i++)
    if (g0->buffers[i].node == graph_last_op(b.p->graph, TFG_OP_RELU)) g0->buffers[i].last = g0->buffers[i].first;
  plan_expect_invalid(b.plan, "a tensor sent elsewhere lives until one, or to the end");
  program_free(&b);
}
END_TEST

/* ---- collectives ------------------------------------------------------------------ */

/* A graph built by hand, placed by its pins and planned. */
typedef struct handmade {
  tfg_graph *g;
  tfg_diag *d;
  tfg_devices *ds;
  tfg_placement *pl;
  tfg_plan *plan;
} handmade;

/* Adds an op with a 1-d output of numel elements of dtype dt, pinned to gpu:gpu. */
static tfg_node_id hand_node(tfg_graph *g, tfg_op_id op, const tfg_node_id *in, int nin, tfg_dtype dt, int64_t numel,
                             int gpu) {
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(g, op, in, nin, &loc);
  tfg_node *nd = tfg_graph_node(g, id);
  nd->dtype = dt;
  nd->shape = (tfg_shape){1, {numel}};
  nd->pin = (tfg_devspec){.kind = TFG_DEV_GPU, .index = gpu};
  return id;
}

/* The ALLREDUCE node of key `key` in a group of n, reading grad, where grad's replica is. */
static tfg_node_id hand_allreduce(tfg_graph *g, tfg_node_id grad, int64_t key, int n, int gpu) {
  const tfg_node *gn = &g->nodes[grad];
  tfg_node_id id = hand_node(g, TFG_OP_ALLREDUCE, &grad, 1, gn->dtype, tfg_shape_numel(&gn->shape), gpu);
  tfg_graph_node(g, id)->attrs.n = n;
  tfg_graph_node(g, id)->attrs.key = key;
  return id;
}

static void hand_plan(handmade *h, const char *devices, int64_t bucket_bytes) {
  h->d = tfg_diag_new();
  ck_assert_int_eq(tfg_devices_parse(h->d, devices, &h->ds), TFG_OK);
  tfg_compiled c;
  ck_assert_int_eq(tfg_compile_graph(h->g, h->ds, NULL, 0, &(tfg_compile_opts){.bucket_bytes = bucket_bytes}, h->d, &c),
                   TFG_OK);
  h->pl = c.pl;
  h->plan = c.plan;
  if (getenv("TFG_TEST_SHOW_PLAN")) {
    char *shown = plan_text(h->plan);
    fprintf(stderr, "%s----\n", shown);
    free(shown);
  }
  plan_expect_valid(h->plan);
}

static void hand_free(handmade *h) {
  tfg_plan_free(h->plan);
  tfg_placement_free(h->pl);
  tfg_devices_free(h->ds);
  tfg_diag_free(h->d);
  tfg_graph_free(h->g);
  memset(h, 0, sizeof *h);
}

/* Data parallel as the mirrored strategy builds it: replica r (on
 * gpu:r) computes its P gradients (numel[i] f32 elements each, the i-th
 * for key P - 1 - i: backward runs from the last param), then every
 * replica gets its ALLREDUCE nodes, then an update (neg) reads each.
 * grads, ars and upd are [R * P], replica-major. */
static tfg_graph *ddp_graph(int R, int P, const int64_t *numel, tfg_node_id *grads, tfg_node_id *ars, tfg_node_id *upd) {
  tfg_graph *g = tfg_graph_new();
  for (int r = 0; r < R; r++)
    for (int i = 0; i < P; i++) grads[r * P + i] = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, numel[i], r);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < P; i++) ars[r * P + i] = hand_allreduce(g, grads[r * P + i], P - 1 - i, R, r);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < P; i++) upd[r * P + i] = hand_node(g, TFG_OP_NEG, &ars[r * P + i], 1, TFG_DTYPE_F32, numel[i], r);
  return g;
}

/* The index of device d's step with this kind and node (or bucket, for
 * an ALLREDUCE), or -1. */
static int step_of_node(const tfg_plan_device *pd, tfg_plan_step_kind kind, int what) {
  for (int s = 0; s < pd->nsteps; s++)
    if (pd->steps[s].kind == kind && (kind == TFG_PLAN_ALLREDUCE ? pd->steps[s].bucket : pd->steps[s].node) == what)
      return s;
  return -1;
}

/* The step of device pd that records event e, or -1. */
static int record_of(const tfg_plan_device *pd, int e) {
  for (int s = 0; s < pd->nsteps; s++)
    if (pd->steps[s].kind == TFG_PLAN_RECORD && pd->steps[s].event == e) return s;
  return -1;
}

/* The bucket tests' graph: two replicas (gpu:0, gpu:1) of six gradients,
 * planned with a cap of 4096. Bytes 1000, 1000, 3000, 500, 8000, 200
 * make four buckets: [k5 k4] (the next would pass the cap), [k3 k2], [k1]
 * alone (over the cap by itself), [k0]. grads, ars and upd are [12]. */
static void four_buckets(handmade *h, tfg_node_id *grads, tfg_node_id *ars, tfg_node_id *upd) {
  static const int64_t numel[6] = {250, 250, 750, 125, 2000, 50};
  *h = (handmade){.g = ddp_graph(2, 6, numel, grads, ars, upd)};
  hand_plan(h, "host*2:64M", 4096);
}

START_TEST(buckets_form) {
  tfg_node_id grads[12], ars[12], upd[12];
  handmade h;
  four_buckets(&h, grads, ars, upd);
  const tfg_plan *p = h.plan;
  ck_assert_int_eq(p->bucket_bytes, 4096);
  ck_assert_int_eq(p->nbuckets, 4);
  const int want_keys[4][2] = {{5, 4}, {3, 2}, {1, -1}, {0, -1}};
  const int64_t want_bytes[4] = {2000, 3500, 8000, 200};
  for (int b = 0; b < 4; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    ck_assert_int_eq(pb->nranks, 2);
    ck_assert_int_eq(pb->devices[0], 1); /* gpu:0, gpu:1: ranks in device order */
    ck_assert_int_eq(pb->devices[1], 2);
    ck_assert_int_eq(pb->nnodes, want_keys[b][1] < 0 ? 1 : 2);
    ck_assert_int_eq(pb->bytes, want_bytes[b]);
    for (int k = 0; k < pb->nnodes; k++)
      for (int r = 0; r < 2; r++) {
        tfg_node_id x = pb->nodes[r * pb->nnodes + k];
        ck_assert_int_eq(h.g->nodes[x].attrs.key, want_keys[b][k]);
        ck_assert_int_eq(x, ars[r * 6 + (5 - want_keys[b][k])]);
      }
  }
  /* the default cap puts them all in one bucket */
  tfg_plan *q = NULL;
  ck_assert_int_eq(tfg_plan_build(h.g, h.pl, h.ds, h.d, &q), TFG_OK);
  ck_assert_int_eq(q->bucket_bytes, TFG_PLAN_BUCKET_BYTES);
  ck_assert_int_eq(q->nbuckets, 1);
  ck_assert_int_eq(q->buckets[0].nnodes, 6);
  ck_assert_int_eq(q->buckets[0].bytes, 13700);
  plan_expect_valid(q);
  char *text = plan_text(q);
  ck_assert_ptr_nonnull(strstr(text, "plan: 3 devices, 0 copies, 4 events, 1 bucket\n"));
  ck_assert_ptr_nonnull(strstr(text, "gpu:0: 3 streams (0 compute, 1 copy-in, 2 collective)"));
  ck_assert_ptr_nonnull(strstr(text, "collective  allreduce  bucket 0: 6 tensors, 13.4 KiB, ranks gpu:0 gpu:1\n"));
  ck_assert_ptr_nonnull(strstr(text, "collective  record     event 1 -> gpu:0 compute\n"));
  ck_assert_ptr_nonnull(strstr(text, "buckets: 1, cap 25.0 MiB"));
  free(text);
  tfg_plan_free(q);
  hand_free(&h);
}
END_TEST

START_TEST(bucket_steps) {
  tfg_node_id grads[12], ars[12], upd[12];
  handmade h;
  four_buckets(&h, grads, ars, upd);
  const tfg_plan *p = h.plan;
  const int last_grad[4] = {1, 3, 4, 5}; /* bucket b's last gradient, by production */
  for (int r = 0; r < 2; r++) {
    const tfg_plan_device *pd = &p->dev[1 + r];
    int prev = -1;
    for (int b = 0; b < 4; b++) {
      /* right after the LAUNCH of its last gradient: RECORD ev1 (0), WAIT
       * ev1 (2), ALLREDUCE (2), RECORD ev2 (2) */
      int s = step_of_node(pd, TFG_PLAN_LAUNCH, grads[r * 6 + last_grad[b]]);
      ck_assert_int_ge(s, 0);
      const tfg_plan_step *st = &pd->steps[s + 1];
      ck_assert_int_eq(st[0].kind, TFG_PLAN_RECORD);
      ck_assert_int_eq(st[0].stream, TFG_PLAN_STREAM_COMPUTE);
      ck_assert_int_eq(st[1].kind, TFG_PLAN_WAIT);
      ck_assert_int_eq(st[1].stream, TFG_PLAN_STREAM_COLLECTIVE);
      ck_assert_int_eq(st[1].event, st[0].event);
      ck_assert_int_eq(st[2].kind, TFG_PLAN_ALLREDUCE);
      ck_assert_int_eq(st[2].stream, TFG_PLAN_STREAM_COLLECTIVE);
      ck_assert_int_eq(st[2].bucket, b);
      ck_assert_int_eq(st[3].kind, TFG_PLAN_RECORD);
      ck_assert_int_eq(st[3].stream, TFG_PLAN_STREAM_COLLECTIVE);
      ck_assert_int_gt(s + 3, prev); /* buckets in index order on every rank */
      prev = s + 3;
      ck_assert_int_eq(count_steps(p, 1 + r, TFG_PLAN_ALLREDUCE, -1), 4);
      /* the compute stream waits on ev2 once, before the first update reading the bucket */
      int ev2 = st[3].event, waits = 0, w = -1;
      for (int k = 0; k < pd->nsteps; k++)
        if (pd->steps[k].kind == TFG_PLAN_WAIT && pd->steps[k].event == ev2) {
          waits++;
          w = k;
          ck_assert_int_eq(pd->steps[k].stream, TFG_PLAN_STREAM_COMPUTE);
        }
      ck_assert_int_eq(waits, 1);
      const tfg_plan_bucket *pb = &p->buckets[b];
      int first_reader = pd->nsteps;
      for (int k = 0; k < pb->nnodes; k++) {
        tfg_node_id x = pb->nodes[r * pb->nnodes + k];
        int u = step_of_node(pd, TFG_PLAN_LAUNCH, upd[r * 6 + (5 - (int)h.g->nodes[x].attrs.key)]);
        if (u < first_reader) first_reader = u;
        /* the node's buffer from the ALLREDUCE to its reader */
        const tfg_plan_buffer *nb = buffer_of(pd, x, false);
        ck_assert_ptr_nonnull(nb);
        ck_assert_int_eq(nb->first, s + 3);
        ck_assert_int_eq(nb->last, u);
        /* the gradient's buffer to the WAIT on ev2 */
        const tfg_plan_buffer *gb = buffer_of(pd, h.g->nodes[x].inputs[0], false);
        ck_assert_ptr_nonnull(gb);
        ck_assert_int_eq(gb->last, w);
      }
      ck_assert_int_eq(w, first_reader - 1);
      ck_assert_int_eq(step_of_node(pd, TFG_PLAN_LAUNCH, ars[r * 6]), -1); /* never launched */
    }
  }
  /* every event one RECORD and at least one WAIT (the validator says so too) */
  for (int e = 0; e < p->nevents; e++) {
    int recs = 0;
    for (int d = 0; d < p->ndev; d++) recs += record_of(&p->dev[d], e) >= 0;
    ck_assert_int_eq(recs, 1);
  }
  hand_free(&h);
}
END_TEST

/* Four replicas, and groups of different devices: keys 0-2 on all four,
 * keys 10-11 on gpu:0 and gpu:1 only, keys 20-21 on gpu:2 and gpu:3; an
 * f64 key among them gets a bucket of its own dtype. */
START_TEST(buckets_four_devices) {
  tfg_graph *g = tfg_graph_new();
  tfg_node_id gr[4][8], ar[4][8];
  int nk[4] = {0};
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < 3; i++) gr[r][nk[r]++] = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 300, r);
    gr[r][nk[r]++] = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F64, 100, r); /* key 3: f64 */
    for (int i = 0; i < 2; i++) gr[r][nk[r]++] = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 200, r);
  }
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < 3; i++) ar[r][i] = hand_allreduce(g, gr[r][i], i, 4, r);
    ar[r][3] = hand_allreduce(g, gr[r][3], 3, 4, r);
    for (int i = 0; i < 2; i++) ar[r][4 + i] = hand_allreduce(g, gr[r][4 + i], (r < 2 ? 10 : 20) + i, 2, r);
  }
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 6; i++) {
      const tfg_node *a = &g->nodes[ar[r][i]];
      hand_node(g, TFG_OP_NEG, &ar[r][i], 1, a->dtype, tfg_shape_numel(&a->shape), r);
    }
  handmade h = {.g = g};
  hand_plan(&h, "host*4:64M", 2400); /* two 1200-byte keys per bucket */
  const tfg_plan *p = h.plan;
  /* all four: [k0 k1] [k2], f64 [k3]; pairs: [k10 k11], [k20 k21] */
  ck_assert_int_eq(p->nbuckets, 5);
  int seen4 = 0, seen2a = 0, seen2b = 0, f64 = 0;
  for (int b = 0; b < p->nbuckets; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    tfg_dtype dt = g->nodes[pb->nodes[0]].dtype;
    for (int k = 0; k < pb->nranks * pb->nnodes; k++) ck_assert_int_eq(g->nodes[pb->nodes[k]].dtype, dt);
    if (dt == TFG_DTYPE_F64) f64++;
    if (pb->nranks == 4) seen4 += pb->nnodes;
    else if (pb->devices[0] == 1) {
      ck_assert_int_eq(pb->devices[1], 2);
      seen2a += pb->nnodes;
    } else {
      ck_assert_int_eq(pb->devices[0], 3);
      ck_assert_int_eq(pb->devices[1], 4);
      seen2b += pb->nnodes;
    }
    /* once on each rank, nowhere else */
    for (int d = 0; d < p->ndev; d++) {
      bool rank = false;
      for (int r = 0; r < pb->nranks; r++) rank |= pb->devices[r] == d;
      int n = 0;
      for (int s = 0; s < p->dev[d].nsteps; s++) n += p->dev[d].steps[s].kind == TFG_PLAN_ALLREDUCE && p->dev[d].steps[s].bucket == b;
      ck_assert_int_eq(n, rank ? 1 : 0);
    }
  }
  ck_assert_int_eq(seen4, 4);
  ck_assert_int_eq(seen2a, 2);
  ck_assert_int_eq(seen2b, 2);
  ck_assert_int_eq(f64, 1);
  /* every device meets its buckets in ascending index order */
  for (int d = 1; d <= 4; d++) {
    int prev = -1;
    for (int s = 0; s < p->dev[d].nsteps; s++)
      if (p->dev[d].steps[s].kind == TFG_PLAN_ALLREDUCE) {
        ck_assert_int_gt(p->dev[d].steps[s].bucket, prev);
        prev = p->dev[d].steps[s].bucket;
      }
  }
  hand_free(&h);
}
END_TEST

/* A gradient computed on another device (copied in before its bucket
 * runs), and an all-reduced value read on another device (copied once
 * the bucket ran: the copy stream waits on ev2). */
START_TEST(buckets_across_devices) {
  tfg_graph *g = tfg_graph_new();
  tfg_node_id g0 = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 64, 0);
  tfg_node_id g1 = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 64, 2); /* replica 1's, on gpu:2 */
  tfg_node_id a0 = hand_allreduce(g, g0, 0, 2, 0), a1 = hand_allreduce(g, g1, 0, 2, 1);
  hand_node(g, TFG_OP_NEG, &a0, 1, TFG_DTYPE_F32, 64, 2); /* read on gpu:2 */
  tfg_node_id u1 = hand_node(g, TFG_OP_NEG, &a1, 1, TFG_DTYPE_F32, 64, 1);
  handmade h = {.g = g};
  hand_plan(&h, "host*3:64M", 0);
  const tfg_plan *p = h.plan;
  ck_assert_int_eq(p->nbuckets, 1);
  /* gpu:1: the copy of g1 arrives, the compute stream waits for it, then ev1 */
  const tfg_plan_device *d2 = &p->dev[2];
  int c = step_of_node(d2, TFG_PLAN_COPY, g1), s = step_of_node(d2, TFG_PLAN_ALLREDUCE, 0);
  ck_assert_int_ge(c, 0);
  ck_assert_int_eq(d2->steps[c + 1].kind, TFG_PLAN_RECORD);
  ck_assert_int_eq(d2->steps[c + 2].kind, TFG_PLAN_WAIT);
  ck_assert_int_eq(d2->steps[c + 2].stream, TFG_PLAN_STREAM_COMPUTE);
  ck_assert_int_eq(d2->steps[c + 2].event, d2->steps[c + 1].event);
  ck_assert_int_eq(s, c + 5);
  /* the copy of g1 lives to gpu:1's WAIT on ev2 */
  const tfg_plan_buffer *cb = buffer_of(d2, g1, true);
  ck_assert_ptr_nonnull(cb);
  ck_assert_int_eq(d2->steps[cb->last].kind, TFG_PLAN_WAIT);
  ck_assert_int_eq(d2->steps[cb->last].event, d2->steps[s + 1].event);
  ck_assert_int_eq(cb->last + 1, step_of_node(d2, TFG_PLAN_LAUNCH, u1));
  /* gpu:2 copies a0 after gpu:0's ev2 */
  const tfg_plan_device *d1 = &p->dev[1], *d3 = &p->dev[3];
  int s0 = step_of_node(d1, TFG_PLAN_ALLREDUCE, 0), cc = step_of_node(d3, TFG_PLAN_COPY, a0);
  ck_assert_int_ge(cc, 1);
  ck_assert_int_eq(d3->steps[cc - 1].kind, TFG_PLAN_WAIT);
  ck_assert_int_eq(d3->steps[cc - 1].event, d1->steps[s0 + 1].event);
  /* a0 is sent: it lives to the end of gpu:0's list; ev2 has two waiters */
  ck_assert_int_eq(buffer_of(d1, a0, false)->last, d1->nsteps - 1);
  char *text = plan_text(p);
  ck_assert_ptr_nonnull(strstr(text, " -> gpu:0 compute, gpu:2 copy\n"));
  free(text);
  hand_free(&h);
}
END_TEST

START_TEST(validator_catches_collectives) {
  const int64_t numel[4] = {250, 250, 250, 250};
  tfg_node_id grads[8], ars[8], upd[8];
  handmade h;
  /* a rank without its ALLREDUCE */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  ck_assert_int_eq(h.plan->nbuckets, 2);
  remove_step(&h.plan->dev[2], step_of_node(&h.plan->dev[2], TFG_PLAN_ALLREDUCE, 1));
  plan_expect_invalid(h.plan,
                      "bucket 1 is never all-reduced on gpu:1 (rank 1 of 2): "
                      "the other ranks would wait for it forever");
  hand_free(&h);
  /* buckets in different orders */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  {
    tfg_plan_device *d2 = &h.plan->dev[2];
    int s0 = step_of_node(d2, TFG_PLAN_ALLREDUCE, 0), s1 = step_of_node(d2, TFG_PLAN_ALLREDUCE, 1);
    d2->steps[s0].bucket = 1;
    d2->steps[s1].bucket = 0;
    plan_expect_invalid(h.plan,
                        "buckets 0 and 1 are all-reduced in different orders: gpu:0 runs 0 first, gpu:1 runs 1 first");
  }
  hand_free(&h);
  /* a bucket's gradient freed at its ALLREDUCE, before the compute stream waited on ev2 */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  {
    tfg_plan_device *d1 = &h.plan->dev[1];
    int s = step_of_node(d1, TFG_PLAN_ALLREDUCE, 0);
    tfg_plan_buffer *gb = (tfg_plan_buffer *)buffer_of(d1, grads[0], false);
    int w = gb->last;
    ck_assert_int_eq(d1->steps[w].kind, TFG_PLAN_WAIT);
    gb->last = s;
    char want[256];
    snprintf(want, sizeof want,
             "gpu:0: the buffer of n%d init is freed after step %d, but bucket 0's all-reduce (step %d, collective "
             "stream) reads it and the compute stream is ordered after that only at step %d",
             (int)grads[0], s, s, w);
    plan_expect_invalid(h.plan, want);
    gb->last = w;
    plan_expect_valid(h.plan);
  }
  hand_free(&h);
  /* the ALLREDUCE without its WAIT on ev1: it may read a gradient not yet computed */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  {
    tfg_plan_device *d1 = &h.plan->dev[1];
    int s = step_of_node(d1, TFG_PLAN_ALLREDUCE, 0);
    ck_assert_int_eq(d1->steps[s - 1].kind, TFG_PLAN_WAIT);
    d1->steps[s - 1].stream = TFG_PLAN_STREAM_COMPUTE; /* the compute stream waits on its own event instead */
    char want[200];
    snprintf(want, sizeof want,
             "gpu:0 step %d: bucket 0's all-reduce reads n%d init (step %d, compute stream) without waiting for it", s,
             (int)grads[0], step_of_node(d1, TFG_PLAN_LAUNCH, grads[0]));
    plan_expect_invalid(h.plan, want);
  }
  hand_free(&h);
  /* an update reading its all-reduced gradient without waiting on ev2 */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  {
    tfg_plan_device *d1 = &h.plan->dev[1];
    int u = step_of_node(d1, TFG_PLAN_LAUNCH, upd[0]);
    ck_assert_int_eq(d1->steps[u - 1].kind, TFG_PLAN_WAIT);
    d1->steps[u - 1].stream = TFG_PLAN_STREAM_COPY; /* waited on by the wrong stream */
    plan_expect_invalid(h.plan, "without waiting for it");
  }
  hand_free(&h);
  /* an ALLREDUCE node launched like an op */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  {
    tfg_plan_device *d1 = &h.plan->dev[1];
    int u = step_of_node(d1, TFG_PLAN_LAUNCH, upd[0]);
    d1->steps[u].node = ars[0];
    plan_expect_invalid(h.plan, "which only its bucket's all-reduce computes");
  }
  hand_free(&h);
  /* the bucket table: wrong bytes, a node in no bucket, a rank on the wrong device */
  h = (handmade){.g = ddp_graph(2, 4, numel, grads, ars, upd)};
  hand_plan(&h, "host*2:64M", 2000);
  h.plan->buckets[0].bytes++;
  plan_expect_invalid(h.plan, "bucket 0 has 2001 bytes, but its tensors have 2000");
  h.plan->buckets[0].bytes--;
  h.plan->nbuckets = 1;
  plan_expect_invalid(h.plan, "is in no bucket");
  h.plan->nbuckets = 2;
  h.plan->buckets[1].devices[1] = 1;
  plan_expect_invalid(h.plan, "bucket 1: rank 1 is device 1 (ranks are distinct devices in ascending order)");
  h.plan->buckets[1].devices[1] = 2;
  plan_expect_valid(h.plan);
  hand_free(&h);
}
END_TEST

/* Three groups over three devices, each pair of devices sharing one: no
 * two buckets have two ranks in common, so no pair runs in two orders,
 * yet gpu:0 runs A then C, gpu:1 B then A, gpu:2 C then B: each waits
 * for the next. Only the replay's rendezvous finds it. Each device's
 * buckets all read one gradient, so swapping them keeps every read
 * ordered. */
START_TEST(buckets_cycle) {
  tfg_graph *g = tfg_graph_new();
  tfg_node_id gr[3];
  for (int d = 0; d < 3; d++) gr[d] = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 64, d);
  const int grp[3][2] = {{0, 1}, {1, 2}, {0, 2}}; /* A, B, C */
  for (int k = 0; k < 3; k++)
    for (int r = 0; r < 2; r++) hand_allreduce(g, gr[grp[k][r]], k, 2, grp[k][r]);
  handmade h = {.g = g};
  hand_plan(&h, "host*3:64M", 0);
  const tfg_plan *p = h.plan;
  ck_assert_int_eq(p->nbuckets, 3); /* A 0, C 1 (a tie with B, filled first), B 2 */
  ck_assert_int_eq(p->buckets[1].devices[0], 1);
  ck_assert_int_eq(p->buckets[1].devices[1], 3);
  tfg_plan_device *d1 = &h.plan->dev[2];
  int a = step_of_node(d1, TFG_PLAN_ALLREDUCE, 0), b = step_of_node(d1, TFG_PLAN_ALLREDUCE, 2);
  ck_assert_int_lt(a, b);
  d1->steps[a].bucket = 2;
  d1->steps[b].bucket = 0;
  plan_expect_invalid(h.plan, "gpu:0 step 3: bucket 0's all-reduce can never run: not every rank reaches it");
  hand_free(&h);
}
END_TEST

/* Random groups, sizes, caps and placements: gradients computed by
 * chains that also read values of other devices (copies), some on a
 * device that is not their rank's, groups of one to all devices, f32 and
 * f64, all-reduced values read on their rank or elsewhere. Every plan
 * must pass the validator, and the buckets follow the rules. */
START_TEST(buckets_random) {
  for (unsigned seed = 1; seed <= 60; seed++) {
    unsigned rs = seed * 2654435761u;
#define RND(n) ((rs = rs * 1103515245u + 12345u), (int)((rs >> 8) % (unsigned)(n)))
    int ngpu = 2 + RND(3), nkeys = 1 + RND(12);
    tfg_graph *g = tfg_graph_new();
    int ranks[12][4], nr[12];
    tfg_dtype dt[12];
    int64_t numel[12];
    tfg_node_id grad[12][4];
    for (int k = 0; k < nkeys; k++) {
      nr[k] = 0;
      bool all = RND(2);
      for (int d = 0; d < ngpu; d++)
        if (all || RND(2)) ranks[k][nr[k]++] = d;
      if (nr[k] == 0) ranks[k][nr[k]++] = RND(ngpu);
      dt[k] = RND(4) ? TFG_DTYPE_F32 : TFG_DTYPE_F64;
      numel[k] = 1 + RND(600);
    }
    /* per device a chain of values; gradients come out of it in a random interleaving */
    tfg_node_id last[4];
    for (int d = 0; d < ngpu; d++) last[d] = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 1 + RND(300), d);
    int todo[48], ntodo = 0;
    for (int k = 0; k < nkeys; k++)
      for (int r = 0; r < nr[k]; r++) todo[ntodo++] = k * 4 + r;
    while (ntodo > 0) {
      int pick = RND(ntodo), k = todo[pick] / 4, r = todo[pick] % 4;
      todo[pick] = todo[--ntodo];
      int d = ranks[k][r], where = RND(5) ? d : RND(ngpu);
      for (int extra = RND(3); extra > 0; extra--) { /* churn: ops reading this or another device's chain */
        int from = RND(3) ? where : RND(ngpu);
        const tfg_node *f = &g->nodes[last[from]];
        last[where] = hand_node(g, TFG_OP_RELU, &last[from], 1, f->dtype, tfg_shape_numel(&f->shape), where);
      }
      grad[k][r] = hand_node(g, TFG_OP_INIT, NULL, 0, dt[k], numel[k], where);
    }
    tfg_node_id ars[12][4];
    for (int k = 0; k < nkeys; k++)
      for (int r = 0; r < nr[k]; r++) ars[k][r] = hand_allreduce(g, grad[k][r], 100 + k, nr[k], ranks[k][r]);
    for (int k = 0; k < nkeys; k++)
      for (int r = 0; r < nr[k]; r++) {
        if (RND(6) == 0) continue; /* a result nobody reads */
        int where = RND(4) ? ranks[k][r] : RND(ngpu);
        hand_node(g, TFG_OP_NEG, &ars[k][r], 1, dt[k], numel[k], where);
      }
    char spec[32];
    snprintf(spec, sizeof spec, "host*%d:64M", ngpu);
    int64_t cap = 256 + RND(4000);
    handmade h = {.g = g};
    hand_plan(&h, spec, cap);
    /* every ALLREDUCE node in one bucket; a bucket over the cap holds one key */
    int total = 0;
    for (int b = 0; b < h.plan->nbuckets; b++) {
      const tfg_plan_bucket *pb = &h.plan->buckets[b];
      total += pb->nranks * pb->nnodes;
      ck_assert(pb->bytes <= cap || pb->nnodes == 1);
    }
    int want = 0;
    for (int k = 0; k < nkeys; k++) want += nr[k];
    ck_assert_int_eq(total, want);
    hand_free(&h);
#undef RND
  }
}
END_TEST

/* ---- concurrent streams ------------------------------------------------------------ */

/* On gpu:1, a is read last by b's LAUNCH (compute stream); the copy of y
 * from gpu:0 then takes a's memory. The copy stream waits only on gpu:0,
 * so without an event from gpu:1's compute stream it could overwrite a
 * while b still reads it. */
static const char REUSE[] = "@gpu:1 a = zeros([64])\n"
                            "@gpu:1 b = neg(a)\n"
                            "@gpu:0 x = zeros([64])\n"
                            "@gpu:0 y = relu(x)\n"
                            "@gpu:1 c = b + y\n"
                            "print c\n";

/* Removes step s of pd, keeping the live ranges on the steps they name. */
static void drop_step(tfg_plan_device *pd, int s) {
  remove_step(pd, s);
  for (int i = 0; i < pd->nbuffers; i++) {
    tfg_plan_buffer *bf = &pd->buffers[i];
    if (bf->persistent) {
      bf->last = pd->nsteps - 1;
      continue;
    }
    if (bf->first > s) bf->first--;
    if (bf->last >= s) bf->last--;
  }
}

START_TEST(copy_waits_for_reused_memory) {
  built b;
  build_ok(&b, REUSE, "host*2:64M");
  const tfg_graph *g = b.p->graph;
  tfg_plan_device *g1 = &b.plan->dev[2];
  tfg_node_id a = 0, bn = 1, y = graph_last_op(g, TFG_OP_RELU);
  const tfg_plan_buffer *ab = buffer_of(g1, a, false), *yc = buffer_of(g1, y, true);
  ck_assert_ptr_nonnull(ab);
  ck_assert_ptr_nonnull(yc);
  ck_assert_int_eq(yc->offset, ab->offset); /* best fit reuses a's memory */
  int lb = step_of_node(g1, TFG_PLAN_LAUNCH, bn), c = yc->first;
  ck_assert_int_eq(ab->last, lb);
  /* gpu:1: launch b, RECORD (compute); ... WAIT (copy) before the COPY */
  ck_assert_int_eq(g1->steps[lb + 1].kind, TFG_PLAN_RECORD);
  ck_assert_int_eq(g1->steps[lb + 1].stream, TFG_PLAN_STREAM_COMPUTE);
  ck_assert_int_eq(g1->steps[c].kind, TFG_PLAN_COPY);
  ck_assert_int_eq(g1->steps[c - 1].kind, TFG_PLAN_WAIT);
  ck_assert_int_eq(g1->steps[c - 1].stream, TFG_PLAN_STREAM_COPY);
  ck_assert_int_eq(g1->steps[c - 1].event, g1->steps[lb + 1].event);
  ck_assert_int_eq(g1->steps[c - 1].event, b.plan->nevents - 1); /* numbered after the sweep's */
  ck_assert_int_eq(count_steps(b.plan, 2, TFG_PLAN_WAIT, -1), 3); /* the source, the reuse, the arrival */
  char *text = plan_text(b.plan);
  char want[64];
  snprintf(want, sizeof want, "record  event %d -> gpu:1 copy\n", b.plan->nevents - 1);
  ck_assert_ptr_nonnull(strstr(text, want));
  free(text);
  /* without them, the validator finds the race */
  drop_step(g1, c - 1);
  drop_step(g1, lb + 1);
  b.plan->nevents--;
  char race[300];
  snprintf(race, sizeof race,
           "gpu:1 step %d (copy stream) writes the copy of n%d relu (t.tfg:4) into [%lld, %lld), memory that step %d "
           "(compute stream) uses for n0 init (t.tfg:1), and nothing orders that step before the write",
           c - 2, (int)y, (long long)yc->offset, (long long)(yc->offset + yc->bytes), lb);
  plan_expect_invalid(b.plan, race);
  program_free(&b);

  /* two copies into memory freed by the same read: one WAIT covers both */
  build_ok(&b,
           "@gpu:1 a = zeros([128])\n@gpu:1 b = neg(a)\n@gpu:0 x = zeros([64])\n@gpu:0 y = relu(x)\n"
           "@gpu:0 z = exp(x)\n@gpu:1 c = b + concat([y, z])\nprint c\n",
           "host*2:64M");
  g1 = &b.plan->dev[2];
  ck_assert_int_eq(buffer_of(g1, graph_last_op(b.p->graph, TFG_OP_RELU), true)->offset, 0);
  ck_assert_int_eq(buffer_of(g1, graph_last_op(b.p->graph, TFG_OP_EXP), true)->offset, 256);
  ck_assert_int_eq(count_steps(b.plan, 2, TFG_PLAN_WAIT, -1), 2 + 1 + 2);
  program_free(&b);

  /* fresh memory: no extra wait (model parallel: the copy lands above everything) */
  build_ok(&b, MODEL_PARALLEL, "host*2:64M");
  ck_assert_int_eq(count_steps(b.plan, 2, TFG_PLAN_WAIT, -1), 2);
  program_free(&b);
}
END_TEST

/* A param that another device reads is copied there each step, and its
 * update overwrites it in place: the update waits for the copy (the
 * arrival event the reader's copy stream records), else the copy could
 * read the updated value. */
static const char SHARED_PARAM[] = "@cpu:0 param w: f32[4] = normal(seed = 1)\n"
                                   "@cpu:0 loss = mean(w * w)\n"
                                   "@gpu:0 probe = sum(w * 2.0)\n"
                                   "train loss { optimizer = sgd(lr = 0.1, momentum = 0.9); steps = 1; metrics = [probe] }\n";

START_TEST(update_waits_for_copies) {
  built b;
  build_ok(&b, SHARED_PARAM, "host*1:64M");
  const tfg_plan *p = b.plan;
  tfg_node_id w = 0, u = b.steps[0].updates[0];
  ck_assert_int_eq(b.p->graph->nodes[w].op, TFG_OP_PARAM);
  ck_assert_int_eq(tfg_placement_device(b.pl, u), 0);
  int c = step_of_node(&p->dev[1], TFG_PLAN_COPY, w);
  ck_assert_int_ge(c, 0);
  ck_assert_int_eq(p->dev[1].steps[c + 1].kind, TFG_PLAN_RECORD); /* the copy's arrival */
  int arrival = p->dev[1].steps[c + 1].event;
  tfg_plan_device *cpu = &b.plan->dev[0];
  int l = step_of_node(cpu, TFG_PLAN_LAUNCH, u);
  ck_assert_int_eq(cpu->steps[l - 1].kind, TFG_PLAN_WAIT);
  ck_assert_int_eq(cpu->steps[l - 1].stream, TFG_PLAN_STREAM_COMPUTE);
  ck_assert_int_eq(cpu->steps[l - 1].event, arrival);
  /* without it, the validator finds the race */
  drop_step(cpu, l - 1);
  char race[300];
  snprintf(race, sizeof race,
           "cpu:0 step %d: n%d sgd_update (t.tfg:1) overwrites n0 param w (t.tfg:1), which gpu:0 copies (its step %d), "
           "and nothing orders the copy before it",
           l - 1, (int)u, c);
  plan_expect_invalid(b.plan, race);
  program_free(&b);
}
END_TEST

/* ---- out of memory -------------------------------------------------------------------- */

START_TEST(out_of_memory) {
  built b;
  plan_program(&b, "x = zeros([64, 1])\nw = zeros([1, 64])\ny = matmul(x, w)\nprint y\n", "host*1:1K");
  ck_assert_int_eq(b.st, TFG_ERR_OOM);
  ck_assert_ptr_null(b.plan);
  ck_assert_msg(strstr(b.errs, "t.tfg:3:5: error: out of memory on gpu:0: matmul needs 16.0 KiB for its output but only "
                               "512 B is available") != NULL,
                "%s", b.errs);
  ck_assert_msg(strstr(b.errs, "note: gpu:0 has 1.0 KiB: 0 B persistent, 512 B held by 2 tensors live at this step") != NULL,
                "%s", b.errs);
  program_free(&b);
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
  tfg_compiled c;
  ck_assert_int_eq(tfg_compile_graph(g, ds, NULL, 0, NULL, d, &c), TFG_OK);
  const tfg_plan *p = c.plan;
  plan_expect_valid(p);
  int steps = 0;
  for (int i = 0; i < p->ndev; i++) steps += p->dev[i].nsteps;
  ck_assert_int_ge(steps, n + 1);
  tfg_compiled_free(&c);
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

/* The best-fit rule of docs/plan.md, the slow obvious way: for each buffer in
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
    tfg_compiled c;
    ck_assert_int_eq(tfg_compile_graph(g, ds, NULL, 0, NULL, d, &c), TFG_OK);
    plan_expect_valid(c.plan);
    for (int i = 0; i < c.plan->ndev; i++) check_best_fit(&c.plan->dev[i]);
    tfg_compiled_free(&c);
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

/* ZeRO's collectives as buckets: on 2 replicas, each gradient (all
 * elements r + 1 on replica r, 6 of them) reduce-scattered, then each
 * piece (all elements 10 (r + 1), 3 of them) all-gathered, planned and
 * run on host devices. The planner buckets each kind alone (two buckets,
 * never one mixing them; the reduce-scatter's nodes keep the gradient's
 * shape, the all-gather's take the group's pieces side by side), and the
 * executor runs the right collective: replica r's piece r of the
 * reduce-scatter is the mean 1.5, and the all-gather gives every replica
 * 10 10 10 20 20 20. */
static tfg_node_id hand_full(tfg_graph *g, double v, int64_t numel, int gpu) {
  tfg_node_id id = hand_node(g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, numel, gpu);
  tfg_graph_node(g, id)->attrs.init = TFG_INIT_FULL;
  tfg_graph_node(g, id)->attrs.value = v;
  return id;
}

START_TEST(zero_buckets_run) {
  handmade h = {.g = tfg_graph_new()};
  tfg_node_id rs[2], ag[2];
  for (int r = 0; r < 2; r++) {
    tfg_node_id grad = hand_full(h.g, r + 1, 6, r), piece = hand_full(h.g, 10 * (r + 1), 3, r);
    rs[r] = hand_node(h.g, TFG_OP_REDUCE_SCATTER, &grad, 1, TFG_DTYPE_F32, 6, r);
    ag[r] = hand_node(h.g, TFG_OP_ALL_GATHER, &piece, 1, TFG_DTYPE_F32, 6, r);
    tfg_graph_node(h.g, rs[r])->attrs = (tfg_attrs){.n = 2, .key = 100};
    tfg_graph_node(h.g, ag[r])->attrs = (tfg_attrs){.n = 2, .key = 200, .end = 6};
  }
  hand_plan(&h, "host*2", 0);
  ck_assert_int_eq(h.plan->nbuckets, 2);
  for (int b = 0; b < 2; b++) {
    const tfg_plan_bucket *pb = &h.plan->buckets[b];
    ck_assert_int_eq(pb->nnodes, 1);
    ck_assert(pb->op == h.g->nodes[pb->nodes[0]].op && pb->op == h.g->nodes[pb->nodes[1]].op);
  }
  tfg_exec *x = NULL;
  ck_assert_int_eq(tfg_exec_new(h.plan, &(tfg_exec_opts){.threads = 1}, h.d, &x), TFG_OK);
  float got[4][6];
  tfg_node_id fetch[4] = {rs[0], rs[1], ag[0], ag[1]};
  void *out[4] = {got[0], got[1], got[2], got[3]};
  ck_assert_int_eq(tfg_exec_run(x, fetch, 4, out, &(tfg_exec_run_opts){0}, h.d), TFG_OK);
  for (int r = 0; r < 2; r++)
    for (int e = 3 * r; e < 3 * r + 3; e++) ck_assert_msg(got[r][e] == 1.5f, "rank %d element %d: %g", r, e, got[r][e]);
  for (int r = 0; r < 2; r++)
    for (int e = 0; e < 6; e++) ck_assert_msg(got[2 + r][e] == (e < 3 ? 10.0f : 20.0f), "rank %d gathered %g at %d", r, got[2 + r][e], e);
  tfg_exec_free(x);
  hand_free(&h);
}
END_TEST

Suite *suite_plan(void) {
  Suite *s = suite_create("plan");
  TCase *tc = tcase_create("plan");
  tcase_add_test(tc, zero_buckets_run);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, single_device);
  tcase_add_test(tc, model_parallel_one_copy);
  tcase_add_test(tc, parallel_branches);
  tcase_add_test(tc, training_step);
  tcase_add_test(tc, chain_offsets);
  tcase_add_test(tc, best_fit);
  tcase_add_test(tc, validator_catches);
  tcase_add_test(tc, buckets_form);
  tcase_add_test(tc, bucket_steps);
  tcase_add_test(tc, buckets_four_devices);
  tcase_add_test(tc, buckets_across_devices);
  tcase_add_test(tc, validator_catches_collectives);
  tcase_add_test(tc, buckets_cycle);
  tcase_add_test(tc, buckets_random);
  tcase_add_test(tc, copy_waits_for_reused_memory);
  tcase_add_test(tc, update_waits_for_copies);
  tcase_add_test(tc, out_of_memory);
  tcase_add_test(tc, random_graphs);
  tcase_add_test(tc, scale);
  suite_add_tcase(s, tc);
  return s;
}
