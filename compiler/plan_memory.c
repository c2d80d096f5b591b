/* compiler/plan_memory.c: the plan's static memory plan (docs/plan.md,
 * Memory and Concurrent streams): the live ranges the step sweep in
 * plan.c does not close, best-fit offsets per device (pass 3, the free
 * gaps in a treap, which the validator uses too), and the events that
 * order a COPY after the compute steps that last used its memory (pass
 * 4, a max tree over the device's offsets). O(log n) per buffer. */
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"
#include "compiler/plan_impl.h"

static int64_t align_up(int64_t x) { return (x + TFG_PLAN_ALIGN - 1) / TFG_PLAN_ALIGN * TFG_PLAN_ALIGN; }

/* ---- liveness ---------------------------------------------------------------------- */

/* Each step's vector clock over every stream of the plan (stream k of
 * S = TFG_PLAN_STREAMS * ndev is device k / TFG_PLAN_STREAMS's stream
 * k % TFG_PLAN_STREAMS), replayed as the executor runs the streams: each
 * in list order, a WAIT once its event is recorded, an ALLREDUCE once
 * every rank's collective stream has reached it (its clock then joins
 * theirs). Device d's step s has its clock at clk[(base[d] + s) * S].
 * A plan the builder made never deadlocks (the validator checks it). */
static int32_t *replay_clocks(const tfg_plan *p, const int *base, int S) {
  size_t nsteps = (size_t)base[p->ndev];
  int32_t *clk = calloc(nsteps * (size_t)S + 1, sizeof *clk), *cur = calloc((size_t)S * (size_t)S, sizeof *cur);
  int32_t *ev = malloc(sizeof *ev * ((size_t)p->nevents * (size_t)S + 1));
  bool *recorded = calloc((size_t)p->nevents + 1, sizeof *recorded);
  int *pos = calloc((size_t)S, sizeof *pos), *arrived = calloc((size_t)p->nbuckets + 1, sizeof *arrived);
  bool *waiting = calloc((size_t)S, sizeof *waiting); /* a collective stream at an ALLREDUCE not every rank reached */
  TFG_ASSERT(clk && cur && ev && recorded && pos && arrived && waiting);
  for (bool progress = true; progress;) {
    progress = false;
    for (int k = 0; k < S; k++) {
      int d = k / TFG_PLAN_STREAMS;
      const tfg_plan_device *pd = &p->dev[d];
      int32_t *c = &cur[(size_t)k * (size_t)S];
      for (;;) {
        while (pos[k] < pd->nsteps && pd->steps[pos[k]].stream != k % TFG_PLAN_STREAMS) pos[k]++;
        if (pos[k] >= pd->nsteps) break;
        const tfg_plan_step *st = &pd->steps[pos[k]];
        if (st->kind == TFG_PLAN_WAIT && !recorded[st->event]) break;
        if (st->kind == TFG_PLAN_ALLREDUCE) {
          /* a rendezvous: the last rank to arrive runs it on every rank */
          const tfg_plan_bucket *pb = &p->buckets[st->bucket];
          if (!waiting[k]) {
            waiting[k] = true;
            arrived[st->bucket]++;
            progress = true;
          }
          if (arrived[st->bucket] < pb->nranks) break; /* each rank's stream stops here until all have come */
          int32_t *join = malloc(sizeof *join * (size_t)S);
          TFG_ASSERT(join != NULL);
          for (int j = 0; j < S; j++) join[j] = 0;
          for (int q = 0; q < pb->nranks; q++)
            for (int j = 0; j < S; j++) {
              int32_t v = cur[(size_t)(TFG_PLAN_STREAMS * pb->devices[q] + TFG_PLAN_STREAM_COLLECTIVE) * (size_t)S + (size_t)j];
              if (v > join[j]) join[j] = v;
            }
          for (int q = 0; q < pb->nranks; q++) {
            int e = pb->devices[q], kq = TFG_PLAN_STREAMS * e + TFG_PLAN_STREAM_COLLECTIVE;
            int32_t *cq = &cur[(size_t)kq * (size_t)S];
            memcpy(cq, join, sizeof *cq * (size_t)S);
            cq[kq]++;
            memcpy(&clk[((size_t)base[e] + (size_t)pos[kq]) * (size_t)S], cq, sizeof *cq * (size_t)S);
            pos[kq]++;
            waiting[kq] = false;
          }
          free(join);
          continue;
        }
        if (st->kind == TFG_PLAN_WAIT)
          for (int j = 0; j < S; j++)
            if (ev[(size_t)st->event * (size_t)S + (size_t)j] > c[j]) c[j] = ev[(size_t)st->event * (size_t)S + (size_t)j];
        c[k]++;
        if (st->kind == TFG_PLAN_RECORD) {
          memcpy(&ev[(size_t)st->event * (size_t)S], c, sizeof *c * (size_t)S);
          recorded[st->event] = true;
        }
        memcpy(&clk[((size_t)base[d] + (size_t)pos[k]) * (size_t)S], c, sizeof *c * (size_t)S);
        pos[k]++;
        progress = true;
      }
    }
  }
  free(cur);
  free(ev);
  free(recorded);
  free(pos);
  free(arrived);
  free(waiting);
  return clk;
}

