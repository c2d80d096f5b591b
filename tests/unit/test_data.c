/* tests/unit/test_data.c: datasets: csv, npy and idx readers, the split,
 * per-epoch orders, batch fetching and conversions, and every error.
 *
 * Fixtures are written by the tests themselves (npy and idx byte by
 * byte, .gz through zlib) into the scratch folder of tests/unit/scratch.h,
 * removed when the test case ends. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/rng.h"
#include "io/data.h"
#include "tests/unit/scratch.h"
#include "tests/unit/unit.h"

/* ---- fixture ------------------------------------------------------------ */

static tfg_diag *D;
static tfg_loc L; /* the "data statement" every error points at */

static void setup(void) {
  D = tfg_diag_new();
  const char *prog = "let d = csv(\"x.csv\")\n";
  const tfg_source *src = tfg_diag_add_source(D, "prog.tfg", prog, strlen(prog));
  L = tfg_source_loc(src, 8, 12);
}

static void teardown(void) {
  tfg_diag_free(D);
  D = NULL;
}

static const char *write_text(const char *name, const char *text) {
  return scratch_write(name, text, strlen(text));
}

static const char *write_gz(const char *name, const void *data, size_t len) {
  const char *p = scratch_path(name);
  gzFile g = gzopen(p, "wb");
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(gzwrite(g, data, (unsigned)len), (int)len);
  ck_assert_int_eq(gzclose(g), Z_OK);
  return p;
}

/* Renders D without colour into a heap string. */
static char *render(void) { return test_render(D, false); }

/* Checks a failed load: status want, no dataset, exactly one error at the
 * data statement whose text holds a and b (b may be NULL); then clears D. */
static void expect_fail(tfg_status st, tfg_dataset *ds, tfg_status want, const char *a,
                        const char *b) {
  char *out = render();
  if (st != want || ds != NULL || tfg_diag_error_count(D) != 1 || !strstr(out, a) ||
      (b && !strstr(out, b)) || !strstr(out, "prog.tfg:1:9: error: "))
    ck_abort_msg("status %d (want %d), %zu errors, wanted '%s' and '%s' in:\n%s", (int)st,
                 (int)want, tfg_diag_error_count(D), a, b ? b : "", out);
  free(out);
  tfg_data_free(ds);
  tfg_diag_clear(D);
}

static void expect_ok(tfg_status st, tfg_dataset *ds) {
  if (st != TFG_OK || !ds) {
    char *out = render();
    ck_abort_msg("load failed (%d):\n%s", (int)st, out);
  }
  ck_assert_uint_eq(tfg_diag_error_count(D), 0);
}

/* The load runs before ds is read (argument order is unspecified). */
#define EXPECT_OK(call, ds)     \
  do {                          \
    tfg_status st_ = (call);    \
    expect_ok(st_, ds);         \
  } while (0)

static tfg_data_opts opts(double test, bool shuffle, uint64_t seed) {
  tfg_data_opts o = tfg_data_opts_default();
  o.test = test;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

/* ---- npy and idx writers (byte by byte, little-endian by hand) ----------- */

typedef struct bytes {
  unsigned char *p;
  size_t len, cap;
} bytes;

static void put(bytes *b, const void *s, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    ck_assert_ptr_nonnull(b->p);
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void put_byte(bytes *b, unsigned v) {
  unsigned char c = (unsigned char)v;
  put(b, &c, 1);
}

/* The low n bytes of v, least significant first. */
static void put_le(bytes *b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) put_byte(b, (unsigned)(v >> (8 * i)) & 0xFF);
}

static void put_be32(bytes *b, uint32_t v) {
  for (int i = 3; i >= 0; i--) put_byte(b, (v >> (8 * i)) & 0xFF);
}

static void put_f32(bytes *b, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_le(b, u, 4);
}

static void put_f64(bytes *b, double f) {
  uint64_t u;
  memcpy(&u, &f, 8);
  put_le(b, u, 8);
}

/* An .npy preamble: magic, version major.0, header length, then dict
 * padded with spaces and '\n' to a multiple of 64 bytes overall. */
static void npy_begin(bytes *b, int major, const char *dict) {
  put(b, "\x93NUMPY", 6);
  put_byte(b, (unsigned)major);
  put_byte(b, 0);
  size_t pre = major == 1 ? 10 : 12;
  size_t hlen = strlen(dict) + 1;
  while ((pre + hlen) % 64) hlen++;
  put_le(b, hlen, major == 1 ? 2 : 4);
  put(b, dict, strlen(dict));
  for (size_t i = strlen(dict); i < hlen - 1; i++) put_byte(b, ' ');
  put_byte(b, '\n');
}

static char *npy_dict(const char *descr, const char *shape) {
  static char buf[256];
  snprintf(buf, sizeof buf, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
           shape);
  return buf;
}

static const char *write_bytes(const char *name, bytes *b, bool gz) {
  const char *p = gz ? write_gz(name, b->p, b->len) : scratch_write(name, b->p, b->len);
  free(b->p);
  memset(b, 0, sizeof *b);
  return p;
}

/* ---- csv ---------------------------------------------------------------- */

START_TEST(csv_header_and_label) {
  const char *p = write_text("d.csv", "a,b,c,label\n1,2.5,-3,0\n4,5,6,1\n7e-1, 8 ,9,2\n");
  tfg_data_opts o = tfg_data_opts_default();
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_csv(D, &L, p, -1, true, &o, &ds), ds);
  ck_assert_int_eq(tfg_data_ncolumns(ds), 2);
  int x = tfg_data_column(ds, "x"), y = tfg_data_column(ds, "y");
  ck_assert_int_eq(x, 0);
  ck_assert_int_eq(y, 1);
  ck_assert_int_eq(tfg_data_column(ds, "z"), -1);
  ck_assert_str_eq(tfg_data_column_name(ds, y), "y");
  ck_assert_int_eq(tfg_data_column_type(ds, x), TFG_DATA_F32);
  ck_assert_int_eq(tfg_data_column_type(ds, y), TFG_DATA_I32);
  tfg_shape xs = tfg_data_row_shape(ds, x), ys = tfg_data_row_shape(ds, y);
  ck_assert_int_eq(xs.rank, 1);
  ck_assert_int_eq(xs.dim[0], 3);
  ck_assert_int_eq(ys.rank, 0);
  ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), 3);
  ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TEST), 0);
  float xv[9];
  int32_t yv[3];
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, x, 0, 0, 3, TFG_DTYPE_F32, xv);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, y, 0, 0, 3, TFG_DTYPE_I32, yv);
  const float want[9] = {1, 2.5f, -3, 4, 5, 6, 0.7f, 8, 9};
  for (int i = 0; i < 9; i++) ck_assert_float_eq(xv[i], want[i]);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(yv[i], i);
  tfg_data_free(ds);
}
END_TEST

START_TEST(csv_plain_crlf_blank_lines_no_final_newline) {
  const char *p = write_text("p.csv", "\xEF\xBB\xBF" "1,2\r\n\r\n  3 , 4\t\r\n   \n5,-6e2");
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_csv(D, &L, p, INT32_MIN, false, NULL, &ds), ds);
  ck_assert_int_eq(tfg_data_ncolumns(ds), 1);
  ck_assert_int_eq(tfg_data_column(ds, "y"), -1);
  ck_assert_int_eq(tfg_data_row_shape(ds, 0).dim[0], 2);
  ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), 3);
  double v[6];
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_F64, v);
  const double want[6] = {1, 2, 3, 4, 5, -600};
  for (int i = 0; i < 6; i++) ck_assert_double_eq(v[i], want[i]);
  tfg_data_free(ds);
}
END_TEST

