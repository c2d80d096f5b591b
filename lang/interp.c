/* lang/interp.c: evaluates a program's AST into graph IR: statements,
 * calls and expressions. (Values, names, train statements, modules and
 * the session are in the other lang/interp_*.c: see lang/interp_impl.h.)
 *
 * Statements run once, in order; expressions compute build-time values,
 * and calls of ops add graph nodes. Three rules shape the interpreter:
 *
 * - Names resolve lexically: a fn body sees its parameters, its own
 *   bindings and its module's top-level bindings (at call time). Blocks
 *   (if, for, with, scope) do not open scopes, as in Python.
 * - Param names are dotted paths (LANGUAGE.md section 3): scope names,
 *   then the name a call's result is bound to (or the fn's name when the
 *   result is not bound directly), then the param's own name; a path
 *   already taken gets _1, _2, ... in creation order (interp_names.c).
 * - An error unwinds (longjmp) to the statement being run at top level.
 *   Everything built is in arenas, and the statement's partial effects
 *   (nodes, params, actions, bindings) are truncated away, so a failed
 *   statement leaves the session as it was.
 */
#include "lang/interp.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "ir/ops.h"
#include "lang/interp_impl.h"
#include "lang/parse.h"

/* ---- errors ------------------------------------------------------------------- */

_Noreturn void tfg_interp_unwind(tfg_interp *I, tfg_status s) {
  I->status = s;
  TFG_ASSERT(I->fail != NULL);
  longjmp(*I->fail, 1);
}

_Noreturn void tfg_interp_fail(tfg_interp *I, tfg_status s, const tfg_loc *loc, const char *fmt, ...) {
  tfg_strbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  tfg_diag_error(I->diag, loc, "%s", b.data);
  tfg_strbuf_free(&b);
  tfg_interp_unwind(I, s);
}

/* ---- graph building ------------------------------------------------------------ */

/* The header of a for statement, `for i in EXPR`, for messages. */
static tfg_loc loop_header(const tfg_ast *s) {
  tfg_loc l = s->loc;
  l.len = s->a->loc.off + s->a->loc.len - s->loc.off;
  return l;
}

/* A shape past TFG_MAX_ELEMENTS: its byte count would not even fit. */
static _Noreturn void too_many_elements(tfg_interp *I, const tfg_node *n, const tfg_loc *loc) {
  tfg_strbuf b = {0};
  tfg_shape_format(&b, n->dtype, &n->shape);
  tfg_diag_error(I->diag, loc, "%s has more than 2^48 elements", b.data);
  tfg_strbuf_free(&b);
  tfg_interp_unwind(I, TFG_ERR_SHAPE);
}

tfg_node_id tfg_interp_node(tfg_interp *I, tfg_op_id op, const tfg_node_id *in, int nin,
                            const tfg_attrs *attrs, const tfg_loc *loc) {
  tfg_graph *g = I->prog.graph;
  if (g->nnodes >= TFG_BUILD_MAX_NODES) {
    tfg_diag_error(I->diag, loc, "the graph already has %d nodes, the most a program may build", TFG_BUILD_MAX_NODES);
    if (I->loop) {
      tfg_loc l = loop_header(I->loop);
      tfg_diag_note(I->diag, &l, "in this loop");
    }
    tfg_interp_unwind(I, TFG_ERR_LIMIT);
  }
  tfg_node_id id = tfg_graph_add(g, op, in, nin, loc);
  tfg_node *n = tfg_graph_node(g, id);
  if (attrs) n->attrs = *attrs;
  n->pin = I->device;
  tfg_status s = tfg_op_get(op)->infer(g, n, I->diag);
  if (s != TFG_OK) tfg_interp_unwind(I, s);
  if (!tfg_shape_fits(&n->shape)) too_many_elements(I, n, loc);
  return id;
}

tfg_node_id tfg_interp_scalar(tfg_interp *I, double v, tfg_dtype dt, const tfg_loc *loc) {
  tfg_graph *g = I->prog.graph;
  void *data = tfg_arena_alloc(&g->arena, 8);
  switch (dt) {
  case TFG_DTYPE_F32: *(float *)data = (float)v; break;
  case TFG_DTYPE_F64: *(double *)data = v; break;
  case TFG_DTYPE_I32: *(int32_t *)data = (int32_t)v; break;
  case TFG_DTYPE_I64: *(int64_t *)data = (int64_t)v; break;
  case TFG_DTYPE_BOOL: *(uint8_t *)data = v != 0; break;
  default:
    tfg_interp_fail(I, TFG_ERR_SHAPE, loc, "a number cannot be mixed with %s %s tensor in this version",
                    tfg_dtype_article(dt), tfg_dtype_name(dt));
  }
  tfg_attrs a = {.data = data};
  tfg_node_id id = tfg_interp_node(I, TFG_OP_CONST, NULL, 0, &a, loc);
  tfg_node *n = tfg_graph_node(g, id);
  n->dtype = dt;
  n->shape.rank = 0;
  return id;
}

/* ---- execution ------------------------------------------------------------------ */

typedef struct flow {
  bool returned;
  tfg_value value;
} flow;

static flow exec_block(tfg_interp *I, tfg_env *env, const tfg_ast *block);
static flow exec_stmt(tfg_interp *I, tfg_env *env, const tfg_ast *s);
static tfg_value call_fn(tfg_interp *I, tfg_env *env, const tfg_fn *fn, const tfg_ast *call);

void tfg_interp_push_action(tfg_interp *I, tfg_action a) {
  tfg_program *p = &I->prog;
  TFG_GROW(p->actions, p->nactions, I->cap_actions, 8);
  p->actions[p->nactions++] = a;
}

static void push_param(tfg_interp *I, tfg_node_id id) {
  tfg_program *p = &I->prog;
  TFG_GROW(p->params, p->nparams, I->cap_params, 8);
  p->params[p->nparams++] = id;
}

static void push_feed(tfg_interp *I, tfg_feed f) {
  tfg_program *p = &I->prog;
  TFG_GROW(p->feeds, p->nfeeds, I->cap_feeds, 8);
  p->feeds[p->nfeeds++] = f;
}

static int64_t want_int(tfg_interp *I, const tfg_value *v, const tfg_loc *loc, const char *what) {
  if (v->kind == TFG_V_INT) return v->u.i;
  if (v->kind == TFG_V_FLOAT && v->u.f == floor(v->u.f) && fabs(v->u.f) < 9e15) return (int64_t)v->u.f;
  if (v->kind == TFG_V_FLOAT)
    tfg_interp_fail(I, TFG_ERR_NAME, loc, "%s must be an integer, got %g", what, tfg_interp_shown(v->u.f));
  tfg_interp_fail(I, TFG_ERR_NAME, loc, "%s must be an integer, got %s", what, tfg_vkind_name(v->kind));
}

