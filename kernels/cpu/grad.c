/* kernels/cpu/grad.c: the gradient ops that are not compositions of
 * other ops: relu_grad, gelu_grad, cross_entropy_grad, layer_norm_grad,
 * conv2d_grad_input, conv2d_grad_weight, max/avg_pool_grad and
 * embedding_grad (ir/ops.h lists their contracts).
 *
 * Each math kernel is written once as a macro and instantiated for f32
 * and f64. As in nn.c, per-row sums (softmax denominators, layer_norm
 * moments) are formed in double for both dtypes and every result is
 * rounded once to the output's dtype.
 *
 * Determinism: every kernel splits its work over ctx->pool so that each
 * output element is written by exactly one piece, and a piece adds its
 * contributions in a fixed order (no atomics, no per-thread partials).
 * The scatter-shaped gradients (col2im, the pools' windows, embedding
 * rows) would race if split by their *input* element, so they are split
 * by *output* plane or row range instead: the results are the same bits
 * for every pool and thread count. The two conv gradients are lowered to
 * gemms like the forward conv, through the geometry, im2col, gemm and
 * image grouping it defines (kernels/cpu/conv_impl.h); OpenBLAS's threads
 * split a gemm's output, never its inner sum, so those are reproducible
 * too, and the sum over the batch in conv2d_grad_weight is always taken
 * in the same group order.
 *
 * Run-time values (labels, ids) are checked before anything is written,
 * so a failing kernel names the first bad entry and leaves out alone. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "kernels/cpu/conv_impl.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vmath.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_RELU_GRAD, tfg_cpu_relu_grad},
    {TFG_OP_GELU_GRAD, tfg_cpu_gelu_grad},
    {TFG_OP_CROSS_ENTROPY_GRAD, tfg_cpu_cross_entropy_grad},
    {TFG_OP_LAYER_NORM_GRAD, tfg_cpu_layer_norm_grad},
    {TFG_OP_CONV2D_GRAD_INPUT, tfg_cpu_conv2d_grad_input},
    {TFG_OP_CONV2D_GRAD_WEIGHT, tfg_cpu_conv2d_grad_weight},
    {TFG_OP_MAX_POOL_GRAD, tfg_cpu_pool_grad},
    {TFG_OP_AVG_POOL_GRAD, tfg_cpu_pool_grad},
    {TFG_OP_EMBEDDING_GRAD, tfg_cpu_embedding_grad},
};

void tfg_cpu_register_grad(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

/* GCC's -O2 cost model vectorizes none of the row loops here (their trip
 * counts are not known multiples of the width; kernels/cpu/elementwise.c
 * says more): the dynamic model does, with a scalar epilogue. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* About this many elements of work per chunk (as in nn.c and conv.c). */
#define GRAIN_ELEMS (1 << 14)

/* The grain, in units of work that each cost `cost` elements. */
static int64_t grain_for(int64_t cost) { return tfg_parallel_grain(GRAIN_ELEMS, cost); }

/* Checks that every tensor in ts[0..n) has dtype dt (f32 or f64). */
static tfg_status same_float(tfg_kernel_ctx *ctx, const char *what, tfg_dtype dt,
                             const tfg_tensor *const *ts, int n) {
  if (!tfg_cpu_is_float(dt)) return tfg_cpu_unsupported(ctx, what, dt);
  for (int i = 0; i < n; i++)
    if (ts[i]->dtype != dt)
      return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s mixes %s and %s (one float dtype expected)",
                             what, tfg_dtype_name(dt), tfg_dtype_name(ts[i]->dtype));
  return TFG_OK;
}


/* ---- relu_grad, gelu_grad ------------------------------------------------ */

typedef struct pointwise_job {
  const void *x, *dy;
  void *dx;
} pointwise_job;

/* Defines NAME_SFX, the tfg_parallel_body that runs the row function
 * ROW(x, dy, dx, n) of T on its range of a pointwise_job. */
