/* base/diag.c: source files, diagnostic records and their rendering.
 *
 * Records are kept in one array in the order they were made; a note or
 * help belongs to the error before it. Rendering is separate from
 * recording so the CLI, the REPL and tests can each decide when and where
 * to print (and the REPL can print per input). */
#include "base/diag.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "base/grow.h"
#include "base/strbuf.h"
#include "base/utf8.h"

typedef struct diag_entry {
  tfg_diag_severity sev;
  bool has_loc;
  tfg_loc loc;
  char *msg;
} diag_entry;

struct tfg_diag {
  tfg_source **sources;
  size_t nsources;
  diag_entry *entries;
  size_t nentries, cap, printed;
  size_t nerrors, nwarnings, limit;
  bool limit_reached;
  bool dropping; /* the last error was dropped: drop its notes too */
};

tfg_diag *tfg_diag_new(void) {
  tfg_diag *d = calloc(1, sizeof *d);
  TFG_ASSERT(d != NULL);
  d->limit = TFG_DIAG_DEFAULT_LIMIT;
  return d;
}

static void diag_free_entries(tfg_diag *d) {
  for (size_t i = 0; i < d->nentries; i++) free(d->entries[i].msg);
  d->nentries = d->printed = 0;
}

void tfg_diag_free(tfg_diag *d) {
  if (!d) return;
  diag_free_entries(d);
  free(d->entries);
  for (size_t i = 0; i < d->nsources; i++) {
    tfg_source *s = d->sources[i];
    free((char *)s->name);
    free((char *)s->text);
    free(s->line_starts);
    free(s);
  }
  free(d->sources);
  free(d);
}

/* ---- sources ---------------------------------------------------------- */

const tfg_source *tfg_diag_add_source(tfg_diag *d, const char *name, const char *text,
                                      size_t len) {
  return tfg_diag_add_source_at(d, name, text, len, 0);
}

const tfg_source *tfg_diag_add_source_at(tfg_diag *d, const char *name, const char *text,
                                         size_t len, uint32_t first_line) {
  if (len > TFG_SOURCE_MAX_BYTES) {
    tfg_diag_error(d, NULL, "%s: file is too large (%zu bytes; the limit is %u)", name, len,
                   TFG_SOURCE_MAX_BYTES);
    return NULL;
  }
  tfg_source *s = calloc(1, sizeof *s);
  char *copy = malloc(len + 1);
  char *nm = strdup(name);
  TFG_ASSERT(s && copy && nm);
  memcpy(copy, text, len);
  copy[len] = '\0';
  s->name = nm;
  s->text = copy;
  s->len = (uint32_t)len;
  s->line_base = first_line;

  /* Line table, computed once: diagnostics and the lexer's EOF location
   * look lines up by offset in O(log n). */
  uint32_t n = 1;
  for (uint32_t i = 0; i < s->len; i++) n += copy[i] == '\n';
  s->line_starts = malloc(sizeof *s->line_starts * n);
  TFG_ASSERT(s->line_starts != NULL);
  s->line_starts[0] = 0;
  s->nlines = 1;
  for (uint32_t i = 0; i < s->len; i++)
    if (copy[i] == '\n') s->line_starts[s->nlines++] = i + 1;

  tfg_source **v = realloc(d->sources, sizeof *v * (d->nsources + 1));
  TFG_ASSERT(v != NULL);
  d->sources = v;
  d->sources[d->nsources++] = s;
  return s;
}

const tfg_source *tfg_diag_load(tfg_diag *d, const char *path) { return tfg_diag_load_named(d, path, NULL); }

/* Reads the whole of f as a source named name; errors go to loc (NULL:
 * unlocated). */
static const tfg_source *load_stream(tfg_diag *d, FILE *f, const char *name, const tfg_loc *loc) {
  tfg_strbuf b = {0};
  char chunk[65536];
  size_t n;
  bool too_big = false;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (b.len + n > TFG_SOURCE_MAX_BYTES) { too_big = true; break; }
    tfg_strbuf_putn(&b, chunk, n);
  }
  bool failed = ferror(f);
  int err = errno;
  const tfg_source *s = NULL;
  if (failed)
    tfg_diag_error(d, loc, "cannot read '%s': %s", name, strerror(err));
  else if (too_big)
    tfg_diag_error(d, loc, "%s: file is too large (the limit is %u bytes)", name,
                   TFG_SOURCE_MAX_BYTES);
  else
    s = tfg_diag_add_source(d, name, b.data ? b.data : "", b.len);
  tfg_strbuf_free(&b);
  return s;
}

