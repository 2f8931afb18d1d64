/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's tile ops against the cpu backend, through the public
 * API (docs/ops.md, tilepack, tileunpack, fused_pack_op_unpack): random
 * inputs drawn afresh for each of two calls, the device output poisoned
 * before each call (cc_run); every float dtype, both index dtypes, odd
 * shapes, duplicates, overlaps, K = 0, B > 1, outputs aliasing inputs where
 * the API allows. Copy ops must match bit for bit; the others within twice
 * the bound of docs/ops.md, Rounding and parity (each side carries its own
 * error). Skipped (exit 77, the reason on stdout) where
 * the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

/* ---- tilepack ---------------------------------------------------------------- */

static void tilepack_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                          int64_t gw, int64_t t, int64_t K) {
  char what[200];
  snprintf(what, sizeof what, "tilepack %s/%s B%lld C%lld %lldx%lld t%lld K%lld",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K);
  apx_tensor f = tu_host4(dt, B, C, gh * t, gw * t), idx = tu_host2(it, B, K);
  apx_tensor want = tu_host5(dt, B, K, C, t, t);
  for (int call = 0; call < 2; call++) {
    fill_values(&f, 0);
    tu_fill_int(&rng, &idx, 0, gh * gw - 1); /* duplicates likely */
    apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
    a.features = &f;
    a.idx = &idx;
    a.tile = t;
    a.out = &want;
    cc_case c = {what, APX_OP_TILEPACK, &a, {&a.features, &a.idx}, {&a.out}, -1, 0};
    apx_tensor got[CC_MAX_OUTPUTS];
    cc_run(&c, got);
    expect_exact(&got[0], &want, what);
    tu_free(&got[0]);
  }
  tu_free(&f);
  tu_free(&idx);
  tu_free(&want);
}

START_TEST(test_tilepack) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      tilepack_case(float_dtypes[d], index_dtypes[i], 2, 3, 3, 5, 4, 7);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 5, 2, 3, 3, 9); /* odd t */
      tilepack_case(float_dtypes[d], index_dtypes[i], 2, 2, 2, 3, 16, 5);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 1, 2, 2, 32, 3);
      tilepack_case(float_dtypes[d], index_dtypes[i], 3, 4, 4, 4, 8, 0); /* K = 0 */
      /* large K, tiles taken in id order (a sort a batch row): K at the
       * sort's lower bound, between, at its upper bound (4096, 64 tiles:
       * each id many times) and one past it (k order) */
      tilepack_case(float_dtypes[d], index_dtypes[i], 3, 1, 16, 32, 8, 512);
      tilepack_case(float_dtypes[d], index_dtypes[i], 2, 3, 32, 40, 4, 700);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 2, 8, 8, 2, 4096);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 2, 8, 8, 2, 4097);
    }
}
END_TEST

/* ---- tileunpack --------------------------------------------------------------- */

/* tileunpack blend in float64 (docs/ops.md, tileunpack): out = base; per batch row
 * the tiles in ascending key order, cur = (1-a)*cur + a*tile, a rounded to
 * the base dtype first; the result rounded once into `out`. */
