/* lang/interp_train.c: train statements (LANGUAGE.md section 6): the
 * loss and each setting checked where they are written, the settings
 * decoded once into the action's tfg_train_config (ir/program.h), and
 * the jobs of one group kept from sharing a param.
 *
 * The table of settings (train_settings) is the one place a setting's
 * name meets its field: a new setting is a field in tfg_train_config and
 * a row here (a count reuses decode_count). Later stages read the typed
 * config only; the language values of a setting end here. */
#include <errno.h>
#include <inttypes.h>
#include <fnmatch.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/file.h"
#include "io/data.h"
#include "lang/interp_impl.h"

/* The most steps a train may take, written as steps or as epochs times
 * the batches of an epoch; each cadence (log_every, eval_every,
 * checkpoint_every) is bounded by it too. 2^53: every count up to it is
 * exact in a double (Adam's bias correction raises b1 to the step) and
 * nothing the runtime derives from a step overflows int64; 2^53 steps
 * at a million a second would take 285 years. */
#define TRAIN_MAX_STEPS (INT64_C(1) << 53)

/* The params of p that tensors x and y both read (x == y: the params x
 * reads): the first in creation order, or -1; *count gets how many.
 * Walks inputs down from the larger id (ids are topological). */
static tfg_node_id params_read(const tfg_program *p, tfg_node_id x, tfg_node_id y, int *count) {
  const tfg_graph *g = p->graph;
  int32_t top = x > y ? x : y;
  uint8_t *mark = calloc((size_t)top + 1, 1);
  TFG_ASSERT(mark != NULL);
  mark[x] |= 1;
  mark[y] |= 2;
  for (int32_t i = top; i >= 0; i--)
    for (int k = 0; mark[i] && k < g->nodes[i].ninputs; k++) mark[g->nodes[i].inputs[k]] |= mark[i];
  tfg_node_id first = -1;
  *count = 0;
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i] <= top && mark[p->params[i]] == 3) {
      if (first < 0) first = p->params[i];
      (*count)++;
    }
  free(mark);
  return first;
}

/* ---- the optimizer and the strategy ---------------------------------------------- */

/* optimizer (opt) or strategy: a call of one of its constructors. A bare
 * constructor is its call without arguments (strategy = single, as
 * LANGUAGE.md section 6 writes it; optimizer = adam), so one that needs
 * an argument says which (optimizer = sgd: lr), located at the name.
 * v is the value expression e evaluated to. */
