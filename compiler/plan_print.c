/* compiler/plan_print.c: `tfg plan`, a plan as text (tfg_plan_print),
 * with the node, device and stream names that the builder's errors and
 * the validator's messages use too, and tfg_plan_capturable, which the
 * print asks for its "graphs:" line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/assert.h"
#include "base/json.h"
#include "ir/ops.h"
#include "compiler/plan_impl.h"

/* ---- text shared by errors, the validator and print ------------------------ */


/* "n3 matmul (t.tfg:4)"; named nodes as "n0 param h.w (nn.tfg:18)". */
void tfg_plan_node_text(const tfg_graph *g, tfg_node_id id, tfg_strbuf *out) {
  const tfg_node *n = &g->nodes[id];
  tfg_strbuf_printf(out, "n%d %s", (int)id, tfg_op_get(n->op)->name);
  if (n->name) tfg_strbuf_printf(out, " %s", n->name);
  if (n->loc.src) tfg_strbuf_printf(out, " (%s:%u)", tfg_path_base(n->loc.src->name), n->loc.line);
}

const char *tfg_plan_dev_name(const tfg_plan *p, int d) { return tfg_devices_at(p->ds, d)->name; }

static const char *const stream_names[] = {"compute", "copy", "collective"};

const char *tfg_plan_stream_name(int s) { return s >= 0 && s < TFG_PLAN_STREAMS ? stream_names[s] : "?"; }

/* ---- print ---------------------------------------------------------------------------- */

static const char *const kind_names[] = {"launch", "copy", "record", "wait", "allreduce"};

/* A step's kind as printed: a collective step by its bucket's op
 * ("allreduce", "reduce_scatter", "all_gather"). */
static const char *step_kind(const tfg_plan *p, const tfg_plan_step *st) {
  bool known = st->kind >= TFG_PLAN_LAUNCH && st->kind <= TFG_PLAN_ALLREDUCE;
  if (st->kind == TFG_PLAN_ALLREDUCE && st->bucket >= 0 && st->bucket < p->nbuckets)
    return tfg_op_get(p->buckets[st->bucket].op)->name;
  return known ? kind_names[st->kind] : "?";
}

/* "3 tensors, 1.5 MiB, ranks gpu:0 gpu:1" ("reduce_scatter of 3 tensors, ..."
 * for ZeRO's collectives) */
static void bucket_text(const tfg_plan *p, int b, tfg_strbuf *out) {
  const tfg_plan_bucket *pb = &p->buckets[b];
  if (pb->op != TFG_OP_ALLREDUCE) tfg_strbuf_printf(out, "%s of ", tfg_op_get(pb->op)->name); /* ZeRO's */
  tfg_strbuf_printf(out, "%d tensor%s, ", pb->nnodes, pb->nnodes == 1 ? "" : "s");
  tfg_size_format(out, pb->bytes);
  tfg_strbuf_puts(out, ", ranks");
  for (int r = 0; r < pb->nranks; r++)
    tfg_strbuf_printf(out, " %s",
                      pb->devices[r] >= 0 && pb->devices[r] < p->ndev ? tfg_plan_dev_name(p, pb->devices[r]) : "?");
}

/* Member e of chain c as the expression of its ops: "relu(add(mul))",
 * each op with the members it reads (its other inputs are the chain's). */
static void chain_expr(const tfg_plan *p, const tfg_plan_chain *c, int e, tfg_strbuf *out) {
  const tfg_node *nd = &p->g->nodes[c->nodes[e]];
  tfg_strbuf_puts(out, tfg_op_get(nd->op)->name);
  int nargs = 0;
  for (int k = 0; k < nd->ninputs; k++) {
    if (k > 0 && nd->inputs[k] == nd->inputs[0]) continue; /* x * x: once */
    for (int f = e - 1; f >= 0; f--)
      if (c->nodes[f] == nd->inputs[k]) {
        tfg_strbuf_puts(out, nargs++ ? ", " : "(");
        chain_expr(p, c, f, out);
        break;
      }
  }
  if (nargs) tfg_strbuf_putc(out, ')');
}

