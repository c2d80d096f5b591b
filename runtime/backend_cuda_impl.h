/* runtime/backend_cuda_impl.h: what the CUDA backend's files share, for
 * them alone: the checked-call helpers, the backend's and a stream's
 * state, and the functions one file gives the others. Compiled only in
 * builds with CUDA, like them:
 *   runtime/backend_cuda.c        the backend: streams, copies, launches,
 *                                 the device's flags, tracing, creation
 *   runtime/backend_cuda_gpu.c    the process: the probe, peer access,
 *                                 export streams, the pools, `tfg version`
 *   runtime/backend_cuda_event.c  events (their CUDA part)
 *   runtime/backend_cuda_graph.c  captured runs (CUDA Graphs)
 *   runtime/backend_cuda_nccl.c   the NCCL collective */
#ifndef TFG_BACKEND_CUDA_IMPL_H
#define TFG_BACKEND_CUDA_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/backend_kernels.h"
#include "kernels/cuda/cuda.h"
#include "runtime/backend_cuda.h"
#include "runtime/backend_impl.h"
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
static inline bool cuda_ok(cudaError_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == cudaSuccess) return true;
  if (why) tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, cudaGetErrorString(e), file, line);
  (void)cudaGetLastError();
  return false;
}
#define CUDA_OK(call, why) cuda_ok((call), #call, __FILE__, __LINE__, (why))

static inline bool cublas_ok(cublasStatus_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == CUBLAS_STATUS_SUCCESS) return true;
  if (why) tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, cublasGetStatusString(e), file, line);
  return false;
}
#define CUBLAS_OK(call, why) cublas_ok((call), #call, __FILE__, __LINE__, (why))

static inline bool cudnn_ok(cudnnStatus_t e, const char *call, const char *file, int line, tfg_strbuf *why) {
  if (e == CUDNN_STATUS_SUCCESS) return true;
  if (why) tfg_strbuf_printf(why, "%s failed: %s (%s:%d)", call, cudnnGetErrorString(e), file, line);
  return false;
}
#define CUDNN_OK(call, why) cudnn_ok((call), #call, __FILE__, __LINE__, (why))

/* A call whose failure can only be ignored (freeing, at teardown): it is
 * still made, its error cleared. */
static inline void cuda_quiet(cudaError_t e) {
  if (e != cudaSuccess) (void)cudaGetLastError();
}

/* ---- pools (runtime/backend_cuda_gpu.c) ------------------------------------------- */

typedef struct pool_entry {
  const tfg_device *dev; /* the logical device it serves */
  int gpu;
  tfg_mem_pool *pool;
  int refs;              /* backends using it; under pools_mu */
} pool_entry;

/* The pool of logical device dev, made (and preallocated when asked) by
 * the first backend on it; NULL with *why when the preallocation fails. */
pool_entry *tfg_backend_cuda_pool_acquire(const tfg_device *dev, bool preallocate, tfg_strbuf *why);
/* Drops a backend's share of the pool (the pool goes with its last one). */
void tfg_backend_cuda_pool_release(pool_entry *pe);
/* Whether GPU a can address GPU b's memory, enabling peer access the first
 * time the pair is asked (cudaDeviceEnablePeerAccess is per ordered pair
 * and process). Leaves the current device at a. */
bool tfg_backend_cuda_peer_access(int a, int b);
/* GPU k's export stream (made on first use), or NULL with *why. */
cudaStream_t tfg_backend_cuda_export_stream(int k, tfg_strbuf *why);

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
  const char *label;      /* a launch's label (tfg_trace_label_of, the caller's string), or NULL */
  tfg_stream *s;
} slice;

struct tfg_stream {
  cuda_backend *cb;
  int index;          /* creation order on cb: the trace's thread id */
  cudaStream_t s;     /* NULL when it could not be made (the stream is failed) */
  /* The first failure, sticky (see the top of runtime/backend_cuda.c). */
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

static inline cuda_backend *cuda_of(tfg_backend *b) { return b->ctx; }

/* ---- runtime/backend_cuda.c ------------------------------------------------------ */

/* The capture in progress on this thread (capture_begin to capture_end):
 * the streams that failed during it, whose failures capture_end forgets
 * (nothing captured ran). Per thread, as the capture mode is
 * (cudaStreamCaptureModeThreadLocal): executors on other threads (a
 * parameter server's workers) capture on their own. */
typedef struct cuda_capture {
  bool on;
  tfg_stream **failed;
  size_t n, cap;
} cuda_capture;
extern _Thread_local cuda_capture tfg_backend_cuda_capturing;

/* Fails s (the first failure sticks). here: it began on s. */
void tfg_backend_cuda_stream_fail(tfg_stream *s, tfg_status st, bool here, const char *msg);
/* Whether b is a CUDA backend, whose ctx cuda_of may cast: an identity
 * (its table is cuda_i), where callers outside ask capabilities. */
bool tfg_backend_cuda_is(const tfg_backend *b);
/* Before an operation on s: its start event, or NULL when not tracing
 * (or the event cannot be had: the slice is then dropped, the run goes on). */
cudaEvent_t tfg_backend_cuda_trace_begin(cuda_backend *cb, tfg_stream *s);
/* After it: the end event, and the slice to read later (label: a
 * launch's, tfg_trace_label_of; NULL for none). */
void tfg_backend_cuda_trace_end(cuda_backend *cb, tfg_stream *s, cudaEvent_t t0, const char *name, const char *cat,
                                const char *label);
/* Gives back a timing event (an operation that failed, or was not traced). */
void tfg_backend_cuda_timing_event_put(cuda_backend *cb, cudaEvent_t e);

/* ---- runtime/backend_cuda_event.c: the vtable's event entries --------------------- */

tfg_event *tfg_backend_cuda_event_create(tfg_backend *b);
void tfg_backend_cuda_event_free(tfg_backend *b, tfg_event *e);
void tfg_backend_cuda_event_record(tfg_backend *b, tfg_stream *s, tfg_event *e);
void tfg_backend_cuda_event_wait(tfg_backend *b, tfg_stream *s, tfg_event *e);
/* Destroys the CUDA parts of events whose last reference went in a host
 * callback (where no CUDA call may be made): from any call that may. */
void tfg_backend_cuda_graveyard_drain(void);

/* ---- runtime/backend_cuda_graph.c: the vtable's captured-run entries ----------- */

void *tfg_backend_cuda_host_alloc(tfg_backend *b, size_t bytes);
void tfg_backend_cuda_host_free(tfg_backend *b, void *ptr);
void tfg_backend_cuda_set_step(tfg_backend *b, tfg_stream *s, int64_t step, uint64_t seed);
bool tfg_backend_cuda_capture_begin(tfg_backend *b, tfg_stream *s, tfg_strbuf *why);
tfg_replay *tfg_backend_cuda_capture_end(tfg_backend *b, tfg_stream *s, tfg_strbuf *why);
void tfg_backend_cuda_replay(tfg_backend *b, tfg_stream *s, tfg_replay *r);
void tfg_backend_cuda_replay_free(tfg_backend *b, tfg_replay *r);

#endif
