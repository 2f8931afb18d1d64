/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's tileunpack (docs/ops.md, tileunpack) against the plain
 * reference loop of ref_tile.c, bit for bit, through the public API with
 * the cpu backend forced: override and blend; ids (with duplicates) or
 * pixel origins (tiles shifted by a few pixels so they overlap partly);
 * levels absent, or present with negative values and
 * assume_priority_sorted 0 or 1; K = 0; out aliasing base; every float
 * dtype x both index dtypes; blend_alpha values where rounding the double
 * through fp32 would give another fp16 value. Each case runs twice on fresh
 * inputs with a poisoned output, once per instruction-set path. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "ref_tile.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
static const apx_dtype index_dtypes[] = {APX_DTYPE_I32, APX_DTYPE_I64};

typedef struct unpack_case {
  apx_dtype dtype, index_dtype, level_dtype;
  int64_t B, C, gh, gw, t, K;
  apx_overlap_mode mode;
  int use_origins; /* else ids */
  int use_levels;
  int assume_sorted;
  int alias; /* out is base */
  double blend_alpha;
} unpack_case;

static void set_index(const apx_tensor *t, int64_t i, int64_t v) {
  if (t->dtype == APX_DTYPE_I64)
    ((int64_t *)t->data)[i] = v;
  else
    ((int32_t *)t->data)[i] = (int32_t)v;
}

/* Origins: tile origins moved by up to 4 pixels, kept in bounds, so that
 * tiles overlap partly; every 5th repeats an earlier one exactly. */
static void fill_origins(tu_rng *r, const apx_tensor *origins, int64_t K, int64_t H, int64_t W,
                         int64_t t) {
  int64_t B = origins->shape[0];
  for (int64_t b = 0; b < B; b++)
    for (int64_t k = 0; k < K; k++) {
      int64_t i = b * K + k, y0, x0;
      if (k > 0 && tu_int(r, 0, 4) == 0) {
        int64_t j = b * K + tu_int(r, 0, k - 1);
        y0 = (int64_t)tu_get(origins, 2 * j);
        x0 = (int64_t)tu_get(origins, 2 * j + 1);
      } else {
        y0 = tu_int(r, 0, H / t - 1) * t + tu_int(r, -4, 4);
        x0 = tu_int(r, 0, W / t - 1) * t + tu_int(r, -4, 4);
        y0 = y0 < 0 ? 0 : y0 > H - t ? H - t : y0;
        x0 = x0 < 0 ? 0 : x0 > W - t ? W - t : x0;
      }
      set_index(origins, 2 * i, y0);
      set_index(origins, 2 * i + 1, x0);
    }
}

static void describe(const unpack_case *uc, char *buf, size_t size) {
  snprintf(buf, size,
           "%s idx %s levels %s B=%lld C=%lld grid %lldx%lld t=%lld K=%lld mode=%s %s "
           "levels=%d sorted=%d alias=%d alpha=%.17g",
           apx_dtype_name(uc->dtype), apx_dtype_name(uc->index_dtype),
           apx_dtype_name(uc->level_dtype), (long long)uc->B, (long long)uc->C, (long long)uc->gh,
           (long long)uc->gw, (long long)uc->t, (long long)uc->K,
           uc->mode == APX_OVERLAP_BLEND ? "blend" : "override",
           uc->use_origins ? "origins" : "ids", uc->use_levels, uc->assume_sorted, uc->alias,
           uc->blend_alpha);
}

