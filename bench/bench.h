/* bench/bench.h: what the C benchmarks share: the TFG_* switches, a
 * monotonic clock and the median of a set of timings. */
#ifndef TFG_BENCH_H
#define TFG_BENCH_H

#include <stdlib.h>
#include <time.h>

#include "base/switches.h"
#include "cli/switches.h"
#include "kernels/cpu/config.h"

/* The TFG_* switches, read as `tfg run` reads them (cli/switches.h, which
 * the Makefile links into every benchmark), and the CPU kernels'
 * process-wide part of them set (kernels/cpu/config.h): first thing in
 * main, so that TFG_GEMM_SPLIT=0 or TFG_VMATH=0 compares here too. The
 * rest is for the benchmark's option structs. */
static inline tfg_switches bench_switches(void) {
  tfg_switches sw;
  cli_switches_from_env(&sw);
  tfg_cpu_config_set(&sw);
  return sw;
}

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
