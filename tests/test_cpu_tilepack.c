/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's tilepack (docs/ops.md, tilepack) against the plain reference
 * loop of ref_tile.c, bit for bit, through the public API with the cpu
 * backend forced: random shapes (odd C, B > 1, t from 1 to 16, K = 0,
 * duplicate ids), every float dtype x both index dtypes, cases large
 * enough to run multi-threaded and to take the streaming-store path. Each case runs twice on fresh
 * inputs with a poisoned output, once per instruction-set path. */
#include <check.h>
#include <stdlib.h>

#include "ref_tile.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
static const apx_dtype index_dtypes[] = {APX_DTYPE_I32, APX_DTYPE_I64};

/* One shape, called twice per ISA path with fresh data; checks bits. */
static void run_case(apx_context *ctx, tu_rng *r, apx_dtype dtype, apx_dtype index_dtype, int64_t B,
                     int64_t C, int64_t gh, int64_t gw, int64_t t, int64_t K, int cheap_fill) {
  apx_tensor features = tu_host4(dtype, B, C, gh * t, gw * t);
  apx_tensor idx = tu_host2(index_dtype, B, K);
  apx_tensor out = tu_host5(dtype, B, K, C, t, t);
  apx_tensor want = tu_host5(dtype, B, K, C, t, t);
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      if (cheap_fill)
        tu_fill_uniform(r, &features, -4.0, 4.0);
      else
        tu_fill_normal(r, &features);
      tu_fill_int(r, &idx, 0, gh * gw - 1); /* duplicates likely */
      tu_poison(&out);
      apx_tilepack_args args = APX_TILEPACK_ARGS_INIT;
      args.features = &features;
      args.idx = &idx;
      args.tile = t;
      args.out = &want;
      ref_tilepack(&args);
      args.out = &out;
      apx_status st = apx_tilepack(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "tilepack: %s: %s", apx_status_name(st), apx_last_error());
      int64_t bad = ref_first_mismatch(&out, &want, 0);
      ck_assert_msg(bad < 0,
                    "tilepack %s idx %s B=%lld C=%lld grid %lldx%lld t=%lld K=%lld path %s "
                    "call %d: element %lld differs (got %g, want %g)",
                    apx_dtype_name(dtype), apx_dtype_name(index_dtype), (long long)B, (long long)C,
                    (long long)gh, (long long)gw, (long long)t, (long long)K,
                    ref_isa_path_name(path), call, (long long)bad,
                    bad < 0 ? 0.0 : tu_get(&out, bad), bad < 0 ? 0.0 : tu_get(&want, bad));
    }
  }
  tu_free(&features);
  tu_free(&idx);
  tu_free(&out);
  tu_free(&want);
}

START_TEST(test_tilepack_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7031u};
  static const int64_t tiles[] = {1, 2, 3, 4, 8, 16};
  for (int di = 0; di < 3; di++)
    for (int ii = 0; ii < 2; ii++)
      for (int rep = 0; rep < 6; rep++) {
        int64_t t = tiles[tu_int(&r, 0, 5)];
        int64_t gh = tu_int(&r, 1, 4), gw = tu_int(&r, 1, 5);
        int64_t K = rep == 0 ? 0 : tu_int(&r, 1, 2 * gh * gw);
        run_case(ctx, &r, float_dtypes[di], index_dtypes[ii], tu_int(&r, 1, 3),
                 2 * tu_int(&r, 0, 4) + 1, gh, gw, t, K, 0);
      }
  /* empty batch and no channels */
  run_case(ctx, &r, APX_DTYPE_F16, APX_DTYPE_I32, 0, 3, 2, 2, 4, 3, 0);
  run_case(ctx, &r, APX_DTYPE_F32, APX_DTYPE_I64, 2, 0, 2, 2, 4, 3, 0);
  apx_close(ctx);
}
END_TEST

/* Big enough for the OpenMP path and for several bands per plane. */
START_TEST(test_tilepack_large) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7032u};
  for (int di = 0; di < 3; di++)
    run_case(ctx, &r, float_dtypes[di], index_dtypes[di % 2], 2, 5, 32, 24, 8, 400, 0);
  apx_close(ctx);
}
END_TEST

/* Outputs of 8 MiB and more take the streaming-store path. */
START_TEST(test_tilepack_streaming) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x7033u};
  run_case(ctx, &r, APX_DTYPE_F32, APX_DTYPE_I32, 1, 64, 32, 32, 8, 512, 1);
  run_case(ctx, &r, APX_DTYPE_F16, APX_DTYPE_I64, 1, 128, 32, 32, 8, 520, 1);
  run_case(ctx, &r, APX_DTYPE_BF16, APX_DTYPE_I32, 2, 16, 16, 16, 16, 260, 1);
  apx_close(ctx);
}
END_TEST

/* The threaded path with 1 and 3 threads (the default is the core count). */
START_TEST(test_tilepack_thread_counts) {
  static const int counts[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    apx_context *ctx = tu_open_cpu_threads(counts[i]);
    ck_assert_msg(ctx != NULL, "apx_open with threads = %d: %s", counts[i], apx_last_error());
    tu_rng r = {tu_seed() ^ (0x7034u + (uint64_t)i)};
    run_case(ctx, &r, APX_DTYPE_F16, APX_DTYPE_I64, 2, 5, 32, 24, 8, 400, 0);
    run_case(ctx, &r, APX_DTYPE_F32, APX_DTYPE_I32, 1, 64, 32, 32, 8, 512, 1);
    apx_close(ctx);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_tilepack");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_tilepack_random);
  tcase_add_test(tc, test_tilepack_large);
  tcase_add_test(tc, test_tilepack_streaming);
  tcase_add_test(tc, test_tilepack_thread_counts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
