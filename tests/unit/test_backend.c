/* tests/unit/test_backend.c: the device memory pool (runtime/mem.h) and
 * the host backend (runtime/backend_host.c).
 *
 * Pool: exact offsets in a preallocated region, in_use / peak /
 * largest_free after splits and merges, best fit's choice, capacity
 * refusals, the growth policy, alignment, a randomized run checked step by
 * step against a reference model (a granule map searched by brute force),
 * and four threads at once. Backend: kernels that append to a shared log
 * show the order operations ran in: one stream in order, event chains
 * between streams and across backends (with events recorded again per
 * round), a blocked stream not holding up its neighbour, copies, failure
 * propagation, the fault-injection hook, and destroy draining queued work.
 * A "gate" kernel on a backend of its own blocks until the test opens it,
 * to hold a record back while the test looks at the other streams.
 * Beyond the host backend alone: a pool's region hooks (what the CUDA
 * backend's cudaMalloc regions go through), the registration's refusals
 * (tfg_backend_new), and the host side of mixing backends: copies and
 * reductions from memory only read_now can read, and waits for records a
 * GPU issued (the event's export hook), with a stand-in for the GPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu.h"
#include "runtime/backend_impl.h" /* the body: a test builds a stand-in backend */
#include "runtime/event_impl.h" /* the event body: a test fakes the CUDA export */
#include "runtime/event.h"
#include "runtime/mem.h"
#include "runtime/registry.h"
#include "tests/unit/unit.h"

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define A TFG_MEM_ALIGN

static int64_t off(const void *p, const void *base) { return (int64_t)((const char *)p - (const char *)base); }

static tfg_mem_stats stats(tfg_mem_pool *p) {
  tfg_mem_stats st;
  tfg_mem_pool_stats(p, &st);
  return st;
}

/* The region's base: a preallocated empty pool's first block starts there. */
static char *region_base(tfg_mem_pool *p) {
  char *b = tfg_mem_alloc(p, 1);
  ck_assert_ptr_nonnull(b);
  tfg_mem_free(p, b);
  return b;
}

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* ---- pool: exact layouts ------------------------------------------------- */

START_TEST(pool_offsets_and_coalescing) {
  tfg_mem_pool *p = tfg_mem_pool_new(64 * KiB, true);
  ck_assert_ptr_nonnull(p);
  char *base = region_base(p);
  tfg_mem_stats st = stats(p);
  ck_assert_int_eq(st.capacity, 64 * KiB);
  ck_assert_int_eq(st.reserved, 64 * KiB);
  ck_assert_int_eq(st.in_use, 0);
  ck_assert_int_eq(st.largest_free, 64 * KiB);

  char *a = tfg_mem_alloc(p, 1000); /* 1024 at 0 */
  char *b = tfg_mem_alloc(p, 256);  /* 256 at 1024 */
  char *c = tfg_mem_alloc(p, 1);    /* 256 at 1280 */
  char *d = tfg_mem_alloc(p, 3000); /* 3072 at 1536 */
  ck_assert_int_eq(off(a, base), 0);
  ck_assert_int_eq(off(b, base), 1024);
  ck_assert_int_eq(off(c, base), 1280);
  ck_assert_int_eq(off(d, base), 1536);
  st = stats(p);
  ck_assert_int_eq(st.in_use, 4608);
  ck_assert_int_eq(st.peak, 4608);
  ck_assert_int_eq(st.largest_free, 64 * KiB - 4608);
  ck_assert_int_eq(st.nallocs, 5); /* region_base's too */

  /* Holes at 1024 (256), then merged with c's into 512. */
  tfg_mem_free(p, b);
  st = stats(p);
  ck_assert_int_eq(st.in_use, 4352);
  ck_assert_int_eq(st.largest_free, 64 * KiB - 4608);
  tfg_mem_free(p, c);
  ck_assert_int_eq(stats(p).in_use, 4096);
  /* A 512 request takes the 512 hole (exact fit), not the tail. */
  char *e = tfg_mem_alloc(p, 512);
  ck_assert_int_eq(off(e, base), 1024);
  /* Free a (hole 0..1024), then e: merges with a's hole on the left. */
  tfg_mem_free(p, a);
  tfg_mem_free(p, e);
  st = stats(p);
  ck_assert_int_eq(st.in_use, 3072);
  ck_assert_int_eq(st.largest_free, 64 * KiB - 4608);
  /* 1536 fits exactly into the merged hole 0..1536. */
  char *f = tfg_mem_alloc(p, 1536);
  ck_assert_int_eq(off(f, base), 0);
  tfg_mem_free(p, f);
  /* d sits between two free blocks: freeing it merges all three. */
  tfg_mem_free(p, d);
  st = stats(p);
  ck_assert_int_eq(st.in_use, 0);
  ck_assert_int_eq(st.peak, 4608);
  ck_assert_int_eq(st.largest_free, 64 * KiB);
  ck_assert_int_eq(st.nallocs, 7);
  /* Merged for real: the whole region is one block again. */
  char *all = tfg_mem_alloc(p, (size_t)(64 * KiB));
  ck_assert_ptr_eq(all, base);
  ck_assert_ptr_null(tfg_mem_alloc(p, 1));
  tfg_mem_pool_free(p);
}
END_TEST

START_TEST(pool_best_fit_smallest) {
  tfg_mem_pool *p = tfg_mem_pool_new(64 * KiB, true);
  char *base = region_base(p);
  /* Layout: h1 1024 | s 256 | h2 512 | s 256 | h3 768 | s 256 | h4 512 | s 256 | tail */
  size_t sizes[8] = {1024, 256, 512, 256, 768, 256, 512, 256};
  char *blk[8];
  int64_t at = 0;
  for (int i = 0; i < 8; i++) {
    blk[i] = tfg_mem_alloc(p, sizes[i]);
    ck_assert_int_eq(off(blk[i], base), at);
    at += (int64_t)sizes[i];
  }
  for (int i = 0; i < 8; i += 2) tfg_mem_free(p, blk[i]);
  ck_assert_int_eq(stats(p).in_use, 4 * 256);
  /* 600 rounds to 768: exactly h3, though h1 and the tail fit too. */
  char *x = tfg_mem_alloc(p, 600);
  ck_assert_int_eq(off(x, base), 1024 + 256 + 512 + 256);
  /* 300 rounds to 512: h2 and h4 tie, the lower address wins. */
  char *y = tfg_mem_alloc(p, 300);
  ck_assert_int_eq(off(y, base), 1024 + 256);
  char *z = tfg_mem_alloc(p, 257);
  ck_assert_int_eq(off(z, base), 1024 + 256 + 512 + 256 + 768 + 256);
  /* 700 (768): only h1 (1024) and the tail remain; h1 is smaller, and
   * the split leaves 256 free at offset 768. */
  char *w = tfg_mem_alloc(p, 700);
  ck_assert_int_eq(off(w, base), 0);
  char *v = tfg_mem_alloc(p, 200);
  ck_assert_int_eq(off(v, base), 768);
  /* Nothing below the tail now: the next goes to the tail's start. */
  char *u = tfg_mem_alloc(p, 256);
  ck_assert_int_eq(off(u, base), at);
  tfg_mem_pool_free(p); /* frees live blocks too */
}
END_TEST

