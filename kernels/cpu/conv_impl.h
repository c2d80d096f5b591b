/* kernels/cpu/conv_impl.h: the conv2d lowering shared by the forward conv
 * and its two gradients, private to kernels/cpu/.
 *
 *   tfg_cpu_conv_geom g;
 *   tfg_cpu_conv_geom_init(&g, &node->attrs, &x->shape, &w->shape, &y->shape);
 *   int64_t nb = tfg_cpu_conv_group_images(&g);       // images per gemm
 *   tfg_cpu_conv_col_job cj = {.g = &g, .x = x_group, .col = col, .nb = nb};
 *   tfg_parallel_for(pool, g.ckk * nb, grain, tfg_cpu_conv_im2col_f32, &cj);
 *   tfg_cpu_gemm(pool, false, false, false, ...);      // the product itself
 *
 * conv2d (kernels/cpu/conv.c), conv2d_grad_input and conv2d_grad_weight
 * (kernels/cpu/grad.c) all turn a group of images into one gemm over the
 * im2col matrix. They must agree on the geometry, on which window taps
 * read padding and on how images are grouped (the grouping fixes the
 * order conv2d_grad_weight sums the batch in), so those pieces live once,
 * here, and are defined in conv.c; only the kernels themselves and what
 * one direction alone needs (the forward's copy-out, the backward's
 * col2im and dy regrouping) stay in their own files. */
#ifndef TFG_KERNELS_CPU_CONV_IMPL_H
#define TFG_KERNELS_CPU_CONV_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"

/* The geometry of one conv2d, NCHW: x [n, c, h, w], w [o, c, kh, kw],
 * y [n, o, oh, ow]. The gradients use the same struct with x and y the
 * forward's (dx is shaped like x, dy like y). */
typedef struct tfg_cpu_conv_geom {
  int64_t n, c, h, w;  /* input */
  int64_t o, kh, kw;   /* weights */
  int64_t oh, ow, p;   /* output rows, cols, p = oh * ow */
  int64_t sh, sw;      /* strides */
  int64_t top, left;   /* padding before the first row and column */
  int64_t ckk;         /* c * kh * kw: rows of the im2col matrix */
} tfg_cpu_conv_geom;

/* Fills g from the forward's three shapes (x, w, y, all rank 4) and the
 * conv attrs (stride rows, cols; pad top, bottom, left, right). Asserts
 * (TFG_ASSERT) the shapes agree with each other and with the forward's
 * shape rule OH = (H + top + bottom - KH) / SH + 1 (and likewise OW):
 * shape checking already enforced it, so a mismatch is a broken
 * invariant, not a user error. */
void tfg_cpu_conv_geom_init(tfg_cpu_conv_geom *g, const tfg_attrs *at, const tfg_shape *x,
                            const tfg_shape *w, const tfg_shape *y);

/* True for a 1x1 kernel with stride 1 and no padding: then each image
 * [C, H * W] already is its own im2col matrix and the kernels skip
 * im2col (and col2im) altogether. */
static inline bool tfg_cpu_conv_is_pointwise(const tfg_cpu_conv_geom *g, const tfg_attrs *at) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && at->pad[0] == 0 &&
         at->pad[1] == 0 && at->pad[2] == 0 && at->pad[3] == 0;
}

/* For kernel column kx, the output columns [*lo, *hi) whose window column
 * ox * sw + kx - left lies inside the input; the others read padding.
 * Computed once per col row so the per-pixel loops need no bounds test;
 * im2col and grad.c's col2im share it so both directions drop exactly
 * the same taps. */
static inline void tfg_cpu_conv_valid_cols(const tfg_cpu_conv_geom *g, int64_t kx, int64_t *lo,
                                           int64_t *hi) {
  int64_t off = kx - g->left;
  int64_t l = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  int64_t last = g->w - 1 - off; /* ox * sw <= last */
  int64_t h = last < 0 ? 0 : last / g->sw + 1;
  if (h > g->ow) h = g->ow;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* The argument of the tfg_parallel_body functions that move data between
 * a group of nb images and its im2col matrix col [ckk, nb * p] (image j's
 * pixels in columns j * p .. j * p + p - 1). im2col reads x and fills
 * col; grad.c's col2im, its adjoint, reads col and writes dx. Neither
 * owns any of the buffers. */
typedef struct tfg_cpu_conv_col_job {
  const tfg_cpu_conv_geom *g;
  const void *x; /* im2col: the group's first image of x */
  void *dx;      /* col2im: the group's first image of dx */
  void *col;     /* [ckk, nb * p] */
  int64_t nb;
} tfg_cpu_conv_col_job;

/* tfg_parallel_body for tfg_parallel_for(pool, g->ckk * nb, grain, ...)
 * over a tfg_cpu_conv_col_job: piece t = r * nb + j fills row
 * r = (c, ky, kx) of col for image j with the input values under that
 * kernel tap, zeros where the tap reads padding. Every element of col is
 * written by exactly one piece, so any split gives the same bits. */
void tfg_cpu_conv_im2col_f32(void *arg, int64_t lo, int64_t hi, int64_t chunk);
void tfg_cpu_conv_im2col_f64(void *arg, int64_t lo, int64_t hi, int64_t chunk);

/* Images per group: as many as keep col [ckk, nb * p] plus a second
 * [o, nb * p] matrix (the forward's gemm output, the gradients' regrouped
 * dy) near a 16 MiB-of-f32 budget, at least one, at most g->n, and with
 * nb * p within the BLAS range. It depends on the shapes only, so the
 * grouping (and with it the order conv2d_grad_weight sums the batch in)
 * is the same on every run. */
int64_t tfg_cpu_conv_group_images(const tfg_cpu_conv_geom *g);

/* Allocates a group's scratch with malloc: *col [ckk, nb * p] and, when
 * nb > 1, *tmp [o, nb * p] (else *tmp = NULL), elements of es bytes; the
 * caller frees both. On failure frees what it got and returns
 * TFG_ERR_NOMEM through tfg_kernel_fail, naming `what` (the op) and the
 * size. */
tfg_status tfg_cpu_conv_scratch(tfg_kernel_ctx *ctx, const char *what, const tfg_cpu_conv_geom *g,
                                int64_t nb, size_t es, char **col, char **tmp);

#endif
