/* compiler/place.c: the placer (see place.h for the passes).
 *
 * One sweep in graph order decides every op; what decided it is recorded
 * with the pass number of its cause. Groups (a param with its optimizer
 * update and state) share one device: the first member decided carries the
 * group. Ops with no inputs wait for the first op that reads them, so a
 * param lives where it is used and a constant where it is consumed. */
#include "compiler/place.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/ops.h"
#include "compiler/plan.h"

struct tfg_placement {
  const tfg_graph *g;
  const tfg_devices *ds;
  int32_t n;
  int ndev;
  tfg_place_record *rec;
  int32_t *parent;   /* union-find over nodes: groups */
  tfg_place_totals *totals;
};

static int32_t find(int32_t *parent, int32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]]; /* path halving */
    x = parent[x];
  }
  return x;
}

static void unite(int32_t *parent, int32_t a, int32_t b) {
  a = find(parent, a);
  b = find(parent, b);
  if (a != b) parent[a < b ? b : a] = a < b ? a : b; /* the smallest id leads: the param */
}

static int64_t bytes_of(const tfg_node *n) {
  return tfg_shape_numel(&n->shape) * (int64_t)tfg_dtype_size(n->dtype);
}

static bool persistent(const tfg_node *n) { return n->op == TFG_OP_PARAM || n->op == TFG_OP_STATE; }

int tfg_placement_device(const tfg_placement *pl, tfg_node_id id) { return pl->rec[id].device; }
const tfg_place_record *tfg_placement_record(const tfg_placement *pl, tfg_node_id id) { return &pl->rec[id]; }

tfg_place_totals tfg_placement_totals(const tfg_placement *pl, int device) { return pl->totals[device]; }

void tfg_placement_free(tfg_placement *pl) {
  if (!pl) return;
  free(pl->rec);
  free(pl->parent);
  free(pl->totals);
  free(pl);
}

/* ---- pass 1: pins ---------------------------------------------------------- */

/* The device a pin names, or -1 after reporting (once per annotation). */
static int pin_device(const tfg_devices *ds, const tfg_node *n, tfg_diag *d, uint32_t *reported) {
  const tfg_devspec *p = &n->pin;
  int gpus = tfg_devices_gpus(ds);
  bool ok = true;
  int dev = -1;
  if (p->kind == TFG_DEV_CPU) {
    ok = p->index == 0;
    dev = 0;
  } else if (p->kind == TFG_DEV_GPU) {
    ok = p->index < gpus;
    dev = (int)p->index + 1;
  }
  if (ok) return dev;
  if (*reported != p->loc.off + 1) {
    *reported = p->loc.off + 1;
    if (p->kind == TFG_DEV_CPU)
      tfg_diag_error(d, &p->loc, "cpu:%" PRId64 " does not exist: the host CPU is cpu:0", p->index);
    else if (gpus == 0)
      tfg_diag_error(d, &p->loc, "gpu:%" PRId64 " does not exist: this run has no GPU", p->index);
    else if (gpus == 1)
      tfg_diag_error(d, &p->loc, "gpu:%" PRId64 " does not exist: this run has 1 GPU, gpu:0", p->index);
    else
      tfg_diag_error(d, &p->loc, "gpu:%" PRId64 " does not exist: this run has %d GPUs, gpu:0 to gpu:%d", p->index, gpus,
                     gpus - 1);
    tfg_diag_help(d, "give more devices, for example --devices host*%" PRId64 " (emulated on the CPU)", p->index + 1);
  }
  return -1;
}

/* ---- pass 4: cost -------------------------------------------------------------- */

typedef struct sweep {
  const tfg_graph *g;
  const tfg_devices *ds;
  double *finish;    /* per node: estimated finish time */
  double *ready;     /* per device: when it is free */
  int64_t *used;     /* per device: persistent bytes placed */
  double link;       /* the slowest link: a transfer's cost */
} sweep;

