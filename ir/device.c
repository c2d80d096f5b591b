/* ir/device.c: the device list, the sim table and byte sizes
 * (ir/device.h; the list's body in ir/device_impl.h).
 *
 * Only descriptions: the numbers here are the planner's estimates and the
 * capacities the list's maker computed. How a run's list is made from
 * --devices or from the hardware found is runtime/device.c's. */
#include "ir/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/assert.h"
#include "ir/device_impl.h"

#define GiB ((int64_t)1 << 30)

/* ---- the sim table --------------------------------------------------- */

/* Published peak numbers, from NVIDIA's data sheets: "NVIDIA H100 Tensor
 * Core GPU" (SXM5 column), "NVIDIA H200 Tensor Core GPU" (SXM) and
 * "NVIDIA A100 Tensor Core GPU" (80GB SXM4 column). The sheets' "GB" of
 * HBM is read as GiB: HBM stacks are binary-sized and the drivers report
 * about that much (an H100 shows ~79.6 GiB usable). Bandwidths and FLOP/s
 * are decimal (3.35 TB/s is 3.35e12 bytes/s). "cpu" is not a product: a
 * generic 64 GiB server socket, for planning a CPU cluster. */
static const tfg_sim_model SIM_MODELS[] = {
    /* H100 SXM5: 80 GB HBM3, 3.35 TB/s, FP32 67 TFLOPS, NVLink 900 GB/s;
     * between nodes a 400 Gb/s InfiniBand NDR port per GPU (DGX H100) */
    {"h100", 80 * GiB, 67e12, 3.35e12, 900e9, 50e9},
    /* H200 SXM: 141 GB HBM3e, 4.8 TB/s, FP32 67 TFLOPS, NVLink 900 GB/s; NDR 400 Gb/s */
    {"h200", 141 * GiB, 67e12, 4.8e12, 900e9, 50e9},
    /* A100 80GB SXM4: 2,039 GB/s, FP32 19.5 TFLOPS, NVLink 600 GB/s; HDR 200 Gb/s (DGX A100) */
    {"a100", 80 * GiB, 19.5e12, 2.039e12, 600e9, 25e9},
    /* a generic host: ~1 TFLOP/s, 100 GB/s DRAM, 25 GB/s network link */
    {"cpu", 64 * GiB, 1e12, 100e9, 25e9, 25e9},
};
enum { NSIM_MODELS = sizeof SIM_MODELS / sizeof SIM_MODELS[0] };

/* A GPU that cannot be probed or matched: the planner still needs
 * numbers, and an H100 is the GPU people most likely have. */
#define GPU_ESTIMATE (&SIM_MODELS[0])

const tfg_sim_model *tfg_sim_model_find(const char *s, size_t n) {
  for (int i = 0; i < NSIM_MODELS; i++)
    if (strlen(SIM_MODELS[i].name) == n && strncasecmp(SIM_MODELS[i].name, s, n) == 0) return &SIM_MODELS[i];
  return NULL;
}

const tfg_sim_model *tfg_sim_model_of_gpu(const char *gpu_name) {
  if (!gpu_name) return GPU_ESTIMATE;
  for (int i = 0; i < NSIM_MODELS; i++) {
    if (strcmp(SIM_MODELS[i].name, "cpu") == 0) continue;
    for (const char *p = gpu_name; *p; p++)
      if (strncasecmp(p, SIM_MODELS[i].name, strlen(SIM_MODELS[i].name)) == 0) return &SIM_MODELS[i];
  }
  return GPU_ESTIMATE;
}

/* Host devices: a deliberately modest estimate of what one worker thread
 * gets (one core with SIMD and OpenBLAS: tens of GFLOP/s; a share of the
 * DRAM bandwidth; copies between host devices are memcpy on one machine).
 * cpu:0 gets the same numbers: its work is run by one worker too, and a
 * placer told cpu:0 is as fast as all cores together would crowd it. */
#define HOST_FLOPS 50e9
#define HOST_MEM_BW 20e9
#define HOST_LINK_BW 10e9

/* ---- the device list ------------------------------------------------- */

