/* tests/unit/test_codegen.c: fused chains as CUDA C (kernels/fused_codegen.h)
 * and their compilation by NVRTC (kernels/nvrtc.h), which needs no GPU.
 *
 * The source: every fusable op calls its formula of
 * kernels/elementwise_math.h, in the dtype's version; each input is read
 * as its broadcast says (at i, at 0, at i % len, at i / div % len); both
 * kernels are there; other dtypes and bad programs are refused.
 * NVRTC (when libnvrtc can be loaded, as wherever the CUDA toolkit is):
 * a program of every op, f32 and f64, compiles to PTX with both entry
 * points for two architectures, with the headers tfg carries; a second
 * request reads the disk cache (same bytes, a file under TFG_CACHE_DIR);
 * a source that does not compile fails with NVRTC's log, naming the
 * line. Without libnvrtc the call fails with a message, as the CUDA
 * kernel expects before it falls back to its interpreted chain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/fused_codegen.h"
#include "kernels/nvrtc.h"
#include "tests/unit/unit.h"

/* A program of every fusable op over 4 inputs of a [16, 24] output: a
 * full x, a scalar, a row [24] and a column [16, 1] (via BROADCAST). */
static tfg_fused_prog every_op(void) {
  static const int unary[] = {TFG_OP_NEG,  TFG_OP_EXP, TFG_OP_LOG,  TFG_OP_SQRT, TFG_OP_RSQRT,
                              TFG_OP_ABS,  TFG_OP_RELU, TFG_OP_GELU, TFG_OP_TANH, TFG_OP_SIGMOID};
  static const int binary[] = {TFG_OP_ADD, TFG_OP_SUB, TFG_OP_MUL, TFG_OP_DIV, TFG_OP_POW, TFG_OP_MAXIMUM};
  tfg_fused_prog p = {.ninputs = 4, .len = {16 * 24, 1, 24, 16}, .div = {1, 1, 1, 24}};
  int s = 0;
  p.ops[s++] = (tfg_fused_op){.op = TFG_OP_BROADCAST, .a = TFG_FUSED_INPUT(3), .b = -1};
  p.ops[s++] = (tfg_fused_op){.op = TFG_OP_MINIMUM, .a = TFG_FUSED_INPUT(0), .b = TFG_FUSED_RESULT(0)};
  for (int i = 0; i < 6; i++) /* each binary op against an input in turn */
    p.ops[s] = (tfg_fused_op){.op = (int16_t)binary[i], .a = (int8_t)TFG_FUSED_RESULT(s - 1),
                              .b = (int8_t)TFG_FUSED_INPUT(i % 3)}, s++;
  for (int i = 0; i < 8; i++) p.ops[s] = (tfg_fused_op){.op = (int16_t)unary[i], .a = (int8_t)TFG_FUSED_RESULT(s - 1), .b = -1}, s++;
  p.nops = s;
  ck_assert_int_eq(s, TFG_FUSED_MAX_OPS);
  return p;
}

START_TEST(source_calls_the_formulas) {
  tfg_fused_prog p = every_op();
  ck_assert_ptr_null(tfg_fused_check(&p, 4));
  for (int d = 0; d < 2; d++) {
    tfg_strbuf src = {0};
    ck_assert(tfg_fused_codegen(&p, d ? TFG_DTYPE_F64 : TFG_DTYPE_F32, 16 * 24, &src));
    const char *sfx = d ? "f64" : "f32";
    static const char *const names[] = {"minimum", "add", "sub", "mul", "div", "pow", "maximum",
                                        "neg",     "exp", "log", "sqrt", "rsqrt", "abs", "relu", "gelu"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      char want[64];
      snprintf(want, sizeof want, "tfg_em_%s_%s(", names[i], sfx);
      ck_assert_msg(strstr(src.data, want), "%s missing from\n%s", want, src.data);
    }
    ck_assert(strstr(src.data, "a1 = in1[0];"));                 /* the scalar */
    ck_assert(strstr(src.data, "a2 = in2[i % 24LL];"));          /* the row */
    ck_assert(strstr(src.data, "a3 = in3[i / 24LL % 16LL];"));   /* the column */
    ck_assert(strstr(src.data, "r0 = a3;"));                     /* BROADCAST passes it through */
    ck_assert(strstr(src.data, "void tfg_fused_v(") && strstr(src.data, "void tfg_fused_s("));
    ck_assert(strstr(src.data, d ? "double2" : "float4"));
    tfg_strbuf_free(&src);
  }
  tfg_strbuf src = {0};
  ck_assert(!tfg_fused_codegen(&p, TFG_DTYPE_F16, 16 * 24, &src));
  p.ops[3].a = TFG_FUSED_RESULT(5); /* a later result: refused */
  ck_assert(!tfg_fused_codegen(&p, TFG_DTYPE_F32, 16 * 24, &src));
  ck_assert_uint_eq(src.len, 0);
}
END_TEST