/* Estimated finish time of node n on device dv given its inputs' places. */
static double finish_on(const sweep *s, const tfg_placement *pl, const tfg_node *n, int dv) {
  const tfg_device *dev = tfg_devices_at(s->ds, dv);
  double start = s->ready[dv];
  for (int k = 0; k < n->ninputs; k++) {
    tfg_node_id x = n->inputs[k];
    int xd = pl->rec[x].device;
    if (xd < 0) continue; /* an undecided source: it will follow this op */
    double arrive = s->finish[x];
    if (xd != dv) arrive += (double)bytes_of(&s->g->nodes[x]) / (dev->link_bw < s->link ? dev->link_bw : s->link);
    if (arrive > start) start = arrive;
  }
  double flops = tfg_op_get(n->op)->flops(s->g, n);
  return start + flops / dev->flops + (double)bytes_of(n) / dev->mem_bw;
}

/* ---- the sweep ------------------------------------------------------------------- */

/* Sets the device of the group of node id (once): its params and state
 * count against that device's memory from then on. */
static void claim(tfg_placement *pl, int *group_dev, int64_t *used, const int64_t *group_bytes, tfg_node_id id, int dev) {
  int32_t r = find(pl->parent, id);
  if (group_dev[r] >= 0) return;
  group_dev[r] = dev;
  used[dev] += group_bytes[r];
}

static void colocate(tfg_placement *pl, tfg_node_id id, int dev, tfg_node_id with) {
  pl->rec[id].device = dev;
  pl->rec[id].cause = TFG_CAUSE_COLOCATE;
  pl->rec[id].with = with;
}

/* Places the undecided sources read by node id (and their groups) beside it. */
static void pull_sources(tfg_placement *pl, sweep *s, tfg_node_id id, int *group_dev, const int64_t *group_bytes) {
  const tfg_node *n = &pl->g->nodes[id];
  int dev = pl->rec[id].device;
  for (int k = 0; k < n->ninputs; k++) {
    tfg_node_id x = n->inputs[k];
    if (pl->rec[x].device >= 0) continue;
    colocate(pl, x, dev, id);
    s->finish[x] = 0;
    claim(pl, group_dev, s->used, group_bytes, x, dev);
  }
}

/* Persistent bytes of the undecided param groups node id reads: what its
 * device must have room for. */
static int64_t group_need(const tfg_placement *pl, const tfg_node *n, const int64_t *group_bytes, const int *group_dev) {
  int64_t need = 0;
  for (int k = 0; k < n->ninputs; k++) {
    tfg_node_id x = n->inputs[k];
    int32_t r = find(pl->parent, x);
    if (pl->rec[x].device < 0 && group_dev[r] < 0) need += group_bytes[r];
  }
  return need;
}

tfg_placement *tfg_place_on(const tfg_graph *g, const tfg_devices *ds, int device) {
  tfg_placement *pl = calloc(1, sizeof *pl);
  TFG_ASSERT(pl != NULL && device >= 0 && device < tfg_devices_count(ds));
  pl->g = g;
  pl->ds = ds;
  pl->n = g->nnodes;
  pl->ndev = tfg_devices_count(ds);
  pl->rec = calloc((size_t)pl->n + 1, sizeof *pl->rec);
  pl->parent = malloc(sizeof *pl->parent * ((size_t)pl->n + 1));
  pl->totals = calloc((size_t)pl->ndev, sizeof *pl->totals);
  TFG_ASSERT(pl->rec && pl->parent && pl->totals);
  for (int32_t i = 0; i < pl->n; i++) {
    pl->parent[i] = i;
    pl->rec[i] = (tfg_place_record){.device = device, .cause = TFG_CAUSE_FALLBACK, .with = -1, .runner_up = -1, .refused = -1};
  }
  return pl;
}

