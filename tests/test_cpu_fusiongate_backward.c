/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's fusiongate_fuse_backward and fusiongate_alpha_backward
 * (docs/ops.md, each op's section) against the double reference loops of
 * ref_backward.c, through the public API with the cpu backend forced: every
 * float dtype, alpha and the proxies 3-D and 4-D, proxies with NaN and
 * +-inf (their gradient 0), log weights beyond softplus's threshold, any
 * subset of the outputs; within docs/ops.md's parity bound scaled by each
 * gradient's magnitude. Each case runs twice with poisoned outputs, on
 * every instruction-set path; the results are bit-identical run to run and
 * with 1 and 3 threads. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_backward.h"
#include "ref_tile.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};

/* Mostly N(0, scale), with NaN and +-inf mixed in when specials. */
static void fill(tu_rng *r, const apx_tensor *t, double scale, int specials) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double v = scale * tu_normal(r);
    int pick = specials ? (int)tu_int(r, 0, 15) : 9;
    tu_set(t, i, pick == 0 ? NAN : pick == 1 ? INFINITY : pick == 2 ? -INFINITY : v);
  }
}

static apx_tensor gate_map(apx_dtype dtype, int three_d, int64_t B, int64_t H, int64_t W) {
  return three_d ? tu_host3(dtype, B, H, W) : tu_host4(dtype, B, 1, H, W);
}

/* Within rtol of the magnitude, or half f16's subnormal step (its absolute
 * resolution near 0). */
static void expect_close(const apx_tensor *got, const ref_grad *want, double rtol,
                         const char *what) {
  double atol = got->dtype == APX_DTYPE_F16 ? 3e-8 : 1e-38;
  int64_t bad = ref_grad_mismatch(got, want, rtol, atol);
  ck_assert_msg(bad < 0, "%s: element %lld: got %.9g, want %.9g (magnitude %.3g, rtol %.3g)", what,
                (long long)bad, bad < 0 ? 0.0 : tu_get(got, bad),
                bad < 0 ? 0.0 : want->value[bad], bad < 0 ? 0.0 : want->mag[bad], rtol);
}

/* ---- fusiongate_fuse_backward ---- */

/* wanted: bit 0 grad_base, 1 grad_detail, 2 grad_alpha. Returns the outputs
 * of the last call in *last (the caller frees), for the thread test. */
static void run_fuse_case(apx_context *ctx, tu_rng *r, apx_dtype dtype, int alpha_3d, int wanted,
                          int64_t B, int64_t C, int64_t H, int64_t W, apx_tensor last[3]) {
  apx_tensor grad_out = tu_host4(dtype, B, C, H, W), base = tu_host4(dtype, B, C, H, W);
  apx_tensor detail = tu_host4(dtype, B, C, H, W), alpha = gate_map(dtype, alpha_3d, B, H, W);
  apx_tensor out[3] = {tu_host4(dtype, B, C, H, W), tu_host4(dtype, B, C, H, W),
                       gate_map(dtype, alpha_3d, B, H, W)};
  static const char *const names[3] = {"grad_base", "grad_detail", "grad_alpha"};
  const double tol = ref_grad_tolerance(dtype);
  /* one rounding of an fp32 result; grad_alpha adds C fp32 terms */
  const double rtol[3] = {tol, tol, tol + 1.2e-7 * (double)C};
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      fill(r, &grad_out, 1.0, 0);
      fill(r, &base, 2.0, 0);
      fill(r, &detail, 2.0, 0);
      int64_t n = apx_tensor_numel(&alpha);
      for (int64_t i = 0; i < n; i++)
        tu_set(&alpha, i, tu_uniform(r));
      apx_fusiongate_fuse_backward_args args = APX_FUSIONGATE_FUSE_BACKWARD_ARGS_INIT;
      args.grad_out = &grad_out;
      args.base = &base;
      args.detail = &detail;
      args.alpha = &alpha;
      const apx_tensor **fields[3] = {&args.grad_base, &args.grad_detail, &args.grad_alpha};
      ref_grad want[3];
      for (int k = 0; k < 3; k++) {
        tu_poison(&out[k]);
        want[k] = ref_grad_new(apx_tensor_numel(&out[k]));
        *fields[k] = wanted >> k & 1 ? &out[k] : NULL;
      }
      ref_fusiongate_fuse_backward(&args, &want[0], &want[1], &want[2]);
      apx_status st = apx_fusiongate_fuse_backward(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "fusiongate_fuse_backward: %s: %s", apx_status_name(st),
                    apx_last_error());
      for (int k = 0; k < 3; k++) {
        char what[200];
        snprintf(what, sizeof what,
                 "fusiongate_fuse_backward %s %s alpha %s B=%lld C=%lld H=%lld W=%lld path %s "
                 "call %d",
                 names[k], apx_dtype_name(dtype), alpha_3d ? "3-D" : "4-D", (long long)B,
                 (long long)C, (long long)H, (long long)W, ref_isa_path_name(path), call);
        if (wanted >> k & 1)
          expect_close(&out[k], &want[k], rtol[k], what);
        else
          ck_assert_msg(tu_is_poisoned(&out[k]), "%s: written though not asked for", what);
        ref_grad_free(&want[k]);
      }
    }
  }
  tu_free(&grad_out);
  tu_free(&base);
  tu_free(&detail);
  tu_free(&alpha);
  for (int k = 0; k < 3; k++)
    if (last)
      last[k] = out[k];
    else
      tu_free(&out[k]);
}

