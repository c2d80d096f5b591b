/* runtime/session.h: runs a built program's graph on one CPU device.
 *
 *   tfg_session *s = tfg_session_new(prog, diag, &opts);  // params initialized
 *   tfg_tensor out[2];
 *   if (tfg_session_run(s, fetch, 2, out) == TFG_OK) ...   // views, valid until the next run
 *   tfg_session_free(s);
 *
 * A run computes exactly the nodes the fetched ones depend on, in graph
 * order, each on the CPU kernels of the op registry, freeing every
 * intermediate once its last consumer has run. Inputs fed from a dataset
 * get the first batch of their split; others get the array given with
 * --feed. A kernel failure is reported at the op's source location, with
 * the op's name, and the run returns its status (a runtime failure). */
#ifndef TFG_SESSION_H
#define TFG_SESSION_H

#include "kernels/kernel.h"
#include "lang/interp.h"

typedef struct tfg_feed_file {
  const char *name; /* an input's name */
  const char *path; /* a .npy file */
} tfg_feed_file;

typedef struct tfg_session_opts {
  int threads;      /* CPU worker threads for kernels; 0: one per core */
  const tfg_feed_file *feeds;
  int nfeeds;
  uint64_t seed;    /* mixed into every param initializer's seed (--seed) */
} tfg_session_opts;

typedef struct tfg_session tfg_session;

/* Creates a session and initializes every param. Returns NULL after
 * reporting (a --feed file that cannot be read or does not match). */
tfg_session *tfg_session_new(const tfg_program *p, tfg_diag *d, const tfg_session_opts *o);
void tfg_session_free(tfg_session *s);
/* Computes the fetched nodes into out[i] (data owned by the session). */
tfg_status tfg_session_run(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out);

#endif
