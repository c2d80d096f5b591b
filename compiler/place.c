/* compiler/place.c: the placer: which device runs each op, and why.
 *
 * The passes, in order, one function each. Every decision goes through
 * decide(), which records the device and the pass's cause on the op (as
 * ggml's backend scheduler records SET_CAUSE); explain, json and dot
 * render those records and never recompute them.
 *
 *   0. groups (pass0_groups): a param with its optimizer update and every
 *      state the update uses is one group, its persistent bytes (and its
 *      gradient's, which lives until the update) counted together. No
 *      decision: passes 1 to 3 carry a decision to the whole group.
 *      Gradients (pass0_grads): the ops that compute the gradient an
 *      update reads, which pass 2 puts beside the param.
 *   1. pins (pass1_pins): `@DEVICE`, `with DEVICE` and a strategy's pins,
 *      validated (the device exists), carried to the group; pinned params
 *      that do not fit their device are an error at the first one's pin.
 *   Then one sweep in graph order (sweep) offers each op, pinned or not, to
 *   passes 2 to 4 in turn. They cannot run one after the other over the
 *   whole graph: an op's cost depends on where its inputs went, and where
 *   a source goes depends on where its first reader went.
 *   2. colocation (pass2_colocate): an op whose group has a device goes
 *      there, and so does an op that computes a param's gradient (the
 *      group counts its bytes there); an op with no inputs (a constant, an
 *      input, a param) waits for the first op that reads it, and once that
 *      op is decided, goes beside it with its group (pass2_sources).
 *   3. memory (pass3_memory): an op whose undecided param groups would not
 *      fit the device the cost model prefers (less the bytes the caller
 *      reserves there for activations) goes to the best device with room;
 *      where none has room, the placement fails at the op. A param or
 *      state the op reads from another device counts there too: the plan
 *      copies it in when the step starts and keeps it to its last reader.
 *   4. cost (pass4_cost): every other op goes to the device where it would
 *      finish earliest (weigh: compute as FLOPs over the device's rate and
 *      bytes over its memory bandwidth, after its inputs arrive, a
 *      transfer from another device costing bytes over the link
 *      bandwidth): a chain stays together, parallel work spreads. Only
 *      the GPUs are weighed, or the CPU when there is none.
 *   5. fallback (pass5_fallback): what nothing decided (a source nobody
 *      reads) goes to the first device the program could use.
 *   Then the totals explain's last table shows (count_totals): per device
 *   its ops, FLOPs, persistent bytes, a liveness peak and the bytes that
 *   cross devices.
 *
 * Fitting activations (placing again with bytes reserved where the plan's
 * peak passed a device's memory) needs a plan, so it is the compile
 * driver's loop (compiler/compile.c), not the placer's: this file never
 * calls the planner. */
#include "base/file.h"
#include "compiler/place.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/utf8.h"
#include "base/json.h"
#include "compiler/fold.h"
#include "ir/ops.h"

struct tfg_placement {
  const tfg_graph *g;
  const tfg_devices *ds;
  int32_t n;
  int ndev;
  tfg_place_record *rec;
  int32_t *parent;   /* union-find over nodes: groups */
  tfg_place_totals *totals;
};

static int32_t find(int32_t *parent, int32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]]; /* path halving */
    x = parent[x];
  }
  return x;
}

static void unite(int32_t *parent, int32_t a, int32_t b) {
  a = find(parent, a);
  b = find(parent, b);
  if (a != b) parent[a < b ? b : a] = a < b ? a : b; /* the smallest id leads: the param */
}


static bool persistent(const tfg_node *n) { return n->op == TFG_OP_PARAM || n->op == TFG_OP_STATE; }

int tfg_placement_device(const tfg_placement *pl, tfg_node_id id) { return pl->rec[id].device; }
const tfg_place_record *tfg_placement_record(const tfg_placement *pl, tfg_node_id id) { return &pl->rec[id]; }

tfg_place_totals tfg_placement_totals(const tfg_placement *pl, int device) { return pl->totals[device]; }

void tfg_placement_free(tfg_placement *pl) {
  if (!pl) return;
  void *arrays[] = {pl->rec, pl->parent, pl->totals};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
  free(pl);
}

/* An empty placement of g on ds: every node its own group, undecided. */
static tfg_placement *placement_new(const tfg_graph *g, const tfg_devices *ds) {
  tfg_placement *pl = calloc(1, sizeof *pl);
  TFG_ASSERT(pl != NULL);
  pl->g = g;
  pl->ds = ds;
  pl->n = g->nnodes;
  pl->ndev = tfg_devices_count(ds);
  pl->rec = calloc((size_t)pl->n + 1, sizeof *pl->rec);
  pl->parent = malloc(sizeof *pl->parent * ((size_t)pl->n + 1));
  pl->totals = calloc((size_t)pl->ndev, sizeof *pl->totals);
  TFG_ASSERT(pl->rec && pl->parent && pl->totals);
  for (int32_t i = 0; i < pl->n; i++) {
    pl->parent[i] = i;
    pl->rec[i] = (tfg_place_record){.device = -1, .with = -1, .runner_up = -1, .full = -1, .refused = -1};
  }
  return pl;
}

/* Every decision of every pass: op id goes to dev because of cause. The
 * pass fills in the record's other fields for its cause. */
static tfg_place_record *decide(tfg_placement *pl, tfg_node_id id, int dev, tfg_place_cause cause) {
  tfg_place_record *r = &pl->rec[id];
  r->device = dev;
  r->cause = cause;
  return r;
}

tfg_placement *tfg_place_on(const tfg_graph *g, const tfg_devices *ds, int device) {
  TFG_ASSERT(device >= 0 && device < tfg_devices_count(ds));
  tfg_placement *pl = placement_new(g, ds);
  for (int32_t i = 0; i < pl->n; i++) decide(pl, i, device, TFG_CAUSE_FALLBACK);
  return pl;
}

/* What the passes share while placing one graph. */
typedef struct placer {
  tfg_placement *pl;
  const tfg_graph *g;
  const tfg_devices *ds;
  const int64_t *reserve; /* per device: bytes kept free of params, or NULL */
  tfg_diag *d;
  int32_t n;
  int ndev;
  int gpus;
  /* pass 0 */
  int64_t *group_bytes; /* per group leader: its persistent bytes with its gradients */
  int *group_dev;       /* per group leader: its device once a member is decided, else -1 */
  int32_t *grad_of;     /* per node: the group leader whose gradient it computes, GRAD_NONE, GRAD_SHARED */
  /* the sweep */
  int64_t *used;        /* per device: the bytes of the groups decided there, and of the params copied in */
  uint8_t *copied;      /* per persistent node x and device dv ([x * ndev + dv]): its copy there is in used */
  double *finish;       /* per node: its estimated finish time */
  double *ready;        /* per device: when it is free */
  double link;          /* the slowest link: a transfer's cost */
} placer;

/* Gives the group of node id (once) the device dev: its params and state
 * count against that device's memory from then on. */
static void claim(placer *P, tfg_node_id id, int dev) {
  int32_t r = find(P->pl->parent, id);
  if (P->group_dev[r] >= 0) return;
  P->group_dev[r] = dev;
  P->used[dev] += P->group_bytes[r];
}

/* ---- pass 0: groups -------------------------------------------------------------- */

/* A param with its update, every state the update uses and its gradient
 * accumulator; a grad scaler's state with its update; the bytes of each
 * group. */
