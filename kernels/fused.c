/* kernels/fused.c: compiling a fused chain of elementwise ops into the
 * program its kernels run, and the kernels' checks (see kernels/fused.h). */
#include "kernels/fused.h"

#include <string.h>

bool tfg_fused_build(const tfg_graph *g, const tfg_node_id *members, int n, const tfg_node_id *inputs, int ninputs,
                     tfg_fused_prog *out) {
  memset(out, 0, sizeof *out);
  if (n < 1 || n > TFG_FUSED_MAX_OPS || ninputs < 0 || ninputs > TFG_FUSED_MAX_INPUTS) return false;
  out->nops = n;
  out->ninputs = ninputs;
  for (int k = 0; k < ninputs; k++) out->scalar[k] = g->nodes[inputs[k]].shape.rank == 0;
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

tfg_status tfg_fused_check_tensors(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                   const tfg_tensor *out, const char *where) {
  const tfg_fused_prog *p = node->attrs.data;
  const char *bad = tfg_fused_check(p, node->ninputs);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "fused: %s", bad);
  tfg_dtype dt = out->dtype;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "fused on %s is not supported on the %s", tfg_dtype_name(dt), where);
  int64_t n = tfg_shape_numel(&out->shape);
  for (int k = 0; k < p->ninputs; k++) {
    if (in[k].dtype != dt)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "fused: input %d is %s, the output %s", k, tfg_dtype_name(in[k].dtype),
                             tfg_dtype_name(dt));
    int64_t want = p->scalar[k] ? 1 : n;
    if (tfg_shape_numel(&in[k].shape) != want)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "fused: input %d has %lld elements, not %lld", k,
                             (long long)tfg_shape_numel(&in[k].shape), (long long)want);
  }
  return TFG_OK;
}
