/* io/data_type.h: the element types data files hold (csv, npy, idx), and
 * their values converted to the dtypes of the tensors they feed.
 *
 *   if (!tfg_data_convertible(TFG_DATA_I64, TFG_DTYPE_I32)) ...    // refused by name
 *   if (tfg_data_check_values(d, &loc, "y.npy", TFG_DATA_I64, &shape, data, TFG_DTYPE_I32) != TFG_OK)
 *     ...                                                           // a value out of range
 *   tfg_data_convert(TFG_DATA_I64, data, TFG_DTYPE_I32, dst, tfg_shape_numel(&shape));
 *
 * Conversions: same type: a copy. u8, i32, i64 and bool to f32/f64/f16/
 * bf16 by value (i64 to f32 with one rounding; i64 beyond 2^53 to
 * f16/bf16 may round twice, through f64). f32 and f64 to any float dtype
 * with one round-to-nearest-even (f16 and bf16 are rounded straight from
 * the exact value; overflow gives inf). u8, bool, i32 and i64 to i32/i64
 * by value. i64 to i32 is refused for a value out of range, by
 * tfg_data_check_values before any conversion (a label of 2^40 is a
 * mistake to report, not one to clamp); the conversion itself saturates,
 * so a caller that skipped the check still gets no undefined behaviour.
 * bool to bool. */
#ifndef TFG_DATA_TYPE_H
#define TFG_DATA_TYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
#include "ir/graph.h"

/* Element types a file may hold (u8 has no tfg dtype: idx and npy images). */
typedef enum tfg_data_type {
  TFG_DATA_F32,
  TFG_DATA_F64,
  TFG_DATA_I32,
  TFG_DATA_I64,
  TFG_DATA_U8,
  TFG_DATA_BOOL,
} tfg_data_type;

const char *tfg_data_type_name(tfg_data_type t); /* "f32", "u8" ... */
size_t tfg_data_type_size(tfg_data_type t);      /* bytes per element */

/* Whether values of type t can feed a tensor of dtype dt: always when dt
 * is a float type and t is numeric or bool; integers and u8 and bool feed
 * integer dtypes; bool feeds bool. Floats never feed integer dtypes. */
bool tfg_data_convertible(tfg_data_type t, tfg_dtype dt);

/* Whether every value of an array (type t, shape, data read from path)
 * fits dtype dt, which it is about to feed (tfg_data_convertible holds):
 * TFG_OK, or TFG_ERR_SHAPE after an error naming the file, the first
 * value out of range and its NumPy index ([row, ...]). Only i64 into i32
 * can fail today. tfg_data_check_column (io/data.h) checks a column's
 * every row, in file order. Run one of them before converting: the
 * conversion itself cannot report. */
tfg_status tfg_data_check_values(tfg_diag *d, const tfg_loc *loc, const char *path, tfg_data_type t,
                                 const tfg_shape *shape, const void *data, tfg_dtype dt);

/* Converts n elements of type t at src to dtype dt at dst (the rules of
 * the comment above; out-of-range i64 saturates into i32). */
void tfg_data_convert(tfg_data_type t, const void *src, tfg_dtype dt, void *dst, int64_t n);

#endif
