/* lang/builtins.c: the functions a program calls without defining them.
 *
 * Every op of the registry with a signature is a builtin: its call binds
 * the arguments against the signature (a tfg parameter list, parsed by
 * the tfg parser itself), turns tensor arguments into graph inputs and
 * the rest into raw attrs by parameter name, then adds the node, whose
 * shape rule checks everything else. Besides the ops: initializers,
 * constants, the build-time queries dim/shape/dtype, the data loaders,
 * and the configuration calls of a train block (optimizers, strategies). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/rng.h"
#include "ir/ops.h"
#include "lang/interp_impl.h"
#include "lang/parse.h"

enum { K_NONE, K_ZEROS, K_ONES, K_FULL, K_NORMAL, K_UNIFORM, K_GLOROT, K_HE };

static tfg_value bi_op(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_init(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_tensor(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_arange(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_query(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_len(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_csv(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_idx(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);
static tfg_value bi_record(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call);

/* Builtins that are not ops. `shape` may lead an initializer's
 * positional arguments (zeros([2, 3])); see bi_init. */
static const struct {
  const char *name, *sig;
  tfg_builtin_fn fn;
  int kind;
} extra[] = {
    {"zeros", "dtype = f32, shape = none", bi_init, K_ZEROS},
    {"ones", "dtype = f32, shape = none", bi_init, K_ONES},
    {"full", "v, dtype = f32, shape = none", bi_init, K_FULL},
    {"normal", "mean = 0, std = 1, seed = none, dtype = f32, shape = none", bi_init, K_NORMAL},
    {"uniform", "lo, hi, seed = none, dtype = f32, shape = none", bi_init, K_UNIFORM},
    {"glorot", "seed = none, dtype = f32, shape = none", bi_init, K_GLOROT},
    {"he", "seed = none, dtype = f32, shape = none", bi_init, K_HE},
    {"tensor", "values, dtype = f32", bi_tensor, 0},
    {"arange", "start, end, dtype = i32", bi_arange, 0},
    {"dim", "x, axis", bi_query, 0},
    {"shape", "x", bi_query, 1},
    {"dtype", "x", bi_query, 2},
    {"len", "xs", bi_len, 0},
    {"csv", "path, label = none, test = 0, shuffle = false, seed = 0, header = false", bi_csv, 0},
    /* npy takes its columns as keyword arguments: see tfg_builtin_call. */
    {"npy", "test = 0, shuffle = false, seed = 0", NULL, 0},
    {"idx", "images = none, labels = none, test = 0, shuffle = false, seed = 0", bi_idx, 0},
    {"sgd", "lr, momentum = 0, nesterov = false, weight_decay = 0", bi_record, 1},
    {"adam", "lr = 0.001, b1 = 0.9, b2 = 0.999, eps = 1e-8, weight_decay = 0", bi_record, 1},
    {"adamw", "lr = 0.001, b1 = 0.9, b2 = 0.999, eps = 1e-8, weight_decay = 0.01", bi_record, 1},
    {"single", "", bi_record, 0},
    {"mirrored", "devices = none", bi_record, 0},
    {"parameter_server", "workers, ps = cpu", bi_record, 0},
    {"parallel", "data = 1, tensor = 1, pipeline = 1", bi_record, 0},
    /* schedule = ...: a pipeline's order (LANGUAGE.md 6.1) */
    {"gpipe", "", bi_record, 3},
    {"1f1b", "", bi_record, 3},
    {"interleaved", "chunks = 2", bi_record, 3},
    /* lr_schedule = ...: LANGUAGE.md section 6's factors of the lr */
    {"constant", "", bi_record, 2},
    {"linear", "warmup = 0, total = none, min = 0", bi_record, 2},
    {"cosine", "warmup = 0, total = none, min = 0", bi_record, 2},
    {"step", "every, gamma = 0.1", bi_record, 2},
};

/* Parses "fn NAME(SIG) {}" with the tfg parser: the FN node's parameter
 * list is the signature, defaults included. */
static const tfg_ast *parse_sig(tfg_interp *I, const char *name, const char *sig) {
  char text[512];
  snprintf(text, sizeof text, "fn %s(%s) {}", name, sig);
  const tfg_source *src = tfg_diag_add_source(I->sig_diag, name, text, strlen(text));
  tfg_ast *prog = NULL;
  TFG_ASSERT(src && tfg_parse(src, I->sig_diag, &I->sig_arena, &prog, NULL) == TFG_OK);
  return prog->list.head;
}