const tfg_source *tfg_diag_load_named(tfg_diag *d, const char *path, const char *display) {
  bool is_stdin = strcmp(path, "-") == 0;
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) {
    tfg_diag_error(d, NULL, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  const tfg_source *s = load_stream(d, f, display ? display : is_stdin ? "<stdin>" : path, NULL);
  if (!is_stdin) fclose(f);
  return s;
}

const tfg_source *tfg_diag_load_file(tfg_diag *d, const char *path, const char *display, const tfg_loc *loc,
                                     tfg_file_id *id) {
  const char *name = display ? display : path;
  struct stat st;
  const char *why;
  int fd = tfg_file_open_regular(path, &st, &why);
  if (fd < 0) {
    tfg_diag_error(d, loc, "cannot open '%s': %s", name, why);
    return NULL;
  }
  if (id) *id = (tfg_file_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino};
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    tfg_diag_error(d, loc, "cannot read '%s': %s", name, strerror(errno));
    close(fd);
    return NULL;
  }
  const tfg_source *s = load_stream(d, f, name, loc);
  fclose(f);
  return s;
}

void tfg_source_position(const tfg_source *src, uint32_t off, uint32_t *line, uint32_t *col) {
  if (off > src->len) off = src->len;
  uint32_t lo = 0, hi = src->nlines; /* find the last line start <= off */
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (src->line_starts[mid] <= off) lo = mid; else hi = mid;
  }
  *line = lo + 1 + src->line_base;
  *col = off - src->line_starts[lo] + 1;
}

tfg_loc tfg_source_loc(const tfg_source *src, uint32_t off, uint32_t len) {
  tfg_loc l = {.src = src, .off = off, .len = len};
  tfg_source_position(src, off, &l.line, &l.col);
  return l;
}

uint32_t tfg_loc_display_col(const tfg_loc *loc) {
  if (!loc->src || loc->line <= loc->src->line_base) return loc->col;
  tfg_source *src = (tfg_source *)loc->src; /* the cache is not part of its value */
  uint32_t start = src->line_starts[loc->line - 1 - src->line_base], from = start, width = 0;
  if (src->cache_line == loc->line && src->cache_off <= loc->off) {
    from = src->cache_off;
    width = src->cache_width;
  }
  /* A multi-byte character is never split: offsets start tokens. */
  width += (uint32_t)tfg_utf8_width(src->text + from, loc->off - from);
  src->cache_line = loc->line;
  src->cache_off = loc->off;
  src->cache_width = width;
  return width + 1;
}

/* ---- recording -------------------------------------------------------- */

static bool is_name_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Cuts every run of name characters (an identifier a message echoes)
 * longer than TFG_DIAG_WORD_MAX bytes to its first TFG_DIAG_WORD_MAX and
 * "...", so a 10 MB identifier gives a readable message. Takes m. */
static char *cut_long_words(char *m) {
  size_t run = 0, i = 0;
  for (; m[i] && run <= TFG_DIAG_WORD_MAX; i++) run = is_name_byte(m[i]) ? run + 1 : 0;
  if (run <= TFG_DIAG_WORD_MAX) return m; /* the common case: nothing to cut */
  tfg_strbuf b = {0};
  run = 0;
  for (i = 0; m[i]; i++) {
    run = is_name_byte(m[i]) ? run + 1 : 0;
    if (run <= TFG_DIAG_WORD_MAX) tfg_strbuf_putc(&b, m[i]);
    else if (run == TFG_DIAG_WORD_MAX + 1) tfg_strbuf_puts(&b, "...");
  }
  free(m);
  return tfg_strbuf_take(&b);
}

static void diag_push(tfg_diag *d, tfg_diag_severity sev, const tfg_loc *loc, const char *fmt,
                      va_list ap) {
  TFG_GROW(d->entries, d->nentries, d->cap, 16);
  diag_entry *e = &d->entries[d->nentries++];
  tfg_strbuf b = {0};
  tfg_strbuf_vprintf(&b, fmt, ap);
  e->sev = sev;
  e->has_loc = loc != NULL && loc->src != NULL;
  if (e->has_loc) e->loc = *loc;
  e->msg = cut_long_words(tfg_strbuf_take(&b));
}

static bool diag_primary(tfg_diag *d, tfg_diag_severity sev, const tfg_loc *loc,
                         const char *fmt, va_list ap) {
  if (sev == TFG_DIAG_ERROR) {
    if (d->limit && d->nerrors >= d->limit) {
      d->limit_reached = true;
      d->dropping = true;
      return false;
    }
    d->nerrors++;
  } else {
    d->nwarnings++;
  }
  d->dropping = false;
  diag_push(d, sev, loc, fmt, ap);
  return true;
}

