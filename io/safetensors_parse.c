/* io/safetensors_parse.c: the safetensors header, parsed straight into
 * the schema and checked against the data after it (io/safetensors_impl.h;
 * the rules are io/safetensors.c's file comment). */
#include "io/safetensors_impl.h"

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "base/strbuf.h"
#include "base/utf8.h"

typedef struct tensor_span {
  int64_t begin, end;
  size_t key_at; /* header offset of the tensor's key, for messages */
} tensor_span;

typedef struct hdr_parser {
  tfg_diag *d;
  const tfg_loc *loc;
  const char *path;
  const unsigned char *s; /* the header, s[len] == '\0' */
  size_t len, pos;
  tfg_strbuf str; /* the string just read, unescaped */
  tfg_strbuf ctx; /* "tensor 'x': " while inside a tensor, else empty */
  tfg_safetensors *c;
  tensor_span *span; /* parallel to c->e */
  size_t *meta_at; /* parallel to c->meta: header offsets of the keys */
} hdr_parser;

/* Records the header's one error: the file, the byte offset in the file
 * (the header starts at byte 8), the tensor being read, and what is
 * wrong. Always returns false, for `return bad(...)`. */
static bool bad(hdr_parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(hdr_parser *p, size_t at, const char *fmt, ...) {
  tfg_strbuf m = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&m, fmt, ap);
  va_end(ap);
  tfg_diag_error(p->d, p->loc, "'%s': malformed safetensors header at byte %zu: %s%s", p->path,
                 at + 8, p->ctx.data ? p->ctx.data : "", m.data);
  tfg_strbuf_free(&m);
  return false;
}

static bool at_literal(const hdr_parser *p, const char *lit) {
  size_t n = strlen(lit);
  return p->len - p->pos >= n && memcmp(p->s + p->pos, lit, n) == 0;
}

/* What the text at pos is, for "expected X, found Y"; buf holds 16. */
static const char *found(const hdr_parser *p, char *buf) {
  if (p->pos >= p->len) return "the end of the header";
  unsigned char c = p->s[p->pos];
  switch (c) {
  case '{': return "an object";
  case '[': return "an array";
  case '"': return "a string";
  default: break;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return "a number";
  if (at_literal(p, "true") || at_literal(p, "false")) return "a boolean";
  if (at_literal(p, "null")) return "null";
  if (c > 0x20 && c < 0x7f)
    snprintf(buf, 16, "'%c'", c);
  else
    snprintf(buf, 16, "byte 0x%02x", c);
  return buf;
}
#define FOUND(p) found((p), (char[16]){0})

static void skip_ws(hdr_parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static bool hex4(hdr_parser *p, uint32_t *v) {
  if (p->len - p->pos < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned char c = p->s[p->pos + (size_t)i];
    int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (x < 0) return false;
    *v = *v << 4 | (uint32_t)x;
  }
  p->pos += 4;
  return true;
}

static void put_utf8(tfg_strbuf *b, uint32_t cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) { u[0] = (char)cp; n = 1; }
  else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
  else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
  }
  tfg_strbuf_putn(b, u, n);
}

