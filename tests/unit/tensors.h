/* tests/unit/tensors.h: small tensor helpers shared by the kernel suites:
 * shapes from a list, zeroed tensors, element get/set through double,
 * the float dtypes a loop test runs over, and a thread pool per test.
 *
 *   tcase_add_checked_fixture(tc, test_pool_make, test_pool_free);
 *   tcase_add_loop_test(tc, my_test, 0, 2);  // my_test: dt = FLOATS[_i]
 */
#ifndef TFG_TEST_TENSORS_H
#define TFG_TEST_TENSORS_H

#include <stdint.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernel.h"

/* shp(2, 3, 4) is the shape [3, 4]. */
tfg_shape shp(int rank, ...);
/* A zeroed tensor (owned by the caller: free(t.data)). */
tfg_tensor tnew(tfg_dtype dt, tfg_shape s);
int64_t numel(const tfg_tensor *t);
/* Element i as a double (f32 f64 i32 i64), and set from one. */
double get(const tfg_tensor *t, int64_t i);
void set(tfg_tensor *t, int64_t i, double v);
/* Every element from v[0..numel). */
void set_all(tfg_tensor *t, const double *v);
/* Frees the data of t[0..n). */
void free_all(tfg_tensor *t, int n);

/* f32, f64: a loop test over both takes FLOATS[_i]. */
extern const tfg_dtype FLOATS[2];

/* A pool of four threads for the running test, made by test_pool_make
 * and freed by test_pool_free: a checked fixture, so both run in the
 * test's own process. */
extern tfg_pool *test_pool;
void test_pool_make(void);
void test_pool_free(void);

#endif
