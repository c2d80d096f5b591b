/* runtime/train_impl.h: what the parts of the train action share
 * (runtime/train.c: the loop, evaluation, progress and interrupts;
 * runtime/train_ckpt.c: checkpoints; runtime/train_ps.c: the parameter
 * server's threads). Internal to those files. */
#ifndef TFG_TRAIN_IMPL_H
#define TFG_TRAIN_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/train.h"
#include "runtime/train_log.h"

/* A job's settings as its run uses them (a->config, ir/program.h): the
 * steps epochs make, the cadence of its log lines resolved. */
typedef struct cfg {
  int64_t steps, epochs, log_every, eval_every, checkpoint_every;
  int accumulate; /* micro-batches per step, at least 1 */
  uint64_t seed;
  const char *checkpoint;
  tfg_loc loc;
} cfg;

/* The batching of the train action: the first dataset-fed input decides
 * the batch size and the rows per epoch (inputs from one dataset see the
 * same rows). */
typedef struct batching {
  const tfg_feed *feed; /* NULL: no dataset input (every step the same) */
  int64_t batch, per_epoch;
} batching;

/* What a step reports: every replica's loss, then every replica's
 * metrics; means over the replicas (each saw an equal share of rows). */
typedef struct report {
  int n;            /* fetched: nreplicas * (1 + nmetrics) */
  tfg_node_id *fetch;
  tfg_tensor *out;
} report;

/* A train action of a group: its settings, batching and progress. */
typedef struct job {
  const tfg_action *a;
  const tfg_train_step *st;
  cfg c;
  batching b;
  char who[48];     /* "" alone; "train (line 12): " in a group */
  int64_t start;    /* the step restored from the checkpoint */
  int64_t done;     /* steps done */
  report rp;
  double *vals;     /* the step's loss and metrics: the mean over replicas and micro-batches */
  double *sum;      /* per value since the last log line */
  int64_t since;
  double tlog, t0;  /* the last log line; the start */
  double tbar;      /* the progress bar's last drawing (0: none yet) */
  bool bar_on;      /* the bar is on the screen */
  tfg_train_log *csv; /* log = "...": a row per logged step (rank 0's) */
  /* parameter_server */
  int64_t stale_sum, stale_max;
} job;

/* Seconds on a monotonic clock. */
double train_now(void);

/* Loss and metrics of train action a (its step st, batching b) on the
 * test split, logged at step to log (NULL: --quiet) after `who`. */
tfg_status train_evaluate(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                          const batching *b, int64_t step, const char *who, FILE *log);

/* Reads a job's settings and restores its checkpoint (s NULL: settings
 * only); grouped: its lines carry its train statement's line. */
tfg_status train_job_open(job *j, tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                          bool grouped, FILE *log, tfg_diag *d);
/* Frees j; closes its log (TFG_ERR_IO after an error if its last rows
 * could not be made durable). */
tfg_status train_job_close(job *j, tfg_diag *d);
/* The run options of micro-batch m of step k (both from 0) of job j. */
tfg_run_opts train_step_opts(const job *j, int64_t k, int m);
/* Adds micro-batch m's losses and metrics (j->rp.out) to the step's. */
void train_job_take(job *j, int m);
/* Takes step k's losses and metrics: checks the loss, accumulates, logs. */
tfg_status train_job_account(job *j, const tfg_program *p, int64_t k, const tfg_train_opts *o, tfg_diag *d);

/* A train runs from train_begin to train_end; train_stopped: a stop was
 * asked for (tfg_train_interrupt) since it began. */
void train_begin(void);
void train_end(void);
bool train_stopped(void);
/* After a stop: saves job j's checkpoint when it made progress and says
 * where it stopped; TFG_ERR_INTERRUPTED, or the save's failure. */
tfg_status train_interrupted(job *j, tfg_session *s, const tfg_program *p, tfg_diag *d);

/* ---- checkpoints (runtime/train_ckpt.c) ---- */

/* Saves the step's params, their state and an f16 grad scaler's state to
 * c->checkpoint as step `step` (rank 0 alone under mpirun). */
tfg_status train_save(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c, int64_t step,
                      tfg_diag *d);
/* Restores params and optimizer state from c->checkpoint when it exists;
 * *step is the step to resume at. */
tfg_status train_restore(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c,
                         int64_t *step, tfg_diag *d, FILE *log);
/* Copies replica 0's params and state to the other replicas' (mirrored):
 * every replica starts from the same values. */
void train_sync_mirrors(tfg_session *s, const tfg_program *p, const tfg_train_step *st);
/* The node of the step's persistent entry i: params, then their state. */
tfg_node_id train_entry_node(const tfg_train_step *st, int i);

#endif
