/* ir/program.c: the little the program's types compute (ir/program.h):
 * names and the defaults that depend on another setting. */
#include "ir/program.h"

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
