/* lang/interp_impl.h: the interpreter's internals, shared by the files
 * that make it up, one job each:
 *   lang/interp.c          statements, calls, expressions (the evaluator)
 *   lang/interp_value.c    build-time values: making, naming, rendering
 *   lang/interp_names.c    scopes and the dotted paths that name params
 *   lang/interp_train.c    train statements: settings checked and decoded
 *                          into the action's tfg_train_config
 *   lang/interp_load.c     load statements: checked where written, their
 *                          files matched against the params once built
 *   lang/interp_session.c  modules, and the session's life (new, eval,
 *                          marks and rollback, free)
 *   lang/builtins.c        the functions a program can call without
 *                          defining them */
#ifndef TFG_INTERP_IMPL_H
#define TFG_INTERP_IMPL_H

#include <setjmp.h>

#include "base/arena.h"
#include "base/strbuf.h"
#include "lang/interp.h"

/* A scope: bindings appended in order, a hash from name to its newest
 * binding. Rebinding appends, so truncating to an earlier count undoes
 * everything bound since (the REPL's rollback of a rejected input). */
typedef struct env_entry {
  const char *name;
  tfg_value value;
  int32_t prev; /* older binding of the same name, or -1 */
} env_entry;

typedef struct tfg_env {
  env_entry *entries;
  int32_t n, cap;
  /* Bindings from this index on were made by the statement running now,
   * which a failure undoes whole: rebinding one of them overwrites it in
   * place, so a loop that rebinds a name keeps one entry, not one per
   * iteration. 0 for a fn's scope (emptied at each call) and a module's
   * (forgotten whole on failure); the statement's start for main's. */
  int32_t floor;
  int32_t *heads; /* hash bucket -> newest entry index, or -1 */
  int32_t nheads;
  struct tfg_env *parent; /* a fn's scope sees its module's globals */
} tfg_env;

/* Calls nested deeper than this are an error (runaway recursion). */
#define TFG_MAX_CALL_DEPTH 200

/* A fn defined by a program. */
typedef struct tfg_fn {
  const tfg_ast *def; /* TFG_AST_FN */
  tfg_env *globals;   /* the module it was defined in */
  const char *dir;    /* that module's folder, for relative paths */
} tfg_fn;

typedef struct tfg_module {
  const char *name;
  const char *path;
  const char *dir;
  tfg_file_id id; /* the file, however a later import spells its path */
  bool loading;   /* being evaluated: importing it again is a cycle */
  tfg_env env;
} tfg_module;

/* A loaded dataset, owned by the interpreter. */
typedef struct tfg_dsref {
  tfg_dataset *ds;
  const char *path; /* the first file, for messages */
} tfg_dsref;

/* One frame of arguments bound to a signature. */
typedef struct tfg_args {
  int n;
  const char *names[16];
  tfg_value v[16];
  tfg_loc loc[16];
  bool given[16];
} tfg_args;

struct tfg_interp;
typedef tfg_value (*tfg_builtin_fn)(struct tfg_interp *I, const struct tfg_builtin *b,
                                    tfg_args *args, const tfg_loc *call);

typedef struct tfg_builtin {
  const char *name;
  const char *sig;   /* a tfg parameter list */
  tfg_builtin_fn fn;
  int op;            /* a graph op for op builtins, else -1 */
  int kind;          /* builtin-specific (initializer kind, ...) */
  const tfg_ast *params; /* sig parsed: a FN node's parameter list */
} tfg_builtin;

