/* runtime/format.c: NumPy-style printing of tensors.
 *
 * Two passes: the visible elements (after summarization) are formatted
 * once to find the common widths, then printed with NumPy's nesting:
 * "[" per axis, rows on new lines indented by depth, a blank line between
 * blocks of rank >= 3. */
#include "runtime/format.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { EDGE = 3, SUMMARIZE_OVER = 6, MAX_PRECISION = 8 };

float tfg_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float f;
  if (exp == 0) f = ldexpf((float)man, -24);                  /* zero and subnormals */
  else if (exp == 31) f = man ? NAN : INFINITY;
  else f = ldexpf((float)(man | 0x400), (int)exp - 25);
  return sign ? -f : f;
}

float tfg_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static double elem(const tfg_tensor *t, int64_t i) {
  switch (t->dtype) {
  case TFG_DTYPE_F32: return ((const float *)t->data)[i];
  case TFG_DTYPE_F64: return ((const double *)t->data)[i];
  case TFG_DTYPE_F16: return tfg_half_to_float(((const uint16_t *)t->data)[i]);
  case TFG_DTYPE_BF16: return tfg_bf16_to_float(((const uint16_t *)t->data)[i]);
  case TFG_DTYPE_I32: return ((const int32_t *)t->data)[i];
  case TFG_DTYPE_I64: return (double)((const int64_t *)t->data)[i];
  case TFG_DTYPE_BOOL: return ((const uint8_t *)t->data)[i];
  default: return 0;
  }
}

/* Whether text reads back as v in the tensor's own precision. */
static bool round_trips(const char *text, double v, tfg_dtype dt) {
  double back = strtod(text, NULL);
  if (dt == TFG_DTYPE_F64) return back == v;
  return (float)back == (float)v;
}

typedef struct style {
  bool is_float, is_bool, sci, whole;
  tfg_dtype dtype;
  int int_width; /* widest part before the point (or the whole int) */
  int frac_width;
} style;

/* Visible flat indices of t, in order (summarized per axis). */
static void visible(const tfg_shape *s, int axis, int64_t base, bool all, int64_t *out, int64_t *n) {
  if (axis == s->rank) {
    out[(*n)++] = base;
    return;
  }
  int64_t stride = 1;
  for (int i = axis + 1; i < s->rank; i++) stride *= s->dim[i];
  int64_t d = s->dim[axis];
  bool cut = !all && d > SUMMARIZE_OVER;
  for (int64_t i = 0; i < d; i++) {
    if (cut && i == EDGE) i = d - EDGE;
    visible(s, axis + 1, base + i * stride, all, out, n);
  }
}

static int64_t count_visible(const tfg_shape *s, bool all) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= (!all && s->dim[i] > SUMMARIZE_OVER) ? 2 * EDGE : s->dim[i];
  return n;
}

/* The fewest digits (<= MAX_PRECISION) with which v round-trips. */
static int digits_needed(double v, tfg_dtype dt, bool sci) {
  char buf[64];
  for (int p = 0; p < MAX_PRECISION; p++) {
    snprintf(buf, sizeof buf, sci ? "%.*e" : "%.*f", p, v);
    if (round_trips(buf, v, dt)) return p;
  }
  return MAX_PRECISION;
}

/* Formats one float in style st (without padding): each value with the
 * digits it needs, as NumPy's "maxprec" does ("1." for whole ones). */
static void fmt_float(char *buf, size_t n, double v, const style *st) {
  if (isnan(v)) snprintf(buf, n, "nan");
  else if (isinf(v)) snprintf(buf, n, v > 0 ? "inf" : "-inf");
  else if (st->whole) snprintf(buf, n, "%.0f.", v);
  else if (st->sci) {
    int p = digits_needed(v, st->dtype, true);
    char m[64];
    snprintf(m, sizeof m, "%.*e", p, v);
    char *e = strchr(m, 'e');
    if (p == 0 && e) snprintf(buf, n, "%.*s.%s", (int)(e - m), m, e); /* "1.e-05" as NumPy */
    else snprintf(buf, n, "%s", m);
  } else {
    int p = digits_needed(v, st->dtype, false);
    if (p == 0) snprintf(buf, n, "%.0f.", v);
    else snprintf(buf, n, "%.*f", p, v);
    /* Cut at MAX_PRECISION the last digit can be a 0 that says nothing. */
    size_t len = strlen(buf);
    while (len > 2 && buf[len - 1] == '0' && buf[len - 2] != '.') buf[--len] = '\0';
  }
}

static style choose_style(const tfg_tensor *t, const int64_t *idx, int64_t n) {
  style st = {0};
  st.is_float = tfg_dtype_is_float(t->dtype);
  st.is_bool = t->dtype == TFG_DTYPE_BOOL;
  st.dtype = t->dtype;
  if (!st.is_float) return st;
  double maxabs = 0, minabs = INFINITY;
  bool whole = true;
  for (int64_t k = 0; k < n; k++) {
    double v = elem(t, idx[k]);
    if (!isfinite(v)) continue;
    double a = fabs(v);
    if (a > maxabs) maxabs = a;
    if (a != 0 && a < minabs) minabs = a;
    if (v != floor(v)) whole = false;
  }
  st.sci = maxabs >= 1e8 || (minabs < 1e-4) || (isfinite(minabs) && maxabs / minabs > 1e3 && !whole);
  if (!isfinite(minabs)) st.sci = maxabs >= 1e8;
  st.whole = whole && !st.sci;
  return st;
}

