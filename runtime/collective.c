/* runtime/collective.c: the built-in ring all-reduce (runtime/collective.h),
 * written only against the backend vtable (reduce_peer, copy_peer and
 * events), so the same code drives host devices and, later, logical
 * devices sharing one GPU.
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
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/collective.h"

typedef struct ring {
  int nranks;
  tfg_backend **b;
  tfg_stream **s;
  tfg_event **start; /* start[r]: recorded on s[r] when a call begins */
  tfg_event **step;  /* step[r * nsteps + S]: rank r's step S is done */
  int nsteps;        /* 2 (nranks - 1) */
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
      b->i.reduce_peer(b, g->s[r], dst, pb, src, end - e, dt, scale);
    else
      b->i.copy_peer(b, g->s[r], dst, pb, src, (end - e) * L->esize);
    e = end;
  }
}

/* See the top for the schedule and why it is queued step by step. */
static void ring_allreduce(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                           tfg_coll_op op) {
  ring *g = ring_of(c);
  int R = g->nranks;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  if (R == 1) return; /* the sum (and the mean) of one value is the value */
  size_t *off = malloc(((size_t)nseg + 1) * sizeof *off);
  TFG_ASSERT(off != NULL);
  off[0] = 0;
  for (int k = 0; k < nseg; k++) off[k + 1] = off[k] + counts[k];
  size_t n = off[nseg];
  if (n == 0) { /* nothing to reduce, so nothing to order either */
    free(off);
    return;
  }
  /* The element size from the graph's table, so an unsupported dtype still
   * reaches reduce_peer, which fails the streams (an error the caller
   * sees at synchronize) rather than an abort here. */
  layout L = {bufs, off, nseg, tfg_dtype_size(dt)};
  double last_scale = op == TFG_COLL_MEAN ? 1.0 / R : 1.0;

  for (int r = 0; r < R; r++) g->b[r]->i.event_record(g->b[r], g->s[r], g->start[r]);
  for (int S = 0; S < g->nsteps; S++) {
    for (int r = 0; r < R; r++) {
      tfg_backend *b = g->b[r];
      tfg_stream *s = g->s[r];
      int pred = (r + R - 1) % R, succ = (r + 1) % R;
      if (S == 0) {
        b->i.event_wait(b, s, g->start[pred]);
      } else {
        b->i.event_wait(b, s, g->step[pred * g->nsteps + S - 1]);
        if (succ != pred) b->i.event_wait(b, s, g->step[succ * g->nsteps + S - 1]);
      }
      if (S < R - 1) /* reduce-scatter step s = S */
        queue_chunk(g, &L, r, ((r - S - 1) % R + R) % R, true, dt, S == R - 2 ? last_scale : 1.0);
      else /* all-gather step t = S - (R - 1) */
        queue_chunk(g, &L, r, ((r - (S - (R - 1))) % R + R) % R, false, dt, 1.0);
      b->i.event_record(b, s, g->step[r * g->nsteps + S]);
    }
  }
  for (int r = 0; r < R; r++) {
    int succ = (r + 1) % R;
    g->b[r]->i.event_wait(g->b[r], g->s[r], g->step[succ * g->nsteps + g->nsteps - 1]);
  }
  free(off);
}

/* Frees the events: operations still queued on them keep them alive on
 * backends that refcount them (host), and on CUDA freeing an event with
 * pending work is allowed too, so the streams need not be drained. */
static void ring_free(tfg_coll *c) {
  if (!c) return;
  ring *g = ring_of(c);
  for (int r = 0; r < g->nranks; r++) {
    if (g->start) g->b[r]->i.event_free(g->b[r], g->start[r]);
    for (int S = 0; S < g->nsteps; S++) g->b[r]->i.event_free(g->b[r], g->step[r * g->nsteps + S]);
  }
  free(g->start);
  free(g->step);
  free(g->b);
  free(g->s);
  free(g);
  free(c);
}

static const tfg_coll_i ring_i = {
    .name = ring_name,
    .allreduce = ring_allreduce,
    .free = ring_free,
};

tfg_coll *tfg_coll_ring_new(int nranks, tfg_backend *const *b, tfg_stream *const *s) {
  TFG_ASSERT(nranks >= 1 && b && s);
  tfg_coll *c = calloc(1, sizeof *c);
  ring *g = calloc(1, sizeof *g);
  TFG_ASSERT(c && g);
  g->nranks = nranks;
  g->nsteps = 2 * (nranks - 1);
  g->b = malloc((size_t)nranks * sizeof *g->b);
  g->s = malloc((size_t)nranks * sizeof *g->s);
  TFG_ASSERT(g->b && g->s);
  for (int r = 0; r < nranks; r++) {
    g->b[r] = b[r];
    g->s[r] = s[r];
  }
  if (nranks > 1) { /* one rank queues nothing, so it needs no events */
    g->start = malloc((size_t)nranks * sizeof *g->start);
    g->step = malloc((size_t)nranks * (size_t)g->nsteps * sizeof *g->step);
    TFG_ASSERT(g->start && g->step);
    for (int r = 0; r < nranks; r++) {
      g->start[r] = b[r]->i.event_create(b[r]);
      for (int S = 0; S < g->nsteps; S++) g->step[r * g->nsteps + S] = b[r]->i.event_create(b[r]);
    }
  }
  c->i = ring_i;
  c->nranks = nranks;
  c->ctx = g;
  return c;
}