#define DEFINE_POINTWISE_GRAD(NAME, ROW, T, SFX)                                \
  static void NAME##_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {  \
    const pointwise_job *j = arg;                                               \
    (void)chunk;                                                                \
    ROW((const T *)j->x + lo, (const T *)j->dy + lo, (T *)j->dx + lo, hi - lo); \
  }

/* relu_grad passes dy where x > 0 and gives 0 elsewhere, x = 0 included
 * (the subgradient PyTorch picks). A NaN x gives 0, as the op's contract
 * "dy where x > 0" says; PyTorch's threshold_backward tests "y <= 0"
 * instead and so passes dy through at a NaN. */
#define DEFINE_RELU_GRAD(T, SFX)                                                      \
  static inline void relu_grad_row_##SFX(const T *x, const T *dy, T *dx, int64_t n) { \
    for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : (T)0;                  \
  }                                                                                   \
  DEFINE_POINTWISE_GRAD(relu_grad, relu_grad_row_##SFX, T, SFX)
DEFINE_RELU_GRAD(float, f32)
DEFINE_RELU_GRAD(double, f64)

/* gelu'(x) times dy, a row at a time (kernels/cpu/vmath.h: erfc and exp
 * over whole rows, in double, rounded once for both dtypes: f32 would
 * lose ~2z^2 ulp in erfc(z), as the forward gelu's comment explains). */
DEFINE_POINTWISE_GRAD(gelu_grad, tfg_vm_gelu_grad_f32, float, f32)
DEFINE_POINTWISE_GRAD(gelu_grad, tfg_vm_gelu_grad_f64, double, f64)

/* (x, dy) -> dx for RELU_GRAD / GELU_GRAD: x and dy have the output's
 * element count and dtype (f32/f64). */
static tfg_status pointwise_grad(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *in,
                                 tfg_tensor *out, tfg_parallel_body f32, tfg_parallel_body f64,
                                 int64_t grain) {
  const tfg_tensor *x = &in[0], *dy = &in[1];
  tfg_status st = same_float(ctx, what, x->dtype, (const tfg_tensor *const[]){dy, out}, 2);
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&x->shape);
  TFG_ASSERT(tfg_shape_numel(&dy->shape) == n && tfg_shape_numel(&out->shape) == n);
  pointwise_job j = {.x = x->data, .dy = dy->data, .dx = out->data};
  if (n > 0) tfg_parallel_for(ctx->pool, n, grain, x->dtype == TFG_DTYPE_F32 ? f32 : f64, &j);
  return TFG_OK;
}

/* RELU_GRAD: (x, dy) -> dy where x > 0, else 0; f32/f64, one shape. */
TFG_CPU_KERNEL(tfg_cpu_relu_grad) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_relu_grad);
  (void)node;
  return pointwise_grad(ctx, "relu_grad", in, out, relu_grad_f32, relu_grad_f64, 2 * GRAIN_ELEMS);
}

/* GELU_GRAD: (x, dy) -> dy * (Phi(x) + x phi(x)), the derivative of the
 * exact gelu; f32/f64, one shape. */
TFG_CPU_KERNEL(tfg_cpu_gelu_grad) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_gelu_grad);
  (void)node;
  return pointwise_grad(ctx, "gelu_grad", in, out, gelu_grad_f32, gelu_grad_f64, GRAIN_ELEMS / 2);
}

/* ---- cross_entropy_grad ------------------------------------------------- */

typedef struct ce_grad_job {
  const void *logits;
  const tfg_tensor *labels;
  void *dx;
  int64_t c;
  double scale; /* dy / N */
} ce_grad_job;

/* Row r: dx = (softmax(x) - onehot(label)) * dy / N, the softmax in the
 * max-shifted form (exp of x - max <= 0 never overflows, so logits of
 * +-1000 give exact finite gradients), the exps the forward kernels take
 * (tfg_cpu_exp_line), parked in dx until the denominator, summed in
 * double, is known; a row function, as cross_entropy's term (nn.c). */
