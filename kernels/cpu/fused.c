/* kernels/cpu/fused.c: the FUSED op on the CPU: a chain of elementwise
 * ops (kernels/fused.h) in one pass over the output.
 *
 * Evaluating the program element by element would switch on each op for
 * every element and vectorize nothing. Instead the output is cut into
 * blocks of BLOCK elements, and each op runs over a whole block with the
 * switch outside its loop, into a small scratch row per op that stays in
 * the L1 cache (16 rows of 256 doubles: 32 KiB); the last op writes the
 * output. Each loop is a loop of kernels/cpu/elementwise.c, calling the
 * same formulas (kernels/elementwise_math.h) in the same dtype, so the
 * chain gives the bits its ops give one at a time, while reading its
 * inputs and writing its output once. Blocks are split over ctx->pool
 * by output range, as every elementwise kernel is. */
#include <stdint.h>
#include <string.h>

#include "base/assert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vmath.h"
#include "kernels/elementwise_math.h"
#include "kernels/fused.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_FUSED, tfg_cpu_fused},
};

void tfg_cpu_register_fused(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

/* As in elementwise.c: GCC's -O2 cost model would vectorize none of
 * these loops (their trip counts are not known multiples of the width). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

enum { BLOCK = 256, GRAIN = 8192 };

typedef struct fused_job {
  const tfg_fused_prog *p;
  tfg_dtype dt;
  int64_t n; /* output elements */
  const char *in[TFG_FUSED_MAX_INPUTS];
  char *out;
} fused_job;

/* y[i] = EXPR(x) over a row of n, x read at stride sx (1, or 0 for a
 * scalar: then only one element is computed, see run_block). */
#define MAP1(T, EXPR)                                                   \
  do {                                                                  \
    const T *X_ = (const T *)xa;                                        \
    T *Y_ = (T *)y;                                                     \
    if (sa == 1)                                                        \
      for (int64_t i = 0; i < n; i++) Y_[i] = EXPR(X_[i]);              \
    else                                                                \
      for (int64_t i = 0; i < n; i++) Y_[i] = EXPR(X_[0]);              \
  } while (0)

/* y[i] = EXPR(a, b) with a and b at stride 1 or 0, as elementwise.c's ZIP. */
#define MAP2(T, EXPR)                                                                  \
  do {                                                                                 \
    const T *A_ = (const T *)xa, *B_ = (const T *)xb;                                  \
    T *Y_ = (T *)y;                                                                    \
    if (sa == 1 && sb == 1) {                                                          \
      for (int64_t i = 0; i < n; i++) Y_[i] = EXPR(A_[i], B_[i]);                      \
    } else if (sa == 1) {                                                              \
      const T b_ = B_[0];                                                              \
      for (int64_t i = 0; i < n; i++) Y_[i] = EXPR(A_[i], b_);                         \
    } else if (sb == 1) {                                                              \
      const T a_ = A_[0];                                                              \
      for (int64_t i = 0; i < n; i++) Y_[i] = EXPR(a_, B_[i]);                         \
    } else {                                                                           \
      for (int64_t i = 0; i < n; i++) Y_[i] = EXPR(A_[0], B_[0]);                      \
    }                                                                                  \
  } while (0)

/* gelu runs a row at a time (kernels/cpu/vmath.h), as the unfused
 * kernel does; a scalar operand is a row of one, copied along the row. */
#define GELU(T, S)                                                        \
  do {                                                                    \
    T *Y_ = (T *)y;                                                       \
    tfg_vm_gelu_##S((const T *)xa, Y_, sa == 1 ? n : 1);                  \
    for (int64_t i = 1; sa != 1 && i < n; i++) Y_[i] = Y_[0];             \
  } while (0)

/* One loop per op of ir/op_list.h's unary and binary lists, with its
 * formula in suffix S. */
#define FUSED_U(S, ID, formula, ints, flops, cheap) \
  case TFG_OP_##ID: MAP1(TFG_EM_T_##S, tfg_em_##formula##_##S); break;
#define FUSED_B(S, ID, formula, sig, ints, flops, cheap) \
  case TFG_OP_##ID: MAP2(TFG_EM_T_##S, tfg_em_##formula##_##S); break;

/* Op o of a checked program (tfg_fused_check) over the row: gelu a row
 * at a time as the unfused kernel runs it, BROADCAST its operand passed
 * through, any other op its formula. */
#define OPS(T, S)                                                             \
  if (o->op == TFG_OP_GELU) GELU(T, S);                                       \
  else if (o->op == TFG_OP_BROADCAST) MAP1(T, );                              \
  else switch (o->op) {                                                       \
    TFG_OPS_UNARY(FUSED_U, S)                                                 \
    TFG_OPS_BINARY(FUSED_B, S)                                                \
  default: TFG_ASSERT(!"a fusable op (checked)");                             \
  }

