/* kernels/cpu/attention.c: ATTENTION, ATTENTION_PROBS and ATTENTION_GRAD
 * on the CPU.
 *
 * The work is cut into tasks of QB query rows of one batch matrix, run on
 * the pool. A task forms its rows' scores against the keys they may see,
 * S = q_rows k^T (one gemm on its thread, kernels/cpu/blas.h), scales
 * them in the dtype (as a mul by the scale would), takes each row's
 * softmax as the softmax kernel does (max-shifted, tfg_cpu_exp_line's
 * exps and lane sums), and multiplies by v (a second gemm). A causal row
 * i sees keys 0..i (PyTorch's is_causal: the mask's lower triangle, from
 * the top left), so a task of rows r0..r1-1 computes only keys 0..r1-1:
 * about half the products' and the exps' work when Tq = Tk. The scores
 * live in the task's scratch of QB x Tk: no Tq x Tk tensor is made.
 * ATTENTION_PROBS writes the probabilities themselves (zeros where
 * masked), which attention's gradient (compiler/autodiff.c) multiplies
 * back through. Each operand and the output may be a strided view
 * (ir/matmul_view.h: the layout pass folds the heads' transposes in):
 * the gemms read and write rows at the stored stride.
 *
 * ATTENTION_GRAD (compiler/autodiff.c's rule: one op for all three
 * inputs when Tq = Tk, else one per input) takes
 * the probabilities again the same way, a block of query rows at a time
 * in its scratch, then dP = dy v^T and dS in the scratch too: no Tq x Tk
 * tensor in the backward pass either (see tfg_cpu_attention_grad).
 *
 * The unfused ops (matmul, mul, where, softmax, matmul) compute the same
 * scores; the sums over the visible keys only (not over masked zeros)
 * may differ from theirs in the last bits. f16 and bf16 run in f32
 * (kernels/cpu/half.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/matmul_view.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_ATTENTION, tfg_cpu_attention},
    {TFG_OP_ATTENTION_PROBS, tfg_cpu_attention},
    {TFG_OP_ATTENTION_GRAD, tfg_cpu_attention_grad},
};

void tfg_cpu_register_attention(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

/* Query rows per task: small enough that a causal task skips most of
 * the keys its rows cannot see, big enough for a gemm worth calling. */
enum { QB = 32 };

typedef struct att_job {
  bool f64, causal, probs;
  int64_t tq, tk, hd, hdv, nblk; /* nblk: tasks per batch matrix */
  double scale;
  const char *q, *k, *v;
  char *out;
  tfg_rows_view vq, vk, vv, vo; /* where each batch matrix's rows lie (ir/matmul_view.h) */
  char *scratch; /* QB * tk elements per chunk (attention only) */
  size_t es;
} att_job;

/* The softmax of a row of scores s[0..n) (the visible keys) in place,
 * zeros after it up to len, in T. */
#define DEFINE_ROW(T, SFX)                                                          \
  static void att_row_##SFX(T *s, int64_t n, int64_t len, T scale) {               \
    for (int64_t j = 0; j < n; j++) s[j] = s[j] * scale;                           \
    T m = s[0];                                                                     \
    for (int64_t j = 1; j < n; j++)                                                 \
      if (s[j] > m) m = s[j];                                                       \
    double inv = 1.0 / tfg_cpu_exp_line_##SFX(s, 1, m, s, n);                       \
    for (int64_t j = 0; j < n; j++) s[j] = (T)(s[j] * inv);                         \
    for (int64_t j = n; j < len; j++) s[j] = 0;                                     \
  }
DEFINE_ROW(float, f32)
DEFINE_ROW(double, f64)

