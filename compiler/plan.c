/* compiler/plan.c: the execution plan (see plan.h for its rules).
 *
 * Passes over a placed graph:
 *   0. buckets: the ALLREDUCE nodes grouped by key, the keys of one group
 *      of devices packed into buckets in gradient order, and for each
 *      bucket and rank the node after which the sweep lists it;
 *   0b. chains (with fusion on): elementwise ops fused into one launch,
 *      grown greedily in graph order (see Fusion in plan.h);
 *   1. copies: which tensors each device needs from another one, found
 *      from the edges that cross devices: one copy per tensor per
 *      destination, however many ops read it there;
 *   2. steps: one sweep in graph order appends to every device's list, so
 *      the lists interleave as the graph does (a chain has one LAUNCH,
 *      at its last member; its other members none). An op's LAUNCH goes on its
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
 *      rule for concurrent streams in plan.h), found with a max tree over
 *      the device's offsets.
 * Passes 0 to 2 are linear in nodes plus edges (plus sorting the
 * ALLREDUCE nodes); best fit keeps the free gaps in a search tree, and
 * pass 4 a segment tree, O(log n) per buffer, so a graph of 100,000 ops
 * plans in milliseconds however many tensors are live at once.
 *
 * The validator trusts nothing the builder knew: it replays the steps with
 * vector clocks (the happens-before order the events and collectives give
 * the streams), then checks the memory plan against the steps and the
 * clocks. */
#include "compiler/plan.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "compiler/ops.h"

/* Every offset is a multiple of this: what CUDA's allocator guarantees,
 * and enough for any vector load of any dtype. */
#define ALIGN 256

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static int64_t bytes_of(const tfg_node *n) {
  return tfg_shape_numel(&n->shape) * (int64_t)tfg_dtype_size(n->dtype);
}

static bool persistent(const tfg_node *n) { return n->op == TFG_OP_PARAM || n->op == TFG_OP_STATE; }

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
  free(p->dev);
  free(p);
}

/* The rank of device d in bucket pb (its devices ascend), or -1. */
static int rank_in(const tfg_plan_bucket *pb, int d) {
  int lo = 0, hi = pb->nranks;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (pb->devices[mid] < d) lo = mid + 1;
    else hi = mid;
  }
  return lo < pb->nranks && pb->devices[lo] == d ? lo : -1;
}

/* ---- text shared by errors, the validator and print ------------------------ */

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* "n3 matmul (t.tfg:4)"; named nodes as "n0 param h.w (nn.tfg:18)". */
static void node_text(const tfg_graph *g, tfg_node_id id, tfg_strbuf *out) {
  const tfg_node *n = &g->nodes[id];
  tfg_strbuf_printf(out, "n%d %s", (int)id, tfg_op_get(n->op)->name);
  if (n->name) tfg_strbuf_printf(out, " %s", n->name);
  if (n->loc.src) tfg_strbuf_printf(out, " (%s:%u)", base_name(n->loc.src->name), n->loc.line);
}

static const char *dev_name(const tfg_plan *p, int d) { return tfg_devices_at(p->ds, d)->name; }

static const char *const stream_names[] = {"compute", "copy", "collective"};

static const char *stream_name(int s) { return s >= 0 && s < TFG_PLAN_STREAMS ? stream_names[s] : "?"; }

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
  int64_t ka = c->g->nodes[a].attrs.start, kb = c->g->nodes[b].attrs.start;
  if (ka != kb) return ka < kb;
  return c->dev[a] < c->dev[b];
}

/* Keys of one group (same devices) and dtype together, then by gradient
 * order on the group's first device, then by key. */
static bool key_less_by_group(const void *ctx, int a, int b) {
  const pass0 *c = ctx;
  const key_rec *x = &c->keys[a], *y = &c->keys[b];
  if (x->n != y->n) return x->n < y->n;
  for (int r = 0; r < x->n; r++) {
    int dx = c->dev[c->ar[x->first + r]], dy = c->dev[c->ar[y->first + r]];
    if (dx != dy) return dx < dy;
  }
  tfg_dtype tx = c->g->nodes[c->ar[x->first]].dtype, ty = c->g->nodes[c->ar[y->first]].dtype;
  if (tx != ty) return tx < ty;
  if (x->order != y->order) return x->order < y->order;
  return c->g->nodes[c->ar[x->first]].attrs.start < c->g->nodes[c->ar[y->first]].attrs.start;
}

/* Whether keys a and b have the same devices and dtype (one group). */
static bool same_group(const pass0 *c, int a, int b) {
  const key_rec *x = &c->keys[a], *y = &c->keys[b];
  if (x->n != y->n || c->g->nodes[c->ar[x->first]].dtype != c->g->nodes[c->ar[y->first]].dtype) return false;
  for (int r = 0; r < x->n; r++)
    if (c->dev[c->ar[x->first + r]] != c->dev[c->ar[y->first + r]]) return false;
  return true;
}

/* Buckets complete in the order of their last gradient on any rank. */
static bool bucket_less(const void *ctx, int a, int b) {
  const pass0 *c = ctx;
  return c->bk[a].in < c->bk[b].in;
}

/* ---- pass 1: copies --------------------------------------------------------- */

/* One tensor's copy to one destination device. */
typedef struct copy_rec {
  int dst;
  int arrived; /* event the copy stream records after the copy */
  bool waited; /* the destination's compute stream waited on it already */
  int buf;     /* its buffer in dst's memory plan, or -1 (an empty tensor) */
  int next;    /* the next copy of the same tensor (ascending dst), or -1 */
} copy_rec;

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

/* Pass 0: groups the ALLREDUCE nodes into p->buckets (see plan.h) and
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
    nar += g->nodes[i].op == TFG_OP_ALLREDUCE;
  }
  if (nar == 0) return;
  int *ar = malloc(sizeof *ar * (size_t)nar);
  tfg_node_id *reader = malloc(sizeof *reader * ((size_t)n + 1)); /* per node: the first op reading it */
  TFG_ASSERT(ar && reader);
  nar = 0;
  for (int32_t i = 0; i < n; i++) {
    reader[i] = INT32_MAX;
    if (g->nodes[i].op == TFG_OP_ALLREDUCE) ar[nar++] = i;
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
    for (; j < nar && g->nodes[ar[j]].attrs.start == n0->attrs.start; j++) {
      const tfg_node *nd = &g->nodes[ar[j]];
      TFG_ASSERT(j == i || b->dev[ar[j]] > b->dev[ar[j - 1]]); /* one node per device per key */
      TFG_ASSERT(nd->ninputs == 1 && g->nodes[nd->inputs[0]].op != TFG_OP_ALLREDUCE);
      TFG_ASSERT(nd->dtype == n0->dtype && tfg_shape_eq(&nd->shape, &n0->shape));
      if (nd->inputs[0] > k.in) k.in = nd->inputs[0];
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
    int64_t kb = bytes_of(&g->nodes[ar[k->first]]);
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
        tfg_node_id y = g->nodes[pb->nodes[r * pb->nnodes + k]].inputs[0];
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
}

/* ---- pass 0b: chains ------------------------------------------------------------ */

/* Whether node i may be a member of a chain: an elementwise op of arity
 * 1 or 2 on f32 or f64, each input of its dtype and of its shape or a
 * scalar. (Where it sits and who reads it is the caller's question.) */
static bool fusable(const tfg_graph *g, tfg_node_id i) {
  const tfg_node *nd = &g->nodes[i];
  int arity = tfg_fused_arity(nd->op);
  if (arity == 0 || nd->ninputs != arity) return false;
  if (nd->dtype != TFG_DTYPE_F32 && nd->dtype != TFG_DTYPE_F64) return false;
  for (int k = 0; k < arity; k++) {
    const tfg_node *x = &g->nodes[nd->inputs[k]];
    if (x->dtype != nd->dtype || (x->shape.rank != 0 && !tfg_shape_eq(&x->shape, &nd->shape))) return false;
  }
  return true;
}

/* Optimizer updates write their param and state in place. */
static bool in_place(tfg_op_id op) { return op == TFG_OP_SGD_UPDATE || op == TFG_OP_ADAM_UPDATE; }

static bool member_of(const tfg_node_id *m, int n, tfg_node_id x) {
  for (int e = 0; e < n; e++)
    if (m[e] == x) return true;
  return false;
}

/* The values the members m[0..n) (ascending) read that are not members,
 * each once, in first-read order, into in[0..cap); returns their count,
 * or -1 when there are more than cap. */
static int chain_inputs(const tfg_graph *g, const tfg_node_id *m, int n, tfg_node_id *in, int cap) {
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

/* Pass 0b: the chains (plan.h, Fusion). In graph order, each fusable
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
  int *readers = calloc((size_t)n + 1, sizeof *readers);   /* per node: how many distinct ops read it */
  tfg_node_id *last = malloc(sizeof *last * ((size_t)n + 1)); /* the last op counted as its reader */
  int *updates = malloc(sizeof *updates * ((size_t)n + 1)); /* optimizer updates before each node */
  int *group_of = malloc(sizeof *group_of * ((size_t)n + 1)); /* per fusable node: its group */
  b->chain_of = malloc(sizeof *b->chain_of * ((size_t)n + 1));
  TFG_ASSERT(readers && last && updates && group_of && b->chain_of);
  updates[0] = 0;
  for (int32_t i = 0; i < n; i++) last[i] = -1;
  for (int32_t i = 0; i < n; i++) {
    updates[i + 1] = updates[i] + in_place(g->nodes[i].op);
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      if (last[x] != i) readers[x]++;
      last[x] = i;
    }
  }
  fuse_group *groups = NULL;
  int ngroups = 0, cap = 0;
  for (int32_t i = 0; i < n; i++) {
    group_of[i] = -1;
    b->chain_of[i] = -1;
    if (!fusable(g, i)) continue;
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
      if (chain_inputs(g, cand.m, cand.n, in, TFG_FUSED_MAX_INPUTS) < 0) continue;
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
    c->ninputs = chain_inputs(g, gr->m, gr->n, in, TFG_FUSED_MAX_INPUTS);
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

static tfg_plan_step step_of(tfg_plan_step_kind kind, int stream, tfg_node_id node, int src, int event) {
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
  int w = emit(b, d, step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, b->ev2[s]));
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
      emit(b, d, step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, c->arrived));
      c->waited = true;
    }
  }
  int ev1 = b->p->nevents++;
  emit(b, d, step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COMPUTE, -1, -1, ev1));
  emit(b, d, step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COLLECTIVE, -1, -1, ev1));
  tfg_plan_step st = step_of(TFG_PLAN_ALLREDUCE, TFG_PLAN_STREAM_COLLECTIVE, -1, -1, -1);
  st.bucket = bucket;
  int s = emit(b, d, st);
  b->ev2[slot] = b->p->nevents++;
  emit(b, d, step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COLLECTIVE, -1, -1, b->ev2[slot]));
  for (int k = 0; k < pb->nnodes; k++) read_at(b, g->nodes[nodes[k]].inputs[0], d, s);
  for (int k = 0; k < pb->nnodes; k++) {
    int64_t nbytes = bytes_of(&g->nodes[nodes[k]]);
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
      emit(b, d, step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, c->arrived));
      c->waited = true;
    }
  }
  /* An update overwrites its param and state in place: every copy of
   * them sent to another device this step must be done first (its
   * arrival event, which that device's copy stream records). */
  if (chain < 0 && in_place(nd->op))
    for (int k = 0; k < nd->ninputs; k++) {
      if (k == 1) continue; /* the gradient, only read */
      for (int c = b->copy_head[nd->inputs[k]]; c >= 0; c = b->copies[c].next)
        if (b->copies[c].arrived >= 0)
          emit(b, d, step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COMPUTE, -1, -1, b->copies[c].arrived));
    }
  tfg_plan_step st = step_of(TFG_PLAN_LAUNCH, TFG_PLAN_STREAM_COMPUTE, i, -1, -1);
  st.chain = chain;
  int s = emit(b, d, st);
  for (int k = 0; k < nins; k++) read_at(b, ins[k], d, s); /* steps only grow: the latest read is the last */
  int64_t n = bytes_of(nd);
  if (n > 0) b->own_buf[i] = add_buffer(b, d, (tfg_plan_buffer){.node = i, .bytes = n, .first = s, .last = s});
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
  int64_t n = bytes_of(&b->g->nodes[x]);
  for (int c = b->copy_head[x]; c >= 0; c = b->copies[c].next) {
    copy_rec *r = &b->copies[c];
    int sent = ready;
    if (sent < 0) {
      sent = b->p->nevents++;
      emit(b, src, step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COMPUTE, -1, -1, sent));
    }
    emit(b, r->dst, step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COPY, -1, -1, sent));
    int s = emit(b, r->dst, step_of(TFG_PLAN_COPY, TFG_PLAN_STREAM_COPY, x, src, -1));
    if (n > 0)
      r->buf = add_buffer(b, r->dst, (tfg_plan_buffer){.node = x, .copy = true, .bytes = n, .first = s, .last = s});
    r->arrived = b->p->nevents++;
    emit(b, r->dst, step_of(TFG_PLAN_RECORD, TFG_PLAN_STREAM_COPY, -1, -1, r->arrived));
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
/* ---- ordered sets ------------------------------------------------------------------ */

