/* kernels/cuda/nn.cu: the neural-network ops and their hand-written
 * gradients on the GPU: softmax, log_softmax, cross_entropy, mse,
 * layer_norm, embedding, one_hot, accuracy (kernels/cpu/nn.c; dropout is
 * elementwise.cu's) and relu_grad, gelu_grad, cross_entropy_grad,
 * layer_norm_grad, embedding_grad (kernels/cpu/grad.c; the conv and pool
 * gradients are conv.cu's). Same dtypes as the CPU kernels (f32 and f64
 * data, i32 and i64 ids and labels), same checks before launching, same
 * formulas, and the same precision choices. f16 and bf16: embedding
 * copies 16-bit rows natively; every other op here is f32/f64 only and
 * runs staged for them (kernels/cuda/registry.cu, half.cu: f32 copies of
 * the operands, rounded back once), as the CPU stages them:
 *
 *  - Every per-row or scalar sum (softmax denominators, layer_norm
 *    moments, the losses' means, accuracy's count) accumulates in double
 *    for both dtypes, as the CPU does; results are rounded once to T.
 *    exp of f32 data is expf in f32 (the CPU's EXPT), then summed in double.
 *  - Per-row work ("row kernels"): a row goes to one warp (length <= 1024)
 *    or one 256-thread block; lanes stride over the row, a fixed
 *    shuffle/shared-memory tree combines, and the result is broadcast to
 *    the group. No atomics in any sum: the order is fixed by the shape, so
 *    results are reproducible (they differ from the CPU's in the last bits
 *    at most, the association being different).
 *  - The scalar losses (cross_entropy, mse, accuracy) write per-row (or,
 *    for mse, per-32768-element chunk) double partials to stream-ordered
 *    scratch (cudaMallocAsync/cudaFreeAsync), then one 1024-thread block
 *    sums them in a fixed tree and stores total / N (NaN for N = 0).
 *
 * Layouts (row-major, as the CPU):
 *  - softmax/log_softmax over attrs.axis: x viewed as [outer, len, inner].
 *    inner == 1 (the last axis): contiguous rows, row kernels. inner > 1:
 *    32 x 8 blocks, x over 32 neighbouring inner positions (coalesced),
 *    y splitting the len elements of each line, trees over y in shared
 *    memory. The max is taken with `v > m` (NaN-ignoring, as the CPU's
 *    loop); a NaN anywhere makes the row's sum NaN, so rows with a NaN
 *    come out all NaN on both.
 *  - cross_entropy, accuracy, cross_entropy_grad: logits [N, C], one row per
 *    sample. layer_norm(_grad): rows of the last axis, D = dim[rank-1].
 *  - embedding, one_hot, embedding_grad: one row of D (or n) per id; 32 x 8
 *    blocks, x over the row's columns, y over ids (or table rows).
 *
 * Data errors (an embedding id outside [0, V), a cross_entropy label
 * outside [0, C)) are found on the device: the first one is recorded in
 * the device error flag (tfg_cuda_ctx.error: atomicCAS of the code from 0,
 * then node = ctx->node, value, limit); the kernel then writes no element out of
 * bounds and reads nothing out of bounds (the bad row gets 0 in embedding,
 * NaN in the losses and gradients). Which bad entry is reported may not be
 * the first by position, as the CPU's is. one_hot and accuracy treat an
 * out-of-range id/label as the CPU does: not an error (zero row / a wrong
 * row).
 *
 * embedding_grad is deterministic and bit-identical to the CPU: the ids
 * are stably radix-sorted by row (cub::DeviceRadixSort, keys = row, values
 * = position), so each table row's contributions appear in order of
 * appearance; a row is then summed by the threads that own it, in T from
 * 0, in that order, exactly the CPU's `row[c] += src[c]` sequence. No
 * atomics on floats. Cost: a sort of the ids and a serial sum per (row,
 * column), so a row hit by very many ids (a padding id) is slow.
 *
 * 64-bit indexing throughout; grids are capped and kernels loop
 * grid-stride. Empty tensors launch nothing, except where the CPU would
 * still check ids or labels (then only the check runs), and the scalar
 * losses, which store NaN (or accuracy's 0 when C = 0). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh" /* with tfg's C headers, in C linkage */

namespace {

enum {
  THREADS = 256,         /* block size of every kernel but mean_finish */
  WARP = 32,
  WARP_MAX = 1024,       /* rows up to this long take one warp, longer ones a block */
  CHUNK = 32768,         /* mse: elements per partial */
  FINISH_THREADS = 1024, /* mean_finish: one block */
  TX = 32,               /* 2-D blocks: TX x TY */
  TY = THREADS / TX,
};
const unsigned FULL = 0xffffffffu;
constexpr double SQRT1_2 = 0.70710678118654752440;    /* M_SQRT1_2, as grad.c */
constexpr double TWO_SQRTPI = 1.12837916709551257390; /* M_2_SQRTPI */

/* ---- device helpers ------------------------------------------------------- */

__device__ __forceinline__ float ex(float v) { return expf(v); } /* the CPU's EXPT */
__device__ __forceinline__ double ex(double v) { return exp(v); }

template <class T> __device__ __forceinline__ T lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -INFINITY; }
template <> __device__ __forceinline__ double lowest<double>() { return -(double)INFINITY; }

/* Element i of an i32 or i64 id tensor (tfg_cpu_id_at). */
__device__ __forceinline__ long long id_at(const void *ids, bool i64, long long i) {
  return i64 ? ((const long long *)ids)[i] : (long long)((const int32_t *)ids)[i];
}

/* Combiners: A, combine(a, b), and identity() where a loop starts from it. */
struct SumD {
  typedef double A;
  __device__ static A combine(A a, A b) { return a + b; }
};

/* The max the CPU loops take (`if (x > m) m = x`): NaNs do not move it. */
template <class T> struct MaxT {
  typedef T A;
  __device__ static A identity() { return lowest<T>(); }
  __device__ static A combine(A a, A b) { return b > a ? b : a; }
};

template <class T> struct ArgV {
  T v;
  long long i;
};

/* argmax, order-independent (so any tree gives the sequential answer):
 * a NaN beats every number, then the larger value, and ties (two NaNs
 * included) go to the smaller index: the first maximum, the first NaN. */
template <class T> struct ArgT {
  typedef ArgV<T> A;
  __device__ static A identity() {
    A a;
    a.v = lowest<T>();
    a.i = INT64_MAX;
    return a;
  }
  __device__ static A combine(A a, A b) {
    bool an = a.v != a.v, bn = b.v != b.v;
    if (an != bn) return an ? a : b;
    if (!an) {
      if (b.v > a.v) return b;
      if (a.v > b.v) return a;
    }
    return b.i < a.i ? b : a;
  }
};

