/* runtime/registry.c: the backend registration (runtime/registry.h).
 *
 * This file and runtime/discover.c (the GPUs the machine has) are the only
 * files outside kernels/cuda/ and runtime/backend_cuda*.c that ask whether
 * the build has CUDA or NCCL (`#if TFG_BUILD_CUDA`, `#if TFG_BUILD_NCCL`:
 * ARCHITECTURE.md convention 7); they include no CUDA header. Everything
 * else (the executor, `tfg devices`, `tfg version`) goes through their
 * functions, so a build without CUDA or NCCL differs only in their
 * answers. */
#include "runtime/registry.h"

#include <stdlib.h>

#include "base/assert.h"

#include "runtime/discover.h"
#include "runtime/mpi.h"
#if TFG_BUILD_CUDA
#include "runtime/backend_cuda.h"
#endif

/* NCCL comes with CUDA only (the Makefile's NCCL switch, on by default
 * where nccl.h is found). */
#if TFG_BUILD_CUDA && TFG_BUILD_NCCL
#define HAVE_NCCL 1
#else
#define HAVE_NCCL 0
#endif

#define NO_NCCL_BUILD "this build of tfg has no NCCL"

/* A CUDA device: refused with the reason unless the build has CUDA, the
 * machine has a driver and GPUs, and dev's ordinal is one of them. */
static tfg_backend *cuda_new(const tfg_device *dev, const tfg_backend_opts *o, tfg_strbuf *why) {
#if TFG_BUILD_CUDA
  const tfg_gpu_info *info;
  const char *short_why, *detail;
  int n = tfg_backend_cuda_probe(&info, &short_why, &detail);
  if (n == 0) {
    tfg_strbuf_puts(why, "no CUDA driver or GPU on this machine");
    if (short_why && detail && *detail)
      tfg_strbuf_printf(why, " (%s; %s)", short_why, detail);
    else if (short_why)
      tfg_strbuf_printf(why, " (%s)", short_why);
    return NULL;
  }
  if (dev->physical >= n) {
    tfg_strbuf_printf(why, "cuda:%d does not exist: this machine has %d GPU%s", dev->physical, n,
                      n == 1 ? "" : "s");
    return NULL;
  }
  return tfg_backend_cuda_new(dev, o, why);
#else
  (void)dev;
  (void)o;
  tfg_strbuf_puts(why, TFG_NO_CUDA_BUILD);
  return NULL;
#endif
}

tfg_backend *tfg_backend_new(const tfg_device *dev, const tfg_backend_opts *o, tfg_strbuf *why) {
  static const tfg_backend_opts defaults = {0};
  if (!o) o = &defaults;
  switch (dev->kind) {
  case TFG_DEVICE_CPU:
  case TFG_DEVICE_HOST: {
    /* cpu:0's capacity is the machine's memory: its pool always grows. */
    tfg_backend_opts ho = *o;
    ho.preallocate = o->preallocate && dev->kind == TFG_DEVICE_HOST;
    tfg_backend *b = tfg_backend_host_new_with(dev, &ho);
    if (!b) {
      tfg_strbuf size = {0};
      tfg_size_format(&size, dev->memory);
      tfg_strbuf_printf(why, "cannot preallocate its %s of host memory (--memory preallocate)", size.data);
      tfg_strbuf_free(&size);
    }
    return b;
  }
  case TFG_DEVICE_CUDA: return cuda_new(dev, o, why);
  case TFG_DEVICE_SIM: tfg_strbuf_puts(why, "sim devices are for tfg place and tfg plan only"); return NULL;
  }
  tfg_strbuf_puts(why, "unknown device kind");
  return NULL;
}

/* ---- collectives --------------------------------------------------------------- */

tfg_coll *tfg_coll_nccl_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
#if HAVE_NCCL
  return tfg_backend_cuda_nccl_new(nranks, b, s, why);
#else
  (void)nranks;
  (void)b;
  (void)s;
  tfg_strbuf_puts(why, NO_NCCL_BUILD);
  return NULL;
#endif
}

/* tfg_coll_ring_new as a tfg_coll_new_fn (it cannot fail). */
static tfg_coll *ring_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  (void)why;
  return tfg_coll_ring_new(nranks, b, s);
}

/* A group's all-reduce across the processes of an mpirun job: host
 * devices over MPI (runtime/mpi.h); CUDA devices in one NCCL communicator
 * of the whole job, each process's GPUs its ranks rank x nranks + r, the
 * unique id made by rank 0 and carried by MPI (every process must have
 * as many GPUs in the group, and one rank per GPU). */
static tfg_coll *job_coll_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  bool cuda = false;
  for (int r = 0; r < nranks; r++) cuda |= !tfg_backend_is_host(b[r]);
  if (!cuda) return tfg_mpi_job_coll_new(nranks, b, s, why);
#if HAVE_NCCL
  unsigned char id[TFG_NCCL_ID_BYTES] = {0};
  tfg_strbuf mine = {0};
  bool ok = tfg_mpi_rank() != 0 || tfg_backend_cuda_nccl_id(id, &mine);
  if (!tfg_mpi_bcast(id, sizeof id, ok)) {
    tfg_strbuf_printf(why, "rank 0 could not make NCCL's unique id for the job%s%s", mine.len ? ": " : "",
                      mine.len ? mine.data : "");
    tfg_strbuf_free(&mine);
    return NULL;
  }
  tfg_strbuf_free(&mine);
  return tfg_backend_cuda_nccl_join(nranks, b, s, nranks * tfg_mpi_size(), nranks * tfg_mpi_rank(), id, why);
#else
  tfg_strbuf_puts(why, "CUDA devices across the processes of an mpirun job need NCCL: " NO_NCCL_BUILD);
  return NULL;
#endif
}

tfg_coll *tfg_coll_new_for(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  TFG_ASSERT(nranks >= 1 && b && s);
  /* under mpirun every all-reduce is the job's: mirrored spans the ranks
   * (compiler/strategy/strategy.h, tfg_job) */
  if (tfg_mpi_size() > 1) return job_coll_new(nranks, b, s, why);
  const tfg_device **dev = malloc((size_t)nranks * sizeof *dev);
  int *group = malloc((size_t)nranks * sizeof *group);
  TFG_ASSERT(dev && group);
  for (int r = 0; r < nranks; r++) {
    dev[r] = tfg_backend_device(b[r]);
    group[r] = dev[r]->physical;
  }
  tfg_coll_algo leaders;
  tfg_coll *c = NULL;
  switch (tfg_coll_choose(nranks, dev, HAVE_NCCL, &leaders, why)) {
  case TFG_COLL_ALGO_RING: c = tfg_coll_ring_new(nranks, b, s); break;
  case TFG_COLL_ALGO_SHARED: c = tfg_coll_shared_new(nranks, b, s, why); break;
  case TFG_COLL_ALGO_NCCL: c = tfg_coll_nccl_new(nranks, b, s, why); break;
  case TFG_COLL_ALGO_HIER:
    c = tfg_coll_hier_new(nranks, b, s, group, leaders == TFG_COLL_ALGO_NCCL ? tfg_coll_nccl_new : ring_new, why);
    break;
  case TFG_COLL_ALGO_REFUSED: break;
  }
  free(dev);
  free(group);
  return c;
}

/* ---- the build ------------------------------------------------------------------ */

void tfg_backend_build_info(tfg_strbuf *out) {
#if TFG_BUILD_CUDA
  tfg_backend_cuda_build_info(out);
#else
  tfg_strbuf_puts(out, "cuda: off (built with CUDA=0 or without the CUDA toolkit)\ncudnn: off\nnccl: off\n");
#endif
}
