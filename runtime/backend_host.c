/* runtime/backend_host.c: the `host` backend: a GPU-like device emulated
 * on the CPU, behind the vtable of runtime/backend.h.
 *
 * Scheduling. Each backend has one worker thread, and a stream is a FIFO
 * queue of operations (launch, copy, reduce, record, wait) that the
 * worker drains. The worker serves the backend's streams round robin, one
 * operation per stream per turn, skipping a stream whose head is a wait on an event not
 * yet done: a blocked stream never holds up the backend's other streams,
 * so a copy stream and a compute stream of one device interleave with
 * CUDA's ordering rules (in order within a stream; across streams only
 * through events). One worker per device, not per stream, because a host
 * device stands for one GPU: its streams share its compute, and the
 * kernels themselves fan out over kctx->pool. Operations run outside the
 * backend's lock; the caller's thread only queues.
 *
 * Events are objects shared by every backend (runtime/event.c: a
 * record on one backend's stream may release a wait on another's, a CUDA
 * backend's included). An event counts the
 * records issued (event_record calls) and remembers the most recent
 * generation whose record has run. event_record issues generation g =
 * ++issued and queues "mark g done"; event_wait captures g = issued at
 * the call and queues "wait until g is done". So a wait waits for the most
 * recent record issued before the wait was queued, an event is recorded
 * again each step without being reset, and a wait on an event never
 * recorded is a no-op (as cudaStreamWaitEvent). Records of one event on
 * two streams may run out of order; a wait is then released by any record
 * at least as recent as its own. Because a wait only ever names a record
 * already queued, and queues are FIFO, waits cannot form a cycle: every
 * queued operation eventually runs, which is what lets stream_free and
 * destroy drain instead of cancelling.
 *
 * A wait for a record that a GPU's stream issued (last_gpu >= 0) first
 * asks the CUDA side to complete that generation here once the GPU has
 * reached it (tfg_event_latest's export); the worker then waits for it
 * like any other. A copy or reduction whose source is a GPU's memory
 * (src_b not is_host) reads it with read_now when its turn comes,
 * after the waits that ordered it.
 *
 * A worker never sleeps on an event (that would stall its other streams).
 * When the head of one of its streams is a wait on an event not yet done,
 * it puts itself on the event's waiter list; the worker that runs the
 * record wakes every backend on that list through the backend's own
 * condition variable. Lock order: an event's mutex, then a backend's;
 * a worker never takes an event's mutex while holding its backend's
 * (it reads the done generation atomically), so there is no cycle.
 *
 * Failures (backend.h): the first operation that fails on a stream (a
 * kernel returning an error, the injected fault, a reduction of a dtype
 * it cannot add) records its status and message on the stream; the
 * failure is sticky. Later launches, copies and reductions on that stream
 * are skipped, and every synchronize returns it. A skipped record still
 * marks its event done, so no other stream waits forever, and carries the
 * failure: a stream whose wait is released by a failed record fails with
 * the same status and message, which is how an error on one device stops
 * the devices downstream of it promptly.
 *
 * Fault injection (the test hook of backend.h): the switches fault_device
 * and fault_after are read when a backend is created
 * (tfg_backend_host_new_with), not later. On a backend whose device index is
 * fault_device, the fault_after-th call to launch (counted from 1
 * in call order, over all its streams) does not run its kernel and fails
 * its stream with TFG_ERR_DEVICE. Each backend counts its own launches.
 *
 * Reductions (reduce_peer) run on the worker like a copy: one loop over
 * the elements that the compiler vectorizes. No thread pool: a ring
 * all-reduce keeps every device's worker busy at once, so the devices
 * already use the cores in parallel. A dtype other than f32 or f64 fails
 * the stream when the operation's turn comes, like a failing kernel.
 *
 * Tracing (set_trace). The worker records each operation it runs as a
 * slice of the trace: process = the device's index, thread = the stream's
 * creation index on this backend. Kernels are named by their op, copies
 * "copy" / "h2d" / "d2h", reductions "reduce"; records and waits that did
 * not block leave no slice, and a wait that did block leaves a "wait"
 * slice from the scan that first found it blocked to its release (the
 * time the worker ran it). Skipped operations of a failed stream and the
 * injected fault leave none: nothing ran. The trace pointer lives under
 * the backend's lock, which the worker holds anyway when it picks an
 * operation, so an untraced run pays one pointer test per operation. The
 * worker notes which trace its running operation records into, and
 * set_trace waits until that operation has finished before returning, so
 * a caller may free the old trace as soon as set_trace(b, NULL) returns. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"
#include "runtime/backend_fault.h"
#include "runtime/backend_impl.h"
#include "runtime/event.h"
#include "runtime/mem.h"
#include "runtime/trace.h"

typedef struct host_backend host_backend;

typedef enum host_op_kind {
  HOST_OP_LAUNCH,
  HOST_OP_COPY,
  HOST_OP_REDUCE,
  HOST_OP_REDUCE_ALL,
  HOST_OP_RECORD,
  HOST_OP_WAIT
} host_op_kind;

/* What a copy's trace slice is called (copy_from_host, copy_to_host and
 * copy_peer are one operation otherwise). */
typedef enum host_copy_dir { HOST_COPY_PEER, HOST_COPY_H2D, HOST_COPY_D2H } host_copy_dir;

