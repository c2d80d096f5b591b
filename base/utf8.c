/* base/utf8.c: strict UTF-8 decoding. */
#include "base/utf8.h"

int tfg_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned char c = s[0];
  *cp = c;
  if (c < 0x80) return 1;
  int len;
  uint32_t v, min;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
  else return 0; /* continuation byte, overlong lead (C0, C1) or F5..FF */
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

size_t tfg_utf8_width(const char *s, size_t n) {
  size_t w = 0;
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int len = tfg_utf8_decode(p + i, n - i, &cp);
    i += len ? (size_t)len : 1;
    w++;
  }
  return w;
}
