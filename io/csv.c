/* io/csv.c: the csv reader (io/csv.h). */
#include "io/csv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "io/reader.h"

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

tfg_status tfg_csv_read(tfg_diag *d, const tfg_loc *loc, const char *path, int label, bool header,
                        tfg_csv *out) {
  TFG_ASSERT(d && path && out);
  memset(out, 0, sizeof *out);
  tfg_reader f;
  tfg_status st = tfg_reader_open(&f, d, loc, path);
  if (st != TFG_OK) return st;
  tfg_strbuf line = {0}, show = {0};
  float *x = NULL;
  int32_t *y = NULL;
  size_t xcap = 0, ycap = 0;
  int64_t rows = 0, lineno = 0, ncols = -1, nfeat = 0, labcol = -1, first_line = 0;
  int r;
  while ((r = tfg_reader_getline(&f, &line)) > 0) {
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
                   TFG_READER_MAX_LINE);
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
  *out = (tfg_csv){.x = x, .y = y, .rows = rows, .nfeat = nfeat};
  x = NULL;
  y = NULL;
done:
  free(x);
  free(y);
  tfg_strbuf_free(&line);
  tfg_strbuf_free(&show);
  tfg_reader_close(&f);
  return st;
}
