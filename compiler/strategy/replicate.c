/* compiler/strategy/replicate.c: the cloning mirrored, parameter_server
 * and parallel share, data parallelism's split, all-reduce and updates
 * (see compiler/strategy/replicate.h), and the checks of the device
 * arguments they read. */
#include "compiler/strategy/replicate.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"

/* ---- reading device arguments ------------------------------------------------ */

/* The interpreter named any value that is not a device or a list. */
const char *tfg_replicate_arg_what(const tfg_devarg *v) {
  switch (v->kind) {
  case TFG_DEVARG_NONE: return "nothing";
  case TFG_DEVARG_DEVICE: return "a device";
  case TFG_DEVARG_LIST: return "a list";
  case TFG_DEVARG_INT: return "an int";
  case TFG_DEVARG_OTHER: break;
  }
  return v->what;
}

/* "gpu:3", "cpu" (the host CPU is the only cpu a strategy may name). */
static const char *dev_name(const tfg_devspec *d, char buf[40]) {
  if (d->kind == TFG_DEV_CPU && d->index == 0) snprintf(buf, 40, "cpu");
  else if (d->kind == TFG_DEV_CPU) snprintf(buf, 40, "cpu:%" PRId64, d->index);
  else if (d->kind == TFG_DEV_GPU) snprintf(buf, 40, "gpu:%" PRId64, d->index);
  else snprintf(buf, 40, "gpu:*");
  return buf;
}

bool tfg_replicate_check_device(const tfg_strategy_config *s, const char *who, const char *what, const tfg_devarg *v,
                                const tfg_devspec *seen, int n, tfg_diag *d) {
  char name[40];
  if (v->kind != TFG_DEVARG_DEVICE) {
    tfg_diag_error(d, &s->loc, "%s: %s is %s, not a device", who, what, tfg_replicate_arg_what(v));
    tfg_diag_help(d, "devices are written cpu or gpu:N");
    return false;
  }
  const tfg_devspec *dev = &v->dev;
  if (dev->kind == TFG_DEV_GPU_ANY) {
    tfg_diag_error(d, &dev->loc, "%s needs named devices: gpu:* lets the placer choose", who);
    tfg_diag_help(d, "name the GPU, for example gpu:0");
    return false;
  }
  if (dev->kind == TFG_DEV_CPU && dev->index != 0) {
    tfg_diag_error(d, &dev->loc, "%s does not exist: the host CPU is cpu", dev_name(dev, name));
    return false;
  }
  for (int i = 0; i < n; i++)
    if (seen[i].kind == dev->kind && seen[i].index == dev->index) {
      tfg_diag_error(d, &dev->loc, "%s: %s is named twice", who, dev_name(dev, name));
      tfg_diag_note(d, &seen[i].loc, "first named here");
      tfg_diag_help(d, "each replica needs devices of its own");
      return false;
    }
  return true;
}

/* ---- the clones ---------------------------------------------------------------- */

tfg_devspec tfg_replicate_pin(const tfg_replicate *c, const tfg_devspec *dev) {
  return (tfg_devspec){.kind = dev->kind, .index = dev->index, .loc = c->s->loc};
}

tfg_devspec tfg_replicate_cpu_pin(const tfg_replicate *c) {
  return (tfg_devspec){.kind = TFG_DEV_CPU, .index = 0, .loc = c->s->loc};
}

tfg_status tfg_replicate_add(tfg_replicate *c, const tfg_node *src, const tfg_node_id *ins, const tfg_devspec *pin,
                             tfg_node_id *out) {
  tfg_node_id id = tfg_graph_add(c->g, src->op, ins, src->ninputs, &src->loc);
  tfg_node *m = tfg_graph_node(c->g, id);
  m->attrs = src->attrs;
  m->name = src->name;
  m->dtype = src->dtype; /* sources keep theirs: their shape rule has nothing to infer */
  m->shape = src->shape;
  m->pin = *pin;
  m->call = src->call;           /* a clone is in its source's call, */
  m->recompute = src->recompute; /* and recomputed as it is (compiler/recompute.h) */
  m->backward = src->backward;
  *out = id;
  return tfg_op_get(src->op)->infer(c->g, m, c->d);
}

