/* runtime/backend_impl.h: what a backend implements (modeled on
 * ggml-backend-impl.h): the table of entries that runtime/backend.c's
 * functions call, and the body of tfg_backend. Only the backends
 * (runtime/backend*.c) and tests that build a stand-in backend include
 * it; everyone else calls runtime/backend.h's functions, so a backend is
 * free to change how it fills the table, and tests/layers.py refuses a
 * file outside runtime/backend* that reads it.
 *
 *   static const tfg_backend_caps my_caps = {.is_host = true, .reduce_all = true};
 *   static const tfg_backend_i my_i = {.name = my_name, .alloc = my_alloc, ...};
 *   tfg_backend_init(b, &my_i, &my_caps, dev, state);
 *
 * Each entry does what the function of the same name in
 * runtime/backend.h says (tfg_backend_alloc calls alloc, ...). Every
 * entry is required but those of a capability (tfg_backend_caps), which
 * a backend fills exactly when it declares that capability:
 *   - read_now when it is not is_host;
 *   - set_threads with sets_threads;
 *   - reduce_all with reduce_all;
 *   - host_alloc, host_free, capture_begin, capture_end, replay and
 *     replay_free with can_capture;
 *   - set_step with device_step. */
#ifndef TFG_BACKEND_IMPL_H
#define TFG_BACKEND_IMPL_H

#include "runtime/backend.h"

typedef struct tfg_backend_i {
  const char *(*name)(tfg_backend *b);

  void *(*alloc)(tfg_backend *b, size_t bytes);
  void (*free)(tfg_backend *b, void *ptr);

  tfg_stream *(*stream_create)(tfg_backend *b);
  void (*stream_free)(tfg_backend *b, tfg_stream *s);

  tfg_event *(*event_create)(tfg_backend *b);
  void (*event_free)(tfg_backend *b, tfg_event *e);
  void (*event_record)(tfg_backend *b, tfg_stream *s, tfg_event *e);
  void (*event_wait)(tfg_backend *b, tfg_stream *s, tfg_event *e);

  void (*copy_from_host)(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes);
  void (*copy_to_host)(tfg_backend *b, tfg_stream *s, void *dst, const void *src, size_t bytes);
  void (*copy_peer)(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src, size_t bytes);
  void (*reduce_peer)(tfg_backend *b, tfg_stream *s, void *dst, tfg_backend *src_b, const void *src, size_t count,
                      tfg_dtype dt, double scale);
  void (*reduce_all)(tfg_backend *b, tfg_stream *s, void *const *bufs, int n, size_t count, tfg_dtype dt,
                     double scale);

  tfg_kernel_fn (*kernel)(tfg_backend *b, const tfg_node *node);
  int (*set_threads)(tfg_backend *b, int n);
  void (*set_trace)(tfg_backend *b, struct tfg_trace *t);
  void (*launch)(tfg_backend *b, tfg_stream *s, tfg_kernel_fn fn, tfg_kernel_ctx *ctx, const tfg_node *node,
                 const tfg_tensor *in, tfg_tensor *out);

  tfg_status (*read_now)(tfg_backend *b, void *dst, const void *src, size_t bytes, tfg_strbuf *err);
  void (*mem_stats)(tfg_backend *b, tfg_mem_stats *st, int64_t *free_bytes);

  tfg_status (*synchronize)(tfg_backend *b, tfg_stream *s, tfg_strbuf *err);
  bool (*failed_here)(tfg_backend *b, tfg_stream *s);
  tfg_node_id (*failed_node)(tfg_backend *b, tfg_stream *s);

  void *(*host_alloc)(tfg_backend *b, size_t bytes);
  void (*host_free)(tfg_backend *b, void *ptr);
  void (*set_step)(tfg_backend *b, tfg_stream *s, int64_t step, uint64_t seed);
  bool (*capture_begin)(tfg_backend *b, tfg_stream *s, tfg_strbuf *why);
  tfg_replay *(*capture_end)(tfg_backend *b, tfg_stream *s, tfg_strbuf *why);
  void (*replay)(tfg_backend *b, tfg_stream *s, tfg_replay *r);
  void (*replay_free)(tfg_backend *b, tfg_replay *r);

  void (*destroy)(tfg_backend *b);
} tfg_backend_i;

struct tfg_backend {
  tfg_backend_i i;
  tfg_backend_caps caps; /* declared by the backend; tfg_backend_get_caps */
  const tfg_device *device;
  void *ctx; /* the backend's own state */
};

/* Fills b's body: the table i and the capabilities caps its backend
 * declares (both copied), the device it runs and the backend's state. */
void tfg_backend_init(tfg_backend *b, const tfg_backend_i *i, const tfg_backend_caps *caps, const tfg_device *dev,
                      void *ctx);

#endif
