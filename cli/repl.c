/* cli/repl.c: `tfg repl`, an interactive session for graph experiments
 * (CLI.md).
 *
 * Reading. On a terminal, libedit's readline-compatible API reads lines
 * (editing, history in ~/.tfg_history or TFG_HISTFILE, completion of
 * names, builtins, keywords and meta commands); otherwise plain getline,
 * with no prompts and no colour. An input is complete when the parser
 * accepts it, or rejects it somewhere other than at the end of the text:
 * an error at the very end (a `{`, `(` or `[` still open: inside `( )`
 * and `[ ]` newlines do not end statements, inside `{ }` the block waits
 * for its `}`) means the text is unfinished, and the `...> ` prompt asks
 * for more (lang/parse.h, at_eof). Brackets are never counted here: the
 * grammar alone decides, so a `{` in a string or a comment is no opener.
 *
 * Sources. Each input is its own source named <stdin> whose line numbers
 * continue the session's (base/diag.h, line_base), so every error reads
 * <stdin>:N:col with N the line as typed, and a script piped in gets the
 * same numbers as its file. Diagnostics are printed and cleared after
 * each input, so the error limit is per input.
 *
 * Evaluating. The statements of an input are evaluated in order into the
 * session's global scope (lang/interp.h); print and train statements,
 * and bare expressions (shown, not kept), then run in that order. An
 * input is atomic: a mark is taken before it, and an error at any point,
 * building or running, rolls the session back to the mark, so a rejected
 * input leaves no node, param, binding, module or trained value behind.
 * Bare expressions at the end of an input (the usual case: one per
 * input) are rolled back once shown, so the graph holds what statements
 * built; one followed by a statement in the same input leaves its nodes
 * (ids are in build order, and the statement's sit above them).
 *
 * Running. A plan is for one fixed graph, and the graph changes between
 * inputs, so every input that computes something is placed, planned and
 * run in a fresh session over a copy of the graph (the copy also takes
 * the nodes a train adds: gradients, updates, a strategy's replicas and
 * pins, none of which the session's graph keeps). Params keep their
 * values from input to input: a param is initialized deterministically
 * from its name and the seed, so the same value comes back in every new
 * session, and once a train has changed it (or a load has set it) its
 * value is kept on the host (a param store, by node id) and written into
 * each new session (tfg_session_write). A load statement sets the params
 * of the session so far before its input's actions run, as a file's loads
 * run before its actions. A train starts fresh optimizer state, as each train
 * statement of a file does. For the small graphs of a session the cost
 * of a fresh plan and session per input is small; in exchange an input
 * always runs exactly what `tfg run` would run for the same program.
 *
 * Interrupts. Ctrl-C at a prompt drops the line (and any unfinished
 * input) and prompts again; while an input runs it ends the process as in
 * `tfg run` (the runtime has no cancellation point yet). */
#include <errno.h>
#include <locale.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <editline/readline.h>

#include "base/arena.h"
#include "base/assert.h"
#include "base/strbuf.h"
#include "cli/cli.h"
#include "cli/pipeline.h"
#include "ir/ops.h"
#include "lang/parse.h"
#include "runtime/ckpt.h"
#include "runtime/train.h"

/* What an input line after its meta command asks for. */
typedef enum input_mode { MODE_EVAL, MODE_TYPE, MODE_TIME } input_mode;

/* A trained param value kept between sessions (host bytes, the param's
 * dtype and shape). */
typedef struct stored_value {
  tfg_node_id id;
  void *data;
  size_t bytes;
} stored_value;

typedef struct repl {
  const cli_opts *o;
  tfg_diag *d;
  tfg_interp_opts io;
  char stdlib[4096];
  tfg_interp *I;
  /* Syntax trees of the inputs: the session's bindings and fns point
   * into them, so they live as long as the session. */
  tfg_arena asts;
  bool tty;             /* stdin is a terminal: prompts, libedit */
  bool color;
  uint32_t lines;       /* lines read so far */
  int failed;           /* inputs that failed */
  bool continuing;      /* reading more lines of an unfinished input */
  tfg_devices *ds;      /* the devices inputs run on (made on first use) */
  int ds_gpus;          /* ... for a program naming this many GPUs (no --devices) */
  stored_value *vals;   /* trained params, by node id */
  int nvals, capvals;
  char *histfile;
  char *last_line;      /* the newest history entry */
} repl;

/* ---- the param store ------------------------------------------------------------ */

static stored_value *store_find(repl *r, tfg_node_id id) {
  for (int i = 0; i < r->nvals; i++)
    if (r->vals[i].id == id) return &r->vals[i];
  return NULL;
}

/* Keeps data (malloc'ed, taken over) as the value of param id. */
static void store_put(repl *r, tfg_node_id id, void *data, size_t bytes) {
  stored_value *v = store_find(r, id);
  if (v) {
    free(v->data);
  } else {
    if (r->nvals == r->capvals) {
      r->capvals = r->capvals ? 2 * r->capvals : 16;
      r->vals = realloc(r->vals, sizeof *r->vals * (size_t)r->capvals);
      if (!r->vals) abort();
    }
    v = &r->vals[r->nvals++];
  }
  *v = (stored_value){id, data, bytes};
}

/* Forgets the values of nodes the graph no longer has (a rollback): a
 * later param may get the same id. */
static void store_trim(repl *r) {
  int32_t n = tfg_interp_program(r->I)->graph->nnodes;
  for (int i = 0; i < r->nvals;) {
    if (r->vals[i].id >= n) {
      free(r->vals[i].data);
      r->vals[i] = r->vals[--r->nvals];
    } else {
      i++;
    }
  }
}

static void store_clear(repl *r) {
  for (int i = 0; i < r->nvals; i++) free(r->vals[i].data);
  r->nvals = 0;
}

/* Appends a param's value (data malloc'ed, taken over) to the values an
 * input leaves, committed to the store once the whole input succeeded. */
static void pending_add(stored_value **pending, int *npending, tfg_node_id id, void *data, size_t bytes) {
  *pending = realloc(*pending, sizeof **pending * (size_t)(*npending + 1));
  if (!*pending) abort();
  (*pending)[(*npending)++] = (stored_value){id, data, bytes};
}

/* ---- the session ---------------------------------------------------------------- */

static void session_start(repl *r) {
  r->I = tfg_interp_new(r->d, &r->io);
  tfg_arena_init(&r->asts);
}

static void session_end(repl *r) {
  tfg_interp_free(r->I);
  tfg_arena_free(&r->asts);
  store_clear(r);
  r->I = NULL;
}

