/* runtime/calibrate.c: measuring the host's costs (runtime/calibrate.h).
 *
 * Sizes are chosen like the work they stand for: a 256-cube f32 product
 * (a layer of a small model, large enough that OpenBLAS runs at its
 * steady rate), 4 MiB arrays for streaming (past the L2 caches, as
 * activations are), and 4096 empty launches through a real host device's
 * stream and worker (the queue, the wake-up, the hand-over). */
#include "runtime/calibrate.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/assert.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "ir/device_impl.h"
#include "ir/fused.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/discover.h"
#include "runtime/exec.h"
#include "runtime/mpi.h"

#define TRIES 5

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A matrix product on one thread (no pool: the caller's). */
static double gemm_flops(void) {
  enum { N = 256 };
  float *a = malloc(sizeof *a * N * N), *b = malloc(sizeof *b * N * N), *c = malloc(sizeof *c * N * N);
  TFG_ASSERT(a && b && c);
  for (int i = 0; i < N * N; i++) a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f;
  double best = 1e30;
  for (int t = 0; t <= TRIES; t++) { /* the first warms up */
    double t0 = now();
    tfg_cpu_gemm(NULL, false, false, false, N, N, N, a, N, b, N, 0.0, c, N);
    double dt = now() - t0;
    if (t > 0 && dt < best) best = dt;
  }
  free(a);
  free(b);
  free(c);
  return 2.0 * N * N * N / best;
}

/* c = a + b over 4 MiB arrays on one thread: bytes read and written per second. */
static double stream_bw(void) {
  enum { N = 1 << 20 };
  float *a = malloc(sizeof *a * N), *b = malloc(sizeof *b * N), *c = malloc(sizeof *c * N);
  TFG_ASSERT(a && b && c);
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 1.0f, c[i] = 0;
  double best = 1e30;
  for (int t = 0; t <= TRIES; t++) {
    double t0 = now();
    for (int i = 0; i < N; i++) c[i] = a[i] + b[i];
    double dt = now() - t0;
    /* keep the result live: the loop must not be optimized away */
    volatile float sink = c[t % N];
    (void)sink;
    if (t > 0 && dt < best) best = dt;
  }
  free(a);
  free(b);
  free(c);
  return 3.0 * sizeof(float) * N / best;
}

/* memcpy of 4 MiB: bytes copied per second. */
static double copy_bw(void) {
  enum { N = 4 << 20 };
  char *a = malloc(N), *b = malloc(N);
  TFG_ASSERT(a && b);
  memset(a, 1, N);
  memset(b, 0, N);
  double best = 1e30;
  for (int t = 0; t <= TRIES; t++) {
    double t0 = now();
    memcpy(b, a, N);
    double dt = now() - t0;
    volatile char sink = b[t];
    (void)sink;
    if (t > 0 && dt < best) best = dt;
  }
  free(a);
  free(b);
  return (double)N / best;
}

static tfg_status noop(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)ctx, (void)node, (void)in, (void)out;
  return TFG_OK;
}

/* A chain of n tiny ops (neg over 16 floats, after a normal-filled
 * source) on one host device, through the real pipeline: placed,
 * planned (no fusion: each op one launch) and run by an executor with
 * `threads` kernel threads. Returns the best time of a run that fetches
 * the chain's end, or -1. */
