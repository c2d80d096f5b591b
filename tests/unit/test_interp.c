/* tests/unit/test_interp.c: the build-time interpreter: names and scopes,
 * param paths, imports, loops, --set, build-time arithmetic, shapes and
 * rollback after an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lang/interp.h"
#include "lang/parse.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* Builds text as the file `name` (so imports resolve beside it), with
 * sets; the evaluation may fail (b->st, b->errs). */
static void build_named(built *b, const char *name, const char *text, const tfg_set *sets, int nsets) {
  program_build(b, text, &(build_opts){.name = name, .sets = sets, .nsets = nsets});
}

static void build(built *b, const char *text) { build_named(b, "t.tfg", text, NULL, 0); }

/* The params' names, comma separated. */
static char *param_names(const built *b) {
  const tfg_program *p = tfg_interp_program(b->I);
  tfg_strbuf s = {0};
  for (int i = 0; i < p->nparams; i++)
    tfg_strbuf_printf(&s, "%s%s", i ? "," : "", p->graph->nodes[p->params[i]].name);
  return tfg_strbuf_take(&s);
}

#define DENSE "fn dense(x, units) {\n param w: f32[dim(x, -1), units] = glorot()\n param b: f32[units]\n return matmul(x, w) + b\n}\nx = zeros([2, 3])\n"

#define EXPECT_PARAMS(text, want)                                   \
  do {                                                              \
    built b_;                                                       \
    build(&b_, text);                                               \
    ck_assert_msg(b_.st == TFG_OK, "%s", b_.errs);                  \
    char *got_ = param_names(&b_);                                  \
    ck_assert_str_eq(got_, want);                                   \
    free(got_);                                                     \
    program_free(&b_);                                              \
  } while (0)

START_TEST(param_paths_follow_bindings) {
  EXPECT_PARAMS(DENSE "h = dense(x, 4)\nh = dense(h, 2)", "h.w,h.b,h_1.w,h_1.b");
  EXPECT_PARAMS(DENSE "let a = dense(x, 4)\nb = dense(a, 2)", "a.w,a.b,b.w,b.b");
  /* Not bound directly: the fn's name. */
  EXPECT_PARAMS(DENSE "y = relu(dense(x, 3))\nz = relu(dense(y, 3))", "dense.w,dense.b,dense_1.w,dense_1.b");
  EXPECT_PARAMS("param w: f32[2]\nparam w: f32[3]\nparam w: f32[4]", "w,w_1,w_2");
}
END_TEST

START_TEST(param_paths_nest_through_calls) {
  EXPECT_PARAMS(DENSE "fn mlp(x) {\n h = dense(x, 4)\n h = dense(h, 3)\n return dense(h, 2)\n}\nout = mlp(x)\nout2 = mlp(x)",
                "out.h.w,out.h.b,out.h_1.w,out.h_1.b,out.dense.w,out.dense.b,"
                "out2.h.w,out2.h.b,out2.h_1.w,out2.h_1.b,out2.dense.w,out2.dense.b");
  /* Called twice with the same binding name: the second call gets _1. */
  EXPECT_PARAMS(DENSE "fn mlp(x) { h = dense(x, 4); return h }\nout = mlp(x)\nout = mlp(x)",
                "out.h.w,out.h.b,out_1.h.w,out_1.h.b");
}
END_TEST

START_TEST(param_paths_scopes_and_loops) {
  EXPECT_PARAMS(DENSE "scope enc { h = dense(x, 3) }\nscope enc { h = dense(x, 3) }", "enc.h.w,enc.h.b,enc_1.h.w,enc_1.h.b");
  EXPECT_PARAMS(DENSE "h = x\nfor i in 0..3 { h = dense(h, 4) }", "h.w,h.b,h_1.w,h_1.b,h_2.w,h_2.b");
  EXPECT_PARAMS("scope a { scope b { param w: f32[1] } }\nparam w: f32[1]", "a.b.w,w");
}
END_TEST