/* "fused relu(add(mul)) n12 (t.tfg:3), members n10 n11 n12" */
static void chain_text(const tfg_plan *p, int ci, tfg_strbuf *out) {
  const tfg_plan_chain *c = &p->chains[ci];
  const tfg_node *last = &p->g->nodes[c->nodes[c->nnodes - 1]];
  tfg_strbuf_puts(out, "fused ");
  chain_expr(p, c, c->nnodes - 1, out);
  tfg_strbuf_printf(out, " n%d", (int)c->nodes[c->nnodes - 1]);
  if (last->loc.src) tfg_strbuf_printf(out, " (%s:%u)", tfg_path_base(last->loc.src->name), last->loc.line);
  tfg_strbuf_puts(out, ", members");
  for (int e = 0; e < c->nnodes; e++) tfg_strbuf_printf(out, " n%d", (int)c->nodes[e]);
}

bool tfg_plan_capturable(const tfg_plan *p, const uint8_t *captured, tfg_strbuf *why) {
  int *rec = malloc(sizeof *rec * ((size_t)p->nevents + 1));
  TFG_ASSERT(rec != NULL);
  for (int e = 0; e < p->nevents; e++) rec[e] = -1;
  for (int d = 0; d < p->ndev; d++)
    for (int k = 0; k < p->dev[d].nsteps; k++)
      if (p->dev[d].steps[k].kind == TFG_PLAN_RECORD) rec[p->dev[d].steps[k].event] = d;
  bool ok = true;
  for (int d = 0; d < p->ndev && ok; d++) {
    if (captured[d]) continue;
    for (int k = 0; k < p->dev[d].nsteps && ok; k++) {
      const tfg_plan_step *st = &p->dev[d].steps[k];
      int from = st->kind == TFG_PLAN_WAIT ? rec[st->event] : st->kind == TFG_PLAN_COPY ? st->src : -1;
      if (from < 0 || !captured[from]) continue;
      tfg_strbuf_printf(why, "%s %s %s (its step %d)", tfg_plan_dev_name(p, d),
                        st->kind == TFG_PLAN_WAIT ? "waits for" : "copies from", tfg_plan_dev_name(p, from), k);
      ok = false;
    }
  }
  for (int b = 0; b < p->nbuckets && ok; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    for (int r = 1; r < pb->nranks && ok; r++)
      if (!captured[pb->devices[r]] != !captured[pb->devices[0]]) {
        tfg_strbuf_printf(why, "bucket %d all-reduces over %s and %s", b, tfg_plan_dev_name(p, pb->devices[0]),
                          tfg_plan_dev_name(p, pb->devices[r]));
        ok = false;
      }
  }
  free(rec);
  return ok;
}

/* The line under the header of a plan with GPUs: whether its runs can be
 * captured as CUDA graphs, over which devices, fed by which. */
static void print_graphs(const tfg_plan *p, tfg_strbuf *out) {
  uint8_t *gpu = calloc((size_t)p->ndev + 1, 1);
  TFG_ASSERT(gpu != NULL);
  int ngpu = 0;
  for (int d = 0; d < p->ndev; d++) {
    tfg_device_kind k = tfg_devices_at(p->ds, d)->kind;
    gpu[d] = (k == TFG_DEVICE_CUDA || k == TFG_DEVICE_SIM) && (p->dev[d].nsteps > 0 || p->dev[d].nbuffers > 0);
    ngpu += gpu[d];
  }
  if (ngpu > 0) {
    tfg_strbuf why = {0};
    if (tfg_plan_capturable(p, gpu, &why)) {
      tfg_strbuf_puts(out, "graphs: runs seen before can be replayed as CUDA graphs on ");
      for (int d = 0, n = 0; d < p->ndev; d++)
        if (gpu[d]) tfg_strbuf_printf(out, "%s%s", n++ ? ", " : "", tfg_plan_dev_name(p, d));
      int nfeed = 0;
      for (int d = 0; d < p->ndev; d++)
        if (!gpu[d] && p->dev[d].nsteps > 0)
          tfg_strbuf_printf(out, "%s%s", nfeed++ ? ", " : " (first: ", tfg_plan_dev_name(p, d));
      tfg_strbuf_puts(out, nfeed ? ", feeding them)\n" : "\n");
    } else {
      tfg_strbuf_printf(out, "graphs: not captured: %s\n", why.data);
    }
    tfg_strbuf_free(&why);
  }
  free(gpu);
}