/* A treap: a search tree on (a, b) keys kept balanced by random priorities,
 * so each operation takes expected O(log n). Best fit keeps the free gaps
 * in one keyed by (size, offset), the validator the live buffers in one
 * keyed by (offset, buffer). Its nodes are indices into arrays sized by
 * the caller (a node is in the set at most once). The priorities come
 * from a fixed seed, and only shape the tree: results do not depend on
 * them. */
typedef struct treap {
  int root;
  int *l, *r;
  uint32_t *prio;
  int64_t *ka, *kb;
  uint32_t seed;
} treap;

static void treap_init(treap *t, int n) {
  t->root = -1;
  t->l = malloc(sizeof *t->l * ((size_t)n + 1));
  t->r = malloc(sizeof *t->r * ((size_t)n + 1));
  t->prio = malloc(sizeof *t->prio * ((size_t)n + 1));
  t->ka = malloc(sizeof *t->ka * ((size_t)n + 1));
  t->kb = malloc(sizeof *t->kb * ((size_t)n + 1));
  t->seed = 2463534242u;
  TFG_ASSERT(t->l && t->r && t->prio && t->ka && t->kb);
}

static void treap_free(treap *t) {
  free(t->l);
  free(t->r);
  free(t->prio);
  free(t->ka);
  free(t->kb);
}

static bool key_less(const treap *t, int x, int64_t a, int64_t b) { return t->ka[x] < a || (t->ka[x] == a && t->kb[x] < b); }

/* Splits the tree at x into keys < (a, b) and keys >= (a, b). */
static void treap_split(treap *t, int x, int64_t a, int64_t b, int *lo, int *hi) {
  if (x < 0) {
    *lo = *hi = -1;
  } else if (key_less(t, x, a, b)) {
    treap_split(t, t->r[x], a, b, &t->r[x], hi);
    *lo = x;
  } else {
    treap_split(t, t->l[x], a, b, lo, &t->l[x]);
    *hi = x;
  }
}

/* Joins two trees, every key of lo below every key of hi. */
static int treap_merge(treap *t, int lo, int hi) {
  if (lo < 0) return hi;
  if (hi < 0) return lo;
  if (t->prio[lo] > t->prio[hi]) {
    t->r[lo] = treap_merge(t, t->r[lo], hi);
    return lo;
  }
  t->l[hi] = treap_merge(t, lo, t->l[hi]);
  return hi;
}

static void treap_insert(treap *t, int x, int64_t a, int64_t b) {
  t->seed ^= t->seed << 13; /* xorshift32 */
  t->seed ^= t->seed >> 17;
  t->seed ^= t->seed << 5;
  t->prio[x] = t->seed;
  t->ka[x] = a;
  t->kb[x] = b;
  t->l[x] = t->r[x] = -1;
  int lo, hi;
  treap_split(t, t->root, a, b, &lo, &hi);
  t->root = treap_merge(t, treap_merge(t, lo, x), hi);
}

static void treap_erase(treap *t, int x) {
  int lo, mid, hi;
  treap_split(t, t->root, t->ka[x], t->kb[x], &lo, &mid);
  treap_split(t, mid, t->ka[x], t->kb[x] + 1, &mid, &hi);
  TFG_ASSERT(mid == x);
  t->root = treap_merge(t, lo, hi);
}

/* The node with the smallest key >= (a, b), or -1. */
static int treap_ceil(const treap *t, int64_t a, int64_t b) {
  int best = -1;
  for (int x = t->root; x >= 0;)
    if (key_less(t, x, a, b)) x = t->r[x];
    else {
      best = x;
      x = t->l[x];
    }
  return best;
}

/* The node with the largest key < (a, b), or -1. */
static int treap_floor_below(const treap *t, int64_t a, int64_t b) {
  int best = -1;
  for (int x = t->root; x >= 0;)
    if (key_less(t, x, a, b)) {
      best = x;
      x = t->r[x];
    } else {
      x = t->l[x];
    }
  return best;
}

/* ---- pass 3: memory -------------------------------------------------------------- */

/* Reports that buffer bi of device d does not fit: at its op's source
 * line, with what it needs and the largest free block there was. */
static void report_oom(const tfg_plan *p, tfg_diag *diag, int d, const tfg_plan_buffer *bf, int64_t avail,
                       int64_t in_use, int nlive) {
  const tfg_device *dv = tfg_devices_at(p->ds, d);
  const tfg_node *nd = &p->g->nodes[bf->node];
  tfg_strbuf need = {0}, have = {0}, cap = {0}, used = {0}, pers = {0};
  tfg_size_format(&need, bf->bytes);
  tfg_size_format(&have, avail > 0 ? avail : 0);
  tfg_size_format(&cap, dv->memory);
  tfg_size_format(&used, in_use);
  tfg_size_format(&pers, p->dev[d].persistent_bytes);
  const char *op = tfg_op_get(nd->op)->name;
  if (bf->persistent)
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: %s %s needs %s but only %s is available", dv->name, op,
                   nd->name ? nd->name : "?", need.data, have.data);
  else if (bf->copy)
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: the copy of %s's output from %s needs %s but only %s is available",
                   dv->name, op, tfg_devices_at(p->ds, p->dev[d].steps[bf->first].src)->name, need.data, have.data);
  else
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: %s needs %s for its output but only %s is available", dv->name,
                   op, need.data, have.data);
  if (bf->persistent)
    tfg_diag_note(diag, NULL, "%s has %s; the params and optimizer state before this one take %s", dv->name, cap.data,
                  used.data);
  else
    tfg_diag_note(diag, NULL, "%s has %s: %s persistent, %s held by %d tensor%s live at this step", dv->name, cap.data,
                  pers.data, used.data, nlive, nlive == 1 ? "" : "s");
  tfg_diag_help(diag, "give the device more memory (--devices host:SIZE, --memory-limit) or use smaller tensors");
  tfg_strbuf_free(&need);
  tfg_strbuf_free(&have);
  tfg_strbuf_free(&cap);
  tfg_strbuf_free(&used);
  tfg_strbuf_free(&pers);
}

/* Best fit's state on one device: the live buffers in offset order as a
 * circular list through node `base` (the top of the persistent region),
 * and the gaps between neighbours in a treap keyed by (size, offset), each
 * gap named by the buffer below it. The space above the last live buffer
 * is not a gap: it is the top. */
typedef struct fitter {
  const tfg_plan_buffer *bufs;
  int base;
  int64_t base_end;
  int *next, *prev;
  bool *in_gaps;
  treap gaps;
} fitter;

/* Where the buffer after u may start (u's end rounded up). */
static int64_t end_of(const fitter *f, int u) {
  return u == f->base ? f->base_end : align_up(f->bufs[u].offset + f->bufs[u].bytes);
}

/* Files the gap above u (after u changed neighbours): none at the top. */
static void refile_gap(fitter *f, int u) {
  if (f->in_gaps[u]) treap_erase(&f->gaps, u);
  f->in_gaps[u] = false;
  int v = f->next[u];
  if (v == f->base) return;
  int64_t size = f->bufs[v].offset - end_of(f, u);
  if (size <= 0) return;
  treap_insert(&f->gaps, u, size, end_of(f, u));
  f->in_gaps[u] = true;
}

/* Assigns offsets on device d: persistent buffers packed from 0 in node
 * order (they come first in the list), then every other buffer, in the
 * order of the steps that write them, into the smallest gap between the
 * buffers live at its first step (the lowest such gap on a tie), or on top
 * of them. Returns false after reporting when the device is too small. */
static bool assign_memory(tfg_plan *p, int d, tfg_diag *diag) {
  tfg_plan_device *pd = &p->dev[d];
  /* Without a sink the plan is only measured (the placer asks for peaks). */
  int64_t capacity = diag ? tfg_devices_at(p->ds, d)->memory : INT64_MAX;
  int64_t top = 0;
  int nb = pd->nbuffers, i = 0;
  for (; i < nb && pd->buffers[i].persistent; i++) {
    tfg_plan_buffer *bf = &pd->buffers[i];
    bf->offset = align_up(top);
    if (bf->offset + bf->bytes > capacity) {
      report_oom(p, diag, d, bf, capacity - bf->offset, top, 0);
      return false;
    }
    top = bf->offset + bf->bytes;
    if (top > pd->peak) pd->peak = top;
  }
  pd->persistent_bytes = align_up(top);

  /* Buffers to free before step s: those whose last step is s - 1, as
   * lists threaded through free_next (every last step is known now). */
  int *free_head = malloc(sizeof *free_head * ((size_t)pd->nsteps + 1));
  int *free_next = malloc(sizeof *free_next * ((size_t)nb + 1));
  fitter f = {.bufs = pd->buffers, .base = nb, .base_end = pd->persistent_bytes};
  f.next = malloc(sizeof *f.next * ((size_t)nb + 1));
  f.prev = malloc(sizeof *f.prev * ((size_t)nb + 1));
  f.in_gaps = calloc((size_t)nb + 1, sizeof *f.in_gaps);
  TFG_ASSERT(free_head && free_next && f.next && f.prev && f.in_gaps);
  treap_init(&f.gaps, nb + 1);
  f.next[f.base] = f.prev[f.base] = f.base;
  for (int s = 0; s < pd->nsteps; s++) free_head[s] = -1;
  for (int k = i; k < nb; k++) {
    free_next[k] = free_head[pd->buffers[k].last];
    free_head[pd->buffers[k].last] = k;
  }
  int nlive = 0, freed_to = 0; /* buffers whose last step is < freed_to are gone */
  int64_t in_use = 0;
  bool ok = true;
  for (; i < nb; i++) {
    tfg_plan_buffer *bf = &pd->buffers[i];
    for (; freed_to < bf->first; freed_to++)
      for (int k = free_head[freed_to]; k >= 0; k = free_next[k]) {
        int u = f.prev[k], v = f.next[k];
        if (f.in_gaps[k]) treap_erase(&f.gaps, k);
        f.in_gaps[k] = false;
        f.next[u] = v;
        f.prev[v] = u;
        refile_gap(&f, u); /* the gaps on both sides and k's place merge */
        in_use -= pd->buffers[k].bytes;
        nlive--;
      }
    /* The smallest gap that fits, the lowest among equals: the first key
     * >= (need, any offset); else on top of the highest live buffer. */
    int u = treap_ceil(&f.gaps, align_up(bf->bytes), INT64_MIN);
    if (u < 0) u = f.prev[f.base];
    bf->offset = end_of(&f, u);
    if (bf->offset + bf->bytes > capacity) {
      int big = treap_floor_below(&f.gaps, INT64_MAX, INT64_MAX); /* the largest gap */
      int64_t avail = capacity - bf->offset;
      if (big >= 0 && f.gaps.ka[big] > avail) avail = f.gaps.ka[big];
      report_oom(p, diag, d, bf, avail, in_use, nlive);
      ok = false;
      break;
    }
    int v = f.next[u];
    f.next[u] = i;
    f.prev[i] = u;
    f.next[i] = v;
    f.prev[v] = i;
    refile_gap(&f, u);
    refile_gap(&f, i);
    nlive++;
    in_use += bf->bytes;
    if (bf->offset + bf->bytes > pd->peak) pd->peak = bf->offset + bf->bytes;
  }
  free(free_head);
  free(free_next);
  free(f.next);
  free(f.prev);
  free(f.in_gaps);
  treap_free(&f.gaps);
  return ok;
}


/* ---- pass 4: copy ordering ------------------------------------------------------- */

/* A max tree over elementary intervals [0, n): chmax over a range, max
 * over a range, O(log n) each. tag[x] applies to x's whole range; mx[x]
 * is the maximum anywhere in it. */
typedef struct maxtree {
  int n;
  int *mx, *tag;
} maxtree;

static void maxtree_update(maxtree *t, int x, int l, int r, int ql, int qr, int v) {
  if (qr <= l || r <= ql) return;
  if (t->mx[x] < v) t->mx[x] = v;
  if (ql <= l && r <= qr) {
    if (t->tag[x] < v) t->tag[x] = v;
    return;
  }
  int m = (l + r) / 2;
  maxtree_update(t, 2 * x, l, m, ql, qr, v);
  maxtree_update(t, 2 * x + 1, m, r, ql, qr, v);
}

