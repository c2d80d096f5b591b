/* runtime/exec_impl.h: the executor's state, shared by runtime/exec.c
 * (making an executor, its runs) and runtime/exec_graph.c (captured runs
 * and their replays). Internal to those two files. */
#ifndef TFG_EXEC_IMPL_H
#define TFG_EXEC_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/parallel.h"
#include "kernels/fused.h"
#include "runtime/collective.h"
#include "runtime/exec.h"

typedef struct exec_dev exec_dev;

/* The kernel context of a device: its kernels run one at a time (on the
 * host device's worker, or on the caller's thread when a CUDA launch
 * queues them), so one context serves them all. */
typedef struct exec_kctx {
  tfg_kernel_ctx k; /* first: the backend hands kernels &k */
  exec_dev *dev;
} exec_kctx;

/* One LAUNCH, resolved: the node its kernel runs (the graph's, or the
 * FUSED node of its chain) and its tensors, which point into the arena. */
typedef struct exec_launch {
  const tfg_node *node;
  tfg_tensor *in;
  tfg_tensor out;
} exec_launch;

struct exec_dev {
  tfg_exec *x;
  const tfg_device *device;
  tfg_backend *b;              /* NULL: not used by this executor */
  tfg_stream *s[TFG_PLAN_STREAMS];
  char *arena;
  int64_t *own;                /* per node: offset of its value here (own or persistent buffer), -1 */
  int64_t *copy;               /* per node: offset of its copy received here, -1 */
  exec_launch *launch;         /* per step index (LAUNCH steps only) */
  exec_kctx kctx;
  /* Failure attribution: the node whose kernel failed, and the launches
   * of this run in order with how many completed (an injected fault
   * fails a launch without calling its kernel). Written by the worker. */
  _Atomic tfg_node_id failed;
  atomic_int done;
  tfg_node_id *launched;
  int nlaunched;
  bool host_memory;            /* the backend's memory is host memory (caps.is_host): the
                                * numerics check reads results here; else the backend checks */
};

/* A captured run (CUDA Graphs: runtime/exec_graph.c): the key it serves (the
 * fetched nodes, sorted and unique, and the training flag: they decide
 * what the run computes), how often that key has run, and what a replay
 * needs: the host values to stage first (fill: INPUT nodes of the
 * captured devices, and values copied in from feeders) and the fetched
 * values to hand out after (drain). */
typedef struct exec_graph {
  tfg_node_id *key;
  int nkey;
  bool training;
  bool in_use;
  int runs;
  bool refused;         /* its capture failed: plain runs from now on */
  uint64_t used;        /* for eviction: the clock of its last run */
  tfg_replay *r;
  tfg_node_id *fill;    /* nodes whose stages are refilled before each replay */
  int *fill_src;        /* per fill: the feeder device holding the value, or -1 (the fed value) */
  int nfill;
  tfg_node_id *drain;   /* nodes whose stages hold fetched values after a replay */
  int ndrain;
} exec_graph;
#define EXEC_GRAPHS 8

/* A bucket's collective state. */
typedef struct exec_bucket {
  tfg_coll *coll;  /* shared by the buckets of one device group; owned when own_coll */
  bool own_coll;
  void **slots;    /* [nranks * nnodes]: each ALLREDUCE node's buffer */
  size_t *counts;  /* [nnodes] elements */
  uint32_t *at;    /* [nranks]: the run in which each rank's walk reached it */
  uint32_t queued; /* the run that queued it */
} exec_bucket;