void tfg_replicate_begin(tfg_replicate *c, const tfg_replicate_hooks *h, tfg_graph *g, const tfg_action *a,
                         const tfg_program *p, const tfg_strategy *s, const tfg_job *job, const tfg_switches *sw,
                         tfg_diag *d, tfg_train_step *out) {
  *c = (tfg_replicate){.h = h, .g = g, .a = a, .s = s, .job = job ? *job : (tfg_job){.rank = 0, .size = 1}, .sw = sw, .d = d,
                       .per = 1, .n0 = g->nnodes};
  int R = s->nreplicas;

  /* The metrics, the cone. */
  const tfg_node_id *metrics = a->config.metrics;
  int nm = a->config.nmetrics;
  c->top = a->loss;
  for (int k = 0; k < nm; k++)
    if (metrics[k] > c->top) c->top = metrics[k];
  size_t span = (size_t)c->top + 1;
  c->cone = calloc(span, 1);
  c->param_of = malloc(sizeof *c->param_of * span);
  c->map = malloc(sizeof *c->map * span);
  c->saved = malloc(sizeof *c->saved * span);
  TFG_ASSERT(c->cone && c->param_of && c->map && c->saved);
  c->cone[a->loss] = 1;
  for (int k = 0; k < nm; k++) c->cone[metrics[k]] = 1;
  for (int32_t i = c->top; i >= 0; i--) {
    c->param_of[i] = -1;
    c->saved[i] = g->nodes[i].pin;
    if (!c->cone[i]) continue;
    c->ncone_params += g->nodes[i].op == TFG_OP_PARAM;
    for (int k = 0; k < g->nodes[i].ninputs; k++) c->cone[g->nodes[i].inputs[k]] = 1;
  }

  /* The step's arrays, sized for every replica. */
  out->params = malloc(sizeof *out->params * (size_t)(p->nparams + 1));
  TFG_ASSERT(out->params != NULL);
  /* The params the loss trains, as tfg_autodiff_train_step chooses them,
   * so that every replica clones exactly those. */
  int n = tfg_autodiff_trained_params(g, a, p, sw, out->params, d);
  for (int i = 0; i < n; i++) c->param_of[out->params[i]] = i;
  c->n = out->nparams = n;
  out->optimizer = tfg_optimizer_name(a->config.optimizer.kind);
  out->nreplicas = R;
  out->nmetrics = nm;
  out->metrics = malloc(sizeof *out->metrics * (size_t)(nm + 1));
  out->states = malloc(sizeof *out->states * (size_t)(2 * n + 1));
  TFG_ASSERT(out->metrics && out->states);
  out->accumulate = 1;
}

/* Clones the cone for clone q into c->map: an input through its slice
 * when the strategy cut one (else whole, re-pinned to the cpu where data
 * is loaded), a param as the strategy's hook says, every other node
 * where the hook pins it. */
static tfg_status clone_replica(tfg_replicate *c, int q, tfg_train_step *out) {
  size_t span = (size_t)c->top + 1;
  tfg_status st = TFG_OK;
  for (int32_t i = 0; i <= c->top && st == TFG_OK; i++) {
    if (!c->cone[i]) continue;
    tfg_node nd = c->g->nodes[i];
    nd.pin = c->saved[i]; /* the program's pin: replica 0 re-pins its params and inputs */
    if (nd.op == TFG_OP_INPUT) {
      c->g->nodes[i].pin = tfg_replicate_cpu_pin(c); /* data is loaded on the host */
      c->map[i] = i;
      if (c->slices && c->slices[(size_t)q * span + (size_t)i] >= 0) c->map[i] = c->slices[(size_t)q * span + (size_t)i];
      continue;
    }
    if (nd.op == TFG_OP_PARAM) {
      st = c->h->param(c, q, i, &nd, out);
      continue;
    }
    tfg_devspec pin;
    if ((st = c->h->pin(c, i, &nd.pin, q, &pin)) != TFG_OK) break;
    if (nd.ninputs > c->cap) {
      c->cap = nd.ninputs * 2;
      c->ins = realloc(c->ins, sizeof *c->ins * (size_t)c->cap);
      TFG_ASSERT(c->ins != NULL);
    }
    for (int k = 0; k < nd.ninputs; k++) c->ins[k] = c->map[nd.inputs[k]];
    st = tfg_replicate_add(c, &nd, c->ins, &pin, &c->map[i]);
    if (c->h->cloned) c->h->cloned(c, q, i, st);
  }
  return st;
}

/* Gives every node from `from` on without a pin replica r's first
 * device. autodiff pins each gradient node like the forward node it
 * differentiates, and every clone has a pin, so this finds nothing
 * today; it keeps a future gradient rule from leaking a replica's work
 * to the placer's choice. */
