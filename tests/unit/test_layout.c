/* tests/unit/test_layout.c: transposes folded into matmuls and attentions
 * (compiler/layout.h, ir/matmul_view.h).
 *
 * The CPU kernel through views: random operand and product permutations
 * (row-major and column-major matrices, batch axes moved, broadcast
 * batches, the transpose flags on top), f32 and f64, against a long
 * double reference read through the same index mapping, within Higham's
 * dot-product bound (2 K u times sum |a b|).
 *
 * The pass: which transposes fold (the heads split and merge of
 * attention, an operand stored column-major) and which stay (no unit
 * stride left in the matrix, a product whose rows would not be
 * contiguous, a pin elsewhere, a root); a folded transpose that others
 * read keeps running for them; and programs compiled with the passes
 * and with TFG_OPT=0 print the same bits, and a multi-head attention
 * trained with AdamW gives the same bits with the layout pass and
 * without it (TFG_LAYOUT=0), its 8 transposes per layer all folded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/fold.h"
#include "compiler/layout.h"
#include "compiler/simplify.h"
#include "ir/matmul_view.h"
#include "kernels/cpu/cpu.h"
#include "tests/unit/programs.h"
#include "tests/unit/tensors.h"
#include "tests/unit/unit.h"

/* ---- the kernel through views ----------------------------------------------- */

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* A random permutation of r axes whose matrix (the last two logical
 * axes) keeps the stored last axis: row-major or column-major. */
