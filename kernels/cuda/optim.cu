/* kernels/cuda/optim.cu: SGD_UPDATE, ADAM_UPDATE, GRAD_ACCUMULATE and the local ALLREDUCE
 * on a CUDA device: the GPU twins of kernels/cpu/optim.c.
 *
 * The updates write in place: in[0] is the parameter, in[2] (and in[3])
 * its optimizer state, in[1] the gradient (read only); out is an empty
 * marker and is never touched. ALLREDUCE over a group of one is a copy of
 * in[0] into out (real groups go through runtime/collective). f16 and
 * bf16 parameters and state run staged (kernels/cuda/registry.cu,
 * half.cu): the f32 update of f32 copies, the param and state rounded
 * back once per step (registry.cu's `updates` names them), as on the
 * CPU; ALLREDUCE copies 16-bit elements natively.
 *
 * Index math: every tensor has the parameter's element count and element
 * i of each is updated by one thread from element i of the others, as
 * the CPU's flat loops do (a grid-stride loop, 64-bit).
 *
 * The step. A replayed CUDA Graph keeps its kernels' arguments, so what
 * changes with the step is read on the device from the backend's step
 * block (tfg_cuda_ctx.step, written before each run): SGD's first-step
 * flag and Adam's bias corrections are formed there (tfg_sgd_at,
 * tfg_adam_at), as PyTorch's capturable Adam does. ctx->step is only
 * checked on the host (it must count from 1).
 *
 * Numerics: the scalars (formed in double and rounded once to the dtype)
 * and the per-element formulas are the CPU's own, kernels/optim_math.h,
 * whose + - * / and sqrt are IEEE-rounded and never contracted into an
 * FMA on the device either. SGD therefore equals the CPU bit for bit;
 * Adam does too unless CUDA's pow (2 ulp) and glibc's differ in a bias
 * correction by enough to change its rounding to the dtype. */
#include "kernels/cuda/common.cuh"

#include "kernels/optim_math.h"

/* ---- the grad scaler's inputs ---------------------------------------------- */

/* precision = f16: whether the step's gradients are all finite and the
 * steps skipped before, in device memory (NULL: no scaler). Read on the
 * device by every thread, so a replayed CUDA Graph sees each step's. */
typedef struct scaler_in {
  const bool *finite;
  const float *skipped;
} scaler_in;

static tfg_status scaler_of(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, int at, const char *what,
                            scaler_in *sc) {
  bool present;
  tfg_status st = tfg_kernel_check_scaler(ctx, node, in, at, what, &present);
  *sc = present ? scaler_in{(const bool *)in[at].data, (const float *)in[at + 1].data} : scaler_in{NULL, NULL};
  return st;
}

/* The updates applied, this one included (kernels/optim_math.h). */
static __device__ int64_t applied_of(scaler_in sc, const tfg_cuda_step *st) {
  return st->step - (sc.skipped ? (int64_t)*sc.skipped : 0);
}

/* ---- SGD ------------------------------------------------------------------ */

/* torch.optim.SGD per element: kernels/optim_math.h's step, the CPU's. */
static __global__ void sgd_f32(float *p, const float *grad, float *buf, int64_t n, tfg_sgd_f32 s,
                               const tfg_cuda_step *st, scaler_in sc) {
  if (sc.finite && !*sc.finite) return;
  s = tfg_sgd_at_f32(s, st->step, applied_of(sc, st));
  TFG_CUDA_LOOP(i, n) tfg_sgd_step_f32(s, p, grad, buf, i);
}

static __global__ void sgd_f64(double *p, const double *grad, double *buf, int64_t n, tfg_sgd_f64 s,
                               const tfg_cuda_step *st, scaler_in sc) {
  if (sc.finite && !*sc.finite) return;
  s = tfg_sgd_at_f64(s, st->step, applied_of(sc, st));
  TFG_CUDA_LOOP(i, n) tfg_sgd_step_f64(s, p, grad, buf, i);
}

/* SGD_UPDATE: (param, grad, momentum_buf) updated in place at the step
 * (from 1; step 1 sets the buffer to the gradient); the buffer
 * is neither read nor written (and may be absent) when momentum is 0. */
static tfg_status cuda_sgd_update(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)out;
  const tfg_attrs *a = &node->attrs;
  bool mom = a->opt.momentum != 0;
  if (node->ninputs < (mom ? 3 : 2))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "sgd_update: %d inputs, %d needed", node->ninputs, mom ? 3 : 2);
  tfg_status st = tfg_kernel_check_update(ctx, "sgd_update", in, mom ? 3 : 2, "GPU");
  scaler_in sc;
  if (st == TFG_OK) st = scaler_of(ctx, node, in, 3, "sgd_update", &sc);
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  void *buf = mom ? in[2].data : NULL;
  if (in[0].dtype == TFG_DTYPE_F32)
    return TFG_CUDA_LAUNCH(ctx, n, sgd_f32, (float *)in[0].data, (const float *)in[1].data, (float *)buf, n,
                           tfg_sgd_setup_f32(a, ctx->step, ctx->step), tfg_cuda_of(ctx)->step, sc);
  return TFG_CUDA_LAUNCH(ctx, n, sgd_f64, (double *)in[0].data, (const double *)in[1].data, (double *)buf, n,
                         tfg_sgd_setup_f64(a, ctx->step, ctx->step), tfg_cuda_of(ctx)->step, sc);
}

/* ---- Adam, AdamW ---------------------------------------------------------- */

/* torch.optim.Adam / AdamW per element: kernels/optim_math.h's step, the
 * CPU's. */