typedef struct host_op {
  struct host_op *next;
  host_op_kind kind;
  bool fault;      /* LAUNCH: the injected fault fires here instead of the kernel */
  bool registered; /* WAIT: this backend is on the event's waiter list (worker only) */
  /* WAIT, while tracing: when the worker first found it blocked (0: not
   * found blocked, or not traced then); under the backend's lock. */
  double blocked_at;
  union {
    struct {
      tfg_kernel_fn fn;
      tfg_kernel_ctx *ctx;
      const tfg_node *node;
      const tfg_tensor *in;
      tfg_tensor *out;
    } launch;
    struct {
      void *dst;
      const void *src;
      size_t bytes;
      host_copy_dir dir;
      tfg_backend *src_b; /* the source's backend; NULL: host memory given by the caller */
    } copy;
    struct {
      void *dst;
      const void *src;
      size_t count;
      tfg_dtype dt;
      double scale;
      tfg_backend *src_b;
    } reduce;
    struct {
      void *bufs[TFG_REDUCE_ALL_MAX];
      int n;
      size_t count;
      tfg_dtype dt;
      double scale;
    } reduce_all;
    struct {
      tfg_event *e; /* holds a reference until the operation has run */
      uint64_t gen;
    } ev;
  } u;
} host_op;

struct tfg_stream {
  host_backend *hb;
  int index;             /* creation order on hb: the trace's thread id */
  host_op *head, *tail;  /* under hb->mu */
  uint64_t queued, done; /* operations queued and finished, ever; under hb->mu */
  /* The first failure, sticky. Written only by the worker, under hb->mu,
   * so the worker may read them without the lock. */
  tfg_status status;
  tfg_strbuf err;
  bool here;             /* the failure began on this stream (not through a wait) */
};

struct host_backend {
  tfg_backend base;
  pthread_mutex_t mu;
  pthread_cond_t wake; /* to the worker: work queued, an awaited event done, quit */
  pthread_cond_t idle; /* from the worker: an operation finished */
  /* Bumped with every signal of wake: the worker compares it before
   * sleeping, so a signal sent while it scanned without the lock (or
   * registered on an event) is never lost. */
  uint64_t wake_seq;
  /* Signals cost a system call when nobody waits: the worker's wake is
   * signalled only while it sleeps, idle only while someone waits on it
   * (both under mu). Per-op signalling was most of a small step's time. */
  bool sleeping;
  int idle_waiters;
  bool quit;
  pthread_t thread;
  tfg_stream **streams;
  size_t nstreams, streams_cap;
  size_t rr;       /* the stream the next scan starts from */
  host_op *spare;  /* recycled operation records */
  tfg_mem_pool *pool;
  int64_t launches;    /* launch calls so far, for the fault hook */
  int64_t fault_after; /* 0: no fault on this backend */
  char fault_msg[96];
  tfg_strbuf scratch; /* the worker's message of the operation it runs */
  int streams_created; /* stream_create calls so far: the next stream's index */
  /* Tracing (see the top): the trace new operations record into, and the
   * one the operation running now records into (NULL: none); under mu. */
  tfg_trace *trace;
  tfg_trace *trace_busy;
  tfg_event_waiter waiter; /* on the waiter list of each event a stream is blocked on */
};

static host_backend *host_of(tfg_backend *b) { return b->ctx; }

/* ---- events ---------------------------------------------------------------
 * The event object is shared with the CUDA backend (runtime/event.c); a
 * worker waits on one through hb->waiter, whose wake is this. It runs
 * under the event's lock, which is why a worker never takes an event's
 * lock while holding its backend's. */

static void host_wake(tfg_event_waiter *w) {
  host_backend *hb = (host_backend *)((char *)w - offsetof(host_backend, waiter));
  pthread_mutex_lock(&hb->mu);
  hb->wake_seq++;
  if (hb->sleeping) pthread_cond_signal(&hb->wake);
  pthread_mutex_unlock(&hb->mu);
}

/* ---- the worker ----------------------------------------------------------- */

static bool op_blocked(const tfg_stream *s, const host_op *op) {
  return op->kind == HOST_OP_WAIT && s->status == TFG_OK && !tfg_event_is_done(op->u.ev.e, op->u.ev.gen);
}

/* Under hb->mu: the next stream, round robin from hb->rr, whose head
 * operation can run, or NULL. *unregistered gets a blocked wait that is
 * not yet on its event's waiter list, if any. While tracing, a blocked
 * wait seen for the first time gets the time its "wait" slice starts. */
static tfg_stream *pick_stream(host_backend *hb, host_op **unregistered) {
  size_t n = hb->nstreams;
  for (size_t k = 0; k < n; k++) {
    size_t i = (hb->rr + k) % n;
    tfg_stream *s = hb->streams[i];
    host_op *op = s->head;
    if (!op) continue;
    if (op_blocked(s, op)) {
      if (!op->registered && !*unregistered) *unregistered = op;
      if (hb->trace && op->blocked_at == 0) op->blocked_at = tfg_trace_now();
      continue;
    }
    hb->rr = (i + 1) % n;
    return s;
  }
  return NULL;
}

static bool all_drained(const host_backend *hb) {
  for (size_t i = 0; i < hb->nstreams; i++)
    if (hb->streams[i]->head) return false;
  return true;
}