struct tfg_exec {
  const tfg_plan *p;
  const tfg_graph *g;
  int ndev;
  exec_dev *dev;
  tfg_event **ev;
  exec_bucket *buckets;
  tfg_pool *pool;
  /* tfg_exec_init's host backend and stream, made on its first call, and
   * the description it runs as: cpu:0's, with index -1 (not one of the
   * plan's devices, so the fault hooks and the trace never see it). */
  tfg_backend *filler;
  tfg_stream *filler_s;
  tfg_device filler_dev;
  bool check_numerics;
  /* Per chain of the plan: the FUSED node its LAUNCH runs (inputs: the
   * chain's; dtype, shape and location: its last member's) and the
   * program the node's attrs.data points to. */
  tfg_node *fused;
  tfg_fused_prog *progs;
  /* --trace: each fused chain's launch label, its last member's (a
   * pipeline's unit); registered with trace while the executor lives */
  struct tfg_trace *trace;
  const char **fused_labels;
  uint8_t *inner;              /* per node: an intermediate of a chain (it has no value) */
  /* The step fault hook (exec.h): device index and training step, or -1. */
  int fault_device;
  int64_t fault_step;
  bool fault_assert;           /* sw.fault_assert, TFG_FAULT_ASSERT=1 (exec.h) */
  /* per run */
  uint8_t *need;
  const void **fed;            /* per node: the host value of a needed INPUT */
  int *fetch_first, *fetch_next; /* per node: its first index in fetch; per fetch index: the next */
  /* Views (the plan's view_of): per base its first view, per view the
   * next of its base; a fetched view is copied out when its base is
   * written. NULL when the plan has none. */
  tfg_node_id *view_head, *view_next;
  uint32_t *issued;            /* per event: the run that queued its RECORD */
  uint32_t run;
  /* CUDA Graphs (runtime/exec_graph.c). */
  bool graphs;                 /* runs may be captured */
  uint8_t *captured;           /* per device: its work is captured (else it feeds them, or is unused) */
  int origin;                  /* the captured device whose compute stream captures and replays */
  int *ev_dev;                 /* per event: the device whose step records it (a valid plan records each) */
  void **stage;                /* per node: its host buffer for captured copies (host_alloc), or NULL */
  tfg_event *fork, **join;     /* fork: the captured streams join the capture; join: and leave it */
  int njoin;
  exec_graph cache[EXEC_GRAPHS];
  uint64_t clock;
  exec_graph *staging;         /* the capture in progress: host values go through stages */
  uint8_t *mark;               /* per node, during a capture: STAGE_FILL, STAGE_DRAIN once listed */
  int64_t replays;             /* runs replayed so far */
  bool stage_failed;           /* a stage could not be allocated during the capture */
};

enum { STAGE_FILL = 1, STAGE_DRAIN = 2 };

/* ---- runtime/exec.c ---- */

/* Which devices a walk moves: every used one, or (in a run with CUDA
 * Graphs) the feeders or the captured devices. */
enum { WALK_ALL = -1, WALK_FEEDERS = 0, WALK_CAPTURED = 1 };

/* The address of node id's value on device dv (its own value or the copy
 * received there); empty tensors have no buffer: the arena itself. */
void *exec_addr(const exec_dev *dv, tfg_node_id id);
/* Sets every walking device's step counters for run `which` (queue: and
 * queues the steps that need it). */
void exec_set_steps(tfg_exec *x, int which, const tfg_exec_run_opts *ro, bool queue);
/* Queues run `which` of fetch on every device's streams. */
void exec_queue_run(tfg_exec *x, int which, const tfg_exec_run_opts *ro, const tfg_node_id *fetch, int nfetch,
                    void *const *out);

/* ---- runtime/exec_graph.c: captured runs ---- */

/* Decides whether runs may be captured (x->graphs) and which devices. */
void exec_graph_setup(tfg_exec *x, const tfg_exec_opts *o);
/* Frees a cache entry's replay and lists and empties it. */
void exec_graph_clear(tfg_exec *x, exec_graph *gr);
/* The stage a captured copy into a device reads node id from (src: the
 * feeder device, or -1 for the fed value), listed for refilling. */
const void *exec_stage_fill(tfg_exec *x, tfg_node_id id, int src);
/* The stage a captured copy out of node id writes, listed for handing
 * out; NULL when listed already. */
void *exec_stage_drain(tfg_exec *x, tfg_node_id id);
/* The cache entry for this key (fetch, training), made or evicted. */
exec_graph *exec_graph_for(tfg_exec *x, const tfg_node_id *fetch, int nfetch, bool training);
/* Forgets the walk marks a capture left. */
void exec_forget_walk(tfg_exec *x);
/* Captures run fetch into gr (its stages listed), then replays it. */
void exec_capture(tfg_exec *x, exec_graph *gr, const tfg_exec_run_opts *ro, const tfg_node_id *fetch, int nfetch,
                  void *const *out, tfg_diag *d);
/* Replays gr: refills its stages, launches it, hands out its fetches. */
void exec_replay(tfg_exec *x, exec_graph *gr, const tfg_exec_run_opts *ro);

#endif
