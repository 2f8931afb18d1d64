/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the backward ops tilepack_backward, tileunpack_backward,
 * fused_pack_op_unpack_backward and index_select_backward (docs/ops.md, each
 * op's section): their own rules, and the forward's rules they share
 * (tileunpack's placement and priority, fused_pack_op_unpack's
 * require_unique). Every rejection is checked through the op (cpu backend
 * and default dispatch) and apx_explain, with the outputs left poisoned
 * (test_validate_common.c). */
#include <check.h>
#include <stdlib.h>

#include "test_validate_common.h"

static void set_ints(const apx_tensor *t, const int64_t *values, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == APX_DTYPE_I64)
      ((int64_t *)t->data)[i] = values[i];
    else
      ((int32_t *)t->data)[i] = (int32_t)values[i];
  }
}

START_TEST(test_tilepack_backward_shapes) {
  vt_case c;
  vt_make(&c, APX_OP_TILEPACK_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor g = *vt_tensor(&c, "grad_out");
  g.shape[4] = 2; /* tiles 4 x 2 */
  vt_set(&c, "grad_out", &g);
  vt_expect_invalid(&c, "tilepack_backward: grad_out tiles must be square",
                    "grad_out.shape[3], [4] = [4, 2]");
  vt_free(&c);

  vt_make(&c, APX_OP_TILEPACK_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor gf = OWNED(APX_DTYPE_F32, 2, 5, 8, 12); /* C 5, grad_out's 3 */
  vt_set(&c, "grad_features", &gf);
  vt_expect_invalid(&c, "grad_features.shape[1] = [5]", "channels C");
  tu_free(&gf);
  gf = OWNED(APX_DTYPE_F32, 2, 3, 8, 10); /* W 10: no multiple of t = 4 */
  vt_set(&c, "grad_features", &gf);
  vt_expect_invalid(&c, "grad_features H, W = [8, 10] are not divisible by tile [4]");
  tu_free(&gf);
  gf = OWNED(APX_DTYPE_F16, 2, 3, 8, 12);
  vt_set(&c, "grad_features", &gf);
  vt_expect_invalid(&c, "grad_features dtype [f16] must equal grad_out dtype [f32]");
  tu_free(&gf);
  vt_free(&c);
}
END_TEST

START_TEST(test_tilepack_backward_idx) {
  vt_case c;
  vt_make(&c, APX_OP_TILEPACK_BACKWARD, APX_DTYPE_BF16, APX_DTYPE_I32);
  apx_tensor idx = *vt_tensor(&c, "idx");
  idx.shape[1] = 2; /* K 2, grad_out's 3 */
  vt_set(&c, "idx", &idx);
  vt_expect_invalid(&c, "idx.shape[1] = [2]", "tiles K");
  vt_free(&c);

  vt_make(&c, APX_OP_TILEPACK_BACKWARD, APX_DTYPE_BF16, APX_DTYPE_I32);
  const int64_t ids[6] = {0, 5, 1, 2, 6, 3}; /* 6 tiles of 4 in [8,12]: 6 is out */
  set_ints(vt_tensor(&c, "idx"), ids, 6);
  vt_expect_invalid(&c, "tilepack_backward: idx[1][1] = [6] is outside [0, 5]");
  vt_free(&c);
}
END_TEST

START_TEST(test_tileunpack_backward_rules) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  c.args.tileunpack_backward.tile = 5;
  vt_expect_invalid(&c, "tileunpack_backward: grad_out H, W = [8, 12] are not divisible by tile [5]");
  c.args.tileunpack_backward.tile = 4;
  c.args.tileunpack_backward.mode = (apx_overlap_mode)2;
  vt_expect_invalid(&c, "mode = [2] is not APX_OVERLAP_OVERRIDE (0) or APX_OVERLAP_BLEND (1)");
  c.args.tileunpack_backward.mode = APX_OVERLAP_BLEND;
  c.args.tileunpack_backward.blend_alpha = 1.5;
  vt_expect_invalid(&c, "blend_alpha = [1.5] is outside [0, 1]");
  c.args.tileunpack_backward.blend_alpha = 0.25;
  vt_expect_valid(&c);
  apx_tensor origins = OWNED(APX_DTYPE_I64, 2, 3, 2);
  const int64_t at[12] = {0, 0, 4, 8, 1, 3, 2, 2, 0, 7, 4, 9}; /* [1][2] = (4, 9): 9 > 12-4 */
  set_ints(&origins, at, 12);
  c.args.tileunpack_backward.origins = &origins; /* no slot of the case: set directly */
  vt_expect_invalid(&c, "exactly one of idx and origins must be given, got [both]");
  vt_set(&c, "idx", NULL);
  vt_expect_invalid(&c, "origins[1][2] = [4, 9] is out of bounds");
  ((int64_t *)origins.data)[11] = 8;
  vt_expect_valid(&c);
  vt_set(&c, "levels", NULL);
  c.args.tileunpack_backward.assume_priority_sorted = 0;
  vt_expect_invalid(&c, "levels must be provided when assume_priority_sorted = [0]");
  tu_free(&origins);
  vt_free(&c);

  vt_make(&c, APX_OP_TILEUNPACK_BACKWARD, APX_DTYPE_F16, APX_DTYPE_I32);
  const int64_t levels[6] = {0, 1, 1 << 29, 0, 0, 0}; /* key (2^29 << 2) + 2 overflows */
  set_ints(vt_tensor(&c, "levels"), levels, 6);
  vt_expect_invalid(&c, "levels[0][2] = [536870912] makes priority key");
  vt_free(&c);

  vt_make(&c, APX_OP_TILEUNPACK_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor gp = OWNED(APX_DTYPE_F32, 2, 3, 3, 2, 2); /* t 2, the tile option's 4 */
  vt_set(&c, "grad_packed", &gp);
  vt_expect_invalid(&c, "grad_packed has shape [2,3,3,2,2], expected [2,3,3,4,4]");
  tu_free(&gp);
  vt_free(&c);
}
END_TEST

START_TEST(test_fused_backward_rules) {
  vt_case c;
  vt_make(&c, APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor x = OWNED(APX_DTYPE_F32, 2, 3, 8, 8);
  vt_set(&c, "features", &x);
  vt_expect_invalid(&c, "features has shape [2,3,8,8]", "the shape of grad_out");
  tu_free(&x);
  x = OWNED(APX_DTYPE_F16, 2, 3, 8, 12);
  vt_set(&c, "features", &x);
  vt_expect_invalid(&c, "features dtype [f16] must equal grad_out dtype [f32]");
  tu_free(&x);
  vt_free(&c);

  vt_make(&c, APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  const int64_t ids[6] = {0, 2, 0, 1, 3, 5};
  set_ints(vt_tensor(&c, "idx"), ids, 6);
  vt_expect_invalid(&c, "idx[0] repeats tile id [0] at k=[0] and k=[2] (require_unique)");
  c.args.fused_backward.require_unique = 0;
  vt_expect_valid(&c);
  apx_tensor gs = OWNED(APX_DTYPE_F32, 3);
  vt_set(&c, "grad_scalars", &gs);
  vt_expect_invalid(&c, "grad_scalars has shape [3], expected [4]");
  tu_free(&gs);
  gs = OWNED(APX_DTYPE_I32, 4);
  vt_set(&c, "grad_scalars", &gs);
  vt_expect_invalid(&c, "grad_scalars dtype [i32]");
  tu_free(&gs);
  /* grad_features may be grad_out exactly, not features */
  vt_set(&c, "grad_scalars", NULL);
  vt_set(&c, "grad_features", vt_tensor(&c, "features"));
  vt_expect_invalid(&c, "grad_features", "features");
  vt_free(&c);
}
END_TEST

START_TEST(test_index_select_backward_rules) {
  vt_case c;
  vt_make(&c, APX_OP_INDEX_SELECT_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor gs = OWNED(APX_DTYPE_F32, 5, 3);
  vt_set(&c, "grad_src", &gs);
  vt_expect_invalid(&c, "grad_src.shape[1] = [3]", "extent off dim");
  tu_free(&gs);
  vt_free(&c);

  /* along dim 1 (and -1): grad_out [5,7] is N = 7 at dim 1 of grad_src [5,4] */
  for (int from_end = 0; from_end < 2; from_end++) {
    vt_make(&c, APX_OP_INDEX_SELECT_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor g1 = vt_tensor_like(APX_DTYPE_F32, 2, (int64_t[]){5, 7}, 0, 0);
    apx_tensor gs1 = OWNED(APX_DTYPE_F32, 5, 4);
    vt_set(&c, "grad_out", &g1);
    vt_set(&c, "grad_src", &gs1);
    c.args.index_select_backward.dim = from_end ? -1 : 1;
    apx_tensor *idx1 = vt_tensor(&c, "index");
    for (int64_t pos = 0; pos < 7; pos++)
      tu_set(idx1, pos, (double)(pos % 4));
    vt_expect_valid(&c);
    tu_set(idx1, 3, 4);
    vt_expect_invalid(&c, "index_select_backward: index[3] = [4] is outside [0, 3]",
                      "grad_src.shape[1] = [4]");
    tu_set(idx1, 3, 3);
    apx_tensor gs3 = OWNED(APX_DTYPE_F32, 5, 4, 1);
    vt_set(&c, "grad_src", &gs3);
    vt_expect_invalid(&c, "grad_src has ndim [3] but grad_out has ndim [2]");
    c.args.index_select_backward.dim = 2;
    vt_expect_invalid(&c, "index_select_backward: dim = [2] is outside [-2, 1] for ndim [2]");
    tu_free(&gs3);
    tu_free(&gs1);
    tu_free(&g1);
    vt_free(&c);
  }

  vt_make(&c, APX_OP_INDEX_SELECT_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor index = *vt_tensor(&c, "index");
  index.shape[0] = 6;
  vt_set(&c, "index", &index);
  vt_expect_invalid(&c, "index.shape[0] = [6]", "N, the extent at dim");
  vt_free(&c);

  vt_make(&c, APX_OP_INDEX_SELECT_BACKWARD, APX_DTYPE_I32, APX_DTYPE_I32);
  const int64_t rows[7] = {0, 4, 5, 1, 0, 0, 2};
  set_ints(vt_tensor(&c, "index"), rows, 7);
  vt_expect_invalid(&c, "index_select_backward: index[2] = [5] is outside [0, 4]",
                    "grad_src.shape[0] = [5]");
  vt_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_tile_backward");
  TCase *tc = tcase_create("backward");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_tilepack_backward_shapes);
  tcase_add_test(tc, test_tilepack_backward_idx);
  tcase_add_test(tc, test_tileunpack_backward_rules);
  tcase_add_test(tc, test_fused_backward_rules);
  tcase_add_test(tc, test_index_select_backward_rules);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
