/* runtime/exec.h: the executor: runs a plan (compiler/plan.h) on the
 * devices' backends, written once against the backend vtable
 * (runtime/backend.h).
 *
 *   tfg_exec_opts o = {.threads = 0};
 *   tfg_exec *x;
 *   if (tfg_exec_new(plan, &o, diag, &x) == TFG_OK) {
 *     tfg_exec_init(x, param, &attrs, NULL);          // persistent tensors: an initializer's values,
 *     tfg_exec_write(x, state, host_values);          // or given ones
 *     tfg_exec_run_opts ro = {.feed = my_feed, .feed_arg = me};
 *     void *out[1] = {host_buffer};
 *     tfg_exec_run(x, &loss, 1, out, &ro);            // one step of the plan
 *     tfg_exec_free(x);
 *   }
 *
 * Memory is the plan's: each device gets one arena of the plan's planned
 * peak from its backend's pool, and every tensor lives at its planned
 * offset; params and optimizer state (persistent) stay between runs.
 *
 * A run computes what the fetched nodes need: the dependency cone of the
 * fetches (a bucket's collective runs when any of its nodes is needed,
 * and then pulls in all of them: every rank must take part). It walks the
 * devices' step lists and queues each step on its stream: LAUNCH as the
 * backend's kernel (an INPUT as a copy of the host value the feed
 * callback gives; a CONST as a copy of its data; a fused chain's LAUNCH
 * as one FUSED node the executor makes from the chain, which reports a
 * failure at the chain's last member), COPY as copy_peer,
 * RECORD and WAIT as events, ALLREDUCE as a copy of each gradient into
 * its bucket slot and the group's collective (runtime/collective.h).
 * The walk moves round robin over the devices and queues a WAIT only
 * once its RECORD is queued (a WAIT for a device this executor does not
 * run, opts.use, orders nothing of its own and is skipped) (events wait for the latest record issued,
 * as in CUDA), and a collective once every rank has reached it; the
 * calling thread only queues, the backends run, and nothing takes a
 * global lock. The run then synchronizes every stream.
 *
 * Failures: the first failure of any stream (a kernel error, a fault, a
 * failed copy) is carried by events to every stream that depends on it
 * (backend.h), so no device waits forever; the run returns the status and
 * reports it at the source line of the op that failed, naming the op and
 * the device.
 *
 * CUDA Graphs. A run that the executor has seen before is captured once
 * and replayed, on the devices whose backend can capture (GPUs; host
 * devices too under the test hook TFG_HOST_GRAPHS=1) except cpu:0. The
 * key is the set of fetched nodes and the training flag (what a run
 * computes depends on nothing else); the first run of a key is plain (it
 * warms up: cuBLAS and cuDNN choose their algorithms, workspaces are
 * made, kernels are loaded), the second is captured and replayed, later
 * ones are replayed; eight keys are kept, the least recently used one is
 * dropped. A run with captures first walks the feeders (the other used
 * devices, typically cpu:0 slicing the input batch) and waits for them,
 * then refills the stages (pinned host buffers a captured copy reads or
 * writes: the fed INPUT values, the feeders' values copied in, the
 * fetched values, CONST data) and replays on the origin's compute stream
 * (the first captured device's). What changes from step to step but a
 * kernel's arguments would freeze (Adam's and SGD's step, dropout's
 * seed) the kernels read on the device, written by the backend's
 * set_step. A capture the backend refuses (a call that cannot be
 * captured) leaves that key plain with a warning. No captures at all:
 * TFG_CUDA_GRAPHS=0, --trace, --check-numerics, the fault hooks (each
 * needs every launch to pass through the walk), a plan where a feeder
 * waits for a captured device (a parameter server on cpu:0, say), or an
 * all-reduce through NCCL (several physical GPUs: NCCL warns that their
 * captured collectives, launched from one thread, may deadlock). The
 * origin is the lowest-numbered captured device, so the final
 * synchronize waits for the replay on its compute stream before any
 * other captured stream reads the device's error flags.
 *
 * Fault injection (for tests, on any backend): with the environment
 * variables TFG_FAULT_DEVICE=I and TFG_FAULT_STEP=K set when the executor
 * is made, the first kernel of training step K on device I fails with
 * TFG_ERR_DEVICE ("injected fault"). The host backend has its own hook,
 * by launch count (runtime/backend.h). With TFG_FAULT_ASSERT=1, every
 * run fails an internal assertion (TFG_ASSERT) on the caller's thread
 * before it queues anything: how the REPL's recovery from a bug is
 * tested. */
