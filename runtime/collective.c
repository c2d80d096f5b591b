/* runtime/collective.c: the built-in collectives of runtime/collective.h,
 * written only against the backend interface (reduce_peer, copy_peer and
 * events), so the same code drives host devices and logical devices
 * sharing one GPU: the ring all-reduce, the shared all-reduce (one pass
 * over every rank's memory, for ranks one backend addresses), the
 * hierarchical all-reduce that
 * combines a reduction within each GPU with a collective among the GPUs'
 * leaders (NCCL's, which lives with the CUDA backend), and the choice
 * between them (tfg_coll_choose; runtime/registry.c applies it).
 *
 * ---- the ring ----
 *
 * The algorithm (the classic chunked ring, as in Baidu's ring all-reduce
 * and NCCL's ring). Rank i's predecessor is i - 1 and its successor i + 1
 * (mod R). The buffer (a rank's segments, concatenated: n elements) is
 * cut into R chunks, chunk c = elements [c*n/R, (c+1)*n/R); chunks may be
 * empty when n < R. There are 2(R-1) steps:
 *   - reduce-scatter, step s = 0..R-2: rank i adds chunk (i-s-1) mod R of
 *     its predecessor's buffer into its own. The predecessor finished that
 *     chunk's partial sum at its step s-1, so after step R-2 rank i holds
 *     chunk i+1 summed over all ranks. With MEAN the last step scales by
 *     1/R, so the finished chunk is the mean;
 *   - all-gather, step t = 0..R-2: rank i copies chunk (i-t) mod R from its
 *     predecessor, which finished it (t = 0) or received it at step t-1.
 * Every element is summed once, on one rank, and then copied, so every
 * rank ends with the same bits (floating-point addition order is fixed by
 * the ring, not by the rank). A chunk may straddle segment boundaries: it
 * is issued as one reduce_peer / copy_peer per piece.
 *
 * Ordering, with events only (a worker never blocks on another device):
 *   - at the start every rank records its "start" event: rank i's step 0
 *     reads its predecessor's buffer, which must hold what the
 *     predecessor's stream computed before the all-reduce;
 *   - step S of rank i (S > 0) waits for step S-1 of its predecessor (the
 *     data it reads is ready) and of its successor (which has read the
 *     chunk this step overwrites), then records its own step-S event.
 *     Within one call the successor's wait is also implied by the chain
 *     of predecessor waits (R-1 hops back around the ring reach the
 *     successor's step S-R+1, its last read of that chunk); it is kept as
 *     the explicit contract, at the cost of one wait per step;
 *   - at the end rank i waits for its successor's last step, the last
 *     read of rank i's buffer by another rank: once rank i's stream has
 *     run the all-reduce, its buffers are its own again (as after an NCCL
 *     call), so what the caller queues next on s[i] may overwrite them,
 *     and the next all-reduce's step 0 cannot overwrite a chunk the
 *     successor is still reading from this one.
 * Events are created once per communicator (2(R-1) step events and one
 * start event per rank) and recorded again by every call. A wait waits for
 * the most recent record issued before it was queued (CUDA's rule, which
 * the host backend follows), so each wait must be queued after the record
 * it means and before that event is recorded again: the call queues every
 * rank's step S before any rank's step S+1, which guarantees both.
 *
 * Failures need no code here: a failed step (reduce_peer of a dtype the
 * backend cannot add, or anything that failed earlier on a rank's stream)
 * fails that stream, its records carry the failure to the neighbours that
 * wait on them, and so on around the ring: every rank's synchronize
 * returns an error instead of hanging. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/collective.h"

/* The state of the ring, and of the shared all-reduce (below), whose
 * calls are one step where the ring's are 2 (R - 1): the ranks, and the
 * events made once and recorded again by every call. */
typedef struct ring {
  int nranks;
  tfg_backend **b;
  tfg_stream **s;
  tfg_event **start; /* start[r]: recorded on s[r] when a call begins */
  tfg_event **step;  /* step[r * nsteps + S]: rank r's step S is done */
  int nsteps;        /* the ring's 2 (nranks - 1); the shared all-reduce's 1 */
} ring;

static ring *ring_of(tfg_coll *c) { return c->ctx; }

static const char *ring_name(tfg_coll *c) {
  (void)c;
  return "ring";
}

/* Chunk c's first element: floor(c * n / R) computed without the product
 * c * n, which could overflow: with n = q R + m, c n / R = c q + c m / R,
 * and c m < R^2 is small. */
static size_t chunk_begin(size_t n, int nranks, int c) {
  size_t r = (size_t)nranks, cc = (size_t)c;
  return cc * (n / r) + cc * (n % r) / r;
}

/* The concatenated buffer of one call: segment k of rank r at
 * bufs[r * nseg + k], starting at element off[k] of the concatenation
 * (off[nseg] = n). */
typedef struct layout {
  void *const *bufs;
  const size_t *off;
  int nseg;
  size_t esize;
} layout;

/* Rank r's pointer to element e of the concatenation, in segment k. */
static char *elem_ptr(const layout *L, int r, int k, size_t e) {
  return (char *)L->bufs[(size_t)r * (size_t)L->nseg + (size_t)k] + (e - L->off[k]) * L->esize;
}

