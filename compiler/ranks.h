/* compiler/ranks.h: a training step whose pipeline spans the ranks of an
 * mpirun job, split into what each rank runs (Megatron-LM's pipeline
 * ranks: stage s on rank s / G, G GPUs a rank).
 *
 * Every rank builds the same graph: the job's whole step, its stages
 * pinned to the job's GPUs (gpu:k, GPU k % G of rank k / G;
 * compiler/strategy/parallel.c). The split gives each node an owner, the
 * rank that runs it: a node pinned to a GPU, that GPU's rank; another
 * (a cpu pin, or none), the owner of the latest owned node it reads, or
 * every rank when it reads none (the inputs and their batches' slices:
 * each rank reads the data itself). Where a node reads a value another
 * rank owns, the owner SENDs it (MPI_Isend of a copy) and the reader's
 * rank RECVs it (a blocking receive) in its place, a pair per value and
 * reading rank, numbered in graph order (the message tag). A send
 * follows its value and a receive precedes its first reader in the
 * graph's order, which every rank's plan follows: so every receive has
 * its send earlier in one order of the whole job, and no rank waits for a
 * message that its sender is not bound to post (no cycle of waits).
 *
 *   tfg_ranks_split(g, st, keep, size, G, &owner, d); // after the strategy, before the passes
 *   ... the graph passes (alike on every rank: the same graph) ...
 *   tfg_ranks_place(g, owner, rank, G, marks);        // before placement
 *
 * The compile driver runs both (compiler/compile.h); a session runs the
 * owner's nodes and returns every fetched value on every rank
 * (runtime/session.h). */
#ifndef TFG_RANKS_H
#define TFG_RANKS_H

#include <stdint.h>

#include "base/diag.h"
#include "compiler/autodiff.h"
#include "ir/graph.h"

/* An owner: the op runs on no rank (no run needs it). */
#define TFG_RANKS_NOWHERE (-2)

/* Splits st's graph g (its nodes from st->pipe_first on: the strategy's)
 * over `size` ranks of G GPUs each: every cross-rank read of a node in
 * the cone of keep (per node: what a run may fetch) through a SEND and a
 * RECV, the sends added to st->staged (nothing reads them; fusion and
 * simplify keep them), the nodes renumbered with them and st's ids,
 * pipe_post and pipe_unit remapped. *owner (malloc'ed, g->nnodes after):
 * each node's rank, -1 for every rank, TFG_RANKS_NOWHERE for an op
 * outside the cone. Error: a node the strategy did not
 * make (the program's own, as a print action reads it) that reads values
 * of two ranks, at that node; TFG_ERR_PLACE. */
tfg_status tfg_ranks_split(tfg_graph *g, tfg_train_step *st, const uint8_t *keep, int size, int G, int16_t **owner,
                           tfg_diag *d);

/* This rank's share: every GPU pin to this rank's own GPU (gpu:k becomes
 * gpu:(k % G)), and every node another rank owns marked TFG_FOLD_REMOTE
 * in marks (compiler/fold.h), every op no rank runs TFG_FOLD_SIMPLIFIED
 * (a node a pass removed keeps its mark). */
void tfg_ranks_place(tfg_graph *g, const int16_t *owner, int rank, int G, uint8_t *marks);

#endif
