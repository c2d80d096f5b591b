/* lang/interp.c: evaluates a program's AST into graph IR.
 *
 * Statements run once, in order; expressions compute build-time values,
 * and calls of ops add graph nodes. Three rules shape this file:
 *
 * - Names resolve lexically: a fn body sees its parameters, its own
 *   bindings and its module's top-level bindings (at call time). Blocks
 *   (if, for, with, scope) do not open scopes, as in Python.
 * - Param names are dotted paths (LANGUAGE.md section 3): scope names,
 *   then the name a call's result is bound to (or the fn's name when the
 *   result is not bound directly), then the param's own name; a path
 *   already taken gets _1, _2, ... in creation order.
 * - An error unwinds (longjmp) to the statement being run at top level.
 *   Everything built is in arenas, and the statement's partial effects
 *   (nodes, params, actions, bindings) are truncated away, so a failed
 *   statement leaves the session as it was.
 */
#include "ir/ops.h"
#include "lang/interp.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/grow.h"
#include "lang/interp_impl.h"
#include "lang/parse.h"

/* ---- values ------------------------------------------------------------------- */

tfg_value tfg_val_int(int64_t i) { return (tfg_value){.kind = TFG_V_INT, .u.i = i}; }
tfg_value tfg_val_float(double f) { return (tfg_value){.kind = TFG_V_FLOAT, .u.f = f}; }
tfg_value tfg_val_tensor(tfg_node_id id) { return (tfg_value){.kind = TFG_V_TENSOR, .u.tensor = id}; }

const char *tfg_vkind_name(tfg_vkind k) {
  switch (k) {
  case TFG_V_NONE: return "none";
  case TFG_V_BOOL: return "a bool";
  case TFG_V_INT: return "an integer";
  case TFG_V_FLOAT: return "a float";
  case TFG_V_STRING: return "a string";
  case TFG_V_LIST: return "a list";
  case TFG_V_RANGE: return "a range";
  case TFG_V_DTYPE: return "a dtype";
  case TFG_V_DEVICE: return "a device";
  case TFG_V_TENSOR: return "a tensor";
  case TFG_V_FN: return "a function";
  case TFG_V_BUILTIN: return "a builtin function";
  case TFG_V_MODULE: return "a module";
  case TFG_V_DATASET: return "a dataset";
  case TFG_V_COLUMN: return "a dataset column";
  case TFG_V_RECORD: return "a configuration";
  case TFG_V_INIT: return "an initializer";
  }
  return "a value";
}

const char *tfg_interp_strdup(tfg_interp *I, const char *s, size_t n) {
  return tfg_arena_strndup(&I->arena, s, n);
}

static void format_devspec(const tfg_devspec *d, tfg_strbuf *out) {
  switch (d->kind) {
  case TFG_DEV_NONE: tfg_strbuf_puts(out, "none"); break;
  case TFG_DEV_CPU: tfg_strbuf_printf(out, "cpu:%" PRId64, d->index); break;
  case TFG_DEV_GPU: tfg_strbuf_printf(out, "gpu:%" PRId64, d->index); break;
  case TFG_DEV_GPU_ANY: tfg_strbuf_puts(out, "gpu:*"); break;
  }
}

void tfg_value_format(const tfg_value *v, const tfg_graph *g, tfg_strbuf *out) {
  switch (v->kind) {
  case TFG_V_NONE: tfg_strbuf_puts(out, "none"); break;
  case TFG_V_BOOL: tfg_strbuf_puts(out, v->u.b ? "true" : "false"); break;
  case TFG_V_INT: tfg_strbuf_printf(out, "%" PRId64, v->u.i); break;
  case TFG_V_FLOAT: {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(buf, sizeof buf, "%.*g", prec, v->u.f);
      if (strtod(buf, NULL) == v->u.f) break;
    }
    tfg_strbuf_puts(out, buf);
    if (!strpbrk(buf, ".eni")) tfg_strbuf_puts(out, ".0");
    break;
  }
  case TFG_V_STRING: tfg_strbuf_printf(out, "\"%.*s\"", (int)v->u.str.len, v->u.str.s); break;
  case TFG_V_LIST:
    tfg_strbuf_putc(out, '[');
    for (int32_t i = 0; i < v->u.list.n; i++) {
      if (i) tfg_strbuf_puts(out, ", ");
      tfg_value_format(&v->u.list.items[i], g, out);
    }
    tfg_strbuf_putc(out, ']');
    break;
  case TFG_V_RANGE: tfg_strbuf_printf(out, "%" PRId64 "..%" PRId64, v->u.range.lo, v->u.range.hi); break;
  case TFG_V_DTYPE: tfg_strbuf_puts(out, tfg_dtype_name(v->u.dtype)); break;
  case TFG_V_DEVICE: format_devspec(&v->u.dev, out); break;
  case TFG_V_TENSOR: {
    const tfg_node *n = &g->nodes[v->u.tensor];
    tfg_strbuf_puts(out, "tensor ");
    tfg_shape_format(out, n->dtype, &n->shape);
    break;
  }
  case TFG_V_FN: tfg_strbuf_printf(out, "fn %s", v->u.fn->def->name); break;
  case TFG_V_BUILTIN: tfg_strbuf_printf(out, "builtin %s", v->u.builtin->name); break;
  case TFG_V_MODULE: tfg_strbuf_printf(out, "module %s", v->u.module->name); break;
  case TFG_V_DATASET:
    tfg_strbuf_printf(out, "dataset \"%s\"%s", v->u.dataset.ds->path,
                      v->u.dataset.whole ? "" : v->u.dataset.split == TFG_SPLIT_TEST ? " (test)" : " (train)");
    break;
  case TFG_V_COLUMN: {
    const tfg_dataset *ds = v->u.column.ds->ds;
    tfg_shape rs = tfg_data_row_shape(ds, v->u.column.col);
    tfg_strbuf_printf(out, "column %s: %lld rows of %s[", tfg_data_column_name(ds, v->u.column.col),
                      (long long)tfg_data_rows(ds, v->u.column.split),
                      tfg_data_type_name(tfg_data_column_type(ds, v->u.column.col)));
    for (int i = 0; i < rs.rank; i++) tfg_strbuf_printf(out, "%s%lld", i ? "," : "", (long long)rs.dim[i]);
    tfg_strbuf_putc(out, ']');
    break;
  }
  case TFG_V_RECORD: {
    const tfg_record *r = v->u.record;
    tfg_strbuf_printf(out, "%s(", r->name);
    for (int i = 0; i < r->nargs; i++) {
      tfg_strbuf_printf(out, "%s%s = ", i ? ", " : "", r->arg_names[i]);
      tfg_value_format(&r->args[i], g, out);
    }
    tfg_strbuf_putc(out, ')');
    break;
  }
  case TFG_V_INIT: tfg_strbuf_puts(out, "initializer"); break;
  }
}

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

