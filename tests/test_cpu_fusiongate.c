/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's fusiongate alpha and fuse (docs/ops.md, fusiongate_alpha and
 * fusiongate_fuse) against the plain reference loops of ref_tile.c, through the public API with the
 * cpu backend forced. alpha: proxies [B,1,H,W] or [B,H,W] in every float
 * dtype, out in every float dtype, proxies with NaN, +-inf, -0,
 * subnormals and values that overflow fp16 after the cast, log weights
 * beyond softplus's threshold of 20; within 1 storage ulp (sigmoid is a
 * transcendental, docs/ops.md, Rounding and parity). fuse: alpha 3-D or 4-D, out aliasing
 * base, the same special values; bit for bit. Each case runs twice on
 * fresh inputs with a poisoned output, once per instruction-set path. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "ref_tile.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};

/* Mostly N(0, scale) values, with special values mixed in. */
static void fill_special(tu_rng *r, const apx_tensor *t, double scale) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double v = scale * tu_normal(r);
    switch (tu_int(r, 0, 19)) {
    case 0:
      v = NAN;
      break;
    case 1:
      v = INFINITY;
      break;
    case 2:
      v = -INFINITY;
      break;
    case 3:
      v = -0.0;
      break;
    case 4:
      v = 1e-39 * (tu_uniform(r) - 0.5);
      break; /* fp32/bf16 subnormal */
    case 5:
      v = 3e-6 * (tu_uniform(r) - 0.5);
      break; /* fp16 subnormal */
    case 6:
      v = 7e4 * (tu_int(r, 0, 1) ? 1 : -1);
      break; /* beyond fp16 */
    default:
      break;
    }
    tu_set(t, i, v);
  }
}

static apx_tensor proxy_tensor(apx_dtype dtype, int three_d, int64_t B, int64_t H, int64_t W) {
  return three_d ? tu_host3(dtype, B, H, W) : tu_host4(dtype, B, 1, H, W);
}

static void run_alpha_case(apx_context *ctx, tu_rng *r, apx_dtype in_dtype, apx_dtype out_dtype,
                           int three_d, int64_t B, int64_t H, int64_t W, double blw, double ulw,
                           double bias) {
  apx_tensor boundary = proxy_tensor(in_dtype, three_d, B, H, W);
  apx_tensor uncertainty = proxy_tensor(in_dtype, !three_d, B, H, W);
  apx_tensor out = tu_host4(out_dtype, B, 1, H, W);
  apx_tensor want = tu_host4(out_dtype, B, 1, H, W);
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      fill_special(r, &boundary, 3.0);
      fill_special(r, &uncertainty, 3.0);
      tu_poison(&out);
      apx_fusiongate_alpha_args args = APX_FUSIONGATE_ALPHA_ARGS_INIT;
      args.boundary = &boundary;
      args.uncertainty = &uncertainty;
      args.boundary_log_weight = blw;
      args.uncertainty_log_weight = ulw;
      args.bias = bias;
      args.out = &want;
      ref_fusiongate_alpha(&args);
      args.out = &out;
      apx_status st = apx_fusiongate_alpha(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "fusiongate_alpha: %s: %s", apx_status_name(st),
                    apx_last_error());
      int64_t bad = ref_first_mismatch(&out, &want, 1);
      ck_assert_msg(
          bad < 0,
          "fusiongate_alpha %s -> %s %s B=%lld H=%lld W=%lld blw=%g ulw=%g bias=%g "
          "path %s call %d: element %lld more than 1 ulp off (got %.9g, want %.9g; "
          "proxies %g, %g)",
          apx_dtype_name(in_dtype), apx_dtype_name(out_dtype), three_d ? "3-D" : "4-D",
          (long long)B, (long long)H, (long long)W, blw, ulw, bias, ref_isa_path_name(path), call,
          (long long)bad, bad < 0 ? 0.0 : tu_get(&out, bad), bad < 0 ? 0.0 : tu_get(&want, bad),
          bad < 0 ? 0.0 : tu_get(&boundary, bad), bad < 0 ? 0.0 : tu_get(&uncertainty, bad));
    }
  }
  tu_free(&boundary);
  tu_free(&uncertainty);
  tu_free(&out);
  tu_free(&want);
}

