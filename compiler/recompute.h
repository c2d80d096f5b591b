/* compiler/recompute.h: activation recompute (torch.utils.checkpoint):
 * `recompute = ["block"]` in a train drops the activations made inside
 * each call of those fns; the backward replays each call's forward just
 * before it needs them.
 *
 * Marked before the strategy (whose copies keep the marks), acted on by
 * autodiff, cleared after: a node's `recompute` names the outermost
 * recomputed call that built it (ir/graph.h). Autodiff's rule for such a
 * node reads its replay (compiler/autodiff.c replay): the same ops in the
 * same order on the call's inputs (kept: the checkpoints), so the
 * gradients are bit for bit those without recompute, and the forward's
 * own activations inside the call are read by the forward alone, which
 * the planner frees as soon as it is done with them. Since it is the
 * graph that changes, every strategy and backend gets it.
 *
 *   tfg_recompute_mark(g, p, a);   // before the strategy
 *   ... the strategy: its clones, autodiff ...
 *   tfg_recompute_clear(g);        // after */
#ifndef TFG_RECOMPUTE_H
#define TFG_RECOMPUTE_H

#include "ir/program.h"

/* Sets tfg_node.recompute of every node of p's graph built inside a call
 * of a fn a's recompute setting names: the outermost such call. Returns
 * the number of calls marked. */
int tfg_recompute_mark(tfg_graph *g, const tfg_program *p, const tfg_action *a);

/* Clears every node's mark. */
void tfg_recompute_clear(tfg_graph *g);

#endif
