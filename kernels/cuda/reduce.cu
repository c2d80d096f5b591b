/* kernels/cuda/reduce.cu: SUM, MEAN, MAX over a set of axes, and ARGMAX,
 * on the GPU. The counterpart of kernels/cpu/reduce.c (tfg_cpu_reduce,
 * tfg_cpu_argmax); same dtypes, same checks, same results within the
 * per-dtype tolerance. f16 and bf16 run staged (kernels/cuda/registry.cu,
 * half.cu): the f32 reduction of an f32 copy, rounded once.
 *
 * How it maps onto the CPU kernel:
 *  - The shape is simplified by the CPU's own code (tfg_reduce_simplify,
 *    kernels/index_math.h): size-1 axes dropped, neighbouring axes
 *    that are both kept or both reduced merged. What is left is outer kept
 *    blocks (kdim, kst), outer reduced blocks (rdim, rst) and the last
 *    block of L contiguous elements, reduced or kept. ARGMAX is the same
 *    problem with the one axis attrs.axis reduced (a mask of one bit).
 *  - Last block reduced (row sums, CPU: contig): each output reduces
 *    count = R * L elements, R = prod(rdim); element e of an output sits at
 *    kept_offset(o) + red_offset(e / L) + e % L. One warp (count <= 1024)
 *    or one 256-thread block per output, threads striding over e;
 *    reduce_rows.
 *  - Last block kept (column sums, CPU: rows): output o = (ok, j), j < L;
 *    element r < R at kept_offset(ok) + red_offset(r) + j. 32 x 8 blocks:
 *    x over 32 neighbouring columns (coalesced), y splits r; reduce_cols.
 *  - A long reduction (count > CHUNK in rows; in columns R > COLS_MIN
 *    when the column tiles alone give fewer than COLS_TARGET blocks, and
 *    always R > RCHUNK) is cut into `splits` fixed pieces whose partials
 *    (accumulator type) go to
 *    stream-ordered scratch (cudaMallocAsync) and are combined by
 *    reduce_finish, one warp per output. Like the CPU's BLOCK, the piece
 *    size depends on the shape only, never on the device, so results are
 *    reproducible run to run and across GPUs.
 *  - ARGMAX's index along the axis is e (rows) or r (columns): with one
 *    reduced axis the merged reduced block is that axis.
 *
 * Precision and order: as on the CPU, f32 and f64 sums accumulate in
 * double and are rounded once (MEAN divides the double sum by the count
 * in double first); integer sums wrap in 64 bits (unsigned) and are then
 * narrowed (i32 keeps the low 32 bits). The association differs from the
 * CPU's (per-thread strided partials, then fixed warp-shuffle and shared
 * memory trees), but it is fixed by the shape and launch geometry alone:
 * no atomics, deterministic. MAX and ARGMAX compare in the input dtype.
 * MAX propagates NaN, as the CPU does (which NaN is kept may differ; all
 * are NaN). ARGMAX's combine is order-independent: a NaN beats every
 * number, equal values (and two NaNs) go to the smaller index; so any
 * tree yields the CPU's sequential "first maximum, first NaN".
 *
 * Empty tensors: no outputs: nothing launched. Reducing an empty axis:
 * SUM 0, MEAN NaN (0 / 0 in double), MAX and ARGMAX fail before launching
 * (TFG_ERR_SHAPE, the CPU's messages). f16/bf16, bool: TFG_ERR_DEVICE.
 *
 * 64-bit indexing throughout (element offsets, output and piece indices);
 * grids are capped and every kernel loops grid-stride. */
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda/common.cuh" /* with tfg's C headers, in C linkage */

