/* runtime/session.c: a program's values on an executor.
 *
 * The session owns what the executor does not know about: params'
 * initial values (and the values load statements set), the datasets and
 * --feed files behind the inputs, and the host copies of fetched values
 * (kept until the next run). */
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "compiler/plan.h"
#include "io/data.h"
#include "ir/device.h"
#include "ir/ops.h"
#include "runtime/ckpt.h"
#include "runtime/device.h"
#include "runtime/exec.h"
#include "runtime/mpi.h"

struct tfg_session {
  const tfg_program *prog;
  tfg_diag *diag;
  int32_t nnodes;   /* the graph's size when the session was made */
  /* the plan of a session made without one: cpu:0 alone */
  tfg_devices *own_ds;
  tfg_placement *own_pl;
  tfg_plan *own_plan;
  tfg_exec *x;
  const tfg_plan *plan; /* what x runs */
  void **fed;       /* per node id: --feed data for an input, or NULL */
  void **batch;     /* per node id: an input's host batch for the run */
  void **kept;      /* fetched values of the last run, per fetch */
  int nkept;
  const tfg_run_opts *ro; /* the run in progress (for the feed callback) */
  /* a pipeline across ranks (tfg_session_opts owner) */
  const int16_t *owner;
  int rank;
  tfg_node_id *sent;      /* per node: a RECV's SEND (the same message), else -1 */
  uint8_t *cone;          /* per node: in the cone of a run's fetches, on any rank */
};

/* The rank that computes node id, or -1: every rank (this one outside a
 * pipeline across ranks). */
static int owner_of(const tfg_session *s, tfg_node_id id) { return s->owner ? s->owner[id] : -1; }

/* Whether this rank computes node id (ranks.h: always, outside a
 * pipeline across ranks). */
static bool mine(const tfg_session *s, tfg_node_id id) { return owner_of(s, id) < 0 || owner_of(s, id) == s->rank; }

static void *alloc_bytes(size_t n) {
  void *p = malloc(n ? n : 1);
  TFG_ASSERT(p != NULL);
  return p;
}

/* Appends shape as NumPy writes it: "()", "(3,)", "(2, 3)". */
static void numpy_shape(tfg_strbuf *b, const tfg_shape *sh) {
  tfg_strbuf_putc(b, '(');
  for (int i = 0; i < sh->rank; i++) tfg_strbuf_printf(b, "%s%lld", i ? ", " : "", (long long)sh->dim[i]);
  tfg_strbuf_puts(b, sh->rank == 1 ? ",)" : ")");
}

/* Loads --feed NAME=FILE.npy for input node n into a new block (*out):
 * the array must have the input's exact shape (a 0-d array feeds a
 * scalar input f32[]), a type that converts to its dtype, and values that
 * fit it. */
static bool load_feed(tfg_session *s, const tfg_node *n, const char *path, void **out) {
  tfg_data_type type;
  tfg_shape shape;
  void *data = NULL;
  if (tfg_data_npy_read(s->diag, &n->loc, path, &type, &shape, &data) != TFG_OK) return false;
  bool ok = tfg_data_convertible(type, n->dtype);
  if (!ok)
    tfg_diag_error(s->diag, &n->loc, "--feed %s: '%s' holds %s values, which cannot feed input %s of dtype %s", n->name,
                   path, tfg_data_type_name(type), n->name, tfg_dtype_name(n->dtype));
  if (ok && !tfg_shape_eq(&shape, &n->shape)) {
    tfg_strbuf got = {0}, want = {0};
    numpy_shape(&got, &shape);
    numpy_shape(&want, &n->shape);
    tfg_diag_error(s->diag, &n->loc, "--feed %s: '%s' holds an array of shape %s, but input %s has shape %s", n->name,
                   path, got.data, n->name, want.data);
    tfg_strbuf_free(&got);
    tfg_strbuf_free(&want);
    ok = false;
  }
  ok = ok && tfg_data_check_values(s->diag, &n->loc, path, type, &shape, data, n->dtype) == TFG_OK;
  if (ok) {
    *out = alloc_bytes((size_t)tfg_node_bytes(n));
    tfg_data_convert(type, data, n->dtype, *out, tfg_shape_numel(&shape));
  }
  free(data);
  return ok;
}

