/* ir/ops.c: the op registry: shape rules and costs (each backend
 * keeps its own kernels per op: kernels/cpu/registry.c, kernels/cuda).
 *
 * Shape rules run as the interpreter adds each node, so every shape or
 * dtype error is reported at the expression that built the node, naming
 * the shapes involved (`matmul: f32[128,64] x f32[32,10]: inner
 * dimensions 64 and 32 differ`). A rule also normalizes the raw
 * arguments (attrs.iv: axes, perms, shapes as written) into the fields
 * the kernels read. */
#include "ir/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "base/assert.h"
#include "base/strbuf.h"
#include "ir/graph.h"
#include "ir/fused.h"
#include "ir/matmul_view.h"

/* ---- helpers ------------------------------------------------------------ */

static const tfg_node *input(const tfg_graph *g, const tfg_node *n, int i) {
  return &g->nodes[n->inputs[i]];
}

/* Reports "OPNAME: message" at the node's source and returns TFG_ERR_SHAPE. */
static tfg_status fail(tfg_diag *d, const tfg_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tfg_status fail(tfg_diag *d, const tfg_node *n, const char *fmt, ...) {
  tfg_strbuf b = {0};
  tfg_strbuf_printf(&b, "%s: ", tfg_op_get(n->op)->name);
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  tfg_diag_error(d, &n->loc, "%s", b.data);
  tfg_strbuf_free(&b);
  return TFG_ERR_SHAPE;
}

/* "f32[128,64]" of a node, in one of a few rotating buffers so a message
 * can name several. */
static const char *ty(const tfg_node *n) {
  static char bufs[4][160];
  static int k;
  char *buf = bufs[k++ & 3];
  tfg_strbuf b = {0};
  tfg_shape_format(&b, n->dtype, &n->shape);
  snprintf(buf, sizeof bufs[0], "%s", b.data);
  tfg_strbuf_free(&b);
  return buf;
}

/* Gives n the dtype and shape of x, the output of every op shaped like
 * an input; returns TFG_OK, so a shape rule can end with it. */
static tfg_status like(tfg_node *n, const tfg_node *x) {
  n->dtype = x->dtype;
  n->shape = x->shape;
  return TFG_OK;
}

static tfg_status need_float(tfg_diag *d, tfg_node *n, const tfg_node *x) {
  if (tfg_dtype_is_float(x->dtype)) return TFG_OK;
  tfg_status s = fail(d, n, "needs a float tensor, got %s", ty(x));
  tfg_diag_help(d, "convert it first: cast(x, f32)");
  return s;
}

static tfg_status need_numeric(tfg_diag *d, tfg_node *n, const tfg_node *x) {
  if (x->dtype != TFG_DTYPE_BOOL) return TFG_OK;
  tfg_status s = fail(d, n, "needs a numeric tensor, got %s", ty(x));
  tfg_diag_help(d, "convert it first: cast(x, f32)");
  return s;
}

static tfg_status need_int(tfg_diag *d, tfg_node *n, const tfg_node *x, const char *what) {
  if (tfg_dtype_is_int(x->dtype)) return TFG_OK;
  return fail(d, n, "%s must be an integer tensor (i32 or i64), got %s", what, ty(x));
}

/* Normalizes axis a of a rank-r tensor (negative counts from the end). */
static bool norm_axis(int64_t a, int r, int64_t *out) {
  if (a < 0) a += r;
  if (a < 0 || a >= r) return false;
  *out = a;
  return true;
}

/* A float matrix m and the integer ids that pick its rows or columns
 * (cross_entropy's logits and labels, embedding's table and ids); form
 * says in the message what m must be, what names the ids. */
static tfg_status need_matrix_ids(tfg_diag *d, tfg_node *n, const tfg_node *m, const char *form,
                                  const tfg_node *ids, const char *what) {
  tfg_status s = need_float(d, n, m);
  if (s != TFG_OK) return s;
  if (m->shape.rank != 2) return fail(d, n, "%s, got %s", form, ty(m));
  return need_int(d, n, ids, what);
}

/* Normalizes n's attrs.axis, an axis of x, in place (the kernels read
 * it from 0), or reports it out of range. */
static tfg_status need_axis(tfg_diag *d, tfg_node *n, const tfg_node *x) {
  int64_t a;
  if (!norm_axis(n->attrs.axis, x->shape.rank, &a))
    return fail(d, n, "axis %lld is out of range for %s", (long long)n->attrs.axis, ty(x));
  n->attrs.axis = a;
  return TFG_OK;
}

/* NumPy broadcasting of a and b into out; on failure *bad is the output
 * axis (counted from the right-aligned end) that conflicts. */
static bool broadcast2(const tfg_shape *a, const tfg_shape *b, tfg_shape *out, int *bad) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
    if (da == db || db == 1) out->dim[i] = da;
    else if (da == 1) out->dim[i] = db;
    else {
      *bad = i;
      return false;
    }
  }
  return true;
}

static const char *op_symbol(tfg_op_id op) {
  switch (op) {
  case TFG_OP_ADD: return "+";
  case TFG_OP_SUB: return "-";
  case TFG_OP_MUL: return "*";
  case TFG_OP_DIV: return "/";
  default: return ",";
  }
}

/* ---- sources ------------------------------------------------------------- */

/* CONST, PARAM, INPUT and INIT nodes get their dtype and shape from the
 * statement or call that built them: nothing to infer. */
static tfg_status infer_source(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)g;
  (void)n;
  (void)d;
  return TFG_OK;
}

/* ---- elementwise ---------------------------------------------------------- */

static tfg_status infer_unary(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_status s = tfg_op_get(n->op)->ints ? need_numeric(d, n, x) : need_float(d, n, x);
  if (s != TFG_OK) return s;
  return like(n, x);
}

static tfg_status infer_cast(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)d;
  n->dtype = n->attrs.dtype;
  n->shape = input(g, n, 0)->shape;
  return TFG_OK;
}

