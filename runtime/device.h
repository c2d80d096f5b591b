/* runtime/device.h: the logical device list of a run, made from --devices
 * or from the hardware this machine has (runtime/discover.h), and `tfg
 * devices`. The list itself, what the placer and the planner read, is a
 * description (ir/device.h); this is where descriptions meet the machine.
 *
 *   tfg_devices *ds;
 *   if (tfg_devices_parse(diag, "host*4:512M", &ds) != TFG_OK) ...   // --devices
 *   // or: tfg_devices_default(diag, 2, NULL, &ds, NULL)  (a program naming gpu:0 and gpu:1)
 *   const tfg_device *g1 = tfg_devices_gpu(ds, 1);   // what the program calls gpu:1
 *   tfg_devices_describe(ds, &text);                  // `tfg devices`
 *   tfg_devices_free(ds);
 *
 * Spec grammar (CLI.md): ENTRY[,ENTRY...]; ENTRY = KIND[*COUNT][:SIZE];
 * KIND = cuda:K | host | sim:MODEL; SIZE = NUMBER[K|M|G|T] (bytes, powers of
 * 1024; a plain number is bytes) caps each device's memory. */
#ifndef TFG_RUNTIME_DEVICE_H
#define TFG_RUNTIME_DEVICE_H

#include <stdint.h>

#include "base/diag.h"
#include "base/status.h"
#include "base/strbuf.h"
#include "ir/device.h"
#include "runtime/discover.h"

/* Parses a --devices spec. Errors (unknown kind, bad count or size, a
 * sim model not in the table) are reported naming the entry, with the
 * spec as the source, and return TFG_ERR_USAGE. cuda:K entries parse
 * even in a build without CUDA or on a machine without that GPU (they
 * are refused when a program runs); a GPU the runtime finds is described
 * as found (name, memory: tfg_discover_gpus), others with planning
 * estimates. */
tfg_status tfg_devices_parse(tfg_diag *d, const char *spec, tfg_devices **out);
/* The default when --devices is not given: every physical GPU the runtime
 * finds (one logical device each; under mpirun this rank's share of them,
 * tfg_devices_set_local); with none, `gpus` host devices (the
 * number of gpu:N a program names), and *notice set to a one-line notice
 * saying so and why, when gpus > 0. More gpu:N than can be emulated is an
 * error at `where` (the source naming the highest; NULL: none). */
tfg_status tfg_devices_default(tfg_diag *d, int gpus, const tfg_loc *where, tfg_devices **out, const char **notice);
/* Under mpirun, the ranks of one machine share its GPUs by default, as
 * torchrun's LOCAL_RANK picks a rank's GPU: local rank l of L gets the
 * GPUs [l G / L, (l + 1) G / L) of the G found (one each when G = L), or
 * GPU l mod G when there are fewer GPUs than ranks. Set once, before any
 * default list is made (0 of 1, the default: every GPU). */
void tfg_devices_set_local(int local_rank, int local_size);
/* That share: the GPUs [*first, *end) of `found` (>= 1) for local rank
 * `rank` of `size`. */
void tfg_devices_local_share(int found, int rank, int size, int *first, int *end);
/* Why a default list (tfg_devices_default) has no GPU, in a few words
 * ("no CUDA driver", "this build of tfg has no CUDA backend"); NULL when
 * it has GPUs or ds was parsed from a spec. */
const char *tfg_devices_no_gpu(const tfg_devices *ds);

/* `tfg devices`: the hardware found and how logical devices map onto it. */
void tfg_devices_describe(const tfg_devices *ds, tfg_strbuf *out);

/* The --devices to suggest to a run that needs `want` GPU entries and has
 * fewer, as help text ("--devices cuda:0*2 (...), or --devices host*2
 * (...)"): with physical GPUs (gpus[0..ngpus)), logical devices on them
 * first (CLI.md: one GPU and a program naming gpu:1: cuda:0*2; several
 * GPUs share the entries evenly where they divide), then host devices as
 * the alternative; with none, host devices. A function of the GPUs given,
 * so a test can give a made-up list; the lists made here suggest over
 * this machine's (ir/device.h's tfg_devices_suggest). */
void tfg_devices_suggest_for(const tfg_gpu_info *gpus, int ngpus, int64_t want, tfg_strbuf *out);

#endif
