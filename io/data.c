/* io/data.c: datasets: csv, npy and idx readers, the train/test
 * split, per-epoch orders and batch fetching (LANGUAGE.md section 7).
 *
 * Every file is read through zlib (gzdopen/gzread), which passes plain
 * files through untouched, so "x.csv", "x.csv.gz", "x.npy.gz" and
 * "train-images-idx3-ubyte.gz" all work the same way. Memory grows with
 * the data actually read, never with what a header claims: an npy or idx
 * header announcing terabytes costs nothing unless the bytes are there.
 * CSV lines may be long (the line buffer grows) up to DATA_MAX_LINE bytes.
 *
 * CSV: fields split at commas (no quoting), spaces and tabs around a field
 * ignored, blank lines skipped, CRLF and a UTF-8 BOM accepted, the last
 * newline optional; header skips the file's first line. A field is a number
 * as C's strtod reads it in the C locale (so also 1e-3, inf, nan, hex);
 * one that overflows f32 is an error. The label index counts from 0 (-1:
 * the last column); messages count lines and columns from 1, and the line
 * is the physical line (header and blank lines included). The first row
 * fixes the column count.
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
 * rank above TFG_MAX_RANK, a csv line over DATA_MAX_LINE bytes.
 * TFG_ERR_NOMEM: the data does not fit in host memory. Every failure
 * records exactly one error, at the data statement, naming the file.
 *
 * Conversions (tfg_data_fetch): same type: a copy. u8, i32, i64 and bool
 * to f32/f64/f16/bf16 by value (i64 to f32 with one rounding; i64 beyond
 * 2^53 to f16/bf16 may round twice, through f64). f32 and f64 to any float
 * dtype with one round-to-nearest-even (f16 and bf16 are rounded straight
 * from the exact value; overflow gives inf). u8, bool, i32 and i64 to
 * i32/i64 by value. i64 to i32 is refused for a value out of range, by
 * tfg_data_check_values before any fetch (a label of 2^40 is a mistake to
 * report, not one to clamp); the conversion itself saturates, so a caller
 * that skipped the check still gets no undefined behaviour. bool to bool. */
#include "io/data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/rng.h"
#include "base/strbuf.h"
#include "base/utf8.h"

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

static size_t type_size(tfg_data_type t) {
  switch (t) {
  case TFG_DATA_F32: case TFG_DATA_I32: return 4;
  case TFG_DATA_F64: case TFG_DATA_I64: return 8;
  case TFG_DATA_U8: case TFG_DATA_BOOL: return 1;
  }
  TFG_ASSERT(!"bad tfg_data_type");
  return 0;
}

const char *tfg_data_type_name(tfg_data_type t) {
  switch (t) {
  case TFG_DATA_F32: return "f32";
  case TFG_DATA_F64: return "f64";
  case TFG_DATA_I32: return "i32";
  case TFG_DATA_I64: return "i64";
  case TFG_DATA_U8: return "u8";
  case TFG_DATA_BOOL: return "bool";
  }
  return "?";
}

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

/* ---- files -------------------------------------------------------------- */

/* An open input file; errors are reported at loc naming path. */
typedef struct data_file {
  gzFile gz;
  const char *path;
  tfg_diag *d;
  const tfg_loc *loc;
  /* Line reading (csv) only: */
  char *buf;
  size_t pos, len;
  bool eof;
} data_file;

#define DATA_LINE_CHUNK 65536
/* Longest csv line accepted (~50 million columns): past it the file is
 * surely not csv (or is /dev/zero), and we stop before memory runs out. */
#define DATA_MAX_LINE (256u * 1024u * 1024u)

/* What a file that is not a regular one is, for "cannot open". */
/* Opens path for reading. We open the descriptor ourselves so that a
 * missing file reports errno exactly (gzopen may clobber it). Only
 * regular files are read: a FIFO would block until a writer came (open
 * is non-blocking so that even the open cannot hang), and a device like
 * /dev/zero never ends. */
static tfg_status file_open(data_file *f, tfg_diag *d, const tfg_loc *loc, const char *path) {
  memset(f, 0, sizeof *f);
  f->path = path;
  f->d = d;
  f->loc = loc;
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(path, &st, &why);
  if (fd < 0) {
    tfg_diag_error(d, loc, "cannot open '%s': %s", path, why);
    return TFG_ERR_IO;
  }
  f->gz = gzdopen(fd, "rb");
  if (!f->gz) {
    close(fd);
    tfg_diag_error(d, loc, "cannot open '%s': %s", path, strerror(ENOMEM));
    return TFG_ERR_IO;
  }
  gzbuffer(f->gz, 256 * 1024); /* fewer system calls than zlib's 8 KB */
  return TFG_OK;
}

static void file_close(data_file *f) {
  if (f->gz) gzclose_r(f->gz);
  free(f->buf);
  f->gz = NULL;
  f->buf = NULL;
}

/* Reports the zlib (or system) error that stopped a read. */
static void file_read_error(data_file *f) {
  int errnum = Z_OK;
  const char *msg = gzerror(f->gz, &errnum);
  if (errnum == Z_ERRNO) {
    msg = strerror(errno);
  } else if (errnum == Z_BUF_ERROR) {
    msg = "unexpected end of compressed data";
  } else if (msg && strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ")) {
    msg = strstr(msg, ": ") + 2; /* zlib prefixes "<fd:N>: " for gzdopen files */
  }
  tfg_diag_error(f->d, f->loc, "cannot read '%s': %s", f->path,
                 msg && *msg ? msg : "read error");
}

