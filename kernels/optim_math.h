/* kernels/optim_math.h: the optimizer updates SGD_UPDATE and ADAM_UPDATE
 * (torch.optim.SGD, Adam, AdamW) per element, and the scalars each step
 * forms from the hyperparameters, written once for the CPU kernels
 * (kernels/cpu/optim.c) and the CUDA ones (kernels/cuda/optim.cu), so
 * both update a parameter to the same bits.
 *
 *   tfg_adam_f32 s = tfg_adam_setup_f32(&node->attrs, step, applied);  // host
 *   for (int64_t i = 0; i < n; i++)                                    // or a kernel
 *     tfg_adam_step_f32(s, p, grad, m, v, i);
 *   s = tfg_adam_at_f32(s, step, applied); // the step's part, on the host or the device
 *
 * step is the training step (from 1), which the lr schedule follows;
 * applied counts the updates applied, this one included: the step less
 * the steps a grad scaler skipped (precision = f16; PyTorch's
 * optimizer.step() is not called for those, so its state's step, which
 * Adam's bias corrections and SGD's first buffer follow, does not count
 * them, while the lr scheduler does). Without a scaler applied = step.
 *
 * The arithmetic follows PyTorch's operation for operation, in the
 * parameter's dtype (f32 math for f32, never widened); every
 * hyperparameter expression PyTorch forms from Python floats is formed
 * here in double and rounded once to the dtype (the setup functions, on
 * the host); a branch PyTorch takes on a Python float (weight_decay != 0,
 * momentum != 0) is taken on the double attr. The per-element + - * /
 * and sqrt are TFG_RN_* (kernels/hostdev.h): IEEE-rounded and never
 * contracted into an FMA, on the host and on the device, so the two give
 * the same bits. Each is defined for f32 and f64 (suffixes _f32, _f64). */
#ifndef TFG_KERNELS_OPTIM_MATH_H
#define TFG_KERNELS_OPTIM_MATH_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/hostdev.h"

TFG_C_BEGIN
#include "ir/graph.h"
TFG_C_END

/* The learning-rate schedule (tfg_attrs.opt: lr_kind and its arguments;
 * ir/program.h tfg_lr_kind): the factor of the lr at optimizer step
 * `step` (from 1; s = step - 1 is LANGUAGE.md section 6's 0-based step,
 * the first optimizer step's factor being factor(0), as a LambdaLR
 * stepped after each optimizer step), in double:
 *   constant  1
 *   linear    s < warmup: (s + 1) / warmup; s >= total: min;
 *             else min + (1 - min) (total - s) / (total - warmup)
 *   cosine    the same warm-up and floor; else
 *             min + (1 - min) (1 + cos(pi (s - warmup) / (total - warmup))) / 2
 *   step      gamma ^ floor(s / every)      (torch.optim.lr_scheduler.StepLR)
 * The kinds' numbers are tfg_lr_kind's: 0 constant, 1 linear, 2 cosine, 3 step. */
TFG_HD double tfg_lr_factor(int kind, int64_t step, double warmup, double total, double min, double every,
                            double gamma) {
  double s = (double)(step - 1);
  if (kind == 0) return 1.0;
  if (kind == 3) return pow(gamma, floor(s / every));
  if (s < warmup) return (s + 1.0) / warmup;
  if (s >= total) return min;
  double span = total - warmup;
  if (kind == 1) return min + (1.0 - min) * (total - s) / span;
  return min + (1.0 - min) * (1.0 + cos(3.14159265358979323846 * (s - warmup) / span)) / 2.0;
}

/* An update's lr and its schedule, by value (a CUDA kernel forms the
 * step's lr on the device from the step in device memory). */
typedef struct tfg_lr_sched {
  double lr, warmup, total, min, every, gamma;
  int kind;
} tfg_lr_sched;

static inline tfg_lr_sched tfg_lr_sched_of(const tfg_attrs *a) {
  tfg_lr_sched l = {a->opt.lr, a->opt.warmup, a->opt.total, a->opt.min, a->opt.every, a->opt.gamma, a->opt.lr_kind};
  return l;
}

/* The lr at optimizer step `step` (from 1), in double: exactly lr for
 * the constant schedule (a factor of 1.0). */
TFG_HD double tfg_lr_at(tfg_lr_sched l, int64_t step) {
  return l.lr * tfg_lr_factor(l.kind, step, l.warmup, l.total, l.min, l.every, l.gamma);
}

