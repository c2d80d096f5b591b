/* tests/unit/test_fuse.c: chains of elementwise ops fused into one launch
 * (docs/plan.md, Fusion; kernels/fused.h).
 *
 * Programs are built through the real pipeline (tests/unit/programs.h)
 * and planned again with fusion on, keeping what they print. Checked:
 * which ops fuse (a chain, a tree, keep, two readers, devices, shapes,
 * scalars, dtypes, params, optimizer updates in between, the caps on ops
 * and inputs); the validator accepts every fused plan and rejects broken
 * ones; `tfg plan`'s text; the CPU kernel against the ops run one at a
 * time, bit for bit, on random programs and data (f32, f64, scalars,
 * NaN and Inf, threads); a long chain's lower peak, and the fallback to
 * the unfused plan when the fused one does not fit; sessions on a fused
 * and an unfused plan giving the same bits; and random graphs over two
 * devices, whose fused plans are valid and run to the unfused bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/simplify.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "kernels/fused.h"
#include "runtime/exec.h"
#include "runtime/session.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A program built, placed over devices (tfg_place) and planned without
 * fusion (b->plan); every stage must succeed. */
static void build(built *b, const char *text, const char *devices) {
  if (program_build(b, text, &(build_opts){.steps = BUILT_MAX_STEPS, .devices = devices}) != TFG_OK)
    ck_abort_msg("building the program failed: %s", b->errs);
}

/* keep[]: the tensors b's print actions show (what the CLI keeps). */
static uint8_t *keep_printed(const built *b) {
  uint8_t *keep = calloc((size_t)b->p->graph->nnodes + 1, 1);
  ck_assert_ptr_nonnull(keep);
  for (int a = 0; a < b->p->nactions; a++)
    for (int i = 0; b->p->actions[a].kind == TFG_ACTION_PRINT && i < b->p->actions[a].nitems; i++)
      if (b->p->actions[a].items[i].is_tensor) keep[b->p->actions[a].items[i].node] = 1;
  return keep;
}

/* b's graph planned with fusion, keeping keep (NULL: what it prints);
 * the plan must be valid. */
static tfg_plan *fused_plan(built *b, const uint8_t *keep) {
  uint8_t *own = keep ? NULL : keep_printed(b);
  tfg_plan_opts o = {.fuse = true, .keep = keep ? keep : own};
  tfg_plan *p = NULL;
  ck_assert_int_eq(tfg_plan_build_with(b->p->graph, b->pl, b->ds, &o, b->d, &p), TFG_OK);
  free(own);
  plan_show(p);
  plan_expect_valid(p);
  return p;
}

/* How many chains text, built over devices, has in its fused plan. */
static int count_chains(const char *text, const char *devices) {
  built b;
  build(&b, text, devices);
  tfg_plan *p = fused_plan(&b, NULL);
  int n = p->nchains;
  tfg_plan_free(p);
  program_free(&b);
  return n;
}

/* The k-th tensor the program prints. */
static tfg_node_id printed(const built *b, int k) {
  for (int a = 0; a < b->p->nactions; a++)
    for (int i = 0; b->p->actions[a].kind == TFG_ACTION_PRINT && i < b->p->actions[a].nitems; i++)
      if (b->p->actions[a].items[i].is_tensor && k-- == 0) return b->p->actions[a].items[i].node;
  ck_abort_msg("the program prints fewer tensors");
  return -1;
}

static int count_launches(const tfg_plan *p, tfg_node_id node) {
  int n = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++)
      n += p->dev[d].steps[s].kind == TFG_PLAN_LAUNCH && (node < 0 || p->dev[d].steps[s].node == node);
  return n;
}

static bool has_buffer(const tfg_plan *p, tfg_node_id node) {
  for (int d = 0; d < p->ndev; d++)
    for (int i = 0; i < p->dev[d].nbuffers; i++)
      if (p->dev[d].buffers[i].node == node) return true;
  return false;
}

/* The LAUNCH step of node (device and index), which must exist. */
static tfg_plan_step *launch_of(tfg_plan *p, tfg_node_id node) {
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++)
      if (p->dev[d].steps[s].kind == TFG_PLAN_LAUNCH && p->dev[d].steps[s].node == node) return &p->dev[d].steps[s];
  ck_abort_msg("n%d is not launched", (int)node);
  return NULL;
}

/* ---- what fuses ----------------------------------------------------------------- */

