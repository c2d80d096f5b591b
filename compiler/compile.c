/* compiler/compile.c: the compile driver of compile.h: the stages in
 * order, what fusion must keep, and the loop that places again until the
 * activations fit. The placer never calls the planner (compiler/place.c);
 * placing with the plan's measured peak in view is this file's job. */
#include "compiler/compile.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/file.h"
#include "compiler/autocast.h"
#include "compiler/fold.h"
#include "compiler/layout.h"
#include "compiler/ranks.h"
#include "compiler/recompute.h"
#include "compiler/simplify.h"
#include "compiler/strategy/strategy.h"


/* ---- stage 3: placing with activations counted --------------------------------- */

/* Adds to counted[dv] the bytes the placer counts on each device dv
 * beyond the plan's persistent region: each trained param's gradient
 * (on the param's device, where the placer computes it) and each param
 * or state copied in from another device (the plan copies it when the
 * step starts and keeps it to its last reader there). What a plan's peak
 * holds beyond these and the persistent bytes is activations. */
static void placer_counted(const tfg_graph *g, const tfg_placement *pl, int ndev, const tfg_train_step *steps,
                           int nsteps, const uint8_t *removed, int64_t *counted) {
  for (int k = 0; k < nsteps; k++)
    for (int i = 0; i < steps[k].nparams; i++)
      if (!removed || !tfg_fold_removed(removed[steps[k].params[i]])) /* another rank's: not here */
        counted[tfg_placement_device(pl, steps[k].params[i])] += tfg_node_bytes(&g->nodes[steps[k].params[i]]);
  uint8_t *copied = calloc((size_t)g->nnodes * (size_t)ndev + 1, 1); /* [x * ndev + dv]: counted there */
  TFG_ASSERT(copied != NULL);
  for (int32_t i = 0; i < g->nnodes; i++) {
    if (removed && tfg_fold_removed(removed[i])) continue; /* runs nowhere: copies nothing */
    int dv = tfg_placement_device(pl, i);
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      tfg_op_id op = g->nodes[x].op;
      size_t at = (size_t)x * (size_t)ndev + (size_t)dv;
      if ((op != TFG_OP_PARAM && op != TFG_OP_STATE) || tfg_placement_device(pl, x) == dv || copied[at]) continue;
      copied[at] = 1;
      counted[dv] += tfg_node_bytes(&g->nodes[x]);
    }
  }
  free(copied);
}

/* The placer counts the params, state and gradients each device holds
 * (and the params it copies there), not the activations, which only a
 * plan's liveness knows. So: place,
 * plan (measuring each device's peak, capacities unchecked), and where a
 * device's peak passes its memory, keep what its activations took (and a
 * little more) free of params there, and place again, a few times at
 * most. The result is the first placement whose plan fits; else the last
 * one, placed once more under the caller's diagnostics (its plan then
 * reports the shortage, or the placer its own error when params alone do
 * not fit). */
static tfg_status place_fit(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                            const uint8_t *removed, tfg_diag *d, tfg_placement **out) {
  int ndev = tfg_devices_count(ds);
  int64_t *reserve = calloc((size_t)ndev, sizeof *reserve);
  TFG_ASSERT(reserve != NULL);
  tfg_status st = TFG_OK;
  for (int attempt = 0; attempt < 8; attempt++) {
    tfg_diag *quiet = tfg_diag_new(); /* the attempts' own complaints are not the user's */
    tfg_placement *pl = NULL;
    st = tfg_place(g, ds, steps, nsteps, reserve, removed, quiet, &pl);
    tfg_diag_free(quiet);
    if (st != TFG_OK) break;
    /* planned as the real plan will be: without what the passes removed */
    tfg_plan *plan = NULL;
    tfg_plan_opts po = {.folded = removed};
    tfg_plan_build_with(g, pl, ds, &po, NULL, &plan);
    /* Where a device went over, keep what its activations took this time
     * (and a little more) free of params next time: its peak less the
     * params, state, gradients and copies the placer counts already
     * (counted as activations too, they would be kept free twice). */
    int64_t *counted = calloc((size_t)ndev, sizeof *counted);
    TFG_ASSERT(counted != NULL);
    placer_counted(g, pl, ndev, steps, nsteps, removed, counted);
    bool over = false;
    for (int i = 0; i < ndev; i++) {
      if (plan->dev[i].peak <= tfg_devices_at(ds, i)->memory) continue;
      int64_t act = plan->dev[i].peak - plan->dev[i].persistent_bytes - counted[i];
      if (act < 0) act = 0;
      int64_t want = act + act / 8 + 4096;
      reserve[i] = want > reserve[i] ? want : reserve[i] + 4096;
      over = true;
    }
    free(counted);
    tfg_plan_free(plan);
    if (!over) {
      free(reserve);
      *out = pl;
      return TFG_OK;
    }
    tfg_placement_free(pl);
  }
  st = tfg_place(g, ds, steps, nsteps, reserve, removed, d, out);
  free(reserve);
  return st;
}

