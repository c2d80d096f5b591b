/* kernels/cpu/elementwise.c: unary and binary math, where, and cast.
 *
 * Every kernel here is a loop over output elements. Binary ops and where
 * broadcast NumPy-style: a small iterator (bcast below) aligns each
 * input's shape to the output's from the right, gives broadcast axes a
 * stride of 0, drops size-1 axes and merges axes that stay contiguous in
 * every operand. Same-shape operands therefore collapse to one flat axis
 * with stride 1, and the inner loops below are plain a[i] op b[i] loops
 * the compiler vectorizes; broadcasting a row or a scalar becomes a loop
 * with one operand held in a register. Large outputs are split over
 * ctx->pool by output element range, so chunks write disjoint outputs and
 * results do not depend on the thread count.
 *
 * Integer arithmetic wraps (two's complement, as PyTorch and NumPy do)
 * instead of being undefined behaviour: it is done in the unsigned type
 * of the same width. f16 and bf16 are storage formats here: cast converts
 * them with round-to-nearest-even directly from the source value (never
 * through f32 first, which would round twice). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"

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

/* The op's name for messages. A local table rather than tfg_op_get():
 * kernels must not depend on the registry that points at them. */
static const char *op_name(tfg_op_id op) {
  static const char *const names[] = {
#define OP_NAME(id, name, sig) name,
      TFG_OPS(OP_NAME)
#undef OP_NAME
  };
  return op < TFG_OP_COUNT ? names[op] : "?";
}

/* ---- broadcasting iterator ------------------------------------------------ */

enum { BC_MAX_IN = 3 };

/* A broadcast of up to three inputs to one output, after dropping size-1
 * axes and merging contiguous ones. Strides are in elements; 0 = that
 * input is broadcast along the axis. rank >= 1 always. */
typedef struct bcast {
  int rank, nin;
  int64_t dim[TFG_MAX_RANK];
  int64_t st[BC_MAX_IN][TFG_MAX_RANK];
} bcast;

/* Builds the iterator for inputs in[0..nin) broadcast to shape out.
 * Returns false when an input does not broadcast to out (rank too high
 * or a dim that is neither 1 nor the output's): the shape rule should
 * have caught it, but a kernel must not read out of bounds. */