/* ---- scopes ------------------------------------------------------------------- */

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static void env_init(tfg_env *e, tfg_env *parent, int32_t nheads) {
  memset(e, 0, sizeof *e);
  e->parent = parent;
  e->nheads = nheads;
  e->heads = malloc(sizeof *e->heads * (size_t)nheads);
  TFG_ASSERT(e->heads != NULL);
  for (int32_t i = 0; i < nheads; i++) e->heads[i] = -1;
}

static void env_free(tfg_env *e) {
  free(e->entries);
  free(e->heads);
  memset(e, 0, sizeof *e);
}

/* Binds name to v. A name bound since the scope's floor is overwritten
 * in place (see tfg_env), so rebinding in a loop takes no memory. */
static void env_bind(tfg_env *e, const char *name, tfg_value v) {
  uint32_t b = hash_name(name) % (uint32_t)e->nheads;
  for (int32_t i = e->heads[b]; i >= e->floor; i = e->entries[i].prev)
    if (strcmp(e->entries[i].name, name) == 0) {
      e->entries[i].value = v;
      return;
    }
  TFG_GROW(e->entries, e->n, e->cap, 16);
  e->entries[e->n] = (env_entry){name, v, e->heads[b]};
  e->heads[b] = e->n++;
}

/* Undoes every binding made since the scope had n entries. */
static void env_truncate(tfg_env *e, int32_t n) {
  while (e->n > n) {
    env_entry *x = &e->entries[--e->n];
    e->heads[hash_name(x->name) % (uint32_t)e->nheads] = x->prev;
  }
  if (e->floor > n) e->floor = n;
}

void tfg_interp_bind_root(tfg_interp *I, const char *name, tfg_value v) { env_bind(&I->root, name, v); }

static tfg_value *env_find_local(tfg_env *e, const char *name) {
  /* Chains hold every name of the bucket; compare until ours. */
  for (int32_t i = e->heads[hash_name(name) % (uint32_t)e->nheads]; i >= 0; i = e->entries[i].prev)
    if (strcmp(e->entries[i].name, name) == 0) return &e->entries[i].value;
  return NULL;
}

static tfg_value *env_find(tfg_env *e, const char *name) {
  for (; e; e = e->parent) {
    tfg_value *v = env_find_local(e, name);
    if (v) return v;
  }
  return NULL;
}

/* Levenshtein distance, capped: for "did you mean" suggestions. */
static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 99;
  int row[41];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* The visible name closest to name, if close enough to be a typo. */
