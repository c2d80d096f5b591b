/* io/safetensors_impl.h: what io/safetensors.c (the file: writing,
 * reading, lookups) and io/safetensors_parse.c (its JSON header) share.
 * For those two files only. */
#ifndef TFG_SAFETENSORS_IMPL_H
#define TFG_SAFETENSORS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

struct tfg_safetensors {
  tfg_safetensors_tensor *e; /* header order; names and data are owned */
  int n, cap;
  int *by_name;               /* indices of e sorted by name: find is a binary search */
  tfg_safetensors_meta *meta; /* header order; keys and values are owned */
  int nmeta, metacap;
  int *meta_by_key; /* indices of meta sorted by key */
};

/* Parses the header text[0..len) of the file path (text[len] == '\0')
 * into f, which starts empty: its tensors (names, dtypes and shapes; no
 * data yet), its metadata, and the indexes by_name and meta_by_key; then
 * checks the tensors' offsets against the datalen bytes after the header
 * (they must tile them exactly). On success *order is a new array (the
 * caller frees it) of the tensors' indices sorted by offset: the order
 * their bytes come in. On failure one error was recorded at loc, *order
 * is NULL, and f holds what was parsed, for tfg_safetensors_free. */
bool tfg_safetensors_parse_header(tfg_diag *d, const tfg_loc *loc, const char *path,
                                  const unsigned char *text, size_t len, uint64_t datalen,
                                  tfg_safetensors *f, int **order);

#endif
