/* runtime/backend_cuda_gpu.c: what the CUDA backend knows of the process
 * and its GPUs, shared by every backend: the probe (runtime/discover.h's
 * answers in a build with CUDA), peer access between GPUs, the streams
 * that export events to host devices, the logical devices' memory pools,
 * and the build's versions for `tfg version`.
 *
 * Memory. The pool (runtime/mem.h) takes its regions from cudaMalloc
 * through tfg_mem_pool_new_with: --memory preallocate takes the device's
 * whole capacity (dev->memory: its share of the GPU's free memory unless
 * capped, runtime/device.c) at creation, growth takes chunks as they are
 * needed. A cudaMalloc that fails leaves its error for cudaGetLastError,
 * which the region hook clears so that the next kernel's launch check
 * does not report it. mem_stats bounds what the pool could still grow by
 * with cudaMemGetInfo. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#if TFG_BUILD_NCCL
#include <nccl.h> /* its version, for `tfg version` */
#endif

#include "base/assert.h"
#include "base/grow.h"
#include "runtime/backend_cuda_impl.h"

/* ---- the process: probe, peers, export streams, pools ------------------------- *
 * Lock discipline: no CUDA call is made under an event's mutex or under
 * grave_mu (runtime/backend_cuda_event.c), which are what a host callback
 * (export_done) takes; the other
 * mutexes here are never taken by a callback, so CUDA calls under them
 * (cudaMalloc, peer enabling) cannot wait on a callback that waits on us. */

static struct {
  pthread_once_t once;
  int count;          /* GPUs found (0: none) */
  char why[96];       /* when none: why, in a few words */
  char detail[192];   /* the runtime's words */
  tfg_gpu_info *info; /* [count] */
  int64_t *free;      /* [count]: bytes free at the first tfg_backend_cuda_free_memory, -2: not asked */
  pthread_mutex_t mu; /* guards free, peer, export_stream */
  uint8_t *peer;      /* [count * count]: 0 not tried, 1 enabled (row: accessing GPU), 2 impossible */
  cudaStream_t *export_stream; /* [count]: for event exports, made on first use */
} G = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void probe_once(void) {
  int n = 0, driver = 0, runtime = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  cuda_quiet(cudaDriverGetVersion(&driver));
  cuda_quiet(cudaRuntimeGetVersion(&runtime));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(G.detail, sizeof G.detail, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    if (driver == 0)
      snprintf(G.why, sizeof G.why, "no CUDA driver");
    else if (e == cudaErrorInsufficientDriver)
      snprintf(G.why, sizeof G.why, "the CUDA driver (%d.%d) is older than tfg's CUDA runtime (%d.%d)",
               driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    else if (e == cudaErrorNoDevice)
      snprintf(G.why, sizeof G.why, "no CUDA-capable device");
    else
      snprintf(G.why, sizeof G.why, "the CUDA runtime failed to start");
    n = 0;
  } else if (n == 0) {
    snprintf(G.why, sizeof G.why, "no CUDA-capable device");
  }
  G.info = calloc((size_t)n + 1, sizeof *G.info);
  G.free = malloc(sizeof *G.free * ((size_t)n + 1));
  G.peer = calloc((size_t)n * (size_t)n + 1, 1);
  G.export_stream = calloc((size_t)n + 1, sizeof *G.export_stream);
  TFG_ASSERT(G.info && G.free && G.peer && G.export_stream);
  int good = 0;
  for (int k = 0; k < n; k++) {
    struct cudaDeviceProp p;
    tfg_strbuf why = {0};
    if (!CUDA_OK(cudaGetDeviceProperties(&p, k), &why)) {
      /* A GPU that cannot be described ends the list there: ordinals must
       * stay what CUDA calls them. */
      (void)cudaGetLastError();
      snprintf(G.detail, sizeof G.detail, "%s", why.data);
      tfg_strbuf_free(&why);
      break;
    }
    tfg_gpu_info *gi = &G.info[k];
    snprintf(gi->name, sizeof gi->name, "%.95s", p.name);
    gi->major = p.major;
    gi->minor = p.minor;
    gi->memory = (int64_t)p.totalGlobalMem;
    gi->sms = p.multiProcessorCount;
    G.free[k] = -2;
    good++;
  }
  G.count = good;
  if (n > 0 && good == 0) snprintf(G.why, sizeof G.why, "the CUDA runtime cannot describe its GPUs");
}

int tfg_backend_cuda_probe(const tfg_gpu_info **info, const char **why, const char **detail) {
  pthread_once(&G.once, probe_once);
  if (info) *info = G.info;
  if (why) *why = G.count ? NULL : G.why;
  if (detail) *detail = G.count ? "" : G.detail;
  return G.count;
}

int64_t tfg_backend_cuda_free_memory(int k) {
  if (k < 0 || k >= tfg_backend_cuda_probe(NULL, NULL, NULL)) return -1;
  pthread_mutex_lock(&G.mu);
  if (G.free[k] == -2) {
    size_t fr = 0, total = 0;
    G.free[k] = cudaSetDevice(k) == cudaSuccess && cudaMemGetInfo(&fr, &total) == cudaSuccess ? (int64_t)fr : -1;
    (void)cudaGetLastError();
  }
  int64_t v = G.free[k];
  pthread_mutex_unlock(&G.mu);
  return v;
}

bool tfg_backend_cuda_peer_access(int a, int b) {
  if (a == b) return true;
  pthread_mutex_lock(&G.mu);
  uint8_t *st = &G.peer[a * G.count + b];
  if (*st == 0) {
    int can = 0;
    *st = 2;
    if (cudaDeviceCanAccessPeer(&can, a, b) == cudaSuccess && can && cudaSetDevice(a) == cudaSuccess) {
      cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) *st = 1;
    }
    (void)cudaGetLastError(); /* AlreadyEnabled, or a refusal: not the next kernel's error */
  }
  bool ok = *st == 1;
  pthread_mutex_unlock(&G.mu);
  cuda_quiet(cudaSetDevice(a));
  return ok;
}