START_TEST(pool_capacity_refusal) {
  tfg_mem_pool *p = tfg_mem_pool_new(4096, true);
  char *a = tfg_mem_alloc(p, 4096);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_null(tfg_mem_alloc(p, 1));
  ck_assert_ptr_null(tfg_mem_alloc(p, 0));
  tfg_mem_free(p, a);
  ck_assert_ptr_null(tfg_mem_alloc(p, 4097));
  ck_assert_ptr_null(tfg_mem_alloc(p, SIZE_MAX));
  ck_assert_ptr_null(tfg_mem_alloc(p, SIZE_MAX - 10));
  tfg_mem_stats st = stats(p);
  ck_assert_int_eq(st.in_use, 0);
  ck_assert_int_eq(st.largest_free, 4096);
  ck_assert_int_eq(st.nallocs, 1); /* refusals do not count */
  tfg_mem_pool_free(p);

  /* A capacity that is not a multiple of the granule: the rest is unusable. */
  p = tfg_mem_pool_new(1000, true);
  st = stats(p);
  ck_assert_int_eq(st.capacity, 1000);
  ck_assert_int_eq(st.reserved, 768);
  a = tfg_mem_alloc(p, 768);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_null(tfg_mem_alloc(p, 1));
  tfg_mem_pool_free(p);

  /* Capacity 0 (or negative): every request is refused. */
  p = tfg_mem_pool_new(0, true);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_null(tfg_mem_alloc(p, 1));
  tfg_mem_pool_free(p);
  p = tfg_mem_pool_new(-5, false);
  ck_assert_ptr_null(tfg_mem_alloc(p, 1));
  ck_assert_int_eq(stats(p).reserved, 0);
  tfg_mem_pool_free(p);
  tfg_mem_pool_free(NULL);
}
END_TEST

START_TEST(pool_growth_policy) {
  /* 3.5 MiB, grown on demand: chunks of 1 MiB, then 2 MiB, then what is
   * left (0.5 MiB), never beyond the capacity. */
  tfg_mem_pool *p = tfg_mem_pool_new(3 * MiB + 512 * KiB, false);
  tfg_mem_stats st = stats(p);
  ck_assert_int_eq(st.reserved, 0);
  ck_assert_int_eq(st.largest_free, 0);
  char *a = tfg_mem_alloc(p, 100);
  ck_assert_ptr_nonnull(a);
  st = stats(p);
  ck_assert_int_eq(st.reserved, TFG_MEM_FIRST_CHUNK);
  ck_assert_int_eq(st.largest_free, MiB - A);
  /* 1 MiB does not fit in the first chunk's rest: a 2 MiB chunk. */
  char *b = tfg_mem_alloc(p, (size_t)MiB);
  ck_assert_ptr_nonnull(b);
  st = stats(p);
  ck_assert_int_eq(st.reserved, 3 * MiB);
  ck_assert_int_eq(st.largest_free, MiB);
  char *c = tfg_mem_alloc(p, (size_t)MiB); /* the second chunk's rest */
  ck_assert_ptr_eq(c, b + MiB);
  ck_assert_int_eq(stats(p).reserved, 3 * MiB);
  /* The next chunk would be 4 MiB; only 0.5 MiB is left of the capacity. */
  ck_assert_ptr_null(tfg_mem_alloc(p, (size_t)MiB));
  ck_assert_int_eq(stats(p).reserved, 3 * MiB);
  /* Half a MiB still fits in the first chunk: no growth. */
  char *d = tfg_mem_alloc(p, (size_t)(512 * KiB));
  ck_assert_ptr_eq(d, a + A);
  st = stats(p);
  ck_assert_int_eq(st.reserved, 3 * MiB);
  ck_assert_int_eq(st.largest_free, 512 * KiB - A);
  /* The next does not: a chunk cut down to the 0.5 MiB left. */
  char *e = tfg_mem_alloc(p, (size_t)(512 * KiB));
  ck_assert_ptr_nonnull(e);
  st = stats(p);
  ck_assert_int_eq(st.reserved, 3 * MiB + 512 * KiB);
  ck_assert_int_eq(st.largest_free, 512 * KiB - A);
  ck_assert_ptr_null(tfg_mem_alloc(p, (size_t)(512 * KiB)));
  /* Chunks never merge: after everything is freed the largest block is
   * the largest chunk, though 3.5 MiB are free in all. */
  tfg_mem_free(p, a);
  tfg_mem_free(p, b);
  tfg_mem_free(p, c);
  tfg_mem_free(p, d);
  tfg_mem_free(p, e);
  st = stats(p);
  ck_assert_int_eq(st.in_use, 0);
  ck_assert_int_eq(st.largest_free, 2 * MiB);
  ck_assert_ptr_null(tfg_mem_alloc(p, (size_t)(3 * MiB)));
  tfg_mem_pool_free(p);

  /* A first request larger than the first chunk gets a chunk of its own size
   * rounded to the doubling sequence (4 MiB here). */
  p = tfg_mem_pool_new(64 * MiB, false);
  a = tfg_mem_alloc(p, (size_t)(3 * MiB));
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(stats(p).reserved, 4 * MiB);
  tfg_mem_pool_free(p);
}
END_TEST

START_TEST(pool_alignment) {
  for (int pre = 0; pre < 2; pre++) {
    tfg_mem_pool *p = tfg_mem_pool_new(8 * MiB, pre);
    void *ptrs[64];
    for (int i = 0; i < 64; i++) {
      size_t bytes = (size_t)(i * 37 + (i % 3 == 0 ? 0 : 1)); /* 0, 38, 75, 111, ... */
      ptrs[i] = tfg_mem_alloc(p, bytes);
      ck_assert_ptr_nonnull(ptrs[i]);
      ck_assert_uint_eq((uintptr_t)ptrs[i] % TFG_MEM_ALIGN, 0);
      if (bytes) memset(ptrs[i], 0xab, bytes);
      for (int j = 0; j < i; j++) ck_assert_ptr_ne(ptrs[i], ptrs[j]);
    }
    /* A zero-byte request takes one granule. */
    int64_t expect = 0;
    for (int i = 0; i < 64; i++) {
      size_t bytes = (size_t)(i * 37 + (i % 3 == 0 ? 0 : 1));
      expect += bytes ? (int64_t)((bytes + A - 1) / A * A) : A;
    }
    ck_assert_int_eq(stats(p).in_use, expect);
    for (int i = 0; i < 64; i += 2) tfg_mem_free(p, ptrs[i]);
    for (int i = 0; i < 16; i++) {
      void *q = tfg_mem_alloc(p, (size_t)(1 + i * 91));
      ck_assert_uint_eq((uintptr_t)q % TFG_MEM_ALIGN, 0);
    }
    tfg_mem_free(p, NULL);
    tfg_mem_pool_free(p);
  }
}
END_TEST

/* ---- pool: against a reference model ----------------------------------------
 * The model keeps an owner per granule and finds best fit by brute force:
 * the smallest maximal free run that fits, the lowest address among equal
 * sizes. The pool must return exactly the model's offset every time. */

#define MODEL_GRANULES 1024

typedef struct model {
  int owner[MODEL_GRANULES]; /* 0: free, else the allocation's id */
} model;

/* The offset in granules of best fit for g granules, or -1. */
static int model_fit(const model *m, int g) {
  int best = -1, best_len = 0;
  for (int i = 0; i < MODEL_GRANULES;) {
    if (m->owner[i]) {
      i++;
      continue;
    }
    int j = i;
    while (j < MODEL_GRANULES && !m->owner[j]) j++;
    int len = j - i;
    if (len >= g && (best < 0 || len < best_len)) {
      best = i;
      best_len = len;
    }
    i = j;
  }
  return best;
}

static int model_largest(const model *m) {
  int best = 0;
  for (int i = 0; i < MODEL_GRANULES;) {
    int j = i;
    while (j < MODEL_GRANULES && !m->owner[j]) j++;
    if (j - i > best) best = j - i;
    i = j > i ? j : i + 1;
  }
  return best;
}

