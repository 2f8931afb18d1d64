/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of fusiongate_alpha, fusiongate_fuse and tilessm_scan (docs/ops.md, each
 * op's section). Every rejection is checked through the op and
 * apx_explain with the outputs left poisoned (test_validate_common.c). */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_validate_common.h"




/* ---- fusiongate_alpha ---- */

START_TEST(test_alpha_proxy_shapes) {
  const char *names[2] = {"boundary", "uncertainty"};
  for (int p = 0; p < 2; p++) {
    vt_case c;
    vt_make(&c, APX_OP_FUSIONGATE_ALPHA, APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor storage, *proxy = view_of(&c, names[p], &storage);
    char want[128];
    int ndim = proxy->ndim;
    proxy->ndim = 2;
    snprintf(want, sizeof want, "fusiongate_alpha: %s must be [B,1,H,W] or [B,H,W], got ndim [2]",
             names[p]);
    vt_expect_invalid(&c, want);
    proxy->ndim = 5;
    proxy->shape[4] = 1;
    vt_expect_invalid(&c, names[p], "got ndim [5]");
    proxy->ndim = ndim;
    restore(&c, names[p]);
    /* a 4-D proxy must have one channel */
    apx_tensor wide = OWNED(APX_DTYPE_F32, 2, 3, 8, 12);
    vt_set(&c, names[p], &wide);
    snprintf(want, sizeof want, "%s channel dimension %s.shape[1] = [3] must be 1", names[p],
             names[p]);
    vt_expect_invalid(&c, want);
    tu_free(&wide);
    /* shapes must agree after the channel axis is inserted */
    apx_tensor other_b = OWNED(APX_DTYPE_F32, 3, 1, 8, 12);
    vt_set(&c, names[p], &other_b);
    vt_expect_invalid(&c, "must match in shape", "[3,8,12]", "[2,8,12]");
    tu_free(&other_b);
    apx_tensor other_w = OWNED(APX_DTYPE_F32, 2, 8, 13);
    vt_set(&c, names[p], &other_w);
    vt_expect_invalid(&c, "must match in shape", "[2,8,13]");
    tu_free(&other_w);
    apx_tensor other_h = OWNED(APX_DTYPE_F32, 2, 1, 7, 12);
    vt_set(&c, names[p], &other_h);
    vt_expect_invalid(&c, "must match in shape", "[2,7,12]");
    tu_free(&other_h);
    vt_free(&c);
  }
}
END_TEST

START_TEST(test_alpha_dtypes) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_ALPHA, APX_DTYPE_F16, APX_DTYPE_I64);
  apx_tensor sb, su, so;
  apx_tensor *boundary = view_of(&c, "boundary", &sb);
  apx_tensor *uncertainty = view_of(&c, "uncertainty", &su);
  apx_tensor *out = view_of(&c, "out", &so);
  boundary->dtype = uncertainty->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "boundary dtype [i32] must be f32, f16 or bf16");
  boundary->dtype = APX_DTYPE_F16;
  uncertainty->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "uncertainty dtype [i32] must be f32, f16 or bf16");
  uncertainty->dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "uncertainty dtype [bf16] must equal boundary dtype [f16]");
  uncertainty->dtype = APX_DTYPE_F16;
  /* out may be any float dtype (the reference's out_dtype) */
  apx_tensor out32 = OWNED(APX_DTYPE_F32, 2, 1, 8, 12);
  vt_set(&c, "out", &out32);
  vt_expect_valid(&c);
  vt_set(&c, "out", out);
  out->dtype = APX_DTYPE_BF16;
  vt_expect_valid(&c);
  out->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "out dtype [i32] must be f32, f16 or bf16");
  tu_free(&out32);
  vt_free(&c);
}
END_TEST

