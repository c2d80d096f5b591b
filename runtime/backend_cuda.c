/* runtime/backend_cuda.c: the `cuda` backend: a logical device on an
 * NVIDIA GPU behind the vtable of runtime/backend.h. Compiled only in
 * builds with CUDA (Makefile: CUDA_ON=1); the backend registration
 * (runtime/backend.c, runtime/discover.c) is its only caller.
 *
 * Devices. One backend per logical device: cuda:K*N gives N backends on
 * GPU K, each with its own streams, cuBLAS/cuBLASLt/cuDNN handles, flags
 * and memory pool (the pool is shared by the backends that several
 * executors of one run open for the same logical device: a parameter
 * server's sessions, see pools below). Every entry point sets the current
 * device first (cudaSetDevice is per thread and cheap), so any thread may
 * call and the executor may drive several GPUs from one thread. A GPU of
 * compute capability below 7.0 is refused at creation.
 *
 * Streams and launches. A stream is a CUDA stream made with
 * cudaStreamNonBlocking (no implicit ordering with the legacy default
 * stream). launch runs the kernel function on the caller's thread at once:
 * a CUDA kernel only queues its work on the stream (kernels/cuda/cuda.h),
 * so "in stream order" holds because the GPU runs the stream in order.
 * Before the call the backend binds the cuBLAS and cuDNN handles to the
 * stream (cublasSetStream, cudnnSetStream; cublasSetStream resets
 * cuBLAS's workspace, so cublasSetWorkspace follows), gives the kernel the
 * stream's own workspace (WORKSPACE_BYTES, made on the stream's first
 * launch: two streams of one device never share scratch memory) and sets
 * ctx->backend to the device's tfg_cuda_ctx with .stream = the stream.
 * f16 and bf16 need nothing here: the kernel function the backend hands
 * out (tfg_cuda_kernel) either takes 16-bit tensors natively (cast,
 * matmul, init, where, embedding, allreduce, the shape ops) or is
 * kernels/cuda/registry.cu's staging wrapper, which queues the
 * conversions to and from f32 scratch on the same stream around the f32
 * kernel (kernels/cuda/half.cu); --check-numerics scans f32 and f64
 * results only, so a 16-bit result is not scanned.
 *
 * Events are the shared objects of runtime/event.h (body in
 * runtime/backend_impl.h). Their CUDA part
 * holds one cudaEvent per GPU (made on first use there, with
 * cudaEventDisableTiming), so record is cudaEventRecord on the stream's
 * GPU and a wait for a GPU's record is cudaStreamWaitEvent, across GPUs
 * too. CUDA's rule is the host backend's: a wait waits for the latest
 * record issued before it, a wait on an event never recorded is a no-op,
 * and an event is recorded again each step without a reset. Two other
 * kinds of wait involve host devices:
 *   - a host stream waits for a GPU's record: host_event_wait calls our
 *     export (cuda_event_export): on the recording GPU's export stream,
 *     cudaStreamWaitEvent then cudaLaunchHostFunc, whose callback
 *     completes that generation on the host (tfg_event_complete: it makes
 *     no CUDA call, as host functions must not);
 *   - a GPU stream waits for a host stream's record: the caller's thread
 *     blocks until the host worker has run it (tfg_event_wait_done), and
 *     queues nothing. This cannot deadlock because the executor queues a
 *     wait only after its record, and everything a queued record depends
 *     on is queued already: the host worker gets there without us. The
 *     GPU is never made to spin on host memory (cuStreamWaitValue32 would
 *     hide the dependency from CUDA's scheduler, which its documentation
 *     warns can deadlock). The cost: the executor's walk pauses there.
 *
 * Copies. copy_from_host and copy_to_host are cudaMemcpyAsync on the
 * stream. Host buffers are pageable (the executor's feeds and fetches,
 * the host backend's pool): CUDA stages them through pinned memory and
 * may return only once a device-to-host copy is done, which costs the
 * caller's thread time but is always correct. copy_peer: within one GPU
 * (logical devices sharing it, or one device) a device-to-device
 * cudaMemcpyAsync; between GPUs cudaMemcpyPeerAsync (direct when
 * cudaDeviceCanAccessPeer allowed enabling peer access, which is done once
 * per ordered pair, else staged by CUDA); from a host device's memory a
 * host-to-device copy. A host device copying from a GPU calls read_now
 * (cudaMemcpyAsync on the backend's aux stream, then its synchronize).
 * reduce_peer runs kernels/cuda/collective.cu's kernel on the stream; the
 * source must be addressable from the destination's GPU (the same GPU, or
 * a peer with access enabled), else the stream fails saying so, as it
 * does for a dtype other than f32 and f64.
 *
 * Failures (backend.h). What the caller's thread sees at once (a kernel
 * returning an error, a CUDA call failing, the injected fault) fails the
 * stream: sticky, later launches, copies and reductions on it are skipped,
 * records still record (carrying the failure), and synchronize returns it
 * with failed_here true. The failure a record carries is noted on the
 * event when the record is issued, on the caller's thread: a GPU stream
 * waiting for that record fails with it (failed_here false), and a host
 * stream gets it through the exported completion. What only the GPU
 * finds is read at synchronize: cudaStreamSynchronize's error (an illegal
 * address: sticky for the whole context, so every stream reports it), and
 * the device's two flags, copied back behind the stream's work:
 *   - tfg_cuda_error (kernels/cuda/cuda.h): a data error a kernel flagged,
 *     e.g. "embedding id 7 is outside [0, 3)", "integer division by
 *     zero" (TFG_ERR_NUMERIC);
 *   - tfg_cuda_numerics (kernels/cuda/backend_kernels.h): with
 *     --check-numerics every f32/f64 result is scanned after its kernel,
 *     "produced nan at element 5 of its f32[2, 3] result", the executor's
 *     words for host devices.
 * Such a failure belongs to the device: every stream of it fails with it
 * from its next synchronize on. The node it names goes to the executor
 * through failed_node as a node id, which the executor turns into the
 * node's source location ("embedding on gpu:0 failed: ..."). Ids come
 * from the executor itself: its kernel function sets ctx->node before it
 * calls the op's kernel (kernels/kernel.h), so after the call the backend
 * knows the launch's id, and kernels flag errors with it. Each launch is
 * recorded (its id, its node, a number) until the flags are seen clear
 * with every stream idle; the numerics scan is tagged with the launch's
 * number, so its node is exact. A data error flagged without an id (-1)
 * is put on the first recorded launch whose op can report it (embedding,
 * embedding_grad and one_hot for ids; cross_entropy, its gradient and
 * accuracy for labels; an integer div, or a fused chain of one, for a
 * division by zero), the first to read the bad value in stream order.
 * failed_here is true on the stream that launched that node.
 *
 * Tracing (set_trace): each launch, copy and reduction is bracketed by a
 * pair of timing events on its stream; at synchronize (and when the trace
 * is swapped or the backend destroyed) the pairs that have completed
 * become slices: process = the device's index, thread = the stream's
 * creation index, named like the host backend's (the op, "h2d", "d2h",
 * "copy", "reduce"). Times are the GPU's, placed on the trace's clock by
 * a base event recorded and waited for when the trace was set (so within
 * a few microseconds of the host clock). Waits leave no slice (they
 * happen on the GPU, where nothing measures them), nor do skipped
 * operations.
 *
 * Memory. The pool (runtime/mem.h) takes its regions from cudaMalloc
 * through tfg_mem_pool_new_with: --memory preallocate takes the device's
 * whole capacity (dev->memory: its share of the GPU's free memory unless
 * capped, runtime/device.c) at creation, growth takes chunks as they are
 * needed. A cudaMalloc that fails leaves its error for cudaGetLastError,
 * which the region hook clears so that the next kernel's launch check
 * does not report it. mem_stats bounds what the pool could still grow by
 * with cudaMemGetInfo.
 *
 * CUDA Graphs (capture_begin to replay_free; the executor decides what to
 * capture, runtime/exec.h). A capture is CUDA's stream capture in
 * thread-local mode on the origin stream; the executor's fork and join
 * events bring the other streams (other logical devices', other GPUs')
 * into it and back. Failures during a capture are noted per thread: a
 * stream failed then (an operation refused at queue time, or a call the
 * capture rejected) makes capture_end return NULL, and those failures
 * are forgotten, since nothing captured ran; the executor then queues
 * the same work plainly, where a real failure shows again. A replay is
 * cudaGraphLaunch of the instantiated graph on the origin stream. The
 * step block (cx.step, kernels/cuda/cuda.h) is a device copy of the run's
 * step and seed: set_step writes it with a one-thread kernel taking them
 * as arguments, or, when the stream is capturing, with a copy from the
 * pinned step_host, which the caller rewrites before each replay.
 * host_alloc is pinned and portable host memory (cudaHostAlloc): the
 * only host memory a captured copy may touch.
 *
 * NCCL (tfg_backend_cuda_nccl_new; builds with TFG_BUILD_NCCL only): the
 * collective of runtime/collective.h across CUDA devices on distinct
 * GPUs, one communicator per group (ncclCommInitAll over the ranks' GPUs:
 * a single process drives them all, so no unique id travels). A call is
 * one NCCL group (ncclGroupStart, then one in-place ncclAllReduce per
 * rank and segment on the rank's stream, ncclGroupEnd): the segments are
 * separate buffers, and NCCL fuses the group's operations. MEAN is
 * ncclAvg; another scale (a hierarchical all-reduce's leaders, whose mean
 * is over more ranks than they are) is ncclSum then tfg_cuda_scale on
 * each rank's stream. An NCCL collective must be queued on every rank or
 * on none (the others would wait for it forever), so when any rank's
 * stream has failed already, or the dtype is not f32 or f64, nothing is
 * queued and every rank's stream fails with that reason (failed_here on
 * the streams where it began), which is what the ring's events carry
 * around the ring. The communicators are finalized together (one NCCL
 * group: finalizing is collective) and then destroyed.
 *
 * Every CUDA, cuBLAS, cuDNN and NCCL call is checked; a failure names the
 * call, the library's error text and file:line (NCCL's: its error string
 * and ncclGetLastError's detail). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#if TFG_BUILD_NCCL
#include <nccl.h>
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "tfg needs NCCL 2.10 or newer (ncclAvg); build with NCCL=0 without it"
#endif
#endif

#include "base/assert.h"
#include "base/grow.h"
#include "kernels/cuda/backend_kernels.h"
#include "kernels/cuda/cuda.h"
#include "runtime/backend.h"
#include "runtime/backend_cuda.h"
#include "runtime/backend_fault.h"
#include "runtime/backend_impl.h"
#include "runtime/event.h"
#include "runtime/mem.h"
#include "runtime/trace.h"

/* Scratch memory per stream that launches kernels (cuBLAS's workspace,
 * and tfg_cuda_ctx.workspace for cuBLASLt and cuDNN): 32 MiB is what
 * cuBLAS asks for on Hopper. runtime/device.c's CUDA_RESERVE counts it. */