START_TEST(pool_random_vs_model) {
  tfg_mem_pool *p = tfg_mem_pool_new(MODEL_GRANULES * A, true);
  char *base = region_base(p);
  static model m;
  memset(&m, 0, sizeof m);
  enum { MAXLIVE = 300 };
  struct live {
    char *ptr;
    int at, g, id;
  } live[MAXLIVE];
  int nlive = 0, next_id = 1;
  int64_t in_use = 0, peak = 0, nallocs = 1; /* region_base's */
  uint64_t rng = 0x2545f4914f6cdd1dull;
  for (int step = 0; step < 30000; step++) {
    uint64_t r = xorshift(&rng);
    bool do_alloc = nlive == 0 || (nlive < MAXLIVE && r % 100 < 55);
    if (do_alloc) {
      /* Mostly small, sometimes large, sometimes exact multiples. */
      uint64_t k = xorshift(&rng);
      size_t bytes;
      switch (k % 4) {
      case 0: bytes = (size_t)(k >> 8) % 2048; break;
      case 1: bytes = ((size_t)(k >> 8) % 8 + 1) * A; break;
      case 2: bytes = (size_t)(k >> 8) % (64 * 1024); break;
      default: bytes = (size_t)(k >> 8) % 300 + 1; break;
      }
      int g = bytes == 0 ? 1 : (int)((bytes + A - 1) / A);
      int at = model_fit(&m, g);
      char *q = tfg_mem_alloc(p, bytes);
      if (at < 0) {
        ck_assert_msg(q == NULL, "step %d: pool gave %zu bytes the model could not", step, bytes);
        continue;
      }
      ck_assert_msg(q != NULL, "step %d: pool refused %zu bytes, model had offset %d", step, bytes, at);
      ck_assert_msg(off(q, base) == (int64_t)at * A, "step %d: offset %lld, model %lld", step,
                    (long long)off(q, base), (long long)at * A);
      for (int i = 0; i < g; i++) m.owner[at + i] = next_id;
      live[nlive++] = (struct live){q, at, g, next_id++};
      in_use += (int64_t)g * A;
      if (in_use > peak) peak = in_use;
      nallocs++;
    } else {
      int i = (int)(xorshift(&rng) % (uint64_t)nlive);
      tfg_mem_free(p, live[i].ptr);
      for (int j = 0; j < live[i].g; j++) m.owner[live[i].at + j] = 0;
      in_use -= (int64_t)live[i].g * A;
      live[i] = live[--nlive];
    }
    tfg_mem_stats st = stats(p);
    ck_assert_int_eq(st.in_use, in_use);
    ck_assert_int_eq(st.peak, peak);
    ck_assert_int_eq(st.nallocs, nallocs);
    ck_assert_int_eq(st.largest_free, (int64_t)model_largest(&m) * A);
  }
  while (nlive) tfg_mem_free(p, live[--nlive].ptr);
  tfg_mem_stats st = stats(p);
  ck_assert_int_eq(st.in_use, 0);
  ck_assert_int_eq(st.largest_free, MODEL_GRANULES * A);
  tfg_mem_pool_free(p);
}
END_TEST

/* ---- pool: threads ----------------------------------------------------------- */

typedef struct pool_thread_arg {
  tfg_mem_pool *p;
  int id;
  int64_t allocs;
  int bad; /* blocks whose contents another thread overwrote */
} pool_thread_arg;

/* Allocates and frees at random, filling each block with a byte of its
 * own and checking it on free: overlapping blocks would show. */
static void *pool_thread(void *arg) {
  pool_thread_arg *t = arg;
  enum { N = 48 };
  struct {
    unsigned char *ptr;
    size_t bytes;
    unsigned char tag;
  } mine[N] = {{0}};
  uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(t->id + 1);
  for (int step = 0; step < 20000; step++) {
    int i = (int)(xorshift(&rng) % N);
    if (mine[i].ptr) {
      for (size_t k = 0; k < mine[i].bytes; k++)
        if (mine[i].ptr[k] != mine[i].tag) {
          t->bad++;
          break;
        }
      tfg_mem_free(t->p, mine[i].ptr);
      mine[i].ptr = NULL;
    } else {
      size_t bytes = (size_t)(xorshift(&rng) % 20000);
      unsigned char *q = tfg_mem_alloc(t->p, bytes);
      if (!q) continue;
      t->allocs++;
      mine[i].ptr = q;
      mine[i].bytes = bytes;
      mine[i].tag = (unsigned char)(t->id * 61 + step);
      memset(q, mine[i].tag, bytes);
    }
  }
  for (int i = 0; i < N; i++) tfg_mem_free(t->p, mine[i].ptr);
  return NULL;
}

START_TEST(pool_threads) {
  for (int pre = 0; pre < 2; pre++) {
    tfg_mem_pool *p = tfg_mem_pool_new(8 * MiB, pre);
    pthread_t th[4];
    pool_thread_arg args[4];
    for (int i = 0; i < 4; i++) {
      args[i] = (pool_thread_arg){.p = p, .id = i};
      ck_assert_int_eq(pthread_create(&th[i], NULL, pool_thread, &args[i]), 0);
    }
    int64_t allocs = 0;
    for (int i = 0; i < 4; i++) {
      pthread_join(th[i], NULL);
      ck_assert_int_eq(args[i].bad, 0);
      allocs += args[i].allocs;
    }
    tfg_mem_stats st = stats(p);
    ck_assert_int_eq(st.in_use, 0);
    ck_assert_int_eq(st.nallocs, allocs);
    ck_assert_int_le(st.peak, 8 * MiB);
    ck_assert_int_le(st.reserved, 8 * MiB);
    if (pre) ck_assert_int_eq(st.largest_free, 8 * MiB);
    tfg_mem_pool_free(p);
  }
}
END_TEST

/* ---- backend helpers ----------------------------------------------------------- */

/* The order kernels ran in, shared by every backend of a test. */
typedef struct tlog {
  pthread_mutex_t mu;
  int n;
  int v[4096];
} tlog;

/* What a test kernel reads from in[0].data. */
typedef struct trec {
  tlog *log;
  int value;
  int sleep_us;
  tfg_status fail;  /* returned instead of appending */
  bool fail_msg;    /* with a message through tfg_kernel_fail */
  struct gate *gate; /* gate_kernel: blocks until opened */
} trec;

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  bool open;
} gate;

static void tlog_init(tlog *l) {
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->mu, NULL);
}

static int tlog_count(tlog *l) {
  pthread_mutex_lock(&l->mu);
  int n = l->n;
  pthread_mutex_unlock(&l->mu);
  return n;
}

static void sleep_us(int us) {
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static tfg_status log_kernel(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)node;
  (void)out;
  const trec *r = in[0].data;
  if (r->sleep_us) sleep_us(r->sleep_us);
  if (r->fail != TFG_OK) {
    if (r->fail_msg) return tfg_kernel_fail(ctx, r->fail, "label %d out of range [0, 5)", r->value);
    return r->fail;
  }
  pthread_mutex_lock(&r->log->mu);
  /* No ck_assert off the test's thread: an overflow shows as a wrong count. */
  if (r->log->n < 4096) r->log->v[r->log->n++] = r->value;
  pthread_mutex_unlock(&r->log->mu);
  return TFG_OK;
}

static tfg_status gate_kernel(tfg_kernel_ctx *ctx, const tfg_node *node, const tfg_tensor *in, tfg_tensor *out) {
  (void)ctx;
  (void)node;
  (void)out;
  gate *g = ((const trec *)in[0].data)->gate;
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cond, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return TFG_OK;
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->mu);
}

static tfg_device host_dev(int index, int64_t memory) {
  tfg_device d = {.index = index, .kind = TFG_DEVICE_HOST, .memory = memory};
  snprintf(d.name, sizeof d.name, "gpu:%d", index - 1);
  snprintf(d.hardware, sizeof d.hardware, "host device %d", index - 1);
  return d;
}

