/* compiler/plan_validate.c: tfg_plan_validate, the plan's checker
 * (docs/plan.md has the rules and, under Validation, what it checks). It
 * trusts nothing the builder knew: it replays the steps with vector
 * clocks (the happens-before order the events and collectives give the
 * streams), then checks the memory plan against the steps and the
 * clocks. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "ir/ops.h"
#include "compiler/plan_impl.h"

/* The rank of device d in bucket pb (its devices ascend), or -1. */
static int rank_in(const tfg_plan_bucket *pb, int d) {
  int lo = 0, hi = pb->nranks;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (pb->devices[mid] < d) lo = mid + 1;
    else hi = mid;
  }
  return lo < pb->nranks && pb->devices[lo] == d ? lo : -1;
}

typedef struct checker {
  const tfg_plan *p;
  const tfg_graph *g;
  tfg_strbuf *why;
  int nstreams;       /* TFG_PLAN_STREAMS per device: stream s of device d is TFG_PLAN_STREAMS * d + s */
  /* where each node's value is produced (from a scan of the steps): by a
   * LAUNCH on stream 0, or an ALLREDUCE on stream 2 */
  int *l_dev, *l_step, *l_stream;
  int32_t *l_time;    /* its time on its stream once replayed, else 0 */
  int *p_dev;         /* the device holding it as a persistent buffer, or -1 */
  /* the copies, per node a list (from a scan of the steps) */
  int *c_head;
  struct vcopy {
    int dst, step, src, buf;
    int32_t time;     /* once replayed, else 0 */
    int next;
  } *c;
  int nc;
  int *own_buf;       /* per node: its non-copy, non-persistent buffer's index on l_dev */
  /* buckets: a (bucket, rank) pair is slot br_base[b] + r */
  int *b_of, *r_of;   /* per node: an ALLREDUCE node's bucket and rank, else -1 */
  int *br_base;
  int *ar_step;       /* per slot: its ALLREDUCE step on the rank, or -1 */
  int *ar_seq;        /* per slot: its place among the rank's ALLREDUCE steps */
  /* per step of every device (device d's step s at step_base[d] + s) */
  int *step_base;
  int32_t *clock;     /* nstreams per step once replayed: its stream's clock for every stream of the plan */
  int *release;       /* an ALLREDUCE's first compute step on the device ordered after it, or -1 */
  int *ch_of;         /* per node: the chain it is a member of, or -1 */
} checker;

static bool fail(checker *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(checker *ck, const char *fmt, ...) {
  if (ck->why) {
    va_list ap;
    va_start(ap, fmt);
    tfg_strbuf_vprintf(ck->why, fmt, ap);
    va_end(ap);
  }
  return false;
}

/* The node text as a heap string, for messages (freed by the caller). */
static char *ntext(const checker *ck, tfg_node_id id) {
  tfg_strbuf b = {0};
  if (id >= 0 && id < ck->g->nnodes) tfg_plan_node_text(ck->g, id, &b);
  else tfg_strbuf_printf(&b, "n%d (no such node)", (int)id);
  return tfg_strbuf_take(&b);
}

static struct vcopy *vfind(const checker *ck, tfg_node_id x, int dst) {
  for (int k = ck->c_head[x]; k >= 0; k = ck->c[k].next)
    if (ck->c[k].dst == dst) return &ck->c[k];
  return NULL;
}

/* A bucket's rank r's k-th node. */
static tfg_node_id bnode(const tfg_plan_bucket *pb, int r, int k) { return pb->nodes[r * pb->nnodes + k]; }

/* The bucket table: ranks distinct devices in ascending order; every
 * ALLREDUCE node of the graph in exactly one bucket, on its rank's
 * device as placed; the same keys in the same order, one dtype and the
 * same shapes on every rank; group sizes (attrs.n) the rank count; bytes
 * the sum. Fills b_of, r_of and br_base. */
/* What a read of x on device d reads: its base when x is a view and d
 * its own device (the view's value is the base's bytes; a copy of the
 * view sent elsewhere is the view's own), else x. */
static tfg_node_id vbase(const checker *ck, tfg_node_id x, int d) {
  const tfg_plan *p = ck->p;
  if (!p->view_of || p->view_of[x] < 0 || tfg_placement_device(p->pl, x) != d) return x;
  return p->view_of[x];
}

/* Whether view v is one (docs/plan.md, Views): a reshape or flatten,
 * never launched, in no chain, whose base is its input or its input's
 * base, on its device, not a view, not removed, not an all-reduced node
 * nor a param or state (a constant may be), of its dtype and bytes, with
 * a value there (launched there, or persistent there). */
static bool check_view(checker *ck, tfg_node_id v) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  tfg_node_id b = p->view_of[v];
  const tfg_node *nd = &g->nodes[v];
  char *t = ntext(ck, v);
  bool ok = true;
  int d = tfg_placement_device(p->pl, v);
  if (b < 0 || b >= g->nnodes) ok = fail(ck, "%s is a view of node %d, which does not exist", t, (int)b);
  else if (!tfg_plan_view_op(nd->op) || nd->ninputs != 1)
    ok = fail(ck, "%s is a view, but only a reshape or flatten may be one", t);
  else if (ck->l_dev[v] >= 0 || ck->ch_of[v] >= 0 || tfg_plan_removed(p, v))
    ok = fail(ck, "%s is a view, but it is launched, fused or removed", t);
  else {
    char *a = ntext(ck, b);
    const tfg_node *bn = &g->nodes[b];
    tfg_node_id x = nd->inputs[0];
    bool persistent_ok = tfg_plan_persistent(bn) ? bn->op == TFG_OP_CONST && ck->p_dev[b] == d
                                                 : ck->l_dev[b] == d && ck->l_stream[b] == TFG_PLAN_STREAM_COMPUTE;
    if (p->view_of[b] >= 0 || tfg_plan_removed(p, b) || ck->b_of[b] >= 0)
      ok = fail(ck, "%s is a view of %s, which is a view, removed or all-reduced", t, a);
    else if (x != b && (x < 0 || x >= g->nnodes || p->view_of[x] != b))
      ok = fail(ck, "%s is a view of %s, which is neither its input nor its input's base", t, a);
    else if (tfg_placement_device(p->pl, b) != d || tfg_placement_device(p->pl, x) != d)
      ok = fail(ck, "%s is a view of %s on another device", t, a);
    else if (bn->dtype != nd->dtype || tfg_plan_bytes_of(bn) != tfg_plan_bytes_of(nd) || tfg_plan_bytes_of(nd) <= 0)
      ok = fail(ck, "%s is a view of %s, whose dtype or bytes differ (or are none)", t, a);
    else if (!persistent_ok)
      ok = fail(ck, "%s is a view of %s, which is a param or state, or has no value on %s", t, a,
                tfg_plan_dev_name(p, d));
    free(a);
  }
  free(t);
  return ok;
}

