/* runtime/train.c: the training loop: batches, steps, progress,
 * evaluation and checkpoints.
 *
 * Everything a step depends on is a function of the step number: its
 * batch (epoch and position from the step), dropout masks (the step is in
 * their seed) and Adam's bias correction; or it is in the checkpoint (the
 * params, the optimizer state, an f16 grad scaler's state). So a run
 * resumed from the checkpoint of step k continues exactly as if it had
 * never stopped. */
#include "runtime/train.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/strbuf.h"
#include "compiler/plan.h"
#include "io/data.h"
#include "ir/ops.h"
#include "kernels/cast_math.h"
#include "kernels/optim_math.h"
#include "runtime/ckpt.h"
#include "runtime/mpi.h"
#include "runtime/train_log.h"

/* A job's settings as its run uses them (a->config, ir/program.h): the
 * steps epochs make, the cadence of its log lines resolved. */
typedef struct cfg {
  int64_t steps, epochs, log_every, eval_every, checkpoint_every;
  int accumulate; /* micro-batches per step, at least 1 */
  uint64_t seed;
  const char *checkpoint;
  tfg_loc loc;
} cfg;

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
  case TFG_DTYPE_F16: return tfg_cast_f16_to_f64(*(const uint16_t *)t->data);
  case TFG_DTYPE_BF16: return tfg_cast_bf16_to_f64(*(const uint16_t *)t->data);
  default: TFG_ASSERT(!"a loss or metric that is not a float (the interpreter checks)"); return 0;
  }
}

/* "accuracy" for a metric's source text: the op's name suits a log line. */
/* Metric i of train action a as progress lines, the log's header and so
 * tfg plot name it: its source text (tfg_train_config.metric_names), or,
 * for an action built without one, its op's name. */
static const char *metric_name(const tfg_program *p, const tfg_action *a, int i) {
  const tfg_train_config *c = &a->config;
  return c->metric_names ? c->metric_names[i] : tfg_op_get(p->graph->nodes[c->metrics[i]].op)->name;
}

/* ---- checkpoints ------------------------------------------------------------ */

/* The persistent tensors of a step, its params then their state, in a
 * new array (caller frees: ckpt_entries_free) of *count entries, each
 * with a host buffer of its own: filled from the session when read. */
static tfg_ckpt_entry *ckpt_entries(tfg_session *s, const tfg_program *p, const tfg_train_step *st, int *count,
                                    bool read) {
  tfg_ckpt_entry *e = malloc(sizeof *e * (size_t)(st->nparams + st->nstates + 1));
  TFG_ASSERT(e != NULL);
  int n = 0;
  for (int i = 0; i < st->nparams + st->nstates; i++) {
    tfg_node_id id = i < st->nparams ? st->params[i] : st->states[i - st->nparams];
    const tfg_node *nd = &p->graph->nodes[id];
    void *data = malloc((size_t)tfg_shape_numel(&nd->shape) * tfg_dtype_size(nd->dtype) + 1);
    TFG_ASSERT(data != NULL);
    if (read) tfg_session_read(s, id, data);
    e[n++] = (tfg_ckpt_entry){nd->name, nd->dtype, nd->shape, data};
  }
  *count = n;
  return e;
}

static void ckpt_entries_free(tfg_ckpt_entry *e, int n) {
  for (int i = 0; i < n; i++) free((void *)e[i].data);
  free(e);
}

/* The node of entry i of ckpt_entries. */
static tfg_node_id entry_node(const tfg_train_step *st, int i) {
  return i < st->nparams ? st->params[i] : st->states[i - st->nparams];
}

/* Copies replica 0's params and state into every mirror (after
 * initialization and after a restore): replicas start equal. */
static void sync_mirrors(tfg_session *s, const tfg_program *p, const tfg_train_step *st) {
  for (int i = 0; i < st->nmirrors; i++) {
    const tfg_node *nd = &p->graph->nodes[st->mirror_src[i]];
    void *v = malloc((size_t)tfg_shape_numel(&nd->shape) * tfg_dtype_size(nd->dtype) + 1);
    TFG_ASSERT(v != NULL);
    tfg_session_read(s, st->mirror_src[i], v);
    tfg_session_write(s, st->mirror_dst[i], v);
    free(v);
  }
}

/* precision = f16: a grad scaler's state in a checkpoint, as metadata
 * beside the step (PyTorch keeps GradScaler.state_dict() apart from the
 * model's and the optimizer's too): its scale, its count of good steps in
 * a row and of skipped steps (compiler/autodiff.h tfg_amp), each f32
 * written with 9 significant digits, which read back to the same bits. */
static const char *const scaler_keys[3] = {"grad_scaler.scale", "grad_scaler.growth_tracker", "grad_scaler.skipped"};

/* The scaler state node k (0: scale, 1: tracker, 2: skipped) of replica r. */
static tfg_node_id scaler_state(const tfg_program *p, const tfg_train_step *st, int r, int k) {
  const tfg_node *u = &p->graph->nodes[st->scalers[r]];
  return u->inputs[k == 0 ? 0 : k + 1]; /* AMP_UPDATE (scale, finite, tracker, skipped) */
}

static tfg_status save(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c, int64_t step,
                       tfg_diag *d) {
  if (tfg_mpi_rank() != 0) return TFG_OK; /* under mpirun, rank 0 writes for the job; every rank resumes from it */
  int n;
  tfg_ckpt_entry *e = ckpt_entries(s, p, st, &n, true);
  char stepbuf[32], scaler[3][32];
  snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
  tfg_ckpt_meta meta[6] = {{"step", stepbuf}, {"optimizer", st->optimizer}, {"format", "tfg " TFG_VERSION}};
  int nmeta = 3;
  for (int k = 0; k < 3 && st->nscalers > 0; k++) { /* replica 0's: every replica's moves alike */
    float v;
    tfg_session_read(s, scaler_state(p, st, 0, k), &v);
    snprintf(scaler[k], sizeof scaler[k], "%.9g", (double)v);
    meta[nmeta++] = (tfg_ckpt_meta){scaler_keys[k], scaler[k]};
  }
  tfg_status r = tfg_ckpt_save(d, &c->loc, c->checkpoint, e, n, meta, nmeta);
  ckpt_entries_free(e, n);
  return r;
}