/* One \-escape at pos (the backslash), appended to p->str unescaped. */
static bool parse_escape(hdr_parser *p, size_t start) {
  size_t at = p->pos;
  if (p->len - p->pos < 2) return bad(p, start, "unterminated string");
  unsigned char e = p->s[p->pos + 1];
  p->pos += 2;
  switch (e) {
  case '"': case '\\': case '/': tfg_strbuf_putc(&p->str, (char)e); return true;
  case 'b': tfg_strbuf_putc(&p->str, '\b'); return true;
  case 'f': tfg_strbuf_putc(&p->str, '\f'); return true;
  case 'n': tfg_strbuf_putc(&p->str, '\n'); return true;
  case 'r': tfg_strbuf_putc(&p->str, '\r'); return true;
  case 't': tfg_strbuf_putc(&p->str, '\t'); return true;
  case 'u': break;
  default:
    if (e > 0x20 && e < 0x7f) return bad(p, at, "invalid escape '\\%c' in a string", e);
    return bad(p, at, "invalid escape (backslash, byte 0x%02x) in a string", e);
  }
  uint32_t cp, lo;
  if (!hex4(p, &cp)) return bad(p, at, "\\u must be followed by four hex digits");
  if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low half must follow */
    if (!at_literal(p, "\\u"))
      return bad(p, at, "unpaired surrogate \\u%04X in a string", (unsigned)cp);
    p->pos += 2;
    if (!hex4(p, &lo)) return bad(p, p->pos - 2, "\\u must be followed by four hex digits");
    if (lo < 0xDC00 || lo > 0xDFFF)
      return bad(p, at, "unpaired surrogate \\u%04X in a string", (unsigned)cp);
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return bad(p, at, "unpaired surrogate \\u%04X in a string", (unsigned)cp);
  }
  if (cp == 0) return bad(p, at, "\\u0000 is not supported in names and metadata");
  put_utf8(&p->str, cp);
  return true;
}

/* A JSON string at pos (the opening quote) into p->str, unescaped. */
static bool parse_string(hdr_parser *p) {
  size_t start = p->pos++;
  tfg_strbuf_clear(&p->str);
  tfg_strbuf_putn(&p->str, "", 0); /* p->str.data is a string even for "" */
  for (;;) {
    size_t run = p->pos; /* copy plain ASCII in one go */
    while (p->pos < p->len && p->s[p->pos] >= 0x20 && p->s[p->pos] < 0x80 &&
           p->s[p->pos] != '"' && p->s[p->pos] != '\\')
      p->pos++;
    tfg_strbuf_putn(&p->str, (const char *)p->s + run, p->pos - run);
    if (p->pos >= p->len) return bad(p, start, "unterminated string");
    unsigned char c = p->s[p->pos];
    if (c == '"') {
      p->pos++;
      return true;
    }
    if (c == '\\') {
      if (!parse_escape(p, start)) return false;
    } else if (c < 0x20) {
      return bad(p, p->pos, "control character 0x%02x in a string (JSON needs it escaped)", c);
    } else {
      uint32_t cp;
      int n = tfg_utf8_decode(p->s + p->pos, p->len - p->pos, &cp);
      if (n == 0) return bad(p, p->pos, "invalid UTF-8 (byte 0x%02x) in a string", c);
      tfg_strbuf_putn(&p->str, (const char *)p->s + p->pos, (size_t)n);
      p->pos += (size_t)n;
    }
  }
}

/* A non-negative integer below 2^63 (what names it in messages). */
static bool parse_uint(hdr_parser *p, const char *what, int64_t *v) {
  skip_ws(p);
  size_t at = p->pos;
  if (at < p->len && p->s[at] == '-' && at + 1 < p->len && p->s[at + 1] >= '0' &&
      p->s[at + 1] <= '9')
    return bad(p, at, "%s must not be negative", what);
  if (at >= p->len || p->s[at] < '0' || p->s[at] > '9')
    return bad(p, at, "expected %s (an integer), found %s", what, FOUND(p));
  if (p->s[at] == '0' && at + 1 < p->len && p->s[at + 1] >= '0' && p->s[at + 1] <= '9')
    return bad(p, at, "a number with a leading zero is not JSON");
  int64_t x = 0;
  while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
    int digit = p->s[p->pos] - '0';
    if (x > (INT64_MAX - digit) / 10) return bad(p, at, "%s is too large", what);
    x = x * 10 + digit;
    p->pos++;
  }
  if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
    return bad(p, at, "%s must be an integer, without a fraction or an exponent", what);
  *v = x;
  return true;
}

/* The next key of an object whose '{' (first) or previous member was just
 * read. Returns 1 with the key in p->str and the ':' consumed, 0 at the
 * closing '}', -1 after an error. *key_at is the key's offset. */
