/* SPDX-License-Identifier: Apache-2.0 */
/* Timing statistics (docs/report.md, Timing) and parity against the cpu
 * backend (docs/ops.md, Rounding and parity, doubled because both sides carry their
 * own error: docs/report.md, Parity). */
#include "bench.h"

#include "apx_half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int bench_stats_compute(const double *samples_ms, int n, bench_stats *out) {
  memset(out, 0, sizeof *out);
  if (n < 1) return -1;
  double *sorted = malloc((size_t)n * sizeof *sorted);
  if (!sorted) return -1;
  memcpy(sorted, samples_ms, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_double);
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += sorted[i];
  out->n = n;
  out->p50_ms = (n % 2 == 1) ? sorted[n / 2]
                             : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  /* no interpolation: n=50 -> index 46 (the 47th smallest), n=1 -> [0] */
  out->p95_ms = sorted[(int)floor(0.95 * (double)(n - 1))];
  out->mean_ms = sum / n;
  out->min_ms = sorted[0];
  out->max_ms = sorted[n - 1];
  free(sorted);
  return 0;
}

int bench_summary_compute(const double *values, int n, bench_summary *out) {
  memset(out, 0, sizeof *out);
  if (n < 1) return -1;
  double *sorted = malloc((size_t)n * sizeof *sorted);
  if (!sorted) return -1;
  memcpy(sorted, values, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_double);
  out->n = n;
  out->min = sorted[0];
  out->median = (n % 2 == 1) ? sorted[n / 2]
                             : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  out->p95 = sorted[(int)floor(0.95 * (double)(n - 1))];
  for (int i = 0; i < n; i++) sorted[i] = fabs(sorted[i] - out->median);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_double);
  out->mad = (n % 2 == 1) ? sorted[n / 2]
                          : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  free(sorted);
  return 0;
}

/* Exact null distribution of U for sizes (m, n) without ties:
 * f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u), f(0, n, 0) = f(m, 0, 0) = 1;
 * returns P(U <= u) and P(U >= u) through lo and hi. -1 on no memory. */
static int exact_u_tails(int m, int n, double u, double *lo, double *hi) {
  int umax = m * n;
  size_t stride = (size_t)umax + 1;
  double *f = calloc((size_t)(m + 1) * (size_t)(n + 1) * stride, sizeof *f);
  if (!f) return -1;
#define F(i, j, k) f[((size_t)(i) * (size_t)(n + 1) + (size_t)(j)) * stride + (size_t)(k)]
  for (int i = 0; i <= m; i++) {
    for (int j = 0; j <= n; j++) {
      if (i == 0 || j == 0) {
        F(i, j, 0) = 1.0;
        continue;
      }
      for (int k = 0; k <= i * j; k++) {
        double v = F(i, j - 1, k);
        if (k >= j) v += F(i - 1, j, k - j);
        F(i, j, k) = v;
      }
    }
  }
  double total = 0.0, below = 0.0, above = 0.0;
  for (int k = 0; k <= umax; k++) {
    double c = F(m, n, k);
    total += c;
    if ((double)k <= u + 1e-9) below += c;
    if ((double)k >= u - 1e-9) above += c;
  }
#undef F
  free(f);
  *lo = below / total;
  *hi = above / total;
  return 0;
}

double bench_mann_whitney_p(const double *a, int na, const double *b, int nb) {
  if (na < 1 || nb < 1) return NAN;
  /* U of a: pairs where a is larger, ties count one half */
  double u = 0.0;
  int ties = 0;
  for (int i = 0; i < na; i++) {
    for (int j = 0; j < nb; j++) {
      if (a[i] > b[j]) {
        u += 1.0;
      } else if (a[i] == b[j]) {
        u += 0.5;
        ties = 1;
      }
    }
  }
  double lo, hi;
  if (!ties && na + nb <= 60 && exact_u_tails(na, nb, u, &lo, &hi) == 0) {
    double p = 2.0 * (lo < hi ? lo : hi);
    return p > 1.0 ? 1.0 : p;
  }
  /* normal approximation; the tie correction needs the tie group sizes */
  int n = na + nb;
  double *all = malloc((size_t)n * sizeof *all);
  if (!all) return NAN;
  memcpy(all, a, (size_t)na * sizeof *all);
  memcpy(all + na, b, (size_t)nb * sizeof *all);
  qsort(all, (size_t)n, sizeof *all, compare_double);
  double tie_sum = 0.0;
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && all[j] == all[i]) j++;
    double t = (double)(j - i);
    tie_sum += t * t * t - t;
    i = j;
  }
  free(all);
  double mean = 0.5 * na * nb;
  double var = (double)na * nb / 12.0 *
               ((n + 1.0) - tie_sum / ((double)n * (n - 1.0)));
  if (!(var > 0)) return 1.0;
  double z = (fabs(u - mean) - 0.5) / sqrt(var);
  if (z < 0) z = 0;
  double p = erfc(z / sqrt(2.0));
  return p > 1.0 ? 1.0 : p;
}