/* Gives param nd (node id, held by the session's executor) its initial
 * value: its constant, or its initializer drawn from its seed (filled
 * through the executor's host backend: tfg_exec_init). Unseeded params
 * draw from their own name, so two layers of one shape differ, a run is
 * reproducible, and a strategy's copies of a param (same name) start
 * equal; --seed shifts them all. false after reporting. */
static bool param_init(tfg_session *s, tfg_node_id id, uint64_t seed) {
  const tfg_node *nd = &s->prog->graph->nodes[id];
  if (nd->attrs.data) {
    tfg_exec_write(s->x, id, nd->attrs.data); /* from a constant */
    return true;
  }
  tfg_attrs a = nd->attrs;
  if (!a.seeded) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = nd->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    a.seed = h;
  }
  a.seed ^= seed * 0x9E3779B97F4A7C15ull;
  if (tfg_exec_init(s->x, id, &a, NULL) != TFG_OK) {
    tfg_diag_error(s->diag, &nd->loc, "param %s: cannot initialize the %s param on the CPU", nd->name,
                   tfg_dtype_name(nd->dtype));
    return false;
  }
  return true;
}

tfg_session *tfg_session_new(const tfg_program *p, tfg_diag *d, const tfg_session_opts *o) {
  static const tfg_session_opts none = {0};
  if (!o) o = &none;
  tfg_session *s = calloc(1, sizeof *s);
  TFG_ASSERT(s != NULL);
  s->prog = p;
  s->diag = d;
  int32_t n = p->graph->nnodes;
  s->nnodes = n;
  if (o->owner) { /* a pipeline across ranks: each receive's send, by their message's tag */
    s->owner = o->owner;
    s->rank = o->rank;
    s->sent = malloc(sizeof *s->sent * ((size_t)n + 1));
    s->cone = calloc((size_t)n + 1, 1);
    tfg_node_id *by_tag = malloc(sizeof *by_tag * ((size_t)n + 1));
    TFG_ASSERT(s->sent && s->cone && by_tag);
    for (int32_t i = 0; i < n; i++) s->sent[i] = by_tag[i] = -1;
    for (int32_t i = 0; i < n; i++) {
      const tfg_node *nd = &p->graph->nodes[i];
      if (nd->op == TFG_OP_SEND && nd->attrs.key >= 0 && nd->attrs.key < n) by_tag[nd->attrs.key] = i;
    }
    for (int32_t i = 0; i < n; i++) {
      const tfg_node *nd = &p->graph->nodes[i];
      if (nd->op == TFG_OP_RECV && nd->attrs.key >= 0 && nd->attrs.key < n) s->sent[i] = by_tag[nd->attrs.key];
    }
    free(by_tag);
  }
  s->fed = calloc((size_t)n + 1, sizeof *s->fed);
  s->batch = calloc((size_t)n + 1, sizeof *s->batch);
  TFG_ASSERT(s->fed && s->batch);
  const tfg_plan *plan = o->plan;
  if (!plan) {
    /* Memory that cannot fit the host is an error of the plan, found
     * before anything runs. */
    if (tfg_devices_default(d, 0, NULL, &s->own_ds, NULL) != TFG_OK) goto fail;
    s->own_pl = tfg_place_on(p->graph, s->own_ds, 0);
    if (tfg_plan_build(p->graph, s->own_pl, s->own_ds, d, &s->own_plan) != TFG_OK) goto fail;
    plan = s->own_plan;
  }
  tfg_exec_opts xo = {.threads = o->threads, .check_numerics = o->check_numerics, .use = o->use, .trace = o->trace,
                      .preallocate = o->preallocate, .tf32 = o->tf32, .sw = o->sw};
  if (tfg_exec_new(plan, &xo, d, &s->x) != TFG_OK) goto fail;
  s->plan = plan;
  /* Params start from their initializers, optimizer state at zero (as
   * torch.optim's buffers do) unless it names a value (a grad scaler's
   * first scale); every copy a strategy made included. */
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &p->graph->nodes[i];
    if ((nd->op != TFG_OP_PARAM && nd->op != TFG_OP_STATE) || !mine(s, i) || !tfg_exec_holds(s->x, i)) continue;
    if (nd->op == TFG_OP_PARAM) {
      if (!param_init(s, i, o->seed)) goto fail;
      continue;
    }
    tfg_attrs fill = {.init = TFG_INIT_ZEROS};
    if (nd->attrs.init == TFG_INIT_FULL) fill = (tfg_attrs){.init = TFG_INIT_FULL, .value = nd->attrs.value};
    tfg_status st = tfg_exec_init(s->x, i, &fill, NULL);
    TFG_ASSERT(st == TFG_OK); /* zeros() fills every dtype */
  }
  /* Values a column holds but its input's dtype cannot (an i64 label of
   * 2^40 for an i32 input) are refused before the first step, rather than
   * clamped when a batch reaches them. */
  for (int k = 0; k < p->nfeeds; k++) {
    const tfg_node *nd = &p->graph->nodes[p->feeds[k].node];
    if (p->feeds[k].ds && tfg_data_check_column(d, &nd->loc, p->feeds[k].ds, p->feeds[k].col, nd->dtype) != TFG_OK)
      goto fail;
  }
  for (int i = 0; i < o->nfeeds; i++) {
    bool found = false;
    for (int k = 0; k < p->nfeeds; k++) {
      const tfg_node *nd = &p->graph->nodes[p->feeds[k].node];
      if (strcmp(nd->name, o->feeds[i].name) != 0) continue;
      found = true;
      if (!load_feed(s, nd, o->feeds[i].path, &s->fed[p->feeds[k].node])) goto fail;
    }
    if (!found) {
      tfg_diag_error(d, NULL, "--feed %s: the program has no input named '%s'", o->feeds[i].name, o->feeds[i].name);
      goto fail;
    }
  }
  return s;