static bool check_buckets(checker *ck) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int nslots = 0;
  if (p->nbuckets < 0 || (p->nbuckets > 0 && !p->buckets)) return fail(ck, "the plan has %d buckets", p->nbuckets);
  for (int b = 0; b < p->nbuckets; b++) {
    const tfg_plan_bucket *pb = &p->buckets[b];
    ck->br_base[b] = nslots;
    if (pb->nranks < 1 || pb->nnodes < 1 || !pb->devices || !pb->nodes)
      return fail(ck, "bucket %d has %d ranks and %d tensors", b, pb->nranks, pb->nnodes);
    nslots += pb->nranks;
    for (int r = 0; r < pb->nranks; r++)
      if (pb->devices[r] < 0 || pb->devices[r] >= p->ndev || (r > 0 && pb->devices[r] <= pb->devices[r - 1]))
        return fail(ck, "bucket %d: rank %d is device %d (ranks are distinct devices in ascending order)", b, r,
                    pb->devices[r]);
    int64_t bytes = 0;
    for (int r = 0; r < pb->nranks; r++)
      for (int k = 0; k < pb->nnodes; k++) {
        tfg_node_id x = bnode(pb, r, k);
        if (x < 0 || x >= g->nnodes) return fail(ck, "bucket %d: node %d does not exist", b, (int)x);
        const tfg_node *nd = &g->nodes[x], *n0 = &g->nodes[bnode(pb, 0, k)], *f = &g->nodes[bnode(pb, 0, 0)];
        char *t = ntext(ck, x);
        bool ok = true;
        int placed = tfg_placement_device(p->pl, x);
        if (nd->op != pb->op || !tfg_op_bucketed(nd->op) || nd->ninputs != 1)
          ok = fail(ck, "bucket %d holds %s, which is not a %s of one tensor", b, t, tfg_op_get(pb->op)->name);
        else if (ck->b_of[x] >= 0)
          ok = fail(ck, "%s is in bucket %d and bucket %d", t, ck->b_of[x], b);
        else if (placed != pb->devices[r])
          ok = fail(ck, "bucket %d: %s is placed on %s, but is rank %d's (%s)", b, t, tfg_plan_dev_name(p, placed), r,
                    tfg_plan_dev_name(p, pb->devices[r]));
        else if (tfg_op_bucketed(n0->op) && nd->attrs.key != n0->attrs.key)
          ok = fail(ck, "bucket %d: %s has key %" PRId64 ", but rank 0's tensor %d has key %" PRId64, b, t,
                    nd->attrs.key, k, n0->attrs.key);
        else if (nd->dtype != f->dtype || !tfg_shape_eq(&nd->shape, &n0->shape))
          ok = fail(ck, "bucket %d: %s differs from its key's other tensors or the bucket's dtype", b, t);
        else if (nd->attrs.n != pb->nranks)
          ok = fail(ck, "bucket %d: %s is one of a group of %" PRId64 " (attrs.n), but the bucket has %d ranks", b, t,
                    nd->attrs.n, pb->nranks);
        free(t);
        if (!ok) return false;
        ck->b_of[x] = b;
        ck->r_of[x] = r;
        if (r == 0) bytes += tfg_plan_bytes_of(nd);
      }
    if (bytes != pb->bytes)
      return fail(ck, "bucket %d has %" PRId64 " bytes, but its tensors have %" PRId64, b, pb->bytes, bytes);
  }
  for (tfg_node_id i = 0; i < g->nnodes; i++)
    if (tfg_op_bucketed(g->nodes[i].op) && ck->b_of[i] < 0) {
      char *t = ntext(ck, i);
      fail(ck, "%s is in no bucket", t);
      free(t);
      return false;
    }
  return true;
}

/* Whether x is an intermediate of its chain (a member but the last). */
static bool inner_of(const checker *ck, tfg_node_id x) {
  int c = ck->ch_of[x];
  return c >= 0 && ck->p->chains[c].nodes[ck->p->chains[c].nnodes - 1] != x;
}

/* The chains (docs/plan.md, Fusion): well formed, members distinct across
 * chains and in graph order, each fusable, of the last member's shape and
 * on its device; every intermediate read by exactly one op, a member of
 * its chain; the inputs exactly what chain_inputs gives; no optimizer
 * update between the first member and the last. Fills ch_of. */
static bool check_chains(checker *ck) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int32_t n = g->nnodes;
  if (p->nchains < 0 || (p->nchains > 0 && !p->chains)) return fail(ck, "the plan has %d chains", p->nchains);
  for (int c = 0; c < p->nchains; c++) {
    const tfg_plan_chain *ch = &p->chains[c];
    if (ch->nnodes < 2 || ch->nnodes > TFG_FUSED_MAX_OPS || !ch->nodes || ch->ninputs < 0 ||
        ch->ninputs > TFG_FUSED_MAX_INPUTS || (ch->ninputs > 0 && !ch->inputs))
      return fail(ck, "chain %d has %d ops and %d inputs (2 to %d ops, at most %d inputs)", c, ch->nnodes, ch->ninputs,
                  TFG_FUSED_MAX_OPS, TFG_FUSED_MAX_INPUTS);
    for (int e = 0; e < ch->nnodes; e++) {
      tfg_node_id x = ch->nodes[e];
      if (x < 0 || x >= n) return fail(ck, "chain %d: node %d does not exist", c, (int)x);
      if (e > 0 && x <= ch->nodes[e - 1]) return fail(ck, "chain %d: its members are not in graph order", c);
      if (ck->ch_of[x] >= 0) {
        char *t = ntext(ck, x);
        bool r = fail(ck, "%s is a member of chain %d and chain %d", t, ck->ch_of[x], c);
        free(t);
        return r;
      }
      ck->ch_of[x] = c;
    }
  }
  /* who reads each intermediate (distinct ops) */
  int *readers = malloc(sizeof *readers * ((size_t)n + 1));
  tfg_node_id *reader = malloc(sizeof *reader * ((size_t)n + 1));
  int *updates = malloc(sizeof *updates * ((size_t)n + 1));
  TFG_ASSERT(readers && reader && updates);
  tfg_plan_count_readers(p, g, readers, reader, updates);
  bool ok = true;
  for (int c = 0; c < p->nchains && ok; c++) {
    const tfg_plan_chain *ch = &p->chains[c];
    tfg_node_id lastm = ch->nodes[ch->nnodes - 1];
    const tfg_node *ln = &g->nodes[lastm];
    int dev = tfg_placement_device(p->pl, lastm);
    for (int e = 0; e < ch->nnodes && ok; e++) {
      tfg_node_id x = ch->nodes[e];
      const tfg_node *nd = &g->nodes[x];
      char *t = ntext(ck, x);
      if (!tfg_plan_fusable(g, x))
        ok = fail(ck, "chain %d: %s is not an elementwise f32/f64 op of inputs of its shape, scalars or broadcast", c, t);
      else if (nd->dtype != ln->dtype || !tfg_shape_eq(&nd->shape, &ln->shape))
        ok = fail(ck, "chain %d: %s differs from its last member in dtype or shape", c, t);
      else if (tfg_placement_device(p->pl, x) != dev)
        ok = fail(ck, "chain %d: %s is placed on %s, its last member on %s", c, t,
                  tfg_plan_dev_name(p, tfg_placement_device(p->pl, x)), tfg_plan_dev_name(p, dev));
      else if (x != lastm && (readers[x] != 1 || ck->ch_of[reader[x]] != c))
        ok = fail(ck, "chain %d: %s is read by %d ops%s, but an intermediate is read only by a member of its chain", c,
                  t, readers[x], readers[x] == 1 ? " (outside the chain)" : "");
      free(t);
    }
    tfg_node_id in[TFG_FUSED_MAX_INPUTS];
    int nin = ok ? tfg_plan_chain_inputs(g, ch->nodes, ch->nnodes, in, TFG_FUSED_MAX_INPUTS) : 0;
    if (ok && (nin != ch->ninputs || memcmp(in, ch->inputs, sizeof *in * (size_t)(nin > 0 ? nin : 0)) != 0))
      ok = fail(ck, "chain %d: its inputs are not what its members read outside it, each once, in first-read order", c);
    if (ok && updates[lastm] != updates[ch->nodes[0]]) {
      char *t = ntext(ck, lastm);
      ok = fail(ck,
                "chain %d (last %s) spans an optimizer update, which writes in place what the chain may read before",
                c, t);
      free(t);
    }
  }
  free(readers);
  free(reader);
  free(updates);
  return ok;
}

/* Steps well formed: kinds, streams, nodes, devices, buckets and events
 * in range; every op (not params, state and ALLREDUCE nodes) launched
 * once, on its placed device, in graph order there; every bucket's
 * ALLREDUCE once on each of its ranks and nowhere else, in one relative
 * order on all ranks; every event recorded at most once and every waited
 * event recorded. Fills the launch, copy and all-reduce tables. */