static void blend_truth(const apx_tensor *base, const apx_tensor *packed, const apx_tensor *idx,
                        const apx_tensor *origins, const apx_tensor *levels, double alpha,
                        apx_tensor *out) {
  int64_t B = base->shape[0], C = base->shape[1], H = base->shape[2], W = base->shape[3];
  int64_t K = packed->shape[1], t = packed->shape[3], gw = W / t;
  apx_tensor a1 = tu_host1(base->dtype, 1);
  tu_set(&a1, 0, alpha);
  double a = tu_get(&a1, 0);
  tu_free(&a1);
  int64_t n = B * C * H * W;
  double *cur = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) cur[i] = tu_get(base, i);
  int ob = 1;
  while (K > 1 && ((int64_t)1 << ob) < K) ob++; /* max(1, bit_length(K-1)) */
  int64_t lmin = 0;
  for (int64_t i = 0; levels && i < B * K; i++) {
    int64_t v = get_index(levels, i);
    if (i == 0 || v < lmin) lmin = v;
  }
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t k = 0; k < K; k++) order[k] = k;
    for (int64_t i = 1; i < K; i++) /* insertion sort by key (keys are distinct) */
      for (int64_t j = i; j > 0; j--) {
        int64_t ka = order[j - 1], kb = order[j];
        int64_t key_a = levels ? ((get_index(levels, b * K + ka) - lmin) << ob) + ka : ka;
        int64_t key_b = levels ? ((get_index(levels, b * K + kb) - lmin) << ob) + kb : kb;
        if (key_a <= key_b) break;
        order[j - 1] = kb;
        order[j] = ka;
      }
    for (int64_t r = 0; r < K; r++) {
      int64_t k = order[r], y0, x0;
      if (idx) {
        int64_t id = get_index(idx, b * K + k);
        y0 = id / gw * t;
        x0 = id % gw * t;
      } else {
        y0 = get_index(origins, (b * K + k) * 2);
        x0 = get_index(origins, (b * K + k) * 2 + 1);
      }
      for (int64_t c = 0; c < C; c++)
        for (int64_t dy = 0; dy < t; dy++)
          for (int64_t dx = 0; dx < t; dx++) {
            int64_t o = ((b * C + c) * H + y0 + dy) * W + x0 + dx;
            double v = tu_get(packed, (((b * K + k) * C + c) * t + dy) * t + dx);
            cur[o] = (1 - a) * cur[o] + a * v;
          }
    }
  }
  for (int64_t i = 0; i < n; i++) tu_set(out, i, cur[i]);
  free(order);
  free(cur);
}

/* tileunpack_case's levels: tu_fill_int(-2, 3) unless a test sets this
 * (levels at the int32 key's limit for the table kernel's own check) */
static void (*unpack_levels_fill)(const apx_tensor *levels);

/* near the bottom of the levels' dtype: the span's subtraction wraps nowhere */
static void levels_at_limit(const apx_tensor *levels) {
  fill_levels_at_limit(levels, levels->dtype == APX_DTYPE_I64 ? INT64_MIN + 3 : INT32_MIN + 3, 0);
}
/* all equal, at the dtype's bottom: span 0 */
static void levels_all_bottom(const apx_tensor *levels) {
  int64_t n = levels->shape[0] * levels->shape[1];
  for (int64_t i = 0; i < n; i++)
    set_index(levels, i, levels->dtype == APX_DTYPE_I64 ? INT64_MIN : INT32_MIN);
}

