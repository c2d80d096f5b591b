/* kernels/cpu/reduce.c: SUM, MEAN and MAX over a set of axes, and ARGMAX.
 *
 * A reduction first simplifies the input's shape (tfg_reduce_simplify,
 * kernels/index_math.h, the CUDA kernel's too): size-1 axes are dropped
 * and neighbouring axes that are both kept or both reduced are merged,
 * since that changes neither the output order nor which elements meet.
 * What is left alternates kept and reduced blocks, and only the last
 * block matters for memory order:
 *   - last block reduced (row sums, x[K, R]): each output is a sum of
 *     contiguous runs, read at full speed;
 *   - last block kept (column sums, x[R, K]): each output row is built by
 *     adding whole input rows into a tile of accumulators, so the input is
 *     still read in order instead of striding down columns.
 * Outputs are split over ctx->pool (chunks write disjoint outputs and
 * each output is summed in one fixed order). A reduction to one value is
 * split instead into fixed blocks of the input whose partial sums are
 * added in block order: the block size does not depend on the thread
 * count, so the result is bit-identical on any number of threads.
 *
 * The column reduction over every leading axis, x[R, L] to [L] (a bias
 * gradient, layer_norm's dgamma: no outer kept axis), has its own path,
 * colsum below, that reads at memory speed: work items of about BLOCK
 * elements, each a block of whole rows (or a tile of TILE columns of
 * them) added row by row into an [L] accumulator, its inner loop over
 * the columns vectorized; when rows are short (L < SUPER) q rows at a
 * time are added as one row of q L accumulators, folded at the end. The
 * row blocks' partials are combined in block order. Block and fold sizes
 * depend on the shape alone: bit-identical on any number of threads.
 * (Splitting over outputs, as above, would hand each thread a few
 * columns of every row: a cache line per row for a few values.)
 *
 * f32 and f64 sums accumulate in double (f32 data gains ~29 bits of
 * headroom, so a sum of a million f32 values is still correctly rounded
 * in practice), and so do f16 and bf16, widened a block at a time to f32
 * (DEF_HALF below); integer sums wrap in 64 bits and are then narrowed. MAX
 * propagates NaN, as PyTorch does. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cast_math.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/index_math.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_SUM, tfg_cpu_reduce},
    {TFG_OP_MEAN, tfg_cpu_reduce},
    {TFG_OP_MAX, tfg_cpu_reduce},
    {TFG_OP_ARGMAX, tfg_cpu_argmax},
};

void tfg_cpu_register_reduce(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

#if defined(__GNUC__) && !defined(__clang__)
/* See kernels/cpu/elementwise.c: lets GCC -O2 vectorize the row loops. */
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

enum {
  GRAIN = 32768, /* input elements per parallel chunk */
  BLOCK = 32768, /* input elements per partial of a full reduction */
  TILE = 1024,   /* accumulators kept on the stack while adding rows */
};

/* One accumulator: double for float data, int64 for integer data. */
typedef union acc {
  double d;
  int64_t i;
} acc;

/* The per-dtype inner loops of one reduction; `first` starts a fresh
 * accumulation instead of combining into the existing one. */
typedef struct reducer {
  /* *a (+)= reduce(x[0..n)), n >= 1 */
  void (*contig)(const void *x, int64_t n, acc *a, bool first);
  /* a[j] (+)= x[j] for j < n */
  void (*rows)(const void *x, int64_t n, acc *a, bool first);
  /* a[j] (+)= (x[j] + x[j + ld]) + (x[j + 2 ld] + x[j + 3 ld]): four rows
   * at a time, for colsum (a quarter of the accumulator traffic); NULL:
   * rows four times */
  void (*rows4)(const void *x, int64_t ld, int64_t n, acc *a, bool first);
  /* *a (+)= *b */
  void (*combine)(acc *a, const acc *b);
  /* y[j] = a[j], or a[j] / count for MEAN */
  void (*store)(const acc *a, int64_t n, void *y, bool mean, double count);
} reducer;

/* SUM over contiguous data uses four accumulators: independent add
 * chains run ~4x faster than one, and the association is fixed by n
 * alone, so it stays deterministic. */
