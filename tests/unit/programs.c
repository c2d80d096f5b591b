/* tests/unit/programs.c: the helpers of tests/unit/programs.h. */
#include "tests/unit/programs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "lang/parse.h"
#include "runtime/session.h"
#include "runtime/train.h"
#include "tests/unit/unit.h"

/* A stage before the last one asked for must succeed. */
static void must_succeed(built *b, tfg_status st) {
  if (st != TFG_OK) ck_abort_msg("building the program failed: %s", test_render(b->d, false));
}

/* Gives the first o->steps train actions their steps, in program order. */
static tfg_status build_steps(built *b, const build_opts *o) {
  ck_assert_int_le(o->steps, BUILT_MAX_STEPS);
  tfg_status st = TFG_OK;
  for (int i = 0; i < b->p->nactions && b->nsteps < o->steps && st == TFG_OK; i++) {
    if (b->p->actions[i].kind != TFG_ACTION_TRAIN) continue;
    st = tfg_compile_train_step(b->p->graph, &b->p->actions[i], b->p, NULL, &o->sw, &b->steps[b->nsteps], b->d);
    if (st == TFG_OK) b->nsteps++;
  }
  return st;
}

tfg_status program_build(built *b, const char *text, const build_opts *o) {
  memset(b, 0, sizeof *b);
  b->io = (tfg_interp_opts){.sets = o->sets, .nsets = o->nsets, .stdlib_dir = "stdlib"};
  b->d = tfg_diag_new();
  tfg_arena_init(&b->a);
  const tfg_source *src = tfg_diag_add_source(b->d, o->name ? o->name : "t.tfg", text, strlen(text));
  tfg_ast *prog = NULL;
  ck_assert_int_eq(tfg_parse(src, b->d, &b->a, &prog, NULL), TFG_OK);
  b->I = tfg_interp_new(b->d, &b->io);
  tfg_status st = tfg_interp_eval(b->I, src, prog);
  if (st == TFG_OK) st = tfg_interp_finish(b->I);
  b->p = tfg_interp_program(b->I);
  b->n0 = b->p->graph->nnodes;
  for (int i = 0; i < b->p->nactions && !b->act; i++)
    if (b->p->actions[i].kind == TFG_ACTION_TRAIN) b->act = &b->p->actions[i];
  if (o->steps > 0 || o->devices) {
    must_succeed(b, st);
    st = build_steps(b, o);
  }
  if (o->devices) {
    must_succeed(b, st);
    must_succeed(b, tfg_devices_parse(b->d, o->devices, &b->ds));
    tfg_compiled c;
    st = tfg_compile_graph(b->p->graph, b->ds, b->steps, b->nsteps, &(tfg_compile_opts){.fit = o->fit, .sw = o->sw},
                           b->d, &c);
    if (c.failed == TFG_COMPILE_PLACE) must_succeed(b, st);
    b->pl = c.pl;
    b->plan = c.plan;
    c.pl = NULL;
    c.plan = NULL;
    tfg_compiled_free(&c);
  }
  b->st = st;
  b->errs = test_render(b->d, false);
  return st;
}

void program_free(built *b) {
  tfg_plan_free(b->plan);
  tfg_placement_free(b->pl);
  tfg_devices_free(b->ds);
  for (int i = 0; i < b->nsteps; i++) tfg_train_step_free(&b->steps[i]);
  tfg_interp_free(b->I);
  tfg_arena_free(&b->a);
  tfg_diag_free(b->d);
  free(b->errs);
}

char *plan_text(const tfg_plan *p) {
  tfg_strbuf out = {0};
  tfg_plan_print(p, &out);
  return tfg_strbuf_take(&out);
}

void plan_show(const tfg_plan *p) {
  if (!getenv("TFG_TEST_SHOW_PLAN")) return;
  char *text = plan_text(p);
  fprintf(stderr, "%s----\n", text);
  free(text);
}

void plan_expect_valid(const tfg_plan *p) {
  tfg_strbuf why = {0};
  if (!tfg_plan_validate(p, &why)) {
    char *text = plan_text(p);
    if (strlen(text) > 3000) text[0] = 0; /* Check's messages are short: the reason alone */
    ck_abort_msg("invalid plan: %s\n%s", why.data, text);
  }
  ck_assert_ptr_null(why.data);
  tfg_strbuf_free(&why);
}

void plan_expect_invalid(const tfg_plan *p, const char *want) {
  tfg_strbuf why = {0};
  ck_assert_msg(!tfg_plan_validate(p, &why), "a broken plan passed (want \"%s\")", want);
  ck_assert_msg(why.data && strstr(why.data, want), "validator said \"%s\", want \"%s\"", why.data ? why.data : "",
                want);
  tfg_strbuf_free(&why);
}

