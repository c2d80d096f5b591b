/* io/data.c: datasets built from data files (csv, npy, idx: io/csv.h,
 * io/npy.h, io/idx.h), the train/test split, per-epoch orders and batch
 * fetching (LANGUAGE.md section 7).
 *
 * Split and order. The R rows of a dataset are numbered 0..R-1 in file
 * order. FY(n, s) is this Fisher-Yates shuffle of the identity [0, n):
 *
 *     for i = n-1 down to 1:
 *       j = tfg_rng_bits(s, i) % (i + 1);  swap a[i], a[j]
 *
 * (the modulo bias is below n / 2^64: irrelevant, and exactly
 * reproducible on every machine).
 *   - P = FY(R, seed) with shuffle, the identity without.
 *   - ntest = round(test * R) (halves away from zero), ntrain = R - ntest.
 *     The test split is P[ntrain .. R-1], the train split P[0 .. ntrain-1],
 *     both in P's order. test must lie in [0, 1) and leave ntrain >= 1.
 *   - Position i of the test split is file row P[ntrain + i] in every
 *     epoch: the test split is never reshuffled.
 *   - Position i of the train split in epoch e is file row P[i] for e = 0
 *     and always without shuffle; with shuffle and e >= 1 it is
 *     P[S_e[i]] with S_e = FY(ntrain, tfg_rng_bits(tfg_rng_mix(seed), e)),
 *     so every epoch has its own order and a row appears exactly once per
 *     epoch. Epochs are numbered from 0; a negative epoch is a caller bug.
 *   - tfg_data_fetch takes positions first .. first+n-1 modulo the split
 *     size (first may be anything, negative included).
 * Shuffled epoch orders are computed once and cached (two epochs, under a
 * mutex: the executor's threads may fetch concurrently, and prefetching
 * the next epoch must not evict the current one).
 *
 * Statuses. TFG_ERR_IO: a file that cannot be opened or read, and a file
 * whose content is malformed (not a number, ragged csv rows, a bad npy or
 * idx header, truncated data, an unsupported dtype, no rows). TFG_ERR_SHAPE:
 * files that disagree with each other or with the program (row counts of
 * columns, images vs labels, a label column out of range, a test split
 * that takes every row). TFG_ERR_NAME: a bad argument value (test outside
 * [0, 1), a column name given twice, no files). TFG_ERR_LIMIT: an npy of
 * rank above TFG_MAX_RANK, a csv line over TFG_READER_MAX_LINE bytes.
 * TFG_ERR_NOMEM: the data does not fit in host memory. Every failure
 * records exactly one error, at the data statement, naming the file.
 * The test fraction is checked before any file is read. Values are
 * converted as io/data_type.h says. */
#include "io/data.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/rng.h"
#include "base/strbuf.h"
#include "io/csv.h"
#include "io/idx.h"
#include "io/npy.h"

/* ---- the dataset -------------------------------------------------------- */

typedef struct data_column {
  char *name;
  char *path;        /* the file it was read from, for messages */
  tfg_data_type type;
  tfg_shape row;     /* shape of one row */
  int64_t row_elems; /* elements per row */
  void *data;        /* rows * row_elems elements, file order */
} data_column;

/* Cached train orders of shuffled epochs (file rows, ntrain each). */
#define DATA_EPOCH_SLOTS 2
typedef struct data_epochs {
  pthread_mutex_t mu;
  struct {
    int64_t epoch; /* -1: empty */
    uint64_t used; /* last use, for LRU eviction */
    int64_t *order;
  } slot[DATA_EPOCH_SLOTS];
  uint64_t tick;
} data_epochs;

struct tfg_dataset {
  data_column *cols;
  int ncols;
  int64_t rows, ntrain, ntest;
  int64_t *perm; /* P; NULL: the identity (no shuffle) */
  bool shuffle;
  uint64_t seed;
  data_epochs *epochs; /* NULL without shuffle */
};

