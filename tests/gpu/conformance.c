/* tests/gpu/conformance.c: the backend conformance suite (ARCHITECTURE.md,
 * convention 8; modeled on ggml's test-backend-ops): every op of the
 * registry that has a CPU kernel runs on the CPU kernel directly and on a
 * backend's kernel through the backend interface (alloc, copy_from_host,
 * launch of tfg_backend_kernel(b, node), copy_to_host, synchronize), on
 * the same random inputs, and the two results are compared within a
 * tolerance stated, with its reason, beside each class of op below.
 *
 *   build/tests/gpu/conformance                    # the first CUDA device (cuda:0)
 *   build/tests/gpu/conformance --devices host     # against the host backend (a self-test)
 *   build/tests/gpu/conformance -q matmul conv2d   # only these ops; failures and the summary
 *   build/tests/gpu/conformance errors             # only the bad-data cases
 *
 * Coverage. main() walks the registry (TFG_OP_COUNT): every op with a CPU
 * kernel must have an entry in `families` below, and that entry must run
 * at least one case, or the op is reported as a failure, so an op added to
 * the registry cannot be forgotten here. The sources INPUT, PARAM and
 * STATE have no kernel; CONST has a CPU kernel but is never launched (the
 * executor copies its payload with copy_from_host, runtime/exec.c), so it
 * is skipped too. Gradient ops (relu_grad, conv2d_grad_*, ...) and the
 * optimizer updates are rows of the registry like any other.
 *
 * Cases. Each case builds a small graph: INPUT nodes with the inputs'
 * dtypes and shapes, then the node under test with raw attrs, normalized
 * by the op's own shape rule (the registry's infer), exactly as a program
 * would build it. Shapes per op: odd sizes, broadcasting where the op
 * broadcasts, and one input or output over 1M elements for the
 * elementwise ops and the reductions. Dtypes: each family lists the
 * candidates; those the shape rule or the CPU kernel refuses ("... is not
 * supported on the CPU") are skipped and counted, so the GPU is held to
 * exactly the dtypes the CPU supports (f32 is never skipped: a refusal
 * there is a broken case, reported as a failure). Inputs come from
 * base/rng.h streams with fixed seeds: valid ids and labels for integer
 * inputs, positive values where the op needs them (log, sqrt, rsqrt, pow's
 * base). Outputs on the device are poisoned (0xFF bytes) before the
 * launch, so an element the kernel does not write shows as a mismatch.
 * Optimizer updates run three steps (ctx->step 1, 2, 3) in place and
 * compare the updated parameter and state buffers. f16 and bf16 are run
 * wherever the CPU supports them (it computes them in f32, as the CUDA
 * kernels do, natively or staged: kernels/cuda/cuda.h), under the f32
 * tolerance plus one ulp of the format (below). On a GPU only: f32 matmul
 * with TF32 on a second backend of the device made with
 * tfg_backend_opts.tf32 (--tf32). Last, bad data (an id or label out of
 * range): both sides must fail with the same status.
 *
 * Output: one line per case, `PASS|FAIL op dtype shapes attrs error
 * tolerance`, a summary, exit status 1 on any failure. Without a device
 * (tfg_backend_new returns NULL: no GPU, no driver, or a build without
 * CUDA) it prints exactly one line, `SKIP: no CUDA device (REASON)`, and
 * exits 0. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/rng.h"
#include "base/strbuf.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "kernels/fused.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/registry.h"
#include "tests/gpu/gpu_test.h"

enum { MAXIN = 8, MAXLAUNCH = 4 };

/* ---- tolerances -------------------------------------------------------------
 *
 * Every comparison is one of three kinds:
 *   EXACT  equal values: integers and bools byte for byte, floats as values
 *          (NaN equals NaN, -0 equals +0) because the ops compared so are
 *          either pure data movement, integer arithmetic, single correctly
 *          rounded IEEE operations (add, sub, mul, neg, abs, max, ...), or
 *          the counter-based random numbers of base/rng.h, which the CUDA
 *          kernels compute with the very functions the CPU does;
 *   REL    |got - want| <= tol * max(|want|, floor * max|want|): relative
 *          per element, except that elements far below the tensor's
 *          largest (floor, a fraction of it) are held to an absolute error
 *          at that scale, since a consumer adds them to values that large;
 *   COND   |got - want| <= tol * cond, cond being the same op run on the
 *          CPU with its float inputs replaced by their absolute values:
 *          sum |x| for a sum, (|A| |B|) for a product, the standard
 *          forward-error bound of a sum of products in any order. It makes
 *          outputs that cancel to near zero comparable, whatever the
 *          summation order of either side.
 * f16 and bf16 outputs (and in-place inputs) are computed in f32 (or
 * double) on both sides and rounded once to the 16-bit format, to
 * nearest even (kernels/cpu/half.c, kernels/cuda/half.cu). Where the two
 * f32 values are equal so are the rounded ones: EXACT stays exact (data
 * movement, integer-valued sums, and the single correctly rounded
 * operations, whose widened-f32-then-rounded result is the correctly
 * rounded 16-bit one on both sides, f32 carrying more than 2p + 2 bits).
 * Elsewhere the f32 values may differ by the f32 tolerance d and then
 * straddle a rounding boundary: rounding is monotone and moves each by
 * at most half an ulp, so the 16-bit results differ by at most d + 1 ulp,
 * and, being both on the format's grid, by exactly one ulp when d is
 * below an ulp: the REL and COND tolerances of 16-bit values are the f32
 * ones (carried through) plus one ulp of the format at the element,
 * half_ulp: 2^-10 of its binade's base for f16 (2^-24 absolute in its
 * subnormal range, below 2^-14) and 2^-7 for bf16 (2^-133 below 2^-126).
 * The printed error is what exceeds that ulp, in the f32 tolerance's
 * units.
 * The unit roundoffs: */
#define U32 0x1p-24 /* 5.96e-8 */
#define U64 0x1p-53 /* 1.11e-16 */

typedef enum tol_kind { TOL_EXACT, TOL_REL, TOL_COND } tol_kind;

typedef struct tol {
  tol_kind kind;
  double f32, f64; /* the tolerance for outputs of each width (f16/bf16: f32's plus one ulp, above) */
  double floor;    /* REL and COND: fraction of the largest magnitude below which errors are absolute */
} tol;

static const tol T_EXACT = {TOL_EXACT, 0, 0, 0};
/* A result one or two roundings apart (a quotient rounded once from double
 * on the CPU, directly on the GPU, or through a reciprocal): 2 ulp. */
static const tol T_ULP2 = {TOL_REL, 0x1p-22, 0x1p-51, 0};
/* Transcendentals: CUDA's single-precision expf, tanhf, rsqrtf are within
 * 2 ulp, logf 1, powf and erfcf 4; glibc's within 1. That is ~6e-7 at
 * worst; 1e-5 leaves room for an argument formed differently (gelu's
 * x / sqrt 2 rounded to f32 before erfcf: its condition grows like 2z^2)
 * and still catches any wrong formula. f64: the brief's 1e-12 (CUDA's
 * double functions are within 1-2 ulp = 2-4e-16). */
static const tol T_MATH = {TOL_REL, 1e-5, 1e-12, 0};
/* Neural-network ops built from exp and log plus sums along a row
 * (softmax, log_softmax, layer_norm and their gradients, the losses): the
 * CPU sums in double, the GPU in f32 or any order; llm.c's 1e-4 relative
 * for f32 outputs of this kind. log_softmax and layer_norm's gradient
 * cancel to near zero, so values below 1e-3 of the largest are compared
 * at that scale. */
static const tol T_NN = {TOL_REL, 1e-4, 1e-12, 1e-3};
/* Optimizer updates: a dozen roundings per element per step, and nvcc
 * contracts a * b + c into one FMA where the CPU (ISO C, no contraction)
 * rounds twice: an ulp or two per operation over three steps; Adam's bias
 * corrections are formed on the device with CUDA's pow (within 2 ulp of
 * glibc's, kernels/optim_math.h), an ulp of the step size. The state
 * (m, the momentum buffer) can cancel to near zero: floor 1e-3. */
static const tol T_OPTIM = {TOL_REL, 1e-5, 1e-12, 1e-3};
/* Matrix products and convolutions, against (|A| |B|): f32 without TF32
 * 1e-4 (the probabilistic bound of a dot product of K terms in any order,
 * ~6 sqrt(K) u, is 1.1e-5 at K = 1024; 1e-4 covers K to ~80000, and the
 * error of cuDNN's Winograd and FFT algorithms, ~1e-5 of the operands'
 * scale). TF32 rounds each operand to a 10-bit mantissa (2^-11 relative
 * each, ~1e-3 per product): it needs T_TF32, and an f32 conv or matmul
 * that fails T_GEMM at ~1e-3 used TF32 without being asked to (--tf32). */
static const tol T_GEMM = {TOL_COND, 1e-4, 1e-12, 0};
static const tol T_TF32 = {TOL_COND, 1e-2, 1e-12, 0};
/* Random numbers that pass through a transcendental: normal() and he()
 * are Box-Muller on uniform draws, sqrt(-2 log u1) cos(2 pi u2), in
 * double on both sides; CUDA's double log is within 1 ulp and cos within
 * 2 of glibc's, so the doubles may differ in their last bits and an f32
 * value, rounded from them, by one ulp where they straddle a rounding
 * boundary. cos near its zeros is only absolutely accurate: floor 1e-3. */
static const tol T_NORMAL = {TOL_REL, 0x1p-22, 1e-12, 1e-3};

/* A sum of n terms in any order, relative to sum |x| (COND): both sides'
 * rounding errors, each within (n - 1) u sum|x| (deterministic) and, in
 * practice, 6 sqrt(n) u sum|x| (Higham and Mary's probabilistic bound,
 * holding with overwhelming probability; the deterministic one is
 * useless past a few thousand terms): the smaller, doubled, plus a
 * rounding for a mean's division. It grows with n: 1.2e-6 of sum|x| for 9
 * f32 terms, 1.5e-3 for 4M. Dropped or doubled terms are caught exactly
 * by the integer-valued sums (see fam_reduce). */
static tol t_sum(int64_t n) {
  double k = fmin((double)n, 6.0 * sqrt((double)n));
  return (tol){TOL_COND, 2 * U32 * (k + 1), 2 * U64 * (k + 1), 0};
}

/* ---- the suite's state -------------------------------------------------------- */

static struct {
  const tfg_device *dev;
  tfg_switches sw;        /* the TFG_* switches (gpu_test_switches): every backend's */
  tfg_backend *b;         /* the backend under test (tfg_backend_new, default options but sw) */
  tfg_stream *s;
  tfg_backend *b_tf32;    /* the same device with --tf32 (tfg_backend_opts.tf32), made on first use */
  tfg_stream *s_tf32;
  tfg_backend *b_ref;     /* the same device with the switch no_attention_tiled, made on first use */
  tfg_stream *s_ref;
  bool reference;         /* cases run on b_ref (attention's reference kernels), not b */
  tfg_pool *pool;
  const char *const *only; /* op names to run (NULL: all) */
  int nonly;
  bool quiet;
  int cases, passed, failed, skipped;
  int op_cases;      /* cases run for the current op */
  uint64_t seed;     /* the next input's stream */
  uint32_t op_serial;
} S;

/* ---- tensors ----------------------------------------------------------------- */

static tfg_shape shape_of(int rank, const int64_t *d) {
  tfg_shape s = {.rank = rank};
  for (int i = 0; i < rank; i++) s.dim[i] = d[i];
  return s;
}
#define SH(...) shape_of((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
static const tfg_shape SCALAR = {.rank = 0};

static size_t nbytes(const tfg_tensor *t) { return (size_t)tfg_shape_numel(&t->shape) * tfg_dtype_size(t->dtype); }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "conformance: out of host memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

static tfg_tensor tensor_new(tfg_dtype dt, tfg_shape s) {
  tfg_tensor t = {.dtype = dt, .shape = s};
  t.data = xmalloc(nbytes(&t));
  memset(t.data, 0, nbytes(&t) ? nbytes(&t) : 1);
  return t;
}

static tfg_tensor tensor_dup(const tfg_tensor *t) {
  tfg_tensor c = *t;
  c.data = xmalloc(nbytes(t));
  memcpy(c.data, t->data, nbytes(t));
  return c;
}

/* src converted to dtype dt by the CPU cast kernel (the one conversion
 * every dtype has). */
static tfg_tensor tensor_cast(const tfg_tensor *src, tfg_dtype dt) {
  tfg_tensor out = tensor_new(dt, src->shape);
  tfg_node n = {.op = TFG_OP_CAST, .dtype = dt, .shape = src->shape, .ninputs = 1};
  n.attrs.dtype = dt;
  tfg_kernel_ctx ctx = {.pool = S.pool};
  if (tfg_cpu_cast(&ctx, &n, src, &out) != TFG_OK) {
    fprintf(stderr, "conformance: cast to %s failed: %s\n", tfg_dtype_name(dt), ctx.err.data ? ctx.err.data : "");
    exit(1);
  }
  tfg_strbuf_free(&ctx.err);
  return out;
}

/* ---- input generators ------------------------------------------------------------ */

typedef enum gen_kind {
  G_UNIFORM,  /* uniform in [lo, hi) */
  G_INTS,     /* integers in [lo, hi], uniform */
  G_NONZERO,  /* integers in [lo, hi] with lo >= 1, each with a random sign: divisors */
  G_SPECIAL,  /* the special values of `specials` first, then uniform in [lo, hi) */
  G_NAN,      /* uniform in [lo, hi) with every 37th element NaN */
  G_INTEDGE,  /* integers in [lo, hi], then the dtype's minimum, -1 and maximum first */
  G_BIGINT,   /* i64: values past 2^53 and the extremes, then random 64-bit values */
  G_ABSOLUTE, /* internal: |x| of an existing tensor (COND bounds) */
} gen_kind;

typedef struct gen {
  gen_kind kind;
  double lo, hi;
} gen;

#define UNI(lo, hi) ((gen){G_UNIFORM, (lo), (hi)})
#define INTS(lo, hi) ((gen){G_INTS, (lo), (hi)})

/* Values where conversions and sign-sensitive ops differ if they differ at
 * all: signed zeros, ties for rounding to integers and to f16/bf16
 * (1 + 2^-8 is a bf16 tie, 1 + 2^-11 an f16 one), the f16 overflow
 * boundary (65504 is its largest, 65520 rounds to infinity), subnormals
 * of f16, the f32 range end, infinities, NaN, the int32 and int64 range
 * ends (saturation), and 1/3. */
static const double specials[] = {
    0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 1.0 + 0x1p-11, 1.0 + 0x1p-11 + 0x1p-30,
    65504.0, 65519.0, 65520.0, 1e-8, 6e-8, -1e-7, 3.4e38, 1e39, INFINITY, -INFINITY, NAN, 2147483647.5,
    -2147483648.5, 3e9, 1e19, -1e19, 0x1p63, 1.0 / 3.0, -1.0 / 3.0, 1e-40, 255.5, -129.0,
};
#define NSPECIALS ((int)(sizeof specials / sizeof specials[0]))