START_TEST(test_alpha_out_shape) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_ALPHA, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor so, *out = view_of(&c, "out", &so);
  out->ndim = 3;
  out->shape[1] = 8;
  out->shape[2] = 12;
  vt_expect_invalid(&c, "out has shape [2,8,12], expected [2,1,8,12]", "[B,1,H,W]");
  restore(&c, "out");
  for (int d = 0; d < 4; d++) {
    int64_t shape[4] = {2, 1, 8, 12};
    shape[d] += 1;
    apx_tensor wrong = owned(APX_DTYPE_F32, 4, shape);
    vt_set(&c, "out", &wrong);
    vt_expect_invalid(&c, "out has shape", "expected [2,1,8,12]");
    ck_assert(tu_is_poisoned(&wrong));
    tu_free(&wrong);
  }
  vt_free(&c);
}
END_TEST

START_TEST(test_alpha_valid_forms) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_ALPHA, APX_DTYPE_BF16, APX_DTYPE_I64);
  /* both 3-D */
  apx_tensor b3 = OWNED(APX_DTYPE_BF16, 2, 8, 12);
  vt_set(&c, "boundary", &b3);
  vt_expect_valid(&c);
  /* any weights: the reference computes with them */
  c.args.alpha.boundary_log_weight = NAN;
  c.args.alpha.bias = -INFINITY;
  vt_expect_valid(&c);
  /* B = 0 */
  apx_tensor e1 = OWNED(APX_DTYPE_BF16, 0, 1, 8, 12), e2 = OWNED(APX_DTYPE_BF16, 0, 8, 12);
  apx_tensor eo = OWNED(APX_DTYPE_BF16, 0, 1, 8, 12);
  vt_set(&c, "boundary", &e1);
  vt_set(&c, "uncertainty", &e2);
  vt_set(&c, "out", &eo);
  vt_expect_valid(&c);
  tu_free(&b3);
  tu_free(&e1);
  tu_free(&e2);
  tu_free(&eo);
  vt_free(&c);
}
END_TEST

/* ---- fusiongate_fuse ---- */

START_TEST(test_fuse_shapes) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_FUSE, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor sb, *base = view_of(&c, "base", &sb);
  base->ndim = 3;
  vt_expect_invalid(&c, "fusiongate_fuse: base must be [B,C,H,W], got ndim [3]");
  base->ndim = 4;
  restore(&c, "base");
  apx_tensor sd, *detail = view_of(&c, "detail", &sd);
  for (int d = 0; d < 4; d++) {
    detail->shape[d] += 1;
    vt_expect_invalid(&c, "detail has shape", "expected [2,3,8,12]");
    detail->shape[d] -= 1;
  }
  detail->ndim = 3;
  vt_expect_invalid(&c, "detail has shape [2,3,8], expected [2,3,8,12]");
  restore(&c, "detail");

  apx_tensor sa, *alpha = view_of(&c, "alpha", &sa);
  alpha->ndim = 2;
  vt_expect_invalid(&c, "alpha must be [B,1,H,W] or [B,H,W], got ndim [2]");
  alpha->ndim = 4;
  restore(&c, "alpha");
  apx_tensor wide = OWNED(APX_DTYPE_F32, 2, 3, 8, 12);
  vt_set(&c, "alpha", &wide);
  vt_expect_invalid(&c, "alpha channel dimension alpha.shape[1] = [3] must be 1");
  const int64_t wrong[3][4] = {{1, 1, 8, 12}, {2, 1, 4, 12}, {2, 1, 8, 6}};
  for (int w = 0; w < 3; w++) {
    apx_tensor bad = owned(APX_DTYPE_F32, 4, wrong[w]);
    vt_set(&c, "alpha", &bad);
    vt_expect_invalid(&c, "alpha [B,H,W] = [", "must match base batch and spatial shape [2,8,12]");
    tu_free(&bad);
  }
  /* the 3-D alpha form is valid */
  apx_tensor alpha3 = OWNED(APX_DTYPE_F32, 2, 8, 12);
  vt_set(&c, "alpha", &alpha3);
  vt_expect_valid(&c);
  tu_free(&alpha3);
  tu_free(&wide);
  vt_free(&c);
}
END_TEST

