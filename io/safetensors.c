/* io/safetensors.c: the safetensors format: the header writer and the
 * strict, bounded reader (io/safetensors.h).
 *
 * The format (huggingface/safetensors): an 8-byte little-endian length N,
 * N bytes of UTF-8 JSON holding one object, then the byte buffer; each
 * tensor's data_offsets [BEGIN, END) count from the buffer's first byte.
 *
 * Writing. Where the format leaves a choice we make the reference
 * writer's (safetensors/src/tensor.rs, serde_json), so our files are
 * byte-identical to its for the same tensors in the same order:
 *   - compact JSON, no spaces; "__metadata__" comes first, and only when
 *     there is metadata (nmeta > 0), its members in the caller's order;
 *   - then the tensors in the caller's order, each as
 *     {"dtype":"F32","shape":[2,3],"data_offsets":[BEGIN,END]}, their data
 *     back to back (the format allows no gaps);
 *   - strings escaped as serde_json does (base/json.h, the writer every
 *     JSON of tfg shares): \" \\ \b \f \n \r \t, other bytes below
 *     0x20 as \u00xx (lower-case hex), everything else raw UTF-8;
 *   - the JSON padded with spaces to a multiple of 8 bytes, so the buffer
 *     starts 8-aligned in the file.
 * The reference sorts tensors by alignment, then name; we keep the
 * caller's order (it is the program's order), so a tensor after an
 * odd-sized f16 may sit at an odd offset. The reader copies every tensor
 * into its own block, so loaded data is always aligned.
 *
 * Reading is strict: a checkpoint restores a run, so anything we do not
 * understand exactly is refused rather than guessed at.
 *   - N is at most 100 MB (the reference's limit) and must lie within the
 *     file. The file is read with read() (no mmap: a file truncated under
 *     us is an error, not a SIGBUS), each tensor into its own block.
 *   - The JSON is parsed straight into the schema: the top level is one
 *     object whose members are "__metadata__" (an object of strings) or
 *     tensors (objects with exactly dtype, shape and data_offsets, in any
 *     order; the reference would ignore other fields, but no writer makes
 *     them and a typo like "data_offset" should not pass silently). The
 *     header's order of tensors need not be their order in the data. Any
 *     JSON whitespace may separate tokens and follow the object (writers
 *     pad with spaces). Strings must be valid UTF-8; escapes include
 *     \uXXXX with surrogate pairs; \u0000 is refused (names are C
 *     strings). Numbers must be non-negative integers below 2^63, with no
 *     fraction or exponent; true, false and null fit nowhere. Since the
 *     parser follows the schema it never nests deeper than three levels
 *     (header, tensor, shape): a deeper value is a schema error at the
 *     third, so no input can make it recurse or allocate per JSON token;
 *     memory grows with the tensors it records.
 *   - A key twice (a tensor, "__metadata__", a metadata key, a field of a
 *     tensor) is an error.
 *   - Every tensor has END >= BEGIN and END - BEGIN = numel x dtype size,
 *     and the tensors sorted by offset tile the buffer exactly: no
 *     overlap, no hole, nothing after the last one (the reference refuses
 *     holes and trailing bytes too: unindexed bytes would let one file be
 *     two things at once).
 * Every failure records exactly one error naming the file, and the tensor
 * or key when there is one; header errors also give the byte offset in
 * the file. Names read from a file are shown with control and invisible
 * characters escaped, so a hostile name cannot garble the terminal.
 * Statuses: TFG_ERR_IO for a file that cannot be opened or read,
 * TFG_ERR_DATA for a malformed one, TFG_ERR_NOMEM when the tensors do not
 * fit in host memory. */
#include "io/safetensors_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/json.h"
#include "base/utf8.h"

/* The reference reader's limit on N: a larger header is surely not a
 * safetensors file, and we refuse it before allocating anything. */
#define ST_MAX_HEADER 100000000u
/* Code points of a name shown in a message before it is cut with "...". */
#define ST_SHOW_MAX 64

