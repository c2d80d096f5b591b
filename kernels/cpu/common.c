/* kernels/cpu/common.c: the out-of-line helpers of kernels/cpu/cpu_impl.h. */
#include "kernels/cpu/cpu_impl.h"

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