static int maxtree_query(const maxtree *t, int x, int l, int r, int ql, int qr) {
  if (qr <= l || r <= ql) return -1;
  if (ql <= l && r <= qr) return t->mx[x];
  int m = (l + r) / 2, a = maxtree_query(t, 2 * x, l, m, ql, qr), b = maxtree_query(t, 2 * x + 1, m, r, ql, qr);
  int v = a > b ? a : b;
  return v > t->tag[x] ? v : t->tag[x];
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The index of v in the sorted array c[0..n) (it is there). */
static int coord(const int64_t *c, int n, int64_t v) {
  const int64_t *f = bsearch(&v, c, (size_t)n, sizeof *c, cmp_i64);
  TFG_ASSERT(f != NULL);
  return (int)(f - c);
}

/* Makes device d's COPY steps wait for the compute steps that last used
 * their memory (the rule for concurrent streams in plan.h). Buffers in
 * write order: the max tree holds, per byte, the last step of any buffer
 * placed there so far; for a COPY's buffer, the highest over its bytes is
 * the step whose stream must be ordered before the copy. A freed
 * buffer's last step is a compute step (a read, or the WAIT on a bucket's
 * ev2) after its other accesses, so an event recorded right after it
 * covers them; the copy stream runs in order, so once it waited past a
 * step, later copies need nothing earlier. New events are numbered after
 * the sweep's; the inserted steps shift indices, and live ranges with
 * them. */
static void order_copies(tfg_plan *p, int d) {
  tfg_plan_device *pd = &p->dev[d];
  int nb = pd->nbuffers, nc = 0;
  int64_t *cs = malloc(sizeof *cs * (2 * (size_t)nb + 1));
  TFG_ASSERT(cs != NULL);
  for (int i = 0; i < nb; i++)
    if (!pd->buffers[i].persistent) {
      cs[nc++] = pd->buffers[i].offset;
      cs[nc++] = pd->buffers[i].offset + pd->buffers[i].bytes;
    }
  qsort(cs, (size_t)nc, sizeof *cs, cmp_i64);
  int m = 0;
  for (int i = 0; i < nc; i++)
    if (m == 0 || cs[m - 1] != cs[i]) cs[m++] = cs[i];
  maxtree t = {.n = m > 1 ? m - 1 : 1};
  t.mx = malloc(sizeof *t.mx * 4 * (size_t)t.n);
  t.tag = malloc(sizeof *t.tag * 4 * (size_t)t.n);
  int *rec_after = malloc(sizeof *rec_after * ((size_t)pd->nsteps + 1));  /* event recorded after step s, or -1 */
  int *wait_before = malloc(sizeof *wait_before * ((size_t)pd->nsteps + 1)); /* event the copy stream waits on before s */
  TFG_ASSERT(t.mx && t.tag && rec_after && wait_before);
  for (int i = 0; i < 4 * t.n; i++) t.mx[i] = t.tag[i] = -1;
  for (int s = 0; s < pd->nsteps; s++) rec_after[s] = wait_before[s] = -1;
  int ordered[TFG_PLAN_STREAMS] = {-1, -1, -1}; /* per stream: the copy stream waited on it past this step */
  int added = 0;
  for (int i = 0; i < nb; i++) {
    const tfg_plan_buffer *bf = &pd->buffers[i];
    if (bf->persistent) continue;
    int lo = coord(cs, m, bf->offset), hi = coord(cs, m, bf->offset + bf->bytes);
    if (bf->copy) {
      int need = maxtree_query(&t, 1, 0, t.n, lo, hi);
      int s = need >= 0 ? pd->steps[need].stream : TFG_PLAN_STREAM_COPY;
      if (s != TFG_PLAN_STREAM_COPY && need > ordered[s]) {
        TFG_ASSERT(need < bf->first && rec_after[need] < 0 && wait_before[bf->first] < 0);
        rec_after[need] = wait_before[bf->first] = p->nevents++;
        ordered[s] = need;
        added += 2;
      }
    }
    maxtree_update(&t, 1, 0, t.n, lo, hi, bf->last);
  }
  if (added > 0) {
    tfg_plan_step *steps = malloc(sizeof *steps * ((size_t)pd->nsteps + (size_t)added));
    int *at = malloc(sizeof *at * ((size_t)pd->nsteps + 1)); /* old index -> new */
    TFG_ASSERT(steps && at);
    int k = 0;
    for (int s = 0; s < pd->nsteps; s++) {
      if (wait_before[s] >= 0) steps[k++] = step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COPY, -1, -1, wait_before[s]);
      at[s] = k;
      steps[k++] = pd->steps[s];
      if (rec_after[s] >= 0) steps[k++] = step_of(TFG_PLAN_RECORD, pd->steps[s].stream, -1, -1, rec_after[s]);
    }
    TFG_ASSERT(k == pd->nsteps + added);
    for (int i = 0; i < nb; i++) {
      tfg_plan_buffer *bf = &pd->buffers[i];
      if (bf->persistent) {
        bf->last = k - 1;
      } else {
        bf->first = at[bf->first];
        bf->last = at[bf->last];
      }
    }
    free(pd->steps);
    pd->steps = steps;
    pd->nsteps = k;
    free(at);
  }
  free(cs);
  free(t.mx);
  free(t.tag);
  free(rec_after);
  free(wait_before);
}

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

  /* Pass 1: the copies, from the edges that cross devices. */
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->ninputs; k++)
      if (b.dev[nd->inputs[k]] != b.dev[i]) need_copy(&b, nd->inputs[k], b.dev[i]);
  }

  /* The persistent buffers first, in node order: they are there before
   * any step and are never freed. */
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (persistent(nd) && bytes_of(nd) > 0)
      b.own_buf[i] = add_buffer(&b, b.dev[i], (tfg_plan_buffer){.node = i, .persistent = true, .bytes = bytes_of(nd)});
  }

  /* Pass 2: the steps, in graph order. Persistent tensors are not
   * launched (they are initialized once, not every step), but are sent
   * like any other tensor, at their place in graph order. An ALLREDUCE
   * node has no step of its own: its bucket's steps come after the node
   * pass 0 chose on each rank, and its sends once every rank has listed
   * the bucket (so no copy stream waits for a rank that is still far
   * behind in the sweep). */
  for (int32_t i = 0; i < n; i++) {
    bool ar = g->nodes[i].op == TFG_OP_ALLREDUCE;
    int c = b.chain_of ? b.chain_of[i] : -1;
    bool inner = c >= 0 && p->chains[c].nodes[p->chains[c].nnodes - 1] != i; /* runs in its chain's LAUNCH */
    TFG_ASSERT(!inner || b.copy_head[i] < 0); /* read by one op, on its device */
    if (!ar && !persistent(&g->nodes[i]) && !inner) launch(&b, i, c);
    list_buckets_at(&b, i, true);
    if (!ar) send(&b, i, -1);
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

  /* A tensor sent to another device stays live to the end of its own
   * device's steps. The COPY that reads it runs on the destination's copy
   * stream, and nothing in the plan tells the source when that copy has
   * finished (the only events go the other way), so no later step on the
   * source may reuse its memory. An executor must still keep it until the
   * copy finished before the next run of the plan (it synchronizes the
   * devices at the end of a step). */
  for (int32_t i = 0; i < n; i++)
    if (b.copy_head[i] >= 0 && b.own_buf[i] >= 0) {
      tfg_plan_device *pd = &p->dev[b.dev[i]];
      if (!pd->buffers[b.own_buf[i]].persistent) pd->buffers[b.own_buf[i]].last = pd->nsteps - 1;
    }
  /* A value no op reads is a result: the loss, a metric, a printed tensor.
   * It is fetched after the step, so it too lives to the end of the list
   * (else the next op would reuse its memory before anyone read it). */
  {
    uint8_t *read = calloc((size_t)n + 1, 1);
    TFG_ASSERT(read != NULL);
    for (int32_t i = 0; i < n; i++)
      for (int k = 0; k < g->nodes[i].ninputs; k++) read[g->nodes[i].inputs[k]] = 1;
    for (int32_t i = 0; i < n; i++)
      if (!read[i] && b.own_buf[i] >= 0) {
        tfg_plan_device *pd = &p->dev[b.dev[i]];
        pd->buffers[b.own_buf[i]].last = pd->nsteps - 1;
      }
    free(read);
  }
  /* Persistent buffers span the whole list (an empty range, 0 to -1, on
   * a device with no steps: the validator takes them as always live). */
  for (int dv = 0; dv < p->ndev; dv++)
    for (int k = 0; k < p->dev[dv].nbuffers && p->dev[dv].buffers[k].persistent; k++) {
      p->dev[dv].buffers[k].first = 0;
      p->dev[dv].buffers[k].last = p->dev[dv].nsteps - 1;
    }

  /* Pass 3: memory. A COPY's buffer starts at the COPY's place in the
   * device's list, as plan.h defines liveness, so it may take memory that
   * a compute step listed before it was the last to read; pass 4 orders
   * such copies after that step. */
  tfg_status st = TFG_OK;
  for (int dv = 0; dv < p->ndev && st == TFG_OK; dv++)
    if (!assign_memory(p, dv, d)) st = TFG_ERR_OOM;
  /* Pass 4: copy ordering. */
  for (int dv = 0; dv < p->ndev && st == TFG_OK; dv++) order_copies(p, dv);

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

/* ---- validation --------------------------------------------------------------------- */

typedef struct checker {
  const tfg_plan *p;
  const tfg_graph *g;
  tfg_strbuf *why;
  int nstreams;       /* 3 per device: stream s of device d is 3 * d + s */
  /* where each node's value is produced (from a scan of the steps): by a
   * LAUNCH on stream 0, or an ALLREDUCE on stream 2 */
  int *l_dev, *l_step, *l_stream;
  int32_t *l_time;    /* its time on its stream once replayed, else 0 */
  int *p_dev;         /* the device holding it as a persistent buffer, or -1 */
  /* the copies, per node a list (from a scan of the steps) */
  int *c_head;
  struct vcopy {
    int dst, step, src, buf;
    int32_t time;     /* once replayed, else 0 */
    int next;
  } *c;
  int nc;
  int *own_buf;       /* per node: its non-copy, non-persistent buffer's index on l_dev */
  /* buckets: a (bucket, rank) pair is slot br_base[b] + r */
  int *b_of, *r_of;   /* per node: an ALLREDUCE node's bucket and rank, else -1 */
  int *br_base;
  int *ar_step;       /* per slot: its ALLREDUCE step on the rank, or -1 */
  int *ar_seq;        /* per slot: its place among the rank's ALLREDUCE steps */
  /* per step of every device (device d's step s at step_base[d] + s) */
  int *step_base;
  int32_t *sclock;    /* 3 per step once replayed: its stream's clock for the device's 3 streams */
  int *release;       /* an ALLREDUCE's first compute step on the device ordered after it, or -1 */
  int *ch_of;         /* per node: the chain it is a member of, or -1 */
} checker;

static bool fail(checker *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(checker *ck, const char *fmt, ...) {
  if (ck->why) {
    va_list ap;
    va_start(ap, fmt);
    tfg_strbuf_vprintf(ck->why, fmt, ap);
    va_end(ap);
  }
  return false;
}

/* The node text as a heap string, for messages (freed by the caller). */
static char *ntext(const checker *ck, tfg_node_id id) {
  tfg_strbuf b = {0};
  if (id >= 0 && id < ck->g->nnodes) node_text(ck->g, id, &b);
  else tfg_strbuf_printf(&b, "n%d (no such node)", (int)id);
  return tfg_strbuf_take(&b);
}

static struct vcopy *vfind(const checker *ck, tfg_node_id x, int dst) {
  for (int k = ck->c_head[x]; k >= 0; k = ck->c[k].next)
    if (ck->c[k].dst == dst) return &ck->c[k];
  return NULL;
}

/* A bucket's rank r's k-th node. */
static tfg_node_id bnode(const tfg_plan_bucket *pb, int r, int k) { return pb->nodes[r * pb->nnodes + k]; }

/* The bucket table: ranks distinct devices in ascending order; every
 * ALLREDUCE node of the graph in exactly one bucket, on its rank's
 * device as placed; the same keys in the same order, one dtype and the
 * same shapes on every rank; group sizes (attrs.n) the rank count; bytes
 * the sum. Fills b_of, r_of and br_base. */
static bool check_buckets(checker *ck) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int nslots = 0;
  if (p->nbuckets < 0 || (p->nbuckets > 0 && !p->buckets)) return fail(ck, "the plan has %d buckets", p->nbuckets);
  for (int b = 0; b < p->nbuckets; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    ck->br_base[b] = nslots;
    if (pb->nranks < 1 || pb->nnodes < 1 || !pb->devices || !pb->nodes)
      return fail(ck, "bucket %d has %d ranks and %d tensors", b, pb->nranks, pb->nnodes);
    nslots += pb->nranks;
    for (int r = 0; r < pb->nranks; r++)
      if (pb->devices[r] < 0 || pb->devices[r] >= p->ndev || (r > 0 && pb->devices[r] <= pb->devices[r - 1]))
        return fail(ck, "bucket %d: rank %d is device %d (ranks are distinct devices in ascending order)", b, r,
                    pb->devices[r]);
    int64_t bytes = 0;
    for (int r = 0; r < pb->nranks; r++)
      for (int k = 0; k < pb->nnodes; k++) {
        tfg_node_id x = bnode(pb, r, k);
        if (x < 0 || x >= g->nnodes) return fail(ck, "bucket %d: node %d does not exist", b, (int)x);
        const tfg_node *nd = &g->nodes[x], *n0 = &g->nodes[bnode(pb, 0, k)], *f = &g->nodes[bnode(pb, 0, 0)];
        char *t = ntext(ck, x);
        bool ok = true;
        int placed = tfg_placement_device(p->pl, x);
        if (nd->op != TFG_OP_ALLREDUCE || nd->ninputs != 1)
          ok = fail(ck, "bucket %d holds %s, which is not an all-reduce of one tensor", b, t);
        else if (ck->b_of[x] >= 0)
          ok = fail(ck, "%s is in bucket %d and bucket %d", t, ck->b_of[x], b);
        else if (placed != pb->devices[r])
          ok = fail(ck, "bucket %d: %s is placed on %s, but is rank %d's (%s)", b, t, dev_name(p, placed), r,
                    dev_name(p, pb->devices[r]));
        else if (n0->op == TFG_OP_ALLREDUCE && nd->attrs.start != n0->attrs.start)
          ok = fail(ck, "bucket %d: %s has key %" PRId64 ", but rank 0's tensor %d has key %" PRId64, b, t,
                    nd->attrs.start, k, n0->attrs.start);
        else if (nd->dtype != f->dtype || !tfg_shape_eq(&nd->shape, &n0->shape))
          ok = fail(ck, "bucket %d: %s differs from its key's other tensors or the bucket's dtype", b, t);
        else if (nd->attrs.n != pb->nranks)
          ok = fail(ck, "bucket %d: %s is one of a group of %" PRId64 " (attrs.n), but the bucket has %d ranks", b, t,
                    nd->attrs.n, pb->nranks);
        free(t);
        if (!ok) return false;
        ck->b_of[x] = b;
        ck->r_of[x] = r;
        if (r == 0) bytes += bytes_of(nd);
      }
    if (bytes != pb->bytes)
      return fail(ck, "bucket %d has %" PRId64 " bytes, but its tensors have %" PRId64, b, pb->bytes, bytes);
  }
  for (tfg_node_id i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == TFG_OP_ALLREDUCE && ck->b_of[i] < 0) {
      char *t = ntext(ck, i);
      fail(ck, "%s is in no bucket", t);
      free(t);
      return false;
    }
  return true;
}

/* Whether x is an intermediate of its chain (a member but the last). */
static bool inner_of(const checker *ck, tfg_node_id x) {
  int c = ck->ch_of[x];
  return c >= 0 && ck->p->chains[c].nodes[ck->p->chains[c].nnodes - 1] != x;
}

/* The chains (plan.h, Fusion): well formed, members distinct across
 * chains and in graph order, each fusable, of the last member's shape and
 * on its device; every intermediate read by exactly one op, a member of
 * its chain; the inputs exactly what chain_inputs gives; no optimizer
 * update between the first member and the last. Fills ch_of. */
static bool check_chains(checker *ck) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int32_t n = g->nnodes;
  if (p->nchains < 0 || (p->nchains > 0 && !p->chains)) return fail(ck, "the plan has %d chains", p->nchains);
  for (int c = 0; c < p->nchains; c++) {
    const tfg_plan_chain *ch = &p->chains[c];
    if (ch->nnodes < 2 || ch->nnodes > TFG_FUSED_MAX_OPS || !ch->nodes || ch->ninputs < 0 ||
        ch->ninputs > TFG_FUSED_MAX_INPUTS || (ch->ninputs > 0 && !ch->inputs))
      return fail(ck, "chain %d has %d ops and %d inputs (2 to %d ops, at most %d inputs)", c, ch->nnodes, ch->ninputs,
                  TFG_FUSED_MAX_OPS, TFG_FUSED_MAX_INPUTS);
    for (int e = 0; e < ch->nnodes; e++) {
      tfg_node_id x = ch->nodes[e];
      if (x < 0 || x >= n) return fail(ck, "chain %d: node %d does not exist", c, (int)x);
      if (e > 0 && x <= ch->nodes[e - 1]) return fail(ck, "chain %d: its members are not in graph order", c);
      if (ck->ch_of[x] >= 0) {
        char *t = ntext(ck, x);
        bool r = fail(ck, "%s is a member of chain %d and chain %d", t, ck->ch_of[x], c);
        free(t);
        return r;
      }
      ck->ch_of[x] = c;
    }
  }
  /* who reads each intermediate (distinct ops) */
  int *readers = calloc((size_t)n + 1, sizeof *readers);
  tfg_node_id *reader = malloc(sizeof *reader * ((size_t)n + 1));
  int *updates = malloc(sizeof *updates * ((size_t)n + 1));
  TFG_ASSERT(readers && reader && updates);
  updates[0] = 0;
  for (int32_t i = 0; i < n; i++) reader[i] = -1;
  for (int32_t i = 0; i < n; i++) {
    updates[i + 1] = updates[i] + in_place(g->nodes[i].op);
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      if (reader[x] != i) readers[x]++;
      reader[x] = i;
    }
  }
  bool ok = true;
  for (int c = 0; c < p->nchains && ok; c++) {
    const tfg_plan_chain *ch = &p->chains[c];
    tfg_node_id lastm = ch->nodes[ch->nnodes - 1];
    const tfg_node *ln = &g->nodes[lastm];
    int dev = tfg_placement_device(p->pl, lastm);
    for (int e = 0; e < ch->nnodes && ok; e++) {
      tfg_node_id x = ch->nodes[e];
      const tfg_node *nd = &g->nodes[x];
      char *t = ntext(ck, x);
      if (!fusable(g, x))
        ok = fail(ck, "chain %d: %s is not an elementwise f32/f64 op of inputs of its shape or scalars", c, t);
      else if (nd->dtype != ln->dtype || !tfg_shape_eq(&nd->shape, &ln->shape))
        ok = fail(ck, "chain %d: %s differs from its last member in dtype or shape", c, t);
      else if (tfg_placement_device(p->pl, x) != dev)
        ok = fail(ck, "chain %d: %s is placed on %s, its last member on %s", c, t,
                  dev_name(p, tfg_placement_device(p->pl, x)), dev_name(p, dev));
      else if (x != lastm && (readers[x] != 1 || ck->ch_of[reader[x]] != c))
        ok = fail(ck, "chain %d: %s is read by %d ops%s, but an intermediate is read only by a member of its chain", c,
                  t, readers[x], readers[x] == 1 ? " (outside the chain)" : "");
      free(t);
    }
    tfg_node_id in[TFG_FUSED_MAX_INPUTS];
    int nin = ok ? chain_inputs(g, ch->nodes, ch->nnodes, in, TFG_FUSED_MAX_INPUTS) : 0;
    if (ok && (nin != ch->ninputs || memcmp(in, ch->inputs, sizeof *in * (size_t)(nin > 0 ? nin : 0)) != 0))
      ok = fail(ck, "chain %d: its inputs are not what its members read outside it, each once, in first-read order", c);
    if (ok && updates[lastm] != updates[ch->nodes[0]]) {
      char *t = ntext(ck, lastm);
      ok = fail(ck,
                "chain %d (last %s) spans an optimizer update, which writes in place what the chain may read before",
                c, t);
      free(t);
    }
  }
  free(readers);
  free(reader);
  free(updates);
  return ok;
}