static int next_key(hdr_parser *p, bool first, size_t *key_at) {
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == '}' && first) {
    p->pos++;
    return 0;
  }
  if (!first) {
    if (p->pos < p->len && p->s[p->pos] == '}') {
      p->pos++;
      return 0;
    }
    if (p->pos >= p->len || p->s[p->pos] != ',') {
      bad(p, p->pos, "expected ',' or '}' after a member, found %s", FOUND(p));
      return -1;
    }
    p->pos++;
    skip_ws(p);
  }
  if (p->pos >= p->len || p->s[p->pos] != '"') {
    bad(p, p->pos, "expected a key (a string)%s, found %s", first ? " or '}'" : "", FOUND(p));
    return -1;
  }
  *key_at = p->pos;
  if (!parse_string(p)) return -1;
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != ':') {
    bad(p, p->pos, "expected ':' after a key, found %s", FOUND(p));
    return -1;
  }
  p->pos++;
  skip_ws(p);
  return 1;
}

static char *xstrdup(const char *s) {
  char *t = strdup(s);
  TFG_ASSERT(t != NULL);
  return t;
}

/* "__metadata__": an object of strings. */
static bool parse_meta(hdr_parser *p) {
  tfg_safetensors *c = p->c;
  if (p->pos >= p->len || p->s[p->pos] != '{')
    return bad(p, p->pos, "__metadata__ must be an object of strings, found %s", FOUND(p));
  p->pos++;
  size_t key_at = 0;
  for (bool first = true;; first = false) {
    int k = next_key(p, first, &key_at);
    if (k <= 0) return k == 0;
    char *key = xstrdup(p->str.data);
    if (p->pos >= p->len || p->s[p->pos] != '"') {
      char *k_shown = tfg_safetensors_show(key);
      bad(p, p->pos, "the value of metadata key '%s' must be a string, found %s", k_shown,
          FOUND(p));
      free(k_shown);
      free(key);
      return false;
    }
    if (!parse_string(p)) {
      free(key);
      return false;
    }
    if (c->nmeta == c->metacap) { /* meta_at grows with meta */
      TFG_ASSERT(c->metacap < INT_MAX / 2);
      TFG_GROW(c->meta, c->nmeta, c->metacap, 8);
      p->meta_at = tfg_grow_to(p->meta_at, (size_t)c->metacap, sizeof *p->meta_at);
    }
    p->meta_at[c->nmeta] = key_at;
    c->meta[c->nmeta++] = (tfg_safetensors_meta){key, xstrdup(p->str.data)};
  }
}

enum { FIELD_DTYPE, FIELD_SHAPE, FIELD_OFFSETS, FIELD_COUNT };
static const char *const field_names[FIELD_COUNT] = {"dtype", "shape", "data_offsets"};

static bool parse_dtype(hdr_parser *p, tfg_safetensors_tensor *t) {
  if (p->pos >= p->len || p->s[p->pos] != '"')
    return bad(p, p->pos, "dtype must be a string, found %s", FOUND(p));
  size_t at = p->pos;
  if (!parse_string(p)) return false;
  for (int i = 0; i < TFG_DTYPE_COUNT; i++) {
    if (strcmp(p->str.data, tfg_safetensors_dtype_name((tfg_dtype)i)) == 0) {
      t->dtype = (tfg_dtype)i;
      return true;
    }
  }
  char *s = tfg_safetensors_show(p->str.data);
  bad(p, at, "dtype '%s' is not supported (tfg reads F32, F64, F16, BF16, I32, I64 and BOOL)", s);
  free(s);
  return false;
}

