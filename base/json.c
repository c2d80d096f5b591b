/* base/json.c: the JSON string writer of base/json.h. */
#include "base/json.h"

#include <stdint.h>
#include <string.h>

#include "base/utf8.h"

void tfg_json_put_stringn(tfg_strbuf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  tfg_strbuf_putc(b, '"');
  size_t run = 0; /* p[run .. i) is valid and needs no escape: appended in one go */
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    uint32_t cp = c;
    int len = c < 0x80 ? 1 : tfg_utf8_decode(p + i, n - i, &cp);
    if (len > 0 && c >= 0x20 && c != '"' && c != '\\') {
      i += (size_t)len;
      continue;
    }
    tfg_strbuf_putn(b, s + run, i - run);
    switch (c) {
    case '"': tfg_strbuf_puts(b, "\\\""); break;
    case '\\': tfg_strbuf_puts(b, "\\\\"); break;
    case '\b': tfg_strbuf_puts(b, "\\b"); break;
    case '\f': tfg_strbuf_puts(b, "\\f"); break;
    case '\n': tfg_strbuf_puts(b, "\\n"); break;
    case '\r': tfg_strbuf_puts(b, "\\r"); break;
    case '\t': tfg_strbuf_puts(b, "\\t"); break;
    default:
      if (c < 0x20) {
        char u[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], '\0'};
        tfg_strbuf_puts(b, u);
      } else {
        tfg_strbuf_puts(b, "\\ufffd"); /* not UTF-8: see json.h for why not \u00XX */
      }
    }
    i++;
    run = i;
  }
  tfg_strbuf_putn(b, s + run, n - run);
  tfg_strbuf_putc(b, '"');
}

void tfg_json_put_string(tfg_strbuf *b, const char *s) { tfg_json_put_stringn(b, s, strlen(s)); }