/* Reads up to n bytes into buf: returns how many (fewer only at the end
 * of the file), or -1 after reporting an error (including a truncated or
 * corrupt .gz). */
static int64_t file_read(data_file *f, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got;
    unsigned chunk = want > (1u << 30) ? (1u << 30) : (unsigned)want;
    int r = gzread(f->gz, (char *)buf + got, chunk);
    if (r < 0) {
      file_read_error(f);
      return -1;
    }
    if (r == 0) {
      int errnum = Z_OK;
      gzerror(f->gz, &errnum);
      if (errnum != Z_OK) {
        file_read_error(f);
        return -1;
      }
      break;
    }
    got += (size_t)r;
  }
  return (int64_t)got;
}

/* Reads the next line, without its '\n', into line (cleared first).
 * Returns 1 for a line, 0 at the end of the file, -1 after a reported
 * error, -2 for a line longer than DATA_MAX_LINE (not reported: the caller
 * knows the line number). A last line without '\n' still counts. */
static int file_getline(data_file *f, tfg_strbuf *line) {
  tfg_strbuf_clear(line);
  if (!f->buf) {
    f->buf = malloc(DATA_LINE_CHUNK);
    TFG_ASSERT(f->buf != NULL);
  }
  bool any = false;
  for (;;) {
    if (f->pos == f->len) {
      if (f->eof) return any ? 1 : 0;
      int64_t r = file_read(f, f->buf, DATA_LINE_CHUNK);
      if (r < 0) return -1;
      f->pos = 0;
      f->len = (size_t)r;
      if (r < DATA_LINE_CHUNK) f->eof = true;
      continue;
    }
    char *start = f->buf + f->pos;
    char *nl = memchr(start, '\n', f->len - f->pos);
    size_t n = nl ? (size_t)(nl - start) : f->len - f->pos;
    if (line->len + n > DATA_MAX_LINE) return -2;
    tfg_strbuf_putn(line, start, n);
    any = true;
    f->pos += n + (nl != NULL);
    if (nl) return 1;
  }
}

/* Reads exactly n bytes of array data into a new buffer (*out, caller
 * frees). The buffer grows as bytes arrive instead of being sized from
 * the header, so a lying header cannot make us allocate what the file
 * does not hold. */
static tfg_status read_payload(data_file *f, uint64_t n, void **out) {
  *out = NULL;
  size_t cap = n < (1u << 20) ? (size_t)n : (size_t)1 << 20;
  char *buf = malloc(cap ? cap : 1);
  if (!buf) goto oom;
  uint64_t got = 0;
  for (;;) {
    int64_t r = file_read(f, buf + got, cap - (size_t)got);
    if (r < 0) {
      free(buf);
      return TFG_ERR_IO;
    }
    got += (uint64_t)r;
    if (got < cap || got == n) break;
    /* Full and more expected: grow (doubling, capped at n). */
    size_t ncap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    if (ncap > n) ncap = (size_t)n;
    char *nb = realloc(buf, ncap);
    if (!nb) {
      free(buf);
      goto oom;
    }
    buf = nb;
    cap = ncap;
  }
  if (got < n) {
    free(buf);
    tfg_diag_error(f->d, f->loc, "'%s' is truncated: expected %llu bytes of data, found %llu",
                   f->path, (unsigned long long)n, (unsigned long long)got);
    return TFG_ERR_IO;
  }
  *out = buf;
  return TFG_OK;
oom:
  tfg_diag_error(f->d, f->loc, "out of memory reading '%s' (%llu bytes)", f->path,
                 (unsigned long long)n);
  return TFG_ERR_NOMEM;
}

/* Grows *p (elements of esz bytes, capacity *cap) to hold need elements. */
static bool vec_reserve(void **p, size_t *cap, size_t need, size_t esz) {
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap : 256;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) return false;
    ncap *= 2;
  }
  if (ncap > SIZE_MAX / (esz ? esz : 1)) return false;
  size_t bytes = ncap * esz;
  void *np = realloc(*p, bytes ? bytes : 1);
  if (!np) return false;
  *p = np;
  *cap = ncap;
  return true;
}