#define WORKSPACE_BYTES ((size_t)32 << 20)

/* The device's flags: tfg_cuda_error then tfg_cuda_numerics, 256 bytes
 * apart (one allocation, one copy back per synchronize). */
#define FLAGS_NUMERICS_OFFSET 256
#define FLAGS_BYTES 512

/* ---- checked calls ---------------------------------------------------------- */

/* Appends "CALL failed: ERROR (FILE:LINE)" to *why when e is an error,
 * and clears the thread's last error: the kernels check their launches
 * with cudaGetLastError (TFG_CUDA_LAUNCHED), which must not see ours. */
static bool cuda_ok(cudaError_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == cudaSuccess) return true;
  if (why) tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, cudaGetErrorString(e), file, line);
  (void)cudaGetLastError();
  return false;
}
#define CUDA_OK(call, why) cuda_ok((call), #call, __FILE__, __LINE__, (why))

static bool cublas_ok(cublasStatus_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == CUBLAS_STATUS_SUCCESS) return true;
  if (why) tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, cublasGetStatusString(e), file, line);
  return false;
}
#define CUBLAS_OK(call, why) cublas_ok((call), #call, __FILE__, __LINE__, (why))

static bool cudnn_ok(cudnnStatus_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == CUDNN_STATUS_SUCCESS) return true;
  if (why) tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, cudnnGetErrorString(e), file, line);
  return false;
}
#define CUDNN_OK(call, why) cudnn_ok((call), #call, __FILE__, __LINE__, (why))

/* A call whose failure can only be ignored (freeing, at teardown): it is
 * still made, its error cleared. */
static void cuda_quiet(cudaError_t e) {
  if (e != cudaSuccess) (void)cudaGetLastError();
}

/* ---- the process: probe, peers, export streams, pools ------------------------- *
 * Lock discipline: no CUDA call is made under an event's mutex or under
 * grave_mu, which are what a host callback (export_done) takes; the other
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

/* Whether GPU a can address GPU b's memory, enabling peer access the first
 * time the pair is asked (cudaDeviceEnablePeerAccess is per ordered pair
 * and process). Leaves the current device at a. */
