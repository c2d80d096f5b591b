/* cli/pipeline.c: the pipeline glue of cli/pipeline.h, from a built
 * program to its printed results, for `tfg run`/`place`/`plan`
 * (cli/main.c) and `tfg repl` (cli/repl.c) alike: training steps,
 * devices, placement and a validated plan, print actions, --feed checks,
 * Ctrl-C during a run, colour, the standard library's folder and the
 * --verbose lines of each phase. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/diag.h"
#include "base/strbuf.h"
#include "cli/pipeline.h"
#include "compiler/compile.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "compiler/strategy/schedule.h"
#include "compiler/strategy/strategy.h"
#include "lang/interp.h"
#include "runtime/device.h"
#include "runtime/format.h"
#include "runtime/mpi.h"
#include "runtime/session.h"
#include "runtime/train.h"

/* Colour on a terminal only, never when NO_COLOR is set (no-color.org). */
bool cli_color_mode(const char *opt) {
  if (opt && strcmp(opt, "always") == 0) return true;
  if (opt && strcmp(opt, "never") == 0) return false;
  const char *term = getenv("TERM");
  return isatty(STDERR_FILENO) && !getenv("NO_COLOR") && !(term && strcmp(term, "dumb") == 0);
}

/* ---- --verbose ------------------------------------------------------------------ */

static double verbose_clock; /* when the last verbose line (or the start) was */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void cli_verbose_start(void) { verbose_clock = now_s(); }

void cli_verbose(const cli_opts *o, const char *fmt, ...) {
  if (!o->verbose) return;
  double t = now_s();
  tfg_strbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  fflush(stdout); /* in order with what the command prints */
  fprintf(stderr, "tfg: %s (%.1f ms)\n", b.data, (t - verbose_clock) * 1e3);
  tfg_strbuf_free(&b);
  verbose_clock = t;
}

/* The folder of the standard library: TFG_STDLIB; else beside the
 * binary as built (build/tfg -> stdlib/) or installed (bin/tfg ->
 * share/tfg/stdlib); else the source tree it was built from; else the
 * installed default. */
const char *cli_stdlib_dir(char *buf, size_t n) {
  const char *env = getenv("TFG_STDLIB");
  if (env && *env) return env;
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      static const char *const rel[] = {"/../stdlib", "/../share/tfg/stdlib"};
      for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        size_t le = strlen(exe), lr = strlen(rel[i]);
        if (le + lr + 1 > n) continue;
        memcpy(buf, exe, le);
        memcpy(buf + le, rel[i], lr + 1);
        if (access(buf, R_OK) == 0) return buf;
      }
    }
  }
  if (access(TFG_SOURCE_STDLIB, R_OK) == 0) return TFG_SOURCE_STDLIB;
  return TFG_STDLIB_DIR;
}

const char *cli_module_path(void) { return getenv("TFG_PATH"); }

const tfg_feed *cli_feed_target(const tfg_program *p, const char *name) {
  for (int k = 0; k < p->nfeeds; k++)
    if (!strcmp(p->graph->nodes[p->feeds[k].node].name, name)) return &p->feeds[k];
  return NULL;
}

void cli_feed_has_source(const tfg_program *p, const tfg_feed *f, bool where, tfg_strbuf *why) {
  const tfg_node *n = &p->graph->nodes[f->node];
  tfg_strbuf_printf(why, "input %s", n->name);
  if (where && n->loc.src) tfg_strbuf_printf(why, " (%s:%u)", n->loc.src->name, n->loc.line);
  tfg_strbuf_printf(why, " reads its batches from '%s' (its `from`); --feed feeds only an input without one",
                    f->ds_path ? f->ds_path : "a dataset");
}

/* Raises *n to one past the highest gpu:N in strategy argument x (its
 * lists walked); returns whether it did. */
