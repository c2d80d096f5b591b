/* tests/unit/test_ckpt.c: safetensors checkpoints: round trips, the exact
 * bytes written (hand-built goldens and the reference implementation's own
 * test vectors), a file from an independent writer (tests/ckpt_writer.py),
 * every malformed-file error, atomic saves under kill -9, and I/O errors.
 *
 * Fixtures are written by the tests into the scratch folder, removed
 * when the test case ends. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/ckpt.h"
#include "tests/unit/scratch.h"
#include "tests/unit/unit.h"

/* ---- fixture ------------------------------------------------------------ */

static tfg_diag *D;
static tfg_loc L; /* the "train statement" every error points at */

static void setup(void) {
  D = tfg_diag_new();
  const char *prog = "train loss { checkpoint = \"m.safetensors\" }\n";
  const tfg_source *src = tfg_diag_add_source(D, "prog.tfg", prog, strlen(prog));
  L = tfg_source_loc(src, 13, 29);
}

static void teardown(void) {
  tfg_diag_free(D);
  D = NULL;
}

/* The names in dir other than . and .., sorted, each followed by '\n'
 * (caller frees). */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}
/* The same order for an array of char[N] names. */
static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

static char *list_dir(const char *dir) {
  DIR *dh = opendir(dir);
  ck_assert_ptr_nonnull(dh);
  char **names = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dh)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    names = realloc(names, sizeof *names * (size_t)(n + 1));
    ck_assert_ptr_nonnull(names);
    names[n++] = strdup(e->d_name);
  }
  closedir(dh);
  if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
  tfg_strbuf b = {0};
  tfg_strbuf_putn(&b, "", 0);
  for (int i = 0; i < n; i++) {
    tfg_strbuf_printf(&b, "%s\n", names[i]);
    free(names[i]);
  }
  free(names);
  return tfg_strbuf_take(&b);
}

static char *render(void) { return test_render(D, false); }

static void expect_no_errors(tfg_status st) {
  if (st != TFG_OK || tfg_diag_error_count(D) != 0) {
    char *out = render();
    ck_abort_msg("status %d, %zu errors:\n%s", (int)st, tfg_diag_error_count(D), out);
  }
}

static tfg_ckpt *load_ok(const char *p) {
  tfg_ckpt *c = NULL;
  expect_no_errors(tfg_ckpt_load(D, &L, p, &c));
  ck_assert_ptr_nonnull(c);
  return c;
}

/* Checks a failed load or save: status want, exactly one error, at the
 * train statement, whose text holds a, b and c (b, c may be NULL); then
 * clears D. */
static void expect_error(tfg_status st, tfg_status want, const char *a, const char *b,
                         const char *c) {
  char *out = render();
  if (st != want || tfg_diag_error_count(D) != 1 || !strstr(out, a) || (b && !strstr(out, b)) ||
      (c && !strstr(out, c)) || !strstr(out, "prog.tfg:1:14: error: "))
    ck_abort_msg("status %d (want %d), %zu errors, wanted '%s', '%s' and '%s' in:\n%s", (int)st,
                 (int)want, tfg_diag_error_count(D), a, b ? b : "", c ? c : "", out);
  free(out);
  tfg_diag_clear(D);
}

static void expect_load_error(const char *p, tfg_status want, const char *b, const char *c) {
  tfg_ckpt *ck = (tfg_ckpt *)1;
  tfg_status st = tfg_ckpt_load(D, &L, p, &ck);
  ck_assert_ptr_null(ck);
  expect_error(st, want, p, b, c);
}

/* Shows bytes as C-escaped text, for failure messages (caller frees). */
static char *escaped(const unsigned char *s, size_t n) {
  tfg_strbuf b = {0};
  tfg_strbuf_putn(&b, "", 0);
  for (size_t i = 0; i < n; i++) {
    if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
      tfg_strbuf_putc(&b, (char)s[i]);
    else
      tfg_strbuf_printf(&b, "\\x%02x", s[i]);
  }
  return tfg_strbuf_take(&b);
}

/* The file at p holds exactly want[0..n). */
static void expect_file_bytes(const char *p, const void *want, size_t n) {
  size_t len;
  unsigned char *got = (unsigned char *)scratch_read(p, &len);
  if (len != n || memcmp(got, want, n) != 0) {
    char *g = escaped(got, len), *w = escaped(want, n);
    ck_abort_msg("%s differs (%zu bytes, want %zu):\n got: %s\nwant: %s", p, len, n, g, w);
  }
  free(got);
}

static tfg_shape shape0(void) { return (tfg_shape){0, {0}}; }
static tfg_shape shape1(int64_t a) { return (tfg_shape){1, {a}}; }
static tfg_shape shape2(int64_t a, int64_t b) { return (tfg_shape){2, {a, b}}; }
static tfg_shape shape3(int64_t a, int64_t b, int64_t c) { return (tfg_shape){3, {a, b, c}}; }

/* ---- round trips -------------------------------------------------------- */

/* Every dtype, a scalar, zero-sized tensors, names and metadata that need
 * escaping (quotes, backslashes, controls, UTF-8 of 2 to 4 bytes, ""),
 * an odd-sized f16 that leaves the next tensor at an unaligned offset.
 * Everything comes back exactly, in the order saved. */
