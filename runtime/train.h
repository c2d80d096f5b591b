/* runtime/train.h: the train action (LANGUAGE.md section 6) on a session.
 *
 *   tfg_train_step st;                       // compiler/autodiff.h
 *   tfg_autodiff_train_step(graph, action, prog, &st, diag);
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
} tfg_train_opts;

tfg_status tfg_train(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                     const tfg_train_opts *o, tfg_diag *d);

#endif
