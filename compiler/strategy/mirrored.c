/* compiler/strategy/mirrored.c: mirrored(devices), synchronous data
 * parallel (compiler/strategy/strategy.h says what it builds): the
 * replicas' clones, the batch split, the all-reduce of the gradients and
 * the same update on every replica. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/strategy/replicate.h"
#include "compiler/strategy/strategy.h"
#include "ir/ops.h"

/* ---- reading the setting ------------------------------------------------------ */

/* mirrored() and mirrored(gpu:*): one replica per GPU entry of the run,
 * as TensorFlow's MirroredStrategy() takes every visible GPU. */
static bool mirrored_spans_gpus(const tfg_strategy_config *s) {
  const tfg_devarg *v = tfg_strategy_config_arg(s, "devices");
  return v->kind == TFG_DEVARG_NONE || (v->kind == TFG_DEVARG_DEVICE && v->dev.kind == TFG_DEV_GPU_ANY);
}

/* Every GPU entry of the run (s->gpus, at least one), a replica on each. */
static tfg_status read_all(const tfg_strategy_config *s, tfg_strategy *out) {
  int n = s->gpus > 0 ? s->gpus : 1;
  out->nreplicas = n;
  out->group = 1;
  out->devices = malloc(sizeof *out->devices * (size_t)n);
  TFG_ASSERT(out->devices != NULL);
  for (int k = 0; k < n; k++) out->devices[k] = (tfg_devspec){.kind = TFG_DEV_GPU, .index = k, .loc = s->loc};
  return TFG_OK;
}

/* mirrored(devices): a list of devices, or a list of equal-sized groups. */
static tfg_status mirrored_read(const tfg_strategy_config *s, tfg_strategy *out, tfg_diag *d) {
  const tfg_devarg *v = tfg_strategy_config_arg(s, "devices");
  if (mirrored_spans_gpus(s)) return read_all(s, out);
  if (v->kind != TFG_DEVARG_LIST) {
    tfg_diag_error(d, &s->loc, "mirrored takes a list of devices, got %s", tfg_replicate_arg_what(v));
    tfg_diag_help(d, "for example mirrored([gpu:0, gpu:1])");
    return TFG_ERR_NAME;
  }
  int32_t n = v->n;
  const tfg_devarg *items = v->items;
  if (n == 0) {
    tfg_diag_error(d, &s->loc, "mirrored needs at least one device");
    tfg_diag_help(d, "for example mirrored([gpu:0, gpu:1])");
    return TFG_ERR_NAME;
  }
  bool groups = items[0].kind == TFG_DEVARG_LIST;
  int group = groups ? items[0].n : 1;
  for (int32_t k = 0; k < n; k++) {
    if ((items[k].kind == TFG_DEVARG_LIST) != groups) {
      tfg_diag_error(d, &s->loc, "mirrored: give a list of devices or a list of groups (lists of devices), not both");
      tfg_diag_help(d, "for example mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])");
      return TFG_ERR_NAME;
    }
    if (!groups) continue;
    int32_t m = items[k].n;
    if (m == 0) {
      tfg_diag_error(d, &s->loc, "mirrored: group %d is empty", (int)k);
      return TFG_ERR_NAME;
    }
    if (m != group) {
      tfg_diag_error(d, &s->loc,
                     "mirrored: every group needs the same number of devices, but group 0 has %d and group %d has %d",
                     group, (int)k, (int)m);
      const tfg_devarg *first = &items[k].items[0];
      if (first->kind == TFG_DEVARG_DEVICE) tfg_diag_note(d, &first->dev.loc, "group %d starts here", (int)k);
      tfg_diag_help(d, "the program's gpu:K means the K-th device of each replica's group");
      return TFG_ERR_NAME;
    }
  }
  out->nreplicas = (int)n;
  out->group = group;
  out->devices = malloc(sizeof *out->devices * (size_t)n * (size_t)group);
  TFG_ASSERT(out->devices != NULL);
  int nd = 0;
  for (int32_t k = 0; k < n; k++)
    for (int j = 0; j < group; j++) {
      const tfg_devarg *dv = groups ? &items[k].items[j] : &items[k];
      char what[48];
      if (groups) snprintf(what, sizeof what, "item %d of group %d", j, (int)k);
      else snprintf(what, sizeof what, "item %d", (int)k);
      if (!tfg_replicate_check_device(s, "mirrored", what, dv, out->devices, nd, d)) return TFG_ERR_NAME;
      out->devices[nd++] = dv->dev;
    }
  return TFG_OK;
}

/* ---- the rewrite ------------------------------------------------------------- */

/* Where replica r runs a node the program pinned to *p: cpu stays on the
 * cpu (the user's own pin is kept, it says why); no pin and gpu:* go to
 * the replica's first device; gpu:K to the K-th device of its group. A
 * gpu:K past the group is an error at the program's pin. */
