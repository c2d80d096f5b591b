/* cli/switches.c: the A/B switches from the TFG_* environment variables
 * (cli/switches.h): the only place tfg's switches are read; what they
 * mean is in base/switches.h and docs/cli.md. */
#include "cli/switches.h"

#include <errno.h>
#include <stdio.h>
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

/* NVRTC's cache folder: TFG_CACHE_DIR, else $XDG_CACHE_HOME/tfg, else
 * $HOME/.cache/tfg; NULL when none is set (kernels/nvrtc.h makes it). */
static const char *nvrtc_cache(void) {
  static char buf[4096];
  const char *env = getenv("TFG_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env) n = snprintf(buf, sizeof buf, "%s", env);
  else if (xdg && *xdg) n = snprintf(buf, sizeof buf, "%s/tfg", xdg);
  else if (home && *home) n = snprintf(buf, sizeof buf, "%s/.cache/tfg", home);
  else return NULL;
  return n > 0 && (size_t)n < sizeof buf ? buf : NULL; /* a path too long for the cache: no cache */
}

void cli_switches_from_env(tfg_switches *out) {
  *out = (tfg_switches){0};
  out->no_opt = env_is("TFG_OPT", 0);
  out->no_layout = env_is("TFG_LAYOUT", 0);
  out->no_attention_grad = env_is("TFG_ATTENTION_GRAD", 0);
  out->no_fuse = env_is("TFG_FUSE", 0);
  out->no_vmath = env_is("TFG_VMATH", 0);
  out->no_gemm_split = env_is("TFG_GEMM_SPLIT", 0);
  out->no_attention_tiled = env_is("TFG_ATTENTION_TILED", 0);
  out->nvrtc = env_is("TFG_NVRTC", 1);
  out->nvrtc_cache = nvrtc_cache();
  out->no_cuda_graphs = env_is("TFG_CUDA_GRAPHS", 0);
  out->host_graphs = env_is("TFG_HOST_GRAPHS", 1);
  long long v, dev;
  if (env_int("TFG_NCCL_TIMEOUT", &v) && v > 0) out->nccl_timeout_s = v;
  /* Each fault hook needs its device and its own variable (runtime/exec.h). */
  if (env_int("TFG_FAULT_DEVICE", &dev)) {
    out->fault_device = (int)dev;
    if (env_int("TFG_FAULT_STEP", &v)) {
      out->fault_at_step = true;
      out->fault_step = v;
    }
    if (env_int("TFG_FAULT_AFTER", &v) && v > 0) out->fault_after = v;
  }
  out->fault_assert = env_is("TFG_FAULT_ASSERT", 1);
}
