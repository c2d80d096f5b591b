/* runtime/backend_fault.c: the launch-count fault hook
 * (runtime/backend_fault.h). */
#include "runtime/backend_fault.h"

#include <stdio.h>

#include "base/env.h"

long long tfg_backend_fault_after(const tfg_device *dev, char *msg, size_t n) {
  long long fdev, fafter;
  if (!tfg_env_int("TFG_FAULT_DEVICE", &fdev) || !tfg_env_int("TFG_FAULT_AFTER", &fafter) || fdev != dev->index ||
      fafter <= 0)
    return 0;
  snprintf(msg, n, "injected fault (TFG_FAULT_DEVICE=%lld, TFG_FAULT_AFTER=%lld)", fdev, fafter);
  return fafter;
}
