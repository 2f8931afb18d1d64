/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's tilessm_scan against the cpu backend, through the
 * public API (docs/ops.md, tilessm_scan): every direction and merge, init
 * states and merge gates of each form, final states, K = 0, short and long
 * scans, the block scan's rounds, the bidirectional staged scan's edges
 * (misaligned tokens, element rows, short K) and its fallback for K that
 * fits no block's shared memory, within twice the bound of docs/ops.md,
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

/* The cpu call, then the cuda call with tokens and out placed `shift`
 * elements past the start of their device buffers (an address no vector
 * load may take when shift is odd); the outputs come back in got[]. */
static void run_shifted(apx_tilessm_scan_args *a, int64_t shift, const char *what,
                        apx_tensor got[CC_MAX_OUTPUTS]) {
  CHECK_OK(cc_call_op(ctx, APX_OP_TILESSM_SCAN, a, &on_cpu), what);
  const apx_tensor *h_tokens = a->tokens, *h_out = a->out, *h_final = a->final_state;
  const apx_tensor **vecs[] = {&a->decay, &a->input_gain, &a->output_gain, &a->state_bias,
                               &a->init_state, &a->merge_gate};
  const apx_tensor *h_vecs[6];
  apx_tensor d_vecs[6];
  for (int i = 0; i < 6; i++) {
    h_vecs[i] = *vecs[i];
    if (h_vecs[i]) {
      d_vecs[i] = to_dev(ctx, h_vecs[i]);
      *vecs[i] = &d_vecs[i];
    }
  }
  int64_t flat = apx_tensor_numel(h_tokens) + shift;
  apx_tensor tok_buf = dev_alloc(ctx, h_tokens->dtype, 1, &flat);
  apx_tensor out_buf = dev_alloc(ctx, h_tokens->dtype, 1, &flat);
  dev_poison(ctx, &out_buf);
  apx_tensor tok_d = dev_view(&tok_buf, shift, 3, h_tokens->shape);
  apx_tensor out_d = dev_view(&out_buf, shift, 3, h_out->shape);
  CHECK_OK(apx_tensor_copy(ctx, &tok_d, h_tokens, NULL), what);
  apx_tensor fs_d;
  memset(&fs_d, 0, sizeof fs_d);
  if (h_final) {
    fs_d = dev_alloc(ctx, h_final->dtype, h_final->ndim, h_final->shape);
    dev_poison(ctx, &fs_d);
    a->final_state = &fs_d;
  }
  a->tokens = &tok_d;
  a->out = &out_d;
  CHECK_OK(cc_call_op(ctx, APX_OP_TILESSM_SCAN, a, &on_gpu), what);
  CHECK_OK(apx_sync(ctx, &on_gpu), what);
  got[0] = to_host(ctx, &out_d);
  /* the buffer's elements before out keep their poison */
  apx_tensor whole = to_host(ctx, &out_buf);
  const unsigned char *wb = (const unsigned char *)whole.data;
  for (size_t i = 0; i < (size_t)shift * apx_dtype_size(whole.dtype); i++)
    ck_assert_msg(wb[i] == 0xA5, "%s: byte %zu before out written", what, i);
  tu_free(&whole);
  memset(&got[1], 0, sizeof got[1]);
  if (h_final) {
    got[1] = to_host(ctx, &fs_d);
    dev_free(ctx, &fs_d);
  }
  a->tokens = h_tokens;
  a->out = h_out;
  a->final_state = h_final;
  for (int i = 0; i < 6; i++) {
    *vecs[i] = h_vecs[i];
    if (h_vecs[i]) dev_free(ctx, &d_vecs[i]);
  }
  dev_free(ctx, &tok_buf);
  dev_free(ctx, &out_buf);
}

/* One case; shift > 0: tokens and out that many elements into their
 * device buffers (run_shifted). */