START_TEST(chain_fuses) {
  built b;
  build(&b, "x = normal([64, 32], seed = 1)\ny = relu(x * 2 + 1)\nprint y\n", "host*1");
  const tfg_graph *g = b.p->graph;
  tfg_node_id mul = graph_last_op(g, TFG_OP_MUL), add = graph_last_op(g, TFG_OP_ADD);
  tfg_node_id relu = graph_last_op(g, TFG_OP_RELU);
  /* without fusion (tfg_plan_build, or fuse without keep): as before */
  ck_assert_int_eq(b.plan->nchains, 0);
  tfg_plan *nokeep = NULL;
  ck_assert_int_eq(tfg_plan_build_with(g, b.pl, b.ds, &(tfg_plan_opts){.fuse = true}, b.d, &nokeep), TFG_OK);
  ck_assert_int_eq(nokeep->nchains, 0);
  tfg_plan_free(nokeep);

  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 1);
  const tfg_plan_chain *c = &p->chains[0];
  ck_assert_int_eq(c->nnodes, 3);
  ck_assert_int_eq(c->nodes[0], mul);
  ck_assert_int_eq(c->nodes[1], add);
  ck_assert_int_eq(c->nodes[2], relu);
  /* inputs: x, then the constants 2 and 1, in first-read order */
  ck_assert_int_eq(c->ninputs, 3);
  ck_assert_int_eq(c->inputs[0], g->nodes[mul].inputs[0]);
  ck_assert_int_eq(c->inputs[1], g->nodes[mul].inputs[1]);
  ck_assert_int_eq(c->inputs[2], g->nodes[add].inputs[1]);
  ck_assert_int_eq(tfg_plan_chain_of(p, add), 0);
  ck_assert_int_eq(tfg_plan_chain_of(p, c->inputs[0]), -1);
  /* one launch, naming relu and the chain; mul and add have no step and no buffer */
  ck_assert_int_eq(count_launches(b.plan, -1) - count_launches(p, -1), 2);
  ck_assert_int_eq(launch_of(p, relu)->chain, 0);
  ck_assert_int_eq(count_launches(p, mul) + count_launches(p, add), 0);
  ck_assert(!has_buffer(p, mul) && !has_buffer(p, add) && has_buffer(p, relu));
  int n;
  const tfg_node_id *ins = tfg_plan_step_inputs(p, launch_of(p, relu), &n);
  ck_assert_int_eq(n, 3);
  ck_assert_ptr_eq(ins, c->inputs);
  /* the program the executor runs */
  tfg_fused_prog prog;
  ck_assert(tfg_fused_build(g, c->nodes, c->nnodes, c->inputs, c->ninputs, &prog));
  ck_assert_ptr_null(tfg_fused_check(&prog, 3));
  ck_assert_int_eq(prog.nops, 3);
  ck_assert_int_eq(prog.ops[0].op, TFG_OP_MUL);
  ck_assert_int_eq(prog.ops[0].a, TFG_FUSED_INPUT(0));
  ck_assert_int_eq(prog.ops[0].b, TFG_FUSED_INPUT(1));
  ck_assert_int_eq(prog.ops[1].a, TFG_FUSED_RESULT(0));
  ck_assert_int_eq(prog.ops[1].b, TFG_FUSED_INPUT(2));
  ck_assert_int_eq(prog.ops[2].op, TFG_OP_RELU);
  ck_assert_int_eq(prog.ops[2].a, TFG_FUSED_RESULT(1));
  ck_assert_int_eq(prog.ops[2].b, -1);
  ck_assert(prog.len[0] == 64 * 32 && prog.div[0] == 1); /* of the output's shape */
  ck_assert(prog.len[1] == 1 && prog.len[2] == 1);       /* scalars */
  /* `tfg plan`: one fused launch with its members */
  char *text = plan_text(p), want[128];
  ck_assert_msg(strstr(text, "1 fused chain (3 ops)"), "%s", text);
  snprintf(want, sizeof want, "launch  fused relu(add(mul)) n%d (t.tfg:2), members n%d n%d n%d\n", (int)relu, (int)mul,
           (int)add, (int)relu);
  ck_assert_msg(strstr(text, want), "want \"%s\" in\n%s", want, text);
  free(text);
  text = plan_text(b.plan);
  ck_assert(!strstr(text, "fused"));
  free(text);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* A tree: both operands of the last op are chains of their own. */
START_TEST(tree_fuses) {
  built b;
  build(&b,
        "x = normal([40], seed = 1)\nw = normal([40], seed = 2)\n"
        "y = sigmoid(x) * tanh(w) + exp(-abs(x)) / 3\nprint y\n",
        "host*1");
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 1);
  ck_assert_int_eq(p->chains[0].nnodes, 8); /* sigmoid tanh mul abs neg exp div add */
  ck_assert_int_eq(p->chains[0].ninputs, 3); /* x, w, 3 */
  char *text = plan_text(p);
  ck_assert_msg(strstr(text, "fused add(mul(sigmoid, tanh), div(exp(neg(abs))))"), "%s", text);
  free(text);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* A value read by two ops stays; the ops reading it may still fuse below it. */
START_TEST(two_readers_stay) {
  built b;
  build(&b, "x = normal([16], seed = 1)\ny = x * 2\na = y + 1\nc = y - 1\nprint a * c\n", "host*1");
  const tfg_graph *g = b.p->graph;
  tfg_node_id y = graph_first_op(g, TFG_OP_MUL), a = graph_last_op(g, TFG_OP_ADD), c = graph_last_op(g, TFG_OP_SUB);
  tfg_node_id out = graph_last_op(g, TFG_OP_MUL);
  ck_assert_int_ne(y, out);
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 1);
  ck_assert_int_eq(tfg_plan_chain_of(p, y), -1);
  ck_assert_int_eq(count_launches(p, y), 1);
  ck_assert_int_eq(tfg_plan_chain_of(p, a), 0);
  ck_assert_int_eq(tfg_plan_chain_of(p, c), 0);
  ck_assert_int_eq(p->chains[0].nodes[p->chains[0].nnodes - 1], out);
  ck_assert_int_eq(p->chains[0].inputs[0], y);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* A kept node (one the caller fetches) is never an intermediate. */
START_TEST(kept_stays) {
  built b;
  build(&b, "x = normal([16], seed = 1)\ny = x * 2\nz = relu(y)\nprint y, z\n", "host*1");
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 0);
  tfg_plan_free(p);
  /* keeping only z fuses y into it */
  uint8_t *keep = calloc((size_t)b.p->graph->nnodes, 1);
  keep[printed(&b, 1)] = 1;
  p = fused_plan(&b, keep);
  ck_assert_int_eq(p->nchains, 1);
  ck_assert_int_eq(tfg_plan_chain_of(p, printed(&b, 0)), 0);
  free(keep);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* A reader simplify removed reads nothing: y * 2 read by relu twice (the
 * second merged into the first) is an intermediate of one reader, and
 * fuses. */
START_TEST(removed_reader_does_not_count) {
  built b;
  build(&b, "x = normal([8, 4], seed = 1)\ny = x * 2\nprint relu(y) + relu(y)\n", "host*1");
  tfg_graph *g = b.p->graph;
  uint8_t *roots = keep_printed(&b), *mark = calloc((size_t)g->nnodes + 1, 1);
  ck_assert_int_eq(tfg_simplify(g, roots, mark), 1);
  tfg_plan_opts o = {.fuse = true, .keep = roots, .folded = mark};
  tfg_plan *p = NULL;
  ck_assert_int_eq(tfg_plan_build_with(g, b.pl, b.ds, &o, b.d, &p), TFG_OK);
  plan_expect_valid(p);
  ck_assert_int_eq(p->nchains, 1);
  ck_assert_int_eq(p->chains[0].nnodes, 3); /* y, relu, the add */
  tfg_plan_free(p);
  free(roots);
  free(mark);
  program_free(&b);
}
END_TEST

/* An edge between devices is never inside a chain. */
START_TEST(devices_split) {
  const char *two = "x = normal([16], seed = 1)\n@gpu:0 y = x * 2\n@gpu:1 z = relu(y)\nprint z\n";
  ck_assert_int_eq(count_chains(two, "host*2"), 0);
  /* the same on one device fuses */
  const char *one = "x = normal([16], seed = 1)\n@gpu:0 y = x * 2\n@gpu:0 z = relu(y)\nprint z\n";
  ck_assert_int_eq(count_chains(one, "host*2"), 1);
}
END_TEST

