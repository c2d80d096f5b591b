/* runtime/exec_graph.c: captured runs (CUDA Graphs). A run of a fetch
 * key seen often enough is captured once on the devices whose backend
 * can capture (their launches, copies, events and built-in collectives
 * recorded into one graph by the origin device's compute stream), and
 * replayed after: one launch for the step instead of one per op, which
 * is what small steps spend their time on. Values crossing between the
 * host and a captured device go through stages (host memory that keeps
 * its address). runtime/exec.c decides when to capture or replay; the
 * state is runtime/exec_impl.h's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/strbuf.h"
#include "runtime/backend_fault.h"
#include "runtime/exec_impl.h"

/* ---- stages (captured runs) ------------------------------------------------------
 * A captured copy keeps its host address and may not use pageable memory,
 * so during a capture every value that crosses between the host and a
 * captured device goes through the node's stage: host memory from the
 * origin's host_alloc (pinned on a GPU), kept as long as the executor. */

/* Node id's stage, allocated on first use. NULL when host_alloc fails:
 * the capture is then refused (stage_failed) and the run goes on
 * uncaptured. (No constant needs one: constants are persistent, written
 * before any run.) */
static void *exec_stage(tfg_exec *x, tfg_node_id id) {
  if (!x->stage[id]) {
    exec_dev *o = &x->dev[x->origin];
    const tfg_node *nd = &x->g->nodes[id];
    x->stage[id] = tfg_backend_host_alloc(o->b, (size_t)tfg_node_bytes(nd));
    if (!x->stage[id]) {
      x->stage_failed = true;
      return NULL;
    }
  }
  return x->stage[id];
}

/* The stage a captured copy into a device reads node id from, listed for
 * refilling before each replay from the fed value (src -1) or from feeder
 * device src's memory. */
const void *exec_stage_fill(tfg_exec *x, tfg_node_id id, int src) {
  void *p = exec_stage(x, id);
  exec_graph *gr = x->staging;
  if (p && !(x->mark[id] & STAGE_FILL)) {
    x->mark[id] |= STAGE_FILL;
    gr->fill = realloc(gr->fill, sizeof *gr->fill * ((size_t)gr->nfill + 1));
    gr->fill_src = realloc(gr->fill_src, sizeof *gr->fill_src * ((size_t)gr->nfill + 1));
    TFG_ASSERT(gr->fill && gr->fill_src);
    gr->fill[gr->nfill] = id;
    gr->fill_src[gr->nfill++] = src;
  }
  return p ? p : src >= 0 ? exec_addr(&x->dev[src], id) : x->fed[id];
}

/* The stage a captured copy out of node id writes, listed for handing
 * out after each replay; NULL when it is listed already (one copy
 * serves every fetch of the node). */
void *exec_stage_drain(tfg_exec *x, tfg_node_id id) {
  if (x->mark[id] & STAGE_DRAIN) return NULL;
  x->mark[id] |= STAGE_DRAIN;
  void *p = exec_stage(x, id);
  if (!p) return NULL;
  exec_graph *gr = x->staging;
  gr->drain = realloc(gr->drain, sizeof *gr->drain * ((size_t)gr->ndrain + 1));
  TFG_ASSERT(gr->drain != NULL);
  gr->drain[gr->ndrain++] = id;
  return p;
}

/* Frees a cache entry's replay and lists and empties it. */
void exec_graph_clear(tfg_exec *x, exec_graph *gr) {
  if (gr->r) tfg_backend_replay_free(x->dev[x->origin].b, gr->r);
  free(gr->key);
  free(gr->fill);
  free(gr->fill_src);
  free(gr->drain);
  memset(gr, 0, sizeof *gr);
}

/* Whether this executor's runs may be captured (CUDA Graphs: the top of
 * this file),
 * and which devices: those whose backend can capture, but cpu:0 (the
 * host feeding them). Every other used device must be a feeder a capture
 * can run before: host memory, and what tfg_plan_capturable asks (never
 * waiting for or copying from a captured device, in no bucket with one);
 * and every bucket's collective is the built-in ring (not NCCL: below). Off with sw.no_cuda_graphs,
 * --trace, --check-numerics and the fault hooks (each needs every launch
 * to go through the executor's walk). */
