/* compiler/plan.c: the execution plan: the build passes and the entry
 * points (docs/plan.md has the rules a plan keeps; plan_memory.c makes the
 * memory plan, plan_validate.c checks a plan, plan_print.c prints one).
 *
 * Passes over a placed graph:
 *   0. buckets: the ALLREDUCE nodes grouped by key, the keys of one group
 *      of devices packed into buckets in gradient order, and for each
 *      bucket and rank the node after which the sweep lists it;
 *   0b. chains (with fusion on): elementwise ops fused into one launch,
 *      grown greedily in graph order (docs/plan.md, Fusion);
 *   1. copies: which tensors each device needs from another one, found
 *      from the edges that cross devices: one copy per tensor per
 *      destination, however many ops read it there;
 *   2. steps: one sweep in graph order appends to every device's list, so
 *      the lists interleave as the graph does (a chain has one LAUNCH,
 *      at its last member; its other members none; a view, a reshape
 *      sharing its base's buffer, none either). An op's LAUNCH goes on its
 *      device's compute stream (after a WAIT for each copied or
 *      all-reduced input it is the first to read); when other devices need
 *      the value, a RECORD follows on the compute stream and each
 *      destination's copy stream gets WAIT, COPY, RECORD at once ("as soon
 *      as the tensor exists"). A bucket's steps on a rank come right after
 *      the node pass 0 chose for it. Every step that writes a tensor opens
 *      its buffer and every step that reads one extends it, so liveness
 *      falls out of the sweep;
 *   3. memory: per device, persistent tensors packed at the bottom in node
 *      order, then every other buffer by best fit, in the order of the
 *      steps that write them;
 *   4. copy ordering: a COPY whose memory was last used by a compute step
 *      the copy stream is not ordered after gets an event from it (the
 *      rule for concurrent streams in docs/plan.md), found with a max
 *      tree over the device's offsets.
 * Passes 0 to 2 are linear in nodes plus edges (plus sorting the
 * ALLREDUCE nodes); best fit keeps the free gaps in a search tree, and
 * pass 4 a segment tree, O(log n) per buffer, so a graph of 100,000 ops
 * plans in milliseconds however many tensors are live at once. Passes 3
 * and 4 are in plan_memory.c. */
#include "compiler/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "ir/ops.h"
#include "compiler/plan_impl.h"

int64_t tfg_plan_bytes_of(const tfg_node *n) {
  return tfg_shape_numel(&n->shape) * (int64_t)tfg_dtype_size(n->dtype);
}

bool tfg_plan_persistent(const tfg_node *n) {
  return n->op == TFG_OP_PARAM || n->op == TFG_OP_STATE || n->op == TFG_OP_CONST;
}

void tfg_plan_free(tfg_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->ndev; i++) {
    free(p->dev[i].steps);
    free(p->dev[i].buffers);
  }
  for (int b = 0; b < p->nbuckets; b++) {
    free(p->buckets[b].devices);
    free(p->buckets[b].nodes);
  }
  free(p->buckets);
  for (int c = 0; c < p->nchains; c++) {
    free(p->chains[c].nodes);
    free(p->chains[c].inputs);
  }
  free(p->chains);
  free(p->folded);
  free(p->view_of);
  free(p->dev);
  free(p);
}

/* ---- sorting with a context --------------------------------------------------- */

/* Whether a orders before b. */
typedef bool (*less_fn)(const void *ctx, int a, int b);

/* Sorts a[0..n) stably by less (a merge sort: qsort has no context and
 * is not stable). */
static void sort_ints(int *a, int n, less_fn less, const void *ctx) {
  if (n < 2) return;
  int *tmp = malloc(sizeof *tmp * (size_t)n);
  TFG_ASSERT(tmp != NULL);
  for (int w = 1; w < n; w *= 2) {
    for (int lo = 0; lo < n; lo += 2 * w) {
      int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = less(ctx, a[j], a[i]) ? a[j++] : a[i++];
      while (i < mid) tmp[k++] = a[i++];
      while (j < hi) tmp[k++] = a[j++];
    }
    memcpy(a, tmp, sizeof *a * (size_t)n);
  }
  free(tmp);
}

/* ---- the builder's state ---------------------------------------------------------- */

/* One tensor's copy to one destination device. */
typedef struct copy_rec {
  int dst;
  int arrived; /* event the copy stream records after the copy */
  bool waited; /* the destination's compute stream waited on it already */
  int buf;     /* its buffer in dst's memory plan, or -1 (an empty tensor) */
  int next;    /* the next copy of the same tensor (ascending dst), or -1 */
} copy_rec;

/* The passes' state, freed when the plan is built. */
typedef struct builder {
  const tfg_graph *g;
  tfg_plan *p;
  int *dev;          /* per node: its device */
  int *own_buf;      /* per node: its buffer on its own device, or -1 */
  int *copy_head;    /* per node: its first copy record, or -1 */
  copy_rec *copies;
  int ncopies, copies_cap;
  int *steps_cap, *bufs_cap; /* per device: room in dev[d].steps, dev[d].buffers */
  /* Collectives. A (bucket, rank) pair is slot base[b] + r. */
  int *bucket_of, *rank_of; /* per node: an ALLREDUCE node's bucket and rank, else -1 */
  int *base;                /* per bucket: its rank 0's slot */
  tfg_node_id *at;          /* per slot: the node after which the sweep lists the bucket's steps there */
  int *ev2;                 /* per slot: the event recorded after its ALLREDUCE, or -1 before */
  bool *waited2;            /* per slot: the compute stream waited on ev2 already */
  tfg_node_id *done;        /* per bucket: the node after which every rank has listed it */
  int *at_head, *at_next;   /* per node: the slots listed after it (by bucket), threaded through at_next */
  int *done_head, *done_next; /* per node: the buckets every rank has listed after it */
  int *chain_of;            /* per node: its chain, or -1 (NULL: no fusion) */
} builder;

/* ---- pass 0: buckets ------------------------------------------------------------ */

/* One key while buckets are formed: its nodes are ar[first .. first + n)
 * of the sorted ALLREDUCE nodes, by ascending device. */
