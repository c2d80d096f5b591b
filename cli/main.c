/* cli/main.c: the `tfg` command line (CLI.md).
 *
 * One table row per subcommand: its name, one-line summary, full help and
 * handler. Handlers return a process exit code: 0 success, 1 the program
 * has an error (diagnostics printed), 2 bad usage, 3 runtime failure.
 * The steps from a built program to its results are the pipeline's
 * (cli/pipeline.h), which the REPL uses too; `tfg repl` starts the REPL
 * through its one entry point (cli/cli.h). */
#define _GNU_SOURCE /* fopencookie: --log-all-ranks */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "cli/job.h"
#include "cli/pipeline.h"
#include "cli/predict.h"
#include "cli/plot.h"
#include "cli/switches.h"
#include "compiler/place.h"
#include "compiler/plan.h"
#include "compiler/strategy/strategy.h"
#include "ir/ops.h"
#include "kernels/cpu/config.h"
#include "lang/ast.h"
#include "lang/interp.h"
#include "lang/parse.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/format.h"
#include "runtime/mpi.h"
#include "runtime/registry.h"
#include "runtime/session.h"
#include "runtime/trace.h"
#include "runtime/train.h"

/* One row of the subcommand table: handlers return a process exit code. */
typedef struct cli_cmd {
  const char *name;
  const char *summary;
  const char *help; /* printed after "usage: " */
  int (*run)(const struct cli_cmd *cmd, int argc, char **argv);
} cli_cmd;

static int usage_error(const cli_cmd *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "tfg%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'tfg %s%s--help' for more information.\n", cmd ? cmd->name : "",
          cmd ? " " : "");
  return EXIT_USAGE;
}

/* Under mpirun, every rank refused the job at its start (the collective
 * schedule check, which all take part in): no rank waits for another. */
static bool job_refused;

/* The process's A/B switches, read from the environment once at the
 * start (cli/switches.h); every command's options carry a copy. */
static tfg_switches switches;

/* Which options a command takes (the REPL takes run's but --trace). */
enum { ALLOW_AST = 1, ALLOW_RUN = 2, ALLOW_PLACE = 4, ALLOW_EXPLAIN = 8, ALLOW_TRACE = 16, ALLOW_VERBOSE = 32,
       ALLOW_JSON = 64, ALLOW_PREDICT = 128 };

enum { OPT_COLOR = 256, OPT_AST, OPT_SET, OPT_FEED, OPT_SEED, OPT_PRINT_ALL, OPT_THREADS, OPT_CHECK_NUMERICS,
       OPT_QUIET, OPT_DEVICES, OPT_MEMORY_LIMIT, OPT_EXPLAIN, OPT_JSON, OPT_DOT, OPT_TRACE, OPT_BUCKET_SIZE,
       OPT_MEMORY, OPT_TF32, OPT_VERBOSE, OPT_PROFILE, OPT_LOG_ALL_RANKS, OPT_PREDICT };

/* What parse_opts knows of each option: the ALLOW_* bit a command needs
 * to take it (0: every command takes it; another command's option is an
 * unknown option), and for an option that takes no value and turns a
 * flag of cli_opts on, that flag's offset (0: none; the first field,
 * color, is not a flag). */
static const struct {
  int allow;
  size_t flag;
} opt_info[] = {
    [OPT_AST - OPT_COLOR] = {ALLOW_AST, offsetof(cli_opts, ast)},
    [OPT_FEED - OPT_COLOR] = {ALLOW_RUN, 0},
    [OPT_SEED - OPT_COLOR] = {ALLOW_RUN, 0},
    [OPT_PRINT_ALL - OPT_COLOR] = {ALLOW_RUN, offsetof(cli_opts, print_all)},
    [OPT_THREADS - OPT_COLOR] = {ALLOW_RUN | ALLOW_PREDICT, 0},
    [OPT_CHECK_NUMERICS - OPT_COLOR] = {ALLOW_RUN, offsetof(cli_opts, check_numerics)},
    [OPT_QUIET - OPT_COLOR] = {ALLOW_RUN, offsetof(cli_opts, quiet)},
    [OPT_DEVICES - OPT_COLOR] = {ALLOW_PLACE, 0},
    [OPT_MEMORY_LIMIT - OPT_COLOR] = {ALLOW_PLACE, 0},
    [OPT_EXPLAIN - OPT_COLOR] = {ALLOW_EXPLAIN, offsetof(cli_opts, explain)},
    [OPT_JSON - OPT_COLOR] = {ALLOW_JSON, offsetof(cli_opts, json)},
    [OPT_DOT - OPT_COLOR] = {ALLOW_EXPLAIN, offsetof(cli_opts, dot)},
    [OPT_TRACE - OPT_COLOR] = {ALLOW_TRACE, 0},
    [OPT_BUCKET_SIZE - OPT_COLOR] = {ALLOW_PLACE, 0},
    [OPT_MEMORY - OPT_COLOR] = {ALLOW_PLACE, 0},
    [OPT_TF32 - OPT_COLOR] = {ALLOW_RUN, offsetof(cli_opts, tf32)},
    [OPT_VERBOSE - OPT_COLOR] = {ALLOW_VERBOSE, offsetof(cli_opts, verbose)},
    [OPT_PROFILE - OPT_COLOR] = {ALLOW_TRACE, offsetof(cli_opts, profile)},
    [OPT_LOG_ALL_RANKS - OPT_COLOR] = {ALLOW_TRACE, offsetof(cli_opts, log_all_ranks)},
    [OPT_PREDICT - OPT_COLOR] = {ALLOW_PREDICT, offsetof(cli_opts, predict)},
};