static bool peer_access(int a, int b) {
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

/* GPU k's export stream (made on first use), or NULL with *why. */
static cudaStream_t export_stream(int k, tfg_strbuf *why) {
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

typedef struct pool_entry {
  const tfg_device *dev; /* the logical device it serves */
  int gpu;
  tfg_mem_pool *pool;
  int refs;              /* backends using it; under pools_mu */
} pool_entry;

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

/* The pool of logical device dev, made (and preallocated when asked) by
 * the first backend on it; NULL with *why when the preallocation fails. */
static pool_entry *pool_acquire(const tfg_device *dev, bool preallocate, tfg_strbuf *why) {
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

static void pool_release(pool_entry *pe) {
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

/* ---- the backend's state ------------------------------------------------------ */

typedef struct cuda_backend cuda_backend;

/* A launch since the device's flags were last seen clear with every
 * stream idle: where a flagged data error is looked for. */
typedef struct launch_rec {
  const tfg_node *node; /* what it ran (a graph node, or the executor's FUSED node of a chain) */
  tfg_node_id id;       /* the executor's id for it (ctx->node after the call: the graph node a
                         * failure is reported at) */
  uint64_t seq;         /* its number on this backend, from 1: the tag of its numerics scan */
  bool int_input;       /* it has an integer input (noted at the launch: in[] may be gone) */
  tfg_stream *s;
} launch_rec;
#define MAX_LAUNCH_RECS ((size_t)1 << 16)

/* A traced operation: its timing events, not yet read. */
typedef struct slice {
  cudaEvent_t t0, t1;
  const char *name, *cat; /* static strings (op names live in the op table) */
  tfg_stream *s;
} slice;

struct tfg_stream {
  cuda_backend *cb;
  int index;          /* creation order on cb: the trace's thread id */
  cudaStream_t s;     /* NULL when it could not be made (the stream is failed) */
  /* The first failure, sticky (see the top). */
  tfg_status status;
  tfg_strbuf err;
  bool here;                /* it began on this stream */
  tfg_node_id fail_id;       /* a device-found failure's node (failed_node), or -1 */
  void *workspace;    /* WORKSPACE_BYTES of device memory, made on the first launch */
  void *pinned;       /* FLAGS_BYTES of pinned host memory: the flags read back */
};

struct cuda_backend {
  tfg_backend base;
  int gpu;                 /* the CUDA ordinal */
  tfg_backend_opts o;
  tfg_cuda_ctx cx;         /* what the kernels get (ctx->backend) */
  pool_entry *pe;
  char *flags;             /* device memory: tfg_cuda_error, then tfg_cuda_numerics */
  tfg_cuda_step *step_dev; /* device memory: the step block (cx.step) */
  tfg_cuda_step *step_host; /* pinned: what a captured set_step copies from */
  cudaStream_t aux;        /* read_now and the trace's base event */
  pthread_mutex_t aux_mu;  /* read_now may come from any thread */
  tfg_stream **streams;
  size_t nstreams, streams_cap;
  int streams_created;
  /* A failure the device found (the flags): sticky, every stream gets it. */
  tfg_status dev_status;
  tfg_strbuf dev_err;
  tfg_node_id dev_node_id;  /* its node, or -1 */
  launch_rec *launched;
  size_t nlaunched, launched_cap;
  uint64_t seq;             /* launches so far (launch_rec.seq) */
  /* The fault hook (backend.h's, by launch count). */
  int64_t launches, fault_after;
  char fault_msg[96];
  /* Tracing. */
  tfg_trace *trace;
  cudaEvent_t trace_base;
  double trace_base_host;
  slice *slices;
  size_t nslices, slices_cap;
  cudaEvent_t *spare;      /* timing events to reuse */
  size_t nspare, spare_cap;
};

static cuda_backend *cuda_of(tfg_backend *b) { return b->ctx; }
static const char *cuda_name(tfg_backend *b);
static bool is_cuda(const tfg_backend *b) { return b && b->i.name == cuda_name; }

/* The capture in progress on this thread (capture_begin to capture_end):
 * the streams that failed during it, whose failures capture_end forgets
 * (nothing captured ran). Per thread, as the capture mode is
 * (cudaStreamCaptureModeThreadLocal): executors on other threads (a
 * parameter server's workers) capture on their own. */
static _Thread_local struct {
  bool on;
  tfg_stream **failed;
  size_t n, cap;
} capturing;

/* Fails s (the first failure sticks). here: it began on s. */
static void stream_fail(tfg_stream *s, tfg_status st, bool here, const char *msg) {
  if (s->status != TFG_OK) return;
  if (capturing.on) {
    TFG_GROW(capturing.failed, capturing.n, capturing.cap, 8);
    capturing.failed[capturing.n++] = s;
  }
  s->status = st;
  s->here = here;
  s->fail_id = -1;
  tfg_strbuf_clear(&s->err);
  tfg_strbuf_puts(&s->err, msg && *msg ? msg : tfg_status_str(st));
}

/* ---- tracing ------------------------------------------------------------------ */

static cudaEvent_t timing_event(cuda_backend *cb) {
  if (cb->nspare) return cb->spare[--cb->nspare];
  cudaEvent_t e = NULL;
  /* On the backend's GPU: an event records only on its own device's streams. */
  if (cudaSetDevice(cb->gpu) != cudaSuccess || cudaEventCreate(&e) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return e;
}

static void timing_event_put(cuda_backend *cb, cudaEvent_t e) {
  if (!e) return;
  TFG_GROW(cb->spare, cb->nspare, cb->spare_cap, 16);
  cb->spare[cb->nspare++] = e;
}

/* Before an operation on s: its start event, or NULL when not tracing
 * (or the event cannot be had: the slice is then dropped, the run goes on). */
static cudaEvent_t trace_begin(cuda_backend *cb, tfg_stream *s) {
  if (!cb->trace || !s->s) return NULL;
  cudaEvent_t e = timing_event(cb);
  if (e && cudaEventRecord(e, s->s) != cudaSuccess) {
    (void)cudaGetLastError();
    timing_event_put(cb, e);
    return NULL;
  }
  return e;
}

/* After it: the end event, and the slice to read later. */
static void trace_end(cuda_backend *cb, tfg_stream *s, cudaEvent_t t0, const char *name, const char *cat) {
  if (!t0) return;
  cudaEvent_t t1 = timing_event(cb);
  if (!t1 || cudaEventRecord(t1, s->s) != cudaSuccess) {
    (void)cudaGetLastError();
    timing_event_put(cb, t0);
    timing_event_put(cb, t1);
    return;
  }
  TFG_GROW(cb->slices, cb->nslices, cb->slices_cap, 64);
  cb->slices[cb->nslices++] = (slice){t0, t1, name, cat, s};
}

/* Turns the pending slices of s (NULL: of every stream) into trace slices:
 * those whose end event has completed, or all of them after waiting when
 * wait is set. */
static void trace_flush(cuda_backend *cb, tfg_stream *s, bool wait) {
  size_t keep = 0;
  for (size_t i = 0; i < cb->nslices; i++) {
    slice *sl = &cb->slices[i];
    bool mine = !s || sl->s == s;
    cudaError_t ready = !mine ? cudaErrorNotReady : wait ? cudaEventSynchronize(sl->t1) : cudaEventQuery(sl->t1);
    if (ready == cudaErrorNotReady) {
      if (mine) (void)cudaGetLastError();
      cb->slices[keep++] = *sl;
      continue;
    }
    float ms0 = 0, ms1 = 0;
    if (ready == cudaSuccess && cb->trace && cudaEventElapsedTime(&ms0, cb->trace_base, sl->t0) == cudaSuccess &&
        cudaEventElapsedTime(&ms1, cb->trace_base, sl->t1) == cudaSuccess)
      tfg_trace_add(cb->trace, cb->base.device->index, sl->s->index, sl->name, sl->cat,
                    cb->trace_base_host + ms0 / 1e3, cb->trace_base_host + ms1 / 1e3);
    (void)cudaGetLastError(); /* NotReady, or a failed stream's events: the slice is dropped */
    timing_event_put(cb, sl->t0);
    timing_event_put(cb, sl->t1);
  }
  cb->nslices = keep;
}

/* ---- events ------------------------------------------------------------------- */

/* The CUDA part of an event (backend_impl.h's ext). */
typedef struct cuda_event_ext {
  cudaEvent_t *ev;    /* [G.count]: GPU k's, made on first use there */
  uint64_t gen;       /* the generation of the latest record a GPU issued */
  tfg_status status;  /* the failure that record carried */
  char *msg;
  uint64_t exported;  /* the latest generation handed to the host (export) */
} cuda_event_ext;

static _Thread_local bool in_host_callback;
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;
static cuda_event_ext **graveyard;
static size_t ngraveyard, graveyard_cap;

static void ext_destroy(cuda_event_ext *x) {
  for (int k = 0; k < G.count; k++)
    if (x->ev[k]) cuda_quiet(cudaEventDestroy(x->ev[k]));
  free(x->ev);
  free(x->msg);
  free(x);
}

/* An event's last reference may go in a host callback (export_done),
 * where no CUDA call is allowed: its part waits in the graveyard for the
 * next call of this backend that may make them. */
static void ext_free(void *p) {
  if (!in_host_callback) {
    ext_destroy(p);
    return;
  }
  pthread_mutex_lock(&grave_mu);
  TFG_GROW(graveyard, ngraveyard, graveyard_cap, 8);
  graveyard[ngraveyard++] = p;
  pthread_mutex_unlock(&grave_mu);
}

static void graveyard_drain(void) {
  pthread_mutex_lock(&grave_mu);
  cuda_event_ext **g = graveyard;
  size_t n = ngraveyard;
  graveyard = NULL;
  ngraveyard = graveyard_cap = 0;
  pthread_mutex_unlock(&grave_mu);
  for (size_t i = 0; i < n; i++) ext_destroy(g[i]);
  free(g);
}

static void cuda_event_export(tfg_event *e, uint64_t gen);

static cuda_event_ext *event_ext(tfg_event *e) {
  pthread_mutex_lock(&e->mu);
  if (!e->ext) {
    cuda_event_ext *x = calloc(1, sizeof *x);
    TFG_ASSERT(x != NULL);
    x->ev = calloc((size_t)G.count + 1, sizeof *x->ev);
    TFG_ASSERT(x->ev != NULL);
    e->ext = x;
    e->ext_free = ext_free;
    e->ext_export = cuda_event_export;
  }
  cuda_event_ext *x = e->ext;
  pthread_mutex_unlock(&e->mu);
  return x;
}

/* x's event on GPU gpu, made on first use. Only the thread that queues on
 * the event's streams (the executor's) makes them or reads ev[], so no
 * lock is needed for it. */
static cudaEvent_t ext_event(cuda_event_ext *x, int gpu, tfg_strbuf *why) {
  if (!x->ev[gpu]) {
    cudaEvent_t ce = NULL;
    if (!CUDA_OK(cudaSetDevice(gpu), why) || !CUDA_OK(cudaEventCreateWithFlags(&ce, cudaEventDisableTiming), why))
      return NULL;
    x->ev[gpu] = ce;
  }
  return x->ev[gpu];
}

static tfg_event *cuda_event_create(tfg_backend *b) {
  (void)b;
  graveyard_drain();
  return tfg_event_new();
}

static void cuda_event_free(tfg_backend *b, tfg_event *e) {
  (void)b;
  if (e) tfg_event_unref(e);
}

/* The record is issued (generation, who, what it carries) after the
 * cudaEventRecord, under the event's mutex; a failed record fails the
 * stream, and the record then carries that failure. */
static void cuda_event_record(tfg_backend *b, tfg_stream *s, tfg_event *e) {
  cuda_backend *cb = cuda_of(b);
  cuda_event_ext *x = event_ext(e);
  tfg_strbuf why = {0};
  cudaEvent_t ce = ext_event(x, cb->gpu, &why);
  if (!ce || !s->s || !CUDA_OK(cudaSetDevice(cb->gpu), &why) || !CUDA_OK(cudaEventRecord(ce, s->s), &why))
    stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  tfg_strbuf_free(&why);
  pthread_mutex_lock(&e->mu);
  x->gen = ++e->issued;
  e->last_gpu = cb->gpu;
  x->status = s->status;
  free(x->msg);
  x->msg = s->status != TFG_OK ? strdup(s->err.data ? s->err.data : "") : NULL;
  pthread_mutex_unlock(&e->mu);
}

static void cuda_event_wait(tfg_backend *b, tfg_stream *s, tfg_event *e) {
  cuda_backend *cb = cuda_of(b);
  pthread_mutex_lock(&e->mu);
  uint64_t gen = e->issued;
  int gpu = e->last_gpu;
  cuda_event_ext *x = e->ext;
  cudaEvent_t ce = gpu >= 0 && x ? x->ev[gpu] : NULL;
  tfg_status carried = gpu >= 0 && x ? x->status : TFG_OK;
  char *msg = carried != TFG_OK && x->msg ? strdup(x->msg) : NULL;
  pthread_mutex_unlock(&e->mu);
  if (gen == 0 || s->status != TFG_OK) {
    /* never recorded: a no-op (as in CUDA); a failed stream waits for nothing */
    free(msg);
    return;
  }
  if (gpu >= 0) {
    if (carried != TFG_OK) {
      stream_fail(s, carried, false, msg);
    } else if (ce) {
      tfg_strbuf why = {0};
      if (!CUDA_OK(cudaSetDevice(cb->gpu), &why) || !CUDA_OK(cudaStreamWaitEvent(s->s, ce, 0), &why))
        stream_fail(s, TFG_ERR_DEVICE, true, why.data);
      tfg_strbuf_free(&why);
    }
  } else {
    /* A host stream's record: wait here until it has run (see the top). */
    tfg_strbuf m = {0};
    tfg_status st = tfg_event_wait_done(e, gen, &m);
    if (st != TFG_OK) stream_fail(s, st, false, m.data);
    tfg_strbuf_free(&m);
  }
  free(msg);
}

typedef struct export_rec {
  tfg_event *e; /* a reference, dropped by the callback */
  uint64_t gen;
  tfg_status status;
  char *msg;
} export_rec;

/* A host function (cudaLaunchHostFunc): no CUDA call in here. */
static void CUDART_CB export_done(void *arg) {
  export_rec *r = arg;
  in_host_callback = true;
  tfg_event_complete(r->e, r->gen, r->status, r->msg);
  tfg_event_unref(r->e);
  in_host_callback = false;
  free(r->msg);
  free(r);
}

/* backend_impl.h's ext_export: a host stream waits for generation gen,
 * which a GPU's stream recorded: complete it on the host once that GPU
 * has reached the record (once per generation). */
static void cuda_event_export(tfg_event *e, uint64_t gen) {
  pthread_mutex_lock(&e->mu);
  cuda_event_ext *x = e->ext;
  int gpu = e->last_gpu;
  if (!x || gpu < 0 || x->gen != gen || x->exported >= gen || atomic_load(&e->done) >= gen) {
    pthread_mutex_unlock(&e->mu);
    return;
  }
  x->exported = gen;
  cudaEvent_t ce = x->ev[gpu];
  export_rec *r = calloc(1, sizeof *r);
  TFG_ASSERT(r != NULL);
  r->e = tfg_event_ref(e);
  r->gen = gen;
  r->status = x->status;
  r->msg = x->msg ? strdup(x->msg) : NULL;
  pthread_mutex_unlock(&e->mu);
  tfg_strbuf why = {0};
  cudaStream_t xs = ce ? export_stream(gpu, &why) : NULL;
  if (xs && CUDA_OK(cudaSetDevice(gpu), &why) && CUDA_OK(cudaStreamWaitEvent(xs, ce, 0), &why) &&
      CUDA_OK(cudaLaunchHostFunc(xs, export_done, r), &why)) {
    tfg_strbuf_free(&why);
    return;
  }
  /* The GPU cannot tell us: complete it now, failed, so no host stream
   * waits forever (the recording stream has failed when ce is NULL). */
  tfg_event_complete(e, gen, r->status != TFG_OK ? r->status : TFG_ERR_DEVICE,
                     r->status != TFG_OK ? r->msg : why.data);
  tfg_event_unref(e);
  tfg_strbuf_free(&why);
  free(r->msg);
  free(r);
}

/* ---- the device's flags ------------------------------------------------------- */

static bool op_in(tfg_op_id op, const tfg_op_id *ops, int n) {
  for (int i = 0; i < n; i++)
    if (ops[i] == op) return true;
  return false;
}

/* The launch a data error of this code most likely came from when the
 * kernel did not say (see the top): the first since the flags were last
 * clear whose op reports such errors, else the first with an integer
 * input. */
static const launch_rec *guess_launch(const cuda_backend *cb, int code) {
  static const tfg_op_id ids[] = {TFG_OP_EMBEDDING, TFG_OP_EMBEDDING_GRAD, TFG_OP_ONE_HOT};
  static const tfg_op_id labels[] = {TFG_OP_CROSS_ENTROPY, TFG_OP_CROSS_ENTROPY_GRAD, TFG_OP_ACCURACY};
  static const tfg_op_id divs[] = {TFG_OP_DIV, TFG_OP_FUSED};
  for (size_t i = 0; i < cb->nlaunched; i++) {
    const tfg_node *nd = cb->launched[i].node;
    if ((code == TFG_CUDA_E_ID_RANGE && op_in(nd->op, ids, 3)) ||
        (code == TFG_CUDA_E_LABEL_RANGE && op_in(nd->op, labels, 3)) ||
        (code == TFG_CUDA_E_DIV_ZERO && op_in(nd->op, divs, 2) && tfg_dtype_is_int(nd->dtype)))
      return &cb->launched[i];
  }
  for (size_t i = 0; i < cb->nlaunched; i++)
    if (cb->launched[i].int_input) return &cb->launched[i];
  return NULL;
}

static const launch_rec *launch_by_id(const cuda_backend *cb, tfg_node_id id) {
  for (size_t i = 0; i < cb->nlaunched; i++)
    if (cb->launched[i].id == id) return &cb->launched[i];
  return NULL;
}

static const launch_rec *launch_by_seq(const cuda_backend *cb, uint64_t seq) {
  for (size_t i = 0; i < cb->nlaunched; i++)
    if (cb->launched[i].seq == seq) return &cb->launched[i];
  return NULL;
}

/* Reads the flags copied back to pinned (after a synchronize): the first
 * failure found becomes the device's (sticky). */
static void read_flags(cuda_backend *cb, const char *pinned) {
  if (cb->dev_status != TFG_OK) return;
  tfg_cuda_error ke;
  tfg_cuda_numerics nf;
  memcpy(&ke, pinned, sizeof ke);
  memcpy(&nf, pinned + FLAGS_NUMERICS_OFFSET, sizeof nf);
  if (ke.code != TFG_CUDA_E_NONE) {
    const launch_rec *l = ke.node >= 0 ? launch_by_id(cb, ke.node) : guess_launch(cb, ke.code);
    cb->dev_node_id = ke.node >= 0 ? ke.node : l ? l->id : -1;
    cb->dev_status = TFG_ERR_NUMERIC;
    tfg_strbuf_clear(&cb->dev_err);
    if (ke.code == TFG_CUDA_E_DIV_ZERO)
      tfg_strbuf_puts(&cb->dev_err, "integer division by zero");
    else if (ke.code == TFG_CUDA_E_ID_RANGE)
      tfg_strbuf_printf(&cb->dev_err, "%s id %lld is outside [0, %lld)", l ? tfg_op_get(l->node->op)->name : "an",
                        ke.value, ke.limit);
    else if (ke.code == TFG_CUDA_E_LABEL_RANGE)
      tfg_strbuf_printf(&cb->dev_err, "label %lld is outside [0, %lld) (the logits have %lld classes)", ke.value,
                        ke.limit, ke.limit);
    else
      tfg_strbuf_printf(&cb->dev_err, "a kernel found the value %lld outside [0, %lld) (data error %d)", ke.value,
                        ke.limit, ke.code);
  } else if (nf.tag != 0) {
    /* The scan's tag is its launch's number (cuda_launch). */
    const launch_rec *l = launch_by_seq(cb, nf.tag);
    long long index;
    double value;
    tfg_cuda_numerics_decode(&nf, &index, &value);
    cb->dev_node_id = l ? l->id : -1;
    cb->dev_status = TFG_ERR_NUMERIC;
    tfg_strbuf_clear(&cb->dev_err);
    if (l) {
      tfg_strbuf sh = {0};
      tfg_shape_format(&sh, l->node->dtype, &l->node->shape);
      tfg_strbuf_printf(&cb->dev_err, "produced %g at element %lld of its %s result", value, index, sh.data);
      tfg_strbuf_free(&sh);
    } else {
      tfg_strbuf_printf(&cb->dev_err, "produced %g at element %lld of its result", value, index);
    }
  }
}

/* Whether s launched a node a device failure names (so it began there). */
static bool launched_on(const cuda_backend *cb, const tfg_stream *s) {
  for (size_t i = 0; i < cb->nlaunched; i++)
    if (cb->launched[i].s == s && cb->dev_node_id >= 0 && cb->launched[i].id == cb->dev_node_id)
      return true;
  return false;
}

/* Forgets the launch records once every stream is idle and the flags
 * were clear after all of them: a later error cannot come from them. */
static void forget_launches(cuda_backend *cb) {
  for (size_t i = 0; i < cb->nstreams; i++) {
    tfg_stream *s = cb->streams[i];
    if (!s->s) continue;
    cudaError_t q = cudaStreamQuery(s->s);
    if (q != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
  }
  cb->nlaunched = 0;
}

/* ---- the vtable ----------------------------------------------------------------- */

static const char *cuda_name(tfg_backend *b) {
  (void)b;
  return "cuda";
}

/* Every op with a CUDA kernel, and the sources whose values the executor
 * copies in itself (they have no kernel). */
static bool cuda_supports_op(tfg_backend *b, const tfg_node *node) {
  (void)b;
  switch (node->op) {
  case TFG_OP_PARAM:
  case TFG_OP_INPUT:
  case TFG_OP_STATE:
  case TFG_OP_CONST: return true;
  default: return tfg_cuda_kernel(node->op) != NULL;
  }
}

/* Not stream-ordered, like the host backend's: the caller frees only
 * memory no queued operation still uses. */
static void *cuda_alloc(tfg_backend *b, size_t bytes) { return tfg_mem_alloc(cuda_of(b)->pe->pool, bytes); }
static void cuda_free(tfg_backend *b, void *ptr) { tfg_mem_free(cuda_of(b)->pe->pool, ptr); }

static tfg_stream *cuda_stream_create(tfg_backend *b) {
  cuda_backend *cb = cuda_of(b);
  tfg_stream *s = calloc(1, sizeof *s);
  TFG_ASSERT(s != NULL);
  s->cb = cb;
  s->index = cb->streams_created++;
  s->fail_id = -1;
  tfg_strbuf why = {0};
  if (!CUDA_OK(cudaSetDevice(cb->gpu), &why) ||
      !CUDA_OK(cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking), &why) ||
      !CUDA_OK(cudaMallocHost(&s->pinned, FLAGS_BYTES), &why))
    stream_fail(s, TFG_ERR_DEVICE, true, why.data); /* every later call reports it */
  tfg_strbuf_free(&why);
  TFG_GROW(cb->streams, cb->nstreams, cb->streams_cap, 4);
  cb->streams[cb->nstreams++] = s;
  return s;
}

/* Drains s, then frees it and what it holds. */
static void stream_release(cuda_backend *cb, tfg_stream *s) {
  cuda_quiet(cudaSetDevice(cb->gpu));
  trace_flush(cb, s, true);
  if (s->s) {
    cuda_quiet(cudaStreamSynchronize(s->s));
    cuda_quiet(cudaStreamDestroy(s->s));
  }
  if (s->workspace) cuda_quiet(cudaFree(s->workspace));
  if (s->pinned) cuda_quiet(cudaFreeHost(s->pinned));
  tfg_strbuf_free(&s->err);
  free(s);
}

static void cuda_stream_free(tfg_backend *b, tfg_stream *s) {
  if (!s) return;
  cuda_backend *cb = cuda_of(b);
  TFG_ASSERT(s->cb == cb);
  size_t i = 0;
  while (cb->streams[i] != s) i++;
  cb->streams[i] = cb->streams[--cb->nstreams];
  size_t keep = 0; /* launch records must not name a freed stream */
  for (size_t k = 0; k < cb->nlaunched; k++)
    if (cb->launched[k].s != s) cb->launched[keep++] = cb->launched[k];
  cb->nlaunched = keep;
  stream_release(cb, s);
}

/* One queued copy of bytes in the given direction, traced as name. */
static void queue_copy(cuda_backend *cb, tfg_stream *s, void *dst, const void *src, size_t bytes,
                       enum cudaMemcpyKind kind, const char *name) {
  if (s->status != TFG_OK || bytes == 0) return;
  tfg_strbuf why = {0};
  cudaEvent_t t0 = trace_begin(cb, s);
  if (CUDA_OK(cudaSetDevice(cb->gpu), &why) && CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, s->s), &why))
    trace_end(cb, s, t0, name, "copy");
  else {
    timing_event_put(cb, t0);
    stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  }
  tfg_strbuf_free(&why);
}

/* Pageable host memory (see the top): CUDA stages it. */
static void cuda_copy_from_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes) {
  queue_copy(cuda_of(b), s, dst, src, bytes, cudaMemcpyHostToDevice, "h2d");
}

static void cuda_copy_to_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes) {
  queue_copy(cuda_of(b), s, dst, src, bytes, cudaMemcpyDeviceToHost, "d2h");
}

static void cuda_copy_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src,
                           size_t bytes) {
  cuda_backend *cb = cuda_of(b);
  if (s->status != TFG_OK || bytes == 0) return;
  if (!is_cuda(src_b)) {
    if (src_b && src_b->i.read_now) {
      tfg_strbuf m = {0};
      tfg_strbuf_printf(&m, "copy_peer: cannot copy from %s's memory (a %s device) to a GPU", src_b->device->name,
                        src_b->i.name(src_b));
      stream_fail(s, TFG_ERR_DEVICE, true, m.data);
      tfg_strbuf_free(&m);
      return;
    }
    queue_copy(cb, s, dst, src, bytes, cudaMemcpyHostToDevice, "copy"); /* a host device's memory */
    return;
  }
  int sg = cuda_of(src_b)->gpu;
  if (sg == cb->gpu) {
    queue_copy(cb, s, dst, src, bytes, cudaMemcpyDeviceToDevice, "copy");
    return;
  }
  (void)peer_access(cb->gpu, sg); /* direct when it can be; CUDA stages it otherwise */
  tfg_strbuf why = {0};
  cudaEvent_t t0 = trace_begin(cb, s);
  if (CUDA_OK(cudaSetDevice(cb->gpu), &why) && CUDA_OK(cudaMemcpyPeerAsync(dst, cb->gpu, src, sg, bytes, s->s), &why))
    trace_end(cb, s, t0, "copy", "copy");
  else {
    timing_event_put(cb, t0);
    stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  }
  tfg_strbuf_free(&why);
}

