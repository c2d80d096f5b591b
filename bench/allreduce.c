/* bench/allreduce.c: the built-in all-reduces (runtime/collective.c), the
 * ring and the shared one, over host devices, against a plain memcpy of
 * the same bytes.
 *
 * For 2 and 4 host devices and buffers of 1, 16 and 64 MiB of f32 per
 * rank, times one MEAN all-reduce (queued on every rank's stream, then
 * every stream synchronized) and prints the median of RUNS runs after
 * WARMUP, with the two bandwidths nccl-tests reports: algbw = bytes /
 * time, and busbw = algbw * 2(R-1)/R, the traffic each rank's link
 * carries in a ring (its 2(R-1) steps each move 1/R of the buffer), which
 * is comparable across rank counts. Beside it, the median time of one
 * memcpy of the same bytes between two buffers of this process, and the
 * ratio all-reduce / memcpy. On host devices every step is a memcpy or an
 * add on a device's worker thread, so busbw is bounded by the machine's
 * memory bandwidth divided among the ranks' workers that run at once
 * (one per core at most). A benchmark, not a test: it checks only that
 * every rank ends with the same bytes.
 *
 *   make build/bench/allreduce && build/bench/allreduce
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/device.h"

#define WARMUP 2
#define RUNS 9
#define MAXR 4

/* The median time of one memcpy of bytes, between buffers touched first
 * (so page faults are not timed). */
static double time_memcpy(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    fprintf(stderr, "allreduce: out of memory\n");
    exit(1);
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double t[RUNS];
  for (int i = 0; i < WARMUP; i++) memcpy(b, a, bytes);
  for (int i = 0; i < RUNS; i++) {
    a[i] = (char)i; /* so no two copies are the same work the compiler could drop */
    double t0 = bench_now();
    memcpy(b, a, bytes);
    t[i] = bench_now() - t0;
    if (b[i] != (char)i) exit(1);
  }
  free(a);
  free(b);
  return bench_median(t, RUNS);
}

/* One case: R ranks, bytes per rank, the ring or the shared all-reduce.
 * Returns 0 or 1 on a failure. */
static int run_case(const tfg_devices *ds, int R, size_t bytes, bool shared) {
  tfg_backend *b[MAXR];
  tfg_stream *s[MAXR];
  void *buf[MAXR];
  size_t count = bytes / sizeof(float);
  float *init = malloc(bytes);
  if (!init) return 1;
  for (int r = 0; r < R; r++) {
    b[r] = tfg_backend_host_new(tfg_devices_gpu(ds, r));
    s[r] = tfg_backend_stream_create(b[r]);
    buf[r] = tfg_backend_alloc(b[r], bytes);
    if (!buf[r]) {
      fprintf(stderr, "allreduce: device %d cannot hold %zu bytes\n", r, bytes);
      return 1;
    }
    for (size_t j = 0; j < count; j++) init[j] = (float)((j + (size_t)r * 3) % 17);
    tfg_backend_copy_from_host(b[r], s[r], buf[r], init, bytes);
    tfg_backend_synchronize(b[r], s[r], NULL); /* init is reused for the next rank */
  }
  tfg_strbuf why = {0};
  tfg_coll *c = shared ? tfg_coll_shared_new(R, b, s, &why) : tfg_coll_ring_new(R, b, s);
  if (!c) {
    fprintf(stderr, "allreduce: %s\n", why.data);
    return 1;
  }
  tfg_strbuf_free(&why);
  double t[RUNS];
  int failed = 0;
  for (int i = 0; i < WARMUP + RUNS && !failed; i++) {
    double t0 = bench_now();
    c->i.allreduce(c, buf, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
    for (int r = 0; r < R; r++) {
      tfg_strbuf err = {0};
      if (tfg_backend_synchronize(b[r], s[r], &err) != TFG_OK) {
        fprintf(stderr, "allreduce: rank %d: %s\n", r, err.data);
        failed = 1;
      }
      tfg_strbuf_free(&err);
    }
    if (i >= WARMUP) t[i - WARMUP] = bench_now() - t0;
  }
  for (int r = 1; r < R && !failed; r++)
    if (memcmp(buf[0], buf[r], bytes) != 0) {
      fprintf(stderr, "allreduce: rank %d differs from rank 0\n", r);
      failed = 1;
    }
  c->i.free(c);
  for (int r = 0; r < R; r++) {
    tfg_backend_free(b[r], buf[r]);
    tfg_backend_destroy(b[r]);
  }
  free(init);
  if (failed) return 1;

  double tm = bench_median(t, RUNS), tc = time_memcpy(bytes);
  double algbw = (double)bytes / tm / 1e9, busbw = algbw * 2.0 * (R - 1) / R;
  printf("  %6s  %5d  %6zu MiB  %9.3f  %8.2f  %8.2f  %9.3f  %8.2f  %8.2f\n", shared ? "shared" : "ring", R,
         bytes >> 20, tm * 1e3, algbw, busbw, tc * 1e3, (double)bytes / tc / 1e9, tm / tc);
  fflush(stdout);
  return 0;
}

int main(void) {
  bench_switches(); /* TFG_* as `tfg run` reads them (TFG_GEMM_SPLIT, TFG_VMATH) */
  static const size_t sizes[] = {(size_t)1 << 20, (size_t)16 << 20, (size_t)64 << 20};
  static const int ranks[] = {2, 4};
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds = NULL;
  if (tfg_devices_parse(d, "host*4:1G", &ds) != TFG_OK) {
    tfg_diag_render(d, stderr, false);
    return 1;
  }
  printf("allreduce: ring and shared over host devices, MEAN of f32, median of %d runs after %d warm-ups\n", RUNS,
         WARMUP);
  printf("  %6s  %5s  %10s  %9s  %8s  %8s  %9s  %8s  %8s\n", "algo", "ranks", "per rank", "time ms", "algbw", "busbw",
         "memcpy ms", "memcpy", "ratio");
  printf("  %6s  %5s  %10s  %9s  %8s  %8s  %9s  %8s  %8s\n", "", "", "", "", "GB/s", "GB/s", "", "GB/s", "x memcpy");
  int failed = 0;
  for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++)
    for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
      for (int sh = 0; sh < 2; sh++) failed |= run_case(ds, ranks[i], sizes[j], sh);
  tfg_devices_free(ds);
  tfg_diag_free(d);
  return failed;
}
