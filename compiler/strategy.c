/* compiler/strategy.c: training strategies as graph rewrites (see
 * compiler/strategy.h for what each one builds).
 *
 * A replicated step is built from the train action's forward cone: every
 * node the loss and the metrics depend on is cloned once per replica (or
 * worker), in id order so the clones stay topologically ordered, with its
 * inputs remapped to the replica's nodes and its shape inferred again by
 * the op's own rule (the raw arguments are still in attrs, so a reshape
 * to [-1, 4] follows the smaller batch and a reshape to [128, 4] fails
 * where the user wrote it). Gradients are then ordinary tfg_autodiff of
 * each replica's loss: autodiff gives every gradient node the pin of the
 * forward node it differentiates, so a replica's backward pass lands on
 * its devices without further work. On any error the graph is put back
 * as it was (nodes truncated, pins restored), so a failed rewrite leaves
 * nothing behind for the placer to trip on. */
#include "compiler/strategy.h"

#include "compiler/autocast.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/autocast.h"
#include "ir/ops.h"

/* ---- reading the setting ------------------------------------------------------ */

/* What a device argument is, for messages ("an int"): the interpreter
 * named any value that is not a device or a list. */
static const char *arg_what(const tfg_devarg *v) {
  switch (v->kind) {
  case TFG_DEVARG_NONE: return "nothing";
  case TFG_DEVARG_DEVICE: return "a device";
  case TFG_DEVARG_LIST: return "a list";
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

/* Checks that v is a device a strategy can put a replica on (cpu or
 * gpu:N; gpu:* leaves the choice to the placer, which a strategy must not)
 * and not one of seen[0..n); reports at the device (or at the strategy,
 * s->loc, when the argument is not a device). who: "mirrored", ... */
static bool check_device(const tfg_strategy_config *s, const char *who, const char *what, const tfg_devarg *v,
                         const tfg_devspec *seen, int n, tfg_diag *d) {
  char name[40];
  if (v->kind != TFG_DEVARG_DEVICE) {
    tfg_diag_error(d, &s->loc, "%s: %s is %s, not a device", who, what, arg_what(v));
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

/* mirrored() and mirrored(gpu:*): one replica on each of the run's GPU
 * entries (s->gpus, at least one), as TensorFlow's MirroredStrategy()
 * takes every visible GPU. */
static tfg_status read_mirrored_all(const tfg_strategy_config *s, tfg_strategy *out) {
  int n = s->gpus > 0 ? s->gpus : 1;
  out->kind = TFG_STRATEGY_MIRRORED;
  out->nreplicas = n;
  out->group = 1;
  out->devices = malloc(sizeof *out->devices * (size_t)n);
  TFG_ASSERT(out->devices != NULL);
  for (int k = 0; k < n; k++) out->devices[k] = (tfg_devspec){.kind = TFG_DEV_GPU, .index = k, .loc = s->loc};
  return TFG_OK;
}

/* mirrored(devices): a list of devices, or a list of equal-sized groups. */
static tfg_status read_mirrored(const tfg_strategy_config *s, tfg_strategy *out, tfg_diag *d) {
  const tfg_devarg *v = &s->devices;
  if (v->kind == TFG_DEVARG_NONE || (v->kind == TFG_DEVARG_DEVICE && v->dev.kind == TFG_DEV_GPU_ANY))
    return read_mirrored_all(s, out);
  if (v->kind != TFG_DEVARG_LIST) {
    tfg_diag_error(d, &s->loc, "mirrored takes a list of devices, got %s", arg_what(v));
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
  out->kind = TFG_STRATEGY_MIRRORED;
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
      if (!check_device(s, "mirrored", what, dv, out->devices, nd, d)) return TFG_ERR_NAME;
      out->devices[nd++] = dv->dev;
    }
  return TFG_OK;
}

/* parameter_server(workers, ps = cpu). */
static tfg_status read_ps(const tfg_strategy_config *s, tfg_strategy *out, tfg_diag *d) {
  const tfg_devarg *w = &s->workers, *ps = &s->ps;
  if (w->kind != TFG_DEVARG_LIST || w->n == 0) {
    if (w->kind != TFG_DEVARG_NONE && w->kind != TFG_DEVARG_LIST)
      tfg_diag_error(d, &s->loc, "parameter_server: workers must be a list of devices, got %s", arg_what(w));
    else tfg_diag_error(d, &s->loc, "parameter_server needs at least one worker");
    tfg_diag_help(d, "for example parameter_server(ps = cpu, workers = [gpu:0, gpu:1])");
    return TFG_ERR_NAME;
  }
  out->kind = TFG_STRATEGY_PS;
  out->nreplicas = (int)w->n;
  out->group = 1;
  out->devices = malloc(sizeof *out->devices * (size_t)w->n);
  TFG_ASSERT(out->devices != NULL);
  for (int32_t k = 0; k < w->n; k++) {
    char what[32];
    snprintf(what, sizeof what, "worker %d", (int)k);
    if (!check_device(s, "parameter_server", what, &w->items[k], out->devices, (int)k, d)) return TFG_ERR_NAME;
    out->devices[k] = w->items[k].dev;
  }
  /* The server may share a worker's device: it is not a replica. */
  out->ps = (tfg_devspec){.kind = TFG_DEV_CPU, .loc = s->loc};
  if (ps->kind != TFG_DEVARG_NONE) {
    if (!check_device(s, "parameter_server", "ps", ps, NULL, 0, d)) return TFG_ERR_NAME;
    out->ps = ps->dev;
  }
  return TFG_OK;
}

tfg_status tfg_strategy_of(const tfg_action *a, tfg_strategy *out, tfg_diag *d) {
  const tfg_strategy_config *s = &a->config.strategy;
  memset(out, 0, sizeof *out);
  out->kind = TFG_STRATEGY_SINGLE;
  out->loc = s->loc; /* the train statement without a strategy */
  out->nreplicas = 1;
  out->group = 1;
  tfg_status st = TFG_OK;
  if (s->kind == TFG_STRATEGY_MIRRORED) st = read_mirrored(s, out, d);
  else if (s->kind == TFG_STRATEGY_PS) st = read_ps(s, out, d);
  if (st != TFG_OK) {
    tfg_strategy_free(out);
    out->loc = s->loc;
  }
  return st;
}

void tfg_strategy_free(tfg_strategy *s) {
  free(s->devices);
  memset(s, 0, sizeof *s);
  s->nreplicas = s->group = 1;
}

/* ---- the rewrite ------------------------------------------------------------- */

typedef struct rewrite {
  tfg_graph *g;
  const tfg_action *a;
  const tfg_strategy *s;
  tfg_diag *d;
  int32_t n0;             /* nodes before the rewrite: what a failure truncates to */
  int32_t top;            /* the cone's largest id */
  uint8_t *cone;          /* [top + 1]: the loss's and metrics' dependencies */
  int *param_of;          /* [top + 1]: index into params[] of a trained param, or -1 */
  tfg_node_id *map;       /* [top + 1]: the current replica's node for each cone node */
  tfg_devspec *saved;     /* [top + 1]: pins before the rewrite, restored on failure */
  tfg_node_id *slices;    /* mirrored: [R * (top + 1)]: replica r's SLICE of each batched input */
  tfg_node_id *ins;       /* scratch for remapped inputs */
  int cap;
} rewrite;

/* A pin the strategy sets: the device, cited at the strategy. */
static tfg_devspec strategy_pin(const rewrite *c, const tfg_devspec *dev) {
  return (tfg_devspec){.kind = dev->kind, .index = dev->index, .loc = c->s->loc};
}

static tfg_devspec cpu_pin(const rewrite *c) {
  return (tfg_devspec){.kind = TFG_DEV_CPU, .index = 0, .loc = c->s->loc};
}

/* Where replica r runs a node the program pinned to *p: cpu stays on the
 * cpu (the user's own pin is kept, it says why); no pin and gpu:* go to
 * the replica's first device; gpu:K to the K-th device of its group (for
 * parameter_server, a worker is one device: every GPU pin goes to it).
 * A gpu:K past the group is an error at the program's pin. */
static tfg_status replica_pin(rewrite *c, const tfg_devspec *p, int r, tfg_devspec *out) {
  const tfg_strategy *s = c->s;
  const tfg_devspec *grp = &s->devices[r * s->group];
  if (p->kind == TFG_DEV_CPU) {
    *out = *p;
    return TFG_OK;
  }
  if (p->kind != TFG_DEV_GPU || s->kind == TFG_STRATEGY_PS) {
    *out = strategy_pin(c, &grp[0]);
    return TFG_OK;
  }
  if (p->index < s->group) {
    *out = strategy_pin(c, &grp[p->index]);
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

/* Adds a copy of node src (by value: adding moves the array) with the
 * given inputs and pin; its dtype and shape are inferred again. */
static tfg_status add_clone(rewrite *c, const tfg_node *src, const tfg_node_id *ins, const tfg_devspec *pin,
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

/* The job this process is a rank of (tfg_strategy_set_job): mirrored's
 * replicas are global, this process's the ones from job_rank * R. */
static int job_rank = 0, job_size = 1;

void tfg_strategy_set_job(int rank, int nranks) {
  TFG_ASSERT(nranks >= 1 && rank >= 0 && rank < nranks);
  job_rank = rank;
  job_size = nranks;
}

/* Checks that every input the cone reads splits into R equal row blocks
 * per process of the job. */
static tfg_status check_batches(rewrite *c) {
  int R = c->s->nreplicas * job_size;
  for (int32_t i = 0; i <= c->top; i++) {
    const tfg_node *nd = &c->g->nodes[i];
    if (!c->cone[i] || nd->op != TFG_OP_INPUT || nd->shape.rank == 0) continue;
    int64_t b = nd->shape.dim[0];
    if (b % R == 0) continue;
    tfg_diag_error(c->d, &nd->loc, "input %s: a global batch of %" PRId64 " rows does not split evenly over %d replicas",
                   nd->name, b, R);
    if (job_size > 1)
      tfg_diag_note(c->d, &c->s->loc, "mirrored makes %d replicas here on each of %d ranks: %d in all",
                    c->s->nreplicas, job_size, R);
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
static void add_slices(rewrite *c) {
  int R = c->s->nreplicas, first = job_rank * R; /* this process's replicas among the job's */
  size_t span = (size_t)c->top + 1;
  c->slices = malloc(sizeof *c->slices * (size_t)R * span);
  TFG_ASSERT(c->slices != NULL);
  for (int r = 0; r < R; r++)
    for (int32_t i = 0; i <= c->top; i++) {
      const tfg_node *nd = &c->g->nodes[i];
      c->slices[(size_t)r * span + (size_t)i] = -1;
      if (!c->cone[i] || nd->op != TFG_OP_INPUT || nd->shape.rank == 0) continue; /* a scalar has no batch */
      int64_t rows = nd->shape.dim[0] / (R * job_size);
      tfg_node slice = *nd;
      slice.op = TFG_OP_SLICE;
      slice.ninputs = 1;
      slice.name = NULL;
      memset(&slice.attrs, 0, sizeof slice.attrs);
      slice.attrs.axis = 0;
      slice.attrs.start = (first + r) * rows;
      slice.attrs.end = (first + r + 1) * rows;
      tfg_devspec pin = cpu_pin(c);
      tfg_node_id in = i;
      tfg_status st = add_clone(c, &slice, &in, &pin, &c->slices[(size_t)r * span + (size_t)i]);
      TFG_ASSERT(st == TFG_OK);
    }
}

/* Clones the cone for replica (or worker) r into c->map. Mirrored: each
 * input is read through r's SLICE of its rows (add_slices), replica 0 reads the
 * program's params (re-pinned to its group) and replicas 1.. copies of
 * them, recorded as mirrors. parameter_server: the inputs are read
 * whole, the trained params through copies of the worker's own, and the
 * params that are not trained straight from the server. */
static tfg_status clone_replica(rewrite *c, int r, tfg_train_step *out) {
  const tfg_strategy *s = c->s;
  bool ps = s->kind == TFG_STRATEGY_PS;
  int R = s->nreplicas;
  tfg_status st = TFG_OK;
  for (int32_t i = 0; i <= c->top && st == TFG_OK; i++) {
    if (!c->cone[i]) continue;
    tfg_node nd = c->g->nodes[i];
    nd.pin = c->saved[i]; /* the program's pin: replica 0 re-pins its params and inputs */
    if (nd.op == TFG_OP_INPUT) {
      c->g->nodes[i].pin = cpu_pin(c); /* data is loaded on the host */
      c->map[i] = i;
      if (!ps && c->slices[(size_t)r * ((size_t)c->top + 1) + (size_t)i] >= 0)
        c->map[i] = c->slices[(size_t)r * ((size_t)c->top + 1) + (size_t)i];
      continue;
    }
    tfg_devspec pin;
    if (nd.op == TFG_OP_PARAM) {
      if (ps) {
        c->g->nodes[i].pin = strategy_pin(c, &s->ps);
        if (c->param_of[i] < 0) { /* not trained: read from the server, never pushed */
          c->map[i] = i;
          continue;
        }
        pin = strategy_pin(c, &s->devices[r]);
      } else {
        if ((st = replica_pin(c, &nd.pin, r, &pin)) != TFG_OK) break;
        if (r == 0) {
          c->g->nodes[i].pin = pin;
          c->map[i] = i;
          continue;
        }
      }
      st = add_clone(c, &nd, NULL, &pin, &c->map[i]);
      TFG_ASSERT(st == TFG_OK);
      if (!ps) {
        out->mirror_src[out->nmirrors] = i;
        out->mirror_dst[out->nmirrors++] = c->map[i];
      }
      continue;
    }
    if ((st = replica_pin(c, &nd.pin, r, &pin)) != TFG_OK) break;
    if (nd.ninputs > c->cap) {
      c->cap = nd.ninputs * 2;
      c->ins = realloc(c->ins, sizeof *c->ins * (size_t)c->cap);
      TFG_ASSERT(c->ins != NULL);
    }
    for (int k = 0; k < nd.ninputs; k++) c->ins[k] = c->map[nd.inputs[k]];
    st = add_clone(c, &nd, c->ins, &pin, &c->map[i]);
    if (st != TFG_OK && !ps)
      tfg_diag_note(c->d, &s->loc, "the batch is split %d ways by mirrored here", R);
    /* A replica's dropout draws its rows' part of the whole batch's mask
     * (batch-major tensors: replica r's elements start at r times its
     * size), so mirrored trains as one device would. */
    if (st == TFG_OK && !ps && nd.op == TFG_OP_DROPOUT)
      c->g->nodes[c->map[i]].attrs.start =
          (job_rank * R + r) * tfg_shape_numel(&c->g->nodes[c->map[i]].shape);
  }
  return st;
}

/* Whether pin names one of replica r's devices (the groups are disjoint:
 * tfg_strategy_of refuses a device named twice). */
static bool in_group(const tfg_strategy *s, int r, const tfg_devspec *pin) {
  for (int j = 0; j < s->group; j++) {
    const tfg_devspec *d = &s->devices[r * s->group + j];
    if (d->kind == pin->kind && d->index == pin->index) return true;
  }
  return false;
}

/* Gives every node from `from` on without a pin replica r's first
 * device. autodiff pins each gradient node like the forward node it
 * differentiates, and every clone has a pin, so this finds nothing
 * today; it keeps a future gradient rule from leaking a replica's work
 * to the placer's choice. */
static void pin_unpinned(rewrite *c, int32_t from, int r) {
  for (int32_t i = from; i < c->g->nnodes; i++)
    if (c->g->nodes[i].pin.kind == TFG_DEV_NONE)
      c->g->nodes[i].pin = strategy_pin(c, &c->s->devices[r * c->s->group]);
}

static tfg_status replicated_step(rewrite *c, const tfg_program *p, tfg_train_step *out) {
  const tfg_strategy *s = c->s;
  const tfg_action *a = c->a;
  tfg_graph *g = c->g;
  bool ps = s->kind == TFG_STRATEGY_PS;
  int R = s->nreplicas;
  tfg_status st = TFG_OK;

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
  int ncone_params = 0;
  for (int32_t i = c->top; i >= 0; i--) {
    c->param_of[i] = -1;
    c->saved[i] = g->nodes[i].pin;
    if (!c->cone[i]) continue;
    ncone_params += g->nodes[i].op == TFG_OP_PARAM;
    for (int k = 0; k < g->nodes[i].ninputs; k++) c->cone[g->nodes[i].inputs[k]] = 1;
  }

  /* The step's arrays, sized for every replica. */
  out->params = malloc(sizeof *out->params * (size_t)(p->nparams + 1));
  TFG_ASSERT(out->params != NULL);
  /* The params the loss trains, as tfg_autodiff_train_step chooses them,
   * so that every replica clones exactly those. */
  int n = tfg_autodiff_trained_params(g, a, p, out->params, c->d);
  for (int i = 0; i < n; i++) c->param_of[out->params[i]] = i;
  out->nparams = n;
  out->optimizer = tfg_optimizer_name(a->config.optimizer.kind);
  out->nreplicas = R;
  out->nmetrics = nm;
  out->losses = malloc(sizeof *out->losses * (size_t)R);
  out->metrics = malloc(sizeof *out->metrics * (size_t)(nm + 1));
  out->replica_metrics = malloc(sizeof *out->replica_metrics * (size_t)(R * nm + 1));
  out->updates = malloc(sizeof *out->updates * (size_t)((ps ? 1 : R) * n + 1));
  out->states = malloc(sizeof *out->states * (size_t)(2 * n + 1));
  TFG_ASSERT(out->losses && out->metrics && out->replica_metrics && out->updates && out->states);
  if (ps) {
    out->worker_params = malloc(sizeof *out->worker_params * (size_t)(R * n + 1));
    out->worker_grads = malloc(sizeof *out->worker_grads * (size_t)(R * n + 1));
    out->grad_inputs = malloc(sizeof *out->grad_inputs * (size_t)(n + 1));
    TFG_ASSERT(out->worker_params && out->worker_grads && out->grad_inputs);
  } else {
    /* Replicas 1..: a copy of every param of the cone and of every state. */
    size_t m = (size_t)(R - 1) * (size_t)(ncone_params + 2 * n) + 1;
    out->mirror_src = malloc(sizeof *out->mirror_src * m);
    out->mirror_dst = malloc(sizeof *out->mirror_dst * m);
    TFG_ASSERT(out->mirror_src && out->mirror_dst);
  }
  tfg_node_id *rparams = malloc(sizeof *rparams * (size_t)(R * n + 1));
  tfg_node_id *grads = malloc(sizeof *grads * (size_t)(R * n + 1));
  TFG_ASSERT(rparams && grads);
  /* precision = f16: a grad scaler per replica (the interpreter refuses it
   * with a parameter server); all replicas see the same all-reduced
   * gradients, so their scalers move alike */
  tfg_amp *amps = NULL;
  if (!ps && a->config.precision == TFG_DTYPE_F16) {
    amps = calloc((size_t)R, sizeof *amps);
    TFG_ASSERT(amps != NULL);
  }

  /* Each replica's forward cone and gradients. */
  if (!ps) st = check_batches(c);
  if (!ps && st == TFG_OK) add_slices(c);
  for (int r = 0; r < R && st == TFG_OK; r++) {
    if ((st = clone_replica(c, r, out)) != TFG_OK) break;
    out->losses[r] = c->map[a->loss];
    for (int k = 0; k < nm; k++) out->replica_metrics[r * nm + k] = c->map[metrics[k]];
    for (int i = 0; i < n; i++) rparams[r * n + i] = c->map[out->params[i]];
    int32_t from = g->nnodes;
    tfg_node_id loss = out->losses[r];
    if (amps) loss = tfg_autodiff_scale_loss(g, loss, &amps[r]); /* precision = f16 */
    tfg_autodiff(g, loss, &rparams[r * n], n, &grads[r * n]);
    for (int i = 0; i < n; i++) TFG_ASSERT(grads[r * n + i] >= 0); /* a clone differentiates like the original */
    pin_unpinned(c, from, r);
  }
  if (st == TFG_OK) {
    out->loss = out->losses[0];
    for (int k = 0; k < nm; k++) out->metrics[k] = out->replica_metrics[k];
  }

  out->accumulate = 1;
  if (st == TFG_OK && !ps && a->config.accumulate > 1) {
    /* Each replica sums its micro-batches' gradients where it keeps its
     * params; the step's last micro-batch goes on to the all-reduce. */
    int k = a->config.accumulate;
    out->accumulate = k;
    out->accs = malloc(sizeof *out->accs * (size_t)(R * n + 1));
    out->acc_first = malloc(sizeof *out->acc_first * (size_t)(R * n + 1));
    out->acc_add = malloc(sizeof *out->acc_add * (size_t)(R * n + 1));
    TFG_ASSERT(out->accs && out->acc_first && out->acc_add);
    for (int r = 0; r < R; r++)
      tfg_autodiff_accumulate(g, k, &rparams[r * n], &grads[r * n], n, &out->accs[r * n], &out->acc_first[r * n],
                              &out->acc_add[r * n], c->d);
  }
  if (st == TFG_OK && !ps) {
    /* The mean of each gradient over the replicas, where it was computed.
     * The key is replica 0's all-reduce node id: the same in every
     * replica, and unique in the graph, so the all-reduces of several
     * train actions (an ensemble of mirrored jobs, a pretraining and a
     * fine-tuning of one param) never share a key. A group has one node
     * per device: a gradient the program pinned to a cpu outside the
     * replica's devices is reduced on the replica's first device. */
    int64_t key0 = g->nnodes;
    for (int r = 0; r < R; r++)
      for (int i = 0; i < n; i++) {
        tfg_node_id gi = grads[r * n + i];
        const tfg_node pn = g->nodes[out->params[i]];
        tfg_devspec pin = g->nodes[gi].pin;
        if (!in_group(s, r, &pin)) pin = strategy_pin(c, &s->devices[r * s->group]);
        tfg_node ar = {.op = TFG_OP_ALLREDUCE, .ninputs = 1, .loc = pn.loc};
        ar.attrs.n = R;
        ar.attrs.start = key0 + i;
        tfg_status ok = add_clone(c, &ar, &gi, &pin, &grads[r * n + i]);
        TFG_ASSERT(ok == TFG_OK);
      }
    /* Every replica applies the same update to its own copy; the state of
     * replicas 1.. mirrors replica 0's, slot for slot. */
    tfg_node_id *states = malloc(sizeof *states * (size_t)(2 * n + 1));
    TFG_ASSERT(states != NULL);
    for (int r = 0; r < R && st == TFG_OK; r++) {
      int ns = 0;
      st = tfg_autodiff_updates(g, a, &rparams[r * n], &grads[r * n], n, amps ? &amps[r] : NULL, &out->updates[r * n],
                                r == 0 ? out->states : states, r == 0 ? &out->nstates : &ns, c->d);
      if (st != TFG_OK || r == 0) continue;
      TFG_ASSERT(ns == out->nstates);
      for (int j = 0; j < ns; j++) {
        out->mirror_src[out->nmirrors] = out->states[j];
        out->mirror_dst[out->nmirrors++] = states[j];
      }
    }
    free(states);
    out->nupdates = R * n;
    if (amps && st == TFG_OK) {
      out->nscalers = R;
      out->scalers = malloc(sizeof *out->scalers * (size_t)R);
      TFG_ASSERT(out->scalers != NULL);
      for (int r = 0; r < R; r++) out->scalers[r] = amps[r].update;
    }
  } else if (st == TFG_OK) {
    /* The server: each update reads its gradient from a placeholder the
     * runtime fills with whichever worker's gradient arrives. */
    for (int w = 0; w < R; w++)
      for (int i = 0; i < n; i++) {
        out->worker_params[w * n + i] = rparams[w * n + i];
        out->worker_grads[w * n + i] = grads[w * n + i];
      }
    for (int i = 0; i < n; i++) {
      const tfg_node pn = g->nodes[out->params[i]];
      size_t len = strlen(pn.name) + 6;
      char *name = tfg_arena_alloc(&g->arena, len);
      snprintf(name, len, "grad:%s", pn.name);
      tfg_node in = {.op = TFG_OP_INPUT, .dtype = pn.dtype, .shape = pn.shape, .name = name, .loc = pn.loc};
      tfg_devspec pin = strategy_pin(c, &s->ps);
      tfg_status ok = add_clone(c, &in, NULL, &pin, &out->grad_inputs[i]);
      TFG_ASSERT(ok == TFG_OK);
    }
    st = tfg_autodiff_updates(g, a, out->params, out->grad_inputs, n, NULL, out->updates, out->states, &out->nstates,
                              c->d);
    out->nupdates = n;
  }
  free(rparams);
  free(grads);
  free(amps);
  return st;
}

tfg_status tfg_strategy_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, tfg_train_step *out,
                                   tfg_diag *d) {
  memset(out, 0, sizeof *out);
  tfg_strategy s;
  tfg_status st = tfg_strategy_of(a, &s, d);
  if (st != TFG_OK) return st;
  /* precision: the strategy trains the autocast clone of the forward pass */
  int32_t n0 = g->nnodes;
  tfg_action cast;
  tfg_node_id *cast_metrics = tfg_autocast(g, a, &cast, d);
  a = &cast;
  if (s.kind == TFG_STRATEGY_PS && job_size > 1) {
    tfg_diag_error(d, &s.loc, "parameter_server runs in one process, not across the %d ranks of an mpirun job", job_size);
    tfg_diag_help(d, "run it without mpirun, or use mirrored(...), whose replicas span the ranks");
    tfg_strategy_free(&s);
    free(cast_metrics);
    tfg_graph_truncate(g, n0);
    return TFG_ERR_PLACE;
  }
  if (s.kind == TFG_STRATEGY_SINGLE) {
    tfg_strategy_free(&s);
    st = tfg_autodiff_train_step(g, a, p, out, d);
    free(cast_metrics);
    return st;
  }
  rewrite c = {.g = g, .a = a, .s = &s, .d = d, .n0 = n0};
  st = replicated_step(&c, p, out);
  if (st != TFG_OK) { /* leave the graph as it was */
    tfg_graph_truncate(g, c.n0);
    if (c.saved)
      for (int32_t i = 0; i <= c.top; i++) g->nodes[i].pin = c.saved[i];
    tfg_train_step_free(out);
  }
  free(c.cone);
  free(c.param_of);
  free(c.map);
  free(c.saved);
  free(c.slices);
  free(c.ins);
  free(cast_metrics);
  tfg_strategy_free(&s);
  return st;
}
