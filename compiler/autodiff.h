/* compiler/autodiff.h: reverse-mode gradients and the training step, as
 * ordinary graph nodes.
 *
 *   tfg_train_step st;
 *   tfg_status s = tfg_autodiff_train_step(graph, &action, prog, &switches, &st, diag);
 *   // st.loss, st.updates[i] (run every step), st.states (persistent)
 *
 * Gradients are added after the forward graph; every gradient node keeps
 * the location and device annotation of the forward node it differentiates
 * (gradients are colocated with their ops, as TensorFlow's placer does),
 * so a failure in the backward pass still points at the user's source.
 * The gradient rule of each op is in this file's table (one case per op of
 * ir/ops.h); ops with no gradient stop it (comparisons, argmax,
 * one_hot, accuracy, integer casts). */
#ifndef TFG_AUTODIFF_H
#define TFG_AUTODIFF_H

#include "base/switches.h"
#include "ir/graph.h"
#include "ir/program.h"

/* Adds the nodes of d loss / d wrt[i] for every i and stores their ids in
 * grads[i] (-1 when loss does not depend on wrt[i]). loss must be a float
 * scalar. The gradient of a node used several times is the sum of its
 * uses'. The switches the rules read (sw: may be NULL, the defaults):
 * no_opt (the rewrites that change a rule's shape, not its value) and
 * no_attention_grad (attention's gradient through its probabilities),
 * here and in the functions below that build gradients. Returns TFG_OK
 * (a failure is a bug: asserted). */
tfg_status tfg_autodiff(tfg_graph *g, tfg_node_id loss, const tfg_node_id *wrt, int n, tfg_node_id *grads,
                        const tfg_switches *sw);

/* tfg_autodiff, and for each node it adds (ids from the graph's node
 * count at the call on), the forward node whose gradient rule made it
 * (the loss for the seed): origin[id - count], malloc'ed (NULL when it
 * added none). A pipeline (compiler/strategy/parallel.c) schedules each
 * gradient node with the stage of its forward node. */
tfg_node_id *tfg_autodiff_traced(tfg_graph *g, tfg_node_id loss, const tfg_node_id *wrt, int n, tfg_node_id *grads,
                                 const tfg_switches *sw);

/* What one step of a train action runs. A strategy (compiler/strategy.h)
 * may replicate the step: then every replica has its own loss and
 * metrics, and persistent copies of the program's params and state. */
/* How the runtime runs a training step, set by the strategy that built
 * it (compiler/strategy/strategy.h): the one thing the runtime and the
 * CLI dispatch on, so that they never test a strategy's fields. */
typedef enum tfg_step_kind {
  /* synchronous (single, mirrored): each step is one run of the session
   * (a run per micro-batch), and consecutive train actions of this kind
   * train together as one group (runtime/train.h tfg_train_group) */
  TFG_STEP_GROUP,
  /* asynchronous (parameter_server): workers pull the params, compute
   * and push their gradients to a server, a job alone (tfg_train_ps) */
  TFG_STEP_SERVER,
} tfg_step_kind;

