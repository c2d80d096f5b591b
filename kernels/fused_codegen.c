/* kernels/fused_codegen.c: a fused chain as CUDA C source (contract:
 * kernels/fused_codegen.h). */
#include "kernels/fused_codegen.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ir/ops.h"

/* The texts of kernels/hostdev.h, kernels/elementwise_math.h and
 * ir/op_list.h (the op ids and the lists the formulas' dispatchers are
 * generated from), made by the build (kernels/embed.awk) from the files
 * this tfg was built with. */
extern const char tfg_hostdev_h_text[];
extern const char tfg_elementwise_math_h_text[];
extern const char tfg_op_list_h_text[];

/* What elementwise_math.h takes from the C library, for NVRTC, which has
 * the device math functions built in but no headers: NAN and the fixed
 * width integers. */
static const char math_h[] = "#pragma once\n#define NAN __int_as_float(0x7fffffff)\n";
static const char stdbool_h[] = "#pragma once\n";
static const char stdint_h[] = "#pragma once\n"
                               "typedef signed char int8_t;\ntypedef short int16_t;\ntypedef int int32_t;\n"
                               "typedef long long int64_t;\ntypedef unsigned char uint8_t;\n"
                               "typedef unsigned short uint16_t;\ntypedef unsigned int uint32_t;\n"
                               "typedef unsigned long long uint64_t;\n";

/* Static storage: nothing to make at run time. */
void tfg_fused_headers(const char *const **names, const char *const **texts, int *count) {
  static const char *const n[] = {"kernels/elementwise_math.h", "kernels/hostdev.h", "ir/op_list.h", "math.h",
                                  "stdbool.h", "stdint.h"};
  static const char *const t[] = {tfg_elementwise_math_h_text, tfg_hostdev_h_text, tfg_op_list_h_text,
                                  math_h, stdbool_h, stdint_h};
  _Static_assert(sizeof n / sizeof n[0] == sizeof t / sizeof t[0], "a text per header name");
  *names = n;
  *texts = t;
  *count = (int)(sizeof n / sizeof n[0]);
}