static double chain_run(int n, int threads) {
  tfg_graph *g = tfg_graph_new();
  tfg_loc loc = {0};
  tfg_node_id id = tfg_graph_add(g, TFG_OP_INIT, NULL, 0, &loc);
  tfg_node *nd = tfg_graph_node(g, id);
  nd->attrs.init = TFG_INIT_NORMAL;
  nd->attrs.b = 1;
  nd->attrs.seed = 1;
  for (int k = 0; k <= n; k++) {
    if (k > 0) id = tfg_graph_add(g, TFG_OP_NEG, &id, 1, &loc);
    tfg_graph_node(g, id)->dtype = TFG_DTYPE_F32;
    tfg_graph_node(g, id)->shape = (tfg_shape){1, {16}};
  }
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  tfg_placement *pl = NULL;
  tfg_plan *plan = NULL;
  tfg_exec *x = NULL;
  double best = -1;
  float out[16];
  void *outs[1] = {out};
  if (tfg_devices_parse(d, "host", &ds) == TFG_OK && (pl = tfg_place_on(g, ds, 1)) != NULL &&
      tfg_plan_build(g, pl, ds, d, &plan) == TFG_OK &&
      tfg_exec_new(plan, &(tfg_exec_opts){.threads = threads}, d, &x) == TFG_OK) {
    tfg_exec_run_opts ro = {0};
    for (int t = 0; t <= 2 * TRIES; t++) {
      double t0 = now();
      if (tfg_exec_run(x, &id, 1, outs, &ro, d) != TFG_OK) {
        best = -1;
        break;
      }
      double dt = now() - t0;
      if (t > 0 && (best < 0 || dt < best)) best = dt;
    }
  }
  if (x) tfg_exec_free(x);
  if (plan) tfg_plan_free(plan);
  if (pl) tfg_placement_free(pl);
  tfg_devices_free(ds);
  tfg_diag_free(d);
  tfg_graph_free(g);
  return best;
}

/* What an empty launch needs: a context, a node and an output, all
 * ignored by the kernel. */
typedef struct empty_launch {
  tfg_kernel_ctx ctx;
  tfg_node node;
  tfg_tensor out;
} empty_launch;

/* A host device of its own for measuring (gpu:K), its index past every
 * device a run can have, so that no fault hook (TFG_FAULT_DEVICE) or
 * trace of a run's devices takes it for one of them. */
static tfg_backend *host_backend(int k) {
  tfg_device dev = {.index = 1 + TFG_DEVICES_MAX_GPUS + 1 + k, .kind = TFG_DEVICE_HOST, .memory = (int64_t)1 << 20};
  snprintf(dev.name, sizeof dev.name, "gpu:%d", k);
  tfg_backend *b = tfg_backend_host_new(&dev);
  TFG_ASSERT(b != NULL);
  return b;
}

static void launch_empty(tfg_backend *b, tfg_stream *s, empty_launch *e) {
  tfg_backend_launch(b, s, noop, &e->ctx, &e->node, NULL, &e->out);
}

/* An empty kernel launched on a host device: queued by this thread, run
 * by the device's worker. */
static double launch_time(void) {
  enum { LAUNCHES = 4096 };
  tfg_backend *b = host_backend(0);
  tfg_stream *s = tfg_backend_stream_create(b);
  empty_launch e = {.ctx = {.node = -1}};
  double best = 1e30;
  for (int t = 0; t <= TRIES; t++) {
    double t0 = now();
    for (int k = 0; k < LAUNCHES; k++) launch_empty(b, s, &e);
    TFG_ASSERT(tfg_backend_synchronize(b, s, NULL) == TFG_OK);
    double dt = now() - t0;
    if (t > 0 && dt < best) best = dt;
  }
  tfg_backend_stream_free(b, s);
  tfg_backend_destroy(b);
  return best / LAUNCHES;
}

/* One hand-over between two host devices: a kernel on one, then a
 * record that releases a wait on the other, whose worker was asleep:
 * what each cross-device event of a step costs beyond the kernels. Two
 * devices play ping-pong; a hop is half a round. */
