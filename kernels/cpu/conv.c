/* kernels/cpu/conv.c: conv2d (im2col + gemm) and the 2-D pools, NCHW.
 *
 * conv2d lowers each group of images to one matrix product. im2col
 * copies, for every output pixel p of every image j in the group, the
 * C * KH * KW input values under the kernel window into column j * P + p
 * of a scratch matrix col [C * KH * KW, nb * P] (zeros where the window
 * hangs over the padding); then
 *     tmp [O, nb * P] = w [O, C * KH * KW] @ col
 * is one gemm, and each image's [O, P] block of tmp is copied to its
 * place in the output. Grouping images keeps small images from turning
 * into many small gemms that OpenBLAS cannot thread well; the group size
 * is bounded so the scratch stays near COL_BUDGET elements. A group of
 * one image writes the output directly, and a 1x1 kernel with stride 1
 * and no padding needs no im2col at all (each image already is its col).
 *
 * The memory-bound steps (im2col and the copy-out) are split over
 * ctx->pool by (row, image) pieces, and the gemm by blocks of its
 * output (kernels/cpu/blas.h).
 *
 * The pieces the conv gradients (kernels/cpu/grad.c) lower through as
 * well (the geometry, im2col, the walk over groups of images and its
 * scratch) are declared in kernels/cpu/conv_impl.h and defined here,
 * once, so both directions read the same windows and group the same
 * images. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "kernels/cpu/conv_impl.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_CONV2D, tfg_cpu_conv2d},
    {TFG_OP_MAX_POOL, tfg_cpu_pool},
    {TFG_OP_AVG_POOL, tfg_cpu_pool},
};

void tfg_cpu_register_conv(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

/* Scratch (col plus tmp) per group, in elements: 16 MiB of f32. The
 * gradients' groups (kernels/cpu/grad.c) take the same budget through
 * the walk (tfg_cpu_conv_walk_begin). */
#define COL_BUDGET ((int64_t)1 << 22)
#define GRAIN_ELEMS (1 << 14)

/* ---- the lowering shared with kernels/cpu/grad.c (conv_impl.h) ---------- */

void tfg_cpu_conv_geom_init(tfg_cpu_conv_geom *g, const tfg_attrs *at, const tfg_shape *x,
                            const tfg_shape *w, const tfg_shape *y) {
  TFG_ASSERT(x->rank == 4 && w->rank == 4 && y->rank == 4);
  *g = (tfg_cpu_conv_geom){
      .n = x->dim[0], .c = x->dim[1], .h = x->dim[2], .w = x->dim[3],
      .o = w->dim[0], .kh = w->dim[2], .kw = w->dim[3],
      .oh = y->dim[2], .ow = y->dim[3],
      .sh = at->stride[0], .sw = at->stride[1], .top = at->pad[0], .left = at->pad[2],
  };
  TFG_ASSERT(w->dim[1] == g->c && y->dim[0] == g->n && y->dim[1] == g->o);
  TFG_ASSERT(g->sh >= 1 && g->sw >= 1 && at->pad[0] >= 0 && at->pad[1] >= 0 &&
             at->pad[2] >= 0 && at->pad[3] >= 0);
  TFG_ASSERT(g->oh == (g->h + at->pad[0] + at->pad[1] - g->kh) / g->sh + 1);
  TFG_ASSERT(g->ow == (g->w + at->pad[2] + at->pad[3] - g->kw) / g->sw + 1);
  g->p = g->oh * g->ow;
  g->ckk = g->c * g->kh * g->kw;
}

/* Piece t = r * nb + j fills row r = (c, ky, kx) of col for image j, so
 * consecutive pieces write consecutive memory. For each output row the
 * valid output columns (window column inside the input) form one range
 * [lo, hi); the columns outside it read padding and get zeros. With
 * stride 1 the valid range is contiguous in the input row too, so it is
 * one memcpy. */
