/* kernels/cuda/registry.cu: which CUDA kernel runs each op: every file of
 * kernels/cuda fills its rows of one table, built once. */
#include <mutex>
#include <stdio.h>

#include "kernels/cuda/cuda.h"

extern "C" {
#include "compiler/ops.h"
}

static tfg_kernel_fn table[TFG_OP_COUNT];
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
}

extern "C" tfg_kernel_fn tfg_cuda_kernel(int op) {
  std::call_once(built, build);
  return op >= 0 && op < TFG_OP_COUNT ? table[op] : NULL;
}

extern "C" tfg_status tfg_cuda_fail_call(tfg_kernel_ctx *ctx, const char *call, const char *error, const char *file,
                                         int line) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s failed: %s (%s:%d)", call, error, file, line);
}