static bool bcast_init(bcast *b, const tfg_shape *out, const tfg_tensor *in, int nin) {
  int r = out->rank;
  int64_t st[BC_MAX_IN][TFG_MAX_RANK];
  for (int k = 0; k < nin; k++) {
    const tfg_shape *s = &in[k].shape;
    if (s->rank > r) return false;
    int64_t stride = 1;
    for (int i = r - 1; i >= 0; i--) {
      int j = i - (r - s->rank);
      int64_t d = j >= 0 ? s->dim[j] : 1;
      if (d != 1 && d != out->dim[i]) return false;
      st[k][i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  b->nin = nin;
  b->rank = 0;
  for (int i = 0; i < r; i++) {
    if (out->dim[i] == 1) continue; /* index always 0: contributes nothing */
    int p = b->rank - 1;
    bool merge = p >= 0;
    for (int k = 0; k < nin && merge; k++) merge = b->st[k][p] == st[k][i] * out->dim[i];
    if (merge) {
      b->dim[p] *= out->dim[i];
      for (int k = 0; k < nin; k++) b->st[k][p] = st[k][i];
    } else {
      b->dim[b->rank] = out->dim[i];
      for (int k = 0; k < nin; k++) b->st[k][b->rank] = st[k][i];
      b->rank++;
    }
  }
  if (b->rank == 0) { /* every axis has size 1: one element */
    b->rank = 1;
    b->dim[0] = 1;
    for (int k = 0; k < nin; k++) b->st[k][0] = 0;
  }
  return true;
}

/* Sets idx to the multi-index of flat output position pos and off[k] to
 * input k's element offset there. */
static void bcast_seek(const bcast *b, int64_t pos, int64_t *idx, int64_t *off) {
  for (int k = 0; k < b->nin; k++) off[k] = 0;
  for (int i = b->rank - 1; i >= 0; i--) {
    idx[i] = pos % b->dim[i];
    pos /= b->dim[i];
    for (int k = 0; k < b->nin; k++) off[k] += idx[i] * b->st[k][i];
  }
}

/* Moves idx/off forward by n positions along the last axis, where n
 * never passes the end of the current row; carries into outer axes. */
static void bcast_advance(const bcast *b, int64_t *idx, int64_t *off, int64_t n) {
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

typedef struct unary_job {
  tfg_op_id op;
  tfg_dtype dt;
  const void *x;
  void *y;
} unary_job;

/* FN(tfg_em_exp_, f32) is tfg_em_exp_f32: one loop body for f32 and f64. */
#define FN(name, suf) name##suf

#define MAP(T, EXPR)                                              \
  do {                                                            \
    const T *X_ = (const T *)j->x + lo;                           \
    T *Y_ = (T *)j->y + lo;                                       \
    for (int64_t i = 0; i < n; i++) {                             \
      T x = X_[i];                                                \
      Y_[i] = (EXPR);                                             \
    }                                                             \
  } while (0)

/* The float ops for type T (S: f32 or f64), with the formulas the fused
 * kernels share (kernels/elementwise_math.h). */
#define UNARY_FLOAT(T, S)                                                                 \
  switch (j->op) {                                                                        \
  case TFG_OP_NEG: MAP(T, FN(tfg_em_neg_, S)(x)); break;                                  \
  case TFG_OP_EXP: MAP(T, FN(tfg_em_exp_, S)(x)); break;                                  \
  case TFG_OP_LOG: MAP(T, FN(tfg_em_log_, S)(x)); break;                                  \
  case TFG_OP_SQRT: MAP(T, FN(tfg_em_sqrt_, S)(x)); break;                                \
  case TFG_OP_RSQRT: MAP(T, FN(tfg_em_rsqrt_, S)(x)); break;                              \
  case TFG_OP_ABS: MAP(T, FN(tfg_em_abs_, S)(x)); break;                                  \
  case TFG_OP_RELU: MAP(T, FN(tfg_em_relu_, S)(x)); break;                                \
  case TFG_OP_GELU: MAP(T, FN(tfg_em_gelu_, S)(x)); break;                                \
  case TFG_OP_TANH: MAP(T, FN(tfg_em_tanh_, S)(x)); break;                                \
  case TFG_OP_SIGMOID: MAP(T, FN(tfg_em_sigmoid_, S)(x)); break;                          \
  default: break;                                                                         \
  }

/* NEG ABS RELU on a signed integer type T (unsigned twin U): negation is
 * done unsigned so INT_MIN wraps to itself instead of being UB. */
#define UNARY_INT(T, U)                                                 \
  switch (j->op) {                                                      \
  case TFG_OP_NEG: MAP(T, (T)((U)0 - (U)x)); break;                     \
  case TFG_OP_ABS: MAP(T, x < 0 ? (T)((U)0 - (U)x) : x); break;         \
  case TFG_OP_RELU: MAP(T, x < 0 ? (T)0 : x); break;                    \
  default: break;                                                       \
  }

static void unary_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const unary_job *j = arg;
  int64_t n = hi - lo;
  switch (j->dt) {
  case TFG_DTYPE_F32: UNARY_FLOAT(float, f32); break;
  case TFG_DTYPE_F64: UNARY_FLOAT(double, f64); break;
  case TFG_DTYPE_I32: UNARY_INT(int32_t, uint32_t); break;
  case TFG_DTYPE_I64: UNARY_INT(int64_t, uint64_t); break;
  default: break;
  }
}

static bool op_is_cheap(tfg_op_id op) {
  switch (op) {
  case TFG_OP_NEG: case TFG_OP_ABS: case TFG_OP_RELU: case TFG_OP_ADD: case TFG_OP_SUB:
  case TFG_OP_MUL: case TFG_OP_MAXIMUM: case TFG_OP_MINIMUM: case TFG_OP_EQUAL:
  case TFG_OP_GREATER:
    return true;
  default:
    return false;
  }
}

/* NEG EXP LOG SQRT RSQRT ABS RELU GELU TANH SIGMOID on f32/f64; NEG ABS
 * RELU also on i32/i64. Input and output have one shape and dtype. */
TFG_CPU_KERNEL(tfg_cpu_unary) {
  tfg_op_id op = node->op;
  tfg_dtype dt = in[0].dtype;
  bool int_ok = op == TFG_OP_NEG || op == TFG_OP_ABS || op == TFG_OP_RELU;
  bool supported = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64 ||
                   (int_ok && (dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64));
  switch (op) {
  case TFG_OP_NEG: case TFG_OP_EXP: case TFG_OP_LOG: case TFG_OP_SQRT: case TFG_OP_RSQRT:
  case TFG_OP_ABS: case TFG_OP_RELU: case TFG_OP_GELU: case TFG_OP_TANH: case TFG_OP_SIGMOID:
    break;
  default:
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a unary op", op_name(op));
  }
  if (!supported || out->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the CPU",
                           op_name(op), tfg_dtype_name(dt));
  int64_t n = tfg_shape_numel(&out->shape);
  if (tfg_shape_numel(&in[0].shape) != n)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "unary op: input and output sizes differ");
  unary_job j = {op, dt, in[0].data, out->data};
  tfg_parallel_for(ctx->pool, n, op_is_cheap(op) ? GRAIN_CHEAP : GRAIN_MATH, unary_chunk, &j);
  return TFG_OK;
}

/* ---- binary ----------------------------------------------------------------- */

typedef struct binary_job {
  tfg_op_id op;
  tfg_dtype dt; /* of the inputs */
  bcast bc;
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

/* The float ops: the shared formulas (maximum/minimum propagate NaN from
 * either side, as PyTorch does). */
#define BINARY_FLOAT(T, S)                                                   \
  switch (op) {                                                              \
  case TFG_OP_ADD: ZIP(T, T, FN(tfg_em_add_, S)(x, y)); break;               \
  case TFG_OP_SUB: ZIP(T, T, FN(tfg_em_sub_, S)(x, y)); break;               \
  case TFG_OP_MUL: ZIP(T, T, FN(tfg_em_mul_, S)(x, y)); break;               \
  case TFG_OP_DIV: ZIP(T, T, FN(tfg_em_div_, S)(x, y)); break;               \
  case TFG_OP_POW: ZIP(T, T, FN(tfg_em_pow_, S)(x, y)); break;               \
  case TFG_OP_MAXIMUM: ZIP(T, T, FN(tfg_em_maximum_, S)(x, y)); break;       \
  case TFG_OP_MINIMUM: ZIP(T, T, FN(tfg_em_minimum_, S)(x, y)); break;       \
  case TFG_OP_EQUAL: ZIP(T, uint8_t, x == y); break;                         \
  case TFG_OP_GREATER: ZIP(T, uint8_t, x > y); break;                        \
  default: break;                                                            \
  }

/* Integer ops wrap through the unsigned twin U. Division truncates toward
 * zero (C semantics); the caller has already rejected zero divisors, and
 * INT_MIN / -1 (which traps on x86) is computed as the wrapped negation. */
#define BINARY_INT(T, U)                                                     \
  switch (op) {                                                              \
  case TFG_OP_ADD: ZIP(T, T, (T)((U)x + (U)y)); break;                       \
  case TFG_OP_SUB: ZIP(T, T, (T)((U)x - (U)y)); break;                       \
  case TFG_OP_MUL: ZIP(T, T, (T)((U)x * (U)y)); break;                       \
  case TFG_OP_DIV: ZIP(T, T, y == -1 ? (T)((U)0 - (U)x) : x / y); break;     \
  case TFG_OP_MAXIMUM: ZIP(T, T, x > y ? x : y); break;                      \
  case TFG_OP_MINIMUM: ZIP(T, T, x < y ? x : y); break;                      \
  case TFG_OP_EQUAL: ZIP(T, uint8_t, x == y); break;                         \
  case TFG_OP_GREATER: ZIP(T, uint8_t, x > y); break;                        \
  default: break;                                                            \
  }

static void binary_row(tfg_op_id op, tfg_dtype dt, const void *a, int64_t sa, const void *b,
                       int64_t sb, void *o, int64_t n) {
  switch (dt) {
  case TFG_DTYPE_F32: BINARY_FLOAT(float, f32); break;
  case TFG_DTYPE_F64: BINARY_FLOAT(double, f64); break;
  case TFG_DTYPE_I32: BINARY_INT(int32_t, uint32_t); break;
  case TFG_DTYPE_I64: BINARY_INT(int64_t, uint64_t); break;
  case TFG_DTYPE_BOOL:
    if (op == TFG_OP_EQUAL) ZIP(uint8_t, uint8_t, x == y);
    else if (op == TFG_OP_GREATER) ZIP(uint8_t, uint8_t, x > y);
    break;
  default: break;
  }
}

static void binary_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const binary_job *j = arg;
  const bcast *bc = &j->bc;
  int64_t idx[TFG_MAX_RANK], off[BC_MAX_IN];
  bcast_seek(bc, lo, idx, off);
  int last = bc->rank - 1;
  for (int64_t pos = lo; pos < hi;) {
    int64_t n = bc->dim[last] - idx[last];
    if (n > hi - pos) n = hi - pos;
    binary_row(j->op, j->dt, j->a + off[0] * (int64_t)j->isz, bc->st[0][last],
               j->b + off[1] * (int64_t)j->isz, bc->st[1][last], j->o + pos * (int64_t)j->osz, n);
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

/* ADD SUB MUL DIV POW MAXIMUM MINIMUM on f32/f64 (and, but POW, on
 * i32/i64); EQUAL GREATER on f32 f64 i32 i64 bool with a bool output.
 * Both inputs share a dtype and broadcast to out's shape. Integer
 * division by zero is TFG_ERR_NUMERIC and writes nothing. */
TFG_CPU_KERNEL(tfg_cpu_binary) {
  tfg_op_id op = node->op;
  tfg_dtype dt = in[0].dtype;
  bool cmp = op == TFG_OP_EQUAL || op == TFG_OP_GREATER;
  bool is_int = dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64;
  bool supported = dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64 || (is_int && op != TFG_OP_POW) ||
                   (cmp && dt == TFG_DTYPE_BOOL);
  switch (op) {
  case TFG_OP_ADD: case TFG_OP_SUB: case TFG_OP_MUL: case TFG_OP_DIV: case TFG_OP_POW:
  case TFG_OP_MAXIMUM: case TFG_OP_MINIMUM: case TFG_OP_EQUAL: case TFG_OP_GREATER:
    break;
  default:
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a binary op", op_name(op));
  }
  if (in[1].dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: input dtypes %s and %s differ",
                           op_name(op), tfg_dtype_name(dt), tfg_dtype_name(in[1].dtype));
  if (!supported || out->dtype != (cmp ? TFG_DTYPE_BOOL : dt))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the CPU",
                           op_name(op), tfg_dtype_name(dt));
  binary_job j = {.op = op, .dt = dt, .a = in[0].data, .b = in[1].data, .o = out->data,
                  .isz = tfg_dtype_size(dt), .osz = tfg_dtype_size(out->dtype)};
  if (!bcast_init(&j.bc, &out->shape, in, 2))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: inputs do not broadcast to the output",
                           op_name(op));
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
  bcast bc;
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
  const bcast *bc = &j->bc;
  int64_t idx[TFG_MAX_RANK], off[BC_MAX_IN];
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
  if (in[0].dtype != TFG_DTYPE_BOOL)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: the condition is %s, not bool",
                           tfg_dtype_name(in[0].dtype));
  if (in[1].dtype != out->dtype || in[2].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: the value dtypes differ");
  where_job j = {.c = in[0].data, .a = in[1].data, .b = in[2].data, .o = out->data,
                 .esz = tfg_dtype_size(out->dtype)};
  if (!bcast_init(&j.bc, &out->shape, in, 3))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: inputs do not broadcast to the output");
  tfg_parallel_for(ctx->pool, tfg_shape_numel(&out->shape), GRAIN_CHEAP, where_chunk, &j);
  return TFG_OK;
}

/* ---- cast: f16 and bf16 ----------------------------------------------------- */

/* Rounds the positive value m * 2^ex (m > 0) to nearest-even in a binary
 * format with `mbits` fraction bits and `ebits` exponent bits (IEEE
 * layout, no sign), returning its bit pattern: subnormals where the value
 * is below the smallest normal, infinity past the largest finite value.
 * Taking an integer significand lets doubles and 64-bit integers both
 * round exactly once. */
static uint32_t round_small(uint64_t m, int ex, int mbits, int ebits) {
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  int p = 63 - __builtin_clzll(m); /* value in [2^(p+ex), 2^(p+ex+1)) */
  int e = p + ex;
  if (e > bias) return inf; /* at least 2^(bias+1): past the largest finite */
  int qexp = (e < emin ? emin : e) - mbits; /* exponent of the last kept bit */
  int shift = qexp - ex;
  uint64_t q;
  if (shift <= 0) {
    q = m << -shift; /* exact: q < 2^(mbits+1) */
  } else {
    if (shift > p + 1) return 0; /* below half the smallest subnormal */
    if (shift == 64) {           /* fold the lowest bit into a sticky bit */
      m = (m >> 1) | (m & 1);
      shift = 63;
    }
    uint64_t half = 1ull << (shift - 1), rem = m & ((1ull << shift) - 1);
    q = m >> shift;
    if (rem > half || (rem == half && (q & 1))) q++;
  }
  /* A subnormal encodes q itself; a normal stores q without its leading
   * bit. A carry out of the fraction (q = 2^mbits for a subnormal,
   * 2^(mbits+1) for a normal) lands in the exponent field, which is
   * exactly the next binade, up to infinity. */
  uint64_t enc = e < emin ? q : ((uint64_t)(e + bias) << mbits) + (q - (1ull << mbits));
  return enc >= inf ? inf : (uint32_t)enc;
}

/* double to a 16-bit float (f16: 10/5, bf16: 7/8). NaN stays a quiet NaN
 * keeping the sign and the top payload bits. */
static uint16_t f64_to_small(double d, int mbits, int ebits) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint32_t sign = (uint32_t)(u >> 48) & 0x8000u;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  uint64_t exf = (u >> 52) & 0x7FF, frac = u & ((1ull << 52) - 1);
  if (exf == 0x7FF) {
    if (frac == 0) return (uint16_t)(sign | inf);
    return (uint16_t)(sign | inf | (1u << (mbits - 1)) | (uint32_t)(frac >> (52 - mbits)));
  }
  /* Zeros, and double subnormals (below 2^-1022): far under half of
   * either format's smallest subnormal, so they round to a signed zero. */
  if (exf == 0) return (uint16_t)sign;
  return (uint16_t)(sign | round_small(frac | (1ull << 52), (int)exf - 1075, mbits, ebits));
}

static uint16_t i64_to_small(int64_t v, int mbits, int ebits) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 0x8000u : 0;
  uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  return (uint16_t)(sign | round_small(mag, 0, mbits, ebits));
}

