/* compiler/autodiff.h: reverse-mode gradients and the training step, as
 * ordinary graph nodes.
 *
 *   tfg_train_step st;
 *   tfg_status s = tfg_autodiff_train_step(graph, &action, &st, diag);
 *   // st.loss, st.updates[i] (run every step), st.states (persistent)
 *
 * Gradients are added after the forward graph; every gradient node keeps
 * the location and device annotation of the forward node it differentiates
 * (gradients are colocated with their ops, as TensorFlow's placer does),
 * so a failure in the backward pass still points at the user's source.
 * The gradient rule of each op is in this file's table (one case per op of
 * compiler/ops.h); ops with no gradient stop it (comparisons, argmax,
 * one_hot, accuracy, integer casts). */
#ifndef TFG_AUTODIFF_H
#define TFG_AUTODIFF_H

#include "compiler/graph.h"
#include "lang/interp.h"

/* Adds the nodes of d loss / d wrt[i] for every i and stores their ids in
 * grads[i] (-1 when loss does not depend on wrt[i]). loss must be a float
 * scalar. The gradient of a node used several times is the sum of its
 * uses'. Returns TFG_OK (a failure is a bug: asserted). */
tfg_status tfg_autodiff(tfg_graph *g, tfg_node_id loss, const tfg_node_id *wrt, int n, tfg_node_id *grads);

/* What one step of a train action runs. */
typedef struct tfg_train_step {
  tfg_node_id loss;
  int nparams;           /* params the loss depends on */
  tfg_node_id *params;
  tfg_node_id *updates;  /* the optimizer update of each param: fetch them all each step */
  int nstates;
  tfg_node_id *states;   /* optimizer state nodes (STATE ops), named PARAM:SLOT */
  int nmetrics;
  tfg_node_id *metrics;  /* the `metrics` setting's tensors */
  const char *optimizer; /* "sgd", "adam", "adamw" */
} tfg_train_step;

/* Builds the training step of a train action: gradients of its loss for
 * every param it depends on, and each param's optimizer update with its
 * state (SGD's momentum_buffer, Adam's exp_avg and exp_avg_sq). The
 * arrays are malloc'ed: tfg_train_step_free. */
tfg_status tfg_autodiff_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, tfg_train_step *out,
                                   tfg_diag *d);
void tfg_train_step_free(tfg_train_step *st);

#endif