tfg_data_opts tfg_data_opts_default(void) {
  tfg_data_opts o = {.test = 0.0, .shuffle = false, .seed = 0};
  return o;
}

static tfg_dataset *dataset_new(void) {
  tfg_dataset *ds = calloc(1, sizeof *ds);
  TFG_ASSERT(ds != NULL);
  return ds;
}

void tfg_data_free(tfg_dataset *ds) {
  if (!ds) return;
  for (int i = 0; i < ds->ncols; i++) {
    free(ds->cols[i].name);
    free(ds->cols[i].path);
    free(ds->cols[i].data);
  }
  free(ds->cols);
  free(ds->perm);
  if (ds->epochs) {
    for (int i = 0; i < DATA_EPOCH_SLOTS; i++) free(ds->epochs->slot[i].order);
    pthread_mutex_destroy(&ds->epochs->mu);
    free(ds->epochs);
  }
  free(ds);
}

/* Adds a column; takes ownership of data (freed with ds even on failure
 * paths, since the caller frees ds). */
static void dataset_add(tfg_dataset *ds, const char *name, const char *path, tfg_data_type type,
                        const tfg_shape *row, void *data) {
  data_column *v = realloc(ds->cols, sizeof *v * (size_t)(ds->ncols + 1));
  TFG_ASSERT(v != NULL);
  ds->cols = v;
  data_column *c = &ds->cols[ds->ncols++];
  c->name = strdup(name);
  c->path = strdup(path);
  TFG_ASSERT(c->name != NULL && c->path != NULL);
  c->type = type;
  c->row = *row;
  c->row_elems = tfg_shape_numel(row);
  c->data = data;
}

