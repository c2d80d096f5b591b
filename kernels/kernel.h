/* kernels/kernel.h: what every backend's kernels see: tensors and the
 * kernel context.
 *
 * A kernel reads node->op, node->attrs and its input tensors and writes
 * every element of its output tensor (allocated by the caller with the
 * node's dtype and shape). Tensors are dense, row-major (C order). */
#ifndef TFG_KERNEL_H
#define TFG_KERNEL_H

#include <stdbool.h>

#include "base/status.h"
#include "base/strbuf.h"
#include "ir/graph.h"
#include "kernels/tensor.h"


struct tfg_pool;

/* How the ranks of an mpirun job send each other values (SEND, RECV: a
 * pipeline's stages on different ranks, compiler/ranks.h), given to the
 * kernels by the runtime (runtime/mpi.h tfg_mpi_transport). send may
 * return before the bytes leave (it keeps its own copy of them); recv
 * returns once they are in. Messages between two ranks under one tag
 * arrive in the order they were sent. On failure, an error status with
 * the reason appended to *err. */
typedef struct tfg_transport {
  tfg_status (*send)(int peer, int64_t tag, const void *data, size_t n, tfg_strbuf *err);
  tfg_status (*recv)(int peer, int64_t tag, void *data, size_t n, tfg_strbuf *err);
} tfg_transport;

typedef struct tfg_kernel_ctx {
  struct tfg_pool *pool; /* CPU worker threads; NULL runs everything on the caller */
  bool training;         /* dropout is active only while training */
  int64_t step;          /* the training step, from 1: Adam's bias correction, dropout masks */
  uint64_t seed;         /* the train action's seed, mixed into dropout masks */
  tfg_strbuf err;        /* a kernel's error message (without the op and location) */
  int32_t node;          /* the id of the node being run (the executor sets it; -1 unknown): device-side
                          * errors name it (kernels/cuda/cuda.h) */
  void *backend;         /* the backend's state for this launch (NULL on host devices; CUDA:
                          * a tfg_cuda_ctx, kernels/cuda/cuda.h), set by the backend's launch */
  const tfg_transport *transport; /* SEND, RECV: the job's (NULL outside an mpirun job) */
} tfg_kernel_ctx;

/* Runs an op on a backend: in[] holds node->ninputs tensors, out is
 * allocated with the node's dtype and shape. Every output element is
 * written. On bad values (an id out of range) returns an error status
 * and a message in ctx. Each backend keeps a registry from op id to its
 * kernel (kernels/cpu/registry.c, kernels/cuda/registry.cu). */
typedef tfg_status (*tfg_kernel_fn)(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                    tfg_tensor *out);

