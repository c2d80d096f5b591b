/* kernels/index_math.h: the shape and index math the CPU kernels and the
 * CUDA kernels share (kernels/cpu/elementwise.c, shape.c, reduce.c;
 * kernels/cuda/common.cuh, elementwise.cu, shape.cu, reduce.cu), so both
 * read the same elements in the same places:
 *
 *   - strided and broadcast reads (binary ops, where, transpose,
 *     broadcast): each operand gets a stride per output axis (0 along a
 *     broadcast axis), size-1 output axes are dropped and an axis merges
 *     into the one before it when every operand walks the pair as one
 *     axis, so a same-shape operation becomes one flat axis of stride 1;
 *   - the strides of transpose and broadcast, and the rows of concat and
 *     slice;
 *   - reductions: size-1 axes dropped, neighbouring axes that are both
 *     kept or both reduced merged.
 *
 *   tfg_index_map ix;                         // out = f(a, b) broadcast
 *   if (!tfg_index_broadcast(&ix, &out->shape, in, 2)) ...fail...
 *   // output element pos (row-major over ix.dim[0..ix.rank)) reads
 *   // operand k at sum over axes i of idx_i(pos) * ix.st[k][i]
 *
 *   tfg_reduce_shape g;
 *   tfg_reduce_simplify(&g, &x->shape, attrs.axes);
 *
 * How each backend walks the result is its own (the CPU row by row with
 * an odometer, the GPU one decomposed position per thread). Host code:
 * plain static inline functions, which C and nvcc both compile. */
#ifndef TFG_KERNELS_INDEX_MATH_H
#define TFG_KERNELS_INDEX_MATH_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/hostdev.h"

TFG_C_BEGIN
#include "ir/graph.h"
#include "kernels/tensor.h"
TFG_C_END

/* ---- strided and broadcast reads ------------------------------------------ */

#define TFG_INDEX_MAX_OPERANDS 3

/* Up to three operands read at strides over one output shape, simplified
 * (rank >= 1; dims > 1 except for a one-element output). Entries past
 * rank and past nin are 0 (dims 1), so the map can be passed by value
 * and compared. */
typedef struct tfg_index_map {
  int rank, nin;
  int64_t dim[TFG_MAX_RANK];
  int64_t st[TFG_INDEX_MAX_OPERANDS][TFG_MAX_RANK]; /* in elements; 0: broadcast */
} tfg_index_map;

/* Fills x for output shape out and operand strides st[k][i] (elements,
 * per output axis i), k < nin <= TFG_INDEX_MAX_OPERANDS: drops size-1
 * output axes and merges axis i into the kept axis before it when, for
 * every operand, that axis's stride equals st[k][i] * dim[i] (the pair
 * then walks memory as one axis). */
static inline void tfg_index_simplify(tfg_index_map *x, const tfg_shape *out, int64_t st[][TFG_MAX_RANK],
                                      int nin) {
  x->nin = nin;
  x->rank = 0;
  for (int i = 0; i < out->rank; i++) {
    if (out->dim[i] == 1) continue; /* index always 0: contributes nothing */
    int p = x->rank - 1;
    bool merge = p >= 0;
    for (int k = 0; k < nin && merge; k++) merge = x->st[k][p] == st[k][i] * out->dim[i];
    if (merge) {
      x->dim[p] *= out->dim[i];
      for (int k = 0; k < nin; k++) x->st[k][p] = st[k][i];
    } else {
      x->dim[x->rank] = out->dim[i];
      for (int k = 0; k < nin; k++) x->st[k][x->rank] = st[k][i];
      x->rank++;
    }
  }
  if (x->rank == 0) { /* every axis has size 1 (or a scalar): one element */
    x->rank = 1;
    x->dim[0] = 1;
    for (int k = 0; k < nin; k++) x->st[k][0] = 0;
  }
  for (int k = nin; k < TFG_INDEX_MAX_OPERANDS; k++)
    for (int i = 0; i < TFG_MAX_RANK; i++) x->st[k][i] = 0;
  for (int i = x->rank; i < TFG_MAX_RANK; i++) {
    x->dim[i] = 1;
    for (int k = 0; k < TFG_INDEX_MAX_OPERANDS; k++) x->st[k][i] = 0;
  }
}

/* The dim of s that NumPy's right alignment puts under axis i of a
 * rank-r output: 1 where s has no such axis. */
static inline int64_t tfg_index_aligned_dim(const tfg_shape *s, int r, int i) {
  int j = i - (r - s->rank);
  return j >= 0 ? s->dim[j] : 1;
}

/* NumPy broadcasting of shape s (rank <= out's) to out: st[i] is s's
 * stride (elements, row-major) along output axis i, 0 where s's aligned
 * dim is 1 or missing. Returns -1, or the output axis (the last one
 * found, scanning from the right) where s's aligned dim is neither 1 nor
 * the output's: s does not broadcast to out. */
static inline int tfg_index_broadcast_strides(const tfg_shape *s, const tfg_shape *out, int64_t *st) {
  int r = out->rank;
  int64_t stride = 1;
  for (int i = r - 1; i >= 0; i--) {
    int64_t d = tfg_index_aligned_dim(s, r, i);
    if (d != 1 && d != out->dim[i]) return i;
    st[i] = d == 1 ? 0 : stride;
    stride *= d;
  }
  return -1;
}