/* Steps well formed: kinds, streams, nodes, devices, buckets and events
 * in range; every op (not params, state and ALLREDUCE nodes) launched
 * once, on its placed device, in graph order there; every bucket's
 * ALLREDUCE once on each of its ranks and nowhere else, in one relative
 * order on all ranks; every event recorded at most once and every waited
 * event recorded. Fills the launch, copy and all-reduce tables. */
static bool check_steps(checker *ck, int *rec_dev, int *rec_step, int *nwaits, tfg_node_id *last_launch) {
  const tfg_plan *p = ck->p;
  int32_t n = ck->g->nnodes;
  for (int d = 0; d < p->ndev; d++) last_launch[d] = -1;
  for (int d = 0; d < p->ndev; d++) {
    int nseq = 0;
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      const char *dn = dev_name(p, d);
      if (st->stream < 0 || st->stream >= TFG_PLAN_STREAMS)
        return fail(ck, "%s step %d: stream %d does not exist", dn, s, st->stream);
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        if (st->node < 0 || st->node >= n) return fail(ck, "%s step %d: node %d does not exist", dn, s, (int)st->node);
        if (st->kind == TFG_PLAN_LAUNCH) {
          if (st->stream != 0) return fail(ck, "%s step %d: a launch on stream %d, not the compute stream", dn, s, st->stream);
          /* a chain's last member runs its chain; nothing else names one */
          int want = ck->ch_of[st->node] >= 0 && !inner_of(ck, st->node) ? ck->ch_of[st->node] : -1;
          if (inner_of(ck, st->node) || st->chain != want) {
            char *t = ntext(ck, st->node);
            bool r = inner_of(ck, st->node)
                         ? fail(ck, "%s step %d: launches %s, which chain %d fuses (only its last member is launched)", dn,
                                s, t, ck->ch_of[st->node])
                     : want >= 0 ? fail(ck, "%s step %d: launches %s, the last member of chain %d, without its chain", dn,
                                        s, t, want)
                                 : fail(ck, "%s step %d: launches %s with chain %d, which it does not end", dn, s, t,
                                        st->chain);
            free(t);
            return r;
          }
          if (ck->b_of[st->node] >= 0) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: launches %s, which only its bucket's all-reduce computes", dn, s, t);
            free(t);
            return r;
          }
          if (ck->l_dev[st->node] >= 0) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: %s is launched twice (first on %s step %d)", dn, s, t,
                          dev_name(p, ck->l_dev[st->node]), ck->l_step[st->node]);
            free(t);
            return r;
          }
          if (last_launch[d] > st->node) {
            char *t = ntext(ck, st->node), *a = ntext(ck, last_launch[d]);
            bool r = fail(ck, "%s step %d: %s is launched after %s, out of graph order", dn, s, t, a);
            free(t);
            free(a);
            return r;
          }
          last_launch[d] = st->node;
          ck->l_dev[st->node] = d;
          ck->l_step[st->node] = s;
          ck->l_stream[st->node] = TFG_PLAN_STREAM_COMPUTE;
        } else {
          if (st->stream != 1) return fail(ck, "%s step %d: a copy on stream %d, not the copy stream", dn, s, st->stream);
          if (st->src < 0 || st->src >= p->ndev || st->src == d)
            return fail(ck, "%s step %d: a copy from device %d", dn, s, st->src);
          if (inner_of(ck, st->node)) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: copies %s, which chain %d fuses: it has no value", dn, s, t,
                          ck->ch_of[st->node]);
            free(t);
            return r;
          }
          if (vfind(ck, st->node, d)) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: %s is copied to %s twice", dn, s, t, dn);
            free(t);
            return r;
          }
          ck->c[ck->nc] = (struct vcopy){.dst = d, .step = s, .src = st->src, .buf = -1, .next = ck->c_head[st->node]};
          ck->c_head[st->node] = ck->nc++;
        }
        break;
      case TFG_PLAN_ALLREDUCE: {
        if (st->stream != TFG_PLAN_STREAM_COLLECTIVE)
          return fail(ck, "%s step %d: an all-reduce on stream %d, not the collective stream", dn, s, st->stream);
        if (st->bucket < 0 || st->bucket >= p->nbuckets)
          return fail(ck, "%s step %d: bucket %d does not exist (the plan has %d)", dn, s, st->bucket, p->nbuckets);
        const tfg_plan_bucket *pb = &p->buckets[st->bucket];
        int r = rank_in(pb, d);
        if (r < 0) return fail(ck, "%s step %d: all-reduces bucket %d, whose ranks do not include %s", dn, s, st->bucket, dn);
        int slot = ck->br_base[st->bucket] + r;
        if (ck->ar_step[slot] >= 0)
          return fail(ck, "%s step %d: bucket %d is all-reduced twice on %s (first at step %d)", dn, s, st->bucket, dn,
                      ck->ar_step[slot]);
        ck->ar_step[slot] = s;
        ck->ar_seq[slot] = nseq++;
        for (int k = 0; k < pb->nnodes; k++) {
          tfg_node_id x = bnode(pb, r, k);
          ck->l_dev[x] = d;
          ck->l_step[x] = s;
          ck->l_stream[x] = TFG_PLAN_STREAM_COLLECTIVE;
        }
        break;
      }
      case TFG_PLAN_RECORD:
      case TFG_PLAN_WAIT:
        if (st->event < 0 || st->event >= p->nevents)
          return fail(ck, "%s step %d: event %d does not exist (the plan has %d)", dn, s, st->event, p->nevents);
        if (st->kind == TFG_PLAN_WAIT) {
          nwaits[st->event]++;
          break;
        }
        if (rec_dev[st->event] >= 0)
          return fail(ck, "%s step %d: event %d is recorded twice (first on %s step %d)", dn, s, st->event,
                      dev_name(p, rec_dev[st->event]), rec_step[st->event]);
        rec_dev[st->event] = d;
        rec_step[st->event] = s;
        break;
      default: return fail(ck, "%s step %d: unknown step kind %d", dn, s, (int)st->kind);
      }
    }
  }
  /* Every bucket on every rank: a rank without it leaves the others
   * waiting in the collective forever. */
  for (int b = 0; b < p->nbuckets; b++)
    for (int r = 0; r < p->buckets[b].nranks; r++)
      if (ck->ar_step[ck->br_base[b] + r] < 0)
        return fail(ck, "bucket %d is never all-reduced on %s (rank %d of %d): the other ranks would wait for it forever",
                    b, dev_name(p, p->buckets[b].devices[r]), r, p->buckets[b].nranks);
  /* One relative order on all ranks: for consecutive buckets a, b on a
   * device, every other device that is a rank of both runs a first.
   * (Orders that disagree only through a third bucket deadlock too; the
   * replay finds those.) */
  for (int d = 0; d < p->ndev; d++) {
    int prev = -1;
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind != TFG_PLAN_ALLREDUCE) continue;
      int cur = st->bucket;
      if (prev >= 0) {
        const tfg_plan_bucket *pa = &p->buckets[prev], *pc = &p->buckets[cur];
        for (int ra = 0; ra < pa->nranks; ra++) {
          int e = pa->devices[ra], rc = rank_in(pc, e);
          if (e == d || rc < 0) continue;
          if (ck->ar_seq[ck->br_base[prev] + ra] > ck->ar_seq[ck->br_base[cur] + rc])
            return fail(ck,
                        "buckets %d and %d are all-reduced in different orders: %s runs %d first, %s runs %d first "
                        "(the collectives would deadlock)",
                        prev, cur, dev_name(p, d), prev, dev_name(p, e), cur);
        }
      }
      prev = cur;
    }
  }
  /* Every op runs once, where the placer put it (an intermediate within
   * its chain's launch, which the chain's last member checks). */
  for (tfg_node_id i = 0; i < n; i++) {
    if (persistent(&ck->g->nodes[i]) || inner_of(ck, i)) continue;
    int want = tfg_placement_device(p->pl, i);
    if (ck->l_dev[i] == want) continue;
    char *t = ntext(ck, i);
    bool r = ck->l_dev[i] < 0 ? fail(ck, "%s is never launched (it is placed on %s)", t, dev_name(p, want))
                              : fail(ck, "%s is launched on %s but placed on %s", t, dev_name(p, ck->l_dev[i]),
                                     dev_name(p, want));
    free(t);
    return r;
  }
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind == TFG_PLAN_WAIT && rec_dev[st->event] < 0)
        return fail(ck, "%s step %d: waits on event %d, which is never recorded", dev_name(p, d), s, st->event);
    }
  return true;
}

