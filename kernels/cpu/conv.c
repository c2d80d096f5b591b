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
 * well (the geometry, im2col, the gemm, the grouping and its scratch) are
 * declared in kernels/cpu/conv_impl.h and defined here, once, so both
 * directions read the same windows and group the same images. */
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
 * tfg_cpu_conv_group_images. */
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
  void tfg_cpu_conv_im2col_##SFX(void *arg, int64_t plo, int64_t phi, int64_t chunk) { \
    const tfg_cpu_conv_col_job *jb = arg;                                              \
    const tfg_cpu_conv_geom *g = jb->g;                                                \
    (void)chunk;                                                                       \
    for (int64_t t = plo; t < phi; t++) {                                              \
      int64_t r = t / jb->nb, j = t % jb->nb;                                          \
      int64_t c = r / (g->kh * g->kw), ky = r / g->kw % g->kh, kx = r % g->kw;         \
      const T *src = (const T *)jb->x + (j * g->c + c) * g->h * g->w;                  \
      T *dst = (T *)jb->col + r * jb->nb * g->p + j * g->p;                            \
      /* input column of output column ox: ox * sw + kx - left */                      \
      int64_t off = kx - g->left, lo, hi;                                              \
      tfg_cpu_conv_valid_cols(g, kx, &lo, &hi);                                        \
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

int64_t tfg_cpu_conv_group_images(const tfg_cpu_conv_geom *g) {
  int64_t per_img = (g->ckk + g->o) * g->p;
  int64_t nb = COL_BUDGET / (per_img > 0 ? per_img : 1);
  if (nb < 1) nb = 1;
  if (nb > g->n) nb = g->n;
  while (nb > 1 && !tfg_cpu_fits_blasint(nb * g->p)) nb /= 2;
  return nb;
}

tfg_status tfg_cpu_conv_scratch(tfg_kernel_ctx *ctx, const char *what, const tfg_cpu_conv_geom *g,
                                int64_t nb, size_t es, char **col, char **tmp) {
  *col = malloc((size_t)(g->ckk * nb * g->p) * es);
  *tmp = nb > 1 ? malloc((size_t)(g->o * nb * g->p) * es) : NULL;
  if (!*col || (nb > 1 && !*tmp)) {
    free(*col);
    free(*tmp);
    return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory for %s's %lld-element scratch",
                           what, (long long)((g->ckk + g->o) * nb * g->p));
  }
  return TFG_OK;
}

/* ---- conv2d -------------------------------------------------------------- */

typedef struct scatter_job {
  const char *tmp; /* [o, nb * p] */
  char *out;       /* the group's first image of the output, [nb, o, p] */
  int64_t nb, o;
  size_t plane;    /* bytes of p elements */
} scatter_job;

/* Piece t = oc * nb + j: tmp's block for output channel oc of image j. */
static void scatter(void *arg, int64_t lo, int64_t hi, int64_t chunk) {
  const scatter_job *s = arg;
  (void)chunk;
  for (int64_t t = lo; t < hi; t++) {
    int64_t oc = t / s->nb, j = t % s->nb;
    memcpy(s->out + (size_t)(j * s->o + oc) * s->plane, s->tmp + (size_t)t * s->plane, s->plane);
  }
}

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
  const tfg_attrs *at = &node->attrs;
  tfg_cpu_conv_geom g;
  tfg_cpu_conv_geom_init(&g, at, &x->shape, &w->shape, &out->shape);

  bool f64 = dt == TFG_DTYPE_F64;
  size_t es = tfg_dtype_size(dt);
  int64_t total = tfg_shape_numel(&out->shape);
  if (total == 0) return TFG_OK;
  if (g.ckk == 0) { /* an empty sum */
    memset(out->data, 0, (size_t)total * es);
    return TFG_OK;
  }
  if (!tfg_cpu_fits_blasint(g.o) || !tfg_cpu_fits_blasint(g.ckk) ||
      !tfg_cpu_fits_blasint(g.p))
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT,
                           "conv2d as a matrix product (%lld x %lld times %lld x %lld) exceeds "
                           "the BLAS integer range",
                           (long long)g.o, (long long)g.ckk, (long long)g.ckk, (long long)g.p);

  const char *xb = x->data;
  char *ob = out->data;
  size_t x_img = (size_t)(g.c * g.h * g.w) * es, o_img = (size_t)(g.o * g.p) * es;

  /* 1x1, stride 1, no padding: image n is its own col [C, H * W], so
   * out_n [O, HW] = w [O, C] @ x_n [C, HW]. */
  if (tfg_cpu_conv_is_pointwise(&g, at)) {
    for (int64_t i = 0; i < g.n; i++)
      tfg_cpu_gemm(ctx->pool, f64, false, false, g.o, g.p, g.c, w->data, g.c, xb + (size_t)i * x_img,
                        g.p, 0.0, ob + (size_t)i * o_img, g.p);
    return TFG_OK;
  }

  int64_t nb = tfg_cpu_conv_group_images(&g);
  char *col, *tmp;
  tfg_status st = tfg_cpu_conv_scratch(ctx, "conv2d", &g, nb, es, &col, &tmp);
  if (st != TFG_OK) return st;
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
    tfg_cpu_conv_col_job cj = {.g = &g, .x = xb + (size_t)n0 * x_img, .col = col, .nb = cnt};
    tfg_parallel_for(ctx->pool, g.ckk * cnt, GRAIN_ELEMS / g.p + 1,
                     f64 ? tfg_cpu_conv_im2col_f64 : tfg_cpu_conv_im2col_f32, &cj);
    char *dst = ob + (size_t)n0 * o_img;
    /* One image: the gemm writes the output in place. Several: the gemm
     * writes tmp [O, cnt * P] and scatter moves each image's block. */
    if (cnt == 1) {
      tfg_cpu_gemm(ctx->pool, f64, false, false, g.o, g.p, g.ckk, w->data, g.ckk, col, g.p, 0.0, dst,
                        g.p);
    } else {
      tfg_cpu_gemm(ctx->pool, f64, false, false, g.o, cnt * g.p, g.ckk, w->data, g.ckk, col, cnt * g.p,
                        0.0, tmp, cnt * g.p);
      scatter_job sj = {.tmp = tmp, .out = dst, .nb = cnt, .o = g.o, .plane = (size_t)g.p * es};
      tfg_parallel_for(ctx->pool, g.o * cnt, GRAIN_ELEMS / g.p + 1, scatter, &sj);
    }
  }
  free(col);
  free(tmp);
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
