/* runtime/collective.h: collectives across a group of devices, behind one
 * interface that every implementation fills (modeled on the backend
 * vtable): the built-in ring over backends (host devices, logical devices
 * that share one GPU), NCCL across physical GPUs, the two combined
 * hierarchically, MPI across the processes of an mpirun job.
 *
 *   tfg_backend *b[2] = {...}; tfg_stream *s[2] = {...};  // one stream per rank
 *   tfg_strbuf why = {0};
 *   tfg_coll *c = tfg_coll_new_for(2, b, s, &why);  // the one for these devices (or tfg_coll_ring_new(2, b, s))
 *   if (!c) ... why says why (host and CUDA ranks mixed, NCCL failed to start)
 *   void *bufs[2 * 3] = {...};          // rank r's segment k at bufs[r * 3 + k]
 *   size_t counts[3] = {...};           // elements per segment, the same on every rank
 *   c->i.allreduce(c, bufs, counts, 3, TFG_DTYPE_F32, TFG_COLL_MEAN);
 *   // queued on every s[r]: synchronize them (or wait on an event) before reading
 *   c->i.free(c);
 *
 * One call queues the whole collective on every rank's stream and
 * returns (a single controller drives every rank, as NCCL's group calls
 * do); the segments of a rank are reduced as one buffer, their
 * concatenation. Collectives on one communicator must be queued in the
 * same order on every rank (they are: one call queues all ranks).
 *
 * Which collective a group gets (tfg_coll_choose, from each rank's device
 * kind and physical GPU; ARCHITECTURE.md "Collectives"):
 *   - host devices only: the built-in ring;
 *   - CUDA devices on distinct GPUs: NCCL, one communicator for the group
 *     (in a build without NCCL, the built-in ring, which needs peer access
 *     between the GPUs);
 *   - CUDA logical devices all on one GPU: the shared all-reduce (NCCL
 *     refuses two ranks on one GPU; they share its memory, so one kernel
 *     per rank's chunk reads every replica and writes the result back),
 *     the ring past TFG_REDUCE_ALL_MAX ranks;
 *   - CUDA logical devices on several GPUs, several on one: hierarchical,
 *     the built-in reduction within each GPU to a leader, NCCL (or the
 *     ring, without NCCL) among the leaders, a copy back within each GPU;
 *   - host and CUDA devices in one group: refused (no collective spans the
 *     two kinds). */
#ifndef TFG_COLLECTIVE_H
#define TFG_COLLECTIVE_H

#include <stddef.h>

#include "runtime/backend.h"

typedef enum tfg_coll_op {
  TFG_COLL_SUM,
  TFG_COLL_MEAN, /* the sum divided by the rank count */
} tfg_coll_op;

typedef struct tfg_coll tfg_coll;

typedef struct tfg_coll_i {
  const char *(*name)(tfg_coll *c); /* "ring", "shared", "nccl", "hier+nccl", "hier+ring" */
  /* All-reduce in place: afterwards every rank's segments hold the
   * elementwise op over the ranks, bit-identical on every rank. bufs
   * holds nranks * nseg device pointers (rank-major), counts nseg
   * element counts; dt is f32 or f64. Queued on the ranks' streams;
   * buffers must stay valid until those streams have run it. */
  void (*allreduce)(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op);
  /* The same with the sum multiplied by scale (SUM is scale 1, MEAN
   * 1 / nranks): what a hierarchical all-reduce asks of the collective
   * among its leaders, whose mean is over more ranks than they are. The
   * scale is applied once, to the finished sum: the ring's last
   * reduce-scatter step; NCCL's ncclSum then a scaling kernel (for
   * scale 1 / nranks, NCCL's own ncclAvg). With one rank nothing is
   * queued, so scale must be 1 there. */
  void (*allreduce_scaled)(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                           double scale);
  /* ZeRO's pair, in place, on the same buffers: every segment k (counts[k]
   * elements, a multiple of the ranks it spans: nranks, times processes
   * when it spans them) is cut into as many equal pieces, piece p held by
   * rank p (rank-major over the processes: process P's rank r is rank
   * P * nranks + r).
   * reduce_scatter: afterwards rank p's piece p of every segment holds
   * the sum over every rank of that piece times scale (1: the sum; 1 /
   * the ranks of every process: the mean), f32 or f64; the other pieces
   * are unspecified (an implementation may leave there what an
   * all-reduce would). all_gather: rank p's piece p is its part;
   * afterwards every rank's segments hold every rank's pieces, bit for bit
   * (any dtype: bytes are copied). A hierarchical collective gathers only
   * when its groups are consecutive ranks, all of one size (the ranks of
   * each GPU in device order, as tfg_coll_choose groups them): asserted. */
  void (*reduce_scatter)(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                         double scale);
  void (*all_gather)(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt);
  void (*free)(tfg_coll *c);
} tfg_coll_i;

struct tfg_coll {
  tfg_coll_i i;
  int nranks;
  int processes; /* the processes it spans, each with nranks ranks (0 or 1: this one) */
  int process;   /* this process's place among them (0 for one) */
  /* Declared by the collective: what it queues may be captured into a
   * replayed run (runtime/exec.h's CUDA Graphs), which the executor asks
   * of every bucket's collective. Only the built-in ring declares it:
   * NCCL warns that captured collectives of several GPUs driven by one
   * thread may deadlock, and the shared, hierarchical and MPI
   * all-reduces have never been captured. */
  bool capturable;
  void *ctx;
};