/* One element as text, padded to the style's widths. */
static void put_elem(tfg_strbuf *out, const tfg_tensor *t, int64_t i, const style *st) {
  char buf[64];
  if (st->is_bool) {
    snprintf(buf, sizeof buf, "%s", elem(t, i) != 0 ? "true" : "false");
  } else if (!st->is_float) {
    if (t->dtype == TFG_DTYPE_I64) snprintf(buf, sizeof buf, "%" PRId64, ((const int64_t *)t->data)[i]);
    else snprintf(buf, sizeof buf, "%" PRId32, ((const int32_t *)t->data)[i]);
  } else {
    fmt_float(buf, sizeof buf, elem(t, i), st);
  }
  /* Align on the point: the integer part right-aligned, the rest left;
   * nan and inf (no point) right-aligned in the whole width, as NumPy. */
  const char *dot = st->is_float ? strpbrk(buf, ".") : NULL;
  if (st->is_float && !dot) {
    for (int k = (int)strlen(buf); k < st->int_width + st->frac_width; k++) tfg_strbuf_putc(out, ' ');
    tfg_strbuf_puts(out, buf);
    return;
  }
  int before = dot ? (int)(dot - buf) : (int)strlen(buf);
  int after = (int)strlen(buf) - before;
  for (int k = before; k < st->int_width; k++) tfg_strbuf_putc(out, ' ');
  tfg_strbuf_puts(out, buf);
  for (int k = after; k < st->frac_width; k++) tfg_strbuf_putc(out, ' ');
}

static void measure(const tfg_tensor *t, const int64_t *idx, int64_t n, style *st) {
  char buf[64];
  int special = 0; /* widest nan/inf */
  for (int64_t k = 0; k < n; k++) {
    int64_t i = idx[k];
    if (st->is_bool) snprintf(buf, sizeof buf, "%s", elem(t, i) != 0 ? "true" : "false");
    else if (!st->is_float) {
      if (t->dtype == TFG_DTYPE_I64) snprintf(buf, sizeof buf, "%" PRId64, ((const int64_t *)t->data)[i]);
      else snprintf(buf, sizeof buf, "%" PRId32, ((const int32_t *)t->data)[i]);
    } else fmt_float(buf, sizeof buf, elem(t, i), st);
    const char *dot = st->is_float ? strpbrk(buf, ".") : NULL;
    if (st->is_float && !dot) {
      if ((int)strlen(buf) > special) special = (int)strlen(buf);
      continue;
    }
    int before = dot ? (int)(dot - buf) : (int)strlen(buf);
    int after = (int)strlen(buf) - before;
    if (before > st->int_width) st->int_width = before;
    if (after > st->frac_width) st->frac_width = after;
  }
  if (st->int_width + st->frac_width < special) st->int_width = special - st->frac_width;
}

static void put_axis(tfg_strbuf *out, const tfg_tensor *t, int axis, int64_t base, bool all, const style *st) {
  const tfg_shape *s = &t->shape;
  if (axis == s->rank) {
    put_elem(out, t, base, st);
    return;
  }
  int64_t stride = 1;
  for (int i = axis + 1; i < s->rank; i++) stride *= s->dim[i];
  int64_t d = s->dim[axis];
  bool cut = !all && d > SUMMARIZE_OVER;
  bool last = axis == s->rank - 1;
  tfg_strbuf_putc(out, '[');
  for (int64_t i = 0; i < d; i++) {
    if (i > 0) {
      if (last) tfg_strbuf_putc(out, ' ');
      else {
        /* Rows on new lines; a blank line between blocks of rank >= 3. */
        for (int k = axis; k < s->rank - 2; k++) tfg_strbuf_putc(out, '\n');
        tfg_strbuf_printf(out, "\n%*s", axis + 1, "");
      }
    }
    if (cut && i == EDGE) {
      tfg_strbuf_puts(out, last ? "..." : "...");
      if (last) tfg_strbuf_putc(out, ' ');
      else {
        for (int k = axis; k < s->rank - 2; k++) tfg_strbuf_putc(out, '\n');
        tfg_strbuf_printf(out, "\n%*s", axis + 1, "");
      }
      i = d - EDGE;
    }
    put_axis(out, t, axis + 1, base + i * stride, all, st);
  }
  tfg_strbuf_putc(out, ']');
}

void tfg_format_tensor(tfg_strbuf *out, const tfg_tensor *t, bool all) {
  int64_t n = count_visible(&t->shape, all);
  int64_t *idx = malloc(sizeof *idx * (size_t)(n ? n : 1));
  int64_t got = 0;
  if (n) visible(&t->shape, 0, 0, all, idx, &got);
  style st = choose_style(t, idx, got);
  measure(t, idx, got, &st);
  if (t->shape.rank == 0) {
    st.int_width = st.frac_width = 0;
    put_elem(out, t, 0, &st);
  } else {
    put_axis(out, t, 0, 0, all, &st);
  }
  free(idx);
}
