/* kernels/cpu/registry.c: which CPU kernel runs each op: every file of
 * kernels/cpu fills its rows of one table (tfg_cpu_register_*,
 * kernels/cpu/cpu_impl.h), built once, as kernels/cuda/registry.cu does
 * for the CUDA kernels. The sources whose values the executor places in
 * memory itself (PARAM, INPUT, STATE) have no row.
 *
 * Unlike the CUDA table there is no wrapper here: every CPU kernel takes
 * f16 and bf16 tensors itself (kernels/cpu/half.c stages those that
 * compute in f32 inside the kernel). */
#include <pthread.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_impl.h"

static tfg_kernel_fn table[TFG_OP_COUNT];
static pthread_once_t built = PTHREAD_ONCE_INIT; /* the devices' threads may be the first to ask */

static void build(void) {
  tfg_cpu_register_init(table);
  tfg_cpu_register_elementwise(table);
  tfg_cpu_register_linalg(table);
  tfg_cpu_register_reduce(table);
  tfg_cpu_register_shape(table);
  tfg_cpu_register_nn(table);
  tfg_cpu_register_attention(table);
  tfg_cpu_register_conv(table);
  tfg_cpu_register_grad(table);
  tfg_cpu_register_optim(table);
  tfg_cpu_register_fused(table);
}

void tfg_cpu_register_rows(tfg_kernel_fn *into, const tfg_cpu_kernel_row *rows, size_t n) {
  for (size_t i = 0; i < n; i++) into[rows[i].op] = rows[i].fn;
}

tfg_kernel_fn tfg_cpu_kernel(int op) {
  pthread_once(&built, build);
  if (op < 0 || op >= TFG_OP_COUNT) return NULL;
  return table[op];
}