static bool host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* Reverses the bytes of each of n elements of size esz. */
static void swap_bytes(void *data, uint64_t n, size_t esz) {
  unsigned char *p = data;
  for (uint64_t i = 0; i < n; i++, p += esz)
    for (size_t a = 0, b = esz - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* ---- csv ---------------------------------------------------------------- */

static bool csv_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Field text for a message, formatted into b: at most 40 bytes of it,
 * then "...". Bytes a terminal would not show are escaped: a NUL as \0,
 * other controls and bytes that are not UTF-8 as \xNN, invisible and
 * direction-changing characters as \uXXXX; a backslash as \\. So '2\0'
 * is not mistaken for '2'. */
static const char *csv_show(tfg_strbuf *b, const char *s, size_t n) {
  tfg_strbuf_clear(b);
  tfg_strbuf_putn(b, "", 0);
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n && i < 40) {
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, n - i, &cp);
    if (len > 0 && i + (size_t)len > 40) break; /* never cut a character */
    if (p[i] == '\\') tfg_strbuf_puts(b, "\\\\");
    else if (p[i] == 0) tfg_strbuf_puts(b, "\\0");
    else if (len == 0 || (cp < 0x80 && tfg_utf8_is_unsafe(cp))) tfg_strbuf_printf(b, "\\x%02x", p[i]);
    else if (tfg_utf8_is_unsafe(cp)) tfg_strbuf_printf(b, "\\u%04x", (unsigned)cp);
    else tfg_strbuf_putn(b, s + i, (size_t)len);
    i += len ? (size_t)len : 1;
  }
  if (i < n) tfg_strbuf_puts(b, "...");
  return b->data;
}

/* Parses [s, e) as a whole number (C strtod in the C locale: decimal,
 * exponent, hex floats, inf, nan). Returns 0 ok, 1 not a number, 2 out of
 * range for a double. e must be writable (it is NUL'ed for strtod and
 * restored). */
static int csv_number(char *s, char *e, double *v) {
  if (s == e) return 1;
  char save = *e;
  *e = '\0';
  errno = 0;
  char *end;
  double x = strtod(s, &end);
  int err = errno;
  *e = save;
  if (end != e) return 1;
  if (err == ERANGE && isinf(x)) return 2;
  *v = x;
  return 0;
}