/* After a restore of checkpoint k at *step: the grad scaler's state from
 * its metadata into every replica's, when the run has a scaler and the
 * file a state (a file without one, from an f32 run or PyTorch, leaves the
 * scaler fresh). The three keys come together and must agree with each
 * other and with the step, as a file tfg saved does: the scale a finite
 * number above 0, the counts whole numbers with skipped <= step and good
 * steps in a row <= step - skipped. Anything else (a key missing, no step,
 * more steps skipped than taken) is an error: a scaler resumed from it
 * would skip steps it should not, or fail later. */
static tfg_status restore_scaler(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c,
                                 const tfg_ckpt *k, int64_t step, tfg_diag *d) {
  int present = 0;
  for (int q = 0; q < 3; q++) present += tfg_ckpt_meta_get(k, scaler_keys[q]) != NULL;
  if (st->nscalers == 0 || present == 0) return TFG_OK;
  if (!tfg_ckpt_meta_get(k, "step")) {
    tfg_diag_error(d, &c->loc, "checkpoint %s: has a grad scaler's state but no step metadata", c->checkpoint);
    return TFG_ERR_DATA;
  }
  if (step == 0) return TFG_OK; /* the optimizer state starts fresh (tfg_ckpt_match): so does the scaler */
  float v[3];
  for (int q = 0; q < 3; q++) {
    const char *text = tfg_ckpt_meta_get(k, scaler_keys[q]);
    char *end = NULL;
    double x = text ? strtod(text, &end) : NAN;
    bool ok = text && end != text && *end == '\0' && isfinite(x) && (float)x == x &&
              (q == 0 ? x > 0 : x >= 0 && x == floor(x));
    if (!ok) {
      tfg_diag_error(d, &c->loc, "checkpoint %s: metadata %s is '%s', not %s", c->checkpoint, scaler_keys[q],
                     text ? text : "(missing)", q == 0 ? "a positive number" : "a whole number from 0");
      if (!text) tfg_diag_help(d, "a grad scaler's state is its three keys together, as tfg saves them");
      return TFG_ERR_DATA;
    }
    v[q] = (float)x;
  }
  if ((double)v[2] > (double)step || (double)v[1] > (double)step - (double)v[2]) {
    tfg_diag_error(d, &c->loc,
                   "checkpoint %s: its grad scaler skipped %.0f steps with %.0f good ones in a row, "
                   "more than its %" PRId64 " steps allow",
                   c->checkpoint, (double)v[2], (double)v[1], step);
    tfg_diag_help(d, "skipped steps are at most the step, and good steps in a row at most step - skipped");
    return TFG_ERR_DATA;
  }
  for (int r = 0; r < st->nscalers; r++)
    for (int q = 0; q < 3; q++) tfg_session_write(s, scaler_state(p, st, r, q), &v[q]);
  return TFG_OK;
}

/* Restores params and optimizer state from c->checkpoint when it exists;
 * *step is the step to resume at. What a file must hold, and when the
 * optimizer state starts fresh (at step 0), is tfg_ckpt_match's. */
static tfg_status restore(tfg_session *s, const tfg_program *p, const tfg_train_step *st, const cfg *c,
                          int64_t *step, tfg_diag *d, FILE *log) {
  *step = 0;
  if (access(c->checkpoint, F_OK) != 0) return TFG_OK;
  tfg_ckpt *k = NULL;
  tfg_status r = tfg_ckpt_load(d, &c->loc, c->checkpoint, &k);
  if (r != TFG_OK) return r;
  int n;
  tfg_ckpt_entry *e = ckpt_entries(s, p, st, &n, false);
  int *at = malloc(sizeof *at * (size_t)(n + 1));
  TFG_ASSERT(at != NULL);
  r = tfg_ckpt_match(d, &c->loc, c->checkpoint, k, e, n, st->nparams, st->optimizer, at, step);
  if (r == TFG_OK) r = restore_scaler(s, p, st, c, k, *step, d);
  int restored = 0;
  for (int i = 0; i < n && r == TFG_OK; i++) {
    if (at[i] < 0) continue;
    tfg_session_write(s, entry_node(st, i), tfg_ckpt_entry_at(k, at[i])->data);
    restored++;
  }
  if (r == TFG_OK)
    if (log) /* NULL: --quiet */
      fprintf(log, "restored %s: %d tensors%s, step %" PRId64 "\n", c->checkpoint, restored,
            restored < n ? ", optimizer state fresh" : "", *step);
  free(at);
  ckpt_entries_free(e, n);
  tfg_ckpt_free(k);
  return r;
}

/* ---- evaluation -------------------------------------------------------------- */

/* What a step reports: every replica's loss, then every replica's
 * metrics; means over the replicas (each saw an equal share of rows). */
typedef struct report {
  int n;            /* fetched: nreplicas * (1 + nmetrics) */
  tfg_node_id *fetch;
  tfg_tensor *out;
} report;

static report report_of(const tfg_train_step *st) {
  report r = {.n = st->nreplicas * (1 + st->nmetrics)};
  r.fetch = malloc(sizeof *r.fetch * (size_t)r.n);
  r.out = malloc(sizeof *r.out * (size_t)r.n);
  TFG_ASSERT(r.fetch && r.out);
  for (int k = 0; k < st->nreplicas; k++) r.fetch[k] = st->losses[k];
  for (int k = 0; k < st->nreplicas * st->nmetrics; k++) r.fetch[st->nreplicas + k] = st->replica_metrics[k];
  return r;
}

static void report_free(report *r) {
  free(r->fetch);
  free(r->out);
}

