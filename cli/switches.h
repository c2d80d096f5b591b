/* cli/switches.h: the one place that reads tfg's A/B switches from the
 * environment (TFG_OPT, TFG_FUSE, TFG_CUDA_GRAPHS, the fault hooks...,
 * docs/cli.md) into the typed struct everything below cli/ is given
 * (base/switches.h).
 *
 *   tfg_switches sw;
 *   cli_switches_from_env(&sw);        // once, at start-up
 *   tfg_cpu_config_set(&sw);           // the CPU kernels' process-wide part
 *   ... (tfg_compile_opts){..., .sw = sw} ...
 *
 * The benchmarks and GPU tests that link the library without the CLI
 * (bench/, tests/gpu/) link this file too, so a switch means the same
 * to them as to `tfg run`. */
#ifndef TFG_CLI_SWITCHES_H
#define TFG_CLI_SWITCHES_H

#include "base/switches.h"

/* Fills *out from the TFG_* variables, each read as a decimal integer
 * (strtoll's syntax, nothing after it; anything else counts as unset),
 * every field not set by one left at its default (zero). nvrtc_cache
 * points at a copy owned by this module, kept for the process. */
void cli_switches_from_env(tfg_switches *out);

#endif