#define DEFINE_CE_GRAD(T, SFX)                                                         \
  static inline void ce_grad_row_##SFX(const ce_grad_job *j, int64_t r) {              \
    const T *x = (const T *)j->logits + r * j->c;                                      \
    T *dx = (T *)j->dx + r * j->c;                                                     \
    T m = tfg_cpu_line_max_##SFX(x, 1, j->c);                                          \
    double inv = 1.0 / tfg_cpu_exp_line_##SFX(x, 1, m, dx, j->c);                      \
    int64_t label = tfg_cpu_id_at(j->labels, r);                                       \
    for (int64_t t = 0; t < j->c; t++) {                                               \
      double p = (double)dx[t] * inv;                                                  \
      dx[t] = (T)((p - (t == label ? 1.0 : 0.0)) * j->scale);                          \
    }                                                                                  \
  }                                                                                    \
  static void ce_grad_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {       \
    const ce_grad_job *j = arg;                                                        \
    (void)chunk;                                                                       \
    for (int64_t r = lo; r < hi; r++) ce_grad_row_##SFX(j, r);                         \
  }
DEFINE_CE_GRAD(float, f32)
DEFINE_CE_GRAD(double, f64)

/* CROSS_ENTROPY_GRAD: (logits [N, C] f32/f64, labels i32/i64 [N], dy a
 * one-element tensor of the logits' dtype) -> [N, C] = (softmax(logits) -
 * onehot(labels)) * dy / N, the gradient of cross_entropy's mean. A label
 * outside [0, C) is TFG_ERR_NUMERIC naming its row (nothing written). */
TFG_CPU_KERNEL(tfg_cpu_cross_entropy_grad) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_cross_entropy_grad);
  const tfg_tensor *x = &in[0], *lab = &in[1], *dy = &in[2];
  (void)node;
  tfg_status st = same_float(ctx, "cross_entropy_grad", x->dtype,
                             (const tfg_tensor *const[]){dy, out}, 2);
  if (st != TFG_OK) return st;
  if (!tfg_dtype_is_int(lab->dtype))
    return tfg_cpu_unsupported(ctx, "cross_entropy labels", lab->dtype);
  TFG_ASSERT(x->shape.rank == 2 && lab->shape.rank == 1 && lab->shape.dim[0] == x->shape.dim[0]);
  TFG_ASSERT(tfg_shape_numel(&dy->shape) == 1 && tfg_shape_eq(&out->shape, &x->shape));
  int64_t n = x->shape.dim[0], c = x->shape.dim[1];
  st = tfg_cpu_check_ids(ctx, TFG_CPU_IDS_LABELS, lab, n, c);
  if (st != TFG_OK) return st;
  if (n == 0 || c == 0) return TFG_OK;
  double g = x->dtype == TFG_DTYPE_F32 ? *(const float *)dy->data : *(const double *)dy->data;
  ce_grad_job j = {.logits = x->data, .labels = lab, .dx = out->data, .c = c,
                   .scale = g / (double)n};
  tfg_parallel_for(ctx->pool, n, grain_for(2 * c),
                   x->dtype == TFG_DTYPE_F32 ? ce_grad_f32 : ce_grad_f64, &j);
  return TFG_OK;
}

/* ---- layer_norm_grad ---------------------------------------------------- */

/* Per row, in double: mu and rstd = 1 / sqrt(var + eps) from
 * tfg_cpu_ln_stats, as the forward kernel forms them, then with
 * xhat = (x - mu) rstd and g = dy * gamma,
 *     dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * the gradient of y = xhat * gamma + beta through both mu and rstd
 * (the two means project g off the directions the normalization removes:
 * constants and xhat itself); the sums in lanes (kernels/cpu/cpu_impl.h). */
