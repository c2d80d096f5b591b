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
 * Per output element, the kernels evaluate the ops in order: operand k <
 * TFG_FUSED_MAX_INPUTS is external input k at that element (element 0 of
 * a scalar input), operand TFG_FUSED_MAX_INPUTS + s the result of op s;
 * the last op's result is the output. Every op computes exactly what its
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
  uint8_t scalar[TFG_FUSED_MAX_INPUTS]; /* input k has one element (rank 0), read at every position */
} tfg_fused_prog;

/* How many inputs op takes in a chain: 1 for NEG EXP LOG SQRT RSQRT ABS
 * RELU GELU TANH SIGMOID, 2 for ADD SUB MUL DIV POW MAXIMUM MINIMUM, 0
 * for every other op (it cannot be fused). */
static inline int tfg_fused_arity(int op) {
  switch (op) {
  case TFG_OP_NEG: case TFG_OP_EXP: case TFG_OP_LOG: case TFG_OP_SQRT: case TFG_OP_RSQRT:
  case TFG_OP_ABS: case TFG_OP_RELU: case TFG_OP_GELU: case TFG_OP_TANH: case TFG_OP_SIGMOID:
    return 1;
  case TFG_OP_ADD: case TFG_OP_SUB: case TFG_OP_MUL: case TFG_OP_DIV: case TFG_OP_POW:
  case TFG_OP_MAXIMUM: case TFG_OP_MINIMUM:
    return 2;
  default:
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
 * they read that are not members, each once. Fills *out and returns true,
 * or returns false when they are not such a chain (too many ops or
 * inputs, an op that cannot be fused, a member input that is neither an
 * earlier member nor listed). */
bool tfg_fused_build(const tfg_graph *g, const tfg_node_id *members, int n, const tfg_node_id *inputs, int ninputs,
                     tfg_fused_prog *out);

#ifdef __cplusplus
}
#endif

#endif