tfg_status tfg_place(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                     const int64_t *reserve, tfg_diag *d, tfg_placement **out) {
  tfg_placement *pl = calloc(1, sizeof *pl);
  TFG_ASSERT(pl != NULL);
  pl->g = g;
  pl->ds = ds;
  pl->n = g->nnodes;
  pl->ndev = tfg_devices_count(ds);
  int32_t n = g->nnodes;
  pl->rec = calloc((size_t)n + 1, sizeof *pl->rec);
  pl->parent = malloc(sizeof *pl->parent * ((size_t)n + 1));
  pl->totals = calloc((size_t)pl->ndev, sizeof *pl->totals);
  sweep s = {.g = g, .ds = ds};
  s.finish = calloc((size_t)n + 1, sizeof *s.finish);
  s.ready = calloc((size_t)pl->ndev, sizeof *s.ready);
  s.used = calloc((size_t)pl->ndev, sizeof *s.used);
  int64_t *group_bytes = calloc((size_t)n + 1, sizeof *group_bytes);
  int *group_dev = malloc(sizeof *group_dev * ((size_t)n + 1));
  TFG_ASSERT(pl->rec && pl->parent && pl->totals && s.finish && s.ready && s.used && group_bytes && group_dev);
  for (int32_t i = 0; i < n; i++) {
    pl->parent[i] = i;
    pl->rec[i].device = -1;
    pl->rec[i].with = -1;
    pl->rec[i].runner_up = -1;
    pl->rec[i].refused = -1;
    group_dev[i] = -1;
  }
  s.link = INFINITY;
  for (int i = 0; i < pl->ndev; i++)
    if (tfg_devices_at(ds, i)->link_bw < s.link) s.link = tfg_devices_at(ds, i)->link_bw;

  /* Pass 2's groups: a param with its update and every state it uses. */
  for (int k = 0; k < nsteps; k++)
    for (int i = 0; i < steps[k].nupdates; i++) {
      const tfg_node *u = &g->nodes[steps[k].updates[i]];
      unite(pl->parent, steps[k].updates[i], u->inputs[0]);
      for (int j = 2; j < u->ninputs; j++)
        if (g->nodes[u->inputs[j]].op == TFG_OP_STATE) unite(pl->parent, u->inputs[0], u->inputs[j]);
    }
  for (int32_t i = 0; i < n; i++)
    if (persistent(&g->nodes[i])) group_bytes[find(pl->parent, i)] += bytes_of(&g->nodes[i]);
  /* A trained param's gradient lives until its update, at the end of the
   * step: count it with the group, as the memory it will certainly take. */
  for (int k = 0; k < nsteps; k++)
    for (int i = 0; i < steps[k].nparams; i++)
      group_bytes[find(pl->parent, steps[k].params[i])] += bytes_of(&g->nodes[steps[k].params[i]]);

  /* Pass 1: pins, carried to the whole group. */
  tfg_status st = TFG_OK;
  uint32_t reported = 0;
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (nd->pin.kind != TFG_DEV_CPU && nd->pin.kind != TFG_DEV_GPU) continue;
    int dev = pin_device(ds, nd, d, &reported);
    if (dev < 0) {
      st = TFG_ERR_PLACE;
      continue;
    }
    pl->rec[i].device = dev;
    pl->rec[i].cause = TFG_CAUSE_PIN;
    pl->rec[i].pin = nd->pin.loc;
    claim(pl, group_dev, s.used, group_bytes, i, dev);
  }
  for (int i = 0; i < pl->ndev && st == TFG_OK; i++) {
    const tfg_device *dv = tfg_devices_at(ds, i);
    if (s.used[i] > dv->memory) {
      tfg_strbuf need = {0}, have = {0};
      tfg_size_format(&need, s.used[i]);
      tfg_size_format(&have, dv->memory);
      tfg_diag_error(d, NULL, "the params pinned to %s need %s but it has %s", dv->name, need.data, have.data);
      tfg_strbuf_free(&need);
      tfg_strbuf_free(&have);
      st = TFG_ERR_PLACE;
    }
  }

  /* Passes 2 to 5, in one sweep in graph order. */
  int gpus = tfg_devices_gpus(ds);
  for (int32_t i = 0; i < n && st == TFG_OK; i++) {
    const tfg_node *nd = &g->nodes[i];
    tfg_place_record *r = &pl->rec[i];
    int32_t root = find(pl->parent, i);
    if (r->device >= 0) { /* pinned */
      s.finish[i] = finish_on(&s, pl, nd, r->device);
      s.ready[r->device] = s.finish[i];
      pull_sources(pl, &s, i, group_dev, group_bytes);
      continue;
    }
    if (group_dev[root] >= 0) { /* pass 2: with its param */
      colocate(pl, i, group_dev[root], root);
      s.finish[i] = finish_on(&s, pl, nd, r->device);
      s.ready[r->device] = s.finish[i];
      pull_sources(pl, &s, i, group_dev, group_bytes);
      continue;
    }
    if (nd->ninputs == 0) continue; /* pass 2: waits for the op that reads it */
    /* Passes 3 and 4: the earliest finish among the devices with room. */
    int lo = 1, hi = gpus; /* the GPUs, or the CPU when there are none */
    if (gpus == 0) lo = hi = 0;
    int64_t need = group_need(pl, nd, group_bytes, group_dev);
    int best = -1, second = -1, pref = -1;
    double best_t = INFINITY, second_t = INFINITY, pref_t = INFINITY;
    for (int dv = lo; dv <= hi; dv++) {
      double t = finish_on(&s, pl, nd, dv);
      if (t < pref_t) { pref_t = t; pref = dv; }
      if (need > 0 && s.used[dv] + need > tfg_devices_at(ds, dv)->memory - (reserve ? reserve[dv] : 0)) continue;
      if (t < best_t) {
        second = best;
        second_t = best_t;
        best = dv;
        best_t = t;
      } else if (t < second_t) {
        second = dv;
        second_t = t;
      }
    }
    if (best < 0) {
      tfg_strbuf need_s = {0};
      tfg_size_format(&need_s, need);
      tfg_diag_error(d, &nd->loc, "%s: no device has room for the %s of params, state and gradients this op uses",
                     tfg_op_get(nd->op)->name, need_s.data);
      tfg_strbuf_free(&need_s);
      tfg_diag_help(d, "give more devices or more memory (--devices, --memory-limit)");
      st = TFG_ERR_PLACE;
      break;
    }
    r->device = best;
    r->est = best_t;
    r->runner_up = second;
    r->runner_est = second_t;
    if (pref != best) {
      r->cause = TFG_CAUSE_MEMORY;
      r->refused = pref;
      r->need = need;
      r->reserved = reserve ? reserve[pref] : 0;
      r->avail = tfg_devices_at(ds, pref)->memory - r->reserved - s.used[pref];
    } else {
      r->cause = TFG_CAUSE_COST;
    }
    s.finish[i] = best_t;
    s.ready[best] = best_t;
    claim(pl, group_dev, s.used, group_bytes, i, best);
    pull_sources(pl, &s, i, group_dev, group_bytes);
  }
  /* Pass 5: sources nobody reads. */
  for (int32_t i = 0; i < n && st == TFG_OK; i++)
    if (pl->rec[i].device < 0) {
      pl->rec[i].device = gpus ? 1 : 0;
      pl->rec[i].cause = TFG_CAUSE_FALLBACK;
    }

  /* Totals: ops, FLOPs, persistent bytes, transfers and a liveness peak. */
  if (st == TFG_OK) {
    int32_t *last = malloc(sizeof *last * ((size_t)n + 1));
    uint8_t *sent = calloc((size_t)n * (size_t)pl->ndev + 1, 1);
    int64_t *live = calloc((size_t)pl->ndev, sizeof *live);
    TFG_ASSERT(last && sent && live);
    for (int32_t i = 0; i < n; i++) last[i] = i;
    for (int32_t i = 0; i < n; i++)
      for (int k = 0; k < g->nodes[i].ninputs; k++) last[g->nodes[i].inputs[k]] = i;
    for (int32_t i = 0; i < n; i++) {
      const tfg_node *nd = &g->nodes[i];
      int dv = pl->rec[i].device;
      tfg_place_totals *t = &pl->totals[dv];
      t->ops++;
      t->flops += tfg_op_get(nd->op)->flops(g, nd);
      if (persistent(nd)) t->param_bytes += bytes_of(nd);
      else live[dv] += bytes_of(nd);
      if (t->param_bytes + live[dv] > t->peak_bytes) t->peak_bytes = t->param_bytes + live[dv];
      for (int k = 0; k < nd->ninputs; k++) {
        tfg_node_id x = nd->inputs[k];
        int xd = pl->rec[x].device;
        if (xd != dv && !sent[(size_t)x * (size_t)pl->ndev + (size_t)dv]) {
          sent[(size_t)x * (size_t)pl->ndev + (size_t)dv] = 1; /* one copy per tensor per destination */
          pl->totals[xd].bytes_out += bytes_of(&g->nodes[x]);
          t->bytes_in += bytes_of(&g->nodes[x]);
        }
        if (last[x] == i && !persistent(&g->nodes[x])) live[xd] -= bytes_of(&g->nodes[x]);
      }
      if (last[i] == i && !persistent(nd)) live[dv] -= bytes_of(nd); /* read by nothing: gone at once */
    }
    /* The persistent bytes are there from the start. */
    for (int i = 0; i < pl->ndev; i++)
      if (pl->totals[i].peak_bytes < pl->totals[i].param_bytes) pl->totals[i].peak_bytes = pl->totals[i].param_bytes;
    free(last);
    free(sent);
    free(live);
  }
  free(s.finish);
  free(s.ready);
  free(s.used);
  free(group_bytes);
  free(group_dev);
  if (st != TFG_OK) {
    tfg_placement_free(pl);
    *out = NULL;
    return st;
  }
  *out = pl;
  return TFG_OK;
}

