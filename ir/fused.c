/* ir/fused.c: compiling a fused chain of elementwise ops into the
 * program its kernels run (see ir/fused.h). */
#include "ir/fused.h"

#include <string.h>

/* tfg_fused_op keeps an op id in 16 bits. */
_Static_assert(TFG_OP_COUNT <= INT16_MAX, "op ids fit an int16_t");

bool tfg_fused_build(const tfg_graph *g, const tfg_node_id *members, int n, const tfg_node_id *inputs, int ninputs,
                     tfg_fused_prog *out) {
  memset(out, 0, sizeof *out);
  if (n < 1 || n > TFG_FUSED_MAX_OPS || ninputs < 0 || ninputs > TFG_FUSED_MAX_INPUTS) return false;
  out->nops = n;
  out->ninputs = ninputs;
  const tfg_shape *shape = &g->nodes[members[n - 1]].shape;
  for (int k = 0; k < ninputs; k++)
    if (!tfg_fused_bcast(&g->nodes[inputs[k]].shape, shape, &out->len[k], &out->div[k])) return false;
  for (int s = 0; s < n; s++) {
    const tfg_node *nd = &g->nodes[members[s]];
    int arity = tfg_fused_arity(nd->op);
    if (arity == 0 || nd->ninputs != arity) return false;
    int opnd[2] = {-1, -1};
    for (int j = 0; j < arity; j++) {
      tfg_node_id x = nd->inputs[j];
      for (int e = 0; e < s && opnd[j] < 0; e++)
        if (members[e] == x) opnd[j] = TFG_FUSED_RESULT(e);
      for (int k = 0; k < ninputs && opnd[j] < 0; k++)
        if (inputs[k] == x) opnd[j] = TFG_FUSED_INPUT(k);
      if (opnd[j] < 0) return false;
    }
    out->ops[s] = (tfg_fused_op){.op = (int16_t)nd->op, .a = (int8_t)opnd[0], .b = (int8_t)opnd[1]};
  }
  return true;
}
