/* tests/fuzz/fuzz_parse.c: libFuzzer target over the lexer and parser.
 *
 * Any input must parse or fail with diagnostics: no crash, no hang, no
 * leak, no undefined behaviour. Rendering is included because it walks
 * source lines with the diagnostics' offsets. Built by `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/strbuf.h"
#include "lang/ast.h"
#include "lang/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink) sink = fopen("/dev/null", "w");
  tfg_diag *d = tfg_diag_new();
  tfg_arena a;
  tfg_arena_init(&a);
  const tfg_source *src = tfg_diag_add_source(d, "fuzz.tfg", (const char *)data, size);
  if (src) {
    tfg_ast *prog = NULL;
    bool at_eof;
    if (tfg_parse(src, d, &a, &prog, &at_eof) == TFG_OK) {
      tfg_strbuf out = {0};
      tfg_ast_dump(prog, &out);
      tfg_strbuf_free(&out);
    }
    tfg_diag_render(d, sink, true);
  }
  tfg_arena_free(&a);
  tfg_diag_free(d);
  return 0;
}
