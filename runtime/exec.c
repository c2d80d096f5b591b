/* runtime/exec.c: runs a plan on the backends (exec.h is the contract,
 * docs/runtime.md the rules).
 *
 * Everything a step needs is resolved once, when the executor is made:
 * each device's arena, every tensor's address in it, the input and output
 * tensors of every launch, each bucket's slots, and for each fused chain
 * of the plan the FUSED node its launch runs (its program compiled from
 * the chain: ir/fused.h). A run then only decides
 * which steps its fetches need and queues them, so the hot path is a walk
 * over arrays with no allocation and no lock of its own: the backends'
 * queues are the only synchronization. Runs captured as CUDA Graphs and
 * replayed are runtime/exec_graph.c's; the state both share is
 * runtime/exec_impl.h. */
#include "runtime/exec_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/fused.h"
#include "runtime/backend_fault.h"
#include "runtime/collective.h"
#include "runtime/mpi.h"
#include "runtime/registry.h"
#include "runtime/trace.h"


/* Whether n's value is in its device's persistent region (the plan's
 * tfg_plan_persistent): a param, optimizer state, or a constant, which
 * write_constants puts there once. */
static bool persistent(const tfg_node *n) {
  return n->op == TFG_OP_PARAM || n->op == TFG_OP_STATE || n->op == TFG_OP_CONST;
}

/* The address of node id's value on device d (its own value or the copy
 * received there). Empty tensors have no buffer: the arena itself. */
void *exec_addr(const exec_dev *dv, tfg_node_id id) {
  int64_t off = dv->own[id] >= 0 ? dv->own[id] : dv->copy[id];
  return off >= 0 ? dv->arena + off : dv->arena;
}

/* ---- kernels ---------------------------------------------------------------- */

/* The graph node a kernel ran for: a FUSED node stands for its chain's
 * last member, whose location a failure inside the chain reports. */
static tfg_node_id node_id(const tfg_exec *x, const tfg_node *node) {
  if (node->op == TFG_OP_FUSED) {
    const tfg_plan_chain *c = &x->p->chains[node - x->fused];
    return c->nodes[c->nnodes - 1];
  }
  return (tfg_node_id)(node - x->g->nodes);
}

/* The index of the first NaN or Inf in a float tensor, or -1. */
static int64_t first_nonfinite(const tfg_tensor *t) {
  int64_t n = tfg_shape_numel(&t->shape);
  if (t->dtype == TFG_DTYPE_F32) {
    const float *v = t->data;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(v[i])) return i;
  } else if (t->dtype == TFG_DTYPE_F64) {
    const double *v = t->data;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(v[i])) return i;
  }
  return -1;
}

/* What every launch runs: the backend's kernel for the op, then the
 * numerics check; a failure remembers its node for the report. */
static tfg_status run_kernel(tfg_kernel_ctx *k, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  exec_kctx *c = (exec_kctx *)k;
  exec_dev *dv = c->dev;
  tfg_exec *x = dv->x;
  tfg_kernel_fn fn = tfg_backend_kernel(dv->b, node);
  k->node = node_id(x, node);
  tfg_status st;
  if (dv->device->index == x->fault_device && k->step == x->fault_step)
    st = tfg_kernel_fail(k, TFG_ERR_DEVICE, "injected fault (TFG_FAULT_DEVICE=%d, TFG_FAULT_STEP=%lld)", x->fault_device,
                         (long long)x->fault_step);
  else
    st = fn ? fn(k, node, in, out) : tfg_kernel_fail(k, TFG_ERR_DEVICE, "no %s kernel for it", tfg_backend_name(dv->b));
  if (st == TFG_OK && x->check_numerics && dv->host_memory) {
    int64_t bad = first_nonfinite(out);
    if (bad >= 0) {
      double v = out->dtype == TFG_DTYPE_F32 ? ((float *)out->data)[bad] : ((double *)out->data)[bad];
      tfg_strbuf sh = {0};
      tfg_shape_format(&sh, out->dtype, &out->shape);
      st = tfg_kernel_fail(k, TFG_ERR_NUMERIC, "produced %g at element %lld of its %s result", v, (long long)bad, sh.data);
      tfg_strbuf_free(&sh);
    }
  }
  if (st != TFG_OK) atomic_store(&dv->failed, node_id(x, node));
  else atomic_fetch_add(&dv->done, 1);
  return st;
}

/* ---- creation --------------------------------------------------------------- */

/* The backend of device d (runtime/registry.h picks it), its streams,
 * trace and arena. A device no backend can run is refused with the
 * registration's reason. */
static tfg_status open_backend(tfg_exec *x, int d, const tfg_exec_opts *o, tfg_diag *diag) {
  exec_dev *dv = &x->dev[d];
  const tfg_device *dev = dv->device;
  tfg_backend_opts bo = {.preallocate = o->preallocate, .tf32 = o->tf32, .check_numerics = o->check_numerics,
                         .sw = o->sw};
  tfg_strbuf why = {0};
  dv->b = tfg_backend_new(dev, &bo, &why);
  if (!dv->b) {
    tfg_diag_error(diag, NULL, "%s (%s) cannot run programs: %s", dev->name, dev->hardware,
                   why.data ? why.data : "no backend");
    tfg_diag_help(diag, "run on host devices: --devices host*N");
    tfg_strbuf_free(&why);
    return TFG_ERR_DEVICE;
  }
  tfg_strbuf_free(&why);
  dv->host_memory = tfg_backend_is_host(dv->b);
  for (int s = 0; s < TFG_PLAN_STREAMS; s++) dv->s[s] = tfg_backend_stream_create(dv->b);
  if (o->trace) {
    static const char *const names[TFG_PLAN_STREAMS] = {"compute", "copy", "collective"};
    for (int s = 0; s < TFG_PLAN_STREAMS; s++) tfg_trace_name(o->trace, dev->index, s, dev->name, names[s]);
    tfg_backend_set_trace(dv->b, o->trace);
  }
  const tfg_plan_device *pd = &x->p->dev[d];
  int64_t bytes = pd->peak > 0 ? pd->peak : 1;
  dv->arena = tfg_backend_alloc(dv->b, (size_t)bytes);
  if (!dv->arena) {
    tfg_mem_stats ms;
    int64_t free_bytes = 0;
    tfg_backend_mem_stats(dv->b, &ms, &free_bytes);
    tfg_strbuf need = {0}, cap = {0}, fr = {0}, big = {0};
    tfg_size_format(&need, bytes);
    tfg_size_format(&cap, dev->memory);
    tfg_size_format(&fr, free_bytes);
    tfg_size_format(&big, ms.largest_free);
    tfg_diag_error(diag, NULL,
                   "out of memory on %s: its plan needs %s (%lld bytes) and the device has %s: %s free, "
                   "the largest free block %s",
                   dev->name, need.data, (long long)bytes, cap.data, fr.data, big.data);
    tfg_strbuf_free(&need);
    tfg_strbuf_free(&cap);
    tfg_strbuf_free(&fr);
    tfg_strbuf_free(&big);
    return TFG_ERR_OOM;
  }
  dv->kctx.dev = dv; /* its pool comes once every backend is open (share_cores) */
  dv->kctx.k.transport = tfg_mpi_transport(); /* SEND, RECV: a pipeline across ranks */
  return TFG_OK;
}