namespace {

enum {
  THREADS = 256,      /* every kernel's block size */
  WARP = 32,
  WARP_MAX = 1024,    /* rows: reductions of up to this many elements take one warp */
  CHUNK = 32768,      /* rows: elements per piece (128 per thread of a block) */
  RCHUNK = 2048,      /* columns: reduced rows per piece (256 per thread row) */
  COLS_X = 32,        /* columns: block shape */
  COLS_Y = THREADS / COLS_X,
  COLS_TARGET = 1024, /* columns: blocks wanted (pieces of rows per column tile, see build_geom) */
  COLS_MIN = 64,      /* columns: the fewest reduced rows in a piece (8 per thread row) */
};
const unsigned FULL = 0xffffffffu;

/* The simplified reduction (see the file comment): the CPU's
 * tfg_reduce_shape (nk, kdim, kst; nr, rdim, rst; the last block L,
 * last_reduced) and the launch plan. Passed by value. */
struct Geom : tfg_reduce_shape {
  long long Lr;       /* L when the last block is reduced, else 1 */
  long long R;        /* prod(rdim): 1 when nr == 0 */
  long long count;    /* elements per output: R * Lr */
  long long nout;
  long long splits;   /* pieces per output (1: no partials) */
  long long span;     /* elements (rows) or reduced rows (columns) per piece */
};

/* Input offset of the outer kept index ok (row-major over kdim). */
__device__ __forceinline__ long long kept_offset(const Geom &g, long long ok) {
  long long off = 0;
  for (int i = g.nk - 1; i >= 0; i--) {
    off += (ok % g.kdim[i]) * g.kst[i];
    ok /= g.kdim[i];
  }
  return off;
}

/* Input offset of the outer reduced index r (row-major over rdim). */
__device__ __forceinline__ long long red_offset(const Geom &g, long long r) {
  if (g.nr == 1) return r * g.rst[0];
  long long off = 0;
  for (int i = g.nr - 1; i >= 0; i--) {
    off += (r % g.rdim[i]) * g.rst[i];
    r /= g.rdim[i];
  }
  return off;
}

/* ---- the reduction operators --------------------------------------------- */

template <class T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }
template <> __device__ __forceinline__ bool is_nan<int32_t>(int32_t) { return false; }
template <> __device__ __forceinline__ bool is_nan<int64_t>(int64_t) { return false; }

/* The identity of MAX: below every value (-inf for floats: a max of -infs
 * is still -inf, and a NaN still wins). */
template <class T> __device__ __forceinline__ T lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -INFINITY; }
template <> __device__ __forceinline__ double lowest<double>() { return -(double)INFINITY; }
template <> __device__ __forceinline__ int32_t lowest<int32_t>() { return INT32_MIN; }
template <> __device__ __forceinline__ int64_t lowest<int64_t>() { return INT64_MIN; }

template <class T> struct SumAcc { typedef double type; };        /* f32, f64: in double */
template <> struct SumAcc<int32_t> { typedef unsigned long long type; }; /* wraps */
template <> struct SumAcc<int64_t> { typedef unsigned long long type; };

/* Each operator: In, Out, Acc; identity(); load(value, index along the
 * reduction); combine(a, b); store(acc, count). */
template <class T, bool MEAN> struct SumOp {
  typedef T In;
  typedef T Out;
  typedef typename SumAcc<T>::type Acc;
  __device__ static Acc identity() { return 0; }
  __device__ static Acc load(T v, long long) { return (Acc)v; }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static Out store(Acc a, double count) {
    if constexpr (MEAN) return (T)((double)a / count);
    else if constexpr (std::is_floating_point<T>::value) return (T)a;
    else return (T)(long long)a; /* the low bits, as the CPU's (T)int64 */
  }
};

template <class T> struct MaxOp {
  typedef T In;
  typedef T Out;
  typedef T Acc;
  __device__ static Acc identity() { return lowest<T>(); }
  __device__ static Acc load(T v, long long) { return v; }
  __device__ static Acc combine(Acc a, Acc b) { return (b > a || is_nan(b)) ? b : a; }
  __device__ static Out store(Acc a, double) { return a; }
};

template <class T> struct ArgAcc {
  T v;
  long long i;
};

template <class T> struct ArgmaxOp {
  typedef T In;
  typedef int32_t Out;
  typedef ArgAcc<T> Acc;
  __device__ static Acc identity() {
    Acc a;
    a.v = lowest<T>();
    a.i = INT64_MAX; /* loses every tie */
    return a;
  }
  __device__ static Acc load(T v, long long e) {
    Acc a;
    a.v = v;
    a.i = e;
    return a;
  }
  /* A total preference, so the result does not depend on the tree: NaN
   * over numbers, the larger number, and on ties the smaller index. */
  __device__ static Acc combine(Acc a, Acc b) {
    bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an != bn) return an ? a : b;
    if (!an) {
      if (b.v > a.v) return b;
      if (a.v > b.v) return a;
    }
    return b.i < a.i ? b : a;
  }
  __device__ static Out store(Acc a, double) { return (int32_t)a.i; }
};

