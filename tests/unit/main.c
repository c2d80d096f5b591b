/* tests/unit/main.c: runs every Check suite; the summary line
 * ("Checks: N, Failures: F, Errors: E") is read by tests/run.sh. Also
 * the shared helpers tests/unit/unit.h declares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lang/parse.h"
#include "tests/unit/unit.h"

char *test_render(tfg_diag *d, bool summary) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  tfg_diag_render(d, f, false);
  if (summary) tfg_diag_render_summary(d, f, false);
  long n = ftell(f);
  rewind(f);
  char *s = calloc(1, (size_t)n + 1);
  ck_assert_int_eq(fread(s, 1, (size_t)n, f), n);
  fclose(f);
  return s;
}

char *test_parse(const char *text, size_t len, char **errs, size_t *nerr) {
  tfg_diag *d = tfg_diag_new();
  tfg_arena a;
  tfg_arena_init(&a);
  const tfg_source *src = tfg_diag_add_source(d, "t.tfg", text, len);
  ck_assert_ptr_nonnull(src);
  tfg_ast *prog = NULL;
  tfg_status st = tfg_parse(src, d, &a, &prog, NULL);
  char *dump = NULL;
  if (st == TFG_OK) {
    ck_assert_ptr_nonnull(prog);
    tfg_strbuf b = {0};
    tfg_ast_dump(prog, &b);
    dump = tfg_strbuf_take(&b);
  } else {
    ck_assert_ptr_null(prog);
  }
  if (nerr) *nerr = tfg_diag_error_count(d);
  if (errs) *errs = test_render(d, false);
  tfg_arena_free(&a);
  tfg_diag_free(d);
  return dump;
}

bool test_find_python(char *buf, size_t n) {
  snprintf(buf, n, "/usr/bin/python3");
  if (access(buf, X_OK) == 0) return true;
  const char *pathvar = getenv("PATH");
  while (pathvar && *pathvar) {
    size_t k = strcspn(pathvar, ":");
    snprintf(buf, n, "%.*s/python3", k ? (int)k : 1, k ? pathvar : ".");
    if (access(buf, X_OK) == 0) return true;
    pathvar += k + (pathvar[k] == ':');
  }
  return false;
}

int main(void) {
  SRunner *sr = srunner_create(suite_base());
  srunner_add_suite(sr, suite_diag());
  srunner_add_suite(sr, suite_lexer());
  srunner_add_suite(sr, suite_parser());
  srunner_add_suite(sr, suite_kernels_basic());
  srunner_add_suite(sr, suite_kernels_nn());
  srunner_add_suite(sr, suite_kernels_grad());
  srunner_add_suite(sr, suite_cpu_math());
  srunner_add_suite(sr, suite_parallel());
  srunner_add_suite(sr, suite_data());
  srunner_add_suite(sr, suite_interp());
  srunner_add_suite(sr, suite_format());
  srunner_add_suite(sr, suite_ckpt());
  srunner_add_suite(sr, suite_autodiff());
  srunner_add_suite(sr, suite_device());
  srunner_add_suite(sr, suite_plan());
  srunner_add_suite(sr, suite_backend());
  srunner_add_suite(sr, suite_collective());
  srunner_add_suite(sr, suite_collective_groups());
  srunner_add_suite(sr, suite_trace());
  srunner_add_suite(sr, suite_strategy());
  srunner_add_suite(sr, suite_exec());
  srunner_add_suite(sr, suite_fuse());
  srunner_add_suite(sr, suite_fold());
  srunner_add_suite(sr, suite_simplify());
  srunner_add_suite(sr, suite_layout());
  srunner_add_suite(sr, suite_codegen());
  srunner_add_suite(sr, suite_schedule());
  srunner_add_suite(sr, suite_pipe());
  srunner_add_suite(sr, suite_ranks());
  srunner_add_suite(sr, suite_views());
  srunner_add_suite(sr, suite_mpi());
  srunner_add_suite(sr, suite_predict());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
