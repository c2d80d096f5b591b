/* io/data.h: datasets: named columns read from csv, npy or idx files,
 * the train/test split, per-epoch shuffling and batching (LANGUAGE.md
 * section 7).
 *
 *   tfg_data_opts o = tfg_data_opts_default();   // test 0, no shuffle, seed 0
 *   o.test = 0.2; o.shuffle = true; o.seed = 7;
 *   tfg_dataset *ds;
 *   if (tfg_data_csv(d, &loc, "digits.csv.gz", -1, false, &o, &ds) != TFG_OK) ...
 *   int x = tfg_data_column(ds, "x");            // features, f32 [rows, cols-1]
 *   tfg_data_fetch(ds, TFG_SPLIT_TRAIN, x, epoch, first, batch, TFG_DTYPE_F32, dst);
 *   tfg_data_free(ds);
 *
 * A dataset is a set of named columns with the same number of rows. Row r
 * of a column is an array of its row shape. All rows are held in memory.
 * Errors (missing file, malformed file, dtype or shape trouble) are
 * reported to the diagnostics sink at the given location (the data
 * statement), with the file name and, for text, the line. Only regular
 * files are read: a FIFO, a device or a directory is refused by name
 * (opening never blocks). The formats themselves are io/csv.h, io/npy.h
 * and io/idx.h; the element types and their conversions io/data_type.h. */
#ifndef TFG_DATA_H
#define TFG_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
#include "ir/graph.h"
#include "io/data_type.h"
#include "ir/program.h" /* tfg_split: the program names the split each input reads */

typedef struct tfg_data_opts {
  double test;   /* fraction of rows held out for the test split, in [0, 1) */
  bool shuffle;  /* shuffle before splitting and again every epoch */
  uint64_t seed;
} tfg_data_opts;

tfg_data_opts tfg_data_opts_default(void); /* a NULL opts means these too */

typedef struct tfg_dataset tfg_dataset;

/* Reads a .csv or .csv.gz of numbers. label: the label column (negative
 * counts from the end), or INT32_MIN for none. Columns: "x" f32 [rows,
 * ncols - 1] (every other column) and, with a label, "y" i32 [rows]
 * (the label must be an integer). header: skip the first line. */
tfg_status tfg_data_csv(tfg_diag *d, const tfg_loc *loc, const char *path, int label, bool header,
                        const tfg_data_opts *o, tfg_dataset **out);

/* Reads .npy arrays (format 1.0, 2.0 or 3.0, little-endian, C order;
 * f4 f8 i4 i8 u1 b1), one column per (name, path); all must have the same
 * first dimension (rows). */
tfg_status tfg_data_npy(tfg_diag *d, const tfg_loc *loc, int ncols, const char *const *names,
                        const char *const *paths, const tfg_data_opts *o, tfg_dataset **out);

/* Reads one whole .npy array of any rank (a 0-d array has rank 0), for
 * --feed: its type, shape and data (a new block the caller frees). The
 * same as tfg_npy_read (io/npy.h). */
tfg_status tfg_data_npy_read(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type *type,
                             tfg_shape *shape, void **data);

/* Reads MNIST IDX files (optionally .gz): images (u8, 3 dims, magic
 * 0x00000803) and labels (u8, 1 dim, magic 0x00000801), either may be
 * NULL. Columns "images" u8 [rows, h, w] and "labels" u8 [rows]. */
tfg_status tfg_data_idx(tfg_diag *d, const tfg_loc *loc, const char *images, const char *labels,
                        const tfg_data_opts *o, tfg_dataset **out);

void tfg_data_free(tfg_dataset *ds);

/* Column index by name, or -1. */
int tfg_data_column(const tfg_dataset *ds, const char *name);
int tfg_data_ncolumns(const tfg_dataset *ds);
const char *tfg_data_column_name(const tfg_dataset *ds, int col);
tfg_data_type tfg_data_column_type(const tfg_dataset *ds, int col);
/* The file a column was read from (an npy dataset has one per column). */
const char *tfg_data_column_path(const tfg_dataset *ds, int col);
/* The shape of one row (rank 0 for a scalar per row). */
tfg_shape tfg_data_row_shape(const tfg_dataset *ds, int col);
/* Rows in a split. */
int64_t tfg_data_rows(const tfg_dataset *ds, tfg_split split);

/* Whether every value of column col fits dtype dt (tfg_data_check_values
 * of io/data_type.h over all its rows, in file order, naming the column's
 * file): TFG_OK, or TFG_ERR_SHAPE after an error. Run it before fetching
 * the column into dt. */
tfg_status tfg_data_check_column(tfg_diag *d, const tfg_loc *loc, const tfg_dataset *ds, int col, tfg_dtype dt);

/* Copies n rows of column col of split, converted to dtype dt, into dst
 * (n * row elements): rows first .. first + n - 1 of the split in the
 * order of the given epoch (>= 0). Row positions wrap around the split
 * (so any first is valid). Order: with shuffle, a permutation P of all
 * rows drawn from seed splits them (the test split is P's last rows, in
 * P's order, every epoch); epoch 0 of the train split is in P's order and
 * each later epoch is a permutation of it drawn from (seed, epoch).
 * Without shuffle: file order. The caller checked tfg_data_convertible
 * and that the split is not empty (both are asserted). Safe to call from
 * several threads at once. */
void tfg_data_fetch(const tfg_dataset *ds, tfg_split split, int col, int64_t epoch, int64_t first,
                    int64_t n, tfg_dtype dt, void *dst);

#endif
