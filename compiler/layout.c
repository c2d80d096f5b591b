/* compiler/layout.c: transposes folded into matmuls and attentions
 * (layout.h). One sweep in graph order: each node first reads the
 * representatives of its inputs (a folded output transpose is represented
 * by its matmul), then a matmul or attention takes in its operand
 * transposes and, when its result's only reader is a transpose, that one. */
#include "compiler/layout.h"

#include <stdbool.h>
#include <stdlib.h>

#include "base/assert.h"
#include "compiler/fold.h"

/* Whether two pins let a value move from one op to the other's device
 * with no copy the program asked for: the same, or one unpinned. */
static bool pins_agree(const tfg_devspec *a, const tfg_devspec *b) {
  if (a->kind == TFG_DEV_NONE || b->kind == TFG_DEV_NONE) return true;
  return a->kind == b->kind && a->index == b->index;
}

/* The perm of matmul view k of nd (the identity when not set). */
static void view_perm(const tfg_node *nd, int k, int r, int *perm) {
  for (int i = 0; i < r; i++) perm[i] = nd->attrs.views & (1u << k) ? nd->attrs.view_perm[k][i] : i;
}

static void set_view(tfg_node *nd, int k, int r, const int *perm) {
  nd->attrs.views |= (uint8_t)(1u << k);
  for (int i = 0; i < TFG_MAX_RANK; i++) nd->attrs.view_perm[k][i] = (int8_t)(i < r ? perm[i] : 0);
}

/* Whether op reads views: a matmul (its matrices row- or column-major:
 * a gemm flag), an attention, its probabilities or its gradient (rows
 * kept contiguous). */
static bool reads_views(tfg_op_id op) {
  return op == TFG_OP_MATMUL || op == TFG_OP_ATTENTION || op == TFG_OP_ATTENTION_PROBS ||
         op == TFG_OP_ATTENTION_GRAD;
}

/* Input k of nd reads transpose t: the view of t's input that gives what
 * nd read, if its last axis stays the input's last (contiguous) one, or
 * for a matmul its second last (a column-major matrix). */
static bool fold_operand(tfg_node *nd, int k, const tfg_node *t, int *perm) {
  int r = t->shape.rank, old[TFG_MAX_RANK];
  if (r < 2) return false;
  view_perm(nd, k, r, old);
  /* logical axis i = t's axis old[i] = its input's axis t.perm[old[i]] */
  for (int i = 0; i < r; i++) perm[i] = t->attrs.perm[old[i]];
  return perm[r - 1] == r - 1 || (nd->op == TFG_OP_MATMUL && perm[r - 2] == r - 1);
}

/* nd's product is read only by transpose r: the store view that writes
 * r's value, if the product's rows stay contiguous. */
static bool fold_output(const tfg_node *nd, const tfg_node *r, int *perm) {
  int rank = r->shape.rank, old[TFG_MAX_RANK];
  view_perm(nd, TFG_VIEW_OUT, rank, old);
  /* r's axis j = nd's stored axis r.perm[j] = product axis old[r.perm[j]] */
  for (int j = 0; j < rank; j++) perm[j] = old[r->attrs.perm[j]];
  return perm[rank - 1] == rank - 1;
}

/* The packed attention gradient (ATTENTION_GRAD, attrs.axis 3: dq, dk, dv
 * side by side along the last axis) i, read only by slices of the last
 * axis that are each read only by a transpose, all of one perm that keeps
 * the last axis last (the heads' merge): those transposes fold into i's
 * store view, as a single transpose reader would. Slicing the last axis
 * commutes with such a perm, so each slice then reads the stored
 * (permuted) tensor and gives its transpose's value, in its shape; the
 * transposes' readers read the slices. Returns the transposes folded. */