static tfg_status mirrored_pin(tfg_replicate *c, const tfg_devspec *p, int r, tfg_devspec *out) {
  const tfg_strategy *s = c->s;
  const tfg_devspec *grp = &s->devices[r * s->group];
  if (p->kind == TFG_DEV_CPU) {
    *out = *p;
    return TFG_OK;
  }
  if (p->kind != TFG_DEV_GPU) {
    *out = tfg_replicate_pin(c, &grp[0]);
    return TFG_OK;
  }
  if (p->index < s->group) {
    *out = tfg_replicate_pin(c, &grp[p->index]);
    return TFG_OK;
  }
  if (s->group == 1) {
    tfg_diag_error(c->d, &p->loc, "gpu:%" PRId64 " has no place in mirrored's replicas: each replica is one device, gpu:0",
                   p->index);
    tfg_diag_note(c->d, &s->loc, "the replicas are given here");
    tfg_diag_help(c->d, "give each replica a group of devices: mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])");
  } else {
    tfg_diag_error(c->d, &p->loc, "gpu:%" PRId64 " has no place in mirrored's groups: each replica has %d devices, gpu:0 to gpu:%d",
                   p->index, s->group, s->group - 1);
    tfg_diag_note(c->d, &s->loc, "the groups are given here");
    tfg_diag_help(c->d, "the program's gpu:K means the K-th device of each replica's group");
  }
  return TFG_ERR_PLACE;
}

/* Replica 0 reads the program's params (re-pinned to its group),
 * replicas 1.. copies of them, recorded as mirrors. */
static tfg_status mirrored_param(tfg_replicate *c, int r, int32_t i, const tfg_node *nd, tfg_train_step *out) {
  tfg_devspec pin;
  tfg_status st = mirrored_pin(c, &nd->pin, r, &pin);
  if (st != TFG_OK) return st;
  if (r == 0) {
    c->g->nodes[i].pin = pin;
    c->map[i] = i;
    return TFG_OK;
  }
  st = tfg_replicate_add(c, nd, NULL, &pin, &c->map[i]);
  TFG_ASSERT(st == TFG_OK);
  out->mirror_src[out->nmirrors] = i;
  out->mirror_dst[out->nmirrors++] = c->map[i];
  return TFG_OK;
}

static void mirrored_cloned(tfg_replicate *c, int r, int32_t i, tfg_status st) {
  if (st != TFG_OK) {
    tfg_diag_note(c->d, &c->s->loc, "the batch is split %d ways by mirrored here", c->s->nreplicas);
    return;
  }
  /* A replica's dropout draws its rows' part of the whole batch's mask
   * (batch-major tensors: replica r's elements start at r times its
   * size), so mirrored trains as one device would. */
  tfg_node *m = &c->g->nodes[c->map[i]];
  if (m->op == TFG_OP_DROPOUT) m->attrs.offset = (c->job.rank * c->s->nreplicas + r) * tfg_shape_numel(&m->shape);
}

static const tfg_replicate_hooks mirrored_hooks = {
    .pin = mirrored_pin, .param = mirrored_param, .cloned = mirrored_cloned};

/* Checks that every input the cone reads splits into R equal row blocks
 * per process of the job. */
static tfg_status check_batches(tfg_replicate *c) {
  int R = c->s->nreplicas * c->job.size;
  for (int32_t i = 0; i <= c->top; i++) {
    const tfg_node *nd = &c->g->nodes[i];
    if (!c->cone[i] || nd->op != TFG_OP_INPUT || nd->shape.rank == 0) continue;
    int64_t b = nd->shape.dim[0];
    if (b % R == 0) continue;
    tfg_diag_error(c->d, &nd->loc, "input %s: a global batch of %" PRId64 " rows does not split evenly over %d replicas",
                   nd->name, b, R);
    if (c->job.size > 1)
      tfg_diag_note(c->d, &c->s->loc, "mirrored makes %d replicas here on each of %d ranks: %d in all",
                    c->s->nreplicas, c->job.size, R);
    else
      tfg_diag_note(c->d, &c->s->loc, "mirrored makes %d replicas here", R);
    int64_t lo = b / R * R, hi = lo + R;
    if (lo > 0) tfg_diag_help(c->d, "make the batch a multiple of %d, like %" PRId64 " or %" PRId64, R, lo, hi);
    else tfg_diag_help(c->d, "make the batch a multiple of %d, like %" PRId64, R, hi);
    return TFG_ERR_SHAPE;
  }
  return TFG_OK;
}

/* Adds every replica's SLICE of every batched input of the cone (on
 * cpu, where data is loaded) before any replica's clone: in graph order,
 * hence in the feeder's step order, every replica's rows are cut first,
 * so a replica on another device starts while a replica on the cpu
 * itself (mirrored([cpu, gpu:0])) still computes. */