static bool check_steps(checker *ck, int *rec_dev, int *rec_step, int *nwaits, tfg_node_id *last_launch) {
  const tfg_plan *p = ck->p;
  int32_t n = ck->g->nnodes;
  for (int d = 0; d < p->ndev; d++) last_launch[d] = -1;
  for (int d = 0; d < p->ndev; d++) {
    int nseq = 0;
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      const char *dn = tfg_plan_dev_name(p, d);
      if (st->stream < 0 || st->stream >= TFG_PLAN_STREAMS)
        return fail(ck, "%s step %d: stream %d does not exist", dn, s, st->stream);
      switch (st->kind) {
      case TFG_PLAN_LAUNCH:
      case TFG_PLAN_COPY:
        if (st->node < 0 || st->node >= n) return fail(ck, "%s step %d: node %d does not exist", dn, s, (int)st->node);
        if (st->kind == TFG_PLAN_LAUNCH) {
          if (st->stream != 0) return fail(ck, "%s step %d: a launch on stream %d, not the compute stream", dn, s, st->stream);
          /* a chain's last member runs its chain; nothing else names one */
          int want = ck->ch_of[st->node] >= 0 && !inner_of(ck, st->node) ? ck->ch_of[st->node] : -1;
          if (inner_of(ck, st->node) || st->chain != want) {
            char *t = ntext(ck, st->node);
            bool r = inner_of(ck, st->node)
                         ? fail(ck, "%s step %d: launches %s, which chain %d fuses (only its last member is launched)", dn,
                                s, t, ck->ch_of[st->node])
                     : want >= 0 ? fail(ck, "%s step %d: launches %s, the last member of chain %d, without its chain", dn,
                                        s, t, want)
                                 : fail(ck, "%s step %d: launches %s with chain %d, which it does not end", dn, s, t,
                                        st->chain);
            free(t);
            return r;
          }
          if (ck->b_of[st->node] >= 0) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: launches %s, which only its bucket's all-reduce computes", dn, s, t);
            free(t);
            return r;
          }
          if (ck->l_dev[st->node] >= 0) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: %s is launched twice (first on %s step %d)", dn, s, t,
                          tfg_plan_dev_name(p, ck->l_dev[st->node]), ck->l_step[st->node]);
            free(t);
            return r;
          }
          if (last_launch[d] > st->node) {
            char *t = ntext(ck, st->node), *a = ntext(ck, last_launch[d]);
            bool r = fail(ck, "%s step %d: %s is launched after %s, out of graph order", dn, s, t, a);
            free(t);
            free(a);
            return r;
          }
          last_launch[d] = st->node;
          ck->l_dev[st->node] = d;
          ck->l_step[st->node] = s;
          ck->l_stream[st->node] = TFG_PLAN_STREAM_COMPUTE;
        } else {
          if (st->stream != 1) return fail(ck, "%s step %d: a copy on stream %d, not the copy stream", dn, s, st->stream);
          if (st->src < 0 || st->src >= p->ndev || st->src == d)
            return fail(ck, "%s step %d: a copy from device %d", dn, s, st->src);
          if (inner_of(ck, st->node)) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: copies %s, which chain %d fuses: it has no value", dn, s, t,
                          ck->ch_of[st->node]);
            free(t);
            return r;
          }
          if (vfind(ck, st->node, d)) {
            char *t = ntext(ck, st->node);
            bool r = fail(ck, "%s step %d: %s is copied to %s twice", dn, s, t, dn);
            free(t);
            return r;
          }
          ck->c[ck->nc] = (struct vcopy){.dst = d, .step = s, .src = st->src, .buf = -1, .next = ck->c_head[st->node]};
          ck->c_head[st->node] = ck->nc++;
        }
        break;
      case TFG_PLAN_ALLREDUCE: {
        if (st->stream != TFG_PLAN_STREAM_COLLECTIVE)
          return fail(ck, "%s step %d: an all-reduce on stream %d, not the collective stream", dn, s, st->stream);
        if (st->bucket < 0 || st->bucket >= p->nbuckets)
          return fail(ck, "%s step %d: bucket %d does not exist (the plan has %d)", dn, s, st->bucket, p->nbuckets);
        const tfg_plan_bucket *pb = &p->buckets[st->bucket];
        int r = rank_in(pb, d);
        if (r < 0) return fail(ck, "%s step %d: all-reduces bucket %d, whose ranks do not include %s", dn, s, st->bucket, dn);
        int slot = ck->br_base[st->bucket] + r;
        if (ck->ar_step[slot] >= 0)
          return fail(ck, "%s step %d: bucket %d is all-reduced twice on %s (first at step %d)", dn, s, st->bucket, dn,
                      ck->ar_step[slot]);
        ck->ar_step[slot] = s;
        ck->ar_seq[slot] = nseq++;
        for (int k = 0; k < pb->nnodes; k++) {
          tfg_node_id x = bnode(pb, r, k);
          ck->l_dev[x] = d;
          ck->l_step[x] = s;
          ck->l_stream[x] = TFG_PLAN_STREAM_COLLECTIVE;
        }
        break;
      }
      case TFG_PLAN_RECORD:
      case TFG_PLAN_WAIT:
        if (st->event < 0 || st->event >= p->nevents)
          return fail(ck, "%s step %d: event %d does not exist (the plan has %d)", dn, s, st->event, p->nevents);
        if (st->kind == TFG_PLAN_WAIT) {
          nwaits[st->event]++;
          break;
        }
        if (rec_dev[st->event] >= 0)
          return fail(ck, "%s step %d: event %d is recorded twice (first on %s step %d)", dn, s, st->event,
                      tfg_plan_dev_name(p, rec_dev[st->event]), rec_step[st->event]);
        rec_dev[st->event] = d;
        rec_step[st->event] = s;
        break;
      default: return fail(ck, "%s step %d: unknown step kind %d", dn, s, (int)st->kind);
      }
    }
  }
  /* Every bucket on every rank: a rank without it leaves the others
   * waiting in the collective forever. */
  for (int b = 0; b < p->nbuckets; b++)
    for (int r = 0; r < p->buckets[b].nranks; r++)
      if (ck->ar_step[ck->br_base[b] + r] < 0)
        return fail(ck, "bucket %d is never all-reduced on %s (rank %d of %d): the other ranks would wait for it forever",
                    b, tfg_plan_dev_name(p, p->buckets[b].devices[r]), r, p->buckets[b].nranks);
  /* One relative order on all ranks: for consecutive buckets a, b on a
   * device, every other device that is a rank of both runs a first.
   * (Orders that disagree only through a third bucket deadlock too; the
   * replay finds those.) */
  for (int d = 0; d < p->ndev; d++) {
    int prev = -1;
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind != TFG_PLAN_ALLREDUCE) continue;
      int cur = st->bucket;
      if (prev >= 0) {
        const tfg_plan_bucket *pa = &p->buckets[prev], *pc = &p->buckets[cur];
        for (int ra = 0; ra < pa->nranks; ra++) {
          int e = pa->devices[ra], rc = rank_in(pc, e);
          if (e == d || rc < 0) continue;
          if (ck->ar_seq[ck->br_base[prev] + ra] > ck->ar_seq[ck->br_base[cur] + rc])
            return fail(ck,
                        "buckets %d and %d are all-reduced in different orders: %s runs %d first, %s runs %d first "
                        "(the collectives would deadlock)",
                        prev, cur, tfg_plan_dev_name(p, d), prev, tfg_plan_dev_name(p, e), cur);
        }
      }
      prev = cur;
    }
  }
  /* Every op runs once, where the placer put it (an intermediate within
   * its chain's launch, which the chain's last member checks). */
  for (tfg_node_id i = 0; i < n; i++) {
    if (tfg_plan_removed(p, i) && ck->l_dev[i] >= 0) { /* folded at compile time: it never runs */
      char *t = ntext(ck, i);
      bool r = fail(ck, "%s is launched on %s but constant folding removed it", t, tfg_plan_dev_name(p, ck->l_dev[i]));
      free(t);
      return r;
    }
    if (tfg_plan_persistent(&ck->g->nodes[i]) || inner_of(ck, i) || tfg_plan_removed(p, i)) continue;
    if (p->view_of && p->view_of[i] >= 0) { /* a view runs nothing */
      if (!check_view(ck, i)) return false;
      continue;
    }
    int want = tfg_placement_device(p->pl, i);
    if (ck->l_dev[i] == want) continue;
    char *t = ntext(ck, i);
    bool r = ck->l_dev[i] < 0 ? fail(ck, "%s is never launched (it is placed on %s)", t, tfg_plan_dev_name(p, want))
                              : fail(ck, "%s is launched on %s but placed on %s", t, tfg_plan_dev_name(p, ck->l_dev[i]),
                                     tfg_plan_dev_name(p, want));
    free(t);
    return r;
  }
  for (int d = 0; d < p->ndev; d++)
    for (int s = 0; s < p->dev[d].nsteps; s++) {
      const tfg_plan_step *st = &p->dev[d].steps[s];
      if (st->kind == TFG_PLAN_WAIT && rec_dev[st->event] < 0)
        return fail(ck, "%s step %d: waits on event %d, which is never recorded", tfg_plan_dev_name(p, d), s,
                    st->event);
    }
  return true;
}

/* Whether the step at time t of stream `from` happens before what stream
 * k runs next, given k's vector clock. */