static tfg_status infer_binary(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *a = input(g, n, 0), *b = input(g, n, 1);
  const char *sym = op_symbol(n->op);
  if (a->dtype != b->dtype) {
    tfg_status s = fail(d, n, "%s %s %s: dtypes differ", ty(a), sym, ty(b));
    tfg_diag_help(d, "convert one side: cast(x, %s)", tfg_dtype_name(a->dtype));
    return s;
  }
  int bad;
  if (!broadcast2(&a->shape, &b->shape, &n->shape, &bad)) {
    int r = n->shape.rank;
    int ia = a->shape.rank - r + bad, ib = b->shape.rank - r + bad;
    return fail(d, n, "%s %s %s: shapes do not broadcast (%lld vs %lld)", ty(a), sym, ty(b),
                (long long)a->shape.dim[ia], (long long)b->shape.dim[ib]);
  }
  const tfg_op_def *def = tfg_op_get(n->op);
  bool cmp = def->kind == TFG_OP_KIND_COMPARE; /* any dtype, bool too */
  tfg_status s = TFG_OK;
  if (n->op == TFG_OP_DIV) {
    /* NumPy and PyTorch divide integers into floats; tfg keeps dtypes
     * explicit, so the user chooses the float type. */
    if (!tfg_dtype_is_float(a->dtype)) {
      s = fail(d, n, "%s / %s: division needs float tensors", ty(a), ty(b));
      tfg_diag_help(d, "convert first: cast(x, f32) / cast(y, f32)");
    }
  } else if (!cmp) {
    s = def->ints ? need_numeric(d, n, a) : need_float(d, n, a);
  }
  if (s != TFG_OK) return s;
  n->dtype = cmp ? TFG_DTYPE_BOOL : a->dtype;
  return TFG_OK;
}

static tfg_status infer_where(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *c = input(g, n, 0), *a = input(g, n, 1), *b = input(g, n, 2);
  if (c->dtype != TFG_DTYPE_BOOL)
    return fail(d, n, "the condition must be a bool tensor, got %s", ty(c));
  if (a->dtype != b->dtype) {
    tfg_status s = fail(d, n, "%s and %s: dtypes differ", ty(a), ty(b));
    tfg_diag_help(d, "convert one side: cast(x, %s)", tfg_dtype_name(a->dtype));
    return s;
  }
  tfg_shape ab, all;
  int bad;
  if (!broadcast2(&a->shape, &b->shape, &ab, &bad) || !broadcast2(&c->shape, &ab, &all, &bad))
    return fail(d, n, "%s, %s and %s: shapes do not broadcast", ty(c), ty(a), ty(b));
  n->dtype = a->dtype;
  n->shape = all;
  return TFG_OK;
}

/* ---- matmul ---------------------------------------------------------------- */

static tfg_status infer_matmul(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *a = input(g, n, 0), *b = input(g, n, 1);
  if (a->shape.rank < 2 || b->shape.rank < 2) {
    tfg_status s = fail(d, n, "%s x %s: both operands need at least 2 dimensions", ty(a), ty(b));
    tfg_diag_help(d, "make a vector a matrix first: reshape(v, [1, -1])");
    return s;
  }
  if (a->dtype != b->dtype) {
    tfg_status s = fail(d, n, "%s x %s: dtypes differ", ty(a), ty(b));
    tfg_diag_help(d, "convert one side: cast(x, %s)", tfg_dtype_name(a->dtype));
    return s;
  }
  tfg_status s = need_float(d, n, a);
  if (s != TFG_OK) return s;
  int ra = a->shape.rank, rb = b->shape.rank;
  int64_t m = a->shape.dim[ra - 2], ka = a->shape.dim[ra - 1];
  int64_t kb = b->shape.dim[rb - 2], nn = b->shape.dim[rb - 1];
  if (n->attrs.transpose_a) { int64_t t = m; m = ka; ka = t; }
  if (n->attrs.transpose_b) { int64_t t = kb; kb = nn; nn = t; }
  if (ka != kb)
    return fail(d, n, "%s x %s: inner dimensions %lld and %lld differ", ty(a), ty(b),
                (long long)ka, (long long)kb);
  tfg_shape ba = a->shape, bb = b->shape, batch;
  ba.rank -= 2;
  bb.rank -= 2;
  int bad;
  if (!broadcast2(&ba, &bb, &batch, &bad))
    return fail(d, n, "%s x %s: batch dimensions do not broadcast", ty(a), ty(b));
  n->shape = batch;
  n->shape.dim[n->shape.rank++] = m;
  n->shape.dim[n->shape.rank++] = nn;
  n->dtype = a->dtype;
  return TFG_OK;
}

/* ---- reductions ------------------------------------------------------------ */

static tfg_status infer_reduce(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_status s = n->op == TFG_OP_MEAN ? need_float(d, n, x) : need_numeric(d, n, x);
  if (s != TFG_OK) return s;
  int r = x->shape.rank;
  uint32_t mask = 0;
  if (n->attrs.iv_none) {
    mask = r ? (1u << r) - 1 : 0;
  } else {
    for (int i = 0; i < n->attrs.niv; i++) {
      int64_t a;
      if (!norm_axis(n->attrs.iv[i], r, &a))
        return fail(d, n, "axis %lld is out of range for %s", (long long)n->attrs.iv[i], ty(x));
      if (mask & (1u << a)) return fail(d, n, "axis %lld is given twice", (long long)a);
      mask |= 1u << a;
    }
  }
  n->attrs.axes = mask;
  n->dtype = x->dtype;
  n->shape.rank = 0;
  for (int i = 0; i < r; i++) {
    if (!(mask & (1u << i))) n->shape.dim[n->shape.rank++] = x->shape.dim[i];
    else if (n->attrs.keepdims) n->shape.dim[n->shape.rank++] = 1;
  }
  return TFG_OK;
}

static tfg_status infer_argmax(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_status s = need_numeric(d, n, x);
  if (s != TFG_OK) return s;
  if ((s = need_axis(d, n, x)) != TFG_OK) return s;
  int64_t a = n->attrs.axis;
  n->dtype = TFG_DTYPE_I32;
  n->shape.rank = 0;
  for (int i = 0; i < x->shape.rank; i++)
    if (i != a) n->shape.dim[n->shape.rank++] = x->shape.dim[i];
  return TFG_OK;
}