/* dtype and shape of a `DTYPE[dims]` type. */
static void eval_type(tfg_interp *I, tfg_env *env, const tfg_ast *t, tfg_dtype *dt, tfg_shape *shape) {
  tfg_value *d = tfg_env_find(env, t->name);
  if (!d || d->kind != TFG_V_DTYPE) {
    tfg_interp_fail(I, TFG_ERR_NAME, &t->loc, "'%s' is not a dtype", t->name);
  }
  *dt = d->u.dtype;
  if (t->list.n > TFG_MAX_RANK)
    tfg_interp_fail(I, TFG_ERR_SHAPE, &t->loc, "a tensor has at most %d dimensions, this type has %u",
                    TFG_MAX_RANK, t->list.n);
  shape->rank = 0;
  for (const tfg_ast *e = t->list.head; e; e = e->next) {
    tfg_value v = tfg_interp_expr(I, env, e);
    int64_t n = want_int(I, &v, &e->loc, "a dimension");
    if (n < 0) tfg_interp_fail(I, TFG_ERR_SHAPE, &e->loc, "a dimension must not be negative, got %" PRId64, n);
    if (n == 0) {
      tfg_diag_error(I->diag, &e->loc, "a dimension must be at least 1, got 0");
      tfg_diag_help(I->diag, "tfg has no empty tensors: every dimension must be at least 1");
      tfg_interp_unwind(I, TFG_ERR_SHAPE);
    }
    shape->dim[shape->rank++] = n;
  }
  if (!tfg_shape_fits(shape)) {
    tfg_node tmp = {.dtype = *dt, .shape = *shape};
    too_many_elements(I, &tmp, &t->loc);
  }
}

static tfg_devspec eval_device(tfg_interp *I, tfg_env *env, const tfg_ast *e) {
  tfg_value v = tfg_interp_expr(I, env, e);
  if (v.kind != TFG_V_DEVICE)
    tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "expected a device (cpu, gpu:N, gpu:*), got %s",
                    tfg_vkind_name(v.kind));
  v.u.dev.loc = e->loc;
  return v.u.dev;
}

/* The value of a top-level `let` overridden by --set, if any. */
static bool set_override(tfg_interp *I, const char *name, tfg_value *out) {
  for (int i = 0; i < I->opts->nsets; i++) {
    if (strcmp(I->opts->sets[i].name, name) != 0) continue;
    I->set_used[i] = true;
    /* The value is tfg expression text, parsed and evaluated on its own. */
    char label[300];
    snprintf(label, sizeof label, "--set %s", name);
    const char *text = I->opts->sets[i].value;
    const tfg_source *src = tfg_diag_add_source(I->diag, label, text, strlen(text));
    tfg_ast *prog = NULL;
    if (!src || tfg_parse(src, I->diag, &I->arena, &prog, NULL) != TFG_OK)
      tfg_interp_unwind(I, TFG_ERR_SYNTAX);
    if (prog->list.n != 1 || prog->list.head->kind != TFG_AST_EXPR_STMT) {
      tfg_loc l = tfg_source_loc(src, 0, (uint32_t)strlen(text));
      tfg_interp_fail(I, TFG_ERR_USAGE, &l, "--set %s: the value must be one expression", name);
    }
    *out = tfg_interp_expr(I, &I->main.env, prog->list.head->a);
    return true;
  }
  return false;
}

/* The initializer a param declaration gives (value v from `= EXPR`). */
static void param_init(tfg_interp *I, tfg_node *n, const tfg_value *v, const tfg_loc *loc) {
  switch (v->kind) {
  case TFG_V_INIT: {
    tfg_attrs keep = *v->u.init;
    tfg_builtin_check_init(I, &keep, n->dtype, loc);
    n->attrs.init = keep.init;
    n->attrs.value = keep.value;
    n->attrs.a = keep.a;
    n->attrs.b = keep.b;
    n->attrs.seed = keep.seed;
    return;
  }
  case TFG_V_INT:
  case TFG_V_FLOAT:
    n->attrs.init = TFG_INIT_FULL;
    n->attrs.value = v->kind == TFG_V_INT ? (double)v->u.i : v->u.f;
    return;
  case TFG_V_TENSOR: {
    const tfg_node *c = &I->prog.graph->nodes[v->u.tensor];
    if (c->op == TFG_OP_CONST && c->dtype == n->dtype && tfg_shape_eq(&c->shape, &n->shape)) {
      n->attrs.data = c->attrs.data; /* initial values copied from a constant */
      n->attrs.init = TFG_INIT_FULL;
      return;
    }
    if (c->op == TFG_OP_CONST) {
      tfg_strbuf a = {0}, b = {0};
      tfg_shape_format(&a, n->dtype, &n->shape);
      tfg_shape_format(&b, c->dtype, &c->shape);
      tfg_diag_error(I->diag, loc, "the initial value is %s but the param is %s", b.data, a.data);
      tfg_strbuf_free(&a);
      tfg_strbuf_free(&b);
      tfg_interp_unwind(I, TFG_ERR_SHAPE);
    }
    break;
  }
  default: break;
  }
  tfg_diag_error(I->diag, loc, "a param's initializer must be zeros(), ones(), full(v), normal(), "
                               "uniform(lo, hi), glorot(), he(), a number or a constant tensor; got %s",
                 tfg_vkind_name(v->kind));
  tfg_interp_unwind(I, TFG_ERR_NAME);
}

static void exec_param(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_dtype dt;
  tfg_shape shape;
  eval_type(I, env, s->a, &dt, &shape);
  tfg_value init = {.kind = TFG_V_NONE};
  if (s->b) init = tfg_interp_expr(I, env, s->b);
  /* The path: scopes and calls in force, then the param's own name. */
  const char *full = tfg_interp_param_path(I, s->name);
  tfg_node_id id = tfg_interp_node(I, TFG_OP_PARAM, NULL, 0, NULL, &s->loc);
  tfg_node *n = tfg_graph_node(I->prog.graph, id);
  n->dtype = dt;
  n->shape = shape;
  n->name = full;
  if (s->b) {
    param_init(I, n, &init, &s->b->loc);
  } else {
    n->attrs.init = TFG_INIT_ZEROS; /* documented: a param without initializer starts at zero */
  }
  tfg_interp_take_path(I, full);
  push_param(I, id);
  tfg_env_bind(env, s->name, tfg_val_tensor(id));
}

