/* kernels/fused.c: the checks both FUSED kernels make (see
 * kernels/fused.h). */
#include "kernels/fused.h"

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
    int64_t want = p->len[k];
    if (tfg_shape_numel(&in[k].shape) != want)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "fused: input %d has %lld elements, not %lld", k,
                             (long long)tfg_shape_numel(&in[k].shape), (long long)want);
    if (n > 0 && (want > n || p->div[k] > n / want || n % (want * p->div[k]) != 0))
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "fused: input %d (%lld elements, every %lld) does not tile %lld", k,
                             (long long)want, (long long)p->div[k], (long long)n);
  }
  return TFG_OK;
}