START_TEST(csv_label_first_or_negative) {
  const char *p = write_text("l.csv", "3,1,2\n4,5,6\n");
  for (int k = 0; k < 2; k++) {
    tfg_dataset *ds = NULL;
    EXPECT_OK(tfg_data_csv(D, &L, p, k == 0 ? 0 : -3, false, NULL, &ds), ds);
    float x[4];
    int64_t y[2];
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, tfg_data_column(ds, "x"), 0, 0, 2, TFG_DTYPE_F32, x);
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, tfg_data_column(ds, "y"), 0, 0, 2, TFG_DTYPE_I64, y);
    ck_assert_float_eq(x[0], 1);
    ck_assert_float_eq(x[1], 2);
    ck_assert_float_eq(x[2], 5);
    ck_assert_float_eq(x[3], 6);
    ck_assert_int_eq(y[0], 3);
    ck_assert_int_eq(y[1], 4);
    tfg_data_free(ds);
  }
}
END_TEST

START_TEST(csv_gz) {
  const char *text = "1,2,0\n3,4,1\n";
  const char *p = write_gz("g.csv.gz", text, strlen(text));
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_csv(D, &L, p, -1, false, NULL, &ds), ds);
  float x[4];
  int32_t y[2];
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 2, TFG_DTYPE_F32, x);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 1, 0, 0, 2, TFG_DTYPE_I32, y);
  ck_assert_float_eq(x[0], 1);
  ck_assert_float_eq(x[3], 4);
  ck_assert_int_eq(y[0], 0);
  ck_assert_int_eq(y[1], 1);
  tfg_data_free(ds);
}
END_TEST

START_TEST(csv_lines_longer_than_any_buffer) {
  /* 30000 columns: ~150 KB a line, past the 64 KB read chunk. */
  enum { COLS = 30000, ROWS = 3 };
  tfg_strbuf b = {0};
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++)
      tfg_strbuf_printf(&b, "%d%s", c == COLS - 1 ? r : r * 7 + c, c == COLS - 1 ? "\n" : ",");
  const char *p = scratch_write("long.csv", b.data, b.len);
  const char *pz = write_gz("long.csv.gz", b.data, b.len);
  tfg_strbuf_free(&b);
  float *x = malloc(sizeof *x * (COLS - 1) * ROWS);
  for (int k = 0; k < 2; k++) {
    tfg_dataset *ds = NULL;
    EXPECT_OK(tfg_data_csv(D, &L, k ? pz : p, -1, false, NULL, &ds), ds);
    ck_assert_int_eq(tfg_data_row_shape(ds, 0).dim[0], COLS - 1);
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, ROWS, TFG_DTYPE_F32, x);
    for (int r = 0; r < ROWS; r++)
      for (int c = 0; c < COLS - 1; c += 997) ck_assert_float_eq(x[r * (COLS - 1) + c], r * 7 + c);
    int32_t y[ROWS];
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 1, 0, 0, ROWS, TFG_DTYPE_I32, y);
    for (int r = 0; r < ROWS; r++) ck_assert_int_eq(y[r], r);
    tfg_data_free(ds);
  }
  free(x);
}
END_TEST

/* Files tfg_data_csv refuses: name written with text (len bytes; 0:
 * strlen), or not written at all (text NULL; name NULL: the scratch
 * folder itself), loaded with label and header; the status and one
 * error holding a and b (see expect_fail). */
static const struct csv_bad {
  const char *name, *text;
  size_t len;
  int label;
  bool header;
  tfg_status want;
  const char *a, *b;
} CSV_BAD[] = {
    {"ragged.csv", "1,2,3\n\n4,5,6\n7,8\n", 0, -1, false, TFG_ERR_IO, "ragged.csv:4: expected 3 columns, found 2",
     NULL},
    {"nan.csv", "x,y,z\n1,2,3\n4, abc ,6\n", 0, -1, true, TFG_ERR_IO, "nan.csv:3: column 2: 'abc' is not a number",
     NULL},
    {"partial.csv", "1,2e,3\n", 0, INT32_MIN, false, TFG_ERR_IO, "partial.csv:1: column 2: '2e' is not a number",
     NULL},
    {"lab.csv", "1,2,0\n1,2,1.5\n", 0, -1, false, TFG_ERR_IO, "lab.csv:2: column 3: label '1.5' is not an integer",
     NULL},
    {"big.csv", "1,1e39\n", 0, INT32_MIN, false, TFG_ERR_IO, "big.csv:1: column 2: '1e39' is out of range for f32",
     NULL},
    {"hole.csv", "1,,3\n", 0, INT32_MIN, false, TFG_ERR_IO, "hole.csv:1: column 2 is empty", NULL},
    {"empty.csv", "", 0, -1, false, TFG_ERR_IO, "empty.csv' has no rows", NULL},
    {"blank.csv", "\n  \r\n\n", 0, -1, false, TFG_ERR_IO, "blank.csv' has no rows", NULL},
    {"hdr.csv", "a,b,c\n", 0, -1, true, TFG_ERR_IO, "hdr.csv' has no rows (only a header line)", NULL},
    {"missing.csv", NULL, 0, -1, false, TFG_ERR_IO, "cannot open '", "missing.csv': No such file or directory"},
    {NULL, NULL, 0, -1, false, TFG_ERR_IO, "cannot open '", "Is a directory"},
    {"range.csv", "1,2,3\n", 0, 3, false, TFG_ERR_SHAPE, "range.csv:1: label column 3 is out of range for 3 columns",
     NULL},
    {"range.csv", "1,2,3\n", 0, -4, false, TFG_ERR_SHAPE, "range.csv:1: label column -4", NULL},
    /* A field's bytes are shown escaped: "2\0" is not mistaken for "2",
     * and control bytes or broken UTF-8 cannot garble the terminal. */
    {"nul.csv", "1,2\0,3\n", 7, -1, false, TFG_ERR_IO, "nul.csv:1: column 2: '2\\0' is not a number", NULL},
    {"ctl.csv", "1,\x1b[2J\xff\\,3\n", 0, -1, false, TFG_ERR_IO, "column 2: '\\x1b[2J\\xff\\\\' is not a number",
     NULL},
    {"bidi.csv", "1,\xe2\x80\xae" "5\n", 0, INT32_MIN, false, TFG_ERR_IO, /* U+202E reverses what follows */
     "column 2: '\\u202e5' is not a number", NULL},
    /* Cut at 40 bytes, never inside a character: 39 x and a 2-byte é. */
    {"long.csv", "1,xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\xc3\xa9yz\n", 0, INT32_MIN, false, TFG_ERR_IO,
     "column 2: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is not", NULL},
};

START_TEST(csv_errors) {
  const struct csv_bad *c = &CSV_BAD[_i];
  const char *p = !c->name ? scratch_dir
                  : c->text ? scratch_write(c->name, c->text, c->len ? c->len : strlen(c->text))
                            : scratch_path(c->name);
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_csv(D, &L, p, c->label, c->header, NULL, &ds);
  expect_fail(st, ds, c->want, c->a, c->b);
}
END_TEST