START_TEST(test_fuse_backward_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xbf05u};
  for (int di = 0; di < 3; di++)
    for (int wanted = 0; wanted < 8; wanted++)
      run_fuse_case(ctx, &r, float_dtypes[di], wanted & 1, wanted, tu_int(&r, 1, 3),
                    tu_int(&r, 1, 5), tu_int(&r, 1, 19), tu_int(&r, 1, 21), NULL);
  /* several segments per plane, the OpenMP path, no channel */
  for (int di = 0; di < 3; di++)
    run_fuse_case(ctx, &r, float_dtypes[di], di & 1, 7, 2, 3, 40, 61, NULL);
  run_fuse_case(ctx, &r, APX_DTYPE_F32, 0, 7, 2, 0, 3, 5, NULL);
  apx_close(ctx);
}
END_TEST

/* ---- fusiongate_alpha_backward ---- */

/* wanted: bit 0 grad_boundary, 1 grad_uncertainty, 2-4 the scalars. */
static void run_alpha_case(apx_context *ctx, tu_rng *r, apx_dtype in_dtype, apx_dtype g_dtype,
                           apx_dtype scalar_dtype, int three_d, int wanted, int64_t B, int64_t H,
                           int64_t W, double blw, double ulw, double bias, apx_tensor last[5]) {
  apx_tensor grad_out = tu_host4(g_dtype, B, 1, H, W);
  apx_tensor boundary = gate_map(in_dtype, three_d, B, H, W);
  apx_tensor uncertainty = gate_map(in_dtype, !three_d, B, H, W);
  apx_tensor out[5] = {gate_map(in_dtype, three_d, B, H, W),
                       gate_map(in_dtype, !three_d, B, H, W), tu_host(scalar_dtype, 0, NULL),
                       tu_host(scalar_dtype, 0, NULL), tu_host(scalar_dtype, 0, NULL)};
  static const char *const names[5] = {"grad_boundary", "grad_uncertainty",
                                       "grad_boundary_log_weight", "grad_uncertainty_log_weight",
                                       "grad_bias"};
  const int64_t n = B * H * W;
  for (int path = 0; path < REF_ISA_PATHS; path++) {
    ref_use_isa_path(path);
    for (int call = 0; call < 2; call++) {
      fill(r, &grad_out, 1.0, 0);
      fill(r, &boundary, 2.0, 1);
      fill(r, &uncertainty, 2.0, 1);
      apx_fusiongate_alpha_backward_args args = APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT;
      args.grad_out = &grad_out;
      args.boundary = &boundary;
      args.uncertainty = &uncertainty;
      args.boundary_log_weight = blw;
      args.uncertainty_log_weight = ulw;
      args.bias = bias;
      const apx_tensor **fields[5] = {&args.grad_boundary, &args.grad_uncertainty,
                                      &args.grad_boundary_log_weight,
                                      &args.grad_uncertainty_log_weight, &args.grad_bias};
      ref_grad want[5];
      for (int k = 0; k < 5; k++) {
        tu_poison(&out[k]);
        want[k] = ref_grad_new(apx_tensor_numel(&out[k]));
        *fields[k] = wanted >> k & 1 ? &out[k] : NULL;
      }
      ref_fusiongate_alpha_backward(&args, &want[0], &want[1], &want[2]);
      apx_status st = apx_fusiongate_alpha_backward(ctx, &args, &cpu_call);
      ck_assert_msg(st == APX_OK, "fusiongate_alpha_backward: %s: %s", apx_status_name(st),
                    apx_last_error());
      for (int k = 0; k < 5; k++) {
        char what[240];
        snprintf(what, sizeof what,
                 "fusiongate_alpha_backward %s %s grad_out %s %s B=%lld H=%lld W=%lld blw=%g "
                 "ulw=%g bias=%g path %s call %d",
                 names[k], apx_dtype_name(in_dtype), apx_dtype_name(g_dtype),
                 three_d ? "3-D" : "4-D", (long long)B, (long long)H, (long long)W, blw, ulw,
                 bias, ref_isa_path_name(path), call);
        /* fp32 sums of n terms for the scalars; sigmoid' one ulp more and
         * its exp up to 2.64 ulp (libmvec's vector expf, docs/ops.md) */
        double rtol = ref_grad_tolerance(k < 2 ? in_dtype : scalar_dtype) + 4.4e-7 +
                      (k < 2 ? 0.0 : 1.2e-7 * (double)n);
        if (wanted >> k & 1)
          expect_close(&out[k], &want[k], rtol, what);
        else
          ck_assert_msg(tu_is_poisoned(&out[k]), "%s: written though not asked for", what);
        ref_grad_free(&want[k]);
      }
    }
  }
  tu_free(&grad_out);
  tu_free(&boundary);
  tu_free(&uncertainty);
  for (int k = 0; k < 5; k++)
    if (last)
      last[k] = out[k];
    else
      tu_free(&out[k]);
}

