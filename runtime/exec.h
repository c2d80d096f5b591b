/* runtime/exec.h: the executor: runs a plan (compiler/plan.h) on the
 * devices' backends, written once against the backend interface
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
 * A run computes the dependency cone of the fetched nodes (a bucket's
 * collective pulls in all of its nodes: every rank must take part). The
 * calling thread walks the devices' step lists round robin and queues
 * each step on its stream (LAUNCH, COPY, RECORD, WAIT, ALLREDUCE); the
 * backends run the queues, and the run then synchronizes every stream.
 * The first failure of any stream is carried by events to every stream
 * that depends on it, so no device waits forever; the run returns that
 * status and reports it at the source line of the op that failed.
 *
 * Runs seen before are captured once and replayed as CUDA Graphs where
 * the backend can capture. How the walk orders events, when a run is
 * captured and when not, and the fault-injection hooks (the options'
 * sw.fault_*: TFG_FAULT_DEVICE, TFG_FAULT_STEP, TFG_FAULT_ASSERT) are
 * described in docs/runtime.md (The executor, CUDA Graphs, Choices where
 * the spec is silent); the reasons for each choice are beside the code
 * in exec.c. */
#ifndef TFG_EXEC_H
#define TFG_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/switches.h"
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
  /* The A/B switches (base/switches.h): no_cuda_graphs; the fault hooks
   * (fault_at_step fails device fault_device's first kernel of training
   * step fault_step; fault_assert fails an assertion in every run); and
   * what the backends read (tfg_backend_opts). */
  tfg_switches sw;
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
/* Fills a persistent node this executor holds (a PARAM, or a STATE with
 * zeros) per initializer a (the node's own, with the seed its caller
 * chose), synchronously: the INIT kernel of a host backend of the
 * executor's own (made on the first call, not one of the plan's devices),
 * split over the kernel pool, so the values are the CPU's whatever the
 * device (kernels/init_math.h). A device whose memory is host memory
 * (a host device) is filled in place; any other gets the values through
 * host memory and tfg_exec_write's copy. Returns
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

/* Device d (0 .. tfg_exec_ndev) of the plan: its name, the peak its plan
 * gave (known before anything ran), and the peak its memory pool has
 * measured so far (the plan's region and what else the backend took:
 * staging, scratch; runtime/mem.h), or -1 when it is not used. */
int tfg_exec_ndev(const tfg_exec *x);
void tfg_exec_memory(const tfg_exec *x, int d, const char **name, int64_t *planned, int64_t *measured);

#endif
