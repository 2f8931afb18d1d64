/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's tilessm_scan against the cpu backend, through the
 * public API (docs/ops.md, tilessm_scan): every direction and merge, init
 * states and merge gates of each form, final states, K = 0, short and long
 * scans and the block scan's rounds, within twice the bound of docs/ops.md,
 * Rounding and parity on the scan's own magnitude. Skipped (exit 77, the reason on stdout) where
 * the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

/* Magnitude of each output: the scan run on absolute values (the sum of the
 * absolute values of every term that reaches y), in double, plus the fp32
 * state's rounding error expressed in that unit. Decision 3's bound
 * (rtol * mag) is one formula's; the state carries the rounding errors of
 * every step before it, each decayed as its term is: a term j steps back
 * has gone through j + 1 steps of three roundings (d*s, om*drv, their sum),
 * so a side's error is up to 3u * og * W with W = sum of (j + 1) * d^j *
 * |term|, W_k = d*W_{k-1} + |s_k| (u = 2^-24; ~1/(1-d) times mag for
 * decays near 1, where the cpu's own sequential scan differs from the
 * float64 truth by more than rtol * mag; test seed 20261126, f32, K 1001:
 * cuda and cpu 6.3e-5 apart at |y| 2.1). */
static void scan_magnitude(const apx_tilessm_scan_args *a, double *mag) {
  int64_t B = a->tokens->shape[0], K = a->tokens->shape[1], C = a->tokens->shape[2];
  double lim = fabs(a->clamp_value);
  double state_err = 3.0 * ldexp(1.0, -24) / tol_of(a->tokens->dtype);
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      double d = tu_get(a->decay, c);
      d = d < 1e-6 ? 1e-6 : d > 1 - 1e-6 ? 1 - 1e-6 : d;
      double ig = fabs(tu_get(a->input_gain, c)), og = fabs(tu_get(a->output_gain, c));
      double sb = fabs(tu_get(a->state_bias, c));
      for (int dir = 0; dir < 2; dir++) {
        int used = a->direction == APX_SCAN_BIDIRECTIONAL || (int)a->direction == dir;
        if (!used) continue;
        double s = 0, w = 0;
        if (a->init_state)
          s = fabs(tu_get(a->init_state,
                          a->init_state->ndim == 3 ? (b * 2 + dir) * C + c : b * C + c));
        w = s;
        for (int64_t n = 0; n < K; n++) {
          int64_t k = dir == 0 ? n : K - 1 - n;
          double x = fabs(tu_get(a->tokens, (b * K + k) * C + c));
          if (isnan(x) || x > lim) x = isnan(x) ? 0 : lim;
          s = d * s + (1 - d) * (ig * x + sb);
          w = d * w + s;
          double y = og * s + state_err * og * w;
          int64_t i = (b * K + k) * C + c;
          mag[i] = (dir == 0 || a->direction != APX_SCAN_BIDIRECTIONAL) ? y : mag[i] + y;
        }
      }
    }
}