void tfg_builtins_init(tfg_interp *I) {
  tfg_arena_init(&I->sig_arena);
  I->sig_diag = tfg_diag_new();
  int n = 0;
  for (int op = 0; op < TFG_OP_COUNT; op++) n += tfg_op_get((tfg_op_id)op)->sig[0] != 0;
  n += (int)(sizeof extra / sizeof extra[0]);
  I->builtins = calloc((size_t)n, sizeof *I->builtins);
  TFG_ASSERT(I->builtins != NULL);
  for (int op = 0; op < TFG_OP_COUNT; op++) {
    const tfg_op_def *d = tfg_op_get((tfg_op_id)op);
    if (!d->sig[0]) continue;
    tfg_builtin *b = &I->builtins[I->nbuiltins++];
    *b = (tfg_builtin){d->name, d->sig, bi_op, op, 0, parse_sig(I, d->name, d->sig)};
  }
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
    tfg_builtin *b = &I->builtins[I->nbuiltins++];
    *b = (tfg_builtin){extra[i].name, extra[i].sig, extra[i].fn, -1, extra[i].kind,
                       parse_sig(I, extra[i].name, extra[i].sig)};
  }
  /* Bound in the root scope, below every module's globals. */
  for (int i = 0; i < I->nbuiltins; i++)
    tfg_interp_bind_root(I, I->builtins[i].name, (tfg_value){.kind = TFG_V_BUILTIN, .u.builtin = &I->builtins[i]});
}

const tfg_builtin *tfg_builtin_find(const tfg_interp *I, const char *name) {
  for (int i = 0; i < I->nbuiltins; i++)
    if (strcmp(I->builtins[i].name, name) == 0) return &I->builtins[i];
  return NULL;
}

bool tfg_builtin_is_config(const tfg_builtin *b, int family) { return b->fn == bi_record && b->kind == family; }

void tfg_builtin_config_names(const tfg_interp *I, int family, tfg_strbuf *out) {
  int n = 0, k = 0;
  for (int i = 0; i < I->nbuiltins; i++) n += tfg_builtin_is_config(&I->builtins[i], family);
  for (int i = 0; i < I->nbuiltins; i++) {
    const tfg_builtin *b = &I->builtins[i];
    if (!tfg_builtin_is_config(b, family)) continue;
    if (k > 0) tfg_strbuf_puts(out, k == n - 1 ? " or " : ", ");
    tfg_strbuf_printf(out, "%s(%s)", b->name, b->sig[0] ? "..." : "");
    k++;
  }
}

/* ---- argument conversion ------------------------------------------------------ */

static int64_t arg_int(tfg_interp *I, tfg_args *a, int i) {
  tfg_value *v = &a->v[i];
  if (v->kind == TFG_V_INT) return v->u.i;
  if (v->kind == TFG_V_FLOAT && v->u.f == floor(v->u.f) && fabs(v->u.f) < 9e15) return (int64_t)v->u.f;
  tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be an integer, got %s", a->names[i], tfg_vkind_name(v->kind));
}

static double arg_num(tfg_interp *I, tfg_args *a, int i) {
  tfg_value *v = &a->v[i];
  if (v->kind == TFG_V_INT) return (double)v->u.i;
  if (v->kind == TFG_V_FLOAT) return v->u.f;
  tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be a number, got %s", a->names[i], tfg_vkind_name(v->kind));
}

static bool arg_bool(tfg_interp *I, tfg_args *a, int i) {
  tfg_value *v = &a->v[i];
  if (v->kind == TFG_V_BOOL) return v->u.b;
  tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be true or false, got %s", a->names[i], tfg_vkind_name(v->kind));
}

static const char *arg_string(tfg_interp *I, tfg_args *a, int i) {
  tfg_value *v = &a->v[i];
  if (v->kind == TFG_V_STRING) return tfg_interp_strdup(I, v->u.str.s, v->u.str.len);
  tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be a string, got %s", a->names[i], tfg_vkind_name(v->kind));
}

/* An int, or a list (or range) of at most TFG_MAX_RANK ints, into iv. */
static void arg_ints(tfg_interp *I, tfg_args *a, int i, int64_t *iv, int *n) {
  tfg_value *v = &a->v[i];
  if (v->kind == TFG_V_INT || v->kind == TFG_V_FLOAT) {
    iv[0] = arg_int(I, a, i);
    *n = 1;
    return;
  }
  if (v->kind == TFG_V_RANGE) {
    int64_t len = v->u.range.hi - v->u.range.lo;
    if (len < 0) len = 0;
    if (len > TFG_MAX_RANK) tfg_interp_fail(I, TFG_ERR_SHAPE, &a->loc[i], "'%s' has more than %d entries", a->names[i], TFG_MAX_RANK);
    for (int64_t k = 0; k < len; k++) iv[k] = v->u.range.lo + k;
    *n = (int)len;
    return;
  }
  if (v->kind != TFG_V_LIST)
    tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be an integer or a list of integers, got %s", a->names[i],
                    tfg_vkind_name(v->kind));
  if (v->u.list.n > TFG_MAX_RANK)
    tfg_interp_fail(I, TFG_ERR_SHAPE, &a->loc[i], "'%s' has %d entries; a tensor has at most %d dimensions", a->names[i],
                    v->u.list.n, TFG_MAX_RANK);
  for (int32_t k = 0; k < v->u.list.n; k++) {
    tfg_value *x = &v->u.list.items[k];
    if (x->kind == TFG_V_INT) iv[k] = x->u.i;
    else if (x->kind == TFG_V_FLOAT && x->u.f == floor(x->u.f)) iv[k] = (int64_t)x->u.f;
    else if (x->kind == TFG_V_FLOAT)
      tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must hold integers, got %g at position %d", a->names[i],
                      tfg_interp_shown(x->u.f), k);
    else tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must hold integers, got %s", a->names[i], tfg_vkind_name(x->kind));
  }
  *n = v->u.list.n;
}