static void pin_unpinned(tfg_replicate *c, int32_t from, int r) {
  for (int32_t i = from; i < c->g->nnodes; i++)
    if (c->g->nodes[i].pin.kind == TFG_DEV_NONE)
      c->g->nodes[i].pin = tfg_replicate_pin(c, &c->s->devices[r * c->s->group]);
}

tfg_status tfg_replicate_replicas(tfg_replicate *c, tfg_train_step *out) {
  const tfg_action *a = c->a;
  int Q = c->nclones = c->s->nreplicas * c->per, n = c->n, nm = a->config.nmetrics;
  out->nreplicas = Q;
  out->losses = malloc(sizeof *out->losses * (size_t)Q);
  out->replica_metrics = malloc(sizeof *out->replica_metrics * (size_t)(Q * nm + 1));
  c->rparams = malloc(sizeof *c->rparams * (size_t)(Q * n + 1));
  c->grads = malloc(sizeof *c->grads * (size_t)(Q * n + 1));
  TFG_ASSERT(out->losses && out->replica_metrics && c->rparams && c->grads);
  tfg_status st = TFG_OK;
  for (int q = 0; q < Q && st == TFG_OK; q++) {
    if ((st = clone_replica(c, q, out)) != TFG_OK) break;
    out->losses[q] = c->map[a->loss];
    for (int k = 0; k < nm; k++) out->replica_metrics[q * nm + k] = c->map[a->config.metrics[k]];
    for (int i = 0; i < n; i++) c->rparams[q * n + i] = c->map[out->params[i]];
    int32_t from = c->g->nnodes;
    tfg_node_id loss = tfg_autodiff_part(c->g, out->losses[q], c->per); /* a micro-batch's share of the step */
    if (c->amps) loss = tfg_autodiff_scale_loss(c->g, loss, &c->amps[q / c->per]); /* precision = f16 */
    if (c->h->traced) {
      int32_t grads_from = c->g->nnodes;
      tfg_node_id *origin = tfg_autodiff_traced(c->g, loss, &c->rparams[q * n], n, &c->grads[q * n], c->sw);
      c->h->traced(c, q, grads_from, origin);
      free(origin);
    } else {
      tfg_autodiff(c->g, loss, &c->rparams[q * n], n, &c->grads[q * n], c->sw);
    }
    for (int i = 0; i < n; i++) TFG_ASSERT(c->grads[q * n + i] >= 0); /* a clone differentiates like the original */
    pin_unpinned(c, from, q / c->per);
  }
  if (st == TFG_OK) {
    out->loss = out->losses[0];
    for (int k = 0; k < nm; k++) out->metrics[k] = out->replica_metrics[k];
  }
  return st;
}

tfg_status tfg_replicate_end(tfg_replicate *c, tfg_status st, tfg_train_step *out) {
  if (st != TFG_OK) { /* leave the graph as it was */
    tfg_graph_truncate(c->g, c->n0);
    for (int32_t i = 0; i <= c->top; i++) c->g->nodes[i].pin = c->saved[i];
    tfg_train_step_free(out);
  }
  free(c->cone);
  free(c->param_of);
  free(c->map);
  free(c->saved);
  free(c->slices);
  free(c->ins);
  free(c->rparams);
  free(c->grads);
  free(c->amps);
  return st;
}

/* ---- data parallelism ---------------------------------------------------------- */

void tfg_replicate_data_begin(tfg_replicate *c, tfg_train_step *out) {
  int R = c->s->nreplicas, n = c->n;
  out->updates = malloc(sizeof *out->updates * (size_t)(R * n + 1));
  /* Replicas 1..: a copy of every param of the cone and of every state. */
  size_t m = (size_t)(R - 1) * (size_t)(c->ncone_params + 2 * n) + 1;
  out->mirror_src = malloc(sizeof *out->mirror_src * m);
  out->mirror_dst = malloc(sizeof *out->mirror_dst * m);
  TFG_ASSERT(out->updates && out->mirror_src && out->mirror_dst);
  /* precision = f16: a grad scaler per replica; all replicas see the same
   * all-reduced gradients, so their scalers move alike */
  if (c->a->config.precision == TFG_DTYPE_F16) {
    c->amps = calloc((size_t)R, sizeof *c->amps);
    TFG_ASSERT(c->amps != NULL);
  }
}