/* dst[i] = (dst[i] + src[i]) * scale, in f32 or f64. The restrict loops
 * are used only when the ranges are disjoint (restrict promises it), the
 * plain loop otherwise (dst == src, which stays exact elementwise). They
 * go in blocks of REDUCE_BLOCK elements because GCC's -O2 cost model
 * vectorizes a loop of a known trip count but not one of n elements
 * (it would need a scalar epilogue); the remainder runs scalar. scale 1
 * does not multiply, so a sum is exactly the sum. */
#define REDUCE_BLOCK 16

#define DEFINE_REDUCE(T, SFX)                                                        \
  static void reduce_##SFX(T *restrict d, const T *restrict x, size_t n, T scale) {  \
    size_t i = 0;                                                                    \
    if (scale == (T)1) {                                                             \
      for (; i + REDUCE_BLOCK <= n; i += REDUCE_BLOCK)                               \
        for (size_t k = 0; k < REDUCE_BLOCK; k++) d[i + k] = d[i + k] + x[i + k];    \
      for (; i < n; i++) d[i] = d[i] + x[i];                                         \
    } else {                                                                         \
      for (; i + REDUCE_BLOCK <= n; i += REDUCE_BLOCK)                               \
        for (size_t k = 0; k < REDUCE_BLOCK; k++)                                    \
          d[i + k] = (d[i + k] + x[i + k]) * scale;                                  \
      for (; i < n; i++) d[i] = (d[i] + x[i]) * scale;                               \
    }                                                                                \
  }
DEFINE_REDUCE(float, f32)
DEFINE_REDUCE(double, f64)

static void reduce_f32_alias(float *d, const float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) d[i] = scale == 1.0f ? d[i] + x[i] : (d[i] + x[i]) * scale;
}

static void reduce_f64_alias(double *d, const double *x, size_t n, double scale) {
  for (size_t i = 0; i < n; i++) d[i] = scale == 1.0 ? d[i] + x[i] : (d[i] + x[i]) * scale;
}

/* f16 and bf16 buffers (a mirrored model with 16-bit params) reduce as
 * NCCL reduces them: each element widened to f32 (exact), (d + x) * scale
 * in f32, rounded once to the 16-bit format (to nearest even). One loop
 * serves aliased and disjoint ranges: each element is read before it is
 * written. */
static void reduce_half(tfg_dtype dt, uint16_t *d, const uint16_t *x, size_t n, float scale) {
  bool bf = dt == TFG_DTYPE_BF16;
  for (size_t i = 0; i < n; i++) {
    float a = bf ? tfg_cast_bf16_to_f32(d[i]) : tfg_cast_f16_to_f32(d[i]);
    float b = bf ? tfg_cast_bf16_to_f32(x[i]) : tfg_cast_f16_to_f32(x[i]);
    float r = scale == 1.0f ? a + b : (a + b) * scale;
    d[i] = bf ? tfg_cast_f32_to_bf16(r) : tfg_cast_f32_to_f16(r);
  }
}

/* Runs a HOST_OP_REDUCE. Returns TFG_ERR_DEVICE with a message in *msg for
 * a dtype it cannot add. */
static tfg_status run_reduce(const host_op *op, tfg_strbuf *msg) {
  void *d = op->u.reduce.dst;
  const void *x = op->u.reduce.src;
  size_t n = op->u.reduce.count, es;
  switch (op->u.reduce.dt) {
  case TFG_DTYPE_F32: es = sizeof(float); break;
  case TFG_DTYPE_F64: es = sizeof(double); break;
  case TFG_DTYPE_F16:
  case TFG_DTYPE_BF16: es = sizeof(uint16_t); break;
  default:
    tfg_strbuf_printf(msg, "reduce_peer: cannot reduce %s elements (the host backend reduces float dtypes)",
                      tfg_dtype_name(op->u.reduce.dt));
    return TFG_ERR_DEVICE;
  }
  if (n == 0) return TFG_OK;
  void *staged = NULL;
  tfg_backend *sb = op->u.reduce.src_b;
  if (sb && !tfg_backend_is_host(sb)) {
    /* The source is a GPU's: bring it over first (read_now orders
     * nothing; the caller ordered the source side with an event). */
    staged = malloc(n * es);
    TFG_ASSERT(staged != NULL);
    tfg_status st = tfg_backend_read_now(sb, staged, x, n * es, msg);
    if (st != TFG_OK) {
      free(staged);
      return st;
    }
    x = staged;
  }
  const char *dc = d, *xc = x;
  bool disjoint = dc + n * es <= xc || xc + n * es <= dc;
  if (op->u.reduce.dt == TFG_DTYPE_F16 || op->u.reduce.dt == TFG_DTYPE_BF16) {
    reduce_half(op->u.reduce.dt, d, x, n, (float)op->u.reduce.scale);
  } else if (op->u.reduce.dt == TFG_DTYPE_F32) {
    float sc = (float)op->u.reduce.scale;
    if (disjoint)
      reduce_f32(d, x, n, sc);
    else
      reduce_f32_alias(d, x, n, sc);
  } else {
    double sc = op->u.reduce.scale;
    if (disjoint)
      reduce_f64(d, x, n, sc);
    else
      reduce_f64_alias(d, x, n, sc);
  }
  free(staged);
  return TFG_OK;
}

/* reduce_all's sums (backend.h) a tile at a time: the tile's sum over
 * the buffers in order, in T, then one multiply when scale is not 1, then
 * the tile written to every buffer. A tile is read from every buffer
 * before any of it is written, so the buffers may be read and written in
 * any order otherwise. */