tfg_status tfg_data_csv(tfg_diag *d, const tfg_loc *loc, const char *path, int label, bool header,
                        const tfg_data_opts *o, tfg_dataset **out) {
  TFG_ASSERT(d && path && out);
  *out = NULL;
  tfg_data_opts def = tfg_data_opts_default();
  if (!o) o = &def;
  tfg_strbuf what = {0};
  tfg_strbuf_printf(&what, "'%s'", path);
  tfg_status st = check_test_fraction(d, loc, o, what.data);
  if (st != TFG_OK) {
    tfg_strbuf_free(&what);
    return st;
  }

  data_file f;
  st = file_open(&f, d, loc, path);
  if (st != TFG_OK) {
    tfg_strbuf_free(&what);
    return st;
  }
  tfg_strbuf line = {0}, show = {0};
  float *x = NULL;
  int32_t *y = NULL;
  size_t xcap = 0, ycap = 0;
  int64_t rows = 0, lineno = 0, ncols = -1, nfeat = 0, labcol = -1, first_line = 0;
  int r;
  while ((r = file_getline(&f, &line)) > 0) {
    lineno++;
    char *s = line.data, *end = line.data + line.len;
    if (lineno == 1 && line.len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3; /* BOM */
    if (header && lineno == 1) continue;
    char *t = s;
    while (t < end && csv_space(*t)) t++;
    if (t == end) continue; /* blank line */

    /* Count fields first: a ragged row is reported as such even when a
     * field is also bad. */
    int64_t nf = 1;
    for (char *c = s; (c = memchr(c, ',', (size_t)(end - c))) != NULL; c++) nf++;
    if (ncols < 0) {
      ncols = nf;
      first_line = lineno;
      if (label != INT32_MIN) {
        labcol = label < 0 ? ncols + label : label;
        if (labcol < 0 || labcol >= ncols) {
          tfg_diag_error(d, loc, "%s:%lld: label column %d is out of range for %lld columns",
                         path, (long long)lineno, label, (long long)ncols);
          tfg_diag_help(d, "label counts columns from 0; negative values count from the end "
                           "(-1 is the last column)");
          st = TFG_ERR_SHAPE;
          goto done;
        }
      }
      nfeat = labcol >= 0 ? ncols - 1 : ncols;
    } else if (nf != ncols) {
      tfg_diag_error(d, loc, "%s:%lld: expected %lld columns, found %lld", path,
                     (long long)lineno, (long long)ncols, (long long)nf);
      tfg_diag_note(d, NULL, "%s:%lld: the first row has %lld columns", path,
                    (long long)first_line, (long long)ncols);
      st = TFG_ERR_IO;
      goto done;
    }
    if ((uint64_t)(rows + 1) > SIZE_MAX / ((size_t)nfeat + 1) ||
        !vec_reserve((void **)&x, &xcap, (size_t)(rows + 1) * (size_t)nfeat, sizeof *x) ||
        (labcol >= 0 && !vec_reserve((void **)&y, &ycap, (size_t)rows + 1, sizeof *y))) {
      tfg_diag_error(d, loc, "out of memory reading '%s' (%lld rows)", path, (long long)rows);
      st = TFG_ERR_NOMEM;
      goto done;
    }
    float *xrow = x + (size_t)rows * (size_t)nfeat;
    char *p = s;
    for (int64_t col = 0, fi = 0; col < ncols; col++) {
      char *q = memchr(p, ',', (size_t)(end - p));
      if (!q) q = end;
      char *a = p, *b = q;
      while (a < b && csv_space(*a)) a++;
      while (b > a && csv_space(b[-1])) b--;
      double v = 0;
      int bad = csv_number(a, b, &v);
      if (bad == 0 && col != labcol && isfinite(v) && !isfinite((float)v)) bad = 2;
      if (bad == 1 && a == b) {
        tfg_diag_error(d, loc, "%s:%lld: column %lld is empty", path, (long long)lineno,
                       (long long)col + 1);
        st = TFG_ERR_IO;
        goto done;
      }
      if (bad) {
        tfg_diag_error(d, loc, "%s:%lld: column %lld: '%s' is %s", path, (long long)lineno,
                       (long long)col + 1, csv_show(&show, a, (size_t)(b - a)),
                       bad == 1 ? "not a number" : "out of range for f32");
        st = TFG_ERR_IO;
        goto done;
      }
      if (col == labcol) {
        if (!(v == trunc(v) && v >= INT32_MIN && v <= INT32_MAX)) {
          tfg_diag_error(d, loc, "%s:%lld: column %lld: label '%s' is not %s", path,
                         (long long)lineno, (long long)col + 1,
                         csv_show(&show, a, (size_t)(b - a)),
                         v == trunc(v) && isfinite(v) ? "a 32-bit integer" : "an integer");
          st = TFG_ERR_IO;
          goto done;
        }
        y[rows] = (int32_t)v;
      } else {
        xrow[fi++] = (float)v;
      }
      p = q + 1;
    }
    rows++;
  }
  if (r == -2) {
    tfg_diag_error(d, loc, "%s:%lld: line is longer than %u bytes", path, (long long)lineno + 1,
                   DATA_MAX_LINE);
    st = TFG_ERR_LIMIT;
    goto done;
  }
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  if (rows == 0) {
    tfg_diag_error(d, loc, "'%s' has no rows%s", path,
                   header && lineno >= 1 ? " (only a header line)" : "");
    st = TFG_ERR_IO;
    goto done;
  }

  if (!x) { /* no feature columns (only a label): keep data non-NULL */
    x = malloc(1);
    TFG_ASSERT(x != NULL);
  }
  tfg_dataset *ds = dataset_new();
  tfg_shape xs = {.rank = 1, .dim = {nfeat}}, ys = {.rank = 0};
  dataset_add(ds, "x", path, TFG_DATA_F32, &xs, x);
  x = NULL;
  if (labcol >= 0) {
    dataset_add(ds, "y", path, TFG_DATA_I32, &ys, y);
    y = NULL;
  }
  st = dataset_split(ds, d, loc, o, rows, what.data);
  if (st != TFG_OK)
    tfg_data_free(ds);
  else
    *out = ds;
done:
  free(x);
  free(y);
  tfg_strbuf_free(&line);
  tfg_strbuf_free(&show);
  tfg_strbuf_free(&what);
  file_close(&f);
  return st;
}

/* ---- npy ---------------------------------------------------------------- */

/* The header dict of an .npy file is a Python literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }. This is a
 * small recursive-descent reader for that literal: strings in either
 * quote, True/False, tuples (and lists) of integers (Python 2 numpy wrote
 * "3L"), any whitespace, trailing commas; unknown keys are skipped. */
typedef struct npy_parser {
  const char *p, *end;
  const char *err; /* first error, a static string */
} npy_parser;

typedef struct npy_header {
  bool has_descr, has_fortran, has_shape;
  bool descr_structured; /* descr was a list: a structured dtype */
  char descr[32];
  bool fortran;
  int rank;
  int64_t dim[TFG_MAX_RANK];
  bool rank_too_big;
} npy_header;

static void np_ws(npy_parser *h) {
  while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
    h->p++;
}

static bool np_fail(npy_parser *h, const char *err) {
  if (!h->err) h->err = err;
  return false;
}

static bool np_expect(npy_parser *h, char c, const char *err) {
  np_ws(h);
  if (h->p < h->end && *h->p == c) {
    h->p++;
    return true;
  }
  return np_fail(h, err);
}

/* A quoted string; *s, *n: its raw contents (escapes left as written). */
static bool np_string(npy_parser *h, const char **s, size_t *n) {
  np_ws(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return np_fail(h, "expected a string");
  char q = *h->p++;
  const char *start = h->p;
  while (h->p < h->end && *h->p != q) h->p += (*h->p == '\\' && h->p + 1 < h->end) ? 2 : 1;
  if (h->p >= h->end) return np_fail(h, "unterminated string");
  *s = start;
  *n = (size_t)(h->p - start);
  h->p++;
  return true;
}

static bool np_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '+' || c == '-';
}

/* A bare word (True, None, 12, -1.5e3): *s, *n. */
static bool np_word(npy_parser *h, const char **s, size_t *n) {
  np_ws(h);
  const char *start = h->p;
  while (h->p < h->end && np_word_char(*h->p)) h->p++;
  if (h->p == start) return np_fail(h, "expected a value");
  *s = start;
  *n = (size_t)(h->p - start);
  return true;
}

/* Skips any value: string, word, or bracketed (nested) sequence. */
static bool np_skip(npy_parser *h, int depth) {
  np_ws(h);
  if (depth > 16) return np_fail(h, "values nested too deeply");
  if (h->p >= h->end) return np_fail(h, "unexpected end of header");
  const char *s;
  size_t n;
  char c = *h->p;
  if (c == '\'' || c == '"') return np_string(h, &s, &n);
  if (c != '(' && c != '[' && c != '{') return np_word(h, &s, &n);
  char close = c == '(' ? ')' : c == '[' ? ']' : '}';
  h->p++;
  for (;;) {
    np_ws(h);
    if (h->p < h->end && *h->p == close) {
      h->p++;
      return true;
    }
    if (!np_skip(h, depth + 1)) return false;
    np_ws(h);
    if (h->p < h->end && (*h->p == ',' || *h->p == ':')) h->p++;
    else if (h->p >= h->end || *h->p != close) return np_fail(h, "unbalanced brackets");
  }
}

/* A non-negative integer, optionally with Python 2's L suffix. */
static bool np_int(npy_parser *h, int64_t *v) {
  np_ws(h);
  const char *start = h->p;
  int64_t x = 0;
  while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
    int dgt = *h->p++ - '0';
    if (x > (INT64_MAX - dgt) / 10) return np_fail(h, "a dimension is too large");
    x = x * 10 + dgt;
  }
  if (h->p == start) return np_fail(h, "expected a non-negative integer in 'shape'");
  if (h->p < h->end && (*h->p == 'L' || *h->p == 'l')) h->p++;
  *v = x;
  return true;
}