static void att_chunk(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const att_job *j = arg;
  for (int64_t t = lo; t < hi; t++) {
    int64_t bm = t / j->nblk, r0 = t % j->nblk * QB;
    int64_t rows = j->tq - r0 < QB ? j->tq - r0 : QB;
    int64_t nk = j->causal ? (r0 + rows < j->tk ? r0 + rows : j->tk) : j->tk; /* keys the block sees */
    const char *q = j->q + (size_t)(tfg_rows_offset(&j->vq, bm) + r0 * j->vq.ld) * j->es;
    const char *k = j->k + (size_t)tfg_rows_offset(&j->vk, bm) * j->es;
    char *o = j->out + (size_t)(tfg_rows_offset(&j->vo, bm) + r0 * j->vo.ld) * j->es;
    /* probabilities: straight into the output rows; else the scratch (ld nk) */
    char *s = j->probs ? o : j->scratch + (size_t)(chunk * QB * j->tk) * j->es;
    int64_t lds = j->probs ? j->vo.ld : (nk > 0 ? nk : 1);
    if (nk > 0) tfg_cpu_gemm_here(j->f64, false, true, rows, nk, j->hd, q, j->vq.ld, k, j->vk.ld, 0.0, s, lds);
    for (int64_t i = 0; i < rows; i++) {
      int64_t vis = j->causal ? (r0 + i + 1 < nk ? r0 + i + 1 : nk) : nk;
      int64_t len = j->probs ? j->tk : nk;
      char *row = s + (size_t)(i * lds) * j->es;
      if (vis == 0) {
        memset(row, 0, (size_t)len * j->es);
        continue;
      }
      if (j->f64) att_row_f64((double *)row, vis, len, j->scale);
      else att_row_f32((float *)row, vis, len, (float)j->scale);
    }
    if (j->probs) continue;
    if (nk == 0) {
      for (int64_t i = 0; i < rows; i++) memset(o + (size_t)(i * j->vo.ld) * j->es, 0, (size_t)j->hdv * j->es);
      continue;
    }
    const char *v = j->v + (size_t)tfg_rows_offset(&j->vv, bm) * j->es;
    tfg_cpu_gemm_here(j->f64, false, false, rows, j->hdv, nk, s, lds, v, j->vv.ld, 0.0, o, j->vo.ld);
  }
}

/* ATTENTION: (q [..., Tq, hd], k [..., Tk, hd], v [..., Tk, hdv]) ->
 * [..., Tq, hdv]; ATTENTION_PROBS: (q, k) -> [..., Tq, Tk]. One float
 * dtype (f16/bf16 in f32); attrs.value the scale, attrs.causal the mask.
 * With no keys (Tk = 0) the output is zeros. */
TFG_CPU_KERNEL(tfg_cpu_attention) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_attention);
  const tfg_tensor *q = &in[0], *k = &in[1];
  bool probs = node->op == TFG_OP_ATTENTION_PROBS;
  const tfg_tensor *v = probs ? k : &in[2];
  if (!tfg_cpu_is_float(q->dtype)) return tfg_cpu_unsupported(ctx, "attention", q->dtype);
  TFG_ASSERT(k->dtype == q->dtype && v->dtype == q->dtype && out->dtype == q->dtype);
  att_job j = {.f64 = q->dtype == TFG_DTYPE_F64, .causal = node->attrs.causal, .probs = probs,
               .scale = node->attrs.value, .q = q->data, .k = k->data, .v = v->data, .out = out->data,
               .es = tfg_dtype_size(q->dtype)};
  /* q, k, v and the output as their views (the layout pass may have
   * folded the heads' transposes in: rows at a stride) */
  tfg_attention_geom g;
  const tfg_shape *shapes[3] = {&q->shape, &k->shape, &v->shape};
  const char *bad = tfg_attention_geometry(node, shapes, &out->shape, &g);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention: %s", bad);
  j.tq = g.tq, j.tk = g.tk, j.hd = g.hd, j.hdv = g.hdv;
  j.vq = g.q, j.vk = g.k, j.vv = g.v, j.vo = g.out;
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  int64_t nbm = total / (j.tq * (probs ? j.tk : j.hdv)); /* batch matrices */
  if (!tfg_cpu_fits_blasint(j.tq) || !tfg_cpu_fits_blasint(j.tk) || !tfg_cpu_fits_blasint(j.hd) ||
      !tfg_cpu_fits_blasint(j.hdv) || !tfg_cpu_fits_blasint(j.vq.ld) || !tfg_cpu_fits_blasint(j.vk.ld) ||
      !tfg_cpu_fits_blasint(j.vv.ld) || !tfg_cpu_fits_blasint(j.vo.ld))
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT, "attention dimensions exceed the BLAS integer range");
  j.nblk = (j.tq + QB - 1) / QB;
  int64_t tasks = nbm * j.nblk;
  if (!probs) {
    int64_t chunks = tfg_parallel_chunks(ctx->pool, tasks, 1);
    j.scratch = malloc((size_t)(chunks * QB * (j.tk > 0 ? j.tk : 1)) * j.es);
    if (!j.scratch) return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory");
  }
  tfg_parallel_for(ctx->pool, tasks, 1, att_chunk, &j);
  free(j.scratch);
  return TFG_OK;
}