static void pass0_groups(placer *P, const tfg_train_step *steps, int nsteps) {
  const tfg_graph *g = P->g;
  int32_t *parent = P->pl->parent;
  for (int k = 0; k < nsteps; k++)
    for (int i = 0; i < steps[k].nupdates; i++) {
      const tfg_node *u = &g->nodes[steps[k].updates[i]];
      unite(parent, steps[k].updates[i], u->inputs[0]);
      for (int j = 2; j < u->ninputs; j++)
        if (g->nodes[u->inputs[j]].op == TFG_OP_STATE) unite(parent, u->inputs[0], u->inputs[j]);
      if (steps[k].accs) { /* accumulate: the accumulator and what writes it */
        unite(parent, u->inputs[0], steps[k].accs[i]);
        unite(parent, steps[k].accs[i], steps[k].acc_first[i]);
        unite(parent, steps[k].accs[i], steps[k].acc_add[i]);
      }
    }
  for (int k = 0; k < nsteps; k++) /* precision = f16: a grad scaler's update with the state it writes */
    for (int i = 0; i < steps[k].nscalers; i++) {
      const tfg_node *u = &g->nodes[steps[k].scalers[i]];
      unite(parent, steps[k].scalers[i], u->inputs[0]);
      unite(parent, u->inputs[0], u->inputs[2]);
      unite(parent, u->inputs[0], u->inputs[3]);
    }
  for (int32_t i = 0; i < P->n; i++)
    if (persistent(&g->nodes[i])) P->group_bytes[find(parent, i)] += tfg_node_bytes(&g->nodes[i]);
  /* A trained param's gradient lives until its update, at the end of the
   * step: count it with the group, as the memory it will certainly take. */
  for (int k = 0; k < nsteps; k++)
    for (int i = 0; i < steps[k].nparams; i++)
      P->group_bytes[find(parent, steps[k].params[i])] += tfg_node_bytes(&g->nodes[steps[k].params[i]]);
}

/* grad_of values that name no group. */
enum { GRAD_NONE = -1, GRAD_SHARED = -2 /* it computes the gradients of two groups */ };

/* Whether op passes a gradient through element by element (scaling it,
 * summing two parts of it, changing its dtype or shape): the op that
 * feeds it computes the gradient too. Any other op computes it from
 * activations, which is where the gradient begins. */
static bool grad_passes_through(tfg_op_id op) {
  switch (op) {
  case TFG_OP_NEG:
  case TFG_OP_ADD:
  case TFG_OP_SUB:
  case TFG_OP_MUL:
  case TFG_OP_DIV:
  case TFG_OP_MAXIMUM:
  case TFG_OP_MINIMUM:
  case TFG_OP_WHERE:
  case TFG_OP_CAST:
  case TFG_OP_RESHAPE:
  case TFG_OP_FLATTEN: return true;
  default: return false; /* a matmul, a reduction, a kernel's own gradient op: the gradient starts here */
  }
}

/* Marks grad_of[x] = leader when x may compute the gradient of the group
 * led by leader, whose param has numel elements: x runs (not removed, not
 * a source: sources follow their first reader), is in no group of its own
 * and has the gradient's element count (the dtype may differ: precision =
 * f16 casts). Collectives are left alone: a strategy pins them with their
 * replica. A node two groups mark is GRAD_SHARED: neither claims it. */
static void grad_mark(placer *P, tfg_node_id x, int32_t leader, int64_t numel) {
  const tfg_node *n = &P->g->nodes[x];
  if (P->pl->rec[x].cause == TFG_CAUSE_REMOVED || n->ninputs == 0 || persistent(n) || tfg_op_bucketed(n->op)) return;
  if (P->group_bytes[find(P->pl->parent, x)] > 0 || tfg_shape_numel(&n->shape) != numel) return;
  P->grad_of[x] = P->grad_of[x] == GRAD_NONE || P->grad_of[x] == leader ? leader : GRAD_SHARED;
}

/* The ops that compute each trained param's gradient, from the update
 * (or the accumulate ops, which read it too) back to where it begins:
 * the op that makes it from activations (the one-GEMM weight gradient, a
 * conv's weight gradient, a bias's sum), with the ops between that only
 * pass it through (clipping's scale, the unscale of precision = f16, the
 * sum of a param read twice, accumulate's mean). An op passes the mark on
 * to its inputs only when every op that reads it is marked so, so the
 * walk never enters the backward pass's activation gradients (which
 * other ops read) however the shapes match.
 *
 * Why: the group counts the gradient's bytes on the param's device (pass
 * 0); computed on another device it is a second copy there, sent to the
 * update (the plan keeps a sent tensor to the end of the step), which no
 * placement count sees: the cost pass spread the weight gradients of a
 * deep MLP over idle devices, and the fit loop, finding their bytes on
 * those devices as activations, reserved them away from params until no
 * device had room. One pass in descending order sees every reader of a
 * node before the node (readers come later in graph order). */
static void pass0_grads(placer *P, const tfg_train_step *steps, int nsteps) {
  const tfg_graph *g = P->g;
  int32_t *readers = calloc((size_t)P->n + 1, sizeof *readers); /* reads by ops that run */
  int32_t *marked = calloc((size_t)P->n + 1, sizeof *marked);   /* reads by ops that pass the mark on */
  int32_t *seed = malloc(sizeof *seed * ((size_t)P->n + 1));    /* per update or accumulate op: its group, else -1 */
  TFG_ASSERT(readers && marked && seed);
  for (int32_t i = 0; i < P->n; i++) {
    P->grad_of[i] = GRAD_NONE;
    seed[i] = -1;
    for (int k = 0; P->pl->rec[i].cause != TFG_CAUSE_REMOVED && k < g->nodes[i].ninputs; k++)
      readers[g->nodes[i].inputs[k]]++;
  }
  for (int k = 0; k < nsteps; k++)
    for (int i = 0; i < steps[k].nupdates; i++) {
      tfg_node_id u = steps[k].updates[i];
      seed[u] = find(P->pl->parent, g->nodes[u].inputs[0]);
      if (steps[k].accs) seed[steps[k].acc_first[i]] = seed[steps[k].acc_add[i]] = seed[u];
    }
  for (int32_t y = P->n - 1; y >= 0; y--) {
    const tfg_node *n = &g->nodes[y];
    int32_t leader = seed[y];
    if (leader < 0 && P->grad_of[y] >= 0 && grad_passes_through(n->op) && marked[y] == readers[y])
      leader = P->grad_of[y];
    if (leader < 0 || P->pl->rec[y].cause == TFG_CAUSE_REMOVED) continue;
    int64_t numel = tfg_shape_numel(&g->nodes[leader].shape); /* the param: its group's smallest id */
    for (int k = 0; k < n->ninputs; k++) {
      marked[n->inputs[k]]++;
      grad_mark(P, n->inputs[k], leader, numel);
    }
  }
  free(readers);
  free(marked);
  free(seed);
}

/* ---- pass 1: pins ---------------------------------------------------------- */

/* The device a pin names, or -1 after reporting (once per annotation). */
static int pin_device(const tfg_devices *ds, const tfg_node *n, tfg_diag *d, uint32_t *reported) {
  const tfg_devspec *p = &n->pin;
  int gpus = tfg_devices_gpus(ds);
  bool ok = true;
  int dev = -1;
  if (p->kind == TFG_DEV_CPU) {
    ok = p->index == 0;
    dev = 0;
  } else if (p->kind == TFG_DEV_GPU) {
    ok = p->index < gpus;
    dev = (int)p->index + 1;
  }
  if (ok) return dev;
  if (*reported != p->loc.off + 1) {
    *reported = p->loc.off + 1;
    if (p->kind == TFG_DEV_CPU)
      tfg_diag_error(d, &p->loc, "cpu:%" PRId64 " does not exist: the host CPU is cpu:0", p->index);
    else if (gpus == 0)
      tfg_diag_error(d, &p->loc, "gpu:%" PRId64 " does not exist: this run has no GPU", p->index);
    else if (gpus == 1)
      tfg_diag_error(d, &p->loc, "gpu:%" PRId64 " does not exist: this run has 1 GPU, gpu:0", p->index);
    else
      tfg_diag_error(d, &p->loc, "gpu:%" PRId64 " does not exist: this run has %d GPUs, gpu:0 to gpu:%d", p->index, gpus,
                     gpus - 1);
    tfg_strbuf spec = {0};
    tfg_devices_suggest(ds, p->index < INT64_MAX ? p->index + 1 : p->index, &spec);
    tfg_diag_help(d, "give more devices, for example %s", spec.data);
    tfg_strbuf_free(&spec);
  }
  return -1;
}