static bool parse_shape(hdr_parser *p, tfg_safetensors_tensor *t) {
  if (p->pos >= p->len || p->s[p->pos] != '[')
    return bad(p, p->pos, "shape must be an array of integers, found %s", FOUND(p));
  p->pos++;
  skip_ws(p);
  t->shape.rank = 0;
  if (p->pos < p->len && p->s[p->pos] == ']') {
    p->pos++;
    return true;
  }
  for (;;) {
    if (t->shape.rank == TFG_MAX_RANK)
      return bad(p, p->pos, "shape has more than %d dimensions, tfg's limit", TFG_MAX_RANK);
    if (!parse_uint(p, "a shape dimension", &t->shape.dim[t->shape.rank])) return false;
    t->shape.rank++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
      p->pos++;
      return true;
    }
    if (p->pos >= p->len || p->s[p->pos] != ',')
      return bad(p, p->pos, "expected ',' or ']' in shape, found %s", FOUND(p));
    p->pos++;
  }
}

static bool parse_offsets(hdr_parser *p, tensor_span *sp) {
  if (p->pos >= p->len || p->s[p->pos] != '[')
    return bad(p, p->pos, "data_offsets must be [BEGIN, END], found %s", FOUND(p));
  p->pos++;
  if (!parse_uint(p, "the begin offset", &sp->begin)) return false;
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != ',')
    return bad(p, p->pos, "data_offsets must be [BEGIN, END]: expected ',', found %s", FOUND(p));
  p->pos++;
  if (!parse_uint(p, "the end offset", &sp->end)) return false;
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != ']')
    return bad(p, p->pos, "data_offsets must be [BEGIN, END]: expected ']', found %s", FOUND(p));
  p->pos++;
  return true;
}

/* A tensor whose key (in p->str) starts at key_at: appends it to c with
 * its span. */
static bool parse_tensor(hdr_parser *p, size_t key_at) {
  tfg_safetensors *c = p->c;
  if (c->n == c->cap) { /* span grows with e */
    TFG_ASSERT(c->cap < INT_MAX / 2);
    TFG_GROW(c->e, c->n, c->cap, 16);
    p->span = tfg_grow_to(p->span, (size_t)c->cap, sizeof *p->span);
  }
  /* Appended first, so that c owns the name on every path. */
  tfg_safetensors_tensor *t = &c->e[c->n];
  tensor_span *sp = &p->span[c->n];
  c->n++;
  memset(t, 0, sizeof *t);
  t->name = xstrdup(p->str.data);
  sp->begin = sp->end = 0;
  sp->key_at = key_at;
  char *name = tfg_safetensors_show(t->name);
  tfg_strbuf_printf(&p->ctx, "tensor '%s': ", name);
  free(name);

  if (p->pos >= p->len || p->s[p->pos] != '{')
    return bad(p, p->pos, "expected an object with dtype, shape and data_offsets, found %s",
               FOUND(p));
  p->pos++;
  bool have[FIELD_COUNT] = {false};
  size_t field_at = 0;
  for (bool first = true;; first = false) {
    int k = next_key(p, first, &field_at);
    if (k < 0) return false;
    if (k == 0) break;
    int f = 0;
    while (f < FIELD_COUNT && strcmp(p->str.data, field_names[f]) != 0) f++;
    if (f == FIELD_COUNT) {
      char *s = tfg_safetensors_show(p->str.data);
      bad(p, field_at, "unknown field '%s' (a tensor has dtype, shape and data_offsets)", s);
      free(s);
      return false;
    }
    if (have[f]) return bad(p, field_at, "field '%s' appears twice", field_names[f]);
    have[f] = true;
    bool ok = f == FIELD_DTYPE ? parse_dtype(p, t)
            : f == FIELD_SHAPE ? parse_shape(p, t)
                               : parse_offsets(p, sp);
    if (!ok) return false;
  }
  for (int f = 0; f < FIELD_COUNT; f++)
    if (!have[f]) return bad(p, key_at, "missing field '%s'", field_names[f]);
  tfg_strbuf_clear(&p->ctx);
  return true;
}