START_TEST(roundtrip_every_dtype) {
  enum { N = 11 };
  tfg_ckpt_entry e[N] = {
      {"h.w", TFG_DTYPE_F32, shape2(2, 3), NULL},
      {"f64", TFG_DTYPE_F64, shape1(2), NULL},
      {"odd.f16", TFG_DTYPE_F16, shape1(5), NULL},
      {"bf16", TFG_DTYPE_BF16, shape2(1, 3), NULL},
      {"i32 after an odd f16", TFG_DTYPE_I32, shape1(4), NULL},
      {"scalar", TFG_DTYPE_I64, shape0(), NULL},
      {"mask", TFG_DTYPE_BOOL, shape1(3), NULL},
      {"empty", TFG_DTYPE_F32, shape1(0), NULL},
      {"q\"uote\\back/slash\n\t\x01\x1f\x7f", TFG_DTYPE_I64, shape3(2, 0, 3), NULL},
      {"\xc3\xbcn\xc3\xaf.c\xc3\xb8" "d\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82", TFG_DTYPE_F64,
       shape0(), NULL},
      {"", TFG_DTYPE_BF16, shape3(1, 1, 1), NULL},
  };
  unsigned char *buf[N];
  for (int i = 0; i < N; i++) {
    size_t bytes = tfg_dtype_size(e[i].dtype) * (size_t)tfg_shape_numel(&e[i].shape);
    buf[i] = malloc(bytes + 1);
    for (size_t k = 0; k < bytes; k++)
      buf[i][k] = e[i].dtype == TFG_DTYPE_BOOL ? (unsigned char)(k % 2)
                                               : (unsigned char)(k * 37 + (size_t)i * 11 + 1);
    e[i].data = buf[i];
  }
  tfg_ckpt_meta m[] = {
      {"step", "500"},
      {"quote\"key\\", "va\\lue\nwith \"escapes\"\x01"},
      {"\xc3\xbcn\xc3\xaf", "\xf0\x9f\x99\x82"},
      {"empty", ""},
  };
  const char *p = scratch_path("all.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, e, N, m, 4));

  /* The header is padded so the data starts 8-aligned. */
  size_t len;
  unsigned char *file = (unsigned char *)scratch_read(p, &len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | file[i];
  ck_assert_uint_eq(hlen % 8, 0);
  size_t total = 0;
  for (int i = 0; i < N; i++)
    total += tfg_dtype_size(e[i].dtype) * (size_t)tfg_shape_numel(&e[i].shape);
  ck_assert_uint_eq(len, 8 + hlen + total);
  free(file);

  tfg_ckpt *c = load_ok(p);
  ck_assert_int_eq(tfg_ckpt_count(c), N);
  for (int i = 0; i < N; i++) {
    const tfg_ckpt_entry *t = tfg_ckpt_entry_at(c, i);
    ck_assert_str_eq(t->name, e[i].name);
    ck_assert_int_eq(tfg_ckpt_find(c, e[i].name), i);
    ck_assert_int_eq(t->dtype, e[i].dtype);
    ck_assert(tfg_shape_eq(&t->shape, &e[i].shape));
    size_t bytes = tfg_dtype_size(e[i].dtype) * (size_t)tfg_shape_numel(&e[i].shape);
    ck_assert_ptr_nonnull(t->data);
    ck_assert(memcmp(t->data, e[i].data, bytes) == 0);
    ck_assert_uint_eq((uintptr_t)t->data % tfg_dtype_size(t->dtype), 0);
  }
  ck_assert_int_eq(tfg_ckpt_find(c, "absent"), -1);
  ck_assert_int_eq(tfg_ckpt_find(c, "h.w "), -1);
  for (int i = 0; i < 4; i++) ck_assert_str_eq(tfg_ckpt_meta_get(c, m[i].key), m[i].value);
  ck_assert_ptr_null(tfg_ckpt_meta_get(c, "absent"));
  tfg_ckpt_free(c);

  /* Saving again replaces the file and leaves nothing else behind. */
  expect_no_errors(tfg_ckpt_save(D, &L, p, e + 5, 1, NULL, 0));
  c = load_ok(p);
  ck_assert_int_eq(tfg_ckpt_count(c), 1);
  ck_assert_str_eq(tfg_ckpt_entry_at(c, 0)->name, "scalar");
  ck_assert_ptr_null(tfg_ckpt_meta_get(c, "step"));
  tfg_ckpt_free(c);
  char *ls = list_dir(scratch_dir);
  ck_assert_str_eq(ls, "all.safetensors\n");
  free(ls);
  for (int i = 0; i < N; i++) free(buf[i]);
}
END_TEST

START_TEST(roundtrip_empty) {
  const char *p = scratch_path("empty.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, NULL, 0, NULL, 0));
  tfg_ckpt *c = load_ok(p);
  ck_assert_int_eq(tfg_ckpt_count(c), 0);
  ck_assert_int_eq(tfg_ckpt_find(c, "x"), -1);
  ck_assert_ptr_null(tfg_ckpt_meta_get(c, "x"));
  tfg_ckpt_free(c);
}
END_TEST

START_TEST(dtype_names) {
  const char *want[TFG_DTYPE_COUNT] = {
      [TFG_DTYPE_F32] = "F32", [TFG_DTYPE_F64] = "F64", [TFG_DTYPE_F16] = "F16",
      [TFG_DTYPE_BF16] = "BF16", [TFG_DTYPE_I32] = "I32", [TFG_DTYPE_I64] = "I64",
      [TFG_DTYPE_BOOL] = "BOOL"};
  for (int t = 0; t < TFG_DTYPE_COUNT; t++)
    ck_assert_str_eq(tfg_ckpt_dtype_name((tfg_dtype)t), want[t]);
}
END_TEST

/* ---- the exact bytes ---------------------------------------------------- */

/* Two tensors and one metadata entry, the file spelled out by hand:
 * length, compact JSON with __metadata__ first and the tensors in the
 * order given, one space of padding to 136 bytes, then the data. */
START_TEST(golden_two_tensors) {
  float w[2] = {1.0f, -2.0f};
  int64_t n = 7;
  tfg_ckpt_entry e[] = {{"w", TFG_DTYPE_F32, shape1(2), w}, {"n", TFG_DTYPE_I64, shape0(), &n}};
  tfg_ckpt_meta m[] = {{"step", "5"}};
  const char *p = scratch_path("golden.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, e, 2, m, 1));

  static const char json[] = "{\"__metadata__\":{\"step\":\"5\"},"
                             "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}"
                             " ";
  ck_assert_uint_eq(strlen(json), 136); /* the test's own arithmetic */
  static const unsigned char len[8] = {136, 0, 0, 0, 0, 0, 0, 0};
  static const unsigned char data[16] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, /* 1, -2 */
                                         7, 0, 0, 0, 0, 0, 0, 0};                       /* 7 */
  unsigned char want[8 + 136 + 16];
  memcpy(want, len, 8);
  memcpy(want + 8, json, 136);
  memcpy(want + 144, data, 16);
  expect_file_bytes(p, want, sizeof want);
}
END_TEST

/* Escapes as serde_json writes them: \" \\ \n \t \b \f \r, other controls
 * as \u00xx in lower case; DEL and UTF-8 raw. */
START_TEST(golden_escapes) {
  unsigned char one = 1;
  tfg_ckpt_entry e[] = {{"a\"b\\c\n\x01\xc3\xa9", TFG_DTYPE_BOOL, shape1(1), &one}};
  tfg_ckpt_meta m[] = {{"k\t", "v\b\f\r\x1f\x7f"}};
  const char *p = scratch_path("escapes.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, e, 1, m, 1));
  static const char want[] =
      "\x70\0\0\0\0\0\0\0" /* 112 */
      "{\"__metadata__\":{\"k\\t\":\"v\\b\\f\\r\\u001f\x7f\"},"
      "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}"
      " "
      "\x01";
  ck_assert_uint_eq(sizeof want - 1, 8 + 112 + 1);
  expect_file_bytes(p, want, sizeof want - 1);
}
END_TEST

/* The reference implementation's own test vectors (huggingface/safetensors,
 * safetensors/src/tensor.rs: test_empty, test_serialization and
 * test_serialization_forced_alignement): our writer gives the same bytes. */
START_TEST(golden_reference_vectors) {
  const char *p = scratch_path("ref.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, NULL, 0, NULL, 0));
  static const unsigned char empty[] = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
  expect_file_bytes(p, empty, sizeof empty);

  tfg_ckpt_meta m[] = {{"framework", "pt"}};
  expect_no_errors(tfg_ckpt_save(D, &L, p, NULL, 0, m, 1));
  static const unsigned char meta[] = {
      40,  0,   0,   0,   0,   0,   0,   0,   123, 34,  95,  95,  109, 101, 116, 97,
      100, 97,  116, 97,  95,  95,  34,  58,  123, 34,  102, 114, 97,  109, 101, 119,
      111, 114, 107, 34,  58,  34,  112, 116, 34,  125, 125, 32,  32,  32,  32,  32};
  expect_file_bytes(p, meta, sizeof meta);

  float v[6] = {0, 1, 2, 3, 4, 5};
  tfg_ckpt_entry a0[] = {{"attn.0", TFG_DTYPE_F32, shape3(1, 2, 3), v}};
  expect_no_errors(tfg_ckpt_save(D, &L, p, a0, 1, NULL, 0));
  static const unsigned char attn_0[] = {
      64,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,  34,  58,
      123, 34,  100, 116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104,
      97,  112, 101, 34,  58,  91,  49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,
      95,  111, 102, 102, 115, 101, 116, 115, 34,  58,  91,  48,  44,  50,  52,  93,  125, 125,
      0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,  0,   0,   64,  64,  0,   0,
      128, 64,  0,   0,   160, 64};
  expect_file_bytes(p, attn_0, sizeof attn_0);

  tfg_ckpt_entry a1[] = {{"attn0", TFG_DTYPE_F32, {4, {1, 1, 2, 3}}, v}};
  expect_no_errors(tfg_ckpt_save(D, &L, p, a1, 1, NULL, 0));
  static const unsigned char attn0[] = {
      72,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48,  34,  58,  123,
      34,  100, 116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,
      112, 101, 34,  58,  91,  49,  44,  49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116,
      97,  95,  111, 102, 102, 115, 101, 116, 115, 34,  58,  91,  48,  44,  50,  52,  93,  125,
      125, 32,  32,  32,  32,  32,  32,  32,  0,   0,   0,   0,   0,   0,   128, 63,  0,   0,
      0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  expect_file_bytes(p, attn0, sizeof attn0);
}
END_TEST

/* ---- files from other writers ------------------------------------------- */

/* Writes a safetensors file: the length of json, json, then data. */
static const char *write_st(const char *name, const char *json, const void *data, size_t n) {
  size_t hl = strlen(json);
  unsigned char *b = malloc(8 + hl + n + 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, json, hl);
  if (n) memcpy(b + 8 + hl, data, n);
  const char *p = scratch_write(name, b, 8 + hl + n);
  free(b);
  return p;
}

/* What other writers may do: whitespace anywhere, fields in any order,
 * the header's order unrelated to the data's, any escape (\/ and \u with
 * surrogate pairs), no padding at all, a tensor at an odd offset. */
START_TEST(accepts_other_writers) {
  static const char json[] =
      " {\n\t\"b\\u00fc\\/\\ud83d\\ude42\" : { \"data_offsets\" : [ 2 , 10 ] ,\r\n"
      "   \"shape\" : [ 2 ] , \"dtype\" : \"F32\" } ,\n"
      "  \"__metadata__\" : { \"format\" : \"pt\" } ,\n"
      "  \"a\" : {\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}\n}\n  \t";
  unsigned char data[10] = {0x00, 0x3c, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};
  const char *p = write_st("other.safetensors", json, data, sizeof data);
  tfg_ckpt *c = load_ok(p);
  ck_assert_int_eq(tfg_ckpt_count(c), 2);
  const tfg_ckpt_entry *b = tfg_ckpt_entry_at(c, 0); /* header order */
  ck_assert_str_eq(b->name, "b\xc3\xbc/\xf0\x9f\x99\x82");
  ck_assert_int_eq(b->dtype, TFG_DTYPE_F32);
  ck_assert_uint_eq((uintptr_t)b->data % 4, 0); /* copied out of its odd offset */
  const float *bf = b->data;
  ck_assert(bf[0] == 1.0f && bf[1] == 2.0f);
  const tfg_ckpt_entry *a = tfg_ckpt_entry_at(c, tfg_ckpt_find(c, "a"));
  ck_assert_int_eq(a->dtype, TFG_DTYPE_F16);
  ck_assert(memcmp(a->data, data, 2) == 0);
  ck_assert_str_eq(tfg_ckpt_meta_get(c, "format"), "pt");
  tfg_ckpt_free(c);
}
END_TEST

/* tests/ckpt_writer.py in the source tree. The Makefile tells every
 * compile where the tree is (TFG_SOURCE_STDLIB is its stdlib/ folder), so
 * this works whatever the working directory; a tree without that file
 * (an installed test binary) falls back to the working directory. */
static void writer_script(char *buf, size_t n) {
  const char *dir = TFG_SOURCE_STDLIB;
  size_t len = strlen(dir);
  if (len >= 7 && strcmp(dir + len - 7, "/stdlib") == 0) {
    snprintf(buf, n, "%.*s/tests/ckpt_writer.py", (int)(len - 7), dir);
    if (access(buf, R_OK) == 0) return;
  }
  snprintf(buf, n, "tests/ckpt_writer.py");
}

START_TEST(python_writer) {
  char py[512], script[512];
  ck_assert_msg(test_find_python(py, sizeof py), "python3 is needed: neither /usr/bin/python3 nor "
                                            "python3 on PATH exists");
  writer_script(script, sizeof script);
  const char *out = scratch_path("py.safetensors");
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execl(py, py, script, out, (char *)NULL);
    _exit(127);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s %s %s failed (status 0x%x)",
                py, script, out, (unsigned)status);

  tfg_ckpt *c = load_ok(out);
  ck_assert_int_eq(tfg_ckpt_count(c), 2);
  int iw = tfg_ckpt_find(c, "h.w"), ib = tfg_ckpt_find(c, "h.b");
  ck_assert_int_ge(iw, 0);
  ck_assert_int_ge(ib, 0);
  const tfg_ckpt_entry *w = tfg_ckpt_entry_at(c, iw), *b = tfg_ckpt_entry_at(c, ib);
  ck_assert_int_eq(w->dtype, TFG_DTYPE_F32);
  ck_assert_int_eq(b->dtype, TFG_DTYPE_F32);
  tfg_shape sw = shape2(2, 3), sb = shape1(3);
  ck_assert(tfg_shape_eq(&w->shape, &sw));
  ck_assert(tfg_shape_eq(&b->shape, &sb));
  const float ww[6] = {0, 1, 2, 3, 4, 5}, bw[3] = {0.5f, -1.5f, 2.25f};
  ck_assert(memcmp(w->data, ww, sizeof ww) == 0);
  ck_assert(memcmp(b->data, bw, sizeof bw) == 0);
  ck_assert_ptr_null(tfg_ckpt_meta_get(c, "format"));
  ck_assert_ptr_null(tfg_ckpt_meta_get(c, "step"));
  tfg_ckpt_free(c);
}
END_TEST

/* ---- malformed files ---------------------------------------------------- */

/* A header with 4-byte F32 tensors: the data after it is n zero bytes. */
typedef struct bad_header {
  const char *json;
  size_t n;
  const char *want1, *want2; /* in the one error, besides the path */
} bad_header;

#define T1(name, dtype, shape, offs) \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

static const bad_header bad_headers[] = {
    /* not JSON, or not the one object (offsets in the file: the header starts at byte 8) */
    {"{\"a\" 1}", 0, "expected ':' after a key, found a number", "at byte 13"},
    {"{\"a\":{\"dtype\":\"F32\"", 0, "found the end of the header", "tensor 'a'"},
    {"", 0, "expected '{'", "found the end of the header"},
    {"[]", 0, "expected '{' (the header is one JSON object), found an array", "at byte 8"},
    {"{\"__metadata__\":{\"k\":\"v\"},}", 0, "expected a key (a string), found '}'", "at byte 34"},
    {"{} x", 0, "expected only whitespace after the header object, found 'x'", "at byte 11"},
    {"{}{}", 0, "expected only whitespace after the header object, found an object", NULL},
    {"{'a':1}", 0, "expected a key (a string) or '}', found '''", NULL},
    {"{\"a\\q\":{}}", 0, "invalid escape '\\q'", "at byte 11"},
    {"{\"\\ud800\":{}}", 0, "unpaired surrogate \\uD800", NULL},
    {"{\"\\udc00\\ud800\":{}}", 0, "unpaired surrogate \\uDC00", NULL},
    {"{\"\\u12\":{}}", 0, "four hex digits", NULL},
    {"{\"a\xff\":{}}", 0, "invalid UTF-8 (byte 0xff)", "at byte 11"},
    {"{\"a\xc0\x80\":{}}", 0, "invalid UTF-8", NULL}, /* an overlong NUL */
    {"{\"a\x01\":{}}", 0, "control character 0x01", NULL},
    {"{\"a\\u0000\":{}}", 0, "\\u0000 is not supported", NULL},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "without a fraction or an exponent"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "without a fraction or an exponent"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "leading zero"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "a shape dimension must not be negative"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4,
     "tensor 'a'", "the end offset is too large"},
    {"{\"a\":{\"dtype\":true,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "dtype must be a string, found a boolean"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":null,\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "shape must be an array of integers, found null"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", 4, "tensor 'a'",
     "expected a shape dimension (an integer), found ']'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "tensor 'a'",
     "expected ']'"},
    {"{\"a\":[1]}", 0, "tensor 'a'", "expected an object with dtype, shape and data_offsets"},
    /* nesting: the schema stops a deep value at its third level */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]"
     "]]]]]]]]]]],\"data_offsets\":[0,4]}}",
     4, "tensor 'a'", "expected a shape dimension (an integer), found an array"},
    {"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", 0,
     "tensor 'a'", "found an array"},
    /* metadata */
    {"{\"__metadata__\":{\"step\":500}}", 0, "metadata key 'step' must be a string",
     "found a number"},
    {"{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "metadata key 'k' must be a string",
     "found an object"},
    {"{\"__metadata__\":[\"a\"]}", 0, "__metadata__ must be an object of strings", NULL},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "'__metadata__' appears twice", NULL},
    {"{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0,
     "metadata key 'k' appears twice", "at byte 41"},
    /* dtypes */
    {"{" T1("a", "U8", "[4]", "[0,4]") "}", 4, "tensor 'a'", "dtype 'U8' is not supported"},
    {"{" T1("a", "F8_E4M3", "[4]", "[0,4]") "}", 4, "tensor 'a'",
     "dtype 'F8_E4M3' is not supported"},
    {"{" T1("a", "f32", "[1]", "[0,4]") "}", 4, "tensor 'a'", "dtype 'f32' is not supported"},
    /* fields */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, "tensor 'a'", "missing field 'data_offsets'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"offsets\":[0,4]}}", 4, "tensor 'a'",
     "unknown field 'offsets'"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'a'", "field 'dtype' appears twice"},
    {"{" T1("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, "tensor 'a'",
     "more than 8 dimensions"},
    /* duplicate tensors: the second one is named, with its offset */
    {"{" T1("a", "F32", "[1]", "[0,4]") "," T1("b", "F32", "[1]", "[4,8]") "," T1(
         "a", "F32", "[1]", "[8,12]") "}",
     12, "tensor 'a' appears twice", "at byte 115"},
    /* data_offsets */
    {"{" T1("a", "F32", "[2]", "[8,0]") "}", 8, "tensor 'a'",
     "data_offsets [8, 0] end before they begin"},
    {"{" T1("a", "F32", "[2]", "[0,8]") "," T1("b", "F32", "[2]", "[4,12]") "}", 12,
     "tensor 'b': data_offsets [4, 12] overlap", "tensor 'a' [0, 8]"},
    {"{" T1("a", "F32", "[2]", "[0,8]") "," T1("z", "F32", "[0]", "[4,4]") "}", 8,
     "tensor 'z': data_offsets [4, 4] overlap", "tensor 'a' [0, 8]"},
    {"{" T1("a", "F32", "[2]", "[0,8]") "}", 4, "tensor 'a'",
     "data_offsets [0, 8] run past the end of the file (the data after the header holds 4 "
     "bytes)"},
    {"{" T1("a", "F32", "[0]", "[9,9]") "}", 8, "tensor 'a'", "run past the end"},
    {"{" T1("a", "F32", "[2,2]", "[0,8]") "}", 8, "tensor 'a'",
     "data_offsets [0, 8] hold 8 bytes, but F32 [2, 2] needs 16"},
    {"{" T1("a", "BOOL", "[]", "[0,0]") "}", 0, "tensor 'a'", "BOOL [] needs 1"},
    {"{" T1("a", "I64", "[4294967296,4294967296,4294967296]", "[0,8]") "}", 8, "tensor 'a'",
     "I64 [4294967296, 4294967296, 4294967296] is too large for any file"},
    {"{" T1("a", "F32", "[1]", "[0,4]") "," T1("b", "F32", "[1]", "[8,12]") "}", 12,
     "tensor 'b'", "bytes [4, 8) before it belong to no tensor"},
    {"{" T1("a", "F32", "[1]", "[0,4]") "}", 8, "the last 4 bytes of the file belong to no tensor",
     NULL},
};

START_TEST(malformed_headers) {
  static const unsigned char zeros[64];
  char name[32];
  for (size_t i = 0; i < sizeof bad_headers / sizeof *bad_headers; i++) {
    const bad_header *h = &bad_headers[i];
    snprintf(name, sizeof name, "bad%zu.safetensors", i);
    ck_assert_uint_le(h->n, sizeof zeros);
    const char *p = write_st(name, h->json, zeros, h->n);
    tfg_ckpt *c = (tfg_ckpt *)1;
    tfg_status st = tfg_ckpt_load(D, &L, p, &c);
    char *out = render();
    if (st != TFG_ERR_DATA || c != NULL || tfg_diag_error_count(D) != 1 || !strstr(out, p) ||
        !strstr(out, h->want1) || (h->want2 && !strstr(out, h->want2)))
      ck_abort_msg("case %zu (%s): status %d, %zu errors; wanted '%s' and '%s' in:\n%s", i,
                   h->json, (int)st, tfg_diag_error_count(D), h->want1,
                   h->want2 ? h->want2 : "", out);
    free(out);
    tfg_diag_clear(D);
  }
}
END_TEST

/* Files whose first 8 bytes already fail. */
START_TEST(malformed_lengths) {
  const char *p = scratch_write("zero.safetensors", "", 0);
  expect_load_error(p, TFG_ERR_DATA, "it has 0 bytes, too few for the 8-byte header length",
                    NULL);
  p = scratch_write("short.safetensors", "\x02\0\0\0\0", 5);
  expect_load_error(p, TFG_ERR_DATA, "it has 5 bytes", NULL);

  /* A truncated file: the length says 100 bytes of header, 20 are there. */
  unsigned char b[8 + 20] = {100};
  memcpy(b + 8, "{\"a\":{\"dtype\":\"F32\",", 20);
  p = scratch_write("trunc.safetensors", b, sizeof b);
  expect_load_error(p, TFG_ERR_DATA,
                    "the header length (100 bytes) points past the end of the file (28 bytes)",
                    NULL);

  /* Over the 100 MB limit: refused before anything is allocated. */
  unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
  p = scratch_write("huge.safetensors", big, sizeof big);
  expect_load_error(p, TFG_ERR_DATA, "header length is 100000001 bytes, over the format's limit",
                    NULL);
  unsigned char max[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  p = scratch_write("max.safetensors", max, sizeof max);
  expect_load_error(p, TFG_ERR_DATA, "over the format's limit", NULL);

  /* A NUL byte inside the header is not JSON whitespace. */
  p = scratch_write("nul.safetensors", "\x08\0\0\0\0\0\0\0{}\0     ", 16);
  expect_load_error(p, TFG_ERR_DATA, "whitespace after the header object, found byte 0x00",
                    "byte 10");
}
END_TEST

/* Names from a file reach the terminal escaped. */
START_TEST(malformed_names_are_shown_safely) {
  const char *p = write_st("esc.safetensors",
                           "{" T1("a\\u001b[31mred", "U8", "[1]", "[0,1]") "}", "\0", 1);
  expect_load_error(p, TFG_ERR_DATA, "tensor 'a\\u001b[31mred'", "dtype 'U8'");
}
END_TEST

/* ---- I/O errors --------------------------------------------------------- */

START_TEST(io_errors) {
  const char *dir = scratch_path("io");
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  char p[256];

  /* A missing folder: an I/O error naming the path; nothing is created. */
  float x = 1;
  tfg_ckpt_entry e[] = {{"x", TFG_DTYPE_F32, shape0(), &x}};
  snprintf(p, sizeof p, "%s/missing/m.safetensors", dir);
  expect_error(tfg_ckpt_save(D, &L, p, e, 1, NULL, 0), TFG_ERR_IO, p, strerror(ENOENT),
               "cannot save checkpoint");
  char *ls = list_dir(dir);
  ck_assert_str_eq(ls, "");
  free(ls);

  /* The target is a folder: refused before anything is written
   * (base/file.h: never renamed over what is not a regular file). */
  snprintf(p, sizeof p, "%s/adir", dir);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  expect_error(tfg_ckpt_save(D, &L, p, e, 1, NULL, 0), TFG_ERR_IO, p, strerror(EISDIR),
               "cannot save checkpoint");
  ls = list_dir(dir);
  ck_assert_str_eq(ls, "adir\n");
  free(ls);

  /* Loading: a folder, a missing file. */
  expect_load_error(p, TFG_ERR_IO, "cannot open checkpoint", strerror(EISDIR));
  rmdir(p);
  snprintf(p, sizeof p, "%s/nope.safetensors", dir);
  expect_load_error(p, TFG_ERR_IO, "cannot open checkpoint", strerror(ENOENT));
}
END_TEST

/* ---- resuming a run: tfg_ckpt_match ----------------------------------- */

/* The run being resumed: two params and Adam's two slots for each. */
enum { RUN_PARAMS = 2, RUN_N = 6 };
static const char *const run_names[RUN_N] = {"h.w", "h.b", "h.w:exp_avg", "h.w:exp_avg_sq",
                                             "h.b:exp_avg", "h.b:exp_avg_sq"};
static float run_data[6];

static tfg_ckpt_entry run_entry(const char *name) {
  bool w = strncmp(name, "h.w", 3) == 0;
  return (tfg_ckpt_entry){name, TFG_DTYPE_F32, w ? shape2(2, 3) : shape1(3), run_data};
}

/* Saves the named tensors (shaped as the run's, or [1] for names it does
 * not have) with metadata "KEY=VALUE" strings, and loads the file back. */
static tfg_ckpt *resume_file(const char *const *names, int n, const char *const *meta, int nmeta) {
  tfg_ckpt_entry e[16];
  tfg_ckpt_meta m[4];
  char kv[4][64];
  for (int i = 0; i < n; i++) {
    e[i] = run_entry(names[i]);
    bool known = false;
    for (int k = 0; k < RUN_N; k++) known = known || !strcmp(names[i], run_names[k]);
    if (!known) e[i].shape = shape1(1);
  }
  for (int i = 0; i < nmeta; i++) {
    snprintf(kv[i], sizeof kv[i], "%s", meta[i]);
    char *eq = strchr(kv[i], '=');
    *eq = '\0';
    m[i] = (tfg_ckpt_meta){kv[i], eq + 1};
  }
  const char *p = scratch_path("resume.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, e, n, m, nmeta));
  return load_ok(p);
}

/* Matches c against the run (nparams params, then n - nparams state). */
static tfg_status match(const tfg_ckpt *c, int n, const char *optimizer, int *at, int64_t *step) {
  tfg_ckpt_entry want[RUN_N];
  for (int i = 0; i < n; i++) want[i] = run_entry(run_names[i]);
  return tfg_ckpt_match(D, &L, "resume.safetensors", c, want, n, RUN_PARAMS, optimizer, at, step);
}

/* What restores and what starts fresh. */
START_TEST(resume_restores_or_starts_fresh) {
  int at[RUN_N];
  int64_t step = -1;
  /* Everything, as tfg wrote it: all restored, at the file's step. */
  static const char *const meta[] = {"step=7", "optimizer=adam", "format=tfg 0.1.0"};
  tfg_ckpt *c = resume_file(run_names, RUN_N, meta, 3);
  expect_no_errors(match(c, RUN_N, "adam", at, &step));
  for (int i = 0; i < RUN_N; i++) ck_assert_str_eq(tfg_ckpt_entry_at(c, at[i])->name, run_names[i]);
  ck_assert_int_eq(step, 7);
  tfg_ckpt_free(c);

  /* Params only (from PyTorch, say): the state starts fresh, at step 0. */
  c = resume_file(run_names, RUN_PARAMS, meta, 1);
  expect_no_errors(match(c, RUN_N, "adam", at, &step));
  ck_assert_int_ge(at[0], 0);
  ck_assert_int_ge(at[1], 0);
  for (int i = RUN_PARAMS; i < RUN_N; i++) ck_assert_int_eq(at[i], -1);
  ck_assert_int_eq(step, 0);
  tfg_ckpt_free(c);

  /* Another optimizer's state is not used as ours: a warning, our state
   * starts fresh at step 0, the params are restored. */
  static const char *const sgd_names[] = {"h.w", "h.b", "h.w:momentum_buffer", "h.b:momentum_buffer"};
  static const char *const sgd_meta[] = {"step=20", "optimizer=sgd"};
  c = resume_file(sgd_names, 4, sgd_meta, 2);
  expect_no_errors(match(c, RUN_N, "adam", at, &step));
  ck_assert_int_ge(at[0], 0);
  for (int i = RUN_PARAMS; i < RUN_N; i++) ck_assert_int_eq(at[i], -1);
  ck_assert_int_eq(step, 0);
  char *out = render();
  ck_assert_msg(strstr(out, "prog.tfg:1:14: warning: checkpoint resume.safetensors was saved by optimizer sgd, "
                            "not this run's adam: its params are restored, its optimizer state is not"),
                "%s", out);
  free(out);
  tfg_diag_clear(D);
  /* The same file into adam's state slots named alike is still refused
   * as adam's: adamw's moments are not adam's. */
  static const char *const adamw_meta[] = {"step=20", "optimizer=adamw"};
  tfg_ckpt_free(c);
  c = resume_file(run_names, RUN_N, adamw_meta, 2);
  expect_no_errors(match(c, RUN_N, "adam", at, &step));
  for (int i = RUN_PARAMS; i < RUN_N; i++) ck_assert_int_eq(at[i], -1);
  tfg_diag_clear(D);
  tfg_ckpt_free(c);

  /* A run without state (plain SGD) from a params-only file of its own. */
  static const char *const plain_meta[] = {"step=3", "optimizer=sgd"};
  c = resume_file(run_names, RUN_PARAMS, plain_meta, 2);
  expect_no_errors(match(c, RUN_PARAMS, "sgd", at, &step));
  ck_assert_int_eq(step, 3);
  tfg_ckpt_free(c);
}
END_TEST

/* ---- a load statement's file: header only, tfg_safetensors_match ------ */

/* A graph of PARAM nodes named names[i], shaped as the run's (h.w
 * f32[2,3], others f32[3]); ids[i] their ids. */
static tfg_graph *load_graph(const char *const *names, int n, tfg_node_id *ids) {
  tfg_graph *g = tfg_graph_new();
  for (int i = 0; i < n; i++) {
    ids[i] = tfg_graph_add(g, TFG_OP_PARAM, NULL, 0, &L);
    tfg_node *nd = tfg_graph_node(g, ids[i]);
    tfg_ckpt_entry e = run_entry(names[i]);
    nd->name = names[i];
    nd->dtype = e.dtype;
    nd->shape = e.shape;
  }
  return g;
}

/* The header alone gives the tensors without their bytes; matching it
 * against params is strict or not, the optimizer state never an error,
 * a shape that differs always one. */
START_TEST(load_header_and_match) {
  static const char *const meta[] = {"step=7", "optimizer=adam"};
  tfg_ckpt_free(resume_file(run_names, RUN_N, meta, 2));
  const char *p = scratch_path("resume.safetensors");
  tfg_safetensors *f = NULL;
  expect_no_errors(tfg_safetensors_load_header(D, &L, "params file", p, &f));
  ck_assert_int_eq(tfg_safetensors_count(f), RUN_N);
  for (int i = 0; i < RUN_N; i++) ck_assert_ptr_null(tfg_safetensors_tensor_at(f, i)->data);
  ck_assert_int_eq(tfg_safetensors_state_owner(f, tfg_safetensors_find(f, "h.w:exp_avg")),
                   tfg_safetensors_find(f, "h.w"));
  ck_assert_int_eq(tfg_safetensors_state_owner(f, tfg_safetensors_find(f, "h.w")), -1);

  /* Strict: both params from the file, their Adam state skipped. */
  tfg_node_id ids[3];
  int at[3];
  tfg_graph *g = load_graph(run_names, 2, ids);
  expect_no_errors(tfg_safetensors_match(D, &L, "m.st", f, g, ids, 2, true, at));
  ck_assert_str_eq(tfg_safetensors_tensor_at(f, at[0])->name, "h.w");
  ck_assert_str_eq(tfg_safetensors_tensor_at(f, at[1])->name, "h.b");
  tfg_graph_free(g);

  /* A param the file lacks: an error when strict, skipped (-1) when not. */
  static const char *const three[] = {"h.w", "h.b", "h.c"};
  g = load_graph(three, 3, ids);
  expect_error(tfg_safetensors_match(D, &L, "m.st", f, g, ids, 3, true, at), TFG_ERR_DATA,
               "'m.st' has no tensor for param 'h.c'", NULL, NULL);
  expect_no_errors(tfg_safetensors_match(D, &L, "m.st", f, g, ids, 3, false, at));
  ck_assert_int_eq(at[2], -1);
  ck_assert_int_ge(at[1], 0);
  tfg_graph_free(g);

  /* A tensor that is no param: an error when strict, skipped when not. */
  g = load_graph(run_names, 1, ids);
  expect_error(tfg_safetensors_match(D, &L, "m.st", f, g, ids, 1, true, at), TFG_ERR_DATA,
               "'m.st' has tensor 'h.b', which is no param of this program", NULL, NULL);
  expect_no_errors(tfg_safetensors_match(D, &L, "m.st", f, g, ids, 1, false, at));
  tfg_graph_free(g);

  /* Another shape: an error strict or not. */
  g = load_graph(run_names, 2, ids);
  tfg_graph_node(g, ids[1])->shape = shape1(4);
  expect_error(tfg_safetensors_match(D, &L, "m.st", f, g, ids, 2, false, at), TFG_ERR_DATA,
               "'m.st' holds 'h.b' as f32[3], but the param is f32[4]", NULL, NULL);
  tfg_graph_free(g);
  tfg_safetensors_free(f);

  /* A truncated file is refused from its header alone. */
  struct stat st;
  ck_assert_int_eq(stat(p, &st), 0);
  ck_assert_int_eq(truncate(p, st.st_size - 4), 0);
  f = NULL;
  expect_error(tfg_safetensors_load_header(D, &L, "params file", p, &f), TFG_ERR_DATA, "run past the end of the file",
               NULL, NULL);
  ck_assert_ptr_null(f);
}
END_TEST

/* What is refused, each with one error naming the key. */
START_TEST(resume_refusals) {
  int at[RUN_N];
  int64_t step;
  static const char *const meta[] = {"optimizer=adam"};
  /* Part of the state: only a file with none of it starts it fresh (it
   * was restored as "optimizer state fresh, step 0"). */
  static const char *const partial[] = {"h.w", "h.b", "h.w:exp_avg", "h.w:exp_avg_sq", "h.b:exp_avg_sq"};
  tfg_ckpt *c = resume_file(partial, 5, meta, 1);
  expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA,
               "checkpoint resume.safetensors has no tensor 'h.b:exp_avg' for the optimizer state", NULL,
               "it holds 3 of the 4 optimizer state tensors");
  tfg_ckpt_free(c);

  /* Keys the run does not have (they were ignored). */
  const char *names[RUN_N + 1];
  for (int i = 0; i < RUN_N; i++) names[i] = run_names[i];
  names[RUN_N] = "h.w:bogus_slot";
  c = resume_file(names, RUN_N + 1, meta, 1);
  expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA, "has tensor 'h.w:bogus_slot', optimizer state that this run's adam does not keep",
               NULL, NULL);
  tfg_ckpt_free(c);
  names[RUN_N] = "bogus.b";
  c = resume_file(names, RUN_N + 1, meta, 1);
  expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA,
               "has tensor 'bogus.b', which is neither a param of this program nor its optimizer state", NULL, NULL);
  tfg_ckpt_free(c);
  /* ... also beside another optimizer's state, which alone is skipped. */
  static const char *const sgd_names[] = {"h.w", "h.b", "h.w:momentum_buffer", "bogus:momentum_buffer"};
  static const char *const sgd_meta[] = {"optimizer=sgd"};
  c = resume_file(sgd_names, 4, sgd_meta, 1);
  expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA, "has tensor 'bogus:momentum_buffer', which is neither",
               NULL, NULL);
  tfg_ckpt_free(c);
  /* State of the same optimizer that this run does not keep. */
  c = resume_file(run_names, RUN_N, (const char *const[]){"optimizer=sgd"}, 1);
  expect_error(match(c, RUN_PARAMS, "sgd", at, &step), TFG_ERR_DATA,
               "has tensor 'h.w:exp_avg', optimizer state that this run's sgd does not keep", NULL, NULL);
  tfg_ckpt_free(c);

  /* A param missing, or of another shape. */
  c = resume_file(run_names + 1, RUN_N - 1, meta, 1);
  expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA, "has no tensor 'h.w' for the param of that name",
               NULL, NULL);
  tfg_ckpt_free(c);
  tfg_ckpt_entry e[RUN_N];
  for (int i = 0; i < RUN_N; i++) e[i] = run_entry(run_names[i]);
  e[0].shape = shape2(3, 2);
  const char *p = scratch_path("resume.safetensors");
  expect_no_errors(tfg_ckpt_save(D, &L, p, e, RUN_N, NULL, 0));
  c = load_ok(p);
  expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA, "'h.w' is f32[3,2] but the program's is f32[2,3]",
               NULL, NULL);
  tfg_ckpt_free(c);

  /* Steps that are not a step: each says what is wrong (-5 was "not a
   * number"). */
  static const struct {
    const char *meta, *why;
  } steps[] = {
      {"step=-5", "its step '-5' is negative"},
      {"step=abc", "its step 'abc' is not a whole number"},
      {"step=", "its step '' is not a whole number"},
      {"step= 5", "its step ' 5' is not a whole number"},
      {"step=99999999999999999999", "is out of range (the largest step is 2^63 - 1)"},
  };
  for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
    c = resume_file(run_names, RUN_N, (const char *const[]){"optimizer=adam", steps[k].meta}, 2);
    expect_error(match(c, RUN_N, "adam", at, &step), TFG_ERR_DATA, "checkpoint resume.safetensors: ",
                 steps[k].why, NULL);
    tfg_ckpt_free(c);
  }
  c = resume_file(run_names, RUN_N, (const char *const[]){"optimizer=adam", "step=-0"}, 2);
  expect_no_errors(match(c, RUN_N, "adam", at, &step));
  ck_assert_int_eq(step, 0);
  tfg_ckpt_free(c);
}
END_TEST

