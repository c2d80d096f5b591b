/* compiler/strategy/strategy.h: training strategies (LANGUAGE.md section
 * 6) as graph rewrites, one module per strategy behind one interface: a
 * strategy turns a train action into the nodes one step runs, pinned to
 * the devices it names, before the placer runs. The compile driver, the
 * CLI and the REPL call the interface (tfg_strategy_i, found by
 * tfg_strategy_lookup), never a strategy by name; a new strategy is one
 * file in this folder and one row of the registry (registry.c).
 *
 *   tfg_train_step st;
 *   tfg_job job = {.rank = 0, .size = 1};
 *   if (tfg_strategy_train_step(graph, &action, prog, &job, &switches, &st, diag) == TFG_OK) {
 *     // st.kind: how the runtime runs it; st.updates: every node a step
 *     // runs; st.losses[r]: replica r's loss
 *     tfg_train_step_free(&st);
 *   }
 *
 * The driver (compiler/compile.h, tfg_compile_train_step) runs autocast
 * (compiler/autocast.h) before the strategy: a strategy trains whatever
 * action it is given, the autocast clone's loss and metrics included.
 *
 * single() (single.c, the default): the step as autodiff builds it,
 *   placed as the placer decides (model parallelism from pins or the
 *   memory pass).
 * mirrored([d0, d1, ...]) (mirrored.c): synchronous data parallel. The
 *   forward cone of the loss and metrics is cloned once per replica r
 *   with every INPUT it reads replaced by r's rows of the global batch (a
 *   SLICE on cpu, rows [r * B / R, (r + 1) * B / R)), and its shapes
 *   inferred again; replica 0 trains the program's own params, replicas
 *   1.. their own copies (mirrors). Each replica's gradients (autodiff of
 *   its loss) go through an ALLREDUCE node per param (the mean over the
 *   replicas; key = replica 0's ALLREDUCE node id, shared by the replicas
 *   and unique in the graph, so two train actions never share a key; one
 *   node per device), and every replica applies the same update to its
 *   copy. Pins: a node of replica r with no pin goes to r's device; with
 *   a list of groups, mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]]), the
 *   program's gpu:K means the K-th device of r's group and an unpinned
 *   node goes to the group's first device; cpu pins stay. The global
 *   batch must divide evenly by the replica count (a scalar input has no
 *   batch: every replica reads it whole). The mean of the replicas'
 *   gradients is the global batch's gradient when the loss is a mean over
 *   the batch (cross_entropy, mse, mean). With accumulate = k, each
 *   replica sums its micro-batches' gradients where it keeps its params
 *   (tfg_autodiff_accumulate) and only the step's last micro-batch
 *   reaches the all-reduce: one all-reduce per optimizer step. Under
 *   mpirun the replicas are the job's: R on each of its processes, the
 *   global batch split over all of them, this rank's replicas taking the
 *   rows of replicas rank * R + r; the all-reduce's mean is over all of
 *   them (runtime/collective.h).
 * parallel(data = D, tensor = 1, pipeline = P) (parallel.c): D replicas
 *   of a pipeline of P stages on gpu:0 .. gpu:(D P - 1), each replica's
 *   batch in micro_batches clones scheduled as the schedule setting says
 *   (parallel.c and schedule.h say how).
 * parameter_server(ps = D, workers = [W0, W1, ...]) (parameter_server.c):
 *   asynchronous. Worker w gets a clone of the forward cone reading the
 *   program's inputs (each worker step takes its own whole batch), with
 *   its own param copies (worker_params) and gradients (worker_grads),
 *   all on W_w. The program's params, their optimizer state and updates
 *   go to D, each update reading its gradient from an INPUT placeholder
 *   (grad_inputs). The runtime pulls params into a worker, runs it, and
 *   pushes its gradients through the updates, in arrival order. A param
 *   the loss does not train (one only a metric reads) is not copied:
 *   workers read it from the server. The program's cpu pins stay; every
 *   other pin of a worker's clone goes to W_w. It runs in one process.
 * Every node a strategy adds carries the location of the node it clones
 * (an ALLREDUCE and a grad_inputs placeholder: their param's), and every
 * pin it sets carries the strategy's location, so explain can cite it (a
 * cpu pin the program wrote is kept with its own location). The
 * program's forward nodes stay in the graph, unchanged but for the pins
 * of its inputs (cpu) and params (replica 0's devices, or D): a print
 * after training still reads them, with the trained params. */
#ifndef TFG_STRATEGY_H
#define TFG_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>

#include "base/switches.h"
#include "compiler/autodiff.h"
#include "ir/device.h"

/* The process a rewrite runs in, among the processes of an mpirun job
 * (runtime/mpi.h): rank of size, {0, 1} outside a job; and the run's
 * devices when they are known (the compile driver sets them; NULL in
 * tfg check and tests), whose numbers a pipeline balances its stages
 * with. Passed to each rewrite rather than kept in a global, so two jobs
 * can be compiled in one process (a test, predict's scaling table). */
