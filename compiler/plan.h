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
 * copies and stream 2 runs collectives. Order: each device's ops in
 * graph order on its compute stream.
 *
 * Copies. A tensor used on another device is copied once per destination
 * device (not once per consumer), by a COPY step on the destination's
 * copy stream, as soon as the tensor exists: the source's compute stream
 * RECORDs an event after the producing op, the copy stream WAITs on it,
 * copies, and RECORDs its own event, which the consuming compute stream
 * WAITs on before the first op that reads the copy. Every dependency
 * between two streams goes through such an event: one RECORD, and one
 * WAIT (the collective's ev2 below may have several).
 *
 * Collectives. ALLREDUCE nodes are never launched: the nodes of one key
 * (attrs.start), one per device, form a group whose ranks are its
 * devices in ascending index order. Keys with the same devices and dtype
 * are packed into buckets as PyTorch DDP does: in the order their
 * gradient (the node's input) is produced on the group's first device, a
 * bucket closing once it holds bucket_bytes (it never grows past the cap
 * unless one tensor alone does: that tensor gets a bucket of its own), or
 * early when a key's gradient comes after an op that reads one of the
 * bucket's nodes (graph order must let the bucket run first). Buckets are
 * numbered by the graph position of the last gradient any rank produces
 * for them, and every device runs its buckets in that order, so all ranks
 * meet them in one order (collectives run in different orders would
 * deadlock, as with NCCL). On a rank, right after the LAUNCH of the last
 * of the bucket's gradients there (or of the device's previous bucket,
 * whichever is later): RECORD ev1 on stream 0, WAIT ev1 on stream 2,
 * ALLREDUCE on stream 2, RECORD ev2 on stream 2; a gradient copied in
 * from elsewhere is first waited for by stream 0. The compute stream
 * WAITs on ev2 before the first op that reads one of the bucket's nodes
 * there (at the end of its list when none does). A node read on another
 * device is copied as any value, the copy stream WAITing on ev2, once
 * every rank has listed the bucket.
 *
 * Memory: per device, persistent tensors (params, optimizer state) get
 * their own region at the bottom; every other tensor on the device (op
 * outputs, received copies, all-reduced nodes) lives from the step that
 * writes it to the last step that reads it (in the device's step order),
 * and gets an offset above the persistent region by best fit among the
 * free gaps at that time (the smallest gap that fits; a new top when none
 * does), aligned to 256 bytes. A bucket's gradients are read by stream
 * 2, so they live until the compute stream's WAIT on its ev2. A tensor
 * sent to another device, or read by no op (a result), lives to the end
 * of the list. The planned peak is the highest end ever allocated. A plan
 * whose peak exceeds a device's capacity fails: the error names the
 * device, the op (and its source line) whose allocation went over, the
 * bytes needed and the bytes available.
 *
 * Concurrent streams. The streams of a device run truly concurrently, so
 * the plan keeps this invariant: every step that writes a buffer comes
 * after (through its stream's order or an event) every access to the
 * buffers that held that memory before. A LAUNCH gets it from the list
 * order, since a buffer's last access is on the compute stream (or
 * ordered before a compute step within its live range); an ALLREDUCE
 * from its ev1. A COPY is ordered only after its source, so after the
 * offsets are assigned, each COPY whose buffer overlaps memory last used
 * at a compute step the copy stream is not yet ordered after gets a
 * RECORD on the compute stream right after that step and a WAIT on the
 * copy stream right before the COPY (none when the memory is fresh, or an
 * earlier such WAIT covers it: the copy stream runs in order).
 *
 * Fusion (only when tfg_plan_opts sets fuse and gives keep). A chain is
 * 2 to TFG_FUSED_MAX_OPS elementwise ops (NEG EXP LOG SQRT RSQRT ABS RELU
 * GELU TANH SIGMOID, ADD SUB MUL DIV POW MAXIMUM MINIMUM: kernels/fused.h)
 * of one dtype, f32 or f64, and one shape, on one device, each binary one
 * reading values of that shape or scalars (rank 0). Its last member in
 * graph order gives the chain's value; every other member (an
 * intermediate) is read by exactly one op, a member of the chain, and is
 * not kept (keep: the nodes the caller may fetch), so an intermediate is
 * never fetched, copied to another device, all-reduced or persistent.
 * The members may form a tree (add(mul(a, b), exp(c)) fuses whole). The
 * values the members read that are not members are the chain's inputs,
 * at most TFG_FUSED_MAX_INPUTS, and no optimizer update lies between the
 * first member and the last in graph order (an update writes params and
 * state in place, and a chain reads its inputs where its last member
 * runs). Chains form greedily in graph order: each eligible node takes
 * in every input that may become its intermediate, with that input's own
 * chain, while the caps hold. One LAUNCH runs a chain, where its last
 * member would run, naming that member (node) and the chain (chain); it
 * reads the chain's inputs, WAITing for copies and buckets as any
 * launch, and writes the last member's buffer. Intermediates have no
 * step and no buffer. A chain's inputs live until its LAUNCH, which can
 * raise the peak (an intermediate may read two inputs): a fused plan
 * whose peak does not fit a device is dropped for the unfused one, so
 * fusion never fails a plan that fits without it. */
#ifndef TFG_PLAN_H
#define TFG_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "compiler/place.h"
#include "kernels/fused.h"

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

/* Elementwise ops run as one LAUNCH (see Fusion above). */
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
  int nchains;
  tfg_plan_chain *chains; /* fused chains, in the graph order of their last members */
} tfg_plan;