static const tfg_record *config_record(tfg_interp *I, bool opt, tfg_value v, const tfg_ast *e) {
  /* optimizers and strategies: the record builtins of family 1 and 0 (lang/builtins.c) */
  const tfg_builtin *b = v.kind == TFG_V_BUILTIN ? v.u.builtin
                         : v.kind == TFG_V_RECORD ? tfg_builtin_find(I, v.u.record->name)
                                                  : NULL;
  if (!b || !tfg_builtin_is_config(b, opt ? 1 : 0)) {
    const char *got = b ? b->name : tfg_vkind_name(v.kind);
    tfg_strbuf names = {0};
    tfg_builtin_config_names(I, opt ? 1 : 0, &names);
    tfg_diag_error(I->diag, &e->loc, "%s must be %s, got %s%s", opt ? "optimizer" : "strategy", names.data, got,
                   v.kind == TFG_V_RECORD ? "(...)" : "");
    tfg_strbuf_free(&names);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (v.kind == TFG_V_BUILTIN) v = tfg_builtin_call(I, v.u.builtin, e, NULL, NULL, 0, NULL, NULL, NULL, 0);
  return v.u.record;
}

/* The argument called name of configuration r, or NULL. */
static const tfg_value *record_arg(const tfg_record *r, const char *name) {
  for (int i = 0; i < r->nargs; i++)
    if (strcmp(r->arg_names[i], name) == 0) return &r->args[i];
  return NULL;
}

/* An optimizer's argument as lang/builtins.c checked and stored it where
 * the call is written (a float in its range, or a bool: nesterov), its
 * default filled in by the signature; 0 for one the optimizer has not. */
static double opt_arg(const tfg_record *r, const char *name) {
  const tfg_value *v = record_arg(r, name);
  if (!v) return 0;
  TFG_ASSERT(v->kind == TFG_V_FLOAT || v->kind == TFG_V_BOOL);
  return v->kind == TFG_V_FLOAT ? v->u.f : (double)v->u.b;
}

/* A float argument of a configuration and the field that stores it. */
typedef struct float_arg {
  const char *name;
  double *field;
} float_arg;

/* Stores each of the n arguments of r that args name in its field
 * (opt_arg: 0 for one r has not). */
static void read_float_args(const tfg_record *r, const float_arg *args, size_t n) {
  for (size_t i = 0; i < n; i++) *args[i].field = opt_arg(r, args[i].name);
}

/* What a value that cannot be a device is, in the words the strategy's
 * messages use ("mirrored: item 1 is an int, not a device"). */
static const char *devarg_what(tfg_vkind k) {
  switch (k) {
  case TFG_V_NONE: return "none";
  case TFG_V_BOOL: return "a bool";
  case TFG_V_INT: return "an int";
  case TFG_V_FLOAT: return "a float";
  case TFG_V_STRING: return "a string";
  case TFG_V_RANGE: return "a range";
  case TFG_V_TENSOR: return "a tensor";
  default: return "not a device";
  }
}

/* A strategy's device argument v (NULL: not given) as plain data: lists
 * copied whole, however deep, so that compiler/strategy.c can say what is
 * wrong with any item and cli/ can count the GPUs it names. */
static tfg_devarg devarg_of(tfg_interp *I, const tfg_value *v, const tfg_loc *at) {
  tfg_devarg d = {.kind = TFG_DEVARG_NONE, .loc = *at};
  if (!v || v->kind == TFG_V_NONE) return d; /* not given, or its default none */
  if (v->kind == TFG_V_INT) {
    d.kind = TFG_DEVARG_INT;
    d.i = v->u.i;
  } else if (v->kind == TFG_V_DEVICE) {
    d.kind = TFG_DEVARG_DEVICE;
    d.dev = v->u.dev;
  } else if (v->kind == TFG_V_LIST) {
    tfg_devarg *items = tfg_arena_alloc(&I->arena, sizeof *items * (size_t)(v->u.list.n ? v->u.list.n : 1));
    for (int32_t i = 0; i < v->u.list.n; i++) items[i] = devarg_of(I, &v->u.list.items[i], at);
    d.kind = TFG_DEVARG_LIST;
    d.n = v->u.list.n;
    d.items = items;
  } else {
    d.kind = TFG_DEVARG_OTHER;
    d.what = devarg_what(v->kind);
  }
  return d;
}

/* ---- the settings ------------------------------------------------------------------ */

struct train_setting;
/* Checks setting k (`name = value`), whose value evaluated to v, where it
 * is written, and stores it in c. */
typedef void (*decode_fn)(tfg_interp *I, const struct train_setting *ts, tfg_train_config *c, tfg_value v,
                          const tfg_ast *k);

typedef struct train_setting {
  const char *name;
  decode_fn decode;
  size_t field; /* a count: the offset of its int64_t in tfg_train_config */
} train_setting;

static void decode_optimizer(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                             const tfg_ast *k) {
  (void)ts;
  tfg_optimizer_config *o = &c->optimizer;
  const tfg_record *r = config_record(I, true, v, k->a);
  o->kind = strcmp(r->name, "sgd") == 0    ? TFG_OPTIMIZER_SGD
            : strcmp(r->name, "adam") == 0 ? TFG_OPTIMIZER_ADAM
                                           : TFG_OPTIMIZER_ADAMW;
  const float_arg args[] = {{"lr", &o->lr}, {"weight_decay", &o->weight_decay}, {"momentum", &o->momentum},
                            {"b1", &o->b1}, {"b2", &o->b2},                     {"eps", &o->eps}};
  read_float_args(r, args, sizeof args / sizeof args[0]);
  o->nesterov = opt_arg(r, "nesterov") != 0;
}

/* lr_schedule = constant() | linear(...) | cosine(...) | step(...): the
 * arguments were checked where the call is written (lang/builtins.c). */
static void decode_lr_schedule(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                               const tfg_ast *k) {
  (void)ts;
  static const char *const names[] = {"constant", "linear", "cosine", "step"};
  const char *got = v.kind == TFG_V_RECORD ? v.u.record->name : v.kind == TFG_V_BUILTIN ? v.u.builtin->name : NULL;
  int kind = -1;
  for (int i = 0; got && i < 4; i++)
    if (strcmp(got, names[i]) == 0) kind = i;
  if (kind < 0)
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "lr_schedule must be constant(), linear(...), cosine(...) or step(...), got %s",
                    got ? got : tfg_vkind_name(v.kind));
  if (v.kind == TFG_V_BUILTIN) v = tfg_builtin_call(I, v.u.builtin, k->a, NULL, NULL, 0, NULL, NULL, NULL, 0);
  const tfg_record *r = v.u.record;
  tfg_lr_schedule *s = &c->lr_schedule;
  s->kind = (tfg_lr_kind)kind;
  const float_arg args[] = {{"warmup", &s->warmup}, {"total", &s->total}, {"min", &s->min},
                            {"every", &s->every},   {"gamma", &s->gamma}};
  read_float_args(r, args, sizeof args / sizeof args[0]);
}

/* strategy = NAME(ARGS): every argument of the constructor's signature
 * as plain data (tfg_strategy_config). Its module (compiler/strategy/)
 * checks them, knowing what each strategy needs of them. */
static void decode_strategy(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                            const tfg_ast *k) {
  (void)ts;
  const tfg_record *r = config_record(I, false, v, k->a);
  tfg_strategy_config *s = &c->strategy;
  s->name = r->name;
  s->loc = r->loc;
  s->at = k->loc;
  tfg_devarg *args = tfg_arena_alloc(&I->arena, sizeof *args * (size_t)(r->nargs ? r->nargs : 1));
  for (int i = 0; i < r->nargs; i++) args[i] = devarg_of(I, &r->args[i], &r->loc);
  s->nargs = r->nargs;
  s->arg_names = r->arg_names;
  s->args = args;
}

/* epochs = n, at `at`: the first input fed from a dataset sets the batch
 * and the whole batches of an epoch (as runtime/train.c batches), so the
 * steps n epochs make are known where they are written. (The loss was
 * evaluated before its settings: the inputs it reads exist by now.) */
/* The input that decides a train's batches: the first fed from a dataset
 * (NULL: none). */
static const tfg_feed *batch_feed(const tfg_interp *I) {
  for (int i = 0; i < I->prog.nfeeds; i++)
    if (I->prog.feeds[i].ds) return &I->prog.feeds[i];
  return NULL;
}

/* The whole batches of an epoch (0 without a dataset input). */
static int64_t epoch_batches(const tfg_interp *I) {
  const tfg_feed *f = batch_feed(I);
  if (!f) return 0;
  const tfg_node *in = &I->prog.graph->nodes[f->node];
  int64_t batch = in->shape.rank ? in->shape.dim[0] : 0;
  return batch > 0 ? tfg_data_rows(f->ds, f->split) / batch : 0;
}

