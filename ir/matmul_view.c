/* ir/matmul_view.c: a MATMUL's strided operand views (matmul_view.h). */
#include "ir/matmul_view.h"

void tfg_contiguous_strides(const tfg_shape *s, int64_t *stride) {
  int64_t st = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    stride[i] = st;
    st *= s->dim[i];
  }
}

void tfg_matmul_view(const tfg_node *n, int k, const tfg_shape *stored, tfg_shape *logical, int64_t *stride) {
  int64_t st[TFG_MAX_RANK];
  tfg_contiguous_strides(stored, st);
  *logical = *stored;
  if (!(n->attrs.views & (1u << k))) {
    for (int i = 0; i < stored->rank; i++) stride[i] = st[i];
    return;
  }
  const int8_t *perm = n->attrs.view_perm[k];
  if (k < TFG_VIEW_OUT) { /* logical axis i is stored axis perm[i] */
    for (int i = 0; i < stored->rank; i++) {
      logical->dim[i] = stored->dim[perm[i]];
      stride[i] = st[perm[i]];
    }
    return;
  }
  /* stored = transpose(product, perm): stored axis i is product axis perm[i] */
  for (int i = 0; i < stored->rank; i++) {
    logical->dim[perm[i]] = stored->dim[i];
    stride[perm[i]] = st[i];
  }
}

bool tfg_rows_view_of(const tfg_node *n, int k, const tfg_shape *stored, tfg_rows_view *v) {
  tfg_shape l;
  int64_t st[TFG_MAX_RANK];
  tfg_matmul_view(n, k, stored, &l, st);
  int r = l.rank;
  if (r < 2 || (st[r - 1] != 1 && l.dim[r - 1] > 1)) return false;
  v->nbatch = r - 2;
  for (int d = 0; d < r - 2; d++) {
    v->dim[d] = l.dim[d];
    v->step[d] = st[d];
  }
  v->ld = st[r - 2];
  return true;
}

const char *tfg_attention_geometry(const tfg_node *n, const tfg_shape *const *in, const tfg_shape *out,
                                   tfg_attention_geom *g) {
  bool probs = n->op == TFG_OP_ATTENTION_PROBS, grad = n->op == TFG_OP_ATTENTION_GRAD;
  int vk = probs ? 1 : 2; /* the probabilities have no v: k stands in */
  if (!tfg_rows_view_of(n, 0, in[0], &g->q) || !tfg_rows_view_of(n, 1, in[1], &g->k) ||
      !tfg_rows_view_of(n, vk, in[vk], &g->v) || (grad && !tfg_rows_view_of(n, 3, in[3], &g->dy)) ||
      !tfg_rows_view_of(n, TFG_VIEW_OUT, out, &g->out))
    return "a view's rows are not contiguous";
  if (!grad) g->dy = g->out;
  tfg_shape lq, lk, lv;
  int64_t st[TFG_MAX_RANK];
  tfg_matmul_view(n, 0, in[0], &lq, st);
  tfg_matmul_view(n, 1, in[1], &lk, st);
  tfg_matmul_view(n, vk, in[vk], &lv, st);
  int r = lq.rank;
  if (r < 2 || lk.rank != r || lv.rank != r) return "q, k and v must be [..., T, head size] of one rank";
  g->tq = lq.dim[r - 2];
  g->tk = lk.dim[r - 2];
  g->hd = lq.dim[r - 1];
  g->hdv = probs ? 0 : lv.dim[r - 1];
  return NULL;
}

/* How a row-major gemm reads a rows x cols matrix whose rows are sr
 * elements apart and columns sc: row-major (sc 1: *ld = sr, *trans as it
 * was) or column-major (sr 1: *ld = sc, *trans flipped); a unit dimension
 * takes either. False when neither stride is 1 or the rows would overlap. */
static bool mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *trans, int64_t *ld) {
  if ((sc == 1 || cols == 1) && (rows == 1 || sr >= cols)) {
    *ld = rows == 1 ? cols : sr;
    return true;
  }
  if ((sr == 1 || rows == 1) && (cols == 1 || sc >= rows)) {
    *trans = !*trans;
    *ld = cols == 1 ? rows : sc;
    return true;
  }
  return false;
}

/* The element steps of an operand (view s, strides st) along the
 * output's nbatch batch dims, aligned on the right as NumPy does. */
static bool batch_steps(const tfg_shape *s, const int64_t *st, int nbatch, const int64_t *outdim, int64_t *step) {
  int own = s->rank - 2;
  if (own > nbatch) return false;
  for (int d = nbatch - 1; d >= 0; d--) {
    int sd = d - (nbatch - own);
    int64_t n = sd >= 0 ? s->dim[sd] : 1;
    if (n != outdim[d] && n != 1) return false;
    step[d] = n == 1 ? 0 : st[sd];
  }
  return true;
}

const char *tfg_matmul_geometry(const tfg_node *n, const tfg_shape *a, const tfg_shape *b, const tfg_shape *out,
                                tfg_matmul_geom *g) {
  tfg_shape as, bs, os;
  int64_t ast[TFG_MAX_RANK], bst[TFG_MAX_RANK], ost[TFG_MAX_RANK];
  tfg_matmul_view(n, 0, a, &as, ast);
  tfg_matmul_view(n, 1, b, &bs, bst);
  tfg_matmul_view(n, TFG_VIEW_OUT, out, &os, ost);
  int ra = as.rank, rb = bs.rank, ro = os.rank;
  if (ra < 2 || rb < 2 || ro != (ra > rb ? ra : rb)) return "operand ranks do not give the output's";
  bool ta = n->attrs.transpose_a, tb = n->attrs.transpose_b, tc = false;
  g->m = os.dim[ro - 2];
  g->n = os.dim[ro - 1];
  g->k = ta ? as.dim[ra - 2] : as.dim[ra - 1];
  if ((ta ? as.dim[ra - 1] : as.dim[ra - 2]) != g->m || (tb ? bs.dim[rb - 1] : bs.dim[rb - 2]) != g->k ||
      (tb ? bs.dim[rb - 2] : bs.dim[rb - 1]) != g->n)
    return "operand shapes do not match the output's";
  g->ta = ta;
  g->tb = tb;
  if (!mat_layout(as.dim[ra - 2], as.dim[ra - 1], ast[ra - 2], ast[ra - 1], &g->ta, &g->lda) ||
      !mat_layout(bs.dim[rb - 2], bs.dim[rb - 1], bst[rb - 2], bst[rb - 1], &g->tb, &g->ldb) ||
      !mat_layout(g->m, g->n, ost[ro - 2], ost[ro - 1], &tc, &g->ldc) || tc)
    return "an operand's layout has no unit stride in its matrix";
  g->nbatch = ro - 2;
  for (int d = 0; d < g->nbatch; d++) {
    g->dim[d] = os.dim[d];
    g->cstep[d] = ost[d];
  }
  if (!batch_steps(&as, ast, g->nbatch, g->dim, g->astep) || !batch_steps(&bs, bst, g->nbatch, g->dim, g->bstep))
    return "batch dimensions do not broadcast to the output's";
  return NULL;
}
