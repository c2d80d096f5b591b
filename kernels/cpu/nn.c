/* kernels/cpu/nn.c: the neural-network ops on the CPU: softmax and
 * log_softmax, cross_entropy and accuracy, mse, layer_norm, dropout,
 * embedding and one_hot.
 *
 * Each math kernel is written once as a macro and instantiated for f32
 * and f64, so the inner loops see concrete types. Sums (softmax
 * denominators, layer_norm moments, the means behind the scalar losses)
 * are accumulated in double for both dtypes: the cost is nothing next to
 * the exp calls, and an f32 loss over a large batch keeps its digits.
 * The scalar results combine per-chunk partials in chunk order
 * (kernels/cpu/parallel.h), so a run is reproducible for a given pool.
 *
 * Values a program supplies at run time (labels, ids) are checked before
 * anything is written, so a failing kernel names the first bad entry. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vmath.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_SOFTMAX, tfg_cpu_softmax},
    {TFG_OP_LOG_SOFTMAX, tfg_cpu_softmax},
    {TFG_OP_CROSS_ENTROPY, tfg_cpu_cross_entropy},
    {TFG_OP_MSE, tfg_cpu_mse},
    {TFG_OP_LAYER_NORM, tfg_cpu_layer_norm},
    {TFG_OP_DROPOUT, tfg_cpu_dropout},
    {TFG_OP_EMBEDDING, tfg_cpu_embedding},
    {TFG_OP_ONE_HOT, tfg_cpu_one_hot},
    {TFG_OP_ACCURACY, tfg_cpu_accuracy},
};

void tfg_cpu_register_nn(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

/* GCC's -O2 cost model vectorizes none of the row loops here (their trip
 * counts are not known multiples of the width; kernels/cpu/elementwise.c
 * says more): the dynamic model does, with a scalar epilogue. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* About this many elements of work per chunk: big enough that handing a
 * chunk to a thread costs little next to running it. */
#define GRAIN_ELEMS (1 << 14)
/* Elements whose exp is taken together (kernels/cpu/vmath.h): 2 KiB of
 * doubles, in L1. */
#define EXP_BLOCK 256

/* The grain, in rows, for loops whose unit of work is a row of len. */
static int64_t rows_grain(int64_t len) { return tfg_parallel_grain(GRAIN_ELEMS, len); }

/* Stores total / n, NaN for n = 0 (an empty mean, as PyTorch), in out's
 * one element, f32 or f64. */
static void store_mean(tfg_tensor *out, double total, int64_t n) {
  double mean = n > 0 ? total / (double)n : NAN;
  if (out->dtype == TFG_DTYPE_F32)
    *(float *)out->data = (float)mean;
  else
    *(double *)out->data = mean;
}

/* A scalar mean: runs body over [0, n) in tfg_parallel_for's chunks with
 * one double partial per chunk (body stores chunk k's partial in
 * (*slot)[k]), sums the partials in chunk order and stores the sum over
 * count (store_mean). n = 0 runs nothing. TFG_ERR_NOMEM if the partials
 * cannot be allocated. */
static tfg_status chunk_mean(tfg_kernel_ctx *ctx, tfg_tensor *out, int64_t n, int64_t grain,
                             tfg_parallel_body body, void *job, double **slot, int64_t count) {
  double s = 0;
  if (n > 0) {
    int64_t nchunks = tfg_parallel_chunks(ctx->pool, n, grain);
    double *partial = calloc((size_t)nchunks, sizeof *partial);
    if (!partial) return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory");
    *slot = partial;
    tfg_parallel_for(ctx->pool, n, grain, body, job);
    for (int64_t k = 0; k < nchunks; k++) s += partial[k];
    free(partial);
  }
  store_mean(out, s, count);
  return TFG_OK;
}

/* ---- softmax, log_softmax ---------------------------------------------- */

/* The tensor is viewed as [outer, len, inner] around the axis; a "line"
 * is the len elements at one (outer, inner) position, inner apart. */
typedef struct softmax_job {
  const void *x;
  void *y;
  int64_t len, inner;
  bool log;
  tfg_dtype dt;   /* f16/bf16: the line is widened into scratch */
  float *scratch; /* f16/bf16: len floats per chunk */
} softmax_job;

/* Line l's first element. */
static int64_t line_base(const softmax_job *j, int64_t l) { return l / j->inner * j->len * j->inner + l % j->inner; }

