/* runtime/ckpt.c: checkpoints: saving a run's tensors atomically, loading
 * them back, and matching a loaded file against the run it resumes
 * (runtime/ckpt.h); reading the file of a load statement. The format, its
 * writer's bytes and its strict reader are io/safetensors.c's.
 *
 * Saving is atomic (write a temporary file beside the target, fsync,
 * rename, fsync the folder): a crash or kill -9 leaves the old file or the
 * new one. What it can leave is the temporary "<path>.tmp.<pid>" of the
 * killed process: the next save of the same path removes it once no live
 * process has that pid (remove_stale_temps). A writer in another pid
 * namespace (a container sharing the folder) looks dead to us, so two
 * containers must not save the same checkpoint. */
#include "runtime/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/strbuf.h"

/* ---- saving ------------------------------------------------------------- */

/* Removes the temporaries "<path>.tmp.<pid>" that writers killed mid-save
 * (kill -9, a crash) left beside path: those whose pid names no live
 * process (kill(pid, 0) fails with ESRCH). A live pid is another writer
 * saving path right now, or a process that took a dead writer's pid:
 * its file is left alone either way, as is our own (reused below). Best
 * effort: what cannot be listed or removed stays, and the save goes on. */
static void remove_stale_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t blen = strlen(base);
  char *dir = tfg_path_folder(path);
  DIR *dp = opendir(dir);
  free(dir);
  if (!dp) return;
  for (struct dirent *de; (de = readdir(dp)) != NULL;) {
    const char *name = de->d_name;
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) continue;
    const char *digits = name + blen + 5;
    size_t nd = strspn(digits, "0123456789");
    if (nd == 0 || nd > 9 || digits[nd] != '\0' || digits[0] == '0') continue; /* not our pattern */
    pid_t pid = (pid_t)strtol(digits, NULL, 10);
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    unlinkat(dirfd(dp), name, 0);
  }
  closedir(dp);
}

tfg_status tfg_ckpt_save(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt_entry *e,
                         int n, const tfg_ckpt_meta *meta, int nmeta) {
  TFG_ASSERT(path != NULL);
  tfg_strbuf hdr = {0};
  tfg_safetensors_header(&hdr, e, n, meta, nmeta); /* asserts the tensors make a valid file */
  const char *why = NULL;
  char *target = tfg_file_out_target(path, &why);
  if (!target) {
    tfg_strbuf_free(&hdr);
    tfg_diag_error(d, loc, "cannot save checkpoint '%s': %s", path, why);
    return TFG_ERR_IO;
  }
  remove_stale_temps(target);
  free(target);

  /* The temporary "<target>.tmp.<pid>" (base/file.h, TFG_FILE_OUT_PER_PID):
   * processes saving the same path stay apart, and the next save finds a
   * killed writer's by its pid. The target is the old file or the new one
   * until the rename, which replaces it in one step. */
  tfg_file_out o;
  if (tfg_file_out_begin(&o, path, TFG_FILE_OUT_PER_PID, &why) != 0) {
    tfg_strbuf_free(&hdr);
    tfg_diag_error(d, loc, "cannot save checkpoint '%s': %s", path, why);
    return TFG_ERR_IO;
  }
  tfg_file_out_write(&o, hdr.data, hdr.len);
  for (int i = 0; i < n; i++)
    tfg_file_out_write(&o, e[i].data, (uint64_t)tfg_safetensors_nbytes(e[i].dtype, &e[i].shape));
  tfg_status st = TFG_OK;
  if (tfg_file_out_commit(&o) != 0) {
    tfg_diag_error(d, loc, "cannot save checkpoint '%s': %s '%s': %s", path, o.step, o.failed, strerror(o.err));
    st = TFG_ERR_IO;
  }
  tfg_file_out_end(&o);
  tfg_strbuf_free(&hdr);
  return st;
}

/* ---- loading ------------------------------------------------------------ */

tfg_status tfg_ckpt_load(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_ckpt **out) {
  return tfg_safetensors_load(d, loc, "checkpoint", path, out);
}

tfg_status tfg_ckpt_read_load(tfg_diag *d, const tfg_load *l, const tfg_graph *g, const tfg_node_id *ids, int n,
                              tfg_ckpt **out, int *at) {
  *out = NULL;
  tfg_ckpt *c;
  tfg_status st = tfg_safetensors_load(d, &l->loc, "params file", l->path, &c);
  if (st != TFG_OK) return st;
  st = tfg_safetensors_match(d, &l->loc, l->path, c, g, ids, n, l->strict, at);
  if (st != TFG_OK) {
    tfg_ckpt_free(c);
    return st;
  }
  *out = c;
  return TFG_OK;
}

/* ---- resuming a run ----------------------------------------------------- */

/* The "step" metadata sv as the step to resume at: decimal digits, at
 * most INT64_MAX. Records an error saying what is wrong otherwise. */
