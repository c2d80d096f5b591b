/* tests/unit/unit.h: shared helpers for the Check unit suites. */
#ifndef TFG_TEST_UNIT_H
#define TFG_TEST_UNIT_H

#include <check.h>
#include <stdbool.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/strbuf.h"
#include "lang/ast.h"

Suite *suite_base(void);
Suite *suite_diag(void);
Suite *suite_lexer(void);
Suite *suite_parser(void);
Suite *suite_kernels_basic(void);
Suite *suite_kernels_nn(void);
Suite *suite_kernels_grad(void);
Suite *suite_cpu_math(void);
Suite *suite_parallel(void);
Suite *suite_data(void);
Suite *suite_interp(void);
Suite *suite_format(void);
Suite *suite_ckpt(void);
Suite *suite_autodiff(void);
Suite *suite_device(void);
Suite *suite_plan(void);
Suite *suite_backend(void);
Suite *suite_collective(void);
Suite *suite_collective_groups(void);
Suite *suite_trace(void);
Suite *suite_strategy(void);
Suite *suite_exec(void);
Suite *suite_fuse(void);
Suite *suite_fold(void);
Suite *suite_simplify(void);
Suite *suite_layout(void);
Suite *suite_codegen(void);
Suite *suite_schedule(void);
Suite *suite_pipe(void);
Suite *suite_ranks(void);
Suite *suite_views(void);
Suite *suite_mpi(void);
Suite *suite_predict(void);

/* Renders d's diagnostics without colour (and the error count when
 * summary is true) into a heap string. */
char *test_render(tfg_diag *d, bool summary);

/* Parses text (named "t.tfg"); returns the --ast dump (caller frees) or
 * NULL on a syntax error. Diagnostics rendered without colour go to
 * *errs when errs is not NULL (caller frees), the error count to *nerr. */
char *test_parse(const char *text, size_t len, char **errs, size_t *nerr);

/* Puts /usr/bin/python3 in buf (n bytes), else the first python3 on PATH;
 * false when there is none (the suite skips or fails the check). */
bool test_find_python(char *buf, size_t n);

#endif
