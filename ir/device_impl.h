/* ir/device_impl.h: the body of the device list (ir/device.h), for
 * ir/device.c and the code that makes lists (runtime/device.c: --devices
 * and the default, from the hardware it finds). Everything else reads a
 * list through ir/device.h's accessors.
 *
 *   tfg_devices *ds = tfg_devices_new(host_memory, cores, suggest);  // cpu:0 alone
 *   tfg_devices_add_host(ds, 2, 0);                                  // gpu:0, gpu:1: host devices
 *   tfg_device *g = tfg_devices_push(ds, TFG_DEVICE_CUDA, 0, mem, flops, bw, link);
 *   snprintf(g->hardware, sizeof g->hardware, "cuda:0 ...");         // the caller's words
 */
#ifndef TFG_IR_DEVICE_IMPL_H
#define TFG_IR_DEVICE_IMPL_H

#include "ir/device.h"

/* The most GPU entries a list holds (no machine has more; it keeps names
 * short). */
enum { TFG_DEVICES_MAX_GPUS = 256 };

/* What tfg_devices_suggest asks the list's maker: the suggestion for want
 * GPU entries, appended to *out. */
typedef void (*tfg_devices_suggest_fn)(int64_t want, tfg_strbuf *out);

struct tfg_devices {
  tfg_device *dev;     /* dev[0] is cpu:0; room for 1 + TFG_DEVICES_MAX_GPUS */
  int n;
  int64_t host_memory; /* the machine's physical memory, for describe */
  char *notice;        /* the maker's notice (tfg_devices_default's), owned here; NULL: none */
  char *no_gpu;        /* why a default list has no GPU (tfg_devices_no_gpu), owned here; NULL */
  tfg_devices_suggest_fn suggest;
};

/* A list holding only cpu:0, on a machine of host_memory bytes and
 * host_cores cores (its hardware text says them). Never fails
 * (allocation failure is fatal, as everywhere in tfg's small
 * allocations); suggest must not be NULL. */
tfg_devices *tfg_devices_new(int64_t host_memory, long host_cores, tfg_devices_suggest_fn suggest);
/* Appends one GPU entry device (named gpu:K in order) with the given
 * numbers and returns it; its hardware text is the caller's to set. The
 * caller has checked the TFG_DEVICES_MAX_GPUS limit. */
tfg_device *tfg_devices_push(tfg_devices *ds, tfg_device_kind kind, int physical, int64_t memory, double flops,
                             double mem_bw, double link_bw);
/* Appends count host devices ("host device K"), each capped at cap bytes
 * (0: no cap): by default a quarter of the machine's memory divided by
 * count (the rest stays with cpu:0, the data and the OS); a cap may raise
 * that up to the machine's memory divided by count. */
void tfg_devices_add_host(tfg_devices *ds, int count, int64_t cap);
/* Appends count x nodes separate hypothetical devices of model m, each
 * with the model's memory lowered to cap when cap is not 0; physical
 * numbers them among the list's sim devices, so none shares with
 * another. With nodes > 1 they are nodes of count devices each (device i
 * on the entry's node i / count, numbered after the list's nodes so far),
 * linked by the model's network between nodes. */
void tfg_devices_add_sim(tfg_devices *ds, const tfg_sim_model *m, int count, int nodes, int64_t cap);

#endif