/* Resolves device d's buffers and launches into addresses. */
static void resolve(tfg_exec *x, int d) {
  exec_dev *dv = &x->dev[d];
  const tfg_plan_device *pd = &x->p->dev[d];
  for (int i = 0; i < pd->nbuffers; i++) {
    const tfg_plan_buffer *bf = &pd->buffers[i];
    (bf->copy ? dv->copy : dv->own)[bf->node] = bf->offset;
  }
  /* A view (docs/plan.md, Views) is its base's bytes: the base's address,
   * on the device they share. */
  for (tfg_node_id i = 0; x->p->view_of && i < x->g->nnodes; i++)
    if (x->p->view_of[i] >= 0 && tfg_placement_device(x->p->pl, i) == d) dv->own[i] = dv->own[x->p->view_of[i]];
  dv->launch = calloc((size_t)pd->nsteps + 1, sizeof *dv->launch);
  dv->launched = malloc(sizeof *dv->launched * ((size_t)pd->nsteps + 1));
  TFG_ASSERT(dv->launch && dv->launched);
  for (int k = 0; k < pd->nsteps; k++) {
    const tfg_plan_step *st = &pd->steps[k];
    if (st->kind != TFG_PLAN_LAUNCH) continue;
    const tfg_node *nd = st->chain >= 0 ? &x->fused[st->chain] : &x->g->nodes[st->node];
    exec_launch *l = &dv->launch[k];
    l->node = nd;
    l->in = calloc((size_t)nd->ninputs + 1, sizeof *l->in);
    TFG_ASSERT(l->in != NULL);
    for (int j = 0; j < nd->ninputs; j++) {
      const tfg_node *in = &x->g->nodes[nd->inputs[j]];
      l->in[j] = (tfg_tensor){exec_addr(dv, nd->inputs[j]), in->dtype, in->shape};
    }
    l->out = (tfg_tensor){exec_addr(dv, st->node), nd->dtype, nd->shape};
  }
}

/* One communicator per group of devices: buckets of the same group share
 * it (their collectives are queued in one order on every rank). Which
 * collective runs a group is the backend registration's choice
 * (tfg_coll_new_for: the ring, NCCL or both hierarchically); a group it
 * refuses (host and CUDA devices mixed) or cannot start (NCCL's error) is
 * reported at the bucket's first parameter, TFG_ERR_DEVICE. */
static tfg_status open_buckets(tfg_exec *x, tfg_diag *d) {
  const tfg_plan *p = x->p;
  x->buckets = calloc((size_t)p->nbuckets + 1, sizeof *x->buckets);
  TFG_ASSERT(x->buckets != NULL);
  for (int b = 0; b < p->nbuckets; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    exec_bucket *eb = &x->buckets[b];
    bool used = true;
    for (int r = 0; r < pb->nranks; r++) used &= x->dev[pb->devices[r]].b != NULL;
    if (!used) continue; /* an executor for part of the devices never runs it */
    for (int a = 0; a < b && !eb->coll; a++) {
      const tfg_plan_bucket *pa = &p->buckets[a];
      if (x->buckets[a].coll && pa->nranks == pb->nranks &&
          memcmp(pa->devices, pb->devices, sizeof *pa->devices * (size_t)pb->nranks) == 0)
        eb->coll = x->buckets[a].coll;
    }
    if (!eb->coll) {
      tfg_backend **bs = malloc(sizeof *bs * (size_t)pb->nranks);
      tfg_stream **ss = malloc(sizeof *ss * (size_t)pb->nranks);
      TFG_ASSERT(bs && ss);
      for (int r = 0; r < pb->nranks; r++) {
        bs[r] = x->dev[pb->devices[r]].b;
        ss[r] = x->dev[pb->devices[r]].s[TFG_PLAN_STREAM_COLLECTIVE];
      }
      tfg_strbuf why = {0};
      eb->coll = tfg_coll_new_for(pb->nranks, bs, ss, &why);
      free(bs);
      free(ss);
      if (!eb->coll) {
        tfg_strbuf names = {0};
        for (int r = 0; r < pb->nranks; r++)
          tfg_strbuf_printf(&names, "%s%s", r ? ", " : "", x->dev[pb->devices[r]].device->name);
        const tfg_node *first = &x->g->nodes[pb->nodes[0]];
        tfg_diag_error(d, &first->loc, "cannot all-reduce gradients across %s: %s", names.data,
                       why.data ? why.data : "no collective for these devices");
        tfg_strbuf_free(&names);
        tfg_strbuf_free(&why);
        return TFG_ERR_DEVICE;
      }
      tfg_strbuf_free(&why);
      eb->own_coll = true;
    }
    eb->at = calloc((size_t)pb->nranks, sizeof *eb->at);
    eb->slots = malloc(sizeof *eb->slots * ((size_t)pb->nranks * (size_t)pb->nnodes + 1));
    eb->counts = malloc(sizeof *eb->counts * ((size_t)pb->nnodes + 1));
    TFG_ASSERT(eb->at && eb->slots && eb->counts);
    for (int k = 0; k < pb->nnodes; k++) eb->counts[k] = (size_t)tfg_shape_numel(&x->g->nodes[pb->nodes[k]].shape);
    for (int r = 0; r < pb->nranks; r++)
      for (int k = 0; k < pb->nnodes; k++)
        eb->slots[r * pb->nnodes + k] = exec_addr(&x->dev[pb->devices[r]], pb->nodes[r * pb->nnodes + k]);
  }
  return TFG_OK;
}