/* ---- shape ops ------------------------------------------------------------- */

static tfg_status infer_reshape(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  int64_t total = tfg_shape_numel(&x->shape), known = 1;
  int infer_at = -1;
  if (n->attrs.niv > TFG_MAX_RANK) return fail(d, n, "more than %d dimensions", TFG_MAX_RANK);
  n->shape.rank = n->attrs.niv;
  for (int i = 0; i < n->attrs.niv; i++) {
    int64_t v = n->attrs.iv[i];
    if (v == -1) {
      if (infer_at >= 0) return fail(d, n, "only one dimension may be -1");
      infer_at = i;
    } else if (v < 0) {
      return fail(d, n, "dimension %lld is negative", (long long)v);
    } else if (v > 0 && known > TFG_MAX_ELEMENTS / v) {
      /* Checked before multiplying: the product of a user's dimensions
       * could overflow, and no tensor holds more than 2^48 elements. */
      return fail(d, n, "the new shape has more than 2^48 elements");
    } else {
      known *= v;
    }
    n->shape.dim[i] = v;
  }
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      return fail(d, n, "cannot reshape %s (%lld elements) with a -1 into a multiple of %lld",
                  ty(x), (long long)total, (long long)known);
    n->shape.dim[infer_at] = total / known;
  } else if (known != total) {
    tfg_strbuf b = {0};
    tfg_shape_format(&b, x->dtype, &n->shape);
    tfg_status s = fail(d, n, "cannot reshape %s (%lld elements) into %s (%lld elements)", ty(x),
                        (long long)total, b.data, (long long)known);
    tfg_strbuf_free(&b);
    return s;
  }
  n->dtype = x->dtype;
  return TFG_OK;
}

static tfg_status infer_flatten(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  if (x->shape.rank < 1) return fail(d, n, "needs at least one dimension, got %s", ty(x));
  int64_t rest = 1;
  for (int i = 1; i < x->shape.rank; i++) rest *= x->shape.dim[i];
  n->dtype = x->dtype;
  n->shape.rank = 2;
  n->shape.dim[0] = x->shape.dim[0];
  n->shape.dim[1] = rest;
  return TFG_OK;
}

static tfg_status infer_transpose(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  int r = x->shape.rank;
  if (n->attrs.iv_none) {
    for (int i = 0; i < r; i++) n->attrs.perm[i] = r - 1 - i;
  } else {
    if (n->attrs.niv != r)
      return fail(d, n, "perm has %d entries for %s, which has %d dimensions", n->attrs.niv, ty(x), r);
    uint32_t seen = 0;
    for (int i = 0; i < r; i++) {
      int64_t a;
      if (!norm_axis(n->attrs.iv[i], r, &a) || (seen & (1u << a)))
        return fail(d, n, "perm must list each axis of %s once", ty(x));
      seen |= 1u << a;
      n->attrs.perm[i] = (int)a;
    }
  }
  n->dtype = x->dtype;
  n->shape.rank = r;
  for (int i = 0; i < r; i++) n->shape.dim[i] = x->shape.dim[n->attrs.perm[i]];
  return TFG_OK;
}

static tfg_status infer_concat(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  if (n->ninputs < 1) return fail(d, n, "needs a non-empty list of tensors");
  const tfg_node *x0 = input(g, n, 0);
  tfg_status s = need_axis(d, n, x0);
  if (s != TFG_OK) return s;
  int64_t a = n->attrs.axis;
  n->dtype = x0->dtype;
  n->shape = x0->shape;
  for (int k = 1; k < n->ninputs; k++) {
    const tfg_node *xk = input(g, n, k);
    if (xk->dtype != x0->dtype) {
      s = fail(d, n, "%s and %s: dtypes differ", ty(x0), ty(xk));
      tfg_diag_help(d, "convert one: cast(x, %s)", tfg_dtype_name(x0->dtype));
      return s;
    }
    bool ok = xk->shape.rank == x0->shape.rank;
    for (int i = 0; ok && i < x0->shape.rank; i++)
      ok = i == a || xk->shape.dim[i] == x0->shape.dim[i];
    if (!ok)
      return fail(d, n, "%s and %s differ outside axis %lld", ty(x0), ty(xk), (long long)a);
    n->shape.dim[a] += xk->shape.dim[a];
  }
  return TFG_OK;
}

static tfg_status infer_slice(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  int64_t a;
  if (!norm_axis(n->attrs.axis, x->shape.rank, &a))
    return fail(d, n, "axis %lld is out of range for %s", (long long)n->attrs.axis, ty(x));
  int64_t dim = x->shape.dim[a], s = n->attrs.start, e = n->attrs.end;
  /* Negative bounds count from the end, as in Python. */
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  if (s < 0 || e > dim || s > e)
    return fail(d, n, "[%lld, %lld) is not a range within axis %lld of %s (size %lld)",
                (long long)n->attrs.start, (long long)n->attrs.end, (long long)a, ty(x),
                (long long)dim);
  n->attrs.axis = a;
  n->attrs.start = s;
  n->attrs.end = e;
  n->dtype = x->dtype;
  n->shape = x->shape;
  n->shape.dim[a] = e - s;
  return TFG_OK;
}

static tfg_status infer_broadcast(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_shape want = {.rank = n->attrs.niv}, out;
  for (int i = 0; i < n->attrs.niv; i++) {
    if (n->attrs.iv[i] < 0) return fail(d, n, "dimension %lld is negative", (long long)n->attrs.iv[i]);
    want.dim[i] = n->attrs.iv[i];
  }
  int bad;
  if (want.rank < x->shape.rank || !broadcast2(&x->shape, &want, &out, &bad) ||
      !tfg_shape_eq(&out, &want)) {
    tfg_strbuf b = {0};
    tfg_shape_format(&b, x->dtype, &want);
    tfg_status s = fail(d, n, "cannot broadcast %s to %s", ty(x), b.data);
    tfg_strbuf_free(&b);
    return s;
  }
  n->dtype = x->dtype;
  n->shape = want;
  return TFG_OK;
}

