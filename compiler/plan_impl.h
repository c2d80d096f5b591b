/* compiler/plan_impl.h: what the planner's files share, for them alone
 * (compiler/plan*.c; nothing else includes it). The planner is split by
 * job: plan.c builds (buckets, chains, copies, steps) and holds the entry
 * points, plan_memory.c makes the static memory plan, plan_validate.c
 * checks a plan, plan_print.c prints one. The rules they keep are in
 * docs/plan.md. */
#ifndef TFG_PLAN_IMPL_H
#define TFG_PLAN_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "compiler/plan.h"

/* Every offset is a multiple of this: what CUDA's allocator guarantees,
 * and enough for any vector load of any dtype. */
#define TFG_PLAN_ALIGN 256

/* ---- plan.c: nodes, chains and steps ---------------------------------------------- */

/* The bytes of n's value. */
int64_t tfg_plan_bytes_of(const tfg_node *n);

/* Whether n is persistent (a param, optimizer state or a constant): its
 * buffer is there before any step and never freed. */
bool tfg_plan_persistent(const tfg_node *n);

/* Whether a graph pass (constant folding, simplify) removed node id
 * from p (no step, no buffer). */
static inline bool tfg_plan_removed(const tfg_plan *p, tfg_node_id id) {
  return p->folded && tfg_fold_removed(p->folded[id]);
}

/* Whether op only reinterprets its input's contiguous bytes (reshape,
 * flatten): a view candidate (docs/plan.md, Views). */
bool tfg_plan_view_op(tfg_op_id op);

/* The node whose buffer node id shares in p (a view's base), or id. */
static inline tfg_node_id tfg_plan_base_of(const tfg_plan *p, tfg_node_id id) {
  return p->view_of && p->view_of[id] >= 0 ? p->view_of[id] : id;
}

/* Whether op writes some of its inputs in place (its row's inplace,
 * ir/ops.h): an optimizer update, a gradient accumulation, the grad
 * scaler's update. */
bool tfg_plan_in_place(tfg_op_id op);

/* Whether node i may be a member of a chain: an elementwise op of arity
 * 1 or 2 on f32 or f64, each input of its dtype and of its shape or a
 * scalar. (Where it sits and who reads it is the caller's question.) */
bool tfg_plan_fusable(const tfg_graph *g, tfg_node_id i);

/* Per node i of g (n nodes): readers[i] the distinct ops that read it,
 * last[i] the last of them (-1: none), counting no op a graph pass
 * removed (p's marks: it never runs, though its inputs still name what
 * it read); updates[i] the optimizer updates before node i (n + 1
 * entries: updates[n] counts them all). The arrays are the caller's,
 * every entry written. */
void tfg_plan_count_readers(const tfg_plan *p, const tfg_graph *g, int *readers, tfg_node_id *last, int *updates);

/* The values the members m[0..n) (ascending) read that are not members,
 * each once, in first-read order, into in[0..cap); returns their count,
 * or -1 when there are more than cap. */
int tfg_plan_chain_inputs(const tfg_graph *g, const tfg_node_id *m, int n, tfg_node_id *in, int cap);

/* A step of the given kind (bucket and chain -1). */
tfg_plan_step tfg_plan_step_of(tfg_plan_step_kind kind, int stream, tfg_node_id node, int src, int event);

/* ---- plan_memory.c: ordered sets and the memory passes --------------------------- */

/* A treap: a search tree on (a, b) keys kept balanced by random priorities,
 * so each operation takes expected O(log n). Best fit keeps the free gaps
 * in one keyed by (size, offset), the validator the live buffers in one
 * keyed by (offset, buffer). Its nodes are indices into arrays sized by
 * the caller (a node is in the set at most once). The priorities come
 * from a fixed seed, and only shape the tree: results do not depend on
 * them. */
typedef struct tfg_plan_treap {
  int root;
  int *l, *r;
  uint32_t *prio;
  int64_t *ka, *kb;
  uint32_t seed;
} tfg_plan_treap;

/* An empty set for nodes 0 .. n - 1. */
void tfg_plan_treap_init(tfg_plan_treap *t, int n);
void tfg_plan_treap_free(tfg_plan_treap *t);
/* Adds node x (not in the set) with key (a, b). */
void tfg_plan_treap_insert(tfg_plan_treap *t, int x, int64_t a, int64_t b);
/* Removes node x (in the set). */
void tfg_plan_treap_erase(tfg_plan_treap *t, int x);
/* The node with the smallest key >= (a, b), or -1. */
int tfg_plan_treap_ceil(const tfg_plan_treap *t, int64_t a, int64_t b);
/* The node with the largest key < (a, b), or -1. */
int tfg_plan_treap_floor_below(const tfg_plan_treap *t, int64_t a, int64_t b);

/* After the step sweep: the live ranges that do not end at a tensor's
 * last reader (docs/plan.md, Memory). A tensor sent to another device
 * lives until the first compute step of its device that happens after
 * every copy of it (the events of a pipeline's returning gradients order
 * one), else to the end of the list; one read by no op (a result) lives
 * to the end; persistent buffers span the whole list. dev[i] is node i's
 * device, own_buf[i] its buffer there or -1. */
void tfg_plan_close_live_ranges(tfg_plan *p, const int *dev, const int *own_buf);

/* Pass 3: assigns offsets on device d by best fit and sets its peak.
 * Returns false after reporting to diag when the device is too small
 * (diag NULL: capacities unchecked, the plan is only measured). */
bool tfg_plan_assign_memory(tfg_plan *p, int d, tfg_diag *diag);

/* Pass 4: makes device d's COPY steps wait for the compute steps that
 * last used their memory (docs/plan.md, Concurrent streams). */
void tfg_plan_order_copies(tfg_plan *p, int d);

/* ---- plan_print.c: text shared by errors, the validator and print ---------------- */

/* "n3 matmul (t.tfg:4)"; named nodes as "n0 param h.w (nn.tfg:18)". */
void tfg_plan_node_text(const tfg_graph *g, tfg_node_id id, tfg_strbuf *out);
/* Device d's name ("gpu:0"). */
const char *tfg_plan_dev_name(const tfg_plan *p, int d);
/* "compute", "copy", "collective", or "?" for no such stream. */
const char *tfg_plan_stream_name(int s);

#endif
