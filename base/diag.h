/* base/diag.h: source files and located diagnostics.
 *
 * A tfg_diag owns every source text of one session (the main program and
 * what it imports) and collects diagnostics that point into them. Library
 * code reports here and returns a status; the CLI renders at the end:
 *
 *   tfg_diag *d = tfg_diag_new();
 *   const tfg_source *src = tfg_diag_load(d, "model.tfg");   // NULL: error recorded
 *   ...
 *   tfg_diag_error(d, &loc, "expected ')' to close '(' at %u:%u", l, c);
 *   tfg_diag_help(d, "did you mean `logits`?");
 *   tfg_diag_render(d, stderr, isatty(2));   // file:line:col: error: ... + caret
 *   tfg_diag_free(d);
 *
 * Rendering follows LANGUAGE.md section 8: `file:line:col: error: message`,
 * the source line, a caret under the span, then note:/help: lines. Columns
 * in messages count code points from 1; spans are byte offsets. */
#ifndef TFG_DIAG_H
#define TFG_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* Source files larger than this are refused (offsets are 32-bit). */
#define TFG_SOURCE_MAX_BYTES (256u * 1024u * 1024u)
/* Longest run of name characters a message shows: a longer identifier
 * echoed in a message is cut to this many bytes and "...". */
#define TFG_DIAG_WORD_MAX 64
/* Errors recorded before the sink stops accepting more (clang's
 * -ferror-limit): past it the front end stops early. */
#define TFG_DIAG_DEFAULT_LIMIT 20

typedef struct tfg_source {
  const char *name; /* as the user gave it: "model.tfg", "<stdin>" */
  const char *text; /* text[len] == '\0'; NUL bytes may also occur before len */
  uint32_t len;
  uint32_t *line_starts; /* byte offset of each line's first byte */
  uint32_t nlines;
  /* Lines numbered before this source's first: 0 for a file. The REPL's
   * inputs are separate sources whose numbering continues from input to
   * input, so an error reads <stdin>:N:col with N the session's line. A
   * tfg_loc's line counts it in; line_starts is indexed without it. */
  uint32_t line_base;
  /* The last display-column query (tfg_loc_display_col): later offsets on
   * the same line count on from it, so columns along a long line cost
   * O(line), not O(line) each. Only the thread rendering diagnostics or
   * dumping the AST touches it. */
  uint32_t cache_line, cache_off, cache_width;
} tfg_source;

/* A span of source text. line and col are 1-based; col counts bytes from
 * the line start (tfg_diag converts to display columns when printing). */
typedef struct tfg_loc {
  const tfg_source *src;
  uint32_t off, len;
  uint32_t line, col;
} tfg_loc;

typedef enum tfg_diag_severity {
  TFG_DIAG_ERROR,
  TFG_DIAG_WARNING,
  TFG_DIAG_NOTE,
  TFG_DIAG_HELP,
} tfg_diag_severity;

typedef struct tfg_diag tfg_diag;

tfg_diag *tfg_diag_new(void);
void tfg_diag_free(tfg_diag *d);

/* Reads a whole file ("-" reads standard input, named "<stdin>"). On
 * failure records an unlocated error naming the path and returns NULL.
 * The source lives as long as d. */
const tfg_source *tfg_diag_load(tfg_diag *d, const char *path);
/* The same, the source named name in messages (a stable name for a file
 * found in a search path). */
const tfg_source *tfg_diag_load_named(tfg_diag *d, const char *path, const char *name);
/* A file's identity (device and inode): two paths name one file when
 * their identities are equal. */
typedef struct tfg_file_id {
  uint64_t dev, ino;
} tfg_file_id;
/* Reads the regular file at path as a source named display (NULL: path),
 * for a file a program names (an import). It is opened without blocking
 * and refused unless it is a regular file (a FIFO would wait for a writer
 * forever, a directory cannot be read). Errors are recorded at loc (NULL:
 * unlocated); returns NULL then. *id (when not NULL) gets its identity. */
const tfg_source *tfg_diag_load_file(tfg_diag *d, const char *path, const char *display,
                                     const tfg_loc *loc, tfg_file_id *id);
/* Adds text[0..len) as a source named name (copied). Returns NULL and
 * records an error when len exceeds TFG_SOURCE_MAX_BYTES. */
const tfg_source *tfg_diag_add_source(tfg_diag *d, const char *name, const char *text,
                                      size_t len);
/* The same, its lines numbered from first_line + 1 (line_base). */
const tfg_source *tfg_diag_add_source_at(tfg_diag *d, const char *name, const char *text,
                                         size_t len, uint32_t first_line);

/* Line and byte column (both 1-based) of byte offset off in src. */
void tfg_source_position(const tfg_source *src, uint32_t off, uint32_t *line, uint32_t *col);
/* The location of byte span [off, off+len) in src. */
tfg_loc tfg_source_loc(const tfg_source *src, uint32_t off, uint32_t len);
/* Display column (code points, 1-based) of loc's first byte. */
uint32_t tfg_loc_display_col(const tfg_loc *loc);

/* Records an error at loc (NULL: no location). Returns false when the
 * error limit was already reached and the error was dropped; notes and
 * help added after a dropped error are dropped with it. */
bool tfg_diag_error(tfg_diag *d, const tfg_loc *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool tfg_diag_warning(tfg_diag *d, const tfg_loc *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A note attached to the last error or warning; loc may be NULL. */
void tfg_diag_note(tfg_diag *d, const tfg_loc *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A help line ("did you mean ...") attached to the last error or warning. */
void tfg_diag_help(tfg_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Maximum errors recorded (default TFG_DIAG_DEFAULT_LIMIT; 0: no limit). */
void tfg_diag_set_limit(tfg_diag *d, size_t limit);
size_t tfg_diag_error_count(const tfg_diag *d);
/* True once an error was dropped because of the limit. */
bool tfg_diag_limit_reached(const tfg_diag *d);

/* Prints every diagnostic not printed yet, in the order recorded; colour
 * with ANSI escapes when color is true. */
void tfg_diag_render(tfg_diag *d, FILE *out, bool color);
/* Prints "N error(s)" (and "N warning(s)") when there were any. */
void tfg_diag_render_summary(const tfg_diag *d, FILE *out, bool color);
/* Forgets recorded diagnostics and counts; sources stay loaded. */
void tfg_diag_clear(tfg_diag *d);

#endif
