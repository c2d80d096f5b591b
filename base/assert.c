/* base/assert.c: the one place tfg aborts. */
#include "base/assert.h"

#include <stdio.h>
#include <stdlib.h>

_Noreturn void tfg_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "tfg: internal error: %s:%d: assertion '%s' failed\n"
                  "tfg: this is a bug in tfg; please report it with the program that caused it\n",
          file, line, expr);
  abort();
}