static void exec_input(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_dtype dt;
  tfg_shape shape;
  eval_type(I, env, s->a, &dt, &shape);
  tfg_feed f = {.col = -1};
  if (s->b) {
    tfg_value src = tfg_interp_expr(I, env, s->b);
    if (src.kind != TFG_V_COLUMN)
      tfg_interp_fail(I, TFG_ERR_NAME, &s->b->loc, "an input comes from a dataset column (like digits.x), got %s",
                      tfg_vkind_name(src.kind));
    const tfg_dataset *ds = src.u.column.ds->ds;
    int col = src.u.column.col;
    const char *cname = tfg_data_column_name(ds, col);
    tfg_data_type ct = tfg_data_column_type(ds, col);
    if (!tfg_data_convertible(ct, dt)) {
      tfg_interp_fail(I, TFG_ERR_SHAPE, &s->loc, "input %s: column %s of %s holds %s, which cannot feed %s",
                      s->name, cname, tfg_data_column_path(ds, col), tfg_data_type_name(ct), tfg_dtype_name(dt));
    }
    /* A value the dtype cannot hold (an i64 label of 2^40 into i32) is
     * found here, by `tfg check`, not clamped when a batch reaches it. */
    if (tfg_data_check_column(I->diag, &s->loc, ds, col, dt) != TFG_OK) tfg_interp_unwind(I, TFG_ERR_SHAPE);
    if (shape.rank < 1 || shape.dim[0] < 1)
      tfg_interp_fail(I, TFG_ERR_SHAPE, &s->a->loc, "input %s: an input from a dataset needs a batch dimension of at least 1 first",
                      s->name);
    tfg_shape row = tfg_data_row_shape(ds, col);
    int64_t want = 1;
    for (int i = 1; i < shape.rank; i++) want *= shape.dim[i];
    /* Rows may be rearranged (an MNIST image [28,28] feeds [1,28,28]) but
     * never resized. */
    if (tfg_shape_numel(&row) != want) {
      tfg_strbuf a = {0}, b = {0};
      tfg_shape in_row = {.rank = shape.rank - 1};
      for (int i = 1; i < shape.rank; i++) in_row.dim[i - 1] = shape.dim[i];
      tfg_shape_format(&a, dt, &in_row);
      for (int i = 0; i < row.rank; i++) tfg_strbuf_printf(&b, "%s%lld", i ? "," : "", (long long)row.dim[i]);
      tfg_diag_error(I->diag, &s->loc, "input %s: each row is %s but column %s of %s has rows of [%s]", s->name,
                     a.data, cname, tfg_data_column_path(ds, col), b.data);
      tfg_strbuf_free(&a);
      tfg_strbuf_free(&b);
      tfg_interp_unwind(I, TFG_ERR_SHAPE);
    }
    int64_t rows = tfg_data_rows(ds, src.u.column.split);
    if (rows < shape.dim[0])
      tfg_interp_fail(I, TFG_ERR_SHAPE, &s->loc, "input %s: %s has %lld rows in this split, fewer than a batch of %lld",
                      s->name, src.u.column.ds->path, (long long)rows, (long long)shape.dim[0]);
    f.ds = ds;
    f.ds_path = src.u.column.ds->path;
    f.col = col;
    f.split = src.u.column.split;
  }
  tfg_node_id id = tfg_interp_node(I, TFG_OP_INPUT, NULL, 0, NULL, &s->loc);
  tfg_node *n = tfg_graph_node(I->prog.graph, id);
  n->dtype = dt;
  n->shape = shape;
  n->name = s->name;
  f.node = id;
  push_feed(I, f);
  tfg_env_bind(env, s->name, tfg_val_tensor(id));
}

static void exec_import(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_module *m = tfg_interp_load_module(I, s);
  const char *as = s->name ? s->name : m->name;
  tfg_env_bind(env, as, (tfg_value){.kind = TFG_V_MODULE, .u.module = m});
}

static const char *stmt_text(const tfg_ast *e) {
  return e->loc.src ? e->loc.src->text + e->loc.off : "";
}

static void exec_print(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_action a = {.kind = TFG_ACTION_PRINT, .loc = s->loc};
  a.items = tfg_arena_alloc(&I->arena, sizeof *a.items * s->list.n);
  for (const tfg_ast *e = s->list.head; e; e = e->next) {
    tfg_value v = tfg_interp_expr(I, env, e);
    tfg_print_item *it = &a.items[a.nitems++];
    it->text = tfg_interp_strdup(I, stmt_text(e), e->loc.len);
    it->loc = e->loc;
    if (v.kind == TFG_V_TENSOR) {
      it->is_tensor = true;
      it->node = v.u.tensor;
    } else {
      tfg_strbuf b = {0};
      tfg_value_format(&v, I->prog.graph, &b);
      it->value = tfg_interp_strdup(I, b.data ? b.data : "", b.len);
      tfg_strbuf_free(&b);
    }
  }
  tfg_interp_push_action(I, a);
}

static bool truthy(tfg_interp *I, const tfg_value *v, const tfg_loc *loc) {
  if (v->kind == TFG_V_BOOL) return v->u.b;
  if (v->kind == TFG_V_TENSOR)
    tfg_interp_fail(I, TFG_ERR_NAME, loc, "a condition is decided while the graph is built; a tensor has no value yet");
  tfg_interp_fail(I, TFG_ERR_NAME, loc, "a condition must be a bool, got %s", tfg_vkind_name(v->kind));
}

/* Loop s would take its statement past TFG_BUILD_MAX_ITERATIONS: n
 * iterations of its own (n > 0, known before it starts), or, n = 0,
 * counted with the loops around it. */
static _Noreturn void too_many_iterations(tfg_interp *I, const tfg_ast *s, uint64_t n) {
  tfg_loc l = loop_header(s);
  if (n)
    tfg_diag_error(I->diag, &l, "this loop would run %" PRIu64 " iterations; one statement may run at most %d",
                   n, TFG_BUILD_MAX_ITERATIONS);
  else
    tfg_diag_error(I->diag, &l, "this loop takes its statement past %d loop iterations, the most one statement may run",
                   TFG_BUILD_MAX_ITERATIONS);
  tfg_diag_help(I->diag, "a for loop is unrolled into the graph while it is built: is a bound wrong?");
  tfg_interp_unwind(I, TFG_ERR_LIMIT);
}

/* Whether the statement's build-time values are past TFG_BUILD_MAX_BYTES:
 * checked at each loop iteration and fn call, where they can grow
 * without bound. */
static bool too_many_bytes(const tfg_interp *I) {
  return I->arena.total - I->arena_start - I->arena_exempt > (size_t)TFG_BUILD_MAX_BYTES;
}

static _Noreturn void fail_bytes(tfg_interp *I, const tfg_loc *at, const char *what) {
  tfg_interp_fail(I, TFG_ERR_LIMIT, at, "this %s takes its statement past %lld MiB of build-time values "
                  "(lists, strings), the most one statement may make", what, TFG_BUILD_MAX_BYTES >> 20);
}

/* Runs one iteration of loop s with var bound to v, counting it against
 * the statement's budgets. */
static flow loop_iteration(tfg_interp *I, tfg_env *env, const tfg_ast *s, tfg_value v) {
  if (++I->iterations > TFG_BUILD_MAX_ITERATIONS) too_many_iterations(I, s, 0);
  if (too_many_bytes(I)) {
    tfg_loc l = loop_header(s);
    fail_bytes(I, &l, "loop");
  }
  tfg_env_bind(env, s->name, v);
  return exec_block(I, env, s->b);
}

