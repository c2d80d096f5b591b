/* ir/fused.h: the program of a fused chain of elementwise ops: what a
 * FUSED node means, and what its kernels (kernels/cpu/fused.c,
 * kernels/cuda/fused.cu) run.
 *
 * The planner fuses a chain of elementwise f32/f64 ops into one launch
 * (compiler/plan.h, tfg_plan_chain); the executor turns the chain into a
 * FUSED node whose attrs.data points to a tfg_fused_prog and whose
 * inputs are the chain's external inputs:
 *
 *   tfg_fused_prog prog;
 *   if (tfg_fused_build(g, chain->nodes, chain->nnodes, chain->inputs, chain->ninputs, &prog)) ...
 *   fused.attrs.data = &prog;       // fused.inputs = chain->inputs
 *
 * Per output element i, the kernels evaluate the ops in order: operand k
 * < TFG_FUSED_MAX_INPUTS is external input k at its element for i
 * (tfg_fused_at: the same element, element 0 of a scalar, or the element
 * a broadcast along leading or trailing axes reads), operand
 * TFG_FUSED_MAX_INPUTS + s the result of op s; the last op's result is
 * the output. BROADCAST is a unary member that passes its operand
 * through: its input is the broadcast one. Every op computes exactly what its
 * kernel computes alone (kernels/elementwise_math.h), in the output's
 * dtype. The struct is small and plain, so the CUDA kernel takes it by
 * value as a launch parameter. */
#ifndef TFG_IR_FUSED_H
#define TFG_IR_FUSED_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ir/graph.h"

enum {
  TFG_FUSED_MAX_OPS = 16,   /* ops in one chain */
  TFG_FUSED_MAX_INPUTS = 8, /* external inputs of one chain */
};

/* Operand encodings. */
#define TFG_FUSED_INPUT(k) (k)
#define TFG_FUSED_RESULT(s) (TFG_FUSED_MAX_INPUTS + (s))

typedef struct tfg_fused_op {
  int16_t op;   /* a tfg_op_id with tfg_fused_arity(op) > 0 */
  int8_t a, b;  /* operands (TFG_FUSED_INPUT, TFG_FUSED_RESULT of an earlier op); b is -1 for a unary op */
} tfg_fused_op;

typedef struct tfg_fused_prog {
  int nops;     /* 1 .. TFG_FUSED_MAX_OPS */
  int ninputs;  /* 0 .. TFG_FUSED_MAX_INPUTS: the FUSED node's inputs */
  tfg_fused_op ops[TFG_FUSED_MAX_OPS];
  /* Input k has len[k] elements; output element i reads its element
   * (i / div[k]) % len[k] (tfg_fused_at). len[k] is 1 for a scalar and
   * the output's count (div 1) for an input of the output's shape. */
  int64_t len[TFG_FUSED_MAX_INPUTS], div[TFG_FUSED_MAX_INPUTS];
} tfg_fused_prog;

/* The element of input k that output element i of n reads. */
static inline int64_t tfg_fused_at(const tfg_fused_prog *p, int k, int64_t i, int64_t n) {
  if (p->len[k] == n) return i;
  if (p->len[k] == 1) return 0;
  return i / p->div[k] % p->len[k];
}

/* Whether a value of shape in broadcasts to out as tfg_fused_at reads
 * it: aligned on the right (NumPy's rule), every axis of in is 1 or out's,
 * and those that are not 1 form one run of consecutive axes. Then *len =
 * the elements of in, *div = the product of out's axes after the run (1
 * when in has one element or out's shape). [n] or [1, n] over [m, n]:
 * len n, div 1; [m, 1] over [m, n]: len m, div n; [m, 1, k] over
 * [m, n, k] is not such a broadcast (two runs). */