/* Host devices that run kernels at once share the machine's cores: when
 * several of the used host devices compute (GPUs do not count: their
 * backends do not declare sets_threads), the kernel pool (matrix products
 * included: kernels/cpu/blas.h) gets one share of the threads, as the
 * devices' kernels run at the same time. Tells the backends their share
 * (set_threads) and returns the pool's threads. After the backends are
 * open. */
static int share_cores(tfg_exec *x, const tfg_exec_opts *o) {
  const tfg_plan *p = x->p;
  tfg_backend *cpu = NULL; /* a backend whose kernels run on the CPU */
  int busy = 0;
  for (int dv = 0; dv < x->ndev; dv++) {
    tfg_backend *b = x->dev[dv].b;
    if (!b || !tfg_backend_get_caps(b)->sets_threads) continue; /* not used, or a GPU: it computes on itself */
    cpu = b;
    busy += tfg_plan_device_computes(p, dv);
  }
  int share = o->threads;
  if (busy > 1) {
    int all = o->threads > 0 ? o->threads : tfg_backend_set_threads(cpu, 0);
    share = all / busy > 0 ? all / busy : 1;
  }
  for (int dv = 0; dv < x->ndev; dv++) {
    tfg_backend *b = x->dev[dv].b;
    if (b && tfg_backend_get_caps(b)->sets_threads) tfg_backend_set_threads(b, share);
  }
  return share;
}

/* --trace: a fused chain's launch carries its last member's label (the
 * graph's, tfg_trace_label_nodes), as its own launch would have. */
static void label_fused(tfg_exec *x, tfg_trace *t) {
  if (!t || x->p->nchains == 0) return;
  x->trace = t;
  x->fused_labels = calloc((size_t)x->p->nchains, sizeof *x->fused_labels);
  TFG_ASSERT(x->fused_labels != NULL);
  for (int c = 0; c < x->p->nchains; c++) {
    const tfg_plan_chain *ch = &x->p->chains[c];
    x->fused_labels[c] = tfg_trace_label_of(t, &x->g->nodes[ch->nodes[ch->nnodes - 1]]);
  }
  tfg_trace_label_nodes(t, x->fused, x->p->nchains, x->fused_labels);
}

/* The FUSED node of each chain, with its program. The plan was validated,
 * so every chain compiles. */
static void make_fused(tfg_exec *x) {
  const tfg_plan *p = x->p;
  x->fused = calloc((size_t)p->nchains + 1, sizeof *x->fused);
  x->progs = calloc((size_t)p->nchains + 1, sizeof *x->progs);
  x->inner = calloc((size_t)x->g->nnodes + 1, 1);
  TFG_ASSERT(x->fused && x->progs && x->inner);
  for (int c = 0; c < p->nchains; c++) {
    const tfg_plan_chain *ch = &p->chains[c];
    const tfg_node *last = &x->g->nodes[ch->nodes[ch->nnodes - 1]];
    bool built = tfg_fused_build(x->g, ch->nodes, ch->nnodes, ch->inputs, ch->ninputs, &x->progs[c]);
    TFG_ASSERT(built);
    x->fused[c] = (tfg_node){.op = TFG_OP_FUSED, .dtype = last->dtype, .shape = last->shape, .ninputs = ch->ninputs,
                             .inputs = ch->inputs, .loc = last->loc, .pin = last->pin};
    x->fused[c].attrs.data = &x->progs[c];
    for (int e = 0; e < ch->nnodes - 1; e++) x->inner[ch->nodes[e]] = 1;
  }
}

/* Writes every constant's value into its persistent buffer on each used
 * device, once: the plan never launches a constant, so no run (and no
 * replay of a captured one) uploads it again. The copies are
 * synchronized here, as the graph's values are pageable host memory. A
 * device that fails is reported on it. */
static tfg_status write_constants(tfg_exec *x, tfg_diag *d) {
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    const tfg_plan_device *pd = &x->p->dev[dv];
    if (!e->b) continue;
    bool any = false;
    for (int k = 0; k < pd->nbuffers && pd->buffers[k].persistent; k++) {
      const tfg_node *nd = &x->g->nodes[pd->buffers[k].node];
      if (nd->op != TFG_OP_CONST || pd->buffers[k].copy) continue;
      tfg_backend_copy_from_host(e->b, e->s[0], e->arena + pd->buffers[k].offset, nd->attrs.data, (size_t)tfg_node_bytes(nd));
      any = true;
    }
    if (!any) continue;
    tfg_strbuf msg = {0};
    tfg_status st = tfg_backend_synchronize(e->b, e->s[0], &msg);
    if (st != TFG_OK)
      tfg_diag_error(d, NULL, "%s failed: %s", e->device->name, msg.data && *msg.data ? msg.data : tfg_status_str(st));
    tfg_strbuf_free(&msg);
    if (st != TFG_OK) return st;
  }
  return TFG_OK;
}