/* Fills t (any dtype) from g with stream seed: values are made in double
 * and converted by the CPU cast (truncation toward zero for integers,
 * nonzero is true for bool). */
static void fill(tfg_tensor *t, gen g, uint64_t seed) {
  int64_t n = tfg_shape_numel(&t->shape);
  if (g.kind == G_BIGINT && t->dtype == TFG_DTYPE_I64) {
    static const int64_t big[] = {((int64_t)1 << 53) + 1, ((int64_t)1 << 60) + 3, INT64_MIN, INT64_MAX,
                                  -(((int64_t)1 << 53) + 1), 16777217, -16777217, 0, 1, -1};
    int64_t *v = t->data;
    for (int64_t i = 0; i < n; i++)
      v[i] = i < (int64_t)(sizeof big / sizeof big[0]) ? big[i] : (int64_t)tfg_rng_bits(seed, (uint64_t)i);
    return;
  }
  tfg_tensor d = tensor_new(TFG_DTYPE_F64, t->shape);
  double *v = d.data;
  for (int64_t i = 0; i < n; i++) {
    double u = tfg_rng_uniform(seed, (uint64_t)i);
    switch (g.kind) {
    case G_INTS:
    case G_INTEDGE: v[i] = floor(g.lo + (g.hi - g.lo + 1) * u); break;
    case G_NONZERO: {
      double m = floor(g.lo + (g.hi - g.lo + 1) * u);
      v[i] = tfg_rng_uniform(seed ^ 0x5151, (uint64_t)i) < 0.5 ? -m : m;
      break;
    }
    case G_SPECIAL: v[i] = i < NSPECIALS ? specials[i] : g.lo + (g.hi - g.lo) * u; break;
    case G_NAN: v[i] = i % 37 == 5 ? NAN : g.lo + (g.hi - g.lo) * u; break;
    case G_BIGINT: v[i] = floor(-2e9 + 4e9 * u); break; /* not i64: a wide range of integers */
    default: v[i] = g.lo + (g.hi - g.lo) * u; break;
    }
  }
  if (g.kind == G_NONZERO && n > 0) v[0] = -1; /* INT_MIN / -1 wraps (G_INTEDGE puts INT_MIN first) */
  tfg_tensor c = tensor_cast(&d, t->dtype);
  memcpy(t->data, c.data, nbytes(t));
  free(c.data);
  free(d.data);
  if (g.kind == G_INTEDGE && n >= 3) {
    if (t->dtype == TFG_DTYPE_I32) {
      int32_t *p = t->data;
      p[0] = INT32_MIN, p[1] = -1, p[2] = INT32_MAX;
    } else if (t->dtype == TFG_DTYPE_I64) {
      int64_t *p = t->data;
      p[0] = INT64_MIN, p[1] = -1, p[2] = INT64_MAX;
    }
  }
}

/* |x| of a float tensor (others returned as copies). */
static tfg_tensor tensor_abs(const tfg_tensor *t) {
  tfg_tensor c = tensor_dup(t);
  int64_t n = tfg_shape_numel(&t->shape);
  if (t->dtype == TFG_DTYPE_F32)
    for (int64_t i = 0; i < n; i++) ((float *)c.data)[i] = fabsf(((float *)c.data)[i]);
  else if (t->dtype == TFG_DTYPE_F64)
    for (int64_t i = 0; i < n; i++) ((double *)c.data)[i] = fabs(((double *)c.data)[i]);
  else if (t->dtype == TFG_DTYPE_F16 || t->dtype == TFG_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) ((uint16_t *)c.data)[i] &= 0x7FFF; /* the sign bit */
  return c;
}

/* ---- a case ----------------------------------------------------------------------- */

typedef struct tcase {
  tfg_dtype dt; /* the dtype the family is probing (the line's dtype column) */
  bool must;    /* a refusal of dt is a broken case, not a dtype to skip (f32: always) */
  tfg_graph *g;
  tfg_diag *d;
  int nin;
  tfg_node_id in_id[MAXIN];
  tfg_tensor in[MAXIN]; /* host values of the INPUT nodes */
  tfg_node_id node;     /* the node under test: the last one added */
  bool refused;         /* a shape rule refused a node */
  char desc[160];       /* attrs worth naming on the line */
  /* the kernel context of each launch: step + k for launch k */
  bool training;
  int64_t step;
  uint64_t seed;
  int launches;
  uint32_t inplace; /* bit k: input k is updated in place, compared too */
  uint32_t absmask; /* COND: which inputs enter the bound as |x| (0: every float input) */
  bool tf32;        /* the GPU side runs with TF32 allowed */
  tfg_fused_prog prog; /* FUSED: the chain's program (the node's attrs.data) */
} tcase;

static tcase tc_new(tfg_dtype dt) {
  tcase c = {.dt = dt, .must = dt == TFG_DTYPE_F32, .step = 1, .launches = 1};
  c.g = tfg_graph_new();
  c.d = tfg_diag_new();
  return c;
}

static void tc_free(tcase *c) {
  for (int k = 0; k < c->nin; k++) free(c->in[k].data);
  tfg_graph_free(c->g);
  tfg_diag_free(c->d);
}

static void tc_desc(tcase *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tc_desc(tcase *c, const char *fmt, ...) {
  size_t len = strlen(c->desc);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->desc + len, sizeof c->desc - len, fmt, ap);
  va_end(ap);
}

/* An INPUT node of dtype dt and shape s with values from g. */
static tfg_node_id tc_in(tcase *c, tfg_dtype dt, tfg_shape s, gen g) {
  if (c->nin == MAXIN) {
    fprintf(stderr, "conformance: too many inputs\n");
    exit(1);
  }
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(c->g, TFG_OP_INPUT, NULL, 0, &loc);
  tfg_node *n = tfg_graph_node(c->g, id);
  n->dtype = dt;
  n->shape = s;
  n->name = "x";
  tfg_tensor t = tensor_new(dt, s);
  fill(&t, g, tfg_rng_mix(S.seed++));
  c->in_id[c->nin] = id;
  c->in[c->nin++] = t;
  return id;
}

/* Adds op over the given inputs with attrs a (NULL: none) and runs its
 * shape rule; a refusal marks the case (see tc_check). */
static tfg_node_id tc_opv(tcase *c, tfg_op_id op, const tfg_attrs *a, int n, const tfg_node_id *ins) {
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(c->g, op, ins, n, &loc);
  tfg_node *nd = tfg_graph_node(c->g, id);
  if (a) nd->attrs = *a;
  if (!c->refused && tfg_op_get(op)->infer(c->g, nd, c->d) != TFG_OK) c->refused = true;
  c->node = id;
  return id;
}

static tfg_node_id tc_op(tcase *c, tfg_op_id op, const tfg_attrs *a, int n, ...) {
  tfg_node_id ins[MAXIN];
  va_list ap;
  va_start(ap, n);
  for (int k = 0; k < n; k++) ins[k] = va_arg(ap, tfg_node_id);
  va_end(ap);
  return tc_opv(c, op, a, n, ins);
}

/* The tensors of node's inputs (host values). */
static void node_inputs(const tcase *c, const tfg_node *nd, tfg_tensor *in) {
  for (int k = 0; k < nd->ninputs; k++) {
    int j = 0;
    while (j < c->nin && c->in_id[j] != nd->inputs[k]) j++;
    if (j == c->nin) {
      fprintf(stderr, "conformance: input %d of %s is not an INPUT node\n", k, tfg_op_get(nd->op)->name);
      exit(1);
    }
    in[k] = c->in[j];
  }
}

/* ---- running -------------------------------------------------------------------------- */

/* Runs the CPU kernel c->launches times; in[] are owned copies the
 * in-place ops update. Returns the status, the message in *msg. */
static tfg_status run_cpu(const tcase *c, const tfg_node *nd, tfg_tensor *in, tfg_tensor *out, tfg_strbuf *msg) {
  tfg_kernel_fn fn = tfg_cpu_kernel(nd->op);
  tfg_status st = TFG_OK;
  for (int l = 0; l < c->launches && st == TFG_OK; l++) {
    tfg_kernel_ctx ctx = {.pool = S.pool, .training = c->training, .step = c->step + l, .seed = c->seed};
    st = fn(&ctx, nd, in, out);
    if (st != TFG_OK && ctx.err.data) tfg_strbuf_puts(msg, ctx.err.data);
    tfg_strbuf_free(&ctx.err);
  }
  return st;
}

/* *b and *s: another backend of the device, with options o, and its
 * stream, made on the first call (false with *why when it cannot be). */
static bool other_backend(tfg_backend **b, tfg_stream **s, const tfg_backend_opts *o, tfg_strbuf *why) {
  if (!*b) {
    *b = tfg_backend_new(S.dev, o, why);
    if (!*b) return false;
    *s = tfg_backend_stream_create(*b);
  }
  return true;
}

/* The backend and stream a case runs on: a second backend of the same
 * device, created with tfg_backend_opts.tf32, for the TF32 cases; a third
 * with the switch no_attention_tiled while S.reference is set. NULL with
 * *why when it cannot be made. */
static tfg_backend *backend_for(const tcase *c, tfg_stream ***s, tfg_strbuf *why) {
  if (c->tf32) {
    tfg_backend_opts o = {.tf32 = true, .sw = S.sw};
    *s = &S.s_tf32;
    return other_backend(&S.b_tf32, &S.s_tf32, &o, why) ? S.b_tf32 : NULL;
  }
  if (S.reference) {
    tfg_backend_opts o = {.sw = S.sw};
    o.sw.no_attention_tiled = true;
    *s = &S.s_ref;
    return other_backend(&S.b_ref, &S.s_ref, &o, why) ? S.b_ref : NULL;
  }
  *s = &S.s;
  return S.b;
}

/* Runs nd on the backend: uploads in[], poisons the output, launches
 * c->launches times, downloads the output into out->data and the in-place
 * inputs into in[k].data. */
static tfg_status run_backend(const tcase *c, const tfg_node *nd, tfg_tensor *in, tfg_tensor *out, tfg_strbuf *msg) {
  tfg_stream **sp;
  tfg_backend *b = backend_for(c, &sp, msg);
  if (!b) return TFG_ERR_DEVICE;
  tfg_stream *s = *sp;
  tfg_kernel_fn fn = tfg_backend_kernel(b, nd);
  if (!fn) {
    tfg_strbuf_printf(msg, "the %s backend has no kernel for %s", tfg_backend_name(b), tfg_op_get(nd->op)->name);
    return TFG_ERR_DEVICE;
  }
  tfg_tensor din[MAXIN], dout = *out;
  void *bufs[MAXIN + 1] = {0};
  int nbuf = 0;
  tfg_status st = TFG_OK;
  for (int k = 0; k < nd->ninputs; k++) {
    din[k] = in[k];
    size_t bytes = nbytes(&in[k]);
    din[k].data = bufs[nbuf++] = tfg_backend_alloc(b, bytes ? bytes : 16);
    if (!din[k].data) st = TFG_ERR_OOM;
    else if (bytes) tfg_backend_copy_from_host(b, s, din[k].data, in[k].data, bytes);
  }
  size_t obytes = nbytes(out);
  dout.data = bufs[nbuf++] = tfg_backend_alloc(b, obytes ? obytes : 16);
  if (!dout.data) st = TFG_ERR_OOM;
  void *poison = xmalloc(obytes);
  memset(poison, 0xFF, obytes ? obytes : 1);
  tfg_kernel_ctx ctx[MAXLAUNCH];
  memset(ctx, 0, sizeof ctx);
  if (st == TFG_OK) {
    if (obytes) tfg_backend_copy_from_host(b, s, dout.data, poison, obytes);
    for (int l = 0; l < c->launches; l++) {
      ctx[l] = (tfg_kernel_ctx){.training = c->training, .step = c->step + l, .seed = c->seed};
      /* a GPU's kernels read the step on the device (backend.h's caps.device_step), as the executor sets it */
      if (tfg_backend_get_caps(b)->device_step) tfg_backend_set_step(b, s, ctx[l].step, ctx[l].seed);
      tfg_backend_launch(b, s, fn, &ctx[l], nd, din, &dout);
    }
    if (obytes) tfg_backend_copy_to_host(b, s, out->data, dout.data, obytes);
    for (int k = 0; k < nd->ninputs; k++)
      if ((c->inplace >> k & 1) && nbytes(&in[k]))
        tfg_backend_copy_to_host(b, s, in[k].data, din[k].data, nbytes(&in[k]));
    st = tfg_backend_synchronize(b, s, msg);
    if (st != TFG_OK) { /* a failed stream stays failed (backend.h): the next case gets a fresh one */
      tfg_backend_stream_free(b, s);
      *sp = tfg_backend_stream_create(b);
    }
  } else if (st == TFG_ERR_OOM) {
    tfg_strbuf_printf(msg, "device memory for the case could not be allocated");
  }
  for (int l = 0; l < MAXLAUNCH; l++) tfg_strbuf_free(&ctx[l].err);
  for (int k = 0; k < nbuf; k++)
    if (bufs[k]) tfg_backend_free(b, bufs[k]);
  free(poison);
  return st;
}

/* ---- comparing ---------------------------------------------------------------------------- */

static bool is_float_dtype(tfg_dtype t) { return tfg_dtype_is_float(t); }

/* Every element of t as a double (f16 and bf16 decoded by the CPU cast). */
static double *as_f64(const tfg_tensor *t) {
  tfg_tensor d = tensor_cast(t, TFG_DTYPE_F64);
  return d.data;
}

static double tol_for(tol t, tfg_dtype dt) { return dt == TFG_DTYPE_F64 ? t.f64 : t.f32; }

static bool is_half_dtype(tfg_dtype t) { return t == TFG_DTYPE_F16 || t == TFG_DTYPE_BF16; }

/* One ulp of f16 or bf16 at magnitude x (finite): the spacing of the
 * format's values in x's binade, or in its subnormal range below the
 * smallest normal (see the tolerances at the top). */
static double half_ulp(tfg_dtype dt, double x) {
  int mbits = dt == TFG_DTYPE_F16 ? 10 : 7, emin = dt == TFG_DTYPE_F16 ? -14 : -126;
  int e;
  (void)frexp(x, &e); /* x = m 2^e, m in [0.5, 1): the binade's base is 2^(e - 1) */
  if (x == 0 || e - 1 < emin) e = emin + 1;
  return ldexp(1.0, e - 1 - mbits);
}

/* The outcome of one comparison: err is the largest error in the units of
 * the tolerance (EXACT: the number of differing elements). */
typedef struct verdict {
  bool ok;
  double err, tol;
  int64_t at;       /* the first element out of tolerance, or -1 */
  double want, got; /* its values */
  const char *what; /* which tensor ("out", "in[0]" of an in-place update) */
} verdict;

