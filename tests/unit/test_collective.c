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

#include "kernels/cpu/cpu.h"
#include "runtime/backend.h"
#include "runtime/collective.h"
#include "runtime/device.h"
#include "runtime/registry.h"
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
    k->s[r] = tfg_backend_stream_create(k->b[r]);
  }
}

static void ranks_free(ranks *k) {
  for (int r = 0; r < k->R; r++) tfg_backend_destroy(k->b[r]);
  tfg_devices_free(k->ds);
  tfg_diag_free(k->diag);
}

static void sync_all_ok(ranks *k) {
  for (int r = 0; r < k->R; r++) {
    tfg_strbuf err = {0};
    tfg_status st = tfg_backend_synchronize(k->b[r], k->s[r], &err);
    ck_assert_msg(st == TFG_OK, "rank %d: %s", r, err.data ? err.data : "");
    tfg_strbuf_free(&err);
  }
}

/* The integer rank r holds at element j (of the concatenation) in call
 * `call`: in [-32, 31], so a sum of 4 is exact in any float type. */
static double ival(int r, size_t j, int call) {
  return (double)((int64_t)((j * 7 + (size_t)r * 13 + (size_t)call * 5) % 64) - 32);
}

/* The buffers of one all-reduce case on k's ranks: nseg device segments
 * (counts) per rank, and per call and rank the input values (as
 * doubles), their host copy in dt, and the host copy of the result. */
typedef struct arbufs {
  ranks *k;
  const size_t *counts;
  int nseg, calls;
  tfg_dtype dt;
  size_t es, n, hn; /* element size, elements per rank, n or 1 */
  void *dev[4 * 8];
  double *in;
  char *hin, *hout;
} arbufs;

/* Allocates a's buffers and fills the inputs: ival(r, j, call), or with
 * random reals in [-1, 1) (rounded to f32 for f32) from one stream in
 * call, rank, element order. */
static void arbufs_init(arbufs *a, ranks *k, const size_t *counts, int nseg, tfg_dtype dt, int calls,
                        bool random) {
  int R = k->R;
  *a = (arbufs){.k = k, .counts = counts, .nseg = nseg, .calls = calls, .dt = dt, .es = tfg_dtype_size(dt)};
  for (int j = 0; j < nseg; j++) a->n += counts[j];
  ck_assert_int_le(nseg, 8);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nseg; j++) {
      a->dev[r * nseg + j] = tfg_backend_alloc(k->b[r], counts[j] ? counts[j] * a->es : 1);
      ck_assert_ptr_nonnull(a->dev[r * nseg + j]);
    }
  a->hn = a->n ? a->n : 1;
  size_t per_call = (size_t)R * a->hn;
  a->in = malloc((size_t)calls * per_call * sizeof *a->in);
  a->hin = malloc((size_t)calls * per_call * a->es);
  a->hout = malloc((size_t)calls * per_call * a->es);
  ck_assert(a->in && a->hin && a->hout);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int c = 0; c < calls; c++)
    for (int r = 0; r < R; r++)
      for (size_t j = 0; j < a->n; j++) {
        size_t at = ((size_t)c * (size_t)R + (size_t)r) * a->hn + j;
        double v;
        if (random) {
          seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
          v = (double)(seed >> 11) / (double)(1ull << 53) * 2 - 1;
          if (dt == TFG_DTYPE_F32) v = (float)v;
        } else {
          v = ival(r, j, c);
        }
        a->in[at] = v;
        if (dt == TFG_DTYPE_F32)
          ((float *)a->hin)[at] = (float)v;
        else
          ((double *)a->hin)[at] = v;
      }
}

/* Queues every call on the ranks' streams, without a synchronize between
 * calls: each rank's input copied onto its segments, the all-reduce op
 * on coll, and each rank's segments copied back. */
static void arbufs_run(arbufs *a, tfg_coll *coll, tfg_coll_op op) {
  ranks *k = a->k;
  int nseg = a->nseg;
  size_t es = a->es;
  for (int c = 0; c < a->calls; c++) {
    for (int r = 0; r < k->R; r++) {
      size_t at = ((size_t)c * (size_t)k->R + (size_t)r) * a->hn * es, o = 0;
      for (int j = 0; j < nseg; j++) {
        tfg_backend_copy_from_host(k->b[r], k->s[r], a->dev[r * nseg + j], a->hin + at + o * es, a->counts[j] * es);
        o += a->counts[j];
      }
    }
    coll->i.allreduce(coll, a->dev, a->counts, nseg, a->dt, op);
    for (int r = 0; r < k->R; r++) {
      size_t at = ((size_t)c * (size_t)k->R + (size_t)r) * a->hn * es, o = 0;
      for (int j = 0; j < nseg; j++) {
        tfg_backend_copy_to_host(k->b[r], k->s[r], a->hout + at + o * es, a->dev[r * nseg + j], a->counts[j] * es);
        o += a->counts[j];
      }
    }
  }
}

/* After the ranks synchronized: every call's result on every rank has
 * rank 0's bits, and equals the reference, the sum of the inputs (over R
 * for MEAN), within the tolerance of the top of this file: 0 for
 * integers, 2 eps |want| for a MEAN over 3, and for random reals the
 * recursive-sum bound (R - 1) eps sum |x| (plus 2 eps |want| for MEAN).
 * what names the case in a failure. */
