/* compiler/strategy/parallel.c: parallel(data, tensor, pipeline)
 * (LANGUAGE.md 6.1), data parallelism over replicas of a pipeline.
 *
 * Stages. The loss's forward cone is cut into V = pipeline * chunks
 * contiguous stages in program order (node ids; a metric's own ops go
 * with the latest stage they read): an op the program
 * pinned to gpu:K is in stage K; elsewhere the cuts minimise the slowest
 * stage, each stage's cost being its ops' (FLOPs and bytes, the
 * roofline's terms) plus the bytes it sends to the next (a dynamic
 * program over the cut points). A node with no inputs (a param, a
 * constant) goes with the first stage that reads it. Stage s of replica
 * r runs on gpu:(r * pipeline + s % pipeline), as Megatron-LM lays ranks
 * out with tensor = 1.
 *
 * Micro-batches. Each replica's rows of the global batch are split into
 * M = micro_batches equal blocks; the cone is cloned once per
 * micro-batch and replica (compiler/strategy/replicate.h: clone q is
 * micro-batch q % M of replica q / M), every clone reading its replica's
 * params; autodiff of each clone's loss, divided by M (its share of the
 * step: tfg_autodiff_part), lands on the stages of the forward nodes it
 * differentiates. Each param's gradient is the sum of the shares, in
 * micro-batch order where the param is (tfg_autodiff_micro_sum); then
 * data parallelism's accumulate,
 * all-reduce and updates, as mirrored's. One optimizer step per step.
 *
 * Schedule. Every node the rewrite adds belongs to a unit (the forward
 * or backward of a micro-batch on a stage: clones by their cone node's
 * stage, gradients by the stage of the forward node they were made for)
 * or comes before them all (the batch's slices, mirrors) or after them
 * all (all-reduce, clipping, updates); a node of neither kind takes the
 * latest unit it reads. The nodes are renumbered in the order of their
 * units' start under the schedule (compiler/strategy/schedule.h), which
 * is the order the planner sweeps.
 *
 * Under mpirun, data * pipeline is the job's GPUs. A rank that holds
 * whole pipelines takes its share of the replicas (the batch's rows and
 * the all-reduce span the ranks, as mirrored's); a pipeline longer than a
 * rank's GPUs (data = 1) is built here whole, as one process over the
 * job's GPUs, and split by the compile driver (compiler/ranks.h). */
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/strategy/replicate.h"
#include "compiler/strategy/schedule.h"
#include "compiler/strategy/strategy.h"
#include "ir/ops.h"

/* ---- reading the setting ------------------------------------------------------ */

/* Argument name of s: an int of at least 1, else an error at it. */
static bool factor(const tfg_strategy_config *s, const char *name, int *out, tfg_diag *d) {
  const tfg_devarg *v = tfg_strategy_config_arg(s, name);
  if (v->kind != TFG_DEVARG_INT || v->i < 1 || v->i > TFG_MAX_DEVICE_INDEX + 1) {
    tfg_diag_error(d, &s->loc, "parallel: %s must be an integer from 1 to %d, got %s", name, TFG_MAX_DEVICE_INDEX + 1,
                   v->kind == TFG_DEVARG_INT ? "a number out of range" : tfg_replicate_arg_what(v));
    tfg_diag_help(d, "for example parallel(data = 2, pipeline = 2)");
    return false;
  }
  *out = (int)v->i;
  return true;
}

/* The GPUs parallel(...) spreads over: data * tensor * pipeline (0 when
 * an argument is not a count: its read reports it). */
static int parallel_gpus(const tfg_strategy_config *s) {
  int64_t n = 1;
  const char *names[] = {"data", "tensor", "pipeline"};
  for (int k = 0; k < 3; k++) {
    const tfg_devarg *v = tfg_strategy_config_arg(s, names[k]);
    if (v->kind != TFG_DEVARG_INT || v->i < 1 || v->i > TFG_MAX_DEVICE_INDEX + 1) return 0;
    n *= v->i;
  }
  return n <= TFG_MAX_DEVICE_INDEX + 1 ? (int)n : 0;
}

