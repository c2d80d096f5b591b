/* tests/unit/test_strategy.c: training strategies (compiler/strategy.h)
 * through the real front end: programs are parsed and evaluated, their
 * train action rewritten, and the result checked for structure (replicas,
 * slices, all-reduce keys and groups, mirrors, pins, the data x model
 * parallel mapping, the parameter server's split), for numbers (the mean
 * of the replicas' gradients is the gradient of the global batch, run on
 * the CPU session), and for the errors a user can make, with their
 * messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "runtime/session.h"
#include "tests/unit/programs.h"
#include "tests/unit/scratch.h"
#include "tests/unit/unit.h"

/* Builds text with its first train action rewritten by its strategy
 * (steps[0]); the program must have one, and must build up to it. */
static void build(built *b, const char *text) {
  program_build(b, text, &(build_opts){.steps = 1});
  ck_assert_ptr_nonnull(b->act);
}

static void build_ok(built *b, const char *text) {
  build(b, text);
  ck_assert_msg(b->st == TFG_OK, "the strategy failed: %s", b->errs);
}

static const tfg_node *N(const built *b, tfg_node_id id) { return &b->p->graph->nodes[id]; }

/* The program's node named name (a PARAM or INPUT). */
static tfg_node_id named(const built *b, const char *name) {
  for (int32_t i = 0; i < b->n0; i++)
    if (N(b, i)->name && strcmp(N(b, i)->name, name) == 0) return i;
  ck_abort_msg("no node named %s", name);
  return -1;
}

/* Whether a pin is exactly gpu:k (k < 0: cpu). */
static bool pinned(const tfg_node *n, int k) {
  if (k < 0) return n->pin.kind == TFG_DEV_CPU && n->pin.index == 0;
  return n->pin.kind == TFG_DEV_GPU && n->pin.index == k;
}

/* The mirror of program node src (its copy in replica 1..), or -1. */
static tfg_node_id mirror_of(const built *b, tfg_node_id src, int nth) {
  for (int i = 0; i < b->steps[0].nmirrors; i++)
    if (b->steps[0].mirror_src[i] == src && nth-- == 0) return b->steps[0].mirror_dst[i];
  return -1;
}

/* The MLP the structure tests rewrite: batch 8, four params, SGD with
 * momentum (one state per param), an accuracy metric. %s: the strategy. */
static const char *mlp =
    "input x: f32[8, 4]\n"
    "input y: i32[8]\n"
    "param w1: f32[4, 6] = glorot()\n"
    "param b1: f32[6] = zeros()\n"
    "param w2: f32[6, 3] = glorot()\n"
    "param b2: f32[3] = zeros()\n"
    "h = relu(matmul(x, w1) + b1)\n"
    "logits = matmul(h, w2) + b2\n"
    "loss = cross_entropy(logits, y)\n"
    "train loss { optimizer = sgd(lr = 0.1, momentum = 0.9); steps = 1; metrics = [accuracy(logits, y)]%s }\n";

static void build_mlp(built *b, const char *strategy) {
  char text[2048];
  char setting[256] = "";
  if (strategy) snprintf(setting, sizeof setting, "; strategy = %s", strategy);
  snprintf(text, sizeof text, mlp, setting);
  build_ok(b, text);
}

/* Every node of the rewrite reads only earlier nodes, and has a pin. */
static void expect_ordered_and_pinned(const built *b) {
  for (int32_t i = b->n0; i < b->p->graph->nnodes; i++) {
    const tfg_node *n = N(b, i);
    for (int k = 0; k < n->ninputs; k++) ck_assert_int_lt(n->inputs[k], i);
    ck_assert_msg(n->pin.kind == TFG_DEV_CPU || n->pin.kind == TFG_DEV_GPU, "node %d (%s) has no device", (int)i,
                  tfg_op_get(n->op)->name);
  }
}

/* Every node the given node depends on, from the rewrite, other than the
 * inputs' slices, is pinned to gpu:k. */
static void expect_cone_on(const built *b, tfg_node_id root, int k) {
  int32_t n = root + 1;
  uint8_t *mark = calloc((size_t)n, 1);
  ck_assert_ptr_nonnull(mark);
  mark[root] = 1;
  for (int32_t i = root; i >= b->n0; i--) {
    if (!mark[i]) continue;
    const tfg_node *nd = N(b, i);
    if (nd->op == TFG_OP_SLICE && N(b, nd->inputs[0])->op == TFG_OP_INPUT) {
      ck_assert(pinned(nd, -1));
      continue;
    }
    ck_assert_msg(pinned(nd, k), "%s node %d is not on gpu:%d", tfg_op_get(nd->op)->name, (int)i, k);
    for (int j = 0; j < nd->ninputs; j++) mark[nd->inputs[j]] = 1;
  }
  free(mark);
}

/* ---- reading the setting ------------------------------------------------------ */

