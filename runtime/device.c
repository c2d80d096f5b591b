/* runtime/device.c: the logical device list of a run: parsing --devices,
 * the default when it is not given, and `tfg devices` (the list and the
 * sim table themselves are descriptions: ir/device.c).
 *
 * No CUDA header is included here (ARCHITECTURE.md, convention 7): what
 * the machine's GPUs are comes from tfg_discover_gpus (runtime/discover.h,
 * which asks the CUDA backend in builds that have one). A cuda:K entry
 * for a GPU the probe found gets its name and memory; one it did not find
 * (no driver, no such ordinal, a build without CUDA) is taken at its word
 * and described with planning estimates, and refused when a program runs.
 * FLOP/s and bandwidths are always the sim table's numbers for the model
 * the GPU's name matches (H100 when none does): planning estimates.
 *
 * Capacities. Every GPU entry's devices get the same capacity:
 *   - host*N: a quarter of the machine's physical memory divided by N by
 *     default (the rest stays with cpu:0, the data and the OS); a :SIZE
 *     cap may raise that up to the machine's memory divided by N.
 *   - cuda:K*N: the GPU's free memory when probed (else the sim table's
 *     h100 memory) divided by N, less CUDA_RESERVE each (the N logical
 *     devices split one GPU's memory, as TensorFlow's logical devices
 *     do), lowered to :SIZE when given.
 *   - sim:MODEL*N: N separate hypothetical devices, each with the model's
 *     memory, lowered to :SIZE when given.
 * So SIZE never grants a device more than its share of the hardware it
 * lives on; tfg_devices_limit (--memory-limit) lowers every device,
 * cpu:0 included.
 *
 * Spec errors: each bad entry gets exactly one error, located on the
 * entry in a source named "--devices" (made on the first error), with a
 * help line naming what is accepted; every entry is checked, so a spec
 * with two bad entries reports both. */
#include "runtime/device.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/assert.h"
#include "ir/device_impl.h"

#define MiB ((int64_t)1 << 20)

/* Limits of a spec: *COUNT per entry, GPU devices in all, and the
 * largest K of cuda:K (no machine has more; it keeps names short). */
enum { MAX_COUNT = 64, MAX_GPUS = TFG_DEVICES_MAX_GPUS, MAX_CUDA_INDEX = 255 };

/* What each logical device on a probed GPU leaves outside its pool: the
 * CUDA backend's per-stream workspaces (32 MiB for each stream that
 * launches kernels), the cuBLAS and cuDNN handles' own allocations, and
 * the data-error flags. */
#define CUDA_RESERVE (256 * MiB)

/* This machine's suggestion (tfg_devices_suggest of the lists made here). */
static void suggest_here(int64_t want, tfg_strbuf *out);

/* A list holding only cpu:0, on this machine. */
static tfg_devices *devices_new(void) {
  return tfg_devices_new(tfg_discover_host_memory(), tfg_discover_host_cores(), suggest_here);
}

/* The GPU the probe found at ordinal physical, or NULL. */
static const tfg_gpu_info *probed_gpu(int physical) {
  const tfg_gpu_info *info = NULL;
  const char *why = NULL;
  int n = tfg_discover_gpus(&info, &why, NULL);
  return physical >= 0 && physical < n ? &info[physical] : NULL;
}

/* Why the probe has no GPU at ordinal physical, in a few words for
 * `tfg devices`: the probe's own reason when it found none ("no CUDA
 * driver", "no CUDA-capable device", "this build of tfg has no CUDA
 * backend"), else that the machine has fewer GPUs. The words of the
 * notice a default list gives ("tfg: no GPU found (...)"), so a cuda:K
 * entry the machine lacks never reads as a GPU merely left unprobed. */
static const char *gpu_missing(int physical, char *buf, size_t n) {
  const tfg_gpu_info *info = NULL;
  const char *why = NULL;
  int found = tfg_discover_gpus(&info, &why, NULL);
  if (found == 0) return why ? why : "no GPU found";
  snprintf(buf, n, "the machine has %d GPU%s, cuda:0 to cuda:%d; not cuda:%d", found, found == 1 ? "" : "s",
           found - 1, physical);
  return buf;
}

