/* tests/unit/test_schedule.c: learning-rate schedules (train's
 * lr_schedule, kernels/optim_math.h tfg_lr_factor) and gradient clipping
 * (clip_grad_norm): each schedule's factors at hand-computed steps
 * (LANGUAGE.md section 6's formulas; step(every, gamma) as
 * torch.optim.lr_scheduler.StepLR), and SGD trained with a schedule, or
 * with clipping, against the closed form of its updates: on loss =
 * sum(w^2) / 2 the gradient is w, so a step is w - lr factor(s) w (the
 * first step's factor being factor(0)), or with clipping w - lr c w with
 * c = min(1, max / (|w| + 1e-6)) (torch.nn.utils.clip_grad_norm_), the
 * norm over both params together; and no_decay, which leaves a matched
 * param out of SGD's weight decay. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim_math.h"
#include "tests/unit/programs.h"
#include "tests/unit/unit.h"

/* factor at 0-based step s (the kernels take the 1-based step) */
static double at(int kind, int64_t s, double warmup, double total, double min, double every, double gamma) {
  return tfg_lr_factor(kind, s + 1, warmup, total, min, every, gamma);
}

START_TEST(factors_by_hand) {
  ck_assert(at(0, 0, 0, 0, 0, 0, 0) == 1.0 && at(0, 1000, 0, 0, 0, 0, 0) == 1.0);
  /* linear(warmup = 2, total = 6, min = 0.2) */
  static const double lin[] = {0.5, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2};
  for (int s = 0; s < 9; s++)
    ck_assert_msg(fabs(at(1, s, 2, 6, 0.2, 0, 0) - lin[s]) < 1e-15, "linear s=%d: %.17g", s, at(1, s, 2, 6, 0.2, 0, 0));
  /* cosine(warmup = 0, total = 4, min = 0): (1 + cos(pi s / 4)) / 2, then 0 */
  static const double cosv[] = {1.0, 0.85355339059327373, 0.5, 0.14644660940672627, 0.0, 0.0};
  for (int s = 0; s < 6; s++)
    ck_assert_msg(fabs(at(2, s, 0, 4, 0, 0, 0) - cosv[s]) < 1e-15, "cosine s=%d: %.17g", s, at(2, s, 0, 4, 0, 0, 0));
  /* cosine with warm-up and a floor: (s + 1) / 3 for s < 3, then from 1 down to min */
  ck_assert(fabs(at(2, 0, 3, 13, 0.1, 0, 0) - 1.0 / 3) < 1e-15);
  ck_assert(at(2, 3, 3, 13, 0.1, 0, 0) == 1.0);
  ck_assert(fabs(at(2, 8, 3, 13, 0.1, 0, 0) - 0.55) < 1e-15); /* halfway: min + (1 - min) / 2 */
  ck_assert(at(2, 13, 3, 13, 0.1, 0, 0) == 0.1);
  /* step(every = 3, gamma = 0.5): StepLR(step_size = 3, gamma = 0.5) */
  static const double stp[] = {1, 1, 1, 0.5, 0.5, 0.5, 0.25};
  for (int s = 0; s < 7; s++) ck_assert(at(3, s, 0, 0, 0, 3, 0.5) == stp[s]);
}
END_TEST

START_TEST(sgd_follows_the_schedule) {
  static const char *const sched[] = {"constant()", "step(every = 2, gamma = 0.5)",
                                      "linear(warmup = 1, total = 4, min = 0.25)", "cosine(warmup = 2, total = 5)"};
  static const int kinds[] = {0, 3, 1, 2};
  static const double args[][5] = {{0, 0, 0, 0, 0}, {0, 0, 0, 2, 0.5}, {1, 4, 0.25, 0, 0}, {2, 5, 0, 0, 0}};
  trained w0;
  program_train_fetch("param w: f64[3] = normal(seed = 1)\nprint w\n", NULL, 1, &w0);
  const double *init = w0.data[0];
  for (int c = 0; c < 4; c++) {
    char text[512];
    snprintf(text, sizeof text,
             "param w: f64[3] = normal(seed = 1)\nloss = sum(w * w) * 0.5\n"
             "train loss { optimizer = sgd(lr = 0.3); lr_schedule = %s; steps = 6 }\nprint w\n",
             sched[c]);
    trained t;
    program_train_fetch(text, NULL, 1, &t);
    const double *w = t.data[0];
    for (int i = 0; i < 3; i++) {
      double want = init[i];
      for (int s = 0; s < 6; s++) want *= 1 - 0.3 * at(kinds[c], s, args[c][0], args[c][1], args[c][2], args[c][3], args[c][4]);
      ck_assert_msg(fabs(w[i] - want) <= 1e-14 * fabs(want), "%s: w[%d] = %.17g, want %.17g", sched[c], i, w[i], want);
    }
    free(t.data[0]);
  }
  free(w0.data[0]);
}
END_TEST