template <class A> __device__ __forceinline__ A shfl_down(A v, int d) { return __shfl_down_sync(FULL, v, d); }
template <class A> __device__ __forceinline__ A shfl0(A v) { return __shfl_sync(FULL, v, 0); }
template <class T> __device__ __forceinline__ ArgV<T> shfl_down(ArgV<T> v, int d) {
  ArgV<T> r;
  r.v = __shfl_down_sync(FULL, v.v, d);
  r.i = __shfl_down_sync(FULL, v.i, d);
  return r;
}
template <class T> __device__ __forceinline__ ArgV<T> shfl0(ArgV<T> v) {
  ArgV<T> r;
  r.v = __shfl_sync(FULL, v.v, 0);
  r.i = __shfl_sync(FULL, v.i, 0);
  return r;
}

/* Reduces v over the warp (all 32 lanes take part): lane 0 has it. */
template <class Op> __device__ __forceinline__ typename Op::A warp_reduce(typename Op::A v) {
  for (int d = WARP / 2; d > 0; d >>= 1) v = Op::combine(v, shfl_down(v, d));
  return v;
}

/* Reduces v over a group of G threads (G = 32: a warp; G = NT: the whole
 * block of NT threads) and returns the result to every thread of the
 * group. The tree is fixed; every thread gets the same bits. The block
 * form ends with a barrier, so it may be called again at once. */
template <class Op, int G, int NT = THREADS> __device__ __forceinline__ typename Op::A group_all(typename Op::A v) {
  typedef typename Op::A A;
  v = warp_reduce<Op>(v);
  if constexpr (G == WARP) {
    return shfl0(v);
  } else {
    __shared__ A part[NT / WARP];
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = v;
    __syncthreads();
    A r = part[0];
    for (int w = 1; w < NT / WARP; w++) r = Op::combine(r, part[w]);
    __syncthreads();
    return r;
  }
}

/* The row loop of a row kernel: groups of G threads, one row each at a
 * time; the bound is uniform over a group, as group_all needs. */
#define FOR_ROWS(G, r, rows)                                                                   \
  for (long long r = (long long)blockIdx.x * (THREADS / (G)) + threadIdx.x / (G); r < (rows); \
       r += (long long)gridDim.x * (THREADS / (G)))

/* A 2-D (TX x TY) block's loop over rows, one row per thread row. */
#define FOR_ROWS_2D(r, rows) \
  for (long long r = (long long)blockIdx.x * TY + threadIdx.x / TX; r < (rows); r += (long long)gridDim.x * TY)

/* The softmax statistics of row xr[0..len) over a group of G lanes (the
 * CPU's loops): m = the max (`v > m`, NaN-ignoring), returned in *m, and
 * the sum in double of ex(x - m) (ex in T), returned; every lane of the
 * group gets both. */
template <class T, int G>
__device__ __forceinline__ double row_softmax_stats(const T *xr, long long len, int lane, T *m) {
  T mx = MaxT<T>::identity();
  for (long long t = lane; t < len; t += G) mx = MaxT<T>::combine(mx, xr[t]);
  mx = group_all<MaxT<T>, G>(mx);
  double sum = 0;
  for (long long t = lane; t < len; t += G) sum += (double)ex(xr[t] - mx);
  *m = mx;
  return group_all<SumD, G>(sum);
}

/* ---- softmax, log_softmax ---------------------------------------------------- */

/* inner == 1: rows x[r * len, (r + 1) * len). Per row (CPU: softmax_f32):
 * m = max, sum = sum in double of ex(x - m) (ex in T), then
 *   softmax     y = (T)((double)ex(x - m) / sum)  (as e * (1.0 / sum))
 *   log_softmax y = (T)((double)(x - m) - log(sum)). */
template <class T, bool LOG, int G>
__global__ void __launch_bounds__(THREADS)
softmax_rows(const T *__restrict__ x, T *__restrict__ y, long long rows, long long len) {
  const int lane = threadIdx.x % G;
  FOR_ROWS(G, r, rows) {
    const T *xr = x + r * len;
    T *yr = y + r * len;
    T m;
    double sum = row_softmax_stats<T, G>(xr, len, lane, &m);
    if (LOG) {
      double ls = log(sum);
      for (long long t = lane; t < len; t += G) yr[t] = (T)((double)(xr[t] - m) - ls);
    } else {
      double inv = 1.0 / sum;
      for (long long t = lane; t < len; t += G) yr[t] = (T)((double)ex(xr[t] - m) * inv);
    }
  }
}

/* inner > 1: line (o, i) is x[o * len * inner + t * inner + i], t < len.
 * A block takes TX neighbouring i of one o; thread row ty takes t = ty,
 * ty + TY, ...; the max and the sum go through shared-memory trees over
 * ty (fixed), broadcast from row 0. */
template <class T, bool LOG>
__global__ void __launch_bounds__(THREADS)
softmax_cols(const T *__restrict__ x, T *__restrict__ y, long long outer, long long len, long long inner) {
  __shared__ T smax[TY][TX];
  __shared__ double ssum[TY][TX];
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const long long tiles = (inner + TX - 1) / TX, items = outer * tiles;
  for (long long it = blockIdx.x; it < items; it += gridDim.x) {
    long long o = it / tiles, i = it % tiles * TX + tx;
    bool on = i < inner;
    const T *xl = x + o * len * inner + (on ? i : 0);
    T *yl = y + o * len * inner + (on ? i : 0);
    T m = MaxT<T>::identity();
    if (on)
      for (long long t = ty; t < len; t += TY) m = MaxT<T>::combine(m, xl[t * inner]);
    smax[ty][tx] = m;
    __syncthreads();
    for (int h = TY / 2; h > 0; h >>= 1) {
      if (ty < h) smax[ty][tx] = MaxT<T>::combine(smax[ty][tx], smax[ty + h][tx]);
      __syncthreads();
    }
    m = smax[0][tx];
    double sum = 0;
    if (on)
      for (long long t = ty; t < len; t += TY) sum += (double)ex(xl[t * inner] - m);
    ssum[ty][tx] = sum;
    __syncthreads();
    for (int h = TY / 2; h > 0; h >>= 1) {
      if (ty < h) ssum[ty][tx] += ssum[ty + h][tx];
      __syncthreads();
    }
    sum = ssum[0][tx];
    __syncthreads(); /* everyone has read row 0 before the next item writes */
    if (!on) continue;
    if (LOG) {
      double ls = log(sum);
      for (long long t = ty; t < len; t += TY) yl[t * inner] = (T)((double)(xl[t * inner] - m) - ls);
    } else {
      double inv = 1.0 / sum;
      for (long long t = ty; t < len; t += TY) yl[t * inner] = (T)((double)ex(xl[t * inner] - m) * inv);
    }
  }
}

