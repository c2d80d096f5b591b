/* runtime/session.c: graph evaluation on one CPU device.
 *
 * Params live for the session; every other value lives from the node
 * that computes it to its last consumer in this run (a reference count
 * per node, taken from the fetch's dependency cone). Fetched values are
 * kept until the next run. */
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "compiler/ops.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"
#include "runtime/device.h"

struct tfg_session {
  const tfg_program *prog;
  tfg_diag *diag;
  tfg_pool *pool;
  bool check_numerics;
  int32_t nnodes; /* the graph's size when the session was made */
  void **params;    /* per node id: param storage, or NULL */
  void **fed;       /* per node id: --feed data for an input, or NULL */
  void **kept;      /* fetched values of the last run, per fetch */
  int nkept;
  int64_t budget;   /* bytes one buffer may take: the host's memory less the params */
};

static size_t node_bytes(const tfg_node *n) {
  return (size_t)tfg_shape_numel(&n->shape) * tfg_dtype_size(n->dtype);
}

static void *alloc_bytes(size_t n) {
  void *p = malloc(n ? n : 1);
  TFG_ASSERT(p != NULL);
  return p;
}

/* The host's physical memory: what one CPU device has. */
static int64_t host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : INT64_MAX;
}

/* A buffer for node nd's value, or NULL after reporting when it cannot
 * fit the host: a shape a program can declare must end in an error, not
 * in the kernel's out-of-memory killer. */
static void *node_alloc(tfg_session *s, const tfg_node *nd) {
  int64_t n = tfg_shape_numel(&nd->shape) * (int64_t)tfg_dtype_size(nd->dtype);
  void *p = n <= s->budget ? malloc(n ? (size_t)n : 1) : NULL;
  if (!p) {
    tfg_strbuf need = {0}, have = {0};
    tfg_size_format(&need, n);
    tfg_size_format(&have, s->budget > 0 ? s->budget : 0);
    tfg_diag_error(s->diag, &nd->loc, "out of memory on cpu:0: %s needs %s for its %s, and %s is free",
                   tfg_op_get(nd->op)->name, need.data, nd->op == TFG_OP_PARAM || nd->op == TFG_OP_STATE ? "value" : "output",
                   have.data);
    tfg_strbuf_free(&need);
    tfg_strbuf_free(&have);
  }
  return p;
}

/* Loads --feed NAME=FILE.npy for input node n: the array must have the
 * input's exact shape. */
static bool load_feed(tfg_session *s, const tfg_node *n, const char *path, void **out) {
  const char *names[1] = {"value"};
  const char *paths[1] = {path};
  tfg_data_opts o = tfg_data_opts_default();
  tfg_dataset *ds = NULL;
  if (tfg_data_npy(s->diag, &n->loc, 1, names, paths, &o, &ds) != TFG_OK) return false;
  tfg_shape row = tfg_data_row_shape(ds, 0);
  int64_t rows = tfg_data_rows(ds, TFG_SPLIT_TRAIN);
  bool ok = tfg_data_convertible(tfg_data_column_type(ds, 0), n->dtype) && n->shape.rank >= 1 &&
            rows == n->shape.dim[0] && row.rank == n->shape.rank - 1;
  for (int i = 0; ok && i < row.rank; i++) ok = row.dim[i] == n->shape.dim[i + 1];
  if (!ok) {
    tfg_strbuf want = {0};
    tfg_shape_format(&want, n->dtype, &n->shape);
    tfg_diag_error(s->diag, &n->loc, "--feed %s: %s holds %lld rows of %s, not %s", n->name, path, (long long)rows,
                   tfg_data_type_name(tfg_data_column_type(ds, 0)), want.data);
    tfg_strbuf_free(&want);
    tfg_data_free(ds);
    return false;
  }
  *out = alloc_bytes(node_bytes(n));
  tfg_data_fetch(ds, TFG_SPLIT_TRAIN, 0, 0, 0, rows, n->dtype, *out);
  tfg_data_free(ds);
  return true;
}

