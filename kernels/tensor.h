/* kernels/tensor.h: a tensor as kernels see it: a dense, row-major (C
 * order) buffer with its dtype and shape. Apart from kernels/kernel.h so
 * that the index formulas (kernels/index_math.h), which the kernel
 * helpers use, need no more than this. */
#ifndef TFG_TENSOR_H
#define TFG_TENSOR_H

#include "ir/graph.h"

typedef struct tfg_tensor {
  void *data;
  tfg_dtype dtype;
  tfg_shape shape;
} tfg_tensor;

#endif