static void cuda_reduce_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src,
                             size_t count, tfg_dtype dt, double scale) {
  cuda_backend *cb = cuda_of(b);
  if (s->status != TFG_OK) return;
  tfg_strbuf m = {0};
  bool half = dt == TFG_DTYPE_F16 || dt == TFG_DTYPE_BF16;
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64 && !half) {
    tfg_strbuf_printf(&m, "reduce_peer: cannot reduce %s elements (the cuda backend reduces float dtypes)",
                      tfg_dtype_name(dt));
  } else if (!is_cuda(src_b)) {
    tfg_strbuf_printf(&m, "reduce_peer: %s (cuda:%d) cannot add from %s's memory: it is not GPU memory",
                      b->device->name, cb->gpu, src_b ? src_b->device->name : "the host");
  } else if (!peer_access(cb->gpu, cuda_of(src_b)->gpu)) {
    tfg_strbuf_printf(&m,
                      "reduce_peer: %s (cuda:%d) cannot address the memory of %s (cuda:%d): the two GPUs have no "
                      "peer access",
                      b->device->name, cb->gpu, src_b->device->name, cuda_of(src_b)->gpu);
  } else if (count > 0) {
    cudaEvent_t t0 = trace_begin(cb, s);
    if (CUDA_OK(cudaSetDevice(cb->gpu), &m) &&
        CUDA_OK(half ? tfg_cuda_reduce_peer_half(dst, src, count, dt == TFG_DTYPE_BF16, scale, s->s)
                     : tfg_cuda_reduce_peer(dst, src, count, dt == TFG_DTYPE_F64, scale, s->s),
                &m))
      trace_end(cb, s, t0, "reduce", "collective");
    else
      timing_event_put(cb, t0);
  }
  if (m.len) stream_fail(s, TFG_ERR_DEVICE, true, m.data);
  tfg_strbuf_free(&m);
}

