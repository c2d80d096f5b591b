/* kernels/cpu/shape.c: reshape/flatten, transpose, concat, slice and
 * broadcast: ops that only move elements, so they work on element bytes
 * and support every dtype.
 *
 * Transpose and broadcast are both a gather: output element i comes from
 * the input at sum(idx_k * stride_k) over the output's multi-index, with
 * permuted strides for transpose and stride 0 along broadcast axes. The
 * gather simplifies its shape the same way the elementwise broadcaster
 * does (drop size-1 axes, merge axes that stay contiguous), so a
 * transpose that keeps the last axis copies whole rows with memcpy, and
 * one that moves it reads 32x32 tiles so neither side of the copy strides
 * through memory a row apart per element. Concat and slice are copies of
 * contiguous rows. Large copies are split over ctx->pool by output range. */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/index_math.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_RESHAPE, tfg_cpu_copy},
    {TFG_OP_FLATTEN, tfg_cpu_copy},
    {TFG_OP_TRANSPOSE, tfg_cpu_transpose},
    {TFG_OP_CONCAT, tfg_cpu_concat},
    {TFG_OP_SLICE, tfg_cpu_slice},
    {TFG_OP_BROADCAST, tfg_cpu_broadcast},
};

void tfg_cpu_register_shape(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

enum {
  GRAIN_BYTES = 256 * 1024, /* bytes per parallel chunk of a copy */
  TILE = 32,                /* transpose tile edge, in elements */
};

/* ---- gather -------------------------------------------------------------------- */

/* out[idx] = in[sum(idx[i] * st[i])] over the simplified output shape. */
typedef struct gather {
  int rank; /* >= 1 */
  int64_t dim[TFG_MAX_RANK], st[TFG_MAX_RANK];
  const char *src;
  char *dst;
  size_t esz;
  int64_t rows; /* tiled path: units of TILE output rows per outer index */
} gather;

/* Fills g from the output shape and the input stride of each output axis,
 * simplified as every strided read is (tfg_index_gather): size-1 axes
 * dropped, axis i merged into the one before when that one's stride is
 * st[i] * dim[i] (the pair then walks memory as one axis). */
static void gather_init(gather *g, const tfg_shape *out, const int64_t *st, const void *src,
                        void *dst, size_t esz) {
  tfg_index_map ix;
  tfg_index_gather(&ix, out, st);
  g->rank = ix.rank;
  for (int i = 0; i < ix.rank; i++) {
    g->dim[i] = ix.dim[i];
    g->st[i] = ix.st[0][i];
  }
  g->src = src;
  g->dst = dst;
  g->esz = esz;
}

/* n elements from src (stride s elements) to contiguous dst. */
#define STRIDED(T)                                                           \
  do {                                                                       \
    const T *S_ = (const T *)src;                                            \
    T *D_ = (T *)dst;                                                        \
    for (int64_t i = 0; i < n; i++) D_[i] = S_[i * s];                       \
  } while (0)

static void copy_strided(char *dst, const char *src, int64_t s, int64_t n, size_t esz) {
  if (s == 1) {
    memcpy(dst, src, (size_t)n * esz);
    return;
  }
  switch (esz) {
  case 1: STRIDED(uint8_t); break;
  case 2: STRIDED(uint16_t); break;
  case 4: STRIDED(uint32_t); break;
  case 8: STRIDED(uint64_t); break;
  default:
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * (int64_t)esz, src + i * s * (int64_t)esz, esz);
  }
}

/* The input element offset of output multi-index idx. */
static int64_t gather_offset(const gather *g, const int64_t *idx, int n) {
  int64_t off = 0;
  for (int i = 0; i < n; i++) off += idx[i] * g->st[i];
  return off;
}

