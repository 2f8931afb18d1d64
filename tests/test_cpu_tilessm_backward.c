/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's tilessm_scan_backward (docs/ops.md, tilessm_scan_backward)
 * against the double reference of ref_backward.c, through the public API
 * with the cpu backend forced: every direction and merge, init_state absent,
 * [B,C] and [B,2,C], merge_gate absent, [C] and [B,1,C] with values outside
 * [0, 1], decay outside its clamp, tokens with NaN, +-inf and values beyond
 * clamp_value (clamp on and off), grad_final_state given or not, any subset
 * of the outputs, every float dtype for tokens and the vectors, C across
 * the kernel's channel blocks, K = 0. Within docs/ops.md's parity bound
 * scaled by each gradient's magnitude, with the fp32 error of K steps and
 * B rows of sums added. Outputs are poisoned before each call; 1 and 3
 * threads give the same bits. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_backward.h"
#include "ref_tile.h"
#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
static const char *const grad_names[REF_SCAN_GRADS] = {
    "grad_tokens", "grad_decay",      "grad_input_gain", "grad_output_gain",
    "grad_state_bias", "grad_init_state", "grad_merge_gate"};

typedef struct scan_case {
  apx_dtype dtype, vector_dtype;
  int64_t B, K, C;
  apx_scan_direction direction;
  apx_scan_merge merge;
  int init_form;  /* 0 none, 2 [B,C], 3 [B,2,C] */
  int gate_form;  /* 0 none, 1 [C], 3 [B,1,C] */
  int specials;   /* NaN, +-inf tokens */
  double clamp_value;
  int grad_final; /* grad_final_state given */
  int wanted;     /* bit i: output i of grad_names */
} scan_case;

static void fill_tokens(tu_rng *r, const apx_tensor *t, int specials) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double v = 2.0 * tu_normal(r);
    int pick = specials ? (int)tu_int(r, 0, 11) : 9;
    tu_set(t, i, pick == 0 ? NAN : pick == 1 ? INFINITY : pick == 2 ? -INFINITY : v);
  }
}

/* Runs case sc twice (fresh inputs, poisoned outputs) and checks every
 * gradient asked for; keeps the last call's outputs in last[] when given. */