enum { REDUCE_ALL_TILE = 512 };

#define DEFINE_REDUCE_ALL(T, SFX)                                                    \
  static void reduce_all_##SFX(void *const *bufs, int n, size_t count, T scale) {    \
    T acc[REDUCE_ALL_TILE];                                                          \
    for (size_t i0 = 0; i0 < count; i0 += REDUCE_ALL_TILE) {                         \
      size_t m = count - i0 < REDUCE_ALL_TILE ? count - i0 : REDUCE_ALL_TILE;        \
      memcpy(acc, (const T *)bufs[0] + i0, m * sizeof(T));                           \
      for (int r = 1; r < n; r++) {                                                  \
        const T *x = (const T *)bufs[r] + i0;                                        \
        for (size_t k = 0; k < m; k++) acc[k] = acc[k] + x[k];                       \
      }                                                                              \
      if (scale != (T)1)                                                             \
        for (size_t k = 0; k < m; k++) acc[k] = acc[k] * scale;                      \
      for (int r = 0; r < n; r++) memcpy((T *)bufs[r] + i0, acc, m * sizeof(T));     \
    }                                                                                \
  }
DEFINE_REDUCE_ALL(float, f32)
DEFINE_REDUCE_ALL(double, f64)

/* f16 and bf16 as reduce_half: widened, summed and scaled in f32, each
 * element rounded once. */
static void reduce_all_half(tfg_dtype dt, void *const *bufs, int n, size_t count, float scale) {
  bool bf = dt == TFG_DTYPE_BF16;
  for (size_t i = 0; i < count; i++) {
    float acc = 0;
    for (int r = 0; r < n; r++) {
      uint16_t h = ((const uint16_t *)bufs[r])[i];
      float x = bf ? tfg_cast_bf16_to_f32(h) : tfg_cast_f16_to_f32(h);
      acc = r ? acc + x : x;
    }
    if (scale != 1.0f) acc = acc * scale;
    uint16_t out = bf ? tfg_cast_f32_to_bf16(acc) : tfg_cast_f32_to_f16(acc);
    for (int r = 0; r < n; r++) ((uint16_t *)bufs[r])[i] = out;
  }
}

static tfg_status run_reduce_all(const host_op *op, tfg_strbuf *msg) {
  void *const *bufs = op->u.reduce_all.bufs;
  int n = op->u.reduce_all.n;
  size_t count = op->u.reduce_all.count;
  switch (op->u.reduce_all.dt) {
  case TFG_DTYPE_F32: reduce_all_f32(bufs, n, count, (float)op->u.reduce_all.scale); return TFG_OK;
  case TFG_DTYPE_F64: reduce_all_f64(bufs, n, count, op->u.reduce_all.scale); return TFG_OK;
  case TFG_DTYPE_F16:
  case TFG_DTYPE_BF16: reduce_all_half(op->u.reduce_all.dt, bufs, n, count, (float)op->u.reduce_all.scale); return TFG_OK;
  default:
    tfg_strbuf_printf(msg, "reduce_all: cannot reduce %s elements (the host backend reduces float dtypes)",
                      tfg_dtype_name(op->u.reduce_all.dt));
    return TFG_ERR_DEVICE;
  }
}

/* Runs op of stream s without the backend's lock. skip: s has failed.
 * Returns the failure the operation causes (its message in hb->scratch)
 * or TFG_OK. */