/* Output elements [lo, hi), row by row along the last axis. */
static void gather_rows(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const gather *g = arg;
  int last = g->rank - 1;
  int64_t esz = (int64_t)g->esz, idx[TFG_MAX_RANK], rest = lo;
  for (int i = last; i >= 0; i--) {
    idx[i] = rest % g->dim[i];
    rest /= g->dim[i];
  }
  for (int64_t pos = lo; pos < hi;) {
    int64_t n = g->dim[last] - idx[last];
    if (n > hi - pos) n = hi - pos;
    copy_strided(g->dst + pos * esz, g->src + gather_offset(g, idx, g->rank) * esz, g->st[last],
                 n, g->esz);
    pos += n;
    idx[last] += n;
    for (int i = last; i > 0 && idx[i] == g->dim[i]; i--) {
      idx[i] = 0;
      idx[i - 1]++;
    }
  }
}

/* Tiled path for a last output axis that strides through the input: unit
 * u is TILE rows of the last two axes (dims r x c, input strides sr, sc)
 * under outer index u / g->rows. Each TILE x TILE tile is read and
 * written within a few cache lines per side. */
static void gather_tiles(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const gather *g = arg;
  int R = g->rank;
  int64_t r = g->dim[R - 2], c = g->dim[R - 1], sr = g->st[R - 2], sc = g->st[R - 1];
  int64_t esz = (int64_t)g->esz;
  for (int64_t u = lo; u < hi; u++) {
    int64_t outer = u / g->rows, r0 = (u % g->rows) * TILE;
    int64_t r1 = r0 + TILE < r ? r0 + TILE : r;
    int64_t idx[TFG_MAX_RANK], rest = outer;
    for (int i = R - 3; i >= 0; i--) {
      idx[i] = rest % g->dim[i];
      rest /= g->dim[i];
    }
    int64_t base = gather_offset(g, idx, R - 2);
    char *dst = g->dst + outer * r * c * esz;
    for (int64_t c0 = 0; c0 < c; c0 += TILE) {
      int64_t n = c - c0 < TILE ? c - c0 : TILE;
      for (int64_t i = r0; i < r1; i++)
        copy_strided(dst + (i * c + c0) * esz, g->src + (base + i * sr + c0 * sc) * esz, sc, n,
                     g->esz);
    }
  }
}

/* Runs the gather over the whole output. */
static void gather_run(gather *g, tfg_pool *pool, int64_t n) {
  if (n == 0) return;
  int R = g->rank;
  int64_t grain = GRAIN_BYTES / (int64_t)g->esz;
  if (R >= 2 && g->st[R - 1] > 1 && g->dim[R - 2] > 1 && g->dim[R - 1] >= 4) {
    int64_t r = g->dim[R - 2], c = g->dim[R - 1];
    g->rows = (r + TILE - 1) / TILE;
    int64_t units = n / (r * c) * g->rows, per_unit = TILE * c;
    tfg_parallel_for(pool, units, per_unit >= grain ? 1 : grain / per_unit, gather_tiles, g);
  } else {
    tfg_parallel_for(pool, n, grain, gather_rows, g);
  }
}

/* ---- RESHAPE FLATTEN --------------------------------------------------------- */

/* Same elements, same order, new shape: a plain copy (nothing when the
 * runtime gave the output the input's buffer). */
TFG_CPU_KERNEL(tfg_cpu_copy) {
  (void)node;
  int64_t n = tfg_shape_numel(&out->shape);
  if (tfg_shape_numel(&in[0].shape) != n || in[0].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "reshape: %lld elements into %lld",
                           (long long)tfg_shape_numel(&in[0].shape), (long long)n);
  if (in[0].data != out->data && n > 0) {
    tfg_shape flat = {.rank = 1, .dim = {n}};
    int64_t st[1] = {1};
    gather g;
    gather_init(&g, &flat, st, in[0].data, out->data, tfg_dtype_size(out->dtype));
    gather_run(&g, ctx->pool, n);
  }
  return TFG_OK;
}

/* ---- TRANSPOSE ------------------------------------------------------------------ */

