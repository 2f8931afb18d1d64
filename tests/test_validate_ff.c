/* SPDX-License-Identifier: Apache-2.0 */
/* Argument validation of apx_ff_infer (libapexx/op/ff_infer.c; docs/ops.md,
 * ff_infer, docs/ff_infer.md, include/apexx/apexx.h apx_ff_infer_args): every
 * class of bad input is rejected through the public op (backend cpu and
 * no call) and apx_explain with APX_ERR_INVALID_ARG, a message naming the
 * argument and the bad value, and every tensor left as it was (outputs
 * still poisoned). The rules every op shares (malformed tensors, NULL
 * required tensors, devices, overlaps) run on ff_infer's default case in
 * test_validate_generic; here are ff_infer's own. Default case
 * (test_validate_common.h): dense [2,3,8,12], tile_l0 4 (a 2x3 grid, G0 6),
 * kmax 4/8, utilities and split_utilities [2,6]. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_validate_common.h"

static vt_case c;
static apx_ff_infer_args *args;

static void setup(void) {
  vt_setup();
  vt_make(&c, APX_OP_FF_INFER, APX_DTYPE_F32, APX_DTYPE_I64);
  args = &c.args.ff_infer;
}

static void teardown(void) {
  vt_free(&c);
  vt_teardown();
}

/* ---- valid calls ---- */

START_TEST(test_valid_variants) {
  vt_expect_valid(&c);
  /* optional tensors absent, stats given */
  args->split_utilities = args->boundary = args->uncertainty = NULL;
  vt_expect_valid(&c);
  restore(&c, "split_utilities");
  restore(&c, "boundary");
  restore(&c, "uncertainty");
  int64_t selected[2];
  apx_ff_stats stats = {selected, NULL, NULL, NULL, NULL, NULL};
  args->stats = &stats;
  vt_expect_valid(&c);
  args->stats = NULL;
  /* utilities and proxies in any float dtype, not dense's */
  apx_tensor u16 = OWNED(APX_DTYPE_BF16, 2, 6), s16 = OWNED(APX_DTYPE_F16, 2, 6);
  apx_tensor b16 = OWNED(APX_DTYPE_F16, 2, 8, 12);
  for (int64_t i = 0; i < 12; i++) {
    tu_set(&u16, i, (double)i);
    tu_set(&s16, i, (double)-i);
  }
  for (int64_t i = 0; i < 192; i++)
    tu_set(&b16, i, 0.5);
  vt_set(&c, "utilities", &u16);
  vt_set(&c, "split_utilities", &s16);
  vt_set(&c, "boundary", &b16);
  vt_expect_valid(&c);
  /* ±inf utilities are ordinary values */
  tu_set(&u16, 3, INFINITY);
  tu_set(&s16, 7, -INFINITY);
  vt_expect_valid(&c);
  tu_free(&u16);
  tu_free(&s16);
  tu_free(&b16);
  restore(&c, "utilities");
  restore(&c, "split_utilities");
  restore(&c, "boundary");
  /* the limits themselves */
  args->kmax_l0 = 6;
  args->kmax_l1 = 24;
  args->budget_b1 = args->budget_b2 = 0;
  vt_expect_valid(&c);
  args->kmax_l0 = args->kmax_l1 = 0;
  args->cost_heavy = -3; /* costs need only be finite */
  args->cost_cheap = 5;
  args->enable_nesting = 0;
  vt_expect_valid(&c);
  /* tile_l0 2 (tile_l1 1) divides 8 x 12 */
  args->tile_l0 = 2;
  args->tile_l1 = 1;
  args->kmax_l0 = 5;
  apx_tensor u24 = OWNED(APX_DTYPE_F32, 2, 24), s24 = OWNED(APX_DTYPE_F32, 2, 24);
  for (int64_t i = 0; i < 48; i++) {
    tu_set(&u24, i, 1.0);
    tu_set(&s24, i, 1.0);
  }
  vt_set(&c, "utilities", &u24);
  vt_set(&c, "split_utilities", &s24);
  vt_expect_valid(&c);
  tu_free(&u24);
  tu_free(&s24);
}
END_TEST

