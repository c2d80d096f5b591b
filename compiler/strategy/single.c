/* compiler/strategy/single.c: single(), the default strategy: the step as
 * autodiff builds it (tfg_autodiff_train_step), placed as the placer
 * decides (model parallelism from pins or the memory pass). */
#include <stdio.h>

#include "compiler/strategy/strategy.h"

/* single() takes no arguments: the interpreter checked the call. */
static tfg_status single_read(const tfg_strategy_config *c, tfg_strategy *out, tfg_diag *d) {
  (void)c, (void)out, (void)d;
  return TFG_OK;
}

/* One process or many, a single step is the same graph: under mpirun
 * every rank trains the whole batch on its own devices. */
static tfg_status single_rewrite(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_strategy *s,
                                 const tfg_job *job, const tfg_switches *sw, tfg_train_step *out, tfg_diag *d) {
  (void)s, (void)job;
  return tfg_autodiff_train_step(g, a, p, sw, out, d);
}

static void single_describe(const tfg_train_step *st, char *buf, size_t n) {
  (void)st;
  snprintf(buf, n, "single");
}

const tfg_strategy_i tfg_strategy_single = {
    .name = "single", .run = TFG_STEP_GROUP, .read = single_read,
    .rewrite = single_rewrite, .describe = single_describe, .spans_gpus = tfg_strategy_names_devices, .gpus = tfg_strategy_no_gpus,
    .not_predicted = NULL};
