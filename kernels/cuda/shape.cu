/* kernels/cuda/shape.cu */
#include "kernels/cuda/cuda.h"

extern "C" void tfg_cuda_register_shape(tfg_kernel_fn *table) { (void)table; }