static void check_epochs(tfg_interp *I, int64_t n, const tfg_loc *at) {
  const tfg_feed *f = batch_feed(I);
  if (!f) {
    tfg_diag_error(I->diag, at, "epochs need an input fed from a dataset");
    tfg_diag_help(I->diag, "give steps = N instead");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  const tfg_node *in = &I->prog.graph->nodes[f->node];
  int64_t rows = tfg_data_rows(f->ds, f->split), batch = in->shape.rank ? in->shape.dim[0] : 0;
  int64_t per = epoch_batches(I);
  if (per == 0)
    tfg_interp_fail(I, TFG_ERR_DATA, at, "an epoch of input %s has no whole batch: %" PRId64 " rows, a batch of %" PRId64,
                    in->name, rows, batch);
  if (n > TRAIN_MAX_STEPS / per) {
    tfg_diag_error(I->diag, at, "%" PRId64 " epochs of %" PRId64 " batches are %.4g steps, more than the 2^53 (%" PRId64
                   ") a train may take", n, per, (double)n * (double)per, TRAIN_MAX_STEPS);
    tfg_diag_note(I->diag, &in->loc, "an epoch: the %" PRId64 " rows input %s reads, in whole batches of %" PRId64, rows,
                  in->name, batch);
    tfg_interp_unwind(I, TFG_ERR_LIMIT);
  }
}

/* A count called n, at `at`: an integer (a float with a whole value too,
 * as wherever tfg needs an integer); a count of steps or epochs is at
 * least 1 and at most TRAIN_MAX_STEPS, the seed at least 0. */
static int64_t count_of(tfg_interp *I, const char *n, tfg_value v, const tfg_loc *at) {
  bool seed = strcmp(n, "seed") == 0, epochs = strcmp(n, "epochs") == 0;
  if (v.kind == TFG_V_FLOAT && v.u.f == floor(v.u.f) && fabs(v.u.f) < 9e18) v = tfg_val_int((int64_t)v.u.f);
  if (v.kind == TFG_V_FLOAT)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "%s must be an integer, got %g", n, tfg_interp_shown(v.u.f));
  if (v.kind != TFG_V_INT)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "%s must be an integer (%s), got %s", n,
                    seed ? "a random seed" : epochs ? "a number of epochs" : "a number of steps", tfg_vkind_name(v.kind));
  int64_t x = v.u.i;
  if (seed ? x < 0 : x < 1)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "%s must be a %s integer, got %" PRId64, n, seed ? "non-negative" : "positive", x);
  if (!seed && x > TRAIN_MAX_STEPS)
    tfg_interp_fail(I, TFG_ERR_LIMIT, at, "%s must be at most 2^53 (%" PRId64 "), got %" PRId64, n, TRAIN_MAX_STEPS, x);
  if (epochs) check_epochs(I, x, at);
  return x;
}

/* steps, epochs, a cadence, the seed: the count in its field. */
static void decode_count(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v, const tfg_ast *k) {
  *(int64_t *)(void *)((char *)c + ts->field) = count_of(I, ts->name, v, &k->a->loc);
}

/* eval_every = n: a count, and something to evaluate. The run evaluates
 * the test split of the dataset that the train's batch input reads
 * (batch_feed; runtime/train.c), and skips evaluation when there is no
 * such input or its test split is empty, so the setting would be ignored
 * silently: a setting that does nothing is more likely a mistake (a
 * dataset without `test = ...`) than a choice, so it is refused here. */
static void decode_eval_every(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                              const tfg_ast *k) {
  decode_count(I, ts, c, v, k);
  const tfg_feed *f = batch_feed(I);
  if (!f) {
    tfg_diag_error(I->diag, &k->loc,
                   "eval_every needs an input fed from a dataset: it evaluates the dataset's test split");
    tfg_diag_help(I->diag, "feed the loss from a dataset with a test fraction, such as "
                           "data d = csv(\"f.csv\", label = -1, test = 0.2), or remove eval_every");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (tfg_data_rows(f->ds, TFG_SPLIT_TEST) > 0) return;
  const tfg_node *in = &I->prog.graph->nodes[f->node];
  tfg_diag_error(I->diag, &k->loc, "eval_every has no test split to evaluate: dataset '%s' holds out no rows",
                 f->ds_path);
  tfg_diag_note(I->diag, &in->loc,
                "input %s reads it: the first input fed from a dataset decides what a train evaluates", in->name);
  tfg_diag_help(I->diag,
                "give the dataset a test fraction (test = 0.2 holds out a fifth of its rows), or remove eval_every");
  tfg_interp_unwind(I, TFG_ERR_NAME);
}

/* no_decay = ["*.b", ...]: a list of name patterns (fnmatch: * ? [...]);
 * one that matches no param of the program is a warning (a typo would
 * otherwise decay what it meant to spare, silently). */
static void decode_no_decay(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                            const tfg_ast *k) {
  (void)ts;
  bool ok = v.kind == TFG_V_LIST;
  for (int32_t i = 0; ok && i < v.u.list.n; i++) ok = v.u.list.items[i].kind == TFG_V_STRING;
  if (!ok)
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "no_decay must be a list of param-name patterns, like [\"*.b\"]");
  const char **pats = tfg_arena_alloc(&I->arena, sizeof *pats * (size_t)(v.u.list.n ? v.u.list.n : 1));
  for (int32_t i = 0; i < v.u.list.n; i++) {
    const tfg_value *s = &v.u.list.items[i];
    pats[i] = tfg_interp_strdup(I, s->u.str.s, s->u.str.len);
    bool hit = false;
    for (int p = 0; p < I->prog.nparams && !hit; p++) {
      const char *name = I->prog.graph->nodes[I->prog.params[p]].name;
      hit = name && fnmatch(pats[i], name, 0) == 0;
    }
    if (!hit) tfg_diag_warning(I->diag, &k->a->loc, "no_decay pattern \"%s\" matches no param", pats[i]);
  }
  c->nno_decay = (int)v.u.list.n;
  c->no_decay = pats;
}