static const char *suggest(tfg_env *e, const char *name) {
  const char *best = NULL;
  int bestd = (int)strlen(name) / 3 + 1;
  if (bestd > 3) bestd = 3;
  for (; e; e = e->parent)
    for (int32_t i = e->n - 1; i >= 0; i--) {
      int d = edit_distance(name, e->entries[i].name);
      if (d < bestd || (d == bestd && !best)) {
        if (d <= bestd && d > 0) {
          best = e->entries[i].name;
          bestd = d;
        }
      }
    }
  return best;
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

/* ---- paths of params --------------------------------------------------------------- */

/* The taken paths are kept in order (so a failed statement can drop its
 * own) and indexed by a hash table: a program with 100,000 params names
 * them in linear time. */
static uint32_t hash_name(const char *s);

static bool is_taken(tfg_interp *I, const char *p) {
  if (!I->taken_slots) return false;
  uint32_t mask = (uint32_t)I->taken_slots - 1;
  for (uint32_t h = hash_name(p) & mask;; h = (h + 1) & mask) {
    int32_t e = I->taken_index[h];
    if (e == 0) return false;
    if (strcmp(I->taken[e - 1], p) == 0) return true;
  }
}

static void index_taken(tfg_interp *I, int32_t i) {
  uint32_t mask = (uint32_t)I->taken_slots - 1;
  uint32_t h = hash_name(I->taken[i]) & mask;
  while (I->taken_index[h]) h = (h + 1) & mask;
  I->taken_index[h] = i + 1;
}

/* Rebuilds the index for the first ntaken entries (after growth or a
 * rollback). */
static void reindex_taken(tfg_interp *I) {
  int32_t slots = 64;
  while (slots < 2 * (I->ntaken + 1)) slots *= 2;
  free(I->taken_index);
  I->taken_index = calloc((size_t)slots, sizeof *I->taken_index);
  TFG_ASSERT(I->taken_index != NULL);
  I->taken_slots = slots;
  for (int32_t i = 0; i < I->ntaken; i++) index_taken(I, i);
}

static void take(tfg_interp *I, const char *p) {
  TFG_GROW(I->taken, I->ntaken, I->captaken, 8);
  I->taken[I->ntaken++] = (char *)p;
  if (2 * I->ntaken > I->taken_slots) reindex_taken(I);
  else index_taken(I, I->ntaken - 1);
}

/* The suffix hint slot of a path (open addressing; grows at half full). */
static int32_t *suffix_slot(tfg_interp *I, const char *path) {
  if (2 * (I->nsuffix + 1) > I->suffix_slots) {
    int32_t old = I->suffix_slots;
    const char **ok = I->suffix_key;
    int32_t *on = I->suffix_next;
    I->suffix_slots = old ? old * 2 : 64;
    I->suffix_key = calloc((size_t)I->suffix_slots, sizeof *I->suffix_key);
    I->suffix_next = calloc((size_t)I->suffix_slots, sizeof *I->suffix_next);
    TFG_ASSERT(I->suffix_key && I->suffix_next);
    for (int32_t i = 0; i < old; i++)
      if (ok[i]) {
        uint32_t m = (uint32_t)I->suffix_slots - 1, h = hash_name(ok[i]) & m;
        while (I->suffix_key[h]) h = (h + 1) & m;
        I->suffix_key[h] = ok[i];
        I->suffix_next[h] = on[i];
      }
    free(ok);
    free(on);
  }
  uint32_t m = (uint32_t)I->suffix_slots - 1, h = hash_name(path) & m;
  while (I->suffix_key[h] && strcmp(I->suffix_key[h], path) != 0) h = (h + 1) & m;
  if (!I->suffix_key[h]) {
    I->suffix_key[h] = tfg_interp_strdup(I, path, strlen(path)); /* path may be scratch text */
    I->suffix_next[h] = 1;
    I->nsuffix++;
  }
  return &I->suffix_next[h];
}

static void clear_suffixes(tfg_interp *I) {
  if (I->suffix_slots) memset(I->suffix_key, 0, sizeof *I->suffix_key * (size_t)I->suffix_slots);
  I->nsuffix = 0;
}

/* The first of base, base_1, base_2, ... (base a full path) not taken:
 * base itself, or a copy in the session arena. */
static const char *first_free(tfg_interp *I, const char *base) {
  if (!is_taken(I, base)) return base;
  int32_t *next = suffix_slot(I, base);
  tfg_strbuf b = {0};
  for (;; (*next)++) {
    tfg_strbuf_clear(&b);
    tfg_strbuf_printf(&b, "%s_%d", base, *next);
    if (!is_taken(I, b.data)) break;
  }
  const char *got = tfg_interp_strdup(I, b.data, b.len);
  tfg_strbuf_free(&b);
  return got;
}

/* "a.b.c" from the naming path plus last, in I->scratch (valid until
 * its next use): every fn call joins a path, and most are never kept. */
static const char *join_path(tfg_interp *I, const char *last) {
  tfg_strbuf *b = &I->scratch;
  tfg_strbuf_clear(b);
  for (int i = 0; i < I->depth; i++) {
    tfg_strbuf_puts(b, I->path[i]);
    tfg_strbuf_putc(b, '.');
  }
  tfg_strbuf_puts(b, last);
  return b->data ? b->data : "";
}

/* The first of c, c_1, c_2, ... not yet used at this point of the path. */
static const char *unique_component(tfg_interp *I, const char *c) {
  const char *full = join_path(I, c);
  const char *got = first_free(I, full);
  if (got == full) return c;
  /* got is full with a suffix: the component is c with the same suffix. */
  size_t prefix = strlen(full) - strlen(c);
  return got + prefix;
}

static void push_component(tfg_interp *I, const char *c, const tfg_loc *loc) {
  if (I->depth == (int)(sizeof I->path / sizeof I->path[0]))
    tfg_interp_fail(I, TFG_ERR_LIMIT, loc, "calls and scopes are nested too deeply");
  const char *unique = unique_component(I, c); /* reads the path as it is now */
  I->path[I->depth++] = unique;
}

/* Records a param path and every prefix of it as taken. */
static void take_path(tfg_interp *I, const char *full) {
  for (const char *p = full; (p = strchr(p, '.')); p++) {
    const char *prefix = tfg_interp_strdup(I, full, (size_t)(p - full));
    if (!is_taken(I, prefix)) take(I, prefix);
  }
  take(I, full);
}

/* ---- execution ------------------------------------------------------------------ */

typedef struct flow {
  bool returned;
  tfg_value value;
} flow;

static flow exec_block(tfg_interp *I, tfg_env *env, const tfg_ast *block);
static flow exec_stmt(tfg_interp *I, tfg_env *env, const tfg_ast *s);
static tfg_value call_fn(tfg_interp *I, tfg_env *env, const tfg_fn *fn, const tfg_ast *call);

static void push_action(tfg_interp *I, tfg_action a) {
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
    tfg_interp_fail(I, TFG_ERR_NAME, loc, "%s must be an integer, got %g", what, v->u.f);
  tfg_interp_fail(I, TFG_ERR_NAME, loc, "%s must be an integer, got %s", what, tfg_vkind_name(v->kind));
}

/* dtype and shape of a `DTYPE[dims]` type. */
static void eval_type(tfg_interp *I, tfg_env *env, const tfg_ast *t, tfg_dtype *dt, tfg_shape *shape) {
  tfg_value *d = env_find(env, t->name);
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
  const char *full = join_path(I, s->name);
  full = first_free(I, full);
  if (full == I->scratch.data) full = tfg_interp_strdup(I, full, I->scratch.len);
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
  take_path(I, full);
  push_param(I, id);
  env_bind(env, s->name, tfg_val_tensor(id));
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
  env_bind(env, s->name, tfg_val_tensor(id));
}

/* Loads a module (a stdlib name or a file path) once and returns it. */
static tfg_module *load_module(tfg_interp *I, const tfg_ast *s);

static void exec_import(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_module *m = load_module(I, s);
  const char *as = s->name ? s->name : m->name;
  env_bind(env, as, (tfg_value){.kind = TFG_V_MODULE, .u.module = m});
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
  push_action(I, a);
}

/* Settings a train block may hold (LANGUAGE.md section 6). */
static const char *const train_settings[] = {
    "optimizer", "steps", "epochs", "strategy", "log_every", "metrics",
    "eval_every", "checkpoint", "checkpoint_every", "seed",
};

/* The most steps a train may take, written as steps or as epochs times
 * the batches of an epoch; each cadence (log_every, eval_every,
 * checkpoint_every) is bounded by it too. 2^53: every count up to it is
 * exact in a double (Adam's bias correction raises b1 to the step) and
 * nothing the runtime derives from a step overflows int64; 2^53 steps
 * at a million a second would take 285 years. */
#define TRAIN_MAX_STEPS (INT64_C(1) << 53)

/* The setting called name of train action a, or NULL. */
static const tfg_setting *setting_of(const tfg_action *a, const char *name) {
  for (int i = 0; i < a->nsettings; i++)
    if (strcmp(a->settings[i].name, name) == 0) return &a->settings[i];
  return NULL;
}

/* The params of p that tensors x and y both read (x == y: the params x
 * reads): the first in creation order, or -1; *count gets how many.
 * Walks inputs down from the larger id (ids are topological). */
static tfg_node_id params_read(const tfg_program *p, tfg_node_id x, tfg_node_id y, int *count) {
  const tfg_graph *g = p->graph;
  int32_t top = x > y ? x : y;
  uint8_t *mark = calloc((size_t)top + 1, 1);
  TFG_ASSERT(mark != NULL);
  mark[x] |= 1;
  mark[y] |= 2;
  for (int32_t i = top; i >= 0; i--)
    for (int k = 0; mark[i] && k < g->nodes[i].ninputs; k++) mark[g->nodes[i].inputs[k]] |= mark[i];
  tfg_node_id first = -1;
  *count = 0;
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i] <= top && mark[p->params[i]] == 3) {
      if (first < 0) first = p->params[i];
      (*count)++;
    }
  free(mark);
  return first;
}

/* optimizer or strategy: a call of one of its constructors. A bare
 * constructor is its call without arguments (strategy = single, as
 * LANGUAGE.md section 6 writes it; optimizer = adam), so one that needs
 * an argument says which (optimizer = sgd: lr), located at the name. */
static void check_config(tfg_interp *I, tfg_setting *st, const tfg_ast *e) {
  static const char *const kinds[2][3] = {{"sgd", "adam", "adamw"}, {"single", "mirrored", "parameter_server"}};
  bool opt = strcmp(st->name, "optimizer") == 0;
  tfg_value *v = &st->value;
  const char *got = v->kind == TFG_V_RECORD ? v->u.record->name : v->kind == TFG_V_BUILTIN ? v->u.builtin->name : NULL;
  bool ok = false;
  for (int i = 0; got && i < 3; i++) ok |= strcmp(got, kinds[!opt][i]) == 0;
  if (!ok)
    tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "%s must be %s, got %s%s", st->name,
                    opt ? "sgd(...), adam(...) or adamw(...)" : "single(), mirrored(...) or parameter_server(...)",
                    got ? got : tfg_vkind_name(v->kind), v->kind == TFG_V_RECORD ? "(...)" : "");
  if (v->kind == TFG_V_BUILTIN) *v = tfg_builtin_call(I, v->u.builtin, e, NULL, NULL, 0, NULL, NULL, NULL, 0);
}

/* epochs = n, at `at`: the first input fed from a dataset sets the batch
 * and the whole batches of an epoch (as runtime/train.c batches), so the
 * steps n epochs make are known where they are written. (The loss was
 * evaluated before its settings: the inputs it reads exist by now.) */
