/* runtime/mem.h: a device's memory pool: best fit with coalescing over a
 * region of a fixed capacity (TensorFlow's BFC allocator, simplified).
 *
 *   tfg_mem_pool *p = tfg_mem_pool_new(512 << 20, false);  // 512 MiB, grown on demand
 *   void *a = tfg_mem_alloc(p, 1000);    // 256-byte aligned; NULL: does not fit
 *   tfg_mem_stats st;
 *   tfg_mem_pool_stats(p, &st);          // in_use 1024 (sizes round up to 256)
 *   tfg_mem_free(p, a);
 *   tfg_mem_pool_free(p);
 *
 * Blocks. Every request is rounded up to a multiple of TFG_MEM_ALIGN (a
 * request of 0 bytes takes one TFG_MEM_ALIGN block, so every successful
 * alloc returns a distinct pointer). A request takes the smallest free
 * block that fits (the lowest-addressed one among equals), found in a
 * tree of free blocks ordered by (size, address): O(log n), not a scan.
 * What the block has beyond the request is split off as a new free block
 * at the higher address, so in_use is exactly the sum of the rounded
 * sizes of the live allocations. Freeing a block merges it with its free
 * neighbours at once, so no two free blocks are ever adjacent.
 *
 * Region and growth. preallocate: the whole capacity (rounded down to
 * TFG_MEM_ALIGN) is one host allocation made now, and the first
 * allocation sits at its start, so the offsets of a sequence of
 * allocations are predictable (the tests rely on it). Otherwise the pool
 * starts empty and grows by chunks when no free block fits: the first
 * chunk is TFG_MEM_FIRST_CHUNK bytes and each next one doubles (a chunk is
 * at least as large as the request that caused it, and is cut down to
 * what the capacity still allows); when the host refuses a chunk, halves
 * are tried down to the request's size. Chunks are separate host
 * allocations, so blocks never merge across a chunk boundary, and chunks
 * are kept until the pool is freed (never returned early): a pool that
 * grew can therefore fragment where a preallocated one would not, which
 * is why the memory planner's arena is one allocation. The sum of the
 * chunks never exceeds the capacity.
 *
 * Regions come from the host allocator (aligned_alloc) unless the pool
 * is made with tfg_mem_pool_new_with, whose region hooks give them
 * instead: the CUDA backend's pools take their regions from cudaMalloc.
 * The pool never reads or writes its memory, only the addresses, so the
 * same bookkeeping serves any address space.
 *
 * Every function is thread-safe (one mutex per pool); none blocks beyond
 * that mutex and the region allocator. */
#ifndef TFG_MEM_H
#define TFG_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFG_MEM_ALIGN 256                  /* alignment and size granule of every block */
#define TFG_MEM_FIRST_CHUNK ((int64_t)1 << 20) /* the first growth of a pool not preallocated */

typedef struct tfg_mem_pool tfg_mem_pool;

typedef struct tfg_mem_stats {
  int64_t capacity;     /* as given to tfg_mem_pool_new */
  int64_t in_use;       /* bytes in live allocations (rounded sizes) */
  int64_t peak;         /* the largest in_use so far */
  int64_t largest_free; /* the largest free block in memory already reserved (TF's
                         * largest_free_block_bytes); a pool not preallocated may still
                         * serve a larger request by growing: see reserved */
  int64_t nallocs;      /* successful allocations over the pool's life */
  int64_t reserved;     /* bytes taken from the host so far (the capacity, rounded
                         * down, when preallocated) */
} tfg_mem_stats;

/* A pool of capacity bytes. preallocate: the region is allocated now and
 * NULL is returned when the host cannot give it; otherwise nothing is
 * allocated until the first tfg_mem_alloc. A capacity below TFG_MEM_ALIGN
 * gives a pool that refuses every request. Free with tfg_mem_pool_free. */
tfg_mem_pool *tfg_mem_pool_new(int64_t capacity, bool preallocate);
/* Gives a region of exactly bytes bytes (a multiple of TFG_MEM_ALIGN)
 * aligned to TFG_MEM_ALIGN, or NULL when it cannot; arg is the pool's. */
typedef void *(*tfg_mem_region_alloc_fn)(void *arg, size_t bytes);
/* Returns a region region_alloc gave (base, of bytes bytes). */
typedef void (*tfg_mem_region_free_fn)(void *arg, void *base, size_t bytes);

/* tfg_mem_pool_new with the regions (the preallocated one, or the chunks
 * a growing pool adds) from region_alloc and returned to region_free
 * when the pool is freed. Both hooks are called under the pool's mutex;
 * NULL hooks mean the host allocator. */
tfg_mem_pool *tfg_mem_pool_new_with(int64_t capacity, bool preallocate, tfg_mem_region_alloc_fn region_alloc,
                                    tfg_mem_region_free_fn region_free, void *arg);
/* Frees the pool and all its memory, including allocations still live
 * (their pointers dangle afterwards). NULL is allowed. */
void tfg_mem_pool_free(tfg_mem_pool *p);

/* bytes of memory aligned to TFG_MEM_ALIGN, or NULL when no free block
 * fits and the pool cannot grow enough (capacity, or the host refused);
 * the caller reports the OOM. The memory is not cleared. */
void *tfg_mem_alloc(tfg_mem_pool *p, size_t bytes);
/* Returns ptr (from tfg_mem_alloc on p, not yet freed) to the pool; NULL
 * is ignored. Any other pointer is a bug and fails a TFG_ASSERT. */
void tfg_mem_free(tfg_mem_pool *p, void *ptr);

void tfg_mem_pool_stats(tfg_mem_pool *p, tfg_mem_stats *out);

#endif