#define DEFINE_IM2COL(T, SFX)                                                          \
  static void im2col_##SFX(void *arg, int64_t plo, int64_t phi, int64_t chunk) {       \
    (void)chunk;                                                                       \
    const tfg_cpu_conv_walk *wk = arg;                                                 \
    const tfg_cpu_conv_geom *g = &wk->g;                                               \
    for (int64_t t = plo; t < phi; t++) {                                              \
      int64_t r = t / wk->cnt, j = t % wk->cnt;                                        \
      int64_t c = r / (g->kh * g->kw), ky = r / g->kw % g->kh, kx = r % g->kw;         \
      const T *src = (const T *)wk->xg + (j * g->c + c) * g->h * g->w;                 \
      T *dst = (T *)wk->col + r * wk->cnt * g->p + j * g->p;                           \
      /* input column of output column ox: ox * sw + off */                            \
      int64_t lo, hi, off = tfg_cpu_conv_valid_cols(g, kx, &lo, &hi);                  \
      for (int64_t oy = 0; oy < g->oh; oy++, dst += g->ow) {                           \
        int64_t iy = oy * g->sh + ky - g->top;                                         \
        if (iy < 0 || iy >= g->h) {                                                    \
          memset(dst, 0, sizeof(T) * (size_t)g->ow);                                   \
          continue;                                                                    \
        }                                                                              \
        const T *row = src + iy * g->w;                                                \
        for (int64_t ox = 0; ox < lo; ox++) dst[ox] = 0;                               \
        if (g->sw == 1)                                                                \
          memcpy(dst + lo, row + lo + off, sizeof(T) * (size_t)(hi - lo));             \
        else                                                                           \
          for (int64_t ox = lo; ox < hi; ox++) dst[ox] = row[ox * g->sw + off];        \
        for (int64_t ox = hi; ox < g->ow; ox++) dst[ox] = 0;                           \
      }                                                                                \
    }                                                                                  \
  }
DEFINE_IM2COL(float, f32)
DEFINE_IM2COL(double, f64)

/* The walk's images per group (conv_impl.h says how many). */
static int64_t group_images(const tfg_cpu_conv_geom *g) {
  int64_t per_img = (g->ckk + g->o) * g->p;
  int64_t nb = COL_BUDGET / (per_img > 0 ? per_img : 1);
  if (nb < 1) nb = 1;
  if (nb > g->n) nb = g->n;
  while (nb > 1 && !tfg_cpu_fits_blasint(nb * g->p)) nb /= 2;
  return nb;
}

/* A 1x1 kernel with stride 1 and no padding (conv_impl.h: no im2col). */
static bool is_pointwise(const tfg_cpu_conv_geom *g, const tfg_attrs *at) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && at->pad[0] == 0 &&
         at->pad[1] == 0 && at->pad[2] == 0 && at->pad[3] == 0;
}

bool tfg_cpu_conv_walk_init(tfg_cpu_conv_walk *wk, const tfg_attrs *at, const tfg_tensor *x,
                            const tfg_tensor *w, const tfg_tensor *y, tfg_tensor *out) {
  *wk = (tfg_cpu_conv_walk){.f64 = out->dtype == TFG_DTYPE_F64, .es = tfg_dtype_size(out->dtype),
                            .x = x->data, .w = w->data, .y = y->data};
  tfg_cpu_conv_geom *g = &wk->g;
  tfg_cpu_conv_geom_init(g, at, &x->shape, &w->shape, &y->shape);
  wk->pointwise = is_pointwise(g, at);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return false;
  if (g->n == 0 || g->o == 0 || g->p == 0 || g->ckk == 0) {
    memset(out->data, 0, (size_t)total * wk->es);
    return false;
  }
  return true;
}

tfg_status tfg_cpu_conv_walk_begin(tfg_kernel_ctx *ctx, const char *what, tfg_cpu_conv_walk *wk) {
  const tfg_cpu_conv_geom *g = &wk->g;
  wk->nb = wk->pointwise ? 1 : group_images(g);
  if (wk->pointwise) return TFG_OK;
  wk->col = malloc((size_t)(g->ckk * wk->nb * g->p) * wk->es);
  wk->tmp = wk->nb > 1 ? malloc((size_t)(g->o * wk->nb * g->p) * wk->es) : NULL;
  if (wk->col && (wk->nb == 1 || wk->tmp)) return TFG_OK;
  free(wk->col);
  free(wk->tmp);
  wk->col = wk->tmp = NULL;
  return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory for %s's %lld-element scratch",
                         what, (long long)((g->ckk + g->o) * wk->nb * g->p));
}

