/* tests/unit/test_collective.c: the ring all-reduce (runtime/collective.c)
 * over host backends, and the backend primitive it is built from
 * (reduce_peer of runtime/backend_host.c).
 *
 * Every all-reduce case checks two things: the values against a
 * reference, and that every rank ends with the same bits (the ring sums
 * each element once, on one rank, then copies it). Values are small
 * integers wherever possible, so a sum over at most 4 ranks is exact in
 * f32 and f64 and the reference is exact too; MEAN with 1, 2 or 4 ranks
 * scales by a power of two and stays exact. MEAN over 3 ranks multiplies
 * the exact sum by the rounded 1/3: the result is within 2 ulps of
 * sum / 3 (one rounding of 1/3, one of the product), which is the
 * tolerance used there. One case uses random reals, where the ring's sum
 * order differs from a sequential sum: there the bound is the textbook
 * (R - 1) * eps * sum |x| of a recursive R-term sum.
 *
 * Layouts: the sizes of the brief (0, 1, 3 (fewer elements than ranks), 1001,
 * sizes not divisible by R), several segments of different sizes (so
 * chunks straddle segments, and some segments are empty), several calls
 * in a row on one communicator (events recorded again every call), with
 * new data written on each rank's stream between calls (which the end of
 * a call must order after its neighbours' last reads), one 64 MiB case,
 * and failures: an unsupported dtype, and a rank whose stream failed
 * before the call, must make every rank's synchronize return an error
 * instead of hanging. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/collective.h"
#include "tests/unit/unit.h"

/* R host backends, one stream each, on devices gpu:0..gpu:R-1. */
typedef struct ranks {
  int R;
  tfg_diag *diag;
  tfg_devices *ds;
  tfg_backend *b[4];
  tfg_stream *s[4];
} ranks;

static void ranks_init(ranks *k, int R) {
  memset(k, 0, sizeof *k);
  k->R = R;
  k->diag = tfg_diag_new();
  ck_assert_int_eq(tfg_devices_parse(k->diag, "host*4:512M", &k->ds), TFG_OK);
  for (int r = 0; r < R; r++) {
    const tfg_device *dev = tfg_devices_gpu(k->ds, r);
    ck_assert_ptr_nonnull(dev);
    k->b[r] = tfg_backend_host_new(dev);
    k->s[r] = k->b[r]->i.stream_create(k->b[r]);
  }
}

static void ranks_free(ranks *k) {
  for (int r = 0; r < k->R; r++) k->b[r]->i.destroy(k->b[r]);
  tfg_devices_free(k->ds);
  tfg_diag_free(k->diag);
}

static void sync_all_ok(ranks *k) {
  for (int r = 0; r < k->R; r++) {
    tfg_strbuf err = {0};
    tfg_status st = k->b[r]->i.synchronize(k->b[r], k->s[r], &err);
    ck_assert_msg(st == TFG_OK, "rank %d: %s", r, err.data ? err.data : "");
    tfg_strbuf_free(&err);
  }
}

/* The integer rank r holds at element j (of the concatenation) in call
 * `call`: in [-32, 31], so a sum of 4 is exact in any float type. */
static double ival(int r, size_t j, int call) {
  return (double)((int64_t)((j * 7 + (size_t)r * 13 + (size_t)call * 5) % 64) - 32);
}

/* One all-reduce of nseg segments (counts) on R ranks, checked against
 * the reference. calls > 1 repeats it on the same communicator, each
 * call's data written to the device buffers on the ranks' streams right
 * after the previous call was queued (no synchronize between calls), and
 * each call's results read back on the streams too. random: reals in
 * [-1, 1) instead of integers (one call only). */