static bool parse_header(hdr_parser *p) {
  skip_ws(p);
  if (p->pos >= p->len || p->s[p->pos] != '{')
    return bad(p, p->pos, "expected '{' (the header is one JSON object), found %s", FOUND(p));
  p->pos++;
  bool seen_meta = false;
  size_t key_at = 0;
  for (bool first = true;; first = false) {
    int k = next_key(p, first, &key_at);
    if (k < 0) return false;
    if (k == 0) break;
    if (strcmp(p->str.data, "__metadata__") == 0) {
      if (seen_meta) return bad(p, key_at, "'__metadata__' appears twice");
      seen_meta = true;
      if (!parse_meta(p)) return false;
    } else if (!parse_tensor(p, key_at)) {
      return false;
    }
  }
  skip_ws(p);
  if (p->pos < p->len)
    return bad(p, p->pos, "expected only whitespace after the header object, found %s",
               FOUND(p));
  return true;
}

/* ---- checks after parsing ----------------------------------------------- */

typedef struct named_at {
  const char *name;
  size_t at; /* header offset of the key */
  int index;
} named_at;

static int cmp_named_at(const void *a, const void *b) {
  const named_at *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  return r ? r : x->at < y->at ? -1 : x->at > y->at;
}

/* Sorts v (n keys with their header offsets) by name, stores the sorted
 * order of their indices in *index (for binary search; the caller frees
 * it), and reports the first repeated key in file order. */
static bool sort_unique(hdr_parser *p, const char *what, named_at *v, int n, int **index) {
  *index = malloc(sizeof **index * (size_t)(n ? n : 1));
  TFG_ASSERT(*index != NULL);
  qsort(v, (size_t)n, sizeof *v, cmp_named_at);
  int dup = -1; /* position in v of the earliest second occurrence */
  for (int i = 0; i < n; i++) {
    (*index)[i] = v[i].index;
    if (i && strcmp(v[i - 1].name, v[i].name) == 0 && (dup < 0 || v[i].at < v[dup].at)) dup = i;
  }
  if (dup < 0) return true;
  char *s = tfg_safetensors_show(v[dup].name);
  bad(p, v[dup].at, "%s '%s' appears twice", what, s);
  free(s);
  return false;
}

static bool check_unique(hdr_parser *p) {
  tfg_safetensors *c = p->c;
  int most = c->n > c->nmeta ? c->n : c->nmeta;
  named_at *v = malloc(sizeof *v * (size_t)(most ? most : 1));
  TFG_ASSERT(v != NULL);
  for (int i = 0; i < c->n; i++) v[i] = (named_at){c->e[i].name, p->span[i].key_at, i};
  bool ok = sort_unique(p, "tensor", v, c->n, &c->by_name);
  for (int i = 0; ok && i < c->nmeta; i++) v[i] = (named_at){c->meta[i].key, p->meta_at[i], i};
  ok = ok && sort_unique(p, "metadata key", v, c->nmeta, &c->meta_by_key);
  free(v);
  return ok;
}

static bool tensor_error(hdr_parser *p, int i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool tensor_error(hdr_parser *p, int i, const char *fmt, ...) {
  char *s = tfg_safetensors_show(p->c->e[i].name);
  tfg_strbuf m = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&m, fmt, ap);
  va_end(ap);
  tfg_diag_error(p->d, p->loc, "'%s': tensor '%s': %s", p->path, s, m.data);
  free(s);
  tfg_strbuf_free(&m);
  return false;
}

static void format_shape(tfg_strbuf *b, const tfg_safetensors_tensor *t) {
  tfg_strbuf_printf(b, "%s [", tfg_safetensors_dtype_name(t->dtype));
  for (int k = 0; k < t->shape.rank; k++)
    tfg_strbuf_printf(b, "%s%lld", k ? ", " : "", (long long)t->shape.dim[k]);
  tfg_strbuf_putc(b, ']');
}

typedef struct span_at {
  int64_t begin, end;
  int index;
} span_at;

static int cmp_span_at(const void *a, const void *b) {
  const span_at *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->index - y->index;
}

/* Checks each tensor's span against its dtype and shape and the data
 * size, then that the spans tile [0, datalen) exactly. Fills order with
 * the tensors sorted by offset (the order their bytes are read in). */
