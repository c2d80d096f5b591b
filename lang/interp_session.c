/* lang/interp_session.c: the interpreter as a session: modules (found,
 * loaded once, evaluated in their own globals and folder) and the
 * session's life (lang/interp.h: new, eval, marks and rollback, the
 * names it binds, finish, free). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/assert.h"
#include "lang/interp_impl.h"
#include "lang/parse.h"

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

tfg_module *tfg_interp_load_module(tfg_interp *I, const tfg_ast *s) {
  const char *path = NULL, *display = NULL;
  const char *name;
  tfg_file_id id = {0};
  if (s->op) { /* a file, relative to the importing file */
    path = tfg_interp_path(I, s->str);
    name = module_name(I, s->str);
    if (!file_exists(path, &id))
      tfg_interp_fail(I, TFG_ERR_DATA, &s->loc, "cannot find '%s' (looked for %s)", s->str, path);
  } else { /* a module name: the importing folder, the path (TFG_PATH), the stdlib */
    name = s->str;
    char buf[4096];
    const char *dirs[3] = {I->dir ? I->dir : ".", I->opts->path, I->opts->stdlib_dir};
    for (int i = 0; i < 3 && !path; i++) {
      if (!dirs[i]) continue;
      /* The path may list several folders, separated by ':'. */
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
  tfg_env_init(&m->env, &I->root, 256);
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
    while (I->nmodules > at) tfg_env_free(&I->modules[--I->nmodules]->env);
    tfg_interp_traceback_flush(I);
    tfg_diag_note(I->diag, &s->loc, "in the module imported here");
    tfg_interp_unwind(I, st);
  }
  return m;
}

/* Runs every statement of prog in module m; stops at the first error. */
static tfg_status eval_module(tfg_interp *I, tfg_module *m, const tfg_source *src, const tfg_ast *prog) {
  (void)src;
  I->dir = m->dir;
  for (const tfg_ast *s = prog->list.head; s; s = s->next) {
    tfg_status st = tfg_interp_run_stmt(I, &m->env, s);
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
  tfg_env_init(&I->root, NULL, 256);
  for (int t = 0; t < TFG_DTYPE_COUNT; t++)
    tfg_env_bind(&I->root, tfg_dtype_name((tfg_dtype)t), (tfg_value){.kind = TFG_V_DTYPE, .u.dtype = (tfg_dtype)t});
  tfg_builtins_init(I);
  I->main.name = "main";
  tfg_env_init(&I->main.env, &I->root, 1024);
  return I;
}

void tfg_interp_free(tfg_interp *I) {
  if (!I) return;
  for (int i = 0; i < I->nmodules; i++) tfg_env_free(&I->modules[i]->env);
  free(I->modules);
  for (int i = 0; i < I->ndatasets; i++) tfg_data_free(I->datasets[i]->ds);
  free(I->datasets);
  tfg_env_free(&I->main.env);
  tfg_env_free(&I->root);
  for (int i = 0; i < TFG_MAX_CALL_DEPTH; i++) tfg_env_free(&I->frames[i]);
  tfg_graph_free(I->prog.graph);
  free(I->prog.actions);
  free(I->prog.params);
  free(I->prog.calls);
  free(I->prog.feeds);
  free(I->prog.loads);
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
                           .actions = I->prog.nactions, .loads = I->prog.nloads, .taken = I->ntaken,
                           .binds = I->main.env.n,
                           .modules = I->nmodules, .datasets = I->ndatasets, .calls = I->prog.ncalls};
}

void tfg_interp_rollback(tfg_interp *I, const tfg_interp_mark *m) {
  TFG_ASSERT(m->nodes <= I->prog.graph->nnodes && m->binds <= I->main.env.n);
  tfg_graph_truncate(I->prog.graph, m->nodes);
  I->prog.nparams = m->params < I->prog.nparams ? m->params : I->prog.nparams;
  I->prog.nactions = m->actions < I->prog.nactions ? m->actions : I->prog.nactions;
  I->prog.nfeeds = m->feeds < I->prog.nfeeds ? m->feeds : I->prog.nfeeds;
  I->prog.nloads = m->loads < I->prog.nloads ? m->loads : I->prog.nloads;
  I->prog.ncalls = m->calls < I->prog.ncalls ? m->calls : I->prog.ncalls;
  tfg_interp_untake(I, m->taken);
  tfg_env_truncate(&I->main.env, m->binds);
  /* A module imported since the mark may hold values that point at the
   * nodes just removed: forget it, so the next import evaluates it again. */
  while (I->nmodules > m->modules) tfg_env_free(&I->modules[--I->nmodules]->env);
  /* Datasets loaded since are referenced only by what was just undone. */
  while (I->ndatasets > m->datasets) tfg_data_free(I->datasets[--I->ndatasets]->ds);
}

/* Evaluates expression e with errors unwinding back here (see tfg_interp_run_stmt). */
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
                                               : tfg_interp_run_stmt(I, &I->main.env, s);
  if (st != TFG_OK) {
    tfg_interp_traceback_flush(I);
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
      if (tfg_env_find_local(e, e->entries[i].name) == &e->entries[i].value) fn(ctx, e->entries[i].name, &e->entries[i].value);
}

void tfg_interp_names(tfg_interp *I, const char *module, tfg_interp_name_fn fn, void *ctx) {
  if (!module) {
    each_name(&I->main.env, fn, ctx);
    return;
  }
  tfg_value *v = tfg_env_find(&I->main.env, module);
  if (v && v->kind == TFG_V_MODULE) {
    tfg_env *e = &v->u.module->env;
    for (int32_t i = e->n - 1; i >= 0; i--)
      if (tfg_env_find_local(e, e->entries[i].name) == &e->entries[i].value) fn(ctx, e->entries[i].name, &e->entries[i].value);
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
  if (st == TFG_OK) st = tfg_interp_check_loads(I);
  return st;
}

tfg_program *tfg_interp_program(tfg_interp *I) { return &I->prog; }