static void check_epochs(tfg_interp *I, int64_t n, const tfg_loc *at) {
  const tfg_feed *f = NULL;
  for (int i = 0; i < I->prog.nfeeds && !f; i++)
    if (I->prog.feeds[i].ds) f = &I->prog.feeds[i];
  if (!f) {
    tfg_diag_error(I->diag, at, "epochs need an input fed from a dataset");
    tfg_diag_help(I->diag, "give steps = N instead");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  const tfg_node *in = &I->prog.graph->nodes[f->node];
  int64_t rows = tfg_data_rows(f->ds, f->split), batch = in->shape.rank ? in->shape.dim[0] : 0;
  int64_t per = batch > 0 ? rows / batch : 0;
  if (per == 0)
    tfg_interp_fail(I, TFG_ERR_DATA, at, "an epoch of input %s has no whole batch: %" PRId64 " rows, a batch of %" PRId64,
                    in->name, rows, batch);
  if (n > TRAIN_MAX_STEPS / per) {
    tfg_diag_error(I->diag, at, "%" PRId64 " epochs of %" PRId64 " batches are %.4g steps, more than the 2^53 (%" PRId64
                   ") a train may take", n, per, (double)n * (double)per, TRAIN_MAX_STEPS);
    tfg_diag_note(I->diag, &in->loc, "an epoch: the %" PRId64 " rows input %s reads, in whole batches of %" PRId64, rows,
                  in->name, batch);
    tfg_interp_unwind(I, TFG_ERR_LIMIT);
  }
}

/* A count: steps, epochs, a cadence or the seed. An integer (a float
 * with a whole value too, as wherever tfg needs an integer), stored back
 * as one; a count of steps or epochs is at least 1 and at most
 * TRAIN_MAX_STEPS, the seed at least 0. */
static void check_count(tfg_interp *I, tfg_setting *st, const tfg_loc *at) {
  tfg_value *v = &st->value;
  const char *n = st->name;
  bool seed = strcmp(n, "seed") == 0, epochs = strcmp(n, "epochs") == 0;
  if (v->kind == TFG_V_FLOAT && v->u.f == floor(v->u.f) && fabs(v->u.f) < 9e18) *v = tfg_val_int((int64_t)v->u.f);
  if (v->kind == TFG_V_FLOAT) tfg_interp_fail(I, TFG_ERR_NAME, at, "%s must be an integer, got %g", n, v->u.f);
  if (v->kind != TFG_V_INT)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "%s must be an integer (%s), got %s", n,
                    seed ? "a random seed" : epochs ? "a number of epochs" : "a number of steps", tfg_vkind_name(v->kind));
  int64_t x = v->u.i;
  if (seed ? x < 0 : x < 1)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "%s must be a %s integer, got %" PRId64, n, seed ? "non-negative" : "positive", x);
  if (!seed && x > TRAIN_MAX_STEPS)
    tfg_interp_fail(I, TFG_ERR_LIMIT, at, "%s must be at most 2^53 (%" PRId64 "), got %" PRId64, n, TRAIN_MAX_STEPS, x);
  if (epochs) check_epochs(I, x, at);
}

/* The folder of a file path ("." for a bare name); the caller frees it. */
static char *folder_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  TFG_ASSERT(dir != NULL);
  return dir;
}

/* What names the file path, the same for two spellings of one file: the
 * real path of its folder, then its name. The caller frees it. */
static char *file_key(const char *path) {
  char *dir = folder_of(path), *real = realpath(dir, NULL);
  const char *slash = strrchr(path, '/');
  tfg_strbuf b = {0};
  tfg_strbuf_printf(&b, "%s/%s", real ? real : dir, slash ? slash + 1 : path);
  free(real);
  free(dir);
  return tfg_strbuf_take(&b);
}

/* Refuses a checkpoint a save could not write, where it is written: so
 * before the first step, and in `tfg check`, not after the training. A
 * save writes PATH.tmp.PID beside PATH and renames it over PATH
 * (runtime/ckpt.c): the folder must exist and be writable; an existing
 * PATH must be a file we can read (a run resumes from it). A missing
 * folder is refused, not created, as torch.save refuses it: a typo in
 * the folder should not scatter new folders. */
static void check_ckpt_path(tfg_interp *I, const char *path, const tfg_loc *at) {
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode))
      tfg_interp_fail(I, TFG_ERR_DATA, at, "checkpoint '%s' is a folder: give a file name in it", path);
    if (!S_ISREG(sb.st_mode)) tfg_interp_fail(I, TFG_ERR_DATA, at, "checkpoint '%s' is not a regular file", path);
    if (access(path, R_OK) != 0)
      tfg_interp_fail(I, TFG_ERR_DATA, at, "checkpoint '%s' cannot be read to resume from it: %s", path, strerror(errno));
  }
  char *dir = folder_of(path);
  int err = stat(dir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : access(dir, W_OK | X_OK) != 0 ? errno : 0;
  if (err == ENOENT) {
    tfg_diag_error(I->diag, at, "the folder '%s' of checkpoint '%s' does not exist", dir, path);
    tfg_diag_help(I->diag, "create it first (mkdir -p %s): tfg does not create folders, as torch.save does not", dir);
  } else if (err == ENOTDIR) {
    tfg_diag_error(I->diag, at, "checkpoint '%s' cannot be written: '%s' is not a folder", path, dir);
  } else if (err) {
    tfg_diag_error(I->diag, at, "checkpoint '%s' cannot be written in folder '%s': %s", path, dir, strerror(err));
  }
  free(dir);
  if (err) tfg_interp_unwind(I, TFG_ERR_DATA);
}

/* checkpoint: a file name, from the program's folder like its data
 * files, that a save can write and no other train of the program writes
 * (the later job would resume from the earlier's file and overwrite it). */
static void check_checkpoint(tfg_interp *I, tfg_setting *st, const tfg_loc *at) {
  const tfg_value *v = &st->value;
  if (v->kind != TFG_V_STRING)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "checkpoint must be a file name (a string), got %s", tfg_vkind_name(v->kind));
  if (v->u.str.len == 0)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "checkpoint must not be empty: give a file name, like \"out/model.safetensors\"");
  const char *path = tfg_interp_path(I, tfg_interp_strdup(I, v->u.str.s, v->u.str.len));
  check_ckpt_path(I, path, at);
  char *key = file_key(path);
  for (int j = 0; j < I->prog.nactions; j++) {
    const tfg_setting *o = I->prog.actions[j].kind == TFG_ACTION_TRAIN ? setting_of(&I->prog.actions[j], "checkpoint") : NULL;
    if (!o) continue;
    char *other = file_key(o->value.u.str.s);
    bool same = strcmp(key, other) == 0;
    free(other);
    if (!same) continue;
    free(key);
    tfg_diag_error(I->diag, at, "checkpoint '%s' is another train's checkpoint too: each would overwrite the other's", path);
    tfg_diag_note(I->diag, &o->loc, "the other train's checkpoint");
    tfg_diag_help(I->diag, "give each train a checkpoint file of its own");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  free(key);
  st->value.u.str.s = path;
  st->value.u.str.len = (uint32_t)strlen(path);
}

