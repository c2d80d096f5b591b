/* base/arena.c: bump allocation in growing blocks. */
#include "base/arena.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

struct tfg_arena_block {
  tfg_arena_block *next;
  size_t size; /* usable bytes in data */
  alignas(max_align_t) unsigned char data[];
};

enum { TFG_ARENA_MIN_BLOCK = 64 * 1024 };

void tfg_arena_init(tfg_arena *a) { memset(a, 0, sizeof *a); }

void tfg_arena_free(tfg_arena *a) {
  tfg_arena_block *b = a->head;
  while (b) {
    tfg_arena_block *next = b->next;
    free(b);
    b = next;
  }
  memset(a, 0, sizeof *a);
}

void *tfg_arena_alloc(tfg_arena *a, size_t n) {
  const size_t align = alignof(max_align_t);
  n = (n + align - 1) & ~(align - 1);
  if (!a->head || a->head->size - a->used < n) {
    /* Blocks double with the arena so a large input costs O(log n) mallocs. */
    size_t size = a->total > TFG_ARENA_MIN_BLOCK ? a->total : TFG_ARENA_MIN_BLOCK;
    if (size < n) size = n;
    tfg_arena_block *b = malloc(sizeof *b + size);
    TFG_ASSERT(b != NULL);
    b->next = a->head;
    b->size = size;
    a->head = b;
    a->used = 0;
  }
  void *p = a->head->data + a->used;
  a->used += n;
  a->total += n;
  memset(p, 0, n);
  return p;
}

char *tfg_arena_strndup(tfg_arena *a, const char *s, size_t n) {
  char *p = tfg_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}