static void matrix_perm(uint64_t *s, int r, int *perm) {
  for (int i = 0; i < r; i++) perm[i] = i;
  for (int i = r - 1; i > 0; i--) {
    int j = (int)(lcg(s) % (uint64_t)(i + 1));
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  if (perm[r - 1] != r - 1 && perm[r - 2] != r - 1) { /* the stored last axis back into the matrix */
    int at_ = 0, to = r - 1 - (int)(lcg(s) % 2);
    while (perm[at_] != r - 1) at_++;
    perm[at_] = perm[to];
    perm[to] = r - 1;
  }
}

/* The element of a tensor of stored shape `st` at logical index idx of
 * its view (logical axis i = stored axis perm[i]), perm NULL: the same. */
static int64_t at(const tfg_shape *st, const int *perm, const int64_t *idx) {
  int64_t stored[TFG_MAX_RANK], off = 0;
  for (int i = 0; i < st->rank; i++) stored[perm ? perm[i] : i] = idx[i];
  for (int i = 0; i < st->rank; i++) off = off * st->dim[i] + stored[i];
  return off;
}

START_TEST(kernel_views_match_reference) {
  tfg_dtype dt = FLOATS[_i % 2];
  uint64_t s = 0x5eed + (uint64_t)_i;
  int r = 3 + (int)(lcg(&s) % 2); /* rank 3 or 4 */
  int64_t M = 1 + (int64_t)(lcg(&s) % 9), N = 1 + (int64_t)(lcg(&s) % 9), K = 1 + (int64_t)(lcg(&s) % 9);
  int64_t batch[2] = {1 + (int64_t)(lcg(&s) % 3), 1 + (int64_t)(lcg(&s) % 4)};
  bool ta = lcg(&s) % 2, tb = lcg(&s) % 2, bcast_b = lcg(&s) % 3 == 0;
  /* logical shapes: a [.., M, K] (or [.., K, M] with ta), b likewise, product [.., M, N] */
  tfg_shape la = {.rank = r}, lb = {.rank = r}, lp = {.rank = r};
  for (int i = 0; i < r - 2; i++) {
    la.dim[i] = lp.dim[i] = batch[i];
    lb.dim[i] = bcast_b ? 1 : batch[i];
  }
  la.dim[r - 2] = ta ? K : M, la.dim[r - 1] = ta ? M : K;
  lb.dim[r - 2] = tb ? N : K, lb.dim[r - 1] = tb ? K : N;
  lp.dim[r - 2] = M, lp.dim[r - 1] = N;
  int pa[TFG_MAX_RANK], pb[TFG_MAX_RANK], pc[TFG_MAX_RANK];
  matrix_perm(&s, r, pa);
  matrix_perm(&s, r, pb);
  for (int i = 0; i < r; i++) pc[i] = i; /* the product: batch axes and rows moved, its last axis kept */
  for (int i = r - 2; i > 0; i--) {
    int j = (int)(lcg(&s) % (uint64_t)(i + 1));
    int t = pc[i];
    pc[i] = pc[j];
    pc[j] = t;
  }
  /* stored shapes: stored axis perm[i] has logical axis i's length; the
   * product is stored as transpose(product, pc): stored axis i = product axis pc[i] */
  tfg_shape sa = {.rank = r}, sb = {.rank = r}, sc = {.rank = r};
  for (int i = 0; i < r; i++) {
    sa.dim[pa[i]] = la.dim[i];
    sb.dim[pb[i]] = lb.dim[i];
    sc.dim[i] = lp.dim[pc[i]];
  }
  tfg_tensor in[2] = {tnew(dt, sa), tnew(dt, sb)}, out = tnew(dt, sc);
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < numel(&in[k]); i++) set(&in[k], i, (double)(int64_t)(lcg(&s) % 2001) / 1000.0 - 1.0);
  tfg_node nd = {.op = TFG_OP_MATMUL, .dtype = dt, .shape = sc, .ninputs = 2};
  nd.attrs.transpose_a = ta;
  nd.attrs.transpose_b = tb;
  nd.attrs.views = 1 | 2 | 1 << TFG_VIEW_OUT;
  for (int i = 0; i < r; i++) {
    nd.attrs.view_perm[0][i] = (int8_t)pa[i];
    nd.attrs.view_perm[1][i] = (int8_t)pb[i];
    nd.attrs.view_perm[TFG_VIEW_OUT][i] = (int8_t)pc[i];
  }
  tfg_kernel_ctx ctx = {.pool = test_pool};
  ck_assert_int_eq(tfg_cpu_matmul(&ctx, &nd, in, &out), TFG_OK);
  /* the view the kernel reads is the one the helper describes */
  tfg_shape v;
  int64_t vst[TFG_MAX_RANK];
  tfg_matmul_view(&nd, 0, &sa, &v, vst);
  ck_assert(tfg_shape_eq(&v, &la));
  tfg_matmul_view(&nd, TFG_VIEW_OUT, &sc, &v, vst);
  ck_assert(tfg_shape_eq(&v, &lp));
  double u = dt == TFG_DTYPE_F32 ? 0x1p-24 : 0x1p-53;
  int64_t idx[TFG_MAX_RANK] = {0};
  for (int64_t e = 0; e < tfg_shape_numel(&lp); e++) {
    int64_t rest = e;
    for (int i = r - 1; i >= 0; i--) {
      idx[i] = rest % lp.dim[i];
      rest /= lp.dim[i];
    }
    long double sum = 0, mag = 0;
    for (int64_t q = 0; q < K; q++) {
      int64_t ia[TFG_MAX_RANK], ib[TFG_MAX_RANK];
      for (int i = 0; i < r - 2; i++) {
        ia[i] = idx[i];
        ib[i] = bcast_b ? 0 : idx[i];
      }
      ia[r - 2] = ta ? q : idx[r - 2], ia[r - 1] = ta ? idx[r - 2] : q;
      ib[r - 2] = tb ? idx[r - 1] : q, ib[r - 1] = tb ? q : idx[r - 1];
      long double t = (long double)get(&in[0], at(&sa, pa, ia)) * get(&in[1], at(&sb, pb, ib));
      sum += t;
      mag += fabsl(t);
    }
    /* the product's element idx is stored at stored index s[i] = idx[pc[i]] */
    int64_t sidx[TFG_MAX_RANK];
    for (int i = 0; i < r; i++) sidx[i] = idx[pc[i]];
    double got = get(&out, at(&sc, NULL, sidx));
    double tol = 2.0 * (double)K * u * (double)mag + 1e-300;
    ck_assert_msg(fabs(got - (double)sum) <= tol, "case %d %s: element %lld is %.17g, want %.17Lg", _i,
                  tfg_dtype_name(dt), (long long)e, got, sum);
  }
  free_all(in, 2);
  free(out.data);
}
END_TEST

