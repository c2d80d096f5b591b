/* runtime/format.h: tensors as text, NumPy style (LANGUAGE.md section 6).
 *
 *   tfg_strbuf b = {0};
 *   tfg_format_tensor(&b, &t, false);   // "[[1.  2.5]\n [3.  4. ]]"
 *
 * Floats print like NumPy's default (precision 8, "maxprec"): the fewest
 * digits (up to 8 after the point) that give back the value in its own
 * dtype, aligned on the point; whole-number arrays as "1."; scientific
 * notation when magnitudes span more than 1e3 or reach 1e8 or fall below
 * 1e-4. Rows go on their own lines. Past 6 entries along an axis only the
 * first and last 3 are shown, with "..." between, unless all is true. */
#ifndef TFG_FORMAT_H
#define TFG_FORMAT_H

#include <stdbool.h>

#include "base/strbuf.h"
#include "kernels/kernel.h"

/* Appends the values of t (f32, f64, i32, i64, bool; f16 and bf16 are
 * shown through their f32 value). */
void tfg_format_tensor(tfg_strbuf *out, const tfg_tensor *t, bool all);

/* f16 and bf16 bits to float (exact). */
float tfg_half_to_float(uint16_t h);
float tfg_bf16_to_float(uint16_t h);

#endif
