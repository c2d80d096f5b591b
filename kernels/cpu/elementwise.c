/* kernels/cpu/elementwise.c: unary and binary math, where, and cast.
 *
 * Every kernel here is a loop over output elements. Binary ops and where
 * broadcast NumPy-style: kernels/index_math.h's tfg_index_map (the CUDA
 * kernels' too) aligns each input's shape to the output's from the right,
 * gives broadcast axes a stride of 0, drops size-1 axes and merges axes
 * that stay contiguous in every operand, and a small iterator below
 * (bcast_seek, bcast_advance) walks it. Same-shape operands therefore
 * collapse to one flat axis with stride 1, and the inner loops below are
 * plain a[i] op b[i] loops the compiler vectorizes; broadcasting a row
 * or a scalar becomes a loop with one operand held in a register. Large
 * outputs are split over ctx->pool by output element range, so chunks
 * write disjoint outputs and results do not depend on the thread count.
 *
 * Integer arithmetic wraps (two's complement, as PyTorch and NumPy do)
 * instead of being undefined behaviour: it is done in the unsigned type
 * of the same width. f16 and bf16 are storage formats here: cast converts
 * them with round-to-nearest-even directly from the source value (never
 * through f32 first, which would round twice); the math ops widen them a
 * block at a time into an f32 scratch, run the f32 loops there and round
 * the results back (kernels/cpu/half.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/assert.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vmath.h"
#include "kernels/elementwise_math.h"
#include "kernels/index_math.h"

/* GCC's -O2 uses the "very cheap" vectorizer cost model, which refuses any
 * loop whose trip count is not a known multiple of the vector width: that
 * is every loop here. The dynamic model vectorizes them with a scalar
 * epilogue (clang does so at -O2 already). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Output elements per chunk: cheap ops are memory-bound and need big
 * chunks to pay for a hand-off; transcendental ones cost ~10-40 cycles
 * per element, so smaller chunks already amortize it. */
enum { GRAIN_CHEAP = 32768, GRAIN_MATH = 8192 };

/* ---- broadcasting iterator ------------------------------------------------ */

/* A broadcast of up to three inputs to one output is a tfg_index_map
 * (tfg_index_broadcast): rank >= 1, strides in elements, 0 where an input
 * is broadcast along the axis. These two walk it row by row. */

/* Sets idx to the multi-index of flat output position pos and off[k] to
 * input k's element offset there. */
static void bcast_seek(const tfg_index_map *b, int64_t pos, int64_t *idx, int64_t *off) {
  for (int k = 0; k < b->nin; k++) off[k] = 0;
  for (int i = b->rank - 1; i >= 0; i--) {
    idx[i] = pos % b->dim[i];
    pos /= b->dim[i];
    for (int k = 0; k < b->nin; k++) off[k] += idx[i] * b->st[k][i];
  }
}

/* Moves idx/off forward by n positions along the last axis, where n
 * never passes the end of the current row; carries into outer axes. */
static void bcast_advance(const tfg_index_map *b, int64_t *idx, int64_t *off, int64_t n) {
  int i = b->rank - 1;
  idx[i] += n;
  for (int k = 0; k < b->nin; k++) off[k] += n * b->st[k][i];
  while (i > 0 && idx[i] == b->dim[i]) {
    for (int k = 0; k < b->nin; k++) off[k] += b->st[k][i - 1] - b->dim[i] * b->st[k][i];
    idx[i] = 0;
    idx[--i]++;
  }
}

/* ---- unary ------------------------------------------------------------------ */

/* ys[i] = F(xs[i]) for i < n, in T. */
#define MAP(T, F)                                                 \
  do {                                                            \
    const T *X_ = (const T *)xs;                                  \
    T *Y_ = (T *)ys;                                              \
    for (int64_t i = 0; i < n; i++) Y_[i] = F(X_[i]);             \
  } while (0)

/* One MAP loop per unary op of ir/op_list.h, over elements of suffix S
 * (f32 f64 i32 i64), with the formula the fused kernels share
 * (kernels/elementwise_math.h); INT_CASE only for the ops that take
 * integers (their formulas wrap: INT_MIN negates to itself). */
#define UNARY_CASE(S, ID, formula, ints, flops, cheap) \
  case TFG_OP_##ID: MAP(TFG_EM_T_##S, tfg_em_##formula##_##S); break;