tfg_session *tfg_session_new(const tfg_program *p, tfg_diag *d, const tfg_session_opts *o) {
  tfg_session *s = calloc(1, sizeof *s);
  TFG_ASSERT(s != NULL);
  s->prog = p;
  s->diag = d;
  s->pool = tfg_pool_new(o ? o->threads : 0);
  s->check_numerics = o && o->check_numerics;
  int32_t n = p->graph->nnodes;
  s->nnodes = n;
  s->params = calloc((size_t)n + 1, sizeof *s->params);
  s->fed = calloc((size_t)n + 1, sizeof *s->fed);
  TFG_ASSERT(s->params && s->fed);
  /* Params and optimizer state stay for the session; what is left of the
   * host's memory bounds every other buffer. */
  s->budget = host_memory();
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &p->graph->nodes[i];
    if (nd->op != TFG_OP_PARAM && nd->op != TFG_OP_STATE) continue;
    int64_t b = tfg_shape_numel(&nd->shape) * (int64_t)tfg_dtype_size(nd->dtype);
    if (b > s->budget) {
      node_alloc(s, nd); /* reports */
      tfg_session_free(s);
      return NULL;
    }
    s->budget -= b;
  }
  for (int i = 0; i < p->nparams; i++) {
    const tfg_node *nd = &p->graph->nodes[p->params[i]];
    tfg_tensor t = {alloc_bytes(node_bytes(nd)), nd->dtype, nd->shape};
    if (nd->attrs.data) {
      memcpy(t.data, nd->attrs.data, node_bytes(nd)); /* from a constant */
    } else {
      tfg_attrs a = nd->attrs;
      /* Unseeded params draw from their own name, so two layers of one
       * shape differ and a run is reproducible; --seed shifts them all. */
      if (!a.seeded) {
        uint64_t h = 1469598103934665603ull;
        for (const char *c = nd->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        a.seed = h;
      }
      if (o) a.seed ^= o->seed * 0x9E3779B97F4A7C15ull;
      tfg_status st = tfg_cpu_init_fill(&t, &a);
      if (st != TFG_OK) {
        tfg_diag_error(d, &nd->loc, "param %s: cannot initialize a %s param on the CPU", nd->name,
                       tfg_dtype_name(nd->dtype));
        free(t.data);
        tfg_session_free(s);
        return NULL;
      }
    }
    s->params[p->params[i]] = t.data;
  }
  /* Optimizer state starts at zero (torch.optim's buffers do too). */
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &p->graph->nodes[i];
    if (nd->op != TFG_OP_STATE) continue;
    s->params[i] = alloc_bytes(node_bytes(nd));
    memset(s->params[i], 0, node_bytes(nd));
  }
  for (int i = 0; o && i < o->nfeeds; i++) {
    bool found = false;
    for (int k = 0; k < p->nfeeds; k++) {
      const tfg_node *nd = &p->graph->nodes[p->feeds[k].node];
      if (strcmp(nd->name, o->feeds[i].name) != 0) continue;
      found = true;
      if (!load_feed(s, nd, o->feeds[i].path, &s->fed[p->feeds[k].node])) {
        tfg_session_free(s);
        return NULL;
      }
    }
    if (!found) {
      tfg_diag_error(d, NULL, "--feed %s: the program has no input named '%s'", o->feeds[i].name, o->feeds[i].name);
      tfg_session_free(s);
      return NULL;
    }
  }
  return s;
}

void tfg_session_free(tfg_session *s) {
  if (!s) return;
  int32_t n = s->nnodes;
  for (int32_t i = 0; i < n; i++) {
    free(s->params[i]);
    free(s->fed[i]);
  }
  for (int i = 0; i < s->nkept; i++) free(s->kept[i]);
  free(s->kept);
  free(s->params);
  free(s->fed);
  tfg_pool_free(s->pool);
  free(s);
}

void *tfg_session_storage(tfg_session *s, tfg_node_id id) {
  return id >= 0 && id < s->nnodes ? s->params[id] : NULL;
}

/* The value of input node id for this run: the batch ro asks for, or --feed. */
static tfg_status input_value(tfg_session *s, tfg_node_id id, const tfg_run_opts *ro, void **out, bool *owned) {
  const tfg_program *p = s->prog;
  const tfg_node *n = &p->graph->nodes[id];
  if (s->fed[id]) {
    *out = s->fed[id];
    *owned = false;
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
    *out = alloc_bytes(node_bytes(n));
    *owned = true;
    tfg_data_fetch(p->feeds[k].ds, split, p->feeds[k].col, ro->epoch, ro->first, n->shape.dim[0], n->dtype, *out);
    return TFG_OK;
  }
  TFG_ASSERT(!"an input node without a feed entry");
  return TFG_ERR_IO;
}

tfg_status tfg_session_run(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out) {
  tfg_run_opts ro = {.any_split = true};
  return tfg_session_run_with(s, fetch, nfetch, out, &ro);
}

/* The index of the first NaN or Inf in a float tensor, or -1. */
static int64_t first_nonfinite(const tfg_tensor *t) {
  int64_t n = tfg_shape_numel(&t->shape);
  if (t->dtype == TFG_DTYPE_F32) {
    const float *v = t->data;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(v[i])) return i;
  } else if (t->dtype == TFG_DTYPE_F64) {
    const double *v = t->data;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(v[i])) return i;
  }
  return -1;
}