/* Prints the diagnostics of the input just handled and forgets them. */
static void flush_diags(repl *r) {
  fflush(stdout);
  tfg_diag_render(r->d, stderr, r->color);
  tfg_diag_clear(r->d);
}

/* The devices for program p: --devices once, else the default for the
 * GPUs p names (made again when that number changes; its notice, if
 * any, is printed each time it is made). NULL after reporting. */
static tfg_devices *devices_of(repl *r, const tfg_program *p) {
  int gpus = r->o->devices ? 0 : cli_gpus_named(p, NULL);
  if (r->ds && gpus == r->ds_gpus) return r->ds;
  tfg_devices_free(r->ds);
  r->ds = cli_devices_for(r->o, p, r->d);
  r->ds_gpus = gpus;
  return r->ds;
}

/* The compile driver's devices (cli_compile_for): devices_of, which
 * reports to the session's diagnostics (d). */
static tfg_status compile_devices(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out) {
  (void)d;
  *out = devices_of(ctx, p);
  return *out ? TFG_OK : TFG_ERR_USAGE;
}

/* A copy of g whose new nodes go to the copy alone. The nodes' input
 * arrays, names and constants stay in g's arena (g outlives the copy),
 * so a shallow copy of the node array is a full one for the stages that
 * only add nodes and set pins (strategies, autodiff, the placer). */
static tfg_graph *graph_copy(const tfg_graph *g) {
  tfg_graph *c = tfg_graph_new();
  c->nodes = malloc(sizeof *c->nodes * ((size_t)g->nnodes + 1));
  if (!c->nodes) abort();
  if (g->nnodes) memcpy(c->nodes, g->nodes, sizeof *c->nodes * (size_t)g->nnodes);
  c->nnodes = c->cap = g->nnodes;
  return c;
}

/* One thing an input shows or runs, in statement order. */
typedef struct run_item {
  bool is_action;
  int action;        /* is_action: the index in the program's actions */
  tfg_value value;   /* else a bare expression's value ... */
  char *text;        /* ... and its source text (malloc'ed) */
  tfg_loc loc;
} run_item;

static bool action_needs_run(const tfg_action *a) {
  if (a->kind == TFG_ACTION_TRAIN) return true;
  for (int i = 0; i < a->nitems; i++)
    if (a->items[i].is_tensor) return true;
  return false;
}

/* Prints a build-time value the way a bare expression shows it. */
static void print_value(repl *r, const tfg_value *v) {
  tfg_strbuf b = {0};
  tfg_value_format(v, tfg_interp_program(r->I)->graph, &b);
  tfg_strbuf_putc(&b, '\n');
  fwrite(b.data, 1, b.len, stdout);
  tfg_strbuf_free(&b);
}

/* What the REPL does after each action of an input (cli_run_actions):
 * shows its output and diagnostics now, and keeps what a train changed,
 * the program's params it trained, in *pending. */
typedef struct kept_ctx {
  repl *r;
  stored_value **pending;
  int *npending;
} kept_ctx;

static void kept(void *ctx, const cli_actions *ra, int from, int to, tfg_status st) {
  const kept_ctx *k = ctx;
  fflush(stdout);
  tfg_diag_render(k->r->d, stderr, k->r->color);
  if (st != TFG_OK || ra->p->actions[from].kind != TFG_ACTION_TRAIN) return;
  for (int j = from; j < to; j++)
    for (int q = 0; q < ra->steps[j].nparams; q++) {
      tfg_node_id id = ra->steps[j].params[q];
      const tfg_node *nd = &ra->p->graph->nodes[id];
      size_t bytes = (size_t)tfg_shape_numel(&nd->shape) * tfg_dtype_size(nd->dtype);
      void *data = malloc(bytes ? bytes : 1);
      if (!data) abort();
      tfg_session_read(ra->s, id, data);
      pending_add(k->pending, k->npending, id, data, bytes);
    }
}

/* Runs the items of an input whose statements were evaluated: the input's
 * actions are p->actions[first_action..]. Trained param values go to
 * *pending (committed by the caller once the whole input succeeded).
 * Returns TFG_OK or the first failure's status (reported). */
