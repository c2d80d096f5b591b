/* tests/unit/test_autodiff.c: gradient checks by central finite
 * differences in f64, for every differentiable op, through the whole
 * pipeline (interpreter, autodiff, session, CPU kernels).
 *
 * Each case is a program in f64 whose params p0, p1, ... feed an
 * expression y; the loss is sum(y * r) with r a fixed random tensor, so
 * every output element matters with its own weight. For each param
 * element (up to 40 per param) the autodiff gradient must match
 * (L(x + h) - L(x - h)) / 2h with h = 1e-6 max(1, |x|). Tolerance: the
 * truncation error is O(h^2) ~ 1e-12 and the rounding error ~ eps |L| / h
 * ~ 1e-9 for |L| ~ 10, so 1e-6 (1 + |g|) cannot hide a wrong rule (a wrong
 * rule is off by O(|g|)) yet never trips on rounding. Random normal inputs
 * keep away from the kinks of relu, abs, max and pooling. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/autodiff.h"
#include "compiler/fold.h"
#include "runtime/session.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

typedef struct gcase {
  const char *name;
  const char *body; /* defines params p0.. and y */
  bool training;    /* run dropout as in training */
} gcase;


/* Most cases leave `training` out (false). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const gcase cases[] = {
    {"neg", "param p0: f64[3, 4] = normal()\ny = neg(p0)"},
    {"exp", "param p0: f64[3, 4] = normal()\ny = exp(p0)"},
    {"log", "param p0: f64[3, 4] = uniform(0.5, 2)\ny = log(p0)"},
    {"sqrt", "param p0: f64[3, 4] = uniform(0.5, 2)\ny = sqrt(p0)"},
    {"rsqrt", "param p0: f64[3, 4] = uniform(0.5, 2)\ny = rsqrt(p0)"},
    {"abs", "param p0: f64[3, 4] = normal()\ny = abs(p0)"},
    {"relu", "param p0: f64[3, 4] = normal()\ny = relu(p0)"},
    {"gelu", "param p0: f64[3, 4] = normal()\ny = gelu(p0)"},
    {"tanh", "param p0: f64[3, 4] = normal()\ny = tanh(p0)"},
    {"sigmoid", "param p0: f64[3, 4] = normal()\ny = sigmoid(p0)"},
    {"cast", "param p0: f64[3, 4] = normal()\ny = cast(p0, f64) * 2"},
    {"add broadcast", "param p0: f64[3, 1] = normal()\nparam p1: f64[4] = normal()\ny = p0 + p1"},
    {"sub broadcast", "param p0: f64[2, 3, 4] = normal()\nparam p1: f64[3, 1] = normal()\ny = p0 - p1"},
    {"mul broadcast", "param p0: f64[2, 1, 4] = normal()\nparam p1: f64[3, 1] = normal()\ny = p0 * p1"},
    {"div", "param p0: f64[3, 4] = normal()\nparam p1: f64[4] = uniform(1, 2)\ny = p0 / p1"},
    {"pow", "param p0: f64[3, 4] = uniform(0.5, 2)\nparam p1: f64[4] = uniform(0.5, 2)\ny = pow(p0, p1)"},
    {"maximum", "param p0: f64[3, 4] = normal()\nparam p1: f64[3, 4] = normal()\ny = maximum(p0, p1)"},
    {"minimum", "param p0: f64[3, 4] = normal()\nparam p1: f64[1, 4] = normal()\ny = minimum(p0, p1)"},
    {"where", "param p0: f64[3, 4] = normal()\nparam p1: f64[4] = normal()\ny = where(greater(p0, 0.0), p0, p1)"},
    {"matmul", "param p0: f64[3, 4] = normal()\nparam p1: f64[4, 5] = normal()\ny = matmul(p0, p1)"},
    {"matmul ta", "param p0: f64[4, 3] = normal()\nparam p1: f64[4, 5] = normal()\ny = matmul(p0, p1, transpose_a = true)"},
    {"matmul tb", "param p0: f64[3, 4] = normal()\nparam p1: f64[5, 4] = normal()\ny = matmul(p0, p1, transpose_b = true)"},
    {"matmul ta tb",
     "param p0: f64[4, 3] = normal()\nparam p1: f64[5, 4] = normal()\ny = matmul(p0, p1, transpose_a = true, transpose_b = true)"},
    {"matmul batched", "param p0: f64[2, 3, 4] = normal()\nparam p1: f64[4, 2] = normal()\ny = matmul(p0, p1)"},
    /* The weight of a batched product (compiler/autodiff.c's flat rule,
     * matmul_shared_grad), batched operand first or second, every
     * transpose flag. */
    {"matmul [B,T,d]@[d,n]", "param p0: f64[2, 3, 4, 5] = normal()\nparam p1: f64[5, 3] = normal()\ny = matmul(p0, p1)"},
    {"matmul [B,T,d]@[n,d]^T",
     "param p0: f64[2, 3, 4] = normal()\nparam p1: f64[5, 4] = normal()\ny = matmul(p0, p1, transpose_b = true)"},
    {"matmul [B,d,T]^T@[d,n]",
     "param p0: f64[2, 4, 3] = normal()\nparam p1: f64[4, 5] = normal()\ny = matmul(p0, p1, transpose_a = true)"},
    {"matmul [B,d,T]^T@[n,d]^T",
     "param p0: f64[3, 4, 3] = normal()\nparam p1: f64[5, 4] = normal()\ny = matmul(p0, p1, transpose_a = true, transpose_b = true)"},
    {"matmul [m,d]@[B,d,n]", "param p0: f64[3, 4] = normal()\nparam p1: f64[2, 2, 4, 5] = normal()\ny = matmul(p0, p1)"},
    {"matmul [d,m]^T@[B,d,n]",
     "param p0: f64[4, 3] = normal()\nparam p1: f64[2, 4, 5] = normal()\ny = matmul(p0, p1, transpose_a = true)"},
    {"matmul [m,d]@[B,n,d]^T",
     "param p0: f64[3, 4] = normal()\nparam p1: f64[2, 5, 4] = normal()\ny = matmul(p0, p1, transpose_b = true)"},
    {"matmul [d,m]^T@[B,n,d]^T",
     "param p0: f64[4, 3] = normal()\nparam p1: f64[3, 5, 4] = normal()\ny = matmul(p0, p1, transpose_a = true, transpose_b = true)"},
    {"matmul batch broadcast", "param p0: f64[2, 1, 3, 4] = normal()\nparam p1: f64[3, 4, 2] = normal()\ny = matmul(p0, p1)"},
    {"sum", "param p0: f64[2, 3, 4] = normal()\ny = sum(p0, axis = [0, 2])"},
    {"sum all", "param p0: f64[2, 3] = normal()\ny = sum(p0)"},
    {"mean keepdims", "param p0: f64[2, 3, 4] = normal()\ny = mean(p0, axis = 1, keepdims = true)"},
    {"max", "param p0: f64[3, 5] = normal()\ny = max(p0, axis = 1)"},
    {"reshape", "param p0: f64[2, 6] = normal()\ny = reshape(p0, [3, -1]) * tensor([1.0, 2.0, 3.0, 4.0], dtype = f64)"},
    {"flatten", "param p0: f64[2, 3, 2] = normal()\ny = flatten(p0)"},
    {"transpose", "param p0: f64[2, 3, 4] = normal()\ny = transpose(p0, perm = [2, 0, 1])"},
    {"concat", "param p0: f64[2, 3] = normal()\nparam p1: f64[2, 2] = normal()\ny = concat([p0, p1, p0], 1)"},
    {"slice", "param p0: f64[3, 5] = normal()\ny = slice(p0, 1, 1, 4)"},
    {"broadcast", "param p0: f64[3, 1] = normal()\ny = broadcast(p0, [2, 3, 4])"},
    {"softmax", "param p0: f64[3, 4] = normal()\ny = softmax(p0, axis = 0)"},
    {"log_softmax", "param p0: f64[3, 4] = normal()\ny = log_softmax(p0)"},
    {"cross_entropy", "param p0: f64[4, 3] = normal()\ny = cross_entropy(p0, tensor([0, 2, 1, 2], dtype = i32))"},
    {"mse", "param p0: f64[3, 4] = normal()\nparam p1: f64[3, 4] = normal()\ny = mse(p0, p1)"},
    {"conv2d same",
     "param p0: f64[2, 2, 5, 5] = normal()\nparam p1: f64[3, 2, 3, 3] = normal()\ny = conv2d(p0, p1, padding = \"same\")"},
    {"conv2d stride 2",
     "param p0: f64[1, 2, 6, 5] = normal()\nparam p1: f64[2, 2, 3, 2] = normal()\ny = conv2d(p0, p1, stride = 2, padding = 1)"},
    {"max_pool", "param p0: f64[1, 2, 4, 4] = normal()\ny = max_pool(p0, 2)"},
    {"max_pool overlapping", "param p0: f64[1, 1, 5, 5] = normal()\ny = max_pool(p0, 3, stride = 2)"},
    {"avg_pool", "param p0: f64[2, 1, 4, 6] = normal()\ny = avg_pool(p0, [2, 3])"},
    {"layer_norm",
     "param p0: f64[3, 5] = normal()\nparam p1: f64[5] = normal()\nparam p2: f64[5] = normal()\ny = layer_norm(p0, p1, p2)"},
    {"attention",
     "param p0: f64[2, 3, 4] = normal()\nparam p1: f64[2, 5, 4] = normal()\nparam p2: f64[2, 5, 3] = normal()\n"
     "y = attention(p0, p1, p2)"},
    {"attention causal scaled",
     "param p0: f64[2, 2, 5, 3] = normal()\nparam p1: f64[2, 2, 5, 3] = normal()\nparam p2: f64[2, 2, 5, 4] = normal()\n"
     "y = attention(p0, p1, p2, causal = true, scale = 0.7)"},
    {"attention causal Tq < Tk",
     "param p0: f64[1, 3, 2] = normal()\nparam p1: f64[1, 6, 2] = normal()\nparam p2: f64[1, 6, 2] = normal()\n"
     "y = attention(p0, p1, p2, causal = true)"},
    /* one input wanted (q and k fixed): its own op; two: the packed one */
    {"attention v alone",
     "q = normal([2, 5, 3], seed = 7, dtype = f64)\nk = normal([2, 5, 3], seed = 8, dtype = f64)\n"
     "param p0: f64[2, 5, 4] = normal()\ny = attention(q, k, p0, causal = true)"},
    {"attention q and k",
     "v = normal([2, 6, 2], seed = 9, dtype = f64)\nparam p0: f64[2, 6, 3] = normal()\n"
     "param p1: f64[2, 6, 3] = normal()\ny = attention(p0, p1, v)"},
    {"dropout", "param p0: f64[4, 5] = normal()\ny = dropout(p0, 0.3)", true},
    {"embedding", "param p0: f64[5, 3] = normal()\ny = embedding(p0, tensor([[1, 4], [1, 0]], dtype = i32))"},
    {"reuse", "param p0: f64[3] = normal()\ny = p0 * p0 + exp(p0) * p0"},
};
#pragma GCC diagnostic pop