START_TEST(test_alpha_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xa1f4u};
  for (int in = 0; in < 3; in++)
    for (int out = 0; out < 3; out++)
      for (int rep = 0; rep < 3; rep++) {
        double blw = rep == 0 ? 1.0 : rep == 1 ? 25.0 * tu_uniform(&r) : 3.0 * tu_normal(&r);
        double ulw = rep == 0 ? 1.0 : 3.0 * tu_normal(&r);
        double bias = rep == 0 ? 0.0 : tu_normal(&r);
        run_alpha_case(ctx, &r, float_dtypes[in], float_dtypes[out], rep & 1, tu_int(&r, 1, 3),
                       tu_int(&r, 1, 17), tu_int(&r, 1, 23), blw, ulw, bias);
      }
  /* large enough for the OpenMP path */
  run_alpha_case(ctx, &r, APX_DTYPE_F16, APX_DTYPE_F32, 0, 2, 96, 80, 1.0, 0.5, -0.25);
  apx_close(ctx);
}
END_TEST

static void run_fuse_case(apx_context *ctx, tu_rng *r, apx_dtype dtype, int alpha_3d, int alias,
                          int64_t B, int64_t C, int64_t H, int64_t W) {
  apx_tensor base = tu_host4(dtype, B, C, H, W);
  apx_tensor detail = tu_host4(dtype, B, C, H, W);
  apx_tensor alpha = proxy_tensor(dtype, alpha_3d, B, H, W);
  apx_tensor out = tu_host4(dtype, B, C, H, W);
  apx_tensor want = tu_host4(dtype, B, C, H, W);
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      fill_special(r, &base, 2.0);
      fill_special(r, &detail, 2.0);
      /* alpha mostly in [0, 1] as the gate makes it, some specials */
      int64_t n = apx_tensor_numel(&alpha);
      for (int64_t i = 0; i < n; i++)
        tu_set(&alpha, i, tu_int(r, 0, 9) ? tu_uniform(r) : tu_normal(r) * 1e3);
      apx_fusiongate_fuse_args args = APX_FUSIONGATE_FUSE_ARGS_INIT;
      args.base = &base;
      args.detail = &detail;
      args.alpha = &alpha;
      args.out = &want;
      ref_fusiongate_fuse(&args);
      if (alias) {
        args.out = &base;
      } else {
        tu_poison(&out);
        args.out = &out;
      }
      apx_status st = apx_fusiongate_fuse(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "fusiongate_fuse: %s: %s", apx_status_name(st), apx_last_error());
      const apx_tensor *got = alias ? &base : &out;
      int64_t bad = ref_first_mismatch(got, &want, 0);
      ck_assert_msg(bad < 0,
                    "fusiongate_fuse %s alpha %s alias=%d B=%lld C=%lld H=%lld W=%lld path %s "
                    "call %d: element %lld differs (got %.9g, want %.9g)",
                    apx_dtype_name(dtype), alpha_3d ? "3-D" : "4-D", alias, (long long)B,
                    (long long)C, (long long)H, (long long)W, ref_isa_path_name(path), call,
                    (long long)bad, bad < 0 ? 0.0 : tu_get(got, bad),
                    bad < 0 ? 0.0 : tu_get(&want, bad));
    }
  }
  tu_free(&base);
  tu_free(&detail);
  tu_free(&alpha);
  tu_free(&out);
  tu_free(&want);
}

START_TEST(test_fuse_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xf05eu};
  for (int di = 0; di < 3; di++)
    for (int combo = 0; combo < 8; combo++)
      run_fuse_case(ctx, &r, float_dtypes[di], combo & 1, (combo >> 1) & 1, tu_int(&r, 1, 3),
                    2 * tu_int(&r, 0, 3) + 1, tu_int(&r, 1, 19), tu_int(&r, 1, 21));
  /* several segments per plane and the OpenMP path */
  for (int di = 0; di < 3; di++)
    run_fuse_case(ctx, &r, float_dtypes[di], di & 1, di == 1, 2, 3, 130, 131);
  apx_close(ctx);
}
END_TEST

/* The threaded paths with 1 and 3 threads (the default is the core count). */
START_TEST(test_fusiongate_thread_counts) {
  static const int counts[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    apx_context *ctx = tu_open_cpu_threads(counts[i]);
    ck_assert_msg(ctx != NULL, "apx_open with threads = %d: %s", counts[i], apx_last_error());
    tu_rng r = {tu_seed() ^ (0xf05fu + (uint64_t)i)};
    run_alpha_case(ctx, &r, APX_DTYPE_BF16, APX_DTYPE_F16, 1, 2, 96, 80, 0.5, 1.5, 0.25);
    run_fuse_case(ctx, &r, APX_DTYPE_F16, 0, i, 2, 3, 130, 131);
    apx_close(ctx);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_fusiongate");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_alpha_random);
  tcase_add_test(tc, test_fuse_random);
  tcase_add_test(tc, test_fusiongate_thread_counts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