/* ---- the pass ---------------------------------------------------------------- */

/* Builds text into b and runs the three passes on its graph as the
 * driver does; returns the marks (the caller frees them) and the layout
 * pass's count. */
static uint8_t *passes(built *b, const char *text, int *count) {
  program_build(b, text, &(build_opts){0});
  ck_assert_msg(b->st == TFG_OK, "%s", b->errs);
  tfg_graph *g = b->p->graph;
  uint8_t *roots = program_printed_roots(b->p), *mark = calloc((size_t)g->nnodes + 1, 1);
  tfg_fold_constants(g, roots, mark);
  tfg_simplify(g, roots, mark);
  *count = tfg_fold_transposes(g, roots, mark);
  free(roots);
  return mark;
}

/* The matmul node printed k-th (through an add of 0, which keeps the
 * print from rooting the matmul itself). */
static const tfg_node *printed_matmul(built *b, int k) {
  const tfg_node *p = &b->p->graph->nodes[program_printed(b->p, k)];
  const tfg_node *m = p->op == TFG_OP_MATMUL ? p : &b->p->graph->nodes[p->inputs[0]];
  ck_assert_int_eq(m->op, TFG_OP_MATMUL);
  return m;
}

static const char RULES[] =
    "x = normal([2, 5, 3, 4], seed = 1)\n"  /* [B, T, H, hd] */
    "w = normal([4, 6], seed = 2)\n"
    "y = normal([2, 4, 5], seed = 3)\n"     /* [B, K, M]: read as [B, M, K], column-major */
    "v = normal([2, 4, 6], seed = 4)\n"
    "z = normal([3, 2, 4], seed = 5)\n"     /* [A, B, C] read as [C, A, B]: no unit stride in the matrix */
    "u = normal([4, 2, 6], seed = 6)\n"
    "q = normal([2, 3, 5, 4], seed = 7)\n"
    "k = normal([2, 3, 4, 6], seed = 8)\n"
    "print matmul(transpose(x, perm = [0, 2, 1, 3]), w) + 0.0\n"             /* 0: folds */
    "print matmul(transpose(y, perm = [0, 2, 1]), v) + 0.0\n"                /* 1: folds, column-major */
    "print matmul(transpose(z, perm = [2, 0, 1]), u) + 0.0\n"                /* 2: stays */
    "print transpose(matmul(q, k), perm = [0, 2, 1, 3])\n"                   /* 3: the product's rows moved */
    "print transpose(matmul(q, k) * 1.0, perm = [0, 1, 3, 2])\n";            /* 4: last axis moved: stays */

