/* compiler/predict.c: a training step's time from the plan and a cost
 * table (compiler/predict.h): the plan's steps replayed in time order,
 * each stream in its own order, events and all-reduces as the executor
 * orders them.
 *
 * The replay is list scheduling: of every stream's next step, the one
 * that can start earliest runs next (a host device's streams also wait
 * for its one worker). A WAIT starts once its RECORD has run; an
 * all-reduce once every rank of its bucket has reached it, all ranks
 * together, as one collective. Steps a step's run does not need (another
 * train's, a print's) take no time, as the executor skips them. */
#include "compiler/predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/plan_impl.h"
#include "ir/ops.h"

#define GPU_LAUNCH_S 4e-6 /* a kernel launch from the host, as CUDA runs one eagerly */
#define PCIE_BW 25e9      /* host to GPU: PCIe 4.0 x16 as copies see it */
#define NET_LATENCY_S 5e-6 /* a message between nodes (InfiniBand, as a ring's step sees it) */

/* ---- the table ---------------------------------------------------------------------- */

static bool on_host(const tfg_device *dv) { return dv->kind == TFG_DEVICE_CPU || dv->kind == TFG_DEVICE_HOST; }

void tfg_cost_table_init(tfg_cost_table *t, const tfg_plan *p, const tfg_host_costs *host) {
  *t = (tfg_cost_table){.ndev = p->ndev, .ranks = 1, .host = host};
  t->dev = calloc((size_t)p->ndev + 1, sizeof *t->dev);
  TFG_ASSERT(t->dev != NULL);
  /* The host devices' share of the kernel threads, as the executor gives it. */
  int busy = 0;
  for (int d = 0; host && d < p->ndev; d++) busy += on_host(tfg_devices_at(p->ds, d)) && tfg_plan_device_computes(p, d);
  int share = 1;
  if (host) {
    share = busy > 1 ? host->threads / busy : host->threads;
    if (share < 1) share = 1;
  }
  /* (The lanes' sharing of the cores is the replay's: host_rate.) A hand-over wakes a worker, which waits for a core when more
   * workers than cores have work (the measured hop had one each). */
  int workers = 0;
  for (int d = 0; host && d < p->ndev; d++) workers += on_host(tfg_devices_at(p->ds, d)) && p->dev[d].nsteps > 0;
  double crowd = host && workers > host->cores ? (double)workers / host->cores : 1.0;
  for (int d = 0; d < p->ndev; d++) {
    const tfg_device *dv = tfg_devices_at(p->ds, d);
    tfg_cost_device *c = &t->dev[d];
    c->computes = tfg_plan_device_computes(p, d);
    if (on_host(dv) && host) {
      c->one_worker = true;
      c->threads = share;
      c->flops = host->flops * share;
      c->mem_bw = host->mem_bw * share;
      c->copy_bw = host->copy_bw;
      c->launch_s = host->launch_s;
      c->hop_s = host->hop_s * crowd;
      c->run_s = host->run_s * crowd;
    } else {
      c->one_worker = on_host(dv);
      c->flops = dv->flops;
      c->mem_bw = dv->mem_bw;
      c->copy_bw = dv->link_bw;
      c->launch_s = on_host(dv) ? 0 : GPU_LAUNCH_S;
    }
  }
}

void tfg_cost_table_free(tfg_cost_table *t) {
  free(t->dev);
  free(t->kernel_s);
  memset(t, 0, sizeof *t);
}

/* ---- what each step costs -------------------------------------------------------- */

/* A launch: its FLOPs at the device's rate or its bytes at its
 * bandwidth, whichever is longer, after the launch itself. */
static double launch_time(const tfg_plan *p, const tfg_cost_device *c, const tfg_plan_step *st) {
  const tfg_graph *g = p->g;
  const tfg_node *n = &g->nodes[st->node];
  double flops = 0, bytes = (double)tfg_node_bytes(n);
  int nin = 0;
  const tfg_node_id *in = tfg_plan_step_inputs(p, st, &nin);
  if (n->op == TFG_OP_SLICE) bytes *= 2; /* it reads only the part it writes (a replica's rows of a batch) */
  else
    for (int k = 0; k < nin; k++) bytes += (double)tfg_node_bytes(&g->nodes[in[k]]);
  if (st->chain >= 0) {
    const tfg_plan_chain *ch = &p->chains[st->chain];
    for (int k = 0; k < ch->nnodes; k++) flops += tfg_op_get(g->nodes[ch->nodes[k]].op)->flops(g, &g->nodes[ch->nodes[k]]);
  } else {
    flops = tfg_op_get(n->op)->flops(g, n);
  }
  double t = flops / c->flops, tb = bytes / c->mem_bw;
  return c->launch_s + (t > tb ? t : tb);
}

