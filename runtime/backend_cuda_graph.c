/* runtime/backend_cuda_graph.c: the CUDA backend's captured runs (the
 * vtable's host_alloc to replay_free).
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
 * only host memory a captured copy may touch. */
#include <stdlib.h>

#include "base/assert.h"
#include "runtime/backend_cuda_impl.h"

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
void *tfg_backend_cuda_host_alloc(tfg_backend *b, size_t bytes) {
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

void tfg_backend_cuda_host_free(tfg_backend *b, void *ptr) {
  (void)b;
  if (ptr) cuda_quiet(cudaFreeHost(ptr));
}

/* Outside a capture the values travel as a kernel's arguments (calls may
 * follow each other unsynchronized, as the conformance suite's launches
 * do); inside one, as a copy from step_host, which a replay's caller
 * rewrites first (s NULL). */
void tfg_backend_cuda_set_step(tfg_backend *b, tfg_stream *s, int64_t step, uint64_t seed) {
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
  if (!ok) tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  tfg_strbuf_free(&why);
}

/* Thread-local mode: a call that could break the capture (cudaMalloc,
 * a synchronous copy) made on this thread fails it, which capture_end
 * reports; other threads are not affected. */
bool tfg_backend_cuda_capture_begin(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  cuda_backend *cb = cuda_of(b);
  TFG_ASSERT(!tfg_backend_cuda_capturing.on);
  if (s->status != TFG_OK) {
    tfg_strbuf_printf(why, "the stream has failed: %s", s->err.data ? s->err.data : "");
    return false;
  }
  if (!CUDA_OK(cudaSetDevice(cb->gpu), why) ||
      !CUDA_OK(cudaStreamBeginCapture(s->s, cudaStreamCaptureModeThreadLocal), why))
    return false;
  tfg_backend_cuda_capturing.on = true;
  tfg_backend_cuda_capturing.n = 0;
  return true;
}

tfg_replay *tfg_backend_cuda_capture_end(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  cuda_backend *cb = cuda_of(b);
  TFG_ASSERT(tfg_backend_cuda_capturing.on);
  tfg_backend_cuda_capturing.on = false;
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaSetDevice(cb->gpu);
  if (e == cudaSuccess) e = cudaStreamEndCapture(s->s, &graph);
  bool ok = cuda_ok(e, "cudaStreamEndCapture", __FILE__, __LINE__, why);
  if (tfg_backend_cuda_capturing.n > 0) { /* the first failure says why; all are forgotten */
    if (ok) tfg_strbuf_printf(why, "%s", tfg_backend_cuda_capturing.failed[0]->err.data ? tfg_backend_cuda_capturing.failed[0]->err.data : "a failure");
    ok = false;
    for (size_t i = 0; i < tfg_backend_cuda_capturing.n; i++) {
      tfg_stream *f = tfg_backend_cuda_capturing.failed[i];
      f->status = TFG_OK;
      f->here = false;
      f->fail_id = -1;
      tfg_strbuf_clear(&f->err);
    }
    tfg_backend_cuda_capturing.n = 0;
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
  free(tfg_backend_cuda_capturing.failed);
  tfg_backend_cuda_capturing.failed = NULL;
  tfg_backend_cuda_capturing.cap = 0;
  return r;
}

void tfg_backend_cuda_replay(tfg_backend *b, tfg_stream *s, tfg_replay *r) {
  cuda_backend *cb = cuda_of(b);
  if (s->status != TFG_OK) return;
  tfg_strbuf why = {0};
  if (!CUDA_OK(cudaSetDevice(cb->gpu), &why) || !CUDA_OK(cudaGraphLaunch(r->exec, s->s), &why))
    tfg_backend_cuda_stream_fail(s, TFG_ERR_DEVICE, true, why.data);
  tfg_strbuf_free(&why);
}

void tfg_backend_cuda_replay_free(tfg_backend *b, tfg_replay *r) {
  (void)b;
  if (!r) return;
  cuda_quiet(cudaSetDevice(r->gpu));
  if (r->exec) cuda_quiet(cudaGraphExecDestroy(r->exec));
  if (r->graph) cuda_quiet(cudaGraphDestroy(r->graph));
  free(r);
}
