/* tests/unit/test_ranks.c: a step spanning the ranks of a job, split
 * (compiler/ranks.h), on a graph written out by hand: who owns what, the
 * send and receive of each value another rank reads (numbered, in their
 * places in the order), an op no run needs, each rank's share, and the
 * error for a program's own op that reads two ranks. That the split
 * trains as one process does is tests/mpi.sh's. */
#include <stdlib.h>
#include <string.h>

#include "compiler/fold.h"
#include "compiler/ranks.h"
#include "ir/ops.h"
#include "tests/unit/unit.h"

typedef struct fixture {
  tfg_graph *g;
  tfg_node_id x, w0, a, b, w1, c, loss, stray, from;
} fixture;

static tfg_node_id node(tfg_graph *g, tfg_op_id op, const tfg_node_id *in, int n, int gpu) {
  tfg_loc loc = {.line = 1};
  tfg_node_id id = tfg_graph_add(g, op, in, n, &loc);
  tfg_node *nd = &g->nodes[id];
  nd->dtype = TFG_DTYPE_F32;
  nd->shape = (tfg_shape){2, {4, 4}};
  if (gpu >= 0) nd->pin = (tfg_devspec){.kind = TFG_DEV_GPU, .index = gpu};
  return id;
}

/* A 2-stage step over 2 ranks of one GPU: x (every rank's), a =
 * matmul(x, w0) on gpu:0, b = relu(a) and c = matmul(b, w1) on gpu:1, the
 * loss sum(c) unpinned (goes with c), and a stray add(a, c) no run needs.
 * The strategy's nodes start at a. */
static fixture build(void) {
  fixture f = {.g = tfg_graph_new()};
  f.x = node(f.g, TFG_OP_INPUT, NULL, 0, -1);
  f.w0 = node(f.g, TFG_OP_PARAM, NULL, 0, 0);
  f.w1 = node(f.g, TFG_OP_PARAM, NULL, 0, 1);
  f.from = f.g->nnodes;
  f.a = node(f.g, TFG_OP_MATMUL, (tfg_node_id[]){f.x, f.w0}, 2, 0);
  f.b = node(f.g, TFG_OP_RELU, &f.a, 1, 1);
  f.c = node(f.g, TFG_OP_MATMUL, (tfg_node_id[]){f.b, f.w1}, 2, 1);
  f.stray = node(f.g, TFG_OP_ADD, (tfg_node_id[]){f.a, f.c}, 2, -1);
  f.loss = node(f.g, TFG_OP_SUM, &f.c, 1, -1);
  return f;
}

/* The step of fixture f: its loss kept, every strategy node in unit 7. */
static tfg_train_step step_of(const fixture *f) {
  tfg_train_step st = {.loss = f->loss, .pipe_first = f->from, .pipe_post = f->g->nnodes};
  st.pipe_unit = malloc(sizeof *st.pipe_unit * (size_t)(f->g->nnodes - f->from));
  for (int32_t i = 0; i < f->g->nnodes - f->from; i++) st.pipe_unit[i] = 7;
  return st;
}

START_TEST(split_sends_what_another_rank_reads) {
  fixture f = build();
  tfg_train_step st = step_of(&f);
  uint8_t keep[16] = {0};
  keep[f.loss] = 1;
  int16_t *owner = NULL;
  tfg_diag *d = tfg_diag_new();
  ck_assert_int_eq(tfg_ranks_split(f.g, &st, keep, 2, 1, &owner, d), TFG_OK);
  const tfg_graph *g = f.g;
  /* one pair: a to rank 1; the order x w0 w1 | a send(a) recv(a) b c stray loss */
  ck_assert_int_eq(g->nnodes, 10);
  tfg_node_id a = f.from, send = a + 1, recv = a + 2, b = a + 3, c = a + 4, stray = a + 5, loss = a + 6;
  ck_assert_int_eq(g->nodes[a].op, TFG_OP_MATMUL);
  ck_assert_int_eq(g->nodes[send].op, TFG_OP_SEND);
  ck_assert_int_eq(g->nodes[send].inputs[0], a);
  ck_assert_int_eq(g->nodes[send].attrs.n, 1); /* to rank 1 */
  ck_assert_int_eq(g->nodes[send].attrs.key, 0);
  ck_assert_int_eq(g->nodes[send].shape.dim[0], 0); /* nothing out */
  ck_assert_int_eq(g->nodes[recv].op, TFG_OP_RECV);
  ck_assert_int_eq(g->nodes[recv].attrs.n, 0); /* from rank 0 */
  ck_assert_int_eq(g->nodes[recv].attrs.key, 0);
  ck_assert(tfg_shape_eq(&g->nodes[recv].shape, &g->nodes[a].shape));
  ck_assert_int_eq(g->nodes[recv].pin.index, 1); /* its reader's device */
  ck_assert_int_eq(g->nodes[b].op, TFG_OP_RELU);
  ck_assert_int_eq(g->nodes[b].inputs[0], recv);
  ck_assert_int_eq(g->nodes[c].inputs[0], b);
  ck_assert_int_eq(g->nodes[stray].inputs[0], a); /* not needed: not rewired */
  ck_assert_int_eq(st.loss, loss);
  /* owners: x every rank's, w0 a send rank 0's, w1 recv b c loss rank 1's, stray nobody's */
  int16_t want[10] = {-1, 0, 1, 0, 0, 1, 1, 1, TFG_RANKS_NOWHERE, 1};
  for (int i = 0; i < 10; i++) ck_assert_msg(owner[i] == want[i], "node %d: owner %d, not %d", i, owner[i], want[i]);
  /* the sends are kept; the units follow: the send its value's, the receive its reader's */
  ck_assert_int_eq(st.nstaged, 1);
  ck_assert_int_eq(st.staged[0], send);
  ck_assert_int_eq(st.pipe_post, 10);
  for (int i = 0; i < 7; i++) ck_assert_int_eq(st.pipe_unit[i], 7);
  /* rank 0's share: rank 1's nodes marked, stray removed, pins to its own GPU */
  uint8_t marks[10] = {0};
  tfg_ranks_place(f.g, owner, 0, 1, marks);
  uint8_t want0[10] = {0, 0, TFG_FOLD_REMOTE, 0, 0, TFG_FOLD_REMOTE, TFG_FOLD_REMOTE, TFG_FOLD_REMOTE, TFG_FOLD_SIMPLIFIED,
                       TFG_FOLD_REMOTE};
  for (int i = 0; i < 10; i++) ck_assert_msg(marks[i] == want0[i], "node %d: mark %d, not %d", i, marks[i], want0[i]);
  for (int i = 0; i < 10; i++)
    if (g->nodes[i].pin.kind == TFG_DEV_GPU) ck_assert_int_eq(g->nodes[i].pin.index, 0);
  free(owner);
  tfg_train_step_free(&st);
  tfg_diag_free(d);
  tfg_graph_free(f.g);
}
END_TEST

