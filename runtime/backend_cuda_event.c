/* runtime/backend_cuda_event.c: the CUDA backend's events.
 *
 * Events are the shared objects of runtime/event.h (body in
 * runtime/event_impl.h). Their CUDA part
 * holds one cudaEvent per GPU (made on first use there, with
 * cudaEventDisableTiming), so record is cudaEventRecord on the stream's
 * GPU and a wait for a GPU's record is cudaStreamWaitEvent, across GPUs
 * too. CUDA's rule is the host backend's: a wait waits for the latest
 * record issued before it, a wait on an event never recorded is a no-op,
 * and an event is recorded again each step without a reset. Two other
 * kinds of wait involve host devices:
 *   - a host stream waits for a GPU's record: host_event_wait calls our
 *     export (cuda_event_export): on the recording GPU's export stream,
 *     cudaStreamWaitEvent then cudaLaunchHostFunc, whose callback
 *     completes that generation on the host (tfg_event_complete: it makes
 *     no CUDA call, as host functions must not);
 *   - a GPU stream waits for a host stream's record: the caller's thread
 *     blocks until the host worker has run it (tfg_event_wait_done), and
 *     queues nothing. This cannot deadlock because the executor queues a
 *     wait only after its record, and everything a queued record depends
 *     on is queued already: the host worker gets there without us. The
 *     GPU is never made to spin on host memory (cuStreamWaitValue32 would
 *     hide the dependency from CUDA's scheduler, which its documentation
 *     warns can deadlock). The cost: the executor's walk pauses there. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "runtime/backend_cuda_impl.h"
#include "runtime/event_impl.h"
#include "runtime/event.h"

/* ---- events ------------------------------------------------------------------- */

/* The CUDA part of an event (event_impl.h's ext). */
typedef struct cuda_event_ext {
  cudaEvent_t *ev;    /* [gpu_count()]: GPU k's, made on first use there */
  uint64_t gen;       /* the generation of the latest record a GPU issued */
  tfg_status status;  /* the failure that record carried */
  char *msg;
  uint64_t exported;  /* the latest generation handed to the host (export) */
} cuda_event_ext;

/* GPUs the process has: an event's CUDA part has a slot for each. */
static int gpu_count(void) { return tfg_backend_cuda_probe(NULL, NULL, NULL); }

static _Thread_local bool in_host_callback;
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda_event_ext **graveyard;
static size_t ngraveyard, graveyard_cap;

static void ext_destroy(cuda_event_ext *x) {
  for (int k = 0; k < gpu_count(); k++)
    if (x->ev[k]) cuda_quiet(cudaEventDestroy(x->ev[k]));
  free(x->ev);
  free(x->msg);
  free(x);
}

/* An event's last reference may go in a host callback (export_done),
 * where no CUDA call is allowed: its part waits in the graveyard for the
 * next call of this backend that may make them. */
static void ext_free(void *p) {
  if (!in_host_callback) {
    ext_destroy(p);
    return;
  }
  pthread_mutex_lock(&grave_mu);
  TFG_GROW(graveyard, ngraveyard, graveyard_cap, 8);
  graveyard[ngraveyard++] = p;
  pthread_mutex_unlock(&grave_mu);
}

void tfg_backend_cuda_graveyard_drain(void) {
  pthread_mutex_lock(&grave_mu);
  cuda_event_ext **g = graveyard;
  size_t n = ngraveyard;
  graveyard = NULL;
  ngraveyard = graveyard_cap = 0;
  pthread_mutex_unlock(&grave_mu);
  for (size_t i = 0; i < n; i++) ext_destroy(g[i]);
  free(g);
}

static void cuda_event_export(tfg_event *e, uint64_t gen);

static cuda_event_ext *event_ext(tfg_event *e) {
  pthread_mutex_lock(&e->mu);
  if (!e->ext) {
    cuda_event_ext *x = calloc(1, sizeof *x);
    TFG_ASSERT(x != NULL);
    x->ev = calloc((size_t)gpu_count() + 1, sizeof *x->ev);
    TFG_ASSERT(x->ev != NULL);
    e->ext = x;
    e->ext_free = ext_free;
    e->ext_export = cuda_event_export;
  }
  cuda_event_ext *x = e->ext;
  pthread_mutex_unlock(&e->mu);
  return x;
}

/* x's event on GPU gpu, made on first use. Only the thread that queues on
 * the event's streams (the executor's) makes them or reads ev[], so no
 * lock is needed for it. */
static cudaEvent_t ext_event(cuda_event_ext *x, int gpu, tfg_strbuf *why) {
  if (!x->ev[gpu]) {
    cudaEvent_t ce = NULL;
    if (!CUDA_OK(cudaSetDevice(gpu), why) || !CUDA_OK(cudaEventCreateWithFlags(&ce, cudaEventDisableTiming), why))
      return NULL;
    x->ev[gpu] = ce;
  }
  return x->ev[gpu];
}

tfg_event *tfg_backend_cuda_event_create(tfg_backend *b) {
  (void)b;
  tfg_backend_cuda_graveyard_drain();
  return tfg_event_new();
}

