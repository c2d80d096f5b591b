/* cli/switches.c: the A/B switches from the TFG_* environment variables
 * (cli/switches.h): the only place tfg's switches are read; what they
 * mean is in base/switches.h and docs/cli.md. */
#include "cli/switches.h"

#include <errno.h>
#include <stdlib.h>

/* Whether variable name holds a decimal integer with nothing after it
 * (leading blanks and a sign allowed, in range of long long): then its
 * value in *out. Unset, empty or anything else: false, *out untouched. */
static bool env_int(const char *name, long long *out) {
  const char *s = getenv(name);
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

/* Whether name is set to the integer want. */
static bool env_is(const char *name, long long want) {
  long long v;
  return env_int(name, &v) && v == want;
}

void cli_switches_from_env(tfg_switches *out) {
  *out = (tfg_switches){0};
  out->no_opt = env_is("TFG_OPT", 0);
  out->no_layout = env_is("TFG_LAYOUT", 0);
  out->no_attention_grad = env_is("TFG_ATTENTION_GRAD", 0);
  out->no_fuse = env_is("TFG_FUSE", 0);
}