static bool before(const int32_t *clock_k, int from, int32_t t) { return t > 0 && clock_k[from] >= t; }

/* Whether a step whose clock saw `seen` of a stream happens after that
 * stream's step at time t. */
static bool before_seen(int32_t seen, int32_t t) { return t > 0 && seen >= t; }

/* Device d's step s's clock for device e's stream j once replayed (the
 * time of the last step of that stream it happens after), else 0. */
static int32_t seen_by(const checker *ck, int d, int s, int e, int j) {
  return ck->clock[(size_t)ck->nstreams * ((size_t)ck->step_base[d] + (size_t)s) + (size_t)(TFG_PLAN_STREAMS * e + j)];
}

/* The time of device d's step s on its own stream once replayed, else 0. */
static int32_t step_time(const checker *ck, int d, int s) {
  return seen_by(ck, d, s, d, ck->p->dev[d].steps[s].stream);
}

/* Records the clock of the step just run (device d's step s) for the
 * memory checks: its view of every stream. */
static void note_clock(checker *ck, int d, int s, const int32_t *clock_k) {
  memcpy(&ck->clock[(size_t)ck->nstreams * ((size_t)ck->step_base[d] + (size_t)s)], clock_k,
         sizeof *clock_k * (size_t)ck->nstreams);
}

/* Whether x's value, read on device d by a step whose stream has clock
 * ck_k, is there and happens before the read; else reports it (reader
 * names what reads, at device d step s). */
static bool check_read(checker *ck, int d, int s, const int32_t *ck_k, const char *reader, tfg_node_id x) {
  const tfg_plan *p = ck->p;
  x = vbase(ck, x, d);
  const char *dn = tfg_plan_dev_name(p, d);
  if (ck->p_dev[x] == d) return true;
  bool ok = true;
  char *t = ntext(ck, x);
  if (ck->l_dev[x] == d) {
    if (!before(ck_k, TFG_PLAN_STREAMS * d + ck->l_stream[x], ck->l_time[x]))
      ok = fail(ck,
                "%s step %d: %s reads %s (step %d, %s stream) without waiting for it: its stream waits on no event "
                "recorded after it",
                dn, s, reader, t, ck->l_step[x], tfg_plan_stream_name(ck->l_stream[x]));
  } else {
    struct vcopy *c = vfind(ck, x, d);
    if (!c)
      ok = fail(ck, "%s step %d: %s reads %s, which is not on %s: not computed there, not persistent there, not copied in",
                dn, s, reader, t, dn);
    else if (!before(ck_k, TFG_PLAN_STREAMS * d + TFG_PLAN_STREAM_COPY, c->time))
      ok = fail(ck,
                "%s step %d: %s reads the copy of %s (step %d, copy stream) without waiting for it: its stream waits "
                "on no event recorded after the copy",
                dn, s, reader, t, c->step);
  }
  free(t);
  return ok;
}

/* Replays the streams: each runs its steps in list order, a WAIT only once
 * its event is recorded, an ALLREDUCE only once every rank's collective
 * stream has reached it (then it runs on all of them at once, and each
 * rank's clock joins the others'). Vector clocks give the happens-before
 * order, in which every read must follow the step that produced the
 * value. Notes each step's clock, and each ALLREDUCE's release: the first
 * compute step of its device ordered after it. */
