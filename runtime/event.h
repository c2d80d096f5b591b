/* runtime/event.h: the event object every backend shares, so an executor
 * that mixes host devices with CUDA devices can record an event on one
 * kind of stream and wait for it on the other.
 *
 * An event counts the records issued on it (generations 1, 2, ...) and
 * remembers the most recent generation known to have run, with the
 * failure that record carried (TFG_OK: none). A wait names the latest
 * generation issued when it is queued. The backends (runtime/backend_host.c,
 * runtime/backend_cuda.c) issue and complete records from their streams;
 * the executor only sees runtime/backend.h's tfg_backend_event_* functions.
 *
 *   tfg_event *e = tfg_event_new();            // refs 1
 *   uint64_t g = tfg_event_issue(e, -1);       // a host record, or a GPU's ordinal
 *   ...                                        // whoever runs the record, later:
 *   tfg_event_complete(e, g, TFG_OK, NULL);    // wakes waiters on e
 *   tfg_status st = tfg_event_wait_done(e, g, NULL); // a thread blocks until g ran
 *   tfg_event_unref(e);
 *
 * A host worker never sleeps on an event (that would stall its other
 * streams): it registers a tfg_event_waiter, whose wake callback
 * tfg_event_complete calls, and checks tfg_event_is_done on each scan.
 *
 * Lock order: the event's own lock, then whatever a waiter's wake takes
 * (a host backend's mutex). No CUDA call is made under the event's lock,
 * so a cudaLaunchHostFunc callback may call tfg_event_complete. The body
 * of struct tfg_event (the CUDA backend's part hangs on it) is in
 * runtime/event_impl.h. */
#ifndef TFG_EVENT_H
#define TFG_EVENT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "base/strbuf.h"

typedef struct tfg_event tfg_event;

/* Someone (a host backend's worker) to wake when a record of an event it
 * waits for completes. Embed it; wake is called under the event's lock
 * and must take no lock that is held while calling into the event. */
typedef struct tfg_event_waiter {
  void (*wake)(struct tfg_event_waiter *w);
} tfg_event_waiter;

/* A new event with one reference (the creator's). */
tfg_event *tfg_event_new(void);
tfg_event *tfg_event_ref(tfg_event *e);
/* Drops a reference; the last one frees the event (and its CUDA part). */
void tfg_event_unref(tfg_event *e);

/* Issues a record: returns its generation (++issued) and notes who
 * issued it (gpu: -1 for a host backend, else the CUDA ordinal). */
uint64_t tfg_event_issue(tfg_event *e, int gpu);
/* The latest generation issued (0: never recorded). When a GPU's stream
 * issued it and the CUDA side can hand it to the host, *export gets the
 * function that makes the CUDA side complete that generation here once
 * the GPU reaches it (else NULL; export may be NULL). */
uint64_t tfg_event_latest(tfg_event *e, void (**export)(tfg_event *e, uint64_t gen));

/* Generation gen has run, carrying failure st with message msg (TFG_OK:
 * none): wakes the registered waiters and the threads in
 * tfg_event_wait_done. An older generation than the latest done is
 * ignored. Makes no CUDA call. */
void tfg_event_complete(tfg_event *e, uint64_t gen, tfg_status st, const char *msg);
/* Whether generation gen has completed (a lock-free read). */
bool tfg_event_is_done(tfg_event *e, uint64_t gen);
/* Blocks the calling thread until generation gen has completed; returns
 * the failure the latest completed record carried (its message appended
 * to *msg when msg is not NULL). */
tfg_status tfg_event_wait_done(tfg_event *e, uint64_t gen, tfg_strbuf *msg);

/* Puts w on e's waiter list (once per blocked wait): every later
 * completion calls w->wake until tfg_event_end_wait removes it. */
void tfg_event_add_waiter(tfg_event *e, tfg_event_waiter *w);
/* A wait on e is over: removes one entry for w (NULL: w never
 * registered) and returns the failure the latest completed record
 * carried, its message appended to *msg when it failed and msg is not
 * NULL. */
tfg_status tfg_event_end_wait(tfg_event *e, tfg_event_waiter *w, tfg_strbuf *msg);

#endif