static verdict compare(const tfg_tensor *want, const tfg_tensor *got, const tfg_tensor *cond, tol t, const char *what) {
  verdict v = {.ok = true, .at = -1, .what = what, .tol = tol_for(t, want->dtype)};
  int64_t n = tfg_shape_numel(&want->shape);
  if (n == 0) return v;
  if (t.kind == TOL_EXACT && !is_float_dtype(want->dtype)) {
    size_t es = tfg_dtype_size(want->dtype);
    const char *a = want->data, *b = got->data;
    for (int64_t i = 0; i < n; i++)
      if (memcmp(a + (size_t)i * es, b + (size_t)i * es, es) != 0) {
        if (v.at < 0) {
          v.at = i;
          double *wa = as_f64(want), *ga = as_f64(got);
          v.want = wa[i], v.got = ga[i];
          free(wa);
          free(ga);
        }
        v.err += 1;
      }
    v.ok = v.err == 0;
    return v;
  }
  double *w = as_f64(want), *g = as_f64(got), *cd = cond ? as_f64(cond) : NULL;
  double top = 0;
  const double *scale = cd ? cd : w;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(scale[i]) && fabs(scale[i]) > top) top = fabs(scale[i]);
  double floor_abs = fmax(t.floor * top, 1e-300);
  bool half = is_half_dtype(want->dtype);
  for (int64_t i = 0; i < n; i++) {
    double e;
    if (w[i] == g[i] || (isnan(w[i]) && isnan(g[i]))) e = 0;
    else if (t.kind == TOL_EXACT || !isfinite(w[i]) || !isfinite(g[i])) e = INFINITY;
    else {
      /* 16-bit: the one ulp both sides' roundings may be apart is allowed on top */
      double slack = half ? half_ulp(want->dtype, fmax(fabs(w[i]), fabs(g[i]))) : 0;
      e = fmax(fabs(g[i] - w[i]) - slack, 0) / fmax(fabs(scale[i]), floor_abs);
    }
    if (t.kind == TOL_EXACT) {
      if (e != 0) v.err += 1;
    } else if (e > v.err || isnan(e)) {
      v.err = isnan(e) ? INFINITY : e;
    }
    if (v.at < 0 && (t.kind == TOL_EXACT ? e != 0 : !(e <= v.tol))) {
      v.at = i;
      v.want = w[i];
      v.got = g[i];
    }
  }
  v.ok = v.at < 0;
  free(w);
  free(g);
  free(cd);
  return v;
}

/* The 16-bit tolerance on values made to straddle it: one ulp apart
 * passes under a tolerance far below an ulp, two ulps apart fails (f16 at
 * 1 and in its subnormal range, bf16 at 1). false, with why, when the
 * comparison does not hold the line the comment at the top draws. */
static bool check_half_tolerance(const char **why) {
  static const struct {
    tfg_dtype dt;
    double want, got;
    bool ok;
  } pairs[] = {
      {TFG_DTYPE_F16, 1.0, 1.0 + 0x1p-10, true},  {TFG_DTYPE_F16, 1.0, 1.0 + 0x1p-9, false},
      {TFG_DTYPE_F16, 0x1p-20, 0x1p-20 + 0x1p-24, true}, {TFG_DTYPE_F16, 0x1p-20, 0x1p-20 + 0x1p-23, false},
      {TFG_DTYPE_BF16, -3.0, -3.0 - 0x1p-6, true}, {TFG_DTYPE_BF16, -3.0, -3.0 - 0x1p-5, false},
  };
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    tfg_tensor w64 = tensor_new(TFG_DTYPE_F64, SH(1)), g64 = tensor_new(TFG_DTYPE_F64, SH(1));
    *(double *)w64.data = pairs[k].want;
    *(double *)g64.data = pairs[k].got;
    tfg_tensor w = tensor_cast(&w64, pairs[k].dt), g = tensor_cast(&g64, pairs[k].dt);
    verdict v = compare(&w, &g, NULL, (tol){TOL_REL, 1e-9, 1e-9, 0}, "out");
    free(w64.data), free(g64.data), free(w.data), free(g.data);
    if (v.ok != pairs[k].ok) {
      *why = pairs[k].ok ? "one ulp of a 16-bit output is not allowed" : "two ulps of a 16-bit output pass";
      return false;
    }
  }
  return true;
}

/* ---- reporting -------------------------------------------------------------------------------- */

static const char *tol_name(tol_kind k) { return k == TOL_EXACT ? "exact" : k == TOL_REL ? "rel" : "cond"; }

/* The case's shapes: "f32[33,65] f32[65] -> f32[33,65]". */
static void describe(const tcase *c, tfg_strbuf *b) {
  const tfg_node *nd = &c->g->nodes[c->node];
  for (int k = 0; k < nd->ninputs; k++) {
    if (k) tfg_strbuf_putc(b, ' ');
    const tfg_node *x = &c->g->nodes[nd->inputs[k]];
    tfg_shape_format(b, x->dtype, &x->shape);
  }
  tfg_strbuf_puts(b, nd->ninputs ? " -> " : "-> ");
  tfg_shape_format(b, nd->dtype, &nd->shape);
  if (c->desc[0]) tfg_strbuf_printf(b, " %s", c->desc);
}

static void report(const tcase *c, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const tcase *c, bool ok, const char *fmt, ...) {
  S.cases++;
  S.op_cases++;
  if (ok) S.passed++;
  else S.failed++;
  if (ok && S.quiet) return;
  tfg_strbuf shapes = {0};
  describe(c, &shapes);
  const tfg_node *nd = &c->g->nodes[c->node];
  printf("%s %-19s %-4s %s  ", ok ? "PASS" : "FAIL", tfg_op_get(nd->op)->name, tfg_dtype_name(c->dt), shapes.data);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
  tfg_strbuf_free(&shapes);
}

/* ---- checking a case ------------------------------------------------------------------------------ */

/* The CPU's reference output for c (and, for COND, the bound's), into
 * *want and *cond; the in-place inputs' updated values into cin[]. */
static tfg_status reference(tcase *c, const tfg_node *nd, const tfg_tensor *in, tfg_tensor *cin, tfg_tensor *want,
                            tfg_tensor *cond, tol t, tfg_strbuf *msg) {
  for (int k = 0; k < nd->ninputs; k++) cin[k] = tensor_dup(&in[k]);
  *want = tensor_new(nd->dtype, nd->shape);
  tfg_status st = run_cpu(c, nd, cin, want, msg);
  if (st == TFG_OK && t.kind == TOL_COND) {
    tfg_tensor ain[MAXIN];
    for (int k = 0; k < nd->ninputs; k++) {
      bool take = c->absmask ? (c->absmask >> k & 1) : is_float_dtype(cin[k].dtype);
      ain[k] = take ? tensor_abs(&cin[k]) : tensor_dup(&cin[k]);
    }
    *cond = tensor_new(nd->dtype, nd->shape);
    tcase once = *c;
    once.launches = 1;
    st = run_cpu(&once, nd, ain, cond, msg);
    for (int k = 0; k < nd->ninputs; k++) free(ain[k].data);
  }
  return st;
}

/* Runs case c against tolerance t, prints its line and frees it. */
static void tc_check(tcase *c, tol t) {
  bool must = c->must;
  tfg_strbuf msg = {0};
  if (c->refused) {
    if (must) {
      diag_text(c->d, &msg);
      report(c, false, "the shape rule refused the case: %s", msg.data ? msg.data : "");
    } else {
      S.skipped++;
    }
    tfg_strbuf_free(&msg);
    tc_free(c);
    return;
  }
  const tfg_node *nd = &c->g->nodes[c->node];
  tfg_tensor in[MAXIN], cin[MAXIN], gin[MAXIN], want, cond = {0};
  node_inputs(c, nd, in);
  tfg_status st = reference(c, nd, in, cin, &want, &cond, t, &msg);
  if (st != TFG_OK) {
    if (!must && st == TFG_ERR_DEVICE && msg.data && strstr(msg.data, "on the CPU")) S.skipped++;
    else report(c, false, "the CPU reference failed: %s: %s", tfg_status_str(st), msg.data ? msg.data : "");
  } else {
    for (int k = 0; k < nd->ninputs; k++) gin[k] = tensor_dup(&in[k]);
    tfg_tensor got = tensor_new(nd->dtype, nd->shape);
    st = run_backend(c, nd, gin, &got, &msg);
    if (st != TFG_OK) {
      report(c, false, "%s failed: %s: %s", tfg_backend_name(S.b), tfg_status_str(st), msg.data ? msg.data : "");
    } else {
      verdict worst = compare(&want, &got, cond.data ? &cond : NULL, t, "out");
      static const char *const names[MAXIN] = {"in0", "in1", "in2", "in3", "in4", "in5", "in6", "in7"};
      for (int k = 0; k < nd->ninputs; k++) {
        if (!(c->inplace >> k & 1)) continue;
        verdict v = compare(&cin[k], &gin[k], NULL, t, names[k]);
        if ((!v.ok && worst.ok) || (v.ok == worst.ok && v.err > worst.err)) worst = v;
      }
      int64_t n = tfg_shape_numel(&want.shape);
      for (int k = 0; k < nd->ninputs; k++)
        if (c->inplace >> k & 1) n += tfg_shape_numel(&cin[k].shape);
      if (t.kind == TOL_EXACT) {
        if (worst.ok)
          report(c, true, "exact: all %lld equal", (long long)n);
        else
          report(c, false, "exact: %.0f of %lld differ; %s[%lld]: want %.17g got %.17g", worst.err, (long long)n,
                 worst.what, (long long)worst.at, worst.want, worst.got);
      } else {
        /* 16-bit values: the error beyond the one ulp allowed on top of the tolerance */
        const char *ulp = is_half_dtype(want.dtype) ? " + 1 ulp" : "";
        if (worst.ok)
          report(c, true, "err %.2e tol %.1e%s %s", worst.err, worst.tol, ulp, tol_name(t.kind));
        else
          report(c, false, "err %.2e tol %.1e%s %s; %s[%lld]: want %.17g got %.17g", worst.err, worst.tol, ulp,
                 tol_name(t.kind), worst.what, (long long)worst.at, worst.want, worst.got);
      }
    }
    for (int k = 0; k < nd->ninputs; k++) free(gin[k].data);
    free(got.data);
  }
  for (int k = 0; k < nd->ninputs; k++)
    if (cin[k].data) free(cin[k].data);
  free(want.data);
  free(cond.data);
  tfg_strbuf_free(&msg);
  tc_free(c);
}

/* A case whose data is bad (an id or label out of range): both sides must
 * fail, with the same status. The backend's data errors arrive at
 * synchronize (kernels/cuda/cuda.h: tfg_cuda_flag). */
static void tc_expect_error(tcase *c) {
  const tfg_node *nd = &c->g->nodes[c->node];
  tfg_tensor in[MAXIN], cin[MAXIN], gin[MAXIN];
  node_inputs(c, nd, in);
  tfg_strbuf cmsg = {0}, gmsg = {0};
  for (int k = 0; k < nd->ninputs; k++) {
    cin[k] = tensor_dup(&in[k]);
    gin[k] = tensor_dup(&in[k]);
  }
  tfg_tensor out = tensor_new(nd->dtype, nd->shape), got = tensor_new(nd->dtype, nd->shape);
  tfg_status cs = c->refused ? TFG_ERR_SHAPE : run_cpu(c, nd, cin, &out, &cmsg);
  tfg_status gs = c->refused ? TFG_ERR_SHAPE : run_backend(c, nd, gin, &got, &gmsg);
  bool ok = !c->refused && cs != TFG_OK && gs == cs;
  report(c, ok, "bad data: cpu %s (%s), %s %s (%s)", tfg_status_str(cs), cmsg.data ? cmsg.data : "",
         tfg_backend_name(S.b), tfg_status_str(gs), gmsg.data ? gmsg.data : "");
  for (int k = 0; k < nd->ninputs; k++) {
    free(cin[k].data);
    free(gin[k].data);
  }
  free(out.data);
  free(got.data);
  tfg_strbuf_free(&cmsg);
  tfg_strbuf_free(&gmsg);
  tc_free(c);
}

/* ---- the cases, per family of ops ------------------------------------------------------------- */

#define F32 TFG_DTYPE_F32
#define F64 TFG_DTYPE_F64
#define F16 TFG_DTYPE_F16
#define BF16 TFG_DTYPE_BF16
#define I32 TFG_DTYPE_I32
#define I64 TFG_DTYPE_I64
#define BOOL TFG_DTYPE_BOOL
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const tfg_dtype ALL_DTYPES[] = {F32, F64, F16, BF16, I32, I64, BOOL};
static const tfg_dtype FLOATS[] = {F32, F64, F16, BF16};
static const tfg_dtype NUMERIC[] = {F32, F64, F16, I32, I64};

static bool is_int(tfg_dtype t) { return t == I32 || t == I64; }

/* Whether the backend under test is a GPU's (not the host backend of a
 * self-test), for the cases only a GPU has. */
static bool on_gpu(void) { return S.dev->kind == TFG_DEVICE_CUDA; }

/* attrs with the raw integer list of an axis/perm/shape argument. */
static tfg_attrs iv_attrs(int n, const int64_t *v) {
  tfg_attrs a = {.niv = n};
  for (int i = 0; i < n; i++) a.iv[i] = v[i];
  return a;
}
#define IV(...) iv_attrs((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
static tfg_attrs iv_none(void) { return (tfg_attrs){.iv_none = true}; }

/* NEG EXP LOG SQRT RSQRT ABS RELU GELU TANH SIGMOID. The sign ops are
 * single IEEE operations, exact, tested on the special values too (NaN,
 * infinities, signed zeros: relu keeps NaN, as PyTorch) and on integers
 * with INT_MIN (negation wraps). The transcendentals get the domain where
 * they are finite: positive inputs for log, sqrt and rsqrt. */
static void fam_unary(tfg_op_id op) {
  const tfg_shape shapes[] = {SH(7), SH(33, 65), SH(2, 3, 5, 7), SH(1048579)};
  gen g = UNI(-5, 5);
  tol t = T_MATH;
  switch (op) {
  case TFG_OP_LOG: case TFG_OP_SQRT: case TFG_OP_RSQRT: g = UNI(1e-3, 1e3); break;
  case TFG_OP_EXP: g = UNI(-20, 20); break;
  case TFG_OP_TANH: g = UNI(-10, 10); break;
  case TFG_OP_SIGMOID: g = UNI(-30, 30); break;
  /* gelu(-6) is -6e-9: tails below 1e-6 of the largest are compared at
   * that scale (the CPU keeps them to full relative accuracy in double,
   * which no consumer of an f32 activation can see). */
  case TFG_OP_GELU: g = UNI(-6, 6); t.floor = 1e-6; break;
  default: g = (gen){G_SPECIAL, -5, 5}; t = T_EXACT; break;
  }
  for (int d = 0; d < COUNT(NUMERIC) + 1; d++) {
    tfg_dtype dt = d < COUNT(NUMERIC) ? NUMERIC[d] : BF16;
    for (int s = 0; s < COUNT(shapes); s++) {
      tcase c = tc_new(dt);
      gen gg = is_int(dt) ? (gen){G_INTEDGE, -1000, 1000} : g;
      tfg_node_id x = tc_in(&c, dt, shapes[s], gg);
      tc_op(&c, op, NULL, 1, x);
      tc_check(&c, t);
    }
  }
}