/* ---- missing pieces ---- */

START_TEST(test_null_args_and_tensors) {
  apx_explanation expl;
  ck_assert_int_eq(apx_ff_infer(vt_ctx, NULL, NULL), APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(apx_last_error(), "ff_infer: args"));
  ck_assert_ptr_nonnull(strstr(apx_last_error(), "[NULL]"));
  ck_assert_int_eq(apx_explain(vt_ctx, APX_OP_FF_INFER, NULL, NULL, &expl), APX_ERR_INVALID_ARG);
  const char *required[5] = {"dense", "utilities", "heavy", "detail", "alpha"};
  for (int i = 0; i < 5; i++) {
    vt_set(&c, required[i], NULL);
    vt_expect_invalid(&c, fmt("ff_infer: %s is required, got [NULL]", required[i]));
    restore(&c, required[i]);
  }
  args->weights = NULL;
  vt_expect_invalid(&c, "ff_infer: weights is required, got [NULL]");
}
END_TEST

START_TEST(test_weights_of_other_channels) {
  apx_ff_weights *four = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(vt_ctx, 4, 1, &four), APX_OK);
  args->weights = four;
  vt_expect_invalid(&c, "weights have [4] channels but dense has C = [3]");
  args->weights = c.weights;
  apx_ff_weights_free(vt_ctx, four);
}
END_TEST

/* ---- shapes and dtypes ---- */

START_TEST(test_wrong_ndim) {
  apx_tensor storage;
  apx_tensor *dense = view_of(&c, "dense", &storage);
  dense->ndim = 3;
  vt_expect_invalid(&c, "dense must be [B,C,H,W], got ndim [3]");
  restore(&c, "dense");
  apx_tensor *utilities = view_of(&c, "utilities", &storage);
  utilities->ndim = 1;
  utilities->shape[0] = 12;
  vt_expect_invalid(&c, "utilities has shape [12], expected [2,6]");
  restore(&c, "utilities");
  apx_tensor *heavy = view_of(&c, "heavy", &storage);
  heavy->ndim = 3;
  heavy->shape[0] = 6;
  heavy->shape[1] = 8;
  heavy->shape[2] = 12;
  vt_expect_invalid(&c, "heavy has shape [6,8,12], expected [2,3,8,12]");
  restore(&c, "heavy");
}
END_TEST

START_TEST(test_wrong_dtype) {
  apx_tensor storage;
  apx_tensor *dense = view_of(&c, "dense", &storage);
  dense->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "dense dtype [i32] must be f32, f16 or bf16");
  restore(&c, "dense");
  apx_tensor u64 = OWNED(APX_DTYPE_I64, 2, 6);
  vt_set(&c, "utilities", &u64);
  vt_expect_invalid(&c, "utilities dtype [i64] must be f32, f16 or bf16");
  apx_tensor s32 = OWNED(APX_DTYPE_I32, 2, 6);
  restore(&c, "utilities");
  vt_set(&c, "split_utilities", &s32);
  vt_expect_invalid(&c, "split_utilities dtype [i32] must be f32, f16 or bf16");
  restore(&c, "split_utilities");
  apx_tensor b32 = OWNED(APX_DTYPE_I32, 2, 1, 8, 12);
  vt_set(&c, "boundary", &b32);
  vt_expect_invalid(&c, "boundary dtype [i32] must be f32, f16 or bf16");
  restore(&c, "boundary");
  /* outputs in dense's dtype */
  const char *outputs[3] = {"heavy", "detail", "alpha"};
  for (int i = 0; i < 3; i++) {
    apx_tensor *out = view_of(&c, outputs[i], &storage);
    out->dtype = APX_DTYPE_F16; /* half the bytes: inside the buffer */
    vt_expect_invalid(&c, fmt("%s dtype [f16] must equal dense dtype [f32]", outputs[i]));
    restore(&c, outputs[i]);
  }
  tu_free(&u64);
  tu_free(&s32);
  tu_free(&b32);
}
END_TEST

/* ---- the tile grid ---- */

