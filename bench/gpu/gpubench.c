/* bench/gpu/gpubench.c: tfg's side of the GPU benchmarks (bench/gpu/run.sh
 * runs it beside bench/gpu/torch_bench.py on the same GPU).
 *
 *   build/bench/gpu/gpubench info                  # the device, or exit 2
 *   build/bench/gpu/gpubench matmul 4096 f32       # f32 | tf32 | bf16 | f16
 *   build/bench/gpu/gpubench chain [N]             # relu(x * a + b) over N floats (256M)
 *   build/bench/gpu/gpubench allreduce             # two logical devices of cuda:0
 *   build/bench/gpu/gpubench attention 16 12 256 64 # causal f32 attention and its gradient
 *
 * Kernels are run the way the executor runs them: the backend of cuda:0
 * (tfg_backend_new), device buffers from its pool, the op's kernel
 * (tfg_backend_kernel) queued with tfg_backend_launch on one stream. A timing is one
 * sample of K launches queued back to back and then a synchronize, divided
 * by K (K chosen so a sample takes ~25 ms: the synchronize's own cost,
 * tens of microseconds, is then noise), the median of SAMPLES samples
 * after WARMUP launches. torch_bench.py times PyTorch the same way (K
 * calls, then torch.cuda.synchronize()).
 *
 * One result per line, `tfg KIND key=value...`, for run.sh to pair with
 * PyTorch's. Exit status 2 with one line when there is no GPU. The TFG_*
 * switches (TFG_NVRTC, TFG_CACHE_DIR...) mean what they mean to `tfg
 * run` (bench_switches). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/strbuf.h"
#include "bench/bench.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "kernels/cpu/cpu.h"
#include "kernels/fused.h"
#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/device.h"
#include "runtime/registry.h"

enum { WARMUP = 3, SAMPLES = 15 };
#define SAMPLE_SECONDS 0.025

typedef struct bench {
  tfg_devices *ds;
  tfg_backend *b[2];
  tfg_stream *s[2];
} bench;

/* The switches from the environment (main): every backend's. */
static tfg_switches env_switches;

static void die(const char *what) {
  fprintf(stderr, "gpubench: %s\n", what);
  exit(1);
}

/* The backends of spec's GPU entries (n of them) with the switches sw,
 * or exit 2 with one line. */
static void open_gpus_with(bench *B, const char *spec, int n, bool tf32, const tfg_switches *sw) {
  tfg_diag *d = tfg_diag_new();
  if (tfg_devices_parse(d, spec, &B->ds) != TFG_OK) {
    tfg_diag_render(d, stderr, false);
    exit(2);
  }
  tfg_diag_free(d);
  tfg_backend_opts o = {.tf32 = tf32, .sw = *sw};
  for (int r = 0; r < n; r++) {
    const tfg_device *dev = tfg_devices_gpu(B->ds, r);
    tfg_strbuf why = {0};
    B->b[r] = dev && dev->kind == TFG_DEVICE_CUDA ? tfg_backend_new(dev, &o, &why) : NULL;
    if (!B->b[r]) {
      printf("gpubench: no CUDA device (%s)\n", why.len ? why.data : "not a cuda device");
      exit(2);
    }
    B->s[r] = tfg_backend_stream_create(B->b[r]);
  }
}

/* open_gpus_with the environment's switches. */
static void open_gpus(bench *B, const char *spec, int n, bool tf32) { open_gpus_with(B, spec, n, tf32, &env_switches); }

static void close_gpus(bench *B, int n) {
  for (int r = 0; r < n; r++) {
    tfg_backend_stream_free(B->b[r], B->s[r]);
    tfg_backend_destroy(B->b[r]);
  }
  tfg_devices_free(B->ds);
}

static void sync_or_die(tfg_backend *b, tfg_stream *s) {
  tfg_strbuf err = {0};
  if (tfg_backend_synchronize(b, s, &err) != TFG_OK) {
    fprintf(stderr, "gpubench: %s\n", err.data ? err.data : "the stream failed");
    exit(1);
  }
  tfg_strbuf_free(&err);
}

static void *dev_alloc(tfg_backend *b, size_t bytes) {
  void *p = tfg_backend_alloc(b, bytes);
  if (!p) die("out of device memory");
  return p;
}

