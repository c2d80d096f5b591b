/* ir/matmul_view.h: how a MATMUL (or an ATTENTION) reads its operands
 * and writes its result when the layout pass (compiler/layout.h) folded
 * transposes into it: each as a strided view of a contiguous tensor, the
 * logical axes a permutation of the stored ones.
 *
 *   tfg_shape la; int64_t sa[TFG_MAX_RANK];
 *   tfg_matmul_view(node, 0, &in[0].shape, &la, sa);  // a as the product reads it
 *   // element idx of the logical a is at sum_i idx[i] * sa[i] in in[0]
 *
 * Without the node's views bit k the view is the tensor itself
 * (contiguous strides). Both matmul kernels (kernels/cpu/linalg.c,
 * kernels/cuda/linalg.cu) and the cost model read their shapes through
 * these, so a folded transpose costs no launch and no copy: the gemm
 * reads the rows where they lie, its leading dimension the stored
 * tensor's. */
#ifndef TFG_IR_MATMUL_VIEW_H
#define TFG_IR_MATMUL_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The contiguous (row-major) strides of s, in elements. */
void tfg_contiguous_strides(const tfg_shape *s, int64_t *stride);

/* View k of node n: k < TFG_VIEW_OUT, input k as the op reads it (a
 * matmul's before transpose_a/_b) from a tensor of stored shape `stored`
 * (the input's); k TFG_VIEW_OUT, the result as written into the output,
 * of stored shape `stored` (the node's). Fills the logical shape and
 * each logical axis's stride in elements of the stored tensor. */
void tfg_matmul_view(const tfg_node *n, int k, const tfg_shape *stored, tfg_shape *logical, int64_t *stride);

/* A view read a row at a time (attention's q, k, v and output: matrices
 * [..., T, d] whose rows are contiguous): the batch dims (the logical
 * ones before the last two), each one's step, and the rows' stride. */
typedef struct tfg_rows_view {
  int nbatch;
  int64_t dim[TFG_MAX_RANK], step[TFG_MAX_RANK];
  int64_t ld;
} tfg_rows_view;

/* Fills *v for view k of n over a tensor of stored shape `stored`; false
 * when the view's last axis is not contiguous (the layout pass folds no
 * such transpose into an attention). */
bool tfg_rows_view_of(const tfg_node *n, int k, const tfg_shape *stored, tfg_rows_view *v);

/* The element offset of batch matrix bm (row-major over the batch dims). */
static inline int64_t tfg_rows_offset(const tfg_rows_view *v, int64_t bm) {
  int64_t off = 0;
  for (int d = v->nbatch - 1; d >= 0; d--) {
    off += bm % v->dim[d] * v->step[d];
    bm /= v->dim[d];
  }
  return off;
}

/* An attention, its probabilities (v is k) or its gradient (dy, the
 * output's gradient, read as the output is) through its views: the
 * lengths and each operand's rows. */
typedef struct tfg_attention_geom {
  int64_t tq, tk, hd, hdv; /* hdv 0 for the probabilities */
  tfg_rows_view q, k, v, dy, out; /* dy: ATTENTION_GRAD's (out for the others) */
} tfg_attention_geom;

/* Fills *g for node n (ATTENTION, ATTENTION_PROBS or ATTENTION_GRAD)
 * over its inputs' stored shapes in[0..ninputs) and its output's; NULL,
 * or why not (a view whose rows are not contiguous, a rank below 2). */
const char *tfg_attention_geometry(const tfg_node *n, const tfg_shape *const *in, const tfg_shape *out,
                                   tfg_attention_geom *g);

/* A matmul as row-major gemm calls: out [..., M, N] = op(a) @ op(b) per
 * output matrix, where the gemm flags ta, tb are the node's transposes,
 * each flipped for an operand its view stores column-major, and lda,
 * ldb, ldc are the stored leading dimensions; the batch dims are the
 * output's, with each one's step in elements of a, b and out (0 where
 * an operand has the dim as 1 or not at all). */
typedef struct tfg_matmul_geom {
  int64_t m, n, k;
  bool ta, tb;
  int64_t lda, ldb, ldc;
  int nbatch;
  int64_t dim[TFG_MAX_RANK], astep[TFG_MAX_RANK], bstep[TFG_MAX_RANK], cstep[TFG_MAX_RANK];
} tfg_matmul_geom;

/* Fills *g for node n (attrs: transposes and views) over tensors of
 * stored shapes a, b and out. NULL, or why the shapes are not such a
 * product (ranks, dims that do not match or broadcast, a view with no
 * unit stride in its matrix: the shape rule and the layout pass make
 * none of these, so a kernel reports it as a device error). */
const char *tfg_matmul_geometry(const tfg_node *n, const tfg_shape *a, const tfg_shape *b, const tfg_shape *out,
                                tfg_matmul_geom *g);

#ifdef __cplusplus
}
#endif

#endif
