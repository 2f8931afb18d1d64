/* SPDX-License-Identifier: Apache-2.0 */
/* Units of apexx-bench compiled into this test: the statistics of
 * docs/report.md, Timing, the parity rule (docs/ops.md, Rounding and parity; doubled),
 * and the seeded generator documented in apexx-bench(1). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apx_half.h"
#include "bench/bench.h"

/* Shuffle 1..n with a fixed generator so the order is not sorted. */
static void shuffled(double *v, int n, uint64_t seed) {
  for (int i = 0; i < n; i++) v[i] = i + 1;
  bench_rng rng = {seed};
  for (int i = n - 1; i > 0; i--) {
    int j = (int)bench_rng_below(&rng, i + 1);
    double t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

START_TEST(percentiles_follow_the_reference) {
  /* samples 1..n: the k-th smallest is k */
  static const struct {
    int n;
    double p50, p95;
  } cases[] = {
      {1, 1, 1},          /* n=1: the value */
      {2, 1.5, 1},        /* floor(0.95*1) = 0 */
      {3, 2, 2},          /* floor(1.9) = 1 */
      {20, 10.5, 19},     /* the 19th smallest */
      {50, 25.5, 47},     /* the 47th smallest */
      {51, 26, 48},       /* floor(47.5) = 47 */
      {101, 51, 96}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double v[128] = {0}; /* the tail past n is compared below too */
    shuffled(v, cases[i].n, 99 + i);
    double before[128];
    memcpy(before, v, sizeof v);
    bench_stats s;
    ck_assert_int_eq(bench_stats_compute(v, cases[i].n, &s), 0);
    ck_assert_msg(s.p50_ms == cases[i].p50, "n=%d p50 %g", cases[i].n, s.p50_ms);
    ck_assert_msg(s.p95_ms == cases[i].p95, "n=%d p95 %g", cases[i].n, s.p95_ms);
    ck_assert(s.min_ms == 1 && s.max_ms == cases[i].n);
    ck_assert(fabs(s.mean_ms - (cases[i].n + 1) / 2.0) < 1e-12);
    ck_assert_int_eq(s.n, cases[i].n);
    ck_assert(memcmp(before, v, sizeof v) == 0); /* input untouched */
  }
  bench_stats s;
  ck_assert_int_eq(bench_stats_compute(NULL, 0, &s), -1);
}
END_TEST

static apx_tensor host(apx_dtype dtype, int64_t n, void *data) {
  return apx_tensor_host(data, dtype, 1, (int64_t[]){n});
}

START_TEST(parity_exact_for_copy_ops) {
  uint16_t a[4] = {0x3c00, 0x4000, 0xbc00, 0x0001};
  uint16_t b[4];
  memcpy(b, a, sizeof a);
  apx_tensor ta = host(APX_DTYPE_F16, 4, a), tb = host(APX_DTYPE_F16, 4, b);
  bench_parity p;
  bench_parity_compare(&ta, &tb, 1, 0, &p);
  ck_assert(p.ok && p.max_abs_err == 0 && p.bad_count == 0 && p.first_bad == -1);
  /* one ulp off: fine for arithmetic, a break for a copy */
  b[2] = 0xbc01;
  bench_parity_compare(&ta, &tb, 1, 0, &p);
  ck_assert(!p.ok);
  ck_assert_int_eq(p.bad_count, 1);
  ck_assert_int_eq(p.first_bad, 2);
  bench_parity_compare(&ta, &tb, 0, 0, &p);
  ck_assert(p.ok);
  ck_assert(p.max_abs_err == 0x1.0p-10);
  /* +0 and -0 are equal numbers but not the same bytes */
  uint16_t z[1] = {0x0000}, nz[1] = {0x8000};
  apx_tensor tz = host(APX_DTYPE_F16, 1, z), tnz = host(APX_DTYPE_F16, 1, nz);
  bench_parity_compare(&tz, &tnz, 1, 0, &p);
  ck_assert(!p.ok);
}
END_TEST

START_TEST(parity_bound_is_twice_decision_3) {
  /* f32: |err| <= 2*(1e-5 + 1e-5*|ref|); at ref 100: 2.02e-3 */
  float ref[2] = {100.0f, 0.0f}, got[2] = {100.002f, 0.0f};
  apx_tensor tr = host(APX_DTYPE_F32, 2, ref), tg = host(APX_DTYPE_F32, 2, got);
  bench_parity p;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert_msg(p.ok, "err %g", p.max_abs_err);
  got[0] = 100.0022f;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(!p.ok);
  /* near zero the absolute term rules: 2e-5 */
  got[0] = 100.0f;
  got[1] = 1.9e-5f;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(p.ok);
  got[1] = 2.1e-5f;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(!p.ok);
  ck_assert_int_eq(p.first_bad, 1);
  /* f16 and bf16 tolerances */
  ck_assert(bench_parity_tolerance(APX_DTYPE_F16) == 2e-3);
  ck_assert(bench_parity_tolerance(APX_DTYPE_BF16) == 1.6e-2);
  ck_assert(bench_parity_tolerance(APX_DTYPE_F32) == 1e-5);
  uint16_t h_ref[1] = {apx_f32_to_f16(1.0f)}, h_got[1] = {apx_f32_to_f16(1.0078125f)};
  apx_tensor hr = host(APX_DTYPE_F16, 1, h_ref), hg = host(APX_DTYPE_F16, 1, h_got);
  bench_parity_compare(&hr, &hg, 0, 0, &p); /* 0.0078 <= 2*(2e-3+2e-3) = 0.008 */
  ck_assert(p.ok);
  h_got[0] = apx_f32_to_f16(1.009765625f);
  bench_parity_compare(&hr, &hg, 0, 0, &p);
  ck_assert(!p.ok);
  /* an extra storage ulp for transcendentals: ulp(1.0) in f16 is 2^-10 */
  h_got[0] = apx_f32_to_f16(1.0f + 0.008f + 0x1.0p-11f);
  bench_parity_compare(&hr, &hg, 0, 0, &p);
  ck_assert(!p.ok);
  bench_parity_compare(&hr, &hg, 0, 1, &p);
  ck_assert(p.ok);
  ck_assert_int_eq(p.factor, 2);
  /* ff_infer's bound: 4*(atol + rtol*|ref|) + 4 ulp = 0.016 + 4*2^-10 at 1.0 */
  h_got[0] = apx_f32_to_f16(1.0f + 0.0195f);
  bench_parity_compare(&hr, &hg, 0, 0, &p);
  ck_assert(!p.ok);
  bench_parity_compare_bound(&hr, &hg, 0, 4, 4, &p);
  ck_assert(p.ok);
  ck_assert_int_eq(p.factor, 4);
  ck_assert_int_eq(p.extra_ulps, 4);
  h_got[0] = apx_f32_to_f16(1.0f + 0.0215f);
  bench_parity_compare_bound(&hr, &hg, 0, 4, 4, &p);
  ck_assert(!p.ok);
}
END_TEST

START_TEST(parity_nan_is_never_a_match) {
  /* a NaN on both sides (NaN weights made every output and the cpu
   * reference NaN) is a break: before, parity read "ok" */
  float ref[3] = {1.0f, NAN, 2.0f}, got[3] = {1.0f, NAN, 2.0f};
  apx_tensor tr = host(APX_DTYPE_F32, 3, ref), tg = host(APX_DTYPE_F32, 3, got);
  bench_parity p;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert_msg(!p.ok && p.non_finite, "NaN against NaN: ok %d", p.ok);
  ck_assert_int_eq(p.bad_count, 1);
  ck_assert_int_eq(p.nan_count, 1);
  ck_assert_int_eq(p.first_bad, 1);
  /* the same for a copy op, whose bytes agree */
  bench_parity_compare(&tr, &tg, 1, 0, &p);
  ck_assert(!p.ok && p.nan_count == 1);
  /* on one side only: the reference, then the output */
  got[1] = 0.0f;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(!p.ok && p.non_finite && p.nan_count == 1);
  ck_assert(isfinite(p.max_abs_err) && isfinite(p.max_rel_err));
  ref[1] = 0.0f;
  got[2] = NAN;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(!p.ok && p.first_bad == 2 && p.nan_count == 1);
  /* equal infinities match, an infinity on one side breaks */
  got[2] = ref[2] = INFINITY;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(p.ok && !p.non_finite);
  got[0] = INFINITY;
  bench_parity_compare(&tr, &tg, 0, 0, &p);
  ck_assert(!p.ok && p.non_finite && p.nan_count == 0 && p.first_bad == 0);
}
END_TEST

START_TEST(splitmix64_reference_values) {
  /* splitmix64 from state 0: the published first outputs */
  bench_rng rng = {0};
  ck_assert_uint_eq(bench_rng_next(&rng), UINT64_C(0xE220A8397B1DCDAF));
  ck_assert_uint_eq(bench_rng_next(&rng), UINT64_C(0x6E789E6AA1B965F4));
  ck_assert_uint_eq(bench_rng_next(&rng), UINT64_C(0x06C45D188009454F));
  /* uniform: top 53 bits */
  bench_rng a = {0};
  ck_assert(bench_rng_uniform(&a) ==
            (double)(UINT64_C(0xE220A8397B1DCDAF) >> 11) * 0x1.0p-53);
}
END_TEST

START_TEST(normal_and_uniform_moments) {
  bench_rng rng = {123};
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0, umin = 1, umax = 0;
  /* counted, then asserted once: each ck_assert reports to the parent
   * process, 400k of them outlast the timeout on a busy machine */
  int bad = 0;
  for (int i = 0; i < n; i++) {
    double z = bench_rng_normal(&rng);
    bad += !isfinite(z);
    sum += z;
    sum2 += z * z;
    double u = bench_rng_uniform(&rng);
    bad += !(u >= 0 && u < 1);
    usum += u;
    umin = fmin(umin, u);
    umax = fmax(umax, u);
  }
  ck_assert_int_eq(bad, 0);
  /* 200k draws: the mean's standard error is 0.0022 */
  ck_assert_msg(fabs(sum / n) < 0.01, "normal mean %g", sum / n);
  ck_assert_msg(fabs(sum2 / n - 1.0) < 0.02, "normal variance %g", sum2 / n);
  ck_assert_msg(fabs(usum / n - 0.5) < 0.005, "uniform mean %g", usum / n);
  ck_assert(umin < 1e-3 && umax > 1 - 1e-3);
  for (int i = 0; i < 1000; i++) {
    int64_t v = bench_rng_below(&rng, 3);
    ck_assert(v >= 0 && v < 3);
  }
}
END_TEST

START_TEST(tile_ids_sorted_distinct_reproducible) {
  int32_t ids[3 * 16], again[3 * 16];
  apx_tensor t = apx_tensor_host(ids, APX_DTYPE_I32, 2, (int64_t[]){3, 16});
  apx_tensor t2 = apx_tensor_host(again, APX_DTYPE_I32, 2, (int64_t[]){3, 16});
  bench_rng rng = {5}, rng2 = {5};
  ck_assert_int_eq(bench_fill_tile_ids(&rng, &t, 64), 0);
  ck_assert_int_eq(bench_fill_tile_ids(&rng2, &t2, 64), 0);
  ck_assert(memcmp(ids, again, sizeof ids) == 0);
  for (int b = 0; b < 3; b++) {
    for (int k = 0; k < 16; k++) {
      int32_t v = ids[b * 16 + k];
      ck_assert(v >= 0 && v < 64);
      if (k > 0) ck_assert_int_lt(ids[b * 16 + k - 1], v); /* sorted, distinct */
    }
  }
  /* rows are drawn one after another: not all equal */
  ck_assert(memcmp(ids, ids + 16, 16 * sizeof *ids) != 0);
  /* K = grid: every id once */
  int32_t all[8];
  apx_tensor ta = apx_tensor_host(all, APX_DTYPE_I32, 2, (int64_t[]){1, 8});
  ck_assert_int_eq(bench_fill_tile_ids(&rng, &ta, 8), 0);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(all[i], i);
  ck_assert_int_eq(bench_fill_tile_ids(&rng, &ta, 7), -1);
}
END_TEST

START_TEST(fills_round_to_the_dtype) {
  uint16_t h[64];
  float f[64];
  apx_tensor th = host(APX_DTYPE_F16, 64, h), tf = host(APX_DTYPE_F32, 64, f);
  bench_rng a = {9}, b = {9};
  bench_fill_normal(&a, &th, 1.0, 0.0);
  bench_fill_normal(&b, &tf, 1.0, 0.0);
  /* the same draws, stored through fp32 with RNE to fp16 */
  for (int i = 0; i < 64; i++) ck_assert_uint_eq(h[i], apx_f32_to_f16(f[i]));
  bench_rng c = {11};
  bench_fill_uniform(&c, &tf, 0.05, 1.55);
  for (int i = 0; i < 64; i++) ck_assert(f[i] >= 0.05f && f[i] <= 1.55f);
}
END_TEST

/* The exact two-sided Mann-Whitney p-value, checked against brute force:
 * every way of choosing which 5 of the 10 pooled values form the first
 * sample (C(10,5) = 252), counting those whose U is at least as extreme. */
static double brute_force_p(const double *a, const double *b) {
  double pool[10];
  memcpy(pool, a, 5 * sizeof *pool);
  memcpy(pool + 5, b, 5 * sizeof *pool);
  double u_obs = 0;
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) u_obs += a[i] > b[j];
  int lo = 0, hi = 0, total = 0;
  for (int mask = 0; mask < 1024; mask++) {
    if (__builtin_popcount((unsigned)mask) != 5) continue;
    double u = 0;
    for (int i = 0; i < 10; i++) {
      if (!(mask & (1 << i))) continue;
      for (int j = 0; j < 10; j++) {
        if (!(mask & (1 << j))) u += pool[i] > pool[j];
      }
    }
    total++;
    lo += u <= u_obs;
    hi += u >= u_obs;
  }
  double p = 2.0 * (lo < hi ? lo : hi) / total;
  return p > 1 ? 1 : p;
}

START_TEST(mann_whitney_exact_and_approximate) {
  bench_rng rng = {2024};
  for (int t = 0; t < 50; t++) {
    double a[5], b[5];
    double shift = (t % 5) * 0.5;
    for (int i = 0; i < 5; i++) {
      a[i] = bench_rng_uniform(&rng) + shift;
      b[i] = bench_rng_uniform(&rng);
    }
    double p = bench_mann_whitney_p(a, 5, b, 5);
    ck_assert_msg(fabs(p - brute_force_p(a, b)) < 1e-12, "case %d: %g vs %g", t, p,
                  brute_force_p(a, b));
  }
  /* complete separation, 5 against 5: 2/252 */
  double lo[5] = {1, 2, 3, 4, 5}, hi[5] = {6, 7, 8, 9, 10};
  ck_assert(fabs(bench_mann_whitney_p(hi, 5, lo, 5) - 2.0 / 252.0) < 1e-15);
  /* identical samples (all ties): nothing to see */
  ck_assert(bench_mann_whitney_p(lo, 5, lo, 5) == 1.0);
  ck_assert(isnan(bench_mann_whitney_p(lo, 0, lo, 5)));
  /* normal approximation (40 + 40, ties): separated samples are
   * significant, interleaved ones are not */
  double x[40], y[40];
  for (int i = 0; i < 40; i++) {
    x[i] = 100 + i % 10;
    y[i] = 120 + i % 10;
  }
  ck_assert(bench_mann_whitney_p(y, 40, x, 40) < 1e-6);
  for (int i = 0; i < 40; i++) y[i] = 100 + (i + 5) % 10;
  ck_assert(bench_mann_whitney_p(y, 40, x, 40) > 0.5);
}
END_TEST

START_TEST(summary_min_median_p95_mad) {
  double v[] = {5, 1, 4, 2, 3, 100};
  bench_summary s;
  ck_assert_int_eq(bench_summary_compute(v, 6, &s), 0);
  ck_assert_int_eq(s.n, 6);
  ck_assert(s.min == 1);
  ck_assert(s.median == 3.5);
  ck_assert(s.p95 == 5); /* sorted[floor(0.95*5)] = sorted[4] */
  /* |v - 3.5| = 1.5 2.5 0.5 1.5 0.5 96.5 -> median 1.5 */
  ck_assert(s.mad == 1.5);
  ck_assert_int_eq(bench_summary_compute(v, 0, &s), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bench_stats");
  TCase *tc = tcase_create("units");
  tcase_add_test(tc, percentiles_follow_the_reference);
  tcase_add_test(tc, parity_exact_for_copy_ops);
  tcase_add_test(tc, parity_bound_is_twice_decision_3);
  tcase_add_test(tc, parity_nan_is_never_a_match);
  tcase_add_test(tc, splitmix64_reference_values);
  tcase_add_test(tc, normal_and_uniform_moments);
  tcase_add_test(tc, tile_ids_sorted_distinct_reproducible);
  tcase_add_test(tc, fills_round_to_the_dtype);
  tcase_add_test(tc, mann_whitney_exact_and_approximate);
  tcase_add_test(tc, summary_min_median_p95_mad);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