/* Checks setting st, whose value e evaluated to, where it is written, and
 * leaves it in the form the later stages read: a configuration record, an
 * integer count, a checkpoint path from the program's folder. */
static void check_setting(tfg_interp *I, tfg_setting *st, const tfg_ast *e) {
  const tfg_value *v = &st->value;
  const char *n = st->name;
  if (strcmp(n, "optimizer") == 0 || strcmp(n, "strategy") == 0) {
    check_config(I, st, e);
  } else if (strcmp(n, "checkpoint") == 0) {
    check_checkpoint(I, st, &e->loc);
  } else if (strcmp(n, "metrics") == 0) {
    bool ok = v->kind == TFG_V_LIST;
    for (int32_t i = 0; ok && i < v->u.list.n; i++) {
      const tfg_value *m = &v->u.list.items[i];
      ok = m->kind == TFG_V_TENSOR && I->prog.graph->nodes[m->u.tensor].shape.rank == 0 &&
           tfg_dtype_is_float(I->prog.graph->nodes[m->u.tensor].dtype);
    }
    if (!ok)
      tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "metrics must be a list of float scalars, like [accuracy(logits, y)]");
  } else { /* steps epochs log_every eval_every checkpoint_every seed */
    check_count(I, st, &e->loc);
  }
}

/* Whether train action a runs alone, not in its group: a parameter_server
 * job has sessions of its own (cli/main.c runs it by itself). */
static bool runs_alone(const tfg_action *a) {
  const tfg_setting *s = setting_of(a, "strategy");
  return s && strcmp(s->value.u.record->name, "parameter_server") == 0;
}

/* The jobs of one group (consecutive train actions, but for a job that
 * runs alone) train at the same time, so two may not share a param
 * (LANGUAGE.md section 6): both would update it in one step. a is the
 * new job, not yet among the program's actions. */
static void check_group(tfg_interp *I, const tfg_action *a) {
  for (int j = I->prog.nactions - 1; j >= 0 && !runs_alone(a); j--) {
    const tfg_action *b = &I->prog.actions[j];
    if (b->kind != TFG_ACTION_TRAIN || runs_alone(b)) return;
    int n;
    tfg_node_id w = params_read(&I->prog, a->loss, b->loss, &n);
    if (w < 0) continue;
    tfg_loc here = a->loc, there = b->loc;
    here.len = there.len = 5; /* the keyword */
    if (n > 1)
      tfg_diag_error(I->diag, &here, "param '%s' (and %d more) would be trained by two jobs at once",
                     I->prog.graph->nodes[w].name, n - 1);
    else
      tfg_diag_error(I->diag, &here, "param '%s' would be trained by two jobs at once", I->prog.graph->nodes[w].name);
    tfg_diag_note(I->diag, &there, "the other job: consecutive train statements run together, and may not share a param");
    tfg_diag_help(I->diag, "give each job params of its own, or put a print between them to train one after the other");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
}

static void exec_train(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_value loss = tfg_interp_expr(I, env, s->a);
  if (loss.kind != TFG_V_TENSOR)
    tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "the loss must be a tensor, got %s", tfg_vkind_name(loss.kind));
  const tfg_node *ln = &I->prog.graph->nodes[loss.u.tensor];
  if (ln->shape.rank != 0 || !tfg_dtype_is_float(ln->dtype)) {
    tfg_strbuf b = {0};
    tfg_shape_format(&b, ln->dtype, &ln->shape);
    tfg_diag_error(I->diag, &s->a->loc, "the loss must be a float scalar, got %s", b.data);
    tfg_strbuf_free(&b);
    tfg_diag_help(I->diag, "reduce it first: mean(loss)");
    tfg_interp_unwind(I, TFG_ERR_SHAPE);
  }
  int nread;
  if (params_read(&I->prog, loss.u.tensor, loss.u.tensor, &nread) < 0)
    tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "the loss does not depend on any param: there is nothing to train");
  tfg_action a = {.kind = TFG_ACTION_TRAIN, .loc = s->loc, .loss = loss.u.tensor};
  a.settings = tfg_arena_alloc(&I->arena, sizeof *a.settings * (s->list.n ? s->list.n : 1));
  for (const tfg_ast *k = s->list.head; k; k = k->next) {
    bool known = false;
    for (size_t i = 0; i < sizeof train_settings / sizeof train_settings[0]; i++)
      known |= strcmp(k->name, train_settings[i]) == 0;
    if (!known) {
      tfg_loc l = k->loc;
      l.len = (uint32_t)strlen(k->name);
      tfg_diag_error(I->diag, &l, "unknown train setting '%s'", k->name);
      const char *best = NULL;
      int bestd = 3;
      for (size_t i = 0; i < sizeof train_settings / sizeof train_settings[0]; i++) {
        int d = edit_distance(k->name, train_settings[i]);
        if (d < bestd) { bestd = d; best = train_settings[i]; }
      }
      if (best) tfg_diag_help(I->diag, "did you mean '%s'?", best);
      else tfg_diag_help(I->diag, "the settings are optimizer, steps, epochs, strategy, log_every, metrics, "
                                  "eval_every, checkpoint, checkpoint_every and seed");
      tfg_interp_unwind(I, TFG_ERR_NAME);
    }
    for (int j = 0; j < a.nsettings; j++)
      if (strcmp(a.settings[j].name, k->name) == 0)
        tfg_interp_fail(I, TFG_ERR_NAME, &k->loc, "setting '%s' is given twice", k->name);
    tfg_setting *st = &a.settings[a.nsettings++];
    st->name = k->name;
    st->loc = k->loc;
    st->value = tfg_interp_expr(I, env, k->a);
    check_setting(I, st, k->a);
  }
  bool has_opt = false, has_len = false;
  for (int j = 0; j < a.nsettings; j++) {
    has_opt |= strcmp(a.settings[j].name, "optimizer") == 0;
    if (strcmp(a.settings[j].name, "steps") == 0 || strcmp(a.settings[j].name, "epochs") == 0) {
      if (has_len) tfg_interp_fail(I, TFG_ERR_NAME, &a.settings[j].loc, "give steps or epochs, not both");
      has_len = true;
    }
  }
  if (!has_opt || !has_len) {
    tfg_loc l = s->loc;
    l.len = 5; /* the keyword */
    tfg_diag_error(I->diag, &l, "a train block needs %s", !has_opt ? "an optimizer" : "steps or epochs");
    tfg_diag_help(I->diag, "for example: train loss { optimizer = adam(lr = 1e-3); steps = 500 }");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  check_group(I, &a);
  push_action(I, a);
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
  env_bind(env, s->name, v);
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
          push_component(I, s->name, &s->loc);
          v = call_fn(I, env, callee.u.fn, s->a);
          I->depth--;
          env_bind(env, s->name, v);
          return f;
        }
      }
      v = tfg_interp_expr(I, env, s->a);
    }
    env_bind(env, s->name, v);
    return f;
  }
  case TFG_AST_PARAM: exec_param(I, env, s); return f;
  case TFG_AST_INPUT: exec_input(I, env, s); return f;
  case TFG_AST_DATA: {
    tfg_value v = tfg_interp_expr(I, env, s->a);
    if (v.kind != TFG_V_DATASET)
      tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "data needs a dataset: csv(...), npy(...) or idx(...); got %s",
                      tfg_vkind_name(v.kind));
    env_bind(env, s->name, v);
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
    env_bind(env, s->name, (tfg_value){.kind = TFG_V_FN, .u.fn = fn});
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
    push_component(I, s->name, &s->loc);
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
  case TFG_AST_TRAIN: exec_train(I, env, s); return f;
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
        int d = edit_distance(kwnames[k], out->names[i]);
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