#define UNARY_INT_CASE(S, ID, formula, ints, flops, cheap) \
  TFG_OPS_IF(ints, UNARY_CASE(S, ID, formula, ints, flops, cheap))

/* The switch over the unary ops for suffix S, its cases CASE. */
#define UNARY_SWITCH(CASE, S)                                    \
  switch (op) {                                                  \
    TFG_OPS_UNARY(CASE, S)                                       \
  default: TFG_ASSERT(!"a unary op (checked) of this dtype");    \
  }

/* ys[0..n) = op(xs[0..n)) in dtype dt (f32 f64 i32 i64); xs may be ys.
 * op and dt are checked (tfg_kernel_check_unary_on; f16/bf16 arrive
 * widened to f32). gelu runs a row at a time through libmvec
 * (kernels/cpu/vmath.h): the same formula, in vector lanes. */
static void unary_row(tfg_op_id op, tfg_dtype dt, const void *xs, void *ys, int64_t n) {
  switch (dt) {
  case TFG_DTYPE_F32:
    if (op == TFG_OP_GELU) tfg_vm_gelu_f32((const float *)xs, (float *)ys, n);
    else UNARY_SWITCH(UNARY_CASE, f32)
    break;
  case TFG_DTYPE_F64:
    if (op == TFG_OP_GELU) tfg_vm_gelu_f64((const double *)xs, (double *)ys, n);
    else UNARY_SWITCH(UNARY_CASE, f64)
    break;
  case TFG_DTYPE_I32: UNARY_SWITCH(UNARY_INT_CASE, i32) break;
  case TFG_DTYPE_I64: UNARY_SWITCH(UNARY_INT_CASE, i64) break;
  default: TFG_ASSERT(!"a dtype the unary ops compute in");
  }
}

/* f16/bf16 elements per f32 scratch block: 1 KiB per operand, in L1. */
enum { HALF_BLOCK = 256 };

typedef struct unary_job {
  tfg_op_id op;
  tfg_dtype dt;
  const void *x;
  void *y;
} unary_job;

/* f16/bf16 go through an f32 scratch block (kernels/cpu/half.c): widen,
 * run the f32 loop in place, round back. */
static void unary_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const unary_job *j = arg;
  if (!tfg_cpu_is_half(j->dt)) {
    size_t es = tfg_dtype_size(j->dt);
    unary_row(j->op, j->dt, (const char *)j->x + lo * (int64_t)es, (char *)j->y + lo * (int64_t)es, hi - lo);
    return;
  }
  float buf[HALF_BLOCK];
  for (int64_t b = lo; b < hi; b += HALF_BLOCK) {
    int64_t m = hi - b < HALF_BLOCK ? hi - b : HALF_BLOCK;
    tfg_cpu_half_load(j->dt, (const uint16_t *)j->x + b, buf, m);
    unary_row(j->op, TFG_DTYPE_F32, buf, buf, m);
    tfg_cpu_half_store(j->dt, buf, (uint16_t *)j->y + b, m);
  }
}

/* The cheap column of op's line in ir/op_list.h (a comparison is cheap):
 * memory-bound ops get bigger chunks. */
static bool op_is_cheap(tfg_op_id op) {
  switch (op) {
#define CHEAP_U(A, ID, formula, ints, flops, cheap) case TFG_OP_##ID: return cheap;
    TFG_OPS_UNARY(CHEAP_U, )
#undef CHEAP_U
#define CHEAP_B(A, ID, formula, sig, ints, flops, cheap) case TFG_OP_##ID: return cheap;
    TFG_OPS_BINARY(CHEAP_B, )
#undef CHEAP_B
#define CHEAP_C(A, ID, formula, oper) case TFG_OP_##ID: return true;
    TFG_OPS_COMPARE(CHEAP_C, )
#undef CHEAP_C
  default: TFG_ASSERT(!"an elementwise op with a line in ir/op_list.h"); return false;
  }
}

/* The ops of TFG_OPS_UNARY (ir/op_list.h) on f32/f64/f16/bf16 (the 16-bit
 * ones computed in f32), and on i32/i64 those whose line says ints.
 * Input and output have one shape and dtype. */
TFG_CPU_KERNEL(tfg_cpu_unary) {
  tfg_status st = tfg_kernel_check_unary_on(ctx, node, in, out, "CPU", true);
  if (st != TFG_OK) return st;
  tfg_op_id op = node->op;
  tfg_dtype dt = in[0].dtype;
  int64_t n = tfg_shape_numel(&out->shape);
  unary_job j = {op, dt, in[0].data, out->data};
  tfg_parallel_for(ctx->pool, n, op_is_cheap(op) ? GRAIN_CHEAP : GRAIN_MATH, unary_chunk, &j);
  return TFG_OK;
}