/* Builds the case and returns its loss value at the current params. */
typedef struct gctx {
  built b;
  tfg_session *s;
  tfg_node_id loss;
  tfg_run_opts ro;
} gctx;

static double loss_at(gctx *c) {
  tfg_tensor t;
  ck_assert_int_eq(tfg_session_run_with(c->s, &c->loss, 1, &t, &c->ro), TFG_OK);
  return *(double *)t.data;
}

START_TEST(gradient_matches_finite_differences) {
  const gcase *gc = &cases[_i];
  char text[2048];
  snprintf(text, sizeof text, "%s\nloss = sum(y * normal(shape(y), seed = 99, dtype = f64))\nprint loss\n", gc->body);
  gctx c = {0};
  if (program_build(&c.b, text, &(build_opts){.name = "grad.tfg"}) != TFG_OK) ck_abort_msg("%s: %s", gc->name, c.b.errs);
  c.loss = c.b.p->actions[c.b.p->nactions - 1].items[0].node;
  int np = c.b.p->nparams;
  tfg_node_id grads[8];
  ck_assert_int_le(np, 8);
  ck_assert_int_eq(tfg_autodiff(c.b.p->graph, c.loss, c.b.p->params, np, grads, NULL), TFG_OK);
  /* With constant folding on, as the compile driver runs it (the loss's
   * seed gradient and what only it reads become constants). */
  int32_t nn = c.b.p->graph->nnodes;
  uint8_t *roots = calloc((size_t)nn + 1, 1), *mark = calloc((size_t)nn + 1, 1);
  ck_assert(roots && mark);
  roots[c.loss] = 1;
  for (int k = 0; k < np; k++)
    if (grads[k] >= 0) roots[grads[k]] = 1;
  tfg_fold_constants(c.b.p->graph, roots, mark);
  free(roots);
  free(mark);
  tfg_session_opts so = {.threads = 2};
  c.s = tfg_session_new(c.b.p, c.b.d, &so);
  ck_assert_ptr_nonnull(c.s);
  c.ro = (tfg_run_opts){.training = gc->training, .step = gc->training ? 3 : 0, .any_split = true};
  for (int k = 0; k < np; k++) {
    ck_assert_msg(grads[k] >= 0, "%s: no gradient for p%d", gc->name, k);
    tfg_tensor gt;
    ck_assert_int_eq(tfg_session_run_with(c.s, &grads[k], 1, &gt, &c.ro), TFG_OK);
    int64_t n = tfg_shape_numel(&gt.shape);
    double *g = malloc(sizeof *g * (size_t)n);
    memcpy(g, gt.data, sizeof *g * (size_t)n);
    double *x = malloc(sizeof *x * (size_t)tfg_shape_numel(&c.b.p->graph->nodes[c.b.p->params[k]].shape));
    tfg_session_read(c.s, c.b.p->params[k], x);
    int64_t stride = n > 40 ? n / 40 : 1;
    for (int64_t i = 0; i < n; i += stride) {
      double x0 = x[i], h = 1e-6 * (fabs(x0) > 1 ? fabs(x0) : 1);
      x[i] = x0 + h;
      tfg_session_write(c.s, c.b.p->params[k], x);
      double up = loss_at(&c);
      x[i] = x0 - h;
      tfg_session_write(c.s, c.b.p->params[k], x);
      double down = loss_at(&c);
      x[i] = x0;
      tfg_session_write(c.s, c.b.p->params[k], x);
      double fd = (up - down) / (2 * h);
      ck_assert_msg(fabs(fd - g[i]) <= 1e-6 * (1 + fabs(g[i])), "%s: d/dp%d[%lld]: autodiff %.12g, differences %.12g",
                    gc->name, k, (long long)i, g[i], fd);
    }
    free(g);
    free(x);
  }
  tfg_session_free(c.s);
  program_free(&c.b);
}
END_TEST