/* A broadcast input fuses when its axes of size > 1 are one run (a row
 * [4] or a column [8, 1] over [8, 4]: tfg_fused_bcast), not otherwise
 * ([2, 1, 4] over [2, 3, 4]); a scalar input does, but a scalar member
 * of a larger chain does not (every member has the last's shape). */
START_TEST(shapes_and_scalars) {
  const char *vec = "x = normal([8, 4], seed = 1)\nv = normal([4], seed = 2)\ny = x * 2\nz = y + v\nprint relu(z)\n";
  ck_assert_int_eq(count_chains(vec, "host*1"), 1);
  const char *col = "x = normal([8, 4], seed = 1)\nv = normal([8, 1], seed = 2)\ny = x * 2\nz = y - v\nprint relu(z)\n";
  ck_assert_int_eq(count_chains(col, "host*1"), 1);
  const char *two = "x = normal([2, 3, 4], seed = 1)\nv = normal([2, 1, 4], seed = 2)\ny = x * 2\nz = y + v\n"
                    "print relu(z)\n";
  ck_assert_int_eq(count_chains(two, "host*1"), 0); /* z can join neither y * 2 nor relu */
  built bb;
  build(&bb, two, "host*1");
  tfg_plan *pb = fused_plan(&bb, NULL);
  ck_assert_int_eq(tfg_plan_chain_of(pb, graph_last_op(bb.p->graph, TFG_OP_ADD)), -1);
  tfg_plan_free(pb);
  program_free(&bb);

  built b;
  build(&b, "x = normal([8, 4], seed = 1)\ns = sum(x)\nt = s * 2\nz = x + t\nprint relu(z)\n", "host*1");
  const tfg_graph *g = b.p->graph;
  tfg_node_id t = graph_last_op(g, TFG_OP_MUL), z = graph_last_op(g, TFG_OP_ADD);
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 1);
  ck_assert_int_eq(p->chains[0].nnodes, 2);
  ck_assert_int_eq(p->chains[0].nodes[0], z);
  ck_assert_int_eq(tfg_plan_chain_of(p, t), -1);
  ck_assert_int_eq(p->chains[0].inputs[1], t); /* read as a scalar input */
  tfg_plan_free(p);
  program_free(&b);

  /* integers never fuse */
  ck_assert_int_eq(count_chains("x = normal([8], seed = 1)\ni = cast(x * 10, i32)\nprint abs(-i)\n", "host*1"), 0);
}
END_TEST

/* A param is an input like any other (it is never a member). */
START_TEST(param_input) {
  built b;
  build(&b, "param w: f32[8, 4]\ny = relu(w * 2 - 1)\nprint y\n", "host*1");
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 1);
  ck_assert_int_eq(b.p->graph->nodes[p->chains[0].inputs[0]].op, TFG_OP_PARAM);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* Caps: 16 ops per chain, 8 inputs. */
START_TEST(caps) {
  tfg_strbuf t = {0};
  tfg_strbuf_puts(&t, "x = normal([16], seed = 1)\ny0 = -x\n");
  for (int i = 1; i < 20; i++) tfg_strbuf_printf(&t, "y%d = -y%d\n", i, i - 1);
  tfg_strbuf_puts(&t, "print y19\n");
  built b;
  build(&b, t.data, "host*1");
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 2);
  ck_assert_int_eq(p->chains[0].nnodes, TFG_FUSED_MAX_OPS);
  ck_assert_int_eq(p->chains[1].nnodes, 20 - TFG_FUSED_MAX_OPS);
  ck_assert_int_eq(p->chains[1].inputs[0], p->chains[0].nodes[TFG_FUSED_MAX_OPS - 1]);
  tfg_plan_free(p);
  program_free(&b);

  tfg_strbuf_clear(&t);
  for (int i = 0; i < 10; i++) tfg_strbuf_printf(&t, "x%d = normal([16], seed = %d)\n", i, i + 1);
  tfg_strbuf_puts(&t, "s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7 + x8 + x9\nprint s\n");
  build(&b, t.data, "host*1");
  p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 2);
  ck_assert_int_eq(p->chains[0].ninputs, TFG_FUSED_MAX_INPUTS); /* x0 .. x7 */
  ck_assert_int_eq(p->chains[0].nnodes, TFG_FUSED_MAX_INPUTS - 1);
  ck_assert_int_eq(p->chains[1].nnodes, 2);
  ck_assert_int_eq(p->chains[1].ninputs, 3); /* the first chain's sum, x8, x9 */
  tfg_plan_free(p);
  program_free(&b);
  tfg_strbuf_free(&t);
}
END_TEST

/* ---- graphs by hand: optimizer updates ------------------------------------------- */

static tfg_node_id hand(tfg_graph *g, tfg_op_id op, const tfg_node_id *in, int nin, tfg_dtype dt, int64_t numel) {
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(g, op, in, nin, &loc);
  tfg_node *nd = tfg_graph_node(g, id);
  nd->dtype = dt;
  nd->shape = (tfg_shape){1, {numel}};
  return id;
}

typedef struct hand_plan {
  tfg_graph *g;
  tfg_diag *d;
  tfg_devices *ds;
  tfg_placement *pl;
  tfg_plan *p;
} hand_plan;

/* p = param; m1 = neg(p); [u = sgd_update(p, c) when update_between];
 * z = neg(c); m2 = relu(m1); [u after m2 otherwise]: planned fused on
 * one device keeping m2 and u. */
static void update_graph(hand_plan *h, bool update_between, tfg_node_id *m1, tfg_node_id *z, tfg_node_id *m2) {
  h->g = tfg_graph_new();
  tfg_node_id p = hand(h->g, TFG_OP_PARAM, NULL, 0, TFG_DTYPE_F32, 64);
  tfg_graph_node(h->g, p)->name = "p";
  tfg_node_id c = hand(h->g, TFG_OP_INIT, NULL, 0, TFG_DTYPE_F32, 64);
  *m1 = hand(h->g, TFG_OP_NEG, &p, 1, TFG_DTYPE_F32, 64);
  tfg_node_id pc[2] = {p, c}, u = -1;
  if (update_between) u = hand(h->g, TFG_OP_SGD_UPDATE, pc, 2, TFG_DTYPE_BOOL, 0);
  *z = hand(h->g, TFG_OP_NEG, &c, 1, TFG_DTYPE_F32, 64);
  *m2 = hand(h->g, TFG_OP_RELU, m1, 1, TFG_DTYPE_F32, 64);
  if (!update_between) u = hand(h->g, TFG_OP_SGD_UPDATE, pc, 2, TFG_DTYPE_BOOL, 0);
  h->d = tfg_diag_new();
  ck_assert_int_eq(tfg_devices_parse(h->d, "host*1", &h->ds), TFG_OK);
  h->pl = tfg_place_on(h->g, h->ds, 0);
  uint8_t *keep = calloc((size_t)h->g->nnodes, 1);
  keep[*m2] = keep[u] = keep[*z] = 1;
  ck_assert_int_eq(tfg_plan_build_with(h->g, h->pl, h->ds, &(tfg_plan_opts){.fuse = true, .keep = keep}, h->d, &h->p),
                   TFG_OK);
  free(keep);
}