tfg_status tfg_exec_new(const tfg_plan *p, const tfg_exec_opts *o, tfg_diag *d, tfg_exec **out) {
  static const tfg_exec_opts none = {0};
  if (!o) o = &none;
  tfg_exec *x = calloc(1, sizeof *x);
  TFG_ASSERT(x != NULL);
  x->p = p;
  x->g = p->g;
  x->ndev = p->ndev;
  x->check_numerics = o->check_numerics;
  x->fault_device = o->sw.fault_at_step ? o->sw.fault_device : -1;
  x->fault_step = o->sw.fault_at_step ? o->sw.fault_step : -1;
  x->fault_assert = o->sw.fault_assert;
  int32_t n = x->g->nnodes;
  x->dev = calloc((size_t)x->ndev, sizeof *x->dev);
  x->ev = calloc((size_t)p->nevents + 1, sizeof *x->ev);
  x->issued = calloc((size_t)p->nevents + 1, sizeof *x->issued);
  x->ev_dev = malloc(sizeof *x->ev_dev * ((size_t)p->nevents + 1));
  TFG_ASSERT(x->ev_dev != NULL);
  for (int dv = 0; dv < p->ndev; dv++)
    for (int k = 0; k < p->dev[dv].nsteps; k++)
      if (p->dev[dv].steps[k].kind == TFG_PLAN_RECORD) x->ev_dev[p->dev[dv].steps[k].event] = dv;
  x->need = calloc((size_t)n + 1, 1);
  x->fed = calloc((size_t)n + 1, sizeof *x->fed);
  x->fetch_first = malloc(sizeof *x->fetch_first * ((size_t)n + 1));
  TFG_ASSERT(x->dev && x->ev && x->issued && x->need && x->fed && x->fetch_first);
  for (int32_t i = 0; i < n; i++) x->fetch_first[i] = -1;
  if (p->view_of) {
    x->view_head = malloc(sizeof *x->view_head * ((size_t)n + 1));
    x->view_next = malloc(sizeof *x->view_next * ((size_t)n + 1));
    TFG_ASSERT(x->view_head && x->view_next);
    for (int32_t i = 0; i < n; i++) x->view_head[i] = -1;
    for (int32_t i = n - 1; i >= 0; i--)
      if (p->view_of[i] >= 0) {
        x->view_next[i] = x->view_head[p->view_of[i]];
        x->view_head[p->view_of[i]] = i;
      }
  }
  make_fused(x);
  label_fused(x, o->trace);
  tfg_status st = TFG_OK;
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    e->x = x;
    e->device = tfg_devices_at(p->ds, dv);
    e->own = malloc(sizeof *e->own * ((size_t)n + 1));
    e->copy = malloc(sizeof *e->copy * ((size_t)n + 1));
    TFG_ASSERT(e->own && e->copy);
    for (int32_t i = 0; i < n; i++) e->own[i] = e->copy[i] = -1;
    atomic_init(&e->failed, -1);
    atomic_init(&e->done, 0);
    bool use = o->use ? o->use[dv] != 0 : p->dev[dv].nsteps > 0 || p->dev[dv].nbuffers > 0;
    if (!use || st != TFG_OK) continue;
    st = open_backend(x, dv, o, d);
    if (st == TFG_OK) resolve(x, dv);
  }
  if (st == TFG_OK) {
    /* The host devices' kernels share one pool (exec.h). */
    x->pool = tfg_pool_new(share_cores(x, o));
    for (int dv = 0; dv < x->ndev; dv++) x->dev[dv].kctx.k.pool = x->pool;
    /* Events are shared objects: any used backend can make them. */
    tfg_backend *any = NULL;
    for (int dv = 0; dv < x->ndev && !any; dv++) any = x->dev[dv].b;
    for (int e = 0; any && e < p->nevents; e++) x->ev[e] = tfg_backend_event_create(any);
    st = open_buckets(x, d);
  }
  if (st == TFG_OK) st = write_constants(x, d);
  if (st != TFG_OK) {
    tfg_exec_free(x);
    *out = NULL;
    return st;
  }
  exec_graph_setup(x, o);
  *out = x;
  return TFG_OK;
}

/* Frees tfg_exec_init's backend, when it was made. */
static void filler_close(tfg_exec *x) {
  if (!x->filler) return;
  tfg_backend_stream_free(x->filler, x->filler_s);
  tfg_backend_destroy(x->filler);
  x->filler = NULL;
  x->filler_s = NULL;
}

void tfg_exec_free(tfg_exec *x) {
  if (!x) return;
  if (x->graphs) {
    tfg_backend *ob = x->dev[x->origin].b;
    for (int i = 0; i < EXEC_GRAPHS; i++) exec_graph_clear(x, &x->cache[i]);
    for (int32_t i = 0; i < x->g->nnodes; i++)
      if (x->stage[i]) tfg_backend_host_free(ob, x->stage[i]);
    if (x->fork) tfg_backend_event_free(ob, x->fork);
    for (int j = 0; x->fork && j < x->njoin; j++) tfg_backend_event_free(ob, x->join[j]);
  }
  tfg_trace_unlabel_nodes(x->trace, x->fused);
  free(x->fused_labels);
  free(x->stage);
  free(x->mark);
  free(x->join);
  free(x->captured);
  free(x->ev_dev);
  for (int b = 0; x->buckets && b < x->p->nbuckets; b++) {
    exec_bucket *eb = &x->buckets[b];
    if (eb->own_coll) eb->coll->i.free(eb->coll);
    free(eb->at);
    free(eb->slots);
    free(eb->counts);
  }
  free(x->buckets);
  tfg_backend *any = NULL;
  for (int dv = 0; dv < x->ndev && !any; dv++) any = x->dev[dv].b;
  for (int e = 0; any && e < x->p->nevents; e++)
    if (x->ev[e]) tfg_backend_event_free(any, x->ev[e]);
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    if (e->b) {
      for (int s = 0; s < TFG_PLAN_STREAMS; s++)
        if (e->s[s]) tfg_backend_stream_free(e->b, e->s[s]);
      if (e->arena) tfg_backend_free(e->b, e->arena);
      tfg_backend_destroy(e->b);
    }
    if (e->launch)
      for (int k = 0; k < x->p->dev[dv].nsteps; k++) free(e->launch[k].in);
    free(e->launch);
    free(e->launched);
    free(e->own);
    free(e->copy);
    tfg_strbuf_free(&e->kctx.k.err);
  }
  /* The arrays sized by the plan (per device, event, node, fetch, chain). */
  void *arrays[] = {x->dev,       x->ev,        x->issued,     x->need,  x->fed,   x->fetch_first,
                    x->view_head, x->view_next, x->fetch_next, x->fused, x->progs, x->inner};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
  filler_close(x);
  tfg_pool_free(x->pool);
  free(x);
}

