/* kernels/cpu/parallel.h: a small pool of worker threads for CPU kernels.
 *
 *   tfg_pool *p = tfg_pool_new(0);            // 0: one thread per core
 *   tfg_parallel_for(p, n, 1 << 14, body, arg); // body(arg, lo, hi, k) on chunk k
 *   tfg_pool_free(p);
 *
 * Chunks are fixed by n, grain and the pool's thread count (never by
 * timing), and each covers a contiguous range, so a kernel whose chunks
 * write disjoint outputs is deterministic, and a reduction that combines
 * per-chunk partials in chunk order gives the same bits on every run with
 * the same thread count (not across thread counts: the chunking differs). */
#ifndef TFG_PARALLEL_H
#define TFG_PARALLEL_H

#include <stdint.h>

typedef struct tfg_pool tfg_pool;

/* A pool of nthreads workers (0: the number of online cores; 1: none,
 * everything runs on the caller). */
tfg_pool *tfg_pool_new(int nthreads);
void tfg_pool_free(tfg_pool *p);
int tfg_pool_threads(const tfg_pool *p);

typedef void (*tfg_parallel_body)(void *arg, int64_t lo, int64_t hi, int64_t chunk);

/* Calls body(arg, lo, hi, k) for chunk k = [lo, hi) of [0, n), chunks of
 * at least grain elements, on the pool's threads and the caller's, and
 * returns when all are done. With p NULL, or n <= grain, runs
 * body(arg, 0, n, 0) inline. Callers on several threads take turns; a
 * body must not call tfg_parallel_for on the same pool. */
void tfg_parallel_for(tfg_pool *p, int64_t n, int64_t grain, tfg_parallel_body body, void *arg);

/* The number of chunks tfg_parallel_for(p, n, grain, ...) uses, and the
 * bounds of chunk k: for per-chunk partial sums combined in order. */
int64_t tfg_parallel_chunks(const tfg_pool *p, int64_t n, int64_t grain);

/* The grain, in items, that gives a chunk about `work` units of work when
 * each item costs `cost` units: work / cost, at least 1 (a cost of 0 or
 * less counts as 1). */
int64_t tfg_parallel_grain(int64_t work, int64_t cost);
void tfg_parallel_chunk_range(int64_t n, int64_t nchunks, int64_t k, int64_t *lo, int64_t *hi);

#endif