static void hand_free(hand_plan *h) {
  tfg_plan_free(h->p);
  tfg_placement_free(h->pl);
  tfg_devices_free(h->ds);
  tfg_diag_free(h->d);
  tfg_graph_free(h->g);
}

/* An update writes the param in place between m1's read and m2: fusing
 * them would read the updated param. */
START_TEST(update_between_splits) {
  hand_plan h;
  tfg_node_id m1, z, m2;
  update_graph(&h, true, &m1, &z, &m2);
  plan_expect_valid(h.p);
  ck_assert_int_eq(h.p->nchains, 0);
  hand_free(&h);
  update_graph(&h, false, &m1, &z, &m2);
  plan_expect_valid(h.p);
  ck_assert_int_eq(h.p->nchains, 1);
  ck_assert_int_eq(h.p->chains[0].nodes[0], m1);
  ck_assert_int_eq(h.p->chains[0].nodes[1], m2);
  /* the validator knows the rule: z, between the two, made an update */
  h.g->nodes[z].op = TFG_OP_SGD_UPDATE;
  plan_expect_invalid(h.p, "spans an optimizer update");
  hand_free(&h);
}
END_TEST

/* ---- the validator ----------------------------------------------------------------- */

START_TEST(validator_catches_chains) {
  built b;
  build(&b, "x = normal([64], seed = 1)\ny = relu(x * 2 + 1)\nprint y\n", "host*1");
  const tfg_graph *g = b.p->graph;
  tfg_node_id mul = graph_last_op(g, TFG_OP_MUL), add = graph_last_op(g, TFG_OP_ADD);
  tfg_node_id relu = graph_last_op(g, TFG_OP_RELU);
  tfg_plan *p = fused_plan(&b, NULL);
  tfg_plan_chain *c = &p->chains[0];
  tfg_plan_step *st = launch_of(p, relu);

  st->chain = -1; /* the chain's last member run alone */
  plan_expect_invalid(p, "without its chain");
  st->chain = 0;
  st->node = add; /* an intermediate launched */
  plan_expect_invalid(p, "which chain 0 fuses");
  st->node = relu;

  tfg_node_id t = c->inputs[0]; /* inputs out of order */
  c->inputs[0] = c->inputs[1];
  c->inputs[1] = t;
  plan_expect_invalid(p, "its inputs are not");
  c->inputs[1] = c->inputs[0];
  c->inputs[0] = t;

  c->nodes[0] = add; /* members out of order */
  c->nodes[1] = mul;
  plan_expect_invalid(p, "not in graph order");
  c->nodes[0] = mul;
  c->nodes[1] = add;

  c->nnodes = 2; /* relu is no longer the last member: mul read outside */
  c->nodes[1] = relu;
  plan_expect_invalid(p, "read only by a member of its chain");
  c->nnodes = 3;
  c->nodes[1] = add;

  c->nodes[0] = t; /* x (an init) is not elementwise */
  plan_expect_invalid(p, "is not an elementwise");
  c->nodes[0] = mul;

  /* a buffer for an intermediate */
  tfg_plan_device *pd = &p->dev[tfg_placement_device(b.pl, relu)];
  pd->buffers = realloc(pd->buffers, sizeof *pd->buffers * (size_t)(pd->nbuffers + 1));
  pd->buffers[pd->nbuffers] = pd->buffers[pd->nbuffers - 1];
  pd->buffers[pd->nbuffers].node = add;
  pd->nbuffers++;
  plan_expect_invalid(p, "has a buffer, but chain 0 fuses it");
  pd->nbuffers--;
  plan_expect_valid(p);
  tfg_plan_free(p);
  program_free(&b);

  /* an intermediate read by two ops */
  build(&b, "x = normal([16], seed = 1)\ny = x * 2\na = y + 1\nc = y - 1\nprint a * c\n", "host*1");
  p = fused_plan(&b, NULL);
  tfg_node_id y = p->chains[0].inputs[0];
  tfg_plan_chain *ch = &p->chains[0];
  ch->nodes = realloc(ch->nodes, sizeof *ch->nodes * (size_t)(ch->nnodes + 1));
  memmove(ch->nodes + 1, ch->nodes, sizeof *ch->nodes * (size_t)ch->nnodes);
  ch->nodes[0] = y;
  ch->nnodes++;
  plan_expect_invalid(p, "is read by 2 ops");
  ch->nnodes--;
  memmove(ch->nodes, ch->nodes + 1, sizeof *ch->nodes * (size_t)ch->nnodes);
  plan_expect_valid(p);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* ---- the CPU kernel against the ops one at a time ----------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static const tfg_op_id UNARY[] = {TFG_OP_NEG, TFG_OP_EXP, TFG_OP_LOG,  TFG_OP_SQRT, TFG_OP_RSQRT,
                                  TFG_OP_ABS, TFG_OP_RELU, TFG_OP_GELU, TFG_OP_TANH, TFG_OP_SIGMOID};
static const tfg_op_id BINARY[] = {TFG_OP_ADD, TFG_OP_SUB, TFG_OP_MUL, TFG_OP_DIV,
                                   TFG_OP_POW, TFG_OP_MAXIMUM, TFG_OP_MINIMUM};

/* How a random program's input is shaped against its [rows, cols]
 * output: the same, a scalar, a row [cols] repeated down (a bias), a
 * column [rows, 1] repeated across (a row statistic). */
enum { FULL, SCALAR, ROW, COL };

/* A random program of nops ops over ninputs inputs (input 0 of the
 * output's shape, the others of any kind[k]): each op reads an operand
 * of the output's shape (a FULL input or an earlier result) and, when
 * binary, any other operand, as a chain's members do; now and then the
 * op is a BROADCAST of a broadcast input. */
static tfg_fused_prog random_prog(uint64_t *s, int nops, int ninputs, int64_t rows, int64_t cols, int *kind) {
  tfg_fused_prog p = {.nops = nops, .ninputs = ninputs};
  for (int k = 0; k < ninputs; k++) {
    kind[k] = k == 0 ? FULL : (int)(rng_next(s) % 4);
    p.len[k] = kind[k] == FULL ? rows * cols : kind[k] == SCALAR ? 1 : kind[k] == ROW ? cols : rows;
    p.div[k] = kind[k] == COL ? cols : 1;
  }
  for (int i = 0; i < nops; i++) {
    bool bin = rng_next(s) % 2;
    int a, b = -1, bc = (int)(rng_next(s) % (uint64_t)ninputs);
    if (!bin && kind[bc] != FULL && rng_next(s) % 3 == 0) {
      p.ops[i] = (tfg_fused_op){.op = TFG_OP_BROADCAST, .a = (int8_t)TFG_FUSED_INPUT(bc), .b = -1};
      continue;
    }
    do {
      int r = (int)(rng_next(s) % (uint64_t)(ninputs + i));
      a = r < ninputs ? TFG_FUSED_INPUT(r) : TFG_FUSED_RESULT(r - ninputs);
    } while (a < TFG_FUSED_MAX_INPUTS && kind[a] != FULL);
    if (bin) {
      int r = (int)(rng_next(s) % (uint64_t)(ninputs + i));
      b = r < ninputs ? TFG_FUSED_INPUT(r) : TFG_FUSED_RESULT(r - ninputs);
      if (rng_next(s) % 2) { /* the full operand on either side */
        int t = a;
        a = b;
        b = t;
      }
    }
    tfg_op_id op = bin ? BINARY[rng_next(s) % 7] : UNARY[rng_next(s) % 10];
    p.ops[i] = (tfg_fused_op){.op = (int16_t)op, .a = (int8_t)a, .b = (int8_t)b};
  }
  return p;
}

/* Values that exercise every branch: small and large, both signs, zeros,
 * and now and then an infinity or a NaN. */
static double random_value(uint64_t *s) {
  uint64_t r = rng_next(s);
  switch (r % 64) {
  case 0: return 0.0;
  case 1: return -0.0;
  case 2: return INFINITY;
  case 3: return -INFINITY;
  case 4: return NAN;
  case 5: return 1e30;
  default: return ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 8;
  }
}

/* The same bits, or both NaN (a NaN's payload and sign may depend on the
 * order in which the compiler put the operands of a + b: the CPU does
 * not promise it either). */
static bool same(const void *a, const void *b, tfg_dtype dt) {
  if (dt == TFG_DTYPE_F32) {
    float x, y;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    return memcmp(&x, &y, 4) == 0 || (isnan(x) && isnan(y));
  }
  double x, y;
  memcpy(&x, a, 8);
  memcpy(&y, b, 8);
  return memcmp(&x, &y, 8) == 0 || (isnan(x) && isnan(y));
}

/* Runs prog over a [rows, cols] output both ways, fused (tfg_cpu_fused)
 * and one op at a time (tfg_cpu_unary, tfg_cpu_binary and
 * tfg_cpu_broadcast, which broadcast the scalar, row and column inputs
 * by NumPy's rule), and compares every element. */
static void compare(const tfg_fused_prog *prog, const int *kind, tfg_dtype dt, int64_t rows, int64_t cols,
                    tfg_pool *pool, uint64_t *s) {
  size_t esz = tfg_dtype_size(dt);
  int64_t n = rows * cols;
  tfg_shape full = {2, {rows, cols}};
  tfg_tensor in[TFG_FUSED_MAX_INPUTS], res[TFG_FUSED_MAX_OPS];
  for (int k = 0; k < prog->ninputs; k++) {
    tfg_shape sh = kind[k] == FULL     ? full
                   : kind[k] == SCALAR ? (tfg_shape){0, {0}}
                   : kind[k] == ROW    ? (tfg_shape){1, {cols}}
                                       : (tfg_shape){2, {rows, 1}};
    in[k] = (tfg_tensor){.data = malloc((size_t)n * esz), .dtype = dt, .shape = sh};
    for (int64_t i = 0; i < prog->len[k]; i++) {
      double v = random_value(s);
      if (dt == TFG_DTYPE_F32) ((float *)in[k].data)[i] = (float)v;
      else ((double *)in[k].data)[i] = v;
    }
  }
  tfg_kernel_ctx k = {.pool = pool};
  for (int i = 0; i < prog->nops; i++) {
    const tfg_fused_op *o = &prog->ops[i];
    res[i] = (tfg_tensor){.data = malloc((size_t)n * esz + 1), .dtype = dt, .shape = full};
    tfg_tensor args[2];
    int opnd[2] = {o->a, o->b};
    for (int j = 0; j < 2 && opnd[j] >= 0; j++)
      args[j] = opnd[j] < TFG_FUSED_MAX_INPUTS ? in[opnd[j]] : res[opnd[j] - TFG_FUSED_MAX_INPUTS];
    tfg_node node = {.op = (tfg_op_id)o->op, .ninputs = o->b >= 0 ? 2 : 1};
    tfg_kernel_fn fn = o->b >= 0 ? tfg_cpu_binary : o->op == TFG_OP_BROADCAST ? tfg_cpu_kernel(o->op) : tfg_cpu_unary;
    tfg_status st = fn(&k, &node, args, &res[i]);
    ck_assert_msg(st == TFG_OK, "%s", k.err.data ? k.err.data : "");
  }
  tfg_tensor out = {.data = malloc((size_t)n * esz + 1), .dtype = dt, .shape = full};
  tfg_node fnode = {.op = TFG_OP_FUSED, .dtype = dt, .shape = out.shape, .ninputs = prog->ninputs};
  fnode.attrs.data = prog;
  ck_assert_int_eq(tfg_cpu_fused(&k, &fnode, in, &out), TFG_OK);
  const tfg_tensor *want = &res[prog->nops - 1];
  for (int64_t i = 0; i < n; i++) {
    const char *a = (const char *)out.data + i * (int64_t)esz, *b = (const char *)want->data + i * (int64_t)esz;
    if (!same(a, b, dt)) {
      double x = dt == TFG_DTYPE_F32 ? *(const float *)a : *(const double *)a;
      double y = dt == TFG_DTYPE_F32 ? *(const float *)b : *(const double *)b;
      ck_abort_msg("%s element %lld: fused %.17g, unfused %.17g (program of %d ops, first %s)", tfg_dtype_name(dt),
                   (long long)i, x, y, prog->nops, tfg_op_get((tfg_op_id)prog->ops[0].op)->name);
    }
  }
  for (int q = 0; q < prog->ninputs; q++) free(in[q].data);
  for (int q = 0; q < prog->nops; q++) free(res[q].data);
  free(out.data);
  tfg_strbuf_free(&k.err);
}

START_TEST(kernel_bit_exact) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  tfg_pool *pool = tfg_pool_new(3);
  for (int trial = 0; trial < 300; trial++) {
    int nops = 1 + (int)(rng_next(&s) % TFG_FUSED_MAX_OPS);
    int ninputs = 1 + (int)(rng_next(&s) % TFG_FUSED_MAX_INPUTS);
    /* outputs around the block (256) and the chunk grain (8192), rows
     * within a block and across blocks, pooled or not */
    static const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 85}, {1, 256}, {257, 1}, {8, 125}, {3, 6667}, {40, 300}};
    const int64_t *sh = shapes[rng_next(&s) % 8];
    int kind[TFG_FUSED_MAX_INPUTS];
    tfg_fused_prog p = random_prog(&s, nops, ninputs, sh[0], sh[1], kind);
    ck_assert_ptr_null(tfg_fused_check(&p, ninputs));
    compare(&p, kind, trial % 2 ? TFG_DTYPE_F64 : TFG_DTYPE_F32, sh[0], sh[1], trial % 3 ? pool : NULL, &s);
  }
  tfg_pool_free(pool);
}
END_TEST

