/* runtime/backend_fault.c: the launch-count fault hook
 * (runtime/backend_fault.h). */
#include "runtime/backend_fault.h"

#include <stdio.h>

long long tfg_backend_fault_after(const tfg_switches *sw, const tfg_device *dev, char *msg, size_t n) {
  if (sw->fault_after <= 0 || sw->fault_device != dev->index) return 0;
  snprintf(msg, n, "injected fault (TFG_FAULT_DEVICE=%d, TFG_FAULT_AFTER=%lld)", sw->fault_device,
           (long long)sw->fault_after);
  return sw->fault_after;
}