/* A loss that reaches a param only through a non-differentiable op has
 * no gradient for it; one that does not reach it at all neither. */
START_TEST(no_gradient_through_argmax) {
  const char *text = "param a: f64[3] = normal()\nparam b: f64[3] = normal()\n"
                     "loss = sum(cast(argmax(reshape(a, [1, 3])), f64)) + sum(b)\nprint loss\n";
  built b;
  ck_assert_int_eq(program_build(&b, text, &(build_opts){0}), TFG_OK);
  tfg_program *p = b.p;
  tfg_node_id grads[2];
  tfg_autodiff(p->graph, p->actions[0].items[0].node, p->params, 2, grads, NULL);
  ck_assert_int_eq(grads[0], -1);
  ck_assert_int_ge(grads[1], 0);
  program_free(&b);
}
END_TEST

/* A train whose loss reaches its params only through argmax trains
 * nothing: the step has no params, and a warning at the train statement
 * names where the gradient stopped (issue 13.8); a loss that trains gets
 * no warning. */
START_TEST(untrained_loss_warns) {
  const char *text = "param w: f32[3, 4] = normal()\nx = ones([2, 3])\nlogits = matmul(x, w)\n"
                     "train mean(cast(argmax(logits), f32)) { optimizer = sgd(lr = 0.1); steps = 1 }\n";
  built b;
  ck_assert_int_eq(program_build(&b, text, &(build_opts){.steps = 1}), TFG_OK);
  ck_assert_int_eq(b.steps[0].nparams, 0);
  ck_assert_msg(strstr(b.errs, "t.tfg:4:1: warning: no gradient flows to any param") != NULL, "got\n%s", b.errs);
  ck_assert_msg(strstr(b.errs, "t.tfg:4:17: note: the gradient stops at argmax: its i32 result carries none") != NULL,
                "got\n%s", b.errs);
  program_free(&b);
  text = "param w: f32[3, 4] = normal()\nx = ones([2, 3])\ntrain mean(matmul(x, w)) { optimizer = sgd(lr = 0.1); steps = 1 }\n";
  ck_assert_int_eq(program_build(&b, text, &(build_opts){.steps = 1}), TFG_OK);
  ck_assert_int_eq(b.steps[0].nparams, 1);
  ck_assert_str_eq(b.errs, "");
  program_free(&b);
}
END_TEST

