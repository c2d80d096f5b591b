/* tests/unit/test_kernels_grad.c: the CPU gradient kernels
 * (kernels/cpu/grad.c) and optimizer updates (kernels/cpu/optim.c).
 *
 * Gradients. Each gradient kernel is checked against central finite
 * differences, in f64, of the forward kernel it differentiates: with a
 * random weighting dy of the forward output, the scalar
 *     L(x) = sum(dy * f(x))
 * has dL/dx = the gradient kernel's output for that dy, and
 *     dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / (2h),  h = 1e-6 max(1, |x_i|).
 * Error of that estimate: truncation h^2 |L'''| / 6 ~ 1e-12, plus the
 * rounding of the two L's, a few hundred u * S with u = 2^-53 and S =
 * sum |dy * f(x)|, divided by 2h: ~1e-8 * S. The check allows
 *     1e-7 (1 + S) + 1e-6 |fd|,
 * ten times that, far below what any wrong formula gives (O(1) off).
 * Nonsmooth points are kept away from: relu inputs are at least 0.05
 * from 0 and max_pool inputs are distinct by at least 1e-3, both far
 * more than h, so the perturbations never cross a kink.
 *
 * The same cases then run in f32 on the same values (every random input
 * is rounded to f32 first, so both dtypes see identical inputs), and the
 * f32 result must agree with the f64 one within a bound derived per
 * case, and on a thread pool, where the result must be the same bits as
 * without one. The conv gradients are also compared with a direct
 * long-double evaluation of their defining sums on larger shapes
 * (several image groups, pool splits), within Higham's dot-product bound.
 *
 * Optimizers: three steps of torch.optim.SGD, Adam and AdamW on three
 * elements, against values computed outside (Python floats, which are
 * IEEE doubles, following the exact order of operations of optim.c;
 * for f32, the same with every intermediate rounded to f32, which for
 * + - * / sqrt equals f32 arithmetic). The kernels evaluate in the same
 * order, so the results should be the same bits; the check allows one
 * ulp. Tolerances are in units of u, the unit roundoff: 2^-24 for f32,
 * 2^-53 for f64. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "tests/unit/tensors.h"
#include "tests/unit/unit.h"

#define U32 0x1p-24
#define U64 0x1p-53

/* ---- helpers --------------------------------------------------------- */

/* Uniform in [lo, hi) from stream seed, rounded to f32 (whatever the
 * tensor's dtype) so that f32 and f64 runs see the same inputs. */
static void fill(tfg_tensor *t, uint64_t seed, double lo, double hi) {
  for (int64_t i = 0; i < numel(t); i++)
    set(t, i, (float)(lo + (hi - lo) * tfg_rng_uniform(seed, (uint64_t)i)));
}

/* Distinct values in [-1, 1), 2/n apart, in a scrambled order (37 is
 * prime to every n used here): no ties for max_pool to break, and no
 * two values within a finite-difference step of each other. */
static void fill_distinct(tfg_tensor *t) {
  int64_t n = numel(t);
  ck_assert(n % 37 != 0);
  for (int64_t i = 0; i < n; i++) set(t, i, (float)((double)(i * 37 % n) * 2.0 / (double)n - 1));
}

/* A copy of t in dtype dt (values converted). */
static tfg_tensor tconv(const tfg_tensor *t, tfg_dtype dt) {
  tfg_tensor r = tnew(dt, t->shape);
  for (int64_t i = 0; i < numel(t); i++) set(&r, i, get(t, i));
  return r;
}

static tfg_node mknode(tfg_op_id op, const tfg_shape *s, tfg_dtype dt, int ninputs) {
  tfg_node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.dtype = dt;
  n.shape = *s;
  n.ninputs = ninputs;
  return n;
}

static char last_err[512];

/* Runs kernel fn with a fresh context at training step `step`; the error
 * message, if any, is left in last_err. */
static tfg_status run_step(tfg_kernel_fn fn, const tfg_node *n, const tfg_tensor *in,
                           tfg_tensor *out, tfg_pool *pool, int64_t step) {
  tfg_kernel_ctx ctx = {.pool = pool, .training = true, .step = step};
  tfg_status st = fn(&ctx, n, in, out);
  snprintf(last_err, sizeof last_err, "%s", ctx.err.data ? ctx.err.data : "");
  tfg_strbuf_free(&ctx.err);
  return st;
}

static tfg_status run(tfg_kernel_fn fn, const tfg_node *n, const tfg_tensor *in, tfg_tensor *out,
                      tfg_pool *pool) {
  return run_step(fn, n, in, out, pool, 1);
}

static void ck_ok(tfg_status st) {
  ck_assert_msg(st == TFG_OK, "kernel failed (%s): %s", tfg_status_str(st), last_err);
}

/* Asserts got equals want exactly (the values are representable). */
static void ck_exact(const tfg_tensor *got, const double *want, const char *what) {
  for (int64_t i = 0; i < numel(got); i++)
    ck_assert_msg(get(got, i) == want[i], "%s [%lld]: got %.17g, want %.17g", what, (long long)i,
                  get(got, i), want[i]);
}

static void ck_same_bits(const tfg_tensor *a, const tfg_tensor *b, const char *what) {
  ck_assert_msg(memcmp(a->data, b->data, (size_t)numel(a) * tfg_dtype_size(a->dtype)) == 0,
                "%s: two results that must be the same bits differ", what);
}

/* ---- finite-difference harness ---------------------------------------- */

enum { MAXIN = 4, DY = -1 };

/* One gradient check. The forward kernel fwd(fnode, fin) has output
 * shape fshape; the gradient kernel grad(gnode, gin) returns
 * d sum(dy * fwd) / d fin[wrt], where gin[k] is fin[gsrc[k]] or, for
 * gsrc[k] == DY, the weighting dy. tol32 is the absolute f32-vs-f64
 * allowance on top of the final rounding (2u |g|), derived per case. */
typedef struct gcase {
  const char *what;
  tfg_kernel_fn fwd;
  tfg_node fnode;
  tfg_tensor fin[MAXIN]; /* f64 (the float ones) */
  int nfin, wrt;
  tfg_shape fshape;
  tfg_kernel_fn grad;
  tfg_node gnode;
  int ngin, gsrc[MAXIN];
  double tol32;
  /* when set: f32's further error at element i, per unit of |dy|, from x */
  double (*bound32)(double x);
} gcase;

/* sum(dy * fwd(fin)) in long double; *scale gets sum |dy * fwd(fin)|. */
static double loss(gcase *c, const tfg_tensor *dy, double *scale) {
  tfg_tensor y = tnew(TFG_DTYPE_F64, c->fshape);
  ck_ok(run(c->fwd, &c->fnode, c->fin, &y, NULL));
  long double s = 0, a = 0;
  for (int64_t i = 0; i < numel(&y); i++) {
    long double t = (long double)get(dy, i) * get(&y, i);
    s += t;
    a += fabsl(t);
  }
  free(y.data);
  if (scale) *scale = (double)a;
  return (double)s;
}

/* The gradient kernel on c's inputs converted to dt (dy included). */
static tfg_tensor run_grad(gcase *c, const tfg_tensor *dy, tfg_dtype dt, tfg_pool *pool) {
  tfg_tensor gin[MAXIN], conv[MAXIN];
  int nconv = 0;
  for (int k = 0; k < c->ngin; k++) {
    const tfg_tensor *src = c->gsrc[k] == DY ? dy : &c->fin[c->gsrc[k]];
    if (src->dtype == TFG_DTYPE_F64 && dt != TFG_DTYPE_F64) {
      conv[nconv] = tconv(src, dt);
      gin[k] = conv[nconv++];
    } else {
      gin[k] = *src;
    }
  }
  tfg_tensor g = tnew(dt, c->fin[c->wrt].shape);
  c->gnode.dtype = dt;
  ck_ok(run(c->grad, &c->gnode, gin, &g, pool));
  free_all(conv, nconv);
  return g;
}

static void check_case(gcase *c, uint64_t seed, tfg_pool *pool) {
  c->fnode.shape = c->fshape;
  c->fnode.dtype = TFG_DTYPE_F64;
  c->fnode.ninputs = c->nfin;
  c->gnode.shape = c->fin[c->wrt].shape;
  c->gnode.ninputs = c->ngin;
  tfg_tensor dy = tnew(TFG_DTYPE_F64, c->fshape);
  fill(&dy, seed, -1, 1);

  tfg_tensor g = run_grad(c, &dy, TFG_DTYPE_F64, NULL);
  tfg_tensor gp = run_grad(c, &dy, TFG_DTYPE_F64, pool);
  ck_same_bits(&g, &gp, c->what);

  /* central differences of L over every element of fin[wrt] */
  double scale;
  loss(c, &dy, &scale);
  tfg_tensor *x = &c->fin[c->wrt];
  for (int64_t i = 0; i < numel(x); i++) {
    double v = get(x, i), h = 1e-6 * fmax(1.0, fabs(v));
    double xp = v + h, xm = v - h;
    set(x, i, xp);
    double lp = loss(c, &dy, NULL);
    set(x, i, xm);
    double lm = loss(c, &dy, NULL);
    set(x, i, v);
    double fd = (lp - lm) / (xp - xm), got = get(&g, i);
    double tol = 1e-7 * (1 + scale) + 1e-6 * fabs(fd);
    ck_assert_msg(fabs(got - fd) <= tol,
                  "%s: d/dx[%lld] = %.17g, finite differences %.17g (tol %.3g)", c->what,
                  (long long)i, got, fd, tol);
  }

  /* f32 on the same values */
  tfg_tensor g32 = run_grad(c, &dy, TFG_DTYPE_F32, NULL);
  tfg_tensor g32p = run_grad(c, &dy, TFG_DTYPE_F32, pool);
  ck_same_bits(&g32, &g32p, c->what);
  for (int64_t i = 0; i < numel(&g); i++) {
    double want = get(&g, i), got = get(&g32, i);
    double tol = 2 * U32 * fabs(want) + c->tol32;
    if (c->bound32) tol += fabs(get(&dy, i)) * c->bound32(get(&c->fin[c->wrt], i));
    ck_assert_msg(fabs(got - want) <= tol, "%s f32 [%lld]: got %.9g, f64 gave %.17g (tol %.3g)",
                  c->what, (long long)i, got, want, tol);
  }
  free(g.data);
  free(gp.data);
  free(g32.data);
  free(g32p.data);
  free(dy.data);
}

static void free_case(gcase *c) { free_all(c->fin, c->nfin); }

/* ---- relu_grad, gelu_grad ---------------------------------------------- */

static gcase unary_case(tfg_op_id fwd_op, tfg_op_id grad_op, tfg_shape s, const char *what) {
  gcase c = {.what = what, .fwd = tfg_cpu_unary, .nfin = 1, .wrt = 0, .fshape = s, .ngin = 2,
             .gsrc = {0, DY}};
  c.fnode = mknode(fwd_op, &s, TFG_DTYPE_F64, 1);
  c.gnode = mknode(grad_op, &s, TFG_DTYPE_F64, 2);
  c.grad = grad_op == TFG_OP_RELU_GRAD ? tfg_cpu_relu_grad : tfg_cpu_gelu_grad;
  c.fin[0] = tnew(TFG_DTYPE_F64, s);
  return c;
}