START_TEST(test_tiles) {
  const int64_t odd_or_small[4] = {3, 1, 0, -4};
  for (int i = 0; i < 4; i++) {
    args->tile_l0 = odd_or_small[i];
    args->tile_l1 = odd_or_small[i] / 2;
    vt_expect_invalid(&c,
                      fmt("tile_l0 = [%lld] must be even and >= 2", (long long)odd_or_small[i]));
  }
  args->tile_l0 = 8; /* divides H 8, not W 12 */
  args->tile_l1 = 4;
  vt_expect_invalid(&c, "dense H, W = [8, 12] are not divisible by tile_l0 [8]");
  args->tile_l0 = 6; /* divides W, not H */
  args->tile_l1 = 3;
  vt_expect_invalid(&c, "not divisible by tile_l0 [6]");
  args->tile_l0 = 4;
  const int64_t wrong_l1[3] = {4, 1, 0};
  for (int i = 0; i < 3; i++) {
    args->tile_l1 = wrong_l1[i];
    vt_expect_invalid(&c,
                      fmt("tile_l1 = [%lld] must be tile_l0 / 2 = [2]", (long long)wrong_l1[i]));
  }
}
END_TEST

/* Tile counts that overflow int64 (dense without elements: C = 0). */
START_TEST(test_tile_count_overflow) {
  apx_tensor storage;
  apx_tensor *dense = view_of(&c, "dense", &storage);
  dense->data = NULL;
  dense->shape[0] = 2;
  dense->shape[1] = 0;
  dense->shape[2] = dense->shape[3] = (int64_t)1 << 40; /* (2^38)^2 tiles of 4 */
  vt_expect_invalid(&c, "make too many tiles", "overflows int64");
  args->tile_l0 = 2;
  args->tile_l1 = 1;
  dense->shape[2] = dense->shape[3] = (int64_t)1 << 32; /* G0 2^62, 4*G0 overflows */
  vt_expect_invalid(&c, "make too many tiles");
}
END_TEST

START_TEST(test_utilities_shape) {
  const int64_t shapes[4][2] = {{2, 7}, {2, 5}, {3, 6}, {1, 6}};
  const char *names[2] = {"utilities", "split_utilities"};
  for (int n = 0; n < 2; n++)
    for (int s = 0; s < 4; s++) {
      apx_tensor wrong = OWNED(APX_DTYPE_F32, shapes[s][0], shapes[s][1]);
      for (int64_t i = 0; i < shapes[s][0] * shapes[s][1]; i++)
        tu_set(&wrong, i, 1.0);
      vt_set(&c, names[n], &wrong);
      vt_expect_invalid(&c, fmt("%s has shape [%lld,%lld], expected [2,6]", names[n],
                                (long long)shapes[s][0], (long long)shapes[s][1]));
      restore(&c, names[n]);
      tu_free(&wrong);
    }
}
END_TEST

/* boundary and uncertainty: [B,1,H,W] or [B,H,W] of dense's B, H, W. */
START_TEST(test_proxies_shape) {
  const char *names[2] = {"boundary", "uncertainty"};
  for (int n = 0; n < 2; n++) {
    apx_tensor two_channels = OWNED(APX_DTYPE_F32, 2, 2, 8, 12);
    vt_set(&c, names[n], &two_channels);
    vt_expect_invalid(&c,
                      fmt("%s channel dimension %s.shape[1] = [2] must be 1", names[n], names[n]));
    apx_tensor flat = OWNED(APX_DTYPE_F32, 2, 96);
    vt_set(&c, names[n], &flat);
    vt_expect_invalid(&c, fmt("%s must be [B,1,H,W] or [B,H,W], got ndim [2]", names[n]));
    apx_tensor narrow = OWNED(APX_DTYPE_F32, 2, 1, 8, 10);
    vt_set(&c, names[n], &narrow);
    vt_expect_invalid(&c, fmt("%s [B,H,W] = [2,8,10] must match dense", names[n]), "[2,8,12]");
    apx_tensor batch = OWNED(APX_DTYPE_F32, 1, 8, 12);
    vt_set(&c, names[n], &batch);
    vt_expect_invalid(&c, fmt("%s [B,H,W] = [1,8,12] must match dense", names[n]));
    restore(&c, names[n]);
    tu_free(&two_channels);
    tu_free(&flat);
    tu_free(&narrow);
    tu_free(&batch);
  }
}
END_TEST