static tfg_status run_op(host_backend *hb, tfg_stream *s, host_op *op, bool skip) {
  tfg_status st = TFG_OK;
  tfg_strbuf_clear(&hb->scratch);
  switch (op->kind) {
  case HOST_OP_LAUNCH: {
    if (skip) break;
    if (op->fault) {
      tfg_strbuf_puts(&hb->scratch, hb->fault_msg);
      st = TFG_ERR_DEVICE;
      break;
    }
    tfg_kernel_ctx *ctx = op->u.launch.ctx;
    /* A stale message from an earlier failure must not be reported for a
     * kernel that fails without one. */
    tfg_strbuf_clear(&ctx->err);
    st = op->u.launch.fn(ctx, op->u.launch.node, op->u.launch.in, op->u.launch.out);
    if (st != TFG_OK) {
      if (ctx->err.len)
        tfg_strbuf_puts(&hb->scratch, ctx->err.data);
      else
        tfg_strbuf_printf(&hb->scratch, "kernel failed: %s", tfg_status_str(st));
    }
    break;
  }
  case HOST_OP_COPY: {
    if (skip || !op->u.copy.bytes) break;
    tfg_backend *sb = op->u.copy.src_b;
    if (sb && !tfg_backend_is_host(sb))
      st = tfg_backend_read_now(sb, op->u.copy.dst, op->u.copy.src, op->u.copy.bytes, &hb->scratch);
    else
      memcpy(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
    break;
  }
  case HOST_OP_REDUCE:
    if (!skip) st = run_reduce(op, &hb->scratch);
    break;
  case HOST_OP_REDUCE_ALL:
    if (!skip) st = run_reduce_all(op, &hb->scratch);
    break;
  case HOST_OP_RECORD:
    /* Even when skipped: a wait elsewhere must not hang on a failed stream. */
    tfg_event_complete(op->u.ev.e, op->u.ev.gen, s->status, s->err.data);
    tfg_event_unref(op->u.ev.e);
    break;
  case HOST_OP_WAIT: {
    tfg_event *e = op->u.ev.e;
    /* A skipped wait takes no failure: its stream has one already. */
    tfg_status carried = tfg_event_end_wait(e, op->registered ? &hb->waiter : NULL, skip ? NULL : &hb->scratch);
    if (!skip) st = carried;
    tfg_event_unref(e);
    break;
  }
  }
  return st;
}

/* The trace slice of an operation that ran from t0 to t1 on stream s, if
 * it gets one (see the top). */
static void trace_op(host_backend *hb, tfg_trace *tr, const tfg_stream *s, const host_op *op, bool skip, double t0,
                     double t1) {
  if (skip) return;
  int pid = hb->base.device->index, tid = s->index;
  switch (op->kind) {
  case HOST_OP_LAUNCH:
    if (op->fault) return;
    tfg_trace_add_launch(tr, pid, tid, op->u.launch.node, t0, t1);
    return;
  case HOST_OP_COPY: {
    static const char *const names[] = {[HOST_COPY_PEER] = "copy", [HOST_COPY_H2D] = "h2d", [HOST_COPY_D2H] = "d2h"};
    tfg_trace_add(tr, pid, tid, names[op->u.copy.dir], "copy", t0, t1);
    return;
  }
  case HOST_OP_REDUCE:
  case HOST_OP_REDUCE_ALL: tfg_trace_add(tr, pid, tid, "reduce", "collective", t0, t1); return;
  case HOST_OP_WAIT:
    /* Blocked from the scan that found it so until released (now). */
    if (op->blocked_at > 0) tfg_trace_add(tr, pid, tid, "wait", "wait", op->blocked_at, t0);
    return;
  case HOST_OP_RECORD: return;
  }
}

static void *host_worker(void *arg) {
  host_backend *hb = arg;
  pthread_mutex_lock(&hb->mu);
  for (;;) {
    uint64_t seen = hb->wake_seq;
    host_op *unregistered = NULL;
    tfg_stream *s = pick_stream(hb, &unregistered);
    if (s) {
      host_op *op = s->head;
      s->head = op->next;
      if (!s->head) s->tail = NULL;
      bool skip = s->status != TFG_OK;
      tfg_trace *tr = hb->trace;
      hb->trace_busy = tr; /* set_trace waits for this operation */
      pthread_mutex_unlock(&hb->mu);
      double t0 = tr ? tfg_trace_now() : 0;
      tfg_status st = run_op(hb, s, op, skip);
      if (tr) trace_op(hb, tr, s, op, skip, t0, tfg_trace_now());
      pthread_mutex_lock(&hb->mu);
      hb->trace_busy = NULL;
      if (st != TFG_OK && s->status == TFG_OK) {
        s->status = st;
        s->here = op->kind != HOST_OP_WAIT;
        tfg_strbuf_puts(&s->err, hb->scratch.data);
      }
      s->done++;
      op->next = hb->spare;
      hb->spare = op;
      if (hb->idle_waiters) pthread_cond_broadcast(&hb->idle);
      continue;
    }
    if (unregistered) {
      /* Registration takes the event's lock, which must not be taken under
       * ours; a record that runs meanwhile is seen by the next scan (done
       * is read there) or wakes us (we are on its list by then). */
      pthread_mutex_unlock(&hb->mu);
      tfg_event_add_waiter(unregistered->u.ev.e, &hb->waiter);
      unregistered->registered = true;
      pthread_mutex_lock(&hb->mu);
      continue;
    }
    if (hb->quit && all_drained(hb)) break;
    hb->sleeping = true;
    while (hb->wake_seq == seen) pthread_cond_wait(&hb->wake, &hb->mu);
    hb->sleeping = false;
  }
  pthread_mutex_unlock(&hb->mu);
  return NULL;
}

/* ---- captured runs (sw.host_graphs, TFG_HOST_GRAPHS=1) ------------------------ */

/* One operation as captured: its stream and its template (a RECORD or
 * WAIT holds a reference to its event, and gets its generation only when
 * replayed). */
typedef struct host_rec {
  tfg_stream *s;
  host_op op;
} host_rec;

struct tfg_replay {
  host_rec *ops;
  size_t n, cap;
};

/* The capture in progress on this thread: every operation the thread
 * queues on a host stream goes here instead of to its stream. */
static _Thread_local tfg_replay *capturing;

/* ---- queueing --------------------------------------------------------------- */

/* Queues a copy of *tmpl on s and wakes the worker (records it instead
 * while this thread captures). */
static void enqueue(host_backend *hb, tfg_stream *s, const host_op *tmpl) {
  TFG_ASSERT(s->hb == hb);
  if (capturing) {
    TFG_GROW(capturing->ops, capturing->n, capturing->cap, 64);
    capturing->ops[capturing->n++] = (host_rec){s, *tmpl};
    return;
  }
  pthread_mutex_lock(&hb->mu);
  host_op *op = hb->spare;
  if (op) hb->spare = op->next;
  else op = malloc(sizeof *op);
  TFG_ASSERT(op != NULL);
  *op = *tmpl;
  op->next = NULL;
  if (op->kind == HOST_OP_LAUNCH && hb->fault_after > 0 && ++hb->launches == hb->fault_after) op->fault = true;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  s->queued++;
  hb->wake_seq++;
  if (hb->sleeping) pthread_cond_signal(&hb->wake);
  pthread_mutex_unlock(&hb->mu);
}

/* Under hb->mu: waits until everything queued on s before the call has
 * run (a target, so a producer on another thread cannot starve it). */
static void drain_locked(host_backend *hb, tfg_stream *s) {
  uint64_t target = s->queued;
  hb->idle_waiters++;
  while (s->done < target) pthread_cond_wait(&hb->idle, &hb->mu);
  hb->idle_waiters--;
}

/* ---- the vtable --------------------------------------------------------------- */

static const char *host_name(tfg_backend *b) {
  (void)b;
  return "host";
}

/* Not stream-ordered: the caller frees only memory no queued operation
 * still uses (after a synchronize, or an event it waited for). */
static void *host_alloc(tfg_backend *b, size_t bytes) { return tfg_mem_alloc(host_of(b)->pool, bytes); }
static void host_free(tfg_backend *b, void *ptr) { tfg_mem_free(host_of(b)->pool, ptr); }

static tfg_stream *host_stream_create(tfg_backend *b) {
  host_backend *hb = host_of(b);
  tfg_stream *s = calloc(1, sizeof *s);
  TFG_ASSERT(s != NULL);
  s->hb = hb;
  pthread_mutex_lock(&hb->mu);
  s->index = hb->streams_created++;
  TFG_GROW(hb->streams, hb->nstreams, hb->streams_cap, 4);
  hb->streams[hb->nstreams++] = s;
  pthread_mutex_unlock(&hb->mu);
  return s;
}

/* Waits for what s has queued (it always finishes: see the top), then
 * frees it. */
static void host_stream_free(tfg_backend *b, tfg_stream *s) {
  if (!s) return;
  host_backend *hb = host_of(b);
  TFG_ASSERT(s->hb == hb);
  pthread_mutex_lock(&hb->mu);
  drain_locked(hb, s);
  /* Nothing else queues on s now (the caller is freeing it). */
  size_t i = 0;
  while (hb->streams[i] != s) i++;
  hb->streams[i] = hb->streams[--hb->nstreams];
  hb->rr = 0;
  pthread_mutex_unlock(&hb->mu);
  tfg_strbuf_free(&s->err);
  free(s);
}

/* Events are the shared objects of runtime/event.h: a CUDA backend's
 * streams may record and wait on them too. */
static tfg_event *host_event_create(tfg_backend *b) {
  (void)b;
  return tfg_event_new();
}

/* Drops the creator's reference: operations still queued on e keep it
 * alive until they have run, so e may be freed right after queueing. */
static void host_event_free(tfg_backend *b, tfg_event *e) {
  (void)b;
  if (e) tfg_event_unref(e);
}

static void host_event_record(tfg_backend *b, tfg_stream *s, tfg_event *e) {
  if (capturing) { /* issued when replayed: a generation issued now would never run */
    host_op op = {.kind = HOST_OP_RECORD, .u.ev = {tfg_event_ref(e), 0}};
    enqueue(host_of(b), s, &op);
    return;
  }
  uint64_t gen = tfg_event_issue(e, -1);
  host_op op = {.kind = HOST_OP_RECORD, .u.ev = {tfg_event_ref(e), gen}};
  enqueue(host_of(b), s, &op);
}

/* When the latest record was issued on a GPU's stream, that record is
 * not run by a host worker: ext_export makes the CUDA side complete the
 * generation on the host once the GPU has reached it (runtime/event.h). */
static void host_event_wait(tfg_backend *b, tfg_stream *s, tfg_event *e) {
  void (*export)(tfg_event *, uint64_t);
  uint64_t gen = tfg_event_latest(e, &export);
  if (capturing) { /* the generation to wait for is the latest issued when replayed */
    host_op op = {.kind = HOST_OP_WAIT, .u.ev = {tfg_event_ref(e), 0}};
    enqueue(host_of(b), s, &op);
    return;
  }
  if (gen == 0) return; /* never recorded: nothing to wait for */
  if (export) export(e, gen);
  host_op op = {.kind = HOST_OP_WAIT, .u.ev = {tfg_event_ref(e), gen}};
  enqueue(host_of(b), s, &op);
}

/* Host and device memory are both host memory here: every direction is a
 * memcpy on b's worker, in s's order; dir only names its trace slice. A
 * source on a backend whose memory is not host memory (src_b not
 * is_host: a GPU) is read with read_now when the copy's turn comes. */
static void host_copy(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src, size_t bytes,
                      host_copy_dir dir) {
  host_op op = {.kind = HOST_OP_COPY, .u.copy = {dst, src, bytes, dir, src_b}};
  enqueue(host_of(b), s, &op);
}

static void host_copy_from_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes) {
  host_copy(b, s, dst, NULL, src, bytes, HOST_COPY_H2D);
}