/* A .gz cut short, or corrupt. */
START_TEST(csv_gz_errors) {
  tfg_dataset *ds = NULL;
  tfg_status st;
  const char *p;
  /* A .gz cut short: zlib notices the missing end. */
  tfg_strbuf b = {0};
  for (int i = 0; i < 2000; i++) tfg_strbuf_printf(&b, "%d,%d\n", i, i * 31 % 17);
  p = write_gz("cut.csv.gz", b.data, b.len);
  tfg_strbuf_free(&b);
  FILE *f = fopen(p, "rb");
  unsigned char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  p = scratch_write("cut.csv.gz", buf, n / 2);
  st = tfg_data_csv(D, &L, p, -1, false, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "cannot read '", "cut.csv.gz': unexpected end of compressed data");

  /* Corrupt deflate data: zlib's message, without its "<fd:N>: " prefix. */
  memset(buf + 20, 0xFF, 64);
  p = scratch_write("bad.csv.gz", buf, n);
  st = tfg_data_csv(D, &L, p, -1, false, NULL, &ds);
  char *out = render();
  ck_assert_int_eq(st, TFG_ERR_IO);
  ck_assert_ptr_null(ds);
  ck_assert_uint_eq(tfg_diag_error_count(D), 1);
  ck_assert_msg(strstr(out, "bad.csv.gz': ") && !strstr(out, "<fd:"), "%s", out);
  free(out);
  tfg_diag_clear(D);
}
END_TEST

/* ---- what readers refuse: files that are not regular ------------------- */

/* A FIFO would block the reader until a writer came (forever, in a
 * script): every reader refuses it, and any other file that is not a
 * regular one, by name and at once. */
START_TEST(not_regular_files) {
  const char *fifo = scratch_path("pipe.csv");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_csv(D, &L, fifo, -1, false, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "cannot open '", "pipe.csv': it is a FIFO (named pipe), not a regular file");
  const char *names[] = {"x"}, *paths[] = {fifo};
  st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "pipe.csv': it is a FIFO", NULL);
  st = tfg_data_idx(D, &L, fifo, NULL, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "pipe.csv': it is a FIFO", NULL);
  tfg_data_type t;
  tfg_shape sh;
  void *data = NULL;
  ck_assert_int_eq(tfg_data_npy_read(D, &L, fifo, &t, &sh, &data), TFG_ERR_IO);
  ck_assert_ptr_null(data);
  expect_fail(TFG_ERR_IO, NULL, TFG_ERR_IO, "pipe.csv': it is a FIFO", NULL);
  st = tfg_data_csv(D, &L, "/dev/null", -1, false, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "'/dev/null': it is a character device, not a regular file", NULL);
}
END_TEST

/* ---- values out of a dtype's range, single arrays ------------------------ */

/* An i64 value that i32 cannot hold is refused before it feeds anything,
 * naming the file, its NumPy index and the value (it used to be clamped
 * to 2147483647 without a word). */
START_TEST(values_out_of_range) {
  bytes b = {0};
  npy_begin(&b, 1, npy_dict("<i8", "(4,)"));
  put_le(&b, 0, 8);
  put_le(&b, (uint64_t)INT32_MAX, 8);
  put_le(&b, (uint64_t)((int64_t)1 << 40), 8);
  put_le(&b, (uint64_t)INT32_MIN, 8);
  const char *py = write_bytes("y.npy", &b, false);
  npy_begin(&b, 1, npy_dict("<i8", "(3, 2)"));
  for (int i = 0; i < 6; i++) put_le(&b, (uint64_t)(i == 3 ? (int64_t)INT32_MIN - 1 : i), 8);
  const char *pz = write_bytes("z.npy", &b, false);
  npy_begin(&b, 1, npy_dict("<f4", "(4, 1)"));
  for (int i = 0; i < 4; i++) put_f32(&b, 1e30f);
  const char *px = write_bytes("x.npy", &b, false);
  const char *names[] = {"x", "y"}, *paths[] = {px, py};
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_npy(D, &L, 2, names, paths, NULL, &ds), ds);
  /* Each column names its own file (an npy dataset has one per column). */
  ck_assert_str_eq(tfg_data_column_path(ds, 0), px);
  ck_assert_str_eq(tfg_data_column_path(ds, 1), py);
  ck_assert_int_eq(tfg_data_check_column(D, &L, ds, 1, TFG_DTYPE_I64), TFG_OK);
  ck_assert_int_eq(tfg_data_check_column(D, &L, ds, 1, TFG_DTYPE_F32), TFG_OK);
  ck_assert_int_eq(tfg_data_check_column(D, &L, ds, 0, TFG_DTYPE_F16), TFG_OK); /* floats round */
  ck_assert_uint_eq(tfg_diag_error_count(D), 0);
  ck_assert_int_eq(tfg_data_check_column(D, &L, ds, 1, TFG_DTYPE_I32), TFG_ERR_SHAPE);
  expect_fail(TFG_ERR_SHAPE, NULL, TFG_ERR_SHAPE, "y.npy': the value at [2] is 1099511627776, out of range for i32",
              "(-2147483648 to 2147483647)");
  tfg_data_free(ds);
  /* A whole array (--feed): the index of the first bad value, every axis. */
  tfg_data_type t;
  tfg_shape sh;
  void *data = NULL;
  ck_assert_int_eq(tfg_data_npy_read(D, &L, pz, &t, &sh, &data), TFG_OK);
  ck_assert_int_eq(tfg_data_check_values(D, &L, pz, t, &sh, data, TFG_DTYPE_I32), TFG_ERR_SHAPE);
  expect_fail(TFG_ERR_SHAPE, NULL, TFG_ERR_SHAPE, "z.npy': the value at [1, 1] is -2147483649", NULL);
  free(data);
}
END_TEST

/* tfg_data_npy_read takes any rank, a 0-d array (a scalar) included, which
 * a dataset column refuses (it needs rows). */
START_TEST(npy_read_any_rank) {
  bytes b = {0};
  npy_begin(&b, 1, npy_dict("<f8", "()"));
  put_f64(&b, 2.5);
  const char *p = write_bytes("s.npy", &b, false);
  tfg_data_type t;
  tfg_shape sh;
  void *data = NULL;
  ck_assert_int_eq(tfg_data_npy_read(D, &L, p, &t, &sh, &data), TFG_OK);
  ck_assert_int_eq(t, TFG_DATA_F64);
  ck_assert_int_eq(sh.rank, 0);
  float f;
  tfg_data_convert(t, data, TFG_DTYPE_F32, &f, 1);
  ck_assert_float_eq(f, 2.5f);
  free(data);
  npy_begin(&b, 1, npy_dict("<f4", "(0, 3)"));
  p = write_bytes("e.npy", &b, false);
  ck_assert_int_eq(tfg_data_npy_read(D, &L, p, &t, &sh, &data), TFG_OK);
  ck_assert_int_eq(sh.rank, 2);
  ck_assert_int_eq(sh.dim[0], 0);
  free(data);
  tfg_dataset *ds = NULL;
  const char *names[] = {"e"}, *paths[] = {p};
  tfg_status st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "e.npy' has no rows (shape[0] is 0)", NULL);
}
END_TEST

/* ---- npy ---------------------------------------------------------------- */

/* Writes a (3, 2) array of descr with values derived from i, for format
 * major; returns the path. */