/* Splits "NAME=VALUE"; false when there is no '=' or no name. */
static bool split_assign(char *arg, const char **name, const char **value) {
  char *eq = strchr(arg, '=');
  if (!eq || eq == arg) return false;
  *eq = '\0';
  *name = arg;
  *value = eq + 1;
  return true;
}

/* Parses argv for cmd (allow: ALLOW_* bits) and exactly one FILE (at
 * most one for devices and repl). Returns -1 to go on, else the exit code. */
static int parse_opts(const cli_cmd *cmd, int argc, char **argv, int allow, cli_opts *o) {
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},
      {"color", required_argument, NULL, OPT_COLOR},
      {"ast", no_argument, NULL, OPT_AST},
      {"set", required_argument, NULL, OPT_SET},
      {"feed", required_argument, NULL, OPT_FEED},
      {"seed", required_argument, NULL, OPT_SEED},
      {"print-all", no_argument, NULL, OPT_PRINT_ALL},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"check-numerics", no_argument, NULL, OPT_CHECK_NUMERICS},
      {"quiet", no_argument, NULL, OPT_QUIET},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"memory-limit", required_argument, NULL, OPT_MEMORY_LIMIT},
      {"explain", no_argument, NULL, OPT_EXPLAIN},
      {"json", no_argument, NULL, OPT_JSON},
      {"dot", no_argument, NULL, OPT_DOT},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"profile", no_argument, NULL, OPT_PROFILE},
      {"log-all-ranks", no_argument, NULL, OPT_LOG_ALL_RANKS},
      {"bucket-size", required_argument, NULL, OPT_BUCKET_SIZE},
      {"memory", required_argument, NULL, OPT_MEMORY},
      {"tf32", no_argument, NULL, OPT_TF32},
      {"verbose", no_argument, NULL, OPT_VERBOSE},
      {"predict", no_argument, NULL, OPT_PREDICT},
      {NULL, 0, NULL, 0},
  };
  memset(o, 0, sizeof *o);
  o->sw = switches;
  optind = 1;
  opterr = 0;
  int c, li = 0;
  /* Options may come before or after FILE (GNU permutation); a leading
   * ':' reports a missing value as ':' rather than '?'. */
  while ((c = getopt_long(argc, argv, ":h", longopts, &li)) != -1) {
    const char *name, *value;
    char *end;
    int need = c >= OPT_COLOR ? opt_info[c - OPT_COLOR].allow : 0;
    if (need && !(allow & need)) return usage_error(cmd, "unknown option '--%s'", longopts[li].name);
    if (c >= OPT_COLOR && opt_info[c - OPT_COLOR].flag) {
      *(bool *)((char *)o + opt_info[c - OPT_COLOR].flag) = true;
      continue;
    }
    switch (c) {
    case 'h':
      printf("usage: %s", cmd->help);
      return 0;
    case OPT_COLOR:
      if (strcmp(optarg, "auto") && strcmp(optarg, "always") && strcmp(optarg, "never"))
        return usage_error(cmd, "--color takes auto, always or never, not '%s'", optarg);
      o->color = optarg;
      break;
    case OPT_SET:
      if (!split_assign(optarg, &name, &value)) return usage_error(cmd, "--set takes NAME=VALUE, not '%s'", optarg);
      if (o->nsets == 64) return usage_error(cmd, "%s", "too many --set options");
      o->sets[o->nsets++] = (tfg_set){name, value};
      break;
    case OPT_FEED:
      if (!split_assign(optarg, &name, &value)) return usage_error(cmd, "--feed takes NAME=FILE.npy, not '%s'", optarg);
      if (o->nfeeds == 64) return usage_error(cmd, "%s", "too many --feed options");
      for (int k = 0; k < o->nfeeds; k++)
        if (!strcmp(o->feeds[k].name, name)) return usage_error(cmd, "--feed %s is given twice", name);
      o->feeds[o->nfeeds++] = (tfg_feed_file){name, value};
      break;
    case OPT_SEED:
      errno = 0;
      o->seed = strtoull(optarg, &end, 10);
      if (errno || *end || !*optarg || optarg[0] == '-') return usage_error(cmd, "--seed takes a non-negative integer, not '%s'", optarg);
      break;
    case OPT_THREADS:
      o->threads = (int)strtol(optarg, &end, 10);
      if (*end || o->threads < 1 || o->threads > 256) return usage_error(cmd, "--threads takes 1 to 256, not '%s'", optarg);
      break;
    case OPT_DEVICES:
      o->devices = optarg;
      break;
    case OPT_MEMORY_LIMIT:
    case OPT_BUCKET_SIZE: {
      int64_t *size = c == OPT_MEMORY_LIMIT ? &o->memory_limit : &o->bucket_bytes;
      if (!tfg_size_parse(optarg, size) || *size <= 0)
        return usage_error(cmd, c == OPT_MEMORY_LIMIT ? "--memory-limit takes a size like 512M or 30G, not '%s'"
                                                      : "--bucket-size takes a size like 25M, not '%s'",
                           optarg);
      break;
    }
    case OPT_TRACE:
      o->trace = optarg;
      break;
    case OPT_MEMORY:
      if (strcmp(optarg, "growth") && strcmp(optarg, "preallocate"))
        return usage_error(cmd, "--memory takes growth or preallocate, not '%s'", optarg);
      o->preallocate = strcmp(optarg, "preallocate") == 0;
      break;
    case ':':
      return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
    default: {
      char shortopt[3] = {'-', (char)optopt, 0};
      return usage_error(cmd, "unknown option '%s'", optopt ? shortopt : argv[optind - 1]);
    }
    }
  }
  if (o->quiet && o->verbose) return usage_error(cmd, "%s", "--quiet and --verbose ask for opposite things: give one");
  if (optind >= argc && (!strcmp(cmd->name, "devices") || !strcmp(cmd->name, "repl"))) return -1;
  if (optind >= argc) return usage_error(cmd, "%s", "missing FILE");
  if (argc - optind > 1) return usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
  o->file = argv[optind];
  return -1;
}

