/* tests/unit/test_exec.c: the executor (runtime/exec.c) through sessions
 * (runtime/session.c), on host devices (runtime/backend_host.c).
 *
 * Programs are parsed and evaluated from text, given their training step
 * (compiler/strategy.h), placed over "host*2" (cpu:0, gpu:0 and gpu:1 as
 * host devices) and planned; a session with opts.plan runs that plan, a
 * session without runs the whole graph on cpu:0. Checked: a pinned
 * forward program gives the same bits on two devices as on one; a run
 * computes only the cone of its fetches; an injected device fault, a
 * kernel error on one device and a NaN under check_numerics each end the
 * run with one located error (and no hang: a hang is a Check timeout);
 * params written, read and trained on gpu:1 against hand-computed
 * values; a mirrored step keeps every replica's params bit-identical and
 * matches the single-device step; a traced run has slices on both
 * devices' tracks; and runs replayed from captures (CUDA Graphs, as host
 * devices emulate them) equal plain runs bit for bit, across fetch sets,
 * and report a failure where it began. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"
#include "runtime/trace.h"
#include "tests/unit/programs.h"
#include "tests/unit/scratch.h"
#include "tests/unit/unit.h"

/* Builds text with its first train action's step (if any); with devices
 * (a --devices spec), placed over it counting activations and planned. Any
 * failure aborts the test with the diagnostics; the plan must be valid. */
static void build(built *b, const char *text, const char *devices) {
  if (program_build(b, text, &(build_opts){.steps = 1, .devices = devices, .fit = true}) != TFG_OK)
    ck_abort_msg("building the program failed: %s", b->errs);
  if (b->plan) {
    tfg_strbuf why = {0};
    bool ok = tfg_plan_validate(b->plan, &why);
    ck_assert_msg(ok, "invalid plan: %s", why.data ? why.data : "");
    tfg_strbuf_free(&why);
  }
}

/* The k-th tensor the program prints (over all its print actions). */
static tfg_node_id printed(const built *b, int k) {
  for (int i = 0; i < b->p->nactions; i++) {
    const tfg_action *a = &b->p->actions[i];
    if (a->kind != TFG_ACTION_PRINT) continue;
    for (int j = 0; j < a->nitems; j++)
      if (a->items[j].is_tensor && k-- == 0) return a->items[j].node;
  }
  ck_abort_msg("the program prints fewer tensors");
  return -1;
}

/* The program's node named name (a PARAM or an INPUT). */
static tfg_node_id named(const built *b, const char *name) {
  for (int32_t i = 0; i < b->p->graph->nnodes; i++)
    if (b->p->graph->nodes[i].name && strcmp(b->p->graph->nodes[i].name, name) == 0) return i;
  ck_abort_msg("no node named %s", name);
  return -1;
}

static const tfg_node *N(const built *b, tfg_node_id id) { return &b->p->graph->nodes[id]; }

static size_t nbytes(const tfg_tensor *t) { return (size_t)tfg_shape_numel(&t->shape) * tfg_dtype_size(t->dtype); }

/* A session on b's plan (planned) or on cpu:0 alone; aborts when none. */
static tfg_session *open_session(built *b, bool planned, tfg_session_opts o) {
  o.plan = planned ? b->plan : NULL;
  tfg_session *s = tfg_session_new(b->p, b->d, &o);
  if (!s) ck_abort_msg("no session: %s", test_render(b->d, false));
  return s;
}

/* Asserts the diagnostics hold exactly one error, rendered as
 * "t.tfg:LINE:..." and containing every string of want (NULL-ended). */
static void expect_one_error(built *b, unsigned line, const char *const *want) {
  char *e = test_render(b->d, false);
  ck_assert_msg(tfg_diag_error_count(b->d) == 1, "want one error, got %zu:\n%s", tfg_diag_error_count(b->d), e);
  char at[32];
  snprintf(at, sizeof at, "t.tfg:%u:", line);
  ck_assert_msg(strncmp(e, at, strlen(at)) == 0, "want the error at %s, got:\n%s", at, e);
  for (const char *const *w = want; *w; w++) ck_assert_msg(strstr(e, *w) != NULL, "want \"%s\" in:\n%s", *w, e);
  free(e);
}

static int count_steps(const tfg_plan *p, tfg_plan_step_kind kind) {
  int n = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) n += p->dev[d].steps[s].kind == kind;
  return n;
}

/* ---- 1. two devices give the bits of one ------------------------------------------ */

/* A matmul chain that crosses gpu:0 -> gpu:1 -> gpu:0 (two copies), with
 * a reduction at the end. Device index: cpu:0 0, gpu:0 1, gpu:1 2. */