/* Both forms subtract the line's maximum m before exp, so the largest
 * term is exp(0) = 1 and nothing overflows, whatever the logits:
 *   softmax     = exp(x - m) / sum exp(x - m)
 *   log_softmax = (x - m) - log(sum exp(x - m))
 * (x - m is formed before subtracting the log so that large logits do
 * not cost the result its low digits). The exps and their sum are
 * tfg_cpu_exp_line's (kernels/cpu/cpu_impl.h). One line of len elements
 * s apart; y may be x. */
#define DEFINE_SOFTMAX(T, SFX)                                                          \
  double tfg_cpu_exp_line_##SFX(const T *x, int64_t s, T m, T *y, int64_t len) {        \
    double z[EXP_BLOCK], sum = 0;                                                       \
    for (int64_t b = 0; b < len; b += EXP_BLOCK) {                                      \
      int64_t n = len - b < EXP_BLOCK ? len - b : EXP_BLOCK;                            \
      for (int64_t i = 0; i < n; i++) z[i] = (double)(x[(b + i) * s] - m);              \
      tfg_vm_exp(z, z, n);                                                              \
      sum += tfg_cpu_row_sum_f64(z, n);                                                 \
      if (y)                                                                            \
        for (int64_t i = 0; i < n; i++) y[(b + i) * s] = (T)z[i];                       \
    }                                                                                   \
    return sum;                                                                         \
  }                                                                                     \
  static void softmax_line_##SFX(const T *x, T *y, int64_t len, int64_t s, bool lg) {  \
    T m = tfg_cpu_line_max_##SFX(x, s, len);                                            \
    double sum = tfg_cpu_exp_line_##SFX(x, s, m, lg ? NULL : y, len);                   \
    if (lg) {                                                                           \
      double ls = log(sum);                                                             \
      for (int64_t t = 0; t < len; t++) y[t * s] = (T)((double)(x[t * s] - m) - ls);    \
    } else {                                                                            \
      double inv = 1.0 / sum;                                                           \
      for (int64_t t = 0; t < len; t++) y[t * s] = (T)(y[t * s] * inv);                 \
    }                                                                                   \
  }                                                                                     \
  static void softmax_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {        \
    const softmax_job *j = arg;                                                         \
    (void)chunk;                                                                        \
    for (int64_t l = lo; l < hi; l++) {                                                 \
      int64_t base = line_base(j, l);                                                   \
      softmax_line_##SFX((const T *)j->x + base, (T *)j->y + base, j->len, j->inner,    \
                         j->log);                                                       \
    }                                                                                   \
  }
DEFINE_SOFTMAX(float, f32)
DEFINE_SOFTMAX(double, f64)

/* f16/bf16: each line widened into the chunk's scratch, the f32 line in
 * place there, and rounded back (kernels/cpu/half.c). */
static void softmax_half(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const softmax_job *j = arg;
  float *buf = j->scratch + chunk * j->len;
  for (int64_t l = lo; l < hi; l++) {
    int64_t base = line_base(j, l);
    tfg_cpu_half_load_strided(j->dt, (const uint16_t *)j->x + base, j->inner, buf, j->len);
    softmax_line_f32(buf, buf, j->len, 1, j->log);
    tfg_cpu_half_store_strided(j->dt, buf, (uint16_t *)j->y + base, j->inner, j->len);
  }
}

/* SOFTMAX, LOG_SOFTMAX along attrs.axis of x (any rank >= 1), f32/f64,
 * and f16/bf16 computed in f32 a line at a time. */
TFG_CPU_KERNEL(tfg_cpu_softmax) {
  const tfg_tensor *x = &in[0];
  bool half = tfg_cpu_is_half(x->dtype);
  if (!tfg_cpu_is_float(x->dtype) && !half) return tfg_cpu_unsupported(ctx, "softmax", x->dtype);
  TFG_ASSERT(out->dtype == x->dtype && tfg_shape_eq(&out->shape, &x->shape));
  int64_t axis = node->attrs.axis;
  TFG_ASSERT(axis >= 0 && axis < x->shape.rank);
  int64_t inner = 1;
  for (int d = (int)axis + 1; d < x->shape.rank; d++) inner *= x->shape.dim[d];
  softmax_job j = {.x = x->data, .y = out->data, .len = x->shape.dim[axis], .inner = inner,
                   .log = node->op == TFG_OP_LOG_SOFTMAX, .dt = x->dtype};
  int64_t n = tfg_shape_numel(&x->shape);
  if (n == 0) return TFG_OK;
  int64_t lines = n / j.len, grain = rows_grain(j.len);
  if (half) {
    j.scratch = malloc((size_t)(tfg_parallel_chunks(ctx->pool, lines, grain) * j.len) * sizeof(float));
    if (!j.scratch) return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory");
  }
  tfg_parallel_for(ctx->pool, lines, grain,
                   half ? softmax_half : x->dtype == TFG_DTYPE_F32 ? softmax_f32 : softmax_f64, &j);
  free(j.scratch);
  return TFG_OK;
}

