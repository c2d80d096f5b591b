/* bench/place_scale.c: how placing a graph grows with its size.
 *
 * Builds programs of about 1,000, 10,000 and 100,000 ops (a stack of
 * dense layers, each a param, a matmul, an add and a relu, in 4 parallel
 * towers joined at the end) through the interpreter, then times placing
 * and planning them on 4 host devices with the compile driver
 * (tfg_compile_graph: placed once, params counted, not activations) and
 * prints per size the placing and the planning time (split where the
 * driver's PLACE stage ends; median of 5 runs each) and their sum per op.
 * The target: placing and planning 10,000 ops under 0.5 s.
 *
 *   make build/bench/place_scale && build/bench/place_scale
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "compiler/compile.h"
#include "lang/interp.h"
#include "lang/parse.h"
#include "runtime/device.h"

/* The driver's hook: when placement ended (ctx: a double). */
static void stage_time(void *ctx, tfg_compile_stage stage, const tfg_compiled *c) {
  (void)c;
  if (stage == TFG_COMPILE_PLACE) *(double *)ctx = bench_now();
}

int main(void) {
  bench_switches(); /* TFG_* as `tfg run` reads them (TFG_GEMM_SPLIT, TFG_VMATH) */
  const int layers[] = {62, 625, 6250}; /* x 4 towers x 4 ops */
  printf("place_scale: 4 towers of dense layers on host*4, median of 5 runs\n");
  for (size_t s = 0; s < sizeof layers / sizeof layers[0]; s++) {
    tfg_strbuf text = {0};
    tfg_strbuf_puts(&text, "x = normal([8, 16], seed = 1)\n");
    for (int t = 0; t < 4; t++) {
      tfg_strbuf_printf(&text, "h%d = x\nfor i in 0..%d {\n  param w: f32[16, 16] = glorot()\n  param b: f32[16]\n"
                               "  h%d = relu(matmul(h%d, w) + b)\n}\n", t, layers[s], t, t);
    }
    tfg_strbuf_puts(&text, "print h0 + h1 + h2 + h3\n");
    tfg_diag *d = tfg_diag_new();
    tfg_arena arena;
    tfg_arena_init(&arena);
    const tfg_source *src = tfg_diag_add_source(d, "scale.tfg", text.data, text.len);
    tfg_ast *ast = NULL;
    tfg_interp *in = tfg_interp_new(d, NULL);
    double t0 = bench_now();
    if (tfg_parse(src, d, &arena, &ast, NULL) != TFG_OK || tfg_interp_eval(in, src, ast) != TFG_OK) {
      tfg_diag_render(d, stderr, false);
      return 1;
    }
    double t_build = bench_now() - t0;
    tfg_program *p = tfg_interp_program(in);
    tfg_devices *ds = NULL;
    if (tfg_devices_parse(d, "host*4:1G", &ds) != TFG_OK) return 1;
    double times[5], ptimes[5];
    for (int r = 0; r < 5; r++) {
      tfg_compiled c;
      double a = bench_now(), placed = a;
      tfg_compile_opts o = {.done = stage_time, .ctx = &placed};
      if (tfg_compile_graph(p->graph, ds, NULL, 0, &o, d, &c) != TFG_OK) return 1;
      ptimes[r] = bench_now() - placed;
      times[r] = placed - a;
      tfg_compiled_free(&c);
    }
    qsort(times, 5, sizeof times[0], bench_cmp_double);
    qsort(ptimes, 5, sizeof ptimes[0], bench_cmp_double);
    int32_t n = p->graph->nnodes;
    printf("  %7d ops: build %.3f s, place %.4f s, plan %.4f s, place+plan %.2f us/op\n", n, t_build, times[2], ptimes[2],
           1e6 * (times[2] + ptimes[2]) / n);
    tfg_devices_free(ds);
    tfg_interp_free(in);
    tfg_arena_free(&arena);
    tfg_diag_free(d);
    tfg_strbuf_free(&text);
  }
  return 0;
}