static bool devarg_gpus(const tfg_devarg *x, int *n) {
  bool raised = false;
  if (x->kind == TFG_DEVARG_DEVICE && x->dev.kind == TFG_DEV_GPU && x->dev.index >= *n) {
    *n = (int)x->dev.index + 1;
    raised = true;
  }
  if (x->kind == TFG_DEVARG_DEVICE && x->dev.kind == TFG_DEV_GPU_ANY && *n < 1) { /* gpu:*: one at least */
    *n = 1;
    raised = true;
  }
  for (int32_t q = 0; x->kind == TFG_DEVARG_LIST && q < x->n; q++) raised |= devarg_gpus(&x->items[q], n);
  return raised;
}

/* The number of GPUs a program names: one past the highest gpu:N of its
 * pins and of its strategies' device lists (gpu:* asks for one). */
int cli_gpus_named(const tfg_program *p, tfg_loc *where) {
  int n = 0;
  tfg_loc at = {0};
  for (int32_t i = 0; i < p->graph->nnodes; i++) {
    const tfg_devspec *d = &p->graph->nodes[i].pin;
    if (d->kind == TFG_DEV_GPU && d->index >= n) n = (int)d->index + 1, at = d->loc;
    if (d->kind == TFG_DEV_GPU_ANY && n < 1) n = 1, at = d->loc;
  }
  for (int a = 0; a < p->nactions; a++) {
    const tfg_strategy_config *s = &p->actions[a].config.strategy;
    if (p->actions[a].kind != TFG_ACTION_TRAIN) continue;
    /* its arguments' devices: lists (possibly nested) of them */
    bool raised = false;
    for (int k = 0; k < s->nargs; k++) raised |= devarg_gpus(&s->args[k], &n);
    if (raised) at = s->at;
    if (tfg_strategy_lookup(s)->spans_gpus(s) && n < 1) n = 1, at = s->at; /* mirrored(): one at least */
    int asked = tfg_strategy_lookup(s)->gpus(s); /* parallel(data = 2, pipeline = 2): 4 */
    if (asked > n) n = asked, at = s->at;
  }
  if (where) *where = at;
  return n;
}

/* The devices of a run: --devices, else the default for the program. */
tfg_devices *cli_devices_for(const cli_opts *o, const tfg_program *p, tfg_diag *d) {
  tfg_devices *ds = NULL;
  const char *notice = NULL;
  tfg_loc where = {0};
  int gpus = p && !o->devices ? cli_gpus_named(p, &where) : 0;
  tfg_status st = o->devices ? tfg_devices_parse(d, o->devices, &ds)
                             : tfg_devices_default(d, gpus, where.src ? &where : NULL, &ds, &notice);
  if (st != TFG_OK) return NULL;
  if (notice) fprintf(stderr, "%s\n", notice);
  if (o->memory_limit) tfg_devices_limit(ds, o->memory_limit);
  return ds;
}

/* --verbose after placement: how many ops each device got. */
static void verbose_placement(const cli_opts *o, const tfg_placement *pl, const tfg_devices *ds) {
  tfg_strbuf b = {0};
  int total = 0;
  for (int i = 0; i < tfg_devices_count(ds); i++) {
    int n = tfg_placement_totals(pl, i).ops;
    total += n;
    tfg_strbuf_printf(&b, "%s%s %d", i ? ", " : "", tfg_devices_at(ds, i)->name, n);
  }
  cli_verbose(o, "placed %d ops: %s", total, b.data);
  tfg_strbuf_free(&b);
}

/* --verbose after planning: per device its steps and planned peak, then
 * the copies, events, all-reduce buckets and fused chains. */
static void verbose_plan(const cli_opts *o, const tfg_plan *plan) {
  tfg_strbuf b = {0};
  int copies = 0;
  for (int i = 0; i < plan->ndev; i++) {
    const tfg_plan_device *pd = &plan->dev[i];
    if (pd->nsteps == 0) continue;
    for (int k = 0; k < pd->nsteps; k++) copies += pd->steps[k].kind == TFG_PLAN_COPY;
    tfg_strbuf_printf(&b, "%s %d steps, peak ", tfg_devices_at(plan->ds, i)->name, pd->nsteps);
    tfg_size_format(&b, pd->peak);
    tfg_strbuf_puts(&b, "; ");
  }
  cli_verbose(o, "planned: %s%d cop%s, %d event%s, %d all-reduce bucket%s, %d fused chain%s", b.data ? b.data : "",
              copies, copies == 1 ? "y" : "ies", plan->nevents, plan->nevents == 1 ? "" : "s", plan->nbuckets,
              plan->nbuckets == 1 ? "" : "s", plan->nchains, plan->nchains == 1 ? "" : "s");
  tfg_strbuf_free(&b);
}