void tfg_plan_memory_text(const tfg_plan *p, int d, tfg_strbuf *out) {
  tfg_plan_memory m;
  tfg_plan_memory_of(p, d, &m);
  const struct {
    const char *what;
    int64_t bytes;
  } part[] = {{"params", m.params}, {"gradients", m.grads}, {"optimizer state", m.state},
              {"activations", m.activations}, {"free gaps", m.gaps}};
  tfg_strbuf_printf(out, " (step %d): ", m.step);
  for (size_t k = 0; k < sizeof part / sizeof part[0]; k++) {
    tfg_strbuf_printf(out, "%s%s ", k ? ", " : "", part[k].what);
    tfg_size_format(out, part[k].bytes);
  }
}

void tfg_plan_print(const tfg_plan *p, tfg_strbuf *out) {
  const tfg_graph *g = p->g;
  /* Who records and who waits on each event, for the text beside them:
   * the recorder, and the waiters in list order (a bucket's ev2 may have
   * several), as lists threaded through wnext. */
  int nwaits = 0;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) nwaits += p->dev[d].steps[s].kind == TFG_PLAN_WAIT;
  int *rec_dev = malloc(sizeof *rec_dev * ((size_t)p->nevents + 1));
  int *rec_stream = malloc(sizeof *rec_stream * ((size_t)p->nevents + 1));
  int *whead = malloc(sizeof *whead * ((size_t)p->nevents + 1));
  int *wtail = malloc(sizeof *wtail * ((size_t)p->nevents + 1));
  int *wdev = malloc(sizeof *wdev * ((size_t)nwaits + 1));
  int *wstream = malloc(sizeof *wstream * ((size_t)nwaits + 1));
  int *wnext = malloc(sizeof *wnext * ((size_t)nwaits + 1));
  TFG_ASSERT(rec_dev && rec_stream && whead && wtail && wdev && wstream && wnext);
  int ncopies = 0, nw = 0;
  for (int e = 0; e < p->nevents; e++) rec_dev[e] = whead[e] = wtail[e] = -1;
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind == TFG_PLAN_COPY) ncopies++;
      if (st->kind != TFG_PLAN_RECORD && st->kind != TFG_PLAN_WAIT) continue;
      if (st->event < 0 || st->event >= p->nevents) continue;
      if (st->kind == TFG_PLAN_RECORD) {
        if (rec_dev[st->event] < 0) {
          rec_dev[st->event] = d;
          rec_stream[st->event] = st->stream;
        }
        continue;
      }
      wdev[nw] = d;
      wstream[nw] = st->stream;
      wnext[nw] = -1;
      if (wtail[st->event] >= 0) wnext[wtail[st->event]] = nw;
      else whead[st->event] = nw;
      wtail[st->event] = nw++;
    }
  /* With buckets the columns widen for "collective" and the widest
   * collective's name ("allreduce", "reduce_scatter"); plans without keep
   * the narrow ones. */
  bool coll = p->nbuckets > 0;
  int sw = coll ? 10 : 7, kw = 6;
  for (int b = 0; b < p->nbuckets; b++) {
    int w = (int)strlen(tfg_op_get(p->buckets[b].op)->name);
    if (w > kw) kw = w;
  }
  tfg_strbuf_printf(out, "plan: %d device%s, %d cop%s, %d event%s", p->ndev, p->ndev == 1 ? "" : "s", ncopies,
                    ncopies == 1 ? "y" : "ies", p->nevents, p->nevents == 1 ? "" : "s");
  if (coll) tfg_strbuf_printf(out, ", %d bucket%s", p->nbuckets, p->nbuckets == 1 ? "" : "s");
  if (p->nchains > 0) {
    int fused = 0;
    for (int c = 0; c < p->nchains; c++) fused += p->chains[c].nnodes;
    tfg_strbuf_printf(out, ", %d fused chain%s (%d ops)", p->nchains, p->nchains == 1 ? "" : "s", fused);
  }
  if (p->folded) {
    int removed = 0, consts = 0, simplified = 0, strided = 0;
    for (tfg_node_id i = 0; i < g->nnodes; i++) {
      removed += p->folded[i] == TFG_FOLD_REMOVED;
      consts += p->folded[i] == TFG_FOLD_CONST;
      simplified += p->folded[i] == TFG_FOLD_SIMPLIFIED;
      strided += p->folded[i] == TFG_FOLD_LAYOUT;
    }
    if (removed + consts > 0)
      tfg_strbuf_printf(out, ", %d op%s folded into %d constant%s", removed + consts, removed + consts == 1 ? "" : "s",
                        consts, consts == 1 ? "" : "s");
    if (simplified > 0) /* merged with an equal node, an identity, or dead once those were */
      tfg_strbuf_printf(out, ", %d op%s simplified away", simplified, simplified == 1 ? "" : "s");
    if (strided > 0) /* read through strides by matmuls and attentions (compiler/layout.h) */
      tfg_strbuf_printf(out, ", %d transpose%s read through strides", strided, strided == 1 ? "" : "s");
  }
  /* Views (docs/plan.md, Views), threaded per base for the memory plan. */
  int nviews = 0;
  int *vhead = NULL, *vnext = NULL;
  if (p->view_of) {
    vhead = malloc(sizeof *vhead * ((size_t)g->nnodes + 1));
    vnext = malloc(sizeof *vnext * ((size_t)g->nnodes + 1));
    TFG_ASSERT(vhead && vnext);
    for (tfg_node_id i = 0; i < g->nnodes; i++) vhead[i] = -1;
    for (tfg_node_id i = g->nnodes - 1; i >= 0; i--) {
      tfg_node_id b = p->view_of[i];
      if (b < 0 || b >= g->nnodes) continue;
      nviews++;
      vnext[i] = vhead[b];
      vhead[b] = i;
    }
    if (nviews > 0)
      tfg_strbuf_printf(out, ", %d view%s (no launch, no copy)", nviews, nviews == 1 ? "" : "s");
  }
  tfg_strbuf_putc(out, '\n');
  print_graphs(p, out);
  for (int d = 0; d < p->ndev; d++) {
    const tfg_plan_device *pd = &p->dev[d];
    tfg_strbuf_printf(out, "\n%s: %s, %d step%s, %d buffer%s, persistent ", tfg_plan_dev_name(p, d),
                      coll ? "3 streams (0 compute, 1 copy-in, 2 collective)" : "2 streams (0 compute, 1 copy-in)",
                      pd->nsteps, pd->nsteps == 1 ? "" : "s", pd->nbuffers, pd->nbuffers == 1 ? "" : "s");
    tfg_size_format(out, pd->persistent_bytes);
    tfg_strbuf_puts(out, ", peak ");
    tfg_size_format(out, pd->peak);
    tfg_strbuf_printf(out, " (%" PRId64 " bytes)\n", pd->peak);
    if (pd->nsteps) {
      tfg_strbuf_puts(out, "  at its fullest");
      tfg_plan_memory_text(p, d, out);
      tfg_strbuf_putc(out, '\n');
    }
    if (pd->nsteps) tfg_strbuf_printf(out, "  %5s  %-*s  %-*s  %s\n", "step", sw, "stream", kw, "kind", "what");
    for (int s = 0; s < pd->nsteps; s++) {
      const tfg_plan_step *st = &pd->steps[s];
      tfg_strbuf_printf(out, "  %5d  %-*s  %-*s  ", s, sw, tfg_plan_stream_name(st->stream), kw,
                        step_kind(p, st));
      bool ev_ok = st->event >= 0 && st->event < p->nevents;
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        if (st->kind == TFG_PLAN_LAUNCH && st->chain >= 0 && st->chain < p->nchains) chain_text(p, st->chain, out);
        else if (st->node >= 0 && st->node < g->nnodes) tfg_plan_node_text(g, st->node, out);
        else tfg_strbuf_printf(out, "n%d", (int)st->node);
        if (st->kind == TFG_PLAN_COPY)
          tfg_strbuf_printf(out, " from %s", st->src >= 0 && st->src < p->ndev ? tfg_plan_dev_name(p, st->src) : "?");
        break;
      case TFG_PLAN_RECORD:
        tfg_strbuf_printf(out, "event %d", st->event);
        if (ev_ok)
          for (int w = whead[st->event]; w >= 0; w = wnext[w])
            tfg_strbuf_printf(out, "%s %s %s", w == whead[st->event] ? " ->" : ",", tfg_plan_dev_name(p, wdev[w]),
                              tfg_plan_stream_name(wstream[w]));
        break;
      case TFG_PLAN_WAIT:
        tfg_strbuf_printf(out, "event %d", st->event);
        if (ev_ok && rec_dev[st->event] >= 0)
          tfg_strbuf_printf(out, " <- %s %s", tfg_plan_dev_name(p, rec_dev[st->event]),
                            tfg_plan_stream_name(rec_stream[st->event]));
        break;
      case TFG_PLAN_ALLREDUCE:
        if (st->bucket >= 0 && st->bucket < p->nbuckets) {
          tfg_strbuf_printf(out, "bucket %d: ", st->bucket);
          bucket_text(p, st->bucket, out);
        } else {
          tfg_strbuf_printf(out, "bucket %d", st->bucket);
        }
        break;
      default: break;
      }
      tfg_strbuf_putc(out, '\n');
    }
    if (pd->nbuffers) tfg_strbuf_printf(out, "  %10s  %10s  %-11s  %s\n", "offset", "bytes", "live", "tensor");
    for (int i = 0; i < pd->nbuffers; i++) {
      const tfg_plan_buffer *bf = &pd->buffers[i];
      char range[32];
      if (bf->persistent) snprintf(range, sizeof range, "always");
      else snprintf(range, sizeof range, "%d-%d", bf->first, bf->last);
      tfg_strbuf_printf(out, "  %10" PRId64 "  %10" PRId64 "  %-11s  ", bf->offset, bf->bytes, range);
      if (bf->node >= 0 && bf->node < g->nnodes) tfg_plan_node_text(g, bf->node, out);
      else tfg_strbuf_printf(out, "n%d", (int)bf->node);
      if (bf->persistent) tfg_strbuf_puts(out, ", persistent");
      if (p->folded && bf->node >= 0 && bf->node < g->nnodes && p->folded[bf->node] == TFG_FOLD_CONST)
        tfg_strbuf_puts(out, ", folded");
      if (bf->copy && bf->first >= 0 && bf->first < pd->nsteps) {
        int src = pd->steps[bf->first].src;
        tfg_strbuf_printf(out, ", copy from %s", src >= 0 && src < p->ndev ? tfg_plan_dev_name(p, src) : "?");
      }
      tfg_strbuf_putc(out, '\n');
      /* the views of this buffer's node: its bytes under another shape */
      for (int v = vhead && !bf->copy && bf->node >= 0 && bf->node < g->nnodes ? vhead[bf->node] : -1; v >= 0;
           v = vnext[v]) {
        tfg_strbuf_printf(out, "  %10" PRId64 "  %10" PRId64 "  %-11s  ", bf->offset, bf->bytes, "view");
        tfg_plan_node_text(g, v, out);
        tfg_strbuf_printf(out, ", view of n%d\n", (int)bf->node);
      }
    }
  }
  if (coll) {
    /* The buckets, each with its tensors per rank (keys in one order). */
    tfg_strbuf_printf(out, "\nbuckets: %d, cap ", p->nbuckets);
    tfg_size_format(out, p->bucket_bytes);
    tfg_strbuf_puts(out, " (all-reduced in this order on every rank)\n");
    for (int b = 0; b < p->nbuckets; b++) {
      const tfg_plan_bucket *pb = &p->buckets[b];
      tfg_strbuf_printf(out, "  bucket %d: ", b);
      bucket_text(p, b, out);
      tfg_strbuf_putc(out, '\n');
      for (int r = 0; r < pb->nranks; r++) {
        tfg_strbuf_printf(out, "    %s:",
                          pb->devices[r] >= 0 && pb->devices[r] < p->ndev ? tfg_plan_dev_name(p, pb->devices[r]) : "?");
        for (int k = 0; k < pb->nnodes; k++) {
          tfg_node_id x = pb->nodes[r * pb->nnodes + k];
          tfg_strbuf_puts(out, k ? ", " : " ");
          if (x >= 0 && x < g->nnodes) {
            tfg_plan_node_text(g, x, out);
            if (g->nodes[x].ninputs == 1) tfg_strbuf_printf(out, " of n%d", (int)g->nodes[x].inputs[0]);
          } else {
            tfg_strbuf_printf(out, "n%d", (int)x);
          }
        }
        tfg_strbuf_putc(out, '\n');
      }
    }
  }
  free(rec_dev);
  free(rec_stream);
  free(whead);
  free(wtail);
  free(wdev);
  free(wstream);
  free(wnext);
  free(vhead);
  free(vnext);
}