/* ---- fitting activations ------------------------------------------------------- */

tfg_status tfg_place_fit(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                         tfg_diag *d, tfg_placement **out) {
  int ndev = tfg_devices_count(ds);
  int64_t *reserve = calloc((size_t)ndev, sizeof *reserve);
  TFG_ASSERT(reserve != NULL);
  tfg_status st = TFG_OK;
  for (int attempt = 0; attempt < 8; attempt++) {
    tfg_diag *quiet = tfg_diag_new(); /* the attempts' own complaints are not the user's */
    tfg_placement *pl = NULL;
    st = tfg_place(g, ds, steps, nsteps, reserve, quiet, &pl);
    tfg_diag_free(quiet);
    if (st != TFG_OK) break;
    tfg_plan *plan = NULL;
    tfg_plan_build(g, pl, ds, NULL, &plan);
    /* Where a device went over, keep what its activations took this time
     * (and a little more) free of params next time: its peak less the
     * params, state and gradients the placer counts already. */
    int64_t *grads = calloc((size_t)ndev, sizeof *grads);
    TFG_ASSERT(grads != NULL);
    for (int k = 0; k < nsteps; k++)
      for (int i = 0; i < steps[k].nparams; i++)
        grads[tfg_placement_device(pl, steps[k].params[i])] += bytes_of(&g->nodes[steps[k].params[i]]);
    bool over = false;
    for (int i = 0; i < ndev; i++) {
      if (plan->dev[i].peak <= tfg_devices_at(ds, i)->memory) continue;
      int64_t act = plan->dev[i].peak - plan->dev[i].persistent_bytes - grads[i];
      if (act < 0) act = 0;
      int64_t want = act + act / 8 + 4096;
      reserve[i] = want > reserve[i] ? want : reserve[i] + 4096;
      over = true;
    }
    free(grads);
    tfg_plan_free(plan);
    if (!over) {
      free(reserve);
      *out = pl;
      return TFG_OK;
    }
    tfg_placement_free(pl);
  }
  /* No placement fit: the last one, reported by the caller's plan (or the
   * placer's own error when params alone do not fit). */
  st = tfg_place(g, ds, steps, nsteps, reserve, d, out);
  free(reserve);
  return st;
}