tfg_status tfg_replicate_split_batch(tfg_replicate *c) {
  int Q = c->s->nreplicas * c->per; /* this process's clones */
  int all = Q * c->job.size, first = c->job.rank * Q;
  for (int32_t i = 0; i <= c->top; i++) {
    const tfg_node *nd = &c->g->nodes[i];
    if (!c->cone[i] || nd->op != TFG_OP_INPUT || nd->shape.rank == 0) continue;
    int64_t b = nd->shape.dim[0];
    if (b % all == 0) continue;
    const char *name = c->s->i->name;
    if (c->per > 1)
      tfg_diag_error(c->d, &nd->loc, "input %s: a global batch of %" PRId64 " rows does not split evenly into %d micro-batches",
                     nd->name, b, all);
    else
      tfg_diag_error(c->d, &nd->loc, "input %s: a global batch of %" PRId64 " rows does not split evenly over %d replicas",
                     nd->name, b, all);
    /* micro_batches not given: the pipeline's stages, set with the strategy */
    const tfg_loc *mb = c->a->config.micro_batches ? &c->a->config.micro_batches_at : &c->s->loc;
    const char *dflt = c->a->config.micro_batches ? "" : " (micro_batches not given: one per stage)";
    if (c->per > 1 && c->s->nreplicas > 1)
      tfg_diag_note(c->d, mb, "%d micro-batches for each of %s's %d replicas%s", c->per, name, c->s->nreplicas, dflt);
    else if (c->per > 1)
      tfg_diag_note(c->d, mb, "the pipeline's %d micro-batches%s", c->per, dflt);
    else if (c->job.size > 1)
      tfg_diag_note(c->d, &c->s->loc, "%s makes %d replicas here on each of %d ranks: %d in all", name,
                    c->s->nreplicas, c->job.size, all);
    else
      tfg_diag_note(c->d, &c->s->loc, "%s makes %d replicas here", name, all);
    int64_t lo = b / all * all, hi = lo + all;
    if (lo > 0) tfg_diag_help(c->d, "make the batch a multiple of %d, like %" PRId64 " or %" PRId64, all, lo, hi);
    else tfg_diag_help(c->d, "make the batch a multiple of %d, like %" PRId64, all, hi);
    return TFG_ERR_SHAPE;
  }
  /* Every clone's rows are cut first: in graph order, hence in the
   * feeder's step order. */
  size_t span = (size_t)c->top + 1;
  c->slices = malloc(sizeof *c->slices * (size_t)Q * span);
  TFG_ASSERT(c->slices != NULL);
  for (int q = 0; q < Q; q++)
    for (int32_t i = 0; i <= c->top; i++) {
      const tfg_node *nd = &c->g->nodes[i];
      c->slices[(size_t)q * span + (size_t)i] = -1;
      if (!c->cone[i] || nd->op != TFG_OP_INPUT || nd->shape.rank == 0) continue; /* a scalar has no batch */
      int64_t rows = nd->shape.dim[0] / all;
      tfg_node slice = *nd;
      slice.op = TFG_OP_SLICE;
      slice.ninputs = 1;
      slice.name = NULL;
      memset(&slice.attrs, 0, sizeof slice.attrs);
      slice.attrs.axis = 0;
      slice.attrs.start = (first + q) * rows;
      slice.attrs.end = (first + q + 1) * rows;
      tfg_devspec pin = tfg_replicate_cpu_pin(c);
      tfg_node_id in = i;
      tfg_status st = tfg_replicate_add(c, &slice, &in, &pin, &c->slices[(size_t)q * span + (size_t)i]);
      TFG_ASSERT(st == TFG_OK);
    }
  return TFG_OK;
}

void tfg_replicate_param_copy(tfg_replicate *c, int r, int32_t i, const tfg_node *nd, const tfg_devspec *pin,
                              tfg_train_step *out) {
  if (r == 0) {
    c->g->nodes[i].pin = *pin;
    c->map[i] = i;
    return;
  }
  tfg_status st = tfg_replicate_add(c, nd, NULL, pin, &c->map[i]);
  TFG_ASSERT(st == TFG_OK);
  out->mirror_src[out->nmirrors] = i;
  out->mirror_dst[out->nmirrors++] = c->map[i];
}

void tfg_replicate_cloned(tfg_replicate *c, int q, int32_t i, tfg_status st) {
  if (st != TFG_OK) {
    if (c->per > 1)
      tfg_diag_note(c->d, c->a->config.micro_batches ? &c->a->config.micro_batches_at : &c->s->loc,
                    "the batch is split into %d micro-batches here", c->per);
    else tfg_diag_note(c->d, &c->s->loc, "the batch is split %d ways by %s here", c->s->nreplicas, c->s->i->name);
    return;
  }
  /* A clone's dropout draws its rows' part of the whole batch's mask
   * (batch-major tensors: clone q's elements start at q times its size),
   * so the clones train as one device would. */
  tfg_node *m = &c->g->nodes[c->map[i]];
  if (m->op == TFG_OP_DROPOUT) m->attrs.offset = (c->job.rank * c->nclones + q) * tfg_shape_numel(&m->shape);
}