tfg_node_id graph_last_op(const tfg_graph *g, tfg_op_id op) {
  for (tfg_node_id i = g->nnodes - 1; i >= 0; i--)
    if (g->nodes[i].op == op) return i;
  ck_abort_msg("no %s node", tfg_op_get(op)->name);
  return -1;
}

tfg_node_id graph_first_op(const tfg_graph *g, tfg_op_id op) {
  for (tfg_node_id i = 0; i < g->nnodes; i++)
    if (g->nodes[i].op == op) return i;
  ck_abort_msg("no %s node", tfg_op_get(op)->name);
  return -1;
}

uint8_t *program_printed_roots(const tfg_program *p) {
  uint8_t *roots = calloc((size_t)p->graph->nnodes + 1, 1);
  ck_assert_ptr_nonnull(roots);
  for (int a = 0; a < p->nactions; a++)
    for (int i = 0; p->actions[a].kind == TFG_ACTION_PRINT && i < p->actions[a].nitems; i++)
      if (p->actions[a].items[i].is_tensor) roots[p->actions[a].items[i].node] = 1;
  return roots;
}

tfg_node_id program_printed(const tfg_program *p, int k) {
  for (int a = 0; a < p->nactions; a++)
    for (int i = 0; p->actions[a].kind == TFG_ACTION_PRINT && i < p->actions[a].nitems; i++)
      if (p->actions[a].items[i].is_tensor && k-- == 0) return p->actions[a].items[i].node;
  ck_abort_msg("no such printed tensor");
  return -1;
}

static tfg_status host_devices(void *ctx, const tfg_program *p, tfg_diag *d, tfg_devices **out) {
  (void)p;
  return tfg_devices_parse(d, ctx, out);
}

void program_train_fetch(const char *text, const tfg_switches *sw, int n, trained *out) {
  ck_assert_int_le(n, TRAINED_MAX_FETCH);
  memset(out, 0, sizeof *out);
  built b;
  program_build(&b, text, &(build_opts){0});
  ck_assert_msg(b.st == TFG_OK, "%s", b.errs);
  tfg_compiled c;
  tfg_compile_opts o = {.devices = host_devices, .ctx = (void *)"host", .fit = true, .fuse = true, .validate = true};
  if (sw) o.sw = *sw;
  tfg_status st = tfg_compile(b.p, &o, b.d, &c);
  ck_assert_msg(st == TFG_OK, "%s %s", test_render(b.d, false), c.why.data ? c.why.data : "");
  out->nfolded = c.nfolded;
  out->nsimplified = c.nsimplified;
  out->nstrided = c.nstrided;
  for (tfg_node_id i = 0; c.plan->view_of && i < b.p->graph->nnodes; i++) out->nviews += c.plan->view_of[i] >= 0;
  tfg_session *s = tfg_session_new(b.p, b.d, &(tfg_session_opts){.threads = 1, .plan = c.plan, .sw = o.sw});
  ck_assert_ptr_nonnull(s);
  int a = 0;
  while (a < b.p->nactions && b.p->actions[a].kind != TFG_ACTION_TRAIN) a++;
  if (a < b.p->nactions)
    ck_assert_int_eq(tfg_train(s, b.p, &b.p->actions[a], &c.steps[a], &(tfg_train_opts){.quiet = true}, b.d), TFG_OK);
  tfg_node_id fetch[TRAINED_MAX_FETCH];
  for (int k = 0; k < n; k++) fetch[k] = program_printed(b.p, k);
  tfg_tensor t[TRAINED_MAX_FETCH];
  ck_assert_int_eq(tfg_session_run(s, fetch, n, t), TFG_OK);
  for (int i = 0; i < n; i++) {
    out->bytes[i] = (size_t)tfg_shape_numel(&t[i].shape) * tfg_dtype_size(t[i].dtype);
    out->data[i] = malloc(out->bytes[i] + 1);
    memcpy(out->data[i], t[i].data, out->bytes[i]);
  }
  out->n = n;
  tfg_session_free(s);
  tfg_devices_free(c.ds);
  tfg_compiled_free(&c);
  program_free(&b);
}

void trained_expect_same(trained *a, trained *b) {
  ck_assert_int_eq(a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    ck_assert_uint_eq(a->bytes[i], b->bytes[i]);
    ck_assert_msg(memcmp(a->data[i], b->data[i], a->bytes[i]) == 0, "printed tensor %d differs with the switch off", i);
    free(a->data[i]);
    free(b->data[i]);
  }
}
