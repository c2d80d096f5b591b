/* runtime/backend_cuda_nccl.c: the NCCL collective (runtime/collective.h)
 * over CUDA backends, in builds with NCCL (TFG_BUILD_NCCL=1); empty in
 * the others.
 *
 * NCCL (tfg_backend_cuda_nccl_new; builds with TFG_BUILD_NCCL only): the
 * collective of runtime/collective.h across CUDA devices on distinct
 * GPUs, one communicator per group (ncclCommInitAll over the ranks' GPUs:
 * a single process drives them all, so no unique id travels); across the
 * processes of an mpirun job, each process's part of one communicator
 * (ncclCommInitRank, the unique id carried by MPI: runtime/registry.c). A call is
 * one NCCL group (ncclGroupStart, then one in-place ncclAllReduce per
 * rank and segment on the rank's stream, ncclGroupEnd): the segments are
 * separate buffers, and NCCL fuses the group's operations. MEAN is
 * ncclAvg; another scale (a hierarchical all-reduce's leaders, whose mean
 * is over more ranks than they are) is ncclSum then tfg_cuda_scale on
 * each rank's stream. An NCCL collective must be queued on every rank or
 * on none (the others would wait for it forever), so when any rank's
 * stream has failed already, or the dtype is not f32 or f64, nothing is
 * queued and every rank's stream fails with that reason (failed_here on
 * the streams where it began), which is what the ring's events carry
 * around the ring. The communicators are finalized together (one NCCL
 * group: finalizing is collective) and then destroyed. A communicator
 * across processes has a watchdog (below): a failed peer ends this
 * process rather than hang it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if TFG_BUILD_NCCL
#include <nccl.h>
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "tfg needs NCCL 2.10 or newer (ncclAvg); build with NCCL=0 without it"
#endif
#endif

#include "base/assert.h"
#include "runtime/backend_cuda_impl.h"
#include "runtime/collective.h"

/* ---- NCCL ----------------------------------------------------------------------- */

#if TFG_BUILD_NCCL

/* Appends "CALL failed: ERROR (FILE:LINE)" and NCCL's own detail to *why
 * when e is an error. */
static bool nccl_ok(ncclResult_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == ncclSuccess) return true;
  if (why) {
    tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, ncclGetErrorString(e), file, line);
    const char *last = ncclGetLastError(NULL);
    if (last && *last) tfg_strbuf_printf(why, ": %s", last);
  }
  (void)cudaGetLastError(); /* a CUDA error NCCL met must not surface at the next kernel launch */
  return false;
}
#define NCCL_OK(call, why) nccl_ok((call), #call, __FILE__, __LINE__, (why))

/* The watchdog of a job's communicator (across processes): a peer
 * process that fails makes NCCL's kernels wait for it forever, so a
 * thread polls ncclCommGetAsyncError every 100 ms and checks that the
 * latest all-reduce (an event after it on rank 0's stream) ends within
 * TFG_NCCL_TIMEOUT seconds (default 600, as PyTorch's process groups);
 * on either it says why, aborts the communicators and ends the process
 * with exit 3, which mpirun turns into the end of the job. As PyTorch's
 * NCCL watchdog does. */
typedef struct watchdog {
  bool on;
  pthread_t thread;
  pthread_mutex_t mu;
  bool stop;
  cudaEvent_t last;   /* after the latest all-reduce on rank 0's stream */
  bool pending;       /* last not yet seen done */
  double since;       /* when the latest was queued */
  double timeout_s;
  int gpu;            /* rank 0's */
} watchdog;

