/* kernels/kernel.h: what every backend's kernels see: tensors and the
 * kernel context.
 *
 * A kernel reads node->op, node->attrs and its input tensors and writes
 * every element of its output tensor (allocated by the caller with the
 * node's dtype and shape). Tensors are dense, row-major (C order). */
#ifndef TFG_KERNEL_H
#define TFG_KERNEL_H

#include <stdbool.h>

#include "base/status.h"
#include "base/strbuf.h"
#include "compiler/graph.h"

typedef struct tfg_tensor {
  void *data;
  tfg_dtype dtype;
  tfg_shape shape;
} tfg_tensor;

struct tfg_pool;

typedef struct tfg_kernel_ctx {
  struct tfg_pool *pool; /* CPU worker threads; NULL runs everything on the caller */
  bool training;         /* dropout is active only while training */
  int64_t step;          /* the training step, from 1: Adam's bias correction, dropout masks */
  uint64_t seed;         /* the train action's seed, mixed into dropout masks */
  tfg_strbuf err;        /* a kernel's error message (without the op and location) */
  int32_t node;          /* the id of the node being run (the executor sets it; -1 unknown): device-side
                          * errors name it (kernels/cuda/cuda.h) */
  void *backend;         /* the backend's state for this launch (NULL on host devices; CUDA:
                          * a tfg_cuda_ctx, kernels/cuda/cuda.h), set by the backend's launch */
} tfg_kernel_ctx;

/* Records a kernel error message in ctx and returns status s. */
tfg_status tfg_kernel_fail(tfg_kernel_ctx *ctx, tfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