/* ---- the scalar means ------------------------------------------------------------ */

/* out (f32 or f64, one element) = sum(part[0..np)) / n, NaN for n = 0:
 * the CPU's store_mean. One block of FINISH_THREADS threads. */
__global__ void __launch_bounds__(FINISH_THREADS)
mean_finish(const double *__restrict__ part, long long np, long long n, void *out, bool f64) {
  double a = 0;
  for (long long i = threadIdx.x; i < np; i += FINISH_THREADS) a += part[i];
  a = group_all<SumD, FINISH_THREADS, FINISH_THREADS>(a);
  if (threadIdx.x == 0) {
    double mean = n > 0 ? a / (double)n : (double)NAN;
    if (f64) *(double *)out = mean;
    else *(float *)out = (float)mean;
  }
}

/* Row r's loss = log(sum ex(x - m)) + ((double)m - (double)x[label]) into
 * loss[r]; a label outside [0, C) is flagged and its loss is NaN. */
template <class T, int G>
__global__ void __launch_bounds__(THREADS)
ce_rows(const T *__restrict__ x, const void *__restrict__ lab, bool lab64, long long n, long long c,
        double *__restrict__ loss, tfg_cuda_error *err, int node) {
  const int lane = threadIdx.x % G;
  FOR_ROWS(G, r, n) {
    long long label = id_at(lab, lab64, r);
    if (label < 0 || label >= c) { /* uniform over the group: all read the same label */
      if (lane == 0) {
        tfg_cuda_flag(err, TFG_CUDA_E_LABEL_RANGE, node, label, c);
        loss[r] = NAN;
      }
      continue;
    }
    const T *xr = x + r * c;
    T m;
    double sum = row_softmax_stats<T, G>(xr, c, lane, &m);
    if (lane == 0) loss[r] = log(sum) + ((double)m - (double)xr[label]);
  }
}

/* Chunk k of mse: sum over [k * CHUNK, min(n, (k + 1) * CHUNK)) of
 * ((double)a - (double)b)^2 into part[k]; one block per chunk. */
template <class T>
__global__ void __launch_bounds__(THREADS)
mse_chunks(const T *__restrict__ a, const T *__restrict__ b, long long n, long long nchunks, double *__restrict__ part) {
  for (long long k = blockIdx.x; k < nchunks; k += gridDim.x) {
    long long e1 = (k + 1) * CHUNK < n ? (k + 1) * CHUNK : n;
    double acc = 0;
    for (long long i = k * CHUNK + threadIdx.x; i < e1; i += THREADS) {
      double d = (double)a[i] - (double)b[i];
      acc += d * d;
    }
    acc = group_all<SumD, THREADS>(acc);
    if (threadIdx.x == 0) part[k] = acc;
  }
}

/* Row r of accuracy: 1 when the row's argmax (first maximum, first NaN)
 * equals the label, else 0 (a label outside [0, C) matches nothing). */
template <class T, int G>
__global__ void __launch_bounds__(THREADS)
acc_rows(const T *__restrict__ x, const void *__restrict__ lab, bool lab64, long long n, long long c,
         double *__restrict__ right) {
  const int lane = threadIdx.x % G;
  FOR_ROWS(G, r, n) {
    const T *xr = x + r * c;
    ArgV<T> a = ArgT<T>::identity();
    for (long long t = lane; t < c; t += G) {
      ArgV<T> v;
      v.v = xr[t];
      v.i = t;
      a = ArgT<T>::combine(a, v);
    }
    a = group_all<ArgT<T>, G>(a);
    if (lane == 0) right[r] = a.i == id_at(lab, lab64, r) ? 1.0 : 0.0;
  }
}

/* ---- layer_norm --------------------------------------------------------------- */

/* Row statistics as tfg_cpu_ln_stats: mu = sum(x) / d, then the biased
 * variance from a second pass over the deviations, rstd = 1 / sqrt(var +
 * eps), all in double. Every thread of the group gets both. */
template <class T, int G>
__device__ __forceinline__ double ln_stats(const T *__restrict__ xr, long long d, double eps, int lane, double *mean) {
  double s = 0;
  for (long long t = lane; t < d; t += G) s += (double)xr[t];
  double mu = group_all<SumD, G>(s) / (double)d;
  double v = 0;
  for (long long t = lane; t < d; t += G) {
    double dev = (double)xr[t] - mu;
    v += dev * dev;
  }
  double var = group_all<SumD, G>(v) / (double)d;
  *mean = mu;
  return 1.0 / sqrt(var + eps);
}

/* Layer norm's rows, x [rows, d] with gamma [d] (gm) into y:
 *   the forward pass (GRAD false, c = beta [d]):
 *     y = (T)(((double)x - mean) * rstd * (double)gamma + (double)beta);
 *   the gradient (GRAD true, c = dy [rows, d], y = dx): with g = dy * gamma
 *   and xhat = (x - mu) rstd (grad.c's ln_grad),
 *     dx = (T)(rstd * (g - mean(g) - xhat * mean(g * xhat))).
 * g is rounded by __dmul_rn in both loops: contracted into the first
 * loop's sum as an FMA it would be unrounded there and rounded in the
 * second, and g - mean(g), exactly 0 when D = 1 (the CPU's result), would
 * be that rounding times rstd = 1 / sqrt(eps): 2e-14 on an H100. */
template <class T, bool GRAD, int G>
__global__ void __launch_bounds__(THREADS)
ln_rows(const T *__restrict__ x, const T *__restrict__ gm, const T *__restrict__ c, T *__restrict__ y,
        long long rows, long long d, double eps) {
  const int lane = threadIdx.x % G;
  FOR_ROWS(G, r, rows) {
    const T *xr = x + r * d;
    T *yr = y + r * d;
    double mean, rstd = ln_stats<T, G>(xr, d, eps, lane, &mean);
    if (!GRAD) {
      for (long long t = lane; t < d; t += G)
        yr[t] = (T)(((double)xr[t] - mean) * rstd * (double)gm[t] + (double)c[t]);
      continue;
    }
    const T *dyr = c + r * d;
    double mg = 0, mgx = 0;
    for (long long t = lane; t < d; t += G) {
      double g = __dmul_rn((double)dyr[t], (double)gm[t]);
      mg += g;
      mgx += g * (((double)xr[t] - mean) * rstd);
    }
    mg = group_all<SumD, G>(mg) / (double)d;
    mgx = group_all<SumD, G>(mgx) / (double)d;
    for (long long t = lane; t < d; t += G) {
      double g = __dmul_rn((double)dyr[t], (double)gm[t]);
      double xhat = ((double)xr[t] - mean) * rstd;
      yr[t] = (T)(rstd * (g - mg - xhat * mgx));
    }
  }
}