/* ADD SUB MUL DIV POW MAXIMUM MINIMUM EQUAL GREATER, with NumPy
 * broadcasting. add, sub, mul, maximum, minimum and the comparisons are
 * single correctly rounded (or exact) operations: exact. Integer
 * arithmetic wraps (products of +-1e5 overflow i32; INT_MIN / -1 is
 * INT_MIN). Division: nvcc's default -prec-div=true divides correctly
 * rounded, as the CPU does; 2 ulp allows a reciprocal. maximum and minimum
 * propagate NaN from either side (as PyTorch; fmaxf would not). */
static void fam_binary(tfg_op_id op) {
  static const struct {
    int64_t a[4], b[4];
    int ra, rb;
  } pairs[] = {
      {{17}, {17}, 1, 1},
      {{33, 65}, {65}, 2, 1},
      {{33, 1}, {1, 65}, 2, 2},
      {{4, 1, 6}, {5, 1}, 3, 2},
      {{0}, {7, 9}, 0, 2},
      {{2, 3, 4, 5}, {3, 1, 5}, 4, 3},
      {{1048583}, {1048583}, 1, 1},
      {{1024, 1031}, {1024, 1}, 2, 2},
  };
  static const tfg_dtype dts[] = {F32, F64, I32, I64, BOOL, F16};
  for (int d = 0; d < COUNT(dts); d++) {
    tfg_dtype dt = dts[d];
    for (int p = 0; p < COUNT(pairs); p++) {
      gen ga = UNI(-10, 10), gb = UNI(-10, 10);
      tol t = T_EXACT;
      switch (op) {
      case TFG_OP_ADD: case TFG_OP_SUB: case TFG_OP_MUL:
        if (is_int(dt)) ga = gb = INTS(-100000, 100000);
        break;
      case TFG_OP_DIV:
        if (is_int(dt)) ga = (gen){G_INTEDGE, -1000, 1000}, gb = (gen){G_NONZERO, 1, 50};
        else t = T_ULP2, gb = UNI(-4, 4);
        break;
      case TFG_OP_POW: ga = UNI(0.1, 10), gb = UNI(-3, 3), t = T_MATH; break;
      case TFG_OP_MAXIMUM: case TFG_OP_MINIMUM:
        ga = is_int(dt) ? INTS(-5, 5) : (gen){G_NAN, -5, 5};
        gb = INTS(-5, 5);
        break;
      default: ga = gb = INTS(-2, 2); break; /* EQUAL, GREATER: ties happen */
      }
      tcase c = tc_new(dt);
      tfg_node_id a = tc_in(&c, dt, shape_of(pairs[p].ra, pairs[p].a), ga);
      tfg_node_id b = tc_in(&c, dt, shape_of(pairs[p].rb, pairs[p].b), gb);
      tc_op(&c, op, NULL, 2, a, b);
      tc_check(&c, t);
    }
  }
}

/* WHERE: every dtype (values move as whole elements), all three inputs
 * broadcasting. Exact. */
static void fam_where(tfg_op_id op) {
  const tfg_shape cs[] = {SH(5, 1), SH(3, 4, 5), SH(1048577)};
  const tfg_shape as[] = {SH(1, 7), SH(4, 5), SH(1048577)};
  const tfg_shape bs[] = {SCALAR, SH(3, 1, 5), SH(1048577)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int s = 0; s < COUNT(cs); s++) {
      tfg_dtype dt = ALL_DTYPES[d];
      tcase c = tc_new(dt);
      tfg_node_id k = tc_in(&c, BOOL, cs[s], INTS(0, 1));
      tfg_node_id a = tc_in(&c, dt, as[s], UNI(-100, 100));
      tfg_node_id b = tc_in(&c, dt, bs[s], UNI(-100, 100));
      tc_op(&c, op, NULL, 3, k, a, b);
      tc_check(&c, T_EXACT);
    }
}

/* CAST between every pair of dtypes: conversions are defined exactly
 * (round to nearest even into f16/bf16, with subnormals, overflow to
 * infinity, NaN kept; truncation toward zero into integers, NaN to 0,
 * saturation; nonzero to true), so exact, on the special values
 * (ties, the f16 overflow boundary, the int ranges' ends) and on i64
 * values past 2^53. */
static void fam_cast(tfg_op_id op) {
  for (int f = 0; f < COUNT(ALL_DTYPES); f++)
    for (int t = 0; t < COUNT(ALL_DTYPES); t++)
      for (int s = 0; s < 2; s++) {
        tfg_dtype from = ALL_DTYPES[f], to = ALL_DTYPES[t];
        gen g;
        if (from == BOOL) g = INTS(0, 1);
        else if (from == I64) g = (gen){G_BIGINT, 0, 0};
        else if (from == I32) g = s == 0 ? (gen){G_INTEDGE, -100000, 100000} : INTS(-2e9, 2e9);
        else g = s == 0 ? (gen){G_SPECIAL, -70000, 70000} : UNI(-70000, 70000);
        tcase c = tc_new(from);
        c.must = true;
        tfg_node_id x = tc_in(&c, from, s == 0 ? SH(1031) : SH(1048579), g);
        tfg_attrs a = {.dtype = to};
        tc_op(&c, op, &a, 1, x);
        tc_check(&c, T_EXACT);
      }
}

/* MATMUL: 2-D, transposed operands, batched with broadcast batch dims, and
 * one with K = 1024 (cond tolerance, see T_GEMM), in every float dtype
 * (f16 and bf16: the f32 product of the widened operands rounded once on
 * the CPU, cuBLAS with f32 accumulation on a GPU; T_GEMM plus one ulp).
 * Then TF32 when the backend can be told. */
static void fam_matmul(tfg_op_id op) {
  static const struct {
    int64_t a[4], b[4];
    int ra, rb;
    bool ta, tb;
  } cases[] = {
      {{1, 1}, {1, 1}, 2, 2, false, false},
      {{17, 33}, {33, 9}, 2, 2, false, false},
      {{33, 17}, {33, 9}, 2, 2, true, false},
      {{17, 33}, {9, 33}, 2, 2, false, true},
      {{33, 17}, {9, 33}, 2, 2, true, true},
      {{3, 17, 33}, {33, 9}, 3, 2, false, false},
      {{2, 1, 5, 7}, {3, 7, 4}, 4, 3, false, false},
      {{4, 64, 48}, {4, 40, 48}, 3, 3, false, true},
      {{257, 511}, {511, 129}, 2, 2, false, false},
      {{512, 1024}, {1024, 768}, 2, 2, false, false},
  };
  for (int d = 0; d < COUNT(FLOATS); d++)
    for (int k = 0; k < COUNT(cases); k++) {
      tfg_dtype dt = FLOATS[d];
      tcase c = tc_new(dt);
      tfg_node_id a = tc_in(&c, dt, shape_of(cases[k].ra, cases[k].a), UNI(-1, 1));
      tfg_node_id b = tc_in(&c, dt, shape_of(cases[k].rb, cases[k].b), UNI(-1, 1));
      tfg_attrs at = {.transpose_a = cases[k].ta, .transpose_b = cases[k].tb};
      if (at.transpose_a) tc_desc(&c, "transpose_a ");
      if (at.transpose_b) tc_desc(&c, "transpose_b");
      tc_op(&c, op, &at, 2, a, b);
      tc_check(&c, T_GEMM);
    }
  /* Transposes the layout pass folded in (attrs.view_perm, ir/matmul_view.h:
   * on CUDA, kernels/cuda/linalg.cu's permuted_matmul): the attention
   * heads' q k^T and a v read [B,T,H,hd] through [0,2,1,3], the product
   * stored back in that layout, an operand stored column-major, a shared
   * 2-D operand beside a strided one. The node's shape is the stored
   * product's (the shape rule knows no views, so it is set here). */
  enum { OUT_BIT = 1 << TFG_VIEW_OUT };
  static const struct {
    int64_t a[4], b[4], o[4];
    int r;
    bool tb;
    uint8_t bits; /* views: bit 0 a, 1 b, OUT_BIT the product */
    int8_t pa[4], pb[4], po[4];
  } views[] = {
      {{2, 5, 3, 4}, {2, 5, 3, 4}, {2, 3, 5, 5}, 4, true, 3, {0, 2, 1, 3}, {0, 2, 1, 3}, {0, 1, 2, 3}},
      {{2, 3, 5, 5}, {2, 5, 3, 4}, {2, 5, 3, 4}, 4, false, 2 | OUT_BIT, {0, 1, 2, 3}, {0, 2, 1, 3}, {0, 2, 1, 3}},
      {{2, 4, 5}, {2, 4, 6}, {2, 5, 6}, 3, false, 1, {0, 2, 1}, {0, 1, 2}, {0, 1, 2}},
      {{3, 7, 2, 5}, {5, 4}, {3, 7, 2, 4}, 4, false, 1 | OUT_BIT, {0, 2, 1, 3}, {0, 1}, {0, 2, 1, 3}},
      {{4, 17, 3, 33}, {4, 17, 3, 33}, {4, 3, 17, 17}, 4, true, 3, {0, 2, 1, 3}, {0, 2, 1, 3}, {0, 1, 2, 3}},
  };
  for (int d = 0; d < COUNT(FLOATS); d++)
    for (int k = 0; k < COUNT(views); k++) {
      tfg_dtype dt = FLOATS[d];
      tcase c = tc_new(dt);
      int rb = views[k].b[2] ? views[k].r : 2;
      tfg_node_id ins[2] = {tc_in(&c, dt, shape_of(views[k].r, views[k].a), UNI(-1, 1)),
                            tc_in(&c, dt, shape_of(rb, views[k].b), UNI(-1, 1))};
      tfg_loc loc = {0};
      tfg_node_id id = tfg_graph_add(c.g, op, ins, 2, &loc);
      tfg_node *nd = tfg_graph_node(c.g, id);
      nd->dtype = dt;
      nd->shape = shape_of(views[k].r, views[k].o);
      nd->attrs.transpose_b = views[k].tb;
      nd->attrs.views = views[k].bits;
      for (int i = 0; i < 4; i++) {
        nd->attrs.view_perm[0][i] = views[k].pa[i];
        nd->attrs.view_perm[1][i] = views[k].pb[i];
        nd->attrs.view_perm[TFG_VIEW_OUT][i] = views[k].po[i];
      }
      c.node = id;
      tc_desc(&c, "strided views");
      tc_check(&c, T_GEMM);
    }
  if (!on_gpu()) return; /* the host backend has no TF32 */
  for (int k = 1; k < COUNT(cases); k += 2) {
      tcase c = tc_new(F32);
      c.tf32 = true;
      tfg_node_id a = tc_in(&c, F32, shape_of(cases[k].ra, cases[k].a), UNI(-1, 1));
      tfg_node_id b = tc_in(&c, F32, shape_of(cases[k].rb, cases[k].b), UNI(-1, 1));
      tfg_attrs at = {.transpose_a = cases[k].ta, .transpose_b = cases[k].tb};
      tc_desc(&c, "tf32");
      tc_op(&c, op, &at, 2, a, b);
      tc_check(&c, T_TF32);
    }
}

/* The reductions' cases: shape, axes (none: all), keepdims. */
static const struct {
  int64_t s[4];
  int rank;
  int naxes; /* -1: axis = none */
  int64_t axes[3];
  bool keep;
} REDUCTIONS[] = {
    {{4194301}, 1, -1, {0}, false},        /* 4M to one value */
    {{33, 65}, 2, 1, {0}, false},          /* columns */
    {{33, 65}, 2, 1, {1}, false},          /* rows */
    {{33, 65}, 2, -1, {0}, true},
    {{4, 5, 6, 7}, 4, 2, {1, 3}, false},
    {{4, 5, 6, 7}, 4, 2, {0, 2}, true},
    {{1000, 1100}, 2, 1, {1}, false},      /* 1.1M, long rows */
    {{1100, 1000}, 2, 1, {0}, false},      /* 1.1M, long columns */
    {{8, 512, 771}, 3, 2, {0, 1}, false},  /* a bias gradient: leading axes to [n], rows cut in pieces */
    {{20011, 3}, 2, 1, {0}, false},        /* few columns, many rows */
    {{3, 1, 262149}, 3, 1, {-1}, false},
    {{1}, 1, 1, {0}, false},
};

static tfg_node_id reduce_node(tcase *c, tfg_op_id op, int k, tfg_node_id x) {
  tfg_attrs a = REDUCTIONS[k].naxes < 0 ? iv_none() : iv_attrs(REDUCTIONS[k].naxes, REDUCTIONS[k].axes);
  a.keepdims = REDUCTIONS[k].keep;
  if (a.keepdims) tc_desc(c, "keepdims ");
  if (REDUCTIONS[k].naxes < 0) tc_desc(c, "axis=none");
  else {
    tc_desc(c, "axis=");
    for (int i = 0; i < REDUCTIONS[k].naxes; i++) tc_desc(c, "%s%lld", i ? "," : "", (long long)REDUCTIONS[k].axes[i]);
  }
  return tc_op(c, op, &a, 1, x);
}

/* SUM MEAN MAX. Float sums twice: on integer-valued data (-3..3), where
 * every partial sum is an integer below 2^24 (|sum| <= 3 * 4.2M < 2^24),
 * hence exact in f32 and f64 in any order, so a sum is compared exactly
 * (a dropped or doubled term shows) and a mean within 2 ulp (one
 * division); and on uniform data in [0, 1) against the bound t_sum(n), n
 * the terms per output: positive terms, so sum|x| is the result itself
 * and the bound a relative error (on data of both signs it would be
 * relative to sum|x|, which dwarfs the result). MAX is order-independent
 * and exact; it propagates NaN. */
static void fam_reduce(tfg_op_id op) {
  for (int d = 0; d < COUNT(NUMERIC); d++)
    for (int k = 0; k < COUNT(REDUCTIONS); k++)
      for (int v = 0; v < 2; v++) {
        tfg_dtype dt = NUMERIC[d];
        bool fl = !is_int(dt);
        if (v == 1 && !(fl && (op != TFG_OP_MAX || k == 2))) continue;
        tcase c = tc_new(dt);
        gen g;
        tol t;
        if (!fl) g = INTS(-100, 100), t = T_EXACT;
        else if (op == TFG_OP_MAX) g = v ? (gen){G_NAN, -1, 1} : UNI(-1, 1), t = T_EXACT;
        else if (v == 0) g = INTS(-3, 3), t = op == TFG_OP_SUM ? T_EXACT : T_ULP2;
        else g = UNI(0, 1), t = T_EXACT; /* the bound is set below, once n is known */
        tfg_node_id x = tc_in(&c, dt, shape_of(REDUCTIONS[k].rank, REDUCTIONS[k].s), g);
        tfg_node_id y = reduce_node(&c, op, k, x);
        if (fl && op != TFG_OP_MAX) tc_desc(&c, v ? " uniform" : " integer-valued");
        if (fl && op == TFG_OP_MAX && v) tc_desc(&c, " with NaN");
        if (fl && op != TFG_OP_MAX && v == 1) {
          int64_t nout = tfg_shape_numel(&c.g->nodes[y].shape);
          t = t_sum(nout ? tfg_shape_numel(&c.g->nodes[x].shape) / nout : 1);
        }
        tc_check(&c, t);
      }
}

