/* cli/pipeline.h: the steps `tfg run` takes from a built program to its
 * results, shared by the subcommands (cli/main.c) and the REPL
 * (cli/repl.c) so that the REPL runs an input exactly as `tfg run` runs
 * a file: the parsed options, the training steps, the devices, placement
 * and plan (validated), print actions, --feed checks, Ctrl-C during a
 * run, and the small things both front ends need (colour, the standard
 * library's folder, --verbose lines). Neither front end calls into the
 * other; both call this.
 *
 *   cli_opts o = {...};                     // from the command line
 *   cli_verbose_start();
 *   cli_compiled c;                         // steps, devices, placement, plan (compiler/compile.h)
 *   int rc = cli_compile(&o, prog, diag, &c);
 *   tfg_session *s = rc ? NULL : tfg_session_new(prog, diag, &(tfg_session_opts){.plan = c.plan});
 *   cli_catch_interrupts(true);
 *   ... cli_print_action(s, prog, c.plan, &prog->actions[i], o.print_all) ...
 *   cli_catch_interrupts(false);
 *   tfg_session_free(s);
 *   cli_compiled_free(&c);
 *
 * The REPL, which keeps its own devices and fetches more nodes, compiles
 * with cli_compile_for. */
#ifndef TFG_CLI_PIPELINE_H
#define TFG_CLI_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/switches.h"
#include "compiler/autodiff.h"
#include "compiler/compile.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "lang/interp.h"
#include "runtime/device.h"
#include "runtime/session.h"
#include "runtime/train.h"

/* Process exit codes (CLI.md). */
enum { EXIT_PROGRAM = 1, EXIT_USAGE = 2, EXIT_RUNTIME = 3, EXIT_INTERRUPTED = 130 };

/* Options of the commands that read a program. */
typedef struct cli_opts {
  const char *color;
  bool ast, print_all;
  const char *file;
  tfg_set sets[64];
  int nsets;
  tfg_feed_file feeds[64];
  int nfeeds;
  uint64_t seed;
  int threads;
  bool check_numerics, quiet;
  const char *devices;    /* --devices SPEC */
  int64_t memory_limit;   /* --memory-limit SIZE, 0 for none */
  bool explain, json, dot;
  bool predict;           /* plan --predict: each train's step time from the cost model */
  const char *trace;      /* --trace FILE.json */
  bool profile;           /* --profile: a table of ops by time after the run */
  bool log_all_ranks;     /* --log-all-ranks: under mpirun every rank logs, "[rank K] " first */
  int64_t bucket_bytes;   /* --bucket-size SIZE, 0 for the default */
  bool preallocate;       /* --memory preallocate (default: growth) */
  bool tf32;              /* --tf32 */
  bool verbose;           /* --verbose: each phase, what it made and its time, on stderr */
  tfg_switches sw;        /* the A/B switches, from the environment (cli/switches.h) */
} cli_opts;

/* --verbose: prints "tfg: " and the formatted text on stderr, with the
 * time since the last such line (or since cli_verbose_start); nothing
 * without o->verbose. */