static const char *npy_sample(const char *name, const char *descr, int major, bool gz) {
  bytes b = {0};
  npy_begin(&b, major, npy_dict(descr, "(3, 2)"));
  for (int i = 0; i < 6; i++) {
    if (!strcmp(descr, "<f4")) put_f32(&b, (float)i * 1.5f - 2.25f);
    else if (!strcmp(descr, "<f8")) put_f64(&b, i * 0.1 - 1e300 * (i == 5));
    else if (!strcmp(descr, "<i4")) put_le(&b, (uint64_t)(int64_t)(i * 100000 - 250000), 4);
    else if (!strcmp(descr, "<i8")) put_le(&b, (uint64_t)(((int64_t)1 << 40) * (i - 3) + i), 8);
    else if (!strcmp(descr, "|u1")) put_byte(&b, (unsigned)(i * 51));
    else put_byte(&b, i == 3 ? 7 : (unsigned)(i % 2)); /* |b1; 7 reads as true */
  }
  return write_bytes(name, &b, gz);
}

START_TEST(npy_every_dtype_and_version) {
  static const struct {
    const char *descr;
    tfg_data_type t;
  } types[] = {{"<f4", TFG_DATA_F32}, {"<f8", TFG_DATA_F64}, {"<i4", TFG_DATA_I32},
               {"<i8", TFG_DATA_I64}, {"|u1", TFG_DATA_U8},  {"|b1", TFG_DATA_BOOL}};
  for (int major = 1; major <= 3; major++)
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
      for (int gz = 0; gz < 2; gz++) {
        char name[64];
        snprintf(name, sizeof name, "a%d_%zu.npy%s", major, k, gz ? ".gz" : "");
        const char *p = npy_sample(name, types[k].descr, major, gz);
        const char *names[] = {"a"}, *paths[] = {p};
        tfg_dataset *ds = NULL;
        EXPECT_OK(tfg_data_npy(D, &L, 1, names, paths, NULL, &ds), ds);
        ck_assert_int_eq(tfg_data_column_type(ds, 0), types[k].t);
        ck_assert_str_eq(tfg_data_column_name(ds, 0), "a");
        tfg_shape s = tfg_data_row_shape(ds, 0);
        ck_assert_int_eq(s.rank, 1);
        ck_assert_int_eq(s.dim[0], 2);
        ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), 3);
        switch (types[k].t) {
        case TFG_DATA_F32: {
          float v[6];
          tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_F32, v);
          for (int i = 0; i < 6; i++) ck_assert_float_eq(v[i], (float)i * 1.5f - 2.25f);
          break;
        }
        case TFG_DATA_F64: {
          double v[6];
          tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_F64, v);
          for (int i = 0; i < 6; i++) ck_assert_double_eq(v[i], i * 0.1 - 1e300 * (i == 5));
          break;
        }
        case TFG_DATA_I32: {
          int32_t v[6];
          tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_I32, v);
          for (int i = 0; i < 6; i++) ck_assert_int_eq(v[i], i * 100000 - 250000);
          break;
        }
        case TFG_DATA_I64: {
          int64_t v[6];
          tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_I64, v);
          for (int i = 0; i < 6; i++) ck_assert_int_eq(v[i], ((int64_t)1 << 40) * (i - 3) + i);
          break;
        }
        case TFG_DATA_U8: {
          int32_t v[6];
          tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_I32, v);
          for (int i = 0; i < 6; i++) ck_assert_int_eq(v[i], i * 51);
          break;
        }
        case TFG_DATA_BOOL: {
          uint8_t v[6];
          tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_BOOL, v);
          for (int i = 0; i < 6; i++) ck_assert_int_eq(v[i], i == 3 ? 1 : i % 2);
          break;
        }
        }
        tfg_data_free(ds);
      }
}
END_TEST

START_TEST(npy_header_variants_and_shapes) {
  /* Double quotes, odd spacing, other key order, no trailing comma,
   * Python 2 longs, an unknown key, a 3-d array, a 1-d array. */
  static const char *dicts[] = {
      "{\"descr\":\"<i4\",\"fortran_order\":False,\"shape\":(2,3,4)}",
      "{ 'shape' : ( 2 , 3 , 4 , ) ,\n 'fortran_order' : False , 'descr' : '<i4' , }",
      "{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L, 4L), 'x': [1, (2, 'a')], }",
  };
  for (size_t k = 0; k < 3; k++) {
    bytes b = {0};
    npy_begin(&b, 1, dicts[k]);
    for (int i = 0; i < 24; i++) put_le(&b, (uint64_t)(i - 5), 4);
    const char *p = write_bytes("v.npy", &b, false);
    const char *names[] = {"x"}, *paths[] = {p};
    tfg_dataset *ds = NULL;
    EXPECT_OK(tfg_data_npy(D, &L, 1, names, paths, NULL, &ds), ds);
    tfg_shape s = tfg_data_row_shape(ds, 0);
    ck_assert_int_eq(s.rank, 2);
    ck_assert_int_eq(s.dim[0], 3);
    ck_assert_int_eq(s.dim[1], 4);
    ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), 2);
    int64_t v[24];
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 2, TFG_DTYPE_I64, v);
    for (int i = 0; i < 24; i++) ck_assert_int_eq(v[i], i - 5);
    tfg_data_free(ds);
  }
  /* Two columns: a 1-d label vector (rank-0 rows) beside a matrix. */
  bytes b = {0};
  npy_begin(&b, 1, npy_dict("<f4", "(4, 2)"));
  for (int i = 0; i < 8; i++) put_f32(&b, (float)i);
  const char *px = write_bytes("x.npy", &b, false);
  npy_begin(&b, 2, npy_dict("<i8", "(4,)"));
  for (int i = 0; i < 4; i++) put_le(&b, (uint64_t)(i * 10), 8);
  const char *py = write_bytes("y.npy", &b, false);
  const char *names[] = {"feat", "lab"}, *paths[] = {px, py};
  tfg_data_opts o = opts(0.25, false, 0);
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_npy(D, &L, 2, names, paths, &o, &ds), ds);
  ck_assert_int_eq(tfg_data_column(ds, "lab"), 1);
  ck_assert_int_eq(tfg_data_row_shape(ds, 1).rank, 0);
  ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), 3);
  ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TEST), 1);
  float x[2];
  int32_t y;
  tfg_data_fetch(ds, TFG_SPLIT_TEST, 0, 0, 0, 1, TFG_DTYPE_F32, x);
  tfg_data_fetch(ds, TFG_SPLIT_TEST, 1, 0, 0, 1, TFG_DTYPE_I32, &y);
  ck_assert_float_eq(x[0], 6);
  ck_assert_float_eq(x[1], 7);
  ck_assert_int_eq(y, 30);
  tfg_data_free(ds);
}
END_TEST

/* Writes an npy with dict and nbytes of zero data; loads it as column "a"
 * and expects failure. */
static void npy_fail(const char *dict, int nbytes, tfg_status want, const char *a, const char *b) {
  bytes by = {0};
  npy_begin(&by, 1, dict);
  for (int i = 0; i < nbytes; i++) put_byte(&by, 0);
  const char *p = write_bytes("bad.npy", &by, false);
  const char *names[] = {"a"}, *paths[] = {p};
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
  expect_fail(st, ds, want, "bad.npy", a);
  if (b) { /* a second run for the second substring */
    st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
    expect_fail(st, ds, want, a, b);
  }
}