static tfg_status run_items(repl *r, const run_item *items, int nitems, int first_action, stored_value **pending,
                            int *npending) {
  tfg_program *p = tfg_interp_program(r->I);
  bool need = false;
  for (int i = 0; i < nitems && !need; i++)
    need = items[i].is_action ? action_needs_run(&p->actions[items[i].action]) : items[i].value.kind == TFG_V_TENSOR;
  if (!need) {
    /* Nothing to compute: no devices, no plan. */
    for (int i = 0; i < nitems; i++) {
      if (!items[i].is_action) {
        print_value(r, &items[i].value);
        continue;
      }
      const tfg_action *a = &p->actions[items[i].action];
      for (int k = 0; k < a->nitems; k++) printf("%s: %s\n", a->items[k].text, a->items[k].value);
    }
    return TFG_OK;
  }

  /* The program this input runs: the session's graph (a copy) with this
   * input's actions only. */
  tfg_program ep = *p;
  ep.graph = graph_copy(p->graph);
  ep.actions = p->actions + first_action;
  ep.nactions = p->nactions - first_action;
  tfg_node_id *extra = calloc((size_t)nitems + 1, sizeof *extra);
  if (!extra) abort();
  int nextra = 0;
  for (int i = 0; i < nitems; i++)
    if (!items[i].is_action && items[i].value.kind == TFG_V_TENSOR) extra[nextra++] = items[i].value.u.tensor;

  tfg_status st = TFG_OK;
  tfg_compiled c = {0}; /* steps (by action of ep), devices, placement, plan */
  tfg_session *s = NULL;
  const cli_opts *o = r->o;
  tfg_session_opts so = {.threads = o->threads, .feeds = o->feeds, .nfeeds = o->nfeeds, .seed = o->seed,
                         .check_numerics = o->check_numerics, .preallocate = o->preallocate, .tf32 = o->tf32,
                         .sw = o->sw};
  /* --feed may not replace an input's own source (as in `tfg run`). */
  for (int i = 0; i < o->nfeeds && st == TFG_OK; i++) {
    const tfg_feed *f = cli_feed_target(&ep, o->feeds[i].name);
    if (!f || !f->ds) continue;
    tfg_strbuf why = {0};
    cli_feed_has_source(&ep, f, false, &why);
    tfg_diag_error(r->d, &ep.graph->nodes[f->node].loc, "--feed %s: %s", o->feeds[i].name, why.data);
    tfg_strbuf_free(&why);
    st = TFG_ERR_USAGE;
  }
  if (st == TFG_OK && cli_compile_for(o, &ep, compile_devices, r, extra, nextra, r->d, &c) != 0) {
    switch (c.failed) {
    case TFG_COMPILE_PASSES: st = TFG_ERR_NAME; break;
    case TFG_COMPILE_DEVICES: st = TFG_ERR_USAGE; break;
    case TFG_COMPILE_VALIDATE: st = TFG_ERR_DEVICE; break; /* a bug: the plan is invalid */
    default: st = TFG_ERR_PLACE;
    }
  }
  const tfg_train_step *steps = c.steps;
  const tfg_plan *plan = c.plan;
  if (st == TFG_OK) {
    so.plan = plan;
    s = tfg_session_new(&ep, r->d, &so);
    if (!s) st = TFG_ERR_DEVICE;
  }
  /* Params start from their trained (or loaded) values, then from what
   * this input's loads set (in *pending until the input succeeds). */
  for (int i = 0; s && i < r->nvals; i++)
    if (r->vals[i].id < ep.graph->nnodes && tfg_session_holds(s, r->vals[i].id))
      tfg_session_write(s, r->vals[i].id, r->vals[i].data);
  for (int i = 0; s && i < *npending; i++)
    if (tfg_session_holds(s, (*pending)[i].id)) tfg_session_write(s, (*pending)[i].id, (*pending)[i].data);

  tfg_train_opts to = {.log = stderr, .tty = isatty(STDERR_FILENO), .quiet = o->quiet, .diag = stderr, .color = r->color};
  for (int i = 0; st == TFG_OK && i < nitems;) {
    const run_item *it = &items[i];
    if (!it->is_action) {
      if (it->value.kind == TFG_V_TENSOR) {
        /* Shown as `print` shows it: the expression's text, type, device, values. */
        tfg_print_item pi = {.text = it->text, .loc = it->loc, .is_tensor = true, .node = it->value.u.tensor};
        tfg_action a = {.kind = TFG_ACTION_PRINT, .loc = it->loc, .nitems = 1, .items = &pi};
        st = cli_print_action(s, &ep, plan, &a, o->print_all);
      } else {
        print_value(r, &it->value);
      }
      i++;
      continue;
    }
    /* A run of consecutive actions, k, k + 1, ...: as `tfg run` runs
     * them, consecutive train statements forming one group. */
    int k = it->action - first_action, n = 0;
    while (i + n < nitems && items[i + n].is_action && items[i + n].action == it->action + n) n++;
    kept_ctx kc = {.r = r, .pending = pending, .npending = npending};
    cli_actions ra = {.s = s, .p = &ep, .steps = steps, .plan = plan, .so = &so, .to = &to, .print = true,
                      .print_all = o->print_all, .done = kept, .ctx = &kc};
    st = cli_run_actions(&ra, k, k + n, r->d);
    i += n;
  }
  tfg_session_free(s);
  tfg_compiled_free(&c); /* the devices stay the session's */
  free(extra);
  tfg_graph_free(ep.graph);
  return st;
}

/* Reads the files of the input's loads (the program's loads from first
 * on), in program order, as `tfg run` does before the first action
 * (tfg_ckpt_read_load: matched against every param of the session so
 * far), appending each value set to *pending: a later load's come after
 * an earlier's, so they win when committed. Returns TFG_OK or the first
 * failure's status (reported at its load). */
static tfg_status read_loads(repl *r, int first, stored_value **pending, int *npending) {
  const tfg_program *p = tfg_interp_program(r->I);
  int *at = malloc(sizeof *at * ((size_t)p->nparams + 1));
  if (!at) abort();
  tfg_status st = TFG_OK;
  for (int i = first; i < p->nloads && st == TFG_OK; i++) {
    tfg_ckpt *c;
    st = tfg_ckpt_read_load(r->d, &p->loads[i], p->graph, p->params, p->nparams, &c, at);
    if (st != TFG_OK) break;
    for (int k = 0; k < p->nparams; k++) {
      if (at[k] < 0) continue;
      const tfg_ckpt_entry *e = tfg_ckpt_entry_at(c, at[k]);
      size_t bytes = (size_t)tfg_safetensors_nbytes(e->dtype, &e->shape);
      void *data = malloc(bytes ? bytes : 1);
      if (!data) abort();
      memcpy(data, e->data, bytes);
      pending_add(pending, npending, p->params[k], data, bytes);
    }
    tfg_ckpt_free(c);
  }
  free(at);
  return st;
}

/* Evaluates the statements of prog (parsed from src) into the session and
 * runs what they ask for; with show, bare expressions are shown (typed
 * input), else they are ordinary statements (a loaded file). All or
 * nothing: on any error the session is rolled back to where it was. */
static tfg_status eval_program(repl *r, const tfg_source *src, const tfg_ast *prog, bool show) {
  tfg_program *p = tfg_interp_program(r->I);
  tfg_interp_mark start = tfg_interp_mark_now(r->I), keep = start;
  run_item *items = NULL;
  int nitems = 0, cap = 0;
  tfg_status st = TFG_OK;
  for (const tfg_ast *s = prog->list.head; s && st == TFG_OK; s = s->next) {
    int nact = p->nactions;
    tfg_value v;
    st = tfg_interp_eval_stmt(r->I, src, s, &v);
    if (st != TFG_OK) break;
    bool bare = show && s->kind == TFG_AST_EXPR_STMT;
    int add = p->nactions - nact + (bare && v.kind != TFG_V_NONE);
    if (nitems + add > cap) {
      cap = 2 * (nitems + add) + 4;
      items = realloc(items, sizeof *items * (size_t)cap);
      if (!items) abort();
    }
    for (int a = nact; a < p->nactions; a++) items[nitems++] = (run_item){.is_action = true, .action = a};
    if (bare && v.kind != TFG_V_NONE) {
      const tfg_loc *l = &s->a->loc;
      char *text = malloc((size_t)l->len + 1);
      if (!text) abort();
      memcpy(text, l->src->text + l->off, l->len);
      text[l->len] = '\0';
      items[nitems++] = (run_item){.value = v, .text = text, .loc = *l};
    }
    if (!bare) keep = tfg_interp_mark_now(r->I);
  }
  stored_value *pending = NULL;
  int npending = 0;
  if (st == TFG_OK) st = read_loads(r, start.loads, &pending, &npending);
  if (st == TFG_OK) { /* the input's warnings (a no_decay pattern that matches nothing) before its actions run */
    fflush(stdout);
    tfg_diag_render(r->d, stderr, r->color);
  }
  if (st == TFG_OK) st = run_items(r, items, nitems, start.actions, &pending, &npending);
  if (st == TFG_OK) {
    for (int i = 0; i < npending; i++) store_put(r, pending[i].id, pending[i].data, pending[i].bytes);
    /* The bare expressions' nodes go; the actions ran and the loads are
     * in the store: both are done. */
    tfg_interp_rollback(r->I, &keep);
    p->nactions = start.actions;
    p->nloads = start.loads;
  } else {
    for (int i = 0; i < npending; i++) free(pending[i].data);
    tfg_interp_rollback(r->I, &start);
  }
  store_trim(r);
  free(pending);
  for (int i = 0; i < nitems; i++) free(items[i].text);
  free(items);
  return st;
}