/* ---- explain ------------------------------------------------------------------------ */

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* "param h.w" for named nodes, the op's name otherwise. */
static void node_label(const tfg_graph *g, tfg_node_id id, tfg_strbuf *out) {
  const tfg_node *n = &g->nodes[id];
  const char *op = tfg_op_get(n->op)->name;
  if (n->name) tfg_strbuf_printf(out, "%s %s", op, n->name);
  else tfg_strbuf_puts(out, op);
}

static void format_time(tfg_strbuf *out, double s) {
  if (s < 1e-3) tfg_strbuf_printf(out, "%.1f us", s * 1e6);
  else if (s < 1) tfg_strbuf_printf(out, "%.2f ms", s * 1e3);
  else tfg_strbuf_printf(out, "%.2f s", s);
}

static void format_loc(tfg_strbuf *out, const tfg_loc *l) {
  if (l->src) tfg_strbuf_printf(out, "%s:%u:%u", base_name(l->src->name), l->line, tfg_loc_display_col(l));
  else tfg_strbuf_puts(out, "?");
}

/* The reason text of a record: every number comes from the record. */
static void reason(const tfg_placement *pl, const tfg_place_record *r, tfg_strbuf *out) {
  const tfg_devices *ds = pl->ds;
  switch (r->cause) {
  case TFG_CAUSE_PIN:
    tfg_strbuf_puts(out, "pass 1: pinned at ");
    format_loc(out, &r->pin);
    break;
  case TFG_CAUSE_COLOCATE: {
    const tfg_node *w = &pl->g->nodes[r->with];
    tfg_strbuf_puts(out, "pass 2: ");
    if (w->op == TFG_OP_PARAM) tfg_strbuf_printf(out, "with param %s (its update and state)", w->name);
    else {
      tfg_strbuf_printf(out, "beside %s at ", tfg_op_get(w->op)->name);
      format_loc(out, &w->loc);
      tfg_strbuf_puts(out, ", which reads it");
    }
    break;
  }
  case TFG_CAUSE_MEMORY: {
    tfg_strbuf_printf(out, "pass 3: %s has ", tfg_devices_at(ds, r->refused)->name);
    tfg_size_format(out, r->avail > 0 ? r->avail : 0);
    tfg_strbuf_puts(out, " free");
    if (r->reserved) {
      tfg_strbuf_puts(out, " (");
      tfg_size_format(out, r->reserved);
      tfg_strbuf_puts(out, " kept for activations)");
    }
    tfg_strbuf_puts(out, ", the params here need (with state and gradients) ");
    tfg_size_format(out, r->need);
    break;
  }
  case TFG_CAUSE_COST:
    tfg_strbuf_puts(out, "pass 4: finishes first (");
    format_time(out, r->est);
    if (r->runner_up >= 0) {
      tfg_strbuf_printf(out, "; %s ", tfg_devices_at(ds, r->runner_up)->name);
      format_time(out, r->runner_est);
    } else {
      tfg_strbuf_puts(out, "; the only device");
    }
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_CAUSE_FALLBACK: tfg_strbuf_puts(out, "pass 5: read by no op; the default device"); break;
  }
}