/* ---- --json ------------------------------------------------------------------------------ */

/* "node": N, "op": "...", "name": "..." or null, "source": "FILE:LINE" or null */
static void json_node(const tfg_graph *g, tfg_node_id id, tfg_strbuf *out) {
  tfg_strbuf_printf(out, "\"node\": %d", (int)id);
  if (id < 0 || id >= g->nnodes) return;
  const tfg_node *n = &g->nodes[id];
  tfg_strbuf_puts(out, ", \"op\": ");
  tfg_json_put_string(out, tfg_op_get(n->op)->name);
  tfg_strbuf_puts(out, ", \"name\": ");
  if (n->name) tfg_json_put_string(out, n->name);
  else tfg_strbuf_puts(out, "null");
  tfg_strbuf_puts(out, ", \"source\": ");
  if (n->loc.src) {
    tfg_strbuf src = {0};
    tfg_strbuf_printf(&src, "%s:%u", tfg_path_base(n->loc.src->name), n->loc.line);
    tfg_json_put_string(out, src.data);
    tfg_strbuf_free(&src);
  } else {
    tfg_strbuf_puts(out, "null");
  }
}

static void json_dev(const tfg_plan *p, int d, tfg_strbuf *out) {
  if (d >= 0 && d < p->ndev) tfg_json_put_string(out, tfg_plan_dev_name(p, d));
  else tfg_strbuf_puts(out, "null");
}