static tfg_kernel_fn cuda_kernel(tfg_backend *b, const tfg_node *node) {
  (void)b;
  return tfg_cuda_kernel(node->op);
}

/* Swaps the trace: the pending slices go to the old one first (waiting
 * for them), then a new base event places the GPU's times on t's clock. */
static void cuda_set_trace(tfg_backend *b, tfg_trace *t) {
  cuda_backend *cb = cuda_of(b);
  if (cb->trace) trace_flush(cb, NULL, true);
  cb->trace = NULL;
  if (!t) return;
  cuda_quiet(cudaSetDevice(cb->gpu));
  if (!cb->trace_base && cudaEventCreate(&cb->trace_base) != cudaSuccess) {
    (void)cudaGetLastError();
    cb->trace_base = NULL;
    return; /* no trace for this device: the run itself is not affected */
  }
  pthread_mutex_lock(&cb->aux_mu);
  bool ok = cudaEventRecord(cb->trace_base, cb->aux) == cudaSuccess && cudaEventSynchronize(cb->trace_base) == cudaSuccess;
  pthread_mutex_unlock(&cb->aux_mu);
  if (!ok) {
    (void)cudaGetLastError();
    return;
  }
  cb->trace_base_host = tfg_trace_now();
  cb->trace = t;
}

