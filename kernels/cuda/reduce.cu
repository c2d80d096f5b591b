/* kernels/cuda/reduce.cu */
#include "kernels/cuda/cuda.h"

extern "C" void tfg_cuda_register_reduce(tfg_kernel_fn *table) { (void)table; }