static bool replay(checker *ck, const int *nwaits) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  int S = ck->nstreams;
  int32_t *clock = calloc((size_t)S * (size_t)S, sizeof *clock);
  int32_t **ev = calloc((size_t)p->nevents + 1, sizeof *ev); /* an event's clock, while waits remain */
  int *waits_left = malloc(sizeof *waits_left * ((size_t)p->nevents + 1));
  bool *recorded = calloc((size_t)p->nevents + 1, sizeof *recorded);
  int *pos = calloc((size_t)S, sizeof *pos); /* next step index in the device's list, per stream */
  int *narrived = calloc((size_t)p->nbuckets + 1, sizeof *narrived);
  int nslots = p->nbuckets ? ck->br_base[p->nbuckets - 1] + p->buckets[p->nbuckets - 1].nranks : 0;
  bool *arrived = calloc((size_t)nslots + 1, sizeof *arrived);
  int *rel_pos = calloc((size_t)p->ndev + 1, sizeof *rel_pos); /* per device: the next ALLREDUCE to release */
  int32_t *join = malloc(sizeof *join * (size_t)S);
  TFG_ASSERT(clock && ev && waits_left && recorded && pos && narrived && arrived && rel_pos && join);
  memcpy(waits_left, nwaits, sizeof *waits_left * (size_t)p->nevents);
  /* per node, the ops that write it in place (an update), as a list: a
   * collective reading a value after such an op (in graph order) must run
   * after it (ZeRO gathers the piece its update wrote) */
  int nw = 0;
  for (int32_t i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].ninputs; k++) nw += (tfg_op_get(g->nodes[i].op)->inplace >> k) & 1;
  int *w_head = malloc(sizeof *w_head * ((size_t)g->nnodes + 1)), *w_next = malloc(sizeof *w_next * ((size_t)nw + 1));
  tfg_node_id *w_op = malloc(sizeof *w_op * ((size_t)nw + 1));
  TFG_ASSERT(w_head && w_next && w_op);
  for (int32_t i = 0; i < g->nnodes; i++) w_head[i] = -1;
  nw = 0;
  for (int32_t i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i].ninputs; k++)
      if ((tfg_op_get(g->nodes[i].op)->inplace >> k) & 1) {
        w_op[nw] = i;
        w_next[nw] = w_head[g->nodes[i].inputs[k]];
        w_head[g->nodes[i].inputs[k]] = nw++;
      }
  bool ok = true, progress = true;
  while (ok && progress) {
    progress = false;
    for (int k = 0; k < S && ok; k++) {
      int d = k / TFG_PLAN_STREAMS, stream = k % TFG_PLAN_STREAMS;
      const tfg_plan_device *pd = &p->dev[d];
      int32_t *ck_k = &clock[(size_t)k * (size_t)S];
      for (;;) {
        while (pos[k] < pd->nsteps && pd->steps[pos[k]].stream != stream) pos[k]++;
        if (pos[k] >= pd->nsteps) break;
        int s = pos[k];
        const tfg_plan_step *st = &pd->steps[s];
        const char *dn = tfg_plan_dev_name(p, d);
        if (st->kind == TFG_PLAN_WAIT && !recorded[st->event]) break;
        if (st->kind == TFG_PLAN_ALLREDUCE) {
          const tfg_plan_bucket *pb = &p->buckets[st->bucket];
          int r = rank_in(pb, d), slot = ck->br_base[st->bucket] + r;
          if (!arrived[slot]) {
            /* its reads happen before it, on this rank's own clock */
            char reader[64];
            snprintf(reader, sizeof reader, "bucket %d's all-reduce", st->bucket);
            for (int j = 0; j < pb->nnodes && ok; j++)
              ok = check_read(ck, d, s, ck_k, reader, g->nodes[bnode(pb, r, j)].inputs[0]);
            if (!ok) break;
            arrived[slot] = true;
            narrived[st->bucket]++;
            progress = true;
          }
          if (narrived[st->bucket] < pb->nranks) break;
          /* the last rank is here: it runs everywhere */
          for (int j = 0; j < S; j++) join[j] = 0;
          for (int q = 0; q < pb->nranks; q++) {
            const int32_t *c = &clock[(size_t)(TFG_PLAN_STREAMS * pb->devices[q] + TFG_PLAN_STREAM_COLLECTIVE) * (size_t)S];
            for (int j = 0; j < S; j++)
              if (c[j] > join[j]) join[j] = c[j];
          }
          for (int q = 0; q < pb->nranks; q++) {
            int e = pb->devices[q], kq = TFG_PLAN_STREAMS * e + TFG_PLAN_STREAM_COLLECTIVE, sq = ck->ar_step[ck->br_base[st->bucket] + q];
            int32_t *c = &clock[(size_t)kq * (size_t)S];
            memcpy(c, join, sizeof *c * (size_t)S);
            int32_t now = ++c[kq];
            for (int j = 0; j < pb->nnodes; j++) ck->l_time[bnode(pb, q, j)] = now;
            for (int j = 0; j < pb->nnodes && ok; j++) { /* after what wrote its inputs in place before it */
              tfg_node_id x = bnode(pb, q, j), y = g->nodes[x].inputs[0];
              for (int w = w_head[y]; w >= 0 && ok; w = w_next[w]) {
                tfg_node_id u = w_op[w];
                if (u > x || tfg_plan_removed(p, u) ||
                    before(c, TFG_PLAN_STREAMS * e + TFG_PLAN_STREAM_COMPUTE, ck->l_time[u]))
                  continue;
                char *t = ntext(ck, y), *un = ntext(ck, u);
                ok = fail(ck, "%s step %d: bucket %d's %s reads %s before %s writes it in place (nothing orders that "
                          "write before it)", tfg_plan_dev_name(p, e), sq, st->bucket, tfg_op_get(pb->op)->name, t, un);
                free(t);
                free(un);
              }
            }
            note_clock(ck, e, sq, c);
            TFG_ASSERT(pos[kq] == sq);
            pos[kq] = sq + 1;
          }
          narrived[st->bucket] = -1; /* ran */
          progress = true;
          continue;
        }
        progress = true;
        pos[k]++;
        int32_t now = ++ck_k[k];
        if (st->kind == TFG_PLAN_RECORD) {
          recorded[st->event] = true;
          if (waits_left[st->event] > 0) {
            ev[st->event] = malloc(sizeof **ev * (size_t)S);
            TFG_ASSERT(ev[st->event]);
            memcpy(ev[st->event], ck_k, sizeof **ev * (size_t)S);
          }
        } else if (st->kind == TFG_PLAN_WAIT) {
          const int32_t *e = ev[st->event];
          for (int j = 0; j < S; j++)
            if (e[j] > ck_k[j]) ck_k[j] = e[j];
          if (--waits_left[st->event] == 0) {
            free(ev[st->event]);
            ev[st->event] = NULL;
          }
          /* the compute stream may now be past ALLREDUCEs of its device */
          while (stream == TFG_PLAN_STREAM_COMPUTE) {
            while (rel_pos[d] < pd->nsteps && pd->steps[rel_pos[d]].kind != TFG_PLAN_ALLREDUCE) rel_pos[d]++;
            if (rel_pos[d] >= pd->nsteps || !before(ck_k, TFG_PLAN_STREAMS * d + TFG_PLAN_STREAM_COLLECTIVE, step_time(ck, d, rel_pos[d]))) break;
            ck->release[ck->step_base[d] + rel_pos[d]++] = s;
          }
        } else if (st->kind == TFG_PLAN_COPY) {
          tfg_node_id x = st->node;
          struct vcopy *c = vfind(ck, x, d);
          c->time = now;
          note_clock(ck, d, s, ck_k);
          x = vbase(ck, x, st->src); /* a view sends its base's bytes */
          if (ck->p_dev[x] == st->src) continue;
          char *t = ntext(ck, x);
          if (ck->l_dev[x] != st->src)
            ok = fail(ck, "%s step %d: copies %s from %s, which neither computes it nor holds it", dn, s, t,
                      tfg_plan_dev_name(p, st->src));
          else if (!before(ck_k, TFG_PLAN_STREAMS * st->src + ck->l_stream[x], ck->l_time[x]))
            ok = fail(ck,
                      "%s step %d: copies %s before %s has computed it (step %d): the copy stream waits on no event "
                      "recorded after it",
                      dn, s, t, tfg_plan_dev_name(p, st->src), ck->l_step[x]);
          free(t);
          if (!ok) break;
        } else { /* LAUNCH */
          int nin;
          const tfg_node_id *ins = tfg_plan_step_inputs(p, st, &nin);
          ck->l_time[st->node] = now;
          char *a = ntext(ck, st->node);
          for (int j = 0; j < nin && ok; j++) {
            tfg_node_id x = vbase(ck, ins[j], d);
            if (ck->l_dev[x] == d && ck->l_stream[x] == TFG_PLAN_STREAM_COMPUTE && ck->l_step[x] >= s) {
              char *t = ntext(ck, x);
              ok = fail(ck, "%s step %d: %s reads %s, which is computed only later (step %d)", dn, s, a, t,
                        ck->l_step[x]);
              free(t);
            } else {
              ok = check_read(ck, d, s, ck_k, a, x);
            }
          }
          /* an update overwrites its param and state in place: after
           * every copy of them to another device */
          if (ok && st->chain < 0 && tfg_plan_in_place(g->nodes[st->node].op)) {
            const tfg_node *u = &g->nodes[st->node];
            for (int j = 0; j < u->ninputs && ok; j++) {
              if (j == 1) continue; /* the gradient */
              for (int q = ck->c_head[u->inputs[j]]; q >= 0 && ok; q = ck->c[q].next) {
                const struct vcopy *c = &ck->c[q];
                if (before(ck_k, TFG_PLAN_STREAMS * c->dst + TFG_PLAN_STREAM_COPY, c->time)) continue;
                char *t = ntext(ck, u->inputs[j]);
                ok = fail(ck,
                          "%s step %d: %s overwrites %s, which %s copies (its step %d), and nothing orders the copy "
                          "before it",
                          dn, s, a, t, tfg_plan_dev_name(p, c->dst), c->step);
                free(t);
              }
            }
          }
          free(a);
          if (!ok) break;
        }
        note_clock(ck, d, s, ck_k);
      }
    }
  }
  /* Streams left with steps: each is stuck on a WAIT whose RECORD never
   * comes before it (waits that wait on each other), or on an ALLREDUCE
   * some rank never reaches. A stuck collective is named first: the
   * WAITs stuck behind it are its consequence. */
  for (int pass = 0; pass < 2 && ok; pass++)
    for (int k = 0; k < S && ok; k++) {
      const tfg_plan_device *pd = &p->dev[k / TFG_PLAN_STREAMS];
      if (pos[k] >= pd->nsteps) continue;
      const tfg_plan_step *st = &pd->steps[pos[k]];
      if (pass == 0 && st->kind == TFG_PLAN_ALLREDUCE)
        ok = fail(ck,
                  "%s step %d: bucket %d's all-reduce can never run: not every rank reaches it (buckets in different "
                  "orders, or a cycle of waits)",
                  tfg_plan_dev_name(p, k / TFG_PLAN_STREAMS), pos[k], st->bucket);
      else if (pass == 1)
        ok = fail(ck, "%s step %d: waits on event %d, which can never be recorded before it (a cycle of waits)",
                  tfg_plan_dev_name(p, k / TFG_PLAN_STREAMS), pos[k], st->event);
    }
  for (int e = 0; e < p->nevents; e++) free(ev[e]);
  void *arrays[] = {clock, ev, waits_left, recorded, pos, narrived, arrived, rel_pos, join, w_head, w_next, w_op};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
  return ok;
}

/* Buffers well formed, each the value of a step of its device, at most
 * one per tensor per device (fills the own and copy buffer tables). */
