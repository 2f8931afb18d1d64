/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's fusiongate_alpha and fusiongate_fuse against the cpu
 * backend, through the public API (docs/ops.md, fusiongate_alpha,
 * fusiongate_fuse): every proxy and out dtype pair, 3-D and 4-D proxies,
 * NaN and inf proxies, the vectorised alpha's tails and misaligned
 * pointers, fuse in place and not, within twice the bound of
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

/* The vectorised path and its fallbacks (docs/ops.md, fusiongate_alpha;
 * backends/cuda/fusiongate_alpha.cu): the element-a-thread path below 2^18
 * elements (sizes around one 8-element group, odd maps), the 8-element
 * path from 2^18 (tails of 7 and 3), a map past one wave of the
 * grid-stride loop, and each of the three pointers moved off 16-byte
 * alignment by 1 and 3 elements; every element within the bound, and the
 * elements of the buffers around the output untouched. */
START_TEST(test_fusiongate_alpha_vector) {
  /* the 8-element path from 2^18 elements: 2^18 + 7 and + 3 for its tails */
  static const int64_t maps[][3] = {{1, 1, 1},      {1, 1, 7},      {1, 1, 8},
                                    {1, 3, 3},      {1, 1, 17},     {2, 33, 65},
                                    {1, 1, 262151}, {1, 1, 262147}, {3, 800, 1000}};
  static const int64_t offs[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 3, 0}, {0, 0, 1}, {3, 1, 3}};
  const int n_maps = (int)(sizeof maps / sizeof maps[0]);
  const int n_offs = (int)(sizeof offs / sizeof offs[0]);
  for (int pd = 0; pd < 3; pd++)
    for (int od = 0; od < 3; od++)
      for (int m = 0; m < n_maps; m++)
        for (int f = 0; f < n_offs; f++) {
          /* the map past one wave: every dtype pair aligned, one misaligned */
          if (m == n_maps - 1 && f > 0 && (pd != od || f != n_offs - 1)) continue;
          apx_dtype p = float_dtypes[pd], o = float_dtypes[od];
          const int64_t B = maps[m][0], H = maps[m][1], W = maps[m][2], n = B * H * W;
          const int64_t *off = offs[f];
          char what[160];
          snprintf(what, sizeof what,
                   "fusiongate_alpha proxies %s out %s [%lld,1,%lld,%lld] offsets %lld/%lld/%lld",
                   apx_dtype_name(p), apx_dtype_name(o), (long long)B, (long long)H,
                   (long long)W, (long long)off[0], (long long)off[1], (long long)off[2]);
          int64_t shape[4] = {B, 1, H, W};
          apx_tensor bnd = tu_host(p, 4, shape), unc = tu_host(p, 4, shape);
          apx_tensor want = tu_host(o, 4, shape);
          fill_values(&bnd, 1);
          fill_values(&unc, 1);
          apx_fusiongate_alpha_args a = APX_FUSIONGATE_ALPHA_ARGS_INIT;
          a.boundary = &bnd;
          a.uncertainty = &unc;
          a.boundary_log_weight = tu_normal(&rng);
          a.uncertainty_log_weight = tu_normal(&rng);
          a.bias = tu_normal(&rng);
          a.out = &want;
          CHECK_OK(apx_fusiongate_alpha(ctx, &a, &on_cpu), what);
          /* device buffers with 8 spare elements past the view */
          int64_t len[3] = {n + off[0] + 8, n + off[1] + 8, n + off[2] + 8};
          apx_tensor bbuf = dev_alloc(ctx, p, 1, &len[0]), ubuf = dev_alloc(ctx, p, 1, &len[1]);
          apx_tensor obuf = dev_alloc(ctx, o, 1, &len[2]);
          dev_poison(ctx, &obuf);
          apx_tensor dbnd = dev_view(&bbuf, off[0], 4, shape);
          apx_tensor dunc = dev_view(&ubuf, off[1], 4, shape);
          apx_tensor dout = dev_view(&obuf, off[2], 4, shape);
          CHECK_OK(apx_tensor_copy(ctx, &dbnd, &bnd, NULL), what);
          CHECK_OK(apx_tensor_copy(ctx, &dunc, &unc, NULL), what);
          a.boundary = &dbnd;
          a.uncertainty = &dunc;
          a.out = &dout;
          CHECK_OK(apx_fusiongate_alpha(ctx, &a, &on_gpu), what);
          CHECK_OK(apx_sync(ctx, &on_gpu), what);
          apx_tensor got = to_host(ctx, &dout);
          expect_close_flat(&got, &want, 1.0, 1, what);
          expect_untouched_around(ctx, &obuf, off[2], n, what);
          tu_free(&got);
          dev_free(ctx, &bbuf);
          dev_free(ctx, &ubuf);
          dev_free(ctx, &obuf);
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
  tcase_add_test(ops, test_fusiongate_alpha_vector);
  tcase_add_test(ops, test_fusiongate_fuse);
}

int main(void) { return cc_main("cuda_fusiongate", add_tests); }
