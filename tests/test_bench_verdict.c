/* SPDX-License-Identifier: Apache-2.0 */
/* The verdicts of apexx-bench (bench/verdict.c, docs/report.md, Verdicts)
 * on synthetic samples: paired rounds of two builds (ab) and independent
 * repetitions of two reports (compare). Identical samples are unchanged; a
 * 20% shift with tight pairs regressed; the same shift drowned in noise
 * inconclusive, never unchanged; three pairs of a 2x shift never unchanged;
 * a drift of the machine that slows both sides by 50% halfway through
 * unchanged when paired (and not settled when the same numbers are taken
 * unpaired); improvements; the sign test's and the Mann-Whitney interval's
 * order statistics and coverage; the estimate of rounds that would settle
 * an inconclusive row; compare's reproduction of an outlier in a
 * 5-repetition baseline. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#define T10 0.10 /* the default practical threshold */

/* Pairs of times around `centre`: a[i] = centre * drift(i) * e^(noise*N1),
 * b[i] = centre * shift * drift(i) * e^(noise*N2), drift(i) = 1.5 from
 * round `drift_from` on (a busier machine for both sides), else 1. */
static void make_pairs(double *a, double *b, int n, double centre, double shift, double noise,
                       int drift_from, uint64_t seed) {
  bench_rng rng = {seed};
  for (int i = 0; i < n; i++) {
    double drift = i >= drift_from ? 1.5 : 1.0;
    a[i] = centre * drift * exp(noise * bench_rng_normal(&rng));
    b[i] = centre * shift * drift * exp(noise * bench_rng_normal(&rng));
  }
}

static bench_verdict paired(const double *a, const double *b, int n, bench_interval *iv) {
  ck_assert_int_eq(bench_paired_interval(a, b, n, 0.95, iv), 0);
  return bench_judge(iv, T10);
}

START_TEST(identical_pairs_are_unchanged) {
  double a[12], b[12];
  make_pairs(a, b, 12, 0.02, 1.0, 0.0, 99, 1);
  bench_interval iv;
  ck_assert_int_eq(paired(a, b, 12, &iv), BENCH_UNCHANGED);
  ck_assert(iv.ratio == 1.0 && iv.lo == 1.0 && iv.hi == 1.0);
  ck_assert_int_eq(iv.n, 12);
  ck_assert_int_eq(bench_rounds_to_settle(a, b, 12, T10, 0.95), 0);
  /* with a shared machine's noise (3% a side) still unchanged */
  make_pairs(a, b, 12, 0.02, 1.0, 0.03, 99, 2);
  ck_assert_int_eq(paired(a, b, 12, &iv), BENCH_UNCHANGED);
  ck_assert(iv.lo < 1.0 && iv.hi > 1.0);
}
END_TEST

START_TEST(tight_20_percent_shift_regresses) {
  double a[10], b[10];
  make_pairs(a, b, 10, 0.02, 1.2, 0.01, 99, 3);
  bench_interval iv;
  ck_assert_int_eq(paired(a, b, 10, &iv), BENCH_REGRESSED);
  ck_assert(fabs(iv.ratio - 1.2) < 0.02);
  ck_assert(iv.lo > 1.1 && iv.hi < 1.3);
  /* a 5% shift, as tight: established, but below the threshold */
  make_pairs(a, b, 10, 0.02, 1.05, 0.01, 99, 3);
  ck_assert_int_eq(paired(a, b, 10, &iv), BENCH_UNCHANGED);
  ck_assert(iv.lo > 1.0);
}
END_TEST

START_TEST(shift_drowned_in_noise_is_never_unchanged) {
  /* 40% noise a side: the interval cannot exclude a 10% change */
  int inconclusive = 0;
  for (uint64_t seed = 1; seed <= 200; seed++) {
    double a[10], b[10];
    make_pairs(a, b, 10, 0.02, 1.2, 0.4, 99, seed);
    bench_interval iv;
    bench_verdict v = paired(a, b, 10, &iv);
    ck_assert_msg(v != BENCH_UNCHANGED, "seed %llu: unchanged [%g, %g]", (unsigned long long)seed,
                  iv.lo, iv.hi);
    if (v == BENCH_INCONCLUSIVE) {
      inconclusive++;
      ck_assert_int_gt(bench_rounds_to_settle(a, b, 10, T10, 0.95), 0);
    }
  }
  ck_assert_int_gt(inconclusive, 150);
}
END_TEST