#define DEFINE_LN_GRAD_ROW(T, SFX)                                                     \
  static inline void ln_grad_row_##SFX(const tfg_cpu_ln_job *j, int64_t r, const T *x, \
                                       double mean, double rstd) {                     \
    int64_t d = j->d;                                                                  \
    const T *gm = j->gamma, *dy = (const T *)j->aux + r * d;                           \
    T *dx = (T *)j->out + r * d;                                                       \
    double mg = tfg_cpu_row_dot_##SFX(dy, gm, d) / (double)d;                          \
    double mgx = tfg_cpu_row_dot_dev_##SFX(dy, gm, x, d, mean) * rstd / (double)d;     \
    for (int64_t t = 0; t < d; t++) {                                                  \
      double g = (double)dy[t] * (double)gm[t];                                        \
      double xhat = ((double)x[t] - mean) * rstd;                                      \
      dx[t] = (T)(rstd * (g - mg - xhat * mgx));                                       \
    }                                                                                  \
  }
DEFINE_LN_GRAD_ROW(float, f32)
DEFINE_LN_GRAD_ROW(double, f64)
TFG_CPU_DEFINE_LN_ROWS(ln_grad, ln_grad_row)

/* LAYER_NORM_GRAD: (x [..., D], gamma [D], dy [..., D]) -> dx [..., D],
 * all one float dtype: the input gradient of torch's layer_norm over the
 * last axis (biased variance, eps = attrs.value). gamma's and beta's own
 * gradients are sums over rows that autodiff builds from other ops. */
TFG_CPU_KERNEL(tfg_cpu_layer_norm_grad) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_layer_norm_grad);
  tfg_status st = same_float(ctx, "layer_norm_grad", in[0].dtype,
                             (const tfg_tensor *const[]){&in[1], &in[2], out}, 3);
  if (st != TFG_OK) return st;
  TFG_ASSERT(tfg_shape_eq(&in[2].shape, &in[0].shape)); /* dy like x */
  tfg_cpu_ln_run(ctx, node, in, out, 3, ln_grad_f32, ln_grad_f64);
  return TFG_OK;
}

/* ---- conv2d gradients ---------------------------------------------------- */

/* col2im, the adjoint of im2col (kernels/cpu/conv_impl.h): piece
 * t = j * c + ch owns the input plane (image j, channel ch) of dx. It
 * zeroes the plane, then adds every col entry of the rows r = (ch, ky, kx)
 * of image j's block into the input position its tap read, in the fixed
 * order ky, kx, oy, ox. Taps that read padding (the same ones im2col
 * zeroes: both take tfg_cpu_conv_valid_cols) are dropped, and input
 * positions no window covers (a stride wider than the kernel, rows past
 * the last window) stay 0. Split by plane, not by col row, because rows
 * of one channel overlap in dx: this way no two pieces touch the same
 * output. */
#define DEFINE_COL2IM(T, SFX)                                                        \
  static void col2im_##SFX(void *arg, int64_t plo, int64_t phi, int64_t chunk) {    \
    const tfg_cpu_conv_walk *wk = arg;                                               \
    const tfg_cpu_conv_geom *g = &wk->g;                                             \
    (void)chunk;                                                                     \
    for (int64_t t = plo; t < phi; t++) {                                            \
      int64_t j = t / g->c, ch = t % g->c;                                           \
      T *dst = (T *)wk->xg + t * g->h * g->w;                                        \
      memset(dst, 0, sizeof(T) * (size_t)(g->h * g->w));                            \
      for (int64_t ky = 0; ky < g->kh; ky++)                                         \
        for (int64_t kx = 0; kx < g->kw; kx++) {                                     \
          int64_t r = (ch * g->kh + ky) * g->kw + kx;                                \
          const T *src = (const T *)wk->col + r * wk->cnt * g->p + j * g->p;         \
          int64_t lo, hi, off = tfg_cpu_conv_valid_cols(g, kx, &lo, &hi);            \
          for (int64_t oy = 0; oy < g->oh; oy++) {                                   \
            int64_t iy = oy * g->sh + ky - g->top;                                   \
            if (iy < 0 || iy >= g->h) continue;                                      \
            T *row = dst + iy * g->w;                                                \
            const T *s = src + oy * g->ow;                                           \
            for (int64_t ox = lo; ox < hi; ox++) row[ox * g->sw + off] += s[ox];     \
          }                                                                          \
        }                                                                            \
    }                                                                                \
  }