/* Setting k's value v, an integer from lo to hi; else an error at it:
 * "NAME must be WHAT, got ...". */
static int int_setting(tfg_interp *I, const tfg_ast *k, tfg_value v, int64_t lo, int64_t hi, const char *what) {
  if (v.kind != TFG_V_INT || v.u.i < lo || v.u.i > hi)
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "%s must be %s, got %s", k->name, what,
                    v.kind == TFG_V_INT ? "a number out of range" : tfg_vkind_name(v.kind));
  return (int)v.u.i;
}

/* zero = 0 .. 3 (ZeRO's stages; compiler/strategy/replicate.c says what
 * each builds and which this version has). */
static void decode_zero(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v, const tfg_ast *k) {
  (void)ts;
  c->zero = int_setting(I, k, v, 0, 3, "0, 1, 2 or 3 (ZeRO's stages)");
  c->zero_at = k->loc;
}

/* recompute = ["block", ...]: fns some call of which built the model
 * (a name no call has is an error, with the nearest called name), or
 * recompute = "auto". */
static void decode_recompute(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                             const tfg_ast *k) {
  (void)ts;
  c->recompute_at = k->loc;
  if (v.kind == TFG_V_STRING && v.u.str.len == 4 && memcmp(v.u.str.s, "auto", 4) == 0) {
    c->recompute_auto = true;
    return;
  }
  bool ok = v.kind == TFG_V_LIST && v.u.list.n > 0;
  for (int32_t i = 0; ok && i < v.u.list.n; i++) ok = v.u.list.items[i].kind == TFG_V_STRING;
  if (!ok)
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "recompute must be a list of fn names, like [\"block\"], or \"auto\"");
  const char **names = tfg_arena_alloc(&I->arena, sizeof *names * (size_t)v.u.list.n);
  for (int32_t i = 0; i < v.u.list.n; i++) {
    const tfg_value *sv = &v.u.list.items[i];
    names[i] = tfg_interp_strdup(I, sv->u.str.s, sv->u.str.len);
    const char *best = NULL;
    int bestd = 3;
    bool called = false;
    for (int32_t q = 0; q < I->prog.ncalls && !called; q++) {
      called = strcmp(I->prog.calls[q].fn, names[i]) == 0;
      int dist = tfg_interp_edit_distance(names[i], I->prog.calls[q].fn);
      if (dist < bestd) bestd = dist, best = I->prog.calls[q].fn;
    }
    if (called) continue;
    tfg_diag_error(I->diag, &k->a->loc, "recompute: no call of a fn named '%s' built the model", names[i]);
    if (best) tfg_diag_help(I->diag, "did you mean '%s'?", best);
    else tfg_diag_help(I->diag, "name a fn the model is built by calling, like the fn of a transformer block");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  c->nrecompute = (int)v.u.list.n;
  c->recompute = names;
}

/* clip_grad_norm = x: a positive finite number. NaN and inf are named
 * as such ("above 0" alone would not say what is wrong with inf). */
static void decode_clip(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v, const tfg_ast *k) {
  (void)ts;
  bool number = v.kind == TFG_V_INT || v.kind == TFG_V_FLOAT;
  double x = v.kind == TFG_V_INT ? (double)v.u.i : v.kind == TFG_V_FLOAT ? v.u.f : 0;
  if (number) tfg_interp_check_finite(I, x, "clip_grad_norm", &k->a->loc);
  if (!(x > 0))
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "clip_grad_norm must be a number above 0, the largest gradient norm");
  c->clip_grad_norm = x;
}

/* precision = f32 | bf16 | f16: a dtype name. */
static void decode_precision(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                             const tfg_ast *k) {
  (void)ts;
  if (v.kind != TFG_V_DTYPE ||
      (v.u.dtype != TFG_DTYPE_F32 && v.u.dtype != TFG_DTYPE_BF16 && v.u.dtype != TFG_DTYPE_F16))
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "precision must be f32, bf16 or f16, the dtype of the matrix products");
  c->precision = v.u.dtype;
  c->precision_at = k->loc;
}

/* accumulate = k: an integer from 1 to 2^20 (a step of more micro-batches
 * than that is a typo, not a plan). */
static void decode_accumulate(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                              const tfg_ast *k) {
  (void)ts;
  if (v.kind == TFG_V_FLOAT && v.u.f == floor(v.u.f) && fabs(v.u.f) < 9e18) v = tfg_val_int((int64_t)v.u.f);
  if (v.kind != TFG_V_INT || v.u.i < 1 || v.u.i > (1 << 20))
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc,
                    "accumulate must be an integer from 1 to 1048576, the micro-batches of an optimizer step");
  c->accumulate = (int)v.u.i;
  c->accumulate_at = k->loc;
}

/* micro_batches = m: the micro-batches a pipeline splits each replica's
 * batch into (whether the batch divides is the strategy's check, which
 * knows the replicas). */
static void decode_micro_batches(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                                 const tfg_ast *k) {
  (void)ts;
  c->micro_batches = int_setting(I, k, v, 1, 4096, "an integer from 1 to 4096");
  c->micro_batches_at = k->loc;
}