/* S the suffix, T the dtype, B its width for TFG_RN_* (32, 64). */
#define TFG_OPTIM_DEFINE(S, T, B)                                                                   \
  /* One SGD step's scalars: wd, mu = momentum, keep = 1 - dampening,                            \
   * neg_lr = -lr, each rounded to T once; first: step 1 (the momentum                           \
   * buffer does not exist yet). */                                                              \
  typedef struct tfg_sgd_##S {                                                                    \
    T wd, mu, keep, neg_lr;                                                                       \
    bool decay, mom, first, nesterov;                                                             \
    tfg_lr_sched lr; /* what neg_lr is formed from at each step */                                \
  } tfg_sgd_##S;                                                                                  \
                                                                                                  \
  /* The part that changes with the step (a CUDA kernel forms it on the                          \
   * device from the step in device memory: a replayed CUDA Graph keeps                          \
   * its kernels' arguments, kernels/cuda/cuda.h). */                                            \
  TFG_HD tfg_sgd_##S tfg_sgd_at_##S(tfg_sgd_##S s, int64_t step, int64_t applied) {               \
    s.first = applied == 1;                                                                       \
    s.neg_lr = (T)(-tfg_lr_at(s.lr, step));                                                       \
    return s;                                                                                     \
  }                                                                                               \
                                                                                                  \
  static inline tfg_sgd_##S tfg_sgd_setup_##S(const tfg_attrs *a, int64_t step, int64_t applied) { \
    tfg_sgd_##S s;                                                                                \
    s.wd = (T)a->opt.weight_decay;                                                                \
    s.mu = (T)a->opt.momentum;                                                                    \
    s.keep = (T)(1.0 - a->opt.dampening);                                                         \
    s.lr = tfg_lr_sched_of(a);                                                                    \
    s.decay = a->opt.weight_decay != 0;                                                           \
    s.mom = a->opt.momentum != 0;                                                                 \
    s.nesterov = a->opt.nesterov;                                                                 \
    return tfg_sgd_at_##S(s, step, applied);                                                      \
  }                                                                                               \
                                                                                                  \
  /* torch.optim.SGD on element i (buf is not touched without momentum):                         \
   *   g = grad                                                                                   \
   *   if decay:     g = g + wd * p                       grad.add(p, alpha=wd)                   \
   *   if momentum:  buf = first ? g                      clone (buffer was None)                 \
   *                             : buf * mu + keep * g    buf.mul_(mu).add_(g, alpha=keep)        \
   *                 g = nesterov ? g + mu * buf : buf    g.add(buf, alpha=mu)                    \
   *   p = p + neg_lr * g                                 p.add_(g, alpha=-lr)                    \
   * (Dampening does not apply on step 1, as in PyTorch.) */                                      \
  TFG_HD void tfg_sgd_step_##S(tfg_sgd_##S s, T *p, const T *grad, T *buf, int64_t i) {          \
    T g = grad[i];                                                                                \
    if (s.decay) g = TFG_RN_ADD##B(g, TFG_RN_MUL##B(s.wd, p[i]));                                 \
    if (s.mom) {                                                                                  \
      T b;                                                                                        \
      if (s.first) {                                                                              \
        b = g;                                                                                    \
      } else {                                                                                    \
        b = TFG_RN_MUL##B(buf[i], s.mu);                                                          \
        b = TFG_RN_ADD##B(b, TFG_RN_MUL##B(s.keep, g));                                           \
      }                                                                                           \
      buf[i] = b;                                                                                 \
      g = s.nesterov ? TFG_RN_ADD##B(g, TFG_RN_MUL##B(s.mu, b)) : b;                              \
    }                                                                                             \
    p[i] = TFG_RN_ADD##B(p[i], TFG_RN_MUL##B(s.neg_lr, g));                                       \
  }                                                                                               \
                                                                                                  \
  /* One Adam step's scalars, rounded to T once: wd, shrink = 1 - lr * wd                        \
   * (AdamW), w1 = 1 - beta1, b2 = beta2, w2 = 1 - beta2, bc2s =                                 \
   * bias_correction2 ** 0.5, eps, neg_step = -(lr / bias_correction1),                          \
   * with bias_correction = 1 - beta ** t in double (Python floats); small:                      \
   * |w1| < 0.5, which picks the form of the lerp. */                                            \
  typedef struct tfg_adam_##S {                                                                   \
    T wd, shrink, w1, b2, w2, bc2s, eps, neg_step;                                                \
    bool decay, decoupled, small;                                                                 \
    double beta1, beta2, wd_d; /* what bc2s, neg_step and shrink are formed from at each step */  \
    tfg_lr_sched lr;                                                                              \
  } tfg_adam_##S;                                                                                 \
                                                                                                  \
  /* The scalars that change with the step, bc2s and neg_step (a CUDA                            \
   * kernel forms them on the device from the step in device memory, as                         \
   * PyTorch's capturable Adam does: a replayed CUDA Graph keeps its                             \
   * kernels' arguments; there pow is CUDA's, within 2 ulp of glibc's). */                       \
  TFG_HD tfg_adam_##S tfg_adam_at_##S(tfg_adam_##S s, int64_t step, int64_t applied) {           \
    double t = (double)applied, lr = tfg_lr_at(s.lr, step);                                       \
    double bc1 = 1.0 - pow(s.beta1, t), bc2 = 1.0 - pow(s.beta2, t);                              \
    double step_size = lr / bc1;                                                                  \
    s.bc2s = (T)pow(bc2, 0.5);                                                                    \
    s.neg_step = (T)(step_size * -1.0);                                                           \
    s.shrink = (T)(1.0 - lr * s.wd_d);                                                            \
    return s;                                                                                     \
  }                                                                                               \
                                                                                                  \
  static inline tfg_adam_##S tfg_adam_setup_##S(const tfg_attrs *a, int64_t step, int64_t applied) { \
    tfg_adam_##S s;                                                                               \
    s.wd = (T)a->opt.weight_decay;                                                                \
    s.wd_d = a->opt.weight_decay;                                                                 \
    s.w1 = (T)(1.0 - a->opt.beta1);                                                               \
    s.b2 = (T)a->opt.beta2;                                                                       \
    s.w2 = (T)(1.0 - a->opt.beta2);                                                               \
    s.eps = (T)a->opt.eps;                                                                        \
    s.decay = a->opt.weight_decay != 0;                                                           \
    s.decoupled = a->opt.decoupled;                                                               \
    s.small = (s.w1 < 0 ? -s.w1 : s.w1) < (T)0.5;                                                 \
    s.beta1 = a->opt.beta1;                                                                       \
    s.beta2 = a->opt.beta2;                                                                       \
    s.lr = tfg_lr_sched_of(a);                                                                    \
    return tfg_adam_at_##S(s, step, applied);                                                     \
  }                                                                                               \
                                                                                                  \
  /* torch.optim.Adam / AdamW (amsgrad and maximize off) on element i:                           \
   *   if decay:  AdamW p = p * shrink                    p.mul_(1 - lr * wd)                     \
   *              Adam  g = g + wd * p                    grad.add(p, alpha=wd)                   \
   *   m = small ? m + w1 * (g - m)                       m.lerp_(g, 1 - beta1)                   \
   *             : g - (g - m) * (1 - w1)                                                         \
   *   v = v * b2;  v = v + (w2 * g) * g                  v.mul_(b2).addcmul_(g, g, 1 - b2)       \
   *   denom = sqrt(v) / bc2s + eps                       (v.sqrt() / bc2s).add_(eps)             \
   *   p = p + (neg_step * m) / denom                     p.addcdiv_(m, denom, -step_size)        \
   * The lerp is PyTorch's exp_avg update, m = beta1 m + (1 - beta1) g                           \
   * written as PyTorch evaluates it. */                                                          \
  TFG_HD void tfg_adam_step_##S(tfg_adam_##S s, T *p, const T *grad, T *m, T *v, int64_t i) {    \
    T g = grad[i], pi = p[i];                                                                     \
    if (s.decay) {                                                                                \
      if (s.decoupled)                                                                            \
        pi = TFG_RN_MUL##B(pi, s.shrink);                                                         \
      else                                                                                        \
        g = TFG_RN_ADD##B(g, TFG_RN_MUL##B(s.wd, pi));                                            \
    }                                                                                             \
    T mi = m[i];                                                                                  \
    mi = s.small ? TFG_RN_ADD##B(mi, TFG_RN_MUL##B(s.w1, TFG_RN_SUB##B(g, mi)))                   \
                 : TFG_RN_SUB##B(g, TFG_RN_MUL##B(TFG_RN_SUB##B(g, mi), TFG_RN_SUB##B((T)1, s.w1))); \
    T vi = TFG_RN_MUL##B(v[i], s.b2);                                                             \
    vi = TFG_RN_ADD##B(vi, TFG_RN_MUL##B(TFG_RN_MUL##B(s.w2, g), g));                             \
    T denom = TFG_RN_ADD##B(TFG_RN_DIV##B(TFG_RN_SQRT##B(vi), s.bc2s), s.eps);                    \
    p[i] = TFG_RN_ADD##B(pi, TFG_RN_DIV##B(TFG_RN_MUL##B(s.neg_step, mi), denom));                \
    m[i] = mi;                                                                                    \
    v[i] = vi;                                                                                    \
  }