static bool np_shape(npy_parser *h, npy_header *hd) {
  np_ws(h);
  if (h->p >= h->end || (*h->p != '(' && *h->p != '['))
    return np_fail(h, "'shape' is not a tuple");
  char close = *h->p++ == '(' ? ')' : ']';
  hd->rank = 0;
  for (;;) {
    np_ws(h);
    if (h->p < h->end && *h->p == close) {
      h->p++;
      break;
    }
    int64_t v;
    if (!np_int(h, &v)) return false;
    if (hd->rank < TFG_MAX_RANK) hd->dim[hd->rank] = v;
    else hd->rank_too_big = true;
    if (hd->rank < INT_MAX) hd->rank++;
    np_ws(h);
    if (h->p < h->end && *h->p == ',') h->p++;
    else if (h->p >= h->end || *h->p != close) return np_fail(h, "expected ',' or ')' in 'shape'");
  }
  hd->has_shape = true;
  return true;
}

static bool np_key_is(const char *s, size_t n, const char *key) {
  return n == strlen(key) && memcmp(s, key, n) == 0;
}

static bool npy_parse_header(npy_parser *h, npy_header *hd) {
  memset(hd, 0, sizeof *hd);
  if (!np_expect(h, '{', "the header is not a dict ('{' expected)")) return false;
  for (;;) {
    np_ws(h);
    if (h->p < h->end && *h->p == '}') {
      h->p++;
      break;
    }
    const char *k, *s;
    size_t kn, n;
    if (!np_string(h, &k, &kn)) return false;
    if (!np_expect(h, ':', "expected ':' after a key")) return false;
    np_ws(h);
    if (np_key_is(k, kn, "descr")) {
      if (h->p < h->end && (*h->p == '[' || *h->p == '(')) {
        if (!np_skip(h, 0)) return false;
        hd->descr_structured = true;
      } else {
        if (!np_string(h, &s, &n)) return false;
        if (n >= sizeof hd->descr) n = sizeof hd->descr - 1;
        memcpy(hd->descr, s, n);
        hd->descr[n] = '\0';
      }
      hd->has_descr = true;
    } else if (np_key_is(k, kn, "fortran_order")) {
      if (!np_word(h, &s, &n)) return false;
      if (np_key_is(s, n, "True")) hd->fortran = true;
      else if (np_key_is(s, n, "False")) hd->fortran = false;
      else return np_fail(h, "'fortran_order' is not True or False");
      hd->has_fortran = true;
    } else if (np_key_is(k, kn, "shape")) {
      if (!np_shape(h, hd)) return false;
    } else if (!np_skip(h, 0)) {
      return false;
    }
    np_ws(h);
    if (h->p < h->end && *h->p == ',') h->p++;
    else if (h->p >= h->end || *h->p != '}') return np_fail(h, "expected ',' or '}' in the dict");
  }
  np_ws(h);
  while (h->p < h->end && *h->p == '\0') h->p++; /* some writers pad with NUL */
  if (h->p != h->end) return np_fail(h, "unexpected text after the dict");
  if (!hd->has_descr) return np_fail(h, "no 'descr' key");
  if (!hd->has_fortran) return np_fail(h, "no 'fortran_order' key");
  if (!hd->has_shape) return np_fail(h, "no 'shape' key");
  return true;
}

#define NPY_SUPPORTED "'<f4' '<f8' '<i4' '<i8' '|u1' '|b1'"

/* Maps a descr string to a type; false if unsupported. */
static bool npy_type(const char *descr, tfg_data_type *t) {
  static const struct {
    const char *descr;
    tfg_data_type t;
  } map[] = {{"<f4", TFG_DATA_F32}, {"<f8", TFG_DATA_F64}, {"<i4", TFG_DATA_I32},
             {"<i8", TFG_DATA_I64}, {"|u1", TFG_DATA_U8},  {"|b1", TFG_DATA_BOOL}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(descr, map[i].descr) == 0) {
      *t = map[i].t;
      return true;
    }
  return false;
}