static void host_copy_to_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes) {
  host_copy(b, s, dst, NULL, src, bytes, HOST_COPY_D2H);
}

static void host_copy_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src,
                           size_t bytes) {
  host_copy(b, s, dst, src_b, src, bytes, HOST_COPY_PEER);
}

/* Queued on s like a copy; the dtype is checked when it runs (a failure
 * of the stream, in order, as backend.h describes), not here. dst == src
 * is allowed (each element doubles); ranges that overlap otherwise are
 * added in index order. */
static void host_reduce_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src,
                             size_t count, tfg_dtype dt, double scale) {
  host_op op = {.kind = HOST_OP_REDUCE, .u.reduce = {dst, src, count, dt, scale, src_b}};
  enqueue(host_of(b), s, &op);
}

/* Queued on s like reduce_peer; the buffers are host memory (host
 * devices share the process's: a GPU's buffers never reach it, as the
 * shared all-reduce is chosen for one kind of device). */
static void host_reduce_all(tfg_backend *b, tfg_stream *s, void *const *bufs, int n, size_t count, tfg_dtype dt,
                            double scale) {
  TFG_ASSERT(n >= 1 && n <= TFG_REDUCE_ALL_MAX);
  host_op op = {.kind = HOST_OP_REDUCE_ALL, .u.reduce_all = {.n = n, .count = count, .dt = dt, .scale = scale}};
  for (int r = 0; r < n; r++) op.u.reduce_all.bufs[r] = bufs[r];
  enqueue(host_of(b), s, &op);
}