/* ---- cross_entropy, accuracy ------------------------------------------ */

/* Both are means over the rows of logits [N, C] of a term of the row and
 * its label. DEFINE_LABEL_ROWS(ROW, T, SFX) defines their chunk body
 * ROWs_SFX, which sums ROW_SFX(x, c, labels, r) over its rows r into
 * partial[chunk] (chunk_mean); the term reads row r's label when it
 * needs it, after the row's own work. */
typedef struct label_job {
  const void *logits;
  const tfg_tensor *labels;
  int64_t c;
  double *partial;
} label_job;

#define DEFINE_LABEL_ROWS(ROW, T, SFX)                                         \
  static void ROW##s_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) { \
    label_job *j = arg;                                                        \
    double acc = 0;                                                            \
    for (int64_t r = lo; r < hi; r++)                                          \
      acc += ROW##_##SFX((const T *)j->logits + r * j->c, j->c, j->labels, r); \
    j->partial[chunk] = acc;                                                   \
  }

/* A row's loss = logsumexp(x) - x[label] = log(sum exp(x - m)) +
 * (m - x[label]), the max-shifted form, so logits of +-1000 give exact
 * finite losses. */
#define DEFINE_CE(T, SFX)                                                            \
  static inline double ce_row_##SFX(const T *x, int64_t c, const tfg_tensor *labels, \
                                    int64_t r) {                                     \
    T m = tfg_cpu_line_max_##SFX(x, 1, c);                                           \
    double sum = tfg_cpu_exp_line_##SFX(x, 1, m, NULL, c);                           \
    return log(sum) + ((double)m - (double)x[tfg_cpu_id_at(labels, r)]);             \
  }                                                                                  \
  DEFINE_LABEL_ROWS(ce_row, T, SFX)
DEFINE_CE(float, f32)
DEFINE_CE(double, f64)

/* 1 when the row's argmax is its label. The argmax is the first maximum;
 * a NaN counts as the maximum (the first NaN wins, as NumPy's argmax), so
 * a row gone NaN is never right by accident of its other values. A label
 * outside [0, C) matches no column: the row is wrong. */
#define DEFINE_ACC(T, SFX)                                                            \
  static inline double acc_row_##SFX(const T *x, int64_t c, const tfg_tensor *labels, \
                                     int64_t r) {                                     \
    int64_t best = 0;                                                                 \
    for (int64_t t = 1; t < c && x[best] == x[best]; t++)                             \
      if (x[t] > x[best] || x[t] != x[t]) best = t;                                   \
    return best == tfg_cpu_id_at(labels, r);                                          \
  }                                                                                   \
  DEFINE_LABEL_ROWS(acc_row, T, SFX)
DEFINE_ACC(float, f32)
DEFINE_ACC(double, f64)

/* A mean over the rows of logits [N, C] against labels [N]: what its
 * messages call its operands, and its row sums. */
typedef struct label_mean_op {
  const char *logits, *labels, *out; /* out NULL: the op fixes out's dtype, the logits' */
  bool check_labels;                 /* a label outside [0, C) fails (else its row's term says) */
  tfg_parallel_body f32, f64;
} label_mean_op;

static const label_mean_op cross_entropy_op = {"cross_entropy", "cross_entropy labels", NULL, true,
                                               ce_rows_f32, ce_rows_f64};
static const label_mean_op accuracy_op = {"accuracy", "accuracy labels", "accuracy output", false,
                                          acc_rows_f32, acc_rows_f64};

/* The kernel of op: checks that the logits in[0] are f32/f64, the labels
 * in[1] i32/i64 (and in range when op->check_labels: TFG_ERR_NUMERIC
 * naming the row) and out f32/f64 when op->out names it, then stores the
 * mean of the rows' terms in out's one element (NaN for N = 0). */