/* ---- warp and block trees -------------------------------------------------- */

template <class A> __device__ __forceinline__ A shfl_down(A v, int d) { return __shfl_down_sync(FULL, v, d); }
template <class T> __device__ __forceinline__ ArgAcc<T> shfl_down(ArgAcc<T> v, int d) {
  ArgAcc<T> r;
  r.v = __shfl_down_sync(FULL, v.v, d);
  r.i = __shfl_down_sync(FULL, v.i, d);
  return r;
}

/* The whole warp (all 32 lanes) takes part; lane 0 gets the result. */
template <class Op> __device__ __forceinline__ typename Op::Acc warp_reduce(typename Op::Acc a) {
  for (int d = WARP / 2; d > 0; d >>= 1) a = Op::combine(a, shfl_down(a, d));
  return a;
}

/* The whole block (THREADS threads) takes part; thread 0 gets the result.
 * Ends with a barrier, so a loop may call it again. */
template <class Op> __device__ __forceinline__ typename Op::Acc block_reduce(typename Op::Acc a) {
  typedef typename Op::Acc Acc;
  __shared__ Acc part[THREADS / WARP];
  int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
  a = warp_reduce<Op>(a);
  if (lane == 0) part[w] = a;
  __syncthreads();
  if (w == 0) {
    a = lane < THREADS / WARP ? part[lane] : Op::identity();
    a = warp_reduce<Op>(a);
  }
  __syncthreads();
  return a;
}

/* ---- kernels ---------------------------------------------------------------- */

/* Last block reduced: groups of G threads (a warp, or the whole block),
 * one (output, piece) item per group at a time. Lanes stride over the
 * piece's elements e, each in a fixed order; the group's tree combines. */
template <class Op, int G>
__global__ void __launch_bounds__(THREADS)
reduce_rows(const typename Op::In *__restrict__ x, typename Op::Out *__restrict__ y,
            typename Op::Acc *__restrict__ part, Geom g) {
  typedef typename Op::Acc Acc;
  const int groups = THREADS / G;
  const int lane = threadIdx.x % G, grp = threadIdx.x / G;
  const long long items = g.nout * g.splits;
  /* The loop bound is uniform over a group (a warp or the block), as the
   * trees need. */
  for (long long it = (long long)blockIdx.x * groups + grp; it < items;
       it += (long long)gridDim.x * groups) {
    long long o = it / g.splits, s = it % g.splits;
    long long e0 = s * g.span, e1 = e0 + g.span < g.count ? e0 + g.span : g.count;
    const typename Op::In *p = x + kept_offset(g, o);
    Acc a = Op::identity();
    if (g.nr == 0) { /* one contiguous run: the common row reduction */
      for (long long e = e0 + lane; e < e1; e += G) a = Op::combine(a, Op::load(p[e], e));
    } else if (e0 + lane < e1) {
      /* e = r * Lr + l, stepped by G without dividing per element. */
      long long e = e0 + lane, r = e / g.Lr, l = e % g.Lr;
      const long long dr = G / g.Lr, dl = G % g.Lr;
      long long roff = red_offset(g, r);
      for (;;) {
        a = Op::combine(a, Op::load(p[roff + l], e));
        e += G;
        if (e >= e1) break;
        long long r0 = r;
        r += dr;
        l += dl;
        if (l >= g.Lr) {
          l -= g.Lr;
          r++;
        }
        if (r != r0) roff = red_offset(g, r);
      }
    }
    if (G == WARP) a = warp_reduce<Op>(a);
    else a = block_reduce<Op>(a);
    if (lane == 0) {
      if (g.splits == 1) y[o] = Op::store(a, (double)g.count);
      else part[it] = a;
    }
  }
}

/* Last block kept: a 32 x 8 block takes 32 neighbouring columns j of one
 * outer kept index and one piece of the reduced rows r; thread row y
 * takes r = r0 + y, r0 + y + 8, ...; a shared-memory tree over y. */