bool tfg_cpu_conv_walk_next(tfg_cpu_conv_walk *wk) {
  const tfg_cpu_conv_geom *g = &wk->g;
  wk->n0 += wk->cnt;
  if (wk->n0 >= g->n) {
    free(wk->col);
    free(wk->tmp);
    wk->col = wk->tmp = NULL;
    return false;
  }
  wk->cnt = g->n - wk->n0 < wk->nb ? g->n - wk->n0 : wk->nb;
  wk->xg = wk->x + (size_t)(wk->n0 * g->c * g->h * g->w) * wk->es;
  wk->yg = wk->y + (size_t)(wk->n0 * g->o * g->p) * wk->es;
  return true;
}

const char *tfg_cpu_conv_walk_col(tfg_pool *pool, tfg_cpu_conv_walk *wk, int64_t grain) {
  if (wk->pointwise) return wk->xg;
  tfg_parallel_for(pool, wk->g.ckk * wk->cnt, grain, wk->f64 ? im2col_f64 : im2col_f32, wk);
  return wk->col;
}

typedef struct regroup_job {
  char *images; /* the group's [cnt, o, p] images of y */
  char *tmp;    /* [o, cnt * p] */
  int64_t cnt, o;
  size_t plane; /* bytes of p elements */
  bool gather;  /* images -> tmp (else tmp -> images) */
} regroup_job;

/* Piece t = oc * cnt + j: the plane of output channel oc of image j. */
static void regroup(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const regroup_job *r = arg;
  (void)chunk;
  for (int64_t t = lo; t < hi; t++) {
    int64_t oc = t / r->cnt, j = t % r->cnt;
    char *img = r->images + (size_t)(j * r->o + oc) * r->plane;
    char *blk = r->tmp + (size_t)t * r->plane;
    memcpy(r->gather ? blk : img, r->gather ? img : blk, r->plane);
  }
}

void tfg_cpu_conv_walk_regroup(tfg_pool *pool, const tfg_cpu_conv_walk *wk, bool gather,
                               int64_t grain) {
  regroup_job r = {.images = wk->yg, .tmp = wk->tmp, .cnt = wk->cnt, .o = wk->g.o,
                   .plane = (size_t)wk->g.p * wk->es, .gather = gather};
  tfg_parallel_for(pool, wk->g.o * wk->cnt, grain, regroup, &r);
}

/* ---- conv2d -------------------------------------------------------------- */

/* CONV2D: x [N, C, H, W], w [O, C, KH, KW] -> out [N, O, OH, OW], f32 or
 * f64, stride attrs.stride (rows, cols), zero padding attrs.pad (top,
 * bottom, left, right); OH = (H + top + bottom - KH) / stride_rows + 1
 * and likewise OW. No bias (a separate add). TFG_ERR_NOMEM when the
 * scratch cannot be allocated, TFG_ERR_LIMIT past the BLAS integer range. */
TFG_CPU_KERNEL(tfg_cpu_conv2d) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_conv2d);
  const tfg_tensor *x = &in[0], *w = &in[1];
  tfg_dtype dt = x->dtype;
  if (!(dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64) || w->dtype != dt || out->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE,
                           "conv2d of %s and %s is not supported on the CPU (f32 and f64 are)",
                           tfg_dtype_name(x->dtype), tfg_dtype_name(w->dtype));
  tfg_cpu_conv_walk wk;
  if (!tfg_cpu_conv_walk_init(&wk, &node->attrs, x, w, out, out)) return TFG_OK;
  const tfg_cpu_conv_geom *g = &wk.g;
  if (!tfg_cpu_conv_fits_blas(g))
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT,
                           "conv2d as a matrix product (%lld x %lld times %lld x %lld) exceeds "
                           "the BLAS integer range",
                           (long long)g->o, (long long)g->ckk, (long long)g->ckk, (long long)g->p);
  tfg_status st = tfg_cpu_conv_walk_begin(ctx, "conv2d", &wk);
  if (st != TFG_OK) return st;
  int64_t grain = GRAIN_ELEMS / g->p + 1;
  /* One image (always, when pointwise): the gemm writes the output in
   * place. Several: the gemm writes tmp [O, cnt * P], and each image's
   * block moves to its place. */
  while (tfg_cpu_conv_walk_next(&wk)) {
    int64_t cols = wk.cnt * g->p;
    const char *col = tfg_cpu_conv_walk_col(ctx->pool, &wk, grain);
    char *dst = wk.cnt == 1 ? wk.yg : wk.tmp;
    tfg_cpu_gemm(ctx->pool, wk.f64, false, false, g->o, cols, g->ckk, wk.w, g->ckk, col, cols, 0.0,
                 dst, cols);
    if (wk.cnt > 1) tfg_cpu_conv_walk_regroup(ctx->pool, &wk, false, grain);
  }
  return TFG_OK;
}

