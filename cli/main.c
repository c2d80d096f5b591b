/* cli/main.c: the `tfg` command line (CLI.md).
 *
 * One table row per subcommand: its name, one-line summary, full help and
 * handler. Handlers return a process exit code: 0 success, 1 the program
 * has an error (diagnostics printed), 2 bad usage, 3 runtime failure. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/strbuf.h"
#include "lang/ast.h"
#include "lang/diag.h"
#include "lang/parse.h"

enum { EXIT_PROGRAM = 1, EXIT_USAGE = 2, EXIT_RUNTIME = 3 };

typedef struct cli_cmd {
  const char *name;
  const char *summary;
  const char *help; /* printed after "usage: " */
  int (*run)(const struct cli_cmd *cmd, int argc, char **argv);
} cli_cmd;

/* Colour on a terminal only, never when NO_COLOR is set (no-color.org). */
static bool color_mode(const char *opt) {
  if (opt && strcmp(opt, "always") == 0) return true;
  if (opt && strcmp(opt, "never") == 0) return false;
  const char *term = getenv("TERM");
  return isatty(STDERR_FILENO) && !getenv("NO_COLOR") && !(term && strcmp(term, "dumb") == 0);
}

static int usage_error(const cli_cmd *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "tfg%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'tfg %s%s--help' for more information.\n", cmd ? cmd->name : "",
          cmd ? " " : "");
  return EXIT_USAGE;
}

/* Options every subcommand that reads a program accepts. */
typedef struct cli_opts {
  const char *color;
  bool ast;
  const char *file;
} cli_opts;

enum { OPT_COLOR = 256, OPT_AST };

/* Parses argv for cmd: --help, --color=WHEN, --ast when allow_ast, and
 * exactly one FILE. Returns -1 to go on, else the exit code. */
static int parse_opts(const cli_cmd *cmd, int argc, char **argv, bool allow_ast, cli_opts *o) {
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},
      {"color", required_argument, NULL, OPT_COLOR},
      {"ast", no_argument, NULL, OPT_AST},
      {NULL, 0, NULL, 0},
  };
  memset(o, 0, sizeof *o);
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
    switch (c) {
    case 'h':
      printf("usage: %s", cmd->help);
      return 0;
    case OPT_COLOR:
      if (strcmp(optarg, "auto") && strcmp(optarg, "always") && strcmp(optarg, "never"))
        return usage_error(cmd, "--color takes auto, always or never, not '%s'", optarg);
      o->color = optarg;
      break;
    case OPT_AST:
      if (!allow_ast) return usage_error(cmd, "unknown option '%s'", "--ast");
      o->ast = true;
      break;
    case ':':
      return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
    default:
      return usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind >= argc) return usage_error(cmd, "%s", "missing FILE");
  if (argc - optind > 1) return usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
  o->file = argv[optind];
  return -1;
}

static int unavailable(const cli_cmd *cmd) {
  fprintf(stderr, "tfg %s: not available in tfg %s, which parses and checks programs only\n",
          cmd->name, TFG_VERSION);
  return EXIT_RUNTIME;
}

/* Loads and parses o->file, printing diagnostics. Returns the exit code
 * and, on success, the program in *prog (nodes in arena). */
static int load_program(const cli_cmd *cmd, const cli_opts *o, tfg_diag *d, tfg_arena *arena,
                        tfg_ast **prog) {
  bool color = color_mode(o->color);
  const tfg_source *src = tfg_diag_load(d, o->file);
  if (!src) {
    tfg_diag_render(d, stderr, color);
    (void)cmd;
    return EXIT_USAGE; /* the FILE argument names nothing readable */
  }
  tfg_status st = tfg_parse(src, d, arena, prog, NULL);
  tfg_diag_render(d, stderr, color);
  if (st != TFG_OK) {
    tfg_diag_render_summary(d, stderr, color);
    return tfg_status_exit_code(st);
  }
  return 0;
}

/* The commands that read a program: check it, then do the command's part.
 * Only `check` is complete in this version; run, place and plan stop
 * after the check and say so (exit 3), so a user still learns whether the
 * program is valid. */