/* ---- the gradient ------------------------------------------------------------ */

typedef struct attg_job {
  bool f64, causal;
  int which; /* the input whose gradient: 0 q, 1 k, 2 v; 3 all three, packed */
  int64_t tq, tk, hd, hdv, nblk;
  double scale;
  const char *q, *k, *v, *dy;
  char *out;
  tfg_rows_view vq, vk, vv, vdy, vo;
  char *scratch; /* 2 * QB * tk elements per chunk: P, then dP and dS */
  size_t es;
} attg_job;

/* Row i of dS from its probabilities p and dp = dy v^T (both n long,
 * the first vis visible), in place of dp: p (dp - D) scale, D the sum of
 * p dp over the row (in double, rounded to T once), zeros where masked:
 * the rule the unfused gradient builds from softmax's. */
#define DEFINE_DS(T, SFX)                                                      \
  static void att_ds_##SFX(const T *p, T *dp, int64_t vis, int64_t n, T scale) { \
    double acc = 0;                                                            \
    for (int64_t j = 0; j < vis; j++) acc += (double)p[j] * (double)dp[j];     \
    T d = (T)acc;                                                              \
    for (int64_t j = 0; j < vis; j++) dp[j] = p[j] * (dp[j] - d) * scale;      \
    for (int64_t j = vis; j < n; j++) dp[j] = 0;                               \
  }
DEFINE_DS(float, f32)
DEFINE_DS(double, f64)

/* The probabilities of query rows r0..r0+rows of batch matrix bm against
 * the keys they may see into p (rows x nk, the forward's bits), and,
 * unless only v's gradient is wanted, dS into ds (rows x nk). Returns
 * nk, the keys the rows see (0: nothing was written). */
static int64_t attg_block(const attg_job *j, int64_t bm, int64_t r0, int64_t rows, char *p, char *ds) {
  int64_t nk = j->causal ? (r0 + rows < j->tk ? r0 + rows : j->tk) : j->tk;
  if (nk == 0) return 0;
  const char *q = j->q + (size_t)(tfg_rows_offset(&j->vq, bm) + r0 * j->vq.ld) * j->es;
  const char *k = j->k + (size_t)tfg_rows_offset(&j->vk, bm) * j->es;
  tfg_cpu_gemm_here(j->f64, false, true, rows, nk, j->hd, q, j->vq.ld, k, j->vk.ld, 0.0, p, nk);
  for (int64_t i = 0; i < rows; i++) {
    int64_t vis = j->causal ? (r0 + i + 1 < nk ? r0 + i + 1 : nk) : nk;
    char *row = p + (size_t)(i * nk) * j->es;
    if (j->f64) att_row_f64((double *)row, vis, nk, j->scale);
    else att_row_f32((float *)row, vis, nk, (float)j->scale);
  }
  if (j->which == 2) return nk;
  const char *dy = j->dy + (size_t)(tfg_rows_offset(&j->vdy, bm) + r0 * j->vdy.ld) * j->es;
  const char *v = j->v + (size_t)tfg_rows_offset(&j->vv, bm) * j->es;
  tfg_cpu_gemm_here(j->f64, false, true, rows, nk, j->hdv, dy, j->vdy.ld, v, j->vv.ld, 0.0, ds, nk);
  for (int64_t i = 0; i < rows; i++) {
    int64_t vis = j->causal ? (r0 + i + 1 < nk ? r0 + i + 1 : nk) : nk;
    size_t off = (size_t)(i * nk) * j->es;
    if (j->f64) att_ds_f64((const double *)(p + off), (double *)(ds + off), vis, nk, j->scale);
    else att_ds_f32((const float *)(p + off), (float *)(ds + off), vis, nk, (float)j->scale);
  }
  return nk;
}

