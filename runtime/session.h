/* runtime/session.h: runs a built program's graph on one CPU device.
 *
 *   tfg_session *s = tfg_session_new(prog, diag, &opts);  // params initialized
 *   tfg_tensor out[2];
 *   if (tfg_session_run(s, fetch, 2, out) == TFG_OK) ...   // views, valid until the next run
 *   tfg_session_free(s);
 *
 * Params and optimizer state (PARAM and STATE nodes) live in the session;
 * update ops write them in place. A run computes exactly the nodes the
 * fetched ones depend on, in graph order, each on the CPU kernels of the op registry, freeing every
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
  bool check_numerics; /* after every op, fail on the first NaN or Inf it produced */
} tfg_session_opts;

/* How one run feeds its inputs and runs its kernels. */
typedef struct tfg_run_opts {
  bool training;     /* dropout active */
  int64_t step;      /* the training step from 1 (Adam, dropout masks); 0 outside training */
  uint64_t seed;     /* the train action's seed (dropout masks) */
  tfg_split split;   /* dataset-fed inputs read this split ... */
  bool any_split;    /* ... (true) or the split each input names (false) */
  int64_t epoch;     /* ... in this epoch's order ... */
  int64_t first;     /* ... from this row (batch index times batch size) */
} tfg_run_opts;

typedef struct tfg_session tfg_session;

/* Creates a session and initializes every param. Returns NULL after
 * reporting (a --feed file that cannot be read or does not match). */
tfg_session *tfg_session_new(const tfg_program *p, tfg_diag *d, const tfg_session_opts *o);
void tfg_session_free(tfg_session *s);
/* Computes the fetched nodes into out[i] (data owned by the session):
 * the first batch of every input, outside training. */
tfg_status tfg_session_run(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out);
/* The same with the batch and mode of ro. */
tfg_status tfg_session_run_with(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out,
                                const tfg_run_opts *ro);
/* The storage of a PARAM or STATE node (it persists across runs), or NULL. */
void *tfg_session_storage(tfg_session *s, tfg_node_id id);

#endif