static void arbufs_check(const arbufs *a, tfg_coll_op op, bool random, const char *what) {
  int R = a->k->R;
  size_t n = a->n, hn = a->hn, es = a->es;
  tfg_dtype dt = a->dt;
  for (int c = 0; c < a->calls; c++) {
    /* Every rank's result has rank 0's bits. */
    const char *r0 = a->hout + (size_t)c * (size_t)R * hn * es;
    for (int r = 1; r < R; r++)
      ck_assert_msg(memcmp(r0, r0 + (size_t)r * hn * es, n * es) == 0, "%s n=%zu call %d: rank %d differs", what, n,
                    c, r);
    for (size_t j = 0; j < n; j++) {
      double sum = 0, abs = 0;
      for (int r = 0; r < R; r++) {
        double v = a->in[((size_t)c * (size_t)R + (size_t)r) * hn + j];
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
        ck_abort_msg("%s n=%zu %s %s call %d: element %zu = %.17g, want %.17g", what, n, tfg_dtype_name(dt),
                     op == TFG_COLL_MEAN ? "mean" : "sum", c, j, got, want);
    }
  }
}

static void arbufs_free(arbufs *a) {
  for (int r = 0; r < a->k->R; r++)
    for (int j = 0; j < a->nseg; j++) tfg_backend_free(a->k->b[r], a->dev[r * a->nseg + j]);
  free(a->in);
  free(a->hin);
  free(a->hout);
}

/* One all-reduce of nseg segments (counts) on R ranks, checked against
 * the reference. calls > 1 repeats it on the same communicator, each
 * call's data written to the device buffers on the ranks' streams right
 * after the previous call was queued (no synchronize between calls), and
 * each call's results read back on the streams too. random: reals in
 * [-1, 1) instead of integers (one call only). */
/* The collective a check runs: the ring, or the shared all-reduce. */
typedef tfg_coll *(*coll_ctor)(int R, tfg_backend *const *b, tfg_stream *const *s);

static tfg_coll *shared_new(int R, tfg_backend *const *b, tfg_stream *const *s) {
  tfg_strbuf why = {0};
  tfg_coll *c = tfg_coll_shared_new(R, b, s, &why);
  ck_assert_msg(c != NULL, "%s", why.data ? why.data : "");
  tfg_strbuf_free(&why);
  return c;
}

static void check_allreduce_on(coll_ctor ctor, int R, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op,
                               int calls, bool random) {
  ranks k;
  ranks_init(&k, R);
  arbufs a;
  arbufs_init(&a, &k, counts, nseg, dt, calls, random);
  tfg_coll *coll = ctor(R, k.b, k.s);
  ck_assert_int_eq(coll->nranks, R);
  ck_assert_str_eq(coll->i.name(coll), ctor == shared_new ? "shared" : "ring");
  arbufs_run(&a, coll, op);
  sync_all_ok(&k);
  char what[32];
  snprintf(what, sizeof what, "R=%d", R);
  arbufs_check(&a, op, random, what);
  coll->i.free(coll);
  arbufs_free(&a);
  ranks_free(&k);
}

static void check_allreduce(int R, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op, int calls,
                            bool random) {
  check_allreduce_on(tfg_coll_ring_new, R, counts, nseg, dt, op, calls, random);
  check_allreduce_on(shared_new, R, counts, nseg, dt, op, calls, random);
}

/* ---- reduce_peer: the primitive ------------------------------------------------- */

START_TEST(reduce_peer_values) {
  ranks k;
  ranks_init(&k, 2);
  tfg_backend *a = k.b[0], *b = k.b[1];
  float fd[5] = {1, 2, 3, 4, 5}, fs[5] = {10, 20, 30, 40, 50};
  double dd[3] = {0.1, 0.2, 0.3}, ds[3] = {0.7, 0.8, 0.9};
  tfg_backend_reduce_peer(a, k.s[0], fd, b, fs, 5, TFG_DTYPE_F32, 1.0);
  tfg_backend_reduce_peer(a, k.s[0], fd, b, fs, 2, TFG_DTYPE_F32, 0.5); /* a prefix only */
  tfg_backend_reduce_peer(a, k.s[0], dd, b, ds, 3, TFG_DTYPE_F64, 1.0);
  tfg_backend_reduce_peer(a, k.s[0], dd, b, ds, 0, TFG_DTYPE_F64, 3.0); /* nothing */
  sync_all_ok(&k);
  float fw[5] = {(11 + 10) * 0.5f, (22 + 20) * 0.5f, 33, 44, 55};
  for (int i = 0; i < 5; i++) ck_assert_float_eq(fd[i], fw[i]);
  /* scale 1 is exact: no multiply by a rounded 1 anywhere. */
  ck_assert(dd[0] == 0.1 + 0.7 && dd[1] == 0.2 + 0.8 && dd[2] == 0.3 + 0.9);
  /* dst == src is allowed (doubling), in both precisions. */
  double twice[4] = {1.5, -2, 3, 0.25};
  tfg_backend_reduce_peer(a, k.s[0], twice, a, twice, 4, TFG_DTYPE_F64, 0.25);
  float ftwice[3] = {8, 16, -4};
  tfg_backend_reduce_peer(a, k.s[0], ftwice, a, ftwice, 3, TFG_DTYPE_F32, 1.0);
  sync_all_ok(&k);
  ck_assert(twice[0] == 0.75 && twice[1] == -1 && twice[2] == 1.5 && twice[3] == 0.125);
  ck_assert(ftwice[0] == 16 && ftwice[1] == 32 && ftwice[2] == -8);
  /* A large count (the vectorized loop and its remainder). */
  enum { N = 100003 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  for (int i = 0; i < N; i++) x[i] = (float)(i % 1000), y[i] = (float)(i % 7);
  tfg_backend_reduce_peer(a, k.s[0], x, b, y, N, TFG_DTYPE_F32, 1.0);
  sync_all_ok(&k);
  for (int i = 0; i < N; i++)
    if (x[i] != (float)(i % 1000 + i % 7)) ck_abort_msg("element %d = %g", i, (double)x[i]);
  free(x);
  free(y);
  ranks_free(&k);
}
END_TEST

/* f16 and bf16: widened, added (and scaled) in f32, rounded once to
 * nearest even. Hand-computed: f16 1 + 2^-11 is a tie between 1 and
 * 1 + 2^-10 and rounds to the even 1; 1 + 3 * 2^-11, a tie between
 * 1 + 2^-10 and 1 + 2^-9, to the even
 * 1 + 2^-9. bf16 (8 significant bits): 256 + 1 rounds to the even 256,
 * 256 + 3 to the even 260. 0x3c00 is f16 1.0, 0x1000 f16 2^-11, 0x3f80 bf16 1.0. */
START_TEST(reduce_peer_half) {
  ranks k;
  ranks_init(&k, 2);
  tfg_backend *a = k.b[0], *b = k.b[1];
  uint16_t hd[3] = {0x3c00, 0x3c00, 0x4000 /* 2 */}, hs[3] = {0x1000 /* 2^-11 */, 0x1600 /* 3 * 2^-11 */,
                                                                0x4200 /* 3 */};
  tfg_backend_reduce_peer(a, k.s[0], hd, b, hs, 2, TFG_DTYPE_F16, 1.0);
  tfg_backend_reduce_peer(a, k.s[0], hd + 2, b, hs + 2, 1, TFG_DTYPE_F16, 0.5); /* (2 + 3) / 2 */
  uint16_t bd[2] = {0x4380 /* 256 */, 0x4380}, bs[2] = {0x3f80 /* 1 */, 0x4040 /* 3 */};
  tfg_backend_reduce_peer(a, k.s[0], bd, b, bs, 2, TFG_DTYPE_BF16, 1.0);
  sync_all_ok(&k);
  ck_assert_uint_eq(hd[0], 0x3c00); /* 1 */
  ck_assert_uint_eq(hd[1], 0x3c02); /* 1 + 2^-9 */
  ck_assert_uint_eq(hd[2], 0x4100); /* 2.5 */
  ck_assert_uint_eq(bd[0], 0x4380); /* 256 */
  ck_assert_uint_eq(bd[1], 0x4382); /* 260 */
  ranks_free(&k);
}
END_TEST

START_TEST(reduce_peer_unsupported_dtype) {
  ranks k;
  ranks_init(&k, 2);
  tfg_backend *a = k.b[0];
  int32_t d[2] = {1, 2}, s[2] = {3, 4};
  unsigned char from[8] = {1, 2, 3, 4, 5, 6, 7, 8}, to[8] = {0};
  tfg_backend_reduce_peer(a, k.s[0], d, k.b[1], s, 2, TFG_DTYPE_I32, 1.0);
  tfg_backend_copy_from_host(a, k.s[0], to, from, sizeof to); /* skipped: the stream failed */
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_backend_synchronize(a, k.s[0], &err), TFG_ERR_DEVICE);
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
    ck_assert_msg(tfg_backend_kernel(k.b[0], &node) == tfg_cpu_kernel(op), "op %s", tfg_op_get(node.op)->name);
  }
  node.op = TFG_OP_MATMUL;
  ck_assert_ptr_nonnull(tfg_backend_kernel(k.b[0], &node));
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
    ck_assert_int_eq(tfg_backend_synchronize(k->b[r], k->s[r], &err), st);
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
    for (int sh = 0; sh < 2; sh++) {
      tfg_coll *c = sh ? shared_new(R, k.b, k.s) : tfg_coll_ring_new(R, k.b, k.s);
      c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_I32, TFG_COLL_SUM);
      sync_all_fail(&k, TFG_ERR_DEVICE, "i32");
      c->i.free(c);
    }
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
  for (int v = 0; v < 2 * 3; v++) /* the ring, then the shared one, on 2 to 4 ranks */
    for (int sh = v / 3, R = 2 + v % 3, bad = 0; bad < R; bad++) {
      ranks k;
      ranks_init(&k, R);
      float buf[4][33];
      for (int r = 0; r < 4; r++)
        for (int j = 0; j < 33; j++) buf[r][j] = (float)j;
      void *bufs[4] = {buf[0], buf[1], buf[2], buf[3]};
      size_t count = 33;
      int32_t x[1] = {0};
      tfg_coll *c = sh ? shared_new(R, k.b, k.s) : tfg_coll_ring_new(R, k.b, k.s);
      tfg_backend_reduce_peer(k.b[bad], k.s[bad], x, k.b[bad], x, 1, TFG_DTYPE_I32, 1.0);
      c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
      c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
      sync_all_fail(&k, TFG_ERR_DEVICE, "i32");
      c->i.free(c);
      ranks_free(&k);
    }
}
END_TEST