/* ---- binary ----------------------------------------------------------------- */

typedef struct binary_job {
  tfg_op_id op;
  tfg_dtype dt; /* of the inputs */
  tfg_index_map bc;
  const char *a, *b;
  char *o;
  size_t isz, osz; /* input and output element sizes */
} binary_job;

/* One row of n outputs: a and b advance by sa and sb elements (0 or 1
 * in practice, any value works). The stride-1 and stride-0 cases get
 * their own loops so each is a simple vectorizable loop. */
#define ZIP(T, TO, EXPR)                                                                      \
  do {                                                                                        \
    const T *A_ = (const T *)a, *B_ = (const T *)b;                                           \
    TO *O_ = (TO *)o;                                                                         \
    if (sa == 1 && sb == 1) {                                                                 \
      for (int64_t i = 0; i < n; i++) { T x = A_[i], y = B_[i]; O_[i] = (TO)(EXPR); }         \
    } else if (sa == 1 && sb == 0) {                                                          \
      const T y = B_[0];                                                                      \
      for (int64_t i = 0; i < n; i++) { T x = A_[i]; O_[i] = (TO)(EXPR); }                    \
    } else if (sa == 0 && sb == 1) {                                                          \
      const T x = A_[0];                                                                      \
      for (int64_t i = 0; i < n; i++) { T y = B_[i]; O_[i] = (TO)(EXPR); }                    \
    } else {                                                                                  \
      for (int64_t i = 0; i < n; i++) { T x = A_[i * sa], y = B_[i * sb]; O_[i] = (TO)(EXPR); } \
    }                                                                                         \
  } while (0)

/* One ZIP loop per binary op and comparison of ir/op_list.h, over
 * inputs of suffix S, with the shared formulas: maximum/minimum propagate
 * NaN from either side, as PyTorch does; integer ops wrap, and division
 * truncates toward zero (C semantics): the caller has already rejected
 * zero divisors, and INT_MIN / -1 (which traps on x86) is computed as the
 * wrapped negation. INT_CASE only for the ops that take integers (POW
 * does not); a comparison writes bools, T any input type. */
#define BINARY_CASE(S, ID, formula, sig, ints, flops, cheap) \
  case TFG_OP_##ID: ZIP(TFG_EM_T_##S, TFG_EM_T_##S, tfg_em_##formula##_##S(x, y)); break;
#define BINARY_INT_CASE(S, ID, formula, sig, ints, flops, cheap) \
  TFG_OPS_IF(ints, BINARY_CASE(S, ID, formula, sig, ints, flops, cheap))
#define COMPARE_CASE(T, ID, formula, oper) \
  case TFG_OP_##ID: ZIP(T, uint8_t, x oper y); break;

/* The switch over the binary ops and comparisons for suffix S (type T),
 * the binary ones' cases CASE. */
#define BINARY_SWITCH(CASE, S, T)                                \
  switch (op) {                                                  \
    TFG_OPS_BINARY(CASE, S)                                      \
    TFG_OPS_COMPARE(COMPARE_CASE, T)                             \
  default: TFG_ASSERT(!"a binary op (checked) of this dtype");   \
  }

/* One row of op (checked: tfg_kernel_check_binary_on) on inputs of dt
 * (f16/bf16 arrive widened to f32). */
static void binary_row(tfg_op_id op, tfg_dtype dt, const void *a, int64_t sa, const void *b,
                       int64_t sb, void *o, int64_t n) {
  switch (dt) {
  case TFG_DTYPE_F32: BINARY_SWITCH(BINARY_CASE, f32, float) break;
  case TFG_DTYPE_F64: BINARY_SWITCH(BINARY_CASE, f64, double) break;
  case TFG_DTYPE_I32: BINARY_SWITCH(BINARY_INT_CASE, i32, int32_t) break;
  case TFG_DTYPE_I64: BINARY_SWITCH(BINARY_INT_CASE, i64, int64_t) break;
  case TFG_DTYPE_BOOL:
    switch (op) {
      TFG_OPS_COMPARE(COMPARE_CASE, uint8_t)
    default: TFG_ASSERT(!"a comparison (the one binary kind on bools)");
    }
    break;
  default: TFG_ASSERT(!"a dtype the binary ops compute in");
  }
}