START_TEST(npy_errors) {
  npy_fail("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, TFG_ERR_IO,
           "Fortran order", NULL);
  npy_fail(npy_dict(">f4", "(2, 2)"), 16, TFG_ERR_IO, "big-endian", "help: ");
  npy_fail(npy_dict("<f2", "(2, 2)"), 8, TFG_ERR_IO, "dtype '<f2' is not supported",
           "'<f4' '<f8' '<i4' '<i8' '|u1' '|b1'");
  npy_fail(npy_dict("<u1", "(2, 2)"), 4, TFG_ERR_IO, "dtype '<u1' is not supported", NULL);
  npy_fail(npy_dict("|i1", "(2, 2)"), 4, TFG_ERR_IO, "dtype '|i1' is not supported", NULL);
  npy_fail(npy_dict("<f4", "(2, 2)"), 15, TFG_ERR_IO,
           "is truncated: expected 16 bytes of data, found 15", NULL);
  npy_fail(npy_dict("<f4", "()"), 4, TFG_ERR_IO, "0-d array", NULL);
  npy_fail(npy_dict("<f4", "(0, 3)"), 0, TFG_ERR_IO, "has no rows", NULL);
  npy_fail(npy_dict("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4, TFG_ERR_LIMIT, "rank 9", NULL);
  npy_fail(npy_dict("<f4", "(4294967296, 4294967296, 4294967296)"), 4, TFG_ERR_IO, "too large",
           NULL);
  npy_fail(npy_dict("<f4", "(-2, 2)"), 4, TFG_ERR_IO, "malformed .npy header", NULL);
  npy_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)", 16, TFG_ERR_IO,
           "malformed .npy header", NULL);
  npy_fail("{'descr': '<f4', 'fortran_order': False}", 16, TFG_ERR_IO, "no 'shape' key", NULL);
  npy_fail("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", 8, TFG_ERR_IO,
           "structured dtypes", NULL);
  npy_fail("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", 8, TFG_ERR_IO,
           "'fortran_order' is not True or False", NULL);

  tfg_dataset *ds = NULL;
  tfg_status st;
  const char *p = write_text("text.npy", "descr,shape\n1,2\n");
  const char *names[] = {"a", "b"}, *paths[] = {p, p};
  st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "text.npy' is not a .npy file", NULL);

  bytes b = {0};
  put(&b, "\x93NUMPY\x01\x00\x40", 9); /* header length cut in half */
  p = write_bytes("short.npy", &b, false);
  paths[0] = p;
  st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "short.npy' is not a .npy file", NULL);

  put(&b, "\x93NUMPY\x04\x00\x10\x00", 10);
  p = write_bytes("v4.npy", &b, false);
  paths[0] = p;
  st = tfg_data_npy(D, &L, 1, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "v4.npy': unsupported .npy format version 4.0", NULL);

  npy_begin(&b, 1, npy_dict("<f4", "(3,)"));
  for (int i = 0; i < 3; i++) put_f32(&b, 1);
  const char *p3 = write_bytes("three.npy", &b, false);
  npy_begin(&b, 1, npy_dict("<f4", "(2,)"));
  for (int i = 0; i < 2; i++) put_f32(&b, 1);
  const char *p2 = write_bytes("two.npy", &b, false);
  paths[0] = p3;
  paths[1] = p2;
  st = tfg_data_npy(D, &L, 2, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_SHAPE, "two.npy' has 2 rows but '", "three.npy' has 3");

  const char *dup[] = {"a", "a"};
  st = tfg_data_npy(D, &L, 2, dup, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_NAME, "column 'a' is given twice", "two.npy");

  paths[1] = scratch_path("nope.npy");
  st = tfg_data_npy(D, &L, 2, names, paths, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "cannot open '", "nope.npy': No such file or directory");
}
END_TEST

/* ---- idx ---------------------------------------------------------------- */

/* n images of h x w (pixel = (i * 37 + k) & 255) and n labels (i % 10). */
static void idx_write(int n, int h, int w, int nlabels, bool gz, const char **pi,
                      const char **pl) {
  bytes b = {0};
  put_be32(&b, 0x00000803);
  put_be32(&b, (uint32_t)n);
  put_be32(&b, (uint32_t)h);
  put_be32(&b, (uint32_t)w);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < h * w; k++) put_byte(&b, (unsigned)(i * 37 + k) & 255);
  *pi = write_bytes(gz ? "img.gz" : "img", &b, gz);
  put_be32(&b, 0x00000801);
  put_be32(&b, (uint32_t)nlabels);
  for (int i = 0; i < nlabels; i++) put_byte(&b, (unsigned)(i % 10));
  *pl = write_bytes(gz ? "lab.gz" : "lab", &b, gz);
}

START_TEST(idx_images_and_labels) {
  for (int gz = 0; gz < 2; gz++) {
    const char *pi, *pl;
    idx_write(5, 3, 4, 5, gz, &pi, &pl);
    tfg_dataset *ds = NULL;
    EXPECT_OK(tfg_data_idx(D, &L, pi, pl, NULL, &ds), ds);
    ck_assert_int_eq(tfg_data_ncolumns(ds), 2);
    int im = tfg_data_column(ds, "images"), lb = tfg_data_column(ds, "labels");
    ck_assert_int_eq(im, 0);
    ck_assert_int_eq(lb, 1);
    ck_assert_int_eq(tfg_data_column_type(ds, im), TFG_DATA_U8);
    ck_assert_int_eq(tfg_data_column_type(ds, lb), TFG_DATA_U8);
    tfg_shape s = tfg_data_row_shape(ds, im);
    ck_assert_int_eq(s.rank, 2);
    ck_assert_int_eq(s.dim[0], 3);
    ck_assert_int_eq(s.dim[1], 4);
    ck_assert_int_eq(tfg_data_row_shape(ds, lb).rank, 0);
    ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), 5);
    float px[5 * 12];
    int32_t y[5];
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, im, 0, 0, 5, TFG_DTYPE_F32, px);
    tfg_data_fetch(ds, TFG_SPLIT_TRAIN, lb, 0, 0, 5, TFG_DTYPE_I32, y);
    for (int i = 0; i < 5; i++) {
      ck_assert_int_eq(y[i], i % 10);
      for (int k = 0; k < 12; k++) ck_assert_float_eq(px[i * 12 + k], (float)((i * 37 + k) & 255));
    }
    tfg_data_free(ds);
    /* Either file alone. */
    EXPECT_OK(tfg_data_idx(D, &L, pi, NULL, NULL, &ds), ds);
    ck_assert_int_eq(tfg_data_ncolumns(ds), 1);
    ck_assert_int_eq(tfg_data_column(ds, "labels"), -1);
    tfg_data_free(ds);
    EXPECT_OK(tfg_data_idx(D, &L, NULL, pl, NULL, &ds), ds);
    ck_assert_int_eq(tfg_data_column(ds, "labels"), 0);
    tfg_data_free(ds);
  }
}
END_TEST

