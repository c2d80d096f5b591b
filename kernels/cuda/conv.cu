/* kernels/cuda/conv.cu: conv2d, max_pool, avg_pool and their gradients
 * on the GPU, NCHW, f32 and f64, through cuDNN 9's legacy API plus a few
 * kernels of our own. f16 and bf16 run staged (kernels/cuda/registry.cu,
 * half.cu): f32 copies of the operands through the f32 path, the result
 * rounded once, as the CPU stages them (kernels/cpu/half.c), so the
 * scatter gradients accumulate in f32, not in 16 bits.
 *
 * The contracts are the CPU kernels' (kernels/cpu/conv.c, grad.c):
 *   conv2d      x [N, C, H, W], w [O, C, KH, KW] -> y [N, O, OH, OW],
 *               cross-correlation (no kernel flip), stride attrs.stride
 *               (rows, cols), zero padding attrs.pad (top, bottom, left,
 *               right: the shape rule has already turned "same" and
 *               "valid" into these four), OH = (H + top + bottom - KH) /
 *               SH + 1 and likewise OW;
 *   conv2d_grad_input   (dy, w) -> dx, the node's shape [N, C, H, W];
 *   conv2d_grad_weight  (x, dy) -> dw, the node's shape [O, C, KH, KW];
 *   max_pool, avg_pool  x -> [N, C, OH, OW], window attrs.size, stride
 *               attrs.stride, no padding, OH = (H - KH) / SH + 1; the max
 *               propagates NaN; the mean divides by the full window;
 *   max_pool_grad (x, dy) -> dx: each window's dy goes to the window's
 *               FIRST maximum (a NaN moves the choice, as in the forward);
 *   avg_pool_grad (dy) -> dx: dy / (KH * KW) over each window.
 * Overlapping windows accumulate; input elements no window reads get 0.
 *
 * conv2d and its gradients: cudnnConvolutionForward / BackwardData /
 * BackwardFilter. cuDNN pads symmetrically (one pad per axis), tfg may
 * not: "same" with an odd total puts the extra row or column at the
 * bottom or right (TensorFlow's rule), e.g. a 3x3 kernel at stride 2 on
 * an even size, or an even kernel at stride 1. Each call picks one of:
 *   direct  cuDNN's padding = (top, left). Where a window starts depends
 *           on top/left only, so the result is tfg's whenever cuDNN's
 *           output size with that symmetric padding, (H + 2 top - KH) /
 *           SH + 1, is exactly OH (and likewise for the columns): the
 *           windows are the same and any extra bottom padding tfg has is
 *           never read. This covers every symmetric case, "valid", and
 *           windows that leave trailing input rows unread.
 *   padded  otherwise (or when cuDNN has no algorithm for the direct
 *           form, e.g. with a padding wider than the kernel): the input
 *           is copied into a zero-padded buffer [n, C, HP, WP], HP =
 *           (OH - 1) * SH + KH (the rows the windows span, starting at
 *           -top), WP likewise, and cuDNN runs with no padding, which
 *           gives exactly OH x OW. conv2d and conv2d_grad_weight pad x
 *           into the buffer first (pad_kernel); conv2d_grad_input has
 *           cuDNN write the padded gradient into the buffer and then
 *           crops it into dx (crop_kernel: padding taps dropped, rows no
 *           window reads get 0).
 * The buffer lives in ctx->workspace, taking at most half of it; images
 * are then processed in chunks that fit (conv2d_grad_weight adds the
 * chunks' contributions with beta = 1, in image order). When not even
 * one padded image fits in half the workspace, the buffer is allocated
 * on the stream with cudaMallocAsync and freed with cudaFreeAsync after
 * the last use, outside the planner's memory plan: size the workspace
 * generously for conv-heavy graphs with asymmetric padding. The legacy
 * API describes tensors with int dims and strides, so images are also
 * chunked to keep every described tensor under 2^31 elements.
 *
 * Descriptors are created per call (host-only, microseconds) and freed
 * on every path out. Algorithms come from cudnnGet*Algorithm_v7
 * (heuristics; nothing is benchmarked and no memory is allocated): the
 * first successful result whose workspace (re-queried with the
 * algorithm's math type set) fits what is left of ctx->workspace,
 * preferring deterministic algorithms so that runs repeat bit for bit as
 * on the CPU (forward algorithms all are; backward ones with atomics are
 * taken only when no deterministic one fits). The choice is cached per
 * device, direction, shapes and workspace, since the heuristic query
 * costs host time on every training step.
 *
 * Math: f64 and f32-with---tf32 run with CUDNN_DEFAULT_MATH (which lets
 * f32 use TF32 tensor cores on sm_80+); f32 without --tf32 runs with
 * CUDNN_FMA_MATH, and only algorithms whose heuristic result has that
 * math type are accepted, so no TF32 creeps in (PyTorch's rule).
 *
 * Pools: max_pool and avg_pool forward are cudnnPoolingForward
 * (CUDNN_POOLING_MAX with CUDNN_PROPAGATE_NAN; average "including
 * padding" with no padding is the mean over the full window), the tensor
 * described as [planes, 1, H, W] chunks. The two pool gradients are our
 * own kernels, not cudnnPoolingBackward: cuDNN's max backward does not
 * promise the first maximum on ties (nor NaN handling), and its average
 * backward wants y and x, which avg_pool_grad does not have. Ours are
 * gathers: one thread per dx element walks the windows that contain it
 * in row-major order, recomputing each window's argmax with the CPU's
 * comparison sequence (max) or adding dy / (KH * KW) rounded as the CPU
 * rounds it (avg). Every dx element thus sums the same terms in the same
 * order as the CPU kernel, so the results match it bit for bit, without
 * atomics.
 *
 * Dtypes: f32 and f64, as on the CPU; f16 and bf16 (which the shape
 * rules accept) are TFG_ERR_DEVICE, as on the CPU: cast first.
 *
 * Assumption: ctx->workspace is not used by anything else queued on
 * another stream while this kernel's work runs. */