/* ---- stage 4: what fusion must keep ----------------------------------------------- */

/* Marks in keep every node a run of p may fetch, which fusion must leave
 * materialized: the tensors its print actions show, and per train step
 * what the training loop (runtime/train.c) fetches (losses, metrics,
 * updates, the grad scalers', an accumulation's runs, a parameter
 * server's worker gradients) or reads and writes
 * (params, state, mirrors, fed gradients), and what a schedule needs
 * where it stands (staged). */
static void mark_fetched(const tfg_program *p, const tfg_train_step *packed, int npacked, uint8_t *keep) {
  for (int a = 0; a < p->nactions; a++)
    for (int i = 0; p->actions[a].kind == TFG_ACTION_PRINT && i < p->actions[a].nitems; i++)
      if (p->actions[a].items[i].is_tensor) keep[p->actions[a].items[i].node] = 1;
  for (int k = 0; k < npacked; k++) {
    const tfg_train_step *st = &packed[k];
    int W = st->nreplicas, P = st->nparams;
    keep[st->loss] = 1;
    for (int i = 0; i < W; i++) keep[st->losses[i]] = 1;
    for (int i = 0; i < st->nmetrics; i++) keep[st->metrics[i]] = 1;
    for (int i = 0; i < W * st->nmetrics; i++) keep[st->replica_metrics[i]] = 1;
    for (int i = 0; i < st->nupdates; i++) keep[st->updates[i]] = 1;
    for (int i = 0; i < st->nscalers; i++) keep[st->scalers[i]] = 1; /* runtime/train.c fetches these too */
    for (int i = 0; st->accumulate > 1 && i < st->nupdates; i++) keep[st->acc_first[i]] = keep[st->acc_add[i]] = 1;
    for (int i = 0; i < P; i++) keep[st->params[i]] = 1;
    for (int i = 0; i < st->nstates; i++) keep[st->states[i]] = 1;
    for (int i = 0; i < st->nmirrors; i++) keep[st->mirror_src[i]] = keep[st->mirror_dst[i]] = 1;
    for (int i = 0; i < st->nstaged; i++) keep[st->staged[i]] = 1;
    for (int i = 0; st->kind == TFG_STEP_SERVER && i < W * P; i++) keep[st->worker_grads[i]] = keep[st->worker_params[i]] = 1;
    for (int i = 0; st->kind == TFG_STEP_SERVER && i < P; i++) keep[st->grad_inputs[i]] = 1;
  }
}

/* ---- stage 2: a train action's step ---------------------------------------------- */

/* Autocast first, as a pass of its own: the strategy trains whatever
 * action it is given, so no strategy needs to know about precision.
 * Then the calls `chosen` marks (per call; NULL: none) are marked for
 * recompute (compiler/recompute.h) while the strategy builds the step. */
static tfg_status build_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                             const tfg_switches *sw, const uint8_t *chosen, tfg_train_step *out, tfg_diag *d) {
  int32_t n0 = g->nnodes;
  tfg_action cast;
  tfg_node_id *cast_metrics = tfg_autocast(g, a, &cast, d);
  tfg_recompute_mark(g, p, chosen); /* the casts autocast made in a call are the call's */
  tfg_status st = tfg_strategy_train_step(g, &cast, p, job, sw, out, d);
  tfg_recompute_clear(g);
  if (st != TFG_OK) tfg_graph_truncate(g, n0); /* the strategy put back its own nodes; these are the cast's */
  free(cast_metrics);
  return st;
}