typedef struct key_rec {
  int first, n;
  tfg_node_id order;   /* its gradient on the group's first device */
  tfg_node_id in, out; /* its last gradient on any rank; the first op reading any of its nodes */
  int bucket;
} key_rec;

/* A bucket while it is formed. */
typedef struct bucket_rec {
  int key0;            /* its first key: the group's devices */
  int nkeys;
  int64_t bytes;
  tfg_node_id in, out; /* over its keys */
} bucket_rec;

typedef struct pass0 {
  const tfg_graph *g;
  const int *dev;
  const tfg_node_id *ar; /* the ALLREDUCE nodes, by key then device */
  const key_rec *keys;
  const bucket_rec *bk;
} pass0;

static bool ar_less(const void *ctx, int a, int b) {
  const pass0 *c = ctx;
  int64_t ka = c->g->nodes[a].attrs.key, kb = c->g->nodes[b].attrs.key;
  if (ka != kb) return ka < kb;
  return c->dev[a] < c->dev[b];
}

/* Keys of one group (same collective and devices) and dtype together, then by gradient
 * order on the group's first device, then by key. */
static bool key_less_by_group(const void *ctx, int a, int b) {
  const pass0 *c = ctx;
  const key_rec *x = &c->keys[a], *y = &c->keys[b];
  if (x->n != y->n) return x->n < y->n;
  tfg_op_id ox = c->g->nodes[c->ar[x->first]].op, oy = c->g->nodes[c->ar[y->first]].op;
  if (ox != oy) return ox < oy; /* a bucket runs one collective */
  for (int r = 0; r < x->n; r++) {
    int dx = c->dev[c->ar[x->first + r]], dy = c->dev[c->ar[y->first + r]];
    if (dx != dy) return dx < dy;
  }
  tfg_dtype tx = c->g->nodes[c->ar[x->first]].dtype, ty = c->g->nodes[c->ar[y->first]].dtype;
  if (tx != ty) return tx < ty;
  if (x->order != y->order) return x->order < y->order;
  return c->g->nodes[c->ar[x->first]].attrs.key < c->g->nodes[c->ar[y->first]].attrs.key;
}

/* Whether keys a and b have the same devices, dtype and collective (one group). */
static bool same_group(const pass0 *c, int a, int b) {
  const key_rec *x = &c->keys[a], *y = &c->keys[b];
  const tfg_node *nx = &c->g->nodes[c->ar[x->first]], *ny = &c->g->nodes[c->ar[y->first]];
  if (x->n != y->n || nx->dtype != ny->dtype || nx->op != ny->op) return false;
  for (int r = 0; r < x->n; r++)
    if (c->dev[c->ar[x->first + r]] != c->dev[c->ar[y->first + r]]) return false;
  return true;
}

/* Buckets complete in the order of their last gradient on any rank. */
static bool bucket_less(const void *ctx, int a, int b) {
  const pass0 *c = ctx;
  return c->bk[a].in < c->bk[b].in;
}

/* Pass 0: groups the ALLREDUCE nodes into p->buckets (docs/plan.md, Collectives) and
 * decides where the sweep lists each bucket on each rank. The strategy
 * that adds ALLREDUCE nodes guarantees what is asserted here: one node
 * per device per key, attrs.n of them, with one dtype and shape, each
 * reading one gradient that is no ALLREDUCE node, and every gradient of
 * a key before every op that reads one of its nodes (else the group
 * could not run in graph order). */