/* A save removes the temporaries that killed writers left beside the
 * same checkpoint (pid not alive), and nothing else: not a live
 * process's, not another checkpoint's, not other names. */
START_TEST(stale_temps_removed) {
  char dir[128], p[192], f[256];
  snprintf(dir, sizeof dir, "%s/stale", scratch_dir);
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  pid_t dead = fork();
  ck_assert_int_ge(dead, 0);
  if (dead == 0) _exit(0);
  ck_assert_int_eq(waitpid(dead, NULL, 0), dead);
  long live = (long)getppid();
  const char *names[] = {"m.safetensors.tmp.%ld", "m.safetensors.tmp.%ld", "other.safetensors.tmp.%ld",
                         "m.safetensors.tmp.%ld.1", "m.safetensors.tmp.x%ld"};
  long pids[] = {(long)dead, live, (long)dead, (long)dead, (long)dead};
  for (int i = 0; i < 5; i++) {
    char name[96];
    snprintf(name, sizeof name, names[i], pids[i]);
    snprintf(f, sizeof f, "%s/%s", dir, name);
    fclose(fopen(f, "w"));
  }
  snprintf(p, sizeof p, "%s/m.safetensors", dir);
  float x = 1;
  tfg_ckpt_entry e[] = {{"x", TFG_DTYPE_F32, shape0(), &x}};
  expect_no_errors(tfg_ckpt_save(D, &L, p, e, 1, NULL, 0));
  /* What stays, in list_dir's order (sorted by strcmp): where the live
   * writer's name falls depends on the two PIDs' digits. */
  char kept[4][96], want[512] = "m.safetensors\n";
  snprintf(kept[0], sizeof kept[0], "m.safetensors.tmp.%ld", live);
  snprintf(kept[1], sizeof kept[1], "m.safetensors.tmp.%ld.1", (long)dead);
  snprintf(kept[2], sizeof kept[2], "m.safetensors.tmp.x%ld", (long)dead);
  snprintf(kept[3], sizeof kept[3], "other.safetensors.tmp.%ld", (long)dead);
  qsort(kept, 4, sizeof kept[0], cmp_names);
  for (int i = 0; i < 4; i++) {
    strcat(want, kept[i]);
    strcat(want, "\n");
  }
  char *ls = list_dir(dir);
  ck_assert_str_eq(ls, want);
  free(ls);
}
END_TEST