START_TEST(reads_strategies) {
  static const struct {
    const char *text;
    const char *name; /* the module that reads it */
    int replicas, group;
    const char *devices; /* "0 1": gpu indexes, c: cpu */
  } cases[] = {
      {NULL, "single", 1, 1, ""},
      {"single()", "single", 1, 1, ""},
      {"mirrored([gpu:0, gpu:1])", "mirrored", 2, 1, "0 1"},
      {"mirrored([gpu:3, cpu, gpu:1])", "mirrored", 3, 1, "3 c 1"},
      {"mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])", "mirrored", 2, 2, "0 1 2 3"},
      {"parameter_server(workers = [gpu:0, gpu:1])", "parameter_server", 2, 1, "0 1"},
      {"parameter_server([gpu:1], ps = gpu:0)", "parameter_server", 1, 1, "1"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char text[2048];
    char setting[256] = "";
    if (cases[c].text) snprintf(setting, sizeof setting, "; strategy = %s", cases[c].text);
    snprintf(text, sizeof text, mlp, setting);
    built b;
    build(&b, text); /* the rewrite itself is checked elsewhere */
    tfg_strategy s;
    ck_assert_int_eq(tfg_strategy_of(b.act, &s, b.d), TFG_OK);
    ck_assert_str_eq(s.i->name, cases[c].name);
    ck_assert_int_eq(s.nreplicas, cases[c].replicas);
    ck_assert_int_eq(s.group, cases[c].group);
    char got[64] = "";
    for (int i = 0; s.devices && i < s.nreplicas * s.group; i++) {
      size_t len = strlen(got);
      if (s.devices[i].kind == TFG_DEV_CPU) snprintf(got + len, sizeof got - len, "%sc", i ? " " : "");
      else snprintf(got + len, sizeof got - len, "%s%d", i ? " " : "", (int)s.devices[i].index);
    }
    ck_assert_str_eq(got, cases[c].devices);
    if (strcmp(cases[c].name, "parameter_server") == 0) {
      bool on_cpu = strstr(cases[c].text, "ps =") == NULL;
      ck_assert_int_eq(s.ps.kind, on_cpu ? TFG_DEV_CPU : TFG_DEV_GPU);
    }
    /* The location is the strategy's value, or the action without one. */
    if (cases[c].text) ck_assert_int_eq(s.loc.len, strlen(cases[c].text));
    else ck_assert_int_eq(s.loc.off, b.act->loc.off);
    tfg_strategy_free(&s);
    program_free(&b);
  }
}
END_TEST

START_TEST(rejects_bad_strategies) {
  static const struct {
    const char *text;
    const char *message;
  } cases[] = {
      {"mirrored([])", "error: mirrored needs at least one device"},
      {"mirrored(gpu:0)", "error: mirrored takes a list of devices, got a device"},
      {"mirrored([[gpu:0], [gpu:1, gpu:2]])",
       "error: mirrored: every group needs the same number of devices, but group 0 has 1 and group 1 has 2"},
      {"mirrored([[gpu:0, gpu:1], []])", "error: mirrored: group 1 is empty"},
      {"mirrored([gpu:0, [gpu:1]])", "error: mirrored: give a list of devices or a list of groups"},
      {"mirrored([gpu:0, 3])", "error: mirrored: item 1 is an int, not a device"},
      {"mirrored([gpu:*])", "error: mirrored needs named devices: gpu:* lets the placer choose"},
      {"mirrored([cpu:1])", "error: cpu:1 does not exist: the host CPU is cpu"},
      {"mirrored([gpu:0, gpu:1, gpu:0])", "error: mirrored: gpu:0 is named twice"},
      {"mirrored([[gpu:0, gpu:1], [gpu:1, gpu:2]])", "error: mirrored: gpu:1 is named twice"},
      {"parameter_server(workers = [])", "error: parameter_server needs at least one worker"},
      {"parameter_server(workers = gpu:0)", "error: parameter_server: workers must be a list of devices, got a device"},
      {"parameter_server(workers = [gpu:0, gpu:0])", "error: parameter_server: gpu:0 is named twice"},
      {"parameter_server(workers = [gpu:0], ps = gpu:*)", "error: parameter_server needs named devices"},
      {"parameter_server(workers = [gpu:0], ps = 1)", "error: parameter_server: ps is an int, not a device"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char text[2048];
    char setting[256];
    snprintf(setting, sizeof setting, "; strategy = %s", cases[c].text);
    snprintf(text, sizeof text, mlp, setting);
    built b;
    build(&b, text);
    ck_assert_msg(b.st == TFG_ERR_NAME, "%s: status %d", cases[c].text, (int)b.st);
    ck_assert_msg(strstr(b.errs, cases[c].message) != NULL, "%s: got\n%s", cases[c].text, b.errs);
    /* Nothing is left behind. */
    ck_assert_int_eq(b.p->graph->nnodes, b.n0);
    ck_assert_int_eq(b.steps[0].nupdates, 0);
    ck_assert_ptr_null(b.steps[0].updates);
    program_free(&b);
  }
}
END_TEST

/* The duplicate's message in full: it points at the second naming and
 * notes the first. */
START_TEST(duplicate_device_message) {
  built b;
  build(&b,
        "input x: f32[8, 4]\n"
        "param w: f32[4, 1] = glorot()\n"
        "loss = mean(matmul(x, w))\n"
        "train loss {\n"
        "  strategy = mirrored([gpu:0, gpu:0])\n"
        "  optimizer = sgd(lr = 0.1); steps = 1\n"
        "}\n");
  ck_assert_str_eq(b.errs,
                   "t.tfg:5:31: error: mirrored: gpu:0 is named twice\n"
                   " 5 |   strategy = mirrored([gpu:0, gpu:0])\n"
                   "   |                               ^~~~~\n"
                   "t.tfg:5:24: note: first named here\n"
                   " 5 |   strategy = mirrored([gpu:0, gpu:0])\n"
                   "   |                        ^~~~~\n"
                   "help: each replica needs devices of its own\n");
  program_free(&b);
}
END_TEST

/* ---- single ------------------------------------------------------------------------ */

START_TEST(single_is_autodiff) {
  built b;
  build_mlp(&b, "single()");
  ck_assert_int_eq(b.steps[0].nreplicas, 1);
  ck_assert_int_eq(b.steps[0].nparams, 4);
  ck_assert_int_eq(b.steps[0].nupdates, 4);
  ck_assert_int_eq(b.steps[0].nmirrors, 0);
  ck_assert_int_eq(b.steps[0].loss, b.act->loss);
  ck_assert_int_eq(b.steps[0].losses[0], b.act->loss);
  ck_assert_ptr_null(b.steps[0].worker_grads);
  for (int32_t i = b.n0; i < b.p->graph->nnodes; i++) ck_assert_int_ne(N(&b, i)->op, TFG_OP_ALLREDUCE);
  program_free(&b);
}
END_TEST

/* precision = bf16 (compiler/autocast.h): the step trains a clone whose
 * products read their inputs cast to bf16 (a param read twice cast once),
 * a product read by a product in bf16 as it is, the last cast back to
 * f32; the program's own product and loss are untouched; the gradients
 * the updates read are f32. A transpose between a value and a product
 * is taken in bf16 (cast below it), so the layout pass still reads it
 * through strides. */
START_TEST(autocast_clone) {
  built b;
  build_ok(&b, "param w: f32[4, 4] = glorot()\n"
               "x = normal([2, 4], seed = 1)\n"
               "h = matmul(matmul(x, w), w)\n"
               "train mean(h * h) { optimizer = sgd(lr = 0.1); steps = 1; precision = bf16 }\n");
  const tfg_train_step *st = &b.steps[0];
  ck_assert_int_ne(st->loss, b.act->loss);
  ck_assert_int_ge(st->loss, b.n0);
  tfg_node_id w = named(&b, "w");
  int casts_of_w = 0, low = 0, back = 0;
  for (int32_t i = b.n0; i < b.p->graph->nnodes; i++) {
    const tfg_node *n = N(&b, i);
    if (n->op == TFG_OP_CAST && n->inputs[0] == w) casts_of_w++;
    if (n->op == TFG_OP_MATMUL && i <= st->loss) { /* the clone's (not the gradient's) */
      low++;
      ck_assert_int_eq(n->dtype, TFG_DTYPE_BF16);
      for (int k = 0; k < 2; k++) ck_assert_int_eq(N(&b, n->inputs[k])->dtype, TFG_DTYPE_BF16);
    }
    if (n->op == TFG_OP_CAST && n->dtype == TFG_DTYPE_F32 && N(&b, n->inputs[0])->op == TFG_OP_MATMUL) back++;
  }
  ck_assert_int_eq(casts_of_w, 1);
  ck_assert_int_eq(low, 2);
  ck_assert_int_eq(back, 1); /* the inner product reaches the outer in bf16: no round trip */
  for (int32_t i = 0; i < b.n0; i++)
    if (N(&b, i)->op == TFG_OP_MATMUL) ck_assert_int_eq(N(&b, i)->dtype, TFG_DTYPE_F32);
  ck_assert_int_eq(N(&b, st->updates[0])->op, TFG_OP_SGD_UPDATE);
  ck_assert_int_eq(N(&b, N(&b, st->updates[0])->inputs[1])->dtype, TFG_DTYPE_F32);
  program_free(&b);
}
END_TEST

START_TEST(autocast_views) {
  built b;
  build_ok(&b, "param w: f32[4, 4] = glorot()\n"
               "x = normal([2, 4], seed = 1)\n"
               "train mean(matmul(x, transpose(w))) { optimizer = sgd(lr = 0.1); steps = 1; precision = bf16 }\n");
  const tfg_train_step *st = &b.steps[0];
  tfg_node_id w = named(&b, "w");
  bool found = false;
  for (int32_t i = b.n0; i <= st->loss; i++) {
    const tfg_node *n = N(&b, i);
    if (n->op != TFG_OP_MATMUL) continue;
    const tfg_node *t = N(&b, n->inputs[1]);
    ck_assert_int_eq(t->op, TFG_OP_TRANSPOSE);
    ck_assert_int_eq(t->dtype, TFG_DTYPE_BF16);
    ck_assert_int_eq(N(&b, t->inputs[0])->op, TFG_OP_CAST);
    ck_assert_int_eq(N(&b, t->inputs[0])->inputs[0], w);
    found = true;
  }
  ck_assert(found);
  program_free(&b);
}
END_TEST

/* accumulate = 3: an accumulator per param beside it, written first by a
 * set and then by adds, and the update reading (acc + grad) / 3. */
START_TEST(accumulate_structure) {
  built b;
  build_mlp(&b, "single(); accumulate = 3");
  const tfg_train_step *st = &b.steps[0];
  ck_assert_int_eq(st->accumulate, 3);
  ck_assert_ptr_nonnull(st->accs);
  for (int i = 0; i < st->nupdates; i++) {
    const tfg_node *acc = N(&b, st->accs[i]), *f = N(&b, st->acc_first[i]), *a = N(&b, st->acc_add[i]);
    ck_assert_int_eq(acc->op, TFG_OP_STATE);
    ck_assert_str_eq(strchr(acc->name, ':'), ":grad_acc");
    ck_assert_int_eq(f->op, TFG_OP_GRAD_ACCUMULATE);
    ck_assert_int_eq(a->op, TFG_OP_GRAD_ACCUMULATE);
    ck_assert(f->attrs.value == 0 && a->attrs.value == 1);
    ck_assert_int_eq(f->inputs[0], st->accs[i]);
    ck_assert_int_eq(f->inputs[1], a->inputs[1]); /* the same gradient */
    const tfg_node *div = N(&b, N(&b, st->updates[i])->inputs[1]);
    ck_assert_int_eq(div->op, TFG_OP_DIV);
    ck_assert_int_eq(N(&b, div->inputs[0])->op, TFG_OP_ADD);
    ck_assert_int_eq(N(&b, div->inputs[0])->inputs[0], st->accs[i]);
  }
  program_free(&b);
}
END_TEST

/* ---- mirrored ----------------------------------------------------------------------- */

START_TEST(mirrored_structure) {
  built b;
  build_mlp(&b, "mirrored([gpu:0, gpu:1])");
  const tfg_train_step *st = &b.steps[0];
  tfg_strategy s;
  ck_assert_int_eq(tfg_strategy_of(b.act, &s, b.d), TFG_OK);
  ck_assert_int_eq(st->nreplicas, 2);
  ck_assert_int_eq(st->nparams, 4);
  ck_assert_int_eq(st->nupdates, 8);
  ck_assert_int_eq(st->nstates, 4);  /* a momentum buffer per param, replica 0's */
  ck_assert_int_eq(st->nmirrors, 8); /* replica 1's params and states */
  ck_assert_int_eq(st->nmetrics, 1);
  ck_assert_str_eq(st->optimizer, "sgd");
  ck_assert_ptr_null(st->worker_grads);
  ck_assert_int_eq(st->loss, st->losses[0]);
  ck_assert_int_eq(st->metrics[0], st->replica_metrics[0]);
  expect_ordered_and_pinned(&b);

  /* The trained params are the program's, pinned to replica 0's device at the strategy. */
  static const char *const names[] = {"w1", "b1", "w2", "b2"};
  for (int i = 0; i < 4; i++) {
    tfg_node_id pid = named(&b, names[i]);
    ck_assert_int_eq(st->params[i], pid);
    ck_assert(pinned(N(&b, pid), 0));
    ck_assert_int_eq(N(&b, pid)->pin.loc.off, s.loc.off);
    tfg_node_id m = mirror_of(&b, pid, 0);
    ck_assert_int_ge(m, b.n0);
    ck_assert_int_eq(N(&b, m)->op, TFG_OP_PARAM);
    ck_assert_str_eq(N(&b, m)->name, names[i]);
    ck_assert(tfg_shape_eq(&N(&b, m)->shape, &N(&b, pid)->shape));
    ck_assert(pinned(N(&b, m), 1));
  }
  /* Replica 1's states mirror replica 0's, slot for slot. */
  for (int j = 0; j < st->nstates; j++) {
    tfg_node_id m = mirror_of(&b, st->states[j], 0);
    ck_assert_int_ge(m, 0);
    ck_assert_int_eq(N(&b, m)->op, TFG_OP_STATE);
    ck_assert_str_eq(N(&b, m)->name, N(&b, st->states[j])->name);
    ck_assert(pinned(N(&b, st->states[j]), 0));
    ck_assert(pinned(N(&b, m), 1));
  }

  /* The inputs stay whole on the cpu; each replica reads its rows. */
  tfg_node_id inputs[2] = {named(&b, "x"), named(&b, "y")};
  for (int k = 0; k < 2; k++) {
    ck_assert(pinned(N(&b, inputs[k]), -1));
    int nslices = 0;
    for (int32_t i = b.n0; i < b.p->graph->nnodes; i++) {
      const tfg_node *n = N(&b, i);
      if (n->op != TFG_OP_SLICE || n->inputs[0] != inputs[k]) continue;
      ck_assert_int_eq(n->attrs.axis, 0);
      ck_assert_int_eq(n->attrs.start, nslices * 4);
      ck_assert_int_eq(n->attrs.end, nslices * 4 + 4);
      ck_assert_int_eq(n->shape.dim[0], 4);
      ck_assert(pinned(n, -1));
      nslices++;
    }
    ck_assert_int_eq(nslices, 2);
  }

  /* Each update reads the all-reduced gradient of its replica: key = the
   * param's index, group = the replicas; replica r's work is on gpu:r. */
  for (int r = 0; r < 2; r++) {
    ck_assert(pinned(N(&b, st->losses[r]), r));
    ck_assert_int_eq(N(&b, st->losses[r])->pin.loc.off, s.loc.off);
    ck_assert_int_eq(N(&b, st->losses[r])->loc.off, N(&b, b.act->loss)->loc.off);
    ck_assert(pinned(N(&b, st->replica_metrics[r]), r));
    for (int i = 0; i < 4; i++) {
      const tfg_node *u = N(&b, st->updates[r * 4 + i]);
      ck_assert_int_eq(u->op, TFG_OP_SGD_UPDATE);
      ck_assert_int_eq(u->inputs[0], r == 0 ? st->params[i] : mirror_of(&b, st->params[i], 0));
      const tfg_node *ar = N(&b, u->inputs[1]);
      ck_assert_int_eq(ar->op, TFG_OP_ALLREDUCE);
      ck_assert_int_eq(ar->attrs.n, 2);
      /* The key: replica 0's all-reduce, unique in the graph. */
      ck_assert_int_eq(ar->attrs.key, N(&b, st->updates[i])->inputs[1]);
      ck_assert(pinned(ar, r));
      ck_assert(tfg_shape_eq(&ar->shape, &N(&b, st->params[i])->shape));
      expect_cone_on(&b, st->updates[r * 4 + i], r);
    }
  }
  int nallreduce = 0;
  for (int32_t i = b.n0; i < b.p->graph->nnodes; i++) nallreduce += N(&b, i)->op == TFG_OP_ALLREDUCE;
  ck_assert_int_eq(nallreduce, 8);
  tfg_strategy_free(&s);
  program_free(&b);
}
END_TEST

/* Every replica's slices of the batch come first in graph order (so in
 * the feeder's steps): with the cpu as replica 0, replica 1's rows are
 * cut before the cpu computes its own replica, not after. */
START_TEST(mirrored_slices_first) {
  built b;
  build_mlp(&b, "mirrored([cpu, gpu:0])");
  int nslices = 0;
  for (int32_t i = b.n0; i < b.p->graph->nnodes; i++)
    if (N(&b, i)->op == TFG_OP_SLICE) {
      ck_assert_msg(i == b.n0 + nslices, "slice n%d comes after another node of the rewrite", (int)i);
      ck_assert(pinned(N(&b, i), -1));
      nslices++;
    }
  ck_assert_int_eq(nslices, 4); /* x and y, two replicas each */
  /* replica by replica: x's and y's rows of replica 0, then of replica 1 */
  ck_assert_int_eq(N(&b, b.n0 + 2)->attrs.start, 4);
  ck_assert_int_eq(N(&b, b.n0 + 3)->attrs.start, 4);
  program_free(&b);
}
END_TEST

/* mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]]): the program's gpu:1 is the
 * second device of each replica's group; unpinned work goes to the first. */
START_TEST(mirrored_groups_map_pins) {
  built b;
  build_ok(&b,
           "input x: f32[8, 4]\n"
           "input y: i32[8]\n"
           "param w1: f32[4, 6] = glorot()\n"
           "h = relu(matmul(x, w1))\n"
           "with gpu:1 {\n"
           "  param w2: f32[6, 3] = glorot()\n"
           "  logits = matmul(h, w2)\n"
           "}\n"
           "loss = cross_entropy(logits, y)\n"
           "train loss { optimizer = adam(lr = 0.01); steps = 1; strategy = mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]]) }\n");
  const tfg_train_step *st = &b.steps[0];
  ck_assert_int_eq(st->nreplicas, 2);
  ck_assert_int_eq(st->nupdates, 4);
  ck_assert_int_eq(st->nstates, 4);  /* exp_avg, exp_avg_sq */
  ck_assert_int_eq(st->nmirrors, 6); /* 2 params, 4 states */
  expect_ordered_and_pinned(&b);
  tfg_node_id w1 = named(&b, "w1"), w2 = named(&b, "w2");
  ck_assert(pinned(N(&b, w1), 0));
  ck_assert(pinned(N(&b, w2), 1));
  ck_assert(pinned(N(&b, mirror_of(&b, w1, 0)), 2));
  ck_assert(pinned(N(&b, mirror_of(&b, w2, 0)), 3));
  /* The loss (unpinned) on the group's first device, the logits' matmul
   * (gpu:1) on its second. */
  for (int r = 0; r < 2; r++) {
    const tfg_node *loss = N(&b, st->losses[r]);
    ck_assert(pinned(loss, 2 * r));
    const tfg_node *mm = N(&b, loss->inputs[0]);
    ck_assert_int_eq(mm->op, TFG_OP_MATMUL);
    ck_assert(pinned(mm, 2 * r + 1));
    /* w2's gradient and its all-reduce where w2's matmul runs, its state
     * with w2; w1's on the first device. */
    const tfg_node *u1 = N(&b, st->updates[r * 2 + 0]), *u2 = N(&b, st->updates[r * 2 + 1]);
    ck_assert(pinned(N(&b, u1->inputs[1]), 2 * r));
    ck_assert(pinned(N(&b, u2->inputs[1]), 2 * r + 1));
    ck_assert(pinned(N(&b, u2->inputs[2]), 2 * r + 1));
    ck_assert(pinned(N(&b, u2->inputs[3]), 2 * r + 1));
    ck_assert_int_eq(N(&b, u2->inputs[1])->attrs.key, N(&b, st->updates[1])->inputs[1]);
  }
  program_free(&b);
}
END_TEST

START_TEST(mirrored_pin_outside_group) {
  built b;
  build(&b,
        "input x: f32[8, 4]\n"
        "input y: i32[8]\n"
        "param w1: f32[4, 3] = glorot()\n"
        "@gpu:2 logits = matmul(x, w1)\n"
        "loss = cross_entropy(logits, y)\n"
        "train loss {\n"
        "  strategy = mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])\n"
        "  optimizer = sgd(lr = 0.1); steps = 1\n"
        "}\n");
  ck_assert_int_eq(b.st, TFG_ERR_PLACE);
  ck_assert_str_eq(b.errs,
                   "t.tfg:4:2: error: gpu:2 has no place in mirrored's groups: each replica has 2 devices, gpu:0 to gpu:1\n"
                   " 4 | @gpu:2 logits = matmul(x, w1)\n"
                   "   |  ^~~~~\n"
                   "t.tfg:7:14: note: the groups are given here\n"
                   " 7 |   strategy = mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])\n"
                   "   |              ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
                   "help: the program's gpu:K means the K-th device of each replica's group\n");
  /* The graph and its pins are as they were. */
  ck_assert_int_eq(b.p->graph->nnodes, b.n0);
  ck_assert_int_eq(N(&b, named(&b, "x"))->pin.kind, TFG_DEV_NONE);
  ck_assert_int_eq(N(&b, named(&b, "w1"))->pin.kind, TFG_DEV_NONE);
  program_free(&b);
}
END_TEST

START_TEST(mirrored_batch_must_divide) {
  built b;
  build(&b,
        "input x: f32[10, 4]\n"
        "param w: f32[4, 1] = glorot()\n"
        "loss = mean(matmul(x, w))\n"
        "train loss {\n"
        "  strategy = mirrored([gpu:0, gpu:1, gpu:2, gpu:3])\n"
        "  optimizer = sgd(lr = 0.1); steps = 1\n"
        "}\n");
  ck_assert_int_eq(b.st, TFG_ERR_SHAPE);
  ck_assert_str_eq(b.errs,
                   "t.tfg:1:1: error: input x: a global batch of 10 rows does not split evenly over 4 replicas\n"
                   " 1 | input x: f32[10, 4]\n"
                   "   | ^~~~~~~~~~~~~~~~~~~\n"
                   "t.tfg:5:14: note: mirrored makes 4 replicas here\n"
                   " 5 |   strategy = mirrored([gpu:0, gpu:1, gpu:2, gpu:3])\n"
                   "   |              ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
                   "help: make the batch a multiple of 4, like 8 or 12\n");
  ck_assert_int_eq(b.p->graph->nnodes, b.n0);
  program_free(&b);
}
END_TEST

/* A shape written for the whole batch fails where it was written, with a
 * note naming the split. */
START_TEST(mirrored_shape_must_survive_split) {
  built b;
  build(&b,
        "input x: f32[8, 4]\n"
        "param w: f32[4, 1] = glorot()\n"
        "loss = mean(reshape(matmul(x, w), [8]))\n"
        "train loss { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1]) }\n");
  ck_assert_int_eq(b.st, TFG_ERR_SHAPE);
  ck_assert_msg(strstr(b.errs, "t.tfg:3:13: error: reshape: cannot reshape f32[4,1] (4 elements) into f32[8] (8 elements)\n") ==
                    b.errs,
                "got\n%s", b.errs);
  ck_assert_msg(strstr(b.errs, "t.tfg:4:63: note: the batch is split 2 ways by mirrored here\n") != NULL, "got\n%s", b.errs);
  ck_assert_int_eq(b.p->graph->nnodes, b.n0);
  program_free(&b);

  /* Written with -1 it follows the replica's batch. */
  build_ok(&b,
           "input x: f32[8, 4]\n"
           "param w: f32[4, 1] = glorot()\n"
           "loss = mean(reshape(matmul(x, w), [-1]))\n"
           "train loss { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1]) }\n");
  const tfg_node *mean = N(&b, b.steps[0].losses[1]);
  ck_assert_int_eq(N(&b, mean->inputs[0])->shape.dim[0], 4);
  program_free(&b);
}
END_TEST

/* An error in the middle of the rewrite (every replica's slices added,
 * the input and the param re-pinned, then a shape that does not survive
 * the split) leaves the graph and its pins as they were. (Optimizer
 * arguments, which once failed after the clones, are checked where they
 * are written now.) */
START_TEST(mirrored_failure_is_undone) {
  built b;
  build(&b,
        "input x: f32[8, 4]\n"
        "param w: f32[4, 1] = glorot()\n"
        "loss = mean(reshape(matmul(x, w), [8]))\n"
        "train loss { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1]) }\n");
  ck_assert_int_eq(b.st, TFG_ERR_SHAPE);
  ck_assert_msg(strstr(b.errs, "error: reshape: cannot reshape") != NULL, "got\n%s", b.errs);
  ck_assert_int_eq(b.p->graph->nnodes, b.n0);
  ck_assert_int_eq(N(&b, named(&b, "x"))->pin.kind, TFG_DEV_NONE);
  ck_assert_int_eq(N(&b, named(&b, "w"))->pin.kind, TFG_DEV_NONE);
  ck_assert_ptr_null(b.steps[0].losses);
  program_free(&b);
}
END_TEST

/* A param only a metric reads is not trained: mirrored copies it to every
 * replica (a mirror that never changes), parameter_server leaves it on
 * the server for the workers to read. */
static const char *metric_param =
    "input x: f32[8, 4]\n"
    "param w: f32[4, 1] = glorot()\n"
    "param t: f32[1] = ones()\n"
    "loss = mean(matmul(x, w))\n"
    "train loss { optimizer = sgd(lr = 0.1); steps = 1; metrics = [mean(matmul(x, w) * t)]; strategy = %s }\n";

START_TEST(metric_only_params) {
  char text[1024];
  built b;
  snprintf(text, sizeof text, metric_param, "mirrored([gpu:0, gpu:1])");
  build_ok(&b, text);
  tfg_node_id t = named(&b, "t");
  ck_assert_int_eq(b.steps[0].nparams, 1);
  ck_assert_int_eq(b.steps[0].nmirrors, 2); /* w and t; SGD without momentum has no state */
  ck_assert(pinned(N(&b, t), 0));
  ck_assert(pinned(N(&b, mirror_of(&b, t, 0)), 1));
  program_free(&b);

  snprintf(text, sizeof text, metric_param, "parameter_server(workers = [gpu:0, gpu:1])");
  build_ok(&b, text);
  t = named(&b, "t");
  ck_assert_int_eq(b.steps[0].nparams, 1);
  ck_assert(pinned(N(&b, t), -1));
  for (int w = 0; w < 2; w++) {
    const tfg_node *m = N(&b, b.steps[0].replica_metrics[w]); /* mean(... * t) */
    ck_assert_int_eq(N(&b, m->inputs[0])->inputs[1], t);
    ck_assert(pinned(m, w));
  }
  program_free(&b);
}
END_TEST

/* A gradient the program pinned to the cpu is all-reduced on the
 * replica's own device: a key's group has one node per device. */
START_TEST(mirrored_cpu_gradient_reduced_on_replica) {
  built b;
  build_ok(&b,
           "input x: f32[8, 4]\n"
           "param w: f32[4, 1] = glorot()\n"
           "@cpu h = matmul(x, w)\n"
           "loss = mean(h)\n"
           "train loss { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1]) }\n");
  for (int r = 0; r < 2; r++) {
    const tfg_node *ar = N(&b, N(&b, b.steps[0].updates[r])->inputs[1]);
    ck_assert_int_eq(ar->op, TFG_OP_ALLREDUCE);
    ck_assert(pinned(N(&b, ar->inputs[0]), -1)); /* the gradient, with its matmul */
    ck_assert(pinned(ar, r));
  }
  program_free(&b);
}
END_TEST

/* Two mirrored jobs of one group (an ensemble) have keys of their own. */
START_TEST(mirrored_keys_unique_across_actions) {
  built b;
  build_ok(&b,
           "input x: f32[8, 4]\n"
           "param u: f32[4, 1] = glorot()\n"
           "param v: f32[4, 1] = glorot()\n"
           "train mean(matmul(x, u)) { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1]) }\n"
           "train mean(matmul(x, v)) { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:2, gpu:3]) }\n");
  ck_assert_int_eq(b.p->nactions, 2);
  tfg_train_step second;
  tfg_status st2 = tfg_compile_train_step(b.p->graph, &b.p->actions[1], b.p, NULL, NULL, &second, b.d);
  ck_assert_msg(st2 == TFG_OK, "%s", test_render(b.d, false));
  int64_t keys[8];
  int nkeys = 0;
  for (int32_t i = b.n0; i < b.p->graph->nnodes; i++) {
    const tfg_node *n = N(&b, i);
    if (n->op != TFG_OP_ALLREDUCE) continue;
    int k = 0;
    while (k < nkeys && keys[k] != n->attrs.key) k++;
    if (k == nkeys) keys[nkeys++] = n->attrs.key;
  }
  ck_assert_int_eq(nkeys, 2); /* one per job's param, each shared by its 2 replicas */
  ck_assert_int_ne(N(&b, N(&b, b.steps[0].updates[0])->inputs[1])->attrs.key,
                   N(&b, N(&b, second.updates[0])->inputs[1])->attrs.key);
  ck_assert(pinned(N(&b, N(&b, second.updates[1])->inputs[1]), 3));
  tfg_train_step_free(&second);
  program_free(&b);
}
END_TEST

/* ---- parameter_server ---------------------------------------------------------------- */

START_TEST(ps_structure) {
  built b;
  build_mlp(&b, "parameter_server(ps = cpu, workers = [gpu:0, gpu:1])");
  const tfg_train_step *st = &b.steps[0];
  ck_assert_int_eq(st->nreplicas, 2);
  ck_assert_int_eq(st->nparams, 4);
  ck_assert_int_eq(st->nupdates, 4);
  ck_assert_int_eq(st->nstates, 4);
  ck_assert_int_eq(st->nmirrors, 0);
  ck_assert_ptr_nonnull(st->worker_params);
  ck_assert_ptr_nonnull(st->worker_grads);
  ck_assert_ptr_nonnull(st->grad_inputs);
  expect_ordered_and_pinned(&b);
  static const char *const names[] = {"w1", "b1", "w2", "b2"};
  for (int i = 0; i < 4; i++) {
    tfg_node_id pid = named(&b, names[i]);
    ck_assert_int_eq(st->params[i], pid);
    ck_assert(pinned(N(&b, pid), -1)); /* on the server */
    /* The server's update reads a placeholder for a worker's gradient. */
    const tfg_node *gi = N(&b, st->grad_inputs[i]);
    char gname[32];
    snprintf(gname, sizeof gname, "grad:%s", names[i]);
    ck_assert_int_eq(gi->op, TFG_OP_INPUT);
    ck_assert_str_eq(gi->name, gname);
    ck_assert(tfg_shape_eq(&gi->shape, &N(&b, pid)->shape));
    ck_assert(pinned(gi, -1));
    const tfg_node *u = N(&b, st->updates[i]);
    ck_assert_int_eq(u->inputs[0], pid);
    ck_assert_int_eq(u->inputs[1], st->grad_inputs[i]);
    ck_assert(pinned(u, -1));
    ck_assert(pinned(N(&b, u->inputs[2]), -1)); /* the momentum buffer */
    for (int w = 0; w < 2; w++) {
      const tfg_node *wp = N(&b, st->worker_params[w * 4 + i]);
      ck_assert_int_ge(st->worker_params[w * 4 + i], b.n0);
      ck_assert_int_eq(wp->op, TFG_OP_PARAM);
      ck_assert_str_eq(wp->name, names[i]);
      ck_assert(pinned(wp, w));
      ck_assert(tfg_shape_eq(&N(&b, st->worker_grads[w * 4 + i])->shape, &wp->shape));
      expect_cone_on(&b, st->worker_grads[w * 4 + i], w);
    }
  }
  /* Each worker takes a whole batch: no slices, the inputs read as they are. */
  for (int32_t i = b.n0; i < b.p->graph->nnodes; i++) {
    ck_assert_int_ne(N(&b, i)->op, TFG_OP_SLICE);
    ck_assert_int_ne(N(&b, i)->op, TFG_OP_ALLREDUCE);
  }
  ck_assert(pinned(N(&b, named(&b, "x")), -1));
  for (int w = 0; w < 2; w++) {
    const tfg_node *loss = N(&b, st->losses[w]);
    ck_assert(pinned(loss, w));
    ck_assert_int_eq(loss->inputs[1], named(&b, "y"));
  }
  program_free(&b);
}
END_TEST

/* ---- numbers ---------------------------------------------------------------------------- */

/* Writes a little-endian .npy (format 1.0) of the given dtype code. */
static const char *write_npy(const char *name, const char *descr, const int64_t *dims, int rank, const void *data,
                             size_t bytes) {
  char dict[160], shape[64] = "";
  for (int i = 0; i < rank; i++) {
    size_t len = strlen(shape);
    snprintf(shape + len, sizeof shape - len, "%lld,%s", (long long)dims[i], i + 1 < rank ? " " : "");
  }
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  int hlen = (n + 1 + 10 + 63) / 64 * 64 - 10; /* header padded so the data is 64-byte aligned */
  size_t total = 10 + (size_t)hlen + bytes;
  unsigned char *buf = malloc(total);
  ck_assert_ptr_nonnull(buf);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  memset(buf + 10, ' ', (size_t)hlen);
  memcpy(buf + 10, dict, (size_t)n);
  buf[10 + hlen - 1] = '\n';
  memcpy(buf + 10 + hlen, data, bytes);
  const char *p = scratch_write(name, buf, total);
  free(buf);
  return p;
}

/* An f64 MLP on a batch of 8, fed from .npy files. */
static const char *mlp64 =
    "input x: f64[8, 3]\n"
    "input y: i32[8]\n"
    "param w1: f64[3, 5] = normal(std = 0.7)\n"
    "param b1: f64[5] = normal(std = 0.3)\n"
    "param w2: f64[5, 4] = normal(std = 0.7)\n"
    "param b2: f64[4] = normal(std = 0.3)\n"
    "h = tanh(matmul(x, w1) + b1)\n"
    "logits = matmul(h, w2) + b2\n"
    "loss = cross_entropy(logits, y)\n"
    "train loss { optimizer = adam(lr = 0.01); steps = 1; metrics = [accuracy(logits, y)]; strategy = %s }\n";

/* Runs the rewritten program on the CPU session and compares, per trained
 * param, the gradient of the program's own loss over the global batch of
 * 8 with the mean over the replicas of their gradients (mirrored) or each
 * worker's gradient (parameter_server: a worker takes the whole batch).
 *
 * Tolerance: both sides are the same sum (the loss is a mean over rows,
 * and the rows split into equal blocks, so the mean of the blocks' means
 * is the global mean); they differ only in the order f64 additions are
 * done in. Each entry sums at most 8 row terms of order 1, so the
 * difference is a few times 8 * 2^-53 ~ 1e-15; 1e-12 (1 + |g|) keeps a
 * wide margin, while a wrong split (a row lost or counted twice, a
 * missing 1/R) moves entries by O(|g| / 8) ~ 1e-2. */
static void expect_global_gradient(const char *strategy, bool ps) {
  double xv[8 * 3];
  int32_t yv[8];
  for (int i = 0; i < 24; i++) xv[i] = sin(1.7 * i + 0.3) * 1.5;
  for (int i = 0; i < 8; i++) yv[i] = (i * 5 + 1) % 4;
  const int64_t xd[2] = {8, 3}, yd[1] = {8};
  tfg_feed_file feeds[2] = {{"x", write_npy("x.npy", "<f8", xd, 2, xv, sizeof xv)},
                            {"y", write_npy("y.npy", "<i4", yd, 1, yv, sizeof yv)}};
  char text[2048];
  snprintf(text, sizeof text, mlp64, strategy);
  built b;
  build_ok(&b, text);
  const tfg_train_step *st = &b.steps[0];
  int n = st->nparams, R = st->nreplicas;
  ck_assert_int_eq(n, 4);

  /* What to fetch: the plain gradients (below) and loss, each replica's
   * gradients and loss, and each replica's params (they must start equal). */
  enum { MAXR = 4 };
  ck_assert_int_le(R, MAXR);
  tfg_node_id fetch[4 + 1 + MAXR * 4 + MAXR + MAXR * 4];
  int nf = n;
  fetch[nf++] = b.act->loss;
  for (int r = 0; r < R; r++)
    for (int i = 0; i < n; i++) {
      if (ps) fetch[nf++] = st->worker_grads[r * n + i];
      else fetch[nf++] = N(&b, N(&b, st->updates[r * n + i])->inputs[1])->inputs[0]; /* under the all-reduce */
    }
  for (int r = 0; r < R; r++) fetch[nf++] = st->losses[r];
  for (int r = 0; r < R; r++)
    for (int i = 0; i < n; i++) {
      if (ps) fetch[nf++] = st->worker_params[r * n + i];
      else fetch[nf++] = r == 0 ? st->params[i] : mirror_of(&b, st->params[i], r - 1);
    }
  /* The CPU session plans the whole graph on cpu:0 alone, where a key's
   * all-reduces would share one device (the planner wants one node per
   * device). What is compared all comes before the first all-reduce (or
   * the server's placeholders): the graph is cut there. */
  int32_t cut = b.p->graph->nnodes;
  for (int32_t i = b.n0; i < cut; i++)
    if (N(&b, i)->op == TFG_OP_ALLREDUCE || (N(&b, i)->op == TFG_OP_INPUT && i >= b.n0)) cut = i;
  for (int k = n; k < nf; k++) ck_assert_int_lt(fetch[k], cut);
  tfg_graph_truncate(b.p->graph, cut);
  /* The plain gradient, over the program's own (whole-batch) loss. */
  tfg_autodiff(b.p->graph, b.act->loss, st->params, n, fetch, NULL);
  tfg_session_opts so = {.threads = 1, .feeds = feeds, .nfeeds = 2};
  tfg_session *s = tfg_session_new(b.p, b.d, &so);
  if (!s) ck_abort_msg("no session: %s", test_render(b.d, false));
  tfg_tensor out[sizeof fetch / sizeof fetch[0]];
  if (tfg_session_run(s, fetch, nf, out) != TFG_OK) ck_abort_msg("the run failed: %s", test_render(b.d, false));

  const tfg_tensor *pg = &out[0], *pl = &out[n], *rg = &out[n + 1], *rl = &out[n + 1 + R * n],
                   *rp = &out[n + 1 + R * n + R];
  for (int r = 1; r < R; r++)
    for (int i = 0; i < n; i++) {
      const tfg_tensor *a = &rp[i], *c = &rp[r * n + i];
      ck_assert_msg(memcmp(a->data, c->data, (size_t)tfg_shape_numel(&a->shape) * sizeof(double)) == 0,
                    "replica %d starts with another %s", r, N(&b, st->params[i])->name);
    }
  for (int i = 0; i < n; i++) {
    int64_t m = tfg_shape_numel(&pg[i].shape);
    const double *g = pg[i].data;
    for (int64_t e = 0; e < m; e++) {
      double mean = 0;
      for (int r = 0; r < R; r++) {
        ck_assert_int_eq(tfg_shape_numel(&rg[r * n + i].shape), m);
        double v = ((const double *)rg[r * n + i].data)[e];
        if (ps) ck_assert_msg(fabs(v - g[e]) <= 1e-12 * (1 + fabs(g[e])), "%s: worker %d: %g vs %g", strategy, r, v, g[e]);
        mean += v;
      }
      mean /= R;
      ck_assert_msg(fabs(mean - g[e]) <= 1e-12 * (1 + fabs(g[e])), "%s: d %s[%lld]: replicas %.17g, whole batch %.17g",
                    strategy, N(&b, st->params[i])->name, (long long)e, mean, g[e]);
      ck_assert(g[e] != 0); /* the comparison means something */
    }
  }
  double L = *(const double *)pl->data, mean = 0;
  for (int r = 0; r < R; r++) mean += *(const double *)rl[r].data;
  mean /= R;
  ck_assert_msg(fabs(mean - L) <= 1e-12 * (1 + fabs(L)), "%s: loss %.17g vs %.17g", strategy, mean, L);
  tfg_session_free(s);
  program_free(&b);
}

START_TEST(mirrored_mean_is_global_gradient) {
  expect_global_gradient("mirrored([gpu:0, gpu:1])", false);
  expect_global_gradient("mirrored([gpu:0, gpu:1, gpu:2, gpu:3])", false);
  expect_global_gradient("mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])", false);
}
END_TEST

START_TEST(ps_worker_gradient_is_global_gradient) {
  expect_global_gradient("parameter_server(workers = [gpu:0, gpu:1, gpu:2])", true);
}
END_TEST

Suite *suite_strategy(void) {
  Suite *s = suite_create("strategy");
  TCase *tc = tcase_create("setting");
  tcase_add_test(tc, reads_strategies);
  tcase_add_test(tc, rejects_bad_strategies);
  tcase_add_test(tc, duplicate_device_message);
  suite_add_tcase(s, tc);
  tc = tcase_create("rewrite");
  tcase_add_test(tc, single_is_autodiff);
  tcase_add_test(tc, autocast_clone);
  tcase_add_test(tc, autocast_views);
  tcase_add_test(tc, accumulate_structure);
  tcase_add_test(tc, mirrored_structure);
  tcase_add_test(tc, mirrored_slices_first);
  tcase_add_test(tc, mirrored_groups_map_pins);
  tcase_add_test(tc, mirrored_pin_outside_group);
  tcase_add_test(tc, mirrored_batch_must_divide);
  tcase_add_test(tc, mirrored_shape_must_survive_split);
  tcase_add_test(tc, mirrored_failure_is_undone);
  tcase_add_test(tc, mirrored_cpu_gradient_reduced_on_replica);
  tcase_add_test(tc, mirrored_keys_unique_across_actions);
  tcase_add_test(tc, metric_only_params);
  tcase_add_test(tc, ps_structure);
  suite_add_tcase(s, tc);
  tc = tcase_create("numbers");
  tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
  tcase_add_test(tc, mirrored_mean_is_global_gradient);
  tcase_add_test(tc, ps_worker_gradient_is_global_gradient);
  suite_add_tcase(s, tc);
  return s;
}
