/* runtime/backend.h: the backend interface the executor is written against
 * (modeled on ggml-backend.h: an opaque backend handle, functions that
 * call the backend's table of entries, and what each backend can do
 * declared as data; the table itself is runtime/backend_impl.h, which
 * only the backends include).
 *
 *   tfg_strbuf why = {0};
 *   tfg_backend *b = tfg_backend_new(device, &opts, &why);   // one per logical device; NULL: why says
 *                                                            // (or tfg_backend_host_new(device))
 *   tfg_stream *s = tfg_backend_stream_create(b);            // an ordered queue
 *   void *buf = tfg_backend_alloc(b, bytes);                 // from the device's pool
 *   tfg_backend_copy_from_host(b, s, buf, host_ptr, bytes);
 *   tfg_backend_launch(b, s, kernel_fn, &kctx, node, in, &out);  // queued, runs in order
 *   tfg_event *e = tfg_backend_event_create(b);
 *   tfg_backend_event_record(b, s, e);                       // after what s has queued
 *   tfg_backend_event_wait(other, other_stream, e);          // other stream waits for it
 *   tfg_backend_synchronize(b, s, NULL);                     // wait for s to drain
 *   if (tfg_backend_is_host(b)) ...                          // read buf directly; else tfg_backend_read_now
 *   tfg_backend_free(b, buf); tfg_backend_event_free(b, e); tfg_backend_stream_free(b, s);
 *   tfg_backend_destroy(b);
 *
 * Backends: `host` (a GPU-like device emulated on the CPU: one worker
 * thread per device; a stream is an ordered queue that worker drains; events
 * are a flag under a mutex with a condition variable; runtime/backend_host.c)
 * and `cuda` (real streams and events on a GPU; runtime/backend_cuda.c,
 * in builds with CUDA). tfg_backend_new (runtime/registry.h) picks the one
 * for a device. Events are one object type for every backend
 * (runtime/event.h), so a stream of one kind may wait for a record
 * on the other. Every call returns at once except alloc, free,
 * synchronize, stream_free and destroy (the last three wait for the
 * queues to drain), read_now, and on `cuda`: a wait for a record that a
 * host stream issued (it waits until that record has run), and a copy
 * to pageable host memory (CUDA may return only once it is done). A
 * `cuda` backend takes its calls from one thread at a time (its
 * executor's), read_now excepted; `host` takes them from any thread.
 * alloc and free are not ordered with the
 * streams: free only memory no queued operation still uses. Host buffers
 * given to a copy, like a launch's tensors and node, must stay valid
 * until the stream has run it (on `cuda`: until the next synchronize of
 * it); copy_peer is ordered on b's stream only (order the source side
 * with an event).
 *
 * Capabilities. What a backend can do is data it declares
 * (tfg_backend_caps, as ggml's ggml_backend_dev_caps), never guessed
 * from which entries its table has: callers ask tfg_backend_get_caps (or
 * tfg_backend_is_host) before they call an optional function, and an
 * optional function called on a backend without its capability fails an
 * assertion. docs/runtime.md has the table of each backend's answers;
 * tests/layers.py refuses a caller that reads the table of entries.
 *
 * Failures: a queued operation that fails marks its stream failed; later
 * launches and copies on that stream are skipped, and every synchronize of
 * it returns the failure (status, and the message appended to *err). A
 * failed stream's records still complete their events, carrying the
 * failure to the streams that wait on them, so an error on any device stops
 * the run promptly and never leaves another device waiting. */
#ifndef TFG_BACKEND_H
#define TFG_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/strbuf.h"
#include "base/switches.h"
#include "ir/device.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "kernels/kernel.h"
#include "runtime/event.h"
#include "runtime/mem.h"

typedef struct tfg_backend tfg_backend;

/* The most buffers one reduce_all adds (a node's GPUs; the shared
 * all-reduce is chosen up to this many ranks). */
