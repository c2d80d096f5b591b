/* tests/unit/test_device.c: --devices specs, the default list, sizes,
 * limits, `tfg devices` text, and every kind of malformed spec with its
 * located error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/device.h"
#include "tests/unit/unit.h"

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define GiB ((int64_t)1 << 30)
#define TiB ((int64_t)1 << 40)

/* What device.c reads from sysconf, computed the same way. */
static int64_t phys_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 8 * GiB;
  return (int64_t)pages * (int64_t)page;
}

/* Parses spec, which must be valid; no diagnostics may be recorded. */
static tfg_devices *parse_ok(const char *spec) {
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  tfg_status st = tfg_devices_parse(d, spec, &ds);
  if (st != TFG_OK) {
    char *out = test_render(d, false);
    ck_abort_msg("spec '%s' failed: %s", spec, out);
  }
  ck_assert_ptr_nonnull(ds);
  ck_assert_uint_eq(tfg_diag_error_count(d), 0);
  tfg_diag_free(d);
  return ds;
}

static char *describe(const tfg_devices *ds) {
  tfg_strbuf b = {0};
  tfg_devices_describe(ds, &b);
  return tfg_strbuf_take(&b);
}

static char *size_str(int64_t bytes) {
  tfg_strbuf b = {0};
  tfg_size_format(&b, bytes);
  return tfg_strbuf_take(&b);
}

/* ---- valid specs -------------------------------------------------------- */

