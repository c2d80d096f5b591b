/* kernels/cuda/attention.cu: ATTENTION, ATTENTION_PROBS and
 * ATTENTION_GRAD on a CUDA device, the GPU twin of
 * kernels/cpu/attention.c.
 *
 * A warp per query row: the lanes split each score's dot product
 * (strided over the head size, then a butterfly of shuffles), and the
 * row's softmax is taken online (Milakov and Gimelshein's running max
 * and sum; FlashAttention's form), so no Tq x Tk tensor is written:
 * for each visible key j, with s the scaled score,
 *   m' = max(m, s),  l = l e^(m - m') + e^(s - m'),  acc = acc e^(m - m') + e^(s - m') v_j,
 * and the output is acc / l. Each lane keeps SLICE output dims (a pass
 * covers WARP * SLICE = 256 of them; a larger hdv takes more passes, each
 * recomputing the scores). The running sums and exps are in double, as
 * the CPU's softmax sums are; a score is the dtype's (its dot product in
 * another order than the CPU gemm's, so the last bits may differ). A
 * causal row i sees keys 0..i (the top-left triangle, as the CPU).
 * ATTENTION_PROBS takes two passes over the keys: the running max and
 * sum, then each probability (zeros where masked). Operands and output
 * may be strided views (the layout pass's folded transposes): rows are
 * found through their batch steps and row stride (ir/matmul_view.h).
 *
 * These warp-per-row kernels are the reference: f64, and head sizes
 * above 128, run on them. f32 with head sizes up to 128 (f16/bf16 come
 * staged in f32 by the registry) runs on the tiled kernels
 * (kernels/cuda/attention_tiled.cuh), which
 * share key and value tiles in shared memory between a block's rows and
 * give each lane a column; TFG_ATTENTION_TILED=0
 * selects the reference for them too, and the conformance suite runs
 * both. Neither uses tensor cores. */
#include "kernels/cuda/common.cuh"
extern "C" {
#include "base/env.h"
#include "ir/matmul_view.h"
}
#include "kernels/cuda/attention_tiled.cuh"

using namespace tfg_att; /* WARP, rows_offset and the tiled kernels */

namespace {

constexpr int SLICE = 8;

/* Where each operand's batch matrices and rows lie (ir/matmul_view.h: the
 * layout pass may fold the heads' transposes in), by value. */
struct views {
  tfg_rows_view q, k, v, o;
};

/* for (r over [0, rows)): a warp per row r, spread over the whole grid. */
#define WARP_ROWS(r, rows)                                                                          \
  for (long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WARP; r < (rows);   \
       r += (long long)gridDim.x * blockDim.x / WARP)

/* Query row r of the rows of every batch matrix (tq each): its batch
 * matrix, its index i there, the keys it sees (vis: 0..i when causal). */
struct qrow {
  long long bm, i, vis;
};

__device__ __forceinline__ qrow qrow_of(long long r, long long tq, long long tk, bool causal) {
  long long i = r % tq;
  return {r / tq, i, causal ? (i + 1 < tk ? i + 1 : tk) : tk};
}

/* The dot product of q and k over hd, summed across the warp. */
template <typename T>
__device__ __forceinline__ T warp_dot(const T *q, const T *k, long long hd, int lane) {
  T s = 0;
  for (long long t = lane; t < hd; t += WARP) s += q[t] * k[t];
  for (int o = WARP / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

template <typename T>
__global__ void attention_rows(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                               T *__restrict__ out, views w, long long rows, long long tq, long long tk, long long hd,
                               long long hdv, T scale, bool causal) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow x = qrow_of(r, tq, tk, causal);
    long long bm = x.bm, i = x.i, vis = x.vis;
    const T *qr = q + rows_offset(w.q, bm) + i * w.q.ld, *kb = k + rows_offset(w.k, bm);
    const T *vb = v + rows_offset(w.v, bm);
    T *o = out + rows_offset(w.o, bm) + i * w.o.ld;
    for (long long e0 = 0; e0 < hdv; e0 += WARP * SLICE) {
      double m = -INFINITY, l = 0, acc[SLICE];
      for (int t = 0; t < SLICE; t++) acc[t] = 0;
      for (long long j = 0; j < vis; j++) {
        T s = warp_dot(qr, kb + j * w.k.ld, hd, lane) * scale;
        double sd = (double)s, mn = sd > m ? sd : m;
        double c = exp(m - mn), p = exp(sd - mn); /* c = 0 the first time (m = -inf) */
        l = l * c + p;
        for (int t = 0; t < SLICE; t++) {
          long long e = e0 + lane + (long long)t * WARP;
          acc[t] = acc[t] * c + (e < hdv ? p * (double)vb[j * w.v.ld + e] : 0.0);
        }
        m = mn;
      }
      for (int t = 0; t < SLICE; t++) {
        long long e = e0 + lane + (long long)t * WARP;
        if (e < hdv) o[e] = vis > 0 ? (T)(acc[t] / l) : (T)0;
      }
    }
  }
}

template <typename T>
__global__ void attention_probs_rows(const T *__restrict__ q, const T *__restrict__ k, T *__restrict__ out, views w,
                                     long long rows, long long tq, long long tk, long long hd, T scale, bool causal) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow x = qrow_of(r, tq, tk, causal);
    long long bm = x.bm, i = x.i, vis = x.vis;
    const T *qr = q + rows_offset(w.q, bm) + i * w.q.ld, *kb = k + rows_offset(w.k, bm);
    T *pr = out + rows_offset(w.o, bm) + i * w.o.ld;
    double m = -INFINITY, l = 0;
    for (long long j = 0; j < vis; j++) {
      double sd = (double)(warp_dot(qr, kb + j * w.k.ld, hd, lane) * scale), mn = sd > m ? sd : m;
      l = l * exp(m - mn) + exp(sd - mn);
      m = mn;
    }
    for (long long j = 0; j < tk; j++) {
      double p = 0;
      if (j < vis) p = exp((double)(warp_dot(qr, kb + j * w.k.ld, hd, lane) * scale) - m) / l;
      if (lane == 0) pr[j] = (T)p;
    }
  }
}