static void tilessm_case(apx_dtype dt, int64_t B, int64_t K, int64_t C, apx_scan_direction dir,
                         apx_scan_merge merge, int init_kind, int gate_kind, int with_final) {
  char what[200];
  snprintf(what, sizeof what, "tilessm %s B%lld K%lld C%lld dir=%d merge=%d init=%d gate=%d",
           apx_dtype_name(dt), (long long)B, (long long)K, (long long)C, (int)dir, (int)merge,
           init_kind, gate_kind);
  int bidir = dir == APX_SCAN_BIDIRECTIONAL;
  apx_tensor tokens = tu_host3(dt, B, K, C), want = tu_host3(dt, B, K, C);
  /* the parameter vectors in assorted dtypes (they may differ) */
  apx_tensor decay = tu_host1(float_dtypes[(B + 0) % 3], C);
  apx_tensor ig = tu_host1(float_dtypes[(B + 1) % 3], C);
  apx_tensor og = tu_host1(float_dtypes[(B + 2) % 3], C);
  apx_tensor sb = tu_host1(APX_DTYPE_F32, C);
  apx_tensor init = init_kind == 2 ? tu_host3(APX_DTYPE_F32, B, 2, C) : tu_host2(dt, B, C);
  apx_tensor gate = gate_kind == 2 ? tu_host3(dt, B, 1, C) : tu_host1(APX_DTYPE_F32, C);
  apx_tensor fs_want = bidir ? tu_host3(dt, B, 2, C) : tu_host2(dt, B, C);
  for (int call = 0; call < 2; call++) {
    fill_values(&tokens, call);
    tu_fill_uniform(&rng, &decay, 0.0, 1.0);
    tu_fill_uniform(&rng, &ig, 0.2, 1.5);
    tu_fill_uniform(&rng, &og, 0.2, 1.5);
    fill_values(&sb, 0);
    fill_values(&init, 0);
    tu_fill_uniform(&rng, &gate, -0.2, 1.2);
    apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
    a.tokens = &tokens;
    a.decay = &decay;
    a.input_gain = &ig;
    a.output_gain = &og;
    a.state_bias = &sb;
    a.init_state = init_kind ? &init : NULL;
    a.merge_gate = gate_kind ? &gate : NULL;
    a.clamp_value = call ? 1e4 : 2.5;
    a.direction = dir;
    a.merge = merge;
    a.out = &want;
    a.final_state = with_final ? &fs_want : NULL;
    cc_case c = {what, APX_OP_TILESSM_SCAN, &a,
                 {&a.tokens, &a.decay, &a.input_gain, &a.output_gain, &a.state_bias,
                  &a.init_state, &a.merge_gate},
                 {&a.out, &a.final_state}, -1, 0};
    apx_tensor got[CC_MAX_OUTPUTS];
    cc_run(&c, got);
    int64_t n = apx_tensor_numel(&want);
    double *mag = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    scan_magnitude(&a, mag);
    expect_close(&got[0], &want, mag, 0, what);
    free(mag);
    tu_free(&got[0]);
    if (with_final) {
      /* a state's magnitude: bounded by the largest term reaching it */
      expect_close_flat(&got[1], &fs_want, 4.0 * fmax(a.clamp_value, 1.0), 0, what);
      tu_free(&got[1]);
    }
  }
  tu_free(&tokens);
  tu_free(&want);
  tu_free(&decay);
  tu_free(&ig);
  tu_free(&og);
  tu_free(&sb);
  tu_free(&init);
  tu_free(&gate);
  tu_free(&fs_want);
}

START_TEST(test_tilessm) {
  for (int d = 0; d < 3; d++)
    for (int dir = 0; dir < 3; dir++)
      for (int merge = 0; merge < 3; merge++) {
        if (dir != APX_SCAN_BIDIRECTIONAL && merge != APX_MERGE_AVG) continue;
        apx_dtype dt = float_dtypes[d];
        /* short (one block-scan round), long (the chunked scan: few
         * streams, many steps) */
        tilessm_case(dt, 2, 37, 5, dir, merge, merge % 3, merge == APX_MERGE_GATED ? 1 : 0, 1);
        tilessm_case(dt, 1, 3001, 3, dir, merge, (merge + 1) % 3,
                     merge == APX_MERGE_GATED ? 2 : 0, 1);
        tilessm_case(dt, 3, 1, 4, dir, merge, 2, 0, merge & 1);
        tilessm_case(dt, 2, 0, 3, dir, merge, 1, 0, 1); /* K = 0: state = init */
        /* even C: two channels per thread, the block scan in two rounds */
        tilessm_case(dt, 2, 300, 6, dir, merge, (merge + 2) % 3,
                     merge == APX_MERGE_GATED ? 2 : 0, 1);
        /* the block scan over 4 (16-bit) or 8 (fp32) rounds, the last one
         * ending inside a warp's steps, with a partly filled channel group:
         * odd C (one channel a lane) and even C (two) */
        tilessm_case(dt, 2, 1001, 67, dir, merge, merge % 3, merge == APX_MERGE_GATED ? 1 : 0,
                     1);
        tilessm_case(dt, 2, 1001, 66, dir, merge, (merge + 1) % 3,
                     merge == APX_MERGE_GATED ? 2 : 0, merge & 1);
        /* enough streams (2*B*ceil(C/64) above the SM count) that the
         * block scan keeps two channels a thread, the large profile's
         * form; the shapes above take one channel a thread */
        tilessm_case(dt, 67, 40, 128, dir, merge, (merge + 2) % 3,
                     merge == APX_MERGE_GATED ? 1 : 0, 1);
      }
  /* the same over two rounds of 32-step warps (K > 512) */
  tilessm_case(APX_DTYPE_F16, 67, 600, 128, APX_SCAN_FORWARD, APX_MERGE_AVG, 1, 0, 1);
}
END_TEST

static void add_tests(Suite *s) {
  TCase *ops = cc_tcase(s, "ops");
  tcase_add_test(ops, test_tilessm);
}

int main(void) { return cc_main("cuda_tilessm", add_tests); }