DEFINE_COL2IM(float, f32)
DEFINE_COL2IM(double, f64)

/* The dy of the walk's group as one [o, cnt * p] matrix: dy itself for
 * one image, else regrouped into the walk's tmp. */
static const char *group_dy(tfg_kernel_ctx *ctx, const tfg_cpu_conv_walk *wk) {
  if (wk->cnt == 1) return wk->yg;
  tfg_cpu_conv_walk_regroup(ctx->pool, wk, true, grain_for(wk->g.p));
  return wk->tmp;
}

static tfg_status blas_range(tfg_kernel_ctx *ctx, const char *what, const tfg_cpu_conv_geom *g) {
  return tfg_kernel_fail(ctx, TFG_ERR_LIMIT,
                         "%s as a matrix product (%lld x %lld by %lld x %lld) exceeds the BLAS "
                         "integer range",
                         what, (long long)g->o, (long long)g->ckk, (long long)g->o,
                         (long long)g->p);
}

/* One group of conv2d_grad_input: col [CKK, cnt * P] = w^T [CKK, O] @
 * dy [O, cnt * P], then col2im adds each column back onto the input
 * pixels its window read. Pointwise, the product is dx's image itself. */
static void grad_input_group(tfg_kernel_ctx *ctx, tfg_cpu_conv_walk *wk) {
  const tfg_cpu_conv_geom *g = &wk->g;
  int64_t cols = wk->cnt * g->p;
  const char *dyg = group_dy(ctx, wk);
  char *col = wk->pointwise ? wk->xg : wk->col;
  tfg_cpu_gemm(ctx->pool, wk->f64, true, false, g->ckk, cols, g->o, wk->w, g->ckk, dyg, cols, 0.0,
               col, cols);
  if (wk->pointwise) return;
  tfg_parallel_for(ctx->pool, wk->cnt * g->c, grain_for(g->h * g->w + g->kh * g->kw * g->p),
                   wk->f64 ? col2im_f64 : col2im_f32, wk);
}

/* One group of conv2d_grad_weight: dw (+)= dy [O, cnt * P] @ im2col(x)^T
 * [cnt * P, CKK], the first group writing and the later ones adding. */
static void grad_weight_group(tfg_kernel_ctx *ctx, tfg_cpu_conv_walk *wk) {
  const tfg_cpu_conv_geom *g = &wk->g;
  int64_t cols = wk->cnt * g->p;
  const char *col = tfg_cpu_conv_walk_col(ctx->pool, wk, grain_for(g->p));
  const char *dyg = group_dy(ctx, wk);
  tfg_cpu_gemm(ctx->pool, wk->f64, false, true, g->o, g->ckk, cols, dyg, cols, col, cols,
               wk->n0 == 0 ? 0.0 : 1.0, wk->w, g->ckk);
}

/* Both conv gradients: in[0], in[1] and out, one float dtype, are x, w
 * and y (dx, dw, dy) in the forward's places, and group computes each
 * group of images of the walk over the batch. */
static tfg_status conv_grad(tfg_kernel_ctx *ctx, const char *what, const tfg_node *node,
                            const tfg_tensor *in, tfg_tensor *out, const tfg_tensor *x,
                            const tfg_tensor *w, const tfg_tensor *y,
                            void (*group)(tfg_kernel_ctx *, tfg_cpu_conv_walk *)) {
  tfg_status st = same_float(ctx, what, in[0].dtype, (const tfg_tensor *const[]){&in[1], out}, 2);
  if (st != TFG_OK) return st;
  tfg_cpu_conv_walk wk;
  if (!tfg_cpu_conv_walk_init(&wk, &node->attrs, x, w, y, out)) return TFG_OK;
  if (!tfg_cpu_conv_fits_blas(&wk.g)) return blas_range(ctx, what, &wk.g);
  st = tfg_cpu_conv_walk_begin(ctx, what, &wk);
  if (st != TFG_OK) return st;
  while (tfg_cpu_conv_walk_next(&wk)) group(ctx, &wk);
  return TFG_OK;
}

