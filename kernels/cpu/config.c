/* kernels/cpu/config.c: the CPU kernels' process-wide switches
 * (kernels/cpu/config.h). */
#include "kernels/cpu/config.h"

#include <stdatomic.h>

#include "base/assert.h"

static tfg_switches config;
static atomic_bool fixed; /* read once: a set after it would change nothing */

void tfg_cpu_config_set(const tfg_switches *sw) {
  TFG_ASSERT(!atomic_load(&fixed));
  config = *sw;
}

const tfg_switches *tfg_cpu_config_get(void) {
  atomic_store(&fixed, true);
  return &config;
}
