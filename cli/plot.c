/* cli/plot.c: `tfg plot FILE.csv [-o OUT.svg]`: the curves of a train's
 * `log = "..."` CSV (runtime/train.c: step, loss, metrics, lr, rows/s,
 * seconds) as an SVG picture, written directly (no plotting library).
 *
 * One panel per series, stacked: the loss, then each metric; each with
 * its own y axis (ticks at 1, 2 or 5 times a power of ten, labelled),
 * the step on a shared x axis, a title, and one polyline with a point
 * per logged step. The file is written whole (base/file.h: a temporary
 * renamed over it), so a reader never sees half a picture. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/strbuf.h"
#include "cli/pipeline.h"
#include "cli/plot.h"

enum { MAXCOLS = 32, W = 640, PANEL = 220, LEFT = 70, RIGHT = 20, TOP = 30, BOTTOM = 40 };

typedef struct table {
  int ncols;
  char *name[MAXCOLS];
  int64_t nrows, cap;
  double *v; /* nrows x ncols, NAN for an empty field */
} table;

/* Splits a CSV line into fields (quotes with "" inside, as the log
 * writes metric names); returns the count, at most cap. */
static int split(char *line, char **field, int cap) {
  int n = 0;
  char *s = line;
  while (n < cap) {
    char *out = s, *start = s;
    if (*s == '"') {
      start = out = ++s;
      while (*s && !(*s == '"' && s[1] != '"')) {
        if (*s == '"') s++;
        *out++ = *s++;
      }
      if (*s == '"') s++;
    } else {
      while (*s && *s != ',' && *s != '\n' && *s != '\r') *out++ = *s++;
    }
    char end = *s;
    *out = '\0';
    field[n++] = start;
    if (end != ',') break;
    s++;
  }
  return n;
}

/* A field of the log as a number: what the log writes (printf's %g:
 * decimal digits, a sign, a point, an exponent; "nan" and "inf" for values
 * that were not finite). strtod alone would also take hex ("0x10") and
 * words such as "infinity", which no log holds. */
static bool parse_number(const char *field, double *x) {
  const char *s = field + (*field == '-' || *field == '+');
  if (!strcasecmp(s, "nan") || !strcasecmp(s, "inf")) {
    *x = strtod(field, NULL);
    return true;
  }
  if (!*s || strspn(s, "0123456789.eE+-") != strlen(s)) return false;
  char *end;
  *x = strtod(field, &end);
  return *end == '\0';
}

/* Reads path into t; 0, or an exit code after a message on stderr. The
 * open never blocks (a FIFO would wait for a writer) and a folder or a
 * device is refused by name (base/file.h). */
static int read_table(const char *path, table *t) {
  struct stat st;
  const char *why = NULL;
  int fd = tfg_file_open_regular(path, &st, &why);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    fprintf(stderr, "tfg plot: error: cannot read '%s': %s\n", path, fd < 0 ? why : strerror(errno));
    if (fd >= 0) close(fd);
    return EXIT_PROGRAM;
  }
  char line[8192];
  int rc = 0;
  long lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *field[MAXCOLS];
    int n = split(line, field, MAXCOLS);
    if (lineno == 1) {
      if (n < 2 || strcmp(field[0], "step") != 0 || strcmp(field[1], "loss") != 0) {
        fprintf(stderr, "%s:1: error: not a train log: its header must begin with step,loss\n", path);
        rc = EXIT_PROGRAM;
        break;
      }
      t->ncols = n;
      for (int i = 0; i < n; i++) t->name[i] = strdup(field[i]);
      continue;
    }
    if (n != t->ncols) {
      fprintf(stderr, "%s:%ld: error: %d fields where the header has %d\n", path, lineno, n, t->ncols);
      rc = EXIT_PROGRAM;
      break;
    }
    if (t->nrows == t->cap) {
      t->cap = t->cap ? 2 * t->cap : 64;
      double *v = realloc(t->v, sizeof *v * (size_t)(t->cap * t->ncols));
      if (!v) abort();
      t->v = v;
    }
    for (int i = 0; i < n; i++) {
      double x = NAN;
      if (field[i][0] && !parse_number(field[i], &x)) {
        fprintf(stderr, "%s:%ld: error: field %d ('%s') is not a number\n", path, lineno, i + 1, field[i]);
        rc = EXIT_PROGRAM;
        break;
      }
      if (i == 0 && !isfinite(x)) {
        fprintf(stderr, "%s:%ld: error: the step ('%s') is not a finite number\n", path, lineno, field[i]);
        rc = EXIT_PROGRAM;
        break;
      }
      t->v[t->nrows * t->ncols + i] = x;
    }
    if (rc) break;
    t->nrows++;
  }
  fclose(f);
  if (!rc && t->nrows == 0) {
    fprintf(stderr, "%s: error: no logged step to plot\n", path);
    rc = EXIT_PROGRAM;
  }
  return rc;
}

/* Tick spacing: 1, 2 or 5 times a power of ten, about n ticks over span. */
static double nice_step(double span, int n) {
  double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* Text for SVG: & < > escaped. */
static void put_text(tfg_strbuf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '&') tfg_strbuf_puts(b, "&amp;");
    else if (*s == '<') tfg_strbuf_puts(b, "&lt;");
    else if (*s == '>') tfg_strbuf_puts(b, "&gt;");
    else tfg_strbuf_putn(b, s, 1);
  }
}

