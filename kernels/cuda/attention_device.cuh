/* kernels/cuda/attention_device.cuh: the attention kernels that
 * kernels/cuda/attention.cu launches (ATTENTION, ATTENTION_PROBS,
 * ATTENTION_GRAD), device code alone: no CUDA runtime call, so that
 * tests/emu/attention.cpp compiles it for the CPU too
 * (tests/emu/cuda_emu.h) and checks it against a double reference on
 * machines without a GPU. Two families: the reference kernels, a warp
 * per row (any dtype and head size), and the tiled ones (f32, head sizes
 * up to TMAX). */
#ifndef TFG_KERNELS_CUDA_ATTENTION_DEVICE_CUH
#define TFG_KERNELS_CUDA_ATTENTION_DEVICE_CUH

#include <math.h>

#include "ir/matmul_view.h"

/* A kernel's dynamic shared memory as name, of element type T. */
#ifndef TFG_CUDA_SHARED
#define TFG_CUDA_SHARED(T, name) extern __shared__ T name[]
#endif

/* #pragma unroll for nvcc's device pass (host compilers warn of it). */
#ifdef __CUDA_ARCH__
#define TFG_ATT_UNROLL _Pragma("unroll")
#else
#define TFG_ATT_UNROLL
#endif

namespace tfg_att {

constexpr int WARP = 32;

/* Where each operand's batch matrices and rows lie (ir/matmul_view.h: the
 * layout pass may fold the heads' transposes in), by value: q, k, v, the
 * output's gradient (the gradient kernels' input) and the output. Every
 * kernel here takes it. */
struct att_views {
  tfg_rows_view q, k, v, dy, o;
};

/* The element offset of batch matrix bm of a rows view (ir/matmul_view.h). */
__device__ __forceinline__ long long rows_offset(const tfg_rows_view &v, long long bm) {
  long long off = 0;
  for (int d = v.nbatch - 1; d >= 0; d--) {
    off += bm % v.dim[d] * v.step[d];
    bm /= v.dim[d];
  }
  return off;
}

/* ---- reference kernels: a warp per row ------------------------------------------
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
 * found through their batch steps and row stride (ir/matmul_view.h). */

constexpr int SLICE = 8;


/* for (r over [0, rows)): a warp per row r, spread over the whole grid. */
#define WARP_ROWS(r, rows)                                                                          \
  for (long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WARP; r < (rows);   \
       r += (long long)gridDim.x * blockDim.x / WARP)

/* Query row r of the rows of every batch matrix (tq each): its batch
 * matrix bm, its index i there, the keys it sees (vis: 0..i when causal),
 * and where the kernel's operands lie for it: q's and dy's row i (qr,
 * dyr), k's and v's batch matrix (kb, vb) and the output's row i (o). An
 * operand the kernel does not take (nullptr) stays nullptr. */
template <typename T>
struct qrow {
  long long bm, i, vis;
  const T *qr, *kb, *vb, *dyr;
  T *o;
};

template <typename T>
__device__ __forceinline__ qrow<T> qrow_of(long long r, long long tq, long long tk, bool causal, const att_views &w,
                                           const T *q, const T *k, const T *v, const T *dy, T *out) {
  qrow<T> x;
  x.bm = r / tq;
  x.i = r % tq;
  x.vis = causal ? (x.i + 1 < tk ? x.i + 1 : tk) : tk;
  x.qr = q + rows_offset(w.q, x.bm) + x.i * w.q.ld;
  x.kb = k + rows_offset(w.k, x.bm);
  x.vb = v ? v + rows_offset(w.v, x.bm) : nullptr;
  x.dyr = dy ? dy + rows_offset(w.dy, x.bm) + x.i * w.dy.ld : nullptr;
  x.o = out ? out + rows_offset(w.o, x.bm) + x.i * w.o.ld : nullptr;
  return x;
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
                               T *__restrict__ out, att_views w, long long rows, long long tq, long long tk, long long hd,
                               long long hdv, T scale, bool causal) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow<T> x = qrow_of<T>(r, tq, tk, causal, w, q, k, v, nullptr, out);
    for (long long e0 = 0; e0 < hdv; e0 += WARP * SLICE) {
      double m = -INFINITY, l = 0, acc[SLICE];
      for (int t = 0; t < SLICE; t++) acc[t] = 0;
      for (long long j = 0; j < x.vis; j++) {
        T s = warp_dot(x.qr, x.kb + j * w.k.ld, hd, lane) * scale;
        double sd = (double)s, mn = sd > m ? sd : m;
        double c = exp(m - mn), p = exp(sd - mn); /* c = 0 the first time (m = -inf) */
        l = l * c + p;
        for (int t = 0; t < SLICE; t++) {
          long long e = e0 + lane + (long long)t * WARP;
          acc[t] = acc[t] * c + (e < hdv ? p * (double)x.vb[j * w.v.ld + e] : 0.0);
        }
        m = mn;
      }
      for (int t = 0; t < SLICE; t++) {
        long long e = e0 + lane + (long long)t * WARP;
        if (e < hdv) x.o[e] = x.vis > 0 ? (T)(acc[t] / l) : (T)0;
      }
    }
  }
}