/* Programs the kernel refuses, with a message. */
START_TEST(kernel_refuses) {
  float a[4] = {1, 2, 3, 4}, o[4];
  tfg_tensor in[2] = {{a, TFG_DTYPE_F32, {1, {4}}}, {a, TFG_DTYPE_F64, {1, {4}}}}, out = {o, TFG_DTYPE_F32, {1, {4}}};
  tfg_fused_prog p = {.nops = 1, .ninputs = 1, .ops = {{.op = TFG_OP_EXP, .a = TFG_FUSED_INPUT(0), .b = -1}},
                      .len = {4, 4}, .div = {1, 1}};
  tfg_node node = {.op = TFG_OP_FUSED, .ninputs = 1};
  node.attrs.data = &p;
  tfg_kernel_ctx k = {0};
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_OK);
  ck_assert(o[1] == expf(2.0f));
  p.ops[0].a = TFG_FUSED_RESULT(0); /* its own result */
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(k.err.data, "neither an input nor an earlier result"));
  tfg_strbuf_clear(&k.err);
  p.ops[0] = (tfg_fused_op){.op = TFG_OP_MATMUL, .a = 0, .b = -1};
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(k.err.data, "not a fusable"));
  tfg_strbuf_clear(&k.err);
  p = (tfg_fused_prog){.nops = 1, .ninputs = 2, .ops = {{.op = TFG_OP_ADD, .a = 0, .b = 1}}, .len = {4, 4}, .div = {1, 1}};
  node.ninputs = 2;
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(k.err.data, "input 1 is f64"));
  tfg_strbuf_clear(&k.err);
  in[1].dtype = TFG_DTYPE_F32;
  p.len[1] = 3; /* 4 elements given */
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(k.err.data, "input 1 has 4 elements, not 3"));
  tfg_strbuf_clear(&k.err);
  in[1].shape = (tfg_shape){1, {3}};
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(k.err.data, "does not tile 4"));
  tfg_strbuf_clear(&k.err);
  p.len[1] = 0;
  ck_assert_int_eq(tfg_cpu_fused(&k, &node, in, &out), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(k.err.data, "broadcast is out of range"));
  tfg_strbuf_free(&k.err);
}
END_TEST