#include <array>
#include <limits.h>
#include <map>
#include <mutex>
#include <stdint.h>

#include "kernels/cuda/common.cuh" /* with tfg's C headers, in C linkage */

namespace {

/* ---- our own kernels: element functions (host-callable for tests) ------- */

/* A padded copy: planes of H x W inside planes of HP x WP, the original
 * at row top, column left (the rest zero; HP, WP may also cut trailing
 * rows or columns no window reads). */
struct pad_shape {
  int64_t h, w, hp, wp, top, left;
};

/* Element i of the padded buffer [planes, HP, WP]. */
template <typename T>
__host__ __device__ inline T padded_at(const T *x, int64_t i, const pad_shape &p) {
  int64_t plane = i / (p.hp * p.wp), r = i % (p.hp * p.wp);
  int64_t iy = r / p.wp - p.top, ix = r % p.wp - p.left;
  return iy >= 0 && iy < p.h && ix >= 0 && ix < p.w ? x[(plane * p.h + iy) * p.w + ix] : T(0);
}

/* Element i of dx [planes, H, W] from the padded gradient [planes, HP,
 * WP]: 0 for elements past the buffer (no window read them). */
template <typename T>
__host__ __device__ inline T cropped_at(const T *xp, int64_t i, const pad_shape &p) {
  int64_t plane = i / (p.h * p.w), r = i % (p.h * p.w);
  int64_t iy = r / p.w + p.top, ix = r % p.w + p.left;
  return iy < p.hp && ix < p.wp ? xp[(plane * p.hp + iy) * p.wp + ix] : T(0);
}

struct pool_shape {
  int64_t h, w, oh, ow, kh, kw, sh, sw;
};

/* The windows along one axis that contain input index i: [*lo, *hi]
 * (empty when *lo > *hi), windows o covering o * s .. o * s + k - 1. */
__host__ __device__ inline void windows_over(int64_t i, int64_t k, int64_t s, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = i < k ? 0 : (i - k) / s + 1;
  *hi = i / s;
  if (*hi > n - 1) *hi = n - 1;
}

/* The element max_pool took for window (oy, ox) of plane x: the CPU
 * kernel's loop comparison for comparison (kernels/cpu/grad.c): start at
 * the window's first element, move on a strictly greater value or a NaN.
 * Returns the index within the plane. */
template <typename T>
__host__ __device__ inline int64_t window_argmax(const T *x, int64_t oy, int64_t ox, const pool_shape &p) {
  int64_t base = oy * p.sh * p.w + ox * p.sw, arg = base;
  T m = x[base];
  for (int64_t ky = 0; ky < p.kh; ky++)
    for (int64_t kx = 0; kx < p.kw; kx++) {
      int64_t at = base + ky * p.w + kx;
      T v = x[at];
      if (v > m || v != v) {
        m = v;
        arg = at;
      }
    }
  return arg;
}

/* Element i of max_pool_grad's dx [planes, H, W]: the dy of every window
 * (in row-major window order, as the CPU adds them) whose argmax it is. */
template <typename T>
__host__ __device__ inline T max_pool_grad_at(const T *x, const T *dy, int64_t i, const pool_shape &p) {
  int64_t plane = i / (p.h * p.w), r = i % (p.h * p.w);
  int64_t iy = r / p.w, ix = r % p.w, ylo, yhi, xlo, xhi;
  windows_over(iy, p.kh, p.sh, p.oh, &ylo, &yhi);
  windows_over(ix, p.kw, p.sw, p.ow, &xlo, &xhi);
  const T *xp = x + plane * p.h * p.w, *dyp = dy + plane * p.oh * p.ow;
  T s = T(0);
  for (int64_t oy = ylo; oy <= yhi; oy++)
    for (int64_t ox = xlo; ox <= xhi; ox++)
      if (window_argmax(xp, oy, ox, p) == r) s += dyp[oy * p.ow + ox];
  return s;
}

/* Element i of avg_pool_grad's dx: each containing window's share
 * (T)(dy * (1 / (KH * KW))) computed in double as on the CPU, added in
 * row-major window order. */
template <typename T>
__host__ __device__ inline T avg_pool_grad_at(const T *dy, int64_t i, const pool_shape &p) {
  int64_t plane = i / (p.h * p.w), r = i % (p.h * p.w);
  int64_t iy = r / p.w, ix = r % p.w, ylo, yhi, xlo, xhi;
  windows_over(iy, p.kh, p.sh, p.oh, &ylo, &yhi);
  windows_over(ix, p.kw, p.sw, p.ow, &xlo, &xhi);
  double inv = 1.0 / (double)(p.kh * p.kw);
  const T *dyp = dy + plane * p.oh * p.ow;
  T s = T(0);
  for (int64_t oy = ylo; oy <= yhi; oy++)
    for (int64_t ox = xlo; ox <= xhi; ox++) s += (T)((double)dyp[oy * p.ow + ox] * inv);
  return s;
}

/* ---- our own kernels: launches ------------------------------------------ */

template <typename T>
__global__ void pad_kernel(const T *__restrict__ x, T *__restrict__ xp, int64_t total, pad_shape p) {
  TFG_CUDA_LOOP(i, total) xp[i] = padded_at(x, i, p);
}

template <typename T>
__global__ void crop_kernel(const T *__restrict__ xp, T *__restrict__ dx, int64_t total, pad_shape p) {
  TFG_CUDA_LOOP(i, total) dx[i] = cropped_at(xp, i, p);
}

template <typename T>
__global__ void max_pool_grad_kernel(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dx,
                                     int64_t total, pool_shape p) {
  TFG_CUDA_LOOP(i, total) dx[i] = max_pool_grad_at(x, dy, i, p);
}

template <typename T>
__global__ void avg_pool_grad_kernel(const T *__restrict__ dy, T *__restrict__ dx, int64_t total, pool_shape p) {
  TFG_CUDA_LOOP(i, total) dx[i] = avg_pool_grad_at(dy, i, p);
}

tfg_status launch_pad(tfg_kernel_ctx *ctx, bool f64, const void *x, void *xp, int64_t total, const pad_shape &p) {
  if (f64) return TFG_CUDA_LAUNCH(ctx, total, pad_kernel<double>, (const double *)x, (double *)xp, total, p);
  return TFG_CUDA_LAUNCH(ctx, total, pad_kernel<float>, (const float *)x, (float *)xp, total, p);
}

tfg_status launch_crop(tfg_kernel_ctx *ctx, bool f64, const void *xp, void *dx, int64_t total, const pad_shape &p) {
  if (f64) return TFG_CUDA_LAUNCH(ctx, total, crop_kernel<double>, (const double *)xp, (double *)dx, total, p);
  return TFG_CUDA_LAUNCH(ctx, total, crop_kernel<float>, (const float *)xp, (float *)dx, total, p);
}

/* ---- helpers ------------------------------------------------------------- */

bool f32_or_f64(tfg_dtype t) { return t == TFG_DTYPE_F32 || t == TFG_DTYPE_F64; }

tfg_status unsupported(tfg_kernel_ctx *ctx, const char *what, tfg_dtype a, tfg_dtype b) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s of %s and %s is not supported on CUDA (f32 and f64 are)", what,
                         tfg_dtype_name(a), tfg_dtype_name(b));
}