/* schedule = gpipe | 1f1b | interleaved(chunks = v): the schedule
 * builtins (family 3 of lang/builtins.c's records). */
static void decode_schedule(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                            const tfg_ast *k) {
  (void)ts;
  const tfg_builtin *b = v.kind == TFG_V_BUILTIN ? v.u.builtin
                         : v.kind == TFG_V_RECORD ? tfg_builtin_find(I, v.u.record->name)
                                                  : NULL;
  if (!b || !tfg_builtin_is_config(b, 3)) {
    tfg_strbuf names = {0};
    tfg_builtin_config_names(I, 3, &names);
    tfg_diag_error(I->diag, &k->a->loc, "schedule must be %s, got %s", names.data, b ? b->name : tfg_vkind_name(v.kind));
    tfg_strbuf_free(&names);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (v.kind == TFG_V_BUILTIN) v = tfg_builtin_call(I, v.u.builtin, k->a, NULL, NULL, 0, NULL, NULL, NULL, 0);
  const tfg_record *r = v.u.record;
  c->schedule.kind = strcmp(r->name, "gpipe") == 0 ? TFG_SCHEDULE_GPIPE
                     : strcmp(r->name, "1f1b") == 0 ? TFG_SCHEDULE_1F1B
                                                    : TFG_SCHEDULE_INTERLEAVED;
  c->schedule.chunks = 1;
  c->schedule.at = k->loc;
  const tfg_value *chunks = record_arg(r, "chunks");
  if (c->schedule.kind != TFG_SCHEDULE_INTERLEAVED) return;
  if (!chunks || chunks->kind != TFG_V_INT || chunks->u.i < 2 || chunks->u.i > 64)
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "interleaved: chunks must be an integer from 2 to 64, the stages each device holds");
  c->schedule.chunks = (int)chunks->u.i;
}

/* The names of n metrics written as the expression e: each item's source
 * text when e is a list literal (`[accuracy(l, y), accuracy(l * 2.0, y)]`
 * names its two "accuracy(l, y)" and "accuracy(l * 2.0, y)", where their
 * op names were both "accuracy"), else e's text indexed ("ms[0]"). */
static const char *const *metric_names(tfg_interp *I, const tfg_ast *e, int32_t n) {
  const char **names = tfg_arena_alloc(&I->arena, sizeof *names * (size_t)(n ? n : 1));
  const char *text = e->loc.src ? e->loc.src->text + e->loc.off : "";
  const tfg_ast *item = e->kind == TFG_AST_LIST && (int32_t)e->list.n == n ? e->list.head : NULL;
  for (int32_t i = 0; i < n; i++) {
    if (item && item->loc.src) {
      names[i] = tfg_interp_strdup(I, item->loc.src->text + item->loc.off, item->loc.len);
      item = item->next;
      continue;
    }
    tfg_strbuf b = {0};
    tfg_strbuf_printf(&b, "%.*s[%d]", (int)e->loc.len, text, (int)i);
    names[i] = tfg_interp_strdup(I, b.data, b.len);
    tfg_strbuf_free(&b);
  }
  return names;
}

static void decode_metrics(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                           const tfg_ast *k) {
  (void)ts;
  bool ok = v.kind == TFG_V_LIST;
  for (int32_t i = 0; ok && i < v.u.list.n; i++) {
    const tfg_value *m = &v.u.list.items[i];
    ok = m->kind == TFG_V_TENSOR && I->prog.graph->nodes[m->u.tensor].shape.rank == 0 &&
         tfg_dtype_is_float(I->prog.graph->nodes[m->u.tensor].dtype);
  }
  if (!ok)
    tfg_interp_fail(I, TFG_ERR_NAME, &k->a->loc, "metrics must be a list of float scalars, like [accuracy(logits, y)]");
  tfg_node_id *m = tfg_arena_alloc(&I->arena, sizeof *m * (size_t)(v.u.list.n ? v.u.list.n : 1));
  for (int32_t i = 0; i < v.u.list.n; i++) m[i] = v.u.list.items[i].u.tensor;
  c->nmetrics = (int)v.u.list.n;
  c->metrics = m;
  c->metric_names = metric_names(I, k->a, v.u.list.n);
}

/* What names the file path, the same for two spellings of one file: the
 * real path of its folder, then its name. The caller frees it. */
static char *file_key(const char *path) {
  char *dir = tfg_path_folder(path), *real = realpath(dir, NULL);
  const char *slash = strrchr(path, '/');
  tfg_strbuf b = {0};
  tfg_strbuf_printf(&b, "%s/%s", real ? real : dir, slash ? slash + 1 : path);
  free(real);
  free(dir);
  return tfg_strbuf_take(&b);
}

/* A file a run will write (what: "log"): its folder exists and can be
 * written, and it is not a folder itself. */
static void check_out_path(tfg_interp *I, const char *what, const char *path, const tfg_loc *at) {
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    tfg_interp_fail(I, TFG_ERR_DATA, at, "%s '%s' is not a regular file", what, path);
  char *dir = tfg_path_folder(path);
  int err = stat(dir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : access(dir, W_OK | X_OK) != 0 ? errno : 0;
  if (err == ENOENT) {
    tfg_diag_error(I->diag, at, "the folder '%s' of %s '%s' does not exist", dir, what, path);
    tfg_diag_help(I->diag, "create it first (mkdir -p %s)", dir);
  } else if (err) {
    tfg_diag_error(I->diag, at, "%s '%s' cannot be written in folder '%s': %s", what, path, dir, strerror(err));
  }
  free(dir);
  if (err) tfg_interp_unwind(I, TFG_ERR_DATA);
}

/* log = "run.csv": a file from the program's folder, written by the run
 * (runtime/train_log.h), checked here, before anything runs. */
static void decode_log(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v, const tfg_ast *k) {
  (void)ts;
  const tfg_loc *at = &k->a->loc;
  if (v.kind != TFG_V_STRING || v.u.str.len == 0)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "log must be a file name (a non-empty string), like \"run.csv\"");
  const char *path = tfg_interp_path(I, tfg_interp_strdup(I, v.u.str.s, v.u.str.len));
  check_out_path(I, "log", path, at);
  c->log = path;
  c->log_at = *at;
}