bool tfg_exec_holds(const tfg_exec *x, tfg_node_id id) {
  return x->dev[tfg_placement_device(x->p->pl, id)].b != NULL;
}

/* The device holding persistent node id, which this executor must run. */
static exec_dev *holder(tfg_exec *x, tfg_node_id id) {
  exec_dev *dv = &x->dev[tfg_placement_device(x->p->pl, id)];
  TFG_ASSERT(dv->b != NULL && dv->own[id] >= 0 && persistent(&x->g->nodes[id]));
  return dv;
}

void tfg_exec_write(tfg_exec *x, tfg_node_id id, const void *host) {
  size_t n = (size_t)tfg_node_bytes(&x->g->nodes[id]);
  if (n == 0) return;
  exec_dev *dv = holder(x, id);
  tfg_backend_copy_from_host(dv->b, dv->s[0], exec_addr(dv, id), host, n);
  tfg_status st = tfg_backend_synchronize(dv->b, dv->s[0], NULL);
  TFG_ASSERT(st == TFG_OK || !"a copy into a failed device");
}

void tfg_exec_read(tfg_exec *x, tfg_node_id id, void *host) {
  size_t n = (size_t)tfg_node_bytes(&x->g->nodes[id]);
  if (n == 0) return;
  exec_dev *dv = holder(x, id);
  tfg_backend_copy_to_host(dv->b, dv->s[0], host, exec_addr(dv, id), n);
  tfg_status st = tfg_backend_synchronize(dv->b, dv->s[0], NULL);
  TFG_ASSERT(st == TFG_OK || !"a copy out of a failed device");
}

/* The fill runs where the CPU's INIT kernel runs: on a host backend of
 * the executor's own, rather than on a host device of the plan's, so a
 * fill is never counted by TFG_FAULT_AFTER nor traced. It writes the
 * holder's memory in place when that is host memory (caps.is_host):
 * no staging buffer, no copy, and the pool's threads touch the fresh
 * pages in parallel (an 85M-param GPT's params and AdamW state are a
 * gigabyte). Otherwise it fills host memory, which tfg_exec_write then
 * copies to the holder (traced and counted like any copy). */
tfg_status tfg_exec_init(tfg_exec *x, tfg_node_id id, const tfg_attrs *a, tfg_strbuf *err) {
  const tfg_node *nd = &x->g->nodes[id];
  exec_dev *dv = holder(x, id); /* checks id is a persistent node this executor holds */
  if (!x->filler) {
    x->filler_dev = *tfg_devices_at(x->p->ds, 0);
    x->filler_dev.index = -1;
    tfg_strbuf why = {0};
    x->filler = tfg_backend_new(&x->filler_dev, NULL, &why); /* a host backend: cannot fail */
    TFG_ASSERT(x->filler != NULL && tfg_backend_is_host(x->filler));
    tfg_strbuf_free(&why);
    x->filler_s = tfg_backend_stream_create(x->filler);
  }
  tfg_backend *b = x->filler;
  tfg_node init = {.op = TFG_OP_INIT, .dtype = nd->dtype, .shape = nd->shape, .attrs = *a, .name = nd->name,
                   .loc = nd->loc, .pin = nd->pin};
  size_t n = (size_t)tfg_node_bytes(nd);
  bool in_place = tfg_backend_is_host(dv->b);
  void *host = NULL;
  if (in_place) {
    /* nothing the holder has queued may still use the old value */
    tfg_status st = tfg_backend_synchronize(dv->b, dv->s[0], NULL);
    TFG_ASSERT(st == TFG_OK || !"a fill into a failed device");
  } else {
    host = malloc(n ? n : 1);
    TFG_ASSERT(host != NULL);
  }
  tfg_tensor out = {in_place ? exec_addr(dv, id) : host, nd->dtype, nd->shape};
  tfg_kernel_ctx ctx = {.pool = x->pool, .node = id};
  tfg_kernel_fn fn = tfg_backend_kernel(b, &init);
  TFG_ASSERT(fn != NULL);
  tfg_backend_launch(b, x->filler_s, fn, &ctx, &init, NULL, &out);
  tfg_status st = tfg_backend_synchronize(b, x->filler_s, err);
  if (st == TFG_OK && !in_place)
    tfg_exec_write(x, id, host);
  else if (st != TFG_OK)
    filler_close(x); /* its stream's failure is sticky: a later fill starts afresh */
  tfg_strbuf_free(&ctx.err);
  free(host);
  return st;
}

/* ---- a run ---------------------------------------------------------------------- */

static bool bucket_needed(const tfg_exec *x, int b) { return x->need[x->p->buckets[b].nodes[0]] != 0; }

/* Queues the copies out of node id's value on device dv's stream s into
 * every fetch slot that asks for it (during a capture: into its stage). */
static void fetch_out(tfg_exec *x, exec_dev *dv, int s, tfg_node_id id, void *const *out) {
  size_t n = (size_t)tfg_node_bytes(&x->g->nodes[id]);
  if (n == 0) return;
  if (x->staging) {
    void *p = exec_stage_drain(x, id);
    if (p) tfg_backend_copy_to_host(dv->b, dv->s[s], p, exec_addr(dv, id), n);
    return;
  }
  for (int f = x->fetch_first[id]; f >= 0; f = x->fetch_next[f])
    tfg_backend_copy_to_host(dv->b, dv->s[s], out[f], exec_addr(dv, id), n);
}

