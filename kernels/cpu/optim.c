/* kernels/cpu/optim.c: the optimizer updates SGD_UPDATE and ADAM_UPDATE,
 * torch.optim.SGD, Adam and AdamW for one parameter tensor, and
 * GRAD_ACCUMULATE, the sum of a step's micro-batch gradients.
 *
 * These kernels write in place: in[0] is the parameter and in[2] (and
 * in[3]) its optimizer state, the runtime's own storage rather than
 * copies, so the update is visible to the next step. in[1], the
 * gradient, is read only. `out` is an empty marker tensor that orders
 * the update in the plan; it is never touched. Which inputs are updated
 * is the op's row's inplace (ir/ops.c): the planner reads it, and so
 * does tfg_cpu_staged, which rounds them back for f16/bf16 params.
 *
 * The arithmetic, kernels/optim_math.h's (the CUDA kernels' too), follows
 * PyTorch's implementation (torch/optim/sgd.py and adam.py, the default
 * for-each path on CPU, which runs the same element formulas as the
 * single-tensor path) operation for operation, so the results can be
 * compared with PyTorch to the last bits:
 *   - elementwise math is done in the parameter's dtype (f32 math for
 *     f32 parameters, never widened), as PyTorch's CPU kernels do;
 *   - every hyperparameter expression PyTorch forms from Python floats
 *     (1 - beta1, lr / bias_correction1, ...) is formed here in double
 *     and then rounded once to the dtype, where PyTorch's kernels convert
 *     the Python scalar;
 *   - a branch PyTorch takes on a Python float (weight_decay != 0,
 *     momentum != 0) is taken on the double attr.
 * Each element's update is independent, so splitting over ctx->pool
 * changes nothing in the result. PyTorch's vectorized CPU kernels may
 * fuse a multiply-add (lerp, add with alpha) into one FMA where this
 * code rounds twice: expect agreement to an ulp or so, not always bits. */
#include <math.h>
#include <string.h>
#include <stdint.h>

#include "base/assert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/parallel.h"
#include "kernels/optim_math.h"

/* The ops this file's kernels run (kernels/cpu/registry.c). */
static const tfg_cpu_kernel_row kernels[] = {
    {TFG_OP_SGD_UPDATE, tfg_cpu_sgd_update},
    {TFG_OP_ADAM_UPDATE, tfg_cpu_adam_update},
    {TFG_OP_GRAD_ACCUMULATE, tfg_cpu_grad_accumulate},
    {TFG_OP_AMP_UPDATE, tfg_cpu_amp_update},
    {TFG_OP_ALLREDUCE, tfg_cpu_allreduce_local},
};

void tfg_cpu_register_optim(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

#define GRAIN_ELEMS (1 << 15)

/* The order of operations is the contract, so no multiply-add may be
 * fused into an FMA (one rounding instead of two): kernels/optim_math.h's
 * formulas use TFG_RN_* arithmetic, and kernels/hostdev.h turns clang's
 * contraction off (GCC never contracts in ISO C mode, -std=c11). The
 * checks before an update are every backend's (tfg_kernel_check_update). */

/* ---- the grad scaler's inputs ---------------------------------------------- */

/* The grad scaler's inputs from `at` on, when the node has them
 * (tfg_kernel_check_scaler): whether to apply the update, and the updates
 * applied, this one included; without them, true and ctx->step. */
static tfg_status scaler_inputs(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, int at,
                                const char *what, bool *apply, int64_t *applied) {
  bool present;
  tfg_status st = tfg_kernel_check_scaler(ctx, node, in, at, what, &present);
  if (st != TFG_OK) return st;
  *apply = !present || *(const bool *)in[at].data;
  *applied = ctx->step - (present ? (int64_t)*(const float *)in[at + 1].data : 0);
  return st;
}

/* ---- SGD ------------------------------------------------------------------ */

typedef struct sgd_job {
  void *p, *buf;
  const void *g;
  tfg_sgd_f32 sf32; /* the step's scalars in the parameter's dtype */
  tfg_sgd_f64 sf64;
} sgd_job;

/* torch.optim.SGD per element: kernels/optim_math.h's tfg_sgd_step, in
 * the parameter's dtype T. */
#define DEFINE_SGD(T, S)                                                             \
  static void sgd_##S(void *arg, int64_t lo, int64_t hi, int64_t chunk) {           \
    const sgd_job *j = arg;                                                          \
    const tfg_sgd_##S s = j->s##S;                                                   \
    T *p = j->p, *buf = j->buf;                                                      \
    const T *grad = j->g;                                                            \
    (void)chunk;                                                                     \
    for (int64_t i = lo; i < hi; i++) tfg_sgd_step_##S(s, p, grad, buf, i);          \
  }
DEFINE_SGD(float, f32)
DEFINE_SGD(double, f64)

/* SGD_UPDATE: (param, grad, momentum_buf) -> param and momentum_buf
 * updated in place, torch.optim.SGD with attrs.opt.lr, momentum,
 * dampening, weight_decay and nesterov at step ctx->step (from 1; step 1
 * sets the buffer to the gradient). momentum_buf is neither read nor
 * written (and may be absent) when momentum is 0. All f32 or all f64, one
 * element count. out is not touched. TFG_ERR_NUMERIC for a step < 1. */