/* Ends the run of notes for one call site: says how many were left out. */
static void traceback_flush(tfg_interp *I) {
  if (I->tb_same > TRACEBACK_SAME)
    tfg_diag_note(I->diag, NULL, "... %" PRId64 " more call%s of %s from the same place", I->tb_same - TRACEBACK_SAME,
                  I->tb_same - TRACEBACK_SAME == 1 ? "" : "s", I->tb_name);
  I->tb_call = NULL;
  I->tb_same = 0;
}

static void traceback_note(tfg_interp *I, const tfg_ast *call, const char *fname) {
  if (call != I->tb_call) {
    traceback_flush(I);
    I->tb_call = call;
    I->tb_name = fname;
  }
  if (++I->tb_same <= TRACEBACK_SAME) tfg_diag_note(I->diag, &call->loc, "in this call of %s", fname);
}

/* Binds a call's parameters in the fn's fresh scope, evaluating defaults
 * (at call time, in the fn's own module), then runs the body; errors are
 * caught here (see guarded_stmt) so the caller can add its call to the
 * traceback and restore what it changed. */
static tfg_status guarded_body(tfg_interp *I, tfg_env *local, const tfg_fn *fn, const tfg_args *b, flow *out) {
  jmp_buf here, *outer = I->fail;
  I->fail = &here;
  tfg_status st = TFG_OK;
  if (setjmp(here) == 0) {
    int i = 0;
    for (const tfg_ast *p = fn->def->list.head; p; p = p->next, i++)
      env_bind(local, p->name, b->given[i] ? b->v[i] : tfg_interp_expr(I, fn->globals, p->a));
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
  if (!local->heads) env_init(local, NULL, 16);
  env_truncate(local, 0);
  local->parent = fn->globals;
  const char *saved_dir = I->dir;
  I->dir = fn->dir;
  I->call_depth++;
  flow f = {0};
  tfg_status st = guarded_body(I, local, fn, &b, &f);
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
      if (q == 0) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "modulo by zero");
      if (q == -1) return tfg_val_int(0);
      r = p % q;
      if (r != 0 && ((r < 0) != (q < 0))) r += q; /* Python: the sign of the divisor */
      break;
    case TFG_AST_OP_DIV:
      if (q == 0) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "division by zero");
      return tfg_val_float((double)p / (double)q); /* true division, as in Python 3 */
    default: r = 0; break;
    }
    if (over) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "integer overflow in %" PRId64 " %s %" PRId64, p, tfg_ast_op_str(op), q);
    return tfg_val_int(r);
  }
  switch (op) {
  case TFG_AST_OP_ADD: return tfg_val_float(x + y);
  case TFG_AST_OP_SUB: return tfg_val_float(x - y);
  case TFG_AST_OP_MUL: return tfg_val_float(x * y);
  case TFG_AST_OP_DIV:
    if (y == 0) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "division by zero");
    return tfg_val_float(x / y);
  case TFG_AST_OP_MOD:
    if (y == 0) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "modulo by zero");
    return tfg_val_float(x - y * floor(x / y));
  default: break;
  }
  tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "unsupported operator");
}