START_TEST(sgd_clips_the_global_norm) {
  trained w0;
  program_train_fetch("param a: f64[3] = normal(seed = 1)\nparam b: f64[2] = normal(seed = 2)\nprint a, b\n", NULL, 2,
                      &w0);
  for (int big = 0; big < 2; big++) { /* a norm above max (clipped) and one below (untouched) */
    double max = big ? 100.0 : 0.5;
    char text[512];
    snprintf(text, sizeof text,
             "param a: f64[3] = normal(seed = 1)\nparam b: f64[2] = normal(seed = 2)\n"
             "loss = (sum(a * a) + sum(b * b)) * 0.5\n"
             "train loss { optimizer = sgd(lr = 0.2); clip_grad_norm = %g; steps = 4 }\nprint a, b\n",
             max);
    trained t;
    program_train_fetch(text, NULL, 2, &t);
    double w[5];
    memcpy(w, w0.data[0], 3 * sizeof(double));
    memcpy(w + 3, w0.data[1], 2 * sizeof(double));
    for (int s = 0; s < 4; s++) {
      double sq = 0;
      for (int i = 0; i < 5; i++) sq += w[i] * w[i];
      double c = fmin(1.0, max / (sqrt(sq) + 1e-6));
      for (int i = 0; i < 5; i++) w[i] -= 0.2 * (w[i] * c);
    }
    const double *a = t.data[0], *b = t.data[1];
    for (int i = 0; i < 5; i++) {
      double got = i < 3 ? a[i] : b[i - 3];
      ck_assert_msg(fabs(got - w[i]) <= 1e-14 * fabs(w[i]), "max %g: w[%d] = %.17g, want %.17g", max, i, got, w[i]);
    }
    free(t.data[0]);
    free(t.data[1]);
  }
  free(w0.data[0]);
  free(w0.data[1]);
}
END_TEST

/* no_decay: SGD with weight_decay 0.1 on loss = (sum(a^2) + sum(b^2)) / 2:
 * a decays (g = a + 0.1 a), b matched by the pattern does not (g = b). */
START_TEST(no_decay_spares_matching_params) {
  trained w0, t;
  program_train_fetch("param a: f64[3] = normal(seed = 1)\nparam b: f64[2] = normal(seed = 2)\nprint a, b\n", NULL, 2,
                      &w0);
  program_train_fetch("param a: f64[3] = normal(seed = 1)\nparam b: f64[2] = normal(seed = 2)\n"
                      "loss = (sum(a * a) + sum(b * b)) * 0.5\n"
                      "train loss { optimizer = sgd(lr = 0.2, weight_decay = 0.1); no_decay = [\"b*\"]; steps = 3 }\n"
                      "print a, b\n",
                      NULL, 2, &t);
  for (int i = 0; i < 5; i++) {
    double w = i < 3 ? ((double *)w0.data[0])[i] : ((double *)w0.data[1])[i - 3];
    double got = i < 3 ? ((double *)t.data[0])[i] : ((double *)t.data[1])[i - 3];
    for (int s = 0; s < 3; s++) w -= 0.2 * (i < 3 ? w + 0.1 * w : w);
    ck_assert_msg(fabs(got - w) <= 1e-14 * fabs(w), "%s[%d] = %.17g, want %.17g", i < 3 ? "a" : "b", i % 3, got, w);
  }
  for (int k = 0; k < 2; k++) {
    free(w0.data[k]);
    free(t.data[k]);
  }
}
END_TEST

Suite *suite_schedule(void) {
  Suite *s = suite_create("schedule");
  TCase *tc = tcase_create("schedule");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, factors_by_hand);
  tcase_add_test(tc, sgd_follows_the_schedule);
  tcase_add_test(tc, sgd_clips_the_global_norm);
  tcase_add_test(tc, no_decay_spares_matching_params);
  suite_add_tcase(s, tc);
  return s;
}
