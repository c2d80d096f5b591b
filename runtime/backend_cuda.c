/* runtime/backend_cuda.c: the `cuda` backend: a logical device on an
 * NVIDIA GPU behind the vtable of runtime/backend.h. Compiled only in
 * builds with CUDA (Makefile: CUDA_ON=1); the backend registration
 * (runtime/registry.c, runtime/discover.c) is its only caller. This file:
 * the backend itself (streams, copies, launches, the device's flags,
 * tracing, creation).
 *
 * Devices. One backend per logical device: cuda:K*N gives N backends on
 * GPU K, each with its own streams, cuBLAS/cuBLASLt/cuDNN handles, flags
 * and memory pool (the pool is shared by the backends that several
 * executors of one run open for the same logical device: a parameter
 * server's sessions: runtime/backend_cuda_gpu.c). Every entry point sets the current
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
 * Events are the shared objects of runtime/event.h, with a CUDA part
 * (one cudaEvent per GPU): runtime/backend_cuda_event.c.
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
 * Memory comes from the logical device's pool, and what the process
 * knows of its GPUs (the probe, peer access) is shared by its backends:
 * runtime/backend_cuda_gpu.c. Captured runs (CUDA Graphs):
 * runtime/backend_cuda_graph.c. NCCL: runtime/backend_cuda_nccl.c. What
 * these files share is in runtime/backend_cuda_impl.h.
 *
 * Every CUDA, cuBLAS, cuDNN and NCCL call is checked; a failure names the
 * call, the library's error text and file:line (NCCL's: its error string
 * and ncclGetLastError's detail). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/grow.h"
#include "runtime/backend_cuda_impl.h"
#include "runtime/backend_fault.h"
#include "runtime/event.h"

/* ---- failures ------------------------------------------------------------------ */

_Thread_local cuda_capture tfg_backend_cuda_capturing;

static const char *cuda_name(tfg_backend *b);

bool tfg_backend_cuda_is(const tfg_backend *b) { return b && b->i.name == cuda_name; }