/* One panel: column col of t against the step, at vertical offset y0. */
static void panel(tfg_strbuf *b, const table *t, int col, int y0, double xmin, double xmax) {
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t r = 0; r < t->nrows; r++) {
    double v = t->v[r * t->ncols + col];
    if (isfinite(v)) lo = fmin(lo, v), hi = fmax(hi, v);
  }
  /* Spans are taken in halves (hi / 2 - lo / 2), which never overflow: a
   * log may hold values up to +-1.8e308, and every coordinate written must
   * be finite. A flat series gets a band around its value wide enough to
   * tell apart from it at its magnitude. */
  if (!isfinite(lo)) lo = 0, hi = 1;
  double mag = fmax(1, fmax(fabs(lo), fabs(hi)));
  if (hi / 2 - lo / 2 < 0.5e-12 * mag) {
    double c = lo / 2 + hi / 2, h = fmax(0.5, 1e-6 * fabs(c));
    lo = fmax(c - h, -DBL_MAX);
    hi = fmin(c + h, DBL_MAX);
  }
  double ys = 2 * nice_step(hi / 2 - lo / 2, 4);
  double rlo = floor(lo / ys) * ys, rhi = ceil(hi / ys) * ys;
  if (isfinite(rlo) && isfinite(rhi)) lo = rlo, hi = rhi; /* else the ticks start at the data */
  double half = hi / 2 - lo / 2;
  int nticks = (int)fmin(16, floor(half / (ys / 2) + 1e-9));
  int pw = W - LEFT - RIGHT, ph = PANEL - TOP - BOTTOM;
  double xr = xmax > xmin ? xmax / 2 - xmin / 2 : 1; /* half the span, as for y */
#define PX(x) (LEFT + ((x) / 2 - xmin / 2) / xr * pw)
#define PY(y) (y0 + TOP + ph - ((y) / 2 - lo / 2) / half * ph)
  tfg_strbuf_printf(b, "<g class=\"panel\">\n<text x=\"%d\" y=\"%d\" font-weight=\"bold\">", LEFT, y0 + TOP - 10);
  put_text(b, t->name[col]);
  tfg_strbuf_puts(b, "</text>\n");
  tfg_strbuf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", LEFT,
                    y0 + TOP, pw, ph);
  for (int k = 0; k <= nticks && isfinite(lo + k * ys); k++) {
    double y = lo + k * ys, py = PY(y);
    tfg_strbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, py, LEFT + pw, py);
    tfg_strbuf_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", LEFT - 6, py + 4,
                      fabs(y) < ys * 1e-9 ? 0.0 : y);
  }
  double xs = 2 * nice_step(xr, 6), x0 = ceil(xmin / xs) * xs;
  for (int k = 0; k <= 16 && isfinite(x0) && x0 + k * xs <= xmax + xs * 1e-9; k++) {
    double x = x0 + k * xs;
    tfg_strbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", PX(x), y0 + TOP + ph + 16, x);
  }
  tfg_strbuf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", LEFT + pw / 2, y0 + TOP + ph + 32);
  tfg_strbuf_puts(b, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
  for (int64_t r = 0; r < t->nrows; r++) {
    double v = t->v[r * t->ncols + col];
    if (isfinite(v)) tfg_strbuf_printf(b, "%s%.1f,%.1f", r ? " " : "", PX(t->v[r * t->ncols]), PY(v));
  }
  tfg_strbuf_puts(b, "\"/>\n</g>\n");
#undef PX
#undef PY
}

int cli_plot(const char *csv, const char *out) {
  /* The same file however it is spelled (./run.csv, a link to it): the
   * picture would replace the log it is drawn from. */
  if (tfg_file_same(csv, out)) {
    fprintf(stderr, "tfg plot: error: the output '%s' is the input file '%s': give the picture a name of its own (-o run.svg)\n", out, csv);
    return EXIT_USAGE;
  }
  table t = {0};
  int rc = read_table(csv, &t);
  tfg_strbuf b = {0};
  if (!rc) {
    /* the series: loss and the metrics, the columns before lr */
    int last = t.ncols;
    for (int i = 2; i < t.ncols; i++)
      if (strcmp(t.name[i], "lr") == 0) {
        last = i;
        break;
      }
    int npanels = last - 1;
    double xmin = t.v[0], xmax = t.v[0];
    for (int64_t r = 1; r < t.nrows; r++) xmin = fmin(xmin, t.v[r * t.ncols]), xmax = fmax(xmax, t.v[r * t.ncols]);
    tfg_strbuf_printf(&b,
                      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                      W, PANEL * npanels, W, PANEL * npanels);
    for (int c = 1; c < last; c++) panel(&b, &t, c, (c - 1) * PANEL, xmin, xmax);
    tfg_strbuf_puts(&b, "</svg>\n");
    /* Whole or not at all, through a symlink, never over a device, a FIFO
     * or a folder (base/file.h). */
    tfg_file_out o;
    const char *why = NULL;
    if (tfg_file_out_begin(&o, out, TFG_FILE_OUT_UNIQUE, &why) != 0) {
      fprintf(stderr, "tfg plot: error: cannot write '%s': %s\n", out, why);
      rc = EXIT_RUNTIME;
    } else {
      tfg_file_out_write(&o, b.data, b.len);
      if (tfg_file_out_commit(&o) != 0) {
        fprintf(stderr, "tfg plot: error: cannot write '%s': %s '%s': %s\n", out, o.step, o.failed, strerror(o.err));
        rc = EXIT_RUNTIME;
      }
      tfg_file_out_end(&o);
    }
  }
  tfg_strbuf_free(&b);
  for (int i = 0; i < t.ncols; i++) free(t.name[i]);
  free(t.v);
  return rc;
}