/* One or two ints ([rows, cols]) for a stride or a window size, each at
 * least 1: refused where written (a stride of 0 would never move on, and
 * to a pool's shape rule it means "the default, the window size"). */
static void arg_pair(tfg_interp *I, tfg_args *a, int i, int64_t out[2]) {
  int64_t iv[TFG_MAX_RANK];
  int n;
  arg_ints(I, a, i, iv, &n);
  if (n == 1) out[0] = out[1] = iv[0];
  else if (n == 2) { out[0] = iv[0]; out[1] = iv[1]; }
  else tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be an integer or [rows, cols]", a->names[i]);
  for (int k = 0; k < 2; k++)
    if (out[k] < 1)
      tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be at least 1, got %" PRId64, a->names[i], out[k]);
}

static tfg_dtype arg_dtype(tfg_interp *I, tfg_args *a, int i) {
  if (a->v[i].kind == TFG_V_DTYPE) return a->v[i].u.dtype;
  tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be a dtype (f32, f64, f16, bf16, i32, i64, bool), got %s",
                  a->names[i], tfg_vkind_name(a->v[i].kind));
}

static bool is_tensor_param(const char *n) {
  static const char *const names[] = {"x",     "a",    "b",     "c",   "p", "w", "logits", "labels",
                                      "gamma", "beta", "table", "ids", "q", "k", "v"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(n, names[i]) == 0) return true;
  return false;
}

/* ---- ops ------------------------------------------------------------------------ */

static tfg_value bi_op(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  tfg_attrs at = {0};
  tfg_node_id in[64];
  int nin = 0;
  /* Numbers among tensor arguments take the dtype of the first value
   * tensor (not a condition, labels or ids: where(c, x, 0.0) is x's dtype). */
  int like = -1;
  for (int i = 0; i < a->n && like < 0; i++)
    if (is_tensor_param(a->names[i]) && a->v[i].kind == TFG_V_TENSOR && strcmp(a->names[i], "c") != 0 &&
        strcmp(a->names[i], "labels") != 0 && strcmp(a->names[i], "ids") != 0)
      like = (int)I->prog.graph->nodes[a->v[i].u.tensor].dtype;
  for (int i = 0; i < a->n; i++) {
    const char *n = a->names[i];
    tfg_value *v = &a->v[i];
    if (is_tensor_param(n)) {
      in[nin++] = tfg_interp_as_tensor(I, v, &a->loc[i], like);
    } else if (strcmp(n, "xs") == 0) {
      if (v->kind != TFG_V_LIST) tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'xs' must be a list of tensors, got %s", tfg_vkind_name(v->kind));
      if (v->u.list.n > 64) tfg_interp_fail(I, TFG_ERR_LIMIT, &a->loc[i], "at most 64 tensors can be concatenated at once");
      for (int32_t k = 0; k < v->u.list.n; k++) in[nin++] = tfg_interp_as_tensor(I, &v->u.list.items[k], &a->loc[i], like);
    } else if (strcmp(n, "axis") == 0 || strcmp(n, "perm") == 0 || strcmp(n, "shape") == 0) {
      if (v->kind == TFG_V_NONE) at.iv_none = true;
      else arg_ints(I, a, i, at.iv, &at.niv);
      if (strcmp(n, "axis") == 0 && at.niv == 1) at.axis = at.iv[0];
      if (strcmp(n, "axis") == 0 && at.niv > 1 && b->op != TFG_OP_SUM && b->op != TFG_OP_MEAN && b->op != TFG_OP_MAX)
        tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "%s takes one axis", b->name);
    } else if (strcmp(n, "keepdims") == 0) at.keepdims = arg_bool(I, a, i);
    else if (strcmp(n, "transpose_a") == 0) at.transpose_a = arg_bool(I, a, i);
    else if (strcmp(n, "transpose_b") == 0) at.transpose_b = arg_bool(I, a, i);
    else if (strcmp(n, "causal") == 0) at.causal = arg_bool(I, a, i);
    else if (strcmp(n, "scale") == 0) {
      /* NaN is attention's "not given" (ir/ops.c fills in 1 / sqrt(hd)),
       * so only none may ask for it: a NaN computed by the program is
       * refused here, not silently replaced by the default. */
      if (v->kind == TFG_V_NONE) at.value = NAN;
      else {
        at.value = arg_num(I, a, i);
        tfg_interp_check_finite(I, at.value, "'scale'", &a->loc[i]);
      }
    }
    else if (strcmp(n, "stride") == 0) {
      if (v->kind != TFG_V_NONE) arg_pair(I, a, i, at.stride);
    } else if (strcmp(n, "size") == 0) arg_pair(I, a, i, at.size);
    else if (strcmp(n, "padding") == 0) {
      if (v->kind == TFG_V_STRING) {
        const char *s = arg_string(I, a, i);
        if (strcmp(s, "same") == 0) at.pad_mode = TFG_PAD_SAME;
        else if (strcmp(s, "valid") == 0) at.pad_mode = TFG_PAD_VALID;
        else tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "padding is \"same\", \"valid\" or a number, not \"%s\"", s);
      } else {
        at.pad_mode = TFG_PAD_EXPLICIT;
        at.pad[0] = arg_int(I, a, i);
        if (at.pad[0] < 0)
          tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'padding' must not be negative, got %" PRId64, at.pad[0]);
      }
    } else if (strcmp(n, "dtype") == 0) at.dtype = arg_dtype(I, a, i);
    else if (strcmp(n, "eps") == 0 || strcmp(n, "rate") == 0) {
      /* Refused at the argument: the shape rules' range checks let NaN
       * through (eps) or word it as "-nan" at the call (rate). */
      at.value = arg_num(I, a, i);
      tfg_interp_check_finite(I, at.value, n[0] == 'e' ? "'eps'" : "'rate'", &a->loc[i]);
    }
    else if (strcmp(n, "seed") == 0) {
      if (v->kind != TFG_V_NONE) {
        at.seed = (uint64_t)arg_int(I, a, i);
        at.seeded = true;
      }
    }
    else if (strcmp(n, "n") == 0) at.n = arg_int(I, a, i);
    else if (strcmp(n, "start") == 0) at.start = arg_int(I, a, i);
    else if (strcmp(n, "end") == 0) at.end = arg_int(I, a, i);
    else TFG_ASSERT(!"an op parameter without a conversion rule");
  }
  /* An unseeded dropout draws its own stream: from the node it becomes (a
   * loop or a fn called twice gives each of its dropouts another). */
  if (b->op == TFG_OP_DROPOUT && !at.seeded)
    at.seed = tfg_rng_mix((uint64_t)I->prog.graph->nnodes * 0x9E3779B97F4A7C15ull + (uint64_t)call->off);
  return tfg_val_tensor(tfg_interp_node(I, (tfg_op_id)b->op, in, nin, &at, call));
}

