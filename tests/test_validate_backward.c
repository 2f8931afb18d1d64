/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the backward ops (docs/ops.md, fusiongate_fuse_backward,
 * fusiongate_alpha_backward): the forward's rules on the forward's inputs,
 * grad_out in the forward output's shape, the gradients in their inputs'
 * shapes and dtypes. Every rejection is checked through the op and
 * apx_explain with the outputs left poisoned (test_validate_common.c). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_validate_common.h"

/* ---- fusiongate_fuse_backward ---- */

START_TEST(test_fuse_backward_shapes) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_FUSE_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  vt_expect_valid(&c);
  /* the forward's rules, named by this op */
  apx_tensor detail = OWNED(APX_DTYPE_F32, 2, 3, 8, 11);
  vt_set(&c, "detail", &detail);
  vt_expect_invalid(&c, "fusiongate_fuse_backward: detail has shape [2,3,8,11], expected [2,3,8,12]");
  restore(&c, "detail");
  apx_tensor alpha = OWNED(APX_DTYPE_F32, 2, 1, 8, 11);
  vt_set(&c, "alpha", &alpha);
  vt_expect_invalid(&c, "alpha [B,H,W] = [2,8,11] must match base batch and spatial shape");
  restore(&c, "alpha");
  /* grad_out: the forward out's shape */
  apx_tensor grad_out = OWNED(APX_DTYPE_F32, 2, 4, 8, 12);
  vt_set(&c, "grad_out", &grad_out);
  vt_expect_invalid(&c, "grad_out has shape [2,4,8,12], expected [2,3,8,12]");
  restore(&c, "grad_out");
  /* the gradients: their inputs' shapes (alpha 3-D: grad_alpha 3-D) */
  apx_tensor grad_alpha = OWNED(APX_DTYPE_F32, 2, 8, 12);
  vt_set(&c, "grad_alpha", &grad_alpha);
  vt_expect_invalid(&c, "grad_alpha has shape [2,8,12], expected [2,1,8,12]");
  apx_tensor alpha3 = OWNED(APX_DTYPE_F32, 2, 8, 12);
  vt_set(&c, "alpha", &alpha3);
  vt_expect_valid(&c);
  restore(&c, "alpha");
  restore(&c, "grad_alpha");
  apx_tensor grad_base = OWNED(APX_DTYPE_F32, 2, 3, 8, 13);
  vt_set(&c, "grad_base", &grad_base);
  vt_expect_invalid(&c, "grad_base has shape [2,3,8,13], expected [2,3,8,12]");
  restore(&c, "grad_base");
  /* every output optional */
  vt_set(&c, "grad_base", NULL);
  vt_set(&c, "grad_detail", NULL);
  vt_set(&c, "grad_alpha", NULL);
  vt_expect_valid(&c);
  tu_free(&detail);
  tu_free(&alpha);
  tu_free(&grad_out);
  tu_free(&grad_alpha);
  tu_free(&alpha3);
  tu_free(&grad_base);
  vt_free(&c);
}
END_TEST

START_TEST(test_fuse_backward_dtypes_and_overlap) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_FUSE_BACKWARD, APX_DTYPE_F16, APX_DTYPE_I64);
  apx_tensor sg, *grad_out = view_of(&c, "grad_out", &sg);
  grad_out->dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "grad_out dtype [bf16] must equal base dtype [f16]");
  restore(&c, "grad_out");
  apx_tensor sd, *grad_detail = view_of(&c, "grad_detail", &sd);
  grad_detail->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "grad_detail dtype [f32] must equal base dtype [f16]");
  restore(&c, "grad_detail");
  /* no gradient may alias an input, not even base */
  vt_set(&c, "grad_base", vt_tensor(&c, "base"));
  vt_expect_invalid(&c, "grad_base", "base");
  restore(&c, "grad_base");
  vt_set(&c, "grad_detail", vt_tensor(&c, "grad_base"));
  vt_expect_invalid(&c, "grad_detail", "grad_base");
  vt_free(&c);
}
END_TEST