static const char FORWARD[] = "a = normal([16, 32], seed = 1)\n"            /* 1 */
                              "b = normal([32, 24], seed = 2)\n"            /* 2 */
                              "c = normal([24, 8], seed = 3)\n"             /* 3 */
                              "e = normal([8, 24], seed = 4)\n"             /* 4 */
                              "with gpu:0 { h = tanh(matmul(a, b)) }\n"     /* 5 */
                              "with gpu:1 { y = matmul(h, c) }\n"           /* 6 */
                              "with gpu:0 {\n"                              /* 7 */
                              "  z = matmul(y, e) + h\n"                    /* 8 */
                              "  s = sum(z * z)\n"                          /* 9 */
                              "}\n"                                         /* 10 */
                              "print h, y, z, s\n";                         /* 11 */

/* FORWARD built over host*2, and the four tensors it prints. */
static void build_forward(built *b, tfg_node_id fetch[4]) {
  build(b, FORWARD, "host*2");
  for (int i = 0; i < 4; i++) fetch[i] = printed(b, i);
}

/* Bitwise: both sessions run the same CPU kernels (the host backend runs
 * the registry's CPU kernel) on the same input bits in the same order,
 * with the same kernel thread count (.threads = 2): tfg's parallel_for
 * chunks by n, grain and thread count only (kernels/cpu/parallel.h), and
 * OpenBLAS's gemm splits its output, not the K sum, so no result depends
 * on which device or arena address ran it. Copies are memcpy. */
START_TEST(two_devices_same_bits) {
  built b;
  tfg_node_id fetch[4];
  build_forward(&b, fetch);
  /* the program really spans both devices */
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[0]), 1);
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[1]), 2);
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[2]), 1);
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[3]), 1);
  ck_assert_int_ge(count_steps(b.plan, TFG_PLAN_COPY), 2);

  tfg_session *one = open_session(&b, false, (tfg_session_opts){.threads = 2});
  tfg_session *two = open_session(&b, true, (tfg_session_opts){.threads = 2});
  tfg_tensor o1[4], o2[4];
  ck_assert_int_eq(tfg_session_run(one, fetch, 4, o1), TFG_OK);
  ck_assert_int_eq(tfg_session_run(two, fetch, 4, o2), TFG_OK);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(o1[i].dtype, o2[i].dtype);
    ck_assert(tfg_shape_eq(&o1[i].shape, &o2[i].shape));
    ck_assert_msg(memcmp(o1[i].data, o2[i].data, nbytes(&o1[i])) == 0, "fetch %d differs between 1 and 2 devices", i);
  }
  /* not a vacuous compare: s is a positive sum of squares */
  ck_assert(*(const float *)o2[3].data > 0);
  /* a second run of the same executor gives the same bits again */
  float s1 = *(const float *)o2[3].data;
  ck_assert_int_eq(tfg_session_run(two, fetch, 4, o2), TFG_OK);
  ck_assert(memcmp(&s1, o2[3].data, sizeof s1) == 0);
  ck_assert_int_eq(tfg_diag_error_count(b.d), 0);
  tfg_session_free(one);
  tfg_session_free(two);
  program_free(&b);
}
END_TEST

/* ---- 2. a run computes the cone of its fetches ------------------------------------ */

static const char CONE[] = "input x: f32[4]\n"                                          /* 1 */
                           "a = tensor([1.0, 2.0, 3.0, 4.0])\n"                         /* 2 */
                           "table = tensor([[0.0, 1.0], [2.0, 3.0]])\n"                 /* 3 */
                           "with gpu:1 { bad = embedding(table, tensor([5], dtype = i32)) }\n" /* 4 */
                           "with gpu:0 { y = a * 2.0 }\n"                               /* 5 */
                           "with gpu:1 { z = x + a }\n"                                 /* 6 */
                           "print y, z, bad\n";                                         /* 7 */

/* x has no data and `bad` would fail (id 5 of a 2-row table): y needs
 * neither, so fetching y runs neither. */
static void cone_on(bool planned) {
  built b;
  build(&b, CONE, "host*2");
  tfg_node_id y = printed(&b, 0), z = printed(&b, 1), bad = printed(&b, 2);
  tfg_session *s = open_session(&b, planned, (tfg_session_opts){.threads = 1});
  tfg_tensor out[1];
  ck_assert_msg(tfg_session_run(s, &y, 1, out) == TFG_OK, "%s", test_render(b.d, false));
  const float *v = out[0].data;
  for (int i = 0; i < 4; i++) ck_assert(v[i] == 2.0f * (float)(i + 1)); /* exact: doubling */
  ck_assert_int_eq(tfg_diag_error_count(b.d), 0);

  /* z needs x: the feed fails before anything is queued, at x's line */
  ck_assert_int_eq(tfg_session_run(s, &z, 1, out), TFG_ERR_IO);
  expect_one_error(&b, 1, (const char *const[]){"input x has no data", NULL});
  tfg_diag_clear(b.d);

  /* nothing ran, so nothing failed: y still runs */
  ck_assert_int_eq(tfg_session_run(s, &y, 1, out), TFG_OK);
  ck_assert(((const float *)out[0].data)[3] == 8.0f);

  /* and `bad` does fail when asked for: the first run did not skip it by luck */
  ck_assert_int_eq(tfg_session_run(s, &bad, 1, out), TFG_ERR_NUMERIC);
  expect_one_error(&b, 4, (const char *const[]){"embedding on", "id 5", NULL});
  tfg_session_free(s);
  program_free(&b);
}