static tfg_status label_mean(tfg_kernel_ctx *ctx, const label_mean_op *op, const tfg_tensor *in,
                             tfg_tensor *out) {
  const tfg_tensor *x = &in[0], *lab = &in[1];
  if (!tfg_cpu_is_float(x->dtype)) return tfg_cpu_unsupported(ctx, op->logits, x->dtype);
  if (!tfg_dtype_is_int(lab->dtype)) return tfg_cpu_unsupported(ctx, op->labels, lab->dtype);
  if (op->out && !tfg_cpu_is_float(out->dtype))
    return tfg_cpu_unsupported(ctx, op->out, out->dtype);
  TFG_ASSERT(x->shape.rank == 2 && lab->shape.rank == 1 && lab->shape.dim[0] == x->shape.dim[0]);
  TFG_ASSERT((op->out || out->dtype == x->dtype) && out->shape.rank == 0);
  int64_t n = x->shape.dim[0], c = x->shape.dim[1];
  if (op->check_labels) {
    tfg_status bad = tfg_cpu_check_ids(ctx, TFG_CPU_IDS_LABELS, lab, n, c);
    if (bad != TFG_OK) return bad;
  }
  label_job j = {.logits = x->data, .labels = lab, .c = c};
  /* C = 0: no row has a term (accuracy: an argmax, so none is right;
   * cross_entropy has failed on the first label). */
  return chunk_mean(ctx, out, c > 0 ? n : 0, rows_grain(c),
                    x->dtype == TFG_DTYPE_F32 ? op->f32 : op->f64, &j, &j.partial, n);
}

/* CROSS_ENTROPY: logits [N, C] f32/f64, labels i32/i64 [N] -> scalar mean
 * over the rows of -log_softmax(logits)[n, label[n]]. A label outside
 * [0, C) is TFG_ERR_NUMERIC naming the row; N = 0 gives NaN (an empty
 * mean, as PyTorch). */
TFG_CPU_KERNEL(tfg_cpu_cross_entropy) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_cross_entropy);
  return label_mean(ctx, &cross_entropy_op, in, out);
}

/* ACCURACY: logits [N, C] f32/f64, labels i32/i64 [N] -> scalar (f32 as
 * the op defines; f64 also accepted): the fraction of rows whose argmax
 * equals the label. N = 0 gives NaN. */
TFG_CPU_KERNEL(tfg_cpu_accuracy) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_accuracy);
  return label_mean(ctx, &accuracy_op, in, out);
}

/* ---- mse --------------------------------------------------------------- */

typedef struct mse_job {
  const void *a, *b;
  double *partial;
} mse_job;

#define DEFINE_MSE(T, SFX)                                                     \
  static void mse_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {   \
    mse_job *j = arg;                                                          \
    const T *a = j->a, *b = j->b;                                              \
    double acc = 0;                                                            \
    for (int64_t i = lo; i < hi; i++) {                                        \
      double d = (double)a[i] - (double)b[i];                                  \
      acc += d * d;                                                            \
    }                                                                          \
    j->partial[chunk] = acc;                                                   \
  }
DEFINE_MSE(float, f32)
DEFINE_MSE(double, f64)

/* MSE: scalar mean of (a - b)^2 over all elements of two same-shape
 * f32/f64 tensors; NaN when they are empty. */
TFG_CPU_KERNEL(tfg_cpu_mse) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_mse);
  const tfg_tensor *a = &in[0], *b = &in[1];
  (void)node;
  if (!tfg_cpu_is_float(a->dtype)) return tfg_cpu_unsupported(ctx, "mse", a->dtype);
  TFG_ASSERT(b->dtype == a->dtype && out->dtype == a->dtype && out->shape.rank == 0);
  TFG_ASSERT(tfg_shape_eq(&a->shape, &b->shape));
  int64_t n = tfg_shape_numel(&a->shape);
  mse_job j = {.a = a->data, .b = b->data};
  return chunk_mean(ctx, out, n, GRAIN_ELEMS, a->dtype == TFG_DTYPE_F32 ? mse_f32 : mse_f64, &j,
                    &j.partial, n);
}

/* ---- layer_norm -------------------------------------------------------- */

/* y = (x - mean) * rstd * gamma + beta for one row, in double throughout
 * and rounded once to T. */
