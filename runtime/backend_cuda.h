/* runtime/backend_cuda.h: the CUDA backend's entry points, for the
 * backend registration (runtime/registry.c, and runtime/discover.c for the
 * probe) only. No CUDA header here: the declarations are plain C, so
 * those files need none.
 *
 * Compiled only in builds with CUDA (TFG_BUILD_CUDA=1); the registration
 * calls these only under `#if TFG_BUILD_CUDA`. */
#ifndef TFG_BACKEND_CUDA_H
#define TFG_BACKEND_CUDA_H

#include "runtime/backend.h"
#include "runtime/collective.h"

/* A CUDA backend for the logical device dev (a TFG_DEVICE_CUDA entry whose
 * dev->physical the probe found), or NULL with the reason appended to
 * *why (compute capability below 7.0, a CUDA call that failed, a pool
 * that cannot be preallocated). */
tfg_backend *tfg_backend_cuda_new(const tfg_device *dev, const tfg_backend_opts *o, tfg_strbuf *why);

/* What runtime/discover.c's tfg_discover_gpus and tfg_discover_gpu_free
 * give in a build with CUDA. */
int tfg_backend_cuda_probe(const tfg_gpu_info **info, const char **why, const char **detail);
int64_t tfg_backend_cuda_free_memory(int k);

/* runtime/collective.h's tfg_coll_nccl_new in a build with NCCL
 * (TFG_BUILD_NCCL=1; defined only there). */
tfg_coll *tfg_backend_cuda_nccl_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why);

/* Across the processes of an mpirun job (builds with NCCL only): a new
 * NCCL unique id into id[0..TFG_NCCL_ID_BYTES) (rank 0 makes it, MPI
 * carries it to the others: runtime/registry.c), and one process's part
 * of the job's communicator, its nranks GPUs the ranks first..first +
 * nranks - 1 of world (ncclCommInitRank in one group, a rank per GPU), so
 * that an all-reduce's mean is over every rank of every process. false /
 * NULL with *why. */
#define TFG_NCCL_ID_BYTES 128
bool tfg_backend_cuda_nccl_id(void *id, tfg_strbuf *why);
tfg_coll *tfg_backend_cuda_nccl_join(int nranks, tfg_backend *const *b, tfg_stream *const *s, int world, int first,
                                     const void *id, tfg_strbuf *why);

/* "cuda: on (...)", "cudnn: ...", "nccl: ..." lines for `tfg version`. */
void tfg_backend_cuda_build_info(tfg_strbuf *out);

#endif
