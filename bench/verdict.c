/* SPDX-License-Identifier: Apache-2.0 */
/* Intervals and verdicts of apexx-bench's comparisons (docs/report.md,
 * Verdicts; apexx-bench(1) "VERDICTS"):
 *   paired    (ab: round i's A and B ran minutes apart at most, one after
 *             the other): the median of the per-round ratios B_i/A_i with
 *             the sign test's distribution-free interval (order statistics
 *             of the ratios);
 *   unpaired  (compare: two reports of separate runs): the Hodges-Lehmann
 *             ratio (the median of every B_j/A_i) with the Mann-Whitney
 *             interval (order statistics of those ratios).
 * Both work on log times, so a ratio's interval is symmetric in speed-up
 * and slow-down. A verdict needs the estimate and its interval: regressed
 * (improved) when the estimate is beyond the practical threshold and the
 * interval excludes no change; unchanged only when the interval lies inside
 * the threshold on both sides; inconclusive otherwise, too few samples
 * included. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The exact Mann-Whitney null distribution is tabulated up to this m*n;
 * beyond, the normal approximation picks the order statistic. */
#define EXACT_U_CELLS 3600
/* an estimate of rounds beyond this is reported as this */
#define MAX_ROUNDS_ESTIMATE 100000

static const char *const verdict_names[] = {"unchanged", "regressed", "improved", "inconclusive"};

