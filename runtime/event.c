/* runtime/event.c: the event object both backends share (runtime/event.h;
 * its body is in runtime/event_impl.h, where the CUDA backend reaches
 * its part).
 *
 * Why generations rather than a flag: an event is recorded again each
 * step without being reset, records of one event on two streams may run
 * out of order, and a wait must be released by any record at least as
 * recent as the one it names. `done` only grows (tfg_event_complete
 * ignores an older generation), so a worker may read it without the lock
 * and never miss a completion: if it reads an old value it has either
 * registered as a waiter already (and is woken) or will scan again. */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/assert.h"
#include "base/grow.h"
#include "runtime/event_impl.h"
#include "runtime/event.h"

tfg_event *tfg_event_new(void) {
  tfg_event *e = calloc(1, sizeof *e);
  TFG_ASSERT(e != NULL);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->done_cv, NULL);
  atomic_init(&e->done, 0);
  atomic_init(&e->refs, 1);
  e->last_gpu = -1;
  return e;
}

tfg_event *tfg_event_ref(tfg_event *e) {
  atomic_fetch_add(&e->refs, 1);
  return e;
}

void tfg_event_unref(tfg_event *e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  TFG_ASSERT(e->nwaiters == 0 && e->sleepers == 0);
  if (e->ext && e->ext_free) e->ext_free(e->ext);
  pthread_cond_destroy(&e->done_cv);
  pthread_mutex_destroy(&e->mu);
  tfg_strbuf_free(&e->err);
  free(e->waiters);
  free(e);
}

uint64_t tfg_event_issue(tfg_event *e, int gpu) {
  pthread_mutex_lock(&e->mu);
  uint64_t gen = ++e->issued;
  e->last_gpu = gpu;
  pthread_mutex_unlock(&e->mu);
  return gen;
}

uint64_t tfg_event_latest(tfg_event *e, void (**export)(tfg_event *e, uint64_t gen)) {
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->issued;
  if (export) *export = e->last_gpu >= 0 ? e->ext_export : NULL;
  pthread_mutex_unlock(&e->mu);
  return gen;
}

/* The waiters' wakes run under e->mu: a waiter leaves the list only under
 * e->mu, and cannot be destroyed while on it, so each pointer is live
 * while it is woken. */
void tfg_event_complete(tfg_event *e, uint64_t gen, tfg_status st, const char *msg) {
  pthread_mutex_lock(&e->mu);
  if (gen > atomic_load(&e->done)) {
    e->status = st;
    tfg_strbuf_clear(&e->err);
    if (st != TFG_OK) tfg_strbuf_puts(&e->err, msg ? msg : "");
    atomic_store(&e->done, gen);
    for (size_t i = 0; i < e->nwaiters; i++) e->waiters[i]->wake(e->waiters[i]);
    if (e->sleepers) pthread_cond_broadcast(&e->done_cv);
  }
  pthread_mutex_unlock(&e->mu);
}

bool tfg_event_is_done(tfg_event *e, uint64_t gen) { return atomic_load(&e->done) >= gen; }

/* The failure the latest completed record carried; under e->mu. */
static tfg_status carried_locked(tfg_event *e, tfg_strbuf *msg) {
  if (e->status != TFG_OK && msg) tfg_strbuf_puts(msg, e->err.data ? e->err.data : "");
  return e->status;
}

tfg_status tfg_event_wait_done(tfg_event *e, uint64_t gen, tfg_strbuf *msg) {
  pthread_mutex_lock(&e->mu);
  e->sleepers++;
  while (atomic_load(&e->done) < gen) pthread_cond_wait(&e->done_cv, &e->mu);
  e->sleepers--;
  tfg_status st = carried_locked(e, msg);
  pthread_mutex_unlock(&e->mu);
  return st;
}

void tfg_event_add_waiter(tfg_event *e, tfg_event_waiter *w) {
  pthread_mutex_lock(&e->mu);
  TFG_GROW(e->waiters, e->nwaiters, e->waiters_cap, 4);
  e->waiters[e->nwaiters++] = w;
  pthread_mutex_unlock(&e->mu);
}

tfg_status tfg_event_end_wait(tfg_event *e, tfg_event_waiter *w, tfg_strbuf *msg) {
  pthread_mutex_lock(&e->mu);
  if (w) {
    size_t i = 0;
    while (i < e->nwaiters && e->waiters[i] != w) i++;
    TFG_ASSERT(i < e->nwaiters && "event waiter not found");
    e->waiters[i] = e->waiters[--e->nwaiters];
  }
  tfg_status st = carried_locked(e, msg);
  pthread_mutex_unlock(&e->mu);
  return st;
}