/* ---- embedding, one_hot ----------------------------------------------------------- */

/* y[i, :] = table[ids[i], :]; an id outside [0, v) is flagged and its row
 * gets zeros (nothing read out of the table). */
template <class T>
__global__ void __launch_bounds__(THREADS)
embed(const T *__restrict__ table, const void *__restrict__ ids, bool i64, T *__restrict__ y, long long n,
      long long d, long long v, tfg_cuda_error *err, int node) {
  const int tx = threadIdx.x % TX;
  FOR_ROWS_2D(i, n) {
    long long id = id_at(ids, i64, i);
    bool bad = id < 0 || id >= v;
    if (bad && tx == 0) tfg_cuda_flag(err, TFG_CUDA_E_ID_RANGE, node, id, v);
    const T *src = table + (bad ? 0 : id) * d;
    T *dst = y + i * d;
    for (long long c = tx; c < d; c += TX) dst[c] = bad ? (T)0 : src[c];
  }
}

/* y[i, c] = (c == ids[i]); an id outside [0, depth) leaves a zero row. */
template <class T>
__global__ void __launch_bounds__(THREADS)
one_hot(const void *__restrict__ ids, bool i64, T *__restrict__ y, long long n, long long depth) {
  const int tx = threadIdx.x % TX;
  FOR_ROWS_2D(i, n) {
    long long id = id_at(ids, i64, i);
    T *dst = y + i * depth;
    for (long long c = tx; c < depth; c += TX) dst[c] = c == id ? (T)1 : (T)0;
  }
}

/* Flags the ids outside [0, limit) (where nothing else reads them: an
 * empty table, an empty row). */
__global__ void __launch_bounds__(THREADS)
check_ids(const void *__restrict__ ids, bool i64, long long n, long long limit, int code, tfg_cuda_error *err,
          int node) {
  TFG_CUDA_LOOP(i, n) {
    long long id = id_at(ids, i64, i);
    if (id < 0 || id >= limit) tfg_cuda_flag(err, code, node, id, limit);
  }
}

/* ---- relu_grad, gelu_grad ------------------------------------------------------------ */

/* dy where x > 0, else 0 (a NaN x gives 0, as grad.c). */
template <class T>
__global__ void __launch_bounds__(THREADS)
relu_grad(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dx, long long n) {
  TFG_CUDA_LOOP(i, n)
    dx[i] = x[i] > 0 ? dy[i] : (T)0;
}

/* dy * (Phi(x) + x phi(x)) in double for both dtypes (grad.c's gelu_grad):
 * Phi = erfc(-x / sqrt 2) / 2, phi = exp(-x^2 / 2) / sqrt(2 pi). */
template <class T>
__global__ void __launch_bounds__(THREADS)
gelu_grad(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dx, long long n) {
  TFG_CUDA_LOOP(i, n) {
    double v = x[i];
    double cdf = 0.5 * erfc(-v * SQRT1_2);
    double pdf = exp(-0.5 * v * v) * (TWO_SQRTPI * SQRT1_2 * 0.5);
    dx[i] = (T)((double)dy[i] * (cdf + v * pdf));
  }
}

/* ---- cross_entropy_grad ------------------------------------------------------------------ */

/* Row r: dx = (T)(((double)ex(x - m) / sum - onehot(label)) * dy / N),
 * the sum in double (grad.c's ce_grad). A label outside [0, C) is
 * flagged and its row is NaN. dy is read on the device (dy[0]). */
template <class T, int G>
__global__ void __launch_bounds__(THREADS)
ce_grad_rows(const T *__restrict__ x, const void *__restrict__ lab, bool lab64, const T *__restrict__ dy,
             T *__restrict__ dx, long long n, long long c, tfg_cuda_error *err, int node) {
  const int lane = threadIdx.x % G;
  const double scale = (double)dy[0] / (double)n;
  FOR_ROWS(G, r, n) {
    const T *xr = x + r * c;
    T *dr = dx + r * c;
    long long label = id_at(lab, lab64, r);
    if (label < 0 || label >= c) { /* uniform over the group */
      if (lane == 0) tfg_cuda_flag(err, TFG_CUDA_E_LABEL_RANGE, node, label, c);
      for (long long t = lane; t < c; t += G) dr[t] = (T)NAN;
      continue;
    }
    T m;
    double sum = row_softmax_stats<T, G>(xr, c, lane, &m);
    double inv = 1.0 / sum;
    for (long long t = lane; t < c; t += G) {
      double p = (double)ex(xr[t] - m) * inv;
      dr[t] = (T)((p - (t == label ? 1.0 : 0.0)) * scale);
    }
  }
}

/* ---- embedding_grad ----------------------------------------------------------------------- */

/* keys[i] = ids[i] (the table row), or rows, a sentinel sorting last, for
 * an id outside [0, rows), which is flagged; vals[i] = i. */
__global__ void __launch_bounds__(THREADS)
emb_keys(const void *__restrict__ ids, bool i64, long long n, long long rows, unsigned long long *__restrict__ keys,
         long long *__restrict__ vals, tfg_cuda_error *err, int node) {
  TFG_CUDA_LOOP(i, n) {
    long long id = id_at(ids, i64, i);
    bool bad = id < 0 || id >= rows;
    if (bad) tfg_cuda_flag(err, TFG_CUDA_E_ID_RANGE, node, id, rows);
    keys[i] = bad ? (unsigned long long)rows : (unsigned long long)id;
    vals[i] = i;
  }
}

/* Over the sorted keys: row k's positions are sorted[begin[k], end[k]).
 * begin and end start at 0 (rows no id names stay empty). */
__global__ void __launch_bounds__(THREADS)
emb_bounds(const unsigned long long *__restrict__ keys, long long n, long long rows, long long *__restrict__ begin,
           long long *__restrict__ end) {
  TFG_CUDA_LOOP(s, n) {
    unsigned long long k = keys[s];
    if (k >= (unsigned long long)rows) continue; /* the sentinel: bad ids */
    if (s == 0 || keys[s - 1] != k) begin[k] = s;
    if (s == n - 1 || keys[s + 1] != k) end[k] = s + 1;
  }
}

/* out[r, c] = 0 + dy[p0, c] + dy[p1, c] + ... in T, p0 < p1 < ... the
 * positions of row r's ids: the CPU's order, so the same bits. */