/* The segment holding element e (e < n): the last k with off[k] <= e,
 * skipping empty segments (binary search: buckets may hold hundreds of
 * segments). */
static int seg_of(const layout *L, size_t e) {
  int lo = 0, hi = L->nseg - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (L->off[mid] <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Queues on rank r's stream the step that takes chunk c from rank r-1:
 * reduce (dst += src, times scale) or copy, one operation per piece of
 * the chunk inside one segment. */
static void queue_chunk(ring *g, const layout *L, int r, int c, bool reduce, tfg_dtype dt, double scale) {
  size_t n = L->off[L->nseg];
  size_t lo = chunk_begin(n, g->nranks, c), hi = chunk_begin(n, g->nranks, c + 1);
  int pred = (r + g->nranks - 1) % g->nranks;
  tfg_backend *b = g->b[r], *pb = g->b[pred];
  for (size_t e = lo; e < hi;) {
    int k = seg_of(L, e);
    size_t end = L->off[k + 1] < hi ? L->off[k + 1] : hi;
    char *dst = elem_ptr(L, r, k, e);
    const char *src = elem_ptr(L, pred, k, e);
    if (reduce)
      tfg_backend_reduce_peer(b, g->s[r], dst, pb, src, end - e, dt, scale);
    else
      tfg_backend_copy_peer(b, g->s[r], dst, pb, src, (end - e) * L->esize);
    e = end;
  }
}

/* The offsets of a call's segments in their concatenation (off[nseg] =
 * n, the total), malloc'd. */
static size_t *seg_offsets(const size_t *counts, int nseg) {
  size_t *off = malloc(((size_t)nseg + 1) * sizeof *off);
  TFG_ASSERT(off != NULL);
  off[0] = 0;
  for (int k = 0; k < nseg; k++) off[k + 1] = off[k] + counts[k];
  return off;
}

/* The all-reduce of op, through c's allreduce_scaled (the ring's and the
 * shared one's: MEAN is the sum times 1 / nranks). */
static void allreduce_of_op(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                            tfg_coll_op op) {
  c->i.allreduce_scaled(c, bufs, counts, nseg, dt, op == TFG_COLL_MEAN ? 1.0 / c->nranks : 1.0);
}

/* The arrays of b and s copied (a collective keeps its own). */
static void copy_ranks(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_backend ***gb,
                       tfg_stream ***gs) {
  *gb = malloc((size_t)nranks * sizeof **gb);
  *gs = malloc((size_t)nranks * sizeof **gs);
  TFG_ASSERT(*gb && *gs);
  for (int r = 0; r < nranks; r++) {
    (*gb)[r] = b[r];
    (*gs)[r] = s[r];
  }
}

/* Queues on rank r's stream the waits before its step S (see the top):
 * its predecessor's start or step S - 1 (the data it reads), and its
 * successor's step S - 1 (which has read what this step overwrites). */
static void ring_step_waits(ring *g, int r, int S) {
  int R = g->nranks, pred = (r + R - 1) % R, succ = (r + 1) % R;
  if (S == 0) {
    tfg_backend_event_wait(g->b[r], g->s[r], g->start[pred]);
    return;
  }
  tfg_backend_event_wait(g->b[r], g->s[r], g->step[pred * g->nsteps + S - 1]);
  if (succ != pred) tfg_backend_event_wait(g->b[r], g->s[r], g->step[succ * g->nsteps + S - 1]);
}

/* See the top for the schedule and why it is queued step by step. The
 * last reduce-scatter step multiplies by last_scale. */
static void ring_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                  double last_scale) {
  ring *g = ring_of(c);
  int R = g->nranks;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  if (R == 1) { /* the sum (and the mean) of one value is the value */
    TFG_ASSERT(last_scale == 1.0);
    return;
  }
  size_t *off = seg_offsets(counts, nseg);
  size_t n = off[nseg];
  if (n == 0) { /* nothing to reduce, so nothing to order either */
    free(off);
    return;
  }
  /* The element size from the graph's table, so an unsupported dtype still
   * reaches reduce_peer, which fails the streams (an error the caller
   * sees at synchronize) rather than an abort here. */
  layout L = {bufs, off, nseg, tfg_dtype_size(dt)};

  for (int r = 0; r < R; r++) tfg_backend_event_record(g->b[r], g->s[r], g->start[r]);
  for (int S = 0; S < g->nsteps; S++) {
    for (int r = 0; r < R; r++) {
      tfg_backend *b = g->b[r];
      tfg_stream *s = g->s[r];
      ring_step_waits(g, r, S);
      if (S < R - 1) /* reduce-scatter step s = S */
        queue_chunk(g, &L, r, ((r - S - 1) % R + R) % R, true, dt, S == R - 2 ? last_scale : 1.0);
      else /* all-gather step t = S - (R - 1) */
        queue_chunk(g, &L, r, ((r - (S - (R - 1))) % R + R) % R, false, dt, 1.0);
      tfg_backend_event_record(b, s, g->step[r * g->nsteps + S]);
    }
  }
  for (int r = 0; r < R; r++) {
    int succ = (r + 1) % R;
    tfg_backend_event_wait(g->b[r], g->s[r], g->step[succ * g->nsteps + g->nsteps - 1]);
  }
  free(off);
}

/* ---- the ring's reduce-scatter and all-gather (collective.h) ----
 * One phase of the ring each, on pieces: piece p of a call is piece p of
 * every segment (segment k's elements [p c_k / R, (p + 1) c_k / R)),
 * rank p's at the end. Step S = 0..R-2 of rank r takes piece
 * (r - S - 2) mod R (reduce-scatter: its predecessor's partial sum, which
 * its step S - 1 made; rank r's last step finishes piece r) or
 * (r - S - 1) mod R (all-gather: rank r - 1's own piece at step 0, then
 * what the predecessor received at S - 1), ordered by the all-reduce's
 * events (the first R - 1 step events). */

/* Asserts that every segment of counts splits into R equal pieces. */
static size_t pieces_total(const size_t *counts, int nseg, int R) {
  size_t n = 0;
  for (int k = 0; k < nseg; k++) {
    TFG_ASSERT(counts[k] % (size_t)R == 0);
    n += counts[k];
  }
  return n;
}

/* Queues on rank r's stream the step that takes piece p of every segment
 * from rank `from`: added into its own (times scale) or copied. */
static void queue_piece(tfg_backend *b, tfg_stream *s, tfg_backend *fb, void *const *bufs, const size_t *counts,
                        int nseg, int R, int r, int from, int p, bool reduce, tfg_dtype dt, double scale) {
  size_t es = tfg_dtype_size(dt);
  for (int k = 0; k < nseg; k++) {
    size_t per = counts[k] / (size_t)R;
    if (per == 0) continue;
    char *dst = (char *)bufs[(size_t)r * (size_t)nseg + (size_t)k] + (size_t)p * per * es;
    const char *src = (const char *)bufs[(size_t)from * (size_t)nseg + (size_t)k] + (size_t)p * per * es;
    if (reduce)
      tfg_backend_reduce_peer(b, s, dst, fb, src, per, dt, scale);
    else
      tfg_backend_copy_peer(b, s, dst, fb, src, per * es);
  }
}

static void ring_phase(ring *g, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt, bool reduce,
                       double last_scale) {
  int R = g->nranks;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  if (R == 1) {
    TFG_ASSERT(last_scale == 1.0);
    return;
  }
  if (pieces_total(counts, nseg, R) == 0) return;
  for (int r = 0; r < R; r++) tfg_backend_event_record(g->b[r], g->s[r], g->start[r]);
  for (int S = 0; S < R - 1; S++)
    for (int r = 0; r < R; r++) {
      tfg_backend *b = g->b[r];
      tfg_stream *s = g->s[r];
      int pred = (r + R - 1) % R;
      ring_step_waits(g, r, S);
      int p = ((r - S - (reduce ? 2 : 1)) % R + R) % R;
      queue_piece(b, s, g->b[pred], bufs, counts, nseg, R, r, pred, p, reduce, dt, S == R - 2 ? last_scale : 1.0);
      tfg_backend_event_record(b, s, g->step[r * g->nsteps + S]);
    }
  for (int r = 0; r < R; r++) /* the successor's last read of this rank's buffers */
    tfg_backend_event_wait(g->b[r], g->s[r], g->step[(r + 1) % R * g->nsteps + R - 2]);
}

static void ring_reduce_scatter(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                double scale) {
  ring_phase(ring_of(c), bufs, counts, nseg, dt, true, scale);
}

static void ring_all_gather(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt) {
  ring_phase(ring_of(c), bufs, counts, nseg, dt, false, 1.0);
}

/* The shared collective's all-gather: ranks that address each other's
 * memory copy every other rank's piece straight from it, each after the
 * others' start, and wait for the others' copies at the end (as the
 * shared all-reduce orders itself). Its reduce-scatter is its all-reduce,
 * whose result holds every piece on every rank. */
static void shared_all_gather(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt) {
  ring *g = ring_of(c);
  int R = g->nranks;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  if (R == 1 || pieces_total(counts, nseg, R) == 0) return;
  for (int r = 0; r < R; r++) tfg_backend_event_record(g->b[r], g->s[r], g->start[r]);
  for (int r = 0; r < R; r++) {
    for (int q = 0; q < R; q++)
      if (q != r) tfg_backend_event_wait(g->b[r], g->s[r], g->start[q]);
    for (int q = 0; q < R; q++)
      if (q != r) queue_piece(g->b[r], g->s[r], g->b[q], bufs, counts, nseg, R, r, q, q, false, dt, 1.0);
    tfg_backend_event_record(g->b[r], g->s[r], g->step[r]);
  }
  for (int r = 0; r < R; r++)
    for (int q = 0; q < R; q++)
      if (q != r) tfg_backend_event_wait(g->b[r], g->s[r], g->step[q]);
}

/* The ring's free, and the shared all-reduce's. Frees the events:
 * operations still queued on them keep them alive on backends that
 * refcount them (host), and on CUDA freeing an event with pending work
 * is allowed too, so the streams need not be drained. */
static void ring_free(tfg_coll *c) {
  if (!c) return;
  ring *g = ring_of(c);
  for (int r = 0; g->start && r < g->nranks; r++) {
    tfg_backend_event_free(g->b[r], g->start[r]);
    for (int S = 0; S < g->nsteps; S++) tfg_backend_event_free(g->b[r], g->step[r * g->nsteps + S]);
  }
  free(g->start);
  free(g->step);
  free(g->b);
  free(g->s);
  free(g);
  free(c);
}

static const tfg_coll_i ring_i = {.name = ring_name, .allreduce = allreduce_of_op,
                                   .allreduce_scaled = ring_allreduce_scaled, .reduce_scatter = ring_reduce_scatter,
                                   .all_gather = ring_all_gather, .free = ring_free};

/* A collective under the table i with the ring's state: nranks ranks
 * (b and s copied) whose calls take nsteps steps, and their events. */
static tfg_coll *ring_state_new(const tfg_coll_i *i, int nranks, tfg_backend *const *b, tfg_stream *const *s,
                                int nsteps) {
  ring *g = calloc(1, sizeof *g);
  TFG_ASSERT(g != NULL);
  g->nranks = nranks;
  g->nsteps = nsteps;
  copy_ranks(nranks, b, s, &g->b, &g->s);
  if (nranks > 1) { /* one rank queues nothing, so it needs no events */
    g->start = malloc((size_t)nranks * sizeof *g->start);
    g->step = malloc((size_t)nranks * (size_t)nsteps * sizeof *g->step);
    TFG_ASSERT(g->start && g->step);
    for (int r = 0; r < nranks; r++) {
      g->start[r] = tfg_backend_event_create(b[r]);
      for (int S = 0; S < nsteps; S++) g->step[r * nsteps + S] = tfg_backend_event_create(b[r]);
    }
  }
  return tfg_coll_new(i, nranks, g);
}

tfg_coll *tfg_coll_ring_new(int nranks, tfg_backend *const *b, tfg_stream *const *s) {
  TFG_ASSERT(nranks >= 1 && b && s);
  tfg_coll *c = ring_state_new(&ring_i, nranks, b, s, 2 * (nranks - 1));
  c->capturable = true; /* events, reduce_peer and copy_peer: what a capture holds */
  return c;
}

/* ---- the hierarchical all-reduce --------------------------------------------------
 * (collective.h gives the three phases.) Events, made once per
 * communicator and recorded again by every call, as in the ring: a
 * member's "start" (its data is ready: the leader may read it) and
 * "copied" (it has read the leader's result: the leader's buffer is its
 * own again), a leader's "ready" (its group's result is final). Each wait
 * is queued after the record it means in the same call, and before the
 * next call records that event again. */

typedef struct hier {
  int nranks, ngroups;
  tfg_backend **b;
  tfg_stream **s;
  int *lead;          /* [nranks]: the leader of rank r's group (r itself for a leader) */
  int *leaders;       /* [ngroups]: the leaders, in rank order */
  bool *has_members;  /* [nranks]: rank r leads a group of more than one */
  tfg_coll *inter;    /* among the leaders; NULL with one group in one process */
  tfg_event **start;  /* [nranks]: members' */
  tfg_event **copied; /* [nranks]: members' */
  tfg_event **ready;  /* [nranks]: leaders' of groups with members */
  char name[32];
} hier;

static const char *hier_name(tfg_coll *c) { return ((hier *)c->ctx)->name; }

/* Queues, on leader L's stream, its group's sum (see the top). With one
 * group the last addition of each segment multiplies by scale. */
static void hier_reduce_group(hier *h, int L, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                              double scale) {
  tfg_backend *lb = h->b[L];
  int last = L;
  for (int m = L + 1; m < h->nranks; m++)
    if (h->lead[m] == L) last = m;
  for (int m = L + 1; m <= last; m++) {
    if (h->lead[m] != L) continue;
    tfg_backend_event_wait(lb, h->s[L], h->start[m]);
    double sc = !h->inter && m == last ? scale : 1.0;
    for (int k = 0; k < nseg; k++)
      if (counts[k])
        tfg_backend_reduce_peer(lb, h->s[L], bufs[(size_t)L * (size_t)nseg + (size_t)k], h->b[m],
                                bufs[(size_t)m * (size_t)nseg + (size_t)k], counts[k], dt, sc);
  }
}

/* Whether h's groups are consecutive ranks, all of one size: then group
 * g's pieces are consecutive, one piece of the leaders' collective. */
static bool hier_blocked(const hier *h) {
  int m = h->nranks / h->ngroups;
  bool ok = h->ngroups * m == h->nranks;
  for (int r = 0; r < h->nranks && ok; r++) ok = h->lead[r] == r - r % m;
  return ok;
}

/* Leaders' buffers: segment k of leader g at [g * nseg + k] (malloc'ed). */
static void **leader_bufs(const hier *h, void *const *bufs, int nseg) {
  void **lbufs = malloc(((size_t)h->ngroups * (size_t)nseg + 1) * sizeof *lbufs);
  TFG_ASSERT(lbufs != NULL);
  for (int g = 0; g < h->ngroups; g++)
    for (int k = 0; k < nseg; k++)
      lbufs[(size_t)g * (size_t)nseg + (size_t)k] = bufs[(size_t)h->leaders[g] * (size_t)nseg + (size_t)k];
  return lbufs;
}

static void hier_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                  double scale) {
  hier *h = c->ctx;
  int R = h->nranks;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  size_t n = 0;
  for (int k = 0; k < nseg; k++) n += counts[k];
  if (R == 1 && !h->inter) {
    TFG_ASSERT(scale == 1.0);
    return;
  }
  if (n == 0) return;
  size_t esize = tfg_dtype_size(dt);
  /* 1. Members' data is ready; each leader sums its group. */
  for (int r = 0; r < R; r++)
    if (h->lead[r] != r) tfg_backend_event_record(h->b[r], h->s[r], h->start[r]);
  for (int g = 0; g < h->ngroups; g++)
    if (h->has_members[h->leaders[g]]) hier_reduce_group(h, h->leaders[g], bufs, counts, nseg, dt, scale);
  /* 2. The leaders' all-reduce of the groups' sums, scaled once. */
  if (h->inter) {
    void **lbufs = leader_bufs(h, bufs, nseg);
    h->inter->i.allreduce_scaled(h->inter, lbufs, counts, nseg, dt, scale);
    free(lbufs); /* the collectives resolve their pointers when they queue */
  }
  /* 3. Every member copies its leader's result; the leader waits for them. */
  for (int g = 0; g < h->ngroups; g++) {
    int L = h->leaders[g];
    if (h->has_members[L]) tfg_backend_event_record(h->b[L], h->s[L], h->ready[L]);
  }
  for (int m = 0; m < R; m++) {
    int L = h->lead[m];
    if (L == m) continue;
    tfg_backend *mb = h->b[m];
    tfg_backend_event_wait(mb, h->s[m], h->ready[L]);
    for (int k = 0; k < nseg; k++)
      if (counts[k])
        tfg_backend_copy_peer(mb, h->s[m], bufs[(size_t)m * (size_t)nseg + (size_t)k], h->b[L],
                              bufs[(size_t)L * (size_t)nseg + (size_t)k], counts[k] * esize);
    tfg_backend_event_record(mb, h->s[m], h->copied[m]);
  }
  for (int m = 0; m < R; m++) {
    int L = h->lead[m];
    if (L != m) tfg_backend_event_wait(h->b[L], h->s[L], h->copied[m]);
  }
}

