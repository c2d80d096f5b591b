/* base/grow.c: the allocation behind base/grow.h's TFG_GROW. */
#include "base/grow.h"

#include <stdlib.h>

#include "base/assert.h"

void *tfg_grow_to(void *arr, size_t count, size_t elem) {
  void *p = realloc(arr, (count ? count : 1) * elem);
  TFG_ASSERT(p != NULL);
  return p;
}