double bench_parity_tolerance(apx_dtype dtype) {
  switch (dtype) {
  case APX_DTYPE_F32:
    return 1e-5;
  case APX_DTYPE_F16:
    return 2e-3;
  case APX_DTYPE_BF16:
    return 1.6e-2;
  default:
    return 0.0;
  }
}

/* One unit in the last place of the storage dtype at magnitude |v|. */
static double storage_ulp(apx_dtype dtype, double v) {
  double a = fabs(v);
  int mant_bits;
  double min_normal;
  switch (dtype) {
  case APX_DTYPE_F16:
    mant_bits = 10;
    min_normal = 0x1.0p-14;
    break;
  case APX_DTYPE_BF16:
    mant_bits = 7;
    min_normal = 0x1.0p-126;
    break;
  case APX_DTYPE_F32:
    mant_bits = 23;
    min_normal = 0x1.0p-126;
    break;
  default:
    return 0.0;
  }
  if (a < min_normal) a = min_normal;
  int exp2 = 0;
  frexp(a, &exp2); /* a = m * 2^exp2 with m in [0.5, 1) */
  return ldexp(1.0, exp2 - 1 - mant_bits);
}

void bench_parity_compare(const apx_tensor *ref, const apx_tensor *got,
                          int exact, int extra_ulps, bench_parity *out) {
  bench_parity_compare_bound(ref, got, exact, 2, extra_ulps, out);
}

void bench_parity_compare_bound(const apx_tensor *ref, const apx_tensor *got, int exact,
                                int factor, int extra_ulps, bench_parity *out) {
  memset(out, 0, sizeof *out);
  out->first_bad = -1;
  out->ok = 1;
  double tol = bench_parity_tolerance(ref->dtype);
  out->atol = out->rtol = tol;
  if (factor < 1) factor = 1;
  out->factor = factor;
  out->extra_ulps = extra_ulps;
  int64_t n = apx_tensor_numel(ref);
  size_t elem = apx_dtype_size(ref->dtype);
  const unsigned char *rb = ref->data, *gb = got->data;
  for (int64_t i = 0; i < n; i++) {
    double r = bench_get(ref, i), g = bench_get(got, i);
    int bad = 0;
    if (exact) {
      /* copy ops: byte-identical, NaN payloads included */
      bad = memcmp(rb + (size_t)i * elem, gb + (size_t)i * elem, elem) != 0;
    }
    if (isnan(r) || isnan(g)) {
      /* a NaN is never a match, not even against a NaN reference: NaN
       * weights made every output NaN and parity read "ok" */
      out->non_finite = 1;
      out->nan_count++;
      bad = 1;
    } else if (isinf(r) || isinf(g)) {
      /* infinities must agree exactly; they carry no error size */
      if (r != g) {
        out->non_finite = 1;
        bad = 1;
      }
    } else {
      double abs_err = fabs(g - r);
      double rel_err = abs_err / fmax(fabs(r), tol > 0 ? tol : 1.0);
      if (abs_err > out->max_abs_err) out->max_abs_err = abs_err;
      if (rel_err > out->max_rel_err) out->max_rel_err = rel_err;
      if (!exact) {
        double bound = factor * (tol + tol * fabs(r)) +
                       extra_ulps * storage_ulp(ref->dtype, r);
        bad = abs_err > bound;
      }
    }
    if (bad) {
      if (out->first_bad < 0) out->first_bad = i;
      out->bad_count++;
      out->ok = 0;
    }
  }
}