/* Three ranks' 1000 floats in buf (bufs pointing at them): rank r's
 * element j is r + j. A sum of them queued on c, c freed at once while
 * the work is queued, then every rank must hold 3 + 3j (exact in f32). */
static void sum_three_free_while_queued(ranks *k, tfg_coll *c, float buf[3][1000], void *bufs[3]) {
  for (int r = 0; r < 3; r++) {
    for (int j = 0; j < 1000; j++) buf[r][j] = (float)(r + j);
    bufs[r] = buf[r];
  }
  size_t count = 1000;
  c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_SUM);
  c->i.free(c);
  sync_all_ok(k);
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 1000; j++)
      if (buf[r][j] != (float)(3 + 3 * j)) ck_abort_msg("rank %d element %d = %g", r, j, (double)buf[r][j]);
}

/* A communicator freed right after queueing (its events outlive it while
 * queued work holds them), and one rank: a no-op. */
START_TEST(ring_free_while_queued_and_one_rank) {
  ranks k;
  ranks_init(&k, 3);
  float buf[3][1000];
  void *bufs[3];
  sum_three_free_while_queued(&k, tfg_coll_ring_new(3, k.b, k.s), buf, bufs);
  sum_three_free_while_queued(&k, shared_new(3, k.b, k.s), buf, bufs);
  size_t count = 1000;
  tfg_coll *one = tfg_coll_ring_new(1, k.b, k.s);
  one->i.allreduce(one, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
  sync_all_ok(&k);
  ck_assert_float_eq(buf[0][5], 18.0f);
  one->i.free(one);
  ranks_free(&k);
}
END_TEST

/* ---- the shared all-reduce's own -------------------------------------------------- */

/* Its bits: the sum in rank order, then the scale, in the dtype: with two
 * ranks the ring's bits (a + b is b + a), with more a sequential sum
 * whichever rank computes the chunk; 16-bit values summed in f32 and
 * rounded once. */
START_TEST(shared_bits) {
  enum { N = 1003 };
  for (int R = 2; R <= 4; R++) {
    ranks k;
    ranks_init(&k, R);
    static float in[4][N], sh[4][N], rg[4][N];
    uint64_t seed = 77 + (uint64_t)R;
    for (int r = 0; r < R; r++)
      for (int j = 0; j < N; j++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        in[r][j] = (float)((double)(seed >> 11) / (double)(1ull << 53) * 2 - 1);
        sh[r][j] = rg[r][j] = in[r][j];
      }
    void *bs[4] = {sh[0], sh[1], sh[2], sh[3]}, *br[4] = {rg[0], rg[1], rg[2], rg[3]};
    size_t count = N;
    tfg_coll *c = shared_new(R, k.b, k.s), *ring = tfg_coll_ring_new(R, k.b, k.s);
    c->i.allreduce(c, bs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
    ring->i.allreduce(ring, br, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
    sync_all_ok(&k);
    float scale = (float)(1.0 / R);
    for (int j = 0; j < N; j++) {
      float want = in[0][j];
      for (int r = 1; r < R; r++) want = want + in[r][j];
      want = want * scale;
      for (int r = 0; r < R; r++)
        if (sh[r][j] != want) ck_abort_msg("R=%d rank %d element %d: %.9g, want %.9g", R, r, j, sh[r][j], want);
      if (R == 2 && rg[0][j] != want) ck_abort_msg("R=2 element %d: the ring gave %.9g, shared %.9g", j, rg[0][j], want);
    }
    c->i.free(c);
    ring->i.free(ring);
    ranks_free(&k);
  }
  /* bf16: 1 + 2^-8 + 2^-8 is 1 + 2^-7 in f32, exact in bf16; a pairwise
   * rounding to bf16 would give 1 (1 + 2^-8 rounds to even, 1). */
  ranks k;
  ranks_init(&k, 3);
  uint16_t h[3] = {0x3f80, 0x3b80, 0x3b80}; /* 1, 2^-8, 2^-8 */
  void *hb[3] = {&h[0], &h[1], &h[2]};
  size_t one = 1;
  tfg_coll *c = shared_new(3, k.b, k.s);
  c->i.allreduce(c, hb, &one, 1, TFG_DTYPE_BF16, TFG_COLL_SUM);
  sync_all_ok(&k);
  for (int r = 0; r < 3; r++) ck_assert_uint_eq(h[r], 0x3f81); /* 1 + 2^-7 */
  c->i.free(c);
  ranks_free(&k);
}
END_TEST

/* More ranks than one reduce_all adds: refused, saying so. */
START_TEST(shared_too_many_ranks) {
  ranks k;
  ranks_init(&k, 1);
  tfg_backend *b[TFG_REDUCE_ALL_MAX + 1];
  tfg_stream *st[TFG_REDUCE_ALL_MAX + 1];
  for (int r = 0; r <= TFG_REDUCE_ALL_MAX; r++) b[r] = k.b[0], st[r] = k.s[0];
  tfg_strbuf why = {0};
  ck_assert_ptr_null(tfg_coll_shared_new(TFG_REDUCE_ALL_MAX + 1, b, st, &why));
  ck_assert_msg(why.data && strstr(why.data, "at most 8 ranks"), "%s", why.data ? why.data : "");
  tfg_strbuf_free(&why);
  ranks_free(&k);
}
END_TEST

/* ---- ZeRO's pair: reduce-scatter and all-gather in pieces ---------------------------- */

/* One reduce-scatter then one all-gather on R host ranks (the
 * collective ctor makes; hier: grouped by group[]) over nseg segments
 * (counts, multiples of R), dtype dt, checked exactly: after the
 * reduce-scatter, rank p's piece p of every segment is the sum over the
 * ranks of integer inputs (ival: exact in any float type; a MEAN's
 * division by R = 3 rounds once: 2 eps); after the all-gather of pieces
 * each rank wrote (its rank's ival, the rest of its buffer -999), every
 * rank holds every rank's piece bit for bit. */
static void check_pieces(tfg_coll *coll, ranks *k, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op,
                         const char *what) {
  int R = k->R;
  size_t es = tfg_dtype_size(dt), n = 0;
  for (int j = 0; j < nseg; j++) n += counts[j];
  void *dev[4 * 4];
  char *in = malloc((size_t)R * (n + 1) * es), *out = malloc((size_t)R * (n + 1) * es);
  ck_assert(in && out && nseg <= 4);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nseg; j++) dev[r * nseg + j] = tfg_backend_alloc(k->b[r], counts[j] ? counts[j] * es : 1);
  for (int phase = 0; phase < 2; phase++) {
    /* the inputs: every element for the reduce-scatter, a rank's own pieces for the all-gather */
    for (int r = 0; r < R; r++)
      for (int j = 0, o = 0; j < nseg; o += (int)counts[j], j++)
        for (size_t e = 0; e < counts[j]; e++) {
          bool own = e / (counts[j] / (size_t)R) == (size_t)r;
          double v = phase == 0 || own ? ival(r, (size_t)o + e, phase) : -999;
          char *at = in + ((size_t)r * n + (size_t)o + e) * es;
          if (dt == TFG_DTYPE_F32) *(float *)at = (float)v;
          else if (dt == TFG_DTYPE_F64) *(double *)at = v;
          else *(int32_t *)at = (int32_t)v;
        }
    for (int r = 0; r < R; r++)
      for (int j = 0, o = 0; j < nseg; o += (int)counts[j], j++)
        tfg_backend_copy_from_host(k->b[r], k->s[r], dev[r * nseg + j], in + ((size_t)r * n + (size_t)o) * es,
                                   counts[j] * es);
    if (phase == 0) coll->i.reduce_scatter(coll, dev, counts, nseg, dt, op == TFG_COLL_MEAN ? 1.0 / R : 1.0);
    else coll->i.all_gather(coll, dev, counts, nseg, dt);
    for (int r = 0; r < R; r++)
      for (int j = 0, o = 0; j < nseg; o += (int)counts[j], j++)
        tfg_backend_copy_to_host(k->b[r], k->s[r], out + ((size_t)r * n + (size_t)o) * es, dev[r * nseg + j],
                                 counts[j] * es);
    sync_all_ok(k);
    for (int r = 0; r < R; r++)
      for (int j = 0, o = 0; j < nseg; o += (int)counts[j], j++)
        for (size_t e = 0; e < counts[j]; e++) {
          size_t per = counts[j] / (size_t)R, owner = e / per;
          const char *got = out + ((size_t)r * n + (size_t)o + e) * es;
          if (phase == 1) { /* the owner's bytes */
            const char *want = in + ((size_t)owner * n + (size_t)o + e) * es;
            if (memcmp(got, want, es) != 0)
              ck_abort_msg("%s %s all-gather: rank %d segment %d element %zu is not rank %zu's", what,
                           tfg_dtype_name(dt), r, j, e, owner);
            continue;
          }
          if (owner != (size_t)r) continue; /* unspecified */
          double sum = 0;
          for (int q = 0; q < R; q++) sum += ival(q, (size_t)o + e, 0);
          double want = op == TFG_COLL_MEAN ? sum / R : sum, v = dt == TFG_DTYPE_F32 ? *(const float *)got : *(const double *)got;
          double tol = op == TFG_COLL_MEAN && R == 3 ? 2 * (dt == TFG_DTYPE_F32 ? FLT_EPSILON : DBL_EPSILON) * fabs(want) : 0;
          if (!(fabs(v - want) <= tol))
            ck_abort_msg("%s %s reduce-scatter: rank %d segment %d element %zu = %.17g, want %.17g", what,
                         tfg_dtype_name(dt), r, j, e, v, want);
        }
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < nseg; j++) tfg_backend_free(k->b[r], dev[r * nseg + j]);
  free(in);
  free(out);
}

START_TEST(ring_and_shared_pieces) {
  for (int R = 1; R <= 4; R++)
    for (int which = 0; which < 2; which++)
      for (int dt = 0; dt < 2; dt++)
        for (int op = 0; op < 2; op++) {
          ranks k;
          ranks_init(&k, R);
          tfg_coll *coll = which ? shared_new(R, k.b, k.s) : tfg_coll_ring_new(R, k.b, k.s);
          size_t counts[3] = {(size_t)R * 5, 0, (size_t)R * 1001};
          char what[32];
          snprintf(what, sizeof what, "%s R=%d", which ? "shared" : "ring", R);
          check_pieces(coll, &k, counts, 3, dt ? TFG_DTYPE_F64 : TFG_DTYPE_F32, op ? TFG_COLL_MEAN : TFG_COLL_SUM, what);
          coll->i.free(coll);
          ranks_free(&k);
        }
}
END_TEST

/* The all-gather copies bytes: an i32 segment too (the reduce-scatter
 * half of check_pieces is for floats; here the all-gather alone). */
START_TEST(ring_all_gather_ints) {
  ranks k;
  ranks_init(&k, 3);
  tfg_coll *coll = tfg_coll_ring_new(3, k.b, k.s);
  int32_t host[3][6];
  void *dev[3];
  for (int r = 0; r < 3; r++) {
    for (int e = 0; e < 6; e++) host[r][e] = e / 2 == r ? 100 * r + e : -1;
    dev[r] = tfg_backend_alloc(k.b[r], sizeof host[r]);
    tfg_backend_copy_from_host(k.b[r], k.s[r], dev[r], host[r], sizeof host[r]);
  }
  size_t count = 6;
  coll->i.all_gather(coll, dev, &count, 1, TFG_DTYPE_I32);
  int32_t got[3][6];
  for (int r = 0; r < 3; r++) tfg_backend_copy_to_host(k.b[r], k.s[r], got[r], dev[r], sizeof got[r]);
  sync_all_ok(&k);
  for (int r = 0; r < 3; r++)
    for (int e = 0; e < 6; e++) ck_assert_int_eq(got[r][e], 100 * (e / 2) + e);
  for (int r = 0; r < 3; r++) tfg_backend_free(k.b[r], dev[r]);
  coll->i.free(coll);
  ranks_free(&k);
}
END_TEST

Suite *suite_collective(void) {
  Suite *s = suite_create("collective");
  TCase *prim = tcase_create("reduce_peer");
  tcase_add_test(prim, reduce_peer_values);
  tcase_add_test(prim, reduce_peer_half);
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
  tcase_add_test(ring, shared_bits);
  tcase_add_test(ring, shared_too_many_ranks);
  tcase_add_test(ring, ring_and_shared_pieces);
  tcase_add_test(ring, ring_all_gather_ints);
  suite_add_tcase(s, ring);
  return s;
}

/* ---- choosing a collective per group (tfg_coll_choose) ------------------------------
 * The choice is a pure function of each rank's device kind and physical
 * GPU, so it is tested on parsed device lists, cuda:K entries included,
 * without GPUs or CUDA backends. */

/* The devices of a spec by their program names: at[i] is gpu:idx[i], or
 * cpu:0 for -1. */
static void pick(const tfg_devices *ds, const int *idx, int n, const tfg_device **at) {
  for (int i = 0; i < n; i++) {
    at[i] = idx[i] < 0 ? tfg_devices_at(ds, 0) : tfg_devices_gpu(ds, idx[i]);
    ck_assert_ptr_nonnull(at[i]);
  }
}

/* Checks the choice for the group idx[0..n) of spec, with and without
 * NCCL: want_nccl / want_plain, and for HIER the leaders' collective. */
static void check_choice(const char *spec, const int *idx, int n, tfg_coll_algo want_nccl, tfg_coll_algo lead_nccl,
                         tfg_coll_algo want_plain, tfg_coll_algo lead_plain) {
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds;
  ck_assert_int_eq(tfg_devices_parse(d, spec, &ds), TFG_OK);
  const tfg_device *at[16];
  ck_assert_int_le(n, 16);
  pick(ds, idx, n, at);
  for (int with = 0; with < 2; with++) {
    tfg_strbuf why = {0};
    tfg_coll_algo leaders = TFG_COLL_ALGO_REFUSED;
    tfg_coll_algo got = tfg_coll_choose(n, at, with, &leaders, &why);
    tfg_coll_algo want = with ? want_nccl : want_plain, lead = with ? lead_nccl : lead_plain;
    ck_assert_msg(got == want && leaders == lead, "%s, %d ranks, nccl %d: %s (leaders %s), want %s (leaders %s)", spec,
                  n, with, tfg_coll_algo_name(got), tfg_coll_algo_name(leaders), tfg_coll_algo_name(want),
                  tfg_coll_algo_name(lead));
    ck_assert_msg((got == TFG_COLL_ALGO_REFUSED) == (why.len > 0), "why: '%s'", why.data ? why.data : "");
    ck_assert(tfg_coll_choose(n, at, with, NULL, NULL) == got || got == TFG_COLL_ALGO_REFUSED);
    tfg_strbuf_free(&why);
  }
  tfg_devices_free(ds);
  tfg_diag_free(d);
}

#define RING TFG_COLL_ALGO_RING
#define NCCL TFG_COLL_ALGO_NCCL
#define HIER TFG_COLL_ALGO_HIER
#define SHARED TFG_COLL_ALGO_SHARED
#define REFUSED TFG_COLL_ALGO_REFUSED

START_TEST(choose_host_devices_ring) {
  static const int two[] = {0, 1}, four[] = {0, 1, 2, 3}, with_cpu[] = {-1, 0, 2}, one[] = {2};
  check_choice("host*4", two, 2, RING, RING, RING, RING);
  check_choice("host*4", four, 4, RING, RING, RING, RING);
  check_choice("host*4", with_cpu, 3, RING, RING, RING, RING); /* cpu:0 is a host device too */
  check_choice("host*4", one, 1, RING, RING, RING, RING);
  ck_assert_str_eq(tfg_coll_algo_name(RING), "ring");
  ck_assert_str_eq(tfg_coll_algo_name(NCCL), "nccl");
  ck_assert_str_eq(tfg_coll_algo_name(HIER), "hier");
  ck_assert_str_eq(tfg_coll_algo_name(REFUSED), "refused");
}
END_TEST

/* gpu:0 gpu:1 on cuda:0; gpu:2 on cuda:1; gpu:3..5 on cuda:2; gpu:6 on cuda:3. */
#define CUDA_SPEC "cuda:0*2,cuda:1,cuda:2*3,cuda:3"

/* Logical devices of one GPU: the shared all-reduce (NCCL refuses two
 * ranks on one GPU), up to TFG_REDUCE_ALL_MAX ranks, then the ring. */
START_TEST(choose_cuda_one_gpu_shared) {
  static const int a[] = {0, 1}, b[] = {3, 4, 5}, c[] = {5, 3}, one[] = {6}, eight[] = {0, 1, 2, 3, 4, 5, 6, 7},
                   nine[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  check_choice(CUDA_SPEC, a, 2, SHARED, SHARED, SHARED, SHARED);
  check_choice(CUDA_SPEC, b, 3, SHARED, SHARED, SHARED, SHARED);
  check_choice(CUDA_SPEC, c, 2, SHARED, SHARED, SHARED, SHARED);
  check_choice(CUDA_SPEC, one, 1, RING, RING, RING, RING);
  check_choice("cuda:0*2", a, 2, SHARED, SHARED, SHARED, SHARED);
  check_choice("cuda:0*9", eight, 8, SHARED, SHARED, SHARED, SHARED);
  check_choice("cuda:0*9", nine, 9, RING, RING, RING, RING);
  ck_assert_str_eq(tfg_coll_algo_name(SHARED), "shared");
}
END_TEST

START_TEST(choose_cuda_distinct_gpus_nccl) {
  static const int a[] = {0, 2}, b[] = {1, 2, 3, 6}, c[] = {6, 0}, d[] = {0, 1};
  check_choice(CUDA_SPEC, a, 2, NCCL, NCCL, RING, RING); /* without NCCL: the ring over peer access */
  check_choice(CUDA_SPEC, b, 4, NCCL, NCCL, RING, RING);
  check_choice(CUDA_SPEC, c, 2, NCCL, NCCL, RING, RING);
  check_choice("cuda:0,cuda:1", d, 2, NCCL, NCCL, RING, RING);
}
END_TEST

START_TEST(choose_cuda_shared_and_distinct_hier) {
  static const int a[] = {0, 1, 2}, b[] = {0, 1, 2, 3, 4, 5, 6}, c[] = {2, 3, 4}, d[] = {3, 0, 4, 1};
  check_choice(CUDA_SPEC, a, 3, HIER, NCCL, HIER, RING);
  check_choice(CUDA_SPEC, b, 7, HIER, NCCL, HIER, RING);
  check_choice(CUDA_SPEC, c, 3, HIER, NCCL, HIER, RING);
  check_choice(CUDA_SPEC, d, 4, HIER, NCCL, HIER, RING); /* interleaved GPUs */
}
END_TEST

/* Host and CUDA devices in one group, and sim devices: refused, naming
 * the devices. */
START_TEST(choose_mixed_refused) {
  tfg_diag *d = tfg_diag_new();
  tfg_devices *ds;
  ck_assert_int_eq(tfg_devices_parse(d, "host*2,cuda:0*2,sim:h100", &ds), TFG_OK);
  static const int mixed[] = {0, 2}, with_cpu[] = {3, -1}, four[] = {2, 3, 0, 1}, sim[] = {4, 0};
  const tfg_device *at[4];
  tfg_strbuf why = {0};
  pick(ds, mixed, 2, at);
  for (int with = 0; with < 2; with++) {
    tfg_strbuf_clear(&why);
    ck_assert_int_eq(tfg_coll_choose(2, at, with, NULL, &why), REFUSED);
    ck_assert_msg(strstr(why.data, "gpu:0 is a host device") && strstr(why.data, "gpu:2 a CUDA device") &&
                      strstr(why.data, "no collective spans"),
                  "%s", why.data);
  }
  pick(ds, with_cpu, 2, at);
  tfg_strbuf_clear(&why);
  ck_assert_int_eq(tfg_coll_choose(2, at, true, NULL, &why), REFUSED);
  ck_assert_msg(strstr(why.data, "cpu:0 is a host device") && strstr(why.data, "gpu:3 a CUDA device"), "%s",
                why.data);
  pick(ds, four, 4, at);
  tfg_strbuf_clear(&why);
  tfg_coll_algo leaders = RING;
  ck_assert_int_eq(tfg_coll_choose(4, at, true, &leaders, &why), REFUSED);
  ck_assert_int_eq(leaders, REFUSED);
  ck_assert_ptr_nonnull(strstr(why.data, "gpu:0 is a host device"));
  pick(ds, sim, 2, at);
  tfg_strbuf_clear(&why);
  ck_assert_int_eq(tfg_coll_choose(2, at, true, NULL, &why), REFUSED);
  ck_assert_msg(strstr(why.data, "gpu:4 is a sim device"), "%s", why.data);
  tfg_strbuf_free(&why);
  tfg_devices_free(ds);
  tfg_diag_free(d);
}
END_TEST

#undef RING
#undef NCCL
#undef HIER
#undef REFUSED

/* The registration's collective for host backends is the ring, and it
 * reduces; NCCL over host backends is refused with a reason (this build's
 * NCCL, or that there is none). */
START_TEST(new_for_host_is_the_ring_and_nccl_refuses_host) {
  for (int R = 1; R <= 4; R++) {
    ranks k;
    ranks_init(&k, R);
    float buf[4][5];
    for (int r = 0; r < R; r++)
      for (int j = 0; j < 5; j++) buf[r][j] = (float)(r * 10 + j);
    void *bufs[4] = {buf[0], buf[1], buf[2], buf[3]};
    size_t count = 5;
    tfg_strbuf why = {0};
    tfg_coll *c = tfg_coll_new_for(R, k.b, k.s, &why);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(why.len, 0);
    ck_assert_str_eq(c->i.name(c), "ring");
    c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_SUM);
    sync_all_ok(&k);
    for (int r = 0; r < R; r++)
      for (int j = 0; j < 5; j++) ck_assert_float_eq(buf[r][j], (float)(10 * R * (R - 1) / 2 + R * j));
    c->i.free(c);
    ck_assert_ptr_null(tfg_coll_nccl_new(R, k.b, k.s, &why));
    ck_assert_msg(why.data && strstr(why.data, "NCCL"), "%s", why.data ? why.data : "");
    tfg_strbuf_free(&why);
    ranks_free(&k);
  }
}
END_TEST

/* The ring's allreduce_scaled: the exact sum times the scale, once. */
START_TEST(ring_allreduce_scaled) {
  for (int R = 2; R <= 4; R++) {
    ranks k;
    ranks_init(&k, R);
    double buf[4][1001];
    for (int r = 0; r < R; r++)
      for (int j = 0; j < 1001; j++) buf[r][j] = ival(r, (size_t)j, 0);
    size_t counts[2] = {1000, 1};
    void *segs[8];
    for (int r = 0; r < R; r++) segs[r * 2] = buf[r], segs[r * 2 + 1] = buf[r] + 1000;
    tfg_coll *c = tfg_coll_ring_new(R, k.b, k.s);
    c->i.allreduce_scaled(c, segs, counts, 2, TFG_DTYPE_F64, 0.125);
    sync_all_ok(&k);
    for (int j = 0; j < 1001; j++) {
      double sum = 0;
      for (int r = 0; r < R; r++) sum += ival(r, (size_t)j, 0);
      for (int r = 0; r < R; r++)
        if (buf[r][j] != sum * 0.125)
          ck_abort_msg("R=%d rank %d element %d = %g, want %g", R, r, j, buf[r][j], sum / 8);
    }
    c->i.free(c);
    ranks_free(&k);
  }
}
END_TEST

/* ---- the hierarchical all-reduce over host devices -----------------------------------
 * Host devices stand in for GPUs: group[r] plays rank r's physical GPU,
 * and the built-in ring plays NCCL among the leaders, so the three
 * phases (reduce to each group's leader, the leaders' all-reduce, the
 * copy back) are checked numerically, with the same rules as the ring's
 * cases above: integer values (exact sums), every rank's bits equal, and
 * a mean over all ranks (never a mean of the groups' means, which the
 * unequal groups below would expose). A spy around the leaders' ring
 * checks the structure: which ranks lead, and the scale they apply. */

/* What the leaders' collective of the last hierarchical all-reduce saw. */
static struct {
  int made;             /* constructions */
  int nranks;           /* leaders */
  tfg_backend *b[4];    /* the leaders' backends */
  int calls;
  double scale;         /* the last call's */
  void *first[4];       /* the last call's first segment of each leader */
  tfg_coll *ring;
  const char *fail;     /* when set, the constructor fails with it */
} spy;

static const char *spy_name(tfg_coll *c) {
  (void)c;
  return "spy";
}

static void spy_allreduce(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                          tfg_coll_op op) {
  (void)c, (void)bufs, (void)counts, (void)nseg, (void)dt, (void)op;
  ck_abort_msg("the hierarchical all-reduce calls its leaders' allreduce_scaled only");
}

/* Notes a call of the leaders' collective: its scale and first buffers. */
static void spy_saw(void *const *bufs, int nseg, double scale) {
  spy.calls++;
  spy.scale = scale;
  for (int g = 0; g < spy.nranks; g++) spy.first[g] = nseg ? bufs[g * nseg] : NULL;
}

static void spy_allreduce_scaled(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                                 double scale) {
  (void)c;
  spy_saw(bufs, nseg, scale);
  spy.ring->i.allreduce_scaled(spy.ring, bufs, counts, nseg, dt, scale);
}

static void spy_reduce_scatter(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt,
                               double scale) {
  (void)c;
  spy_saw(bufs, nseg, scale);
  spy.ring->i.reduce_scatter(spy.ring, bufs, counts, nseg, dt, scale);
}

static void spy_all_gather(tfg_coll *c, void *const *bufs, const size_t *counts, int nseg, tfg_dtype dt) {
  (void)c;
  spy_saw(bufs, nseg, 1.0);
  spy.ring->i.all_gather(spy.ring, bufs, counts, nseg, dt);
}

static void spy_free(tfg_coll *c) {
  spy.ring->i.free(spy.ring);
  spy.ring = NULL;
  free(c);
}

static tfg_coll *spy_new(int nranks, tfg_backend *const *b, tfg_stream *const *s, tfg_strbuf *why) {
  spy.made++;
  if (spy.fail) {
    tfg_strbuf_puts(why, spy.fail);
    return NULL;
  }
  ck_assert_int_le(nranks, 4);
  spy.nranks = nranks;
  for (int g = 0; g < nranks; g++) spy.b[g] = b[g];
  spy.calls = 0;
  spy.ring = tfg_coll_ring_new(nranks, b, s);
  tfg_coll *c = calloc(1, sizeof *c);
  ck_assert_ptr_nonnull(c);
  static const tfg_coll_i spy_i = {.name = spy_name, .allreduce = spy_allreduce,
                                   .allreduce_scaled = spy_allreduce_scaled, .reduce_scatter = spy_reduce_scatter,
                                   .all_gather = spy_all_gather, .free = spy_free};
  c->i = spy_i;
  c->nranks = nranks;
  return c;
}

/* One hierarchical all-reduce (calls of them, new data written on the
 * ranks' streams between calls) of integer values in nseg segments over
 * R host ranks grouped by group[], checked against the exact reference
 * and for equal bits on every rank, and its structure through the spy. */
static void check_hier(int R, const int *group, const size_t *counts, int nseg, tfg_dtype dt, tfg_coll_op op,
                       int calls) {
  ranks k;
  ranks_init(&k, R);
  arbufs a;
  arbufs_init(&a, &k, counts, nseg, dt, calls, false);
  /* The expected leaders: the first rank of each group, in rank order. */
  int leaders[4], ngroups = 0;
  for (int r = 0; r < R; r++) {
    bool first = true;
    for (int q = 0; q < r; q++) first &= group[q] != group[r];
    if (first) leaders[ngroups++] = r;
  }
  memset(&spy, 0, sizeof spy);
  tfg_strbuf why = {0};
  tfg_coll *coll = tfg_coll_hier_new(R, k.b, k.s, group, spy_new, &why);
  ck_assert_ptr_nonnull(coll);
  ck_assert_int_eq(coll->nranks, R);
  ck_assert_int_eq(spy.made, ngroups > 1);
  ck_assert_str_eq(coll->i.name(coll), ngroups > 1 ? "hier+spy" : "hier+none");
  if (ngroups > 1) {
    ck_assert_int_eq(spy.nranks, ngroups);
    for (int g = 0; g < ngroups; g++) ck_assert_ptr_eq(spy.b[g], k.b[leaders[g]]);
  }
  arbufs_run(&a, coll, op);
  /* The leaders' step: once per call (none for empty buffers or one
   * group), on the leaders' buffers, scaled once by 1 / R for a mean. */
  ck_assert_int_eq(spy.calls, ngroups > 1 && a.n > 0 && R > 1 ? calls : 0);
  if (spy.calls) {
    ck_assert(spy.scale == (op == TFG_COLL_MEAN ? 1.0 / R : 1.0));
    for (int g = 0; g < ngroups; g++) ck_assert_ptr_eq(spy.first[g], a.dev[leaders[g] * nseg]);
  }
  sync_all_ok(&k);
  char what[32];
  snprintf(what, sizeof what, "R=%d groups %d", R, ngroups);
  arbufs_check(&a, op, false, what); /* exact sums, times fl(1/3) for a mean over 3 */
  coll->i.free(coll);
  ck_assert_ptr_null(spy.ring); /* the hierarchical one owns the leaders' */
  arbufs_free(&a);
  tfg_strbuf_free(&why);
  ranks_free(&k);
}

/* Groupings of 1 to 4 ranks: one group (no leaders' step), singletons
 * only (no copies), unequal groups, interleaved groups. */
static const struct {
  int R;
  int group[4];
} groupings[] = {
    {1, {0}},          {2, {0, 0}},       {2, {0, 1}},       {3, {0, 0, 1}},    {3, {0, 1, 1}},
    {3, {4, 9, 4}},    {3, {5, 5, 5}},    {4, {0, 0, 1, 1}}, {4, {0, 1, 0, 1}}, {4, {0, 0, 0, 1}},
    {4, {3, 1, 1, 1}}, {4, {0, 1, 2, 2}}, {4, {0, 1, 2, 3}}, {4, {7, 7, 7, 7}},
};
#define NGROUPINGS ((int)(sizeof groupings / sizeof groupings[0]))

START_TEST(hier_sizes) {
  static const size_t sizes[] = {0, 1, 3, 1001};
  for (int i = 0; i < NGROUPINGS; i++)
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
      for (int dt = 0; dt < 2; dt++)
        for (int op = 0; op < 2; op++)
          check_hier(groupings[i].R, groupings[i].group, &sizes[z], 1, dt ? TFG_DTYPE_F64 : TFG_DTYPE_F32,
                     op ? TFG_COLL_MEAN : TFG_COLL_SUM, 1);
}
END_TEST

START_TEST(hier_segments_and_repeated_calls) {
  static const size_t a[] = {1000, 1, 2501}, b[] = {0, 3, 0}, c[] = {5, 0, 0, 7, 1, 0};
  struct {
    const size_t *counts;
    int nseg;
  } cases[] = {{a, 3}, {b, 3}, {c, 6}, {NULL, 0}};
  for (int i = 0; i < NGROUPINGS; i++)
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++) {
      check_hier(groupings[i].R, groupings[i].group, cases[s].counts, cases[s].nseg, TFG_DTYPE_F32, TFG_COLL_MEAN, 1);
      check_hier(groupings[i].R, groupings[i].group, cases[s].counts, cases[s].nseg, TFG_DTYPE_F64, TFG_COLL_SUM, 4);
    }
}
END_TEST

/* 64 MiB of f32 per rank, two GPUs' worth of two logical devices each. */
START_TEST(hier_64mib) {
  static const size_t counts[] = {(size_t)8 << 20, 12345, ((size_t)8 << 20) - 12345};
  static const int group[] = {0, 0, 1, 1};
  check_hier(4, group, counts, 3, TFG_DTYPE_F32, TFG_COLL_MEAN, 1);
}
END_TEST

/* A rank whose stream failed before the call (member or leader), or a
 * dtype reduce_peer cannot add: every rank fails, none hangs. */
START_TEST(hier_failures_reach_every_rank) {
  static const int groups[][4] = {{0, 0, 1, 1}, {0, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 0, 1}};
  for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
    for (int bad = -1; bad < 4; bad++) {
      ranks k;
      ranks_init(&k, 4);
      float buf[4][33];
      for (int r = 0; r < 4; r++)
        for (int j = 0; j < 33; j++) buf[r][j] = (float)j;
      int32_t ibuf[4][7] = {{0}};
      void *bufs[4] = {buf[0], buf[1], buf[2], buf[3]}, *ibufs[4] = {ibuf[0], ibuf[1], ibuf[2], ibuf[3]};
      size_t count = 33, icount = 7;
      memset(&spy, 0, sizeof spy);
      tfg_coll *c = tfg_coll_hier_new(4, k.b, k.s, groups[gi], spy_new, NULL);
      ck_assert_ptr_nonnull(c);
      if (bad >= 0) { /* an i32 reduce_peer fails the rank's stream */
        int32_t x[1] = {0};
        tfg_backend_reduce_peer(k.b[bad], k.s[bad], x, k.b[bad], x, 1, TFG_DTYPE_I32, 1.0);
        c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_MEAN);
      } else {
        c->i.allreduce(c, ibufs, &icount, 1, TFG_DTYPE_I32, TFG_COLL_SUM);
      }
      c->i.allreduce(c, bufs, &count, 1, TFG_DTYPE_F32, TFG_COLL_SUM); /* sticky: fails too */
      sync_all_fail(&k, TFG_ERR_DEVICE, "i32");
      c->i.free(c);
      ranks_free(&k);
    }
  }
}
END_TEST