typedef struct nccl_coll {
  int nranks;
  int world, first;  /* the communicator's ranks, this process's first: rank r is NCCL's first + r */
  tfg_backend **b;
  tfg_stream **s;
  ncclComm_t *comms; /* [nranks]: rank r's, on b[r]'s GPU */
  watchdog dog;      /* for a job's communicator only */
} nccl_coll;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void dog_bite(nccl_coll *g, const char *why) {
  fprintf(stderr, "tfg: NCCL watchdog: %s; ending this process (and with it the job)\n", why);
  fflush(stderr);
  for (int r = 0; r < g->nranks; r++)
    if (g->comms[r]) (void)ncclCommAbort(g->comms[r]);
  _exit(3);
}

static void *dog_main(void *arg) {
  nccl_coll *g = arg;
  watchdog *w = &g->dog;
  (void)cudaSetDevice(w->gpu);
  for (;;) {
    nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    pthread_mutex_lock(&w->mu);
    bool stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    if (stop) return NULL;
    for (int r = 0; r < g->nranks; r++) {
      ncclResult_t e = ncclSuccess;
      if (ncclCommGetAsyncError(g->comms[r], &e) == ncclSuccess && e != ncclSuccess && e != ncclInProgress) {
        char why[256];
        snprintf(why, sizeof why, "rank %d's communicator failed: %s", r, ncclGetErrorString(e));
        dog_bite(g, why);
      }
    }
    pthread_mutex_lock(&w->mu);
    if (w->pending) {
      cudaError_t q = cudaEventQuery(w->last);
      if (q == cudaSuccess) w->pending = false;
      else if (q == cudaErrorNotReady && now_s() - w->since > w->timeout_s) {
        char why[256];
        snprintf(why, sizeof why, "an all-reduce across the processes has not ended in %.0f s (TFG_NCCL_TIMEOUT)",
                 w->timeout_s);
        pthread_mutex_unlock(&w->mu);
        dog_bite(g, why);
      } else if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        w->pending = false; /* the stream's own failure: the executor reports it */
      }
    }
    pthread_mutex_unlock(&w->mu);
  }
}

/* Starts the watchdog of a job's communicator g (false with *why), timed
 * by the switch nccl_timeout_s of its first backend (TFG_NCCL_TIMEOUT;
 * every backend of a run has the same switches). */
static bool dog_start(nccl_coll *g, tfg_strbuf *why) {
  watchdog *w = &g->dog;
  const cuda_backend *first = cuda_of(g->b[0]);
  w->timeout_s = first->o.sw.nccl_timeout_s > 0 ? (double)first->o.sw.nccl_timeout_s : 600;
  w->gpu = first->gpu;
  if (!CUDA_OK(cudaSetDevice(w->gpu), why) ||
      !CUDA_OK(cudaEventCreateWithFlags(&w->last, cudaEventDisableTiming), why))
    return false;
  pthread_mutex_init(&w->mu, NULL);
  if (pthread_create(&w->thread, NULL, dog_main, g) != 0) {
    tfg_strbuf_puts(why, "cannot start the NCCL watchdog's thread");
    pthread_mutex_destroy(&w->mu);
    (void)cudaEventDestroy(w->last);
    return false;
  }
  w->on = true;
  return true;
}

/* Notes an all-reduce just queued (the watchdog times it). */
static void dog_note(nccl_coll *g) {
  watchdog *w = &g->dog;
  if (!w->on) return;
  pthread_mutex_lock(&w->mu);
  if (cudaSetDevice(w->gpu) == cudaSuccess && cudaEventRecord(w->last, g->s[0]->s) == cudaSuccess) {
    w->pending = true;
    w->since = now_s();
  } else {
    (void)cudaGetLastError();
  }
  pthread_mutex_unlock(&w->mu);
}

static void dog_stop(nccl_coll *g) {
  watchdog *w = &g->dog;
  if (!w->on) return;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  (void)cudaEventDestroy(w->last);
  w->on = false;
}

static const char *nccl_name(tfg_coll *c) {
  (void)c;
  return "nccl";
}

/* What a call queues: ncclAllReduce, or ZeRO's pair (in place: rank r's
 * piece r of each segment is its part, NCCL's recvbuff = sendbuff + r
 * count and the other way round). */