/* A value two readers on rank 1 read travels once; a value of the
 * program's own (a param, below the strategy's nodes) is sent first. */
START_TEST(split_sends_a_value_once_per_rank) {
  fixture f = build();
  tfg_node_id b2 = node(f.g, TFG_OP_MUL, (tfg_node_id[]){f.a, f.w0}, 2, 1); /* a and w0 again on rank 1 */
  tfg_node_id l2 = node(f.g, TFG_OP_SUM, &b2, 1, 1);
  tfg_train_step st = step_of(&f);
  uint8_t keep[16] = {0};
  keep[f.loss] = keep[l2] = 1;
  int16_t *owner = NULL;
  tfg_diag *d = tfg_diag_new();
  ck_assert_int_eq(tfg_ranks_split(f.g, &st, keep, 2, 1, &owner, d), TFG_OK);
  const tfg_graph *g = f.g;
  int sends = 0, recvs = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    sends += g->nodes[i].op == TFG_OP_SEND;
    recvs += g->nodes[i].op == TFG_OP_RECV;
  }
  ck_assert_int_eq(sends, 2); /* a, w0 */
  ck_assert_int_eq(recvs, 2);
  /* w0's send is the first of the strategy's nodes, tag 1 (found second) */
  ck_assert_int_eq(g->nodes[f.from].op, TFG_OP_SEND);
  ck_assert_int_eq(g->nodes[f.from].inputs[0], f.w0);
  ck_assert_int_eq(g->nodes[f.from].attrs.key, 1);
  /* every receive comes after its send */
  for (int32_t r = 0; r < g->nnodes; r++) {
    if (g->nodes[r].op != TFG_OP_RECV) continue;
    bool sent = false;
    for (int32_t s = 0; s < r; s++) sent |= g->nodes[s].op == TFG_OP_SEND && g->nodes[s].attrs.key == g->nodes[r].attrs.key;
    ck_assert_msg(sent, "recv %d before its send", r);
  }
  free(owner);
  tfg_train_step_free(&st);
  tfg_diag_free(d);
  tfg_graph_free(f.g);
}
END_TEST

/* A program's own op (below the strategy's nodes) cannot be given a
 * receive before it: an error at it, naming both ranks, the graph as it
 * was. */
START_TEST(split_refuses_a_program_op_over_two_ranks) {
  fixture f = build();
  tfg_node_id own = node(f.g, TFG_OP_ADD, (tfg_node_id[]){f.w0, f.w1}, 2, -1);
  tfg_train_step st = step_of(&f);
  st.pipe_first = st.pipe_post = f.g->nnodes; /* every node is the program's */
  uint8_t keep[16] = {0};
  keep[own] = 1;
  int32_t before = f.g->nnodes;
  int16_t *owner = NULL;
  tfg_diag *d = tfg_diag_new();
  ck_assert_int_eq(tfg_ranks_split(f.g, &st, keep, 2, 1, &owner, d), TFG_ERR_PLACE);
  ck_assert_int_eq(f.g->nnodes, before);
  ck_assert_ptr_null(owner);
  char *out = test_render(d, false);
  ck_assert_msg(strstr(out, "add reads a value that rank 0 computes and one that rank 1 does"), "%s", out);
  free(out);
  tfg_train_step_free(&st);
  tfg_diag_free(d);
  tfg_graph_free(f.g);
}
END_TEST

Suite *suite_ranks(void) {
  Suite *s = suite_create("ranks");
  TCase *t = tcase_create("split");
  tcase_add_test(t, split_sends_what_another_rank_reads);
  tcase_add_test(t, split_sends_a_value_once_per_rank);
  tcase_add_test(t, split_refuses_a_program_op_over_two_ranks);
  suite_add_tcase(s, t);
  return s;
}