/* Whether records a and b read the same (a run merges into one line). */
static bool same_reason(const tfg_place_record *a, const tfg_place_record *b) {
  if (a->device != b->device || a->cause != b->cause) return false;
  switch (a->cause) {
  case TFG_CAUSE_PIN: return a->pin.off == b->pin.off && a->pin.src == b->pin.src;
  case TFG_CAUSE_COLOCATE: return a->with == b->with;
  case TFG_CAUSE_MEMORY: return a->refused == b->refused;
  case TFG_CAUSE_COST: return a->runner_up == b->runner_up;
  case TFG_CAUSE_FALLBACK: return true;
  }
  return false;
}

void tfg_place_explain(const tfg_placement *pl, tfg_strbuf *out) {
  const tfg_graph *g = pl->g;
  tfg_strbuf_printf(out, "devices:\n");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_device *dv = tfg_devices_at(pl->ds, i);
    tfg_strbuf_printf(out, "  %-7s %-36s ", dv->name, dv->hardware);
    tfg_size_format(out, dv->memory);
    tfg_strbuf_putc(out, '\n');
  }
  tfg_strbuf_printf(out, "\n%-7s %-40s %-14s %s\n", "device", "ops", "source", "reason");
  for (int32_t i = 0; i < pl->n;) {
    int32_t j = i + 1;
    while (j < pl->n && same_reason(&pl->rec[i], &pl->rec[j])) j++;
    tfg_strbuf ops = {0};
    int shown = 0;
    for (int32_t k = i; k < j && shown < 3; k++, shown++) {
      if (shown) tfg_strbuf_puts(&ops, ", ");
      node_label(g, k, &ops);
    }
    if (j - i > 3) tfg_strbuf_printf(&ops, " +%d more", (int)(j - i - 3));
    uint32_t lo = UINT32_MAX, hi = 0;
    const char *file = NULL;
    for (int32_t k = i; k < j; k++) {
      const tfg_loc *l = &g->nodes[k].loc;
      if (!l->src) continue;
      file = base_name(l->src->name);
      if (l->line < lo) lo = l->line;
      if (l->line > hi) hi = l->line;
    }
    char src[96] = "";
    if (file && lo == hi) snprintf(src, sizeof src, "%s:%u", file, lo);
    else if (file) snprintf(src, sizeof src, "%s:%u-%u", file, lo, hi);
    tfg_strbuf why = {0};
    reason(pl, &pl->rec[i], &why);
    tfg_strbuf_printf(out, "%-7s %-40s %-14s %s\n", tfg_devices_at(pl->ds, pl->rec[i].device)->name, ops.data, src,
                      why.data);
    tfg_strbuf_free(&ops);
    tfg_strbuf_free(&why);
    i = j;
  }
  tfg_strbuf_printf(out, "\n%-7s %6s %12s %12s %12s %12s %12s\n", "device", "ops", "FLOP/step", "params", "peak", "in/step",
                    "out/step");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_place_totals *t = &pl->totals[i];
    tfg_strbuf cells[5] = {{0}};
    tfg_size_format(&cells[0], t->param_bytes);
    tfg_size_format(&cells[1], t->peak_bytes);
    tfg_size_format(&cells[2], t->bytes_in);
    tfg_size_format(&cells[3], t->bytes_out);
    tfg_strbuf_printf(out, "%-7s %6d %12.4g %12s %12s %12s %12s\n", tfg_devices_at(pl->ds, i)->name, t->ops, t->flops,
                      cells[0].data, cells[1].data, cells[2].data, cells[3].data);
    for (int k = 0; k < 5; k++) tfg_strbuf_free(&cells[k]);
  }
}