/* Decides every pinned op (cause PIN) and claims its group's device.
 * Returns TFG_ERR_PLACE after reporting each pin to a device that does
 * not exist, or else the first device whose pinned params do not fit. */
static tfg_status pass1_pins(placer *P) {
  const tfg_graph *g = P->g;
  tfg_placement *pl = P->pl;
  tfg_status st = TFG_OK;
  uint32_t reported = 0;
  int32_t *first_pinned = malloc(sizeof *first_pinned * (size_t)P->ndev); /* per device: its first pinned param, or -1 */
  TFG_ASSERT(first_pinned != NULL);
  for (int i = 0; i < P->ndev; i++) first_pinned[i] = -1;
  for (int32_t i = 0; i < P->n; i++) {
    const tfg_node *nd = &g->nodes[i];
    if (nd->pin.kind != TFG_DEV_CPU && nd->pin.kind != TFG_DEV_GPU) continue;
    if (pl->rec[i].cause == TFG_CAUSE_REMOVED) continue;
    int dev = pin_device(P->ds, nd, P->d, &reported);
    if (dev < 0) {
      st = TFG_ERR_PLACE;
      continue;
    }
    decide(pl, i, dev, TFG_CAUSE_PIN)->pin = nd->pin.loc;
    int32_t root = find(pl->parent, i);
    if (P->group_bytes[root] > 0 && P->group_dev[root] < 0 && first_pinned[dev] < 0) first_pinned[dev] = i;
    claim(P, i, dev);
  }
  /* Pinned params that do not fit: reported at the first one's pin (the
   * `@`, the `with` or the strategy that put it there). */
  for (int i = 0; i < P->ndev && st == TFG_OK; i++) {
    const tfg_device *dv = tfg_devices_at(P->ds, i);
    if (P->used[i] > dv->memory) {
      tfg_strbuf need = {0}, have = {0};
      tfg_size_format(&need, P->used[i]);
      tfg_size_format(&have, dv->memory);
      const tfg_node *first = first_pinned[i] >= 0 ? &g->nodes[first_pinned[i]] : NULL;
      tfg_diag_error(P->d, first ? &first->pin.loc : NULL,
                     "the params pinned to %s need %s (with their state and gradients) but it has %s", dv->name,
                     need.data, have.data);
      if (first && first->name) tfg_diag_note(P->d, &first->loc, "the first of them, %s, is declared here", first->name);
      tfg_diag_help(P->d, "give %s more memory (--devices, --memory-limit) or pin fewer params to it", dv->name);
      tfg_strbuf_free(&need);
      tfg_strbuf_free(&have);
      st = TFG_ERR_PLACE;
    }
  }
  free(first_pinned);
  return st;
}

/* ---- pass 2: colocation ------------------------------------------------------ */

/* Decides op id (undecided) when its group already has a device, or it
 * computes the gradient of a group that has one (pass0_grads): there,
 * with its param (cause COLOCATE). Returns whether it did. */
static bool pass2_colocate(placer *P, tfg_node_id id) {
  int32_t root = find(P->pl->parent, id);
  bool grad = P->group_dev[root] < 0 && P->grad_of[id] >= 0;
  if (grad) root = P->grad_of[id];
  if (P->group_dev[root] < 0) return false;
  tfg_place_record *r = decide(P->pl, id, P->group_dev[root], TFG_CAUSE_COLOCATE);
  r->with = root;
  r->grad = grad;
  return true;
}

/* Once op id is decided: the undecided sources it reads (ops with no
 * inputs, which waited for their first reader) go beside it, with their
 * groups (cause COLOCATE). */
static void pass2_sources(placer *P, tfg_node_id id) {
  const tfg_node *n = &P->g->nodes[id];
  int dev = P->pl->rec[id].device;
  for (int k = 0; k < n->ninputs; k++) {
    tfg_node_id x = n->inputs[k];
    if (P->pl->rec[x].device >= 0) continue;
    decide(P->pl, x, dev, TFG_CAUSE_COLOCATE)->with = id;
    P->finish[x] = 0;
    claim(P, x, dev);
  }
}

/* ---- passes 3 and 4: weighing the devices ------------------------------------ */

/* Estimated finish time of node n on device dv given its inputs' places. */
static double finish_on(const placer *P, const tfg_node *n, int dv) {
  const tfg_device *dev = tfg_devices_at(P->ds, dv);
  double start = P->ready[dv];
  for (int k = 0; k < n->ninputs; k++) {
    tfg_node_id x = n->inputs[k];
    int xd = P->pl->rec[x].device;
    if (xd < 0) continue; /* an undecided source: it will follow this op */
    double arrive = P->finish[x];
    if (xd != dv) { /* over the link between them (the network between nodes), never faster than the slowest */
      double bw = tfg_devices_bw(P->ds, xd, dv);
      arrive += (double)tfg_node_bytes(&P->g->nodes[x]) / (bw < P->link ? bw : P->link);
    }
    if (arrive > start) start = arrive;
  }
  double flops = tfg_op_get(n->op)->flops(P->g, n);
  return start + flops / dev->flops + (double)tfg_node_bytes(n) / dev->mem_bw;
}

/* Whether input x, a param or state decided on another device than dv,
 * needs a copy there that used does not count yet. */
static bool copy_wanted(const placer *P, tfg_node_id x, int dv) {
  int xd = P->pl->rec[x].device;
  return xd >= 0 && xd != dv && persistent(&P->g->nodes[x]) && !P->copied[(size_t)x * (size_t)P->ndev + (size_t)dv];
}

/* Bytes of the params and state node n reads from other devices than dv,
 * not copied there yet: the copies dv must hold if n runs there. */
static int64_t copy_need(const placer *P, const tfg_node *n, int dv) {
  int64_t need = 0;
  for (int k = 0; k < n->ninputs; k++) {
    bool again = false; /* read twice: one copy */
    for (int j = 0; j < k; j++) again = again || n->inputs[j] == n->inputs[k];
    if (!again && copy_wanted(P, n->inputs[k], dv)) need += tfg_node_bytes(&P->g->nodes[n->inputs[k]]);
  }
  return need;
}

/* Once op id is decided: the params and state it reads from other devices
 * are copied to its device, and stay there for the step. */
static void claim_copies(placer *P, tfg_node_id id) {
  const tfg_node *n = &P->g->nodes[id];
  int dv = P->pl->rec[id].device;
  P->used[dv] += copy_need(P, n, dv);
  for (int k = 0; k < n->ninputs; k++)
    if (copy_wanted(P, n->inputs[k], dv)) P->copied[(size_t)n->inputs[k] * (size_t)P->ndev + (size_t)dv] = 1;
}

/* Persistent bytes of the undecided param groups node n reads: what its
 * device must have room for. */
static int64_t group_need(const placer *P, const tfg_node *n) {
  int64_t need = 0;
  for (int k = 0; k < n->ninputs; k++) {
    tfg_node_id x = n->inputs[k];
    int32_t r = find(P->pl->parent, x);
    if (P->pl->rec[x].device < 0 && P->group_dev[r] < 0) need += P->group_bytes[r];
  }
  return need;
}