fail:
  tfg_session_free(s);
  return NULL;
}

void tfg_session_free(tfg_session *s) {
  if (!s) return;
  for (int32_t i = 0; i < s->nnodes; i++) {
    free(s->fed[i]);
    free(s->batch[i]);
  }
  for (int i = 0; i < s->nkept; i++) free(s->kept[i]);
  free(s->kept);
  free(s->sent);
  free(s->cone);
  free(s->fed);
  free(s->batch);
  tfg_exec_free(s->x);
  tfg_plan_free(s->own_plan);
  tfg_placement_free(s->own_pl);
  tfg_devices_free(s->own_ds);
  free(s);
}

tfg_status tfg_session_load_params(tfg_session *s) {
  const tfg_program *p = s->prog;
  int *at = malloc(sizeof *at * ((size_t)p->nparams + 1));
  TFG_ASSERT(at != NULL);
  tfg_status st = TFG_OK;
  for (int i = 0; i < p->nloads && st == TFG_OK; i++) {
    tfg_ckpt *c;
    st = tfg_ckpt_read_load(s->diag, &p->loads[i], p->graph, p->params, p->nparams, &c, at);
    if (st != TFG_OK) break;
    for (int k = 0; k < p->nparams; k++)
      if (at[k] >= 0 && tfg_session_holds(s, p->params[k]))
        tfg_session_write(s, p->params[k], tfg_ckpt_entry_at(c, at[k])->data);
    tfg_ckpt_free(c);
  }
  free(at);
  return st;
}


void tfg_session_read(tfg_session *s, tfg_node_id id, void *host) {
  int o = owner_of(s, id);
  if (mine(s, id)) tfg_exec_read(s->x, id, host);
  if (o >= 0) tfg_mpi_bcast_from(o, host, (size_t)tfg_node_bytes(&s->prog->graph->nodes[id]));
}

