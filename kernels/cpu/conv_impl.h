/* kernels/cpu/conv_impl.h: the conv2d lowering shared by the forward conv
 * and its two gradients, private to kernels/cpu/.
 *
 *   tfg_cpu_conv_walk wk;                    // x, w, y: the forward's places
 *   if (!tfg_cpu_conv_walk_init(&wk, &node->attrs, x, w, y, out)) return TFG_OK;
 *   if (!tfg_cpu_conv_fits_blas(&wk.g)) return ...;   // TFG_ERR_LIMIT
 *   st = tfg_cpu_conv_walk_begin(ctx, "conv2d", &wk); // the scratch
 *   while (tfg_cpu_conv_walk_next(&wk)) {    // a group of images at a time
 *     const char *col = tfg_cpu_conv_walk_col(ctx->pool, &wk, grain);
 *     tfg_cpu_gemm(ctx->pool, wk.f64, false, false, ...);  // the product itself
 *   }
 *
 * conv2d (kernels/cpu/conv.c), conv2d_grad_input and conv2d_grad_weight
 * (kernels/cpu/grad.c) all turn a group of images into one gemm over the
 * im2col matrix. They must agree on the geometry, on which window taps
 * read padding and on how images are grouped (the grouping fixes the
 * order conv2d_grad_weight sums the batch in), so those pieces live once,
 * here, and are defined in conv.c; only the kernels themselves and what
 * one direction alone needs (the backward's col2im) stay in their own
 * files. */
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

/* For kernel column kx, the output columns [*lo, *hi) whose window column
 * ox * sw + off lies inside the input, off = kx - left being returned;
 * the others read padding. Computed once per col row so the per-pixel
 * loops need no bounds test; im2col and grad.c's col2im share it so both
 * directions drop exactly the same taps. */
static inline int64_t tfg_cpu_conv_valid_cols(const tfg_cpu_conv_geom *g, int64_t kx, int64_t *lo,
                                              int64_t *hi) {
  int64_t off = kx - g->left;
  int64_t l = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  int64_t last = g->w - 1 - off; /* ox * sw <= last */
  int64_t h = last < 0 ? 0 : last / g->sw + 1;
  if (h > g->ow) h = g->ow;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
  return off;
}

/* Whether the products of the lowering (o, ckk and p rows or columns)
 * are within the BLAS integer range; each kernel words its own failure. */
static inline bool tfg_cpu_conv_fits_blas(const tfg_cpu_conv_geom *g) {
  return tfg_cpu_fits_blasint(g->o) && tfg_cpu_fits_blasint(g->ckk) && tfg_cpu_fits_blasint(g->p);
}

/* One conv op's walk over its batch, a group of images at a time: the
 * geometry, the data of the three tensors in the forward's places (the
 * gradients' dx is shaped like x, dw like w, dy like y), the current
 * group and its scratch. The groups depend on the shapes only (as many
 * images as keep col and a second [o, cnt * p] matrix, the forward's gemm
 * output or the gradients' regrouped dy, near a 16 MiB-of-f32 budget, with
 * cnt * p within the BLAS range), so the grouping, and with it the order
 * conv2d_grad_weight sums the batch in, is the same on every run. A
 * pointwise conv (1x1 kernel, stride 1, no padding) walks single images
 * with no scratch: each image [C, H * W] already is its own im2col matrix,
 * and the kernels skip im2col (and col2im) altogether. The walk is also
 * the argument of the tfg_parallel_body functions that move data between
 * the group and its im2col matrix col [ckk, cnt * p] (image j's pixels in
 * columns j * p .. j * p + p - 1): im2col (conv.c) reads xg and fills
 * col; grad.c's col2im, its adjoint, reads col and writes xg (dx). */
typedef struct tfg_cpu_conv_walk {
  tfg_cpu_conv_geom g;
  bool f64, pointwise;
  size_t es;          /* bytes per element */
  char *x, *w, *y;    /* the tensors' data */
  int64_t nb;         /* images per group */
  int64_t n0, cnt;    /* the current group: images [n0, n0 + cnt) */
  char *xg, *yg;      /* x and y from image n0 on */
  char *col, *tmp;    /* col [ckk, nb * p] and tmp [o, nb * p] (when nb > 1); NULL when pointwise */
} tfg_cpu_conv_walk;

/* Starts wk on the tensors x, w and y (all of out's dtype, f32 or f64),
 * one of which is the kernel's output out, with the conv attrs at (the
 * geometry: tfg_cpu_conv_geom_init). Returns false when nothing is left
 * to compute: out is empty, or a factor of the products is (an empty sum),
 * and then out is all zeros. No scratch yet: nothing to free. */
bool tfg_cpu_conv_walk_init(tfg_cpu_conv_walk *wk, const tfg_attrs *at, const tfg_tensor *x,
                            const tfg_tensor *w, const tfg_tensor *y, tfg_tensor *out);

/* Groups the images and allocates the scratch (none when pointwise).
 * TFG_ERR_NOMEM through tfg_kernel_fail, naming `what` (the op) and the
 * size, when it cannot; then nothing is left to free. */
tfg_status tfg_cpu_conv_walk_begin(tfg_kernel_ctx *ctx, const char *what, tfg_cpu_conv_walk *wk);

/* Moves wk to its next group; false after the last, having freed the
 * scratch. A kernel runs the walk to its end. */
bool tfg_cpu_conv_walk_next(tfg_cpu_conv_walk *wk);

/* The current group's im2col matrix [ckk, cnt * p]: the images of x
 * themselves when pointwise, else wk->col, filled from them (piece
 * t = r * cnt + j fills row r = (c, ky, kx) for image j with the input
 * values under that kernel tap, zeros where it reads padding) over pool
 * in pieces of `grain` rows. Every element is written by exactly one
 * piece, so any split gives the same bits. */
const char *tfg_cpu_conv_walk_col(tfg_pool *pool, tfg_cpu_conv_walk *wk, int64_t grain);

/* Moves the current group's images of y [cnt, o, p] to tmp [o, cnt * p]
 * (gather: the gradients' dy, so that one gemm sees the group) or back
 * from it (the forward's gemm output to its place), over pool in pieces
 * of `grain` planes. Only for groups of more than one image: a single
 * image already is both. */
void tfg_cpu_conv_walk_regroup(tfg_pool *pool, const tfg_cpu_conv_walk *wk, bool gather,
                               int64_t grain);

#endif