static void hier_allreduce(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                           tfg_coll_op op) {
  double all = (double)c->nranks * (c->processes > 1 ? c->processes : 1); /* every rank of every process */
  hier_allreduce_scaled(c, bufs, counts, nseg, dt, op == TFG_COLL_MEAN ? 1.0 / all : 1.0);
}

/* Queues on rank `to`'s stream the copy of global rank (me R + r)'s
 * piece of every segment from rank `from`'s buffers into its own (pieces
 * of R P a segment: hier_reduce_scatter, hier_all_gather). */
static void hier_copy_piece(hier *h, void *const *bufs, const size_t *counts, int nseg, size_t es, int P, int me,
                            int r, int to, int from) {
  for (int k = 0; k < nseg; k++) {
    size_t per = counts[k] / ((size_t)h->nranks * (size_t)P), at = ((size_t)me * (size_t)h->nranks + (size_t)r) * per * es;
    if (per)
      tfg_backend_copy_peer(h->b[to], h->s[to], (char *)bufs[(size_t)to * (size_t)nseg + (size_t)k] + at, h->b[from],
                            (const char *)bufs[(size_t)from * (size_t)nseg + (size_t)k] + at, per * es);
  }
}

/* The last phase of the hierarchical collectives: each leader's result
 * is final (its "ready"), every member copies from it its own piece
 * (piece) or everything, and the leader waits for those copies. */