/* ---- meta commands ---------------------------------------------------------------- */

static const struct meta {
  const char *name, *args, *help;
} metas[] = {
    {"help", "", "show this help"},
    {"type", " EXPR", "the dtype and shape of EXPR (or its kind), without computing it"},
    {"graph", "", "the session's graph: one line per node (id, op, inputs, type, name, pin, source)"},
    {"place", " [--explain|--json|--dot]", "where each node of the graph runs (--explain: why)"},
    {"plan", "", "the compiled plan of the graph: streams, copies, memory"},
    {"devices", "", "the devices the session runs on"},
    {"load", " FILE", "evaluate FILE into the session (its print and train statements run)"},
    {"reset", "", "start over: an empty session (history stays)"},
    {"time", " INPUT", "evaluate INPUT as typed, then print how long it took"},
    {"quit", "", "end the session (so does Ctrl-D)"},
};
#define NMETAS ((int)(sizeof metas / sizeof metas[0]))

/* The meta command a word names: exactly, or as the unique prefix of
 * one. -1: none; -2: ambiguous (both reported by the caller). */
static int meta_lookup(const char *w, size_t n) {
  int found = -1, count = 0;
  for (int i = 0; i < NMETAS; i++) {
    if (strlen(metas[i].name) == n && memcmp(metas[i].name, w, n) == 0) return i;
    if (n && strncmp(metas[i].name, w, n) == 0) found = i, count++;
  }
  return count > 1 ? -2 : found;
}

static void print_help(void) {
  printf("Statements build the session's graph; a bare expression prints its value,\n"
         "computed on its placed device; print and train run at once. An input that\n"
         "fails leaves the session as it was. Commands (any unique prefix works):\n");
  for (int i = 0; i < NMETAS; i++) {
    char head[64];
    snprintf(head, sizeof head, ":%s%s", metas[i].name, metas[i].args);
    printf("  %-34s %s\n", head, metas[i].help);
  }
}

static void devspec_format(const tfg_devspec *d, tfg_strbuf *b) {
  switch (d->kind) {
  case TFG_DEV_CPU: tfg_strbuf_puts(b, "@cpu"); break;
  case TFG_DEV_GPU: tfg_strbuf_printf(b, "@gpu:%lld", (long long)d->index); break;
  case TFG_DEV_GPU_ANY: tfg_strbuf_puts(b, "@gpu:*"); break;
  case TFG_DEV_NONE: break;
  }
}

/* `:graph`: one line per node, columns aligned:
 *   %2  matmul(%1, %0)  f32[2,3]  h  @gpu:0  <stdin>:3 */
static void print_graph(repl *r) {
  const tfg_graph *g = tfg_interp_program(r->I)->graph;
  if (g->nnodes == 0) {
    printf("(the graph is empty)\n");
    return;
  }
  enum { NCOL = 6 };
  tfg_strbuf *cells = calloc((size_t)g->nnodes * NCOL, sizeof *cells);
  size_t width[NCOL] = {0};
  if (!cells) abort();
  for (int32_t i = 0; i < g->nnodes; i++) {
    const tfg_node *n = &g->nodes[i];
    tfg_strbuf *c = &cells[(size_t)i * NCOL];
    tfg_strbuf_printf(&c[0], "%%%d", (int)i);
    tfg_strbuf_puts(&c[1], tfg_op_get(n->op)->name);
    if (n->ninputs) {
      tfg_strbuf_putc(&c[1], '(');
      for (int k = 0; k < n->ninputs; k++) tfg_strbuf_printf(&c[1], "%s%%%d", k ? ", " : "", (int)n->inputs[k]);
      tfg_strbuf_putc(&c[1], ')');
    }
    tfg_shape_format(&c[2], n->dtype, &n->shape);
    tfg_strbuf_puts(&c[3], n->name ? n->name : "");
    devspec_format(&n->pin, &c[4]);
    if (n->loc.src) tfg_strbuf_printf(&c[5], "%s:%u", n->loc.src->name, n->loc.line);
    for (int k = 0; k < NCOL; k++) {
      if (!c[k].data) tfg_strbuf_puts(&c[k], "");
      if (c[k].len > width[k]) width[k] = c[k].len;
    }
  }
  tfg_strbuf out = {0};
  for (int32_t i = 0; i < g->nnodes; i++) {
    tfg_strbuf *c = &cells[(size_t)i * NCOL];
    size_t start = out.len;
    for (int k = 0; k < NCOL; k++) {
      if (!width[k]) continue;
      tfg_strbuf_printf(&out, "%s%-*s", k ? "  " : "", (int)width[k], c[k].data);
    }
    while (out.len > start && out.data[out.len - 1] == ' ') out.len--;
    tfg_strbuf_putc(&out, '\n');
    for (int k = 0; k < NCOL; k++) tfg_strbuf_free(&c[k]);
  }
  fwrite(out.data, 1, out.len, stdout);
  tfg_strbuf_free(&out);
  free(cells);
}

/* `:place` and `:plan`: the graph as it stands, placed and planned as
 * `tfg place` and `tfg plan` would (no actions: nothing is run). */
