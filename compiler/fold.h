/* compiler/fold.h: constant folding: every op whose value depends on no
 * input, param, optimizer state or random op is computed once, at
 * compile time, with the CPU kernels; what the rest of the graph reads of
 * those values becomes constants, which the plan keeps in each device's
 * persistent region (written once, never per step), and the ops only
 * they needed are removed from the plan.
 *
 *   uint8_t *mark = calloc(g->nnodes, 1);     // per node, TFG_FOLD_*
 *   int nfolded = tfg_fold_constants(g, roots, mark);
 *   tfg_plan_opts po = {.folded = mark, ...}; // removed nodes: no step, no memory
 *
 * The compile driver (compiler/compile.c) runs it after the training
 * steps are built, before placement, unless TFG_OPT=0. */
#ifndef TFG_FOLD_H
#define TFG_FOLD_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"

/* What folding did to a node (the marks tfg_fold_constants writes). */
enum {
  TFG_FOLD_KEPT = 0,    /* untouched: it runs as before (or was a constant already) */
  TFG_FOLD_REMOVED = 1, /* computed at compile time and read only by folded ops: no step, no buffer */
  TFG_FOLD_CONST = 2,   /* computed at compile time, now a CONST holding its value */
  TFG_FOLD_SIMPLIFIED = 3, /* removed by simplify (compiler/simplify.h): its readers read an equal node */
  TFG_FOLD_LAYOUT = 4,  /* a transpose the layout pass folded into its readers (compiler/layout.h) */
  TFG_FOLD_REMOTE = 5,  /* another rank of the mpirun job runs it (compiler/ranks.h); not a pass's doing */
};

/* Whether a pass removed the node of mark m (folding, simplify or the
 * layout pass), or another rank runs it: it gets no step and no buffer
 * here, and nothing that runs here reads it. The marks array is shared by the passes
 * (tfg_plan_opts.folded). */
static inline bool tfg_fold_removed(uint8_t m) {
  return m == TFG_FOLD_REMOVED || m == TFG_FOLD_SIMPLIFIED || m == TFG_FOLD_LAYOUT || m == TFG_FOLD_REMOTE;
}

/* The largest value folding computes (each op's output): a bigger one
 * runs as before, so a constant never grows the persistent region (or
 * compile time) by more than this; broadcasting a scalar to an
 * activation's shape, say, stays a launch. */
#define TFG_FOLD_MAX_BYTES ((int64_t)16 << 20)

/* Folds g's constant ops in place. An op is constant when it is not a
 * source of varying values (INPUT, PARAM, STATE), not random (DROPOUT,
 * an INIT drawing from normal, uniform, glorot or he), not an update or
 * collective, has a CPU kernel, its output is at most TFG_FOLD_MAX_BYTES,
 * every input is constant, and its kernel succeeds with a finite result
 * (a failing or NaN-making op is left to run, so the run reports it at
 * the op, as --check-numerics does). Constant ops are computed in graph
 * order with the CPU kernels (so a folded value is bit for bit what the
 * CPU computed per step before); each one that a non-constant op reads,
 * that roots marks (nonzero: a value a run may fetch or a training step
 * reads; may be NULL) or that nothing reads becomes a CONST in place: op
 * CONST, no inputs, attrs.data its value in g's arena; dtype, shape,
 * name, location and device pin kept. Every other constant op (original
 * constants too) is read only by folded ops: marked removed. mark
 * (g->nnodes entries, the caller's) gets every node's TFG_FOLD_* mark.
 * Returns the count of ops computed (marked removed or const). */
int tfg_fold_constants(tfg_graph *g, const uint8_t *roots, uint8_t *mark);

#endif