/* A copy of bytes into device d from device src (-1: the host's memory):
 * at the receiving device's copy bandwidth, a GPU's over PCIe from the
 * host. */
static double copy_time(const tfg_plan *p, const tfg_cost_table *t, int d, int src, double bytes) {
  const tfg_cost_device *c = &t->dev[d];
  double bw = c->copy_bw;
  bool host_src = src < 0 || on_host(tfg_devices_at(p->ds, src));
  if (host_src && !on_host(tfg_devices_at(p->ds, d)) && bw > PCIE_BW) bw = PCIE_BW;
  if (src >= 0 && tfg_devices_at(p->ds, src)->node != tfg_devices_at(p->ds, d)->node) { /* another node */
    double net = tfg_devices_bw(p->ds, src, d);
    if (net < bw) bw = net;
  }
  return c->launch_s + bytes / bw;
}

/* Whether bucket pb's ranks run the shared all-reduce: logical devices
 * of one GPU, at most 8 of them (runtime/collective.c's choice, up to
 * runtime/backend.h's TFG_REDUCE_ALL_MAX). */
static bool shared_allreduce(const tfg_plan *p, const tfg_plan_bucket *pb) {
  if (pb->nranks > 8) return false;
  for (int q = 0; q < pb->nranks; q++) {
    const tfg_device *d = tfg_devices_at(p->ds, pb->devices[q]), *d0 = tfg_devices_at(p->ds, pb->devices[0]);
    if (d->kind != TFG_DEVICE_CUDA || d->physical != d0->physical) return false;
  }
  return true;
}

/* Rank r's part of bucket b's all-reduce: its gradients copied in, the
 * ring over the bucket's R ranks, and the ring over the job's processes.
 * Returns the work its device does; *lat gets the time it waits on the
 * others (a hand-over per ring step: each waits for its predecessor's;
 * the network's latency). */
static double allreduce_time(const tfg_plan *p, const tfg_cost_table *t, const tfg_plan_bucket *pb, int r, double *lat) {
  const tfg_cost_device *c = &t->dev[pb->devices[r]];
  double B = (double)pb->bytes, R = pb->nranks, time = c->launch_s + B / c->copy_bw;
  /* a reduce-scatter or an all-gather is one of the ring's two phases:
   * half its steps and traffic (the shared pass is costed whole) */
  double phases = pb->op == TFG_OP_ALLREDUCE ? 2 : 1;
  /* the ring runs at its slowest hop: the network, when its ranks span nodes */
  double ring = c->copy_bw;
  bool across = false;
  for (int q = 0; q < pb->nranks; q++) {
    int a = pb->devices[q], b = pb->devices[(q + 1) % pb->nranks];
    if (tfg_devices_at(p->ds, a)->node == tfg_devices_at(p->ds, b)->node) continue;
    across = true;
    if (tfg_devices_bw(p->ds, a, b) < ring) ring = tfg_devices_bw(p->ds, a, b);
  }
  *lat = 0;
  if (R > 1 && shared_allreduce(p, pb)) { /* one pass: its chunk read from and written to every rank */
    time += c->launch_s + 2 * B / c->mem_bw;
    *lat += c->hop_s;
  } else if (R > 1) {
    time += phases * (R - 1) * c->launch_s + phases * (R - 1) / R * B / ring + (R - 1) / R * 3 * B / c->mem_bw;
    *lat += phases * (R - 1) * (c->hop_s + (across ? NET_LATENCY_S : 0));
  }
  if (t->ranks > 1) {
    double N = t->ranks;
    time += phases * (N - 1) / N * B / t->net_bw;
    *lat += phases * (N - 1) * t->net_s;
  }
  return time;
}