/* Runs the program's actions in order. Training steps (gradients,
 * updates, optimizer state, a strategy's replicas) are added to the graph
 * first, and the whole graph is placed and planned once; one session
 * runs it. Consecutive train actions run as one group (concurrently); a
 * parameter_server job runs on sessions of its own and hands its params
 * back. */
/* --log-all-ranks: a stream onto stderr that starts each line with
 * "[rank K] " (a cookie stream, so that every log line of the train
 * loop gets it, however it is printed). */
typedef struct rank_log {
  bool at_start; /* the next byte starts a line */
  char tag[32];
} rank_log;

/* The stream is line-buffered, so a call brings whole lines: each goes
 * out in one write with its tag, so that the ranks' lines, which mpirun
 * merges, never interleave within a line. */
static ssize_t rank_log_write(void *cookie, const char *buf, size_t n) {
  rank_log *r = cookie;
  tfg_strbuf out = {0};
  for (size_t i = 0; i < n; i++) {
    if (r->at_start) tfg_strbuf_puts(&out, r->tag);
    tfg_strbuf_putn(&out, &buf[i], 1);
    r->at_start = buf[i] == '\n';
  }
  if (out.len) (void)!write(STDERR_FILENO, out.data, out.len);
  tfg_strbuf_free(&out);
  return (ssize_t)n;
}

static int rank_log_close(void *cookie) {
  free(cookie);
  return 0;
}

/* The stream, line-buffered; NULL when it cannot be made (then the rank
 * logs as without the option). */
static FILE *rank_log_open(void) {
  rank_log *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->at_start = true;
  snprintf(r->tag, sizeof r->tag, "[rank %d] ", tfg_mpi_rank());
  FILE *f = fopencookie(r, "w", (cookie_io_functions_t){.write = rank_log_write, .close = rank_log_close});
  if (!f) {
    free(r);
    return NULL;
  }
  setvbuf(f, NULL, _IOLBF, 0);
  return f;
}

/* Where this rank writes --trace FILE: FILE on rank 0 (and outside a
 * job); under mpirun rank K > 0 writes FILE with ".rankK" before its
 * extension (t.json: t.rank1.json), so that every rank's trace is kept.
 * Into buf (cap bytes). */
static const char *trace_path(const char *file, char *buf, size_t cap) {
  int rank = tfg_mpi_rank();
  if (rank == 0) return file;
  const char *dot = strrchr(file, '.'), *slash = strrchr(file, '/');
  if (!dot || (slash && dot < slash)) snprintf(buf, cap, "%s.rank%d", file, rank);
  else snprintf(buf, cap, "%.*s.rank%d%s", (int)(dot - file), file, rank, dot);
  return buf;
}

/* What `tfg run` does after each action (cli_run_actions): its
 * diagnostics now, and --verbose's line for it. */
typedef struct ran_ctx {
  const cli_opts *o;
  tfg_diag *d;
  bool color;
} ran_ctx;

static void ran(void *ctx, const cli_actions *r, int from, int to, tfg_status st) {
  (void)to;
  const ran_ctx *k = ctx;
  const tfg_action *a = &r->p->actions[from];
  tfg_diag_render(k->d, stderr, k->color);
  if (st == TFG_OK)
    cli_verbose(k->o, "ran the %s at line %u", a->kind == TFG_ACTION_PRINT ? "print" : "train", a->loc.line);
}