/* heavy and detail [B,C,H,W] of dense; alpha [B,1,H,W] only. */
START_TEST(test_outputs_shape) {
  apx_tensor storage;
  apx_tensor *detail = view_of(&c, "detail", &storage);
  detail->shape[3] = 8;
  vt_expect_invalid(&c, "detail has shape [2,3,8,8], expected [2,3,8,12] (the shape of dense)");
  restore(&c, "detail");
  apx_tensor *alpha = view_of(&c, "alpha", &storage);
  alpha->ndim = 3; /* [B,H,W] is an input layout, not alpha's */
  alpha->shape[1] = 8;
  alpha->shape[2] = 12;
  vt_expect_invalid(&c, "alpha has shape [2,8,12], expected [2,1,8,12]");
  restore(&c, "alpha");
  apx_tensor three = OWNED(APX_DTYPE_F32, 2, 3, 8, 12);
  vt_set(&c, "alpha", &three);
  vt_expect_invalid(&c, "alpha has shape [2,3,8,12], expected [2,1,8,12]");
  restore(&c, "alpha");
  tu_free(&three);
}
END_TEST

/* ---- scalar options ---- */

START_TEST(test_kmax_limits) {
  args->kmax_l0 = 7;
  vt_expect_invalid(&c, "kmax_l0 = [7] is outside [0, 6]");
  args->kmax_l0 = -1;
  vt_expect_invalid(&c, "kmax_l0 = [-1] is outside [0, 6]");
  args->kmax_l0 = 4;
  args->kmax_l1 = 25;
  vt_expect_invalid(&c, "kmax_l1 = [25] is outside [0, 24]");
  args->kmax_l1 = -2;
  vt_expect_invalid(&c, "kmax_l1 = [-2] is outside [0, 24]");
}
END_TEST

START_TEST(test_budgets_and_costs) {
  double *budgets[2] = {&args->budget_b1, &args->budget_b2};
  const char *budget_names[2] = {"budget_b1", "budget_b2"};
  for (int i = 0; i < 2; i++) {
    double keep = *budgets[i];
    *budgets[i] = -1;
    vt_expect_invalid(&c, fmt("%s = [-1] must be >= 0", budget_names[i]));
    *budgets[i] = -1e-300;
    vt_expect_invalid(&c, fmt("%s = [-1e-300] must be >= 0", budget_names[i]));
    *budgets[i] = NAN;
    vt_expect_invalid(&c, fmt("%s = [nan] must be finite", budget_names[i]));
    *budgets[i] = INFINITY;
    vt_expect_invalid(&c, fmt("%s = [inf] must be finite", budget_names[i]));
    *budgets[i] = keep;
  }
  double *costs[2] = {&args->cost_heavy, &args->cost_cheap};
  const char *cost_names[2] = {"cost_heavy", "cost_cheap"};
  for (int i = 0; i < 2; i++) {
    double keep = *costs[i];
    *costs[i] = NAN;
    vt_expect_invalid(&c, fmt("%s = [nan] must be finite", cost_names[i]));
    *costs[i] = -INFINITY;
    vt_expect_invalid(&c, fmt("%s = [-inf] must be finite", cost_names[i]));
    *costs[i] = keep;
  }
}
END_TEST

START_TEST(test_flags) {
  args->enable_nesting = 2;
  vt_expect_invalid(&c, "enable_nesting = [2] must be 0 or 1");
  args->enable_nesting = 1;
  args->graph_replay = -1;
  vt_expect_invalid(&c, "graph_replay = [-1] must be 0 or 1");
}
END_TEST

/* docs/ff_infer.md, Options: every value of each mode is valid, blend_alpha
 * in [0, 1] in either overlap mode; anything else is named with its value. */
