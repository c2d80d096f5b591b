/* runtime/device.h: logical devices, their hardware, and the backend
 * interface the executor is written against (modeled on ggml-backend's
 * `_i` structs).
 *
 *   tfg_devices *ds;
 *   if (tfg_devices_parse(diag, "host*4:512M", &ds) != TFG_OK) ...   // --devices
 *   // or: tfg_devices_default(diag, 2, NULL, &ds, NULL)  (a program naming gpu:0 and gpu:1)
 *   const tfg_device *g1 = tfg_devices_gpu(ds, 1);   // what the program calls gpu:1
 *   tfg_devices_describe(ds, &text);                  // `tfg devices`
 *   tfg_devices_free(ds);
 *
 * Device 0 is always the host CPU ("cpu:0"): where `cpu` pins go, where
 * data is loaded, where a parameter server lives. The GPU entries follow in
 * --devices order; the program's gpu:K is the K-th of them. A GPU entry is
 * a physical CUDA device (cuda:K), one of several logical devices sharing
 * one (cuda:K*N: each has its own streams and memory pool, like
 * TensorFlow's logical devices), a GPU-like device emulated on the CPU
 * (host*N: its own worker thread and memory pool), or a hypothetical device
 * for placement and planning only (sim:MODEL*N, capacities from the table
 * in device.c: h100, h200, a100, cpu).
 *
 * Spec grammar (CLI.md): ENTRY[,ENTRY...]; ENTRY = KIND[*COUNT][:SIZE];
 * KIND = cuda:K | host | sim:MODEL; SIZE = NUMBER[K|M|G|T] (bytes, powers of
 * 1024; a plain number is bytes) caps each device's memory. */
#ifndef TFG_DEVICE_H
#define TFG_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
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
} tfg_device;

typedef struct tfg_devices tfg_devices;

/* Parses a --devices spec. Errors (unknown kind, bad count or size, a
 * sim model not in the table) are reported naming the entry, with the
 * spec as the source, and return TFG_ERR_USAGE. cuda:K entries parse
 * even in a build without CUDA or on a machine without that GPU (they
 * are refused when a program runs); a GPU the runtime finds is described
 * as found (name, memory: tfg_backend_probe_gpus), others with planning
 * estimates. */
tfg_status tfg_devices_parse(tfg_diag *d, const char *spec, tfg_devices **out);
/* The default when --devices is not given: every physical GPU the runtime
 * finds (one logical device each); with none, `gpus` host devices (the
 * number of gpu:N a program names), and *notice set to a one-line notice
 * saying so and why, when gpus > 0. More gpu:N than can be emulated is an
 * error at `where` (the source naming the highest; NULL: none). */
tfg_status tfg_devices_default(tfg_diag *d, int gpus, const tfg_loc *where, tfg_devices **out, const char **notice);
/* Why a default list (tfg_devices_default) has no GPU, in a few words
 * ("no CUDA driver", "this build of tfg has no CUDA backend"); NULL when
 * it has GPUs or ds was parsed from a spec. */
const char *tfg_devices_no_gpu(const tfg_devices *ds);
/* Caps every device's memory at limit bytes (--memory-limit). */
void tfg_devices_limit(tfg_devices *ds, int64_t limit);
void tfg_devices_free(tfg_devices *ds);

int tfg_devices_count(const tfg_devices *ds);   /* cpu:0 plus the GPU entries */
const tfg_device *tfg_devices_at(const tfg_devices *ds, int i);
int tfg_devices_gpus(const tfg_devices *ds);    /* GPU entries */
/* The program's gpu:k, or NULL when there are fewer GPUs. */
const tfg_device *tfg_devices_gpu(const tfg_devices *ds, int k);

/* Parses a size ("512M", "30G", "1024") into bytes; false when malformed
 * or overflowing. */
bool tfg_size_parse(const char *s, int64_t *bytes);
/* "512.0 MiB" style text for a byte count. */
void tfg_size_format(tfg_strbuf *out, int64_t bytes);

/* `tfg devices`: the hardware found and how logical devices map onto it. */
void tfg_devices_describe(const tfg_devices *ds, tfg_strbuf *out);

/* ---- test hooks every backend and the executor read --------------------- */

/* A decimal integer filling all of environment variable name, or false. */
bool tfg_env_int(const char *name, long long *out);
/* Test hook: the N-th kernel launched (counting launch calls) on a
 * backend whose device index is TFG_FAULT_DEVICE fails with
 * TFG_ERR_DEVICE, when the environment variables TFG_FAULT_DEVICE and
 * TFG_FAULT_AFTER=N are set when the backend is created. Returns that N
 * for a backend of dev (0: none) and the message it fails with in msg (n
 * bytes). Here, below the backends, so that both backends and the
 * backend registration read it without calling each other. */
long long tfg_backend_fault_after(const tfg_device *dev, char *msg, size_t n);

/* ---- GPU discovery (implemented by runtime/backend.c) ------------------ */

/* A physical GPU as the CUDA runtime reports it. */
typedef struct tfg_gpu_info {
  char name[96];     /* "NVIDIA H100 80GB HBM3" */
  int major, minor;  /* compute capability */
  int64_t memory;    /* total device memory, bytes */
  int sms;           /* multiprocessors */
} tfg_gpu_info;

/* The physical GPUs of this machine, probed once per process: returns
 * their count and points *info at that many entries (CUDA ordinals 0..).
 * 0 when there are none, with *why saying why in a few words ("no CUDA
 * driver", "no CUDA-capable device", "this build of tfg has no CUDA
 * backend"); *detail (when not NULL) gets the runtime's own words, or "". */
int tfg_backend_probe_gpus(const tfg_gpu_info **info, const char **why, const char **detail);
/* Bytes free on GPU k as the CUDA runtime reports them (this makes the
 * GPU's context); the first answer is kept. -1 when it cannot tell. */
int64_t tfg_backend_probe_free(int k);

/* The --devices to suggest to a run that needs `want` GPU entries and has
 * fewer, as help text ("--devices cuda:0*2 (...), or --devices host*2
 * (...)"): with physical GPUs (gpus[0..ngpus)), logical devices on them
 * first (CLI.md: one GPU and a program naming gpu:1: cuda:0*2; several
 * GPUs share the entries evenly where they divide), then host devices as
 * the alternative; with none, host devices. A function of the GPUs given,
 * so a test can give a made-up list; tfg_devices_suggest gives this
 * machine's (tfg_backend_probe_gpus). */
void tfg_devices_suggest_for(const tfg_gpu_info *gpus, int ngpus, int64_t want, tfg_strbuf *out);
void tfg_devices_suggest(int64_t want, tfg_strbuf *out);

#endif
