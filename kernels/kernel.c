/* kernels/kernel.c: helpers shared by every backend's kernels: the error
 * message, op names, one element of a dtype from a double, the checks
 * of the elementwise and shape ops (which read the op's row, ir/ops.h:
 * its kind, and whether it takes integers), and the registration of the
 * elementwise kernels by ir/op_list.h's lists. */
#include "kernels/kernel.h"

#include <stdarg.h>

#include "base/assert.h"
#include "ir/ops.h"
#include "kernels/cast_math.h"
#include "kernels/index_math.h"

tfg_status tfg_kernel_fail(tfg_kernel_ctx *ctx, tfg_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_clear(&ctx->err);
  tfg_strbuf_vprintf(&ctx->err, fmt, ap);
  va_end(ap);
  return s;
}

void tfg_kernel_store_f64(tfg_dtype dt, void *p, double v) {
  switch (dt) {
  case TFG_DTYPE_F32: *(float *)p = (float)v; break;
  case TFG_DTYPE_F64: *(double *)p = v; break;
  case TFG_DTYPE_F16: *(uint16_t *)p = tfg_cast_f64_to_f16(v); break;
  case TFG_DTYPE_BF16: *(uint16_t *)p = tfg_cast_f64_to_bf16(v); break;
  case TFG_DTYPE_I32: *(int32_t *)p = tfg_cast_f_to_i32(v); break;
  case TFG_DTYPE_I64: *(int64_t *)p = tfg_cast_f_to_i64(v); break;
  case TFG_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
  case TFG_DTYPE_COUNT: TFG_ASSERT(!"a dtype"); break;
  }
}

const char *tfg_kernel_op_name(int op) { return op >= 0 && op < TFG_OP_COUNT ? tfg_op_get((tfg_op_id)op)->name : "?"; }

/* f32 f64, and f16 bf16 when the backend computes them (half). */
static bool float_ok(tfg_dtype dt, bool half) {
  return dt == TFG_DTYPE_F32 || dt == TFG_DTYPE_F64 || (half && (dt == TFG_DTYPE_F16 || dt == TFG_DTYPE_BF16));
}

tfg_status tfg_kernel_check_unary(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                  const tfg_tensor *out, const char *where) {
  return tfg_kernel_check_unary_on(ctx, node, in, out, where, false);
}

tfg_status tfg_kernel_check_unary_on(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                     const tfg_tensor *out, const char *where, bool half) {
  tfg_op_id op = node->op;
  tfg_dtype dt = in[0].dtype;
  const tfg_op_def *def = tfg_op_get(op);
  if (def->kind != TFG_OP_KIND_UNARY)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a unary op", tfg_kernel_op_name(op));
  bool supported = float_ok(dt, half) || (def->ints && (dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64));
  if (!supported || out->dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the %s",
                           tfg_kernel_op_name(op), tfg_dtype_name(dt), where);
  if (tfg_shape_numel(&in[0].shape) != tfg_shape_numel(&out->shape))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "unary op: input and output sizes differ");
  return TFG_OK;
}

tfg_status tfg_kernel_check_binary(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                   const tfg_tensor *out, const char *where, tfg_index_map *ix) {
  return tfg_kernel_check_binary_on(ctx, node, in, out, where, false, ix);
}

tfg_status tfg_kernel_check_binary_on(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                      const tfg_tensor *out, const char *where, bool half,
                                      tfg_index_map *ix) {
  tfg_op_id op = node->op;
  tfg_dtype dt = in[0].dtype;
  const tfg_op_def *def = tfg_op_get(op);
  bool cmp = def->kind == TFG_OP_KIND_COMPARE;
  if (def->kind != TFG_OP_KIND_BINARY && !cmp)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s is not a binary op", tfg_kernel_op_name(op));
  bool is_int = dt == TFG_DTYPE_I32 || dt == TFG_DTYPE_I64;
  bool supported = float_ok(dt, half) || (is_int && def->ints) || (cmp && dt == TFG_DTYPE_BOOL);
  if (in[1].dtype != dt)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: input dtypes %s and %s differ",
                           tfg_kernel_op_name(op), tfg_dtype_name(dt), tfg_dtype_name(in[1].dtype));
  if (!supported || out->dtype != (cmp ? TFG_DTYPE_BOOL : dt))
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s on %s is not supported on the %s",
                           tfg_kernel_op_name(op), tfg_dtype_name(dt), where);
  if (!tfg_index_broadcast(ix, &out->shape, in, 2))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: inputs do not broadcast to the output", tfg_kernel_op_name(op));
  return TFG_OK;
}

tfg_status tfg_kernel_check_where(tfg_kernel_ctx *ctx, const tfg_tensor *in, const tfg_tensor *out,
                                  tfg_index_map *ix) {
  if (in[0].dtype != TFG_DTYPE_BOOL)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: the condition is %s, not bool", tfg_dtype_name(in[0].dtype));
  if (in[1].dtype != out->dtype || in[2].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: the value dtypes differ");
  if (!tfg_index_broadcast(ix, &out->shape, in, 3))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "where: inputs do not broadcast to the output");
  return TFG_OK;
}

void tfg_kernel_register_elementwise(tfg_kernel_fn *table, tfg_kernel_fn unary, tfg_kernel_fn binary) {
#define REG_U(A, ID, formula, ints, flops, cheap) table[TFG_OP_##ID] = unary;
  TFG_OPS_UNARY(REG_U, )
#undef REG_U
#define REG_B(A, ID, formula, sig, ints, flops, cheap) table[TFG_OP_##ID] = binary;
  TFG_OPS_BINARY(REG_B, )
#undef REG_B
#define REG_C(A, ID, formula, oper) table[TFG_OP_##ID] = binary;
  TFG_OPS_COMPARE(REG_C, )
#undef REG_C
}