template <class T>
__global__ void __launch_bounds__(THREADS)
emb_sum(const T *__restrict__ dy, const long long *__restrict__ pos, const long long *__restrict__ begin,
        const long long *__restrict__ end, T *__restrict__ out, long long rows, long long d) {
  const int tx = threadIdx.x % TX;
  FOR_ROWS_2D(r, rows) {
    long long q0 = begin[r], q1 = end[r];
    T *dst = out + r * d;
    for (long long c = tx; c < d; c += TX) {
      T acc = 0;
      for (long long q = q0; q < q1; q++) acc += dy[pos[q] * d + c];
      dst[c] = acc;
    }
  }
}

/* ---- host side ----------------------------------------------------------------------- */

/* Blocks for `rows` rows taken by groups of G threads. */
unsigned row_blocks(long long rows, int g) { return tfg_cuda_grid(rows, THREADS / g); }

bool is_float(tfg_dtype t) { return t == TFG_DTYPE_F32 || t == TFG_DTYPE_F64; }
bool is_int(tfg_dtype t) { return t == TFG_DTYPE_I32 || t == TFG_DTYPE_I64; }

/* TFG_ERR_DEVICE: "WHAT of dtype T is not supported on CUDA" (the CPU's
 * tfg_cpu_unsupported wording). */
tfg_status unsupported(tfg_kernel_ctx *ctx, const char *what, tfg_dtype t) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s of dtype %s is not supported on CUDA", what, tfg_dtype_name(t));
}

tfg_status bad_shape(tfg_kernel_ctx *ctx, const char *what) {
  return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: the tensors' shapes do not match the op", what);
}

/* Checks that every tensor of ts[0..n) has dtype dt (f32 or f64), as
 * grad.c's same_float. */
tfg_status same_float(tfg_kernel_ctx *ctx, const char *what, tfg_dtype dt, const tfg_tensor *const *ts, int n) {
  if (!is_float(dt)) return unsupported(ctx, what, dt);
  for (int i = 0; i < n; i++)
    if (ts[i]->dtype != dt)
      return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s mixes %s and %s (one float dtype expected)", what,
                             tfg_dtype_name(dt), tfg_dtype_name(ts[i]->dtype));
  return TFG_OK;
}

/* Launches KERNEL<TARGS..., G> args over `rows` rows of length `len`:
 * G = WARP (a warp per row) up to WARP_MAX, else G = THREADS (a block). */
#define LAUNCH_ROWS(rows, len, stream, args, KERNEL, ...)                                        \
  do {                                                                                          \
    if ((len) <= WARP_MAX)                                                                      \
      KERNEL<__VA_ARGS__, WARP><<<row_blocks(rows, WARP), THREADS, 0, stream>>> args;           \
    else                                                                                        \
      KERNEL<__VA_ARGS__, THREADS><<<row_blocks(rows, THREADS), THREADS, 0, stream>>> args;     \
  } while (0)

/* SOFTMAX, LOG_SOFTMAX along attrs.axis of x (any rank >= 1), f32/f64. */
tfg_status cuda_softmax(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0];
  if (!is_float(x->dtype)) return unsupported(ctx, "softmax", x->dtype);
  if (out->dtype != x->dtype || !tfg_shape_eq(&out->shape, &x->shape)) return bad_shape(ctx, "softmax");
  long long axis = node->attrs.axis;
  if (axis < 0 || axis >= x->shape.rank)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "softmax: axis %lld is out of range", axis);
  long long n = tfg_shape_numel(&x->shape);
  if (n == 0) return TFG_OK;
  long long len = x->shape.dim[axis], inner = 1;
  for (int d = (int)axis + 1; d < x->shape.rank; d++) inner *= x->shape.dim[d];
  long long outer = n / (len * inner);
  bool lg = node->op == TFG_OP_LOG_SOFTMAX;
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  if (inner == 1) {
    long long rows = outer;
    if (x->dtype == TFG_DTYPE_F32) {
      const float *xp = (const float *)x->data;
      float *yp = (float *)out->data;
      if (lg) LAUNCH_ROWS(rows, len, st, (xp, yp, rows, len), softmax_rows, float, true);
      else LAUNCH_ROWS(rows, len, st, (xp, yp, rows, len), softmax_rows, float, false);
    } else {
      const double *xp = (const double *)x->data;
      double *yp = (double *)out->data;
      if (lg) LAUNCH_ROWS(rows, len, st, (xp, yp, rows, len), softmax_rows, double, true);
      else LAUNCH_ROWS(rows, len, st, (xp, yp, rows, len), softmax_rows, double, false);
    }
  } else {
    unsigned blocks = tfg_cuda_grid(outer * ((inner + TX - 1) / TX), 1);
    if (x->dtype == TFG_DTYPE_F32) {
      const float *xp = (const float *)x->data;
      float *yp = (float *)out->data;
      if (lg) softmax_cols<float, true><<<blocks, THREADS, 0, st>>>(xp, yp, outer, len, inner);
      else softmax_cols<float, false><<<blocks, THREADS, 0, st>>>(xp, yp, outer, len, inner);
    } else {
      const double *xp = (const double *)x->data;
      double *yp = (double *)out->data;
      if (lg) softmax_cols<double, true><<<blocks, THREADS, 0, st>>>(xp, yp, outer, len, inner);
      else softmax_cols<double, false><<<blocks, THREADS, 0, st>>>(xp, yp, outer, len, inner);
    }
  }
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* Checks logits [N, C] (float) and labels [N] (int), as the CPU kernels
 * and infer_cross_entropy / infer_accuracy do. */
tfg_status check_logits_labels(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *x, const tfg_tensor *lab) {
  if (!is_float(x->dtype)) return unsupported(ctx, what, x->dtype);
  if (!is_int(lab->dtype)) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s labels", what);
    return unsupported(ctx, buf, lab->dtype);
  }
  if (x->shape.rank != 2 || lab->shape.rank != 1 || lab->shape.dim[0] != x->shape.dim[0])
    return bad_shape(ctx, what);
  return TFG_OK;
}

/* Queues mean_finish(part[0..np), n) into out, then frees part. */
tfg_status finish_mean(tfg_kernel_ctx *ctx, tfg_status s, double *part, long long np, long long n, tfg_tensor *out) {
  if (s == TFG_OK) {
    mean_finish<<<1, FINISH_THREADS, 0, tfg_cuda_of(ctx)->stream>>>(part, np, n, out->data,
                                                                   out->dtype == TFG_DTYPE_F64);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "mean_finish<<<>>>");
  }
  TFG_CUDA_FREE_SCRATCH(ctx, &s, part);
  return s;
}