/* Whether the step at time t of stream `from` happens before what stream
 * k runs next, given k's vector clock. */
static bool before(const int32_t *clock_k, int from, int32_t t) { return t > 0 && clock_k[from] >= t; }

/* The time of device d's step s on its own stream once replayed, else 0. */
static int32_t step_time(const checker *ck, int d, int s) {
  return ck->sclock[3 * ((size_t)ck->step_base[d] + (size_t)s) + (size_t)ck->p->dev[d].steps[s].stream];
}

/* Records the clock of the step just run (device d's step s) for the
 * memory checks: its view of the device's three streams. */
static void note_clock(checker *ck, int d, int s, const int32_t *clock_k) {
  int32_t *c = &ck->sclock[3 * ((size_t)ck->step_base[d] + (size_t)s)];
  for (int j = 0; j < 3; j++) c[j] = clock_k[3 * d + j];
}

/* Whether x's value, read on device d by a step whose stream has clock
 * ck_k, is there and happens before the read; else reports it (reader
 * names what reads, at device d step s). */
static bool check_read(checker *ck, int d, int s, const int32_t *ck_k, const char *reader, tfg_node_id x) {
  const tfg_plan *p = ck->p;
  const char *dn = dev_name(p, d);
  if (ck->p_dev[x] == d) return true;
  bool ok = true;
  char *t = ntext(ck, x);
  if (ck->l_dev[x] == d) {
    if (!before(ck_k, 3 * d + ck->l_stream[x], ck->l_time[x]))
      ok = fail(ck,
                "%s step %d: %s reads %s (step %d, %s stream) without waiting for it: its stream waits on no event "
                "recorded after it",
                dn, s, reader, t, ck->l_step[x], stream_name(ck->l_stream[x]));
  } else {
    struct vcopy *c = vfind(ck, x, d);
    if (!c)
      ok = fail(ck, "%s step %d: %s reads %s, which is not on %s: not computed there, not persistent there, not copied in",
                dn, s, reader, t, dn);
    else if (!before(ck_k, 3 * d + 1, c->time))
      ok = fail(ck,
                "%s step %d: %s reads the copy of %s (step %d, copy stream) without waiting for it: its stream waits "
                "on no event recorded after the copy",
                dn, s, reader, t, c->step);
  }
  free(t);
  return ok;
}

/* Replays the streams: each runs its steps in list order, a WAIT only once
 * its event is recorded, an ALLREDUCE only once every rank's collective
 * stream has reached it (then it runs on all of them at once, and each
 * rank's clock joins the others'). Vector clocks give the happens-before
 * order, in which every read must follow the step that produced the
 * value. Notes each step's clock, and each ALLREDUCE's release: the first
 * compute step of its device ordered after it. */
static bool replay(checker *ck, const int *nwaits) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int S = ck->nstreams;
  int32_t *clock = calloc((size_t)S * (size_t)S, sizeof *clock);
  int32_t **ev = calloc((size_t)p->nevents + 1, sizeof *ev); /* an event's clock, while waits remain */
  int *waits_left = malloc(sizeof *waits_left * ((size_t)p->nevents + 1));
  bool *recorded = calloc((size_t)p->nevents + 1, sizeof *recorded);
  int *pos = calloc((size_t)S, sizeof *pos); /* next step index in the device's list, per stream */
  int *narrived = calloc((size_t)p->nbuckets + 1, sizeof *narrived);
  int nslots = p->nbuckets ? ck->br_base[p->nbuckets - 1] + p->buckets[p->nbuckets - 1].nranks : 0;
  bool *arrived = calloc((size_t)nslots + 1, sizeof *arrived);
  int *rel_pos = calloc((size_t)p->ndev + 1, sizeof *rel_pos); /* per device: the next ALLREDUCE to release */
  int32_t *join = malloc(sizeof *join * (size_t)S);
  TFG_ASSERT(clock && ev && waits_left && recorded && pos && narrived && arrived && rel_pos && join);
  memcpy(waits_left, nwaits, sizeof *waits_left * (size_t)p->nevents);
  bool ok = true, progress = true;
  while (ok && progress) {
    progress = false;
    for (int k = 0; k < S && ok; k++) {
      int d = k / 3, stream = k % 3;
      const tfg_plan_device *pd = &p->dev[d];
      int32_t *ck_k = &clock[(size_t)k * (size_t)S];
      for (;;) {
        while (pos[k] < pd->nsteps && pd->steps[pos[k]].stream != stream) pos[k]++;
        if (pos[k] >= pd->nsteps) break;
        int s = pos[k];
        const tfg_plan_step *st = &pd->steps[s];
        const char *dn = dev_name(p, d);
        if (st->kind == TFG_PLAN_WAIT && !recorded[st->event]) break;
        if (st->kind == TFG_PLAN_ALLREDUCE) {
          const tfg_plan_bucket *pb = &p->buckets[st->bucket];
          int r = rank_in(pb, d), slot = ck->br_base[st->bucket] + r;
          if (!arrived[slot]) {
            /* its reads happen before it, on this rank's own clock */
            char reader[64];
            snprintf(reader, sizeof reader, "bucket %d's all-reduce", st->bucket);
            for (int j = 0; j < pb->nnodes && ok; j++)
              ok = check_read(ck, d, s, ck_k, reader, g->nodes[bnode(pb, r, j)].inputs[0]);
            if (!ok) break;
            arrived[slot] = true;
            narrived[st->bucket]++;
            progress = true;
          }
          if (narrived[st->bucket] < pb->nranks) break;
          /* the last rank is here: it runs everywhere */
          for (int j = 0; j < S; j++) join[j] = 0;
          for (int q = 0; q < pb->nranks; q++) {
            const int32_t *c = &clock[(size_t)(3 * pb->devices[q] + 2) * (size_t)S];
            for (int j = 0; j < S; j++)
              if (c[j] > join[j]) join[j] = c[j];
          }
          for (int q = 0; q < pb->nranks; q++) {
            int e = pb->devices[q], kq = 3 * e + 2, sq = ck->ar_step[ck->br_base[st->bucket] + q];
            int32_t *c = &clock[(size_t)kq * (size_t)S];
            memcpy(c, join, sizeof *c * (size_t)S);
            int32_t now = ++c[kq];
            for (int j = 0; j < pb->nnodes; j++) ck->l_time[bnode(pb, q, j)] = now;
            note_clock(ck, e, sq, c);
            TFG_ASSERT(pos[kq] == sq);
            pos[kq] = sq + 1;
          }
          narrived[st->bucket] = -1; /* ran */
          progress = true;
          continue;
        }
        progress = true;
        pos[k]++;
        int32_t now = ++ck_k[k];
        if (st->kind == TFG_PLAN_RECORD) {
          recorded[st->event] = true;
          if (waits_left[st->event] > 0) {
            ev[st->event] = malloc(sizeof **ev * (size_t)S);
            TFG_ASSERT(ev[st->event]);
            memcpy(ev[st->event], ck_k, sizeof **ev * (size_t)S);
          }
        } else if (st->kind == TFG_PLAN_WAIT) {
          const int32_t *e = ev[st->event];
          for (int j = 0; j < S; j++)
            if (e[j] > ck_k[j]) ck_k[j] = e[j];
          if (--waits_left[st->event] == 0) {
            free(ev[st->event]);
            ev[st->event] = NULL;
          }
          /* the compute stream may now be past ALLREDUCEs of its device */
          while (stream == TFG_PLAN_STREAM_COMPUTE) {
            while (rel_pos[d] < pd->nsteps && pd->steps[rel_pos[d]].kind != TFG_PLAN_ALLREDUCE) rel_pos[d]++;
            if (rel_pos[d] >= pd->nsteps || !before(ck_k, 3 * d + 2, step_time(ck, d, rel_pos[d]))) break;
            ck->release[ck->step_base[d] + rel_pos[d]++] = s;
          }
        } else if (st->kind == TFG_PLAN_COPY) {
          tfg_node_id x = st->node;
          struct vcopy *c = vfind(ck, x, d);
          c->time = now;
          note_clock(ck, d, s, ck_k);
          if (ck->p_dev[x] == st->src) continue;
          char *t = ntext(ck, x);
          if (ck->l_dev[x] != st->src)
            ok = fail(ck, "%s step %d: copies %s from %s, which neither computes it nor holds it", dn, s, t,
                      dev_name(p, st->src));
          else if (!before(ck_k, 3 * st->src + ck->l_stream[x], ck->l_time[x]))
            ok = fail(ck,
                      "%s step %d: copies %s before %s has computed it (step %d): the copy stream waits on no event "
                      "recorded after it",
                      dn, s, t, dev_name(p, st->src), ck->l_step[x]);
          free(t);
          if (!ok) break;
        } else { /* LAUNCH */
          int nin;
          const tfg_node_id *ins = tfg_plan_step_inputs(p, st, &nin);
          ck->l_time[st->node] = now;
          char *a = ntext(ck, st->node);
          for (int j = 0; j < nin && ok; j++) {
            tfg_node_id x = ins[j];
            if (ck->l_dev[x] == d && ck->l_stream[x] == TFG_PLAN_STREAM_COMPUTE && ck->l_step[x] >= s) {
              char *t = ntext(ck, x);
              ok = fail(ck, "%s step %d: %s reads %s, which is computed only later (step %d)", dn, s, a, t,
                        ck->l_step[x]);
              free(t);
            } else {
              ok = check_read(ck, d, s, ck_k, a, x);
            }
          }
          /* an update overwrites its param and state in place: after
           * every copy of them to another device */
          if (ok && st->chain < 0 && in_place(g->nodes[st->node].op)) {
            const tfg_node *u = &g->nodes[st->node];
            for (int j = 0; j < u->ninputs && ok; j++) {
              if (j == 1) continue; /* the gradient */
              for (int q = ck->c_head[u->inputs[j]]; q >= 0 && ok; q = ck->c[q].next) {
                const struct vcopy *c = &ck->c[q];
                if (before(ck_k, 3 * c->dst + 1, c->time)) continue;
                char *t = ntext(ck, u->inputs[j]);
                ok = fail(ck,
                          "%s step %d: %s overwrites %s, which %s copies (its step %d), and nothing orders the copy "
                          "before it",
                          dn, s, a, t, dev_name(p, c->dst), c->step);
                free(t);
              }
            }
          }
          free(a);
          if (!ok) break;
        }
        note_clock(ck, d, s, ck_k);
      }
    }
  }
  /* Streams left with steps: each is stuck on a WAIT whose RECORD never
   * comes before it (waits that wait on each other), or on an ALLREDUCE
   * some rank never reaches. A stuck collective is named first: the
   * WAITs stuck behind it are its consequence. */
  for (int pass = 0; pass < 2 && ok; pass++)
    for (int k = 0; k < S && ok; k++) {
      const tfg_plan_device *pd = &p->dev[k / 3];
      if (pos[k] >= pd->nsteps) continue;
      const tfg_plan_step *st = &pd->steps[pos[k]];
      if (pass == 0 && st->kind == TFG_PLAN_ALLREDUCE)
        ok = fail(ck,
                  "%s step %d: bucket %d's all-reduce can never run: not every rank reaches it (buckets in different "
                  "orders, or a cycle of waits)",
                  dev_name(p, k / 3), pos[k], st->bucket);
      else if (pass == 1)
        ok = fail(ck, "%s step %d: waits on event %d, which can never be recorded before it (a cycle of waits)",
                  dev_name(p, k / 3), pos[k], st->event);
    }
  for (int e = 0; e < p->nevents; e++) free(ev[e]);
  free(clock);
  free(ev);
  free(waits_left);
  free(recorded);
  free(pos);
  free(narrived);
  free(arrived);
  free(rel_pos);
  free(join);
  return ok;
}