/* The gradient nodes of w in the step of x[B, T, d] @ w[d, n] (B 4, T 3,
 * d 5, n 7), built under the switches sw: how many matmuls, how many of
 * them 2-D, and whether any node is shaped [B, d, n]. */
typedef struct mm_census {
  int matmuls, matmuls2d, bdn, sums;
} mm_census;

static mm_census weight_grad_census(tfg_switches sw) {
  const char *text = "param w: f32[5, 7] = normal()\nx = normal([4, 3, 5])\n"
                     "train mean(matmul(x, w)) { optimizer = sgd(lr = 0.1); steps = 1 }\n";
  built b;
  ck_assert_int_eq(program_build(&b, text, &(build_opts){.steps = 1, .sw = sw}), TFG_OK);
  ck_assert_int_eq(b.steps[0].nparams, 1);
  mm_census m = {0};
  const tfg_graph *g = b.p->graph;
  for (int32_t i = b.n0; i < g->nnodes; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (nd->op == TFG_OP_MATMUL) {
      m.matmuls++;
      m.matmuls2d += nd->shape.rank == 2 && g->nodes[nd->inputs[0]].shape.rank == 2 &&
                     g->nodes[nd->inputs[1]].shape.rank == 2;
    }
    m.sums += nd->op == TFG_OP_SUM;
    m.bdn += nd->shape.rank == 3 && nd->shape.dim[0] == 4 && nd->shape.dim[1] == 5 && nd->shape.dim[2] == 7;
  }
  program_free(&b);
  return m;
}