/* Queues the steps of device d's stream `stream` from *pos (an index
 * into the device's list, whose other streams' steps it passes over)
 * until the list's end or a step that must wait (a WAIT whose RECORD is
 * not queued yet, a collective not all ranks have reached). Each stream
 * has its own cursor because streams are ordered only through events:
 * a collective that holds the collective stream must not hold the
 * compute stream's later steps, which another rank may need first (the
 * feeder cpu:0 as a mirrored replica slices the other replicas' rows
 * after its own all-reduce; the plan's validator walks the same way).
 * Returns whether the cursor moved. */
static bool advance(tfg_exec *x, int d, int stream, int *pos, void *const *out) {
  exec_dev *dv = &x->dev[d];
  const tfg_plan_device *pd = &x->p->dev[d];
  int start = *pos;
  while (*pos < pd->nsteps) {
    const tfg_plan_step *st = &pd->steps[*pos];
    if (st->stream != stream) {
      (*pos)++;
      continue;
    }
    tfg_stream *s = dv->s[st->stream];
    switch (st->kind) {
    case TFG_PLAN_LAUNCH: {
      tfg_node_id id = st->node;
      if (!x->need[id]) break;
      const tfg_node *nd = &x->g->nodes[id];
      size_t n = (size_t)tfg_node_bytes(nd);
      if (nd->op == TFG_OP_INPUT) {
        if (n) tfg_backend_copy_from_host(dv->b, s, exec_addr(dv, id), x->staging ? exec_stage_fill(x, id, -1) : x->fed[id], n);
      } else {
        dv->launched[dv->nlaunched++] = id;
        exec_launch *l = &dv->launch[*pos];
        tfg_backend_launch(dv->b, s, run_kernel, &dv->kctx.k, l->node, l->in, &l->out);
      }
      if (x->fetch_first[id] >= 0) fetch_out(x, dv, st->stream, id, out);
      /* its views have no step: a fetched one is copied out now */
      for (tfg_node_id v = x->view_head ? x->view_head[id] : -1; v >= 0; v = x->view_next[v])
        if (x->fetch_first[v] >= 0) fetch_out(x, dv, st->stream, v, out);
      break;
    }
    case TFG_PLAN_COPY: {
      if (!x->need[st->node]) break;
      size_t n = (size_t)tfg_node_bytes(&x->g->nodes[st->node]);
      exec_dev *src = &x->dev[st->src];
      TFG_ASSERT(src->b != NULL); /* mark_needed put the source in this run */
      if (n == 0) break;
      if (x->staging && !x->captured[st->src]) /* from a feeder's memory, which ran already */
        tfg_backend_copy_from_host(dv->b, s, dv->arena + dv->copy[st->node], exec_stage_fill(x, st->node, st->src), n);
      else
        tfg_backend_copy_peer(dv->b, s, dv->arena + dv->copy[st->node], src->b, exec_addr(src, st->node), n);
      break;
    }
    case TFG_PLAN_RECORD:
      tfg_backend_event_record(dv->b, s, x->ev[st->event]);
      x->issued[st->event] = x->run;
      break;
    case TFG_PLAN_WAIT:
      if (x->ev_dev[st->event] >= 0 && !x->dev[x->ev_dev[st->event]].b)
        break; /* recorded on a device this executor does not run: it orders none of this executor's work */
      if (x->issued[st->event] != x->run) return *pos > start; /* its RECORD comes later in the walk */
      tfg_backend_event_wait(dv->b, s, x->ev[st->event]);
      break;
    case TFG_PLAN_ALLREDUCE: {
      if (!bucket_needed(x, st->bucket)) break;
      const tfg_plan_bucket *pb = &x->p->buckets[st->bucket];
      exec_bucket *eb = &x->buckets[st->bucket];
      if (eb->queued == x->run) break; /* queued by the last rank to arrive */
      /* Ranks that arrive first hold here (their later stream-2 steps must
       * follow the collective); the last to arrive queues every rank's part. */
      int arrived = 0, newly = 0;
      for (int r = 0; r < pb->nranks; r++) {
        if (pb->devices[r] == d && eb->at[r] != x->run) {
          eb->at[r] = x->run;
          newly = 1;
        }
        arrived += eb->at[r] == x->run;
      }
      if (arrived < pb->nranks) return *pos > start || newly;
      eb->queued = x->run;
      /* each node's input into its buffer: the whole, or an all-gather's
       * piece at its rank's place (rank-major over the job's processes) */
      int P = eb->coll->processes > 1 ? eb->coll->processes : 1, me = P > 1 ? eb->coll->process : 0;
      for (int r = 0; r < pb->nranks; r++) {
        exec_dev *rd = &x->dev[pb->devices[r]];
        tfg_stream *rs = rd->s[TFG_PLAN_STREAM_COLLECTIVE];
        for (int k = 0; k < pb->nnodes; k++) {
          tfg_node_id node = pb->nodes[r * pb->nnodes + k];
          const tfg_node *in = &x->g->nodes[x->g->nodes[node].inputs[0]];
          size_t n = (size_t)tfg_node_bytes(in), at = pb->op == TFG_OP_ALL_GATHER ? ((size_t)me * (size_t)pb->nranks + (size_t)r) * n : 0;
          if (n) tfg_backend_copy_peer(rd->b, rs, (char *)exec_addr(rd, node) + at, rd->b, exec_addr(rd, x->g->nodes[node].inputs[0]), n);
        }
      }
      tfg_dtype dt = x->g->nodes[pb->nodes[0]].dtype;
      TFG_ASSERT(tfg_op_bucketed(pb->op));
      if (pb->op == TFG_OP_REDUCE_SCATTER) /* the mean over every rank of the job */
        eb->coll->i.reduce_scatter(eb->coll, eb->slots, eb->counts, pb->nnodes, dt, 1.0 / (double)(pb->nranks * P));
      else if (pb->op == TFG_OP_ALL_GATHER)
        eb->coll->i.all_gather(eb->coll, eb->slots, eb->counts, pb->nnodes, dt);
      else
        eb->coll->i.allreduce(eb->coll, eb->slots, eb->counts, pb->nnodes, dt, TFG_COLL_MEAN);
      for (int r = 0; r < pb->nranks; r++) {
        exec_dev *rd = &x->dev[pb->devices[r]];
        for (int k = 0; k < pb->nnodes; k++) {
          tfg_node_id node = pb->nodes[r * pb->nnodes + k];
          if (x->fetch_first[node] >= 0) fetch_out(x, rd, TFG_PLAN_STREAM_COLLECTIVE, node, out);
        }
      }
      break;
    }
    }
    (*pos)++;
  }
  return *pos > start;
}