/* The devices weighed for one op: the earliest finish of all (pref), and
 * among those with room for its groups (and, with copies, for the params
 * it would copy in) the best and the runner-up; the earliest finish among
 * those without (full). -1 where there is none. need: the bytes pref
 * needs room for. */
typedef struct weighing {
  int64_t need, copies; /* copies: of need, what pref would copy in */
  int best, second, pref, full;
  double best_t, second_t, pref_t, full_t;
} weighing;

static weighing weigh(const placer *P, const tfg_node *nd, bool copies) {
  int64_t groups = group_need(P, nd);
  weighing w = {.need = groups, .best = -1, .second = -1, .pref = -1, .full = -1,
                .best_t = INFINITY, .second_t = INFINITY, .pref_t = INFINITY, .full_t = INFINITY};
  int lo = 1, hi = P->gpus; /* the GPUs, or the CPU when there are none */
  if (P->gpus == 0) lo = hi = 0;
  for (int dv = lo; dv <= hi; dv++) {
    double t = finish_on(P, nd, dv);
    int64_t copy = copies ? copy_need(P, nd, dv) : 0, need = groups + copy;
    if (t < w.pref_t) {
      w.pref_t = t;
      w.pref = dv;
      w.need = need;
      w.copies = copy;
    }
    if (need > 0 && P->used[dv] + need > tfg_devices_at(P->ds, dv)->memory - (P->reserve ? P->reserve[dv] : 0)) {
      if (t < w.full_t) { w.full_t = t; w.full = dv; } /* explain says why it is not the runner-up */
      continue;
    }
    if (t < w.best_t) {
      w.second = w.best;
      w.second_t = w.best_t;
      w.best = dv;
      w.best_t = t;
    } else if (t < w.second_t) {
      w.second = dv;
      w.second_t = t;
    }
  }
  return w;
}

/* ---- pass 3: memory ------------------------------------------------------------ */

/* Decides op id when the device it would finish first on has no room for
 * its groups: the best device with room (cause MEMORY). Returns
 * TFG_ERR_PLACE after reporting when no device has room. */
static tfg_status pass3_memory(placer *P, tfg_node_id id, const weighing *w) {
  const tfg_node *nd = &P->g->nodes[id];
  if (w->best < 0) {
    tfg_strbuf need_s = {0};
    tfg_size_format(&need_s, w->need);
    tfg_diag_error(P->d, &nd->loc, "%s: no device has room for the %s of params, state and gradients this op uses",
                   tfg_op_get(nd->op)->name, need_s.data);
    tfg_strbuf_free(&need_s);
    tfg_diag_help(P->d, "give more devices or more memory (--devices, --memory-limit)");
    return TFG_ERR_PLACE;
  }
  if (w->pref == w->best) return TFG_OK;
  tfg_place_record *r = decide(P->pl, id, w->best, TFG_CAUSE_MEMORY);
  r->est = w->best_t;
  r->runner_up = w->second;
  r->runner_est = w->second_t;
  r->refused = w->pref;
  r->need = w->need;
  r->copies = w->copies;
  r->reserved = P->reserve ? P->reserve[w->pref] : 0;
  r->avail = tfg_devices_at(P->ds, w->pref)->memory - r->reserved - P->used[w->pref];
  return TFG_OK;
}

/* ---- pass 4: cost ------------------------------------------------------------------ */

/* Decides op id (which has room where it finishes first): there (cause
 * COST). */
static void pass4_cost(placer *P, tfg_node_id id, const weighing *w) {
  tfg_place_record *r = decide(P->pl, id, w->best, TFG_CAUSE_COST);
  r->est = w->best_t;
  r->runner_up = w->second;
  r->runner_est = w->second_t;
  r->full = w->full;
}

/* ---- the sweep: passes 2 to 4 in graph order ------------------------------------- */

/* Offers every op in graph order to passes 2, 3 and 4 (a pinned op is
 * decided already); once it is decided, its device is busy until its
 * estimated finish and its sources follow it. Returns TFG_OK or pass 3's
 * error. */
static tfg_status sweep(placer *P) {
  const tfg_graph *g = P->g;
  tfg_placement *pl = P->pl;
  for (int32_t i = 0; i < P->n; i++) {
    const tfg_node *nd = &g->nodes[i];
    tfg_place_record *r = &pl->rec[i];
    if (r->cause == TFG_CAUSE_REMOVED) continue; /* never runs: no time, no sources to follow it */
    if (r->device < 0 && !pass2_colocate(P, i)) {
      if (nd->ninputs == 0) continue; /* pass 2: waits for the op that reads it */
      weighing w = weigh(P, nd, true);
      /* Copies never fail a placement: where no device has room for
       * them, the op is weighed as if the copies took nothing. */
      if (w.best < 0) w = weigh(P, nd, false);
      tfg_status st = pass3_memory(P, i, &w);
      if (st != TFG_OK) return st;
      if (r->device < 0) pass4_cost(P, i, &w);
      claim(P, i, r->device);
    }
    /* Passes 3 and 4 estimated the finish already; a pinned or colocated
     * op is timed where it went. */
    P->finish[i] = r->cause == TFG_CAUSE_MEMORY || r->cause == TFG_CAUSE_COST ? r->est : finish_on(P, nd, r->device);
    P->ready[r->device] = P->finish[i];
    claim_copies(P, i);
    pass2_sources(P, i);
  }
  return TFG_OK;
}

/* ---- pass 5: fallback ---------------------------------------------------------- */

/* Decides what nothing did (a source nobody reads): the first device the
 * program could use, gpu:0 or else the CPU (cause FALLBACK). */
static void pass5_fallback(placer *P) {
  for (int32_t i = 0; i < P->n; i++)
    if (P->pl->rec[i].device < 0) decide(P->pl, i, P->gpus ? 1 : 0, TFG_CAUSE_FALLBACK);
}

/* ---- totals ------------------------------------------------------------------------- */

/* Per device: ops, FLOPs, persistent bytes, transfers (once per tensor
 * per destination) and a liveness peak (each value freed after its last
 * reader, in graph order). */
static void count_totals(tfg_placement *pl) {
  const tfg_graph *g = pl->g;
  int32_t n = pl->n;
  int32_t *last = malloc(sizeof *last * ((size_t)n + 1));
  uint8_t *sent = calloc((size_t)n * (size_t)pl->ndev + 1, 1);
  int64_t *live = calloc((size_t)pl->ndev, sizeof *live);
  TFG_ASSERT(last && sent && live);
  for (int32_t i = 0; i < n; i++) last[i] = i;
  for (int32_t i = 0; i < n; i++)
    for (int k = 0; pl->rec[i].cause != TFG_CAUSE_REMOVED && k < g->nodes[i].ninputs; k++)
      last[g->nodes[i].inputs[k]] = i;
  for (int32_t i = 0; i < n; i++) {
    const tfg_node *nd = &g->nodes[i];
    int dv = pl->rec[i].device;
    if (pl->rec[i].cause == TFG_CAUSE_REMOVED) continue; /* never runs, holds nothing */
    tfg_place_totals *t = &pl->totals[dv];
    t->ops++;
    t->flops += tfg_op_get(nd->op)->flops(g, nd);
    if (persistent(nd)) t->param_bytes += tfg_node_bytes(nd);
    else live[dv] += tfg_node_bytes(nd);
    if (t->param_bytes + live[dv] > t->peak_bytes) t->peak_bytes = t->param_bytes + live[dv];
    for (int k = 0; k < nd->ninputs; k++) {
      tfg_node_id x = nd->inputs[k];
      int xd = pl->rec[x].device;
      if (xd != dv && !sent[(size_t)x * (size_t)pl->ndev + (size_t)dv]) {
        sent[(size_t)x * (size_t)pl->ndev + (size_t)dv] = 1; /* one copy per tensor per destination */
        pl->totals[xd].bytes_out += tfg_node_bytes(&g->nodes[x]);
        t->bytes_in += tfg_node_bytes(&g->nodes[x]);
      }
      if (last[x] == i && !persistent(&g->nodes[x])) live[xd] -= tfg_node_bytes(&g->nodes[x]);
    }
    if (last[i] == i && !persistent(nd)) live[dv] -= tfg_node_bytes(nd); /* read by nothing: gone at once */
  }
  /* The persistent bytes are there from the start. */
  for (int i = 0; i < pl->ndev; i++)
    if (pl->totals[i].peak_bytes < pl->totals[i].param_bytes) pl->totals[i].peak_bytes = pl->totals[i].param_bytes;
  free(last);
  free(sent);
  free(live);
}

