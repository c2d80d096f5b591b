/* base/grow.h: growable arrays of tfg's own structures (graph nodes,
 * diagnostics, bindings, plan steps, streams).
 *
 *   TFG_GROW(g->nodes, g->nnodes, g->cap, 64); // room for nodes[nnodes]
 *   g->nodes[g->nnodes++] = node;
 *
 * The capacity doubles from `first`, so n appends cost O(n) copies.
 * Running out of memory here aborts (TFG_ASSERT): these arrays grow with
 * the program's size, while data from files is sized and checked where it
 * is read, with an error the user sees. */
#ifndef TFG_GROW_H
#define TFG_GROW_H

#include <stddef.h>

/* realloc(arr, count * elem), count 0 taken as 1; aborts when memory
 * runs out. */
void *tfg_grow_to(void *arr, size_t count, size_t elem);

/* Makes room for element n of arr, whose capacity is cap (an lvalue of
 * any integer type, updated). Evaluates its arguments more than once. */
#define TFG_GROW(arr, n, cap, first)                               \
  do {                                                             \
    if ((n) >= (cap)) {                                            \
      (cap) = (cap) ? 2 * (cap) : (first);                         \
      (arr) = tfg_grow_to((arr), (size_t)(cap), sizeof *(arr));    \
    }                                                              \
  } while (0)

#endif