#define DEF_SUM(SUF, T, F, U)                                                           \
  static void contig_sum_##SUF(const void *xv, int64_t n, acc *a, bool first) {         \
    const T *x = xv;                                                                    \
    U s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                   \
    int64_t i = 0;                                                                      \
    for (; i + 4 <= n; i += 4) {                                                        \
      s0 += (U)x[i];                                                                    \
      s1 += (U)x[i + 1];                                                                \
      s2 += (U)x[i + 2];                                                                \
      s3 += (U)x[i + 3];                                                                \
    }                                                                                   \
    for (; i < n; i++) s0 += (U)x[i];                                                   \
    U s = (s0 + s1) + (s2 + s3);                                                        \
    if (first) a->F = s;                                                                \
    else a->F = (U)a->F + s;                                                            \
  }                                                                                     \
  static void rows_sum_##SUF(const void *xv, int64_t n, acc *a, bool first) {           \
    const T *x = xv;                                                                    \
    if (first)                                                                          \
      for (int64_t j = 0; j < n; j++) a[j].F = (U)x[j];                                 \
    else                                                                                \
      for (int64_t j = 0; j < n; j++) a[j].F = (U)a[j].F + (U)x[j];                     \
  }                                                                                     \
  static void rows4_sum_##SUF(const void *xv, int64_t ld, int64_t n, acc *a, bool first) { \
    const T *x0 = xv, *x1 = x0 + ld, *x2 = x1 + ld, *x3 = x2 + ld;                      \
    if (first)                                                                          \
      for (int64_t j = 0; j < n; j++) a[j].F = ((U)x0[j] + (U)x1[j]) + ((U)x2[j] + (U)x3[j]); \
    else                                                                                \
      for (int64_t j = 0; j < n; j++)                                                   \
        a[j].F = (U)a[j].F + (((U)x0[j] + (U)x1[j]) + ((U)x2[j] + (U)x3[j]));           \
  }                                                                                     \
  static void combine_sum_##SUF(acc *a, const acc *b) {                                 \
    a->F = (U)a->F + (U)b->F;                                                           \
  }

/* MAX: for floats, (v > m || v != v) keeps the first NaN once seen
 * (nothing compares greater than NaN afterwards). */
#define DEF_MAX(SUF, T, F)                                                              \
  static void contig_max_##SUF(const void *xv, int64_t n, acc *a, bool first) {         \
    const T *x = xv;                                                                    \
    T m0 = x[0], m1 = x[0], m2 = x[0], m3 = x[0];                                       \
    int64_t i = 1;                                                                      \
    for (; i + 4 <= n; i += 4) {                                                        \
      m0 = (x[i] > m0 || x[i] != x[i]) ? x[i] : m0;                                     \
      m1 = (x[i + 1] > m1 || x[i + 1] != x[i + 1]) ? x[i + 1] : m1;                     \
      m2 = (x[i + 2] > m2 || x[i + 2] != x[i + 2]) ? x[i + 2] : m2;                     \
      m3 = (x[i + 3] > m3 || x[i + 3] != x[i + 3]) ? x[i + 3] : m3;                     \
    }                                                                                   \
    for (; i < n; i++) m0 = (x[i] > m0 || x[i] != x[i]) ? x[i] : m0;                    \
    m0 = (m1 > m0 || m1 != m1) ? m1 : m0;                                               \
    m0 = (m2 > m0 || m2 != m2) ? m2 : m0;                                               \
    m0 = (m3 > m0 || m3 != m3) ? m3 : m0;                                               \
    if (first || m0 > a->F || m0 != m0) a->F = m0;                                      \
  }                                                                                     \
  static void rows_max_##SUF(const void *xv, int64_t n, acc *a, bool first) {           \
    const T *x = xv;                                                                    \
    if (first)                                                                          \
      for (int64_t j = 0; j < n; j++) a[j].F = x[j];                                    \
    else                                                                                \
      for (int64_t j = 0; j < n; j++)                                                   \
        a[j].F = (x[j] > a[j].F || x[j] != x[j]) ? x[j] : a[j].F;                       \
  }                                                                                     \
  static void combine_max_##SUF(acc *a, const acc *b) {                                 \
    if (b->F > a->F || b->F != b->F) a->F = b->F;                                       \
  }

#define DEF_STORE(SUF, T, F)                                                            \
  static void store_##SUF(const acc *a, int64_t n, void *yv, bool mean, double count) { \
    T *y = yv;                                                                          \
    if (mean)                                                                           \
      for (int64_t j = 0; j < n; j++) y[j] = (T)((double)a[j].F / count);               \
    else                                                                                \
      for (int64_t j = 0; j < n; j++) y[j] = (T)a[j].F;                                 \
  }