static flow exec_for(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_value it = tfg_interp_expr(I, env, s->a);
  flow f = {0};
  const tfg_ast *outer = I->loop;
  I->loop = s;
  if (it.kind == TFG_V_RANGE) {
    int64_t lo = it.u.range.lo, hi = it.u.range.hi;
    /* Refused before the first iteration: no need to wait for the count. */
    if (hi > lo && (uint64_t)hi - (uint64_t)lo > TFG_BUILD_MAX_ITERATIONS)
      too_many_iterations(I, s, (uint64_t)hi - (uint64_t)lo);
    for (int64_t i = lo; i < hi && !f.returned; i++) f = loop_iteration(I, env, s, tfg_val_int(i));
  } else if (it.kind == TFG_V_LIST) {
    for (int32_t i = 0; i < it.u.list.n && !f.returned; i++) f = loop_iteration(I, env, s, it.u.list.items[i]);
  } else {
    tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "a for loop runs over a range (0..n) or a list, got %s",
                    tfg_vkind_name(it.kind));
  }
  I->loop = outer;
  return f;
}

static flow exec_stmt(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  flow f = {0};
  switch (s->kind) {
  case TFG_AST_LET:
  case TFG_AST_ASSIGN: {
    tfg_value v;
    if (!(env == &I->main.env && I->call_depth == 0 && set_override(I, s->name, &v))) {
      /* A call bound directly to a name names the params it creates. */
      if (s->a->kind == TFG_AST_CALL) {
        tfg_value callee = tfg_interp_expr(I, env, s->a->a);
        if (callee.kind == TFG_V_FN) {
          tfg_interp_push_component(I, s->name, &s->loc);
          v = call_fn(I, env, callee.u.fn, s->a);
          I->depth--;
          tfg_env_bind(env, s->name, v);
          return f;
        }
      }
      v = tfg_interp_expr(I, env, s->a);
    }
    tfg_env_bind(env, s->name, v);
    return f;
  }
  case TFG_AST_PARAM: exec_param(I, env, s); return f;
  case TFG_AST_INPUT: exec_input(I, env, s); return f;
  case TFG_AST_DATA: {
    tfg_value v = tfg_interp_expr(I, env, s->a);
    if (v.kind != TFG_V_DATASET)
      tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "data needs a dataset: csv(...), npy(...) or idx(...); got %s",
                      tfg_vkind_name(v.kind));
    tfg_env_bind(env, s->name, v);
    return f;
  }
  case TFG_AST_FN: {
    for (const tfg_ast *p = s->list.head; p; p = p->next)
      for (const tfg_ast *q = s->list.head; q != p; q = q->next)
        if (strcmp(p->name, q->name) == 0)
          tfg_interp_fail(I, TFG_ERR_NAME, &p->loc, "parameter '%s' appears twice", p->name);
    tfg_fn *fn = tfg_arena_alloc(&I->arena, sizeof *fn);
    fn->def = s;
    tfg_env *g = env;
    while (g->parent && g->parent != &I->root) g = g->parent;
    fn->globals = g;
    fn->dir = I->dir;
    tfg_env_bind(env, s->name, (tfg_value){.kind = TFG_V_FN, .u.fn = fn});
    return f;
  }
  case TFG_AST_RETURN:
    if (I->call_depth == 0) tfg_interp_fail(I, TFG_ERR_NAME, &s->loc, "return outside a fn");
    f.returned = true;
    f.value = s->a ? tfg_interp_expr(I, env, s->a) : (tfg_value){.kind = TFG_V_NONE};
    return f;
  case TFG_AST_AT:
  case TFG_AST_WITH: {
    tfg_devspec saved = I->device;
    I->device = eval_device(I, env, s->a);
    f = s->kind == TFG_AST_AT ? exec_stmt(I, env, s->b) : exec_block(I, env, s->b);
    I->device = saved;
    return f;
  }
  case TFG_AST_SCOPE:
    tfg_interp_push_component(I, s->name, &s->loc);
    f = exec_block(I, env, s->a);
    I->depth--;
    return f;
  case TFG_AST_FOR: return exec_for(I, env, s);
  case TFG_AST_IF: {
    tfg_value c = tfg_interp_expr(I, env, s->a);
    if (truthy(I, &c, &s->a->loc)) return exec_block(I, env, s->b);
    if (s->c) return s->c->kind == TFG_AST_IF ? exec_stmt(I, env, s->c) : exec_block(I, env, s->c);
    return f;
  }
  case TFG_AST_IMPORT: exec_import(I, env, s); return f;
  case TFG_AST_PRINT: exec_print(I, env, s); return f;
  case TFG_AST_TRAIN: tfg_interp_exec_train(I, env, s); return f;
  case TFG_AST_LOAD: tfg_interp_exec_load(I, env, s); return f;
  case TFG_AST_EXPR_STMT: tfg_interp_expr(I, env, s->a); return f;
  case TFG_AST_BLOCK: return exec_block(I, env, s);
  default: break;
  }
  tfg_interp_fail(I, TFG_ERR_NAME, &s->loc, "this statement cannot be evaluated here");
}

static flow exec_block(tfg_interp *I, tfg_env *env, const tfg_ast *block) {
  flow f = {0};
  for (const tfg_ast *s = block->list.head; s; s = s->next) {
    f = exec_stmt(I, env, s);
    if (f.returned) return f;
  }
  return f;
}

tfg_status tfg_interp_run_stmt(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  jmp_buf here, *outer = I->fail;
  I->fail = &here;
  tfg_status st = TFG_OK;
  if (setjmp(here) == 0) exec_stmt(I, env, s);
  else st = I->status;
  I->fail = outer;
  return st;
}

/* ---- calls ------------------------------------------------------------------------ */

/* Evaluates a call's arguments: positional ones first, keywords after. */
typedef struct call_args {
  tfg_value pos[16];
  tfg_loc posloc[16];
  int npos;
  const char *kwn[16];
  tfg_value kw[16];
  tfg_loc kwloc[16];
  int nkw;
} call_args;

static void eval_args(tfg_interp *I, tfg_env *env, const tfg_ast *call, call_args *a) {
  a->npos = a->nkw = 0;
  for (const tfg_ast *x = call->list.head; x; x = x->next) {
    if (x->kind == TFG_AST_KWARG) {
      if (a->nkw == 16) tfg_interp_fail(I, TFG_ERR_NAME, &x->loc, "too many keyword arguments");
      for (int i = 0; i < a->nkw; i++)
        if (strcmp(a->kwn[i], x->name) == 0)
          tfg_interp_fail(I, TFG_ERR_NAME, &x->loc, "keyword argument '%s' is given twice", x->name);
      a->kwn[a->nkw] = x->name;
      a->kwloc[a->nkw] = x->loc;
      a->kw[a->nkw++] = tfg_interp_expr(I, env, x->a);
    } else {
      if (a->nkw) tfg_interp_fail(I, TFG_ERR_NAME, &x->loc, "a positional argument after keyword arguments");
      if (a->npos == 16) tfg_interp_fail(I, TFG_ERR_NAME, &x->loc, "too many arguments");
      a->posloc[a->npos] = x->loc;
      a->pos[a->npos++] = tfg_interp_expr(I, env, x);
    }
  }
}

