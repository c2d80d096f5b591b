/* compiler/strategy/registry.c: the table of strategies, one row per
 * module of this folder, and the calls everyone makes through it
 * (compiler/strategy/strategy.h). A new strategy is a file of its own
 * defining its tfg_strategy_i, and a row here. */
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/strategy/strategy.h"

/* Each defined in the file of its name. */
extern const tfg_strategy_i tfg_strategy_single, tfg_strategy_mirrored, tfg_strategy_parameter_server,
    tfg_strategy_parallel;

static const tfg_strategy_i *const strategies[] = {
    &tfg_strategy_single,
    &tfg_strategy_mirrored,
    &tfg_strategy_parameter_server,
    &tfg_strategy_parallel,
};

const tfg_strategy_i *tfg_strategy_lookup(const tfg_strategy_config *c) {
  for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++)
    if (strcmp(strategies[i]->name, c->name) == 0) return strategies[i];
  TFG_ASSERT(!"a strategy of lang/builtins.c without a row in compiler/strategy/registry.c");
  return NULL;
}

bool tfg_strategy_names_devices(const tfg_strategy_config *c) {
  (void)c;
  return false;
}

int tfg_strategy_no_gpus(const tfg_strategy_config *c) {
  (void)c;
  return 0;
}

/* micro_batches and schedule split a pipeline's batch: set without one,
 * they would change nothing, which is more likely a mistake. */
static tfg_status check_pipeline_settings(const tfg_action *a, const tfg_strategy *s, tfg_diag *d) {
  const tfg_train_config *c = &a->config;
  const tfg_loc *at = c->micro_batches ? &c->micro_batches_at : c->schedule.at.src ? &c->schedule.at : NULL;
  if (!at || s->stages > 1) return TFG_OK;
  tfg_diag_error(d, at, "%s orders a pipeline's micro-batches, but this train has no pipeline",
                 c->micro_batches ? "micro_batches" : "schedule");
  tfg_diag_note(d, &c->strategy.loc, "the strategy is %s", s->i->name);
  tfg_diag_help(d, "use strategy = parallel(pipeline = 2) (or more stages), or remove the setting");
  return TFG_ERR_NAME;
}

tfg_status tfg_strategy_of(const tfg_action *a, tfg_strategy *out, tfg_diag *d) {
  const tfg_strategy_config *s = &a->config.strategy;
  memset(out, 0, sizeof *out);
  out->i = tfg_strategy_lookup(s);
  out->loc = s->loc; /* the train statement without a strategy */
  out->nreplicas = 1;
  out->group = 1;
  out->stages = 1;
  out->ranks = 1;
  tfg_status st = out->i->read(s, out, d);
  if (st == TFG_OK) st = check_pipeline_settings(a, out, d);
  if (st != TFG_OK) {
    tfg_strategy_free(out);
    out->loc = s->loc;
  }
  return st;
}

void tfg_strategy_free(tfg_strategy *s) {
  free(s->devices);
  memset(s, 0, sizeof *s);
  s->nreplicas = s->group = s->stages = s->ranks = 1;
}

tfg_status tfg_strategy_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                                   const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  memset(out, 0, sizeof *out);
  tfg_strategy s;
  tfg_status st = tfg_strategy_of(a, &s, d);
  if (st != TFG_OK) return st;
  st = s.i->rewrite(g, a, p, &s, job, sw, out, d);
  if (st == TFG_OK && a->config.zero > 0 && out->zero == 0) { /* a strategy without data-parallel replicas */
    tfg_diag_error(d, &a->config.zero_at, "zero = %d shards over data-parallel replicas, and this train's strategy (%s) has none",
                   a->config.zero, s.i->name);
    tfg_diag_help(d, "use mirrored(...) or parallel(data = D, ...) with D > 1");
    tfg_train_step_free(out);
    st = TFG_ERR_NAME;
  }
  if (st == TFG_OK) out->kind = s.i->run; /* what the runtime dispatches on */
  if (st == TFG_OK && out->ranks < 1) out->ranks = 1;
  tfg_strategy_free(&s);
  return st;
}