START_TEST(cone_only) {
  cone_on(false);
  cone_on(true);
}
END_TEST

/* ---- 3. an injected device fault ---------------------------------------------------- */

/* gpu:1 runs tanh (its 1st launch) and mul (its 2nd); gpu:0 waits on a
 * copy of v from gpu:1 before the add. A CONST is a copy, not a launch. */
static const char FAULT[] = "a = tensor([[1.0, 2.0], [3.0, 4.0]])\n" /* 1 */
                            "with gpu:0 { h = matmul(a, a) }\n"      /* 2 */
                            "with gpu:1 { u = tanh(h) }\n"           /* 3 */
                            "with gpu:1 { v = u * 2.0 }\n"           /* 4 */
                            "with gpu:0 { r = v + h }\n"             /* 5 */
                            "with gpu:0 { q = h * 3.0 }\n"           /* 6 */
                            "print r, q\n";                          /* 7 */

/* A session whose backends fail device `device`'s after-th launch (the
 * hook of runtime/backend_fault.h, read when a backend is created). */
static tfg_session *session_with_fault(built *b, int device, int64_t after) {
  tfg_session_opts o = {.threads = 1, .plan = b->plan, .sw = {.fault_device = device, .fault_after = after}};
  tfg_session *s = tfg_session_new(b->p, b->d, &o);
  if (!s) ck_abort_msg("no session: %s", test_render(b->d, false));
  return s;
}

/* The fault on gpu:1's 2nd launch (v = u * 2.0, line 4): the run ends (a
 * hang would be the test's timeout) with TFG_ERR_DEVICE and one error
 * at a line of the program, naming the injected fault and a device. */
START_TEST(injected_fault) {
  built b;
  build(&b, FAULT, "host*2");
  tfg_node_id fetch[2] = {printed(&b, 0), printed(&b, 1)};
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[0]), 1);
  tfg_session *s = session_with_fault(&b, 2, 2);
  tfg_tensor out[2];
  ck_assert_int_eq(tfg_session_run(s, fetch, 2, out), TFG_ERR_DEVICE);
  char *e = test_render(b.d, false);
  ck_assert_msg(tfg_diag_error_count(b.d) == 1, "want one error:\n%s", e);
  ck_assert_msg(strstr(e, "injected fault (TFG_FAULT_DEVICE=2, TFG_FAULT_AFTER=2)") != NULL, "%s", e);
  ck_assert_msg(strstr(e, " on gpu:") != NULL, "no device named:\n%s", e);
  /* Reported where it happened (gpu:1's mul, line 4), not where it
   * arrived first in device order (gpu:0's add waits on the copy of v,
   * and fails through its event). */
  unsigned line = 0;
  ck_assert_msg(sscanf(e, "t.tfg:%u:", &line) == 1 && line == 4, "the fault is on line 4, reported:\n%s", e);
  ck_assert_msg(strstr(e, "mul on gpu:1 failed") != NULL, "want \"mul on gpu:1 failed\" in:\n%s", e);
  free(e);
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

/* A fault on gpu:0's first launch (the matmul everything waits for):
 * attribution is right here (gpu:0 is the first device in order). */