/* ---- initializers and constants ------------------------------------------------------ */

static const tfg_init_kind init_kinds[] = {
    [K_ZEROS] = TFG_INIT_ZEROS, [K_ONES] = TFG_INIT_ONES, [K_FULL] = TFG_INIT_FULL, [K_NORMAL] = TFG_INIT_NORMAL,
    [K_UNIFORM] = TFG_INIT_UNIFORM, [K_GLOROT] = TFG_INIT_GLOROT, [K_HE] = TFG_INIT_HE,
};

static int arg_index(const tfg_args *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->names[i], name) == 0) return i;
  return -1;
}

static const char *const init_names[] = {
    [TFG_INIT_ZEROS] = "zeros", [TFG_INIT_ONES] = "ones",       [TFG_INIT_FULL] = "full", [TFG_INIT_NORMAL] = "normal",
    [TFG_INIT_UNIFORM] = "uniform", [TFG_INIT_GLOROT] = "glorot", [TFG_INIT_HE] = "he",
};

void tfg_builtin_check_init(struct tfg_interp *I, const tfg_attrs *init, tfg_dtype dt, const tfg_loc *loc) {
  bool random = init->init == TFG_INIT_NORMAL || init->init == TFG_INIT_UNIFORM || init->init == TFG_INIT_GLOROT ||
                init->init == TFG_INIT_HE;
  if (random && !tfg_dtype_is_float(dt))
    tfg_interp_fail(I, TFG_ERR_SHAPE, loc, "%s() draws real numbers and cannot fill %s %s tensor; use a float dtype, "
                                           "or zeros(), ones() or full(v)", init_names[init->init],
                    dt == TFG_DTYPE_BOOL ? "a" : "an", tfg_dtype_name(dt));
}

/* As a param's initializer (no shape) the result is a shapeless
 * initializer value; called with a shape it is a tensor filled on the
 * device (an INIT node). */
static tfg_value bi_init(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  tfg_attrs *at = tfg_arena_alloc(&I->arena, sizeof *at);
  at->init = init_kinds[b->kind];
  int i;
  switch (b->kind) {
  case K_FULL: at->value = arg_num(I, a, arg_index(a, "v")); break;
  case K_NORMAL:
    at->a = arg_num(I, a, arg_index(a, "mean"));
    at->b = arg_num(I, a, arg_index(a, "std"));
    if (at->b < 0) tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[arg_index(a, "std")], "std must not be negative");
    break;
  case K_UNIFORM:
    at->a = arg_num(I, a, arg_index(a, "lo"));
    at->b = arg_num(I, a, arg_index(a, "hi"));
    if (at->b < at->a)
      tfg_interp_fail(I, TFG_ERR_NAME, call, "uniform: lo (%g) is above hi (%g)", tfg_interp_shown(at->a),
                      tfg_interp_shown(at->b));
    break;
  default: break;
  }
  if ((i = arg_index(a, "seed")) >= 0 && a->v[i].kind != TFG_V_NONE) {
    at->seed = (uint64_t)arg_int(I, a, i);
    at->seeded = true;
  }
  i = arg_index(a, "shape");
  if (a->v[i].kind == TFG_V_NONE) {
    if (a->given[arg_index(a, "dtype")])
      tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[arg_index(a, "dtype")], "%s: dtype needs a shape too (or comes from the param's type)", b->name);
    return (tfg_value){.kind = TFG_V_INIT, .u.init = at};
  }
  tfg_shape shape = {0};
  arg_ints(I, a, i, shape.dim, &shape.rank);
  for (int k = 0; k < shape.rank; k++)
    if (shape.dim[k] < 0) tfg_interp_fail(I, TFG_ERR_SHAPE, &a->loc[i], "a dimension must not be negative");
  at->dtype = arg_dtype(I, a, arg_index(a, "dtype"));
  tfg_builtin_check_init(I, at, at->dtype, call);
  if (!tfg_shape_fits(&shape))
    tfg_interp_fail(I, TFG_ERR_SHAPE, &a->loc[i], "%s: the shape has more than 2^48 elements", b->name);
  if (!at->seeded) at->seed = tfg_rng_mix((uint64_t)I->prog.graph->nnodes * 0x9E3779B97F4A7C15ull + (uint64_t)call->off);
  tfg_node_id id = tfg_interp_node(I, TFG_OP_INIT, NULL, 0, at, call);
  tfg_node *n = tfg_graph_node(I->prog.graph, id);
  n->dtype = at->dtype;
  n->shape = shape;
  return tfg_val_tensor(id);
}

