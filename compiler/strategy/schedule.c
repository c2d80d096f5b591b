/* compiler/strategy/schedule.c: the units of each device under a
 * pipeline schedule and their start times (compiler/strategy/schedule.h). */
#include "compiler/strategy/schedule.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/assert.h"

/* How many forwards device d runs before its first backward: gpipe all
 * of them; 1f1b P - d - 1 (PipeDream-Flush); interleaved Megatron-LM's
 * (P - d - 1) * 2 + (v - 1) * P, or all when M == P. At most all. */
static int warmup(const tfg_pipe *p, int d) {
  int total = p->chunks * p->micro, w = total;
  switch (p->kind) {
  case TFG_SCHEDULE_GPIPE: break;
  case TFG_SCHEDULE_1F1B: w = p->devices - d - 1; break;
  case TFG_SCHEDULE_INTERLEAVED:
    w = p->micro == p->devices ? total : (p->devices - d - 1) * 2 + (p->chunks - 1) * p->devices;
    break;
  }
  return w < total ? w : total;
}

/* The k-th forward (or backward) of a device: Megatron-LM's order, in
 * groups of P micro-batches, every chunk of a group in turn (forwards
 * from the first chunk, backwards from the last). With one chunk it is
 * micro-batch k. */
static void nth(const tfg_pipe *p, int d, int k, bool fwd, int *stage, int *micro) {
  int P = p->devices, v = p->chunks, in_group = k % (P * v);
  int chunk = in_group / P;
  if (!fwd) chunk = v - 1 - chunk;
  *stage = chunk * P + d;
  *micro = k / (P * v) * P + in_group % P;
  if (v == 1) *micro = k;
}

void tfg_pipe_unit(const tfg_pipe *p, int d, int k, bool *fwd, int *stage, int *micro) {
  int total = p->chunks * p->micro, w = warmup(p, d), steady = total - w;
  TFG_ASSERT(k >= 0 && k < 2 * total);
  int j; /* the forward or backward index */
  if (k < w) {
    *fwd = true, j = k;
  } else if (k < w + 2 * steady) { /* one forward, one backward */
    *fwd = (k - w) % 2 == 0;
    j = *fwd ? w + (k - w) / 2 : (k - w) / 2;
  } else { /* the cooldown's backwards */
    *fwd = false, j = k - w - steady;
  }
  nth(p, d, j, *fwd, stage, micro);
}

void tfg_pipe_label(const tfg_pipe *p, int32_t unit, char *buf, size_t n) {
  int M = p->micro, V = tfg_pipe_stages(p);
  bool fwd = unit < V * M;
  int u = fwd ? unit : unit - V * M;
  snprintf(buf, n, "%s s%d m%d", fwd ? "fwd" : "bwd", u / M, u % M);
}

double tfg_pipe_times(const tfg_pipe *p, const double *fwd, const double *bwd, double *start) {
  int P = p->devices, M = p->micro, V = tfg_pipe_stages(p), units = 2 * p->chunks * M;
  double *end = malloc(sizeof *end * (size_t)(2 * V * M)), *free_at = calloc((size_t)P, sizeof *free_at);
  int *next = calloc((size_t)P, sizeof *next);
  TFG_ASSERT(end && free_at && next);
  for (int u = 0; u < 2 * V * M; u++) end[u] = -1; /* not run yet */
  double last = 0;
  /* Each pass runs every device's next unit whose inputs have ended; a
   * schedule never waits for itself, so every pass makes progress. */
  for (int left = P * units; left > 0;) {
    int ran = 0;
    for (int d = 0; d < P; d++) {
      if (next[d] == units) continue;
      bool f;
      int s, m;
      tfg_pipe_unit(p, d, next[d], &f, &s, &m);
      double ready = free_at[d];
      /* a forward reads the stage before's forward; a backward its own
       * forward and the stage after's backward */
      int needs[2] = {f ? (s > 0 ? (s - 1) * M + m : -1) : s * M + m, f || s == V - 1 ? -1 : V * M + (s + 1) * M + m};
      bool ok = true;
      for (int q = 0; q < 2; q++) {
        if (needs[q] < 0) continue;
        if (end[needs[q]] < 0) ok = false;
        else if (end[needs[q]] > ready) ready = end[needs[q]];
      }
      if (!ok) continue;
      int u = (f ? 0 : V * M) + s * M + m;
      start[u] = ready;
      end[u] = ready + (f ? fwd[s] : bwd[s]);
      free_at[d] = end[u];
      if (end[u] > last) last = end[u];
      next[d]++;
      left--;
      ran++;
    }
    TFG_ASSERT(ran > 0); /* a schedule that deadlocks is a bug in tfg_pipe_unit */
  }
  free(end);
  free(free_at);
  free(next);
  return last;
}