/* The records, input tensors and contexts of a test, and its host
 * devices and backends: launches point into them, so they live until the
 * end of the test. */
typedef struct bench {
  tlog log;
  trec rec[2048];
  tfg_tensor in[2048];
  tfg_tensor out;
  int n;
  tfg_kernel_ctx ctx[4]; /* one per backend: a backend's worker owns its ctx */
  tfg_node node;
  tfg_device dev[2]; /* host devices gpu:0 and gpu:1 of 1 MiB */
  tfg_backend *be[2]; /* host backends on dev[k] (NULL: none, or destroyed) */
  gate gate;          /* for gated_event */
} bench;

/* A bench with host backends on its first nb devices (0 to 2). */
static bench *bench_new(int nb) {
  bench *t = calloc(1, sizeof *t);
  ck_assert_ptr_nonnull(t);
  tlog_init(&t->log);
  pthread_mutex_init(&t->gate.mu, NULL);
  pthread_cond_init(&t->gate.cond, NULL);
  for (int k = 0; k < 2; k++) t->dev[k] = host_dev(k + 1, MiB);
  for (int k = 0; k < nb; k++) t->be[k] = tfg_backend_host_new(&t->dev[k]);
  return t;
}

/* Destroys backend k now (destroy drains its queued work). */
static void bench_destroy(bench *t, int k) {
  tfg_backend_destroy(t->be[k]);
  t->be[k] = NULL;
}

/* Destroys the backends still alive, in order, and frees the bench. */
static void bench_free(bench *t) {
  for (int k = 0; k < 2; k++)
    if (t->be[k]) bench_destroy(t, k);
  for (int i = 0; i < 4; i++) tfg_strbuf_free(&t->ctx[i].err);
  free(t);
}

/* Queues log_kernel on s of b with ctx k: it appends value after sleeping
 * us, or returns fail (with a message when msg). */
static void put_fail(bench *t, tfg_backend *b, int k, tfg_stream *s, int value, int us, tfg_status fail, bool msg) {
  ck_assert_int_lt(t->n, 2048);
  trec *r = &t->rec[t->n];
  *r = (trec){.log = &t->log, .value = value, .sleep_us = us, .fail = fail, .fail_msg = msg};
  t->in[t->n].data = r;
  tfg_backend_launch(b, s, log_kernel, &t->ctx[k], &t->node, &t->in[t->n], &t->out);
  t->n++;
}

static void put(bench *t, tfg_backend *b, int k, tfg_stream *s, int value, int us) {
  put_fail(t, b, k, s, value, us, TFG_OK, false);
}

static void put_gate(bench *t, tfg_backend *b, int k, tfg_stream *s, gate *g) {
  trec *r = &t->rec[t->n];
  *r = (trec){.gate = g};
  t->in[t->n].data = r;
  tfg_backend_launch(b, s, gate_kernel, &t->ctx[k], &t->node, &t->in[t->n], &t->out);
  t->n++;
}

/* A record held back: the bench's gate queued on a new stream of gb
 * (with ctx k), then a new event recorded behind it. Waits on the event
 * hold their streams until gate_open(&t->gate); gb's destroy frees the
 * stream. */
static tfg_event *gated_event(bench *t, tfg_backend *gb, int k) {
  tfg_stream *sg = tfg_backend_stream_create(gb);
  tfg_event *g = tfg_backend_event_create(gb);
  put_gate(t, gb, k, sg, &t->gate);
  tfg_backend_event_record(gb, sg, g);
  return g;
}

static void sync_ok(tfg_backend *b, tfg_stream *s) {
  tfg_strbuf err = {0};
  tfg_status st = tfg_backend_synchronize(b, s, &err);
  ck_assert_msg(st == TFG_OK, "synchronize: %s", err.data ? err.data : "");
  ck_assert_uint_eq(err.len, 0);
  tfg_strbuf_free(&err);
}

static void assert_log(tlog *l, const int *want, int n) {
  pthread_mutex_lock(&l->mu);
  ck_assert_int_eq(l->n, n);
  for (int i = 0; i < n; i++) ck_assert_msg(l->v[i] == want[i], "log[%d] = %d, want %d", i, l->v[i], want[i]);
  pthread_mutex_unlock(&l->mu);
}

/* ---- backend ----------------------------------------------------------------- */

START_TEST(backend_basics) {
  bench *t = bench_new(1);
  tfg_backend *b = t->be[0];
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(tfg_backend_name(b), "host");
  ck_assert_ptr_eq(tfg_backend_device(b), &t->dev[0]);
  /* The pool has the device's memory. */
  void *p = tfg_backend_alloc(b, (size_t)MiB);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_eq((uintptr_t)p % TFG_MEM_ALIGN, 0);
  ck_assert_ptr_null(tfg_backend_alloc(b, 1));
  tfg_backend_free(b, p);
  p = tfg_backend_alloc(b, 1000);
  ck_assert_ptr_nonnull(p);
  tfg_backend_free(b, p);
  /* supports_op: every op with a CPU kernel, and the three sources. */
  tfg_node node = {0};
  int supported = 0;
  for (int op = 0; op < TFG_OP_COUNT; op++) {
    node.op = (tfg_op_id)op;
    bool want = tfg_cpu_kernel(op) != NULL || op == TFG_OP_PARAM || op == TFG_OP_INPUT || op == TFG_OP_STATE;
    ck_assert_msg(tfg_backend_supports_op(b, &node) == want, "op %s", tfg_op_get(node.op)->name);
    supported += want;
  }
  ck_assert_int_gt(supported, 10);
  node.op = TFG_OP_PARAM;
  ck_assert(tfg_backend_supports_op(b, &node));
  /* Nothing queued: synchronize returns at once; a stream freed at once. */
  tfg_stream *s = tfg_backend_stream_create(b);
  sync_ok(b, s);
  tfg_backend_stream_free(b, s);
  bench_free(t);
}
END_TEST

START_TEST(backend_launch_order) {
  bench *t = bench_new(1);
  tfg_backend *b = t->be[0];
  tfg_stream *s = tfg_backend_stream_create(b);
  static int want[1000];
  for (int i = 0; i < 1000; i++) {
    put(t, b, 0, s, i, i % 100 == 0 ? 500 : 0);
    want[i] = i;
  }
  sync_ok(b, s);
  assert_log(&t->log, want, 1000);
  tfg_backend_stream_free(b, s);
  bench_free(t);
}
END_TEST

START_TEST(backend_event_chain) {
  bench *t = bench_new(1);
  tfg_backend *b = t->be[0];
  tfg_stream *sa = tfg_backend_stream_create(b), *sb = tfg_backend_stream_create(b);
  tfg_event *e = tfg_backend_event_create(b);
  /* A wait on an event never recorded waits for nothing. */
  tfg_backend_event_wait(b, sb, e);
  put(t, b, 0, sb, 0, 0);
  sync_ok(b, sb);
  /* Three slow launches on A, then the record; B's launch waits for it. */
  put(t, b, 0, sa, 1, 3000);
  put(t, b, 0, sa, 2, 3000);
  put(t, b, 0, sa, 3, 3000);
  tfg_backend_event_record(b, sa, e);
  tfg_backend_event_wait(b, sb, e);
  put(t, b, 0, sb, 4, 0);
  sync_ok(b, sb);
  ck_assert_int_eq(tlog_count(&t->log), 5);
  /* The same event recorded again: the next wait is for the new record. */
  put(t, b, 0, sa, 5, 5000);
  tfg_backend_event_record(b, sa, e);
  tfg_backend_event_wait(b, sb, e);
  put(t, b, 0, sb, 6, 0);
  sync_ok(b, sb);
  sync_ok(b, sa);
  int want[] = {0, 1, 2, 3, 4, 5, 6};
  assert_log(&t->log, want, 7);
  tfg_backend_event_free(b, e);
  bench_free(t); /* streams not freed: destroy frees them */
}
END_TEST

