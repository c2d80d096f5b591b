/* runtime/discover.h: what hardware this machine has: the host's memory
 * and cores, and the physical GPUs the CUDA runtime reports (in a build
 * with CUDA). runtime/device.c describes devices from these answers; the
 * backends run on them.
 *
 *   const tfg_gpu_info *gpus;
 *   const char *why;
 *   int n = tfg_discover_gpus(&gpus, &why, NULL);   // 0: why says why
 *   int64_t free0 = n > 0 ? tfg_discover_gpu_free(0) : -1;
 *
 * This file and runtime/registry.c are the backend registration: the only
 * files outside kernels/cuda/ and runtime/backend_cuda*.c that ask whether
 * the build has CUDA (ARCHITECTURE.md, convention 7); a build without it
 * answers "no GPU" here, with the reason. */
#ifndef TFG_DISCOVER_H
#define TFG_DISCOVER_H

#include <stdint.h>

#include "ir/device.h" /* tfg_gpu_info */

/* Why a build without CUDA has no GPU (the probe's reason, and the
 * registration's refusal of a cuda device). */
#define TFG_NO_CUDA_BUILD "this build of tfg has no CUDA backend"


/* The physical GPUs of this machine, probed once per process: returns
 * their count and points *info at that many entries (CUDA ordinals 0..).
 * 0 when there are none, with *why saying why in a few words ("no CUDA
 * driver", "no CUDA-capable device", "this build of tfg has no CUDA
 * backend"); *detail (when not NULL) gets the runtime's own words, or "".
 * Any of the pointers may be NULL. */
int tfg_discover_gpus(const tfg_gpu_info **info, const char **why, const char **detail);
/* Bytes free on GPU k as the CUDA runtime reports them (this makes the
 * GPU's context); the first answer is kept. -1 when it cannot tell. */
int64_t tfg_discover_gpu_free(int k);

/* The machine's physical memory in bytes, or 8 GiB where the system
 * cannot tell (some containers): a plausible small machine, so defaults
 * stay modest. */
int64_t tfg_discover_host_memory(void);
/* The online cores (at least 1). */
long tfg_discover_host_cores(void);

#endif