/* ---- the passes in order ------------------------------------------------------------ */

/* Records the nodes the graph passes removed (marks: compiler/fold.h)
 * before any pass runs, so that no pass weighs them and the sweep skips
 * them: on the CPU, where folding computed them. */
static void pass0_removed(placer *P, const uint8_t *marks) {
  for (int32_t i = 0; marks && i < P->n; i++)
    if (tfg_fold_removed(marks[i])) decide(P->pl, i, 0, TFG_CAUSE_REMOVED)->by = marks[i];
}

tfg_status tfg_place(const tfg_graph *g, const tfg_devices *ds, const tfg_train_step *steps, int nsteps,
                     const int64_t *reserve, const uint8_t *removed, tfg_diag *d, tfg_placement **out) {
  placer P = {.pl = placement_new(g, ds), .g = g, .ds = ds, .reserve = reserve, .d = d, .n = g->nnodes};
  P.ndev = P.pl->ndev;
  P.gpus = tfg_devices_gpus(ds);
  P.group_bytes = calloc((size_t)P.n + 1, sizeof *P.group_bytes);
  P.group_dev = malloc(sizeof *P.group_dev * ((size_t)P.n + 1));
  P.grad_of = malloc(sizeof *P.grad_of * ((size_t)P.n + 1));
  P.used = calloc((size_t)P.ndev, sizeof *P.used);
  P.copied = calloc((size_t)P.n * (size_t)P.ndev + 1, 1);
  P.finish = calloc((size_t)P.n + 1, sizeof *P.finish);
  P.ready = calloc((size_t)P.ndev, sizeof *P.ready);
  TFG_ASSERT(P.group_bytes && P.group_dev && P.grad_of && P.used && P.copied && P.finish && P.ready);
  for (int32_t i = 0; i < P.n; i++) P.group_dev[i] = -1;
  P.link = INFINITY;
  for (int i = 0; i < P.ndev; i++)
    if (tfg_devices_at(ds, i)->link_bw < P.link) P.link = tfg_devices_at(ds, i)->link_bw;

  pass0_removed(&P, removed);
  pass0_groups(&P, steps, nsteps);
  pass0_grads(&P, steps, nsteps);
  tfg_status st = pass1_pins(&P);
  if (st == TFG_OK) st = sweep(&P); /* passes 2 to 4 */
  if (st == TFG_OK) {
    pass5_fallback(&P);
    count_totals(P.pl);
  }

  free(P.group_bytes);
  free(P.group_dev);
  free(P.grad_of);
  free(P.used);
  free(P.copied);
  free(P.finish);
  free(P.ready);
  if (st != TFG_OK) {
    tfg_placement_free(P.pl);
    *out = NULL;
    return st;
  }
  *out = P.pl;
  return TFG_OK;
}

/* ---- explain ------------------------------------------------------------------------ */


/* "param h.w" for named nodes, the op's name otherwise. */
static void node_label(const tfg_graph *g, tfg_node_id id, tfg_strbuf *out) {
  const tfg_node *n = &g->nodes[id];
  const char *op = tfg_op_get(n->op)->name;
  if (n->name) tfg_strbuf_printf(out, "%s %s", op, n->name);
  else tfg_strbuf_puts(out, op);
}

static void format_time(tfg_strbuf *out, double s) {
  if (s < 1e-3) tfg_strbuf_printf(out, "%.1f us", s * 1e6);
  else if (s < 1) tfg_strbuf_printf(out, "%.2f ms", s * 1e3);
  else tfg_strbuf_printf(out, "%.2f s", s);
}

static void format_loc(tfg_strbuf *out, const tfg_loc *l) {
  if (l->src) tfg_strbuf_printf(out, "%s:%u:%u", tfg_path_base(l->src->name), l->line, tfg_loc_display_col(l));
  else tfg_strbuf_puts(out, "?");
}

/* What a node that runs nowhere here says of why (the compiler/fold.h
 * mark that removed it): place's reason, and --json's "by". */
typedef struct remover {
  uint8_t mark;
  const char *why, *by;
} remover;

static const remover removers[] = {
    {TFG_FOLD_REMOVED, "removed before placement: computed at compile time (constant folding); never runs", "fold"},
    {TFG_FOLD_SIMPLIFIED, "removed before placement: merged into an equal op (simplify); never runs", "simplify"},
    {TFG_FOLD_LAYOUT, "removed before placement: its readers read its input through strides (layout); never runs",
     "layout"},
    {TFG_FOLD_REMOTE, "runs on another rank of the job (its pipeline stage is there); not on this one", "rank"},
};

static const remover *remover_of(uint8_t mark) {
  for (size_t i = 0; i < sizeof removers / sizeof removers[0]; i++)
    if (removers[i].mark == mark) return &removers[i];
  TFG_ASSERT(!"a removed node's mark is a remover's");
  return &removers[0];
}

/* Appends a value, or "LO .. HI" when the records of a folded line
 * differ (fmt renders one value). */
static void range(tfg_strbuf *out, double lo, double hi, void (*fmt)(tfg_strbuf *, double)) {
  fmt(out, lo);
  if (hi != lo) {
    tfg_strbuf_puts(out, " .. ");
    fmt(out, hi);
  }
}

static void fmt_size(tfg_strbuf *out, double v) { tfg_size_format(out, (int64_t)v); }

/* The reason text of rs[0..n): the records a line stands for (one, or
 * one per repeat of a folded line: the same device, pass and cause, and
 * the numbers given as ranges). Every fact comes from the records. */
