/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's backward ops (docs/ops.md, fusiongate_fuse_backward,
 * fusiongate_alpha_backward, tilessm_scan_backward) against the double
 * reference loops of tests/ref_backward.c, through the public API: every
 * float dtype, alpha and the proxies 3-D and 4-D with NaN and inf proxies,
 * every scan direction and merge, init_state and merge_gate in every form,
 * clamp on and off, grad_final_state given or not; within twice the bound
 * of docs/ops.md, Rounding and parity, scaled by each gradient's magnitude
 * (the cuda backend may contract a*b + c into an FMA). Every device output
 * is poisoned before the call, and a second call on the same device inputs
 * must give the same bits (no racing float atomics). Skipped (exit 77, the
 * reason on stdout) where the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"
#include "ref_backward.h"

#define MAX_TENSORS 9

/* Runs op on the cuda backend with the args' host inputs (inputs[i] NULL:
 * absent) copied to the device and device outputs for outputs[i] (NULL:
 * not asked), twice; got[i] receives the first call's output i (a zero
 * tensor when not asked) and must equal the second's bit for bit. The
 * args hold the host tensors again on return. */
static void run_on_gpu(apx_op_id op, void *args, const apx_tensor **inputs[], int n_in,
                       const apx_tensor **outputs[], int n_out, apx_tensor got[],
                       const char *what) {
  const apx_tensor *host_in[MAX_TENSORS], *host_out[MAX_TENSORS];
  apx_tensor dev_in[MAX_TENSORS], dev_out[MAX_TENSORS];
  for (int i = 0; i < n_in; i++) {
    host_in[i] = *inputs[i];
    if (!host_in[i]) continue;
    dev_in[i] = to_dev(ctx, host_in[i]);
    *inputs[i] = &dev_in[i];
  }
  for (int o = 0; o < n_out; o++) {
    host_out[o] = *outputs[o];
    memset(&got[o], 0, sizeof got[o]);
    if (!host_out[o]) continue;
    dev_out[o] = dev_alloc(ctx, host_out[o]->dtype, host_out[o]->ndim, host_out[o]->shape);
    *outputs[o] = &dev_out[o];
  }
  for (int run = 0; run < 2; run++) {
    for (int o = 0; o < n_out; o++)
      if (host_out[o]) dev_poison(ctx, &dev_out[o]);
    CHECK_OK(cc_call_op(ctx, op, args, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    for (int o = 0; o < n_out; o++) {
      if (!host_out[o]) continue;
      apx_tensor h = to_host(ctx, &dev_out[o]);
      if (run == 0) {
        got[o] = h;
        continue;
      }
      ck_assert_msg(tu_bytes_equal(&h, &got[o]), "%s: output %d: a second call differs bitwise",
                    what, o);
      tu_free(&h);
    }
  }
  for (int i = 0; i < n_in; i++)
    if (host_in[i]) {
      dev_free(ctx, &dev_in[i]);
      *inputs[i] = host_in[i];
    }
  for (int o = 0; o < n_out; o++)
    if (host_out[o]) {
      dev_free(ctx, &dev_out[o]);
      *outputs[o] = host_out[o];
    }
}

/* got within twice the parity bound of the reference (rtol_extra: the fp32
 * error of the op's sums), or an infinity where the value overflows. */
static void expect_grad(const apx_tensor *got, const ref_grad *want, double rtol_extra,
                        const char *what, const char *name) {
  double rtol = 2.0 * ref_grad_tolerance(got->dtype) + rtol_extra;
  double atol = got->dtype == APX_DTYPE_F16 ? 6e-8 : 1e-38;
  int64_t bad = ref_grad_mismatch(got, want, rtol, atol);
  ck_assert_msg(bad < 0, "%s: %s element %lld: got %.9g, want %.9g (magnitude %.3g, rtol %.3g)",
                what, name, (long long)bad, bad < 0 ? 0.0 : tu_get(got, bad),
                bad < 0 ? 0.0 : want->value[bad], bad < 0 ? 0.0 : want->mag[bad], rtol);
}

/* The sizes: small maps (the channels split over threads up to 2^18
 * pixels, backends/cuda/fusiongate_fuse_backward.cu) with channels not a
 * multiple of its 8 groups, 2^18 pixels exactly and one row more (a
 * pixel a thread). */
START_TEST(test_fuse_backward) {
  static const int64_t sizes[][4] = {{2, 3, 5, 7},     {1, 4, 8, 8},    {2, 16, 33, 40},
                                     {1, 11, 16, 16}, {1, 2, 512, 512}, {1, 2, 513, 512}};
  for (int d = 0; d < 3; d++)
    for (int s = 0; s < 6; s++)
      for (int alpha_3d = 0; alpha_3d < 2; alpha_3d++) {
        apx_dtype dt = float_dtypes[d];
        const int64_t *sz = sizes[s];
        char what[120];
        snprintf(what, sizeof what, "fusiongate_fuse_backward %s %lldx%lldx%lldx%lld alpha %dd",
                 apx_dtype_name(dt), (long long)sz[0], (long long)sz[1], (long long)sz[2],
                 (long long)sz[3], alpha_3d ? 3 : 4);
        apx_tensor grad_out = tu_host(dt, 4, sz), base = tu_host(dt, 4, sz);
        apx_tensor detail = tu_host(dt, 4, sz);
        apx_tensor alpha = alpha_3d ? tu_host3(dt, sz[0], sz[2], sz[3])
                                    : tu_host4(dt, sz[0], 1, sz[2], sz[3]);
        apx_tensor out[3] = {tu_host(dt, 4, sz), tu_host(dt, 4, sz),
                             alpha_3d ? tu_host3(dt, sz[0], sz[2], sz[3])
                                      : tu_host4(dt, sz[0], 1, sz[2], sz[3])};
        fill_values(&grad_out, 0);
        fill_values(&base, 0);
        fill_values(&detail, 0);
        tu_fill_uniform(&rng, &alpha, 0.0, 1.0);
        apx_fusiongate_fuse_backward_args a = APX_FUSIONGATE_FUSE_BACKWARD_ARGS_INIT;
        a.grad_out = &grad_out;
        a.base = &base;
        a.detail = &detail;
        a.alpha = &alpha;
        a.grad_base = &out[0];
        a.grad_detail = &out[1];
        a.grad_alpha = &out[2];
        ref_grad want[3];
        for (int k = 0; k < 3; k++) want[k] = ref_grad_new(apx_tensor_numel(&out[k]));
        ref_fusiongate_fuse_backward(&a, &want[0], &want[1], &want[2]);
        const apx_tensor **ins[4] = {&a.grad_out, &a.base, &a.detail, &a.alpha};
        const apx_tensor **outs[3] = {&a.grad_base, &a.grad_detail, &a.grad_alpha};
        apx_tensor got[3];
        run_on_gpu(APX_OP_FUSIONGATE_FUSE_BACKWARD, &a, ins, 4, outs, 3, got, what);
        static const char *const names[3] = {"grad_base", "grad_detail", "grad_alpha"};
        for (int k = 0; k < 3; k++) {
          expect_grad(&got[k], &want[k], k == 2 ? 2.4e-7 * (double)sz[1] : 0.0, what, names[k]);
          tu_free(&got[k]);
          tu_free(&out[k]);
          ref_grad_free(&want[k]);
        }
        tu_free(&grad_out);
        tu_free(&base);
        tu_free(&detail);
        tu_free(&alpha);
      }
}
END_TEST

/* Maps of one block, of several (a pixel a thread up to 2^17 pixels,
 * backends/cuda/fusiongate_alpha_backward.cu), of 180000 pixels (16 a
 * thread) and, for one dtype pair, of 2 x 1700 x 1700 (more chunks than a
 * ticket's partials hold: their sums in workspace). */
START_TEST(test_alpha_backward) {
  static const int64_t maps[][2] = {{7, 13}, {70, 90}, {300, 300}, {1700, 1700}};
  for (int pd = 0; pd < 3; pd++)
    for (int gd = 0; gd < 3; gd++)
      for (int m = 0; m < 4; m++) {
        if (m == 3 && (pd != 0 || gd != 2)) continue; /* the workspace case once */
        const int three_d = m % 2;
        apx_dtype p = float_dtypes[pd], g = float_dtypes[gd];
        int64_t B = 2, H = maps[m][0], W = maps[m][1];
        char what[120];
        snprintf(what, sizeof what,
                 "fusiongate_alpha_backward proxies %s grad_out %s %dd %lldx%lld",
                 apx_dtype_name(p), apx_dtype_name(g), three_d ? 3 : 4, (long long)H,
                 (long long)W);
        apx_tensor grad_out = tu_host4(g, B, 1, H, W);
        apx_tensor bnd = three_d ? tu_host3(p, B, H, W) : tu_host4(p, B, 1, H, W);
        apx_tensor unc = tu_host3(p, B, H, W);
        apx_tensor out[5] = {three_d ? tu_host3(p, B, H, W) : tu_host4(p, B, 1, H, W),
                             tu_host3(p, B, H, W), tu_host(g, 0, NULL), tu_host(p, 0, NULL),
                             tu_host(APX_DTYPE_F32, 0, NULL)};
        fill_values(&grad_out, 0);
        fill_values(&bnd, 1);
        fill_values(&unc, 1);
        apx_fusiongate_alpha_backward_args a = APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT;
        a.grad_out = &grad_out;
        a.boundary = &bnd;
        a.uncertainty = &unc;
        a.boundary_log_weight = pd == 2 ? 21.5 : tu_normal(&rng);
        a.uncertainty_log_weight = tu_normal(&rng);
        a.bias = tu_normal(&rng);
        a.grad_boundary = &out[0];
        a.grad_uncertainty = &out[1];
        a.grad_boundary_log_weight = &out[2];
        a.grad_uncertainty_log_weight = &out[3];
        a.grad_bias = &out[4];
        ref_grad want[5];
        for (int k = 0; k < 5; k++) want[k] = ref_grad_new(apx_tensor_numel(&out[k]));
        ref_fusiongate_alpha_backward(&a, &want[0], &want[1], &want[2]);
        const apx_tensor **ins[3] = {&a.grad_out, &a.boundary, &a.uncertainty};
        const apx_tensor **outs[5] = {&a.grad_boundary, &a.grad_uncertainty,
                                      &a.grad_boundary_log_weight,
                                      &a.grad_uncertainty_log_weight, &a.grad_bias};
        apx_tensor got[5];
        run_on_gpu(APX_OP_FUSIONGATE_ALPHA_BACKWARD, &a, ins, 3, outs, 5, got, what);
        static const char *const names[5] = {"grad_boundary", "grad_uncertainty",
                                             "grad_boundary_log_weight",
                                             "grad_uncertainty_log_weight", "grad_bias"};
        for (int k = 0; k < 5; k++) {
          /* the sigmoid: one more ulp; the scalars: fp32 sums over the pixels */
          double extra = 4.8e-7 + (k < 2 ? 0.0 : 1.2e-7 * (double)(B * H * W));
          expect_grad(&got[k], &want[k], extra, what, names[k]);
          tu_free(&got[k]);
          tu_free(&out[k]);
          ref_grad_free(&want[k]);
        }
        tu_free(&grad_out);
        tu_free(&bnd);
        tu_free(&unc);
      }
}
END_TEST

/* One tilessm_scan_backward case against the reference: init_form 0
 * (absent), 2 ([B,C]) or 3 ([B,2,C]); gate_form 0 (absent), 1 ([C]) or 3
 * ([B,1,C]); specials: NaN and inf tokens. */
struct scan_case {
  apx_dtype dt, vdt;
  int64_t B, K, C;
  int direction, merge, init_form, gate_form, grad_final, specials;
  double clamp;
};

static void check_scan_backward(const struct scan_case *sc) {
  const apx_dtype dt = sc->dt, vdt = sc->vdt;
  const int64_t B = sc->B, K = sc->K, C = sc->C;
  const int init_form = sc->init_form, gate_form = sc->gate_form;
  int bidir = sc->direction == APX_SCAN_BIDIRECTIONAL;
  int gated = bidir && sc->merge == APX_MERGE_GATED;
  char what[220];
  snprintf(what, sizeof what,
           "tilessm_scan_backward %s vectors %s direction %d merge %d init %d gate %d "
           "clamp %g grad_final %d B %lld K %lld C %lld",
           apx_dtype_name(dt), apx_dtype_name(vdt), sc->direction, sc->merge, init_form, gate_form,
           sc->clamp, sc->grad_final, (long long)B, (long long)K, (long long)C);
  apx_tensor tokens = tu_host3(dt, B, K, C), grad_out = tu_host3(dt, B, K, C);
  apx_tensor vec[4] = {tu_host1(vdt, C), tu_host1(vdt, C), tu_host1(vdt, C), tu_host1(vdt, C)};
  apx_tensor init = init_form == 3 ? tu_host3(vdt, B, 2, C) : tu_host2(vdt, B, C);
  apx_tensor gate = gate_form == 3 ? tu_host3(vdt, B, 1, C) : tu_host1(vdt, C);
  apx_tensor grad_final = bidir ? tu_host3(dt, B, 2, C) : tu_host2(dt, B, C);
  apx_tensor out[REF_SCAN_GRADS] = {
      tu_host3(dt, B, K, C), tu_host1(vdt, C), tu_host1(vdt, C), tu_host1(vdt, C),
      tu_host1(vdt, C),
      init_form == 3 || (!init_form && bidir) ? tu_host3(vdt, B, 2, C) : tu_host2(vdt, B, C),
      gated && gate_form == 3 ? tu_host3(vdt, B, 1, C) : tu_host1(vdt, C)};
  fill_values(&tokens, sc->specials);
  fill_values(&grad_out, 0);
  tu_fill_uniform(&rng, &vec[0], -0.1, 1.1); /* some beyond the decay clamp */
  for (int i = 1; i < 4; i++) fill_values(&vec[i], 0);
  fill_values(&init, 0);
  tu_fill_uniform(&rng, &gate, -0.3, 1.3);
  fill_values(&grad_final, 0);
  apx_tilessm_scan_backward_args a = APX_TILESSM_SCAN_BACKWARD_ARGS_INIT;
  a.grad_out = &grad_out;
  a.tokens = &tokens;
  a.decay = &vec[0];
  a.input_gain = &vec[1];
  a.output_gain = &vec[2];
  a.state_bias = &vec[3];
  a.init_state = init_form ? &init : NULL;
  a.merge_gate = gate_form ? &gate : NULL;
  a.grad_final_state = sc->grad_final ? &grad_final : NULL;
  a.clamp_value = sc->clamp;
  a.direction = (apx_scan_direction)sc->direction;
  a.merge = (apx_scan_merge)sc->merge;
  const apx_tensor **outs[REF_SCAN_GRADS] = {
      &a.grad_tokens,     &a.grad_decay,      &a.grad_input_gain, &a.grad_output_gain,
      &a.grad_state_bias, &a.grad_init_state, &a.grad_merge_gate};
  ref_grad want[REF_SCAN_GRADS];
  for (int k = 0; k < REF_SCAN_GRADS; k++) {
    *outs[k] = &out[k];
    want[k] = ref_grad_new(apx_tensor_numel(&out[k]));
  }
  ref_tilessm_scan_backward(&a, want);
  const apx_tensor **ins[9] = {&a.grad_out,   &a.tokens,      &a.decay,
                               &a.input_gain, &a.output_gain, &a.state_bias,
                               &a.init_state, &a.merge_gate,  &a.grad_final_state};
  apx_tensor got[REF_SCAN_GRADS];
  run_on_gpu(APX_OP_TILESSM_SCAN_BACKWARD, &a, ins, 9, outs, REF_SCAN_GRADS, got, what);
  static const char *const names[REF_SCAN_GRADS] = {
      "grad_tokens",     "grad_decay",      "grad_input_gain", "grad_output_gain",
      "grad_state_bias", "grad_init_state", "grad_merge_gate"};
  for (int k = 0; k < REF_SCAN_GRADS; k++) {
    expect_grad(&got[k], &want[k], 4.8e-7 * (double)(K + B + 2), what, names[k]);
    tu_free(&got[k]);
    tu_free(&out[k]);
    ref_grad_free(&want[k]);
  }
  tu_free(&tokens);
  tu_free(&grad_out);
  for (int i = 0; i < 4; i++) tu_free(&vec[i]);
  tu_free(&init);
  tu_free(&gate);
  tu_free(&grad_final);
}

START_TEST(test_scan_backward) {
  static const int init_forms[3] = {0, 2, 3}, gate_forms[3] = {0, 1, 3};
  for (int direction = 0; direction < 3; direction++)
    for (int merge = 0; merge < 3; merge++)
      for (int rep = 0; rep < 3; rep++) {
        struct scan_case sc = {float_dtypes[rep], float_dtypes[(rep + direction) % 3], 2,
                               rep == 2 ? 37 : 5 + 3 * rep, rep == 1 ? 130 : 7, direction, merge,
                               init_forms[(rep + merge) % 3], gate_forms[(rep + 1) % 3], rep != 0,
                               rep == 1, rep == 1 ? 1.5 : 1e4};
        check_scan_backward(&sc);
      }
}
END_TEST

/* The chunked adjoint's edges (backends/cuda/tilessm_scan_backward.cu:
 * chunks of 16 tokens, a block of up to 16 warps over one row's 32
 * channels, each warp a run of chunks; B = 1 runs one launch): one chunk
 * short and whole, K not a multiple of 16, warps with no chunk (NC = 38
 * over 16 warps of 3), runs of many chunks (K = 4097: 257 chunks, the last
 * of one token), lanes past C (C odd, C = 1, C = 33), B = 1 and B > 1;
 * each direction and merge, init_state absent, [B,C] and [B,2,C], the gate
 * absent, [C] and [B,1,C], grad_final_state given or not, every dtype in
 * turn. */
START_TEST(test_scan_backward_chunks) {
  static const int64_t shapes[][3] = {{1, 1, 1},   {1, 16, 33}, {2, 17, 31}, {3, 48, 1},
                                      {1, 600, 64}, {1, 4097, 5}, {2, 4097, 3}};
  static const int forms[3] = {0, 2, 3}, gate_forms[3] = {0, 1, 3};
  /* direction and merge: forward, backward, and bidirectional's three merges */
  static const int dm[5][2] = {{APX_SCAN_FORWARD, APX_MERGE_SUM},
                               {APX_SCAN_BACKWARD, APX_MERGE_SUM},
                               {APX_SCAN_BIDIRECTIONAL, APX_MERGE_SUM},
                               {APX_SCAN_BIDIRECTIONAL, APX_MERGE_AVG},
                               {APX_SCAN_BIDIRECTIONAL, APX_MERGE_GATED}};
  for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
    for (int m = 0; m < 5; m++)
      for (int v = 0; v < 3; v++) {
        const int r = s + m + v;
        struct scan_case sc = {float_dtypes[r % 3], float_dtypes[(r + 1) % 3], shapes[s][0],
                               shapes[s][1], shapes[s][2], dm[m][0], dm[m][1], forms[r % 3],
                               gate_forms[(s + v) % 3], (r + s) % 2, v == 1, v == 1 ? 1.5 : 1e4};
        check_scan_backward(&sc);
      }
}
END_TEST

static void add_tests(Suite *s) {
  TCase *ops = cc_tcase(s, "backward");
  tcase_add_test(ops, test_fuse_backward);
  tcase_add_test(ops, test_alpha_backward);
  tcase_add_test(ops, test_scan_backward);
  tcase_add_test(ops, test_scan_backward_chunks);
}

int main(void) { return cc_main("cuda_backward", add_tests); }