static void make_buckets(builder *b, int64_t cap) {
  const tfg_graph *g = b->g;
  tfg_plan *p = b->p;
  int32_t n = g->nnodes;
  int nar = 0;
  for (int32_t i = 0; i < n; i++) {
    b->bucket_of[i] = b->rank_of[i] = -1;
    nar += tfg_op_bucketed(g->nodes[i].op);
  }
  if (nar == 0) return;
  int *ar = malloc(sizeof *ar * (size_t)nar);
  tfg_node_id *reader = malloc(sizeof *reader * ((size_t)n + 1)); /* per node: the first op reading it */
  /* per node: the last op before it that wrote it in place, or -1; per
   * collective node: its input as it reads it, the later of the two (ZeRO
   * gathers a piece its update wrote in place: the bucket runs after) */
  tfg_node_id *wrote = malloc(sizeof *wrote * ((size_t)n + 1)), *input = malloc(sizeof *input * ((size_t)n + 1));
  TFG_ASSERT(ar && reader && wrote && input);
  nar = 0;
  for (int32_t i = 0; i < n; i++) {
    reader[i] = INT32_MAX;
    wrote[i] = -1;
    const tfg_node *nd = &g->nodes[i];
    if (tfg_op_bucketed(nd->op)) {
      ar[nar++] = i;
      input[i] = wrote[nd->inputs[0]] > nd->inputs[0] ? wrote[nd->inputs[0]] : nd->inputs[0];
    }
    uint32_t inplace = tfg_plan_removed(b->p, i) ? 0 : tfg_op_get(nd->op)->inplace;
    for (int k = 0; k < nd->ninputs; k++)
      if (inplace & (1u << k)) wrote[nd->inputs[k]] = i;
  }
  for (int32_t i = n - 1; i >= 0; i--) /* backwards: the first reader is written last */
    for (int k = 0; k < g->nodes[i].ninputs; k++) reader[g->nodes[i].inputs[k]] = i;
  pass0 c = {.g = g, .dev = b->dev, .ar = ar};
  sort_ints(ar, nar, ar_less, &c);

  /* The keys, each its nodes by ascending device (the ranks). */
  key_rec *keys = malloc(sizeof *keys * (size_t)nar);
  int *order = malloc(sizeof *order * (size_t)nar);
  TFG_ASSERT(keys && order);
  int nkeys = 0;
  for (int i = 0; i < nar;) {
    const tfg_node *n0 = &g->nodes[ar[i]];
    int j = i;
    key_rec k = {.first = i, .in = -1, .out = INT32_MAX, .bucket = -1};
    for (; j < nar && g->nodes[ar[j]].attrs.key == n0->attrs.key; j++) {
      const tfg_node *nd = &g->nodes[ar[j]];
      TFG_ASSERT(j == i || b->dev[ar[j]] > b->dev[ar[j - 1]]); /* one node per device per key */
      TFG_ASSERT(nd->ninputs == 1 && !tfg_op_bucketed(g->nodes[nd->inputs[0]].op));
      TFG_ASSERT(nd->op == n0->op && nd->dtype == n0->dtype && tfg_shape_eq(&nd->shape, &n0->shape));
      if (input[ar[j]] > k.in) k.in = input[ar[j]];
      if (reader[ar[j]] < k.out) k.out = reader[ar[j]];
    }
    k.n = j - i;
    k.order = n0->inputs[0];
    TFG_ASSERT(n0->attrs.n == k.n);
    TFG_ASSERT(k.in < k.out); /* every gradient of the group before any reader */
    order[nkeys] = nkeys;
    keys[nkeys++] = k;
    i = j;
  }
  c.keys = keys;
  sort_ints(order, nkeys, key_less_by_group, &c);

  /* Fill buckets group by group, in gradient order. */
  bucket_rec *bk = malloc(sizeof *bk * (size_t)nkeys);
  TFG_ASSERT(bk != NULL);
  int nb = 0, open = -1;
  for (int oi = 0; oi < nkeys; oi++) {
    key_rec *k = &keys[order[oi]];
    int64_t kb = tfg_plan_bytes_of(&g->nodes[ar[k->first]]);
    if (open >= 0) {
      bucket_rec *o = &bk[open];
      tfg_node_id in = o->in > k->in ? o->in : k->in, out = o->out < k->out ? o->out : k->out;
      if (!same_group(&c, o->key0, order[oi]) || o->bytes + kb > cap || in >= out) open = -1;
    }
    if (open < 0) {
      open = nb++;
      bk[open] = (bucket_rec){.key0 = order[oi], .in = -1, .out = INT32_MAX};
    }
    bucket_rec *o = &bk[open];
    o->nkeys++;
    o->bytes += kb;
    if (k->in > o->in) o->in = k->in;
    if (k->out < o->out) o->out = k->out;
    k->bucket = open;
    if (o->bytes >= cap) open = -1;
  }

  /* Number them by completion (stable: a tie keeps fill order). */
  int *border = malloc(sizeof *border * (size_t)nb);
  int *index = malloc(sizeof *index * (size_t)nb);
  TFG_ASSERT(border && index);
  for (int i = 0; i < nb; i++) border[i] = i;
  c.bk = bk;
  sort_ints(border, nb, bucket_less, &c);
  for (int i = 0; i < nb; i++) index[border[i]] = i;
  p->nbuckets = nb;
  p->buckets = calloc((size_t)nb, sizeof *p->buckets);
  b->base = malloc(sizeof *b->base * ((size_t)nb + 1));
  TFG_ASSERT(p->buckets && b->base);
  int nslots = 0;
  for (int i = 0; i < nb; i++) {
    const bucket_rec *o = &bk[border[i]];
    const key_rec *k0 = &keys[o->key0];
    tfg_plan_bucket *pb = &p->buckets[i];
    pb->nranks = k0->n;
    pb->op = g->nodes[ar[k0->first]].op;
    pb->devices = malloc(sizeof *pb->devices * (size_t)k0->n);
    pb->nodes = malloc(sizeof *pb->nodes * (size_t)k0->n * (size_t)o->nkeys);
    TFG_ASSERT(pb->devices && pb->nodes);
    for (int r = 0; r < k0->n; r++) pb->devices[r] = b->dev[ar[k0->first + r]];
    pb->bytes = o->bytes;
    b->base[i] = nslots;
    nslots += k0->n;
  }
  /* Keys enter their bucket in fill order. */
  for (int oi = 0; oi < nkeys; oi++) {
    const key_rec *k = &keys[order[oi]];
    int bi = index[k->bucket];
    tfg_plan_bucket *pb = &p->buckets[bi];
    int nk = bk[k->bucket].nkeys, slot = pb->nnodes++;
    for (int r = 0; r < k->n; r++) {
      tfg_node_id x = ar[k->first + r];
      pb->nodes[r * nk + slot] = x;
      b->bucket_of[x] = bi;
      b->rank_of[x] = r;
    }
  }

  /* Where each rank lists each bucket: after its last gradient there,
   * and not before the device's previous bucket, so every device meets
   * its buckets in index order. Since buckets are numbered by their last
   * gradient anywhere, every rank lists bucket i by node bk.in, and
   * every reader comes later. */
  b->at = malloc(sizeof *b->at * ((size_t)nslots + 1));
  b->ev2 = malloc(sizeof *b->ev2 * ((size_t)nslots + 1));
  b->waited2 = calloc((size_t)nslots + 1, sizeof *b->waited2);
  b->done = malloc(sizeof *b->done * ((size_t)nb + 1));
  b->at_head = malloc(sizeof *b->at_head * ((size_t)n + 1));
  b->at_next = malloc(sizeof *b->at_next * ((size_t)nslots + 1));
  b->done_head = malloc(sizeof *b->done_head * ((size_t)n + 1));
  b->done_next = malloc(sizeof *b->done_next * ((size_t)nb + 1));
  tfg_node_id *last_at = malloc(sizeof *last_at * (size_t)p->ndev);
  TFG_ASSERT(b->at && b->ev2 && b->waited2 && b->done && b->at_head && b->at_next && b->done_head && b->done_next &&
             last_at);
  for (int d = 0; d < p->ndev; d++) last_at[d] = -1;
  for (int32_t i = 0; i < n; i++) b->at_head[i] = b->done_head[i] = -1;
  for (int i = 0; i < nb; i++) {
    const tfg_plan_bucket *pb = &p->buckets[i];
    b->done[i] = -1;
    for (int r = 0; r < pb->nranks; r++) {
      int d = pb->devices[r], s = b->base[i] + r;
      tfg_node_id t = last_at[d];
      for (int k = 0; k < pb->nnodes; k++) {
        tfg_node_id y = input[pb->nodes[r * pb->nnodes + k]]; /* as it reads it: after an in-place write */
        if (y > t) t = y;
      }
      b->at[s] = last_at[d] = t;
      b->ev2[s] = -1;
      if (t > b->done[i]) b->done[i] = t;
    }
    TFG_ASSERT(b->done[i] <= bk[border[i]].in);
  }
  /* The lists, built backwards so each comes out in bucket order. */
  for (int i = nb - 1; i >= 0; i--) {
    for (int r = p->buckets[i].nranks - 1; r >= 0; r--) {
      int s = b->base[i] + r;
      b->at_next[s] = b->at_head[b->at[s]];
      b->at_head[b->at[s]] = s;
    }
    b->done_next[i] = b->done_head[b->done[i]];
    b->done_head[b->done[i]] = i;
  }
  p->bucket_bytes = cap;
  free(last_at);
  free(border);
  free(index);
  free(bk);
  free(keys);
  free(order);
  free(ar);
  free(reader);
  free(wrote);
  free(input);
}