enum { TFG_REDUCE_ALL_MAX = 8 };
struct tfg_trace;
typedef struct tfg_stream tfg_stream;
typedef struct tfg_replay tfg_replay; /* captured work (tfg_backend_capture_end) */

/* What a backend can do: each backend declares its answers as data when
 * it is made (all false is the safe answer: memory the host cannot read,
 * no optional functions). */
typedef struct tfg_backend_caps {
  /* Its memory is host memory: others read and write it directly (the
   * executor's --check-numerics and feeders, a host device's copy from
   * it, MPI's buffers). Without it, the host reads the memory with
   * tfg_backend_read_now. */
  bool is_host;
  /* Its kernels run on CPU threads whose count tfg_backend_set_threads
   * sets (without it: the device computes on itself, a GPU). */
  bool sets_threads;
  /* tfg_backend_reduce_all: one pass over buffers it addresses directly
   * (what the shared all-reduce needs). */
  bool reduce_all;
  /* Captured runs (CUDA Graphs, or the host backend's emulation of them):
   * tfg_backend_host_alloc, _host_free, _capture_begin, _capture_end,
   * _replay, _replay_free. */
  bool can_capture;
  /* Its kernels read the training step and seed from the device
   * (tfg_backend_set_step), so a replayed kernel sees the step of the
   * run; without it kernels read ctx->step. */
  bool device_step;
} tfg_backend_caps;

/* ---- what a backend is ----------------------------------------------------------- */

/* b's capabilities (valid while b lives). */
const tfg_backend_caps *tfg_backend_get_caps(const tfg_backend *b);
/* tfg_backend_get_caps(b)->is_host: b's memory is host memory. */
bool tfg_backend_is_host(const tfg_backend *b);
/* The device b runs. */
const tfg_device *tfg_backend_device(const tfg_backend *b);
/* The backend's kind: "host", "cuda". */
const char *tfg_backend_name(tfg_backend *b);
/* Whether an op can run here (the placer validates pins with it). */
bool tfg_backend_supports_op(tfg_backend *b, const tfg_node *node);
/* The kernel that runs node's op here (host: the op registry's CPU
 * kernel), or NULL when this backend has none. */
tfg_kernel_fn tfg_backend_kernel(tfg_backend *b, const tfg_node *node);

/* ---- memory ------------------------------------------------------------------------ */

/* Memory from the device's pool: NULL when the pool (capacity, see
 * runtime/mem.h) cannot give bytes; the caller reports the OOM. */
void *tfg_backend_alloc(tfg_backend *b, size_t bytes);
void tfg_backend_free(tfg_backend *b, void *ptr);
/* The pool's numbers (runtime/mem.h), and in *free_bytes what an
 * allocation could still get: the pool's free memory plus what it may
 * still grow by, bounded by what the hardware has left (cudaMemGetInfo
 * on a GPU). For the executor's out-of-memory report. */
void tfg_backend_mem_stats(tfg_backend *b, tfg_mem_stats *st, int64_t *free_bytes);
/* Copies bytes of b's memory at src to host memory at dst now, on the
 * calling thread (any thread, a host backend's worker included) and
 * outside every stream: the caller has ordered it (an event it waited
 * for). Returns TFG_OK, or TFG_ERR_DEVICE with the reason appended to
 * *err. Only for a backend whose memory is not host memory (!is_host:
 * host memory is read directly; a host backend's copy_peer from a GPU
 * calls it). */
tfg_status tfg_backend_read_now(tfg_backend *b, void *dst, const void *src, size_t bytes, tfg_strbuf *err);

/* ---- streams and events ------------------------------------------------------------ */

tfg_stream *tfg_backend_stream_create(tfg_backend *b);
void tfg_backend_stream_free(tfg_backend *b, tfg_stream *s);
tfg_event *tfg_backend_event_create(tfg_backend *b);
void tfg_backend_event_free(tfg_backend *b, tfg_event *e);
/* Marks e done once everything queued on s before this call has run. */
void tfg_backend_event_record(tfg_backend *b, tfg_stream *s, tfg_event *e);
/* Nothing queued on s after this call runs before e is done (e may be
 * recorded on another backend's stream: events are shared across
 * devices). */
