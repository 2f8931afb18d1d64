/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's fusiongate_alpha and fusiongate_fuse against the cpu
 * backend, through the public API (docs/ops.md, fusiongate_alpha,
 * fusiongate_fuse): every proxy and out dtype pair, 3-D and 4-D proxies,
 * NaN and inf proxies, fuse in place and not, within twice the bound of
 * docs/ops.md, Rounding and parity. Skipped (exit 77, the reason on stdout) where
 * the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

START_TEST(test_fusiongate_alpha) {
  for (int pd = 0; pd < 3; pd++)
    for (int od = 0; od < 3; od++)
      for (int three_d = 0; three_d < 2; three_d++) {
        apx_dtype p = float_dtypes[pd], o = float_dtypes[od];
        char what[120];
        snprintf(what, sizeof what, "fusiongate_alpha proxies %s out %s %dd", apx_dtype_name(p),
                 apx_dtype_name(o), three_d ? 3 : 4);
        int64_t B = 2, H = 7, W = 13;
        int64_t shape4[4] = {B, 1, H, W}, shape3[3] = {B, H, W};
        apx_tensor bnd = three_d ? tu_host(p, 3, shape3) : tu_host(p, 4, shape4);
        apx_tensor unc = three_d ? tu_host(p, 3, shape3) : tu_host(p, 4, shape4);
        apx_tensor want = tu_host(o, 4, shape4);
        for (int call = 0; call < 2; call++) {
          fill_values(&bnd, 1);
          fill_values(&unc, 1);
          apx_fusiongate_alpha_args a = APX_FUSIONGATE_ALPHA_ARGS_INIT;
          a.boundary = &bnd;
          a.uncertainty = &unc;
          a.boundary_log_weight = tu_normal(&rng);
          a.uncertainty_log_weight = tu_normal(&rng);
          a.bias = tu_normal(&rng);
          a.out = &want;
          cc_case c = {what, APX_OP_FUSIONGATE_ALPHA, &a, {&a.boundary, &a.uncertainty},
                       {&a.out}, -1, 0};
          apx_tensor got[CC_MAX_OUTPUTS];
          cc_run(&c, got);
          /* a sigmoid: the term's magnitude is 1, plus one storage ulp */
          expect_close_flat(&got[0], &want, 1.0, 1, what);
          tu_free(&got[0]);
        }
        tu_free(&bnd);
        tu_free(&unc);
        tu_free(&want);
      }
}
END_TEST

START_TEST(test_fusiongate_fuse) {
  static const int64_t sizes[][4] = {{2, 3, 5, 7}, {1, 4, 8, 8}, {2, 16, 16, 16}};
  for (int d = 0; d < 3; d++)
    for (int s = 0; s < 3; s++)
      for (int alias = 0; alias < 2; alias++) {
        apx_dtype dt = float_dtypes[d];
        const int64_t *sz = sizes[s];
        char what[120];
        snprintf(what, sizeof what, "fusiongate_fuse %s %lldx%lldx%lldx%lld alias=%d",
                 apx_dtype_name(dt), (long long)sz[0], (long long)sz[1], (long long)sz[2],
                 (long long)sz[3], alias);
        apx_tensor base = tu_host(dt, 4, sz), detail = tu_host(dt, 4, sz);
        apx_tensor alpha = tu_host4(dt, sz[0], 1, sz[2], sz[3]), want = tu_host(dt, 4, sz);
        for (int call = 0; call < 2; call++) {
          fill_values(&base, 0);
          fill_values(&detail, 0);
          tu_fill_uniform(&rng, &alpha, 0.0, 1.0);
          apx_fusiongate_fuse_args a = APX_FUSIONGATE_FUSE_ARGS_INIT;
          a.base = &base;
          a.detail = &detail;
          a.alpha = &alpha;
          a.out = &want;
          cc_case c = {what, APX_OP_FUSIONGATE_FUSE, &a, {&a.base, &a.detail, &a.alpha},
                       {&a.out}, alias ? 0 : -1, 0};
          apx_tensor got[CC_MAX_OUTPUTS];
          cc_run(&c, got);
          int64_t n = apx_tensor_numel(&want), hw = sz[2] * sz[3];
          double *mag = malloc(sizeof(double) * (size_t)n);
          for (int64_t i = 0; i < n; i++) {
            double b = tu_get(&base, i), x = tu_get(&detail, i);
            double al = tu_get(&alpha, (i / (sz[1] * hw)) * hw + i % hw);
            mag[i] = fabs(b) + fabs(al) * (fabs(x) + fabs(b));
          }
          expect_close(&got[0], &want, mag, 0, what);
          free(mag);
          tu_free(&got[0]);
        }
        tu_free(&base);
        tu_free(&detail);
        tu_free(&alpha);
        tu_free(&want);
      }
}
END_TEST

static void add_tests(Suite *s) {
  TCase *ops = cc_tcase(s, "ops");
  tcase_add_test(ops, test_fusiongate_alpha);
  tcase_add_test(ops, test_fusiongate_fuse);
}

int main(void) { return cc_main("cuda_fusiongate", add_tests); }