/* A wait is for the most recent record issued before it was queued, not a
 * later one. */
START_TEST(backend_event_generations) {
  bench *t = bench_new(2);
  tfg_backend *b = t->be[0], *gb = t->be[1];
  tfg_stream *sa = tfg_backend_stream_create(b), *sb = tfg_backend_stream_create(b);
  tfg_event *e = tfg_backend_event_create(b);
  put(t, b, 0, sa, 1, 2000);
  tfg_backend_event_record(b, sa, e); /* generation 1 */
  tfg_backend_event_wait(b, sb, e);   /* waits for generation 1 */
  put(t, b, 0, sb, 2, 0);
  tfg_event *g = gated_event(t, gb, 1);
  tfg_backend_event_wait(b, sa, g); /* A is held until the gate opens */
  put(t, b, 0, sa, 3, 0);
  tfg_backend_event_record(b, sa, e); /* generation 2: behind the gate */
  sync_ok(b, sb);              /* must not wait for generation 2 */
  int want1[] = {1, 2};
  assert_log(&t->log, want1, 2);
  tfg_backend_event_wait(b, sb, e); /* now generation 2 */
  put(t, b, 0, sb, 4, 0);
  sleep_us(20000);
  assert_log(&t->log, want1, 2);
  gate_open(&t->gate);
  sync_ok(b, sb);
  int want2[] = {1, 2, 3, 4};
  assert_log(&t->log, want2, 4);
  tfg_backend_event_free(b, e);
  tfg_backend_event_free(gb, g);
  bench_free(t);
}
END_TEST

START_TEST(backend_blocked_stream_does_not_block_others) {
  bench *t = bench_new(2);
  tfg_backend *b = t->be[0], *gb = t->be[1];
  tfg_stream *s1 = tfg_backend_stream_create(b), *s2 = tfg_backend_stream_create(b);
  tfg_event *g = gated_event(t, gb, 1);
  tfg_backend_event_wait(b, s1, g);
  put(t, b, 0, s1, -1, 0);
  /* s1 is blocked; s2 runs everything it is given meanwhile. */
  static int want[201];
  for (int i = 0; i < 200; i++) {
    put(t, b, 0, s2, i, 0);
    want[i] = i;
  }
  sync_ok(b, s2);
  assert_log(&t->log, want, 200);
  /* Still blocked a while later. */
  sleep_us(20000);
  ck_assert_int_eq(tlog_count(&t->log), 200);
  gate_open(&t->gate);
  sync_ok(b, s1);
  want[200] = -1;
  assert_log(&t->log, want, 201);
  tfg_backend_event_free(gb, g);
  tfg_backend_stream_free(b, s1);
  tfg_backend_stream_free(b, s2);
  bench_free(t);
}
END_TEST

/* Round robin: two streams with work queued behind one event take turns,
 * one operation each, once it is done. */
START_TEST(backend_round_robin) {
  bench *t = bench_new(2);
  tfg_backend *b = t->be[0], *gb = t->be[1];
  tfg_stream *s1 = tfg_backend_stream_create(b), *s2 = tfg_backend_stream_create(b);
  tfg_event *g = gated_event(t, gb, 1);
  tfg_backend_event_wait(b, s1, g);
  tfg_backend_event_wait(b, s2, g);
  for (int i = 0; i < 50; i++) {
    put(t, b, 0, s1, 2 * i, 0);
    put(t, b, 0, s2, 2 * i + 1, 0);
  }
  gate_open(&t->gate);
  sync_ok(b, s1);
  sync_ok(b, s2);
  pthread_mutex_lock(&t->log.mu);
  ck_assert_int_eq(t->log.n, 100);
  for (int i = 1; i < 100; i++)
    ck_assert_msg(t->log.v[i] % 2 != t->log.v[i - 1] % 2, "log[%d] = %d after %d", i, t->log.v[i], t->log.v[i - 1]);
  pthread_mutex_unlock(&t->log.mu);
  tfg_backend_event_free(gb, g);
  bench_free(t);
}
END_TEST

START_TEST(backend_cross_backend_ping_pong) {
  bench *t = bench_new(2);
  tfg_backend *a = t->be[0], *b = t->be[1];
  tfg_stream *sa = tfg_backend_stream_create(a), *sb = tfg_backend_stream_create(b);
  /* Events created on one backend, recorded on either: they are shared. */
  tfg_event *ea = tfg_backend_event_create(a), *eb = tfg_backend_event_create(b);
  static int want[200];
  for (int r = 0; r < 100; r++) {
    if (r > 0) tfg_backend_event_wait(a, sa, eb);
    put(t, a, 0, sa, 2 * r, r % 7 == 0 ? 300 : 0);
    tfg_backend_event_record(a, sa, ea);
    tfg_backend_event_wait(b, sb, ea);
    put(t, b, 1, sb, 2 * r + 1, r % 5 == 0 ? 300 : 0);
    tfg_backend_event_record(b, sb, eb);
    want[2 * r] = 2 * r;
    want[2 * r + 1] = 2 * r + 1;
  }
  /* Freed while still queued: the queued operations keep them alive. */
  tfg_backend_event_free(a, ea);
  tfg_backend_event_free(b, eb);
  sync_ok(b, sb);
  sync_ok(a, sa);
  assert_log(&t->log, want, 200);
  bench_free(t);
}
END_TEST

START_TEST(backend_copies) {
  bench *t = bench_new(2);
  tfg_backend *a = t->be[0], *b = t->be[1];
  tfg_stream *sa = tfg_backend_stream_create(a), *sb = tfg_backend_stream_create(b);
  enum { N = 10007 };
  unsigned char *src = malloc(N), *dst = malloc(N + 64);
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 131 + 7);
  memset(dst, 0xee, N + 64);
  unsigned char *da = tfg_backend_alloc(a, N), *db = tfg_backend_alloc(b, N);
  ck_assert_ptr_nonnull(da);
  ck_assert_ptr_nonnull(db);
  memset(db, 0, N);
  /* host -> A, A -> B (ordered by an event), B -> host. */
  tfg_backend_copy_from_host(a, sa, da, src, N);
  tfg_event *e = tfg_backend_event_create(a);
  tfg_backend_event_record(a, sa, e);
  tfg_backend_event_wait(b, sb, e);
  tfg_backend_copy_peer(b, sb, db, a, da, N);
  tfg_backend_copy_to_host(b, sb, dst + 32, db, N);
  tfg_backend_copy_to_host(b, sb, dst, db, 0); /* zero bytes: nothing */
  sync_ok(b, sb);
  ck_assert_int_eq(memcmp(dst + 32, src, N), 0);
  for (int i = 0; i < 32; i++) ck_assert_uint_eq(dst[i], 0xee);
  for (int i = N + 32; i < N + 64; i++) ck_assert_uint_eq(dst[i], 0xee);
  /* A part of a buffer into the middle of another, in stream order after
   * a full copy of the same bytes. */
  memset(dst, 0, N + 64);
  tfg_backend_copy_peer(b, sb, db + 100, a, da + 5000, 333);
  tfg_backend_copy_to_host(b, sb, dst, db, N);
  sync_ok(b, sb);
  for (int i = 0; i < N; i++) {
    unsigned char w = i >= 100 && i < 433 ? src[i - 100 + 5000] : src[i];
    ck_assert_msg(dst[i] == w, "byte %d", i);
  }
  sync_ok(a, sa);
  tfg_backend_event_free(a, e);
  tfg_backend_free(a, da);
  tfg_backend_free(b, db);
  free(src);
  free(dst);
  bench_free(t);
}
END_TEST