static double hop_time(void) {
  enum { ROUNDS = 512 };
  tfg_backend *a = host_backend(0), *b = host_backend(1);
  tfg_stream *sa = tfg_backend_stream_create(a), *sb = tfg_backend_stream_create(b);
  tfg_event *ea = tfg_backend_event_create(a), *eb = tfg_backend_event_create(b);
  empty_launch e = {.ctx = {.node = -1}};
  double best = 1e30;
  for (int t = 0; t <= 2; t++) {
    double t0 = now();
    for (int k = 0; k < ROUNDS; k++) {
      launch_empty(a, sa, &e);
      tfg_backend_event_record(a, sa, ea);
      tfg_backend_event_wait(b, sb, ea);
      launch_empty(b, sb, &e);
      tfg_backend_event_record(b, sb, eb);
      tfg_backend_event_wait(a, sa, eb);
    }
    TFG_ASSERT(tfg_backend_synchronize(a, sa, NULL) == TFG_OK && tfg_backend_synchronize(b, sb, NULL) == TFG_OK);
    double dt = now() - t0;
    if (t > 0 && dt < best) best = dt;
  }
  tfg_backend_event_free(a, ea);
  tfg_backend_event_free(b, eb);
  tfg_backend_stream_free(a, sa);
  tfg_backend_stream_free(b, sb);
  tfg_backend_destroy(a);
  tfg_backend_destroy(b);
  return best / (2.0 * ROUNDS);
}

void tfg_calibrate_host(int threads, tfg_host_costs *out) {
  *out = (tfg_host_costs){0};
  /* under mpirun the ranks of this machine share its cores */
  out->cores = (int)tfg_discover_host_cores() / tfg_mpi_local_size();
  if (out->cores < 1) out->cores = 1;
  out->threads = threads > 0 ? threads : tfg_cpu_blas_default_threads();
  out->flops = gemm_flops();
  out->mem_bw = stream_bw();
  out->copy_bw = copy_bw();
  out->hop_s = hop_time();
  /* What a launch costs the executor, and a run of it, from chains of 8
   * and 136 ops: the difference over the 128 more ops, and the rest. The
   * empty launch alone is the floor (a chain's ops cost at least it). */
  double t8 = chain_run(8, out->threads), t136 = chain_run(136, out->threads);
  double floor = launch_time();
  out->launch_s = t8 > 0 && t136 > t8 ? (t136 - t8) / 128 : floor;
  if (out->launch_s < floor) out->launch_s = floor;
  out->run_s = t8 > 0 ? t8 - 8 * out->launch_s : out->hop_s;
  if (out->run_s < 0) out->run_s = 0;
}

/* ---- the plan's kernels ------------------------------------------------------------ */

/* Whether nodes a and b run the same kernel on the same shapes. */
static bool alike(const tfg_graph *g, const tfg_node *a, const tfg_node *b) {
  if (a->op != b->op || a->dtype != b->dtype || a->ninputs != b->ninputs ||
      memcmp(&a->shape, &b->shape, sizeof a->shape) != 0 || memcmp(&a->attrs, &b->attrs, sizeof a->attrs) != 0)
    return false;
  for (int k = 0; k < a->ninputs; k++) {
    const tfg_node *x = &g->nodes[a->inputs[k]], *y = &g->nodes[b->inputs[k]];
    if (x->dtype != y->dtype || memcmp(&x->shape, &y->shape, sizeof x->shape) != 0) return false;
  }
  return true;
}

/* A buffer for a tensor of node x's dtype and n bytes, its pages touched
 * (a first touch would be timed as the kernel's): f32 and f64 values
 * 1/64 (an ordinary value: zeros can take a kernel's shortcuts), other
 * dtypes zero (an index 0 is in range for every gather and label). */
static void *filled(const tfg_node *x) {
  int64_t n = tfg_node_bytes(x);
  void *p = malloc((size_t)n + 16);
  if (!p) return NULL;
  memset(p, 0, (size_t)n + 16);
  if (x->dtype == TFG_DTYPE_F32)
    for (int64_t i = 0; i < n / 4; i++) ((float *)p)[i] = 1.0f / 64;
  else if (x->dtype == TFG_DTYPE_F64)
    for (int64_t i = 0; i < n / 8; i++) ((double *)p)[i] = 1.0 / 64;
  return p;
}

/* One runner of a kernel: its own buffers and pool. */
typedef struct runner {
  const tfg_graph *g;
  tfg_kernel_fn fn;
  const tfg_node *node;
  tfg_pool *pool;
  tfg_tensor in[64], out;
  bool ok;
  pthread_barrier_t *bar; /* runs start and end together (NULL: alone) */
  int runs;
  double first;       /* the warm-up's time */
  double dt[TRIES];   /* each run's time */
} runner;

