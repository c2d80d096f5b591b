/* kernels/cpu/parallel.c: worker threads that run chunks of a loop.
 *
 * One job at a time: the caller publishes {body, arg, chunks} under the
 * mutex, wakes the workers, takes chunks itself from the job's atomic
 * counter, then waits until every chunk is finished *and* every worker
 * that joined the job has left it. Workers join only under the mutex while
 * the job is open, so none can carry a chunk index, a body or an arg from
 * one job into the next (otherwise a late worker could run a chunk of the
 * next job twice, or the last job's body on the caller's dead frame, and
 * its count could push `finished` past the total so that the caller slept
 * forever). Workers
 * sleep on a condition variable between jobs, so an idle pool costs
 * nothing. */
#include "kernels/cpu/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/assert.h"

/* One job's description. The caller fills it under mu before it bumps the
 * generation; it does not change until the caller has seen every chunk
 * finished and every worker that joined the job leave it, so a worker may
 * read it without the lock while it is inside (counted in `inside`). */
typedef struct {
  tfg_parallel_body body;
  void *arg;
  int64_t n, nchunks;
  atomic_llong next; /* next chunk to take */
} pool_job;

struct tfg_pool {
  int nthreads; /* workers, not counting the caller */
  pthread_t *threads;
  pthread_mutex_t job_lock; /* one tfg_parallel_for at a time */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  uint64_t generation; /* bumped per job so workers see a new one */
  bool quit;
  bool open;        /* a job is running: workers may join it (under mu) */
  pool_job job;     /* the current job (see pool_job) */
  int64_t finished; /* chunks done, under mu */
  int inside;       /* workers that joined the current job and have not left, under mu */
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

/* Takes and runs chunks of job j until none are left; returns how many it
 * ran. */
static int64_t run_chunks(pool_job *j) {
  int64_t done = 0;
  for (;;) {
    int64_t k = atomic_fetch_add(&j->next, 1);
    if (k >= j->nchunks) break;
    int64_t lo, hi;
    tfg_parallel_chunk_range(j->n, j->nchunks, k, &lo, &hi);
    j->body(j->arg, lo, hi, k);
    done++;
  }
  return done;
}

/* The caller waits for this under mu: every chunk finished and every worker
 * that joined gone, so the job (and the caller's frame that `arg` points
 * into) is no longer read by anyone. */
static bool job_over(const tfg_pool *p) { return p->finished >= p->job.nchunks && p->inside == 0; }

/* A worker joins a job only under mu while it is open, so a worker that
 * wakes late (the job already over, or the next one published) never reads
 * a stale body, arg or counter: it joins the job that is open then, or
 * none. */
static void *worker(void *arg) {
  tfg_pool *p = arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    if (!p->open) continue;
    p->inside++;
    pthread_mutex_unlock(&p->mu);
    int64_t done = run_chunks(&p->job);
    pthread_mutex_lock(&p->mu);
    p->finished += done;
    p->inside--;
    if (job_over(p)) pthread_cond_broadcast(&p->done);
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
  pthread_mutex_init(&p->job_lock, NULL);
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
  pthread_mutex_destroy(&p->job_lock);
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
  pthread_mutex_lock(&p->job_lock);
  pthread_mutex_lock(&p->mu);
  p->job.body = body;
  p->job.arg = arg;
  p->job.n = n;
  p->job.nchunks = nchunks;
  atomic_store(&p->job.next, 0);
  p->finished = 0;
  p->open = true;
  p->generation++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  int64_t done = run_chunks(&p->job);
  pthread_mutex_lock(&p->mu);
  p->finished += done;
  while (!job_over(p)) pthread_cond_wait(&p->done, &p->mu);
  p->open = false;
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->job_lock);
}