template <class Op>
__global__ void __launch_bounds__(THREADS)
reduce_cols(const typename Op::In *__restrict__ x, typename Op::Out *__restrict__ y,
            typename Op::Acc *__restrict__ part, Geom g) {
  typedef typename Op::Acc Acc;
  __shared__ Acc sm[COLS_Y][COLS_X];
  const int tx = threadIdx.x % COLS_X, ty = threadIdx.x / COLS_X;
  const long long tiles = (g.L + COLS_X - 1) / COLS_X;
  const long long items = g.nout / g.L * tiles * g.splits;
  for (long long it = blockIdx.x; it < items; it += gridDim.x) {
    long long s = it % g.splits, t = it / g.splits;
    long long ok = t / tiles, j = t % tiles * COLS_X + tx;
    long long r0 = s * g.span, r1 = r0 + g.span < g.R ? r0 + g.span : g.R;
    Acc a = Op::identity();
    if (j < g.L) {
      const typename Op::In *p = x + kept_offset(g, ok) + j;
      for (long long r = r0 + ty; r < r1; r += COLS_Y) a = Op::combine(a, Op::load(p[red_offset(g, r)], r));
    }
    sm[ty][tx] = a;
    __syncthreads();
    for (int h = COLS_Y / 2; h > 0; h >>= 1) {
      if (ty < h) sm[ty][tx] = Op::combine(sm[ty][tx], sm[ty + h][tx]);
      __syncthreads();
    }
    if (ty == 0 && j < g.L) {
      long long o = ok * g.L + j;
      if (g.splits == 1) y[o] = Op::store(sm[0][tx], (double)g.count);
      else part[o * g.splits + s] = sm[0][tx];
    }
    __syncthreads();
  }
}

/* Combines each output's pieces part[o * splits + k], k < splits: one warp
 * per output, lanes striding over k, then the warp's tree. */
template <class Op>
__global__ void __launch_bounds__(THREADS)
reduce_finish(const typename Op::Acc *__restrict__ part, typename Op::Out *__restrict__ y,
              long long nout, long long splits, double count) {
  typedef typename Op::Acc Acc;
  const int lane = threadIdx.x % WARP;
  const long long warps = (long long)gridDim.x * (THREADS / WARP);
  for (long long o = (long long)blockIdx.x * (THREADS / WARP) + threadIdx.x / WARP; o < nout; o += warps) {
    Acc a = Op::identity();
    for (long long k = lane; k < splits; k += WARP) a = Op::combine(a, part[o * splits + k]);
    a = warp_reduce<Op>(a);
    if (lane == 0) y[o] = Op::store(a, count);
  }
}

/* A reduction over no elements: the identity stored (SUM 0, MEAN 0/0 = NaN). */
template <class Op>
__global__ void __launch_bounds__(THREADS) reduce_empty(typename Op::Out *__restrict__ y, long long nout) {
  for (long long o = (long long)blockIdx.x * THREADS + threadIdx.x; o < nout; o += (long long)gridDim.x * THREADS)
    y[o] = Op::store(Op::identity(), 0.0);
}

/* ---- host side --------------------------------------------------------------- */

/* Builds g for input shape s and the reduced-axes mask: the CPU's
 * simplification (tfg_reduce_simplify), then the launch plan. count is
 * the number of elements reduced into each output (> 0), nout > 0. */
void build_geom(Geom *g, const tfg_shape *s, uint32_t axes, long long count, long long nout) {
  *g = Geom();
  tfg_reduce_simplify(g, s, axes);
  g->R = 1;
  for (int i = 0; i < g->nr; i++) g->R *= g->rdim[i];
  g->Lr = g->last_reduced ? g->L : 1;
  g->count = count; /* == R * Lr: size-1 axes change neither */
  g->nout = nout;
  if (g->last_reduced) {
    g->splits = count > CHUNK ? (count + CHUNK - 1) / CHUNK : 1;
    g->span = g->splits > 1 ? (long long)CHUNK : count;
  } else {
    /* Columns: enough blocks to fill a GPU. A bias gradient [B*T, n] to
     * [n] has only n / 32 column tiles (24 for n 768), so with pieces of
     * RCHUNK rows it ran on a few dozen blocks, each thread walking
     * hundreds of rows one load at a time. Cut the rows into pieces of
     * COLS_MIN..RCHUNK rows (a multiple of COLS_Y), about COLS_TARGET
     * blocks in all; fixed by the shape alone, as above. */
    long long tiles = g->nout / g->L * ((g->L + COLS_X - 1) / COLS_X);
    long long want = (COLS_TARGET + tiles - 1) / tiles;
    long long span = (g->R + want - 1) / want;
    span = (span + COLS_Y - 1) / COLS_Y * COLS_Y;
    if (span < COLS_MIN) span = COLS_MIN;
    if (span > RCHUNK) span = RCHUNK;
    g->splits = g->R > span ? (g->R + span - 1) / span : 1;
    g->span = g->splits > 1 ? span : g->R;
  }
}

