/* compiler/plan.h: the execution plan: per device, ordered steps on
 * streams (0 compute, 1 copy-in, 2 collective), the copies and events
 * that connect devices and streams, and a static memory plan. Plain data:
 * it can be printed, diffed and checked.
 *
 *   tfg_plan *p;
 *   if (tfg_plan_build(graph, placement, devices, diag, &p) == TFG_OK) {
 *     tfg_plan_print(p, &text);             // `tfg plan`
 *     tfg_plan_json(p, &text);              // `tfg plan --json`
 *     tfg_plan_validate(p, &why);           // true, or why not
 *     tfg_plan_free(p);
 *   }
 *
 * A program is placed, planned and validated in order by the compile
 * driver (compiler/compile.h). The rules a plan keeps (streams, copies,
 * collectives and their buckets, memory, concurrent streams, fusion) and
 * what the validator checks are in docs/plan.md. */
#ifndef TFG_PLAN_H
#define TFG_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "compiler/fold.h"
#include "compiler/place.h"
#include "ir/fused.h"

typedef enum tfg_plan_step_kind {
  TFG_PLAN_LAUNCH, /* run node on the stream */
  TFG_PLAN_COPY,   /* copy node's value from device src to this device */
  TFG_PLAN_RECORD, /* record event on the stream (after its previous step) */
  TFG_PLAN_WAIT,   /* the stream waits until event has been recorded */
  TFG_PLAN_ALLREDUCE, /* stream 2: all-reduce bucket `bucket` with the other devices of its group */
} tfg_plan_step_kind;

enum { TFG_PLAN_STREAM_COMPUTE, TFG_PLAN_STREAM_COPY, TFG_PLAN_STREAM_COLLECTIVE, TFG_PLAN_STREAMS };

/* Gradients reduced together (DDP's buckets): the ALLREDUCE nodes of a
 * group of devices, one per rank per key. Its ALLREDUCE step on a rank
 * reads each node's input (the gradient) there, copies it into the
 * node's own buffer, and reduces those buffers in place across the
 * group (the mean): afterwards every rank holds the same values. */
typedef struct tfg_plan_bucket {
  tfg_op_id op;        /* its nodes' collective: ALLREDUCE, REDUCE_SCATTER or ALL_GATHER (ir/ops.h
                        * tfg_op_bucketed); an ALL_GATHER copies its input into its rank's piece */
  int nranks;          /* devices in the group */
  int *devices;        /* [nranks], ascending device index */
  int nnodes;          /* ALLREDUCE nodes per rank */
  tfg_node_id *nodes;  /* [nranks * nnodes]: rank r's k-th at r * nnodes + k; keys in the same order on every rank */
  int64_t bytes;       /* per rank: the sum of its nodes' bytes */
} tfg_plan_bucket;

/* Elementwise ops run as one LAUNCH (docs/plan.md, Fusion). */
typedef struct tfg_plan_chain {
  int nnodes;          /* 2 .. TFG_FUSED_MAX_OPS */
  tfg_node_id *nodes;  /* [nnodes] the members in graph order; the last gives the chain's value */
  int ninputs;         /* 0 .. TFG_FUSED_MAX_INPUTS */
  tfg_node_id *inputs; /* [ninputs] what the members read that is not a member, each once, in the
                        * order the members (in graph order) first read them */
} tfg_plan_chain;

typedef struct tfg_plan_step {
  tfg_plan_step_kind kind;
  int stream;         /* 0 compute, 1 copy-in, 2 collective */
  tfg_node_id node;   /* LAUNCH, COPY: the node whose value is produced or copied; else -1 */
  int src;            /* COPY: the device copied from */
  int event;          /* RECORD, WAIT: a plan-wide event id */
  int bucket;         /* ALLREDUCE: index into tfg_plan.buckets */
  int chain;          /* LAUNCH: the index in tfg_plan.chains of the chain it runs (node is its
                       * last member), or -1: node alone */
} tfg_plan_step;

/* A tensor in a device's memory plan: node's value (an op's output, an
 * ALLREDUCE node's reduced value, written by its bucket's ALLREDUCE
 * step, or the copy received from another device). */
