/* compiler/strategy/schedule.c: the units of each device under a
 * pipeline schedule and their start times (compiler/strategy/schedule.h). */
#include "compiler/strategy/schedule.h"

#include <float.h>
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

/* ---- the cut --------------------------------------------------------------------- */

/* What the search over stage s's first op for the stage ending before j
 * needs: prefix sums of times and memory, the best of the stages before
 * (prev[i]: the slowest of stages 0..s-1 holding ops [0, i), DBL_MAX when
 * they cannot), and where that best is finite and grows (run[i]: a run
 * number, the same for consecutive finite entries that do not decrease). */
typedef struct cut_ctx {
  const double *sum, *msum, *send;
  const double *prev;
  const int *run;
  int N;
} cut_ctx;

/* Stage [i, j)'s time with what it sends on. */
static double stage_cost(const cut_ctx *x, int i, int j) {
  return x->sum[j] - x->sum[i] + (j < x->N ? x->send[j - 1] : 0);
}

/* The slowest of stages 0..s when stage s is [i, j). */
static double with_stage(const cut_ctx *x, int i, int j) {
  double a = x->prev[i], b = stage_cost(x, i, j);
  return a > b ? a : b;
}

/* The best start i in [lo, hi] of the stage ending before j, the last of
 * the equal ones, or -1: a scan, exact whatever the prefixes do. */
static int scan_start(const cut_ctx *x, int lo, int hi, int j, double *best) {
  int at = -1;
  *best = DBL_MAX;
  for (int i = hi; i >= lo; i--) {
    if (x->prev[i] == DBL_MAX) continue;
    double v = with_stage(x, i, j);
    if (v < *best) *best = v, at = i;
  }
  return at;
}

/* The same by binary search when prev is finite and does not decrease on
 * [lo, hi] (one run): the stage's own cost only falls as it starts later,
 * so the slowest is smallest where the two cross. */
static int search_start(const cut_ctx *x, int lo, int hi, int j, double *best) {
  if (lo > hi || x->prev[lo] == DBL_MAX || x->run[lo] != x->run[hi]) return scan_start(x, lo, hi, j, best);
  int a = lo, b = hi + 1; /* the first i with prev[i] >= the stage's cost, or hi + 1 */
  while (a < b) {
    int m = a + (b - a) / 2;
    if (x->prev[m] >= stage_cost(x, m, j)) b = m;
    else a = m + 1;
  }
  *best = DBL_MAX;
  int at = -1;
  if (a <= hi) *best = x->prev[a], at = a;                         /* from a on, prev decides */
  if (a - 1 >= lo && stage_cost(x, a - 1, j) < *best) *best = stage_cost(x, a - 1, j), at = a - 1;
  if (at == a) { /* the last start with prev[i] at the best: prev does not decrease */
    int c = a, d = hi;
    while (c < d) {
      int m = c + (d - c + 1) / 2;
      if (x->prev[m] <= *best) c = m;
      else d = m - 1;
    }
    at = c;
  }
  return at;
}

bool tfg_pipe_cut(int N, int V, const double *w, const double *send, const double *mem, const double *cap,
                  const int *pin, int *first) {
  size_t row = (size_t)N + 1;
  double *sum = malloc(sizeof *sum * row), *msum = malloc(sizeof *msum * row);
  double *best = malloc(sizeof *best * (size_t)V * row);
  int *from = malloc(sizeof *from * (size_t)V * row), *run = malloc(sizeof *run * row);
  double *start = malloc(sizeof *start * row); /* stage -1's "best": 0 for no ops */
  TFG_ASSERT(sum && msum && best && from && run && start);
  sum[0] = msum[0] = 0;
  for (int j = 0; j < N; j++) sum[j + 1] = sum[j] + w[j], msum[j + 1] = msum[j] + mem[j];
  for (int i = 0; i <= N; i++) start[i] = i == 0 ? 0 : DBL_MAX;
  for (int s = 0; s < V; s++) {
    const double *prev = s ? &best[(size_t)(s - 1) * row] : start;
    int last = -1; /* the last prefix the stages before can hold */
    for (int i = 0, r = 0; i <= N; i++) { /* runs of finite, non-decreasing prev */
      if (i > 0 && (prev[i] == DBL_MAX || prev[i - 1] == DBL_MAX || prev[i] < prev[i - 1])) r++;
      run[i] = r;
      if (prev[i] < DBL_MAX) last = i;
    }
    cut_ctx x = {sum, msum, send, prev, run, N};
    int bad = -1;     /* the last op before j pinned to another stage */
    int mlo = 0;      /* the first start whose stage fits the memory */
    for (int j = 0; j <= N; j++) {
      double *b = &best[(size_t)s * row + (size_t)j];
      int *f = &from[(size_t)s * row + (size_t)j];
      if (j > 0 && pin[j - 1] >= 0 && pin[j - 1] != s) bad = j - 1;
      while (mlo < j && msum[j] - msum[mlo] > cap[s]) mlo++;
      *b = DBL_MAX, *f = -1;
      int lo = s > bad + 1 ? s : bad + 1, hi = j - 1 < last ? j - 1 : last; /* stage s holds [i, j), i >= s */
      if (lo < mlo) lo = mlo;
      if (j == 0 || lo > hi) continue;
      if (msum[j] - msum[hi] > cap[s]) continue; /* not even one op fits */
      double v;
      int i = search_start(&x, lo, hi, j, &v);
      if (i >= 0 && v < DBL_MAX) *b = v, *f = i;
    }
  }
  bool fits = from[(size_t)(V - 1) * row + (size_t)N] >= 0;
  for (int s = V - 1, j = N; fits && s >= 0; s--) {
    first[s] = from[(size_t)s * row + (size_t)j];
    TFG_ASSERT(first[s] >= 0); /* a stage reached is reached from one before */
    j = first[s];
  }
  free(sum);
  free(msum);
  free(best);
  free(from);
  free(run);
  free(start);
  return fits;
}