START_TEST(three_pairs_of_a_2x_shift_are_not_unchanged) {
  double a[3] = {0.029, 0.030, 0.029}, b[3] = {0.058, 0.061, 0.057};
  bench_interval iv;
  bench_verdict v = paired(a, b, 3, &iv);
  ck_assert(v == BENCH_INCONCLUSIVE || v == BENCH_REGRESSED);
  /* 3 pairs reach 75% at most: no 95% interval, so inconclusive, with
   * the estimate shown and the rounds that would settle it */
  ck_assert_int_eq(v, BENCH_INCONCLUSIVE);
  ck_assert(fabs(iv.ratio - 2.0) < 0.05);
  ck_assert(iv.coverage == 0.0 && iv.lo == 0.0 && isinf(iv.hi));
  ck_assert_int_ge(bench_rounds_to_settle(a, b, 3, T10, 0.95), bench_min_pairs(0.95) - 3);
  /* a 400x slowdown of 2 pairs: still inconclusive, never unchanged */
  double c[2] = {0.029, 0.029}, d[2] = {12.0, 12.1};
  ck_assert_int_eq(paired(c, d, 2, &iv), BENCH_INCONCLUSIVE);
  ck_assert(iv.ratio > 400);
  /* no pairs at all */
  ck_assert_int_eq(paired(c, d, 0, &iv), BENCH_INCONCLUSIVE);
  ck_assert(isnan(iv.ratio));
}
END_TEST

START_TEST(drift_of_the_machine_cancels_in_pairs) {
  /* both sides 50% slower from round 8 of 16 (a build starting beside the
   * run): each pair shares the machine's state */
  double a[16], b[16];
  make_pairs(a, b, 16, 0.02, 1.0, 0.02, 8, 5);
  bench_interval iv;
  ck_assert_int_eq(paired(a, b, 16, &iv), BENCH_UNCHANGED);
  ck_assert(fabs(iv.ratio - 1.0) < 0.03);
  /* drift on one side only (the A rounds first, the B rounds after, a
   * run without alternation) looks like a 50% regression unpaired */
  double late[16];
  for (int i = 0; i < 16; i++)
    late[i] = b[i] * (i < 8 ? 1.5 : 1.0);
  ck_assert_int_eq(bench_unpaired_interval(a, 8, late, 8, 0.95, &iv), 0);
  ck_assert_int_eq(bench_judge(&iv, T10), BENCH_REGRESSED);
}
END_TEST

START_TEST(improvement_is_reported) {
  double a[10], b[10];
  make_pairs(a, b, 10, 0.02, 0.8, 0.01, 99, 7);
  bench_interval iv;
  ck_assert_int_eq(paired(a, b, 10, &iv), BENCH_IMPROVED);
  ck_assert(iv.hi < 0.9);
  /* and unpaired */
  ck_assert_int_eq(bench_unpaired_interval(a, 10, b, 10, 0.95, &iv), 0);
  ck_assert_int_eq(bench_judge(&iv, T10), BENCH_IMPROVED);
}
END_TEST

