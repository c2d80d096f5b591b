/* bench/rowops.c: the CPU's row-wise and transcendental kernels of a GPT
 * step against memory speed.
 *
 * Times each kernel, f32, at the shapes of bench/train_gpt.sh's default
 * GPT (d 256, 4 heads, T 128, batch 8: 1024 token rows), through
 * tfg_cpu_kernel with a pool of THREADS threads (default 2, or argv[1]):
 *   softmax [8, 4, 128, 128] over the last axis, the causal half of each
 *     row at -1e9 as the masked scores are;
 *   layer_norm and layer_norm_grad [1024, 256];
 *   gelu and gelu_grad [1024, 1024] (the MLP's hidden layer);
 *   cross_entropy and its gradient over [1024, 256] logits.
 * Against each: a copy of the same bytes (every input read, the output
 * written) split over the same pool, the speed such a pass gets here.
 * Prints the median of RUNS runs of each, timed alternately after WARMUP
 * runs: µs, ns per output element, and the ratio to the copy (1.0 would
 * be memory speed). A benchmark, not a test: it checks nothing but that
 * the kernels run.
 *
 *   make CUDA=0 build/bench/rowops && build/bench/rowops 2
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "bench/bench.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

#define WARMUP 3
#define RUNS 21
#define MAXIN 3

typedef struct copyjob {
  const float *src[MAXIN];
  int nsrc;
  float *dst;
} copyjob;

/* The reference pass: dst = the sum of the inputs, element by element
 * (every input byte read, every output byte written once). */
static void copy_chunk(void *arg, int64_t lo, int64_t hi, int64_t k) {
  copyjob *j = arg;
  (void)k;
  memcpy(j->dst + lo, j->src[0] + lo, (size_t)(hi - lo) * sizeof(float));
  for (int s = 1; s < j->nsrc; s++)
    for (int64_t i = lo; i < hi; i++) j->dst[i] += j->src[s][i];
}

typedef struct rowcase {
  const char *name;
  int op;
  tfg_shape in[MAXIN];
  tfg_dtype dt[MAXIN];
  int nin;
  tfg_shape out;
} rowcase;

#define F32 TFG_DTYPE_F32
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}

int main(int argc, char **argv) {
  bench_switches(); /* TFG_* as `tfg run` reads them (TFG_GEMM_SPLIT, TFG_VMATH) */
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  const rowcase cases[] = {
      {"softmax", TFG_OP_SOFTMAX, {{4, {8, 4, 128, 128}}}, {F32}, 1, {4, {8, 4, 128, 128}}},
      {"layer_norm", TFG_OP_LAYER_NORM, {S2(1024, 256), S1(256), S1(256)}, {F32, F32, F32}, 3, S2(1024, 256)},
      {"layer_norm_grad", TFG_OP_LAYER_NORM_GRAD, {S2(1024, 256), S1(256), S2(1024, 256)}, {F32, F32, F32}, 3,
       S2(1024, 256)},
      {"gelu", TFG_OP_GELU, {S2(1024, 1024)}, {F32}, 1, S2(1024, 1024)},
      {"gelu_grad", TFG_OP_GELU_GRAD, {S2(1024, 1024), S2(1024, 1024)}, {F32, F32}, 2, S2(1024, 1024)},
      {"cross_entropy", TFG_OP_CROSS_ENTROPY, {S2(1024, 256), S1(1024)}, {F32, TFG_DTYPE_I32}, 2, {0, {0}}},
      {"cross_entropy_grad", TFG_OP_CROSS_ENTROPY_GRAD, {S2(1024, 256), S1(1024), {0, {0}}},
       {F32, TFG_DTYPE_I32, F32}, 3, S2(1024, 256)},
  };
  tfg_pool *pool = tfg_pool_new(threads);
  tfg_kernel_ctx ctx = {.pool = pool};
  printf("row-wise kernels, f32, %d threads, median of %d (a copy: the same bytes read and written)\n", threads,
         RUNS);
  printf("%-20s %16s %10s %10s %8s\n", "kernel", "shape", "tfg us", "copy us", "ratio");
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const rowcase *rc = &cases[c];
    tfg_tensor in[MAXIN];
    copyjob cj = {.nsrc = 0};
    int64_t nout = tfg_shape_numel(&rc->out);
    for (int k = 0; k < rc->nin; k++) {
      int64_t n = tfg_shape_numel(&rc->in[k]);
      in[k] = (tfg_tensor){.dtype = rc->dt[k], .shape = rc->in[k], .data = malloc((size_t)n * 4)};
      for (int64_t i = 0; i < n; i++) {
        double u = tfg_rng_uniform((uint64_t)(11 + k), (uint64_t)i);
        if (rc->dt[k] == TFG_DTYPE_I32)
          ((int32_t *)in[k].data)[i] = (int32_t)(u * 256);
        else
          ((float *)in[k].data)[i] = (float)(6 * u - 3);
      }
      /* the masked scores: the future half of each row of the softmax */
      if (rc->op == TFG_OP_SOFTMAX)
        for (int64_t i = 0; i < n; i++)
          if (i % 128 > (i / 128) % 128) ((float *)in[k].data)[i] = -1e9f;
      if (rc->dt[k] == F32 && n == nout && cj.nsrc < MAXIN) cj.src[cj.nsrc++] = in[k].data;
    }
    if (cj.nsrc == 0) { /* a scalar output (cross_entropy): its read is the pass */
      cj.src[cj.nsrc++] = in[0].data;
      nout = tfg_shape_numel(&rc->in[0]);
    }
    tfg_tensor out = {.dtype = F32, .shape = rc->out, .data = malloc((size_t)(nout > 0 ? nout : 1) * 4)};
    cj.dst = malloc((size_t)nout * 4);
    tfg_node node;
    memset(&node, 0, sizeof node);
    node.op = rc->op;
    node.dtype = F32;
    node.shape = rc->out;
    node.ninputs = rc->nin;
    node.attrs.axis = rc->op == TFG_OP_SOFTMAX ? 3 : 0;
    node.attrs.value = rc->op == TFG_OP_LAYER_NORM || rc->op == TFG_OP_LAYER_NORM_GRAD ? 1e-5 : 0;
    tfg_kernel_fn fn = tfg_cpu_kernel(rc->op);
    double tk[RUNS], tc[RUNS];
    for (int r = 0; r < WARMUP + RUNS; r++) {
      double t0 = bench_now();
      if (!fn || fn(&ctx, &node, in, &out) != TFG_OK) {
        fprintf(stderr, "rowops bench: %s: %s\n", rc->name, ctx.err.data ? ctx.err.data : "no kernel");
        return 1;
      }
      double t1 = bench_now();
      tfg_parallel_for(pool, nout, 1 << 14, copy_chunk, &cj);
      double t2 = bench_now();
      if (r >= WARMUP) {
        tk[r - WARMUP] = t1 - t0;
        tc[r - WARMUP] = t2 - t1;
      }
    }
    double mk = bench_median(tk, RUNS), mc = bench_median(tc, RUNS);
    char shape[48] = "[";
    for (int d = 0; d < rc->in[0].rank; d++)
      snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
               (long long)rc->in[0].dim[d]);
    strcat(shape, "]");
    printf("%-20s %16s %10.1f %10.1f %8.2f\n", rc->name, shape, mk * 1e6, mc * 1e6, mk / mc);
    for (int k = 0; k < rc->nin; k++) free(in[k].data);
    free(out.data);
    free(cj.dst);
  }
  tfg_strbuf_free(&ctx.err);
  tfg_pool_free(pool);
  return 0;
}