void tfg_backend_cuda_stream_fail(tfg_stream *s, tfg_status st, bool here, const char *msg) {
  if (s->status != TFG_OK) return;
  cuda_capture *c = &tfg_backend_cuda_capturing;
  if (c->on) {
    TFG_GROW(c->failed, c->n, c->cap, 8);
    c->failed[c->n++] = s;
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

void tfg_backend_cuda_timing_event_put(cuda_backend *cb, cudaEvent_t e) {
  if (!e) return;
  TFG_GROW(cb->spare, cb->nspare, cb->spare_cap, 16);
  cb->spare[cb->nspare++] = e;
}

cudaEvent_t tfg_backend_cuda_trace_begin(cuda_backend *cb, tfg_stream *s) {
  if (!cb->trace || !s->s) return NULL;
  cudaEvent_t e = timing_event(cb);
  if (e && cudaEventRecord(e, s->s) != cudaSuccess) {
    (void)cudaGetLastError();
    tfg_backend_cuda_timing_event_put(cb, e);
    return NULL;
  }
  return e;
}

void tfg_backend_cuda_trace_end(cuda_backend *cb, tfg_stream *s, cudaEvent_t t0, const char *name, const char *cat,
                                const char *label) {
  if (!t0) return;
  cudaEvent_t t1 = timing_event(cb);
  if (!t1 || cudaEventRecord(t1, s->s) != cudaSuccess) {
    (void)cudaGetLastError();
    tfg_backend_cuda_timing_event_put(cb, t0);
    tfg_backend_cuda_timing_event_put(cb, t1);
    return;
  }
  TFG_GROW(cb->slices, cb->nslices, cb->slices_cap, 64);
  cb->slices[cb->nslices++] = (slice){t0, t1, name, cat, label, s};
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
      tfg_trace_add_labeled(cb->trace, cb->base.device->index, sl->s->index, sl->name, sl->label, sl->cat,
                            cb->trace_base_host + ms0 / 1e3, cb->trace_base_host + ms1 / 1e3);
    (void)cudaGetLastError(); /* NotReady, or a failed stream's events: the slice is dropped */
    tfg_backend_cuda_timing_event_put(cb, sl->t0);
    tfg_backend_cuda_timing_event_put(cb, sl->t1);
  }
  cb->nslices = keep;
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
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data); /* every later call reports it */
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
  cudaEvent_t t0 = tfg_backend_cuda_trace_begin(cb, s);
  if (CUDA_OK(cudaSetDevice(cb->gpu), &why) && CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, s->s), &why))
    tfg_backend_cuda_trace_end(cb, s, t0, name, "copy", NULL);
  else {
    tfg_backend_cuda_timing_event_put(cb, t0);
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
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
  if (!tfg_backend_cuda_is(src_b)) {
    if (src_b && !tfg_backend_is_host(src_b)) {
      tfg_strbuf m = {0};
      tfg_strbuf_printf(&m, "copy_peer: cannot copy from %s's memory (a %s device) to a GPU", src_b->device->name,
                        tfg_backend_name(src_b));
      tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, m.data);
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
  (void)tfg_backend_cuda_peer_access(cb->gpu, sg); /* direct when it can be; CUDA stages it otherwise */
  tfg_strbuf why = {0};
  cudaEvent_t t0 = tfg_backend_cuda_trace_begin(cb, s);
  if (CUDA_OK(cudaSetDevice(cb->gpu), &why) && CUDA_OK(cudaMemcpyPeerAsync(dst, cb->gpu, src, sg, bytes, s->s), &why))
    tfg_backend_cuda_trace_end(cb, s, t0, "copy", "copy", NULL);
  else {
    tfg_backend_cuda_timing_event_put(cb, t0);
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  }
  tfg_strbuf_free(&why);
}

/* One kernel over every buffer (kernels/cuda/collective.cu): the
 * buffers are the memory of this GPU (the shared all-reduce is chosen
 * for logical devices of one GPU only, runtime/collective.c). */
static void cuda_reduce_all(tfg_backend *b, tfg_stream *s, void *const *bufs, int n, size_t count, tfg_dtype dt,
                            double scale) {
  cuda_backend *cb = cuda_of(b);
  if (s->status != TFG_OK) return;
  tfg_strbuf m = {0};
  if (dt != TFG_DTYPE_F32 && dt != TFG_DTYPE_F64 && dt != TFG_DTYPE_F16 && dt != TFG_DTYPE_BF16) {
    tfg_strbuf_printf(&m, "reduce_all: cannot reduce %s elements (the cuda backend reduces float dtypes)",
                      tfg_dtype_name(dt));
  } else if (count > 0) {
    cudaEvent_t t0 = tfg_backend_cuda_trace_begin(cb, s);
    if (CUDA_OK(cudaSetDevice(cb->gpu), &m) && CUDA_OK(tfg_cuda_reduce_all(bufs, n, count, (int)dt, scale, s->s), &m))
      tfg_backend_cuda_trace_end(cb, s, t0, "reduce", "collective", NULL);
    else
      tfg_backend_cuda_timing_event_put(cb, t0);
  }
  if (m.len) tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, m.data);
  tfg_strbuf_free(&m);
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
  } else if (!tfg_backend_cuda_is(src_b)) {
    tfg_strbuf_printf(&m, "reduce_peer: %s (cuda:%d) cannot add from %s's memory: it is not GPU memory",
                      b->device->name, cb->gpu, src_b ? src_b->device->name : "the host");
  } else if (!tfg_backend_cuda_peer_access(cb->gpu, cuda_of(src_b)->gpu)) {
    tfg_strbuf_printf(&m,
                      "reduce_peer: %s (cuda:%d) cannot address the memory of %s (cuda:%d): the two GPUs have no "
                      "peer access",
                      b->device->name, cb->gpu, src_b->device->name, cuda_of(src_b)->gpu);
  } else if (count > 0) {
    cudaEvent_t t0 = tfg_backend_cuda_trace_begin(cb, s);
    if (CUDA_OK(cudaSetDevice(cb->gpu), &m) &&
        CUDA_OK(half ? tfg_cuda_reduce_peer_half(dst, src, count, dt == TFG_DTYPE_BF16, scale, s->s)
                     : tfg_cuda_reduce_peer(dst, src, count, dt == TFG_DTYPE_F64, scale, s->s),
                &m))
      tfg_backend_cuda_trace_end(cb, s, t0, "reduce", "collective", NULL);
    else
      tfg_backend_cuda_timing_event_put(cb, t0);
  }
  if (m.len) tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, m.data);
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
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, cb->fault_msg);
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
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
    tfg_strbuf_free(&why);
    return;
  }
  cb->cx.stream = s->s;
  cb->cx.workspace = s->workspace;
  cb->cx.workspace_bytes = WORKSPACE_BYTES;
  ctx->backend = &cb->cx;
  cudaEvent_t t0 = tfg_backend_cuda_trace_begin(cb, s);
  tfg_strbuf_clear(&ctx->err);
  tfg_status st = fn(ctx, node, in, out);
  if (st != TFG_OK) {
    tfg_backend_cuda_timing_event_put(cb, t0);
    if (ctx->err.len)
      tfg_backend_cuda_stream_fail(s, st, true, ctx->err.data);
    else {
      tfg_strbuf_printf(&why, "kernel failed: %s", tfg_status_str(st));
      tfg_backend_cuda_stream_fail(s, st, true, why.data);
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
      tfg_backend_cuda_timing_event_put(cb, t0);
      tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
      tfg_strbuf_free(&why);
      return;
    }
  }
  tfg_backend_cuda_trace_end(cb, s, t0, node ? tfg_op_get(node->op)->name : "kernel", "op",
                             tfg_trace_label_of(cb->trace, node));
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
  tfg_backend_cuda_graveyard_drain();
  if (s->s && s->pinned) {
    tfg_strbuf why = {0};
    bool ok = CUDA_OK(cudaSetDevice(cb->gpu), &why) &&
              CUDA_OK(cudaMemcpyAsync(s->pinned, cb->flags, FLAGS_BYTES, cudaMemcpyDeviceToHost, s->s), &why) &&
              CUDA_OK(cudaStreamSynchronize(s->s), &why);
    if (ok)
      read_flags(cb, s->pinned);
    else
      tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
    tfg_strbuf_free(&why);
  }
  if (cb->dev_status != TFG_OK && s->status == TFG_OK) {
    tfg_backend_cuda_stream_fail(s, cb->dev_status, launched_on(cb, s), cb->dev_err.data);
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
  tfg_backend_cuda_pool_release(cb->pe);
  tfg_backend_cuda_graveyard_drain();
  pthread_mutex_destroy(&cb->aux_mu);
  tfg_strbuf_free(&cb->dev_err);
  free(cb);
}