/* ARGMAX: the first maximum wins; integer-valued data makes ties. Exact. */
static void fam_argmax(tfg_op_id op) {
  static const struct {
    int64_t s[3];
    int rank, axis;
  } cases[] = {{{33, 65}, 2, 0}, {{33, 65}, 2, 1}, {{4, 5, 6}, 3, 1}, {{1048583}, 1, 0}, {{1024, 1031}, 2, -1}};
  for (int d = 0; d < COUNT(NUMERIC); d++)
    for (int k = 0; k < COUNT(cases); k++)
      for (int v = 0; v < 2; v++) {
        tfg_dtype dt = NUMERIC[d];
        tcase c = tc_new(dt);
        tfg_node_id x = tc_in(&c, dt, shape_of(cases[k].rank, cases[k].s), v ? INTS(-5, 5) : UNI(-100, 100));
        tfg_attrs a = {.axis = cases[k].axis};
        tc_desc(&c, "axis=%d%s", cases[k].axis, v ? " ties" : "");
        tc_op(&c, op, &a, 1, x);
        tc_check(&c, T_EXACT);
      }
}

/* The shape ops move elements: every dtype, exact. */
static void fam_reshape(tfg_op_id op) {
  const tfg_shape in[] = {SH(6, 35), SH(2, 3, 4), SH(1050000), SH(7)};
  const tfg_attrs at[] = {IV(5, 42), IV(24), IV(1000, -1), IV(7, 1, 1)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(in); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x = tc_in(&c, ALL_DTYPES[d], in[k], UNI(-100, 100));
      tc_op(&c, op, &at[k], 1, x);
      tc_check(&c, T_EXACT);
    }
}

static void fam_flatten(tfg_op_id op) {
  const tfg_shape in[] = {SH(2, 3, 4, 5), SH(1024, 32, 33), SH(5), SH(3, 1)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(in); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x = tc_in(&c, ALL_DTYPES[d], in[k], UNI(-100, 100));
      tc_op(&c, op, NULL, 1, x);
      tc_check(&c, T_EXACT);
    }
}

static void fam_transpose(tfg_op_id op) {
  const tfg_shape in[] = {SH(2, 3, 4, 5), SH(513, 1025), SH(1, 7, 1, 3), SH(64, 32, 16, 32), SH(31, 33)};
  const tfg_attrs at[] = {IV(3, 1, 0, 2), iv_none(), IV(2, 0, 3, 1), IV(0, 2, 1, 3), IV(1, 0)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(in); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x = tc_in(&c, ALL_DTYPES[d], in[k], UNI(-100, 100));
      tfg_node_id y = tc_op(&c, op, &at[k], 1, x);
      tc_desc(&c, "perm=");
      for (int i = 0; i < in[k].rank; i++) tc_desc(&c, "%s%d", i ? "," : "", c.g->nodes[y].attrs.perm[i]);
      tc_check(&c, T_EXACT);
    }
}

static void fam_concat(tfg_op_id op) {
  static const struct {
    int n, rank, axis;
    int64_t s[4][3];
  } cases[] = {
      {3, 2, 1, {{3, 4}, {3, 5}, {3, 1}}},
      {2, 2, 0, {{2, 3}, {5, 3}}},
      {2, 2, 0, {{512, 1024}, {512, 1024}}},
      {4, 3, 1, {{2, 3, 4}, {2, 1, 4}, {2, 6, 4}, {2, 2, 4}}},
      {1, 1, 0, {{9}}},
  };
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(cases); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x[4];
      for (int i = 0; i < cases[k].n; i++) x[i] = tc_in(&c, ALL_DTYPES[d], shape_of(cases[k].rank, cases[k].s[i]), UNI(-100, 100));
      tfg_attrs a = {.axis = cases[k].axis};
      tc_desc(&c, "axis=%d", cases[k].axis);
      switch (cases[k].n) {
      case 1: tc_op(&c, op, &a, 1, x[0]); break;
      case 2: tc_op(&c, op, &a, 2, x[0], x[1]); break;
      case 3: tc_op(&c, op, &a, 3, x[0], x[1], x[2]); break;
      default: tc_op(&c, op, &a, 4, x[0], x[1], x[2], x[3]); break;
      }
      tc_check(&c, T_EXACT);
    }
}

static void fam_slice(tfg_op_id op) {
  static const struct {
    int64_t s[3];
    int rank, axis;
    int64_t start, end;
  } cases[] = {{{10, 20}, 2, 1, 3, 17}, {{7, 5}, 2, 0, -3, 7}, {{1024, 1031}, 2, 1, 1, 1030}, {{4, 5, 6}, 3, 2, 0, 1},
               {{9}, 1, 0, 0, 9}};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(cases); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x = tc_in(&c, ALL_DTYPES[d], shape_of(cases[k].rank, cases[k].s), UNI(-100, 100));
      tfg_attrs a = {.axis = cases[k].axis, .start = cases[k].start, .end = cases[k].end};
      tc_desc(&c, "axis=%d [%lld, %lld)", cases[k].axis, (long long)cases[k].start, (long long)cases[k].end);
      tc_op(&c, op, &a, 1, x);
      tc_check(&c, T_EXACT);
    }
}

static void fam_broadcast(tfg_op_id op) {
  const tfg_shape in[] = {SH(3, 1, 5), SCALAR, SH(1, 7), SH(1031)};
  const tfg_attrs at[] = {IV(2, 3, 4, 5), IV(1000, 1001), IV(5, 7), IV(1024, 1031)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(in); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x = tc_in(&c, ALL_DTYPES[d], in[k], UNI(-100, 100));
      tc_op(&c, op, &at[k], 1, x);
      tc_check(&c, T_EXACT);
    }
}

/* SOFTMAX LOG_SOFTMAX along the last axis, an inner axis and the first,
 * GPT-2's vocabulary (50257), a 1M-element batch, and logits of +-1000
 * (the max shift keeps them finite). */
static void fam_softmax(tfg_op_id op) {
  static const struct {
    int64_t s[3];
    int rank, axis;
    double range;
  } cases[] = {{{32, 10}, 2, -1, 10},   {{7, 1000}, 2, 1, 10},  {{5, 6, 7}, 3, 1, 10}, {{8, 50257}, 2, 1, 10},
               {{2048, 513}, 2, 1, 10}, {{4, 3}, 2, 0, 10},     {{16, 10}, 2, 1, 1000}};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(cases); k++) {
      tcase c = tc_new(dts[d]);
      tfg_node_id x = tc_in(&c, dts[d], shape_of(cases[k].rank, cases[k].s), UNI(-cases[k].range, cases[k].range));
      tfg_attrs a = {.axis = cases[k].axis};
      tc_desc(&c, "axis=%d range=%g", cases[k].axis, cases[k].range);
      tc_op(&c, op, &a, 1, x);
      tc_check(&c, T_NN);
    }
}

/* ATTENTION, ATTENTION_PROBS and ATTENTION_GRAD (for each of q, k and v,
 * dy of the output's shape): heads [B, H, T, hd] as GPT's, causal or
 * not, Tq above and below Tk, a head size above one warp's pass of 256
 * (the GPU kernel's second pass), the default and a given scale; f32,
 * f64 and f16 (staged in f32). Softmax and a weighted sum of its rows
 * (the gradient: sums of such terms, dS's P (dP - D) cancelling to near
 * zero, which the floor takes): the NN tolerance. */
static void fam_attention(tfg_op_id op) {
  static const struct {
    int64_t q[4], k[4], v[4];
    bool causal;
    double scale; /* NAN: none */
  } cases[] = {
      {{2, 4, 16, 8}, {2, 4, 16, 8}, {2, 4, 16, 8}, true, NAN},
      {{3, 40, 32}, {3, 70, 32}, {3, 70, 12}, false, 0.3},
      {{1, 70, 5}, {1, 40, 5}, {1, 40, 300}, true, NAN},
      {{2, 2, 128, 64}, {2, 2, 128, 64}, {2, 2, 128, 64}, true, NAN},
      {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, NAN},
      /* the tiled kernels' edges: the largest head size they take, rows
       * not a multiple of their 8, key tiles of 32 cut short, Tq below
       * and above Tk when causal */
      {{2, 3, 37, 128}, {2, 3, 45, 128}, {2, 3, 45, 128}, true, NAN},
      {{1, 2, 50, 16}, {1, 2, 33, 16}, {1, 2, 33, 24}, true, 0.2},
      {{2, 65, 129}, {2, 65, 129}, {2, 65, 7}, false, NAN}, /* hd above 128: the reference kernels */
  };
  static const tfg_dtype dts[] = {F32, F64, F16};
  bool grad = op == TFG_OP_ATTENTION_GRAD;
  const char *kern = S.reference || S.sw.no_attention_tiled ? " (reference kernel)" : "";
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(cases); k++)
      for (int which = 0; which < (grad ? 4 : 1); which++) { /* 3: all three packed (Tq = Tk only) */
        tfg_dtype dt = dts[d];
        int r = cases[k].q[3] ? 4 : 3;
        if (which == 3 && cases[k].q[r - 2] != cases[k].k[r - 2]) continue;
        tcase c = tc_new(dt);
        tfg_node_id qn = tc_in(&c, dt, shape_of(r, cases[k].q), UNI(-1, 1));
        tfg_node_id kn = tc_in(&c, dt, shape_of(r, cases[k].k), UNI(-1, 1));
        tfg_attrs a = {.causal = cases[k].causal, .value = cases[k].scale, .axis = which};
        if (grad) tc_desc(&c, "d%s %s scale=%g%s", which == 3 ? "qkv" : (const char *[]){"q", "k", "v"}[which],
                          a.causal ? "causal" : "full", a.value, kern);
        else tc_desc(&c, "%s scale=%g%s", a.causal ? "causal" : "full", a.value, kern);
        if (op == TFG_OP_ATTENTION_PROBS) {
          tc_op(&c, op, &a, 2, qn, kn);
        } else {
          tfg_node_id vn = tc_in(&c, dt, shape_of(r, cases[k].v), UNI(-1, 1));
          if (grad) {
            int64_t o[4] = {cases[k].q[0], cases[k].q[1], cases[k].q[2], cases[k].q[3]};
            o[r - 1] = cases[k].v[r - 1]; /* dy: the output's [..., Tq, hdv] */
            tc_op(&c, op, &a, 4, qn, kn, vn, tc_in(&c, dt, shape_of(r, o), UNI(-1, 1)));
          } else {
            tc_op(&c, op, &a, 3, qn, kn, vn);
          }
        }
        tc_check(&c, T_NN);
      }
  /* The heads read as the layout pass folds them: q, k, v stored [B, T,
   * H, hd] and read through [0, 2, 1, 3], the output stored back so (its
   * shape set here: the shape rule knows no views). */
  for (int d = 0; d < COUNT(dts); d++)
    for (int which = 0; which < (grad ? 4 : 1); which++) {
      tfg_dtype dt = dts[d];
      tcase c = tc_new(dt);
      int nin = grad ? 4 : op == TFG_OP_ATTENTION ? 3 : 2;
      tfg_node_id ins[4];
      for (int i = 0; i < nin; i++) ins[i] = tc_in(&c, dt, SH(2, 9, 3, 8), UNI(-1, 1));
      tfg_loc loc = {0};
      tfg_node_id id = tfg_graph_add(c.g, op, ins, nin, &loc);
      tfg_node *nd = tfg_graph_node(c.g, id);
      nd->dtype = dt;
      nd->shape = op == TFG_OP_ATTENTION_PROBS ? SH(2, 3, 9, 9) : which == 3 ? SH(2, 9, 3, 24) : SH(2, 9, 3, 8);
      nd->attrs.causal = true;
      nd->attrs.value = 0.35;
      nd->attrs.axis = which;
      nd->attrs.views =
          (uint8_t)((1u << nin) - 1) | (op == TFG_OP_ATTENTION_PROBS ? 0 : 1u << TFG_VIEW_OUT);
      static const int8_t heads[4] = {0, 2, 1, 3};
      for (int s = 0; s <= TFG_VIEW_OUT; s++)
        for (int i = 0; i < 4; i++) nd->attrs.view_perm[s][i] = heads[i];
      c.node = id;
      if (grad) tc_desc(&c, "d%s strided views%s", which == 3 ? "qkv" : (const char *[]){"q", "k", "v"}[which], kern);
      else tc_desc(&c, "strided views%s", kern);
      tc_check(&c, T_NN);
    }
  /* On a GPU every case again with the reference kernels (one warp per
   * row: kernels/cuda/attention.cu), which the switch no_attention_tiled
   * (TFG_ATTENTION_TILED=0) selects for the head sizes the tiled ones
   * take: on a backend made with it. */
  if (on_gpu() && !S.reference && !S.sw.no_attention_tiled) {
    S.reference = true;
    fam_attention(op);
    S.reference = false;
  }
}

static const struct {
  int64_t n, c;
} LOGITS[] = {{32, 10}, {7, 1000}, {5, 50257}, {1024, 1031}};

/* CROSS_ENTROPY, CROSS_ENTROPY_GRAD (dy a scalar), ACCURACY: every
 * logits dtype with both label dtypes; labels valid (errors are tested in
 * bad_data). accuracy: a count divided by N, rounded once on either side
 * (T_ULP2); integer-valued logits make ties (the first maximum wins). */
static void fam_logits(tfg_op_id op) {
  static const tfg_dtype dts[] = {F32, F64, F16};
  static const tfg_dtype lab[] = {I32, I64};
  for (int d = 0; d < COUNT(dts); d++)
    for (int l = 0; l < COUNT(lab); l++)
      for (int k = 0; k < COUNT(LOGITS); k++) {
        tcase c = tc_new(dts[d]);
        bool ties = op == TFG_OP_ACCURACY && k == 1;
        tfg_node_id x = tc_in(&c, dts[d], SH(LOGITS[k].n, LOGITS[k].c), ties ? INTS(-2, 2) : UNI(-5, 5));
        tfg_node_id y = tc_in(&c, lab[l], SH(LOGITS[k].n), INTS(0, (double)LOGITS[k].c - 1));
        tc_desc(&c, "labels %s%s", tfg_dtype_name(lab[l]), ties ? " ties" : "");
        if (op == TFG_OP_CROSS_ENTROPY_GRAD) {
          tfg_node_id dy = tc_in(&c, dts[d], SCALAR, UNI(0.5, 2));
          tc_op(&c, op, NULL, 3, x, y, dy);
        } else {
          tc_op(&c, op, NULL, 2, x, y);
        }
        tc_check(&c, op == TFG_OP_ACCURACY ? T_ULP2 : T_NN);
      }
}