START_TEST(lexical_scoping) {
  built b;
  /* A fn sees top-level bindings made before the call, not the caller's locals. */
  build(&b, "let k = 2\nfn f() { return k * 10 }\nlet r = f()\nfn g() { let inner = 1; return inner }\nlet s = g()\nprint r, s");
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_program *p = tfg_interp_program(b.I);
  ck_assert_int_eq(p->nactions, 1);
  ck_assert_str_eq(p->actions[0].items[0].value, "20");
  ck_assert_str_eq(p->actions[0].items[1].value, "1");
  program_free(&b);
  build(&b, "fn g() { let inner = 1; return inner }\nlet s = g()\nprint inner");
  ck_assert_int_eq(b.st, TFG_ERR_NAME);
  ck_assert_ptr_nonnull(strstr(b.errs, "t.tfg:3:7: error: unknown name 'inner'"));
  program_free(&b);
  build(&b, "fn h() { return local }\nfn caller() { let local = 3; return h() }\nlet v = caller()");
  ck_assert_int_eq(b.st, TFG_ERR_NAME);
  ck_assert_ptr_nonnull(strstr(b.errs, "unknown name 'local'"));
  program_free(&b);
  /* Blocks do not open scopes. */
  build(&b, "if true { let a = 1 }\nfor i in 0..2 { let last = i }\nprint a, last, i");
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_action *a = &tfg_interp_program(b.I)->actions[0];
  ck_assert_str_eq(a->items[0].value, "1");
  ck_assert_str_eq(a->items[1].value, "1");
  ck_assert_str_eq(a->items[2].value, "1");
  program_free(&b);
}
END_TEST

/* The printed value of one build-time expression. */
static void expect_value(const char *expr, const char *want) {
  char text[512];
  snprintf(text, sizeof text, "print %s", expr);
  built b;
  build(&b, text);
  ck_assert_msg(b.st == TFG_OK, "%s: %s", expr, b.errs);
  ck_assert_msg(strcmp(tfg_interp_program(b.I)->actions[0].items[0].value, want) == 0, "%s = %s, want %s", expr,
                tfg_interp_program(b.I)->actions[0].items[0].value, want);
  program_free(&b);
}

START_TEST(build_time_arithmetic) {
  expect_value("1 + 2 * 3", "7");
  expect_value("7 / 2", "3.5");         /* true division */
  expect_value("8 / 2", "4.0");
  expect_value("-7 % 3", "2");          /* the sign of the divisor, as Python */
  expect_value("7 % -3", "-2");
  expect_value("7.5 % 2", "1.5");
  expect_value("2 < 3 && 3 <= 3", "true");
  expect_value("!(1 == 1.0)", "false");
  expect_value("\"ab\" + \"cd\"", "\"abcd\"");
  expect_value("[1, 2] + [3]", "[1, 2, 3]");
  expect_value("[10, 20, 30][-1]", "30");
  expect_value("len([1, 2, 3])", "3");
  expect_value("len(0..5)", "5");
  expect_value("gpu:(1 + 1)", "gpu:2");
  expect_value("f32 == f32", "true");
  expect_value("1e-3", "0.001");
  expect_value("false || true && false", "false");
}
END_TEST

/* Each case, a program and a fragment of its messages, fails to build. */
static void expect_errors(const char *const (*cases)[2], size_t n) {
  for (size_t i = 0; i < n; i++) {
    built b;
    build(&b, cases[i][0]);
    ck_assert_msg(b.st != TFG_OK, "%s built", cases[i][0]);
    ck_assert_msg(strstr(b.errs, cases[i][1]) != NULL, "%s:\n%s", cases[i][0], b.errs);
    program_free(&b);
  }
}