typedef struct tfg_plan_buffer {
  tfg_node_id node;
  bool copy;          /* received from another device */
  bool persistent;    /* params, optimizer state and constants (written once, before any run) */
  int64_t offset, bytes;
  int first, last;    /* live from step index first to step index last (inclusive) */
} tfg_plan_buffer;

typedef struct tfg_plan_device {
  int nsteps;
  tfg_plan_step *steps;
  int nbuffers;
  tfg_plan_buffer *buffers;
  int64_t persistent_bytes;
  int64_t peak;       /* the highest offset + bytes ever allocated */
} tfg_plan_device;

typedef struct tfg_plan {
  const tfg_graph *g;
  const tfg_placement *pl;
  const tfg_devices *ds;
  int ndev;
  tfg_plan_device *dev;
  int nevents;
  int nbuckets;
  tfg_plan_bucket *buckets;
  int64_t bucket_bytes; /* the bucket size it was built with */
  int nchains;
  tfg_plan_chain *chains; /* fused chains, in the graph order of their last members */
  uint8_t *folded;        /* per node, the passes' TFG_FOLD_* mark (compiler/fold.h), or NULL: no pass ran */
  /* Views (docs/plan.md, Views): per node, the node whose buffer it
   * shares (never itself a view), or -1; NULL: views were off. A view
   * has no step and no buffer of its own: its value is its base's bytes. */
  tfg_node_id *view_of;
} tfg_plan;

typedef struct tfg_plan_opts {
  int64_t bucket_bytes; /* close a bucket once it holds this many bytes; 0: TFG_PLAN_BUCKET_BYTES */
  /* Fusion (docs/plan.md): on only with both. keep[id] (per node of
   * the graph) is nonzero for every node whose value the caller may
   * fetch (printed values, losses, metrics, updates): those stay
   * materialized. The planner cannot know fetches; without keep it
   * does not fuse. */
  bool fuse;
  const uint8_t *keep;
  /* The graph passes' marks (tfg_fold_constants, tfg_simplify; per
   * node), or NULL: a node a pass removed (TFG_FOLD_REMOVED,
   * TFG_FOLD_SIMPLIFIED: tfg_fold_removed) gets no step, no buffer and
   * no copy (nothing that runs reads it); the plan keeps a copy. */
  const uint8_t *folded;
  /* Views (docs/plan.md, Views): a reshape or flatten of a value on its
   * own device shares that value's buffer instead of being launched. */
  bool views;
} tfg_plan_opts;

#define TFG_PLAN_BUCKET_BYTES ((int64_t)25 << 20) /* PyTorch DDP's bucket_cap_mb = 25 */

/* Builds the plan of a placed graph. Returns TFG_OK, or TFG_ERR_OOM with
 * the error docs/plan.md (Memory) describes when a device's plan does
 * not fit. With d NULL, capacities are not checked: the plan only
 * measures each device's peak (the compile driver's fit loop uses it).
 * ALLREDUCE nodes must be as a strategy makes them (asserted): attrs.n
 * nodes per key, one per device, of one dtype and shape, each reading one
 * gradient, every gradient of a key before any op that reads one of the
 * key's nodes. */
tfg_status tfg_plan_build(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds, tfg_diag *d,
                          tfg_plan **out);
/* The same with options (o may be NULL: the defaults). */
tfg_status tfg_plan_build_with(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds,
                               const tfg_plan_opts *o, tfg_diag *d, tfg_plan **out);
void tfg_plan_free(tfg_plan *p);

/* What LAUNCH step st of p reads: the inputs of its chain when it runs
 * one, else its node's inputs; *n gets the count. */
const tfg_node_id *tfg_plan_step_inputs(const tfg_plan *p, const tfg_plan_step *st, int *n);

/* Sets need[id] (per node of the graph) to 1 for every node a run that
 * fetches fetch[0..n) computes, 0 for the others: the dependency cone of
 * the fetches, where a bucket with a needed node needs all of its nodes
 * (a collective takes every rank). What the executor runs and the
 * predictor times (compiler/predict.h). */
