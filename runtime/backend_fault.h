/* runtime/backend_fault.h: the fault-injection test hook every backend
 * reads when it is created (the executor reads it too, to leave such runs
 * uncaptured). Its own module, below the backends and the backend
 * registration, so that none of them calls another for it.
 *
 *   char msg[96];
 *   long long after = tfg_backend_fault_after(&opts->sw, dev, msg, sizeof msg);
 *   if (after > 0 && ++launches == after) fail_stream(msg);   // that launch runs no kernel
 */
#ifndef TFG_BACKEND_FAULT_H
#define TFG_BACKEND_FAULT_H

#include <stddef.h>

#include "base/switches.h"
#include "ir/device.h"

/* Test hook: the N-th kernel launched (counting launch calls) on a
 * backend whose device index is sw->fault_device fails with
 * TFG_ERR_DEVICE, when the backend was created with sw->fault_after = N
 * (TFG_FAULT_DEVICE and TFG_FAULT_AFTER=N, read by cli/switches.c).
 * Returns that N for a backend of dev (0: none) and the message it fails
 * with in msg (n bytes). */
long long tfg_backend_fault_after(const tfg_switches *sw, const tfg_device *dev, char *msg, size_t n);

#endif