START_TEST(pass_rules) {
  built b;
  int count = 0;
  uint8_t *mark = passes(&b, RULES, &count);
  const tfg_graph *g = b.p->graph;
  const tfg_node *m0 = printed_matmul(&b, 0), *m1 = printed_matmul(&b, 1), *m2 = printed_matmul(&b, 2);
  ck_assert_uint_eq(m0->attrs.views, 1);
  ck_assert_int_eq(g->nodes[m0->inputs[0]].op, TFG_OP_INIT); /* reads x itself */
  ck_assert_uint_eq(m1->attrs.views, 1);
  ck_assert_uint_eq(m2->attrs.views, 0);
  ck_assert_int_eq(g->nodes[m2->inputs[0]].op, TFG_OP_TRANSPOSE);
  /* print 3 is a root: its transpose keeps running, its matmul stays plain */
  tfg_node_id t3 = program_printed(b.p, 3);
  ck_assert_int_eq(g->nodes[t3].op, TFG_OP_TRANSPOSE);
  ck_assert_int_eq(mark[t3], TFG_FOLD_KEPT);
  /* print 4: the product's last axis would move: the transpose stays */
  tfg_node_id t4 = program_printed(b.p, 4);
  ck_assert_int_eq(mark[t4], TFG_FOLD_KEPT);
  int folded = 0;
  for (tfg_node_id i = 0; i < g->nnodes; i++) folded += mark[i] == TFG_FOLD_LAYOUT;
  ck_assert_int_eq(folded, 2);
  ck_assert_int_eq(count, 2);
  free(mark);
  program_free(&b);
}
END_TEST

/* An output transpose that is no root takes its matmul in: the matmul
 * gets its shape and its readers. */
START_TEST(pass_output_folds) {
  built b;
  int count = 0;
  uint8_t *mark = passes(&b,
                         "q = normal([2, 3, 5, 4], seed = 7)\n"
                         "k = normal([2, 3, 4, 6], seed = 8)\n"
                         "o = transpose(matmul(q, k), perm = [0, 2, 1, 3])\n"
                         "print reshape(o, [2, 5, 18]) + 0.0\n",
                         &count);
  const tfg_graph *g = b.p->graph;
  const tfg_node *add = &g->nodes[program_printed(b.p, 0)];
  const tfg_node *rs = &g->nodes[add->inputs[0]];
  ck_assert_int_eq(rs->op, TFG_OP_RESHAPE);
  const tfg_node *m = &g->nodes[rs->inputs[0]];
  ck_assert_int_eq(m->op, TFG_OP_MATMUL);
  ck_assert_uint_eq(m->attrs.views, 1u << TFG_VIEW_OUT);
  ck_assert(tfg_shape_eq(&m->shape, &(tfg_shape){4, {2, 5, 3, 6}}));
  ck_assert_int_eq(count, 1);
  free(mark);
  program_free(&b);
}
END_TEST

/* A transpose pinned elsewhere than its matmul stays; one that another
 * op reads folds into the matmul and keeps running for the other. */
START_TEST(pass_pins_and_other_readers) {
  built b;
  int count = 0;
  uint8_t *mark = passes(&b,
                         "x = normal([2, 5, 3, 4], seed = 1)\n"
                         "w = normal([4, 6], seed = 2)\n"
                         "@gpu:1 t = transpose(x, perm = [0, 2, 1, 3])\n"
                         "@gpu:0 m = matmul(t, w)\n"
                         "s = relu(transpose(x, perm = [0, 2, 1, 3]))\n"
                         "print m + 0.0, matmul(transpose(x, perm = [0, 2, 1, 3]), w) + 0.0, s + 0.0\n",
                         &count);
  const tfg_graph *g = b.p->graph;
  const tfg_node *m = printed_matmul(&b, 0), *m2 = printed_matmul(&b, 1);
  ck_assert_uint_eq(m->attrs.views, 0); /* pinned apart */
  ck_assert_uint_eq(m2->attrs.views, 1);
  /* the unpinned transpose (simplify made the two one) still runs for relu */
  int kept = 0;
  for (tfg_node_id i = 0; i < g->nnodes; i++)
    kept += g->nodes[i].op == TFG_OP_TRANSPOSE && !tfg_fold_removed(mark[i]);
  ck_assert_int_eq(kept, 2);
  ck_assert_int_eq(count, 0);
  free(mark);
  program_free(&b);
}
END_TEST

START_TEST(pass_same_bits) {
  trained on, off;
  program_train_fetch(RULES, NULL, 5, &on);
  program_train_fetch(RULES, &(tfg_switches){.no_opt = true}, 5, &off);
  ck_assert_int_eq(on.nstrided, 2);
  ck_assert_int_eq(off.nstrided, 0);
  trained_expect_same(&on, &off);
}
END_TEST