/* ---- memory ---------------------------------------------------------------------------- */

/* x is read all along the chain: one at a time, x, the previous value and
 * the new one are live at once; fused, x and the result. */
START_TEST(long_chain_lower_peak) {
  built b;
  build(&b,
        "x = normal([4096], seed = 1)\na = x * 2\nc = a + x\nd = c * x\ne = d - x\nf = e / (x * x + 1)\n"
        "print relu(f)\n",
        "host*1");
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 1);
  int d = tfg_placement_device(b.pl, printed(&b, 0));
  int64_t one = 4096 * 4;
  ck_assert_int_ge(b.plan->dev[d].peak, 3 * one);
  ck_assert_int_lt(p->dev[d].peak, 3 * one);
  ck_assert_int_lt(p->dev[d].peak, b.plan->dev[d].peak);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* A fused plan whose peak does not fit is dropped for the unfused one:
 * two inputs of a far intermediate live until the chain's launch. */
START_TEST(fused_too_big_falls_back) {
  built b;
  /* a = u + v is read only by the last add, after two matmuls: fused, u
   * and v stay live through them; unfused, a alone does */
  build(&b,
        "u = normal([256, 256], seed = 1)\nv = normal([256, 256], seed = 2)\na = u + v\n"
        "x = normal([256, 256], seed = 3)\nw = normal([256, 256], seed = 4)\n"
        "m = matmul(matmul(x, w), w)\nprint relu(a + m)\n",
        "host*1");
  int d = tfg_placement_device(b.pl, printed(&b, 0));
  uint8_t *keep = keep_printed(&b);
  tfg_plan *p = NULL;
  tfg_plan_opts o = {.fuse = true, .keep = keep};
  ck_assert_int_eq(tfg_plan_build_with(b.p->graph, b.pl, b.ds, &o, NULL, &p), TFG_OK); /* measured: fused */
  ck_assert_int_ge(p->nchains, 1);
  int64_t fused_peak = p->dev[d].peak, plain_peak = b.plan->dev[d].peak;
  tfg_plan_free(p);
  ck_assert_int_gt(fused_peak, plain_peak);
  /* a device as large as the fused peak takes the fused plan */
  tfg_devices_limit(b.ds, fused_peak);
  ck_assert_int_eq(tfg_plan_build_with(b.p->graph, b.pl, b.ds, &o, b.d, &p), TFG_OK);
  ck_assert_int_ge(p->nchains, 1);
  tfg_plan_free(p);
  /* one between the two peaks the unfused plan */
  tfg_devices_limit(b.ds, plain_peak);
  ck_assert_int_eq(tfg_plan_build_with(b.p->graph, b.pl, b.ds, &o, b.d, &p), TFG_OK);
  ck_assert_int_eq(p->nchains, 0);
  ck_assert_int_eq(p->dev[d].peak, plain_peak);
  plan_expect_valid(p);
  tfg_plan_free(p);
  free(keep);
  program_free(&b);
}
END_TEST