/* ---- the replay ------------------------------------------------------------------- */

/* A lane runs one step at a time: a host device's one worker serves all
 * its streams; a GPU has a lane per stream. */
typedef struct lane {
  int stream;  /* the stream whose step runs, or -1: idle */
  int turn;    /* the stream served first next time (the worker's round robin) */
  double left; /* the running step's work left, in seconds at full speed */
  double lat;  /* before that, time it waits on others (at no speed: it uses no core) */
  int threads; /* the host threads its work runs on: a kernel its device's share, a copy one */
  double from; /* when it started */
  bool cpu;    /* its work needs the host's cores (shared by every host lane running) */
} lane;

typedef struct stream_state {
  int *steps, n, pos; /* its steps' indices in the device's list, and the next */
  double ready;       /* when its last step ended */
} stream_state;

typedef struct replay {
  const tfg_plan *p;
  const tfg_cost_table *t;
  const uint8_t *need;
  stream_state (*s)[TFG_PLAN_STREAMS]; /* [ndev] */
  lane (*lanes)[TFG_PLAN_STREAMS];     /* [ndev]: lane 0 only on a one-worker device */
  double now;
  double *recorded;                    /* [nevents]: when its RECORD ran, or -1 */
  int *recorder;                       /* [nevents]: the device that ran it */
  bool *arrived;                       /* [nbuckets * ndev]: rank r has reached bucket b */
  double *launch_from, *launch_to;     /* every launch's interval, in order run */
  int *launch_dev, nlaunch, caplaunch;
  tfg_node_id *launch_node;
  double *ar_from, *ar_to;             /* [nbuckets * ndev]: each rank's all-reduce interval */
  tfg_prediction *out;
} replay;

/* Whether device d's step st takes part in the run. */
static bool step_needed(const replay *R, const tfg_plan_step *st) {
  switch (st->kind) {
  case TFG_PLAN_LAUNCH:
  case TFG_PLAN_COPY: return R->need[st->node] != 0;
  case TFG_PLAN_ALLREDUCE: return R->need[R->p->buckets[st->bucket].nodes[0]] != 0;
  default: return true;
  }
}

/* Rank of device d in bucket pb. */
static int rank_in(const tfg_plan_bucket *pb, int d) {
  for (int r = 0; r < pb->nranks; r++)
    if (pb->devices[r] == d) return r;
  TFG_ASSERT(!"the device is not in the bucket");
  return -1;
}

static lane *lane_of(replay *R, int d, int s) { return &R->lanes[d][R->t->dev[d].one_worker ? 0 : s]; }

static const tfg_plan_step *head(const replay *R, int d, int s) {
  const stream_state *ss = &R->s[d][s];
  return ss->pos < ss->n ? &R->p->dev[d].steps[ss->steps[ss->pos]] : NULL;
}

/* Starts a step of `work` seconds on device d's stream s, after `lat`
 * seconds of waiting. */
static void start(replay *R, int d, int s, double work, double lat, bool cpu) {
  lane *L = lane_of(R, d, s);
  L->stream = s;
  L->left = work;
  L->lat = lat;
  L->threads = 1;
  L->from = R->now;
  L->cpu = cpu && R->t->dev[d].one_worker;
}

