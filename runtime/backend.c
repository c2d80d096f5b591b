/* runtime/backend.c: the functions of runtime/backend.h, each calling the
 * backend's entry of the same name (as ggml-backend.c's ggml_backend_*
 * call their iface), so that no caller reads the table itself. The
 * optional entries check the capability the backend declared first: a
 * caller that skipped asking fails an assertion here, not a jump through
 * NULL. */
#include "runtime/backend_impl.h"

#include "base/assert.h"

/* ---- what a backend is ----------------------------------------------------------- */

void tfg_backend_init(tfg_backend *b, const tfg_backend_i *i, const tfg_backend_caps *caps, const tfg_device *dev,
                      void *ctx) {
  b->i = *i;
  b->caps = *caps;
  b->device = dev;
  b->ctx = ctx;
}

const tfg_backend_caps *tfg_backend_get_caps(const tfg_backend *b) { return &b->caps; }

bool tfg_backend_is_host(const tfg_backend *b) { return b->caps.is_host; }

const tfg_device *tfg_backend_device(const tfg_backend *b) { return b->device; }

const char *tfg_backend_name(tfg_backend *b) { return b->i.name(b); }

/* The sources, whose values the executor places in memory itself (they
 * have no kernel), and every op the backend has a kernel for: the same
 * rule on every backend, so it is not an entry of the table. */
bool tfg_backend_supports_op(tfg_backend *b, const tfg_node *node) {
  switch (node->op) {
  case TFG_OP_PARAM:
  case TFG_OP_INPUT:
  case TFG_OP_STATE:
  case TFG_OP_CONST: return true;
  default: return b->i.kernel(b, node) != NULL;
  }
}

tfg_kernel_fn tfg_backend_kernel(tfg_backend *b, const tfg_node *node) { return b->i.kernel(b, node); }

/* ---- memory ------------------------------------------------------------------------ */

void *tfg_backend_alloc(tfg_backend *b, size_t bytes) { return b->i.alloc(b, bytes); }

void tfg_backend_free(tfg_backend *b, void *ptr) { b->i.free(b, ptr); }

void tfg_backend_mem_stats(tfg_backend *b, tfg_mem_stats *st, int64_t *free_bytes) {
  b->i.mem_stats(b, st, free_bytes);
}

tfg_status tfg_backend_read_now(tfg_backend *b, void *dst, const void *src, size_t bytes, tfg_strbuf *err) {
  TFG_ASSERT(!b->caps.is_host && b->i.read_now != NULL); /* host memory is read directly */
  return b->i.read_now(b, dst, src, bytes, err);
}

/* ---- streams and events ------------------------------------------------------------ */

tfg_stream *tfg_backend_stream_create(tfg_backend *b) { return b->i.stream_create(b); }

void tfg_backend_stream_free(tfg_backend *b, tfg_stream *s) { b->i.stream_free(b, s); }

tfg_event *tfg_backend_event_create(tfg_backend *b) { return b->i.event_create(b); }

void tfg_backend_event_free(tfg_backend *b, tfg_event *e) { b->i.event_free(b, e); }

void tfg_backend_event_record(tfg_backend *b, tfg_stream *s, tfg_event *e) { b->i.event_record(b, s, e); }

void tfg_backend_event_wait(tfg_backend *b, tfg_stream *s, tfg_event *e) { b->i.event_wait(b, s, e); }

tfg_status tfg_backend_synchronize(tfg_backend *b, tfg_stream *s, tfg_strbuf *err) {
  return b->i.synchronize(b, s, err);
}

bool tfg_backend_failed_here(tfg_backend *b, tfg_stream *s) { return b->i.failed_here(b, s); }

tfg_node_id tfg_backend_failed_node(tfg_backend *b, tfg_stream *s) { return b->i.failed_node(b, s); }

/* ---- queued work ------------------------------------------------------------------- */

void tfg_backend_copy_from_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes) {
  b->i.copy_from_host(b, s, dst, src, bytes);
}

void tfg_backend_copy_to_host(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes) {
  b->i.copy_to_host(b, s, dst, src, bytes);
}

void tfg_backend_copy_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src, size_t bytes) {
  b->i.copy_peer(b, s, dst, src_b, src, bytes);
}

void tfg_backend_reduce_peer(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src,
                             size_t count, tfg_dtype dt, double scale) {
  b->i.reduce_peer(b, s, dst, src_b, src, count, dt, scale);
}

void tfg_backend_reduce_all(tfg_backend *b, tfg_stream *s, void *const *bufs, int n, size_t count, tfg_dtype dt,
                            double scale) {
  TFG_ASSERT(b->caps.reduce_all && b->i.reduce_all != NULL);
  b->i.reduce_all(b, s, bufs, n, count, dt, scale);
}

void tfg_backend_launch(tfg_backend *b, tfg_stream *s, tfg_kernel_fn fn, tfg_kernel_ctx *ctx, const tfg_node *node,
                        const tfg_tensor *in, tfg_tensor *out) {
  b->i.launch(b, s, fn, ctx, node, in, out);
}

/* ---- settings ---------------------------------------------------------------------- */

int tfg_backend_set_threads(tfg_backend *b, int n) {
  TFG_ASSERT(b->caps.sets_threads && b->i.set_threads != NULL);
  return b->i.set_threads(b, n);
}

void tfg_backend_set_trace(tfg_backend *b, struct tfg_trace *t) { b->i.set_trace(b, t); }

void tfg_backend_set_step(tfg_backend *b, tfg_stream *s, int64_t step, uint64_t seed) {
  TFG_ASSERT(b->caps.device_step && b->i.set_step != NULL);
  b->i.set_step(b, s, step, seed);
}

/* ---- captured runs ----------------------------------------------------------------- */

/* The entries of caps.can_capture, checked together: a backend fills all
 * six or none (runtime/backend_impl.h). */
static void assert_captures(const tfg_backend *b) {
  TFG_ASSERT(b->caps.can_capture && b->i.host_alloc && b->i.host_free && b->i.capture_begin && b->i.capture_end &&
             b->i.replay && b->i.replay_free);
}

void *tfg_backend_host_alloc(tfg_backend *b, size_t bytes) {
  assert_captures(b);
  return b->i.host_alloc(b, bytes);
}

void tfg_backend_host_free(tfg_backend *b, void *ptr) {
  assert_captures(b);
  b->i.host_free(b, ptr);
}

bool tfg_backend_capture_begin(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  assert_captures(b);
  return b->i.capture_begin(b, s, why);
}

tfg_replay *tfg_backend_capture_end(tfg_backend *b, tfg_stream *s, tfg_strbuf *why) {
  assert_captures(b);
  return b->i.capture_end(b, s, why);
}

void tfg_backend_replay(tfg_backend *b, tfg_stream *s, tfg_replay *r) {
  assert_captures(b);
  b->i.replay(b, s, r);
}

void tfg_backend_replay_free(tfg_backend *b, tfg_replay *r) {
  assert_captures(b);
  b->i.replay_free(b, r);
}

void tfg_backend_destroy(tfg_backend *b) {
  if (b) b->i.destroy(b);
}