START_TEST(test_modes) {
  for (int m = 0; m < 6; m++) {
    args->order_mode = (apx_order_mode)m;
    vt_expect_valid(&c);
  }
  args->order_mode = (apx_order_mode)6;
  vt_expect_invalid(&c, "ff_infer: order_mode = [6] is not an apx_order_mode (0..5");
  args->order_mode = (apx_order_mode)-1;
  vt_expect_invalid(&c, "ff_infer: order_mode = [-1] is not an apx_order_mode");
  args->order_mode = APX_ORDER_L2R;
  args->overlap_mode = APX_OVERLAP_BLEND;
  const double alphas[] = {0.0, 0.25, 1.0};
  for (int i = 0; i < 3; i++) {
    args->blend_alpha = alphas[i];
    vt_expect_valid(&c);
  }
  args->overlap_mode = (apx_overlap_mode)2;
  vt_expect_invalid(&c, "ff_infer: overlap_mode = [2] is not APX_OVERLAP_OVERRIDE (0) or "
                        "APX_OVERLAP_BLEND (1)");
  args->overlap_mode = (apx_overlap_mode)-3;
  vt_expect_invalid(&c, "ff_infer: overlap_mode = [-3] is not");
  for (int overlap = 0; overlap < 2; overlap++) {
    args->overlap_mode = (apx_overlap_mode)overlap;
    args->blend_alpha = -0.1;
    vt_expect_invalid(&c, "ff_infer: blend_alpha = [-0.1] is outside [0, 1]");
    args->blend_alpha = 1.5;
    vt_expect_invalid(&c, "ff_infer: blend_alpha = [1.5] is outside [0, 1]");
    args->blend_alpha = NAN;
    vt_expect_invalid(&c, "ff_infer: blend_alpha = [nan] is outside [0, 1]");
    args->blend_alpha = INFINITY;
    vt_expect_invalid(&c, "ff_infer: blend_alpha = [inf] is outside [0, 1]");
  }
  args->blend_alpha = 0.5;
  args->scan_mode = APX_SCAN_FORWARD;
  vt_expect_valid(&c);
  args->scan_mode = APX_SCAN_BACKWARD;
  vt_expect_invalid(&c, "ff_infer: scan_mode = [1] (backward) is not APX_SCAN_BIDIRECTIONAL (2) "
                        "or APX_SCAN_FORWARD (0)");
  args->scan_mode = (apx_scan_direction)3;
  vt_expect_invalid(&c, "ff_infer: scan_mode = [3] is not APX_SCAN_BIDIRECTIONAL");
  args->scan_mode = APX_SCAN_BIDIRECTIONAL;
  vt_expect_valid(&c);
}
END_TEST

/* ---- utilities' values ---- */

/* NaN in host utilities or split utilities, any float dtype, is named by
 * its position; the same values on a device are the device's to check. */
START_TEST(test_nan_utilities) {
  const apx_dtype dtypes[3] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  const char *names[2] = {"utilities", "split_utilities"};
  for (int n = 0; n < 2; n++)
    for (int d = 0; d < 3; d++) {
      apx_tensor u = OWNED(dtypes[d], 2, 6);
      for (int64_t i = 0; i < 12; i++)
        tu_set(&u, i, (double)i - 5);
      tu_set(&u, 10, NAN); /* [1][4] */
      tu_set(&u, 11, NAN);
      vt_set(&c, names[n], &u);
      vt_expect_invalid(&c, fmt("%s[1][4] = [nan]", names[n]));
      tu_set(&u, 1, -NAN); /* the first in reading order wins */
      vt_expect_invalid(&c, fmt("%s[0][1] = [nan]", names[n]));
      restore(&c, names[n]);
      tu_free(&u);
    }
  /* on cuda (host memory standing in): not read by the core */
  apx_tensor on_cuda[VT_MAX_SLOTS];
  for (int i = 0; i < c.count; i++) {
    on_cuda[i] = c.t[i];
    on_cuda[i].device = APX_DEVICE_CUDA;
    *c.field[i] = &on_cuda[i];
  }
  tu_set(&c.t[vt_slot(&c, "utilities")], 0, NAN);
  apx_explanation expl;
  apx_status st = apx_explain(vt_ctx, APX_OP_FF_INFER, args, NULL, &expl);
  ck_assert_msg(st != APX_ERR_INVALID_ARG, "device utilities were read: %s", apx_last_error());
}
END_TEST