tfg_devices *tfg_devices_new(int64_t host_memory, long host_cores, tfg_devices_suggest_fn suggest) {
  TFG_ASSERT(suggest != NULL);
  tfg_devices *ds = calloc(1, sizeof *ds);
  TFG_ASSERT(ds != NULL);
  ds->dev = calloc(1 + TFG_DEVICES_MAX_GPUS, sizeof *ds->dev);
  TFG_ASSERT(ds->dev != NULL);
  ds->host_memory = host_memory;
  ds->suggest = suggest;
  tfg_device *c = &ds->dev[0];
  c->index = 0;
  c->kind = TFG_DEVICE_CPU;
  snprintf(c->name, sizeof c->name, "cpu:0");
  snprintf(c->hardware, sizeof c->hardware, "host CPU (%ld core%s)", host_cores, host_cores == 1 ? "" : "s");
  c->physical = 0;
  c->memory = host_memory;
  c->flops = HOST_FLOPS;
  c->mem_bw = HOST_MEM_BW;
  c->link_bw = HOST_LINK_BW;
  c->net_bw = HOST_LINK_BW;
  ds->n = 1;
  return ds;
}

tfg_device *tfg_devices_push(tfg_devices *ds, tfg_device_kind kind, int physical, int64_t memory, double flops,
                             double mem_bw, double link_bw) {
  TFG_ASSERT(ds->n < 1 + TFG_DEVICES_MAX_GPUS);
  tfg_device *g = &ds->dev[ds->n];
  g->index = ds->n;
  g->kind = kind;
  snprintf(g->name, sizeof g->name, "gpu:%d", ds->n - 1);
  g->physical = physical;
  g->memory = memory;
  g->flops = flops;
  g->mem_bw = mem_bw;
  g->link_bw = link_bw;
  g->net_bw = link_bw;
  ds->n++;
  return g;
}

/* How many devices of this kind the list already has: host device K's K. */
static int count_kind(const tfg_devices *ds, tfg_device_kind kind) {
  int k = 0;
  for (int i = 0; i < ds->n; i++) k += ds->dev[i].kind == kind;
  return k;
}

void tfg_devices_add_host(tfg_devices *ds, int count, int64_t cap) {
  int64_t share = ds->host_memory / count;
  int64_t memory = cap ? (cap < share ? cap : share) : share / 4;
  int k = count_kind(ds, TFG_DEVICE_HOST);
  for (int i = 0; i < count; i++) {
    tfg_device *g = tfg_devices_push(ds, TFG_DEVICE_HOST, 0, memory, HOST_FLOPS, HOST_MEM_BW, HOST_LINK_BW);
    snprintf(g->hardware, sizeof g->hardware, "host device %d", k + i);
  }
}

void tfg_devices_add_sim(tfg_devices *ds, const tfg_sim_model *m, int count, int nodes, int64_t cap) {
  int64_t memory = cap && cap < m->memory ? cap : m->memory;
  int k = count_kind(ds, TFG_DEVICE_SIM);
  /* the nodes of a multi-node entry are machines of their own, after
   * those of the GPU entries before (cpu:0 is node 0's host); so is a
   * plain entry after one (a list of nodes never puts it on node 0) */
  int first = 0, last = 0;
  for (int i = 1; i < ds->n; i++)
    if (ds->dev[i].node > last) last = ds->dev[i].node;
  bool in_nodes = false;
  for (int i = 1; i < ds->n; i++) in_nodes |= ds->dev[i].kind == TFG_DEVICE_SIM && ds->dev[i].node != ds->dev[1].node;
  if (nodes > 1 && ds->n > 1) first = last + 1;
  if (nodes == 1 && (in_nodes || last > 0)) first = last + 1;
  for (int i = 0; i < count * nodes; i++) {
    tfg_device *g = tfg_devices_push(ds, TFG_DEVICE_SIM, k + i, memory, m->flops, m->mem_bw, m->link_bw);
    snprintf(g->hardware, sizeof g->hardware, "sim:%s", m->name);
    g->net_bw = m->net_bw;
    g->node = first + i / count;
  }
}