/* Buffers well formed, each the value of a step of its device, at most
 * one per tensor per device (fills the own and copy buffer tables). */
static bool check_buffers(checker *ck, int d) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  const tfg_plan_device *pd = &p->dev[d];
  const char *dn = dev_name(p, d);
  int64_t capacity = tfg_devices_at(p->ds, d)->memory;
  bool ok = true;
  for (int i = 0; i < pd->nbuffers && ok; i++) {
    const tfg_plan_buffer *bf = &pd->buffers[i];
    if (bf->node < 0 || bf->node >= g->nnodes) return fail(ck, "%s buffer %d: node %d does not exist", dn, i, (int)bf->node);
    char *t = ntext(ck, bf->node);
    if (inner_of(ck, bf->node))
      ok = fail(ck, "%s: %s has a buffer, but chain %d fuses it: it has no value", dn, t, ck->ch_of[bf->node]);
    else if (bf->bytes <= 0 || bf->offset < 0 || bf->offset % ALIGN)
      ok = fail(ck, "%s: the buffer of %s has offset %" PRId64 " and %" PRId64 " bytes (offsets are multiples of %d)", dn,
                t, bf->offset, bf->bytes, ALIGN);
    else if (bf->bytes != bytes_of(&g->nodes[bf->node]))
      ok = fail(ck, "%s: the buffer of %s has %" PRId64 " bytes; the tensor has %" PRId64, dn, t, bf->bytes,
                bytes_of(&g->nodes[bf->node]));
    else if (bf->persistent &&
             (bf->copy || !persistent(&g->nodes[bf->node]) || bf->offset + bf->bytes > pd->persistent_bytes))
      ok = fail(ck, "%s: the persistent buffer of %s is not a param or state in [0, %" PRId64 ")", dn, t,
                pd->persistent_bytes);
    else if (!bf->persistent && bf->offset < pd->persistent_bytes)
      ok = fail(ck, "%s: the buffer of %s is at %" PRId64 ", inside the persistent region [0, %" PRId64 ")", dn, t,
                bf->offset, pd->persistent_bytes);
    else if (!bf->persistent && (bf->first < 0 || bf->first > bf->last || bf->last >= pd->nsteps))
      ok = fail(ck, "%s: the buffer of %s lives at steps %d-%d, outside the %d steps", dn, t, bf->first, bf->last,
                pd->nsteps);
    else if (bf->offset + bf->bytes > capacity) {
      tfg_strbuf c = {0};
      tfg_size_format(&c, capacity);
      ok = fail(ck, "%s: the buffer of %s ends at %" PRId64 ", past the device's %s", dn, t, bf->offset + bf->bytes,
                c.data);
      tfg_strbuf_free(&c);
    } else if (!bf->persistent) {
      /* its first step writes it; a tensor has one buffer per device */
      const tfg_plan_step *w = &pd->steps[bf->first];
      bool reduced = !bf->copy && ck->b_of[bf->node] >= 0;
      bool writes = bf->copy  ? w->kind == TFG_PLAN_COPY && w->node == bf->node
                    : reduced ? w->kind == TFG_PLAN_ALLREDUCE && ck->l_dev[bf->node] == d && ck->l_step[bf->node] == bf->first
                              : w->kind == TFG_PLAN_LAUNCH && w->node == bf->node;
      if (!writes) {
        ok = fail(ck, "%s: the buffer of %s starts at step %d, which does not %s it", dn, t, bf->first,
                  bf->copy ? "copy" : reduced ? "all-reduce" : "compute");
      } else {
        /* the step exists, so check_steps listed it */
        int *slot = bf->copy ? &vfind(ck, bf->node, d)->buf : &ck->own_buf[bf->node];
        if (*slot >= 0) ok = fail(ck, "%s: %s has two buffers on %s (%d and %d)", dn, t, dn, *slot, i);
        else *slot = i;
      }
    }
    free(t);
  }
  return ok;
}

/* The buffer index of x's value on device d (own, copy, or -1 for a
 * persistent or empty one). */
static int vbuf(const checker *ck, tfg_node_id x, int d) {
  if (ck->p_dev[x] == d) return -1;
  if (ck->l_dev[x] == d) return ck->own_buf[x];
  const struct vcopy *c = vfind(ck, x, d);
  return c ? c->buf : -1;
}

/* Checks that buffer bi of device d, read at step s by `reader`, is live
 * there. */
static bool check_live(checker *ck, int d, int s, int bi, const char *reader, tfg_node_id x) {
  const tfg_plan_buffer *bf = &ck->p->dev[d].buffers[bi];
  if (s >= bf->first && s <= bf->last) return true;
  char *t = ntext(ck, x);
  fail(ck, "%s step %d: %s reads %s%s, whose buffer lives only at steps %d-%d", dev_name(ck->p, d), s, reader,
       bf->copy ? "the copy of " : "", t, bf->first, bf->last);
  free(t);
  return false;
}

/* The rule for concurrent streams (plan.h), on device d: a sweep over
 * the buffers in write order keeps, per byte, the latest buffer placed
 * there (disjoint intervals in a treap keyed by start); each buffer's
 * predecessors are the buffers its bytes held last. Every access to a
 * predecessor (its last on each of the device's streams) must happen
 * before the step that writes the new buffer. Latest holders suffice:
 * an older holder's accesses happen before the next holder's write,
 * which happens before that holder's last access. The persistent
 * buffers never move and are not in the sweep. */
static bool check_reuse(checker *ck, int d, const int *by_first, int np, int nt) {
  const tfg_plan *p = ck->p;
  const tfg_plan_device *pd = &p->dev[d];
  int nb = pd->nbuffers;
  int *acc = malloc(sizeof *acc * (3 * (size_t)nb + 1)); /* per buffer and stream: the last step accessing it */
  TFG_ASSERT(acc != NULL);
  for (int i = 0; i < 3 * nb; i++) acc[i] = -1;
#define TOUCH(bi, s)                                                   \
  do {                                                                 \
    int b_ = (bi);                                                     \
    if (b_ >= 0) acc[3 * b_ + pd->steps[s].stream] = (s);              \
  } while (0)
  for (int s = 0; s < pd->nsteps; s++) {
    const tfg_plan_step *st = &pd->steps[s];
    if (st->kind == TFG_PLAN_LAUNCH) {
      TOUCH(ck->own_buf[st->node], s);
      int nin;
      const tfg_node_id *ins = tfg_plan_step_inputs(p, st, &nin);
      for (int j = 0; j < nin; j++) TOUCH(vbuf(ck, ins[j], d), s);
    } else if (st->kind == TFG_PLAN_COPY) {
      TOUCH(vfind(ck, st->node, d)->buf, s);
    } else if (st->kind == TFG_PLAN_ALLREDUCE) {
      const tfg_plan_bucket *pb = &p->buckets[st->bucket];
      int r = rank_in(pb, d);
      for (int j = 0; j < pb->nnodes; j++) {
        TOUCH(ck->own_buf[bnode(pb, r, j)], s);
        TOUCH(vbuf(ck, ck->g->nodes[bnode(pb, r, j)].inputs[0], d), s);
      }
    }
  }
#undef TOUCH
  /* intervals [ka, hi) held by owner; at most two new per buffer */
  treap held;
  treap_init(&held, 2 * nb + 2);
  int64_t *hi = malloc(sizeof *hi * (2 * (size_t)nb + 2));
  int *owner = malloc(sizeof *owner * (2 * (size_t)nb + 2));
  int *pred = malloc(sizeof *pred * (2 * (size_t)nb + 2));
  TFG_ASSERT(hi && owner && pred);
  int nodes = 0;
  bool ok = true;
  for (int k = np; k < np + nt && ok; k++) {
    int bi = by_first[k];
    const tfg_plan_buffer *bf = &pd->buffers[bi];
    int64_t lo = bf->offset, end = bf->offset + bf->bytes;
    int npred = 0;
    int x = treap_floor_below(&held, lo, INT64_MAX); /* the interval starting at or below lo */
    if (x >= 0 && hi[x] > lo) {
      pred[npred++] = owner[x];
      if (hi[x] > end) { /* it covers the new one: keep its tail */
        hi[nodes] = hi[x];
        owner[nodes] = owner[x];
        treap_insert(&held, nodes, end, nodes);
        nodes++;
      }
      if (held.ka[x] < lo) hi[x] = lo;
      else treap_erase(&held, x);
    }
    for (int y; (y = treap_ceil(&held, lo, INT64_MIN)) >= 0 && held.ka[y] < end;) {
      pred[npred++] = owner[y];
      treap_erase(&held, y);
      if (hi[y] > end) {
        hi[nodes] = hi[y];
        owner[nodes] = owner[y];
        treap_insert(&held, nodes, end, nodes);
        nodes++;
      }
    }
    hi[nodes] = end;
    owner[nodes] = bi;
    treap_insert(&held, nodes, lo, nodes);
    nodes++;
    TFG_ASSERT(nodes <= 2 * nb + 2 && npred <= 2 * nb + 2);
    int w = bf->first;
    for (int q = 0; q < npred && ok; q++) {
      const tfg_plan_buffer *o = &pd->buffers[pred[q]];
      if (o->last >= w) continue; /* live at once: check_memory's overlap */
      for (int j = 0; j < 3 && ok; j++) {
        int a = acc[3 * pred[q] + j];
        if (a < 0) continue;
        int32_t ta = step_time(ck, d, a), seen = ck->sclock[3 * ((size_t)ck->step_base[d] + (size_t)w) + (size_t)j];
        if (ta > 0 && seen >= ta) continue;
        char *t = ntext(ck, bf->node), *u = ntext(ck, o->node);
        ok = fail(ck,
                  "%s step %d (%s stream) writes %s%s into [%" PRId64 ", %" PRId64 "), memory that step %d (%s stream) "
                  "uses for %s%s, and nothing orders that step before the write (the streams run concurrently)",
                  dev_name(p, d), w, stream_name(pd->steps[w].stream), bf->copy ? "the copy of " : "", t, lo, end, a,
                  stream_name(j), o->copy ? "the copy of " : "", u);
        free(t);
        free(u);
      }
    }
  }
  treap_free(&held);
  free(hi);
  free(owner);
  free(pred);
  free(acc);
  return ok;
}

/* Memory of device d: every value has its buffer, live at every step
 * that reads it; a bucket's gradients live until the compute stream is
 * ordered after its ALLREDUCE; no two buffers live at once overlap,
 * found by a sweep over the steps with the live buffers kept in offset
 * order (while the set has no overlap, a new buffer overlapping any
 * overlaps one of its two neighbours in that order); memory reused
 * across streams is ordered (check_reuse); the peak is the highest
 * end. */
