/* base/json.h: the one JSON string writer, for every JSON tfg writes
 * (checkpoint headers, --trace files, tfg place --json).
 *
 *   tfg_strbuf b = {0};
 *   tfg_json_put_string(&b, "h.w");        // "h.w" (quotes included)
 *   tfg_json_put_string(&b, "a\"b\n");     // "a\"b\n"
 *   tfg_json_put_string(&b, "\xff");       // "\ufffd"
 *
 * The escapes are serde_json's (so a checkpoint header is byte-identical
 * to the safetensors reference writer's): \" \\ \b \f \n \r \t, other
 * bytes below 0x20 as \u00xx (lower-case hex), every other valid UTF-8
 * sequence raw. A byte that is not part of valid UTF-8 (RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF) becomes \ufffd, one
 * per byte: a JSON parser must refuse raw invalid UTF-8, and one bad file
 * name must not make a whole document unreadable. \ufffd rather than
 * \u00XX because \u00XX would read back as a different character (U+00XX),
 * while U+FFFD says plainly that something was lost. */
#ifndef TFG_JSON_H
#define TFG_JSON_H

#include <stddef.h>

#include "base/strbuf.h"

/* Appends the C string s as a JSON string literal, quotes included. */
void tfg_json_put_string(tfg_strbuf *b, const char *s);
/* The same for the n bytes at s (which may hold NUL: written \u0000). */
void tfg_json_put_stringn(tfg_strbuf *b, const char *s, size_t n);

#endif