/* The elementwise gradients' cases: x in [lo, hi) from stream xseed,
 * the weighting dy from stream dyseed. relu_grad selects dy or 0, so
 * f32 and f64 agree exactly (tol32 0); its x is kept at |x| >= 0.05,
 * away from the kink. gelu_grad over [-8, 8], the tails included; its
 * f32 kernel takes erfc and exp in float lanes (kernels/cpu/vmath.c),
 * each within 3 ulp (6u) of its term, Phi(x) and x phi(x), which may
 * cancel (g = Phi + x phi, the two of opposite signs for x < 0), so the
 * bound is on the terms (gelu_bound32) on top of the final rounding. */
static double gelu_bound32(double x) {
  double phi = exp(-0.5 * x * x) / sqrt(2 * M_PI), cdf = 0.5 * erfc(-x / sqrt(2));
  return 6 * U32 * (cdf + fabs(x) * phi);
}

static const struct unary_fd {
  const char *what;
  tfg_op_id fwd_op, grad_op;
  tfg_shape s;
  uint64_t xseed;
  double lo, hi;
  bool off_kink;
  uint64_t dyseed;
} UNARY_FD[] = {
    {"relu_grad", TFG_OP_RELU, TFG_OP_RELU_GRAD, {3, {3, 5, 7}}, 1, -1, 1, true, 2},
    {"gelu_grad", TFG_OP_GELU, TFG_OP_GELU_GRAD, {2, {4, 33}}, 5, -8, 8, false, 6},
};

START_TEST(unary_grad_fd) {
  const struct unary_fd *u = &UNARY_FD[_i];
  gcase c = unary_case(u->fwd_op, u->grad_op, u->s, u->what);
  if (u->grad_op == TFG_OP_GELU_GRAD) c.bound32 = gelu_bound32;
  fill(&c.fin[0], u->xseed, u->lo, u->hi);
  for (int64_t i = 0; u->off_kink && i < numel(&c.fin[0]); i++) {
    double v = get(&c.fin[0], i);
    if (fabs(v) < 0.05) set(&c.fin[0], i, v < 0 ? -0.05 - fabs(v) : 0.05 + v);
  }
  check_case(&c, u->dyseed, test_pool);
  free_case(&c);
}
END_TEST

/* Exact values: dy passes where x > 0 only (x = 0 and NaN give 0, the
 * op's contract "dy where x > 0"); big enough to split over the pool. */