static tfg_status parallel_read(const tfg_strategy_config *s, tfg_strategy *out, tfg_diag *d) {
  int D, T, P;
  if (!factor(s, "data", &D, d) || !factor(s, "tensor", &T, d) || !factor(s, "pipeline", &P, d)) return TFG_ERR_NAME;
  if (T > 1) {
    tfg_diag_error(d, &s->loc, "parallel: tensor = %d: tensor parallelism is not available in this version", T);
    tfg_diag_help(d, "use tensor = 1: data and pipeline parallelism are");
    return TFG_ERR_NAME;
  }
  if ((int64_t)D * P > TFG_MAX_DEVICE_INDEX + 1) {
    tfg_diag_error(d, &s->loc, "parallel: data * pipeline = %" PRId64 " GPUs, more than the %d a run may have",
                   (int64_t)D * P, TFG_MAX_DEVICE_INDEX + 1);
    return TFG_ERR_NAME;
  }
  int ranks = s->ranks > 1 ? s->ranks : 1, G = s->gpus; /* gpus is 0 before the devices are known (tfg check) */
  if (G > 0 && ranks == 1 && D * P != G) {
    tfg_diag_error(d, &s->loc, "parallel(data = %d, pipeline = %d) needs %d GPU%s, but the run has %d", D, P, D * P,
                   D * P == 1 ? "" : "s", G);
    tfg_diag_help(d, "data * tensor * pipeline must equal the run's GPUs: give --devices %d of them, "
                     "like --devices host*%d", D * P, D * P);
    return TFG_ERR_DEVICE;
  }
  if (G > 0 && ranks > 1 && (int64_t)D * P != (int64_t)G * ranks) {
    tfg_diag_error(d, &s->loc, "parallel(data = %d, pipeline = %d) needs %d GPUs, but the job has %d: %d on each of "
                   "its %d ranks", D, P, D * P, G * ranks, G, ranks);
    tfg_diag_help(d, "data * tensor * pipeline must equal the job's GPUs, every rank's together");
    return TFG_ERR_DEVICE;
  }
  /* Under mpirun, each rank holds whole pipelines (data parallelism
   * across the ranks, as mirrored's), or the one pipeline spans them all,
   * a stage per rank's GPU. */
  bool whole = ranks == 1 || (P <= G && G % P == 0);
  if (G > 0 && !whole && D > 1) {
    tfg_diag_error(d, &s->loc, "parallel(data = %d, pipeline = %d) over %d ranks of %d GPU%s: a pipeline of %d stages "
                   "spans ranks, and then it must be the only one (data = 1)", D, P, ranks, G, G == 1 ? "" : "s", P);
    tfg_diag_help(d, "give each rank whole pipelines (a multiple of %d GPUs each), or use data = 1", P);
    return TFG_ERR_DEVICE;
  }
  if (G > 0 && whole) D /= ranks; /* this rank's replicas */
  out->nreplicas = D;
  out->group = P;
  out->stages = P;
  out->ranks = whole ? 1 : ranks;
  out->devices = malloc(sizeof *out->devices * (size_t)D * (size_t)P);
  TFG_ASSERT(out->devices != NULL);
  for (int k = 0; k < D * P; k++) out->devices[k] = (tfg_devspec){.kind = TFG_DEV_GPU, .index = k, .loc = s->loc};
  return TFG_OK;
}

/* ---- stages ------------------------------------------------------------------ */

/* Unit codes of the nodes the rewrite adds (pipe.unit[id - n0]): a
 * forward is s * M + m, a backward V * M + s * M + m, a batch's slice
 * 2 V M plus the forward it feeds. */
enum { UNIT_LATEST = -1, UNIT_FIRST = -2, UNIT_LAST = -3 };

typedef struct pipeline {
  tfg_pipe pp;
  int V, M;
  int *stage;       /* [top + 1]: each cone node's stage, -1 outside the cone */
  double *fwd;      /* [V]: each stage's predicted forward cost */
  char *explain;    /* why the cuts fall where they do (the step's explain) */
  int32_t *unit;    /* [added]: each added node's unit or UNIT_* */
  int32_t cap;
} pipeline;

/* The unit code of node id (one the rewrite added). */
static int32_t *unit_of(tfg_replicate *c, tfg_node_id id) {
  pipeline *pp = c->ctx;
  int32_t k = id - c->n0;
  while (k >= pp->cap) {
    int32_t old = pp->cap;
    pp->cap = pp->cap ? 2 * pp->cap : 1024;
    pp->unit = realloc(pp->unit, sizeof *pp->unit * (size_t)pp->cap);
    TFG_ASSERT(pp->unit != NULL);
    for (int32_t j = old; j < pp->cap; j++) pp->unit[j] = UNIT_LATEST;
  }
  return &pp->unit[k];
}

/* Marks the nodes from `from` to the graph's end with unit u. */
static void mark_from(tfg_replicate *c, int32_t from, int32_t u) {
  for (int32_t id = from; id < c->g->nnodes; id++) *unit_of(c, id) = u;
}

/* What balancing weighs, in seconds on the pipeline's first device (the
 * run's gpu:0) as the cost model times it (compiler/predict.h): a
 * launch, then the longer of its FLOPs and its bytes at the device's
 * rates; a send, its bytes over the link. Without the devices (tfg check)
 * an H100's numbers. */