/* Queues one repetition of the work being timed. */
typedef void (*queue_fn)(void *arg);

/* Seconds per repetition: see the top. */
static double time_it(bench *B, int nb, queue_fn q, void *arg) {
  for (int i = 0; i < WARMUP; i++) q(arg);
  for (int r = 0; r < nb; r++) sync_or_die(B->b[r], B->s[r]);
  double t0 = bench_now();
  q(arg);
  for (int r = 0; r < nb; r++) sync_or_die(B->b[r], B->s[r]);
  double one = bench_now() - t0;
  int k = one > 0 ? (int)ceil(SAMPLE_SECONDS / one) : 1000;
  if (k < 1) k = 1;
  if (k > 1000) k = 1000;
  double t[SAMPLES];
  for (int i = 0; i < SAMPLES; i++) {
    t0 = bench_now();
    for (int j = 0; j < k; j++) q(arg);
    for (int r = 0; r < nb; r++) sync_or_die(B->b[r], B->s[r]);
    t[i] = (bench_now() - t0) / k;
  }
  return bench_median(t, SAMPLES);
}

/* n random values in [-1, 1) of dtype dt (f32 made, then cast by the CPU
 * kernel), in malloc'd host memory. */
static void *host_random(tfg_dtype dt, int64_t n, uint64_t seed) {
  tfg_tensor f = {.dtype = TFG_DTYPE_F32, .shape = {1, {n}}};
  f.data = malloc((size_t)n * 4);
  if (!f.data) die("out of host memory");
  for (int64_t i = 0; i < n; i++) ((float *)f.data)[i] = (float)(2 * tfg_rng_uniform(seed, (uint64_t)i) - 1);
  if (dt == TFG_DTYPE_F32) return f.data;
  tfg_tensor o = {.dtype = dt, .shape = f.shape};
  o.data = malloc((size_t)n * tfg_dtype_size(dt));
  if (!o.data) die("out of host memory");
  tfg_node nd = {.op = TFG_OP_CAST, .dtype = dt, .shape = f.shape, .ninputs = 1};
  nd.attrs.dtype = dt;
  tfg_kernel_ctx ctx = {0};
  if (tfg_cpu_cast(&ctx, &nd, &f, &o) != TFG_OK) die("cast failed");
  free(f.data);
  return o.data;
}

/* ---- matmul ------------------------------------------------------------------ */

typedef struct launch_job {
  tfg_backend *b;
  tfg_stream *s;
  tfg_kernel_fn fn;
  tfg_kernel_ctx *ctx;
  const tfg_node *node;
  const tfg_tensor *in;
  tfg_tensor *out;
} launch_job;

static void queue_launch(void *arg) {
  launch_job *j = arg;
  tfg_backend_launch(j->b, j->s, j->fn, j->ctx, j->node, j->in, j->out);
}

static int cmd_matmul(int n, const char *dts) {
  bool tf32 = !strcmp(dts, "tf32");
  int dt = tf32 ? TFG_DTYPE_F32 : tfg_dtype_from_name(dts);
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_BF16 && dt != TFG_DTYPE_F16 && dt != TFG_DTYPE_F64) die("dtype: f32 tf32 bf16 f16 f64");
  bench B = {0};
  open_gpus(&B, "cuda:0", 1, tf32);
  tfg_backend *b = B.b[0];
  size_t bytes = (size_t)n * n * tfg_dtype_size((tfg_dtype)dt);
  tfg_tensor in[2], out = {.dtype = (tfg_dtype)dt, .shape = {2, {n, n}}};
  for (int k = 0; k < 2; k++) {
    void *h = host_random((tfg_dtype)dt, (int64_t)n * n, 11 + (uint64_t)k);
    in[k] = out;
    in[k].data = dev_alloc(b, bytes);
    tfg_backend_copy_from_host(b, B.s[0], in[k].data, h, bytes);
    sync_or_die(b, B.s[0]);
    free(h);
  }
  out.data = dev_alloc(b, bytes);
  tfg_node node = {.op = TFG_OP_MATMUL, .dtype = (tfg_dtype)dt, .shape = out.shape, .ninputs = 2};
  tfg_kernel_fn fn = tfg_backend_kernel(b, &node);
  if (!fn) die("the CUDA backend has no matmul kernel");
  tfg_kernel_ctx ctx = {0};
  launch_job j = {b, B.s[0], fn, &ctx, &node, in, &out};
  double t = time_it(&B, 1, queue_launch, &j);
  double flop = 2.0 * n * n * (double)n;
  printf("tfg matmul n=%d dtype=%s ms=%.4f tflops=%.2f\n", n, dts, t * 1e3, flop / t * 1e-12);
  for (int k = 0; k < 2; k++) tfg_backend_free(b, in[k].data);
  tfg_backend_free(b, out.data);
  tfg_strbuf_free(&ctx.err);
  close_gpus(&B, 1);
  return 0;
}