/* Shape of nested lists of numbers; false if ragged or not numbers. */
static bool list_shape(const tfg_value *v, int depth, tfg_shape *s, bool *first, int64_t *count) {
  if (v->kind != TFG_V_LIST) {
    if (v->kind != TFG_V_INT && v->kind != TFG_V_FLOAT && v->kind != TFG_V_BOOL) return false;
    if (*first) { s->rank = depth; *first = false; }
    (*count)++;
    return depth == s->rank;
  }
  if (depth >= TFG_MAX_RANK) return false;
  if (*first) s->dim[depth] = v->u.list.n;
  else if (depth >= s->rank || s->dim[depth] != v->u.list.n) return false;
  if (v->u.list.n == 0) {
    if (*first) { s->rank = depth + 1; *first = false; }
    return depth + 1 == s->rank;
  }
  for (int32_t i = 0; i < v->u.list.n; i++)
    if (!list_shape(&v->u.list.items[i], depth + 1, s, first, count)) return false;
  return true;
}

static void store(void *data, tfg_dtype dt, int64_t i, double x) {
  switch (dt) {
  case TFG_DTYPE_F32: ((float *)data)[i] = (float)x; break;
  case TFG_DTYPE_F64: ((double *)data)[i] = x; break;
  case TFG_DTYPE_I32: ((int32_t *)data)[i] = (int32_t)x; break;
  case TFG_DTYPE_I64: ((int64_t *)data)[i] = (int64_t)x; break;
  case TFG_DTYPE_BOOL: ((uint8_t *)data)[i] = x != 0; break;
  default: TFG_ASSERT(!"store: f16/bf16 constants are refused before this");
  }
}

static void flatten_list(tfg_interp *I, const tfg_value *v, void *data, tfg_dtype dt, int64_t *k, const tfg_loc *loc) {
  if (v->kind == TFG_V_LIST) {
    for (int32_t i = 0; i < v->u.list.n; i++) flatten_list(I, &v->u.list.items[i], data, dt, k, loc);
    return;
  }
  double x = v->kind == TFG_V_INT ? (double)v->u.i : v->kind == TFG_V_FLOAT ? v->u.f : (double)v->u.b;
  if (!tfg_dtype_is_float(dt) && x != floor(x))
    tfg_interp_fail(I, TFG_ERR_SHAPE, loc, "tensor: %g is not a whole number but the dtype is %s", tfg_interp_shown(x),
                    tfg_dtype_name(dt));
  if (dt == TFG_DTYPE_I32 && (x > INT32_MAX || x < INT32_MIN))
    tfg_interp_fail(I, TFG_ERR_SHAPE, loc, "tensor: %.17g does not fit in i32", x);
  store(data, dt, (*k)++, x);
}

static tfg_node_id make_const(tfg_interp *I, tfg_dtype dt, const tfg_shape *shape, const void *data, const tfg_loc *loc) {
  tfg_attrs at = {.data = data};
  tfg_node_id id = tfg_interp_node(I, TFG_OP_CONST, NULL, 0, &at, loc);
  tfg_node *n = tfg_graph_node(I->prog.graph, id);
  n->dtype = dt;
  n->shape = *shape;
  return id;
}

static tfg_value bi_tensor(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  (void)b;
  tfg_dtype dt = arg_dtype(I, a, 1);
  if (dt == TFG_DTYPE_F16 || dt == TFG_DTYPE_BF16)
    tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[1], "tensor: write constants as f32 and cast them: cast(tensor(...), %s)",
                    tfg_dtype_name(dt));
  tfg_shape s = {0};
  bool first = true;
  int64_t count = 0;
  if (!list_shape(&a->v[0], 0, &s, &first, &count))
    tfg_interp_fail(I, TFG_ERR_SHAPE, &a->loc[0], "tensor: needs a number or nested lists of numbers, all rows the same length");
  if (count > (1 << 24)) tfg_interp_fail(I, TFG_ERR_LIMIT, &a->loc[0], "tensor: a constant is limited to 16M values");
  void *data = tfg_arena_alloc(&I->prog.graph->arena, (size_t)(count ? count : 1) * tfg_dtype_size(dt));
  int64_t k = 0;
  flatten_list(I, &a->v[0], data, dt, &k, &a->loc[0]);
  return tfg_val_tensor(make_const(I, dt, &s, data, call));
}