template <typename T>
__global__ void attention_probs_rows(const T *__restrict__ q, const T *__restrict__ k, T *__restrict__ out, att_views w,
                                     long long rows, long long tq, long long tk, long long hd, T scale, bool causal) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow<T> x = qrow_of<T>(r, tq, tk, causal, w, q, k, nullptr, nullptr, out);
    double m = -INFINITY, l = 0;
    for (long long j = 0; j < x.vis; j++) {
      double sd = (double)(warp_dot(x.qr, x.kb + j * w.k.ld, hd, lane) * scale), mn = sd > m ? sd : m;
      l = l * exp(m - mn) + exp(sd - mn);
      m = mn;
    }
    for (long long j = 0; j < tk; j++) {
      double p = 0;
      if (j < x.vis) p = exp((double)(warp_dot(x.qr, x.kb + j * w.k.ld, hd, lane) * scale) - m) / l;
      if (lane == 0) x.o[j] = (T)p;
    }
  }
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
template <typename T>
__global__ void attention_grad_stats(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                     const T *__restrict__ dy, att_views w, double *__restrict__ st, long long rows,
                                     long long tq, long long tk, long long hd, long long hdv, T scale, bool causal,
                                     bool want_d) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow<T> x = qrow_of<T>(r, tq, tk, causal, w, q, k, v, dy, nullptr);
    double m = -INFINITY, l = 0, acc = 0;
    for (long long j = 0; j < x.vis; j++) {
      double sd = (double)(warp_dot(x.qr, x.kb + j * w.k.ld, hd, lane) * scale), mn = sd > m ? sd : m;
      double c = exp(m - mn), p = exp(sd - mn);
      l = l * c + p;
      if (want_d) acc = acc * c + p * (double)warp_dot(x.dyr, x.vb + j * w.v.ld, hdv, lane);
      m = mn;
    }
    if (lane == 0) {
      st[2 * r] = x.vis > 0 ? m + log(l) : 0;
      st[2 * r + 1] = x.vis > 0 ? acc / l : 0;
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
                                 const T *__restrict__ dy, T *__restrict__ out, att_views w, const double *__restrict__ st,
                                 long long rows, long long tq, long long tk, long long hd, long long hdv, T scale,
                                 bool causal) {
  int lane = threadIdx.x % WARP;
  WARP_ROWS(r, rows) {
    qrow<T> x = qrow_of<T>(r, tq, tk, causal, w, q, k, v, dy, out);
    double lse = x.vis > 0 ? st[2 * r] : 0, d = x.vis > 0 ? st[2 * r + 1] : 0;
    for (long long e0 = 0; e0 < hd; e0 += WARP * SLICE) {
      double acc[SLICE];
      for (int t = 0; t < SLICE; t++) acc[t] = 0;
      for (long long j = 0; j < x.vis; j++) {
        const T *kj = x.kb + j * w.k.ld;
        double p = exp((double)(warp_dot(x.qr, kj, hd, lane) * scale) - lse);
        double ds = p * ((double)warp_dot(x.dyr, x.vb + j * w.v.ld, hdv, lane) - d) * (double)scale;
        slice_add(acc, ds, kj, e0, hd, lane);
      }
      slice_store(x.o, acc, e0, hd, lane);
    }
  }
}