/* The weight gradient of a batched product with a 2-D weight is one 2-D
 * matmul over the flattened batch, with no [B, d, n] intermediate and no
 * sum; no_opt (TFG_OPT=0) gives the old rule (a batched product to [B, d, n], then
 * a sum over B). */
START_TEST(matmul_weight_grad_is_one_gemm) {
  mm_census m = weight_grad_census((tfg_switches){0});
  ck_assert_int_eq(m.matmuls, 1);
  ck_assert_int_eq(m.matmuls2d, 1);
  ck_assert_int_eq(m.bdn, 0);
  ck_assert_int_eq(m.sums, 0);
  m = weight_grad_census((tfg_switches){.no_opt = true});
  ck_assert_int_eq(m.matmuls, 1);
  ck_assert_int_eq(m.matmuls2d, 0);
  ck_assert_int_eq(m.bdn, 1);
  ck_assert_int_eq(m.sums, 1);
}
END_TEST

/* The gradients of p0 and p1 in `body` (defines p0, p1 and y; loss
 * sum(y * r)), as autodiff builds them with the optimizing rewrites on
 * (opt) or off (no_opt), into g0 and g1 (malloc'ed, as doubles). */
static void grads_with(const char *body, bool opt, double **g, int64_t *n) {
  char text[1024];
  snprintf(text, sizeof text, "%s\nloss = sum(y * normal(shape(y), seed = 99, dtype = dtype(y)))\nprint loss\n", body);
  built b;
  ck_assert_int_eq(program_build(&b, text, &(build_opts){0}), TFG_OK);
  tfg_node_id loss = b.p->actions[b.p->nactions - 1].items[0].node, grads[2];
  ck_assert_int_eq(tfg_autodiff(b.p->graph, loss, b.p->params, 2, grads, &(tfg_switches){.no_opt = !opt}), TFG_OK);
  tfg_session *s = tfg_session_new(b.p, b.d, &(tfg_session_opts){.threads = 2});
  ck_assert_ptr_nonnull(s);
  for (int k = 0; k < 2; k++) {
    tfg_tensor t;
    ck_assert_int_eq(tfg_session_run_with(s, &grads[k], 1, &t, &(tfg_run_opts){.any_split = true}), TFG_OK);
    n[k] = tfg_shape_numel(&t.shape);
    g[k] = malloc(sizeof *g[k] * (size_t)n[k]);
    for (int64_t i = 0; i < n[k]; i++)
      g[k][i] = t.dtype == TFG_DTYPE_F64 ? ((const double *)t.data)[i] : ((const float *)t.data)[i];
  }
  tfg_session_free(s);
  program_free(&b);
}

