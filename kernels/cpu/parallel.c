/* kernels/cpu/parallel.c: worker threads that run chunks of a loop.
 *
 * One job at a time: the caller publishes {body, arg, chunks} under the
 * mutex, wakes the workers, takes chunks itself from the same atomic
 * counter, then waits until every chunk is finished. Workers sleep on a
 * condition variable between jobs, so an idle pool costs nothing. */
#include "kernels/cpu/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/assert.h"

struct tfg_pool {
  int nthreads; /* workers, not counting the caller */
  pthread_t *threads;
  pthread_mutex_t job; /* one tfg_parallel_for at a time */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  uint64_t generation; /* bumped per job so workers see a new one */
  bool quit;
  /* the current job */
  tfg_parallel_body body;
  void *arg;
  int64_t n, nchunks;
  atomic_llong next;     /* next chunk to take */
  int64_t finished;      /* chunks done, under mu */
};

int64_t tfg_parallel_grain(int64_t work, int64_t cost) {
  return cost >= work ? 1 : work / (cost > 0 ? cost : 1);
}

int64_t tfg_parallel_chunks(const tfg_pool *p, int64_t n, int64_t grain) {
  if (!p || p->nthreads == 0 || n <= grain) return 1;
  if (grain < 1) grain = 1;
  int64_t by_size = n / grain;
  /* A few chunks per thread balance uneven cores without much overhead. */
  int64_t by_threads = 4 * (int64_t)(p->nthreads + 1);
  int64_t c = by_size < by_threads ? by_size : by_threads;
  return c < 1 ? 1 : c;
}

void tfg_parallel_chunk_range(int64_t n, int64_t nchunks, int64_t k, int64_t *lo, int64_t *hi) {
  *lo = n * k / nchunks;
  *hi = n * (k + 1) / nchunks;
}

/* Takes and runs chunks of the current job until none are left. */
static void run_chunks(tfg_pool *p) {
  int64_t done = 0;
  for (;;) {
    int64_t k = atomic_fetch_add(&p->next, 1);
    if (k >= p->nchunks) break;
    int64_t lo, hi;
    tfg_parallel_chunk_range(p->n, p->nchunks, k, &lo, &hi);
    p->body(p->arg, lo, hi, k);
    done++;
  }
  if (done) {
    pthread_mutex_lock(&p->mu);
    p->finished += done;
    if (p->finished == p->nchunks) pthread_cond_broadcast(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

static void *worker(void *arg) {
  tfg_pool *p = arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

tfg_pool *tfg_pool_new(int nthreads) {
  if (nthreads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = n > 0 ? (int)n : 1;
  }
  tfg_pool *p = calloc(1, sizeof *p);
  TFG_ASSERT(p != NULL);
  p->nthreads = nthreads - 1;
  pthread_mutex_init(&p->job, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  if (p->nthreads) {
    p->threads = calloc((size_t)p->nthreads, sizeof *p->threads);
    TFG_ASSERT(p->threads != NULL);
    for (int i = 0; i < p->nthreads; i++)
      TFG_ASSERT(pthread_create(&p->threads[i], NULL, worker, p) == 0);
  }
  return p;
}

void tfg_pool_free(tfg_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = true;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  free(p->threads);
  pthread_mutex_destroy(&p->job);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  free(p);
}

int tfg_pool_threads(const tfg_pool *p) { return p ? p->nthreads + 1 : 1; }

void tfg_parallel_for(tfg_pool *p, int64_t n, int64_t grain, tfg_parallel_body body, void *arg) {
  if (n <= 0) return;
  int64_t nchunks = tfg_parallel_chunks(p, n, grain);
  if (nchunks == 1) {
    body(arg, 0, n, 0);
    return;
  }
  pthread_mutex_lock(&p->job);
  pthread_mutex_lock(&p->mu);
  p->body = body;
  p->arg = arg;
  p->n = n;
  p->nchunks = nchunks;
  p->finished = 0;
  atomic_store(&p->next, 0);
  p->generation++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p);
  pthread_mutex_lock(&p->mu);
  while (p->finished < p->nchunks) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->job);
}