static tfg_value bi_arange(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  (void)b;
  int64_t lo = arg_int(I, a, 0), hi = arg_int(I, a, 1);
  tfg_dtype dt = arg_dtype(I, a, 2);
  if (dt == TFG_DTYPE_F16 || dt == TFG_DTYPE_BF16 || dt == TFG_DTYPE_BOOL)
    tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[2], "arange: dtype must be i32, i64, f32 or f64");
  int64_t n = hi > lo ? hi - lo : 0;
  if (n > (1 << 26)) tfg_interp_fail(I, TFG_ERR_LIMIT, call, "arange: %" PRId64 " values is more than the 64M allowed", n);
  void *data = tfg_arena_alloc(&I->prog.graph->arena, (size_t)(n ? n : 1) * tfg_dtype_size(dt));
  for (int64_t i = 0; i < n; i++) store(data, dt, i, (double)(lo + i));
  tfg_shape s = {1, {n}};
  return tfg_val_tensor(make_const(I, dt, &s, data, call));
}

static tfg_value bi_query(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  (void)call;
  if (a->v[0].kind != TFG_V_TENSOR)
    tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[0], "%s needs a tensor, got %s", b->name, tfg_vkind_name(a->v[0].kind));
  const tfg_node *n = &I->prog.graph->nodes[a->v[0].u.tensor];
  if (b->kind == 2) return (tfg_value){.kind = TFG_V_DTYPE, .u.dtype = n->dtype};
  if (b->kind == 1) {
    tfg_value *items = tfg_arena_alloc(&I->arena, sizeof *items * (size_t)(n->shape.rank ? n->shape.rank : 1));
    for (int i = 0; i < n->shape.rank; i++) items[i] = tfg_val_int(n->shape.dim[i]);
    return (tfg_value){.kind = TFG_V_LIST, .u.list = {items, n->shape.rank}};
  }
  int64_t ax = arg_int(I, a, 1), r = n->shape.rank;
  if (ax < -r || ax >= r) {
    tfg_strbuf s = {0};
    tfg_shape_format(&s, n->dtype, &n->shape);
    tfg_diag_error(I->diag, &a->loc[1], "dim: axis %" PRId64 " is out of range for %s", ax, s.data);
    tfg_strbuf_free(&s);
    tfg_interp_unwind(I, TFG_ERR_SHAPE);
  }
  return tfg_val_int(n->shape.dim[ax < 0 ? ax + r : ax]);
}

static tfg_value bi_len(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  (void)b;
  (void)call;
  const tfg_value *v = &a->v[0];
  if (v->kind == TFG_V_LIST) return tfg_val_int(v->u.list.n);
  if (v->kind == TFG_V_STRING) return tfg_val_int(v->u.str.len);
  if (v->kind == TFG_V_RANGE) return tfg_val_int(v->u.range.hi > v->u.range.lo ? v->u.range.hi - v->u.range.lo : 0);
  tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[0], "len needs a list, a string or a range, got %s", tfg_vkind_name(v->kind));
}

/* ---- data ------------------------------------------------------------------------------ */

/* A data file the program names that cannot be loaded is an error in the
 * program (exit 1, like a shape error), not a runtime failure; only host
 * memory running out stays what it is. */
static tfg_status data_status(tfg_status st) { return st == TFG_ERR_NOMEM ? st : TFG_ERR_DATA; }

static tfg_data_opts data_opts(tfg_interp *I, tfg_args *a) {
  tfg_data_opts o = tfg_data_opts_default();
  int i = arg_index(a, "test");
  o.test = arg_num(I, a, i);
  tfg_interp_check_finite(I, o.test, "'test'", &a->loc[i]);
  if (!(o.test >= 0 && o.test < 1))
    tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "test is the fraction of rows held out, in [0, 1); got %g", o.test);
  o.shuffle = arg_bool(I, a, arg_index(a, "shuffle"));
  o.seed = (uint64_t)arg_int(I, a, arg_index(a, "seed"));
  return o;
}

static tfg_value dataset_value(tfg_interp *I, tfg_dataset *ds, const char *path) {
  tfg_dsref *r = tfg_interp_add_dataset(I, ds, path);
  return (tfg_value){.kind = TFG_V_DATASET, .u.dataset = {r, TFG_SPLIT_TRAIN, true}};
}

static tfg_value bi_csv(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  (void)b;
  const char *path = tfg_interp_path(I, arg_string(I, a, 0));
  int label = INT32_MIN;
  if (a->v[1].kind != TFG_V_NONE) {
    int64_t l = arg_int(I, a, 1);
    if (l < INT32_MIN + 1 || l > INT32_MAX) tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[1], "label column %" PRId64 " is out of range", l);
    label = (int)l;
  }
  tfg_data_opts o = data_opts(I, a);
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_csv(I->diag, call, path, label, arg_bool(I, a, arg_index(a, "header")), &o, &ds);
  if (st != TFG_OK) tfg_interp_unwind(I, data_status(st));
  return dataset_value(I, ds, path);
}