static tfg_status show_placement(repl *r, const char *how) {
  tfg_program ep = *tfg_interp_program(r->I);
  ep.graph = graph_copy(ep.graph);
  ep.nactions = 0;
  tfg_status st = TFG_OK;
  tfg_compiled c = {0};
  if (cli_compile_for(r->o, &ep, compile_devices, r, NULL, 0, r->d, &c) != 0)
    st = c.failed == TFG_COMPILE_DEVICES ? TFG_ERR_USAGE : TFG_ERR_PLACE;
  const tfg_devices *ds = c.ds;
  const tfg_placement *pl = c.pl;
  const tfg_plan *plan = c.plan;
  if (st == TFG_OK) {
    tfg_strbuf out = {0};
    if (!strcmp(how, "plan")) {
      tfg_plan_print(plan, &out);
    } else if (!strcmp(how, "--explain")) {
      tfg_place_explain(pl, &out);
    } else if (!strcmp(how, "--json")) {
      tfg_place_json(pl, &out);
    } else if (!strcmp(how, "--dot")) {
      tfg_place_dot(pl, &out);
    } else {
      for (int32_t i = 0; i < ep.graph->nnodes; i++) {
        const tfg_node *n = &ep.graph->nodes[i];
        tfg_strbuf_printf(&out, "%%%d %s%s%s -> %s\n", (int)i, tfg_op_get(n->op)->name, n->name ? " " : "",
                          n->name ? n->name : "", tfg_devices_at(ds, tfg_placement_device(pl, i))->name);
      }
      if (!ep.graph->nnodes) tfg_strbuf_puts(&out, "(the graph is empty)\n");
    }
    if (out.len) fwrite(out.data, 1, out.len, stdout);
    tfg_strbuf_free(&out);
  }
  tfg_compiled_free(&c); /* the devices stay the session's */
  tfg_graph_free(ep.graph);
  return st;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- inputs ---------------------------------------------------------------------- */

/* Whether text (an input so far) is unfinished: the parser's first error
 * is at its very end. Parsed on a scratch sink, so nothing is reported. */
static bool unfinished(const char *text, size_t len) {
  tfg_diag *d = tfg_diag_new();
  tfg_arena a;
  tfg_arena_init(&a);
  bool at_eof = false;
  tfg_ast *prog;
  const tfg_source *src = tfg_diag_add_source(d, "<stdin>", text, len);
  if (src) tfg_parse(src, d, &a, &prog, &at_eof);
  tfg_arena_free(&a);
  tfg_diag_free(d);
  return at_eof;
}

/* A located error about the meta command line src. */
static tfg_status meta_error(repl *r, const tfg_source *src, size_t off, size_t len, const char *msg,
                             const char *help) {
  tfg_loc l = tfg_source_loc(src, (uint32_t)off, (uint32_t)len);
  tfg_diag_error(r->d, &l, "%s", msg);
  if (help) tfg_diag_help(r->d, "%s", help);
  return TFG_ERR_USAGE;
}

/* Evaluates one complete input (text, first line numbered first_line + 1)
 * in mode. Returns its status, its diagnostics rendered. */
static tfg_status eval_input(repl *r, const char *text, size_t len, uint32_t first_line, input_mode mode) {
  const tfg_source *src = tfg_diag_add_source_at(r->d, "<stdin>", text, len, first_line);
  tfg_ast *prog = NULL;
  tfg_status st = src ? tfg_parse(src, r->d, &r->asts, &prog, NULL) : TFG_ERR_LIMIT;
  double t0 = now_seconds();
  if (st == TFG_OK && mode == MODE_TYPE) {
    if (prog->list.n != 1 || prog->list.head->kind != TFG_AST_EXPR_STMT) {
      tfg_loc l = prog->list.n ? prog->list.head->loc : tfg_source_loc(src, 0, 0);
      tfg_diag_error(r->d, &l, ":type takes one expression");
      st = TFG_ERR_USAGE;
    } else {
      /* Built to learn its type, then undone: nothing is computed or kept. */
      tfg_interp_mark m = tfg_interp_mark_now(r->I);
      tfg_value v;
      st = tfg_interp_eval_stmt(r->I, src, prog->list.head, &v);
      if (st == TFG_OK) {
        const tfg_loc *l = &prog->list.head->a->loc;
        tfg_strbuf b = {0};
        tfg_strbuf_printf(&b, "%.*s: ", (int)l->len, l->src->text + l->off);
        if (v.kind == TFG_V_TENSOR) {
          const tfg_node *n = &tfg_interp_program(r->I)->graph->nodes[v.u.tensor];
          tfg_shape_format(&b, n->dtype, &n->shape);
        } else {
          tfg_strbuf_puts(&b, tfg_vkind_name(v.kind));
        }
        tfg_strbuf_putc(&b, '\n');
        fwrite(b.data, 1, b.len, stdout);
        tfg_strbuf_free(&b);
        tfg_interp_rollback(r->I, &m);
        store_trim(r);
      }
    }
  } else if (st == TFG_OK) {
    st = eval_program(r, src, prog, true);
  }
  if (st == TFG_OK && mode == MODE_TIME) printf("time: %.3f ms\n", (now_seconds() - t0) * 1e3);
  flush_diags(r);
  return st;
}

/* While the session evaluates (an input, a :load, the FILE of `tfg repl
 * FILE`): Ctrl-C stops a train after its step (the input is then undone,
 * as a failed one) and otherwise ends the process; *saved gets what
 * SIGINT did before, which evaluated() puts back. */
static void evaluating(struct sigaction *saved) {
  sigaction(SIGINT, NULL, saved);
  if (saved->sa_handler == SIG_IGN) return; /* started ignoring it: keep that */
  signal(SIGINT, SIG_DFL);
  cli_catch_interrupts(true);
}

static void evaluated(const struct sigaction *saved) { sigaction(SIGINT, saved, NULL); }

/* Loads and evaluates a file into the session (`:load`, `tfg repl FILE`).
 * *opened is false when the file could not be read. */
static tfg_status load_file(repl *r, const char *path, bool *opened) {
  const tfg_source *src = tfg_diag_load(r->d, path);
  *opened = src != NULL;
  tfg_ast *prog = NULL;
  tfg_status st = src ? tfg_parse(src, r->d, &r->asts, &prog, NULL) : TFG_ERR_IO;
  struct sigaction saved;
  evaluating(&saved);
  if (st == TFG_OK) st = eval_program(r, src, prog, false);
  evaluated(&saved);
  flush_diags(r);
  return st;
}

/* Handles a meta command line (its first non-blank byte is ':'). Returns
 * its status, or sets *mode and *arg (the offset in line where the rest,
 * an input to evaluate, starts) for :type and :time; *quit for :quit. */
static tfg_status meta_command(repl *r, const char *line, size_t len, uint32_t lineno, input_mode *mode,
                               size_t *arg, bool *quit) {
  const tfg_source *src = tfg_diag_add_source_at(r->d, "<stdin>", line, len, lineno - 1);
  if (!src) return TFG_ERR_LIMIT;
  size_t at = 0;
  while (at < len && (line[at] == ' ' || line[at] == '\t')) at++;
  size_t w = at + 1, we = w;
  while (we < len && line[we] != ' ' && line[we] != '\t' && line[we] != '\0') we++;
  if (memchr(line, '\0', len))
    return meta_error(r, src, at, len - at, "a command line cannot hold a NUL byte", NULL);
  int m = meta_lookup(line + w, we - w);
  if (m == -2) {
    tfg_strbuf b = {0};
    tfg_strbuf_printf(&b, "':%.*s' is ambiguous:", (int)(we - w), line + w);
    for (int i = 0; i < NMETAS; i++)
      if (strncmp(metas[i].name, line + w, we - w) == 0) tfg_strbuf_printf(&b, " :%s", metas[i].name);
    tfg_status st = meta_error(r, src, at, we - at, b.data, "type more of its name");
    tfg_strbuf_free(&b);
    return st;
  }
  if (m < 0) {
    tfg_strbuf b = {0};
    tfg_strbuf_printf(&b, "unknown command ':%.*s'", (int)((we - w) > 40 ? 40 : we - w), line + w);
    tfg_status st = meta_error(r, src, at, we - at, b.data, "type :help for the commands");
    tfg_strbuf_free(&b);
    return st;
  }
  /* The argument: the rest of the line, blanks trimmed. */
  size_t as = we, ae = len;
  while (as < ae && (line[as] == ' ' || line[as] == '\t')) as++;
  while (ae > as && (line[ae - 1] == ' ' || line[ae - 1] == '\t' || line[ae - 1] == '\r')) ae--;
  const char *name = metas[m].name;
  bool takes_arg = !strcmp(name, "type") || !strcmp(name, "time") || !strcmp(name, "load") || !strcmp(name, "place");
  if (!takes_arg && as < ae) {
    tfg_strbuf b = {0};
    tfg_strbuf_printf(&b, ":%s takes no argument", name);
    tfg_status st = meta_error(r, src, as, ae - as, b.data, NULL);
    tfg_strbuf_free(&b);
    return st;
  }
  if (!strcmp(name, "type") || !strcmp(name, "time")) {
    if (as == ae) {
      tfg_strbuf b = {0};
      tfg_strbuf_printf(&b, ":%s needs %s", name, name[1] == 'y' ? "an expression" : "something to evaluate");
      tfg_status st = meta_error(r, src, at, we - at, b.data, NULL);
      tfg_strbuf_free(&b);
      return st;
    }
    *mode = name[1] == 'y' ? MODE_TYPE : MODE_TIME;
    *arg = we;
    return TFG_OK;
  }
  if (!strcmp(name, "load")) {
    if (as == ae) return meta_error(r, src, at, we - at, ":load needs a file name", NULL);
    char *path = strndup(line + as, ae - as);
    if (!path) abort();
    bool opened;
    tfg_status st = load_file(r, path, &opened);
    free(path);
    return st;
  }
  if (!strcmp(name, "place")) {
    const char *how = "";
    if (as < ae) {
      static const char *const flags[] = {"--explain", "--json", "--dot"};
      how = NULL;
      for (int i = 0; i < 3; i++)
        if (ae - as == strlen(flags[i]) && !memcmp(line + as, flags[i], ae - as)) how = flags[i];
      if (!how) return meta_error(r, src, as, ae - as, ":place takes --explain, --json or --dot", NULL);
    }
    return show_placement(r, how);
  }
  if (!strcmp(name, "plan")) return show_placement(r, "plan");
  if (!strcmp(name, "help")) {
    print_help();
  } else if (!strcmp(name, "graph")) {
    print_graph(r);
  } else if (!strcmp(name, "devices")) {
    tfg_devices *ds = devices_of(r, tfg_interp_program(r->I));
    if (!ds) return TFG_ERR_USAGE;
    tfg_strbuf out = {0};
    tfg_devices_describe(ds, &out);
    fwrite(out.data, 1, out.len, stdout);
    tfg_strbuf_free(&out);
  } else if (!strcmp(name, "reset")) {
    session_end(r);
    session_start(r);
  } else if (!strcmp(name, "quit")) {
    *quit = true;
  }
  return TFG_OK;
}

/* ---- internal errors ---------------------------------------------------------------- */
/* A broken invariant (TFG_ASSERT, base/assert.h) prints its report and
 * aborts. While the REPL handles a line, a failure on its own thread
 * jumps back here instead (tfg_assert_set_handler, which is per thread):
 * the line is undone like any failed input (the session rolled back to
 * its mark) and the session goes on, so a bug in tfg costs the input,
 * not the session. What the failed input had started (a plan, a runtime
 * session, its device threads and memory) is abandoned, never freed: it
 * may be in any state, and a device's worker may still hold it. A failure
 * on another thread (a device's worker) still ends the process, and so
 * does any abort() that is not tfg's own assertion. */

static sigjmp_buf guard_jmp;

static void on_internal_error(void) { siglongjmp(guard_jmp, 1); }

/* Calls fn(r, arg) (the handling of one line) under the guard above.
 * Returns fn's status, or TFG_ERR_DEVICE after an internal error (the
 * session rolled back, the diagnostics so far and a note printed). */
static tfg_status guarded(repl *r, tfg_status (*fn)(repl *, void *), void *arg) {
  struct sigaction old_int;
  tfg_interp *I = r->I;
  tfg_interp_mark mark = tfg_interp_mark_now(I);
  sigaction(SIGINT, NULL, &old_int); /* a :load's evaluating() changes it; a jump skips its evaluated() */
  if (sigsetjmp(guard_jmp, 1)) {
    sigaction(SIGINT, &old_int, NULL);
    if (r->I == I) {
      tfg_interp_rollback(r->I, &mark);
      store_trim(r);
    }
    fflush(stdout);
    tfg_diag_render(r->d, stderr, r->color);
    tfg_diag_clear(r->d);
    fprintf(stderr, "tfg: the input is undone and the session goes on\n");
    return TFG_ERR_DEVICE;
  }
  tfg_assert_set_handler(on_internal_error);
  cli_verbose_start();
  tfg_status st = fn(r, arg);
  tfg_assert_set_handler(NULL);
  return st;
}

/* The lines the loop hands to guarded(): a meta command, an input, the
 * FILE of `tfg repl FILE`. */
typedef struct line_call {
  const char *text;
  size_t len;
  uint32_t line;    /* the meta command's line number; an input's first line - 1 */
  input_mode *mode; /* in for an input, out for a meta command */
  size_t *arg;
  bool *quit, *opened;
} line_call;

static tfg_status call_meta(repl *r, void *c) {
  line_call *l = c;
  return meta_command(r, l->text, l->len, l->line, l->mode, l->arg, l->quit);
}

static tfg_status call_eval(repl *r, void *c) {
  line_call *l = c;
  return eval_input(r, l->text, l->len, l->line, *l->mode);
}

static tfg_status call_load(repl *r, void *c) {
  line_call *l = c;
  return load_file(r, l->text, l->opened);
}

/* ---- line editing ------------------------------------------------------------------ */

static repl *active; /* the session completion looks names up in (libedit has no context pointer) */
/* Written by the SIGINT handler, which may run on any thread that does not
 * block the signal (OpenBLAS's workers among them), and read by the main
 * one: an atomic, as train.c's stop flag; lock-free, so the handler may
 * store to it. */
static atomic_int interrupted;

static void on_sigint(int sig) {
  (void)sig;
  int saved = errno; /* a handler must leave errno as it found it */
  atomic_store(&interrupted, 1);
  errno = saved;
}

/* Ctrl-C at a prompt sets interrupted. SA_RESTART: an interrupted write
 * of libedit's to stdout must not leave stdout's error flag set (the exit
 * status would say the output failed); read_key polls, and poll is never
 * restarted. */
static void listen_sigint(struct sigaction *old) {
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, old);
}