/* Reads one .npy file of any rank (0-d included): its type, full shape
 * and data (caller frees). */
static tfg_status npy_read(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type *type,
                           npy_header *hd, void **data) {
  *data = NULL;
  data_file f;
  tfg_status st = file_open(&f, d, loc, path);
  if (st != TFG_OK) return st;
  unsigned char pre[12];
  char *text = NULL;
  int64_t r = file_read(&f, pre, 10);
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  if (r < 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    tfg_diag_error(d, loc, "'%s' is not a .npy file (no \\x93NUMPY magic)", path);
    st = TFG_ERR_IO;
    goto done;
  }
  unsigned major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0) {
    tfg_diag_error(d, loc, "'%s': unsupported .npy format version %u.%u (1.0, 2.0 and 3.0 are)",
                   path, major, minor);
    st = TFG_ERR_IO;
    goto done;
  }
  uint32_t hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
  if (major >= 2) { /* 4-byte header length */
    r = file_read(&f, pre + 10, 2);
    if (r < 0) {
      st = TFG_ERR_IO;
      goto done;
    }
    if (r < 2) goto truncated;
    hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
  }
  if (hlen > (1u << 20)) { /* real headers are ~100 bytes */
    tfg_diag_error(d, loc, "'%s': .npy header of %u bytes is implausibly long", path, hlen);
    st = TFG_ERR_IO;
    goto done;
  }
  text = malloc(hlen + 1);
  TFG_ASSERT(text != NULL);
  r = file_read(&f, text, hlen);
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  if ((uint32_t)r < hlen) goto truncated;
  npy_parser h = {.p = text, .end = text + hlen};
  if (!npy_parse_header(&h, hd)) {
    tfg_diag_error(d, loc, "'%s': malformed .npy header: %s (at byte %ld of the header)", path,
                   h.err, (long)(h.p - text));
    st = TFG_ERR_IO;
    goto done;
  }
  if (hd->descr_structured) {
    tfg_diag_error(d, loc, "'%s': structured dtypes are not supported (supported: %s)", path,
                   NPY_SUPPORTED);
    st = TFG_ERR_IO;
    goto done;
  }
  if (hd->descr[0] == '>' || hd->descr[0] == '!') {
    tfg_diag_error(d, loc, "'%s' holds big-endian data ('%s'); only little-endian is supported",
                   path, hd->descr);
    tfg_diag_help(d, "convert before saving: np.save(path, a.astype(a.dtype.newbyteorder('<')))");
    st = TFG_ERR_IO;
    goto done;
  }
  if (!npy_type(hd->descr, type)) {
    tfg_diag_error(d, loc, "'%s': dtype '%s' is not supported (supported: %s)", path, hd->descr,
                   NPY_SUPPORTED);
    st = TFG_ERR_IO;
    goto done;
  }
  if (hd->fortran) {
    tfg_diag_error(d, loc, "'%s' is in Fortran order; only C order is supported", path);
    tfg_diag_help(d, "save np.ascontiguousarray(a) instead");
    st = TFG_ERR_IO;
    goto done;
  }
  if (hd->rank_too_big || hd->rank > TFG_MAX_RANK) {
    tfg_diag_error(d, loc, "'%s' has rank %d; at most %d is supported", path, hd->rank,
                   TFG_MAX_RANK);
    st = TFG_ERR_LIMIT;
    goto done;
  }
  /* Element count, with overflow checks: the header is untrusted. */
  size_t esz = type_size(*type);
  uint64_t numel = 1;
  for (int i = 0; i < hd->rank; i++) {
    uint64_t dm = (uint64_t)hd->dim[i];
    if (dm && numel > (uint64_t)INT64_MAX / esz / dm) {
      tfg_diag_error(d, loc, "'%s': the shape in the header is too large", path);
      st = TFG_ERR_IO;
      goto done;
    }
    numel *= dm;
  }
  if (numel * esz > SIZE_MAX) {
    tfg_diag_error(d, loc, "out of memory reading '%s'", path);
    st = TFG_ERR_NOMEM;
    goto done;
  }
  st = read_payload(&f, numel * esz, data);
  if (st != TFG_OK) goto done;
  if (esz > 1 && !host_little_endian()) swap_bytes(*data, numel, esz);
  if (*type == TFG_DATA_BOOL) { /* keep the 0/1 invariant of TFG_DTYPE_BOOL */
    unsigned char *b = *data;
    for (uint64_t i = 0; i < numel; i++) b[i] = b[i] != 0;
  }
  goto done;
truncated:
  tfg_diag_error(d, loc, "'%s' is truncated inside its .npy header", path);
  st = TFG_ERR_IO;