#ifndef TFG_EXEC_H
#define TFG_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/plan.h"
#include "runtime/backend.h"

typedef struct tfg_exec tfg_exec;
struct tfg_trace;

typedef struct tfg_exec_opts {
  int threads;          /* CPU threads for host kernels (one pool shared by the host devices); 0: one per core */
  bool check_numerics;  /* after every op, fail on the first NaN or Inf it produced (host devices: checked
                         * here; GPUs: scanned on the device and reported at the next synchronize) */
  bool preallocate;     /* --memory preallocate: each device's pool takes its whole capacity at creation */
  bool tf32;            /* --tf32: f32 matrix products on GPUs may use TF32 tensor cores */
  const uint8_t *use;   /* per device: whether this executor runs it (NULL: all); a needed node elsewhere is an error */
  struct tfg_trace *trace; /* record every operation (NULL: none) */
} tfg_exec_opts;

/* Creates the backends of the plan's devices (tfg_backend_new: host and
 * cpu devices run on the host backend, cuda devices on the CUDA backend),
 * their streams, the plan's events, one collective per bucket group
 * (runtime/collective.h: the ring, NCCL or both, chosen per group), and
 * each device's arena. Returns TFG_OK, or TFG_ERR_DEVICE (a device no
 * backend can run: sim; cuda in a build without CUDA, on a machine
 * without a driver or that GPU; a group no collective can reduce: host
 * and CUDA devices mixed, NCCL failing to start) or TFG_ERR_OOM (an arena its pool cannot
 * give: the report names the device, the bytes asked, the bytes free and
 * the largest free block), reported. */
tfg_status tfg_exec_new(const tfg_plan *p, const tfg_exec_opts *o, tfg_diag *d, tfg_exec **out);
void tfg_exec_free(tfg_exec *x);

/* Copies a persistent node's value (a PARAM or STATE) in or out,
 * synchronously; the node must be on a device this executor runs. */
void tfg_exec_write(tfg_exec *x, tfg_node_id id, const void *host);
void tfg_exec_read(tfg_exec *x, tfg_node_id id, void *host);
/* Fills a persistent node this executor holds (a PARAM) per initializer
 * a (the node's own, with the seed its caller chose) and copies the
 * values to its device, synchronously: the INIT kernel of a host backend
 * of the executor's own (made on the first call, not one of the plan's
 * devices) runs into host memory, then tfg_exec_write copies, so the
 * values are the CPU's whatever the device (kernels/init_math.h). Returns
 * TFG_OK, or the kernel's failure (an initializer the dtype does not take)
 * with its message appended to *err (which may be NULL). */
tfg_status tfg_exec_init(tfg_exec *x, tfg_node_id id, const tfg_attrs *a, tfg_strbuf *err);
/* Whether this executor holds id's value (its device is used). */
bool tfg_exec_holds(const tfg_exec *x, tfg_node_id id);

/* Gives the host value of INPUT node id for this run (*data must stay
 * valid until tfg_exec_run returns). Returns TFG_OK or a status after
 * reporting. */
typedef tfg_status (*tfg_exec_feed_fn)(void *arg, tfg_node_id id, const void **data);

typedef struct tfg_exec_run_opts {
  bool training;         /* dropout active */
  int64_t step;          /* training step from 1 (Adam, dropout masks); 0 outside training */
  uint64_t seed;         /* the train action's seed (dropout masks) */
  tfg_exec_feed_fn feed; /* values of the needed INPUT nodes */
  void *feed_arg;
} tfg_exec_run_opts;

/* Runs the plan for the fetched nodes: out[i] (host memory of the node's
 * bytes) receives fetch[i]'s value. A fetched persistent node gives its
 * value after the run's updates. An intermediate of a fused chain has no
 * value: fetching one is TFG_ERR_DEVICE, reported. Returns TFG_OK or the
 * first failure, reported. A failure is sticky (as a CUDA error is): later runs fail
 * too; make a new executor to go on. */
tfg_status tfg_exec_run(tfg_exec *x, const tfg_node_id *fetch, int nfetch, void *const *out, const tfg_exec_run_opts *ro,
                        tfg_diag *d);

/* How many runs so far replayed a captured run (CUDA Graphs). */
int64_t tfg_exec_replays(const tfg_exec *x);

#endif
