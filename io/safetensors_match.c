/* io/safetensors_match.c: a safetensors file matched against the params
 * a `load` statement sets (io/safetensors.h, tfg_safetensors_match).
 *
 * One function serves both places a load is checked: `tfg check` (and
 * every command, before anything runs) matches the file's header, and the
 * run matches the file it reads in full, in case it changed since; so
 * both report the same errors in the same words. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "io/safetensors.h"

int tfg_safetensors_state_owner(const tfg_safetensors *f, int i) {
  const char *name = tfg_safetensors_tensor_at(f, i)->name, *colon = strrchr(name, ':');
  if (!colon) return -1;
  char *owner = strndup(name, (size_t)(colon - name));
  TFG_ASSERT(owner != NULL);
  int k = tfg_safetensors_find(f, owner);
  free(owner);
  return k;
}

/* Whether a tensor's name is optimizer state as tfg's checkpoints key it,
 * "PARAM:SLOT" after torch.optim's state (h.w:exp_avg): a PARAM, then a
 * slot that is an identifier. A param's name has no ':', so no such
 * tensor can be a param; whether PARAM is in the file or the program
 * does not matter to a load, which never sets optimizer state (PyTorch
 * keeps it in the optimizer's state_dict, apart from the model's that
 * load_state_dict compares). Any other name with a ':' is no state. */
static bool is_state_name(const char *name) {
  const char *colon = strrchr(name, ':');
  if (!colon || colon == name) return false;
  const char *slot = colon + 1;
  if (!(*slot == '_' || (*slot >= 'a' && *slot <= 'z') || (*slot >= 'A' && *slot <= 'Z'))) return false;
  for (; *slot; slot++)
    if (!(*slot == '_' || (*slot >= 'a' && *slot <= 'z') || (*slot >= 'A' && *slot <= 'Z') ||
          (*slot >= '0' && *slot <= '9')))
      return false;
  return true;
}

/* What is wrong with a file, by kind: how many, and the first. */
typedef struct mismatch {
  int n;
  int first; /* a param's index in ids (differ, missing) or a tensor's in f (extra) */
} mismatch;

static void count(mismatch *m, int i) {
  if (m->n++ == 0) m->first = i;
}

/* The help of a strict load's errors: what strict = false would do. */
static void strict_help(tfg_diag *d, const char *what) {
  tfg_diag_help(d, "with `{ strict = false }` a load %s", what);
}

tfg_status tfg_safetensors_match(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_safetensors *f,
                                 const tfg_graph *g, const tfg_node_id *ids, int n, bool strict, int *at) {
  TFG_ASSERT(f && path && g && n >= 0 && (n == 0 || (ids && at)));
  int nt = tfg_safetensors_count(f);
  unsigned char *used = calloc((size_t)nt + 1, 1); /* per tensor of f: a param's */
  TFG_ASSERT(used != NULL);
  mismatch differ = {0}, missing = {0}, extra = {0};
  for (int i = 0; i < n; i++) {
    const tfg_node *p = &g->nodes[ids[i]];
    at[i] = tfg_safetensors_find(f, p->name);
    if (at[i] < 0) {
      count(&missing, i);
      continue;
    }
    used[at[i]] = 1;
    const tfg_safetensors_tensor *t = tfg_safetensors_tensor_at(f, at[i]);
    if (t->dtype != p->dtype || !tfg_shape_eq(&t->shape, &p->shape)) count(&differ, i);
  }
  /* Header order: the first extra tensor is the first a reader sees.
   * Optimizer state is never counted, even a slot whose param is in
   * neither the file nor the program: strict compares params, and a
   * load sets no state (is_state_name). */
  for (int j = 0; j < nt; j++)
    if (!used[j] && !is_state_name(tfg_safetensors_tensor_at(f, j)->name)) count(&extra, j);
  free(used);

  /* A dtype or shape that differs is an error even when not strict: the
   * file's bytes cannot be this param's value (no conversion is made,
   * as torch's load_state_dict makes none). */
  if (differ.n) {
    const tfg_node *p = &g->nodes[ids[differ.first]];
    const tfg_safetensors_tensor *t = tfg_safetensors_tensor_at(f, at[differ.first]);
    tfg_strbuf want = {0}, got = {0}, more = {0};
    tfg_shape_format(&want, p->dtype, &p->shape);
    tfg_shape_format(&got, t->dtype, &t->shape);
    if (differ.n > 1)
      tfg_strbuf_printf(&more, ", and %d more param%s", differ.n - 1, differ.n > 2 ? "s differ" : " differs");
    tfg_diag_error(d, loc, "'%s' holds '%s' as %s, but the param is %s%s", path, p->name, got.data, want.data,
                   more.data ? more.data : "");
    tfg_strbuf_free(&want);
    tfg_strbuf_free(&got);
    tfg_strbuf_free(&more);
  }
  if (strict && missing.n) {
    const char *name = g->nodes[ids[missing.first]].name;
    if (missing.n > 1)
      tfg_diag_error(d, loc, "'%s' has no tensor for param '%s', nor for %d more param%s", path, name, missing.n - 1,
                     missing.n > 2 ? "s" : "");
    else
      tfg_diag_error(d, loc, "'%s' has no tensor for param '%s'", path, name);
    strict_help(d, "sets the params the file has and leaves the others as they are");
  }
  if (strict && extra.n) {
    char *name = tfg_safetensors_show(tfg_safetensors_tensor_at(f, extra.first)->name);
    if (extra.n > 1)
      tfg_diag_error(d, loc, "'%s' has tensor '%s', which is no param of this program, nor are %d more of its tensors",
                     path, name, extra.n - 1);
    else
      tfg_diag_error(d, loc, "'%s' has tensor '%s', which is no param of this program", path, name);
    free(name);
    strict_help(d, "skips the tensors that are no param");
  }
  bool ok = differ.n == 0 && (!strict || (missing.n == 0 && extra.n == 0));
  return ok ? TFG_OK : TFG_ERR_DATA;
}