/* Integer sums go through uint64_t so overflow wraps instead of being
 * undefined; narrowing to i32 then keeps the low 32 bits, as a wrapping
 * i32 sum would. */
DEF_SUM(f32, float, d, double)
DEF_SUM(f64, double, d, double)
DEF_SUM(i32, int32_t, i, uint64_t)
DEF_SUM(i64, int64_t, i, uint64_t)
DEF_MAX(f32, float, d)
DEF_MAX(f64, double, d)
DEF_MAX(i32, int32_t, i)
DEF_MAX(i64, int64_t, i)
DEF_STORE(f32, float, d)
DEF_STORE(f64, double, d)
DEF_STORE(i32, int32_t, i)
DEF_STORE(i64, int64_t, i)

/* f16 and bf16 (kernels/cpu/half.c): each run of input is widened a
 * block at a time into an f32 scratch and handed to the f32 loop, which
 * accumulates in double as for f32 data (exact widening, so a block
 * boundary changes nothing but the fixed association); the stored result
 * is rounded once, from the double, to the 16-bit format. */
enum { HALF_BLOCK = 256 };

/* Runs the f32 loop f over x[0..n) of dtype dt a block at a time: a
 * contig loop folds every block into *a (fresh only for the first), a
 * rows loop gets block b's accumulators a[b..]. */
static void half_blocks(tfg_dtype dt, const void *x, int64_t n, acc *a, bool first, bool rows,
                        void (*f)(const void *, int64_t, acc *, bool)) {
  float buf[HALF_BLOCK];
  for (int64_t i = 0; i < n; i += HALF_BLOCK) {
    int64_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
    tfg_cpu_half_load(dt, (const uint16_t *)x + i, buf, m);
    f(buf, m, rows ? a + i : a, rows ? first : first && i == 0);
  }
}

/* LOOP_SUF, the f16 or bf16 (DT) form of an f32 loop: LOOP_f32 on x
 * widened a block at a time (half_blocks; ROWS for a rows loop, whose
 * accumulators follow the blocks). */
#define DEF_HALF_LOOP(LOOP, SUF, DT, ROWS)                                              \
  static void LOOP##_##SUF(const void *x, int64_t n, acc *a, bool first) {              \
    half_blocks(DT, x, n, a, first, ROWS, LOOP##_f32);                                  \
  }
#define DEF_HALF(SUF, DT, F64_TO_HALF)                                                  \
  DEF_HALF_LOOP(contig_sum, SUF, DT, false)                                             \
  DEF_HALF_LOOP(contig_max, SUF, DT, false)                                             \
  DEF_HALF_LOOP(rows_sum, SUF, DT, true)                                                \
  DEF_HALF_LOOP(rows_max, SUF, DT, true)                                                \
  static void store_##SUF(const acc *a, int64_t n, void *yv, bool mean, double count) { \
    uint16_t *y = yv;                                                                   \
    for (int64_t j = 0; j < n; j++) y[j] = F64_TO_HALF(mean ? a[j].d / count : a[j].d); \
  }
DEF_HALF(f16, TFG_DTYPE_F16, tfg_cast_f64_to_f16)
DEF_HALF(bf16, TFG_DTYPE_BF16, tfg_cast_f64_to_bf16)
#define combine_sum_f16 combine_sum_f32
#define combine_sum_bf16 combine_sum_f32
#define combine_max_f16 combine_max_f32
#define combine_max_bf16 combine_max_f32

#define REDUCER(KIND, SUF) {contig_##KIND##_##SUF, rows_##KIND##_##SUF, NULL, combine_##KIND##_##SUF, store_##SUF}
#define REDUCER4(SUF) {contig_sum_##SUF, rows_sum_##SUF, rows4_sum_##SUF, combine_sum_##SUF, store_##SUF}

