/* kernels/cuda/attention.cu: ATTENTION and ATTENTION_PROBS on a CUDA
 * device, the GPU twin of kernels/cpu/attention.c.
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
 * Correct, not fast: this is the reference the GPU side is checked
 * against (tests/gpu/conformance.c) until a tiled flash kernel (shared
 * memory tiles of K and V, tensor cores) replaces it. f16/bf16 are
 * staged in f32 by the registry. */
#include "kernels/cuda/common.cuh"
extern "C" {
#include "ir/matmul_view.h"
}

namespace {

constexpr int WARP = 32, SLICE = 8;

/* Where each operand's batch matrices and rows lie (ir/matmul_view.h: the
 * layout pass may fold the heads' transposes in), by value. */
struct views {
  tfg_rows_view q, k, v, o;
};

__device__ __forceinline__ long long rows_offset(const tfg_rows_view &v, long long bm) {
  long long off = 0;
  for (int d = v.nbatch - 1; d >= 0; d--) {
    off += bm % v.dim[d] * v.step[d];
    bm /= v.dim[d];
  }
  return off;
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
  long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
  long long nwarps = (long long)gridDim.x * blockDim.x / WARP;
  for (long long r = warp; r < rows; r += nwarps) {
    long long bm = r / tq, i = r % tq;
    long long vis = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
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
  long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
  long long nwarps = (long long)gridDim.x * blockDim.x / WARP;
  for (long long r = warp; r < rows; r += nwarps) {
    long long bm = r / tq, i = r % tq;
    long long vis = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
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
  const char *bad = tfg_attention_geometry(node, &q->shape, &k->shape, probs ? NULL : &v->shape, &out->shape, &g);
  if (bad) return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "attention: %s", bad);
  views w = {g.q, g.k, g.v, g.out};
  long long tq = g.tq, tk = g.tk, hd = g.hd, hdv = g.hdv;
  long long total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  long long rows = total / (probs ? tk : hdv);
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  unsigned blocks = tfg_cuda_grid(rows, TFG_CUDA_THREADS / WARP);
  bool causal = node->attrs.causal;
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

} /* namespace */

extern "C" void tfg_cuda_register_attention(tfg_kernel_fn *table) {
  table[TFG_OP_ATTENTION] = cuda_attention;
  table[TFG_OP_ATTENTION_PROBS] = cuda_attention;
}