/* libedit reads through this: an interrupt ends the read at once (as
 * end of input, which the loop then tells apart by the flag), where
 * libedit's own reader would retry the read. The flag is polled, not
 * left to EINTR: SIGINT goes to any thread of the process that does not
 * block it, and the kernels' worker threads (OpenBLAS's among them)
 * outlive the input that started them. */
static int read_key(FILE *f) {
  unsigned char c;
  struct pollfd pfd = {.fd = fileno(f), .events = POLLIN};
  for (;;) {
    if (atomic_load(&interrupted)) return EOF;
    int ready = poll(&pfd, 1, 100);
    if (ready < 0 && errno != EINTR) return EOF;
    if (ready <= 0) continue;
    ssize_t n = read(pfd.fd, &c, 1);
    if (n == 1) return c;
    if (n == 0 || errno != EINTR) return EOF;
  }
}

static const char *const keywords[] = {
    "import", "as", "let", "fn", "return", "param", "input", "from", "data", "with", "scope",
    "for", "in", "if", "else", "train", "print", "load", "true", "false", "none", "cpu", "gpu",
};

/* Completion candidates for the word being completed. */
typedef struct cands {
  char **v;
  int n, cap;
  const char *prefix; /* what each candidate must start with */
  size_t plen;
  const char *head;   /* "nn." when completing a module's members */
} cands;