/* dq: a task per QB query rows, dq_rows = dS k. dk, dv: a task per batch
 * matrix (its rows are summed over every query block, in order, by one
 * thread: no atomics, the same bits every run), dk += dS^T q_rows and
 * dv += P^T dy_rows per block. All three (packed, columns [0, hd),
 * [hd, 2 hd), [2 hd, 2 hd + hdv) of each row): a task per batch matrix,
 * each block's P and dS made once for the three products; each product
 * the same call, on the same values, as the op of its own makes (the
 * same bits). */
static void attg_chunk(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const attg_job *j = arg;
  char *p = j->scratch + (size_t)(chunk * 2 * QB * j->tk) * j->es, *ds = p + (size_t)(QB * j->tk) * j->es;
  for (int64_t t = lo; t < hi; t++) {
    if (j->which == 0) {
      int64_t bm = t / j->nblk, r0 = t % j->nblk * QB;
      int64_t rows = j->tq - r0 < QB ? j->tq - r0 : QB;
      char *o = j->out + (size_t)(tfg_rows_offset(&j->vo, bm) + r0 * j->vo.ld) * j->es;
      int64_t nk = attg_block(j, bm, r0, rows, p, ds);
      const char *k = j->k + (size_t)tfg_rows_offset(&j->vk, bm) * j->es;
      if (nk > 0) tfg_cpu_gemm_here(j->f64, false, false, rows, j->hd, nk, ds, nk, k, j->vk.ld, 0.0, o, j->vo.ld);
      else
        for (int64_t i = 0; i < rows; i++) memset(o + (size_t)(i * j->vo.ld) * j->es, 0, (size_t)j->hd * j->es);
      continue;
    }
    bool all = j->which == TFG_ATTENTION_GRAD_PACKED;
    int64_t bm = t, width = all ? 2 * j->hd + j->hdv : j->which == 1 ? j->hd : j->hdv;
    char *o = j->out + (size_t)tfg_rows_offset(&j->vo, bm) * j->es;
    for (int64_t i = 0; i < j->tk; i++) memset(o + (size_t)(i * j->vo.ld) * j->es, 0, (size_t)width * j->es);
    /* the columns of dk and dv in the output rows (all: after dq's) */
    char *ok = o + (size_t)(all ? j->hd : 0) * j->es, *ov = o + (size_t)(all ? 2 * j->hd : 0) * j->es;
    const char *kb = j->k + (size_t)tfg_rows_offset(&j->vk, bm) * j->es;
    for (int64_t r0 = 0; r0 < j->tq; r0 += QB) {
      int64_t rows = j->tq - r0 < QB ? j->tq - r0 : QB;
      int64_t nk = attg_block(j, bm, r0, rows, p, ds);
      const char *qr = j->q + (size_t)(tfg_rows_offset(&j->vq, bm) + r0 * j->vq.ld) * j->es;
      const char *dyr = j->dy + (size_t)(tfg_rows_offset(&j->vdy, bm) + r0 * j->vdy.ld) * j->es;
      if (all && nk > 0) /* dq_rows = dS k, as the dq op computes it */
        tfg_cpu_gemm_here(j->f64, false, false, rows, j->hd, nk, ds, nk, kb, j->vk.ld, 0.0,
                          o + (size_t)(r0 * j->vo.ld) * j->es, j->vo.ld);
      if (nk == 0) continue; /* (all: dq's rows zero already) */
      if (all || j->which == 1) tfg_cpu_gemm_here(j->f64, true, false, nk, j->hd, rows, ds, nk, qr, j->vq.ld, 1.0, ok, j->vo.ld);
      if (all || j->which == 2) tfg_cpu_gemm_here(j->f64, true, false, nk, j->hdv, rows, p, nk, dyr, j->vdy.ld, 1.0, ov, j->vo.ld);
    }
  }
}