static void hier_copy_back(hier *h, void *const *bufs, const size_t *counts, int nseg, size_t es, int P, int me,
                           bool piece) {
  for (int g = 0; g < h->ngroups; g++) {
    int L = h->leaders[g];
    if (h->has_members[L]) tfg_backend_event_record(h->b[L], h->s[L], h->ready[L]);
  }
  for (int r = 0; r < h->nranks; r++) {
    int L = h->lead[r];
    if (L == r) continue;
    tfg_backend_event_wait(h->b[r], h->s[r], h->ready[L]);
    if (piece) hier_copy_piece(h, bufs, counts, nseg, es, P, me, r, r, L);
    for (int k = 0; k < nseg && !piece; k++)
      if (counts[k])
        tfg_backend_copy_peer(h->b[r], h->s[r], bufs[(size_t)r * (size_t)nseg + (size_t)k], h->b[L],
                              bufs[(size_t)L * (size_t)nseg + (size_t)k], counts[k] * es);
    tfg_backend_event_record(h->b[r], h->s[r], h->copied[r]);
  }
  for (int r = 0; r < h->nranks; r++)
    if (h->lead[r] != r) tfg_backend_event_wait(h->b[h->lead[r]], h->s[h->lead[r]], h->copied[r]);
}

/* The hierarchical reduce-scatter: with blocked groups, each leader sums
 * its group (phase 1 of the all-reduce), the leaders reduce-scatter the
 * sums (each leader's block: its group's pieces, scaled once), and each
 * member copies its own piece from its leader; else the all-reduce,
 * whose result holds every piece. */
