/* base/utf8.h: strict UTF-8 decoding (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). Used by the lexer to validate
 * source text and by diagnostics to count display columns. */
#ifndef TFG_UTF8_H
#define TFG_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes one code point from s[0..n). Returns its length in bytes (1-4)
 * and stores it in *cp, or returns 0 when the bytes are not valid UTF-8
 * (*cp is then the first byte). n must be >= 1. */
int tfg_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Whether printing cp could mislead a terminal or a reader: C0 and C1
 * controls, DEL, zero-width and direction-changing characters, and the
 * byte order mark. Such characters are shown as U+XXXX or '?', never raw. */
static inline bool tfg_utf8_is_unsafe(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || (cp >= 0x200B && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF;
}

/* Number of code points in s[0..n), counting each invalid byte as one. */
size_t tfg_utf8_width(const char *s, size_t n);

#endif