static void reason(const tfg_placement *pl, const tfg_place_record *const *rs, int n, tfg_strbuf *out) {
  const tfg_devices *ds = pl->ds;
  const tfg_place_record *r = rs[0];
  /* Each number's smallest and largest over the records. */
  double lo[5], hi[5];
  for (int k = 0; k < n; k++) {
    const double v[5] = {rs[k]->est, rs[k]->runner_est, (double)(rs[k]->avail > 0 ? rs[k]->avail : 0),
                         (double)rs[k]->reserved, (double)rs[k]->need};
    for (int j = 0; j < 5; j++) {
      if (k == 0 || v[j] < lo[j]) lo[j] = v[j];
      if (k == 0 || v[j] > hi[j]) hi[j] = v[j];
    }
  }
  switch (r->cause) {
  case TFG_CAUSE_PIN:
    tfg_strbuf_puts(out, "pass 1: pinned at ");
    format_loc(out, &r->pin);
    break;
  case TFG_CAUSE_COLOCATE: {
    const tfg_node *w = &pl->g->nodes[r->with], *wl = &pl->g->nodes[rs[n - 1]->with];
    tfg_strbuf_puts(out, "pass 2: ");
    if (w->op == TFG_OP_PARAM && r->grad && n > 1)
      tfg_strbuf_printf(out, "with params %s .. %s (the gradient each one's update reads)", w->name, wl->name);
    else if (w->op == TFG_OP_PARAM && r->grad)
      tfg_strbuf_printf(out, "with param %s (the gradient its update reads)", w->name);
    else if (w->op == TFG_OP_PARAM && n > 1)
      tfg_strbuf_printf(out, "with params %s .. %s (each with its update and state)", w->name, wl->name);
    else if (w->op == TFG_OP_PARAM)
      tfg_strbuf_printf(out, "with param %s (its update and state)", w->name);
    else {
      tfg_strbuf_printf(out, "beside %s at ", tfg_op_get(w->op)->name);
      format_loc(out, &w->loc);
      tfg_strbuf_puts(out, ", which reads it");
    }
    break;
  }
  case TFG_CAUSE_MEMORY:
    tfg_strbuf_printf(out, "pass 3: %s has ", tfg_devices_at(ds, r->refused)->name);
    range(out, lo[2], hi[2], fmt_size);
    tfg_strbuf_puts(out, " free");
    if (hi[3] > 0) {
      tfg_strbuf_puts(out, " (");
      range(out, lo[3], hi[3], fmt_size);
      tfg_strbuf_puts(out, " kept for activations)");
    }
    if (r->copies == r->need) { /* the op's own params are elsewhere: copying them in is what does not fit */
      tfg_strbuf_puts(out, ", the params it reads from other devices need ");
      range(out, lo[4], hi[4], fmt_size);
      tfg_strbuf_puts(out, " here");
    } else {
      tfg_strbuf_puts(out, r->copies > 0 ? ", the params here need (with state, gradients and copies) "
                                         : ", the params here need (with state and gradients) ");
      range(out, lo[4], hi[4], fmt_size);
    }
    break;
  case TFG_CAUSE_COST:
    tfg_strbuf_puts(out, "pass 4: finishes first (");
    range(out, lo[0], hi[0], format_time);
    if (r->runner_up >= 0) {
      tfg_strbuf_printf(out, "; %s ", tfg_devices_at(ds, r->runner_up)->name);
      range(out, lo[1], hi[1], format_time);
    }
    if (r->full >= 0) tfg_strbuf_printf(out, "; %s has no room", tfg_devices_at(ds, r->full)->name);
    /* The placer weighs the GPUs only, or the CPU when there is none. */
    if (r->runner_up < 0 && r->full < 0)
      tfg_strbuf_puts(out, tfg_devices_at(ds, r->device)->kind == TFG_DEVICE_CPU ? "; the only device" : "; the only GPU");
    tfg_strbuf_putc(out, ')');
    break;
  case TFG_CAUSE_FALLBACK: tfg_strbuf_puts(out, "pass 5: read by no op; the default device"); break;
  case TFG_CAUSE_REMOVED: tfg_strbuf_puts(out, remover_of(r->by)->why); break;
  }
}

/* Whether records a and b read the same (a run merges into one line). */
static bool same_reason(const tfg_place_record *a, const tfg_place_record *b) {
  if (a->device != b->device || a->cause != b->cause) return false;
  switch (a->cause) {
  case TFG_CAUSE_PIN: return a->pin.off == b->pin.off && a->pin.src == b->pin.src;
  case TFG_CAUSE_COLOCATE: return a->with == b->with && a->grad == b->grad;
  case TFG_CAUSE_MEMORY: /* and the same words for what did not fit (reason()) */
    return a->refused == b->refused && (a->copies > 0) == (b->copies > 0) &&
           (a->copies == a->need) == (b->copies == b->need);
  case TFG_CAUSE_COST: return a->runner_up == b->runner_up && a->full == b->full;
  case TFG_CAUSE_FALLBACK: return true;
  case TFG_CAUSE_REMOVED: return a->by == b->by;
  }
  return false;
}

/* ---- the explain table ----
 * One line per run of consecutive ops decided alike (same_reason). Then
 * what repeats is folded: a block of k lines that recurs at least 3
 * times in a row with the same shape (devices, passes, causes, op kinds
 * and source lines alike; only names and numbers differ: the layers of a
 * deep model) prints once, names and numbers as ranges, k > 1 under a
 * line that says how often. Columns are as wide as their widest cell up
 * to a cap, past which a cell is cut, so the reasons always line up. */

enum { EXPLAIN_OPS_CAP = 52, EXPLAIN_SRC_CAP = 34, EXPLAIN_FOLD_MIN = 3, EXPLAIN_FOLD_SPAN = 8 };

typedef struct xline {
  int32_t lo, hi; /* its nodes */
  char *src;      /* its source cell */
} xline;

typedef struct xrow {
  const char *dev; /* device name, or "" */
  tfg_strbuf ops, src, why;
} xrow;

/* The source cell of nodes [lo, hi): file:LINE or file:FIRST-LAST (the
 * file of the last node that has one). */
static char *source_cell(const tfg_graph *g, int32_t lo, int32_t hi) {
  uint32_t first = UINT32_MAX, last = 0;
  const char *file = NULL;
  for (int32_t k = lo; k < hi; k++) {
    const tfg_loc *l = &g->nodes[k].loc;
    if (!l->src) continue;
    file = tfg_path_base(l->src->name);
    if (l->line < first) first = l->line;
    if (l->line > last) last = l->line;
  }
  tfg_strbuf b = {0};
  if (file && first == last) tfg_strbuf_printf(&b, "%s:%u", file, first);
  else if (file) tfg_strbuf_printf(&b, "%s:%u-%u", file, first, last);
  else tfg_strbuf_puts(&b, "");
  return tfg_strbuf_take(&b);
}

/* Whether lines a and b have the same shape (see above). */
static bool same_shape(const tfg_placement *pl, const xline *a, const xline *b) {
  const tfg_graph *g = pl->g;
  if (a->hi - a->lo != b->hi - b->lo || strcmp(a->src, b->src) != 0) return false;
  for (int32_t k = 0; k < a->hi - a->lo; k++)
    if (g->nodes[a->lo + k].op != g->nodes[b->lo + k].op) return false;
  const tfg_place_record *x = &pl->rec[a->lo], *y = &pl->rec[b->lo];
  if (x->device != y->device || x->cause != y->cause) return false;
  switch (x->cause) {
  case TFG_CAUSE_COLOCATE: {
    const tfg_node *wx = &g->nodes[x->with], *wy = &g->nodes[y->with];
    return wx->op == wy->op && wx->loc.src == wy->loc.src && wx->loc.off == wy->loc.off && x->grad == y->grad;
  }
  case TFG_CAUSE_COST: return x->runner_up == y->runner_up && x->full == y->full;
  default: return same_reason(x, y);
  }
}

/* How many times in a row the block lines[i..i+k) occurs from i on. */
static int repeats(const tfg_placement *pl, const xline *lines, int nl, int i, int k) {
  int r = 1;
  for (; i + (r + 1) * k <= nl; r++) {
    bool same = true;
    for (int j = 0; j < k && same; j++) same = same_shape(pl, &lines[i + j], &lines[i + r * k + j]);
    if (!same) break;
  }
  return r;
}

/* The fold at line i: *k lines repeated *r times covering the most lines
 * (the shortest block on a tie); *r = 1 when nothing repeats enough. */
static void best_fold(const tfg_placement *pl, const xline *lines, int nl, int i, int *k, int *r) {
  *k = 1;
  *r = 1;
  for (int kk = 1; kk <= EXPLAIN_FOLD_SPAN && i + EXPLAIN_FOLD_MIN * kk <= nl; kk++) {
    int rr = repeats(pl, lines, nl, i, kk);
    if (rr >= EXPLAIN_FOLD_MIN && rr * kk > *r * *k) {
      *k = kk;
      *r = rr;
    }
  }
}