static void hier_reduce_scatter(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                double scale) {
  hier *h = c->ctx;
  int R = h->nranks, P = c->processes > 1 ? c->processes : 1;
  if (!hier_blocked(h) || !h->inter) { /* one group in one process: its sum is the leader's, every piece */
    hier_allreduce_scaled(c, bufs, counts, nseg, dt, scale);
    return;
  }
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  if (pieces_total(counts, nseg, R * P) == 0) return;
  size_t es = tfg_dtype_size(dt);
  int me = c->processes > 1 ? c->process : 0;
  for (int r = 0; r < R; r++)
    if (h->lead[r] != r) tfg_backend_event_record(h->b[r], h->s[r], h->start[r]);
  for (int g = 0; g < h->ngroups; g++)
    if (h->has_members[h->leaders[g]]) hier_reduce_group(h, h->leaders[g], bufs, counts, nseg, dt, scale);
  void **lbufs = leader_bufs(h, bufs, nseg);
  h->inter->i.reduce_scatter(h->inter, lbufs, counts, nseg, dt, scale);
  free(lbufs);
  hier_copy_back(h, bufs, counts, nseg, es, P, me, true);
}

/* The hierarchical all-gather, blocked groups only: each leader takes its
 * members' pieces (after their start), the leaders all-gather those
 * blocks, and the members copy the whole result back, as the
 * all-reduce's third phase does. */