/* Output axis i is input axis attrs.perm[i]. */
TFG_CPU_KERNEL(tfg_cpu_transpose) {
  int64_t st[TFG_MAX_RANK];
  tfg_status s = tfg_kernel_transpose_strides(ctx, node, in, out, st);
  if (s != TFG_OK) return s;
  gather g;
  gather_init(&g, &out->shape, st, in[0].data, out->data, tfg_dtype_size(out->dtype));
  gather_run(&g, ctx->pool, tfg_shape_numel(&out->shape));
  return TFG_OK;
}

/* ---- BROADCAST ------------------------------------------------------------------ */

/* NumPy broadcast of in[0] to out's shape: the input is aligned to the
 * right, its size-1 and missing axes repeat. */
TFG_CPU_KERNEL(tfg_cpu_broadcast) {
  (void)node;
  int64_t st[TFG_MAX_RANK];
  tfg_status s = tfg_kernel_broadcast_strides(ctx, in, out, st);
  if (s != TFG_OK) return s;
  gather g;
  gather_init(&g, &out->shape, st, in[0].data, out->data, tfg_dtype_size(out->dtype));
  gather_run(&g, ctx->pool, tfg_shape_numel(&out->shape));
  return TFG_OK;
}

/* ---- CONCAT SLICE ------------------------------------------------------------- */

/* A copy of `outer` rows: row o is `len` bytes, from src + o * sstep to
 * dst + o * dstep, for up to 8 sources at once (concat) or one (slice). */
typedef struct rows_job {
  int n;
  const char *src[8];
  char *dst;
  int64_t len[8], sstep[8], doff[8], dstep;
} rows_job;

static void rows_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const rows_job *j = arg;
  for (int64_t o = lo; o < hi; o++)
    for (int q = 0; q < j->n; q++)
      memcpy(j->dst + o * j->dstep + j->doff[q], j->src[q] + o * j->sstep[q], (size_t)j->len[q]);
}

static void rows_run(rows_job *j, tfg_pool *pool, int64_t outer) {
  if (outer == 0 || j->dstep == 0) return;
  int64_t grain = j->dstep >= GRAIN_BYTES ? 1 : GRAIN_BYTES / j->dstep;
  tfg_parallel_for(pool, outer, grain, rows_chunk, j);
}

/* node->ninputs inputs joined along attrs.axis; all other dims equal. */
TFG_CPU_KERNEL(tfg_cpu_concat) {
  int64_t axis = node->attrs.axis, outer, inner;
  tfg_status s = tfg_kernel_concat_rows(ctx, node, in, out, &outer, &inner);
  if (s != TFG_OK) return s;
  const tfg_shape *os = &out->shape;
  /* Up to 8 inputs per pass: each pass writes its own columns of every
   * output row, so passes are independent. */
  int64_t at = 0;
  for (int q0 = 0; q0 < node->ninputs; q0 += 8) {
    rows_job j = {.dst = out->data, .dstep = os->dim[axis] * inner};
    for (int q = q0; q < node->ninputs && q < q0 + 8; q++) {
      int64_t len = in[q].shape.dim[axis] * inner;
      j.src[j.n] = in[q].data;
      j.len[j.n] = len;
      j.sstep[j.n] = len;
      j.doff[j.n++] = at;
      at += len;
    }
    rows_run(&j, ctx->pool, outer);
  }
  return TFG_OK;
}

/* Elements [attrs.start, attrs.end) of in[0] along attrs.axis. */
TFG_CPU_KERNEL(tfg_cpu_slice) {
  int64_t axis = node->attrs.axis, start = node->attrs.start, end = node->attrs.end, outer, inner;
  tfg_status s = tfg_kernel_slice_rows(ctx, node, in, out, &outer, &inner);
  if (s != TFG_OK) return s;
  rows_job j = {.n = 1, .src = {(const char *)in[0].data + start * inner}, .dst = out->data,
                .len = {(end - start) * inner}, .sstep = {in[0].shape.dim[axis] * inner},
                .dstep = (end - start) * inner};
  rows_run(&j, ctx->pool, outer);
  return TFG_OK;
}
