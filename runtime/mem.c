/* runtime/mem.c: the best-fit pool with coalescing (see mem.h for the
 * policy).
 *
 * Each block of a chunk is a record outside the memory it describes (the
 * memory is a device's: the pool never writes into it, so a CUDA backend
 * can reuse this bookkeeping over device pointers). A chunk's blocks form
 * a doubly linked list in address order, which is what coalescing walks.
 * Every block is in exactly one of two treaps (randomized search trees,
 * expected O(log n) per operation): the free treap ordered by (size,
 * address), where best fit is a lower bound, and the used treap ordered by
 * address, where tfg_mem_free finds its block. One set of tree links per
 * block is enough because a block is never in both. Treap priorities are a
 * hash of the block's address rather than random numbers, so a run is
 * reproducible and no generator state is shared. */
#include "runtime/mem.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/assert.h"
#include "base/grow.h"

typedef struct block {
  uintptr_t addr;             /* start of the block */
  size_t size;                /* a multiple of TFG_MEM_ALIGN, never 0 */
  struct block *prev, *next;  /* address neighbours in the same chunk */
  struct block *left, *right; /* links in the free or the used treap */
  uint64_t prio;              /* treap priority: a hash of addr */
  bool free;
} block;

typedef struct chunk {
  void *base;
  size_t size;
} chunk;

struct tfg_mem_pool {
  pthread_mutex_t mu;
  int64_t capacity;
  size_t usable;     /* capacity rounded down to TFG_MEM_ALIGN (0 if negative) */
  size_t reserved;   /* the sum of the chunks' sizes */
  size_t next_chunk; /* what the next growth asks for (doubles) */
  chunk *chunks;
  size_t nchunks, chunks_cap;
  block *free_tree, *used_tree;
  block *spare; /* recycled block records, linked through next */
  int64_t in_use, peak, nallocs;
  tfg_mem_region_alloc_fn region_alloc; /* where regions come from (mem.h) */
  tfg_mem_region_free_fn region_free;
  void *region_arg;
};

/* The default region hooks: the host allocator. */
static void *host_region_alloc(void *arg, size_t bytes) {
  (void)arg;
  return aligned_alloc(TFG_MEM_ALIGN, bytes);
}

static void host_region_free(void *arg, void *base, size_t bytes) {
  (void)arg;
  (void)bytes;
  free(base);
}

/* ---- block records ------------------------------------------------------ */