static int run_actions(const cli_opts *o, tfg_program *p, tfg_diag *d, bool color) {
  /* --feed names an input without a source, or it is bad usage. */
  for (int i = 0; i < o->nfeeds; i++) {
    const tfg_feed *f = cli_feed_target(p, o->feeds[i].name);
    if (!f) {
      fprintf(stderr, "tfg run: --feed %s: the program has no input named '%s'\n", o->feeds[i].name, o->feeds[i].name);
      return EXIT_USAGE;
    }
    if (f->ds) {
      tfg_strbuf why = {0};
      cli_feed_has_source(p, f, true, &why);
      fprintf(stderr, "tfg run: --feed %s: %s\n", o->feeds[i].name, why.data);
      tfg_strbuf_free(&why);
      return EXIT_USAGE;
    }
  }
  /* A --trace file that cannot be written is found now, not after the
   * run: the same atomic write the end of the run makes (an empty trace
   * in its place until then). */
  char trace_buf[4096];
  const char *trace_file = o->trace ? trace_path(o->trace, trace_buf, sizeof trace_buf) : NULL;
  if (o->trace) {
    tfg_trace *probe = tfg_trace_new();
    tfg_strbuf err = {0};
    tfg_status ts = tfg_trace_write(probe, trace_file, &err);
    tfg_trace_free(probe);
    if (ts != TFG_OK) {
      fprintf(stderr, "tfg run: --trace %s: %s\n", trace_file, err.data ? err.data : "cannot write");
      tfg_strbuf_free(&err);
      return EXIT_USAGE;
    }
    tfg_strbuf_free(&err);
  }
  /* the program as written, for same_job: the compile rewrites nodes */
  tfg_strbuf written = {0};
  int32_t nwritten = p->graph->nnodes;
  if (tfg_mpi_size() > 1) cli_job_program(&written, p);
  cli_compiled c;
  int rc = cli_compile(o, p, d, &c);
  if (rc == 0) {
    rc = cli_same_job(o, p, &c, nwritten, &written);
    if (rc) job_refused = true; /* every rank knows: each ends alone */
  }
  tfg_strbuf_free(&written);
  const tfg_train_step *steps = c.steps;
  const tfg_plan *plan = c.plan;
  tfg_trace *trace = rc == 0 && (o->trace || o->profile) ? tfg_trace_new() : NULL;
  /* a pipeline's launches named by their stage and micro-batch ("fwd s1 m3 matmul") */
  char **labels = trace ? cli_trace_labels(p, &c) : NULL;
  if (labels) tfg_trace_label_nodes(trace, p->graph->nodes, p->graph->nnodes, (const char *const *)labels);
  tfg_session_opts so = {.threads = o->threads, .feeds = o->feeds, .nfeeds = o->nfeeds, .seed = o->seed,
                         .check_numerics = o->check_numerics, .plan = plan, .trace = trace,
                         .preallocate = o->preallocate, .tf32 = o->tf32, .sw = o->sw,
                         .owner = c.owner, .rank = tfg_mpi_rank()};
  tfg_session *s = rc == 0 ? tfg_session_new(p, d, &so) : NULL;
  if (!s && rc == 0) rc = EXIT_RUNTIME;
  if (s) cli_verbose(o, "started the devices: memory, streams, params initialized");
  if (s && p->nloads) { /* before the first action, whatever the loads' places in the program */
    tfg_status ls = tfg_session_load_params(s);
    if (ls != TFG_OK) rc = tfg_status_exit_code(ls) == 1 ? EXIT_PROGRAM : EXIT_RUNTIME;
    else cli_verbose(o, "set the params from %d load%s", p->nloads, p->nloads == 1 ? "" : "s");
  }
  /* under mpirun, rank 0 logs for the job (runtime/mpi.h), or every rank
   * with its tag on each line */
  FILE *ranks_log = o->log_all_ranks && tfg_mpi_size() > 1 ? rank_log_open() : NULL;
  tfg_train_opts to = {.log = ranks_log ? ranks_log : stderr, .tty = !ranks_log && isatty(STDERR_FILENO),
                       .quiet = o->quiet || (tfg_mpi_rank() > 0 && !ranks_log), .diag = stderr, .color = color};
  cli_catch_interrupts(true);
  ran_ctx rc_ctx = {.o = o, .d = d, .color = color};
  cli_actions ra = {.s = s, .p = p, .steps = steps, .plan = plan, .so = &so, .to = &to,
                    .print = tfg_mpi_rank() == 0, /* under mpirun, rank 0 prints for the job */
                    .print_all = o->print_all, .done = ran, .ctx = &rc_ctx};
  if (s && rc == 0) {
    tfg_status st = cli_run_actions(&ra, 0, p->nactions, d);
    if (st != TFG_OK) {
      int ec = tfg_status_exit_code(st);
      rc = ec == 1 ? EXIT_PROGRAM : ec == EXIT_INTERRUPTED ? EXIT_INTERRUPTED : EXIT_RUNTIME;
    }
  }
  cli_catch_interrupts(false);
  if (ranks_log) fclose(ranks_log);
  tfg_session_free(s);
  tfg_trace_unlabel_nodes(trace, p->graph->nodes);
  cli_trace_labels_free(labels, p);
  if (trace && o->profile) { /* the same events as --trace, by op (stderr, beside the progress) */
    tfg_strbuf tab = {0};
    tfg_trace_profile(trace, &tab);
    fputs(tab.data ? tab.data : "", stderr);
    tfg_strbuf_free(&tab);
  }
  if (trace && o->trace) {
    tfg_strbuf err = {0};
    if (tfg_trace_write(trace, trace_file, &err) != TFG_OK) {
      fprintf(stderr, "tfg run: --trace %s: %s\n", trace_file, err.data ? err.data : "cannot write");
      if (rc == 0) rc = EXIT_RUNTIME;
    }
    tfg_strbuf_free(&err);
  }
  tfg_trace_free(trace);
  cli_compiled_free(&c);
  tfg_diag_render(d, stderr, color);
  return rc;
}

/* --verbose once the program is built: its graph and actions. */
static void verbose_program(const cli_opts *o, const tfg_program *p) {
  int64_t bytes = 0;
  for (int i = 0; i < p->nparams; i++) {
    const tfg_node *n = &p->graph->nodes[p->params[i]];
    bytes += tfg_shape_numel(&n->shape) * (int64_t)tfg_dtype_size(n->dtype);
  }
  int trains = 0;
  for (int i = 0; i < p->nactions; i++) trains += p->actions[i].kind == TFG_ACTION_TRAIN;
  tfg_strbuf b = {0};
  tfg_size_format(&b, bytes);
  int prints = p->nactions - trains;
  cli_verbose(o, "built the graph: %d nodes, %d param%s (%s), %d input%s, %d print%s, %d train%s", (int)p->graph->nnodes,
              p->nparams, p->nparams == 1 ? "" : "s", b.data, p->nfeeds, p->nfeeds == 1 ? "" : "s", prints,
              prints == 1 ? "" : "s", trains, trains == 1 ? "" : "s");
  tfg_strbuf_free(&b);
}

/* `tfg place` and `tfg plan`: the training steps are built first, so
 * updates and state are placed with their params. */
/* One line of a rank's devices for the job's header: "gpu:0 host device
 * 0, gpu:1 host device 1". */