/* The first compute step of device d at or after step `from` whose clock
 * has component k at least t, or -1. Compute steps' clocks only grow
 * along the stream, so a binary search over them finds it. */
static int first_after(const int32_t *clk, const int *base, int S, const int *compute, const int *ncompute, int d,
                       int from, int k, int32_t t) {
  const int *cs = &compute[base[d]];
  int lo = 0, hi = ncompute[d];
  while (lo < hi) { /* the first whose clock has seen t */
    int mid = (lo + hi) / 2;
    if (clk[((size_t)base[d] + (size_t)cs[mid]) * (size_t)S + (size_t)k] >= t) hi = mid;
    else lo = mid + 1;
  }
  int lo2 = 0;
  hi = ncompute[d];
  while (lo2 < hi) { /* the first at or after from */
    int mid = (lo2 + hi) / 2;
    if (cs[mid] >= from) hi = mid;
    else lo2 = mid + 1;
  }
  if (lo2 > lo) lo = lo2;
  return lo < ncompute[d] ? cs[lo] : -1;
}

void tfg_plan_close_live_ranges(tfg_plan *p, const int *dev, const int *own_buf) {
  const tfg_graph *g = p->g;
  int32_t n = g->nnodes;
  /* A tensor sent to another device lives until the first compute step
   * of its own device that happens after every copy of it: the copy runs
   * on the destination's copy stream, and only a chain of events from it
   * back to the source (a pipeline's gradients coming back) tells the
   * source it is done. Without one it lives to the end of the list (the
   * executor synchronizes the devices at the end of a run). */
  int S = TFG_PLAN_STREAMS * p->ndev;
  int *base = malloc(sizeof *base * ((size_t)p->ndev + 1)), *ncompute = calloc((size_t)p->ndev + 1, sizeof *ncompute);
  TFG_ASSERT(base && ncompute);
  base[0] = 0;
  for (int d = 0; d < p->ndev; d++) base[d + 1] = base[d] + p->dev[d].nsteps;
  int *compute = malloc(sizeof *compute * ((size_t)base[p->ndev] + 1));
  TFG_ASSERT(compute != NULL);
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++)
      if (p->dev[d].steps[s].stream == TFG_PLAN_STREAM_COMPUTE) compute[base[d] + ncompute[d]++] = s;
  int32_t *clk = replay_clocks(p, base, S);
  int *release = malloc(sizeof *release * ((size_t)n + 1)); /* per node: the step its sent buffer lives to, or -1 */
  TFG_ASSERT(release != NULL);
  for (int32_t i = 0; i < n; i++) release[i] = -1;
  for (int e = 0; e < p->ndev; e++)
    for (int s = 0; s < p->dev[e].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[e].steps[s];
      if (st->kind != TFG_PLAN_COPY) continue;
      tfg_node_id x = st->node;
      int d = st->src, bi = own_buf[x]; /* a view's own_buf is its base's */
      TFG_ASSERT(dev[x] == d);
      if (bi < 0 || p->dev[d].buffers[bi].persistent) continue;
      int k = TFG_PLAN_STREAMS * e + TFG_PLAN_STREAM_COPY;
      int32_t t = clk[((size_t)base[e] + (size_t)s) * (size_t)S + (size_t)k];
      int r = first_after(clk, base, S, compute, ncompute, d, p->dev[d].buffers[bi].last, k, t);
      if (r < 0) r = p->dev[d].nsteps - 1;
      if (r > release[x]) release[x] = r;
    }
  for (int32_t i = 0; i < n; i++)
    if (release[i] >= 0) {
      tfg_plan_buffer *bf = &p->dev[dev[i]].buffers[own_buf[i]];
      if (release[i] > bf->last) bf->last = release[i];
    }
  free(release);
  free(clk);
  free(compute);
  free(ncompute);
  free(base);
  /* A value no op reads is a result: the loss, a metric, a printed tensor.
   * It is fetched after the step, so it too lives to the end of the list
   * (else the next op would reuse its memory before anyone read it). */
  uint8_t *read = calloc((size_t)n + 1, 1);
  TFG_ASSERT(read != NULL);
  for (int32_t i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].ninputs; k++) read[g->nodes[i].inputs[k]] = 1;
  for (int32_t i = 0; i < n; i++)
    if (!read[i] && own_buf[i] >= 0) {
      tfg_plan_device *pd = &p->dev[dev[i]];
      pd->buffers[own_buf[i]].last = pd->nsteps - 1;
    }
  free(read);
  /* Persistent buffers span the whole list (an empty range, 0 to -1, on
   * a device with no steps: the validator takes them as always live). */
  for (int dv = 0; dv < p->ndev; dv++)
    for (int k = 0; k < p->dev[dv].nbuffers && p->dev[dv].buffers[k].persistent; k++) {
      p->dev[dv].buffers[k].first = 0;
      p->dev[dv].buffers[k].last = p->dev[dv].nsteps - 1;
    }
}