TFG_OPTIM_DEFINE(f32, float, 32)
TFG_OPTIM_DEFINE(f64, double, 64)

#undef TFG_OPTIM_DEFINE

/* ---- the grad scaler (precision = f16) ------------------------------------- */

/* torch.cuda.amp.GradScaler's defaults: the first scale, and how it moves. */
#define TFG_AMP_INIT_SCALE 65536.0
#define TFG_AMP_GROWTH 2.0f
#define TFG_AMP_BACKOFF 0.5f
#define TFG_AMP_INTERVAL 2000.0f

/* GradScaler.update() after a step (PyTorch's _amp_update_scale_): a step
 * whose gradients were not all finite halves the scale, restarts the
 * count of good steps and counts one more skipped step; the
 * TFG_AMP_INTERVAL-th good step in a row doubles the scale (unless that
 * overflows) and restarts the count. The counts are f32, exact to 2^24. */
TFG_HD void tfg_amp_update(float *scale, float *tracker, float *skipped, bool finite) {
  if (!finite) {
    *scale = *scale * TFG_AMP_BACKOFF;
    *tracker = 0.0f;
    *skipped = *skipped + 1.0f;
    return;
  }
  float good = *tracker + 1.0f;
  if (good == TFG_AMP_INTERVAL) {
    float grown = *scale * TFG_AMP_GROWTH;
    if (isfinite(grown)) *scale = grown;
    *tracker = 0.0f;
  } else {
    *tracker = good;
  }
}

#endif