static void tileunpack_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                            int64_t gw, int64_t t, int64_t K, int use_origins, int use_levels,
                            apx_overlap_mode mode, int alias) {
  char what[240];
  snprintf(what, sizeof what,
           "tileunpack %s/%s B%lld C%lld %lldx%lld t%lld K%lld origins=%d levels=%d %s alias=%d",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K, use_origins, use_levels,
           mode == APX_OVERLAP_BLEND ? "blend" : "override", alias);
  int64_t H = gh * t, W = gw * t;
  apx_tensor base = tu_host4(dt, B, C, H, W), packed = tu_host5(dt, B, K, C, t, t);
  apx_tensor idx = tu_host2(it, B, K), origins = tu_host3(it, B, K, 2);
  apx_tensor levels = tu_host2(it, B, K), want = tu_host4(dt, B, C, H, W);
  double alpha = tu_uniform(&rng);
  for (int call = 0; call < 2; call++) {
    fill_values(&base, 0);
    fill_values(&packed, 0);
    tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    for (int64_t i = 0; i < B * K; i++) {
      /* free origins: partial overlaps, sometimes aligned */
      int aligned = tu_int(&rng, 0, 3) == 0;
      int64_t y0 = tu_int(&rng, 0, H - t), x0 = tu_int(&rng, 0, W - t);
      if (aligned) {
        y0 -= y0 % t;
        x0 -= x0 % t;
      }
      set_index(&origins, 2 * i, y0);
      set_index(&origins, 2 * i + 1, x0);
    }
    if (unpack_levels_fill)
      unpack_levels_fill(&levels);
    else
      tu_fill_int(&rng, &levels, -2, 3);
    apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
    a.base = &base;
    a.packed = &packed;
    a.idx = use_origins ? NULL : &idx;
    a.origins = use_origins ? &origins : NULL;
    a.levels = use_levels ? &levels : NULL;
    a.mode = mode;
    a.blend_alpha = alpha;
    a.out = &want;
    cc_case c = {what, APX_OP_TILEUNPACK, &a, {&a.base, &a.packed, &a.idx, &a.origins, &a.levels},
                 {&a.out}, alias ? 0 : -1, 0};
    apx_tensor got[CC_MAX_OUTPUTS];
    cc_run(&c, got);
    if (mode == APX_OVERLAP_OVERRIDE) {
      expect_exact(&got[0], &want, what);
    } else {
      /* against the formula in float64 (docs/ops.md, Rounding and parity): the cpu backend rounds
       * every step to the storage dtype (model R), the cuda backend once,
       * so after many nested blends they may differ by more than either
       * differs from the truth */
      blend_truth(&base, &packed, use_origins ? NULL : &idx, use_origins ? &origins : NULL,
                  use_levels ? &levels : NULL, alpha, &want);
      /* nested blends stay within the largest input magnitude */
      double m = 0;
      for (int64_t i = 0; i < apx_tensor_numel(&base); i++) m = fmax(m, fabs(tu_get(&base, i)));
      for (int64_t i = 0; i < apx_tensor_numel(&packed); i++)
        m = fmax(m, fabs(tu_get(&packed, i)));
      expect_close_flat(&got[0], &want, m, 0, what);
    }
    tu_free(&got[0]);
  }
  tu_free(&base);
  tu_free(&packed);
  tu_free(&idx);
  tu_free(&origins);
  tu_free(&levels);
  tu_free(&want);
}

START_TEST(test_tileunpack) {
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 16; combo++) {
      apx_dtype it = index_dtypes[combo & 1];
      int origins = (combo >> 1) & 1, levels = (combo >> 2) & 1;
      apx_overlap_mode mode = (combo >> 3) & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
      tileunpack_case(float_dtypes[d], it, 2, 3, 3, 4, 4, 9, origins, levels, mode, 0);
      tileunpack_case(float_dtypes[d], it, 1, 2, 2, 3, 3, 13, origins, levels, mode, combo & 1);
    }
  for (int d = 0; d < 3; d++) { /* K = 0, t = 8 and 16, many duplicates */
    tileunpack_case(float_dtypes[d], APX_DTYPE_I64, 2, 3, 2, 2, 8, 0, 0, 0, APX_OVERLAP_OVERRIDE,
                    0);
    tileunpack_case(float_dtypes[d], APX_DTYPE_I32, 2, 5, 4, 4, 8, 40, 0, 1,
                    APX_OVERLAP_OVERRIDE, 1);
    tileunpack_case(float_dtypes[d], APX_DTYPE_I32, 1, 3, 2, 2, 16, 30, 1, 1, APX_OVERLAP_BLEND,
                    0);
  }
  /* ids with K above the small-K form's 64: the winner map (override), the
   * map plus sorted entries for cells with several tiles (blend) */
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 4; combo++)
      tileunpack_case(float_dtypes[d], index_dtypes[combo & 1], 2, 5, 8, 9, 4, 100, 0,
                      combo >> 1, combo & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE,
                      combo == 3);
  /* small K but B*K above the in-kernel check's 1024 entries: the
   * small-K kernel after a separate pre-pass */
  tileunpack_case(APX_DTYPE_F16, APX_DTYPE_I32, 20, 2, 4, 4, 4, 60, 0, 1, APX_OVERLAP_BLEND, 0);
  tileunpack_case(APX_DTYPE_F32, APX_DTYPE_I64, 20, 2, 4, 4, 4, 60, 0, 0, APX_OVERLAP_OVERRIDE,
                  1);
  /* more channels than one thread's run (a remainder run), every form */
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 8; combo++) {
      int origins = combo & 1, levels = (combo >> 1) & 1;
      apx_overlap_mode mode = (combo >> 2) & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
      tileunpack_case(float_dtypes[d], APX_DTYPE_I64, 2, 37, 8, 6, 8, 30, origins, levels, mode,
                      combo == 0 || combo == 6);
    }
  /* the small-K table kernel's edges: more planes than the grid's 65535
   * rows (a block walks planes: staged tile slices reloaded, the table
   * rebuilt where the batch row changes, kept where it does not), and a
   * tile grid above its 2048 cells (the ranked small-K kernel) */
  for (int blend = 0; blend < 2; blend++) {
    apx_overlap_mode mode = blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
    tileunpack_case(APX_DTYPE_F16, APX_DTYPE_I32, 2, 40000, 1, 2, 2, 3, 0, 1, mode, !blend);
    tileunpack_case(APX_DTYPE_F32, APX_DTYPE_I64, 1, 70000, 1, 2, 2, 3, 0, 0, mode, blend);
    tileunpack_case(APX_DTYPE_BF16, APX_DTYPE_I64, 1, 2, 48, 48, 1, 50, 0, 1, mode, 0);
  }
}
END_TEST

