/* kernels/cpu/optim.c: the optimizer updates SGD_UPDATE and ADAM_UPDATE,
 * torch.optim.SGD, Adam and AdamW for one parameter tensor.
 *
 * These kernels write in place: in[0] is the parameter and in[2] (and
 * in[3]) its optimizer state, the runtime's own storage rather than
 * copies, so the update is visible to the next step. in[1], the
 * gradient, is read only. `out` is an empty marker tensor that orders
 * the update in the plan; it is never touched.
 *
 * The arithmetic follows PyTorch's implementation (torch/optim/sgd.py
 * and adam.py, the default for-each path on CPU, which runs the same
 * element formulas as the single-tensor path) operation for operation,
 * so the results can be compared with PyTorch to the last bits:
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
#include "kernels/cpu/parallel.h"

#define GRAIN_ELEMS (1 << 15)

/* The order of operations below is the contract, so no multiply-add may
 * be fused into an FMA (one rounding instead of two). GCC never fuses in
 * ISO C mode (-std=c11); clang would by default, unless told. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Checks that in[0..n) are all f32 or all f64 with one element count. */
static tfg_status check_state(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *in,
                              int n) {
  tfg_dtype dt = in[0].dtype;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE,
                           "%s of a %s parameter is not supported on the CPU (f32 and f64 are)",
                           what, tfg_dtype_name(dt));
  int64_t numel = tfg_shape_numel(&in[0].shape);
  for (int i = 1; i < n; i++) {
    if (in[i].dtype != dt)
      return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: input %d is %s, the parameter %s", what, i,
                             tfg_dtype_name(in[i].dtype), tfg_dtype_name(dt));
    TFG_ASSERT(tfg_shape_numel(&in[i].shape) == numel);
  }
  return TFG_OK;
}

/* The step must count from 1: Adam divides by 1 - beta^t, which is 0 at
 * t = 0, and SGD's step 1 is the one that initializes the buffer. */
static tfg_status check_step(tfg_kernel_ctx *ctx, const char *what) {
  if (ctx->step < 1)
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC, "%s at step %lld (steps count from 1)", what,
                           (long long)ctx->step);
  return TFG_OK;
}

/* ---- SGD ------------------------------------------------------------------ */

typedef struct sgd_job {
  void *p, *buf;
  const void *g;
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first; /* first: step 1, the buffer does not exist yet */
} sgd_job;

/* torch.optim.SGD, per element, T the parameter's dtype:
 *   g = grad
 *   if weight_decay != 0:  g = g + T(weight_decay) * p     grad.add(p, alpha=wd)
 *   if momentum != 0:
 *     if step 1:           buf = g                         clone (buffer was None)
 *     else:                buf = buf * T(momentum)         buf.mul_(momentum)
 *                          buf = buf + T(1 - dampening) * g     .add_(g, alpha=1-dampening)
 *     if nesterov:         g = g + T(momentum) * buf       g.add(buf, alpha=momentum)
 *     else:                g = buf
 *   p = p + T(-lr) * g                                     p.add_(g, alpha=-lr)
 * (Dampening does not apply on step 1, as in PyTorch.) */
#define DEFINE_SGD(T, SFX)                                                           \
  static void sgd_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {         \
    const sgd_job *j = arg;                                                          \
    T *p = j->p, *buf = j->buf;                                                      \
    const T *grad = j->g;                                                            \
    const T wd = (T)j->weight_decay, mu = (T)j->momentum;                            \
    const T keep = (T)(1.0 - j->dampening), neg_lr = (T)(-j->lr);                    \
    const bool decay = j->weight_decay != 0, mom = j->momentum != 0;                 \
    (void)chunk;                                                                     \
    for (int64_t i = lo; i < hi; i++) {                                              \
      T g = grad[i];                                                                 \
      if (decay) g = g + wd * p[i];                                                  \
      if (mom) {                                                                     \
        T b;                                                                         \
        if (j->first) {                                                              \
          b = g;                                                                     \
        } else {                                                                     \
          b = buf[i] * mu;                                                           \
          b = b + keep * g;                                                          \
        }                                                                            \
        buf[i] = b;                                                                  \
        g = j->nesterov ? g + mu * b : b;                                            \
      }                                                                              \
      p[i] = p[i] + neg_lr * g;                                                      \
    }                                                                                \
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
  (void)out;
  const tfg_attrs *a = &node->attrs;
  bool mom = a->opt.momentum != 0;
  TFG_ASSERT(node->ninputs >= (mom ? 3 : 2));
  tfg_status st = check_state(ctx, "sgd_update", in, mom ? 3 : 2);
  if (st == TFG_OK) st = check_step(ctx, "sgd_update");
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  sgd_job j = {.p = in[0].data, .g = in[1].data, .buf = mom ? in[2].data : NULL,
               .lr = a->opt.lr, .momentum = a->opt.momentum, .dampening = a->opt.dampening,
               .weight_decay = a->opt.weight_decay, .nesterov = a->opt.nesterov,
               .first = ctx->step == 1};
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS, in[0].dtype == TFG_DTYPE_F32 ? sgd_f32 : sgd_f64,
                   &j);
  return TFG_OK;
}

/* ---- Adam, AdamW ---------------------------------------------------------- */

typedef struct adam_job {
  void *p, *m, *v;
  const void *g;
  bool decay, decoupled;
  /* the scalars PyTorch forms in Python floats, in double */
  double weight_decay, shrink;   /* shrink = 1 - lr * weight_decay (AdamW) */
  double w1, beta2, w2;          /* w1 = 1 - beta1, w2 = 1 - beta2 */
  double bc2_sqrt, eps, neg_step; /* (1 - beta2^t)^0.5; -(lr / (1 - beta1^t)) */
} adam_job;