/* ---- atomicity under kill -9 -------------------------------------------- */

/* Two versions of a 64 MB checkpoint that differ everywhere: metadata
 * (and so the header length), the shape of "w", every word of its data,
 * and "tag". A torn or mixed file cannot pass for either. */
#define BIG_WORDS (16u << 20)
static uint32_t *big[2];
static const char *const version_names[2] = {"A", "B"};

static void make_versions(void) {
  for (int v = 0; v < 2; v++) {
    big[v] = malloc(sizeof(uint32_t) * BIG_WORDS);
    ck_assert_ptr_nonnull(big[v]);
    for (uint32_t i = 0; i < BIG_WORDS; i++)
      big[v][i] = (i * 2654435761u) ^ (v ? 0x5bd1e995u : 0x1b873593u);
  }
}

static tfg_status save_version(tfg_diag *d, const char *p, int v) {
  int32_t tag = v + 1;
  tfg_ckpt_entry e[2] = {
      {"w", TFG_DTYPE_F32, v ? shape2(BIG_WORDS / 4, 4) : shape1(BIG_WORDS), big[v]},
      {"tag", TFG_DTYPE_I32, shape0(), &tag},
  };
  tfg_ckpt_meta m[2] = {{"version", version_names[v]}, {"note", "the second version"}};
  return tfg_ckpt_save(d, &L, p, e, 2, m, v ? 2 : 1);
}