static tfg_value eval_member(tfg_interp *I, tfg_env *env, const tfg_ast *e) {
  tfg_value obj = tfg_interp_expr(I, env, e->a);
  tfg_loc at = e->loc;
  if (obj.kind == TFG_V_MODULE) {
    tfg_value *v = env_find_local(&obj.u.module->env, e->name);
    if (v) return *v;
    tfg_diag_error(I->diag, &at, "module %s has no member '%s'", obj.u.module->name, e->name);
    const char *s = suggest(&obj.u.module->env, e->name);
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
    push_component(I, callee.u.fn->def->name, &e->loc);
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
    tfg_value *v = env_find(env, e->name);
    if (v) return *v;
    tfg_diag_error(I->diag, &e->loc, "unknown name '%s'", e->name);
    const char *s = suggest(env, e->name);
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
      if (x.u.i == INT64_MIN) tfg_interp_fail(I, TFG_ERR_NAME, &e->loc, "integer overflow");
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

/* ---- modules -------------------------------------------------------------------------- */

static const char *dirname_of(tfg_interp *I, const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? tfg_interp_strdup(I, path, (size_t)(slash - path)) : ".";
}

const char *tfg_interp_path(tfg_interp *I, const char *path) {
  if (path[0] == '/' || !I->dir || strcmp(I->dir, ".") == 0) return path;
  tfg_strbuf b = {0};
  tfg_strbuf_printf(&b, "%s/%s", I->dir, path);
  const char *p = tfg_interp_strdup(I, b.data, b.len);
  tfg_strbuf_free(&b);
  return p;
}

/* Whether something is at path p, and its identity. stat, not fopen:
 * opening a FIFO would block (what it is, tfg_diag_load_file checks). */
static bool file_exists(const char *p, tfg_file_id *id) {
  struct stat st;
  if (stat(p, &st) != 0) return false;
  if (id) *id = (tfg_file_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino};
  return true;
}

/* A module's name from its file: the base name without ".tfg". */
static const char *module_name(tfg_interp *I, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 4 && strcmp(base + n - 4, ".tfg") == 0) n -= 4;
  return tfg_interp_strdup(I, base, n);
}

/* An import of a module still being evaluated: reports the cycle, from
 * that module (modules[from], or the main program when from is -1)
 * through the imports in progress back to it. */
static _Noreturn void import_cycle(tfg_interp *I, const tfg_ast *s, int from) {
  tfg_strbuf chain = {0};
  const char *first = from < 0 ? module_name(I, I->main.path) : I->modules[from]->name;
  tfg_strbuf_puts(&chain, first);
  for (int i = from < 0 ? 0 : from + 1; i < I->nmodules; i++)
    if (I->modules[i]->loading) tfg_strbuf_printf(&chain, " -> %s", I->modules[i]->name);
  tfg_diag_error(I->diag, &s->loc, "import cycle: %s -> %s", chain.data, first);
  if (chain.len == strlen(first)) tfg_diag_help(I->diag, "a program may not import itself");
  else tfg_diag_help(I->diag, "modules may not import each other; move what both need into a third module");
  tfg_strbuf_free(&chain);
  tfg_interp_unwind(I, TFG_ERR_NAME);
}

static tfg_status eval_module(tfg_interp *I, tfg_module *m, const tfg_source *src, const tfg_ast *prog);

static tfg_module *load_module(tfg_interp *I, const tfg_ast *s) {
  const char *path = NULL, *display = NULL;
  const char *name;
  tfg_file_id id = {0};
  if (s->op) { /* a file, relative to the importing file */
    path = tfg_interp_path(I, s->str);
    name = module_name(I, s->str);
    if (!file_exists(path, &id))
      tfg_interp_fail(I, TFG_ERR_DATA, &s->loc, "cannot find '%s' (looked for %s)", s->str, path);
  } else { /* a module name: the importing folder, TFG_PATH, the stdlib */
    name = s->str;
    char buf[4096];
    const char *dirs[3] = {I->dir ? I->dir : ".", getenv("TFG_PATH"), I->opts->stdlib_dir};
    for (int i = 0; i < 3 && !path; i++) {
      if (!dirs[i]) continue;
      /* TFG_PATH may list several folders, separated by ':'. */
      const char *d = dirs[i];
      while (*d && !path) {
        const char *end = i == 1 ? strchr(d, ':') : NULL;
        size_t len = end ? (size_t)(end - d) : strlen(d);
        snprintf(buf, sizeof buf, "%.*s/%s.tfg", (int)len, d, name);
        if (file_exists(buf, &id)) {
          path = tfg_interp_strdup(I, buf, strlen(buf));
          if (i == 2) { /* messages name the stdlib the same on every machine */
            snprintf(buf, sizeof buf, "<stdlib>/%s.tfg", name);
            display = tfg_interp_strdup(I, buf, strlen(buf));
          }
        }
        d += len;
        if (*d == ':') d++;
      }
    }
    if (!path) {
      tfg_diag_error(I->diag, &s->loc, "no module named '%s'", name);
      tfg_diag_help(I->diag, "modules are looked up beside the importing file, in the folders of TFG_PATH "
                             "and in the standard library (TFG_STDLIB)");
      tfg_interp_unwind(I, TFG_ERR_NAME);
    }
  }
  for (int i = 0; i < I->nmodules; i++)
    if (I->modules[i]->id.dev == id.dev && I->modules[i]->id.ino == id.ino) {
      if (I->modules[i]->loading) import_cycle(I, s, i);
      return I->modules[i];
    }
  tfg_file_id main_id;
  if (I->main.path && strcmp(I->main.path, "<stdin>") != 0 && file_exists(I->main.path, &main_id) &&
      main_id.dev == id.dev && main_id.ino == id.ino)
    import_cycle(I, s, -1);
  if (I->nmodules >= 64) tfg_interp_fail(I, TFG_ERR_LIMIT, &s->loc, "too many modules (the limit is 64)");
  const tfg_source *src = tfg_diag_load_file(I->diag, path, display, &s->loc, &id); /* id: of what was read */
  if (!src) tfg_interp_unwind(I, TFG_ERR_DATA);
  tfg_ast *prog = NULL;
  size_t before = I->arena.total;
  tfg_status parsed = tfg_parse(src, I->diag, &I->arena, &prog, NULL);
  I->arena_exempt += I->arena.total - before; /* the module's text, not values */
  if (parsed != TFG_OK) {
    tfg_diag_note(I->diag, &s->loc, "imported here");
    tfg_interp_unwind(I, TFG_ERR_SYNTAX);
  }
  tfg_module *m = tfg_arena_alloc(&I->arena, sizeof *m);
  m->name = name;
  m->path = path;
  m->dir = dirname_of(I, path);
  m->id = id;
  m->loading = true;
  env_init(&m->env, &I->root, 256);
  I->modules = realloc(I->modules, sizeof *I->modules * (size_t)(I->nmodules + 1));
  TFG_ASSERT(I->modules != NULL);
  int at = I->nmodules;
  I->modules[I->nmodules++] = m;
  /* Evaluate the module in its own globals and folder. */
  const char *saved_dir = I->dir;
  int saved_depth = I->depth;
  const tfg_ast *saved_loop = I->loop;
  I->depth = 0;
  I->loop = NULL;
  tfg_status st = eval_module(I, m, src, prog);
  I->dir = saved_dir;
  I->depth = saved_depth;
  I->loop = saved_loop;
  m->loading = false;
  if (st != TFG_OK) {
    /* Forget the half-built module, and those it imported, so a later
     * import does not see them. */
    while (I->nmodules > at) env_free(&I->modules[--I->nmodules]->env);
    traceback_flush(I);
    tfg_diag_note(I->diag, &s->loc, "in the module imported here");
    tfg_interp_unwind(I, st);
  }
  return m;
}

/* Runs statement s with errors unwinding back here: returns TFG_OK or
 * the failing status (its diagnostic already reported). */
static tfg_status guarded_stmt(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  jmp_buf here, *outer = I->fail;
  I->fail = &here;
  tfg_status st = TFG_OK;
  if (setjmp(here) == 0) exec_stmt(I, env, s);
  else st = I->status;
  I->fail = outer;
  return st;
}

/* Runs every statement of prog in module m; stops at the first error. */
static tfg_status eval_module(tfg_interp *I, tfg_module *m, const tfg_source *src, const tfg_ast *prog) {
  (void)src;
  I->dir = m->dir;
  for (const tfg_ast *s = prog->list.head; s; s = s->next) {
    tfg_status st = guarded_stmt(I, &m->env, s);
    if (st != TFG_OK) return st;
  }
  return TFG_OK;
}

/* ---- the session ----------------------------------------------------------------------- */

tfg_interp *tfg_interp_new(tfg_diag *diag, const tfg_interp_opts *o) {
  static const tfg_interp_opts none = {0};
  tfg_interp *I = calloc(1, sizeof *I);
  TFG_ASSERT(I != NULL);
  I->diag = diag;
  I->opts = o ? o : &none;
  tfg_arena_init(&I->arena);
  I->prog.graph = tfg_graph_new();
  I->set_used = calloc((size_t)I->opts->nsets + 1, sizeof *I->set_used);
  env_init(&I->root, NULL, 256);
  for (int t = 0; t < TFG_DTYPE_COUNT; t++)
    env_bind(&I->root, tfg_dtype_name((tfg_dtype)t), (tfg_value){.kind = TFG_V_DTYPE, .u.dtype = (tfg_dtype)t});
  tfg_builtins_init(I);
  I->main.name = "main";
  env_init(&I->main.env, &I->root, 1024);
  return I;
}

void tfg_interp_free(tfg_interp *I) {
  if (!I) return;
  for (int i = 0; i < I->nmodules; i++) env_free(&I->modules[i]->env);
  free(I->modules);
  for (int i = 0; i < I->ndatasets; i++) tfg_data_free(I->datasets[i]->ds);
  free(I->datasets);
  env_free(&I->main.env);
  env_free(&I->root);
  for (int i = 0; i < TFG_MAX_CALL_DEPTH; i++) env_free(&I->frames[i]);
  tfg_graph_free(I->prog.graph);
  free(I->prog.actions);
  free(I->prog.params);
  free(I->prog.feeds);
  free(I->taken);
  free(I->taken_index);
  free(I->suffix_key);
  free(I->suffix_next);
  free(I->set_used);
  free(I->builtins);
  tfg_strbuf_free(&I->scratch);
  tfg_arena_free(&I->sig_arena);
  tfg_diag_free(I->sig_diag);
  tfg_arena_free(&I->arena);
  free(I);
}

tfg_dsref *tfg_interp_add_dataset(tfg_interp *I, tfg_dataset *ds, const char *path) {
  tfg_dsref *r = tfg_arena_alloc(&I->arena, sizeof *r);
  r->ds = ds;
  r->path = tfg_interp_strdup(I, path, strlen(path));
  I->datasets = realloc(I->datasets, sizeof *I->datasets * (size_t)(I->ndatasets + 1));
  TFG_ASSERT(I->datasets != NULL);
  I->datasets[I->ndatasets++] = r;
  return r;
}

/* Makes src the source being evaluated: relative paths (data files,
 * imports, checkpoints) start beside its file; the REPL's inputs
 * (<stdin>) start in the working directory. A fn keeps the folder of the
 * source that defined it (fn->dir), so a later call still reads its files. */
static void enter_source(tfg_interp *I, const tfg_source *src) {
  if (!I->main.path) I->main.path = src->name;
  if (src != I->main_src) { /* once per source, not per statement */
    I->main_src = src;
    I->main.dir = strcmp(src->name, "<stdin>") == 0 ? "." : dirname_of(I, src->name);
  }
  I->dir = I->main.dir;
}

tfg_interp_mark tfg_interp_mark_now(const tfg_interp *I) {
  return (tfg_interp_mark){.nodes = I->prog.graph->nnodes, .params = I->prog.nparams, .feeds = I->prog.nfeeds,
                           .actions = I->prog.nactions, .taken = I->ntaken, .binds = I->main.env.n,
                           .modules = I->nmodules, .datasets = I->ndatasets};
}

void tfg_interp_rollback(tfg_interp *I, const tfg_interp_mark *m) {
  TFG_ASSERT(m->nodes <= I->prog.graph->nnodes && m->binds <= I->main.env.n);
  tfg_graph_truncate(I->prog.graph, m->nodes);
  I->prog.nparams = m->params < I->prog.nparams ? m->params : I->prog.nparams;
  I->prog.nactions = m->actions < I->prog.nactions ? m->actions : I->prog.nactions;
  I->prog.nfeeds = m->feeds < I->prog.nfeeds ? m->feeds : I->prog.nfeeds;
  if (I->ntaken > m->taken) {
    I->ntaken = m->taken;
    reindex_taken(I);
    clear_suffixes(I);
  }
  env_truncate(&I->main.env, m->binds);
  /* A module imported since the mark may hold values that point at the
   * nodes just removed: forget it, so the next import evaluates it again. */
  while (I->nmodules > m->modules) env_free(&I->modules[--I->nmodules]->env);
  /* Datasets loaded since are referenced only by what was just undone. */
  while (I->ndatasets > m->datasets) tfg_data_free(I->datasets[--I->ndatasets]->ds);
}

/* Evaluates expression e with errors unwinding back here (see guarded_stmt). */
static tfg_status guarded_expr(tfg_interp *I, tfg_env *env, const tfg_ast *e, tfg_value *out) {
  jmp_buf here, *outer = I->fail;
  I->fail = &here;
  tfg_status st = TFG_OK;
  if (setjmp(here) == 0) *out = tfg_interp_expr(I, env, e);
  else st = I->status;
  I->fail = outer;
  return st;
}

tfg_status tfg_interp_eval_stmt(tfg_interp *I, const tfg_source *src, const tfg_ast *s, tfg_value *value) {
  enter_source(I, src);
  /* What a failed statement must not leave behind. */
  tfg_interp_mark m = tfg_interp_mark_now(I);
  I->main.env.floor = I->main.env.n; /* what this statement binds, a failure undoes */
  I->depth = 0;
  I->call_depth = 0;
  I->iterations = I->calls = 0;
  I->arena_start = I->arena.total;
  I->arena_exempt = 0;
  I->loop = NULL;
  I->tb_call = NULL;
  I->tb_same = 0;
  I->device = (tfg_devspec){0};
  tfg_value v = {.kind = TFG_V_NONE};
  tfg_status st = s->kind == TFG_AST_EXPR_STMT ? guarded_expr(I, &I->main.env, s->a, &v)
                                               : guarded_stmt(I, &I->main.env, s);
  if (st != TFG_OK) {
    traceback_flush(I);
    tfg_interp_rollback(I, &m);
    v = (tfg_value){.kind = TFG_V_NONE};
  }
  if (value) *value = v;
  return st;
}

tfg_status tfg_interp_eval(tfg_interp *I, const tfg_source *src, const tfg_ast *prog) {
  for (const tfg_ast *s = prog->list.head; s; s = s->next) {
    tfg_status st = tfg_interp_eval_stmt(I, src, s, NULL);
    if (st != TFG_OK) return st;
  }
  return TFG_OK;
}

/* Calls fn once per name that env and its parents make visible, the
 * newest binding of each (a rebinding shadows the older one). */
static void each_name(tfg_env *e, tfg_interp_name_fn fn, void *ctx) {
  for (; e; e = e->parent)
    for (int32_t i = e->n - 1; i >= 0; i--)
      if (env_find_local(e, e->entries[i].name) == &e->entries[i].value) fn(ctx, e->entries[i].name, &e->entries[i].value);
}

void tfg_interp_names(tfg_interp *I, const char *module, tfg_interp_name_fn fn, void *ctx) {
  if (!module) {
    each_name(&I->main.env, fn, ctx);
    return;
  }
  tfg_value *v = env_find(&I->main.env, module);
  if (v && v->kind == TFG_V_MODULE) {
    tfg_env *e = &v->u.module->env;
    for (int32_t i = e->n - 1; i >= 0; i--)
      if (env_find_local(e, e->entries[i].name) == &e->entries[i].value) fn(ctx, e->entries[i].name, &e->entries[i].value);
  }
}

tfg_status tfg_interp_finish(tfg_interp *I) {
  tfg_status st = TFG_OK;
  for (int i = 0; i < I->opts->nsets; i++)
    if (!I->set_used[i]) {
      tfg_diag_error(I->diag, NULL, "--set %s: the program has no top-level `let %s`", I->opts->sets[i].name,
                     I->opts->sets[i].name);
      st = TFG_ERR_USAGE;
    }
  return st;
}

tfg_program *tfg_interp_program(tfg_interp *I) { return &I->prog; }
