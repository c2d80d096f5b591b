/* kernels/cuda/fused.cu: the FUSED op on a CUDA device: a chain of
 * elementwise ops (kernels/fused.h) in one kernel, the GPU twin of
 * kernels/cpu/fused.c.
 *
 * One grid-stride loop over the output: each thread loads the chain's
 * inputs at its element (element 0 of a scalar input, the repeating
 * element of a broadcast one), runs the ops in
 * order and stores the last result, so a chain of k ops reads its inputs
 * and writes its output once where k separate kernels would write and
 * read k - 1 intermediates through global memory. The program travels by
 * value as a kernel parameter (constant memory, the same for every
 * thread: the switch on each op does not diverge), with the input
 * pointers beside it. Operands are looked up by index in a small
 * per-thread array (inputs, then results): it may live in local memory,
 * which the L1 cache serves.
 *
 * The formulas are kernels/elementwise_math.h's, as on the CPU, in the
 * output's dtype: device arithmetic there is unfused (_rn intrinsics) so
 * a * b + c across two ops rounds twice as the ops do one at a time; the
 * transcendentals are CUDA's (within its ulp bounds of glibc's). */
#include "kernels/cuda/common.cuh"

#include "kernels/elementwise_math.h"
#include "kernels/fused.h"

/* The device addresses of a chain's inputs, by value beside the program. */
typedef struct fused_inputs {
  const void *p[TFG_FUSED_MAX_INPUTS];
} fused_inputs;

/* out[i] for i in [0, n): the program p over inputs in. */
template <typename T>
static __global__ void fused_kernel(tfg_fused_prog p, fused_inputs in, T *out, int64_t n) {
  TFG_CUDA_LOOP(i, n) {
    T v[TFG_FUSED_MAX_INPUTS + TFG_FUSED_MAX_OPS];
#pragma unroll
    for (int k = 0; k < TFG_FUSED_MAX_INPUTS; k++)
      if (k < p.ninputs) v[k] = ((const T *)in.p[k])[p.len[k] == n ? i : p.len[k] == 1 ? 0 : i / p.div[k] % p.len[k]];
    for (int s = 0; s < p.nops; s++) {
      const tfg_fused_op o = p.ops[s];
      /* binary when it has a second operand (b >= 0) */
      v[TFG_FUSED_MAX_INPUTS + s] = o.b >= 0 ? tfg_em_binary(o.op, v[o.a], v[o.b]) : tfg_em_unary(o.op, v[o.a]);
    }
    out[i] = v[TFG_FUSED_MAX_INPUTS + p.nops - 1];
  }
}

/* FUSED: node->attrs.data is a tfg_fused_prog over node->ninputs inputs,
 * f32 or f64 like the output, each of its element count, one element or
 * broadcast (tfg_fused_at's index). The CPU kernel's checks and messages
 * (tfg_fused_check_tensors, "on the GPU" for "on the CPU"). */
static tfg_status fused(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  tfg_status st = tfg_fused_check_tensors(ctx, node, in, out, "GPU");
  if (st != TFG_OK) return st;
  const tfg_fused_prog *p = (const tfg_fused_prog *)node->attrs.data;
  int64_t n = tfg_shape_numel(&out->shape);
  fused_inputs ins = {};
  for (int k = 0; k < p->ninputs; k++) ins.p[k] = in[k].data;
  if (n == 0) return TFG_OK;
  if (out->dtype == TFG_DTYPE_F32) return TFG_CUDA_LAUNCH(ctx, n, fused_kernel<float>, *p, ins, (float *)out->data, n);
  return TFG_CUDA_LAUNCH(ctx, n, fused_kernel<double>, *p, ins, (double *)out->data, n);
}

extern "C" void tfg_cuda_register_fused(tfg_kernel_fn *table) { table[TFG_OP_FUSED] = fused; }
