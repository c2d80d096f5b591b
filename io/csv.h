/* io/csv.h: a .csv or .csv.gz of numbers, read whole into features and
 * an optional integer label column.
 *
 *   tfg_csv t;
 *   if (tfg_csv_read(d, &loc, "digits.csv.gz", -1, false, &t) != TFG_OK) return ...;
 *   // t.x: t.rows x t.nfeat f32, row-major; t.y: t.rows i32 labels
 *   free(t.x);
 *   free(t.y);
 *
 * Fields split at commas (no quoting), spaces and tabs around a field
 * ignored, blank lines skipped, CRLF and a UTF-8 BOM accepted, the last
 * newline optional; header skips the file's first line. A field is a
 * number as C's strtod reads it in the C locale (so also 1e-3, inf, nan,
 * hex); one that overflows f32 is an error. The label index counts from 0
 * (-1: the last column); messages count lines and columns from 1, and the
 * line is the physical line (header and blank lines included). The first
 * row fixes the column count. Lines may be long (the line buffer grows)
 * up to TFG_READER_MAX_LINE bytes (io/reader.h). */
#ifndef TFG_CSV_H
#define TFG_CSV_H

#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"

typedef struct tfg_csv {
  float *x;       /* rows x nfeat, row-major; never NULL after a read */
  int32_t *y;     /* rows labels; NULL without a label column */
  int64_t rows;   /* >= 1 */
  int64_t nfeat;  /* the columns other than the label */
} tfg_csv;

/* Reads path. label: the label column (negative counts from the end), or
 * INT32_MIN for none; the label must be a 32-bit integer. header: skip
 * the first line. On TFG_OK *out holds the data (the caller frees x and
 * y); otherwise one error was reported at loc naming the file, and *out
 * holds nothing to free: TFG_ERR_IO (unreadable, a field that is not a
 * number, ragged rows, no rows), TFG_ERR_SHAPE (label out of range),
 * TFG_ERR_LIMIT (a line too long), TFG_ERR_NOMEM. */
tfg_status tfg_csv_read(tfg_diag *d, const tfg_loc *loc, const char *path, int label, bool header,
                        tfg_csv *out);

#endif