START_TEST(idx_errors) {
  tfg_dataset *ds = NULL;
  tfg_status st;
  const char *pi, *pl;
  idx_write(5, 2, 2, 4, false, &pi, &pl);
  st = tfg_data_idx(D, &L, pi, pl, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_SHAPE, "img' has 5 images but '", "lab' has 4 labels");

  st = tfg_data_idx(D, &L, pl, NULL, NULL, &ds); /* labels given as images */
  expect_fail(st, ds, TFG_ERR_IO, "lab' is not an IDX image file: magic 0x00000801",
              "expected 0x00000803");
  st = tfg_data_idx(D, &L, NULL, pi, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "img' is not an IDX label file", NULL);

  bytes b = {0};
  put_be32(&b, 0x00000803);
  put_be32(&b, 3);
  put_be32(&b, 2);
  put_be32(&b, 2);
  for (int i = 0; i < 11; i++) put_byte(&b, 1);
  const char *p = write_bytes("short-img", &b, false);
  st = tfg_data_idx(D, &L, p, NULL, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "short-img' is truncated: expected 12 bytes of data, found 11",
              NULL);

  put_be32(&b, 0x00000803);
  put_be32(&b, 3);
  p = write_bytes("short-hdr", &b, false);
  st = tfg_data_idx(D, &L, p, NULL, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "short-hdr' is truncated inside its IDX header", NULL);

  put_be32(&b, 0x00000D03);
  p = write_bytes("floats", &b, false);
  st = tfg_data_idx(D, &L, p, NULL, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "floats': IDX element type 0x0d is not supported", NULL);

  p = write_text("text", "hello world\n");
  st = tfg_data_idx(D, &L, NULL, p, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "text' is not an IDX file", NULL);

  st = tfg_data_idx(D, &L, scratch_path("none"), NULL, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_IO, "cannot open '", "none': No such file or directory");

  st = tfg_data_idx(D, &L, NULL, NULL, NULL, &ds);
  expect_fail(st, ds, TFG_ERR_NAME, "idx: give images, labels or both", NULL);
}
END_TEST

/* ---- split, order, fetch -------------------------------------------------- */

/* n rows "i,i": x = [i] (f32), y = i. */
static const char *csv_rows(const char *name, int n) {
  tfg_strbuf b = {0};
  for (int i = 0; i < n; i++) tfg_strbuf_printf(&b, "%d,%d\n", i, i);
  const char *p = scratch_write(name, b.data, b.len);
  tfg_strbuf_free(&b);
  return p;
}

static tfg_dataset *load_rows(const char *p, double test, bool shuffle, uint64_t seed) {
  tfg_data_opts o = opts(test, shuffle, seed);
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_csv(D, &L, p, -1, false, &o, &ds), ds);
  return ds;
}

/* The labels (= file rows) of n positions from first of split in epoch. */
static void rows_of(const tfg_dataset *ds, tfg_split sp, int64_t epoch, int64_t first, int64_t n,
                    int32_t *out) {
  tfg_data_fetch(ds, sp, 1, epoch, first, n, TFG_DTYPE_I32, out);
  /* x must name the same rows as y: inputs of one dataset stay aligned. */
  float *x = malloc(sizeof *x * (size_t)n);
  tfg_data_fetch(ds, sp, 0, epoch, first, n, TFG_DTYPE_F32, x);
  for (int64_t i = 0; i < n; i++) ck_assert_float_eq(x[i], (float)out[i]);
  free(x);
}

START_TEST(split_sizes_and_file_order) {
  const char *p = csv_rows("ten.csv", 10);
  static const struct {
    double test;
    int64_t train, tst;
  } cases[] = {{0.2, 8, 2}, {0.25, 7, 3}, {0.0, 10, 0}, {0.04, 10, 0}, {0.05, 9, 1}, {0.9, 1, 9}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tfg_dataset *ds = load_rows(p, cases[k].test, false, 0);
    ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TRAIN), cases[k].train);
    ck_assert_int_eq(tfg_data_rows(ds, TFG_SPLIT_TEST), cases[k].tst);
    tfg_data_free(ds);
  }
  /* Without shuffle: train is the first rows in file order, test the last,
   * the same in every epoch. */
  tfg_dataset *ds = load_rows(p, 0.2, false, 0);
  int32_t r[8];
  for (int64_t e = 0; e < 3; e++) {
    rows_of(ds, TFG_SPLIT_TRAIN, e, 0, 8, r);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(r[i], i);
    rows_of(ds, TFG_SPLIT_TEST, e, 0, 2, r);
    ck_assert_int_eq(r[0], 8);
    ck_assert_int_eq(r[1], 9);
  }
  tfg_data_free(ds);
}
END_TEST

START_TEST(split_errors) {
  const char *p = csv_rows("s.csv", 10);
  const double bad[] = {1.0, -0.1, 1.5, NAN, INFINITY};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    tfg_data_opts o = opts(bad[k], false, 0);
    tfg_dataset *ds = NULL;
    tfg_status st = tfg_data_csv(D, &L, p, -1, false, &o, &ds);
    expect_fail(st, ds, TFG_ERR_NAME, "s.csv': test = ", "is outside [0, 1)");
  }
  const char *one = csv_rows("one.csv", 1);
  tfg_data_opts o = opts(0.6, true, 3);
  tfg_dataset *ds = NULL;
  tfg_status st = tfg_data_csv(D, &L, one, -1, false, &o, &ds);
  expect_fail(st, ds, TFG_ERR_SHAPE, "one.csv': test = 0.6 takes all 1 rows", NULL);
  /* npy and idx check the fraction too (before reading anything). */
  const char *names[] = {"a"}, *paths[] = {scratch_path("absent.npy")};
  o = opts(1.0, false, 0);
  st = tfg_data_npy(D, &L, 1, names, paths, &o, &ds);
  expect_fail(st, ds, TFG_ERR_NAME, "absent.npy': test = 1", NULL);
  st = tfg_data_idx(D, &L, NULL, scratch_path("absent-labels"), &o, &ds);
  expect_fail(st, ds, TFG_ERR_NAME, "absent-labels': test = 1", NULL);
}
END_TEST