void tfg_interp_bind(tfg_interp *I, const char *fname, const tfg_ast *params, const tfg_ast *call,
                     tfg_value *pos, tfg_loc *posloc, int npos, const char **kwnames, tfg_value *kw,
                     tfg_loc *kwloc, int nkw, tfg_args *out) {
  memset(out, 0, sizeof *out);
  int np = 0;
  if (params->list.n > 16)
    tfg_interp_fail(I, TFG_ERR_LIMIT, &params->loc, "%s has %u parameters; the limit is 16", fname, params->list.n);
  for (const tfg_ast *p = params->list.head; p; p = p->next) out->names[np++] = p->name;
  out->n = np;
  if (npos > np) {
    tfg_interp_fail(I, TFG_ERR_NAME, &posloc[np], "%s takes %d argument%s, got %d", fname, np,
                    np == 1 ? "" : "s", npos);
  }
  for (int i = 0; i < npos; i++) {
    out->v[i] = pos[i];
    out->loc[i] = posloc[i];
    out->given[i] = true;
  }
  for (int k = 0; k < nkw; k++) {
    int at = -1;
    for (int i = 0; i < np; i++)
      if (strcmp(out->names[i], kwnames[k]) == 0) at = i;
    if (at < 0) {
      tfg_loc l = kwloc[k];
      l.len = (uint32_t)strlen(kwnames[k]);
      tfg_diag_error(I->diag, &l, "%s has no parameter '%s'", fname, kwnames[k]);
      const char *best = NULL;
      int bestd = 3;
      tfg_strbuf all = {0};
      for (int i = 0; i < np; i++) {
        int d = tfg_interp_edit_distance(kwnames[k], out->names[i]);
        if (d < bestd) { bestd = d; best = out->names[i]; }
        tfg_strbuf_printf(&all, "%s%s", i ? ", " : "", out->names[i]);
      }
      if (best) tfg_diag_help(I->diag, "did you mean '%s'?", best);
      else tfg_diag_help(I->diag, "%s takes: %s", fname, np ? all.data : "no arguments");
      tfg_strbuf_free(&all);
      tfg_interp_unwind(I, TFG_ERR_NAME);
    }
    if (out->given[at])
      tfg_interp_fail(I, TFG_ERR_NAME, &kwloc[k], "%s: argument '%s' is given twice", fname, kwnames[k]);
    out->v[at] = kw[k];
    out->loc[at] = kwloc[k];
    out->given[at] = true;
  }
  int i = 0;
  for (const tfg_ast *p = params->list.head; p; p = p->next, i++) {
    if (out->given[i]) continue;
    if (p->kind != TFG_AST_KWARG)
      tfg_interp_fail(I, TFG_ERR_NAME, &call->loc, "%s: missing argument '%s'", fname, p->name);
    out->loc[i] = call->loc;
  }
}

/* The traceback of an error unwinding through calls: one note per call
 * site, innermost first, with a run of notes for one call site (runaway
 * recursion) cut to TRACEBACK_SAME and a count, as Python does. */
enum { TRACEBACK_SAME = 3 };

void tfg_interp_traceback_flush(tfg_interp *I) {
  if (I->tb_same > TRACEBACK_SAME)
    tfg_diag_note(I->diag, NULL, "... %" PRId64 " more call%s of %s from the same place", I->tb_same - TRACEBACK_SAME,
                  I->tb_same - TRACEBACK_SAME == 1 ? "" : "s", I->tb_name);
  I->tb_call = NULL;
  I->tb_same = 0;
}

static void traceback_note(tfg_interp *I, const tfg_ast *call, const char *fname) {
  if (call != I->tb_call) {
    tfg_interp_traceback_flush(I);
    I->tb_call = call;
    I->tb_name = fname;
  }
  if (++I->tb_same <= TRACEBACK_SAME) tfg_diag_note(I->diag, &call->loc, "in this call of %s", fname);
}

/* Binds a call's parameters in the fn's fresh scope, evaluating defaults
 * (at call time, in the fn's own module), then runs the body; errors are
 * caught here (see tfg_interp_run_stmt) so the caller can add its call to the
 * traceback and restore what it changed. */
static tfg_status guarded_body(tfg_interp *I, tfg_env *local, const tfg_fn *fn, const tfg_args *b, flow *out) {
  jmp_buf here, *outer = I->fail;
  I->fail = &here;
  tfg_status st = TFG_OK;
  if (setjmp(here) == 0) {
    int i = 0;
    for (const tfg_ast *p = fn->def->list.head; p; p = p->next, i++)
      tfg_env_bind(local, p->name, b->given[i] ? b->v[i] : tfg_interp_expr(I, fn->globals, p->a));
    *out = exec_block(I, local, fn->def->a);
  } else {
    st = I->status;
  }
  I->fail = outer;
  return st;
}

/* Calls a program's fn: binds the arguments, runs the body in a fresh
 * scope over the fn's module globals, and returns what it returns (none
 * without a return). The caller has pushed the naming component. */
static tfg_value call_fn(tfg_interp *I, tfg_env *env, const tfg_fn *fn, const tfg_ast *call) {
  call_args a;
  eval_args(I, env, call, &a);
  tfg_args b;
  const tfg_ast *def = fn->def;
  tfg_interp_bind(I, def->name, def, call, a.pos, a.posloc, a.npos, a.kwn, a.kw, a.kwloc, a.nkw, &b);
  if (I->call_depth >= TFG_MAX_CALL_DEPTH)
    tfg_interp_fail(I, TFG_ERR_LIMIT, &call->loc, "calls are nested more than %d deep (runaway recursion?)",
                    TFG_MAX_CALL_DEPTH);
  if (++I->calls > TFG_BUILD_MAX_CALLS)
    tfg_interp_fail(I, TFG_ERR_LIMIT, &call->loc,
                    "this call takes its statement past %d fn calls, the most one statement may make "
                    "(runaway recursion?)", TFG_BUILD_MAX_CALLS);
  if (too_many_bytes(I)) fail_bytes(I, &call->loc, "call");
  /* A fresh scope in this depth's buffers (nested calls use the next
   * depth's); nothing refers to it once the call returns. */
  tfg_env *local = &I->frames[I->call_depth];
  if (!local->heads) tfg_env_init(local, NULL, 16);
  tfg_env_truncate(local, 0);
  local->parent = fn->globals;
  const char *saved_dir = I->dir;
  I->dir = fn->dir;
  I->call_depth++;
  /* The call's record: the nodes its body builds carry its number (a
   * nested call's stamped first, on its return), which recompute reads. */
  tfg_program *p = &I->prog;
  TFG_GROW(p->calls, p->ncalls, I->cap_calls, 16);
  p->calls[p->ncalls++] = (tfg_call){.fn = def->name, .parent = I->cur_call, .loc = call->loc};
  int32_t me = p->ncalls, outer = I->cur_call, first = p->graph->nnodes;
  I->cur_call = me;
  flow f = {0};
  tfg_status st = guarded_body(I, local, fn, &b, &f);
  I->cur_call = outer;
  for (int32_t i = first; i < p->graph->nnodes; i++)
    if (p->graph->nodes[i].call == 0) p->graph->nodes[i].call = me;
  I->call_depth--;
  I->dir = saved_dir;
  if (st != TFG_OK) {
    /* A traceback: each call on the way out names its call site. */
    traceback_note(I, call, def->name);
    tfg_interp_unwind(I, st);
  }
  return f.returned ? f.value : (tfg_value){.kind = TFG_V_NONE};
}