tfg_status tfg_compile_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                                  const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  uint8_t *named = tfg_recompute_named(p, a);
  tfg_status st = build_step(g, a, p, job, sw, named, out, d);
  if (st == TFG_OK && a->config.nrecompute > 0) { /* what it saved, for place --explain */
    tfg_strbuf b = {0};
    tfg_recompute_explain(g, p, a, named, &b);
    if (b.data) tfg_train_step_explain(out, b.data, false);
    tfg_strbuf_free(&b);
  }
  free(named);
  return st;
}

/* ---- stage 2: recompute = "auto" ------------------------------------------------- */

/* How far step st's plan on ds passes the most full device's memory
 * (<= 0: it fits): a trial placement (as the driver places) and plan
 * (views, no passes), nothing reported; *dev gets that device. */
static int64_t plan_over(const tfg_program *p, const tfg_devices *ds, const tfg_train_step *st, int *dev,
                         int64_t *peak) {
  const tfg_graph *g = p->graph;
  /* ds's GPUs, or cpu:0 when there are none (as the placer weighs them) */
  int lo = tfg_devices_gpus(ds) ? 1 : 0;
  tfg_diag *quiet = tfg_diag_new();
  tfg_placement *pl = NULL;
  tfg_plan *plan = NULL;
  int64_t over = INT64_MAX / 4; /* the params alone do not fit: the placer says so later */
  *dev = lo;
  *peak = 0;
  /* as the passes will leave it: what no run reads removed (simplify's
   * part that matters here: the program's own forward of a cloned loss),
   * fused and with views */
  uint8_t *keep = calloc((size_t)g->nnodes + 1, 1), *removed = calloc((size_t)g->nnodes + 1, 1);
  TFG_ASSERT(keep && removed);
  mark_fetched(p, st, 1, keep);
  for (int32_t i = g->nnodes - 1; i >= 0; i--) {
    if (!keep[i] && !removed[i]) continue; /* removed[] holds "needed" until the second loop */
    removed[i] = 1;
    for (int k = 0; k < g->nodes[i].ninputs; k++) removed[g->nodes[i].inputs[k]] = 1;
  }
  for (int32_t i = 0; i < g->nnodes; i++)
    removed[i] = !removed[i] && g->nodes[i].ninputs > 0 ? TFG_FOLD_SIMPLIFIED : TFG_FOLD_KEPT;
  tfg_plan_opts po = {.views = true, .fuse = true, .keep = keep, .folded = removed};
  /* placed to fit; when it cannot be, as placed with the params alone counted (what it lacks) */
  tfg_status placed = place_fit(g, ds, st, 1, removed, quiet, &pl);
  if (placed != TFG_OK) placed = tfg_place(g, ds, st, 1, NULL, removed, quiet, &pl);
  if (placed == TFG_OK && tfg_plan_build_with(g, pl, ds, &po, NULL, &plan) == TFG_OK) {
    over = INT64_MIN;
    for (int k = lo; k < plan->ndev; k++) {
      int64_t o = plan->dev[k].peak - tfg_devices_at(ds, k)->memory;
      if (o > over) over = o, *dev = k, *peak = plan->dev[k].peak;
    }
  }
  tfg_plan_free(plan);
  tfg_placement_free(pl);
  tfg_diag_free(quiet);
  free(keep);
  free(removed);
  return over;
}

/* Undoes a built step: its nodes (from n0 on) and the pins it set below
 * n0 (as they were: pins). */
static void unbuild(tfg_graph *g, tfg_train_step *out, int32_t n0, const tfg_devspec *pins) {
  tfg_train_step_free(out);
  tfg_graph_truncate(g, n0);
  for (int32_t i = 0; i < n0; i++) g->nodes[i].pin = pins[i];
}

