/* compiler/plan.h: the execution plan: per device, ordered steps on
 * streams, the copies and events that connect devices and streams, and a
 * static memory plan. Plain data: it can be printed, diffed and checked.
 *
 *   tfg_plan *p;
 *   if (tfg_plan_build(graph, placement, devices, diag, &p) == TFG_OK) {
 *     tfg_plan_print(p, &text);             // `tfg plan`
 *     tfg_plan_validate(p, &why);           // true, or why not
 *     tfg_plan_free(p);
 *   }
 *
 * Streams: on every device, stream 0 computes, stream 1 receives
 * copies and stream 2 runs collectives. Order: each device's ops in graph order on its compute stream.
 * A tensor used on another device is copied once per destination device
 * (not once per consumer), by a COPY step on the destination's copy
 * stream, as soon as the tensor exists: the source's compute stream
 * RECORDs an event after the producing op, the copy stream WAITs on it,
 * copies, and RECORDs its own event, which the consuming compute stream
 * WAITs on before the first op that reads the copy. Every dependency
 * between two streams goes through exactly one such event pair.
 *
 * Memory: per device, persistent tensors (params, optimizer state) get
 * their own region at the bottom; every other tensor on the device (op
 * outputs and received copies) lives from the step that writes it to the
 * last step that reads it (in the device's step order), and gets an offset
 * above the persistent region by best fit among the free gaps at that time
 * (the smallest gap that fits; a new top when none does), aligned to 256
 * bytes. The planned peak is the highest end ever allocated. A plan whose
 * peak exceeds a device's capacity fails: the error names the device, the
 * op (and its source line) whose allocation went over, the bytes needed
 * and the bytes available. */
#ifndef TFG_PLAN_H
#define TFG_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "compiler/place.h"

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
  int nranks;          /* devices in the group */
  int *devices;        /* [nranks], ascending device index */
  int nnodes;          /* ALLREDUCE nodes per rank */
  tfg_node_id *nodes;  /* [nranks * nnodes]: rank r's k-th at r * nnodes + k; keys in the same order on every rank */
  int64_t bytes;       /* per rank: the sum of its nodes' bytes */
} tfg_plan_bucket;

typedef struct tfg_plan_step {
  tfg_plan_step_kind kind;
  int stream;         /* 0 compute, 1 copy-in */
  tfg_node_id node;   /* LAUNCH, COPY: the node whose value is produced or copied */
  int src;            /* COPY: the device copied from */
  int event;          /* RECORD, WAIT: a plan-wide event id */
  int bucket;         /* ALLREDUCE: index into tfg_plan.buckets */
} tfg_plan_step;

/* A tensor in a device's memory plan: node's value (an op's output, or
 * the copy received from another device). */
typedef struct tfg_plan_buffer {
  tfg_node_id node;
  bool copy;          /* received from another device */
  bool persistent;    /* params and optimizer state */
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
} tfg_plan;

typedef struct tfg_plan_opts {
  int64_t bucket_bytes; /* close a bucket once it holds this many bytes; 0: TFG_PLAN_BUCKET_BYTES */
} tfg_plan_opts;

#define TFG_PLAN_BUCKET_BYTES ((int64_t)25 << 20) /* PyTorch DDP's bucket_cap_mb = 25 */

/* Builds the plan of a placed graph. Returns TFG_OK, or TFG_ERR_OOM with
 * the error described above when a device's plan does not fit. With d
 * NULL, capacities are not checked: the plan only measures each device's
 * peak (the placer's memory pass uses it). */
tfg_status tfg_plan_build(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds, tfg_diag *d,
                          tfg_plan **out);
/* The same with options (o may be NULL: the defaults). */
tfg_status tfg_plan_build_with(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds,
                               const tfg_plan_opts *o, tfg_diag *d, tfg_plan **out);
void tfg_plan_free(tfg_plan *p);

/* Checks the plan's invariants: every input of a LAUNCH is on its device
 * (computed there earlier, persistent, or copied in earlier); every edge
 * between streams has a RECORD before and a matching WAIT after; no event
 * is waited on before it is recorded; no two buffers live at the same time
 * overlap in memory; the peak is the maximum end over all buffers; buffers
 * fit the device. Returns true, or false with the first violation in why. */
bool tfg_plan_validate(const tfg_plan *p, tfg_strbuf *why);

/* `tfg plan`: per device its streams and steps in order (with the source
 * line of each op), the memory plan (offset, size, live range of each
 * buffer), the persistent bytes and the planned peak. */
void tfg_plan_print(const tfg_plan *p, tfg_strbuf *out);

#endif
