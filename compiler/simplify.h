/* compiler/simplify.h: common-subexpression elimination and exact
 * algebraic simplification, a graph pass in place: an op equal to an
 * earlier one (same op, inputs, attrs, dtype, shape and device pin), or
 * an identity (x * 1, x / 1, x + -0.0, x - 0.0, x + 0 and x - 0 on
 * integers, a transpose undoing a transpose, an identity transpose, a
 * cast to its own dtype, a reshape/flatten/broadcast to its own shape),
 * hands its readers the node it equals; what then runs for nobody is
 * removed from the plan. Every rule is bit for bit: x + 0.0 is not one
 * (-0.0 + 0.0 is +0.0), x + -0.0 is.
 *
 *   uint8_t *mark = ...;                      // tfg_fold_constants' marks (or zeros)
 *   int n = tfg_simplify(g, roots, mark);     // removed nodes: TFG_FOLD_SIMPLIFIED
 *   tfg_plan_opts po = {.folded = mark, ...}; // no step, no memory for them
 *
 * The compile driver (compiler/compile.c) runs it after constant
 * folding (so folded constants are merged and seen as 1 or -0.0),
 * unless TFG_OPT=0. */
#ifndef TFG_SIMPLIFY_H
#define TFG_SIMPLIFY_H

#include <stdint.h>

#include "ir/graph.h"

/* Simplifies g in place. Never merged: sources of varying values
 * (INPUT, PARAM, STATE), random ops (DROPOUT, an INIT drawing from a
 * distribution), optimizer updates, collectives and fused ops; a CONST
 * merges with an equal CONST (same bytes). A replaced node's readers
 * (every node's inputs, rewritten in g's arena) read its replacement;
 * the replaced node is marked TFG_FOLD_SIMPLIFIED in mark unless roots
 * marks it (nonzero: a value a run may fetch or a training step reads;
 * may be NULL), which keeps it running so its id still answers. Then a
 * pure node (or random op: dropout, a random init) with no reader left
 * that is not a root is removed too: one
 * whose readers were all removed, or, with roots given, one nobody
 * reads that no run fetches (the program's own forward pass of a loss a
 * strategy cloned; without roots every result stays). Nodes mark
 * already shows removed (tfg_fold_removed) are
 * skipped: nothing that runs reads them. Node ids, dtypes and shapes
 * are unchanged. Returns the count of nodes replaced or removed. */
int tfg_simplify(tfg_graph *g, const uint8_t *roots, uint8_t *mark);

#endif