/* recompute = "auto" (compiler/recompute.h): the step without recompute
 * when its plan fits ds; else, the candidate calls in order (fewest FLOPs
 * replayed per byte freed), at each round enough more to free what the
 * plan lacks (at least one), the step rebuilt and planned again, until it
 * fits or every candidate is chosen (the driver's plan then says what is
 * missing). What it chose and why is appended to the step's explain. */
static tfg_status step_auto(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                            const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  const tfg_devices *ds = job->ds;
  int32_t n0 = g->nnodes;
  tfg_devspec *pins = malloc(sizeof *pins * ((size_t)n0 + 1)); /* what a built step changes below n0 */
  uint8_t *chosen = calloc((size_t)p->ncalls + 1, 1);
  TFG_ASSERT(pins && chosen);
  for (int32_t i = 0; i < n0; i++) pins[i] = g->nodes[i].pin;
  tfg_recompute_candidate *cand = NULL;
  int ncand = tfg_recompute_candidates(g, p, a, &cand), k = 0, dev = 0;
  int64_t first_peak = 0, peak = 0, over = 0;
  double flops = 0;
  tfg_status st;
  for (int round = 0;; round++) {
    st = build_step(g, a, p, job, sw, chosen, out, d);
    if (st == TFG_OK && out->ranks > 1) { /* its pins name the job's GPUs: no trial plans it on this rank's */
      tfg_diag_error(d, &a->config.recompute_at, "recompute = \"auto\" with a pipeline across the %d ranks of a job "
                     "is not in this version", out->ranks);
      tfg_diag_help(d, "name the fns whose calls to recompute, like recompute = [\"block\"]");
      unbuild(g, out, n0, pins);
      st = TFG_ERR_NAME;
    }
    if (st != TFG_OK || !ds) break;
    over = plan_over(p, ds, out, &dev, &peak);
    if (round == 0) first_peak = peak;
    if (over <= 0 || k == ncand) break;
    double freed = 0; /* what the plan lacks, freed by the next candidates (their activations, at most) */
    do {
      chosen[cand[k].call] = 1;
      freed += cand[k].bytes;
      flops += cand[k].flops;
      k++;
    } while (k < ncand && freed < (double)over);
    unbuild(g, out, n0, pins); /* build it again, with those */
  }
  if (st == TFG_OK && ds) {
    tfg_strbuf b = {0}, have = {0}, need = {0}, now = {0};
    const char *name = tfg_devices_at(ds, dev)->name;
    tfg_size_format(&have, tfg_devices_at(ds, dev)->memory);
    tfg_size_format(&need, first_peak);
    tfg_size_format(&now, peak);
    if (k == 0) {
      tfg_strbuf_printf(&b, "recompute = \"auto\" (train at line %u): nothing recomputed: the plan fits, its fullest "
                        "device %s at %s of %s\n", a->loc.line, name, need.data, have.data);
    } else {
      tfg_strbuf_printf(&b, "recompute = \"auto\" (train at line %u): without it the plan needs %s on %s, which has %s; "
                        "recomputing %d of %d calls (fewest FLOPs replayed per byte freed first) replays %.3g GFLOP a "
                        "step and %s %s\n", a->loc.line, need.data, name, have.data, k, ncand, flops / 1e9,
                        over <= 0 ? "brings its fullest device to" : "still needs", now.data);
      for (int q = 0; q < k; q++) {
        const tfg_call *c = &p->calls[cand[q].call];
        tfg_strbuf_printf(&b, "  %s (%s:%u): %.3g MB of activations, %.3g GFLOP\n", c->fn,
                          c->loc.src ? tfg_path_base(c->loc.src->name) : "?", c->loc.line, cand[q].bytes / 1e6,
                          cand[q].flops / 1e9);
      }
    }
    tfg_train_step_explain(out, b.data, false);
    tfg_strbuf_free(&b);
    tfg_strbuf_free(&have);
    tfg_strbuf_free(&need);
    tfg_strbuf_free(&now);
  }
  free(cand);
  free(chosen);
  free(pins);
  return st;
}

/* ---- the stages -------------------------------------------------------------------- */