tfg_status bad_shapes(tfg_kernel_ctx *ctx, const char *what) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: the tensors' shapes do not agree with the node's attributes", what);
}

tfg_status too_big(tfg_kernel_ctx *ctx, const char *what) {
  return tfg_kernel_fail(ctx, TFG_ERR_LIMIT, "%s: a tensor exceeds cuDNN's 2^31-element range", what);
}

/* The cuDNN descriptors of one call, destroyed on every path out. */
struct cudnn_descs {
  tfg_cuda_handle<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> x, y;
  tfg_cuda_handle<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> w;
  tfg_cuda_handle<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> conv;
  tfg_cuda_handle<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor> pool;
};

/* A stream-ordered allocation, freed on the stream on every path out
 * (release() does it checked; the destructor unchecked, on errors). */
struct stream_buffer {
  void *p = nullptr;
  cudaStream_t s = nullptr;
  tfg_status release(tfg_kernel_ctx *ctx) {
    void *q = p;
    p = nullptr;
    if (q) TFG_CUDA_CHECK(ctx, cudaFreeAsync(q, s));
    return TFG_OK;
  }
  ~stream_buffer() {
    if (p) (void)cudaFreeAsync(p, s);
  }
};

/* ---- convolution --------------------------------------------------------- */

enum conv_dir { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };

/* One conv2d's geometry (x and y the forward's: for the gradients dx is
 * shaped like x and dy like y). */
struct conv_geom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, sh, sw, top, bottom, left, right;
};

/* Fills g from the forward's shapes and the conv attrs; TFG_ERR_DEVICE
 * when they disagree (the shape rule makes that a bug elsewhere). */
tfg_status conv_geom_init(tfg_kernel_ctx *ctx, const char *what, const tfg_attrs *at, const tfg_shape *x,
                          const tfg_shape *w, const tfg_shape *y, conv_geom *g) {
  if (x->rank != 4 || w->rank != 4 || y->rank != 4) return bad_shapes(ctx, what);
  *g = conv_geom{x->dim[0],    x->dim[1],     x->dim[2],  x->dim[3],  w->dim[0],    w->dim[2],
                 w->dim[3],    y->dim[2],     y->dim[3],  at->stride[0], at->stride[1], at->pad[0],
                 at->pad[1],   at->pad[2],    at->pad[3]};
  if (w->dim[1] != g->c || y->dim[0] != g->n || y->dim[1] != g->o) return bad_shapes(ctx, what);
  if (g->sh < 1 || g->sw < 1 || g->top < 0 || g->bottom < 0 || g->left < 0 || g->right < 0)
    return bad_shapes(ctx, what);
  int64_t span_h = g->h + g->top + g->bottom - g->kh, span_w = g->w + g->left + g->right - g->kw;
  if (span_h < 0 || span_w < 0 || g->oh != span_h / g->sh + 1 || g->ow != span_w / g->sw + 1)
    return bad_shapes(ctx, what);
  return TFG_OK;
}

/* Whether cuDNN's symmetric padding (top, left) gives exactly tfg's
 * output size: then it computes tfg's windows (see the top). */
bool conv_direct_fits(const conv_geom &g) {
  int64_t sh = g.h + 2 * g.top - g.kh, sw = g.w + 2 * g.left - g.kw;
  return sh >= 0 && sw >= 0 && sh / g.sh + 1 == g.oh && sw / g.sw + 1 == g.ow;
}

/* A chosen algorithm, cached per problem. */
struct algo_choice {
  bool found;
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};

typedef std::array<int64_t, 18> algo_key;
std::mutex algo_mutex;
std::map<algo_key, algo_choice> algo_cache;
const size_t ALGO_CACHE_MAX = 4096; /* past it (a shape sweep) start over */

/* Walks the heuristic's results (best first): the first that succeeded,
 * is deterministic (first pass; any, second pass), has the math type
 * allowed (fma_only: CUDNN_FMA_MATH) and whose workspace, re-queried
 * with its math type set on cd, is at most avail. ws_size(algo, &bytes)
 * queries the workspace; a failure there only skips the algorithm. */
template <typename Perf, typename WsSize>
tfg_status pick_algo(tfg_kernel_ctx *ctx, cudnnConvolutionDescriptor_t cd, const Perf *perf, int got, bool fma_only,
                     size_t avail, WsSize ws_size, algo_choice *out) {
  *out = algo_choice{false, 0, CUDNN_DEFAULT_MATH, 0};
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < got; i++) {
      const Perf &p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (pass == 0 && p.determinism != CUDNN_DETERMINISTIC) continue;
      if (pass == 1 && p.determinism == CUDNN_DETERMINISTIC) continue; /* already rejected on size */
      if (fma_only && p.mathType != CUDNN_FMA_MATH) continue;
      TFG_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(cd, p.mathType));
      size_t need = 0;
      if (ws_size((int)p.algo, &need) != CUDNN_STATUS_SUCCESS || need > avail) continue;
      *out = algo_choice{true, (int)p.algo, p.mathType, need};
      return TFG_OK;
    }
  return TFG_OK;
}

/* Chooses the algorithm of direction dir for the problem described by d
 * (x, w, y and conv descriptors set), within avail workspace bytes,
 * through the cache; leaves cd's math type set to the choice's. */
