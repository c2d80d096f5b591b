/* lang/interp.h: the build-time interpreter: evaluates a program's AST
 * into graph IR (LANGUAGE.md sections 2-7).
 *
 * A .tfg program is evaluated once. Build-time values (numbers, strings,
 * lists, devices, functions, datasets) exist only here; tensors are graph
 * nodes. The result is a tfg_program (ir/program.h): the graph, its
 * params and inputs, and the actions (print, train) to run afterwards, in
 * program order, each train's settings decoded into a tfg_train_config,
 * with the files its load statements set params from before them.
 *
 *   tfg_interp_opts o = {.sets = sets, .nsets = n};
 *   tfg_interp *in = tfg_interp_new(diag, &o);
 *   if (tfg_interp_eval(in, src, ast) == TFG_OK) {
 *     const tfg_program *p = tfg_interp_program(in);
 *     ...
 *   }
 *   tfg_interp_free(in);     // frees the program too
 *
 * Every error a program can cause here (unknown name, wrong argument,
 * shape or dtype mismatch, bad data) is a located diagnostic; the
 * evaluation stops at the first one, leaving the graph as it was before
 * the failing statement. */
#ifndef TFG_INTERP_H
#define TFG_INTERP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
#include "ir/graph.h"
#include "ir/program.h"
#include "lang/ast.h"
#include "io/data.h"

typedef enum tfg_vkind {
  TFG_V_NONE,
  TFG_V_BOOL,
  TFG_V_INT,
  TFG_V_FLOAT,
  TFG_V_STRING,
  TFG_V_LIST,
  TFG_V_RANGE,
  TFG_V_DTYPE,
  TFG_V_DEVICE,
  TFG_V_TENSOR,
  TFG_V_FN,       /* a fn defined in a program */
  TFG_V_BUILTIN,  /* an op, initializer or other builtin */
  TFG_V_MODULE,
  TFG_V_DATASET,  /* a dataset, or one of its splits */
  TFG_V_COLUMN,   /* a column of a dataset split */
  TFG_V_RECORD,   /* a configuration call: adam(...), mirrored(...) */
  TFG_V_INIT,     /* an initializer without a shape: glorot(), normal(std = 0.1) */
} tfg_vkind;

typedef struct tfg_value tfg_value;

/* A configuration call, arguments bound to its signature in order. */
typedef struct tfg_record {
  const char *name;    /* "adam", "mirrored", ... */
  int nargs;
  const char *const *arg_names;
  tfg_value *args;
  tfg_loc loc;
} tfg_record;

struct tfg_value {
  tfg_vkind kind;
  union {
    bool b;
    int64_t i;
    double f;
    struct { const char *s; uint32_t len; } str;
    struct { tfg_value *items; int32_t n; } list;
    struct { int64_t lo, hi; } range;
    tfg_dtype dtype;
    tfg_devspec dev;
    tfg_node_id tensor;
    const struct tfg_fn *fn;
    const struct tfg_builtin *builtin;
    struct tfg_module *module;
    struct { struct tfg_dsref *ds; tfg_split split; bool whole; } dataset;
    struct { struct tfg_dsref *ds; tfg_split split; int col; } column;
    const tfg_record *record;
    const tfg_attrs *init; /* init, value, a, b, seed */
  } u;
};

/* A --set NAME=VALUE override: VALUE is tfg expression text. */
typedef struct tfg_set {
  const char *name;
  const char *value;
} tfg_set;

typedef struct tfg_interp_opts {
  const tfg_set *sets;
  int nsets;
  /* Where `import NAME` looks after the importing file's folder: the
   * folders of path, ':'-separated (TFG_PATH), then stdlib_dir (TFG_STDLIB
   * or the installed default); the CLI reads both (cli/pipeline.h). NULL:
   * not looked in. */
  const char *path;
  const char *stdlib_dir;
} tfg_interp_opts;

typedef struct tfg_interp tfg_interp;

/* Build budgets: a runaway loop or recursion stops with a located error
 * instead of filling memory. Iterations, fn calls and value bytes are
 * counted per top-level statement (with what it calls and imports),
 * nodes over the whole graph. Each is far above what a real model needs
 * (a 96-layer transformer builds a few thousand nodes). */
#define TFG_BUILD_MAX_ITERATIONS 10000000
#define TFG_BUILD_MAX_CALLS 1000000
#define TFG_BUILD_MAX_NODES 1000000
/* Bytes of build-time values (lists, strings, configurations) one
 * top-level statement may make: a list grown by `xs = xs + [i]` in a
 * loop copies itself each time. */
#define TFG_BUILD_MAX_BYTES (256ll << 20)

tfg_interp *tfg_interp_new(tfg_diag *diag, const tfg_interp_opts *o);
void tfg_interp_free(tfg_interp *in);
/* Evaluates the statements of prog (parsed from src) in the session's
 * global scope. Returns TFG_OK, or the status of the first error (its
 * diagnostic in the sink); on error the session is as it was before the
 * failing statement (tfg_interp_eval_stmt). Relative paths in src start
 * beside its file (the working directory for "<stdin>"). */
tfg_status tfg_interp_eval(tfg_interp *in, const tfg_source *src, const tfg_ast *prog);
/* Evaluates one top-level statement s of a program parsed from src. For
 * an expression statement *value (when value is not NULL) gets the
 * expression's value; for any other statement, or on error, none. On
 * error the session is exactly as it was before s: no node, param,
 * input, action, binding, param name, module or dataset of s is left. */
tfg_status tfg_interp_eval_stmt(tfg_interp *in, const tfg_source *src, const tfg_ast *s, tfg_value *value);

/* A point in a session to return to. The REPL takes one before each
 * input and rolls back to it when the input is rejected (a later
 * statement of it failed, or it failed at run time), and after a bare
 * expression has been shown, so that neither leaves anything behind. */
typedef struct tfg_interp_mark {
  int32_t nodes, params, feeds, actions, loads, taken, binds, modules, datasets, calls;
} tfg_interp_mark;

tfg_interp_mark tfg_interp_mark_now(const tfg_interp *in);
/* Undoes everything evaluated since m was taken: graph nodes, params,
 * inputs, actions, loads, global bindings, param names, and the modules and
 * datasets loaded since (freed). m must be from this session, and no
 * rollback to an earlier mark may have happened since. */
void tfg_interp_rollback(tfg_interp *in, const tfg_interp_mark *m);

/* Calls fn(ctx, name, value) once per name visible at top level (the
 * session's bindings, newest first, then builtins and dtype names), or
 * with module set, once per top-level name of the module the session
 * binds to that name (nothing when it names none). For completion. */
typedef void (*tfg_interp_name_fn)(void *ctx, const char *name, const tfg_value *v);
void tfg_interp_names(tfg_interp *in, const char *module, tfg_interp_name_fn fn, void *ctx);
/* Checks what can only be checked once the whole program is built: every
 * --set named a top-level let (else TFG_ERR_USAGE), and every load's file
 * holds the program's params as its strictness asks, read from the file's
 * header only (else TFG_ERR_DATA, reported at the load). */
tfg_status tfg_interp_finish(tfg_interp *in);
/* The program built so far; later stages (autodiff) add nodes to its graph. */
tfg_program *tfg_interp_program(tfg_interp *in);

/* The kind of a value in words ("an integer", "a tensor"), for messages. */
const char *tfg_vkind_name(tfg_vkind k);
/* Renders a build-time value as the REPL and print show it. */
void tfg_value_format(const tfg_value *v, const tfg_graph *g, tfg_strbuf *out);

#endif