static void run_case(apx_context *ctx, tu_rng *r, const scan_case *sc,
                     apx_tensor last[REF_SCAN_GRADS]) {
  const int64_t B = sc->B, K = sc->K, C = sc->C;
  const int bidir = sc->direction == APX_SCAN_BIDIRECTIONAL;
  const int gated = bidir && sc->merge == APX_MERGE_GATED;
  apx_tensor tokens = tu_host3(sc->dtype, B, K, C), grad_out = tu_host3(sc->dtype, B, K, C);
  apx_tensor vec[4];
  for (int i = 0; i < 4; i++)
    vec[i] = tu_host1(sc->vector_dtype, C);
  apx_tensor init = sc->init_form == 3 ? tu_host3(sc->vector_dtype, B, 2, C)
                                       : tu_host2(sc->vector_dtype, B, C);
  apx_tensor gate = sc->gate_form == 3 ? tu_host3(sc->vector_dtype, B, 1, C)
                                       : tu_host1(sc->vector_dtype, C);
  apx_tensor grad_final = bidir ? tu_host3(sc->dtype, B, 2, C) : tu_host2(sc->dtype, B, C);
  apx_tensor out[REF_SCAN_GRADS] = {
      tu_host3(sc->dtype, B, K, C),  tu_host1(sc->vector_dtype, C), tu_host1(sc->vector_dtype, C),
      tu_host1(sc->vector_dtype, C), tu_host1(sc->vector_dtype, C),
      sc->init_form == 3 || (!sc->init_form && bidir) ? tu_host3(sc->vector_dtype, B, 2, C)
                                                      : tu_host2(sc->vector_dtype, B, C),
      gated && sc->gate_form == 3 ? tu_host3(sc->vector_dtype, B, 1, C)
                                  : tu_host1(sc->vector_dtype, C)};
  for (int call = 0; call < 2; call++) {
    fill_tokens(r, &tokens, sc->specials);
    tu_fill_normal(r, &grad_out);
    for (int64_t c = 0; c < C; c++) {
      /* decay mostly inside (0, 1), some beyond the clamp */
      double d = tu_int(r, 0, 7) ? tu_uniform(r) : tu_int(r, 0, 1) ? -0.5 : 1.5;
      tu_set(&vec[0], c, d);
    }
    for (int i = 1; i < 4; i++)
      tu_fill_normal(r, &vec[i]);
    tu_fill_normal(r, &init);
    tu_fill_uniform(r, &gate, -0.3, 1.3);
    tu_fill_normal(r, &grad_final);
    apx_tilessm_scan_backward_args args = APX_TILESSM_SCAN_BACKWARD_ARGS_INIT;
    args.grad_out = &grad_out;
    args.grad_final_state = sc->grad_final ? &grad_final : NULL;
    args.tokens = &tokens;
    args.decay = &vec[0];
    args.input_gain = &vec[1];
    args.output_gain = &vec[2];
    args.state_bias = &vec[3];
    args.init_state = sc->init_form ? &init : NULL;
    args.merge_gate = sc->gate_form ? &gate : NULL;
    args.clamp_value = sc->clamp_value;
    args.direction = sc->direction;
    args.merge = sc->merge;
    const apx_tensor **fields[REF_SCAN_GRADS] = {
        &args.grad_tokens,      &args.grad_decay,      &args.grad_input_gain,
        &args.grad_output_gain, &args.grad_state_bias, &args.grad_init_state,
        &args.grad_merge_gate};
    ref_grad want[REF_SCAN_GRADS];
    for (int k = 0; k < REF_SCAN_GRADS; k++) {
      tu_poison(&out[k]);
      int asked = sc->wanted >> k & 1;
      *fields[k] = asked ? &out[k] : NULL;
      want[k] = asked ? ref_grad_new(apx_tensor_numel(&out[k])) : (ref_grad){0, NULL, NULL};
    }
    ref_tilessm_scan_backward(&args, want);
    apx_status st = apx_tilessm_scan_backward(ctx, &args, &cpu_call);
    ck_assert_msg(st == APX_OK, "tilessm_scan_backward: %s: %s", apx_status_name(st),
                  apx_last_error());
    for (int k = 0; k < REF_SCAN_GRADS; k++) {
      char what[300];
      snprintf(what, sizeof what,
               "tilessm_scan_backward %s: tokens %s vectors %s B=%lld K=%lld C=%lld direction %d "
               "merge %d init %d gate %d specials %d clamp %g grad_final %d call %d",
               grad_names[k], apx_dtype_name(sc->dtype), apx_dtype_name(sc->vector_dtype),
               (long long)B, (long long)K, (long long)C, (int)sc->direction, (int)sc->merge,
               sc->init_form, sc->gate_form, sc->specials, sc->clamp_value, sc->grad_final, call);
      if (!(sc->wanted >> k & 1)) {
        ck_assert_msg(tu_is_poisoned(&out[k]), "%s: written though not asked for", what);
        continue;
      }
      /* one rounding to the output's dtype, fp32 over K steps and B rows */
      double rtol = ref_grad_tolerance(out[k].dtype) + 2.4e-7 * (double)(K + B + 2);
      double atol = out[k].dtype == APX_DTYPE_F16 ? 3e-8 : 1e-38;
      int64_t bad = ref_grad_mismatch(&out[k], &want[k], rtol, atol);
      ck_assert_msg(bad < 0, "%s: element %lld: got %.9g, want %.9g (magnitude %.3g, rtol %.3g)",
                    what, (long long)bad, bad < 0 ? 0.0 : tu_get(&out[k], bad),
                    bad < 0 ? 0.0 : want[k].value[bad], bad < 0 ? 0.0 : want[k].mag[bad], rtol);
      ref_grad_free(&want[k]);
    }
  }
  tu_free(&tokens);
  tu_free(&grad_out);
  for (int i = 0; i < 4; i++)
    tu_free(&vec[i]);
  tu_free(&init);
  tu_free(&gate);
  tu_free(&grad_final);
  for (int k = 0; k < REF_SCAN_GRADS; k++)
    if (last)
      last[k] = out[k];
    else
      tu_free(&out[k]);
}

