/* ir/ops.h: the op registry: one table row per op.
 *
 * A row says everything the pipeline needs about an op: the name and
 * signature a program calls it by, its shape and dtype rule and its cost
 * (and, later, its gradient rule). The interpreter, placer, autodiff,
 * planner, explain output and the kernel conformance tests all read the
 * same row. Kernels are not in the row: each backend owns a registry from
 * op id to its kernel (kernels/cpu/registry.c, kernels/cuda/registry.cu),
 * so adding an op is one row in ir/ops.c plus a kernel registered
 * by each backend that runs it.
 *
 *   const tfg_op_def *d = tfg_op_get(TFG_OP_MATMUL);
 *   d->infer(g, node, diag);     // sets node->dtype/shape or reports
 *   double f = d->flops(g, node);
 *   tfg_kernel_fn k = tfg_cpu_kernel(node->op);  // kernels/cpu/cpu.h
 *   k(&kctx, node, in, &out);
 *
 * The attrs each op reads are listed beside it (fields of tfg_attrs,
 * ir/graph.h). Unless said otherwise inputs and output share one
 * dtype, and binary elementwise ops broadcast NumPy-style. */
#ifndef TFG_OPS_H
#define TFG_OPS_H

#include <stdbool.h>

#include "base/status.h"
#include "ir/op_list.h"

struct tfg_graph;
struct tfg_node;
struct tfg_diag;

typedef struct tfg_op_def {
  const char *name;
  const char *sig;
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

#endif