typedef struct rates {
  double launch_s, flops, mem_bw, link_bw;
} rates;

static rates rates_of(const tfg_replicate *c) {
  const tfg_device *d = c->job.ds ? tfg_devices_gpu(c->job.ds, 0) : NULL;
  if (d) return (rates){4e-6, d->flops, d->mem_bw, d->link_bw};
  const tfg_sim_model *h100 = tfg_sim_model_of_gpu(NULL);
  return (rates){4e-6, h100->flops, h100->mem_bw, h100->link_bw};
}

/* An op's time on the device of r for one micro-batch: its FLOPs and
 * bytes as the program's whole batch has them over `clones`, the
 * micro-batches of the job (a param read whole by every micro-batch is
 * undercounted so: a fair price for not cloning first). */
static double op_cost(const tfg_graph *g, const tfg_node *nd, const rates *r, double clones) {
  double bytes = (double)tfg_node_bytes(nd);
  for (int k = 0; k < nd->ninputs; k++) bytes += (double)tfg_node_bytes(&g->nodes[nd->inputs[k]]);
  double t = tfg_op_get(nd->op)->flops(g, nd) / r->flops / clones, tb = bytes / r->mem_bw / clones;
  return r->launch_s + (t > tb ? t : tb);
}

/* The slowest of the V stages' costs when they hold ops first[s] .. of
 * sum (prefix sums of the ops' costs) and send[] (the bytes after each
 * op), as balance weighs them. */
static double slowest(int N, int V, const double *sum, const double *send, const int *first) {
  double worst = 0;
  for (int s = 0; s < V; s++) {
    int lo = first[s], hi = s + 1 < V ? first[s + 1] : N;
    double cost = sum[hi] - sum[lo] + (hi < N ? send[hi - 1] : 0);
    if (cost > worst) worst = cost;
  }
  return worst;
}

/* Writes why each cut falls where it does into *out (malloc'ed): the
 * op each stage starts at, the stages' shares of the forward cost, and
 * what moving the cut one op either way would make of the slowest
 * stage, or that a pin put it there. */
static char *explain_cuts(const tfg_replicate *c, int N, int V, const int *ops, const double *w, const double *send,
                          const int *pin, int *first) {
  const tfg_graph *g = c->g;
  double *sum = malloc(sizeof *sum * (size_t)(N + 1)), total = 0;
  TFG_ASSERT(sum != NULL);
  sum[0] = 0;
  for (int j = 0; j < N; j++) sum[j + 1] = sum[j] + w[j];
  total = sum[N] > 0 ? sum[N] : 1;
  tfg_strbuf b = {0};
  tfg_strbuf_printf(&b, "pipeline of the train at line %u: %d stages, cut in program order; each stage's forward",
                    c->a->loc.line, V);
  for (int s = 0; s < V; s++) {
    int hi = s + 1 < V ? first[s + 1] : N;
    tfg_strbuf_printf(&b, "%s%.0f%%", s ? "/" : " ", 100 * (sum[hi] - sum[first[s]]) / total);
  }
  tfg_strbuf_printf(&b, " of %.3g ms a micro-batch (the cost model on %s's numbers)\n", 1e3 * sum[N],
                    c->job.ds && tfg_devices_gpu(c->job.ds, 0) ? "gpu:0" : "an H100");
  double best = slowest(N, V, sum, send, first);
  for (int s = 1; s < V; s++) {
    const tfg_node *nd = &g->nodes[ops[first[s]]];
    tfg_strbuf_printf(&b, "  stage %d starts at %s (%s:%u): ", s, tfg_op_get(nd->op)->name,
                      nd->loc.src ? nd->loc.src->name : "?", nd->loc.line);
    if (pin[first[s]] == s) {
      tfg_strbuf_printf(&b, "pinned to gpu:%d there\n", s);
      continue;
    }
    tfg_strbuf_printf(&b, "the slowest stage is %.1f%% of the forward", 100 * best / total);
    for (int dir = -1; dir <= 1; dir += 2) {
      int at = first[s];
      first[s] = at + dir;
      bool ok = first[s] > first[s - 1] && (s + 1 >= V || first[s] < first[s + 1]) && first[s] < N;
      for (int s2 = 0; ok && s2 < V; s2++) { /* the pins still hold */
        int lo = first[s2], hi = s2 + 1 < V ? first[s2 + 1] : N;
        for (int j = lo; ok && j < hi; j++) ok = pin[j] < 0 || pin[j] == s2;
      }
      if (ok) tfg_strbuf_printf(&b, "; one op %s, %.1f%%", dir < 0 ? "earlier" : "later", 100 * slowest(N, V, sum, send, first) / total);
      first[s] = at;
    }
    tfg_strbuf_putc(&b, '\n');
  }
  free(sum);
  return tfg_strbuf_take(&b);
}

