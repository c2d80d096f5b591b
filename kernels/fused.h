/* kernels/fused.h: the checks both FUSED kernels (kernels/cpu/fused.c,
 * kernels/cuda/fused.cu) make before they run a chain's program; the
 * program itself is IR (ir/fused.h). */
#ifndef TFG_KERNELS_FUSED_H
#define TFG_KERNELS_FUSED_H

#ifdef __cplusplus
extern "C" {
#endif

#include "ir/fused.h"
#include "kernels/kernel.h"

/* The checks both FUSED kernels make before running node (attrs.data a
 * tfg_fused_prog) on in[0..node->ninputs) into out, with the same
 * messages ("... is not supported on the WHERE": "CPU", "GPU"): the
 * program (tfg_fused_check); out f32 or f64; each input of out's dtype,
 * with the program's len[k] elements, which repeated every div[k] tile
 * out's element count. TFG_OK, or the failure recorded in ctx and
 * returned. */
tfg_status tfg_fused_check_tensors(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                   const tfg_tensor *out, const char *where);

#ifdef __cplusplus
}
#endif

#endif