/* ---- neural network ---------------------------------------------------------- */

static tfg_status infer_softmax(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_status s = need_float(d, n, x);
  if (s == TFG_OK) s = need_axis(d, n, x);
  if (s != TFG_OK) return s;
  return like(n, x);
}

/* logits [N, C] with int labels [N]: cross_entropy and accuracy. */
static tfg_status check_logits_labels(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *l = input(g, n, 0), *y = input(g, n, 1);
  tfg_status s = need_matrix_ids(d, n, l, "logits must be [batch, classes]", y, "labels");
  if (s != TFG_OK) return s;
  if (y->shape.rank != 1 || y->shape.dim[0] != l->shape.dim[0]) {
    s = fail(d, n, "labels must be [%lld] to match logits %s, got %s",
             (long long)l->shape.dim[0], ty(l), ty(y));
    if (y->shape.rank == 2 && y->shape.dim[0] == l->shape.dim[0])
      tfg_diag_help(d, "labels are class indices, not one-hot rows: argmax(y, axis = 1)");
    return s;
  }
  n->shape.rank = 0;
  return TFG_OK;
}

static tfg_status infer_cross_entropy(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  tfg_status s = check_logits_labels(g, n, d);
  n->dtype = input(g, n, 0)->dtype;
  return s;
}

static tfg_status infer_accuracy(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  tfg_status s = check_logits_labels(g, n, d);
  n->dtype = TFG_DTYPE_F32;
  return s;
}

static tfg_status infer_mse(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *a = input(g, n, 0), *b = input(g, n, 1);
  tfg_status s = need_float(d, n, a);
  if (s != TFG_OK) return s;
  if (a->dtype != b->dtype || !tfg_shape_eq(&a->shape, &b->shape))
    return fail(d, n, "%s and %s: prediction and target must have the same dtype and shape",
                ty(a), ty(b));
  n->dtype = a->dtype;
  n->shape.rank = 0;
  return TFG_OK;
}

/* Output size and padding of one spatial axis for conv2d ("same" follows
 * TensorFlow: out = ceil(in / stride), the extra pixel at the end). */
static bool conv_axis(int64_t in, int64_t k, int64_t stride, int mode, int64_t pad, int64_t *out,
                      int64_t *lo, int64_t *hi) {
  if (mode == TFG_PAD_SAME) {
    *out = (in + stride - 1) / stride;
    int64_t total = (*out - 1) * stride + k - in;
    if (total < 0) total = 0;
    *lo = total / 2;
    *hi = total - *lo;
    return true;
  }
  *lo = *hi = mode == TFG_PAD_VALID ? 0 : pad;
  int64_t span = in + *lo + *hi - k;
  if (span < 0) return false;
  *out = span / stride + 1;
  return true;
}

static tfg_status infer_conv2d(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0), *w = input(g, n, 1);
  tfg_status s = need_float(d, n, x);
  if (s != TFG_OK) return s;
  if (x->shape.rank != 4) return fail(d, n, "input must be NCHW [batch, channels, height, width], got %s", ty(x));
  if (w->shape.rank != 4) return fail(d, n, "weights must be [out, in, kh, kw], got %s", ty(w));
  if (x->dtype != w->dtype) return fail(d, n, "%s and %s: dtypes differ", ty(x), ty(w));
  if (w->shape.dim[1] != x->shape.dim[1])
    return fail(d, n, "input %s has %lld channels but weights %s expect %lld", ty(x),
                (long long)x->shape.dim[1], ty(w), (long long)w->shape.dim[1]);
  tfg_attrs *at = &n->attrs;
  if (at->stride[0] < 1 || at->stride[1] < 1) return fail(d, n, "stride must be at least 1");
  if (at->pad_mode == TFG_PAD_EXPLICIT && at->pad[0] < 0) return fail(d, n, "padding must not be negative");
  int64_t oh, ow, pt, pb, pl, pr;
  if (!conv_axis(x->shape.dim[2], w->shape.dim[2], at->stride[0], at->pad_mode, at->pad[0], &oh, &pt, &pb) ||
      !conv_axis(x->shape.dim[3], w->shape.dim[3], at->stride[1], at->pad_mode, at->pad[0], &ow, &pl, &pr))
    return fail(d, n, "kernel %s does not fit in input %s", ty(w), ty(x));
  at->pad[0] = pt;
  at->pad[1] = pb;
  at->pad[2] = pl;
  at->pad[3] = pr;
  at->pad_mode = TFG_PAD_EXPLICIT;
  n->dtype = x->dtype;
  n->shape = (tfg_shape){4, {x->shape.dim[0], w->shape.dim[0], oh, ow}};
  return TFG_OK;
}

static tfg_status infer_pool(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_status s = need_float(d, n, x);
  if (s != TFG_OK) return s;
  if (x->shape.rank != 4) return fail(d, n, "input must be NCHW [batch, channels, height, width], got %s", ty(x));
  tfg_attrs *at = &n->attrs;
  if (at->size[0] < 1 || at->size[1] < 1) return fail(d, n, "size must be at least 1");
  if (at->stride[0] == 0) { at->stride[0] = at->size[0]; at->stride[1] = at->size[1]; }
  if (at->stride[0] < 1 || at->stride[1] < 1) return fail(d, n, "stride must be at least 1");
  int64_t h = x->shape.dim[2], w = x->shape.dim[3];
  if (at->size[0] > h || at->size[1] > w)
    return fail(d, n, "window %lldx%lld does not fit in %s", (long long)at->size[0],
                (long long)at->size[1], ty(x));
  n->dtype = x->dtype;
  n->shape = (tfg_shape){4, {x->shape.dim[0], x->shape.dim[1], (h - at->size[0]) / at->stride[0] + 1,
                             (w - at->size[1]) / at->stride[1] + 1}};
  return TFG_OK;
}