/* The row of input k for the n outputs from element base, and its
 * stride: the input itself where the block reads consecutive elements of
 * it (an input of the output's shape; a row broadcast whose block stays
 * within one repeat), or one element at stride 0 (a column broadcast
 * whose block stays within one run); else its elements copied into row,
 * a run or a repeat at a time. */
static const char *input_row(const fused_job *j, int k, int64_t base, int64_t n, char *row, size_t esz, int *stride) {
  const tfg_fused_prog *p = j->p;
  int64_t len = p->len[k], div = p->div[k], first = tfg_fused_at(p, k, base, j->n);
  *stride = 1;
  if (len == j->n || (div == 1 && first + n <= len)) return j->in[k] + first * (int64_t)esz;
  if (div > 1 && base % div + n <= div) {
    *stride = 0;
    return j->in[k] + first * (int64_t)esz;
  }
  for (int64_t t = 0; t < n;) {
    int64_t at = tfg_fused_at(p, k, base + t, j->n);
    if (div == 1) { /* the rest of this repeat */
      int64_t run = len - at < n - t ? len - at : n - t;
      memcpy(row + t * (int64_t)esz, j->in[k] + at * (int64_t)esz, (size_t)run * esz);
      t += run;
    } else { /* the rest of this run of one element */
      int64_t run = div - (base + t) % div;
      if (run > n - t) run = n - t;
      if (esz == sizeof(float)) {
        float v = ((const float *)j->in[k])[at], *r = (float *)row + t;
        for (int64_t q = 0; q < run; q++) r[q] = v;
      } else {
        double v = ((const double *)j->in[k])[at], *r = (double *)row + t;
        for (int64_t q = 0; q < run; q++) r[q] = v;
      }
      t += run;
    }
  }
  return row;
}

/* Where operand x of the block of n outputs at element base is: an input
 * (input_row, or element 0 at stride 0 for a scalar) or an earlier op's
 * scratch row. */
static const char *operand(const fused_job *j, char *scratch, char *rows, size_t esz, int x, int64_t base, int64_t n,
                           int *stride) {
  *stride = 1;
  if (x >= TFG_FUSED_MAX_INPUTS) return scratch + (size_t)(x - TFG_FUSED_MAX_INPUTS) * BLOCK * esz;
  if (j->p->len[x] == 1) {
    *stride = 0;
    return j->in[x];
  }
  return input_row(j, x, base, n, rows + (size_t)x * BLOCK * esz, esz, stride);
}

/* Runs every op over the n (<= BLOCK) outputs from element base. */
static void run_block(const fused_job *j, char *scratch, char *rows, int64_t base, int64_t n) {
  const tfg_fused_prog *p = j->p;
  size_t esz = tfg_dtype_size(j->dt);
  for (int s = 0; s < p->nops; s++) {
    const tfg_fused_op *o = &p->ops[s];
    char *y = s == p->nops - 1 ? j->out + base * (int64_t)esz : scratch + (size_t)s * BLOCK * esz;
    int sa = 1, sb = 1;
    const char *xa = operand(j, scratch, rows, esz, o->a, base, n, &sa);
    const char *xb = o->b >= 0 ? operand(j, scratch, rows, esz, o->b, base, n, &sb) : NULL;
    if (j->dt == TFG_DTYPE_F32) {
      OPS(float, f32);
    } else {
      OPS(double, f64);
    }
  }
}

static void fused_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  (void)k;
  const fused_job *j = arg;
  _Alignas(64) char scratch[TFG_FUSED_MAX_OPS * BLOCK * sizeof(double)];
  _Alignas(64) char rows[TFG_FUSED_MAX_INPUTS * BLOCK * sizeof(double)]; /* gathered broadcast inputs */
  for (int64_t base = lo; base < hi; base += BLOCK)
    run_block(j, scratch, rows, base, hi - base < BLOCK ? hi - base : BLOCK);
}

/* FUSED: node->attrs.data is a tfg_fused_prog over node->ninputs inputs,
 * f32 or f64 like the output, each of the output's element count, one
 * element (a scalar) or broadcast (tfg_fused_check_tensors). */
TFG_CPU_KERNEL(tfg_cpu_fused) {
  tfg_status st = tfg_fused_check_tensors(ctx, node, in, out, "CPU");
  if (st != TFG_OK) return st;
  const tfg_fused_prog *p = node->attrs.data;
  int64_t n = tfg_shape_numel(&out->shape);
  fused_job j = {.p = p, .dt = out->dtype, .n = n, .out = out->data};
  for (int k = 0; k < p->ninputs; k++) j.in[k] = in[k].data;
  if (n == 0) return TFG_OK;
  tfg_parallel_for(ctx->pool, n, GRAIN, fused_chunk, &j);
  return TFG_OK;
}