typedef enum nccl_kind { NCCL_ALLREDUCE, NCCL_REDUCE_SCATTER, NCCL_ALL_GATHER } nccl_kind;
static const char *const kind_names[] = {"allreduce", "reduce_scatter", "all_gather"};

/* Queues NCCL rank q's call of kind (of W) on segment p of count elements. */
static ncclResult_t nccl_call(nccl_kind kind, void *p, size_t count, tfg_dtype dt, ncclDataType_t type, ncclRedOp_t op,
                              int q, int W, ncclComm_t comm, cudaStream_t s) {
  size_t per = count / (size_t)W, at = (size_t)q * per * tfg_dtype_size(dt);
  switch (kind) {
  case NCCL_ALLREDUCE: return ncclAllReduce(p, p, count, type, op, comm, s);
  case NCCL_REDUCE_SCATTER: return ncclReduceScatter(p, (char *)p + at, per, type, op, comm, s);
  case NCCL_ALL_GATHER: /* bytes, whatever the dtype */
    return ncclAllGather((char *)p + at, p, per * tfg_dtype_size(dt), ncclUint8, comm, s);
  }
  return ncclInvalidArgument;
}

/* Queues the group on every rank (see the top); false with *m when an
 * NCCL or CUDA call failed. */
static bool nccl_queue(nccl_coll *g, nccl_kind kind, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                       double scale, tfg_strbuf *m) {
  int R = g->nranks, W = g->world;
  bool f64 = dt == TFG_DTYPE_F64;
  ncclDataType_t type = f64 ? ncclFloat64 : ncclFloat32;
  /* MEAN (over every rank of the communicator) is NCCL's own; any other scale follows the sum. */
  bool avg = scale != 1.0 && scale == 1.0 / W, post = scale != 1.0 && !avg;
  ncclRedOp_t op = avg ? ncclAvg : ncclSum;
  cudaEvent_t *t0 = calloc((size_t)R, sizeof *t0);
  TFG_ASSERT(t0 != NULL);
  for (int r = 0; r < R; r++) t0[r] = tfg_backend_cuda_trace_begin(cuda_of(g->b[r]), g->s[r]);
  bool ok = NCCL_OK(ncclGroupStart(), m);
  if (ok) {
    for (int r = 0; r < R && ok; r++)
      for (int k = 0; k < nseg && ok; k++)
        if (counts[k]) {
          void *p = bufs[(size_t)r * (size_t)nseg + (size_t)k];
          ok = NCCL_OK(nccl_call(kind, p, counts[k], dt, type, op, g->first + r, W, g->comms[r], g->s[r]->s), m);
        }
    /* Always closed: a failed call inside the group makes ncclGroupEnd
     * fail too, and launch nothing. */
    ok &= NCCL_OK(ncclGroupEnd(), ok ? m : NULL);
  }
  for (int r = 0; r < R && ok && post; r++) {
    cuda_backend *cb = cuda_of(g->b[r]);
    ok = CUDA_OK(cudaSetDevice(cb->gpu), m);
    for (int k = 0; k < nseg && ok; k++) { /* a reduce-scatter's own piece only */
      size_t per = kind == NCCL_REDUCE_SCATTER ? counts[k] / (size_t)W : counts[k];
      char *p = (char *)bufs[(size_t)r * (size_t)nseg + (size_t)k];
      if (kind == NCCL_REDUCE_SCATTER) p += (size_t)(g->first + r) * per * tfg_dtype_size(dt);
      ok = CUDA_OK(tfg_cuda_scale(p, per, f64, scale, g->s[r]->s), m);
    }
  }
  if (ok) dog_note(g);
  for (int r = 0; r < R; r++) {
    if (ok)
      tfg_backend_cuda_trace_end(cuda_of(g->b[r]), g->s[r], t0[r], kind_names[kind], "collective", NULL);
    else
      tfg_backend_cuda_timing_event_put(cuda_of(g->b[r]), t0[r]);
  }
  free(t0);
  return ok;
}