static tfg_status infer_layer_norm(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0), *ga = input(g, n, 1), *be = input(g, n, 2);
  tfg_status s = need_float(d, n, x);
  if (s != TFG_OK) return s;
  if (x->shape.rank < 1) return fail(d, n, "needs at least one dimension, got %s", ty(x));
  int64_t dim = x->shape.dim[x->shape.rank - 1];
  const tfg_node *p[2] = {ga, be};
  for (int i = 0; i < 2; i++)
    if (p[i]->dtype != x->dtype || p[i]->shape.rank != 1 || p[i]->shape.dim[0] != dim)
      return fail(d, n, "%s must be %s[%lld] to match the last axis of %s, got %s",
                  i ? "beta" : "gamma", tfg_dtype_name(x->dtype), (long long)dim, ty(x), ty(p[i]));
  if (!(n->attrs.value > 0)) return fail(d, n, "eps must be positive");
  return like(n, x);
}

/* ATTENTION (q, k, v) and ATTENTION_PROBS (q, k): one float dtype, the
 * same leading dims, q and k of one head size; scale none (NaN) becomes
 * 1 / sqrt(hd) here, so every kernel reads attrs.value. */
static tfg_status infer_attention(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *q = input(g, n, 0), *k = input(g, n, 1), *v = n->ninputs > 2 ? input(g, n, 2) : k;
  const char *nm[3] = {"q", "k", "v"};
  const tfg_node *t[3] = {q, k, v};
  for (int i = 0; i < n->ninputs; i++) {
    tfg_status s = need_float(d, n, t[i]);
    if (s != TFG_OK) return s;
    if (t[i]->shape.rank < 2) return fail(d, n, "%s must be [..., T, head size], got %s", nm[i], ty(t[i]));
    if (t[i]->dtype != q->dtype || t[i]->shape.rank != q->shape.rank)
      return fail(d, n, "q, k and v must have one dtype and rank: %s, %s and %s", ty(q), ty(k), ty(v));
    for (int a = 0; a < q->shape.rank - 2; a++)
      if (t[i]->shape.dim[a] != q->shape.dim[a])
        return fail(d, n, "q, k and v must have the same leading dims: %s, %s and %s", ty(q), ty(k), ty(v));
  }
  int r = q->shape.rank;
  int64_t hd = q->shape.dim[r - 1], tk = k->shape.dim[r - 2];
  if (k->shape.dim[r - 1] != hd) return fail(d, n, "q and k must have one head size: %s and %s", ty(q), ty(k));
  if (v->shape.dim[r - 2] != tk) return fail(d, n, "k and v must have one length: %s and %s", ty(k), ty(v));
  if (isnan(n->attrs.value)) n->attrs.value = hd > 0 ? 1.0 / sqrt((double)hd) : 1.0;
  if (!isfinite(n->attrs.value)) return fail(d, n, "scale must be finite");
  n->dtype = q->dtype;
  n->shape = q->shape;
  n->shape.dim[r - 1] = n->op == TFG_OP_ATTENTION ? v->shape.dim[r - 1] : tk;
  return TFG_OK;
}

/* ATTENTION_GRAD (q, k, v, dy): attention's shape rule on (q, k, v), dy
 * its output's shape, the result input attrs.axis's (0 q, 1 k, 2 v), or
 * for 3 all three side by side, [..., T, hd + hd + hdv] (Tq = Tk). */
static tfg_status infer_attention_grad(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  int which = (int)n->attrs.axis;
  if (which < 0 || which > 3) return fail(d, n, "the input must be 0 (q), 1 (k), 2 (v) or 3 (all), got %d", which);
  tfg_node fwd = *n;
  fwd.op = TFG_OP_ATTENTION;
  fwd.ninputs = 3;
  tfg_status s = infer_attention(g, &fwd, d);
  if (s != TFG_OK) return s;
  const tfg_node *dy = input(g, n, 3);
  if (dy->dtype != fwd.dtype || !tfg_shape_eq(&dy->shape, &fwd.shape))
    return fail(d, n, "dy must be %s, the attention's output, got %s", ty(&fwd), ty(dy));
  n->attrs.value = fwd.attrs.value;
  n->dtype = fwd.dtype;
  if (which != TFG_ATTENTION_GRAD_PACKED) {
    n->shape = input(g, n, which)->shape;
    return TFG_OK;
  }
  const tfg_shape *q = &input(g, n, 0)->shape, *k = &input(g, n, 1)->shape, *v = &input(g, n, 2)->shape;
  int r = q->rank;
  if (q->dim[r - 2] != k->dim[r - 2])
    return fail(d, n, "the packed gradients need one length for q and k, got %s and %s", ty(input(g, n, 0)),
                ty(input(g, n, 1)));
  n->shape = *q;
  n->shape.dim[r - 1] = 2 * q->dim[r - 1] + v->dim[r - 1];
  return TFG_OK;
}

static tfg_status infer_dropout(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  tfg_status s = need_float(d, n, x);
  if (s != TFG_OK) return s;
  if (!(n->attrs.value >= 0 && n->attrs.value <= 1))
    return fail(d, n, "rate must be in [0, 1], got %g", n->attrs.value);
  return like(n, x);
}

static tfg_status infer_embedding(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *t = input(g, n, 0), *ids = input(g, n, 1);
  tfg_status s = need_matrix_ids(d, n, t, "the table must be [vocabulary, dim]", ids, "ids");
  if (s != TFG_OK) return s;
  if (ids->shape.rank >= TFG_MAX_RANK) return fail(d, n, "ids %s have too many dimensions", ty(ids));
  n->dtype = t->dtype;
  n->shape = ids->shape;
  n->shape.dim[n->shape.rank++] = t->shape.dim[1];
  return TFG_OK;
}