static void stage_done(const tfg_compile_opts *o, tfg_compile_stage stage, const tfg_compiled *c) {
  if (o->done) o->done(o->ctx, stage, c);
}

static tfg_status stage_failed(tfg_compiled *c, tfg_compile_stage stage, tfg_status st) {
  c->failed = stage;
  return st;
}

/* Stages 3 to 5, fusion keeping keep (may be NULL: no fusion), the
 * plan leaving out what c->folded marks removed. */
static tfg_status place_plan_validate(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps,
                                      int nsteps, const tfg_compile_opts *o, const uint8_t *keep, tfg_diag *d,
                                      tfg_compiled *c) {
  tfg_status st = o->fit ? place_fit(g, ds, steps, nsteps, c->folded, d, &c->pl)
                         : tfg_place(g, ds, steps, nsteps, NULL, c->folded, d, &c->pl);
  if (st != TFG_OK) return stage_failed(c, TFG_COMPILE_PLACE, st);
  stage_done(o, TFG_COMPILE_PLACE, c);

  /* Views are one of the optimization passes: sw.no_opt turns them off. */
  tfg_plan_opts po = {.bucket_bytes = o->bucket_bytes, .fuse = o->fuse, .keep = keep, .folded = c->folded,
                      .views = !o->sw.no_opt};
  st = tfg_plan_build_with(g, c->pl, ds, &po, d, &c->plan);
  if (st != TFG_OK) return stage_failed(c, TFG_COMPILE_PLAN, st);
  stage_done(o, TFG_COMPILE_PLAN, c);

  /* A violation is a bug in the planner, never something to run. */
  if (!o->validate) return TFG_OK;
  if (!tfg_plan_validate(c->plan, &c->why)) return stage_failed(c, TFG_COMPILE_VALIDATE, TFG_ERR_DEVICE);
  stage_done(o, TFG_COMPILE_VALIDATE, c);
  return TFG_OK;
}

tfg_status tfg_compile_graph(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                             const tfg_compile_opts *o, tfg_diag *d, tfg_compiled *out) {
  static const tfg_compile_opts none = {0};
  if (!o) o = &none;
  *out = (tfg_compiled){0};
  return place_plan_validate(g, ds, steps, nsteps, o, o->keep, d, out);
}

