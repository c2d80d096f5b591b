/* runtime/session.h: runs a built program's graph: its params, its
 * inputs, and an executor (runtime/exec.h) over a plan.
 *
 *   tfg_session *s = tfg_session_new(prog, diag, &opts);  // params initialized
 *   tfg_tensor out[2];
 *   if (tfg_session_run(s, fetch, 2, out) == TFG_OK) ...   // host copies, valid until the next run
 *   tfg_session_free(s);
 *
 * With opts.plan the session runs that plan (its devices, placement,
 * streams and memory); without, it plans the whole graph on cpu:0 alone,
 * pins ignored (tests, benchmarks): a graph with a strategy's all-reduce
 * nodes needs a plan, as their replicas must be on distinct devices. Params and optimizer state (PARAM and
 * STATE nodes) live in the executor's memory; update ops write them in
 * place. A run computes exactly what the fetched nodes need. Inputs fed
 * from a dataset get the batch the run asks for; others get the array
 * given with --feed, or a value given to the run. A kernel failure is
 * reported at the op's source location, with the op's name and device,
 * and the run returns its status (a runtime failure). */
#ifndef TFG_SESSION_H
#define TFG_SESSION_H

#include <stdint.h>
#include <stdio.h>

#include "base/switches.h"
#include "ir/program.h"
#include "kernels/kernel.h"

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
  const struct tfg_plan *plan; /* NULL: the whole graph on cpu:0 */
  const uint8_t *use;  /* per device of plan: whether this session runs it (NULL: all) */
  struct tfg_trace *trace; /* --trace (NULL: none) */
  bool preallocate;  /* --memory preallocate: device pools take their capacity at once */
  bool tf32;         /* --tf32: f32 matrix products on GPUs may use TF32 */
  tfg_switches sw;   /* the A/B switches and fault hooks of the executor and backends (tfg_exec_opts) */
  /* A pipeline across the ranks of an mpirun job (compiler/ranks.h):
   * per node, the rank that computes it, -1 every rank (tfg_compiled's
   * owner); NULL: every node is this process's. With it, every rank runs
   * the same runs (collectives: the same fetches in the same order), each
   * computing its own nodes of the fetches' cone and sending what the
   * others receive, and every fetched value is returned on every rank
   * (broadcast from its owner); tfg_session_read is a collective too,
   * tfg_session_write of another rank's node does nothing. */
  const int16_t *owner;
  int rank;          /* with owner: this process's rank */
} tfg_session_opts;

/* How one run feeds its inputs and runs its kernels. */
typedef struct tfg_run_opts {
  bool training;     /* dropout active */
  int64_t step;      /* the training step from 1 (Adam, dropout masks); 0 outside training */
  uint64_t seed;     /* the train action's seed (dropout masks) */
  tfg_split split;   /* dataset-fed inputs read this split ... */
  bool any_split;    /* ... (true) or the split each input names (false) */
  int64_t epoch;     /* ... in this epoch's order ... */
  int64_t first;     /* ... from this row (batch index times batch size) ... */
  int64_t valid;     /* ... or (valid > 0) only this many rows from `first`, the last of them repeated
                      * to fill the batch (an evaluation's last rows, when fewer than a batch) */
  int nvalues;       /* INPUT nodes given a host value for this run (a parameter server's gradients) */
  const tfg_node_id *value_nodes;
  const void *const *values;
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
/* Sets the params from the program's load statements, in program order
 * (a later load overrides an earlier one): each file read in full and
 * matched again (tfg_ckpt_read_load), as it may have changed since the
 * program was checked. Called once, after tfg_session_new and before the
 * first action. Returns TFG_OK or the failing load's status (reported
 * at the load); the params set before it keep their new values. */
tfg_status tfg_session_load_params(tfg_session *s);
/* Copies a PARAM or STATE node's value out of or into the session
 * (the node must be on a device the session runs). */
void tfg_session_read(tfg_session *s, tfg_node_id id, void *host);
void tfg_session_write(tfg_session *s, tfg_node_id id, const void *host);
/* Whether the session holds id's value (its device is one it runs). */
bool tfg_session_holds(const tfg_session *s, tfg_node_id id);
/* How many of the session's runs replayed a captured run (CUDA Graphs,
 * runtime/exec.h). */
int64_t tfg_session_replays(const tfg_session *s);

/* Writes a line per device the session's plan uses to out: "memory
 * NAME: planned peak SIZE, measured peak SIZE" (tfg_exec_memory). */
void tfg_session_memory_report(const tfg_session *s, FILE *out);

#endif