static bool check_buffers(checker *ck, int d) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  const tfg_plan_device *pd = &p->dev[d];
  const char *dn = tfg_plan_dev_name(p, d);
  int64_t capacity = tfg_devices_at(p->ds, d)->memory;
  bool ok = true;
  for (int i = 0; i < pd->nbuffers && ok; i++) {
    const tfg_plan_buffer *bf = &pd->buffers[i];
    if (bf->node < 0 || bf->node >= g->nnodes) return fail(ck, "%s buffer %d: node %d does not exist", dn, i, (int)bf->node);
    char *t = ntext(ck, bf->node);
    if (inner_of(ck, bf->node))
      ok = fail(ck, "%s: %s has a buffer, but chain %d fuses it: it has no value", dn, t, ck->ch_of[bf->node]);
    else if (tfg_plan_removed(p, bf->node))
      ok = fail(ck, "%s: %s has a buffer, but constant folding removed it", dn, t);
    else if (!bf->copy && p->view_of && p->view_of[bf->node] >= 0)
      ok = fail(ck, "%s: %s has a buffer, but it is a view: its value is its base's buffer", dn, t);
    else if (bf->bytes <= 0 || bf->offset < 0 || bf->offset % TFG_PLAN_ALIGN)
      ok = fail(ck, "%s: the buffer of %s has offset %" PRId64 " and %" PRId64 " bytes (offsets are multiples of %d)", dn,
                t, bf->offset, bf->bytes, TFG_PLAN_ALIGN);
    else if (bf->bytes != tfg_plan_bytes_of(&g->nodes[bf->node]))
      ok = fail(ck, "%s: the buffer of %s has %" PRId64 " bytes; the tensor has %" PRId64, dn, t, bf->bytes,
                tfg_plan_bytes_of(&g->nodes[bf->node]));
    else if (bf->persistent &&
             (bf->copy || !tfg_plan_persistent(&g->nodes[bf->node]) || bf->offset + bf->bytes > pd->persistent_bytes))
      ok = fail(ck, "%s: the persistent buffer of %s is not a param, state or constant in [0, %" PRId64 ")", dn, t,
                pd->persistent_bytes);
    else if (!bf->persistent && bf->offset < pd->persistent_bytes)
      ok = fail(ck, "%s: the buffer of %s is at %" PRId64 ", inside the persistent region [0, %" PRId64 ")", dn, t,
                bf->offset, pd->persistent_bytes);
    else if (!bf->persistent && (bf->first < 0 || bf->first > bf->last || bf->last >= pd->nsteps))
      ok = fail(ck, "%s: the buffer of %s lives at steps %d-%d, outside the %d steps", dn, t, bf->first, bf->last,
                pd->nsteps);
    else if (bf->offset + bf->bytes > capacity) {
      tfg_strbuf c = {0};
      tfg_size_format(&c, capacity);
      ok = fail(ck, "%s: the buffer of %s ends at %" PRId64 ", past the device's %s", dn, t, bf->offset + bf->bytes,
                c.data);
      tfg_strbuf_free(&c);
    } else if (!bf->persistent) {
      /* its first step writes it; a tensor has one buffer per device */
      const tfg_plan_step *w = &pd->steps[bf->first];
      bool reduced = !bf->copy && ck->b_of[bf->node] >= 0;
      bool writes = bf->copy  ? w->kind == TFG_PLAN_COPY && w->node == bf->node
                    : reduced ? w->kind == TFG_PLAN_ALLREDUCE && ck->l_dev[bf->node] == d && ck->l_step[bf->node] == bf->first
                              : w->kind == TFG_PLAN_LAUNCH && w->node == bf->node;
      if (!writes) {
        ok = fail(ck, "%s: the buffer of %s starts at step %d, which does not %s it", dn, t, bf->first,
                  bf->copy ? "copy" : reduced ? "all-reduce" : "compute");
      } else {
        /* the step exists, so check_steps listed it */
        int *slot = bf->copy ? &vfind(ck, bf->node, d)->buf : &ck->own_buf[bf->node];
        if (*slot >= 0) ok = fail(ck, "%s: %s has two buffers on %s (%d and %d)", dn, t, dn, *slot, i);
        else *slot = i;
      }
    }
    free(t);
  }
  return ok;
}

/* The buffer index of x's value on device d (own, copy, or -1 for a
 * persistent or empty one). */
static int vbuf(const checker *ck, tfg_node_id x, int d) {
  x = vbase(ck, x, d);
  if (ck->p_dev[x] == d) return -1;
  if (ck->l_dev[x] == d) return ck->own_buf[x];
  const struct vcopy *c = vfind(ck, x, d);
  return c ? c->buf : -1;
}

/* Checks that buffer bi of device d, read at step s by `reader`, is live
 * there. */
static bool check_live(checker *ck, int d, int s, int bi, const char *reader, tfg_node_id x) {
  const tfg_plan_buffer *bf = &ck->p->dev[d].buffers[bi];
  if (s >= bf->first && s <= bf->last) return true;
  char *t = ntext(ck, x);
  fail(ck, "%s step %d: %s reads %s%s, whose buffer lives only at steps %d-%d", tfg_plan_dev_name(ck->p, d), s, reader,
       bf->copy ? "the copy of " : "", t, bf->first, bf->last);
  free(t);
  return false;
}

/* The rule for concurrent streams (docs/plan.md), on device d: a sweep over
 * the buffers in write order keeps, per byte, the latest buffer placed
 * there (disjoint intervals in a treap keyed by start); each buffer's
 * predecessors are the buffers its bytes held last. Every access to a
 * predecessor (its last on each of the device's streams) must happen
 * before the step that writes the new buffer. Latest holders suffice:
 * an older holder's accesses happen before the next holder's write,
 * which happens before that holder's last access. The persistent
 * buffers never move and are not in the sweep. */
static bool check_reuse(checker *ck, int d, const int *by_first, int np, int nt) {
  const tfg_plan *p = ck->p;
  const tfg_plan_device *pd = &p->dev[d];
  int nb = pd->nbuffers;
  int *acc = malloc(sizeof *acc * (TFG_PLAN_STREAMS * (size_t)nb + 1)); /* per buffer and stream: the last step accessing it */
  TFG_ASSERT(acc != NULL);
  for (int i = 0; i < TFG_PLAN_STREAMS * nb; i++) acc[i] = -1;
#define TOUCH(bi, s)                                                   \
  do {                                                                 \
    int b_ = (bi);                                                     \
    if (b_ >= 0) acc[TFG_PLAN_STREAMS * b_ + pd->steps[s].stream] = (s);              \
  } while (0)
  for (int s = 0; s < pd->nsteps; s++) {
    const tfg_plan_step *st = &pd->steps[s];
    if (st->kind == TFG_PLAN_LAUNCH) {
      TOUCH(ck->own_buf[st->node], s);
      int nin;
      const tfg_node_id *ins = tfg_plan_step_inputs(p, st, &nin);
      for (int j = 0; j < nin; j++) TOUCH(vbuf(ck, ins[j], d), s);
    } else if (st->kind == TFG_PLAN_COPY) {
      TOUCH(vfind(ck, st->node, d)->buf, s);
    } else if (st->kind == TFG_PLAN_ALLREDUCE) {
      const tfg_plan_bucket *pb = &p->buckets[st->bucket];
      int r = rank_in(pb, d);
      for (int j = 0; j < pb->nnodes; j++) {
        TOUCH(ck->own_buf[bnode(pb, r, j)], s);
        TOUCH(vbuf(ck, ck->g->nodes[bnode(pb, r, j)].inputs[0], d), s);
      }
    }
  }
#undef TOUCH
  /* A buffer's last step holds it too, read or not: a tensor sent to
   * another device is held until a step ordered after the remote copy,
   * and memory reused after it must be ordered after that step. */
  for (int b = 0; b < nb; b++) {
    const tfg_plan_buffer *bf = &pd->buffers[b];
    if (bf->persistent || bf->last < 0 || bf->last >= pd->nsteps) continue;
    int *a = &acc[TFG_PLAN_STREAMS * b + pd->steps[bf->last].stream];
    if (bf->last > *a) *a = bf->last;
  }
  /* intervals [ka, hi) held by owner; at most two new per buffer */
  tfg_plan_treap held;
  tfg_plan_treap_init(&held, 2 * nb + 2);
  int64_t *hi = malloc(sizeof *hi * (2 * (size_t)nb + 2));
  int *owner = malloc(sizeof *owner * (2 * (size_t)nb + 2));
  int *pred = malloc(sizeof *pred * (2 * (size_t)nb + 2));
  TFG_ASSERT(hi && owner && pred);
  int nodes = 0;
  bool ok = true;
  for (int k = np; k < np + nt && ok; k++) {
    int bi = by_first[k];
    const tfg_plan_buffer *bf = &pd->buffers[bi];
    int64_t lo = bf->offset, end = bf->offset + bf->bytes;
    int npred = 0;
    int x = tfg_plan_treap_floor_below(&held, lo, INT64_MAX); /* the interval starting at or below lo */
    if (x >= 0 && hi[x] > lo) {
      pred[npred++] = owner[x];
      if (hi[x] > end) { /* it covers the new one: keep its tail */
        hi[nodes] = hi[x];
        owner[nodes] = owner[x];
        tfg_plan_treap_insert(&held, nodes, end, nodes);
        nodes++;
      }
      if (held.ka[x] < lo) hi[x] = lo;
      else tfg_plan_treap_erase(&held, x);
    }
    for (int y; (y = tfg_plan_treap_ceil(&held, lo, INT64_MIN)) >= 0 && held.ka[y] < end;) {
      pred[npred++] = owner[y];
      tfg_plan_treap_erase(&held, y);
      if (hi[y] > end) {
        hi[nodes] = hi[y];
        owner[nodes] = owner[y];
        tfg_plan_treap_insert(&held, nodes, end, nodes);
        nodes++;
      }
    }
    hi[nodes] = end;
    owner[nodes] = bi;
    tfg_plan_treap_insert(&held, nodes, lo, nodes);
    nodes++;
    TFG_ASSERT(nodes <= 2 * nb + 2 && npred <= 2 * nb + 2);
    int w = bf->first;
    for (int q = 0; q < npred && ok; q++) {
      const tfg_plan_buffer *o = &pd->buffers[pred[q]];
      if (o->last >= w) continue; /* live at once: check_memory's overlap */
      for (int j = 0; j < TFG_PLAN_STREAMS && ok; j++) {
        int a = acc[TFG_PLAN_STREAMS * pred[q] + j];
        if (a < 0) continue;
        int32_t ta = step_time(ck, d, a), seen = seen_by(ck, d, w, d, j);
        if (ta > 0 && seen >= ta) continue;
        char *t = ntext(ck, bf->node), *u = ntext(ck, o->node);
        ok = fail(ck,
                  "%s step %d (%s stream) writes %s%s into [%" PRId64 ", %" PRId64 "), memory that step %d (%s stream) "
                  "uses for %s%s, and nothing orders that step before the write (the streams run concurrently)",
                  tfg_plan_dev_name(p, d), w, tfg_plan_stream_name(pd->steps[w].stream), bf->copy ? "the copy of " : "",
                  t, lo, end, a, tfg_plan_stream_name(j), o->copy ? "the copy of " : "", u);
        free(t);
        free(u);
      }
    }
  }
  tfg_plan_treap_free(&held);
  free(hi);
  free(owner);
  free(pred);
  free(acc);
  return ok;
}

