/* compiler/autocast.h: a train action's `precision = bf16 | f16`
 * (LANGUAGE.md section 6) as a graph rewrite, torch.autocast's: the
 * matrix products of the step's forward pass compute in the low dtype,
 * everything else in f32.
 *
 *   tfg_action cast;
 *   tfg_node_id *metrics = tfg_autocast(graph, &action, &cast, diag);
 *   // train cast instead of action: cast.loss, cast.config.metrics
 *   free(metrics);
 *
 * The forward cone of the loss and metrics is cloned as far as it
 * changes: every MATMUL, CONV2D and ATTENTION on f32 reads its float
 * inputs through a CAST to the low dtype (one per value: a param read by
 * several products is cast once per step, as autocast's cast cache
 * does), computes there (the CPU widens the rounded values to f32 and
 * accumulates in f32; a GPU uses its 16-bit tensor cores with f32
 * accumulation), and its result is cast back to f32 for the ops after
 * it that are not products. A product's operand that is a transpose or
 * reshape (exact in any dtype) is taken in the low dtype below it, and
 * a low value cast up and back is that value: the products of attention
 * heads read each other in the low dtype with no round trip, and the
 * layout pass still reads their transposes through strides. Only what
 * the loss and metrics need is made: no clone is left unread. Those ops (elementwise ops, reductions, softmax, norms, losses)
 * therefore run in f32, where torch.autocast runs the ones outside its
 * f32 list in the low dtype: tfg rounds only the products' results,
 * which is at least as accurate. Params, their gradients (cast back by
 * CAST's gradient) and the optimizer state stay f32: the master weights.
 * The program's own nodes are left as they are, so a print after the
 * train runs in f32, as code outside an autocast region does. */
#ifndef TFG_AUTOCAST_H
#define TFG_AUTOCAST_H

#include "ir/graph.h"
#include "ir/program.h"

/* Fills *out with a copy of train action a whose loss and metrics are
 * those of the autocast clone (a copy of *a when its precision is f32,
 * or when no product of the cone is f32). Returns the malloc'ed metrics
 * array out->config.metrics points to (NULL without metrics): the
 * caller frees it once done with *out. */
tfg_node_id *tfg_autocast(tfg_graph *g, const tfg_action *a, tfg_action *out, tfg_diag *d);

#endif