/* ---- pass 0b: chains ------------------------------------------------------------ */

/* Whether node i may be a member of a chain: an elementwise op of arity
 * 1 or 2 (or a BROADCAST, which a chain reads through) on f32 or f64,
 * each input of its dtype and of its shape, a scalar, or broadcast along
 * one run of axes (tfg_fused_bcast: a bias [n] over [..., n], a row
 * statistic [..., m, 1] over [..., m, n]). (Where it sits and who reads
 * it is the caller's question.) */
bool tfg_plan_fusable(const tfg_graph *g, tfg_node_id i) {
  const tfg_node *nd = &g->nodes[i];
  int arity = tfg_fused_arity(nd->op);
  if (arity == 0 || nd->ninputs != arity) return false;
  if (nd->dtype != TFG_DTYPE_F32 && nd->dtype != TFG_DTYPE_F64) return false;
  for (int k = 0; k < arity; k++) {
    const tfg_node *x = &g->nodes[nd->inputs[k]];
    int64_t len, div;
    if (x->dtype != nd->dtype || !tfg_fused_bcast(&x->shape, &nd->shape, &len, &div)) return false;
  }
  return true;
}

bool tfg_plan_view_op(tfg_op_id op) { return op == TFG_OP_RESHAPE || op == TFG_OP_FLATTEN; }

/* The ops whose row (ir/ops.h) names inputs they update in place:
 * optimizer updates write their param and state, an accumulation its
 * accumulator, the grad scaler's update its state. */
bool tfg_plan_in_place(tfg_op_id op) { return tfg_op_get(op)->inplace != 0; }

static bool member_of(const tfg_node_id *m, int n, tfg_node_id x) {
  for (int e = 0; e < n; e++)
    if (m[e] == x) return true;
  return false;
}

void tfg_plan_count_readers(const tfg_plan *p, const tfg_graph *g, int *readers, tfg_node_id *last, int *updates) {
  int32_t n = g->nnodes;
  updates[0] = 0;
  for (int32_t i = 0; i < n; i++) {
    readers[i] = 0;
    last[i] = -1;
  }
  for (int32_t i = 0; i < n; i++) {
    updates[i + 1] = updates[i] + tfg_plan_in_place(g->nodes[i].op);
    if (tfg_plan_removed(p, i)) continue; /* a node a pass removed reads nothing: it never runs */
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      if (last[x] != i) readers[x]++;
      last[x] = i;
    }
  }
}

/* The values the members m[0..n) (ascending) read that are not members,
 * each once, in first-read order, into in[0..cap); returns their count,
 * or -1 when there are more than cap. */
int tfg_plan_chain_inputs(const tfg_graph *g, const tfg_node_id *m, int n, tfg_node_id *in, int cap) {
  int k = 0;
  for (int e = 0; e < n; e++) {
    const tfg_node *nd = &g->nodes[m[e]];
    for (int j = 0; j < nd->ninputs; j++) {
      tfg_node_id x = nd->inputs[j];
      if (member_of(m, n, x) || member_of(in, k, x)) continue;
      if (k == cap) return -1;
      in[k++] = x;
    }
  }
  return k;
}

/* A chain while chains form: its members, ascending. */
typedef struct fuse_group {
  int n;
  tfg_node_id m[TFG_FUSED_MAX_OPS];
} fuse_group;

/* Pass 0b: the chains (docs/plan.md, Fusion). In graph order, each fusable
 * node starts a group of its own and takes in each input x (once) that
 * may be its intermediate: fusable, on its device, of its shape, read by
 * no other op, not kept; x comes with x's group, if the merged group
 * stays within the caps (ops, inputs) and spans no optimizer update.
 * Every taken input has one reader, so the groups are trees, and each
 * node joins at most one. Groups of two or more are the chains, in the
 * order of their last members; b->chain_of is filled. Linear in nodes
 * and edges (the caps bound the work per node). */