/* Sets g's hardware text, cut to fit (a GPU's name can be long). */
static void set_hardware(tfg_device *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_hardware(tfg_device *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->hardware, sizeof g->hardware, fmt, ap);
  va_end(ap);
}

static void add_cuda(tfg_devices *ds, int physical, int count, int64_t cap) {
  const tfg_gpu_info *gi = probed_gpu(physical);
  const tfg_sim_model *m = tfg_sim_model_of_gpu(gi ? gi->name : NULL);
  int64_t memory = m->memory / count;
  if (gi) {
    int64_t free = tfg_discover_gpu_free(physical);
    if (free < 0) free = gi->memory;
    memory = free / count - CUDA_RESERVE;
    if (memory < 0) memory = 0;
  }
  if (cap && cap < memory) memory = cap;
  for (int i = 0; i < count; i++) {
    tfg_device *g = tfg_devices_push(ds, TFG_DEVICE_CUDA, physical, memory, m->flops, m->mem_bw, m->link_bw);
    if (gi && count == 1)
      set_hardware(g, "cuda:%d %.48s", physical, gi->name);
    else if (gi)
      set_hardware(g, "cuda:%d %.32s (logical %d of %d)", physical, gi->name, i + 1, count);
    else if (count == 1) /* why: on the physical devices' line, which has room for it */
      set_hardware(g, "cuda:%d (not found)", physical);
    else
      set_hardware(g, "cuda:%d (logical %d of %d; not found)", physical, i + 1, count);
  }
}

/* ---- parsing --------------------------------------------------------- */

typedef struct spec_parser {
  tfg_diag *d;
  const char *spec;
  size_t len;
  const tfg_source *src; /* made on the first error */
  bool src_tried;        /* so a refused source is refused (and said) once */
  int errors;
  int gpus;              /* GPU devices of the good entries so far */
  bool over_limit;       /* the MAX_GPUS error was given (once is enough) */
  int cuda_seen[MAX_CUDA_INDEX + 1]; /* 1 + the entry offset of cuda:K, or 0 */
} spec_parser;

static const char HELP_ENTRY[] =
    "a device entry is cuda:K, host or sim:MODEL, each with an optional *COUNT and :SIZE "
    "(e.g. cuda:0*2:30G, host*4:512M, sim:h100*8)";
static const char HELP_SIZE[] =
    "a size is a positive whole number of bytes with an optional K, M, G or T "
    "(powers of 1024), e.g. 512M or 30G";

/* Records an error over spec bytes [off, off+len): the caret goes under
 * the entry. The diag API has no va_list form, so the message is
 * formatted here first. */
