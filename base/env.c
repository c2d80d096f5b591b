/* base/env.c: integers from environment variables (base/env.h). */
#include "base/env.h"

#include <errno.h>
#include <stdlib.h>

bool tfg_env_int(const char *name, long long *out) {
  const char *s = getenv(name);
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}
