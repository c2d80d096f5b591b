/* compiler/strategy/parameter_server.c: parameter_server(workers, ps),
 * asynchronous training (compiler/strategy/strategy.h says what it
 * builds): a clone of the forward pass per worker, and the updates on
 * the server reading their gradients from placeholders the runtime
 * fills (runtime/train_ps.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/strategy/replicate.h"
#include "compiler/strategy/strategy.h"
#include "ir/ops.h"

/* parameter_server(workers, ps = cpu). */
static tfg_status ps_read(const tfg_strategy_config *s, tfg_strategy *out, tfg_diag *d) {
  const tfg_devarg *w = tfg_strategy_config_arg(s, "workers"), *ps = tfg_strategy_config_arg(s, "ps");
  if (w->kind != TFG_DEVARG_LIST || w->n == 0) {
    if (w->kind != TFG_DEVARG_NONE && w->kind != TFG_DEVARG_LIST)
      tfg_diag_error(d, &s->loc, "parameter_server: workers must be a list of devices, got %s",
                     tfg_replicate_arg_what(w));
    else tfg_diag_error(d, &s->loc, "parameter_server needs at least one worker");
    tfg_diag_help(d, "for example parameter_server(ps = cpu, workers = [gpu:0, gpu:1])");
    return TFG_ERR_NAME;
  }
  out->nreplicas = (int)w->n;
  out->group = 1;
  out->devices = malloc(sizeof *out->devices * (size_t)w->n);
  TFG_ASSERT(out->devices != NULL);
  for (int32_t k = 0; k < w->n; k++) {
    char what[32];
    snprintf(what, sizeof what, "worker %d", (int)k);
    if (!tfg_replicate_check_device(s, "parameter_server", what, &w->items[k], out->devices, (int)k, d))
      return TFG_ERR_NAME;
    out->devices[k] = w->items[k].dev;
  }
  /* The server may share a worker's device: it is not a replica. */
  out->ps = (tfg_devspec){.kind = TFG_DEV_CPU, .loc = s->loc};
  if (ps->kind != TFG_DEVARG_NONE) {
    if (!tfg_replicate_check_device(s, "parameter_server", "ps", ps, NULL, 0, d)) return TFG_ERR_NAME;
    out->ps = ps->dev;
  }
  return TFG_OK;
}

/* A worker is one device: the program's cpu pins stay, every other pin
 * goes to the worker. */
static tfg_status ps_pin(tfg_replicate *c, int32_t i, const tfg_devspec *p, int r, tfg_devspec *out) {
  (void)i;
  *out = p->kind == TFG_DEV_CPU ? *p : tfg_replicate_pin(c, &c->s->devices[r]);
  return TFG_OK;
}

/* The program's params live on the server; a worker reads the trained
 * ones through copies of its own, and the others (only a metric reads
 * them) straight from the server. */
static tfg_status ps_param(tfg_replicate *c, int r, int32_t i, const tfg_node *nd, tfg_train_step *out) {
  (void)out;
  c->g->nodes[i].pin = tfg_replicate_pin(c, &c->s->ps);
  if (c->param_of[i] < 0) { /* not trained: read from the server, never pushed */
    c->map[i] = i;
    return TFG_OK;
  }
  tfg_devspec pin = tfg_replicate_pin(c, &c->s->devices[r]);
  tfg_status st = tfg_replicate_add(c, nd, NULL, &pin, &c->map[i]);
  TFG_ASSERT(st == TFG_OK);
  return TFG_OK;
}

static const tfg_replicate_hooks ps_hooks = {.pin = ps_pin, .param = ps_param, .cloned = NULL, .traced = NULL};

static tfg_status ps_rewrite(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_strategy *s,
                             const tfg_job *job, const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  if (job && job->size > 1) {
    tfg_diag_error(d, &s->loc, "parameter_server runs in one process, not across the %d ranks of an mpirun job",
                   job->size);
    tfg_diag_help(d, "run it without mpirun, or use mirrored(...), whose replicas span the ranks");
    return TFG_ERR_PLACE;
  }
  tfg_replicate c;
  tfg_replicate_begin(&c, &ps_hooks, g, a, p, s, job, sw, d, out);
  int R = s->nreplicas, n = c.n;
  out->updates = malloc(sizeof *out->updates * (size_t)(n + 1));
  out->worker_params = malloc(sizeof *out->worker_params * (size_t)(R * n + 1));
  out->worker_grads = malloc(sizeof *out->worker_grads * (size_t)(R * n + 1));
  out->grad_inputs = malloc(sizeof *out->grad_inputs * (size_t)(n + 1));
  TFG_ASSERT(out->updates && out->worker_params && out->worker_grads && out->grad_inputs);

  tfg_status st = tfg_replicate_replicas(&c, out);
  if (st == TFG_OK) {
    /* The server: each update reads its gradient from a placeholder the
     * runtime fills with whichever worker's gradient arrives. */
    for (int w = 0; w < R; w++)
      for (int i = 0; i < n; i++) {
        out->worker_params[w * n + i] = c.rparams[w * n + i];
        out->worker_grads[w * n + i] = c.grads[w * n + i];
      }
    for (int i = 0; i < n; i++) {
      const tfg_node pn = g->nodes[out->params[i]];
      size_t len = strlen(pn.name) + 6;
      char *name = tfg_arena_alloc(&g->arena, len);
      snprintf(name, len, "grad:%s", pn.name);
      tfg_node in = {.op = TFG_OP_INPUT, .dtype = pn.dtype, .shape = pn.shape, .name = name, .loc = pn.loc};
      tfg_devspec pin = tfg_replicate_pin(&c, &s->ps);
      tfg_status ok = tfg_replicate_add(&c, &in, NULL, &pin, &out->grad_inputs[i]);
      TFG_ASSERT(ok == TFG_OK);
    }
    st = tfg_autodiff_updates(g, a, out->params, out->grad_inputs, n, NULL, out->updates, out->states, &out->nstates,
                              d);
    out->nupdates = n;
  }
  return tfg_replicate_end(&c, st, out);
}

static void ps_describe(const tfg_train_step *st, char *buf, size_t n) {
  snprintf(buf, n, "parameter_server with %d workers", st->nreplicas);
}

const tfg_strategy_i tfg_strategy_parameter_server = {
    .name = "parameter_server", .run = TFG_STEP_SERVER, .read = ps_read,
    .rewrite = ps_rewrite, .describe = ps_describe, .spans_gpus = tfg_strategy_names_devices, .gpus = tfg_strategy_no_gpus,
    .not_predicted = "parameter_server's workers run asynchronously, a step of each is not a step of the job"};
