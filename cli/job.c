/* cli/job.c: the job every rank of an mpirun job must mean (cli/job.h). */
#include "cli/job.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/fold.h"
#include "compiler/strategy/strategy.h"
#include "ir/ops.h"
#include "kernels/init_math.h"
#include "runtime/mpi.h"

/*
 * Ranks that build different programs must not train: each would apply
 * its own update to the gradients all of them sum, and rank 0 would log
 * and checkpoint one model while the others train another (or a
 * collective of one rank would meet another's of another size). So
 * every rank writes down the job it means, one meaningful line per
 * setting or node, and tfg_mpi_same (runtime/mpi.h) compares their
 * 64-bit hashes: only the hashes travel, and rank 0's text only when
 * they differ, so a big graph costs a few MB of text formatted once. */

/* v in the fewest digits that read back as v ("0.1", not
 * "0.10000000000000001"): the same on every rank for the same double,
 * and as a program wrote it in a message. */
static void job_num(tfg_strbuf *t, double v) {
  char buf[40];
  snprintf(buf, sizeof buf, "%.15g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
  tfg_strbuf_puts(t, buf);
}

/* " key value" (job_num's digits) */
static void job_kv(tfg_strbuf *t, const char *key, double v) {
  tfg_strbuf_printf(t, " %s ", key);
  job_num(t, v);
}

/* FNV-1a, 64 bits, of a constant's bytes: its values stand in the text
 * as this hash, so a big constant costs a pass over it, not its text. */
static uint64_t job_bytes_hash(const void *data, size_t n) {
  const uint8_t *b = data;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void job_devspec(tfg_strbuf *t, const tfg_devspec *s) {
  switch (s->kind) {
  case TFG_DEV_NONE: tfg_strbuf_puts(t, "none"); return;
  case TFG_DEV_CPU: tfg_strbuf_printf(t, "cpu:%lld", (long long)s->index); return;
  case TFG_DEV_GPU: tfg_strbuf_printf(t, "gpu:%lld", (long long)s->index); return;
  case TFG_DEV_GPU_ANY: tfg_strbuf_puts(t, "gpu:*"); return;
  }
  tfg_strbuf_puts(t, "?");
}

/* A strategy's argument as the program wrote it. */
static void job_devarg(tfg_strbuf *t, const tfg_devarg *a) {
  switch (a->kind) {
  case TFG_DEVARG_NONE: tfg_strbuf_puts(t, "none"); return;
  case TFG_DEVARG_DEVICE: job_devspec(t, &a->dev); return;
  case TFG_DEVARG_INT: tfg_strbuf_printf(t, "%lld", (long long)a->i); return;
  case TFG_DEVARG_OTHER: tfg_strbuf_puts(t, a->what ? a->what : "?"); return;
  case TFG_DEVARG_LIST:
    tfg_strbuf_putc(t, '[');
    for (int32_t i = 0; i < a->n; i++) {
      if (i) tfg_strbuf_puts(t, ", ");
      job_devarg(t, &a->items[i]);
    }
    tfg_strbuf_putc(t, ']');
    return;
  }
  tfg_strbuf_puts(t, "?");
}

/* " key=value" when the value is not zero (job_attrs' items). */
static void job_i64(tfg_strbuf *t, const char *k, int64_t v) {
  if (v) tfg_strbuf_printf(t, " %s=%lld", k, (long long)v);
}
static void job_f64(tfg_strbuf *t, const char *k, double v) {
  if (v == 0) return;
  tfg_strbuf_printf(t, " %s=", k);
  job_num(t, v);
}
static void job_ints(tfg_strbuf *t, const char *k, const int64_t *v, int n) {
  bool any = false;
  for (int i = 0; i < n; i++) any |= v[i] != 0;
  if (!any) return;
  tfg_strbuf_printf(t, " %s=", k);
  for (int i = 0; i < n; i++) tfg_strbuf_printf(t, "%s%lld", i ? "," : "", (long long)v[i]);
}

/* n's attrs into *t, each " key=value" that is not zero: one bag serves
 * every op (ir/graph.h) and an attr an op does not read stays zero, so
 * this is every attr the node has without a table per op. values: a
 * constant's values too (by their hash). */
static void job_attrs(tfg_strbuf *t, const tfg_node *n, bool values) {
  const tfg_attrs *a = &n->attrs;
  job_i64(t, "axis", a->axis);
  job_i64(t, "start", a->start);
  job_i64(t, "end", a->end);
  job_i64(t, "key", a->key);
  job_i64(t, "offset", a->offset);
  job_i64(t, "axes", a->axes);
  job_i64(t, "keepdims", a->keepdims);
  job_i64(t, "transpose_a", a->transpose_a);
  job_i64(t, "transpose_b", a->transpose_b);
  job_i64(t, "causal", a->causal);
  job_ints(t, "stride", a->stride, 2);
  job_ints(t, "pad", a->pad, 4);
  job_ints(t, "size", a->size, 2);
  int64_t perm[TFG_MAX_RANK];
  for (int i = 0; i < TFG_MAX_RANK; i++) perm[i] = a->perm[i];
  job_ints(t, "perm", perm, TFG_MAX_RANK);
  if (a->dtype) tfg_strbuf_printf(t, " dtype=%s", tfg_dtype_name(a->dtype));
  if (a->init) tfg_strbuf_printf(t, " init=%s", tfg_init_name(a->init)); /* zeros: 0, shown as nothing */
  job_f64(t, "value", a->value);
  job_f64(t, "a", a->a);
  job_f64(t, "b", a->b);
  if (a->seed) tfg_strbuf_printf(t, " seed=%llu", (unsigned long long)a->seed);
  job_i64(t, "seeded", a->seeded);
  job_i64(t, "n", a->n);
  job_ints(t, "iv", a->iv, a->niv);
  job_i64(t, "iv_none", a->iv_none);
  job_i64(t, "pad_mode", a->pad_mode);
  job_i64(t, "views", a->views);
  for (int k = 0; k <= TFG_VIEW_OUT; k++) {
    if (!(a->views >> k & 1)) continue;
    int64_t vp[TFG_MAX_RANK];
    for (int i = 0; i < TFG_MAX_RANK; i++) vp[i] = a->view_perm[k][i];
    tfg_strbuf_printf(t, " view%d=", k);
    for (int i = 0; i < TFG_MAX_RANK; i++) tfg_strbuf_printf(t, "%s%lld", i ? "," : "", (long long)vp[i]);
  }
  job_f64(t, "lr", a->opt.lr);
  job_f64(t, "momentum", a->opt.momentum);
  job_f64(t, "dampening", a->opt.dampening);
  job_f64(t, "beta1", a->opt.beta1);
  job_f64(t, "beta2", a->opt.beta2);
  job_f64(t, "eps", a->opt.eps);
  job_f64(t, "weight_decay", a->opt.weight_decay);
  job_i64(t, "nesterov", a->opt.nesterov);
  job_i64(t, "decoupled", a->opt.decoupled);
  job_i64(t, "lr_kind", a->opt.lr_kind);
  job_f64(t, "warmup", a->opt.warmup);
  job_f64(t, "total", a->opt.total);
  job_f64(t, "min", a->opt.min);
  job_f64(t, "every", a->opt.every);
  job_f64(t, "gamma", a->opt.gamma);
  if (a->data && values)
    tfg_strbuf_printf(t, " values=#%016llx",
                      (unsigned long long)job_bytes_hash(a->data, (size_t)tfg_node_bytes(n)));
}

/* A line per node of g in [from, to): its op, dtype and shape, inputs,
 * name, device pin and attrs, a constant's values by their hash. The
 * source line says where in a message; a file name would differ between
 * ranks that name one program by two paths.
 *
 * added: the nodes the compile added for the training steps, folded the
 * passes' marks (compiler/fold.h; NULL when no pass ran). Two things of
 * those differ from rank to rank by design, so they are written in a
 * form that does not: the strategy cuts each rank its own rows of the
 * batch (compiler/strategy.c add_slices: a SLICE of an INPUT, written as
 * its rows) and, under ZeRO, its own piece of each flat param and
 * gradient (a SLICE of a whole number of pieces, written as its length), and offsets each replica's dropout mask by its place in the
 * job (clone_replica, and autodiff's gradient copies it: a DROPOUT's
 * start, left out). And a constant that folding computed is written
 * without its values: the CPU kernels made them from nodes written down
 * already, and two machines' BLAS may round them apart, which must not
 * refuse a job (nor may a constant of a pipeline stage on another rank,
 * whose rank alone knows whether folding made it: compiler/ranks.h). */
static void job_nodes(tfg_strbuf *t, const tfg_graph *g, int32_t from, int32_t to, bool added,
                      const uint8_t *folded, const int16_t *owner) {
  for (int32_t i = from; i < to; i++) {
    tfg_node n = g->nodes[i]; /* a copy, made rank-independent below */
    /* a pipeline across ranks: a node one rank runs is marked another
     * rank's on the others (compiler/ranks.h), its pass's mark unseen
     * there: written as a computed one, without the mark */
    bool owned = owner && owner[i] >= 0, computed = folded && folded[i] == TFG_FOLD_CONST && !owned;
    if (added && n.op == TFG_OP_DROPOUT) n.attrs.offset = 0;
    /* a rank's rows of the batch, and its piece of a flat param or
     * gradient (ZeRO: the same length on every rank) */
    const tfg_node *src = n.op == TFG_OP_SLICE && n.ninputs == 1 ? &g->nodes[n.inputs[0]] : NULL;
    int64_t len = n.attrs.end - n.attrs.start;
    bool piece = src && src->shape.rank == 1 && len > 0 && src->shape.dim[0] % len == 0;
    if (added && src && (src->op == TFG_OP_INPUT || piece)) {
      n.attrs.end -= n.attrs.start;
      n.attrs.start = 0;
    }
    tfg_strbuf_printf(t, "node %d at line %u: %s%s ", (int)i, n.loc.line, tfg_op_get(n.op)->name,
                      computed ? " (folded)" : "");
    tfg_shape_format(t, n.dtype, &n.shape);
    if (n.ninputs) {
      tfg_strbuf_puts(t, " of");
      for (int k = 0; k < n.ninputs; k++) tfg_strbuf_printf(t, "%s%d", k ? "," : " ", (int)n.inputs[k]);
    }
    if (n.name) tfg_strbuf_printf(t, " name=%s", n.name);
    if (n.pin.kind != TFG_DEV_NONE) {
      tfg_strbuf_puts(t, " @");
      job_devspec(t, &n.pin);
    }
    job_attrs(t, &n, !computed && !owned);
    /* another rank's node is this rank's only (compiler/ranks.h) */
    if (folded && tfg_fold_removed(folded[i]) && folded[i] != TFG_FOLD_REMOTE) tfg_strbuf_printf(t, " removed=%d", folded[i]);
    tfg_strbuf_putc(t, '\n');
  }
}

static const char *job_lr_kind(tfg_lr_kind k) {
  switch (k) {
  case TFG_LR_CONSTANT: return "constant";
  case TFG_LR_LINEAR: return "linear";
  case TFG_LR_COSINE: return "cosine";
  case TFG_LR_STEP: return "step";
  }
  return "?";
}

/* A train's settings, a few lines each starting "train at line L:", so
 * that the first line that differs names the setting: the optimizer and
 * its hyperparameters, the schedule, clipping and precision, the
 * strategy and counts, and the files it writes. */
static void job_train(tfg_strbuf *t, const tfg_action *a) {
  const tfg_train_config *c = &a->config;
  unsigned line = a->loc.line;
  const tfg_optimizer_config *op = &c->optimizer;
  tfg_strbuf_printf(t, "train at line %u: optimizer %s lr ", line, tfg_optimizer_name(op->kind));
  job_num(t, op->lr);
  job_kv(t, "weight_decay", op->weight_decay);
  switch (op->kind) { /* the hyperparameters this optimizer reads */
  case TFG_OPTIMIZER_SGD:
    job_kv(t, "momentum", op->momentum);
    tfg_strbuf_printf(t, " nesterov %s", op->nesterov ? "true" : "false");
    break;
  case TFG_OPTIMIZER_ADAM:
  case TFG_OPTIMIZER_ADAMW:
    job_kv(t, "b1", op->b1);
    job_kv(t, "b2", op->b2);
    job_kv(t, "eps", op->eps);
    break;
  }
  const tfg_lr_schedule *s = &c->lr_schedule;
  tfg_strbuf_printf(t, "\ntrain at line %u: lr_schedule %s warmup ", line, job_lr_kind(s->kind));
  job_num(t, s->warmup);
  job_kv(t, "total", s->total);
  job_kv(t, "min", s->min);
  job_kv(t, "every", s->every);
  job_kv(t, "gamma", s->gamma);
  tfg_strbuf_printf(t, "\ntrain at line %u: clip_grad_norm ", line);
  job_num(t, c->clip_grad_norm);
  tfg_strbuf_printf(t, ", precision %s, accumulate %d, no_decay [", tfg_dtype_name(c->precision), c->accumulate);
  for (int i = 0; i < c->nno_decay; i++) tfg_strbuf_printf(t, "%s\"%s\"", i ? ", " : "", c->no_decay[i]);
  tfg_strbuf_printf(t, "], zero %d, recompute [", c->zero);
  for (int i = 0; i < c->nrecompute; i++) tfg_strbuf_printf(t, "%s\"%s\"", i ? ", " : "", c->recompute[i]);
  if (c->recompute_auto) tfg_strbuf_puts(t, "auto");
  tfg_strbuf_printf(t, "]\ntrain at line %u: strategy %s(", line, c->strategy.name);
  for (int i = 0; i < c->strategy.nargs; i++) {
    tfg_strbuf_printf(t, "%s%s = ", i ? ", " : "", c->strategy.arg_names[i]);
    job_devarg(t, &c->strategy.args[i]);
  }
  tfg_strbuf_printf(t, ") over %d gpus, %lld steps, %lld epochs, seed %lld\n", c->strategy.gpus, (long long)c->steps,
                    (long long)c->epochs, (long long)c->seed);
  /* log_every and eval_every are collectives too: every rank takes the
   * mean of the logged values and evaluates at the same steps */
  tfg_strbuf_printf(t, "train at line %u: loss node %d, metrics [", line, (int)a->loss);
  for (int i = 0; i < c->nmetrics; i++) tfg_strbuf_printf(t, "%s%d", i ? ", " : "", (int)c->metrics[i]);
  tfg_strbuf_printf(t, "], log_every %lld, eval_every %lld, checkpoint_every %lld\n", (long long)c->log_every,
                    (long long)c->eval_every, (long long)c->checkpoint_every);
  tfg_strbuf_printf(t, "train at line %u: checkpoint %s, log %s\n", line, c->checkpoint ? c->checkpoint : "none",
                    c->log ? c->log : "none");
}

/* The program as the interpreter built it: its graph node by node, with
 * every constant's values (by hash), initializer and seed. Taken before
 * the compile driver runs, whose passes rewrite nodes in place (folding
 * turns ops into constants). Appended to *t. */
void cli_job_program(tfg_strbuf *t, const tfg_program *p) {
  job_nodes(t, p->graph, 0, p->graph->nnodes, false, NULL, NULL);
}

/* Under mpirun: every rank must mean the same job (runtime/mpi.h
 * tfg_mpi_same) before any of them starts: the --set, --seed, --feed and
 * --bucket-size values and the devices, each train's settings (the
 * optimizer and all its hyperparameters, the schedule, clipping,
 * precision, no_decay, strategy, counts, metrics, files), the loads and
 * the inputs' data, every all-reduce (its key, replicas and tensor) in
 * graph order, then the program's graph (written: job_program's text,
 * taken before the compile) and the nodes the compile added for the
 * training steps (c's passes' marks applied). 0, or EXIT_USAGE on every
 * rank after saying which differ. */
int cli_same_job(const cli_opts *o, const tfg_program *p, const cli_compiled *c, int32_t nwritten,
                 const tfg_strbuf *written) {
  if (tfg_mpi_size() < 2) return 0;
  tfg_strbuf t = {0}, err = {0};
  for (int i = 0; i < o->nsets; i++) tfg_strbuf_printf(&t, "--set %s=%s\n", o->sets[i].name, o->sets[i].value);
  tfg_strbuf_printf(&t, "--devices %s\n", o->devices ? o->devices : "(default)");
  tfg_strbuf_printf(&t, "--seed %llu\n", (unsigned long long)o->seed);
  tfg_strbuf_printf(&t, "--bucket-size %lld\n", (long long)o->bucket_bytes); /* the all-reduces' buckets */
  for (int i = 0; i < o->nfeeds; i++) tfg_strbuf_printf(&t, "--feed %s=%s\n", o->feeds[i].name, o->feeds[i].path);
  for (int i = 0; i < p->nactions; i++)
    if (p->actions[i].kind == TFG_ACTION_TRAIN) job_train(&t, &p->actions[i]);
  for (int i = 0; i < p->nloads; i++)
    tfg_strbuf_printf(&t, "load at line %u: %s, strict %s\n", p->loads[i].loc.line, p->loads[i].path,
                      p->loads[i].strict ? "true" : "false");
  for (int i = 0; i < p->nfeeds; i++) {
    const tfg_feed *f = &p->feeds[i];
    if (f->ds)
      tfg_strbuf_printf(&t, "input %s: from %s column %d, %s split\n", p->graph->nodes[f->node].name, f->ds_path,
                        f->col, f->split == TFG_SPLIT_TRAIN ? "train" : "test");
  }
  const tfg_graph *g = p->graph;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const tfg_node *n = &g->nodes[i];
    if (!tfg_op_bucketed(n->op)) continue;
    tfg_strbuf_printf(&t, "%s key %lld over %lld replicas: ", tfg_op_get(n->op)->name, (long long)n->attrs.key,
                      (long long)n->attrs.n);
    tfg_shape_format(&t, n->dtype, &n->shape);
    tfg_strbuf_puts(&t, "\n");
  }
  if (written->data) tfg_strbuf_putn(&t, written->data, written->len);
  job_nodes(&t, g, nwritten, g->nnodes, true, c->folded, c->owner);
  int rc = 0;
  if (tfg_mpi_same("collective schedule", t.data ? t.data : "", &err) != TFG_OK) {
    fprintf(stderr, "tfg run: rank %d: %s\n", tfg_mpi_rank(), err.data);
    rc = EXIT_USAGE;
  }
  tfg_strbuf_free(&t);
  tfg_strbuf_free(&err);
  return rc;
}

