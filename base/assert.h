/* base/assert.h: TFG_ASSERT for broken invariants (bugs in tfg, not in the
 * user's program). It prints file and line and aborts, in every build:
 * a wrong answer is worse than a crash report. User errors never reach
 * here; they are diagnostics with a status. */
#ifndef TFG_ASSERT_H
#define TFG_ASSERT_H

_Noreturn void tfg_assert_fail(const char *expr, const char *file, int line);

/* A function the failing thread calls after the report instead of
 * aborting; it must not return (the REPL's longjmps back to its prompt,
 * so a bug costs the input, not the session). One per thread, set only
 * by that thread; NULL removes it. A real abort() (heap corruption found
 * by the C library, say) is never caught: only a broken invariant that
 * tfg itself detected, with its state still consistent enough to report. */
typedef void (*tfg_assert_handler)(void);
void tfg_assert_set_handler(tfg_assert_handler h);

#define TFG_ASSERT(x) \
  ((x) ? (void)0 : tfg_assert_fail(#x, __FILE__, __LINE__))

#endif