/* The CPU registry's kernel: host devices run the CPU kernels. */
static tfg_kernel_fn host_kernel(tfg_backend *b, const tfg_node *node) {
  (void)b;
  return tfg_cpu_kernel(node->op);
}

/* A host device computes on the kernel pool its executor makes with the
 * share this returns; matrix products included (kernels/cpu/blas.h), so
 * there is nothing else to set. n <= 0: the default, OpenBLAS's own
 * start-up count (OPENBLAS_NUM_THREADS, else the cores). */
static int host_set_threads(tfg_backend *b, int n) {
  (void)b;
  return n > 0 ? n : tfg_cpu_blas_default_threads();
}

/* Swaps the trace (see the top) and waits until no operation still
 * records into the old one, so the caller may free it on return. Must
 * not be called from a kernel running on b's worker (it would wait for
 * itself). */
static void host_set_trace(tfg_backend *b, tfg_trace *t) {
  host_backend *hb = host_of(b);
  pthread_mutex_lock(&hb->mu);
  hb->trace = t;
  hb->idle_waiters++;
  while (hb->trace_busy && hb->trace_busy != t) pthread_cond_wait(&hb->idle, &hb->mu);
  hb->idle_waiters--;
  pthread_mutex_unlock(&hb->mu);
}

static void host_launch(tfg_backend *b, tfg_stream *s, tfg_kernel_fn fn, tfg_kernel_ctx *ctx,
                        const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  host_op op = {.kind = HOST_OP_LAUNCH, .u.launch = {fn, ctx, node, in, out}};
  enqueue(host_of(b), s, &op);
}

/* Must not be called from a kernel running on b's worker (it would wait
 * for itself). The message is appended to *err. */
static tfg_status host_synchronize(tfg_backend *b, tfg_stream *s, tfg_strbuf *err) {
  host_backend *hb = host_of(b);
  TFG_ASSERT(s->hb == hb);
  pthread_mutex_lock(&hb->mu);
  drain_locked(hb, s);
  tfg_status st = s->status;
  if (st != TFG_OK && err) tfg_strbuf_puts(err, s->err.data);
  pthread_mutex_unlock(&hb->mu);
  return st;
}

/* Failures are known when the launch runs (the executor notes the node
 * then): nothing is found later. */
static tfg_node_id host_failed_node(tfg_backend *b, tfg_stream *s) {
  (void)b;
  (void)s;
  return -1;
}

/* Host memory: what the pool has free plus what it may still grow by. */
static void host_mem_stats(tfg_backend *b, tfg_mem_stats *st, int64_t *free_bytes) {
  tfg_mem_pool_stats(host_of(b)->pool, st);
  int64_t usable = st->capacity > 0 ? st->capacity / TFG_MEM_ALIGN * TFG_MEM_ALIGN : 0;
  *free_bytes = usable - st->in_use;
}

static bool host_failed_here(tfg_backend *b, tfg_stream *s) {
  host_backend *hb = host_of(b);
  pthread_mutex_lock(&hb->mu);
  bool here = s->status != TFG_OK && s->here;
  pthread_mutex_unlock(&hb->mu);
  return here;
}

/* Drains every stream (see the top: it terminates), stops and joins the
 * worker, and frees the streams not freed yet and the pool with whatever
 * is still allocated in it. Events are not the backend's: they are freed
 * by their owners. */
static void host_destroy(tfg_backend *b) {
  if (!b) return;
  host_backend *hb = host_of(b);
  pthread_mutex_lock(&hb->mu);
  hb->quit = true;
  hb->wake_seq++;
  pthread_cond_signal(&hb->wake);
  pthread_mutex_unlock(&hb->mu);
  TFG_ASSERT(pthread_join(hb->thread, NULL) == 0);
  /* what the worker waited and signalled on goes with it */
  pthread_cond_destroy(&hb->wake);
  pthread_cond_destroy(&hb->idle);
  pthread_mutex_destroy(&hb->mu);
  for (size_t i = 0; i < hb->nstreams; i++) {
    TFG_ASSERT(hb->streams[i]->head == NULL);
    tfg_strbuf_free(&hb->streams[i]->err);
    free(hb->streams[i]);
  }
  free(hb->streams);
  while (hb->spare) {
    host_op *n = hb->spare->next;
    free(hb->spare);
    hb->spare = n;
  }
  tfg_mem_pool_free(hb->pool);
  tfg_strbuf_free(&hb->scratch);
  free(hb);
}

/* The emulation of CUDA Graphs (sw.host_graphs, see backend.h): a
 * capture records what this thread queues on host streams; a replay
 * queues it again, stream by stream in the captured order, issuing each
 * record's generation and taking each wait's (the latest issued) as
 * event_record and event_wait would have then. The kernels see the
 * values their contexts hold when they run, as on a first run. */
