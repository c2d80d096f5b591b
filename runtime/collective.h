/* runtime/collective.h: collectives across a group of devices, behind one
 * interface that every implementation fills (modeled on the backend
 * vtable): the built-in ring over backends (host devices today; logical
 * devices that share one GPU later), NCCL across physical GPUs, MPI
 * across processes.
 *
 *   tfg_backend *b[2] = {...}; tfg_stream *s[2] = {...};  // one stream per rank
 *   tfg_coll *c = tfg_coll_ring_new(2, b, s);
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
 * same order on every rank (they are: one call queues all ranks). */
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
  const char *(*name)(tfg_coll *c); /* "ring", "nccl", "mpi" */
  /* All-reduce in place: afterwards every rank's segments hold the
   * elementwise op over the ranks, bit-identical on every rank. bufs
   * holds nranks * nseg device pointers (rank-major), counts nseg
   * element counts; dt is f32 or f64. Queued on the ranks' streams;
   * buffers must stay valid until those streams have run it. */
  void (*allreduce)(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op);
  void (*free)(tfg_coll *c);
} tfg_coll_i;

struct tfg_coll {
  tfg_coll_i i;
  int nranks;
  void *ctx;
};

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

#endif