/* FY(n, stream) applied in place to a[0..n): see the file comment. */
static void fisher_yates(int64_t *a, int64_t n, uint64_t stream) {
  for (int64_t i = n - 1; i >= 1; i--) {
    int64_t j = (int64_t)(tfg_rng_bits(stream, (uint64_t)i) % (uint64_t)(i + 1));
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

/* Checks the test fraction before any file is read (a bad option should
 * not wait for a 100 MB download to be parsed). what names the files. */
static tfg_status check_test_fraction(tfg_diag *d, const tfg_loc *loc, const tfg_data_opts *o,
                                      const char *what) {
  if (!(o->test >= 0.0 && o->test < 1.0)) { /* NaN fails too */
    tfg_diag_error(d, loc, "%s: test = %g is outside [0, 1)", what, o->test);
    tfg_diag_help(d, "test is the fraction of rows held out, e.g. test = 0.2");
    return TFG_ERR_NAME;
  }
  return TFG_OK;
}

/* Sets rows, the split and P once every column is in. */
static tfg_status dataset_split(tfg_dataset *ds, tfg_diag *d, const tfg_loc *loc,
                                const tfg_data_opts *o, int64_t rows, const char *what) {
  ds->rows = rows;
  ds->ntest = (int64_t)llround(o->test * (double)rows);
  if (ds->ntest > rows) ds->ntest = rows;
  ds->ntrain = rows - ds->ntest;
  if (ds->ntrain < 1) {
    tfg_diag_error(d, loc, "%s: test = %g takes all %lld rows; none are left for training", what,
                   o->test, (long long)rows);
    return TFG_ERR_SHAPE;
  }
  ds->shuffle = o->shuffle;
  ds->seed = o->seed;
  if (!o->shuffle) return TFG_OK;
  if ((uint64_t)rows > SIZE_MAX / sizeof(int64_t) ||
      !(ds->perm = malloc(sizeof *ds->perm * (size_t)rows))) {
    tfg_diag_error(d, loc, "%s: out of memory for the order of %lld rows", what, (long long)rows);
    return TFG_ERR_NOMEM;
  }
  for (int64_t i = 0; i < rows; i++) ds->perm[i] = i;
  fisher_yates(ds->perm, rows, o->seed);
  ds->epochs = calloc(1, sizeof *ds->epochs);
  TFG_ASSERT(ds->epochs != NULL);
  pthread_mutex_init(&ds->epochs->mu, NULL);
  for (int i = 0; i < DATA_EPOCH_SLOTS; i++) ds->epochs->slot[i].epoch = -1;
  return TFG_OK;
}

/* ---- datasets from files ------------------------------------------------ */

tfg_status tfg_data_csv(tfg_diag *d, const tfg_loc *loc, const char *path, int label, bool header,
                        const tfg_data_opts *o, tfg_dataset **out) {
  TFG_ASSERT(d && path && out);
  *out = NULL;
  tfg_data_opts def = tfg_data_opts_default();
  if (!o) o = &def;
  tfg_strbuf what = {0};
  tfg_strbuf_printf(&what, "'%s'", path);
  tfg_status st = check_test_fraction(d, loc, o, what.data);
  tfg_csv t;
  if (st == TFG_OK) st = tfg_csv_read(d, loc, path, label, header, &t);
  if (st != TFG_OK) {
    tfg_strbuf_free(&what);
    return st;
  }
  tfg_dataset *ds = dataset_new();
  tfg_shape xs = {.rank = 1, .dim = {t.nfeat}}, ys = {.rank = 0};
  dataset_add(ds, "x", path, TFG_DATA_F32, &xs, t.x);
  if (t.y) dataset_add(ds, "y", path, TFG_DATA_I32, &ys, t.y);
  st = dataset_split(ds, d, loc, o, t.rows, what.data);
  if (st != TFG_OK)
    tfg_data_free(ds);
  else
    *out = ds;
  tfg_strbuf_free(&what);
  return st;
}

tfg_status tfg_data_npy(tfg_diag *d, const tfg_loc *loc, int ncols, const char *const *names,
                        const char *const *paths, const tfg_data_opts *o, tfg_dataset **out) {
  TFG_ASSERT(d && out && (ncols == 0 || (names && paths)));
  *out = NULL;
  tfg_data_opts def = tfg_data_opts_default();
  if (!o) o = &def;
  if (ncols < 1) {
    tfg_diag_error(d, loc, "npy: no files given (name at least one column, e.g. x = \"x.npy\")");
    return TFG_ERR_NAME;
  }
  for (int i = 0; i < ncols; i++)
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0) {
        tfg_diag_error(d, loc, "npy: column '%s' is given twice ('%s' and '%s')", names[i],
                       paths[j], paths[i]);
        return TFG_ERR_NAME;
      }
  tfg_strbuf what = {0};
  tfg_strbuf_printf(&what, "'%s'", paths[0]);
  if (ncols > 1) tfg_strbuf_printf(&what, " (and %d more)", ncols - 1);
  tfg_status st = check_test_fraction(d, loc, o, what.data);
  tfg_dataset *ds = st == TFG_OK ? dataset_new() : NULL;
  int64_t rows = -1;
  for (int i = 0; st == TFG_OK && i < ncols; i++) {
    tfg_data_type type;
    tfg_shape shape;
    void *data;
    st = tfg_npy_read(d, loc, paths[i], &type, &shape, &data);
    if (st != TFG_OK) break;
    const char *bad = shape.rank == 0 ? "holds a 0-d array (shape ()); a column needs a first dimension of rows"
                    : shape.dim[0] == 0 ? "has no rows (shape[0] is 0)" : NULL;
    if (bad) {
      tfg_diag_error(d, loc, "'%s' %s", paths[i], bad);
      free(data);
      st = TFG_ERR_IO;
      break;
    }
    if (rows >= 0 && shape.dim[0] != rows) {
      tfg_diag_error(d, loc, "'%s' has %lld rows but '%s' has %lld; columns need the same rows",
                     paths[i], (long long)shape.dim[0], paths[0], (long long)rows);
      free(data);
      st = TFG_ERR_SHAPE;
      break;
    }
    rows = shape.dim[0];
    tfg_shape row = {.rank = shape.rank - 1};
    for (int k = 1; k < shape.rank; k++) row.dim[k - 1] = shape.dim[k];
    dataset_add(ds, names[i], paths[i], type, &row, data);
  }
  if (st == TFG_OK) st = dataset_split(ds, d, loc, o, rows, what.data);
  if (st == TFG_OK) *out = ds;
  else tfg_data_free(ds);
  tfg_strbuf_free(&what);
  return st;
}

tfg_status tfg_data_npy_read(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type *type,
                             tfg_shape *shape, void **data) {
  return tfg_npy_read(d, loc, path, type, shape, data);
}

tfg_status tfg_data_idx(tfg_diag *d, const tfg_loc *loc, const char *images, const char *labels,
                        const tfg_data_opts *o, tfg_dataset **out) {
  TFG_ASSERT(d && out);
  *out = NULL;
  tfg_data_opts def = tfg_data_opts_default();
  if (!o) o = &def;
  if (!images && !labels) {
    tfg_diag_error(d, loc, "idx: give images, labels or both");
    return TFG_ERR_NAME;
  }
  tfg_strbuf what = {0};
  tfg_strbuf_printf(&what, "'%s'", images ? images : labels);
  tfg_status st = check_test_fraction(d, loc, o, what.data);
  tfg_dataset *ds = NULL;
  void *img = NULL, *lab = NULL;
  int64_t idim[3] = {0}, ldim[1] = {0};
  if (st == TFG_OK && images) st = tfg_idx_read(d, loc, images, 3, "image", idim, &img);
  if (st == TFG_OK && labels) st = tfg_idx_read(d, loc, labels, 1, "label", ldim, &lab);
  if (st == TFG_OK && images && labels && idim[0] != ldim[0]) {
    tfg_diag_error(d, loc, "'%s' has %lld images but '%s' has %lld labels", images,
                   (long long)idim[0], labels, (long long)ldim[0]);
    st = TFG_ERR_SHAPE;
  }
  if (st == TFG_OK) {
    ds = dataset_new();
    if (images) {
      tfg_shape s = {.rank = 2, .dim = {idim[1], idim[2]}};
      dataset_add(ds, "images", images, TFG_DATA_U8, &s, img);
      img = NULL;
    }
    if (labels) {
      tfg_shape s = {.rank = 0};
      dataset_add(ds, "labels", labels, TFG_DATA_U8, &s, lab);
      lab = NULL;
    }
    st = dataset_split(ds, d, loc, o, images ? idim[0] : ldim[0], what.data);
  }
  if (st == TFG_OK) *out = ds;
  else tfg_data_free(ds);
  free(img);
  free(lab);
  tfg_strbuf_free(&what);
  return st;
}

/* ---- queries ------------------------------------------------------------ */

int tfg_data_column(const tfg_dataset *ds, const char *name) {
  for (int i = 0; i < ds->ncols; i++)
    if (strcmp(ds->cols[i].name, name) == 0) return i;
  return -1;
}

int tfg_data_ncolumns(const tfg_dataset *ds) { return ds->ncols; }

const char *tfg_data_column_name(const tfg_dataset *ds, int col) {
  TFG_ASSERT(col >= 0 && col < ds->ncols);
  return ds->cols[col].name;
}

tfg_data_type tfg_data_column_type(const tfg_dataset *ds, int col) {
  TFG_ASSERT(col >= 0 && col < ds->ncols);
  return ds->cols[col].type;
}

tfg_shape tfg_data_row_shape(const tfg_dataset *ds, int col) {
  TFG_ASSERT(col >= 0 && col < ds->ncols);
  return ds->cols[col].row;
}

int64_t tfg_data_rows(const tfg_dataset *ds, tfg_split split) {
  return split == TFG_SPLIT_TEST ? ds->ntest : ds->ntrain;
}

tfg_status tfg_data_check_column(tfg_diag *d, const tfg_loc *loc, const tfg_dataset *ds, int col, tfg_dtype dt) {
  TFG_ASSERT(ds && col >= 0 && col < ds->ncols);
  const data_column *c = &ds->cols[col];
  tfg_shape all = {.rank = c->row.rank + 1, .dim = {ds->rows}}; /* every row, in file order */
  TFG_ASSERT(all.rank <= TFG_MAX_RANK);
  for (int k = 0; k < c->row.rank; k++) all.dim[k + 1] = c->row.dim[k];
  return tfg_data_check_values(d, loc, c->path, c->type, &all, c->data, dt);
}

const char *tfg_data_column_path(const tfg_dataset *ds, int col) {
  TFG_ASSERT(col >= 0 && col < ds->ncols);
  return ds->cols[col].path;
}

/* ---- fetch -------------------------------------------------------------- */

/* The train order (file rows) of shuffled epoch e >= 1. Called with the
 * epochs mutex held; the pointer stays valid until the mutex is released. */
static const int64_t *epoch_order(const tfg_dataset *ds, int64_t epoch) {
  data_epochs *ep = ds->epochs;
  int victim = 0;
  for (int i = 0; i < DATA_EPOCH_SLOTS; i++) {
    if (ep->slot[i].epoch == epoch) {
      ep->slot[i].used = ++ep->tick;
      return ep->slot[i].order;
    }
    if (ep->slot[i].used < ep->slot[victim].used) victim = i;
  }
  if (!ep->slot[victim].order) {
    ep->slot[victim].order = malloc(sizeof(int64_t) * (size_t)ds->ntrain);
    TFG_ASSERT(ep->slot[victim].order != NULL);
  }
  int64_t *order = ep->slot[victim].order;
  memcpy(order, ds->perm, sizeof(int64_t) * (size_t)ds->ntrain);
  fisher_yates(order, ds->ntrain, tfg_rng_bits(tfg_rng_mix(ds->seed), (uint64_t)epoch));
  ep->slot[victim].epoch = epoch;
  ep->slot[victim].used = ++ep->tick;
  return order;
}

void tfg_data_fetch(const tfg_dataset *ds, tfg_split split, int col, int64_t epoch, int64_t first,
                    int64_t n, tfg_dtype dt, void *dst) {
  TFG_ASSERT(ds && col >= 0 && col < ds->ncols && n >= 0 && epoch >= 0);
  const data_column *c = &ds->cols[col];
  TFG_ASSERT(tfg_data_convertible(c->type, dt));
  if (n == 0 || c->row_elems == 0) return;
  int64_t m = split == TFG_SPLIT_TEST ? ds->ntest : ds->ntrain;
  TFG_ASSERT(m > 0); /* fetching from an empty test split is the caller's bug */
  int64_t pos = first % m;
  if (pos < 0) pos += m;
  size_t srow = (size_t)c->row_elems * tfg_data_type_size(c->type);
  size_t drow = (size_t)c->row_elems * tfg_dtype_size(dt);
  const char *src = c->data;
  char *out = dst;

  if (split == TFG_SPLIT_TRAIN && ds->shuffle && epoch > 0) {
    /* Copy file rows out of the cached order a chunk at a time, so the
     * lock is held only for index lookups, not for the copies. */
    int64_t idx[256];
    for (int64_t k = 0; k < n;) {
      int64_t cnt = n - k < 256 ? n - k : 256;
      pthread_mutex_lock(&ds->epochs->mu);
      const int64_t *order = epoch_order(ds, epoch);
      for (int64_t j = 0; j < cnt; j++) {
        idx[j] = order[pos];
        if (++pos == m) pos = 0;
      }
      pthread_mutex_unlock(&ds->epochs->mu);
      for (int64_t j = 0; j < cnt; j++, k++)
        tfg_data_convert(c->type, src + (size_t)idx[j] * srow, dt, out + (size_t)k * drow, c->row_elems);
    }
    return;
  }
  int64_t base = split == TFG_SPLIT_TEST ? ds->ntrain : 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t r = base + pos;
    if (ds->perm) r = ds->perm[r];
    tfg_data_convert(c->type, src + (size_t)r * srow, dt, out + (size_t)k * drow, c->row_elems);
    if (++pos == m) pos = 0;
  }
}