START_TEST(test_alpha_backward_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0xba1fu};
  for (int in = 0; in < 3; in++)
    for (int g = 0; g < 3; g++)
      for (int rep = 0; rep < 4; rep++) {
        double blw = rep == 0 ? 1.0 : rep == 1 ? 21.0 + 4.0 * tu_uniform(&r) : 3.0 * tu_normal(&r);
        double ulw = rep == 0 ? 1.0 : 3.0 * tu_normal(&r);
        double bias = rep == 0 ? 0.0 : tu_normal(&r);
        run_alpha_case(ctx, &r, float_dtypes[in], float_dtypes[g], float_dtypes[(in + rep) % 3],
                       rep & 1, rep == 3 ? (int)tu_int(&r, 0, 31) : 31, tu_int(&r, 1, 3),
                       tu_int(&r, 1, 17), tu_int(&r, 1, 23), blw, ulw, bias, NULL);
      }
  /* several blocks of the sums and the OpenMP path */
  run_alpha_case(ctx, &r, APX_DTYPE_F32, APX_DTYPE_F32, APX_DTYPE_F32, 0, 31, 2, 96, 80, 0.5,
                 -0.5, 0.25, NULL);
  apx_close(ctx);
}
END_TEST

/* An empty map: the scalars' gradients are written as 0. */
START_TEST(test_alpha_backward_empty) {
  apx_context *ctx = tu_open();
  apx_tensor grad_out = tu_host4(APX_DTYPE_F32, 2, 1, 0, 5);
  apx_tensor boundary = tu_host4(APX_DTYPE_F32, 2, 1, 0, 5);
  apx_tensor scalar = tu_host(APX_DTYPE_F32, 0, NULL);
  tu_poison(&scalar);
  apx_fusiongate_alpha_backward_args args = APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT;
  args.grad_out = &grad_out;
  args.boundary = args.uncertainty = &boundary;
  args.grad_bias = &scalar;
  ck_assert_int_eq(apx_fusiongate_alpha_backward(ctx, &args, &cpu_call), APX_OK);
  ck_assert(tu_get(&scalar, 0) == 0.0);
  tu_free(&grad_out);
  tu_free(&boundary);
  tu_free(&scalar);
  apx_close(ctx);
}
END_TEST

/* 1 and 3 threads, twice each: the same bits (the sums have one order). */
START_TEST(test_gate_backward_deterministic) {
  apx_tensor first_fuse[3], first_alpha[5];
  for (int run = 0; run < 4; run++) {
    apx_context *ctx = tu_open_cpu_threads(run % 2 ? 3 : 1);
    ck_assert_msg(ctx != NULL, "apx_open: %s", apx_last_error());
    apx_tensor fuse[3], alpha[5];
    tu_rng r = {42};
    run_fuse_case(ctx, &r, APX_DTYPE_F32, 0, 7, 2, 5, 96, 130, fuse);
    run_alpha_case(ctx, &r, APX_DTYPE_F32, APX_DTYPE_F32, APX_DTYPE_F32, 1, 31, 3, 96, 130, 0.5,
                   1.5, 0.25, alpha);
    for (int k = 0; k < 8; k++) {
      apx_tensor *now = k < 3 ? &fuse[k] : &alpha[k - 3];
      apx_tensor *first = k < 3 ? &first_fuse[k] : &first_alpha[k - 3];
      if (run == 0) {
        *first = *now;
        continue;
      }
      ck_assert_msg(tu_bytes_equal(now, first), "run %d (%d threads): output %d differs", run,
                    run % 2 ? 3 : 1, k);
      tu_free(now);
    }
    apx_close(ctx);
  }
  for (int k = 0; k < 3; k++)
    tu_free(&first_fuse[k]);
  for (int k = 0; k < 5; k++)
    tu_free(&first_alpha[k]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_fusiongate_backward");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_fuse_backward_random);
  tcase_add_test(tc, test_alpha_backward_random);
  tcase_add_test(tc, test_alpha_backward_empty);
  tcase_add_test(tc, test_gate_backward_deterministic);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