/* ---- the fused elementwise chain ----------------------------------------------------- */

typedef struct chain_job {
  launch_job l[3];
  int n;
} chain_job;

static void queue_chain(void *arg) {
  chain_job *c = arg;
  for (int i = 0; i < c->n; i++) queue_launch(&c->l[i]);
}

typedef struct copy_job {
  tfg_backend *dst_b, *src_b;
  tfg_stream *s;
  void *dst;
  const void *src;
  size_t bytes;
} copy_job;

static void queue_copy(void *arg) {
  copy_job *c = arg;
  tfg_backend_copy_peer(c->dst_b, c->s, c->dst, c->src_b, c->src, c->bytes);
}

/* relu(x * a + b) over n f32 (a, b scalars): as one FUSED launch (the
 * planner's fusion, kernels/fused.h), as three launches (mul, add, relu:
 * what runs unfused, two intermediates), and a device-to-device copy of x
 * (the practical bandwidth ceiling). Bandwidth = the chain's least
 * traffic (read x, write y: 8n bytes) / time; the copy also moves 8n. */
static int cmd_chain(int64_t n) {
  bench B = {0};
  open_gpus(&B, "cuda:0", 1, false);
  tfg_backend *b = B.b[0];
  tfg_stream *s = B.s[0];
  const tfg_device *dev = tfg_devices_gpu(B.ds, 0);
  size_t bytes = (size_t)n * 4;
  /* The graph the planner would have: x, a, b inputs; mul, add, relu. */
  tfg_graph *g = tfg_graph_new();
  tfg_loc loc = {0};
  tfg_node_id x = tfg_graph_add(g, TFG_OP_INPUT, NULL, 0, &loc);
  tfg_node_id a = tfg_graph_add(g, TFG_OP_INPUT, NULL, 0, &loc);
  tfg_node_id c = tfg_graph_add(g, TFG_OP_INPUT, NULL, 0, &loc);
  g->nodes[x].dtype = g->nodes[a].dtype = g->nodes[c].dtype = TFG_DTYPE_F32;
  g->nodes[x].shape = (tfg_shape){1, {n}};
  tfg_node_id xa[2] = {x, a};
  tfg_node_id m = tfg_graph_add(g, TFG_OP_MUL, xa, 2, &loc);
  tfg_node_id mc[2] = {m, c};
  tfg_node_id ad = tfg_graph_add(g, TFG_OP_ADD, mc, 2, &loc);
  tfg_node_id r = tfg_graph_add(g, TFG_OP_RELU, &ad, 1, &loc);
  tfg_node_id members[3] = {m, ad, r}, inputs[3] = {x, a, c};
  for (int i = 0; i < 3; i++) {
    tfg_node *nd = &g->nodes[members[i]];
    nd->dtype = TFG_DTYPE_F32;
    nd->shape = g->nodes[x].shape;
  }
  tfg_fused_prog prog;
  if (!tfg_fused_build(g, members, 3, inputs, 3, &prog)) die("tfg_fused_build refused relu(x * a + b)");
  tfg_node fused = {.op = TFG_OP_FUSED, .dtype = TFG_DTYPE_F32, .shape = g->nodes[x].shape, .ninputs = 3};
  fused.inputs = inputs;
  fused.attrs.data = &prog;

  float *hx = host_random(TFG_DTYPE_F32, n, 5), ha = 1.5f, hb = -0.25f;
  tfg_tensor tx = {.dtype = TFG_DTYPE_F32, .shape = g->nodes[x].shape}, ta = {.dtype = TFG_DTYPE_F32}, tb = ta;
  tfg_tensor ty = tx, t1 = tx, t2 = tx;
  tx.data = dev_alloc(b, bytes);
  ty.data = dev_alloc(b, bytes);
  t1.data = dev_alloc(b, bytes);
  t2.data = dev_alloc(b, bytes);
  ta.data = dev_alloc(b, 4);
  tb.data = dev_alloc(b, 4);
  tfg_backend_copy_from_host(b, s, tx.data, hx, bytes);
  tfg_backend_copy_from_host(b, s, ta.data, &ha, 4);
  tfg_backend_copy_from_host(b, s, tb.data, &hb, 4);
  sync_or_die(b, s);
  free(hx);

  tfg_kernel_ctx ctx = {0};
  tfg_tensor fin[3] = {tx, ta, tb}, min[2] = {tx, ta}, ain[2] = {t1, tb};
  double peak = dev->mem_bw, traffic = 8.0 * (double)n;
  printf("# %s: tfg's planning table gives %.0f GB/s of memory bandwidth for it\n", dev->hardware, peak * 1e-9);

  copy_job cp = {b, b, s, ty.data, tx.data, bytes};
  double tc = time_it(&B, 1, queue_copy, &cp);
  printf("tfg copy n=%lld ms=%.4f gbps=%.1f of_peak=%.0f%%\n", (long long)n, tc * 1e3, traffic / tc * 1e-9,
         100 * traffic / tc / peak);

  tfg_kernel_fn ffn = tfg_backend_kernel(b, &fused);
  if (ffn) {
    chain_job cj = {.n = 1};
    cj.l[0] = (launch_job){b, s, ffn, &ctx, &fused, fin, &ty};
    double t = time_it(&B, 1, queue_chain, &cj);
    printf("tfg chain n=%lld mode=fused ms=%.4f gbps=%.1f of_copy=%.0f%% of_peak=%.0f%%\n", (long long)n, t * 1e3,
           traffic / t * 1e-9, 100 * tc / t, 100 * traffic / t / peak);
  } else {
    printf("tfg chain n=%lld mode=fused none: the CUDA backend has no FUSED kernel\n", (long long)n);
  }
  tfg_node nm = {.op = TFG_OP_MUL, .dtype = TFG_DTYPE_F32, .shape = tx.shape, .ninputs = 2};
  tfg_node na = nm, nr = nm;
  na.op = TFG_OP_ADD;
  nr.op = TFG_OP_RELU;
  nr.ninputs = 1;
  chain_job cj = {.n = 3};
  cj.l[0] = (launch_job){b, s, tfg_backend_kernel(b, &nm), &ctx, &nm, min, &t1};
  cj.l[1] = (launch_job){b, s, tfg_backend_kernel(b, &na), &ctx, &na, ain, &t2};
  cj.l[2] = (launch_job){b, s, tfg_backend_kernel(b, &nr), &ctx, &nr, &t2, &ty};
  if (!cj.l[0].fn || !cj.l[1].fn || !cj.l[2].fn) die("the CUDA backend lacks mul, add or relu");
  double t = time_it(&B, 1, queue_chain, &cj);
  printf("tfg chain n=%lld mode=unfused ms=%.4f gbps=%.1f of_copy=%.0f%% of_peak=%.0f%%\n", (long long)n, t * 1e3,
         traffic / t * 1e-9, 100 * tc / t, 100 * traffic / t / peak);

  void *bufs[] = {tx.data, ty.data, t1.data, t2.data, ta.data, tb.data};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tfg_backend_free(b, bufs[i]);
  tfg_strbuf_free(&ctx.err);
  tfg_graph_free(g);
  close_gpus(&B, 1);
  return 0;
}