static void add_slices(tfg_replicate *c) {
  int R = c->s->nreplicas, first = c->job.rank * R; /* this process's replicas among the job's */
  size_t span = (size_t)c->top + 1;
  c->slices = malloc(sizeof *c->slices * (size_t)R * span);
  TFG_ASSERT(c->slices != NULL);
  for (int r = 0; r < R; r++)
    for (int32_t i = 0; i <= c->top; i++) {
      const tfg_node *nd = &c->g->nodes[i];
      c->slices[(size_t)r * span + (size_t)i] = -1;
      if (!c->cone[i] || nd->op != TFG_OP_INPUT || nd->shape.rank == 0) continue; /* a scalar has no batch */
      int64_t rows = nd->shape.dim[0] / (R * c->job.size);
      tfg_node slice = *nd;
      slice.op = TFG_OP_SLICE;
      slice.ninputs = 1;
      slice.name = NULL;
      memset(&slice.attrs, 0, sizeof slice.attrs);
      slice.attrs.axis = 0;
      slice.attrs.start = (first + r) * rows;
      slice.attrs.end = (first + r + 1) * rows;
      tfg_devspec pin = tfg_replicate_cpu_pin(c);
      tfg_node_id in = i;
      tfg_status st = tfg_replicate_add(c, &slice, &in, &pin, &c->slices[(size_t)r * span + (size_t)i]);
      TFG_ASSERT(st == TFG_OK);
    }
}

/* Whether pin names one of replica r's devices (the groups are disjoint:
 * mirrored_read refuses a device named twice). */
static bool in_group(const tfg_strategy *s, int r, const tfg_devspec *pin) {
  for (int j = 0; j < s->group; j++) {
    const tfg_devspec *d = &s->devices[r * s->group + j];
    if (d->kind == pin->kind && d->index == pin->index) return true;
  }
  return false;
}

/* The mean of each gradient over the replicas, where it was computed.
 * The key is replica 0's all-reduce node id: the same in every replica,
 * and unique in the graph, so the all-reduces of several train actions
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
      tfg_node ar = {.op = TFG_OP_ALLREDUCE, .ninputs = 1, .loc = pn.loc};
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

static tfg_status mirrored_rewrite(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_strategy *s,
                                   const tfg_job *job, const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  tfg_replicate c;
  tfg_replicate_begin(&c, &mirrored_hooks, g, a, p, s, job, sw, d, out);
  int R = s->nreplicas, n = c.n;
  out->updates = malloc(sizeof *out->updates * (size_t)(R * n + 1));
  /* Replicas 1..: a copy of every param of the cone and of every state. */
  size_t m = (size_t)(R - 1) * (size_t)(c.ncone_params + 2 * n) + 1;
  out->mirror_src = malloc(sizeof *out->mirror_src * m);
  out->mirror_dst = malloc(sizeof *out->mirror_dst * m);
  TFG_ASSERT(out->updates && out->mirror_src && out->mirror_dst);
  /* precision = f16: a grad scaler per replica; all replicas see the same
   * all-reduced gradients, so their scalers move alike */
  if (a->config.precision == TFG_DTYPE_F16) {
    c.amps = calloc((size_t)R, sizeof *c.amps);
    TFG_ASSERT(c.amps != NULL);
  }

  tfg_status st = check_batches(&c);
  if (st == TFG_OK) add_slices(&c);
  if (st == TFG_OK) st = tfg_replicate_replicas(&c, out);
  if (st == TFG_OK && a->config.accumulate > 1) {
    /* Each replica sums its micro-batches' gradients where it keeps its
     * params; the step's last micro-batch goes on to the all-reduce. */
    int k = a->config.accumulate;
    out->accumulate = k;
    out->accs = malloc(sizeof *out->accs * (size_t)(R * n + 1));
    out->acc_first = malloc(sizeof *out->acc_first * (size_t)(R * n + 1));
    out->acc_add = malloc(sizeof *out->acc_add * (size_t)(R * n + 1));
    TFG_ASSERT(out->accs && out->acc_first && out->acc_add);
    for (int r = 0; r < R; r++)
      tfg_autodiff_accumulate(g, k, &c.rparams[r * n], &c.grads[r * n], n, &out->accs[r * n], &out->acc_first[r * n],
                              &out->acc_add[r * n], d);
  }
  if (st == TFG_OK) {
    all_reduce(&c, out);
    st = updates(&c, out);
  }
  return tfg_replicate_end(&c, st, out);
}

/* With one replica it is the single step, and --verbose says so. */
static void mirrored_describe(const tfg_train_step *st, char *buf, size_t n) {
  if (st->nreplicas > 1) snprintf(buf, n, "mirrored over %d replicas", st->nreplicas);
  else snprintf(buf, n, "single");
}

const tfg_strategy_i tfg_strategy_mirrored = {
    .name = "mirrored", .run = TFG_STEP_GROUP, .read = mirrored_read,
    .rewrite = mirrored_rewrite, .describe = mirrored_describe, .spans_gpus = mirrored_spans_gpus,
    .not_predicted = NULL};