cudaStream_t tfg_backend_cuda_export_stream(int k, tfg_strbuf *why) {
  pthread_mutex_lock(&G.mu);
  cudaStream_t s = G.export_stream[k];
  if (!s && CUDA_OK(cudaSetDevice(k), why) && CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), why))
    G.export_stream[k] = s;
  pthread_mutex_unlock(&G.mu);
  return s;
}

/* ---- pools ------------------------------------------------------------------
 * One per logical device, shared by the backends open on it (several
 * executors of one run: a parameter server's sessions each open the
 * devices they use), so that --memory preallocate takes a device's memory
 * once and every executor's arena comes out of the same capacity. */


static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_entry **pools;
static size_t npools, pools_cap;

/* Region hooks: cudaMalloc on the pool's GPU. */
static void *region_alloc(void *arg, size_t bytes) {
  pool_entry *pe = arg;
  void *p = NULL;
  if (cudaSetDevice(pe->gpu) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError(); /* an out-of-memory must not surface at the next kernel launch */
    return NULL;
  }
  return p;
}

static void region_free(void *arg, void *base, size_t bytes) {
  pool_entry *pe = arg;
  (void)bytes;
  cuda_quiet(cudaSetDevice(pe->gpu));
  cuda_quiet(cudaFree(base));
}

pool_entry *tfg_backend_cuda_pool_acquire(const tfg_device *dev, bool preallocate, tfg_strbuf *why) {
  pthread_mutex_lock(&pools_mu);
  for (size_t i = 0; i < npools; i++)
    if (pools[i]->dev == dev) {
      pools[i]->refs++;
      pool_entry *pe = pools[i];
      pthread_mutex_unlock(&pools_mu);
      return pe;
    }
  pool_entry *pe = calloc(1, sizeof *pe);
  TFG_ASSERT(pe != NULL);
  pe->dev = dev;
  pe->gpu = dev->physical;
  pe->refs = 1;
  pe->pool = tfg_mem_pool_new_with(dev->memory, preallocate, region_alloc, region_free, pe);
  if (!pe->pool) {
    pthread_mutex_unlock(&pools_mu);
    tfg_strbuf size = {0};
    size_t fr = 0, total = 0;
    tfg_size_format(&size, dev->memory);
    tfg_strbuf_printf(why, "cannot preallocate its %s pool (--memory preallocate): cudaMalloc refused it", size.data);
    if (cudaSetDevice(pe->gpu) == cudaSuccess && cudaMemGetInfo(&fr, &total) == cudaSuccess) {
      tfg_strbuf_clear(&size);
      tfg_size_format(&size, (int64_t)fr);
      tfg_strbuf_printf(why, " (cuda:%d has %s free)", pe->gpu, size.data);
    }
    (void)cudaGetLastError();
    tfg_strbuf_free(&size);
    free(pe);
    return NULL;
  }
  TFG_GROW(pools, npools, pools_cap, 4);
  pools[npools++] = pe;
  pthread_mutex_unlock(&pools_mu);
  return pe;
}

void tfg_backend_cuda_pool_release(pool_entry *pe) {
  if (!pe) return;
  pthread_mutex_lock(&pools_mu);
  if (--pe->refs == 0) {
    size_t i = 0;
    while (pools[i] != pe) i++;
    pools[i] = pools[--npools];
    tfg_mem_pool_free(pe->pool); /* every region back to cudaFree */
    free(pe);
  }
  pthread_mutex_unlock(&pools_mu);
}

/* ---- the build ------------------------------------------------------------------- */

void tfg_backend_cuda_build_info(tfg_strbuf *out) {
  int rt = 0, drv = 0;
  cuda_quiet(cudaRuntimeGetVersion(&rt));
  cuda_quiet(cudaDriverGetVersion(&drv));
  const tfg_gpu_info *info;
  const char *why;
  int n = tfg_backend_cuda_probe(&info, &why, NULL);
  tfg_strbuf_printf(out, "cuda: on (runtime %d.%d, built with %d.%d; ", rt / 1000, rt % 1000 / 10,
                    CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
  if (!drv)
    tfg_strbuf_puts(out, "no CUDA driver on this machine)\n");
  else if (n > 0)
    tfg_strbuf_printf(out, "driver %d.%d; %d GPU%s: %s%s)\n", drv / 1000, drv % 1000 / 10, n, n == 1 ? "" : "s",
                      info[0].name, n > 1 ? ", ..." : "");
  else
    tfg_strbuf_printf(out, "driver %d.%d; no GPU: %s)\n", drv / 1000, drv % 1000 / 10, why);
  size_t dnn = cudnnGetVersion();
  tfg_strbuf_printf(out, "cudnn: %zu.%zu.%zu (built with %d.%d.%d)\n", dnn / 10000, dnn % 10000 / 100, dnn % 100,
                    CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    tfg_strbuf_printf(out, "cublas: %d.%d.%d\n", major, minor, patch);
#if TFG_BUILD_NCCL
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess)
    tfg_strbuf_printf(out, "nccl: %d.%d.%d (built with %d.%d.%d)\n", nv / 10000, nv % 10000 / 100, nv % 100,
                      NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  else
    tfg_strbuf_printf(out, "nccl: built with %d.%d.%d; the library does not answer\n", NCCL_MAJOR, NCCL_MINOR,
                      NCCL_PATCH);
#else
  tfg_strbuf_puts(out, "nccl: off (built with NCCL=0 or without nccl.h)\n");
#endif
}