/* The reducer for op on dt, or NULL when unsupported. */
static const reducer *reducer_for(tfg_op_id op, tfg_dtype dt) {
  static const reducer sum[] = {REDUCER4(f32), REDUCER4(f64), REDUCER(sum, f16),
                                REDUCER(sum, bf16), REDUCER4(i32), REDUCER4(i64)};
  static const reducer max[] = {REDUCER(max, f32), REDUCER(max, f64), REDUCER(max, f16),
                                REDUCER(max, bf16), REDUCER(max, i32), REDUCER(max, i64)};
  int k;
  switch (dt) {
  case TFG_DTYPE_F32: k = 0; break;
  case TFG_DTYPE_F64: k = 1; break;
  case TFG_DTYPE_F16: k = 2; break;
  case TFG_DTYPE_BF16: k = 3; break;
  case TFG_DTYPE_I32: k = 4; break;
  case TFG_DTYPE_I64: k = 5; break;
  default: return NULL;
  }
  if (op == TFG_OP_MAX) return &max[k];
  if (op == TFG_OP_SUM || (op == TFG_OP_MEAN && k < 4)) return &sum[k];
  return NULL;
}

/* ---- SUM MEAN MAX ------------------------------------------------------------ */

/* The simplified problem: outer kept axes (kdim, input strides kst), outer
 * reduced axes (rdim, rst), then the last block of L contiguous elements,
 * reduced or kept. Strides are in elements. */
typedef struct reduce_job {
  const reducer *r;
  bool mean;
  double count; /* elements reduced into each output */
  const char *x;
  char *y;
  int64_t isz, osz;
  tfg_reduce_shape g; /* the simplified input (kernels/index_math.h) */
  acc *partial; /* full reductions: one per block */
} reduce_job;

/* The input offset of outer kept index ok (row-major over kdim). */
static int64_t kept_offset(const reduce_job *j, int64_t ok) {
  int64_t off = 0;
  for (int i = j->g.nk - 1; i >= 0; i--) {
    off += (ok % j->g.kdim[i]) * j->g.kst[i];
    ok /= j->g.kdim[i];
  }
  return off;
}

/* Steps the odometer over the outer reduced axes; false after the last. */
static bool next_reduced(const reduce_job *j, int64_t *idx, int64_t *off) {
  for (int i = j->g.nr - 1; i >= 0; i--) {
    *off += j->g.rst[i];
    if (++idx[i] < j->g.rdim[i]) return true;
    *off -= j->g.rdim[i] * j->g.rst[i];
    idx[i] = 0;
  }
  return false;
}

/* Outputs [lo, hi) in flat output order. */
static void reduce_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const reduce_job *j = arg;
  int64_t lk = j->g.last_reduced ? 1 : j->g.L; /* outputs per outer kept index */
  acc buf[TILE];
  for (int64_t o = lo; o < hi;) {
    int64_t ok = o / lk, j0 = o % lk;
    int64_t run = lk - j0 < hi - o ? lk - j0 : hi - o;
    int64_t base = kept_offset(j, ok);
    for (int64_t t = 0; t < run; t += TILE) {
      int64_t m = run - t < TILE ? run - t : TILE;
      int64_t ridx[TFG_MAX_RANK] = {0}, roff = 0;
      bool first = true;
      do {
        if (j->g.last_reduced)
          j->r->contig(j->x + (base + roff) * j->isz, j->g.L, buf, first);
        else
          j->r->rows(j->x + (base + roff + j0 + t) * j->isz, m, buf, first);
        first = false;
      } while (next_reduced(j, ridx, &roff));
      j->r->store(buf, m, j->y + (o + t) * j->osz, j->mean, j->count);
    }
    o += run;
  }
}

/* Blocks [lo, hi) of a full reduction: one partial per block. */
static void block_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const reduce_job *j = arg;
  for (int64_t b = lo; b < hi; b++) {
    int64_t start = b * BLOCK, n = j->g.L - start < BLOCK ? j->g.L - start : BLOCK;
    j->r->contig(j->x + start * j->isz, n, &j->partial[b], true);
  }
}

/* ---- column reductions: x[R, L] to [L] ---------------------------------------- */

enum {
  SUPER = 64, /* rows shorter than this are added q at a time, q L >= SUPER */
};

typedef struct colsum_job {
  const reduce_job *j;
  int64_t R, L;
  int64_t rb;     /* rows per block */
  int64_t nrb;    /* row blocks: partials when > 1 */
  int64_t ntiles; /* column tiles of TILE per block (1 when q > 1) */
  int64_t q;      /* rows added at a time (1 unless L < SUPER) */
  acc *partial;   /* [nrb][L] when nrb > 1 */
} colsum_job;