/* What an implementation's constructor returns: a collective of nranks
 * ranks whose entries i run on its state ctx, processes 0 (this process
 * alone; one that spans processes sets it) and not capturable. Its free
 * entry frees both. */
tfg_coll *tfg_coll_new(const tfg_coll_i *i, int nranks, void *ctx);

/* The built-in ring over nranks backends, rank r on b[r] with its
 * collectives queued on s[r] (the arrays are copied). A chunked ring:
 * the buffer is cut into nranks chunks; reduce-scatter (nranks - 1 steps,
 * each rank adding its predecessor's chunk into its own with the
 * backend's reduce_peer) then all-gather (nranks - 1 steps of copy_peer).
 * Steps are ordered by events between neighbours, so the ring never
 * blocks a device's worker: a rank's step waits (on its stream) for its
 * predecessor's previous step (the data) and its successor's previous
 * step (which has read what this step overwrites). One rank: a no-op. */
tfg_coll *tfg_coll_ring_new(int nranks, tfg_backend *const *b, tfg_stream *const *s);

/* The shared all-reduce over nranks <= TFG_REDUCE_ALL_MAX backends that
 * address each other's memory directly (logical devices of one GPU, host
 * devices), rank r on b[r] with its collectives queued on s[r]: the
 * buffer cut into nranks chunks, rank r's stream sums chunk r over every
 * rank in rank order with one reduce_all (runtime/backend.h) that writes
 * the result back to every rank; events order the ranks' starts and
 * ends. One step where the ring takes 2 (nranks - 1); every element read
 * and written nranks times. The same bits on every rank; with two ranks,
 * the ring's bits. NULL with *why for more ranks or a backend without
 * caps.reduce_all. */
tfg_coll *tfg_coll_shared_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why);

/* A constructor of a collective over nranks backends and streams: NULL
 * with the reason appended to *why when it cannot be made. */
typedef tfg_coll *(*tfg_coll_new_fn)(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why);

/* The hierarchical all-reduce over nranks backends, ranks grouped by
 * group[r] (equal values: one group; the ranks of one physical GPU, whose
 * memory every one of them can address). Each group's first rank is its
 * leader; `leaders` makes the collective among the leaders (in rank
 * order), which the new one owns. A call queues, in this order:
 *   1. within each group, the leader adds every member's buffer into its
 *      own (reduce_peer on the leader's stream, after waiting for the
 *      member's "start" event, recorded on the member's stream when the
 *      call begins);
 *   2. the leaders' all-reduce of those sums (allreduce_scaled, on their
 *      streams), which applies the scale once, at the end: a mean is over
 *      all nranks ranks, never a mean of the groups' means;
 *   3. within each group, every member copies the leader's result
 *      (copy_peer on the member's stream, after the leader's "ready"
 *      event); the leader then waits for its members' copies, so that
 *      what the caller queues next on its stream cannot overwrite what
 *      they read.
 * Every rank ends with the leaders' bits. With a single group there is
 * no leaders' step: the leader's last addition applies the scale. A
 * failure (a rank's stream failed before the call, a dtype reduce_peer
 * cannot add) travels with the events to every rank, as in the ring.
 * NULL with *why when `leaders` fails. The arrays are copied. */
tfg_coll *tfg_coll_hier_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, const int *group,
                            tfg_coll_new_fn leaders, tfg_strbuf *why);

/* The same, for leaders that span processes (runtime/mpi.h
 * tfg_mpi_job_coll_new: MPI among the processes of an mpirun job): the
 * leaders' step runs even with one group, and a mean is over every rank
 * of every process (the leaders' collective's `processes`). */
tfg_coll *tfg_coll_hier_outer_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, const int *group,
                                  tfg_coll_new_fn leaders, tfg_strbuf *why);

/* ---- choosing one --------------------------------------------------------------- */

typedef enum tfg_coll_algo {
  TFG_COLL_ALGO_RING,    /* the built-in ring (tfg_coll_ring_new) */
  TFG_COLL_ALGO_NCCL,    /* one NCCL communicator (tfg_coll_nccl_new) */
  TFG_COLL_ALGO_HIER,    /* built-in within each GPU, then among the leaders (tfg_coll_hier_new) */
  TFG_COLL_ALGO_SHARED,  /* one pass over every rank's memory (tfg_coll_shared_new) */
  TFG_COLL_ALGO_REFUSED, /* no collective for this group */
} tfg_coll_algo;

/* "ring", "shared", "nccl", "hier", "refused". */
const char *tfg_coll_algo_name(tfg_coll_algo a);

/* The collective for a group whose rank r runs on dev[r] (its kind and
 * physical GPU decide; see the top), in a build with NCCL when nccl is
 * set. For HIER, *leaders (when not NULL) gets what runs among the
 * leaders: NCCL, or RING without it; for the others it gets the answer
 * itself. REFUSED appends the reason to *why: host and CUDA devices mixed
 * ("gpu:0 is a host device (host device 1) and gpu:1 a CUDA device
 * (cuda:0): ..."), or a sim device. A pure function of its arguments, so
 * the choice is tested without GPUs. One rank: RING (a no-op). */
tfg_coll_algo tfg_coll_choose(int nranks, const tfg_device *const *dev, bool nccl, tfg_coll_algo *leaders,
                              tfg_strbuf *why);

#endif