static tfg_status infer_one_hot(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *ids = input(g, n, 0);
  tfg_status s = need_int(d, n, ids, "ids");
  if (s != TFG_OK) return s;
  if (n->attrs.n < 1) return fail(d, n, "n must be at least 1, got %lld", (long long)n->attrs.n);
  if (ids->shape.rank >= TFG_MAX_RANK) return fail(d, n, "ids %s have too many dimensions", ty(ids));
  n->dtype = TFG_DTYPE_F32;
  n->shape = ids->shape;
  n->shape.dim[n->shape.rank++] = n->attrs.n;
  return TFG_OK;
}

/* ---- gradients and updates -------------------------------------------------------- */

/* Shaped like input 0 (relu_grad, gelu_grad, cross_entropy_grad,
 * layer_norm_grad, max_pool_grad: the gradient of that input). */
static tfg_status infer_like_input(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)d;
  return like(n, input(g, n, 0));
}

/* The shape autodiff asks for in attrs.iv (the forward input's shape),
 * the dtype of input 0. */
static tfg_status infer_target(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)d;
  n->dtype = input(g, n, 0)->dtype;
  n->shape.rank = n->attrs.niv;
  for (int i = 0; i < n->attrs.niv; i++) n->shape.dim[i] = n->attrs.iv[i];
  return TFG_OK;
}

static tfg_status infer_embedding_grad(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)d;
  const tfg_node *dy = input(g, n, 1);
  n->dtype = dy->dtype;
  n->shape = (tfg_shape){2, {n->attrs.n, dy->shape.dim[dy->shape.rank - 1]}};
  return TFG_OK;
}

/* ALL_GATHER: attrs.end elements, a whole number of pieces, flat. */
static tfg_status infer_all_gather(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  const tfg_node *x = input(g, n, 0);
  int64_t piece = tfg_shape_numel(&x->shape);
  if (n->attrs.end < piece || (piece > 0 && n->attrs.end % piece != 0))
    return fail(d, n, "%lld elements are not a whole number of %s pieces", (long long)n->attrs.end, ty(x));
  n->dtype = x->dtype;
  n->shape = (tfg_shape){1, {n->attrs.end}};
  return TFG_OK;
}

/* An update has no value of its own: an empty marker others can depend on. */
static tfg_status infer_update(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)g;
  (void)d;
  n->dtype = TFG_DTYPE_BOOL;
  n->shape = (tfg_shape){1, {0}};
  return TFG_OK;
}

/* AMP_UPDATE: scalars, f32 but for the bool finite (input 1). */
static tfg_status infer_amp_update(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)d;
  for (int k = 0; k < n->ninputs; k++) {
    const tfg_node *x = &g->nodes[n->inputs[k]];
    if (n->ninputs != 4 || x->shape.rank != 0 || x->dtype != (k == 1 ? TFG_DTYPE_BOOL : TFG_DTYPE_F32))
      return TFG_ERR_SHAPE;
  }
  n->dtype = TFG_DTYPE_BOOL;
  n->shape = (tfg_shape){1, {0}};
  return TFG_OK;
}

/* A FUSED node is built by the executor from a chain of the plan, with
 * the dtype and shape of the chain's last op: never by a program, so
 * there is nothing to infer. */
static tfg_status infer_fused(const tfg_graph *g, tfg_node *n, tfg_diag *d) {
  (void)g;
  (void)n;
  (void)d;
  return TFG_OK;
}

/* ---- costs ------------------------------------------------------------------ */

static double numel(const tfg_node *n) { return (double)tfg_shape_numel(&n->shape); }

static double flops_none(const tfg_graph *g, const tfg_node *n) {
  (void)g;
  (void)n;
  return 0;
}

/* One per output element (flops_out1) or four (flops_out4: transcendentals
 * cost several flops each: exp, log, erf, tanh); the elementwise rows
 * pick one by their flops column (ir/op_list.h). */
static double flops_out1(const tfg_graph *g, const tfg_node *n) {
  (void)g;
  return numel(n);
}

static double flops_out4(const tfg_graph *g, const tfg_node *n) {
  (void)g;
  return 4 * numel(n);
}

static double flops_in(const tfg_graph *g, const tfg_node *n) {
  return numel(input(g, n, 0));
}

static double flops_in5(const tfg_graph *g, const tfg_node *n) {
  return 5 * numel(input(g, n, 0));
}

static double flops_matmul(const tfg_graph *g, const tfg_node *n) {
  tfg_shape la; /* a as the product reads it (a folded transpose permutes its axes) */
  int64_t st[TFG_MAX_RANK];
  tfg_matmul_view(n, 0, &input(g, n, 0)->shape, &la, st);
  int64_t k = la.dim[la.rank - (n->attrs.transpose_a ? 2 : 1)];
  return 2.0 * numel(n) * (double)k;
}

/* The sizes an attention (or its probabilities, or its gradient) works
 * on, from its operands as it reads them (a folded transpose permutes a
 * stored operand's axes: the heads' [B, T, H, hd] is read as [B, H, T,
 * hd]): rows = batch x Tq, Tk, hd and hdv (0 for the probabilities). */
static void attention_sizes(const tfg_graph *g, const tfg_node *n, double *rows, double *tk, double *hd,
                            double *hdv) {
  tfg_shape lq, lk, lv;
  int64_t st[TFG_MAX_RANK];
  tfg_matmul_view(n, 0, &input(g, n, 0)->shape, &lq, st);
  tfg_matmul_view(n, 1, &input(g, n, 1)->shape, &lk, st);
  int r = lq.rank;
  *rows = (double)tfg_shape_numel(&lq) / (double)lq.dim[r - 1];
  *tk = (double)lk.dim[r - 2];
  *hd = (double)lq.dim[r - 1];
  *hdv = 0;
  if (n->op == TFG_OP_ATTENTION_PROBS) return;
  tfg_matmul_view(n, 2, &input(g, n, 2)->shape, &lv, st);
  *hdv = (double)lv.dim[r - 1];
}

/* attention: the two products, 2 Tq Tk (hd + hdv) per batch matrix (a
 * causal mask skips about half: counted whole, as the unfused ops are);
 * its probabilities: the first product and the softmax. */
