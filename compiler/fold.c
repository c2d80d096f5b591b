/* compiler/fold.c: constant folding (fold.h): one sweep in graph order
 * computes every constant op with the CPU kernels, and decides each
 * value's fate once its last reader has been seen: kept as a CONST (a
 * non-constant op, a root or nobody reads it) or dropped (only folded
 * ops read it). Values are freed as soon as their fate is known, so at
 * most the constants still waiting for readers are held at once. */
#include "compiler/fold.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"
#include "kernels/cpu/cpu.h"


/* Whether n may be computed at compile time: it is pure (its value the
 * same in every run, given the same inputs: tfg_op_pure) and the CPU has
 * a kernel for it. */
static bool foldable_op(const tfg_node *n) { return tfg_op_pure(n) && tfg_cpu_kernel(n->op) != NULL; }

/* Whether a value of dtype t holds a NaN or an infinity. */
static bool nonfinite(const void *v, tfg_dtype t, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    switch (t) {
    case TFG_DTYPE_F32: {
      float x = ((const float *)v)[i];
      if (x != x || x - x != 0) return true;
      break;
    }
    case TFG_DTYPE_F64: {
      double x = ((const double *)v)[i];
      if (x != x || x - x != 0) return true;
      break;
    }
    case TFG_DTYPE_F16:
      if ((((const uint16_t *)v)[i] & 0x7C00) == 0x7C00) return true; /* exponent all ones */
      break;
    case TFG_DTYPE_BF16:
      if ((((const uint16_t *)v)[i] & 0x7F80) == 0x7F80) return true;
      break;
    default: return false;
    }
  }
  return false;
}

/* The sweep's state. */
typedef struct folder {
  tfg_graph *g;
  const uint8_t *roots;
  uint8_t *mark;
  bool *con;        /* per node: constant (its value computed) */
  bool *wanted;     /* per node: a non-constant op reads it */
  int *pending;     /* per node: reads by ops the sweep has not reached */
  void **value;     /* per constant node: its value (owned unless the node is a CONST) */
  int count;
} folder;

/* Node i's value has had its last reader: keeps it as a CONST when
 * something that runs needs it, else marks it removed; frees the value. */
static void settle(folder *f, tfg_node_id i) {
  tfg_node *n = &f->g->nodes[i];
  bool was_const = n->op == TFG_OP_CONST;
  bool keep = f->wanted[i] || (f->roots && f->roots[i]) || f->pending[i] == -1; /* -1: nothing reads it */
  if (keep && !was_const) {
    size_t bytes = (size_t)tfg_node_bytes(n);
    void *data = tfg_arena_alloc(&f->g->arena, bytes ? bytes : 1);
    if (bytes) memcpy(data, f->value[i], bytes);
    n->op = TFG_OP_CONST;
    n->ninputs = 0;
    n->inputs = NULL;
    n->attrs = (tfg_attrs){.data = data};
    f->mark[i] = TFG_FOLD_CONST;
    f->count++;
  } else if (!keep) {
    f->mark[i] = TFG_FOLD_REMOVED;
    f->count++;
  }
  if (!was_const) free(f->value[i]);
  f->value[i] = NULL;
}

/* One read of input x by an op the sweep reached (constant or not). */
static void read_by(folder *f, tfg_node_id x, bool constant_reader) {
  if (!constant_reader) f->wanted[x] = true;
  if (--f->pending[x] == 0 && f->con[x]) settle(f, x);
}

/* Computes node i with its CPU kernel from its inputs' values; false
 * when the kernel fails or the value is not finite (then i runs as
 * before). */
static bool compute(folder *f, tfg_node_id i) {
  tfg_node *n = &f->g->nodes[i];
  if (n->op == TFG_OP_CONST) {
    f->value[i] = (void *)n->attrs.data;
    return true;
  }
  int64_t bytes = tfg_node_bytes(n);
  void *out = malloc(bytes ? (size_t)bytes : 1);
  tfg_tensor *in = malloc(sizeof *in * ((size_t)n->ninputs + 1));
  TFG_ASSERT(out && in);
  for (int k = 0; k < n->ninputs; k++) {
    const tfg_node *x = &f->g->nodes[n->inputs[k]];
    in[k] = (tfg_tensor){f->value[n->inputs[k]], x->dtype, x->shape};
  }
  tfg_tensor t = {out, n->dtype, n->shape};
  tfg_kernel_ctx ctx = {.node = i}; /* no pool: the caller's thread; not training (no op folded reads it) */
  tfg_status st = tfg_cpu_kernel(n->op)(&ctx, n, in, &t);
  tfg_strbuf_free(&ctx.err);
  free(in);
  if (st != TFG_OK || nonfinite(out, n->dtype, tfg_shape_numel(&n->shape))) {
    free(out);
    return false;
  }
  f->value[i] = out;
  return true;
}

int tfg_fold_constants(tfg_graph *g, const uint8_t *roots, uint8_t *mark) {
  int32_t n = g->nnodes;
  folder f = {.g = g, .roots = roots, .mark = mark};
  f.con = calloc((size_t)n + 1, sizeof *f.con);
  f.wanted = calloc((size_t)n + 1, sizeof *f.wanted);
  f.pending = calloc((size_t)n + 1, sizeof *f.pending);
  f.value = calloc((size_t)n + 1, sizeof *f.value);
  TFG_ASSERT(f.con && f.wanted && f.pending && f.value);
  memset(mark, TFG_FOLD_KEPT, (size_t)n);
  for (int32_t i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].ninputs; k++) f.pending[g->nodes[i].inputs[k]]++;
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    bool c = foldable_op(nd) && tfg_node_bytes(nd) <= TFG_FOLD_MAX_BYTES;
    for (int k = 0; c && k < nd->ninputs; k++) c = f.con[nd->inputs[k]];
    f.con[i] = c && compute(&f, i);
    /* Its inputs' reads are done: settle those that had their last. (A
     * node's inputs come before it, so it is settled after them, and its
     * own value is in place while its readers still need it.) */
    int ninputs = nd->ninputs;
    const tfg_node_id *inputs = nd->inputs;
    for (int k = 0; k < ninputs; k++) read_by(&f, inputs[k], f.con[i]);
    if (f.con[i] && f.pending[i] == 0) {
      f.pending[i] = -1; /* read by nothing: a result of its own */
      settle(&f, i);
    }
  }
  free(f.con);
  free(f.wanted);
  free(f.pending);
  free(f.value);
  return f.count;
}
