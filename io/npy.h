/* io/npy.h: NumPy .npy arrays (plain or .gz), read whole.
 *
 *   tfg_data_type type;
 *   tfg_shape shape;
 *   void *data;
 *   if (tfg_npy_read(d, &loc, "x.npy", &type, &shape, &data) != TFG_OK) return ...;
 *   ...  // tfg_shape_numel(&shape) elements of type, C order
 *   free(data);
 *
 * Accepted: format versions 1.0, 2.0 and 3.0; little-endian, C order;
 * dtypes '<f4' '<f8' '<i4' '<i8' '|u1' '|b1'; any rank up to
 * TFG_MAX_RANK (a 0-d array has rank 0). The header dict is parsed as the
 * Python literal it is (either quote, True/False, tuples or lists, Python
 * 2's "3L", trailing commas, unknown keys skipped); the data is read as it
 * arrives (io/reader.h), so a header claiming terabytes costs nothing. */
#ifndef TFG_NPY_H
#define TFG_NPY_H

#include "base/diag.h"
#include "base/status.h"
#include "ir/graph.h"
#include "io/data_type.h"

/* Reads the array in path: its type, shape and data (a new block the
 * caller frees; bools are 0 or 1). On failure one error was reported at
 * loc naming the file, and nothing is left to free: TFG_ERR_IO
 * (unreadable, not .npy, a malformed header, an unsupported dtype or
 * order, truncated data), TFG_ERR_LIMIT (rank above TFG_MAX_RANK),
 * TFG_ERR_NOMEM. */
tfg_status tfg_npy_read(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type *type,
                        tfg_shape *shape, void **data);

#endif