void exec_graph_setup(tfg_exec *x, const tfg_exec_opts *o) {
  const tfg_plan *p = x->p;
  if (o->sw.no_cuda_graphs || o->trace || o->check_numerics || x->fault_device >= 0) return;
  x->captured = calloc((size_t)x->ndev + 1, 1);
  TFG_ASSERT(x->captured != NULL);
  int ncaptured = 0;
  bool ok = true;
  x->origin = -1;
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    if (!e->b) continue;
    char msg[96];
    ok &= tfg_backend_fault_after(&o->sw, e->device, msg, sizeof msg) == 0;
    x->captured[dv] = tfg_backend_get_caps(e->b)->can_capture && e->device->kind != TFG_DEVICE_CPU;
    ok &= x->captured[dv] || tfg_backend_is_host(e->b); /* a feeder's values are read from host memory */
    ncaptured += x->captured[dv];
    if (x->captured[dv] && x->origin < 0) x->origin = dv;
  }
  tfg_strbuf why = {0};
  ok = ok && tfg_plan_capturable(p, x->captured, &why);
  tfg_strbuf_free(&why);
  /* NCCL warns that capturing its collectives for several GPUs driven by
   * one thread may deadlock at cudaGraphLaunch (its guide, "CUDA Graph
   * support": multiple GPUs per process), which is how tfg drives them:
   * only collectives that declare themselves capturable (the built-in
   * ring's) are captured. */
  for (int b = 0; b < p->nbuckets && ok; b++) {
    const tfg_coll *c = x->buckets[b].coll;
    ok &= !c || c->capturable;
  }
  if (!ok || ncaptured == 0) return;
  x->stage = calloc((size_t)x->g->nnodes + 1, sizeof *x->stage);
  x->mark = calloc((size_t)x->g->nnodes + 1, 1);
  TFG_ASSERT(x->stage && x->mark);
  x->graphs = true;
}

/* ---- captured runs (CUDA Graphs) ------------------------------------------------- */

static int cmp_id(const void *a, const void *b) {
  tfg_node_id x = *(const tfg_node_id *)a, y = *(const tfg_node_id *)b;
  return (x > y) - (x < y);
}


/* The cache entry of this run's key (the fetched nodes, the training
 * flag): its own, or a new one in a free slot or the least recently used
 * one's (whose replay is freed). */
exec_graph *exec_graph_for(tfg_exec *x, const tfg_node_id *fetch, int nfetch, bool training) {
  tfg_node_id *key = malloc(sizeof *key * ((size_t)nfetch + 1));
  TFG_ASSERT(key != NULL);
  memcpy(key, fetch, sizeof *key * (size_t)nfetch);
  qsort(key, (size_t)nfetch, sizeof *key, cmp_id);
  int nk = 0;
  for (int i = 0; i < nfetch; i++)
    if (nk == 0 || key[nk - 1] != key[i]) key[nk++] = key[i];
  exec_graph *victim = NULL;
  for (int i = 0; i < EXEC_GRAPHS; i++) {
    exec_graph *gr = &x->cache[i];
    if (gr->in_use && gr->training == training && gr->nkey == nk && memcmp(gr->key, key, sizeof *key * (size_t)nk) == 0) {
      free(key);
      gr->used = ++x->clock;
      return gr;
    }
    if (!victim || (victim->in_use && (!gr->in_use || gr->used < victim->used))) victim = gr;
  }
  exec_graph_clear(x, victim);
  *victim = (exec_graph){.key = key, .nkey = nk, .training = training, .in_use = true, .used = ++x->clock};
  return victim;
}

/* After a capture that failed: the walk's marks of the captured devices
 * (their events' records, the buckets' arrivals) are forgotten, so they
 * can be walked again in this run. */