/* Stream-ordered scratch of `bytes` (none for 0). */
tfg_status scratch(tfg_kernel_ctx *ctx, void **p, size_t bytes) {
  *p = NULL;
  if (bytes) TFG_CUDA_CHECK(ctx, cudaMallocAsync(p, bytes, tfg_cuda_of(ctx)->stream));
  return TFG_OK;
}

/* CROSS_ENTROPY: logits [N, C] f32/f64, labels i32/i64 [N] -> the mean
 * over rows of -log_softmax(logits)[n, label[n]], in the logits' dtype;
 * N = 0 gives NaN. A label outside [0, C) sets the device error flag. */
tfg_status cuda_cross_entropy(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  const tfg_tensor *x = &in[0], *lab = &in[1];
  tfg_status s = check_logits_labels(ctx, "cross_entropy", x, lab);
  if (s != TFG_OK) return s;
  if (out->dtype != x->dtype || out->shape.rank != 0) return bad_shape(ctx, "cross_entropy");
  long long n = x->shape.dim[0], c = x->shape.dim[1];
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  tfg_cuda_error *err = tfg_cuda_of(ctx)->error;
  bool l64 = lab->dtype == TFG_DTYPE_I64;
  double *loss;
  s = scratch(ctx, (void **)&loss, sizeof(double) * (size_t)n);
  if (s != TFG_OK) return s;
  if (n > 0) {
    if (x->dtype == TFG_DTYPE_F32)
      LAUNCH_ROWS(n, c, st, ((const float *)x->data, lab->data, l64, n, c, loss, err, ctx->node), ce_rows, float);
    else
      LAUNCH_ROWS(n, c, st, ((const double *)x->data, lab->data, l64, n, c, loss, err, ctx->node), ce_rows, double);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "ce_rows<<<>>>");
  }
  return finish_mean(ctx, s, loss, n, n, out);
}

/* MSE: the mean of (a - b)^2 over all elements of two same-shape f32/f64
 * tensors; NaN when they are empty. */
tfg_status cuda_mse(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *a = &in[0], *b = &in[1];
  (void)node;
  const tfg_tensor *same[] = {b, out};
  tfg_status s = same_float(ctx, "mse", a->dtype, same, 2);
  if (s != TFG_OK) return s;
  if (out->shape.rank != 0 || !tfg_shape_eq(&a->shape, &b->shape)) return bad_shape(ctx, "mse");
  long long n = tfg_shape_numel(&a->shape), nchunks = (n + CHUNK - 1) / CHUNK;
  double *part;
  s = scratch(ctx, (void **)&part, sizeof(double) * (size_t)nchunks);
  if (s != TFG_OK) return s;
  if (n > 0) {
    cudaStream_t st = tfg_cuda_of(ctx)->stream;
    unsigned blocks = tfg_cuda_grid(nchunks, 1);
    if (a->dtype == TFG_DTYPE_F32)
      mse_chunks<float><<<blocks, THREADS, 0, st>>>((const float *)a->data, (const float *)b->data, n, nchunks, part);
    else
      mse_chunks<double><<<blocks, THREADS, 0, st>>>((const double *)a->data, (const double *)b->data, n, nchunks, part);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "mse_chunks<<<>>>");
  }
  return finish_mean(ctx, s, part, nchunks, n, out);
}

/* Launches ln_rows<T, grad> on x, gamma g, c (beta, or dy for the
 * gradient) into out: rows rows of d. */
template <class T>
void launch_ln(cudaStream_t st, bool grad, const tfg_tensor *x, const tfg_tensor *g, const tfg_tensor *c,
               tfg_tensor *out, long long rows, long long d, double eps) {
  const T *xp = (const T *)x->data, *gp = (const T *)g->data, *cp = (const T *)c->data;
  T *yp = (T *)out->data;
  if (grad) LAUNCH_ROWS(rows, d, st, (xp, gp, cp, yp, rows, d, eps), ln_rows, T, true);
  else LAUNCH_ROWS(rows, d, st, (xp, gp, cp, yp, rows, d, eps), ln_rows, T, false);
}

/* LAYER_NORM: x [..., D], gamma [D], beta [D] -> [..., D], normalizing
 * each row of the last axis; LAYER_NORM_GRAD: (x [..., D], gamma [D], dy
 * [..., D]) -> dx. One float dtype, eps = attrs.value. */
tfg_status cuda_layer_norm(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0], *g = &in[1], *c = &in[2]; /* c: beta, or dy */
  bool grad = node->op == TFG_OP_LAYER_NORM_GRAD;
  const char *what = grad ? "layer_norm_grad" : "layer_norm";
  const tfg_tensor *same[] = {g, c, out};
  tfg_status s = same_float(ctx, what, x->dtype, same, 3);
  if (s != TFG_OK) return s;
  if (x->shape.rank < 1 || !tfg_shape_eq(&out->shape, &x->shape) || (grad && !tfg_shape_eq(&c->shape, &x->shape)))
    return bad_shape(ctx, what);
  long long d = x->shape.dim[x->shape.rank - 1];
  if (tfg_shape_numel(&g->shape) != d || (!grad && tfg_shape_numel(&c->shape) != d)) return bad_shape(ctx, what);
  long long n = tfg_shape_numel(&x->shape);
  if (n == 0) return TFG_OK;
  long long rows = n / d;
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  if (x->dtype == TFG_DTYPE_F32) launch_ln<float>(st, grad, x, g, c, out, rows, d, node->attrs.value);
  else launch_ln<double>(st, grad, x, g, c, out, rows, d, node->attrs.value);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* EMBEDDING: table [V, D] f32/f64/f16/bf16, ids i32/i64 of any shape ->
 * [..., D]. It moves rows, so 16-bit tables are native (their bits as
 * they are, kernels/cuda/registry.cu). */