/* The mean over replicas of value v (0: the loss; 1 + k: metric k) in out. */
static double replica_mean(const tfg_train_step *st, const tfg_tensor *out, int v) {
  double sum = 0;
  for (int k = 0; k < st->nreplicas; k++)
    sum += scalar_value(&out[v == 0 ? k : st->nreplicas + k * st->nmetrics + (v - 1)]);
  return sum / st->nreplicas;
}

/* Loss and metrics on the test split: the mean of their values over the
 * split's rows, each row counted once. Shapes are static, so the `rest`
 * rows past the last whole batch cannot make a smaller batch (as a
 * DataLoader's last batch would be). For a loss or metric that is a mean
 * over the batch's rows (every builtin one is), a batch's value V is the
 * sum of its rows' values over B, so two more runs give the rest rows'
 * sum exactly: the rest rows with the last of them, x, repeated to fill
 * the batch (V1), and x alone, repeated (V2):
 *   sum over the rest rows = B * V1 - (B - rest) * V2,
 *   mean = (B * sum of whole batches' V + that) / rows. */
static tfg_status evaluate(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                           const batching *b,
                           int64_t step, const char *who, FILE *log) {
  int64_t rows = tfg_data_rows(b->feed->ds, TFG_SPLIT_TEST);
  if (rows == 0) return TFG_OK;
  int64_t B = b->batch, whole = rows / B, rest = rows % B;
  int nv = 1 + st->nmetrics;
  report rp = report_of(st);
  /* sum[i]: value i summed over the whole batches; tail[i]: its sum over the rest rows */
  double *sum = calloc((size_t)nv, sizeof *sum), *tail = calloc((size_t)nv, sizeof *tail);
  TFG_ASSERT(sum && tail);
  tfg_status r = TFG_OK;
  for (int64_t k = 0; k < whole && r == TFG_OK; k++) {
    tfg_run_opts ro = {.split = TFG_SPLIT_TEST, .first = k * B};
    r = tfg_session_run_with(s, rp.fetch, rp.n, rp.out, &ro);
    for (int i = 0; r == TFG_OK && i < nv; i++) sum[i] += replica_mean(st, rp.out, i);
  }
  if (rest > 0 && r == TFG_OK) {
    tfg_run_opts ro = {.split = TFG_SPLIT_TEST, .first = whole * B, .valid = rest};
    r = tfg_session_run_with(s, rp.fetch, rp.n, rp.out, &ro);
    for (int i = 0; r == TFG_OK && i < nv; i++) tail[i] = (double)B * replica_mean(st, rp.out, i);
    ro.first = whole * B + rest - 1; /* x alone */
    ro.valid = 1;
    if (r == TFG_OK) r = tfg_session_run_with(s, rp.fetch, rp.n, rp.out, &ro);
    for (int i = 0; r == TFG_OK && i < nv; i++) tail[i] -= (double)(B - rest) * replica_mean(st, rp.out, i);
  }
  if (r == TFG_OK) { /* under mpirun, the job's replicas all count (every rank gets here) */
    tfg_mpi_mean(sum, nv);
    tfg_mpi_mean(tail, nv);
  }
  if (r == TFG_OK && log) { /* log NULL: --quiet */
    for (int i = 0; i < nv; i++) sum[i] = ((double)B * sum[i] + tail[i]) / (double)rows;
    fprintf(log, "%seval  step %" PRId64 "  test loss %.4f", who, step, sum[0]);
    for (int i = 0; i < st->nmetrics; i++) fprintf(log, "  %s %.4f", metric_name(p, a, i), sum[1 + i]);
    fprintf(log, "  (%" PRId64 " rows)\n", rows);
  }
  free(tail);
  report_free(&rp);
  free(sum);
  return r;
}

/* ---- one job ---------------------------------------------------------------------- */

/* A train action of a group: its settings, batching and progress. */
typedef struct job {
  const tfg_action *a;
  const tfg_train_step *st;
  cfg c;
  batching b;
  char who[48];     /* "" alone; "train (line 12): " in a group */
  int64_t start;    /* the step restored from the checkpoint */
  int64_t done;     /* steps done */
  report rp;
  double *vals;     /* the step's loss and metrics: the mean over replicas and micro-batches */
  double *sum;      /* per value since the last log line */
  int64_t since;
  double tlog, t0;  /* the last log line; the start */
  double tbar;      /* the progress bar's last drawing (0: none yet) */
  bool bar_on;      /* the bar is on the screen */
  tfg_train_log *csv; /* log = "...": a row per logged step (rank 0's) */
  /* parameter_server */
  int64_t stale_sum, stale_max;
} job;