void tfg_backend_event_wait(tfg_backend *b, tfg_stream *s, tfg_event *e);
/* Waits until everything queued on s has run; returns the first failure
 * of the stream (with its message in *err when err is not NULL). */
tfg_status tfg_backend_synchronize(tfg_backend *b, tfg_stream *s, tfg_strbuf *err);
/* After synchronize returned a failure: whether it began on s (one of
 * its own operations failed) rather than arriving through an event, so
 * the executor can report where a failure started. */
bool tfg_backend_failed_here(tfg_backend *b, tfg_stream *s);
/* After synchronize returned a failure that the device found after
 * the launch had returned (a data error a CUDA kernel flagged, a NaN
 * that --check-numerics found on a GPU): the id of the node whose
 * kernel it was (the ctx->node the launch's kernel function left, which
 * the executor sets), or -1 when none is known (a host backend's
 * failures are known at the launch: the executor notes those itself). */
tfg_node_id tfg_backend_failed_node(tfg_backend *b, tfg_stream *s);

/* ---- queued work ------------------------------------------------------------------- */

/* Queued copies between host memory and device memory, and between two
 * devices (dst on b, src on src_b). */
void tfg_backend_copy_from_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes);
void tfg_backend_copy_to_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes);
void tfg_backend_copy_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src, size_t bytes);
/* Queued: dst[i] = (dst[i] + src[i]) * scale for i < count, dst on b,
 * src on src_b, dt f32 or f64 (the sum in dt; scale 1 is exact). The
 * ring all-reduce (runtime/collective.h) is built from it and copy_peer. */
void tfg_backend_reduce_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src,
                             size_t count, tfg_dtype dt, double scale);
/* Queued, with caps.reduce_all: for i < count, every bufs[r][i] (r < n,
 * 2 <= n <= TFG_REDUCE_ALL_MAX) becomes (bufs[0][i] + bufs[1][i] + ... +
 * bufs[n-1][i]) * scale, summed in that order in dt (f16/bf16 in f32,
 * rounded once), scale 1 not multiplied: one pass over buffers that b
 * addresses directly (the memory of one GPU, or of host devices), what
 * the shared-memory all-reduce (runtime/collective.h) is built from.
 * The pointers are copied. A failure as reduce_peer's. */
void tfg_backend_reduce_all(tfg_backend *b, tfg_stream *s, void *const *bufs, int n, size_t count, tfg_dtype dt,
                            double scale);
/* Queues a kernel: runs fn(ctx, node, in, out) in stream order. in and
 * out (and ctx) must stay valid until the stream has run it. */
void tfg_backend_launch(tfg_backend *b, tfg_stream *s, tfg_kernel_fn fn, tfg_kernel_ctx *ctx, const tfg_node *node,
                        const tfg_tensor *in, tfg_tensor *out);

/* ---- settings ---------------------------------------------------------------------- */

/* With caps.sets_threads: the CPU threads b's kernels get (n <= 0: the
 * default, the count OpenBLAS started with: OPENBLAS_NUM_THREADS, else
 * the cores); returns the count in effect, which the executor sizes the
 * kernel pool by. Matrix products run on that pool too
 * (kernels/cpu/blas.h). The executor gives every host device it runs the
 * same share of the cores, split between those that compute at once. */
int tfg_backend_set_threads(tfg_backend *b, int n);
/* Records every operation that runs from now on as a slice of t (NULL:
 * stop): process = the device's index, thread = the stream's creation
 * order on this backend (0, 1, 2...). Returns once no operation still
 * records into the previous trace, which may then be freed; not to be
 * called from a kernel running on b. Names no tracks (tfg_trace_name). */
