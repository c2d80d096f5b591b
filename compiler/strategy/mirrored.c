/* compiler/strategy/mirrored.c: mirrored(devices), synchronous data
 * parallel (compiler/strategy/strategy.h says what it builds): reading
 * the devices, and where each replica runs a node; the clones, the batch
 * split, the all-reduce and the updates are data parallelism's
 * (compiler/strategy/replicate.h). */
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
static tfg_status mirrored_pin(tfg_replicate *c, int32_t i, const tfg_devspec *p, int r, tfg_devspec *out) {
  (void)i;
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
  tfg_status st = mirrored_pin(c, i, &nd->pin, r, &pin);
  if (st == TFG_OK) tfg_replicate_param_copy(c, r, i, nd, &pin, out);
  return st;
}

static const tfg_replicate_hooks mirrored_hooks = {
    .pin = mirrored_pin, .param = mirrored_param, .cloned = tfg_replicate_cloned, .traced = NULL};

static tfg_status mirrored_rewrite(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_strategy *s,
                                   const tfg_job *job, const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  tfg_replicate c;
  tfg_replicate_begin(&c, &mirrored_hooks, g, a, p, s, job, sw, d, out);
  tfg_replicate_data_begin(&c, out);
  tfg_status st = tfg_replicate_split_batch(&c);
  if (st == TFG_OK) st = tfg_replicate_replicas(&c, out);
  if (st == TFG_OK) st = tfg_replicate_data_end(&c, out);
  return tfg_replicate_end(&c, st, out);
}

/* With one replica it is the single step, and --verbose says so. */
static void mirrored_describe(const tfg_train_step *st, char *buf, size_t n) {
  if (st->nreplicas > 1) snprintf(buf, n, "mirrored over %d replicas", st->nreplicas);
  else snprintf(buf, n, "single");
}

const tfg_strategy_i tfg_strategy_mirrored = {
    .name = "mirrored", .run = TFG_STEP_GROUP, .read = mirrored_read,
    .rewrite = mirrored_rewrite, .describe = mirrored_describe, .spans_gpus = mirrored_spans_gpus, .gpus = tfg_strategy_no_gpus,
    .not_predicted = NULL};