/* Loads p and returns which version it holds exactly, or aborts. */
static int loaded_version(const char *p) {
  tfg_ckpt *c = load_ok(p);
  const char *vn = tfg_ckpt_meta_get(c, "version");
  ck_assert_ptr_nonnull(vn);
  int v = strcmp(vn, "B") == 0;
  ck_assert_str_eq(vn, version_names[v]);
  ck_assert_int_eq(tfg_ckpt_count(c), 2);
  const tfg_ckpt_entry *w = tfg_ckpt_entry_at(c, 0), *tag = tfg_ckpt_entry_at(c, 1);
  ck_assert_str_eq(w->name, "w");
  ck_assert_int_eq(w->shape.rank, v ? 2 : 1);
  ck_assert_int_eq(tfg_shape_numel(&w->shape), BIG_WORDS);
  ck_assert_msg(memcmp(w->data, big[v], sizeof(uint32_t) * BIG_WORDS) == 0,
                "version %s: the data differs", vn);
  ck_assert_int_eq(*(const int32_t *)tag->data, v + 1);
  if (v == 0) ck_assert_ptr_null(tfg_ckpt_meta_get(c, "note"));
  tfg_ckpt_free(c);
  return v;
}

/* The saving child: versions first, !first, first, ... for ever, one byte
 * down done after each completed save. Never returns (SIGKILL ends it). */