START_TEST(backend_failure_propagation) {
  bench *t = bench_new(2);
  tfg_backend *b = t->be[0], *c = t->be[1];
  tfg_stream *s = tfg_backend_stream_create(b), *other = tfg_backend_stream_create(b);
  tfg_stream *sc = tfg_backend_stream_create(c);
  tfg_event *e = tfg_backend_event_create(b);
  unsigned char from[64], to[64];
  memset(from, 1, sizeof from);
  memset(to, 9, sizeof to);
  put(t, b, 0, s, 1, 0);
  put_fail(t, b, 0, s, 7, 0, TFG_ERR_NUMERIC, true);
  put(t, b, 0, s, 2, 0);                                 /* skipped */
  tfg_backend_copy_from_host(b, s, to, from, sizeof to); /* skipped */
  put_fail(t, b, 0, s, 8, 0, TFG_ERR_IO, true);          /* skipped: not the first failure */
  tfg_backend_event_record(b, s, e);                     /* still completes, carrying the failure */
  /* A stream on another backend waiting on it fails the same way. */
  put(t, c, 1, sc, 10, 0);
  tfg_backend_event_wait(c, sc, e);
  put(t, c, 1, sc, 11, 0); /* skipped */
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_backend_synchronize(b, s, &err), TFG_ERR_NUMERIC);
  ck_assert_str_eq(err.data, "label 7 out of range [0, 5)");
  for (size_t i = 0; i < sizeof to; i++) ck_assert_uint_eq(to[i], 9);
  /* Sticky: every later synchronize returns it, later launches skip. */
  put(t, b, 0, s, 3, 0);
  tfg_strbuf_clear(&err);
  ck_assert_int_eq(tfg_backend_synchronize(b, s, NULL), TFG_ERR_NUMERIC);
  ck_assert_int_eq(tfg_backend_synchronize(b, s, &err), TFG_ERR_NUMERIC);
  ck_assert_str_eq(err.data, "label 7 out of range [0, 5)");
  tfg_strbuf_clear(&err);
  ck_assert_int_eq(tfg_backend_synchronize(c, sc, &err), TFG_ERR_NUMERIC);
  ck_assert_str_eq(err.data, "label 7 out of range [0, 5)");
  /* The backend's other stream is unaffected. */
  put(t, b, 0, other, 4, 0);
  sync_ok(b, other);
  tlog *l = &t->log;
  pthread_mutex_lock(&l->mu);
  ck_assert_int_eq(l->n, 3);
  /* 1 and 10 ran on different backends: either order; 4 last. */
  ck_assert((l->v[0] == 1 && l->v[1] == 10) || (l->v[0] == 10 && l->v[1] == 1));
  ck_assert_int_eq(l->v[2], 4);
  pthread_mutex_unlock(&l->mu);
  /* A kernel failing without a message gets a generic one. */
  tfg_stream *s2 = tfg_backend_stream_create(b);
  put_fail(t, b, 0, s2, 5, 0, TFG_ERR_DATA, false);
  tfg_strbuf_clear(&err);
  ck_assert_int_eq(tfg_backend_synchronize(b, s2, &err), TFG_ERR_DATA);
  ck_assert_str_eq(err.data, "kernel failed: data error");
  tfg_strbuf_free(&err);
  tfg_backend_event_free(b, e);
  bench_free(t);
}
END_TEST

/* The hook is read when a backend is created, from its options: this
 * test makes its own backends, one of d2's without the hook. */
START_TEST(backend_fault_injection) {
  bench *t = bench_new(0);
  tfg_device *d1 = &t->dev[0], *d2 = &t->dev[1];
  tfg_backend *before = tfg_backend_host_new(d2); /* no hook: no fault */
  tfg_backend_opts fo = {.sw = {.fault_device = 2, .fault_after = 3}};
  tfg_backend *a = tfg_backend_host_new_with(d1, &fo), *b = tfg_backend_host_new_with(d2, &fo);
  tfg_stream *sa = tfg_backend_stream_create(a), *sb = tfg_backend_stream_create(b);
  tfg_stream *sb2 = tfg_backend_stream_create(b);
  tfg_stream *s0 = tfg_backend_stream_create(before);
  /* Launches are counted per backend over all its streams, in call order:
   * the third is on sb2. */
  put(t, b, 1, sb, 100, 0);
  put(t, b, 1, sb, 101, 0);
  put(t, b, 1, sb2, 102, 0); /* the injected fault */
  put(t, b, 1, sb2, 103, 0); /* skipped */
  put(t, b, 1, sb, 104, 0);
  for (int i = 0; i < 5; i++) put(t, a, 0, sa, i, 0);
  for (int i = 0; i < 5; i++) put(t, before, 2, s0, 200 + i, 0);
  sync_ok(a, sa);
  sync_ok(before, s0);
  sync_ok(b, sb);
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_backend_synchronize(b, sb2, &err), TFG_ERR_DEVICE);
  ck_assert_str_eq(err.data, "injected fault (TFG_FAULT_DEVICE=2, TFG_FAULT_AFTER=3)");
  tfg_strbuf_free(&err);
  ck_assert_int_eq(tlog_count(&t->log), 3 + 5 + 5);
  pthread_mutex_lock(&t->log.mu);
  for (int i = 0; i < t->log.n; i++) ck_assert_int_ne(t->log.v[i], 102);
  for (int i = 0; i < t->log.n; i++) ck_assert_int_ne(t->log.v[i], 103);
  pthread_mutex_unlock(&t->log.mu);
  tfg_backend_destroy(a);
  tfg_backend_destroy(b);
  tfg_backend_destroy(before);
  bench_free(t);
}
END_TEST

START_TEST(backend_destroy_drains) {
  bench *t = bench_new(2);
  tfg_backend *a = t->be[0], *b = t->be[1];
  tfg_stream *sa = tfg_backend_stream_create(a), *sa2 = tfg_backend_stream_create(a);
  tfg_stream *sb = tfg_backend_stream_create(b);
  tfg_event *e = tfg_backend_event_create(a);
  for (int i = 0; i < 300; i++) put(t, a, 0, sa, i, 50);
  tfg_backend_event_record(a, sa, e);
  for (int i = 0; i < 300; i++) put(t, a, 0, sa2, 1000 + i, 20);
  tfg_backend_event_wait(b, sb, e);
  put(t, b, 1, sb, 5000, 0);
  tfg_backend_event_free(a, e);
  /* b's only work waits for a's record, still far back in a's queue:
   * destroying b waits for it rather than hanging or dropping it. */
  bench_destroy(t, 1);
  ck_assert_int_ge(tlog_count(&t->log), 301);
  bench_destroy(t, 0);
  ck_assert_int_eq(tlog_count(&t->log), 601);
  /* 5000 ran after all of sa's 300. */
  pthread_mutex_lock(&t->log.mu);
  int seen = 0;
  for (int i = 0; i < t->log.n; i++) {
    if (t->log.v[i] < 1000) seen++;
    if (t->log.v[i] == 5000) ck_assert_int_eq(seen, 300);
  }
  pthread_mutex_unlock(&t->log.mu);
  bench_free(t);
}
END_TEST

/* ---- region hooks, registration, foreign backends --------------------------- */

typedef struct regions {
  int allocs, frees, refusals;
  size_t bytes_live;
  size_t refuse_above; /* a region larger than this is refused (0: none) */
} regions;

static void *count_alloc(void *arg, size_t bytes) {
  regions *r = arg;
  if (r->refuse_above && bytes > r->refuse_above) {
    r->refusals++;
    return NULL;
  }
  r->allocs++;
  r->bytes_live += bytes;
  return aligned_alloc(TFG_MEM_ALIGN, bytes);
}

static void count_free(void *arg, void *base, size_t bytes) {
  regions *r = arg;
  r->frees++;
  r->bytes_live -= bytes;
  free(base);
}