struct tfg_interp {
  tfg_diag *diag;
  tfg_arena arena; /* values, names, modules: the session's lifetime */
  tfg_program prog;
  int32_t cap_actions, cap_params, cap_feeds, cap_loads;
  tfg_module main;
  const tfg_source *main_src; /* the source main's statements come from now */
  tfg_module **modules; /* imported, by path */
  int nmodules;
  tfg_dsref **datasets;
  int ndatasets;
  const tfg_interp_opts *opts;
  bool *set_used;
  /* param naming: the path of scope/call names in force */
  const char *path[256]; /* deeper than the 200 nested calls allowed */
  int depth;
  char **taken; /* every param path and its prefixes, for _1 suffixes */
  int32_t ntaken, captaken;
  int32_t *taken_index; /* open-addressing hash over taken: entry + 1, 0 empty */
  int32_t taken_slots;  /* a power of two, at least twice ntaken */
  /* The next suffix to try for a path already taken ("h" -> 3: h_1 and
   * h_2 are taken too), so the n-th `h` costs one look-up, not n. A hint
   * only: cleared on rollback. */
  const char **suffix_key;
  int32_t *suffix_next;
  int32_t suffix_slots, nsuffix;
  /* the device annotation in force */
  tfg_devspec device;
  const char *dir; /* folder of the module running now: relative paths start here */
  tfg_env root;    /* builtins and dtype names, below every module's globals */
  int call_depth;
  int32_t cur_call;  /* the program fn call in progress (tfg_node.call), 0: none */
  int32_t cap_calls;
  /* The scope of the fn call at each depth, its buffers kept from call
   * to call: a build may make a million calls, and allocating a scope
   * for each is most of their cost. */
  tfg_env frames[TFG_MAX_CALL_DEPTH];
  /* Build budgets (TFG_BUILD_MAX_*), counted per top-level statement. */
  int64_t iterations, calls;
  size_t arena_start;  /* arena.total when the statement began */
  size_t arena_exempt; /* of it since, the syntax trees of modules imported */
  const tfg_ast *loop; /* the innermost for loop running, for messages */
  /* The traceback being written while an error unwinds through calls:
   * consecutive notes for one call site are folded (Python's "previous
   * line repeated N more times"). */
  const tfg_ast *tb_call;
  const char *tb_name;
  int64_t tb_same;
  tfg_strbuf scratch; /* param paths tried and dropped, reused */
  jmp_buf *fail; /* where an error unwinds to */
  tfg_status status;
  tfg_builtin *builtins;
  int nbuiltins;
  tfg_arena sig_arena;
  tfg_diag *sig_diag;
};