/* Display width (code points, an invalid byte counting one). */
static size_t width_of(const char *s) { return tfg_utf8_width(s, strlen(s)); }

/* The byte offset in s after n code points. */
static size_t skip_points(const char *s, size_t n) {
  size_t at = 0, len = strlen(s);
  for (; n > 0 && at < len; n--) {
    uint32_t cp;
    int w = tfg_utf8_decode((const unsigned char *)s + at, len - at, &cp);
    at += w > 0 ? (size_t)w : 1;
  }
  return at;
}

/* Cuts b to at most w code points: its end replaced by "..." (front
 * false), or its start (front: a source cell keeps its line numbers). */
static void cut(tfg_strbuf *b, size_t w, bool front) {
  size_t have = width_of(b->data);
  if (have <= w) return;
  tfg_strbuf c = {0};
  if (front) {
    tfg_strbuf_puts(&c, "...");
    tfg_strbuf_puts(&c, b->data + skip_points(b->data, have - (w - 3)));
  } else {
    tfg_strbuf_putn(&c, b->data, skip_points(b->data, w - 3));
    tfg_strbuf_puts(&c, "...");
  }
  tfg_strbuf_free(b);
  *b = c;
}

/* The ops cell of a line whose first occurrence starts at node first and
 * last occurrence at node last (the same node when not folded), count
 * nodes each: up to `shown` ops, a named one as `op NAME` (`op FIRST ..
 * LAST` when folded), then "+N more". */
static void ops_label(const tfg_graph *g, int32_t first, int32_t last, int count, int shown, tfg_strbuf *out) {
  for (int k = 0; k < count && k < shown; k++) {
    const tfg_node *n = &g->nodes[first + k], *m = &g->nodes[last + k];
    if (k) tfg_strbuf_puts(out, ", ");
    tfg_strbuf_puts(out, tfg_op_get(n->op)->name);
    if (n->name) tfg_strbuf_printf(out, " %s", n->name);
    if (n->name && m->name && first != last && strcmp(n->name, m->name) != 0) tfg_strbuf_printf(out, " .. %s", m->name);
  }
  if (count > shown) tfg_strbuf_printf(out, " +%d more", count - shown);
}

/* ops_label with as many ops as fit EXPLAIN_OPS_CAP after prefix
 * (at least one; cut past the cap). */
static void ops_cell(const tfg_graph *g, const char *prefix, int32_t first, int32_t last, int count, tfg_strbuf *out) {
  for (int shown = 3;; shown--) {
    tfg_strbuf_clear(out);
    tfg_strbuf_puts(out, prefix);
    ops_label(g, first, last, count, shown, out);
    if (width_of(out->data) <= EXPLAIN_OPS_CAP || shown == 1) break;
  }
  cut(out, EXPLAIN_OPS_CAP, false);
}

/* Appends s padded with blanks to w code points. */
static void pad(tfg_strbuf *out, const char *s, size_t w) {
  tfg_strbuf_puts(out, s);
  for (size_t n = width_of(s); n < w; n++) tfg_strbuf_putc(out, ' ');
}

void tfg_place_explain(const tfg_placement *pl, tfg_strbuf *out) {
  const tfg_graph *g = pl->g;
  tfg_strbuf_printf(out, "devices:\n");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_device *dv = tfg_devices_at(pl->ds, i);
    tfg_strbuf_printf(out, "  %-7s %-36s ", dv->name, dv->hardware);
    tfg_size_format(out, dv->memory);
    tfg_strbuf_putc(out, '\n');
  }

  /* The lines: runs decided alike. */
  xline *lines = malloc(sizeof *lines * ((size_t)pl->n + 1));
  TFG_ASSERT(lines != NULL);
  int nl = 0;
  for (int32_t i = 0; i < pl->n;) {
    int32_t j = i + 1;
    while (j < pl->n && same_reason(&pl->rec[i], &pl->rec[j])) j++;
    lines[nl++] = (xline){i, j, source_cell(g, i, j)};
    i = j;
  }

  /* The rows, folded; a header row first. */
  xrow *rows = calloc((size_t)nl * 2 + 2, sizeof *rows);
  const tfg_place_record **rs = malloc(sizeof *rs * ((size_t)nl + 1));
  TFG_ASSERT(rows && rs);
  int nr = 0;
  rows[nr].dev = "device";
  tfg_strbuf_puts(&rows[nr].ops, "ops");
  tfg_strbuf_puts(&rows[nr].src, "source");
  tfg_strbuf_puts(&rows[nr++].why, "reason");
  for (int i = 0; i < nl;) {
    int k, r;
    best_fold(pl, lines, nl, i, &k, &r);
    /* A layer begins with its params (an op with no inputs), not with the
     * last op of the layer before: a block that starts so a few lines
     * later, losing at most one repeat, is the one folded, and the lines
     * before it print alone. */
    for (int d = 1; r > 1 && d < k && g->nodes[lines[i].lo].ninputs != 0; d++) {
      int k2, r2;
      if (g->nodes[lines[i + d].lo].ninputs != 0) continue;
      best_fold(pl, lines, nl, i + d, &k2, &r2);
      if (k2 == k && r2 >= r - 1) k = r = 1;
      break;
    }
    if (r > 1 && k > 1) {
      xrow *h = &rows[nr++];
      h->dev = "";
      tfg_strbuf_printf(&h->ops, "the next %d lines, %d times over:", k, r);
      char *a = source_cell(g, lines[i].lo, lines[i + r * k - 1].hi);
      tfg_strbuf_puts(&h->src, a);
      free(a);
      tfg_strbuf_puts(&h->why, "");
    }
    for (int j = 0; j < k; j++) {
      const xline *f = &lines[i + j], *l = &lines[i + (r - 1) * k + j];
      xrow *w = &rows[nr++];
      w->dev = pl->rec[f->lo].cause == TFG_CAUSE_REMOVED ? "-" : tfg_devices_at(pl->ds, pl->rec[f->lo].device)->name;
      char prefix[32] = "";
      if (r > 1) snprintf(prefix, sizeof prefix, k > 1 ? "| " : "%d x ", r);
      ops_cell(g, prefix, f->lo, l->lo, f->hi - f->lo, &w->ops);
      tfg_strbuf_puts(&w->src, f->src);
      for (int o = 0; o < r; o++) rs[o] = &pl->rec[lines[i + o * k + j].lo];
      reason(pl, rs, r, &w->why);
    }
    i += r * k;
  }

  /* Column widths, then the rows. */
  size_t wdev = 0, wops = 0, wsrc = 0;
  for (int i = 0; i < nr; i++) {
    cut(&rows[i].src, EXPLAIN_SRC_CAP, true);
    if (width_of(rows[i].dev) > wdev) wdev = width_of(rows[i].dev);
    if (width_of(rows[i].ops.data) > wops) wops = width_of(rows[i].ops.data);
    if (width_of(rows[i].src.data) > wsrc) wsrc = width_of(rows[i].src.data);
  }
  tfg_strbuf_putc(out, '\n');
  for (int i = 0; i < nr; i++) {
    size_t start = out->len;
    pad(out, rows[i].dev, wdev + 2);
    pad(out, rows[i].ops.data, wops + 2);
    pad(out, rows[i].src.data, wsrc + 2);
    tfg_strbuf_puts(out, rows[i].why.data);
    while (out->len > start && out->data[out->len - 1] == ' ') out->len--;
    tfg_strbuf_putc(out, '\n');
    tfg_strbuf_free(&rows[i].ops);
    tfg_strbuf_free(&rows[i].src);
    tfg_strbuf_free(&rows[i].why);
  }
  for (int i = 0; i < nl; i++) free(lines[i].src);
  free(lines);
  free(rows);
  free(rs);

  tfg_strbuf_printf(out, "\n%-7s %6s %12s %12s %12s %12s %12s\n", "device", "ops", "FLOP/step", "params", "peak", "in/step",
                    "out/step");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_place_totals *t = &pl->totals[i];
    tfg_strbuf cells[5] = {{0}};
    tfg_size_format(&cells[0], t->param_bytes);
    tfg_size_format(&cells[1], t->peak_bytes);
    tfg_size_format(&cells[2], t->bytes_in);
    tfg_size_format(&cells[3], t->bytes_out);
    tfg_strbuf_printf(out, "%-7s %6d %12.4g %12s %12s %12s %12s\n", tfg_devices_at(pl->ds, i)->name, t->ops, t->flops,
                      cells[0].data, cells[1].data, cells[2].data, cells[3].data);
    for (int k = 0; k < 5; k++) tfg_strbuf_free(&cells[k]);
  }
}