static void nccl_run(tfg_coll *c, nccl_kind kind, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                     double scale) {
  nccl_coll *g = c->ctx;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  size_t n = 0;
  for (int k = 0; k < nseg; k++) n += counts[k];
  if (n == 0) return;
  tfg_status st = TFG_OK;
  int began = -1; /* the rank whose stream failed first, else every rank's is where it began */
  tfg_strbuf m = {0};
  for (int r = 0; r < g->nranks && st == TFG_OK; r++)
    if (g->s[r]->status != TFG_OK) {
      st = g->s[r]->status;
      began = r;
      tfg_strbuf_puts(&m, g->s[r]->err.data ? g->s[r]->err.data : tfg_status_str(st));
    }
  if (st == TFG_OK && kind != NCCL_ALL_GATHER && dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) {
    st = TFG_ERR_DEVICE;
    tfg_strbuf_printf(&m, "nccl %s: cannot reduce %s elements (tfg's reductions take f32 and f64)", kind_names[kind],
                      tfg_dtype_name(dt));
  }
  for (int k = 0; k < nseg && kind != NCCL_ALLREDUCE; k++) TFG_ASSERT(counts[k] % (size_t)g->world == 0);
  if (st == TFG_OK && !nccl_queue(g, kind, bufs, counts, nseg, dt, scale, &m)) st = TFG_ERR_DEVICE;
  if (st != TFG_OK)
    for (int r = 0; r < g->nranks; r++) tfg_backend_cuda_stream_fail(g->s[r], st, began < 0, m.data);
  tfg_strbuf_free(&m);
}

static void nccl_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                  double scale) {
  nccl_run(c, NCCL_ALLREDUCE, bufs, counts, nseg, dt, scale);
}

static void nccl_allreduce(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                           tfg_coll_op op) {
  nccl_allreduce_scaled(c, bufs, counts, nseg, dt, op == TFG_COLL_MEAN ? 1.0 / ((nccl_coll *)c->ctx)->world : 1.0);
}

static void nccl_reduce_scatter(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                double scale) {
  nccl_run(c, NCCL_REDUCE_SCATTER, bufs, counts, nseg, dt, scale);
}

static void nccl_all_gather(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt) {
  nccl_run(c, NCCL_ALL_GATHER, bufs, counts, nseg, dt, 1.0);
}

/* Finalizes the communicators in one group (finalizing is collective: one
 * at a time would wait for the others), which flushes what they have
 * queued, then destroys them. Failures can only be ignored here. */
static void nccl_destroy(nccl_coll *g) {
  if (g->comms) {
    /* the watchdog still watches the finalize: it waits for the peers,
     * and one that failed must not hang this process there */
    if (ncclGroupStart() == ncclSuccess) {
      for (int r = 0; r < g->nranks; r++)
        if (g->comms[r]) (void)ncclCommFinalize(g->comms[r]);
      (void)ncclGroupEnd();
    }
    dog_stop(g);
    for (int r = 0; r < g->nranks; r++)
      if (g->comms[r]) (void)ncclCommDestroy(g->comms[r]);
    (void)cudaGetLastError();
  }
  free(g->comms);
  free(g->b);
  free(g->s);
  free(g);
}

static void nccl_free(tfg_coll *c) {
  if (!c) return;
  nccl_destroy(c->ctx);
  free(c);
}

static const tfg_coll_i nccl_i = {.name = nccl_name, .allreduce = nccl_allreduce,
                                   .allreduce_scaled = nccl_allreduce_scaled, .reduce_scatter = nccl_reduce_scatter,
                                   .all_gather = nccl_all_gather, .free = nccl_free};