/* in[0..n) all f32 or all f64, with in[0]'s element count. */
static tfg_status check_like_param(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *in, int n,
                                   const char *where) {
  tfg_dtype dt = in[0].dtype;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64)
    return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s of a %s parameter is not supported on the %s (f32 and f64 are)",
                           what, tfg_dtype_name(dt), where);
  int64_t numel = tfg_shape_numel(&in[0].shape);
  for (int i = 1; i < n; i++) {
    if (in[i].dtype != dt)
      return tfg_kernel_fail(ctx, TFG_ERR_DEVICE, "%s: input %d is %s, the parameter %s", what, i,
                             tfg_dtype_name(in[i].dtype), tfg_dtype_name(dt));
    if (tfg_shape_numel(&in[i].shape) != numel)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: input %d has %lld elements, the parameter %lld", what, i,
                             (long long)tfg_shape_numel(&in[i].shape), (long long)numel);
  }
  return TFG_OK;
}

tfg_status tfg_kernel_check_update(tfg_kernel_ctx *ctx, const char *what, const tfg_tensor *in, int n,
                                   const char *where) {
  tfg_status st = check_like_param(ctx, what, in, n, where);
  if (st == TFG_OK && ctx->step < 1)
    return tfg_kernel_fail(ctx, TFG_ERR_NUMERIC, "%s at step %lld (steps count from 1)", what, (long long)ctx->step);
  return st;
}

tfg_status tfg_kernel_check_accumulate(tfg_kernel_ctx *ctx, const tfg_tensor *in, const char *where) {
  return check_like_param(ctx, "grad_accumulate", in, 2, where);
}

tfg_status tfg_kernel_check_scaler(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, int at,
                                   const char *what, bool *present) {
  *present = node->ninputs >= at + 2;
  if (!*present) return TFG_OK;
  if (in[at].dtype != TFG_DTYPE_BOOL || tfg_shape_numel(&in[at].shape) != 1 || in[at + 1].dtype != TFG_DTYPE_F32 ||
      tfg_shape_numel(&in[at + 1].shape) != 1)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "%s: the grad scaler's inputs are not a bool and an f32 scalar", what);
  return TFG_OK;
}

tfg_status tfg_kernel_check_amp(tfg_kernel_ctx *ctx, const tfg_tensor *in, const char *where) {
  for (int k = 0; k < 4; k++) {
    tfg_dtype want = k == 1 ? TFG_DTYPE_BOOL : TFG_DTYPE_F32;
    if (in[k].dtype != want || tfg_shape_numel(&in[k].shape) != 1)
      return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "amp_update on the %s: input %d is not a%s scalar", where, k,
                             k == 1 ? " bool" : "n f32");
  }
  return TFG_OK;
}

tfg_status tfg_kernel_transpose_strides(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                        const tfg_tensor *out, int64_t *st) {
  if (out->shape.rank != in[0].shape.rank || in[0].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "transpose: output rank differs");
  if (!tfg_index_transpose_strides(&in[0].shape, &out->shape, node->attrs.perm, st))
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "transpose: perm is not a permutation of the axes");
  return TFG_OK;
}

tfg_status tfg_kernel_broadcast_strides(tfg_kernel_ctx *ctx, const tfg_tensor *in, const tfg_tensor *out,
                                        int64_t *st) {
  const tfg_shape *s = &in[0].shape;
  int r = out->shape.rank;
  if (s->rank > r || in[0].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "broadcast: input rank exceeds the output's");
  int bad = tfg_index_broadcast_strides(s, &out->shape, st);
  if (bad >= 0)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "broadcast: dim %lld cannot become %lld",
                           (long long)tfg_index_aligned_dim(s, r, bad), (long long)out->shape.dim[bad]);
  return TFG_OK;
}

tfg_status tfg_kernel_concat_rows(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                  const tfg_tensor *out, int64_t *outer, int64_t *inner) {
  int64_t axis = node->attrs.axis, total = 0;
  const tfg_shape *os = &out->shape;
  if (axis < 0 || axis >= os->rank)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "concat: axis %lld is out of range", (long long)axis);
  for (int q = 0; q < node->ninputs; q++) {
    const tfg_shape *s = &in[q].shape;
    bool ok = s->rank == os->rank && in[q].dtype == out->dtype;
    for (int i = 0; ok && i < s->rank; i++) ok = i == axis || s->dim[i] == os->dim[i];
    if (!ok) return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "concat: input %d does not match the output", q);
    total += s->dim[axis];
  }
  if (total != os->dim[axis])
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "concat: the inputs' sizes along axis %lld sum to %lld, not %lld",
                           (long long)axis, (long long)total, (long long)os->dim[axis]);
  tfg_index_split(os, axis, (int64_t)tfg_dtype_size(out->dtype), outer, inner);
  return TFG_OK;
}

tfg_status tfg_kernel_slice_rows(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in,
                                 const tfg_tensor *out, int64_t *outer, int64_t *inner) {
  const tfg_shape *s = &in[0].shape;
  int64_t axis = node->attrs.axis, start = node->attrs.start, end = node->attrs.end;
  if (axis < 0 || axis >= s->rank || start < 0 || end < start || end > s->dim[axis] || out->shape.rank != s->rank ||
      out->shape.dim[axis] != end - start || in[0].dtype != out->dtype)
    return tfg_kernel_fail(ctx, TFG_ERR_SHAPE, "slice: [%lld, %lld) along axis %lld is out of range",
                           (long long)start, (long long)end, (long long)axis);
  tfg_index_split(s, axis, (int64_t)tfg_dtype_size(out->dtype), outer, inner);
  return TFG_OK;
}