/* Reports an error at loc and unwinds to the statement being evaluated. */
_Noreturn void tfg_interp_fail(struct tfg_interp *I, tfg_status s, const tfg_loc *loc,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Unwinds after a diagnostic already reported (by a shape rule, a loader). */
_Noreturn void tfg_interp_unwind(struct tfg_interp *I, tfg_status s);

/* Values (lang/interp_value.c) */
tfg_value tfg_val_int(int64_t i);
tfg_value tfg_val_float(double f);
tfg_value tfg_val_tensor(tfg_node_id id);
/* x as a message or a print shows it: a NaN without its sign bit, since
 * glibc's %g prints a negative NaN (inf - inf makes one) as "-nan" where
 * NumPy and Python print "nan". Every double a message formats with %g
 * goes through it. */
double tfg_interp_shown(double x);
/* Refuses x, the value given for `what` (a setting's name, or an
 * argument's name in quotes: "'scale'"), at loc when it is NaN or
 * infinite, in one wording: "WHAT must be a number, got NaN", "WHAT must
 * be a finite number, got inf". For the numbers a program passes where
 * only a finite one means anything: comparisons let NaN through range
 * checks, and a NaN or inf reaching a kernel poisons every value. */
void tfg_interp_check_finite(struct tfg_interp *I, double x, const char *what, const tfg_loc *loc);
/* A string copied into the session arena. */
const char *tfg_interp_strdup(struct tfg_interp *I, const char *s, size_t n);

/* Graph building: adds a node, runs its shape rule (unwinding on error). */
tfg_node_id tfg_interp_node(struct tfg_interp *I, tfg_op_id op, const tfg_node_id *in, int nin,
                            const tfg_attrs *attrs, const tfg_loc *loc);
/* A scalar constant of dtype dt. */
tfg_node_id tfg_interp_scalar(struct tfg_interp *I, double v, tfg_dtype dt, const tfg_loc *loc);
/* The tensor a value stands for: tensors as they are, numbers and lists of
 * numbers as constants of dtype like (or f32). */
tfg_node_id tfg_interp_as_tensor(struct tfg_interp *I, const tfg_value *v, const tfg_loc *loc,
                                 int like);

/* Scopes (lang/interp_names.c) */
void tfg_env_init(tfg_env *e, tfg_env *parent, int32_t nheads);
void tfg_env_free(tfg_env *e);
/* Binds name to v in e (see tfg_env for rebinding). */
void tfg_env_bind(tfg_env *e, const char *name, tfg_value v);
/* Undoes every binding made since the scope had n entries. */
void tfg_env_truncate(tfg_env *e, int32_t n);
/* The newest binding of name in e alone (_local) or in e and its
 * parents; NULL when there is none. */
tfg_value *tfg_env_find_local(tfg_env *e, const char *name);
tfg_value *tfg_env_find(tfg_env *e, const char *name);
/* Levenshtein distance, capped (99 past 40 characters): for "did you
 * mean" suggestions. */
int tfg_interp_edit_distance(const char *a, const char *b);
/* The name visible from e closest to name, if close enough to be a
 * typo; else NULL. */
const char *tfg_interp_suggest(tfg_env *e, const char *name);

/* Param paths (lang/interp_names.c) */
/* The path of a param called name declared now: the scopes and calls in
 * force, then name, suffixed _1, _2, ... when taken; in the session arena. */
const char *tfg_interp_param_path(struct tfg_interp *I, const char *name);
/* Pushes component c (a scope's name, a call's) onto the naming path,
 * suffixed like a param path when taken here; the caller pops it
 * (I->depth--). Fails at loc when nested too deeply. */
void tfg_interp_push_component(struct tfg_interp *I, const char *c, const tfg_loc *loc);
/* Records a param path and every prefix of it as taken. */
void tfg_interp_take_path(struct tfg_interp *I, const char *full);
/* Forgets every path taken after the first n (a rollback). */
void tfg_interp_untake(struct tfg_interp *I, int32_t n);

/* Statements (lang/interp.c) */
/* Appends action a to the program. */
void tfg_interp_push_action(struct tfg_interp *I, tfg_action a);
/* Runs statement s in env with errors unwinding back here: returns
 * TFG_OK or the failing status (its diagnostic already reported). */
tfg_status tfg_interp_run_stmt(struct tfg_interp *I, tfg_env *env, const tfg_ast *s);
/* Ends the traceback's run of notes for one call site, saying how many
 * were left out (a traceback is written while an error unwinds). */
void tfg_interp_traceback_flush(struct tfg_interp *I);

/* Train statements (lang/interp_train.c) */
/* Runs train statement s: checks its loss and each setting where it is
 * written, decodes the settings into the action's tfg_train_config and
 * appends the action; a job that would share a param with another job of
 * its group is refused. */
void tfg_interp_exec_train(struct tfg_interp *I, tfg_env *env, const tfg_ast *s);

/* Load statements (lang/interp_load.c) */
/* Runs load statement s: checks its settings, that it comes before every
 * action and that its file can be opened, and appends it to the
 * program's loads. */
void tfg_interp_exec_load(struct tfg_interp *I, tfg_env *env, const tfg_ast *s);
/* Matches the header of every load's file against the program's params
 * (tfg_safetensors_match), reporting at each load. Returns TFG_OK or
 * TFG_ERR_DATA. */
tfg_status tfg_interp_check_loads(struct tfg_interp *I);

/* Modules (lang/interp_session.c) */
/* Loads a module (a stdlib name or a file path) once and returns it. */
tfg_module *tfg_interp_load_module(struct tfg_interp *I, const tfg_ast *s);

/* Builtins (lang/builtins.c) */
void tfg_builtins_init(struct tfg_interp *I);
/* Refuses, at loc, a random initializer (normal, uniform, glorot, he) of
 * a tensor of integer or bool dtype dt, as torch.randn(dtype=torch.int32)
 * does: draws are real numbers, and rounding them silently would not be
 * what was asked. zeros, ones and full suit every dtype. */
void tfg_builtin_check_init(struct tfg_interp *I, const tfg_attrs *init, tfg_dtype dt, const tfg_loc *loc);
/* Calls builtin b with evaluated arguments (positional, then keywords). */
tfg_value tfg_builtin_call(struct tfg_interp *I, const tfg_builtin *b, const tfg_ast *call, tfg_value *pos,
                           tfg_loc *posloc, int npos, const char **kwn, tfg_value *kw, tfg_loc *kwloc, int nkw);
/* Binds name in the root scope (builtins, dtype names). */
void tfg_interp_bind_root(struct tfg_interp *I, const char *name, tfg_value v);
const tfg_builtin *tfg_builtin_find(const struct tfg_interp *I, const char *name);
/* The record builtins a setting takes (lang/builtins.c's table, its kind
 * column): family 0 the strategies, 1 the optimizers, 2 the lr
 * schedules. Whether b is one of family's; and their names as a message
 * lists them, "single(), mirrored(...) or parameter_server(...)". */
bool tfg_builtin_is_config(const tfg_builtin *b, int family);
void tfg_builtin_config_names(const struct tfg_interp *I, int family, struct tfg_strbuf *out);
/* Binds call arguments to a parameter list (a FN's list: NAME or KWARG
 * with default); evaluates defaults in the builtin's own terms. */
void tfg_interp_bind(struct tfg_interp *I, const char *fname, const tfg_ast *params,
                     const tfg_ast *call, tfg_value *pos, tfg_loc *posloc, int npos,
                     const char **kwnames, tfg_value *kw, tfg_loc *kwloc, int nkw, tfg_args *out);
/* Evaluates an expression in the current scope. */
tfg_value tfg_interp_expr(struct tfg_interp *I, tfg_env *env, const tfg_ast *e);
/* Resolves a file path against the folder of the running module. */
const char *tfg_interp_path(struct tfg_interp *I, const char *path);
/* Registers a loaded dataset (owned by the interpreter from then on). */
tfg_dsref *tfg_interp_add_dataset(struct tfg_interp *I, tfg_dataset *ds, const char *path);

#endif