/* Whether pin names one of replica r's devices (the groups are disjoint:
 * the strategy's read refuses a device named twice). */
static bool in_group(const tfg_strategy *s, int r, const tfg_devspec *pin) {
  for (int j = 0; j < s->group; j++) {
    const tfg_devspec *d = &s->devices[r * s->group + j];
    if (d->kind == pin->kind && d->index == pin->index) return true;
  }
  return false;
}

/* The mean of each gradient over the replicas, where it was computed.
 * The key is the id replica 0's all-reduce node gets when it is made: the
 * same in every replica, and unique in the graph (a pipeline renumbers
 * only its own nodes, so the keys stay apart), so the all-reduces of several train actions
 * (an ensemble of mirrored jobs, a pretraining and a fine-tuning of one
 * param) never share a key. A group has one node per device: a gradient
 * the program pinned to a cpu outside the replica's devices is reduced
 * on the replica's first device. */
static void all_reduce(tfg_replicate *c, const tfg_train_step *out) {
  const tfg_strategy *s = c->s;
  int R = s->nreplicas, n = c->n;
  int64_t key0 = c->g->nnodes;
  for (int r = 0; r < R; r++)
    for (int i = 0; i < n; i++) {
      tfg_node_id gi = c->grads[r * n + i];
      const tfg_node pn = c->g->nodes[out->params[i]];
      tfg_devspec pin = c->g->nodes[gi].pin;
      if (!in_group(s, r, &pin)) pin = tfg_replicate_pin(c, &s->devices[r * s->group]);
      tfg_node ar = {.op = TFG_OP_ALLREDUCE, .ninputs = 1, .loc = pn.loc, .backward = true};
      ar.attrs.n = R;
      ar.attrs.key = key0 + i;
      tfg_status ok = tfg_replicate_add(c, &ar, &gi, &pin, &c->grads[r * n + i]);
      TFG_ASSERT(ok == TFG_OK);
    }
}

/* Every replica applies the same update to its own copy; the state of
 * replicas 1.. mirrors replica 0's, slot for slot. */
static tfg_status updates(tfg_replicate *c, tfg_train_step *out) {
  int R = c->s->nreplicas, n = c->n;
  tfg_status st = TFG_OK;
  tfg_node_id *states = malloc(sizeof *states * (size_t)(2 * n + 1));
  TFG_ASSERT(states != NULL);
  for (int r = 0; r < R && st == TFG_OK; r++) {
    int ns = 0;
    st = tfg_autodiff_updates(c->g, c->a, &c->rparams[r * n], &c->grads[r * n], n, c->amps ? &c->amps[r] : NULL,
                              &out->updates[r * n], r == 0 ? out->states : states, r == 0 ? &out->nstates : &ns, c->d);
    if (st != TFG_OK || r == 0) continue;
    TFG_ASSERT(ns == out->nstates);
    for (int j = 0; j < ns; j++) {
      out->mirror_src[out->nmirrors] = out->states[j];
      out->mirror_dst[out->nmirrors++] = states[j];
    }
  }
  free(states);
  out->nupdates = R * n;
  if (c->amps && st == TFG_OK) {
    out->nscalers = R;
    out->scalers = malloc(sizeof *out->scalers * (size_t)R);
    TFG_ASSERT(out->scalers != NULL);
    for (int r = 0; r < R; r++) out->scalers[r] = c->amps[r].update;
  }
  return st;
}

/* ---- ZeRO: the optimizer state sharded over the replicas ------------------------------
 * zero = 1 (DeepSpeed's stage 1): every replica has every param and the
 * all-reduced gradient (clipped whole, as without it), but keeps and
 * updates only its piece of each: a param of N elements is flattened and
 * zero-padded to D pieces of ceil(N / D) (FSDP's flat shards), replica r
 * updates piece r with its optimizer state of that piece's size, and the
 * updated pieces are all-gathered into every replica's param (written in
 * place). zero = 2 reduce-scatters the gradients instead of all-reducing
 * them: each replica gets only its piece's mean, and clipping's global
 * norm is the mean of the replicas' sums of their pieces' squares, all-
 * reduced, times D. The update of a piece is elementwise, so the params
 * are those without it, up to the norm's summation order (zero = 2).
 * zero = 3 (params sharded, FSDP) is not in this version. */