/* ---- fusiongate_alpha_backward ---- */

START_TEST(test_alpha_backward_shapes) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_ALPHA_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  vt_expect_valid(&c);
  apx_tensor uncertainty = OWNED(APX_DTYPE_F32, 2, 8, 13);
  vt_set(&c, "uncertainty", &uncertainty);
  vt_expect_invalid(&c, "fusiongate_alpha_backward: boundary [B,H,W] = [2,8,12] and "
                        "uncertainty [B,H,W] = [2,8,13] must match in shape");
  restore(&c, "uncertainty");
  apx_tensor grad_out = OWNED(APX_DTYPE_F32, 2, 1, 8, 13);
  vt_set(&c, "grad_out", &grad_out);
  vt_expect_invalid(&c, "grad_out has shape [2,1,8,13], expected [2,1,8,12]");
  restore(&c, "grad_out");
  apx_tensor grad_out3 = OWNED(APX_DTYPE_F32, 2, 8, 12);
  vt_set(&c, "grad_out", &grad_out3);
  vt_expect_invalid(&c, "grad_out must be [B,1,H,W], got ndim [3]");
  restore(&c, "grad_out");
  /* grad_uncertainty has uncertainty's (3-D) shape */
  apx_tensor grad_u = OWNED(APX_DTYPE_F32, 2, 1, 8, 12);
  vt_set(&c, "grad_uncertainty", &grad_u);
  vt_expect_invalid(&c, "grad_uncertainty has shape [2,1,8,12], expected [2,8,12]");
  restore(&c, "grad_uncertainty");
  /* the scalars' gradients are 0-d */
  apx_tensor grad_bias = OWNED(APX_DTYPE_F32, 1);
  vt_set(&c, "grad_bias", &grad_bias);
  vt_expect_invalid(&c, "grad_bias has shape [1], expected []");
  restore(&c, "grad_bias");
  tu_free(&uncertainty);
  tu_free(&grad_out);
  tu_free(&grad_out3);
  tu_free(&grad_u);
  tu_free(&grad_bias);
  vt_free(&c);
}
END_TEST

START_TEST(test_alpha_backward_dtypes) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_ALPHA_BACKWARD, APX_DTYPE_BF16, APX_DTYPE_I64);
  /* grad_out and the scalars' gradients: any float dtype */
  apx_tensor grad_out = OWNED(APX_DTYPE_F32, 2, 1, 8, 12);
  apx_tensor grad_lw = OWNED(APX_DTYPE_F16);
  vt_set(&c, "grad_out", &grad_out);
  vt_set(&c, "grad_boundary_log_weight", &grad_lw);
  vt_expect_valid(&c);
  apx_tensor sg, *g = view_of(&c, "grad_out", &sg);
  g->dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "grad_out dtype [i32] must be f32, f16 or bf16");
  restore(&c, "grad_out");
  apx_tensor sb, *gb = view_of(&c, "grad_bias", &sb);
  gb->dtype = APX_DTYPE_I64;
  vt_expect_invalid(&c, "grad_bias dtype [i64] must be f32, f16 or bf16");
  restore(&c, "grad_bias");
  apx_tensor sp, *gp = view_of(&c, "grad_boundary", &sp);
  gp->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "grad_boundary dtype [f32] must equal boundary dtype [bf16]");
  restore(&c, "grad_boundary");
  vt_set(&c, "grad_uncertainty", vt_tensor(&c, "uncertainty"));
  vt_expect_invalid(&c, "grad_uncertainty", "uncertainty");
  tu_free(&grad_out);
  tu_free(&grad_lw);
  vt_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_backward");
  TCase *tc = tcase_create("rules");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_add_test(tc, test_fuse_backward_shapes);
  tcase_add_test(tc, test_fuse_backward_dtypes_and_overlap);
  tcase_add_test(tc, test_alpha_backward_shapes);
  tcase_add_test(tc, test_alpha_backward_dtypes);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