/* --verbose after the training steps: per train action its strategy,
 * the params it trains, and the graph's size with every step added. */
static void verbose_steps(const cli_opts *o, const tfg_program *p, const tfg_train_step *steps) {
  for (int i = 0; i < p->nactions; i++) {
    const tfg_action *a = &p->actions[i];
    if (a->kind != TFG_ACTION_TRAIN) continue;
    const tfg_train_step *st = &steps[i];
    char how[64];
    tfg_strategy_lookup(&a->config.strategy)->describe(st, how, sizeof how);
    cli_verbose(o, "built the training step of the train at line %u: %s, %d params trained, %s", a->loc.line, how,
                st->nparams, st->optimizer ? st->optimizer : "no optimizer");
  }
  cli_verbose(o, "the graph with its training steps: %d nodes", (int)p->graph->nnodes);
}

/* --verbose once the devices are known: each with its hardware and
 * memory. */
static void verbose_devices(const cli_opts *o, const tfg_devices *ds) {
  tfg_strbuf b = {0};
  for (int i = 0; i < tfg_devices_count(ds); i++) {
    const tfg_device *dv = tfg_devices_at(ds, i);
    tfg_strbuf_printf(&b, "%s%s (%s, ", i ? ", " : "", dv->name, dv->hardware);
    tfg_size_format(&b, dv->memory);
    tfg_strbuf_putc(&b, ')');
  }
  cli_verbose(o, "devices: %s", b.data);
  tfg_strbuf_free(&b);
}

/* What the driver's hooks need: the options, the program, where the
 * devices come from, and whether --verbose reports the steps and
 * devices (a file's run does; the REPL does not). */
typedef struct compile_ctx {
  const cli_opts *o;
  const tfg_program *p;
  tfg_status (*devices)(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out); /* NULL: cli_devices_for */
  void *devices_ctx;
  bool verbose_front;
  bool no_passes; /* tfg_compile_opts.no_passes */
} compile_ctx;

/* The driver's stage 1: the caller's devices, else cli_devices_for (a
 * bad --devices is bad usage; the default fails only for a program
 * naming more GPUs than can be emulated, an error in the program). */
static tfg_status compile_devices(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out) {
  const compile_ctx *k = ctx;
  if (k->devices) return k->devices(k->devices_ctx, p, d, out);
  *out = cli_devices_for(k->o, p, d);
  return *out ? TFG_OK : k->o->devices ? TFG_ERR_USAGE : TFG_ERR_PLACE;
}

/* --verbose after each stage, with its time. */
static void compile_done(void *ctx, tfg_compile_stage stage, const tfg_compiled *c) {
  const compile_ctx *k = ctx;
  const cli_opts *o = k->o;
  switch (stage) {
  case TFG_COMPILE_PASSES:
    if (o->verbose && k->verbose_front) verbose_steps(o, k->p, c->steps);
    break;
  case TFG_COMPILE_DEVICES:
    if (o->verbose && k->verbose_front) verbose_devices(o, c->ds);
    break;
  case TFG_COMPILE_PLACE:
    if (o->verbose) verbose_placement(o, c->pl, c->ds);
    break;
  case TFG_COMPILE_PLAN:
    if (o->verbose) verbose_plan(o, c->plan);
    break;
  case TFG_COMPILE_VALIDATE: cli_verbose(o, "validated the plan"); break;
  }
}

/* Compiles p with the driver under o->sw: placement counting
 * activations, fusion unless sw.no_fuse or --check-numerics (which names the op that made a
 * NaN: each op must run alone), the plan validated. Returns 0 or the
 * exit code: 1 when the program cannot be compiled (memory that cannot
 * fit is an error found before anything runs), EXIT_RUNTIME for an
 * invalid plan (a bug in the planner, never something to run). */
