/* tests/unit/test_pipe.c: a pipeline's schedule and cut
 * (compiler/strategy/schedule.h): each device's units in Megatron-LM's
 * order, written out by hand; the replay of equal stages against the
 * bubble formula, exactly; and the cut's search against the exact
 * O(V N^2) dynamic program on random instances with pins and memory. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/strategy/schedule.h"
#include "tests/unit/unit.h"

/* Device d's units under p as text: "F0 F1 B0 ..." (stage s > 0 of a
 * device written "F0.s"). */
static void units(const tfg_pipe *p, int d, char *out, size_t n) {
  out[0] = '\0';
  for (int k = 0; k < 2 * p->chunks * p->micro; k++) {
    bool f;
    int s, m;
    tfg_pipe_unit(p, d, k, &f, &s, &m);
    size_t len = strlen(out);
    if (s == d) snprintf(out + len, n - len, "%s%c%d", k ? " " : "", f ? 'F' : 'B', m);
    else snprintf(out + len, n - len, "%s%c%d.%d", k ? " " : "", f ? 'F' : 'B', m, s);
  }
}

START_TEST(units_in_megatron_order) {
  char got[256];
  tfg_pipe gp = {.kind = TFG_SCHEDULE_GPIPE, .devices = 2, .chunks = 1, .micro = 4};
  units(&gp, 0, got, sizeof got);
  ck_assert_str_eq(got, "F0 F1 F2 F3 B0 B1 B2 B3");
  /* 1F1B: P - 1 - d forwards first (PipeDream-Flush) */
  tfg_pipe ob = {.kind = TFG_SCHEDULE_1F1B, .devices = 2, .chunks = 1, .micro = 4};
  units(&ob, 0, got, sizeof got);
  ck_assert_str_eq(got, "F0 F1 B0 F2 B1 F3 B2 B3");
  units(&ob, 1, got, sizeof got);
  ck_assert_str_eq(got, "F0 B0 F1 B1 F2 B2 F3 B3");
  /* interleaved, 2 devices x 2 chunks (stages 0..3, device d holds d and
   * d + 2), 4 micro-batches: groups of 2 micro-batches, every chunk in
   * turn; warm-up (P - d - 1) * 2 + (v - 1) * P forwards */
  tfg_pipe il = {.kind = TFG_SCHEDULE_INTERLEAVED, .devices = 2, .chunks = 2, .micro = 4};
  units(&il, 0, got, sizeof got);
  ck_assert_str_eq(got, "F0 F1 F0.2 F1.2 F2 B0.2 F3 B1.2 F2.2 B0 F3.2 B1 B2.2 B3.2 B2 B3");
  units(&il, 1, got, sizeof got);
  ck_assert_str_eq(got, "F0 F1 F0.3 B0.3 F1.3 B1.3 F2 B0 F3 B1 F2.3 B2.3 F3.3 B3.3 B2 B3");
}
END_TEST

/* Equal stages, a forward taking 1 and a backward 2: gpipe and 1f1b end
 * at (M + P - 1) (1 + 2), which is where the bubble formula
 * (P - 1) / (M + P - 1) comes from; each device computes M (1 + 2). */
START_TEST(equal_stages_end_as_the_formula_says) {
  for (int kind = 0; kind < 2; kind++)
    for (int P = 2; P <= 4; P++)
      for (int M = 1; M <= 8; M++) {
        tfg_pipe p = {.kind = kind ? TFG_SCHEDULE_1F1B : TFG_SCHEDULE_GPIPE, .devices = P, .chunks = 1, .micro = M};
        double f[4] = {1, 1, 1, 1}, b[4] = {2, 2, 2, 2}, start[2 * 4 * 8];
        double end = tfg_pipe_times(&p, f, b, start);
        ck_assert_msg(end == (M + P - 1) * 3.0, "%s P=%d M=%d ends at %g", kind ? "1f1b" : "gpipe", P, M, end);
      }
}
END_TEST

/* The exact search the cut must agree with: every start of every stage. */
static bool exact_cut(int N, int V, const double *w, const double *send, const double *mem, const double *cap,
                      const int *pin, int *first) {
  double *sum = calloc((size_t)N + 1, sizeof *sum), *msum = calloc((size_t)N + 1, sizeof *msum);
  double *best = malloc(sizeof *best * (size_t)V * (size_t)(N + 1));
  int *from = malloc(sizeof *from * (size_t)V * (size_t)(N + 1));
  for (int j = 0; j < N; j++) sum[j + 1] = sum[j] + w[j], msum[j + 1] = msum[j] + mem[j];
  for (int s = 0; s < V; s++)
    for (int j = 0; j <= N; j++) {
      double *b = &best[s * (N + 1) + j];
      *b = DBL_MAX;
      from[s * (N + 1) + j] = -1;
      for (int i = j - 1; i >= s; i--) {
        if ((pin[i] >= 0 && pin[i] != s) || msum[j] - msum[i] > cap[s]) break;
        double before = s == 0 ? (i == 0 ? 0 : DBL_MAX) : best[(s - 1) * (N + 1) + i];
        if (before == DBL_MAX) continue;
        double cost = sum[j] - sum[i] + (j < N ? send[j - 1] : 0), v = before > cost ? before : cost;
        if (v < *b) *b = v, from[s * (N + 1) + j] = i;
      }
    }
  bool fits = from[(V - 1) * (N + 1) + N] >= 0;
  for (int s = V - 1, j = N; fits && s >= 0; s--) j = first[s] = from[s * (N + 1) + j];
  free(sum);
  free(msum);
  free(best);
  free(from);
  return fits;
}

START_TEST(cut_matches_the_exact_search) {
  srand(7);
  int agree = 0, infeasible = 0;
  for (int t = 0; t < 3000; t++) {
    int N = 1 + rand() % 40, V = 1 + rand() % 6;
    double w[40], send[40], mem[40], cap[6];
    int pin[40], a[6], b[6];
    for (int k = 0; k < N; k++) {
      w[k] = rand() % 4 == 0 ? 1 + rand() % 3 : 1 + rand() % 100; /* plateaus and ties, as real costs have */
      send[k] = rand() % 20;
      mem[k] = rand() % 3 == 0 ? rand() % 50 : 0;
      pin[k] = -1;
    }
    for (int s = 0; s < V; s++) cap[s] = rand() % 4 == 0 ? 40 + rand() % 60 : DBL_MAX;
    if (t % 3 == 0) /* a few ascending pins */
      for (int k = 0, s = 0; k < N && s < V; k += 1 + rand() % 8, s += rand() % 2) pin[k] = s;
    bool x = tfg_pipe_cut(N, V, w, send, mem, cap, pin, a), y = exact_cut(N, V, w, send, mem, cap, pin, b);
    ck_assert_msg(x == y, "case %d: N=%d V=%d: the cut says %s, the exact search %s", t, N, V, x ? "fits" : "none",
                  y ? "fits" : "none");
    infeasible += !y;
    for (int s = 0; x && s < V; s++)
      ck_assert_msg(a[s] == b[s], "case %d: N=%d V=%d: stage %d starts at %d, the exact search at %d", t, N, V, s,
                    a[s], b[s]);
    agree += x;
  }
  ck_assert_int_gt(agree, 1000);
  ck_assert_int_gt(infeasible, 10);
}
END_TEST

Suite *suite_pipe(void) {
  Suite *s = suite_create("pipe");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, units_in_megatron_order);
  tcase_add_test(tc, equal_stages_end_as_the_formula_says);
  tcase_add_test(tc, cut_matches_the_exact_search);
  suite_add_tcase(s, tc);
  return s;
}