static const char *const dtype_names[TFG_DTYPE_COUNT] = {
    [TFG_DTYPE_F32] = "F32", [TFG_DTYPE_F64] = "F64", [TFG_DTYPE_F16] = "F16",
    [TFG_DTYPE_BF16] = "BF16", [TFG_DTYPE_I32] = "I32", [TFG_DTYPE_I64] = "I64",
    [TFG_DTYPE_BOOL] = "BOOL",
};

const char *tfg_safetensors_dtype_name(tfg_dtype t) {
  TFG_ASSERT((unsigned)t < TFG_DTYPE_COUNT);
  return dtype_names[t];
}

/* ---- names and sizes ---------------------------------------------------- */

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, n - i, &cp);
    if (len == 0) return false;
    i += (size_t)len;
  }
  return true;
}

int64_t tfg_safetensors_nbytes(tfg_dtype t, const tfg_shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->dim[i] == 0) return 0;
  int64_t n = (int64_t)tfg_dtype_size(t);
  for (int i = 0; i < s->rank; i++) {
    if (s->dim[i] < 0 || n > INT64_MAX / s->dim[i]) return -1;
    n *= s->dim[i];
  }
  return n;
}

char *tfg_safetensors_show(const char *s) {
  tfg_strbuf b = {0};
  tfg_strbuf_putn(&b, "", 0);
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  int count = 0;
  for (size_t i = 0; i < n; count++) {
    if (count == ST_SHOW_MAX) {
      tfg_strbuf_puts(&b, "...");
      break;
    }
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, n - i, &cp);
    if (len == 0) {
      tfg_strbuf_printf(&b, "\\x%02x", p[i]);
      i++;
    } else {
      if (tfg_utf8_is_unsafe(cp))
        tfg_strbuf_printf(&b, "\\u%04x", (unsigned)cp);
      else
        tfg_strbuf_putn(&b, s + i, (size_t)len);
      i += (size_t)len;
    }
  }
  return tfg_strbuf_take(&b);
}

/* ---- writing ------------------------------------------------------------ */

/* Asserts the caller's side of tfg_safetensors_header's contract: strings
 * present and valid UTF-8 (the header is UTF-8 JSON), tensor names unique
 * and not "__metadata__", metadata keys unique, dtypes and shapes valid,
 * data present for every non-empty tensor. Breaking it is a bug in tfg,
 * and a file written anyway would be one no reader accepts. */
static void check_header_args(const tfg_safetensors_tensor *e, int n, const tfg_safetensors_meta *meta,
                            int nmeta) {
  TFG_ASSERT(n >= 0 && nmeta >= 0 && (n == 0 || e) && (nmeta == 0 || meta));
  int most = n > nmeta ? n : nmeta;
  const char **v = malloc(sizeof *v * (size_t)(most ? most : 1));
  TFG_ASSERT(v != NULL);
  for (int i = 0; i < n; i++) {
    TFG_ASSERT(e[i].name != NULL && utf8_valid(e[i].name));
    TFG_ASSERT(strcmp(e[i].name, "__metadata__") != 0);
    TFG_ASSERT((unsigned)e[i].dtype < TFG_DTYPE_COUNT);
    TFG_ASSERT(e[i].shape.rank >= 0 && e[i].shape.rank <= TFG_MAX_RANK);
    int64_t bytes = tfg_safetensors_nbytes(e[i].dtype, &e[i].shape);
    TFG_ASSERT(bytes >= 0);
    TFG_ASSERT(bytes == 0 || e[i].data != NULL);
    v[i] = e[i].name;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_str_ptr);
  for (int i = 1; i < n; i++) TFG_ASSERT(strcmp(v[i - 1], v[i]) != 0); /* names are unique */
  for (int i = 0; i < nmeta; i++) {
    TFG_ASSERT(meta[i].key != NULL && utf8_valid(meta[i].key));
    TFG_ASSERT(meta[i].value != NULL && utf8_valid(meta[i].value));
    v[i] = meta[i].key;
  }
  qsort(v, (size_t)nmeta, sizeof *v, cmp_str_ptr);
  for (int i = 1; i < nmeta; i++) TFG_ASSERT(strcmp(v[i - 1], v[i]) != 0); /* keys are unique */
  free(v);
}