tfg_status choose_algo(tfg_kernel_ctx *ctx, conv_dir dir, const cudnn_descs &d, bool f64, const algo_key &key,
                       size_t avail, algo_choice *out) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  bool fma_only = !f64 && !cx->tf32;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(algo_mutex);
    auto it = algo_cache.find(key);
    if (it != algo_cache.end()) {
      *out = it->second;
      cached = true;
    }
  }
  if (!cached) {
    cudnnHandle_t h = cx->cudnn;
    TFG_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(d.conv, fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
    int got = 0;
    tfg_status s = TFG_OK;
    cudnnStatus_t st;
    const char *query;
    *out = algo_choice{false, 0, CUDNN_DEFAULT_MATH, 0};
    if (dir == CONV_FWD) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      query = "cudnnGetConvolutionForwardAlgorithm_v7";
      st = cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                  perf);
      if (st == CUDNN_STATUS_SUCCESS)
        s = pick_algo(ctx, d.conv, perf, got, fma_only, avail, [&](int a, size_t *bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)a,
                                                         bytes);
        }, out);
    } else if (dir == CONV_BWD_DATA) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      query = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
      st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                       &got, perf);
      if (st == CUDNN_STATUS_SUCCESS)
        s = pick_algo(ctx, d.conv, perf, got, fma_only, avail, [&](int a, size_t *bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x,
                                                              (cudnnConvolutionBwdDataAlgo_t)a, bytes);
        }, out);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      query = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
      st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf);
      if (st == CUDNN_STATUS_SUCCESS)
        s = pick_algo(ctx, d.conv, perf, got, fma_only, avail, [&](int a, size_t *bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                                (cudnnConvolutionBwdFilterAlgo_t)a, bytes);
        }, out);
    }
    /* A problem the query rejects (BAD_PARAM, NOT_SUPPORTED: e.g. a
     * padding wider than the kernel) has no algorithm, like one whose
     * results all fail: the caller then tries the padded form. */
    if (st != CUDNN_STATUS_SUCCESS && st != CUDNN_STATUS_BAD_PARAM && st != CUDNN_STATUS_NOT_SUPPORTED)
      return tfg_cuda_fail_call(ctx, query, cudnnGetErrorString(st), __FILE__, __LINE__);
    if (s != TFG_OK) return s;
    std::lock_guard<std::mutex> lock(algo_mutex);
    if (algo_cache.size() >= ALGO_CACHE_MAX) algo_cache.clear();
    algo_cache[key] = *out;
  }
  if (out->found) TFG_CUDNN_CHECK(ctx, cudnnSetConvolutionMathType(d.conv, out->math));
  return TFG_OK;
}

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* Runs one conv direction over the whole batch (see the top of the file):
 *   CONV_FWD         x, w in;   y out
 *   CONV_BWD_DATA    w, y in;   x out (dx; y is dy)
 *   CONV_BWD_FILTER  x, y in;   w out (dw; y is dy)
 * g has no empty dimension (the callers handle those). */
