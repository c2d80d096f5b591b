/* tests/unit/programs.c: the helpers of tests/unit/programs.h. */
#include "tests/unit/programs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "lang/parse.h"
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
    st = tfg_strategy_train_step(b->p->graph, &b->p->actions[i], b->p, &b->steps[b->nsteps], b->d);
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
    st = tfg_compile_graph(b->p->graph, b->ds, b->steps, b->nsteps, &(tfg_compile_opts){.fit = o->fit}, b->d, &c);
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
