/* kernels/cpu/cpu_impl.h: helpers the CPU kernel files share, outside the
 * kernel interface (kernels/cpu/cpu.h): dtype checks, integer ids and
 * their range checks (one wording for the forward and the gradient
 * kernels), and layer norm's row statistics and walk over its rows,
 * which the gradient must take exactly as the forward pass does. */
#ifndef TFG_KERNELS_CPU_IMPL_H
#define TFG_KERNELS_CPU_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernel.h"

static inline bool tfg_cpu_is_float(tfg_dtype t) {
  return t == TFG_DTYPE_F32 || t == TFG_DTYPE_F64;
}

/* The 16-bit floats, which the CPU computes in f32 (kernels/cpu/half.c). */
static inline bool tfg_cpu_is_half(tfg_dtype t) {
  return t == TFG_DTYPE_F16 || t == TFG_DTYPE_BF16;
}

/* dst[0..n) = the f16 or bf16 (dt) values src[0..n), widened exactly. */
void tfg_cpu_half_load(tfg_dtype dt, const void *src, float *dst, int64_t n);
/* dst[0..n) = src[0..n) rounded to f16 or bf16 (dt), to nearest even
 * (kernels/cast_math.h: subnormals, overflow to infinity, NaN kept). */
void tfg_cpu_half_store(tfg_dtype dt, const float *src, void *dst, int64_t n);
/* The same reading src[i * stride], and writing dst[i * stride] (strides
 * in elements; 1 is the plain loops). */
void tfg_cpu_half_load_strided(tfg_dtype dt, const void *src, int64_t stride, float *dst, int64_t n);
void tfg_cpu_half_store_strided(tfg_dtype dt, const float *src, void *dst, int64_t stride, int64_t n);

/* Runs the op's f32 kernel `f32` for f16/bf16 tensors: every f16/bf16
 * input is widened into a new f32 tensor (other inputs, ids and labels,
 * are passed as they are), f32 computes into an f32 output, which is
 * rounded into out when out is f16/bf16 (else f32 writes out itself); the
 * inputs the op updates in place (its row's inplace, ir/ops.h: an
 * optimizer's param and state) are rounded back likewise. Nothing is
 * written back when f32 fails; its status and message are returned.
 * TFG_ERR_NOMEM when the copies cannot be allocated. At most 8 inputs. */
tfg_status tfg_cpu_staged(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out,
                          tfg_kernel_fn f32);

/* TFG_ERR_DEVICE: "WHAT of dtype T is not supported on the CPU". */
tfg_status tfg_cpu_unsupported(tfg_kernel_ctx *ctx, const char *what, tfg_dtype t);

/* Element i of an i32 or i64 id tensor. */
static inline int64_t tfg_cpu_id_at(const tfg_tensor *ids, int64_t i) {
  return ids->dtype == TFG_DTYPE_I32 ? ((const int32_t *)ids->data)[i]
                                     : ((const int64_t *)ids->data)[i];
}

/* What a tensor of ids indexes, which words an id out of range:
 * classification labels (the logits' classes) or an embedding table's rows. */
typedef enum tfg_cpu_ids_kind { TFG_CPU_IDS_LABELS, TFG_CPU_IDS_EMBEDDING } tfg_cpu_ids_kind;

/* TFG_ERR_NUMERIC naming the first of the n ids outside [0, hi) (hi: the
 * logits' classes, the table's rows) and its position; TFG_OK when all
 * are inside. */
tfg_status tfg_cpu_check_ids(tfg_kernel_ctx *ctx, tfg_cpu_ids_kind kind, const tfg_tensor *ids,
                             int64_t n, int64_t hi);

/* Each file of kernels/cpu registers its kernels in the table (indexed by
 * op id) that tfg_cpu_kernel (kernels/cpu/registry.c) reads, from a table
 * of its own: one row per op, naming the kernel that runs it. */
typedef struct tfg_cpu_kernel_row {
  tfg_op_id op;
  tfg_kernel_fn fn;
} tfg_cpu_kernel_row;

/* table[row.op] = row.fn for each of the n rows (kernels/cpu/registry.c). */
void tfg_cpu_register_rows(tfg_kernel_fn *table, const tfg_cpu_kernel_row *rows, size_t n);
/* The same for an array `rows` in scope, counted with sizeof. */
#define TFG_CPU_REGISTER_ROWS(table, rows) \
  tfg_cpu_register_rows(table, rows, sizeof(rows) / sizeof((rows)[0]))