/* ---- all-reduce over two logical devices of one GPU ------------------------------------ */

typedef struct ar_job {
  tfg_coll *c;
  void *bufs[2];
  size_t count;
} ar_job;

static void queue_allreduce(void *arg) {
  ar_job *j = arg;
  j->c->i.allreduce(j->c, j->bufs, &j->count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
}

/* The MEAN all-reduce of f32 buffers of 1 to 256 MiB per rank over
 * cuda:0*2, the shared one (what the executor uses for mirrored replicas
 * on one GPU) and the ring, against a device-to-device copy of the same bytes from one rank's
 * buffer to the other's. algbw = bytes / time; busbw = algbw * 2(R-1)/R,
 * as nccl-tests define them (R = 2: busbw = algbw). */
static int cmd_allreduce(void) {
  static const size_t mib[] = {1, 16, 64, 256};
  bench B = {0};
  open_gpus(&B, "cuda:0*2", 2, false);
  tfg_strbuf why = {0};
  tfg_coll *shared = tfg_coll_shared_new(2, B.b, B.s, &why);
  if (!shared) die(why.data);
  tfg_coll *colls[2] = {shared, tfg_coll_ring_new(2, B.b, B.s)};
  printf("# all-reduce (MEAN of f32) over %s and %s (%s): shared (what mirrored uses on one GPU), then ring\n",
         tfg_devices_gpu(B.ds, 0)->name, tfg_devices_gpu(B.ds, 1)->name, tfg_devices_gpu(B.ds, 0)->hardware);
  size_t nmib = sizeof mib / sizeof mib[0];
  for (size_t x = 0; x < 2 * nmib; x++) {
    tfg_coll *c = colls[x / nmib];
    size_t i = x % nmib;
    size_t bytes = mib[i] << 20;
    ar_job j = {.c = c, .count = bytes / 4};
    float *h = host_random(TFG_DTYPE_F32, (int64_t)j.count, 3);
    for (int r = 0; r < 2; r++) {
      j.bufs[r] = dev_alloc(B.b[r], bytes);
      tfg_backend_copy_from_host(B.b[r], B.s[r], j.bufs[r], h, bytes);
      sync_or_die(B.b[r], B.s[r]);
    }
    free(h);
    double t = time_it(&B, 2, queue_allreduce, &j);
    copy_job cp = {B.b[1], B.b[0], B.s[1], j.bufs[1], j.bufs[0], bytes};
    double tc = time_it(&B, 2, queue_copy, &cp);
    double algbw = (double)bytes / t * 1e-9;
    printf("tfg allreduce algo=%s ranks=2 mib=%zu ms=%.4f algbw=%.1f busbw=%.1f copy_ms=%.4f copy_gbps=%.1f "
           "ratio=%.2f\n",
           c->i.name(c), mib[i], t * 1e3, algbw, algbw * 2.0 * (2 - 1) / 2, tc * 1e3, (double)bytes / tc * 1e-9,
           t / tc);
    fflush(stdout);
    for (int r = 0; r < 2; r++) tfg_backend_free(B.b[r], j.bufs[r]);
  }
  for (int k = 0; k < 2; k++) colls[k]->i.free(colls[k]);
  tfg_strbuf_free(&why);
  close_gpus(&B, 2);
  return 0;
}

/* ---- attention at a GPT's shape ------------------------------------------------------- */

/* Causal self-attention of f32 heads q, k, v, dy [b, h, t, hd] (random in
 * [-1, 1), scale 1 / sqrt(hd)): the forward (ATTENTION) and the whole
 * gradient (ATTENTION_GRAD packed: dq, dk, dv side by side), each with
 * the tiled kernels and with the reference ones (the switch
 * no_attention_tiled, TFG_ATTENTION_TILED=0: a backend of its own).
 * TFLOP/s count the causal half: 2 b h t^2 hd for the forward's two
 * products, 5 b h t^2 hd for the gradient's (the scores again, dP, and
 * the three products), halved. */
static int cmd_attention(int b, int h, int t, int hd) {
  tfg_shape s4 = {4, {b, h, t, hd}}, pk = {4, {b, h, t, 3 * hd}};
  int64_t n = (int64_t)b * h * t * hd;
  tfg_node fwd = {.op = TFG_OP_ATTENTION, .dtype = TFG_DTYPE_F32, .shape = s4, .ninputs = 3};
  fwd.attrs.causal = true;
  fwd.attrs.value = 1.0 / sqrt((double)hd);
  tfg_node bwd = fwd;
  bwd.op = TFG_OP_ATTENTION_GRAD;
  bwd.shape = pk;
  bwd.ninputs = 4;
  bwd.attrs.axis = TFG_ATTENTION_GRAD_PACKED;
  double flop = (double)b * h * (double)t * t * hd / 2; /* one causal product */
  for (int ref = 0; ref < 2; ref++) {
    bench B = {0};
    tfg_switches sw = env_switches;
    sw.no_attention_tiled = ref;
    open_gpus_with(&B, "cuda:0", 1, false, &sw);
    tfg_backend *be = B.b[0];
    tfg_tensor in[4], out = {.dtype = TFG_DTYPE_F32, .shape = s4}, grad = {.dtype = TFG_DTYPE_F32, .shape = pk};
    for (int k = 0; k < 4; k++) {
      void *hst = host_random(TFG_DTYPE_F32, n, 21 + (uint64_t)k);
      in[k] = out;
      in[k].data = dev_alloc(be, (size_t)n * 4);
      tfg_backend_copy_from_host(be, B.s[0], in[k].data, hst, (size_t)n * 4);
      sync_or_die(be, B.s[0]);
      free(hst);
    }
    out.data = dev_alloc(be, (size_t)n * 4);
    grad.data = dev_alloc(be, (size_t)n * 12);
    tfg_kernel_fn ff = tfg_backend_kernel(be, &fwd), fb = tfg_backend_kernel(be, &bwd);
    if (!ff || !fb) die("the CUDA backend has no attention kernels");
    tfg_kernel_ctx ctx = {0};
    launch_job jf = {be, B.s[0], ff, &ctx, &fwd, in, &out}, jb = {be, B.s[0], fb, &ctx, &bwd, in, &grad};
    double tf = time_it(&B, 1, queue_launch, &jf), tb = time_it(&B, 1, queue_launch, &jb);
    const char *kern = ref ? "reference" : "tiled";
    printf("tfg attention b=%d h=%d t=%d hd=%d pass=forward kernel=%s ms=%.4f tflops=%.2f\n", b, h, t, hd, kern,
           tf * 1e3, 2 * 2 * flop / tf * 1e-12);
    printf("tfg attention b=%d h=%d t=%d hd=%d pass=backward kernel=%s ms=%.4f tflops=%.2f\n", b, h, t, hd, kern,
           tb * 1e3, 5 * 2 * flop / tb * 1e-12);
    fflush(stdout);
    for (int k = 0; k < 4; k++) tfg_backend_free(be, in[k].data);
    tfg_backend_free(be, out.data);
    tfg_backend_free(be, grad.data);
    tfg_strbuf_free(&ctx.err);
    close_gpus(&B, 1);
  }
  return 0;
}

static int cmd_info(void) {
  bench B = {0};
  open_gpus(&B, "cuda:0", 1, false);
  const tfg_device *dev = tfg_devices_gpu(B.ds, 0);
  printf("tfg device %s: %s, %.1f GiB for tfg, planning table %.0f TFLOP/s f32, %.0f GB/s\n", dev->name, dev->hardware,
         (double)dev->memory / (1 << 30), dev->flops * 1e-12, dev->mem_bw * 1e-9);
  close_gpus(&B, 1);
  return 0;
}

int main(int argc, char **argv) {
  env_switches = bench_switches();
  if (argc >= 2 && !strcmp(argv[1], "info")) return cmd_info();
  if (argc == 4 && !strcmp(argv[1], "matmul")) return cmd_matmul(atoi(argv[2]), argv[3]);
  if ((argc == 2 || argc == 3) && !strcmp(argv[1], "chain"))
    return cmd_chain(argc == 3 ? strtoll(argv[2], NULL, 10) : (int64_t)256 << 20);
  if (argc == 2 && !strcmp(argv[1], "allreduce")) return cmd_allreduce();
  if (argc == 6 && !strcmp(argv[1], "attention"))
    return cmd_attention(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  fprintf(stderr, "usage: gpubench info | matmul N f32|tf32|bf16|f16 | chain [N] | allreduce | attention B H T HD\n");
  return 2;
}
