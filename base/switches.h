/* base/switches.h: the A/B switches: what a benchmark or a test turns
 * off (or on) to compare tfg with and without one of its choices, and
 * the fault-injection hooks the tests use.
 *
 *   tfg_switches sw = {0};                         // every default
 *   tfg_switches off = {.no_opt = true};           // TFG_OPT=0
 *   tfg_compile_opts co = {..., .sw = sw};         // passed down by value
 *
 * Plain data: zero is the default of every field, so an options struct
 * that does not mention its switches gets tfg's normal behaviour. Users
 * set them with TFG_* environment variables (docs/cli.md), which only
 * cli/switches.c reads (cli_switches_from_env); everything below cli/
 * gets them in the option structs it is given (tfg_compile_opts,
 * tfg_session_opts, tfg_exec_opts, tfg_backend_opts), never from the
 * environment (docs/architecture.md; tests/layers.py checks it). The one
 * exception is the CPU kernels' two process-wide choices (no_vmath,
 * no_gemm_split), set once through kernels/cpu/config.h. */
#ifndef TFG_SWITCHES_H
#define TFG_SWITCHES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tfg_switches {
  /* graph passes (compiler/) */
  bool no_opt;            /* TFG_OPT=0: no optimization pass: folding, CSE and simplification, the layout
                           * pass, views, autodiff's shape-only rewrites (docs/plan.md) */
  bool no_layout;         /* TFG_LAYOUT=0: with the others on, no transpose folded into a matmul or attention */
  bool no_attention_grad; /* TFG_ATTENTION_GRAD=0: attention's gradient through its probabilities, not the
                           * fused ATTENTION_GRAD op */
  bool no_fuse;           /* TFG_FUSE=0: no chain of elementwise ops fused into one kernel */
  /* kernels */
  bool no_vmath;           /* TFG_VMATH=0: the CPU's exp and erfc from scalar libm, not libmvec (process-wide) */
  bool no_gemm_split;      /* TFG_GEMM_SPLIT=0: a CPU product is one OpenBLAS call, threaded by OpenBLAS
                            * (process-wide) */
  bool no_attention_tiled; /* TFG_ATTENTION_TILED=0: CUDA's f32 attention on the reference kernels */
  bool nvrtc;              /* TFG_NVRTC=1: a fused chain on CUDA as a kernel of its own, compiled by NVRTC */
  const char *nvrtc_cache; /* where NVRTC's kernels are kept (a folder; kernels/ is made in it): TFG_CACHE_DIR,
                            * else $XDG_CACHE_HOME/tfg, else $HOME/.cache/tfg; NULL: no cache */
  /* runtime */
  bool no_cuda_graphs;     /* TFG_CUDA_GRAPHS=0: runs are never captured and replayed */
  bool host_graphs;        /* TFG_HOST_GRAPHS=1: host devices capture and replay, as GPUs do (a test hook) */
  int64_t nccl_timeout_s;  /* TFG_NCCL_TIMEOUT: seconds an all-reduce across processes may take; 0: 600 */
  /* fault injection (tests; runtime/exec.h, runtime/backend_fault.h) */
  int fault_device;        /* TFG_FAULT_DEVICE: the device index the two hooks below fail */
  bool fault_at_step;      /* TFG_FAULT_DEVICE and TFG_FAULT_STEP both set: ... */
  int64_t fault_step;      /* ... the first kernel of this training step fails */
  int64_t fault_after;     /* TFG_FAULT_DEVICE and TFG_FAULT_AFTER > 0: that launch fails; 0: none */
  bool fault_assert;       /* TFG_FAULT_ASSERT=1: every run fails an internal assertion */
} tfg_switches;

#endif
