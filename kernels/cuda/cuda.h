/* kernels/cuda/cuda.h: the CUDA kernels: what they share with the CUDA
 * backend (runtime/backend_cuda.c), which is the only C file besides
 * kernels/cuda/ that includes it.
 *
 *   tfg_kernel_fn fn = tfg_cuda_kernel(TFG_OP_MATMUL);   // NULL: none
 *   // the backend's launch sets ctx->backend to its tfg_cuda_ctx with
 *   // the launch's stream, then calls fn(ctx, node, in, out)
 *
 * Every kernel has the tfg_kernel_fn contract (ir/ops.h) with the
 * tensors in device memory: it queues its work on cx->stream and returns
 * at once; it writes every element of out. It supports what the CPU
 * kernel of the op supports (kernels/cpu/cpu.h): f32 and f64 for all
 * math, integer and bool dtypes where the op makes sense for them, and
 * f16 and bf16 wherever the CPU has them. Natively (the kernel reads and
 * writes 16-bit elements itself): cast, matmul (cuBLAS, f32
 * accumulation), init (each value formed in double and rounded once, as
 * on the CPU), where, embedding, allreduce and the shape ops (they move
 * elements). Every other op's kernel is f32/f64 only and runs staged
 * (tfg_cuda_staged below, kernels/cuda/half.cu): f32 copies of its
 * 16-bit operands, the f32 kernel, one rounding back, at the cost of an
 * f32 copy of each such operand in device scratch. fused is neither: its
 * chains are f32/f64, as on the CPU.
 * What it can check before launching (dtypes, shapes) it reports at once
 * with tfg_kernel_fail; what only the data shows (an embedding id out of
 * range, a label past the classes) it reports through tfg_cuda_flag: the
 * first such error of a device is kept in device memory and the backend
 * reads it at the next synchronize, naming the op. Every CUDA, cuBLAS,
 * cuDNN and NCCL call is checked with the TFG_CUDA_* macros below, which
 * fail the kernel with the call, its error and file:line.
 *
 * Results match the CPU kernels' within per-dtype tolerances
 * (tests/gpu): the same formulas, the same counter-based random numbers
 * (base/rng.h), sums in another order. */
#ifndef TFG_KERNELS_CUDA_H
#define TFG_KERNELS_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdbool.h>
#include <stddef.h>

/* tfg's headers are C: their functions keep C linkage in .cu files. */
#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

/* A data error found by a kernel on the device (tfg_cuda_flag). */
typedef struct tfg_cuda_error {
  int code;          /* 0: none; else a TFG_CUDA_E_* */
  int node;          /* the node id of the kernel that found it (ctx->node) */
  long long value;   /* the offending value (an id, a label) */
  long long limit;   /* the range it had to be in: [0, limit) */
} tfg_cuda_error;

enum { TFG_CUDA_E_NONE, TFG_CUDA_E_ID_RANGE, TFG_CUDA_E_LABEL_RANGE, TFG_CUDA_E_DIV_ZERO };

/* The run's training step and seed in device memory (tfg_cuda_ctx.step).
 * A CUDA Graph replays its kernels with the arguments they were captured
 * with, so a kernel whose work changes with the step (Adam's bias
 * corrections, SGD's first step, dropout's mask) reads them here; the
 * backend's set_step (runtime/backend.h) writes them before each run. */
typedef struct tfg_cuda_step {
  long long step;         /* from 1 while training; ctx->step at the launch may be stale */
  unsigned long long seed; /* the train action's seed */
} tfg_cuda_step;

/* What a CUDA kernel needs beyond its tensors: one per logical device,
 * owned by the backend. */
typedef struct tfg_cuda_ctx {
  int device;                 /* the CUDA device ordinal (physical) */
  cudaStream_t stream;        /* the stream of the launch in progress */
  cublasHandle_t cublas;      /* bound to stream before each launch */
  cublasLtHandle_t cublaslt;
  cudnnHandle_t cudnn;        /* bound to stream before each launch */
  void *workspace;            /* device scratch for cuBLASLt and cuDNN */
  size_t workspace_bytes;
  bool tf32;                  /* --tf32: f32 matrix products may use TF32 */
  bool attention_reference;   /* f32 attention on the reference kernels too, not the tiled ones
                               * (sw.no_attention_tiled) */
  bool nvrtc;                 /* a fused chain runs as its own NVRTC-compiled kernel (sw.nvrtc) */
  const char *nvrtc_cache;    /* NVRTC's cache folder (sw.nvrtc_cache: the switches' owner keeps it); NULL: none */
  tfg_cuda_error *error;      /* device memory: the first data error */
  const tfg_cuda_step *step;  /* device memory: this run's step and seed */
  int sms;                    /* multiprocessors, for grid sizes */
} tfg_cuda_ctx;

