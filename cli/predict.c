/* cli/predict.c: `tfg plan --predict` (cli/predict.h). */
#include "cli/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "compiler/predict.h"
#include "compiler/strategy/strategy.h"
#include "runtime/calibrate.h"
#include "runtime/mpi.h"

/* Whether the host's costs are measured for the plan: when a host
 * device runs some of it, or cpu:0 runs all of it. A plan on sim devices
 * is hypothetical: its cpu:0 (the inputs' slices) keeps the table's
 * numbers, so the prediction is the same on every machine. */
static bool has_host(const tfg_plan *p) {
  bool gpu = false;
  for (int d = 0; d < p->ndev; d++) {
    tfg_device_kind k = tfg_devices_at(p->ds, d)->kind;
    if (k == TFG_DEVICE_HOST && p->dev[d].nsteps > 0) return true;
    gpu |= k == TFG_DEVICE_SIM || k == TFG_DEVICE_CUDA;
  }
  return !gpu;
}

/* Train action a's step time on c's plan (0 when the strategy runs
 * asynchronously: a parameter server has no step of the whole job). */
static double predict_action(const tfg_compiled *c, int a, const tfg_host_costs *host, tfg_strbuf *out) {
  tfg_cost_table t;
  tfg_cost_table_init(&t, c->plan, host);
  if (host) tfg_calibrate_kernels(c->plan, &t);
  if (tfg_mpi_size() > 1) { /* the ring across the job's processes */
    t.ranks = tfg_mpi_size();
    t.net_s = 5e-6;
    if (host) {
      t.net_bw = host->copy_bw; /* host devices: the ranks of one machine, shared memory */
    } else {                    /* GPUs: the slowest of their networks */
      t.net_bw = 0;
      for (int k = 0; k < tfg_devices_gpus(c->ds); k++)
        if (t.net_bw == 0 || tfg_devices_gpu(c->ds, k)->net_bw < t.net_bw) t.net_bw = tfg_devices_gpu(c->ds, k)->net_bw;
      if (t.net_bw <= 0) t.net_bw = 25e9;
    }
  }
  tfg_prediction r;
  tfg_predict(c->plan, &t, &c->steps[a], &r);
  if (out) tfg_prediction_print(c->plan, &t, &r, out);
  double s = r.step_s;
  tfg_prediction_free(&r);
  tfg_cost_table_free(&t);
  return s;
}

/* The --devices spec of k devices like the GPU entries of ds, when they
 * are all host devices or all one sim model; false otherwise. Sim
 * devices in nodes of c stay in nodes: k <= c on one node, a multiple of
 * c as whole nodes (sim:h100*8x2 for 16 of 8x4), any other k false. */
static bool spec_for(const tfg_devices *ds, int k, char *buf, size_t n) {
  const tfg_device *g0 = tfg_devices_gpu(ds, 0);
  if (!g0) return false;
  for (int i = 1; i < tfg_devices_gpus(ds); i++) {
    const tfg_device *g = tfg_devices_gpu(ds, i);
    if (g->kind != g0->kind || strcmp(g->hardware, g0->hardware) != 0) {
      if (!(g->kind == TFG_DEVICE_HOST && g0->kind == TFG_DEVICE_HOST)) return false;
    }
  }
  int per = 0; /* devices on the first node */
  for (int i = 0; i < tfg_devices_gpus(ds); i++) per += tfg_devices_gpu(ds, i)->node == g0->node;
  if (g0->kind == TFG_DEVICE_HOST) snprintf(buf, n, "host*%d", k);
  else if (g0->kind == TFG_DEVICE_SIM && (tfg_devices_nodes(ds) < 2 || k <= per))
    snprintf(buf, n, "%.32s*%d", g0->hardware, k); /* "sim:h100" */
  else if (g0->kind == TFG_DEVICE_SIM && k % per == 0)
    snprintf(buf, n, "%.32s*%dx%d", g0->hardware, per, k / per);
  else return false;
  return true;
}

/* The scaling table of train action a (mirrored() over every GPU entry):
 * the program built again for 1..N devices, each predicted. */
