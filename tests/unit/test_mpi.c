/* tests/unit/test_mpi.c: runtime/mpi.h. The first difference of two
 * schedules is a pure function, checked always. The job's collectives
 * (the broadcast that carries NCCL's unique id to every rank, the
 * schedule check, the mean of logged values) need ranks: these cases run
 * their checks when mpirun started the suite (tests/mpi.sh runs it so,
 * `CK_FORK=no CK_RUN_SUITE=mpi mpirun -np 2 build/unit`: MPI must not be
 * started in a forked child) and pass alone otherwise, saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/mpi.h"
#include "tests/unit/unit.h"

static void diff_case(const char *a, const char *b, int line, const char *la, const char *lb) {
  tfg_strbuf x = {0}, y = {0};
  ck_assert_int_eq(tfg_mpi_first_difference(a, b, &x, &y), line);
  if (line > 0) {
    ck_assert_str_eq(x.data ? x.data : "", la);
    ck_assert_str_eq(y.data ? y.data : "", lb);
  }
  tfg_strbuf_free(&x);
  tfg_strbuf_free(&y);
}

START_TEST(first_difference) {
  diff_case("a\nb\n", "a\nb\n", 0, NULL, NULL);
  diff_case("a\nb\nc\n", "a\nB\nc\n", 2, "b", "B");
  diff_case("--set w=8\n", "--set w=9\n", 1, "--set w=8", "--set w=9");
  diff_case("a\n", "a\nmore\n", 2, "", "more"); /* one a prefix of the other */
  diff_case("", "x", 1, "", "x");
}
END_TEST

/* Whether this process is a rank of a job: starts it once. */
static bool in_job(void) {
  if (!tfg_mpi_launched()) return false;
  static bool started;
  if (!started) {
    tfg_strbuf why = {0};
    ck_assert_msg(tfg_mpi_start(&why) == TFG_OK, "%s", why.data);
    tfg_strbuf_free(&why);
    atexit(tfg_mpi_stop); /* a rank must leave the job before it exits */
    started = true;
  }
  return tfg_mpi_size() > 1;
}

START_TEST(job_collectives) {
  if (!in_job()) {
    printf("mpi: not started by mpirun: the job's collectives are checked by tests/mpi.sh\n");
    return;
  }
  int rank = tfg_mpi_rank(), size = tfg_mpi_size();
  ck_assert(rank >= 0 && rank < size);
  /* the 128 bytes of an NCCL unique id, from rank 0 to all */
  unsigned char id[128];
  for (int i = 0; i < 128; i++) id[i] = (unsigned char)(rank == 0 ? 255 - i : 0);
  ck_assert(tfg_mpi_bcast(id, sizeof id, true));
  for (int i = 0; i < 128; i++) ck_assert_int_eq(id[i], 255 - i);
  /* rank 0 that could not make it: every rank hears so */
  ck_assert(!tfg_mpi_bcast(id, sizeof id, rank != 0));
  /* the schedule check: the same text passes, a rank's own text does not */
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_mpi_same("schedule", "a\nb\n", &err), TFG_OK);
  char mine[32];
  snprintf(mine, sizeof mine, "a\nrank %d\n", rank);
  ck_assert_int_eq(tfg_mpi_same("schedule", mine, &err), TFG_ERR_USAGE);
  ck_assert(strstr(err.data, "the ranks do not build the same schedule") != NULL);
  if (rank > 0) ck_assert(strstr(err.data, "line 2 of it is") != NULL);
  tfg_strbuf_free(&err);
  /* the mean of logged values: each rank's weighs alike */
  double v[2] = {(double)rank, 1.0};
  tfg_mpi_mean(v, 2);
  ck_assert(v[0] == (size - 1) / 2.0 && v[1] == 1.0);
}
END_TEST

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double stamped; /* when stamp ran */

static tfg_status stamp(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)ctx, (void)node, (void)in, (void)out;
  stamped = now_s();
  return TFG_OK;
}

/* The all-reduce across the processes leaves the device's worker free:
 * rank 1 joins it 300 ms late, so rank 0's waits that long, and a kernel
 * queued on another stream of the same host device runs meanwhile (a
 * blocking MPI_Allreduce on the worker would hold it until the sum is
 * done). The sum is right on every rank. */