/* Cuts the cone into stages (pp->stage, pp->fwd) and explains the cuts
 * (pp->explain). Errors: fewer ops than stages (at the strategy), a pin
 * past the stages or against program order (at the pin). */
static tfg_status cut_stages(tfg_replicate *c, pipeline *pp) {
  const tfg_graph *g = c->g;
  rates r = rates_of(c);
  double clones = (double)c->per * c->s->nreplicas * c->job.size;
  int V = pp->V, N = 0;
  int32_t span = c->top + 1;
  int *pos = malloc(sizeof *pos * (size_t)span);
  uint8_t *lc = calloc((size_t)span, 1); /* the loss's cone: what the stages cut (metrics follow) */
  TFG_ASSERT(pos && lc);
  lc[c->a->loss] = 1;
  for (int32_t i = c->a->loss; i >= 0; i--)
    for (int k = 0; lc[i] && k < g->nodes[i].ninputs; k++) lc[g->nodes[i].inputs[k]] = 1;
  for (int32_t i = 0; i < span; i++) pos[i] = lc[i] && g->nodes[i].ninputs > 0 ? N++ : -1;
  if (N < V) {
    tfg_diag_error(c->d, &c->s->loc, "a pipeline of %d stages needs at least %d ops to cut, but the loss's forward pass has %d",
                   V, V, N);
    tfg_diag_help(c->d, "use fewer stages");
    free(pos);
    free(lc);
    return TFG_ERR_PLACE;
  }
  double *w = calloc((size_t)N, sizeof *w), *send = calloc((size_t)N + 1, sizeof *send);
  int *pin = malloc(sizeof *pin * (size_t)N), *ops = malloc(sizeof *ops * (size_t)N), *last = malloc(sizeof *last * (size_t)N);
  int *first = malloc(sizeof *first * (size_t)V);
  TFG_ASSERT(w && send && pin && ops && last && first);
  tfg_status st = TFG_OK;
  int32_t prev = -1; /* the last pinned op */
  for (int32_t i = 0; i < span; i++) {
    if (pos[i] < 0) continue;
    const tfg_node *nd = &g->nodes[i];
    int j = pos[i];
    ops[j] = i;
    w[j] = op_cost(g, nd, &r, clones);
    last[j] = j;
    pin[j] = nd->pin.kind == TFG_DEV_GPU ? (int)(nd->pin.index < V ? nd->pin.index : V) : -1;
    for (int k = 0; k < nd->ninputs; k++)
      if (pos[nd->inputs[k]] >= 0) last[pos[nd->inputs[k]]] = j;
    if (pin[j] < 0 || st != TFG_OK) continue;
    if (pin[j] == V && V == 1) {
      tfg_diag_error(c->d, &nd->pin.loc, "gpu:%" PRId64 " has no place: each replica of parallel(...) here is one device, gpu:0",
                     nd->pin.index);
      tfg_diag_note(c->d, &c->s->loc, "the replicas are set here");
      st = TFG_ERR_PLACE;
    } else if (pin[j] == V) {
      tfg_diag_error(c->d, &nd->pin.loc, "gpu:%" PRId64 " has no stage: the pipeline has %d, gpu:0 to gpu:%d",
                     nd->pin.index, V, V - 1);
      tfg_diag_note(c->d, &c->s->loc, "the pipeline's stages are set here");
      if (pp->pp.chunks > 1)
        tfg_diag_help(c->d, "a pipeline's gpu:K is its stage K; interleaved's stage s runs on device s %% %d", pp->pp.devices);
      st = TFG_ERR_PLACE;
    } else if (prev >= 0 && g->nodes[prev].pin.index > nd->pin.index) {
      tfg_diag_error(c->d, &nd->pin.loc, "gpu:%" PRId64 " comes after gpu:%" PRId64
                     " in program order, but a pipeline's stages follow the program", nd->pin.index,
                     g->nodes[prev].pin.index);
      tfg_diag_note(c->d, &g->nodes[prev].pin.loc, "gpu:%" PRId64 " is pinned here, earlier", g->nodes[prev].pin.index);
      tfg_diag_help(c->d, "pin the program's layers to ascending stages, gpu:0 first");
      st = TFG_ERR_PLACE;
    }
    prev = i;
  }
  if (st == TFG_OK) {
    /* the bytes live across the cut after op j: each value from its op to its last reader */
    double *diff = calloc((size_t)N + 1, sizeof *diff);
    TFG_ASSERT(diff != NULL);
    for (int j = 0; j < N; j++) {
      diff[j] += (double)tfg_node_bytes(&g->nodes[ops[j]]);
      diff[last[j]] -= (double)tfg_node_bytes(&g->nodes[ops[j]]);
    }
    for (int j = 0; j < N; j++) send[j] = (j ? send[j - 1] : 0) + diff[j];
    for (int j = 0; j < N; j++) send[j] /= r.link_bw * clones; /* a micro-batch's bytes, in seconds */
    free(diff);
    /* Every stage needs an op: between two pins, stages pa at op ja and
     * pb at op jb (the ends count as stage -1 at op -1 and stage V at op
     * N), the stages strictly between take the ops strictly between, so
     * pb - pa <= jb - ja. */
    for (int j = 0, ja = -1, pa = -1; j <= N && st == TFG_OK; j++) {
      if (j < N && pin[j] < 0) continue;
      int pb = j < N ? pin[j] : V;
      if (pb - pa > j - ja) {
        if (j == N) {
          tfg_diag_error(c->d, &g->nodes[ops[ja]].pin.loc, "gpu:%d leaves no op for stage%s %d%s after it: %d op%s come after",
                         pa, V - 1 - pa > 1 ? "s" : "", pa + 1, V - 1 - pa > 1 ? " and on" : "", N - 1 - ja,
                         N - 1 - ja == 1 ? "" : "s");
        } else if (ja < 0) {
          tfg_diag_error(c->d, &g->nodes[ops[j]].pin.loc, "gpu:%d leaves no op for stage%s before it: %d op%s come first",
                         pb, pb > 1 ? "s" : "", j, j == 1 ? "" : "s");
        } else {
          tfg_diag_error(c->d, &g->nodes[ops[j]].pin.loc, "gpu:%d leaves no op for stage%s %d%s between it and gpu:%d", pb,
                         pb - pa > 2 ? "s" : "", pa + 1, pb - pa > 2 ? " and on" : "", pa);
          tfg_diag_note(c->d, &g->nodes[ops[ja]].pin.loc, "gpu:%d is pinned here", pa);
        }
        tfg_diag_help(c->d, "each of the pipeline's %d stages needs an op of its own", V);
        st = TFG_ERR_PLACE;
      }
      ja = j, pa = pb;
    }
  }
  /* memory: each param with its first reader, as stage_of places it,
   * with its gradient and optimizer state (and accumulate's sum) */
  double *mem = calloc((size_t)N + 1, sizeof *mem), *cap = malloc(sizeof *cap * (size_t)V);
  TFG_ASSERT(mem && cap);
  const tfg_optimizer_config *oc = &c->a->config.optimizer;
  int copies = 2 + (oc->kind == TFG_OPTIMIZER_SGD ? oc->momentum != 0 : 2) + (c->a->config.accumulate > 1);
  uint8_t *counted = calloc((size_t)span, 1); /* a param whose first reader has it */
  TFG_ASSERT(counted != NULL);
  for (int j = 0; j < N; j++) {
    const tfg_node *nd = &g->nodes[ops[j]];
    for (int k = 0; k < nd->ninputs; k++) {
      int32_t x = nd->inputs[k];
      if (g->nodes[x].op != TFG_OP_PARAM || counted[x]) continue;
      counted[x] = 1;
      mem[j] += (double)copies * (double)tfg_node_bytes(&g->nodes[x]);
    }
  }
  free(counted);
  for (int s = 0; s < V; s++) {
    /* stage s's device, gpu:(s % P); across ranks, a rank's GPUs are alike */
    int gpus = c->job.ds ? tfg_devices_gpus(c->job.ds) : 0;
    const tfg_device *dev = gpus ? tfg_devices_gpu(c->job.ds, s % pp->pp.devices % gpus) : NULL;
    cap[s] = dev ? (double)dev->memory / pp->pp.chunks : DBL_MAX; /* a device holds `chunks` stages */
  }
  if (st == TFG_OK && !tfg_pipe_cut(N, V, w, send, mem, cap, pin, first)) {
    double all = 0;
    for (int j = 0; j < N; j++) all += mem[j];
    tfg_strbuf need = {0}, have = {0};
    tfg_size_format(&need, (int64_t)all);
    double least = DBL_MAX; /* the smallest device's share (every cap is finite here: pins alone always fit) */
    for (int q = 0; q < V; q++) least = cap[q] < least ? cap[q] : least;
    tfg_size_format(&have, least < 9e18 ? (int64_t)least : INT64_MAX);
    tfg_diag_error(c->d, &c->s->loc, "no cut into %d stages fits the devices: the params with their gradients and "
                   "optimizer state need %s in all, a stage gets %s of its device", V, need.data, have.data);
    tfg_diag_help(c->d, "use more stages, or devices with more memory");
    tfg_strbuf_free(&need);
    tfg_strbuf_free(&have);
    st = TFG_ERR_OOM;
  }
  free(mem);
  free(cap);
  if (st == TFG_OK) {
    if (V > 1) pp->explain = explain_cuts(c, N, V, ops, w, send, pin, first);
    pp->fwd = calloc((size_t)V, sizeof *pp->fwd);
    TFG_ASSERT(pp->fwd != NULL);
    for (int32_t i = 0; i < span; i++) pp->stage[i] = -1;
    for (int s = 0, j = 0; j < N; j++) {
      while (s + 1 < V && j >= first[s + 1]) s++;
      pp->stage[ops[j]] = s;
      pp->fwd[s] += w[j];
    }
    /* a metric's own op goes with the latest stage it reads (the loss's
     * when it reads none) */
    for (int32_t i = 0; i < span; i++) {
      const tfg_node *nd = &g->nodes[i];
      if (!c->cone[i] || lc[i] || nd->ninputs == 0) continue;
      pp->stage[i] = -1;
      for (int k = 0; k < nd->ninputs; k++)
        if (pp->stage[nd->inputs[k]] > pp->stage[i]) pp->stage[i] = pp->stage[nd->inputs[k]];
      if (pp->stage[i] < 0) pp->stage[i] = pp->stage[c->a->loss];
    }
    /* a node with no inputs goes with the first stage that reads it */
    for (int32_t i = span - 1; i >= 0; i--) {
      if (!c->cone[i]) continue;
      const tfg_node *nd = &g->nodes[i];
      for (int k = 0; k < nd->ninputs; k++) {
        int32_t x = nd->inputs[k];
        if (pos[x] < 0 && (pp->stage[x] < 0 || pp->stage[x] > pp->stage[i])) pp->stage[x] = pp->stage[i];
      }
    }
    for (int s = 0; s < V; s++) pp->fwd[s] += 1e-9; /* every unit takes some time: the order stays strict */
  }
  free(pos);
  free(lc);
  free(w);
  free(send);
  free(pin);
  free(ops);
  free(last);
  free(first);
  return st;
}