static void check_allreduce(int R, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op, int calls,
                            bool random) {
  ranks k;
  ranks_init(&k, R);
  size_t es = tfg_dtype_size(dt), n = 0;
  for (int j = 0; j < nseg; j++) n += counts[j];
  /* Device segments, and per call and rank the host input and output. */
  void *dev[4 * 8];
  ck_assert_int_le(nseg, 8);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nseg; j++) {
      dev[r * nseg + j] = k.b[r]->i.alloc(k.b[r], counts[j] ? counts[j] * es : 1);
      ck_assert_ptr_nonnull(dev[r * nseg + j]);
    }
  size_t hn = n ? n : 1;
  double *in = malloc((size_t)calls * (size_t)R * hn * sizeof *in); /* values as doubles */
  char *hin = malloc((size_t)calls * (size_t)R * hn * es), *hout = malloc((size_t)calls * (size_t)R * hn * es);
  ck_assert(in && hin && hout);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int c = 0; c < calls; c++)
    for (int r = 0; r < R; r++)
      for (size_t j = 0; j < n; j++) {
        size_t at = ((size_t)c * (size_t)R + (size_t)r) * hn + j;
        double v;
        if (random) {
          seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
          v = (double)(seed >> 11) / (double)(1ull << 53) * 2 - 1;
          if (dt == TFG_DTYPE_F32) v = (float)v;
        } else {
          v = ival(r, j, c);
        }
        in[at] = v;
        if (dt == TFG_DTYPE_F32)
          ((float *)hin)[at] = (float)v;
        else
          ((double *)hin)[at] = v;
      }
  tfg_coll *coll = tfg_coll_ring_new(R, k.b, k.s);
  ck_assert_int_eq(coll->nranks, R);
  ck_assert_str_eq(coll->i.name(coll), "ring");
  for (int c = 0; c < calls; c++) {
    for (int r = 0; r < R; r++) {
      size_t at = ((size_t)c * (size_t)R + (size_t)r) * hn * es, o = 0;
      for (int j = 0; j < nseg; j++) {
        k.b[r]->i.copy_from_host(k.b[r], k.s[r], dev[r * nseg + j], hin + at + o * es, counts[j] * es);
        o += counts[j];
      }
    }
    coll->i.allreduce(coll, dev, counts, nseg, dt, op);
    for (int r = 0; r < R; r++) {
      size_t at = ((size_t)c * (size_t)R + (size_t)r) * hn * es, o = 0;
      for (int j = 0; j < nseg; j++) {
        k.b[r]->i.copy_to_host(k.b[r], k.s[r], hout + at + o * es, dev[r * nseg + j], counts[j] * es);
        o += counts[j];
      }
    }
  }
  sync_all_ok(&k);
  for (int c = 0; c < calls; c++) {
    /* Every rank's result has rank 0's bits. */
    const char *r0 = hout + (size_t)c * (size_t)R * hn * es;
    for (int r = 1; r < R; r++)
      ck_assert_msg(memcmp(r0, r0 + (size_t)r * hn * es, n * es) == 0, "R=%d n=%zu call %d: rank %d differs", R, n,
                    c, r);
    for (size_t j = 0; j < n; j++) {
      double sum = 0, abs = 0;
      for (int r = 0; r < R; r++) {
        double v = in[((size_t)c * (size_t)R + (size_t)r) * hn + j];
        sum += v;
        abs += fabs(v);
      }
      double want = op == TFG_COLL_MEAN ? sum / R : sum;
      double got = dt == TFG_DTYPE_F32 ? ((const float *)r0)[j] : ((const double *)r0)[j];
      double eps = dt == TFG_DTYPE_F32 ? FLT_EPSILON : DBL_EPSILON;
      double tol = 0;
      if (random) /* a sum in ring order vs a sequential one (see the top) */
        tol = (R - 1) * eps * abs + (op == TFG_COLL_MEAN ? 2 * eps * fabs(want) : 0);
      else if (op == TFG_COLL_MEAN && R == 3) /* sum exact, then times fl(1/3) */
        tol = 2 * eps * fabs(want);
      /* Not ck_assert per element: Check logs every assertion (to a file),
       * which costs more than the all-reduce on 16M elements. */
      if (!(fabs(got - want) <= tol))
        ck_abort_msg("R=%d n=%zu %s %s call %d: element %zu = %.17g, want %.17g", R, n, tfg_dtype_name(dt),
                     op == TFG_COLL_MEAN ? "mean" : "sum", c, j, got, want);
    }
  }
  coll->i.free(coll);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nseg; j++) k.b[r]->i.free(k.b[r], dev[r * nseg + j]);
  free(in);
  free(hin);
  free(hout);
  ranks_free(&k);
}