/* tfg_diag_error and tfg_diag_warning: diag_primary at one severity. C
 * hands "..." on only as a va_list, made and ended in the function that
 * takes it, so the two differ in nothing but their name and severity. */
#define DIAG_PRIMARY_ENTRY(name, sev)                                  \
  bool name(tfg_diag *d, const tfg_loc *loc, const char *fmt, ...) {  \
    va_list ap;                                                        \
    va_start(ap, fmt);                                                 \
    bool ok = diag_primary(d, sev, loc, fmt, ap);                      \
    va_end(ap);                                                        \
    return ok;                                                         \
  }
DIAG_PRIMARY_ENTRY(tfg_diag_error, TFG_DIAG_ERROR)
DIAG_PRIMARY_ENTRY(tfg_diag_warning, TFG_DIAG_WARNING)
#undef DIAG_PRIMARY_ENTRY

void tfg_diag_note(tfg_diag *d, const tfg_loc *loc, const char *fmt, ...) {
  if (d->dropping || d->nentries == 0) return;
  va_list ap;
  va_start(ap, fmt);
  diag_push(d, TFG_DIAG_NOTE, loc, fmt, ap);
  va_end(ap);
}

void tfg_diag_help(tfg_diag *d, const char *fmt, ...) {
  if (d->dropping || d->nentries == 0) return;
  va_list ap;
  va_start(ap, fmt);
  diag_push(d, TFG_DIAG_HELP, NULL, fmt, ap);
  va_end(ap);
}

void tfg_diag_set_limit(tfg_diag *d, size_t limit) { d->limit = limit; }
size_t tfg_diag_error_count(const tfg_diag *d) { return d->nerrors; }
bool tfg_diag_limit_reached(const tfg_diag *d) { return d->limit_reached; }

void tfg_diag_clear(tfg_diag *d) {
  diag_free_entries(d);
  d->nerrors = d->nwarnings = 0;
  d->limit_reached = d->dropping = false;
}

/* ---- rendering -------------------------------------------------------- */

#define C_RESET "\033[0m"
#define C_BOLD "\033[1m"
#define C_RED "\033[1;31m"
#define C_MAGENTA "\033[1;35m"
#define C_CYAN "\033[1;36m"
#define C_GREEN "\033[1;32m"
#define C_BLUE "\033[1;34m"

/* Lines longer than this many bytes are shown as a window around the span. */
enum { SNIPPET_MAX = 100, SNIPPET_BEFORE = 40 };

/* Appends src bytes [from, to) of one line, made safe for a terminal:
 * control characters and invalid UTF-8 become '?', so a NUL or a stray
 * 0xFF still has a visible cell for the caret to point at. Returns the
 * display width written. */
static size_t put_safe(tfg_strbuf *b, const char *s, size_t from, size_t to) {
  size_t w = 0;
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = from; i < to;) {
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, to - i, &cp);
    if (len == 0 || (tfg_utf8_is_unsafe(cp) && cp != '\t')) {
      tfg_strbuf_putc(b, '?');
      i += len ? (size_t)len : 1;
    } else {
      tfg_strbuf_putn(b, s + i, (size_t)len);
      i += (size_t)len;
    }
    w++;
  }
  return w;
}