/* ---- the clones ---------------------------------------------------------------- */

/* Clone q of cone node i runs on its stage's device of q's replica; a
 * cpu pin the program wrote stays. */
static tfg_status parallel_pin(tfg_replicate *c, int32_t i, const tfg_devspec *p, int q, tfg_devspec *out) {
  const pipeline *pp = c->ctx;
  int r = q / c->per, s = pp->stage[i] >= 0 ? pp->stage[i] : 0;
  *out = p->kind == TFG_DEV_CPU ? *p : tfg_replicate_pin(c, &c->s->devices[r * c->s->group + s % c->s->group]);
  return TFG_OK;
}

/* A replica's micro-batches read its params: the program's for replica
 * 0, copies for the others, made with its first micro-batch. */
static tfg_status parallel_param(tfg_replicate *c, int q, int32_t i, const tfg_node *nd, tfg_train_step *out) {
  if (q % c->per != 0) return TFG_OK; /* c->map[i] is the replica's already */
  tfg_devspec pin;
  parallel_pin(c, i, &nd->pin, q, &pin);
  int32_t from = c->g->nnodes;
  tfg_replicate_param_copy(c, q / c->per, i, nd, &pin, out);
  mark_from(c, from, UNIT_FIRST);
  return TFG_OK;
}

static void parallel_cloned(tfg_replicate *c, int q, int32_t i, tfg_status st) {
  tfg_replicate_cloned(c, q, i, st);
  if (st != TFG_OK) return;
  const pipeline *pp = c->ctx;
  *unit_of(c, c->map[i]) = pp->stage[i] * pp->M + q % c->per;
}