/* CONV2D_GRAD_INPUT: (dy [N, O, OH, OW], w [O, C, KH, KW]) -> dx, the
 * node's shape [N, C, H, W], f32/f64; attrs.stride and attrs.pad (top,
 * bottom, left, right) as for the forward CONV2D. Per group of images,
 *     col [C*KH*KW, nb*P] = w^T [C*KH*KW, O] @ dy [O, nb*P]
 * then col2im adds each column back onto the input pixels its window
 * read (overlapping windows accumulate; padding taps are dropped).
 * TFG_ERR_NOMEM when the scratch cannot be allocated, TFG_ERR_LIMIT past
 * the BLAS integer range. */
TFG_CPU_KERNEL(tfg_cpu_conv2d_grad_input) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_conv2d_grad_input);
  return conv_grad(ctx, "conv2d_grad_input", node, in, out, out, &in[1], &in[0], grad_input_group);
}

/* CONV2D_GRAD_WEIGHT: (x [N, C, H, W], dy [N, O, OH, OW]) -> dw, the
 * node's shape [O, C, KH, KW], f32/f64; conv attrs as for CONV2D. Per
 * group of images (fixed by the shapes),
 *     dw [O, C*KH*KW] (+)= dy [O, nb*P] @ im2col(x)^T [nb*P, C*KH*KW],
 * the first group writing and the later ones accumulating, so the batch
 * is summed in the same order on every run. Errors as conv2d_grad_input. */
TFG_CPU_KERNEL(tfg_cpu_conv2d_grad_weight) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_conv2d_grad_weight);
  return conv_grad(ctx, "conv2d_grad_weight", node, in, out, &in[0], out, &in[1],
                   grad_weight_group);
}

/* ---- pool gradients ------------------------------------------------------ */

typedef struct pool_grad_job {
  const void *x, *dy; /* x: MAX_POOL_GRAD only */
  void *dx;
  int64_t h, w, oh, ow, kh, kw, sh, sw;
} pool_grad_job;

/* Piece t owns the input plane t ([N * C] planes of H x W): zero it,
 * then, window by window in row-major order, add the window's dy to the
 * element the forward max_pool picked, or dy / (KH * KW) to every element
 * of the window. Overlapping windows (stride < size) meet only inside one
 * plane, so pieces never share an output. The max choice repeats the
 * forward loop (kernels/cpu/conv.c) comparison for comparison: start at
 * the window's first element, move on a strictly greater value, so ties
 * go to the first maximum; a NaN also moves it (the forward's max is the
 * NaN), which is PyTorch's max_pool2d choice too. */
#define DEFINE_POOL_GRAD(T, SFX)                                                       \
  static void max_pool_grad_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) { \
    const pool_grad_job *j = arg;                                                      \
    (void)chunk;                                                                       \
    for (int64_t t = lo; t < hi; t++) {                                                \
      const T *x = (const T *)j->x + t * j->h * j->w;                                  \
      const T *dy = (const T *)j->dy + t * j->oh * j->ow;                              \
      T *dx = (T *)j->dx + t * j->h * j->w;                                            \
      memset(dx, 0, sizeof(T) * (size_t)(j->h * j->w));                               \
      for (int64_t oy = 0; oy < j->oh; oy++)                                           \
        for (int64_t ox = 0; ox < j->ow; ox++) {                                       \
          int64_t base = oy * j->sh * j->w + ox * j->sw, arg_ = base;                  \
          T m = x[base];                                                               \
          for (int64_t ky = 0; ky < j->kh; ky++)                                       \
            for (int64_t kx = 0; kx < j->kw; kx++) {                                   \
              int64_t at = base + ky * j->w + kx;                                      \
              T v = x[at];                                                             \
              if (v > m || v != v) {                                                   \
                m = v;                                                                 \
                arg_ = at;                                                             \
              }                                                                        \
            }                                                                          \
          dx[arg_] += dy[oy * j->ow + ox];                                             \
        }                                                                              \
    }                                                                                  \
  }                                                                                    \
  static void avg_pool_grad_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) { \
    const pool_grad_job *j = arg;                                                      \
    double inv = 1.0 / (double)(j->kh * j->kw);                                        \
    (void)chunk;                                                                       \
    for (int64_t t = lo; t < hi; t++) {                                                \
      const T *dy = (const T *)j->dy + t * j->oh * j->ow;                              \
      T *dx = (T *)j->dx + t * j->h * j->w;                                            \
      memset(dx, 0, sizeof(T) * (size_t)(j->h * j->w));                               \
      for (int64_t oy = 0; oy < j->oh; oy++)                                           \
        for (int64_t ox = 0; ox < j->ow; ox++) {                                       \
          T share = (T)((double)dy[oy * j->ow + ox] * inv);                            \
          T *win = dx + oy * j->sh * j->w + ox * j->sw;                                \
          for (int64_t ky = 0; ky < j->kh; ky++)                                       \
            for (int64_t kx = 0; kx < j->kw; kx++) win[ky * j->w + kx] += share;       \
        }                                                                              \
    }                                                                                  \
  }