/* binary_row for f16/bf16 inputs: blocks of the row widened into f32
 * scratch (an operand at stride 0 is one element), the f32 row, and the
 * result rounded back (or, for EQUAL GREATER, the bools written as they
 * are: comparing the widened values compares the 16-bit ones exactly). */
static void binary_row_half(tfg_op_id op, tfg_dtype dt, const void *a, int64_t sa, const void *b,
                            int64_t sb, void *o, int64_t n) {
  bool cmp = op == TFG_OP_EQUAL || op == TFG_OP_GREATER;
  float fa[HALF_BLOCK], fb[HALF_BLOCK], fo[HALF_BLOCK];
  for (int64_t i = 0; i < n; i += HALF_BLOCK) {
    int64_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
    tfg_cpu_half_load_strided(dt, (const uint16_t *)a + i * sa, sa, fa, sa == 0 ? 1 : m);
    tfg_cpu_half_load_strided(dt, (const uint16_t *)b + i * sb, sb, fb, sb == 0 ? 1 : m);
    if (cmp) {
      binary_row(op, TFG_DTYPE_F32, fa, sa != 0, fb, sb != 0, (uint8_t *)o + i, m);
    } else {
      binary_row(op, TFG_DTYPE_F32, fa, sa != 0, fb, sb != 0, fo, m);
      tfg_cpu_half_store(dt, fo, (uint16_t *)o + i, m);
    }
  }
}

static void binary_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const binary_job *j = arg;
  const tfg_index_map *bc = &j->bc;
  int64_t idx[TFG_MAX_RANK], off[TFG_INDEX_MAX_OPERANDS];
  bcast_seek(bc, lo, idx, off);
  int last = bc->rank - 1;
  for (int64_t pos = lo; pos < hi;) {
    int64_t n = bc->dim[last] - idx[last];
    if (n > hi - pos) n = hi - pos;
    (tfg_cpu_is_half(j->dt) ? binary_row_half : binary_row)(
        j->op, j->dt, j->a + off[0] * (int64_t)j->isz, bc->st[0][last], j->b + off[1] * (int64_t)j->isz,
        bc->st[1][last], j->o + pos * (int64_t)j->osz, n);
    pos += n;
    if (pos < hi) bcast_advance(bc, idx, off, n);
  }
}

/* True when any element of the integer tensor t is zero. Used before an
 * integer division: when the output is not empty every input element is
 * used (broadcasting only repeats), so any zero divisor is a real one. */
static bool has_zero(const tfg_tensor *t) {
  int64_t n = tfg_shape_numel(&t->shape);
  bool z = false;
  if (t->dtype == TFG_DTYPE_I32) {
    const int32_t *p = t->data;
    for (int64_t i = 0; i < n; i++) z |= p[i] == 0;
  } else {
    const int64_t *p = t->data;
    for (int64_t i = 0; i < n; i++) z |= p[i] == 0;
  }
  return z;
}

/* The ops of TFG_OPS_BINARY (ir/op_list.h) on f32/f64/f16/bf16 (the
 * 16-bit ones computed in f32), and on i32/i64 those whose line says
 * ints; those of TFG_OPS_COMPARE on all of these and bool, with a bool
 * output. Both inputs share a dtype and broadcast to
 * out's shape. Integer division by zero is TFG_ERR_NUMERIC and writes
 * nothing. */
TFG_CPU_KERNEL(tfg_cpu_binary) {
  tfg_index_map bc;
  tfg_status st = tfg_kernel_check_binary_on(ctx, node, in, out, "CPU", true, &bc);
  if (st != TFG_OK) return st;
  tfg_op_id op = node->op;
  tfg_dtype dt = in[0].dtype;
  bool is_int = dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64;
  binary_job j = {.op = op, .dt = dt, .bc = bc, .a = in[0].data, .b = in[1].data, .o = out->data,
                  .isz = tfg_dtype_size(dt), .osz = tfg_dtype_size(out->dtype)};
  int64_t n = tfg_shape_numel(&out->shape);
  if (n == 0) return TFG_OK;
  if (op == TFG_OP_DIV && is_int && has_zero(&in[1]))
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC, "integer division by zero");
  int64_t grain = op_is_cheap(op) || is_int ? GRAIN_CHEAP : GRAIN_MATH;
  tfg_parallel_for(ctx->pool, n, grain, binary_chunk, &j);
  return TFG_OK;
}