typedef struct tfg_job {
  int rank, size;
  const tfg_devices *ds;
} tfg_job;

struct tfg_strategy_i;

/* A train action's strategy setting, read and checked by its module. */
typedef struct tfg_strategy {
  const struct tfg_strategy_i *i; /* the module */
  tfg_loc loc;          /* the strategy setting's value, or the action */
  int nreplicas;        /* mirrored, parallel: replicas; parameter_server: workers; single: 1 */
  int group;            /* mirrored: devices per replica (1 unless a list of lists); parallel: pipeline */
  int stages;           /* parallel: the pipeline's devices per replica (P); else 1 */
  int ranks;            /* parallel: the mpirun job's ranks its one pipeline spans (devices then the job's
                         * GPUs, compiler/ranks.h); else 1 */
  tfg_devspec *devices; /* mirrored, parallel: [nreplicas * group]; parameter_server: the workers */
  tfg_devspec ps;       /* parameter_server: where params and updates live */
} tfg_strategy;

/* One strategy: what the driver, explain, predict and the runtime ask of
 * it. Every function is set (none is tested for NULL). */
typedef struct tfg_strategy_i {
  const char *name; /* the constructor it reads, as a train block writes it: "mirrored" */
  /* How the runtime runs the steps this strategy builds; also written to
   * each step's kind, which is what the runtime and the CLI read. */
  tfg_step_kind run;
  /* Settings: reads c into *out, whose i, loc, nreplicas (1) and group
   * (1) are set already, and checks them; errors are located at the
   * setting or the device. out->devices is malloc'ed (or NULL). */
  tfg_status (*read)(const tfg_strategy_config *c, tfg_strategy *out, tfg_diag *d);
  /* The rewrite: adds the nodes of a's step to g and describes them in
   * *out (zeroed by the caller), its gradients under sw (may be NULL:
   * the defaults, as tfg_autodiff's). On an error out is freed and g is
   * put back as it was (nodes and pins); the error is located. */
  tfg_status (*rewrite)(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_strategy *s,
                        const tfg_job *job, const tfg_switches *sw, tfg_train_step *out, tfg_diag *d);
  /* Explain: what st is in a few words, for --verbose ("mirrored over 2
   * replicas"), into buf of n bytes. */
  void (*describe)(const tfg_train_step *st, char *buf, size_t n);
  /* Predict: whether the replicas are every GPU of the run, decided from
   * the setting alone (mirrored() and mirrored(gpu:*)), so that predict
   * shows how the step scales with the GPU count. A strategy whose
   * devices are named uses tfg_strategy_names_devices. */
  bool (*spans_gpus)(const tfg_strategy_config *c);
  /* The devices: how many GPUs the setting asks for without naming them
   * (parallel(data = 2, pipeline = 2): 4), which the run's devices must
   * give; 0 for none (tfg_strategy_no_gpus). */
  int (*gpus)(const tfg_strategy_config *c);
  /* Predict: NULL when the cost model can time a step of the whole job;
   * else why not (a sentence, no newline). */
  const char *not_predicted;
} tfg_strategy_i;

/* spans_gpus of a strategy whose devices the setting names: false. */
bool tfg_strategy_names_devices(const tfg_strategy_config *c);
/* gpus of a strategy that asks for no GPU count: 0. */
int tfg_strategy_no_gpus(const tfg_strategy_config *c);

/* The module of strategy c (every strategy constructor of lang/builtins.c
 * has one: registry.c). */
const tfg_strategy_i *tfg_strategy_lookup(const tfg_strategy_config *c);

/* Reads a train action's strategy (a->config.strategy) with its module's
 * read and checks its devices. Errors, located at the strategy or the
 * device: an empty device list, groups of different sizes, a device that
 * is not cpu or gpu:N, a device named twice, a missing ps or workers
 * argument. devices is malloc'ed: tfg_strategy_free. */
tfg_status tfg_strategy_of(const tfg_action *a, tfg_strategy *out, tfg_diag *d);
void tfg_strategy_free(tfg_strategy *s);

/* Builds the step of train action a under its strategy (adding nodes to
 * g) for the process job names (NULL: one process), as the comment atop
 * this file describes; single() is tfg_autodiff_train_step. The
 * gradients follow sw (may be NULL: the defaults), as tfg_autodiff's
 * do. Errors,
 * located: what tfg_strategy_of reports; a global batch that does not
 * divide by the replica count (at the input); a shape that does not
 * survive the batch split (at the op whose shape rule fails, with a note
 * naming the strategy); a gpu:K pin past mirrored's group size (at the
 * pin); a parameter server under mpirun; a bad optimizer argument. On an
 * error out is empty and the graph as it was (nodes and pins). */
tfg_status tfg_strategy_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                                   const tfg_switches *sw, tfg_train_step *out, tfg_diag *d);

#endif