TFG_CPU_KERNEL(tfg_cpu_sgd_update) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_sgd_update);
  (void)out;
  const tfg_attrs *a = &node->attrs;
  bool mom = a->opt.momentum != 0;
  TFG_ASSERT(node->ninputs >= (mom ? 3 : 2));
  tfg_status st = tfg_kernel_check_update(ctx, "sgd_update", in, mom ? 3 : 2, "CPU");
  if (st != TFG_OK) return st;
  bool apply;
  int64_t applied;
  if ((st = scaler_inputs(ctx, node, in, 3, "sgd_update", &apply, &applied)) != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0 || !apply) return TFG_OK;
  sgd_job j = {.p = in[0].data, .g = in[1].data, .buf = mom ? in[2].data : NULL,
               .sf32 = tfg_sgd_setup_f32(a, ctx->step, applied), .sf64 = tfg_sgd_setup_f64(a, ctx->step, applied)};
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS, in[0].dtype == TFG_DTYPE_F32 ? sgd_f32 : sgd_f64,
                   &j);
  return TFG_OK;
}

/* ---- Adam, AdamW ---------------------------------------------------------- */

typedef struct adam_job {
  void *p, *m, *v;
  const void *g;
  tfg_adam_f32 sf32; /* the step's scalars in the parameter's dtype */
  tfg_adam_f64 sf64;
} adam_job;

/* torch.optim.Adam / AdamW per element: kernels/optim_math.h's
 * tfg_adam_step, in the parameter's dtype T. */
#define DEFINE_ADAM(T, S)                                                            \
  static void adam_##S(void *arg, int64_t lo, int64_t hi, int64_t chunk) {          \
    const adam_job *j = arg;                                                         \
    const tfg_adam_##S s = j->s##S;                                                  \
    T *p = j->p, *m = j->m, *v = j->v;                                               \
    const T *grad = j->g;                                                            \
    (void)chunk;                                                                     \
    for (int64_t i = lo; i < hi; i++) tfg_adam_step_##S(s, p, grad, m, v, i);        \
  }
DEFINE_ADAM(float, f32)
DEFINE_ADAM(double, f64)

/* ADAM_UPDATE: (param, grad, m, v) -> param, m (exp_avg) and v
 * (exp_avg_sq) updated in place, torch.optim.Adam, or torch.optim.AdamW
 * when attrs.opt.decoupled, with attrs.opt.lr, beta1, beta2, eps and
 * weight_decay at step t = ctx->step (from 1; m and v start at zero).
 * All f32 or all f64, one element count. out is not touched.
 * TFG_ERR_NUMERIC for a step < 1 (the bias corrections would be 0). */
TFG_CPU_KERNEL(tfg_cpu_adam_update) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_adam_update);
  (void)out;
  const tfg_attrs *a = &node->attrs;
  TFG_ASSERT(node->ninputs >= 4);
  tfg_status st = tfg_kernel_check_update(ctx, "adam_update", in, 4, "CPU");
  if (st != TFG_OK) return st;
  bool apply;
  int64_t applied;
  if ((st = scaler_inputs(ctx, node, in, 4, "adam_update", &apply, &applied)) != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0 || !apply) return TFG_OK;
  adam_job j = {.p = in[0].data, .g = in[1].data, .m = in[2].data, .v = in[3].data,
                .sf32 = tfg_adam_setup_f32(a, ctx->step, applied), .sf64 = tfg_adam_setup_f64(a, ctx->step, applied)};
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS / 4,
                   in[0].dtype == TFG_DTYPE_F32 ? adam_f32 : adam_f64, &j);
  return TFG_OK;
}

/* ---- gradient accumulation ------------------------------------------------ */

typedef struct acc_job {
  void *acc;
  const void *g;
  bool add;
} acc_job;

#define DEFINE_ACC(T, S)                                                             \
  static void acc_##S(void *arg, int64_t lo, int64_t hi, int64_t chunk) {           \
    const acc_job *j = arg;                                                          \
    T *acc = j->acc;                                                                 \
    const T *g = j->g;                                                               \
    (void)chunk;                                                                     \
    if (j->add)                                                                      \
      for (int64_t i = lo; i < hi; i++) acc[i] += g[i];                              \
    else                                                                             \
      memcpy(acc + lo, g + lo, sizeof *acc * (size_t)(hi - lo));                     \
  }
DEFINE_ACC(float, f32)
DEFINE_ACC(double, f64)

/* GRAD_ACCUMULATE: (acc, grad) -> acc <- grad (attrs.value 0: a step's
 * first micro-batch) or acc + grad (1), in place. One float dtype, one
 * element count (tfg_kernel_check_accumulate). out is not touched. */
TFG_CPU_KERNEL(tfg_cpu_grad_accumulate) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_grad_accumulate);
  (void)out;
  tfg_status st = tfg_kernel_check_accumulate(ctx, in, "CPU");
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  acc_job j = {.acc = in[0].data, .g = in[1].data, .add = node->attrs.value != 0};
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS, in[0].dtype == TFG_DTYPE_F32 ? acc_f32 : acc_f64, &j);
  return TFG_OK;
}

/* AMP_UPDATE: (scale, finite, growth_tracker, skipped), f32 scalars but
 * for the bool finite: GradScaler.update() in place
 * (tfg_amp_update). out is not touched. */
TFG_CPU_KERNEL(tfg_cpu_amp_update) {
  (void)node;
  (void)out;
  tfg_status st = tfg_kernel_check_amp(ctx, in, "CPU");
  if (st != TFG_OK) return st;
  tfg_amp_update(in[0].data, in[2].data, in[3].data, *(const bool *)in[1].data);
  return TFG_OK;
}

TFG_CPU_KERNEL(tfg_cpu_allreduce_local) {
  (void)ctx;
  (void)node;
  size_t bytes = (size_t)tfg_shape_numel(&out->shape) * tfg_dtype_size(out->dtype);
  if (bytes) memcpy(out->data, in[0].data, bytes);
  return TFG_OK;
}
