/* compiler/ranks.c: a step spanning the ranks of a job, split into each
 * rank's share (compiler/ranks.h). */
#include "compiler/ranks.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/fold.h"
#include "ir/ops.h"

/* The rank of gpu:k when a rank has G GPUs. */
static int16_t rank_of_gpu(int64_t k, int size, int G) {
  int64_t r = k / G;
  return (int16_t)(r < size ? r : size - 1); /* a pin past the job's GPUs is the strategy's error, reported there */
}

/* Each node's owner (ranks.h): its GPU's rank, else the latest owned
 * node it reads, else -1. */
static int16_t *owners(const tfg_graph *g, int size, int G) {
  int16_t *owner = malloc(sizeof *owner * ((size_t)g->nnodes + 1));
  TFG_ASSERT(owner != NULL);
  for (int32_t i = 0; i < g->nnodes; i++) {
    const tfg_node *nd = &g->nodes[i];
    owner[i] = -1;
    if (nd->pin.kind == TFG_DEV_GPU) {
      owner[i] = rank_of_gpu(nd->pin.index, size, G);
      continue;
    }
    tfg_node_id latest = -1;
    for (int k = 0; k < nd->ninputs; k++)
      if (owner[nd->inputs[k]] >= 0 && nd->inputs[k] > latest) latest = nd->inputs[k];
    if (latest >= 0) owner[i] = owner[latest];
  }
  return owner;
}

/* A pair's nodes: the SEND on the value's rank and the RECV on the
 * reader's, and the node whose reading made them (the first reader). */
typedef struct pair {
  tfg_node_id value, send, recv, reader;
} pair;

/* The trace label's unit of a node the split adds: its neighbour's, or
 * -1 outside the pipeline's units. */
static int32_t unit_at(const tfg_train_step *st, const int32_t *old_unit, tfg_node_id id) {
  if (!old_unit || id < st->pipe_first || id >= st->pipe_post) return -1;
  return old_unit[id - st->pipe_first];
}

/* The first node below `from` that keep marks and whose value needs
 * node y (a print action's tensor), or NULL. */
static const tfg_node *fetched_through(const tfg_graph *g, const uint8_t *keep, int32_t from, tfg_node_id y) {
  uint8_t *need = calloc((size_t)from + 1, 1);
  TFG_ASSERT(need != NULL);
  const tfg_node *found = NULL;
  for (int32_t f = y; f < from && !found; f++) {
    if (!keep[f]) continue;
    memset(need, 0, (size_t)from);
    need[f] = 1;
    for (int32_t i = f; i >= y && !need[y]; i--)
      for (int k = 0; need[i] && k < g->nodes[i].ninputs; k++) need[g->nodes[i].inputs[k]] = 1;
    if (need[y]) found = &g->nodes[f];
  }
  free(need);
  return found;
}