/* Adds the n rows of m values at x, ld elements apart, into a: four at a
 * time where the reducer has rows4, then one by one; `first` starts a. */
static void add_rows(const reduce_job *j, const char *x, int64_t ld, int64_t n, int64_t m, acc *a, bool first) {
  int64_t r = 0, step = ld * j->isz;
  if (j->r->rows4)
    for (; r + 4 <= n; r += 4, x += 4 * step, first = false) j->r->rows4(x, ld, m, a, first);
  for (; r < n; r++, x += step, first = false) j->r->rows(x, m, a, first);
}

/* Work item it = (row block it / ntiles, column tile it % ntiles): its
 * rows added in order (add_rows) into a tile of accumulators, which go to
 * the row block's partial (or, with one row block, to the output). */
static void colsum_items(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const colsum_job *c = arg;
  const reduce_job *j = c->j;
  acc buf[TILE];
  for (int64_t it = lo; it < hi; it++) {
    int64_t b = it / c->ntiles, c0 = it % c->ntiles * TILE;
    int64_t m = c->L - c0 < TILE ? c->L - c0 : TILE;
    int64_t r0 = b * c->rb, r1 = r0 + c->rb < c->R ? r0 + c->rb : c->R;
    const char *x = j->x + (r0 * c->L + c0) * j->isz;
    if (c->q == 1) {
      add_rows(j, x, c->L, r1 - r0, m, buf, true);
    } else {
      /* q rows at a time: q L accumulators, group g holding rows g mod q
       * of the block; the rows past the last whole group go to group 0;
       * then the groups are folded into group 0 in order. */
      int64_t w = c->q * c->L, nsup = (r1 - r0) / c->q;
      add_rows(j, x, w, nsup, w, buf, true);
      add_rows(j, x + nsup * w * j->isz, c->L, r1 - r0 - nsup * c->q, c->L, buf, nsup == 0);
      if (nsup > 0)
        for (int64_t g = 1; g < c->q; g++)
          for (int64_t i = 0; i < c->L; i++) j->r->combine(&buf[i], &buf[g * c->L + i]);
    }
    if (c->nrb == 1) j->r->store(buf, m, j->y + c0 * j->osz, j->mean, j->count);
    else memcpy(c->partial + b * c->L + c0, buf, (size_t)m * sizeof *buf);
  }
}

/* Columns [lo, hi): the row blocks' partials combined in block order,
 * then stored. */
static void colsum_combine(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const colsum_job *c = arg;
  const reduce_job *j = c->j;
  acc *p0 = c->partial;
  for (int64_t b = 1; b < c->nrb; b++) {
    const acc *pb = c->partial + b * c->L;
    for (int64_t i = lo; i < hi; i++) j->r->combine(&p0[i], &pb[i]);
  }
  j->r->store(p0 + lo, hi - lo, j->y + lo * j->osz, j->mean, j->count);
}

/* The reduction j of a contiguous x[R, L] over R to [L] (R > 1). */
static tfg_status colsum(tfg_kernel_ctx *ctx, const reduce_job *j, int64_t R, int64_t L) {
  colsum_job c = {.j = j, .R = R, .L = L, .q = 1};
  if (L < SUPER) c.q = (SUPER + L - 1) / L;
  int64_t width = L < TILE ? L : TILE;
  c.ntiles = (L + TILE - 1) / TILE;
  /* Whole rows per block: about BLOCK elements per work item, and at
   * least q rows so a block adds whole groups. */
  c.rb = BLOCK / width > c.q ? BLOCK / width : c.q;
  if (c.q > 1) c.rb -= c.rb % c.q;
  c.nrb = (R + c.rb - 1) / c.rb;
  if (c.nrb > 1) {
    c.partial = malloc((size_t)(c.nrb * L) * sizeof *c.partial);
    if (!c.partial) return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory");
  }
  tfg_parallel_for(ctx->pool, c.nrb * c.ntiles, 1, colsum_items, &c);
  if (c.nrb > 1) {
    tfg_parallel_for(ctx->pool, L, tfg_parallel_grain(BLOCK, c.nrb), colsum_combine, &c);
    free(c.partial);
  }
  return TFG_OK;
}