static void devices_line(const tfg_devices *ds, tfg_strbuf *out) {
  for (int k = 0; ds && k < tfg_devices_gpus(ds); k++)
    tfg_strbuf_printf(out, "%s%s %s", k ? ", " : "  ", tfg_devices_gpu(ds, k)->name, tfg_devices_gpu(ds, k)->hardware);
  tfg_strbuf_puts(out, ds && tfg_devices_gpus(ds) ? "\n" : "  cpu:0 alone\n");
}

/* Under mpirun, `tfg place` and `tfg plan` show the whole job: rank 0
 * prints, first (in text) the job and every rank's devices, gathered
 * from all (every rank calls this, whether its compile succeeded, so no
 * rank waits for one that will not come); the other ranks print nothing.
 * Returns whether this rank prints. */
static bool job_header(const cli_opts *o, const tfg_compiled *c, bool compiled, tfg_strbuf *out) {
  if (tfg_mpi_size() < 2) return true;
  tfg_strbuf mine = {0}, all = {0};
  if (compiled) devices_line(c->ds, &mine);
  else tfg_strbuf_puts(&mine, "  (its program did not compile)\n");
  tfg_mpi_gather(mine.data, &all);
  if (tfg_mpi_rank() == 0 && !o->json && !o->dot)
    tfg_strbuf_printf(out,
                      "job: %d ranks (mpirun), each placing and planning the program on its own devices; rank 0's "
                      "below. mirrored's replicas span the ranks, each all-reduce summing within a rank, then across "
                      "the ranks; a pipeline's stages may too, each rank its own (docs/big-models.md)\n%s\n",
                      tfg_mpi_size(), all.data ? all.data : "");
  tfg_strbuf_free(&mine);
  tfg_strbuf_free(&all);
  return tfg_mpi_rank() == 0;
}

static int place_program(const cli_opts *o, tfg_program *p, tfg_diag *d, bool color, bool want_plan) {
  cli_compiled c;
  int rc = cli_compile(o, p, d, &c);
  tfg_strbuf head = {0};
  bool prints = job_header(o, &c, rc == 0, &head);
  if (head.len) fwrite(head.data, 1, head.len, stdout);
  tfg_strbuf_free(&head);
  if (rc == 0 && prints) {
    tfg_strbuf out = {0};
    if (want_plan && o->json) tfg_plan_json(c.plan, &out);
    else if (want_plan) tfg_plan_print(c.plan, &out);
    else if (o->json) tfg_place_json(c.pl, &out);
    else if (o->dot) tfg_place_dot(c.pl, &out);
    else tfg_place_explain(c.pl, &out);
    for (int i = 0; !want_plan && !o->json && !o->dot && i < c.nactions; i++) /* a pipeline's cuts */
      if (c.steps[i].explain) tfg_strbuf_printf(&out, "\n%s", c.steps[i].explain);
    fwrite(out.data, 1, out.len, stdout);
    tfg_strbuf_free(&out);
  }
  cli_compiled_free(&c);
  tfg_diag_render(d, stderr, color);
  return rc;
}

static int cmd_devices(const cli_cmd *cmd, int argc, char **argv) {
  cli_opts *o = calloc(1, sizeof *o);
  int rc = parse_opts(cmd, argc, argv, ALLOW_PLACE, o);
  if (rc < 0) {
    if (o->file) rc = usage_error(cmd, "unexpected argument '%s'", o->file);
    else {
      tfg_diag *d = tfg_diag_new();
      tfg_devices *ds = cli_devices_for(o, NULL, d);
      rc = ds ? 0 : EXIT_USAGE;
      /* The default list says why it has no GPU (once: a program's run
       * says it in the notice about host devices instead; under mpirun
       * rank 0 says it). */
      if (ds && tfg_devices_no_gpu(ds) && tfg_mpi_rank() == 0)
        fprintf(stderr, "tfg: no GPU found (%s)\n", tfg_devices_no_gpu(ds));
      tfg_strbuf out = {0};
      if (ds) tfg_devices_describe(ds, &out);
      if (tfg_mpi_size() > 1) { /* the whole job: every rank's list, gathered by rank 0 */
        tfg_strbuf all = {0};
        tfg_mpi_gather(ds ? out.data : "(its --devices is bad)\n", &all);
        tfg_strbuf_free(&out);
        if (tfg_mpi_rank() == 0) tfg_strbuf_printf(&out, "job: %d ranks (mpirun), the devices of each\n\n%s", tfg_mpi_size(), all.data);
        tfg_strbuf_free(&all);
      }
      if (out.len) fwrite(out.data, 1, out.len, stdout); /* an empty buffer has no data pointer */
      tfg_strbuf_free(&out);
      tfg_diag_render(d, stderr, cli_color_mode(o->color));
      tfg_devices_free(ds);
      tfg_diag_free(d);
    }
  }
  free(o);
  return rc;
}

/* The commands that read a program: parse it (and print the tree for
 * --ast), build and check it, then do the command's part. */