typedef struct tfg_train_step {
  tfg_step_kind kind;    /* how it runs; TFG_STEP_GROUP when zeroed, as autodiff builds it */
  tfg_node_id loss;      /* the loss (replica 0's) */
  int nparams;           /* the program's params the loss depends on */
  tfg_node_id *params;   /* their nodes: the checkpoint's tensors */
  int nupdates;
  tfg_node_id *updates;  /* every optimizer update (all replicas): fetch them all each step */
  int nstates;
  tfg_node_id *states;   /* the optimizer state of params[] (STATE nodes named PARAM:SLOT) */
  int nmetrics;
  tfg_node_id *metrics;  /* the `metrics` setting's tensors (replica 0's) */
  const char *optimizer; /* "sgd", "adam", "adamw" (tfg_optimizer_name) */

  /* Replicas: 1 for a plain step; mirrored's replicas; parameter_server's
   * workers. losses[r] and metrics_of[r * nmetrics + k] are replica r's
   * (losses[0] == loss). */
  int nreplicas;
  tfg_node_id *losses;
  tfg_node_id *replica_metrics;
  /* Persistent nodes of replicas 1.. (their params and state), each a
   * copy of a replica-0 node: mirror_dst[i] starts as mirror_src[i]'s
   * value, after initialization and after a checkpoint is restored. */
  int nmirrors;
  tfg_node_id *mirror_src, *mirror_dst;
  /* TFG_STEP_SERVER only (NULL otherwise): worker w computes
   * worker_grads[w * nparams + i], the gradient of params[i] at its own
   * copy worker_params[w * nparams + i]; the server's updates read the
   * gradient from grad_inputs[i], an INPUT node fed with a worker's
   * gradient (updates[i] is params[i]'s update). */
  tfg_node_id *worker_grads, *worker_params, *grad_inputs;
  /* accumulate = k: each optimizer step runs k micro-batches, each a run
   * of the session. With k > 1 the first fetches acc_first, the next
   * k - 2 acc_add, the last the updates, whose gradients are (acc +
   * grad) / k (tfg_autodiff_accumulate). accs[i] is updates[i]'s
   * accumulator, a STATE node colocated with its param and never in a
   * checkpoint (a step leaves it spent); all three are [nupdates], NULL
   * when k is 1. */
  int accumulate;
  tfg_node_id *accs, *acc_first, *acc_add;
  /* precision = f16: each replica's grad scaler update (AMP_UPDATE,
   * tfg_amp), run with the updates (in a step's last micro-batch); none
   * without a scaler. */
  int nscalers;
  tfg_node_id *scalers;
  /* Nodes a schedule needs computed where they stand (a pipeline's
   * partial sums of its micro-batches' gradients): fusion keeps them
   * materialized, so each micro-batch's gradient is freed once added
   * rather than held for one launch at the end; and the sends of a
   * pipeline across ranks, which nothing reads (compiler/ranks.h). */
  int nstaged;
  tfg_node_id *staged;
  /* A pipeline's shape (parallel(pipeline = P > 1)), for predict's
   * bubble; zero otherwise. Its nodes from pipe_post on (ids, the graph's
   * order) come after every stage's last backward: the all-reduce,
   * clipping and the updates. */
  tfg_pipe pipe;
  tfg_node_id pipe_post;
  /* Each node's unit from pipe_first to pipe_post (--trace's labels):
   * the forward of micro-batch m on stage s is s * M + m, its backward
   * V M + s M + m (V = pipe.devices * pipe.chunks), else -1. */
  tfg_node_id pipe_first;
  int32_t *pipe_unit;
  /* The ranks of the mpirun job its one model spans: > 1 when a
   * pipeline's stages are on several ranks, its pins naming the job's
   * GPUs (gpu:k is GPU k % G of rank k / G, G a rank's GPUs) until the
   * compile driver splits it (compiler/ranks.h); 1 otherwise, data
   * replicas on every rank included (0 when zeroed: 1). */
  int ranks;
  /* ZeRO (zero = 1, 2: compiler/strategy/replicate.c): the optimizer
   * state is sharded over the nshards data-parallel replicas of the job;
   * states[j] (this process's first replica's) is whole in a checkpoint,
   * the shape of state_param[j], made of every replica's piece of its
   * elements in order (the last pieces zero-padded past them). This
   * process holds pieces shard_first .. + local_shards, piece
   * shard_first + r being state_shards[j * local_shards + r]; the others
   * are other ranks' (under mpirun). 0 and NULL otherwise. */
  int zero, nshards, shard_first, local_shards;
  tfg_node_id *state_shards, *state_param;
  /* What the strategy decided that the placement does not show, as
   * lines for place --explain (a pipeline's cuts and why each falls
   * where it does); malloc'ed, or NULL. */
  char *explain;
} tfg_train_step;

/* precision = f16's dynamic loss scaling, torch.cuda.amp.GradScaler with
 * its defaults (kernels/optim_math.h): the loss is multiplied by `scale`
 * before the gradients are taken; they are multiplied back by 1 / scale
 * (formed in f64 and rounded to f32, as PyTorch's unscale does) before
 * clipping and the updates; a step where any of them is not finite skips
 * every update and halves the scale, and 2000 good steps in a row double
 * it. The scaler's state: f32 scalar STATE nodes beside the loss, kept in
 * a checkpoint's metadata rather than its tensors (runtime/train.c), as
 * PyTorch keeps GradScaler.state_dict() apart from the model's. */
typedef struct tfg_amp {
  tfg_node_id scale;   /* "grad_scaler:scale", from 65536 */
  tfg_node_id tracker; /* "grad_scaler:growth_tracker": good steps in a row */
  tfg_node_id skipped; /* "grad_scaler:skipped": steps skipped so far (the updates' step is the step less these) */
  tfg_node_id update;  /* the AMP_UPDATE that moves them after a step (tfg_autodiff_updates) */
  bool made;           /* the state exists: a pipeline's later micro-batches scale by it too */
} tfg_amp;

/* Creates amp's state beside loss (its location and pin) unless amp has
 * it already (amp->made: another micro-batch of the same replica), and
 * returns the scaled loss, loss * scale, to differentiate instead of loss. */
tfg_node_id tfg_autodiff_scale_loss(tfg_graph *g, tfg_node_id loss, tfg_amp *amp);