static bool parse_step(tfg_diag *d, const tfg_loc *loc, const char *path, const char *sv,
                       int64_t *step) {
  const char *digits = sv + (sv[0] == '-');
  size_t nd = strspn(digits, "0123456789");
  const char *why = NULL;
  long long v = 0;
  if (nd == 0 || digits[nd] != '\0') {
    why = "is not a whole number";
  } else if (digits != sv && strspn(digits, "0") != nd) {
    why = "is negative (a step counts from 0)";
  } else {
    errno = 0;
    v = strtoll(digits, NULL, 10);
    if (errno == ERANGE) why = "is out of range (the largest step is 2^63 - 1)";
  }
  if (why) {
    char *s = tfg_safetensors_show(sv);
    tfg_diag_error(d, loc, "checkpoint %s: its step '%s' %s", path, s, why);
    free(s);
    return false;
  }
  *step = v;
  return true;
}

/* What a tensor of the checkpoint is to the run being resumed. */
enum { ROLE_NONE, ROLE_PARAM, ROLE_STATE };

/* Whether tensor j of c, which restores nothing, is named "PARAM:SLOT"
 * for a param the run restored from c: optimizer state, if not the run's. */
static bool is_param_state(const tfg_ckpt *c, const unsigned char *role, int j) {
  int k = tfg_safetensors_state_owner(c, j);
  return k >= 0 && role[k] == ROLE_PARAM;
}

/* Records the error for tensor j of c, which the run has no use for. */
static void extra_tensor(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt *c,
                         const unsigned char *role, int j, const char *optimizer) {
  char *s = tfg_safetensors_show(tfg_ckpt_entry_at(c, j)->name);
  if (is_param_state(c, role, j))
    tfg_diag_error(d, loc,
                   "checkpoint %s has tensor '%s', optimizer state that this run's %s does not "
                   "keep",
                   path, s, optimizer);
  else
    tfg_diag_error(d, loc,
                   "checkpoint %s has tensor '%s', which is neither a param of this program nor "
                   "its optimizer state",
                   path, s);
  free(s);
  tfg_diag_help(d, "a checkpoint resumes the run that wrote it; to start over, move the file "
                   "away or name another checkpoint");
}

tfg_status tfg_ckpt_match(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt *c,
                          const tfg_ckpt_entry *want, int n, int nparams, const char *optimizer,
                          int *at, int64_t *step) {
  TFG_ASSERT(c && path && optimizer && step && nparams >= 0 && nparams <= n &&
             (n == 0 || (want && at)));
  *step = 0;
  const char *saved = tfg_ckpt_meta_get(c, "optimizer");
  bool other = saved && strcmp(saved, optimizer) != 0; /* c's state is not ours to use */
  int count = tfg_ckpt_count(c);
  unsigned char *role = calloc((size_t)count + 1, 1);
  TFG_ASSERT(role != NULL);
  int found = 0, missing = -1; /* state tensors found; the first one missing */
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    bool is_state = i >= nparams;
    at[i] = other && is_state ? -1 : tfg_ckpt_find(c, want[i].name);
    if (at[i] < 0) {
      if (!is_state) {
        tfg_diag_error(d, loc, "checkpoint %s has no tensor '%s' for the param of that name", path,
                       want[i].name);
        ok = false;
      } else if (missing < 0) {
        missing = i;
      }
      continue;
    }
    const tfg_ckpt_entry *t = tfg_ckpt_entry_at(c, at[i]);
    if (t->dtype != want[i].dtype || !tfg_shape_eq(&t->shape, &want[i].shape)) {
      tfg_strbuf w = {0}, g = {0};
      tfg_shape_format(&w, want[i].dtype, &want[i].shape);
      tfg_shape_format(&g, t->dtype, &t->shape);
      tfg_diag_error(d, loc, "checkpoint %s: '%s' is %s but the program's is %s", path,
                     want[i].name, g.data, w.data);
      tfg_strbuf_free(&w);
      tfg_strbuf_free(&g);
      ok = false;
    }
    role[at[i]] = is_state ? ROLE_STATE : ROLE_PARAM;
    found += is_state;
  }
  if (ok && found > 0 && missing >= 0) {
    tfg_diag_error(d, loc, "checkpoint %s has no tensor '%s' for the optimizer state of that name",
                   path, want[missing].name);
    tfg_diag_note(d, NULL, "it holds %d of the %d optimizer state tensors; only a file with none "
                           "(params only) starts the optimizer state fresh",
                  found, n - nparams);
    ok = false;
  }
  for (int j = 0; j < count && ok; j++) /* header order: the first extra key a reader sees */
    if (role[j] == ROLE_NONE && !(other && is_param_state(c, role, j))) {
      extra_tensor(d, loc, path, c, role, j, optimizer);
      ok = false;
    }
  if (ok && other) {
    char *s = tfg_safetensors_show(saved);
    tfg_diag_warning(d, loc,
                     "checkpoint %s was saved by optimizer %s, not this run's %s: its params "
                     "are restored, its optimizer state is not, and training starts at step 0",
                     path, s, optimizer);
    free(s);
  }
  const char *sv = tfg_ckpt_meta_get(c, "step");
  if (ok && !other && found == n - nparams && sv) ok = parse_step(d, loc, path, sv, step);
  free(role);
  return ok ? TFG_OK : TFG_ERR_DATA;
}