/* SUM, MEAN, MAX of in[0] over the input axes set in attrs.axes; out has
 * the reduced shape (with or without keepdims: the element order is the
 * same). f32/f64/f16/bf16 for all three, i32/i64 for SUM and MAX. A MEAN over no
 * elements is NaN and a SUM 0; a MAX over no elements is an error. */
TFG_CPU_KERNEL(tfg_cpu_reduce) {
  const tfg_tensor *x = &in[0];
  const reducer *r = reducer_for(node->op, x->dtype);
  if (!r || out->dtype != x->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the CPU",
                           node->op == TFG_OP_SUM ? "sum" : node->op == TFG_OP_MEAN ? "mean" : "max",
                           tfg_dtype_name(x->dtype));
  const tfg_shape *s = &x->shape;
  uint32_t axes = node->attrs.axes;
  int64_t count = tfg_reduce_count(s, axes), nout = tfg_shape_numel(&out->shape);
  int64_t nin = tfg_shape_numel(s);
  if (count * nout != nin && count != 0)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "reduction: output size %lld does not match",
                           (long long)nout);

  reduce_job j = {.r = r, .mean = node->op == TFG_OP_MEAN, .count = (double)count,
                  .x = x->data, .y = out->data, .isz = (int64_t)tfg_dtype_size(x->dtype),
                  .osz = (int64_t)tfg_dtype_size(out->dtype)};
  if (nout == 0) return TFG_OK;
  if (count == 0) { /* reducing an empty axis: the empty sum */
    if (node->op == TFG_OP_MAX)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "max over an empty axis has no value");
    acc zero[TILE];
    memset(zero, 0, sizeof zero);
    for (int64_t o = 0; o < nout; o += TILE)
      r->store(zero, nout - o < TILE ? nout - o : TILE, j.y + o * j.osz, j.mean, j.count);
    return TFG_OK;
  }

  tfg_reduce_simplify(&j.g, s, axes);

  if (nout == 1 && j.g.L > BLOCK) { /* one long contiguous run */
    int64_t nblocks = (j.g.L + BLOCK - 1) / BLOCK;
    j.partial = malloc((size_t)nblocks * sizeof *j.partial);
    if (!j.partial) return tfg_kernel_fail(ctx, TFG_ERR_NOMEM, "out of host memory");
    tfg_parallel_for(ctx->pool, nblocks, 1, block_chunk, &j);
    for (int64_t b = 1; b < nblocks; b++) r->combine(&j.partial[0], &j.partial[b]);
    r->store(&j.partial[0], 1, j.y, j.mean, j.count);
    free(j.partial);
    return TFG_OK;
  }
  if (!j.g.last_reduced && j.g.nk == 0 && j.g.nr == 1) /* every leading axis reduced: x[R, L] */
    return colsum(ctx, &j, j.g.rdim[0], j.g.L);
  tfg_parallel_for(ctx->pool, nout, tfg_parallel_grain(GRAIN, count), reduce_chunk, &j);
  return TFG_OK;
}

/* ---- ARGMAX ------------------------------------------------------------------- */

typedef struct argmax_job {
  tfg_dtype dt;
  const char *x;
  int32_t *y;
  int64_t len, inner; /* the reduced axis and the elements after it */
  int64_t isz;
} argmax_job;

/* Columns [j0, j0 + m) of outer slice x (len rows of `inner` elements):
 * the index of the first maximum of each column, a NaN beating every
 * number (as PyTorch's argmax). Rows are read in order; best/done hold
 * the column states. v != v is the NaN test, always false for ints. */
#define ARGMAX_COLS(T)                                                        \
  do {                                                                        \
    const T *p = (const T *)xs + j0;                                          \
    T best[TILE];                                                             \
    bool done[TILE];                                                          \
    for (int64_t c = 0; c < m; c++) {                                         \
      best[c] = p[c];                                                         \
      done[c] = p[c] != p[c];                                                 \
      y[c] = 0;                                                               \
    }                                                                         \
    for (int64_t a = 1; a < j->len; a++) {                                    \
      const T *row = p + a * j->inner;                                        \
      for (int64_t c = 0; c < m; c++) {                                       \
        T v = row[c];                                                         \
        if (done[c]) continue;                                                \
        if (v != v) {                                                         \
          done[c] = true;                                                     \
          y[c] = (int32_t)a;                                                  \
        } else if (v > best[c]) {                                             \
          best[c] = v;                                                        \
          y[c] = (int32_t)a;                                                  \
        }                                                                     \
      }                                                                       \
    }                                                                         \
  } while (0)