/* A node of the rewrite: op on ins, where pin is, made for the backward. */
static tfg_node_id zadd(tfg_replicate *c, tfg_op_id op, const tfg_node_id *ins, int nin, const tfg_attrs *a,
                        const tfg_devspec *pin) {
  tfg_node src = {.op = op, .ninputs = nin, .loc = c->a->loc, .backward = true};
  if (a) src.attrs = *a;
  tfg_node_id id;
  tfg_status st = tfg_replicate_add(c, &src, ins, pin, &id);
  TFG_ASSERT(st == TFG_OK); /* shapes this file chose */
  return id;
}

/* x flattened and zero-padded to `whole` elements (a multiple of D). */
static tfg_node_id zflat(tfg_replicate *c, tfg_node_id x, int64_t whole, const tfg_devspec *pin) {
  const tfg_node nx = c->g->nodes[x];
  int64_t numel = tfg_shape_numel(&nx.shape);
  tfg_attrs flat = {.niv = 1, .iv = {numel}};
  tfg_node_id f = zadd(c, TFG_OP_RESHAPE, &x, 1, &flat, pin);
  if (whole == numel) return f;
  tfg_node zeros = {.op = TFG_OP_INIT, .dtype = nx.dtype, .shape = {1, {whole - numel}}, .loc = c->a->loc,
                    .attrs = {.init = TFG_INIT_ZEROS}};
  tfg_node_id z;
  tfg_status st = tfg_replicate_add(c, &zeros, NULL, pin, &z);
  TFG_ASSERT(st == TFG_OK);
  tfg_node_id in[2] = {f, z};
  return zadd(c, TFG_OP_CONCAT, in, 2, &(tfg_attrs){.axis = 0}, pin);
}

/* Piece r of D of the flat x. */
static tfg_node_id zpiece(tfg_replicate *c, tfg_node_id flat, int r, int64_t per, const tfg_devspec *pin) {
  tfg_attrs sl = {.axis = 0, .start = r * per, .end = (r + 1) * per};
  return zadd(c, TFG_OP_SLICE, &flat, 1, &sl, pin);
}

