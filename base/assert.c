/* base/assert.c: the one place tfg aborts. */
#include "base/assert.h"

#include <stdio.h>
#include <stdlib.h>

static _Thread_local tfg_assert_handler handler;

void tfg_assert_set_handler(tfg_assert_handler h) { handler = h; }

_Noreturn void tfg_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "tfg: internal error: %s:%d: assertion '%s' failed\n"
                  "tfg: this is a bug in tfg; please report it with the program that caused it\n",
          file, line, expr);
  tfg_assert_handler h = handler;
  handler = NULL; /* a failure inside the handler aborts */
  if (h) h();
  abort();
}
