/* tests/gpu/gpu_test.h: what the GPU test programs (each tests/gpu/NAME.c its
 * own program) share: opening the device under test, with the one
 * SKIP line tests/gpu/run.sh looks for when there is none, and
 * diagnostics as one line of text.
 *
 *   tfg_devices *ds; const tfg_device *dev; tfg_backend *b;
 *   tfg_switches sw = gpu_test_switches();
 *   int r = gpu_test_open(d, "cuda:0", "conformance", &sw, &ds, &dev, &b);
 *   if (r != GPU_TEST_OPEN) return r == GPU_TEST_SKIP ? 0 : 2;
 *
 * Header-only (static functions): the Makefile builds each tests/gpu/NAME.c
 * alone against libtfg and cli/switches.o. */
#ifndef TFG_TESTS_GPU_TEST_H
#define TFG_TESTS_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "base/diag.h"
#include "base/strbuf.h"
#include "base/switches.h"
#include "cli/switches.h"
#include "kernels/cpu/config.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/registry.h"

/* d's diagnostics rendered without colour, on one line (newlines become
 * spaces), appended to *out. */
static void diag_text(tfg_diag *d, tfg_strbuf *out) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  tfg_diag_render(d, f, false);
  fclose(f);
  for (size_t i = 0; i < len; i++)
    if (text[i] == '\n') text[i] = ' ';
  tfg_strbuf_puts(out, text);
  free(text);
}

enum { GPU_TEST_SKIP, GPU_TEST_OPEN, GPU_TEST_USAGE };

/* The TFG_* switches, as `tfg run` reads them (cli/switches.h; a test run
 * with TFG_NVRTC=1 checks the generated kernels), the CPU kernels'
 * process-wide part set (kernels/cpu/config.h): first thing in main. */
static tfg_switches gpu_test_switches(void) {
  tfg_switches sw;
  cli_switches_from_env(&sw);
  tfg_cpu_config_set(&sw);
  return sw;
}

/* Opens the first GPU entry of the --devices spec `spec` (*ds, *dev) and
 * a backend on it with the switches sw and otherwise default options (*b). GPU_TEST_OPEN when both
 * open. GPU_TEST_SKIP when there is no GPU: the spec does not parse (no
 * driver, no device, a build without CUDA) or no backend opens on the
 * device; then the one line "SKIP: no CUDA device (REASON)" is printed
 * and what was made freed (d stays the caller's). GPU_TEST_USAGE when
 * the spec has no GPU entry (a message naming `prog` on stderr; *ds is
 * the caller's to free). */
static int gpu_test_open(tfg_diag *d, const char *spec, const char *prog, const tfg_switches *sw, tfg_devices **ds,
                         const tfg_device **dev, tfg_backend **b) {
  tfg_strbuf why = {0};
  *ds = NULL;
  *dev = NULL;
  *b = NULL;
  if (tfg_devices_parse(d, spec, ds) != TFG_OK) {
    diag_text(d, &why);
    printf("SKIP: no CUDA device (%s)\n", why.data ? why.data : spec);
    tfg_strbuf_free(&why);
    return GPU_TEST_SKIP;
  }
  *dev = tfg_devices_gpu(*ds, 0);
  if (!*dev) {
    fprintf(stderr, "%s: %s names no GPU entry\n", prog, spec);
    return GPU_TEST_USAGE;
  }
  *b = tfg_backend_new(*dev, &(tfg_backend_opts){.sw = *sw}, &why);
  if (!*b) {
    printf("SKIP: no CUDA device (%s)\n", why.data && why.len ? why.data : "no backend for the device");
    tfg_strbuf_free(&why);
    tfg_devices_free(*ds);
    *ds = NULL;
    *dev = NULL;
    return GPU_TEST_SKIP;
  }
  tfg_strbuf_free(&why);
  return GPU_TEST_OPEN;
}

#endif