static const char *cause_name(tfg_place_cause c) {
  switch (c) {
  case TFG_CAUSE_PIN: return "pin";
  case TFG_CAUSE_COLOCATE: return "colocate";
  case TFG_CAUSE_MEMORY: return "memory";
  case TFG_CAUSE_COST: return "cost";
  case TFG_CAUSE_FALLBACK: return "fallback";
  case TFG_CAUSE_REMOVED: return "removed";
  }
  return "?";
}

/* A JSON (and DOT) string literal: the writer every JSON of tfg shares,
 * so a name that is not UTF-8 comes out as \ufffd, never raw. */
static void json_string(tfg_strbuf *out, const char *s) { tfg_json_put_string(out, s); }

void tfg_place_json(const tfg_placement *pl, tfg_strbuf *out) {
  const tfg_graph *g = pl->g;
  tfg_strbuf_puts(out, "{\"devices\": [");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_device *dv = tfg_devices_at(pl->ds, i);
    tfg_strbuf_printf(out, "%s\n  {\"name\": \"%s\", \"hardware\": ", i ? "," : "", dv->name);
    json_string(out, dv->hardware);
    tfg_strbuf_printf(out,
                      ", \"memory\": %" PRId64
                      ", \"flops\": %.6g, \"mem_bw\": %.6g, \"link_bw\": %.6g, \"node\": %d, \"net_bw\": %.6g}",
                      dv->memory, dv->flops, dv->mem_bw, dv->link_bw, dv->node, dv->net_bw);
  }
  tfg_strbuf_puts(out, "],\n\"ops\": [");
  for (int32_t i = 0; i < pl->n; i++) {
    const tfg_node *n = &g->nodes[i];
    const tfg_place_record *r = &pl->rec[i];
    tfg_strbuf_printf(out, "%s\n  {\"id\": %d, \"op\": \"%s\", ", i ? "," : "", i, tfg_op_get(n->op)->name);
    if (n->name) {
      tfg_strbuf_puts(out, "\"name\": ");
      json_string(out, n->name);
      tfg_strbuf_puts(out, ", ");
    }
    /* what a graph pass removed runs nowhere: device null, pass 0 */
    if (r->cause == TFG_CAUSE_REMOVED)
      tfg_strbuf_printf(out, "\"device\": null, \"pass\": 0, \"cause\": \"removed\", \"by\": \"%s\"",
                        remover_of(r->by)->by);
    else
      tfg_strbuf_printf(out, "\"device\": \"%s\", \"pass\": %d, \"cause\": \"%s\"",
                        tfg_devices_at(pl->ds, r->device)->name, (int)r->cause, cause_name(r->cause));
    if (n->loc.src) {
      tfg_strbuf_puts(out, ", \"loc\": ");
      tfg_strbuf b = {0};
      format_loc(&b, &n->loc);
      json_string(out, b.data);
      tfg_strbuf_free(&b);
    }
    if (r->cause == TFG_CAUSE_PIN) {
      tfg_strbuf b = {0};
      format_loc(&b, &r->pin);
      tfg_strbuf_puts(out, ", \"pin\": ");
      json_string(out, b.data);
      tfg_strbuf_free(&b);
    }
    if (r->cause == TFG_CAUSE_COLOCATE) /* gradient: it computes the gradient of with, a param */
      tfg_strbuf_printf(out, ", \"with\": %d%s", r->with, r->grad ? ", \"gradient\": true" : "");
    if (r->cause == TFG_CAUSE_COST || r->cause == TFG_CAUSE_MEMORY) {
      tfg_strbuf_printf(out, ", \"est_s\": %.6g", r->est);
      if (r->runner_up >= 0)
        tfg_strbuf_printf(out, ", \"runner_up\": \"%s\", \"runner_up_est_s\": %.6g", tfg_devices_at(pl->ds, r->runner_up)->name,
                          r->runner_est);
    }
    if (r->cause == TFG_CAUSE_MEMORY)
      tfg_strbuf_printf(out, ", \"refused\": \"%s\", \"need\": %" PRId64 ", \"avail\": %" PRId64,
                        tfg_devices_at(pl->ds, r->refused)->name, r->need, r->avail);
    if (r->cause == TFG_CAUSE_MEMORY && r->copies > 0) tfg_strbuf_printf(out, ", \"copies\": %" PRId64, r->copies);
    tfg_strbuf_putc(out, '}');
  }
  tfg_strbuf_puts(out, "],\n\"totals\": [");
  for (int i = 0; i < pl->ndev; i++) {
    const tfg_place_totals *t = &pl->totals[i];
    tfg_strbuf_printf(out,
                      "%s\n  {\"device\": \"%s\", \"ops\": %d, \"flops\": %.6g, \"param_bytes\": %" PRId64
                      ", \"peak_bytes\": %" PRId64 ", \"bytes_in\": %" PRId64 ", \"bytes_out\": %" PRId64 "}",
                      i ? "," : "", tfg_devices_at(pl->ds, i)->name, t->ops, t->flops, t->param_bytes, t->peak_bytes,
                      t->bytes_in, t->bytes_out);
  }
  tfg_strbuf_puts(out, "]}\n");
}

/* What a graph pass removed is not drawn: it runs nowhere. */
static bool drawn(const tfg_placement *pl, tfg_node_id i) { return pl->rec[i].cause != TFG_CAUSE_REMOVED; }

void tfg_place_dot(const tfg_placement *pl, tfg_strbuf *out) {
  const tfg_graph *g = pl->g;
  tfg_strbuf_puts(out, "digraph tfg {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n");
  for (int dv = 0; dv < pl->ndev; dv++) {
    bool any = false;
    for (int32_t i = 0; i < pl->n && !any; i++) any = pl->rec[i].device == dv && drawn(pl, i);
    if (!any) continue;
    const tfg_device *d = tfg_devices_at(pl->ds, dv);
    tfg_strbuf_printf(out, "  subgraph cluster_%d {\n    label=\"%s\";\n", dv, d->name);
    for (int32_t i = 0; i < pl->n; i++) {
      if (pl->rec[i].device != dv || !drawn(pl, i)) continue;
      tfg_strbuf label = {0};
      node_label(g, i, &label);
      tfg_strbuf_printf(out, "    n%d [label=", i);
      json_string(out, label.data); /* a DOT string takes the same escapes */
      tfg_strbuf_puts(out, "];\n");
      tfg_strbuf_free(&label);
    }
    tfg_strbuf_puts(out, "  }\n");
  }
  for (int32_t i = 0; i < pl->n; i++)
    for (int k = 0; drawn(pl, i) && k < g->nodes[i].ninputs; k++) {
      tfg_node_id x = g->nodes[i].inputs[k];
      tfg_strbuf_printf(out, "  n%d -> n%d%s;\n", x, i, pl->rec[x].device != pl->rec[i].device ? " [color=red]" : "");
    }
  tfg_strbuf_puts(out, "}\n");
}