/* ---- where ------------------------------------------------------------------ */

typedef struct where_job {
  tfg_index_map bc;
  const uint8_t *c;
  const char *a, *b;
  char *o;
  size_t esz;
} where_job;

#define SELECT(T)                                                                   \
  do {                                                                              \
    const T *A_ = (const T *)a, *B_ = (const T *)b;                                 \
    T *O_ = (T *)o;                                                                 \
    if (sc == 1 && sa == 1 && sb == 1)                                              \
      for (int64_t i = 0; i < n; i++) O_[i] = c[i] ? A_[i] : B_[i];                 \
    else                                                                            \
      for (int64_t i = 0; i < n; i++) O_[i] = c[i * sc] ? A_[i * sa] : B_[i * sb];  \
  } while (0)

/* One row of where: whole elements are moved as integers of their size,
 * so every dtype works and NaN payloads are kept bit for bit. */
static void where_row(size_t esz, const uint8_t *c, int64_t sc, const void *a, int64_t sa,
                      const void *b, int64_t sb, void *o, int64_t n) {
  switch (esz) {
  case 1: SELECT(uint8_t); break;
  case 2: SELECT(uint16_t); break;
  case 4: SELECT(uint32_t); break;
  default: SELECT(uint64_t); break;
  }
}

static void where_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const where_job *j = arg;
  const tfg_index_map *bc = &j->bc;
  int64_t idx[TFG_MAX_RANK], off[TFG_INDEX_MAX_OPERANDS];
  int64_t esz = (int64_t)j->esz;
  bcast_seek(bc, lo, idx, off);
  int last = bc->rank - 1;
  for (int64_t pos = lo; pos < hi;) {
    int64_t n = bc->dim[last] - idx[last];
    if (n > hi - pos) n = hi - pos;
    where_row(j->esz, j->c + off[0], bc->st[0][last], j->a + off[1] * esz, bc->st[1][last],
              j->b + off[2] * esz, bc->st[2][last], j->o + pos * esz, n);
    pos += n;
    if (pos < hi) bcast_advance(bc, idx, off, n);
  }
}

/* out = c ? a : b elementwise; c is bool, a and b share out's dtype (any
 * dtype); all three broadcast to out's shape. */
TFG_CPU_KERNEL(tfg_cpu_where) {
  (void)node;
  tfg_index_map bc;
  tfg_status st = tfg_kernel_check_where(ctx, in, out, &bc);
  if (st != TFG_OK) return st;
  where_job j = {.bc = bc, .c = in[0].data, .a = in[1].data, .b = in[2].data, .o = out->data,
                 .esz = tfg_dtype_size(out->dtype)};
  tfg_parallel_for(ctx->pool, tfg_shape_numel(&out->shape), GRAIN_CHEAP, where_chunk, &j);
  return TFG_OK;
}

/* ---- cast ------------------------------------------------------------------- */

/* The conversions are kernels/cast_math.h's, the CUDA kernel's too. */

typedef struct cast_job {
  tfg_dtype from, to;
  const void *x;
  void *y;
} cast_job;

/* y[i] = EXPR with x the i-th source element loaded as TX by LOAD. */
#define CONVERT(TS, TX, LOAD, TD, EXPR)                              \
  do {                                                               \
    const TS *S_ = (const TS *)j->x;                                 \
    TD *D_ = (TD *)j->y;                                             \
    for (int64_t i = lo; i < hi; i++) {                              \
      TX x = LOAD(S_[i]);                                            \
      D_[i] = (EXPR);                                                \
    }                                                                \
  } while (0)

#define AS_IS(v) (v)

/* From a floating-point source (loaded as TX) to every target. */
#define FROM_FLOAT(TS, TX, LOAD)                                                   \
  switch (j->to) {                                                                 \
  case TFG_DTYPE_F32: CONVERT(TS, TX, LOAD, float, (float)x); break;               \
  case TFG_DTYPE_F64: CONVERT(TS, TX, LOAD, double, (double)x); break;             \
  case TFG_DTYPE_F16: CONVERT(TS, TX, LOAD, uint16_t, tfg_cast_f64_to_f16(x)); break;       \
  case TFG_DTYPE_BF16: CONVERT(TS, TX, LOAD, uint16_t, tfg_cast_f64_to_bf16(x)); break;     \
  case TFG_DTYPE_I32: CONVERT(TS, TX, LOAD, int32_t, tfg_cast_f_to_i32(x)); break;          \
  case TFG_DTYPE_I64: CONVERT(TS, TX, LOAD, int64_t, tfg_cast_f_to_i64(x)); break;          \
  case TFG_DTYPE_BOOL: CONVERT(TS, TX, LOAD, uint8_t, x != 0); break;              \
  default: break;                                                                  \
  }