/* ---- pools ------------------------------------------------------------- */

typedef struct pool_job {
  const void *x;
  void *y;
  int64_t h, w, oh, ow, kh, kw, sh, sw;
  bool avg;
} pool_job;

/* Row t of the output ([N * C * OH] rows of OW): each output element is
 * the max, or the mean, of its KH x KW window. The max propagates NaN
 * (a NaN anywhere in the window wins), as PyTorch's max_pool2d does; the
 * mean sums in double and divides by the full window size. */
#define DEFINE_POOL(T, SFX)                                                      \
  static void pool_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {    \
    const pool_job *j = arg;                                                     \
    (void)chunk;                                                                 \
    double inv = 1.0 / (double)(j->kh * j->kw);                                  \
    for (int64_t t = lo; t < hi; t++) {                                          \
      int64_t plane = t / j->oh, oy = t % j->oh;                                 \
      const T *x = (const T *)j->x + (plane * j->h + oy * j->sh) * j->w;         \
      T *y = (T *)j->y + t * j->ow;                                              \
      for (int64_t ox = 0; ox < j->ow; ox++) {                                   \
        const T *win = x + ox * j->sw;                                           \
        if (j->avg) {                                                            \
          double s = 0;                                                          \
          for (int64_t ky = 0; ky < j->kh; ky++)                                 \
            for (int64_t kx = 0; kx < j->kw; kx++) s += win[ky * j->w + kx];     \
          y[ox] = (T)(s * inv);                                                  \
        } else {                                                                 \
          T m = win[0];                                                          \
          for (int64_t ky = 0; ky < j->kh; ky++)                                 \
            for (int64_t kx = 0; kx < j->kw; kx++) {                             \
              T v = win[ky * j->w + kx];                                         \
              if (v > m || v != v) m = v;                                        \
            }                                                                    \
          y[ox] = m;                                                             \
        }                                                                        \
      }                                                                          \
    }                                                                            \
  }
DEFINE_POOL(float, f32)
DEFINE_POOL(double, f64)

/* MAX_POOL, AVG_POOL: x [N, C, H, W] f32/f64 -> [N, C, OH, OW], window
 * attrs.size (rows, cols), stride attrs.stride, no padding:
 * OH = (H - KH) / SH + 1 and likewise OW. */
TFG_CPU_KERNEL(tfg_cpu_pool) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_pool);
  const tfg_tensor *x = &in[0];
  if (!(x->dtype == TFG_DTYPE_F32 || x->dtype == TFG_DTYPE_F64))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE,
                           "pooling of %s is not supported on the CPU (f32 and f64 are)",
                           tfg_dtype_name(x->dtype));
  TFG_ASSERT(x->shape.rank == 4 && out->shape.rank == 4 && out->dtype == x->dtype);
  const tfg_attrs *at = &node->attrs;
  pool_job j = {
      .x = x->data, .y = out->data, .h = x->shape.dim[2], .w = x->shape.dim[3],
      .oh = out->shape.dim[2], .ow = out->shape.dim[3], .kh = at->size[0], .kw = at->size[1],
      .sh = at->stride[0], .sw = at->stride[1], .avg = node->op == TFG_OP_AVG_POOL,
  };
  TFG_ASSERT(out->shape.dim[0] == x->shape.dim[0] && out->shape.dim[1] == x->shape.dim[1]);
  TFG_ASSERT(j.kh >= 1 && j.kw >= 1 && j.sh >= 1 && j.sw >= 1);
  TFG_ASSERT(j.oh == (j.h - j.kh) / j.sh + 1 && j.ow == (j.w - j.kw) / j.sw + 1);
  int64_t rows = x->shape.dim[0] * x->shape.dim[1] * j.oh;
  if (rows == 0 || j.ow == 0) return TFG_OK;
  tfg_parallel_for(ctx->pool, rows, GRAIN_ELEMS / (j.ow * j.kh * j.kw) + 1,
                   x->dtype == TFG_DTYPE_F32 ? pool_f32 : pool_f64, &j);
  return TFG_OK;
}