static int cmd_program(const cli_cmd *cmd, int argc, char **argv) {
  bool is_check = strcmp(cmd->name, "check") == 0, is_run = strcmp(cmd->name, "run") == 0,
       is_place = strcmp(cmd->name, "place") == 0, is_plan = strcmp(cmd->name, "plan") == 0;
  cli_opts *o = calloc(1, sizeof *o);
  int rc = parse_opts(cmd, argc, argv,
                      ALLOW_VERBOSE | (is_check ? ALLOW_AST : 0) | (is_run ? ALLOW_RUN | ALLOW_PLACE | ALLOW_TRACE : 0) |
                          (is_place || is_plan ? ALLOW_PLACE : 0) |
                          (is_place ? ALLOW_EXPLAIN | ALLOW_JSON : 0) | (is_plan ? ALLOW_JSON | ALLOW_PREDICT : 0),
                      o);
  if (rc >= 0) {
    free(o);
    return rc;
  }
  rc = 0;
  cli_verbose_start();
  bool color = cli_color_mode(o->color);
  tfg_diag *d = tfg_diag_new();
  tfg_arena arena;
  tfg_arena_init(&arena);
  tfg_ast *prog = NULL;
  const tfg_source *src = tfg_diag_load(d, o->file);
  tfg_status st = src ? tfg_parse(src, d, &arena, &prog, NULL) : TFG_ERR_USAGE;
  if (st == TFG_OK) cli_verbose(o, "parsed %s: %d statements", o->file, (int)prog->list.n);
  if (st == TFG_OK && o->ast) {
    tfg_strbuf out = {0};
    tfg_ast_dump(prog, &out);
    if (out.len) fwrite(out.data, 1, out.len, stdout);
    tfg_strbuf_free(&out);
  } else if (st == TFG_OK) {
    char buf[4096];
    tfg_interp_opts io = {.sets = o->sets, .nsets = o->nsets, .path = cli_module_path(),
                          .stdlib_dir = cli_stdlib_dir(buf, sizeof buf)};
    tfg_interp *I = tfg_interp_new(d, &io);
    st = tfg_interp_eval(I, src, prog);
    if (st == TFG_OK) st = tfg_interp_finish(I);
    if (st == TFG_OK && o->verbose) verbose_program(o, tfg_interp_program(I));
    if (st == TFG_OK && is_check) {
      /* Checking builds the training steps too: optimizer arguments are
       * checked there, and a failure in autodiff is found now, not mid-run. */
      tfg_program *p = tfg_interp_program(I);
      tfg_job job = {.rank = tfg_mpi_rank(), .size = tfg_mpi_size()};
      for (int i = 0; i < p->nactions && st == TFG_OK; i++) {
        tfg_train_step ts;
        if (p->actions[i].kind != TFG_ACTION_TRAIN) continue;
        st = tfg_compile_train_step(p->graph, &p->actions[i], p, &job, &o->sw, &ts, d);
        tfg_train_step_free(&ts);
      }
    }
    if (st == TFG_OK && is_plan && o->predict) {
      rc = cli_predict(o, tfg_interp_program(I), src, prog, &io, d);
      tfg_diag_render(d, stderr, color);
    } else if (st == TFG_OK && (is_place || is_plan)) {
      rc = place_program(o, tfg_interp_program(I), d, color, is_plan);
    }
    if (st == TFG_OK && is_run) {
      tfg_diag_render(d, stderr, color);
      rc = run_actions(o, tfg_interp_program(I), d, color);
    }
    tfg_interp_free(I);
  }
  tfg_diag_render(d, stderr, color);
  if (st != TFG_OK) {
    if (src) tfg_diag_render_summary(d, stderr, color);
    rc = st == TFG_ERR_USAGE && !src ? EXIT_USAGE : tfg_status_exit_code(st);
  }
  tfg_arena_free(&arena);
  tfg_diag_free(d);
  free(o);
  return rc;
}

/* For commands without options: handles --help and stray arguments.
 * Returns -1 to go on, else the exit code. */
static int no_opts(const cli_cmd *cmd, int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: %s", cmd->help);
    return 0;
  }
  if (argc > 1) return usage_error(cmd, "unexpected argument '%s'", argv[1]);
  return -1;
}

/* `tfg repl [FILE]`: an interactive session (cli/repl.c). */
static int cmd_repl(const cli_cmd *cmd, int argc, char **argv) {
  cli_opts *o = calloc(1, sizeof *o);
  if (!o) abort();
  int rc = parse_opts(cmd, argc, argv, ALLOW_RUN | ALLOW_PLACE | ALLOW_VERBOSE, o);
  if (rc < 0) rc = cli_repl(o);
  free(o);
  return rc;
}

static int cmd_version(const cli_cmd *cmd, int argc, char **argv) {
  int rc = no_opts(cmd, argc, argv);
  if (rc >= 0) return rc;
  printf("tfg %s\n", TFG_VERSION);
#if defined(__clang__)
  printf("compiler: clang %s, C11\n", __clang_version__);
#elif defined(__GNUC__)
  printf("compiler: gcc %s, C11\n", __VERSION__);
#endif
  /* Build options as CLI.md lists them: the GPU part comes from the
   * backend registration (runtime/registry.c), which knows whether this
   * build has CUDA and asks the libraries their versions. */
  tfg_strbuf b = {0};
  tfg_backend_build_info(&b);
  fwrite(b.data, 1, b.len, stdout);
  tfg_strbuf_free(&b);
  tfg_strbuf m = {0};
  tfg_mpi_describe(&m);
  printf("%s\n", m.data);
  tfg_strbuf_free(&m);
  return 0;
}

/* `tfg plot FILE.csv [-o OUT.svg]` (cli/plot.c). */
static int cmd_plot(const struct cli_cmd *cmd, int argc, char **argv);

#define COMMON_HELP                                                                  \
  "  --set NAME=VALUE  override a top-level `let NAME` (repeatable)\n"               \
  "  --verbose         say what each phase made and its time (devices, placement, plan)\n" \
  "  --color=WHEN      colour diagnostics: auto (default), always, never\n"          \
  "  -h, --help        show this help\n"

