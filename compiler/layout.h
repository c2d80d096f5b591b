/* compiler/layout.h: the layout pass: transposes folded into the
 * matmuls that read them or that they read, a graph pass in place.
 *
 * A transpose that only moves a matrix's rows and batch axes around (the
 * attention heads' [B,T,H,hd] -> [B,H,T,hd], either way) need not move
 * a byte when its reader or writer is a matmul: gemm reads rows at any
 * distance (its leading dimension) and each matrix of a batch at any
 * offset. So
 *   matmul(transpose(x, p), y)  -> matmul reading x through p (view_perm[0]),
 *   transpose(matmul(a, b), q)  -> matmul writing its product through q
 *                                  (view_perm[TFG_VIEW_OUT]), in the
 *                                  transpose's shape,
 * when the view keeps one of the matrix's two axes contiguous (row- or
 * column-major: a gemm flag); and the same for attention, its
 * probabilities and its gradient (q, k, v, the output and its gradient,
 * the result), whose views keep each row contiguous. The packed
 * attention gradient (dq, dk, dv side by side), read by three slices of
 * its last axis each read by the same transpose, takes that transpose as
 * its store view: the slices then cut the transposed rows. The kernels read the views through ir/matmul_view.h.
 * Exact: the gemm calls see the same matrices.
 *
 *   int n = tfg_fold_transposes(g, roots, mark);  // removed: TFG_FOLD_LAYOUT
 *
 * The compile driver (compiler/compile.c) runs it after simplify,
 * unless TFG_OPT=0. */
#ifndef TFG_LAYOUT_H
#define TFG_LAYOUT_H

#include <stdint.h>

#include "ir/graph.h"

/* Folds g's transposes into matmuls in place. An operand transpose t
 * folds into each matmul that reads it, when t is not pinned elsewhere
 * than the matmul; a transpose r that is the only reader of a matmul's
 * product takes the matmul in (the matmul gets r's shape, r's readers
 * read it) when neither is a root (nonzero in roots, which may be NULL:
 * a value a run may fetch or a training step reads) and r is not pinned
 * elsewhere. A transpose left with no reader and no root role is marked
 * TFG_FOLD_LAYOUT in mark (g->nnodes entries, shared with the other
 * passes; nodes it shows removed are skipped). Node ids are unchanged.
 * Returns the count of transposes removed. */
int tfg_fold_transposes(tfg_graph *g, const uint8_t *roots, uint8_t *mark);

#endif
