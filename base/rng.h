/* base/rng.h: counter-based random numbers.
 *
 * Value i of a stream is a pure function of (seed, i), so initializers
 * and dropout masks are identical whatever the thread count, the device
 * or the order of evaluation: the same program gives the same numbers on
 * one CPU or on eight GPUs. The mixer is splitmix64 (Vigna), applied
 * twice to separate nearby seeds and counters. */
#ifndef TFG_RNG_H
#define TFG_RNG_H

#include <math.h>
#include <stdint.h>

/* The same functions serve CUDA kernels (kernels/cuda), so a device
 * draws the very numbers the CPU does. */
#ifdef __CUDACC__
#define TFG_RNG_FN static inline __host__ __device__
#else
#define TFG_RNG_FN static inline
#endif

TFG_RNG_FN uint64_t tfg_rng_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* 64 random bits for element i of stream seed. */
TFG_RNG_FN uint64_t tfg_rng_bits(uint64_t seed, uint64_t i) {
  return tfg_rng_mix(tfg_rng_mix(seed) ^ i);
}

/* Uniform in [0, 1) with 53 random bits. */
TFG_RNG_FN double tfg_rng_uniform(uint64_t seed, uint64_t i) {
  return (double)(tfg_rng_bits(seed, i) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller on two uniforms of a derived stream). */
TFG_RNG_FN double tfg_rng_normal(uint64_t seed, uint64_t i) {
  double u1 = tfg_rng_uniform(seed, 2 * i), u2 = tfg_rng_uniform(seed, 2 * i + 1);
  if (u1 < 0x1.0p-60) u1 = 0x1.0p-60; /* log(0) guard */
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* The stream of a dropout mask: the op's seed, the train action's seed and
 * the step, so every step draws a new mask, reproducibly, and the gradient
 * (the same op applied to dy) draws the same one. */
TFG_RNG_FN uint64_t tfg_rng_dropout_stream(uint64_t op_seed, uint64_t run_seed, int64_t step) {
  return tfg_rng_mix(op_seed ^ tfg_rng_mix(run_seed ^ tfg_rng_mix((uint64_t)step)));
}

#endif
