/* compiler/predict.h: `tfg plan --predict`: the time of one training
 * step, predicted before anything runs by replaying the plan's steps on
 * a cost model of its devices: compute, copies, all-reduces and how much
 * of the all-reduce the backward pass hides.
 *
 *   tfg_cost_table t;
 *   tfg_cost_table_init(&t, plan, &host);        // host: measured (runtime/calibrate.h)
 *   tfg_prediction r;
 *   tfg_predict(plan, &t, step, &r);              // step: the train action's tfg_train_step
 *   tfg_prediction_print(plan, &t, &r, &text);
 *   tfg_cost_table_free(&t);
 *
 * The cost model. A launch takes launch_s plus the longer of its FLOPs
 * at the device's rate and its bytes (inputs and output; a fused chain's
 * inputs and last output) at its bandwidth: the roofline. A copy takes
 * launch_s plus its bytes at the receiving device's copy bandwidth; an
 * INPUT is a copy from the host. A bucket's all-reduce starts once every
 * rank has reached it: the gradients copied into the bucket, then the
 * ring's 2 (R - 1) steps moving 2 (R - 1) / R of the bytes and reducing
 * (R - 1) / R of them (read two, write one), and across the processes of
 * an mpirun job the same ring over the network. Events order the steps
 * as the executor's streams do.
 *
 * Where the numbers come from. GPUs (cuda and sim) from the planning
 * table (ir/device.h: FLOP/s, memory and link bandwidth), 4 µs per launch
 * (a kernel launch from the host). Host devices from the host's measured
 * costs (tfg_host_costs), and each kernel's own time where it was
 * measured (kernel_s: the CPU kernel run on the node's shapes, on the
 * device's threads): a host device runs its streams on one worker
 * thread, and its kernels on its share of the cores, as the executor
 * shares them (the cores over the devices that compute, at least one
 * thread each); when the devices ask for more threads than there are
 * cores, each runs that much slower. */
#ifndef TFG_PREDICT_H
#define TFG_PREDICT_H

#include <stdbool.h>

#include "base/strbuf.h"
#include "compiler/autodiff.h"
#include "compiler/plan.h"

/* The host's costs, measured on this machine (runtime/calibrate.h). */
typedef struct tfg_host_costs {
  double flops;    /* a matrix product's FLOP/s on one thread */
  double mem_bw;   /* bytes/s one thread streams through an elementwise kernel */
  double copy_bw;  /* bytes/s of a copy (memcpy) on one thread */
  double launch_s; /* one op of a run on a host device: the executor's walk, the queue, its worker */
  double run_s;    /* a run of the executor beyond its ops: queuing it, waking the workers, the wait for it */
  double hop_s;    /* a record on one host device releasing a wait on another, asleep */
  int cores;       /* the threads the host devices share */
  int threads;     /* the kernel threads a run starts with (--threads, else the cores) */
} tfg_host_costs;

/* What one device of the plan costs. */
typedef struct tfg_cost_device {
  bool one_worker; /* host: its streams take turns on one thread; a GPU's run at once */
  int threads;     /* host: the kernel threads it gets; 0 for a GPU */
  double flops;    /* FLOP/s of its kernels (a host device's at its share, contention included) */
  double mem_bw;   /* bytes/s its kernels stream */
  double copy_bw;  /* bytes/s of a copy into it, and of an all-reduce's transfers */
  double launch_s; /* fixed time of each launch, copy and collective step */
  double hop_s;    /* a wait released by another device's record, when the stream had nothing else to do */
  double run_s;    /* a run's start on it (the executor's fixed cost, its worker woken) */
  bool computes;   /* it launches more than its inputs' arrival (the executor's rule for sharing cores) */
} tfg_cost_device;

typedef struct tfg_cost_table {
  int ndev;
  tfg_cost_device *dev; /* [ndev], the plan's devices */
  int ranks;            /* the processes of an mpirun job (1: one process) */
  double net_bw;        /* bytes/s between the processes (ranks > 1) */
  double net_s;         /* latency of one message between them */
  const tfg_host_costs *host; /* what the host devices' numbers came from (NULL: no host device) */
  /* Per node of the graph, its kernel's time on its host device, measured
   * (runtime/calibrate.h: tfg_calibrate_kernels), or < 0: from the
   * roofline; NULL: every launch from the roofline. */
  double *kernel_s;
} tfg_cost_table;

/* Fills t for the plan's devices: GPUs from the planning table, host
 * devices (and cpu:0) from host (may be NULL when the plan has none: then
 * they get the table's numbers), one process. */
void tfg_cost_table_init(tfg_cost_table *t, const tfg_plan *p, const tfg_host_costs *host);
void tfg_cost_table_free(tfg_cost_table *t);

/* One device's part of a predicted step. */
typedef struct tfg_predicted_device {
  double compute_s;   /* its launches */
  double copy_s;      /* copies into it (inputs from the host included) */
  double allreduce_s; /* its all-reduce steps */
  double hidden_s;    /* of allreduce_s, the time its launches ran meanwhile (a GPU's other stream):
                       * behind the backward pass; none on a host device, whose one worker runs either */
  double end_s;       /* when its last step ends */
  double pipe_s;      /* a pipeline's stage: its launches before the step's updates (tfg_train_step.pipe_post) */
} tfg_predicted_device;

typedef struct tfg_prediction {
  double step_s;                /* the step: when the last device's last step ends */
  int ndev;
  tfg_predicted_device *dev;    /* [ndev] */
  int nreplicas;                /* the train's replicas (in this process) */
  tfg_pipe pipe;                /* the train's pipeline (zero: none) */
  double pipe_s;                /* from its first launch on a stage to its last backward's end */
} tfg_prediction;

/* Predicts one step of the train whose step is st: the plan's steps
 * that its run fetches (losses, metrics, updates), as the executor runs
 * them. *out is malloc'ed: tfg_prediction_free. */
void tfg_predict(const tfg_plan *p, const tfg_cost_table *t, const tfg_train_step *st, tfg_prediction *out);
void tfg_prediction_free(tfg_prediction *r);

/* The text `tfg plan --predict` prints for one train: the step time,
 * then per device its compute, copies, all-reduce and the part of it
 * hidden behind compute. */
void tfg_prediction_print(const tfg_plan *p, const tfg_cost_table *t, const tfg_prediction *r, tfg_strbuf *out);

#endif
