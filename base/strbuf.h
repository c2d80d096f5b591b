/* base/strbuf.h: a growable NUL-terminated string.
 *
 *   tfg_strbuf b = {0};
 *   tfg_strbuf_printf(&b, "%s:%d", file, line);
 *   tfg_strbuf_putn(&b, text, len);
 *   puts(b.data);            // always NUL-terminated once anything was added
 *   tfg_strbuf_free(&b);
 */
#ifndef TFG_STRBUF_H
#define TFG_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct tfg_strbuf {
  char *data;
  size_t len, cap;
} tfg_strbuf;

void tfg_strbuf_putn(tfg_strbuf *b, const char *s, size_t n);
void tfg_strbuf_puts(tfg_strbuf *b, const char *s);
void tfg_strbuf_putc(tfg_strbuf *b, char c);
void tfg_strbuf_printf(tfg_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tfg_strbuf_vprintf(tfg_strbuf *b, const char *fmt, va_list ap);
/* Empties the buffer, keeping its memory. */
void tfg_strbuf_clear(tfg_strbuf *b);
/* Hands the heap string to the caller (free() it); the buffer is reset. */
char *tfg_strbuf_take(tfg_strbuf *b);
void tfg_strbuf_free(tfg_strbuf *b);

#endif