#define DEFINE_LN_ROW(T, SFX)                                                                  \
  static inline void ln_row_##SFX(const tfg_cpu_ln_job *j, int64_t r, const T *x, double mean, \
                                  double rstd) {                                               \
    const T *g = j->gamma, *b = j->aux;                                                        \
    int64_t d = j->d;                                                                          \
    T *y = (T *)j->out + r * d;                                                                \
    for (int64_t t = 0; t < d; t++)                                                            \
      y[t] = (T)(((double)x[t] - mean) * rstd * (double)g[t] + (double)b[t]);                  \
  }
DEFINE_LN_ROW(float, f32)
DEFINE_LN_ROW(double, f64)
TFG_CPU_DEFINE_LN_ROWS(ln, ln_row)

/* LAYER_NORM: x [..., D], gamma [D], beta [D], all f32 or all f64;
 * normalizes each row of the last axis as torch.nn.functional.layer_norm
 * with eps = attrs.value. */
TFG_CPU_KERNEL(tfg_cpu_layer_norm) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_layer_norm);
  tfg_dtype dt = in[0].dtype;
  if (!tfg_cpu_is_float(dt)) return tfg_cpu_unsupported(ctx, "layer_norm", dt);
  TFG_ASSERT(in[1].dtype == dt && in[2].dtype == dt && out->dtype == dt);
  TFG_ASSERT(tfg_shape_numel(&in[2].shape) == tfg_shape_numel(&in[1].shape)); /* beta [D] */
  tfg_cpu_ln_run(ctx, node, in, out, 1, ln_f32, ln_f64);
  return TFG_OK;
}

/* ---- dropout ----------------------------------------------------------- */

typedef struct dropout_job {
  const void *x;
  void *y;
  uint64_t seed;
  int64_t offset;
  double rate, scale;
} dropout_job;

/* Element i is kept when tfg_rng_uniform(seed, offset + i) >= rate, i
 * being its flat index in x (offset: attrs.offset, where a mirrored
 * replica's part of the batch starts): the mask depends on (seed, i) only, never on the
 * chunking, so every thread count and device draws the same mask. Kept
 * values are x * scale with scale = 1 / (1 - rate), formed in double and
 * rounded once to T. */
#define DEFINE_DROPOUT(T, SFX)                                                   \
  static void dropout_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) { \
    const dropout_job *j = arg;                                                  \
    const T *x = j->x;                                                           \
    T *y = j->y;                                                                 \
    (void)chunk;                                                                 \
    for (int64_t i = lo; i < hi; i++)                                            \
      y[i] = tfg_rng_uniform(j->seed, (uint64_t)(j->offset + i)) >= j->rate      \
                 ? (T)((double)x[i] * j->scale)                                  \
                 : (T)0;                                                         \
  }
DEFINE_DROPOUT(float, f32)
DEFINE_DROPOUT(double, f64)

/* DROPOUT: identity unless ctx->training; then keeps each element with
 * probability 1 - rate (rate = attrs.value; the stream mixes attrs.seed
 * with the train seed and step, so every step draws a new mask and the
 * gradient, which runs this same op on dy, reuses it) and scales
 * the kept ones by 1 / (1 - rate); rate 1 gives zeros. A rate outside
 * [0, 1] is TFG_ERR_NUMERIC. */
TFG_CPU_KERNEL(tfg_cpu_dropout) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_dropout);
  const tfg_tensor *x = &in[0];
  if (!tfg_cpu_is_float(x->dtype)) return tfg_cpu_unsupported(ctx, "dropout", x->dtype);
  TFG_ASSERT(out->dtype == x->dtype && tfg_shape_eq(&out->shape, &x->shape));
  int64_t n = tfg_shape_numel(&x->shape);
  size_t bytes = (size_t)n * tfg_dtype_size(x->dtype);
  double rate = node->attrs.value;
  if (!(rate >= 0 && rate <= 1))
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC, "dropout rate %g is outside [0, 1]", rate);
  if (!ctx->training) {
    if (out->data != x->data && bytes) memcpy(out->data, x->data, bytes);
    return TFG_OK;
  }
  if (rate >= 1) { /* nothing kept; 1 / (1 - rate) would be infinite */
    if (bytes) memset(out->data, 0, bytes);
    return TFG_OK;
  }
  uint64_t seed = tfg_rng_dropout_stream(node->attrs.seed, ctx->seed, ctx->step);
  dropout_job j = {.x = x->data, .y = out->data, .seed = seed, .offset = node->attrs.offset, .rate = rate,
                   .scale = 1.0 / (1.0 - rate)};
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS,
                   x->dtype == TFG_DTYPE_F32 ? dropout_f32 : dropout_f64, &j);
  return TFG_OK;
}

