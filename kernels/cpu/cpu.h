/* kernels/cpu/cpu.h: the CPU kernels, one function per family of ops,
 * and the registry that says which of them runs each op
 * (tfg_cpu_kernel, kernels/cpu/registry.c).
 *
 *   tfg_kernel_fn k = tfg_cpu_kernel(node->op);  // NULL: no CPU kernel
 *   if (k) st = k(&kctx, node, in, &out);
 *
 * Every kernel has the tfg_kernel_fn contract (ir/ops.h): read
 * node->op and node->attrs, write every element of out. Supported
 * dtypes: f32 and f64 for all math; f16 and bf16 wherever f32 is,
 * computed in f32 and rounded once to nearest even (kernels/cpu/half.c);
 * i32, i64 and bool where the op makes sense for them (arithmetic,
 * comparisons, where, cast, reductions, shape ops, embedding/one_hot
 * ids). An unsupported dtype returns TFG_ERR_DEVICE with a message.
 * Matrix products go through OpenBLAS (kernels/cpu/blas.h: one
 * single-threaded cblas_sgemm/dgemm per block, the blocks split over
 * ctx->pool; f16 and bf16 widened to f32 for sgemm, as OpenBLAS has no
 * f16 gemm and Debian's no sbgemm); large loops are split over ctx->pool. */
#ifndef TFG_KERNELS_CPU_H
#define TFG_KERNELS_CPU_H

#include "kernels/kernel.h"

#define TFG_CPU_KERNEL(name) \
  tfg_status name(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out)

/* kernels/cpu/registry.c: the CPU kernel of op (a tfg_op_id), or NULL
 * when the CPU has none (PARAM, INPUT and STATE, whose values the executor
 * places itself; an id out of range). Thread-safe; the table is built on
 * the first call. */
tfg_kernel_fn tfg_cpu_kernel(int op);

/* The type of every kernel below (a tfg_kernel_fn points to one), so that
 * the kernels of a file are declared together. */
typedef TFG_CPU_KERNEL(tfg_cpu_kernel_func);

/* kernels/cpu/init.c: const copies attrs.data; init (INIT) fills per
 * attrs.init. */
tfg_cpu_kernel_func tfg_cpu_const, tfg_cpu_init;
/* Fills t per initializer attrs a (PARAM and INIT). fan_in/fan_out come
 * from t's shape: [in, out] for rank 2 (w in matmul(x, w)); for rank >= 3
 * ([out, in, kh, kw], conv2d) fan_in = in * kh * kw, fan_out = out * kh * kw;
 * rank 0/1: both the element count. Element i uses base/rng.h stream
 * a->seed at counter i. */
tfg_status tfg_cpu_init_fill(tfg_tensor *t, const tfg_attrs *a);

/* kernels/cpu/elementwise.c: unary runs the ops of TFG_OPS_UNARY
 * (ir/op_list.h), binary those of TFG_OPS_BINARY and TFG_OPS_COMPARE. */
tfg_cpu_kernel_func tfg_cpu_unary, tfg_cpu_binary, tfg_cpu_where, tfg_cpu_cast;

/* kernels/cpu/fused.c: FUSED, a chain of elementwise ops (kernels/fused.h). */
tfg_cpu_kernel_func tfg_cpu_fused;

/* kernels/cpu/linalg.c */
tfg_cpu_kernel_func tfg_cpu_matmul;

/* kernels/cpu/reduce.c: reduce runs SUM, MEAN and MAX. */
tfg_cpu_kernel_func tfg_cpu_reduce, tfg_cpu_argmax;

/* kernels/cpu/shape.c: copy runs RESHAPE and FLATTEN (same bytes, new
 * shape). */
tfg_cpu_kernel_func tfg_cpu_copy, tfg_cpu_transpose, tfg_cpu_concat, tfg_cpu_slice,
    tfg_cpu_broadcast;

/* kernels/cpu/nn.c: softmax runs SOFTMAX and LOG_SOFTMAX. */
tfg_cpu_kernel_func tfg_cpu_softmax, tfg_cpu_cross_entropy, tfg_cpu_mse, tfg_cpu_layer_norm,
    tfg_cpu_dropout, tfg_cpu_embedding, tfg_cpu_one_hot, tfg_cpu_accuracy;

/* kernels/cpu/attention.c: attention runs ATTENTION and ATTENTION_PROBS. */
tfg_cpu_kernel_func tfg_cpu_attention, tfg_cpu_attention_grad;

/* kernels/cpu/conv.c: conv2d (im2col + gemm); pool runs MAX_POOL and
 * AVG_POOL. */
tfg_cpu_kernel_func tfg_cpu_conv2d, tfg_cpu_pool;

/* kernels/cpu/grad.c: the gradients that are not compositions of other
 * ops; conv2d_grad_input is gemm + col2im, conv2d_grad_weight im2col +
 * gemm, pool_grad runs MAX_POOL_GRAD and AVG_POOL_GRAD. */
tfg_cpu_kernel_func tfg_cpu_relu_grad, tfg_cpu_gelu_grad, tfg_cpu_cross_entropy_grad,
    tfg_cpu_layer_norm_grad, tfg_cpu_conv2d_grad_input, tfg_cpu_conv2d_grad_weight,
    tfg_cpu_pool_grad, tfg_cpu_embedding_grad;

/* kernels/cpu/optim.c: in-place updates of in[0] (param) and its state;
 * allreduce_local runs ALLREDUCE over a group of one (the mean of one
 * gradient): a copy. The executor runs real groups through
 * runtime/collective. send and recv move a value between ranks through
 * ctx->transport. */
tfg_cpu_kernel_func tfg_cpu_sgd_update, tfg_cpu_adam_update, tfg_cpu_grad_accumulate,
    tfg_cpu_amp_update, tfg_cpu_allreduce_local, tfg_cpu_send, tfg_cpu_recv;

#endif