START_TEST(relu_grad_exact) {
  tfg_dtype dt = FLOATS[_i];
  int64_t n = 100003;
  tfg_tensor in[2] = {tnew(dt, shp(1, (int)n)), tnew(dt, shp(1, (int)n))};
  fill(&in[0], 3, -1, 1);
  fill(&in[1], 4, -1, 1);
  set(&in[0], 0, 0.0);
  set(&in[0], 1, NAN);
  set(&in[0], 2, -0.0);
  tfg_tensor out = tnew(dt, in[0].shape);
  tfg_node nd = mknode(TFG_OP_RELU_GRAD, &out.shape, dt, 2);
  ck_ok(run(tfg_cpu_relu_grad, &nd, in, &out, test_pool));
  for (int64_t i = 0; i < n; i++) {
    double want = get(&in[0], i) > 0 ? get(&in[1], i) : 0;
    ck_assert_msg(get(&out, i) == want, "relu_grad [%lld]", (long long)i);
  }
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* Known values: gelu'(0) = 1/2, gelu'(x) -> 1 for large x and -> 0 for
 * very negative x (without NaN from the underflowing tail). */
START_TEST(gelu_grad_values) {
  tfg_tensor in[2] = {tnew(TFG_DTYPE_F64, shp(1, 5)), tnew(TFG_DTYPE_F64, shp(1, 5))};
  set_all(&in[0], (double[]){0, 40, -40, 1, -1});
  set_all(&in[1], (double[]){1, 1, 1, 2, 1});
  tfg_tensor out = tnew(TFG_DTYPE_F64, in[0].shape);
  tfg_node nd = mknode(TFG_OP_GELU_GRAD, &out.shape, TFG_DTYPE_F64, 2);
  ck_ok(run(tfg_cpu_gelu_grad, &nd, in, &out, NULL));
  /* gelu'(x) = Phi(x) + x phi(x), Phi(1) = 0.8413447460685429, phi(1) =
   * phi(-1) = 0.24197072451914337: gelu'(1) = 1.0833154705876864 (dy = 2
   * doubles it), gelu'(-1) = (1 - Phi(1)) - phi(1) = -0.08331547058768629 */
  double want[5] = {0.5, 1, 0, 2 * 1.0833154705876864, -0.08331547058768629};
  for (int i = 0; i < 5; i++)
    ck_assert_msg(fabs(get(&out, i) - want[i]) <= 1e-15, "gelu_grad(%g) = %.17g, want %.17g",
                  get(&in[0], i), get(&out, i), want[i]);
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* ---- cross_entropy_grad ------------------------------------------------ */

/* f32 vs f64: p = exp(x - m) / sum carries the f32 rounding of x - m
 * (|x - m| <= 6 here: 6u relative after exp) and expf's own ~2u, in
 * numerator and denominator: ~16u relative on p <= 1, times |dy| / N. */
static const struct ce_fd {
  int n, c;
  tfg_dtype lab_dt;
  int labels[5];
  uint64_t seed;
} CE_FD[] = {
    {5, 7, TFG_DTYPE_I32, {3, 0, 3, 6, 1}, 11}, /* repeated labels, first and last class */
    {4, 3, TFG_DTYPE_I64, {2, 2, 0, 1}, 13},
    {1, 1, TFG_DTYPE_I32, {0}, 15}, /* one class: gradient 0 */
};

START_TEST(cross_entropy_grad_fd) {
  const struct ce_fd *k = &CE_FD[_i];
  int n = k->n, c = k->c;
  uint64_t seed = k->seed;
  gcase g = {.what = "cross_entropy_grad", .fwd = tfg_cpu_cross_entropy, .nfin = 2, .wrt = 0,
             .fshape = shp(0), .grad = tfg_cpu_cross_entropy_grad, .ngin = 3,
             .gsrc = {0, 1, DY}};
  g.fnode = mknode(TFG_OP_CROSS_ENTROPY, &g.fshape, TFG_DTYPE_F64, 2);
  g.fin[0] = tnew(TFG_DTYPE_F64, shp(2, n, c));
  g.fin[1] = tnew(k->lab_dt, shp(1, n));
  g.gnode = mknode(TFG_OP_CROSS_ENTROPY_GRAD, &g.fin[0].shape, TFG_DTYPE_F64, 3);
  fill(&g.fin[0], seed, -3, 3);
  for (int i = 0; i < n; i++) set(&g.fin[1], i, k->labels[i]);
  g.tol32 = 16 * U32 / n; /* |dy| <= 1 */
  check_case(&g, seed + 1, test_pool);
  free_case(&g);
}
END_TEST

/* Logits of +-1000 (exp overflows in a naive softmax): the shifted form
 * gives softmax exactly [1, 0, 0] or [0.5, 0.5, 0], so the gradient is
 * exact: (p - onehot) * dy / N with dy = 3, N = 2. Labels out of range
 * fail with TFG_ERR_NUMERIC and leave the output alone. */
START_TEST(cross_entropy_grad_stable_and_bad_label) {
  tfg_dtype dt = FLOATS[_i];
  tfg_tensor in[3] = {tnew(dt, shp(2, 2, 3)), tnew(TFG_DTYPE_I64, shp(1, 2)), tnew(dt, shp(0))};
  set_all(&in[0], (double[]){1000, -1000, 0, 1000, 1000, -1000});
  set_all(&in[1], (double[]){1, 0});
  set(&in[2], 0, 3);
  tfg_tensor out = tnew(dt, in[0].shape);
  tfg_node nd = mknode(TFG_OP_CROSS_ENTROPY_GRAD, &out.shape, dt, 3);
  ck_ok(run(tfg_cpu_cross_entropy_grad, &nd, in, &out, NULL));
  ck_exact(&out, (double[]){1.5, -1.5, 0, 0.75 - 1.5, 0.75, 0}, "stable cross_entropy_grad");
  for (int bad = 0; bad < 2; bad++) {
    set(&in[1], 1, bad ? 3 : -1);
    for (int i = 0; i < 6; i++) set(&out, i, 42);
    ck_assert_int_eq(run(tfg_cpu_cross_entropy_grad, &nd, in, &out, NULL), TFG_ERR_NUMERIC);
    ck_assert_ptr_nonnull(strstr(last_err, bad ? "label 3 in row 1" : "label -1 in row 1"));
    ck_exact(&out, (double[]){42, 42, 42, 42, 42, 42}, "untouched after a bad label");
  }
  free_all(in, 3);
  free(out.data);
}
END_TEST

/* ---- layer_norm_grad --------------------------------------------------- */

/* The kernel works in double for both dtypes from identical inputs, so
 * f32 is its final rounding off f64; tol32 covers f64's own roundings
 * (~100 u64 on values of order 1). */
static const struct ln_fd {
  tfg_shape s;
  double eps;
  uint64_t seed;
} LN_FD[] = {
    {{3, {2, 3, 6}}, 1e-5, 21},
    {{2, {4, 9}}, 0.1, 25}, /* a large eps: its term in rstd matters */
    {{2, {3, 1}}, 1e-5, 29}, /* D = 1: the output is beta, the gradient 0 */
};

START_TEST(layer_norm_grad_fd) {
  tfg_shape s = LN_FD[_i].s;
  double eps = LN_FD[_i].eps;
  uint64_t seed = LN_FD[_i].seed;
  int64_t d = s.dim[s.rank - 1];
  gcase g = {.what = "layer_norm_grad", .fwd = tfg_cpu_layer_norm, .nfin = 3, .wrt = 0,
             .fshape = s, .grad = tfg_cpu_layer_norm_grad, .ngin = 3, .gsrc = {0, 1, DY},
             .tol32 = 1e-12};
  g.fnode = mknode(TFG_OP_LAYER_NORM, &s, TFG_DTYPE_F64, 3);
  g.fnode.attrs.value = eps;
  g.gnode = mknode(TFG_OP_LAYER_NORM_GRAD, &s, TFG_DTYPE_F64, 3);
  g.gnode.attrs.value = eps;
  g.fin[0] = tnew(TFG_DTYPE_F64, s);
  g.fin[1] = tnew(TFG_DTYPE_F64, shp(1, (int)d));
  g.fin[2] = tnew(TFG_DTYPE_F64, shp(1, (int)d));
  fill(&g.fin[0], seed, -2, 3);
  fill(&g.fin[1], seed + 1, 0.5, 1.5);
  fill(&g.fin[2], seed + 2, -1, 1);
  check_case(&g, seed + 3, test_pool);
  free_case(&g);
}
END_TEST

/* ---- attention_grad ----------------------------------------------------- */

/* attention's gradient for each of q, k and v, against finite differences
 * of the fused forward kernel: across the kernel's blocks of 32 query
 * rows (Tq 40), causal with Tq above, equal to and below Tk (keys no
 * query sees get a zero gradient), a scale other than 1 / sqrt(hd). In
 * f32 the kernel rounds each score (a dot product of hd terms), each
 * exp and probability, each dP (hdv terms) and each product's sum over
 * at most Tk 40 keys or Tq 40 rows, every term below 8 in size here
 * (inputs in [-1, 1), scores below hd): about (hd + hdv + 2 Tk) u32 of
 * a sum of at most 40 terms of at most 8: 1e-4 / 4 = 2.5e-5 covers it
 * with room, far below what a wrong formula gives. */
static const struct att_fd {
  int rank;
  int64_t lead[2], tq, tk, hd, hdv;
  bool causal;
  double scale; /* 0: 1 / sqrt(hd) */
  uint64_t seed;
} ATT_FD[] = {
    {4, {2, 3}, 5, 7, 4, 6, false, 0, 201},
    {3, {2}, 40, 40, 3, 5, true, 0, 211},
    {3, {1}, 37, 5, 4, 2, true, 0.7, 221}, /* Tq > Tk: the late rows see every key */
    {3, {2}, 5, 9, 2, 3, true, 0, 231},    /* Tq < Tk: keys 5..8 seen by none */
    {2, {0}, 33, 34, 5, 4, false, 1.3, 241},
};

START_TEST(attention_grad_fd) {
  const struct att_fd *a = &ATT_FD[_i / 3];
  int wrt = _i % 3;
  tfg_shape sq = {.rank = a->rank}, sk = sq, sv = sq;
  for (int d = 0; d < a->rank - 2; d++) sq.dim[d] = sk.dim[d] = sv.dim[d] = a->lead[d];
  int r = a->rank;
  sq.dim[r - 2] = a->tq, sq.dim[r - 1] = a->hd;
  sk.dim[r - 2] = a->tk, sk.dim[r - 1] = a->hd;
  sv.dim[r - 2] = a->tk, sv.dim[r - 1] = a->hdv;
  tfg_shape so = sq;
  so.dim[r - 1] = a->hdv;
  static const char *what[3] = {"attention_grad q", "attention_grad k", "attention_grad v"};
  gcase g = {.what = what[wrt], .fwd = tfg_cpu_attention, .nfin = 3, .wrt = wrt, .fshape = so,
             .grad = tfg_cpu_attention_grad, .ngin = 4, .gsrc = {0, 1, 2, DY}, .tol32 = 2.5e-5};
  double scale = a->scale > 0 ? a->scale : 1.0 / sqrt((double)a->hd);
  g.fnode = mknode(TFG_OP_ATTENTION, &so, TFG_DTYPE_F64, 3);
  g.gnode = mknode(TFG_OP_ATTENTION_GRAD, &so, TFG_DTYPE_F64, 4);
  g.fnode.attrs.causal = g.gnode.attrs.causal = a->causal;
  g.fnode.attrs.value = g.gnode.attrs.value = scale;
  g.gnode.attrs.axis = wrt;
  g.fin[0] = tnew(TFG_DTYPE_F64, sq);
  g.fin[1] = tnew(TFG_DTYPE_F64, sk);
  g.fin[2] = tnew(TFG_DTYPE_F64, sv);
  for (int k = 0; k < 3; k++) fill(&g.fin[k], a->seed + (uint64_t)k, -1, 1);
  check_case(&g, a->seed + 3, test_pool);
  free_case(&g);
}
END_TEST

/* The packed gradient (attrs.axis 3: dq, dk and dv side by side in each
 * row, what autodiff makes for self-attention) holds the three ops' own
 * results, bit for bit (the same products of the same values), in f32
 * and f64, on the pool; causal or not, blocks cut short, 4-D heads. */
START_TEST(attention_grad_packed_same_bits) {
  static const struct {
    int rank;
    int64_t lead[2], t, hd, hdv;
    bool causal;
  } cases[] = {{3, {2}, 40, 3, 5, true}, {4, {2, 3}, 7, 4, 6, false}, {2, {0}, 33, 5, 4, false},
               {4, {1, 2}, 65, 8, 8, true}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int f64 = 0; f64 < 2; f64++) {
      tfg_dtype dt = f64 ? TFG_DTYPE_F64 : TFG_DTYPE_F32;
      int r = cases[c].rank;
      tfg_shape sq = {.rank = r}, sv, sy, sp;
      for (int d = 0; d < r - 2; d++) sq.dim[d] = cases[c].lead[d];
      sq.dim[r - 2] = cases[c].t, sq.dim[r - 1] = cases[c].hd;
      sv = sy = sp = sq;
      sv.dim[r - 1] = sy.dim[r - 1] = cases[c].hdv;
      sp.dim[r - 1] = 2 * cases[c].hd + cases[c].hdv;
      tfg_tensor in[4] = {tnew(dt, sq), tnew(dt, sq), tnew(dt, sv), tnew(dt, sy)};
      for (int k = 0; k < 4; k++) fill(&in[k], 400 + 10 * (uint64_t)c + (uint64_t)k, -1, 1);
      tfg_node n = mknode(TFG_OP_ATTENTION_GRAD, &sp, dt, 4);
      n.attrs.causal = cases[c].causal;
      n.attrs.value = 0.45;
      n.attrs.axis = TFG_ATTENTION_GRAD_PACKED;
      tfg_tensor packed = tnew(dt, sp);
      ck_ok(run(tfg_cpu_attention_grad, &n, in, &packed, test_pool));
      int64_t rows = numel(&packed) / sp.dim[r - 1], w = sp.dim[r - 1];
      for (int which = 0; which < 3; which++) {
        tfg_tensor one = tnew(dt, in[which].shape);
        n.attrs.axis = which;
        n.shape = one.shape;
        ck_ok(run(tfg_cpu_attention_grad, &n, in, &one, test_pool));
        int64_t width = one.shape.dim[r - 1], col = which == 0 ? 0 : which == 1 ? cases[c].hd : 2 * cases[c].hd;
        for (int64_t i = 0; i < rows; i++)
          for (int64_t e = 0; e < width; e++)
            if (memcmp((char *)one.data + (size_t)(i * width + e) * tfg_dtype_size(dt),
                       (char *)packed.data + (size_t)(i * w + col + e) * tfg_dtype_size(dt), tfg_dtype_size(dt)))
              ck_abort_msg("case %zu %s input %d row %lld [%lld]: %.17g alone, %.17g packed", c, tfg_dtype_name(dt),
                           which, (long long)i, (long long)e, get(&one, i * width + e), get(&packed, i * w + col + e));
        free(one.data);
      }
      free(packed.data);
      free_all(in, 4);
    }
}
END_TEST

/* Keys no query may see (causal, Tq < Tk) get exactly zero; with no
 * queries (Tq = 0) every key's gradient is zero, and with no keys
 * (Tk = 0) q's is. */
START_TEST(attention_grad_edges) {
  for (int c = 0; c < 3; c++) {
    int64_t tq = c == 1 ? 0 : 3, tk = c == 2 ? 0 : 6;
    tfg_tensor in[4] = {tnew(TFG_DTYPE_F32, shp(3, 2, (int)tq, 4)), tnew(TFG_DTYPE_F32, shp(3, 2, (int)tk, 4)),
                        tnew(TFG_DTYPE_F32, shp(3, 2, (int)tk, 5)), tnew(TFG_DTYPE_F32, shp(3, 2, (int)tq, 5))};
    for (int k = 0; k < 4; k++) fill(&in[k], 300 + (uint64_t)k, -1, 1);
    for (int wrt = 0; wrt < 3; wrt++) {
      tfg_tensor out = tnew(TFG_DTYPE_F32, in[wrt].shape);
      for (int64_t i = 0; i < numel(&out); i++) set(&out, i, 7); /* every element must be written */
      tfg_node n = mknode(TFG_OP_ATTENTION_GRAD, &out.shape, TFG_DTYPE_F32, 4);
      n.attrs.causal = true;
      n.attrs.value = 0.5;
      n.attrs.axis = wrt;
      ck_ok(run(tfg_cpu_attention_grad, &n, in, &out, test_pool));
      for (int64_t i = 0; i < numel(&out); i++) {
        int64_t key = i / (wrt == 2 ? 5 : 4) % (wrt == 0 ? (tq ? tq : 1) : (tk ? tk : 1));
        bool zero = c > 0 || (wrt > 0 && key >= tq);
        if (zero) ck_assert_msg(get(&out, i) == 0, "case %d input %d [%lld]: %g, want 0", c, wrt, (long long)i, get(&out, i));
        else ck_assert_msg(get(&out, i) != 7, "case %d input %d [%lld] not written", c, wrt, (long long)i);
      }
      free(out.data);
    }
    free_all(in, 4);
  }
}
END_TEST

/* ---- conv2d gradients ---------------------------------------------------- */

typedef struct conv_cfg {
  int n, c, h, w, o, kh, kw, sh, sw, pt, pb, pl, pr;
} conv_cfg;

static tfg_shape conv_out_shape(const conv_cfg *k) {
  return shp(4, k->n, k->o, (k->h + k->pt + k->pb - k->kh) / k->sh + 1,
             (k->w + k->pl + k->pr - k->kw) / k->sw + 1);
}

static void conv_attrs(tfg_attrs *a, const conv_cfg *k) {
  a->stride[0] = k->sh;
  a->stride[1] = k->sw;
  a->pad[0] = k->pt;
  a->pad[1] = k->pb;
  a->pad[2] = k->pl;
  a->pad[3] = k->pr;
}

/* wrt 0: conv2d_grad_input (gin = dy, w); wrt 1: conv2d_grad_weight
 * (gin = x, dy). Inputs in [-1, 1): each output of the gradient is a
 * sum of at most K products of magnitude <= 1 (K = O KH KW for dx,
 * N OH OW for dw), so f32's sum is off by at most K u * K: tol32. */
static void check_conv_fd(const conv_cfg *k, int wrt, uint64_t seed, tfg_pool *pool) {
  tfg_shape ys = conv_out_shape(k);
  gcase g = {.what = wrt ? "conv2d_grad_weight" : "conv2d_grad_input", .fwd = tfg_cpu_conv2d,
             .nfin = 2, .wrt = wrt, .fshape = ys, .ngin = 2};
  g.fnode = mknode(TFG_OP_CONV2D, &ys, TFG_DTYPE_F64, 2);
  conv_attrs(&g.fnode.attrs, k);
  g.fin[0] = tnew(TFG_DTYPE_F64, shp(4, k->n, k->c, k->h, k->w));
  g.fin[1] = tnew(TFG_DTYPE_F64, shp(4, k->o, k->c, k->kh, k->kw));
  fill(&g.fin[0], seed, -1, 1);
  fill(&g.fin[1], seed + 1, -1, 1);
  double terms;
  if (wrt == 0) {
    g.grad = tfg_cpu_conv2d_grad_input;
    g.gnode = mknode(TFG_OP_CONV2D_GRAD_INPUT, &g.fin[0].shape, TFG_DTYPE_F64, 2);
    g.gsrc[0] = DY;
    g.gsrc[1] = 1;
    terms = (double)k->o * k->kh * k->kw;
  } else {
    g.grad = tfg_cpu_conv2d_grad_weight;
    g.gnode = mknode(TFG_OP_CONV2D_GRAD_WEIGHT, &g.fin[1].shape, TFG_DTYPE_F64, 2);
    g.gsrc[0] = 0;
    g.gsrc[1] = DY;
    terms = (double)k->n * ys.dim[2] * ys.dim[3];
  }
  conv_attrs(&g.gnode.attrs, k);
  g.tol32 = terms * terms * U32;
  check_case(&g, seed + 2, pool);
  free_case(&g);
}

static const conv_cfg CONV_CFGS[] = {
    /* n  c  h  w  o kh kw sh sw pt pb pl pr */
    {2, 3, 7, 6, 4, 3, 2, 2, 2, 1, 0, 2, 1}, /* stride 2, asymmetric padding */
    {2, 2, 5, 9, 2, 2, 3, 1, 3, 0, 2, 3, 0}, /* per-axis strides, padding past the kernel */
    {2, 3, 4, 5, 4, 1, 1, 1, 1, 0, 0, 0, 0}, /* 1x1, stride 1: the pointwise path */
    {2, 3, 5, 5, 4, 1, 1, 2, 2, 0, 0, 0, 0}, /* 1x1, stride 2: pixels no window reads */
    {1, 2, 7, 7, 3, 2, 2, 3, 3, 0, 0, 0, 0}, /* stride > kernel: rows and columns skipped */
    {3, 2, 6, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1}, /* "same" padding, three images in one group */
};

#define NCONV ((int)(sizeof CONV_CFGS / sizeof CONV_CFGS[0]))

START_TEST(conv2d_grad_input_fd) { check_conv_fd(&CONV_CFGS[_i], 0, 31 + 4 * (uint64_t)_i, test_pool); }
END_TEST

START_TEST(conv2d_grad_weight_fd) { check_conv_fd(&CONV_CFGS[_i], 1, 61 + 4 * (uint64_t)_i, test_pool); }
END_TEST

/* dx and dw by their defining sums over every (image, out channel,
 * output pixel, input channel, kernel tap) whose tap reads inside x:
 *   dx[n,c,iy,ix] += w[o,c,ky,kx] dy[n,o,oy,ox]
 *   dw[o,c,ky,kx] += x[n,c,iy,ix] dy[n,o,oy,ox]
 * in long double, with the sums of |terms| in dxs, dws. */
static void ref_conv_grads(const conv_cfg *k, const tfg_tensor *x, const tfg_tensor *w,
                           const tfg_tensor *dy, double *dx, double *dxs, double *dw,
                           double *dws) {
  int64_t oh = dy->shape.dim[2], ow = dy->shape.dim[3];
  int64_t nx = numel(x), nw = numel(w);
  long double *ax = calloc((size_t)nx, sizeof *ax), *sx = calloc((size_t)nx, sizeof *sx);
  long double *aw = calloc((size_t)nw, sizeof *aw), *sw = calloc((size_t)nw, sizeof *sw);
  ck_assert(ax && sx && aw && sw);
  const double *X = x->data, *Wt = w->data, *D = dy->data;
  for (int64_t n = 0; n < k->n; n++)
    for (int64_t o = 0; o < k->o; o++)
      for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
          long double d = D[((n * k->o + o) * oh + oy) * ow + ox];
          for (int64_t c = 0; c < k->c; c++)
            for (int64_t ky = 0; ky < k->kh; ky++) {
              int64_t iy = oy * k->sh + ky - k->pt;
              if (iy < 0 || iy >= k->h) continue;
              for (int64_t kx = 0; kx < k->kw; kx++) {
                int64_t ix = ox * k->sw + kx - k->pl;
                if (ix < 0 || ix >= k->w) continue;
                int64_t xi = ((n * k->c + c) * k->h + iy) * k->w + ix;
                int64_t wi = ((o * k->c + c) * k->kh + ky) * k->kw + kx;
                ax[xi] += Wt[wi] * d;
                sx[xi] += fabsl(Wt[wi] * d);
                aw[wi] += X[xi] * d;
                sw[wi] += fabsl(X[xi] * d);
              }
            }
        }
  for (int64_t i = 0; i < nx; i++) {
    dx[i] = (double)ax[i];
    dxs[i] = (double)sx[i];
  }
  for (int64_t i = 0; i < nw; i++) {
    dw[i] = (double)aw[i];
    dws[i] = (double)sw[i];
  }
  free(ax);
  free(sx);
  free(aw);
  free(sw);
}

/* One conv gradient (wrt 0: dx from dy, w; wrt 1: dw from x, dy) in dt,
 * without a pool and twice on one (the two pool runs give the same bits;
 * the pool splits the gemms, kernels/cpu/blas.h, so it may round unlike
 * the run without), each against ref within 2 terms u sums[i] (+1e-300
 * for exact zeros). */
static void check_conv_ref_one(const conv_cfg *k, int wrt, tfg_dtype dt, const tfg_tensor *a,
                               const tfg_tensor *b, const double *ref, const double *sums,
                               double terms, tfg_pool *pool) {
  const char *what = wrt ? "conv2d_grad_weight" : "conv2d_grad_input";
  tfg_kernel_fn fn = wrt ? tfg_cpu_conv2d_grad_weight : tfg_cpu_conv2d_grad_input;
  tfg_shape gs = wrt ? shp(4, k->o, k->c, k->kh, k->kw) : shp(4, k->n, k->c, k->h, k->w);
  double u = dt == TFG_DTYPE_F64 ? U64 : U32;
  tfg_tensor gin[2] = {tconv(a, dt), tconv(b, dt)};
  tfg_tensor g[3] = {tnew(dt, gs), tnew(dt, gs), tnew(dt, gs)};
  tfg_node nd = mknode(wrt ? TFG_OP_CONV2D_GRAD_WEIGHT : TFG_OP_CONV2D_GRAD_INPUT, &gs, dt, 2);
  conv_attrs(&nd.attrs, k);
  ck_ok(run(fn, &nd, gin, &g[0], NULL));
  ck_ok(run(fn, &nd, gin, &g[1], pool));
  ck_ok(run(fn, &nd, gin, &g[2], pool));
  ck_same_bits(&g[1], &g[2], what);
  for (int r = 0; r < 2; r++)
    for (int64_t i = 0; i < numel(&g[r]); i++)
      ck_assert_msg(fabs(get(&g[r], i) - ref[i]) <= 2 * terms * u * sums[i] + 1e-300,
                    "%s%s [%lld]: got %.17g, want %.17g", what, r ? " on a pool" : "", (long long)i,
                    get(&g[r], i), ref[i]);
  free_all(gin, 2);
  free_all(g, 3);
}

/* Both conv gradients in f32 and f64, with and without a pool (same
 * bits), against ref_conv_grads within 2 K u sum|terms| (Higham's bound
 * gamma_K for a K-term sum in any order, with margin), K the number of
 * terms. */
static void check_conv_ref(const conv_cfg *k, uint64_t seed, tfg_pool *pool) {
  tfg_shape xs = shp(4, k->n, k->c, k->h, k->w), ws = shp(4, k->o, k->c, k->kh, k->kw);
  tfg_shape ys = conv_out_shape(k);
  tfg_tensor x = tnew(TFG_DTYPE_F64, xs), w = tnew(TFG_DTYPE_F64, ws), dy = tnew(TFG_DTYPE_F64, ys);
  fill(&x, seed, -1, 1);
  fill(&w, seed + 1, -1, 1);
  fill(&dy, seed + 2, -1, 1);
  int64_t nx = numel(&x), nw = numel(&w);
  double *rx = malloc(sizeof *rx * (size_t)nx), *sx = malloc(sizeof *sx * (size_t)nx);
  double *rw = malloc(sizeof *rw * (size_t)nw), *sw = malloc(sizeof *sw * (size_t)nw);
  ck_assert(rx && sx && rw && sw);
  ref_conv_grads(k, &x, &w, &dy, rx, sx, rw, sw);
  double kx = (double)k->o * k->kh * k->kw, kw = (double)k->n * ys.dim[2] * ys.dim[3];
  for (int d = 0; d < 2; d++) {
    check_conv_ref_one(k, 0, FLOATS[d], &dy, &w, rx, sx, kx, pool);
    check_conv_ref_one(k, 1, FLOATS[d], &x, &dy, rw, sw, kw, pool);
  }
  free(rx);
  free(sx);
  free(rw);
  free(sw);
  free(x.data);
  free(w.data);
  free(dy.data);
}

START_TEST(conv2d_grads_reference) { check_conv_ref(&CONV_CFGS[_i], 91 + 3 * (uint64_t)_i, test_pool); }
END_TEST

/* Larger shapes, each with its seed. */
static const struct {
  conv_cfg k;
  uint64_t seed;
} CONV_REF_LARGE[] = {
    /* many small images: one group, col2im split over 16 * 8 planes */
    {{16, 8, 16, 16, 8, 3, 3, 2, 1, 1, 2, 0, 1}, 131},
    /* 128x128 images: the scratch budget makes groups of six and one
     * (the one-image path), so dw is summed over two gemms */
    {{7, 4, 128, 128, 4, 3, 3, 1, 1, 1, 1, 1, 1}, 137},
};

START_TEST(conv2d_grads_reference_large) {
  check_conv_ref(&CONV_REF_LARGE[_i].k, CONV_REF_LARGE[_i].seed, test_pool);
}
END_TEST

/* No channels out, or no batch: zero gradients, never garbage. */
START_TEST(conv2d_grads_empty_sums) {
  conv_cfg k = {0, 2, 4, 4, 3, 3, 3, 1, 1, 0, 0, 0, 0};
  tfg_shape ws = shp(4, 3, 2, 3, 3), ys = conv_out_shape(&k);
  tfg_tensor in[2] = {tnew(TFG_DTYPE_F64, shp(4, 0, 2, 4, 4)), tnew(TFG_DTYPE_F64, ys)};
  tfg_tensor dw = tnew(TFG_DTYPE_F64, ws);
  for (int i = 0; i < 54; i++) set(&dw, i, 42);
  tfg_node nd = mknode(TFG_OP_CONV2D_GRAD_WEIGHT, &ws, TFG_DTYPE_F64, 2);
  conv_attrs(&nd.attrs, &k);
  ck_ok(run(tfg_cpu_conv2d_grad_weight, &nd, in, &dw, NULL));
  for (int i = 0; i < 54; i++) ck_assert(get(&dw, i) == 0);
  free_all(in, 2);
  free(dw.data);

  k = (conv_cfg){2, 2, 4, 4, 0, 3, 3, 1, 1, 0, 0, 0, 0};
  tfg_shape xs = shp(4, 2, 2, 4, 4);
  ys = conv_out_shape(&k);
  tfg_tensor gi[2] = {tnew(TFG_DTYPE_F32, ys), tnew(TFG_DTYPE_F32, shp(4, 0, 2, 3, 3))};
  tfg_tensor dx = tnew(TFG_DTYPE_F32, xs);
  for (int i = 0; i < 64; i++) set(&dx, i, 42);
  nd = mknode(TFG_OP_CONV2D_GRAD_INPUT, &xs, TFG_DTYPE_F32, 2);
  conv_attrs(&nd.attrs, &k);
  ck_ok(run(tfg_cpu_conv2d_grad_input, &nd, gi, &dx, NULL));
  for (int i = 0; i < 64; i++) ck_assert(get(&dx, i) == 0);
  free_all(gi, 2);
  free(dx.data);
}
END_TEST

/* ---- pool gradients ------------------------------------------------------- */

typedef struct pool_cfg {
  int n, c, h, w, kh, kw, sh, sw;
} pool_cfg;

/* Windows overlapping an element: at most ceil(KH/SH) ceil(KW/SW); the
 * f32 sum of that many terms of size <= 1 is off by at most r^2 u. */
static void check_pool_fd(const pool_cfg *k, bool avg, uint64_t seed, tfg_pool *pool) {
  tfg_shape xs = shp(4, k->n, k->c, k->h, k->w);
  tfg_shape ys = shp(4, k->n, k->c, (k->h - k->kh) / k->sh + 1, (k->w - k->kw) / k->sw + 1);
  gcase g = {.what = avg ? "avg_pool_grad" : "max_pool_grad", .fwd = tfg_cpu_pool, .nfin = 1,
             .wrt = 0, .fshape = ys, .grad = tfg_cpu_pool_grad};
  g.fnode = mknode(avg ? TFG_OP_AVG_POOL : TFG_OP_MAX_POOL, &ys, TFG_DTYPE_F64, 1);
  g.gnode = mknode(avg ? TFG_OP_AVG_POOL_GRAD : TFG_OP_MAX_POOL_GRAD, &xs, TFG_DTYPE_F64, 2);
  tfg_attrs *as[2] = {&g.fnode.attrs, &g.gnode.attrs};
  for (int i = 0; i < 2; i++) {
    as[i]->size[0] = k->kh;
    as[i]->size[1] = k->kw;
    as[i]->stride[0] = k->sh;
    as[i]->stride[1] = k->sw;
  }
  if (avg) {
    g.ngin = 1;
    g.gsrc[0] = DY;
  } else {
    g.ngin = 2;
    g.gsrc[0] = 0;
    g.gsrc[1] = DY;
  }
  g.fin[0] = tnew(TFG_DTYPE_F64, xs);
  fill_distinct(&g.fin[0]);
  double r = (double)((k->kh + k->sh - 1) / k->sh) * ((k->kw + k->sw - 1) / k->sw);
  g.tol32 = r * r * U32;
  check_case(&g, seed, pool);
  free_case(&g);
}

static const pool_cfg POOL_CFGS[] = {
    /* n  c  h  w kh kw sh sw */
    {2, 2, 7, 6, 3, 2, 2, 1}, /* overlapping windows (stride < size) */
    {1, 3, 6, 6, 2, 2, 2, 2}, /* tiling windows */
    {1, 1, 7, 8, 2, 2, 3, 3}, /* gaps: elements in no window */
    {2, 1, 5, 5, 3, 3, 1, 1}, /* heavy overlap: up to 9 windows per element */
};

#define NPOOL ((int)(sizeof POOL_CFGS / sizeof POOL_CFGS[0]))

/* _i over max_pool's cases, then avg_pool's. */
START_TEST(pool_grads_fd) {
  int avg = _i / NPOOL, i = _i % NPOOL;
  check_pool_fd(&POOL_CFGS[i], avg, 201 + 2 * (uint64_t)i + 10 * (uint64_t)avg, test_pool);
}
END_TEST

/* 2x2 windows, stride 1, on
 *     1 3 3 0
 *     2 3 1 0
 *     0 0 5 5      dy = [[1, 2, 3], [4, 5, 6]]
 * max: the windows at (0,0) and (0,1) both take the 3 at (0,1), the
 * first maximum in row-major order, though (0,2) and (1,1) tie with it;
 * (0,2) takes the 3 at (0,2); (1,0) the 3 at (1,1); (1,1) and (1,2) the
 * 5 at (2,2). So dx(0,1) = 1 + 2, dx(0,2) = 3, dx(1,1) = 4,
 * dx(2,2) = 5 + 6. avg: each element gets dy / 4 from each window over
 * it, e.g. dx(1,1) = (1 + 2 + 4 + 5) / 4 = 3. All exact. */
START_TEST(pool_grads_hand) {
  tfg_dtype dt = FLOATS[_i];
  tfg_tensor in[2] = {tnew(dt, shp(4, 1, 1, 3, 4)), tnew(dt, shp(4, 1, 1, 2, 3))};
  set_all(&in[0], (double[]){1, 3, 3, 0, 2, 3, 1, 0, 0, 0, 5, 5});
  set_all(&in[1], (double[]){1, 2, 3, 4, 5, 6});
  tfg_tensor dx = tnew(dt, in[0].shape);
  tfg_node nd = mknode(TFG_OP_MAX_POOL_GRAD, &dx.shape, dt, 2);
  nd.attrs.size[0] = nd.attrs.size[1] = 2;
  nd.attrs.stride[0] = nd.attrs.stride[1] = 1;
  ck_ok(run(tfg_cpu_pool_grad, &nd, in, &dx, NULL));
  ck_exact(&dx, (double[]){0, 3, 3, 0, 0, 4, 0, 0, 0, 0, 11, 0}, "max_pool_grad");
  nd.op = TFG_OP_AVG_POOL_GRAD;
  nd.ninputs = 1;
  ck_ok(run(tfg_cpu_pool_grad, &nd, &in[1], &dx, NULL));
  ck_exact(&dx, (double[]){0.25, 0.75, 1.25, 0.75, 1.25, 3, 4, 2.25, 1, 2.25, 2.75, 1.5},
           "avg_pool_grad");
  /* a NaN wins its window in the forward max, so it gets the window's dy */
  set(&in[0], 4, NAN);
  nd.op = TFG_OP_MAX_POOL_GRAD;
  nd.ninputs = 2;
  ck_ok(run(tfg_cpu_pool_grad, &nd, in, &dx, NULL));
  ck_exact(&dx, (double[]){0, 2, 3, 0, 5, 0, 0, 0, 0, 0, 11, 0}, "max_pool_grad with NaN");
  free_all(in, 2);
  free(dx.data);
}
END_TEST

/* ---- embedding_grad ------------------------------------------------------ */

/* A row hit k times sums k terms of size <= 1: f32 is off by k^2 u. */
static const struct emb_fd {
  int v, d;
  tfg_dtype id_dt;
  int nids, ids[10], kmax;
  uint64_t seed;
} EMB_FD[] = {
    /* row 1 four times, row 4 three, row 3 never */
    {6, 4, TFG_DTYPE_I32, 10, {1, 4, 1, 0, 4, 4, 1, 5, 2, 1}, 4, 301},
    {3, 5, TFG_DTYPE_I64, 7, {2, 2, 2, 2, 2, 2, 0}, 6, 303},
};

START_TEST(embedding_grad_fd) {
  const struct emb_fd *k = &EMB_FD[_i];
  int v = k->v, d = k->d, nids = k->nids, kmax = k->kmax;
  uint64_t seed = k->seed;
  tfg_shape ts = shp(2, v, d), ys = shp(2, nids, d);
  gcase g = {.what = "embedding_grad", .fwd = tfg_cpu_embedding, .nfin = 2, .wrt = 0,
             .fshape = ys, .grad = tfg_cpu_embedding_grad, .ngin = 2, .gsrc = {1, DY},
             .tol32 = (double)kmax * kmax * U32};
  g.fnode = mknode(TFG_OP_EMBEDDING, &ys, TFG_DTYPE_F64, 2);
  g.gnode = mknode(TFG_OP_EMBEDDING_GRAD, &ts, TFG_DTYPE_F64, 2);
  g.gnode.attrs.n = v;
  g.fin[0] = tnew(TFG_DTYPE_F64, ts);
  g.fin[1] = tnew(k->id_dt, shp(1, nids));
  fill(&g.fin[0], seed, -1, 1);
  for (int i = 0; i < nids; i++) set(&g.fin[1], i, k->ids[i]);
  check_case(&g, seed + 1, test_pool);
  free_case(&g);
}
END_TEST

/* ids [2, 0, 2, 1, 2] over 4 rows: row 2 = dy0 + dy2 + dy4 = [1 + 5 + 9,
 * 2 + 6 + 10], row 3 never used = 0. Bad ids fail with TFG_ERR_NUMERIC
 * and write nothing. */
/* f32 with i32 ids, f64 with i64 ids. */
START_TEST(embedding_grad_hand_and_bad_id) {
  tfg_dtype dt = FLOATS[_i];
  tfg_tensor in[2] = {tnew(_i ? TFG_DTYPE_I64 : TFG_DTYPE_I32, shp(1, 5)), tnew(dt, shp(2, 5, 2))};
  set_all(&in[0], (double[]){2, 0, 2, 1, 2});
  set_all(&in[1], (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  tfg_tensor out = tnew(dt, shp(2, 4, 2));
  for (int i = 0; i < 8; i++) set(&out, i, 42);
  tfg_node nd = mknode(TFG_OP_EMBEDDING_GRAD, &out.shape, dt, 2);
  nd.attrs.n = 4;
  ck_ok(run(tfg_cpu_embedding_grad, &nd, in, &out, NULL));
  ck_exact(&out, (double[]){3, 4, 7, 8, 15, 18, 0, 0}, "embedding_grad");
  for (int bad = 0; bad < 2; bad++) {
    set(&in[0], 3, bad ? 4 : -1);
    for (int i = 0; i < 8; i++) set(&out, i, 42);
    ck_assert_int_eq(run(tfg_cpu_embedding_grad, &nd, in, &out, NULL), TFG_ERR_NUMERIC);
    ck_assert_ptr_nonnull(
        strstr(last_err, bad ? "id 4 (at flat position 3" : "id -1 (at flat position 3"));
    ck_exact(&out, (double[]){42, 42, 42, 42, 42, 42, 42, 42}, "untouched after a bad id");
  }
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* 6000 ids over 2000 rows (about three per row, some many more), D = 96,
 * split over a pool by row ranges (11 pieces): every row is summed in id
 * order, so the result is exactly the in-order sum (0 + dy[first] +
 * dy[next] + ...) in the dtype, with or without a pool. */
START_TEST(embedding_grad_deterministic) {
  enum { V = 2000, D = 96, NID = 6000 };
  tfg_dtype dt = FLOATS[_i];
  tfg_tensor in[2] = {tnew(TFG_DTYPE_I32, shp(2, 60, 100)), tnew(dt, shp(3, 60, 100, D))};
  for (int i = 0; i < NID; i++) /* every seventh id is row 7: a hot row */
    set(&in[0], i, i % 7 ? (double)(tfg_rng_bits(401, (uint64_t)i) % V) : 7);
  fill(&in[1], 402, -1, 1);
  tfg_tensor out = tnew(dt, shp(2, V, D)), out2 = tnew(dt, shp(2, V, D));
  tfg_node nd = mknode(TFG_OP_EMBEDDING_GRAD, &out.shape, dt, 2);
  nd.attrs.n = V;
  ck_ok(run(tfg_cpu_embedding_grad, &nd, in, &out, NULL));
  ck_ok(run(tfg_cpu_embedding_grad, &nd, in, &out2, test_pool));
  ck_same_bits(&out, &out2, "embedding_grad");
  tfg_tensor ref = tnew(dt, shp(2, V, D));
  for (int i = 0; i < NID; i++) {
    int64_t r = (int64_t)get(&in[0], i);
    for (int c = 0; c < D; c++)
      if (dt == TFG_DTYPE_F64)
        ((double *)ref.data)[r * D + c] += ((const double *)in[1].data)[i * D + c];
      else
        ((float *)ref.data)[r * D + c] += ((const float *)in[1].data)[i * D + c];
  }
  ck_same_bits(&out, &ref, "embedding_grad vs the in-order sum");
  free_all(in, 2);
  free(out.data);
  free(out2.data);
  free(ref.data);
}
END_TEST

/* Unsupported dtypes are TFG_ERR_DEVICE with the dtype named. */
START_TEST(grad_bad_dtypes) {
  tfg_tensor in[3] = {tnew(TFG_DTYPE_I32, shp(1, 4)), tnew(TFG_DTYPE_I32, shp(1, 4)),
                      tnew(TFG_DTYPE_F32, shp(1, 4))};
  tfg_tensor out = tnew(TFG_DTYPE_I32, shp(1, 4));
  tfg_node nd = mknode(TFG_OP_GELU_GRAD, &out.shape, TFG_DTYPE_I32, 2);
  ck_assert_int_eq(run(tfg_cpu_gelu_grad, &nd, in, &out, NULL), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(last_err, "i32"));
  /* f32 x with f64 dy */
  tfg_tensor mix[2] = {tnew(TFG_DTYPE_F32, shp(1, 4)), tnew(TFG_DTYPE_F64, shp(1, 4))};
  tfg_tensor o32 = tnew(TFG_DTYPE_F32, shp(1, 4));
  nd.op = TFG_OP_RELU_GRAD;
  ck_assert_int_eq(run(tfg_cpu_relu_grad, &nd, mix, &o32, NULL), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(last_err, "f64"));
  free_all(in, 3);
  free_all(mix, 2);
  free(out.data);
  free(o32.data);
}
END_TEST

/* ---- optimizers ------------------------------------------------------------ */

/* Every optimizer case starts from p = [1, -2, 0.5] and sees the
 * gradients G[t-1] at steps t = 1, 2, 3. */
static const double P0[3] = {1.0, -2.0, 0.5};
static const double G[3][3] = {{0.1, -0.2, 0.3}, {-0.4, 0.5, 0.25}, {0.05, 0.6, -0.7}};

/* Asserts |got[i] - want[i]| <= one ulp of want[i] in the dtype. */
static void ck_ulp(const tfg_tensor *got, const double *want, const char *what, int step) {
  for (int64_t i = 0; i < numel(got); i++) {
    double w = want[i], g = get(got, i);
    double ulp = got->dtype == TFG_DTYPE_F32 ? (double)(nextafterf((float)fabs(w), INFINITY) -
                                                        (float)fabs(w))
                                             : nextafter(fabs(w), INFINITY) - fabs(w);
    ck_assert_msg(fabs(g - w) <= ulp, "%s, step %d [%lld]: got %.17g, want %.17g", what, step,
                  (long long)i, g, w);
  }
}

/* The marker output: its bytes must survive the update. */
static const unsigned char MARK[8] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4};

/* An optimizer node's tensors: n of [3] elements in dt, in[0] = P0 and
 * the others zero, and the marker output over mark (a copy of MARK). */
static tfg_tensor opt_tensors(tfg_dtype dt, int n, tfg_tensor *in, unsigned char mark[8]) {
  for (int k = 0; k < n; k++) in[k] = tnew(dt, shp(1, 3));
  set_all(&in[0], P0);
  memcpy(mark, MARK, 8);
  return (tfg_tensor){.data = mark, .dtype = dt, .shape = shp(1, 0)};
}

typedef struct sgd_case {
  const char *what;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  /* after steps 1..3: param, momentum buffer (7 = never touched) */
  double p[3][3], buf[3][3];
} sgd_case;

/* Expected values (for element 0; the others are alike):
 * plain, lr 0.1:       p = 1 - 0.1 * 0.1 = 0.99; 0.99 - 0.1 * -0.4 = 1.03;
 *                      1.03 - 0.1 * 0.05 = 1.025 (1.0250000000000001 in doubles)
 * momentum 0.9:        b = 0.1 (step 1: the gradient itself), p = 0.99;
 *                      b = 0.1 * 0.9 + -0.4 = -0.31, p = 0.99 + 0.031 = 1.021;
 *                      b = -0.31 * 0.9 + 0.05 = -0.229, p = 1.021 + 0.0229 = 1.0439
 * dampening 0.5:       step 1 is undamped: b = 0.1, p = 0.99;
 *                      b = 0.09 + 0.5 * -0.4 = -0.11, p = 1.001;
 *                      b = -0.099 + 0.025 = -0.074, p = 1.0084
 * nesterov:            b as momentum; g' = g + 0.9 b: 0.1 + 0.09 = 0.19, p = 0.981;
 *                      -0.4 + 0.9 * -0.31 = -0.679, p = 1.0489;
 *                      0.05 + 0.9 * -0.229 = -0.1561, p = 1.06451
 * weight_decay 0.01:   g' = g + 0.01 p: 0.1 + 0.01 = 0.11, p = 0.989;
 *                      -0.4 + 0.00989 = -0.39011, p = 1.028011;
 *                      0.05 + 0.01028011 = 0.06028011, p = 1.021982989
 * wd 0.01 + nesterov:  g' = 0.11, b = 0.11, g'' = 0.11 + 0.099 = 0.209, p = 0.9791;
 *                      g' = -0.4 + 0.009791 = -0.390209, b = 0.099 - 0.390209 = -0.291209,
 *                      g'' = -0.390209 - 0.2620881 = -0.6522971, p = 1.04432971; ...
 * Each printed as Python's repr of the double result of that order of
 * operations (SGD_F64), and of the same with every step rounded to f32
 * (SGD_F32). */
static const sgd_case SGD_F64[] = {
    {"sgd plain", 0.1, 0, 0, 0, false,
     {{0.99, -1.98, 0.47}, {1.03, -2.03, 0.44499999999999995},
      {1.0250000000000001, -2.09, 0.5149999999999999}},
     {{7, 7, 7}, {7, 7, 7}, {7, 7, 7}}},
    {"sgd momentum", 0.1, 0.9, 0, 0, false,
     {{0.99, -1.98, 0.47}, {1.021, -2.012, 0.418}, {1.0438999999999998, -2.1008, 0.4412}},
     {{0.1, -0.2, 0.3}, {-0.31, 0.31999999999999995, 0.52},
      {-0.22900000000000004, 0.8879999999999999, -0.23199999999999993}}},
    {"sgd momentum dampening", 0.1, 0.9, 0.5, 0, false,
     {{0.99, -1.98, 0.47}, {1.001, -1.9869999999999999, 0.4305}, {1.0084, -2.0233, 0.42995}},
     {{0.1, -0.2, 0.3}, {-0.11, 0.06999999999999998, 0.395},
      {-0.07400000000000001, 0.363, 0.00550000000000006}}},
    {"sgd nesterov", 0.1, 0.9, 0, 0, true,
     {{0.981, -1.962, 0.443}, {1.0489, -2.0408, 0.3712},
      {1.0645099999999998, -2.18072, 0.46207999999999994}},
     {{0.1, -0.2, 0.3}, {-0.31, 0.31999999999999995, 0.52},
      {-0.22900000000000004, 0.8879999999999999, -0.23199999999999993}}},
    {"sgd weight_decay", 0.1, 0, 0, 0.01, false,
     {{0.989, -1.978, 0.46950000000000003},
      {1.028011, -2.0260219999999998, 0.44403050000000005},
      {1.021982989, -2.083995978, 0.5135864695000001}},
     {{7, 7, 7}, {7, 7, 7}, {7, 7, 7}}},
    {"sgd weight_decay nesterov", 0.1, 0.9, 0, 0.01, true,
     {{0.9791, -1.9582, 0.44205}, {1.04432971, -2.03165942, 0.369005105},
      {1.056433412551, -2.1646751251019998, 0.4584614348005}},
     {{0.11, -0.22, 0.305}, {-0.29120900000000005, 0.282418, 0.5289205},
      {-0.20164480290000003, 0.8338596058000001, -0.22028149894999993}}},
};

static const sgd_case SGD_F32[] = {
    {"sgd plain f32", 0.1, 0, 0, 0, false,
     {{0.9900000095367432, -1.9800000190734863, 0.4699999988079071},
      {1.0299999713897705, -2.0299999713897705, 0.4449999928474426},
      {1.024999976158142, -2.0899999141693115, 0.5149999856948853}},
     {{7, 7, 7}, {7, 7, 7}, {7, 7, 7}}},
    {"sgd momentum f32", 0.1, 0.9, 0, 0, false,
     {{0.9900000095367432, -1.9800000190734863, 0.4699999988079071},
      {1.0210000276565552, -2.01200008392334, 0.4180000126361847},
      {1.0439000129699707, -2.100800037384033, 0.44120001792907715}},
     {{0.10000000149011612, -0.20000000298023224, 0.30000001192092896},
      {-0.3100000023841858, 0.3199999928474426, 0.5199999809265137},
      {-0.22899998724460602, 0.8880000114440918, -0.23200002312660217}}},
    {"sgd momentum dampening f32", 0.1, 0.9, 0.5, 0, false,
     {{0.9900000095367432, -1.9800000190734863, 0.4699999988079071},
      {1.0010000467300415, -1.9869999885559082, 0.43050000071525574},
      {1.0084000825881958, -2.0232999324798584, 0.4299499988555908}},
     {{0.10000000149011612, -0.20000000298023224, 0.30000001192092896},
      {-0.11000000685453415, 0.07000000774860382, 0.39500001072883606},
      {-0.07400000840425491, 0.3630000352859497, 0.00550001859664917}}},
    {"sgd nesterov f32", 0.1, 0.9, 0, 0, true,
     {{0.9810000061988831, -1.9620000123977661, 0.4429999887943268},
      {1.0489000082015991, -2.040800094604492, 0.37119999527931213},
      {1.0645099878311157, -2.180720090866089, 0.4620800018310547}},
     {{0.10000000149011612, -0.20000000298023224, 0.30000001192092896},
      {-0.3100000023841858, 0.3199999928474426, 0.5199999809265137},
      {-0.22899998724460602, 0.8880000114440918, -0.23200002312660217}}},
    {"sgd weight_decay f32", 0.1, 0, 0, 0.01, false,
     {{0.9890000224113464, -1.9780000448226929, 0.46950000524520874},
      {1.0280110836029053, -2.026021957397461, 0.4440304934978485},
      {1.021983027458191, -2.083995819091797, 0.5135864615440369}},
     {{7, 7, 7}, {7, 7, 7}, {7, 7, 7}}},
    {"sgd weight_decay nesterov f32", 0.1, 0.9, 0, 0.01, true,
     {{0.9790999889373779, -1.9581999778747559, 0.4420500099658966},
      {1.0443296432495117, -2.0316593647003174, 0.36900511384010315},
      {1.0564333200454712, -2.164674997329712, 0.4584614336490631}},
     {{0.10999999940395355, -0.2199999988079071, 0.3050000071525574},
      {-0.29120901226997375, 0.28241801261901855, 0.5289205312728882},
      {-0.20164479315280914, 0.8338596224784851, -0.2202814519405365}}},
};

/* Three steps of one SGD case; the buffer starts at 7 (garbage that step
 * 1 must overwrite, not read). With momentum 0 the node has two inputs
 * and the buffer lying beside them must stay 7. The gradient is never
 * written, and neither is the marker output. */
static void run_sgd(const sgd_case *c, tfg_dtype dt, tfg_pool *pool) {
  tfg_tensor in[3];
  unsigned char mark[8];
  tfg_tensor out = opt_tensors(dt, 3, in, mark);
  set_all(&in[2], (double[]){7, 7, 7});
  tfg_node nd = mknode(TFG_OP_SGD_UPDATE, &out.shape, dt, c->momentum != 0 ? 3 : 2);
  nd.attrs.opt.lr = c->lr;
  nd.attrs.opt.momentum = c->momentum;
  nd.attrs.opt.dampening = c->dampening;
  nd.attrs.opt.weight_decay = c->weight_decay;
  nd.attrs.opt.nesterov = c->nesterov;
  for (int t = 1; t <= 3; t++) {
    set_all(&in[1], G[t - 1]);
    ck_ok(run_step(tfg_cpu_sgd_update, &nd, in, &out, pool, t));
    ck_ulp(&in[0], c->p[t - 1], c->what, t);
    ck_ulp(&in[2], c->buf[t - 1], c->what, t);
    for (int i = 0; i < 3; i++) /* the gradient is read only */
      ck_assert(get(&in[1], i) == (dt == TFG_DTYPE_F32 ? (float)G[t - 1][i] : G[t - 1][i]));
  }
  ck_assert_int_eq(memcmp(mark, MARK, 8), 0);
  free_all(in, 3);
}

/* Case _i in f64, without and with a pool, and in f32. */
START_TEST(sgd_three_steps) {
  run_sgd(&SGD_F64[_i], TFG_DTYPE_F64, NULL);
  run_sgd(&SGD_F64[_i], TFG_DTYPE_F64, test_pool);
  run_sgd(&SGD_F32[_i], TFG_DTYPE_F32, NULL);
}
END_TEST

/* GRAD_ACCUMULATE over three micro-batches G[0..2]: the first sets the
 * accumulator (the 7s it held are garbage), the others add, exactly:
 * 0.1, 0.1 - 0.4 = -0.3, -0.3 + 0.05 = -0.25 for element 0 (each sum
 * one rounding of the dtype, as the reference below rounds it). The
 * gradient is read only and the marker never written; a mismatched
 * gradient is refused. */
static void run_accumulate(tfg_dtype dt, tfg_pool *pool) {
  tfg_tensor in[2];
  unsigned char mark[8];
  tfg_tensor out = opt_tensors(dt, 2, in, mark);
  set_all(&in[0], (double[]){7, 7, 7});
  tfg_node nd = mknode(TFG_OP_GRAD_ACCUMULATE, &out.shape, dt, 2);
  double want[3] = {0};
  for (int t = 0; t < 3; t++) {
    nd.attrs.value = t > 0;
    set_all(&in[1], G[t]);
    ck_ok(run_step(tfg_cpu_grad_accumulate, &nd, in, &out, pool, 1));
    for (int i = 0; i < 3; i++) {
      want[i] = dt == TFG_DTYPE_F32 ? (double)((float)(t ? (float)want[i] : 0.0f) + (float)G[t][i]) : (t ? want[i] : 0) + G[t][i];
      ck_assert_msg(get(&in[0], i) == want[i], "micro-batch %d element %d: %.17g, want %.17g", t, i, get(&in[0], i),
                    want[i]);
      ck_assert(get(&in[1], i) == (dt == TFG_DTYPE_F32 ? (float)G[t][i] : G[t][i]));
    }
  }
  ck_assert_int_eq(memcmp(mark, MARK, 8), 0);
  in[1].shape = shp(1, 2);
  ck_assert_int_eq(run_step(tfg_cpu_grad_accumulate, &nd, in, &out, pool, 1), TFG_ERR_SHAPE);
  ck_assert(strstr(last_err, "grad_accumulate: input 1 has 2 elements") != NULL);
  in[1].shape = shp(1, 3);
  free_all(in, 2);
}

START_TEST(accumulate_micro_batches) {
  run_accumulate(TFG_DTYPE_F64, NULL);
  run_accumulate(TFG_DTYPE_F64, test_pool);
  run_accumulate(TFG_DTYPE_F32, NULL);
}
END_TEST

/* AMP_UPDATE, GradScaler.update() by hand: a skipped step halves the
 * scale (65536 -> 32768), zeroes the good-step count and counts a skip;
 * the 2000th good step in a row doubles the scale and restarts the count,
 * the 1999th does not; a doubling that would overflow f32 keeps the
 * scale (and still restarts the count). */
START_TEST(amp_update_by_hand) {
  float scale = 65536.0f, tracker = 7.0f, skipped = 0.0f;
  bool finite = false;
  tfg_tensor in[4] = {
      {.data = &scale, .dtype = TFG_DTYPE_F32, .shape = {0, {0}}},
      {.data = &finite, .dtype = TFG_DTYPE_BOOL, .shape = {0, {0}}},
      {.data = &tracker, .dtype = TFG_DTYPE_F32, .shape = {0, {0}}},
      {.data = &skipped, .dtype = TFG_DTYPE_F32, .shape = {0, {0}}},
  };
  unsigned char mark[8];
  memcpy(mark, MARK, 8);
  tfg_tensor out = {.data = mark, .dtype = TFG_DTYPE_BOOL, .shape = shp(1, 0)};
  tfg_node nd = mknode(TFG_OP_AMP_UPDATE, &out.shape, TFG_DTYPE_BOOL, 4);
  ck_ok(run_step(tfg_cpu_amp_update, &nd, in, &out, NULL, 1));
  ck_assert(scale == 32768.0f && tracker == 0.0f && skipped == 1.0f);
  finite = true;
  for (int i = 0; i < 1999; i++) ck_ok(run_step(tfg_cpu_amp_update, &nd, in, &out, NULL, 2 + i));
  ck_assert(scale == 32768.0f && tracker == 1999.0f && skipped == 1.0f);
  ck_ok(run_step(tfg_cpu_amp_update, &nd, in, &out, NULL, 2001));
  ck_assert(scale == 65536.0f && tracker == 0.0f && skipped == 1.0f);
  scale = 3e38f;
  tracker = 1999.0f;
  ck_ok(run_step(tfg_cpu_amp_update, &nd, in, &out, NULL, 2002));
  ck_assert(scale == 3e38f && tracker == 0.0f);
  ck_assert_int_eq(memcmp(mark, MARK, 8), 0);
  in[2].dtype = TFG_DTYPE_F64; /* a count of another dtype: refused */
  ck_assert_int_eq(run_step(tfg_cpu_amp_update, &nd, in, &out, NULL, 1), TFG_ERR_SHAPE);
}
END_TEST

/* An update with the grad scaler's inputs: with finite false it leaves
 * param and state as they were; with true it updates as at step (step -
 * skipped): SGD with momentum at step 3 with 2 skipped is its first
 * update (the buffer set to the gradient, not blended). */
START_TEST(update_with_scaler) {
  tfg_tensor in[5];
  unsigned char mark[8];
  tfg_tensor out = opt_tensors(TFG_DTYPE_F64, 3, in, mark);
  set_all(&in[2], (double[]){7, 7, 7});
  bool finite = false;
  float skipped = 2.0f;
  in[3] = (tfg_tensor){.data = &finite, .dtype = TFG_DTYPE_BOOL, .shape = {0, {0}}};
  in[4] = (tfg_tensor){.data = &skipped, .dtype = TFG_DTYPE_F32, .shape = {0, {0}}};
  tfg_node nd = mknode(TFG_OP_SGD_UPDATE, &out.shape, TFG_DTYPE_F64, 5);
  nd.attrs.opt.lr = 0.1;
  nd.attrs.opt.momentum = 0.9;
  set_all(&in[1], G[0]);
  ck_ok(run_step(tfg_cpu_sgd_update, &nd, in, &out, NULL, 3));
  for (int i = 0; i < 3; i++) ck_assert(get(&in[0], i) == P0[i] && get(&in[2], i) == 7);
  finite = true;
  ck_ok(run_step(tfg_cpu_sgd_update, &nd, in, &out, NULL, 3));
  for (int i = 0; i < 3; i++) {
    ck_assert(get(&in[2], i) == G[0][i]); /* the first applied update: the buffer is the gradient */
    ck_assert(get(&in[0], i) == P0[i] - 0.1 * G[0][i]);
  }
  free_all(in, 3);
}
END_TEST

typedef struct adam_case {
  const char *what;
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  /* after steps 1..3: param, m, v */
  double p[3][3], m[3][3], v[3][3];
} adam_case;

/* Expected values, element 0 of "adam" (lr 0.1, betas 0.9, 0.999,
 * eps 1e-8):
 *   t = 1: m = 0 + 0.1 * (0.1 - 0) = 0.01, v = 0 + (0.001 * 0.1) * 0.1 = 1e-5,
 *          bc1 = 1 - 0.9 = 0.1, bc2 = 1 - 0.999 = 0.001,
 *          denom = sqrt(1e-5) / 0.001 ** 0.5 + 1e-8 = 0.1 + 1e-8,
 *          p = 1 + (-(0.1 / 0.1) * 0.01) / denom = 1 - 0.0999999900... = 0.90000001
 *   t = 2: m = 0.01 + 0.1 * (-0.4 - 0.01) = -0.031, v = 1e-5 * 0.999 + 0.001 * 0.16
 *          = 0.00016999, bc1 = 0.19, bc2 = 0.001999, p = 0.90000001 +
 *          (-(0.1 / 0.19) * -0.031) / (sqrt(0.00016999) / sqrt(0.001999) + 1e-8)
 *          = 0.90000001 + 0.0163157... / 0.29161... = 0.95595035...
 * "adam weight_decay" (0.1) adds 0.1 p to g first (g = 0.1 + 0.1 = 0.2 at
 * t = 1); "adamw" (0.1) scales p by 1 - 0.1 * 0.1 = 0.99 first
 * (0.99 - 0.0999999900 = 0.89000001); "adam beta1 0.3" has 1 - beta1 =
 * 0.7 >= 0.5, where PyTorch's lerp takes its other form,
 * m = g - (g - m) * (1 - 0.7): t = 1 gives m = 0.1 - 0.1 * 0.3 = 0.07.
 * Values as Python's repr of the doubles from optim.c's order of
 * operations (ADAM_F64) and of the same rounded to f32 at every step
 * (ADAM_F32). */
static const adam_case ADAM_F64[] = {
    {"adam", 0.1, 0.9, 0.999, 1e-8, 0, false,
     {{0.900000009999999, -1.9000000049999999, 0.4000000033333332},
      {0.9559503574851284, -1.944221530217233, 0.300882719464278},
      {0.9911908331461867, -2.0146001409727154, 0.3193757252654206}},
     {{0.009999999999999998, -0.019999999999999997, 0.029999999999999992},
      {-0.030999999999999996, 0.031999999999999994, 0.05199999999999999},
      {-0.022899999999999997, 0.08879999999999998, -0.0232}},
     {{1.0000000000000011e-05, 4.0000000000000044e-05, 9.000000000000007e-05},
      {0.00016999000000000018, 0.00028996000000000024, 0.00015241000000000012},
      {0.00017232001000000018, 0.0006496700400000005, 0.0006422575900000005}}},
    {"adam weight_decay", 0.1, 0.9, 0.999, 1e-8, 0.1, false,
     {{0.9000000049999998, -1.9000000025, 0.40000000285714277},
      {0.9262259349749552, -1.892645493092959, 0.3009232440442374},
      {0.9220853073987731, -1.9285095835122545, 0.3108215739687716}},
     {{0.019999999999999997, -0.039999999999999994, 0.03499999999999999},
      {-0.01299999995, -0.005000000025, 0.060500000028571414},
      {0.002562259394749548, 0.0365735450465704, -0.012540767533843318}},
     {{4.0000000000000044e-05, 0.00016000000000000018, 0.00012250000000000008},
      {0.00013605999969000014, 0.0002559399998450003, 0.00020647750016571442},
      {0.000156265143866262, 0.00042438767029925125, 0.0006550473164874168}}},
    {"adamw", 0.1, 0.9, 0.999, 1e-8, 0.1, true,
     {{0.890000009999999, -1.8800000049999999, 0.3950000033333332},
      {0.9370503573851283, -1.905421530167233, 0.2919327194309447},
      {0.9629203294723354, -1.956745925621043, 0.3075063980377778}},
     {{0.009999999999999998, -0.019999999999999997, 0.029999999999999992},
      {-0.030999999999999996, 0.031999999999999994, 0.05199999999999999},
      {-0.022899999999999997, 0.08879999999999998, -0.0232}},
     {{1.0000000000000011e-05, 4.0000000000000044e-05, 9.000000000000007e-05},
      {0.00016999000000000018, 0.00028996000000000024, 0.00015241000000000012},
      {0.00017232001000000018, 0.0006496700400000005, 0.0006422575900000005}}},
    {"adam beta1 0.3", 0.1, 0.3, 0.999, 1e-8, 0, false,
     {{0.900000009999999, -1.9000000049999997, 0.4000000033333332},
      {0.9976007402284008, -1.9888682624077085, 0.30528141549396987},
      {1.0159024053709649, -2.101976255252243, 0.3982155364974913}},
     {{0.07, -0.14, 0.20999999999999996},
      {-0.259, 0.30799999999999994, 0.238},
      {-0.042700000000000016, 0.5124, -0.4185999999999999}},
     {{1.0000000000000011e-05, 4.0000000000000044e-05, 9.000000000000007e-05},
      {0.00016999000000000018, 0.00028996000000000024, 0.00015241000000000012},
      {0.00017232001000000018, 0.0006496700400000005, 0.0006422575900000005}}},
};

static const adam_case ADAM_F32[] = {
    {"adam f32", 0.1, 0.9, 0.999, 1e-8, 0, false,
     {{0.8999999761581421, -1.899999976158142, 0.4000000059604645},
      {0.9559503197669983, -1.9442214965820312, 0.3008826971054077},
      {0.9911907911300659, -2.0146000385284424, 0.3193756937980652}},
     {{0.010000000707805157, -0.020000001415610313, 0.030000001192092896},
      {-0.03099999949336052, 0.03199999779462814, 0.052000001072883606},
      {-0.02290000021457672, 0.08879999816417694, -0.02319999784231186}},
     {{1.0000000656873453e-05, 4.0000002627493814e-05, 9.000000864034519e-05},
      {0.00016999001672957093, 0.00028996000764891505, 0.00015241000801324844},
      {0.00017232004029210657, 0.0006496700807474554, 0.0006422576261684299}}},
    {"adam weight_decay f32", 0.1, 0.9, 0.999, 1e-8, 0.1, false,
     {{0.8999999761581421, -1.899999976158142, 0.4000000059604645},
      {0.9262259006500244, -1.8926454782485962, 0.300923228263855},
      {0.9220852851867676, -1.9285095930099487, 0.3108215630054474}},
     {{0.020000001415610313, -0.04000000283122063, 0.03500000387430191},
      {-0.01300000213086605, -0.005000002682209015, 0.06050000339746475},
      {0.0025622565299272537, 0.03657354786992073, -0.012540772557258606}},
     {{4.0000002627493814e-05, 0.00016000001050997525, 0.00012250003055669367},
      {0.00013605999993160367, 0.0002559400163590908, 0.00020647753262892365},
      {0.00015626514505129308, 0.00042438774835318327, 0.0006550473626703024}}},
    {"adamw f32", 0.1, 0.9, 0.999, 1e-8, 0.1, true,
     {{0.8899999856948853, -1.8799999952316284, 0.39500001072883606},
      {0.9370503425598145, -1.905421495437622, 0.29193270206451416},
      {0.9629203081130981, -1.956745982170105, 0.30750638246536255}},
     {{0.010000000707805157, -0.020000001415610313, 0.030000001192092896},
      {-0.03099999949336052, 0.03199999779462814, 0.052000001072883606},
      {-0.02290000021457672, 0.08879999816417694, -0.02319999784231186}},
     {{1.0000000656873453e-05, 4.0000002627493814e-05, 9.000000864034519e-05},
      {0.00016999001672957093, 0.00028996000764891505, 0.00015241000801324844},
      {0.00017232004029210657, 0.0006496700807474554, 0.0006422576261684299}}},
    {"adam beta1 0.3 f32", 0.1, 0.3, 0.999, 1e-8, 0, false,
     {{0.8999999761581421, -1.899999976158142, 0.4000000059604645},
      {0.9976006746292114, -1.988868236541748, 0.305281400680542},
      {1.0159022808074951, -2.101976156234741, 0.39821553230285645}},
     {{0.07000000029802322, -0.14000000059604645, 0.21000000834465027},
      {-0.2590000033378601, 0.30799999833106995, 0.23800000548362732},
      {-0.04270000383257866, 0.5124000310897827, -0.4185999929904938}},
     {{1.0000000656873453e-05, 4.0000002627493814e-05, 9.000000864034519e-05},
      {0.00016999001672957093, 0.00028996000764891505, 0.00015241000801324844},
      {0.00017232004029210657, 0.0006496700807474554, 0.0006422576261684299}}},
};

static void run_adam(const adam_case *c, tfg_dtype dt, tfg_pool *pool) {
  tfg_tensor in[4];
  unsigned char mark[8];
  tfg_tensor out = opt_tensors(dt, 4, in, mark);
  tfg_node nd = mknode(TFG_OP_ADAM_UPDATE, &out.shape, dt, 4);
  nd.attrs.opt.lr = c->lr;
  nd.attrs.opt.beta1 = c->beta1;
  nd.attrs.opt.beta2 = c->beta2;
  nd.attrs.opt.eps = c->eps;
  nd.attrs.opt.weight_decay = c->weight_decay;
  nd.attrs.opt.decoupled = c->decoupled;
  for (int t = 1; t <= 3; t++) {
    set_all(&in[1], G[t - 1]);
    ck_ok(run_step(tfg_cpu_adam_update, &nd, in, &out, pool, t));
    ck_ulp(&in[0], c->p[t - 1], c->what, t);
    ck_ulp(&in[2], c->m[t - 1], c->what, t);
    ck_ulp(&in[3], c->v[t - 1], c->what, t);
  }
  ck_assert_int_eq(memcmp(mark, MARK, 8), 0);
  free_all(in, 4);
}

/* Case _i in f64, without and with a pool, and in f32. */
START_TEST(adam_three_steps) {
  run_adam(&ADAM_F64[_i], TFG_DTYPE_F64, NULL);
  run_adam(&ADAM_F64[_i], TFG_DTYPE_F64, test_pool);
  run_adam(&ADAM_F32[_i], TFG_DTYPE_F32, NULL);
}
END_TEST

/* Step `step` of fn on a without a pool and on b (the same values) with
 * one: the first n tensors must then hold the same bits. */
static void same_on_pool(tfg_kernel_fn fn, const tfg_node *nd, tfg_tensor *a, tfg_tensor *b, int n,
                         tfg_tensor *out, tfg_pool *pool, int64_t step, const char *what) {
  ck_ok(run_step(fn, nd, a, out, NULL, step));
  ck_ok(run_step(fn, nd, b, out, pool, step));
  for (int k = 0; k < n; k++) ck_same_bits(&a[k], &b[k], what);
}

/* AdamW with weight_decay 0 is Adam; a large parameter split over a
 * pool gives the same bits as without (each element is independent);
 * step 0 and mixed dtypes are refused. */
START_TEST(optim_edges) {
  adam_case c = ADAM_F64[0];
  c.decoupled = true;
  c.what = "adamw, no decay";
  run_adam(&c, TFG_DTYPE_F64, NULL);

  enum { N = 300007 };
  tfg_tensor a[4], b[4];
  for (int k = 0; k < 4; k++) {
    a[k] = tnew(TFG_DTYPE_F32, shp(1, N));
    fill(&a[k], 500 + (uint64_t)k, k == 3 ? 0 : -1, 1);
    b[k] = tconv(&a[k], TFG_DTYPE_F32);
  }
  tfg_tensor out = tnew(TFG_DTYPE_F32, shp(1, 0));
  tfg_node nd = mknode(TFG_OP_ADAM_UPDATE, &out.shape, TFG_DTYPE_F32, 4);
  nd.attrs.opt.lr = 1e-3;
  nd.attrs.opt.beta1 = 0.9;
  nd.attrs.opt.beta2 = 0.999;
  nd.attrs.opt.eps = 1e-8;
  nd.attrs.opt.weight_decay = 0.01;
  nd.attrs.opt.decoupled = true;
  same_on_pool(tfg_cpu_adam_update, &nd, a, b, 4, &out, test_pool, 5, "adam_update");
  nd.op = TFG_OP_SGD_UPDATE;
  nd.ninputs = 3;
  memset(&nd.attrs.opt, 0, sizeof nd.attrs.opt);
  nd.attrs.opt.lr = 1e-2;
  nd.attrs.opt.momentum = 0.9;
  nd.attrs.opt.nesterov = true;
  same_on_pool(tfg_cpu_sgd_update, &nd, a, b, 3, &out, test_pool, 2, "sgd_update");

  ck_assert_int_eq(run_step(tfg_cpu_sgd_update, &nd, a, &out, NULL, 0), TFG_ERR_NUMERIC);
  ck_assert_ptr_nonnull(strstr(last_err, "step 0"));
  nd.op = TFG_OP_ADAM_UPDATE;
  nd.ninputs = 4;
  ck_assert_int_eq(run_step(tfg_cpu_adam_update, &nd, a, &out, NULL, 0), TFG_ERR_NUMERIC);
  free(a[2].data);
  a[2] = tnew(TFG_DTYPE_F64, shp(1, N));
  ck_assert_int_eq(run_step(tfg_cpu_adam_update, &nd, a, &out, NULL, 1), TFG_ERR_DEVICE);
  free_all(a, 4);
  free_all(b, 4);
  free(out.data);
}
END_TEST

Suite *suite_kernels_grad(void) {
  Suite *s = suite_create("kernels_grad");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, test_pool_make, test_pool_free);
#define N_OF(table) ((int)(sizeof table / sizeof table[0]))
  tcase_add_loop_test(tc, unary_grad_fd, 0, N_OF(UNARY_FD));
  tcase_add_loop_test(tc, relu_grad_exact, 0, 2);
  tcase_add_test(tc, gelu_grad_values);
  tcase_add_loop_test(tc, cross_entropy_grad_fd, 0, N_OF(CE_FD));
  tcase_add_loop_test(tc, cross_entropy_grad_stable_and_bad_label, 0, 2);
  tcase_add_loop_test(tc, layer_norm_grad_fd, 0, N_OF(LN_FD));
  tcase_add_loop_test(tc, attention_grad_fd, 0, 3 * N_OF(ATT_FD));
  tcase_add_test(tc, attention_grad_edges);
  tcase_add_test(tc, attention_grad_packed_same_bits);
  tcase_add_loop_test(tc, conv2d_grad_input_fd, 0, NCONV);
  tcase_add_loop_test(tc, conv2d_grad_weight_fd, 0, NCONV);
  tcase_add_loop_test(tc, conv2d_grads_reference, 0, NCONV);
  tcase_add_loop_test(tc, conv2d_grads_reference_large, 0, N_OF(CONV_REF_LARGE));
  tcase_add_test(tc, conv2d_grads_empty_sums);
  tcase_add_loop_test(tc, pool_grads_fd, 0, 2 * NPOOL);
  tcase_add_loop_test(tc, pool_grads_hand, 0, 2);
  tcase_add_loop_test(tc, embedding_grad_fd, 0, N_OF(EMB_FD));
  tcase_add_loop_test(tc, embedding_grad_hand_and_bad_id, 0, 2);
  tcase_add_loop_test(tc, embedding_grad_deterministic, 0, 2);
  tcase_add_test(tc, grad_bad_dtypes);
  tcase_add_loop_test(tc, sgd_three_steps, 0, N_OF(SGD_F64));
  tcase_add_test(tc, accumulate_micro_batches);
  tcase_add_test(tc, amp_update_by_hand);
  tcase_add_test(tc, update_with_scaler);
  tcase_add_loop_test(tc, adam_three_steps, 0, N_OF(ADAM_F64));
  tcase_add_test(tc, optim_edges);
#undef N_OF
  suite_add_tcase(s, tc);
  return s;
}