/* Reads a job's settings and restores its checkpoint. */
static tfg_status job_open(job *j, tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                           bool grouped, FILE *log, tfg_diag *d) {
  memset(j, 0, sizeof *j);
  j->a = a;
  j->st = st;
  cfg *c = &j->c;
  c->loc = a->loc;
  c->steps = a->config.steps;
  c->epochs = a->config.epochs;
  c->eval_every = a->config.eval_every;
  c->checkpoint_every = a->config.checkpoint_every;
  c->seed = (uint64_t)a->config.seed;
  c->checkpoint = a->config.checkpoint;
  c->accumulate = a->config.accumulate > 1 ? a->config.accumulate : 1;
  if (grouped) snprintf(j->who, sizeof j->who, "train (line %u): ", a->loc.line);
  j->b = batching_of(p);
  if (c->epochs) {
    /* The interpreter checked where epochs is written that an epoch has
     * whole batches and that the steps they make are at most 2^53. */
    TFG_ASSERT(j->b.feed && j->b.per_epoch > 0 && c->epochs <= INT64_MAX / j->b.per_epoch);
    c->steps = c->epochs * j->b.per_epoch / c->accumulate; /* and at least one: checked there too */
  }
  c->log_every = tfg_train_config_log_every(&a->config, c->steps);
  j->rp = report_of(st);
  j->sum = calloc((size_t)(1 + st->nmetrics), sizeof *j->sum);
  j->vals = calloc((size_t)(1 + st->nmetrics), sizeof *j->vals);
  TFG_ASSERT(j->sum && j->vals);
  j->t0 = now();
  tfg_status r = TFG_OK;
  if (s) {
    sync_mirrors(s, p, st);
    if (c->checkpoint) r = restore(s, p, st, c, &j->start, d, log);
    if (r == TFG_OK && j->start > c->steps) /* a run of more steps wrote it: this one trains none */
      tfg_diag_warning(d, &a->config.checkpoint_at,
                       "%s holds step %" PRId64 ", past this train's %" PRId64 " steps: nothing is trained",
                       c->checkpoint, j->start, c->steps);
    if (r == TFG_OK) sync_mirrors(s, p, st);
    j->done = j->start;
  }
  /* The log: checked writable by tfg check (it may have changed since);
   * rank 0's for the job. Made at the first row (runtime/train_log.h), so
   * a run that fails before it leaves the previous log; a resumed run
   * keeps the rows up to its checkpoint's step. */
  if (r == TFG_OK && a->config.log && tfg_mpi_rank() == 0) {
    tfg_strbuf h = {0};
    tfg_strbuf_puts(&h, "step,loss");
    for (int i = 0; i < st->nmetrics; i++) { /* a metric's source text, quoted: it may hold commas */
      tfg_strbuf_puts(&h, ",\"");
      for (const char *m = metric_name(p, a, i); *m; m++) {
        if (*m == '"') tfg_strbuf_putc(&h, '"');
        tfg_strbuf_putc(&h, *m);
      }
      tfg_strbuf_putc(&h, '"');
    }
    tfg_strbuf_puts(&h, ",lr,rows_per_s,seconds");
    j->csv = tfg_train_log_new(a->config.log, &a->config.log_at, h.data, j->start);
    tfg_strbuf_free(&h);
  }
  return r;
}

/* Frees j; closes its log (TFG_ERR_IO after an error if its last rows
 * could not be made durable). */
static tfg_status job_close(job *j, tfg_diag *d) {
  report_free(&j->rp);
  free(j->sum);
  free(j->vals);
  return tfg_train_log_close(j->csv, d);
}

/* The run options of micro-batch m of step k (both from 0) of job j: the
 * batches follow one another over the epochs, accumulate of them a step.
 * A micro-batch past the first draws its dropout masks from the seed
 * mixed with m (the step's own seed keeps the masks of a run without
 * accumulation). */
static tfg_run_opts step_opts(const job *j, int64_t k, int m) {
  tfg_run_opts ro = {.training = true, .step = k + 1, .seed = j->c.seed, .any_split = true};
  if (m > 0) ro.seed ^= 0x9E3779B97F4A7C15ull * (uint64_t)m;
  if (j->b.feed) {
    int64_t b = k * j->c.accumulate + m;
    ro.epoch = b / j->b.per_epoch;
    ro.first = (b % j->b.per_epoch) * j->b.batch;
  }
  return ro;
}

/* Adds one micro-batch's losses and metrics (in j->rp.out, each the mean
 * over the replicas, under mpirun every rank's) to the step's j->vals, as
 * their mean over the step's micro-batches; the step's first (m == 0)
 * starts them afresh. Every rank calls it for every micro-batch. */
static void job_take(job *j, int m) {
  int nv = 1 + j->st->nmetrics;
  double *mean = malloc(sizeof *mean * (size_t)nv);
  TFG_ASSERT(mean != NULL);
  for (int v = 0; v < nv; v++) mean[v] = replica_mean(j->st, j->rp.out, v);
  tfg_mpi_mean(mean, nv); /* under mpirun, over every rank's replicas */
  for (int v = 0; v < nv; v++) j->vals[v] = (m == 0 ? 0 : j->vals[v]) + mean[v] / (double)j->c.accumulate;
  free(mean);
}

