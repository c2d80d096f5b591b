/* kernels/cpu/vmath.h: transcendental functions over whole rows of
 * doubles, vectorized where the C library has vector versions.
 *
 *   double z[256];
 *   ... z[i] = -x[i] * M_SQRT1_2 ...
 *   tfg_vm_erfc(z, z, n);          // in place: z[i] = erfc(z[i])
 *
 * On x86-64 with glibc 2.35 or later these are glibc's libmvec (the
 * vector variants of libm, selected at run time: AVX2 when the CPU has
 * it, else SSE), about 5x faster than a scalar call per element: erfc
 * costs ~21 ns per element one at a time on this project's development
 * machine and ~4.4 ns in AVX2 lanes. libmvec's erfc and exp are within 2
 * ulp in double (glibc's scalar ones within 1), so an f32 result rounded
 * from them is almost always the scalar path's bits; an f64 result may
 * differ from it in the last bit or two. The lanes compute each element
 * alone, so a row's values do not depend on where it is cut into chunks
 * or blocks: fused and unfused kernels that both call these give the
 * same bits. Elsewhere (another CPU or C library) they are plain loops
 * over libm.
 *
 * The switch no_vmath (TFG_VMATH=0, kernels/cpu/config.h) turns the
 * vector variants off (the scalar libm loops run everywhere): for
 * comparing results with and without them. Read once, at the first
 * call. */
#ifndef TFG_CPU_VMATH_H
#define TFG_CPU_VMATH_H

#include <stdint.h>

/* y[i] = erfc(x[i]) for i < n; x may be y. */
void tfg_vm_erfc(const double *x, double *y, int64_t n);
/* y[i] = exp(x[i]) for i < n; x may be y. Arguments below -745.2 give
 * +0 without libmvec's slow path for lanes out of its range (masked
 * attention scores are such arguments). */
void tfg_vm_exp(const double *x, double *y, int64_t n);
/* The gelu rows, in the formulas of kernels/elementwise_math.h
 * (tfg_em_gelu_f32/_f64: x * erfc(-x / sqrt 2) / 2) and of the CPU
 * gelu_grad (dy * (Phi(x) + x phi(x))), with erfc and exp a row at a
 * time in double and rounded once (0.5 ulp). The f32 gelu_grad on AVX2
 * with libmvec takes them in float lanes instead, the float argument's
 * rounding corrected (kernels/cpu/vmath.c): within 3 float ulp of its
 * terms dy Phi and dy x phi (which cancel near gelu's minimum, x =
 * -0.75, where the relative error of the sum grows), at 2.4x the speed;
 * no_vmath gives the double path. x may be y. */
void tfg_vm_gelu_f32(const float *x, float *y, int64_t n);
void tfg_vm_gelu_f64(const double *x, double *y, int64_t n);
void tfg_vm_gelu_grad_f32(const float *x, const float *dy, float *dx, int64_t n);
void tfg_vm_gelu_grad_f64(const double *x, const double *dy, double *dx, int64_t n);
/* Which implementation runs: "libmvec-avx2", "libmvec-sse" or "libm". */
const char *tfg_vm_impl(void);

#endif