/* Refuses a checkpoint a save could not write, where it is written: so
 * before the first step, and in `tfg check`, not after the training. A
 * save writes PATH.tmp.PID beside PATH and renames it over PATH
 * (runtime/ckpt.c): the folder must exist and be writable; an existing
 * PATH must be a file we can read (a run resumes from it). A missing
 * folder is refused, not created, as torch.save refuses it: a typo in
 * the folder should not scatter new folders. */
static void check_ckpt_path(tfg_interp *I, const char *path, const tfg_loc *at) {
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode))
      tfg_interp_fail(I, TFG_ERR_DATA, at, "checkpoint '%s' is a folder: give a file name in it", path);
    if (!S_ISREG(sb.st_mode)) tfg_interp_fail(I, TFG_ERR_DATA, at, "checkpoint '%s' is not a regular file", path);
    if (access(path, R_OK) != 0)
      tfg_interp_fail(I, TFG_ERR_DATA, at, "checkpoint '%s' cannot be read to resume from it: %s", path, strerror(errno));
  }
  char *dir = tfg_path_folder(path);
  int err = stat(dir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : access(dir, W_OK | X_OK) != 0 ? errno : 0;
  if (err == ENOENT) {
    tfg_diag_error(I->diag, at, "the folder '%s' of checkpoint '%s' does not exist", dir, path);
    tfg_diag_help(I->diag, "create it first (mkdir -p %s): tfg does not create folders, as torch.save does not", dir);
  } else if (err == ENOTDIR) {
    tfg_diag_error(I->diag, at, "checkpoint '%s' cannot be written: '%s' is not a folder", path, dir);
  } else if (err) {
    tfg_diag_error(I->diag, at, "checkpoint '%s' cannot be written in folder '%s': %s", path, dir, strerror(err));
  }
  free(dir);
  if (err) tfg_interp_unwind(I, TFG_ERR_DATA);
}

/* checkpoint: a file name, from the program's folder like its data
 * files, that a save can write and no other train of the program writes
 * (the later job would resume from the earlier's file and overwrite it). */
static void decode_checkpoint(tfg_interp *I, const train_setting *ts, tfg_train_config *c, tfg_value v,
                              const tfg_ast *k) {
  (void)ts;
  const tfg_loc *at = &k->a->loc;
  if (v.kind != TFG_V_STRING)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "checkpoint must be a file name (a string), got %s", tfg_vkind_name(v.kind));
  if (v.u.str.len == 0)
    tfg_interp_fail(I, TFG_ERR_NAME, at, "checkpoint must not be empty: give a file name, like \"out/model.safetensors\"");
  const char *path = tfg_interp_path(I, tfg_interp_strdup(I, v.u.str.s, v.u.str.len));
  check_ckpt_path(I, path, at);
  char *key = file_key(path);
  for (int j = 0; j < I->prog.nactions; j++) {
    const tfg_action *o = &I->prog.actions[j];
    if (o->kind != TFG_ACTION_TRAIN || !o->config.checkpoint) continue;
    char *other = file_key(o->config.checkpoint);
    bool same = strcmp(key, other) == 0;
    free(other);
    if (!same) continue;
    free(key);
    tfg_diag_error(I->diag, at, "checkpoint '%s' is another train's checkpoint too: each would overwrite the other's", path);
    tfg_diag_note(I->diag, &o->config.checkpoint_at, "the other train's checkpoint");
    tfg_diag_help(I->diag, "give each train a checkpoint file of its own");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  free(key);
  c->checkpoint = path;
  c->checkpoint_at = k->loc;
}

/* Settings a train block may hold (LANGUAGE.md section 6), in the order
 * the "did you mean" suggestion tries them. */
static const train_setting train_settings[] = {
    {"optimizer", decode_optimizer, 0},
    {"lr_schedule", decode_lr_schedule, 0},
    {"clip_grad_norm", decode_clip, 0},
    {"accumulate", decode_accumulate, 0},
    {"precision", decode_precision, 0},
    {"no_decay", decode_no_decay, 0},
    {"steps", decode_count, offsetof(tfg_train_config, steps)},
    {"epochs", decode_count, offsetof(tfg_train_config, epochs)},
    {"strategy", decode_strategy, 0},
    {"micro_batches", decode_micro_batches, 0},
    {"schedule", decode_schedule, 0},
    {"zero", decode_zero, 0},
    {"recompute", decode_recompute, 0},
    {"log_every", decode_count, offsetof(tfg_train_config, log_every)},
    {"metrics", decode_metrics, 0},
    {"eval_every", decode_eval_every, offsetof(tfg_train_config, eval_every)},
    {"checkpoint", decode_checkpoint, 0},
    {"log", decode_log, 0},
    {"checkpoint_every", decode_count, offsetof(tfg_train_config, checkpoint_every)},
    {"seed", decode_count, offsetof(tfg_train_config, seed)},
};
#define NSETTINGS (sizeof train_settings / sizeof train_settings[0])

/* The row of setting k; an unknown name is an error, with the closest
 * name as a suggestion. */
