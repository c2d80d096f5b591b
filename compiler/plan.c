/* compiler/plan.c: the execution plan (see plan.h for its rules).
 *
 * Three passes over a placed graph:
 *   1. copies: which tensors each device needs from another one, found
 *      from the edges that cross devices: one copy per tensor per
 *      destination, however many ops read it there;
 *   2. steps: one sweep in graph order appends to every device's list, so
 *      the lists interleave as the graph does. An op's LAUNCH goes on its
 *      device's compute stream (after a WAIT for each copied input it is
 *      the first to read); when other devices need the value, a RECORD
 *      follows on the compute stream and each destination's copy stream
 *      gets WAIT, COPY, RECORD at once ("as soon as the tensor exists").
 *      Every step that writes a tensor opens its buffer and every step that
 *      reads one extends it, so liveness falls out of the sweep;
 *   3. memory: per device, persistent tensors packed at the bottom in node
 *      order, then every other buffer by best fit, in the order of the
 *      steps that write them.
 * Passes 1 and 2 are linear in nodes plus edges; best fit keeps the free
 * gaps in a search tree, O(log n) per buffer, so a graph of 100,000 ops
 * plans in milliseconds however many tensors are live at once.
 *
 * The validator trusts nothing the builder knew: it replays the steps with
 * vector clocks (the happens-before order the events give the streams),
 * then checks the memory plan against the steps. */
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
  free(p->dev);
  free(p);
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
  return (tfg_plan_step){.kind = kind, .stream = stream, .node = node, .src = src, .event = event};
}

/* Node i's LAUNCH on its device's compute stream, preceded by a WAIT for
 * each copied input it is the first there to read. Extends the live range
 * of every buffer it reads and opens its own (none for an empty output,
 * such as an optimizer update's marker). */
static void launch(builder *b, tfg_node_id i) {
  const tfg_node *nd = &b->g->nodes[i];
  int d = b->dev[i];
  for (int k = 0; k < nd->ninputs; k++) {
    tfg_node_id x = nd->inputs[k];
    if (b->dev[x] == d) continue;
    copy_rec *c = find_copy(b, x, d);
    TFG_ASSERT(c != NULL && c->arrived >= 0); /* pass 1 saw this edge; x came first */
    if (!c->waited) {
      emit(b, d, step_of(TFG_PLAN_WAIT, 0, -1, -1, c->arrived));
      c->waited = true;
    }
  }
  int s = emit(b, d, step_of(TFG_PLAN_LAUNCH, 0, i, -1, -1));
  tfg_plan_buffer *bufs = b->p->dev[d].buffers;
  for (int k = 0; k < nd->ninputs; k++) {
    tfg_node_id x = nd->inputs[k];
    int bi = b->dev[x] == d ? b->own_buf[x] : find_copy(b, x, d)->buf;
    if (bi >= 0 && !bufs[bi].persistent) bufs[bi].last = s; /* steps only grow: the latest read is the last */
  }
  int64_t n = bytes_of(nd);
  if (n > 0) b->own_buf[i] = add_buffer(b, d, (tfg_plan_buffer){.node = i, .bytes = n, .first = s, .last = s});
}

/* Sends x (just computed, or persistent) to every device that reads it:
 * the source's compute stream records an event, and each destination's
 * copy stream waits on it, copies, and records the event its compute
 * stream will wait on. One event per stream edge: each is recorded once
 * and waited on once, so a plan reads as matched pairs. */
