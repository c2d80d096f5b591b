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
    {TFG_OP_REDUCE_SCATTER, tfg_cpu_allreduce_local}, /* a group of one: every piece its own */
    {TFG_OP_ALL_GATHER, tfg_cpu_allreduce_local},
    {TFG_OP_SEND, tfg_cpu_send},
    {TFG_OP_RECV, tfg_cpu_recv},
};

void tfg_cpu_register_optim(tfg_kernel_fn *table) { TFG_CPU_REGISTER_ROWS(table, kernels); }

#define GRAIN_ELEMS (1 << 15)

/* The order of operations is the contract, so no multiply-add may be
 * fused into an FMA (one rounding instead of two): kernels/optim_math.h's
 * formulas use TFG_RN_* arithmetic, and kernels/hostdev.h turns clang's
 * contraction off (GCC never contracts in ISO C mode, -std=c11). The
 * checks before an update are every backend's (tfg_kernel_check_update). */

/* ---- SGD, Adam, AdamW ------------------------------------------------------- */

/* The start of an update of the k tensors in[0..k) (param, grad and its
 * state; tfg_kernel_check_update), with the grad scaler's inputs from
 * in[at] on when the node has them (tfg_kernel_check_scaler): whether to
 * apply the update, and the updates applied, this one included; without
 * them, true and ctx->step. Sets *n to the elements to update, 0 when
 * there is nothing to do (an empty param, or a step the scaler skips). */
static tfg_status update_begin(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                               int k, int at, const char *what, int64_t *n, int64_t *applied) {
  TFG_ASSERT(node->ninputs >= k);
  tfg_status st = tfg_kernel_check_update(ctx, what, in, k, "CPU");
  if (st != TFG_OK) return st;
  bool present;
  if ((st = tfg_kernel_check_scaler(ctx, node, in, at, what, &present)) != TFG_OK) return st;
  bool apply = !present || *(const bool *)in[at].data;
  *applied = ctx->step - (present ? (int64_t)*(const float *)in[at + 1].data : 0);
  *n = apply ? tfg_shape_numel(&in[0].shape) : 0;
  return TFG_OK;
}

/* An update of a parameter p from its gradient g: its state tensors (SGD's
 * momentum buffer; Adam's m and v) and the step's scalars in the
 * parameter's dtype. */
typedef struct update_job {
  void *p, *state[2];
  const void *g;
  union {
    tfg_sgd_f32 sgd;
    tfg_adam_f32 adam;
  } f32;
  union {
    tfg_sgd_f64 sgd;
    tfg_adam_f64 adam;
  } f64;
} update_job;

/* OPT_S, the chunk body of OPT (sgd, adam) for parameters of type T:
 * kernels/optim_math.h's tfg_OPT_step_S per element. The trailing
 * arguments are the state it takes, s0 and s1 being state[0] and
 * state[1] (SGD takes s0 only). */
#define DEFINE_UPDATE(OPT, T, S, ...)                                                    \
  static void OPT##_##S(void *arg, int64_t lo, int64_t hi, int64_t chunk) {             \
    const update_job *j = arg;                                                           \
    const tfg_##OPT##_##S s = j->S.OPT;                                                  \
    T *p = j->p, *s0 = j->state[0], *s1 = j->state[1];                                   \
    const T *grad = j->g;                                                                \
    (void)chunk, (void)s1;                                                               \
    for (int64_t i = lo; i < hi; i++) tfg_##OPT##_step_##S(s, p, grad, __VA_ARGS__, i);  \
  }
DEFINE_UPDATE(sgd, float, f32, s0)
DEFINE_UPDATE(sgd, double, f64, s0)
DEFINE_UPDATE(adam, float, f32, s0, s1)
DEFINE_UPDATE(adam, double, f64, s0, s1)

/* SGD_UPDATE: (param, grad, momentum_buf) -> param and momentum_buf
 * updated in place, torch.optim.SGD with attrs.opt.lr, momentum,
 * dampening, weight_decay and nesterov at step ctx->step (from 1; step 1
 * sets the buffer to the gradient). momentum_buf is neither read nor
 * written (and may be absent) when momentum is 0. All f32 or all f64, one
 * element count. out is not touched. TFG_ERR_NUMERIC for a step < 1. */
TFG_CPU_KERNEL(tfg_cpu_sgd_update) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_sgd_update);
  const tfg_attrs *a = &node->attrs;
  bool mom = a->opt.momentum != 0;
  int64_t n, applied;
  tfg_status st = update_begin(ctx, node, in, mom ? 3 : 2, 3, "sgd_update", &n, &applied);
  if (st != TFG_OK || n == 0) return st;
  update_job j = {.p = in[0].data, .g = in[1].data, .state = {mom ? in[2].data : NULL},
                  .f32.sgd = tfg_sgd_setup_f32(a, ctx->step, applied),
                  .f64.sgd = tfg_sgd_setup_f64(a, ctx->step, applied)};
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS, in[0].dtype == TFG_DTYPE_F32 ? sgd_f32 : sgd_f64,
                   &j);
  return TFG_OK;
}

/* ADAM_UPDATE: (param, grad, m, v) -> param, m (exp_avg) and v
 * (exp_avg_sq) updated in place, torch.optim.Adam, or torch.optim.AdamW
 * when attrs.opt.decoupled, with attrs.opt.lr, beta1, beta2, eps and
 * weight_decay at step t = ctx->step (from 1; m and v start at zero).
 * All f32 or all f64, one element count. out is not touched.
 * TFG_ERR_NUMERIC for a step < 1 (the bias corrections would be 0). */
TFG_CPU_KERNEL(tfg_cpu_adam_update) {
  if (tfg_cpu_is_half(in[0].dtype)) return tfg_cpu_staged(ctx, node, in, out, tfg_cpu_adam_update);
  const tfg_attrs *a = &node->attrs;
  int64_t n, applied;
  tfg_status st = update_begin(ctx, node, in, 4, 4, "adam_update", &n, &applied);
  if (st != TFG_OK || n == 0) return st;
  update_job j = {.p = in[0].data, .g = in[1].data, .state = {in[2].data, in[3].data},
                  .f32.adam = tfg_adam_setup_f32(a, ctx->step, applied),
                  .f64.adam = tfg_adam_setup_f64(a, ctx->step, applied)};
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

/* SEND and RECV hand host memory to the job's transport: the bytes of the
 * value, as they are (the receiving node has the sender's dtype and
 * shape). */
static tfg_status p2p_missing(tfg_kernel_ctx *ctx, const tfg_node *node) {
  return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s needs the ranks of an mpirun job, and this process is not one",
                         tfg_kernel_op_name(node->op));
}

TFG_CPU_KERNEL(tfg_cpu_send) {
  (void)out;
  if (!ctx->transport) return p2p_missing(ctx, node);
  size_t bytes = (size_t)tfg_shape_numel(&in[0].shape) * tfg_dtype_size(in[0].dtype);
  return ctx->transport->send((int)node->attrs.n, node->attrs.key, in[0].data, bytes, &ctx->err);
}

TFG_CPU_KERNEL(tfg_cpu_recv) {
  (void)in;
  if (!ctx->transport) return p2p_missing(ctx, node);
  size_t bytes = (size_t)tfg_shape_numel(&out->shape) * tfg_dtype_size(out->dtype);
  return ctx->transport->recv((int)node->attrs.n, node->attrs.key, out->data, bytes, &ctx->err);
}