/* Memory of device d: every value has its buffer, live at every step
 * that reads it; a bucket's gradients live until the compute stream is
 * ordered after its ALLREDUCE; no two buffers live at once overlap,
 * found by a sweep over the steps with the live buffers kept in offset
 * order (while the set has no overlap, a new buffer overlapping any
 * overlaps one of its two neighbours in that order); memory reused
 * across streams is ordered (check_reuse); the peak is the highest
 * end. */
static bool check_memory(checker *ck, int d) {
  const tfg_plan *p = ck->p;
  const tfg_graph *g = ck->g;
  const tfg_plan_device *pd = &p->dev[d];
  int nb = pd->nbuffers;
  const char *dn = tfg_plan_dev_name(p, d);
  int64_t capacity = tfg_devices_at(p->ds, d)->memory;
  int64_t end = 0;
  bool ok = true;
  for (int i = 0; i < nb; i++)
    if (pd->buffers[i].offset + pd->buffers[i].bytes > end) end = pd->buffers[i].offset + pd->buffers[i].bytes;

  /* Every step's value has its buffer, live at the step; a tensor sent
   * elsewhere lives until a compute step of its device that happens
   * after the copy, or to the end of the list (see tfg_plan_build). */
  for (int s = 0; s < pd->nsteps; s++) {
    const tfg_plan_step *st = &pd->steps[s];
    if (st->kind == TFG_PLAN_LAUNCH || st->kind == TFG_PLAN_COPY) {
      int bi = st->kind == TFG_PLAN_LAUNCH ? ck->own_buf[st->node] : vfind(ck, st->node, d)->buf;
      if (bi < 0 && tfg_plan_bytes_of(&g->nodes[st->node]) > 0) {
        char *t = ntext(ck, st->node);
        fail(ck, "%s step %d: %s has no buffer", dn, s, t);
        free(t);
        return false;
      }
    }
    if (st->kind == TFG_PLAN_COPY && ck->p_dev[vbase(ck, st->node, st->src)] != st->src &&
        tfg_plan_bytes_of(&g->nodes[st->node]) > 0) {
      int src = st->src;
      int bi = ck->own_buf[vbase(ck, st->node, src)];
      const tfg_plan_device *ps = &p->dev[src];
      int L = bi >= 0 ? ps->buffers[bi].last : -1;
      if (bi >= 0 && L != ps->nsteps - 1 &&
          (L < 0 || ps->steps[L].stream != TFG_PLAN_STREAM_COMPUTE ||
           !before_seen(seen_by(ck, src, L, d, TFG_PLAN_STREAM_COPY), vfind(ck, st->node, d)->time))) {
        char *t = ntext(ck, st->node);
        fail(ck, "%s: the buffer of %s is freed after step %d, but %s copies it (its step %d) and that step is not a "
                 "compute step ordered after the copy: a tensor sent elsewhere lives until one, or to the end",
             tfg_plan_dev_name(p, src), t, L, dn, s);
        free(t);
        return false;
      }
    }
    if (st->kind == TFG_PLAN_ALLREDUCE) {
      const tfg_plan_bucket *pb = &p->buckets[st->bucket];
      int r = rank_in(pb, d), rel = ck->release[ck->step_base[d] + s];
      char reader[64];
      snprintf(reader, sizeof reader, "bucket %d's all-reduce", st->bucket);
      for (int j = 0; j < pb->nnodes; j++) {
        tfg_node_id x = bnode(pb, r, j), y = g->nodes[x].inputs[0];
        if (ck->own_buf[x] < 0 && tfg_plan_bytes_of(&g->nodes[x]) > 0) {
          char *t = ntext(ck, x);
          fail(ck, "%s step %d: %s has no buffer", dn, s, t);
          free(t);
          return false;
        }
        int bi = vbuf(ck, y, d);
        if (bi < 0 || tfg_plan_bytes_of(&g->nodes[y]) == 0) continue;
        if (!check_live(ck, d, s, bi, reader, y)) return false;
        const tfg_plan_buffer *bf = &pd->buffers[bi];
        if (bf->last == pd->nsteps - 1 || (rel >= 0 && bf->last >= rel)) continue;
        char *t = ntext(ck, y);
        if (rel >= 0)
          fail(ck,
               "%s: the buffer of %s%s is freed after step %d, but %s (step %d, collective stream) reads it and the "
               "compute stream is ordered after that only at step %d",
               dn, bf->copy ? "the copy of " : "", t, bf->last, reader, s, rel);
        else
          fail(ck,
               "%s: the buffer of %s%s is freed after step %d, but %s (step %d, collective stream) reads it and no "
               "compute step is ordered after that: it lives to the end",
               dn, bf->copy ? "the copy of " : "", t, bf->last, reader, s);
        free(t);
        return false;
      }
    }
    if (st->kind != TFG_PLAN_LAUNCH) continue;
    int nin;
    const tfg_node_id *ins = tfg_plan_step_inputs(p, st, &nin);
    char *a = NULL;
    for (int j = 0; j < nin && ok; j++) {
      tfg_node_id x = ins[j];
      if (ck->p_dev[x] == d || tfg_plan_bytes_of(&g->nodes[x]) == 0) continue;
      int bi = vbuf(ck, x, d);
      if (bi < 0) continue; /* reported as that value's step */
      if (!a) a = ntext(ck, st->node);
      ok = check_live(ck, d, s, bi, a, x);
    }
    free(a);
    if (!ok) return false;
  }

  /* Overlaps: persistent buffers live throughout; the others enter at
   * their first step and leave after their last. */
  int *by_first = malloc(sizeof *by_first * ((size_t)nb + 1));
  int *by_last = malloc(sizeof *by_last * ((size_t)nb + 1));
  int *cnt = calloc((size_t)pd->nsteps + 1, sizeof *cnt);
  int *cnt2 = calloc((size_t)pd->nsteps + 1, sizeof *cnt2);
  TFG_ASSERT(by_first && by_last && cnt && cnt2);
  int np = 0, nt = 0;
  for (int i = 0; i < nb; i++)
    if (pd->buffers[i].persistent) by_first[np++] = i; /* persistent ones lead, in order */
  /* counting sort of the others by first step and by last step */
  for (int i = 0; i < nb; i++)
    if (!pd->buffers[i].persistent) {
      cnt[pd->buffers[i].first + 1]++;
      cnt2[pd->buffers[i].last + 1]++;
      nt++;
    }
  for (int s = 0; s < pd->nsteps; s++) {
    cnt[s + 1] += cnt[s];
    cnt2[s + 1] += cnt2[s];
  }
  for (int i = 0; i < nb; i++)
    if (!pd->buffers[i].persistent) {
      by_first[np + cnt[pd->buffers[i].first]++] = i;
      by_last[cnt2[pd->buffers[i].last]++] = i;
    }
  tfg_plan_treap live; /* keyed by (offset, buffer): a buffer's neighbours in offset order */
  tfg_plan_treap_init(&live, nb);
  int out_i = 0;
  for (int k = 0; k < np + nt && ok; k++) {
    int bi = by_first[k];
    const tfg_plan_buffer *bf = &pd->buffers[bi];
    if (!bf->persistent)
      for (; out_i < nt && pd->buffers[by_last[out_i]].last < bf->first; out_i++)
        tfg_plan_treap_erase(&live, by_last[out_i]);
    int other = tfg_plan_treap_floor_below(&live, bf->offset, INT64_MIN);
    if (other < 0 || pd->buffers[other].offset + pd->buffers[other].bytes <= bf->offset) {
      other = tfg_plan_treap_ceil(&live, bf->offset, INT64_MIN);
      if (other >= 0 && pd->buffers[other].offset >= bf->offset + bf->bytes) other = -1;
    }
    if (other >= 0) {
      const tfg_plan_buffer *o = &pd->buffers[other];
      char *a = ntext(ck, o->node), *t = ntext(ck, bf->node);
      ok = fail(ck,
                "%s: the buffers of %s [%" PRId64 ", %" PRId64 ") and %s [%" PRId64 ", %" PRId64
                ") overlap while both are live (from step %d)",
                dn, a, o->offset, o->offset + o->bytes, t, bf->offset, bf->offset + bf->bytes, bf->persistent ? 0 : bf->first);
      free(a);
      free(t);
      break;
    }
    tfg_plan_treap_insert(&live, bi, bf->offset, bi);
  }
  tfg_plan_treap_free(&live);
  ok = ok && check_reuse(ck, d, by_first, np, nt);
  free(by_first);
  free(by_last);
  free(cnt);
  free(cnt2);
  if (!ok) return false;

  if (pd->peak != end)
    return fail(ck, "%s: the peak is %" PRId64 " bytes but the highest buffer end is %" PRId64, dn, pd->peak, end);
  if (pd->peak > capacity) {
    tfg_strbuf c = {0};
    tfg_size_format(&c, capacity);
    fail(ck, "%s: the peak of %" PRId64 " bytes exceeds the device's %s", dn, pd->peak, c.data);
    tfg_strbuf_free(&c);
    return false;
  }
  return true;
}