static void tilessm_case_at(apx_dtype dt, int64_t B, int64_t K, int64_t C,
                            apx_scan_direction dir, apx_scan_merge merge, int init_kind,
                            int gate_kind, int with_final, int64_t shift) {
  char what[200];
  snprintf(what, sizeof what,
           "tilessm %s B%lld K%lld C%lld dir=%d merge=%d init=%d gate=%d shift=%lld",
           apx_dtype_name(dt), (long long)B, (long long)K, (long long)C, (int)dir, (int)merge,
           init_kind, gate_kind, (long long)shift);
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
    if (shift > 0) run_shifted(&a, shift, what, got);
    else cc_run(&c, got);
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

static void tilessm_case(apx_dtype dt, int64_t B, int64_t K, int64_t C, apx_scan_direction dir,
                         apx_scan_merge merge, int init_kind, int gate_kind, int with_final) {
  tilessm_case_at(dt, B, K, C, dir, merge, init_kind, gate_kind, with_final, 0);
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

/* The bidirectional scan's staged path (tilessm_scan_staged.cuh: a
 * stream's K in one block's shared memory; 32 segments of K a channel,
 * sub-chunks of 8 steps up to K = 256, else 16) and its edges, then the
 * fallback where K does not fit (the block and chunked scans). */
START_TEST(test_tilessm_bidirectional) {
  const apx_scan_direction bi = APX_SCAN_BIDIRECTIONAL;
  for (int d = 0; d < 3; d++)
    for (int merge = 0; merge < 3; merge++) {
      apx_dtype dt = float_dtypes[d];
      int gated = merge == APX_MERGE_GATED;
      /* 16-byte rows (C a multiple of 8 for 16-bit tokens, of 4 for fp32):
       * K a multiple of the segments and sub-chunks, one more, one less;
       * K = 4096 needs more than 48 KB of shared memory (the attribute) */
      tilessm_case(dt, 2, 4096, 16, bi, merge, merge % 3, gated ? 1 : 0, 1);
      tilessm_case(dt, 3, 4097, 8, bi, merge, (merge + 1) % 3, gated ? 2 : 0, 1);
      tilessm_case(dt, 1, 511, 24, bi, merge, (merge + 2) % 3, gated ? 2 : 0, merge & 1);
      /* short K: sub-chunks of 8, empty segments (K < 32 * 8), K = 1 */
      tilessm_case(dt, 2, 256, 8, bi, merge, 1, gated ? 1 : 0, 1);
      tilessm_case(dt, 2, 33, 16, bi, merge, 2, gated ? 2 : 0, 1);
      tilessm_case(dt, 4, 1, 8, bi, merge, merge % 3, 0, 1); /* gated: no gate, 0.5 */
      tilessm_case(dt, 3, 2000, 8, bi, merge, 1, 0, 1);
      tilessm_case(dt, 1, 7, 9, bi, merge, 2, gated ? 1 : 0, 1);
      /* element rows: C not a multiple of the group, odd C */
      tilessm_case(dt, 2, 700, 10, bi, merge, 1, gated ? 2 : 0, 1);
      tilessm_case(dt, 1, 300, 1, bi, merge, 0, gated ? 1 : 0, 1);
      /* misaligned tokens and out (one element in), the seed's shape */
      tilessm_case_at(dt, 1, 256, 128, bi, merge, 2, gated ? 2 : 0, 1, 1);
      tilessm_case_at(dt, 2, 1000, 16, bi, merge, 1, gated ? 1 : 0, 1, 3);
      /* many blocks (B*C large): more blocks than fit the device at once */
      tilessm_case(dt, 40, 64, 256, bi, merge, merge % 3, gated ? 2 : 0, 1);
    }
  /* K that fits no block's shared memory (16-byte rows of 16032 slots:
   * 250 KB): the fallback, the chunked scan for a few streams and the
   * block scan with enough (b, channel group) blocks to fill the device */
  tilessm_case(APX_DTYPE_F32, 1, 16001, 5, bi, APX_MERGE_GATED, 2, 1, 1);
  tilessm_case(APX_DTYPE_F16, 1, 16001, 4, bi, APX_MERGE_SUM, 1, 0, 1);
  tilessm_case(APX_DTYPE_BF16, 70, 16001, 3, bi, APX_MERGE_AVG, 2, 0, 1);
}
END_TEST

static void add_tests(Suite *s) {
  TCase *ops = cc_tcase(s, "ops");
  tcase_add_test(ops, test_tilessm);
  tcase_add_test(ops, test_tilessm_bidirectional);
}

int main(void) { return cc_main("cuda_tilessm", add_tests); }
