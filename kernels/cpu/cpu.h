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

/* kernels/cpu/init.c */
TFG_CPU_KERNEL(tfg_cpu_const);   /* copies attrs.data */
TFG_CPU_KERNEL(tfg_cpu_init);    /* INIT: fills per attrs.init */
/* Fills t per initializer attrs a (PARAM and INIT). fan_in/fan_out come
 * from t's shape: [in, out] for rank 2 (w in matmul(x, w)); for rank >= 3
 * ([out, in, kh, kw], conv2d) fan_in = in * kh * kw, fan_out = out * kh * kw;
 * rank 0/1: both the element count. Element i uses base/rng.h stream
 * a->seed at counter i. */
tfg_status tfg_cpu_init_fill(tfg_tensor *t, const tfg_attrs *a);

/* kernels/cpu/elementwise.c */
TFG_CPU_KERNEL(tfg_cpu_unary);   /* the ops of TFG_OPS_UNARY (ir/op_list.h) */
TFG_CPU_KERNEL(tfg_cpu_binary);  /* the ops of TFG_OPS_BINARY and TFG_OPS_COMPARE */
TFG_CPU_KERNEL(tfg_cpu_where);
TFG_CPU_KERNEL(tfg_cpu_cast);

/* kernels/cpu/fused.c */
TFG_CPU_KERNEL(tfg_cpu_fused);  /* FUSED: a chain of elementwise ops (kernels/fused.h) */

/* kernels/cpu/linalg.c */
TFG_CPU_KERNEL(tfg_cpu_matmul);
/* kernels/cpu/reduce.c */
TFG_CPU_KERNEL(tfg_cpu_reduce);  /* SUM MEAN MAX */
TFG_CPU_KERNEL(tfg_cpu_argmax);

/* kernels/cpu/shape.c */
TFG_CPU_KERNEL(tfg_cpu_copy);    /* RESHAPE FLATTEN: same bytes, new shape */
TFG_CPU_KERNEL(tfg_cpu_transpose);
TFG_CPU_KERNEL(tfg_cpu_concat);
TFG_CPU_KERNEL(tfg_cpu_slice);
TFG_CPU_KERNEL(tfg_cpu_broadcast);

/* kernels/cpu/nn.c */
TFG_CPU_KERNEL(tfg_cpu_softmax); /* SOFTMAX LOG_SOFTMAX */
TFG_CPU_KERNEL(tfg_cpu_cross_entropy);
TFG_CPU_KERNEL(tfg_cpu_mse);
TFG_CPU_KERNEL(tfg_cpu_layer_norm);
TFG_CPU_KERNEL(tfg_cpu_dropout);
TFG_CPU_KERNEL(tfg_cpu_embedding);
TFG_CPU_KERNEL(tfg_cpu_one_hot);
TFG_CPU_KERNEL(tfg_cpu_accuracy);

/* kernels/cpu/attention.c */
TFG_CPU_KERNEL(tfg_cpu_attention); /* ATTENTION ATTENTION_PROBS */
TFG_CPU_KERNEL(tfg_cpu_attention_grad);

/* kernels/cpu/conv.c */
TFG_CPU_KERNEL(tfg_cpu_conv2d);  /* im2col + gemm */
TFG_CPU_KERNEL(tfg_cpu_pool);    /* MAX_POOL AVG_POOL */

/* kernels/cpu/grad.c: gradients that are not compositions of other ops */
TFG_CPU_KERNEL(tfg_cpu_relu_grad);
TFG_CPU_KERNEL(tfg_cpu_gelu_grad);
TFG_CPU_KERNEL(tfg_cpu_cross_entropy_grad);
TFG_CPU_KERNEL(tfg_cpu_layer_norm_grad);
TFG_CPU_KERNEL(tfg_cpu_conv2d_grad_input);  /* gemm + col2im */
TFG_CPU_KERNEL(tfg_cpu_conv2d_grad_weight); /* im2col + gemm */
TFG_CPU_KERNEL(tfg_cpu_pool_grad);          /* MAX_POOL_GRAD AVG_POOL_GRAD */
TFG_CPU_KERNEL(tfg_cpu_embedding_grad);

/* kernels/cpu/optim.c: in-place updates of in[0] (param) and its state */
TFG_CPU_KERNEL(tfg_cpu_sgd_update);
TFG_CPU_KERNEL(tfg_cpu_adam_update);
TFG_CPU_KERNEL(tfg_cpu_grad_accumulate);
TFG_CPU_KERNEL(tfg_cpu_amp_update);
/* ALLREDUCE over a group of one (the mean of one gradient): a copy. The
 * executor runs real groups through runtime/collective. */
TFG_CPU_KERNEL(tfg_cpu_allreduce_local);

#endif