/* ---- expressions -------------------------------------------------------------------- */

tfg_node_id tfg_interp_as_tensor(tfg_interp *I, const tfg_value *v, const tfg_loc *loc, int like) {
  tfg_dtype dt = like >= 0 ? (tfg_dtype)like : TFG_DTYPE_F32;
  switch (v->kind) {
  case TFG_V_TENSOR: return v->u.tensor;
  case TFG_V_INT: return tfg_interp_scalar(I, (double)v->u.i, dt, loc);
  case TFG_V_FLOAT:
    if (like >= 0 && !tfg_dtype_is_float(dt)) {
      tfg_strbuf b = {0};
      tfg_value_format(v, I->prog.graph, &b);
      tfg_diag_error(I->diag, loc, "the float %s cannot be mixed with %s %s tensor", b.data, tfg_dtype_article(dt),
                     tfg_dtype_name(dt));
      tfg_strbuf_free(&b);
      tfg_interp_unwind(I, TFG_ERR_SHAPE);
    }
    return tfg_interp_scalar(I, v->u.f, dt, loc);
  case TFG_V_BOOL: return tfg_interp_scalar(I, v->u.b, like >= 0 ? dt : TFG_DTYPE_BOOL, loc);
  default: break;
  }
  tfg_interp_fail(I, TFG_ERR_NAME, loc, "expected a tensor, got %s", tfg_vkind_name(v->kind));
}

static bool is_number(const tfg_value *v) { return v->kind == TFG_V_INT || v->kind == TFG_V_FLOAT; }
static double num(const tfg_value *v) { return v->kind == TFG_V_INT ? (double)v->u.i : v->u.f; }

/* Binary operator op of e on a and b: a graph node when either is a
 * tensor, else computed now. Build-time arithmetic that has no value (a
 * division or modulo by zero, an integer result past int64) fails with
 * TFG_ERR_ARITH, as Python raises ArithmeticError's subclasses: a
 * program error (exit 1) that callers can tell from a wrong name. Float
 * results may be inf or NaN (1e308 * 10.0); where a value must be
 * finite, the place that reads it refuses it (tfg_interp_check_finite). */
static tfg_value arith(tfg_interp *I, int op, const tfg_value *a, const tfg_value *b, const tfg_ast *e) {
  if (a->kind == TFG_V_TENSOR || b->kind == TFG_V_TENSOR) {
    if (op != TFG_AST_OP_ADD && op != TFG_AST_OP_SUB && op != TFG_AST_OP_MUL && op != TFG_AST_OP_DIV) {
      tfg_diag_error(I->diag, &e->loc, "'%s' is build-time only and cannot take a tensor", tfg_ast_op_str(op));
      if (op == TFG_AST_OP_GT) tfg_diag_help(I->diag, "compare tensors with greater(a, b)");
      else if (op == TFG_AST_OP_EQ) tfg_diag_help(I->diag, "compare tensors with equal(a, b)");
      tfg_interp_unwind(I, TFG_ERR_NAME);
    }
    int like = a->kind == TFG_V_TENSOR ? (int)I->prog.graph->nodes[a->u.tensor].dtype
                                        : (int)I->prog.graph->nodes[b->u.tensor].dtype;
    tfg_node_id in[2] = {tfg_interp_as_tensor(I, a, &e->a->loc, like), tfg_interp_as_tensor(I, b, &e->b->loc, like)};
    static const tfg_op_id ops[] = {[TFG_AST_OP_ADD] = TFG_OP_ADD, [TFG_AST_OP_SUB] = TFG_OP_SUB,
                                    [TFG_AST_OP_MUL] = TFG_OP_MUL, [TFG_AST_OP_DIV] = TFG_OP_DIV};
    return tfg_val_tensor(tfg_interp_node(I, ops[op], in, 2, NULL, &e->loc));
  }
  if (op == TFG_AST_OP_EQ || op == TFG_AST_OP_NE) {
    bool eq;
    if (is_number(a) && is_number(b)) eq = num(a) == num(b);
    else if (a->kind != b->kind) eq = false;
    else if (a->kind == TFG_V_STRING) eq = a->u.str.len == b->u.str.len && memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
    else if (a->kind == TFG_V_BOOL) eq = a->u.b == b->u.b;
    else if (a->kind == TFG_V_NONE) eq = true;
    else if (a->kind == TFG_V_DTYPE) eq = a->u.dtype == b->u.dtype;
    else if (a->kind == TFG_V_DEVICE) eq = a->u.dev.kind == b->u.dev.kind && a->u.dev.index == b->u.dev.index;
    else tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "%s cannot be compared with '%s'", tfg_vkind_name(a->kind), tfg_ast_op_str(op));
    return (tfg_value){.kind = TFG_V_BOOL, .u.b = op == TFG_AST_OP_EQ ? eq : !eq};
  }
  if (op == TFG_AST_OP_ADD && a->kind == TFG_V_STRING && b->kind == TFG_V_STRING) {
    char *s = tfg_arena_alloc(&I->arena, a->u.str.len + b->u.str.len + 1);
    memcpy(s, a->u.str.s, a->u.str.len);
    memcpy(s + a->u.str.len, b->u.str.s, b->u.str.len);
    return (tfg_value){.kind = TFG_V_STRING, .u.str = {s, a->u.str.len + b->u.str.len}};
  }
  if (op == TFG_AST_OP_ADD && a->kind == TFG_V_LIST && b->kind == TFG_V_LIST) {
    int32_t n = a->u.list.n + b->u.list.n;
    tfg_value *items = tfg_arena_alloc(&I->arena, sizeof *items * (size_t)(n ? n : 1));
    memcpy(items, a->u.list.items, sizeof *items * (size_t)a->u.list.n);
    memcpy(items + a->u.list.n, b->u.list.items, sizeof *items * (size_t)b->u.list.n);
    return (tfg_value){.kind = TFG_V_LIST, .u.list = {items, n}};
  }
  if (!is_number(a) || !is_number(b))
    tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "'%s' needs numbers or tensors, got %s and %s", tfg_ast_op_str(op),
                    tfg_vkind_name(a->kind), tfg_vkind_name(b->kind));
  bool ints = a->kind == TFG_V_INT && b->kind == TFG_V_INT;
  double x = num(a), y = num(b);
  switch (op) {
  case TFG_AST_OP_LT: return (tfg_value){.kind = TFG_V_BOOL, .u.b = x < y};
  case TFG_AST_OP_LE: return (tfg_value){.kind = TFG_V_BOOL, .u.b = x <= y};
  case TFG_AST_OP_GT: return (tfg_value){.kind = TFG_V_BOOL, .u.b = x > y};
  case TFG_AST_OP_GE: return (tfg_value){.kind = TFG_V_BOOL, .u.b = x >= y};
  default: break;
  }
  if (ints) {
    int64_t r, p = a->u.i, q = b->u.i;
    bool over = false;
    switch (op) {
    case TFG_AST_OP_ADD: over = __builtin_add_overflow(p, q, &r); break;
    case TFG_AST_OP_SUB: over = __builtin_sub_overflow(p, q, &r); break;
    case TFG_AST_OP_MUL: over = __builtin_mul_overflow(p, q, &r); break;
    case TFG_AST_OP_MOD:
      if (q == 0) tfg_interp_fail(I, TFG_ERR_ARITH, &e->loc, "modulo by zero");
      if (q == -1) return tfg_val_int(0);
      r = p % q;
      if (r != 0 && ((r < 0) != (q < 0))) r += q; /* Python: the sign of the divisor */
      break;
    case TFG_AST_OP_DIV:
      if (q == 0) tfg_interp_fail(I, TFG_ERR_ARITH, &e->loc, "division by zero");
      return tfg_val_float((double)p / (double)q); /* true division, as in Python 3 */
    default: r = 0; break;
    }
    if (over)
      tfg_interp_fail(I, TFG_ERR_ARITH, &e->loc, "integer overflow in %" PRId64 " %s %" PRId64, p, tfg_ast_op_str(op), q);
    return tfg_val_int(r);
  }
  switch (op) {
  case TFG_AST_OP_ADD: return tfg_val_float(x + y);
  case TFG_AST_OP_SUB: return tfg_val_float(x - y);
  case TFG_AST_OP_MUL: return tfg_val_float(x * y);
  case TFG_AST_OP_DIV:
    if (y == 0) tfg_interp_fail(I, TFG_ERR_ARITH, &e->loc, "division by zero");
    return tfg_val_float(x / y);
  case TFG_AST_OP_MOD:
    if (y == 0) tfg_interp_fail(I, TFG_ERR_ARITH, &e->loc, "modulo by zero");
    return tfg_val_float(x - y * floor(x / y));
  default: break;
  }
  tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "unsupported operator");
}

