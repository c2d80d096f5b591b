/* tests/unit/test_exec.c */
#include "tests/unit/unit.h"

Suite *suite_exec(void) { return suite_create("exec"); }