/* Whether the tiled kernels take this attention: f32 (f16 and bf16 come
 * staged in f32), head sizes 1..TMAX, unless TFG_ATTENTION_TILED=0. */
bool tiled(tfg_dtype dt, long long hd, long long hdv) {
  long long off;
  return dt == TFG_DTYPE_F32 && hd >= 1 && hd <= TMAX && hdv >= 1 && hdv <= TMAX &&
         !(tfg_env_int("TFG_ATTENTION_TILED", &off) && off == 0);
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
  views w = {g.q, g.k, g.v, g.out};
  long long tq = g.tq, tk = g.tk, hd = g.hd, hdv = g.hdv;
  long long total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  long long rows = total / (probs ? tk : hdv);
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  unsigned blocks = tfg_cuda_grid(rows, TFG_CUDA_THREADS / WARP);
  bool causal = node->attrs.causal;
  if (!probs && tiled(dt, hd, hdv)) {
    tiles tw = {g.q, g.k, g.v, g.out, g.out};
    long long nblocks = rows / tq * ((tq + ROWS - 1) / ROWS);
    attention_tiled<<<tiled_grid(nblocks), ROWS * WARP, tiled_smem((int)hd, (int)hdv, (int)hd, 0), st>>>(
        (const float *)q->data, (const float *)k->data, (const float *)v->data, (float *)out->data, tw, tq, tk,
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

/* ---- the gradient ------------------------------------------------------------ */

/* With P the probabilities, lse_i = log sum_j e^(s_ij) each query row's
 * log-sum-exp (so P_ij = e^(s_ij - lse_i)) and D_i = sum_j P_ij dP_ij,
 * dP = dy v^T:
 *   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij dy_i,
 *   dS_ij = P_ij (dP_ij - D_i).
 * attention_grad_stats takes lse and D of each query row in one pass over
 * its keys (online, as the forward: the running max rescales the sums),
 * into st[2 r] and st[2 r + 1]; then a warp per row of the gradient: a
 * query row for q (over the keys it sees), a key row for k and v (over
 * the queries that see it: i >= j when causal). Sums in double. */
struct gviews {
  tfg_rows_view q, k, v, dy, o;
};

template <typename T>
__global__ void attention_grad_stats(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                     const T *__restrict__ dy, gviews w, double *__restrict__ st, long long rows,
                                     long long tq, long long tk, long long hd, long long hdv, T scale, bool causal,
                                     bool want_d) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow x = qrow_of(r, tq, tk, causal);
    long long bm = x.bm, i = x.i, vis = x.vis;
    const T *qr = q + rows_offset(w.q, bm) + i * w.q.ld, *kb = k + rows_offset(w.k, bm);
    const T *vb = v + rows_offset(w.v, bm), *dyr = dy + rows_offset(w.dy, bm) + i * w.dy.ld;
    double m = -INFINITY, l = 0, acc = 0;
    for (long long j = 0; j < vis; j++) {
      double sd = (double)(warp_dot(qr, kb + j * w.k.ld, hd, lane) * scale), mn = sd > m ? sd : m;
      double c = exp(m - mn), p = exp(sd - mn);
      l = l * c + p;
      if (want_d) acc = acc * c + p * (double)warp_dot(dyr, vb + j * w.v.ld, hdv, lane);
      m = mn;
    }
    if (lane == 0) {
      st[2 * r] = vis > 0 ? m + log(l) : 0;
      st[2 * r + 1] = vis > 0 ? acc / l : 0;
    }
  }
}

/* The lane's dims of a pass from e0 (e = e0 + lane + 32 t < width, t <
 * SLICE): acc[t] += f x[e], and o[e] = acc[t]. */
template <typename T>
__device__ __forceinline__ void slice_add(double *acc, double f, const T *x, long long e0, long long width, int lane) {
  for (int t = 0; t < SLICE; t++) {
    long long e = e0 + lane + (long long)t * WARP;
    if (e < width) acc[t] += f * (double)x[e];
  }
}

template <typename T>
__device__ __forceinline__ void slice_store(T *o, const double *acc, long long e0, long long width, int lane) {
  for (int t = 0; t < SLICE; t++) {
    long long e = e0 + lane + (long long)t * WARP;
    if (e < width) o[e] = (T)acc[t];
  }
}

/* dq: a warp per query row r of rows (batch matrices x tq). */
template <typename T>
__global__ void attention_grad_q(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                 const T *__restrict__ dy, T *__restrict__ out, gviews w, const double *__restrict__ st,
                                 long long rows, long long tq, long long tk, long long hd, long long hdv, T scale,
                                 bool causal) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow x = qrow_of(r, tq, tk, causal);
    long long bm = x.bm, i = x.i, vis = x.vis;
    const T *qr = q + rows_offset(w.q, bm) + i * w.q.ld, *kb = k + rows_offset(w.k, bm);
    const T *vb = v + rows_offset(w.v, bm), *dyr = dy + rows_offset(w.dy, bm) + i * w.dy.ld;
    T *o = out + rows_offset(w.o, bm) + i * w.o.ld;
    double lse = vis > 0 ? st[2 * r] : 0, d = vis > 0 ? st[2 * r + 1] : 0;
    for (long long e0 = 0; e0 < hd; e0 += WARP * SLICE) {
      double acc[SLICE];
      for (int t = 0; t < SLICE; t++) acc[t] = 0;
      for (long long j = 0; j < vis; j++) {
        const T *kj = kb + j * w.k.ld;
        double p = exp((double)(warp_dot(qr, kj, hd, lane) * scale) - lse);
        double ds = p * ((double)warp_dot(dyr, vb + j * w.v.ld, hdv, lane) - d) * (double)scale;
        slice_add(acc, ds, kj, e0, hd, lane);
      }
      slice_store(o, acc, e0, hd, lane);
    }
  }
}