static void scaling(const cli_opts *o, const tfg_compiled *c, int a, const tfg_source *src, const tfg_ast *ast,
                    const tfg_interp_opts *io, const tfg_host_costs *host, tfg_strbuf *out) {
  int N = tfg_devices_gpus(c->ds);
  char spec[64];
  if (N < 2 || !spec_for(c->ds, 1, spec, sizeof spec)) return;
  tfg_strbuf_printf(out, "scaling: mirrored() over 1..%d replicas, the global batch fixed%s\n", N,
                    tfg_devices_nodes(c->ds) > 1 ? " (past one node, whole nodes)" : "");
  tfg_strbuf_printf(out, "%8s %11s %9s %11s\n", "replicas", "step", "speed-up", "efficiency");
  double one = 0;
  for (int k = 1; k <= N; k++) {
    if (!spec_for(c->ds, k, spec, sizeof spec)) continue; /* not whole nodes */
    cli_opts ok = *o;
    ok.devices = spec;
    tfg_diag *dk = tfg_diag_new(); /* a k the batch does not split over is left out, quietly */
    tfg_interp *I = tfg_interp_new(dk, io);
    tfg_status st = tfg_interp_eval(I, src, ast);
    if (st == TFG_OK) st = tfg_interp_finish(I);
    double s = 0;
    if (st == TFG_OK) {
      cli_compiled ck;
      if (cli_compile(&ok, tfg_interp_program(I), dk, &ck) == 0) s = predict_action(&ck, a, host, NULL);
      cli_compiled_free(&ck);
    }
    tfg_interp_free(I);
    tfg_diag_free(dk);
    if (k == 1) one = s;
    if (s <= 0) {
      tfg_strbuf_printf(out, "%8d %11s %9s %11s  (the batch does not split over %d)\n", k, "-", "-", "-", k);
      continue;
    }
    char cell[32];
    if (s < 1e-3) snprintf(cell, sizeof cell, "%.0f us", s * 1e6);
    else snprintf(cell, sizeof cell, "%.2f ms", s * 1e3);
    if (one > 0) tfg_strbuf_printf(out, "%8d %11s %8.2fx %10.0f%%\n", k, cell, one / s, 100 * one / (k * s));
    else tfg_strbuf_printf(out, "%8d %11s %9s %11s\n", k, cell, "-", "-");
  }
}

int cli_predict(const cli_opts *o, tfg_program *p, const tfg_source *src, const tfg_ast *ast,
                const tfg_interp_opts *io, tfg_diag *d) {
  cli_compiled c;
  int rc = cli_compile(o, p, d, &c);
  if (rc != 0) {
    cli_compiled_free(&c);
    return rc;
  }
  tfg_host_costs host;
  bool measured = has_host(c.plan);
  if (measured) tfg_calibrate_host(o->threads, &host);
  tfg_strbuf out = {0};
  int trains = 0;
  for (int a = 0; a < p->nactions; a++) {
    const tfg_action *act = &p->actions[a];
    if (act->kind != TFG_ACTION_TRAIN) continue;
    trains++;
    tfg_strbuf_printf(&out, "%strain at %s:%u\n", trains > 1 ? "\n" : "",
                      act->loc.src ? tfg_path_base(act->loc.src->name) : "?", act->loc.line);
    const tfg_strategy_i *si = tfg_strategy_lookup(&act->config.strategy);
    if (si->not_predicted) {
      tfg_strbuf_printf(&out, "not predicted: %s\n", si->not_predicted);
      continue;
    }
    if (c.steps[a].ranks > 1) { /* each rank plans its stages alone: its waits for the others are not in its plan */
      tfg_strbuf_printf(&out, "not predicted: the pipeline spans the job's %d ranks, each planning only its own stages; "
                              "predict it in one process over as many devices (tfg plan --predict --devices host*%d)\n",
                        c.steps[a].ranks, c.steps[a].pipe.devices);
      continue;
    }
    predict_action(&c, a, measured ? &host : NULL, &out);
    bool all = si->spans_gpus(&act->config.strategy);
    if (all) scaling(o, &c, a, src, ast, io, measured ? &host : NULL, &out);
  }
  if (trains == 0) tfg_strbuf_puts(&out, "nothing to predict: the program has no train\n");
  if (tfg_mpi_rank() == 0) fwrite(out.data, 1, out.len, stdout); /* rank 0 for the job */
  tfg_strbuf_free(&out);
  cli_compiled_free(&c);
  return 0;
}
