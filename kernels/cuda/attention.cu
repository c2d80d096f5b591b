/* kernels/cuda/attention.cu: ATTENTION, ATTENTION_PROBS and
 * ATTENTION_GRAD on a CUDA device, the GPU twin of
 * kernels/cpu/attention.c: the host side (checks, the operands' views,
 * which kernels, their scratch). The kernels are device code in
 * kernels/cuda/attention_device.cuh: the reference ones, a warp per row,
 * run f64 and head sizes above 128; f32 with head sizes up to 128
 * (f16/bf16 come staged in f32 by the registry) runs on the tiled ones,
 * which share key and value tiles in shared memory between a block's
 * rows and give each lane a column. The switch no_attention_tiled
 * (TFG_ATTENTION_TILED=0: the backend's tfg_cuda_ctx.attention_reference)
 * selects the reference for those too, and the conformance suite runs
 * both. Neither uses tensor cores. */
#include "kernels/cuda/common.cuh"
extern "C" {
#include "ir/matmul_view.h"
}
#include "kernels/cuda/attention_device.cuh"

using namespace tfg_att; /* the kernels */

namespace {

/* Whether the tiled kernels take this attention on ctx's device: f32
 * (f16 and bf16 come staged in f32), head sizes 1..TMAX, unless the
 * backend was made with no_attention_tiled. */
bool tiled(tfg_kernel_ctx *ctx, tfg_dtype dt, long long hd, long long hdv) {
  return dt == TFG_DTYPE_F32 && hd >= 1 && hd <= TMAX && hdv >= 1 && hdv <= TMAX &&
         !tfg_cuda_of(ctx)->attention_reference;
}

/* Blocks for a tiled launch over `work` blocks of rows: a grid-stride
 * loop past the grid cap. */
unsigned tiled_grid(long long work) { return tfg_cuda_grid(work, 1); }

/* ATTENTION: (q [..., Tq, hd], k [..., Tk, hd], v [..., Tk, hdv]) ->
 * [..., Tq, hdv]; ATTENTION_PROBS: (q, k) -> [..., Tq, Tk]; f32 or f64,
 * attrs.value the scale, attrs.causal the mask. No keys: zeros. */
tfg_status cuda_attention(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *q = &in[0], *k = &in[1];
  bool probs = node->op == TFG_OP_ATTENTION_PROBS;
  const tfg_tensor *v = probs ? k : &in[2];
  tfg_dtype dt = q->dtype;
  if ((dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) || k->dtype != dt || v->dtype != dt || out->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention of %s is not supported on CUDA", tfg_dtype_name(dt));
  tfg_attention_geom g;
  const tfg_shape *shapes[3] = {&q->shape, &k->shape, &v->shape};
  const char *bad = tfg_attention_geometry(node, shapes, &out->shape, &g);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention: %s", bad);
  att_views w = {g.q, g.k, g.v, g.out, g.out}; /* no dy: out stands in */
  long long tq = g.tq, tk = g.tk, hd = g.hd, hdv = g.hdv;
  long long total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  long long rows = total / (probs ? tk : hdv);
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  unsigned blocks = tfg_cuda_grid(rows, TFG_CUDA_THREADS / WARP);
  bool causal = node->attrs.causal;
  if (!probs && tiled(ctx, dt, hd, hdv)) {
    long long nblocks = rows / tq * ((tq + ROWS - 1) / ROWS);
    attention_tiled<<<tiled_grid(nblocks), ROWS * WARP, tiled_smem((int)hd, (int)hdv, (int)hd, 0), st>>>(
        (const float *)q->data, (const float *)k->data, (const float *)v->data, (float *)out->data, w, tq, tk,
        (int)hd, (int)hdv, (float)node->attrs.value, causal, nblocks);
    TFG_CUDA_LAUNCHED(ctx);
    return TFG_OK;
  }
  if (dt == TFG_DTYPE_F32) {
    float sc = (float)node->attrs.value;
    if (probs)
      attention_probs_rows<float><<<blocks, TFG_CUDA_THREADS, 0, st>>>(
          (const float *)q->data, (const float *)k->data, (float *)out->data, w, rows, tq, tk, hd, sc, causal);
    else
      attention_rows<float><<<blocks, TFG_CUDA_THREADS, 0, st>>>((const float *)q->data, (const float *)k->data,
                                                                 (const float *)v->data, (float *)out->data, w, rows,
                                                                 tq, tk, hd, hdv, sc, causal);
  } else {
    double sc = node->attrs.value;
    if (probs)
      attention_probs_rows<double><<<blocks, TFG_CUDA_THREADS, 0, st>>>(
          (const double *)q->data, (const double *)k->data, (double *)out->data, w, rows, tq, tk, hd, sc, causal);
    else
      attention_rows<double><<<blocks, TFG_CUDA_THREADS, 0, st>>>((const double *)q->data, (const double *)k->data,
                                                                  (const double *)v->data, (double *)out->data, w,
                                                                  rows, tq, tk, hd, hdv, sc, causal);
  }
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* Queues the gradient for input part (0 q, 1 k, 2 v) into o (the output
 * rows as w.o says, from the part's first column), after the statistics
 * st: the tiled kernel (f32) or the reference one. */
template <typename T>
void attention_grad_part(cudaStream_t stream, const T *q, const T *k, const T *v, const T *dy, T *o, const att_views &w,
                         const double *st, const tfg_attention_geom &g, int part, long long batches, T scale,
                         bool causal, bool use_tiled) {
  long long qrows = batches * g.tq, krows = batches * g.tk;
  if ((part == 0 ? qrows : krows) == 0) return;
  if (use_tiled) { /* T is float here */
    const float *qf = (const float *)q, *kf = (const float *)k, *vf = (const float *)v, *dyf = (const float *)dy;
    float *of = (float *)o, sc = (float)scale;
    int hd = (int)g.hd, hdv = (int)g.hdv;
    long long qblocks = batches * ((g.tq + ROWS - 1) / ROWS), kblocks = batches * ((g.tk + ROWS - 1) / ROWS);
    size_t smem = tiled_smem(hd, hdv, hd, hdv);
    if (part == 0)
      attention_grad_q_tiled<<<tiled_grid(qblocks), ROWS * WARP, smem, stream>>>(qf, kf, vf, dyf, of, w, st, g.tq, g.tk,
                                                                                hd, hdv, sc, causal, qblocks);
    else if (part == 1)
      attention_grad_kv_tiled<true><<<tiled_grid(kblocks), ROWS * WARP, smem, stream>>>(
          qf, kf, vf, dyf, of, w, st, g.tq, g.tk, hd, hdv, sc, causal, kblocks);
    else
      attention_grad_kv_tiled<false><<<tiled_grid(kblocks), ROWS * WARP, smem, stream>>>(
          qf, kf, vf, dyf, of, w, st, g.tq, g.tk, hd, hdv, sc, causal, kblocks);
    return;
  }
  long long per = TFG_CUDA_THREADS / WARP;
  if (part == 0)
    attention_grad_q<T><<<tfg_cuda_grid(qrows, per), TFG_CUDA_THREADS, 0, stream>>>(q, k, v, dy, o, w, st, qrows, g.tq,
                                                                                    g.tk, g.hd, g.hdv, scale, causal);
  else if (part == 1)
    attention_grad_kv<T, true><<<tfg_cuda_grid(krows, per), TFG_CUDA_THREADS, 0, stream>>>(
        q, k, v, dy, o, w, st, krows, g.tq, g.tk, g.hd, g.hdv, scale, causal);
  else
    attention_grad_kv<T, false><<<tfg_cuda_grid(krows, per), TFG_CUDA_THREADS, 0, stream>>>(
        q, k, v, dy, o, w, st, krows, g.tq, g.tk, g.hd, g.hdv, scale, causal);
}

/* The statistics (once), then each part wanted: input `which`'s, or for
 * 3 all three into their columns of each output row (dq at 0, dk at hd,
 * dv at 2 hd). */
template <typename T>
tfg_status attention_grad_launch(tfg_kernel_ctx *ctx, const tfg_tensor *in, tfg_tensor *out, const att_views &w,
                                 const tfg_attention_geom &g, int which, long long batches, T scale, bool causal) {
  cudaStream_t stream = tfg_cuda_of(ctx)->stream;
  const T *q = (const T *)in[0].data, *k = (const T *)in[1].data, *v = (const T *)in[2].data;
  const T *dy = (const T *)in[3].data;
  T *o = (T *)out->data;
  long long qrows = batches * g.tq;
  double *st = NULL;
  if (qrows > 0) TFG_CUDA_CHECK(ctx, cudaMallocAsync((void **)&st, sizeof(double) * 2 * (size_t)qrows, stream));
  tfg_status s = TFG_OK;
  bool use_tiled = tiled(ctx, in[0].dtype, g.hd, g.hdv), want_d = which != 2;
  if (qrows > 0 && use_tiled) { /* T is float here */
    long long qblocks = batches * ((g.tq + ROWS - 1) / ROWS);
    int hd = (int)g.hd, hdv = (int)g.hdv;
    attention_grad_stats_tiled<<<tiled_grid(qblocks), ROWS * WARP, tiled_smem(hd, hdv, hd, hdv), stream>>>(
        (const float *)q, (const float *)k, (const float *)v, (const float *)dy, w, st, g.tq, g.tk, hd, hdv,
        (float)scale, causal, want_d, qblocks);
  } else if (qrows > 0) {
    attention_grad_stats<T><<<tfg_cuda_grid(qrows, TFG_CUDA_THREADS / WARP), TFG_CUDA_THREADS, 0, stream>>>(
        q, k, v, dy, w, st, qrows, g.tq, g.tk, g.hd, g.hdv, scale, causal, want_d);
  }
  TFG_CUDA_NOTE_LAUNCH(ctx, &s, "attention_grad_stats<<<>>>");
  for (int part = 0; part < 3; part++) {
    if (which != TFG_ATTENTION_GRAD_PACKED && which != part) continue;
    long long col = which != TFG_ATTENTION_GRAD_PACKED ? 0 : part == 0 ? 0 : part == 1 ? g.hd : 2 * g.hd;
    attention_grad_part<T>(stream, q, k, v, dy, o + col, w, st, g, part, batches, scale, causal, use_tiled);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "attention_grad<<<>>>");
  }
  TFG_CUDA_FREE_SCRATCH(ctx, &s, st);
  return s;
}

/* ATTENTION_GRAD: (q, k, v, dy) -> attention's gradient for input
 * attrs.axis (0 q, 1 k, 2 v; 3 all three side by side, Tq = Tk); f32 or
 * f64 (f16/bf16 staged by the registry). Scratch: 2 doubles per query
 * row (no Tq x Tk tensor). */
tfg_status cuda_attention_grad(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  tfg_dtype dt = in[0].dtype;
  bool same = out->dtype == dt;
  for (int i = 1; i < 4; i++) same = same && in[i].dtype == dt;
  if ((dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) || !same)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention_grad of %s is not supported on CUDA", tfg_dtype_name(dt));
  tfg_attention_geom g;
  const tfg_shape *shapes[4] = {&in[0].shape, &in[1].shape, &in[2].shape, &in[3].shape};
  const char *bad = tfg_attention_geometry(node, shapes, &out->shape, &g);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention_grad: %s", bad);
  long long total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  int which = (int)node->attrs.axis;
  if (which == TFG_ATTENTION_GRAD_PACKED && g.tq != g.tk)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention_grad: packed gradients need Tq = Tk, got %lld and %lld",
                           (long long)g.tq, (long long)g.tk);
  long long width = which == TFG_ATTENTION_GRAD_PACKED ? 2 * g.hd + g.hdv : which == TFG_ATTENTION_GRAD_V ? g.hdv : g.hd;
  long long batches = total / ((which == 0 ? g.tq : g.tk) * width);
  att_views w = {g.q, g.k, g.v, g.dy, g.out};
  bool causal = node->attrs.causal;
  if (dt == TFG_DTYPE_F32)
    return attention_grad_launch<float>(ctx, in, out, w, g, which, batches, (float)node->attrs.value, causal);
  return attention_grad_launch<double>(ctx, in, out, w, g, which, batches, node->attrs.value, causal);
}

} /* namespace */

extern "C" void tfg_cuda_register_attention(tfg_kernel_fn *table) {
  static const tfg_cuda_kernel_row rows[] = {
      {TFG_OP_ATTENTION, cuda_attention}, {TFG_OP_ATTENTION_PROBS, cuda_attention},
      {TFG_OP_ATTENTION_GRAD, cuda_attention_grad},
  };
  tfg_cuda_register_rows(table, rows);
}