tfg_status tfg_ranks_split(tfg_graph *g, tfg_train_step *st, const uint8_t *keep, int size, int G, int16_t **out,
                           tfg_diag *d) {
  int32_t N = g->nnodes, from = st->pipe_first;
  int16_t *owner = owners(g, size, G);
  uint8_t *cone = calloc((size_t)N + 1, 1);
  TFG_ASSERT(cone != NULL);
  for (int32_t i = N - 1; i >= 0; i--) {
    if (keep[i]) cone[i] = 1;
    for (int k = 0; cone[i] && k < g->nodes[i].ninputs; k++) cone[g->nodes[i].inputs[k]] = 1;
  }
  /* an op no run needs may read two ranks' values: it runs nowhere
   * (simplify would remove it; with the passes off, this does) */
  for (int32_t i = 0; i < N; i++)
    if (!cone[i] && g->nodes[i].ninputs > 0) owner[i] = TFG_RANKS_NOWHERE;
  /* the pairs, one per value and reading rank: pair_of[x * size + r] */
  int32_t *pair_of = malloc(sizeof *pair_of * ((size_t)N * (size_t)size + 1));
  TFG_ASSERT(pair_of != NULL);
  for (size_t i = 0; i < (size_t)N * (size_t)size; i++) pair_of[i] = -1;
  pair *pairs = NULL;
  int npairs = 0, cap = 0;
  tfg_status status = TFG_OK;
  for (int32_t y = 0; y < N && status == TFG_OK; y++) {
    if (!cone[y]) continue;
    for (int k = 0; k < g->nodes[y].ninputs; k++) {
      tfg_node_id x = g->nodes[y].inputs[k];
      int16_t ox = owner[x], oy = owner[y];
      if (ox < 0 || ox == oy) continue;
      TFG_ASSERT(oy >= 0); /* a node reading an owned value is owned */
      if (y < from) {
        const tfg_node *ny = &g->nodes[y];
        tfg_diag_error(d, &ny->loc, "%s reads a value that rank %d computes and one that rank %d does: outside the "
                       "train, a pipeline across ranks splits nothing", tfg_op_get(ny->op)->name, ox, oy);
        const tfg_node *asked = fetched_through(g, keep, from, y);
        if (asked) tfg_diag_note(d, &asked->loc, "a value shown here needs it");
        tfg_diag_help(d, "print the params or a value of one stage, or run the pipeline in one process");
        status = TFG_ERR_PLACE;
        break;
      }
      size_t at = (size_t)x * (size_t)size + (size_t)oy;
      if (pair_of[at] < 0) {
        if (npairs == cap) {
          cap = cap ? 2 * cap : 64;
          pairs = realloc(pairs, sizeof *pairs * (size_t)cap);
          TFG_ASSERT(pairs != NULL);
        }
        const tfg_node nx = g->nodes[x];
        tfg_node_id s = tfg_graph_add(g, TFG_OP_SEND, &x, 1, &nx.loc);
        tfg_node *ns = &g->nodes[s];
        ns->pin = nx.pin;
        ns->attrs.n = oy;
        ns->attrs.key = npairs; /* the message's tag */
        tfg_status inferred = tfg_op_get(TFG_OP_SEND)->infer(g, ns, d); /* nothing out: bool[0] */
        TFG_ASSERT(inferred == TFG_OK);
        tfg_node_id r = tfg_graph_add(g, TFG_OP_RECV, NULL, 0, &nx.loc);
        tfg_node *nr = &g->nodes[r];
        nr->dtype = nx.dtype;
        nr->shape = nx.shape;
        nr->name = nx.name;
        nr->pin = g->nodes[y].pin;
        nr->attrs.n = ox;
        nr->attrs.key = npairs;
        nr->backward = nx.backward; /* a gradient received is a gradient (compiler/plan.h memory) */
        pairs[npairs] = (pair){x, s, r, y};
        pair_of[at] = npairs++;
      }
      /* y reads the received copy (its inputs are its own array: ir/graph.h) */
      ((tfg_node_id *)(uintptr_t)g->nodes[y].inputs)[k] = pairs[pair_of[at]].recv;
    }
  }
  free(cone);
  if (status != TFG_OK) {
    tfg_graph_truncate(g, N);
    free(pair_of);
    free(pairs);
    free(owner);
    return status;
  }

  /* The order: a value's sends right after it (a program's own value's
   * before the strategy's nodes), a receive right before its first
   * reader. */
  int32_t M = g->nnodes;
  owner = realloc(owner, sizeof *owner * ((size_t)M + 1));
  TFG_ASSERT(owner != NULL);
  for (int q = 0; q < npairs; q++) {
    owner[pairs[q].send] = owner[pairs[q].value];
    owner[pairs[q].recv] = owner[pairs[q].reader];
  }
  int *first_send = malloc(sizeof *first_send * ((size_t)N + 1)), *next_send = malloc(sizeof *next_send * ((size_t)npairs + 1));
  int *first_recv = malloc(sizeof *first_recv * ((size_t)N + 1)), *next_recv = malloc(sizeof *next_recv * ((size_t)npairs + 1));
  TFG_ASSERT(first_send && next_send && first_recv && next_recv);
  for (int32_t i = 0; i < N; i++) first_send[i] = first_recv[i] = -1;
  for (int q = npairs - 1; q >= 0; q--) { /* lists in pair order */
    tfg_node_id x = pairs[q].value;
    next_send[q] = first_send[x], first_send[x] = q;
    next_recv[q] = first_recv[pairs[q].reader], first_recv[pairs[q].reader] = q;
  }
  tfg_node_id *order = malloc(sizeof *order * ((size_t)(M - from) + 1));
  TFG_ASSERT(order != NULL);
  int32_t n = 0, post = -1;
  for (int32_t x = 0; x < from; x++)
    for (int q = first_send[x]; q >= 0; q = next_send[q]) order[n++] = pairs[q].send;
  for (int32_t y = from; y < N; y++) {
    if (y == st->pipe_post) post = n;
    for (int q = first_recv[y]; q >= 0; q = next_recv[q]) order[n++] = pairs[q].recv;
    order[n++] = y;
    for (int q = first_send[y]; q >= 0; q = next_send[q]) order[n++] = pairs[q].send;
  }
  TFG_ASSERT(n == M - from);
  tfg_node_id *map = malloc(sizeof *map * ((size_t)M + 1));
  TFG_ASSERT(map != NULL);
  tfg_graph_reorder(g, from, order, map);

  /* the step's ids, its trace units and the owners, renumbered */
  int32_t new_post = post >= 0 ? from + post : M;
  int32_t *unit = malloc(sizeof *unit * ((size_t)(new_post - from) + 1));
  TFG_ASSERT(unit != NULL);
  for (int32_t i = from; i < N; i++)
    if (map[i] < new_post) unit[map[i] - from] = unit_at(st, st->pipe_unit, i);
  for (int q = 0; q < npairs; q++) { /* a send in its value's unit, a receive in its reader's */
    if (map[pairs[q].send] < new_post) unit[map[pairs[q].send] - from] = unit_at(st, st->pipe_unit, pairs[q].value);
    if (map[pairs[q].recv] < new_post) unit[map[pairs[q].recv] - from] = unit_at(st, st->pipe_unit, pairs[q].reader);
  }
  free(st->pipe_unit);
  st->pipe_unit = unit;
  st->pipe_post = new_post;
  tfg_train_step_remap(st, map);
  st->staged = realloc(st->staged, sizeof *st->staged * ((size_t)st->nstaged + (size_t)npairs + 1));
  TFG_ASSERT(st->staged != NULL);
  for (int q = 0; q < npairs; q++) st->staged[st->nstaged++] = map[pairs[q].send];
  int16_t *renum = malloc(sizeof *renum * ((size_t)M + 1));
  TFG_ASSERT(renum != NULL);
  for (int32_t i = 0; i < M; i++) renum[map[i]] = owner[i];
  free(owner);
  *out = renum;
  free(order);
  free(map);
  free(first_send);
  free(next_send);
  free(first_recv);
  free(next_recv);
  free(pair_of);
  free(pairs);
  return TFG_OK;
}

void tfg_ranks_place(tfg_graph *g, const int16_t *owner, int rank, int G, uint8_t *marks) {
  for (int32_t i = 0; i < g->nnodes; i++) {
    tfg_node *nd = &g->nodes[i];
    if (nd->pin.kind == TFG_DEV_GPU) nd->pin.index %= G;
    if (tfg_fold_removed(marks[i])) continue;
    if (owner[i] == TFG_RANKS_NOWHERE) marks[i] = TFG_FOLD_SIMPLIFIED; /* what simplify does to an unread op */
    else if (owner[i] >= 0 && owner[i] != rank) marks[i] = TFG_FOLD_REMOTE;
  }
}
