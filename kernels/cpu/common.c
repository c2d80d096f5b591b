/* kernels/cpu/common.c: the out-of-line helpers of kernels/cpu/cpu_impl.h. */
#include "kernels/cpu/cpu_impl.h"

#include "base/assert.h"

/* About this many elements of work per chunk, as in the kernel files. */
#define GRAIN_ELEMS (1 << 14)

tfg_status tfg_cpu_unsupported(tfg_kernel_ctx *ctx, const char *what, tfg_dtype t) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s of dtype %s is not supported on the CPU", what,
                         tfg_dtype_name(t));
}

/* The position of the first of the n ids outside [0, hi), or -1. */
static int64_t first_bad_id(const tfg_tensor *ids, int64_t n, int64_t hi) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = tfg_cpu_id_at(ids, i);
    if (v < 0 || v >= hi) return i;
  }
  return -1;
}

tfg_status tfg_cpu_check_ids(tfg_kernel_ctx *ctx, tfg_cpu_ids_kind kind, const tfg_tensor *ids,
                             int64_t n, int64_t hi) {
  int64_t bad = first_bad_id(ids, n, hi);
  if (bad < 0) return TFG_OK;
  long long id = tfg_cpu_id_at(ids, bad), at = bad, end = hi;
  if (kind == TFG_CPU_IDS_LABELS)
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC,
                           "label %lld in row %lld is outside [0, %lld) (the logits have %lld "
                           "classes)",
                           id, at, end, end);
  return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC,
                         "embedding id %lld (at flat position %lld of the ids) is outside "
                         "[0, %lld), the table's rows",
                         id, at, end);
}

void tfg_cpu_ln_run(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                    tfg_tensor *out, int64_t cost, tfg_parallel_body f32, tfg_parallel_body f64) {
  const tfg_tensor *x = &in[0], *gamma = &in[1];
  TFG_ASSERT(x->shape.rank >= 1 && tfg_shape_eq(&out->shape, &x->shape));
  int64_t d = x->shape.dim[x->shape.rank - 1];
  TFG_ASSERT(tfg_shape_numel(&gamma->shape) == d);
  int64_t n = tfg_shape_numel(&x->shape);
  if (n == 0) return;
  tfg_cpu_ln_job j = {.x = x->data, .gamma = gamma->data, .aux = in[2].data, .out = out->data,
                      .d = d, .eps = node->attrs.value};
  tfg_parallel_for(ctx->pool, n / d, tfg_parallel_grain(GRAIN_ELEMS, cost * d),
                   x->dtype == TFG_DTYPE_F32 ? f32 : f64, &j);
}