static bool check_memory(checker *ck, int d) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  const tfg_plan_device *pd = &p->dev[d];
  const char *dn = dev_name(p, d);
  int nb = pd->nbuffers;
  int64_t capacity = tfg_devices_at(p->ds, d)->memory;
  int64_t end = 0;
  bool ok = true;
  for (int i = 0; i < nb; i++)
    if (pd->buffers[i].offset + pd->buffers[i].bytes > end) end = pd->buffers[i].offset + pd->buffers[i].bytes;

  /* Every step's value has its buffer, live at the step; a tensor sent
   * elsewhere lives to the end of the list (see tfg_plan_build). */
  for (int s = 0; s < pd->nsteps; s++) {
    const tfg_plan_step *st = &pd->steps[s];
    if (st->kind == TFG_PLAN_LAUNCH || st->kind == TFG_PLAN_COPY) {
      int bi = st->kind == TFG_PLAN_LAUNCH ? ck->own_buf[st->node] : vfind(ck, st->node, d)->buf;
      if (bi < 0 && bytes_of(&g->nodes[st->node]) > 0) {
        char *t = ntext(ck, st->node);
        fail(ck, "%s step %d: %s has no buffer", dn, s, t);
        free(t);
        return false;
      }
    }
    if (st->kind == TFG_PLAN_COPY && ck->p_dev[st->node] != st->src && bytes_of(&g->nodes[st->node]) > 0) {
      int src = st->src;
      int bi = ck->own_buf[st->node];
      const tfg_plan_device *ps = &p->dev[src];
      if (bi >= 0 && ps->buffers[bi].last != ps->nsteps - 1) {
        char *t = ntext(ck, st->node);
        fail(ck, "%s: the buffer of %s is freed after step %d, but %s copies it: a tensor sent elsewhere lives to the end",
             dev_name(p, src), t, ps->buffers[bi].last, dn);
        free(t);
        return false;
      }
    }
    if (st->kind == TFG_PLAN_ALLREDUCE) {
      const tfg_plan_bucket *pb = &p->buckets[st->bucket];
      int r = rank_in(pb, d), rel = ck->release[ck->step_base[d] + s];
      char reader[64];
      snprintf(reader, sizeof reader, "bucket %d's all-reduce", st->bucket);
      for (int j = 0; j < pb->nnodes; j++) {
        tfg_node_id x = bnode(pb, r, j), y = g->nodes[x].inputs[0];
        if (ck->own_buf[x] < 0 && bytes_of(&g->nodes[x]) > 0) {
          char *t = ntext(ck, x);
          fail(ck, "%s step %d: %s has no buffer", dn, s, t);
          free(t);
          return false;
        }
        int bi = vbuf(ck, y, d);
        if (bi < 0 || bytes_of(&g->nodes[y]) == 0) continue;
        if (!check_live(ck, d, s, bi, reader, y)) return false;
        const tfg_plan_buffer *bf = &pd->buffers[bi];
        if (bf->last == pd->nsteps - 1 || (rel >= 0 && bf->last >= rel)) continue;
        char *t = ntext(ck, y);
        if (rel >= 0)
          fail(ck,
               "%s: the buffer of %s%s is freed after step %d, but %s (step %d, collective stream) reads it and the "
               "compute stream is ordered after that only at step %d",
               dn, bf->copy ? "the copy of " : "", t, bf->last, reader, s, rel);
        else
          fail(ck,
               "%s: the buffer of %s%s is freed after step %d, but %s (step %d, collective stream) reads it and no "
               "compute step is ordered after that: it lives to the end",
               dn, bf->copy ? "the copy of " : "", t, bf->last, reader, s);
        free(t);
        return false;
      }
    }
    if (st->kind != TFG_PLAN_LAUNCH) continue;
    int nin;
    const tfg_node_id *ins = tfg_plan_step_inputs(p, st, &nin);
    char *a = NULL;
    for (int j = 0; j < nin && ok; j++) {
      tfg_node_id x = ins[j];
      if (ck->p_dev[x] == d || bytes_of(&g->nodes[x]) == 0) continue;
      int bi = vbuf(ck, x, d);
      if (bi < 0) continue; /* reported as that value's step */
      if (!a) a = ntext(ck, st->node);
      ok = check_live(ck, d, s, bi, a, x);
    }
    free(a);
    if (!ok) return false;
  }

  /* Overlaps: persistent buffers live throughout; the others enter at
   * their first step and leave after their last. */
  int *by_first = malloc(sizeof *by_first * ((size_t)nb + 1));
  int *by_last = malloc(sizeof *by_last * ((size_t)nb + 1));
  int *cnt = calloc((size_t)pd->nsteps + 1, sizeof *cnt);
  int *cnt2 = calloc((size_t)pd->nsteps + 1, sizeof *cnt2);
  TFG_ASSERT(by_first && by_last && cnt && cnt2);
  int np = 0, nt = 0;
  for (int i = 0; i < nb; i++)
    if (pd->buffers[i].persistent) by_first[np++] = i; /* persistent ones lead, in order */
  /* counting sort of the others by first step and by last step */
  for (int i = 0; i < nb; i++)
    if (!pd->buffers[i].persistent) {
      cnt[pd->buffers[i].first + 1]++;
      cnt2[pd->buffers[i].last + 1]++;
      nt++;
    }
  for (int s = 0; s < pd->nsteps; s++) {
    cnt[s + 1] += cnt[s];
    cnt2[s + 1] += cnt2[s];
  }
  for (int i = 0; i < nb; i++)
    if (!pd->buffers[i].persistent) {
      by_first[np + cnt[pd->buffers[i].first]++] = i;
      by_last[cnt2[pd->buffers[i].last]++] = i;
    }
  treap live; /* keyed by (offset, buffer): a buffer's neighbours in offset order */
  treap_init(&live, nb);
  int out_i = 0;
  for (int k = 0; k < np + nt && ok; k++) {
    int bi = by_first[k];
    const tfg_plan_buffer *bf = &pd->buffers[bi];
    if (!bf->persistent)
      for (; out_i < nt && pd->buffers[by_last[out_i]].last < bf->first; out_i++) treap_erase(&live, by_last[out_i]);
    int other = treap_floor_below(&live, bf->offset, INT64_MIN);
    if (other < 0 || pd->buffers[other].offset + pd->buffers[other].bytes <= bf->offset) {
      other = treap_ceil(&live, bf->offset, INT64_MIN);
      if (other >= 0 && pd->buffers[other].offset >= bf->offset + bf->bytes) other = -1;
    }
    if (other >= 0) {
      const tfg_plan_buffer *o = &pd->buffers[other];
      char *a = ntext(ck, o->node), *t = ntext(ck, bf->node);
      ok = fail(ck,
                "%s: the buffers of %s [%" PRId64 ", %" PRId64 ") and %s [%" PRId64 ", %" PRId64
                ") overlap while both are live (from step %d)",
                dn, a, o->offset, o->offset + o->bytes, t, bf->offset, bf->offset + bf->bytes, bf->persistent ? 0 : bf->first);
      free(a);
      free(t);
      break;
    }
    treap_insert(&live, bi, bf->offset, bi);
  }
  treap_free(&live);
  ok = ok && check_reuse(ck, d, by_first, np, nt);
  free(by_first);
  free(by_last);
  free(cnt);
  free(cnt2);
  if (!ok) return false;

  if (pd->peak != end)
    return fail(ck, "%s: the peak is %" PRId64 " bytes but the highest buffer end is %" PRId64, dn, pd->peak, end);
  if (pd->peak > capacity) {
    tfg_strbuf c = {0};
    tfg_size_format(&c, capacity);
    fail(ck, "%s: the peak of %" PRId64 " bytes exceeds the device's %s", dn, pd->peak, c.data);
    tfg_strbuf_free(&c);
    return false;
  }
  return true;
}

bool tfg_plan_validate(const tfg_plan *p, tfg_strbuf *why) {
  const tfg_graph *g = p->g;
  int32_t n = g->nnodes;
  checker ck = {.p = p, .g = g, .why = why, .nstreams = 3 * p->ndev};
  int ncopy = 0, nsteps = 0, nslots = 0;
  for (int d = 0; d < p->ndev; d++) {
    nsteps += p->dev[d].nsteps;
    for (int s = 0; s < p->dev[d].nsteps; s++) ncopy += p->dev[d].steps[s].kind == TFG_PLAN_COPY;
  }
  for (int b = 0; b < p->nbuckets; b++) nslots += p->buckets[b].nranks > 0 ? p->buckets[b].nranks : 0;
  ck.l_dev = malloc(sizeof *ck.l_dev * ((size_t)n + 1));
  ck.l_step = malloc(sizeof *ck.l_step * ((size_t)n + 1));
  ck.l_stream = calloc((size_t)n + 1, sizeof *ck.l_stream);
  ck.l_time = calloc((size_t)n + 1, sizeof *ck.l_time);
  ck.p_dev = malloc(sizeof *ck.p_dev * ((size_t)n + 1));
  ck.c_head = malloc(sizeof *ck.c_head * ((size_t)n + 1));
  ck.own_buf = malloc(sizeof *ck.own_buf * ((size_t)n + 1));
  ck.c = calloc((size_t)ncopy + 1, sizeof *ck.c);
  ck.b_of = malloc(sizeof *ck.b_of * ((size_t)n + 1));
  ck.r_of = malloc(sizeof *ck.r_of * ((size_t)n + 1));
  ck.br_base = calloc((size_t)(p->nbuckets > 0 ? p->nbuckets : 0) + 1, sizeof *ck.br_base);
  ck.ar_step = malloc(sizeof *ck.ar_step * ((size_t)nslots + 1));
  ck.ar_seq = calloc((size_t)nslots + 1, sizeof *ck.ar_seq);
  ck.step_base = malloc(sizeof *ck.step_base * ((size_t)p->ndev + 1));
  ck.sclock = calloc(3 * (size_t)nsteps + 1, sizeof *ck.sclock);
  ck.release = malloc(sizeof *ck.release * ((size_t)nsteps + 1));
  ck.ch_of = malloc(sizeof *ck.ch_of * ((size_t)n + 1));
  int *rec_dev = malloc(sizeof *rec_dev * ((size_t)p->nevents + 1));
  int *rec_step = malloc(sizeof *rec_step * ((size_t)p->nevents + 1));
  int *nwaits = calloc((size_t)p->nevents + 1, sizeof *nwaits);
  TFG_ASSERT(ck.l_dev && ck.l_step && ck.l_stream && ck.l_time && ck.p_dev && ck.c_head && ck.own_buf && ck.c &&
             ck.b_of && ck.r_of && ck.br_base && ck.ar_step && ck.ar_seq && ck.step_base && ck.sclock && ck.release &&
             ck.ch_of && rec_dev && rec_step && nwaits);
  for (int32_t i = 0; i < n; i++)
    ck.l_dev[i] = ck.l_step[i] = ck.p_dev[i] = ck.c_head[i] = ck.own_buf[i] = ck.b_of[i] = ck.r_of[i] = ck.ch_of[i] = -1;
  for (int e = 0; e < p->nevents; e++) rec_dev[e] = rec_step[e] = -1;
  for (int i = 0; i < nslots; i++) ck.ar_step[i] = -1;
  for (int i = 0; i < nsteps; i++) ck.release[i] = -1;
  for (int d = 0, at = 0; d < p->ndev; at += p->dev[d++].nsteps) ck.step_base[d] = at;
  /* Persistent buffers say where params and state live. */
  bool ok = true;
  for (int d = 0; d < p->ndev && ok; d++)
    for (int i = 0; i < p->dev[d].nbuffers && ok; i++) {
      const tfg_plan_buffer *bf = &p->dev[d].buffers[i];
      if (!bf->persistent || bf->node < 0 || bf->node >= n) continue;
      if (ck.p_dev[bf->node] >= 0) {
        char *t = ntext(&ck, bf->node);
        ok = fail(&ck, "%s: %s already has a persistent buffer on %s", dev_name(p, d), t, dev_name(p, ck.p_dev[bf->node]));
        free(t);
      }
      ck.p_dev[bf->node] = d;
    }
  ok = ok && check_buckets(&ck);
  ok = ok && check_chains(&ck);
  tfg_node_id *last_launch = malloc(sizeof *last_launch * ((size_t)p->ndev + 1));
  TFG_ASSERT(last_launch);
  ok = ok && check_steps(&ck, rec_dev, rec_step, nwaits, last_launch);
  free(last_launch);
  ok = ok && replay(&ck, nwaits);
  /* Every event is one RECORD and at least one WAIT: a RECORD nobody
   * waits on is a dependency the builder lost. */
  for (int e = 0; e < p->nevents && ok; e++) {
    if (rec_dev[e] < 0) ok = fail(&ck, "event %d is never recorded", e);
    else if (nwaits[e] == 0)
      ok = fail(&ck, "event %d (recorded on %s step %d) is never waited on", e, dev_name(p, rec_dev[e]), rec_step[e]);
  }
  for (int d = 0; d < p->ndev && ok; d++) ok = check_buffers(&ck, d);
  for (int d = 0; d < p->ndev && ok; d++) ok = check_memory(&ck, d);
  free(ck.l_dev);
  free(ck.l_step);
  free(ck.l_stream);
  free(ck.l_time);
  free(ck.p_dev);
  free(ck.c_head);
  free(ck.own_buf);
  free(ck.c);
  free(ck.b_of);
  free(ck.r_of);
  free(ck.br_base);
  free(ck.ar_step);
  free(ck.ar_seq);
  free(ck.step_base);
  free(ck.sclock);
  free(ck.release);
  free(ck.ch_of);
  free(rec_dev);
  free(rec_step);
  free(nwaits);
  return ok;
}

/* ---- print ---------------------------------------------------------------------------- */

static const char *const kind_names[] = {"launch", "copy", "record", "wait", "allreduce"};

/* "3 tensors, 1.5 MiB, ranks gpu:0 gpu:1" */
static void bucket_text(const tfg_plan *p, int b, tfg_strbuf *out) {
  const tfg_plan_bucket *pb = &p->buckets[b];
  tfg_strbuf_printf(out, "%d tensor%s, ", pb->nnodes, pb->nnodes == 1 ? "" : "s");
  tfg_size_format(out, pb->bytes);
  tfg_strbuf_puts(out, ", ranks");
  for (int r = 0; r < pb->nranks; r++)
    tfg_strbuf_printf(out, " %s", pb->devices[r] >= 0 && pb->devices[r] < p->ndev ? dev_name(p, pb->devices[r]) : "?");
}

/* Member e of chain c as the expression of its ops: "relu(add(mul))",
 * each op with the members it reads (its other inputs are the chain's). */
static void chain_expr(const tfg_plan *p, const tfg_plan_chain *c, int e, tfg_strbuf *out) {
  const tfg_node *nd = &p->g->nodes[c->nodes[e]];
  tfg_strbuf_puts(out, tfg_op_get(nd->op)->name);
  int nargs = 0;
  for (int k = 0; k < nd->ninputs; k++) {
    if (k > 0 && nd->inputs[k] == nd->inputs[0]) continue; /* x * x: once */
    for (int f = e - 1; f >= 0; f--)
      if (c->nodes[f] == nd->inputs[k]) {
        tfg_strbuf_puts(out, nargs++ ? ", " : "(");
        chain_expr(p, c, f, out);
        break;
      }
  }
  if (nargs) tfg_strbuf_putc(out, ')');
}

