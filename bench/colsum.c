/* bench/colsum.c: the CPU column reduction (a bias gradient: `sum` over
 * every leading axis of x[R, n] to [n]) against memory speed.
 *
 * Times tfg_cpu_reduce on f32 inputs of a few shapes (bias gradients of
 * a small GPT: [B*T, d], [B*T, 4d]; few and many columns) with a pool of
 * THREADS threads (default 2, or argv[1]), against a plain pass that
 * reads the same bytes (a 4-way unrolled sum of every element, split
 * over the same pool): the read bandwidth the machine gives such a loop.
 * Prints the median of RUNS runs of each, timed alternately after WARMUP
 * runs, in µs and GB/s of input read. A benchmark, not a test; it checks
 * the first column against a double sum.
 *
 *   make CUDA=0 build/bench/colsum && build/bench/colsum 2
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "bench/bench.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

#define WARMUP 3
#define RUNS 21

typedef struct readjob {
  const float *x;
  double *part;
} readjob;

/* The reference read: every element of chunk k summed into part[k]. */
static void read_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  readjob *j = arg;
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = lo;
  for (; i + 4 <= hi; i += 4) {
    s0 += j->x[i];
    s1 += j->x[i + 1];
    s2 += j->x[i + 2];
    s3 += j->x[i + 3];
  }
  for (; i < hi; i++) s0 += j->x[i];
  j->part[k] = (double)(s0 + s1) + (double)(s2 + s3);
}

int main(int argc, char **argv) {
  bench_switches(); /* TFG_* as `tfg run` reads them (TFG_GEMM_SPLIT, TFG_VMATH) */
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  static const int64_t shapes[][2] = {{1024, 256}, {1024, 1024}, {8192, 256}, {65536, 3}, {64, 16384}, {4096, 1}};
  tfg_pool *pool = tfg_pool_new(threads);
  tfg_kernel_ctx ctx = {.pool = pool};
  printf("column sums x[R, n] -> [n], f32, %d threads, median of %d (us; GB/s of input)\n", threads, RUNS);
  printf("%-14s %12s %12s %12s\n", "shape", "tfg sum", "read pass", "ratio");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t R = shapes[s][0], n = shapes[s][1], nin = R * n;
    float *x = malloc((size_t)nin * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double *part = malloc(64 * sizeof *part);
    for (int64_t i = 0; i < nin; i++) x[i] = (float)(2 * tfg_rng_uniform(7, (uint64_t)i) - 1);
    tfg_tensor in = {.data = x, .dtype = TFG_DTYPE_F32, .shape = {2, {R, n}}};
    tfg_tensor out = {.data = y, .dtype = TFG_DTYPE_F32, .shape = {1, {n}}};
    tfg_node node;
    memset(&node, 0, sizeof node);
    node.op = TFG_OP_SUM;
    node.dtype = TFG_DTYPE_F32;
    node.shape = out.shape;
    node.ninputs = 1;
    node.attrs.axes = 1u;
    readjob rj = {.x = x, .part = part};
    int64_t grain = nin / threads + 1;
    double tk[RUNS], tr[RUNS];
    for (int r = 0; r < WARMUP + RUNS; r++) {
      double t0 = bench_now();
      if (tfg_cpu_reduce(&ctx, &node, &in, &out) != TFG_OK) {
        fprintf(stderr, "colsum bench: %s\n", ctx.err.data ? ctx.err.data : "failed");
        return 1;
      }
      double t1 = bench_now();
      tfg_parallel_for(pool, nin, grain < 4096 ? 4096 : grain, read_chunk, &rj);
      double t2 = bench_now();
      if (r >= WARMUP) {
        tk[r - WARMUP] = t1 - t0;
        tr[r - WARMUP] = t2 - t1;
      }
    }
    double want = 0;
    for (int64_t i = 0; i < R; i++) want += x[i * n];
    if (fabs((double)y[0] - want) > 1e-5 * (1 + fabs(want))) {
      fprintf(stderr, "colsum bench: column 0 is %g, want %g\n", (double)y[0], want);
      return 1;
    }
    double mk = bench_median(tk, RUNS), mr = bench_median(tr, RUNS), bytes = (double)nin * 4;
    char name[32];
    snprintf(name, sizeof name, "[%lld, %lld]", (long long)R, (long long)n);
    printf("%-14s %7.1f %4.1f %7.1f %4.1f %12.2f\n", name, mk * 1e6, bytes / mk * 1e-9, mr * 1e6, bytes / mr * 1e-9,
           mk / mr);
    free(x);
    free(y);
    free(part);
  }
  tfg_pool_free(pool);
  return 0;
}