void tfg_session_write(tfg_session *s, tfg_node_id id, const void *host) {
  if (mine(s, id)) tfg_exec_write(s->x, id, host);
}
bool tfg_session_holds(const tfg_session *s, tfg_node_id id) {
  return id < s->nnodes && mine(s, id) && tfg_exec_holds(s->x, id);
}

/* The executor's feed callback: input id's value for the run in
 * progress: a value given to the run, --feed, or the batch it asks for. */
static tfg_status input_value(void *arg, tfg_node_id id, const void **out) {
  tfg_session *s = arg;
  const tfg_run_opts *ro = s->ro;
  const tfg_program *p = s->prog;
  const tfg_node *n = &p->graph->nodes[id];
  for (int k = 0; k < ro->nvalues; k++)
    if (ro->value_nodes[k] == id) {
      *out = ro->values[k];
      return TFG_OK;
    }
  if (s->fed[id]) {
    *out = s->fed[id];
    return TFG_OK;
  }
  for (int k = 0; k < p->nfeeds; k++) {
    if (p->feeds[k].node != id) continue;
    if (!p->feeds[k].ds) {
      tfg_diag_error(s->diag, &n->loc, "input %s has no data: give it a source (from DATASET.COLUMN) or --feed %s=FILE.npy",
                     n->name, n->name);
      return TFG_ERR_IO;
    }
    tfg_split split = ro->any_split ? p->feeds[k].split : ro->split;
    if (tfg_data_rows(p->feeds[k].ds, split) == 0) {
      tfg_diag_error(s->diag, &n->loc, "input %s: the %s split of %s is empty", n->name,
                     split == TFG_SPLIT_TEST ? "test" : "train", p->feeds[k].ds_path);
      return TFG_ERR_DATA;
    }
    if (!s->batch[id]) s->batch[id] = alloc_bytes((size_t)tfg_node_bytes(n));
    int64_t rows = n->shape.dim[0];
    int64_t got = ro->valid > 0 && ro->valid < rows ? ro->valid : rows;
    tfg_data_fetch(p->feeds[k].ds, split, p->feeds[k].col, ro->epoch, ro->first, got, n->dtype, s->batch[id]);
    if (got < rows) { /* the last row read, repeated to fill the batch */
      size_t row = (size_t)tfg_node_bytes(n) / (size_t)rows;
      char *last = (char *)s->batch[id] + (size_t)(got - 1) * row;
      for (int64_t r = got; r < rows; r++) memcpy((char *)s->batch[id] + (size_t)r * row, last, row);
    }
    *out = s->batch[id];
    return TFG_OK;
  }
  tfg_diag_error(s->diag, &n->loc, "input %s has no value in this run", n->name ? n->name : "");
  return TFG_ERR_IO;
}

/* What this rank runs for fetches fetch[0..n) of a pipeline across
 * ranks: the fetched nodes it computes (into their kept buffers) and its
 * sends that the whole job's cone of the fetches holds (a receive's
 * send is in the cone with it), into ours[0..*count) and into[]. */
static void local_fetches(tfg_session *s, const tfg_node_id *fetch, int n, tfg_node_id *ours, void **into, int *count) {
  const tfg_graph *g = s->prog->graph;
  static char nothing; /* a send's value has no bytes */
  memset(s->cone, 0, (size_t)s->nnodes);
  for (int i = 0; i < n; i++) s->cone[fetch[i]] = 1;
  for (int32_t i = s->nnodes - 1; i >= 0; i--) {
    if (!s->cone[i]) continue;
    for (int k = 0; k < g->nodes[i].ninputs; k++) s->cone[g->nodes[i].inputs[k]] = 1;
    if (s->sent[i] >= 0) s->cone[s->sent[i]] = 1; /* sent before it: ids are a topological order of the job */
  }
  int c = 0;
  for (int i = 0; i < n; i++)
    if (mine(s, fetch[i])) ours[c] = fetch[i], into[c++] = s->kept[i];
  for (int32_t i = 0; i < s->nnodes; i++)
    if (s->cone[i] && g->nodes[i].op == TFG_OP_SEND && owner_of(s, i) == s->rank) ours[c] = i, into[c++] = &nothing;
  *count = c;
}

