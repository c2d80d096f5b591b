/* kernels/cpu/cpu_impl.h: helpers the CPU kernel files share, outside the
 * kernel interface (kernels/cpu/cpu.h): dtype checks, integer ids and
 * their range checks (one wording for the forward and the gradient
 * kernels), and layer norm's row statistics, which the gradient must form
 * exactly as the forward pass does. */
#ifndef TFG_KERNELS_CPU_IMPL_H
#define TFG_KERNELS_CPU_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernel.h"

static inline bool tfg_cpu_is_float(tfg_dtype t) {
  return t == TFG_DTYPE_F32 || t == TFG_DTYPE_F64;
}

/* TFG_ERR_DEVICE: "WHAT of dtype T is not supported on the CPU". */
tfg_status tfg_cpu_unsupported(tfg_kernel_ctx *ctx, const char *what, tfg_dtype t);

/* Element i of an i32 or i64 id tensor. */
static inline int64_t tfg_cpu_id_at(const tfg_tensor *ids, int64_t i) {
  return ids->dtype == TFG_DTYPE_I32 ? ((const int32_t *)ids->data)[i]
                                     : ((const int64_t *)ids->data)[i];
}

/* TFG_ERR_NUMERIC naming the first of the n labels outside [0, c), the
 * logits' classes; TFG_OK when all are inside. */
tfg_status tfg_cpu_check_labels(tfg_kernel_ctx *ctx, const tfg_tensor *labels, int64_t n,
                                int64_t c);

/* TFG_ERR_NUMERIC naming the first of the n ids outside [0, rows), the
 * embedding table's rows; TFG_OK when all are inside. */
tfg_status tfg_cpu_check_embedding_ids(tfg_kernel_ctx *ctx, const tfg_tensor *ids, int64_t n,
                                       int64_t rows);

/* Layer norm's statistics of the row x[0..d), in double: stores the mean
 * in *mean and returns rstd = 1 / sqrt(var + eps), var being the biased
 * variance formed in a second pass over the deviations (no cancellation
 * when the mean is large). */
#define TFG_CPU_DEFINE_LN_STATS(T, SFX)                                                   \
  static inline double tfg_cpu_ln_stats_##SFX(const T *x, int64_t d, double eps,          \
                                              double *mean) {                             \
    double mu = 0, var = 0;                                                               \
    for (int64_t t = 0; t < d; t++) mu += x[t];                                           \
    mu /= (double)d;                                                                      \
    for (int64_t t = 0; t < d; t++) {                                                     \
      double dev = (double)x[t] - mu;                                                     \
      var += dev * dev;                                                                   \
    }                                                                                     \
    var /= (double)d;                                                                     \
    *mean = mu;                                                                           \
    return 1.0 / sqrt(var + eps);                                                         \
  }
TFG_CPU_DEFINE_LN_STATS(float, f32)
TFG_CPU_DEFINE_LN_STATS(double, f64)
#undef TFG_CPU_DEFINE_LN_STATS

#endif
