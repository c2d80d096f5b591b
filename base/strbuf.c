/* base/strbuf.c: growable strings. */
#include "base/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

static void strbuf_reserve(tfg_strbuf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->data, cap);
  TFG_ASSERT(p != NULL);
  b->data = p;
  b->cap = cap;
}

void tfg_strbuf_putn(tfg_strbuf *b, const char *s, size_t n) {
  strbuf_reserve(b, n);
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void tfg_strbuf_puts(tfg_strbuf *b, const char *s) { tfg_strbuf_putn(b, s, strlen(s)); }

void tfg_strbuf_putc(tfg_strbuf *b, char c) { tfg_strbuf_putn(b, &c, 1); }

void tfg_strbuf_vprintf(tfg_strbuf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  TFG_ASSERT(n >= 0);
  strbuf_reserve(b, (size_t)n);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void tfg_strbuf_printf(tfg_strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

void tfg_strbuf_clear(tfg_strbuf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

char *tfg_strbuf_take(tfg_strbuf *b) {
  char *p = b->data;
  if (!p) {
    p = malloc(1);
    TFG_ASSERT(p != NULL);
    p[0] = '\0';
  }
  b->data = NULL;
  b->len = b->cap = 0;
  return p;
}

void tfg_strbuf_free(tfg_strbuf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}