/* A 16-bit float to double: exact. NaN payloads move to the top of the
 * double's fraction, so a NaN cast back keeps them. */
static double small_to_f64(uint16_t h, int mbits, int ebits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t emax = (1u << ebits) - 1;
  uint32_t e = ((uint32_t)h >> mbits) & emax, f = h & ((1u << mbits) - 1);
  uint64_t sign = (uint64_t)(h & 0x8000u) << 48, u;
  if (e == emax) {
    u = sign | (0x7FFull << 52) | ((uint64_t)f << (52 - mbits));
  } else if (e == 0) {
    double v = ldexp((double)f, 1 - bias - mbits);
    return h & 0x8000u ? -v : v;
  } else {
    u = sign | ((uint64_t)((int)e - bias + 1023) << 52) | ((uint64_t)f << (52 - mbits));
  }
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static uint16_t f64_to_f16(double d) { return f64_to_small(d, 10, 5); }
static uint16_t f64_to_bf16(double d) { return f64_to_small(d, 7, 8); }
static uint16_t i64_to_f16(int64_t v) { return i64_to_small(v, 10, 5); }
static uint16_t i64_to_bf16(int64_t v) { return i64_to_small(v, 7, 8); }
static double f16_to_f64(uint16_t h) { return small_to_f64(h, 10, 5); }
static double bf16_to_f64(uint16_t h) { return small_to_f64(h, 7, 8); }

/* f32 to bf16 is the hot conversion (mixed precision); bf16 is the top
 * half of an f32, so rounding is one add on the bits. Same results as
 * f64_to_bf16((double)x). */
static uint16_t f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* ---- cast ------------------------------------------------------------------- */

/* Float to integer: truncation toward zero. C leaves NaN and
 * out-of-range values undefined; here NaN gives 0 and the rest saturate,
 * so a cast never traps and never depends on the compiler. */
static int32_t f_to_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483648.0) return INT32_MAX;
  if (x <= -2147483649.0) return INT32_MIN;
  return (int32_t)x;
}

