/* io/safetensors.h: the safetensors format (huggingface/safetensors), in
 * which tfg saves checkpoints (runtime/ckpt.h): a header writer whose
 * bytes are the reference writer's, and a strict, bounded reader.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
 *   ..., "__metadata__": {"KEY": "VALUE", ...}}), then the raw little-endian
 * tensor bytes (offsets relative to the end of the header). Readable by the
 * safetensors Python package and by PyTorch (safetensors.torch.load_file).
 *
 *   tfg_safetensors_tensor t[] = {{"h.w", TFG_DTYPE_F32, {2, {64, 10}}, w_data}};
 *   tfg_safetensors_meta m[] = {{"step", "500"}};
 *   tfg_strbuf hdr = {0};
 *   tfg_safetensors_header(&hdr, t, 1, m, 1);
 *   // write hdr, then each tensor's tfg_safetensors_nbytes bytes, in order
 *
 *   tfg_safetensors *f;
 *   if (tfg_safetensors_load(d, &loc, "checkpoint", "m.safetensors", &f) == TFG_OK) {
 *     int i = tfg_safetensors_find(f, "h.w");               // -1 when absent
 *     const tfg_safetensors_tensor *w = tfg_safetensors_tensor_at(f, i);
 *     const char *step = tfg_safetensors_meta_get(f, "step"); // NULL when absent
 *     tfg_safetensors_free(f);
 *   }
 */
#ifndef TFG_SAFETENSORS_H
#define TFG_SAFETENSORS_H

#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "ir/graph.h"

typedef struct tfg_safetensors_tensor {
  const char *name;
  tfg_dtype dtype;
  tfg_shape shape;
  const void *data; /* numel * dtype size bytes, little-endian */
} tfg_safetensors_tensor;

typedef struct tfg_safetensors_meta {
  const char *key;
  const char *value;
} tfg_safetensors_meta;

/* "F32" for TFG_DTYPE_F32, ... (every tfg dtype has a safetensors name). */
const char *tfg_safetensors_dtype_name(tfg_dtype t);

/* numel x element size of a tensor of dtype t and shape s: its bytes in a
 * file, or -1 when that does not fit in int64 (a malformed file; in
 * memory no tensor is that big). A zero dimension makes it 0 whatever
 * the others are. */
int64_t tfg_safetensors_nbytes(tfg_dtype t, const tfg_shape *s);

/* Appends to b what comes before the tensor bytes: the 8-byte length and
 * the JSON header of n tensors, whose data follows back to back in this
 * order, and nmeta metadata strings (no "__metadata__" when nmeta is 0).
 * The arguments must make a file every reader accepts, which is
 * asserted: names and strings valid UTF-8, tensor names unique and not
 * "__metadata__", metadata keys unique, dtypes and shapes valid, data
 * present for every non-empty tensor. */
void tfg_safetensors_header(tfg_strbuf *b, const tfg_safetensors_tensor *e, int n,
                            const tfg_safetensors_meta *meta, int nmeta);

typedef struct tfg_safetensors tfg_safetensors;

/* Reads and validates the safetensors file path, with each tensor's data
 * in its own block: the header is well-formed JSON of the shape above,
 * dtypes are F32 F64 F16 BF16 I32 I64 BOOL (others, like U8 or F8, are an
 * error naming the key), offsets are in order, within the file and match
 * dtype x shape, and no two tensors overlap. what names the file's role
 * in the messages that cannot do without it ("cannot open checkpoint
 * 'm.st': ..."). Returns TFG_OK, TFG_ERR_IO (unreadable), TFG_ERR_DATA
 * (malformed) or TFG_ERR_NOMEM, after one error at loc naming the file
 * (and the key, for a bad entry). */
tfg_status tfg_safetensors_load(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path,
                                tfg_safetensors **out);
/* The same checks, reading the header only: every tensor's data is NULL.
 * The offsets are still checked against the file's size, so a truncated
 * file is refused without reading its tensors (what `tfg check` does). */
tfg_status tfg_safetensors_load_header(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path,
                                       tfg_safetensors **out);
void tfg_safetensors_free(tfg_safetensors *f);

/* The tensors in header order. */
int tfg_safetensors_count(const tfg_safetensors *f);
/* The index of the tensor named name, or -1 (a binary search). */
int tfg_safetensors_find(const tfg_safetensors *f, const char *name);
const tfg_safetensors_tensor *tfg_safetensors_tensor_at(const tfg_safetensors *f, int i);
/* The metadata value for key, or NULL. */
const char *tfg_safetensors_meta_get(const tfg_safetensors *f, const char *key);
/* When tensor i is named "PARAM:SLOT" and f has a tensor PARAM: that
 * tensor's index (i is PARAM's optimizer state, as tfg's checkpoints
 * name it); else -1. */
int tfg_safetensors_state_owner(const tfg_safetensors *f, int i);

/* Matches f, read from path, against the params ids[0..n) of graph g
 * (names, dtypes and shapes) for a `load` statement at loc (LANGUAGE.md
 * section 6; docs/language-notes.md, "load"):
 *   - a param f has no tensor for: an error when strict, else skipped;
 *   - a tensor of a param's name with another dtype or shape: always an
 *     error;
 *   - a tensor that is no param's: an error when strict, else skipped;
 *     optimizer state ("PARAM:SLOT", SLOT an identifier: h.w:exp_avg)
 *     is skipped either way, whatever its PARAM (the file's, the
 *     program's or neither's): strict compares params, as PyTorch's
 *     load_state_dict(strict=True) compares a model's keys, and a load
 *     sets no optimizer state; so a train's checkpoint loads as it is.
 * Each kind of error is reported once at loc, naming the first param or
 * tensor and counting the others. at[i] is set to the index in f of
 * ids[i]'s tensor, or -1 when it is skipped. Returns TFG_OK or
 * TFG_ERR_DATA. */
tfg_status tfg_safetensors_match(tfg_diag *d, const tfg_loc *loc, const char *path, const tfg_safetensors *f,
                                 const tfg_graph *g, const tfg_node_id *ids, int n, bool strict, int *at);

/* A string from a file (a name, a metadata value) as messages show it:
 * at most 64 code points, then "..."; controls and invisible characters
 * (tfg_utf8_is_unsafe) as \uXXXX, bytes that are not UTF-8 as \xNN, so a
 * hostile name cannot garble the terminal. The caller frees it. */
char *tfg_safetensors_show(const char *s);

#endif
