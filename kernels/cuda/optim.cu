/* kernels/cuda/optim.cu: SGD_UPDATE, ADAM_UPDATE and the local ALLREDUCE
 * on a CUDA device: the GPU twins of kernels/cpu/optim.c.
 *
 * The updates write in place: in[0] is the parameter, in[2] (and in[3])
 * its optimizer state, in[1] the gradient (read only); out is an empty
 * marker and is never touched. ALLREDUCE over a group of one is a copy of
 * in[0] into out (real groups go through runtime/collective).
 *
 * Index math: every tensor has the parameter's element count and element
 * i of each is updated by one thread from element i of the others, as
 * the CPU's flat loops do (a grid-stride loop, 64-bit).
 *
 * Numerics: the CPU file follows torch.optim operation for operation in
 * the parameter's dtype (f32 math for f32, never widened) with every
 * hyperparameter expression formed in double on the host and rounded
 * once to the dtype, and no fused multiply-adds. The same scalars are
 * formed here on the host by the same expressions, and the per-element
 * formulas use common.cuh's _rn arithmetic (tfg_cuda_add/mul/div/sqrt),
 * which nvcc never contracts into an FMA and which are IEEE-rounded
 * (sqrt and division correctly rounded, as glibc's sqrtf and the CPU's
 * division are). The results should therefore equal the CPU's bit for
 * bit. */
#include "kernels/cuda/common.cuh"

#define THREADS TFG_CUDA_THREADS

/* Checks that in[0..n) are all f32 or all f64 with one element count
 * (the CPU's check_state, which asserts the counts). */
static tfg_status check_state(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *in, int n) {
  tfg_dtype dt = in[0].dtype;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s of a %s parameter is not supported on the GPU (f32 and f64 are)",
                           what, tfg_dtype_name(dt));
  int64_t numel = tfg_shape_numel(&in[0].shape);
  for (int i = 1; i < n; i++) {
    if (in[i].dtype != dt)
      return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: input %d is %s, the parameter %s", what, i,
                             tfg_dtype_name(in[i].dtype), tfg_dtype_name(dt));
    if (tfg_shape_numel(&in[i].shape) != numel)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: input %d has %lld elements, the parameter %lld", what, i,
                             (long long)tfg_shape_numel(&in[i].shape), (long long)numel);
  }
  return TFG_OK;
}

/* The step must count from 1 (the CPU's check_step). */
static tfg_status check_step(tfg_kernel_ctx *ctx, const char *what) {
  if (ctx->step < 1)
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC, "%s at step %lld (steps count from 1)", what, (long long)ctx->step);
  return TFG_OK;
}

/* ---- SGD ------------------------------------------------------------------ */

/* torch.optim.SGD per element, T the parameter's dtype (the CPU's
 * DEFINE_SGD):
 *   g = grad
 *   if decay:     g = g + wd * p
 *   if momentum:  buf = first ? g : buf * mu + keep * g
 *                 g = nesterov ? g + mu * buf : buf
 *   p = p + neg_lr * g
 * with wd, mu, keep = 1 - dampening, neg_lr = -lr rounded to T once. */
template <typename T>
static __host__ __device__ __forceinline__ void sgd_one(int64_t i, T *p, const T *grad, T *buf, T wd, T mu, T keep,
                                                        T neg_lr, bool decay, bool mom, bool first, bool nesterov) {
  T g = grad[i];
  if (decay) g = tfg_cuda_add(g, tfg_cuda_mul(wd, p[i]));
  if (mom) {
    T b;
    if (first) {
      b = g;
    } else {
      b = tfg_cuda_mul(buf[i], mu);
      b = tfg_cuda_add(b, tfg_cuda_mul(keep, g));
    }
    buf[i] = b;
    g = nesterov ? tfg_cuda_add(g, tfg_cuda_mul(mu, b)) : b;
  }
  p[i] = tfg_cuda_add(p[i], tfg_cuda_mul(neg_lr, g));
}

template <typename T>
static __global__ void sgd_kernel(T *p, const T *grad, T *buf, int64_t n, T wd, T mu, T keep, T neg_lr, bool decay,
                                  bool mom, bool first, bool nesterov) {
  TFG_CUDA_LOOP(i, n) sgd_one<T>(i, p, grad, buf, wd, mu, keep, neg_lr, decay, mom, first, nesterov);
}

/* SGD_UPDATE: (param, grad, momentum_buf) updated in place at step
 * ctx->step (from 1; step 1 sets the buffer to the gradient); the buffer
 * is neither read nor written (and may be absent) when momentum is 0. */
static tfg_status cuda_sgd_update(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)out;
  const tfg_attrs *a = &node->attrs;
  bool mom = a->opt.momentum != 0;
  if (node->ninputs < (mom ? 3 : 2))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "sgd_update: %d inputs, %d needed", node->ninputs, mom ? 3 : 2);
  tfg_status st = check_state(ctx, "sgd_update", in, mom ? 3 : 2);
  if (st == TFG_OK) st = check_step(ctx, "sgd_update");
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  unsigned blocks = tfg_cuda_blocks(cx, n, THREADS);
  bool decay = a->opt.weight_decay != 0, first = ctx->step == 1;
  double keep = 1.0 - a->opt.dampening, neg_lr = -a->opt.lr;
  void *buf = mom ? in[2].data : NULL;
  if (in[0].dtype == TFG_DTYPE_F32)
    sgd_kernel<float><<<blocks, THREADS, 0, cx->stream>>>(
        (float *)in[0].data, (const float *)in[1].data, (float *)buf, n, (float)a->opt.weight_decay,
        (float)a->opt.momentum, (float)keep, (float)neg_lr, decay, mom, first, a->opt.nesterov);
  else
    sgd_kernel<double><<<blocks, THREADS, 0, cx->stream>>>(
        (double *)in[0].data, (const double *)in[1].data, (double *)buf, n, a->opt.weight_decay, a->opt.momentum,
        keep, neg_lr, decay, mom, first, a->opt.nesterov);
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
}

