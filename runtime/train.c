/* runtime/train.c: the training loop: batches, steps, progress,
 * evaluation and checkpoints.
 *
 * Everything a step depends on is a function of the step number: its
 * batch (epoch and position from the step), dropout masks (the step is in
 * their seed) and Adam's bias correction. So a run resumed from the
 * checkpoint of step k continues exactly as if it had never stopped. */
#include "runtime/train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "runtime/ckpt.h"

typedef struct cfg {
  int64_t steps, epochs, log_every, eval_every, checkpoint_every;
  uint64_t seed;
  const char *checkpoint;
  tfg_loc loc;
} cfg;

static int64_t int_setting(const tfg_action *a, const char *name, int64_t dflt) {
  for (int i = 0; i < a->nsettings; i++)
    if (strcmp(a->settings[i].name, name) == 0) return a->settings[i].value.u.i;
  return dflt;
}

static const char *str_setting(tfg_arena *arena, const tfg_action *a, const char *name) {
  for (int i = 0; i < a->nsettings; i++)
    if (strcmp(a->settings[i].name, name) == 0)
      return tfg_arena_strndup(arena, a->settings[i].value.u.str.s, a->settings[i].value.u.str.len);
  return NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The batching of the train action: the first dataset-fed input decides
 * the batch size and the rows per epoch (inputs from one dataset see the
 * same rows). */
typedef struct batching {
  const tfg_feed *feed; /* NULL: no dataset input (every step the same) */
  int64_t batch, per_epoch;
} batching;

static batching batching_of(const tfg_program *p) {
  batching b = {0};
  for (int i = 0; i < p->nfeeds; i++)
    if (p->feeds[i].ds) {
      b.feed = &p->feeds[i];
      b.batch = p->graph->nodes[p->feeds[i].node].shape.dim[0];
      b.per_epoch = tfg_data_rows(p->feeds[i].ds, p->feeds[i].split) / b.batch;
      break;
    }
  return b;
}

static double scalar_value(const tfg_tensor *t) {
  switch (t->dtype) {
  case TFG_DTYPE_F64: return *(const double *)t->data;
  case TFG_DTYPE_F32: return *(const float *)t->data;
  default: TFG_ASSERT(!"a loss or metric that is not f32 or f64 (the interpreter checks)"); return 0;
  }
}

/* "accuracy" for a metric's source text: the op's name suits a log line. */
static const char *metric_name(const tfg_program *p, tfg_node_id id) {
  return tfg_op_get(p->graph->nodes[id].op)->name;
}

/* ---- checkpoints ------------------------------------------------------------ */

/* The persistent tensors of a step, its params then their state, in a
 * new array (caller frees) of *count entries. */
static tfg_ckpt_entry *ckpt_entries(tfg_session *s, const tfg_program *p, const tfg_train_step *st, int *count) {
  tfg_ckpt_entry *e = malloc(sizeof *e * (size_t)(st->nparams + st->nstates + 1));
  TFG_ASSERT(e != NULL);
  int n = 0;
  for (int i = 0; i < st->nparams; i++) {
    const tfg_node *nd = &p->graph->nodes[st->params[i]];
    e[n++] = (tfg_ckpt_entry){nd->name, nd->dtype, nd->shape, tfg_session_storage(s, st->params[i])};
  }
  for (int i = 0; i < st->nstates; i++) {
    const tfg_node *nd = &p->graph->nodes[st->states[i]];
    e[n++] = (tfg_ckpt_entry){nd->name, nd->dtype, nd->shape, tfg_session_storage(s, st->states[i])};
  }
  *count = n;
  return e;
}

static tfg_status save(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c, int64_t step,
                       tfg_diag *d) {
  int n;
  tfg_ckpt_entry *e = ckpt_entries(s, p, st, &n);
  char stepbuf[32];
  snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
  tfg_ckpt_meta meta[] = {{"step", stepbuf}, {"optimizer", st->optimizer}, {"format", "tfg " TFG_VERSION}};
  tfg_status r = tfg_ckpt_save(d, &c->loc, c->checkpoint, e, n, meta, 3);
  free(e);
  return r;
}

/* Restores params and optimizer state from c->checkpoint when it exists;
 * *step is the step it was written at (0 for a params-only file). */
static tfg_status restore(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c,
                          int64_t *step, tfg_diag *d, FILE *log) {
  *step = 0;
  if (access(c->checkpoint, F_OK) != 0) return TFG_OK;
  tfg_ckpt *k = NULL;
  tfg_status r = tfg_ckpt_load(d, &c->loc, c->checkpoint, &k);
  if (r != TFG_OK) return r;
  int n, fresh = 0;
  tfg_ckpt_entry *e = ckpt_entries(s, p, st, &n);
  for (int i = 0; i < n && r == TFG_OK; i++) {
    bool is_state = i >= st->nparams;
    int at = tfg_ckpt_find(k, e[i].name);
    if (at < 0) {
      if (is_state) { /* a params-only file (from PyTorch, say): state starts fresh */
        fresh++;
        continue;
      }
      tfg_diag_error(d, &c->loc, "checkpoint %s has no tensor '%s' for the param of that name", c->checkpoint,
                     e[i].name);
      r = TFG_ERR_DATA;
      break;
    }
    const tfg_ckpt_entry *t = tfg_ckpt_entry_at(k, at);
    if (t->dtype != e[i].dtype || !tfg_shape_eq(&t->shape, &e[i].shape)) {
      tfg_strbuf want = {0}, got = {0};
      tfg_shape_format(&want, e[i].dtype, &e[i].shape);
      tfg_shape_format(&got, t->dtype, &t->shape);
      tfg_diag_error(d, &c->loc, "checkpoint %s: '%s' is %s but the program's is %s", c->checkpoint, e[i].name, got.data,
                     want.data);
      tfg_strbuf_free(&want);
      tfg_strbuf_free(&got);
      r = TFG_ERR_DATA;
      break;
    }
    memcpy((void *)e[i].data, t->data, (size_t)tfg_shape_numel(&t->shape) * tfg_dtype_size(t->dtype));
  }
  const char *sv = tfg_ckpt_meta_get(k, "step");
  if (r == TFG_OK && sv && fresh == 0) {
    char *end;
    errno = 0;
    long long v = strtoll(sv, &end, 10);
    if (errno || *end || v < 0) {
      tfg_diag_error(d, &c->loc, "checkpoint %s: its step '%s' is not a number", c->checkpoint, sv);
      r = TFG_ERR_DATA;
    } else {
      *step = v;
    }
  }
  if (r == TFG_OK)
    fprintf(log, "restored %s: %d tensors%s, step %" PRId64 "\n", c->checkpoint, n - fresh,
            fresh ? ", optimizer state fresh" : "", *step);
  free(e);
  tfg_ckpt_free(k);
  return r;
}

/* ---- evaluation -------------------------------------------------------------- */

/* Loss and metrics on the test split, averaged over its batches (the last
 * batch wraps around to the split's start: shapes are static). */
static tfg_status evaluate(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const batching *b,
                           int64_t step, FILE *log, tfg_diag *d) {
  int64_t rows = tfg_data_rows(b->feed->ds, TFG_SPLIT_TEST);
  if (rows == 0) return TFG_OK;
  int64_t batches = (rows + b->batch - 1) / b->batch;
  int nf = 1 + st->nmetrics;
  tfg_node_id *fetch = malloc(sizeof *fetch * (size_t)nf);
  tfg_tensor *out = malloc(sizeof *out * (size_t)nf);
  double *sum = calloc((size_t)nf, sizeof *sum);
  TFG_ASSERT(fetch && out && sum);
  fetch[0] = st->loss;
  for (int i = 0; i < st->nmetrics; i++) fetch[1 + i] = st->metrics[i];
  tfg_status r = TFG_OK;
  for (int64_t k = 0; k < batches && r == TFG_OK; k++) {
    tfg_run_opts ro = {.split = TFG_SPLIT_TEST, .first = k * b->batch};
    r = tfg_session_run_with(s, fetch, nf, out, &ro);
    for (int i = 0; r == TFG_OK && i < nf; i++) sum[i] += scalar_value(&out[i]);
  }
  if (r == TFG_OK) {
    fprintf(log, "eval  step %" PRId64 "  test loss %.4f", step, sum[0] / (double)batches);
    for (int i = 0; i < st->nmetrics; i++)
      fprintf(log, "  %s %.4f", metric_name(p, st->metrics[i]), sum[1 + i] / (double)batches);
    fprintf(log, "  (%" PRId64 " rows)\n", rows);
  }
  free(fetch);
  free(out);
  free(sum);
  (void)d;
  return r;
}

/* ---- the loop ------------------------------------------------------------------- */

tfg_status tfg_train(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                     const tfg_train_opts *o, tfg_diag *d) {
  tfg_arena arena;
  tfg_arena_init(&arena);
  cfg c = {.loc = a->loc};
  c.steps = int_setting(a, "steps", 0);
  c.epochs = int_setting(a, "epochs", 0);
  c.eval_every = int_setting(a, "eval_every", 0);
  c.checkpoint_every = int_setting(a, "checkpoint_every", 0);
  c.seed = (uint64_t)int_setting(a, "seed", 0);
  c.checkpoint = str_setting(&arena, a, "checkpoint");
  for (int i = 0; i < a->nsettings; i++)
    if (strcmp(a->settings[i].name, "strategy") == 0 && strcmp(a->settings[i].value.u.record->name, "single") != 0) {
      /* Never train differently from what the program asks. */
      tfg_diag_error(d, &a->settings[i].loc, "strategy %s needs the multi-device runtime, which tfg %s does not have",
                     a->settings[i].value.u.record->name, TFG_VERSION);
      tfg_diag_help(d, "train on one device: strategy = single() (or leave strategy out)");
      tfg_arena_free(&arena);
      return TFG_ERR_DEVICE;
    }
  batching b = batching_of(p);
  tfg_status r = TFG_OK;
  if (c.epochs) {
    if (!b.feed || b.per_epoch == 0) {
      tfg_diag_error(d, &a->loc, b.feed ? "the train split of %s has fewer rows than a batch" : "%s",
                     b.feed ? b.feed->ds_path : "epochs need an input fed from a dataset; give steps instead");
      tfg_arena_free(&arena);
      return TFG_ERR_DATA;
    }
    c.steps = c.epochs * b.per_epoch;
  }
  c.log_every = int_setting(a, "log_every", c.steps >= 10 ? c.steps / 10 : 1);

  int64_t done = 0;
  if (c.checkpoint) r = restore(s, p, st, &c, &done, d, o->log);
  int nf = 1 + st->nmetrics + st->nupdates;
  tfg_node_id *fetch = malloc(sizeof *fetch * (size_t)nf);
  tfg_tensor *out = malloc(sizeof *out * (size_t)nf);
  double *sum = calloc((size_t)(1 + st->nmetrics), sizeof *sum);
  TFG_ASSERT(fetch && out && sum);
  fetch[0] = st->loss;
  for (int i = 0; i < st->nmetrics; i++) fetch[1 + i] = st->metrics[i];
  for (int i = 0; i < st->nupdates; i++) fetch[1 + st->nmetrics + i] = st->updates[i];

  double t0 = now(), tlog = t0;
  int64_t since = 0;
  for (int64_t k = done; k < c.steps && r == TFG_OK; k++) {
    tfg_run_opts ro = {.training = true, .step = k + 1, .seed = c.seed, .any_split = true};
    if (b.feed) {
      ro.epoch = k / b.per_epoch;
      ro.first = (k % b.per_epoch) * b.batch;
    }
    r = tfg_session_run_with(s, fetch, nf, out, &ro);
    if (r != TFG_OK) break;
    double loss = scalar_value(&out[0]);
    if (!isfinite(loss)) {
      tfg_diag_error(d, &a->loc, "step %" PRId64 ": the loss is %s", k + 1, isnan(loss) ? "NaN" : "infinite");
      tfg_diag_help(d, "run with --check-numerics to find the op that first produced it");
      r = TFG_ERR_NUMERIC;
      break;
    }
    sum[0] += loss;
    for (int i = 0; i < st->nmetrics; i++) sum[1 + i] += scalar_value(&out[1 + i]);
    since++;
    int64_t step = k + 1;
    bool last = step == c.steps;
    if (!o->quiet && (step % c.log_every == 0 || last)) {
      double t = now();
      fprintf(o->log, "step %" PRId64 "/%" PRId64 "  loss %.4f", step, c.steps, sum[0] / (double)since);
      for (int i = 0; i < st->nmetrics; i++)
        fprintf(o->log, "  %s %.4f", metric_name(p, st->metrics[i]), sum[1 + i] / (double)since);
      fprintf(o->log, "  %.1f steps/s\n", (double)since / (t - tlog > 1e-9 ? t - tlog : 1e-9));
      fflush(o->log);
      memset(sum, 0, sizeof *sum * (size_t)(1 + st->nmetrics));
      since = 0;
      tlog = t;
    } else if (o->tty && !o->quiet) {
      fprintf(o->log, "\rstep %" PRId64 "/%" PRId64 "  loss %.4f\r", step, c.steps, loss);
    }
    if (b.feed && c.eval_every && step % c.eval_every == 0 && !last) r = evaluate(s, p, st, &b, step, o->log, d);
    if (r == TFG_OK && c.checkpoint && ((c.checkpoint_every && step % c.checkpoint_every == 0) || last))
      r = save(s, p, st, &c, step, d);
  }
  if (r == TFG_OK && b.feed) r = evaluate(s, p, st, &b, c.steps, o->log, d);
  if (r == TFG_OK && !o->quiet && c.steps > done)
    fprintf(o->log, "trained %" PRId64 " steps in %.3f s\n", c.steps - done, now() - t0);
  free(fetch);
  free(out);
  free(sum);
  tfg_arena_free(&arena);
  return r;
}