/* dk (DK) or dv: a warp per key row r of rows (batch matrices x tk). */
template <typename T, bool DK>
__global__ void attention_grad_kv(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                  const T *__restrict__ dy, T *__restrict__ out, att_views w,
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

/* ---- tiled kernels (f32, head sizes up to 128) -------------------------------------
 * The warp-per-row reference kernels (attention.cu) read every key (and value) row from
 * global memory once per query row, and reduce each score across the
 * warp with shuffles. These take a block of ROWS rows (a warp each) that
 * share each tile of COLS columns, staged in shared memory, and give a
 * column to each lane: lane j forms the whole dot product of its column
 * with the warp's row (both in shared memory: the row broadcast, the
 * tile's rows an odd pitch apart so the 32 lanes read 32 banks), the tile's
 * max and sum take one butterfly per tile, and the weighted sum over the
 * tile's columns (P v, dS k, ...) has each lane own output dims lane,
 * lane + 32, ... as before. So every lane does useful FMAs, and each
 * tile crosses global memory once per ROWS rows. Sums run in f32 (the
 * reference kernels' in double): the order differs from the CPU's, within
 * the conformance suite's NN tolerance. TFG_ATTENTION_TILED=0 runs the
 * reference kernels instead, to compare. */
constexpr int ROWS = 8, COLS = 32, TMAX = 128;

__device__ __forceinline__ float warp_max(float x) {
  for (int o = WARP / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = WARP / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/* A tile's row pitch in shared memory: odd, so the 32 lanes reading one
 * element of each of 32 rows (dot_col: lane j reads row j) hit 32
 * different banks (an even pitch p makes gcd(p, 32) lanes share one). */
__host__ __device__ __forceinline__ int pitch(int width) { return width | 1; }

/* Rows c0 .. c0 + COLS - 1 of a matrix whose rows are ld apart from base
 * (those from `limit` on as zeros) into tile[COLS][pitch(width)], by the
 * whole block. */
__device__ __forceinline__ void load_cols(float *tile, const float *base, long long ld, long long c0, long long limit,
                                          int width) {
  for (int x = threadIdx.x; x < COLS * width; x += blockDim.x) {
    int r = x / width, d = x % width;
    tile[r * pitch(width) + d] = c0 + r < limit ? base[(c0 + r) * ld + d] : 0.0f;
  }
}

/* Rows r0 .. r0 + ROWS - 1 (from `limit` on: zeros) into rows[ROWS][width]. */
__device__ __forceinline__ void load_rows(float *rows, const float *base, long long ld, long long r0, long long limit,
                                          int width) {
  for (int x = threadIdx.x; x < ROWS * width; x += blockDim.x) {
    int r = x / width, d = x % width;
    rows[x] = r0 + r < limit ? base[(r0 + r) * ld + d] : 0.0f;
  }
}

/* sum over d < width of a[d] * t[d]: a row (broadcast) against a tile column. */
__device__ __forceinline__ float dot_col(const float *a, const float *t, int width) {
  float s = 0;
  for (int d = 0; d < width; d++) s += a[d] * t[d];
  return s;
}

/* acc[u] += sum over c < n of w[c] * tile[c][lane + 32 u] (u while lane + 32 u < width). */
__device__ __forceinline__ void add_weighted(float *acc, const float *w, const float *tile, int n, int width,
                                             int lane) {
TFG_ATT_UNROLL
  for (int u = 0; u < TMAX / WARP; u++) {
    int e = lane + u * WARP;
    if (e >= width) break;
    float a = acc[u];
    for (int c = 0; c < n; c++) a += w[c] * tile[c * pitch(width) + e];
    acc[u] = a;
  }
}

/* Stages tile c0 of two operands, by the whole block between two barriers
 * (before: the readers of the last tile are done; after: all of this one
 * is in): rows c0 .. c0 + COLS - 1 of a (rows av.ld apart, width wa) into
 * ta and, with_b, of b into tb (bv.ld, wb), those from `limit` on as
 * zeros (load_cols). Returns how many of them are below limit. A flag,
 * not a null b: the compiler cannot drop a test of b, and with one in the
 * loop ptxas spilled registers in dv's kernel (sm_80). */
__device__ __forceinline__ int load_tiles(float *ta, const float *a, const tfg_rows_view &av, int wa, float *tb,
                                          const float *b, const tfg_rows_view &bv, int wb, long long c0,
                                          long long limit, bool with_b = true) {
  __syncthreads();
  load_cols(ta, a, av.ld, c0, limit, wa);
  if (with_b) load_cols(tb, b, bv.ld, c0, limit, wb);
  __syncthreads();
  return limit - c0 < COLS ? (int)(limit - c0) : COLS;
}

/* Where a tiled kernel's operands sit in its dynamic shared memory, as
 * tiled_smem(hd, hdv, hd, d) counts it: first the two tiles of COLS rows
 * that the block's warps share (each row pitch() apart), then the block's
 * own ROWS rows of two operands (hd and d wide), then each warp's COLS
 * weights, ps[ROWS][COLS]. A block of query rows (the forward pass, the
 * statistics, dq) takes k and v in tiles and has its rows of q and dy; a
 * block of key rows (dk, dv: key_rows) takes q and dy in tiles and has
 * its rows of k and v. Set by a constructor: returned from a function
 * instead, the pointers lose what nvcc knows of their alignment, and it
 * stops pairing the loads of the weights. */
struct tiled_mem {
  float *ks, *vs, *qs, *dys, *ps;

  __device__ __forceinline__ tiled_mem(int hd, int hdv, int d, bool key_rows) {
    TFG_CUDA_SHARED(float, sm);
    float *ta = sm, *tb = ta + COLS * pitch(hd), *ra = tb + COLS * pitch(hdv), *rb = ra + ROWS * hd;
    ks = key_rows ? ra : ta;
    vs = key_rows ? rb : tb;
    qs = key_rows ? ta : ra;
    dys = key_rows ? tb : rb;
    ps = rb + ROWS * d;
  }
};

/* Block b of query rows (ROWS of them, from r0, in batch matrix bm): the
 * warp's row i, the keys the block's rows see (nk), the keys row i sees
 * (vis: 0 for a row past tq), and the batch matrices of k and v its key
 * tiles come from (kb, vb). */
struct qblock {
  long long bm, r0, i, nk, vis;
  const float *kb, *vb;
};

__device__ __forceinline__ qblock qblock_of(long long b, const float *k, const float *v, const att_views &w,
                                            long long tq, long long tk, bool causal, int warp) {
  qblock x;
  long long nblk = (tq + ROWS - 1) / ROWS;
  x.bm = b / nblk;
  x.r0 = b % nblk * ROWS;
  x.i = x.r0 + warp;
  long long last = (x.r0 + ROWS < tq ? x.r0 + ROWS : tq) - 1;
  x.nk = causal ? (last + 1 < tk ? last + 1 : tk) : tk;
  x.vis = x.i < tq ? (causal ? (x.i + 1 < tk ? x.i + 1 : tk) : tk) : 0;
  x.kb = k + rows_offset(w.k, x.bm);
  x.vb = v + rows_offset(w.v, x.bm);
  return x;
}

/* Stages query block x's rows, by the whole block once the previous
 * block's readers are done (a barrier): q's into sh.qs and, where dy is
 * not null, dy's into sh.dys. */
__device__ __forceinline__ void load_qblock(const tiled_mem &sh, const qblock &x, const float *q, const float *dy,
                                            const att_views &w, long long tq, int hd, int hdv) {
  __syncthreads();
  load_rows(sh.qs, q + rows_offset(w.q, x.bm), w.q.ld, x.r0, tq, hd);
  if (dy) load_rows(sh.dys, dy + rows_offset(w.dy, x.bm), w.dy.ld, x.r0, tq, hdv);
}

/* o[e] = acc[u] for the lane's dims e = lane + 32 u < width. */
__device__ __forceinline__ void store_dims(float *o, const float *acc, int width, int lane) {
TFG_ATT_UNROLL
  for (int u = 0; u < TMAX / WARP; u++) {
    int e = lane + u * WARP;
    if (e < width) o[e] = acc[u];
  }
}

/* The forward pass: a block per ROWS query rows of one batch matrix. */
__global__ void __launch_bounds__(ROWS *WARP) attention_tiled(const float *__restrict__ q, const float *__restrict__ k,
                                                              const float *__restrict__ v, float *__restrict__ out,
                                                              att_views w, long long tq, long long tk, int hd, int hdv,
                                                              float scale, bool causal, long long blocks) {
  tiled_mem sh(hd, hdv, 0, false);
  int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    qblock x = qblock_of(b, k, v, w, tq, tk, causal, warp);
    load_qblock(sh, x, q, nullptr, w, tq, hd, hdv);
    float m = -INFINITY, l = 0, acc[TMAX / WARP] = {0, 0, 0, 0};
    for (long long c0 = 0; c0 < x.nk; c0 += COLS) {
      int n = load_tiles(sh.ks, x.kb, w.k, hd, sh.vs, x.vb, w.v, hdv, c0, x.nk);
      if (c0 >= x.vis) continue; /* warp-uniform: this row sees none of the tile */
      long long j = c0 + lane;
      float sc = j < x.vis ? dot_col(sh.qs + warp * hd, sh.ks + lane * pitch(hd), hd) * scale : -INFINITY;
      float mn = fmaxf(m, warp_max(sc)), c = expf(m - mn); /* c = 0 the first time (m = -inf) */
      float pj = j < x.vis ? expf(sc - mn) : 0.0f;
      l = l * c + warp_sum(pj);
      sh.ps[warp * COLS + lane] = pj;
      __syncwarp();
TFG_ATT_UNROLL
      for (int u = 0; u < TMAX / WARP; u++) acc[u] *= c;
      add_weighted(acc, sh.ps + warp * COLS, sh.vs, n, hdv, lane);
      __syncwarp();
      m = mn;
    }
    if (x.i < tq) {
TFG_ATT_UNROLL
      for (int u = 0; u < TMAX / WARP; u++) acc[u] = x.vis > 0 ? acc[u] / l : 0.0f;
      store_dims(out + rows_offset(w.o, x.bm) + x.i * w.o.ld, acc, hdv, lane);
    }
  }
}

/* The gradient's row statistics (lse, D) of ROWS query rows per block, as
 * attention_grad_stats, into st. */
__global__ void __launch_bounds__(ROWS *WARP) attention_grad_stats_tiled(
    const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
    const float *__restrict__ dy, att_views w, double *__restrict__ st, long long tq, long long tk, int hd, int hdv,
    float scale, bool causal, bool want_d, long long blocks) {
  tiled_mem sh(hd, hdv, hdv, false);
  int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    qblock x = qblock_of(b, k, v, w, tq, tk, causal, warp);
    load_qblock(sh, x, q, want_d ? dy : nullptr, w, tq, hd, hdv);
    float m = -INFINITY, l = 0, acc = 0;
    for (long long c0 = 0; c0 < x.nk; c0 += COLS) {
      load_tiles(sh.ks, x.kb, w.k, hd, sh.vs, x.vb, w.v, hdv, c0, x.nk, want_d);
      if (c0 >= x.vis) continue;
      long long j = c0 + lane;
      float sc = j < x.vis ? dot_col(sh.qs + warp * hd, sh.ks + lane * pitch(hd), hd) * scale : -INFINITY;
      float mn = fmaxf(m, warp_max(sc)), c = expf(m - mn), pj = j < x.vis ? expf(sc - mn) : 0.0f;
      l = l * c + warp_sum(pj);
      if (want_d) acc = acc * c + warp_sum(pj * dot_col(sh.dys + warp * hdv, sh.vs + lane * pitch(hdv), hdv));
      m = mn;
    }
    if (x.i < tq && lane == 0) {
      long long r = x.bm * tq + x.i;
      st[2 * r] = x.vis > 0 ? (double)m + log((double)l) : 0;
      st[2 * r + 1] = x.vis > 0 ? (double)acc / (double)l : 0;
    }
  }
}

/* dq: a block per ROWS query rows; per key tile, lane j's
 * dS_ij = P_ij (dy_i . v_j - D_i) scale, then dq_i += sum_j dS_ij k_j. */
__global__ void __launch_bounds__(ROWS *WARP) attention_grad_q_tiled(
    const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
    const float *__restrict__ dy, float *__restrict__ out, att_views w, const double *__restrict__ st, long long tq,
    long long tk, int hd, int hdv, float scale, bool causal, long long blocks) {
  tiled_mem sh(hd, hdv, hdv, false);
  int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    qblock x = qblock_of(b, k, v, w, tq, tk, causal, warp);
    long long r = x.bm * tq + x.i;
    float lse = x.vis > 0 ? (float)st[2 * r] : 0, dd = x.vis > 0 ? (float)st[2 * r + 1] : 0;
    load_qblock(sh, x, q, dy, w, tq, hd, hdv);
    float acc[TMAX / WARP] = {0, 0, 0, 0};
    for (long long c0 = 0; c0 < x.nk; c0 += COLS) {
      int n = load_tiles(sh.ks, x.kb, w.k, hd, sh.vs, x.vb, w.v, hdv, c0, x.nk);
      if (c0 >= x.vis) continue;
      long long j = c0 + lane;
      float dsj = 0;
      if (j < x.vis) {
        float pj = expf(dot_col(sh.qs + warp * hd, sh.ks + lane * pitch(hd), hd) * scale - lse);
        dsj = pj * (dot_col(sh.dys + warp * hdv, sh.vs + lane * pitch(hdv), hdv) - dd) * scale;
      }
      sh.ps[warp * COLS + lane] = dsj;
      __syncwarp();
      add_weighted(acc, sh.ps + warp * COLS, sh.ks, n, hd, lane);
      __syncwarp();
    }
    if (x.i < tq) store_dims(out + rows_offset(w.o, x.bm) + x.i * w.o.ld, acc, hd, lane);
  }
}