/* MSE: a mean of n squares, all positive, so the sum's bound relative to
 * the result itself is t_sum(n). */
static void fam_mse(tfg_op_id op) {
  const tfg_shape shapes[] = {SH(17), SH(64, 10), SH(1048579)};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(shapes); k++) {
      tcase c = tc_new(dts[d]);
      tfg_node_id a = tc_in(&c, dts[d], shapes[k], UNI(-2, 2));
      tfg_node_id b = tc_in(&c, dts[d], shapes[k], UNI(-2, 2));
      tc_op(&c, op, NULL, 2, a, b);
      tol t = t_sum(tfg_shape_numel(&shapes[k]));
      t.kind = TOL_REL;
      tc_check(&c, t);
    }
}

/* Convolutions: N, C, H, W, O, KH, KW, stride, padding mode, explicit pad. */
static const struct {
  int64_t n, c, h, w, o, kh, kw, stride;
  int mode;
  int64_t pad;
} CONVS[] = {
    {2, 3, 8, 8, 4, 3, 3, 1, TFG_PAD_SAME, 0},    {1, 1, 5, 7, 2, 3, 2, 2, TFG_PAD_VALID, 0},
    {2, 8, 9, 11, 6, 5, 5, 2, TFG_PAD_EXPLICIT, 1}, {4, 16, 14, 14, 32, 3, 3, 1, TFG_PAD_SAME, 0},
    {8, 3, 32, 32, 16, 1, 1, 1, TFG_PAD_VALID, 0},  {16, 16, 32, 32, 64, 3, 3, 1, TFG_PAD_SAME, 0},
    {2, 4, 7, 7, 3, 7, 7, 1, TFG_PAD_SAME, 0},      {3, 5, 10, 6, 4, 3, 3, 3, TFG_PAD_EXPLICIT, 2},
};

/* CONV2D, CONV2D_GRAD_INPUT, CONV2D_GRAD_WEIGHT: the forward node is built
 * first (its shape rule normalizes the padding), the gradients from its
 * attrs with the target shape in attrs.iv, as compiler/autodiff.c does.
 * T_GEMM against the same op on |x|, |w|, |dy|. */
static void fam_conv(tfg_op_id op) {
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(CONVS); k++) {
      tfg_dtype dt = dts[d];
      tcase c = tc_new(dt);
      tfg_shape xs = SH(CONVS[k].n, CONVS[k].c, CONVS[k].h, CONVS[k].w);
      tfg_shape ws = SH(CONVS[k].o, CONVS[k].c, CONVS[k].kh, CONVS[k].kw);
      tfg_node_id x = tc_in(&c, dt, xs, UNI(-1, 1)), w = tc_in(&c, dt, ws, UNI(-1, 1));
      tfg_attrs a = {.stride = {CONVS[k].stride, CONVS[k].stride}, .pad_mode = CONVS[k].mode, .pad = {CONVS[k].pad}};
      tfg_node_id y = tc_op(&c, TFG_OP_CONV2D, &a, 2, x, w);
      const tfg_node *yn = &c.g->nodes[y];
      tc_desc(&c, "stride=%lld pad=%lld,%lld,%lld,%lld", (long long)CONVS[k].stride, (long long)yn->attrs.pad[0],
              (long long)yn->attrs.pad[1], (long long)yn->attrs.pad[2], (long long)yn->attrs.pad[3]);
      if (op != TFG_OP_CONV2D && !c.refused) {
        tfg_attrs g = yn->attrs;
        tfg_shape target = op == TFG_OP_CONV2D_GRAD_INPUT ? xs : ws;
        g.niv = target.rank;
        for (int i = 0; i < target.rank; i++) g.iv[i] = target.dim[i];
        tfg_node_id dy = tc_in(&c, dt, yn->shape, UNI(-1, 1));
        if (op == TFG_OP_CONV2D_GRAD_INPUT) tc_op(&c, op, &g, 2, dy, w);
        else tc_op(&c, op, &g, 2, x, dy);
      }
      tc_check(&c, T_GEMM);
    }
}

/* Pools: N, C, H, W, window, stride (0: the window). */
static const struct {
  int64_t n, c, h, w, kh, kw, sh, sw;
} POOLS[] = {
    {2, 3, 8, 8, 2, 2, 0, 0}, {1, 4, 7, 9, 3, 2, 1, 1}, {4, 16, 33, 33, 3, 3, 2, 2}, {8, 32, 64, 64, 2, 2, 0, 0},
    {2, 2, 5, 5, 5, 5, 0, 0},
};

/* MAX_POOL (a selection: exact; integer-valued data makes ties, and the
 * first maximum must win), AVG_POOL (a window sum: t_sum(window)), and
 * their gradients: overlapping windows add into one input element, up to
 * ceil(kh/sh) * ceil(kw/sw) terms in any order (t_sum of that, relative to
 * the same op on |dy|; max_pool_grad keeps x as it is, since it picks
 * where each dy goes). */
static void fam_pool(tfg_op_id op) {
  static const tfg_dtype dts[] = {F32, F64, F16};
  bool is_max = op == TFG_OP_MAX_POOL || op == TFG_OP_MAX_POOL_GRAD;
  tfg_op_id fwd = is_max ? TFG_OP_MAX_POOL : TFG_OP_AVG_POOL;
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(POOLS); k++) {
      tfg_dtype dt = dts[d];
      tcase c = tc_new(dt);
      bool ties = is_max && k % 2 == 1;
      tfg_shape xs = SH(POOLS[k].n, POOLS[k].c, POOLS[k].h, POOLS[k].w);
      tfg_node_id x = tc_in(&c, dt, xs, ties ? INTS(-3, 3) : UNI(-1, 1));
      tfg_attrs a = {.size = {POOLS[k].kh, POOLS[k].kw}, .stride = {POOLS[k].sh, POOLS[k].sw}};
      tfg_node_id y = tc_op(&c, fwd, &a, 1, x);
      const tfg_node *yn = &c.g->nodes[y];
      int64_t sh = yn->attrs.stride[0], sw = yn->attrs.stride[1];
      int64_t overlap = ((POOLS[k].kh + sh - 1) / sh) * ((POOLS[k].kw + sw - 1) / sw);
      tc_desc(&c, "window=%lldx%lld stride=%lldx%lld%s", (long long)POOLS[k].kh, (long long)POOLS[k].kw, (long long)sh,
              (long long)sw, ties ? " ties" : "");
      tol t = op == TFG_OP_MAX_POOL ? T_EXACT : t_sum(op == TFG_OP_AVG_POOL ? POOLS[k].kh * POOLS[k].kw : overlap);
      if (op == TFG_OP_MAX_POOL_GRAD && !c.refused) {
        tfg_node_id dy = tc_in(&c, dt, yn->shape, UNI(-1, 1));
        tfg_attrs g = yn->attrs;
        tc_op(&c, op, &g, 2, x, dy);
        c.absmask = 1u << 1;
      } else if (op == TFG_OP_AVG_POOL_GRAD && !c.refused) {
        tfg_node_id dy = tc_in(&c, dt, yn->shape, UNI(-1, 1));
        tfg_attrs g = yn->attrs;
        g.niv = 4;
        for (int i = 0; i < 4; i++) g.iv[i] = xs.dim[i];
        tc_op(&c, op, &g, 1, dy);
      }
      tc_check(&c, t);
    }
}

/* LAYER_NORM and LAYER_NORM_GRAD over the last axis: D = 1 (zero
 * variance: the output is beta, the gradient exactly 0 on both sides), a
 * transformer width, a 1M-element batch, and rows with mean 10 (a one-pass
 * E[x^2] - E[x]^2 in f32 loses ~1e-5 there; two-pass or Welford does
 * not).
 *
 * The rows with mean 10 are held to a looser f64 bound, because the mean
 * is a sum in a different order on each side: its error is up to 6 sqrt(D)
 * u max|x| per side (the probabilistic bound of t_sum), which x - mean
 * carries to every output times rstd |gamma|. With D = 768, |x| <= 11,
 * rstd = sqrt 3 (x - mean uniform on [-1, 1]) and |gamma| <= 1.5 that is
 * 2 * 6 * 27.7 * 1.1e-16 * 11 * 1.73 * 1.5 = 1.0e-12 absolute, against
 * T_NN's floor of 1e-3 of the largest output (about 2.6): 4e-10. An H100
 * gave 1.03e-11, over T_NN's 1e-12. f32 computes in double too and rounds
 * once, so its bound stays T_NN's. */
static const tol T_LN_OFFSET = {TOL_REL, 1e-4, 4e-10, 1e-3};
static void fam_layer_norm(tfg_op_id op) {
  static const struct {
    int64_t s[3];
    int rank;
    double offset;
  } cases[] = {{{32, 64}, 2, 0}, {{7, 3, 1000}, 3, 0}, {{1024, 1024}, 2, 0}, {{5, 1}, 2, 0}, {{16, 768}, 2, 10}};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(cases); k++) {
      tfg_dtype dt = dts[d];
      tcase c = tc_new(dt);
      tfg_shape xs = shape_of(cases[k].rank, cases[k].s);
      int64_t dim = xs.dim[xs.rank - 1];
      tfg_node_id x = tc_in(&c, dt, xs, UNI(cases[k].offset - 1, cases[k].offset + 1));
      tfg_node_id gamma = tc_in(&c, dt, SH(dim), UNI(0.5, 1.5));
      tfg_attrs a = {.value = 1e-5};
      tc_desc(&c, "eps=1e-5%s", cases[k].offset ? " mean=10" : "");
      if (op == TFG_OP_LAYER_NORM) {
        tfg_node_id beta = tc_in(&c, dt, SH(dim), UNI(-0.5, 0.5));
        tc_op(&c, op, &a, 3, x, gamma, beta);
      } else {
        tfg_node_id dy = tc_in(&c, dt, xs, UNI(-1, 1));
        tc_op(&c, op, &a, 3, x, gamma, dy);
      }
      tc_check(&c, cases[k].offset ? T_LN_OFFSET : T_NN);
    }
}

/* DROPOUT: the mask is base/rng.h's counter stream on (attrs.seed, the
 * train seed, the step) at index attrs.offset + i, kept values x * (1 /
 * (1 - rate)) formed in double and rounded once: bit for bit. Rates 0 and
 * 1, a mirrored replica's offset, and inference (identity). */
static void fam_dropout(tfg_op_id op) {
  static const struct {
    int64_t s[2];
    int rank;
    double rate;
    bool training;
    int64_t start;
  } cases[] = {{{1000}, 1, 0.1, true, 0}, {{1048583}, 1, 0.5, true, 0}, {{64, 33}, 2, 0.3, true, 77},
               {{1000}, 1, 0.0, true, 0}, {{1000}, 1, 1.0, true, 0},     {{1000}, 1, 0.5, false, 0}};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int k = 0; k < COUNT(cases); k++) {
      tcase c = tc_new(dts[d]);
      c.training = cases[k].training;
      c.seed = 42;
      c.step = 3;
      tfg_node_id x = tc_in(&c, dts[d], shape_of(cases[k].rank, cases[k].s), UNI(-2, 2));
      tfg_attrs a = {.value = cases[k].rate, .seed = 1234, .seeded = true, .offset = cases[k].start};
      tc_desc(&c, "rate=%g start=%lld%s", cases[k].rate, (long long)cases[k].start, c.training ? "" : " inference");
      tc_op(&c, op, &a, 1, x);
      tc_check(&c, T_EXACT);
    }
}

/* EMBEDDING (a gather: exact) and ONE_HOT (exact; ids outside [0, n)
 * give a row of zeros, not an error), every id dtype. */
static void fam_embedding(tfg_op_id op) {
  static const struct {
    int64_t v, d, ids[2];
    int rank;
  } cases[] = {{10, 4, {7}, 1}, {1000, 64, {4, 9}, 2}, {50257, 8, {3, 17}, 2}, {512, 256, {4096}, 1}};
  static const tfg_dtype ids[] = {I32, I64};
  for (int t = 0; t < COUNT(FLOATS); t++)
    for (int i = 0; i < COUNT(ids); i++)
      for (int k = 0; k < COUNT(cases); k++) {
        tcase c = tc_new(FLOATS[t]);
        tfg_node_id tab = tc_in(&c, FLOATS[t], SH(cases[k].v, cases[k].d), UNI(-1, 1));
        tfg_node_id x = tc_in(&c, ids[i], shape_of(cases[k].rank, cases[k].ids), INTS(0, (double)cases[k].v - 1));
        tc_desc(&c, "ids %s", tfg_dtype_name(ids[i]));
        tc_op(&c, op, NULL, 2, tab, x);
        tc_check(&c, T_EXACT);
      }
}

static void fam_one_hot(tfg_op_id op) {
  static const struct {
    int64_t s[2], n;
    int rank;
    double lo, hi;
  } cases[] = {{{7}, 5, 1, -1, 5}, {{4, 9}, 10, 2, 0, 9}, {{1024}, 1024, 1, 0, 1023}};
  static const tfg_dtype ids[] = {I32, I64};
  for (int i = 0; i < COUNT(ids); i++)
    for (int k = 0; k < COUNT(cases); k++) {
      tcase c = tc_new(ids[i]);
      c.must = true;
      tfg_node_id x = tc_in(&c, ids[i], shape_of(cases[k].rank, cases[k].s), INTS(cases[k].lo, cases[k].hi));
      tfg_attrs a = {.n = cases[k].n};
      tc_desc(&c, "n=%lld%s", (long long)cases[k].n, cases[k].lo < 0 ? " (ids out of range included)" : "");
      tc_op(&c, op, &a, 1, x);
      tc_check(&c, T_EXACT);
    }
}

/* RELU_GRAD (a selection: exact; x has exact zeros, which take 0) and
 * GELU_GRAD, T_MATH's bounds against COND's scale, the same op on |x| and
 * |dy|: dy (Phi(x) + x phi(x)) has a root near x = -0.75 where its two
 * terms (about 0.23 each) cancel, so near it the result is only absolutely
 * accurate, to a few ulp of the terms (each side's exp and erfc are within
 * 1-2 ulp, and nvcc forms Phi + x phi with one FMA rounding where the CPU
 * rounds twice). |dy| (Phi(|x|) + |x| phi(|x|)) is at least as large as
 * both terms, so it is that scale everywhere, and equals |result| away
 * from the root. (A floor at 1e-6 of the largest, as before, is below
 * the terms' f64 ulp there: 2.5e-17 / 1e-6 failed 1e-12 on an H100.) */