/* FY(n, stream) as the data.c header comment defines it. */
static void ref_shuffle(int64_t *a, int64_t n, uint64_t stream) {
  for (int64_t i = n - 1; i >= 1; i--) {
    int64_t j = (int64_t)(tfg_rng_bits(stream, (uint64_t)i) % (uint64_t)(i + 1));
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

START_TEST(shuffle_semantics) {
  enum { R = 100, TRAIN = 80, TEST = 20 };
  const char *p = csv_rows("h.csv", R);
  tfg_dataset *a = load_rows(p, 0.2, true, 7), *b = load_rows(p, 0.2, true, 7);
  tfg_dataset *c = load_rows(p, 0.2, true, 8);
  ck_assert_int_eq(tfg_data_rows(a, TFG_SPLIT_TRAIN), TRAIN);
  ck_assert_int_eq(tfg_data_rows(a, TFG_SPLIT_TEST), TEST);

  /* The documented construction, computed independently. */
  int64_t P[R], S[TRAIN];
  for (int i = 0; i < R; i++) P[i] = i;
  ref_shuffle(P, R, 7);

  int32_t ra[TRAIN], rb[TRAIN], rc[TRAIN], prev[TRAIN], t0[TEST], t[TEST];
  rows_of(a, TFG_SPLIT_TEST, 0, 0, TEST, t0);
  for (int i = 0; i < TEST; i++) ck_assert_int_eq(t0[i], P[TRAIN + i]);
  for (int64_t e = 0; e < 5; e++) {
    rows_of(a, TFG_SPLIT_TRAIN, e, 0, TRAIN, ra);
    rows_of(b, TFG_SPLIT_TRAIN, e, 0, TRAIN, rb);
    rows_of(c, TFG_SPLIT_TRAIN, e, 0, TRAIN, rc);
    ck_assert_int_eq(memcmp(ra, rb, sizeof ra), 0);   /* same seed: same order */
    ck_assert_int_ne(memcmp(ra, rc, sizeof ra), 0);   /* other seed: another */
    if (e > 0) ck_assert_int_ne(memcmp(ra, prev, sizeof ra), 0); /* epochs differ */
    memcpy(prev, ra, sizeof ra);
    for (int i = 0; i < TRAIN; i++) S[i] = i;
    if (e > 0) ref_shuffle(S, TRAIN, tfg_rng_bits(tfg_rng_mix(7), (uint64_t)e));
    for (int i = 0; i < TRAIN; i++) ck_assert_int_eq(ra[i], P[S[i]]);
    /* Every row exactly once per epoch: train and test partition 0..R-1. */
    int seen[R] = {0};
    rows_of(a, TFG_SPLIT_TEST, e, 0, TEST, t);
    ck_assert_int_eq(memcmp(t, t0, sizeof t), 0); /* the test split never moves */
    for (int i = 0; i < TRAIN; i++) seen[ra[i]]++;
    for (int i = 0; i < TEST; i++) seen[t[i]]++;
    for (int i = 0; i < R; i++) ck_assert_int_eq(seen[i], 1);
  }
  /* Shuffling really moved things: the order is not the file order. */
  rows_of(a, TFG_SPLIT_TRAIN, 0, 0, TRAIN, ra);
  int fixed = 0;
  for (int i = 0; i < TRAIN; i++) fixed += ra[i] == i;
  ck_assert_int_lt(fixed, TRAIN / 2);
  tfg_data_free(a);
  tfg_data_free(b);
  tfg_data_free(c);
}
END_TEST

START_TEST(fetch_wraps_around) {
  const char *p = csv_rows("w.csv", 10);
  tfg_dataset *ds = load_rows(p, 0.2, false, 0);
  int32_t r[20];
  rows_of(ds, TFG_SPLIT_TRAIN, 0, 6, 5, r);
  const int32_t want[5] = {6, 7, 0, 1, 2};
  for (int i = 0; i < 5; i++) ck_assert_int_eq(r[i], want[i]);
  rows_of(ds, TFG_SPLIT_TRAIN, 0, -1, 2, r);
  ck_assert_int_eq(r[0], 7);
  ck_assert_int_eq(r[1], 0);
  rows_of(ds, TFG_SPLIT_TRAIN, 0, 8 * 1000 + 3, 1, r);
  ck_assert_int_eq(r[0], 3);
  rows_of(ds, TFG_SPLIT_TEST, 0, 1, 3, r);
  ck_assert_int_eq(r[0], 9);
  ck_assert_int_eq(r[1], 8);
  ck_assert_int_eq(r[2], 9);
  tfg_data_free(ds);

  /* Shuffled: a long fetch from anywhere matches the epoch's order mod 8
   * (and crosses the 256-row chunking of the shuffled path). */
  ds = load_rows(p, 0.2, true, 11);
  int32_t epoch[8], *big = malloc(sizeof *big * 600);
  for (int64_t e = 0; e < 3; e++) {
    rows_of(ds, TFG_SPLIT_TRAIN, e, 0, 8, epoch);
    rows_of(ds, TFG_SPLIT_TRAIN, e, 5, 600, big);
    for (int i = 0; i < 600; i++) ck_assert_int_eq(big[i], epoch[(5 + i) % 8]);
    rows_of(ds, TFG_SPLIT_TRAIN, e, -3, 4, r);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(r[i], epoch[(5 + i) % 8]);
  }
  free(big);
  tfg_data_free(ds);
}
END_TEST

static uint16_t f16_of(double v) {
  bytes b = {0};
  npy_begin(&b, 1, npy_dict("<f8", "(1,)"));
  put_f64(&b, v);
  const char *p = write_bytes("h.npy", &b, false);
  const char *names[] = {"v"}, *paths[] = {p};
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_npy(D, &L, 1, names, paths, NULL, &ds), ds);
  uint16_t h;
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_F16, &h);
  tfg_data_free(ds);
  return h;
}