/* Moves a byte offset back to the start of a UTF-8 sequence. */
static size_t char_start(const char *s, size_t lo, size_t i) {
  while (i > lo && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
  return i;
}

static void render_snippet(tfg_strbuf *b, const tfg_loc *loc, bool color) {
  const tfg_source *src = loc->src;
  if (loc->line <= src->line_base || loc->line - src->line_base > src->nlines) return;
  uint32_t li = loc->line - src->line_base; /* 1-based within the source */
  size_t ls = src->line_starts[li - 1];
  size_t le = li < src->nlines ? src->line_starts[li] - 1 : src->len;
  if (le > ls && src->text[le - 1] == '\r') le--;
  size_t off = loc->off < ls ? ls : loc->off > le ? le : loc->off;
  size_t end = loc->off + loc->len > le ? le : loc->off + loc->len;
  if (end < off) end = off;

  /* Window long lines so a 10 MB one-line file prints a readable excerpt. */
  size_t from = ls, to = le;
  bool cut_left = false, cut_right = false;
  if (le - ls > SNIPPET_MAX) {
    if (off - ls > SNIPPET_BEFORE) {
      from = char_start(src->text, ls, off - SNIPPET_BEFORE);
      cut_left = true;
    }
    if (le - from > SNIPPET_MAX) {
      to = char_start(src->text, from, from + SNIPPET_MAX);
      cut_right = true;
    }
    if (end > to) end = to;
    if (off > to) off = to;
  }

  char gutter[16];
  int gw = snprintf(gutter, sizeof gutter, "%u", loc->line);
  tfg_strbuf_printf(b, "%s%*s |%s ", color ? C_BLUE : "", gw + 1, gutter, color ? C_RESET : "");
  if (cut_left) tfg_strbuf_puts(b, "...");
  put_safe(b, src->text, from, to);
  if (cut_right) tfg_strbuf_puts(b, "...");
  tfg_strbuf_putc(b, '\n');

  tfg_strbuf_printf(b, "%s%*s |%s ", color ? C_BLUE : "", gw + 1, "", color ? C_RESET : "");
  if (cut_left) tfg_strbuf_puts(b, "   ");
  /* Pad with the line's own tabs so the caret lines up however the
   * terminal expands them. */
  const unsigned char *p = (const unsigned char *)src->text;
  for (size_t i = from; i < off;) {
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, off - i, &cp);
    tfg_strbuf_putc(b, cp == '\t' ? '\t' : ' ');
    i += len ? (size_t)len : 1;
  }
  if (color) tfg_strbuf_puts(b, C_GREEN);
  tfg_strbuf_putc(b, '^');
  size_t width = end > off ? tfg_utf8_width(src->text + off, end - off) : 1;
  for (size_t i = 1; i < width; i++) tfg_strbuf_putc(b, '~');
  if (color) tfg_strbuf_puts(b, C_RESET);
  tfg_strbuf_putc(b, '\n');
}

static const char *sev_name(tfg_diag_severity s) {
  switch (s) {
  case TFG_DIAG_ERROR: return "error";
  case TFG_DIAG_WARNING: return "warning";
  case TFG_DIAG_NOTE: return "note";
  case TFG_DIAG_HELP: return "help";
  }
  return "error";
}

static const char *sev_color(tfg_diag_severity s) {
  switch (s) {
  case TFG_DIAG_ERROR: return C_RED;
  case TFG_DIAG_WARNING: return C_MAGENTA;
  case TFG_DIAG_NOTE: return C_CYAN;
  case TFG_DIAG_HELP: return C_GREEN;
  }
  return C_RED;
}

void tfg_diag_render(tfg_diag *d, FILE *out, bool color) {
  tfg_strbuf b = {0};
  for (; d->printed < d->nentries; d->printed++) {
    const diag_entry *e = &d->entries[d->printed];
    if (e->has_loc)
      tfg_strbuf_printf(&b, "%s%s:%u:%u:%s ", color ? C_BOLD : "",
                        e->loc.src->name, e->loc.line, tfg_loc_display_col(&e->loc),
                        color ? C_RESET : "");
    else if (e->sev == TFG_DIAG_ERROR || e->sev == TFG_DIAG_WARNING)
      tfg_strbuf_printf(&b, "%stfg:%s ", color ? C_BOLD : "", color ? C_RESET : "");
    tfg_strbuf_printf(&b, "%s%s:%s %s%s%s\n", color ? sev_color(e->sev) : "", sev_name(e->sev),
                      color ? C_RESET : "", color ? C_BOLD : "", e->msg, color ? C_RESET : "");
    if (e->has_loc) render_snippet(&b, &e->loc, color);
  }
  if (d->limit_reached && d->printed == d->nentries && b.len) {
    /* Say once, after the last printed error, that more were suppressed. */
    tfg_strbuf_printf(&b, "%stfg:%s %snote:%s too many errors; stopped after %zu\n",
                      color ? C_BOLD : "", color ? C_RESET : "", color ? C_CYAN : "",
                      color ? C_RESET : "", d->limit);
  }
  if (b.len) fwrite(b.data, 1, b.len, out);
  tfg_strbuf_free(&b);
}

void tfg_diag_render_summary(const tfg_diag *d, FILE *out, bool color) {
  (void)color;
  if (d->nerrors)
    fprintf(out, "%zu error%s\n", d->nerrors, d->nerrors == 1 ? "" : "s");
  if (d->nwarnings)
    fprintf(out, "%zu warning%s\n", d->nwarnings, d->nwarnings == 1 ? "" : "s");
}