bool tfg_plan_validate(const tfg_plan *p, tfg_strbuf *why) {
  const tfg_graph *g = p->g;
  int32_t n = g->nnodes;
  checker ck = {.p = p, .g = g, .why = why, .nstreams = TFG_PLAN_STREAMS * p->ndev};
  int ncopy = 0, nsteps = 0, nslots = 0;
  for (int d = 0; d < p->ndev; d++) {
    nsteps += p->dev[d].nsteps;
    for (int s = 0; s < p->dev[d].nsteps; s++) ncopy += p->dev[d].steps[s].kind == TFG_PLAN_COPY;
  }
  for (int b = 0; b < p->nbuckets; b++) nslots += p->buckets[b].nranks > 0 ? p->buckets[b].nranks : 0;
  ck.l_dev = malloc(sizeof *ck.l_dev * ((size_t)n + 1));
  ck.l_step = malloc(sizeof *ck.l_step * ((size_t)n + 1));
  ck.l_stream = calloc((size_t)n + 1, sizeof *ck.l_stream);
  ck.l_time = calloc((size_t)n + 1, sizeof *ck.l_time);
  ck.p_dev = malloc(sizeof *ck.p_dev * ((size_t)n + 1));
  ck.c_head = malloc(sizeof *ck.c_head * ((size_t)n + 1));
  ck.own_buf = malloc(sizeof *ck.own_buf * ((size_t)n + 1));
  ck.c = calloc((size_t)ncopy + 1, sizeof *ck.c);
  ck.b_of = malloc(sizeof *ck.b_of * ((size_t)n + 1));
  ck.r_of = malloc(sizeof *ck.r_of * ((size_t)n + 1));
  ck.br_base = calloc((size_t)(p->nbuckets > 0 ? p->nbuckets : 0) + 1, sizeof *ck.br_base);
  ck.ar_step = malloc(sizeof *ck.ar_step * ((size_t)nslots + 1));
  ck.ar_seq = calloc((size_t)nslots + 1, sizeof *ck.ar_seq);
  ck.step_base = malloc(sizeof *ck.step_base * ((size_t)p->ndev + 1));
  ck.clock = calloc((size_t)ck.nstreams * (size_t)nsteps + 1, sizeof *ck.clock);
  ck.release = malloc(sizeof *ck.release * ((size_t)nsteps + 1));
  ck.ch_of = malloc(sizeof *ck.ch_of * ((size_t)n + 1));
  int *rec_dev = malloc(sizeof *rec_dev * ((size_t)p->nevents + 1));
  int *rec_step = malloc(sizeof *rec_step * ((size_t)p->nevents + 1));
  int *nwaits = calloc((size_t)p->nevents + 1, sizeof *nwaits);
  TFG_ASSERT(ck.l_dev && ck.l_step && ck.l_stream && ck.l_time && ck.p_dev && ck.c_head && ck.own_buf && ck.c &&
             ck.b_of && ck.r_of && ck.br_base && ck.ar_step && ck.ar_seq && ck.step_base && ck.clock && ck.release &&
             ck.ch_of && rec_dev && rec_step && nwaits);
  for (int32_t i = 0; i < n; i++)
    ck.l_dev[i] = ck.l_step[i] = ck.p_dev[i] = ck.c_head[i] = ck.own_buf[i] = ck.b_of[i] = ck.r_of[i] = ck.ch_of[i] = -1;
  for (int e = 0; e < p->nevents; e++) rec_dev[e] = rec_step[e] = -1;
  for (int i = 0; i < nslots; i++) ck.ar_step[i] = -1;
  for (int i = 0; i < nsteps; i++) ck.release[i] = -1;
  for (int d = 0, at = 0; d < p->ndev; at += p->dev[d++].nsteps) ck.step_base[d] = at;
  /* Persistent buffers say where params and state live. */
  bool ok = true;
  for (int d = 0; d < p->ndev && ok; d++)
    for (int i = 0; i < p->dev[d].nbuffers && ok; i++) {
      const tfg_plan_buffer *bf = &p->dev[d].buffers[i];
      if (!bf->persistent || bf->node < 0 || bf->node >= n) continue;
      if (ck.p_dev[bf->node] >= 0) {
        char *t = ntext(&ck, bf->node);
        ok = fail(&ck, "%s: %s already has a persistent buffer on %s", tfg_plan_dev_name(p, d), t,
                  tfg_plan_dev_name(p, ck.p_dev[bf->node]));
        free(t);
      }
      ck.p_dev[bf->node] = d;
    }
  ok = ok && check_buckets(&ck);
  ok = ok && check_chains(&ck);
  tfg_node_id *last_launch = malloc(sizeof *last_launch * ((size_t)p->ndev + 1));
  TFG_ASSERT(last_launch);
  ok = ok && check_steps(&ck, rec_dev, rec_step, nwaits, last_launch);
  free(last_launch);
  ok = ok && replay(&ck, nwaits);
  /* Every event is one RECORD and at least one WAIT: a RECORD nobody
   * waits on is a dependency the builder lost. */
  for (int e = 0; e < p->nevents && ok; e++) {
    if (rec_dev[e] < 0) ok = fail(&ck, "event %d is never recorded", e);
    else if (nwaits[e] == 0)
      ok = fail(&ck, "event %d (recorded on %s step %d) is never waited on", e, tfg_plan_dev_name(p, rec_dev[e]),
                rec_step[e]);
  }
  for (int d = 0; d < p->ndev && ok; d++) ok = check_buffers(&ck, d);
  for (int d = 0; d < p->ndev && ok; d++) ok = check_memory(&ck, d);
  free(ck.l_dev);
  free(ck.l_step);
  free(ck.l_stream);
  free(ck.l_time);
  free(ck.p_dev);
  free(ck.c_head);
  free(ck.own_buf);
  free(ck.c);
  free(ck.b_of);
  free(ck.r_of);
  free(ck.br_base);
  free(ck.ar_step);
  free(ck.ar_seq);
  free(ck.step_base);
  free(ck.clock);
  free(ck.release);
  free(ck.ch_of);
  free(rec_dev);
  free(rec_step);
  free(nwaits);
  return ok;
}