static tfg_status zero_updates(tfg_replicate *c, tfg_train_step *out) {
  const tfg_action *a = c->a;
  /* D replicas in the job, this process's R from the first'th on (an
   * mpirun job's ranks in order: runtime/collective.h's pieces) */
  int R = c->s->nreplicas, n = c->n, D = R * c->job.size, first = c->job.rank * R, stage = a->config.zero;
  tfg_graph *g = c->g;
  int64_t *per = malloc(sizeof *per * ((size_t)n + 1));
  tfg_node_id *ps = malloc(sizeof *ps * ((size_t)R * (size_t)n + 1)), *gs = malloc(sizeof *gs * ((size_t)R * (size_t)n + 1));
  tfg_node_id *clipped = malloc(sizeof *clipped * ((size_t)R * (size_t)n + 1));
  TFG_ASSERT(per && ps && gs && clipped);
  for (int i = 0; i < n; i++) per[i] = (tfg_shape_numel(&g->nodes[out->params[i]].shape) + D - 1) / D;
  /* the gradients' pieces: of the all-reduced whole (clipped whole), or reduce-scattered */
  /* A collective's nodes all come before any reader of one of them (the
   * planner's buckets run in graph order): every replica's flat gradient
   * (and reduce-scatter) first, then the pieces. */
  int64_t key0 = g->nnodes;
  bool whole_clip = stage == 1 && a->config.clip_grad_norm > 0 && n > 0;
  for (int r = 0; r < R; r++) {
    if (whole_clip) tfg_autodiff_clip(g, c->d, a->config.clip_grad_norm, &c->grads[r * n], n, &clipped[r * n]);
    for (int i = 0; i < n; i++) {
      tfg_devspec pin = g->nodes[c->rparams[r * n + i]].pin;
      gs[r * n + i] = zflat(c, whole_clip ? clipped[r * n + i] : c->grads[r * n + i], per[i] * D, &pin);
      if (stage == 2)
        gs[r * n + i] = zadd(c, TFG_OP_REDUCE_SCATTER, &gs[r * n + i], 1, &(tfg_attrs){.n = R, .key = key0 + i}, &pin);
    }
  }
  for (int r = 0; r < R; r++)
    for (int i = 0; i < n; i++) {
      tfg_node_id p = c->rparams[r * n + i];
      tfg_devspec pin = g->nodes[p].pin;
      gs[r * n + i] = zpiece(c, gs[r * n + i], first + r, per[i], &pin);
      ps[r * n + i] = zpiece(c, zflat(c, p, per[i] * D, &pin), first + r, per[i], &pin);
      g->nodes[ps[r * n + i]].name = g->nodes[out->params[i]].name; /* its state's names, no_decay */
    }
  if (stage == 2 && a->config.clip_grad_norm > 0 && n > 0) {
    /* the global norm: each replica's sum of squares, their mean all-reduced, times D */
    int64_t key = g->nnodes;
    tfg_node_id *mean = malloc(sizeof *mean * (size_t)R);
    TFG_ASSERT(mean != NULL);
    for (int r = 0; r < R; r++) {
      tfg_devspec pin = g->nodes[c->rparams[r * n]].pin;
      tfg_node_id total = tfg_autodiff_sumsq(g, c->d, &gs[r * n], n);
      mean[r] = zadd(c, TFG_OP_ALLREDUCE, &total, 1, &(tfg_attrs){.n = R, .key = key}, &pin);
    }
    for (int r = 0; r < R; r++) {
      tfg_autodiff_clip_by(g, c->d, a->config.clip_grad_norm, mean[r], (double)D, &gs[r * n], n, &clipped[r * n]);
      memcpy(&gs[r * n], &clipped[r * n], sizeof *gs * (size_t)n);
    }
    free(mean);
  }
  /* each replica updates its pieces (its own state), the pieces gathered back into its params */
  tfg_action whole = *a;
  whole.config.clip_grad_norm = 0; /* done above */
  out->zero = stage;
  out->nshards = D;
  out->shard_first = first;
  out->local_shards = R;
  out->updates = realloc(out->updates, sizeof *out->updates * (size_t)(2 * R * n + 1));
  tfg_node_id *states = malloc(sizeof *states * (size_t)(2 * n + 1));
  TFG_ASSERT(out->updates && states);
  tfg_status st = TFG_OK;
  int64_t gkey = g->nnodes;
  for (int r = 0; r < R && st == TFG_OK; r++) {
    int ns = 0;
    st = tfg_autodiff_updates(g, &whole, &ps[r * n], &gs[r * n], n, NULL, &out->updates[r * n], states, &ns, c->d);
    if (st != TFG_OK) break;
    if (r == 0) {
      out->nstates = ns;
      memcpy(out->states, states, sizeof *states * (size_t)ns);
      out->state_shards = malloc(sizeof *out->state_shards * ((size_t)ns * (size_t)R + 1));
      out->state_param = malloc(sizeof *out->state_param * ((size_t)ns + 1));
      TFG_ASSERT(out->state_shards && out->state_param);
      int each = n ? ns / n : 0; /* in param order, as many each (tfg_autodiff_updates) */
      TFG_ASSERT(each * n == ns);
      for (int j = 0; j < ns; j++) out->state_param[j] = out->params[j / each];
    }
    TFG_ASSERT(ns == out->nstates);
    for (int j = 0; j < ns; j++) out->state_shards[j * R + r] = states[j];
  }
  /* every replica's all-gathers, then what reads them: each param written in place */
  tfg_node_id *all = malloc(sizeof *all * ((size_t)R * (size_t)n + 1));
  TFG_ASSERT(all != NULL);
  for (int r = 0; r < R && st == TFG_OK; r++)
    for (int i = 0; i < n; i++) {
      tfg_devspec pin = g->nodes[c->rparams[r * n + i]].pin; /* a copy: adding moves the nodes */
      all[r * n + i] = zadd(c, TFG_OP_ALL_GATHER, &ps[r * n + i], 1,
                            &(tfg_attrs){.n = R, .key = gkey + i, .end = per[i] * D}, &pin);
    }
  for (int r = 0; r < R && st == TFG_OK; r++)
    for (int i = 0; i < n; i++) {
      tfg_node_id p = c->rparams[r * n + i], x = all[r * n + i];
      const tfg_node np = g->nodes[p];
      int64_t numel = tfg_shape_numel(&np.shape);
      if (per[i] * D != numel) x = zadd(c, TFG_OP_SLICE, &x, 1, &(tfg_attrs){.axis = 0, .start = 0, .end = numel}, &np.pin);
      tfg_attrs shape = {.niv = np.shape.rank};
      for (int k = 0; k < np.shape.rank; k++) shape.iv[k] = np.shape.dim[k];
      x = zadd(c, TFG_OP_RESHAPE, &x, 1, &shape, &np.pin);
      tfg_node_id in[2] = {p, x};
      out->updates[R * n + r * n + i] = zadd(c, TFG_OP_GRAD_ACCUMULATE, in, 2, &(tfg_attrs){.value = 0}, &np.pin);
    }
  free(all);
  out->nupdates = 2 * R * n;
  if (st == TFG_OK) { /* place --explain: what it saved */
    int64_t full = 0, piece = 0;
    for (int j = 0; j < out->nstates; j++) {
      full += tfg_node_bytes(&g->nodes[out->state_param[j]]);
      piece += tfg_node_bytes(&g->nodes[out->state_shards[j * R]]);
    }
    tfg_strbuf b = {0}, w = {0}, pc = {0};
    tfg_size_format(&w, full);
    tfg_size_format(&pc, piece);
    tfg_strbuf_printf(&b, "zero = %d (train at line %u): the optimizer state (%d tensors, %s) in %d pieces, one a "
                      "replica: %s on each instead of %s; gradients %s, params all-gathered after each update\n",
                      stage, a->loc.line, out->nstates, w.data, D, pc.data, w.data,
                      stage == 2 ? "reduce-scattered (each replica its piece's mean)" : "all-reduced");
    tfg_train_step_explain(out, b.data, false);
    tfg_strbuf_free(&b);
    tfg_strbuf_free(&w);
    tfg_strbuf_free(&pc);
  }
  free(states);
  free(per);
  free(ps);
  free(gs);
  free(clipped);
  return st;
}