tfg_status tfg_compile(tfg_program *p, const tfg_compile_opts *o, tfg_diag *d, tfg_compiled *c) {
  *c = (tfg_compiled){.nactions = p->nactions};
  c->steps = calloc((size_t)p->nactions + 1, sizeof *c->steps);
  c->packed = calloc((size_t)p->nactions + 1, sizeof *c->packed);
  TFG_ASSERT(c->steps && c->packed);

  /* Stage 1: the devices, chosen from the program as written (the
   * gpu:N it names), which mirrored() needs to know its replicas. */
  tfg_status st = o->devices(o->ctx, p, d, &c->ds);
  if (st != TFG_OK) return stage_failed(c, TFG_COMPILE_DEVICES, st);
  for (int i = 0; i < p->nactions; i++) {
    p->actions[i].config.strategy.gpus = tfg_devices_gpus(c->ds);
    p->actions[i].config.strategy.ranks = o->job && o->job->size > 1 ? o->job->size : 1;
  }
  stage_done(o, TFG_COMPILE_DEVICES, c);

  /* Stage 2: the passes, a train action at a time, in program order. */
  for (int i = 0; i < p->nactions; i++) {
    if (p->actions[i].kind != TFG_ACTION_TRAIN) continue;
    tfg_job one = o->job ? *o->job : (tfg_job){.rank = 0, .size = 1};
    one.ds = c->ds; /* a pipeline balances its stages on the devices' numbers */
    st = p->actions[i].config.recompute_auto ? step_auto(p->graph, &p->actions[i], p, &one, &o->sw, &c->steps[i], d)
                                             : tfg_compile_train_step(p->graph, &p->actions[i], p, &one, &o->sw, &c->steps[i], d);
    if (st != TFG_OK) return stage_failed(c, TFG_COMPILE_PASSES, st);
    c->packed[c->npacked++] = c->steps[i];
  }

  /* What a run may fetch: fusion leaves it materialized, folding keeps
   * it (a constant at most). */
  uint8_t *keep = calloc((size_t)p->graph->nnodes + 1, 1);
  TFG_ASSERT(keep != NULL);
  mark_fetched(p, c->packed, c->npacked, keep);
  for (int i = 0; i < o->nextra; i++) keep[o->extra[i]] = 1;

  /* A pipeline across the ranks of the job: its sends and receives, the
   * same on every rank (the passes then decide alike everywhere). */
  tfg_job job = o->job ? *o->job : (tfg_job){.rank = 0, .size = 1};
  int spans = -1; /* the train action whose step spans the ranks */
  for (int i = 0; i < p->nactions; i++)
    if (p->actions[i].kind == TFG_ACTION_TRAIN && c->steps[i].ranks > 1) spans = i;
  if (spans >= 0 && c->npacked > 1) {
    tfg_diag_error(d, &p->actions[spans].config.strategy.at, "a pipeline across the %d ranks of a job must be the "
                   "program's only train, but it has %d", c->steps[spans].ranks, c->npacked);
    tfg_diag_help(d, "train the others in a program of their own, or run this pipeline in one process");
    free(keep);
    return stage_failed(c, TFG_COMPILE_PASSES, TFG_ERR_PLACE);
  }
  if (spans >= 0) {
    st = tfg_ranks_split(p->graph, &c->steps[spans], keep, job.size, tfg_devices_gpus(c->ds), &c->owner, d);
    if (st != TFG_OK) {
      free(keep);
      return stage_failed(c, TFG_COMPILE_PASSES, st);
    }
    c->packed[0] = c->steps[spans]; /* its ids renumbered */
    keep = realloc(keep, (size_t)p->graph->nnodes + 1);
    TFG_ASSERT(keep != NULL);
    memset(keep, 0, (size_t)p->graph->nnodes + 1);
    mark_fetched(p, c->packed, c->npacked, keep); /* its sends now too */
    for (int i = 0; i < o->nextra; i++) keep[o->extra[i]] = 1;
  }

  /* The optimization passes over the whole graph (sw.no_opt: none, to
   * compare): constant folding, then CSE and exact simplification (which
   * merge the constants folding made and see them as 1 or -0.0), then
   * transposes folded into matmuls and attentions (after simplify, so a transpose pair
   * it cancels is gone first), sharing one array of marks. The training steps' node ids stay valid: a pass
   * never removes a root. */
  if (!o->no_passes && !o->sw.no_opt) {
    c->folded = calloc((size_t)p->graph->nnodes + 1, 1);
    TFG_ASSERT(c->folded != NULL);
    c->nfolded = tfg_fold_constants(p->graph, keep, c->folded);
    c->nsimplified = tfg_simplify(p->graph, keep, c->folded);
    if (!o->sw.no_layout) /* that pass alone off, to compare */
      c->nstrided = tfg_fold_transposes(p->graph, keep, c->folded);
  }
  if (spans >= 0) { /* this rank's share: its own GPUs, the other ranks' nodes marked */
    if (!c->folded) c->folded = calloc((size_t)p->graph->nnodes + 1, 1);
    TFG_ASSERT(c->folded != NULL);
    tfg_ranks_place(p->graph, c->owner, job.rank, tfg_devices_gpus(c->ds), c->folded);
  }
  stage_done(o, TFG_COMPILE_PASSES, c);

  st = place_plan_validate(p->graph, c->ds, c->packed, c->npacked, o, o->fuse ? keep : NULL, d, c);
  free(keep);
  return st;
}

void tfg_compiled_free(tfg_compiled *c) {
  tfg_plan_free(c->plan);
  tfg_placement_free(c->pl);
  for (int i = 0; c->steps && i < c->nactions; i++) tfg_train_step_free(&c->steps[i]);
  free(c->steps);
  free(c->packed); /* the same steps' arrays */
  tfg_strbuf_free(&c->why);
  free(c->folded);
  free(c->owner);
  *c = (tfg_compiled){0};
}