/* ATTENTION_GRAD: (q, k, v, dy) -> the gradient of attention(q, k, v)
 * for input attrs.axis (0 q, 1 k, 2 v; 3: all three side by side in
 * each row, Tq = Tk), dy its output's gradient; the forward's attrs. The probabilities are recomputed a block of query
 * rows at a time, as the forward takes them (the same bits), in the
 * task's scratch: no Tq x Tk tensor. Per block, with P the rows'
 * probabilities and S their scaled scores:
 *   dv += P^T dy,   dP = dy v^T,   dS = P (dP - rowsum(P dP)) scale,
 *   dq = dS k,      dk += dS^T q.
 * Alone, q's and k's each take one more product than the unfused
 * gradient, which shares P and dS between the three through Tq x Tk
 * tensors; packed (attrs.axis 3, what autodiff makes for self-attention)
 * the three share them a block at a time. */
TFG_CPU_KERNEL(tfg_cpu_attention_grad) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_attention_grad);
  const tfg_tensor *q = &in[0];
  if (!tfg_cpu_is_float(q->dtype)) return tfg_cpu_unsupported(ctx, "attention_grad", q->dtype);
  for (int i = 1; i < 4; i++) TFG_ASSERT(in[i].dtype == q->dtype);
  TFG_ASSERT(out->dtype == q->dtype);
  attg_job j = {.f64 = q->dtype == TFG_DTYPE_F64, .causal = node->attrs.causal, .which = (int)node->attrs.axis,
                .scale = node->attrs.value, .q = q->data, .k = in[1].data, .v = in[2].data, .dy = in[3].data,
                .out = out->data, .es = tfg_dtype_size(q->dtype)};
  tfg_attention_geom g;
  const tfg_shape *shapes[4] = {&in[0].shape, &in[1].shape, &in[2].shape, &in[3].shape};
  const char *bad = tfg_attention_geometry(node, shapes, &out->shape, &g);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention_grad: %s", bad);
  j.tq = g.tq, j.tk = g.tk, j.hd = g.hd, j.hdv = g.hdv;
  j.vq = g.q, j.vk = g.k, j.vv = g.v, j.vdy = g.dy, j.vo = g.out;
  if (j.which == TFG_ATTENTION_GRAD_PACKED && j.tq != j.tk)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention_grad: packed gradients need Tq = Tk, got %lld and %lld",
                           (long long)j.tq, (long long)j.tk);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  int64_t width = j.which == TFG_ATTENTION_GRAD_PACKED ? 2 * j.hd + j.hdv : j.which == TFG_ATTENTION_GRAD_V ? j.hdv : j.hd;
  int64_t nbm = total / ((j.which == 0 ? j.tq : j.tk) * width);
  if (!tfg_cpu_fits_blasint(j.tq) || !tfg_cpu_fits_blasint(j.tk) || !tfg_cpu_fits_blasint(j.hd) ||
      !tfg_cpu_fits_blasint(j.hdv) || !tfg_cpu_fits_blasint(j.vq.ld) || !tfg_cpu_fits_blasint(j.vk.ld) ||
      !tfg_cpu_fits_blasint(j.vv.ld) || !tfg_cpu_fits_blasint(j.vdy.ld) || !tfg_cpu_fits_blasint(j.vo.ld))
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT, "attention dimensions exceed the BLAS integer range");
  j.nblk = (j.tq + QB - 1) / QB;
  int64_t tasks = j.which == 0 ? nbm * j.nblk : nbm;
  int64_t chunks = tfg_parallel_chunks(ctx->pool, tasks, 1);
  j.scratch = malloc((size_t)(chunks * 2 * QB * (j.tk > 0 ? j.tk : 1)) * j.es);
  if (!j.scratch) return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory");
  tfg_parallel_for(ctx->pool, tasks, 1, attg_chunk, &j);
  free(j.scratch);
  return TFG_OK;
}