/* A contiguous axis (inner == 1): a plain scan that stops at a NaN. */
#define ARGMAX_RUN(T)                                                         \
  do {                                                                        \
    const T *p = (const T *)xs;                                               \
    T best = p[0];                                                            \
    int64_t bi = 0;                                                           \
    if (best == best)                                                         \
      for (int64_t a = 1; a < j->len; a++) {                                  \
        if (p[a] != p[a]) {                                                   \
          bi = a;                                                             \
          break;                                                              \
        }                                                                     \
        if (p[a] > best) {                                                    \
          best = p[a];                                                        \
          bi = a;                                                             \
        }                                                                     \
      }                                                                       \
    *y = (int32_t)bi;                                                         \
  } while (0)

static void argmax_cols(const argmax_job *j, const char *xs, int64_t j0, int64_t m, int32_t *y) {
  switch (j->dt) {
  case TFG_DTYPE_F32: ARGMAX_COLS(float); break;
  case TFG_DTYPE_F64: ARGMAX_COLS(double); break;
  case TFG_DTYPE_I32: ARGMAX_COLS(int32_t); break;
  default: ARGMAX_COLS(int64_t); break;
  }
}

static void argmax_run(const argmax_job *j, const char *xs, int32_t *y) {
  switch (j->dt) {
  case TFG_DTYPE_F32: ARGMAX_RUN(float); break;
  case TFG_DTYPE_F64: ARGMAX_RUN(double); break;
  case TFG_DTYPE_I32: ARGMAX_RUN(int32_t); break;
  default: ARGMAX_RUN(int64_t); break;
  }
}

/* Outputs [lo, hi): output o is column o % inner of outer slice o / inner. */
static void argmax_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const argmax_job *j = arg;
  for (int64_t o = lo; o < hi;) {
    int64_t outer = o / j->inner, j0 = o % j->inner;
    int64_t run = j->inner - j0 < hi - o ? j->inner - j0 : hi - o;
    const char *xs = j->x + outer * j->len * j->inner * j->isz;
    if (j->inner == 1) {
      argmax_run(j, xs, j->y + o);
    } else {
      for (int64_t t = 0; t < run; t += TILE)
        argmax_cols(j, xs, j0 + t, run - t < TILE ? run - t : TILE, j->y + o + t);
    }
    o += run;
  }
}

/* The index (i32) of the first maximum of in[0] along attrs.axis; out has
 * the input's shape without that axis. f32 f64 i32 i64. */
TFG_CPU_KERNEL(tfg_cpu_argmax) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_argmax);
  const tfg_tensor *x = &in[0];
  tfg_dtype dt = x->dtype;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64 && dt != TFG_DTYPE_I32 && dt != TFG_DTYPE_I64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "argmax on %s is not supported on the CPU",
                           tfg_dtype_name(dt));
  if (out->dtype != TFG_DTYPE_I32)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "argmax writes i32, not %s",
                           tfg_dtype_name(out->dtype));
  int64_t axis = node->attrs.axis;
  if (axis < 0 || axis >= x->shape.rank)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "argmax: axis %lld is out of range",
                           (long long)axis);
  argmax_job j = {.dt = dt, .x = x->data, .y = out->data, .len = x->shape.dim[axis], .inner = 1,
                  .isz = (int64_t)tfg_dtype_size(dt)};
  int64_t outer = 1;
  for (int i = 0; i < axis; i++) outer *= x->shape.dim[i];
  for (int i = (int)axis + 1; i < x->shape.rank; i++) j.inner *= x->shape.dim[i];
  int64_t nout = tfg_shape_numel(&out->shape);
  if (nout != outer * j.inner)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "argmax: output size %lld does not match",
                           (long long)nout);
  if (nout == 0) return TFG_OK;
  if (j.len == 0)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "argmax over an empty axis has no value");
  if (j.len > INT32_MAX)
    return tfg_kernel_fail(ctx, TFG_ERR_LIMIT, "argmax: axis of %lld elements exceeds i32",
                           (long long)j.len);
  tfg_parallel_for(ctx->pool, nout, tfg_parallel_grain(GRAIN, j.len), argmax_chunk, &j);
  return TFG_OK;
}