START_TEST(injected_fault_upstream) {
  built b;
  build(&b, FAULT, "host*2");
  tfg_node_id fetch[2] = {printed(&b, 0), printed(&b, 1)};
  tfg_session *s = session_with_fault(&b, 1, 1);
  tfg_tensor out[2];
  ck_assert_int_eq(tfg_session_run(s, fetch, 2, out), TFG_ERR_DEVICE);
  expect_one_error(&b, 2, (const char *const[]){"matmul on gpu:0 failed", "injected fault", NULL});
  /* sticky, as a CUDA error: the next run fails too, and does not hang */
  tfg_diag_clear(b.d);
  ck_assert_int_ne(tfg_session_run(s, fetch, 2, out), TFG_OK);
  ck_assert_int_ge(tfg_diag_error_count(b.d), 1);
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

/* ---- 4. a kernel error on one device --------------------------------------------- */

/* embedding id 7 of a 3-row table on gpu:1; gpu:0 has independent work
 * (w) and an op (t) that waits on the copy of e from gpu:1. */
static const char KERNEL_ERROR[] = "table = tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])\n"          /* 1 */
                                   "a = normal([64, 64], seed = 1)\n"                                /* 2 */
                                   "with gpu:1 { e = embedding(table, tensor([1, 7, 0], dtype = i32)) }\n" /* 3 */
                                   "with gpu:0 {\n"                                                  /* 4 */
                                   "  w = tanh(matmul(a, a))\n"                                      /* 5 */
                                   "  t = sum(e) + sum(w)\n"                                         /* 6 */
                                   "}\n"                                                             /* 7 */
                                   "print t, w\n";                                                   /* 8 */

START_TEST(kernel_error_on_one_device) {
  built b;
  build(&b, KERNEL_ERROR, "host*2");
  tfg_node_id fetch[2] = {printed(&b, 0), printed(&b, 1)};
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[0]), 1);
  ck_assert_int_ge(count_steps(b.plan, TFG_PLAN_COPY), 1);
  tfg_session *s = open_session(&b, true, (tfg_session_opts){.threads = 1});
  tfg_tensor out[2];
  ck_assert_int_eq(tfg_session_run(s, fetch, 2, out), TFG_ERR_NUMERIC);
  expect_one_error(&b, 3,
                   (const char *const[]){"embedding on gpu:1 failed", "embedding id 7", "outside [0, 3)", NULL});
  /* sticky: a later run fails too (and returns) */
  tfg_diag_clear(b.d);
  ck_assert_int_ne(tfg_session_run(s, &fetch[1], 1, out), TFG_OK);
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

/* ---- 5. check_numerics on a host device ------------------------------------------- */

static const char NUMERICS[] = "with gpu:0 { y = log(tensor([-1.0, 2.0])) }\n" /* 1 */
                               "with gpu:1 { z = exp(tensor([1.0])) }\n"       /* 2 */
                               "print y, z\n";                                 /* 3 */