/* Ends the step running on lane L of device d. */
static void finish(replay *R, int d, lane *L) {
  const tfg_plan *p = R->p;
  int s = L->stream;
  const tfg_plan_step *st = head(R, d, s);
  tfg_predicted_device *pd = &R->out->dev[d];
  double took = R->now - L->from;
  switch (st->kind) {
  case TFG_PLAN_LAUNCH:
    if (p->g->nodes[st->node].op == TFG_OP_INPUT) {
      pd->copy_s += took;
      break;
    }
    pd->compute_s += took;
    if (R->nlaunch == R->caplaunch) {
      R->caplaunch = R->caplaunch ? 2 * R->caplaunch : 256;
      R->launch_from = realloc(R->launch_from, sizeof *R->launch_from * (size_t)R->caplaunch);
      R->launch_to = realloc(R->launch_to, sizeof *R->launch_to * (size_t)R->caplaunch);
      R->launch_dev = realloc(R->launch_dev, sizeof *R->launch_dev * (size_t)R->caplaunch);
      R->launch_node = realloc(R->launch_node, sizeof *R->launch_node * (size_t)R->caplaunch);
      TFG_ASSERT(R->launch_from && R->launch_to && R->launch_dev && R->launch_node);
    }
    R->launch_node[R->nlaunch] = st->node;
    R->launch_from[R->nlaunch] = L->from;
    R->launch_to[R->nlaunch] = R->now;
    R->launch_dev[R->nlaunch++] = d;
    break;
  case TFG_PLAN_COPY: pd->copy_s += took; break;
  case TFG_PLAN_ALLREDUCE: {
    size_t slot = (size_t)st->bucket * (size_t)p->ndev + (size_t)rank_in(&p->buckets[st->bucket], d);
    R->ar_from[slot] = L->from;
    R->ar_to[slot] = R->now;
    pd->allreduce_s += took;
    break;
  }
  default: break; /* a WAIT's wake-up */
  }
  R->s[d][s].pos++;
  R->s[d][s].ready = R->now;
  if (R->now > pd->end_s) pd->end_s = R->now;
  L->stream = -1;
}

/* Tries to start the head step of device d's stream s now (its lane
 * idle): events and records take no time and are done at once (true:
 * look again); a step with work starts (true); false when it must wait
 * (an event not recorded, a bucket some rank has not reached). */
static bool try_start(replay *R, int d, int s) {
  const tfg_plan *p = R->p;
  const tfg_cost_table *t = R->t;
  const tfg_plan_step *st = head(R, d, s);
  if (!st) return false;
  stream_state *ss = &R->s[d][s];
  switch (st->kind) {
  case TFG_PLAN_RECORD:
    R->recorded[st->event] = R->now;
    R->recorder[st->event] = d;
    ss->pos++;
    return true;
  case TFG_PLAN_WAIT: {
    double rec = R->recorded[st->event];
    if (rec < 0) return false;
    /* released by another device after this stream went idle: its
     * worker was asleep and wakes */
    if (rec > ss->ready && R->recorder[st->event] != d && t->dev[d].hop_s > 0) {
      start(R, d, s, 0, t->dev[d].hop_s, false); /* the step ends the wait */
      return true;
    }
    ss->pos++;
    return true;
  }
  case TFG_PLAN_LAUNCH: {
    const tfg_node *n = &p->g->nodes[st->node];
    double work;
    if (n->op == TFG_OP_INPUT) work = copy_time(p, t, d, -1, (double)tfg_node_bytes(n));
    else if (t->kernel_s && t->kernel_s[st->node] >= 0) work = t->dev[d].launch_s + t->kernel_s[st->node];
    else work = launch_time(p, &t->dev[d], st);
    start(R, d, s, work, 0, true);
    if (n->op != TFG_OP_INPUT && t->dev[d].threads > 1) lane_of(R, d, s)->threads = t->dev[d].threads;
    return true;
  }
  case TFG_PLAN_COPY:
    start(R, d, s, copy_time(p, t, d, st->src, (double)tfg_node_bytes(&p->g->nodes[st->node])), 0, true);
    return true;
  case TFG_PLAN_ALLREDUCE: {
    /* every rank at once, once every rank has reached it with its lane free */
    const tfg_plan_bucket *pb = &p->buckets[st->bucket];
    bool *arr = &R->arrived[(size_t)st->bucket * (size_t)p->ndev];
    arr[rank_in(pb, d)] = true;
    for (int r = 0; r < pb->nranks; r++) {
      int dr = pb->devices[r];
      const tfg_plan_step *h = head(R, dr, TFG_PLAN_STREAM_COLLECTIVE);
      if (!arr[r] || !h || h->kind != TFG_PLAN_ALLREDUCE || h->bucket != st->bucket) return false;
      if (lane_of(R, dr, TFG_PLAN_STREAM_COLLECTIVE)->stream >= 0 && dr != d) return false;
    }
    for (int r = 0; r < pb->nranks; r++) {
      double lat, work = allreduce_time(p, t, pb, r, &lat);
      start(R, pb->devices[r], TFG_PLAN_STREAM_COLLECTIVE, work, lat, true);
    }
    return true;
  }
  }
  return false;
}

/* Starts what can start now on every idle lane, a worker's streams in
 * round robin. */
