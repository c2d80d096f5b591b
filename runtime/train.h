/* runtime/train.h: the train action (LANGUAGE.md section 6) on a session.
 *
 *   tfg_train_step st;                       // compiler/autodiff.h
 *   tfg_autodiff_train_step(graph, action, prog, NULL, &st, diag);
 *   tfg_session *s = tfg_session_new(prog, diag, &so);
 *   tfg_train_opts o = {.log = stderr, .tty = isatty(2)};
 *   tfg_status r = tfg_train(s, prog, action, &st, &o, diag);
 *
 * Step k (from 1) feeds batch (k - 1) of the epochs in order: each epoch
 * covers the train split's whole batches (a partial last batch is
 * dropped, as a DataLoader with drop_last does), in that epoch's shuffle
 * order. Each step runs the forward pass, the gradients and every
 * param's update. Progress goes to o->log every log_every steps (step,
 * mean loss and metrics since the last line, steps/s); evaluation on the
 * test split every eval_every steps and at the end; a checkpoint every
 * checkpoint_every steps and at the end, restored at the start when it
 * exists. A loss that is NaN or Inf stops the run with TFG_ERR_NUMERIC
 * naming the step; the last checkpoint is left as it was. */
#ifndef TFG_TRAIN_H
#define TFG_TRAIN_H

#include <stdbool.h>
#include <stdio.h>

#include "compiler/autodiff.h"
#include "runtime/session.h"

typedef struct tfg_train_opts {
  FILE *log;     /* progress and evaluation lines */
  bool tty;      /* log is a terminal: also a live status line */
  bool quiet;    /* only the final evaluation */
  /* Where the diagnostics recorded by then are printed once the jobs are
   * open, before the first step (a warning about what the checkpoint
   * restored must come before training overwrites it); NULL: left to the
   * caller. color: with ANSI escapes. */
  FILE *diag;
  bool color;
} tfg_train_opts;

tfg_status tfg_train(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                     const tfg_train_opts *o, tfg_diag *d);

/* Trains the jobs of one group (consecutive train actions, LANGUAGE.md
 * section 6) concurrently: each step is one run of the session with every
 * due job's updates, so the jobs' ops run at the same time, each on its
 * own devices (jobs whose batches differ take turns within the step).
 * Each job keeps its own steps, log (lines prefixed with its train
 * statement's line), evaluation and checkpoint. A step with several
 * replicas (mirrored) reports the mean of its replicas' losses and
 * metrics. */
tfg_status tfg_train_group(tfg_session *s, const tfg_program *p, const tfg_action *const *a, const tfg_train_step *st,
                           int njobs, const tfg_train_opts *o, tfg_diag *d);

/* A parameter_server job (a step of kind TFG_STEP_SERVER,
 * compiler/strategy/): the server's session holds the params, their
 * state and updates; each worker runs in its own
 * thread with its own session over its devices: it takes the next step's
 * batch, pulls the params, computes its gradients and pushes them, and
 * the server applies them in arrival order, without a barrier. The log
 * adds the staleness of the updates (how many updates landed between a
 * worker's pull and its push). Evaluation runs worker 0's model on the
 * server's final params; checkpoints hold the server's params and state.
 * The server starts from main's values of the params and state and gives
 * them back to main at the end (main runs the program's other actions). */
struct tfg_plan;
tfg_status tfg_train_ps(const tfg_program *p, const tfg_action *a, const tfg_train_step *st, const struct tfg_plan *plan,
                        tfg_session *main, const tfg_session_opts *so, const tfg_train_opts *o, tfg_diag *d);

/* Asks the train in progress (any of the above) to stop: it finishes its
 * current step, writes its checkpoint when it has one, reports
 * "training interrupted after step K of N" at the train statement and
 * returns TFG_ERR_INTERRUPTED (a parameter server's workers stop taking
 * steps; the server's params go back to main). Async-signal-safe: for a
 * SIGINT handler. Returns false when no train is running, or a stop was
 * asked for already (a second Ctrl-C: the caller may end the process). */
bool tfg_train_interrupt(void);

#endif