static tfg_value bi_idx(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  (void)b;
  const char *img = a->v[0].kind == TFG_V_NONE ? NULL : tfg_interp_path(I, arg_string(I, a, 0));
  const char *lab = a->v[1].kind == TFG_V_NONE ? NULL : tfg_interp_path(I, arg_string(I, a, 1));
  if (!img && !lab) tfg_interp_fail(I, TFG_ERR_NAME, call, "idx: give images = \"...\", labels = \"...\" or both");
  tfg_data_opts o = data_opts(I, a);
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_idx(I->diag, call, img, lab, &o, &ds);
  if (st != TFG_OK) tfg_interp_unwind(I, data_status(st));
  return dataset_value(I, ds, img ? img : lab);
}

/* npy(NAME = "file.npy", ..., test, shuffle, seed): every keyword that is
 * not an option names a column. */
static tfg_value call_npy(tfg_interp *I, const tfg_builtin *b, const tfg_ast *call, tfg_value *pos, tfg_loc *posloc,
                          int npos, const char **kwn, tfg_value *kw, tfg_loc *kwloc, int nkw) {
  const char *names[16], *paths[16];
  int ncols = 0;
  const char *optn[16];
  tfg_value optv[16];
  tfg_loc optl[16];
  int nopt = 0;
  (void)pos;
  if (npos) tfg_interp_fail(I, TFG_ERR_NAME, &posloc[0], "npy takes its columns as keywords: npy(x = \"x.npy\", y = \"y.npy\")");
  for (int k = 0; k < nkw; k++) {
    if (strcmp(kwn[k], "test") == 0 || strcmp(kwn[k], "shuffle") == 0 || strcmp(kwn[k], "seed") == 0) {
      optn[nopt] = kwn[k];
      optv[nopt] = kw[k];
      optl[nopt++] = kwloc[k];
      continue;
    }
    if (kw[k].kind != TFG_V_STRING)
      tfg_interp_fail(I, TFG_ERR_NAME, &kwloc[k], "npy: column %s needs a file name, got %s", kwn[k], tfg_vkind_name(kw[k].kind));
    names[ncols] = kwn[k];
    paths[ncols++] = tfg_interp_path(I, tfg_interp_strdup(I, kw[k].u.str.s, kw[k].u.str.len));
  }
  if (!ncols) tfg_interp_fail(I, TFG_ERR_NAME, &call->loc, "npy needs at least one column: npy(x = \"x.npy\")");
  tfg_args a;
  tfg_interp_bind(I, b->name, b->params, call, NULL, NULL, 0, optn, optv, optl, nopt, &a);
  for (int i = 0; i < a.n; i++)
    if (!a.given[i]) {
      const tfg_ast *p = b->params->list.head;
      for (int k = 0; k < i; k++) p = p->next;
      a.v[i] = tfg_interp_expr(I, &I->root, p->a);
    }
  tfg_data_opts o = data_opts(I, &a);
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_npy(I->diag, &call->loc, ncols, names, paths, &o, &ds);
  if (st != TFG_OK) tfg_interp_unwind(I, data_status(st));
  return dataset_value(I, ds, paths[0]);
}

/* ---- configuration calls -------------------------------------------------------------- */

/* Optimizer argument i: a number of at least 0, and below 1 for a beta
 * (torch.optim's ranges), stored back as a float for compiler/autodiff.c
 * to read. NaN and the infinities are refused too: PyTorch's range checks
 * let NaN through, into every param. */
static double opt_arg(tfg_interp *I, tfg_args *a, int i, bool beta) {
  double x = arg_num(I, a, i);
  const char *n = a->names[i];
  char what[40];
  snprintf(what, sizeof what, "'%s'", n);
  tfg_interp_check_finite(I, x, what, &a->loc[i]);
  if (beta && !(x >= 0 && x < 1)) tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be in [0, 1), got %g", n, x);
  if (x < 0) tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must not be negative, got %g", n, x);
  a->v[i] = tfg_val_float(x);
  return x;
}

/* Checks the arguments of sgd, adam or adamw where they are written:
 * every one is a number in its range (nesterov a bool), so that no typo
 * trains with a default in its place. */
