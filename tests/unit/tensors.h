/* tests/unit/tensors.h: small tensor helpers shared by the kernel suites:
 * shapes from a list, zeroed tensors, element get/set through double. */
#ifndef TFG_TEST_TENSORS_H
#define TFG_TEST_TENSORS_H

#include <stdint.h>

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

#endif