tfg_status conv_run(tfg_kernel_ctx *ctx, const char *what, conv_dir dir, const conv_geom &g, bool f64, void *x,
                    void *w, void *y) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  size_t es = f64 ? sizeof(double) : sizeof(float);
  cudnnDataType_t cdt = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (g.o * g.c * g.kh * g.kw > INT_MAX || g.top > INT_MAX || g.left > INT_MAX || g.sh > INT_MAX || g.sw > INT_MAX)
    return too_big(ctx, what);

  cudnn_descs d;
  TFG_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&d.x.h));
  TFG_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&d.y.h));
  TFG_CUDNN_CHECK(ctx, cudnnCreateFilterDescriptor(&d.w.h));
  TFG_CUDNN_CHECK(ctx, cudnnCreateConvolutionDescriptor(&d.conv.h));
  TFG_CUDNN_CHECK(ctx, cudnnSetFilter4dDescriptor(d.w, cdt, CUDNN_TENSOR_NCHW, (int)g.o, (int)g.c, (int)g.kh,
                                                  (int)g.kw));

  /* Padded form: the rows and columns the windows span. */
  int64_t hp = (g.oh - 1) * g.sh + g.kh, wp = (g.ow - 1) * g.sw + g.kw;
  pad_shape ps = {g.h, g.w, hp, wp, g.top, g.left};
  char *ws = (char *)cx->workspace;
  size_t ws_bytes = ws ? cx->workspace_bytes : 0;

  for (int padded = conv_direct_fits(g) ? 0 : 1; padded < 2; padded++) {
    int64_t ih = padded ? hp : g.h, iw = padded ? wp : g.w;
    int64_t per_img = g.c * ih * iw > g.o * g.oh * g.ow ? g.c * ih * iw : g.o * g.oh * g.ow;
    if (per_img > INT_MAX) return too_big(ctx, what);
    int64_t nb = g.n < INT_MAX / per_img ? g.n : INT_MAX / per_img;

    /* Where the padded buffer goes, and what workspace the algorithm gets. */
    size_t pimg = (size_t)(g.c * hp * wp) * es, buf_off = 0;
    bool own_buffer = false;
    if (padded) {
      int64_t fit = (int64_t)(ws_bytes / 2 / pimg);
      if (fit >= 1 && round_up((size_t)(nb < fit ? nb : fit) * pimg, 256) <= ws_bytes) {
        if (nb > fit) nb = fit;
        buf_off = round_up((size_t)nb * pimg, 256); /* the algorithm's part stays 256-byte aligned */
      } else {
        own_buffer = true;
      }
    }
    size_t avail = ws_bytes - buf_off;
    void *algo_ws = ws ? ws + buf_off : nullptr;

    TFG_CUDNN_CHECK(ctx, cudnnSetConvolution2dDescriptor(d.conv, padded ? 0 : (int)g.top, padded ? 0 : (int)g.left,
                                                         (int)g.sh, (int)g.sw, 1, 1, CUDNN_CROSS_CORRELATION, cdt));
    /* Sets the x and y descriptors for cnt images and picks the algorithm. */
    algo_choice choice;
    auto setup = [&](int64_t cnt) -> tfg_status {
      TFG_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, cdt, (int)cnt, (int)g.c, (int)ih,
                                                      (int)iw));
      TFG_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, cdt, (int)cnt, (int)g.o, (int)g.oh,
                                                      (int)g.ow));
      algo_key key = {dir, cx->device, f64, cnt, g.c, ih, iw, g.o, g.kh, g.kw, padded ? 0 : g.top,
                      padded ? 0 : g.left, g.sh, g.sw, cx->tf32, (int64_t)avail, 0, 0};
      return choose_algo(ctx, dir, d, f64, key, avail, &choice);
    };
    tfg_status s = setup(nb);
    if (s != TFG_OK) return s;
    if (!choice.found) {
      if (!padded) continue; /* e.g. a padding cuDNN refuses: pad it ourselves */
      return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: cuDNN has no algorithm for these shapes within the %zu-byte "
                             "workspace", what, avail);
    }

    stream_buffer own;
    char *buf = ws;
    if (own_buffer) {
      own.s = cx->stream;
      cudaError_t e = cudaMallocAsync(&own.p, (size_t)nb * pimg, cx->stream);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky; clear it for later checks */
        return tfg_kernel_fail(ctx, TFG_ERR_OOM, "%s: out of device memory for a %zu-byte padded copy of the input",
                               what, (size_t)nb * pimg);
      }
      if (e != cudaSuccess) return tfg_cuda_fail_call(ctx, "cudaMallocAsync", cudaGetErrorString(e), __FILE__, __LINE__);
      buf = (char *)own.p;
    }

    double one_d = 1.0, zero_d = 0.0;
    float one_f = 1.0f, zero_f = 0.0f;
    const void *one = f64 ? (const void *)&one_d : (const void *)&one_f;
    const void *zero = f64 ? (const void *)&zero_d : (const void *)&zero_f;
    size_t x_img = (size_t)(g.c * g.h * g.w) * es, y_img = (size_t)(g.o * g.oh * g.ow) * es;
    int64_t cur = nb;
    for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
      int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
      if (cnt != cur) { /* the last, smaller chunk */
        cur = cnt;
        if ((s = setup(cnt)) != TFG_OK) return s;
        if (!choice.found)
          return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: cuDNN has no algorithm for a batch of %lld", what,
                                 (long long)cnt);
      }
      char *xc = (char *)x + (size_t)n0 * x_img, *yc = (char *)y + (size_t)n0 * y_img;
      const void *src = xc; /* x as cuDNN reads it (FWD, BWD_FILTER): padded into buf, or in place */
      if (padded && dir != CONV_BWD_DATA) {
        if ((s = launch_pad(ctx, f64, xc, buf, cnt * g.c * hp * wp, ps)) != TFG_OK) return s;
        src = buf;
      }
      if (dir == CONV_FWD) {
        TFG_CUDNN_CHECK(ctx, cudnnConvolutionForward(cx->cudnn, one, d.x, src, d.w, w, d.conv,
                                                     (cudnnConvolutionFwdAlgo_t)choice.algo, algo_ws,
                                                     choice.workspace, zero, d.y, yc));
      } else if (dir == CONV_BWD_DATA) {
        void *dst = padded ? (void *)buf : (void *)xc;
        TFG_CUDNN_CHECK(ctx, cudnnConvolutionBackwardData(cx->cudnn, one, d.w, w, d.y, yc, d.conv,
                                                          (cudnnConvolutionBwdDataAlgo_t)choice.algo, algo_ws,
                                                          choice.workspace, zero, d.x, dst));
        if (padded && (s = launch_crop(ctx, f64, buf, xc, cnt * g.c * g.h * g.w, ps)) != TFG_OK) return s;
      } else {
        /* The first chunk writes dw, the later ones add to it. */
        TFG_CUDNN_CHECK(ctx, cudnnConvolutionBackwardFilter(cx->cudnn, one, d.x, src, d.y, yc, d.conv,
                                                            (cudnnConvolutionBwdFilterAlgo_t)choice.algo, algo_ws,
                                                            choice.workspace, n0 == 0 ? zero : one, d.w, w));
      }
    }
    return own.release(ctx);
  }
  return TFG_OK; /* not reached: the padded pass always returns */
}

/* Whether a pass of direction dir sums no product into its output (an
 * empty sum, or every tap reads padding): the output is then zeros. */