double tfg_devices_bw(const tfg_devices *ds, int a, int b) {
  const tfg_device *x = &ds->dev[a], *y = &ds->dev[b];
  if (x->node != y->node) return x->net_bw < y->net_bw ? x->net_bw : y->net_bw;
  return x->link_bw < y->link_bw ? x->link_bw : y->link_bw;
}

int tfg_devices_nodes(const tfg_devices *ds) {
  int n = 0;
  for (int i = 0; i < ds->n; i++)
    if (ds->dev[i].node + 1 > n) n = ds->dev[i].node + 1;
  return n;
}

void tfg_devices_free(tfg_devices *ds) {
  if (!ds) return;
  free(ds->dev);
  free(ds->notice);
  free(ds->no_gpu);
  free(ds);
}

int tfg_devices_count(const tfg_devices *ds) { return ds->n; }

const tfg_device *tfg_devices_at(const tfg_devices *ds, int i) {
  TFG_ASSERT(i >= 0 && i < ds->n);
  return &ds->dev[i];
}

int tfg_devices_gpus(const tfg_devices *ds) { return ds->n - 1; }

const tfg_device *tfg_devices_gpu(const tfg_devices *ds, int k) {
  return k >= 0 && k < ds->n - 1 ? &ds->dev[k + 1] : NULL;
}

void tfg_devices_limit(tfg_devices *ds, int64_t limit) {
  TFG_ASSERT(limit > 0); /* --memory-limit goes through tfg_size_parse */
  for (int i = 0; i < ds->n; i++)
    if (ds->dev[i].memory > limit) ds->dev[i].memory = limit;
}

void tfg_devices_suggest(const tfg_devices *ds, int64_t want, tfg_strbuf *out) { ds->suggest(want, out); }

/* ---- sizes ----------------------------------------------------------- */

/* Digits, then an optional K/M/G/T (powers of 1024) and an optional "B"
 * (or "iB" after a unit letter), all case-insensitive. No sign, no
 * spaces, no fraction; zero and values past INT64_MAX fail. */
bool tfg_size_parse_n(const char *s, size_t n, int64_t *bytes) {
  size_t i = 0;
  uint64_t v = 0;
  if (n == 0 || s[0] < '0' || s[0] > '9') return false;
  for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
    unsigned digit = (unsigned)(s[i] - '0');
    if (v > ((uint64_t)INT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  int shift = 0;
  if (i < n) {
    switch (s[i]) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
    }
    if (shift) i++;
  }
  if (shift && i + 2 == n && (s[i] == 'i' || s[i] == 'I')) i++; /* "MiB" */
  if (i + 1 == n && (s[i] == 'b' || s[i] == 'B')) i++;
  if (i != n || v == 0) return false;
  if (v > ((uint64_t)INT64_MAX >> shift)) return false;
  *bytes = (int64_t)(v << shift);
  return true;
}

bool tfg_size_parse(const char *s, int64_t *bytes) {
  return s != NULL && tfg_size_parse_n(s, strlen(s), bytes);
}

/* Bytes below 1 KiB as "512 B", else one decimal in the largest binary
 * unit that keeps the number at least 1 (1048575 bytes is "1.0 MiB", not
 * "1024.0 KiB"). */
void tfg_size_text(char *buf, size_t cap, int64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  uint64_t mag = bytes < 0 ? (uint64_t)0 - (uint64_t)bytes : (uint64_t)bytes;
  const char *sign = bytes < 0 ? "-" : "";
  if (mag < 1024) {
    snprintf(buf, cap, "%s%u B", sign, (unsigned)mag);
    return;
  }
  int u = 0;
  double v = (double)mag;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    u++;
  }
  if (v >= 1023.95 && u < 6) { /* "%.1f" would round it up to 1024.0 */
    v /= 1024.0;
    u++;
  }
  snprintf(buf, cap, "%s%.1f %s", sign, v, units[u]);
}

void tfg_size_format(tfg_strbuf *out, int64_t bytes) {
  char buf[32];
  tfg_size_text(buf, sizeof buf, bytes);
  tfg_strbuf_puts(out, buf);
}