tfg_status cuda_embedding(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  const tfg_tensor *table = &in[0], *ids = &in[1];
  bool half = table->dtype == TFG_DTYPE_F16 || table->dtype == TFG_DTYPE_BF16;
  if (!is_float(table->dtype) && !half) return unsupported(ctx, "embedding table", table->dtype);
  if (!is_int(ids->dtype)) return unsupported(ctx, "embedding ids", ids->dtype);
  if (table->shape.rank != 2 || out->dtype != table->dtype) return bad_shape(ctx, "embedding");
  long long v = table->shape.dim[0], d = table->shape.dim[1], n = tfg_shape_numel(&ids->shape);
  if (tfg_shape_numel(&out->shape) != n * d) return bad_shape(ctx, "embedding");
  if (n == 0) return TFG_OK;
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  tfg_cuda_error *err = tfg_cuda_of(ctx)->error;
  bool i64 = ids->dtype == TFG_DTYPE_I64;
  unsigned blocks = tfg_cuda_grid(n, TY); /* runs for d == 0 too: the ids are still checked */
  if (half)
    embed<uint16_t><<<blocks, THREADS, 0, st>>>((const uint16_t *)table->data, ids->data, i64,
                                                (uint16_t *)out->data, n, d, v, err, ctx->node);
  else if (table->dtype == TFG_DTYPE_F32)
    embed<float><<<blocks, THREADS, 0, st>>>((const float *)table->data, ids->data, i64, (float *)out->data, n, d, v,
                                             err, ctx->node);
  else
    embed<double><<<blocks, THREADS, 0, st>>>((const double *)table->data, ids->data, i64, (double *)out->data, n, d,
                                              v, err, ctx->node);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* ONE_HOT: ids i32/i64 [...] -> [..., n] f32 (f64 also accepted); an id
 * outside [0, n) gives a zero row, not an error (tf.one_hot). */
tfg_status cuda_one_hot(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *ids = &in[0];
  if (!is_int(ids->dtype)) return unsupported(ctx, "one_hot ids", ids->dtype);
  if (!is_float(out->dtype)) return unsupported(ctx, "one_hot output", out->dtype);
  long long n = tfg_shape_numel(&ids->shape), depth = node->attrs.n;
  if (depth < 0 || tfg_shape_numel(&out->shape) != n * depth) return bad_shape(ctx, "one_hot");
  if (n == 0 || depth == 0) return TFG_OK;
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  bool i64 = ids->dtype == TFG_DTYPE_I64;
  unsigned blocks = tfg_cuda_grid(n, TY);
  if (out->dtype == TFG_DTYPE_F32) one_hot<float><<<blocks, THREADS, 0, st>>>(ids->data, i64, (float *)out->data, n, depth);
  else one_hot<double><<<blocks, THREADS, 0, st>>>(ids->data, i64, (double *)out->data, n, depth);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* ACCURACY: logits [N, C] f32/f64, labels i32/i64 [N] -> f32 (f64 also
 * accepted): the fraction of rows whose argmax equals the label; NaN for
 * N = 0, 0 for C = 0. */
tfg_status cuda_accuracy(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0], *lab = &in[1];
  (void)node;
  tfg_status s = check_logits_labels(ctx, "accuracy", x, lab);
  if (s != TFG_OK) return s;
  if (!is_float(out->dtype)) return unsupported(ctx, "accuracy output", out->dtype);
  if (out->shape.rank != 0) return bad_shape(ctx, "accuracy");
  long long n = x->shape.dim[0], c = x->shape.dim[1];
  long long np = c > 0 ? n : 0; /* C = 0: no row is right */
  double *right;
  s = scratch(ctx, (void **)&right, sizeof(double) * (size_t)np);
  if (s != TFG_OK) return s;
  if (np > 0) {
    cudaStream_t st = tfg_cuda_of(ctx)->stream;
    bool l64 = lab->dtype == TFG_DTYPE_I64;
    if (x->dtype == TFG_DTYPE_F32)
      LAUNCH_ROWS(n, c, st, ((const float *)x->data, lab->data, l64, n, c, right), acc_rows, float);
    else
      LAUNCH_ROWS(n, c, st, ((const double *)x->data, lab->data, l64, n, c, right), acc_rows, double);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "acc_rows<<<>>>");
  }
  return finish_mean(ctx, s, right, np, n, out);
}

/* RELU_GRAD, GELU_GRAD: (x, dy) -> dx, f32/f64, one element count. */
tfg_status cuda_pointwise_grad(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0], *dy = &in[1];
  bool relu = node->op == TFG_OP_RELU_GRAD;
  const char *what = relu ? "relu_grad" : "gelu_grad";
  const tfg_tensor *same[] = {dy, out};
  tfg_status s = same_float(ctx, what, x->dtype, same, 2);
  if (s != TFG_OK) return s;
  long long n = tfg_shape_numel(&x->shape);
  if (tfg_shape_numel(&dy->shape) != n || tfg_shape_numel(&out->shape) != n) return bad_shape(ctx, what);
  if (n == 0) return TFG_OK;
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  unsigned blocks = tfg_cuda_grid(n, THREADS);
  if (x->dtype == TFG_DTYPE_F32) {
    const float *xp = (const float *)x->data, *dp = (const float *)dy->data;
    float *op = (float *)out->data;
    if (relu) relu_grad<float><<<blocks, THREADS, 0, st>>>(xp, dp, op, n);
    else gelu_grad<float><<<blocks, THREADS, 0, st>>>(xp, dp, op, n);
  } else {
    const double *xp = (const double *)x->data, *dp = (const double *)dy->data;
    double *op = (double *)out->data;
    if (relu) relu_grad<double><<<blocks, THREADS, 0, st>>>(xp, dp, op, n);
    else gelu_grad<double><<<blocks, THREADS, 0, st>>>(xp, dp, op, n);
  }
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* CROSS_ENTROPY_GRAD: (logits [N, C], labels [N], dy one element) -> [N, C]
 * = (softmax(logits) - onehot(labels)) * dy / N. A label outside [0, C)
 * sets the device error flag (also when C = 0 and nothing is written). */
