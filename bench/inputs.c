/* SPDX-License-Identifier: Apache-2.0 */
/* The bench's seeded input generator (documented in apexx-bench(1), INPUTS):
 * splitmix64 for bits, uniform = top 53 bits, normal = Box-Muller. Inputs
 * are generated on the host once per entry and copied to each backend's
 * device, so every backend sees identical bytes. */
#include "bench.h"

#include "apx_half.h"
#include "apx_splitmix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t bench_rng_next(bench_rng *rng) { return apx_splitmix64(&rng->state); }

double bench_rng_uniform(bench_rng *rng) { return apx_splitmix64_uniform(&rng->state); }

double bench_rng_normal(bench_rng *rng) {
  /* 1-u1 lies in (0, 1], so the log is finite */
  double u1 = bench_rng_uniform(rng);
  double u2 = bench_rng_uniform(rng);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

int64_t bench_rng_below(bench_rng *rng, int64_t n) {
  int64_t v = (int64_t)(bench_rng_uniform(rng) * (double)n);
  return v < n ? v : n - 1; /* guard against rounding up at u -> 1 */
}

void bench_set(const apx_tensor *t, int64_t i, double v) {
  switch (t->dtype) {
  case APX_DTYPE_F32:
    ((float *)t->data)[i] = (float)v;
    break;
  case APX_DTYPE_F16:
    ((uint16_t *)t->data)[i] = apx_f32_to_f16((float)v);
    break;
  case APX_DTYPE_BF16:
    ((uint16_t *)t->data)[i] = apx_f32_to_bf16((float)v);
    break;
  case APX_DTYPE_I32:
    ((int32_t *)t->data)[i] = (int32_t)v;
    break;
  case APX_DTYPE_I64:
    ((int64_t *)t->data)[i] = (int64_t)v;
    break;
  default:
    break;
  }
}

double bench_get(const apx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case APX_DTYPE_F32:
    return ((const float *)t->data)[i];
  case APX_DTYPE_F16:
    return apx_f16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_BF16:
    return apx_bf16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_I32:
    return ((const int32_t *)t->data)[i];
  case APX_DTYPE_I64:
    return (double)((const int64_t *)t->data)[i];
  default:
    return 0.0;
  }
}

void bench_fill_normal(bench_rng *rng, const apx_tensor *t, double scale,
                       double offset) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    bench_set(t, i, bench_rng_normal(rng) * scale + offset);
  }
}

void bench_fill_uniform(bench_rng *rng, const apx_tensor *t, double lo,
                        double hi) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    bench_set(t, i, lo + (hi - lo) * bench_rng_uniform(rng));
  }
}

static int compare_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int bench_fill_tile_ids(bench_rng *rng, const apx_tensor *ids, int64_t grid) {
  int64_t rows = ids->shape[0], k = ids->shape[1];
  if (k > grid) return -1;
  int64_t *perm = malloc((size_t)(grid > 0 ? grid : 1) * sizeof *perm);
  if (!perm) return -1;
  for (int64_t b = 0; b < rows; b++) {
    for (int64_t i = 0; i < grid; i++) perm[i] = i;
    for (int64_t i = grid - 1; i >= 1; i--) {
      int64_t j = bench_rng_below(rng, i + 1);
      int64_t swap = perm[i];
      perm[i] = perm[j];
      perm[j] = swap;
    }
    /* docs/report.md, Profile and inputs: the first kmax of the permutation, sorted */
    qsort(perm, (size_t)k, sizeof *perm, compare_i64);
    for (int64_t i = 0; i < k; i++) bench_set(ids, b * k + i, (double)perm[i]);
  }
  free(perm);
  return 0;
}