static bool check_spans(hdr_parser *p, uint64_t datalen, int *order) {
  tfg_safetensors *c = p->c;
  for (int i = 0; i < c->n; i++) {
    const tensor_span *sp = &p->span[i];
    const tfg_safetensors_tensor *t = &c->e[i];
    long long b = (long long)sp->begin, e = (long long)sp->end;
    if (sp->end < sp->begin)
      return tensor_error(p, i, "data_offsets [%lld, %lld] end before they begin", b, e);
    int64_t need = tfg_safetensors_nbytes(t->dtype, &t->shape);
    if (need != sp->end - sp->begin) {
      tfg_strbuf s = {0};
      format_shape(&s, t);
      if (need < 0)
        tensor_error(p, i, "%s is too large for any file", s.data);
      else
        tensor_error(p, i, "data_offsets [%lld, %lld] hold %lld bytes, but %s needs %lld", b, e,
                     e - b, s.data, (long long)need);
      tfg_strbuf_free(&s);
      return false;
    }
    if ((uint64_t)sp->end > datalen)
      return tensor_error(p, i,
                          "data_offsets [%lld, %lld] run past the end of the file (the data "
                          "after the header holds %llu bytes)",
                          b, e, (unsigned long long)datalen);
  }
  span_at *v = malloc(sizeof *v * (size_t)(c->n ? c->n : 1));
  TFG_ASSERT(v != NULL);
  for (int i = 0; i < c->n; i++) v[i] = (span_at){p->span[i].begin, p->span[i].end, i};
  qsort(v, (size_t)c->n, sizeof *v, cmp_span_at);
  for (int k = 0; k < c->n; k++) order[k] = v[k].index;
  free(v);
  int64_t covered = 0; /* the buffer is tiled up to here */
  for (int k = 0; k < c->n; k++) {
    int i = order[k];
    const tensor_span *sp = &p->span[i];
    if (sp->begin < covered) {
      int j = order[k - 1];
      char *other = tfg_safetensors_show(c->e[j].name);
      tensor_error(p, i, "data_offsets [%lld, %lld] overlap those of tensor '%s' [%lld, %lld]",
                   (long long)sp->begin, (long long)sp->end, other,
                   (long long)p->span[j].begin, (long long)p->span[j].end);
      free(other);
      return false;
    }
    if (sp->begin > covered)
      return tensor_error(p, i,
                          "bytes [%lld, %lld) before it belong to no tensor (the format "
                          "allows no holes in the data)",
                          (long long)covered, (long long)sp->begin);
    covered = sp->end;
  }
  if ((uint64_t)covered != datalen) {
    tfg_diag_error(p->d, p->loc,
                   "'%s': the last %llu bytes of the file belong to no tensor (the format "
                   "allows no bytes after the last tensor)",
                   p->path, (unsigned long long)(datalen - (uint64_t)covered));
    return false;
  }
  return true;
}

/* ---- the entry point ----------------------------------------------------- */

bool tfg_safetensors_parse_header(tfg_diag *d, const tfg_loc *loc, const char *path,
                                  const unsigned char *text, size_t len, uint64_t datalen,
                                  tfg_safetensors *f, int **order) {
  TFG_ASSERT(text[len] == '\0');
  *order = NULL;
  hdr_parser p = {.d = d, .loc = loc, .path = path, .s = text, .len = len, .c = f};
  bool ok = parse_header(&p);
  tfg_strbuf_clear(&p.ctx);
  ok = ok && check_unique(&p);
  if (ok) {
    *order = malloc(sizeof **order * (size_t)(f->n ? f->n : 1));
    TFG_ASSERT(*order != NULL);
    ok = check_spans(&p, datalen, *order);
    if (!ok) {
      free(*order);
      *order = NULL;
    }
  }
  tfg_strbuf_free(&p.str);
  tfg_strbuf_free(&p.ctx);
  free(p.span);
  free(p.meta_at);
  return ok;
}