static int cmd_program(const cli_cmd *cmd, int argc, char **argv) {
  bool is_check = strcmp(cmd->name, "check") == 0;
  cli_opts o;
  int rc = parse_opts(cmd, argc, argv, is_check, &o);
  if (rc >= 0) return rc;
  tfg_diag *d = tfg_diag_new();
  tfg_arena arena;
  tfg_arena_init(&arena);
  tfg_ast *prog = NULL;
  rc = load_program(cmd, &o, d, &arena, &prog);
  if (rc == 0 && o.ast) {
    tfg_strbuf out = {0};
    tfg_ast_dump(prog, &out);
    if (out.len) fwrite(out.data, 1, out.len, stdout);
    tfg_strbuf_free(&out);
  } else if (rc == 0 && !is_check) {
    rc = unavailable(cmd);
  }
  tfg_arena_free(&arena);
  tfg_diag_free(d);
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

static int cmd_unavailable(const cli_cmd *cmd, int argc, char **argv) {
  int rc = no_opts(cmd, argc, argv);
  return rc >= 0 ? rc : unavailable(cmd);
}

/* `tfg repl [FILE]`: FILE, when given, is checked first. */
static int cmd_repl(const cli_cmd *cmd, int argc, char **argv) {
  return argc > 1 && argv[1][0] != '-' ? cmd_program(cmd, argc, argv) : cmd_unavailable(cmd, argc, argv);
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
  /* Build options as CLI.md lists them. The CUDA line reports what the
   * build found, so a user can tell a CPU-only build from a missing toolkit. */
  printf("cuda: off%s\n", TFG_BUILD_CUDA ? " (toolkit found at build time; no GPU backend in this version)"
                                         : "");
  printf("cudnn: off\nnccl: off\nmpi: off\n");
  return 0;
}

static const cli_cmd commands[] = {
    {"run", "build, compile and execute the program's actions (print, train)",
     "tfg run [OPTIONS] FILE\n\nBuild, compile and execute FILE's actions (print, train).\n\n"
     "options:\n  --color=WHEN   colour diagnostics: auto (default), always, never\n"
     "  -h, --help     show this help\n",
     cmd_program},
    {"check", "build and shape-check only; prints nothing on success",
     "tfg check [OPTIONS] FILE\n\nParse and check FILE ('-' reads standard input). Prints nothing\n"
     "on success; otherwise every error found, located, and exits 1.\n\n"
     "options:\n  --ast          print the syntax tree (format: README.md, \"tfg check --ast\")\n"
     "  --color=WHEN   colour diagnostics: auto (default), always, never\n"
     "  -h, --help     show this help\n",
     cmd_program},
    {"place", "placement only: which device runs each op and why",
     "tfg place [OPTIONS] FILE\n\nShow which device runs each op of FILE and why.\n\n"
     "options:\n  --color=WHEN   colour diagnostics: auto (default), always, never\n"
     "  -h, --help     show this help\n",
     cmd_program},
    {"plan", "the compiled plan: streams, copies, collectives, memory",
     "tfg plan [OPTIONS] FILE\n\nShow the compiled plan of FILE: per device its streams, ops in\n"
     "order, copies, collectives, memory offsets and peak.\n\n"
     "options:\n  --color=WHEN   colour diagnostics: auto (default), always, never\n"
     "  -h, --help     show this help\n",
     cmd_program},
    {"devices", "the hardware found and how logical devices map onto it",
     "tfg devices\n\nList the hardware found and how logical devices map onto it.\n", cmd_unavailable},
    {"repl", "interactive session (a FILE is loaded first)",
     "tfg repl [FILE]\n\nStart an interactive session; FILE is loaded first.\n", cmd_repl},
    {"version", "version, build options and library versions",
     "tfg version\n\nPrint the version, build options and library versions.\n", cmd_version},
};

static void main_help(FILE *out) {
  fprintf(out, "usage: tfg COMMAND [OPTIONS] [FILE]\n\n"
               "tfg builds a graph from a .tfg program, places it on devices and runs it.\n\n"
               "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\nRun 'tfg COMMAND --help' for a command's options.\n"
               "Exit codes: 0 success, 1 program error, 2 usage error, 3 runtime failure.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    main_help(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    main_help(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) return cmd_version(&commands[6], 1, argv + 1);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0)
      return commands[i].run(&commands[i], argc - 1, argv + 1);
  return usage_error(NULL, "unknown command '%s'", argv[1]);
}