tfg_status tfg_session_run(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out) {
  tfg_run_opts ro = {.any_split = true};
  return tfg_session_run_with(s, fetch, nfetch, out, &ro);
}

tfg_status tfg_session_run_with(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out,
                                const tfg_run_opts *ro) {
  const tfg_graph *g = s->prog->graph;
  for (int i = 0; i < nfetch; i++) TFG_ASSERT(fetch[i] < s->nnodes); /* built before the session */
  for (int i = 0; i < s->nkept; i++) free(s->kept[i]);
  s->kept = realloc(s->kept, sizeof *s->kept * (size_t)(nfetch ? nfetch : 1));
  TFG_ASSERT(s->kept != NULL);
  s->nkept = nfetch;
  for (int i = 0; i < nfetch; i++) {
    const tfg_node *nd = &g->nodes[fetch[i]];
    s->kept[i] = alloc_bytes((size_t)tfg_node_bytes(nd));
    out[i] = (tfg_tensor){s->kept[i], nd->dtype, nd->shape};
  }
  s->ro = ro;
  tfg_exec_run_opts xo = {.training = ro->training, .step = ro->step, .seed = ro->seed, .feed = input_value, .feed_arg = s};
  tfg_status st;
  if (!s->owner) {
    st = tfg_exec_run(s->x, fetch, nfetch, s->kept, &xo, s->diag);
  } else {
    int n;
    tfg_node_id *ours = malloc(sizeof *ours * ((size_t)s->nnodes + (size_t)nfetch + 1));
    void **into = malloc(sizeof *into * ((size_t)s->nnodes + (size_t)nfetch + 1));
    TFG_ASSERT(ours && into);
    local_fetches(s, fetch, nfetch, ours, into, &n);
    st = tfg_exec_run(s->x, ours, n, into, &xo, s->diag);
    free(ours);
    free(into);
    /* every fetched value on every rank, from the rank that computed it
     * (a failed rank ends the job instead: runtime/mpi.h tfg_mpi_abort) */
    for (int i = 0; i < nfetch && st == TFG_OK; i++)
      if (owner_of(s, fetch[i]) >= 0)
        tfg_mpi_bcast_from(owner_of(s, fetch[i]), s->kept[i], (size_t)tfg_node_bytes(&g->nodes[fetch[i]]));
  }
  if (st != TFG_OK && ro->step) tfg_diag_note(s->diag, NULL, "in training step %lld", (long long)ro->step);
  s->ro = NULL;
  return st;
}

void tfg_session_memory_report(const tfg_session *s, FILE *out) {
  for (int d = 0; d < tfg_exec_ndev(s->x); d++) {
    const char *name;
    int64_t planned, measured;
    tfg_exec_memory(s->x, d, &name, &planned, &measured);
    if (measured < 0) continue; /* a device the plan does not use */
    tfg_strbuf a = {0}, b = {0};
    tfg_size_format(&a, planned);
    tfg_size_format(&b, measured);
    fprintf(out, "memory %s: planned peak %s, measured peak %s\n", name, a.data, b.data);
    /* the plan's peak by kind, and what the pool took beyond it (the
     * backend's own: workspaces, the pool's rounding) */
    tfg_strbuf m = {0}, w = {0};
    tfg_plan_memory_text(s->plan, d, &m);
    tfg_size_format(&w, measured > planned ? measured - planned : 0);
    fprintf(out, "  planned at its fullest%s; measured beyond the plan %s\n", m.data, w.data);
    tfg_strbuf_free(&m);
    tfg_strbuf_free(&w);
    tfg_strbuf_free(&a);
    tfg_strbuf_free(&b);
  }
}

int64_t tfg_session_replays(const tfg_session *s) { return tfg_exec_replays(s->x); }
