/* runtime/event_impl.h: the body of the event object (runtime/event.h),
 * for runtime/event.c and the CUDA backend (runtime/backend_cuda.c), which
 * hangs its part on it, and for the backend tests. The host backend goes
 * through event.h's functions only.
 *
 * One event type serves every backend, so an executor that mixes host
 * devices (cpu:0 feeding data, a parameter server) with CUDA devices can
 * record an event on one kind of stream and wait for it on the other.
 * The host part below is the whole event for host backends (see the top
 * of backend_host.c: generations, waiter lists, carried failures). The
 * CUDA backend hangs its part on `ext` (one cudaEvent per physical GPU,
 * the failure its latest record carried) and keeps `last_gpu` up to date:
 *
 *   - a CUDA stream waits for a CUDA record with cudaStreamWaitEvent;
 *   - a host stream waits for a CUDA record: host_event_wait gets
 *     ext_export from tfg_event_latest and calls ext_export(e, gen), which
 *     makes the CUDA side complete generation gen on the host
 *     (tfg_event_complete from a cudaLaunchHostFunc callback queued
 *     behind the record) so the host worker's usual wait is released;
 *   - a CUDA stream waits for a host record: the caller's thread waits
 *     (tfg_event_wait_done) until the host worker has run that record,
 *     then queues nothing: the GPU never spins on host memory.
 *
 * Lock order: e->mu, then a host backend's mutex (tfg_event_complete
 * wakes host workers under e->mu). No CUDA call is made under e->mu. */
#ifndef TFG_EVENT_IMPL_H
#define TFG_EVENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "runtime/event.h"

struct tfg_event {
  pthread_mutex_t mu;
  uint64_t issued;           /* records issued so far (event_record calls); under mu */
  _Atomic uint64_t done;     /* the most recent generation known to have run on the host side */
  tfg_status status;         /* the failure the last completed record carried (TFG_OK: none); under mu */
  tfg_strbuf err;            /* its message; under mu */
  tfg_event_waiter **waiters; /* host backends with a stream blocked on this event; under mu */
  size_t nwaiters, waiters_cap;
  atomic_int refs;           /* the creator's, plus one per queued record, wait or export */
  pthread_cond_t done_cv;    /* for threads in tfg_event_wait_done */
  int sleepers;              /* threads waiting on done_cv; under mu */
  /* Who issued the latest record: -1 a host backend, else the CUDA
   * ordinal of the GPU whose stream recorded it; under mu. */
  int last_gpu;
  /* The CUDA backend's part (NULL until a CUDA stream records or waits
   * on the event); ext_free releases it when the last reference goes,
   * ext_export is what tfg_event_latest hands a host wait when last_gpu >= 0. */
  void *ext;
  void (*ext_free)(void *ext);
  void (*ext_export)(tfg_event *e, uint64_t gen);
};

#endif
