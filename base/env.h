/* base/env.h: reading the environment variables tfg's test hooks and
 * switches use (TFG_FAULT_DEVICE, TFG_HOST_GRAPHS, TFG_CUDA_GRAPHS...).
 *
 *   long long v;
 *   if (tfg_env_int("TFG_CUDA_GRAPHS", &v) && v == 0) ...   // set, and 0
 */
#ifndef TFG_ENV_H
#define TFG_ENV_H

#include <stdbool.h>

/* Whether environment variable name holds a decimal integer with nothing
 * after it (strtoll's syntax: leading blanks and a sign allowed; in range
 * of long long): then its value in *out. Unset, empty or anything else:
 * false, *out untouched. */
bool tfg_env_int(const char *name, long long *out);

#endif