static const cli_cmd commands[] = {
    {"run", "build, compile and execute the program's actions (print, train)",
     "tfg run [OPTIONS] FILE\n\nBuild FILE and execute its actions (print, train) in order.\n\n"
     "options:\n"
     "  --feed NAME=FILE.npy  feed the input NAME (one without `from`) (repeatable)\n"
     "  --seed N          shift every param initializer's seed\n"
     "  --print-all       print every value, not `...` past 6 per axis\n"
     "  --threads N       CPU threads for kernels (default: one per core)\n"
     "  --check-numerics  stop at the first op that produces a NaN or Inf, naming it\n"
     "  --quiet           no progress lines while training\n"
     "  --devices SPEC    the devices to run on (default: every GPU; else host devices)\n"
     "  --memory MODE     device memory pools: growth (default) or preallocate\n"
     "  --memory-limit SIZE  cap every device's memory\n"
     "  --bucket-size SIZE  close an all-reduce bucket at SIZE bytes of gradients (default 25M)\n"
     "  --tf32            let f32 matrix products on GPUs use TF32 tensor cores\n"
     "  --trace FILE.json write a Chrome/Perfetto trace of the run (a path that cannot be\n"
     "                    written is bad usage, found before the run)\n"
     "  --profile         after the run, a table of ops by total time, calls and mean (stderr)\n"
     "  --log-all-ranks   under mpirun, every rank logs its training, each line after \"[rank K] \"\n"
     "                    (else rank 0 logs for the job)\n" COMMON_HELP,
     cmd_program},
    {"check", "build and shape-check only; prints nothing on success",
     "tfg check [OPTIONS] FILE\n\nBuild and check FILE ('-' reads standard input): syntax, names,\n"
     "arguments, shapes, dtypes and data files. Prints nothing on success;\n"
     "otherwise the errors, located, and exits 1.\n\n"
     "options:\n  --ast             print the syntax tree only (format: README.md)\n" COMMON_HELP,
     cmd_program},
    {"place", "placement only: which device runs each op and why",
     "tfg place [OPTIONS] FILE\n\nShow which device runs each op of FILE and why: the pass that decided it\n"
     "and its reason, then per device its ops, FLOPs, param bytes, planned peak and\n"
     "bytes sent and received per step.\n\n"
     "options:\n"
     "  --explain         the table above (the default)\n"
     "  --json            the same facts as JSON (schema: docs/cli.md)\n"
     "  --dot             Graphviz, one cluster per device\n"
     "  --devices SPEC    the devices to place on (default: every GPU; else as many host devices as gpu:N named)\n"
     "  --memory MODE     growth (default) or preallocate (accepted as for tfg run; no effect here)\n"
     "  --memory-limit SIZE  cap every device's memory\n"
     "  --bucket-size SIZE  close an all-reduce bucket at SIZE bytes of gradients (default 25M)\n" COMMON_HELP,
     cmd_program},
    {"plan", "the compiled plan: streams, copies, collectives, memory",
     "tfg plan [OPTIONS] FILE\n\nShow the compiled plan of FILE: per device its streams, ops in\n"
     "order, copies and events, memory offsets and the planned peak. A plan that\n"
     "does not fit a device is an error naming the device, the op and the bytes.\n\n"
     "options:\n"
     "  --json            the same plan as data (schema: README, \"--json schemas\")\n"
     "  --predict         each train's step time predicted from the plan and the devices'\n"
     "                    costs (host devices measured first), and mirrored()'s scaling\n"
     "  --threads N       with --predict: the kernel threads a run would use\n"
     "  --devices SPEC    the devices to plan for (default: every GPU; else as many host devices as gpu:N named)\n"
     "  --memory MODE     growth (default) or preallocate (accepted as for tfg run; no effect here)\n"
     "  --memory-limit SIZE  cap every device's memory\n"
     "  --bucket-size SIZE  close an all-reduce bucket at SIZE bytes of gradients (default 25M)\n" COMMON_HELP,
     cmd_program},
    {"devices", "the hardware found and how logical devices map onto it",
     "tfg devices [OPTIONS]\n\nList the hardware found and how logical devices map onto it.\n\n"
     "options:\n"
     "  --devices SPEC    the devices that spec gives (host*4, cuda:0*2:30G, sim:h100*8, ...;\n"
     "                    docs/cli.md); default: every GPU, else the host CPU alone\n"
     "  --memory-limit SIZE  cap every device's memory\n"
     "  --memory MODE     growth (default) or preallocate (accepted as for tfg run; no effect here)\n"
     "  --bucket-size SIZE  accepted as for tfg run; no effect here\n"
     "  --set NAME=VALUE  accepted as for tfg run; no effect here (there is no program)\n"
     "  --color=WHEN      colour diagnostics: auto (default), always, never\n"
     "  -h, --help        show this help\n", cmd_devices},
    {"repl", "interactive session (a FILE is loaded first)",
     "tfg repl [OPTIONS] [FILE]\n\nStart an interactive session: statements build the session's graph, a bare\n"
     "expression prints its value (computed on its placed device), print and train\n"
     "run at once. FILE, when given, is loaded first. Type :help for the commands.\n"
     "History is kept in ~/.tfg_history (TFG_HISTFILE overrides; empty: none).\n"
     "With standard input not a terminal: no prompts, and exit 1 if any input failed.\n\n"
     "options:\n"
     "  --seed N          shift every param initializer's seed\n"
     "  --print-all       print every value, not `...` past 6 per axis\n"
     "  --threads N       CPU threads for kernels (default: one per core)\n"
     "  --check-numerics  stop at the first op that produces a NaN or Inf, naming it\n"
     "  --quiet           no progress lines while training\n"
     "  --feed NAME=FILE.npy  feed the input NAME (one without `from`) (repeatable)\n"
     "  --devices SPEC    the devices to run on (default: every GPU; else host devices)\n"
     "  --memory MODE     device memory pools: growth (default) or preallocate\n"
     "  --memory-limit SIZE  cap every device's memory\n"
     "  --bucket-size SIZE  close an all-reduce bucket at SIZE bytes of gradients (default 25M)\n"
     "  --tf32            let f32 matrix products on GPUs use TF32 tensor cores\n" COMMON_HELP,
     cmd_repl},
    {"version", "version, build options and library versions",
     "tfg version\n\nPrint the version, build options and library versions.\n", cmd_version},
    {"plot", "the loss and metric curves of a train's log CSV as SVG",
     "tfg plot FILE.csv [-o OUT.svg]\n\nDraw the loss and metric curves of a train's log (train { log = \"FILE.csv\" })\n"
     "as an SVG picture: one panel per series, the step on the x axis.\n\n"
     "options:\n  -o OUT.svg        where to write it (default: FILE with .svg for .csv)\n"
     "  -h, --help        show this help\n",
     cmd_plot},
};