void tfg_cpu_register_init(tfg_kernel_fn *table);        /* init.c: const, init */
void tfg_cpu_register_elementwise(tfg_kernel_fn *table); /* elementwise.c: unary, binary, where, cast */
void tfg_cpu_register_linalg(tfg_kernel_fn *table);      /* linalg.c: matmul (OpenBLAS) */
void tfg_cpu_register_reduce(tfg_kernel_fn *table);      /* reduce.c: sum, mean, max, argmax */
void tfg_cpu_register_shape(tfg_kernel_fn *table);       /* shape.c: reshape, flatten, transpose, concat, slice, broadcast */
void tfg_cpu_register_nn(tfg_kernel_fn *table);          /* nn.c: softmax, log_softmax, cross_entropy, mse, layer_norm,
                                                          * dropout, embedding, one_hot, accuracy */
void tfg_cpu_register_conv(tfg_kernel_fn *table);        /* conv.c: conv2d, max_pool, avg_pool */
void tfg_cpu_register_grad(tfg_kernel_fn *table);        /* grad.c: the gradients that are not compositions */
void tfg_cpu_register_optim(tfg_kernel_fn *table);       /* optim.c: sgd_update, adam_update, allreduce (a copy) */
void tfg_cpu_register_fused(tfg_kernel_fn *table);       /* fused.c: fused, a chain of elementwise ops */
void tfg_cpu_register_attention(tfg_kernel_fn *table);   /* attention.c: attention, attention_probs */
/* half.c, common.c and parallel.c have no op of their own. */

/* ---- sums over a row, in lanes ------------------------------------------
 * A sum kept in one accumulator is a chain of dependent adds: one element
 * per add latency (about 4 cycles), however wide the vector unit. These
 * keep TFG_CPU_LANES partial sums instead (element i of the row goes to
 * lane i mod TFG_CPU_LANES, and the compiler makes vector adds of them),
 * joined in a fixed tree, then the last n mod TFG_CPU_LANES terms in
 * order. The result depends only on the row's values, never on where the
 * row sits or how a kernel split its rows; it differs from the
 * one-accumulator sum only in the rounding of double additions (a few
 * units in the last place of a double: nothing, once an f32 result is
 * rounded). */
enum { TFG_CPU_LANES = 8 };

static inline double tfg_cpu_lanes_total(const double *acc) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* Defines static inline double NAME PARAMS, the lane sum of TERM (a
 * double expression of the element index i) over i in [0, n); PARAMS
 * must declare n. */
#define TFG_CPU_DEFINE_LANE_SUM(NAME, PARAMS, TERM)                        \
  static inline double NAME PARAMS {                                       \
    double acc[TFG_CPU_LANES] = {0};                                       \
    int64_t k0 = 0;                                                         \
    for (; k0 + TFG_CPU_LANES <= n; k0 += TFG_CPU_LANES)                     \
      for (int l = 0; l < TFG_CPU_LANES; l++) {                            \
        const int64_t i = k0 + l;                                           \
        acc[l] += (TERM);                                                  \
      }                                                                    \
    double s = tfg_cpu_lanes_total(acc);                                   \
    for (int64_t i = k0; i < n; i++) s += (TERM);                           \
    return s;                                                              \
  }

/* sum x[i]; sum (x[i] - mu)^2; sum a[i] b[i]; sum a[i] b[i] (c[i] - mu). */
#define TFG_CPU_DEFINE_ROW_SUMS(T, SFX)                                                          \
  TFG_CPU_DEFINE_LANE_SUM(tfg_cpu_row_sum_##SFX, (const T *x, int64_t n), (double)x[i])          \
  TFG_CPU_DEFINE_LANE_SUM(tfg_cpu_row_sumsq_##SFX, (const T *x, int64_t n, double mu),           \
                          ((double)x[i] - mu) * ((double)x[i] - mu))                            \
  TFG_CPU_DEFINE_LANE_SUM(tfg_cpu_row_dot_##SFX, (const T *a, const T *b, int64_t n),            \
                          (double)a[i] * (double)b[i])                                          \
  TFG_CPU_DEFINE_LANE_SUM(tfg_cpu_row_dot_dev_##SFX,                                             \
                          (const T *a, const T *b, const T *c, int64_t n, double mu),           \
                          (double)a[i] * (double)b[i] * ((double)c[i] - mu))
TFG_CPU_DEFINE_ROW_SUMS(float, f32)
TFG_CPU_DEFINE_ROW_SUMS(double, f64)
#undef TFG_CPU_DEFINE_ROW_SUMS

/* The maximum of the line x[t s], t < len (len >= 1), by x[t s] > m from
 * the first element on, so a NaN counts only as the first element: the
 * shift of the softmax family (kernels/cpu/nn.c, grad.c) before its exps. */
#define TFG_CPU_DEFINE_LINE_MAX(T, SFX)                                              \
  static inline T tfg_cpu_line_max_##SFX(const T *x, int64_t s, int64_t len) {       \
    T m = x[0];                                                                      \
    for (int64_t t = 1; t < len; t++)                                                \
      if (x[t * s] > m) m = x[t * s];                                                \
    return m;                                                                        \
  }
