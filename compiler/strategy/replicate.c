/* compiler/strategy/replicate.c: the replica cloning mirrored and
 * parameter_server share (see compiler/strategy/replicate.h), and the
 * checks of the device arguments they read. */
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
  *out = id;
  return tfg_op_get(src->op)->infer(c->g, m, c->d);
}

void tfg_replicate_begin(tfg_replicate *c, const tfg_replicate_hooks *h, tfg_graph *g, const tfg_action *a,
                         const tfg_program *p, const tfg_strategy *s, const tfg_job *job, const tfg_switches *sw,
                         tfg_diag *d, tfg_train_step *out) {
  *c = (tfg_replicate){.h = h, .g = g, .a = a, .s = s, .job = job ? *job : (tfg_job){0, 1}, .sw = sw, .d = d,
                       .n0 = g->nnodes};
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
  out->losses = malloc(sizeof *out->losses * (size_t)R);
  out->metrics = malloc(sizeof *out->metrics * (size_t)(nm + 1));
  out->replica_metrics = malloc(sizeof *out->replica_metrics * (size_t)(R * nm + 1));
  out->states = malloc(sizeof *out->states * (size_t)(2 * n + 1));
  c->rparams = malloc(sizeof *c->rparams * (size_t)(R * n + 1));
  c->grads = malloc(sizeof *c->grads * (size_t)(R * n + 1));
  TFG_ASSERT(out->losses && out->metrics && out->replica_metrics && out->states && c->rparams && c->grads);
  out->accumulate = 1;
}

/* Clones the cone for replica r into c->map: an input through its slice
 * when the strategy cut one (else whole, re-pinned to the cpu where data
 * is loaded), a param as the strategy's hook says, every other node
 * where the hook pins it. */
static tfg_status clone_replica(tfg_replicate *c, int r, tfg_train_step *out) {
  size_t span = (size_t)c->top + 1;
  tfg_status st = TFG_OK;
  for (int32_t i = 0; i <= c->top && st == TFG_OK; i++) {
    if (!c->cone[i]) continue;
    tfg_node nd = c->g->nodes[i];
    nd.pin = c->saved[i]; /* the program's pin: replica 0 re-pins its params and inputs */
    if (nd.op == TFG_OP_INPUT) {
      c->g->nodes[i].pin = tfg_replicate_cpu_pin(c); /* data is loaded on the host */
      c->map[i] = i;
      if (c->slices && c->slices[(size_t)r * span + (size_t)i] >= 0) c->map[i] = c->slices[(size_t)r * span + (size_t)i];
      continue;
    }
    if (nd.op == TFG_OP_PARAM) {
      st = c->h->param(c, r, i, &nd, out);
      continue;
    }
    tfg_devspec pin;
    if ((st = c->h->pin(c, &nd.pin, r, &pin)) != TFG_OK) break;
    if (nd.ninputs > c->cap) {
      c->cap = nd.ninputs * 2;
      c->ins = realloc(c->ins, sizeof *c->ins * (size_t)c->cap);
      TFG_ASSERT(c->ins != NULL);
    }
    for (int k = 0; k < nd.ninputs; k++) c->ins[k] = c->map[nd.inputs[k]];
    st = tfg_replicate_add(c, &nd, c->ins, &pin, &c->map[i]);
    if (c->h->cloned) c->h->cloned(c, r, i, st);
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
  int R = c->s->nreplicas, n = c->n, nm = a->config.nmetrics;
  tfg_status st = TFG_OK;
  for (int r = 0; r < R && st == TFG_OK; r++) {
    if ((st = clone_replica(c, r, out)) != TFG_OK) break;
    out->losses[r] = c->map[a->loss];
    for (int k = 0; k < nm; k++) out->replica_metrics[r * nm + k] = c->map[a->config.metrics[k]];
    for (int i = 0; i < n; i++) c->rparams[r * n + i] = c->map[out->params[i]];
    int32_t from = c->g->nnodes;
    tfg_node_id loss = out->losses[r];
    if (c->amps) loss = tfg_autodiff_scale_loss(c->g, loss, &c->amps[r]); /* precision = f16 */
    tfg_autodiff(c->g, loss, &c->rparams[r * n], n, &c->grads[r * n], c->sw);
    for (int i = 0; i < n; i++) TFG_ASSERT(c->grads[r * n + i] >= 0); /* a clone differentiates like the original */
    pin_unpinned(c, from, r);
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