/* The flat weight gradient sums the same products as the old rule in
 * another order: the two agree to rounding. Measured (B 8, T 64, d 96,
 * n 80, normal data): the largest difference relative to the largest
 * |dW| is 4.2e-7 and 5.0e-7 in f32, 8.2e-16 and 1.0e-15 in f64
 * (TFG_TEST_VERBOSE=1 prints it); the other operand's gradient is the
 * same rule both ways, bit for bit. */
START_TEST(matmul_flat_grad_matches_batched) {
  static const char *bodies[] = {
      "param p0: f32[8, 64, 96] = normal()\nparam p1: f32[96, 80] = normal()\ny = matmul(p0, p1)",
      "param p0: f64[8, 64, 96] = normal()\nparam p1: f64[96, 80] = normal()\ny = matmul(p0, p1)",
      "param p0: f32[96, 64] = normal()\nparam p1: f32[8, 80, 64] = normal()\ny = matmul(p0, p1, transpose_b = true)",
      "param p0: f64[96, 64] = normal()\nparam p1: f64[8, 80, 64] = normal()\ny = matmul(p0, p1, transpose_b = true)",
  };
  for (int c = 0; c < 4; c++) {
    double *on[2], *off[2];
    int64_t n_on[2], n_off[2];
    grads_with(bodies[c], true, on, n_on);
    grads_with(bodies[c], false, off, n_off);
    bool f64 = c % 2 == 1;
    for (int k = 0; k < 2; k++) {
      ck_assert_int_eq(n_on[k], n_off[k]);
      double big = 0, diff = 0;
      for (int64_t i = 0; i < n_on[k]; i++) {
        big = fmax(big, fabs(off[k][i]));
        diff = fmax(diff, fabs(on[k][i] - off[k][i]));
      }
      if (getenv("TFG_TEST_VERBOSE"))
        fprintf(stderr, "case %d p%d: max |diff| / max |g| = %.3g\n", c, k, diff / big);
      ck_assert_msg(diff <= (f64 ? 1e-14 : 1e-5) * big, "case %d p%d: %g of %g", c, k, diff, big);
      free(on[k]);
      free(off[k]);
    }
  }
}
END_TEST

Suite *suite_autodiff(void) {
  Suite *s = suite_create("autodiff");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, gradient_matches_finite_differences, 0, (int)(sizeof cases / sizeof cases[0]));
  tcase_add_test(tc, no_gradient_through_argmax);
  tcase_add_test(tc, untrained_loss_warns);
  tcase_add_test(tc, matmul_weight_grad_is_one_gemm);
  tcase_add_test(tc, matmul_flat_grad_matches_batched);
  suite_add_tcase(s, tc);
  return s;
}
