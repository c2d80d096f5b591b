/* kernels/cuda/elementwise.cu */
#include "kernels/cuda/cuda.h"

extern "C" void tfg_cuda_register_elementwise(tfg_kernel_fn *table) { (void)table; }
