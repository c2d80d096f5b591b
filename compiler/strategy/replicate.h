/* compiler/strategy/replicate.h: what the strategies that clone the
 * forward pass share (mirrored's replicas, a parameter server's
 * workers, a pipeline's micro-batches): reading device arguments,
 * building each clone of the forward cone and its gradients, and data
 * parallelism's batch split, all-reduce and updates.
 *
 *   tfg_replicate c;
 *   tfg_replicate_begin(&c, &hooks, g, a, p, s, job, sw, d, out); // the cone, the step's common arrays
 *   ... the strategy's own arrays, nodes that go before the clones ...
 *   tfg_status st = tfg_replicate_replicas(&c, out);           // every replica's clone and gradients
 *   ... the strategy's collectives and updates, from c.rparams and c.grads ...
 *   return tfg_replicate_end(&c, st, out);                      // on an error, the graph put back
 *
 * A replica may run several clones (c->per, set before
 * tfg_replicate_replicas: a pipeline's micro-batches), each on its own
 * rows of the batch; clone q is micro-batch q % per of replica q / per.
 * The hooks are called with the clone. The cone is every node the loss
 * and the metrics depend on; it is cloned once per clone in id order, so the clones stay topologically
 * ordered, with its inputs remapped to the replica's nodes and its shape
 * inferred again by the op's own rule (the raw arguments are still in
 * attrs, so a reshape to [-1, 4] follows a smaller batch and a reshape to
 * [128, 4] fails where the user wrote it). Gradients are ordinary
 * tfg_autodiff of each replica's loss: autodiff gives every gradient node
 * the pin of the forward node it differentiates, so a replica's backward
 * pass lands on its devices without further work. On any error the graph
 * is put back as it was (nodes truncated, pins restored), so a failed
 * rewrite leaves nothing behind for the placer to trip on. */
#ifndef TFG_STRATEGY_REPLICATE_H
#define TFG_STRATEGY_REPLICATE_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/autodiff.h"
#include "compiler/strategy/strategy.h"

typedef struct tfg_replicate tfg_replicate;

/* What differs between strategies while a replica's cone is cloned. */
typedef struct tfg_replicate_hooks {
  /* Where clone q runs cone node i, which the program pinned to *pin
   * (the program's own pin); an error is located at the pin. */
  tfg_status (*pin)(tfg_replicate *c, int32_t i, const tfg_devspec *pin, int q, tfg_devspec *out);
  /* Clone q's node for param i of the cone (nd: its node with the
   * program's pin): sets c->map[i], and the program's param's pin. A
   * later clone of the same replica finds c->map[i] as the first left it. */
  tfg_status (*param)(tfg_replicate *c, int q, int32_t i, const tfg_node *nd, tfg_train_step *out);
  /* After any other node i of the cone was cloned for clone q (st: how
   * the clone's shape rule went); may be NULL. */
  void (*cloned)(tfg_replicate *c, int q, int32_t i, tfg_status st);
  /* After clone q's gradients were added (nodes from `from` on), with
   * the forward node each was made for (origin[id - from]:
   * tfg_autodiff_traced); may be NULL: then they are not traced. */
  void (*traced)(tfg_replicate *c, int q, int32_t from, const tfg_node_id *origin);
} tfg_replicate_hooks;

struct tfg_replicate {
  const tfg_replicate_hooks *h;
  tfg_graph *g;
  const tfg_action *a;
  const tfg_strategy *s;
  tfg_job job;            /* the process: {0, 1} outside mpirun */
  const tfg_switches *sw; /* the gradients' switches (tfg_autodiff; NULL: the defaults) */
  tfg_diag *d;
  void *ctx;              /* the strategy's own state, for its hooks */
  int per;                /* clones per replica (1 unless set after tfg_replicate_begin) */
  int nclones;            /* s->nreplicas * per, set by tfg_replicate_replicas */
  int32_t n0;             /* nodes before the rewrite: what a failure truncates to */
  int32_t top;            /* the cone's largest id */
  uint8_t *cone;          /* [top + 1]: the loss's and metrics' dependencies */
  int *param_of;          /* [top + 1]: index into the step's params of a trained param, or -1 */
  tfg_node_id *map;       /* [top + 1]: the current replica's node for each cone node */
  tfg_devspec *saved;     /* [top + 1]: pins before the rewrite, restored on failure */
  int ncone_params;       /* the cone's params, trained or not */
  int n;                  /* the trained params (out->nparams) */
  tfg_node_id *rparams;   /* [clones * n]: clone q's node for trained param i at q * n + i */
  tfg_node_id *grads;     /* [clones * n]: its gradient; tfg_replicate_data_end reads replica r's at r * n + i */
  /* Set by the strategy before tfg_replicate_replicas (NULL: none): */
  tfg_node_id *slices;    /* [clones * (top + 1)]: clone q's node for each input of the cone, or -1: the input itself */
  tfg_amp *amps;          /* [R]: each replica's loss scaled (precision = f16) */
  tfg_node_id *ins;       /* scratch for remapped inputs */
  int cap;
};