START_TEST(pool_region_hooks) {
  /* Preallocated: one region of the whole (rounded) capacity, now. */
  regions r = {0};
  tfg_mem_pool *p = tfg_mem_pool_new_with(10 * KiB + 5, true, count_alloc, count_free, &r);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(r.allocs, 1);
  ck_assert_uint_eq(r.bytes_live, 10 * KiB);
  void *a = tfg_mem_alloc(p, 3000);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(r.allocs, 1);
  tfg_mem_pool_free(p);
  ck_assert_int_eq(r.frees, 1);
  ck_assert_uint_eq(r.bytes_live, 0);
  /* Growth: regions as needed; a refused chunk is halved down to the
   * request, and every region goes back when the pool is freed. */
  r = (regions){.refuse_above = 2 * (size_t)MiB};
  p = tfg_mem_pool_new_with(64 * MiB, false, count_alloc, count_free, &r);
  ck_assert_int_eq(r.allocs, 0);
  void *b1 = tfg_mem_alloc(p, 100), *b2 = tfg_mem_alloc(p, (size_t)MiB + 1), *b3 = tfg_mem_alloc(p, 3 * (size_t)MiB);
  ck_assert_ptr_nonnull(b1);
  ck_assert_ptr_nonnull(b2);
  ck_assert_ptr_null(b3); /* the hook refuses any region that large */
  ck_assert_int_gt(r.refusals, 0);
  ck_assert_int_eq(r.allocs, 2);
  tfg_mem_free(p, b1);
  tfg_mem_free(p, b2);
  tfg_mem_pool_free(p);
  ck_assert_int_eq(r.frees, 2);
  ck_assert_uint_eq(r.bytes_live, 0);
  /* A preallocation the hook refuses: no pool. */
  r = (regions){.refuse_above = 1};
  ck_assert_ptr_null(tfg_mem_pool_new_with(MiB, true, count_alloc, count_free, &r));
  ck_assert_int_eq(r.frees, 0);
}
END_TEST

START_TEST(backend_registration) {
  tfg_strbuf why = {0};
  /* Host devices: the host backend; preallocated when asked. */
  tfg_device h = host_dev(1, MiB);
  tfg_backend_opts o = {.preallocate = true};
  tfg_backend *b = tfg_backend_new(&h, &o, &why);
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(tfg_backend_name(b), "host");
  ck_assert(tfg_backend_is_host(b));
  /* What it declares it can do (docs/runtime.md's table): no captured
   * runs without the TFG_HOST_GRAPHS hook, no step on a device. */
  const tfg_backend_caps *caps = tfg_backend_get_caps(b);
  ck_assert(caps->sets_threads && caps->reduce_all && !caps->can_capture && !caps->device_step);
  tfg_mem_stats st;
  int64_t fr = 0;
  tfg_backend_mem_stats(b, &st, &fr);
  ck_assert_int_eq(st.reserved, MiB);
  ck_assert_int_eq(fr, MiB);
  void *p = tfg_backend_alloc(b, 1000);
  tfg_backend_mem_stats(b, &st, &fr);
  ck_assert_int_eq(fr, MiB - 1024);
  ck_assert_int_eq(st.largest_free, MiB - 1024);
  tfg_backend_free(b, p);
  tfg_backend_destroy(b);
  ck_assert_uint_eq(why.len, 0);
  /* Sim devices never run. */
  tfg_device sim = {.index = 1, .kind = TFG_DEVICE_SIM, .memory = MiB};
  ck_assert_ptr_null(tfg_backend_new(&sim, NULL, &why));
  ck_assert_str_eq(why.data, "sim devices are for tfg place and tfg plan only");
  /* A CUDA device this machine cannot have: refused, saying why. */
  tfg_strbuf_clear(&why);
  tfg_device cu = {.index = 1, .kind = TFG_DEVICE_CUDA, .physical = 200, .memory = MiB};
  ck_assert_ptr_null(tfg_backend_new(&cu, NULL, &why));
  ck_assert_msg(strstr(why.data, "this build of tfg has no CUDA backend") == why.data ||
                    strstr(why.data, "no CUDA driver or GPU on this machine") == why.data ||
                    strstr(why.data, "cuda:200 does not exist: this machine has ") == why.data,
                "why: %s", why.data);
  tfg_strbuf_free(&why);
  /* The build report names the three libraries' lines. */
  tfg_strbuf info = {0};
  tfg_backend_build_info(&info);
  ck_assert_ptr_nonnull(strstr(info.data, "cuda: "));
  ck_assert_ptr_nonnull(strstr(info.data, "cudnn: "));
  ck_assert_ptr_nonnull(strstr(info.data, "nccl: "));
  tfg_strbuf_free(&info);
}
END_TEST

/* A stand-in for a backend whose memory the host cannot read directly
 * (it declares no is_host): read_now "reads" by copying and adding 1 to
 * every byte, or fails. */
static atomic_int foreign_reads;
static bool foreign_fail;

static tfg_status foreign_read(tfg_backend *b, void *dst, const void *src, size_t bytes, tfg_strbuf *err) {
  (void)b;
  atomic_fetch_add(&foreign_reads, 1);
  if (foreign_fail) {
    tfg_strbuf_puts(err, "the device is gone");
    return TFG_ERR_DEVICE;
  }
  const unsigned char *s = src;
  unsigned char *d = dst;
  for (size_t i = 0; i < bytes; i++) d[i] = (unsigned char)(s[i] + 1);
  return TFG_OK;
}

START_TEST(backend_foreign_source) {
  bench *t = bench_new(1);
  tfg_backend *b = t->be[0];
  tfg_backend foreign = {.device = &t->dev[1], .caps = {.is_host = false}};
  foreign.i.read_now = foreign_read;
  tfg_stream *s = tfg_backend_stream_create(b);
  atomic_store(&foreign_reads, 0);
  foreign_fail = false;
  /* copy_peer from it goes through read_now, in stream order. */
  unsigned char src[64], out[64];
  for (int i = 0; i < 64; i++) src[i] = (unsigned char)i;
  unsigned char *db = tfg_backend_alloc(b, 64);
  tfg_backend_copy_peer(b, s, db, &foreign, src, 64);
  tfg_backend_copy_to_host(b, s, out, db, 64);
  sync_ok(b, s);
  for (int i = 0; i < 64; i++) ck_assert_uint_eq(out[i], (unsigned)(i + 1));
  ck_assert_int_eq(atomic_load(&foreign_reads), 1);
  /* reduce_peer from it: the source is staged through read_now. */
  float fsrc[5], *fd = tfg_backend_alloc(b, sizeof fsrc), fout[5];
  memset(fsrc, 0, sizeof fsrc); /* every byte becomes 1 on the way: 0x01010101 as a float */
  float one_bytes;
  unsigned char ones[4] = {1, 1, 1, 1};
  memcpy(&one_bytes, ones, 4);
  float start[5] = {1, 2, 3, 4, 5};
  tfg_backend_copy_from_host(b, s, fd, start, sizeof start);
  tfg_backend_reduce_peer(b, s, fd, &foreign, fsrc, 5, TFG_DTYPE_F32, 1.0);
  tfg_backend_copy_to_host(b, s, fout, fd, sizeof fout);
  sync_ok(b, s);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(fout[i], start[i] + one_bytes);
  ck_assert_int_eq(atomic_load(&foreign_reads), 2);
  /* A read that fails fails the stream, where it began. */
  foreign_fail = true;
  tfg_backend_copy_peer(b, s, db, &foreign, src, 64);
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_backend_synchronize(b, s, &err), TFG_ERR_DEVICE);
  ck_assert_str_eq(err.data, "the device is gone");
  ck_assert(tfg_backend_failed_here(b, s));
  ck_assert_int_eq(tfg_backend_failed_node(b, s), -1);
  tfg_strbuf_free(&err);
  tfg_backend_free(b, db);
  tfg_backend_free(b, fd);
  bench_free(t);
}
END_TEST

