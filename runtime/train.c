/* runtime/train.c: the training loop: batches, steps, progress,
 * evaluation and interrupts (checkpoints: runtime/train_ckpt.c; the
 * parameter server's threads: runtime/train_ps.c; the CSV log:
 * runtime/train_log.c).
 *
 * Everything a step depends on is a function of the step number: its
 * batch (epoch and position from the step), dropout masks (the step is in
 * their seed) and Adam's bias correction; or it is in the checkpoint (the
 * params, the optimizer state, an f16 grad scaler's state). So a run
 * resumed from the checkpoint of step k continues exactly as if it had
 * never stopped. */
#include "runtime/train_impl.h"

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

/* Metric i of train action a as progress lines, the log's header and so
 * tfg plot name it: its source text (tfg_train_config.metric_names), or,
 * for an action built without one, its op's name. */
static const char *metric_name(const tfg_program *p, const tfg_action *a, int i) {
  const tfg_train_config *c = &a->config;
  return c->metric_names ? c->metric_names[i] : tfg_op_get(p->graph->nodes[c->metrics[i]].op)->name;
}

/* ---- evaluation -------------------------------------------------------------- */


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
tfg_status train_evaluate(tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
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
  if (r == TFG_OK && st->ranks <= 1) { /* under mpirun, the job's replicas all count (every rank gets here) */
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


/* Reads a job's settings and restores its checkpoint. */
tfg_status train_job_open(job *j, tfg_session *s, const tfg_program *p, const tfg_action *a, const tfg_train_step *st,
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
  j->t0 = train_now();
  tfg_status r = TFG_OK;
  if (s) {
    train_sync_mirrors(s, p, st);
    if (c->checkpoint) r = train_restore(s, p, st, c, &j->start, d, log);
    if (r == TFG_OK && j->start > c->steps) /* a run of more steps wrote it: this one trains none */
      tfg_diag_warning(d, &a->config.checkpoint_at,
                       "%s holds step %" PRId64 ", past this train's %" PRId64 " steps: nothing is trained",
                       c->checkpoint, j->start, c->steps);
    if (r == TFG_OK) train_sync_mirrors(s, p, st);
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
tfg_status train_job_close(job *j, tfg_diag *d) {
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
tfg_run_opts train_step_opts(const job *j, int64_t k, int m) {
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
void train_job_take(job *j, int m) {
  int nv = 1 + j->st->nmetrics;
  double *mean = malloc(sizeof *mean * (size_t)nv);
  TFG_ASSERT(mean != NULL);
  for (int v = 0; v < nv; v++) mean[v] = replica_mean(j->st, j->rp.out, v);
  /* under mpirun, over every rank's replicas; a pipeline across ranks
   * has one, whose values every rank got (runtime/session.h) */
  if (j->st->ranks <= 1) tfg_mpi_mean(mean, nv);
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
  double t = train_now();
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
tfg_status train_job_account(job *j, const tfg_program *p, int64_t k, const tfg_train_opts *o, tfg_diag *d) {
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
    double t = train_now(), rate = (double)j->since / (t - j->tlog > 1e-9 ? t - j->tlog : 1e-9);
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
      if (st->kind == TFG_STEP_SERVER)
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
    r = train_evaluate(s, p, j->a, j->st, &j->b, step, j->who, o->quiet ? NULL : o->log);
  }
  if (r == TFG_OK && j->c.checkpoint && ((j->c.checkpoint_every && step % j->c.checkpoint_every == 0) || last))
    r = train_save(s, p, j->st, &j->c, step, d);
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

void train_begin(void) {
  atomic_store(&train_stop, 0);
  atomic_store(&train_active, 1);
}

void train_end(void) { atomic_store(&train_active, 0); }

bool train_stopped(void) { return atomic_load(&train_stop); }

/* A stop was asked for: job j stops after its step j->done, with its
 * checkpoint written when it has one and has made progress (the steps
 * since the last checkpoint are kept; after its last step it was written
 * already). Reported at the train statement;
 * TFG_ERR_INTERRUPTED, or the checkpoint's failure. */
tfg_status train_interrupted(job *j, tfg_session *s, const tfg_program *p, tfg_diag *d) {
  tfg_status r = TFG_OK;
  bool saved = j->c.checkpoint && j->done > j->start;
  if (saved && j->done < j->c.steps) r = train_save(s, p, j->st, &j->c, j->done, d); /* the last step saved it already */
  if (r != TFG_OK) return r;
  tfg_diag_error(d, &j->c.loc, "training interrupted after step %" PRId64 " of %" PRId64, j->done, j->c.steps);
  if (saved)
    tfg_diag_note(d, NULL, "%s holds step %" PRId64 ": running again resumes from it", j->c.checkpoint, j->done);
  else if (j->c.checkpoint)
    tfg_diag_note(d, NULL, "%s is as it was", j->c.checkpoint);
  return TFG_ERR_INTERRUPTED;
}

/* Seconds on a monotonic clock (runtime/train_impl.h). */
double train_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- synchronous groups ------------------------------------------------------------- */

tfg_status tfg_train_group(tfg_session *s, const tfg_program *p, const tfg_action *const *a, const tfg_train_step *st,
                           int njobs, const tfg_train_opts *o, tfg_diag *d) {
  job *jobs = calloc((size_t)njobs, sizeof *jobs);
  TFG_ASSERT(jobs != NULL);
  tfg_status r = TFG_OK;
  int opened = 0;
  for (; opened < njobs && r == TFG_OK; opened++)
    r = train_job_open(&jobs[opened], s, p, a[opened], &st[opened], njobs > 1, o->quiet ? NULL : o->log, d);
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
  double t0 = train_now();
  int64_t replays0 = tfg_session_replays(s);
  for (int i = 0; i < njobs; i++) jobs[i].tlog = t0;
  train_begin();
  for (int64_t k = 0; k < most && r == TFG_OK && !train_stopped(); k++) {
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
        tfg_run_opts ro = train_step_opts(&jobs[in_run[0]], k, m);
        r = tfg_session_run_with(s, fetch, n, out, &ro);
        for (int q = 0, at = 0; q < nin && r == TFG_OK; q++) {
          job *j = &jobs[in_run[q]];
          memcpy(j->rp.out, out + at, sizeof *out * (size_t)j->rp.n);
          at += j->rp.n + j->st->nupdates + (m == A - 1 ? j->st->nscalers : 0);
          train_job_take(j, m);
        }
      }
      for (int q = 0; q < nin && r == TFG_OK; q++) {
        job *j = &jobs[in_run[q]];
        r = train_job_account(j, p, k, o, d);
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
  if (r == TFG_OK && train_stopped())
    for (int i = 0; i < njobs && (r == TFG_OK || r == TFG_ERR_INTERRUPTED); i++) r = train_interrupted(&jobs[i], s, p, d);
  train_end();
  int64_t replayed = tfg_session_replays(s) - replays0; /* steps replayed from CUDA Graphs (exec.h) */
  for (int i = 0; i < njobs && r == TFG_OK; i++)
    if (jobs[i].b.feed)
      r = train_evaluate(s, p, a[i], &st[i], &jobs[i].b, jobs[i].c.steps, jobs[i].who, o->quiet ? NULL : o->log);
  if (r == TFG_OK && !o->quiet && njobs == 1 && jobs[0].c.steps > jobs[0].start) {
    fprintf(o->log, "trained %" PRId64 " steps in %.3f s", jobs[0].c.steps - jobs[0].start, train_now() - t0);
    if (replayed > 0) fprintf(o->log, " (%" PRId64 " replayed from a captured graph)", replayed);
    fputc('\n', o->log);
  }
  if (r == TFG_OK && !o->quiet && njobs > 1) fprintf(o->log, "trained %d models together in %.3f s\n", njobs, train_now() - t0);
  if (r == TFG_OK && !o->quiet) tfg_session_memory_report(s, o->log);
  for (int i = 0; i < opened; i++) {
    tfg_status c = train_job_close(&jobs[i], d);
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