static uint64_t addr_hash(uintptr_t a) {
  /* splitmix64's finalizer: neighbouring addresses get unrelated priorities. */
  uint64_t z = (uint64_t)a + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static block *block_new(tfg_mem_pool *p, uintptr_t addr, size_t size) {
  block *b = p->spare;
  if (b) p->spare = b->next;
  else b = malloc(sizeof *b);
  TFG_ASSERT(b != NULL);
  *b = (block){.addr = addr, .size = size};
  return b;
}

static void block_recycle(tfg_mem_pool *p, block *b) {
  b->next = p->spare;
  p->spare = b;
}

/* Merges hi, the block right after lo, into lo: lo's record stays and
 * grows, hi's is recycled. */
static void block_absorb(tfg_mem_pool *p, block *lo, block *hi) {
  lo->size += hi->size;
  lo->next = hi->next;
  if (hi->next) hi->next->prev = lo;
  block_recycle(p, hi);
}

/* ---- treaps ---------------------------------------------------------------
 * by_size selects the order: (size, addr) for the free treap, addr for the
 * used one. Addresses are unique, so keys are. */

static int block_cmp(const block *a, const block *b, bool by_size) {
  if (by_size && a->size != b->size) return a->size < b->size ? -1 : 1;
  return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static block *rotate_right(block *t) {
  block *l = t->left;
  t->left = l->right;
  l->right = t;
  return l;
}

static block *rotate_left(block *t) {
  block *r = t->right;
  t->right = r->left;
  r->left = t;
  return r;
}

static block *treap_insert(block *t, block *n, bool by_size) {
  if (!t) return n;
  if (block_cmp(n, t, by_size) < 0) {
    t->left = treap_insert(t->left, n, by_size);
    if (t->left->prio > t->prio) t = rotate_right(t);
  } else {
    t->right = treap_insert(t->right, n, by_size);
    if (t->right->prio > t->prio) t = rotate_left(t);
  }
  return t;
}

/* Joins two treaps where every key of a is below every key of b. */
static block *treap_join(block *a, block *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->right = treap_join(a->right, b);
    return a;
  }
  b->left = treap_join(a, b->left);
  return b;
}

/* Removes n, which must be in t. */
static block *treap_remove(block *t, block *n, bool by_size) {
  TFG_ASSERT(t != NULL);
  int c = block_cmp(n, t, by_size);
  if (c < 0)
    t->left = treap_remove(t->left, n, by_size);
  else if (c > 0)
    t->right = treap_remove(t->right, n, by_size);
  else
    return treap_join(t->left, t->right);
  return t;
}

static void free_insert(tfg_mem_pool *p, block *b) {
  b->free = true;
  b->left = b->right = NULL;
  b->prio = addr_hash(b->addr);
  p->free_tree = treap_insert(p->free_tree, b, true);
}

static void free_remove(tfg_mem_pool *p, block *b) {
  p->free_tree = treap_remove(p->free_tree, b, true);
  b->free = false;
}

/* The smallest free block of at least size bytes (lowest address among
 * equals), or NULL. */
static block *free_best_fit(const tfg_mem_pool *p, size_t size) {
  block *best = NULL;
  for (block *t = p->free_tree; t;) {
    if (t->size >= size) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

/* ---- chunks --------------------------------------------------------------- */

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Takes a chunk of exactly size bytes (a multiple of TFG_MEM_ALIGN) from
 * the region allocator and makes it one free block; false when it
 * refuses. */
static bool chunk_add(tfg_mem_pool *p, size_t size) {
  void *base = p->region_alloc(p->region_arg, size);
  if (!base) return false;
  TFG_ASSERT((uintptr_t)base % TFG_MEM_ALIGN == 0 && "a region must be aligned to TFG_MEM_ALIGN");
  TFG_GROW(p->chunks, p->nchunks, p->chunks_cap, 8);
  p->chunks[p->nchunks++] = (chunk){base, size};
  p->reserved += size;
  free_insert(p, block_new(p, (uintptr_t)base, size));
  return true;
}

/* Grows the pool so that a block of need bytes fits (see mem.h for the
 * policy); false when the capacity left is too small or the host refuses
 * even need bytes. */
static bool pool_grow(tfg_mem_pool *p, size_t need) {
  size_t left = p->usable - p->reserved;
  if (need > left) return false;
  while (p->next_chunk < need) p->next_chunk *= 2;
  size_t want = min_size(p->next_chunk, left);
  /* Halving keeps multiples of TFG_MEM_ALIGN only while above need, so
   * the last try is need itself. */
  for (;;) {
    if (chunk_add(p, want)) break;
    if (want == need) return false;
    want = want / 2 / TFG_MEM_ALIGN * TFG_MEM_ALIGN;
    if (want < need) want = need;
  }
  if (p->next_chunk <= SIZE_MAX / 2) p->next_chunk *= 2;
  return true;
}

/* ---- the pool ------------------------------------------------------------- */

tfg_mem_pool *tfg_mem_pool_new(int64_t capacity, bool preallocate) {
  return tfg_mem_pool_new_with(capacity, preallocate, NULL, NULL, NULL);
}

tfg_mem_pool *tfg_mem_pool_new_with(int64_t capacity, bool preallocate, tfg_mem_region_alloc_fn region_alloc,
                                    tfg_mem_region_free_fn region_free, void *arg) {
  tfg_mem_pool *p = calloc(1, sizeof *p);
  TFG_ASSERT(p != NULL);
  pthread_mutex_init(&p->mu, NULL);
  p->region_alloc = region_alloc ? region_alloc : host_region_alloc;
  p->region_free = region_free ? region_free : host_region_free;
  p->region_arg = arg;
  p->capacity = capacity;
  p->usable = capacity > 0 ? (size_t)capacity / TFG_MEM_ALIGN * TFG_MEM_ALIGN : 0;
  p->next_chunk = (size_t)TFG_MEM_FIRST_CHUNK;
  if (preallocate && p->usable > 0 && !chunk_add(p, p->usable)) {
    tfg_mem_pool_free(p);
    return NULL;
  }
  return p;
}

void tfg_mem_pool_free(tfg_mem_pool *p) {
  if (!p) return;
  /* Every block record is in one of the two trees or on the spare list.
   * The trees are freed without recursion (a degenerate treap is deep):
   * rotate left children up until the root has none, then free it. */
  block *trees[2] = {p->free_tree, p->used_tree};
  for (int i = 0; i < 2; i++) {
    block *t = trees[i];
    while (t) {
      if (t->left) {
        t = rotate_right(t);
      } else {
        block *r = t->right;
        free(t);
        t = r;
      }
    }
  }
  while (p->spare) {
    block *n = p->spare->next;
    free(p->spare);
    p->spare = n;
  }
  for (size_t i = 0; i < p->nchunks; i++) p->region_free(p->region_arg, p->chunks[i].base, p->chunks[i].size);
  free(p->chunks);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

void *tfg_mem_alloc(tfg_mem_pool *p, size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - TFG_MEM_ALIGN) return NULL;
  size_t size = (bytes + TFG_MEM_ALIGN - 1) / TFG_MEM_ALIGN * TFG_MEM_ALIGN;
  pthread_mutex_lock(&p->mu);
  block *b = free_best_fit(p, size);
  if (!b && pool_grow(p, size)) b = free_best_fit(p, size);
  if (!b) {
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  free_remove(p, b);
  if (b->size > size) {
    /* The rest stays free at the higher address; its next neighbour is
     * in use (free neighbours are always merged), so no merge here. */
    block *rest = block_new(p, b->addr + size, b->size - size);
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    free_insert(p, rest);
  }
  b->left = b->right = NULL;
  b->prio = addr_hash(b->addr);
  p->used_tree = treap_insert(p->used_tree, b, false);
  p->in_use += (int64_t)size;
  if (p->in_use > p->peak) p->peak = p->in_use;
  p->nallocs++;
  pthread_mutex_unlock(&p->mu);
  return (void *)b->addr;
}

void tfg_mem_free(tfg_mem_pool *p, void *ptr) {
  if (!ptr) return;
  uintptr_t a = (uintptr_t)ptr;
  pthread_mutex_lock(&p->mu);
  block *b = p->used_tree;
  while (b && b->addr != a) b = a < b->addr ? b->left : b->right;
  TFG_ASSERT(b != NULL && "tfg_mem_free: not a live allocation of this pool");
  p->used_tree = treap_remove(p->used_tree, b, false);
  p->in_use -= (int64_t)b->size;
  /* Merge with the free neighbours, keeping the lower record. */
  block *prev = b->prev, *next = b->next;
  if (next && next->free) {
    free_remove(p, next);
    block_absorb(p, b, next);
  }
  if (prev && prev->free) {
    free_remove(p, prev);
    block_absorb(p, prev, b);
    b = prev;
  }
  free_insert(p, b);
  pthread_mutex_unlock(&p->mu);
}

void tfg_mem_pool_stats(tfg_mem_pool *p, tfg_mem_stats *out) {
  pthread_mutex_lock(&p->mu);
  block *t = p->free_tree;
  while (t && t->right) t = t->right;
  *out = (tfg_mem_stats){
      .capacity = p->capacity,
      .in_use = p->in_use,
      .peak = p->peak,
      .largest_free = t ? (int64_t)t->size : 0,
      .nallocs = p->nallocs,
      .reserved = (int64_t)p->reserved,
  };
  pthread_mutex_unlock(&p->mu);
}