/* A stand-in for the CUDA side of an event: export notes what the host
 * asked for; the test completes it later, as the GPU's callback would. */
static tfg_event *exported_e;
static uint64_t exported_gen;
static int exports;

static void fake_export(tfg_event *e, uint64_t gen) {
  exported_e = e;
  exported_gen = gen;
  exports++;
}

typedef struct done_waiter {
  tfg_event *e;
  uint64_t gen;
  tfg_status st;
  tfg_strbuf msg;
} done_waiter;

static void *wait_done_thread(void *arg) {
  done_waiter *w = arg;
  w->st = tfg_event_wait_done(w->e, w->gen, &w->msg);
  return NULL;
}

/* The event module alone (runtime/event.h), with a waiter that counts its
 * wakes: what a host worker relies on when it registers. */
typedef struct count_waiter {
  tfg_event_waiter w;
  int wakes;
} count_waiter;

static void count_wake(tfg_event_waiter *w) { ((count_waiter *)w)->wakes++; }

START_TEST(event_waiters) {
  tfg_event *e = tfg_event_new();
  void (*export)(tfg_event *, uint64_t) = fake_export;
  ck_assert_uint_eq(tfg_event_latest(e, &export), 0); /* never recorded */
  ck_assert_ptr_null(export);
  count_waiter a = {.w.wake = count_wake}, b = {.w.wake = count_wake};
  uint64_t g1 = tfg_event_issue(e, -1), g2 = tfg_event_issue(e, -1);
  ck_assert_uint_eq(tfg_event_latest(e, &export), 2);
  ck_assert_ptr_null(export); /* a host record: nothing to export */
  tfg_event_add_waiter(e, &a.w);
  tfg_event_add_waiter(e, &b.w);
  ck_assert(!tfg_event_is_done(e, g1));
  tfg_event_complete(e, g2, TFG_OK, NULL); /* out of order: the later record first */
  ck_assert(tfg_event_is_done(e, g1) && tfg_event_is_done(e, g2));
  ck_assert_int_eq(a.wakes, 1);
  ck_assert_int_eq(b.wakes, 1);
  tfg_event_complete(e, g1, TFG_ERR_DEVICE, "late"); /* older than done: ignored */
  ck_assert_int_eq(a.wakes, 1);
  tfg_strbuf msg = {0};
  ck_assert_int_eq(tfg_event_end_wait(e, &a.w, &msg), TFG_OK);
  ck_assert_uint_eq(msg.len, 0);
  /* A failed record wakes only the waiter still registered and carries its message. */
  uint64_t g3 = tfg_event_issue(e, -1);
  tfg_event_complete(e, g3, TFG_ERR_NUMERIC, "nan in loss");
  ck_assert_int_eq(a.wakes, 1);
  ck_assert_int_eq(b.wakes, 2);
  ck_assert_int_eq(tfg_event_end_wait(e, &b.w, &msg), TFG_ERR_NUMERIC);
  ck_assert_str_eq(msg.data, "nan in loss");
  ck_assert_int_eq(tfg_event_end_wait(e, NULL, NULL), TFG_ERR_NUMERIC); /* an unregistered wait */
  tfg_strbuf_free(&msg);
  tfg_event_unref(e); /* asserts the waiter list is empty */
}
END_TEST

START_TEST(backend_event_from_gpu) {
  bench *t = bench_new(1);
  tfg_backend *b = t->be[0];
  tfg_stream *s = tfg_backend_stream_create(b);
  tfg_event *e = tfg_backend_event_create(b);
  e->ext_export = fake_export;
  exports = 0;
  /* A record "issued on GPU 0": the host wait asks for an export of it
   * and then waits until that generation is completed. */
  uint64_t g = tfg_event_issue(e, 0);
  ck_assert_uint_eq(g, 1);
  tfg_backend_event_wait(b, s, e);
  ck_assert_int_eq(exports, 1);
  ck_assert_ptr_eq(exported_e, e);
  ck_assert_uint_eq(exported_gen, 1);
  put(t, b, 0, s, 7, 0);
  sleep_us(20000);
  ck_assert_int_eq(tlog_count(&t->log), 0); /* still waiting */
  /* A thread blocked in tfg_event_wait_done is released by the same completion. */
  done_waiter w = {.e = e, .gen = 1};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, wait_done_thread, &w), 0);
  tfg_event_complete(e, exported_gen, TFG_OK, NULL);
  sync_ok(b, s);
  ck_assert_int_eq(tlog_count(&t->log), 1);
  pthread_join(th, NULL);
  ck_assert_int_eq(w.st, TFG_OK);
  /* A host record issues no export; a GPU's record that carries a failure
   * fails the waiting host stream (not where it began). */
  tfg_backend_event_record(b, s, e);
  tfg_backend_event_wait(b, s, e);
  ck_assert_int_eq(exports, 1);
  sync_ok(b, s);
  g = tfg_event_issue(e, 0);
  tfg_backend_event_wait(b, s, e);
  ck_assert_int_eq(exports, 2);
  put(t, b, 0, s, 8, 0);
  tfg_event_complete(e, g, TFG_ERR_NUMERIC, "embedding id 7 is outside [0, 3)");
  tfg_strbuf err = {0};
  ck_assert_int_eq(tfg_backend_synchronize(b, s, &err), TFG_ERR_NUMERIC);
  ck_assert_str_eq(err.data, "embedding id 7 is outside [0, 3)");
  ck_assert(!tfg_backend_failed_here(b, s));
  ck_assert_int_eq(tlog_count(&t->log), 1); /* 8 skipped */
  w = (done_waiter){.e = e, .gen = g};
  wait_done_thread(&w); /* done already: returns at once, with the failure */
  ck_assert_int_eq(w.st, TFG_ERR_NUMERIC);
  ck_assert_str_eq(w.msg.data, "embedding id 7 is outside [0, 3)");
  tfg_strbuf_free(&w.msg);
  tfg_strbuf_free(&err);
  tfg_backend_event_free(b, e);
  bench_free(t);
}
END_TEST

Suite *suite_backend(void) {
  Suite *s = suite_create("backend");
  TCase *pool = tcase_create("pool");
  tcase_set_timeout(pool, 30);
  tcase_add_test(pool, pool_offsets_and_coalescing);
  tcase_add_test(pool, pool_best_fit_smallest);
  tcase_add_test(pool, pool_capacity_refusal);
  tcase_add_test(pool, pool_growth_policy);
  tcase_add_test(pool, pool_alignment);
  tcase_add_test(pool, pool_random_vs_model);
  tcase_add_test(pool, pool_threads);
  tcase_add_test(pool, pool_region_hooks);
  suite_add_tcase(s, pool);
  TCase *host = tcase_create("host");
  tcase_set_timeout(host, 30);
  tcase_add_test(host, backend_basics);
  tcase_add_test(host, backend_launch_order);
  tcase_add_test(host, backend_event_chain);
  tcase_add_test(host, backend_event_generations);
  tcase_add_test(host, backend_blocked_stream_does_not_block_others);
  tcase_add_test(host, backend_round_robin);
  tcase_add_test(host, backend_cross_backend_ping_pong);
  tcase_add_test(host, backend_copies);
  tcase_add_test(host, backend_failure_propagation);
  tcase_add_test(host, backend_fault_injection);
  tcase_add_test(host, backend_destroy_drains);
  tcase_add_test(host, backend_registration);
  tcase_add_test(host, backend_foreign_source);
  tcase_add_test(host, backend_event_from_gpu);
  tcase_add_test(host, event_waiters);
  suite_add_tcase(s, host);
  return s;
}