tfg_status tfg_session_run_with(tfg_session *s, const tfg_node_id *fetch, int nfetch, tfg_tensor *out,
                                const tfg_run_opts *ro) {
  const tfg_graph *g = s->prog->graph;
  for (int i = 0; i < nfetch; i++) TFG_ASSERT(fetch[i] < s->nnodes); /* built before the session */
  int32_t n = g->nnodes;
  for (int i = 0; i < s->nkept; i++) free(s->kept[i]);
  s->nkept = 0;
  /* The dependency cone of the fetches, and how many consumers in it
   * read each node (ids are topological: one backward sweep). */
  uint8_t *need = calloc((size_t)n + 1, 1);
  int32_t *uses = calloc((size_t)n + 1, sizeof *uses);
  void **val = calloc((size_t)n + 1, sizeof *val);
  bool *owned = calloc((size_t)n + 1, sizeof *owned);
  TFG_ASSERT(need && uses && val && owned);
  int32_t top = -1;
  for (int i = 0; i < nfetch; i++) {
    need[fetch[i]] = 1;
    if (fetch[i] > top) top = fetch[i];
  }
  for (int32_t i = top; i >= 0; i--) {
    if (!need[i]) continue;
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      need[g->nodes[i].inputs[k]] = 1;
      uses[g->nodes[i].inputs[k]]++;
    }
  }
  for (int i = 0; i < nfetch; i++) uses[fetch[i]]++; /* fetched values outlive the run */
  tfg_status st = TFG_OK;
  tfg_kernel_ctx ctx = {.pool = s->pool, .training = ro->training, .step = ro->step, .seed = ro->seed};
  tfg_tensor in[64];
  for (int32_t i = 0; i <= top && st == TFG_OK; i++) {
    if (!need[i]) continue;
    const tfg_node *nd = &g->nodes[i];
    if (nd->op == TFG_OP_PARAM || nd->op == TFG_OP_STATE) {
      val[i] = s->params[i];
      continue;
    }
    if (nd->op == TFG_OP_INPUT) {
      st = input_value(s, i, ro, &val[i], &owned[i]);
      continue;
    }
    TFG_ASSERT(nd->ninputs <= 64);
    for (int k = 0; k < nd->ninputs; k++) {
      const tfg_node *x = &g->nodes[nd->inputs[k]];
      in[k] = (tfg_tensor){val[nd->inputs[k]], x->dtype, x->shape};
    }
    tfg_tensor o = {node_alloc(s, nd), nd->dtype, nd->shape};
    if (!o.data) {
      st = TFG_ERR_OOM;
      break;
    }
    val[i] = o.data;
    owned[i] = true;
    const tfg_op_def *def = tfg_op_get(nd->op);
    st = def->cpu(&ctx, nd, in, &o);
    if (st != TFG_OK) {
      tfg_diag_error(s->diag, &nd->loc, "%s failed: %s", def->name, ctx.err.data ? ctx.err.data : tfg_status_str(st));
      break;
    }
    if (s->check_numerics) {
      int64_t bad = first_nonfinite(&o);
      if (bad >= 0) {
        double v = o.dtype == TFG_DTYPE_F32 ? ((float *)o.data)[bad] : ((double *)o.data)[bad];
        tfg_strbuf sh = {0};
        tfg_shape_format(&sh, o.dtype, &o.shape);
        tfg_diag_error(s->diag, &nd->loc, "%s produced %g at element %lld of its %s result", def->name, v,
                       (long long)bad, sh.data);
        if (ro->step) tfg_diag_note(s->diag, NULL, "in training step %lld", (long long)ro->step);
        tfg_strbuf_free(&sh);
        st = TFG_ERR_NUMERIC;
        break;
      }
    }
    /* Free inputs whose last consumer this was. */
    for (int k = 0; k < nd->ninputs; k++) {
      tfg_node_id x = nd->inputs[k];
      if (--uses[x] == 0 && owned[x]) {
        free(val[x]);
        val[x] = NULL;
      }
    }
  }
  if (st == TFG_OK) {
    s->kept = realloc(s->kept, sizeof *s->kept * (size_t)(nfetch ? nfetch : 1));
    TFG_ASSERT(s->kept != NULL);
    for (int i = 0; i < nfetch; i++) {
      tfg_node_id id = fetch[i];
      const tfg_node *nd = &g->nodes[id];
      void *keep;
      bool dup = false; /* fetched twice in one run */
      for (int k = 0; k < i; k++) dup |= fetch[k] == id;
      if (owned[id] && !dup) {
        keep = val[id]; /* computed by this run: hand the buffer over */
        owned[id] = false;
      } else {
        /* A param, an input or a repeat: copy, the original lives on. */
        keep = alloc_bytes(node_bytes(nd));
        memcpy(keep, val[id], node_bytes(nd));
      }
      s->kept[s->nkept++] = keep;
      out[i] = (tfg_tensor){keep, nd->dtype, nd->shape};
    }
  }
  for (int32_t i = 0; i < n; i++)
    if (owned[i] && val[i]) free(val[i]);
  tfg_strbuf_free(&ctx.err);
  free(need);
  free(uses);
  free(val);
  free(owned);
  return st;
}