static void send(builder *b, tfg_node_id x) {
  int src = b->dev[x];
  int64_t n = bytes_of(&b->g->nodes[x]);
  for (int c = b->copy_head[x]; c >= 0; c = b->copies[c].next) {
    copy_rec *r = &b->copies[c];
    int sent = b->p->nevents++;
    emit(b, src, step_of(TFG_PLAN_RECORD, 0, -1, -1, sent));
    emit(b, r->dst, step_of(TFG_PLAN_WAIT, 1, -1, -1, sent));
    int s = emit(b, r->dst, step_of(TFG_PLAN_COPY, 1, x, src, -1));
    if (n > 0)
      r->buf = add_buffer(b, r->dst, (tfg_plan_buffer){.node = x, .copy = true, .bytes = n, .first = s, .last = s});
    r->arrived = b->p->nevents++;
    emit(b, r->dst, step_of(TFG_PLAN_RECORD, 1, -1, -1, r->arrived));
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

tfg_status tfg_plan_build(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds, tfg_diag *d,
                          tfg_plan **out) {
  tfg_plan *p = calloc(1, sizeof *p);
  TFG_ASSERT(p != NULL);
  p->g = g;
  p->pl = pl;
  p->ds = ds;
  p->ndev = tfg_devices_count(ds);
  p->dev = calloc((size_t)p->ndev, sizeof *p->dev);
  int32_t n = g->nnodes;
  builder b = {.g = g, .p = p};
  b.dev = malloc(sizeof *b.dev * ((size_t)n + 1));
  b.own_buf = malloc(sizeof *b.own_buf * ((size_t)n + 1));
  b.copy_head = malloc(sizeof *b.copy_head * ((size_t)n + 1));
  b.steps_cap = calloc((size_t)p->ndev, sizeof *b.steps_cap);
  b.bufs_cap = calloc((size_t)p->ndev, sizeof *b.bufs_cap);
  TFG_ASSERT(p->dev && b.dev && b.own_buf && b.copy_head && b.steps_cap && b.bufs_cap);
  for (int32_t i = 0; i < n; i++) {
    b.dev[i] = tfg_placement_device(pl, i);
    TFG_ASSERT(b.dev[i] >= 0 && b.dev[i] < p->ndev);
    b.own_buf[i] = -1;
    b.copy_head[i] = -1;
  }

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
   * like any other tensor, at their place in graph order. */
  for (int32_t i = 0; i < n; i++) {
    if (!persistent(&g->nodes[i])) launch(&b, i);
    send(&b, i);
  }

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
   * a compute step listed before it was the last to read. The copy stream
   * waits only on the source, so with truly concurrent streams an executor
   * must not start a COPY before the compute stream has passed the steps
   * listed before it; one that runs a device's list in order on one worker
   * thread gets that for free. */
  tfg_status st = TFG_OK;
  for (int dv = 0; dv < p->ndev && st == TFG_OK; dv++)
    if (!assign_memory(p, dv, d)) st = TFG_ERR_OOM;

  free(b.dev);
  free(b.own_buf);
  free(b.copy_head);
  free(b.copies);
  free(b.steps_cap);
  free(b.bufs_cap);
  if (st != TFG_OK) {
    tfg_plan_free(p);
    *out = NULL;
    return st;
  }
  *out = p;
  return TFG_OK;
}

/* ---- validation --------------------------------------------------------------------- */

typedef struct checker {
  const tfg_plan *p;
  const tfg_graph *g;
  tfg_strbuf *why;
  int nstreams;       /* 2 per device: stream s of device d is 2 * d + s */
  /* where each node is launched (from a scan of the steps) */
  int *l_dev, *l_step;
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

/* Steps well formed: kinds, streams, nodes, devices and events in range;
 * every op (not params and state) launched once, on its placed device, in
 * graph order there; every event recorded at most once and every waited
 * event recorded. Fills the launch and copy tables. */
static bool check_steps(checker *ck, int *rec_dev, int *rec_step, int *nwaits, tfg_node_id *last_launch) {
  const tfg_plan *p = ck->p;
  int32_t n = ck->g->nnodes;
  for (int d = 0; d < p->ndev; d++) last_launch[d] = -1;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      const char *dn = dev_name(p, d);
      if (st->stream != 0 && st->stream != 1) return fail(ck, "%s step %d: stream %d does not exist", dn, s, st->stream);
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        if (st->node < 0 || st->node >= n) return fail(ck, "%s step %d: node %d does not exist", dn, s, (int)st->node);
        if (st->kind == TFG_PLAN_LAUNCH) {
          if (st->stream != 0) return fail(ck, "%s step %d: a launch on stream %d, not the compute stream", dn, s, st->stream);
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
        } else {
          if (st->stream != 1) return fail(ck, "%s step %d: a copy on stream %d, not the copy stream", dn, s, st->stream);
          if (st->src < 0 || st->src >= p->ndev || st->src == d)
            return fail(ck, "%s step %d: a copy from device %d", dn, s, st->src);
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
  /* Every op runs once, where the placer put it. */
  for (tfg_node_id i = 0; i < n; i++) {
    if (persistent(&ck->g->nodes[i])) continue;
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

/* Replays the streams: each runs its steps in list order, a WAIT only once
 * its event is recorded. Vector clocks give the happens-before order, in
 * which every read must follow the step that produced the value. */
static bool replay(checker *ck, const int *nwaits) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int S = ck->nstreams;
  int32_t *clock = calloc((size_t)S * (size_t)S, sizeof *clock);
  int32_t **ev = calloc((size_t)p->nevents + 1, sizeof *ev); /* an event's clock, while waits remain */
  int *waits_left = malloc(sizeof *waits_left * ((size_t)p->nevents + 1));
  bool *recorded = calloc((size_t)p->nevents + 1, sizeof *recorded);
  int *pos = calloc((size_t)S, sizeof *pos); /* next step index in the device's list, per stream */
  TFG_ASSERT(clock && ev && waits_left && recorded && pos);
  memcpy(waits_left, nwaits, sizeof *waits_left * (size_t)p->nevents);
  bool ok = true, progress = true;
  while (ok && progress) {
    progress = false;
    for (int k = 0; k < S && ok; k++) {
      int d = k / 2, stream = k % 2;
      const tfg_plan_device *pd = &p->dev[d];
      int32_t *ck_k = &clock[(size_t)k * (size_t)S];
      for (;;) {
        while (pos[k] < pd->nsteps && pd->steps[pos[k]].stream != stream) pos[k]++;
        if (pos[k] >= pd->nsteps) break;
        int s = pos[k];
        const tfg_plan_step *st = &pd->steps[s];
        if (st->kind == TFG_PLAN_WAIT && !recorded[st->event]) break;
        progress = true;
        pos[k]++;
        int32_t now = ++ck_k[k];
        const char *dn = dev_name(p, d);
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
        } else if (st->kind == TFG_PLAN_COPY) {
          tfg_node_id x = st->node;
          struct vcopy *c = vfind(ck, x, d);
          c->time = now;
          if (ck->p_dev[x] == st->src) continue;
          char *t = ntext(ck, x);
          if (ck->l_dev[x] != st->src)
            ok = fail(ck, "%s step %d: copies %s from %s, which neither computes it nor holds it", dn, s, t,
                      dev_name(p, st->src));
          else if (!before(ck_k, 2 * st->src, ck->l_time[x]))
            ok = fail(ck,
                      "%s step %d: copies %s before %s has computed it (step %d): the copy stream waits on no event "
                      "recorded after it",
                      dn, s, t, dev_name(p, st->src), ck->l_step[x]);
          free(t);
          if (!ok) break;
        } else { /* LAUNCH */
          const tfg_node *nd = &g->nodes[st->node];
          ck->l_time[st->node] = now;
          for (int j = 0; j < nd->ninputs && ok; j++) {
            tfg_node_id x = nd->inputs[j];
            if (ck->p_dev[x] == d) continue;
            if (ck->l_dev[x] == d) {
              if (ck->l_step[x] < s) continue;
              char *a = ntext(ck, st->node), *t = ntext(ck, x);
              ok = fail(ck, "%s step %d: %s reads %s, which is computed only later (step %d)", dn, s, a, t,
                        ck->l_step[x]);
              free(a);
              free(t);
              break;
            }
            struct vcopy *c = vfind(ck, x, d);
            if (c && before(ck_k, 2 * d + 1, c->time)) continue;
            char *a = ntext(ck, st->node), *t = ntext(ck, x);
            if (!c)
              ok = fail(ck, "%s step %d: %s reads %s, which is not on %s: not computed there, not persistent there, "
                            "not copied in",
                        dn, s, a, t, dn);
            else
              ok = fail(ck,
                        "%s step %d: %s reads the copy of %s (step %d, copy stream) without waiting for it: the "
                        "compute stream waits on no event recorded after the copy",
                        dn, s, a, t, c->step);
            free(a);
            free(t);
          }
          if (!ok) break;
        }
      }
    }
  }
  /* Streams left with steps: each is stuck on a WAIT whose RECORD never
   * comes before it (waits that wait on each other). */
  for (int k = 0; k < S && ok; k++) {
    const tfg_plan_device *pd = &p->dev[k / 2];
    if (pos[k] < pd->nsteps)
      ok = fail(ck, "%s step %d: waits on event %d, which can never be recorded before it (a cycle of waits)",
                dev_name(p, k / 2), pos[k], pd->steps[pos[k]].event);
  }
  for (int e = 0; e < p->nevents; e++) free(ev[e]);
  free(clock);
  free(ev);
  free(waits_left);
  free(recorded);
  free(pos);
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
    if (bf->bytes <= 0 || bf->offset < 0 || bf->offset % ALIGN)
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
      tfg_plan_step_kind want = bf->copy ? TFG_PLAN_COPY : TFG_PLAN_LAUNCH;
      if (w->kind != want || w->node != bf->node) {
        ok = fail(ck, "%s: the buffer of %s starts at step %d, which does not %s it", dn, t, bf->first,
                  bf->copy ? "copy" : "compute");
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

/* Memory of device d: every value has its buffer, live at every step
 * that reads it; no two buffers live at once overlap, found by a sweep
 * over the steps with the live buffers kept in offset order (while the
 * set has no overlap, a new buffer overlapping any overlaps one of its
 * two neighbours in that order); the peak is the highest end. */
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
    if (st->kind != TFG_PLAN_LAUNCH) continue;
    const tfg_node *nd = &g->nodes[st->node];
    for (int j = 0; j < nd->ninputs; j++) {
      tfg_node_id x = nd->inputs[j];
      if (ck->p_dev[x] == d || bytes_of(&g->nodes[x]) == 0) continue;
      int bi = ck->l_dev[x] == d ? ck->own_buf[x] : vfind(ck, x, d)->buf;
      if (bi < 0) continue; /* reported as that value's step */
      const tfg_plan_buffer *bf = &pd->buffers[bi];
      if (s < bf->first || s > bf->last) {
        char *a = ntext(ck, st->node), *t = ntext(ck, x);
        fail(ck, "%s step %d: %s reads %s%s, whose buffer lives only at steps %d-%d", dn, s, a, bf->copy ? "the copy of " : "",
             t, bf->first, bf->last);
        free(a);
        free(t);
        return false;
      }
    }
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
  checker ck = {.p = p, .g = g, .why = why, .nstreams = 2 * p->ndev};
  int ncopy = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) ncopy += p->dev[d].steps[s].kind == TFG_PLAN_COPY;
  ck.l_dev = malloc(sizeof *ck.l_dev * ((size_t)n + 1));
  ck.l_step = malloc(sizeof *ck.l_step * ((size_t)n + 1));
  ck.l_time = calloc((size_t)n + 1, sizeof *ck.l_time);
  ck.p_dev = malloc(sizeof *ck.p_dev * ((size_t)n + 1));
  ck.c_head = malloc(sizeof *ck.c_head * ((size_t)n + 1));
  ck.own_buf = malloc(sizeof *ck.own_buf * ((size_t)n + 1));
  ck.c = calloc((size_t)ncopy + 1, sizeof *ck.c);
  int *rec_dev = malloc(sizeof *rec_dev * ((size_t)p->nevents + 1));
  int *rec_step = malloc(sizeof *rec_step * ((size_t)p->nevents + 1));
  int *nwaits = calloc((size_t)p->nevents + 1, sizeof *nwaits);
  TFG_ASSERT(ck.l_dev && ck.l_step && ck.l_time && ck.p_dev && ck.c_head && ck.own_buf && ck.c && rec_dev && rec_step &&
             nwaits);
  for (int32_t i = 0; i < n; i++) ck.l_dev[i] = ck.l_step[i] = ck.p_dev[i] = ck.c_head[i] = ck.own_buf[i] = -1;
  for (int e = 0; e < p->nevents; e++) rec_dev[e] = rec_step[e] = -1;
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
  tfg_node_id *last_launch = malloc(sizeof *last_launch * (size_t)p->ndev);
  TFG_ASSERT(last_launch);
  ok = ok && check_steps(&ck, rec_dev, rec_step, nwaits, last_launch);
  free(last_launch);
  ok = ok && replay(&ck, nwaits);
  /* Every event is one half of a pair: a RECORD nobody waits on is a
   * dependency the builder lost. */
  for (int e = 0; e < p->nevents && ok; e++) {
    if (rec_dev[e] < 0) ok = fail(&ck, "event %d is never recorded", e);
    else if (nwaits[e] == 0)
      ok = fail(&ck, "event %d (recorded on %s step %d) is never waited on", e, dev_name(p, rec_dev[e]), rec_step[e]);
  }
  for (int d = 0; d < p->ndev && ok; d++) ok = check_buffers(&ck, d);
  for (int d = 0; d < p->ndev && ok; d++) ok = check_memory(&ck, d);
  free(ck.l_dev);
  free(ck.l_step);
  free(ck.l_time);
  free(ck.p_dev);
  free(ck.c_head);
  free(ck.own_buf);
  free(ck.c);
  free(rec_dev);
  free(rec_step);
  free(nwaits);
  return ok;
}

/* ---- print ---------------------------------------------------------------------------- */

static const char *const kind_names[] = {"launch", "copy", "record", "wait"};
static const char *const stream_names[] = {"compute", "copy"};

void tfg_plan_print(const tfg_plan *p, tfg_strbuf *out) {
  const tfg_graph *g = p->g;
  /* Who records and who waits on each event, for the text beside them. */
  int *rec_dev = malloc(sizeof *rec_dev * ((size_t)p->nevents + 1));
  int *rec_stream = malloc(sizeof *rec_stream * ((size_t)p->nevents + 1));
  int *wait_dev = malloc(sizeof *wait_dev * ((size_t)p->nevents + 1));
  int *wait_stream = malloc(sizeof *wait_stream * ((size_t)p->nevents + 1));
  TFG_ASSERT(rec_dev && rec_stream && wait_dev && wait_stream);
  int ncopies = 0;
  for (int e = 0; e < p->nevents; e++) rec_dev[e] = wait_dev[e] = -1;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind == TFG_PLAN_COPY) ncopies++;
      if (st->kind != TFG_PLAN_RECORD && st->kind != TFG_PLAN_WAIT) continue;
      if (st->event < 0 || st->event >= p->nevents) continue;
      int *dv = st->kind == TFG_PLAN_RECORD ? rec_dev : wait_dev;
      int *sv = st->kind == TFG_PLAN_RECORD ? rec_stream : wait_stream;
      if (dv[st->event] < 0) {
        dv[st->event] = d;
        sv[st->event] = st->stream;
      }
    }
  tfg_strbuf_printf(out, "plan: %d device%s, %d cop%s, %d event%s\n", p->ndev, p->ndev == 1 ? "" : "s", ncopies,
                    ncopies == 1 ? "y" : "ies", p->nevents, p->nevents == 1 ? "" : "s");
  for (int d = 0; d < p->ndev; d++) {
    const tfg_plan_device *pd = &p->dev[d];
    tfg_strbuf_printf(out, "\n%s: 2 streams (0 compute, 1 copy-in), %d step%s, %d buffer%s, persistent ", dev_name(p, d),
                      pd->nsteps, pd->nsteps == 1 ? "" : "s", pd->nbuffers, pd->nbuffers == 1 ? "" : "s");
    tfg_size_format(out, pd->persistent_bytes);
    tfg_strbuf_puts(out, ", peak ");
    tfg_size_format(out, pd->peak);
    tfg_strbuf_printf(out, " (%" PRId64 " bytes)\n", pd->peak);
    if (pd->nsteps) tfg_strbuf_printf(out, "  %5s  %-7s  %-6s  %s\n", "step", "stream", "kind", "what");
    for (int s = 0; s < pd->nsteps; s++) {
      const tfg_plan_step *st = &pd->steps[s];
      bool known = st->kind >= TFG_PLAN_LAUNCH && st->kind <= TFG_PLAN_WAIT;
      tfg_strbuf_printf(out, "  %5d  %-7s  %-6s  ", s, st->stream == 0 || st->stream == 1 ? stream_names[st->stream] : "?",
                        known ? kind_names[st->kind] : "?");
      bool ev_ok = st->event >= 0 && st->event < p->nevents;
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        if (st->node >= 0 && st->node < g->nnodes) node_text(g, st->node, out);
        else tfg_strbuf_printf(out, "n%d", (int)st->node);
        if (st->kind == TFG_PLAN_COPY)
          tfg_strbuf_printf(out, " from %s", st->src >= 0 && st->src < p->ndev ? dev_name(p, st->src) : "?");
        break;
      case TFG_PLAN_RECORD:
        tfg_strbuf_printf(out, "event %d", st->event);
        if (ev_ok && wait_dev[st->event] >= 0)
          tfg_strbuf_printf(out, " -> %s %s", dev_name(p, wait_dev[st->event]), stream_names[wait_stream[st->event] & 1]);
        break;
      case TFG_PLAN_WAIT:
        tfg_strbuf_printf(out, "event %d", st->event);
        if (ev_ok && rec_dev[st->event] >= 0)
          tfg_strbuf_printf(out, " <- %s %s", dev_name(p, rec_dev[st->event]), stream_names[rec_stream[st->event] & 1]);
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
  free(rec_dev);
  free(rec_stream);
  free(wait_dev);
  free(wait_stream);
}