static void cand_add(cands *c, const char *name) {
  size_t hl = c->head ? strlen(c->head) : 0;
  if (hl + strlen(name) < c->plen) return;
  /* head + name must start with prefix */
  if (hl && strncmp(c->prefix, c->head, hl) != 0) return;
  if (strncmp(name, c->prefix + hl, c->plen - hl) != 0) return;
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->v[i] + hl, name) == 0) return;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->v = realloc(c->v, sizeof *c->v * (size_t)c->cap);
    if (!c->v) abort();
  }
  char *s = malloc(hl + strlen(name) + 1);
  if (!s) abort();
  memcpy(s, c->head ? c->head : "", hl);
  strcpy(s + hl, name);
  c->v[c->n++] = s;
}

static void cand_name(void *ctx, const char *name, const tfg_value *v) {
  (void)v;
  cand_add(ctx, name);
}

static cands completions; /* the candidates rl_completion_matches hands out */
static int next_completion;

static char *completion_gen(const char *text, int state) {
  (void)text;
  if (state == 0) next_completion = 0;
  if (next_completion >= completions.n) return NULL;
  return strdup(completions.v[next_completion++]);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The file names that complete the path ending at word_end (its start
 * after the blanks at from), as the rest of text: libedit's word stops at
 * a '/' (an operator), so text is the last part of the path. Folders get
 * a '/'. */
static void complete_file(const char *word_end, const char *from, const char *text) {
  while (*from == ' ' || *from == '\t') from++;
  char *path = strndup(from, (size_t)(word_end - from) + strlen(text));
  if (!path) abort();
  size_t dir = strlen(path) - strlen(text);
  for (int state = 0;; state++) {
    char *m = rl_filename_completion_function(path, state);
    if (!m) break;
    struct stat st;
    if (strlen(m) >= dir) {
      tfg_strbuf b = {0};
      tfg_strbuf_puts(&b, m + dir);
      if (stat(m, &st) == 0 && S_ISDIR(st.st_mode)) tfg_strbuf_putc(&b, '/');
      cand_add(&completions, b.data);
      tfg_strbuf_free(&b);
    }
    free(m);
  }
  free(path);
}

/* Completes the word text (from start to end in rl_line_buffer): meta
 * commands at the start of a fresh input, file names after :load, a
 * module's members after `module.`, else the names in scope, builtins,
 * dtypes and keywords. */
static char **complete(const char *text, int start, int end) {
  (void)end;
  rl_attempted_completion_over = 1; /* never fall back to file names */
  rl_completion_append_character = '\0';
  for (int i = 0; i < completions.n; i++) free(completions.v[i]);
  completions.n = 0;
  completions.prefix = text;
  completions.plen = strlen(text);
  completions.head = NULL;
  int lead = 0;
  while (rl_line_buffer[lead] == ' ' || rl_line_buffer[lead] == '\t') lead++;
  bool meta_line = !active->continuing && rl_line_buffer[lead] == ':';
  if (meta_line && start == lead) {
    for (int i = 0; i < NMETAS; i++) {
      char name[32];
      snprintf(name, sizeof name, ":%s", metas[i].name);
      cand_add(&completions, name);
    }
    rl_completion_append_character = ' ';
  } else if (meta_line && strncmp(rl_line_buffer + lead, ":l", 2) == 0 && !strchr(rl_line_buffer + start, ' ')) {
    /* :load FILE (and its prefixes) */
    const char *sp = strpbrk(rl_line_buffer + lead, " \t");
    int m = sp ? meta_lookup(rl_line_buffer + lead + 1, (size_t)(sp - rl_line_buffer - lead - 1)) : -1;
    if (m >= 0 && !strcmp(metas[m].name, "load")) complete_file(rl_line_buffer + start, sp + 1, text);
  } else {
    const char *dot = strrchr(text, '.');
    if (dot) {
      /* members of a module: "nn.de" -> nn's names starting "de" */
      char *mod = strndup(text, (size_t)(dot - text));
      char *head = strndup(text, (size_t)(dot - text + 1));
      if (!mod || !head) abort();
      completions.head = head;
      tfg_interp_names(active->I, mod, cand_name, &completions);
      completions.head = NULL;
      free(mod);
      free(head);
    } else {
      tfg_interp_names(active->I, NULL, cand_name, &completions);
      for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++) cand_add(&completions, keywords[i]);
    }
  }
  if (completions.n == 0) return NULL;
  qsort(completions.v, (size_t)completions.n, sizeof *completions.v, cmp_str);
  return rl_completion_matches(text, completion_gen);
}