START_TEST(test_fuse_dtypes_and_out) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_FUSE, APX_DTYPE_F16, APX_DTYPE_I64);
  apx_tensor sb, sd, sa, so;
  apx_tensor *base = view_of(&c, "base", &sb), *detail = view_of(&c, "detail", &sd);
  apx_tensor *alpha = view_of(&c, "alpha", &sa), *out = view_of(&c, "out", &so);
  base->dtype = detail->dtype = alpha->dtype = out->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "base dtype [i32] must be f32, f16 or bf16");
  base->dtype = detail->dtype = alpha->dtype = out->dtype = APX_DTYPE_F16;
  detail->dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "detail dtype [bf16] must equal base dtype [f16]");
  detail->dtype = APX_DTYPE_F16;
  alpha->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "alpha dtype [f32] must equal base dtype [f16]");
  alpha->dtype = APX_DTYPE_F16;
  out->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "out dtype [f32] must equal base dtype [f16]");
  out->dtype = APX_DTYPE_F16;
  out->shape[0] = 1;
  vt_expect_invalid(&c, "out has shape [1,3,8,12], expected [2,3,8,12]");
  out->shape[0] = 2;
  vt_expect_valid(&c);
  /* in place: out aliases base exactly */
  vt_set(&c, "out", base);
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* ---- tilessm_scan ---- */

static const char *const vector_names[4] = {"decay", "input_gain", "output_gain", "state_bias"};

START_TEST(test_scan_tokens) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor st, *tokens = view_of(&c, "tokens", &st);
  tokens->ndim = 2;
  vt_expect_invalid(&c, "tilessm_scan: tokens must be [B,K,C], got ndim [2]");
  tokens->ndim = 4;
  tokens->shape[3] = 1;
  vt_expect_invalid(&c, "tokens must be [B,K,C], got ndim [4]");
  tokens->ndim = 3;
  tokens->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "tokens dtype [i32] must be f32, f16 or bf16");
  vt_free(&c);
}
END_TEST

START_TEST(test_scan_vectors) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_BF16, APX_DTYPE_I64);
  for (int v = 0; v < 4; v++) {
    char want[128];
    apx_tensor sv, *vec = view_of(&c, vector_names[v], &sv);
    vec->shape[0] = 4;
    snprintf(want, sizeof want, "%s has shape [4], expected [3] ([C] matching tokens channels)",
             vector_names[v]);
    vt_expect_invalid(&c, want);
    vec->shape[0] = 2;
    vt_expect_invalid(&c, vector_names[v], "has shape [2], expected [3]");
    vec->shape[0] = 3;
    vec->ndim = 2;
    vec->shape[1] = 1;
    vt_expect_invalid(&c, vector_names[v], "has shape [3,1], expected [3]");
    vec->ndim = 1;
    vec->dtype = APX_DTYPE_I64;
    snprintf(want, sizeof want, "%s dtype [i64] must be f32, f16 or bf16", vector_names[v]);
    vt_expect_invalid(&c, want);
    vec->dtype = APX_DTYPE_BF16;
    restore(&c, vector_names[v]);
  }
  /* each vector may have its own float dtype (docs/ops.md, tilessm_scan) */
  apx_tensor v32 = OWNED(APX_DTYPE_F32, 3), v16 = OWNED(APX_DTYPE_F16, 3);
  tu_fill_uniform(&(tu_rng){1}, &v32, 0.1, 0.9);
  tu_fill_uniform(&(tu_rng){2}, &v16, 0.1, 0.9);
  vt_set(&c, "decay", &v32);
  vt_set(&c, "output_gain", &v16);
  vt_expect_valid(&c);
  tu_free(&v32);
  tu_free(&v16);
  vt_free(&c);
}
END_TEST