/* ---- Adam, AdamW ---------------------------------------------------------- */

/* The scalars of one Adam step, rounded to T (the CPU's adam_job fields
 * after its (T) conversions). */
template <typename T>
struct adam_scalars {
  T wd, shrink, w1, b2, w2, bc2s, eps, neg_step;
  bool decay, decoupled, small;
};

/* torch.optim.Adam / AdamW per element, T the parameter's dtype (the
 * CPU's DEFINE_ADAM):
 *   if decay: AdamW p = p * shrink; Adam g = g + wd * p
 *   m = small ? m + w1 * (g - m) : g - (g - m) * (1 - w1)     (lerp)
 *   v = v * b2;  v = v + (w2 * g) * g
 *   denom = sqrt(v) / bc2s + eps
 *   p = p + (neg_step * m) / denom */
template <typename T>
static __host__ __device__ __forceinline__ void adam_one(int64_t i, T *p, const T *grad, T *m, T *v,
                                                         const adam_scalars<T> &s) {
  T g = grad[i], pi = p[i];
  if (s.decay) {
    if (s.decoupled)
      pi = tfg_cuda_mul(pi, s.shrink);
    else
      g = tfg_cuda_add(g, tfg_cuda_mul(s.wd, pi));
  }
  T mi = m[i];
  mi = s.small ? tfg_cuda_add(mi, tfg_cuda_mul(s.w1, tfg_cuda_sub(g, mi)))
               : tfg_cuda_sub(g, tfg_cuda_mul(tfg_cuda_sub(g, mi), tfg_cuda_sub((T)1, s.w1)));
  T vi = tfg_cuda_mul(v[i], s.b2);
  vi = tfg_cuda_add(vi, tfg_cuda_mul(tfg_cuda_mul(s.w2, g), g));
  T denom = tfg_cuda_add(tfg_cuda_div(tfg_cuda_sqrt(vi), s.bc2s), s.eps);
  p[i] = tfg_cuda_add(pi, tfg_cuda_div(tfg_cuda_mul(s.neg_step, mi), denom));
  m[i] = mi;
  v[i] = vi;
}

template <typename T>
static __global__ void adam_kernel(T *p, const T *grad, T *m, T *v, int64_t n, adam_scalars<T> s) {
  TFG_CUDA_LOOP(i, n) adam_one<T>(i, p, grad, m, v, s);
}

/* The scalars as the CPU forms them: every expression in double, then
 * one rounding to T. */
template <typename T>
static adam_scalars<T> adam_setup(const tfg_attrs *a, int64_t step) {
  double t = (double)step;
  double bc1 = 1.0 - pow(a->opt.beta1, t), bc2 = 1.0 - pow(a->opt.beta2, t);
  double step_size = a->opt.lr / bc1;
  adam_scalars<T> s;
  s.wd = (T)a->opt.weight_decay;
  s.shrink = (T)(1.0 - a->opt.lr * a->opt.weight_decay);
  s.w1 = (T)(1.0 - a->opt.beta1);
  s.b2 = (T)a->opt.beta2;
  s.w2 = (T)(1.0 - a->opt.beta2);
  s.bc2s = (T)pow(bc2, 0.5);
  s.eps = (T)a->opt.eps;
  s.neg_step = (T)(step_size * -1.0);
  s.decay = a->opt.weight_decay != 0;
  s.decoupled = a->opt.decoupled;
  s.small = (s.w1 < 0 ? -s.w1 : s.w1) < (T)0.5;
  return s;
}

/* ADAM_UPDATE: (param, grad, m, v) updated in place, torch.optim.Adam, or
 * AdamW when attrs.opt.decoupled, at step t = ctx->step (from 1). */
static tfg_status cuda_adam_update(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)out;
  const tfg_attrs *a = &node->attrs;
  if (node->ninputs < 4)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "adam_update: %d inputs, 4 needed", node->ninputs);
  tfg_status st = check_state(ctx, "adam_update", in, 4);
  if (st == TFG_OK) st = check_step(ctx, "adam_update");
  if (st != TFG_OK) return st;
  int64_t n = tfg_shape_numel(&in[0].shape);
  if (n == 0) return TFG_OK;
  tfg_cuda_ctx *cx = tfg_cuda_of(ctx);
  unsigned blocks = tfg_cuda_blocks(cx, n, THREADS);
  if (in[0].dtype == TFG_DTYPE_F32)
    adam_kernel<float><<<blocks, THREADS, 0, cx->stream>>>((float *)in[0].data, (const float *)in[1].data,
                                                           (float *)in[2].data, (float *)in[3].data, n,
                                                           adam_setup<float>(a, ctx->step));
  else
    adam_kernel<double><<<blocks, THREADS, 0, cx->stream>>>((double *)in[0].data, (const double *)in[1].data,
                                                            (double *)in[2].data, (double *)in[3].data, n,
                                                            adam_setup<double>(a, ctx->step));
  TFG_CUDA_LAUNCHED(ctx);
  return TFG_OK;
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
  table[TFG_OP_SGD_UPDATE] = cuda_sgd_update;
  table[TFG_OP_ADAM_UPDATE] = cuda_adam_update;
  table[TFG_OP_ALLREDUCE] = cuda_allreduce_local;
}
