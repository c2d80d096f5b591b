/* kernels/cuda/conv.cu */
#include "kernels/cuda/cuda.h"

extern "C" void tfg_cuda_register_conv(tfg_kernel_fn *table) { (void)table; }