/* Queues the reduction of x into y on the launch's stream. */
template <class Op> tfg_status run(tfg_kernel_ctx *ctx, const Geom &g, const void *xv, void *yv) {
  typedef typename Op::Acc Acc;
  cudaStream_t stream = tfg_cuda_of(ctx)->stream;
  const typename Op::In *x = (const typename Op::In *)xv;
  typename Op::Out *y = (typename Op::Out *)yv;
  Acc *part = NULL;
  if (g.splits > 1)
    TFG_CUDA_CHECK(ctx, cudaMallocAsync((void **)&part, sizeof(Acc) * (size_t)(g.nout * g.splits), stream));
  tfg_status s = TFG_OK;
  if (g.last_reduced && g.count <= WARP_MAX) {
    reduce_rows<Op, WARP><<<tfg_cuda_grid(g.nout * g.splits, THREADS / WARP), THREADS, 0, stream>>>(x, y, part, g);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "reduce_rows<<<>>>");
  } else if (g.last_reduced) {
    reduce_rows<Op, THREADS><<<tfg_cuda_grid(g.nout * g.splits, 1), THREADS, 0, stream>>>(x, y, part, g);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "reduce_rows<<<>>>");
  } else {
    long long items = g.nout / g.L * ((g.L + COLS_X - 1) / COLS_X) * g.splits;
    reduce_cols<Op><<<tfg_cuda_grid(items, 1), THREADS, 0, stream>>>(x, y, part, g);
    TFG_CUDA_NOTE_LAUNCH(ctx, &s, "reduce_cols<<<>>>");
  }
  if (part) {
    if (s == TFG_OK) {
      reduce_finish<Op><<<tfg_cuda_grid(g.nout, THREADS / WARP), THREADS, 0, stream>>>(part, y, g.nout, g.splits,
                                                                                    (double)g.count);
      TFG_CUDA_NOTE_LAUNCH(ctx, &s, "reduce_finish<<<>>>");
    }
    TFG_CUDA_FREE_SCRATCH(ctx, &s, part);
  }
  return s;
}

