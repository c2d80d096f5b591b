/* lang/interp_load.c: load statements (LANGUAGE.md section 6): the
 * statement checked where it is written (its settings, its file, its place
 * before the actions) and recorded in the program; then, once the whole
 * program is built and so every param is known, each file's header
 * matched against the params, so that `tfg check` finds a missing or
 * extra key, or a param of another shape, before anything runs. The run
 * reads the files and sets the params (runtime/session.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/grow.h"
#include "io/safetensors.h"
#include "lang/interp_impl.h"

/* What a load's file is called where a reader names its role. */
#define LOAD_WHAT "params file"

/* A load's settings: only `strict`. */
static bool load_strict(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  bool strict = true, given = false;
  for (const tfg_ast *k = s->list.head; k; k = k->next) {
    if (strcmp(k->name, "strict") != 0) {
      tfg_loc l = k->loc;
      l.len = (uint32_t)strlen(k->name);
      tfg_diag_error(I->diag, &l, "unknown load setting '%s'", k->name);
      if (tfg_interp_edit_distance(k->name, "strict") < 3) tfg_diag_help(I->diag, "did you mean 'strict'?");
      else
        tfg_diag_help(I->diag, "a load takes one setting: strict = false skips the params the file lacks and "
                               "the tensors that are no param");
      tfg_interp_unwind(I, TFG_ERR_NAME);
    }
    if (given) tfg_interp_fail(I, TFG_ERR_NAME, &k->loc, "setting 'strict' is given twice");
    given = true;
    tfg_value v = tfg_interp_expr(I, env, k->a);
    if (v.kind != TFG_V_BOOL)
      tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "strict must be true or false, got %s", tfg_vkind_name(v.kind));
    strict = v.u.b;
  }
  return strict;
}

/* A load sets the params before the first action runs, wherever it is
 * written; one written after an action would seem to change the params
 * between actions, which it does not, so it is refused. */
static void check_before_actions(tfg_interp *I, const tfg_ast *s) {
  if (I->prog.nactions == 0) return;
  const tfg_action *a = &I->prog.actions[0];
  const char *what = a->kind == TFG_ACTION_PRINT ? "print" : "train";
  tfg_loc here = s->loc, there = a->loc;
  here.len = 4; /* the keyword */
  there.len = (uint32_t)strlen(what);
  tfg_diag_error(I->diag, &here, "load after the %s at line %u: a load sets the params before any action runs", what,
                 a->loc.line);
  tfg_diag_note(I->diag, &there, "the first action");
  tfg_diag_help(I->diag, "move the load above the program's first print or train");
  tfg_interp_unwind(I, TFG_ERR_NAME);
}

void tfg_interp_exec_load(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  const tfg_ast *file = s->a;
  TFG_ASSERT(file && file->kind == TFG_AST_STRING);
  if (file->len == 0)
    tfg_interp_fail(I, TFG_ERR_NAME, &file->loc, "load needs a file name, like \"model.safetensors\"");
  bool strict = load_strict(I, env, s);
  check_before_actions(I, s);
  /* From the program's folder, as a train's checkpoint and data files. */
  const char *path = tfg_interp_path(I, tfg_interp_strdup(I, file->str, file->len));
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(path, &st, &why);
  if (fd < 0) tfg_interp_fail(I, TFG_ERR_DATA, &file->loc, "cannot open %s '%s': %s", LOAD_WHAT, path, why);
  close(fd);
  tfg_program *p = &I->prog;
  TFG_GROW(p->loads, p->nloads, I->cap_loads, 4);
  p->loads[p->nloads++] = (tfg_load){.path = path, .loc = file->loc, .strict = strict};
}

tfg_status tfg_interp_check_loads(tfg_interp *I) {
  tfg_program *p = &I->prog;
  tfg_status res = TFG_OK;
  int *at = malloc(sizeof *at * ((size_t)p->nparams + 1));
  TFG_ASSERT(at != NULL);
  for (int i = 0; i < p->nloads; i++) {
    const tfg_load *l = &p->loads[i];
    tfg_safetensors *f;
    /* A file that cannot be read is the program's error (exit 1), as a
     * missing data file is: the program names it. */
    tfg_status st = tfg_safetensors_load_header(I->diag, &l->loc, LOAD_WHAT, l->path, &f);
    if (st == TFG_OK) {
      st = tfg_safetensors_match(I->diag, &l->loc, l->path, f, p->graph, p->params, p->nparams, l->strict, at);
      tfg_safetensors_free(f);
    }
    if (st != TFG_OK) res = TFG_ERR_DATA;
  }
  free(at);
  return res;
}