/* ---- embedding --------------------------------------------------------- */

typedef struct gather_job {
  const char *table;
  const tfg_tensor *ids;
  char *out;
  size_t row_bytes;
} gather_job;

static void gather_rows(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const gather_job *j = arg;
  (void)chunk;
  for (int64_t i = lo; i < hi; i++)
    memcpy(j->out + (size_t)i * j->row_bytes,
           j->table + (size_t)tfg_cpu_id_at(j->ids, i) * j->row_bytes, j->row_bytes);
}

/* EMBEDDING: table [V, D] f32/f64/f16/bf16 (rows are copied as bytes),
 * ids i32/i64 of any shape -> [..., D], row v of the table for each id v. An id outside [0, V) is
 * TFG_ERR_NUMERIC naming the id and its position. */
TFG_CPU_KERNEL(tfg_cpu_embedding) {
  const tfg_tensor *table = &in[0], *ids = &in[1];
  (void)node;
  if (!tfg_cpu_is_float(table->dtype) && !tfg_cpu_is_half(table->dtype))
    return tfg_cpu_unsupported(ctx, "embedding table", table->dtype);
  if (!tfg_dtype_is_int(ids->dtype)) return tfg_cpu_unsupported(ctx, "embedding ids", ids->dtype);
  TFG_ASSERT(table->shape.rank == 2 && out->dtype == table->dtype);
  int64_t v = table->shape.dim[0], d = table->shape.dim[1];
  int64_t n = tfg_shape_numel(&ids->shape);
  TFG_ASSERT(tfg_shape_numel(&out->shape) == n * d);
  tfg_status bad = tfg_cpu_check_ids(ctx, TFG_CPU_IDS_EMBEDDING, ids, n, v);
  if (bad != TFG_OK) return bad;
  gather_job j = {.table = table->data, .ids = ids, .out = out->data,
                  .row_bytes = (size_t)d * tfg_dtype_size(table->dtype)};
  tfg_parallel_for(ctx->pool, n, rows_grain(d), gather_rows, &j);
  return TFG_OK;
}

/* ---- one_hot ----------------------------------------------------------- */

typedef struct one_hot_job {
  const tfg_tensor *ids;
  void *out;
  int64_t depth;
  bool f64;
} one_hot_job;

static void one_hot_rows(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const one_hot_job *j = arg;
  size_t es = j->f64 ? sizeof(double) : sizeof(float);
  (void)chunk;
  memset((char *)j->out + (size_t)(lo * j->depth) * es, 0, (size_t)((hi - lo) * j->depth) * es);
  for (int64_t i = lo; i < hi; i++) {
    int64_t v = tfg_cpu_id_at(j->ids, i);
    if (v < 0 || v >= j->depth) continue; /* out of range: the row stays zero */
    if (j->f64)
      ((double *)j->out)[i * j->depth + v] = 1.0;
    else
      ((float *)j->out)[i * j->depth + v] = 1.0f;
  }
}

/* ONE_HOT: ids i32/i64 [...] -> [..., n] (n = attrs.n), 1 at each id's
 * column and 0 elsewhere; f32 as the op defines, f64 also accepted. An
 * id outside [0, n) is not an error: its row is all zeros, as in
 * TensorFlow's tf.one_hot (PyTorch's one_hot would raise instead). */
TFG_CPU_KERNEL(tfg_cpu_one_hot) {
  const tfg_tensor *ids = &in[0];
  if (!tfg_dtype_is_int(ids->dtype)) return tfg_cpu_unsupported(ctx, "one_hot ids", ids->dtype);
  if (!tfg_cpu_is_float(out->dtype)) return tfg_cpu_unsupported(ctx, "one_hot output", out->dtype);
  int64_t n = tfg_shape_numel(&ids->shape), depth = node->attrs.n;
  TFG_ASSERT(depth >= 0 && tfg_shape_numel(&out->shape) == n * depth);
  if (n == 0 || depth == 0) return TFG_OK;
  one_hot_job j = {.ids = ids, .out = out->data, .depth = depth,
                   .f64 = out->dtype == TFG_DTYPE_F64};
  tfg_parallel_for(ctx->pool, n, rows_grain(depth), one_hot_rows, &j);
  return TFG_OK;
}