template <class Op> tfg_status run_empty(tfg_kernel_ctx *ctx, void *y, long long nout) {
  reduce_empty<Op><<<tfg_cuda_grid(nout, THREADS), THREADS, 0, tfg_cuda_of(ctx)->stream>>>((typename Op::Out *)y, nout);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

const char *op_name(tfg_op_id op) {
  return op == TFG_OP_SUM ? "sum" : op == TFG_OP_MEAN ? "mean" : op == TFG_OP_MAX ? "max" : "argmax";
}

/* SUM, MEAN, MAX of in[0] over the input axes set in attrs.axes; out has
 * the reduced shape (with or without keepdims). f32/f64 for all three,
 * i32/i64 for SUM and MAX, as tfg_cpu_reduce. */
tfg_status cuda_reduce(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0];
  tfg_op_id op = node->op;
  tfg_dtype dt = x->dtype;
  bool ok = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64 ||
            ((dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64) && op != TFG_OP_MEAN);
  if (!ok || out->dtype != dt || (op != TFG_OP_SUM && op != TFG_OP_MEAN && op != TFG_OP_MAX))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on CUDA", op_name(op),
                           tfg_dtype_name(dt));
  const tfg_shape *s = &x->shape;
  uint32_t axes = node->attrs.axes;
  long long count = tfg_reduce_count(s, axes), nout = tfg_shape_numel(&out->shape), nin = tfg_shape_numel(s);
  if (count * nout != nin && count != 0)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "reduction: output size %lld does not match", nout);
  if (nout == 0) return TFG_OK;
  if (count == 0) { /* reducing an empty axis */
    if (op == TFG_OP_MAX) return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "max over an empty axis has no value");
    bool mean = op == TFG_OP_MEAN;
    switch (dt) {
    case TFG_DTYPE_F32: return mean ? run_empty<SumOp<float, true>>(ctx, out->data, nout)
                                    : run_empty<SumOp<float, false>>(ctx, out->data, nout);
    case TFG_DTYPE_F64: return mean ? run_empty<SumOp<double, true>>(ctx, out->data, nout)
                                    : run_empty<SumOp<double, false>>(ctx, out->data, nout);
    case TFG_DTYPE_I32: return run_empty<SumOp<int32_t, false>>(ctx, out->data, nout);
    default: return run_empty<SumOp<int64_t, false>>(ctx, out->data, nout);
    }
  }
  Geom g;
  build_geom(&g, s, axes, count, nout);
  const void *xd = x->data;
  void *yd = out->data;
  if (op == TFG_OP_MAX) {
    switch (dt) {
    case TFG_DTYPE_F32: return run<MaxOp<float>>(ctx, g, xd, yd);
    case TFG_DTYPE_F64: return run<MaxOp<double>>(ctx, g, xd, yd);
    case TFG_DTYPE_I32: return run<MaxOp<int32_t>>(ctx, g, xd, yd);
    default: return run<MaxOp<int64_t>>(ctx, g, xd, yd);
    }
  }
  if (op == TFG_OP_MEAN)
    return dt == TFG_DTYPE_F32 ? run<SumOp<float, true>>(ctx, g, xd, yd) : run<SumOp<double, true>>(ctx, g, xd, yd);
  switch (dt) {
  case TFG_DTYPE_F32: return run<SumOp<float, false>>(ctx, g, xd, yd);
  case TFG_DTYPE_F64: return run<SumOp<double, false>>(ctx, g, xd, yd);
  case TFG_DTYPE_I32: return run<SumOp<int32_t, false>>(ctx, g, xd, yd);
  default: return run<SumOp<int64_t, false>>(ctx, g, xd, yd);
  }
}

/* The index (i32) of the first maximum of in[0] along attrs.axis, a NaN
 * beating every number; out has the input's shape without that axis.
 * f32 f64 i32 i64, as tfg_cpu_argmax. */
tfg_status cuda_argmax(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  const tfg_tensor *x = &in[0];
  tfg_dtype dt = x->dtype;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64 && dt != TFG_DTYPE_I32 && dt != TFG_DTYPE_I64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "argmax on %s is not supported on CUDA", tfg_dtype_name(dt));
  if (out->dtype != TFG_DTYPE_I32)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "argmax writes i32, not %s", tfg_dtype_name(out->dtype));
  long long axis = node->attrs.axis;
  if (axis < 0 || axis >= x->shape.rank)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "argmax: axis %lld is out of range", axis);
  long long len = x->shape.dim[axis], outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= x->shape.dim[i];
  for (int i = (int)axis + 1; i < x->shape.rank; i++) inner *= x->shape.dim[i];
  long long nout = tfg_shape_numel(&out->shape);
  if (nout != outer * inner)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "argmax: output size %lld does not match", nout);
  if (nout == 0) return TFG_OK;
  if (len == 0) return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "argmax over an empty axis has no value");
  if (len > INT32_MAX)
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT, "argmax: axis of %lld elements exceeds i32", len);
  Geom g;
  build_geom(&g, &x->shape, 1u << axis, len, nout);
  switch (dt) {
  case TFG_DTYPE_F32: return run<ArgmaxOp<float>>(ctx, g, x->data, out->data);
  case TFG_DTYPE_F64: return run<ArgmaxOp<double>>(ctx, g, x->data, out->data);
  case TFG_DTYPE_I32: return run<ArgmaxOp<int32_t>>(ctx, g, x->data, out->data);
  default: return run<ArgmaxOp<int64_t>>(ctx, g, x->data, out->data);
  }
}

} /* namespace */

extern "C" void tfg_cuda_register_reduce(tfg_kernel_fn *table) {
  static const tfg_cuda_kernel_row rows[] = {
      {TFG_OP_SUM, cuda_reduce}, {TFG_OP_MEAN, cuda_reduce}, {TFG_OP_MAX, cuda_reduce},
      {TFG_OP_ARGMAX, cuda_argmax},
  };
  tfg_cuda_register_rows(table, rows);
}