static const char *cause_name(tfg_place_cause c) {
  switch (c) {
  case TFG_CAUSE_PIN: return "pin";
  case TFG_CAUSE_COLOCATE: return "colocate";
  case TFG_CAUSE_MEMORY: return "memory";
  case TFG_CAUSE_COST: return "cost";
  case TFG_CAUSE_FALLBACK: return "fallback";
  }
  return "?";
}

static void json_string(tfg_strbuf *out, const char *s) {
  tfg_strbuf_putc(out, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') tfg_strbuf_printf(out, "\\%c", c);
    else if (c < 0x20) tfg_strbuf_printf(out, "\\u%04x", c);
    else tfg_strbuf_putc(out, (char)c);
  }
  tfg_strbuf_putc(out, '"');
}

void tfg_place_json(const tfg_placement *pl, tfg_strbuf *out) {
  const tfg_graph *g = pl->g;
  tfg_strbuf_puts(out, "{\"devices\": [");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_device *dv = tfg_devices_at(pl->ds, i);
    tfg_strbuf_printf(out, "%s\n  {\"name\": \"%s\", \"hardware\": ", i ? "," : "", dv->name);
    json_string(out, dv->hardware);
    tfg_strbuf_printf(out, ", \"memory\": %" PRId64 ", \"flops\": %.6g, \"mem_bw\": %.6g, \"link_bw\": %.6g}", dv->memory,
                      dv->flops, dv->mem_bw, dv->link_bw);
  }
  tfg_strbuf_puts(out, "],\n\"ops\": [");
  for (int32_t i = 0; i < pl->n; i++) {
    const tfg_node *n = &g->nodes[i];
    const tfg_place_record *r = &pl->rec[i];
    tfg_strbuf_printf(out, "%s\n  {\"id\": %d, \"op\": \"%s\", ", i ? "," : "", i, tfg_op_get(n->op)->name);
    if (n->name) {
      tfg_strbuf_puts(out, "\"name\": ");
      json_string(out, n->name);
      tfg_strbuf_puts(out, ", ");
    }
    tfg_strbuf_printf(out, "\"device\": \"%s\", \"pass\": %d, \"cause\": \"%s\"", tfg_devices_at(pl->ds, r->device)->name,
                      (int)r->cause, cause_name(r->cause));
    if (n->loc.src) {
      tfg_strbuf_puts(out, ", \"loc\": ");
      tfg_strbuf b = {0};
      format_loc(&b, &n->loc);
      json_string(out, b.data);
      tfg_strbuf_free(&b);
    }
    if (r->cause == TFG_CAUSE_PIN) {
      tfg_strbuf b = {0};
      format_loc(&b, &r->pin);
      tfg_strbuf_puts(out, ", \"pin\": ");
      json_string(out, b.data);
      tfg_strbuf_free(&b);
    }
    if (r->cause == TFG_CAUSE_COLOCATE) tfg_strbuf_printf(out, ", \"with\": %d", r->with);
    if (r->cause == TFG_CAUSE_COST || r->cause == TFG_CAUSE_MEMORY) {
      tfg_strbuf_printf(out, ", \"est_s\": %.6g", r->est);
      if (r->runner_up >= 0)
        tfg_strbuf_printf(out, ", \"runner_up\": \"%s\", \"runner_up_est_s\": %.6g", tfg_devices_at(pl->ds, r->runner_up)->name,
                          r->runner_est);
    }
    if (r->cause == TFG_CAUSE_MEMORY)
      tfg_strbuf_printf(out, ", \"refused\": \"%s\", \"need\": %" PRId64 ", \"avail\": %" PRId64,
                        tfg_devices_at(pl->ds, r->refused)->name, r->need, r->avail);
    tfg_strbuf_putc(out, '}');
  }
  tfg_strbuf_puts(out, "],\n\"totals\": [");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_place_totals *t = &pl->totals[i];
    tfg_strbuf_printf(out,
                      "%s\n  {\"device\": \"%s\", \"ops\": %d, \"flops\": %.6g, \"param_bytes\": %" PRId64
                      ", \"peak_bytes\": %" PRId64 ", \"bytes_in\": %" PRId64 ", \"bytes_out\": %" PRId64 "}",
                      i ? "," : "", tfg_devices_at(pl->ds, i)->name, t->ops, t->flops, t->param_bytes, t->peak_bytes,
                      t->bytes_in, t->bytes_out);
  }
  tfg_strbuf_puts(out, "]}\n");
}