static void history_setup(repl *r) {
  const char *env = getenv("TFG_HISTFILE"), *home = getenv("HOME");
  if (env) {
    r->histfile = *env ? strdup(env) : NULL; /* empty: no history file */
  } else if (home && *home) {
    size_t n = strlen(home) + sizeof "/.tfg_history";
    r->histfile = malloc(n);
    if (r->histfile) snprintf(r->histfile, n, "%s/.tfg_history", home);
  }
  using_history();
  stifle_history(1000);
  if (r->histfile) read_history(r->histfile);
}

/* Reads a line: readline on a terminal (prompt shown, history kept),
 * getline otherwise. Returns the line (malloc'ed, no newline; *len its
 * length, which may include NUL bytes from a pipe) or NULL at the end of
 * input or on an interrupt (interrupted set). */
static char *read_line(repl *r, const char *prompt, size_t *len) {
  if (r->tty) {
    atomic_store(&interrupted, 0);
    char *line = readline(prompt);
    if (!line) return NULL;
    *len = strlen(line);
    if (*len && (!r->last_line || strcmp(r->last_line, line) != 0)) {
      add_history(line); /* each line, as typed; a repeat once */
      free(r->last_line);
      r->last_line = strdup(line);
      if (r->histfile) write_history(r->histfile);
    }
    return line;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, stdin);
  if (n < 0) {
    free(line);
    return NULL;
  }
  if (n > 0 && line[n - 1] == '\n') n--;
  *len = (size_t)n;
  return line;
}

/* ---- the loop ---------------------------------------------------------------------- */

int cli_repl(const cli_opts *o) {
  repl r = {0};
  r.o = o;
  r.tty = isatty(STDIN_FILENO);
  r.color = r.tty ? cli_color_mode(o->color) : (o->color && !strcmp(o->color, "always"));
  r.d = tfg_diag_new();
  r.io = (tfg_interp_opts){.sets = o->sets, .nsets = o->nsets, .path = cli_module_path(),
                           .stdlib_dir = cli_stdlib_dir(r.stdlib, sizeof r.stdlib)};
  session_start(&r);
  active = &r;

  int rc = 0;
  /* A bad --devices spec is bad usage, found before any input. */
  if (o->devices && !devices_of(&r, tfg_interp_program(r.I))) {
    flush_diags(&r);
    rc = EXIT_USAGE;
  }
  if (rc == 0 && o->file) {
    bool opened = true;
    if (guarded(&r, call_load, &(line_call){.text = o->file, .opened = &opened}) != TFG_OK) {
      if (!opened) rc = EXIT_USAGE;
      r.failed++;
    }
  }

  struct sigaction old_int;
  if (rc == 0 && r.tty) {
    setlocale(LC_CTYPE, ""); /* libedit edits UTF-8 by the locale */
    rl_readline_name = "tfg";
    rl_getc_function = read_key;
    rl_attempted_completion_function = complete;
    /* '.' and ':' stay in words: `nn.dense`, `:graph`. */
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,[+-*/%!";
    history_setup(&r);
    listen_sigint(&old_int);
  }

  tfg_strbuf buf = {0}; /* the input so far */
  uint32_t first_line = 0;
  size_t checked_lines = 0, checked_bytes = 0; /* the input when last checked for an end */
  input_mode mode = MODE_EVAL;
  bool quit = false;
  while (rc == 0 && !quit) {
    size_t len = 0;
    r.continuing = buf.len > 0;
    char *line = read_line(&r, r.continuing ? "...> " : "tfg> ", &len);
    if (!line && r.tty && atomic_load(&interrupted)) {
      /* Ctrl-C: drop the line and any unfinished input. */
      fputc('\n', stdout);
      tfg_strbuf_clear(&buf);
      mode = MODE_EVAL;
      continue;
    }
    if (!line) {
      if (buf.len) {
        /* The input ends unfinished: report it as the parser sees it. */
        line_call c = {.text = buf.data, .len = buf.len, .line = first_line, .mode = &mode};
        if (guarded(&r, call_eval, &c) != TFG_OK) r.failed++;
      }
      if (r.tty) fputc('\n', stdout);
      break;
    }
    r.lines++;
    if (!buf.len) {
      first_line = r.lines - 1;
      checked_lines = checked_bytes = 0;
      mode = MODE_EVAL;
      size_t at = 0;
      while (at < len && (line[at] == ' ' || line[at] == '\t' || line[at] == '\r')) at++;
      if (at == len) {
        free(line);
        continue;
      }
      if (line[at] == ':') {
        /* The session's graph may change under the command (reset,
         * load): the signal handler stays, sessions are made per input. */
        size_t arg = 0;
        line_call c = {.text = line, .len = len, .line = r.lines, .mode = &mode, .arg = &arg, .quit = &quit};
        tfg_status st = guarded(&r, call_meta, &c);
        flush_diags(&r);
        if (st != TFG_OK) r.failed++;
        if (st != TFG_OK || mode == MODE_EVAL) {
          free(line);
          continue;
        }
        /* :type / :time: the rest of the line is the input, the command
         * blanked out so columns stay those of the line as typed. */
        memset(line, ' ', arg);
      }
    }
    tfg_strbuf_putn(&buf, line, len);
    tfg_strbuf_putc(&buf, '\n');
    free(line);
    /* Each check parses the whole input so far. Typed input is checked at
     * every line; from a pipe, once an unfinished input is long, only when
     * it has doubled in lines or bytes since the last check, so a huge
     * block costs O(n log n), not O(n^2). Lines read past the end of a
     * statement then join its input: evaluated together, as if written
     * on one line with ';'. */
    uint32_t nlines = r.lines - first_line;
    if (!r.tty && (nlines > 256 || buf.len > (256u << 10)) && nlines < 2 * checked_lines &&
        buf.len < 2 * checked_bytes)
      continue;
    checked_lines = nlines;
    checked_bytes = buf.len;
    if (unfinished(buf.data, buf.len)) continue;
    struct sigaction saved;
    evaluating(&saved);
    line_call c = {.text = buf.data, .len = buf.len, .line = first_line, .mode = &mode};
    if (guarded(&r, call_eval, &c) != TFG_OK) r.failed++;
    evaluated(&saved);
    tfg_strbuf_clear(&buf);
    mode = MODE_EVAL;
  }
  tfg_strbuf_free(&buf);
  if (r.tty && rc == 0) {
    if (r.histfile) write_history(r.histfile);
    sigaction(SIGINT, &old_int, NULL);
  }
  for (int i = 0; i < completions.n; i++) free(completions.v[i]);
  free(completions.v);
  completions = (cands){0};
  active = NULL;
  free(r.histfile);
  free(r.last_line);
  session_end(&r);
  free(r.vals);
  tfg_devices_free(r.ds);
  tfg_diag_free(r.d);
  if (rc) return rc;
  return !r.tty && r.failed ? EXIT_PROGRAM : 0;
}