static void make_chains(builder *b, const uint8_t *keep) {
  const tfg_graph *g = b->g;
  tfg_plan *p = b->p;
  int32_t n = g->nnodes;
  int *readers = malloc(sizeof *readers * ((size_t)n + 1));  /* per node: how many distinct ops read it */
  tfg_node_id *last = malloc(sizeof *last * ((size_t)n + 1)); /* the last op counted as its reader */
  int *updates = malloc(sizeof *updates * ((size_t)n + 1)); /* optimizer updates before each node */
  int *group_of = malloc(sizeof *group_of * ((size_t)n + 1)); /* per fusable node: its group */
  b->chain_of = malloc(sizeof *b->chain_of * ((size_t)n + 1));
  TFG_ASSERT(readers && last && updates && group_of && b->chain_of);
  tfg_plan_count_readers(p, g, readers, last, updates);
  fuse_group *groups = NULL;
  int ngroups = 0, cap = 0;
  for (int32_t i = 0; i < n; i++) {
    group_of[i] = -1;
    b->chain_of[i] = -1;
    if (tfg_plan_removed(p, i) || !tfg_plan_fusable(g, i)) continue;
    const tfg_node *nd = &g->nodes[i];
    fuse_group cur = {.n = 1, .m = {i}};
    for (int k = 0; k < nd->ninputs; k++) {
      tfg_node_id x = nd->inputs[k];
      if (k > 0 && nd->inputs[0] == x) continue; /* x * x: once */
      if (group_of[x] < 0 || readers[x] != 1 || keep[x] || b->dev[x] != b->dev[i] ||
          !tfg_shape_eq(&g->nodes[x].shape, &nd->shape))
        continue;
      fuse_group *gx = &groups[group_of[x]];
      if (cur.n + gx->n > TFG_FUSED_MAX_OPS) continue;
      /* merge the two ascending lists */
      fuse_group cand = {.n = 0};
      for (int u = 0, v = 0; u < cur.n || v < gx->n;)
        cand.m[cand.n++] = v >= gx->n || (u < cur.n && cur.m[u] < gx->m[v]) ? cur.m[u++] : gx->m[v++];
      tfg_node_id in[TFG_FUSED_MAX_INPUTS];
      if (tfg_plan_chain_inputs(g, cand.m, cand.n, in, TFG_FUSED_MAX_INPUTS) < 0) continue;
      if (updates[i] != updates[cand.m[0]]) continue; /* an update between its first member and i */
      cur = cand;
      gx->n = 0; /* taken in */
    }
    TFG_GROW(groups, ngroups, cap, 64);
    groups[ngroups] = cur;
    group_of[i] = ngroups++;
  }
  int nchains = 0;
  for (int k = 0; k < ngroups; k++) nchains += groups[k].n >= 2;
  p->chains = calloc((size_t)nchains + 1, sizeof *p->chains);
  TFG_ASSERT(p->chains != NULL);
  for (int k = 0; k < ngroups; k++) {
    const fuse_group *gr = &groups[k];
    if (gr->n < 2) continue;
    tfg_plan_chain *c = &p->chains[p->nchains];
    tfg_node_id in[TFG_FUSED_MAX_INPUTS];
    c->ninputs = tfg_plan_chain_inputs(g, gr->m, gr->n, in, TFG_FUSED_MAX_INPUTS);
    c->nnodes = gr->n;
    c->nodes = malloc(sizeof *c->nodes * (size_t)gr->n);
    c->inputs = malloc(sizeof *c->inputs * ((size_t)c->ninputs + 1));
    TFG_ASSERT(c->ninputs >= 0 && c->nodes && c->inputs);
    memcpy(c->nodes, gr->m, sizeof *c->nodes * (size_t)gr->n);
    memcpy(c->inputs, in, sizeof *c->inputs * (size_t)c->ninputs);
    for (int e = 0; e < gr->n; e++) b->chain_of[gr->m[e]] = p->nchains;
    p->nchains++;
  }
  free(groups);
  free(readers);
  free(last);
  free(updates);
  free(group_of);
}

const tfg_node_id *tfg_plan_step_inputs(const tfg_plan *p, const tfg_plan_step *st, int *n) {
  if (st->chain >= 0) {
    *n = p->chains[st->chain].ninputs;
    return p->chains[st->chain].inputs;
  }
  *n = p->g->nodes[st->node].ninputs;
  return p->g->nodes[st->node].inputs;
}

int tfg_plan_chain_of(const tfg_plan *p, tfg_node_id id) {
  for (int c = 0; c < p->nchains; c++)
    if (member_of(p->chains[c].nodes, p->chains[c].nnodes, id)) return c;
  return -1;
}

/* ---- pass 1: copies --------------------------------------------------------- */

static copy_rec *find_copy(const builder *b, tfg_node_id x, int dst) {
  for (int c = b->copy_head[x]; c >= 0; c = b->copies[c].next)
    if (b->copies[c].dst == dst) return &b->copies[c];
  return NULL;
}

/* Notes that x is read on device dst (not its own), once per destination;
 * each node's list stays sorted by device so the steps come out in a
 * stable order. */
static void need_copy(builder *b, tfg_node_id x, int dst) {
  int prev = -1, c = b->copy_head[x];
  for (; c >= 0 && b->copies[c].dst < dst; c = b->copies[c].next) prev = c;
  if (c >= 0 && b->copies[c].dst == dst) return;
  TFG_GROW(b->copies, b->ncopies, b->copies_cap, 16);
  int k = b->ncopies++;
  b->copies[k] = (copy_rec){.dst = dst, .arrived = -1, .buf = -1, .next = c};
  if (prev < 0) b->copy_head[x] = k;
  else b->copies[prev].next = k;
}

/* ---- pass 2: steps ------------------------------------------------------------- */

/* Appends a step to device d's list; returns its index there. */
static int emit(builder *b, int d, tfg_plan_step s) {
  tfg_plan_device *pd = &b->p->dev[d];
  TFG_GROW(pd->steps, pd->nsteps, b->steps_cap[d], 64);
  pd->steps[pd->nsteps] = s;
  return pd->nsteps++;
}

static int add_buffer(builder *b, int d, tfg_plan_buffer buf) {
  tfg_plan_device *pd = &b->p->dev[d];
  TFG_GROW(pd->buffers, pd->nbuffers, b->bufs_cap[d], 64);
  pd->buffers[pd->nbuffers] = buf;
  return pd->nbuffers++;
}

tfg_plan_step tfg_plan_step_of(tfg_plan_step_kind kind, int stream, tfg_node_id node, int src, int event) {
  return (tfg_plan_step){.kind = kind, .stream = stream, .node = node, .src = src, .event = event, .bucket = -1,
                         .chain = -1};
}

/* The buffer holding x's value on device d (its own, persistent or not,
 * or its copy), or -1 for an empty tensor. */
static int buffer_on(const builder *b, tfg_node_id x, int d) {
  if (b->dev[x] == d) return b->own_buf[x];
  const copy_rec *c = find_copy(b, x, d);
  TFG_ASSERT(c != NULL);
  return c->buf;
}

/* Extends x's buffer on d (unless persistent) to step s. */
static void read_at(builder *b, tfg_node_id x, int d, int s) {
  int bi = buffer_on(b, x, d);
  if (bi < 0) return;
  tfg_plan_buffer *bf = &b->p->dev[d].buffers[bi];
  if (!bf->persistent && bf->last < s) bf->last = s;
}

/* The compute stream of the bucket's rank in slot s waits on its ev2,
 * once: the gradients the ALLREDUCE read stay live to this WAIT, since
 * until it nothing on the compute stream is ordered after that read. */