static void spec_error(spec_parser *p, size_t off, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void spec_error(spec_parser *p, size_t off, size_t len, const char *fmt, ...) {
  if (!p->src_tried) {
    p->src_tried = true;
    p->src = tfg_diag_add_source(p->d, "--devices", p->spec, p->len);
  }
  tfg_strbuf msg = {0};
  va_list ap;
  va_start(ap, fmt);
  tfg_strbuf_vprintf(&msg, fmt, ap);
  va_end(ap);
  p->errors++;
  if (p->src) {
    tfg_loc loc = tfg_source_loc(p->src, (uint32_t)off, (uint32_t)len);
    tfg_diag_error(p->d, &loc, "%s", msg.data);
  } else { /* too large to be a source (an error says so already) */
    tfg_diag_error(p->d, NULL, "%s", msg.data);
  }
  tfg_strbuf_free(&msg);
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

/* Case-insensitive: does s[0..n) begin with the lower-case word w? */
static bool has_prefix(const char *s, size_t n, const char *w) {
  size_t wl = strlen(w);
  return n >= wl && strncasecmp(s, w, wl) == 0;
}

/* Parses the entry spec[off..end) (blanks around it allowed) and appends
 * its devices to ds; on a bad entry records one error and appends none. */
static void parse_entry(spec_parser *p, tfg_devices *ds, size_t off, size_t end) {
  const char *s = p->spec;
  while (off < end && is_blank(s[off])) off++;
  while (end > off && is_blank(s[end - 1])) end--;
  size_t n = end - off;
  const char *e = s + off; /* the entry, e[0..n) */
  if (n == 0) {
    spec_error(p, off, 0, "empty device entry");
    tfg_diag_help(p->d, "%s", HELP_ENTRY);
    return;
  }

  /* KIND: up to the first '*' or ':' (after the one in cuda:/sim:). */
  tfg_device_kind kind;
  size_t i;
  int cuda = 0;
  const tfg_sim_model *model = NULL;
  if (has_prefix(e, n, "cuda:")) {
    kind = TFG_DEVICE_CUDA;
    i = 5;
    size_t d0 = i;
    long k = 0;
    for (; i < n && e[i] >= '0' && e[i] <= '9'; i++)
      if (k <= MAX_CUDA_INDEX) k = k * 10 + (e[i] - '0');
    if (i == d0 || k > MAX_CUDA_INDEX) {
      spec_error(p, off, n, "bad CUDA device number in `%.*s`", (int)n, e);
      tfg_diag_help(p->d, "cuda:K takes a device number K from 0 to %d, e.g. cuda:0",
                    MAX_CUDA_INDEX);
      return;
    }
    cuda = (int)k;
  } else if (has_prefix(e, n, "sim:")) {
    kind = TFG_DEVICE_SIM;
    i = 4;
    while (i < n && e[i] != '*' && e[i] != ':') i++;
    model = tfg_sim_model_find(e + 4, i - 4);
    if (!model) {
      if (i == 4)
        spec_error(p, off, n, "missing sim model in `%.*s`", (int)n, e);
      else
        spec_error(p, off, n, "unknown sim model `%.*s` in `%.*s`", (int)(i - 4), e + 4,
                   (int)n, e);
      tfg_diag_help(p->d, "the sim models are h100, h200, a100 and cpu (e.g. sim:h100*8)");
      return;
    }
  } else {
    i = 0;
    while (i < n && e[i] != '*' && e[i] != ':') i++;
    if (i == 4 && strncasecmp(e, "host", 4) == 0) {
      kind = TFG_DEVICE_HOST;
    } else {
      if (i == 3 && strncasecmp(e, "cpu", 3) == 0) {
        spec_error(p, off, n, "`%.*s` is not a device entry: cpu:0 is always present",
                   (int)n, e);
        tfg_diag_help(p->d, "--devices lists the GPU entries; %s", HELP_ENTRY);
      } else if (i == 4 && strncasecmp(e, "cuda", 4) == 0) {
        spec_error(p, off, n, "`%.*s` needs a device number: cuda:K", (int)n, e);
        tfg_diag_help(p->d, "%s", HELP_ENTRY);
      } else {
        spec_error(p, off, n, "unknown device kind `%.*s` in `%.*s`", (int)i, e, (int)n, e);
        tfg_diag_help(p->d, "%s", HELP_ENTRY);
      }
      return;
    }
  }

  /* [*COUNT] */
  int count = 1;
  bool counted = i < n && e[i] == '*';
  if (counted) {
    size_t c0 = ++i;
    long c = 0;
    for (; i < n && e[i] >= '0' && e[i] <= '9'; i++)
      if (c <= MAX_COUNT) c = c * 10 + (e[i] - '0');
    if (i == c0 || (i < n && e[i] != ':' && e[i] != 'x') || c < 1 || c > MAX_COUNT) {
      size_t ce = c0;
      while (ce < n && e[ce] != ':' && e[ce] != 'x') ce++;
      spec_error(p, off, n, "bad device count `*%.*s` in `%.*s`", (int)(ce - c0), e + c0,
                 (int)n, e);
      tfg_diag_help(p->d, "a count is a whole number from 1 to %d, e.g. host*4", MAX_COUNT);
      return;
    }
    count = (int)c;
  }

  /* [xNODES] after a count: sim devices only, for planning a cluster */
  int nodes = 1;
  if (counted && i < n && e[i] == 'x') {
    size_t x0 = ++i;
    long m = 0;
    for (; i < n && e[i] >= '0' && e[i] <= '9'; i++)
      if (m <= MAX_COUNT) m = m * 10 + (e[i] - '0');
    if (kind != TFG_DEVICE_SIM) {
      spec_error(p, off, n, "`x%.*s` in `%.*s`: only sim devices come in nodes", (int)(i - x0), e + x0, (int)n, e);
      tfg_diag_help(p->d, "sim:MODEL*NxM plans M nodes of N devices, e.g. sim:h100*8x4");
      return;
    }
    if (i == x0 || (i < n && e[i] != ':') || m < 1 || m > MAX_COUNT) {
      size_t xe = x0;
      while (xe < n && e[xe] != ':') xe++;
      spec_error(p, off, n, "bad node count `x%.*s` in `%.*s`", (int)(xe - x0), e + x0, (int)n, e);
      tfg_diag_help(p->d, "a node count is a whole number from 1 to %d, e.g. sim:h100*8x4", MAX_COUNT);
      return;
    }
    nodes = (int)m;
  }

  /* [:SIZE] */
  int64_t cap = 0;
  if (i < n && e[i] == ':') {
    i++;
    if (!tfg_size_parse_n(e + i, n - i, &cap)) {
      spec_error(p, off, n, "bad memory size `%.*s` in `%.*s`", (int)(n - i), e + i, (int)n,
                 e);
      tfg_diag_help(p->d, "%s", HELP_SIZE);
      return;
    }
    i = n;
  }
  if (i != n) {
    spec_error(p, off, n, "unexpected `%.*s` after `%.*s` in device entry `%.*s`",
               (int)(n - i), e + i, (int)i, e, (int)n, e);
    tfg_diag_help(p->d, "%s", HELP_ENTRY);
    return;
  }

  if (kind == TFG_DEVICE_CUDA) {
    /* Two entries for one GPU would make two pools that each believe
     * they own its memory; *N is how one GPU is split. */
    if (p->cuda_seen[cuda]) {
      size_t first = (size_t)p->cuda_seen[cuda] - 1;
      spec_error(p, off, n, "cuda:%d is listed twice", cuda);
      if (p->src) {
        size_t fe = first;
        while (fe < p->len && p->spec[fe] != ',' && !is_blank(p->spec[fe])) fe++;
        tfg_loc at = tfg_source_loc(p->src, (uint32_t)first, (uint32_t)(fe - first));
        tfg_diag_note(p->d, &at, "cuda:%d is first listed here", cuda);
      }
      tfg_diag_help(p->d, "for several logical devices on one GPU write cuda:%d*N", cuda);
      return;
    }
    p->cuda_seen[cuda] = (int)off + 1;
  }

  if (p->gpus + count * nodes > MAX_GPUS) {
    if (!p->over_limit) {
      spec_error(p, off, n, "too many GPU devices: `%.*s` makes %d (the limit is %d)", (int)n,
                 e, p->gpus + count * nodes, MAX_GPUS);
      tfg_diag_help(p->d, "--devices lists at most %d GPU devices in all, %d per entry",
                    MAX_GPUS, MAX_COUNT);
    } else
      p->errors++; /* said once; later entries only keep the spec failed */
    p->over_limit = true;
    return;
  }
  p->gpus += count * nodes;
  if (p->errors) return; /* the list is dropped anyway */
  switch (kind) {
  case TFG_DEVICE_HOST: tfg_devices_add_host(ds, count, cap); break;
  case TFG_DEVICE_CUDA: add_cuda(ds, cuda, count, cap); break;
  case TFG_DEVICE_SIM: tfg_devices_add_sim(ds, model, count, nodes, cap); break;
  case TFG_DEVICE_CPU: TFG_ASSERT(!"cpu is not an entry kind"); break;
  }
}

tfg_status tfg_devices_parse(tfg_diag *d, const char *spec, tfg_devices **out) {
  TFG_ASSERT(d != NULL && spec != NULL && out != NULL);
  *out = NULL;
  spec_parser *p = calloc(1, sizeof *p);
  TFG_ASSERT(p != NULL);
  p->d = d;
  p->spec = spec;
  p->len = strlen(spec);
  if (p->len > UINT32_MAX) p->len = UINT32_MAX; /* add_source refuses it anyway */
  tfg_devices *ds = devices_new();

  size_t k = 0;
  while (k < p->len && is_blank(spec[k])) k++;
  if (k == p->len) {
    spec_error(p, 0, p->len, "empty --devices list");
    tfg_diag_help(p->d, "%s", HELP_ENTRY);
  } else {
    for (size_t start = 0;;) {
      size_t end = start;
      while (end < p->len && spec[end] != ',') end++;
      parse_entry(p, ds, start, end);
      if (end == p->len) break;
      start = end + 1;
    }
  }

  tfg_status st = p->errors ? TFG_ERR_USAGE : TFG_OK;
  free(p);
  if (st != TFG_OK) {
    tfg_devices_free(ds);
    return st;
  }
  *out = ds;
  return TFG_OK;
}

void tfg_devices_local_share(int found, int rank, int size, int *first, int *end) {
  TFG_ASSERT(found >= 1 && size >= 1 && rank >= 0 && rank < size);
  if (found >= size) {
    *first = (int)((int64_t)rank * found / size);
    *end = (int)((int64_t)(rank + 1) * found / size);
  } else {
    *first = rank % found;
    *end = *first + 1;
  }
}

/* This process's place among the ranks of its machine (tfg_devices_set_local). */
static int local_rank = 0, local_size = 1;

void tfg_devices_set_local(int rank, int size) {
  TFG_ASSERT(size >= 1 && rank >= 0 && rank < size);
  local_rank = rank;
  local_size = size;
}

tfg_status tfg_devices_default(tfg_diag *d, int gpus, const tfg_loc *where, tfg_devices **out, const char **notice) {
  TFG_ASSERT(d != NULL && out != NULL && gpus >= 0);
  *out = NULL;
  if (notice) *notice = NULL;
  const tfg_gpu_info *info = NULL;
  const char *why = NULL;
  int found = tfg_discover_gpus(&info, &why, NULL);
  if (found > MAX_GPUS) found = MAX_GPUS;
  if (found > 0) {
    /* Every physical GPU, one logical device each; a program that names
     * more gpu:N than there are gets the placer's error for the pin. */
    tfg_devices *ds = devices_new();
    int first, end; /* this rank's share of the machine's GPUs */
    tfg_devices_local_share(found, local_rank, local_size, &first, &end);
    for (int k = first; k < end; k++) add_cuda(ds, k, 1, 0);
    *out = ds;
    return TFG_OK;
  }
  /* No GPU: the program's gpu:N become host devices. */
  if (gpus > MAX_GPUS) {
    tfg_diag_error(d, where, "the program names gpu:%d, and at most %d GPUs can be emulated on the CPU", gpus - 1,
                   MAX_GPUS);
    tfg_diag_help(d, "GPUs are numbered from gpu:0; give --devices to name the devices yourself");
    return TFG_ERR_LIMIT;
  }
  tfg_devices *ds = devices_new();
  ds->no_gpu = strdup(why ? why : "none found");
  TFG_ASSERT(ds->no_gpu != NULL);
  if (gpus > 0) {
    tfg_devices_add_host(ds, gpus, 0);
    tfg_strbuf b = {0};
    /* Said once, with why (no driver, no device, a build without CUDA). */
    tfg_strbuf_puts(&b, "tfg: no GPU found");
    if (why) tfg_strbuf_printf(&b, " (%s)", why);
    if (gpus == 1)
      tfg_strbuf_puts(&b, "; gpu:0 is a host device");
    else
      tfg_strbuf_printf(&b, "; gpu:0..gpu:%d are %d host devices", gpus - 1, gpus);
    ds->notice = tfg_strbuf_take(&b);
    if (notice) *notice = ds->notice;
  }
  *out = ds;
  return TFG_OK;
}

const char *tfg_devices_no_gpu(const tfg_devices *ds) { return ds->no_gpu; }

/* ---- what to suggest ---------------------------------------------------- */

void tfg_devices_suggest_for(const tfg_gpu_info *gpus, int ngpus, int64_t want, tfg_strbuf *out) {
  TFG_ASSERT(want >= 1 && ngpus >= 0);
  long long w = (long long)want;
  if (ngpus > 0) {
    tfg_strbuf_puts(out, "--devices ");
    if (want <= ngpus) {
      /* More of the physical GPUs than the run was given. */
      for (int k = 0; k < want; k++) tfg_strbuf_printf(out, "%scuda:%d", k ? "," : "", k);
      tfg_strbuf_puts(out, " (one logical device per GPU)");
    } else if (ngpus > 1 && want % ngpus == 0) {
      for (int k = 0; k < ngpus; k++) tfg_strbuf_printf(out, "%scuda:%d*%lld", k ? "," : "", k, w / ngpus);
      tfg_strbuf_printf(out, " (%lld logical devices on each of the %d GPUs)", w / ngpus, ngpus);
    } else {
      tfg_strbuf_printf(out, "cuda:0*%lld (%lld logical devices sharing %s)", w, w,
                        ngpus == 1 && gpus[0].name[0] ? gpus[0].name : "GPU 0");
    }
    tfg_strbuf_puts(out, ", or ");
  }
  tfg_strbuf_printf(out, "--devices host*%lld (emulated on the CPU)", w);
}

/* Probes only when asked: a list made from a spec of host or sim entries
 * never wakes the CUDA runtime unless a placement fails. */
static void suggest_here(int64_t want, tfg_strbuf *out) {
  const tfg_gpu_info *info = NULL;
  const char *why = NULL;
  int found = tfg_discover_gpus(&info, &why, NULL);
  tfg_devices_suggest_for(info, found > 0 ? found : 0, want, out);
}

/* ---- describe -------------------------------------------------------- */

/* "67 TFLOP/s", "3.35 TB/s": three significant digits in the decimal
 * unit that keeps the number below 1000 (vendors publish these in
 * decimal units). */
static void rate_text(char *buf, size_t cap, double v, const char *unit) {
  static const char *const prefix[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  while (v >= 999.5 && u < 6) {
    v /= 1000.0;
    u++;
  }
  snprintf(buf, cap, "%.3g %s%s", v, prefix[u], unit);
}

/* Whether a and b live on one physical device: the host CPU holds cpu:0
 * and every host device; a cuda:K is shared by its logical devices; sim
 * devices are each their own. */
static bool same_physical(const tfg_device *a, const tfg_device *b) {
  bool ha = a->kind == TFG_DEVICE_CPU || a->kind == TFG_DEVICE_HOST;
  bool hb = b->kind == TFG_DEVICE_CPU || b->kind == TFG_DEVICE_HOST;
  if (ha || hb) return ha && hb;
  return a->kind == b->kind && a->physical == b->physical;
}

enum { NCOLS = 8, CELL = 72 }; /* the last two, node and net bw, only for a list of nodes */

void tfg_devices_describe(const tfg_devices *ds, tfg_strbuf *out) {
  /* The table: cells first, so columns can be as wide as their widest. */
  int rows = ds->n + 1;
  char(*cell)[NCOLS][CELL] = calloc((size_t)rows, sizeof *cell);
  TFG_ASSERT(cell != NULL);
  static const char *const head[NCOLS] = {"device", "hardware", "memory",  "f32 peak",
                                          "memory bw", "link bw", "node", "net bw"};
  int ncols = tfg_devices_nodes(ds) > 1 ? NCOLS : NCOLS - 2;
  for (int c = 0; c < NCOLS; c++) snprintf(cell[0][c], CELL, "%s", head[c]);
  for (int i = 0; i < ds->n; i++) {
    const tfg_device *v = &ds->dev[i];
    char(*r)[CELL] = cell[i + 1];
    snprintf(r[0], CELL, "%s", v->name);
    snprintf(r[1], CELL, "%s", v->hardware);
    tfg_size_text(r[2], CELL, v->memory);
    rate_text(r[3], CELL, v->flops, "FLOP/s");
    rate_text(r[4], CELL, v->mem_bw, "B/s");
    rate_text(r[5], CELL, v->link_bw, "B/s");
    snprintf(r[6], CELL, "%d", v->node);
    rate_text(r[7], CELL, v->net_bw, "B/s");
  }
  /* Hardware and memory have minimum widths so the columns do not move
   * with the machine's core count or memory (and tests can match). */
  int width[NCOLS] = {0, 24, 10, 0, 0, 0, 0, 0};
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < NCOLS; c++) {
      int w = (int)strlen(cell[r][c]);
      if (w > width[c]) width[c] = w;
    }
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < ncols - 1; c++) tfg_strbuf_printf(out, "%-*s  ", width[c], cell[r][c]);
    tfg_strbuf_printf(out, "%s\n", cell[r][ncols - 1]);
  }
  free(cell);

  /* One line per physical device, in order of its first logical one. */
  tfg_strbuf_puts(out, "\nphysical devices:\n");
  char mem[32];
  for (int i = 0; i < ds->n; i++) {
    const tfg_device *v = &ds->dev[i];
    bool first = true;
    for (int j = 0; j < i && first; j++) first = !same_physical(&ds->dev[j], v);
    if (!first) continue;
    switch (v->kind) {
    case TFG_DEVICE_CPU:
    case TFG_DEVICE_HOST:
      tfg_size_text(mem, sizeof mem, ds->host_memory);
      tfg_strbuf_printf(out, "  host CPU (%ld core%s, %s):", tfg_discover_host_cores(),
                        tfg_discover_host_cores() == 1 ? "" : "s", mem);
      break;
    case TFG_DEVICE_CUDA: {
      const tfg_gpu_info *gi = probed_gpu(v->physical);
      if (gi) {
        char freetext[32];
        int64_t free = tfg_discover_gpu_free(v->physical);
        tfg_size_text(mem, sizeof mem, gi->memory);
        if (free >= 0) tfg_size_text(freetext, sizeof freetext, free);
        tfg_strbuf_printf(out, "  cuda:%d %s (compute capability %d.%d, %d SMs, %s%s%s):", v->physical,
                          gi->name, gi->major, gi->minor, gi->sms, mem, free >= 0 ? ", free " : "",
                          free >= 0 ? freetext : "");
      } else {
        char why[96];
        tfg_strbuf_printf(out, "  cuda:%d (not found: %s):", v->physical, gpu_missing(v->physical, why, sizeof why));
      }
      break;
    }
    case TFG_DEVICE_SIM:
      if (tfg_devices_nodes(ds) > 1) tfg_strbuf_printf(out, "  %s #%d (hypothetical, node %d):", v->hardware, v->physical, v->node);
      else tfg_strbuf_printf(out, "  %s #%d (hypothetical):", v->hardware, v->physical);
      break;
    }
    const char *sep = " ";
    for (int j = i; j < ds->n; j++)
      if (same_physical(&ds->dev[j], v)) {
        tfg_strbuf_printf(out, "%s%s", sep, ds->dev[j].name);
        sep = ", ";
      }
    tfg_strbuf_putc(out, '\n');
  }
}