bool tfg_backend_cuda_nccl_id(void *id, tfg_strbuf *why) {
  _Static_assert(sizeof(ncclUniqueId) == TFG_NCCL_ID_BYTES, "NCCL's unique id is 128 bytes");
  ncclUniqueId u;
  if (!NCCL_OK(ncclGetUniqueId(&u), why)) return false;
  memcpy(id, &u, sizeof u);
  return true;
}

/* The communicator of nranks GPUs: in this process alone (id NULL:
 * ncclCommInitAll), or this process's ranks first.. of world, from the
 * job's unique id (ncclCommInitRank for each, in one group). */
static tfg_coll *nccl_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, int world, int first,
                          const void *id, tfg_strbuf *why) {
  TFG_ASSERT(nranks >= 1 && b && s);
  nccl_coll *g = calloc(1, sizeof *g);
  TFG_ASSERT(g != NULL);
  g->nranks = nranks;
  g->world = world;
  g->first = first;
  g->b = malloc((size_t)nranks * sizeof *g->b);
  g->s = malloc((size_t)nranks * sizeof *g->s);
  int *devs = malloc((size_t)nranks * sizeof *devs);
  TFG_ASSERT(g->b && g->s && devs);
  bool ok = true;
  for (int r = 0; r < nranks && ok; r++) {
    g->b[r] = b[r];
    g->s[r] = s[r];
    if (!tfg_backend_cuda_is(b[r])) {
      tfg_strbuf_printf(why, "NCCL runs on CUDA devices: %s is a %s device", b[r]->device->name,
                        tfg_backend_name(b[r]));
      ok = false;
      break;
    }
    TFG_ASSERT(s[r]->cb == cuda_of(b[r]));
    devs[r] = cuda_of(b[r])->gpu;
    for (int q = 0; q < r && ok; q++)
      if (devs[q] == devs[r]) {
        tfg_strbuf_printf(why, "NCCL takes one rank per GPU: %s and %s are both on cuda:%d", b[q]->device->name,
                          b[r]->device->name, devs[r]);
        ok = false;
      }
  }
  if (ok) {
    g->comms = calloc((size_t)nranks, sizeof *g->comms);
    TFG_ASSERT(g->comms != NULL);
    if (!id) {
      ok = NCCL_OK(ncclCommInitAll(g->comms, nranks, devs), why);
    } else {
      ncclUniqueId u;
      memcpy(&u, id, sizeof u);
      ok = NCCL_OK(ncclGroupStart(), why);
      for (int r = 0; r < nranks && ok; r++) {
        ok = cudaSetDevice(devs[r]) == cudaSuccess;
        if (!ok) tfg_strbuf_printf(why, "cudaSetDevice(%d) failed", devs[r]);
        else ok = NCCL_OK(ncclCommInitRank(&g->comms[r], world, u, first + r), why);
      }
      bool ended = NCCL_OK(ncclGroupEnd(), why);
      ok = ok && ended;
    }
    if (!ok) { /* nothing to finalize: NCCL released what it made */
      free(g->comms);
      g->comms = NULL;
    }
  }
  free(devs);
  if (ok && id) ok = dog_start(g, why); /* across processes: a failed peer must not hang this one */
  if (!ok) {
    nccl_destroy(g);
    return NULL;
  }
  tfg_coll *c = tfg_coll_new(&nccl_i, nranks, g);
  c->processes = id ? world / nranks : 1;
  c->process = id ? first / nranks : 0;
  return c;
}

tfg_coll *tfg_backend_cuda_nccl_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  return nccl_new(nranks, b, s, nranks, 0, NULL, why);
}

tfg_coll *tfg_backend_cuda_nccl_join(int nranks, tfg_backend *const *b, tfg_stream *const *s, int world, int first,
                                     const void *id, tfg_strbuf *why) {
  TFG_ASSERT(id != NULL && world >= nranks && first >= 0 && first + nranks <= world);
  return nccl_new(nranks, b, s, world, first, id, why);
}

#endif /* TFG_BUILD_NCCL */