void exec_forget_walk(tfg_exec *x) {
  for (int e = 0; e < x->p->nevents; e++)
    if (x->ev_dev[e] >= 0 && x->captured[x->ev_dev[e]]) x->issued[e] = 0;
  for (int b = 0; b < x->p->nbuckets; b++) {
    if (!x->buckets[b].at) continue;
    x->buckets[b].queued = 0;
    memset(x->buckets[b].at, 0, sizeof *x->buckets[b].at * (size_t)x->p->buckets[b].nranks);
  }
  for (int dv = 0; dv < x->ndev; dv++)
    if (x->captured[dv]) {
      x->dev[dv].nlaunched = 0;
      atomic_store(&x->dev[dv].done, 0);
    }
}

/* Captures this run of the captured devices into gr->r on the origin's
 * compute stream: the other streams join the capture by waiting for the
 * fork event and leave it through their join events. When the backend
 * refuses (gr->r NULL: a call that cannot be captured, or an operation
 * failing), the key runs uncaptured from now on, with a warning, and this
 * run is queued again, plainly. */
void exec_capture(tfg_exec *x, exec_graph *gr, const tfg_exec_run_opts *ro, const tfg_node_id *fetch, int nfetch,
                    void *const *out, tfg_diag *d) {
  exec_dev *o = &x->dev[x->origin];
  tfg_backend *ob = o->b;
  if (!x->fork) {
    x->fork = tfg_backend_event_create(ob);
    for (int dv = 0; dv < x->ndev; dv++) x->njoin += x->captured[dv] ? TFG_PLAN_STREAMS : 0;
    x->njoin--; /* the origin's compute stream */
    x->join = malloc(sizeof *x->join * ((size_t)x->njoin + 1));
    TFG_ASSERT(x->join != NULL);
    for (int j = 0; j < x->njoin; j++) x->join[j] = tfg_backend_event_create(ob);
  }
  memset(x->mark, 0, (size_t)x->g->nnodes);
  x->stage_failed = false;
  tfg_strbuf why = {0};
  if (tfg_backend_capture_begin(ob, o->s[0], &why)) {
    tfg_backend_event_record(ob, o->s[0], x->fork);
    for (int dv = 0; dv < x->ndev; dv++)
      for (int s = 0; x->captured[dv] && s < TFG_PLAN_STREAMS; s++)
        if (dv != x->origin || s != 0) tfg_backend_event_wait(x->dev[dv].b, x->dev[dv].s[s], x->fork);
    x->staging = gr;
    exec_queue_run(x, WALK_CAPTURED, ro, fetch, nfetch, out);
    x->staging = NULL;
    int j = 0;
    for (int dv = 0; dv < x->ndev; dv++)
      for (int s = 0; x->captured[dv] && s < TFG_PLAN_STREAMS; s++)
        if (dv != x->origin || s != 0) {
          tfg_backend_event_record(x->dev[dv].b, x->dev[dv].s[s], x->join[j]);
          tfg_backend_event_wait(ob, o->s[0], x->join[j++]);
        }
    gr->r = tfg_backend_capture_end(ob, o->s[0], &why);
    if (gr->r && x->stage_failed) {
      tfg_backend_replay_free(ob, gr->r);
      gr->r = NULL;
      tfg_strbuf_puts(&why, "no host memory for its copies (host_alloc failed)");
    }
  }
  if (!gr->r) {
    gr->refused = true;
    tfg_diag_warning(d, NULL, "%s runs without CUDA Graphs: %s", o->device->name, why.data ? why.data : "refused");
    exec_forget_walk(x);
    exec_queue_run(x, WALK_CAPTURED, ro, fetch, nfetch, out);
  }
  tfg_strbuf_free(&why);
}

/* Replays gr: refills the stages from this run's feeds and feeders, writes
 * the step, and queues the captured work on the origin's compute stream. */
void exec_replay(tfg_exec *x, exec_graph *gr, const tfg_exec_run_opts *ro) {
  for (int k = 0; k < gr->nfill; k++) {
    tfg_node_id id = gr->fill[k];
    const void *src = gr->fill_src[k] < 0 ? x->fed[id] : exec_addr(&x->dev[gr->fill_src[k]], id);
    memcpy(x->stage[id], src, (size_t)tfg_node_bytes(&x->g->nodes[id]));
  }
  exec_set_steps(x, WALK_CAPTURED, ro, false);
  exec_dev *o = &x->dev[x->origin];
  tfg_backend_replay(o->b, o->s[0], gr->r);
}