/* Reports the first failure of the run (on stream s of device d): at the
 * op that failed when a kernel did (or where a device stopped, or the
 * node the device names for what it found after the launch: failed_node),
 * else on the device. */
static void report(tfg_exec *x, int d, int s, tfg_status st, const char *msg, tfg_diag *diag) {
  exec_dev *dv = &x->dev[d];
  tfg_node_id id = atomic_load(&dv->failed);
  int done = atomic_load(&dv->done);
  if (id < 0 && done < dv->nlaunched) id = dv->launched[done];
  if (id < 0) id = tfg_backend_failed_node(dv->b, dv->s[s]);
  if (id >= x->g->nnodes) id = -1;
  if (id >= 0) {
    const tfg_node *nd = &x->g->nodes[id];
    tfg_diag_error(diag, &nd->loc, "%s on %s failed: %s", tfg_op_get(nd->op)->name, dv->device->name,
                   msg && *msg ? msg : tfg_status_str(st));
  } else {
    tfg_diag_error(diag, NULL, "%s failed: %s", dv->device->name, msg && *msg ? msg : tfg_status_str(st));
  }
}

static bool walks(const tfg_exec *x, int d, int which) {
  return x->dev[d].b && (which == WALK_ALL || (x->captured && x->captured[d]) == which);
}

/* Queues the steps of the devices `which` selects: round robin over
 * every stream of every device (one cursor each) until each has queued
 * its steps. */
static void walk(tfg_exec *x, int which, void *const *out) {
  int *pos = calloc((size_t)x->ndev * TFG_PLAN_STREAMS, sizeof *pos);
  TFG_ASSERT(pos != NULL);
  for (bool busy = true; busy;) {
    busy = false;
    bool moved = false;
    for (int dv = 0; dv < x->ndev; dv++)
      for (int s = 0; s < TFG_PLAN_STREAMS; s++) {
        int *at = &pos[dv * TFG_PLAN_STREAMS + s];
        if (!walks(x, dv, which) || *at >= x->p->dev[dv].nsteps) continue;
        moved |= advance(x, dv, s, at, out);
        busy |= *at < x->p->dev[dv].nsteps;
      }
    TFG_ASSERT(moved || !busy); /* a validated plan never deadlocks (a feeder never waits for a captured device) */
  }
  free(pos);
}

/* Sets the step and seed the devices' kernels read on the device
 * (backends with caps.device_step: GPUs): queued on each compute
 * stream, or only written for a replay (queue false). */
void exec_set_steps(tfg_exec *x, int which, const tfg_exec_run_opts *ro, bool queue) {
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    if (walks(x, dv, which) && tfg_backend_get_caps(e->b)->device_step)
      tfg_backend_set_step(e->b, queue ? e->s[0] : NULL, ro->step, (uint64_t)ro->seed);
  }
}

/* Queues one run's work on the devices `which` selects: the step, the
 * walk, then the fetched persistent values (after everything this run did
 * to them; during a capture into their stages). */
void exec_queue_run(tfg_exec *x, int which, const tfg_exec_run_opts *ro, const tfg_node_id *fetch, int nfetch,
                      void *const *out) {
  exec_set_steps(x, which, ro, true);
  walk(x, which, out);
  for (int f = 0; f < nfetch; f++) {
    const tfg_node *nd = &x->g->nodes[fetch[f]];
    /* a view of a constant is fetched as the constant is */
    tfg_node_id base = x->p->view_of && x->p->view_of[fetch[f]] >= 0 ? x->p->view_of[fetch[f]] : fetch[f];
    if (!persistent(&x->g->nodes[base]) || (size_t)tfg_node_bytes(nd) == 0) continue;
    int d = tfg_placement_device(x->p->pl, fetch[f]);
    if (!walks(x, d, which)) continue;
    exec_dev *dv = holder(x, base);
    void *dst = x->staging ? exec_stage_drain(x, fetch[f]) : out[f];
    if (dst) tfg_backend_copy_to_host(dv->b, dv->s[0], dst, exec_addr(dv, fetch[f]), (size_t)tfg_node_bytes(nd));
  }
}

/* Synchronizes the streams of the devices `which` selects; reports one
 * failure: the one that began on a stream (the others carry it: events
 * pass a failure on). */
static tfg_status sync_report(tfg_exec *x, int which, tfg_diag *d) {
  tfg_status first = TFG_OK;
  int first_dev = -1, first_stream = 0;
  bool first_origin = false;
  tfg_strbuf msg = {0}, m = {0};
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    if (!walks(x, dv, which)) continue;
    for (int s = 0; s < TFG_PLAN_STREAMS; s++) {
      tfg_strbuf_clear(&m);
      tfg_status st = tfg_backend_synchronize(e->b, e->s[s], &m);
      if (st == TFG_OK) continue;
      /* The failure that began here (a kernel error, a fault) is the
       * one to report; the others arrived through events. */
      bool origin = atomic_load(&e->failed) >= 0 || tfg_backend_failed_here(e->b, e->s[s]);
      if (first == TFG_OK || (origin && !first_origin)) {
        first = st;
        first_dev = dv;
        first_stream = s;
        first_origin = origin;
        tfg_strbuf_clear(&msg);
        tfg_strbuf_puts(&msg, m.data ? m.data : "");
      }
    }
  }
  if (first != TFG_OK) report(x, first_dev, first_stream, first, msg.data, d);
  tfg_strbuf_free(&msg);
  tfg_strbuf_free(&m);
  return first;
}