static const train_setting *setting_row(tfg_interp *I, const tfg_ast *k) {
  for (size_t i = 0; i < NSETTINGS; i++)
    if (strcmp(k->name, train_settings[i].name) == 0) return &train_settings[i];
  tfg_loc l = k->loc;
  l.len = (uint32_t)strlen(k->name);
  tfg_diag_error(I->diag, &l, "unknown train setting '%s'", k->name);
  const char *best = NULL;
  int bestd = 3;
  for (size_t i = 0; i < NSETTINGS; i++) {
    int d = tfg_interp_edit_distance(k->name, train_settings[i].name);
    if (d < bestd) { bestd = d; best = train_settings[i].name; }
  }
  if (best) tfg_diag_help(I->diag, "did you mean '%s'?", best);
  else {
    tfg_strbuf all = {0};
    for (size_t i = 0; i < NSETTINGS; i++)
      tfg_strbuf_printf(&all, "%s%s", i == 0 ? "" : i + 1 == NSETTINGS ? " and " : ", ", train_settings[i].name);
    tfg_diag_help(I->diag, "the settings are %s", all.data);
    tfg_strbuf_free(&all);
  }
  tfg_interp_unwind(I, TFG_ERR_NAME);
}

/* ---- the files a train writes ------------------------------------------------------------ */

/* Whether paths a and b name one file: the same device and inode when
 * both exist (two spellings, a symlink, a hard link), else the same real
 * folder and name (file_key). */
static bool same_file(const char *a, const char *b) {
  if (tfg_file_same(a, b)) return true;
  char *ka = file_key(a), *kb = file_key(b);
  bool same = strcmp(ka, kb) == 0;
  free(ka);
  free(kb);
  return same;
}

/* Refuses output `what` of train a (its log or checkpoint, at `at`) when
 * it is a file the program reads (its source, a module, a data file, a
 * load file) or another output of a train: the run would replace the
 * program or its data, turn a good checkpoint into a CSV header, or
 * interleave two logs' rows. */