/* "fused relu(add(mul)) n12 (t.tfg:3), members n10 n11 n12" */
static void chain_text(const tfg_plan *p, int ci, tfg_strbuf *out) {
  const tfg_plan_chain *c = &p->chains[ci];
  const tfg_node *last = &p->g->nodes[c->nodes[c->nnodes - 1]];
  tfg_strbuf_puts(out, "fused ");
  chain_expr(p, c, c->nnodes - 1, out);
  tfg_strbuf_printf(out, " n%d", (int)c->nodes[c->nnodes - 1]);
  if (last->loc.src) tfg_strbuf_printf(out, " (%s:%u)", base_name(last->loc.src->name), last->loc.line);
  tfg_strbuf_puts(out, ", members");
  for (int e = 0; e < c->nnodes; e++) tfg_strbuf_printf(out, " n%d", (int)c->nodes[e]);
}

bool tfg_plan_capturable(const tfg_plan *p, const uint8_t *captured, tfg_strbuf *why) {
  int *rec = malloc(sizeof *rec * ((size_t)p->nevents + 1));
  TFG_ASSERT(rec != NULL);
  for (int e = 0; e < p->nevents; e++) rec[e] = -1;
  for (int d = 0; d < p->ndev; d++)
    for (int k = 0; k < p->dev[d].nsteps; k++)
      if (p->dev[d].steps[k].kind == TFG_PLAN_RECORD) rec[p->dev[d].steps[k].event] = d;
  bool ok = true;
  for (int d = 0; d < p->ndev && ok; d++) {
    if (captured[d]) continue;
    for (int k = 0; k < p->dev[d].nsteps && ok; k++) {
      const tfg_plan_step *st = &p->dev[d].steps[k];
      int from = st->kind == TFG_PLAN_WAIT ? rec[st->event] : st->kind == TFG_PLAN_COPY ? st->src : -1;
      if (from < 0 || !captured[from]) continue;
      tfg_strbuf_printf(why, "%s %s %s (its step %d)", dev_name(p, d),
                        st->kind == TFG_PLAN_WAIT ? "waits for" : "copies from", dev_name(p, from), k);
      ok = false;
    }
  }
  for (int b = 0; b < p->nbuckets && ok; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    for (int r = 1; r < pb->nranks && ok; r++)
      if (!captured[pb->devices[r]] != !captured[pb->devices[0]]) {
        tfg_strbuf_printf(why, "bucket %d all-reduces over %s and %s", b, dev_name(p, pb->devices[0]),
                          dev_name(p, pb->devices[r]));
        ok = false;
      }
  }
  free(rec);
  return ok;
}

/* The line under the header of a plan with GPUs: whether its runs can be
 * captured as CUDA graphs, over which devices, fed by which. */
static void print_graphs(const tfg_plan *p, tfg_strbuf *out) {
  uint8_t *gpu = calloc((size_t)p->ndev + 1, 1);
  TFG_ASSERT(gpu != NULL);
  int ngpu = 0;
  for (int d = 0; d < p->ndev; d++) {
    tfg_device_kind k = tfg_devices_at(p->ds, d)->kind;
    gpu[d] = (k == TFG_DEVICE_CUDA || k == TFG_DEVICE_SIM) && (p->dev[d].nsteps > 0 || p->dev[d].nbuffers > 0);
    ngpu += gpu[d];
  }
  if (ngpu > 0) {
    tfg_strbuf why = {0};
    if (tfg_plan_capturable(p, gpu, &why)) {
      tfg_strbuf_puts(out, "graphs: runs seen before can be replayed as CUDA graphs on ");
      for (int d = 0, n = 0; d < p->ndev; d++)
        if (gpu[d]) tfg_strbuf_printf(out, "%s%s", n++ ? ", " : "", dev_name(p, d));
      int nfeed = 0;
      for (int d = 0; d < p->ndev; d++)
        if (!gpu[d] && p->dev[d].nsteps > 0) tfg_strbuf_printf(out, "%s%s", nfeed++ ? ", " : " (first: ", dev_name(p, d));
      tfg_strbuf_puts(out, nfeed ? ", feeding them)\n" : "\n");
    } else {
      tfg_strbuf_printf(out, "graphs: not captured: %s\n", why.data);
    }
    tfg_strbuf_free(&why);
  }
  free(gpu);
}

void tfg_plan_print(const tfg_plan *p, tfg_strbuf *out) {
  const tfg_graph *g = p->g;
  /* Who records and who waits on each event, for the text beside them:
   * the recorder, and the waiters in list order (a bucket's ev2 may have
   * several), as lists threaded through wnext. */
  int nwaits = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) nwaits += p->dev[d].steps[s].kind == TFG_PLAN_WAIT;
  int *rec_dev = malloc(sizeof *rec_dev * ((size_t)p->nevents + 1));
  int *rec_stream = malloc(sizeof *rec_stream * ((size_t)p->nevents + 1));
  int *whead = malloc(sizeof *whead * ((size_t)p->nevents + 1));
  int *wtail = malloc(sizeof *wtail * ((size_t)p->nevents + 1));
  int *wdev = malloc(sizeof *wdev * ((size_t)nwaits + 1));
  int *wstream = malloc(sizeof *wstream * ((size_t)nwaits + 1));
  int *wnext = malloc(sizeof *wnext * ((size_t)nwaits + 1));
  TFG_ASSERT(rec_dev && rec_stream && whead && wtail && wdev && wstream && wnext);
  int ncopies = 0, nw = 0;
  for (int e = 0; e < p->nevents; e++) rec_dev[e] = whead[e] = wtail[e] = -1;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind == TFG_PLAN_COPY) ncopies++;
      if (st->kind != TFG_PLAN_RECORD && st->kind != TFG_PLAN_WAIT) continue;
      if (st->event < 0 || st->event >= p->nevents) continue;
      if (st->kind == TFG_PLAN_RECORD) {
        if (rec_dev[st->event] < 0) {
          rec_dev[st->event] = d;
          rec_stream[st->event] = st->stream;
        }
        continue;
      }
      wdev[nw] = d;
      wstream[nw] = st->stream;
      wnext[nw] = -1;
      if (wtail[st->event] >= 0) wnext[wtail[st->event]] = nw;
      else whead[st->event] = nw;
      wtail[st->event] = nw++;
    }
  /* With buckets the columns widen for "collective" and "allreduce";
   * plans without keep the narrow ones. */
  bool coll = p->nbuckets > 0;
  int sw = coll ? 10 : 7, kw = coll ? 9 : 6;
  tfg_strbuf_printf(out, "plan: %d device%s, %d cop%s, %d event%s", p->ndev, p->ndev == 1 ? "" : "s", ncopies,
                    ncopies == 1 ? "y" : "ies", p->nevents, p->nevents == 1 ? "" : "s");
  if (coll) tfg_strbuf_printf(out, ", %d bucket%s", p->nbuckets, p->nbuckets == 1 ? "" : "s");
  if (p->nchains > 0) {
    int fused = 0;
    for (int c = 0; c < p->nchains; c++) fused += p->chains[c].nnodes;
    tfg_strbuf_printf(out, ", %d fused chain%s (%d ops)", p->nchains, p->nchains == 1 ? "" : "s", fused);
  }
  tfg_strbuf_putc(out, '\n');
  print_graphs(p, out);
  for (int d = 0; d < p->ndev; d++) {
    const tfg_plan_device *pd = &p->dev[d];
    tfg_strbuf_printf(out, "\n%s: %s, %d step%s, %d buffer%s, persistent ", dev_name(p, d),
                      coll ? "3 streams (0 compute, 1 copy-in, 2 collective)" : "2 streams (0 compute, 1 copy-in)",
                      pd->nsteps, pd->nsteps == 1 ? "" : "s", pd->nbuffers, pd->nbuffers == 1 ? "" : "s");
    tfg_size_format(out, pd->persistent_bytes);
    tfg_strbuf_puts(out, ", peak ");
    tfg_size_format(out, pd->peak);
    tfg_strbuf_printf(out, " (%" PRId64 " bytes)\n", pd->peak);
    if (pd->nsteps) tfg_strbuf_printf(out, "  %5s  %-*s  %-*s  %s\n", "step", sw, "stream", kw, "kind", "what");
    for (int s = 0; s < pd->nsteps; s++) {
      const tfg_plan_step *st = &pd->steps[s];
      bool known = st->kind >= TFG_PLAN_LAUNCH && st->kind <= TFG_PLAN_ALLREDUCE;
      tfg_strbuf_printf(out, "  %5d  %-*s  %-*s  ", s, sw, stream_name(st->stream), kw, known ? kind_names[st->kind] : "?");
      bool ev_ok = st->event >= 0 && st->event < p->nevents;
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        if (st->kind == TFG_PLAN_LAUNCH && st->chain >= 0 && st->chain < p->nchains) chain_text(p, st->chain, out);
        else if (st->node >= 0 && st->node < g->nnodes) node_text(g, st->node, out);
        else tfg_strbuf_printf(out, "n%d", (int)st->node);
        if (st->kind == TFG_PLAN_COPY)
          tfg_strbuf_printf(out, " from %s", st->src >= 0 && st->src < p->ndev ? dev_name(p, st->src) : "?");
        break;
      case TFG_PLAN_RECORD:
        tfg_strbuf_printf(out, "event %d", st->event);
        if (ev_ok)
          for (int w = whead[st->event]; w >= 0; w = wnext[w])
            tfg_strbuf_printf(out, "%s %s %s", w == whead[st->event] ? " ->" : ",", dev_name(p, wdev[w]),
                              stream_name(wstream[w]));
        break;
      case TFG_PLAN_WAIT:
        tfg_strbuf_printf(out, "event %d", st->event);
        if (ev_ok && rec_dev[st->event] >= 0)
          tfg_strbuf_printf(out, " <- %s %s", dev_name(p, rec_dev[st->event]), stream_name(rec_stream[st->event]));
        break;
      case TFG_PLAN_ALLREDUCE:
        if (st->bucket >= 0 && st->bucket < p->nbuckets) {
          tfg_strbuf_printf(out, "bucket %d: ", st->bucket);
          bucket_text(p, st->bucket, out);
        } else {
          tfg_strbuf_printf(out, "bucket %d", st->bucket);
        }
        break;
      default: break;
      }
      tfg_strbuf_putc(out, '\n');
    }
    if (pd->nbuffers) tfg_strbuf_printf(out, "  %10s  %10s  %-11s  %s\n", "offset", "bytes", "live", "tensor");
    for (int i = 0; i < pd->nbuffers; i++) {
      const tfg_plan_buffer *bf = &pd->buffers[i];
      char range[32];
      if (bf->persistent) snprintf(range, sizeof range, "always");
      else snprintf(range, sizeof range, "%d-%d", bf->first, bf->last);
      tfg_strbuf_printf(out, "  %10" PRId64 "  %10" PRId64 "  %-11s  ", bf->offset, bf->bytes, range);
      if (bf->node >= 0 && bf->node < g->nnodes) node_text(g, bf->node, out);
      else tfg_strbuf_printf(out, "n%d", (int)bf->node);
      if (bf->persistent) tfg_strbuf_puts(out, ", persistent");
      if (bf->copy && bf->first >= 0 && bf->first < pd->nsteps) {
        int src = pd->steps[bf->first].src;
        tfg_strbuf_printf(out, ", copy from %s", src >= 0 && src < p->ndev ? dev_name(p, src) : "?");
      }
      tfg_strbuf_putc(out, '\n');
    }
  }
  if (coll) {
    /* The buckets, each with its tensors per rank (keys in one order). */
    tfg_strbuf_printf(out, "\nbuckets: %d, cap ", p->nbuckets);
    tfg_size_format(out, p->bucket_bytes);
    tfg_strbuf_puts(out, " (all-reduced in this order on every rank)\n");
    for (int b = 0; b < p->nbuckets; b++) {
      const tfg_plan_bucket *pb = &p->buckets[b];
      tfg_strbuf_printf(out, "  bucket %d: ", b);
      bucket_text(p, b, out);
      tfg_strbuf_putc(out, '\n');
      for (int r = 0; r < pb->nranks; r++) {
        tfg_strbuf_printf(out, "    %s:", pb->devices[r] >= 0 && pb->devices[r] < p->ndev ? dev_name(p, pb->devices[r]) : "?");
        for (int k = 0; k < pb->nnodes; k++) {
          tfg_node_id x = pb->nodes[r * pb->nnodes + k];
          tfg_strbuf_puts(out, k ? ", " : " ");
          if (x >= 0 && x < g->nnodes) {
            node_text(g, x, out);
            if (g->nodes[x].ninputs == 1) tfg_strbuf_printf(out, " of n%d", (int)g->nodes[x].inputs[0]);
          } else {
            tfg_strbuf_printf(out, "n%d", (int)x);
          }
        }
        tfg_strbuf_putc(out, '\n');
      }
    }
  }
  free(rec_dev);
  free(rec_stream);
  free(whead);
  free(wtail);
  free(wdev);
  free(wstream);
  free(wnext);
}