static double flops_attention(const tfg_graph *g, const tfg_node *n) {
  double rows, tk, hd, hdv;
  attention_sizes(g, n, &rows, &tk, &hd, &hdv);
  return rows * tk * (2 * hd + 2 * hdv + 5);
}

/* attention's gradient for one input: the scores and probabilities
 * again (2 Tq Tk hd + 5 Tq Tk), then for q and k dP = dy v^T, dS and the
 * product (2 Tq Tk (hdv + hd) + 3 Tq Tk), for v the product P^T dy
 * (2 Tq Tk hdv); all three packed: the probabilities and dS once, the
 * three products. */
static double flops_attention_grad(const tfg_graph *g, const tfg_node *n) {
  double rows, tk, hd, hdv;
  attention_sizes(g, n, &rows, &tk, &hd, &hdv);
  double probs = rows * tk * (2 * hd + 5), ds = rows * tk * (2 * hdv + 3);
  switch (n->attrs.axis) {
  case 2: return probs + rows * tk * 2 * hdv;
  case 3: return probs + ds + rows * tk * (4 * hd + 2 * hdv);
  default: return probs + ds + rows * tk * 2 * hd;
  }
}

static double flops_conv2d(const tfg_graph *g, const tfg_node *n) {
  const tfg_node *w = input(g, n, 1);
  return 2.0 * numel(n) * (double)(w->shape.dim[1] * w->shape.dim[2] * w->shape.dim[3]);
}

/* A conv gradient costs what the forward conv did: 2 * out * C * KH * KW
 * with out the forward output (dy, input 0 or 1). */
static double flops_conv2d_grad(const tfg_graph *g, const tfg_node *n) {
  const tfg_node *dy = input(g, n, n->op == TFG_OP_CONV2D_GRAD_INPUT ? 0 : 1);
  const tfg_shape *w = n->op == TFG_OP_CONV2D_GRAD_INPUT ? &input(g, n, 1)->shape : &n->shape;
  return 2.0 * numel(dy) * (double)(w->dim[1] * w->dim[2] * w->dim[3]);
}

/* Per element: Adam is about a dozen flops, SGD (and an accumulation) a few. */
static double flops_update(const tfg_graph *g, const tfg_node *n) {
  return (n->op == TFG_OP_ADAM_UPDATE ? 12.0 : 4.0) * numel(input(g, n, 0));
}

/* A chain costs what its ops cost: about one flop each per element (the
 * transcendental ones more, not counted: the cost model only compares). */
static double flops_fused(const tfg_graph *g, const tfg_node *n) {
  (void)g;
  const tfg_fused_prog *p = n->attrs.data;
  return (p ? p->nops : 1) * numel(n);
}

static double flops_pool(const tfg_graph *g, const tfg_node *n) {
  (void)g;
  return numel(n) * (double)(n->attrs.size[0] * n->attrs.size[1]);
}

/* ---- the table ----------------------------------------------------------------- */

/* The columns: kind (tfg_op_kind), pure, inplace (IN(k): input k is
 * updated in place), the shape rule and the cost; an elementwise op's
 * row (EW) has pure set, and its formula and whether it takes ints in
 * their place (ir/ops.h says what each column means). The rows of the
 * elementwise ops with a formula come from their lines in ir/op_list.h. */