static void start_all(replay *R) {
  for (bool again = true; again;) {
    again = false;
    for (int d = 0; d < R->p->ndev; d++) {
      bool one = R->t->dev[d].one_worker;
      for (int l = 0; l < (one ? 1 : TFG_PLAN_STREAMS); l++) {
        lane *L = &R->lanes[d][l];
        for (int k = 0; L->stream < 0 && k < (one ? TFG_PLAN_STREAMS : 1); k++) {
          int s = one ? (L->turn + k) % TFG_PLAN_STREAMS : l;
          if (try_start(R, d, s)) {
            again = true;
            if (one && L->stream >= 0) L->turn = (s + 1) % TFG_PLAN_STREAMS;
            k = -1; /* a record or wait done: look at the streams again */
          }
        }
      }
    }
  }
}

/* The speed of the host lanes now: the threads their running steps ask
 * for over the cores (1 when they fit). */
static double host_rate(const replay *R) {
  const tfg_host_costs *h = R->t->host;
  if (!h) return 1;
  int want = 0;
  for (int d = 0; d < R->p->ndev; d++)
    if (R->t->dev[d].one_worker && R->lanes[d][0].stream >= 0 && R->lanes[d][0].cpu && R->lanes[d][0].lat <= 0)
      want += R->lanes[d][0].threads;
  return want > h->cores ? (double)h->cores / want : 1.0;
}

