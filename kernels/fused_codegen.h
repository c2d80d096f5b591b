/* kernels/fused_codegen.h: a fused chain (ir/fused.h) as CUDA C source,
 * for NVRTC to compile into a kernel of its own (kernels/nvrtc.h), in
 * place of the interpreted kernel's switch per op and element
 * (kernels/cuda/fused.cu).
 *
 *   tfg_strbuf src = {0};
 *   tfg_fused_codegen(prog, TFG_DTYPE_F32, n, &src);   // kernels tfg_fused_v, tfg_fused_s
 *   uint64_t key = tfg_fused_source_hash(src.data, "sm_90");
 *
 * The source calls the formulas of kernels/elementwise_math.h, so a
 * generated kernel computes what the interpreted one does, bit for bit;
 * NVRTC compiles it with that header and the ones it includes, which
 * tfg_fused_headers gives by name and text (tfg carries them: an
 * installed binary has no source tree). The shapes are constants in the
 * source: an input of the output's n elements is read at i, a scalar at
 * 0, a broadcast one at (i / div) % len.
 *
 * Two kernels, one grid-stride loop each, parameters (in0, ..., inK-1,
 * out), T the dtype:
 *   tfg_fused_v: 16 bytes per load and store (float4 / double2) for the
 *     inputs of the output's size and the output, each lane of the vector
 *     the chain of its element; the last n mod W elements by the first
 *     threads. Needs those pointers 16-byte aligned.
 *   tfg_fused_s: one element per iteration, any alignment. */
#ifndef TFG_KERNELS_FUSED_CODEGEN_H
#define TFG_KERNELS_FUSED_CODEGEN_H

#include <stdint.h>

#include "base/strbuf.h"
#include "ir/fused.h"

/* Appends the source of prog's kernels over n output elements of dtype
 * dt (f32 or f64) to out. False (nothing appended) for another dtype or
 * a program tfg_fused_check refuses. */
bool tfg_fused_codegen(const tfg_fused_prog *prog, tfg_dtype dt, int64_t n, tfg_strbuf *out);

/* The headers the source includes, for nvrtcCreateProgram: *count names
 * and texts (static storage): kernels/elementwise_math.h,
 * kernels/hostdev.h and ir/op_list.h as tfg was built with them, and
 * small <math.h>, <stdbool.h>, <stdint.h> for NVRTC, which has no C
 * library. */
void tfg_fused_headers(const char *const **names, const char *const **texts, int *count);

/* FNV-1a over the source and the target (a cache key). */
uint64_t tfg_fused_source_hash(const char *src, const char *target);

#endif