/* The forward unit of node id, made for a clone's forward: its own, or
 * for a node the rewrite put after the clone's loss (its share of the
 * step, precision = f16's scaling), that of the first input with one. */
static int32_t forward_unit(tfg_replicate *c, tfg_node_id id) {
  int32_t u = *unit_of(c, id);
  for (int k = 0; u < 0 && k < c->g->nodes[id].ninputs; k++)
    if (c->g->nodes[id].inputs[k] >= c->n0) u = forward_unit(c, c->g->nodes[id].inputs[k]);
  return u;
}

/* A gradient node is in the backward of its forward node's stage. */
static void parallel_traced(tfg_replicate *c, int q, int32_t from, const tfg_node_id *origin) {
  const pipeline *pp = c->ctx;
  for (int32_t id = from; id < c->g->nnodes; id++) {
    int32_t u = forward_unit(c, origin[id - from]); /* a clone's forward: s * M + m */
    TFG_ASSERT(u >= 0 && u < pp->V * pp->M && u % pp->M == q % c->per);
    *unit_of(c, id) = pp->V * pp->M + u;
  }
}

/* A clone's rows of an input are cut while the first stage that reads
 * the input runs the forward before theirs, so that they are copied to
 * it in time (one micro-batch ahead), not every micro-batch's at the
 * start. Unit code: 2 V M plus the forward they feed. */