bool conv_sums_nothing(conv_dir dir, const conv_geom &g) {
  switch (dir) {
  case CONV_FWD: return g.c * g.kh * g.kw == 0 || g.h * g.w == 0;
  case CONV_BWD_DATA: return g.o == 0 || g.oh * g.ow == 0 || g.c * g.kh * g.kw == 0; /* no window reads anything */
  default: return g.n == 0 || g.oh * g.ow == 0 || g.h * g.w == 0;
  }
}

/* One conv op: out is one of x [N, C, H, W], w [O, C, KH, KW] and y [N, O,
 * OH, OW] (per dir, see conv_run), a and b its inputs; all one of f32 and
 * f64. Checks, then zeros or conv_run. */
tfg_status conv_op(tfg_kernel_ctx *ctx, const char *what, conv_dir dir, const tfg_attrs *at, const tfg_tensor *a,
                   const tfg_tensor *b, const tfg_tensor *out, const tfg_tensor *x, const tfg_tensor *w,
                   const tfg_tensor *y) {
  tfg_dtype dt = a->dtype;
  if (!f32_or_f64(dt) || b->dtype != dt || out->dtype != dt) return unsupported(ctx, what, a->dtype, b->dtype);
  conv_geom g;
  tfg_status s = conv_geom_init(ctx, what, at, &x->shape, &w->shape, &y->shape, &g);
  if (s != TFG_OK) return s;
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (conv_sums_nothing(dir, g)) {
    TFG_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, 0, (size_t)total * tfg_dtype_size(dt), tfg_cuda_of(ctx)->stream));
    return TFG_OK;
  }
  return conv_run(ctx, what, dir, g, dt == TFG_DTYPE_F64, x->data, w->data, y->data);
}

/* CONV2D: x [N, C, H, W], w [O, C, KH, KW] -> out [N, O, OH, OW]. */
tfg_status cuda_conv2d(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  return conv_op(ctx, "conv2d", CONV_FWD, &node->attrs, &in[0], &in[1], out, &in[0], &in[1], out);
}

/* CONV2D_GRAD_INPUT: (dy [N, O, OH, OW], w [O, C, KH, KW]) -> dx [N, C, H, W]. */
tfg_status cuda_conv2d_grad_input(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  return conv_op(ctx, "conv2d_grad_input", CONV_BWD_DATA, &node->attrs, &in[0], &in[1], out, out, &in[1], &in[0]);
}

/* CONV2D_GRAD_WEIGHT: (x [N, C, H, W], dy [N, O, OH, OW]) -> dw [O, C, KH, KW]. */
tfg_status cuda_conv2d_grad_weight(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                   tfg_tensor *out) {
  return conv_op(ctx, "conv2d_grad_weight", CONV_BWD_FILTER, &node->attrs, &in[0], &in[1], out, &in[0], out, &in[1]);
}

/* ---- pools ----------------------------------------------------------------- */

/* Fills p from x [N, C, H, W] (or dx), y [N, C, OH, OW] (or dy) and the
 * pool attrs; TFG_ERR_DEVICE when they disagree. */
tfg_status pool_shape_init(tfg_kernel_ctx *ctx, const char *what, const tfg_attrs *at, const tfg_shape *x,
                           const tfg_shape *y, pool_shape *p) {
  if (x->rank != 4 || y->rank != 4 || x->dim[0] != y->dim[0] || x->dim[1] != y->dim[1]) return bad_shapes(ctx, what);
  *p = pool_shape{x->dim[2], x->dim[3], y->dim[2], y->dim[3], at->size[0], at->size[1], at->stride[0], at->stride[1]};
  if (p->kh < 1 || p->kw < 1 || p->sh < 1 || p->sw < 1 || p->kh > p->h || p->kw > p->w ||
      p->oh != (p->h - p->kh) / p->sh + 1 || p->ow != (p->w - p->kw) / p->sw + 1)
    return bad_shapes(ctx, what);
  return TFG_OK;
}