static void *host_host_alloc(tfg_backend *b, size_t bytes) {
  (void)b;
  return malloc(bytes ? bytes : 1);
}

static void host_host_free(tfg_backend *b, void *ptr) {
  (void)b;
  free(ptr);
}

static bool host_capture_begin(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  (void)b, (void)s, (void)why;
  TFG_ASSERT(capturing == NULL);
  capturing = calloc(1, sizeof *capturing);
  TFG_ASSERT(capturing != NULL);
  return true;
}

static tfg_replay *host_capture_end(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  (void)b, (void)s, (void)why;
  tfg_replay *r = capturing;
  TFG_ASSERT(r != NULL);
  capturing = NULL;
  return r;
}

static void host_replay(tfg_backend *b, tfg_stream *s, tfg_replay *r) {
  (void)b, (void)s;
  for (size_t i = 0; i < r->n; i++) {
    host_rec *rec = &r->ops[i];
    host_op op = rec->op;
    if (op.kind == HOST_OP_RECORD) {
      op.u.ev.gen = tfg_event_issue(op.u.ev.e, -1);
    } else if (op.kind == HOST_OP_WAIT) {
      op.u.ev.gen = tfg_event_latest(op.u.ev.e, NULL); /* a replay is host-only: nothing to export */
      if (op.u.ev.gen == 0) continue;
    }
    if (op.kind == HOST_OP_RECORD || op.kind == HOST_OP_WAIT) tfg_event_ref(op.u.ev.e);
    enqueue(rec->s->hb, rec->s, &op);
  }
}

static void host_replay_free(tfg_backend *b, tfg_replay *r) {
  (void)b;
  if (!r) return;
  for (size_t i = 0; i < r->n; i++)
    if (r->ops[i].op.kind == HOST_OP_RECORD || r->ops[i].op.kind == HOST_OP_WAIT) tfg_event_unref(r->ops[i].op.u.ev.e);
  free(r->ops);
  free(r);
}

/* What a host backend can do (runtime/backend.h): its memory is the
 * host's, its kernels run on the CPU, and it adds host buffers in one
 * pass.  It captures runs only under the sw.host_graphs test hook
 * (host_graph_caps), which the executor then treats as it treats GPUs;
 * its kernels read ctx->step, so it needs no device step. */
static const tfg_backend_caps host_caps = {
    .is_host = true, .sets_threads = true, .reduce_all = true, .can_capture = false, .device_step = false};
static const tfg_backend_caps host_graph_caps = {
    .is_host = true, .sets_threads = true, .reduce_all = true, .can_capture = true, .device_step = false};

static const tfg_backend_i host_i = {
    .name = host_name, .alloc = host_alloc, .free = host_free, .stream_create = host_stream_create,
    .stream_free = host_stream_free, .event_create = host_event_create, .event_free = host_event_free,
    .event_record = host_event_record, .event_wait = host_event_wait, .copy_from_host = host_copy_from_host,
    .copy_to_host = host_copy_to_host, .copy_peer = host_copy_peer, .reduce_peer = host_reduce_peer,
    .reduce_all = host_reduce_all, .kernel = host_kernel, .set_threads = host_set_threads,
    .set_trace = host_set_trace, .launch = host_launch, .mem_stats = host_mem_stats, .synchronize = host_synchronize,
    .failed_here = host_failed_here, .failed_node = host_failed_node, .destroy = host_destroy};

/* ---- creation ------------------------------------------------------------------ */

tfg_backend *tfg_backend_host_new(const tfg_device *dev) {
  tfg_backend *b = tfg_backend_host_new_with(dev, NULL);
  TFG_ASSERT(b != NULL); /* not preallocated: creation cannot fail */
  return b;
}

tfg_backend *tfg_backend_host_new_with(const tfg_device *dev, const tfg_backend_opts *o) {
  static const tfg_backend_opts defaults = {0};
  if (!o) o = &defaults;
  TFG_ASSERT(dev->kind == TFG_DEVICE_HOST || dev->kind == TFG_DEVICE_CPU);
  tfg_mem_pool *pool = tfg_mem_pool_new(dev->memory, o->preallocate);
  if (!pool) return NULL;
  host_backend *hb = calloc(1, sizeof *hb);
  TFG_ASSERT(hb != NULL);
  tfg_backend_init(&hb->base, &host_i, &host_caps, dev, hb);
  pthread_mutex_init(&hb->mu, NULL);
  pthread_cond_init(&hb->wake, NULL);
  pthread_cond_init(&hb->idle, NULL);
  hb->waiter.wake = host_wake;
  hb->pool = pool;
  hb->fault_after = tfg_backend_fault_after(&o->sw, dev, hb->fault_msg, sizeof hb->fault_msg);
  if (o->sw.host_graphs) {
    hb->base.i.host_alloc = host_host_alloc;
    hb->base.i.host_free = host_host_free;
    hb->base.i.capture_begin = host_capture_begin;
    hb->base.i.capture_end = host_capture_end;
    hb->base.i.replay = host_replay;
    hb->base.i.replay_free = host_replay_free;
    hb->base.caps = host_graph_caps;
  }
  TFG_ASSERT(pthread_create(&hb->thread, NULL, host_worker, hb) == 0);
  return &hb->base;
}
