/* kernels/cpu/config.h: the CPU kernels' two process-wide choices, set
 * once by the program before any kernel runs.
 *
 *   tfg_switches sw;
 *   cli_switches_from_env(&sw);    // cli/main.c, at start-up
 *   tfg_cpu_config_set(&sw);       // reads no_vmath and no_gemm_split
 *
 * Why a setter and not a field of the kernel context like every other
 * switch (base/switches.h): both choices belong to the process, not to a
 * run. no_gemm_split decides how tfg shares OpenBLAS's thread count, a
 * setting of the whole process (openblas_set_num_threads), between
 * products (kernels/cpu/blas.h); no_vmath picks the implementation of
 * the rows of exp and erfc once (kernels/cpu/vmath.h), and those rows
 * run inside the pool's job bodies of a dozen kernels, which see no
 * context. Two values at once in one process would have no meaning.
 * This is the one setter of the switches (docs/architecture.md); a
 * program that never calls it gets the defaults (the unit tests). */
#ifndef TFG_CPU_CONFIG_H
#define TFG_CPU_CONFIG_H

#include "base/switches.h"

/* Keeps sw's no_vmath and no_gemm_split for the CPU kernels. Must come
 * before the first CPU kernel or product runs, which reads them once for
 * the process: a later call is a bug (asserted). */
void tfg_cpu_config_set(const tfg_switches *sw);

/* The switches set (zero, the defaults, when none were), from now on
 * fixed for the process. For kernels/cpu/blas.c and vmath.c. */
const tfg_switches *tfg_cpu_config_get(void);

#endif