/* dk (DK) or dv: a warp per key row r of rows (batch matrices x tk). */
template <typename T, bool DK>
__global__ void attention_grad_kv(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                  const T *__restrict__ dy, T *__restrict__ out, gviews w,
                                  const double *__restrict__ st, long long rows, long long tq, long long tk,
                                  long long hd, long long hdv, T scale, bool causal) {
  int lane = threadIdx.x % WARP;
  long long width = DK ? hd : hdv;
  WARP_ROWS(r, rows) {
    long long bm = r / tk, j = r % tk;
    const T *qb = q + rows_offset(w.q, bm), *kj = k + rows_offset(w.k, bm) + j * w.k.ld;
    const T *vj = v + rows_offset(w.v, bm) + j * w.v.ld, *dyb = dy + rows_offset(w.dy, bm);
    T *o = out + rows_offset(w.o, bm) + j * w.o.ld;
    for (long long e0 = 0; e0 < width; e0 += WARP * SLICE) {
      double acc[SLICE];
      for (int t = 0; t < SLICE; t++) acc[t] = 0;
      for (long long i = causal ? j : 0; i < tq; i++) {
        const T *qi = qb + i * w.q.ld, *dyi = dyb + i * w.dy.ld;
        const double *sr = st + 2 * (bm * tq + i);
        double p = exp((double)(warp_dot(qi, kj, hd, lane) * scale) - sr[0]);
        double f = DK ? p * ((double)warp_dot(dyi, vj, hdv, lane) - sr[1]) * (double)scale : p;
        slice_add(acc, f, DK ? qi : dyi, e0, width, lane);
      }
      slice_store(o, acc, e0, width, lane);
    }
  }
}

/* Queues the gradient for input part (0 q, 1 k, 2 v) into o (the output
 * rows as w.o says, from the part's first column), after the statistics
 * st: the tiled kernel (f32) or the reference one. */