/* The CUDA kernel of op, or NULL when it has none. For an op whose
 * kernel computes only in f32 and f64 it is a wrapper that runs that
 * kernel through tfg_cuda_staged when a tensor is f16 or bf16
 * (kernels/cuda/registry.cu lists the ops that take them natively). */
tfg_kernel_fn tfg_cuda_kernel(int op);

/* Runs f32 (an op's CUDA kernel for f32 tensors) on f32 copies of the
 * f16/bf16 tensors among in[] and out, in stream-ordered device scratch:
 * widens those inputs, runs f32, rounds its output back to nearest even,
 * and likewise each input k with bit k of writeback set, which f32
 * updates in place (the optimizer updates' param and state). Other
 * tensors pass as they are; with none of them 16-bit it is f32's call
 * itself. kernels/cuda/half.cu; the CPU's twin is kernels/cpu/half.c's
 * tfg_cpu_staged. */
tfg_status tfg_cuda_staged(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out,
                           tfg_kernel_fn f32, uint32_t writeback);

/* The ctx of a launch (the backend sets ctx->backend). */
static inline tfg_cuda_ctx *tfg_cuda_of(tfg_kernel_ctx *ctx) { return (tfg_cuda_ctx *)ctx->backend; }

/* Fails ctx with "CALL failed: ERROR (FILE:LINE)" and returns TFG_ERR_DEVICE. */
tfg_status tfg_cuda_fail_call(tfg_kernel_ctx *ctx, const char *call, const char *error, const char *file, int line);

/* Returns from the caller with tfg_cuda_fail_call when call returns a
 * status of type T other than ok, naming the call by text (its source)
 * and the status by describe(status): the body of the three checks
 * below, for the CUDA runtime, cuBLAS and cuDNN. */
#define TFG_CUDA_CHECK_STATUS(ctx, call, text, T, ok, describe)                                    \
  do {                                                                                            \
    T tfg_e_ = (call);                                                                            \
    if (tfg_e_ != ok) return tfg_cuda_fail_call(ctx, text, describe(tfg_e_), __FILE__, __LINE__);   \
  } while (0)
#define TFG_CUDA_CHECK(ctx, call) TFG_CUDA_CHECK_STATUS(ctx, call, #call, cudaError_t, cudaSuccess, cudaGetErrorString)
#define TFG_CUBLAS_CHECK(ctx, call) \
  TFG_CUDA_CHECK_STATUS(ctx, call, #call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define TFG_CUDNN_CHECK(ctx, call) \
  TFG_CUDA_CHECK_STATUS(ctx, call, #call, cudnnStatus_t, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)
/* After a kernel launch (<<<...>>>): its launch error, if any. */
#define TFG_CUDA_LAUNCHED(ctx) TFG_CUDA_CHECK(ctx, cudaGetLastError())

/* Each file of kernels/cuda registers its kernels in the table (indexed
 * by op id); tfg_cuda_kernel reads it. */
void tfg_cuda_register_elementwise(tfg_kernel_fn *table); /* elementwise.cu: unary, binary, where, cast, init, dropout */
void tfg_cuda_register_shape(tfg_kernel_fn *table);       /* shape.cu: reshape, flatten, transpose, concat, slice, broadcast */
void tfg_cuda_register_optim(tfg_kernel_fn *table);       /* optim.cu: sgd_update, adam_update, allreduce (a copy) */
void tfg_cuda_register_reduce(tfg_kernel_fn *table);      /* reduce.cu: sum, mean, max, argmax */
void tfg_cuda_register_nn(tfg_kernel_fn *table);          /* nn.cu: softmax, log_softmax, cross_entropy, mse, layer_norm,
                                                           * embedding, one_hot, accuracy, and their gradients */
void tfg_cuda_register_linalg(tfg_kernel_fn *table);      /* linalg.cu: matmul (cuBLAS / cuBLASLt) */
void tfg_cuda_register_conv(tfg_kernel_fn *table);        /* conv.cu: conv2d, max_pool, avg_pool and their gradients (cuDNN) */
void tfg_cuda_register_fused(tfg_kernel_fn *table);       /* fused.cu: fused, a chain of elementwise ops (kernels/fused.h) */
void tfg_cuda_register_attention(tfg_kernel_fn *table);   /* attention.cu: attention, attention_probs */
/* half.cu has no op of its own: tfg_cuda_staged. */

#ifdef __cplusplus
}
#endif

#endif
