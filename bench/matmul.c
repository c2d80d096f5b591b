/* bench/matmul.c: the cost of tfg's matmul kernel over OpenBLAS itself.
 *
 * Times a 1024 x 1024 x 1024 f32 product through tfg_cpu_matmul (OpenBLAS
 * on one thread per block, the blocks on tfg's kernel pool:
 * kernels/cpu/blas.h) and the same cblas_sgemm call made directly with as
 * many OpenBLAS threads, on the same inputs, and a whole program run (`c = matmul(a, b)`
 * built by the interpreter, run by a session: output allocation and the
 * fetch copy included), and prints the median of RUNS runs of each,
 * GFLOP/s and the ratio tfg / direct (1.00 means the kernel adds
 * nothing). The two are timed alternately after WARMUP runs each, so
 * drift in clock speed or load falls on both alike. A benchmark, not a
 * test: it checks only that both agree within the rounding of a
 * 1024-term dot product (2 K u relative to the sum of |a b|: the two
 * split the product differently, so their last bits may differ).
 *
 *   make BUILD=build/k2 build/k2/bench/matmul && build/k2/bench/matmul
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "base/rng.h"
#include "lang/interp.h"
#include "lang/parse.h"
#include "runtime/session.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

#define DIM 1024
#define WARMUP 3
#define RUNS 15

int main(void) {
  tfg_switches sw = bench_switches(); /* TFG_* as `tfg run` reads them */
  const size_t n = (size_t)DIM * DIM;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  float *c_tfg = malloc(n * sizeof *c_tfg), *c_blas = malloc(n * sizeof *c_blas);
  if (!a || !b || !c_tfg || !c_blas) {
    fprintf(stderr, "matmul bench: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)(2 * tfg_rng_uniform(1, i) - 1);
    b[i] = (float)(2 * tfg_rng_uniform(2, i) - 1);
  }

  int threads = tfg_cpu_blas_default_threads();
  /* The pool a runtime would pass: tfg's side splits the product over
   * it; the direct call gets as many OpenBLAS threads. */
  tfg_pool *pool = tfg_pool_new(threads);
  tfg_kernel_ctx ctx = {.pool = pool};
  tfg_tensor in[2] = {
      {.data = a, .dtype = TFG_DTYPE_F32, .shape = {2, {DIM, DIM}}},
      {.data = b, .dtype = TFG_DTYPE_F32, .shape = {2, {DIM, DIM}}},
  };
  tfg_tensor out = {.data = c_tfg, .dtype = TFG_DTYPE_F32, .shape = {2, {DIM, DIM}}};
  tfg_node node;
  memset(&node, 0, sizeof node);
  node.op = TFG_OP_MATMUL;
  node.dtype = TFG_DTYPE_F32;
  node.shape = out.shape;
  node.ninputs = 2;

  /* The same product as a program: params a and b, fetch c. */
  static const char prog_text[] = "param a: f32[1024, 1024] = uniform(-1, 1)\n"
                                  "param b: f32[1024, 1024] = uniform(-1, 1)\n"
                                  "c = matmul(a, b)\n";
  tfg_diag *d = tfg_diag_new();
  tfg_arena arena;
  tfg_arena_init(&arena);
  const tfg_source *src = tfg_diag_add_source(d, "bench.tfg", prog_text, sizeof prog_text - 1);
  tfg_ast *ast = NULL;
  tfg_interp *interp = tfg_interp_new(d, NULL);
  if (tfg_parse(src, d, &arena, &ast, NULL) != TFG_OK || tfg_interp_eval(interp, src, ast) != TFG_OK) {
    tfg_diag_render(d, stderr, false);
    return 1;
  }
  const tfg_program *prog = tfg_interp_program(interp);
  tfg_session_opts so = {.threads = threads, .sw = sw};
  tfg_session *sess = tfg_session_new(prog, d, &so);
  tfg_node_id c_id = prog->graph->nnodes - 1;
  double t_tfg[RUNS], t_blas[RUNS], t_run[RUNS];
  for (int r = -WARMUP; r < RUNS; r++) {
    double t0 = bench_now();
    tfg_status st = tfg_cpu_matmul(&ctx, &node, in, &out);
    double t1 = bench_now();
    tfg_tensor got;
    tfg_status st_run = sess ? tfg_session_run(sess, &c_id, 1, &got) : TFG_ERR_DEVICE;
    double t2 = bench_now();
    /* tfg pins OpenBLAS to one thread; the direct call gets them all
     * back, outside the timed spans */
    openblas_set_num_threads(threads);
    double t3 = bench_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, DIM, DIM, DIM, 1.0f, a, DIM, b, DIM,
                0.0f, c_blas, DIM);
    double t4 = bench_now();
    /* OpenBLAS's idle workers spin on sched_yield for ~2^28 cycles
     * before they sleep; let them sleep before tfg's side runs again */
    openblas_set_num_threads(1);
    nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
    if (st != TFG_OK || st_run != TFG_OK) {
      fprintf(stderr, "matmul bench: a run failed: %s\n", ctx.err.data ? ctx.err.data : "");
      tfg_diag_render(d, stderr, false);
      return 1;
    }
    if (r >= 0) {
      t_tfg[r] = t1 - t0;
      t_run[r] = t2 - t1;
      t_blas[r] = t4 - t3;
    }
  }
  /* |a b| terms are at most 1, so sum |a b| <= K: bound 2 K u K */
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)c_tfg[i] - (double)c_blas[i]);
    if (e > worst) worst = e;
  }
  int same = worst <= 2.0 * DIM * 0x1p-24 * DIM;
  tfg_session_free(sess);
  tfg_interp_free(interp);
  tfg_arena_free(&arena);
  tfg_diag_free(d);

  double flop = 2.0 * DIM * DIM * DIM;
  double mt = bench_median(t_tfg, RUNS), mb = bench_median(t_blas, RUNS);
  printf("matmul f32 %dx%dx%d, OpenBLAS %s, %d threads, %d warm-up + median of %d runs each\n",
         DIM, DIM, DIM, openblas_get_corename(), threads, WARMUP, RUNS);
  printf("  tfg_cpu_matmul  %8.3f ms  %7.1f GFLOP/s\n", 1e3 * mt, flop / mt * 1e-9);
  printf("  cblas_sgemm     %8.3f ms  %7.1f GFLOP/s\n", 1e3 * mb, flop / mb * 1e-9);
  double mr = bench_median(t_run, RUNS);
  printf("  tfg session run %8.3f ms  %7.1f GFLOP/s  (a whole program run)\n", 1e3 * mr, flop / mr * 1e-9);
  printf("  ratio kernel/direct %.3f   largest difference %.3g (%s)\n", mt / mb, worst,
         same ? "within rounding" : "TOO LARGE");
  printf("  ratio run/direct    %.3f\n", mr / mb);

  tfg_strbuf_free(&ctx.err);
  tfg_pool_free(pool);
  free(a);
  free(b);
  free(c_tfg);
  free(c_blas);
  return same ? 0 : 1;
}
