/* kernels/nvrtc.h: CUDA C source to PTX at run time through NVRTC, with
 * a disk cache, for kernels tfg writes itself (kernels/fused_codegen.h).
 *
 *   tfg_strbuf ptx = {0}, log = {0};
 *   if (tfg_nvrtc_ptx(src, "compute_90", nh, names, texts, cache, &ptx, &log, NULL) == TFG_OK) ...
 *
 * NVRTC is loaded with dlopen on first use, not linked: a tfg built
 * without it, or run where the toolkit's libnvrtc is missing, still runs
 * (the callers fall back to their interpreted kernels); NVRTC needs no
 * GPU, so the CPU build's tests compile generated kernels too. PTX (for
 * a virtual architecture) rather than a cubin: the driver compiles it
 * for the device it loads on, newer ones included.
 *
 * The cache: a folder the caller names (the switch nvrtc_cache,
 * base/switches.h: TFG_CACHE_DIR, else $XDG_CACHE_HOME/tfg, else
 * $HOME/.cache/tfg, resolved by cli/switches.c); a file kernels/HASH.ptx
 * in it per source and architecture (tfg_fused_source_hash), written to
 * a temporary name and renamed, so a reader never sees half a file. A
 * cache that cannot be made is no error: the source is compiled each
 * time.
 *
 * The library is looked for under CUDA_HOME first (the toolkit's own
 * variable, read here: the one environment variable kernels/ reads,
 * docs/architecture.md), then by its names and the usual places. */
#ifndef TFG_KERNELS_NVRTC_H
#define TFG_KERNELS_NVRTC_H

#include <stdbool.h>

#include "base/status.h"
#include "base/strbuf.h"

/* Whether NVRTC could be loaded (the first call tries). */
bool tfg_nvrtc_available(void);

/* PTX for src, compiled for the virtual architecture arch ("compute_90")
 * with the nheaders headers names[i] -> texts[i], or read from the cache
 * in folder cache (made if missing; NULL: no cache); *cached (may be
 * NULL) tells which. TFG_OK with ptx filled (NUL terminated); else
 * TFG_ERR_DEVICE with the reason in log (NVRTC missing, or its compile
 * log). Thread-safe. */
tfg_status tfg_nvrtc_ptx(const char *src, const char *arch, int nheaders, const char *const *names,
                         const char *const *texts, const char *cache, tfg_strbuf *ptx, tfg_strbuf *log,
                         bool *cached);

#endif