done:
  free(text);
  file_close(&f);
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
    npy_header hd;
    void *data;
    st = npy_read(d, loc, paths[i], &type, &hd, &data);
    if (st != TFG_OK) break;
    const char *bad = hd.rank == 0 ? "holds a 0-d array (shape ()); a column needs a first dimension of rows"
                    : hd.dim[0] == 0 ? "has no rows (shape[0] is 0)" : NULL;
    if (bad) {
      tfg_diag_error(d, loc, "'%s' %s", paths[i], bad);
      free(data);
      st = TFG_ERR_IO;
      break;
    }
    if (rows >= 0 && hd.dim[0] != rows) {
      tfg_diag_error(d, loc, "'%s' has %lld rows but '%s' has %lld; columns need the same rows",
                     paths[i], (long long)hd.dim[0], paths[0], (long long)rows);
      free(data);
      st = TFG_ERR_SHAPE;
      break;
    }
    rows = hd.dim[0];
    tfg_shape row = {.rank = hd.rank - 1};
    for (int k = 1; k < hd.rank; k++) row.dim[k - 1] = hd.dim[k];
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
  TFG_ASSERT(d && path && type && shape && data);
  npy_header hd;
  tfg_status st = npy_read(d, loc, path, type, &hd, data);
  if (st != TFG_OK) return st;
  shape->rank = hd.rank;
  for (int i = 0; i < hd.rank; i++) shape->dim[i] = hd.dim[i];
  return TFG_OK;
}

/* ---- idx ---------------------------------------------------------------- */

/* Reads an IDX file of unsigned bytes with want_dims dimensions (magic
 * 0x0000080N): dims and data (caller frees). */