const char *bench_verdict_name(bench_verdict v) {
  return (unsigned)v < sizeof verdict_names / sizeof verdict_names[0] ? verdict_names[v] : "?";
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_sorted(const double *v, int n) {
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Two-sided standard normal quantile z with P(|Z| <= z) = confidence, by
 * bisection on erf (|error| < 1e-12: no table, no approximation formula to
 * cite). */
static double normal_quantile_two_sided(double confidence) {
  double lo = 0.0, hi = 40.0;
  for (int i = 0; i < 200; i++) {
    double mid = 0.5 * (lo + hi);
    if (erf(mid / sqrt(2.0)) < confidence) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

/* P(X <= k) for X ~ Binomial(n, 1/2), in log space (n in the thousands). */
static double binomial_half_cdf(int n, int k) {
  if (k < 0)
    return 0.0;
  if (k >= n)
    return 1.0;
  double sum = 0.0, log_half_n = -n * log(2.0);
  for (int i = 0; i <= k; i++) {
    sum += exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) + log_half_n);
  }
  return sum > 1.0 ? 1.0 : sum;
}

/* The sign test's r for n pairs: the largest r with P(X <= r-1) <=
 * (1 - confidence)/2, X ~ Bin(n, 1/2), so that [d_(r), d_(n+1-r)] covers
 * the median with at least that confidence (0: no interval). Exact (the
 * pmf summed in log space) up to 1000 pairs, the normal approximation
 * above. */
static int sign_test_rank(int n, double confidence) {
  double alpha_half = 0.5 * (1.0 - confidence);
  if (n > 1000) {
    double z = normal_quantile_two_sided(confidence);
    return (int)floor(0.5 * ((double)n - z * sqrt((double)n)));
  }
  double cdf = 0.0, log_half_n = -n * log(2.0), lg_n = lgamma(n + 1.0);
  int r = 0;
  while (r + 1 <= (n + 1) / 2) {
    cdf += exp(lg_n - lgamma(r + 1.0) - lgamma(n - r + 1.0) + log_half_n); /* P(X <= r) */
    if (cdf > alpha_half)
      break;
    r++;
  }
  return r;
}

/* The null distribution of U for sizes (m, n) without ties, as a CDF over
 * u = 0..m*n: f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u), rolled over m.
 * NULL when memory runs out. */
static double *u_null_cdf(int m, int n) {
  size_t cells = (size_t)m * (size_t)n + 1, stride = cells;
  double *prev = calloc((size_t)(n + 1) * stride, sizeof *prev);
  double *cur = calloc((size_t)(n + 1) * stride, sizeof *cur);
  double *cdf = malloc(cells * sizeof *cdf);
  if (!prev || !cur || !cdf) {
    free(prev);
    free(cur);
    free(cdf);
    return NULL;
  }
  /* i = 0: f(0, j, 0) = 1 */
  for (int j = 0; j <= n; j++)
    prev[(size_t)j * stride] = 1.0;
  for (int i = 1; i <= m; i++) {
    memset(cur, 0, (size_t)(n + 1) * stride * sizeof *cur);
    cur[0] = 1.0; /* f(i, 0, 0) */
    for (int j = 1; j <= n; j++) {
      for (int u = 0; u <= i * j; u++) {
        double v = cur[(size_t)(j - 1) * stride + (size_t)u];
        if (u >= j)
          v += prev[(size_t)j * stride + (size_t)(u - j)];
        cur[(size_t)j * stride + (size_t)u] = v;
      }
    }
    double *t = prev;
    prev = cur;
    cur = t;
  }
  double total = 0.0;
  for (size_t u = 0; u < cells; u++)
    total += prev[(size_t)n * stride + u];
  double run = 0.0;
  for (size_t u = 0; u < cells; u++) {
    run += prev[(size_t)n * stride + u];
    cdf[u] = run / total;
  }
  free(prev);
  free(cur);
  return cdf;
}

static void interval_none(bench_interval *out) {
  out->lo = 0.0;
  out->hi = INFINITY;
  out->coverage = 0.0;
}

int bench_paired_interval(const double *a, const double *b, int n, double confidence,
                          bench_interval *out) {
  memset(out, 0, sizeof *out);
  out->ratio = NAN;
  interval_none(out);
  if (n < 0 || !(confidence > 0.0 && confidence < 1.0))
    return -1;
  double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  if (!d)
    return -1;
  int k = 0;
  for (int i = 0; i < n; i++) {
    /* a time of 0 (or less) has no ratio: the pair says nothing */
    if (a[i] > 0 && b[i] > 0 && isfinite(a[i]) && isfinite(b[i]))
      d[k++] = log(b[i] / a[i]);
  }
  out->n = k;
  if (k == 0) {
    free(d);
    return 0;
  }
  qsort(d, (size_t)k, sizeof *d, compare_double);
  double m = median_sorted(d, k);
  out->ratio = exp(m);
  /* the sign test: [d_(r), d_(k+1-r)] covers the median with probability
   * 1 - 2 P(X <= r-1), X ~ Bin(k, 1/2); the largest r with that coverage
   * at least the confidence asked */
  int r = sign_test_rank(k, confidence);
  if (r >= 1) {
    out->lo = exp(d[r - 1]);
    out->hi = exp(d[k - r]);
    out->coverage = 1.0 - 2.0 * binomial_half_cdf(k, r - 1);
  }
  free(d);
  return 0;
}

int bench_unpaired_interval(const double *a, int na, const double *b, int nb, double confidence,
                            bench_interval *out) {
  memset(out, 0, sizeof *out);
  out->ratio = NAN;
  interval_none(out);
  if (na < 0 || nb < 0 || !(confidence > 0.0 && confidence < 1.0))
    return -1;
  double *la = malloc((size_t)(na > 0 ? na : 1) * sizeof *la);
  double *lb = malloc((size_t)(nb > 0 ? nb : 1) * sizeof *lb);
  if (!la || !lb) {
    free(la);
    free(lb);
    return -1;
  }
  int m = 0, n = 0;
  for (int i = 0; i < na; i++) {
    if (a[i] > 0 && isfinite(a[i]))
      la[m++] = log(a[i]);
  }
  for (int j = 0; j < nb; j++) {
    if (b[j] > 0 && isfinite(b[j]))
      lb[n++] = log(b[j]);
  }
  out->n = m < n ? m : n;
  if (m == 0 || n == 0) {
    free(la);
    free(lb);
    return 0;
  }
  size_t cells = (size_t)m * (size_t)n;
  double *d = malloc(cells * sizeof *d);
  if (!d) {
    free(la);
    free(lb);
    return -1;
  }
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++)
      d[(size_t)i * (size_t)n + (size_t)j] = lb[j] - la[i];
  }
  free(la);
  free(lb);
  qsort(d, cells, sizeof *d, compare_double);
  out->ratio = exp(median_sorted(d, (int)cells));
  /* [D_(r), D_(mn+1-r)] covers the shift with probability
   * 1 - 2 P(U <= r-1) under the Mann-Whitney null */
  double alpha_half = 0.5 * (1.0 - confidence);
  int r = 0;
  double coverage = 0.0;
  if (cells <= EXACT_U_CELLS) {
    double *cdf = u_null_cdf(m, n);
    if (!cdf) {
      free(d);
      return -1;
    }
    while ((size_t)(r + 1) <= (cells + 1) / 2 && cdf[r] <= alpha_half)
      r++;
    if (r >= 1)
      coverage = 1.0 - 2.0 * cdf[r - 1];
    free(cdf);
  } else {
    double z = normal_quantile_two_sided(confidence);
    double mean = 0.5 * (double)cells;
    double sd = sqrt((double)cells * (m + n + 1.0) / 12.0);
    r = (int)floor(mean - z * sd);
    if (r >= 1)
      coverage = confidence;
  }
  if (r >= 1) {
    out->lo = exp(d[r - 1]);
    out->hi = exp(d[cells - (size_t)r]);
    out->coverage = coverage;
  }
  free(d);
  return 0;
}