static void wait_bucket(builder *b, int bucket, int r) {
  int s = b->base[bucket] + r;
  if (b->waited2[s]) return;
  const tfg_plan_bucket *pb = &b->p->buckets[bucket];
  int d = pb->devices[r];
  TFG_ASSERT(b->ev2[s] >= 0); /* the bucket is listed before its readers */
  int w = emit(b, d, tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, b->ev2[s]));
  b->waited2[s] = true;
  for (int k = 0; k < pb->nnodes; k++) read_at(b, b->g->nodes[pb->nodes[r * pb->nnodes + k]].inputs[0], d, w);
}

/* Bucket `bucket`'s steps on its rank r: the compute stream (after
 * waiting for any gradient copied in) records ev1, the collective stream
 * waits on it, all-reduces, and records ev2. The ALLREDUCE reads the
 * gradients and writes the nodes' own buffers. */
static void list_bucket(builder *b, int bucket, int r) {
  const tfg_plan_bucket *pb = &b->p->buckets[bucket];
  const tfg_graph *g = b->g;
  int d = pb->devices[r], slot = b->base[bucket] + r;
  const tfg_node_id *nodes = &pb->nodes[r * pb->nnodes];
  for (int k = 0; k < pb->nnodes; k++) {
    tfg_node_id y = g->nodes[nodes[k]].inputs[0];
    if (b->dev[y] == d) continue;
    copy_rec *c = find_copy(b, y, d);
    TFG_ASSERT(c != NULL && c->arrived >= 0); /* pass 1 saw this edge; y came first */
    if (!c->waited) {
      emit(b, d, tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, c->arrived));
      c->waited = true;
    }
  }
  int ev1 = b->p->nevents++;
  emit(b, d, tfg_plan_step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COMPUTE, -1, -1, ev1));
  emit(b, d, tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COLLECTIVE, -1, -1, ev1));
  tfg_plan_step st = tfg_plan_step_of(TFG_PLAN_ALLREDUCE, TFG_PLAN_STREAM_COLLECTIVE, -1, -1, -1);
  st.bucket = bucket;
  int s = emit(b, d, st);
  b->ev2[slot] = b->p->nevents++;
  emit(b, d, tfg_plan_step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COLLECTIVE, -1, -1, b->ev2[slot]));
  for (int k = 0; k < pb->nnodes; k++) read_at(b, g->nodes[nodes[k]].inputs[0], d, s);
  for (int k = 0; k < pb->nnodes; k++) {
    int64_t nbytes = tfg_plan_bytes_of(&g->nodes[nodes[k]]);
    if (nbytes > 0)
      b->own_buf[nodes[k]] = add_buffer(b, d, (tfg_plan_buffer){.node = nodes[k], .bytes = nbytes, .first = s, .last = s});
  }
}

/* Node i's LAUNCH on its device's compute stream (running chain `chain`
 * when >= 0: then it reads the chain's inputs), preceded by a WAIT for each
 * copied input it is the first to read there, for each bucket it is
 * the first there to read a node of, and (an optimizer update) for each
 * copy of the param or state it overwrites. Extends the live range of every
 * buffer it reads and opens its own (none for an empty output, such as
 * an optimizer update's marker). */
static void launch(builder *b, tfg_node_id i, int chain) {
  const tfg_node *nd = &b->g->nodes[i];
  int d = b->dev[i];
  const tfg_node_id *ins = chain >= 0 ? b->p->chains[chain].inputs : nd->inputs;
  int nins = chain >= 0 ? b->p->chains[chain].ninputs : nd->ninputs;
  for (int k = 0; k < nins; k++) {
    tfg_node_id x = ins[k];
    if (b->dev[x] == d) {
      if (b->bucket_of[x] >= 0) wait_bucket(b, b->bucket_of[x], b->rank_of[x]);
      continue;
    }
    copy_rec *c = find_copy(b, x, d);
    TFG_ASSERT(c != NULL && c->arrived >= 0); /* pass 1 saw this edge; x came first */
    if (!c->waited) {
      emit(b, d, tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, c->arrived));
      c->waited = true;
    }
  }
  /* An update overwrites its param and state in place: every copy of
   * them sent to another device this step must be done first (its
   * arrival event, which that device's copy stream records). */
  if (chain < 0 && tfg_plan_in_place(nd->op))
    for (int k = 0; k < nd->ninputs; k++) {
      if (k == 1) continue; /* the gradient, only read */
      for (int c = b->copy_head[nd->inputs[k]]; c >= 0; c = b->copies[c].next)
        if (b->copies[c].arrived >= 0)
          emit(b, d, tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, b->copies[c].arrived));
    }
  tfg_plan_step st = tfg_plan_step_of(TFG_PLAN_LAUNCH, TFG_PLAN_STREAM_COMPUTE, i, -1, -1);
  st.chain = chain;
  int s = emit(b, d, st);
  for (int k = 0; k < nins; k++) read_at(b, ins[k], d, s); /* steps only grow: the latest read is the last */
  int64_t n = tfg_plan_bytes_of(nd);
  if (n > 0) b->own_buf[i] = add_buffer(b, d, (tfg_plan_buffer){.node = i, .bytes = n, .first = s, .last = s});
}

/* Whether node i becomes a view (docs/plan.md, Views): a reshape or
 * flatten whose base (its input, or that input's own base) is on i's
 * device with a buffer of the same bytes, written by a LAUNCH (not an
 * all-reduce, whose buffer stream 2 writes) or a constant. A param or
 * state is never a base: an optimizer update writes it in place, and a
 * view read after the update would see the new values where a launched
 * reshape kept the old ones. Its value is then the base's bytes: no
 * step, no buffer, and every read of it extends the base's buffer. */
static bool make_view(builder *b, tfg_node_id i) {
  const tfg_graph *g = b->g;
  tfg_plan *p = b->p;
  const tfg_node *nd = &g->nodes[i];
  if (!p->view_of || !tfg_plan_view_op(nd->op) || nd->ninputs != 1 || tfg_plan_removed(p, i)) return false;
  if (b->chain_of && b->chain_of[i] >= 0) return false;
  tfg_node_id x = nd->inputs[0];
  if (b->dev[x] != b->dev[i] || tfg_plan_removed(p, x)) return false;
  tfg_node_id base = tfg_plan_base_of(p, x);
  const tfg_node *bn = &g->nodes[base];
  if (b->own_buf[base] < 0 || b->bucket_of[base] >= 0) return false;
  if (tfg_plan_persistent(bn) && bn->op != TFG_OP_CONST) return false;
  if (bn->dtype != nd->dtype || tfg_plan_bytes_of(bn) != tfg_plan_bytes_of(nd)) return false;
  p->view_of[i] = base;
  b->own_buf[i] = b->own_buf[base];
  return true;
}