tfg_status tfg_replicate_data_end(tfg_replicate *c, tfg_train_step *out) {
  int R = c->s->nreplicas, n = c->n, k = c->a->config.accumulate;
  if (k > 1) {
    /* Each replica sums its runs' gradients where it keeps its params;
     * the step's last run goes on to the all-reduce. */
    out->accumulate = k;
    out->accs = malloc(sizeof *out->accs * (size_t)(R * n + 1));
    out->acc_first = malloc(sizeof *out->acc_first * (size_t)(R * n + 1));
    out->acc_add = malloc(sizeof *out->acc_add * (size_t)(R * n + 1));
    TFG_ASSERT(out->accs && out->acc_first && out->acc_add);
    for (int r = 0; r < R; r++)
      tfg_autodiff_accumulate(c->g, k, &c->rparams[r * n], &c->grads[r * n], n, &out->accs[r * n],
                              &out->acc_first[r * n], &out->acc_add[r * n], c->d);
  }
  int zero = c->a->config.zero;
  if (zero > 0) {
    const tfg_loc *at = &c->a->config.zero_at;
    const char *no = R * c->job.size < 2 ? "shards over data-parallel replicas, and this train has one"
                     : zero == 3 ? "(params sharded too, as FSDP) is not in this version; zero = 1 and 2 are"
                     : c->amps ? "with precision = f16 is not in this version (its grad scaler would need every "
                                 "replica's finite check)"
                               : NULL;
    if (no) {
      tfg_diag_error(c->d, at, "zero = %d %s", zero, no);
      if (R * c->job.size < 2) tfg_diag_help(c->d, "use mirrored(...) or parallel(data = D, ...) with D > 1");
      return TFG_ERR_NAME;
    }
    if (zero == 1) all_reduce(c, out);
    tfg_status st = zero_updates(c, out);
    if (st == TFG_OK && k > 1) {
      /* a step's other runs fetch an accumulation per update (runtime/train.c): the
       * gathers' assigns, the second half, repeat the first half's */
      int m = R * n;
      out->accs = realloc(out->accs, sizeof *out->accs * (size_t)(2 * m + 1));
      out->acc_first = realloc(out->acc_first, sizeof *out->acc_first * (size_t)(2 * m + 1));
      out->acc_add = realloc(out->acc_add, sizeof *out->acc_add * (size_t)(2 * m + 1));
      TFG_ASSERT(out->accs && out->acc_first && out->acc_add);
      memcpy(out->accs + m, out->accs, sizeof *out->accs * (size_t)m);
      memcpy(out->acc_first + m, out->acc_first, sizeof *out->acc_first * (size_t)m);
      memcpy(out->acc_add + m, out->acc_add, sizeof *out->acc_add * (size_t)m);
    }
    return st;
  }
  if (R * c->job.size > 1) all_reduce(c, out); /* the mean over one replica is its gradient */
  return updates(c, out);
}
