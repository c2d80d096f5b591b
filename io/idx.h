/* io/idx.h: IDX files of unsigned bytes (the MNIST format; plain or .gz).
 *
 *   int64_t dims[3];
 *   void *images;
 *   if (tfg_idx_read(d, &loc, "train-images-idx3-ubyte.gz", 3, "image", dims, &images) != TFG_OK)
 *     return ...;
 *   ...  // dims[0] x dims[1] x dims[2] bytes
 *   free(images);
 *
 * A file is a big-endian magic 0x0000080N (0x08: unsigned bytes; N: the
 * number of dimensions), N big-endian 32-bit dimensions, then the bytes.
 * The data is read as it arrives (io/reader.h), so a header claiming
 * terabytes costs nothing. */
#ifndef TFG_IDX_H
#define TFG_IDX_H

#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"

/* Reads an IDX file of unsigned bytes with want_dims dimensions (1 to 3):
 * dims[0..want_dims) and the data (a new block the caller frees). kind names
 * what the file should hold in the message for another magic ("image",
 * "label"). A first dimension of 0 (no rows) is an error. On failure one
 * error was reported at loc naming the file, and nothing is left to
 * free: TFG_ERR_IO or TFG_ERR_NOMEM. */
tfg_status tfg_idx_read(tfg_diag *d, const tfg_loc *loc, const char *path, int want_dims,
                        const char *kind, int64_t *dims, void **data);

#endif