static void hier_all_gather(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt) {
  hier *h = c->ctx;
  int R = h->nranks, P = c->processes > 1 ? c->processes : 1;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  TFG_ASSERT(hier_blocked(h)); /* what the pieces need (collective.h) */
  if ((R == 1 && !h->inter) || pieces_total(counts, nseg, R * P) == 0) return;
  size_t es = tfg_dtype_size(dt);
  int me = c->processes > 1 ? c->process : 0; /* this process's place: its ranks' pieces follow earlier processes' */
  for (int r = 0; r < R; r++)
    if (h->lead[r] != r) tfg_backend_event_record(h->b[r], h->s[r], h->start[r]);
  for (int r = 0; r < R; r++) {
    if (h->lead[r] == r) continue;
    tfg_backend_event_wait(h->b[h->lead[r]], h->s[h->lead[r]], h->start[r]);
    hier_copy_piece(h, bufs, counts, nseg, es, P, me, r, h->lead[r], r);
  }
  if (h->inter) {
    void **lbufs = leader_bufs(h, bufs, nseg);
    h->inter->i.all_gather(h->inter, lbufs, counts, nseg, dt);
    free(lbufs);
  }
  hier_copy_back(h, bufs, counts, nseg, es, P, me, false);
}

/* Frees the leaders' collective and the events (queued work keeps what it
 * still needs alive, as in ring_free), then the arrays. */
static void hier_free(tfg_coll *c) {
  if (!c) return;
  hier *h = c->ctx;
  if (h->inter) h->inter->i.free(h->inter);
  for (int r = 0; r < h->nranks; r++) {
    tfg_event *ev[3] = {h->start[r], h->copied[r], h->ready[r]};
    for (int i = 0; i < 3; i++)
      if (ev[i]) tfg_backend_event_free(h->b[r], ev[i]);
  }
  void *arrays[] = {h->start, h->copied, h->ready, h->lead, h->leaders, h->has_members, h->b, h->s};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
  free(h);
  free(c);
}

static const tfg_coll_i hier_i = {.name = hier_name, .allreduce = hier_allreduce,
                                   .allreduce_scaled = hier_allreduce_scaled, .reduce_scatter = hier_reduce_scatter,
                                   .all_gather = hier_all_gather, .free = hier_free};

/* The hierarchical all-reduce; `outer`: its leaders' step spans
 * processes, so it runs even with one group. */