void tfg_predict(const tfg_plan *p, const tfg_cost_table *t, const tfg_train_step *st, tfg_prediction *out) {
  int ndev = p->ndev, nb = p->nbuckets;
  *out = (tfg_prediction){.ndev = ndev, .nreplicas = st->nreplicas, .pipe = st->pipe};
  out->dev = calloc((size_t)ndev + 1, sizeof *out->dev);
  /* what the step's run fetches, as runtime/train.c fetches it */
  int nfetch = st->nreplicas + st->nreplicas * st->nmetrics + st->nupdates + st->nscalers;
  tfg_node_id *fetch = malloc(sizeof *fetch * ((size_t)nfetch + 1));
  uint8_t *need = malloc((size_t)p->g->nnodes + 1);
  TFG_ASSERT(out->dev && fetch && need);
  int n = 0;
  for (int k = 0; k < st->nreplicas; k++) fetch[n++] = st->losses[k];
  for (int k = 0; k < st->nreplicas * st->nmetrics; k++) fetch[n++] = st->replica_metrics[k];
  for (int k = 0; k < st->nupdates; k++) fetch[n++] = st->updates[k];
  for (int k = 0; k < st->nscalers; k++) fetch[n++] = st->scalers[k];
  tfg_plan_mark_needed(p, fetch, n, need);

  replay R = {.p = p, .t = t, .need = need, .out = out};
  R.s = calloc((size_t)ndev + 1, sizeof *R.s);
  R.lanes = calloc((size_t)ndev + 1, sizeof *R.lanes);
  R.recorded = malloc(sizeof *R.recorded * ((size_t)p->nevents + 1));
  R.recorder = calloc((size_t)p->nevents + 1, sizeof *R.recorder);
  size_t nslots = (size_t)nb * (size_t)ndev + 1;
  R.arrived = calloc(nslots, sizeof *R.arrived);
  R.ar_from = malloc(sizeof *R.ar_from * nslots);
  R.ar_to = malloc(sizeof *R.ar_to * nslots);
  TFG_ASSERT(R.s && R.lanes && R.recorded && R.recorder && R.arrived && R.ar_from && R.ar_to);
  for (int e = 0; e < p->nevents; e++) R.recorded[e] = -1;
  for (size_t k = 0; k < nslots; k++) R.ar_from[k] = R.ar_to[k] = -1;
  for (int d = 0; d < ndev; d++) {
    int work = 0;
    for (int s = 0; s < TFG_PLAN_STREAMS; s++) {
      stream_state *ss = &R.s[d][s];
      ss->steps = malloc(sizeof *ss->steps * ((size_t)p->dev[d].nsteps + 1));
      TFG_ASSERT(ss->steps != NULL);
      for (int k = 0; k < p->dev[d].nsteps; k++)
        if (p->dev[d].steps[k].stream == s && step_needed(&R, &p->dev[d].steps[k])) ss->steps[ss->n++] = k;
      work += ss->n;
      R.lanes[d][s].stream = -1;
    }
    /* the run queued: each host worker with work wakes, as a run of the
     * executor measured beyond its ops */
    if (work && t->dev[d].run_s > 0) {
      R.lanes[d][0].stream = TFG_PLAN_STREAM_COMPUTE;
      R.lanes[d][0].lat = t->dev[d].run_s;
      R.lanes[d][0].cpu = false;
      R.lanes[d][0].from = -1; /* not a step: nothing to finish */
    }
  }

  for (;;) {
    start_all(&R);
    /* the next step to end, at the lanes' speeds now */
    double rate = host_rate(&R), dt = -1;
    for (int d = 0; d < ndev; d++)
      for (int l = 0; l < TFG_PLAN_STREAMS; l++) {
        const lane *L = &R.lanes[d][l];
        if (L->stream < 0) continue;
        double x = L->lat > 0 ? L->lat : L->left / (L->cpu ? rate : 1);
        if (dt < 0 || x < dt) dt = x;
      }
    if (dt < 0) break; /* nothing runs, nothing can start: done */
    R.now += dt;
    for (int d = 0; d < ndev; d++)
      for (int l = 0; l < TFG_PLAN_STREAMS; l++) {
        lane *L = &R.lanes[d][l];
        if (L->stream < 0) continue;
        if (L->lat > 0) {
          L->lat -= dt;
          if (L->lat < 1e-15) L->lat = 0;
          if (L->lat > 0 || L->left > 1e-15) continue;
        } else {
          L->left -= dt * (L->cpu ? rate : 1);
          if (L->left > 1e-15) continue;
        }
        if (L->from < 0) L->stream = -1; /* the wake-up at the start */
        else finish(&R, d, L);
      }
  }

  for (int d = 0; d < ndev; d++) {
    tfg_predicted_device *pd = &out->dev[d];
    for (int s = 0; s < TFG_PLAN_STREAMS; s++) {
      TFG_ASSERT(R.s[d][s].pos == R.s[d][s].n); /* a validated plan runs to its end */
      free(R.s[d][s].steps);
    }
    if (pd->end_s > out->step_s) out->step_s = pd->end_s;
    /* the all-reduce while the device's launches run (on a GPU's other
     * stream) is hidden behind them; a host device's one worker runs
     * either, so none of it there */
    for (int b = 0; b < nb; b++)
      for (int r = 0; r < p->buckets[b].nranks; r++) {
        size_t slot = (size_t)b * (size_t)ndev + (size_t)r;
        if (p->buckets[b].devices[r] != d || R.ar_from[slot] < 0) continue;
        for (int k = 0; k < R.nlaunch; k++) {
          if (R.launch_dev[k] != d) continue;
          double lo = R.launch_from[k] > R.ar_from[slot] ? R.launch_from[k] : R.ar_from[slot];
          double hi = R.launch_to[k] < R.ar_to[slot] ? R.launch_to[k] : R.ar_to[slot];
          if (hi > lo) pd->hidden_s += hi - lo;
        }
      }
  }
  /* A pipeline's span on its stages (the GPUs: the host cuts the batch):
   * from the first launch to the end of the last before its updates, and
   * each stage's launches in it. */
  if (st->pipe.devices > 1) {
    double lo = -1, hi = 0;
    for (int k = 0; k < R.nlaunch; k++) {
      int d = R.launch_dev[k];
      if (R.launch_node[k] >= st->pipe_post || tfg_devices_at(p->ds, d)->kind == TFG_DEVICE_CPU) continue;
      out->dev[d].pipe_s += R.launch_to[k] - R.launch_from[k];
      if (lo < 0 || R.launch_from[k] < lo) lo = R.launch_from[k];
      if (R.launch_to[k] > hi) hi = R.launch_to[k];
    }
    out->pipe_s = lo >= 0 ? hi - lo : 0;
  }
  free(R.s);
  free(R.lanes);
  free(R.launch_node);
  free(R.recorded);
  free(R.recorder);
  free(R.arrived);
  free(R.ar_from);
  free(R.ar_to);
  free(R.launch_from);
  free(R.launch_to);
  free(R.launch_dev);
  free(fetch);
  free(need);
}