/* Sends x (just computed, persistent, or just all-reduced) to every
 * device that reads it. Each destination's copy stream waits on an event
 * that follows x's producer, copies, and records the event its compute
 * stream will wait on. For a computed or persistent x that event is
 * recorded on the source's compute stream, one per destination, so each
 * is one matched pair; for an all-reduced x it is the bucket's ev2
 * (ready >= 0), which the copy streams share. */
static void send(builder *b, tfg_node_id x, int ready) {
  int src = b->dev[x];
  int64_t n = tfg_plan_bytes_of(&b->g->nodes[x]);
  for (int c = b->copy_head[x]; c >= 0; c = b->copies[c].next) {
    copy_rec *r = &b->copies[c];
    int sent = ready;
    if (sent < 0) {
      sent = b->p->nevents++;
      emit(b, src, tfg_plan_step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COMPUTE, -1, -1, sent));
    }
    emit(b, r->dst, tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COPY, -1, -1, sent));
    int s = emit(b, r->dst, tfg_plan_step_of(TFG_PLAN_COPY, TFG_PLAN_STREAM_COPY, x, src, -1));
    if (n > 0)
      r->buf = add_buffer(b, r->dst, (tfg_plan_buffer){.node = x, .copy = true, .bytes = n, .first = s, .last = s});
    r->arrived = b->p->nevents++;
    emit(b, r->dst, tfg_plan_step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COPY, -1, -1, r->arrived));
  }
}

/* The buckets listed after node i: on i's own device (local true: right
 * after its LAUNCH) or on the others (after its sends, which may bring a
 * gradient there). */
static void list_buckets_at(builder *b, tfg_node_id i, bool local) {
  if (!b->at_head) return;
  for (int s = b->at_head[i]; s >= 0; s = b->at_next[s]) {
    /* the slot's bucket: the last whose base is <= s */
    int lo = 0, hi = b->p->nbuckets - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (b->base[mid] <= s) lo = mid;
      else hi = mid - 1;
    }
    int r = s - b->base[lo];
    if ((b->p->buckets[lo].devices[r] == b->dev[i]) == local) list_bucket(b, lo, r);
  }
}

/* ---- the passes in order ------------------------------------------------------------ */

tfg_status tfg_plan_build(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds, tfg_diag *d,
                          tfg_plan **out) {
  return tfg_plan_build_with(g, pl, ds, NULL, d, out);
}