/* ---- ordered sets ------------------------------------------------------------------ */

/* The treap of plan_impl.h, whose split and merge do the work. */

void tfg_plan_treap_init(tfg_plan_treap *t, int n) {
  t->root = -1;
  t->l = malloc(sizeof *t->l * ((size_t)n + 1));
  t->r = malloc(sizeof *t->r * ((size_t)n + 1));
  t->prio = malloc(sizeof *t->prio * ((size_t)n + 1));
  t->ka = malloc(sizeof *t->ka * ((size_t)n + 1));
  t->kb = malloc(sizeof *t->kb * ((size_t)n + 1));
  t->seed = 2463534242u;
  TFG_ASSERT(t->l && t->r && t->prio && t->ka && t->kb);
}

void tfg_plan_treap_free(tfg_plan_treap *t) {
  void *arrays[] = {t->l, t->r, t->prio, t->ka, t->kb};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
}

static bool key_less(const tfg_plan_treap *t, int x, int64_t a, int64_t b) {
  return t->ka[x] < a || (t->ka[x] == a && t->kb[x] < b);
}

/* Splits the tree at x into keys < (a, b) and keys >= (a, b). */
static void treap_split(tfg_plan_treap *t, int x, int64_t a, int64_t b, int *lo, int *hi) {
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
static int treap_merge(tfg_plan_treap *t, int lo, int hi) {
  if (lo < 0) return hi;
  if (hi < 0) return lo;
  if (t->prio[lo] > t->prio[hi]) {
    t->r[lo] = treap_merge(t, t->r[lo], hi);
    return lo;
  }
  t->l[hi] = treap_merge(t, lo, t->l[hi]);
  return hi;
}

void tfg_plan_treap_insert(tfg_plan_treap *t, int x, int64_t a, int64_t b) {
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

void tfg_plan_treap_erase(tfg_plan_treap *t, int x) {
  int lo, mid, hi;
  treap_split(t, t->root, t->ka[x], t->kb[x], &lo, &mid);
  treap_split(t, mid, t->ka[x], t->kb[x] + 1, &mid, &hi);
  TFG_ASSERT(mid == x);
  t->root = treap_merge(t, lo, hi);
}

/* The node with the smallest key >= (a, b), or -1. */
int tfg_plan_treap_ceil(const tfg_plan_treap *t, int64_t a, int64_t b) {
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
int tfg_plan_treap_floor_below(const tfg_plan_treap *t, int64_t a, int64_t b) {
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
  if (bf->persistent && !nd->name) /* a constant */
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: a constant needs %s but only %s is available", dv->name,
                   need.data, have.data);
  else if (bf->persistent)
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: %s %s needs %s but only %s is available", dv->name, op,
                   nd->name, need.data, have.data);
  else if (bf->copy)
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: the copy of %s's output from %s needs %s but only %s is available",
                   dv->name, op, tfg_devices_at(p->ds, p->dev[d].steps[bf->first].src)->name, need.data, have.data);
  else
    tfg_diag_error(diag, &nd->loc, "out of memory on %s: %s needs %s for its output but only %s is available", dv->name,
                   op, need.data, have.data);
  if (bf->persistent)
    tfg_diag_note(diag, NULL, "%s has %s; the params, optimizer state and constants before this one take %s", dv->name, cap.data,
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
  tfg_plan_treap gaps;
} fitter;

/* Where the buffer after u may start (u's end rounded up). */
static int64_t end_of(const fitter *f, int u) {
  return u == f->base ? f->base_end : align_up(f->bufs[u].offset + f->bufs[u].bytes);
}

/* Files the gap above u (after u changed neighbours): none at the top. */
static void refile_gap(fitter *f, int u) {
  if (f->in_gaps[u]) tfg_plan_treap_erase(&f->gaps, u);
  f->in_gaps[u] = false;
  int v = f->next[u];
  if (v == f->base) return;
  int64_t size = f->bufs[v].offset - end_of(f, u);
  if (size <= 0) return;
  tfg_plan_treap_insert(&f->gaps, u, size, end_of(f, u));
  f->in_gaps[u] = true;
}

/* Assigns offsets on device d: persistent buffers packed from 0 in node
 * order (they come first in the list), then every other buffer, in the
 * order of the steps that write them, into the smallest gap between the
 * buffers live at its first step (the lowest such gap on a tie), or on top
 * of them. Returns false after reporting when the device is too small. */
bool tfg_plan_assign_memory(tfg_plan *p, int d, tfg_diag *diag) {
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
  tfg_plan_treap_init(&f.gaps, nb + 1);
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
        if (f.in_gaps[k]) tfg_plan_treap_erase(&f.gaps, k);
        f.in_gaps[k] = false;
        f.next[u] = v;
        f.prev[v] = u;
        refile_gap(&f, u); /* the gaps on both sides and k's place merge */
        in_use -= pd->buffers[k].bytes;
        nlive--;
      }
    /* The smallest gap that fits, the lowest among equals: the first key
     * >= (need, any offset); else on top of the highest live buffer. */
    int u = tfg_plan_treap_ceil(&f.gaps, align_up(bf->bytes), INT64_MIN);
    if (u < 0) u = f.prev[f.base];
    bf->offset = end_of(&f, u);
    if (bf->offset + bf->bytes > capacity) {
      int big = tfg_plan_treap_floor_below(&f.gaps, INT64_MAX, INT64_MAX); /* the largest gap */
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
  tfg_plan_treap_free(&f.gaps);
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
 * their memory (the rule for concurrent streams in docs/plan.md). Buffers in
 * write order: the max tree holds, per byte, the last step of any buffer
 * placed there so far; for a COPY's buffer, the highest over its bytes is
 * the step whose stream must be ordered before the copy. A freed
 * buffer's last step is a compute step (a read, or the WAIT on a bucket's
 * ev2) after its other accesses, so an event recorded right after it
 * covers them; the copy stream runs in order, so once it waited past a
 * step, later copies need nothing earlier. New events are numbered after
 * the sweep's; the inserted steps shift indices, and live ranges with
 * them. */
void tfg_plan_order_copies(tfg_plan *p, int d) {
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
      if (wait_before[s] >= 0)
        steps[k++] = tfg_plan_step_of(TFG_PLAN_WAIT, TFG_PLAN_STREAM_COPY, -1, -1, wait_before[s]);
      at[s] = k;
      steps[k++] = pd->steps[s];
      if (rec_after[s] >= 0) steps[k++] = tfg_plan_step_of(TFG_PLAN_RECORD, pd->steps[s].stream, -1, -1, rec_after[s]);
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

/* ---- what a device holds at its fullest ------------------------------------------- */

void tfg_plan_memory_of(const tfg_plan *p, int d, tfg_plan_memory *out) {
  const tfg_plan_device *pd = &p->dev[d];
  const tfg_graph *g = p->g;
  *out = (tfg_plan_memory){0};
  /* the bytes live at each step: a difference array over the live ranges */
  int64_t *delta = calloc((size_t)pd->nsteps + 2, sizeof *delta);
  TFG_ASSERT(delta != NULL);
  for (int i = 0; i < pd->nbuffers; i++) {
    const tfg_plan_buffer *b = &pd->buffers[i];
    if (!b->persistent && b->first >= 0 && b->last >= b->first && b->last < pd->nsteps) {
      delta[b->first] += b->bytes;
      delta[b->last + 1] -= b->bytes;
    }
  }
  int64_t live = 0, most = -1;
  for (int s = 0; s < pd->nsteps; s++) {
    live += delta[s];
    if (live > most) most = live, out->step = s;
  }
  free(delta);
  for (int i = 0; i < pd->nbuffers; i++) {
    const tfg_plan_buffer *b = &pd->buffers[i];
    if (!b->persistent && !(b->first <= out->step && out->step <= b->last)) continue;
    const tfg_node *n = b->node >= 0 && b->node < g->nnodes ? &g->nodes[b->node] : NULL;
    if (!n) out->activations += b->bytes;
    else if (b->persistent) *(n->op == TFG_OP_STATE ? &out->state : &out->params) += b->bytes;
    else if (n->backward || tfg_op_get(n->op)->kind == TFG_OP_KIND_COLLECTIVE) out->grads += b->bytes;
    else out->activations += b->bytes;
  }
  int64_t held = out->params + out->state + out->grads + out->activations;
  out->gaps = pd->peak > held ? pd->peak - held : 0;
}