/* From an integer or bool source. Narrowing integers wrap (modulo 2^32),
 * as in PyTorch and NumPy. */
#define FROM_INT(TS)                                                               \
  switch (j->to) {                                                                 \
  case TFG_DTYPE_F32: CONVERT(TS, TS, AS_IS, float, (float)x); break;              \
  case TFG_DTYPE_F64: CONVERT(TS, TS, AS_IS, double, (double)x); break;            \
  case TFG_DTYPE_F16: CONVERT(TS, TS, AS_IS, uint16_t, tfg_cast_i64_to_f16(x)); break;      \
  case TFG_DTYPE_BF16: CONVERT(TS, TS, AS_IS, uint16_t, tfg_cast_i64_to_bf16(x)); break;    \
  case TFG_DTYPE_I32: CONVERT(TS, TS, AS_IS, int32_t, (int32_t)(uint32_t)x); break; \
  case TFG_DTYPE_I64: CONVERT(TS, TS, AS_IS, int64_t, (int64_t)x); break;          \
  case TFG_DTYPE_BOOL: CONVERT(TS, TS, AS_IS, uint8_t, x != 0); break;             \
  default: break;                                                                  \
  }

static void cast_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const cast_job *j = arg;
  if (j->from == j->to) {
    size_t esz = tfg_dtype_size(j->to);
    memcpy((char *)j->y + lo * (int64_t)esz, (const char *)j->x + lo * (int64_t)esz,
           (size_t)(hi - lo) * esz);
    return;
  }
  switch (j->from) {
  case TFG_DTYPE_F32:
    if (j->to == TFG_DTYPE_BF16) CONVERT(float, float, AS_IS, uint16_t, tfg_cast_f32_to_bf16(x));
    else FROM_FLOAT(float, float, AS_IS);
    break;
  case TFG_DTYPE_F64: FROM_FLOAT(double, double, AS_IS); break;
  case TFG_DTYPE_F16: FROM_FLOAT(uint16_t, double, tfg_cast_f16_to_f64); break;
  case TFG_DTYPE_BF16:
    if (j->to == TFG_DTYPE_F32) CONVERT(uint16_t, float, tfg_cast_bf16_to_f32, float, x);
    else FROM_FLOAT(uint16_t, double, tfg_cast_bf16_to_f64);
    break;
  case TFG_DTYPE_I32: FROM_INT(int32_t); break;
  case TFG_DTYPE_I64: FROM_INT(int64_t); break;
  case TFG_DTYPE_BOOL: FROM_INT(uint8_t); break;
  default: break;
  }
}

/* Converts in[0] to out's dtype (attrs.dtype), element by element, between
 * any two of f32 f64 f16 bf16 i32 i64 bool. To f16/bf16: round to nearest
 * even with subnormals, overflow to infinity, NaN kept. Float to int:
 * truncation toward zero, NaN to 0, out of range saturates. To bool:
 * nonzero (NaN included) is 1. */
TFG_CPU_KERNEL(tfg_cpu_cast) {
  (void)node;
  if (in[0].dtype >= TFG_DTYPE_COUNT || out->dtype >= TFG_DTYPE_COUNT)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "cast: unknown dtype");
  int64_t n = tfg_shape_numel(&out->shape);
  if (tfg_shape_numel(&in[0].shape) != n)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "cast: input and output sizes differ");
  cast_job j = {in[0].dtype, out->dtype, in[0].data, out->data};
  tfg_parallel_for(ctx->pool, n, GRAIN_CHEAP, cast_chunk, &j);
  return TFG_OK;
}

/* The kernels of every op of ir/op_list.h's elementwise lists, by line. */
void tfg_cpu_register_elementwise(tfg_kernel_fn *table) {
  tfg_kernel_register_elementwise(table, tfg_cpu_unary, tfg_cpu_binary);
  table[TFG_OP_WHERE] = tfg_cpu_where;
  table[TFG_OP_CAST] = tfg_cpu_cast;
}