static void run_case(apx_context *ctx, tu_rng *r, const unpack_case *uc) {
  const int64_t B = uc->B, C = uc->C, t = uc->t, K = uc->K;
  const int64_t H = uc->gh * t, W = uc->gw * t;
  apx_tensor base = tu_host4(uc->dtype, B, C, H, W);
  apx_tensor packed = tu_host5(uc->dtype, B, K, C, t, t);
  apx_tensor idx = tu_host2(uc->index_dtype, B, K);
  apx_tensor origins = tu_host3(uc->index_dtype, B, K, 2);
  apx_tensor levels = tu_host2(uc->level_dtype, B, K);
  apx_tensor out = tu_host4(uc->dtype, B, C, H, W);
  apx_tensor want = tu_host4(uc->dtype, B, C, H, W);
  char what[320];
  describe(uc, what, sizeof what);
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      if (apx_tensor_numel(&base) > 1000000) { /* cheaper for the big cases */
        tu_fill_uniform(r, &base, -4.0, 4.0);
        tu_fill_uniform(r, &packed, -4.0, 4.0);
      } else {
        tu_fill_normal(r, &base);
        tu_fill_normal(r, &packed);
      }
      tu_fill_int(r, &idx, 0, uc->gh * uc->gw - 1); /* duplicates likely */
      fill_origins(r, &origins, K, H, W, t);
      tu_fill_int(r, &levels, -3, 2);
      apx_tileunpack_args args = APX_TILEUNPACK_ARGS_INIT;
      args.base = &base;
      args.packed = &packed;
      if (uc->use_origins)
        args.origins = &origins;
      else
        args.idx = &idx;
      args.levels = uc->use_levels ? &levels : NULL;
      args.assume_priority_sorted = uc->assume_sorted;
      args.mode = uc->mode;
      args.blend_alpha = uc->blend_alpha;
      args.out = &want;
      ref_tileunpack(&args);
      if (uc->alias) {
        args.out = &base;
      } else {
        tu_poison(&out);
        args.out = &out;
      }
      apx_status st = apx_tileunpack(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "tileunpack %s: %s: %s", what, apx_status_name(st),
                    apx_last_error());
      const apx_tensor *got = uc->alias ? &base : &out;
      int64_t bad = ref_first_mismatch(got, &want, 0);
      ck_assert_msg(bad < 0,
                    "tileunpack %s path %s call %d: element %lld differs (got %g, want %g)", what,
                    ref_isa_path_name(path), call, (long long)bad, bad < 0 ? 0.0 : tu_get(got, bad),
                    bad < 0 ? 0.0 : tu_get(&want, bad));
    }
  }
  tu_free(&base);
  tu_free(&packed);
  tu_free(&idx);
  tu_free(&origins);
  tu_free(&levels);
  tu_free(&out);
  tu_free(&want);
}

/* Every combination of mode, placement, levels and aliasing on random
 * small shapes. */
START_TEST(test_tileunpack_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7551u};
  static const int64_t tiles[] = {1, 2, 3, 4, 8, 16, 24};
  for (int di = 0; di < 3; di++)
    for (int combo = 0; combo < 32; combo++) {
      unpack_case uc = {0};
      uc.dtype = float_dtypes[di];
      uc.index_dtype = index_dtypes[combo & 1];
      uc.level_dtype = index_dtypes[tu_int(&r, 0, 1)];
      uc.mode = (combo >> 1) & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
      uc.use_origins = (combo >> 2) & 1;
      uc.use_levels = (combo >> 3) & 1;
      uc.alias = (combo >> 4) & 1;
      /* without levels the core requires assume_priority_sorted = 1 */
      uc.assume_sorted = uc.use_levels ? (int)tu_int(&r, 0, 1) : 1;
      uc.t = tiles[tu_int(&r, 0, 6)];
      uc.B = tu_int(&r, 1, 3);
      uc.C = 2 * tu_int(&r, 0, 3) + 1;
      uc.gh = tu_int(&r, 1, 4);
      uc.gw = tu_int(&r, 1, 5);
      uc.K = tu_int(&r, 1, 2 * uc.gh * uc.gw);
      uc.blend_alpha = tu_uniform(&r);
      run_case(ctx, &r, &uc);
    }
  apx_close(ctx);
}
END_TEST

/* K = 0: out is a copy of base (or base itself, untouched); B = 0. */
START_TEST(test_tileunpack_empty) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7552u};
  for (int di = 0; di < 3; di++)
    for (int combo = 0; combo < 8; combo++) {
      unpack_case uc = {float_dtypes[di],
                        index_dtypes[combo & 1],
                        APX_DTYPE_I32,
                        2,
                        3,
                        2,
                        3,
                        4,
                        0,
                        (combo >> 1) & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE,
                        (combo >> 2) & 1,
                        0,
                        1,
                        0,
                        0.25};
      run_case(ctx, &r, &uc);
      uc.alias = 1;
      run_case(ctx, &r, &uc);
      uc.B = 0; /* empty batch */
      uc.K = 2;
      run_case(ctx, &r, &uc);
    }
  apx_close(ctx);
}
END_TEST

