/* runtime/registry.h: the backend registration: which backend runs a
 * device, which collective runs a group of devices, and what the build
 * supports. The executor and `tfg version` ask here; the backends and
 * collectives themselves know nothing of each other.
 *
 *   tfg_strbuf why = {0};
 *   tfg_backend *b = tfg_backend_new(dev, &opts, &why);   // NULL: why says
 *   tfg_coll *c = tfg_coll_new_for(2, backends, streams, &why);
 *
 * runtime/registry.c and runtime/discover.c (the GPUs the machine has)
 * are the only files outside kernels/cuda/ and runtime/backend_cuda*.c
 * that ask whether the build has CUDA or NCCL (ARCHITECTURE.md,
 * convention 7). */
#ifndef TFG_REGISTRY_H
#define TFG_REGISTRY_H

#include "base/strbuf.h"
#include "ir/device.h"
#include "runtime/backend.h"
#include "runtime/collective.h"

/* The backend for device dev: the host backend for
 * TFG_DEVICE_CPU and TFG_DEVICE_HOST; the CUDA backend for TFG_DEVICE_CUDA
 * when this build has one and dev's GPU exists. Otherwise NULL with the
 * reason appended to *why ("this build of tfg has no CUDA backend", "no
 * CUDA driver or GPU on this machine", "cuda:3 does not exist: this
 * machine has 1 GPU", a compute capability below 7.0, a pool that cannot
 * be preallocated; sim devices: "sim devices are for tfg place and tfg
 * plan only"). o may be NULL (defaults: growth, no TF32, no checks). */
tfg_backend *tfg_backend_new(const tfg_device *dev, const tfg_backend_opts *o, tfg_strbuf *why);

/* The collective tfg_coll_choose picks for the devices of b (with this
 * build's NCCL), over the streams s: the executor's one communicator per
 * device group. NULL with the reason appended to *why: a refused group,
 * or NCCL failing to start (ncclCommInitAll's error, file:line). */
tfg_coll *tfg_coll_new_for(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why);

/* NCCL over nranks CUDA backends on distinct GPUs, one communicator for
 * the group (ncclCommInitAll over their GPUs, this process only), rank r's
 * operations on s[r]. A call is one NCCL group of one in-place
 * ncclAllReduce per segment and rank (ncclSum, or ncclAvg for MEAN). NULL
 * with *why: "this build of tfg has no NCCL", a backend that is not
 * CUDA, two ranks on one GPU, or NCCL's own error. */
tfg_coll *tfg_coll_nccl_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why);

/* The build's GPU support for `tfg version`: lines
 * "cuda: ...", "cudnn: ...", "nccl: ..." appended to *out. */
void tfg_backend_build_info(tfg_strbuf *out);

#endif
