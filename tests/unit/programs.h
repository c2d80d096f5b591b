/* tests/unit/programs.h: a tfg program taken from source text through the
 * real pipeline, as far as a suite needs: parsed, evaluated (the
 * interpreter), its train actions given their steps (compiler/strategy.h),
 * and placed and planned over a --devices spec (the compile driver,
 * compiler/compile.h, from its placement on).
 *
 *   built b;
 *   program_build(&b, text, &(build_opts){.steps = 1, .devices = "host*2", .fit = true});
 *   ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
 *   ... b.p, b.steps[0], b.pl, b.plan ...
 *   program_free(&b);
 *
 * The last stage asked for may fail, and the suite checks how (b.st and
 * b.errs); a stage before it must succeed, else the test aborts with the
 * diagnostics. Below, the checks the planner's suites share (the
 * validator's verdict, finding a node by op). */
#ifndef TFG_TEST_PROGRAMS_H
#define TFG_TEST_PROGRAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/diag.h"
#include "compiler/compile.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "compiler/compile.h"
#include "compiler/strategy/strategy.h"
#include "lang/interp.h"
#include "runtime/device.h"

/* The most train actions one build gives steps to. */
#define BUILT_MAX_STEPS 4

/* How far program_build goes, and how. Zero is "t.tfg", evaluated only. */
typedef struct build_opts {
  const char *name;     /* the source's name (imports resolve beside it); NULL: "t.tfg" */
  const tfg_set *sets;  /* --set overrides (kept by the interpreter: they must outlive the build) */
  int nsets;
  int steps;            /* the first `steps` train actions, in program order, get their steps
                         * (at most BUILT_MAX_STEPS); later ones are left alone */
  const char *devices;  /* a --devices spec: placed over it with the steps, then planned; NULL: not placed */
  bool fit;             /* place counting activations (tfg_compile_opts.fit), else params alone */
  tfg_switches sw;      /* the A/B switches of the steps, placement and plan (zero: the defaults) */
} build_opts;

/* A program as program_build leaves it. Every pointer the build did not
 * reach is NULL. The interpreter keeps a pointer to io: b must not move
 * between program_build and program_free. */
typedef struct built {
  tfg_diag *d;
  tfg_arena a;
  tfg_interp_opts io;
  tfg_interp *I;
  tfg_program *p;
  const tfg_action *act; /* the first train action, or NULL */
  int32_t n0;            /* the graph's nodes before the steps were built */
  tfg_train_step steps[BUILT_MAX_STEPS];
  int nsteps;            /* the steps built (a failed one is left empty, uncounted) */
  tfg_devices *ds;
  tfg_placement *pl;
  tfg_plan *plan;        /* not validated: the suite checks it as it needs */
  tfg_status st;         /* of the last stage asked for */
  char *errs;            /* the diagnostics when the build ended, rendered without colour */
} built;

/* Builds text into *b (overwritten: zeroed first) through the stages o
 * asks for: parse (a syntax error fails the test), evaluate (with
 * tfg_interp_finish, the stdlib from ./stdlib), steps (o->steps > 0),
 * then devices, placement and plan (o->devices). The last stage asked
 * for may fail: its status is returned and kept in b->st. A failure in an
 * earlier stage aborts the test with the diagnostics. Either way b holds
 * what was built, for program_free. */
tfg_status program_build(built *b, const char *text, const build_opts *o);

/* Frees everything program_build made (any stage may be missing). */
void program_free(built *b);

/* ---- checking plans and graphs ------------------------------------------------- */

/* p as `tfg plan` prints it; the caller frees it. */
char *plan_text(const tfg_plan *p);

/* Shows p on stderr when TFG_TEST_SHOW_PLAN is set (for a person reading
 * along). */
void plan_show(const tfg_plan *p);

/* Asserts the validator accepts p; else fails with its reason (and the
 * plan, when short enough for Check's message). */
void plan_expect_valid(const tfg_plan *p);

/* Asserts the validator rejects p with a message containing want. */
void plan_expect_invalid(const tfg_plan *p, const char *want);

/* The last (first) node of g with op `op`; fails the test without one. */
tfg_node_id graph_last_op(const tfg_graph *g, tfg_op_id op);
tfg_node_id graph_first_op(const tfg_graph *g, tfg_op_id op);

/* Per node of p's graph (nnodes + 1 bytes, the caller frees): 1 for
 * every node a print action shows, the roots a graph pass must keep. */
uint8_t *program_printed_roots(const tfg_program *p);
/* The node the k-th tensor of p's print actions shows (fails the test
 * when there are fewer). */
tfg_node_id program_printed(const tfg_program *p, int k);

/* ---- the graph passes on and off (sw.no_opt, TFG_OPT) ---------------------- */

#define TRAINED_MAX_FETCH 8

/* What program_train_fetch made: copies of the printed tensors' bytes
 * and what the passes did. */
typedef struct trained {
  int n;
  void *data[TRAINED_MAX_FETCH];
  size_t bytes[TRAINED_MAX_FETCH];
  int nfolded, nsimplified, nstrided, nviews;
} trained;

/* Compiles text with the driver on host devices under the switches sw
 * (NULL: the defaults; {.no_opt = true}: the passes off), trains its
 * first train action (if it has one) on one thread and fetches its first
 * n printed tensors (exactly n must exist, n <= TRAINED_MAX_FETCH). */
void program_train_fetch(const char *text, const tfg_switches *sw, int n, trained *out);
/* Asserts a and b fetched the same bytes (bit for bit), then frees both. */
void trained_expect_same(trained *a, trained *b);

#endif
