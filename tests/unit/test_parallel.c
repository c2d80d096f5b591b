/* tests/unit/test_parallel.c: the CPU thread pool (kernels/cpu/parallel.c)
 * under stress: many tiny jobs in a row, more threads than cores, and two
 * callers sharing one pool. Every chunk of every job must run exactly once,
 * on that job's own arg, and every call must return (Check's timeout turns
 * a hang into a failure). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/parallel.h"
#include "tests/unit/unit.h"

enum { STRESS_MAX_CHUNKS = 64 };

/* One job's record, on the caller's stack: a body that runs after its job
 * returned (a stale arg) would write to another job's frame, and the id
 * check catches it. */
typedef struct {
  uint64_t id;
  const _Atomic uint64_t *current; /* the id of the job in flight */
  atomic_int runs[STRESS_MAX_CHUNKS];
  atomic_int stale; /* bodies run while another job was in flight */
  int64_t n;
  int spin; /* busy iterations per chunk: 0 for most jobs, so the caller
             * often finishes alone and workers wake late */
} stress_job;

static void stress_body(void *arg, int64_t lo, int64_t hi, int64_t k) {
  stress_job *j = arg;
  if (atomic_load(j->current) != j->id || lo < 0 || hi > j->n || lo >= hi || k < 0 ||
      k >= STRESS_MAX_CHUNKS) {
    atomic_fetch_add(&j->stale, 1);
    return;
  }
  atomic_fetch_add(&j->runs[k], 1);
  for (volatile int i = 0; i < j->spin; i++) {
  }
}

typedef struct {
  tfg_pool *pool;
  long jobs;
  uint64_t seed;
  long bad; /* jobs with a chunk run twice, never, or on a stale arg */
} stress_caller;

/* Runs `jobs` jobs of 2..STRESS_MAX_CHUNKS items (grain 1, so as many
 * chunks as the pool allows) and counts the bad ones. */
static void *stress_run(void *arg) {
  stress_caller *c = arg;
  _Atomic uint64_t current = 0;
  uint64_t x = c->seed;
  for (long i = 0; i < c->jobs; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    stress_job j = {.id = (uint64_t)i + 1, .current = &current};
    j.n = 2 + (int64_t)((x >> 33) % (STRESS_MAX_CHUNKS - 1));
    j.spin = (x >> 20) % 8 == 0 ? (int)((x >> 40) % 2000) : 0;
    atomic_store(&current, j.id);
    tfg_parallel_for(c->pool, j.n, 1, stress_body, &j);
    int64_t nchunks = tfg_parallel_chunks(c->pool, j.n, 1);
    bool ok = atomic_load(&j.stale) == 0;
    for (int64_t k = 0; k < STRESS_MAX_CHUNKS; k++)
      ok = ok && atomic_load(&j.runs[k]) == (k < nchunks ? 1 : 0);
    /* a late worker still inside this job would now write here: the next
     * job's id no longer matches (stale), or its counts change */
    atomic_store(&current, 0);
    if (!ok) c->bad++;
  }
  return NULL;
}

/* 4 workers and the caller on (typically) 2 cores: workers wake late, which
 * is what once let one carry a chunk index into the next job. */
START_TEST(pool_many_tiny_jobs_run_each_chunk_once) {
  tfg_pool *p = tfg_pool_new(5);
  stress_caller c = {.pool = p, .jobs = 1000000, .seed = 1};
  stress_run(&c);
  ck_assert_msg(c.bad == 0, "%ld of %ld jobs ran a chunk twice, never, or on a stale arg", c.bad,
                c.jobs);
  tfg_pool_free(p);
}
END_TEST

/* Two threads calling tfg_parallel_for on one pool take turns. */
START_TEST(pool_two_callers_take_turns) {
  tfg_pool *p = tfg_pool_new(3);
  stress_caller c[2] = {{.pool = p, .jobs = 500000, .seed = 2},
                        {.pool = p, .jobs = 500000, .seed = 3}};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, stress_run, &c[1]), 0);
  stress_run(&c[0]);
  pthread_join(t, NULL);
  ck_assert_msg(c[0].bad == 0 && c[1].bad == 0, "bad jobs: %ld and %ld", c[0].bad, c[1].bad);
  tfg_pool_free(p);
}
END_TEST

Suite *suite_parallel(void) {
  Suite *s = suite_create("parallel");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, pool_many_tiny_jobs_run_each_chunk_once);
  tcase_add_test(tc, pool_two_callers_take_turns);
  suite_add_tcase(s, tc);
  return s;
}
