/* runtime/discover.c: the machine's hardware (runtime/discover.h). The
 * GPU probe itself is the CUDA backend's (runtime/backend_cuda_gpu.c, in
 * builds with CUDA); this file says what the build has. */
#include "runtime/discover.h"

#include <unistd.h>

#if TFG_BUILD_CUDA
#include "runtime/backend_cuda.h"
#endif

int tfg_discover_gpus(const tfg_gpu_info **info, const char **why, const char **detail) {
#if TFG_BUILD_CUDA
  return tfg_backend_cuda_probe(info, why, detail);
#else
  if (info) *info = NULL;
  if (why) *why = TFG_NO_CUDA_BUILD;
  if (detail) *detail = "";
  return 0;
#endif
}

int64_t tfg_discover_gpu_free(int k) {
#if TFG_BUILD_CUDA
  return tfg_backend_cuda_free_memory(k);
#else
  (void)k;
  return -1;
#endif
}

int64_t tfg_discover_host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return (int64_t)8 << 30;
  if ((uint64_t)pages > (uint64_t)INT64_MAX / (uint64_t)page) return INT64_MAX;
  return (int64_t)pages * (int64_t)page;
}

long tfg_discover_host_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}