/* dk (DK) or dv: a block per ROWS key rows, over tiles of COLS query rows
 * (from the block's first key's index on when causal: no earlier query
 * sees it);
 * lane i's P_ij = exp(q_i . k_j scale - lse_i) (0 when i < j, causal),
 * then dv_j += sum_i P_ij dy_i, or dk_j += sum_i dS_ij q_i. */
template <bool DK>
__global__ void __launch_bounds__(ROWS *WARP) attention_grad_kv_tiled(
    const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
    const float *__restrict__ dy, float *__restrict__ out, att_views w, const double *__restrict__ st, long long tq,
    long long tk, int hd, int hdv, float scale, bool causal, long long blocks) {
  tiled_mem sh(hd, hdv, hdv, true);
  int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, width = DK ? hd : hdv;
  long long nblk = (tk + ROWS - 1) / ROWS;
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    long long bm = b / nblk, r0 = b % nblk * ROWS, j = r0 + warp;
    const float *qb = q + rows_offset(w.q, bm), *dyb = dy + rows_offset(w.dy, bm);
    __syncthreads();
    load_rows(sh.ks, k + rows_offset(w.k, bm), w.k.ld, r0, tk, hd);
    if (DK) load_rows(sh.vs, v + rows_offset(w.v, bm), w.v.ld, r0, tk, hdv);
    float acc[TMAX / WARP] = {0, 0, 0, 0};
    for (long long c0 = causal ? r0 : 0; c0 < tq; c0 += COLS) { /* causal: no query before r0 sees these keys */
      int n = load_tiles(sh.qs, qb, w.q, hd, sh.dys, dyb, w.dy, hdv, c0, tq);
      if (j >= tk) continue; /* warp-uniform */
      long long i = c0 + lane;
      float f = 0;
      if (i < tq && (!causal || i >= j)) {
        const double *sr = st + 2 * (bm * tq + i);
        float pij = expf(dot_col(sh.ks + warp * hd, sh.qs + lane * pitch(hd), hd) * scale - (float)sr[0]);
        f = DK ? pij * (dot_col(sh.vs + warp * hdv, sh.dys + lane * pitch(hdv), hdv) - (float)sr[1]) * scale : pij;
      }
      sh.ps[warp * COLS + lane] = f;
      __syncwarp();
      add_weighted(acc, sh.ps + warp * COLS, DK ? sh.qs : sh.dys, n, width, lane);
      __syncwarp();
    }
    if (j < tk) store_dims(out + rows_offset(w.o, bm) + j * w.o.ld, acc, width, lane);
  }
}

/* Shared memory of a tiled kernel: two tiles of COLS rows (widths a and
 * b, each row pitch() apart), rows of ROWS x (c + d), and ROWS x COLS
 * weights (tiled_mem lays them out). */
__host__ __device__ inline size_t tiled_smem(int a, int b, int c, int d) {
  return sizeof(float) * ((size_t)COLS * (pitch(a) + pitch(b)) + (size_t)ROWS * (c + d + COLS));
}

} /* namespace tfg_att */

#endif