TFG_CPU_DEFINE_LINE_MAX(float, f32)
TFG_CPU_DEFINE_LINE_MAX(double, f64)
#undef TFG_CPU_DEFINE_LINE_MAX

/* sum over t < len of exp(x[t s] - m): x - m formed in the dtype, the
 * exps taken in double, EXP_BLOCK at a time, by tfg_vm_exp
 * (kernels/cpu/vmath.h: libmvec's lanes, within 2 ulp of a double, so an
 * f32 exp is as the correctly rounded expf almost always) and summed in
 * lanes; when y is not NULL, y[t s] = each exp rounded to the dtype.
 * The shifted exps of softmax, log_softmax, cross_entropy and its
 * gradient (kernels/cpu/nn.c, grad.c), so all four take the same values.
 * y may be x. */
double tfg_cpu_exp_line_f32(const float *x, int64_t s, float m, float *y, int64_t len);
double tfg_cpu_exp_line_f64(const double *x, int64_t s, double m, double *y, int64_t len);

/* Layer norm's statistics of the row x[0..d), in double: stores the mean
 * in *mean and returns rstd = 1 / sqrt(var + eps), var being the biased
 * variance formed in a second pass over the deviations (no cancellation
 * when the mean is large). Both sums in lanes. */
#define TFG_CPU_DEFINE_LN_STATS(T, SFX)                                                   \
  static inline double tfg_cpu_ln_stats_##SFX(const T *x, int64_t d, double eps,          \
                                              double *mean) {                             \
    double mu = tfg_cpu_row_sum_##SFX(x, d) / (double)d;                                  \
    double var = tfg_cpu_row_sumsq_##SFX(x, d, mu) / (double)d;                           \
    *mean = mu;                                                                           \
    return 1.0 / sqrt(var + eps);                                                         \
  }
TFG_CPU_DEFINE_LN_STATS(float, f32)
TFG_CPU_DEFINE_LN_STATS(double, f64)
#undef TFG_CPU_DEFINE_LN_STATS

/* A layer norm pass over the rows of x [rows, d]: the forward kernel
 * (kernels/cpu/nn.c: aux is beta [d], out y) and its gradient (grad.c:
 * aux is dy [rows, d], out dx), which walk the rows alike. */
typedef struct tfg_cpu_ln_job {
  const void *x, *gamma, *aux;
  void *out; /* [rows, d] */
  int64_t d;
  double eps;
} tfg_cpu_ln_job;

/* Defines NAME_f32 and NAME_f64, the tfg_parallel_bodies over the rows
 * [lo, hi) of a tfg_cpu_ln_job: for each row r, its statistics
 * (tfg_cpu_ln_stats), then ROW_SFX(j, r, x, mean, rstd), x being the
 * row's elements, which writes the row of out. */
#define TFG_CPU_DEFINE_LN_ROWS(NAME, ROW)        \
  TFG_CPU_DEFINE_LN_ROWS_(NAME, ROW, float, f32) \
  TFG_CPU_DEFINE_LN_ROWS_(NAME, ROW, double, f64)
#define TFG_CPU_DEFINE_LN_ROWS_(NAME, ROW, T, SFX)                             \
  static void NAME##_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) { \
    const tfg_cpu_ln_job *j = arg;                                             \
    (void)chunk;                                                               \
    for (int64_t r = lo; r < hi; r++) {                                        \
      const T *x = (const T *)j->x + r * j->d;                                 \
      double mean, rstd = tfg_cpu_ln_stats_##SFX(x, j->d, j->eps, &mean);      \
      ROW##_##SFX(j, r, x, mean, rstd);                                        \
    }                                                                          \
  }

/* Runs a layer norm pass over x = in[0] [..., D] with gamma = in[1] [D],
 * aux = in[2] and out shaped like x (eps = attrs.value), by rows: f32 or
 * f64 (by x's dtype, which all share; TFG_CPU_DEFINE_LN_ROWS bodies) over
 * ctx->pool, `cost` elements of work per element of a row. Asserts the
 * shapes of x, gamma and out; nothing to do for an empty x. */
void tfg_cpu_ln_run(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                    tfg_tensor *out, int64_t cost, tfg_parallel_body f32, tfg_parallel_body f64);

#endif