#define IN(k) (1u << (k))
#define ROW(id, kind_, pure_, inplace_, inf, fl) \
  [TFG_OP_##id] = {.kind = TFG_OP_KIND_##kind_, .pure = pure_, .inplace = inplace_, .infer = inf, .flops = fl}
#define EW(id, kind_, formula_, ints_, inf, fl) \
  [TFG_OP_##id] = {.kind = TFG_OP_KIND_##kind_, .pure = true, .formula = formula_, .ints = ints_, .infer = inf, .flops = fl}
static const tfg_op_def ops[] = {
    ROW(CONST, SOURCE, true, 0, infer_source, flops_none),
    ROW(PARAM, SOURCE, false, 0, infer_source, flops_none), /* the training updates it */
    ROW(INPUT, SOURCE, false, 0, infer_source, flops_none), /* fed per step */
    ROW(INIT, SOURCE, false, 0, infer_source, flops_out1),  /* random draws; tfg_op_pure: the constant ones are */
    ROW(STATE, SOURCE, false, 0, infer_source, flops_none), /* optimizer state, updated in place */
#define UNARY_ROW(A, ID, formula, ints, flops, cheap) EW(ID, UNARY, #formula, ints, infer_unary, flops_out##flops),
    TFG_OPS_UNARY(UNARY_ROW, )
#undef UNARY_ROW
    ROW(CAST, ELEMENTWISE, true, 0, infer_cast, flops_out1),
#define BINARY_ROW(A, ID, formula, sig, ints, flops, cheap) EW(ID, BINARY, #formula, ints, infer_binary, flops_out##flops),
    TFG_OPS_BINARY(BINARY_ROW, )
#undef BINARY_ROW
#define COMPARE_ROW(A, ID, formula, oper) EW(ID, COMPARE, NULL, true, infer_binary, flops_out1),
    TFG_OPS_COMPARE(COMPARE_ROW, )
#undef COMPARE_ROW
    ROW(WHERE, ELEMENTWISE, true, 0, infer_where, flops_out1),
    ROW(MATMUL, LINALG, true, 0, infer_matmul, flops_matmul),
    ROW(SUM, REDUCE, true, 0, infer_reduce, flops_in),
    ROW(MEAN, REDUCE, true, 0, infer_reduce, flops_in),
    ROW(MAX, REDUCE, true, 0, infer_reduce, flops_in),
    ROW(ARGMAX, REDUCE, true, 0, infer_argmax, flops_in),
    ROW(RESHAPE, SHAPE, true, 0, infer_reshape, flops_none),
    ROW(FLATTEN, SHAPE, true, 0, infer_flatten, flops_none),
    ROW(TRANSPOSE, SHAPE, true, 0, infer_transpose, flops_none),
    ROW(CONCAT, SHAPE, true, 0, infer_concat, flops_none),
    ROW(SLICE, SHAPE, true, 0, infer_slice, flops_none),
    ROW(BROADCAST, SHAPE, true, 0, infer_broadcast, flops_none),
    ROW(SOFTMAX, NN, true, 0, infer_softmax, flops_in5),
    ROW(LOG_SOFTMAX, NN, true, 0, infer_softmax, flops_in5),
    ROW(CROSS_ENTROPY, NN, true, 0, infer_cross_entropy, flops_in5),
    ROW(MSE, NN, true, 0, infer_mse, flops_in),
    ROW(CONV2D, NN, true, 0, infer_conv2d, flops_conv2d),
    ROW(MAX_POOL, NN, true, 0, infer_pool, flops_pool),
    ROW(AVG_POOL, NN, true, 0, infer_pool, flops_pool),
    ROW(LAYER_NORM, NN, true, 0, infer_layer_norm, flops_in5),
    ROW(ATTENTION, NN, true, 0, infer_attention, flops_attention),
    ROW(DROPOUT, NN, false, 0, infer_dropout, flops_out1), /* a mask per node and step */
    ROW(EMBEDDING, NN, true, 0, infer_embedding, flops_none),
    ROW(ONE_HOT, NN, true, 0, infer_one_hot, flops_none),
    ROW(ACCURACY, NN, true, 0, infer_accuracy, flops_in),
    ROW(RELU_GRAD, GRAD, true, 0, infer_like_input, flops_out1),
    ROW(GELU_GRAD, GRAD, true, 0, infer_like_input, flops_out4),
    ROW(CROSS_ENTROPY_GRAD, GRAD, true, 0, infer_like_input, flops_in5),
    ROW(LAYER_NORM_GRAD, GRAD, true, 0, infer_like_input, flops_in5),
    ROW(CONV2D_GRAD_INPUT, GRAD, true, 0, infer_target, flops_conv2d_grad),
    ROW(CONV2D_GRAD_WEIGHT, GRAD, true, 0, infer_target, flops_conv2d_grad),
    ROW(MAX_POOL_GRAD, GRAD, true, 0, infer_like_input, flops_in),
    ROW(AVG_POOL_GRAD, GRAD, true, 0, infer_target, flops_out1),
    ROW(ATTENTION_PROBS, GRAD, true, 0, infer_attention, flops_attention),
    ROW(ATTENTION_GRAD, GRAD, true, 0, infer_attention_grad, flops_attention_grad),
    ROW(EMBEDDING_GRAD, GRAD, true, 0, infer_embedding_grad, flops_in),
    ROW(SGD_UPDATE, UPDATE, false, IN(0) | IN(2), infer_update, flops_update),         /* the param, its momentum */
    ROW(ADAM_UPDATE, UPDATE, false, IN(0) | IN(2) | IN(3), infer_update, flops_update), /* the param, m and v */
    ROW(GRAD_ACCUMULATE, UPDATE, false, IN(0), infer_update, flops_update),             /* the accumulator */
    ROW(AMP_UPDATE, UPDATE, false, IN(0) | IN(2) | IN(3), infer_amp_update, flops_none),
    /* the grad scaler's scale and its two counts */
    ROW(ALLREDUCE, COLLECTIVE, false, 0, infer_like_input, flops_out1), /* a rendezvous keyed per node */
    ROW(REDUCE_SCATTER, COLLECTIVE, false, 0, infer_like_input, flops_out1), /* bucketed as ALLREDUCE */
    ROW(ALL_GATHER, COLLECTIVE, false, 0, infer_all_gather, flops_none),      /* likewise */
    ROW(SEND, COLLECTIVE, false, 0, infer_update, flops_none), /* nothing out: bool[0], as an update */
    ROW(RECV, COLLECTIVE, false, 0, infer_source, flops_none), /* dtype and shape the sender's, set where made */
    ROW(FUSED, FUSED, false, 0, infer_fused, flops_fused), /* made by the executor; attrs.data its program */
#undef ROW
#undef EW
#undef IN
};
_Static_assert(sizeof ops / sizeof ops[0] == TFG_OP_COUNT, "a row per op of TFG_OPS (fill_table finds a hole)");

static const char *const names[] = {
#define NAME(id, name, sig) [TFG_OP_##id] = name,
    TFG_OPS(NAME)
#undef NAME
};
_Static_assert(sizeof names / sizeof names[0] == TFG_OP_COUNT, "a name per op");

static const char *const sigs[] = {
#define SIG(id, name, sig) [TFG_OP_##id] = sig,
    TFG_OPS(SIG)
#undef SIG
};
_Static_assert(sizeof sigs / sizeof sigs[0] == TFG_OP_COUNT, "a signature per op");

/* The name and signature come from TFG_OPS so the list in ops.h stays the
 * single source; they are merged into the rows once (pthread_once: the
 * devices' threads may be the first to ask). */
static tfg_op_def full[TFG_OP_COUNT];
static pthread_once_t full_once = PTHREAD_ONCE_INIT;

static void fill_table(void) {
  for (int i = 0; i < TFG_OP_COUNT; i++) {
    TFG_ASSERT(ops[i].infer != NULL); /* every op has a row */
    full[i] = ops[i];
    full[i].name = names[i];
    full[i].sig = sigs[i];
  }
}

const tfg_op_def *tfg_op_get(tfg_op_id op) {
  pthread_once(&full_once, fill_table);
  TFG_ASSERT((unsigned)op < TFG_OP_COUNT);
  return &full[op];
}

bool tfg_op_pure(const tfg_node *n) {
  if (n->op == TFG_OP_INIT)
    return n->attrs.init == TFG_INIT_ZEROS || n->attrs.init == TFG_INIT_ONES || n->attrs.init == TFG_INIT_FULL;
  return tfg_op_get(n->op)->pure;
}

int tfg_op_lookup(const char *name) {
  for (int i = 0; i < TFG_OP_COUNT; i++)
    if (sigs[i][0] && strcmp(names[i], name) == 0) return i;
  return -1;
}
