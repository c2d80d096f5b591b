/* base/arena.h: a bump allocator for objects that live and die together
 * (an AST, a graph under construction).
 *
 *   tfg_arena a;
 *   tfg_arena_init(&a);
 *   node *n = tfg_arena_alloc(&a, sizeof *n);   // zeroed, aligned
 *   char *s = tfg_arena_strndup(&a, text, len);
 *   tfg_arena_free(&a);                          // releases everything
 *
 * Allocation failure aborts through TFG_ASSERT: front-end inputs are capped
 * (base/diag.h, TFG_SOURCE_MAX_BYTES) so an arena never grows past a few
 * times the input size. */
#ifndef TFG_ARENA_H
#define TFG_ARENA_H

#include <stddef.h>

typedef struct tfg_arena_block tfg_arena_block;

typedef struct tfg_arena {
  tfg_arena_block *head; /* newest block first */
  size_t used;           /* bytes used in head */
  size_t total;          /* bytes handed out, for statistics */
} tfg_arena;

void tfg_arena_init(tfg_arena *a);
/* Frees every block; the arena is empty and reusable afterwards. */
void tfg_arena_free(tfg_arena *a);
/* n zeroed bytes aligned for any type; never NULL. */
void *tfg_arena_alloc(tfg_arena *a, size_t n);
/* A NUL-terminated copy of s[0..n). */
char *tfg_arena_strndup(tfg_arena *a, const char *s, size_t n);

#endif