START_TEST(test_scan_init_state) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor si, *init = view_of(&c, "init_state", &si);
  init->ndim = 1;
  vt_expect_invalid(&c, "init_state must be [B,C] or [B,2,C], got ndim [1]");
  init->ndim = 4;
  init->shape[3] = 1;
  vt_expect_invalid(&c, "init_state must be [B,C] or [B,2,C], got ndim [4]");
  init->ndim = 3;
  init->shape[1] = 3;
  vt_expect_invalid(&c, "init_state has shape [2,3,3], expected [2,2,3]");
  init->shape[1] = 2;
  init->shape[0] = 1;
  vt_expect_invalid(&c, "init_state has shape [1,2,3], expected [2,2,3]");
  init->shape[0] = 2;
  init->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "init_state dtype [i32] must be f32, f16 or bf16");
  /* [B,C] form */
  apx_tensor init2 = OWNED(APX_DTYPE_F16, 2, 3);
  tu_fill_normal(&(tu_rng){3}, &init2);
  vt_set(&c, "init_state", &init2);
  vt_expect_valid(&c); /* another float dtype is allowed */
  init2.shape[1] = 4;
  vt_expect_invalid(&c, "init_state has shape [2,4], expected [2,3]");
  init2.shape[1] = 3;
  /* [B,2,C] with a one-way scan is legal ([:,0] forward, [:,1] backward) */
  restore(&c, "init_state");
  c.args.scan.direction = APX_SCAN_BACKWARD;
  apx_tensor fs = OWNED(APX_DTYPE_F32, 2, 3);
  vt_set(&c, "final_state", &fs);
  vt_expect_valid(&c);
  vt_set(&c, "init_state", NULL);
  vt_expect_valid(&c);
  tu_free(&fs);
  tu_free(&init2);
  vt_free(&c);
}
END_TEST

START_TEST(test_scan_enums_and_clamp) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tilessm_scan_args *a = &c.args.scan;
  a->direction = (apx_scan_direction)3;
  vt_expect_invalid(&c, "tilessm_scan: direction = [3] is not");
  a->direction = (apx_scan_direction)-1;
  vt_expect_invalid(&c, "direction = [-1]");
  a->direction = APX_SCAN_BIDIRECTIONAL;
  a->merge = (apx_scan_merge)3;
  vt_expect_invalid(&c, "tilessm_scan: merge = [3] is not");
  /* merge is checked for one-way scans too, as the reference does */
  a->direction = APX_SCAN_FORWARD;
  apx_tensor fs = OWNED(APX_DTYPE_F32, 2, 3);
  vt_set(&c, "final_state", &fs);
  vt_expect_invalid(&c, "merge = [3]");
  a->merge = APX_MERGE_AVG;
  a->direction = APX_SCAN_BIDIRECTIONAL;
  restore(&c, "final_state");
  a->clamp_value = NAN;
  vt_expect_invalid(&c, "clamp_value = [", "nan] must not be NaN");
  /* |clamp_value| is the limit: 0, negative and infinite values are legal */
  const double legal[4] = {0.0, -3.0, INFINITY, -INFINITY};
  for (int i = 0; i < 4; i++) {
    a->clamp_value = legal[i];
    vt_expect_valid(&c);
  }
  tu_free(&fs);
  vt_free(&c);
}
END_TEST

START_TEST(test_scan_merge_gate) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tilessm_scan_args *a = &c.args.scan;
  apx_tensor sg, *gate = view_of(&c, "merge_gate", &sg);
  gate->shape[1] = 2;
  vt_expect_invalid(&c, "merge_gate has shape [2,2,3], expected [2,1,3]");
  gate->shape[1] = 1;
  gate->shape[0] = 3;
  vt_expect_invalid(&c, "merge_gate has shape [3,1,3], expected [2,1,3]");
  gate->shape[0] = 2;
  gate->ndim = 2;
  vt_expect_invalid(&c, "merge_gate must be [C] or [B,1,C], got ndim [2]");
  gate->ndim = 1;
  gate->shape[0] = 4;
  vt_expect_invalid(&c, "merge_gate has shape [4], expected [3]");
  gate->shape[0] = 3;
  vt_expect_valid(&c); /* [C] */
  gate->dtype = APX_DTYPE_I64;
  vt_expect_invalid(&c, "merge_gate dtype [i64] must be f32, f16 or bf16");
  /* ignored, and so not validated, unless the merge is gated and the scan
   * bidirectional (docs/ops.md, tilessm_scan) */
  gate->ndim = 2;
  gate->dtype = (apx_dtype)77;
  a->merge = APX_MERGE_SUM;
  vt_expect_valid(&c);
  a->merge = APX_MERGE_AVG;
  vt_expect_valid(&c);
  a->merge = APX_MERGE_GATED;
  a->direction = APX_SCAN_FORWARD;
  vt_set(&c, "final_state", NULL);
  vt_expect_valid(&c);
  /* a missing gate means 0.5 */
  a->direction = APX_SCAN_BIDIRECTIONAL;
  vt_set(&c, "merge_gate", NULL);
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