void tfg_plan_mark_needed(const tfg_plan *p, const tfg_node_id *fetch, int n, uint8_t *need);

/* Whether device d of p launches anything but its inputs' arrival
 * (INPUT, SLICE): the host devices that share the cores when they run
 * (the executor's share of threads, the predictor's). */
bool tfg_plan_device_computes(const tfg_plan *p, int d);

/* The chain node id is a member of, or -1 (a scan of the chains). */
int tfg_plan_chain_of(const tfg_plan *p, tfg_node_id id);

/* Checks every rule docs/plan.md lists under Validation (buckets, steps,
 * chains, the order a replay with vector clocks finds, events, memory),
 * trusting nothing the builder knew. Returns true, or false with the
 * first violation appended to why (may be NULL). */
bool tfg_plan_validate(const tfg_plan *p, tfg_strbuf *why);

/* Whether the devices `captured` marks (per device, nonzero: GPUs) can
 * run p as one captured graph (CUDA Graphs, runtime/exec.h) with the
 * other devices feeding them: a feeder runs its whole list first, so no
 * feeder step may wait for an event a captured device records or copy a
 * captured device's value, and no bucket may span both kinds. Returns
 * true, or false with the first obstacle in why ("cpu:0 waits for gpu:0
 * (its step 12)"). */
bool tfg_plan_capturable(const tfg_plan *p, const uint8_t *captured, tfg_strbuf *why);

/* What device d of p holds at its fullest step (the most bytes live at
 * once; docs/plan.md, Memory), by kind: params and constants (persistent
 * PARAM and CONST), optimizer state (STATE: moments, momentum, an
 * accumulation's sums, a grad scaler), gradients (values made for the
 * backward: tfg_node.backward, the all-reduces) and activations (every
 * other value, recompute's replays included); gaps is the planned peak
 * less those (free space between buffers then, and the peak's own step
 * when it is another). A copy counts as the value it copies. */
typedef struct tfg_plan_memory {
  int step;
  int64_t params, state, grads, activations, gaps;
} tfg_plan_memory;
void tfg_plan_memory_of(const tfg_plan *p, int d, tfg_plan_memory *out);
/* The same as text: " (step S): params 1.0 MiB, gradients 1.0 MiB,
 * optimizer state 2.0 MiB, activations 3.5 MiB, free gaps 0 B". */
void tfg_plan_memory_text(const tfg_plan *p, int d, tfg_strbuf *out);

/* `tfg plan`: per device its streams and steps in order (with the source
 * line of each op; an all-reduce with its bucket's tensors, size and
 * ranks; a chain as "fused relu(add(mul)) n12 (t.tfg:3), members n10
 * n11 n12": its ops nested as they read each other, the last member and
 * every member), the memory plan (offset, size, live range of each
 * buffer, and under it the views of its node: "view  n5 reshape
 * (t.tfg:4), view of n3"), the persistent bytes and the planned peak;
 * then the buckets.
 * A plan with GPU devices (cuda, sim) says under its first line whether
 * its runs can be captured as CUDA graphs (tfg_plan_capturable over
 * them), and if not, why. */
void tfg_plan_print(const tfg_plan *p, tfg_strbuf *out);
/* `tfg plan --json`: the same plan as data, stable and diffable (README,
 * "--json schemas"): {"plan": 1, "events", "bucket_cap", "devices": [{name,
 * persistent_bytes, peak_bytes, steps: [{step, stream, kind, and for a
 * launch or copy node, op, name, source (and fused: the chain's members;
 * from: a copy's source device), for record/wait event, for allreduce
 * bucket}], buffers: [{offset, bytes, live: [first, last] or null when
 * persistent, node, op, name, source, persistent, copy_from, views}]}],
 * "buckets": [{bucket, bytes, ranks: [{device, nodes}]}]}, a step or a
 * buffer per line, in the text form's order. */
void tfg_plan_json(const tfg_plan *p, tfg_strbuf *out);

#endif
