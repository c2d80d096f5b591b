/* compiler/recompute.c: marking the calls whose activations recompute
 * drops (compiler/recompute.h). */
#include "compiler/recompute.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

int tfg_recompute_mark(tfg_graph *g, const tfg_program *p, const tfg_action *a) {
  const tfg_train_config *c = &a->config;
  if (c->nrecompute == 0) return 0;
  /* per call (1-based): the outermost recomputed call it is in, or 0 */
  int32_t *region = calloc((size_t)p->ncalls + 1, sizeof *region);
  TFG_ASSERT(region != NULL);
  int marked = 0;
  for (int32_t q = 1; q <= p->ncalls; q++) { /* a parent began before its calls: it is done first */
    int32_t parent = p->calls[q - 1].parent;
    region[q] = parent ? region[parent] : 0;
    if (region[q]) continue;
    for (int k = 0; k < c->nrecompute && !region[q]; k++)
      if (strcmp(p->calls[q - 1].fn, c->recompute[k]) == 0) region[q] = q;
    marked += region[q] == q;
  }
  for (int32_t i = 0; i < g->nnodes; i++) {
    int32_t q = g->nodes[i].call;
    g->nodes[i].recompute = q > 0 && q <= p->ncalls ? region[q] : 0;
  }
  free(region);
  return marked;
}

void tfg_recompute_clear(tfg_graph *g) {
  for (int32_t i = 0; i < g->nnodes; i++) g->nodes[i].recompute = 0;
}
