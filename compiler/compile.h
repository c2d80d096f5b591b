/* compiler/compile.h: the compile driver: one function runs a program's
 * graph passes, placement, plan and validation, in that order.
 *
 *   tfg_compile_opts o = {.devices = pick_devices, .ctx = me,
 *                         .fit = true, .fuse = true, .validate = true};
 *   tfg_compiled c;
 *   if (tfg_compile(prog, &o, diag, &c) == TFG_OK) {
 *     ... c.steps[action], c.pl, c.plan ...
 *   } else if (c.failed == TFG_COMPILE_VALIDATE) {
 *     ... c.why: the rule the plan breaks (a bug in the planner) ...
 *   }
 *   tfg_compiled_free(&c);                  // always (not c.ds: the hook's)
 *
 * A graph whose training steps the caller built itself (a test, a
 * benchmark) starts at placement:
 *
 *   tfg_compile_graph(graph, devices, steps, nsteps, &o, diag, &c);
 *
 * The stages, each run once the one before succeeded:
 *   1. devices: the caller's hook picks them from the program as written
 *      (the GPUs it names); every train action's strategy config learns
 *      how many GPU entries there are (mirrored() spans them all);
 *   2. passes: every train action's training step: autocast
 *      (compiler/autocast.h), then its strategy (compiler/strategy/:
 *      autodiff, replicas, collectives; tfg_compile_train_step), which adds
 *      nodes to the program's graph; then the optimization passes over
 *      the whole graph, unless o->sw.no_opt (TFG_OPT=0): constant
 *      folding (compiler/fold.h), which rewrites constant ops into
 *      CONST nodes in place and marks those only they read as removed;
 *   3. place (compiler/place.h); with fit, where a device's planned peak
 *      passes its memory, bytes are kept free of params there and the
 *      graph is placed again;
 *   A step whose pipeline spans the ranks of the job (tfg_train_step
 *   ranks > 1) is split before the passes and each rank's share taken
 *   after them (compiler/ranks.h): the passes see the same graph on
 *   every rank; the placement and plan only this rank's nodes;
 *   4. plan (compiler/plan.h), fused when asked, every node a run may
 *      fetch kept materialized, no step or memory for what folding
 *      removed;
 *   5. validate (tfg_plan_validate), when asked. */
#ifndef TFG_COMPILE_H
#define TFG_COMPILE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "base/switches.h"
#include "compiler/autodiff.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "compiler/strategy/strategy.h"
#include "ir/program.h"

typedef enum tfg_compile_stage {
  TFG_COMPILE_DEVICES = 1,
  TFG_COMPILE_PASSES,
  TFG_COMPILE_PLACE,
  TFG_COMPILE_PLAN,
  TFG_COMPILE_VALIDATE,
} tfg_compile_stage;

/* What the stages made. Every pointer a stage did not reach is NULL. */
typedef struct tfg_compiled {
  int nactions;             /* tfg_compile: the program's actions */
  tfg_train_step *steps;    /* tfg_compile: [nactions], a train action's step at its index, zero elsewhere */
  tfg_train_step *packed;   /* tfg_compile: the train actions' steps in action order (the same arrays) */
  int npacked;
  tfg_devices *ds;          /* tfg_compile: the hook's devices (the hook's to free) */
  tfg_placement *pl;
  tfg_plan *plan;
  uint8_t *folded;          /* tfg_compile: per node, the passes' TFG_FOLD_* mark (folding, simplify); NULL: no pass ran
                             * (no_passes, sw.no_opt) */
  int16_t *owner;           /* tfg_compile, a pipeline across the ranks of a job: per node, the rank that runs it,
                             * -1 every rank (compiler/ranks.h); NULL otherwise */
  int nfolded;              /* the ops folding computed at compile time */
  int nsimplified;          /* the nodes CSE and simplification replaced or removed (compiler/simplify.h) */
  int nstrided;             /* the transposes folded into matmuls and attentions (compiler/layout.h) */
  tfg_compile_stage failed; /* the stage that failed, or 0 */
  tfg_strbuf why;           /* failed at VALIDATE: the first violation */
} tfg_compiled;

typedef struct tfg_compile_opts {
  /* Stage 1 (tfg_compile; required): sets *out to the devices for p,
   * which must outlive the result, or reports to d and returns the
   * error. */
  tfg_status (*devices)(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out);
  /* Stage 2: the process among an mpirun job's, which a strategy's
   * replicas span (NULL: one process). */
  const tfg_job *job;
  /* Stage 2: run no optimization pass over the graph, as sw.no_opt does
   * (the REPL: its values are all constants, which folding would compute
   * at compile time on the CPU instead of where the user placed them). */
  bool no_passes;
  /* The A/B switches the stages read (base/switches.h): no_opt (the
   * passes, views and autodiff's rewrites), no_layout, no_attention_grad;
   * zero: the defaults. */
  tfg_switches sw;
  /* Stage 3: count activations (the fit loop, compiler/compile.c); else
   * placed once, params alone counted. */
  bool fit;
  /* Stage 4: the all-reduce bucket size (0: TFG_PLAN_BUCKET_BYTES), and
   * fusion (docs/plan.md), which leaves materialized every node a run
   * may fetch: tfg_compile finds them (the print actions' tensors, every
   * step's nodes) and adds extra[0..nextra); tfg_compile_graph takes
   * keep (per node, nonzero: fetched) and fuses nothing without it. */
  int64_t bucket_bytes;
  bool fuse;
  const tfg_node_id *extra;
  int nextra;
  const uint8_t *keep;
  /* Stage 5. */
  bool validate;
  /* Called after each stage that succeeded, with what it made so far
   * (--verbose); may be NULL. */
  void (*done)(void *ctx, tfg_compile_stage stage, const tfg_compiled *c);
  void *ctx; /* passed to the hooks */
} tfg_compile_opts;

/* Runs the stages on p (its graph grows by the steps' nodes) into *out
 * (overwritten). Returns TFG_OK, or the failing stage's error, reported
 * to d (out->failed names the stage): a strategy's error; the hook's; a
 * placement error (TFG_ERR_PLACE); a plan that does not fit
 * (TFG_ERR_OOM); an invalid plan (TFG_ERR_DEVICE, not reported: its
 * reason is in out->why). *out is the caller's to free either way. */
tfg_status tfg_compile(tfg_program *p, const tfg_compile_opts *o, tfg_diag *d, tfg_compiled *out);

/* Stage 2 for one train action a of p: autocast (compiler/autocast.h),
 * then a's strategy (tfg_strategy_train_step, job: NULL for one process)
 * on the cast action, its gradients under sw (may be NULL: the
 * defaults). Errors: the strategy's; on an error out is empty and g as
 * it was. `tfg check` and tests build the steps with this. */
tfg_status tfg_compile_train_step(tfg_graph *g, const tfg_action *a, const tfg_program *p, const tfg_job *job,
                                  const tfg_switches *sw, tfg_train_step *out, tfg_diag *d);

/* Stages 3 to 5 for g on ds, steps[0..nsteps) its training steps (may be
 * NULL), as tfg_compile runs them; o->devices and o->extra are not used
 * (o may be NULL: placed once, not fused, not validated). The steps' and
 * devices' fields of *out stay empty. */
tfg_status tfg_compile_graph(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                             const tfg_compile_opts *o, tfg_diag *d, tfg_compiled *out);

/* Frees what *c holds but its devices; c may be zeroed or partly built. */
void tfg_compiled_free(tfg_compiled *c);

#endif