static int compile(compile_ctx *k, tfg_program *p, const tfg_node_id *extra, int nextra, tfg_diag *d,
                   tfg_compiled *c) {
  const cli_opts *o = k->o;
  tfg_job job = {.rank = tfg_mpi_rank(), .size = tfg_mpi_size()}; /* mirrored's replicas span the job */
  tfg_compile_opts co = {.devices = compile_devices,
                         .job = &job,
                         .no_passes = k->no_passes,
                         .sw = o->sw,
                         .fit = true,
                         .bucket_bytes = o->bucket_bytes,
                         .fuse = !o->check_numerics && !o->sw.no_fuse,
                         .extra = extra,
                         .nextra = nextra,
                         .validate = true,
                         .done = compile_done,
                         .ctx = k};
  if (tfg_compile(p, &co, d, c) == TFG_OK) return 0;
  switch (c->failed) {
  case TFG_COMPILE_DEVICES: return o->devices ? EXIT_USAGE : EXIT_PROGRAM;
  case TFG_COMPILE_VALIDATE:
    fprintf(stderr, "tfg: internal error: the plan is invalid: %s\n", c->why.data);
    return EXIT_RUNTIME;
  default: return EXIT_PROGRAM;
  }
}

int cli_compile(const cli_opts *o, tfg_program *p, tfg_diag *d, cli_compiled *c) {
  compile_ctx k = {.o = o, .p = p, .verbose_front = true};
  return compile(&k, p, NULL, 0, d, c);
}

int cli_compile_for(const cli_opts *o, tfg_program *p,
                    tfg_status (*devices)(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out), void *ctx,
                    const tfg_node_id *extra, int nextra, tfg_diag *d, tfg_compiled *c) {
  compile_ctx k = {.o = o, .p = p, .devices = devices, .devices_ctx = ctx, .no_passes = true};
  return compile(&k, p, extra, nextra, d, c);
}

void cli_compiled_free(cli_compiled *c) {
  tfg_devices_free(c->ds); /* cli_compile's own */
  tfg_compiled_free(c);
}

/* Prints one print action: a header per tensor, then its values. */
tfg_status cli_print_action(tfg_session *s, const tfg_program *p, const tfg_plan *plan, const tfg_action *a,
                            bool all) {
  size_t cap = (size_t)a->nitems + 1;
  tfg_node_id *fetch = malloc(sizeof *fetch * cap);
  int *map = malloc(sizeof *map * cap), nf = 0;
  tfg_tensor *out = malloc(sizeof *out * cap);
  if (!fetch || !map || !out) abort();
  for (int i = 0; i < a->nitems; i++) map[i] = a->items[i].is_tensor ? (fetch[nf] = a->items[i].node, nf++) : -1;
  tfg_status st = tfg_session_run(s, fetch, nf, out);
  if (st != TFG_OK) {
    free(fetch);
    free(map);
    free(out);
    return st;
  }
  tfg_strbuf b = {0};
  for (int i = 0; i < a->nitems; i++) {
    const tfg_print_item *it = &a->items[i];
    tfg_strbuf_printf(&b, "%s: ", it->text);
    if (!it->is_tensor) {
      tfg_strbuf_printf(&b, "%s\n", it->value);
      continue;
    }
    const tfg_node *n = &p->graph->nodes[it->node];
    tfg_shape_format(&b, n->dtype, &n->shape);
    tfg_strbuf_printf(&b, " @%s\n", tfg_devices_at(plan->ds, tfg_placement_device(plan->pl, it->node))->name);
    tfg_format_tensor(&b, &out[map[i]], all);
    tfg_strbuf_putc(&b, '\n');
  }
  fwrite(b.data, 1, b.len, stdout);
  fflush(stdout);
  tfg_strbuf_free(&b);
  free(fetch);
  free(map);
  free(out);
  return TFG_OK;
}