static int fold_packed_output(tfg_graph *g, int32_t i, const uint8_t *roots, uint8_t *mark, tfg_node_id *rep,
                              int *readers, tfg_node_id *reader) {
  tfg_node *nd = &g->nodes[i];
  if (nd->op != TFG_OP_ATTENTION_GRAD || nd->attrs.axis != TFG_ATTENTION_GRAD_PACKED || (roots && roots[i]) || readers[i] < 1 ||
      (nd->attrs.views & (1u << TFG_VIEW_OUT)))
    return 0;
  int rank = nd->shape.rank, found = 0, perm[TFG_MAX_RANK];
  tfg_node_id sl[8], tr[8];
  for (int32_t j = i + 1; j < g->nnodes && found < readers[i]; j++) {
    const tfg_node *s = &g->nodes[j];
    if (tfg_fold_removed(mark[j])) continue;
    bool reads = false;
    for (int k = 0; k < s->ninputs; k++) reads = reads || s->inputs[k] == i;
    if (!reads) continue;
    if (found == 8 || s->op != TFG_OP_SLICE || s->attrs.axis != rank - 1 || (roots && roots[j]) ||
        readers[j] != 1 || !pins_agree(&s->pin, &nd->pin))
      return 0;
    const tfg_node *t = &g->nodes[reader[j]];
    if (t->op != TFG_OP_TRANSPOSE || (roots && roots[reader[j]]) || !pins_agree(&t->pin, &nd->pin) ||
        t->attrs.perm[rank - 1] != rank - 1)
      return 0;
    for (int a = 0; a < rank && found > 0; a++)
      if (t->attrs.perm[a] != g->nodes[tr[0]].attrs.perm[a]) return 0;
    sl[found] = j;
    tr[found++] = reader[j];
  }
  if (found != readers[i] || !fold_output(nd, &g->nodes[tr[0]], perm)) return 0;
  set_view(nd, TFG_VIEW_OUT, rank, perm);
  tfg_shape stored = nd->shape; /* stored axis a is the product's axis perm[a] */
  for (int a = 0; a < rank; a++) stored.dim[a] = nd->shape.dim[perm[a]];
  nd->shape = stored;
  for (int f = 0; f < found; f++) {
    g->nodes[sl[f]].shape = g->nodes[tr[f]].shape;
    rep[tr[f]] = sl[f];
    readers[sl[f]] = readers[tr[f]];
    reader[sl[f]] = reader[tr[f]];
    mark[tr[f]] = TFG_FOLD_LAYOUT;
  }
  return found;
}

int tfg_fold_transposes(tfg_graph *g, const uint8_t *roots, uint8_t *mark) {
  int32_t n = g->nnodes;
  tfg_node_id *rep = malloc(sizeof *rep * ((size_t)n + 1));
  int *readers = calloc((size_t)n + 1, sizeof *readers);  /* reads by nodes that run, with multiplicity */
  tfg_node_id *reader = malloc(sizeof *reader * ((size_t)n + 1)); /* the last of them */
  bool *touched = calloc((size_t)n + 1, sizeof *touched); /* a transpose that lost a reader to the pass */
  TFG_ASSERT(rep && readers && reader && touched);
  for (int32_t i = 0; i < n; i++) {
    rep[i] = i;
    if (tfg_fold_removed(mark[i])) continue;
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
      readers[g->nodes[i].inputs[k]]++;
      reader[g->nodes[i].inputs[k]] = i;
    }
  }
  int count = 0;
  for (int32_t i = 0; i < n; i++) {
    if (tfg_fold_removed(mark[i])) continue;
    tfg_node *nd = &g->nodes[i];
    bool changed = false;
    for (int k = 0; k < nd->ninputs; k++) changed = changed || rep[nd->inputs[k]] != nd->inputs[k];
    for (int k = 0; reads_views(nd->op) && k < nd->ninputs; k++) /* an operand may fold below */
      changed = changed || g->nodes[rep[nd->inputs[k]]].op == TFG_OP_TRANSPOSE;
    if (changed) { /* a fresh inputs array: the old one may be shared */
      tfg_node_id *ins = tfg_arena_alloc(&g->arena, sizeof *ins * (size_t)nd->ninputs);
      for (int k = 0; k < nd->ninputs; k++) ins[k] = rep[nd->inputs[k]];
      nd->inputs = ins;
    }
    if (!reads_views(nd->op)) continue;
    tfg_node_id *ins = (tfg_node_id *)nd->inputs;
    for (int k = 0; k < nd->ninputs; k++) {
      tfg_node_id t = ins[k];
      const tfg_node *tn = &g->nodes[t];
      int perm[TFG_MAX_RANK];
      if (tn->op != TFG_OP_TRANSPOSE || !pins_agree(&tn->pin, &nd->pin) || !fold_operand(nd, k, tn, perm)) continue;
      set_view(nd, k, tn->shape.rank, perm);
      ins[k] = tn->inputs[0];
      readers[t]--;
      readers[tn->inputs[0]]++;
      touched[t] = true;
    }
    count += fold_packed_output(g, i, roots, mark, rep, readers, reader);
    if (readers[i] != 1 || (roots && roots[i])) continue;
    tfg_node_id r = reader[i];
    const tfg_node *rn = &g->nodes[r];
    int perm[TFG_MAX_RANK];
    if (rn->op != TFG_OP_TRANSPOSE || (roots && roots[r]) || !pins_agree(&rn->pin, &nd->pin) ||
        !fold_output(nd, rn, perm))
      continue;
    set_view(nd, TFG_VIEW_OUT, rn->shape.rank, perm);
    nd->shape = rn->shape;
    rep[r] = i;
    readers[i] = readers[r];
    reader[i] = reader[r];
    mark[r] = TFG_FOLD_LAYOUT;
    count++;
  }
  for (int32_t i = 0; i < n; i++)
    if (touched[i] && readers[i] == 0 && !(roots && roots[i]) && !tfg_fold_removed(mark[i])) {
      mark[i] = TFG_FOLD_LAYOUT;
      readers[g->nodes[i].inputs[0]]--;
      count++;
    }
  free(rep);
  free(readers);
  free(reader);
  free(touched);
  return count;
}