/* Records a kernel error message in ctx and returns status s. */
tfg_status tfg_kernel_fail(tfg_kernel_ctx *ctx, tfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The op's name ("add") for kernels' messages (its row's, ir/ops.h), or
 * "?" for an id out of range. */
const char *tfg_kernel_op_name(int op);

/* Writes v as one element of dtype dt at p (tfg_dtype_size(dt) bytes):
 * floats rounded once to nearest even (f16 and bf16 through
 * kernels/cast_math.h), integers truncated and saturated as a cast does,
 * bool as v != 0. For constants the compiler makes (autodiff's scalars,
 * the values a pass compares against). */
void tfg_kernel_store_f64(tfg_dtype dt, void *p, double v);

/* kernels/index_math.h: inputs read at strides over an output shape. */
typedef struct tfg_index_map tfg_index_map;

/* The checks every backend's elementwise kernels make before computing,
 * with the same messages ("... is not supported on the WHERE", WHERE
 * naming the backend: "CPU", "GPU"), and for binary and where the
 * broadcast of the inputs to out's shape in *ix (tfg_index_broadcast).
 * TFG_OK, or the failure recorded in ctx and returned. The op's row
 * (ir/ops.h) says which ops and dtypes:
 *   unary:  an op of kind UNARY on f32/f64, and on i32/i64 where its row
 *           says ints; out has in[0]'s dtype and size.
 *   binary: an op of kind BINARY on f32/f64, and on i32/i64 where its row
 *           says ints; of kind COMPARE on f32 f64 i32 i64 bool with a
 *           bool out; both inputs of one dtype.
 *   where:  a bool condition in[0]; in[1], in[2] of out's dtype. */
tfg_status tfg_kernel_check_unary(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                  const tfg_tensor *out, const char *where);
tfg_status tfg_kernel_check_binary(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                   const tfg_tensor *out, const char *where, tfg_index_map *ix);
tfg_status tfg_kernel_check_where(tfg_kernel_ctx *ctx, const tfg_tensor *in, const tfg_tensor *out,
                                  tfg_index_map *ix);
/* The same checks for a backend that also computes f16 and bf16 (half:
 * the CPU, kernels/cpu/half.c): then those pass too wherever f32 does.
 * The two above are these with half false. */
tfg_status tfg_kernel_check_unary_on(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                     const tfg_tensor *out, const char *where, bool half);
tfg_status tfg_kernel_check_binary_on(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                      const tfg_tensor *out, const char *where, bool half,
                                      tfg_index_map *ix);

/* Registers a backend's elementwise kernels in its table (indexed by op
 * id), one per kind: unary for every op of ir/op_list.h's TFG_OPS_UNARY,
 * binary for every op of TFG_OPS_BINARY and TFG_OPS_COMPARE, so a new
 * line there reaches every backend. */
void tfg_kernel_register_elementwise(tfg_kernel_fn *table, tfg_kernel_fn unary, tfg_kernel_fn binary);

/* The check every backend's optimizer update (SGD_UPDATE, ADAM_UPDATE)
 * makes, with the same messages: in[0..n) (the param, its gradient, its
 * state) all f32 or all f64 with one element count, and ctx->step from 1
 * (Adam divides by 1 - beta^t, 0 at t = 0; SGD's step 1 initializes its
 * buffer). what names the op, where the backend ("CPU", "GPU"). TFG_OK,
 * or the failure recorded in ctx and returned. */
tfg_status tfg_kernel_check_update(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *in, int n,
                                   const char *where);
/* The same check for GRAD_ACCUMULATE's (acc, grad), which has no step. */
tfg_status tfg_kernel_check_accumulate(tfg_kernel_ctx *ctx, const tfg_tensor *in, const char *where);
/* An optimizer update of a step with a grad scaler (precision = f16) has
 * two more inputs from `at` on: whether the step's gradients are all
 * finite (a bool scalar; when false the update leaves everything as it
 * was) and the steps the scaler skipped before (an f32 scalar: the
 * update is the step's less those, kernels/optim_math.h). *present: it
 * has them. TFG_OK, or TFG_ERR_SHAPE recorded in ctx for inputs of other
 * dtypes or sizes. */
tfg_status tfg_kernel_check_scaler(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, int at,
                                   const char *what, bool *present);
/* AMP_UPDATE's (scale, finite, growth_tracker, skipped): f32 scalars but
 * for the bool finite. */
tfg_status tfg_kernel_check_amp(tfg_kernel_ctx *ctx, const tfg_tensor *in, const char *where);

/* The checks every backend's shape kernels make, with the same messages,
 * and the reads they then do (kernels/index_math.h). TFG_OK, or the
 * failure (TFG_ERR_SHAPE) recorded in ctx and returned.
 *   transpose: st[i] = the in[0] stride (elements) output axis i reads,
 *              output axis i being input axis attrs.perm[i];
 *   broadcast: st[i] likewise for NumPy broadcasting (0 along a repeated
 *              axis);
 *   concat:    in[0..ninputs) joined along attrs.axis: out as *outer
 *              rows, each input's part of a row its dim along the axis
 *              times *inner bytes;
 *   slice:     [attrs.start, attrs.end) of in[0] along attrs.axis: in[0]
 *              as *outer rows of its dim along the axis times *inner
 *              bytes. */
tfg_status tfg_kernel_transpose_strides(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                        const tfg_tensor *out, int64_t *st);
tfg_status tfg_kernel_broadcast_strides(tfg_kernel_ctx *ctx, const tfg_tensor *in, const tfg_tensor *out,
                                        int64_t *st);
tfg_status tfg_kernel_concat_rows(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                  const tfg_tensor *out, int64_t *outer, int64_t *inner);
tfg_status tfg_kernel_slice_rows(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                 const tfg_tensor *out, int64_t *outer, int64_t *inner);

#endif