/* Builds the plan, fusing chains when fuse (then o->keep is set). */
static tfg_status build(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds, const tfg_plan_opts *o,
                        bool fuse, tfg_diag *d, tfg_plan **out) {
  tfg_plan *p = calloc(1, sizeof *p);
  TFG_ASSERT(p != NULL);
  p->g = g;
  p->pl = pl;
  p->ds = ds;
  p->ndev = tfg_devices_count(ds);
  p->dev = calloc((size_t)p->ndev, sizeof *p->dev);
  p->bucket_bytes = o && o->bucket_bytes > 0 ? o->bucket_bytes : TFG_PLAN_BUCKET_BYTES;
  int32_t n = g->nnodes;
  if (o && o->folded) {
    p->folded = malloc((size_t)n + 1);
    TFG_ASSERT(p->folded != NULL);
    memcpy(p->folded, o->folded, (size_t)n);
  }
  if (o && o->views) {
    p->view_of = malloc(sizeof *p->view_of * ((size_t)n + 1));
    TFG_ASSERT(p->view_of != NULL);
    for (int32_t i = 0; i < n; i++) p->view_of[i] = -1;
  }
  builder b = {.g = g, .p = p};
  b.dev = malloc(sizeof *b.dev * ((size_t)n + 1));
  b.own_buf = malloc(sizeof *b.own_buf * ((size_t)n + 1));
  b.copy_head = malloc(sizeof *b.copy_head * ((size_t)n + 1));
  b.bucket_of = malloc(sizeof *b.bucket_of * ((size_t)n + 1));
  b.rank_of = malloc(sizeof *b.rank_of * ((size_t)n + 1));
  b.steps_cap = calloc((size_t)p->ndev, sizeof *b.steps_cap);
  b.bufs_cap = calloc((size_t)p->ndev, sizeof *b.bufs_cap);
  TFG_ASSERT(p->dev && b.dev && b.own_buf && b.copy_head && b.bucket_of && b.rank_of && b.steps_cap && b.bufs_cap);
  for (int32_t i = 0; i < n; i++) {
    b.dev[i] = tfg_placement_device(pl, i);
    TFG_ASSERT(b.dev[i] >= 0 && b.dev[i] < p->ndev);
    b.own_buf[i] = -1;
    b.copy_head[i] = -1;
  }

  /* Pass 0: the buckets; 0b: the chains. */
  make_buckets(&b, p->bucket_bytes);
  if (fuse) make_chains(&b, o->keep);

  /* Pass 1: the copies, from the edges that cross devices (a removed
   * node reads nothing: it never runs). */
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (tfg_plan_removed(p, i)) continue;
    for (int k = 0; k < nd->ninputs; k++)
      if (b.dev[nd->inputs[k]] != b.dev[i]) need_copy(&b, nd->inputs[k], b.dev[i]);
  }

  /* The persistent buffers first, in node order: they are there before
   * any step and are never freed. A constant is one of them: the
   * executor writes its values once, when it is made, so no step of any
   * run uploads it again. */
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (tfg_plan_persistent(nd) && tfg_plan_bytes_of(nd) > 0 && !tfg_plan_removed(p, i))
      b.own_buf[i] =
          add_buffer(&b, b.dev[i], (tfg_plan_buffer){.node = i, .persistent = true, .bytes = tfg_plan_bytes_of(nd)});
  }

  /* Pass 2: the steps, in graph order. Persistent tensors (params,
   * state, constants) are not launched (they are written once, not every
   * step), but are sent
   * like any other tensor, at their place in graph order. An ALLREDUCE
   * node has no step of its own: its bucket's steps come after the node
   * pass 0 chose on each rank, and its sends once every rank has listed
   * the bucket (so no copy stream waits for a rank that is still far
   * behind in the sweep). */
  for (int32_t i = 0; i < n; i++) {
    bool ar = tfg_op_bucketed(g->nodes[i].op);
    int c = b.chain_of ? b.chain_of[i] : -1;
    bool inner = c >= 0 && p->chains[c].nodes[p->chains[c].nnodes - 1] != i; /* runs in its chain's LAUNCH */
    TFG_ASSERT(!inner || b.copy_head[i] < 0); /* read by one op, on its device */
    bool removed = tfg_plan_removed(p, i); /* folded away: it never runs */
    if (!ar && !tfg_plan_persistent(&g->nodes[i]) && !inner && !removed && !make_view(&b, i)) launch(&b, i, c);
    list_buckets_at(&b, i, true);
    if (!ar && !removed) send(&b, i, -1);
    list_buckets_at(&b, i, false);
    for (int bk = b.done_head ? b.done_head[i] : -1; bk >= 0; bk = b.done_next[bk]) {
      const tfg_plan_bucket *pb = &p->buckets[bk];
      for (int r = 0; r < pb->nranks; r++)
        for (int k = 0; k < pb->nnodes; k++) send(&b, pb->nodes[r * pb->nnodes + k], b.ev2[b.base[bk] + r]);
    }
  }
  /* A bucket no op reads on a rank is still waited on there, at the end:
   * its gradients live until then, and its ev2 has a WAIT. */
  for (int bk = 0; bk < p->nbuckets; bk++)
    for (int r = 0; r < p->buckets[bk].nranks; r++) wait_bucket(&b, bk, r);

  /* The live ranges that do not end at a last reader. */
  tfg_plan_close_live_ranges(p, b.dev, b.own_buf);

  /* Pass 3: memory. A COPY's buffer starts at the COPY's place in the
   * device's list, as docs/plan.md defines liveness, so it may take
   * memory that a compute step listed before it was the last to read;
   * pass 4 orders such copies after that step. */
  tfg_status st = TFG_OK;
  for (int dv = 0; dv < p->ndev && st == TFG_OK; dv++)
    if (!tfg_plan_assign_memory(p, dv, d)) st = TFG_ERR_OOM;
  /* Pass 4: copy ordering. */
  for (int dv = 0; dv < p->ndev && st == TFG_OK; dv++) tfg_plan_order_copies(p, dv);

  free(b.dev);
  free(b.own_buf);
  free(b.copy_head);
  free(b.copies);
  free(b.steps_cap);
  free(b.bufs_cap);
  free(b.bucket_of);
  free(b.rank_of);
  free(b.base);
  free(b.at);
  free(b.ev2);
  free(b.waited2);
  free(b.done);
  free(b.at_head);
  free(b.at_next);
  free(b.done_head);
  free(b.done_next);
  free(b.chain_of);
  if (st != TFG_OK) {
    tfg_plan_free(p);
    *out = NULL;
    return st;
  }
  *out = p;
  return TFG_OK;
}

/* With fusion, the fused plan is built first without a sink, so that
 * only its peaks are measured; when one does not fit its device, the
 * unfused plan is built instead (and reports, if it too does not fit). */
tfg_status tfg_plan_build_with(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds,
                               const tfg_plan_opts *o, tfg_diag *d, tfg_plan **out) {
  bool fuse = o && o->fuse && o->keep;
  if (!fuse || !d) return build(g, pl, ds, o, fuse, d, out);
  tfg_plan *p = NULL;
  TFG_ASSERT(build(g, pl, ds, o, true, NULL, &p) == TFG_OK); /* unbounded: it only measures */
  bool fits = true;
  for (int dv = 0; dv < p->ndev; dv++) fits &= p->dev[dv].peak <= tfg_devices_at(ds, dv)->memory;
  if (fits) {
    *out = p;
    return TFG_OK;
  }
  tfg_plan_free(p);
  return build(g, pl, ds, o, false, d, out);
}

/* The sweep repeats until the buckets add nothing. */
void tfg_plan_mark_needed(const tfg_plan *p, const tfg_node_id *fetch, int nfetch, uint8_t *need) {
  const tfg_graph *g = p->g;
  int32_t n = g->nnodes;
  memset(need, 0, (size_t)n);
  for (int i = 0; i < nfetch; i++) need[fetch[i]] = 1;
  for (bool again = true; again;) {
    for (int32_t i = n - 1; i >= 0; i--) {
      if (!need[i]) continue;
      /* The compile driver keeps every value a run may fetch: what
       * constant folding or simplify removed never runs, and nothing needs it. */
      TFG_ASSERT(!p->folded || !tfg_fold_removed(p->folded[i]));
      if (g->nodes[i].op != TFG_OP_INPUT)
        for (int k = 0; k < g->nodes[i].ninputs; k++) need[g->nodes[i].inputs[k]] = 1;
    }
    again = false;
    for (int b = 0; b < p->nbuckets; b++) {
      const tfg_plan_bucket *pb = &p->buckets[b];
      int total = pb->nranks * pb->nnodes, some = 0;
      for (int k = 0; k < total; k++) some += need[pb->nodes[k]];
      if (some == 0 || some == total) continue;
      for (int k = 0; k < total; k++) need[pb->nodes[k]] = 1;
      again = true;
    }
  }
}

bool tfg_plan_device_computes(const tfg_plan *p, int d) {
  const tfg_plan_device *pd = &p->dev[d];
  for (int k = 0; k < pd->nsteps; k++) {
    const tfg_plan_step *st = &pd->steps[k];
    if (st->kind != TFG_PLAN_LAUNCH) continue;
    tfg_op_id op = p->g->nodes[st->node].op;
    if (op != TFG_OP_INPUT && op != TFG_OP_SLICE) return true;
  }
  return false;
}