START_TEST(sign_test_order_statistics) {
  /* ratios 1.01 .. 1.10 in scrambled order: the 95% interval of 10 pairs
   * is [2nd, 9th] smallest, covering 1 - 2*11/1024 */
  double a[10], b[10];
  static const int order[10] = {7, 2, 9, 0, 5, 3, 8, 1, 6, 4};
  for (int i = 0; i < 10; i++) {
    a[i] = 2.0;
    b[i] = 2.0 * (1.01 + 0.01 * order[i]);
  }
  bench_interval iv;
  ck_assert_int_eq(bench_paired_interval(a, b, 10, 0.95, &iv), 0);
  ck_assert(fabs(iv.lo - 1.02) < 1e-12 && fabs(iv.hi - 1.09) < 1e-12);
  ck_assert(fabs(iv.coverage - (1.0 - 22.0 / 1024.0)) < 1e-12);
  ck_assert(fabs(iv.ratio - 1.055) < 1e-3); /* geometric mean of 1.05, 1.06 */
  /* 99%: [1st, 10th] (1 - 2/1024) */
  ck_assert_int_eq(bench_paired_interval(a, b, 10, 0.99, &iv), 0);
  ck_assert(fabs(iv.lo - 1.01) < 1e-12 && fabs(iv.hi - 1.10) < 1e-12);
  /* a zero time has no ratio: the pair is left out */
  a[3] = 0.0;
  ck_assert_int_eq(bench_paired_interval(a, b, 10, 0.95, &iv), 0);
  ck_assert_int_eq(iv.n, 9);
  ck_assert_int_eq(bench_min_pairs(0.95), 6);
  ck_assert_int_eq(bench_min_pairs(0.99), 8);
  ck_assert_int_eq(bench_paired_interval(a, b, 10, 1.0, &iv), -1);
  ck_assert_int_eq(bench_paired_interval(a, b, 10, 0.0, &iv), -1);
}
END_TEST

START_TEST(mann_whitney_interval_order_statistics) {
  /* 5 against 5: U <= 2 has probability 4/252, so the 95% interval is
   * the 3rd and 23rd of the 25 ratios, covering 1 - 8/252 */
  double a[5] = {1, 1, 1, 1, 1}, b[5];
  for (int j = 0; j < 5; j++)
    b[j] = 1.0 + 0.01 * (j + 1); /* ratios 1.01..1.05 x5 */
  bench_interval iv;
  ck_assert_int_eq(bench_unpaired_interval(a, 5, b, 5, 0.95, &iv), 0);
  ck_assert(fabs(iv.coverage - (1.0 - 8.0 / 252.0)) < 1e-12);
  ck_assert(fabs(iv.lo - 1.01) < 1e-12 && fabs(iv.hi - 1.05) < 1e-12);
  ck_assert(fabs(iv.ratio - 1.03) < 1e-12);
  /* 3 against 3: P(U = 0) = 1/20 > 2.5%: no 95% interval */
  ck_assert_int_eq(bench_unpaired_interval(a, 3, b, 3, 0.95, &iv), 0);
  ck_assert(iv.coverage == 0.0);
  ck_assert_int_eq(bench_judge(&iv, T10), BENCH_INCONCLUSIVE);
  /* 70 against 70 (the normal approximation): a tight 20% shift */
  double x[70], y[70];
  make_pairs(x, y, 70, 0.02, 1.2, 0.01, 999, 11);
  ck_assert_int_eq(bench_unpaired_interval(x, 70, y, 70, 0.95, &iv), 0);
  ck_assert(iv.coverage == 0.95);
  ck_assert_int_eq(bench_judge(&iv, T10), BENCH_REGRESSED);
}
END_TEST

START_TEST(outlier_in_a_five_repetition_baseline) {
  /* the reproduction: tilepack's baseline 0.029 ms with one pass
   * at 15 ms, the current 12 ms in every pass (+41,000%): the old rank
   * test gave p = 0.095 and "unchanged (noise)" */
  double base[5] = {0.029, 0.029, 15.0, 0.030, 0.029};
  double cur[5] = {12.0, 12.1, 11.9, 12.0, 12.2};
  bench_interval iv;
  ck_assert_int_eq(bench_unpaired_interval(base, 5, cur, 5, 0.95, &iv), 0);
  bench_verdict v = bench_judge(&iv, T10);
  ck_assert(v != BENCH_UNCHANGED);
  ck_assert_int_eq(v, BENCH_INCONCLUSIVE);
  ck_assert(iv.ratio > 400); /* the estimate says how large it looks */
  /* 3 repetitions of a +124% slowdown: never unchanged either */
  double b3[3] = {0.029, 0.030, 0.029}, c3[3] = {0.065, 0.066, 0.064};
  ck_assert_int_eq(bench_unpaired_interval(b3, 3, c3, 3, 0.95, &iv), 0);
  ck_assert(bench_judge(&iv, T10) != BENCH_UNCHANGED);
}
END_TEST

