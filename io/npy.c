/* io/npy.c: the .npy reader (io/npy.h). */
#include "io/npy.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "io/reader.h"

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
  tfg_reader f;
  tfg_status st = tfg_reader_open(&f, d, loc, path);
  if (st != TFG_OK) return st;
  unsigned char pre[12];
  char *text = NULL;
  int64_t r = tfg_reader_read(&f, pre, 10);
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
    r = tfg_reader_read(&f, pre + 10, 2);
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
  r = tfg_reader_read(&f, text, hlen);
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
  size_t esz = tfg_data_type_size(*type);
  uint64_t numel;
  if (!tfg_reader_numel(hd->dim, hd->rank, esz, &numel)) {
    tfg_diag_error(d, loc, "'%s': the shape in the header is too large", path);
    st = TFG_ERR_IO;
    goto done;
  }
  if (numel * esz > SIZE_MAX) {
    tfg_diag_error(d, loc, "out of memory reading '%s'", path);
    st = TFG_ERR_NOMEM;
    goto done;
  }
  st = tfg_reader_payload(&f, numel * esz, data);
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
  tfg_reader_close(&f);
  return st;
}

tfg_status tfg_npy_read(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type *type,
                        tfg_shape *shape, void **data) {
  TFG_ASSERT(d && path && type && shape && data);
  npy_header hd;
  tfg_status st = npy_read(d, loc, path, type, &hd, data);
  if (st != TFG_OK) return st;
  shape->rank = hd.rank;
  for (int i = 0; i < hd.rank; i++) shape->dim[i] = hd.dim[i];
  return TFG_OK;
}