uint64_t tfg_fused_source_hash(const char *src, const char *target) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *s = src; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  h = (h ^ 0xff) * 0x100000001b3ull;
  for (const char *s = target; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* The operand x (an input or an earlier result) as an expression. */
static void operand(tfg_strbuf *out, int x) {
  if (x >= TFG_FUSED_MAX_INPUTS) tfg_strbuf_printf(out, "r%d", x - TFG_FUSED_MAX_INPUTS);
  else tfg_strbuf_printf(out, "a%d", x);
}

bool tfg_fused_codegen(const tfg_fused_prog *p, tfg_dtype dt, int64_t n, tfg_strbuf *out) {
  if ((dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) || tfg_fused_check(p, p ? p->ninputs : 0) || n < 0) return false;
  bool f32 = dt == TFG_DTYPE_F32;
  const char *T = f32 ? "float" : "double", *S = f32 ? "f32" : "f64", *V = f32 ? "float4" : "double2";
  int W = f32 ? 4 : 2;
  static const char lane[4][2] = {"x", "y", "z", "w"};
  tfg_strbuf_printf(out,
                    "/* a fused chain of %d ops over %" PRId64 " %s elements (tfg, kernels/fused_codegen.c) */\n"
                    "#include \"kernels/elementwise_math.h\"\n\n",
                    p->nops, n, S);
  /* the chain of one element: the full inputs' values given, the others read */
  tfg_strbuf_printf(out, "static __device__ __forceinline__ %s chain(long long i", T);
  for (int k = 0; k < p->ninputs; k++) {
    if (p->len[k] == n) tfg_strbuf_printf(out, ", %s a%d", T, k);
    else tfg_strbuf_printf(out, ", const %s *__restrict__ in%d", T, k);
  }
  tfg_strbuf_puts(out, ") {\n  (void)i;\n");
  for (int k = 0; k < p->ninputs; k++) {
    if (p->len[k] == n) continue;
    if (p->len[k] == 1) tfg_strbuf_printf(out, "  %s a%d = in%d[0];\n", T, k, k);
    else if (p->div[k] == 1) tfg_strbuf_printf(out, "  %s a%d = in%d[i %% %" PRId64 "LL];\n", T, k, k, p->len[k]);
    else
      tfg_strbuf_printf(out, "  %s a%d = in%d[i / %" PRId64 "LL %% %" PRId64 "LL];\n", T, k, k, p->div[k], p->len[k]);
  }
  for (int s = 0; s < p->nops; s++) {
    const tfg_fused_op *o = &p->ops[s];
    const char *f = tfg_op_get(o->op)->formula; /* NULL: BROADCAST, its operand */
    tfg_strbuf_printf(out, "  %s r%d = ", T, s);
    if (f) tfg_strbuf_printf(out, "tfg_em_%s_%s(", f, S);
    operand(out, o->a);
    if (o->b >= 0) {
      tfg_strbuf_puts(out, ", ");
      operand(out, o->b);
    }
    tfg_strbuf_puts(out, f ? ");\n" : ";\n");
  }
  tfg_strbuf_printf(out, "  return r%d;\n}\n\n", p->nops - 1);

  /* the parameter list and the call, shared by both kernels */
  tfg_strbuf params = {0}, args_s = {0};
  for (int k = 0; k < p->ninputs; k++) {
    tfg_strbuf_printf(&params, "const %s *__restrict__ in%d, ", T, k);
    tfg_strbuf_printf(&args_s, p->len[k] == n ? ", in%d[e]" : ", in%d", k);
  }
  tfg_strbuf_printf(&params, "%s *__restrict__ out", T);
  const char *loop = "  long long stride = (long long)gridDim.x * blockDim.x;\n"
                     "  long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
  /* scalar: one element per iteration */
  tfg_strbuf_printf(out, "extern \"C\" __global__ void tfg_fused_s(%s) {\n%s", params.data, loop);
  tfg_strbuf_printf(out, "  for (long long e = t; e < %" PRId64 "LL; e += stride) out[e] = chain(e%s);\n}\n\n", n,
                    args_s.data ? args_s.data : "");
  /* vector: W elements per iteration through 16-byte loads and stores */
  int64_t nv = n / W;
  tfg_strbuf_printf(out, "extern \"C\" __global__ void tfg_fused_v(%s) {\n%s", params.data, loop);
  tfg_strbuf_printf(out, "  for (long long j = t; j < %" PRId64 "LL; j += stride) {\n", nv);
  for (int k = 0; k < p->ninputs; k++)
    if (p->len[k] == n) tfg_strbuf_printf(out, "    %s v%d = reinterpret_cast<const %s *>(in%d)[j];\n", V, k, V, k);
  tfg_strbuf_printf(out, "    %s y;\n", V);
  for (int l = 0; l < W; l++) {
    tfg_strbuf_printf(out, "    y.%s = chain(j * %d + %d", lane[l], W, l);
    for (int k = 0; k < p->ninputs; k++) {
      if (p->len[k] == n) tfg_strbuf_printf(out, ", v%d.%s", k, lane[l]);
      else tfg_strbuf_printf(out, ", in%d", k);
    }
    tfg_strbuf_puts(out, ");\n");
  }
  tfg_strbuf_printf(out, "    reinterpret_cast<%s *>(out)[j] = y;\n  }\n", V);
  tfg_strbuf_printf(out, "  long long e = %" PRId64 "LL + t; /* the last n mod %d */\n", nv * W, W);
  tfg_strbuf_printf(out, "  if (e < %" PRId64 "LL) out[e] = chain(e%s);\n}\n", n, args_s.data ? args_s.data : "");
  tfg_strbuf_free(&params);
  tfg_strbuf_free(&args_s);
  return true;
}