void cli_verbose(const cli_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Starts the clock cli_verbose reports from (a command, a REPL input). */
void cli_verbose_start(void);

/* Whether diagnostics on stderr get colour: --color=always|never, else
 * auto: stderr a terminal, NO_COLOR unset, TERM not dumb. */
bool cli_color_mode(const char *opt);

/* The folder of the standard library (TFG_STDLIB, beside the binary, the
 * source tree, or the installed default); buf is scratch of n bytes. */
const char *cli_stdlib_dir(char *buf, size_t n);
/* The folders `import NAME` looks in before the standard library:
 * TFG_PATH (':'-separated), or NULL. For tfg_interp_opts.path. */
const char *cli_module_path(void);

/* The input of p that --feed NAME names, or NULL. */
const tfg_feed *cli_feed_target(const tfg_program *p, const char *name);
/* Why --feed may not feed f, an input with a source (`from`): appended
 * to why, naming the input (with its file and line when `where`) and
 * the data file. */
void cli_feed_has_source(const tfg_program *p, const tfg_feed *f, bool where, tfg_strbuf *why);

/* The number of GPUs a program names (one past its highest gpu:N), and
 * in *where (when not NULL) the source that names the highest. */
int cli_gpus_named(const tfg_program *p, tfg_loc *where);

/* The devices of a run: --devices, else the default for the program
 * (its one-line notice, if any, printed to stderr). NULL after reporting
 * a bad --devices spec. */
tfg_devices *cli_devices_for(const cli_opts *o, const tfg_program *p, tfg_diag *d);

/* What run, place and plan build before they act, by the compile driver
 * (compiler/compile.h): every train action's step (indexed by action),
 * the devices, the placement and the validated plan. */
typedef tfg_compiled cli_compiled;

/* The whole chain for a file: the compile driver's stages with the
 * devices of cli_devices_for and their --verbose lines, under o->sw.
 * Memory that cannot fit is a program error. Fusion leaves materialized
 * every node p's actions fetch and the steps' nodes; it is off under
 * sw.no_fuse (TFG_FUSE=0) or --check-numerics. Returns 0 or the exit code after reporting: a bad
 * --devices is EXIT_USAGE, an invalid plan (a bug) EXIT_RUNTIME. c is
 * always the caller's to free with cli_compiled_free. */
int cli_compile(const cli_opts *o, tfg_program *p, tfg_diag *d, cli_compiled *c);

/* --trace's launch labels of c's pipelines (compiler/strategy/schedule.h:
 * "fwd s1 m3"), one per node of p's graph (NULL: none), or NULL when no
 * train is a pipeline; free with cli_trace_labels_free(labels, p). */
char **cli_trace_labels(const tfg_program *p, const cli_compiled *c);
void cli_trace_labels_free(char **labels, const tfg_program *p);
void cli_compiled_free(cli_compiled *c);

/* cli_compile for the REPL: devices(ctx, ...) picks the devices (the
 * caller's: c->ds is not freed), extra[0..nextra) are more nodes the
 * caller will fetch, --verbose says nothing of the steps and devices, and
 * no graph pass runs (every REPL value is a constant: each op runs where
 * it is placed, as the user asked, rather than being folded).
 * Returns 0 or the exit code; c->failed names the stage that failed. c is
 * the caller's to free with tfg_compiled_free. */
int cli_compile_for(const cli_opts *o, tfg_program *p,
                    tfg_status (*devices)(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out), void *ctx,
                    const tfg_node_id *extra, int nextra, tfg_diag *d, tfg_compiled *c);

/* Runs print action a on session s and prints it to stdout: per item a
 * header `TEXT: DTYPE[SHAPE] @DEVICE` and the values (or TEXT: VALUE for a
 * build-time value). Returns the run's status. */
tfg_status cli_print_action(tfg_session *s, const tfg_program *p, const tfg_plan *plan, const tfg_action *a,
                            bool all);

/* What cli_run_actions runs, and whom it tells. */
typedef struct cli_actions cli_actions;
struct cli_actions {
  tfg_session *s;
  const tfg_program *p;
  const tfg_train_step *steps;  /* a train action's step at its index (tfg_compiled.steps) */
  const tfg_plan *plan;
  const tfg_session_opts *so;   /* the session's options: a parameter server's workers start sessions like it */
  const tfg_train_opts *to;
  bool print;                   /* print actions print (under mpirun only rank 0 does; the others skip them) */
  bool print_all;               /* --print-all */
  /* After each print action and each train group, actions [from, to)
   * of r->p, with its status (reported to the diag, not yet rendered);
   * may be NULL. */
  void (*done)(void *ctx, const cli_actions *r, int from, int to, tfg_status st);
  void *ctx;
};

/* Runs actions [from, to) of r->p in program order, as `tfg run` and
 * the REPL both do: a print action prints; consecutive train actions
 * whose steps are TFG_STEP_GROUP train together (tfg_train_group); a
 * TFG_STEP_SERVER step trains alone (tfg_train_ps). Stops after the
 * first that fails; returns its status, or TFG_OK. */
tfg_status cli_run_actions(const cli_actions *r, int from, int to, tfg_diag *d);

/* Ctrl-C while actions run (on: from now; off: back to what it was).
 * During a train, the first Ctrl-C asks it to stop after its step
 * (tfg_train_interrupt: checkpoint written, TFG_ERR_INTERRUPTED) and
 * says so on stderr; otherwise, or at a second Ctrl-C, SIGINT does what
 * it did before (ends the process: a shell reports 130). A SIGINT the
 * process was started ignoring stays ignored. */
void cli_catch_interrupts(bool on);

#endif