void tfg_plan_json(const tfg_plan *p, tfg_strbuf *out) {
  const tfg_graph *g = p->g;
  tfg_strbuf_printf(out, "{\"plan\": 1, \"events\": %d, \"bucket_cap\": %" PRId64 ",\n\"devices\": [", p->nevents,
                    p->bucket_bytes);
  for (int d = 0; d < p->ndev; d++) {
    const tfg_plan_device *pd = &p->dev[d];
    tfg_strbuf_puts(out, d ? ",\n{" : "\n{");
    tfg_strbuf_puts(out, "\"name\": ");
    json_dev(p, d, out);
    tfg_plan_memory m;
    tfg_plan_memory_of(p, d, &m);
    tfg_strbuf_printf(out, ", \"persistent_bytes\": %" PRId64 ", \"peak_bytes\": %" PRId64 ",\n \"memory\": {\"step\": %d, "
                      "\"params\": %" PRId64 ", \"gradients\": %" PRId64 ", \"optimizer_state\": %" PRId64
                      ", \"activations\": %" PRId64 ", \"gaps\": %" PRId64 "},\n \"steps\": [",
                      pd->persistent_bytes, pd->peak, m.step, m.params, m.grads, m.state, m.activations, m.gaps);
    for (int s = 0; s < pd->nsteps; s++) {
      const tfg_plan_step *st = &pd->steps[s];
      tfg_strbuf_printf(out, "%s\n  {\"step\": %d, \"stream\": \"%s\", \"kind\": \"%s\"", s ? "," : "", s,
                        tfg_plan_stream_name(st->stream), step_kind(p, st));
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        tfg_strbuf_puts(out, ", ");
        json_node(g, st->node, out);
        if (st->kind == TFG_PLAN_COPY) {
          tfg_strbuf_puts(out, ", \"from\": ");
          json_dev(p, st->src, out);
        } else if (st->chain >= 0 && st->chain < p->nchains) { /* a fused chain: its members, in graph order */
          const tfg_plan_chain *c = &p->chains[st->chain];
          tfg_strbuf_puts(out, ", \"fused\": [");
          for (int k = 0; k < c->nnodes; k++) tfg_strbuf_printf(out, "%s%d", k ? ", " : "", (int)c->nodes[k]);
          tfg_strbuf_putc(out, ']');
        }
        break;
      case TFG_PLAN_RECORD:
      case TFG_PLAN_WAIT: tfg_strbuf_printf(out, ", \"event\": %d", st->event); break;
      case TFG_PLAN_ALLREDUCE: tfg_strbuf_printf(out, ", \"bucket\": %d", st->bucket); break;
      default: break;
      }
      tfg_strbuf_putc(out, '}');
    }
    tfg_strbuf_puts(out, "],\n \"buffers\": [");
    for (int i = 0; i < pd->nbuffers; i++) {
      const tfg_plan_buffer *bf = &pd->buffers[i];
      tfg_strbuf_printf(out, "%s\n  {\"offset\": %" PRId64 ", \"bytes\": %" PRId64 ", ", i ? "," : "", bf->offset,
                        bf->bytes);
      if (bf->persistent) tfg_strbuf_puts(out, "\"live\": null, ");
      else tfg_strbuf_printf(out, "\"live\": [%d, %d], ", bf->first, bf->last);
      json_node(g, bf->node, out);
      tfg_strbuf_printf(out, ", \"persistent\": %s, \"copy_from\": ", bf->persistent ? "true" : "false");
      if (bf->copy && bf->first >= 0 && bf->first < pd->nsteps) json_dev(p, pd->steps[bf->first].src, out);
      else tfg_strbuf_puts(out, "null");
      tfg_strbuf_puts(out, ", \"views\": [");
      int nv = 0;
      for (tfg_node_id v = 0; p->view_of && !bf->copy && v < g->nnodes; v++)
        if (p->view_of[v] == bf->node) tfg_strbuf_printf(out, "%s%d", nv++ ? ", " : "", (int)v);
      tfg_strbuf_puts(out, "]}");
    }
    tfg_strbuf_puts(out, "]}");
  }
  tfg_strbuf_puts(out, "],\n\"buckets\": [");
  for (int b = 0; b < p->nbuckets; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    tfg_strbuf_printf(out, "%s\n{\"bucket\": %d, \"op\": \"%s\", \"bytes\": %" PRId64 ", \"ranks\": [", b ? "," : "", b,
                      tfg_op_get(pb->op)->name, pb->bytes);
    for (int r = 0; r < pb->nranks; r++) {
      tfg_strbuf_puts(out, r ? ", {\"device\": " : "{\"device\": ");
      json_dev(p, pb->devices[r], out);
      tfg_strbuf_puts(out, ", \"nodes\": [");
      for (int k = 0; k < pb->nnodes; k++) tfg_strbuf_printf(out, "%s%d", k ? ", " : "", (int)pb->nodes[r * pb->nnodes + k]);
      tfg_strbuf_puts(out, "]}");
    }
    tfg_strbuf_puts(out, "]}");
  }
  tfg_strbuf_puts(out, "]}\n");
}