static __global__ void adam_f32(float *p, const float *grad, float *m, float *v, int64_t n, tfg_adam_f32 s,
                                const tfg_cuda_step *st, scaler_in sc) {
  if (sc.finite && !*sc.finite) return;
  s = tfg_adam_at_f32(s, st->step, applied_of(sc, st));
  TFG_CUDA_LOOP(i, n) tfg_adam_step_f32(s, p, grad, m, v, i);
}

static __global__ void adam_f64(double *p, const double *grad, double *m, double *v, int64_t n, tfg_adam_f64 s,
                                const tfg_cuda_step *st, scaler_in sc) {
  if (sc.finite && !*sc.finite) return;
  s = tfg_adam_at_f64(s, st->step, applied_of(sc, st));
  TFG_CUDA_LOOP(i, n) tfg_adam_step_f64(s, p, grad, m, v, i);
}

/* ADAM_UPDATE: (param, grad, m, v) updated in place, torch.optim.Adam, or
 * AdamW when attrs.opt.decoupled, at the step t (from 1). */
static tfg_status cuda_adam_update(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)out;
  const tfg_attrs *a = &node->attrs;
  if (node->ninputs < 4)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "adam_update: %d inputs, 4 needed", node->ninputs);
  tfg_status st = tfg_kernel_check_update(ctx, "adam_update", in, 4, "GPU");
  scaler_in sc;
  if (st == TFG_OK) st = scaler_of(ctx, node, in, 4, "adam_update", &sc);
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  if (in[0].dtype == TFG_DTYPE_F32)
    return TFG_CUDA_LAUNCH(ctx, n, adam_f32, (float *)in[0].data, (const float *)in[1].data, (float *)in[2].data,
                           (float *)in[3].data, n, tfg_adam_setup_f32(a, ctx->step, ctx->step), tfg_cuda_of(ctx)->step,
                           sc);
  return TFG_CUDA_LAUNCH(ctx, n, adam_f64, (double *)in[0].data, (const double *)in[1].data, (double *)in[2].data,
                         (double *)in[3].data, n, tfg_adam_setup_f64(a, ctx->step, ctx->step), tfg_cuda_of(ctx)->step,
                         sc);
}

/* ---- gradient accumulation ------------------------------------------------ */

template <typename T> static __global__ void accumulate_kernel(T *acc, const T *g, int64_t n, bool add) {
  if (add) {
    TFG_CUDA_LOOP(i, n) acc[i] += g[i];
  } else {
    TFG_CUDA_LOOP(i, n) acc[i] = g[i];
  }
}

/* GRAD_ACCUMULATE: (acc, grad) -> acc <- grad (attrs.value 0) or acc +
 * grad (1), in place, the CPU's arithmetic (one IEEE add per element). */
static tfg_status cuda_grad_accumulate(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                       tfg_tensor *out) {
  (void)out;
  tfg_status st = tfg_kernel_check_accumulate(ctx, in, "GPU");
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  bool add = node->attrs.value != 0;
  if (n == 0) return TFG_OK;
  if (in[0].dtype == TFG_DTYPE_F32)
    return TFG_CUDA_LAUNCH(ctx, n, accumulate_kernel<float>, (float *)in[0].data, (const float *)in[1].data, n, add);
  return TFG_CUDA_LAUNCH(ctx, n, accumulate_kernel<double>, (double *)in[0].data, (const double *)in[1].data, n, add);
}

/* ---- the grad scaler's update ---------------------------------------------- */

static __global__ void amp_update_kernel(float *scale, const bool *finite, float *tracker, float *skipped) {
  if (blockIdx.x == 0 && threadIdx.x == 0) tfg_amp_update(scale, tracker, skipped, *finite);
}

/* AMP_UPDATE: (scale, finite, growth_tracker, skipped) in place, the CPU's
 * tfg_amp_update on the device (one thread: four scalars). */
static tfg_status cuda_amp_update(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  (void)out;
  tfg_status st = tfg_kernel_check_amp(ctx, in, "GPU");
  if (st != TFG_OK) return st;
  return TFG_CUDA_LAUNCH(ctx, 1, amp_update_kernel, (float *)in[0].data, (const bool *)in[1].data,
                         (float *)in[2].data, (float *)in[3].data);
}

/* ---- ALLREDUCE (a group of one) ------------------------------------------- */

/* The mean of one gradient: a device copy of in[0] (nothing when out is
 * in[0]'s buffer). */
static tfg_status cuda_allreduce_local(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                       tfg_tensor *out) {
  (void)node;
  size_t bytes = (size_t)tfg_shape_numel(&out->shape) * tfg_dtype_size(out->dtype);
  if (in[0].dtype != out->dtype || tfg_shape_numel(&in[0].shape) != tfg_shape_numel(&out->shape))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "allreduce: the output differs from the input");
  if (bytes && in[0].data != out->data)
    TFG_CUDA_CHECK(ctx, cudaMemcpyAsync(out->data, in[0].data, bytes, cudaMemcpyDeviceToDevice,
                                        tfg_cuda_of(ctx)->stream));
  return TFG_OK;
}

/* ---- registration ------------------------------------------------------------- */

extern "C" void tfg_cuda_register_optim(tfg_kernel_fn *table) {
  static const tfg_cuda_kernel_row rows[] = {
      {TFG_OP_SGD_UPDATE, cuda_sgd_update},
      {TFG_OP_ADAM_UPDATE, cuda_adam_update},
      {TFG_OP_GRAD_ACCUMULATE, cuda_grad_accumulate},
      {TFG_OP_AMP_UPDATE, cuda_amp_update},
      {TFG_OP_ALLREDUCE, cuda_allreduce_local},
      {TFG_OP_REDUCE_SCATTER, cuda_allreduce_local}, /* a group of one: a copy, as ALLREDUCE's */
      {TFG_OP_ALL_GATHER, cuda_allreduce_local},
  };
  tfg_cuda_register_rows(table, rows);
}