/* MAX_POOL, AVG_POOL: cudnnPoolingForward over [planes, 1, H, W] chunks. */
tfg_status cuda_pool(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  bool avg = node->op == TFG_OP_AVG_POOL;
  const char *what = avg ? "avg_pool" : "max_pool";
  const tfg_tensor *x = &in[0];
  tfg_dtype dt = x->dtype;
  if (!f32_or_f64(dt) || out->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "pooling of %s is not supported on CUDA (f32 and f64 are)",
                           tfg_dtype_name(dt));
  pool_shape p;
  tfg_status s = pool_shape_init(ctx, what, &node->attrs, &x->shape, &out->shape, &p);
  if (s != TFG_OK) return s;
  int64_t planes = x->shape.dim[0] * x->shape.dim[1];
  if (planes == 0 || p.oh == 0 || p.ow == 0) return TFG_OK;
  if (p.h * p.w > INT_MAX || p.kh > INT_MAX || p.kw > INT_MAX || p.sh > INT_MAX || p.sw > INT_MAX)
    return too_big(ctx, what);
  int64_t chunk = INT_MAX / (p.h * p.w); /* >= 1; the output plane is smaller */

  bool f64 = dt == TFG_DTYPE_F64;
  cudnnDataType_t cdt = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnn_descs d;
  TFG_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&d.x.h));
  TFG_CUDNN_CHECK(ctx, cudnnCreateTensorDescriptor(&d.y.h));
  TFG_CUDNN_CHECK(ctx, cudnnCreatePoolingDescriptor(&d.pool.h));
  TFG_CUDNN_CHECK(ctx, cudnnSetPooling2dDescriptor(d.pool,
                                                   avg ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_MAX,
                                                   CUDNN_PROPAGATE_NAN, (int)p.kh, (int)p.kw, 0, 0, (int)p.sh,
                                                   (int)p.sw));
  double one_d = 1.0, zero_d = 0.0;
  float one_f = 1.0f, zero_f = 0.0f;
  const void *one = f64 ? (const void *)&one_d : (const void *)&one_f;
  const void *zero = f64 ? (const void *)&zero_d : (const void *)&zero_f;
  size_t es = tfg_dtype_size(dt);
  int64_t cur = 0;
  for (int64_t p0 = 0; p0 < planes; p0 += chunk) {
    int64_t cnt = planes - p0 < chunk ? planes - p0 : chunk;
    if (cnt != cur) {
      cur = cnt;
      TFG_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, cdt, (int)cnt, 1, (int)p.h, (int)p.w));
      TFG_CUDNN_CHECK(ctx, cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, cdt, (int)cnt, 1, (int)p.oh,
                                                      (int)p.ow));
    }
    const char *xc = (const char *)x->data + (size_t)(p0 * p.h * p.w) * es;
    char *yc = (char *)out->data + (size_t)(p0 * p.oh * p.ow) * es;
    TFG_CUDNN_CHECK(ctx, cudnnPoolingForward(cx->cudnn, d.pool, one, d.x, xc, zero, d.y, yc));
  }
  return TFG_OK;
}

/* MAX_POOL_GRAD: (x, dy) -> dx shaped like x; AVG_POOL_GRAD: (dy) -> dx,
 * the node's shape. Our gather kernels (see the top of the file). */
tfg_status cuda_pool_grad(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  bool avg = node->op == TFG_OP_AVG_POOL_GRAD;
  const char *what = avg ? "avg_pool_grad" : "max_pool_grad";
  const tfg_tensor *dy = avg ? &in[0] : &in[1];
  tfg_dtype dt = dy->dtype;
  if (!f32_or_f64(dt) || out->dtype != dt || (!avg && in[0].dtype != dt))
    return unsupported(ctx, what, avg ? dt : in[0].dtype, dt);
  if (!avg && !tfg_shape_eq(&in[0].shape, &out->shape)) return bad_shapes(ctx, what);
  pool_shape p;
  tfg_status s = pool_shape_init(ctx, what, &node->attrs, &out->shape, &dy->shape, &p);
  if (s != TFG_OK) return s;
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (avg) {
    if (dt == TFG_DTYPE_F64)
      return TFG_CUDA_LAUNCH(ctx, total, avg_pool_grad_kernel<double>, (const double *)dy->data, (double *)out->data,
                             total, p);
    return TFG_CUDA_LAUNCH(ctx, total, avg_pool_grad_kernel<float>, (const float *)dy->data, (float *)out->data,
                           total, p);
  }
  if (dt == TFG_DTYPE_F64)
    return TFG_CUDA_LAUNCH(ctx, total, max_pool_grad_kernel<double>, (const double *)in[0].data,
                           (const double *)dy->data, (double *)out->data, total, p);
  return TFG_CUDA_LAUNCH(ctx, total, max_pool_grad_kernel<float>, (const float *)in[0].data, (const float *)dy->data,
                         (float *)out->data, total, p);
}

} /* namespace */

extern "C" void tfg_cuda_register_conv(tfg_kernel_fn *table) {
  static const tfg_cuda_kernel_row rows[] = {
      {TFG_OP_CONV2D, cuda_conv2d},
      {TFG_OP_CONV2D_GRAD_INPUT, cuda_conv2d_grad_input},
      {TFG_OP_CONV2D_GRAD_WEIGHT, cuda_conv2d_grad_weight},
      {TFG_OP_MAX_POOL, cuda_pool}, {TFG_OP_AVG_POOL, cuda_pool},
      {TFG_OP_MAX_POOL_GRAD, cuda_pool_grad}, {TFG_OP_AVG_POOL_GRAD, cuda_pool_grad},
  };
  tfg_cuda_register_rows(table, rows);
}