static void check_optimizer(tfg_interp *I, tfg_args *a) {
  double momentum = 0;
  int nesterov = -1;
  for (int i = 0; i < a->n; i++) {
    const char *n = a->names[i];
    if (strcmp(n, "nesterov") == 0) {
      arg_bool(I, a, i);
      nesterov = i;
    } else if (strcmp(n, "b1") == 0 || strcmp(n, "b2") == 0) {
      opt_arg(I, a, i, true);
    } else {
      double x = opt_arg(I, a, i, false); /* lr, momentum, eps, weight_decay */
      if (strcmp(n, "momentum") == 0) momentum = x;
    }
  }
  if (nesterov >= 0 && a->v[nesterov].u.b && momentum <= 0) {
    tfg_diag_error(I->diag, &a->loc[nesterov], "nesterov needs a momentum above 0");
    tfg_diag_help(I->diag, "as torch.optim.SGD: sgd(lr = 0.1, momentum = 0.9, nesterov = true)");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
}

/* A learning-rate schedule's arguments, where they are written: warmup a
 * count from 0, total (required by linear and cosine) a count above
 * warmup, min in [0, 1], every a count from 1, gamma above 0. The counts
 * are stored as floats, like an optimizer's arguments. */
static void check_schedule(tfg_interp *I, tfg_args *a, const tfg_loc *call) {
  int64_t warmup = 0;
  int total = -1;
  for (int i = 0; i < a->n; i++) {
    const char *n = a->names[i];
    if (strcmp(n, "total") == 0 && a->v[i].kind == TFG_V_NONE) continue;
    if (strcmp(n, "warmup") == 0 || strcmp(n, "total") == 0 || strcmp(n, "every") == 0) {
      int64_t v = arg_int(I, a, i);
      if (v < (strcmp(n, "every") == 0 ? 1 : 0))
        tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'%s' must be at least %d, got %" PRId64, n,
                        strcmp(n, "every") == 0 ? 1 : 0, v);
      if (strcmp(n, "warmup") == 0) warmup = v;
      if (strcmp(n, "total") == 0) total = i;
      a->v[i] = (tfg_value){.kind = TFG_V_FLOAT, .u.f = (double)v};
    } else {
      double x = arg_num(I, a, i);
      char what[40];
      snprintf(what, sizeof what, "'%s'", n);
      tfg_interp_check_finite(I, x, what, &a->loc[i]); /* inf is "above 0" too */
      if (strcmp(n, "min") == 0 && !(x >= 0 && x <= 1))
        tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'min' is a fraction of the lr, in [0, 1]: got %g", x);
      if (strcmp(n, "gamma") == 0 && !(x > 0))
        tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[i], "'gamma' must be above 0, got %g", x);
      a->v[i] = (tfg_value){.kind = TFG_V_FLOAT, .u.f = x};
    }
  }
  bool needs_total = false;
  for (int i = 0; i < a->n; i++) needs_total |= strcmp(a->names[i], "total") == 0;
  if (needs_total && total < 0)
    tfg_interp_fail(I, TFG_ERR_NAME, call, "this schedule needs 'total', the step it reaches min at");
  if (total >= 0 && a->v[total].u.f <= (double)warmup)
    tfg_interp_fail(I, TFG_ERR_NAME, &a->loc[total], "'total' (%g) must be above 'warmup' (%" PRId64 ")",
                    a->v[total].u.f, warmup);
}

/* A configuration call: an optimizer (kind 1, its arguments checked
 * here), a learning-rate schedule (kind 2, likewise) or a strategy (kind
 * 0, its devices checked by compiler/strategy.c, which knows what each
 * must be). */
static tfg_value bi_record(tfg_interp *I, const tfg_builtin *b, tfg_args *a, const tfg_loc *call) {
  if (b->kind == 1) check_optimizer(I, a);
  if (b->kind == 2) check_schedule(I, a, call);
  tfg_record *r = tfg_arena_alloc(&I->arena, sizeof *r);
  r->name = b->name;
  r->nargs = a->n;
  r->loc = *call;
  const char **names = tfg_arena_alloc(&I->arena, sizeof *names * (size_t)(a->n ? a->n : 1));
  r->args = tfg_arena_alloc(&I->arena, sizeof *r->args * (size_t)(a->n ? a->n : 1));
  for (int i = 0; i < a->n; i++) {
    names[i] = a->names[i];
    r->args[i] = a->v[i];
  }
  r->arg_names = names;
  return (tfg_value){.kind = TFG_V_RECORD, .u.record = r};
}

/* ---- calling ------------------------------------------------------------------------- */

tfg_value tfg_builtin_call(tfg_interp *I, const tfg_builtin *b, const tfg_ast *call, tfg_value *pos,
                           tfg_loc *posloc, int npos, const char **kwn, tfg_value *kw, tfg_loc *kwloc, int nkw) {
  if (!b->fn) return call_npy(I, b, call, pos, posloc, npos, kwn, kw, kwloc, nkw);
  /* An initializer called alone takes its shape first: zeros([2, 3]). */
  tfg_value shape_v;
  tfg_loc shape_l;
  bool lead_shape = b->fn == bi_init && npos > 0 && (pos[0].kind == TFG_V_LIST || pos[0].kind == TFG_V_RANGE);
  if (lead_shape) {
    shape_v = pos[0];
    shape_l = posloc[0];
    pos++;
    posloc++;
    npos--;
  }
  tfg_args a;
  tfg_interp_bind(I, b->name, b->params, call, pos, posloc, npos, kwn, kw, kwloc, nkw, &a);
  int i = 0;
  for (const tfg_ast *p = b->params->list.head; p; p = p->next, i++)
    if (!a.given[i]) a.v[i] = tfg_interp_expr(I, &I->root, p->a); /* defaults are literals */
  if (lead_shape) {
    int s = arg_index(&a, "shape");
    if (a.given[s]) tfg_interp_fail(I, TFG_ERR_NAME, &a.loc[s], "%s: the shape is given twice", b->name);
    a.v[s] = shape_v;
    a.loc[s] = shape_l;
    a.given[s] = true;
  }
  return b->fn(I, b, &a, &call->loc);
}