START_TEST(test_scan_outputs) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F16, APX_DTYPE_I64);
  apx_tilessm_scan_args *a = &c.args.scan;
  apx_tensor so, *out = view_of(&c, "out", &so);
  out->shape[1] = 4;
  vt_expect_invalid(&c, "out has shape [2,4,3], expected [2,5,3]");
  out->shape[1] = 5;
  out->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "out dtype [f32] must equal tokens dtype [f16]");
  out->dtype = APX_DTYPE_F16;
  restore(&c, "out");
  apx_tensor sf, *final_state = view_of(&c, "final_state", &sf);
  final_state->dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "final_state dtype [bf16] must equal tokens dtype [f16]");
  final_state->dtype = APX_DTYPE_F16;
  final_state->ndim = 2;
  final_state->shape[1] = 3;
  vt_expect_invalid(&c, "final_state has shape [2,3], expected [2,2,3]", "bidirectional");
  apx_tensor fs2 = OWNED(APX_DTYPE_F16, 2, 3);
  vt_set(&c, "final_state", &fs2);
  a->direction = APX_SCAN_FORWARD;
  vt_expect_valid(&c);
  restore(&c, "final_state"); /* [B,2,C] for a forward scan */
  vt_expect_invalid(&c, "final_state has shape [2,2,3], expected [2,3]", "one-way");
  /* final_state is optional */
  vt_set(&c, "final_state", NULL);
  vt_expect_valid(&c);
  tu_free(&fs2);
  vt_free(&c);
}
END_TEST

/* Section 3: K = 0 and B = 0 are legal. */
START_TEST(test_scan_empty_is_valid) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor tokens = OWNED(APX_DTYPE_F32, 2, 0, 3), out = OWNED(APX_DTYPE_F32, 2, 0, 3);
  vt_set(&c, "tokens", &tokens);
  vt_set(&c, "out", &out);
  vt_expect_valid(&c);
  apx_tensor tokens_b0 = OWNED(APX_DTYPE_F32, 0, 5, 3), out_b0 = OWNED(APX_DTYPE_F32, 0, 5, 3);
  apx_tensor init_b0 = OWNED(APX_DTYPE_F32, 0, 2, 3), gate_b0 = OWNED(APX_DTYPE_F32, 0, 1, 3);
  apx_tensor final_b0 = OWNED(APX_DTYPE_F32, 0, 2, 3);
  vt_set(&c, "tokens", &tokens_b0);
  vt_set(&c, "out", &out_b0);
  vt_set(&c, "init_state", &init_b0);
  vt_set(&c, "merge_gate", &gate_b0);
  vt_set(&c, "final_state", &final_b0);
  vt_expect_valid(&c);
  tu_free(&tokens);
  tu_free(&out);
  tu_free(&tokens_b0);
  tu_free(&out_b0);
  tu_free(&init_b0);
  tu_free(&gate_b0);
  tu_free(&final_b0);
  vt_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_gate_scan");
  TCase *tc = tcase_create("gate_scan");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_alpha_proxy_shapes);
  tcase_add_test(tc, test_alpha_dtypes);
  tcase_add_test(tc, test_alpha_out_shape);
  tcase_add_test(tc, test_alpha_valid_forms);
  tcase_add_test(tc, test_fuse_shapes);
  tcase_add_test(tc, test_fuse_dtypes_and_out);
  tcase_add_test(tc, test_scan_tokens);
  tcase_add_test(tc, test_scan_vectors);
  tcase_add_test(tc, test_scan_init_state);
  tcase_add_test(tc, test_scan_enums_and_clamp);
  tcase_add_test(tc, test_scan_merge_gate);
  tcase_add_test(tc, test_scan_outputs);
  tcase_add_test(tc, test_scan_empty_is_valid);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
