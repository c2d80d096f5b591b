/* runtime/ckpt.h: checkpoints in the safetensors format.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
 *   ..., "__metadata__": {"KEY": "VALUE", ...}}), then the raw little-endian
 * tensor bytes (offsets relative to the end of the header). Readable by the
 * safetensors Python package and by PyTorch (safetensors.torch.load_file).
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

typedef struct tfg_ckpt_entry {
  const char *name;
  tfg_dtype dtype;
  tfg_shape shape;
  const void *data; /* numel * dtype size bytes, little-endian */
} tfg_ckpt_entry;

typedef struct tfg_ckpt_meta {
  const char *key;
  const char *value;
} tfg_ckpt_meta;

/* Writes n tensors and nmeta metadata strings to path atomically. Names
 * must be unique (asserted). Creates no folders: a missing folder is an
 * I/O error. Returns TFG_OK or TFG_ERR_IO. */
tfg_status tfg_ckpt_save(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_ckpt_entry *e,
                         int n, const tfg_ckpt_meta *meta, int nmeta);

typedef struct tfg_ckpt tfg_ckpt;

/* Reads and validates a safetensors file: the header is well-formed JSON
 * of the shape above, dtypes are F32 F64 F16 BF16 I32 I64 BOOL (others,
 * like U8 or F8, are an error naming the key), offsets are in order,
 * within the file and match dtype x shape, and no two tensors overlap.
 * Returns TFG_OK, TFG_ERR_IO (unreadable) or TFG_ERR_DATA (malformed), the
 * error naming the file (and the key, for a bad entry). */
tfg_status tfg_ckpt_load(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_ckpt **out);
void tfg_ckpt_free(tfg_ckpt *c);

int tfg_ckpt_count(const tfg_ckpt *c);
int tfg_ckpt_find(const tfg_ckpt *c, const char *name);
const tfg_ckpt_entry *tfg_ckpt_entry_at(const tfg_ckpt *c, int i);
/* The metadata value for key, or NULL. */
const char *tfg_ckpt_meta_get(const tfg_ckpt *c, const char *key);

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

/* "F32" for TFG_DTYPE_F32, ... */
const char *tfg_ckpt_dtype_name(tfg_dtype t);

#endif