tfg_status tfg_exec_run(tfg_exec *x, const tfg_node_id *fetch, int nfetch, void *const *out, const tfg_exec_run_opts *ro,
                        tfg_diag *d) {
  static const tfg_exec_run_opts none = {0};
  if (!ro) ro = &none;
  if (x->fault_assert) tfg_assert_fail("TFG_FAULT_ASSERT=1 (an injected internal error)", __FILE__, __LINE__);
  const tfg_graph *g = x->g;
  /* A chain's intermediate has no value to give: the plan's caller had
   * to keep every node it fetches (tfg_plan_opts.keep). */
  for (int f = 0; f < nfetch; f++)
    if (x->inner[fetch[f]]) {
      tfg_diag_error(d, &g->nodes[fetch[f]].loc,
                     "%s (n%d) was fused into a chain by the plan and has no value to fetch (plan with it kept)",
                     tfg_op_get(g->nodes[fetch[f]].op)->name, (int)fetch[f]);
      return TFG_ERR_DEVICE;
    }
  tfg_plan_mark_needed(x->p, fetch, nfetch, x->need);
  /* Every needed node must be on a device this executor runs; inputs get
   * their values first, so a feed that fails stops the run before
   * anything is queued. */
  for (int32_t i = 0; i < g->nnodes; i++) {
    if (!x->need[i]) continue;
    int dv = tfg_placement_device(x->p->pl, i);
    if (!x->dev[dv].b) {
      tfg_diag_error(d, &g->nodes[i].loc, "%s is placed on %s, which this run does not use",
                     tfg_op_get(g->nodes[i].op)->name, x->dev[dv].device->name);
      return TFG_ERR_DEVICE;
    }
    if ((g->nodes[i].op == TFG_OP_SEND || g->nodes[i].op == TFG_OP_RECV) && !x->dev[dv].host_memory) {
      tfg_diag_error(d, &g->nodes[i].loc, "%s between ranks on %s: a pipeline across the ranks of a job runs on host "
                     "devices in this version", tfg_op_get(g->nodes[i].op)->name, x->dev[dv].device->name);
      tfg_diag_help(d, "give each rank host devices (--devices host), or run the pipeline in one process");
      return TFG_ERR_DEVICE;
    }
    if (g->nodes[i].op != TFG_OP_INPUT) continue;
    tfg_status st = ro->feed ? ro->feed(ro->feed_arg, i, &x->fed[i]) : TFG_ERR_IO;
    if (st != TFG_OK) {
      if (!ro->feed) tfg_diag_error(d, &g->nodes[i].loc, "input %s has no value", g->nodes[i].name);
      return st;
    }
  }
  free(x->fetch_next);
  x->fetch_next = malloc(sizeof *x->fetch_next * ((size_t)nfetch + 1));
  TFG_ASSERT(x->fetch_next != NULL);
  for (int f = nfetch - 1; f >= 0; f--) {
    x->fetch_next[f] = x->fetch_first[fetch[f]];
    x->fetch_first[fetch[f]] = f;
  }
  x->run++;
  for (int dv = 0; dv < x->ndev; dv++) {
    exec_dev *e = &x->dev[dv];
    if (!e->b) continue;
    e->kctx.k.training = ro->training;
    e->kctx.k.step = ro->step;
    e->kctx.k.seed = ro->seed;
    e->nlaunched = 0;
    atomic_store(&e->done, 0);
  }

  exec_graph *gr = x->graphs ? exec_graph_for(x, fetch, nfetch, ro->training) : NULL;
  bool replayed = false;
  tfg_status first = TFG_OK;
  if (!gr) {
    exec_queue_run(x, WALK_ALL, ro, fetch, nfetch, out);
  } else {
    /* The feeders first, to the end: what they computed is staged. */
    exec_queue_run(x, WALK_FEEDERS, ro, fetch, nfetch, out);
    first = sync_report(x, WALK_FEEDERS, d);
    if (first == TFG_OK && (gr->runs++ == 0 || gr->refused)) {
      exec_queue_run(x, WALK_CAPTURED, ro, fetch, nfetch, out); /* the first run warms up: plain */
    } else if (first == TFG_OK) {
      if (!gr->r) exec_capture(x, gr, ro, fetch, nfetch, out, d);
      if (gr->r) {
        exec_replay(x, gr, ro);
        replayed = true;
        x->replays++;
      }
    }
  }
  if (first == TFG_OK) first = sync_report(x, WALK_ALL, d);
  /* the sends this run posted, delivered (a failed run ends the job
   * instead: its receivers may never post theirs) */
  if (first == TFG_OK) tfg_mpi_flush();
  if (first == TFG_OK && replayed)
    for (int k = 0; k < gr->ndrain; k++) {
      tfg_node_id id = gr->drain[k];
      for (int f = x->fetch_first[id]; f >= 0; f = x->fetch_next[f])
        memcpy(out[f], x->stage[id], (size_t)tfg_node_bytes(&g->nodes[id]));
    }
  for (int f = 0; f < nfetch; f++) x->fetch_first[fetch[f]] = -1;
  return first;
}

int tfg_exec_ndev(const tfg_exec *x) { return x->ndev; }

void tfg_exec_memory(const tfg_exec *x, int d, const char **name, int64_t *planned, int64_t *measured) {
  const exec_dev *dv = &x->dev[d];
  *name = dv->device->name;
  *planned = x->p->dev[d].peak;
  *measured = -1;
  if (!dv->b) return;
  tfg_mem_stats ms;
  int64_t free_bytes = 0;
  tfg_backend_mem_stats(dv->b, &ms, &free_bytes);
  *measured = ms.peak;
}

int64_t tfg_exec_replays(const tfg_exec *x) { return x->replays; }
