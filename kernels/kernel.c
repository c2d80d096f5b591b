/* kernels/kernel.c: helpers shared by every backend's kernels. */
#include "kernels/kernel.h"

#include <stdarg.h>

tfg_status tfg_kernel_fail(tfg_kernel_ctx *ctx, tfg_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_clear(&ctx->err);
  tfg_strbuf_vprintf(&ctx->err, fmt, ap);
  va_end(ap);
  return s;
}
