/* ir/ops.h: the op registry: one table row per op.
 *
 * A row says everything the pipeline needs about an op: the name and
 * signature a program calls it by, its kind, whether it is pure, which
 * inputs it updates in place, the formula of an elementwise op, its
 * shape and dtype rule and its cost. The interpreter, placer, autodiff,
 * folding, CSE, fusion, the planner, explain output, the kernels' checks
 * and the conformance tests all read the same row. Kernels are not in
 * the row: each backend owns a registry from op id to its kernel
 * (kernels/cpu/registry.c, kernels/cuda/registry.cu). Adding an op is
 * its line in ir/op_list.h, its row here, its gradient rule and a kernel
 * per backend; an elementwise op with a formula gets its row and its
 * kernels from its line (docs/architecture.md, "Where things go").
 *
 *   const tfg_op_def *d = tfg_op_get(TFG_OP_MATMUL);
 *   d->infer(g, node, diag);     // sets node->dtype/shape or reports
 *   double f = d->flops(g, node);
 *   if (tfg_op_pure(node)) ...   // folding and CSE may touch it
 *   tfg_kernel_fn k = tfg_cpu_kernel(node->op);  // kernels/cpu/cpu.h
 *   k(&kctx, node, in, &out);
 *
 * The attrs each op reads are listed beside it (fields of tfg_attrs,
 * ir/graph.h). Unless said otherwise inputs and output share one
 * dtype, and binary elementwise ops broadcast NumPy-style. */
#ifndef TFG_OPS_H
#define TFG_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "ir/op_list.h"

struct tfg_graph;
struct tfg_node;
struct tfg_diag;

/* What an op is, by the sections of ir/op_list.h. Fusion reads UNARY
 * and BINARY (the ops a chain may hold), the kernels' checks UNARY,
 * BINARY and COMPARE; the other kinds say where an op belongs. A switch
 * over kinds lists every one (no default: -Wswitch names a new kind). */
typedef enum tfg_op_kind {
  TFG_OP_KIND_SOURCE,      /* no inputs: a value placed, fed or filled */
  TFG_OP_KIND_UNARY,       /* y = formula(x), element by element */
  TFG_OP_KIND_BINARY,      /* z = formula(x, y), broadcasting */
  TFG_OP_KIND_COMPARE,     /* x == y, x > y, broadcasting, into bools */
  TFG_OP_KIND_ELEMENTWISE, /* element by element without a formula: cast, where */
  TFG_OP_KIND_LINALG,      /* matmul */
  TFG_OP_KIND_REDUCE,      /* over axes: sum, mean, max, argmax */
  TFG_OP_KIND_SHAPE,       /* the input's values rearranged */
  TFG_OP_KIND_NN,          /* the neural network ops */
  TFG_OP_KIND_GRAD,        /* gradients autodiff builds */
  TFG_OP_KIND_UPDATE,      /* optimizer updates, in place */
  TFG_OP_KIND_COLLECTIVE,  /* a rendezvous with other replicas */
  TFG_OP_KIND_FUSED,       /* a chain the executor fuses */
} tfg_op_kind;

typedef struct tfg_op_def {
  const char *name;
  const char *sig;
  tfg_op_kind kind;
  /* Its value is a function of its inputs and attrs alone, the same in
   * every run and step: constant folding may compute it at compile time,
   * CSE may merge it with an equal node. Not so for the sources of
   * varying values, random draws, in-place updates and collectives
   * (tfg_op_pure refines INIT by its attrs). */
  bool pure;
  /* Bit k: the op updates input k in place (an optimizer's param and
   * state): the planner orders every reader of those around it, and a
   * backend that runs the op on f32 copies of f16/bf16 inputs writes
   * those inputs back. */
  uint32_t inplace;
  /* UNARY and BINARY: the name of the op's per-element formula in
   * kernels/elementwise_math.h (tfg_em_<formula>_f32, _f64, ...), which
   * every kernel of the op and the fused chains call; NULL for the other
   * kinds. */
  const char *formula;
  /* UNARY, BINARY and COMPARE: the op also takes i32 and i64 tensors
   * (else floats only; COMPARE takes bools too). */
  bool ints;
  /* Checks the inputs' dtypes and shapes and the attrs; sets node->dtype
   * and node->shape. On a mismatch reports an error at node->loc naming
   * the shapes involved, and returns TFG_ERR_SHAPE. */
  tfg_status (*infer)(const struct tfg_graph *g, struct tfg_node *node, struct tfg_diag *diag);
  /* Floating-point operations per execution, for the cost model. */
  double (*flops)(const struct tfg_graph *g, const struct tfg_node *node);
} tfg_op_def;

const tfg_op_def *tfg_op_get(tfg_op_id op);
/* The op a program calls by name (its signature non-empty), or -1. */
int tfg_op_lookup(const char *name);
/* Whether node n is pure (tfg_op_def.pure): its row's column, and for an
 * INIT its attrs: zeros, ones and full are constants, a random draw is
 * left to the device that fills it. */
bool tfg_op_pure(const struct tfg_node *n);

/* Whether op is one the planner groups into buckets of a collective
 * across devices (compiler/plan.h): ALLREDUCE, REDUCE_SCATTER and
 * ALL_GATHER, one node per device per attrs.key. */
static inline bool tfg_op_bucketed(int op) {
  return op == TFG_OP_ALLREDUCE || op == TFG_OP_REDUCE_SCATTER || op == TFG_OP_ALL_GATHER;
}

#endif
