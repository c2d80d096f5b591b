/* base/assert.h: TFG_ASSERT for broken invariants (bugs in tfg, not in the
 * user's program). It prints file and line and aborts, in every build:
 * a wrong answer is worse than a crash report. User errors never reach
 * here; they are diagnostics with a status. */
#ifndef TFG_ASSERT_H
#define TFG_ASSERT_H

_Noreturn void tfg_assert_fail(const char *expr, const char *file, int line);

#define TFG_ASSERT(x) \
  ((x) ? (void)0 : tfg_assert_fail(#x, __FILE__, __LINE__))

#endif
