/* compiler/recompute.h: activation recompute (torch.utils.checkpoint):
 * `recompute = ["block"]` in a train drops the activations made inside
 * each call of those fns; the backward replays each call's forward just
 * before it needs them. `recompute = "auto"` lets the compile driver
 * choose the calls (compiler/compile.c): none when the plan fits, else
 * calls by fewest FLOPs replayed per byte they free until it does.
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
 *   uint8_t *calls = tfg_recompute_named(p, a);  // the calls a's setting names
 *   tfg_recompute_mark(g, p, calls);              // before the strategy
 *   ... the strategy: its clones, autodiff ...
 *   tfg_recompute_clear(g);                       // after */
#ifndef TFG_RECOMPUTE_H
#define TFG_RECOMPUTE_H

#include <stdint.h>

#include "base/strbuf.h"
#include "ir/program.h"

/* Per call of p (calls[q], 1 when chosen; malloc'ed, ncalls + 1 entries):
 * the calls of the fns a's recompute setting names. */
uint8_t *tfg_recompute_named(const tfg_program *p, const tfg_action *a);

/* Sets tfg_node.recompute of every node of g built inside a chosen call
 * (chosen: per call, as tfg_recompute_named gives; NULL: none): the
 * outermost chosen call it is in. */
void tfg_recompute_mark(tfg_graph *g, const tfg_program *p, const uint8_t *chosen);

/* Clears every node's mark. */
void tfg_recompute_clear(tfg_graph *g);

/* A call recompute = "auto" may choose: its activations in the loss's
 * forward (the bytes of its ops' values) and what replaying it costs
 * (their FLOPs). */
typedef struct tfg_recompute_candidate {
  int32_t call;   /* p->calls[call] */
  double bytes, flops;
} tfg_recompute_candidate;

/* The calls "auto" chooses among, in the order it tries them (fewest
 * FLOPs per byte first, then program order): those of the shallowest
 * nesting depth at which at least two calls built ops of a's loss (a
 * model's blocks, not the one fn that wraps them), each with its ops'
 * bytes and FLOPs. *out malloc'ed; returns the count. */
int tfg_recompute_candidates(const tfg_graph *g, const tfg_program *p, const tfg_action *a,
                             tfg_recompute_candidate **out);

/* place --explain's line for the calls `chosen` marks (per call, as
 * tfg_recompute_named gives) in a's step: how many calls of which fns
 * are replayed, the bytes of activations in them the backward no longer
 * keeps, the FLOPs a step replays. Appended to *out; nothing when none. */
void tfg_recompute_explain(const tfg_graph *g, const tfg_program *p, const tfg_action *a, const uint8_t *chosen,
                           tfg_strbuf *out);

#endif