bench_verdict bench_judge(const bench_interval *iv, double threshold) {
  double up = 1.0 + threshold, down = 1.0 / (1.0 + threshold);
  if (!(iv->coverage > 0.0) || !isfinite(iv->ratio))
    return BENCH_INCONCLUSIVE;
  if (iv->ratio >= up && iv->lo > 1.0)
    return BENCH_REGRESSED;
  if (iv->ratio <= down && iv->hi < 1.0)
    return BENCH_IMPROVED;
  if (iv->lo > down && iv->hi < up)
    return BENCH_UNCHANGED;
  return BENCH_INCONCLUSIVE;
}

int bench_min_pairs(double confidence) {
  /* the sign test's widest interval, [min, max], covers with 1 - 2^(1-n) */
  int n = 1;
  while (n < 64 && 1.0 - ldexp(1.0, 1 - n) < confidence)
    n++;
  return n;
}

/* The p-quantile of sorted v[0..n-1], linear between order statistics. */
static double quantile_sorted(const double *v, int n, double p) {
  double at = p * (n - 1);
  int i = (int)floor(at);
  if (i >= n - 1)
    return v[n - 1];
  if (i < 0)
    return v[0];
  return v[i] + (at - i) * (v[i + 1] - v[i]);
}

int bench_rounds_to_settle(const double *a, const double *b, int n, double threshold,
                           double confidence) {
  bench_interval now;
  if (bench_paired_interval(a, b, n, confidence, &now) != 0)
    return -1;
  if (bench_judge(&now, threshold) != BENCH_INCONCLUSIVE)
    return 0;
  int floor_n = bench_min_pairs(confidence);
  if (now.n == 0)
    return floor_n;
  double *d = malloc((size_t)n * sizeof *d);
  if (!d)
    return -1;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (a[i] > 0 && b[i] > 0 && isfinite(a[i]) && isfinite(b[i]))
      d[k++] = log(b[i] / a[i]);
  }
  qsort(d, (size_t)k, sizeof *d, compare_double);
  /* the pairs so far stand for the machine: with m pairs drawn like them
   * the interval's ends fall near the r(m)/(m+1) and 1 - r(m)/(m+1)
   * quantiles of their ratios; the fewest m whose interval settles */
  int more = MAX_ROUNDS_ESTIMATE - k;
  for (int m = k + 1; m <= MAX_ROUNDS_ESTIMATE; m += m < 1000 ? 1 : m / 100) {
    int r = sign_test_rank(m, confidence);
    if (r < 1)
      continue;
    double p = (double)r / (m + 1);
    bench_interval next = now;
    next.lo = exp(quantile_sorted(d, k, p));
    next.hi = exp(quantile_sorted(d, k, 1.0 - p));
    next.coverage = confidence;
    if (bench_judge(&next, threshold) != BENCH_INCONCLUSIVE) {
      more = m - k;
      break;
    }
  }
  free(d);
  if (k + more < floor_n)
    more = floor_n - k;
  return more > 0 ? more : 1;
}