/* ---- reduce_peer: the primitive ------------------------------------------------- */

START_TEST(reduce_peer_values) {
  ranks k;
  ranks_init(&k, 2);
  tfg_backend *a = k.b[0], *b = k.b[1];
  float fd[5] = {1, 2, 3, 4, 5}, fs[5] = {10, 20, 30, 40, 50};
  double dd[3] = {0.1, 0.2, 0.3}, ds[3] = {0.7, 0.8, 0.9};
  a->i.reduce_peer(a, k.s[0], fd, b, fs, 5, TFG_DTYPE_F32, 1.0);
  a->i.reduce_peer(a, k.s[0], fd, b, fs, 2, TFG_DTYPE_F32, 0.5); /* a prefix only */
  a->i.reduce_peer(a, k.s[0], dd, b, ds, 3, TFG_DTYPE_F64, 1.0);
  a->i.reduce_peer(a, k.s[0], dd, b, ds, 0, TFG_DTYPE_F64, 3.0); /* nothing */
  sync_all_ok(&k);
  float fw[5] = {(11 + 10) * 0.5f, (22 + 20) * 0.5f, 33, 44, 55};
  for (int i = 0; i < 5; i++) ck_assert_float_eq(fd[i], fw[i]);
  /* scale 1 is exact: no multiply by a rounded 1 anywhere. */
  ck_assert(dd[0] == 0.1 + 0.7 && dd[1] == 0.2 + 0.8 && dd[2] == 0.3 + 0.9);
  /* dst == src is allowed (doubling), in both precisions. */
  double twice[4] = {1.5, -2, 3, 0.25};
  a->i.reduce_peer(a, k.s[0], twice, a, twice, 4, TFG_DTYPE_F64, 0.25);
  float ftwice[3] = {8, 16, -4};
  a->i.reduce_peer(a, k.s[0], ftwice, a, ftwice, 3, TFG_DTYPE_F32, 1.0);
  sync_all_ok(&k);
  ck_assert(twice[0] == 0.75 && twice[1] == -1 && twice[2] == 1.5 && twice[3] == 0.125);
  ck_assert(ftwice[0] == 16 && ftwice[1] == 32 && ftwice[2] == -8);
  /* A large count (the vectorized loop and its remainder). */
  enum { N = 100003 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  for (int i = 0; i < N; i++) x[i] = (float)(i % 1000), y[i] = (float)(i % 7);
  a->i.reduce_peer(a, k.s[0], x, b, y, N, TFG_DTYPE_F32, 1.0);
  sync_all_ok(&k);
  for (int i = 0; i < N; i++)
    if (x[i] != (float)(i % 1000 + i % 7)) ck_abort_msg("element %d = %g", i, (double)x[i]);
  free(x);
  free(y);
  ranks_free(&k);
}
END_TEST

START_TEST(reduce_peer_unsupported_dtype) {
  ranks k;
  ranks_init(&k, 2);
  tfg_backend *a = k.b[0];
  int32_t d[2] = {1, 2}, s[2] = {3, 4};
  unsigned char from[8] = {1, 2, 3, 4, 5, 6, 7, 8}, to[8] = {0};
  a->i.reduce_peer(a, k.s[0], d, k.b[1], s, 2, TFG_DTYPE_I32, 1.0);
  a->i.copy_from_host(a, k.s[0], to, from, sizeof to); /* skipped: the stream failed */
  tfg_strbuf err = {0};
  ck_assert_int_eq(a->i.synchronize(a, k.s[0], &err), TFG_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(err.data, "i32"));
  ck_assert_ptr_nonnull(strstr(err.data, "reduce_peer"));
  ck_assert_int_eq(d[0], 1);
  ck_assert_int_eq(to[0], 0);
  tfg_strbuf_free(&err);
  ranks_free(&k);
}
END_TEST

START_TEST(kernel_is_the_cpu_kernel) {
  ranks k;
  ranks_init(&k, 1);
  tfg_node node = {0};
  for (int op = 0; op < TFG_OP_COUNT; op++) {
    node.op = (tfg_op_id)op;
    ck_assert_msg(k.b[0]->i.kernel(k.b[0], &node) == tfg_op_get(node.op)->cpu, "op %s", tfg_op_get(node.op)->name);
  }
  node.op = TFG_OP_MATMUL;
  ck_assert_ptr_nonnull(k.b[0]->i.kernel(k.b[0], &node));
  ranks_free(&k);
}
END_TEST

/* ---- all-reduce ------------------------------------------------------------------- */

/* Every R, single segments of the brief's sizes, both dtypes and ops. */
START_TEST(ring_sizes) {
  static const size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 1001, 1002, 4099};
  for (int R = 1; R <= 4; R++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      for (int dt = 0; dt < 2; dt++)
        for (int op = 0; op < 2; op++)
          check_allreduce(R, &sizes[i], 1, dt ? TFG_DTYPE_F64 : TFG_DTYPE_F32, op ? TFG_COLL_MEAN : TFG_COLL_SUM,
                          1, false);
}
END_TEST

/* Chunks that straddle segments, empty segments anywhere, segments
 * smaller than a chunk and larger than the whole of one. */
START_TEST(ring_segments) {
  static const size_t a[] = {1000, 1, 2501}, b[] = {0, 3, 0}, c[] = {5, 0, 0, 7, 1, 0},
                      d[] = {1, 1, 1, 1, 1, 1, 1, 1}, e[] = {0, 0}, f[] = {333, 334};
  struct {
    const size_t *counts;
    int nseg;
  } cases[] = {{a, 3}, {b, 3}, {c, 6}, {d, 8}, {e, 2}, {f, 2}, {NULL, 0}};
  for (int R = 1; R <= 4; R++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      for (int dt = 0; dt < 2; dt++)
        for (int op = 0; op < 2; op++)
          check_allreduce(R, cases[i].counts, cases[i].nseg, dt ? TFG_DTYPE_F64 : TFG_DTYPE_F32,
                          op ? TFG_COLL_MEAN : TFG_COLL_SUM, 1, false);
}
END_TEST

/* One communicator, several calls queued back to back with new data
 * written between them: the events are recorded again each call, and a
 * rank's next write must not land while its successor still reads the
 * previous call's chunks. */
START_TEST(ring_repeated_calls) {
  static const size_t one[] = {1001}, three[] = {400, 17, 999};
  for (int R = 2; R <= 4; R++) {
    check_allreduce(R, one, 1, TFG_DTYPE_F32, TFG_COLL_MEAN, 6, false);
    check_allreduce(R, three, 3, TFG_DTYPE_F64, TFG_COLL_SUM, 6, false);
    check_allreduce(R, three, 3, TFG_DTYPE_F32, TFG_COLL_SUM, 6, false);
  }
}
END_TEST

/* Reals, where the reference needs a tolerance (see the top). */
START_TEST(ring_random_values) {
  static const size_t three[] = {4097, 10, 3001};
  for (int R = 2; R <= 4; R++)
    for (int dt = 0; dt < 2; dt++)
      for (int op = 0; op < 2; op++)
        check_allreduce(R, three, 3, dt ? TFG_DTYPE_F64 : TFG_DTYPE_F32, op ? TFG_COLL_MEAN : TFG_COLL_SUM, 1, true);
}
END_TEST

/* 64 MiB of f32 per rank on 4 ranks, in 3 segments, two calls. */
START_TEST(ring_64mib) {
  static const size_t counts[] = {(size_t)8 << 20, 12345, ((size_t)8 << 20) - 12345};
  check_allreduce(4, counts, 3, TFG_DTYPE_F32, TFG_COLL_MEAN, 2, false);
}
END_TEST

/* ---- failures ---------------------------------------------------------------------- */

/* Synchronizes every rank, expecting the failure st with a message that
 * contains want. */
static void sync_all_fail(ranks *k, tfg_status st, const char *want) {
  for (int r = 0; r < k->R; r++) {
    tfg_strbuf err = {0};
    ck_assert_int_eq(k->b[r]->i.synchronize(k->b[r], k->s[r], &err), st);
    ck_assert_msg(err.data && strstr(err.data, want), "rank %d: '%s'", r, err.data ? err.data : "");
    tfg_strbuf_free(&err);
  }
}

/* An all-reduce of a dtype the backend cannot add: every rank fails. */
START_TEST(ring_unsupported_dtype_fails_every_rank) {
  for (int R = 2; R <= 4; R++) {
    ranks k;
    ranks_init(&k, R);
    int32_t buf[4][10] = {{0}};
    void *bufs[4] = {buf[0], buf[1], buf[2], buf[3]};
    size_t count = 10;
    tfg_coll *c = tfg_coll_ring_new(R, k.b, k.s);
    c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_I32, TFG_COLL_SUM);
    sync_all_fail(&k, TFG_ERR_DEVICE, "i32");
    c->i.free(c);
    ranks_free(&k);
  }
}
END_TEST

/* One rank's stream fails before the call (a reduce_peer of i32 queued
 * on it); the other ranks' steps are released by its failed records and
 * fail in turn around the ring: every synchronize reports the first
 * failure, none hangs. A later call on the same communicator fails the
 * same way (the failure is sticky), again without hanging. */
START_TEST(ring_failure_on_one_rank_reaches_all) {
  for (int R = 2; R <= 4; R++)
    for (int bad = 0; bad < R; bad++) {
      ranks k;
      ranks_init(&k, R);
      float buf[4][33];
      for (int r = 0; r < 4; r++)
        for (int j = 0; j < 33; j++) buf[r][j] = (float)j;
      void *bufs[4] = {buf[0], buf[1], buf[2], buf[3]};
      size_t count = 33;
      int32_t x[1] = {0};
      tfg_coll *c = tfg_coll_ring_new(R, k.b, k.s);
      k.b[bad]->i.reduce_peer(k.b[bad], k.s[bad], x, k.b[bad], x, 1, TFG_DTYPE_I32, 1.0);
      c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
      c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
      sync_all_fail(&k, TFG_ERR_DEVICE, "i32");
      c->i.free(c);
      ranks_free(&k);
    }
}
END_TEST

/* A communicator freed right after queueing (its events outlive it while
 * queued work holds them), and one rank: a no-op. */
START_TEST(ring_free_while_queued_and_one_rank) {
  ranks k;
  ranks_init(&k, 3);
  float buf[3][1000];
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 1000; j++) buf[r][j] = (float)(r + j);
  void *bufs[3] = {buf[0], buf[1], buf[2]};
  size_t count = 1000;
  tfg_coll *c = tfg_coll_ring_new(3, k.b, k.s);
  c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_SUM);
  c->i.free(c);
  sync_all_ok(&k);
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 1000; j++)
      if (buf[r][j] != (float)(3 + 3 * j)) ck_abort_msg("rank %d element %d = %g", r, j, (double)buf[r][j]);
  tfg_coll *one = tfg_coll_ring_new(1, k.b, k.s);
  one->i.allreduce(one, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
  sync_all_ok(&k);
  ck_assert_float_eq(buf[0][5], 18.0f);
  one->i.free(one);
  ranks_free(&k);
}
END_TEST

Suite *suite_collective(void) {
  Suite *s = suite_create("collective");
  TCase *prim = tcase_create("reduce_peer");
  tcase_add_test(prim, reduce_peer_values);
  tcase_add_test(prim, reduce_peer_unsupported_dtype);
  tcase_add_test(prim, kernel_is_the_cpu_kernel);
  suite_add_tcase(s, prim);
  TCase *ring = tcase_create("ring");
  tcase_set_timeout(ring, 300); /* the 64 MiB case under ASan on 2 cores */
  tcase_add_test(ring, ring_sizes);
  tcase_add_test(ring, ring_segments);
  tcase_add_test(ring, ring_repeated_calls);
  tcase_add_test(ring, ring_random_values);
  tcase_add_test(ring, ring_64mib);
  tcase_add_test(ring, ring_unsupported_dtype_fails_every_rank);
  tcase_add_test(ring, ring_failure_on_one_rank_reaches_all);
  tcase_add_test(ring, ring_free_while_queued_and_one_rank);
  suite_add_tcase(s, ring);
  return s;
}