/* ---- Ctrl-C ------------------------------------------------------------------ */

static struct sigaction prev_sigint;

/* Async-signal-safe: atomics (tfg_train_interrupt), sigaction, write,
 * raise. Ctrl-C reaches the whole foreground job: a `| tee` reading our
 * stderr is gone too, and the writes still to come (this message, the
 * log, the diagnostic) would raise SIGPIPE and end tfg before its
 * checkpoint; they fail quietly instead. */
static void on_interrupt(int sig) {
  int saved = errno;
  if (tfg_train_interrupt()) {
    struct sigaction ign = {0};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, NULL);
    static const char msg[] = "\ntfg: interrupt: stopping after this step (Ctrl-C again to quit)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    errno = saved;
    return;
  }
  sigaction(sig, &prev_sigint, NULL);
  raise(sig);
  errno = saved;
}

void cli_catch_interrupts(bool on) {
  if (on) {
    sigaction(SIGINT, NULL, &prev_sigint);
    if (prev_sigint.sa_handler == SIG_IGN) return; /* started ignoring it (nohup, a script's `&`): keep that */
    struct sigaction sa = {0};
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &prev_sigint);
  } else {
    sigaction(SIGINT, &prev_sigint, NULL);
  }
}

/* A step of kind TFG_STEP_GROUP trains with the group's other jobs. */
static bool in_group(const cli_actions *r, int i) {
  return r->p->actions[i].kind == TFG_ACTION_TRAIN && r->steps[i].kind == TFG_STEP_GROUP;
}

tfg_status cli_run_actions(const cli_actions *r, int from, int to, tfg_diag *d) {
  const tfg_program *p = r->p;
  size_t cap = (size_t)(to > from ? to - from : 0) + 1;
  const tfg_action **group = calloc(cap, sizeof *group);
  tfg_train_step *gsteps = calloc(cap, sizeof *gsteps);
  if (!group || !gsteps) abort();
  tfg_status st = TFG_OK;
  for (int i = from; i < to && st == TFG_OK;) {
    const tfg_action *a = &p->actions[i];
    int first = i;
    if (a->kind == TFG_ACTION_PRINT) {
      st = r->print ? cli_print_action(r->s, p, r->plan, a, r->print_all) : TFG_OK;
      i++;
    } else {
      switch (r->steps[i].kind) { /* how the step's strategy runs (compiler/strategy/strategy.h) */
      case TFG_STEP_SERVER:
        st = tfg_train_ps(p, a, &r->steps[i], r->plan, r->s, r->so, r->to, d);
        i++;
        break;
      case TFG_STEP_GROUP: { /* consecutive train statements form one group */
        int n = 0;
        for (; i < to && in_group(r, i); i++) {
          group[n] = &p->actions[i];
          gsteps[n++] = r->steps[i];
        }
        st = tfg_train_group(r->s, p, group, gsteps, n, r->to, d);
        break;
      }
      }
    }
    if (r->done) r->done(r->ctx, r, first, i, st);
  }
  free(gsteps);
  free(group);
  return st;
}

char **cli_trace_labels(const tfg_program *p, const cli_compiled *c) {
  char **labels = NULL;
  for (int i = 0; i < c->nactions; i++) {
    const tfg_train_step *st = &c->steps[i];
    for (tfg_node_id id = st->pipe_first; st->pipe_unit && id < st->pipe_post; id++) {
      int32_t u = st->pipe_unit[id - st->pipe_first];
      if (u < 0) continue;
      if (!labels) {
        labels = calloc((size_t)p->graph->nnodes + 1, sizeof *labels);
        TFG_ASSERT(labels != NULL);
      }
      char buf[48];
      tfg_pipe_label(&st->pipe, u, buf, sizeof buf);
      labels[id] = strdup(buf);
      TFG_ASSERT(labels[id] != NULL);
    }
  }
  return labels;
}

void cli_trace_labels_free(char **labels, const tfg_program *p) {
  for (int32_t i = 0; labels && i < p->graph->nnodes; i++) free(labels[i]);
  free(labels);
}