/* Starts the rewrite of a's step under s (job: NULL for one process;
 * sw: the gradients' switches, NULL for the defaults, kept in c):
 * finds the cone and the params the loss trains (as
 * tfg_autodiff_train_step chooses them: out->params, out->nparams), and
 * allocates the arrays every replicated step has (losses, metrics,
 * replica_metrics, states; c->rparams, c->grads). Adds no node. */
void tfg_replicate_begin(tfg_replicate *c, const tfg_replicate_hooks *h, tfg_graph *g, const tfg_action *a,
                         const tfg_program *p, const tfg_strategy *s, const tfg_job *job, const tfg_switches *sw,
                         tfg_diag *d, tfg_train_step *out);

/* Clones the cone for every clone q in turn, each followed by its
 * gradients (tfg_autodiff of its loss, scaled by its replica's
 * c->amps[q / per] when set), every node of them pinned; sets
 * out->nreplicas (the clones), losses, replica_metrics, loss and
 * metrics. The first error (the hooks', a shape rule's) stops it. */
tfg_status tfg_replicate_replicas(tfg_replicate *c, tfg_train_step *out);

/* ---- data parallelism: the batch split, the all-reduce, the updates ------------ */

/* The step's arrays for R replicas (updates, mirrors; a grad scaler per
 * replica with precision = f16). After tfg_replicate_begin. */
void tfg_replicate_data_begin(tfg_replicate *c, tfg_train_step *out);
/* Checks that every input the cone reads splits into one equal row
 * block per clone of every process of the job (an error at the input,
 * with a note at the strategy); then adds each clone's SLICE of every
 * batched input on the cpu, before any clone, so that a clone on another
 * device starts while one on the cpu itself still computes. */
tfg_status tfg_replicate_split_batch(tfg_replicate *c);
/* Replica r's node for param i: replica 0 trains the program's own
 * param (re-pinned to *pin), replicas 1.. a copy of it on *pin, recorded
 * as a mirror. Sets c->map[i]. */
void tfg_replicate_param_copy(tfg_replicate *c, int r, int32_t i, const tfg_node *nd, const tfg_devspec *pin,
                              tfg_train_step *out);
/* The cloned hook of a data-parallel strategy: a clone's dropout draws
 * its rows' part of the whole batch's mask; a failed shape rule gets a
 * note at the strategy. */
void tfg_replicate_cloned(tfg_replicate *c, int q, int32_t i, tfg_status st);
/* The end of a data-parallel step, from each replica r's gradients at
 * c->grads[r * n + i] and params at c->rparams[r * n + i]: accumulate = k
 * sums the runs' gradients where each replica keeps its params, then one
 * all-reduce per gradient (the mean over the replicas) and every
 * replica's update of its own copy. */
tfg_status tfg_replicate_data_end(tfg_replicate *c, tfg_train_step *out);

/* Ends the rewrite with status st: on an error the graph is put back as
 * it was at tfg_replicate_begin and out freed. Frees c's arrays; returns
 * st. */
tfg_status tfg_replicate_end(tfg_replicate *c, tfg_status st, tfg_train_step *out);

/* Adds a copy of node src (by value: adding moves the array) with the
 * given inputs and pin; its dtype and shape are inferred again (the
 * shape rule's status). */
tfg_status tfg_replicate_add(tfg_replicate *c, const tfg_node *src, const tfg_node_id *ins, const tfg_devspec *pin,
                             tfg_node_id *out);

/* A pin the strategy sets: the device, cited at the strategy. */
tfg_devspec tfg_replicate_pin(const tfg_replicate *c, const tfg_devspec *dev);
/* The host CPU, cited at the strategy: where data is loaded. */
tfg_devspec tfg_replicate_cpu_pin(const tfg_replicate *c);

/* ---- reading device arguments ------------------------------------------------ */

/* What a device argument is, for messages ("an int"). */
const char *tfg_replicate_arg_what(const tfg_devarg *v);

/* Checks that v is a device a strategy can put a replica on (cpu or
 * gpu:N; gpu:* leaves the choice to the placer, which a strategy must
 * not) and not one of seen[0..n); reports at the device (or at the
 * strategy, s->loc, when the argument is not a device). who:
 * "mirrored", ...; what: which argument ("item 2"). */
bool tfg_replicate_check_device(const tfg_strategy_config *s, const char *who, const char *what, const tfg_devarg *v,
                                const tfg_devspec *seen, int n, tfg_diag *d);

#endif