tfg_status cuda_cross_entropy_grad(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  const tfg_tensor *x = &in[0], *lab = &in[1], *dy = &in[2];
  const tfg_tensor *same[] = {dy, out};
  tfg_status s = same_float(ctx, "cross_entropy_grad", x->dtype, same, 2);
  if (s != TFG_OK) return s;
  if (!is_int(lab->dtype)) return unsupported(ctx, "cross_entropy labels", lab->dtype);
  if (x->shape.rank != 2 || lab->shape.rank != 1 || lab->shape.dim[0] != x->shape.dim[0] ||
      tfg_shape_numel(&dy->shape) != 1 || !tfg_shape_eq(&out->shape, &x->shape))
    return bad_shape(ctx, "cross_entropy_grad");
  long long n = x->shape.dim[0], c = x->shape.dim[1];
  if (n == 0) return TFG_OK;
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  tfg_cuda_error *err = tfg_cuda_of(ctx)->error;
  bool l64 = lab->dtype == TFG_DTYPE_I64;
  if (c == 0) { /* nothing to write, but every label is out of range */
    check_ids<<<tfg_cuda_grid(n, THREADS), THREADS, 0, st>>>(lab->data, l64, n, c, TFG_CUDA_E_LABEL_RANGE, err,
                                                          ctx->node);
  } else if (x->dtype == TFG_DTYPE_F32) {
    LAUNCH_ROWS(n, c, st, ((const float *)x->data, lab->data, l64, (const float *)dy->data, (float *)out->data, n, c, err,
                 ctx->node), ce_grad_rows, float);
  } else {
    LAUNCH_ROWS(n, c, st, ((const double *)x->data, lab->data, l64, (const double *)dy->data, (double *)out->data, n, c, err,
                 ctx->node), ce_grad_rows, double);
  }
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

size_t align_up(size_t v) { return (v + 255) & ~(size_t)255; }

/* EMBEDDING_GRAD: (ids i32/i64 [...], dy [..., D] f32/f64) -> the table's
 * gradient [attrs.n, D]: row ids[i] += dy[i] in order of appearance. An id
 * outside [0, n) sets the device error flag. */
tfg_status cuda_embedding_grad(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *ids = &in[0], *dy = &in[1];
  const tfg_tensor *same[] = {out};
  tfg_status s = same_float(ctx, "embedding_grad", dy->dtype, same, 1);
  if (s != TFG_OK) return s;
  if (!is_int(ids->dtype)) return unsupported(ctx, "embedding ids", ids->dtype);
  if (out->shape.rank != 2 || out->shape.dim[0] != node->attrs.n) return bad_shape(ctx, "embedding_grad");
  long long rows = out->shape.dim[0], d = out->shape.dim[1], nids = tfg_shape_numel(&ids->shape);
  if (tfg_shape_numel(&dy->shape) != nids * d) return bad_shape(ctx, "embedding_grad");
  cudaStream_t st = tfg_cuda_of(ctx)->stream;
  tfg_cuda_error *err = tfg_cuda_of(ctx)->error;
  bool i64 = ids->dtype == TFG_DTYPE_I64;
  size_t es = dy->dtype == TFG_DTYPE_F64 ? sizeof(double) : sizeof(float);
  if (rows == 0 || d == 0 || nids == 0) { /* nothing to sum: zeros, and the ids still checked */
    if (rows > 0 && d > 0) TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, 0, (size_t)(rows * d) * es, st));
    if (nids > 0) {
      check_ids<<<tfg_cuda_grid(nids, THREADS), THREADS, 0, st>>>(ids->data, i64, nids, rows, TFG_CUDA_E_ID_RANGE, err,
                                                              ctx->node);
      TFG_CUDA_LAUNCHED(ctx);
    }
    return TFG_OK;
  }

  /* The sort covers keys 0..rows (rows: the sentinel), so end_bit bits. */
  int end_bit = 1;
  while (end_bit < 64 && (1ULL << end_bit) <= (unsigned long long)rows) end_bit++;
  size_t temp_bytes = 0;
  TFG_CUDA_CHECK(ctx, cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned long long *)NULL,
                                                      (unsigned long long *)NULL, (const long long *)NULL,
                                                      (long long *)NULL, nids, 0, end_bit, st));
  size_t kb = align_up(sizeof(unsigned long long) * (size_t)nids), vb = align_up(sizeof(long long) * (size_t)nids);
  size_t bb = align_up(sizeof(long long) * (size_t)rows);
  char *buf;
  s = scratch(ctx, (void **)&buf, 2 * kb + 2 * vb + 2 * bb + align_up(temp_bytes));
  if (s != TFG_OK) return s;
  unsigned long long *keys_in = (unsigned long long *)buf, *keys = (unsigned long long *)(buf + kb);
  long long *vals_in = (long long *)(buf + 2 * kb), *pos = (long long *)(buf + 2 * kb + vb);
  long long *begin = (long long *)(buf + 2 * kb + 2 * vb), *end = (long long *)(buf + 2 * kb + 2 * vb + bb);
  void *temp = buf + 2 * kb + 2 * vb + 2 * bb;

  emb_keys<<<tfg_cuda_grid(nids, THREADS), THREADS, 0, st>>>(ids->data, i64, nids, rows, keys_in, vals_in, err,
                                                          ctx->node);
  TFG_CUDA_NOTE_LAUNCH(ctx, &s, "emb_keys<<<>>>");
  cudaError_t e = cudaSuccess;
  if (s == TFG_OK && (e = cudaMemsetAsync(begin, 0, 2 * bb, st)) != cudaSuccess) /* begin and end */
    s = tfg_cuda_fail_call(ctx, "cudaMemsetAsync(begin, 0, 2 * bb, st)", cudaGetErrorString(e), __FILE__, __LINE__);
  if (s == TFG_OK &&
      (e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, vals_in, pos, nids, 0, end_bit, st)) !=
          cudaSuccess)
    s = tfg_cuda_fail_call(ctx, "cub::DeviceRadixSort::SortPairs", cudaGetErrorString(e), __FILE__, __LINE__);
  if (s == TFG_OK) {
    emb_bounds<<<tfg_cuda_grid(nids, THREADS), THREADS, 0, st>>>(keys, nids, rows, begin, end);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "emb_bounds<<<>>>");
  }
  if (s == TFG_OK) {
    unsigned blocks = tfg_cuda_grid(rows, TY);
    if (dy->dtype == TFG_DTYPE_F32)
      emb_sum<float><<<blocks, THREADS, 0, st>>>((const float *)dy->data, pos, begin, end, (float *)out->data, rows, d);
    else
      emb_sum<double><<<blocks, THREADS, 0, st>>>((const double *)dy->data, pos, begin, end, (double *)out->data, rows,
                                                  d);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "emb_sum<<<>>>");
  }
  TFG_CUDA_FREE_SCRATCH(ctx, &s, buf);
  return s;
}

} /* namespace */

extern "C" void tfg_cuda_register_nn(tfg_kernel_fn *table) {
  static const tfg_cuda_kernel_row rows[] = {
      {TFG_OP_SOFTMAX, cuda_softmax}, {TFG_OP_LOG_SOFTMAX, cuda_softmax},
      {TFG_OP_CROSS_ENTROPY, cuda_cross_entropy},
      {TFG_OP_MSE, cuda_mse},
      {TFG_OP_LAYER_NORM, cuda_layer_norm}, {TFG_OP_LAYER_NORM_GRAD, cuda_layer_norm},
      {TFG_OP_EMBEDDING, cuda_embedding},
      {TFG_OP_ONE_HOT, cuda_one_hot},
      {TFG_OP_ACCURACY, cuda_accuracy},
      {TFG_OP_RELU_GRAD, cuda_pointwise_grad}, {TFG_OP_GELU_GRAD, cuda_pointwise_grad},
      {TFG_OP_CROSS_ENTROPY_GRAD, cuda_cross_entropy_grad},
      {TFG_OP_EMBEDDING_GRAD, cuda_embedding_grad},
  };
  tfg_cuda_register_rows(table, rows);
}