void tfg_backend_cuda_event_free(tfg_backend *b, tfg_event *e) {
  (void)b;
  if (e) tfg_event_unref(e);
}

/* The record is issued (generation, who, what it carries) after the
 * cudaEventRecord, under the event's mutex; a failed record fails the
 * stream, and the record then carries that failure. */
void tfg_backend_cuda_event_record(tfg_backend *b, tfg_stream *s, tfg_event *e) {
  cuda_backend *cb = cuda_of(b);
  cuda_event_ext *x = event_ext(e);
  tfg_strbuf why = {0};
  cudaEvent_t ce = ext_event(x, cb->gpu, &why);
  if (!ce || !s->s || !CUDA_OK(cudaSetDevice(cb->gpu), &why) || !CUDA_OK(cudaEventRecord(ce, s->s), &why))
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  tfg_strbuf_free(&why);
  pthread_mutex_lock(&e->mu);
  x->gen = ++e->issued;
  e->last_gpu = cb->gpu;
  x->status = s->status;
  free(x->msg);
  x->msg = s->status != TFG_OK ? strdup(s->err.data ? s->err.data : "") : NULL;
  pthread_mutex_unlock(&e->mu);
}

void tfg_backend_cuda_event_wait(tfg_backend *b, tfg_stream *s, tfg_event *e) {
  cuda_backend *cb = cuda_of(b);
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->issued;
  int gpu = e->last_gpu;
  cuda_event_ext *x = e->ext;
  cudaEvent_t ce = gpu >= 0 && x ? x->ev[gpu] : NULL;
  tfg_status carried = gpu >= 0 && x ? x->status : TFG_OK;
  char *msg = carried != TFG_OK && x->msg ? strdup(x->msg) : NULL;
  pthread_mutex_unlock(&e->mu);
  if (gen == 0 || s->status != TFG_OK) {
    /* never recorded: a no-op (as in CUDA); a failed stream waits for nothing */
    free(msg);
    return;
  }
  if (gpu >= 0) {
    if (carried != TFG_OK) {
      tfg_backend_cuda_stream_fail(s, carried, false, msg);
    } else if (ce) {
      tfg_strbuf why = {0};
      if (!CUDA_OK(cudaSetDevice(cb->gpu), &why) || !CUDA_OK(cudaStreamWaitEvent(s->s, ce, 0), &why))
        tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
      tfg_strbuf_free(&why);
    }
  } else {
    /* A host stream's record: wait here until it has run (see the top). */
    tfg_strbuf m = {0};
    tfg_status st = tfg_event_wait_done(e, gen, &m);
    if (st != TFG_OK) tfg_backend_cuda_stream_fail(s, st, false, m.data);
    tfg_strbuf_free(&m);
  }
  free(msg);
}

typedef struct export_rec {
  tfg_event *e; /* a reference, dropped by the callback */
  uint64_t gen;
  tfg_status status;
  char *msg;
} export_rec;

/* A host function (cudaLaunchHostFunc): no CUDA call in here. */
static void CUDART_CB export_done(void *arg) {
  export_rec *r = arg;
  in_host_callback = true;
  tfg_event_complete(r->e, r->gen, r->status, r->msg);
  tfg_event_unref(r->e);
  in_host_callback = false;
  free(r->msg);
  free(r);
}

/* event_impl.h's ext_export: a host stream waits for generation gen,
 * which a GPU's stream recorded: complete it on the host once that GPU
 * has reached the record (once per generation). */
static void cuda_event_export(tfg_event *e, uint64_t gen) {
  pthread_mutex_lock(&e->mu);
  cuda_event_ext *x = e->ext;
  int gpu = e->last_gpu;
  if (!x || gpu < 0 || x->gen != gen || x->exported >= gen || atomic_load(&e->done) >= gen) {
    pthread_mutex_unlock(&e->mu);
    return;
  }
  x->exported = gen;
  cudaEvent_t ce = x->ev[gpu];
  export_rec *r = calloc(1, sizeof *r);
  TFG_ASSERT(r != NULL);
  r->e = tfg_event_ref(e);
  r->gen = gen;
  r->status = x->status;
  r->msg = x->msg ? strdup(x->msg) : NULL;
  pthread_mutex_unlock(&e->mu);
  tfg_strbuf why = {0};
  cudaStream_t xs = ce ? tfg_backend_cuda_export_stream(gpu, &why) : NULL;
  if (xs && CUDA_OK(cudaSetDevice(gpu), &why) && CUDA_OK(cudaStreamWaitEvent(xs, ce, 0), &why) &&
      CUDA_OK(cudaLaunchHostFunc(xs, export_done, r), &why)) {
    tfg_strbuf_free(&why);
    return;
  }
  /* The GPU cannot tell us: complete it now, failed, so no host stream
   * waits forever (the recording stream has failed when ce is NULL). */
  tfg_event_complete(e, gen, r->status != TFG_OK ? r->status : TFG_ERR_DEVICE,
                     r->status != TFG_OK ? r->msg : why.data);
  tfg_event_unref(e);
  tfg_strbuf_free(&why);
  free(r->msg);
  free(r);
}
