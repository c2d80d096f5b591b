/* ir/program.c: the little the program's types compute (ir/program.h):
 * names and the defaults that depend on another setting. */
#include "ir/program.h"

#include <string.h>

const char *tfg_optimizer_name(tfg_optimizer_kind k) {
  switch (k) {
  case TFG_OPTIMIZER_SGD: return "sgd";
  case TFG_OPTIMIZER_ADAM: return "adam";
  case TFG_OPTIMIZER_ADAMW: return "adamw";
  }
  return "?";
}

int64_t tfg_train_config_log_every(const tfg_train_config *c, int64_t steps) {
  if (c->log_every) return c->log_every;
  return steps >= 10 ? steps / 10 : 1;
}

const tfg_devarg *tfg_strategy_config_arg(const tfg_strategy_config *c, const char *name) {
  static const tfg_devarg none = {.kind = TFG_DEVARG_NONE};
  for (int i = 0; i < c->nargs; i++)
    if (strcmp(c->arg_names[i], name) == 0) return &c->args[i];
  return &none;
}