static void fam_act_grad(tfg_op_id op) {
  const tfg_shape shapes[] = {SH(7), SH(33, 65), SH(1048583)};
  bool relu = op == TFG_OP_RELU_GRAD;
  tol t = T_MATH;
  t.kind = TOL_COND;
  for (int d = 0; d < COUNT(NUMERIC); d++)
    for (int k = 0; k < COUNT(shapes); k++) {
      tfg_dtype dt = NUMERIC[d];
      tcase c = tc_new(dt);
      tfg_node_id x = tc_in(&c, dt, shapes[k], relu ? (k == 0 ? (gen){G_SPECIAL, -2, 2} : INTS(-2, 2)) : UNI(-6, 6));
      tfg_node_id dy = tc_in(&c, dt, shapes[k], UNI(-1, 1));
      tc_op(&c, op, NULL, 2, x, dy);
      tc_check(&c, relu ? T_EXACT : t);
    }
}

/* EMBEDDING_GRAD: rows scatter-added, repeated ids added in any order (a
 * GPU's atomics): t_sum(ids) relative to the same op on |dy|. */
static void fam_embedding_grad(tfg_op_id op) {
  static const struct {
    int64_t v, d, ids[2];
    int rank;
  } cases[] = {{4, 3, {5}, 1}, {10, 16, {4, 9}, 2}, {512, 256, {4096}, 1}, {3, 5, {2, 100}, 2}};
  static const tfg_dtype ids[] = {I32, I64};
  for (int t = 0; t < COUNT(FLOATS); t++)
    for (int i = 0; i < COUNT(ids); i++)
      for (int k = 0; k < COUNT(cases); k++) {
        tfg_dtype dt = FLOATS[t];
        tcase c = tc_new(dt);
        tfg_shape is = shape_of(cases[k].rank, cases[k].ids);
        tfg_shape dys = is;
        dys.dim[dys.rank++] = cases[k].d;
        tfg_node_id x = tc_in(&c, ids[i], is, INTS(0, (double)cases[k].v - 1));
        tfg_node_id dy = tc_in(&c, dt, dys, UNI(-1, 1));
        tfg_attrs a = {.n = cases[k].v};
        tc_desc(&c, "n=%lld ids %s", (long long)cases[k].v, tfg_dtype_name(ids[i]));
        tc_op(&c, op, &a, 2, x, dy);
        tc_check(&c, t_sum(tfg_shape_numel(&is)));
      }
}

/* SGD_UPDATE: torch.optim.SGD in place on (param, grad, momentum_buf),
 * three steps (step 1 initializes the buffer; dampening skips it), plain,
 * momentum with dampening and weight decay, Nesterov. The updated param
 * and buffer are compared (T_OPTIM). */
static void fam_sgd(tfg_op_id op) {
  static const struct {
    double lr, momentum, dampening, wd;
    bool nesterov;
  } cfgs[] = {{0.1, 0, 0, 0, false}, {0.05, 0.9, 0, 0, false}, {0.1, 0.9, 0.1, 1e-2, false}, {0.1, 0.9, 0, 1e-4, true}};
  const tfg_shape shapes[] = {SH(7), SH(33, 65), SH(1048583)};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int f = 0; f < COUNT(cfgs); f++)
      for (int k = 0; k < COUNT(shapes); k++) {
        tfg_dtype dt = dts[d];
        tcase c = tc_new(dt);
        c.launches = 3;
        tfg_node_id p = tc_in(&c, dt, shapes[k], UNI(-1, 1));
        tfg_node_id g = tc_in(&c, dt, shapes[k], UNI(-1, 1));
        tfg_attrs a = {0};
        a.opt.lr = cfgs[f].lr, a.opt.momentum = cfgs[f].momentum, a.opt.dampening = cfgs[f].dampening;
        a.opt.weight_decay = cfgs[f].wd, a.opt.nesterov = cfgs[f].nesterov;
        tc_desc(&c, "lr=%g momentum=%g dampening=%g wd=%g%s steps=3", cfgs[f].lr, cfgs[f].momentum,
                cfgs[f].dampening, cfgs[f].wd, cfgs[f].nesterov ? " nesterov" : "");
        if (cfgs[f].momentum != 0) {
          tfg_node_id buf = tc_in(&c, dt, shapes[k], UNI(-1, 1));
          c.inplace = 1u | 1u << 2;
          tc_op(&c, op, &a, 3, p, g, buf);
        } else {
          c.inplace = 1u;
          tc_op(&c, op, &a, 2, p, g);
        }
        tc_check(&c, T_OPTIM);
      }
}

/* GRAD_ACCUMULATE: acc <- grad (value 0) and acc <- acc + grad (1), in
 * place, three launches (so the sum runs on its own result). */
static void fam_accumulate(tfg_op_id op) {
  const tfg_shape shapes[] = {SH(7), SH(33, 65), SH(1048583)};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int add = 0; add < 2; add++)
      for (int k = 0; k < COUNT(shapes); k++) {
        tfg_dtype dt = dts[d];
        tcase c = tc_new(dt);
        c.launches = 3;
        tfg_node_id acc = tc_in(&c, dt, shapes[k], UNI(-1, 1));
        tfg_node_id g = tc_in(&c, dt, shapes[k], UNI(-1, 1));
        tfg_attrs a = {.value = add};
        tc_desc(&c, "%s launches=3", add ? "acc + grad" : "grad");
        c.inplace = 1u;
        tc_op(&c, op, &a, 2, acc, g);
        tc_check(&c, T_OPTIM);
      }
}

/* AMP_UPDATE: GradScaler.update() in place on (scale, finite, tracker,
 * skipped), f32 scalars but for finite: a skipped step (finite 0) and a
 * good one, from trackers of 0, 1998 and 1999 (the last doubles the
 * scale), three launches each (the state moves on its own result). */
static void fam_amp_update(tfg_op_id op) {
  static const double trackers[] = {0, 1998, 1999};
  for (int f = 0; f < 2; f++)
    for (int t = 0; t < COUNT(trackers); t++) {
      tcase c = tc_new(F32);
      c.launches = 3;
      tfg_node_id scale = tc_in(&c, F32, SCALAR, INTS(1024, 1024));
      tfg_node_id finite = tc_in(&c, BOOL, SCALAR, INTS(f, f));
      tfg_node_id tracker = tc_in(&c, F32, SCALAR, INTS(trackers[t], trackers[t]));
      tfg_node_id skipped = tc_in(&c, F32, SCALAR, INTS(3, 3));
      tc_desc(&c, "finite=%d tracker=%g launches=3", f, trackers[t]);
      c.inplace = 1u | 1u << 2 | 1u << 3;
      tc_op(&c, op, NULL, 4, scale, finite, tracker, skipped);
      tc_check(&c, T_EXACT);
    }
}

/* ADAM_UPDATE: torch.optim.Adam and AdamW in place on (param, grad, m, v),
 * three steps (bias corrections), with L2 and decoupled weight decay, and
 * beta1 = 0.3 (PyTorch's lerp takes its other branch when 1 - beta1 >=
 * 0.5). param, m and v are compared (T_OPTIM). */
static void fam_adam(tfg_op_id op) {
  static const struct {
    double lr, b1, b2, eps, wd;
    bool decoupled;
  } cfgs[] = {{1e-3, 0.9, 0.999, 1e-8, 0, false},
              {1e-2, 0.9, 0.999, 1e-8, 1e-2, false},
              {1e-3, 0.9, 0.999, 1e-8, 1e-2, true},
              {1e-3, 0.3, 0.95, 1e-6, 0, false}};
  const tfg_shape shapes[] = {SH(7), SH(33, 65), SH(1048583)};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int f = 0; f < COUNT(cfgs); f++)
      for (int k = 0; k < COUNT(shapes); k++) {
        tfg_dtype dt = dts[d];
        tcase c = tc_new(dt);
        c.launches = 3;
        c.inplace = 1u | 1u << 2 | 1u << 3;
        tfg_node_id p = tc_in(&c, dt, shapes[k], UNI(-1, 1));
        tfg_node_id g = tc_in(&c, dt, shapes[k], UNI(-1, 1));
        tfg_node_id m = tc_in(&c, dt, shapes[k], UNI(-0.1, 0.1));
        tfg_node_id v = tc_in(&c, dt, shapes[k], UNI(0, 0.01));
        tfg_attrs a = {0};
        a.opt.lr = cfgs[f].lr, a.opt.beta1 = cfgs[f].b1, a.opt.beta2 = cfgs[f].b2, a.opt.eps = cfgs[f].eps;
        a.opt.weight_decay = cfgs[f].wd, a.opt.decoupled = cfgs[f].decoupled;
        tc_desc(&c, "lr=%g betas=%g,%g eps=%g wd=%g%s steps=3", cfgs[f].lr, cfgs[f].b1, cfgs[f].b2, cfgs[f].eps,
                cfgs[f].wd, cfgs[f].decoupled ? " adamw" : "");
        tc_op(&c, op, &a, 4, p, g, m, v);
        tc_check(&c, T_OPTIM);
      }
}

/* ALLREDUCE on its own is the group of one: a copy, exact, every dtype
 * (groups of several run through runtime/collective, tested end to end by
 * tests/gpu/run.sh); so are REDUCE_SCATTER and ALL_GATHER. */
static void fam_allreduce(tfg_op_id op) {
  const tfg_shape shapes[] = {SH(5), SH(33, 65), SH(1048583)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(shapes); k++) {
      tcase c = tc_new(ALL_DTYPES[d]);
      tfg_node_id x = tc_in(&c, ALL_DTYPES[d], shapes[k], UNI(-10, 10));
      tfg_attrs a = {.n = 1, .end = op == TFG_OP_ALL_GATHER ? tfg_shape_numel(&shapes[k]) : 0}; /* one piece */
      tc_op(&c, op, &a, 1, x);
      tc_check(&c, T_EXACT);
    }
}

/* INIT: every initializer, every dtype, shapes whose fans differ (a
 * matrix, a conv kernel). Constants and uniform draws (uniform, glorot)
 * are base/rng.h arithmetic only: bit for bit (this needs the CUDA side
 * compiled without contracting lo + (hi - lo) * u into an FMA). normal and
 * he go through log and cos: T_NORMAL. */
static void fam_init(tfg_op_id op) {
  static const struct {
    tfg_init_kind kind;
    const char *name;
    double value, a, b;
  } kinds[] = {{TFG_INIT_ZEROS, "zeros", 0, 0, 0},       {TFG_INIT_ONES, "ones", 0, 0, 0},
               {TFG_INIT_FULL, "full(2.5)", 2.5, 0, 0},   {TFG_INIT_NORMAL, "normal(0.5, 2)", 0, 0.5, 2},
               {TFG_INIT_UNIFORM, "uniform(-3, 1)", 0, -3, 1}, {TFG_INIT_GLOROT, "glorot", 0, 0, 0},
               {TFG_INIT_HE, "he", 0, 0, 0}};
  const tfg_shape shapes[] = {SH(1001), SH(64, 33), SH(16, 8, 3, 3), SH(1048579)};
  for (int d = 0; d < COUNT(ALL_DTYPES); d++)
    for (int k = 0; k < COUNT(kinds); k++)
      for (int s = 0; s < COUNT(shapes); s++) {
        tfg_dtype dt = ALL_DTYPES[d];
        tcase c = tc_new(dt);
        tfg_attrs a = {.init = kinds[k].kind, .value = kinds[k].value, .a = kinds[k].a, .b = kinds[k].b,
                       .seed = 99 + (uint64_t)k, .seeded = true};
        tfg_node_id y = tc_op(&c, op, &a, 0);
        c.g->nodes[y].dtype = dt;
        c.g->nodes[y].shape = shapes[s];
        tc_desc(&c, "%s seed=%llu", kinds[k].name, (unsigned long long)a.seed);
        bool normal = kinds[k].kind == TFG_INIT_NORMAL || kinds[k].kind == TFG_INIT_HE;
        tc_check(&c, normal ? T_NORMAL : T_EXACT);
      }
}

/* FUSED: chains of elementwise ops compiled by tfg_fused_build from nodes
 * of the graph, as the executor builds them from the plan's chains. The
 * chain runs each op as its own kernel would (kernels/fused.h), so a chain
 * of single IEEE operations is exact: relu(x * a + b), the benchmark's
 * chain, must not become an FMA, and the 16-op, 8-input chain (the
 * limits) neither. Chains through transcendentals compound their ops'
 * errors: T_NN. Scalar inputs (read at every position) and full ones. */
enum { CH_AFFINE_RELU, CH_SELECT, CH_MATH, CH_POW, CH_LONG };