START_TEST(job_allreduce_overlaps) {
  if (!in_job()) {
    printf("mpi: not started by mpirun: the all-reduce across processes is checked by tests/mpi.sh\n");
    return;
  }
  int rank = tfg_mpi_rank(), size = tfg_mpi_size();
  tfg_device dev = {.index = 1, .kind = TFG_DEVICE_HOST, .name = "gpu:0", .memory = (int64_t)1 << 20};
  tfg_backend *b = tfg_backend_host_new(&dev);
  ck_assert(b != NULL);
  tfg_stream *sa = tfg_backend_stream_create(b), *sb = tfg_backend_stream_create(b);
  tfg_strbuf why = {0};
  tfg_coll *c = tfg_mpi_job_coll_new(1, &b, &sa, &why);
  ck_assert_msg(c != NULL, "%s", why.data);
  float x[4];
  for (int i = 0; i < 4; i++) x[i] = (float)(rank + 1) * (float)(i + 1);
  void *bufs[1] = {x};
  size_t counts[1] = {4};
  if (rank == 1) nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
  stamped = 0;
  c->i.allreduce(c, bufs, counts, 1, TFG_DTYPE_F32, TFG_COLL_SUM);
  tfg_kernel_ctx ctx = {.node = -1};
  tfg_node node;
  memset(&node, 0, sizeof node);
  tfg_tensor out;
  memset(&out, 0, sizeof out);
  tfg_backend_launch(b, sb, stamp, &ctx, &node, NULL, &out);
  ck_assert_int_eq(tfg_backend_synchronize(b, sb, NULL), TFG_OK);
  ck_assert_int_eq(tfg_backend_synchronize(b, sa, NULL), TFG_OK);
  double done = now_s();
  float ranks_sum = (float)size * (float)(size + 1) / 2;
  for (int i = 0; i < 4; i++) ck_assert(x[i] == ranks_sum * (float)(i + 1));
  if (rank == 0)
    ck_assert_msg(stamped > 0 && stamped < done - 0.2, "the other stream's kernel ran %.3f s before the sum was done",
                  done - stamped);
  c->i.free(c);
  tfg_backend_stream_free(b, sa);
  tfg_backend_stream_free(b, sb);
  tfg_backend_destroy(b);
  tfg_strbuf_free(&why);
}
END_TEST

/* ZeRO's pair across the job: 2 host ranks in each process (global rank
 * P * 2 + r), one segment of 4 pieces a global rank. The reduce-scatter
 * leaves global rank g's piece g the sum over every rank (exact:
 * integers); the all-gather of pieces each rank wrote gives every rank
 * every piece. */
START_TEST(job_reduce_scatter_and_all_gather) {
  if (!in_job()) {
    printf("mpi: not started by mpirun: the reduce-scatter and all-gather across processes are checked by tests/mpi.sh\n");
    return;
  }
  int P = tfg_mpi_rank(), NP = tfg_mpi_size(), G = 2 * NP;
  tfg_device dev[2] = {{.index = 1, .kind = TFG_DEVICE_HOST, .name = "gpu:0", .memory = (int64_t)1 << 20},
                       {.index = 2, .kind = TFG_DEVICE_HOST, .name = "gpu:1", .memory = (int64_t)1 << 20}};
  tfg_backend *b[2];
  tfg_stream *s[2];
  for (int r = 0; r < 2; r++) {
    b[r] = tfg_backend_host_new(&dev[r]);
    s[r] = tfg_backend_stream_create(b[r]);
  }
  tfg_strbuf why = {0};
  tfg_coll *c = tfg_mpi_job_coll_new(2, b, s, &why);
  ck_assert_msg(c != NULL, "%s", why.data);
  enum { PER = 4 };
  float x[2][8 * PER]; /* up to 8 global ranks */
  ck_assert_int_le(G, 8);
  size_t count = (size_t)G * PER;
  void *bufs[2] = {x[0], x[1]};
  for (int phase = 0; phase < 2; phase++) {
    for (int r = 0; r < 2; r++) {
      int g = P * 2 + r;
      for (size_t e = 0; e < count; e++)
        x[r][e] = phase == 0 || (int)(e / PER) == g ? (float)(g * 100 + (int)e) : -999.0f;
    }
    if (phase == 0) c->i.reduce_scatter(c, bufs, &count, 1, TFG_DTYPE_F32, 1.0);
    else c->i.all_gather(c, bufs, &count, 1, TFG_DTYPE_F32);
    for (int r = 0; r < 2; r++) ck_assert_int_eq(tfg_backend_synchronize(b[r], s[r], NULL), TFG_OK);
    for (int r = 0; r < 2; r++) {
      int g = P * 2 + r;
      for (size_t e = 0; e < count; e++) {
        int owner = (int)(e / PER);
        if (phase == 0 && owner != g) continue; /* unspecified */
        float want = 0;
        if (phase == 0)
          for (int q = 0; q < G; q++) want += (float)(q * 100 + (int)e);
        else
          want = (float)(owner * 100 + (int)e);
        ck_assert_msg(x[r][e] == want, "%s: global rank %d element %zu = %g, want %g",
                      phase ? "all-gather" : "reduce-scatter", g, e, (double)x[r][e], (double)want);
      }
    }
  }
  c->i.free(c);
  for (int r = 0; r < 2; r++) {
    tfg_backend_stream_free(b[r], s[r]);
    tfg_backend_destroy(b[r]);
  }
  tfg_strbuf_free(&why);
}
END_TEST

Suite *suite_mpi(void) {
  Suite *s = suite_create("mpi");
  TCase *tc = tcase_create("mpi");
  tcase_add_test(tc, first_difference);
  tcase_add_test(tc, job_collectives);
  tcase_add_test(tc, job_allreduce_overlaps);
  tcase_add_test(tc, job_reduce_scatter_and_all_gather);
  suite_add_tcase(s, tc);
  return s;
}