DEFINE_POOL_GRAD(float, f32)
DEFINE_POOL_GRAD(double, f64)

/* MAX_POOL_GRAD: (x [N, C, H, W], dy [N, C, OH, OW]) -> dx shaped like
 * x: each window's dy goes to the element the forward max_pool took
 * (the first maximum). AVG_POOL_GRAD: (dy) -> dx, the node's shape
 * [N, C, H, W]: dy / (KH * KW) added to every element of its window.
 * Both: f32/f64, attrs.size and attrs.stride as for the forward pools
 * (no padding; OH = (H - KH) / SH + 1), overlapping windows accumulate,
 * elements in no window get 0. */
TFG_CPU_KERNEL(tfg_cpu_pool_grad) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_pool_grad);
  bool avg = node->op == TFG_OP_AVG_POOL_GRAD;
  TFG_ASSERT(avg || node->op == TFG_OP_MAX_POOL_GRAD);
  const tfg_tensor *dy = avg ? &in[0] : &in[1];
  tfg_dtype dt = dy->dtype;
  tfg_status st = avg ? same_float(ctx, "avg_pool_grad", dt, (const tfg_tensor *const[]){out}, 1)
                      : same_float(ctx, "max_pool_grad", dt,
                                   (const tfg_tensor *const[]){&in[0], out}, 2);
  if (st != TFG_OK) return st;
  const tfg_attrs *at = &node->attrs;
  TFG_ASSERT(dy->shape.rank == 4 && out->shape.rank == 4);
  TFG_ASSERT(avg || tfg_shape_eq(&in[0].shape, &out->shape));
  pool_grad_job j = {
      .x = avg ? NULL : in[0].data, .dy = dy->data, .dx = out->data,
      .h = out->shape.dim[2], .w = out->shape.dim[3], .oh = dy->shape.dim[2],
      .ow = dy->shape.dim[3], .kh = at->size[0], .kw = at->size[1], .sh = at->stride[0],
      .sw = at->stride[1],
  };
  TFG_ASSERT(dy->shape.dim[0] == out->shape.dim[0] && dy->shape.dim[1] == out->shape.dim[1]);
  TFG_ASSERT(j.kh >= 1 && j.kw >= 1 && j.sh >= 1 && j.sw >= 1);
  TFG_ASSERT(j.oh == (j.h - j.kh) / j.sh + 1 && j.ow == (j.w - j.kw) / j.sw + 1);
  int64_t planes = out->shape.dim[0] * out->shape.dim[1];
  if (planes == 0 || j.h * j.w == 0) return TFG_OK;
  tfg_parallel_body body = dt == TFG_DTYPE_F32 ? (avg ? avg_pool_grad_f32 : max_pool_grad_f32)
                                               : (avg ? avg_pool_grad_f64 : max_pool_grad_f64);
  tfg_parallel_for(ctx->pool, planes, grain_for(j.h * j.w + j.oh * j.ow * j.kh * j.kw), body, &j);
  return TFG_OK;
}