static void fused_chain(tcase *c, int kind, tfg_dtype dt, tfg_shape s) {
  tfg_node_id in[TFG_FUSED_MAX_INPUTS], m[TFG_FUSED_MAX_OPS];
  int ni = 0, nm = 0;
  switch (kind) {
  case CH_AFFINE_RELU:
    in[ni++] = tc_in(c, dt, s, UNI(-4, 4));
    in[ni++] = tc_in(c, dt, SCALAR, UNI(0.5, 2));
    in[ni++] = tc_in(c, dt, SCALAR, UNI(-1, 1));
    m[nm++] = tc_op(c, TFG_OP_MUL, NULL, 2, in[0], in[1]);
    m[nm++] = tc_op(c, TFG_OP_ADD, NULL, 2, m[0], in[2]);
    m[nm++] = tc_op(c, TFG_OP_RELU, NULL, 1, m[1]);
    tc_desc(c, "relu(x * a + b), a and b scalars");
    break;
  case CH_SELECT:
    for (int k = 0; k < 4; k++) in[ni++] = tc_in(c, dt, s, UNI(-3, 3));
    m[nm++] = tc_op(c, TFG_OP_SUB, NULL, 2, in[0], in[1]);
    m[nm++] = tc_op(c, TFG_OP_MUL, NULL, 2, in[2], in[3]);
    m[nm++] = tc_op(c, TFG_OP_MAXIMUM, NULL, 2, m[0], m[1]);
    m[nm++] = tc_op(c, TFG_OP_ABS, NULL, 1, in[0]);
    m[nm++] = tc_op(c, TFG_OP_NEG, NULL, 1, m[3]);
    m[nm++] = tc_op(c, TFG_OP_MINIMUM, NULL, 2, m[2], m[4]);
    tc_desc(c, "minimum(maximum(x - y, z * w), -abs(x))");
    break;
  case CH_MATH:
    in[ni++] = tc_in(c, dt, s, UNI(-3, 3));
    in[ni++] = tc_in(c, dt, s, UNI(0.1, 4));
    m[nm++] = tc_op(c, TFG_OP_TANH, NULL, 1, in[0]);
    m[nm++] = tc_op(c, TFG_OP_NEG, NULL, 1, in[1]);
    m[nm++] = tc_op(c, TFG_OP_EXP, NULL, 1, m[1]);
    m[nm++] = tc_op(c, TFG_OP_MUL, NULL, 2, m[0], m[2]);
    m[nm++] = tc_op(c, TFG_OP_SIGMOID, NULL, 1, m[3]);
    m[nm++] = tc_op(c, TFG_OP_GELU, NULL, 1, in[0]);
    m[nm++] = tc_op(c, TFG_OP_SQRT, NULL, 1, in[1]);
    m[nm++] = tc_op(c, TFG_OP_LOG, NULL, 1, m[6]);
    m[nm++] = tc_op(c, TFG_OP_MUL, NULL, 2, m[5], m[7]);
    m[nm++] = tc_op(c, TFG_OP_ADD, NULL, 2, m[4], m[8]);
    tc_desc(c, "sigmoid(tanh(x) * exp(-y)) + gelu(x) * log(sqrt(y))");
    break;
  case CH_POW:
    in[ni++] = tc_in(c, dt, s, UNI(0.1, 10));
    in[ni++] = tc_in(c, dt, SCALAR, UNI(-2, 2));
    in[ni++] = tc_in(c, dt, s, UNI(0.1, 10));
    m[nm++] = tc_op(c, TFG_OP_POW, NULL, 2, in[0], in[1]);
    m[nm++] = tc_op(c, TFG_OP_RSQRT, NULL, 1, in[2]);
    m[nm++] = tc_op(c, TFG_OP_DIV, NULL, 2, m[0], m[1]);
    tc_desc(c, "pow(x, p) / rsqrt(z), p scalar");
    break;
  default: /* CH_LONG: the limits, 8 inputs and 16 ops, single IEEE operations */
    for (int k = 0; k < TFG_FUSED_MAX_INPUTS; k++) in[ni++] = tc_in(c, dt, k == 3 ? SCALAR : s, UNI(-2, 2));
    m[nm++] = tc_op(c, TFG_OP_ADD, NULL, 2, in[0], in[1]);
    for (int k = 2; nm < TFG_FUSED_MAX_OPS; k++) {
      static const tfg_op_id cycle[] = {TFG_OP_MUL, TFG_OP_SUB, TFG_OP_MAXIMUM, TFG_OP_ADD, TFG_OP_MINIMUM, TFG_OP_NEG};
      tfg_op_id op = cycle[k % 6];
      if (op == TFG_OP_NEG) m[nm] = tc_op(c, op, NULL, 1, m[nm - 1]), nm++;
      else m[nm] = tc_op(c, op, NULL, 2, m[nm - 1], in[k % TFG_FUSED_MAX_INPUTS]), nm++;
    }
    tc_desc(c, "16 ops over 8 inputs (one scalar)");
    break;
  }
  if (c->refused) return;
  if (!tfg_fused_build(c->g, m, nm, in, ni, &c->prog)) {
    c->refused = true;
    tfg_diag_error(c->d, NULL, "tfg_fused_build refused the chain");
    return;
  }
  tfg_attrs a = {.data = &c->prog};
  tfg_node_id f = tc_opv(c, TFG_OP_FUSED, &a, ni, in);
  c->g->nodes[f].dtype = c->g->nodes[m[nm - 1]].dtype;
  c->g->nodes[f].shape = c->g->nodes[m[nm - 1]].shape;
}

static void fam_fused(tfg_op_id op) {
  (void)op;
  const tfg_shape shapes[] = {SH(7), SH(33, 65), SH(1048579)};
  static const tfg_dtype dts[] = {F32, F64, F16};
  for (int d = 0; d < COUNT(dts); d++)
    for (int kind = CH_AFFINE_RELU; kind <= CH_LONG; kind++)
      for (int k = 0; k < COUNT(shapes); k++) {
        tcase c = tc_new(dts[d]);
        fused_chain(&c, kind, dts[d], shapes[k]);
        tc_check(&c, kind == CH_MATH || kind == CH_POW ? T_NN : T_EXACT);
      }
}

/* Bad data: both sides must refuse it with the same status (the CPU's:
 * TFG_ERR_NUMERIC), the backend's arriving at synchronize. */
static void bad_data(void) {
  {
    tcase c = tc_new(F32);
    tfg_node_id tab = tc_in(&c, F32, SH(10, 4), UNI(-1, 1));
    tfg_node_id x = tc_in(&c, I32, SH(6), INTS(0, 9));
    ((int32_t *)c.in[1].data)[4] = 10;
    tc_desc(&c, "id 10 of a 10-row table");
    tc_op(&c, TFG_OP_EMBEDDING, NULL, 2, tab, x);
    tc_expect_error(&c);
  }
  {
    tcase c = tc_new(F32);
    tfg_node_id x = tc_in(&c, I64, SH(6), INTS(0, 3));
    tfg_node_id dy = tc_in(&c, F32, SH(6, 3), UNI(-1, 1));
    ((int64_t *)c.in[0].data)[5] = -1;
    tfg_attrs a = {.n = 4};
    tc_desc(&c, "id -1");
    tc_op(&c, TFG_OP_EMBEDDING_GRAD, &a, 2, x, dy);
    tc_expect_error(&c);
  }
  {
    tcase c = tc_new(F32);
    tfg_node_id x = tc_in(&c, F32, SH(8, 10), UNI(-1, 1));
    tfg_node_id y = tc_in(&c, I32, SH(8), INTS(0, 9));
    ((int32_t *)c.in[1].data)[3] = 10;
    tc_desc(&c, "label 10 of 10 classes");
    tc_op(&c, TFG_OP_CROSS_ENTROPY, NULL, 2, x, y);
    tc_expect_error(&c);
  }
  {
    tcase c = tc_new(F32);
    tfg_node_id x = tc_in(&c, F32, SH(8, 10), UNI(-1, 1));
    tfg_node_id y = tc_in(&c, I64, SH(8), INTS(0, 9));
    tfg_node_id dy = tc_in(&c, F32, SCALAR, UNI(1, 2));
    ((int64_t *)c.in[1].data)[0] = -1;
    tc_desc(&c, "label -1");
    tc_op(&c, TFG_OP_CROSS_ENTROPY_GRAD, NULL, 3, x, y, dy);
    tc_expect_error(&c);
  }
}

/* ---- the registry walk -------------------------------------------------------------------------- */

typedef void (*family_fn)(tfg_op_id op);

/* Every op with a CPU kernel has a family here (main() fails an op that
 * has none). */
static const family_fn families[TFG_OP_COUNT] = {
    [TFG_OP_INIT] = fam_init,
    [TFG_OP_NEG] = fam_unary, [TFG_OP_EXP] = fam_unary, [TFG_OP_LOG] = fam_unary, [TFG_OP_SQRT] = fam_unary,
    [TFG_OP_RSQRT] = fam_unary, [TFG_OP_ABS] = fam_unary, [TFG_OP_RELU] = fam_unary, [TFG_OP_GELU] = fam_unary,
    [TFG_OP_TANH] = fam_unary, [TFG_OP_SIGMOID] = fam_unary,
    [TFG_OP_CAST] = fam_cast,
    [TFG_OP_ADD] = fam_binary, [TFG_OP_SUB] = fam_binary, [TFG_OP_MUL] = fam_binary, [TFG_OP_DIV] = fam_binary,
    [TFG_OP_POW] = fam_binary, [TFG_OP_MAXIMUM] = fam_binary, [TFG_OP_MINIMUM] = fam_binary,
    [TFG_OP_EQUAL] = fam_binary, [TFG_OP_GREATER] = fam_binary,
    [TFG_OP_WHERE] = fam_where,
    [TFG_OP_MATMUL] = fam_matmul,
    [TFG_OP_SUM] = fam_reduce, [TFG_OP_MEAN] = fam_reduce, [TFG_OP_MAX] = fam_reduce,
    [TFG_OP_ARGMAX] = fam_argmax,
    [TFG_OP_RESHAPE] = fam_reshape, [TFG_OP_FLATTEN] = fam_flatten, [TFG_OP_TRANSPOSE] = fam_transpose,
    [TFG_OP_CONCAT] = fam_concat, [TFG_OP_SLICE] = fam_slice, [TFG_OP_BROADCAST] = fam_broadcast,
    [TFG_OP_SOFTMAX] = fam_softmax, [TFG_OP_LOG_SOFTMAX] = fam_softmax,
    [TFG_OP_CROSS_ENTROPY] = fam_logits, [TFG_OP_ACCURACY] = fam_logits, [TFG_OP_CROSS_ENTROPY_GRAD] = fam_logits,
    [TFG_OP_MSE] = fam_mse,
    [TFG_OP_CONV2D] = fam_conv, [TFG_OP_CONV2D_GRAD_INPUT] = fam_conv, [TFG_OP_CONV2D_GRAD_WEIGHT] = fam_conv,
    [TFG_OP_MAX_POOL] = fam_pool, [TFG_OP_AVG_POOL] = fam_pool, [TFG_OP_MAX_POOL_GRAD] = fam_pool,
    [TFG_OP_AVG_POOL_GRAD] = fam_pool,
    [TFG_OP_LAYER_NORM] = fam_layer_norm, [TFG_OP_LAYER_NORM_GRAD] = fam_layer_norm,
    [TFG_OP_ATTENTION] = fam_attention, [TFG_OP_ATTENTION_PROBS] = fam_attention,
    [TFG_OP_ATTENTION_GRAD] = fam_attention,
    [TFG_OP_DROPOUT] = fam_dropout,
    [TFG_OP_EMBEDDING] = fam_embedding, [TFG_OP_ONE_HOT] = fam_one_hot,
    [TFG_OP_RELU_GRAD] = fam_act_grad, [TFG_OP_GELU_GRAD] = fam_act_grad,
    [TFG_OP_EMBEDDING_GRAD] = fam_embedding_grad,
    [TFG_OP_SGD_UPDATE] = fam_sgd, [TFG_OP_ADAM_UPDATE] = fam_adam, [TFG_OP_GRAD_ACCUMULATE] = fam_accumulate,
    [TFG_OP_AMP_UPDATE] = fam_amp_update,
    [TFG_OP_ALLREDUCE] = fam_allreduce,
    [TFG_OP_REDUCE_SCATTER] = fam_allreduce, /* groups of one: copies too */
    [TFG_OP_ALL_GATHER] = fam_allreduce,
    [TFG_OP_FUSED] = fam_fused,
};

/* Ops with a CPU kernel that conformance does not run, and why: no
 * backend launches a constant; send and recv move a value's bytes
 * between the ranks of an mpirun job, on host devices only (the executor
 * refuses them elsewhere), and tests/mpi.sh runs them. */
static const char *never_launched(tfg_op_id op) {
  if (op == TFG_OP_CONST) return "the executor copies a constant's payload (copy_from_host)";
  if (op == TFG_OP_SEND || op == TFG_OP_RECV) return "bytes between ranks on host devices (tests/mpi.sh)";
  return NULL;
}

static bool selected(const char *name) {
  if (!S.only) return true;
  for (int i = 0; i < S.nonly; i++)
    if (!strcmp(S.only[i], name)) return true;
  return false;
}

static int usage(FILE *f, int code) {
  fprintf(f, "usage: conformance [--devices SPEC] [-q] [OP... | errors]\n"
             "  runs every op's kernel on the first GPU entry of SPEC (default cuda:0) against the\n"
             "  CPU kernel; SPEC = host tests the host backend (a self-test of this suite);\n"
             "  OP names limit the run to those ops (`errors`: the bad-data cases); -q prints\n"
             "  failures and the summary only\n");
  return code;
}

int main(int argc, char **argv) {
  const char *spec = "cuda:0";
  int first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (!strcmp(argv[first], "-q")) S.quiet = true;
    else if (!strcmp(argv[first], "--devices") && first + 1 < argc) spec = argv[++first];
    else if (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h")) return usage(stdout, 0);
    else return usage(stderr, 2);
  }
  if (first < argc) {
    S.only = (const char *const *)argv + first;
    S.nonly = argc - first;
    for (int i = 0; i < S.nonly; i++)
      if (tfg_op_lookup(S.only[i]) < 0 && strcmp(S.only[i], "errors")) {
        bool found = false;
        for (int op = 0; op < TFG_OP_COUNT && !found; op++) found = !strcmp(tfg_op_get((tfg_op_id)op)->name, S.only[i]);
        if (!found) {
          fprintf(stderr, "conformance: no op named '%s'\n", S.only[i]);
          return 2;
        }
      }
  }

  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  const tfg_device *dev = NULL;
  S.sw = gpu_test_switches();
  int opened = gpu_test_open(d, spec, "conformance", &S.sw, &ds, &dev, &S.b);
  if (opened != GPU_TEST_OPEN) {
    tfg_diag_free(d);
    return opened == GPU_TEST_SKIP ? 0 : 2;
  }
  S.dev = dev;
  S.s = tfg_backend_stream_create(S.b);
  S.pool = tfg_pool_new(0);
  printf("conformance: %s (%s, the %s backend) against the CPU kernels\n", dev->name, dev->hardware,
         tfg_backend_name(S.b));
  fflush(stdout);

  const char *why = NULL;
  if (!check_half_tolerance(&why)) {
    printf("FAIL the suite's 16-bit tolerance: %s\n", why);
    S.failed++;
  }
  int ops = 0, untested = 0;
  for (int i = 0; i < TFG_OP_COUNT; i++) {
    tfg_op_id op = (tfg_op_id)i;
    const tfg_op_def *def = tfg_op_get(op);
    if (!tfg_cpu_kernel(op) || never_launched(op) || !selected(def->name)) continue;
    ops++;
    S.op_cases = 0;
    S.seed = tfg_rng_mix(0xC0FFEEull + (uint64_t)i); /* the same data whatever ops are selected */
    if (!families[op]) {
      printf("FAIL %-19s: has a CPU kernel and no conformance case: add one to tests/gpu/conformance.c\n", def->name);
      S.failed++, untested++;
      continue;
    }
    int failed_before = S.failed;
    families[op](op);
    if (S.op_cases == 0) {
      printf("FAIL %-19s: no case ran (every dtype was skipped: a broken family)\n", def->name);
      S.failed++, untested++;
    } else if (S.quiet && S.failed > failed_before) {
      fflush(stdout);
    }
  }
  if (selected("errors")) {
    S.seed = tfg_rng_mix(0xBADull);
    bad_data();
  }

  printf("conformance: %d cases on %s over %d ops (%d without a case): %d passed, %d failed; %d (op, dtype) "
         "combinations the CPU does not support skipped\n",
         S.cases, dev->name, ops, untested, S.passed, S.failed, S.skipped);
  tfg_backend_stream_free(S.b, S.s);
  tfg_backend_destroy(S.b);
  if (S.b_ref) {
    tfg_backend_stream_free(S.b_ref, S.s_ref);
    tfg_backend_destroy(S.b_ref);
  }
  if (S.b_tf32) {
    tfg_backend_stream_free(S.b_tf32, S.s_tf32);
    tfg_backend_destroy(S.b_tf32);
  }
  tfg_pool_free(S.pool);
  tfg_devices_free(ds);
  tfg_diag_free(d);
  return S.failed ? 1 : 0;
}