static void check_output(tfg_interp *I, const tfg_action *a, const char *what, const char *path, const tfg_loc *at) {
  const char *read = NULL, *kind = NULL;
  if (I->main.path && strcmp(I->main.path, "<stdin>") != 0 && same_file(path, I->main.path))
    read = I->main.path, kind = "the program's own source";
  for (int i = 0; !read && i < I->nmodules; i++)
    if (same_file(path, I->modules[i]->path)) read = I->modules[i]->path, kind = "a module the program imports";
  for (int i = 0; !read && i < I->ndatasets; i++)
    for (int col = 0; !read && col < tfg_data_ncolumns(I->datasets[i]->ds); col++) {
      const char *f = tfg_data_column_path(I->datasets[i]->ds, col);
      if (f && same_file(path, f)) read = f, kind = "a data file the program reads";
    }
  for (int i = 0; !read && i < I->prog.nloads; i++)
    if (same_file(path, I->prog.loads[i].path)) read = I->prog.loads[i].path, kind = "a file the program loads";
  if (read) {
    if (strcmp(path, read) == 0)
      tfg_diag_error(I->diag, at, "%s '%s' is %s: the run would overwrite it", what, path, kind);
    else /* another spelling of it */
      tfg_diag_error(I->diag, at, "%s '%s' is %s, '%s': the run would overwrite it", what, path, kind, read);
    tfg_diag_help(I->diag, "give the %s a file of its own", what);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  /* this train's other output, then every earlier train's (checkpoints
   * against checkpoints are decode_checkpoint's) */
  const tfg_train_config *c = &a->config;
  if (strcmp(what, "log") == 0 && c->checkpoint && same_file(path, c->checkpoint)) {
    tfg_diag_error(I->diag, at, "log '%s' is this train's checkpoint too: the log's rows would replace it", path);
    tfg_diag_note(I->diag, &c->checkpoint_at, "the checkpoint");
    tfg_diag_help(I->diag, "give the log a file of its own, like \"run.csv\"");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  for (int j = 0; j < I->prog.nactions; j++) {
    const tfg_train_config *o = &I->prog.actions[j].config;
    if (I->prog.actions[j].kind != TFG_ACTION_TRAIN) continue;
    const char *other = NULL, *owhat = NULL;
    const tfg_loc *oat = NULL;
    if (o->log && same_file(path, o->log)) other = o->log, owhat = "log", oat = &o->log_at;
    else if (strcmp(what, "log") == 0 && o->checkpoint && same_file(path, o->checkpoint))
      other = o->checkpoint, owhat = "checkpoint", oat = &o->checkpoint_at;
    if (!other) continue;
    tfg_diag_error(I->diag, at, "%s '%s' is another train's %s too: %s", what, path, owhat,
                   strcmp(owhat, "log") == 0 && strcmp(what, "log") == 0 ? "their rows would interleave or replace each other"
                                                                         : "each would overwrite the other's");
    tfg_diag_note(I->diag, oat, "the other train's %s", owhat);
    tfg_diag_help(I->diag, "give each train's %s a file of its own", what);
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
}

/* ---- the statement ------------------------------------------------------------------- */

/* Whether strategy s is asynchronous: parameter_server's workers push
 * their gradients as they come, with no step they all share. */
static bool asynchronous(const tfg_strategy_config *s) { return strcmp(s->name, "parameter_server") == 0; }

/* Whether train action a runs alone, not in its group: a parameter_server
 * job has sessions of its own (cli/main.c runs it by itself). */
static bool runs_alone(const tfg_action *a) { return asynchronous(&a->config.strategy); }

/* The jobs of one group (consecutive train actions, but for a job that
 * runs alone) train at the same time, so two may not share a param
 * (LANGUAGE.md section 6): both would update it in one step. a is the
 * new job, not yet among the program's actions. */
static void check_group(tfg_interp *I, const tfg_action *a) {
  for (int j = I->prog.nactions - 1; j >= 0 && !runs_alone(a); j--) {
    const tfg_action *b = &I->prog.actions[j];
    if (b->kind != TFG_ACTION_TRAIN || runs_alone(b)) return;
    int n;
    tfg_node_id w = params_read(&I->prog, a->loss, b->loss, &n);
    if (w < 0) continue;
    tfg_loc here = a->loc, there = b->loc;
    here.len = there.len = 5; /* the keyword */
    if (n > 1)
      tfg_diag_error(I->diag, &here, "param '%s' (and %d more) would be trained by two jobs at once",
                     I->prog.graph->nodes[w].name, n - 1);
    else
      tfg_diag_error(I->diag, &here, "param '%s' would be trained by two jobs at once", I->prog.graph->nodes[w].name);
    tfg_diag_note(I->diag, &there, "the other job: consecutive train statements run together, and may not share a param");
    tfg_diag_help(I->diag, "give each job params of its own, or put a print between them to train one after the other");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
}

void tfg_interp_exec_train(tfg_interp *I, tfg_env *env, const tfg_ast *s) {
  tfg_value loss = tfg_interp_expr(I, env, s->a);
  if (loss.kind != TFG_V_TENSOR)
    tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "the loss must be a tensor, got %s", tfg_vkind_name(loss.kind));
  const tfg_node *ln = &I->prog.graph->nodes[loss.u.tensor];
  if (ln->shape.rank != 0 || !tfg_dtype_is_float(ln->dtype)) {
    tfg_strbuf b = {0};
    tfg_shape_format(&b, ln->dtype, &ln->shape);
    tfg_diag_error(I->diag, &s->a->loc, "the loss must be a float scalar, got %s", b.data);
    tfg_strbuf_free(&b);
    tfg_diag_help(I->diag, "reduce it first: mean(loss)");
    tfg_interp_unwind(I, TFG_ERR_SHAPE);
  }
  int nread;
  if (params_read(&I->prog, loss.u.tensor, loss.u.tensor, &nread) < 0)
    tfg_interp_fail(I, TFG_ERR_NAME, &s->a->loc, "the loss does not depend on any param: there is nothing to train");
  tfg_action a = {.kind = TFG_ACTION_TRAIN, .loc = s->loc, .loss = loss.u.tensor};
  tfg_train_config *c = &a.config;
  c->strategy = (tfg_strategy_config){.name = "single", .loc = s->loc};
  c->schedule = (tfg_schedule){.kind = TFG_SCHEDULE_1F1B, .chunks = 1};
  bool given[NSETTINGS] = {0};
  const tfg_ast *both = NULL; /* the second of steps and epochs */
  bool has_opt = false, has_len = false;
  for (const tfg_ast *k = s->list.head; k; k = k->next) {
    const train_setting *ts = setting_row(I, k);
    if (given[ts - train_settings]) tfg_interp_fail(I, TFG_ERR_NAME, &k->loc, "setting '%s' is given twice", k->name);
    given[ts - train_settings] = true;
    ts->decode(I, ts, c, tfg_interp_expr(I, env, k->a), k);
    has_opt |= ts->decode == decode_optimizer;
    if (strcmp(k->name, "steps") == 0 || strcmp(k->name, "epochs") == 0) {
      if (has_len) both = k;
      has_len = true;
    }
  }
  if (both) tfg_interp_fail(I, TFG_ERR_NAME, &both->loc, "give steps or epochs, not both");
  if (!has_opt || !has_len) {
    tfg_loc l = s->loc;
    l.len = 5; /* the keyword */
    tfg_diag_error(I->diag, &l, "a train block needs %s", !has_opt ? "an optimizer" : "steps or epochs");
    tfg_diag_help(I->diag, "for example: train loss { optimizer = adam(lr = 1e-3); steps = 500 }");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (c->precision == TFG_DTYPE_F16 && asynchronous(&c->strategy)) {
    tfg_diag_error(I->diag, &c->precision_at, "precision = f16 needs a synchronous strategy");
    tfg_diag_note(I->diag, &c->strategy.loc, "parameter_server workers push gradients no grad scaler has checked");
    tfg_diag_help(I->diag, "use precision = bf16, which needs no loss scaling, or mirrored(...)");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (c->accumulate > 1 && asynchronous(&c->strategy)) {
    tfg_diag_error(I->diag, &c->accumulate_at, "accumulate needs a synchronous strategy");
    tfg_diag_note(I->diag, &c->strategy.loc, "parameter_server workers push every batch's gradients as they come");
    tfg_diag_help(I->diag, "use mirrored(...) or single(), or give each worker a larger batch");
    tfg_interp_unwind(I, TFG_ERR_NAME);
  }
  if (c->accumulate > 1 && c->epochs && c->epochs * epoch_batches(I) < c->accumulate)
    tfg_interp_fail(I, TFG_ERR_DATA, &c->accumulate_at,
                    "epochs = %" PRId64 " gives %" PRId64 " batches, fewer than the %d micro-batches of one step",
                    c->epochs, c->epochs * epoch_batches(I), c->accumulate);
  if (c->log) check_output(I, &a, "log", c->log, &c->log_at);
  if (c->checkpoint) check_output(I, &a, "checkpoint", c->checkpoint, &c->checkpoint_at);
  check_group(I, &a);
  tfg_interp_push_action(I, a);
}