/* Two heads of causal self-attention over [B, T, d], trained with AdamW:
 * the heads' split (3 transposes) and merge (1), and their gradients (4),
 * all fold; the trained weights and loss are the same bits. */
static const char ATTENTION[] =
    "import nn\n"
    "x = normal([2, 6, 8], seed = 1)\n"
    "param wq: f32[8, 8] = glorot(seed = 2)\n"
    "param wk: f32[8, 8] = glorot(seed = 3)\n"
    "param wv: f32[8, 8] = glorot(seed = 4)\n"
    "q = nn.split_heads(matmul(x, wq), 2)\n"
    "k = nn.split_heads(matmul(x, wk), 2)\n"
    "v = nn.split_heads(matmul(x, wv), 2)\n"
    "a = softmax(matmul(q, k, transpose_b = true) * 0.5, axis = -1)\n"
    "o = reshape(transpose(matmul(a, v), perm = [0, 2, 1, 3]), [2, 6, 8])\n"
    "loss = mean(o * o)\n"
    "train loss { optimizer = adamw(lr = 0.01, weight_decay = 0.01); steps = 3 }\n"
    "print loss, wq, wk, wv\n";

/* Trains text (4 printed tensors) with the layout pass and without it
 * (TFG_LAYOUT=0; the other passes on both times: they change the weight
 * gradients' sums), expecting nstrided transposes folded and the same
 * bits. */
static void layout_same_bits(const char *text, int nstrided) {
  trained on, off;
  program_train_fetch(text, NULL, 4, &on);
  program_train_fetch(text, &(tfg_switches){.no_layout = true}, 4, &off);
  ck_assert_int_eq(on.nstrided, nstrided);
  ck_assert_int_eq(off.nstrided, 0);
  trained_expect_same(&on, &off);
}

START_TEST(attention_trains_same_bits) { layout_same_bits(ATTENTION, 8); }
END_TEST

/* The same heads through the attention builtin: its q, k, v and output
 * read through the heads' transposes (rows at a stride), and the
 * gradient's matmuls through theirs; all 8 fold, the same bits. */
static const char ATTENTION_BUILTIN[] =
    "import nn\n"
    "x = normal([2, 6, 8], seed = 1)\n"
    "param wq: f32[8, 8] = glorot(seed = 2)\n"
    "param wk: f32[8, 8] = glorot(seed = 3)\n"
    "param wv: f32[8, 8] = glorot(seed = 4)\n"
    "q = nn.split_heads(matmul(x, wq), 2)\n"
    "k = nn.split_heads(matmul(x, wk), 2)\n"
    "v = nn.split_heads(matmul(x, wv), 2)\n"
    "o = reshape(transpose(attention(q, k, v, causal = true), perm = [0, 2, 1, 3]), [2, 6, 8])\n"
    "loss = mean(o * o)\n"
    "train loss { optimizer = adamw(lr = 0.01, weight_decay = 0.01); steps = 3 }\n"
    "print loss, wq, wk, wv\n";

START_TEST(attention_builtin_same_bits) { layout_same_bits(ATTENTION_BUILTIN, 8); }
END_TEST

Suite *suite_layout(void) {
  Suite *s = suite_create("layout");
  TCase *tc = tcase_create("layout");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, test_pool_make, test_pool_free);
  tcase_add_loop_test(tc, kernel_views_match_reference, 0, 64);
  tcase_add_test(tc, pass_rules);
  tcase_add_test(tc, pass_output_folds);
  tcase_add_test(tc, pass_pins_and_other_readers);
  tcase_add_test(tc, pass_same_bits);
  tcase_add_test(tc, attention_trains_same_bits);
  tcase_add_test(tc, attention_builtin_same_bits);
  suite_add_tcase(s, tc);
  return s;
}