START_TEST(rounds_to_settle_estimates) {
  /* 6 pairs with 8% noise a side around no change: not settled; the
   * estimate, drawn again at that size from the same machine, settles */
  double a[400], b[400];
  make_pairs(a, b, 400, 0.02, 1.0, 0.08, 9999, 21);
  bench_interval iv;
  ck_assert_int_eq(paired(a, b, 6, &iv), BENCH_INCONCLUSIVE);
  int more = bench_rounds_to_settle(a, b, 6, T10, 0.95);
  ck_assert_int_gt(more, 0);
  ck_assert_int_lt(6 + more, 400);
  ck_assert_int_eq(paired(a, b, 6 + 2 * more, &iv), BENCH_UNCHANGED);
  /* 8 tight pairs and one far outlier: the sign test needs 9 pairs before
   * its interval drops the outlier, so the estimate is not "1 more" */
  double c[9], d[9];
  for (int i = 0; i < 9; i++) {
    c[i] = 1.0;
    d[i] = i == 0 ? 1.6 : 1.0 + 0.002 * i;
  }
  ck_assert_int_eq(paired(c, d, 6, &iv), BENCH_INCONCLUSIVE);
  int outlier = bench_rounds_to_settle(c, d, 6, T10, 0.95);
  ck_assert_int_ge(6 + outlier, 9);
  ck_assert_int_eq(paired(c, d, 9, &iv), BENCH_UNCHANGED);
  /* a ratio just under the threshold settles only after very many
   * rounds, one just over it sooner (its interval must exclude 1 only) */
  double e[8], f[8];
  for (int i = 0; i < 8; i++) {
    e[i] = 1.0;
    f[i] = 1.099 * (i % 2 ? 1.2 : 1 / 1.2);
  }
  ck_assert_int_eq(paired(e, f, 8, &iv), BENCH_INCONCLUSIVE);
  int near = bench_rounds_to_settle(e, f, 8, T10, 0.95);
  ck_assert_int_gt(near, 1000);
  static const double just_over[8] = {1.25, 0.95, 1.18, 1.5, 1.2, 1.3, 1.15, 1.22};
  memcpy(f, just_over, sizeof f);
  ck_assert_int_eq(paired(e, f, 8, &iv), BENCH_INCONCLUSIVE);
  int over = bench_rounds_to_settle(e, f, 8, T10, 0.95);
  ck_assert_int_eq(over, 1); /* 9 pairs: [2nd, 8th], the 0.95 left out */
  ck_assert_str_eq(bench_verdict_name(BENCH_INCONCLUSIVE), "inconclusive");
  ck_assert_str_eq(bench_verdict_name(BENCH_REGRESSED), "regressed");
}
END_TEST

int main(void) {
  Suite *s = suite_create("bench_verdict");
  TCase *tc = tcase_create("verdicts");
  tcase_add_test(tc, identical_pairs_are_unchanged);
  tcase_add_test(tc, tight_20_percent_shift_regresses);
  tcase_add_test(tc, shift_drowned_in_noise_is_never_unchanged);
  tcase_add_test(tc, three_pairs_of_a_2x_shift_are_not_unchanged);
  tcase_add_test(tc, drift_of_the_machine_cancels_in_pairs);
  tcase_add_test(tc, improvement_is_reported);
  tcase_add_test(tc, sign_test_order_statistics);
  tcase_add_test(tc, mann_whitney_interval_order_statistics);
  tcase_add_test(tc, outlier_in_a_five_repetition_baseline);
  tcase_add_test(tc, rounds_to_settle_estimates);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