/* Good levels at the key's limit (both ends present) and all equal at the
 * dtype's bottom, through the own check (B*K <= 256, one warp and eight,
 * K not a multiple of 32) and beyond it (260 entries): accepted, the
 * output as the cpu backend's. */
START_TEST(test_tileunpack_limits) {
  void (*fills[2])(const apx_tensor *) = {levels_at_limit, levels_all_bottom};
  for (int f = 0; f < 2; f++) {
    unpack_levels_fill = fills[f];
    for (int i = 0; i < 2; i++) {
      apx_dtype it = index_dtypes[i];
      for (int blend = 0; blend < 2; blend++) {
        apx_overlap_mode mode = blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
        tileunpack_case(APX_DTYPE_F16, it, 1, 4, 16, 16, 8, 32, 0, 1, mode, 0);
        tileunpack_case(APX_DTYPE_F16, it, 4, 2, 4, 4, 4, 64, 0, 1, mode, blend);
        tileunpack_case(APX_DTYPE_BF16, it, 3, 2, 4, 4, 4, 37, 0, 1, mode, 0);
        tileunpack_case(APX_DTYPE_F32, it, 5, 2, 4, 4, 4, 52, 0, 1, mode, 0);
      }
    }
  }
  unpack_levels_fill = NULL;
}
END_TEST

/* ---- fused_pack_op_unpack ----------------------------------------------------- */

static void fused_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh, int64_t gw,
                       int64_t t, int64_t K, int unique, int alias) {
  char what[200];
  snprintf(what, sizeof what, "fused %s/%s B%lld C%lld %lldx%lld t%lld K%lld unique=%d alias=%d",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K, unique, alias);
  int64_t H = gh * t, W = gw * t;
  apx_tensor f = tu_host4(dt, B, C, H, W), idx = tu_host2(it, B, K);
  apx_tensor want = tu_host4(dt, B, C, H, W);
  for (int call = 0; call < 2; call++) {
    fill_values(&f, call);
    if (unique)
      fill_unique(&idx, gh * gw);
    else
      tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    apx_fused_pack_op_unpack_args a = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
    a.features = &f;
    a.idx = &idx;
    a.tile = t;
    a.value_scale = tu_normal(&rng);
    a.value_bias = tu_normal(&rng);
    a.gate_scale = tu_normal(&rng);
    a.gate_bias = tu_normal(&rng);
    a.require_unique = unique;
    a.out = &want;
    cc_case c = {what, APX_OP_FUSED_PACK_OP_UNPACK, &a, {&a.features, &a.idx}, {&a.out},
                 alias ? 0 : -1, 0};
    apx_tensor got[CC_MAX_OUTPUTS];
    cc_run(&c, got);
    int64_t n = apx_tensor_numel(&f);
    double *mag = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      double x = tu_get(&f, i);
      mag[i] = (fabs(x * a.value_scale) + fabs(a.value_bias)) *
               (fabs(x * a.gate_scale) + fabs(a.gate_bias));
    }
    expect_close(&got[0], &want, mag, 0, what);
    free(mag);
    tu_free(&got[0]);
  }
  tu_free(&f);
  tu_free(&idx);
  tu_free(&want);
}