/* ---- the executor ------------------------------------------------------------------------ */

static const char MANY[] = "x = normal([300, 7], seed = 1)\n"
                           "w = normal([300, 7], seed = 2)\n"
                           "y = sigmoid(x) * tanh(w) + exp(-abs(x)) / 3\n"
                           "z = maximum(gelu(y), minimum(sqrt(abs(w)), 2.0))\n"
                           "xd = cast(x, f64)\n"
                           "zd = pow(abs(xd) + 1, rsqrt(abs(xd) + 0.5)) - log(abs(xd) + 1)\n"
                           "print z, zd\n";

/* Runs b's first two printed tensors through a session on b's plan and
 * one on the fused plan p, and checks they have the same bytes; leaves
 * the sessions in *plain and *fused (the caller frees them) and the fused
 * run's values in o2. */
static void run_both(built *b, tfg_plan *p, tfg_session **plain, tfg_session **fused, tfg_tensor *o2) {
  *plain = tfg_session_new(b->p, b->d, &(tfg_session_opts){.threads = 2, .plan = b->plan});
  *fused = tfg_session_new(b->p, b->d, &(tfg_session_opts){.threads = 2, .plan = p});
  ck_assert(*plain && *fused);
  tfg_node_id fetch[2] = {printed(b, 0), printed(b, 1)};
  tfg_tensor o1[2];
  ck_assert_int_eq(tfg_session_run(*plain, fetch, 2, o1), TFG_OK);
  ck_assert_int_eq(tfg_session_run(*fused, fetch, 2, o2), TFG_OK);
  for (int i = 0; i < 2; i++) {
    size_t bytes = (size_t)tfg_shape_numel(&o1[i].shape) * tfg_dtype_size(o1[i].dtype);
    ck_assert_msg(memcmp(o1[i].data, o2[i].data, bytes) == 0, "fetch %d differs fused", i);
  }
}

/* Sessions on the fused and the unfused plan give the same bits; a fused
 * intermediate cannot be fetched. */
START_TEST(exec_same_bits) {
  built b;
  build(&b, MANY, "host*1");
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 2);
  tfg_session *plain, *fused;
  tfg_tensor o2[2];
  run_both(&b, p, &plain, &fused, o2);
  ck_assert_int_eq(o2[1].dtype, TFG_DTYPE_F64);
  /* y is inside z's chain: it has no value */
  tfg_node_id y = graph_last_op(b.p->graph, TFG_OP_GELU);
  ck_assert_int_eq(tfg_plan_chain_of(p, y), 0);
  tfg_tensor o3;
  ck_assert_int_eq(tfg_session_run(fused, &y, 1, &o3), TFG_ERR_DEVICE);
  char *e = test_render(b.d, false);
  ck_assert_msg(strstr(e, "t.tfg:4:") && strstr(e, "was fused into a chain"), "%s", e);
  free(e);
  tfg_session_free(plain);
  tfg_session_free(fused);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* Broadcast inputs in chains: a bias [24] added to [16, 24] then relu
 * (the bias read as a row, len 24, div 1), and a softmax-gradient shape
 * y * (g - broadcast(c)) with c [16, 1] (the BROADCAST a member, its
 * input read as a column: len 16, div 24); the fused run gives the
 * unfused run's bits. */
START_TEST(broadcast_inputs_same_bits) {
  static const char text[] = "x = normal([16, 24], seed = 1)\n"
                             "b = normal([24], seed = 2)\n"
                             "c = normal([16, 1], seed = 3)\n"
                             "y = relu(x * 0.5 + b)\n"
                             "z = x * (y - broadcast(c, [16, 24]))\n"
                             "print y, z\n";
  built b;
  build(&b, text, "host*1");
  const tfg_graph *g = b.p->graph;
  tfg_plan *p = fused_plan(&b, NULL);
  ck_assert_int_eq(p->nchains, 2);
  tfg_node_id bc = graph_last_op(g, TFG_OP_BROADCAST);
  int cb = tfg_plan_chain_of(p, bc);
  ck_assert_int_ge(cb, 0);
  const tfg_plan_chain *ch = &p->chains[cb];
  tfg_fused_prog prog;
  ck_assert(tfg_fused_build(g, ch->nodes, ch->nnodes, ch->inputs, ch->ninputs, &prog));
  int seen = 0;
  for (int k = 0; k < ch->ninputs; k++)
    if (g->nodes[ch->inputs[k]].shape.rank == 2 && g->nodes[ch->inputs[k]].shape.dim[1] == 1) {
      ck_assert(prog.len[k] == 16 && prog.div[k] == 24);
      seen++;
    }
  ck_assert_int_eq(seen, 1);
  tfg_session *plain, *fused;
  tfg_tensor o2[2];
  run_both(&b, p, &plain, &fused, o2);
  tfg_session_free(plain);
  tfg_session_free(fused);
  tfg_plan_free(p);
  program_free(&b);
}
END_TEST

/* ---- random graphs ------------------------------------------------------------------ */

/* A random graph over gpu:0 and gpu:1: normal-filled sources of [96] or
 * scalars, elementwise ops (f32) reading earlier values of their shape or
 * scalars, now and then a sum (a scalar); every node pinned at random,
 * so edges cross devices. keep[] marks a random tenth and every value no
 * op reads. */