void tfg_backend_set_trace(tfg_backend *b, struct tfg_trace *t);
/* With caps.device_step: sets the training step and seed that b's
 * kernels read on the device (kernels/cuda/cuda.h's tfg_cuda_step: a
 * replayed kernel keeps its arguments, so ctx->step cannot reach it):
 * queued on s; during a capture as a copy from b's own host buffer,
 * which a later call with s NULL rewrites before each replay. */
void tfg_backend_set_step(tfg_backend *b, tfg_stream *s, int64_t step, uint64_t seed);

/* ---- captured runs (caps.can_capture: CUDA Graphs; the executor,
 * runtime/exec.h, uses them for runs it has seen before) -------------------------- */

/* Host memory copies to and from b run fastest from (pinned on a GPU),
 * and the only host memory a captured copy may use; NULL on failure. */
void *tfg_backend_host_alloc(tfg_backend *b, size_t bytes);
void tfg_backend_host_free(tfg_backend *b, void *ptr);
/* Starts capturing what the calling thread queues on s, and on every
 * stream of any capturing backend that waits for an event recorded on
 * a captured stream: nothing captured runs. capture_end (on the same
 * s, each joined stream having been joined back to s by an event) ends
 * it and returns the work ready to replay, or NULL with the reason
 * appended to *why: the capture failed, or an operation queued during
 * it failed. Either way the streams' failures from the capture are
 * forgotten (nothing ran), so the caller can queue that work again
 * without capturing. */
bool tfg_backend_capture_begin(tfg_backend *b, tfg_stream *s, tfg_strbuf *why);
tfg_replay *tfg_backend_capture_end(tfg_backend *b, tfg_stream *s, tfg_strbuf *why);
/* Queues the captured work once more, after what s has queued before
 * (the host backend's emulation: on the streams it was captured from,
 * in the order it was queued); replay_free frees it (nothing queued
 * may still use it). */
void tfg_backend_replay(tfg_backend *b, tfg_stream *s, tfg_replay *r);
void tfg_backend_replay_free(tfg_backend *b, tfg_replay *r);

/* Drains b's streams and frees it (b NULL: nothing). */
void tfg_backend_destroy(tfg_backend *b);

/* How a run uses its backends (tfg_exec_opts passes them on). */
typedef struct tfg_backend_opts {
  bool preallocate;    /* --memory preallocate: the pool takes its whole capacity now (else grows);
                        * not cpu:0's, whose capacity is the machine's memory */
  bool tf32;           /* --tf32: f32 matrix products on a GPU may use TF32 tensor cores */
  bool check_numerics; /* a GPU checks every f32/f64 result for NaN and Inf (host devices:
                        * the executor checks, reading host memory) */
  tfg_switches sw;     /* the A/B switches a backend reads when it is created (base/switches.h):
                        * the fault hook (runtime/backend_fault.h), host_graphs (below); on CUDA
                        * no_attention_tiled, nvrtc and its cache, nccl_timeout_s */
} tfg_backend_opts;

/* A host backend for device dev (a TFG_DEVICE_HOST or TFG_DEVICE_CPU
 * entry): its worker thread starts now; its pool has dev->memory bytes,
 * grown on demand; every switch at its default. */
tfg_backend *tfg_backend_host_new(const tfg_device *dev);
/* The same with o's choices (NULL: the defaults): its pool preallocated
 * when o->preallocate is set (NULL when the host cannot give dev->memory
 * bytes at once), the switches of o->sw (tf32 and check_numerics do not
 * concern a host backend). */
tfg_backend *tfg_backend_host_new_with(const tfg_device *dev, const tfg_backend_opts *o);

/* Test hook: with sw.host_graphs (TFG_HOST_GRAPHS=1) when a host
 * backend is created, it can capture (caps.can_capture) and emulates
 * CUDA Graphs (runtime/backend_host.c): a capture records what the
 * thread queues, a replay queues it again. The executor then runs host
 * devices (not cpu:0) as it runs GPUs with CUDA Graphs, which is how that
 * path is tested on machines without a GPU. */

#endif