static tfg_coll *hier_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, const int *group,
                          tfg_coll_new_fn leaders, bool outer, tfg_strbuf *why) {
  TFG_ASSERT(nranks >= 1 && b && s && group && leaders);
  hier *h = calloc(1, sizeof *h);
  TFG_ASSERT(h != NULL);
  tfg_coll *c = tfg_coll_new(&hier_i, nranks, h);
  size_t R = (size_t)nranks;
  h->nranks = nranks;
  h->b = malloc(R * sizeof *h->b);
  h->s = malloc(R * sizeof *h->s);
  h->lead = malloc(R * sizeof *h->lead);
  h->leaders = malloc(R * sizeof *h->leaders);
  h->has_members = calloc(R, sizeof *h->has_members);
  h->start = calloc(R, sizeof *h->start);
  h->copied = calloc(R, sizeof *h->copied);
  h->ready = calloc(R, sizeof *h->ready);
  TFG_ASSERT(h->b && h->s && h->lead && h->leaders && h->has_members && h->start && h->copied && h->ready);
  for (int r = 0; r < nranks; r++) {
    h->b[r] = b[r];
    h->s[r] = s[r];
    h->lead[r] = r;
    for (int q = 0; q < r; q++)
      if (group[q] == group[r]) {
        h->lead[r] = q;
        break;
      }
    if (h->lead[r] == r)
      h->leaders[h->ngroups++] = r;
    else
      h->has_members[h->lead[r]] = true;
  }
  if (h->ngroups > 1 || outer) {
    tfg_backend **lb = malloc((size_t)h->ngroups * sizeof *lb);
    tfg_stream **ls = malloc((size_t)h->ngroups * sizeof *ls);
    TFG_ASSERT(lb && ls);
    for (int g = 0; g < h->ngroups; g++) {
      lb[g] = b[h->leaders[g]];
      ls[g] = s[h->leaders[g]];
    }
    h->inter = leaders(h->ngroups, lb, ls, why);
    free(lb);
    free(ls);
    if (!h->inter) {
      hier_free(c);
      return NULL;
    }
    TFG_ASSERT(h->inter->nranks == h->ngroups && h->inter->i.allreduce_scaled != NULL);
  }
  for (int r = 0; r < nranks; r++) {
    if (h->lead[r] != r) {
      h->start[r] = tfg_backend_event_create(b[r]);
      h->copied[r] = tfg_backend_event_create(b[r]);
    } else if (h->has_members[r]) {
      h->ready[r] = tfg_backend_event_create(b[r]);
    }
  }
  snprintf(h->name, sizeof h->name, "hier+%s", h->inter ? h->inter->i.name(h->inter) : "none");
  c->processes = h->inter ? h->inter->processes : 1;
  c->process = h->inter ? h->inter->process : 0;
  return c;
}

tfg_coll *tfg_coll_hier_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, const int *group,
                            tfg_coll_new_fn leaders, tfg_strbuf *why) {
  return hier_new(nranks, b, s, group, leaders, false, why);
}

tfg_coll *tfg_coll_hier_outer_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, const int *group,
                                  tfg_coll_new_fn leaders, tfg_strbuf *why) {
  return hier_new(nranks, b, s, group, leaders, true, why);
}

/* ---- the shared all-reduce ----------------------------------------------------- */

/* Ranks whose buffers one backend addresses directly (logical devices of
 * one GPU, host devices) need no ring of copies: the buffer (the
 * concatenation of a rank's segments, as the ring's) is cut into R
 * chunks, and rank r's stream runs one reduce_all over chunk r of every
 * rank's buffer (one per piece inside a segment): it reads the chunk from
 * each, sums in rank order, scales once and writes the result to each.
 * Every element is read R times and written R times, once each, in one
 * step; the ring moves it 2 (R - 1) times in as many dependent steps.
 * Every rank ends with the same bits (the sum's order is the ranks',
 * whichever rank computes the chunk); with two ranks they are the ring's.
 *
 * Ordering: every rank records "start", then rank r waits for every other
 * rank's start (their buffers hold what their streams computed), runs its
 * chunk and records "done"; at the end rank r waits for every other
 * rank's done (they wrote into its buffer and read it): its buffers are
 * its own again, as after the ring. Its state is the ring's, with one
 * step: rank r's "done" is its step[r]. */

static const char *shared_name(tfg_coll *c) {
  (void)c;
  return "shared";
}

/* Chunk c's first element, moved back to a multiple of 16 bytes from the
 * start of its segment (chunks stay in order and cover the buffer), so
 * that a piece starts where its segment's alignment puts it and a
 * kernel can take 16 bytes at a time. Which rank sums which elements
 * changes nothing in the result: every sum is in rank order. */
static size_t aligned_begin(const layout *L, size_t n, int nranks, int c) {
  size_t e = chunk_begin(n, nranks, c), per = L->esize < 16 ? 16 / L->esize : 1;
  if (e == 0 || e >= n) return e;
  size_t s0 = L->off[seg_of(L, e)];
  return s0 + (e - s0) / per * per;
}

static void shared_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                    double scale) {
  ring *g = ring_of(c);
  int R = g->nranks;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  if (R == 1) {
    TFG_ASSERT(scale == 1.0);
    return;
  }
  size_t *off = seg_offsets(counts, nseg);
  size_t n = off[nseg];
  if (n == 0) {
    free(off);
    return;
  }
  layout L = {bufs, off, nseg, tfg_dtype_size(dt)};
  for (int r = 0; r < R; r++) tfg_backend_event_record(g->b[r], g->s[r], g->start[r]);
  for (int r = 0; r < R; r++) {
    tfg_backend *b = g->b[r];
    for (int q = 0; q < R; q++)
      if (q != r) tfg_backend_event_wait(b, g->s[r], g->start[q]);
    size_t lo = aligned_begin(&L, n, R, r), hi = aligned_begin(&L, n, R, r + 1);
    for (size_t e = lo; e < hi;) {
      int k = seg_of(&L, e);
      size_t end = off[k + 1] < hi ? off[k + 1] : hi;
      void *ptrs[TFG_REDUCE_ALL_MAX];
      for (int q = 0; q < R; q++) ptrs[q] = elem_ptr(&L, q, k, e);
      tfg_backend_reduce_all(b, g->s[r], ptrs, R, end - e, dt, scale);
      e = end;
    }
    tfg_backend_event_record(b, g->s[r], g->step[r]);
  }
  for (int r = 0; r < R; r++)
    for (int q = 0; q < R; q++)
      if (q != r) tfg_backend_event_wait(g->b[r], g->s[r], g->step[q]);
  free(off);
}