/* The leaders' collective cannot be made: no hierarchical one, the reason
 * passed on; freeing one right after queueing is safe. */
START_TEST(hier_leaders_fail_and_free_while_queued) {
  ranks k;
  ranks_init(&k, 3);
  static const int group[] = {0, 1, 0};
  memset(&spy, 0, sizeof spy);
  spy.fail = "no leaders today";
  tfg_strbuf why = {0};
  ck_assert_ptr_null(tfg_coll_hier_new(3, k.b, k.s, group, spy_new, &why));
  ck_assert_str_eq(why.data, "no leaders today");
  tfg_strbuf_free(&why);
  spy.fail = NULL;
  float buf[3][1000];
  void *bufs[3];
  sum_three_free_while_queued(&k, tfg_coll_hier_new(3, k.b, k.s, group, spy_new, NULL), buf, bufs);
  ranks_free(&k);
}
END_TEST

/* The hierarchical pair over consecutive groups of one size (its
 * reduce-scatter is its all-reduce; its all-gather takes the members'
 * pieces to the leader, all-gathers blocks among the leaders, copies
 * back): one group, singletons, pairs. */
START_TEST(hier_pieces) {
  static const struct {
    int R, group[4];
  } blocked[] = {{1, {0}}, {2, {0, 0}}, {2, {0, 1}}, {4, {0, 0, 1, 1}}, {4, {0, 1, 2, 3}}, {4, {2, 2, 2, 2}}};
  for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
    for (int dt = 0; dt < 2; dt++) {
      ranks k;
      ranks_init(&k, blocked[i].R);
      memset(&spy, 0, sizeof spy);
      tfg_strbuf why = {0};
      tfg_coll *coll = tfg_coll_hier_new(blocked[i].R, k.b, k.s, blocked[i].group, spy_new, &why);
      ck_assert_ptr_nonnull(coll);
      size_t counts[2] = {(size_t)blocked[i].R * 3, (size_t)blocked[i].R * 257};
      char what[32];
      snprintf(what, sizeof what, "hier grouping %zu", i);
      check_pieces(coll, &k, counts, 2, dt ? TFG_DTYPE_F64 : TFG_DTYPE_F32, dt ? TFG_COLL_MEAN : TFG_COLL_SUM, what);
      coll->i.free(coll);
      tfg_strbuf_free(&why);
      ranks_free(&k);
    }
}
END_TEST

Suite *suite_collective_groups(void) {
  Suite *s = suite_create("collective_groups");
  TCase *choose = tcase_create("choose");
  tcase_add_test(choose, choose_host_devices_ring);
  tcase_add_test(choose, choose_cuda_one_gpu_shared);
  tcase_add_test(choose, choose_cuda_distinct_gpus_nccl);
  tcase_add_test(choose, choose_cuda_shared_and_distinct_hier);
  tcase_add_test(choose, choose_mixed_refused);
  tcase_add_test(choose, new_for_host_is_the_ring_and_nccl_refuses_host);
  tcase_add_test(choose, ring_allreduce_scaled);
  suite_add_tcase(s, choose);
  TCase *hier = tcase_create("hier");
  tcase_set_timeout(hier, 300); /* the 64 MiB case under ASan on 2 cores */
  tcase_add_test(hier, hier_sizes);
  tcase_add_test(hier, hier_segments_and_repeated_calls);
  tcase_add_test(hier, hier_64mib);
  tcase_add_test(hier, hier_failures_reach_every_rank);
  tcase_add_test(hier, hier_leaders_fail_and_free_while_queued);
  tcase_add_test(hier, hier_pieces);
  suite_add_tcase(s, hier);
  return s;
}