/* torch.optim.Adam / AdamW (amsgrad and maximize off), per element, T the
 * parameter's dtype, t = ctx->step:
 *   g = grad
 *   if weight_decay != 0:
 *     AdamW:  p = p * T(1 - lr * weight_decay)                p.mul_(...)
 *     Adam:   g = g + T(weight_decay) * p                     grad.add(p, alpha=wd)
 *   m = lerp(m, g, T(1 - beta1)):                             m.lerp_(g, 1 - beta1)
 *         w = T(1 - beta1); |w| < 0.5 ? m + w * (g - m)
 *                                     : g - (g - m) * (1 - w)
 *   v = v * T(beta2)                                          v.mul_(beta2)
 *   v = v + (T(1 - beta2) * g) * g                            .addcmul_(g, g, 1 - beta2)
 *   denom = sqrt(v) / T(bias_correction2 ** 0.5) + T(eps)     (v.sqrt() / bc2_sqrt).add_(eps)
 *   p = p + (T(-step_size) * m) / denom                       p.addcdiv_(m, denom, -step_size)
 * with bias_correction1 = 1 - beta1 ** t, bias_correction2 = 1 - beta2 ** t
 * and step_size = lr / bias_correction1 in double (Python floats). The
 * lerp is PyTorch's exp_avg update, m = beta1 m + (1 - beta1) g of the
 * documented algorithm written as PyTorch evaluates it. */
#define DEFINE_ADAM(T, SFX, SQRT)                                                    \
  static void adam_##SFX(void *arg, int64_t lo, int64_t hi, int64_t chunk) {        \
    const adam_job *j = arg;                                                         \
    T *p = j->p, *m = j->m, *v = j->v;                                               \
    const T *grad = j->g;                                                            \
    const T wd = (T)j->weight_decay, shrink = (T)j->shrink;                          \
    const T w1 = (T)j->w1, b2 = (T)j->beta2, w2 = (T)j->w2;                          \
    const T bc2s = (T)j->bc2_sqrt, eps = (T)j->eps, neg_step = (T)j->neg_step;       \
    const bool small = (w1 < 0 ? -w1 : w1) < (T)0.5;                                 \
    (void)chunk;                                                                     \
    for (int64_t i = lo; i < hi; i++) {                                              \
      T g = grad[i], pi = p[i];                                                      \
      if (j->decay) {                                                                \
        if (j->decoupled)                                                            \
          pi = pi * shrink;                                                          \
        else                                                                         \
          g = g + wd * pi;                                                           \
      }                                                                              \
      T mi = m[i];                                                                   \
      mi = small ? mi + w1 * (g - mi) : g - (g - mi) * ((T)1 - w1);                  \
      T vi = v[i] * b2;                                                              \
      vi = vi + w2 * g * g;                                                          \
      T denom = SQRT(vi) / bc2s + eps;                                               \
      p[i] = pi + neg_step * mi / denom;                                             \
      m[i] = mi;                                                                     \
      v[i] = vi;                                                                     \
    }                                                                                \
  }
DEFINE_ADAM(float, f32, sqrtf)
DEFINE_ADAM(double, f64, sqrt)

/* ADAM_UPDATE: (param, grad, m, v) -> param, m (exp_avg) and v
 * (exp_avg_sq) updated in place, torch.optim.Adam, or torch.optim.AdamW
 * when attrs.opt.decoupled, with attrs.opt.lr, beta1, beta2, eps and
 * weight_decay at step t = ctx->step (from 1; m and v start at zero).
 * All f32 or all f64, one element count. out is not touched.
 * TFG_ERR_NUMERIC for a step < 1 (the bias corrections would be 0). */
TFG_CPU_KERNEL(tfg_cpu_adam_update) {
  (void)out;
  const tfg_attrs *a = &node->attrs;
  TFG_ASSERT(node->ninputs >= 4);
  tfg_status st = check_state(ctx, "adam_update", in, 4);
  if (st == TFG_OK) st = check_step(ctx, "adam_update");
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  double t = (double)ctx->step;
  double bc1 = 1.0 - pow(a->opt.beta1, t), bc2 = 1.0 - pow(a->opt.beta2, t);
  double step_size = a->opt.lr / bc1;
  adam_job j = {
      .p = in[0].data, .g = in[1].data, .m = in[2].data, .v = in[3].data,
      .decay = a->opt.weight_decay != 0, .decoupled = a->opt.decoupled,
      .weight_decay = a->opt.weight_decay, .shrink = 1.0 - a->opt.lr * a->opt.weight_decay,
      .w1 = 1.0 - a->opt.beta1, .beta2 = a->opt.beta2, .w2 = 1.0 - a->opt.beta2,
      .bc2_sqrt = pow(bc2, 0.5), .eps = a->opt.eps, .neg_step = step_size * -1.0,
  };
  tfg_parallel_for(ctx->pool, n, GRAIN_ELEMS / 4,
                   in[0].dtype == TFG_DTYPE_F32 ? adam_f32 : adam_f64, &j);
  return TFG_OK;
}

TFG_CPU_KERNEL(tfg_cpu_allreduce_local) {
  (void)ctx;
  (void)node;
  size_t bytes = (size_t)tfg_shape_numel(&out->shape) * tfg_dtype_size(out->dtype);
  if (bytes) memcpy(out->data, in[0].data, bytes);
  return TFG_OK;
}
