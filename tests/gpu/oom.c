/* tests/gpu/oom.c: an out-of-memory that the runtime, not the planner,
 * finds on a GPU, and the message it gives (run by tests/gpu/run.sh).
 *
 *   build/tests/gpu/oom                   # cuda:0
 *   build/tests/gpu/oom --devices host    # the same on a host device (a self-test)
 *
 * From the command line every OOM is the planner's: a device's capacity
 * is what its GPU had free when --devices was parsed (runtime/device.c),
 * and the plan is checked against it. The runtime meets an OOM when the
 * GPU has less than that by the time the executor allocates, because
 * something else took memory after the probe (another process, another
 * job of the machine). This program makes that happen deterministically:
 * it plans a program (a 256 MiB param and a 256 MiB result) for the
 * device capped at 1 GiB, then lowers the device's capacity to 64 MiB
 * (tfg_devices_limit, what the memory left would be) and opens a session
 * on that plan. The executor's allocation of the plan's arena must fail,
 * and its report must name the device and both sizes:
 *   "out of memory on gpu:0: its plan needs 512.0 MiB (...) and the device has 64.0 MiB..."
 * (runtime/exec.c; the plan's exact peak is the planner's business, so
 * only "its plan needs" and the device's 64.0 MiB are required). Prints one PASS or FAIL line (exit 0 or 1), or
 * "SKIP: no CUDA device (REASON)" and exit 0 when there is no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/diag.h"
#include "base/strbuf.h"
#include "compiler/compile.h"
#include "lang/interp.h"
#include "lang/parse.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/session.h"
#include "tests/gpu/gpu_test.h"

static const char program[] = "param w: f32[8192, 8192] = zeros()\n"
                              "y = w * 2.0\n";

int main(int argc, char **argv) {
  tfg_switches sw = gpu_test_switches();
  const char *kind = "cuda:0";
  if (argc == 3 && !strcmp(argv[1], "--devices")) kind = argv[2];
  else if (argc != 1) {
    fprintf(stderr, "usage: oom [--devices cuda:K|host]\n");
    return 2;
  }
  char spec[64];
  snprintf(spec, sizeof spec, "%s:1G", kind);
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  const tfg_device *gpu = NULL;
  tfg_backend *probe = NULL;
  /* Whether the device can run at all: else this is not the test's case. */
  int opened = gpu_test_open(d, spec, "oom", &sw, &ds, &gpu, &probe);
  if (opened != GPU_TEST_OPEN) return opened == GPU_TEST_SKIP ? 0 : 2;
  tfg_backend_destroy(probe);
  tfg_strbuf msg = {0};

  tfg_arena arena;
  tfg_arena_init(&arena);
  const tfg_source *src = tfg_diag_add_source(d, "oom.tfg", program, sizeof program - 1);
  tfg_ast *ast = NULL;
  tfg_interp *interp = tfg_interp_new(d, NULL);
  tfg_compiled c = {0};
  if (tfg_parse(src, d, &arena, &ast, NULL) != TFG_OK || tfg_interp_eval(interp, src, ast) != TFG_OK ||
      tfg_compile_graph(tfg_interp_program(interp)->graph, ds, NULL, 0, &(tfg_compile_opts){.fit = true}, d, &c) !=
          TFG_OK) {
    diag_text(d, &msg);
    printf("FAIL oom: the program does not plan on %s: %s\n", spec, msg.data ? msg.data : "");
    return 1;
  }
  /* The GPU's free memory shrinks to 64 MiB after planning. */
  tfg_devices_limit(ds, (int64_t)64 << 20);
  tfg_session_opts so = {.plan = c.plan, .sw = sw};
  tfg_session *s = tfg_session_new(tfg_interp_program(interp), d, &so);
  diag_text(d, &msg);
  const char *text = msg.data ? msg.data : "";
  char want[64];
  snprintf(want, sizeof want, "out of memory on %s", gpu->name);
  bool ok = !s && strstr(text, want) && strstr(text, "its plan needs") && strstr(text, "64.0 MiB");
  if (ok)
    printf("PASS oom: the runtime's report: %s\n", text);
  else if (s)
    printf("FAIL oom: a 512 MiB plan ran on %s capped at 64 MiB (no out-of-memory)\n", gpu->name);
  else
    printf("FAIL oom: the report does not name %s, the plan's need and the device's 64.0 MiB: %s\n", gpu->name,
           text);
  tfg_session_free(s);
  tfg_compiled_free(&c);
  tfg_interp_free(interp);
  tfg_arena_free(&arena);
  tfg_devices_free(ds);
  tfg_strbuf_free(&msg);
  tfg_diag_free(d);
  return ok ? 0 : 1;
}
