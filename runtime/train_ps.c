/* runtime/train_ps.c: a parameter_server train: the server's session
 * holds the params, their state and updates; each worker runs in a thread
 * of its own with its own session (runtime/train.h tfg_train_ps). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/strbuf.h"
#include "compiler/plan.h"
#include "io/data.h"
#include "ir/ops.h"
#include "runtime/ckpt.h"
#include "runtime/mpi.h"
#include "runtime/train_impl.h"


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
    vals[i] = malloc((size_t)tfg_node_bytes(&g->nodes[st->params[i]]) + 1);
  fetch[0] = st->losses[wk->w];
  for (int k = 0; k < nm; k++) fetch[1 + k] = st->replica_metrics[wk->w * nm + k];
  for (int i = 0; i < n; i++) fetch[1 + nm + i] = st->worker_grads[wk->w * n + i];
  for (;;) {
    pthread_mutex_lock(&R->mu);
    if (R->failed == TFG_OK && R->next < R->j->c.steps && train_stopped())
      R->failed = TFG_ERR_INTERRUPTED; /* reported by the caller */
    if (R->failed != TFG_OK || R->next >= R->j->c.steps) {
      pthread_mutex_unlock(&R->mu);
      break;
    }
    int64_t k = R->next++, pulled = R->applied;
    for (int i = 0; i < n; i++) tfg_session_read(R->server, st->params[i], vals[i]);
    pthread_mutex_unlock(&R->mu);
    for (int i = 0; i < n; i++) tfg_session_write(wk->s, st->worker_params[wk->w * n + i], vals[i]);
    tfg_run_opts ro = train_step_opts(R->j, k, 0); /* the interpreter refuses accumulate here */
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
        train_job_take(j, 0);
        r = train_job_account(j, R->p, R->applied - 1, R->o, R->d);
        if (r == TFG_OK && j->c.checkpoint &&
            ((j->c.checkpoint_every && R->applied % j->c.checkpoint_every == 0) || R->applied == j->c.steps))
          r = train_save(R->server, R->p, st, &j->c, R->applied, R->d);
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
    tfg_node_id id = train_entry_node(st, i);
    const tfg_node *nd = &p->graph->nodes[id];
    void *v = malloc((size_t)tfg_node_bytes(nd) + 1);
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
  tfg_status r = R.server ? train_job_open(&j, R.server, p, a, &one, false, o->quiet ? NULL : o->log, d) : TFG_ERR_DEVICE;
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
  double t0 = train_now();
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
  if (r == TFG_OK && train_stopped()) r = TFG_ERR_INTERRUPTED; /* during the last updates */
  train_end();
  if (r == TFG_ERR_INTERRUPTED) { /* the server's updates so far are the progress */
    j.done = R.applied;
    r = train_interrupted(&j, R.server, p, d);
    if (r == TFG_ERR_INTERRUPTED) hand_over(R.server, main, p, st);
  }
  /* Evaluate the server's params on worker 0's replica of the model. */
  if (r == TFG_OK && j.b.feed) {
    for (int i = 0; i < st->nparams; i++) {
      const tfg_node *nd = &p->graph->nodes[st->params[i]];
      void *v = malloc((size_t)tfg_node_bytes(nd) + 1);
      TFG_ASSERT(v != NULL);
      tfg_session_read(R.server, st->params[i], v);
      tfg_session_write(wk[0].s, st->worker_params[i], v);
      free(v);
    }
    r = train_evaluate(wk[0].s, p, a, &one, &j.b, j.c.steps, "", o->quiet ? NULL : o->log);
  }
  if (r == TFG_OK) hand_over(R.server, main, p, st);
  if (r == TFG_OK && !o->quiet && j.c.steps > j.start)
    fprintf(o->log, "trained %" PRId64 " steps on %d workers in %.3f s\n", j.c.steps - j.start, W, train_now() - t0);
  for (int w = 0; w < W; w++) {
    if (wk[w].d) {
      tfg_diag_render(wk[w].d, stderr, false);
      tfg_diag_free(wk[w].d);
    }
    tfg_session_free(wk[w].s);
  }
  free(wk);
  if (R.server) {
    tfg_status c = train_job_close(&j, d);
    if (r == TFG_OK) r = c;
  }
  tfg_session_free(R.server);
  free(use);
  pthread_mutex_destroy(&R.mu);
  return r;
}