static scan_case random_case(tu_rng *r, apx_scan_direction direction, apx_scan_merge merge) {
  static const int init_forms[3] = {0, 2, 3}, gate_forms[3] = {0, 1, 3};
  scan_case sc = {
      .dtype = float_dtypes[tu_int(r, 0, 2)],
      .vector_dtype = float_dtypes[tu_int(r, 0, 2)],
      .B = tu_int(r, 1, 3),
      .K = tu_int(r, 0, 20),
      .C = tu_int(r, 0, 3) ? tu_int(r, 1, 9) : tu_int(r, 60, 70),
      .direction = direction,
      .merge = merge,
      .init_form = init_forms[tu_int(r, 0, 2)],
      .gate_form = gate_forms[tu_int(r, 0, 2)],
      .specials = (int)tu_int(r, 0, 1),
      .clamp_value = tu_int(r, 0, 1) ? 1e4 : 1.5,
      .grad_final = (int)tu_int(r, 0, 1),
      .wanted = tu_int(r, 0, 2) ? 127 : (int)tu_int(r, 0, 127),
  };
  return sc;
}

START_TEST(test_scan_backward_random) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x5ca2u};
  for (int direction = 0; direction < 3; direction++)
    for (int merge = 0; merge < 3; merge++)
      for (int rep = 0; rep < 6; rep++) {
        scan_case sc = random_case(&r, (apx_scan_direction)direction, (apx_scan_merge)merge);
        run_case(ctx, &r, &sc, NULL);
      }
  apx_close(ctx);
}
END_TEST

/* K = 0: grad_init_state is grad_final_state (or 0), the vectors' gradients 0. */
START_TEST(test_scan_backward_no_steps) {
  apx_context *ctx = tu_open();
  tu_rng r = {tu_seed() ^ 0x5ca3u};
  for (int direction = 0; direction < 3; direction++) {
    scan_case sc = {APX_DTYPE_F32, APX_DTYPE_F32, 2, 0, 5, (apx_scan_direction)direction,
                    APX_MERGE_GATED, 3, 3, 0, 1e4, 1, 127};
    run_case(ctx, &r, &sc, NULL);
  }
  apx_close(ctx);
}
END_TEST

/* 1 and 3 threads, twice each, on a case with several jobs: the same bits. */
START_TEST(test_scan_backward_deterministic) {
  scan_case sc = {APX_DTYPE_F32, APX_DTYPE_F32, 3, 40, 150, APX_SCAN_BIDIRECTIONAL,
                  APX_MERGE_GATED, 2, 1, 1, 1e4, 1, 127};
  apx_tensor first[REF_SCAN_GRADS];
  for (int run = 0; run < 4; run++) {
    apx_context *ctx = tu_open_cpu_threads(run % 2 ? 3 : 1);
    ck_assert_msg(ctx != NULL, "apx_open: %s", apx_last_error());
    tu_rng r = {7};
    apx_tensor now[REF_SCAN_GRADS];
    run_case(ctx, &r, &sc, now);
    for (int k = 0; k < REF_SCAN_GRADS; k++) {
      if (run == 0) {
        first[k] = now[k];
        continue;
      }
      ck_assert_msg(tu_bytes_equal(&now[k], &first[k]), "run %d (%d threads): %s differs", run,
                    run % 2 ? 3 : 1, grad_names[k]);
      tu_free(&now[k]);
    }
    apx_close(ctx);
  }
  for (int k = 0; k < REF_SCAN_GRADS; k++)
    tu_free(&first[k]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_tilessm_backward");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_scan_backward_random);
  tcase_add_test(tc, test_scan_backward_no_steps);
  tcase_add_test(tc, test_scan_backward_deterministic);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