typedef struct tfg_plan_opts {
  int64_t bucket_bytes; /* close a bucket once it holds this many bytes; 0: TFG_PLAN_BUCKET_BYTES */
  /* Fusion (see Fusion above): on only with both. keep[id] (per node of
   * the graph) is nonzero for every node whose value the caller may
   * fetch (printed values, losses, metrics, updates): those stay
   * materialized. The planner cannot know fetches; without keep it
   * does not fuse. */
  bool fuse;
  const uint8_t *keep;
} tfg_plan_opts;

#define TFG_PLAN_BUCKET_BYTES ((int64_t)25 << 20) /* PyTorch DDP's bucket_cap_mb = 25 */

/* Builds the plan of a placed graph. Returns TFG_OK, or TFG_ERR_OOM with
 * the error described above when a device's plan does not fit. With d
 * NULL, capacities are not checked: the plan only measures each device's
 * peak (the placer's memory pass uses it). ALLREDUCE nodes must be as a
 * strategy makes them (asserted): attrs.n nodes per key, one per device,
 * of one dtype and shape, each reading one gradient, every gradient of a
 * key before any op that reads one of the key's nodes. */
tfg_status tfg_plan_build(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds, tfg_diag *d,
                          tfg_plan **out);
/* The same with options (o may be NULL: the defaults). */
tfg_status tfg_plan_build_with(const tfg_graph *g, const tfg_placement *pl, const tfg_devices *ds,
                               const tfg_plan_opts *o, tfg_diag *d, tfg_plan **out);
void tfg_plan_free(tfg_plan *p);

/* What LAUNCH step st of p reads: the inputs of its chain when it runs
 * one, else its node's inputs; *n gets the count. */
const tfg_node_id *tfg_plan_step_inputs(const tfg_plan *p, const tfg_plan_step *st, int *n);

/* The chain node id is a member of, or -1 (a scan of the chains). */
int tfg_plan_chain_of(const tfg_plan *p, tfg_node_id id);

/* Checks the plan's invariants, trusting nothing the builder knew. The
 * buckets: ranks ascending, every ALLREDUCE node in exactly one bucket on
 * its placed device, the same keys (in one order), dtype and shapes on
 * every rank, group size attrs.n = the ranks, bytes the sum. The steps:
 * streams 0-2, each kind on its stream, every op launched once where it
 * is placed in graph order (a chain's intermediates within its LAUNCH),
 * no ALLREDUCE node launched, each bucket's
 * ALLREDUCE exactly once on each of its ranks (on no other device), in
 * the same relative order on all ranks. Chains: members distinct and in
 * graph order, each an elementwise op as Fusion above requires, on the
 * last member's device, every intermediate read by exactly one op, of
 * its chain, the inputs exactly the members' other inputs in first-read
 * order, no optimizer update between first and last member; each chain
 * launched once, by a LAUNCH of its last member naming it; no other step
 * launches or copies an intermediate, and none has a buffer (the keep set
 * is the caller's: not checked). A replay with vector clocks
 * (an ALLREDUCE is a rendezvous: it runs once every rank's stream 2 has
 * reached it) checks that every input of a LAUNCH (of a chain's LAUNCH:
 * the chain's inputs), COPY or ALLREDUCE is on the device (computed
 * there, persistent, copied in or all-reduced) and happens before it,
 * and that no stream is stuck (a cycle of waits, buckets met in
 * different orders). Every event is recorded once and
 * waited on at least once. Memory: each value has one buffer per device,
 * written by its step, live at every step that reads it; a bucket's
 * gradients stay live until the first compute step ordered after its
 * ALLREDUCE (or to the end); a sent tensor lives to the end; no two
 * buffers live at the same time overlap; and the rule for concurrent
 * streams above, in full: when a buffer's memory was held by earlier
 * buffers (the latest holder of each byte), every access to them on any
 * of the device's streams happens before the step that writes the new
 * one; an optimizer update, which overwrites its param and state in
 * place, happens after every copy of them to another device. The peak
 * is the maximum end over all buffers; buffers fit the
 * device. Returns true, or false with the first violation in why. */
bool tfg_plan_validate(const tfg_plan *p, tfg_strbuf *why);

/* Whether the devices `captured` marks (per device, nonzero: GPUs) can
 * run p as one captured graph (CUDA Graphs, runtime/exec.h) with the
 * other devices feeding them: a feeder runs its whole list first, so no
 * feeder step may wait for an event a captured device records or copy a
 * captured device's value, and no bucket may span both kinds. Returns
 * true, or false with the first obstacle in why ("cpu:0 waits for gpu:0
 * (its step 12)"). */
bool tfg_plan_capturable(const tfg_plan *p, const uint8_t *captured, tfg_strbuf *why);

/* `tfg plan`: per device its streams and steps in order (with the source
 * line of each op; an all-reduce with its bucket's tensors, size and
 * ranks; a chain as "fused relu(add(mul)) n12 (t.tfg:3), members n10
 * n11 n12": its ops nested as they read each other, the last member and
 * every member), the memory plan (offset, size, live range of each
 * buffer), the persistent bytes and the planned peak; then the buckets.
 * A plan with GPU devices (cuda, sim) says under its first line whether
 * its runs can be captured as CUDA graphs (tfg_plan_capturable over
 * them), and if not, why. */
void tfg_plan_print(const tfg_plan *p, tfg_strbuf *out);

#endif