START_TEST(test_fused) {
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 8; combo++) {
      apx_dtype it = index_dtypes[combo & 1];
      int unique = (combo >> 1) & 1, alias = (combo >> 2) & 1;
      fused_case(float_dtypes[d], it, 2, 3, 3, 5, 4, unique ? 9 : 25, unique, alias);
      fused_case(float_dtypes[d], it, 1, 2, 2, 3, 3, unique ? 6 : 11, unique, alias);
      fused_case(float_dtypes[d], it, 2, 2, 2, 2, 16, unique ? 3 : 7, unique, alias);
    }
  fused_case(APX_DTYPE_F16, APX_DTYPE_I32, 2, 3, 4, 4, 8, 0, 1, 0); /* K = 0 */
  /* K above the one-launch form's 64: the owner map, and require_unique
   * through the pre-pass's id map */
  for (int combo = 0; combo < 8; combo++) {
    int unique = combo & 1, alias = (combo >> 1) & 1;
    fused_case(float_dtypes[combo % 3], index_dtypes[(combo >> 2) & 1], 2, 3, 12, 10, 4,
               unique ? 100 : 130, unique, alias);
  }
  /* a tile grid above the one-launch form's 8192 tiles (t = 1) */
  fused_case(APX_DTYPE_BF16, APX_DTYPE_I64, 1, 2, 100, 90, 1, 50, 1, 0);
}
END_TEST

/* Copy ops move bits: tilepack and tileunpack override (ids and origins,
 * levels or not, aliased or not: every kernel form), with a quarter of the
 * values NaN payloads, +-0 and subnormals (bit_specials), bitwise against
 * the cpu backend (gather and index_select: test_cuda_index). */
START_TEST(test_copy_ops_move_bits) {
  bit_specials = 1;
  for (int d = 0; d < 3; d++) {
    apx_dtype dt = float_dtypes[d];
    for (int i = 0; i < 2; i++)
      tilepack_case(dt, index_dtypes[i], 2, 3, 3, 4, 4, 9);
    for (int combo = 0; combo < 8; combo++) {
      apx_dtype it = index_dtypes[combo & 1];
      int origins = (combo >> 1) & 1, levels = (combo >> 2) & 1;
      tileunpack_case(dt, it, 2, 3, 3, 4, 4, 9, origins, levels, APX_OVERLAP_OVERRIDE, 0);
      tileunpack_case(dt, it, 1, 2, 2, 3, 3, 13, origins, levels, APX_OVERLAP_OVERRIDE, 1);
      tileunpack_case(dt, it, 2, 37, 8, 6, 8, 30, origins, levels, APX_OVERLAP_OVERRIDE,
                      combo == 0);
      tileunpack_case(dt, it, 2, 5, 8, 9, 4, 100, origins, levels, APX_OVERLAP_OVERRIDE, 0);
    }
  }
  bit_specials = 0;
}
END_TEST

static void add_tests(Suite *s) {
  TCase *pack = cc_tcase(s, "tilepack"), *ops = cc_tcase(s, "ops");
  tcase_add_test(pack, test_tilepack);
  tcase_add_test(ops, test_tileunpack);
  tcase_add_test(ops, test_tileunpack_limits);
  tcase_add_test(ops, test_fused);
  tcase_add_test(ops, test_copy_ops_move_bits);
}

int main(void) { return cc_main("cuda_tile", add_tests); }
