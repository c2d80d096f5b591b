/* kernels/cuda/registry.cu: which CUDA kernel runs each op: every file of
 * kernels/cuda fills its rows of one table, built once.
 *
 * f16 and bf16. The ops marked native below have kernels that take 16-bit
 * tensors themselves (they move elements, or matmul's cuBLAS call
 * accumulates in f32 and rounds once, or init rounds each double value
 * once); fused is listed with them because it is not staged: its chains
 * are f32/f64 only, as on the CPU (staging one would skip the rounding to
 * 16 bits between its ops). Every other op's kernel computes only in f32
 * and f64, so tfg_cuda_kernel hands out one wrapper for all of them,
 * staged_op: when a tensor of the launch is f16 or bf16 it runs the op's
 * f32 kernel through tfg_cuda_staged (kernels/cuda/half.cu), writing back
 * the inputs the op updates in place (its row's inplace, ir/ops.h, as
 * kernels/cpu/half.c's tfg_cpu_staged does); else tfg_cuda_staged calls
 * the kernel directly. */
#include <mutex>
#include <stdio.h>

#include "kernels/cuda/cuda.h"

extern "C" {
#include "ir/graph.h"
#include "ir/ops.h"
}

static tfg_kernel_fn table[TFG_OP_COUNT];
static bool native_half[TFG_OP_COUNT];
static std::once_flag built;

static void build(void) {
  tfg_cuda_register_elementwise(table);
  tfg_cuda_register_shape(table);
  tfg_cuda_register_optim(table);
  tfg_cuda_register_reduce(table);
  tfg_cuda_register_nn(table);
  tfg_cuda_register_linalg(table);
  tfg_cuda_register_conv(table);
  tfg_cuda_register_fused(table);
  tfg_cuda_register_attention(table);
  static const int native[] = {TFG_OP_CAST,      TFG_OP_MATMUL,    TFG_OP_INIT,      TFG_OP_WHERE,
                               TFG_OP_EMBEDDING, TFG_OP_ALLREDUCE, TFG_OP_REDUCE_SCATTER, TFG_OP_ALL_GATHER,
                               TFG_OP_RESHAPE,   TFG_OP_FLATTEN,
                               TFG_OP_TRANSPOSE, TFG_OP_CONCAT,    TFG_OP_SLICE,     TFG_OP_BROADCAST,
                               TFG_OP_FUSED};
  for (int op : native) native_half[op] = true;
}

/* The kernel of every op that is not native for f16/bf16 (the op's own
 * kernel when no tensor is 16-bit). */
static tfg_status staged_op(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  return tfg_cuda_staged(ctx, node, in, out, table[node->op], tfg_op_get(node->op)->inplace);
}

extern "C" tfg_kernel_fn tfg_cuda_kernel(int op) {
  std::call_once(built, build);
  if (op < 0 || op >= TFG_OP_COUNT || !table[op]) return NULL;
  return native_half[op] ? table[op] : staged_op;
}

extern "C" tfg_status tfg_cuda_fail_call(tfg_kernel_ctx *ctx, const char *call, const char *error, const char *file,
                                         int line) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s failed: %s (%s:%d)", call, error, file, line);
}