void tfg_place_dot(const tfg_placement *pl, tfg_strbuf *out) {
  const tfg_graph *g = pl->g;
  tfg_strbuf_puts(out, "digraph tfg {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n");
  for (int dv = 0; dv < pl->ndev; dv++) {
    bool any = false;
    for (int32_t i = 0; i < pl->n && !any; i++) any = pl->rec[i].device == dv;
    if (!any) continue;
    const tfg_device *d = tfg_devices_at(pl->ds, dv);
    tfg_strbuf_printf(out, "  subgraph cluster_%d {\n    label=\"%s\";\n", dv, d->name);
    for (int32_t i = 0; i < pl->n; i++) {
      if (pl->rec[i].device != dv) continue;
      tfg_strbuf label = {0};
      node_label(g, i, &label);
      tfg_strbuf_printf(out, "    n%d [label=", i);
      json_string(out, label.data); /* a DOT string takes the same escapes */
      tfg_strbuf_puts(out, "];\n");
      tfg_strbuf_free(&label);
    }
    tfg_strbuf_puts(out, "  }\n");
  }
  for (int32_t i = 0; i < pl->n; i++)
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      tfg_strbuf_printf(out, "  n%d -> n%d%s;\n", x, i, pl->rec[x].device != pl->rec[i].device ? " [color=red]" : "");
    }
  tfg_strbuf_puts(out, "}\n");
}