static tfg_graph *random_graph(int n, uint64_t *s, uint8_t **keep) {
  tfg_graph *g = tfg_graph_new();
  tfg_loc loc = {0};
  tfg_node_id *vec = malloc(sizeof *vec * (size_t)n), *sca = malloc(sizeof *sca * (size_t)n);
  int nvec = 0, nsca = 0;
  for (int i = 0; i < n; i++) {
    uint64_t r = rng_next(s);
    tfg_node_id id;
    if (i < 4 || r % 11 == 0) { /* a source */
      id = tfg_graph_add(g, TFG_OP_INIT, NULL, 0, &loc);
      tfg_node *nd = tfg_graph_node(g, id);
      nd->attrs.init = TFG_INIT_NORMAL;
      nd->attrs.b = 1;
      nd->attrs.seed = (uint64_t)i + 1;
      nd->shape = i % 3 == 2 ? (tfg_shape){0, {0}} : (tfg_shape){1, {96}};
    } else if (r % 11 == 1 && nvec) { /* a scalar from a sum */
      tfg_node_id x = vec[rng_next(s) % (uint64_t)nvec];
      id = tfg_graph_add(g, TFG_OP_SUM, &x, 1, &loc);
      tfg_graph_node(g, id)->attrs.axes = 1;
      tfg_graph_node(g, id)->shape = (tfg_shape){0, {0}};
    } else { /* elementwise on the vectors, with scalars on the side */
      bool bin = r % 2 && nvec;
      tfg_node_id in[2] = {vec[rng_next(s) % (uint64_t)nvec], 0};
      if (bin) {
        bool scalar = nsca && rng_next(s) % 4 == 0;
        in[1] = scalar ? sca[rng_next(s) % (uint64_t)nsca] : vec[rng_next(s) % (uint64_t)nvec];
        if (rng_next(s) % 2) {
          tfg_node_id t = in[0];
          in[0] = in[1];
          in[1] = t;
        }
      }
      tfg_op_id op = bin ? BINARY[rng_next(s) % 7] : UNARY[rng_next(s) % 10];
      id = tfg_graph_add(g, op, in, bin ? 2 : 1, &loc);
      tfg_graph_node(g, id)->shape = (tfg_shape){1, {96}};
    }
    tfg_node *nd = tfg_graph_node(g, id);
    nd->dtype = TFG_DTYPE_F32;
    nd->pin = (tfg_devspec){.kind = TFG_DEV_GPU, .index = (int64_t)(rng_next(s) % 4 == 0)};
    if (nd->shape.rank) vec[nvec++] = id;
    else sca[nsca++] = id;
  }
  *keep = calloc((size_t)n, 1);
  uint8_t *read = calloc((size_t)n, 1);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].ninputs; k++) read[g->nodes[i].inputs[k]] = 1;
  for (int i = 0; i < n; i++) (*keep)[i] = !read[i] || rng_next(s) % 10 == 0;
  free(read);
  free(vec);
  free(sca);
  return g;
}

/* Fused plans of random graphs are valid, and executors on the fused and
 * the unfused plan give every kept value with the same bits (NaNs as
 * NaNs). */
START_TEST(random_graphs_run_same) {
  uint64_t s = 12345;
  int chains = 0;
  for (int trial = 0; trial < 12; trial++) {
    uint8_t *keep;
    int n = 150 + trial * 20;
    tfg_graph *g = random_graph(n, &s, &keep);
    tfg_diag *d = tfg_diag_new();
    tfg_devices *ds = NULL;
    ck_assert_int_eq(tfg_devices_parse(d, "host*2", &ds), TFG_OK);
    /* placed twice, alike: the placer is deterministic */
    tfg_compiled cp, cf;
    ck_assert_int_eq(tfg_compile_graph(g, ds, NULL, 0, NULL, d, &cp), TFG_OK);
    ck_assert_int_eq(tfg_compile_graph(g, ds, NULL, 0, &(tfg_compile_opts){.fuse = true, .keep = keep}, d, &cf), TFG_OK);
    for (int i = 0; i < n; i++) ck_assert_int_eq(tfg_placement_device(cp.pl, i), tfg_placement_device(cf.pl, i));
    const tfg_plan *plain = cp.plan, *fused = cf.plan;
    plan_expect_valid(plain);
    plan_expect_valid(fused);
    chains += fused->nchains;
    tfg_node_id *fetch = malloc(sizeof *fetch * (size_t)n);
    int nf = 0;
    for (int i = 0; i < n; i++)
      if (keep[i]) fetch[nf++] = i;
    void **o1 = malloc(sizeof *o1 * (size_t)nf), **o2 = malloc(sizeof *o2 * (size_t)nf);
    for (int f = 0; f < nf; f++) {
      o1[f] = malloc(96 * 4);
      o2[f] = malloc(96 * 4);
    }
    tfg_exec *x1 = NULL, *x2 = NULL;
    ck_assert_int_eq(tfg_exec_new(plain, &(tfg_exec_opts){.threads = 1}, d, &x1), TFG_OK);
    ck_assert_int_eq(tfg_exec_new(fused, &(tfg_exec_opts){.threads = 1}, d, &x2), TFG_OK);
    ck_assert_int_eq(tfg_exec_run(x1, fetch, nf, o1, NULL, d), TFG_OK);
    ck_assert_int_eq(tfg_exec_run(x2, fetch, nf, o2, NULL, d), TFG_OK);
    for (int f = 0; f < nf; f++) {
      int64_t m = tfg_shape_numel(&g->nodes[fetch[f]].shape);
      for (int64_t i = 0; i < m; i++)
        ck_assert_msg(same((float *)o1[f] + i, (float *)o2[f] + i, TFG_DTYPE_F32), "trial %d: n%d element %lld differs",
                      trial, (int)fetch[f], (long long)i);
      free(o1[f]);
      free(o2[f]);
    }
    tfg_exec_free(x1);
    tfg_exec_free(x2);
    free(o1);
    free(o2);
    free(fetch);
    free(keep);
    tfg_compiled_free(&cp);
    tfg_compiled_free(&cf);
    tfg_devices_free(ds);
    tfg_diag_free(d);
    tfg_graph_free(g);
  }
  ck_assert_int_gt(chains, 50); /* not vacuous */
}
END_TEST

Suite *suite_fuse(void) {
  Suite *s = suite_create("fuse");
  TCase *tc = tcase_create("fuse");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, chain_fuses);
  tcase_add_test(tc, tree_fuses);
  tcase_add_test(tc, two_readers_stay);
  tcase_add_test(tc, kept_stays);
  tcase_add_test(tc, devices_split);
  tcase_add_test(tc, removed_reader_does_not_count);
  tcase_add_test(tc, shapes_and_scalars);
  tcase_add_test(tc, param_input);
  tcase_add_test(tc, caps);
  tcase_add_test(tc, update_between_splits);
  tcase_add_test(tc, validator_catches_chains);
  tcase_add_test(tc, kernel_bit_exact);
  tcase_add_test(tc, kernel_refuses);
  tcase_add_test(tc, long_chain_lower_peak);
  tcase_add_test(tc, fused_too_big_falls_back);
  tcase_add_test(tc, exec_same_bits);
  tcase_add_test(tc, broadcast_inputs_same_bits);
  tcase_add_test(tc, random_graphs_run_same);
  suite_add_tcase(s, tc);
  return s;
}