void tfg_prediction_free(tfg_prediction *r) {
  free(r->dev);
  memset(r, 0, sizeof *r);
}

/* ---- the text ---------------------------------------------------------------------- */

/* "412 µs", "3.21 ms", "1.25 s": three significant digits. */
static void put_time(tfg_strbuf *out, double s) {
  const char *unit = "s";
  double v = s;
  if (s < 1e-3) v = s * 1e6, unit = "us";
  else if (s < 1) v = s * 1e3, unit = "ms";
  tfg_strbuf_printf(out, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
}

static void put_cell(tfg_strbuf *out, double s) {
  tfg_strbuf cell = {0};
  put_time(&cell, s);
  tfg_strbuf_printf(out, " %11s", cell.data ? cell.data : "");
  tfg_strbuf_free(&cell);
}

void tfg_prediction_print(const tfg_plan *p, const tfg_cost_table *t, const tfg_prediction *r, tfg_strbuf *out) {
  tfg_strbuf_puts(out, "predicted step: ");
  put_time(out, r->step_s);
  tfg_strbuf_printf(out, " (%.1f steps/s)", r->step_s > 0 ? 1 / r->step_s : 0.0);
  if (t->ranks > 1) tfg_strbuf_printf(out, ", each of %d ranks", t->ranks);
  tfg_strbuf_putc(out, '\n');
  if (t->host)
    tfg_strbuf_printf(out,
                      "host measured: %.1f GFLOP/s and %.1f GB/s per thread, copies %.1f GB/s, %.1f us per op, %.1f us a run, "
                      "%.1f us a hand-over; "
                      "%d cores, %d threads\n",
                      t->host->flops / 1e9, t->host->mem_bw / 1e9, t->host->copy_bw / 1e9, t->host->launch_s * 1e6, t->host->run_s * 1e6, t->host->hop_s * 1e6,
                      t->host->cores, t->host->threads);
  /* A pipeline: each stage device's bubble, the part of the step it does
   * not compute, and what equal stages would give (Megatron-LM's
   * (P - 1) / (v m + P - 1)). */
  const tfg_pipe *pp = &r->pipe;
  bool pipe = pp->devices > 1;
  if (pipe) {
    int P = pp->devices, v = pp->chunks, M = pp->micro;
    tfg_strbuf_printf(out, "pipeline: %d devices, %d stages, %d micro-batches, %s; equal stages would idle "
                           "(P - 1) / (%sm + P - 1) = %.1f%%\n"
                           "of its span, from the first forward to the last backward (the updates after it not counted)\n",
                      P, P * v, M, pp->kind == TFG_SCHEDULE_GPIPE ? "gpipe" : pp->kind == TFG_SCHEDULE_1F1B ? "1f1b" : "interleaved",
                      v > 1 ? "v " : "", 100.0 * (P - 1) / ((double)v * M + P - 1));
  }
  tfg_strbuf_printf(out, "%-8s %11s %11s %11s %11s %11s%s\n", "device", "compute", "copies", "all-reduce", "hidden",
                    "ends", pipe ? "      bubble" : "");
  for (int d = 0; d < r->ndev; d++) {
    const tfg_predicted_device *pd = &r->dev[d];
    if (pd->end_s <= 0) continue; /* nothing of this step runs there */
    tfg_strbuf_printf(out, "%-8s", tfg_plan_dev_name(p, d));
    put_cell(out, pd->compute_s);
    put_cell(out, pd->copy_s);
    put_cell(out, pd->allreduce_s);
    if (pd->allreduce_s > 0) tfg_strbuf_printf(out, " %10.0f%%", 100 * pd->hidden_s / pd->allreduce_s);
    else tfg_strbuf_printf(out, " %11s", "-");
    put_cell(out, pd->end_s);
    /* the stages are the GPUs (parallel(...) spans them); the host cuts the batch */
    if (pipe && tfg_devices_at(p->ds, d)->kind != TFG_DEVICE_CPU && r->pipe_s > 0)
      tfg_strbuf_printf(out, " %10.1f%%", 100 * (1 - pd->pipe_s / r->pipe_s));
    tfg_strbuf_putc(out, '\n');
  }
}