/* A temporary cache folder for the test (removed by the caller). */
static char cache[64];

static void make_cache(void) {
  snprintf(cache, sizeof cache, "/tmp/tfg-codegen-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(cache));
}

static void drop_cache(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(nvrtc_compiles_to_ptx) {
  const char *const *names, *const *texts;
  int nh;
  tfg_fused_headers(&names, &texts, &nh);
  tfg_fused_prog p = every_op();
  make_cache();
  if (!tfg_nvrtc_available()) {
    tfg_strbuf ptx = {0}, log = {0};
    ck_assert_int_eq(tfg_nvrtc_ptx("x", "compute_90", nh, names, texts, cache, &ptx, &log, NULL), TFG_ERR_DEVICE);
    ck_assert_ptr_nonnull(strstr(log.data, "NVRTC is not available"));
    tfg_strbuf_free(&log);
    drop_cache();
    return;
  }
  static const char *const arch[] = {"compute_80", "compute_90"};
  for (int d = 0; d < 2; d++)
    for (int a = 0; a < 2; a++) {
      tfg_strbuf src = {0}, ptx = {0}, again = {0}, log = {0};
      ck_assert(tfg_fused_codegen(&p, d ? TFG_DTYPE_F64 : TFG_DTYPE_F32, 16 * 24, &src));
      bool cached = true;
      tfg_status st = tfg_nvrtc_ptx(src.data, arch[a], nh, names, texts, cache, &ptx, &log, &cached);
      ck_assert_msg(st == TFG_OK, "%s: %s", arch[a], log.data ? log.data : "");
      ck_assert(!cached);
      ck_assert_ptr_nonnull(strstr(ptx.data, ".entry tfg_fused_v"));
      ck_assert_ptr_nonnull(strstr(ptx.data, ".entry tfg_fused_s"));
      char target[32];
      snprintf(target, sizeof target, ".target sm_%s", arch[a] + 8);
      ck_assert_msg(strstr(ptx.data, target), "no %s", target);
      ck_assert_int_eq(tfg_nvrtc_ptx(src.data, arch[a], nh, names, texts, cache, &again, &log, &cached), TFG_OK);
      ck_assert(cached);
      ck_assert_uint_eq(again.len, ptx.len);
      ck_assert_int_eq(memcmp(again.data, ptx.data, ptx.len), 0);
      char path[160];
      snprintf(path, sizeof path, "%s/kernels/%016llx.ptx", cache,
               (unsigned long long)tfg_fused_source_hash(src.data, arch[a]));
      ck_assert_msg(access(path, R_OK) == 0, "no cache file %s", path);
      tfg_strbuf_free(&src);
      tfg_strbuf_free(&ptx);
      tfg_strbuf_free(&again);
      tfg_strbuf_free(&log);
    }
  /* a compile error: NVRTC's log, with the line */
  tfg_strbuf ptx = {0}, log = {0};
  const char *bad = "#include \"kernels/elementwise_math.h\"\nextern \"C\" __global__ void k(float *o) { o[0] = nope; }\n";
  ck_assert_int_eq(tfg_nvrtc_ptx(bad, "compute_90", nh, names, texts, cache, &ptx, &log, NULL), TFG_ERR_DEVICE);
  ck_assert_msg(log.data && strstr(log.data, "nope") && strstr(log.data, "(2)"), "%s", log.data ? log.data : "");
  tfg_strbuf_free(&ptx);
  tfg_strbuf_free(&log);
  drop_cache();
}
END_TEST

Suite *suite_codegen(void) {
  Suite *s = suite_create("codegen");
  TCase *tc = tcase_create("codegen");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, source_calls_the_formulas);
  tcase_add_test(tc, nvrtc_compiles_to_ptx);
  suite_add_tcase(s, tc);
  return s;
}