static _Noreturn void saver(const char *p, int first, int done) {
  tfg_diag *d = tfg_diag_new();
  for (int v = first;; v ^= 1) {
    if (save_version(d, p, v) != TFG_OK) _exit(3);
    char b = (char)v;
    if (write(done, &b, 1) != 1) _exit(4);
  }
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A child saves the two versions in turn; we kill -9 it at various
 * moments: 1, 5, 20 and 50 ms after it starts (mostly inside a save:
 * writing, syncing), and 0 or 3 ms after it reports a completed save
 * (inside the next one, or between a rename and the folder's fsync).
 * Each child starts with the version not on disk, so every completed save
 * changes the file. After each kill:
 *   - the target loads without error and is exactly version A or B;
 *   - the folder holds the target and temporaries "<target>.tmp.<pid>"
 *     of killed children only, none older than the last child that
 *     completed a save: a save removes the temporaries of dead writers
 *     before making its own, so after a kill that follows a completed
 *     save only that child's own may remain. (A child killed before its
 *     first save began removed nothing; on a loaded machine several in a
 *     row may be, each leaving the ones before.) Nothing else may appear;
 *   - across the rounds the target changes version (saves completed and
 *     renames happened under the kills, not just aborted writes).
 * Ten rounds of five kills: about 7 s on a local disk (each load reads
 * 64 MB; a kill during fsync waits for it). */
START_TEST(atomic_under_kill9) {
  make_versions();
  char dir[128], target[160];
  snprintf(dir, sizeof dir, "%s/atomic", scratch_dir);
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  snprintf(target, sizeof target, "%s/m.safetensors", dir);
  expect_no_errors(save_version(D, target, 0));
  int current = loaded_version(target);

  /* Per round: 1, 5, 20 and 50 ms after the child starts, then 0 or 3 ms
   * (alternate rounds) after it reports a completed save. */
  static const int start_ms[] = {1, 5, 20, 50, -1};
  int changes = 0, completed = 0;
  pid_t since[64]; /* the children killed since the last that completed a save */
  int nsince = 0;
  for (int round = 0; round < 10; round++) {
    for (size_t k = 0; k < sizeof start_ms / sizeof *start_ms; k++) {
      bool after_save = start_ms[k] < 0;
      int ms = after_save ? 3 * (round % 2) : start_ms[k];
      int fds[2];
      ck_assert_int_eq(pipe(fds), 0);
      pid_t pid = fork();
      ck_assert_int_ge(pid, 0);
      if (pid == 0) {
        close(fds[0]);
        saver(target, !current, fds[1]); /* the first save changes the file */
      }
      close(fds[1]);
      /* No assertion may fail while the child lives: it would outlive us. */
      bool waited_ok = true;
      if (after_save) {
        struct pollfd pf = {fds[0], POLLIN, 0};
        char b;
        waited_ok = poll(&pf, 1, 20000) == 1 && read(fds[0], &b, 1) == 1;
        completed += waited_ok;
      }
      sleep_ms(ms);
      kill(pid, SIGKILL);
      int status;
      pid_t w = waitpid(pid, &status, 0);
      char b;
      while (read(fds[0], &b, 1) == 1) completed++; /* the child is gone: no blocking */
      close(fds[0]);
      ck_assert_int_eq(w, pid);
      ck_assert_msg(waited_ok, "no save completed within 20 s");
      ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                    "the saving child ended by itself (status 0x%x)", (unsigned)status);

      if (after_save) nsince = 0; /* it removed every older temporary */
      ck_assert_int_lt(nsince, 64);
      since[nsince++] = pid;
      char *ls = list_dir(dir);
      bool has_target = false, others_ok = true;
      for (char *line = ls, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        *end = '\0';
        long tp;
        char rest;
        if (!strcmp(line, "m.safetensors")) {
          has_target = true;
        } else if (sscanf(line, "m.safetensors.tmp.%ld%c", &tp, &rest) == 1) {
          bool known = false;
          for (int q = 0; q < nsince; q++) known |= since[q] == (pid_t)tp;
          others_ok &= known;
        } else {
          others_ok = false;
        }
        *end = '\n';
      }
      ck_assert_msg(has_target && others_ok, "round %d, kill %zu: the folder holds:\n%s", round, k, ls);
      free(ls);

      int v = loaded_version(target);
      changes += v != current;
      current = v;
    }
  }
  ck_assert_int_gt(completed, 0);
  ck_assert_int_gt(changes, 0);
  free(big[0]);
  free(big[1]);
}
END_TEST