/* Makes s's workspace (on its first launch). A capture may be the first
 * to launch on s (a key whose plain run never reached it): cudaMalloc is
 * refused while this thread captures, so the mode is relaxed for the
 * call; the memory is s's, not the graph's. */
static bool stream_workspace(tfg_stream *s, tfg_strbuf *why) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cuda_quiet(cudaThreadExchangeStreamCaptureMode(&mode));
  bool ok = CUDA_OK(cudaMalloc(&s->workspace, WORKSPACE_BYTES), why);
  cuda_quiet(cudaThreadExchangeStreamCaptureMode(&mode));
  if (!ok) s->workspace = NULL;
  return ok;
}

/* Runs fn on the caller's thread (it queues GPU work; see the top). */
static void cuda_launch(tfg_backend *b, tfg_stream *s, tfg_kernel_fn fn, tfg_kernel_ctx *ctx, const tfg_node *node,
                        const tfg_tensor *in, tfg_tensor *out) {
  cuda_backend *cb = cuda_of(b);
  if (cb->fault_after > 0 && ++cb->launches == cb->fault_after) { /* counts every launch call, as the host's */
    stream_fail(s, TFG_ERR_DEVICE, true, cb->fault_msg);
    return;
  }
  if (s->status != TFG_OK) return;
  tfg_strbuf why = {0};
  bool ok = CUDA_OK(cudaSetDevice(cb->gpu), &why) && (s->workspace || stream_workspace(s, &why)) &&
            CUBLAS_OK(cublasSetStream(cb->cx.cublas, s->s), &why) &&
            CUBLAS_OK(cublasSetWorkspace(cb->cx.cublas, s->workspace, WORKSPACE_BYTES), &why) &&
            CUDNN_OK(cudnnSetStream(cb->cx.cudnn, s->s), &why);
  if (!ok) {
    if (!s->workspace) (void)cudaGetLastError();
    stream_fail(s, TFG_ERR_DEVICE, true, why.data);
    tfg_strbuf_free(&why);
    return;
  }
  cb->cx.stream = s->s;
  cb->cx.workspace = s->workspace;
  cb->cx.workspace_bytes = WORKSPACE_BYTES;
  ctx->backend = &cb->cx;
  cudaEvent_t t0 = trace_begin(cb, s);
  tfg_strbuf_clear(&ctx->err);
  tfg_status st = fn(ctx, node, in, out);
  if (st != TFG_OK) {
    timing_event_put(cb, t0);
    if (ctx->err.len)
      stream_fail(s, st, true, ctx->err.data);
    else {
      tfg_strbuf_printf(&why, "kernel failed: %s", tfg_status_str(st));
      stream_fail(s, st, true, why.data);
    }
    tfg_strbuf_free(&why);
    return;
  }
  uint64_t seq = ++cb->seq;
  if (node && cb->nlaunched < MAX_LAUNCH_RECS) {
    bool int_input = false;
    for (int j = 0; in && j < node->ninputs; j++) int_input |= tfg_dtype_is_int(in[j].dtype);
    TFG_GROW(cb->launched, cb->nlaunched, cb->launched_cap, 64);
    cb->launched[cb->nlaunched++] = (launch_rec){node, ctx->node, seq, int_input, s};
  }
  if (node && cb->o.check_numerics && out && (out->dtype == TFG_DTYPE_F32 || out->dtype == TFG_DTYPE_F64)) {
    int64_t n = tfg_shape_numel(&out->shape);
    tfg_cuda_numerics *flag = (tfg_cuda_numerics *)(cb->flags + FLAGS_NUMERICS_OFFSET);
    if (n > 0 && !CUDA_OK(tfg_cuda_check_finite(out->data, (size_t)n, out->dtype == TFG_DTYPE_F64,
                                                (unsigned long long)seq, flag, s->s),
                          &why)) {
      timing_event_put(cb, t0);
      stream_fail(s, TFG_ERR_DEVICE, true, why.data);
      tfg_strbuf_free(&why);
      return;
    }
  }
  trace_end(cb, s, t0, node ? tfg_op_get(node->op)->name : "kernel", "op");
  tfg_strbuf_free(&why);
}

static tfg_status cuda_read_now(tfg_backend *b, void *dst, const void *src, size_t bytes, tfg_strbuf *err) {
  cuda_backend *cb = cuda_of(b);
  if (bytes == 0) return TFG_OK;
  pthread_mutex_lock(&cb->aux_mu);
  tfg_strbuf why = {0};
  bool ok = CUDA_OK(cudaSetDevice(cb->gpu), &why) &&
            CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->aux), &why) &&
            CUDA_OK(cudaStreamSynchronize(cb->aux), &why);
  pthread_mutex_unlock(&cb->aux_mu);
  if (!ok && err) tfg_strbuf_printf(err, "reading %s's memory: %s", b->device->name, why.data);
  tfg_strbuf_free(&why);
  return ok ? TFG_OK : TFG_ERR_DEVICE;
}

static void cuda_mem_stats(tfg_backend *b, tfg_mem_stats *st, int64_t *free_bytes) {
  cuda_backend *cb = cuda_of(b);
  tfg_mem_pool_stats(cb->pe->pool, st);
  int64_t usable = st->capacity > 0 ? st->capacity / TFG_MEM_ALIGN * TFG_MEM_ALIGN : 0;
  int64_t grow = usable - st->reserved;
  size_t fr = 0, total = 0;
  if (cudaSetDevice(cb->gpu) == cudaSuccess && cudaMemGetInfo(&fr, &total) == cudaSuccess) {
    if ((int64_t)fr < grow) grow = (int64_t)fr;
  } else {
    (void)cudaGetLastError();
  }
  *free_bytes = st->reserved - st->in_use + (grow > 0 ? grow : 0);
}

/* Waits for s, then reads what the device found (see the top). */
static tfg_status cuda_synchronize(tfg_backend *b, tfg_stream *s, tfg_strbuf *err) {
  cuda_backend *cb = cuda_of(b);
  TFG_ASSERT(s->cb == cb);
  graveyard_drain();
  if (s->s && s->pinned) {
    tfg_strbuf why = {0};
    bool ok = CUDA_OK(cudaSetDevice(cb->gpu), &why) &&
              CUDA_OK(cudaMemcpyAsync(s->pinned, cb->flags, FLAGS_BYTES, cudaMemcpyDeviceToHost, s->s), &why) &&
              CUDA_OK(cudaStreamSynchronize(s->s), &why);
    if (ok)
      read_flags(cb, s->pinned);
    else
      stream_fail(s, TFG_ERR_DEVICE, true, why.data);
    tfg_strbuf_free(&why);
  }
  if (cb->dev_status != TFG_OK && s->status == TFG_OK) {
    stream_fail(s, cb->dev_status, launched_on(cb, s), cb->dev_err.data);
    s->fail_id = cb->dev_node_id;
  }
  trace_flush(cb, s, false);
  if (s->status == TFG_OK) forget_launches(cb);
  if (s->status != TFG_OK && err) tfg_strbuf_puts(err, s->err.data);
  return s->status;
}

static bool cuda_failed_here(tfg_backend *b, tfg_stream *s) {
  (void)b;
  return s->status != TFG_OK && s->here;
}

static tfg_node_id cuda_failed_node(tfg_backend *b, tfg_stream *s) {
  (void)b;
  return s->status == TFG_OK ? -1 : s->fail_id;
}

/* Drains and frees every stream, then the handles, the flags and the
 * backend's share of the pool (the pool goes with its last backend).
 * Events are not the backend's: their owners free them. */
static void cuda_destroy(tfg_backend *b) {
  if (!b) return;
  cuda_backend *cb = cuda_of(b);
  cuda_quiet(cudaSetDevice(cb->gpu));
  if (cb->trace) trace_flush(cb, NULL, true);
  cb->trace = NULL;
  while (cb->nstreams) stream_release(cb, cb->streams[--cb->nstreams]);
  free(cb->streams);
  trace_flush(cb, NULL, true); /* nothing left: recycles the events */
  for (size_t i = 0; i < cb->nspare; i++) cuda_quiet(cudaEventDestroy(cb->spare[i]));
  free(cb->spare);
  free(cb->slices);
  free(cb->launched);
  if (cb->trace_base) cuda_quiet(cudaEventDestroy(cb->trace_base));
  if (cb->cx.cudnn) (void)cudnnDestroy(cb->cx.cudnn);
  if (cb->cx.cublaslt) (void)cublasLtDestroy(cb->cx.cublaslt);
  if (cb->cx.cublas) (void)cublasDestroy(cb->cx.cublas);
  if (cb->flags) cuda_quiet(cudaFree(cb->flags));
  if (cb->step_dev) cuda_quiet(cudaFree(cb->step_dev));
  if (cb->step_host) cuda_quiet(cudaFreeHost(cb->step_host));
  if (cb->aux) {
    cuda_quiet(cudaStreamSynchronize(cb->aux));
    cuda_quiet(cudaStreamDestroy(cb->aux));
  }
  pool_release(cb->pe);
  graveyard_drain();
  pthread_mutex_destroy(&cb->aux_mu);
  tfg_strbuf_free(&cb->dev_err);
  free(cb);
}

