/* ir/device.h: device descriptions: what the placer's cost model and the
 * memory planner know of each logical device of a run (its kind, name,
 * hardware, capacity and speeds), the list of them, the sim models'
 * planning table, and byte sizes as users write and read them.
 *
 *   const tfg_devices *ds = ...;   // made by runtime/device.h: tfg_devices_parse (--devices), tfg_devices_default
 *   for (int i = 0; i < tfg_devices_count(ds); i++)
 *     use(tfg_devices_at(ds, i)->memory);             // cpu:0, then the GPU entries
 *   const tfg_device *g1 = tfg_devices_gpu(ds, 1);    // what the program calls gpu:1 (NULL: none)
 *   tfg_size_format(&text, g1->memory);               // "30.0 GiB"
 *   tfg_devices_free(ds);
 *
 * Device 0 is always the host CPU ("cpu:0"): where `cpu` pins go, where
 * data is loaded, where a parameter server lives. The GPU entries follow in
 * --devices order; the program's gpu:K is the K-th of them. A GPU entry is
 * a physical CUDA device (cuda:K), one of several logical devices sharing
 * one (cuda:K*N: each has its own streams and memory pool, like
 * TensorFlow's logical devices), a GPU-like device emulated on the CPU
 * (host*N: its own worker thread and memory pool), or a hypothetical device
 * for placement and planning only (sim:MODEL*N, capacities from the sim
 * table: h100, h200, a100, cpu; sim:MODEL*NxM: M nodes of N each, linked
 * by the table's network, for planning a cluster).
 *
 * Descriptions only: nothing here probes the machine or runs anything.
 * Lists are made by runtime/device.c, which finds the hardware
 * (runtime/discover.h) and fills them through ir/device_impl.h. */
#ifndef TFG_IR_DEVICE_H
#define TFG_IR_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"

typedef enum tfg_device_kind {
  TFG_DEVICE_CPU,  /* the host CPU: device 0 */
  TFG_DEVICE_HOST, /* a GPU-like device emulated on the host */
  TFG_DEVICE_CUDA, /* a (logical) CUDA GPU */
  TFG_DEVICE_SIM,  /* hypothetical: for place and plan only */
} tfg_device_kind;

/* What the placer's cost model and the memory planner know of a device. */
typedef struct tfg_device {
  int index;            /* 0 for cpu:0, then 1.. for gpu:0.. */
  tfg_device_kind kind;
  char name[16];        /* "cpu:0", "gpu:3" */
  char hardware[64];    /* "host CPU", "host device 2", "cuda:0 (logical 1 of 2)", "sim:h100" */
  int physical;         /* the physical device it lives on (cuda:K's K; host: 0) */
  int64_t memory;       /* capacity in bytes (after any :SIZE cap or --memory-limit) */
  double flops;         /* peak f32 FLOP/s the cost model assumes */
  double mem_bw;        /* device memory bandwidth, bytes/s */
  double link_bw;       /* bandwidth to another device, bytes/s */
  double net_bw;        /* bandwidth to a device on another node (machine), bytes/s */
  int node;             /* the node (machine) it is on: 0 but for sim:MODEL*NxM's */
} tfg_device;

/* A physical GPU as the CUDA runtime reports it. */
typedef struct tfg_gpu_info {
  char name[96];     /* "NVIDIA H100 80GB HBM3" */
  int major, minor;  /* compute capability */
  int64_t memory;    /* total device memory, bytes */
  int sms;           /* multiprocessors */
} tfg_gpu_info;

typedef struct tfg_devices tfg_devices;

void tfg_devices_free(tfg_devices *ds);
int tfg_devices_count(const tfg_devices *ds);   /* cpu:0 plus the GPU entries */
const tfg_device *tfg_devices_at(const tfg_devices *ds, int i);
int tfg_devices_gpus(const tfg_devices *ds);    /* GPU entries */
/* The program's gpu:k, or NULL when there are fewer GPUs. */
const tfg_device *tfg_devices_gpu(const tfg_devices *ds, int k);
/* Caps every device's memory at limit bytes (--memory-limit). */
void tfg_devices_limit(tfg_devices *ds, int64_t limit);
/* The bandwidth between devices a and b (indices), bytes/s: the slower
 * one's link on one node, the slower one's network between nodes. */
double tfg_devices_bw(const tfg_devices *ds, int a, int b);
/* How many nodes the list spans (1 unless sim:MODEL*NxM). */
int tfg_devices_nodes(const tfg_devices *ds);

/* The --devices to suggest to a run that needs `want` GPU entries and has
 * fewer, appended to *out as help text ("--devices cuda:0*2 (...), or
 * --devices host*2 (...)"): what the machine ds was made on offers, as
 * its maker judges (runtime/device.h's tfg_devices_suggest_for over the
 * GPUs it finds), so the placer can suggest without probing anything. */
void tfg_devices_suggest(const tfg_devices *ds, int64_t want, tfg_strbuf *out);

/* ---- the sim table -------------------------------------------------------- */

/* A model of the sim table: the planning numbers of a hypothetical device
 * (sim:MODEL), and the estimates for a GPU whose name names the model. */
typedef struct tfg_sim_model {
  const char *name; /* lower case; matched case-insensitively */
  int64_t memory;   /* bytes */
  double flops;     /* dense f32 FLOP/s (no tensor cores, no sparsity) */
  double mem_bw;    /* bytes/s */
  double link_bw;   /* bytes/s to a peer (NVLink for the GPUs) */
  double net_bw;    /* bytes/s per device to another node (InfiniBand for the GPUs) */
} tfg_sim_model;

/* The model named s[0..n) (case-insensitive), or NULL. */
const tfg_sim_model *tfg_sim_model_find(const char *s, size_t n);
/* The GPU model a GPU's name names ("NVIDIA H100 80GB HBM3" -> h100; the
 * cpu model never), for its planning numbers; with none (or NULL: a GPU
 * that cannot be probed), h100's: the GPU people most likely have. */
const tfg_sim_model *tfg_sim_model_of_gpu(const char *gpu_name);

/* ---- sizes ----------------------------------------------------------------- */

/* Parses a size ("512M", "30G", "1024") into bytes; false when malformed
 * or overflowing. SIZE = NUMBER[K|M|G|T] (powers of 1024, with an optional
 * "B" or "iB"; a plain number is bytes), case-insensitive; zero fails. */
bool tfg_size_parse(const char *s, int64_t *bytes);
/* The same over s[0..n) (s need not end there). */
bool tfg_size_parse_n(const char *s, size_t n, int64_t *bytes);
/* "512.0 MiB" style text for a byte count, appended to *out. */
void tfg_size_format(tfg_strbuf *out, int64_t bytes);
/* The same text into buf (cap bytes, cut to fit). */
void tfg_size_text(char *buf, size_t cap, int64_t bytes);

#endif