Suite *suite_ckpt(void) {
  Suite *s = suite_create("ckpt");
  TCase *tc = tcase_create("core");
  tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, roundtrip_every_dtype);
  tcase_add_test(tc, roundtrip_empty);
  tcase_add_test(tc, dtype_names);
  tcase_add_test(tc, golden_two_tensors);
  tcase_add_test(tc, golden_escapes);
  tcase_add_test(tc, golden_reference_vectors);
  tcase_add_test(tc, accepts_other_writers);
  tcase_add_test(tc, python_writer);
  tcase_add_test(tc, malformed_headers);
  tcase_add_test(tc, malformed_lengths);
  tcase_add_test(tc, malformed_names_are_shown_safely);
  tcase_add_test(tc, io_errors);
  tcase_add_test(tc, resume_restores_or_starts_fresh);
  tcase_add_test(tc, resume_refusals);
  tcase_add_test(tc, load_header_and_match);
  tcase_add_test(tc, stale_temps_removed);
  suite_add_tcase(s, tc);

  /* Alone in its case, so CK_RUN_CASE=atomic runs just it. */
  tc = tcase_create("atomic");
  tcase_add_unchecked_fixture(tc, scratch_make, scratch_remove);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, atomic_under_kill9);
  suite_add_tcase(s, tc);
  return s;
}