template <typename T>
void attention_grad_part(cudaStream_t stream, const T *q, const T *k, const T *v, const T *dy, T *o, const gviews &w,
                         const double *st, const tfg_attention_geom &g, int part, long long batches, T scale,
                         bool causal, bool use_tiled) {
  long long qrows = batches * g.tq, krows = batches * g.tk;
  if ((part == 0 ? qrows : krows) == 0) return;
  if (use_tiled) { /* T is float here */
    const float *qf = (const float *)q, *kf = (const float *)k, *vf = (const float *)v, *dyf = (const float *)dy;
    float *of = (float *)o, sc = (float)scale;
    int hd = (int)g.hd, hdv = (int)g.hdv;
    tiles tw = {w.q, w.k, w.v, w.dy, w.o};
    long long qblocks = batches * ((g.tq + ROWS - 1) / ROWS), kblocks = batches * ((g.tk + ROWS - 1) / ROWS);
    size_t smem = tiled_smem(hd, hdv, hd, hdv);
    if (part == 0)
      attention_grad_q_tiled<<<tiled_grid(qblocks), ROWS * WARP, smem, stream>>>(qf, kf, vf, dyf, of, tw, st, g.tq, g.tk,
                                                                                hd, hdv, sc, causal, qblocks);
    else if (part == 1)
      attention_grad_kv_tiled<true><<<tiled_grid(kblocks), ROWS * WARP, smem, stream>>>(
          qf, kf, vf, dyf, of, tw, st, g.tq, g.tk, hd, hdv, sc, causal, kblocks);
    else
      attention_grad_kv_tiled<false><<<tiled_grid(kblocks), ROWS * WARP, smem, stream>>>(
          qf, kf, vf, dyf, of, tw, st, g.tq, g.tk, hd, hdv, sc, causal, kblocks);
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
tfg_status attention_grad_launch(tfg_kernel_ctx *ctx, const tfg_tensor *in, tfg_tensor *out, const gviews &w,
                                 const tfg_attention_geom &g, int which, long long batches, T scale, bool causal) {
  cudaStream_t stream = tfg_cuda_of(ctx)->stream;
  const T *q = (const T *)in[0].data, *k = (const T *)in[1].data, *v = (const T *)in[2].data;
  const T *dy = (const T *)in[3].data;
  T *o = (T *)out->data;
  long long qrows = batches * g.tq;
  double *st = NULL;
  if (qrows > 0) TFG_CUDA_CHECK(ctx, cudaMallocAsync((void **)&st, sizeof(double) * 2 * (size_t)qrows, stream));
  tfg_status s = TFG_OK;
  bool use_tiled = tiled(in[0].dtype, g.hd, g.hdv), want_d = which != 2;
  if (qrows > 0 && use_tiled) { /* T is float here */
    long long qblocks = batches * ((g.tq + ROWS - 1) / ROWS);
    int hd = (int)g.hd, hdv = (int)g.hdv;
    tiles tw = {w.q, w.k, w.v, w.dy, w.o};
    attention_grad_stats_tiled<<<tiled_grid(qblocks), ROWS * WARP, tiled_smem(hd, hdv, hd, hdv), stream>>>(
        (const float *)q, (const float *)k, (const float *)v, (const float *)dy, tw, st, g.tq, g.tk, hd, hdv,
        (float)scale, causal, want_d, qblocks);
  } else if (qrows > 0) {
    attention_grad_stats<T><<<tfg_cuda_grid(qrows, TFG_CUDA_THREADS / WARP), TFG_CUDA_THREADS, 0, stream>>>(
        q, k, v, dy, w, st, qrows, g.tq, g.tk, g.hd, g.hdv, scale, causal, want_d);
  }
  TFG_CUDA_NOTE_LAUNCH(ctx, &s, "attention_grad_stats<<<>>>");
  for (int part = 0; part < 3; part++) {
    if (which != 3 && which != part) continue;
    long long col = which != 3 ? 0 : part == 0 ? 0 : part == 1 ? g.hd : 2 * g.hd;
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
  if (which == 3 && g.tq != g.tk)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention_grad: packed gradients need Tq = Tk, got %lld and %lld",
                           (long long)g.tq, (long long)g.tk);
  long long width = which == 3 ? 2 * g.hd + g.hdv : which == 2 ? g.hdv : g.hd;
  long long batches = total / ((which == 0 ? g.tq : g.tk) * width);
  gviews w = {g.q, g.k, g.v, g.dy, g.out};
  bool causal = node->attrs.causal;
  if (dt == TFG_DTYPE_F32)
    return attention_grad_launch<float>(ctx, in, out, w, g, which, batches, (float)node->attrs.value, causal);
  return attention_grad_launch<double>(ctx, in, out, w, g, which, batches, node->attrs.value, causal);
}

} /* namespace */

extern "C" void tfg_cuda_register_attention(tfg_kernel_fn *table) {
  table[TFG_OP_ATTENTION] = cuda_attention;
  table[TFG_OP_ATTENTION_PROBS] = cuda_attention;
  table[TFG_OP_ATTENTION_GRAD] = cuda_attention_grad;
}