enum { MAX_IN = 64 };

static bool runner_init(runner *r, const tfg_graph *g, tfg_kernel_fn fn, const tfg_node *node, tfg_pool *pool) {
  *r = (runner){.g = g, .fn = fn, .node = node, .pool = pool, .ok = node->ninputs <= MAX_IN};
  for (int k = 0; r->ok && k < node->ninputs; k++) {
    const tfg_node *x = &g->nodes[node->inputs[k]];
    r->in[k] = (tfg_tensor){.data = filled(x), .dtype = x->dtype, .shape = x->shape};
    r->ok &= r->in[k].data != NULL;
  }
  r->out = (tfg_tensor){.data = filled(node), .dtype = node->dtype, .shape = node->shape};
  r->ok &= r->out.data != NULL;
  return r->ok;
}

static void runner_free(runner *r) {
  for (int k = 0; k < r->node->ninputs && k < MAX_IN; k++) free(r->in[k].data);
  free(r->out.data);
}

/* Runs the kernel r->runs times, the first a warm-up, in step with the
 * other runners. */
static void *runner_go(void *arg) {
  runner *r = arg;
  for (int t = 0; t < r->runs; t++) {
    /* the pool's threads asleep first, as between a run's ops (they
     * sleep when idle): waking them is part of a kernel's time */
    nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
    if (r->bar) pthread_barrier_wait(r->bar);
    tfg_kernel_ctx ctx = {.pool = r->pool, .training = true, .step = 1, .node = -1};
    double t0 = now();
    tfg_status st = r->ok ? r->fn(&ctx, r->node, r->in, &r->out) : TFG_ERR_DEVICE;
    double dt = now() - t0;
    tfg_strbuf_free(&ctx.err);
    if (st != TFG_OK) r->ok = false;
    if (t == 0) r->first = dt;
    r->dt[t] = dt;
    if (r->bar) pthread_barrier_wait(r->bar);
  }
  return NULL;
}

/* The kernel's time on node, on filled inputs, while `together` copies
 * of it run at once, each on its own pool (pools[k]; NULL entries run on
 * the runner's thread), as the replicas of a data-parallel step run the
 * same kernels at the same time on the shared cores: of a few runs after
 * a warm-up (one when it takes over 20 ms), the median, each run's time
 * that of its slowest copy (a step waits for its slowest replica); -1
 * when the kernel fails. The median, not the best: a training step's
 * kernels take their usual time, and a run's mean step sees that. */
static double time_kernel(const tfg_graph *g, tfg_kernel_fn fn, const tfg_node *node, tfg_pool *const *pools,
                          int together) {
  runner rs[16];
  if (together < 1) together = 1;
  if (together > 16) together = 16;
  bool ok = true;
  for (int k = 0; k < together; k++) ok &= runner_init(&rs[k], g, fn, node, pools[k]);
  /* the warm-up alone says how many runs to time */
  runner probe = rs[0];
  probe.runs = 1;
  runner_go(&probe);
  int runs = ok && probe.ok ? (probe.first > 20e-3 ? 2 : TRIES) : 0;
  pthread_barrier_t bar;
  pthread_t th[16];
  if (runs && together > 1) pthread_barrier_init(&bar, NULL, (unsigned)together);
  for (int k = 0; runs && k < together; k++) {
    rs[k].runs = runs;
    rs[k].bar = together > 1 ? &bar : NULL;
    if (k > 0) TFG_ASSERT(pthread_create(&th[k], NULL, runner_go, &rs[k]) == 0);
  }
  if (runs) runner_go(&rs[0]);
  for (int k = 1; runs && k < together; k++) pthread_join(th[k], NULL);
  if (runs && together > 1) pthread_barrier_destroy(&bar);
  double slowest[TRIES];
  int n = 0;
  for (int t = 1; t < runs; t++) {
    double s = 0;
    for (int k = 0; k < together; k++) s = rs[k].dt[t] > s ? rs[k].dt[t] : s;
    int i = n++; /* insertion: a handful of values */
    while (i > 0 && slowest[i - 1] > s) slowest[i] = slowest[i - 1], i--;
    slowest[i] = s;
  }
  double best = n ? (n % 2 ? slowest[n / 2] : (slowest[n / 2 - 1] + slowest[n / 2]) / 2) : -1;
  for (int k = 0; k < together; k++)
    if (!rs[k].ok) best = -1;
  for (int k = 0; k < together; k++) runner_free(&rs[k]);
  return best;
}