/* "H:MM:SS" or "M:SS" of t seconds into buf. */
static const char *clock_text(double t, char buf[32]) {
  long long s = t > 0 && t < 1e9 ? (long long)(t + 0.5) : 0;
  if (s >= 3600) snprintf(buf, 32, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else snprintf(buf, 32, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

/* Terminal control: to the line's start, and the line cleared after it. */
#define BAR_CLEAR "\r\033[K"

/* The progress bar of a terminal, after step `step` (from 1) with this
 * loss: done and to do, the step, the loss, the rate and the time left
 * at that rate since the run (re)started. Drawn at most 10 times a
 * second, log lines or not (a fast loop would otherwise spend its time
 * on the terminal); a drawing stays until the next, a log line or the
 * end clears it. */
static void job_bar(job *j, int64_t step, double loss, FILE *log) {
  double t = now();
  if (j->tbar > 0 && t - j->tbar < 0.1) return;
  j->tbar = t;
  j->bar_on = true;
  enum { WIDTH = 24 };
  int64_t total = j->c.steps, done = step - j->start;
  int fill = total > 0 ? (int)((double)WIDTH * (double)step / (double)total) : WIDTH;
  double rate = t > j->t0 ? (double)done / (t - j->t0) : 0;
  char bar[WIDTH + 1], eta[32];
  for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(log, BAR_CLEAR "%s[%s] %" PRId64 "/%" PRId64 "  loss %.4f  %.1f steps/s  ETA %s", j->who, bar, step, total,
          loss, rate, rate > 0 ? clock_text((double)(total - step) / rate, eta) : "?");
  fflush(log);
}

/* Clears job j's progress bar from the terminal, when it is drawn. */
static void job_bar_clear(job *j, FILE *log) {
  if (!j->bar_on) return;
  fputs(BAR_CLEAR, log);
  fflush(log);
  j->bar_on = false;
}

/* Takes step k's losses and metrics (in j->vals): checks the loss,
 * accumulates, logs. */
static tfg_status job_account(job *j, const tfg_program *p, int64_t k, const tfg_train_opts *o, tfg_diag *d) {
  const tfg_train_step *st = j->st;
  double loss = j->vals[0];
  if (!isfinite(loss)) {
    tfg_diag_error(d, &j->a->loc, "step %" PRId64 ": the loss is %s", k + 1, isnan(loss) ? "NaN" : "infinite");
    tfg_diag_help(d, "run with --check-numerics to find the op that first produced it");
    return TFG_ERR_NUMERIC;
  }
  j->sum[0] += loss;
  for (int i = 0; i < st->nmetrics; i++) j->sum[1 + i] += j->vals[1 + i];
  j->since++;
  int64_t step = k + 1;
  bool last = step == j->c.steps;
  if ((!o->quiet || j->csv) && (step % j->c.log_every == 0 || last)) {
    double t = now(), rate = (double)j->since / (t - j->tlog > 1e-9 ? t - j->tlog : 1e-9);
    const tfg_lr_schedule *ls = &j->a->config.lr_schedule;
    tfg_lr_sched l = {j->a->config.optimizer.lr, ls->warmup, ls->total, ls->min, ls->every, ls->gamma, (int)ls->kind};
    double lr = tfg_lr_at(l, step); /* the lr this step's update used */
    if (!o->quiet) {
      job_bar_clear(j, o->log);
      fprintf(o->log, "%sstep %" PRId64 "/%" PRId64 "  loss %.4f", j->who, step, j->c.steps, j->sum[0] / (double)j->since);
      for (int i = 0; i < st->nmetrics; i++)
        fprintf(o->log, "  %s %.4f", metric_name(p, j->a, i), j->sum[1 + i] / (double)j->since);
      if (ls->kind != TFG_LR_CONSTANT) fprintf(o->log, "  lr %.4g", lr);
      fprintf(o->log, "  %.1f steps/s", rate);
      if (st->worker_grads)
        fprintf(o->log, "  staleness mean %.2f max %" PRId64, (double)j->stale_sum / (double)j->since, j->stale_max);
      fputc('\n', o->log);
      fflush(o->log);
    }
    tfg_status w = TFG_OK;
    if (j->csv) { /* rows/s: the batch's rows per step, when a dataset feeds them */
      tfg_strbuf row = {0};
      tfg_strbuf_printf(&row, "%" PRId64 ",%.9g", step, j->sum[0] / (double)j->since);
      for (int i = 0; i < st->nmetrics; i++) tfg_strbuf_printf(&row, ",%.9g", j->sum[1 + i] / (double)j->since);
      tfg_strbuf_printf(&row, ",%.9g,", lr);
      if (j->b.batch > 0) tfg_strbuf_printf(&row, "%.1f", rate * (double)(j->b.batch * j->c.accumulate));
      tfg_strbuf_printf(&row, ",%.3f", t - j->t0);
      w = tfg_train_log_row(j->csv, row.data, d);
      tfg_strbuf_free(&row);
    }
    memset(j->sum, 0, sizeof *j->sum * (size_t)(1 + st->nmetrics));
    j->since = 0;
    j->stale_sum = j->stale_max = 0;
    j->tlog = t;
    if (w != TFG_OK) return w;
  } else if (o->tty && !o->quiet) {
    job_bar(j, step, loss, o->log);
  }
  return TFG_OK;
}

/* After step k: evaluation and checkpoint when due. */
static tfg_status job_after(job *j, tfg_session *s, const tfg_program *p, int64_t k, const tfg_train_opts *o,
                            tfg_diag *d) {
  int64_t step = k + 1;
  bool last = step == j->c.steps;
  tfg_status r = TFG_OK;
  if (j->b.feed && j->c.eval_every && step % j->c.eval_every == 0 && !last) {
    if (!o->quiet) job_bar_clear(j, o->log);
    r = evaluate(s, p, j->a, j->st, &j->b, step, j->who, o->quiet ? NULL : o->log);
  }
  if (r == TFG_OK && j->c.checkpoint && ((j->c.checkpoint_every && step % j->c.checkpoint_every == 0) || last))
    r = save(s, p, j->st, &j->c, step, d);
  return r;
}

/* ---- interrupts ------------------------------------------------------------------- */

/* Lock-free atomics: async-signal-safe, so a SIGINT handler may stop a
 * train. active: a train is running; stop: it was asked to stop. */
static atomic_int train_active, train_stop;

bool tfg_train_interrupt(void) {
  if (!atomic_load(&train_active)) return false;
  int was = atomic_exchange(&train_stop, 1);
  return was == 0;
}

static void train_begin(void) {
  atomic_store(&train_stop, 0);
  atomic_store(&train_active, 1);
}

static void train_end(void) { atomic_store(&train_active, 0); }

/* A stop was asked for: job j stops after its step j->done, with its
 * checkpoint written when it has one and has made progress (the steps
 * since the last checkpoint are kept; after its last step it was written
 * already). Reported at the train statement;
 * TFG_ERR_INTERRUPTED, or the checkpoint's failure. */
static tfg_status interrupted(job *j, tfg_session *s, const tfg_program *p, tfg_diag *d) {
  tfg_status r = TFG_OK;
  bool saved = j->c.checkpoint && j->done > j->start;
  if (saved && j->done < j->c.steps) r = save(s, p, j->st, &j->c, j->done, d); /* the last step saved it already */
  if (r != TFG_OK) return r;
  tfg_diag_error(d, &j->c.loc, "training interrupted after step %" PRId64 " of %" PRId64, j->done, j->c.steps);
  if (saved)
    tfg_diag_note(d, NULL, "%s holds step %" PRId64 ": running again resumes from it", j->c.checkpoint, j->done);
  else if (j->c.checkpoint)
    tfg_diag_note(d, NULL, "%s is as it was", j->c.checkpoint);
  return TFG_ERR_INTERRUPTED;
}

/* ---- synchronous groups ------------------------------------------------------------- */

tfg_status tfg_train_group(tfg_session *s, const tfg_program *p, const tfg_action *const *a, const tfg_train_step *st,
                           int njobs, const tfg_train_opts *o, tfg_diag *d) {
  job *jobs = calloc((size_t)njobs, sizeof *jobs);
  TFG_ASSERT(jobs != NULL);
  tfg_status r = TFG_OK;
  int opened = 0;
  for (; opened < njobs && r == TFG_OK; opened++)
    r = job_open(&jobs[opened], s, p, a[opened], &st[opened], njobs > 1, o->quiet ? NULL : o->log, d);
  if (o->diag) tfg_diag_render(d, o->diag, o->color); /* before the first step (tfg_train_opts) */
  /* One run per step for the whole group: the jobs' ops run at once, each
   * job on its own devices. Jobs whose batches differ (another batch size
   * or dataset) cannot share a run's batch position: they take turns. */
  int64_t most = 0;
  int nf = 0;
  for (int i = 0; i < njobs; i++) {
    if (jobs[i].c.steps > most) most = jobs[i].c.steps;
    nf += jobs[i].rp.n + st[i].nupdates + st[i].nscalers;
  }
  tfg_node_id *fetch = malloc(sizeof *fetch * (size_t)(nf + 1));
  tfg_tensor *out = malloc(sizeof *out * (size_t)(nf + 1));
  TFG_ASSERT(fetch && out);
  double t0 = now();
  int64_t replays0 = tfg_session_replays(s);
  for (int i = 0; i < njobs; i++) jobs[i].tlog = t0;
  train_begin();
  for (int64_t k = 0; k < most && r == TFG_OK && !atomic_load(&train_stop); k++) {
    for (int first = 0; first < njobs && r == TFG_OK;) {
      /* the jobs due for step k that share first's batching */
      int n = 0, in_run[64], nin = 0;
      for (int i = first; i < njobs && nin < 64; i++) {
        job *j = &jobs[i];
        if (k < j->done || k >= j->c.steps) continue;
        const job *j0 = nin ? &jobs[in_run[0]] : j;
        if (j->b.feed != j0->b.feed || j->b.batch != j0->b.batch || j->c.accumulate != j0->c.accumulate) continue;
        in_run[nin++] = i;
      }
      if (nin == 0) break;
      /* accumulate = A: A runs, each on the next batch; the last applies
       * the updates, the others sum the gradients (compiler/autodiff.h) */
      int A = jobs[in_run[0]].c.accumulate;
      for (int m = 0; m < A && r == TFG_OK; m++) {
        n = 0;
        for (int q = 0; q < nin; q++) {
          const job *j = &jobs[in_run[q]];
          const tfg_node_id *w = m == A - 1 ? j->st->updates : m == 0 ? j->st->acc_first : j->st->acc_add;
          for (int e = 0; e < j->rp.n; e++) fetch[n++] = j->rp.fetch[e];
          for (int e = 0; e < j->st->nupdates; e++) fetch[n++] = w[e];
          for (int e = 0; m == A - 1 && e < j->st->nscalers; e++) fetch[n++] = j->st->scalers[e];
        }
        tfg_run_opts ro = step_opts(&jobs[in_run[0]], k, m);
        r = tfg_session_run_with(s, fetch, n, out, &ro);
        for (int q = 0, at = 0; q < nin && r == TFG_OK; q++) {
          job *j = &jobs[in_run[q]];
          memcpy(j->rp.out, out + at, sizeof *out * (size_t)j->rp.n);
          at += j->rp.n + j->st->nupdates + (m == A - 1 ? j->st->nscalers : 0);
          job_take(j, m);
        }
      }
      for (int q = 0; q < nin && r == TFG_OK; q++) {
        job *j = &jobs[in_run[q]];
        r = job_account(j, p, k, o, d);
        if (r == TFG_OK) r = job_after(j, s, p, k, o, d);
        jobs[in_run[q]].done = jobs[in_run[q]].done > k + 1 ? jobs[in_run[q]].done : k + 1;
      }
      /* the next turn starts after the last job this one took */
      int next = njobs;
      for (int i = first; i < njobs; i++) {
        bool taken = false;
        for (int q = 0; q < nin; q++) taken |= in_run[q] == i;
        bool due = jobs[i].done <= k && k < jobs[i].c.steps;
        if (!taken && due) {
          next = i;
          break;
        }
      }
      first = next;
    }
  }
  for (int i = 0; i < opened; i++) job_bar_clear(&jobs[i], o->log);
  /* Stopped (between steps, or during the last: the stop still ends the
   * run, before the final evaluation): every job reports where it is. */
  if (r == TFG_OK && atomic_load(&train_stop))
    for (int i = 0; i < njobs && (r == TFG_OK || r == TFG_ERR_INTERRUPTED); i++) r = interrupted(&jobs[i], s, p, d);
  train_end();
  int64_t replayed = tfg_session_replays(s) - replays0; /* steps replayed from CUDA Graphs (exec.h) */
  for (int i = 0; i < njobs && r == TFG_OK; i++)
    if (jobs[i].b.feed)
      r = evaluate(s, p, a[i], &st[i], &jobs[i].b, jobs[i].c.steps, jobs[i].who, o->quiet ? NULL : o->log);
  if (r == TFG_OK && !o->quiet && njobs == 1 && jobs[0].c.steps > jobs[0].start) {
    fprintf(o->log, "trained %" PRId64 " steps in %.3f s", jobs[0].c.steps - jobs[0].start, now() - t0);
    if (replayed > 0) fprintf(o->log, " (%" PRId64 " replayed from a captured graph)", replayed);
    fputc('\n', o->log);
  }
  if (r == TFG_OK && !o->quiet && njobs > 1) fprintf(o->log, "trained %d models together in %.3f s\n", njobs, now() - t0);
  if (r == TFG_OK && !o->quiet) tfg_session_memory_report(s, o->log);
  for (int i = 0; i < opened; i++) {
    tfg_status c = job_close(&jobs[i], d);
    if (r == TFG_OK) r = c;
  }
  free(jobs);
  free(fetch);
  free(out);
  return r;
}

tfg_status tfg_train(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
                     const tfg_train_opts *o, tfg_diag *d) {
  return tfg_train_group(s, p, &a, st, 1, o, d);
}

/* ---- parameter server ------------------------------------------------------------------ */

/* The shared state of an asynchronous run: the server's session (params,
 * state, updates) behind one lock, and the next step to hand out. */
typedef struct ps_run {
  const tfg_program *p;
  const tfg_train_step *st;
  const tfg_train_opts *o;
  job *j;
  tfg_session *server;
  tfg_diag *d;               /* the caller's sink: only under mu */
  pthread_mutex_t mu;
  int64_t next;              /* the next step to hand out (under mu) */
  int64_t applied;           /* updates applied: the server's version (under mu) */
  tfg_status failed;         /* the first failure (under mu) */
} ps_run;

typedef struct ps_worker {
  ps_run *run;
  int w;
  tfg_session *s;
  tfg_diag *d;               /* the worker's own sink (locations share the sources) */
  pthread_t thread;
} ps_worker;

/* A worker: take a step, pull the params, compute the gradients on its
 * own batch, push them; the server applies them in arrival order. No
 * barrier: a worker's gradients may come from params that others have
 * since updated (the staleness, in updates, is logged). */
static void *ps_work(void *arg) {
  ps_worker *wk = arg;
  ps_run *R = wk->run;
  const tfg_train_step *st = R->st;
  const tfg_graph *g = R->p->graph;
  int n = st->nparams, nm = st->nmetrics;
  void **vals = calloc((size_t)n + 1, sizeof *vals);
  tfg_node_id *fetch = malloc(sizeof *fetch * (size_t)(1 + nm + n));
  tfg_tensor *out = malloc(sizeof *out * (size_t)(1 + nm + n));
  TFG_ASSERT(vals && fetch && out);
  for (int i = 0; i < n; i++)
    vals[i] = malloc((size_t)tfg_shape_numel(&g->nodes[st->params[i]].shape) * tfg_dtype_size(g->nodes[st->params[i]].dtype) + 1);
  fetch[0] = st->losses[wk->w];
  for (int k = 0; k < nm; k++) fetch[1 + k] = st->replica_metrics[wk->w * nm + k];
  for (int i = 0; i < n; i++) fetch[1 + nm + i] = st->worker_grads[wk->w * n + i];
  for (;;) {
    pthread_mutex_lock(&R->mu);
    if (R->failed == TFG_OK && R->next < R->j->c.steps && atomic_load(&train_stop))
      R->failed = TFG_ERR_INTERRUPTED; /* reported by the caller */
    if (R->failed != TFG_OK || R->next >= R->j->c.steps) {
      pthread_mutex_unlock(&R->mu);
      break;
    }
    int64_t k = R->next++, pulled = R->applied;
    for (int i = 0; i < n; i++) tfg_session_read(R->server, st->params[i], vals[i]);
    pthread_mutex_unlock(&R->mu);
    for (int i = 0; i < n; i++) tfg_session_write(wk->s, st->worker_params[wk->w * n + i], vals[i]);
    tfg_run_opts ro = step_opts(R->j, k, 0); /* the interpreter refuses accumulate here */
    tfg_status r = tfg_session_run_with(wk->s, fetch, 1 + nm + n, out, &ro);
    pthread_mutex_lock(&R->mu);
    if (r == TFG_OK && R->failed == TFG_OK) {
      /* Push: the server applies this worker's gradients as update
       * number applied + 1 (Adam's step counts updates applied). */
      const void **g_vals = malloc(sizeof *g_vals * (size_t)(n + 1));
      TFG_ASSERT(g_vals != NULL);
      for (int i = 0; i < n; i++) g_vals[i] = out[1 + nm + i].data;
      tfg_run_opts uo = {.training = true, .step = R->applied + 1, .seed = R->j->c.seed, .any_split = true,
                         .nvalues = n, .value_nodes = st->grad_inputs, .values = (const void *const *)g_vals};
      tfg_tensor *uout = malloc(sizeof *uout * (size_t)(st->nupdates + 1));
      TFG_ASSERT(uout != NULL);
      r = tfg_session_run_with(R->server, st->updates, st->nupdates, uout, &uo);
      free(uout);
      free(g_vals);
      if (r == TFG_OK) {
        int64_t stale = R->applied - pulled;
        R->applied++;
        job *j = R->j;
        j->stale_sum += stale;
        if (stale > j->stale_max) j->stale_max = stale;
        /* the log averages what arrived: each update's worker's loss */
        for (int q = 0; q <= nm; q++) j->rp.out[q] = out[q];
        job_take(j, 0);
        r = job_account(j, R->p, R->applied - 1, R->o, R->d);
        if (r == TFG_OK && j->c.checkpoint &&
            ((j->c.checkpoint_every && R->applied % j->c.checkpoint_every == 0) || R->applied == j->c.steps))
          r = save(R->server, R->p, st, &j->c, R->applied, R->d);
      } else {
        tfg_diag_note(R->d, NULL, "while the parameter server applied worker %d's update", wk->w);
      }
    }
    if (r != TFG_OK && R->failed == TFG_OK) R->failed = r;
    pthread_mutex_unlock(&R->mu);
    if (r != TFG_OK) break;
  }
  for (int i = 0; i < n; i++) free(vals[i]);
  free(vals);
  free(fetch);
  free(out);
  return NULL;
}

/* Copies the params and state of st from one session to another. */
static void hand_over(tfg_session *from, tfg_session *to, const tfg_program *p, const tfg_train_step *st) {
  for (int i = 0; i < st->nparams + st->nstates; i++) {
    tfg_node_id id = entry_node(st, i);
    const tfg_node *nd = &p->graph->nodes[id];
    void *v = malloc((size_t)tfg_shape_numel(&nd->shape) * tfg_dtype_size(nd->dtype) + 1);
    TFG_ASSERT(v != NULL);
    tfg_session_read(from, id, v);
    tfg_session_write(to, id, v);
    free(v);
  }
}

tfg_status tfg_train_ps(const tfg_program *p, const tfg_action *a, const tfg_train_step *st, const struct tfg_plan *plan,
                        tfg_session *main, const tfg_session_opts *so, const tfg_train_opts *o, tfg_diag *d) {
  int W = st->nreplicas, ndev = plan->ndev;
  ps_run R = {.p = p, .st = st, .o = o, .d = d, .failed = TFG_OK};
  pthread_mutex_init(&R.mu, NULL);
  job j;
  /* The server: the device of the params, their state and updates. */
  uint8_t *use = calloc((size_t)ndev, 1);
  TFG_ASSERT(use != NULL);
  for (int i = 0; i < st->nparams; i++) use[tfg_placement_device(plan->pl, st->params[i])] = 1;
  for (int i = 0; i < st->nupdates; i++) use[tfg_placement_device(plan->pl, st->updates[i])] = 1;
  tfg_session_opts sso = *so;
  sso.plan = plan;
  sso.use = use;
  R.server = tfg_session_new(p, d, &sso);
  if (R.server) hand_over(main, R.server, p, st);
  /* The log and evaluation see one replica: the worker an update came
   * from (worker 0's model for evaluation: losses[0] is its loss). */
  tfg_train_step one = *st;
  one.nreplicas = 1;
  tfg_status r = R.server ? job_open(&j, R.server, p, a, &one, false, o->quiet ? NULL : o->log, d) : TFG_ERR_DEVICE;
  if (o->diag) tfg_diag_render(d, o->diag, o->color); /* before the first step (tfg_train_opts) */
  R.j = &j;
  R.next = R.applied = r == TFG_OK ? j.start : 0;
  ps_worker *wk = calloc((size_t)W, sizeof *wk);
  TFG_ASSERT(wk != NULL);
  /* Each worker: its own session over the devices its step uses. */
  for (int w = 0; w < W && r == TFG_OK; w++) {
    memset(use, 0, (size_t)ndev);
    uint8_t *cone = calloc((size_t)p->graph->nnodes + 1, 1);
    TFG_ASSERT(cone != NULL);
    cone[st->losses[w]] = 1;
    for (int k = 0; k < st->nmetrics; k++) cone[st->replica_metrics[w * st->nmetrics + k]] = 1;
    for (int i = 0; i < st->nparams; i++) cone[st->worker_grads[w * st->nparams + i]] = 1;
    for (int32_t i = p->graph->nnodes - 1; i >= 0; i--)
      if (cone[i]) {
        use[tfg_placement_device(plan->pl, i)] = 1;
        for (int k = 0; k < p->graph->nodes[i].ninputs; k++) cone[p->graph->nodes[i].inputs[k]] = 1;
      }
    free(cone);
    wk[w] = (ps_worker){.run = &R, .w = w, .d = tfg_diag_new()};
    wk[w].s = tfg_session_new(p, wk[w].d, &sso);
    if (!wk[w].s) r = TFG_ERR_DEVICE;
  }
  double t0 = now();
  j.tlog = t0;
  int started = 0;
  train_begin();
  for (int w = 0; w < W && r == TFG_OK; w++, started++)
    if (pthread_create(&wk[w].thread, NULL, ps_work, &wk[w]) != 0) {
      tfg_diag_error(d, &a->loc, "cannot start the thread of worker %d", w);
      pthread_mutex_lock(&R.mu);
      R.failed = TFG_ERR_DEVICE;
      pthread_mutex_unlock(&R.mu);
      break;
    }
  for (int w = 0; w < started; w++) pthread_join(wk[w].thread, NULL);
  if (r == TFG_OK) r = R.failed;
  if (r == TFG_OK && atomic_load(&train_stop)) r = TFG_ERR_INTERRUPTED; /* during the last updates */
  train_end();
  if (r == TFG_ERR_INTERRUPTED) { /* the server's updates so far are the progress */
    j.done = R.applied;
    r = interrupted(&j, R.server, p, d);
    if (r == TFG_ERR_INTERRUPTED) hand_over(R.server, main, p, st);
  }
  /* Evaluate the server's params on worker 0's replica of the model. */
  if (r == TFG_OK && j.b.feed) {
    for (int i = 0; i < st->nparams; i++) {
      const tfg_node *nd = &p->graph->nodes[st->params[i]];
      void *v = malloc((size_t)tfg_shape_numel(&nd->shape) * tfg_dtype_size(nd->dtype) + 1);
      TFG_ASSERT(v != NULL);
      tfg_session_read(R.server, st->params[i], v);
      tfg_session_write(wk[0].s, st->worker_params[i], v);
      free(v);
    }
    r = evaluate(wk[0].s, p, a, &one, &j.b, j.c.steps, "", o->quiet ? NULL : o->log);
  }
  if (r == TFG_OK) hand_over(R.server, main, p, st);
  if (r == TFG_OK && !o->quiet && j.c.steps > j.start)
    fprintf(o->log, "trained %" PRId64 " steps on %d workers in %.3f s\n", j.c.steps - j.start, W, now() - t0);
  for (int w = 0; w < W; w++) {
    if (wk[w].d) {
      tfg_diag_render(wk[w].d, stderr, false);
      tfg_diag_free(wk[w].d);
    }
    tfg_session_free(wk[w].s);
  }
  free(wk);
  if (R.server) {
    tfg_status c = job_close(&j, d);
    if (r == TFG_OK) r = c;
  }
  tfg_session_free(R.server);
  free(use);
  pthread_mutex_destroy(&R.mu);
  return r;
}