START_TEST(conversions) {
  /* u8 -> every numeric dtype, exactly, for all 256 values. */
  bytes b = {0};
  put_be32(&b, 0x00000803);
  put_be32(&b, 1);
  put_be32(&b, 16);
  put_be32(&b, 16);
  for (int i = 0; i < 256; i++) put_byte(&b, (unsigned)i);
  const char *p = write_bytes("all-bytes", &b, false);
  tfg_dataset *ds = NULL;
  EXPECT_OK(tfg_data_idx(D, &L, p, NULL, NULL, &ds), ds);
  float f[256];
  double g[256];
  int32_t i32[256];
  int64_t i64[256];
  uint16_t h[256], bf[256];
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_F32, f);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_F64, g);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_I32, i32);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_I64, i64);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_F16, h);
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_BF16, bf);
  for (int i = 0; i < 256; i++) {
    ck_assert_float_eq(f[i], (float)i);
    ck_assert_double_eq(g[i], i);
    ck_assert_int_eq(i32[i], i);
    ck_assert_int_eq(i64[i], i);
    float fb; /* bf16 is the top half of an f32; 8 significant bits hold 0..255 */
    uint32_t u = (uint32_t)bf[i] << 16;
    memcpy(&fb, &u, 4);
    ck_assert_float_eq(fb, (float)i);
  }
  ck_assert_uint_eq(h[0], 0x0000);
  ck_assert_uint_eq(h[1], 0x3C00);
  ck_assert_uint_eq(h[255], 0x5BF8);
  ck_assert_uint_eq(bf[1], 0x3F80);
  ck_assert_uint_eq(bf[3], 0x4040);
  ck_assert_uint_eq(bf[255], 0x437F);
  tfg_data_free(ds);

  /* f64 -> f16: one rounding, to nearest even, overflow to inf. */
  ck_assert_uint_eq(f16_of(1.0), 0x3C00);
  ck_assert_uint_eq(f16_of(-2.0), 0xC000);
  ck_assert_uint_eq(f16_of(1.0 / 3), 0x3555);
  ck_assert_uint_eq(f16_of(65504), 0x7BFF);
  ck_assert_uint_eq(f16_of(65519.99), 0x7BFF);
  ck_assert_uint_eq(f16_of(65520), 0x7C00);
  ck_assert_uint_eq(f16_of(-1e10), 0xFC00);
  ck_assert_uint_eq(f16_of(ldexp(1, -24)), 0x0001);        /* smallest subnormal */
  ck_assert_uint_eq(f16_of(ldexp(1, -14)), 0x0400);        /* smallest normal */
  ck_assert_uint_eq(f16_of(1 + ldexp(1, -11)), 0x3C00);    /* tie: to even */
  ck_assert_uint_eq(f16_of(1 + 3 * ldexp(1, -11)), 0x3C02); /* tie: to even */
  ck_assert_uint_eq(f16_of(1 + ldexp(1, -11) + ldexp(1, -30)), 0x3C01); /* no double rounding */
  ck_assert_uint_eq(f16_of(NAN) & 0x7C00, 0x7C00);
  ck_assert_uint_ne(f16_of(NAN) & 0x03FF, 0);

  /* bool -> f32/i32; i64 -> i32 saturates; f64 -> f32 rounds. */
  npy_begin(&b, 1, npy_dict("|b1", "(2,)"));
  put_byte(&b, 1);
  put_byte(&b, 0);
  const char *pb = write_bytes("b.npy", &b, false);
  npy_begin(&b, 1, npy_dict("<i8", "(3,)"));
  put_le(&b, (uint64_t)((int64_t)1 << 40), 8);
  put_le(&b, (uint64_t)-((int64_t)1 << 40), 8);
  put_le(&b, (uint64_t)(int64_t)-5, 8);
  const char *pi = write_bytes("i.npy", &b, false);
  npy_begin(&b, 1, npy_dict("<f8", "(1,)"));
  put_f64(&b, 0.1);
  const char *pf = write_bytes("f.npy", &b, false);
  const char *names[] = {"b", "i", "f"}, *paths[] = {pb, pi, pf};
  ck_assert_int_eq(tfg_data_npy(D, &L, 3, names, paths, NULL, &ds), TFG_ERR_SHAPE);
  tfg_diag_clear(D);
  ds = NULL;
  for (int k = 0; k < 3; k++) {
    tfg_dataset *one = NULL;
    EXPECT_OK(tfg_data_npy(D, &L, 1, names + k, paths + k, NULL, &one), one);
    if (k == 0) {
      float v[2];
      int32_t w[2];
      tfg_data_fetch(one, TFG_SPLIT_TRAIN, 0, 0, 0, 2, TFG_DTYPE_F32, v);
      tfg_data_fetch(one, TFG_SPLIT_TRAIN, 0, 0, 0, 2, TFG_DTYPE_I32, w);
      ck_assert_float_eq(v[0], 1);
      ck_assert_float_eq(v[1], 0);
      ck_assert_int_eq(w[0], 1);
      ck_assert_int_eq(w[1], 0);
    } else if (k == 1) {
      int32_t w[3];
      double v[3];
      tfg_data_fetch(one, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_I32, w);
      tfg_data_fetch(one, TFG_SPLIT_TRAIN, 0, 0, 0, 3, TFG_DTYPE_F64, v);
      ck_assert_int_eq(w[0], INT32_MAX);
      ck_assert_int_eq(w[1], INT32_MIN);
      ck_assert_int_eq(w[2], -5);
      ck_assert_double_eq(v[0], ldexp(1, 40));
      ck_assert_double_eq(v[2], -5);
    } else {
      float v;
      tfg_data_fetch(one, TFG_SPLIT_TRAIN, 0, 0, 0, 1, TFG_DTYPE_F32, &v);
      ck_assert_float_eq(v, 0.1f);
    }
    tfg_data_free(one);
  }

  /* The gate. */
  ck_assert(tfg_data_convertible(TFG_DATA_U8, TFG_DTYPE_F32));
  ck_assert(tfg_data_convertible(TFG_DATA_U8, TFG_DTYPE_I64));
  ck_assert(tfg_data_convertible(TFG_DATA_BOOL, TFG_DTYPE_F16));
  ck_assert(tfg_data_convertible(TFG_DATA_BOOL, TFG_DTYPE_I32));
  ck_assert(tfg_data_convertible(TFG_DATA_BOOL, TFG_DTYPE_BOOL));
  ck_assert(tfg_data_convertible(TFG_DATA_F64, TFG_DTYPE_BF16));
  ck_assert(tfg_data_convertible(TFG_DATA_I64, TFG_DTYPE_I32));
  ck_assert(!tfg_data_convertible(TFG_DATA_F32, TFG_DTYPE_I32));
  ck_assert(!tfg_data_convertible(TFG_DATA_F64, TFG_DTYPE_I64));
  ck_assert(!tfg_data_convertible(TFG_DATA_F32, TFG_DTYPE_BOOL));
  ck_assert(!tfg_data_convertible(TFG_DATA_I32, TFG_DTYPE_BOOL));
  ck_assert(!tfg_data_convertible(TFG_DATA_U8, TFG_DTYPE_BOOL));
  ck_assert_str_eq(tfg_data_type_name(TFG_DATA_U8), "u8");
  ck_assert_str_eq(tfg_data_type_name(TFG_DATA_BOOL), "bool");
  ck_assert_str_eq(tfg_data_type_name(TFG_DATA_F64), "f64");
}
END_TEST

/* Threads fetching different shuffled epochs at once (the epoch cache
 * holds two): every fetch must match the single-threaded answer. */
typedef struct fetch_job {
  const tfg_dataset *ds;
  const int32_t *want; /* [4][TRAIN] for epochs 1..4 */
  int id, bad;
} fetch_job;

enum { MT_ROWS = 1000 };

static void *fetch_thread(void *arg) {
  fetch_job *j = arg;
  int32_t r[64];
  for (int it = 0; it < 300; it++) {
    int64_t e = 1 + (it + j->id) % 4, first = (it * 37 + j->id * 101) % MT_ROWS;
    tfg_data_fetch(j->ds, TFG_SPLIT_TRAIN, 1, e, first, 64, TFG_DTYPE_I32, r);
    for (int k = 0; k < 64; k++)
      j->bad += r[k] != j->want[(e - 1) * MT_ROWS + (first + k) % MT_ROWS];
  }
  return NULL;
}

START_TEST(concurrent_fetch) {
  const char *p = csv_rows("mt.csv", MT_ROWS);
  tfg_dataset *ds = load_rows(p, 0.0, true, 99);
  int32_t *want = malloc(sizeof *want * 4 * MT_ROWS);
  for (int e = 1; e <= 4; e++) rows_of(ds, TFG_SPLIT_TRAIN, e, 0, MT_ROWS, want + (e - 1) * MT_ROWS);
  pthread_t th[4];
  fetch_job jobs[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (fetch_job){.ds = ds, .want = want, .id = i};
    ck_assert_int_eq(pthread_create(&th[i], NULL, fetch_thread, &jobs[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(jobs[i].bad, 0);
  }
  free(want);
  tfg_data_free(ds);
}
END_TEST

Suite *suite_data(void) {
  Suite *s = suite_create("data");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, csv_header_and_label);
  tcase_add_test(tc, csv_plain_crlf_blank_lines_no_final_newline);
  tcase_add_test(tc, csv_label_first_or_negative);
  tcase_add_test(tc, csv_gz);
  tcase_add_test(tc, csv_lines_longer_than_any_buffer);
  tcase_add_loop_test(tc, csv_errors, 0, (int)(sizeof CSV_BAD / sizeof CSV_BAD[0]));
  tcase_add_test(tc, csv_gz_errors);
  tcase_add_test(tc, not_regular_files);
  tcase_add_test(tc, values_out_of_range);
  tcase_add_test(tc, npy_read_any_rank);
  tcase_add_test(tc, npy_every_dtype_and_version);
  tcase_add_test(tc, npy_header_variants_and_shapes);
  tcase_add_test(tc, npy_errors);
  tcase_add_test(tc, idx_images_and_labels);
  tcase_add_test(tc, idx_errors);
  tcase_add_test(tc, split_sizes_and_file_order);
  tcase_add_test(tc, split_errors);
  tcase_add_test(tc, shuffle_semantics);
  tcase_add_test(tc, fetch_wraps_around);
  tcase_add_test(tc, conversions);
  tcase_add_test(tc, concurrent_fetch);
  suite_add_tcase(s, tc);
  return s;
}