START_TEST(check_numerics_names_op) {
  built b;
  build(&b, NUMERICS, "host*2");
  tfg_node_id fetch[2] = {printed(&b, 0), printed(&b, 1)};
  ck_assert_int_eq(tfg_placement_device(b.pl, fetch[0]), 1);
  /* without the check the NaN comes back as a value */
  tfg_session *s = open_session(&b, true, (tfg_session_opts){.threads = 1});
  tfg_tensor out[2];
  ck_assert_int_eq(tfg_session_run(s, fetch, 2, out), TFG_OK);
  const float *y = out[0].data;
  ck_assert(isnan(y[0]));
  /* log(2): a correctly rounded logf is within 1 ulp (~6e-8); 1e-6 allows a
   * vectorized approximation */
  ck_assert_msg(fabs(y[1] - log(2.0)) <= 1e-6, "log 2 = %.9g", y[1]);
  tfg_session_free(s);
  /* with it, the op that produced the NaN fails */
  s = open_session(&b, true, (tfg_session_opts){.threads = 1, .check_numerics = true});
  ck_assert_int_eq(tfg_session_run(s, fetch, 2, out), TFG_ERR_NUMERIC);
  expect_one_error(&b, 1, (const char *const[]){"log on gpu:0 failed", "produced", "nan", "element 0", NULL});
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

/* ---- 6. persistent values on gpu:1 ------------------------------------------------ */

/* loss = sum((w - t)^2), d loss / d w = 2 (w - t); SGD with lr 0.25:
 * w' = w - 0.5 (w - t) = (w + t) / 2. Every value below is a small
 * dyadic rational, so each f32 operation is exact: expected values are
 * compared bit for bit. */
static const char PERSIST[] = "t = tensor([3.0, 2.0, -1.0, 0.0])\n"              /* 1 */
                              "with gpu:1 { param w: f32[4] = zeros() }\n"      /* 2 */
                              "with gpu:1 { d = w - t }\n"                      /* 3 */
                              "loss = sum(d * d)\n"                             /* 4 */
                              "train loss { optimizer = sgd(lr = 0.25); steps = 2 }\n" /* 5 */
                              "print w\n";                                      /* 6 */

START_TEST(persistent_round_trip_and_update) {
  built b;
  build(&b, PERSIST, "host*2");
  tfg_node_id w = named(&b, "w");
  ck_assert_int_eq(printed(&b, 0), w);
  ck_assert_int_eq(tfg_placement_device(b.pl, w), 2);
  ck_assert_int_eq(b.steps[0].nparams, 1);
  ck_assert_int_eq(b.steps[0].params[0], w);
  tfg_session *s = open_session(&b, true, (tfg_session_opts){.threads = 1});
  ck_assert(tfg_session_holds(s, w));

  float v[4];
  tfg_session_read(s, w, v);
  for (int i = 0; i < 4; i++) ck_assert(v[i] == 0.0f); /* zeros() */
  const float w0[4] = {1, 2, 3, -4};
  tfg_session_write(s, w, w0);
  tfg_session_read(s, w, v);
  ck_assert(memcmp(v, w0, sizeof v) == 0);

  /* fetch the loss, every update and w: w comes back after the update */
  int nf = b.steps[0].nupdates + 2;
  tfg_node_id fetch[8];
  ck_assert_int_le(nf, 8);
  fetch[0] = b.steps[0].loss;
  for (int i = 0; i < b.steps[0].nupdates; i++) fetch[1 + i] = b.steps[0].updates[i];
  fetch[nf - 1] = w;
  tfg_tensor out[8];
  static const float want_loss[2] = {36, 9}; /* (1-3)^2+0+(3+1)^2+(-4)^2; (2-3)^2+0+(1+1)^2+(-2)^2 */
  static const float want_w[2][4] = {{2, 2, 1, -2}, {2.5f, 2, 0, -1}};
  for (int k = 0; k < 2; k++) {
    tfg_run_opts ro = {.training = true, .step = k + 1, .any_split = true};
    ck_assert_msg(tfg_session_run_with(s, fetch, nf, out, &ro) == TFG_OK, "%s", test_render(b.d, false));
    ck_assert_msg(*(const float *)out[0].data == want_loss[k], "step %d: loss %g", k + 1,
                  (double)*(const float *)out[0].data);
    ck_assert_msg(memcmp(out[nf - 1].data, want_w[k], sizeof v) == 0, "step %d: fetched w is not (w + t) / 2", k + 1);
    tfg_session_read(s, w, v);
    ck_assert(memcmp(v, want_w[k], sizeof v) == 0);
  }
  /* a write is what the next forward run reads: w = t gives loss 0 */
  const float t[4] = {3, 2, -1, 0};
  tfg_session_write(s, w, t);
  ck_assert_int_eq(tfg_session_run(s, &b.steps[0].loss, 1, out), TFG_OK);
  ck_assert(*(const float *)out[0].data == 0.0f);
  ck_assert_int_eq(tfg_diag_error_count(b.d), 0);
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

/* ---- 7. a mirrored step ------------------------------------------------------------ */

static const char MIRRORED[] = "input x: f32[8, 3]\n"
                               "input y: f32[8, 2]\n"
                               "param w: f32[3, 2] = zeros()\n"
                               "param b: f32[2] = zeros()\n"
                               "loss = mse(tanh(matmul(x, w) + b), y)\n"
                               "train loss { optimizer = sgd(lr = 0.5); steps = 3%s }\n";

/* One training setup: the program with or without a strategy, its
 * session's host backends with captured runs (graphs) or without. */
typedef struct trainer {
  built b;
  tfg_session *s;
  tfg_node_id x, y;
} trainer;

static void trainer_open(trainer *t, const char *strategy, bool graphs) {
  char text[1024];
  snprintf(text, sizeof text, MIRRORED, strategy);
  build(&t->b, text, strategy[0] ? "host*2" : NULL);
  t->s = open_session(&t->b, strategy[0] != 0, (tfg_session_opts){.threads = 2, .sw = {.host_graphs = graphs}});
  t->x = named(&t->b, "x");
  t->y = named(&t->b, "y");
  /* the same start on both setups (the program's own init would match too:
   * it draws from the name; explicit values make the test not depend on it) */
  float w0[6], b0[2] = {0.1f, -0.2f};
  for (int i = 0; i < 6; i++) w0[i] = (float)(0.4 * sin(1.3 * i + 0.5));
  tfg_session_write(t->s, named(&t->b, "w"), w0);
  tfg_session_write(t->s, named(&t->b, "b"), b0);
  /* replicas start equal, as tfg_train makes them (sync_mirrors) */
  const tfg_train_step *st = &t->b.steps[0];
  for (int i = 0; i < st->nmirrors; i++) {
    float buf[6];
    ck_assert_uint_le(nbytes(&(tfg_tensor){NULL, N(&t->b, st->mirror_src[i])->dtype, N(&t->b, st->mirror_src[i])->shape}),
                      sizeof buf);
    tfg_session_read(t->s, st->mirror_src[i], buf);
    tfg_session_write(t->s, st->mirror_dst[i], buf);
  }
}

/* Step k (from 1): feeds the global batch, runs every update; *loss gets
 * the mean of the replicas' losses (each saw an equal share). */
static void trainer_step(trainer *t, int k, const float *xv, const float *yv, double *loss) {
  const tfg_train_step *st = &t->b.steps[0];
  int nf = st->nreplicas + st->nupdates;
  tfg_node_id fetch[32];
  tfg_tensor out[32];
  ck_assert_int_le(nf, 32);
  for (int r = 0; r < st->nreplicas; r++) fetch[r] = st->losses[r];
  for (int i = 0; i < st->nupdates; i++) fetch[st->nreplicas + i] = st->updates[i];
  tfg_node_id vn[2] = {t->x, t->y};
  const void *vv[2] = {xv, yv};
  tfg_run_opts ro = {.training = true, .step = k, .any_split = true, .nvalues = 2, .value_nodes = vn, .values = vv};
  ck_assert_msg(tfg_session_run_with(t->s, fetch, nf, out, &ro) == TFG_OK, "step %d: %s", k,
                test_render(t->b.d, false));
  double sum = 0;
  for (int r = 0; r < st->nreplicas; r++) sum += *(const float *)out[r].data;
  *loss = sum / st->nreplicas;
}

static void trainer_close(trainer *t) {
  tfg_session_free(t->s);
  program_free(&t->b);
}

/* Three SGD steps mirrored over gpu:0 and gpu:1 against the same three
 * steps on cpu:0 alone with the whole batch.
 *
 * Replicas: bit for bit. The all-reduce leaves the same bits on every
 * rank (the ring reduces each chunk once and copies it to the others),
 * and each replica's update is the same kernel on the same param and
 * gradient bits.
 *
 * Against one device: the loss is a mean over the batch, so the mean of
 * the two halves' gradients is the whole batch's gradient in exact
 * arithmetic; in f32 they differ only in the order of the additions
 * (each gradient entry sums 16 terms of size <= ~1 with rounding
 * 2^-24 ~ 6e-8 each, so a few 1e-7), and three steps of lr 0.5 carry at
 * most a few times that into the params. 1e-5 (1 + |w|) is a wide
 * margin, while a wrong reduction (a sum instead of the mean, a half
 * lost) moves the params by O(lr |g|) ~ 1e-2 (asserted below: they move
 * at least 1e-2 from their start). */
START_TEST(mirrored_replicas_identical) {
  float xv[8 * 3], yv[8 * 2];
  for (int i = 0; i < 24; i++) xv[i] = (float)sin(0.7 * i + 0.2);
  for (int i = 0; i < 16; i++) yv[i] = (float)cos(1.1 * i);
  trainer m, one;
  trainer_open(&m, "; strategy = mirrored([gpu:0, gpu:1])", false);
  trainer_open(&one, "", false);
  const tfg_train_step *st = &m.b.steps[0];
  ck_assert_int_eq(st->nreplicas, 2);
  ck_assert_int_eq(st->nparams, 2);
  ck_assert_int_eq(st->nmirrors, 2); /* w and b on gpu:1; SGD without momentum has no state */
  ck_assert_int_ge(m.b.plan->nbuckets, 1);
  for (int i = 0; i < st->nmirrors; i++) {
    ck_assert_int_eq(tfg_placement_device(m.b.pl, st->mirror_src[i]), 1);
    ck_assert_int_eq(tfg_placement_device(m.b.pl, st->mirror_dst[i]), 2);
  }
  float start[2][6]; /* per param of st, its value before training */
  for (int i = 0; i < 2; i++) tfg_session_read(one.s, named(&one.b, N(&m.b, st->params[i])->name), start[i]);

  for (int k = 1; k <= 3; k++) {
    double lm, l1;
    trainer_step(&m, k, xv, yv, &lm);
    trainer_step(&one, k, xv, yv, &l1);
    ck_assert_msg(fabs(lm - l1) <= 1e-5 * (1 + fabs(l1)), "step %d: loss %.9g mirrored, %.9g on one device", k, lm, l1);
  }
  for (int i = 0; i < st->nparams; i++) {
    const tfg_node *pn = N(&m.b, st->params[i]);
    int64_t n = tfg_shape_numel(&pn->shape);
    float r0[6], other[6], ref[6];
    ck_assert_int_le(n, 6);
    tfg_session_read(m.s, st->params[i], r0);
    tfg_session_read(one.s, named(&one.b, pn->name), ref);
    int copies = 0;
    for (int j = 0; j < st->nmirrors; j++) {
      if (st->mirror_src[j] != st->params[i]) continue;
      tfg_session_read(m.s, st->mirror_dst[j], other);
      ck_assert_msg(memcmp(r0, other, sizeof(float) * (size_t)n) == 0, "replica 1's %s differs from replica 0's",
                    pn->name);
      copies++;
    }
    ck_assert_int_eq(copies, 1);
    const float *s0 = start[i];
    double moved = 0;
    for (int64_t e = 0; e < n; e++) {
      ck_assert_msg(fabsf(r0[e] - ref[e]) <= 1e-5f * (1 + fabsf(ref[e])), "%s[%lld]: mirrored %.9g, one device %.9g",
                    pn->name, (long long)e, (double)r0[e], (double)ref[e]);
      moved = fmax(moved, fabs((double)ref[e] - s0[e]));
    }
    ck_assert_msg(moved >= 1e-2, "%s barely moved (%g): the comparison would be vacuous", pn->name, moved);
  }
  ck_assert_int_eq(tfg_diag_error_count(m.b.d), 0);
  trainer_close(&m);
  trainer_close(&one);
}
END_TEST

/* ---- 8. trace --------------------------------------------------------------------- */

/* The writer's format is fixed (runtime/trace.c): a slice is
 * {"name":N,"cat":C,"ph":"X","pid":DEVICE,"tid":STREAM,...}. */
START_TEST(trace_has_both_devices) {
  built b;
  tfg_node_id fetch[4];
  build_forward(&b, fetch);
  tfg_trace *tr = tfg_trace_new();
  tfg_session *s = open_session(&b, true, (tfg_session_opts){.threads = 1, .trace = tr});
  tfg_tensor out[4];
  ck_assert_int_eq(tfg_session_run(s, fetch, 4, out), TFG_OK);
  tfg_session_free(s); /* the backends stop recording */
  tfg_strbuf err = {0};
  const char *path = scratch_path("run.json");
  ck_assert_msg(tfg_trace_write(tr, path, &err) == TFG_OK, "%s", err.data ? err.data : "");
  tfg_strbuf_free(&err);
  tfg_trace_free(tr);
  char *j = scratch_read(path, NULL);
  static const char *const want[] = {
      /* tracks named after the devices and streams */
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"gpu:0\"}}",
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"tid\":0,\"args\":{\"name\":\"gpu:1\"}}",
      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":1,\"args\":{\"name\":\"copy\"}}",
      /* kernels on both compute streams */
      "{\"name\":\"matmul\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":0,",
      "{\"name\":\"tanh\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":0,",
      "{\"name\":\"matmul\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":2,\"tid\":0,",
      "{\"name\":\"sum\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":0,",
      /* h copied into gpu:1, y back into gpu:0, each on the receiver's copy stream */
      "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"X\",\"pid\":2,\"tid\":1,",
      "{\"name\":\"copy\",\"cat\":\"copy\",\"ph\":\"X\",\"pid\":1,\"tid\":1,",
      NULL};
  for (const char *const *w = want; *w; w++) ck_assert_msg(strstr(j, *w) != NULL, "the trace lacks %s", *w);
  free(j);
  program_free(&b);
}
END_TEST

/* ---- 9. captured runs (CUDA Graphs, emulated by host devices) ------------------------
 * The switch host_graphs (TFG_HOST_GRAPHS=1, runtime/backend.h) gives the
 * host backends of a session made with it the capture entries: the executor then runs gpu:0 and gpu:1
 * through its CUDA Graphs path (cpu:0 feeding them), which is the GPU's
 * path but for the backend: a key's first run plain, its second captured
 * and replayed, the later ones replayed, host values through stages. */

/* Five mirrored SGD steps with another batch each step (a stage that was
 * not refilled would replay the first batch) against the same steps
 * without capture: the same bits every step, since a replay queues the
 * very operations the capture recorded, in the same order, on the same
 * memory; and 4 of the 5 runs were replays. */
START_TEST(replays_equal_plain_runs) {
  trainer g, p;
  trainer_open(&g, "; strategy = mirrored([gpu:0, gpu:1])", true);
  trainer_open(&p, "; strategy = mirrored([gpu:0, gpu:1])", false);
  for (int k = 1; k <= 5; k++) {
    float xv[8 * 3], yv[8 * 2];
    for (int i = 0; i < 24; i++) xv[i] = (float)sin(0.7 * i + 0.3 * k);
    for (int i = 0; i < 16; i++) yv[i] = (float)cos(1.1 * i - 0.2 * k);
    double lg, lp;
    trainer_step(&g, k, xv, yv, &lg);
    trainer_step(&p, k, xv, yv, &lp);
    ck_assert_msg(memcmp(&lg, &lp, sizeof lg) == 0, "step %d: loss %.9g replayed, %.9g plain", k, lg, lp);
  }
  ck_assert_int_eq(tfg_session_replays(g.s), 4);
  ck_assert_int_eq(tfg_session_replays(p.s), 0);
  const tfg_train_step *st = &g.b.steps[0];
  for (int i = 0; i < st->nparams; i++) {
    float a[6], b[6];
    tfg_session_read(g.s, st->params[i], a);
    tfg_session_read(p.s, st->params[i], b);
    ck_assert_msg(memcmp(a, b, sizeof(float) * (size_t)tfg_shape_numel(&N(&g.b, st->params[i])->shape)) == 0,
                  "%s differs after replays", N(&g.b, st->params[i])->name);
  }
  trainer_close(&g);
  trainer_close(&p);
}
END_TEST

/* Ten fetch sets (more than the executor's eight cached captures), each
 * run three times, interleaved: every result equals a plain session's,
 * bit for bit, whichever capture served it, one was evicted or not. */
START_TEST(many_keys_evict) {
  built b;
  tfg_node_id all[4];
  build_forward(&b, all);
  tfg_session *g = open_session(&b, true, (tfg_session_opts){.threads = 2, .sw = {.host_graphs = true}});
  tfg_session *p = open_session(&b, true, (tfg_session_opts){.threads = 2});
  /* key k fetches the nodes of the bits of k + 1 (1..10 over 4 nodes), one
   * of them twice when k is odd (duplicates are one key) */
  for (int round = 0; round < 3; round++)
    for (int k = 0; k < 10; k++) {
      tfg_node_id fetch[5];
      int n = 0;
      for (int i = 0; i < 4; i++)
        if ((k + 1) >> i & 1) fetch[n++] = all[i];
      if (k % 2) fetch[n++] = fetch[0];
      tfg_tensor og[5], op[5];
      ck_assert_msg(tfg_session_run(g, fetch, n, og) == TFG_OK, "%s", test_render(b.d, false));
      ck_assert_int_eq(tfg_session_run(p, fetch, n, op), TFG_OK);
      for (int i = 0; i < n; i++)
        ck_assert_msg(memcmp(og[i].data, op[i].data, nbytes(&op[i])) == 0, "round %d key %d fetch %d differs", round,
                      k, i);
    }
  /* the ten keys each ran three times; with eight slots in LRU order every
   * key is evicted before it comes back, so none is ever replayed... */
  ck_assert_int_eq(tfg_session_replays(g), 0);
  /* ...while a key run back to back is: runs 2 and 3 */
  for (int r = 0; r < 3; r++) {
    tfg_tensor og[4];
    ck_assert_int_eq(tfg_session_run(g, all, 4, og), TFG_OK);
  }
  ck_assert_int_eq(tfg_session_replays(g), 2);
  ck_assert_int_eq(tfg_diag_error_count(b.d), 0);
  tfg_session_free(g);
  tfg_session_free(p);
  program_free(&b);
}
END_TEST

static const char BAD_ID[] = "input ids: i32[2]\n"                                    /* 1 */
                             "table = tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])\n" /* 2 */
                             "with gpu:1 { e = embedding(table, ids) * 2.0 }\n"       /* 3 */
                             "print e\n";                                             /* 4 */

/* A data error that only the third run's feed has, found while that run
 * replays a capture: one located error at the op (line 3), as without
 * capture; and the runs before gave the right values from their feeds. */
START_TEST(replay_failure_located) {
  built b;
  build(&b, BAD_ID, "host*2");
  tfg_node_id ids = named(&b, "ids"), e = printed(&b, 0);
  tfg_session *s = open_session(&b, true, (tfg_session_opts){.threads = 1, .sw = {.host_graphs = true}});
  const int32_t feeds[3][2] = {{2, 0}, {1, 2}, {0, 7}};
  for (int r = 0; r < 3; r++) {
    tfg_node_id vn[1] = {ids};
    const void *vv[1] = {feeds[r]};
    tfg_run_opts ro = {.nvalues = 1, .value_nodes = vn, .values = vv};
    tfg_tensor out[1];
    tfg_status st = tfg_session_run_with(s, &e, 1, out, &ro);
    if (r < 2) {
      ck_assert_msg(st == TFG_OK, "%s", test_render(b.d, false));
      const float *v = out[0].data;
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) ck_assert(v[i * 2 + j] == 2.0f * (float)(feeds[r][i] * 2 + j)); /* exact */
    } else {
      ck_assert_int_eq(st, TFG_ERR_NUMERIC);
      expect_one_error(&b, 3, (const char *const[]){"embedding on gpu:1 failed", "id 7", NULL});
    }
  }
  ck_assert_int_eq(tfg_session_replays(s), 2); /* runs 2 and 3 (whose replay failed) */
  tfg_session_free(s);
  program_free(&b);
}
END_TEST

Suite *suite_exec(void) {
  Suite *s = suite_create("exec");
  TCase *tc = tcase_create("runs");
  /* generous for sanitizer builds; a hang still fails, at this limit */
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, two_devices_same_bits);
  tcase_add_test(tc, cone_only);
  tcase_add_test(tc, persistent_round_trip_and_update);
  tcase_add_test(tc, mirrored_replicas_identical);
  suite_add_tcase(s, tc);
  tc = tcase_create("failures");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, injected_fault);
  tcase_add_test(tc, injected_fault_upstream);
  tcase_add_test(tc, kernel_error_on_one_device);
  tcase_add_test(tc, check_numerics_names_op);
  suite_add_tcase(s, tc);
  tc = tcase_create("trace");
  tcase_set_timeout(tc, 30);
  tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
  tcase_add_test(tc, trace_has_both_devices);
  suite_add_tcase(s, tc);
  tc = tcase_create("graphs");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, replays_equal_plain_runs);
  tcase_add_test(tc, many_keys_evict);
  tcase_add_test(tc, replay_failure_located);
  suite_add_tcase(s, tc);
  return s;
}
