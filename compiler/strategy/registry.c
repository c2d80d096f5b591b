/* compiler/strategy/registry.c: the table of strategies, one row per
 * module of this folder, and the calls everyone makes through it
 * (compiler/strategy/strategy.h). A new strategy is a file of its own
 * defining its tfg_strategy_i, and a row here. */
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/strategy/strategy.h"

/* Each defined in the file of its name. */
extern const tfg_strategy_i tfg_strategy_single, tfg_strategy_mirrored, tfg_strategy_parameter_server;

static const tfg_strategy_i *const strategies[] = {
    &tfg_strategy_single,
    &tfg_strategy_mirrored,
    &tfg_strategy_parameter_server,
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

tfg_status tfg_strategy_of(const tfg_action *a, tfg_strategy *out, tfg_diag *d) {
  const tfg_strategy_config *s = &a->config.strategy;
  memset(out, 0, sizeof *out);
  out->i = tfg_strategy_lookup(s);
  out->loc = s->loc; /* the train statement without a strategy */
  out->nreplicas = 1;
  out->group = 1;
  tfg_status st = out->i->read(s, out, d);
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

tfg_status tfg_strategy_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                                   const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  memset(out, 0, sizeof *out);
  tfg_strategy s;
  tfg_status st = tfg_strategy_of(a, &s, d);
  if (st != TFG_OK) return st;
  st = s.i->rewrite(g, a, p, &s, job, sw, out, d);
  if (st == TFG_OK) out->kind = s.i->run; /* what the runtime dispatches on */
  tfg_strategy_free(&s);
  return st;
}