/* ---- captured runs (CUDA Graphs) ------------------------------------------------- */

struct tfg_replay {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  int gpu;
};

/* Pinned and portable: every GPU's copies may use it (a captured copy
 * must: pageable memory cannot be captured). The executor allocates
 * stages while it captures, where cudaHostAlloc is refused
 * (cudaErrorStreamCaptureUnsupported) unless this thread's capture mode
 * is relaxed for the call, as PyTorch's host allocator does: the memory
 * is not part of the graph and outlives it. */
static void *cuda_host_alloc(tfg_backend *b, size_t bytes) {
  void *p = NULL;
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cuda_quiet(cudaThreadExchangeStreamCaptureMode(&mode));
  if (cudaSetDevice(cuda_of(b)->gpu) != cudaSuccess ||
      cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    p = NULL;
  }
  cuda_quiet(cudaThreadExchangeStreamCaptureMode(&mode));
  return p;
}

static void cuda_host_free(tfg_backend *b, void *ptr) {
  (void)b;
  if (ptr) cuda_quiet(cudaFreeHost(ptr));
}

/* Outside a capture the values travel as a kernel's arguments (calls may
 * follow each other unsynchronized, as the conformance suite's launches
 * do); inside one, as a copy from step_host, which a replay's caller
 * rewrites first (s NULL). */
static void cuda_set_step(tfg_backend *b, tfg_stream *s, int64_t step, uint64_t seed) {
  cuda_backend *cb = cuda_of(b);
  cb->step_host->step = step;
  cb->step_host->seed = seed;
  if (!s || s->status != TFG_OK) return;
  tfg_strbuf why = {0};
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  bool ok = CUDA_OK(cudaSetDevice(cb->gpu), &why) && CUDA_OK(cudaStreamIsCapturing(s->s, &cs), &why);
  if (ok && cs == cudaStreamCaptureStatusActive)
    ok = CUDA_OK(cudaMemcpyAsync(cb->step_dev, cb->step_host, sizeof *cb->step_host, cudaMemcpyHostToDevice, s->s),
                 &why);
  else if (ok)
    ok = CUDA_OK(tfg_cuda_set_step(cb->step_dev, step, seed, s->s), &why);
  if (!ok) stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  tfg_strbuf_free(&why);
}

/* Thread-local mode: a call that could break the capture (cudaMalloc,
 * a synchronous copy) made on this thread fails it, which capture_end
 * reports; other threads are not affected. */
static bool cuda_capture_begin(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  cuda_backend *cb = cuda_of(b);
  TFG_ASSERT(!capturing.on);
  if (s->status != TFG_OK) {
    tfg_strbuf_printf(why, "the stream has failed: %s", s->err.data ? s->err.data : "");
    return false;
  }
  if (!CUDA_OK(cudaSetDevice(cb->gpu), why) ||
      !CUDA_OK(cudaStreamBeginCapture(s->s, cudaStreamCaptureModeThreadLocal), why))
    return false;
  capturing.on = true;
  capturing.n = 0;
  return true;
}

static tfg_replay *cuda_capture_end(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  cuda_backend *cb = cuda_of(b);
  TFG_ASSERT(capturing.on);
  capturing.on = false;
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaSetDevice(cb->gpu);
  if (e == cudaSuccess) e = cudaStreamEndCapture(s->s, &graph);
  bool ok = cuda_ok(e, "cudaStreamEndCapture", __FILE__, __LINE__, why);
  if (capturing.n > 0) { /* the first failure says why; all are forgotten */
    if (ok) tfg_strbuf_printf(why, "%s", capturing.failed[0]->err.data ? capturing.failed[0]->err.data : "a failure");
    ok = false;
    for (size_t i = 0; i < capturing.n; i++) {
      tfg_stream *f = capturing.failed[i];
      f->status = TFG_OK;
      f->here = false;
      f->fail_id = -1;
      tfg_strbuf_clear(&f->err);
    }
    capturing.n = 0;
  }
  tfg_replay *r = NULL;
  if (ok) {
    r = calloc(1, sizeof *r);
    TFG_ASSERT(r != NULL);
    r->graph = graph;
    r->gpu = cb->gpu;
    ok = CUDA_OK(cudaGraphInstantiateWithFlags(&r->exec, graph, 0), why);
    if (!ok) {
      free(r);
      r = NULL;
    }
  }
  if (!ok && graph) cuda_quiet(cudaGraphDestroy(graph));
  free(capturing.failed);
  capturing.failed = NULL;
  capturing.cap = 0;
  return r;
}

static void cuda_replay(tfg_backend *b, tfg_stream *s, tfg_replay *r) {
  cuda_backend *cb = cuda_of(b);
  if (s->status != TFG_OK) return;
  tfg_strbuf why = {0};
  if (!CUDA_OK(cudaSetDevice(cb->gpu), &why) || !CUDA_OK(cudaGraphLaunch(r->exec, s->s), &why))
    stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  tfg_strbuf_free(&why);
}

static void cuda_replay_free(tfg_backend *b, tfg_replay *r) {
  (void)b;
  if (!r) return;
  cuda_quiet(cudaSetDevice(r->gpu));
  if (r->exec) cuda_quiet(cudaGraphExecDestroy(r->exec));
  if (r->graph) cuda_quiet(cudaGraphDestroy(r->graph));
  free(r);
}

static const tfg_backend_i cuda_i = {
    .name = cuda_name,
    .supports_op = cuda_supports_op,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .stream_create = cuda_stream_create,
    .stream_free = cuda_stream_free,
    .event_create = cuda_event_create,
    .event_free = cuda_event_free,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .copy_from_host = cuda_copy_from_host,
    .copy_to_host = cuda_copy_to_host,
    .copy_peer = cuda_copy_peer,
    .reduce_peer = cuda_reduce_peer,
    .kernel = cuda_kernel,
    .set_trace = cuda_set_trace,
    .launch = cuda_launch,
    .read_now = cuda_read_now,
    .mem_stats = cuda_mem_stats,
    .synchronize = cuda_synchronize,
    .failed_here = cuda_failed_here,
    .failed_node = cuda_failed_node,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .set_step = cuda_set_step,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .replay_free = cuda_replay_free,
    .destroy = cuda_destroy,
};

/* ---- creation ------------------------------------------------------------------- */

tfg_backend *tfg_backend_cuda_new(const tfg_device *dev, const tfg_backend_opts *o, tfg_strbuf *why) {
  static const tfg_backend_opts defaults = {0};
  if (!o) o = &defaults;
  TFG_ASSERT(dev->kind == TFG_DEVICE_CUDA);
  int n = tfg_backend_cuda_probe(NULL, NULL, NULL);
  TFG_ASSERT(dev->physical >= 0 && dev->physical < n); /* runtime/backend.c checked */
  const tfg_gpu_info *gi = &G.info[dev->physical];
  if (gi->major < 7) {
    tfg_strbuf_printf(why, "cuda:%d (%s) has compute capability %d.%d; tfg needs 7.0 or newer", dev->physical,
                      gi->name, gi->major, gi->minor);
    return NULL;
  }
  cuda_backend *cb = calloc(1, sizeof *cb);
  TFG_ASSERT(cb != NULL);
  cb->base.i = cuda_i;
  cb->base.device = dev;
  cb->base.ctx = cb;
  cb->gpu = dev->physical;
  cb->o = *o;
  cb->dev_node_id = -1;
  pthread_mutex_init(&cb->aux_mu, NULL);
  tfg_cuda_ctx *cx = &cb->cx;
  cx->device = cb->gpu;
  cx->tf32 = o->tf32;
  cx->sms = gi->sms;
  bool ok = CUDA_OK(cudaSetDevice(cb->gpu), why) && (cb->pe = pool_acquire(dev, o->preallocate, why)) != NULL &&
            CUDA_OK(cudaStreamCreateWithFlags(&cb->aux, cudaStreamNonBlocking), why) &&
            CUDA_OK(cudaMalloc((void **)&cb->flags, FLAGS_BYTES), why) &&
            CUDA_OK(cudaMemsetAsync(cb->flags, 0, FLAGS_BYTES, cb->aux), why) &&
            CUDA_OK(cudaMalloc((void **)&cb->step_dev, sizeof *cb->step_dev), why) &&
            CUDA_OK(cudaMemsetAsync(cb->step_dev, 0, sizeof *cb->step_dev, cb->aux), why) &&
            CUDA_OK(cudaMallocHost((void **)&cb->step_host, sizeof *cb->step_host), why) &&
            CUDA_OK(cudaStreamSynchronize(cb->aux), why) && CUBLAS_OK(cublasCreate(&cx->cublas), why) &&
            CUBLAS_OK(cublasSetMathMode(cx->cublas, o->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), why) &&
            CUBLAS_OK(cublasLtCreate(&cx->cublaslt), why) && CUDNN_OK(cudnnCreate(&cx->cudnn), why);
  if (!ok) {
    (void)cudaGetLastError();
    cuda_destroy(&cb->base);
    return NULL;
  }
  cx->error = (tfg_cuda_error *)cb->flags;
  cx->step = cb->step_dev;
  cb->fault_after = tfg_backend_fault_after(dev, cb->fault_msg, sizeof cb->fault_msg);
  return &cb->base;
}