/* ---- aliasing and devices ---- */

/* An output may share no byte with an input or with another output; the
 * same pointer counts too. */
START_TEST(test_outputs_alias) {
  apx_tensor storage;
  apx_tensor *heavy = view_of(&c, "heavy", &storage);
  heavy->data = vt_tensor(&c, "dense")->data;
  vt_expect_invalid(&c, "heavy [", "overlaps dense [", "may not alias");
  restore(&c, "heavy");
  apx_tensor *alpha = view_of(&c, "alpha", &storage);
  alpha->data = (char *)vt_tensor(&c, "boundary")->data + 4;
  vt_expect_invalid(&c, "alpha [", "overlaps boundary [");
  restore(&c, "alpha");
  apx_tensor *detail = view_of(&c, "detail", &storage);
  detail->data = vt_tensor(&c, "heavy")->data;
  vt_expect_invalid(&c, "detail [", "overlaps heavy [", "may not alias");
  restore(&c, "detail");
  alpha = view_of(&c, "alpha", &storage);
  alpha->data = (char *)vt_tensor(&c, "detail")->data + 64;
  vt_expect_invalid(&c, "alpha [", "overlaps detail [");
  restore(&c, "alpha");
  alpha = view_of(&c, "alpha", &storage);
  alpha->data = (char *)vt_tensor(&c, "heavy")->data + 4 * (2 * 3 * 8 * 12 - 4);
  vt_expect_invalid(&c, "alpha [", "overlaps heavy [");
  restore(&c, "alpha");
  /* utilities inside heavy's buffer */
  apx_tensor *utilities = view_of(&c, "utilities", &storage);
  utilities->data = (char *)vt_tensor(&c, "heavy")->data + 8;
  vt_expect_invalid(&c, "heavy [", "overlaps utilities [");
  restore(&c, "utilities");
}
END_TEST

START_TEST(test_mixed_devices) {
  apx_tensor storage;
  const char *names[3] = {"utilities", "uncertainty", "alpha"};
  for (int i = 0; i < 3; i++) {
    apx_tensor *t = view_of(&c, names[i], &storage);
    t->device = APX_DEVICE_CUDA;
    vt_expect_invalid(&c, fmt("%s is on [cuda:0] but dense is on [host:0]", names[i]),
                      "must be on one device");
    restore(&c, names[i]);
  }
  /* all on cuda, split utilities on another ordinal */
  apx_tensor on_cuda[VT_MAX_SLOTS];
  for (int i = 0; i < c.count; i++) {
    on_cuda[i] = c.t[i];
    on_cuda[i].device = APX_DEVICE_CUDA;
    *c.field[i] = &on_cuda[i];
  }
  on_cuda[vt_slot(&c, "split_utilities")].device_index = 1;
  vt_expect_invalid(&c, "split_utilities is on [cuda:1] but dense is on [cuda:0]");
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_ff");
  TCase *tc = tcase_create("ff_infer");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_valid_variants);
  tcase_add_test(tc, test_null_args_and_tensors);
  tcase_add_test(tc, test_weights_of_other_channels);
  tcase_add_test(tc, test_wrong_ndim);
  tcase_add_test(tc, test_wrong_dtype);
  tcase_add_test(tc, test_tiles);
  tcase_add_test(tc, test_tile_count_overflow);
  tcase_add_test(tc, test_utilities_shape);
  tcase_add_test(tc, test_proxies_shape);
  tcase_add_test(tc, test_outputs_shape);
  tcase_add_test(tc, test_kmax_limits);
  tcase_add_test(tc, test_budgets_and_costs);
  tcase_add_test(tc, test_flags);
  tcase_add_test(tc, test_modes);
  tcase_add_test(tc, test_nan_utilities);
  tcase_add_test(tc, test_outputs_alias);
  tcase_add_test(tc, test_mixed_devices);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