void tfg_safetensors_header(tfg_strbuf *b, const tfg_safetensors_tensor *e, int n,
                            const tfg_safetensors_meta *meta, int nmeta) {
  check_header_args(e, n, meta, nmeta);
  tfg_strbuf_putn(b, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in below */
  tfg_strbuf_putc(b, '{');
  if (nmeta > 0) {
    tfg_strbuf_puts(b, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) tfg_strbuf_putc(b, ',');
      tfg_json_put_string(b, meta[i].key);
      tfg_strbuf_putc(b, ':');
      tfg_json_put_string(b, meta[i].value);
    }
    tfg_strbuf_putc(b, '}');
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (i || nmeta > 0) tfg_strbuf_putc(b, ',');
    tfg_json_put_string(b, e[i].name);
    tfg_strbuf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[e[i].dtype]);
    for (int k = 0; k < e[i].shape.rank; k++)
      tfg_strbuf_printf(b, "%s%lld", k ? "," : "", (long long)e[i].shape.dim[k]);
    uint64_t bytes = (uint64_t)tfg_safetensors_nbytes(e[i].dtype, &e[i].shape);
    TFG_ASSERT(off + bytes >= off);
    tfg_strbuf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + bytes));
    off += bytes;
  }
  tfg_strbuf_putc(b, '}');
  while ((b->len - 8) % 8) tfg_strbuf_putc(b, ' ');
  uint64_t len = b->len - 8;
  for (int i = 0; i < 8; i++) b->data[i] = (char)(unsigned char)(len >> (8 * i));
}

/* ---- reading ------------------------------------------------------------ */

/* err from tfg_file_read_all: -1 when the file shrank under us (its size
 * was checked). */
static tfg_status read_error(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path,
                             int err) {
  if (err < 0)
    tfg_diag_error(d, loc, "cannot read %s '%s': the file shrank while being read", what, path);
  else
    tfg_diag_error(d, loc, "cannot read %s '%s': %s", what, path, strerror(err));
  return TFG_ERR_IO;
}

/* Reads the open file fd of size bytes into c (empty): the header, then,
 * unless header_only, every tensor's data. */
static tfg_status load_fd(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path,
                          int fd, uint64_t size, bool header_only, tfg_safetensors *c) {
  if (size < 8) {
    tfg_diag_error(d, loc,
                   "'%s' is not a safetensors file: it has %llu bytes, too few for the 8-byte "
                   "header length",
                   path, (unsigned long long)size);
    return TFG_ERR_DATA;
  }
  unsigned char len8[8];
  int err = tfg_file_read_all(fd, len8, 8);
  if (err) return read_error(d, loc, what, path, err);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
  if (hlen > ST_MAX_HEADER) {
    tfg_diag_error(d, loc,
                   "'%s': the header length is %llu bytes, over the format's limit of 100 MB "
                   "(is this a safetensors file?)",
                   path, (unsigned long long)hlen);
    return TFG_ERR_DATA;
  }
  if (hlen > size - 8) {
    tfg_diag_error(d, loc,
                   "'%s': the header length (%llu bytes) points past the end of the file "
                   "(%llu bytes)",
                   path, (unsigned long long)hlen, (unsigned long long)size);
    return TFG_ERR_DATA;
  }
  unsigned char *text = malloc((size_t)hlen + 1);
  if (!text) {
    tfg_diag_error(d, loc, "out of memory reading the header of '%s'", path);
    return TFG_ERR_NOMEM;
  }
  err = tfg_file_read_all(fd, text, hlen);
  if (err) {
    free(text);
    return read_error(d, loc, what, path, err);
  }
  text[hlen] = '\0';

  int *order;
  bool ok = tfg_safetensors_parse_header(d, loc, path, text, (size_t)hlen, size - 8 - hlen, c, &order);
  free(text);
  if (!ok) return TFG_ERR_DATA;
  if (header_only) {
    free(order);
    return TFG_OK;
  }

  /* The spans tile the data, so reading them in offset order reads the
   * rest of the file front to back. Each tensor gets its own block:
   * malloc's alignment suits every dtype, whatever the file's offsets. */
  tfg_status st = TFG_OK;
  for (int k = 0; k < c->n && st == TFG_OK; k++) {
    tfg_safetensors_tensor *t = &c->e[order[k]];
    uint64_t bytes = (uint64_t)tfg_safetensors_nbytes(t->dtype, &t->shape);
    void *data = bytes <= SIZE_MAX ? malloc(bytes ? (size_t)bytes : 1) : NULL;
    if (!data) {
      char *s = tfg_safetensors_show(t->name);
      tfg_diag_error(d, loc, "out of memory reading '%s': tensor '%s' needs %llu bytes", path, s,
                     (unsigned long long)bytes);
      free(s);
      st = TFG_ERR_NOMEM;
      break;
    }
    t->data = data;
    err = tfg_file_read_all(fd, data, bytes);
    if (err) st = read_error(d, loc, what, path, err);
  }
  free(order);
  return st;
}