START_TEST(cpu0_always_first) {
  tfg_devices *ds = parse_ok("host");
  const tfg_device *c = tfg_devices_at(ds, 0);
  ck_assert_int_eq(c->index, 0);
  ck_assert_int_eq(c->kind, TFG_DEVICE_CPU);
  ck_assert_str_eq(c->name, "cpu:0");
  ck_assert_int_eq(c->physical, 0);
  ck_assert_int_eq(c->memory, phys_memory());
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  char hw[64];
  snprintf(hw, sizeof hw, "host CPU (%ld core%s)", cores, cores == 1 ? "" : "s");
  ck_assert_str_eq(c->hardware, hw);
  ck_assert(c->flops > 0 && c->mem_bw > 0 && c->link_bw > 0);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(host_times_4) {
  tfg_devices *ds = parse_ok("host*4");
  ck_assert_int_eq(tfg_devices_count(ds), 5);
  ck_assert_int_eq(tfg_devices_gpus(ds), 4);
  for (int k = 0; k < 4; k++) {
    const tfg_device *g = tfg_devices_gpu(ds, k);
    char name[16], hw[64];
    snprintf(name, sizeof name, "gpu:%d", k);
    snprintf(hw, sizeof hw, "host device %d", k);
    ck_assert_int_eq(g->index, k + 1);
    ck_assert_int_eq(g->kind, TFG_DEVICE_HOST);
    ck_assert_str_eq(g->name, name);
    ck_assert_str_eq(g->hardware, hw);
    ck_assert_int_eq(g->physical, 0);
    ck_assert_int_eq(g->memory, phys_memory() / 4 / 4);
    ck_assert(g->flops == 50e9 && g->mem_bw == 20e9 && g->link_bw == 10e9);
  }
  tfg_devices_free(ds);
}
END_TEST

START_TEST(host_times_4_sized) {
  ck_assert(phys_memory() >= 4 * 512 * MiB); /* the cap is below each device's share */
  tfg_devices *ds = parse_ok("host*4:512M");
  ck_assert_int_eq(tfg_devices_gpus(ds), 4);
  for (int k = 0; k < 4; k++) ck_assert_int_eq(tfg_devices_gpu(ds, k)->memory, 512 * MiB);
  tfg_devices_free(ds);
  /* A cap above the machine never grants more than the device's share. */
  ds = parse_ok("host*2:8000T");
  ck_assert_int_eq(tfg_devices_gpu(ds, 0)->memory, phys_memory() / 2);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(cuda_logical_sized) {
  tfg_devices *ds = parse_ok("cuda:0*2:30G");
  ck_assert_int_eq(tfg_devices_count(ds), 3);
  for (int k = 0; k < 2; k++) {
    const tfg_device *g = tfg_devices_gpu(ds, k);
    char hw[64];
    snprintf(hw, sizeof hw, "cuda:0 (logical %d of 2; not found)", k + 1);
    ck_assert_int_eq(g->kind, TFG_DEVICE_CUDA);
    ck_assert_int_eq(g->physical, 0);
    ck_assert_str_eq(g->hardware, hw);
    ck_assert_int_eq(g->memory, 30 * GiB);
    ck_assert(g->flops == 67e12 && g->mem_bw == 3.35e12 && g->link_bw == 900e9);
  }
  tfg_devices_free(ds);
}
END_TEST

START_TEST(sim_h100_times_8) {
  tfg_devices *ds = parse_ok("sim:h100*8");
  ck_assert_int_eq(tfg_devices_gpus(ds), 8);
  for (int k = 0; k < 8; k++) {
    const tfg_device *g = tfg_devices_gpu(ds, k);
    ck_assert_int_eq(g->kind, TFG_DEVICE_SIM);
    ck_assert_str_eq(g->hardware, "sim:h100");
    ck_assert_int_eq(g->physical, k); /* eight separate hypothetical GPUs */
    ck_assert_int_eq(g->memory, 80 * GiB);
    ck_assert(g->flops == 67e12 && g->mem_bw == 3.35e12 && g->link_bw == 900e9);
  }
  tfg_devices_free(ds);
}
END_TEST

/* sim:h100*8x4: 4 nodes of 8, numbered in order; within a node the
 * NVLink of the table, between nodes its InfiniBand (400 Gb/s per GPU);
 * a later multi-node entry takes the next nodes. */
START_TEST(sim_nodes) {
  tfg_devices *ds = parse_ok("sim:h100*8x4");
  ck_assert_int_eq(tfg_devices_gpus(ds), 32);
  ck_assert_int_eq(tfg_devices_nodes(ds), 4);
  for (int k = 0; k < 32; k++) ck_assert_int_eq(tfg_devices_gpu(ds, k)->node, k / 8);
  ck_assert_int_eq(tfg_devices_gpu(ds, 31)->physical, 31);
  ck_assert(tfg_devices_bw(ds, 1, 8) == 900e9);  /* gpu:0 and gpu:7: one node */
  ck_assert(tfg_devices_bw(ds, 1, 9) == 50e9);   /* gpu:0 and gpu:8: two */
  ck_assert(tfg_devices_bw(ds, 32, 25) == 900e9); /* gpu:31 and gpu:24: node 3 both */
  ck_assert(tfg_devices_bw(ds, 32, 24) == 50e9);  /* gpu:31 and gpu:23: nodes 3 and 2 */
  tfg_devices_free(ds);
  ds = parse_ok("sim:a100*2x2,sim:h100*2x2");
  ck_assert_int_eq(tfg_devices_nodes(ds), 4);
  ck_assert_int_eq(tfg_devices_gpu(ds, 4)->node, 2);
  ck_assert(tfg_devices_bw(ds, 1, 3) == 25e9); /* a100s on nodes 0 and 1: HDR 200 Gb/s */
  ck_assert(tfg_devices_bw(ds, 3, 5) == 25e9); /* an a100 and an h100: the slower network */
  tfg_devices_free(ds);
  ds = parse_ok("sim:h100*2x2,sim:h100*3"); /* a plain entry after nodes: a node of its own */
  ck_assert_int_eq(tfg_devices_nodes(ds), 3);
  ck_assert_int_eq(tfg_devices_gpu(ds, 4)->node, 2);
  ck_assert_int_eq(tfg_devices_gpu(ds, 6)->node, 2);
  tfg_devices_free(ds);
  ds = parse_ok("sim:h100*2,sim:h100*2x2"); /* nodes after a plain entry: after its node */
  ck_assert_int_eq(tfg_devices_gpu(ds, 1)->node, 0);
  ck_assert_int_eq(tfg_devices_gpu(ds, 2)->node, 1);
  ck_assert_int_eq(tfg_devices_gpu(ds, 5)->node, 2);
  tfg_devices_free(ds);
  ds = parse_ok("sim:h100*8");
  ck_assert_int_eq(tfg_devices_nodes(ds), 1);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(mixed_entries) {
  tfg_devices *ds = parse_ok("cuda:0,cuda:1*2,host");
  ck_assert_int_eq(tfg_devices_count(ds), 5);
  const tfg_device *g0 = tfg_devices_gpu(ds, 0), *g1 = tfg_devices_gpu(ds, 1),
                   *g2 = tfg_devices_gpu(ds, 2), *g3 = tfg_devices_gpu(ds, 3);
  ck_assert_str_eq(g0->name, "gpu:0");
  ck_assert_str_eq(g0->hardware, "cuda:0 (not found)");
  ck_assert_int_eq(g0->physical, 0);
  ck_assert_int_eq(g0->memory, 80 * GiB);
  ck_assert_str_eq(g1->hardware, "cuda:1 (logical 1 of 2; not found)");
  ck_assert_str_eq(g2->hardware, "cuda:1 (logical 2 of 2; not found)");
  ck_assert_int_eq(g1->physical, 1);
  ck_assert_int_eq(g2->physical, 1);
  ck_assert_int_eq(g1->memory, 40 * GiB); /* two logical devices split one GPU */
  ck_assert_int_eq(g3->kind, TFG_DEVICE_HOST);
  ck_assert_str_eq(g3->name, "gpu:3");
  ck_assert_str_eq(g3->hardware, "host device 0");
  ck_assert_int_eq(g3->memory, phys_memory() / 4);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(gpu_k_mapping) {
  tfg_devices *ds = parse_ok("sim:a100,host*2,sim:cpu");
  ck_assert_int_eq(tfg_devices_gpus(ds), 4);
  for (int k = 0; k < 4; k++) {
    ck_assert_ptr_eq(tfg_devices_gpu(ds, k), tfg_devices_at(ds, k + 1));
    ck_assert_int_eq(tfg_devices_gpu(ds, k)->index, k + 1);
  }
  ck_assert_ptr_null(tfg_devices_gpu(ds, 4));
  ck_assert_ptr_null(tfg_devices_gpu(ds, -1));
  ck_assert_str_eq(tfg_devices_gpu(ds, 1)->hardware, "host device 0");
  ck_assert_str_eq(tfg_devices_gpu(ds, 2)->hardware, "host device 1");
  ck_assert_int_eq(tfg_devices_gpu(ds, 0)->physical, 0);
  ck_assert_int_eq(tfg_devices_gpu(ds, 3)->physical, 1); /* the second sim device */
  ck_assert_int_eq(tfg_devices_gpu(ds, 3)->memory, 64 * GiB);
  ck_assert(tfg_devices_gpu(ds, 3)->flops == 1e12);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(case_blanks_and_caps) {
  tfg_devices *ds = parse_ok(" SIM:H200 , sim:A100:40g,Sim:h100:1T,HOST*1:1024 ");
  ck_assert_int_eq(tfg_devices_gpus(ds), 4);
  ck_assert_str_eq(tfg_devices_gpu(ds, 0)->hardware, "sim:h200");
  ck_assert_int_eq(tfg_devices_gpu(ds, 0)->memory, 141 * GiB);
  ck_assert(tfg_devices_gpu(ds, 0)->mem_bw == 4.8e12);
  ck_assert_str_eq(tfg_devices_gpu(ds, 1)->hardware, "sim:a100");
  ck_assert_int_eq(tfg_devices_gpu(ds, 1)->memory, 40 * GiB);
  ck_assert(tfg_devices_gpu(ds, 1)->flops == 19.5e12 && tfg_devices_gpu(ds, 1)->link_bw == 600e9);
  ck_assert_int_eq(tfg_devices_gpu(ds, 2)->memory, 80 * GiB); /* a cap never adds memory */
  ck_assert_int_eq(tfg_devices_gpu(ds, 3)->memory, 1024);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(limits_of_counts) {
  tfg_devices *ds = parse_ok("sim:h100*64,sim:h100*64,sim:h100*64,sim:h100*64");
  ck_assert_int_eq(tfg_devices_gpus(ds), 256);
  ck_assert_str_eq(tfg_devices_gpu(ds, 255)->name, "gpu:255");
  ck_assert_int_eq(tfg_devices_gpu(ds, 255)->physical, 255);
  tfg_devices_free(ds);
  ds = parse_ok("cuda:255*64");
  ck_assert_int_eq(tfg_devices_gpus(ds), 64);
  ck_assert_int_eq(tfg_devices_gpu(ds, 63)->physical, 255);
  ck_assert_str_eq(tfg_devices_gpu(ds, 63)->hardware,
                   "cuda:255 (logical 64 of 64; not found)");
  tfg_devices_free(ds);
}
END_TEST

START_TEST(memory_limit_applies) {
  tfg_devices *ds = parse_ok("sim:h100,host:512M,cuda:0:10G");
  tfg_devices_limit(ds, 20 * GiB);
  ck_assert_int_eq(tfg_devices_at(ds, 0)->memory,
                   phys_memory() < 20 * GiB ? phys_memory() : 20 * GiB);
  ck_assert_int_eq(tfg_devices_gpu(ds, 0)->memory, 20 * GiB);
  ck_assert_int_eq(tfg_devices_gpu(ds, 1)->memory, 512 * MiB);
  ck_assert_int_eq(tfg_devices_gpu(ds, 2)->memory, 10 * GiB);
  tfg_devices_limit(ds, 100 * MiB);
  for (int i = 0; i < tfg_devices_count(ds); i++)
    ck_assert_int_eq(tfg_devices_at(ds, i)->memory, 100 * MiB);
  tfg_devices_free(ds);
}
END_TEST

/* ---- sizes -------------------------------------------------------------- */

START_TEST(size_parse_values) {
  static const struct { const char *s; int64_t v; } ok[] = {
      {"1", 1},
      {"1024", 1024},
      {"512B", 512},
      {"1k", KiB},
      {"4K", 4 * KiB},
      {"512M", 512 * MiB},
      {"512MiB", 512 * MiB},
      {"512mib", 512 * MiB},
      {"512MB", 512 * MiB},
      {"30G", 30 * GiB},
      {"30g", 30 * GiB},
      {"30GB", 30 * GiB},
      {"2T", 2 * TiB},
      {"2TiB", 2 * TiB},
      {"007M", 7 * MiB},
      {"9223372036854775807", INT64_MAX},
      {"8388607T", 8388607 * TiB},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int64_t v = -1;
    ck_assert_msg(tfg_size_parse(ok[i].s, &v), "'%s' should parse", ok[i].s);
    ck_assert_msg(v == ok[i].v, "'%s' gave %lld", ok[i].s, (long long)v);
  }
  static const char *const bad[] = {
      "", "0", "0G", "-1", "-1G", "+1G", "G", "1.5G", " 1G", "1G ", "1 G", "1X", "1GiBB",
      "1iB", "1Gi", "1KK", "abc", "9223372036854775808", "8388608T", "99999999999999999999",
      "1B2",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = 42;
    ck_assert_msg(!tfg_size_parse(bad[i], &v), "'%s' should not parse", bad[i]);
    ck_assert_int_eq(v, 42);
  }
  ck_assert(!tfg_size_parse(NULL, NULL));
}
END_TEST

START_TEST(size_format_text) {
  static const struct { int64_t v; const char *s; } cases[] = {
      {0, "0 B"},
      {512, "512 B"},
      {1023, "1023 B"},
      {1024, "1.0 KiB"},
      {1536, "1.5 KiB"},
      {512 * MiB, "512.0 MiB"},
      {MiB - 1, "1.0 MiB"},
      {80 * GiB, "80.0 GiB"},
      {141 * GiB, "141.0 GiB"},
      {30 * GiB + 512 * MiB, "30.5 GiB"},
      {3 * TiB, "3.0 TiB"},
      {INT64_MAX, "8.0 EiB"},
      {-2048, "-2.0 KiB"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *s = size_str(cases[i].v);
    ck_assert_str_eq(s, cases[i].s);
    free(s);
  }
  tfg_strbuf b = {0};
  tfg_strbuf_puts(&b, "cap ");
  tfg_size_format(&b, 2 * GiB); /* appends */
  ck_assert_str_eq(b.data, "cap 2.0 GiB");
  tfg_strbuf_free(&b);
}
END_TEST

/* ---- describe ----------------------------------------------------------- */

/* The line of text that starts with prefix, or fails. */
static void assert_line(const char *text, const char *line) {
  size_t n = strlen(line);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len == n && memcmp(p, line, n) == 0) return;
    if (!nl) break;
    p = nl + 1;
  }
  ck_abort_msg("line not found:\n%s\nin:\n%s", line, text);
}

START_TEST(describe_table) {
  tfg_devices *ds = parse_ok("cuda:0*2:30G,host*2:1G,sim:h100");
  char *t = describe(ds);
  assert_line(t, "device  hardware                            memory      "
                 "f32 peak    memory bw  link bw");
  assert_line(t, "gpu:0   cuda:0 (logical 1 of 2; not found)  30.0 GiB    "
                 "67 TFLOP/s  3.35 TB/s  900 GB/s");
  assert_line(t, "gpu:1   cuda:0 (logical 2 of 2; not found)  30.0 GiB    "
                 "67 TFLOP/s  3.35 TB/s  900 GB/s");
  assert_line(t, "gpu:2   host device 0                       1.0 GiB     "
                 "50 GFLOP/s  20 GB/s    10 GB/s");
  assert_line(t, "gpu:3   host device 1                       1.0 GiB     "
                 "50 GFLOP/s  20 GB/s    10 GB/s");
  assert_line(t, "gpu:4   sim:h100                            80.0 GiB    "
                 "67 TFLOP/s  3.35 TB/s  900 GB/s");
  assert_line(t, "physical devices:");
  /* Why it was not found depends on the build and the machine (no CUDA
   * backend, no driver, no device): the probe's own words. */
  const char *why = NULL;
  tfg_discover_gpus(NULL, &why, NULL);
  char line[160];
  snprintf(line, sizeof line, "  cuda:0 (not found: %s): gpu:0, gpu:1", why);
  assert_line(t, line);
  assert_line(t, "  sim:h100 #0 (hypothetical): gpu:4");
  /* The host CPU line depends on the machine: check its shape. */
  const char *h = strstr(t, "\n  host CPU (");
  ck_assert_ptr_nonnull(h);
  const char *eol = strchr(h + 1, '\n');
  ck_assert_ptr_nonnull(eol);
  ck_assert(eol - h > 26 && memcmp(eol - 26, " GiB): cpu:0, gpu:2, gpu:3", 26) == 0);
  /* cpu:0's row and the host line come before the others. */
  ck_assert_ptr_nonnull(strstr(t, "\ncpu:0   host CPU ("));
  ck_assert(strstr(t, "host CPU (") < strstr(t, "gpu:0"));
  ck_assert(h < strstr(t, "  cuda:0 (not found"));
  free(t);
  tfg_devices_free(ds);
}
END_TEST

START_TEST(describe_sim_only) {
  tfg_devices *ds = parse_ok("sim:a100*2");
  char *t = describe(ds);
  /* The minimum column widths keep this independent of the machine. */
  assert_line(t, "device  hardware                  memory      f32 peak      memory bw  link bw");
  assert_line(t, "gpu:0   sim:a100                  80.0 GiB    19.5 TFLOP/s  2.04 TB/s  600 GB/s");
  assert_line(t, "gpu:1   sim:a100                  80.0 GiB    19.5 TFLOP/s  2.04 TB/s  600 GB/s");
  assert_line(t, "  sim:a100 #0 (hypothetical): gpu:0");
  assert_line(t, "  sim:a100 #1 (hypothetical): gpu:1");
  const char *h = strstr(t, "\n  host CPU (");
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(strstr(h, "): cpu:0\n"));
  free(t);
  tfg_devices_free(ds);
}
END_TEST

/* ---- default ------------------------------------------------------------ */

START_TEST(default_no_gpus) {
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  const char *notice = "unset";
  ck_assert_int_eq(tfg_devices_default(d, 0, NULL, &ds, &notice), TFG_OK);
  ck_assert_ptr_null(notice);
  ck_assert_int_eq(tfg_devices_count(ds), 1);
  ck_assert_int_eq(tfg_devices_gpus(ds), 0);
  ck_assert_ptr_null(tfg_devices_gpu(ds, 0));
  ck_assert_str_eq(tfg_devices_at(ds, 0)->name, "cpu:0");
  ck_assert_uint_eq(tfg_diag_error_count(d), 0);
  tfg_devices_free(ds);
  tfg_diag_free(d);
}
END_TEST

/* The notice about host devices: "tfg: no GPU found (WHY); REST", WHY
 * being what the probe says (no driver, no device, a build without CUDA),
 * which depends on the machine and the build. */
static void assert_notice(const char *notice, const char *rest) {
  ck_assert_ptr_nonnull(notice);
  static const char head[] = "tfg: no GPU found (";
  ck_assert_msg(strncmp(notice, head, sizeof head - 1) == 0, "notice '%s'", notice);
  const char *close = strstr(notice, "); ");
  ck_assert_msg(close != NULL && strcmp(close + 3, rest) == 0, "notice '%s' does not end with '; %s'", notice, rest);
}

START_TEST(default_two_gpus) {
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  const char *notice = NULL;
  ck_assert_int_eq(tfg_devices_default(d, 2, NULL, &ds, &notice), TFG_OK);
  assert_notice(notice, "gpu:0..gpu:1 are 2 host devices");
  ck_assert_ptr_nonnull(tfg_devices_no_gpu(ds));
  ck_assert_int_eq(tfg_devices_count(ds), 3);
  for (int k = 0; k < 2; k++) {
    const tfg_device *g = tfg_devices_gpu(ds, k);
    char hw[64];
    snprintf(hw, sizeof hw, "host device %d", k);
    ck_assert_int_eq(g->kind, TFG_DEVICE_HOST);
    ck_assert_int_eq(g->index, k + 1);
    ck_assert_str_eq(g->hardware, hw);
    ck_assert_int_eq(g->memory, phys_memory() / 2 / 4);
  }
  tfg_devices_free(ds);

  ck_assert_int_eq(tfg_devices_default(d, 1, NULL, &ds, &notice), TFG_OK);
  assert_notice(notice, "gpu:0 is a host device");
  tfg_devices_free(ds);
  ck_assert_int_eq(tfg_devices_default(d, 3, NULL, &ds, NULL), TFG_OK); /* notice optional */
  ck_assert_int_eq(tfg_devices_gpus(ds), 3);
  tfg_devices_free(ds);
  ck_assert_uint_eq(tfg_diag_error_count(d), 0);

  ck_assert_int_eq(tfg_devices_default(d, 257, NULL, &ds, &notice), TFG_ERR_LIMIT);
  ck_assert_ptr_null(ds);
  ck_assert_ptr_null(notice);
  ck_assert_uint_eq(tfg_diag_error_count(d), 1);
  tfg_diag_free(d);
}
END_TEST

/* Under mpirun the ranks of a machine share its GPUs: 8 GPUs over 4
 * ranks are two each, in order; 4 over 4 one each; 3 over 2 split 1 and
 * 2 (every GPU used once); 2 over 4 go round (ranks 0 and 2 on GPU 0). */
START_TEST(local_share) {
  static const struct { int found, rank, size, first, end; } cases[] = {
      {8, 0, 4, 0, 2}, {8, 3, 4, 6, 8}, {4, 2, 4, 2, 3}, {3, 0, 2, 0, 1}, {3, 1, 2, 1, 3},
      {2, 0, 4, 0, 1}, {2, 2, 4, 0, 1}, {2, 3, 4, 1, 2}, {5, 0, 1, 0, 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int first = -1, end = -1;
    tfg_devices_local_share(cases[i].found, cases[i].rank, cases[i].size, &first, &end);
    ck_assert_msg(first == cases[i].first && end == cases[i].end, "case %zu: [%d, %d), want [%d, %d)", i, first, end,
                  cases[i].first, cases[i].end);
  }
}
END_TEST

/* ---- malformed specs ---------------------------------------------------- */

/* Each spec has one bad entry at [off, off+len): exactly one error,
 * located there, with the caret drawn under it. */
static const struct bad_spec {
  const char *spec;
  unsigned off, len;
  const char *msg; /* a part of the error message */
} BAD[] = {
    {"", 0, 0, "empty --devices list"},
    {"  ", 0, 2, "empty --devices list"},
    {"host,,host", 5, 0, "empty device entry"},
    {"host,", 5, 0, "empty device entry"},
    {"gpu*2", 0, 5, "unknown device kind `gpu`"},
    {"host,gpu:1", 5, 5, "unknown device kind `gpu`"},
    {"host2", 0, 5, "unknown device kind `host2`"},
    {"cpu", 0, 3, "cpu:0 is always present"},
    {"cuda*2", 0, 6, "needs a device number"},
    {"cuda:", 0, 5, "bad CUDA device number"},
    {"cuda:x", 0, 6, "bad CUDA device number"},
    {"host,cuda:256", 5, 8, "bad CUDA device number"},
    {"cuda:0x", 0, 7, "unexpected `x` after `cuda:0`"},
    {"sim:h900*2", 0, 10, "unknown sim model `h900`"},
    {"sim:", 0, 4, "missing sim model"},
    {"host*0", 0, 6, "bad device count `*0`"},
    {"host*65", 0, 7, "bad device count `*65`"},
    {"host*", 0, 5, "bad device count `*`"},
    {"host*2x:1G", 0, 10, "only sim devices come in nodes"},
    {"host*2x2", 0, 8, "`x2` in `host*2x2`: only sim devices come in nodes"},
    {"sim:h100*8x0", 0, 12, "bad node count `x0`"},
    {"sim:h100*8x", 0, 11, "bad node count `x`"},
    {"sim:h100*8x4y", 0, 13, "bad node count `x4y`"},
    {"host*99999999999999999999", 0, 25, "bad device count"},
    {"host:0", 0, 6, "bad memory size `0`"},
    {"host:-1G", 0, 8, "bad memory size `-1G`"},
    {"host:12Q", 0, 8, "bad memory size `12Q`"},
    {"host:", 0, 5, "bad memory size ``"},
    {"cuda:1,host:99999999999T", 7, 17, "bad memory size `99999999999T`"},
    {"host:30G:1", 0, 10, "bad memory size `30G:1`"},
    {"cuda:0,cuda:0", 7, 6, "cuda:0 is listed twice"},
    {"sim:h100*64,sim:h100*64,sim:h100*64,sim:h100*64,host", 48, 4,
     "too many GPU devices: `host` makes 257 (the limit is 256)"},
    {" host*2 , sim:x ", 10, 5, "unknown sim model `x`"},
};

START_TEST(malformed_spec) {
  const struct bad_spec *b = &BAD[_i];
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = (tfg_devices *)&ds; /* must be reset to NULL */
  ck_assert_int_eq(tfg_devices_parse(d, b->spec, &ds), TFG_ERR_USAGE);
  ck_assert_ptr_null(ds);
  ck_assert_uint_eq(tfg_diag_error_count(d), 1);
  char *out = test_render(d, false);

  char want[256];
  snprintf(want, sizeof want, "--devices:1:%u: error: ", b->off + 1);
  ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "'%s':\n%s", b->spec, out);
  const char *eol = strchr(out, '\n');
  ck_assert_ptr_nonnull(eol);
  char first[256];
  snprintf(first, sizeof first, "%.*s", (int)(eol - out), out);
  ck_assert_msg(strstr(first, b->msg) != NULL, "'%s': want '%s' in:\n%s", b->spec, b->msg, out);
  /* The source line, then the caret under the entry. */
  snprintf(want, sizeof want, " 1 | %s\n   | %*s^", b->spec, (int)b->off, "");
  ck_assert_msg(strncmp(eol + 1, want, strlen(want)) == 0, "'%s':\n%s", b->spec, out);
  const char *caret = eol + 1 + strlen(want) - 1;
  size_t tildes = strspn(caret + 1, "~");
  ck_assert_msg(tildes == (b->len ? b->len - 1 : 0), "'%s': caret width:\n%s", b->spec, out);
  ck_assert_msg(strstr(out, "\nhelp: ") != NULL, "'%s': no help line:\n%s", b->spec, out);
  free(out);
  tfg_diag_free(d);
}
END_TEST

/* The whole rendered text of a bad spec's diagnostics (with the error
 * count when summary). */
static const struct exact_spec {
  const char *spec;
  bool summary;
  const char *text;
} EXACT[] = {
    {"host*4,sim:h900*2", true,
     "--devices:1:8: error: unknown sim model `h900` in `sim:h900*2`\n"
     " 1 | host*4,sim:h900*2\n"
     "   |        ^~~~~~~~~~\n"
     "help: the sim models are h100, h200, a100 and cpu (e.g. sim:h100*8)\n"
     "1 error\n"},
    {"cuda:0*2:30X", true,
     "--devices:1:1: error: bad memory size `30X` in `cuda:0*2:30X`\n"
     " 1 | cuda:0*2:30X\n"
     "   | ^~~~~~~~~~~~\n"
     "help: a size is a positive whole number of bytes with an optional "
     "K, M, G or T (powers of 1024), e.g. 512M or 30G\n"
     "1 error\n"},
    /* a duplicate GPU: a note points at its first entry */
    {"cuda:0*2, host, cuda:0:8G", false,
     "--devices:1:17: error: cuda:0 is listed twice\n"
     " 1 | cuda:0*2, host, cuda:0:8G\n"
     "   |                 ^~~~~~~~~\n"
     "--devices:1:1: note: cuda:0 is first listed here\n"
     " 1 | cuda:0*2, host, cuda:0:8G\n"
     "   | ^~~~~~~~\n"
     "help: for several logical devices on one GPU write cuda:0*N\n"},
};

START_TEST(malformed_exact_text) {
  const struct exact_spec *x = &EXACT[_i];
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  ck_assert_int_eq(tfg_devices_parse(d, x->spec, &ds), TFG_ERR_USAGE);
  char *out = test_render(d, x->summary);
  ck_assert_str_eq(out, x->text);
  free(out);
  tfg_diag_free(d);
}
END_TEST

START_TEST(every_bad_entry_reported) {
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  ck_assert_int_eq(tfg_devices_parse(d, "host*0,cuda:0,sim:zz,host:1G", &ds), TFG_ERR_USAGE);
  ck_assert_ptr_null(ds);
  ck_assert_uint_eq(tfg_diag_error_count(d), 2);
  char *out = test_render(d, false);
  ck_assert_ptr_nonnull(strstr(out, "--devices:1:1: error: bad device count `*0` in `host*0`"));
  ck_assert_ptr_nonnull(strstr(out, "--devices:1:15: error: unknown sim model `zz`"));
  free(out);
  /* The limit is reported once, however many entries go past it. */
  tfg_diag_clear(d);
  ck_assert_int_eq(
      tfg_devices_parse(d, "sim:h100*64,sim:h100*64,sim:h100*64,sim:h100*64,host,host*3", &ds),
      TFG_ERR_USAGE);
  ck_assert_uint_eq(tfg_diag_error_count(d), 1);
  tfg_diag_free(d);
}
END_TEST

/* ---- the --devices a run short of GPUs is told to use ---------------------- */

static char *suggest(const tfg_gpu_info *gpus, int ngpus, int64_t want) {
  tfg_strbuf b = {0};
  tfg_devices_suggest_for(gpus, ngpus, want, &b);
  return tfg_strbuf_take(&b);
}

/* CLI.md: with one GPU and a program naming more gpu:N, logical devices
 * on that GPU come first; host devices are the alternative, and the only
 * suggestion where there is no GPU. */
START_TEST(suggest_devices) {
  tfg_gpu_info h100 = {.name = "NVIDIA H100 80GB HBM3", .major = 9, .memory = 80 * GiB, .sms = 132};
  tfg_gpu_info two[2] = {h100, h100};
  char *s = suggest(NULL, 0, 2);
  ck_assert_str_eq(s, "--devices host*2 (emulated on the CPU)");
  free(s);
  s = suggest(&h100, 1, 2);
  ck_assert_str_eq(s, "--devices cuda:0*2 (2 logical devices sharing NVIDIA H100 80GB HBM3), or --devices host*2 "
                      "(emulated on the CPU)");
  free(s);
  s = suggest(two, 2, 4);
  ck_assert_str_eq(s, "--devices cuda:0*2,cuda:1*2 (2 logical devices on each of the 2 GPUs), or --devices host*4 "
                      "(emulated on the CPU)");
  free(s);
  s = suggest(two, 2, 3);
  ck_assert_str_eq(s, "--devices cuda:0*3 (3 logical devices sharing GPU 0), or --devices host*3 (emulated on the CPU)");
  free(s);
  s = suggest(two, 2, 2); /* --devices gave fewer than the machine has */
  ck_assert_str_eq(s, "--devices cuda:0,cuda:1 (one logical device per GPU), or --devices host*2 (emulated on the CPU)");
  free(s);
}
END_TEST

Suite *suite_device(void) {
  Suite *s = suite_create("device");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, cpu0_always_first);
  tcase_add_test(tc, host_times_4);
  tcase_add_test(tc, host_times_4_sized);
  tcase_add_test(tc, cuda_logical_sized);
  tcase_add_test(tc, sim_h100_times_8);
  tcase_add_test(tc, mixed_entries);
  tcase_add_test(tc, gpu_k_mapping);
  tcase_add_test(tc, case_blanks_and_caps);
  tcase_add_test(tc, limits_of_counts);
  tcase_add_test(tc, memory_limit_applies);
  tcase_add_test(tc, size_parse_values);
  tcase_add_test(tc, size_format_text);
  tcase_add_test(tc, describe_table);
  tcase_add_test(tc, describe_sim_only);
  tcase_add_test(tc, default_no_gpus);
  tcase_add_test(tc, default_two_gpus);
  tcase_add_test(tc, local_share);
  tcase_add_test(tc, sim_nodes);
  tcase_add_test(tc, suggest_devices);
  tcase_add_loop_test(tc, malformed_spec, 0, (int)(sizeof BAD / sizeof BAD[0]));
  tcase_add_loop_test(tc, malformed_exact_text, 0, (int)(sizeof EXACT / sizeof EXACT[0]));
  tcase_add_test(tc, every_bad_entry_reported);
  suite_add_tcase(s, tc);
  return s;
}