/* blend_alpha becomes a 0-d tensor of the base dtype straight from the
 * double: these values round differently when they go through fp32 first
 * (0.5 + 2^-12 + 2^-40 is just above an fp16 tie at 0.5 + 2^-12, which
 * fp32 cannot see), plus the ends 0 and 1. */
START_TEST(test_tileunpack_blend_alpha_rounding) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7553u};
  const double alphas[] = {
      0.0,      1.0, 0.5 + 0x1p-12 + 0x1p-40, 0.5 + 0x1p-9 + 0x1p-40, 0.25 - 0x1p-14 - 0x1p-41,
      1.0 / 3.0};
  for (int di = 0; di < 3; di++)
    for (size_t ai = 0; ai < sizeof alphas / sizeof alphas[0]; ai++) {
      unpack_case uc = {float_dtypes[di],
                        APX_DTYPE_I64,
                        APX_DTYPE_I64,
                        2,
                        3,
                        3,
                        3,
                        4,
                        12,
                        APX_OVERLAP_BLEND,
                        1,
                        1,
                        0,
                        0,
                        alphas[ai]};
      run_case(ctx, &r, &uc);
    }
  apx_close(ctx);
}
END_TEST

/* Big enough for the OpenMP path and several bands per plane, with tiles
 * crossing band edges. */
START_TEST(test_tileunpack_large) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7554u};
  for (int di = 0; di < 3; di++)
    for (int mode = 0; mode < 2; mode++) {
      unpack_case uc = {float_dtypes[di],
                        index_dtypes[di % 2],
                        APX_DTYPE_I32,
                        2,
                        3,
                        40,
                        24,
                        8,
                        500,
                        mode ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE,
                        1,
                        1,
                        0,
                        mode,
                        0.375};
      run_case(ctx, &r, &uc);
    }
  apx_close(ctx);
}
END_TEST

/* 8 MiB outputs: many bands per batch row, tiles crossing band edges. */
START_TEST(test_tileunpack_big) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7555u};
  for (int combo = 0; combo < 4; combo++) {
    int f32 = combo < 2;
    unpack_case uc = {f32 ? APX_DTYPE_F32 : APX_DTYPE_BF16,
                      APX_DTYPE_I32,
                      APX_DTYPE_I64,
                      1,
                      f32 ? 32 : 64,
                      32,
                      32,
                      8,
                      700,
                      combo & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE,
                      combo & 1,
                      combo >> 1,
                      1,
                      combo == 1 || combo == 2,
                      0.625};
    run_case(ctx, &r, &uc);
  }
  apx_close(ctx);
}
END_TEST

/* The threaded path with 1 and 3 threads (the default is the core count). */
START_TEST(test_tileunpack_thread_counts) {
  static const int counts[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    apx_context *ctx = tu_open_cpu_threads(counts[i]);
    ck_assert_msg(ctx != NULL, "apx_open with threads = %d: %s", counts[i], apx_last_error());
    tu_rng r = {tu_seed() ^ (0x7556u + (uint64_t)i)};
    for (int mode = 0; mode < 2; mode++) {
      unpack_case uc = {APX_DTYPE_F32,
                        APX_DTYPE_I64,
                        APX_DTYPE_I32,
                        2,
                        3,
                        40,
                        24,
                        8,
                        500,
                        mode ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE,
                        1,
                        1,
                        0,
                        mode,
                        0.375};
      run_case(ctx, &r, &uc);
    }
    apx_close(ctx);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_tileunpack");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_tileunpack_random);
  tcase_add_test(tc, test_tileunpack_empty);
  tcase_add_test(tc, test_tileunpack_blend_alpha_rounding);
  tcase_add_test(tc, test_tileunpack_large);
  tcase_add_test(tc, test_tileunpack_big);
  tcase_add_test(tc, test_tileunpack_thread_counts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