static void main_help(FILE *out) {
  fprintf(out, "usage: tfg COMMAND [OPTIONS] [FILE]\n\n"
               "tfg builds a graph from a .tfg program, places it on devices and runs it.\n\n"
               "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\nRun 'tfg COMMAND --help' for a command's options ('tfg --version' is 'tfg version').\n"
               "Exit codes: 0 success, 1 program error, 2 usage error, 3 runtime failure, 130 interrupted.\n"
               "The language and the command line: docs/language.md and docs/cli.md.\n");
}

/* Output that could not be written (a full disk, a closed pipe) is a
 * runtime failure, not a success. Under mpirun, a rank that fails ends
 * the job (tfg_mpi_abort: the others would wait for it in their next
 * collective forever), saying so; not when every rank refused the job
 * together at its start (the schedule check), which each says itself. */
static int finish(int rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "tfg: error: cannot write the output: %s\n", strerror(errno));
    rc = EXIT_RUNTIME;
  }
  if (rc != 0 && tfg_mpi_size() > 1 && !job_refused) {
    fprintf(stderr, "tfg: rank %d: failed (exit %d): ending the job\n", tfg_mpi_rank(), rc);
    fflush(stderr);
    tfg_mpi_abort(rc);
  }
  return rc;
}

static int cmd_plot(const cli_cmd *cmd, int argc, char **argv) {
  const char *csv = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: %s", cmd->help);
      return 0;
    }
    if (strcmp(argv[i], "-o") == 0) {
      if (++i == argc) return usage_error(cmd, "%s", "-o needs a file name");
      out = argv[i];
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return usage_error(cmd, "unknown option '%s'", argv[i]);
    } else if (csv) {
      return usage_error(cmd, "%s", "one log file at a time");
    } else {
      csv = argv[i];
    }
  }
  if (!csv) return usage_error(cmd, "%s", "no log file given");
  char def[4096];
  if (!out) { /* run.csv -> run.svg */
    size_t n = strlen(csv);
    bool dotcsv = n > 4 && strcmp(csv + n - 4, ".csv") == 0;
    snprintf(def, sizeof def, "%.*s.svg", (int)(dotcsv ? n - 4 : n), csv);
    out = def;
  }
  return cli_plot(csv, out);
}

/* Under mpirun, the end of the job from outside: mpirun sends SIGTERM to
 * every rank when one has failed (or it was interrupted). Async-signal-
 * safe: write and _exit. The rank says so and ends with exit 3, the
 * status of a runtime failure; the last checkpoint is as it was (written
 * atomically). */
static char job_ended_msg[96];
static size_t job_ended_len;

static void on_job_end(int sig) {
  (void)sig;
  (void)!write(STDERR_FILENO, job_ended_msg, job_ended_len);
  _exit(EXIT_RUNTIME);
}

static void catch_job_end(void) {
  if (tfg_mpi_size() < 2) return;
  int n = snprintf(job_ended_msg, sizeof job_ended_msg,
                   "tfg: rank %d: stopped: the job is ending (another rank failed, or mpirun was stopped)\n",
                   tfg_mpi_rank());
  job_ended_len = n > 0 && (size_t)n < sizeof job_ended_msg ? (size_t)n : 0;
  struct sigaction sa = {0};
  sa.sa_handler = on_job_end;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv) {
  /* The switches first: the CPU kernels' process-wide part must be set
   * before any kernel runs (kernels/cpu/config.h). */
  cli_switches_from_env(&switches);
  tfg_cpu_config_set(&switches);
  /* A rank of an mpirun job joins it before anything else (runtime/mpi.h);
   * outside a job nothing happens. */
  tfg_strbuf why = {0};
  if (tfg_mpi_start(&why) != TFG_OK) {
    fprintf(stderr, "tfg: %s\n", why.data);
    tfg_strbuf_free(&why);
    return EXIT_RUNTIME;
  }
  tfg_strbuf_free(&why);
  atexit(tfg_mpi_stop);
  tfg_devices_set_local(tfg_mpi_local_rank(), tfg_mpi_local_size());
  catch_job_end();
  if (argc < 2) {
    main_help(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    main_help(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) return finish(cmd_version(&commands[6], 1, argv + 1));
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return finish(commands[i].run(&commands[i], argc - 1, argv + 1));
  return usage_error(NULL, "unknown command '%s'", argv[1]);
}