static tfg_status idx_read(tfg_diag *d, const tfg_loc *loc, const char *path, int want_dims,
                           const char *kind, int64_t *dims, void **data) {
  *data = NULL;
  data_file f;
  tfg_status st = file_open(&f, d, loc, path);
  if (st != TFG_OK) return st;
  unsigned char hdr[16];
  size_t hlen = 4 + 4 * (size_t)want_dims;
  uint32_t want = 0x800u | (uint32_t)want_dims;
  int64_t r = file_read(&f, hdr, 4);
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  uint32_t magic = r < 4 ? 0 : (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                                   (uint32_t)hdr[2] << 8 | hdr[3];
  if (r < 4 || hdr[0] != 0 || hdr[1] != 0) {
    tfg_diag_error(d, loc, "'%s' is not an IDX file (bad magic number)", path);
    st = TFG_ERR_IO;
    goto done;
  }
  if (hdr[2] != 0x08) {
    tfg_diag_error(d, loc, "'%s': IDX element type 0x%02x is not supported (only unsigned bytes, "
                   "0x08)", path, hdr[2]);
    st = TFG_ERR_IO;
    goto done;
  }
  if (magic != want) {
    tfg_diag_error(d, loc, "'%s' is not an IDX %s file: magic 0x%08x, expected 0x%08x (%d "
                   "dimension%s)", path, kind, magic, want, want_dims, want_dims == 1 ? "" : "s");
    st = TFG_ERR_IO;
    goto done;
  }
  r = file_read(&f, hdr + 4, hlen - 4);
  if (r < 0) {
    st = TFG_ERR_IO;
    goto done;
  }
  if ((size_t)r < hlen - 4) {
    tfg_diag_error(d, loc, "'%s' is truncated inside its IDX header", path);
    st = TFG_ERR_IO;
    goto done;
  }
  uint64_t numel = 1;
  for (int i = 0; i < want_dims; i++) {
    const unsigned char *p = hdr + 4 + 4 * i;
    dims[i] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
    uint64_t dm = (uint64_t)dims[i];
    if (dm && numel > (uint64_t)INT64_MAX / dm) {
      tfg_diag_error(d, loc, "'%s': the dimensions in the IDX header are too large", path);
      st = TFG_ERR_IO;
      goto done;
    }
    numel *= dm;
  }
  if (dims[0] == 0) {
    tfg_diag_error(d, loc, "'%s' has no rows (its count is 0)", path);
    st = TFG_ERR_IO;
    goto done;
  }
  if (numel > SIZE_MAX) {
    tfg_diag_error(d, loc, "out of memory reading '%s'", path);
    st = TFG_ERR_NOMEM;
    goto done;
  }
  st = read_payload(&f, numel, data);
done:
  file_close(&f);
  return st;
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
  if (st == TFG_OK && images) st = idx_read(d, loc, images, 3, "image", idim, &img);
  if (st == TFG_OK && labels) st = idx_read(d, loc, labels, 1, "label", ldim, &lab);
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

bool tfg_data_convertible(tfg_data_type t, tfg_dtype dt) {
  if (tfg_dtype_is_float(dt)) return true; /* every data type is numeric or bool */
  if (tfg_dtype_is_int(dt)) return t != TFG_DATA_F32 && t != TFG_DATA_F64;
  if (dt == TFG_DTYPE_BOOL) return t == TFG_DATA_BOOL;
  return false;
}

/* ---- range -------------------------------------------------------------- */

/* The index of the first of n elements of type t at src that dtype dt
 * cannot hold, or -1. Only i64 into i32 can fail: u8, bool and i32 fit
 * every integer dtype, and floats into a narrower float round (or go to
 * inf) as NumPy's astype does. */
static int64_t first_out_of_range(tfg_data_type t, const void *src, int64_t n, tfg_dtype dt) {
  if (t != TFG_DATA_I64 || dt != TFG_DTYPE_I32) return -1;
  const int64_t *v = src;
  for (int64_t i = 0; i < n; i++)
    if (v[i] < INT32_MIN || v[i] > INT32_MAX) return i;
  return -1;
}

tfg_status tfg_data_check_values(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type t,
                                 const tfg_shape *shape, const void *data, tfg_dtype dt) {
  TFG_ASSERT(d && path && shape && data);
  int64_t i = first_out_of_range(t, data, tfg_shape_numel(shape), dt);
  if (i < 0) return TFG_OK;
  int64_t idx[TFG_MAX_RANK], rest = i; /* i as a NumPy index into shape */
  for (int k = shape->rank - 1; k >= 0; k--) {
    idx[k] = rest % shape->dim[k];
    rest /= shape->dim[k];
  }
  tfg_strbuf at = {0};
  for (int k = 0; k < shape->rank; k++) tfg_strbuf_printf(&at, "%s%lld", k ? ", " : "", (long long)idx[k]);
  tfg_diag_error(d, loc, "'%s': the value at [%s] is %lld, out of range for %s (%d to %d)", path, at.data ? at.data : "",
                 (long long)((const int64_t *)data)[i], tfg_dtype_name(dt), INT32_MIN, INT32_MAX);
  tfg_diag_help(d, "tfg neither wraps nor clamps such values: fix the data, or declare the input i64");
  tfg_strbuf_free(&at);
  return TFG_ERR_SHAPE;
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

/* The bits of x rounded to nearest even in a 16-bit float with mant
 * mantissa bits and exponent bias bias (f16: 10, 15; bf16: 7, 127),
 * straight from the double so there is one rounding only. */
static uint16_t half_bits(double x, int mant, int bias) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  uint16_t inf = (uint16_t)((2 * bias + 1) << mant);
  if (isnan(x)) return (uint16_t)(sign | inf | (1u << (mant - 1)));
  double a = fabs(x);
  /* At or past the midpoint between the largest finite value and 2^(bias+1). */
  if (a >= ldexp(2.0 - ldexp(1.0, -(mant + 1)), bias)) return sign | inf;
  if (a == 0) return sign;
  int k;
  frexp(a, &k);
  int e = k - 1; /* a in [2^e, 2^(e+1)) */
  if (e < 1 - bias) /* subnormal: count units of the smallest subnormal */
    return (uint16_t)(sign | (uint16_t)rint(ldexp(a, bias - 1 + mant)));
  /* r in [2^mant, 2^(mant+1)]; a carry into the exponent is the right answer. */
  int64_t r = (int64_t)rint(ldexp(a, mant - e));
  return (uint16_t)(sign | (uint16_t)(((int64_t)(e + bias) << mant) + r - ((int64_t)1 << mant)));
}

static int32_t sat_i32(int64_t v) {
  return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

/* One loop per (source, destination) pair: EXPR converts v of type ST. */
#define DATA_LOOP(ST, DT, EXPR)                     \
  do {                                              \
    const ST *s_ = src;                             \
    DT *o_ = dst;                                   \
    for (int64_t i_ = 0; i_ < n; i_++) {            \
      ST v = s_[i_];                                \
      o_[i_] = (EXPR);                              \
    }                                               \
  } while (0)

#define DATA_FROM_ANY(DT, EXPR)                                      \
  switch (t) {                                                      \
  case TFG_DATA_F32: DATA_LOOP(float, DT, EXPR); break;             \
  case TFG_DATA_F64: DATA_LOOP(double, DT, EXPR); break;            \
  case TFG_DATA_I32: DATA_LOOP(int32_t, DT, EXPR); break;           \
  case TFG_DATA_I64: DATA_LOOP(int64_t, DT, EXPR); break;           \
  case TFG_DATA_U8: case TFG_DATA_BOOL: DATA_LOOP(uint8_t, DT, EXPR); break; \
  }

void tfg_data_convert(tfg_data_type t, const void *src, tfg_dtype dt, void *dst, int64_t n) {
  static const int same[] = {[TFG_DATA_F32] = TFG_DTYPE_F32, [TFG_DATA_F64] = TFG_DTYPE_F64,
                             [TFG_DATA_I32] = TFG_DTYPE_I32, [TFG_DATA_I64] = TFG_DTYPE_I64,
                             [TFG_DATA_U8] = -1,             [TFG_DATA_BOOL] = TFG_DTYPE_BOOL};
  if (same[t] == (int)dt) {
    memcpy(dst, src, (size_t)n * type_size(t));
    return;
  }
  switch (dt) {
  case TFG_DTYPE_F32: DATA_FROM_ANY(float, (float)v); break;
  case TFG_DTYPE_F64: DATA_FROM_ANY(double, (double)v); break;
  case TFG_DTYPE_F16: DATA_FROM_ANY(uint16_t, half_bits((double)v, 10, 15)); break;
  case TFG_DTYPE_BF16: DATA_FROM_ANY(uint16_t, half_bits((double)v, 7, 127)); break;
  case TFG_DTYPE_I32: DATA_FROM_ANY(int32_t, sat_i32((int64_t)v)); break;
  case TFG_DTYPE_I64: DATA_FROM_ANY(int64_t, (int64_t)v); break;
  case TFG_DTYPE_BOOL: DATA_FROM_ANY(uint8_t, (uint8_t)(v != 0)); break;
  case TFG_DTYPE_COUNT: TFG_ASSERT(!"bad dtype"); break;
  }
}

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
  size_t srow = (size_t)c->row_elems * type_size(c->type);
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