/* What a CUDA backend can do (runtime/backend.h): its memory is the
 * GPU's (the host reads it with read_now), the GPU computes on itself
 * (no CPU threads to set), one kernel adds the buffers of its GPU, and
 * it captures runs as CUDA Graphs, whose replayed kernels read the step
 * from the device. */
static const tfg_backend_caps cuda_caps = {
    .is_host = false, .sets_threads = false, .reduce_all = true, .can_capture = true, .device_step = true};

static const tfg_backend_i cuda_i = {
    .name = cuda_name, .alloc = cuda_alloc, .free = cuda_free, .stream_create = cuda_stream_create,
    .stream_free = cuda_stream_free, .event_create = tfg_backend_cuda_event_create,
    .event_free = tfg_backend_cuda_event_free, .event_record = tfg_backend_cuda_event_record,
    .event_wait = tfg_backend_cuda_event_wait, .copy_from_host = cuda_copy_from_host,
    .copy_to_host = cuda_copy_to_host, .copy_peer = cuda_copy_peer, .reduce_peer = cuda_reduce_peer,
    .reduce_all = cuda_reduce_all, .kernel = cuda_kernel, .set_trace = cuda_set_trace, .launch = cuda_launch,
    .read_now = cuda_read_now, .mem_stats = cuda_mem_stats, .synchronize = cuda_synchronize,
    .failed_here = cuda_failed_here, .failed_node = cuda_failed_node, .host_alloc = tfg_backend_cuda_host_alloc,
    .host_free = tfg_backend_cuda_host_free, .set_step = tfg_backend_cuda_set_step,
    .capture_begin = tfg_backend_cuda_capture_begin, .capture_end = tfg_backend_cuda_capture_end,
    .replay = tfg_backend_cuda_replay, .replay_free = tfg_backend_cuda_replay_free, .destroy = cuda_destroy};

/* ---- creation ------------------------------------------------------------------- */

tfg_backend *tfg_backend_cuda_new(const tfg_device *dev, const tfg_backend_opts *o, tfg_strbuf *why) {
  static const tfg_backend_opts defaults = {0};
  if (!o) o = &defaults;
  TFG_ASSERT(dev->kind == TFG_DEVICE_CUDA);
  const tfg_gpu_info *info;
  int n = tfg_backend_cuda_probe(&info, NULL, NULL);
  TFG_ASSERT(dev->physical >= 0 && dev->physical < n); /* runtime/registry.c checked */
  const tfg_gpu_info *gi = &info[dev->physical];
  if (gi->major < 7) {
    tfg_strbuf_printf(why, "cuda:%d (%s) has compute capability %d.%d; tfg needs 7.0 or newer", dev->physical,
                      gi->name, gi->major, gi->minor);
    return NULL;
  }
  cuda_backend *cb = calloc(1, sizeof *cb);
  TFG_ASSERT(cb != NULL);
  tfg_backend_init(&cb->base, &cuda_i, &cuda_caps, dev, cb);
  cb->gpu = dev->physical;
  cb->o = *o;
  cb->dev_node_id = -1;
  pthread_mutex_init(&cb->aux_mu, NULL);
  tfg_cuda_ctx *cx = &cb->cx;
  cx->device = cb->gpu;
  cx->tf32 = o->tf32;
  cx->attention_reference = o->sw.no_attention_tiled;
  cx->nvrtc = o->sw.nvrtc;
  cx->nvrtc_cache = o->sw.nvrtc_cache;
  cx->sms = gi->sms;
  bool ok = CUDA_OK(cudaSetDevice(cb->gpu), why) && (cb->pe = tfg_backend_cuda_pool_acquire(dev, o->preallocate, why)) != NULL &&
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
  cb->fault_after = tfg_backend_fault_after(&o->sw, dev, cb->fault_msg, sizeof cb->fault_msg);
  return &cb->base;
}