static int64_t f_to_i64(double x) {
  if (x != x) return 0;
  if (x >= 0x1p63) return INT64_MAX;
  if (x < -0x1p63) return INT64_MIN;
  return (int64_t)x;
}

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
  case TFG_DTYPE_F16: CONVERT(TS, TX, LOAD, uint16_t, f64_to_f16(x)); break;       \
  case TFG_DTYPE_BF16: CONVERT(TS, TX, LOAD, uint16_t, f64_to_bf16(x)); break;     \
  case TFG_DTYPE_I32: CONVERT(TS, TX, LOAD, int32_t, f_to_i32(x)); break;          \
  case TFG_DTYPE_I64: CONVERT(TS, TX, LOAD, int64_t, f_to_i64(x)); break;          \
  case TFG_DTYPE_BOOL: CONVERT(TS, TX, LOAD, uint8_t, x != 0); break;              \
  default: break;                                                                  \
  }

/* From an integer or bool source. Narrowing integers wrap (modulo 2^32),
 * as in PyTorch and NumPy. */
#define FROM_INT(TS)                                                               \
  switch (j->to) {                                                                 \
  case TFG_DTYPE_F32: CONVERT(TS, TS, AS_IS, float, (float)x); break;              \
  case TFG_DTYPE_F64: CONVERT(TS, TS, AS_IS, double, (double)x); break;            \
  case TFG_DTYPE_F16: CONVERT(TS, TS, AS_IS, uint16_t, i64_to_f16(x)); break;      \
  case TFG_DTYPE_BF16: CONVERT(TS, TS, AS_IS, uint16_t, i64_to_bf16(x)); break;    \
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
    if (j->to == TFG_DTYPE_BF16) CONVERT(float, float, AS_IS, uint16_t, f32_to_bf16(x));
    else FROM_FLOAT(float, float, AS_IS);
    break;
  case TFG_DTYPE_F64: FROM_FLOAT(double, double, AS_IS); break;
  case TFG_DTYPE_F16: FROM_FLOAT(uint16_t, double, f16_to_f64); break;
  case TFG_DTYPE_BF16:
    if (j->to == TFG_DTYPE_F32) CONVERT(uint16_t, float, bf16_to_f32, float, x);
    else FROM_FLOAT(uint16_t, double, bf16_to_f64);
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