/* ---- embedding_grad ------------------------------------------------------ */

typedef struct emb_grad_job {
  const tfg_tensor *ids;
  const void *dy;
  void *dt;     /* [rows, d] */
  int64_t nids, d;
} emb_grad_job;

/* Piece [lo, hi) owns rows lo..hi-1 of the table gradient: it zeroes
 * them, then walks all the ids in order of appearance and adds dy row i
 * to row ids[i] when that row is its own. Every row therefore sums its
 * dy rows in id order whatever the split, and no two pieces write one
 * row (splitting by id instead would need atomics and lose the order).
 * The walk costs each piece a read of the ids, small next to the rows
 * of dy it adds, which it reads whole and only once. */
#define DEFINE_EMB_GRAD(T, SFX)                                                        \
  static void emb_grad_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {      \
    const emb_grad_job *j = arg;                                                       \
    int64_t d = j->d;                                                                  \
    T *out = j->dt;                                                                    \
    const T *dy = j->dy;                                                               \
    (void)chunk;                                                                       \
    memset(out + lo * d, 0, sizeof(T) * (size_t)((hi - lo) * d));                     \
    for (int64_t i = 0; i < j->nids; i++) {                                            \
      int64_t r = tfg_cpu_id_at(j->ids, i);                                            \
      if (r < lo || r >= hi) continue;                                                 \
      T *row = out + r * d;                                                            \
      const T *src = dy + i * d;                                                       \
      for (int64_t c = 0; c < d; c++) row[c] += src[c];                                \
    }                                                                                  \
  }
DEFINE_EMB_GRAD(float, f32)
DEFINE_EMB_GRAD(double, f64)

/* EMBEDDING_GRAD: (ids i32/i64 [...], dy [..., D] f32/f64) -> the table's
 * gradient [attrs.n, D]: zero, then row ids[i] += dy[i] for every id in
 * order of appearance. An id outside [0, n) is TFG_ERR_NUMERIC naming it
 * and its position (nothing written). */
TFG_CPU_KERNEL(tfg_cpu_embedding_grad) {
  if (tfg_cpu_is_half(in[1].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_embedding_grad);
  const tfg_tensor *ids = &in[0], *dy = &in[1];
  tfg_status st =
      same_float(ctx, "embedding_grad", dy->dtype, (const tfg_tensor *const[]){out}, 1);
  if (st != TFG_OK) return st;
  if (!tfg_dtype_is_int(ids->dtype)) return tfg_cpu_unsupported(ctx, "embedding ids", ids->dtype);
  TFG_ASSERT(out->shape.rank == 2 && out->shape.dim[0] == node->attrs.n);
  int64_t rows = out->shape.dim[0], d = out->shape.dim[1];
  int64_t nids = tfg_shape_numel(&ids->shape);
  TFG_ASSERT(tfg_shape_numel(&dy->shape) == nids * d);
  st = tfg_cpu_check_ids(ctx, TFG_CPU_IDS_EMBEDDING, ids, nids, rows);
  if (st != TFG_OK) return st;
  if (rows == 0 || d == 0) return TFG_OK;
  emb_grad_job j = {.ids = ids, .dy = dy->data, .dt = out->data, .nids = nids, .d = d};
  /* Pieces of at least a grain's worth of zeroing, and no more of them
   * than there are ids' worth of adds to share: each one walks all the
   * ids, which must not cost more than the adds it saves. */
  int64_t grain = grain_for(d);
  int64_t by_work = nids * d / GRAIN_ELEMS;
  if (by_work < 1) by_work = 1;
  if (grain < rows / by_work) grain = rows / by_work;
  tfg_parallel_for(ctx->pool, rows, grain,
                   dy->dtype == TFG_DTYPE_F32 ? emb_grad_f32 : emb_grad_f64, &j);
  return TFG_OK;
}
