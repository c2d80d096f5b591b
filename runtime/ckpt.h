/* runtime/ckpt.h: checkpoints: a run's params and optimizer state saved
 * in the safetensors format (io/safetensors.h), so that the safetensors
 * Python package and PyTorch (safetensors.torch.load_file) read them too.
 *
 *   tfg_ckpt_entry e[] = {{"h.w", TFG_DTYPE_F32, {2, {64, 10}}, w_data}};
 *   tfg_ckpt_meta m[] = {{"step", "500"}};
 *   tfg_ckpt_save(d, &loc, "out/model.safetensors", e, 1, m, 1);
 *
 *   tfg_ckpt *c;
 *   if (tfg_ckpt_load(d, &loc, "out/model.safetensors", &c) == TFG_OK) {
 *     // resuming a run: tfg_ckpt_match(d, &loc, path, c, run_tensors, ...)
 *     int i = tfg_ckpt_find(c, "h.w");              // -1 when absent
 *     const tfg_ckpt_entry *t = tfg_ckpt_entry_at(c, i);
 *     const char *step = tfg_ckpt_meta_get(c, "step");   // NULL when absent
 *     tfg_ckpt_free(c);
 *   }
 *
 * A `load` statement's file is read the same way (tfg_ckpt_read_load).
 *
 * Saving is atomic: the bytes go to a temporary file in the same folder,
 * which is fsync'ed and renamed over the target (then the folder is
 * fsync'ed), so a crash or a kill at any moment leaves either the old file
 * or the new one, never a torn one; the temporaries of killed processes
 * are removed at the next save of the same path. Errors are reported to
 * the diagnostics sink at loc (the train statement) naming the file. */
#ifndef TFG_CKPT_H
#define TFG_CKPT_H

#include "base/diag.h"
#include "base/status.h"
#include "ir/graph.h"
#include "ir/program.h"
#include "io/safetensors.h"

/* A tensor and a metadata string of a checkpoint are the format's. */
typedef tfg_safetensors_tensor tfg_ckpt_entry;
typedef tfg_safetensors_meta tfg_ckpt_meta;

/* Writes n tensors and nmeta metadata strings to path atomically. Names
 * must be unique (asserted). Creates no folders: a missing folder is an
 * I/O error. Returns TFG_OK or TFG_ERR_IO. */
tfg_status tfg_ckpt_save(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt_entry *e,
                         int n, const tfg_ckpt_meta *meta, int nmeta);

/* A loaded checkpoint is a loaded safetensors file. */
typedef tfg_safetensors tfg_ckpt;

/* Reads and validates a safetensors file (tfg_safetensors_load: what the
 * reader refuses and why), every message naming the file; one that
 * cannot be opened or read is called a checkpoint ("cannot open
 * checkpoint 'PATH': ..."). Returns TFG_OK, TFG_ERR_IO (unreadable),
 * TFG_ERR_DATA (malformed) or TFG_ERR_NOMEM. */
tfg_status tfg_ckpt_load(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_ckpt **out);

/* The loaded file's tensors and metadata (io/safetensors.h). */
static inline void tfg_ckpt_free(tfg_ckpt *c) { tfg_safetensors_free(c); }
static inline int tfg_ckpt_count(const tfg_ckpt *c) { return tfg_safetensors_count(c); }
/* The index of the tensor name, or -1. */
static inline int tfg_ckpt_find(const tfg_ckpt *c, const char *name) {
  return tfg_safetensors_find(c, name);
}
static inline const tfg_ckpt_entry *tfg_ckpt_entry_at(const tfg_ckpt *c, int i) {
  return tfg_safetensors_tensor_at(c, i);
}
/* The metadata value for key, or NULL. */
static inline const char *tfg_ckpt_meta_get(const tfg_ckpt *c, const char *key) {
  return tfg_safetensors_meta_get(c, key);
}

/* Matches checkpoint c, read from path, against a run's persistent
 * tensors want[0..n) (names, dtypes and shapes; data unused): its nparams
 * params first, then their optimizer state, each named "PARAM:SLOT";
 * optimizer is the run's ("adam"). Loading is strict (LANGUAGE.md
 * section 6; docs/language-notes.md, "Resuming from a checkpoint"):
 *   - every param must be in c, with its dtype and shape;
 *   - the state is restored whole, or starts fresh when c holds none of
 *     it (a params-only file, from PyTorch say); part of it is an error
 *     naming the first key missing;
 *   - c's metadata "optimizer", when present and not optimizer: c's
 *     state was another optimizer's, so it is not used (a warning says
 *     so) and the run's starts fresh;
 *   - any other tensor of c is an error naming it;
 *   - *step: c's metadata "step" when the state is restored (0 when c has
 *     none), 0 when it starts fresh (Adam's bias correction counts from
 *     the state's first step); a step that is not a non-negative integer
 *     is an error.
 * at[i] is set to the index in c of want[i], or -1 for state that starts
 * fresh. Returns TFG_OK or TFG_ERR_DATA after one error at loc. */
tfg_status tfg_ckpt_match(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt *c,
                          const tfg_ckpt_entry *want, int n, int nparams, const char *optimizer,
                          int *at, int64_t *step);

/* Reads the file of load statement l in full (what tfg_ckpt_load
 * refuses, it refuses, calling it a "params file") and matches it
 * against the params ids[0..n) of g as tfg_safetensors_match does, with
 * l's strictness: the same errors the interpreter's check reports from
 * the header, now for the file as it is when the run reads it. On
 * success *out is the file (the caller frees it: tfg_ckpt_free) and at[i]
 * the index in it of ids[i]'s tensor, or -1 for a param it does not set.
 * Returns TFG_OK, TFG_ERR_IO (unreadable), TFG_ERR_DATA (malformed, or
 * not the params' file) or TFG_ERR_NOMEM, after reporting at l->loc. */
tfg_status tfg_ckpt_read_load(tfg_diag *d, const tfg_load *l, const tfg_graph *g, const tfg_node_id *ids, int n,
                              tfg_ckpt **out, int *at);

/* "F32" for TFG_DTYPE_F32, ... */
static inline const char *tfg_ckpt_dtype_name(tfg_dtype t) { return tfg_safetensors_dtype_name(t); }

#endif