static const tfg_coll_i shared_i = {.name = shared_name, .allreduce = allreduce_of_op,
                                     .allreduce_scaled = shared_allreduce_scaled, .reduce_scatter = shared_allreduce_scaled,
                                     .all_gather = shared_all_gather, .free = ring_free};

tfg_coll *tfg_coll_shared_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  TFG_ASSERT(nranks >= 1 && b && s);
  if (nranks > TFG_REDUCE_ALL_MAX) {
    tfg_strbuf_printf(why, "the shared all-reduce takes at most %d ranks, not %d", TFG_REDUCE_ALL_MAX, nranks);
    return NULL;
  }
  for (int r = 0; r < nranks; r++)
    if (!tfg_backend_get_caps(b[r])->reduce_all) {
      tfg_strbuf_printf(why, "%s's backend has no reduce_all", tfg_backend_device(b[r])->name);
      return NULL;
    }
  return ring_state_new(&shared_i, nranks, b, s, 1);
}

tfg_coll *tfg_coll_new(const tfg_coll_i *i, int nranks, void *ctx) {
  tfg_coll *c = calloc(1, sizeof *c);
  TFG_ASSERT(c != NULL);
  c->i = *i;
  c->nranks = nranks;
  c->ctx = ctx;
  return c;
}

/* ---- the choice ------------------------------------------------------------------ */

const char *tfg_coll_algo_name(tfg_coll_algo a) {
  switch (a) {
  case TFG_COLL_ALGO_RING: return "ring";
  case TFG_COLL_ALGO_NCCL: return "nccl";
  case TFG_COLL_ALGO_HIER: return "hier";
  case TFG_COLL_ALGO_SHARED: return "shared";
  case TFG_COLL_ALGO_REFUSED: return "refused";
  }
  return "?";
}

static bool on_host(const tfg_device *d) { return d->kind == TFG_DEVICE_CPU || d->kind == TFG_DEVICE_HOST; }

tfg_coll_algo tfg_coll_choose(int nranks, const tfg_device *const *dev, bool nccl, tfg_coll_algo *leaders,
                              tfg_strbuf *why) {
  TFG_ASSERT(nranks >= 1 && dev);
  tfg_coll_algo a = TFG_COLL_ALGO_RING, inter = TFG_COLL_ALGO_RING;
  const tfg_device *host = NULL, *gpu = NULL;
  for (int r = 0; r < nranks; r++) {
    if (dev[r]->kind == TFG_DEVICE_SIM) {
      tfg_strbuf_printf(why, "%s is a sim device (%s), for tfg place and tfg plan only", dev[r]->name,
                        dev[r]->hardware);
      a = TFG_COLL_ALGO_REFUSED;
      goto done;
    }
    if (on_host(dev[r]) && !host) host = dev[r];
    if (dev[r]->kind == TFG_DEVICE_CUDA && !gpu) gpu = dev[r];
  }
  if (nranks == 1 || !gpu) goto done; /* one rank is a no-op; host devices: the ring */
  if (host) {
    tfg_strbuf_printf(why,
                      "%s is a host device (%s) and %s a CUDA device (%s): no collective spans the two kinds "
                      "(put every rank of the group on host devices, or every one on GPUs)",
                      host->name, host->hardware, gpu->name, gpu->hardware);
    a = TFG_COLL_ALGO_REFUSED;
    goto done;
  }
  /* All CUDA: how many physical GPUs, and whether one holds several ranks. */
  int gpus = 0;
  for (int r = 0; r < nranks; r++) {
    bool first = true;
    for (int q = 0; q < r && first; q++) first = dev[q]->physical != dev[r]->physical;
    gpus += first;
  }
  if (gpus == 1) /* logical devices of one GPU (NCCL refuses two ranks on one GPU): one kernel over their memory */
    a = nranks <= TFG_REDUCE_ALL_MAX ? TFG_COLL_ALGO_SHARED : TFG_COLL_ALGO_RING;
  else if (gpus == nranks) /* one rank per GPU; without NCCL the ring, over peer access */
    a = nccl ? TFG_COLL_ALGO_NCCL : TFG_COLL_ALGO_RING;
  else {
    a = TFG_COLL_ALGO_HIER;
    inter = nccl ? TFG_COLL_ALGO_NCCL : TFG_COLL_ALGO_RING;
  }
done:
  if (leaders) *leaders = a == TFG_COLL_ALGO_HIER ? inter : a;
  return a;
}