static tfg_value eval_member(tfg_interp *I, tfg_env *env, const tfg_ast *e) {
  tfg_value obj = tfg_interp_expr(I, env, e->a);
  tfg_loc at = e->loc;
  if (obj.kind == TFG_V_MODULE) {
    tfg_value *v = tfg_env_find_local(&obj.u.module->env, e->name);
    if (v) return *v;
    tfg_diag_error(I->diag, &at, "module %s has no member '%s'", obj.u.module->name, e->name);
    const char *s = tfg_interp_suggest(&obj.u.module->env, e->name);
    if (s) tfg_diag_help(I->diag, "did you mean '%s'?", s);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (obj.kind == TFG_V_DATASET) {
    if (obj.u.dataset.whole && (strcmp(e->name, "test") == 0 || strcmp(e->name, "train") == 0)) {
      obj.u.dataset.whole = false;
      obj.u.dataset.split = e->name[1] == 'e' ? TFG_SPLIT_TEST : TFG_SPLIT_TRAIN;
      return obj;
    }
    const tfg_dataset *ds = obj.u.dataset.ds->ds;
    int col = tfg_data_column(ds, e->name);
    if (col >= 0)
      return (tfg_value){.kind = TFG_V_COLUMN,
                         .u.column = {obj.u.dataset.ds, obj.u.dataset.whole ? TFG_SPLIT_TRAIN : obj.u.dataset.split, col}};
    tfg_strbuf cols = {0};
    for (int i = 0; i < tfg_data_ncolumns(ds); i++)
      tfg_strbuf_printf(&cols, "%s%s", i ? ", " : "", tfg_data_column_name(ds, i));
    tfg_diag_error(I->diag, &at, "dataset %s has no column '%s'", obj.u.dataset.ds->path, e->name);
    /* Only spellings that parse: `train` is a reserved word, and the
     * dataset itself reads its train split. */
    if (obj.u.dataset.whole && tfg_data_ncolumns(ds) > 0)
      tfg_diag_help(I->diag, "its columns are %s (of the train split); `%.*s.test.%s` reads the test split", cols.data,
                    (int)(e->a->loc.len > 40 ? 40 : e->a->loc.len), e->a->loc.src->text + e->a->loc.off,
                    tfg_data_column_name(ds, 0));
    else
      tfg_diag_help(I->diag, "its columns are %s", cols.data ? cols.data : "(none)");
    tfg_strbuf_free(&cols);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  tfg_interp_fail(I, TFG_ERR_NAME, &at, "%s has no members ('.%s')", tfg_vkind_name(obj.kind), e->name);
}

static tfg_value eval_index(tfg_interp *I, tfg_env *env, const tfg_ast *e) {
  tfg_value obj = tfg_interp_expr(I, env, e->a);
  tfg_value idx = tfg_interp_expr(I, env, e->b);
  if (obj.kind == TFG_V_TENSOR) {
    tfg_diag_error(I->diag, &e->loc, "tensors are not indexed with [ ]");
    tfg_diag_help(I->diag, "take part of a tensor with slice(x, axis, start, end)");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (obj.kind != TFG_V_LIST)
    tfg_interp_fail(I, TFG_ERR_NAME, &e->a->loc, "only lists can be indexed, got %s", tfg_vkind_name(obj.kind));
  int64_t i = want_int(I, &idx, &e->b->loc, "a list index");
  int64_t n = obj.u.list.n;
  if (i < -n || i >= n)
    tfg_interp_fail(I, TFG_ERR_NAME, &e->b->loc, "index %" PRId64 " is out of range for a list of %" PRId64, i, n);
  return obj.u.list.items[i < 0 ? i + n : i];
}

static tfg_value eval_call(tfg_interp *I, tfg_env *env, const tfg_ast *e) {
  tfg_value callee = tfg_interp_expr(I, env, e->a);
  if (callee.kind == TFG_V_FN) {
    /* Not bound directly to a name: the params take the fn's name. */
    tfg_interp_push_component(I, callee.u.fn->def->name, &e->loc);
    tfg_value v = call_fn(I, env, callee.u.fn, e);
    I->depth--;
    return v;
  }
  if (callee.kind == TFG_V_BUILTIN) {
    call_args a;
    eval_args(I, env, e, &a);
    tfg_value v = tfg_builtin_call(I, callee.u.builtin, e, a.pos, a.posloc, a.npos, a.kwn, a.kw, a.kwloc, a.nkw);
    /* No empty tensors (docs/language-notes.md): every tensor a program
     * makes comes from a builtin call or from a declaration (eval_type),
     * so one check here refuses each where it is made: zeros([0]),
     * tensor([]), arange(3, 3), a slice or reshape to nothing. */
    if (v.kind == TFG_V_TENSOR) {
      const tfg_node *n = &I->prog.graph->nodes[v.u.tensor];
      if (tfg_shape_numel(&n->shape) == 0) {
        tfg_strbuf b = {0};
        tfg_shape_format(&b, n->dtype, &n->shape);
        tfg_diag_error(I->diag, &e->loc, "%s gives %s, an empty tensor", callee.u.builtin->name, b.data);
        tfg_diag_help(I->diag, "tfg has no empty tensors: every dimension must be at least 1");
        tfg_strbuf_free(&b);
        tfg_interp_unwind(I, TFG_ERR_SHAPE);
      }
    }
    return v;
  }
  tfg_interp_fail(I, TFG_ERR_NAME, &e->a->loc, "`%.*s` is %s, not a function", (int)(e->a->loc.len > 40 ? 40 : e->a->loc.len),
                  e->a->loc.src->text + e->a->loc.off, tfg_vkind_name(callee.kind));
}

tfg_value tfg_interp_expr(tfg_interp *I, tfg_env *env, const tfg_ast *e) {
  switch (e->kind) {
  case TFG_AST_INT: return tfg_val_int(e->ival);
  case TFG_AST_FLOAT: return tfg_val_float(e->fval);
  case TFG_AST_STRING: return (tfg_value){.kind = TFG_V_STRING, .u.str = {e->str, e->len}};
  case TFG_AST_BOOL: return (tfg_value){.kind = TFG_V_BOOL, .u.b = e->ival != 0};
  case TFG_AST_NONE: return (tfg_value){.kind = TFG_V_NONE};
  case TFG_AST_NAME: {
    tfg_value *v = tfg_env_find(env, e->name);
    if (v) return *v;
    tfg_diag_error(I->diag, &e->loc, "unknown name '%s'", e->name);
    const char *s = tfg_interp_suggest(env, e->name);
    if (s) tfg_diag_help(I->diag, "did you mean '%s'?", s);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  case TFG_AST_DEVICE: {
    tfg_value v = {.kind = TFG_V_DEVICE};
    v.u.dev.loc = e->loc;
    if (e->ival) {
      if (e->op == TFG_AST_DEVICE_CPU) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "cpu:* is not a device; write cpu");
      v.u.dev.kind = TFG_DEV_GPU_ANY;
      return v;
    }
    v.u.dev.kind = e->op == TFG_AST_DEVICE_GPU ? TFG_DEV_GPU : TFG_DEV_CPU;
    if (e->a) {
      tfg_value i = tfg_interp_expr(I, env, e->a);
      v.u.dev.index = want_int(I, &i, &e->a->loc, "a device index");
      if (v.u.dev.index < 0)
        tfg_interp_fail(I, TFG_ERR_NAME, &e->a->loc, "a device index must not be negative, got %" PRId64, v.u.dev.index);
      /* A bound far past any machine's devices, so that every count built
       * from an index (one past the highest gpu:N) fits an int. */
      if (v.u.dev.index > TFG_MAX_DEVICE_INDEX)
        tfg_interp_fail(I, TFG_ERR_NAME, &e->a->loc, "a device index must be at most %d, got %" PRId64,
                        TFG_MAX_DEVICE_INDEX, v.u.dev.index);
    }
    return v;
  }
  case TFG_AST_LIST: {
    tfg_value *items = tfg_arena_alloc(&I->arena, sizeof *items * (e->list.n ? e->list.n : 1));
    int32_t n = 0;
    for (const tfg_ast *x = e->list.head; x; x = x->next) items[n++] = tfg_interp_expr(I, env, x);
    return (tfg_value){.kind = TFG_V_LIST, .u.list = {items, n}};
  }
  case TFG_AST_RANGE: {
    tfg_value lo = tfg_interp_expr(I, env, e->a), hi = tfg_interp_expr(I, env, e->b);
    return (tfg_value){.kind = TFG_V_RANGE,
                       .u.range = {want_int(I, &lo, &e->a->loc, "a range bound"),
                                   want_int(I, &hi, &e->b->loc, "a range bound")}};
  }
  case TFG_AST_UNARY: {
    tfg_value x = tfg_interp_expr(I, env, e->a);
    if (e->op == TFG_AST_OP_NOT) {
      if (x.kind != TFG_V_BOOL) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "'!' needs a bool, got %s", tfg_vkind_name(x.kind));
      x.u.b = !x.u.b;
      return x;
    }
    if (x.kind == TFG_V_INT) {
      if (x.u.i == INT64_MIN) tfg_interp_fail(I, TFG_ERR_ARITH, &e->loc, "integer overflow");
      return tfg_val_int(-x.u.i);
    }
    if (x.kind == TFG_V_FLOAT) return tfg_val_float(-x.u.f);
    if (x.kind == TFG_V_TENSOR) return tfg_val_tensor(tfg_interp_node(I, TFG_OP_NEG, &x.u.tensor, 1, NULL, &e->loc));
    tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "'-' needs a number or a tensor, got %s", tfg_vkind_name(x.kind));
  }
  case TFG_AST_BINARY: {
    tfg_value a = tfg_interp_expr(I, env, e->a);
    if (e->op == TFG_AST_OP_AND || e->op == TFG_AST_OP_OR) {
      bool l = truthy(I, &a, &e->a->loc);
      if (e->op == TFG_AST_OP_AND ? !l : l) return a; /* short circuit */
      tfg_value b = tfg_interp_expr(I, env, e->b);
      truthy(I, &b, &e->b->loc);
      return b;
    }
    tfg_value b = tfg_interp_expr(I, env, e->b);
    return arith(I, e->op, &a, &b, e);
  }
  case TFG_AST_MEMBER: return eval_member(I, env, e);
  case TFG_AST_INDEX: return eval_index(I, env, e);
  case TFG_AST_CALL: return eval_call(I, env, e);
  default: break;
  }
  tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "not an expression");
}