static void mark_slices(tfg_replicate *c, const pipeline *pp) {
  size_t span = (size_t)c->top + 1;
  for (int q = 0; q < c->s->nreplicas * c->per; q++)
    for (int32_t i = 0; i <= c->top; i++) {
      tfg_node_id sl = c->slices[(size_t)q * span + (size_t)i];
      if (sl >= 0) *unit_of(c, sl) = 2 * pp->V * pp->M + pp->stage[i] * pp->M + q % c->per;
    }
}

static const tfg_replicate_hooks parallel_hooks = {
    .pin = parallel_pin, .param = parallel_param, .cloned = parallel_cloned, .traced = parallel_traced};

/* ---- the schedule ------------------------------------------------------------- */

typedef struct keyed {
  double t;
  tfg_node_id id;
} keyed;

static int by_time(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Renumbers the nodes the rewrite added in the order of their units'
 * start under the schedule, and out's ids with them. */
static void order_by_schedule(tfg_replicate *c, pipeline *pp, tfg_train_step *out) {
  tfg_graph *g = c->g;
  int V = pp->V, M = pp->M;
  double *bwd = malloc(sizeof *bwd * (size_t)V), *start = malloc(sizeof *start * 2 * (size_t)V * (size_t)M);
  TFG_ASSERT(bwd && start);
  for (int s = 0; s < V; s++) bwd[s] = 2 * pp->fwd[s]; /* a backward does about twice a forward's work */
  tfg_pipe_times(&pp->pp, pp->fwd, bwd, start);
  int32_t n = g->nnodes - c->n0, units = 2 * V * M;
  keyed *k = malloc(sizeof *k * ((size_t)n + 1));
  double *t = malloc(sizeof *t * ((size_t)n + 1));
  int *size = calloc((size_t)units + 1, sizeof *size), *rank = calloc((size_t)units + 1, sizeof *rank);
  TFG_ASSERT(k && t && size && rank);
  for (int32_t j = 0; j < n; j++) {
    int32_t u = *unit_of(c, c->n0 + j);
    if (u >= 0 && u < units) size[u]++;
  }
  for (int32_t j = 0; j < n; j++) {
    tfg_node_id id = c->n0 + j;
    int32_t u = *unit_of(c, id);
    if (u == UNIT_FIRST) t[j] = -1;
    else if (u == UNIT_LAST) t[j] = DBL_MAX;
    else if (u >= units) { /* a slice: cut while the stage's forward before runs, so it is there in time */
      int32_t f = u - units; /* the forward s * M + m it feeds */
      t[j] = f % M > 0 ? start[f - 1] : -1;
    } else if (u >= 0) {
      /* spread over the unit's predicted time, so that what a unit sends
       * to another device is listed (and its copy queued) about when it
       * is made, not when the unit starts: a copy stream is one queue */
      double dur = u < V * M ? pp->fwd[u / M] : bwd[(u - V * M) / M];
      t[j] = start[u] + dur * (double)(++rank[u]) / (double)(size[u] + 1);
    } else { /* the latest unit it reads, whose label it takes too */
      t[j] = -1;
      for (int q = 0; q < g->nodes[id].ninputs; q++) {
        tfg_node_id x = g->nodes[id].inputs[q];
        if (x < c->n0 || t[x - c->n0] <= t[j]) continue;
        t[j] = t[x - c->n0];
        *unit_of(c, id) = *unit_of(c, x) >= 0 && *unit_of(c, x) < units ? *unit_of(c, x) : UNIT_LATEST;
      }
    }
    k[j] = (keyed){t[j], id};
  }
  qsort(k, (size_t)n, sizeof *k, by_time);
  out->pipe_post = g->nnodes; /* the first node after the pipeline, once renumbered */
  for (int32_t j = n - 1; j >= 0 && k[j].t == DBL_MAX; j--) out->pipe_post = c->n0 + j;
  /* each renumbered node's unit, for the trace's labels */
  out->pipe_first = c->n0;
  out->pipe_unit = malloc(sizeof *out->pipe_unit * ((size_t)(out->pipe_post - c->n0) + 1));
  TFG_ASSERT(out->pipe_unit != NULL);
  for (int32_t j = 0; j < out->pipe_post - c->n0; j++) {
    int32_t u = *unit_of(c, k[j].id);
    out->pipe_unit[j] = u >= units ? u - units : u >= 0 ? u : -1; /* a slice: the forward it feeds */
  }
  tfg_node_id *order = malloc(sizeof *order * ((size_t)n + 1)), *map = malloc(sizeof *map * ((size_t)g->nnodes + 1));
  TFG_ASSERT(order && map);
  for (int32_t j = 0; j < n; j++) order[j] = k[j].id;
  tfg_graph_reorder(g, c->n0, order, map);
  tfg_train_step_remap(out, map);
  free(order);
  free(map);
  free(k);
  free(t);
  free(size);
  free(rank);
  free(bwd);
  free(start);
}

/* ---- the rewrite ------------------------------------------------------------- */

static tfg_status parallel_rewrite(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_strategy *s,
                                   const tfg_job *job, const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  /* A pipeline across ranks is built whole, as one process over the job's
   * GPUs, and split by the compile driver (compiler/ranks.h). */
  tfg_job one = job ? *job : (tfg_job){.rank = 0, .size = 1};
  if (s->ranks > 1) one.rank = 0, one.size = 1;
  const tfg_train_config *cfg = &a->config;
  int P = s->stages, v = cfg->schedule.chunks, M = cfg->micro_batches ? cfg->micro_batches : P;
  if (cfg->schedule.kind == TFG_SCHEDULE_INTERLEAVED && M % P != 0) {
    tfg_diag_error(d, &cfg->schedule.at, "interleaved needs micro_batches to be a multiple of the pipeline's %d devices, "
                   "got %d", P, M);
    if (cfg->micro_batches) tfg_diag_note(d, &cfg->micro_batches_at, "the micro-batches are set here");
    tfg_diag_help(d, "use micro_batches = %d, or 1f1b", (M / P + 1) * P);
    return TFG_ERR_NAME;
  }
  pipeline pp = {.pp = {.kind = cfg->schedule.kind, .devices = P, .chunks = v, .micro = M}, .V = P * v, .M = M};
  tfg_replicate c;
  tfg_replicate_begin(&c, &parallel_hooks, g, a, p, s, &one, sw, d, out);
  c.ctx = &pp;
  c.per = M;
  pp.stage = malloc(sizeof *pp.stage * ((size_t)c.top + 1));
  TFG_ASSERT(pp.stage != NULL);
  tfg_replicate_data_begin(&c, out);
  tfg_status st = cut_stages(&c, &pp);
  if (st == TFG_OK) st = tfg_replicate_split_batch(&c);
  if (st == TFG_OK) mark_slices(&c, &pp);
  if (st == TFG_OK) st = tfg_replicate_replicas(&c, out);
  if (st == TFG_OK) {
    /* each replica's sum over its micro-batches' shares, into its slot r */
    int R = s->nreplicas, n = c.n;
    for (int r = 0; r < R; r++) {
      tfg_autodiff_micro_sum(g, M, &c.rparams[r * M * n], &c.grads[r * M * n], n, n, &c.grads[r * n], out);
      memmove(&c.rparams[r * n], &c.rparams[r * M * n], sizeof *c.rparams * (size_t)n);
    }
    int32_t mark = g->nnodes;
    st = tfg_replicate_data_end(&c, out);
    mark_from(&c, mark, UNIT_LAST);
  }
  if (st == TFG_OK) {
    order_by_schedule(&c, &pp, out);
    out->pipe = pp.pp;
    out->ranks = s->ranks;
    if (pp.explain) tfg_train_step_explain(out, pp.explain, true); /* the cuts before what data_end said (ZeRO) */
  }
  free(pp.stage);
  free(pp.fwd);
  free(pp.explain);
  free(pp.unit);
  return tfg_replicate_end(&c, st, out);
}

static void parallel_describe(const tfg_train_step *st, char *buf, size_t n) {
  snprintf(buf, n, "parallel over %d clones", st->nreplicas);
}

const tfg_strategy_i tfg_strategy_parallel = {
    .name = "parallel", .run = TFG_STEP_GROUP, .read = parallel_read, .rewrite = parallel_rewrite,
    .describe = parallel_describe, .spans_gpus = tfg_strategy_names_devices, .gpus = parallel_gpus,
    .not_predicted = NULL};