/* x for in[0..nin) (nin <= 3) broadcast to shape out. False when an
 * input does not broadcast to out (rank too high, or a dim that is
 * neither 1 nor the output's): the shape rule should have caught it, but
 * a kernel must not read out of bounds. */
static inline bool tfg_index_broadcast(tfg_index_map *x, const tfg_shape *out, const tfg_tensor *in, int nin) {
  int64_t st[TFG_INDEX_MAX_OPERANDS][TFG_MAX_RANK];
  if (nin < 1 || nin > TFG_INDEX_MAX_OPERANDS || out->rank < 0 || out->rank > TFG_MAX_RANK) return false;
  for (int k = 0; k < nin; k++)
    if (in[k].shape.rank > out->rank || tfg_index_broadcast_strides(&in[k].shape, out, st[k]) >= 0) return false;
  tfg_index_simplify(x, out, st, nin);
  return true;
}

/* x for one operand read at strides st[i] (elements) per axis i of out:
 * the gather behind transpose and broadcast. */
static inline void tfg_index_gather(tfg_index_map *x, const tfg_shape *out, const int64_t *st) {
  int64_t s[1][TFG_MAX_RANK];
  for (int i = 0; i < out->rank; i++) s[0][i] = st[i];
  tfg_index_simplify(x, out, s, 1);
}

/* ---- transpose, concat, slice ------------------------------------------------ */

/* The strides st[i] of a transpose of in (same rank as out): output axis
 * i is input axis perm[i], so it reads at in's row-major stride of axis
 * perm[i]. False when perm is not a permutation of the axes or an output
 * dim is not its input axis's. */
static inline bool tfg_index_transpose_strides(const tfg_shape *in, const tfg_shape *out, const int *perm,
                                               int64_t *st) {
  int r = in->rank;
  int64_t inst[TFG_MAX_RANK], stride = 1;
  for (int i = r - 1; i >= 0; i--) {
    inst[i] = stride;
    stride *= in->dim[i];
  }
  unsigned seen = 0;
  for (int i = 0; i < r; i++) {
    int p = perm[i];
    if (p < 0 || p >= r || (seen >> p & 1) || out->dim[i] != in->dim[p]) return false;
    seen |= 1u << p;
    st[i] = inst[p];
  }
  return true;
}

/* s viewed as [outer, s.dim[axis], inner] around axis (0 <= axis < rank):
 * outer the product of the dims before it, inner `unit` times the product
 * of the dims after it (unit: 1 for elements, the element size for bytes). */
static inline void tfg_index_split(const tfg_shape *s, int64_t axis, int64_t unit, int64_t *outer,
                                   int64_t *inner) {
  *outer = 1;
  *inner = unit;
  for (int i = 0; i < axis; i++) *outer *= s->dim[i];
  for (int i = (int)axis + 1; i < s->rank; i++) *inner *= s->dim[i];
}

/* ---- reductions ------------------------------------------------------------- */

/* A reduction's input after simplification: outer kept blocks (kdim,
 * kst), outer reduced blocks (rdim, rst), and the last block of L
 * contiguous elements, reduced or kept. Strides are in elements. */
typedef struct tfg_reduce_shape {
  int nk, nr;
  int64_t kdim[TFG_MAX_RANK], kst[TFG_MAX_RANK];
  int64_t rdim[TFG_MAX_RANK], rst[TFG_MAX_RANK];
  int64_t L;
  bool last_reduced;
} tfg_reduce_shape;

/* Simplifies input shape s reduced over the axes set in the mask `axes`:
 * drops size-1 axes and merges runs of kept or of reduced axes; a single
 * element is one reduced block of 1. */
static inline void tfg_reduce_simplify(tfg_reduce_shape *g, const tfg_shape *s, uint32_t axes) {
  int m = 0;
  int64_t dim[TFG_MAX_RANK];
  bool red[TFG_MAX_RANK];
  for (int i = 0; i < s->rank; i++) {
    if (s->dim[i] == 1) continue;
    bool ri = axes >> i & 1;
    if (m > 0 && red[m - 1] == ri) {
      dim[m - 1] *= s->dim[i];
    } else {
      dim[m] = s->dim[i];
      red[m++] = ri;
    }
  }
  if (m == 0) { /* a single element */
    dim[0] = 1;
    red[m++] = true;
  }
  int64_t stride = 1, st[TFG_MAX_RANK];
  for (int i = m - 1; i >= 0; i--) {
    st[i] = stride;
    stride *= dim[i];
  }
  g->nk = g->nr = 0;
  for (int i = 0; i < m - 1; i++) {
    if (red[i]) {
      g->rdim[g->nr] = dim[i];
      g->rst[g->nr++] = st[i];
    } else {
      g->kdim[g->nk] = dim[i];
      g->kst[g->nk++] = st[i];
    }
  }
  g->L = dim[m - 1];
  g->last_reduced = red[m - 1];
}

/* The number of input elements of s reduced into each output: the
 * product of the dims of the axes set in `axes`. */
static inline int64_t tfg_reduce_count(const tfg_shape *s, uint32_t axes) {
  int64_t count = 1;
  for (int i = 0; i < s->rank; i++)
    if (axes >> i & 1) count *= s->dim[i];
  return count;
}

#endif