/* ---- NCCL ----------------------------------------------------------------------- */

#if TFG_BUILD_NCCL

/* Appends "CALL failed: ERROR (FILE:LINE)" and NCCL's own detail to *why
 * when e is an error. */
static bool nccl_ok(ncclResult_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == ncclSuccess) return true;
  if (why) {
    tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, ncclGetErrorString(e), file, line);
    const char *last = ncclGetLastError(NULL);
    if (last && *last) tfg_strbuf_printf(why, ": %s", last);
  }
  (void)cudaGetLastError(); /* a CUDA error NCCL met must not surface at the next kernel launch */
  return false;
}
#define NCCL_OK(call, why) nccl_ok((call), #call, __FILE__, __LINE__, (why))

typedef struct nccl_coll {
  int nranks;
  tfg_backend **b;
  tfg_stream **s;
  ncclComm_t *comms; /* [nranks]: rank r's, on b[r]'s GPU */
} nccl_coll;

static const char *nccl_name(tfg_coll *c) {
  (void)c;
  return "nccl";
}

/* Queues the group on every rank (see the top); false with *m when an
 * NCCL or CUDA call failed. */
static bool nccl_queue(nccl_coll *g, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt, double scale,
                       tfg_strbuf *m) {
  int R = g->nranks;
  bool f64 = dt == TFG_DTYPE_F64;
  ncclDataType_t type = f64 ? ncclFloat64 : ncclFloat32;
  /* MEAN is NCCL's own; any other scale follows the sum. */
  bool avg = scale != 1.0 && scale == 1.0 / R, post = scale != 1.0 && !avg;
  ncclRedOp_t op = avg ? ncclAvg : ncclSum;
  cudaEvent_t *t0 = calloc((size_t)R, sizeof *t0);
  TFG_ASSERT(t0 != NULL);
  for (int r = 0; r < R; r++) t0[r] = trace_begin(cuda_of(g->b[r]), g->s[r]);
  bool ok = NCCL_OK(ncclGroupStart(), m);
  if (ok) {
    for (int r = 0; r < R && ok; r++)
      for (int k = 0; k < nseg && ok; k++)
        if (counts[k]) {
          void *p = bufs[(size_t)r * (size_t)nseg + (size_t)k];
          ok = NCCL_OK(ncclAllReduce(p, p, counts[k], type, op, g->comms[r], g->s[r]->s), m);
        }
    /* Always closed: a failed call inside the group makes ncclGroupEnd
     * fail too, and launch nothing. */
    ok &= NCCL_OK(ncclGroupEnd(), ok ? m : NULL);
  }
  for (int r = 0; r < R && ok && post; r++) {
    cuda_backend *cb = cuda_of(g->b[r]);
    ok = CUDA_OK(cudaSetDevice(cb->gpu), m);
    for (int k = 0; k < nseg && ok; k++)
      ok = CUDA_OK(tfg_cuda_scale(bufs[(size_t)r * (size_t)nseg + (size_t)k], counts[k], f64, scale, g->s[r]->s), m);
  }
  for (int r = 0; r < R; r++) {
    if (ok)
      trace_end(cuda_of(g->b[r]), g->s[r], t0[r], "allreduce", "collective");
    else
      timing_event_put(cuda_of(g->b[r]), t0[r]);
  }
  free(t0);
  return ok;
}

static void nccl_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                  double scale) {
  nccl_coll *g = c->ctx;
  TFG_ASSERT(nseg >= 0 && (nseg == 0 || (bufs && counts)));
  size_t n = 0;
  for (int k = 0; k < nseg; k++) n += counts[k];
  if (n == 0) return;
  tfg_status st = TFG_OK;
  int began = -1; /* the rank whose stream failed first, else every rank's is where it began */
  tfg_strbuf m = {0};
  for (int r = 0; r < g->nranks && st == TFG_OK; r++)
    if (g->s[r]->status != TFG_OK) {
      st = g->s[r]->status;
      began = r;
      tfg_strbuf_puts(&m, g->s[r]->err.data ? g->s[r]->err.data : tfg_status_str(st));
    }
  if (st == TFG_OK && dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64) {
    st = TFG_ERR_DEVICE;
    tfg_strbuf_printf(&m, "nccl all-reduce: cannot reduce %s elements (tfg's all-reduce takes f32 and f64)",
                      tfg_dtype_name(dt));
  }
  if (st == TFG_OK && !nccl_queue(g, bufs, counts, nseg, dt, scale, &m)) st = TFG_ERR_DEVICE;
  if (st != TFG_OK)
    for (int r = 0; r < g->nranks; r++) stream_fail(g->s[r], st, began < 0, m.data);
  tfg_strbuf_free(&m);
}

static void nccl_allreduce(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                           tfg_coll_op op) {
  nccl_allreduce_scaled(c, bufs, counts, nseg, dt, op == TFG_COLL_MEAN ? 1.0 / c->nranks : 1.0);
}

/* Finalizes the communicators in one group (finalizing is collective: one
 * at a time would wait for the others), which flushes what they have
 * queued, then destroys them. Failures can only be ignored here. */
static void nccl_destroy(nccl_coll *g) {
  if (g->comms) {
    if (ncclGroupStart() == ncclSuccess) {
      for (int r = 0; r < g->nranks; r++)
        if (g->comms[r]) (void)ncclCommFinalize(g->comms[r]);
      (void)ncclGroupEnd();
    }
    for (int r = 0; r < g->nranks; r++)
      if (g->comms[r]) (void)ncclCommDestroy(g->comms[r]);
    (void)cudaGetLastError();
  }
  free(g->comms);
  free(g->b);
  free(g->s);
  free(g);
}

static void nccl_free(tfg_coll *c) {
  if (!c) return;
  nccl_destroy(c->ctx);
  free(c);
}

static const tfg_coll_i nccl_i = {
    .name = nccl_name,
    .allreduce = nccl_allreduce,
    .allreduce_scaled = nccl_allreduce_scaled,
    .free = nccl_free,
};

tfg_coll *tfg_backend_cuda_nccl_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  TFG_ASSERT(nranks >= 1 && b && s);
  nccl_coll *g = calloc(1, sizeof *g);
  TFG_ASSERT(g != NULL);
  g->nranks = nranks;
  g->b = malloc((size_t)nranks * sizeof *g->b);
  g->s = malloc((size_t)nranks * sizeof *g->s);
  int *devs = malloc((size_t)nranks * sizeof *devs);
  TFG_ASSERT(g->b && g->s && devs);
  bool ok = true;
  for (int r = 0; r < nranks && ok; r++) {
    g->b[r] = b[r];
    g->s[r] = s[r];
    if (!is_cuda(b[r])) {
      tfg_strbuf_printf(why, "NCCL runs on CUDA devices: %s is a %s device", b[r]->device->name, b[r]->i.name(b[r]));
      ok = false;
      break;
    }
    TFG_ASSERT(s[r]->cb == cuda_of(b[r]));
    devs[r] = cuda_of(b[r])->gpu;
    for (int q = 0; q < r && ok; q++)
      if (devs[q] == devs[r]) {
        tfg_strbuf_printf(why, "NCCL takes one rank per GPU: %s and %s are both on cuda:%d", b[q]->device->name,
                          b[r]->device->name, devs[r]);
        ok = false;
      }
  }
  if (ok) {
    g->comms = calloc((size_t)nranks, sizeof *g->comms);
    TFG_ASSERT(g->comms != NULL);
    ok = NCCL_OK(ncclCommInitAll(g->comms, nranks, devs), why);
    if (!ok) { /* nothing to finalize: NCCL released what it made */
      free(g->comms);
      g->comms = NULL;
    }
  }
  free(devs);
  if (!ok) {
    nccl_destroy(g);
    return NULL;
  }
  tfg_coll *c = calloc(1, sizeof *c);
  TFG_ASSERT(c != NULL);
  c->i = nccl_i;
  c->nranks = nranks;
  c->ctx = g;
  return c;
}

#endif /* TFG_BUILD_NCCL */

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