/* tfg_safetensors_load and tfg_safetensors_load_header. */
static tfg_status load_path(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path, bool header_only,
                            tfg_safetensors **out) {
  TFG_ASSERT(what != NULL && path != NULL && out != NULL);
  *out = NULL;
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(path, &st, &why);
  if (fd < 0) {
    tfg_diag_error(d, loc, "cannot open %s '%s': %s", what, path, why);
    return TFG_ERR_IO;
  }
  tfg_safetensors *c = calloc(1, sizeof *c);
  TFG_ASSERT(c != NULL);
  tfg_status s = load_fd(d, loc, what, path, fd, (uint64_t)st.st_size, header_only, c);
  close(fd);
  if (s != TFG_OK) {
    tfg_safetensors_free(c);
    return s;
  }
  *out = c;
  return TFG_OK;
}

tfg_status tfg_safetensors_load(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path,
                                tfg_safetensors **out) {
  return load_path(d, loc, what, path, false, out);
}

tfg_status tfg_safetensors_load_header(tfg_diag *d, const tfg_loc *loc, const char *what, const char *path,
                                       tfg_safetensors **out) {
  return load_path(d, loc, what, path, true, out);
}

/* ---- lookups ------------------------------------------------------------ */

void tfg_safetensors_free(tfg_safetensors *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) {
    free((char *)c->e[i].name);
    free((void *)c->e[i].data);
  }
  for (int i = 0; i < c->nmeta; i++) {
    free((char *)c->meta[i].key);
    free((char *)c->meta[i].value);
  }
  free(c->e);
  free(c->by_name);
  free(c->meta);
  free(c->meta_by_key);
  free(c);
}

int tfg_safetensors_count(const tfg_safetensors *c) {
  TFG_ASSERT(c != NULL);
  return c->n;
}

int tfg_safetensors_find(const tfg_safetensors *c, const char *name) {
  TFG_ASSERT(c != NULL && name != NULL);
  int lo = 0, hi = c->n; /* binary search of by_name in [lo, hi) */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int r = strcmp(c->e[c->by_name[mid]].name, name);
    if (r == 0) return c->by_name[mid];
    if (r < 0) lo = mid + 1; else hi = mid;
  }
  return -1;
}

const tfg_safetensors_tensor *tfg_safetensors_tensor_at(const tfg_safetensors *c, int i) {
  TFG_ASSERT(c != NULL && i >= 0 && i < c->n);
  return &c->e[i];
}

const char *tfg_safetensors_meta_get(const tfg_safetensors *c, const char *key) {
  TFG_ASSERT(c != NULL && key != NULL);
  int lo = 0, hi = c->nmeta;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int r = strcmp(c->meta[c->meta_by_key[mid]].key, key);
    if (r == 0) return c->meta[c->meta_by_key[mid]].value;
    if (r < 0) lo = mid + 1; else hi = mid;
  }
  return NULL;
}