START_TEST(build_time_errors) {
  static const char *const cases[][2] = {
      {"print 9223372036854775807 + 1", "integer overflow"},
      {"print 1 / 0", "division by zero"},
      {"print [1][3]", "index 3 is out of range for a list of 1"},
      {"print 1 + \"a\"", "'+' needs numbers or tensors, got an integer and a string"},
      {"let lenght = 3\nprint length", "did you mean 'lenght'?"},
      {"print zeros([2]) > 0", "'>' is build-time only"},
      {"if zeros([1]) { }", "a condition is decided while the graph is built"},
      {"fn f(a) { return a }\nprint f(1, 2)", "f takes 1 argument, got 2"},
      {"print matmul(zeros([2, 3]), zeros([2, 3]), transpose_c = true)", "did you mean 'transpose_a'?"},
      {"print softmax()", "softmax: missing argument 'x'"},
      {"return 1", "return outside a fn"},
      {"fn f() { return f() }\nprint f()", "nested more than 200 deep"},
      {"param w: f32[2.5]", "a dimension must be an integer, got 2.5"},
  };
  expect_errors(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* Arithmetic with no value is its own status, not a name error: callers
 * (the REPL, a driver) can tell "1 / 0" from a misspelt name. */
START_TEST(build_time_arithmetic_status) {
  static const char *const cases[][2] = {
      {"print 1 / 0", "division by zero"},
      {"print 7 % 0", "modulo by zero"},
      {"print 1.5 / 0.0", "division by zero"},
      {"print 2.5 % 0.0", "modulo by zero"},
      {"print 9223372036854775807 + 1", "integer overflow in 9223372036854775807 + 1"},
      {"print -(-9223372036854775807 - 1)", "integer overflow"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    built b;
    build(&b, cases[i][0]);
    ck_assert_msg(b.st == TFG_ERR_ARITH, "%s: status %d", cases[i][0], (int)b.st);
    ck_assert_msg(strstr(b.errs, cases[i][1]) != NULL, "%s:\n%s", cases[i][0], b.errs);
    program_free(&b);
  }
}
END_TEST

START_TEST(shapes_and_devices) {
  built b;
  build(&b, "a = zeros([4, 1, 3])\nb = ones([5, 1])\nc = a + b\n@gpu:1 d = matmul(zeros([7, 2, 3]), zeros([3, 6]))\n"
            "with gpu:* { e = relu(d) }\nf = sum(c, axis = [0, -1], keepdims = true)");
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_graph *g = tfg_interp_program(b.I)->graph;
  const tfg_node *c = NULL, *d = NULL, *e = NULL, *f = NULL;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const tfg_node *n = &g->nodes[i];
    if (n->op == TFG_OP_ADD) c = n;
    if (n->op == TFG_OP_MATMUL) d = n;
    if (n->op == TFG_OP_RELU) e = n;
    if (n->op == TFG_OP_SUM) f = n;
  }
  ck_assert(c && d && e && f);
  tfg_shape cs = {3, {4, 5, 3}}, ds = {3, {7, 2, 6}}, fs = {3, {1, 5, 1}};
  ck_assert(tfg_shape_eq(&c->shape, &cs));
  ck_assert(tfg_shape_eq(&d->shape, &ds));
  ck_assert(tfg_shape_eq(&f->shape, &fs));
  ck_assert_uint_eq(f->attrs.axes, 5u); /* axes 0 and 2 */
  ck_assert_int_eq(c->pin.kind, TFG_DEV_NONE);
  ck_assert_int_eq(d->pin.kind, TFG_DEV_GPU);
  ck_assert_int_eq(d->pin.index, 1);
  ck_assert_int_eq(e->pin.kind, TFG_DEV_GPU_ANY);
  program_free(&b);
}
END_TEST

START_TEST(set_overrides_top_level_let) {
  tfg_set sets[] = {{"batch", "32"}, {"name", "\"run\" + \"1\""}};
  built b;
  build_named(&b, "t.tfg", "let batch = 128\nlet name = \"x\"\nfn f() { let batch = 1; return batch }\nprint batch, name, f()", sets, 2);
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_action *a = &tfg_interp_program(b.I)->actions[0];
  ck_assert_str_eq(a->items[0].value, "32");
  ck_assert_str_eq(a->items[1].value, "\"run1\"");
  ck_assert_str_eq(a->items[2].value, "1"); /* only top-level lets */
  program_free(&b);
  tfg_set unused[] = {{"hidden", "3"}};
  build_named(&b, "t.tfg", "let batch = 1", unused, 1);
  ck_assert_int_eq(b.st, TFG_ERR_USAGE);
  ck_assert_ptr_nonnull(strstr(b.errs, "--set hidden: the program has no top-level `let hidden`"));
  program_free(&b);
  tfg_set bad[] = {{"batch", "1 +"}};
  build_named(&b, "t.tfg", "let batch = 1", bad, 1);
  ck_assert_int_eq(b.st, TFG_ERR_SYNTAX);
  ck_assert_ptr_nonnull(strstr(b.errs, "--set batch:1:4: error: expected an expression"));
  program_free(&b);
}
END_TEST

START_TEST(imports) {
  char dir[] = "/tmp/tfg-import-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256], lib[256];
  snprintf(lib, sizeof lib, "%s/lib", dir);
  ck_assert_int_eq(mkdir(lib, 0700), 0);
  snprintf(path, sizeof path, "%s/lib/blocks.tfg", dir);
  FILE *f = fopen(path, "w");
  fputs("let width = 7\nfn block(x) {\n param w: f32[dim(x, -1), width] = ones()\n return matmul(x, w)\n}\n", f);
  fclose(f);
  snprintf(path, sizeof path, "%s/main.tfg", dir);
  built b;
  build_named(&b, path,
              "import \"lib/blocks.tfg\" as blk\nimport \"lib/blocks.tfg\"\nimport nn\n"
              "x = zeros([2, 3])\nh = blk.block(x)\ny = nn.dense(h, 4)\nprint blk.width, blocks.width",
              NULL, 0);
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  char *names = param_names(&b);
  ck_assert_str_eq(names, "h.w,y.w,y.b");
  free(names);
  const tfg_action *a = &tfg_interp_program(b.I)->actions[0];
  ck_assert_str_eq(a->items[0].value, "7");
  ck_assert_str_eq(a->items[1].value, "7");
  program_free(&b);
  build_named(&b, path, "import nn\nprint nn.dence", NULL, 0);
  ck_assert_ptr_nonnull(strstr(b.errs, "module nn has no member 'dence'"));
  ck_assert_ptr_nonnull(strstr(b.errs, "did you mean 'dense'?"));
  program_free(&b);
  build_named(&b, path, "import nosuchmodule", NULL, 0);
  ck_assert_int_eq(b.st, TFG_ERR_NAME);
  ck_assert_ptr_nonnull(strstr(b.errs, "no module named 'nosuchmodule'"));
  program_free(&b);
  snprintf(path, sizeof path, "%s/lib/blocks.tfg", dir);
  unlink(path);
  rmdir(lib);
  snprintf(path, sizeof path, "%s/main.tfg", dir);
  rmdir(dir);
}
END_TEST

START_TEST(failed_statement_rolls_back) {
  built b;
  build(&b, "param w: f32[2]\nx = zeros([2])\nfn bad() { param v: f32[3]; y = matmul(x, x); return y }\nz = bad()\nparam after: f32[1]");
  ck_assert_int_eq(b.st, TFG_ERR_SHAPE);
  const tfg_program *p = tfg_interp_program(b.I);
  /* The failing statement's param and nodes are gone; nothing after it ran. */
  ck_assert_int_eq(p->nparams, 1);
  ck_assert_int_eq(p->graph->nnodes, 2);
  ck_assert_ptr_nonnull(strstr(b.errs, "matmul: f32[2] x f32[2]: both operands need at least 2 dimensions"));
  program_free(&b);
}
END_TEST

START_TEST(train_action_checked) {
  built b;
  build(&b, "param w: f32[2, 2] = glorot()\nx = ones([3, 2])\nloss = mean(matmul(x, w))\n"
            "train loss { optimizer = adam(lr = 0.01); steps = 10 }");
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_action *a = &tfg_interp_program(b.I)->actions[0];
  ck_assert_int_eq(a->kind, TFG_ACTION_TRAIN);
  ck_assert_int_eq(a->config.optimizer.kind, TFG_OPTIMIZER_ADAM);
  ck_assert(a->config.optimizer.lr == 0.01);
  ck_assert_int_eq(a->config.steps, 10);
  program_free(&b);
  build(&b, "x = ones([3, 2])\ntrain mean(x) { steps = 1 }");
  ck_assert_ptr_nonnull(strstr(b.errs, "the loss does not depend on any param"));
  program_free(&b);
  build(&b, "param w: f32[2]\ntrain w { stepz = 1 }");
  ck_assert_ptr_nonnull(strstr(b.errs, "the loss must be a float scalar, got f32[2]"));
  program_free(&b);
  build(&b, "param w: f32[]\ntrain w { stepz = 1 }");
  ck_assert_ptr_nonnull(strstr(b.errs, "unknown train setting 'stepz'"));
  ck_assert_ptr_nonnull(strstr(b.errs, "did you mean 'steps'?"));
  program_free(&b);
}
END_TEST

/* ---- the REPL's session: one statement at a time, marks and rollback ---- */

/* A session as the REPL keeps one: inputs are sources named <stdin>
 * evaluated into one interpreter, statement by statement. */
typedef struct session {
  tfg_diag *d;
  tfg_arena a;
  tfg_interp_opts io;
  tfg_interp *I;
} session;

static void session_open(session *s) {
  s->d = tfg_diag_new();
  tfg_arena_init(&s->a);
  s->io = (tfg_interp_opts){.stdlib_dir = "stdlib"};
  s->I = tfg_interp_new(s->d, &s->io);
}

static void session_close(session *s) {
  tfg_interp_free(s->I);
  tfg_arena_free(&s->a);
  tfg_diag_free(s->d);
}

/* Evaluates text statement by statement, as the REPL does an input: on
 * the first failure rolls back to where the input began and returns the
 * status. *last gets the last statement's value. */
static tfg_status session_input(session *s, const char *text, tfg_value *last) {
  const tfg_source *src = tfg_diag_add_source(s->d, "<stdin>", text, strlen(text));
  tfg_ast *prog = NULL;
  ck_assert_int_eq(tfg_parse(src, s->d, &s->a, &prog, NULL), TFG_OK);
  tfg_interp_mark m = tfg_interp_mark_now(s->I);
  tfg_value v = {.kind = TFG_V_NONE};
  for (const tfg_ast *st = prog->list.head; st; st = st->next) {
    tfg_status r = tfg_interp_eval_stmt(s->I, src, st, &v);
    if (r != TFG_OK) {
      tfg_interp_rollback(s->I, &m);
      return r;
    }
  }
  if (last) *last = v;
  return TFG_OK;
}

static void collect_name(void *ctx, const char *name, const tfg_value *v) {
  (void)v;
  tfg_strbuf *b = ctx;
  tfg_strbuf_printf(b, ",%s,", name);
}

/* ",a,,b,..." : every top-level name (or a module's), for strstr. */
static char *names_of(session *s, const char *module) {
  tfg_strbuf b = {0};
  tfg_strbuf_puts(&b, "");
  tfg_interp_names(s->I, module, collect_name, &b);
  return tfg_strbuf_take(&b);
}

static bool marks_equal(const tfg_interp_mark *a, const tfg_interp_mark *b) {
  return a->nodes == b->nodes && a->params == b->params && a->feeds == b->feeds && a->actions == b->actions &&
         a->taken == b->taken && a->binds == b->binds && a->modules == b->modules && a->datasets == b->datasets;
}

START_TEST(rejected_input_leaves_session_as_it_was) {
  char dir[] = "/tmp/tfg-repl-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char lib[256], csv[256];
  snprintf(lib, sizeof lib, "%s/lib.tfg", dir);
  FILE *f = fopen(lib, "w");
  fputs("param scale: f32[2] = ones()\nfn twice(x) { return x * scale * 2 }\n", f);
  fclose(f);
  snprintf(csv, sizeof csv, "%s/d.csv", dir);
  f = fopen(csv, "w");
  fputs("1,2,0\n3,4,1\n5,6,0\n7,8,1\n", f);
  fclose(f);

  session s;
  session_open(&s);
  ck_assert_int_eq(session_input(&s, "param w: f32[2] = ones()\nx = zeros([2])", NULL), TFG_OK);
  tfg_interp_mark before = tfg_interp_mark_now(s.I);
  char *names_before = names_of(&s, NULL);
  const tfg_program *p = tfg_interp_program(s.I);
  ck_assert_int_eq(p->nparams, 1);

  /* Every kind of effect, then an error in the last statement. */
  char text[1024];
  snprintf(text, sizeof text,
           "import \"%s\" as L\nparam v: f32[3]\ndata ds = csv(\"%s\", label = -1)\n"
           "input z: f32[2, 2] from ds.x\nprint w\nh = L.twice(x)\ntrain mean(w * 2) { optimizer = sgd(lr = 1); steps = 1 }\n"
           "for i in 0..3 { x = x + 1 }\noops = nope",
           lib, csv);
  ck_assert_int_eq(session_input(&s, text, NULL), TFG_ERR_NAME);
  tfg_interp_mark after = tfg_interp_mark_now(s.I);
  ck_assert(marks_equal(&before, &after));
  char *names_after = names_of(&s, NULL);
  ck_assert_str_eq(names_after, names_before); /* x is the old x again; no v, L, ds, z, h, i */
  ck_assert_int_eq(p->nparams, 1);
  ck_assert_int_eq(p->nfeeds, 0);
  ck_assert_int_eq(p->nactions, 0);

  /* The names it took are free again, and the module is evaluated anew
   * (its param exists once, named as on a first import). */
  snprintf(text, sizeof text, "param v: f32[3]\nimport \"%s\" as L\nh = L.twice(x)", lib);
  ck_assert_int_eq(session_input(&s, text, NULL), TFG_OK);
  ck_assert_int_eq(p->nparams, 3);
  ck_assert_str_eq(p->graph->nodes[p->params[1]].name, "v");
  ck_assert_str_eq(p->graph->nodes[p->params[2]].name, "scale");
  char *members = names_of(&s, "L");
  ck_assert_ptr_nonnull(strstr(members, ",twice,"));
  ck_assert_ptr_nonnull(strstr(members, ",scale,"));
  free(members);

  free(names_before);
  free(names_after);
  session_close(&s);
  unlink(lib);
  unlink(csv);
  rmdir(dir);
}
END_TEST

START_TEST(statement_values_and_marks) {
  session s;
  session_open(&s);
  tfg_value v;
  ck_assert_int_eq(session_input(&s, "x = ones([2, 3])", &v), TFG_OK);
  ck_assert_int_eq(v.kind, TFG_V_NONE); /* a statement has no value */
  ck_assert_int_eq(session_input(&s, "1 + 2", &v), TFG_OK);
  ck_assert_int_eq(v.kind, TFG_V_INT);
  ck_assert_int_eq(v.u.i, 3);

  /* A bare expression is shown, then undone: its nodes and the params
   * its call made go, and the same call bound later names them afresh. */
  tfg_interp_mark m = tfg_interp_mark_now(s.I);
  ck_assert_int_eq(session_input(&s, "import nn\n", NULL), TFG_OK);
  tfg_interp_mark after_import = tfg_interp_mark_now(s.I);
  ck_assert_int_eq(session_input(&s, "relu(nn.dense(x, 4))", &v), TFG_OK);
  ck_assert_int_eq(v.kind, TFG_V_TENSOR);
  const tfg_program *p = tfg_interp_program(s.I);
  ck_assert_int_eq(p->graph->nodes[v.u.tensor].shape.dim[1], 4);
  ck_assert_int_gt(p->nparams, 0);
  tfg_interp_rollback(s.I, &after_import);
  ck_assert_int_eq(p->nparams, 0);
  ck_assert_int_eq(p->graph->nnodes, m.nodes);
  ck_assert_int_eq(session_input(&s, "h = nn.dense(x, 4)", NULL), TFG_OK);
  ck_assert_str_eq(p->graph->nodes[p->params[0]].name, "h.w");

  /* A failing expression: no value, its nodes gone, the error reported. */
  int32_t n = p->graph->nnodes;
  ck_assert_int_eq(session_input(&s, "relu(x) + matmul(x, x)", &v), TFG_ERR_SHAPE);
  ck_assert_int_eq(p->graph->nnodes, n);
  char *errs = test_render(s.d, false);
  ck_assert_ptr_nonnull(strstr(errs, "<stdin>:1:"));
  free(errs);

  /* Names for completion: the session's, builtins, dtypes, a module's. */
  char *all = names_of(&s, NULL);
  ck_assert_ptr_nonnull(strstr(all, ",x,"));
  ck_assert_ptr_nonnull(strstr(all, ",h,"));
  ck_assert_ptr_nonnull(strstr(all, ",nn,"));
  ck_assert_ptr_nonnull(strstr(all, ",relu,"));
  ck_assert_ptr_nonnull(strstr(all, ",f32,"));
  ck_assert_ptr_null(strstr(all, ",x,,x,")); /* each name once */
  free(all);
  char *nn = names_of(&s, "nn");
  ck_assert_ptr_nonnull(strstr(nn, ",dense,"));
  free(nn);
  char *none = names_of(&s, "x"); /* not a module */
  ck_assert_str_eq(none, "");
  free(none);
  session_close(&s);
}
END_TEST

/* ---- issue 13: empty tensors, build budgets, imports ---- */

/* Tensors with a zero dimension are refused where they are made; budgets
 * stop runaway loops and recursion with a located error; an error in a
 * default argument is reported with its call (and leaks nothing: run
 * under ASan). */
START_TEST(empty_tensors_and_budgets_refused) {
  static const char *const cases[][2] = {
      {"param w: f32[3, 0]", "a dimension must be at least 1, got 0"},
      {"let n = 0\ninput x: f32[n]", "a dimension must be at least 1, got 0"},
      {"print zeros([2, 0])", "zeros gives f32[2,0], an empty tensor"},
      {"print tensor([])", "tensor gives f32[0], an empty tensor"},
      {"print arange(5, 2)", "arange gives i32[0], an empty tensor"},
      {"print slice(ones([3]), 0, 2, 2)", "slice gives f32[0], an empty tensor"},
      {"for i in 0..20000000 { }", "this loop would run 20000000 iterations; one statement may run at most 10000000"},
      {"for i in -9223372036854775807..9223372036854775807 { }", "this loop would run 18446744073709551614 iterations"},
      {"fn f(x, act = four) { return x }\nlet y = f(1)", "unknown name 'four'"},
      {"fn f(x, act = four) { return x }\nlet y = f(1)", "t.tfg:2:9: note: in this call of f"},
  };
  expect_errors(cases, sizeof cases / sizeof cases[0]);
  /* A runaway recursion: each call site three times, then a count. */
  built b;
  build(&b, "fn f(n) { return f(n + 1) }\nlet y = f(1)");
  int notes = 0;
  for (const char *p = b.errs; (p = strstr(p, "note: in this call of f")); p++) notes++;
  ck_assert_msg(notes == 4, "%d notes:\n%s", notes, b.errs); /* three inside, one at the top */
  ck_assert_ptr_nonnull(strstr(b.errs, "note: ... 196 more calls of f from the same place\n"));
  program_free(&b);
}
END_TEST

/* Rebinding a name in a loop overwrites it (the scope does not grow per
 * iteration), yet a failed statement still undoes what it rebound. */
START_TEST(loop_rebinding_bounded_and_undone) {
  session s;
  session_open(&s);
  tfg_value v;
  ck_assert_int_eq(session_input(&s, "let a = 1", NULL), TFG_OK);
  int32_t binds = tfg_interp_mark_now(s.I).binds;
  ck_assert_int_eq(session_input(&s, "for i in 0..100000 {\n  a = i\n  let b = [i]\n}", NULL), TFG_OK);
  /* One new binding each for a (rebound by this statement), i and b. */
  ck_assert_int_eq(tfg_interp_mark_now(s.I).binds, binds + 3);
  ck_assert_int_eq(session_input(&s, "a", &v), TFG_OK);
  ck_assert_int_eq(v.u.i, 99999);
  ck_assert_int_eq(session_input(&s, "for i in 0..3 { a = i }\nnope", NULL), TFG_ERR_NAME);
  ck_assert_int_eq(session_input(&s, "a + i", &v), TFG_OK);
  ck_assert_int_eq(v.u.i, 99999 + 99999);
  /* Within one failing statement too. */
  ck_assert_int_eq(session_input(&s, "for i in 0..3 { a = i; c = a }\n", NULL), TFG_OK);
  ck_assert_int_eq(session_input(&s, "for j in 0..3 { a = j + 10 }\nprint nope", NULL), TFG_ERR_NAME);
  ck_assert_int_eq(session_input(&s, "a * 100 + c", &v), TFG_OK);
  ck_assert_int_eq(v.u.i, 202);
  session_close(&s);
}
END_TEST

/* Import problems are located program errors (exit 1): a missing file, a
 * directory, a FIFO (at once, not blocking), a cycle named as a chain. */
START_TEST(import_errors_located) {
  char dir[] = "/tmp/tfg-imports-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256], a[256], bpath[256], fifo[256];
  snprintf(a, sizeof a, "%s/a.tfg", dir);
  snprintf(bpath, sizeof bpath, "%s/b.tfg", dir);
  snprintf(fifo, sizeof fifo, "%s/pipe.tfg", dir);
  snprintf(path, sizeof path, "%s/main.tfg", dir);
  FILE *f = fopen(a, "w");
  fputs("import \"b.tfg\"\nlet x = 1\n", f);
  fclose(f);
  f = fopen(bpath, "w");
  fputs("import \"./a.tfg\" as a\nlet y = a.x\n", f);
  fclose(f);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  const struct { const char *text; tfg_status st; const char *msg; } cases[] = {
      {"import \"nope.tfg\"", TFG_ERR_DATA, "main.tfg:1:1: error: cannot find 'nope.tfg'"},
      {"import \".\"", TFG_ERR_DATA, "/.': Is a directory"},
      {"import \"pipe.tfg\"", TFG_ERR_DATA, "/pipe.tfg': it is a FIFO (named pipe), not a regular file"},
      {"import \"a.tfg\"", TFG_ERR_NAME, "b.tfg:1:1: error: import cycle: a -> b -> a"},
      {"import \"main.tfg\"", TFG_ERR_NAME, "error: import cycle: main -> main"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    f = fopen(path, "w");
    fputs(cases[i].text, f);
    fclose(f);
    built b;
    build_named(&b, path, cases[i].text, NULL, 0);
    ck_assert_msg(b.st == cases[i].st, "%s: status %d\n%s", cases[i].text, b.st, b.errs);
    ck_assert_msg(strstr(b.errs, cases[i].msg) != NULL, "%s:\n%s", cases[i].text, b.errs);
    program_free(&b);
  }
  unlink(a);
  unlink(bpath);
  unlink(fifo);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* A train block's settings are checked where written and decoded once
 * into the typed config the later stages read (issues 13, 14): counts as
 * integers, the optimizer with its defaults resolved, a bare constructor
 * as its call. */
START_TEST(train_settings_decoded) {
  built b;
  build(&b, "param w: f32[2, 2] = glorot()\nx = ones([3, 2])\nloss = mean(matmul(x, w))\n"
            "train loss { optimizer = adam; steps = 3.0; strategy = single; seed = 2 }\n"
            "print w\ntrain loss { optimizer = sgd(lr = 1, momentum = 0); steps = 1 }");
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  const tfg_action *a = &tfg_interp_program(b.I)->actions[0];
  ck_assert_int_eq(a->config.steps, 3);
  ck_assert_int_eq(a->config.epochs, 0);
  ck_assert_int_eq(a->config.optimizer.kind, TFG_OPTIMIZER_ADAM);
  ck_assert(a->config.optimizer.lr == 0.001); /* the defaults, resolved */
  ck_assert(a->config.optimizer.b2 == 0.999);
  ck_assert(a->config.optimizer.weight_decay == 0);
  ck_assert_str_eq(a->config.strategy.name, "single");
  ck_assert_int_ne(a->config.strategy.loc.off, a->loc.off); /* the call single() stands for */
  ck_assert_int_eq(a->config.seed, 2);
  ck_assert_int_eq(a->config.log_every, 0); /* not given: the runtime's default */
  ck_assert_int_eq(tfg_train_config_log_every(&a->config, 3), 1);
  ck_assert_ptr_null(a->config.checkpoint);
  const tfg_optimizer_config *sgd = &tfg_interp_program(b.I)->actions[2].config.optimizer;
  ck_assert_int_eq(sgd->kind, TFG_OPTIMIZER_SGD);
  ck_assert(sgd->lr == 1.0);
  ck_assert(sgd->momentum == 0 && !sgd->nesterov);
  program_free(&b);

  /* Two jobs of one group sharing a param: the second is refused and
   * leaves no action; a parameter_server job runs alone. */
  const char *model = "param w: f32[2, 2] = glorot()\nparam v: f32[2, 2] = glorot()\nx = ones([3, 2])\n"
                      "loss = mean(matmul(x, w))\n";
  char text[512];
  snprintf(text, sizeof text, "%strain loss { optimizer = adam(); steps = 1 }\n"
                              "train loss + mean(v) { optimizer = adam(); steps = 1 }", model);
  build(&b, text);
  ck_assert_int_eq(b.st, TFG_ERR_NAME);
  ck_assert_ptr_nonnull(strstr(b.errs, "t.tfg:6:1: error: param 'w' would be trained by two jobs at once"));
  ck_assert_ptr_nonnull(strstr(b.errs, "t.tfg:5:1: note: the other job"));
  ck_assert_int_eq(tfg_interp_program(b.I)->nactions, 1);
  program_free(&b);
  snprintf(text, sizeof text, "%strain mean(matmul(x, v)) { optimizer = adam(); steps = 1 }\n"
                              "train loss { optimizer = adam(); steps = 1 }\n"
                              "train loss { optimizer = adam(); steps = 1; strategy = parameter_server(workers = [gpu:0]) }",
           model);
  build(&b, text);
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  program_free(&b);

  /* Counts past 2^53, steps or epochs times an epoch's batches. */
  build(&b, "param w: f32[2, 2] = glorot()\nx = ones([3, 2])\ntrain mean(matmul(x, w)) { optimizer = adam(); steps = 9007199254740993 }");
  ck_assert_int_eq(b.st, TFG_ERR_LIMIT);
  ck_assert_ptr_nonnull(strstr(b.errs, "steps must be at most 2^53 (9007199254740992), got 9007199254740993"));
  program_free(&b);
}
END_TEST

Suite *suite_interp(void) {
  Suite *s = suite_create("interp");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, param_paths_follow_bindings);
  tcase_add_test(tc, param_paths_nest_through_calls);
  tcase_add_test(tc, param_paths_scopes_and_loops);
  tcase_add_test(tc, lexical_scoping);
  tcase_add_test(tc, build_time_arithmetic);
  tcase_add_test(tc, build_time_errors);
  tcase_add_test(tc, build_time_arithmetic_status);
  tcase_add_test(tc, shapes_and_devices);
  tcase_add_test(tc, set_overrides_top_level_let);
  tcase_add_test(tc, imports);
  tcase_add_test(tc, failed_statement_rolls_back);
  tcase_add_test(tc, train_action_checked);
  tcase_add_test(tc, rejected_input_leaves_session_as_it_was);
  tcase_add_test(tc, statement_values_and_marks);
  tcase_add_test(tc, train_settings_decoded);
  tcase_add_test(tc, empty_tensors_and_budgets_refused);
  tcase_add_test(tc, loop_rebinding_bounded_and_undone);
  tcase_add_test(tc, import_errors_located);
  suite_add_tcase(s, tc);
  return s;
}