/* Adds the optimizer update of each params[i] with gradient grads[i]
 * (the train action's optimizer, a->config.optimizer), creating its state (SGD's
 * momentum_buffer, Adam's exp_avg and exp_avg_sq; STATE nodes named
 * PARAM:SLOT, colocated with the param). updates[i] gets the update;
 * the state nodes are appended to states[*nstates...] (room for 2 * n).
 * With amp (else NULL), grads are scaled gradients: they are unscaled and
 * checked, each update skips a step whose gradients are not all finite,
 * and amp->update gets the scaler's update (tfg_amp).
 * The optimizer's arguments were checked where they were written (the
 * interpreter's sgd/adam/adamw), so this returns TFG_OK. */
tfg_status tfg_autodiff_updates(tfg_graph *g, const tfg_action *a, const tfg_node_id *params, const tfg_node_id *grads,
                                int n, tfg_amp *amp, tfg_node_id *updates, tfg_node_id *states, int *nstates,
                                tfg_diag *d);

/* Adds lines (each ending in a newline) to st->explain, after what is
 * there, or before it when first (a pipeline's cuts lead). */
void tfg_train_step_explain(tfg_train_step *st, const char *lines, bool first);

/* clip_grad_norm's scaling (torch.nn.utils.clip_grad_norm_): grads[0..n)
 * scaled by min(1, max / (norm + 1e-6)) into out[], norm the square root
 * of their squares' sum in f64, each scaled one where its gradient is. What
 * tfg_autodiff_updates does first when the action clips; apart for ZeRO,
 * which clips whole gradients and then updates shards. */
void tfg_autodiff_clip(tfg_graph *g, tfg_diag *d, double max, const tfg_node_id *grads, int n, tfg_node_id *out);
/* Its two halves: the f64 sum of grads[0..n)'s squares (where grads[0]
 * is); and the scaling by the norm sqrt(total * factor) (ZeRO 2: a mean
 * of the replicas' sums, all-reduced, times their count). */
tfg_node_id tfg_autodiff_sumsq(tfg_graph *g, tfg_diag *d, const tfg_node_id *grads, int n);
void tfg_autodiff_clip_by(tfg_graph *g, tfg_diag *d, double max, tfg_node_id total, double factor,
                          const tfg_node_id *grads, int n, tfg_node_id *out);

/* accumulate = k > 1: each grads[i] (the gradient of params[i] on one
 * micro-batch) is replaced by (acc_i + grads[i]) / k, the mean over the
 * step's k micro-batches, where acc_i is a new STATE node "PARAM:grad_acc"
 * colocated with params[i] into accs[i], which the step's earlier
 * micro-batches fill: first[i] writes grads[i] into it, add[i] adds
 * grads[i] to it (GRAD_ACCUMULATE). A strategy calls this before its
 * all-reduce, so that a step has one all-reduce, not one per micro-batch. */
void tfg_autodiff_accumulate(tfg_graph *g, int k, const tfg_node_id *params, tfg_node_id *grads, int n,
                             tfg_node_id *accs, tfg_node_id *first, tfg_node_id *add, tfg_diag *d);

/* The params train action a's loss reaches with a gradient, in program
 * order, into params (room for p->nparams); returns their count. The
 * graph is left as it was (the gradient is built and undone): a strategy
 * calls this to learn which params each replica clones. With none, it
 * warns at the action, naming the ops where the gradient stopped. */
int tfg_autodiff_trained_params(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_switches *sw,
                                tfg_node_id *params, tfg_diag *d);

/* Builds the training step of a train action: gradients of its loss for
 * every param it depends on, and each param's optimizer update with its
 * state (SGD's momentum_buffer, Adam's exp_avg and exp_avg_sq). The
 * arrays are malloc'ed: tfg_train_step_free. */
tfg_status tfg_autodiff_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_switches *sw,
                                   tfg_train_step *out, tfg_diag *d);
void tfg_train_step_free(tfg_train_step *st);
/* Renumbers every node id of st through map (tfg_graph_reorder's). */
void tfg_train_step_remap(tfg_train_step *st, const tfg_node_id *map);

/* A pipeline's micro-batch m of k (compiler/strategy/parallel.c): its
 * loss, a mean over its rows, divided by k, so that its gradient is its
 * share of the step's (Megatron-LM divides by the micro-batches the same
 * way), and precision = f16's scaled values stay those of one device.
 * With k = 1 the loss itself. */
tfg_node_id tfg_autodiff_part(tfg_graph *g, tfg_node_id loss, int k);

/* The step's gradients from a pipeline's k micro-batches: out[i] is the
 * sum of grads[m * stride + i] over m < k (each the gradient of params[i]
 * on micro-batch m's part of the loss), summed in micro-batch order where
 * the param is (the order is the graph's, not the schedule's, so gpipe
 * and 1f1b sum alike). With k = 1 it is grads[i] and adds nothing. The
 * partial sums are appended to st->staged (grown here). */
void tfg_autodiff_micro_sum(tfg_graph *g, int k, const tfg_node_id *params, const tfg_node_id *grads, int stride,
                            int n, tfg_node_id *out, tfg_train_step *st);

#endif