void tfg_calibrate_kernels(const tfg_plan *p, tfg_cost_table *t) {
  const tfg_graph *g = p->g;
  t->kernel_s = malloc(sizeof *t->kernel_s * ((size_t)g->nnodes + 1));
  TFG_ASSERT(t->kernel_s != NULL);
  for (int32_t i = 0; i < g->nnodes; i++) t->kernel_s[i] = -1;
  tfg_node_id *timed = malloc(sizeof *timed * ((size_t)g->nnodes + 1));
  const tfg_node **as = malloc(sizeof *as * ((size_t)g->nnodes + 1));
  tfg_node *fused = calloc((size_t)p->nchains + 1, sizeof *fused);
  tfg_fused_prog *progs = calloc((size_t)p->nchains + 1, sizeof *progs);
  TFG_ASSERT(timed && as && fused && progs);
  int ntimed = 0;
  /* the host devices that compute run their kernels at the same time */
  int together = 0, threads = 1;
  for (int d = 0; d < p->ndev; d++)
    if (t->dev[d].one_worker && t->dev[d].threads >= 1 && t->dev[d].computes) together++, threads = t->dev[d].threads;
  /* as many at once as the cores hold: the predictor shares the cores
   * among more (compiler/predict.c) */
  if (t->host && together * threads > t->host->cores) together = t->host->cores / threads;
  if (together < 1) together = 1;
  if (together > 16) together = 16;
  tfg_pool *pools[16] = {0};
  for (int k = 0; k < together && threads > 1; k++) pools[k] = tfg_pool_new(threads);
  for (int d = 0; d < p->ndev; d++) {
    const tfg_cost_device *c = &t->dev[d];
    if (!c->one_worker || c->threads < 1) continue; /* not a host device */
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind != TFG_PLAN_LAUNCH || g->nodes[st->node].op == TFG_OP_INPUT) continue;
      const tfg_node *node = &g->nodes[st->node];
      if (st->chain >= 0) { /* the chain's FUSED node, as the executor makes it */
        const tfg_plan_chain *ch = &p->chains[st->chain];
        if (!fused[st->chain].inputs) {
          if (!tfg_fused_build(g, ch->nodes, ch->nnodes, ch->inputs, ch->ninputs, &progs[st->chain])) continue;
          fused[st->chain] = (tfg_node){.op = TFG_OP_FUSED, .dtype = node->dtype, .shape = node->shape,
                                        .ninputs = ch->ninputs, .inputs = ch->inputs};
          fused[st->chain].attrs.data = &progs[st->chain];
        }
        node = &fused[st->chain];
      }
      int k = 0;
      while (k < ntimed && !(node->op != TFG_OP_FUSED && alike(g, node, as[k]))) k++;
      if (k < ntimed) {
        t->kernel_s[st->node] = t->kernel_s[timed[k]];
        continue;
      }
      tfg_kernel_fn fn = tfg_cpu_kernel(node->op);
      if (!fn) continue;
      t->kernel_s[st->node] = time_kernel(g, fn, node, pools, c->computes ? together : 1);
      timed[ntimed] = st->node;
      as[ntimed++] = node;
    }
  }
  for (int k = 0; k < 16; k++)
    if (pools[k]) tfg_pool_free(pools[k]);
  free(timed);
  free(as);
  free(fused);
  free(progs);
}