static inline bool tfg_fused_bcast(const tfg_shape *in, const tfg_shape *out, int64_t *len, int64_t *div) {
  if (in->rank > out->rank) return false;
  int off = out->rank - in->rank, first = -1, last = -1;
  int64_t l = 1;
  for (int a = 0; a < in->rank; a++) {
    if (in->dim[a] == 1) continue;
    if (in->dim[a] != out->dim[a + off]) return false;
    if (last >= 0 && last != a - 1) return false;
    if (first < 0) first = a;
    last = a;
    l *= in->dim[a];
  }
  int64_t d = 1;
  for (int a = last + 1 + off; first >= 0 && a < out->rank; a++) d *= out->dim[a];
  *len = l;
  *div = d;
  return true;
}

/* How many inputs op takes in a chain: 1 for an op of TFG_OPS_UNARY and
 * for BROADCAST (its operand, passed through), 2 for one of
 * TFG_OPS_BINARY (ir/op_list.h), 0 for every other op: it cannot be fused
 * (a comparison's bool output is not the chain's dtype). Every op with a
 * formula is fusable, so none is left out of chains by a list missed. */
static inline int tfg_fused_arity(int op) {
  switch (op) {
#define TFG_FUSED_UNARY_(A, ID, formula, ints, flops, cheap) case TFG_OP_##ID:
  TFG_OPS_UNARY(TFG_FUSED_UNARY_, )
#undef TFG_FUSED_UNARY_
  case TFG_OP_BROADCAST:
    return 1;
#define TFG_FUSED_BINARY_(A, ID, formula, sig, ints, flops, cheap) case TFG_OP_##ID:
  TFG_OPS_BINARY(TFG_FUSED_BINARY_, )
#undef TFG_FUSED_BINARY_
    return 2;
  default: /* no formula: not a member of a chain */
    return 0;
  }
}

/* Why prog cannot run as a node with ninputs inputs, or NULL when it can:
 * the counts in range, every op fusable with its operands in range, each
 * reading only inputs and earlier results. Both kernels check before
 * they run a program they did not build. */
static inline const char *tfg_fused_check(const tfg_fused_prog *p, int ninputs) {
  if (!p) return "no program";
  if (p->nops < 1 || p->nops > TFG_FUSED_MAX_OPS) return "its op count is out of range";
  if (p->ninputs != ninputs || ninputs < 0 || ninputs > TFG_FUSED_MAX_INPUTS)
    return "its input count differs from the node's";
  for (int k = 0; k < ninputs; k++)
    if (p->len[k] < 1 || p->div[k] < 1) return "an input's broadcast is out of range";
  for (int s = 0; s < p->nops; s++) {
    const tfg_fused_op *o = &p->ops[s];
    int arity = tfg_fused_arity(o->op);
    int opnd[2] = {o->a, o->b};
    if (arity == 0) return "an op is not a fusable elementwise op";
    if (arity == 1 && o->b != -1) return "a unary op has a second operand";
    for (int k = 0; k < arity; k++) {
      int x = opnd[k];
      bool input = x >= 0 && x < p->ninputs;
      bool earlier = x >= TFG_FUSED_MAX_INPUTS && x < TFG_FUSED_MAX_INPUTS + s;
      if (!input && !earlier) return "an operand is neither an input nor an earlier result";
    }
  }
  return NULL;
}

/* Compiles a chain: members[0..n) in graph order (each an elementwise op
 * of arity > 0; the last is the output), inputs[0..ninputs) the values
 * they read that are not members, each once, each of the output's shape
 * or broadcast to it (tfg_fused_bcast). Fills *out and returns true, or
 * returns false when they are not such a chain (too many ops or inputs,
 * an op that cannot be fused, a member input that is neither an earlier
 * member nor listed, an input that does not broadcast so). */
bool tfg_fused_build(const tfg_graph *g, const tfg_node_id *members, int n, const tfg_node_id *inputs, int ninputs,
                     tfg_fused_prog *out);

#ifdef __cplusplus
}
#endif

#endif
