/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the tile ops: tilepack, tileunpack and fused_pack_op_unpack (docs/ops.md,
 * each op's section), with the reference's invalid-input cases.
 * Every rejection is checked through the op (cpu backend and default
 * dispatch) and apx_explain, with the outputs left poisoned
 * (test_validate_common.c). */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_validate_common.h"



static void set_ints(const apx_tensor *t, const int64_t *values, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == APX_DTYPE_I64)
      ((int64_t *)t->data)[i] = values[i];
    else
      ((int32_t *)t->data)[i] = (int32_t)values[i];
  }
}

static const apx_op_id pack_like_ops[2] = {APX_OP_TILEPACK, APX_OP_FUSED_PACK_OP_UNPACK};

static int64_t *tile_of(vt_case *c) {
  return c->op == APX_OP_TILEPACK ? &c->args.tilepack.tile : &c->args.fused.tile;
}

/* ---- tilepack and fused share 2.A items 1-8 ---- */

/* 2.A item 1 */
START_TEST(test_pack_features_not_4d) {
  for (int o = 0; o < 2; o++) {
    vt_case c;
    vt_make(&c, pack_like_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor features = *vt_tensor(&c, "features");
    features.ndim = 3;
    vt_set(&c, "features", &features);
    vt_expect_invalid(&c, fmt("%s: features must be [B,C,H,W], got ndim [3]", apx_op_name(c.op)));
    features.ndim = 5;
    features.shape[4] = 1;
    vt_expect_invalid(&c, "features must be [B,C,H,W], got ndim [5]");
    vt_free(&c);
  }
}
END_TEST

/* 2.A item 2 */
START_TEST(test_pack_idx_not_2d) {
  for (int o = 0; o < 2; o++) {
    vt_case c;
    vt_make(&c, pack_like_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor idx = *vt_tensor(&c, "idx");
    idx.ndim = 1;
    idx.shape[0] = 6;
    vt_set(&c, "idx", &idx);
    vt_expect_invalid(&c, "idx must be [B,K], got ndim [1]");
    idx.ndim = 3;
    idx.shape[0] = 2;
    idx.shape[1] = 3;
    idx.shape[2] = 1;
    vt_expect_invalid(&c, "idx must be [B,K], got ndim [3]");
    vt_free(&c);
  }
}
END_TEST

/* 2.A item 3 */
START_TEST(test_pack_batch_mismatch) {
  for (int o = 0; o < 2; o++) {
    vt_case c;
    vt_make(&c, pack_like_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor idx = *vt_tensor(&c, "idx");
    idx.shape[0] = 1;
    vt_set(&c, "idx", &idx);
    vt_expect_invalid(&c, "idx.shape[0] = [1]", "features.shape[0] = [2]", "batch");
    vt_free(&c);
  }
}
END_TEST

/* docs/ops.md, tilepack: t > 0 and H, W divisible by t */
START_TEST(test_pack_tile_grid) {
  for (int o = 0; o < 2; o++) {
    vt_case c;
    vt_make(&c, pack_like_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    *tile_of(&c) = 0;
    vt_expect_invalid(&c, "tile = [0] must be > 0");
    *tile_of(&c) = -4;
    vt_expect_invalid(&c, "tile = [-4] must be > 0");
    *tile_of(&c) = 3; /* 8 % 3 */
    vt_expect_invalid(&c, "features H, W = [8, 12]", "not divisible by tile [3]");
    *tile_of(&c) = 8; /* 8 ok, 12 % 8 */
    vt_expect_invalid(&c, "features H, W = [8, 12]", "not divisible by tile [8]");
    vt_free(&c);
  }
}
END_TEST

/* docs/ops.md, tilepack: float features, i32 or i64 ids */
START_TEST(test_pack_dtypes) {
  for (int o = 0; o < 2; o++) {
    vt_case c;
    vt_make(&c, pack_like_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor features = *vt_tensor(&c, "features");
    features.dtype = APX_DTYPE_I32;
    vt_set(&c, "features", &features);
    vt_expect_invalid(&c, "features dtype [i32] must be f32, f16 or bf16");
    features.dtype = APX_DTYPE_I64;
    vt_expect_invalid(&c, "features dtype [i64]");
    vt_set(&c, "features", &c.t[vt_slot(&c, "features")]);
    apx_tensor idx = *vt_tensor(&c, "idx");
    idx.dtype = APX_DTYPE_F32;
    vt_set(&c, "idx", &idx);
    vt_expect_invalid(&c, "idx dtype [f32] must be i32 or i64");
    idx.dtype = APX_DTYPE_BF16;
    vt_expect_invalid(&c, "idx dtype [bf16]");
    vt_free(&c);
  }
}
END_TEST

/* 2.A item 8: every batch, every position, both index dtypes. */
START_TEST(test_pack_idx_out_of_range) {
  const apx_dtype idts[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  for (int o = 0; o < 2; o++)
    for (int d = 0; d < 2; d++) {
      vt_case c;
      vt_make(&c, pack_like_ops[o], APX_DTYPE_F16, idts[d]);
      apx_tensor *idx = vt_tensor(&c, "idx");
      const int64_t bad[4] = {6, -1, 300, 1000000};
      for (int64_t pos = 0; pos < 6; pos++)
        for (int b = 0; b < 4; b++) {
          apx_tensor saved = tu_clone(idx);
          tu_set(idx, pos, (double)bad[b]);
          vt_expect_invalid(&c,
                            fmt("%s: idx[%lld][%lld] = [%lld] is outside [0, 5]", apx_op_name(c.op),
                                (long long)(pos / 3), (long long)(pos % 3), (long long)bad[b]));
          memcpy(idx->data, saved.data, tu_bytes(idx));
          tu_free(&saved);
        }
      if (idts[d] == APX_DTYPE_I64) {
        ((int64_t *)idx->data)[5] = INT64_MIN;
        vt_expect_invalid(&c, "idx[1][2] = [-9223372036854775808]");
      }
      vt_free(&c);
    }
}
END_TEST

/* The brief's exact example: a 16x16 grid, idx[0][3] = 300. */
START_TEST(test_pack_message_example) {
  vt_case c;
  vt_make(&c, APX_OP_TILEPACK, APX_DTYPE_F32, APX_DTYPE_I32);
  apx_tensor features = OWNED(APX_DTYPE_F32, 1, 1, 64, 64);
  apx_tensor idx = OWNED(APX_DTYPE_I32, 1, 4);
  apx_tensor out = OWNED(APX_DTYPE_F32, 1, 4, 1, 4, 4);
  set_ints(&idx, (int64_t[]){0, 1, 255, 300}, 4);
  vt_set(&c, "features", &features);
  vt_set(&c, "idx", &idx);
  vt_set(&c, "out", &out);
  vt_expect_invalid(&c, "tilepack: idx[0][3] = [300] is outside [0, 255]");
  ck_assert(tu_is_poisoned(&out));
  set_ints(&idx, (int64_t[]){0, 1, 255, 254}, 4);
  vt_expect_valid(&c);
  tu_free(&features);
  tu_free(&idx);
  tu_free(&out);
  vt_free(&c);
}
END_TEST

START_TEST(test_tilepack_out_shape_and_dtype) {
  vt_case c;
  vt_make(&c, APX_OP_TILEPACK, APX_DTYPE_BF16, APX_DTYPE_I64);
  apx_tensor out = *vt_tensor(&c, "out");
  vt_set(&c, "out", &out);
  for (int d = 0; d < 5; d++) {
    out.shape[d] += 1;
    vt_expect_invalid(&c, "out has shape", "expected [2,3,3,4,4]", "[B,K,C,t,t]");
    out.shape[d] -= 1;
  }
  out.ndim = 4;
  vt_expect_invalid(&c, "out has shape [2,3,3,4]", "expected [2,3,3,4,4]");
  out.ndim = 5;
  out.dtype = APX_DTYPE_F16;
  vt_expect_invalid(&c, "out dtype [f16] must equal features dtype [bf16]");
  vt_free(&c);
}
END_TEST

/* Section 3 rows K = 0, B = 0: legal, and B = 0 skips the range check. */
START_TEST(test_pack_empty_is_valid) {
  for (int o = 0; o < 2; o++) {
    vt_case c;
    vt_make(&c, pack_like_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    int packed_out = c.op == APX_OP_TILEPACK;
    /* K = 0 */
    apx_tensor idx = OWNED(APX_DTYPE_I64, 2, 0);
    apx_tensor out_k0 =
        packed_out ? OWNED(APX_DTYPE_F32, 2, 0, 3, 4, 4) : OWNED(APX_DTYPE_F32, 2, 3, 8, 12);
    vt_set(&c, "idx", &idx);
    vt_set(&c, "out", &out_k0);
    vt_expect_valid(&c);
    /* B = 0 */
    apx_tensor features = OWNED(APX_DTYPE_F32, 0, 3, 8, 12);
    apx_tensor idx_b0 = OWNED(APX_DTYPE_I64, 0, 3);
    apx_tensor out_b0 =
        packed_out ? OWNED(APX_DTYPE_F32, 0, 3, 3, 4, 4) : OWNED(APX_DTYPE_F32, 0, 3, 8, 12);
    vt_set(&c, "features", &features);
    vt_set(&c, "idx", &idx_b0);
    vt_set(&c, "out", &out_b0);
    vt_expect_valid(&c);
    /* B = 0 still checks shapes */
    out_b0.shape[1] = 4;
    vt_expect_invalid(&c, "out has shape");
    tu_free(&idx);
    tu_free(&out_k0);
    tu_free(&features);
    tu_free(&idx_b0);
    tu_free(&out_b0);
    vt_free(&c);
  }
}
END_TEST

/* An empty grid (H = 0) has no valid id. */
START_TEST(test_pack_empty_grid) {
  vt_case c;
  vt_make(&c, APX_OP_TILEPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor features = OWNED(APX_DTYPE_F32, 2, 3, 0, 12);
  vt_set(&c, "features", &features);
  vt_expect_invalid(&c, "idx[0][0] = [", "is outside [0, -1]");
  tu_free(&features);
  vt_free(&c);
}
END_TEST

/* ---- fused_pack_op_unpack (docs/ops.md, fused_pack_op_unpack) ---- */

START_TEST(test_fused_require_unique) {
  vt_case c;
  vt_make(&c, APX_OP_FUSED_PACK_OP_UNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor features = OWNED(APX_DTYPE_F32, 2, 3, 8, 16); /* 2 x 4 tiles */
  apx_tensor idx = OWNED(APX_DTYPE_I64, 2, 6);
  apx_tensor out = OWNED(APX_DTYPE_F32, 2, 3, 8, 16);
  vt_set(&c, "features", &features);
  vt_set(&c, "idx", &idx);
  vt_set(&c, "out", &out);
  set_ints(&idx, (int64_t[]){0, 1, 2, 3, 4, 5, 0, 1, 7, 3, 4, 7}, 12);
  vt_expect_invalid(&c, "fused_pack_op_unpack: idx[1] repeats tile id [7] at k=[2] "
                        "and k=[5] (require_unique)");
  ck_assert(tu_is_poisoned(&out));
  /* the first repeat in reading order is reported */
  set_ints(&idx, (int64_t[]){3, 5, 5, 3, 0, 1, 0, 1, 2, 3, 4, 5}, 12);
  vt_expect_invalid(&c, "idx[0] repeats tile id [5] at k=[1] and k=[2]");
  set_ints(&idx, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 6, 6, 6, 6, 6}, 12);
  vt_expect_invalid(&c, "idx[1] repeats tile id [6] at k=[0] and k=[1]");
  /* the range check comes first (2.A items 1-8, then uniqueness) */
  set_ints(&idx, (int64_t[]){2, 2, 2, 3, 4, 5, 0, 1, 8, 3, 4, 5}, 12);
  vt_expect_invalid(&c, "idx[1][2] = [8] is outside [0, 7]");
  /* without require_unique duplicates are legal */
  c.args.fused.require_unique = 0;
  set_ints(&idx, (int64_t[]){0, 1, 2, 3, 4, 5, 0, 1, 7, 3, 4, 7}, 12);
  vt_expect_valid(&c);
  /* unique rows are fine with it; the same id in two rows too */
  c.args.fused.require_unique = 1;
  set_ints(&idx, (int64_t[]){7, 6, 5, 4, 3, 2, 7, 6, 5, 4, 3, 2}, 12);
  vt_expect_valid(&c);
  tu_free(&features);
  tu_free(&idx);
  tu_free(&out);
  vt_free(&c);
}
END_TEST

/* Uniqueness over a long row stays fast (no O(K^2)): a permutation of
 * 2^18 ids, then the same with one repeat at the end. */
START_TEST(test_fused_unique_long_row) {
  const int64_t side = 512, count = 1 << 18;
  vt_case c;
  vt_make(&c, APX_OP_FUSED_PACK_OP_UNPACK, APX_DTYPE_F32, APX_DTYPE_I32);
  apx_tensor features = OWNED(APX_DTYPE_F32, 1, 1, side, side);
  apx_tensor idx = OWNED(APX_DTYPE_I32, 1, count);
  apx_tensor out = OWNED(APX_DTYPE_F32, 1, 1, side, side);
  c.args.fused.tile = 1;
  int32_t *ids = idx.data;
  for (int64_t i = 0; i < count; i++)
    ids[i] = (int32_t)((i * 40503) % count);
  vt_set(&c, "features", &features);
  vt_set(&c, "idx", &idx);
  vt_set(&c, "out", &out);
  int32_t last = ids[count - 1];
  ids[count - 1] = ids[7];
  vt_expect_invalid(
      &c, fmt("idx[0] repeats tile id [%d] at k=[7] and k=[%lld]", ids[7], (long long)(count - 1)));
  ids[count - 1] = last;
  vt_expect_valid(&c);
  tu_free(&features);
  tu_free(&idx);
  tu_free(&out);
  vt_free(&c);
}
END_TEST

START_TEST(test_fused_out_and_scalars) {
  vt_case c;
  vt_make(&c, APX_OP_FUSED_PACK_OP_UNPACK, APX_DTYPE_F16, APX_DTYPE_I32);
  apx_tensor out = *vt_tensor(&c, "out");
  vt_set(&c, "out", &out);
  out.shape[2] = 9;
  vt_expect_invalid(&c, "out has shape [2,3,9,12], expected [2,3,8,12]");
  out.shape[2] = 8;
  out.dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "out dtype [f32] must equal features dtype [f16]");
  vt_set(&c, "out", &c.t[vt_slot(&c, "out")]);
  /* The reference never rejects its scalars (docs/ops.md, fused_pack_op_unpack): a NaN or
   * infinite scale is computed with, not refused. */
  c.args.fused.value_scale = NAN;
  c.args.fused.gate_bias = INFINITY;
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* ---- tileunpack (docs/ops.md, tileunpack) ---- */

/* 4.A item 1 */
START_TEST(test_unpack_shapes) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor base = *vt_tensor(&c, "base"), packed = *vt_tensor(&c, "packed");
  vt_set(&c, "base", &base);
  vt_set(&c, "packed", &packed);
  base.ndim = 3;
  vt_expect_invalid(&c, "tileunpack: base must be [B,C,H,W], got ndim [3]");
  base.ndim = 4;
  packed.ndim = 4;
  vt_expect_invalid(&c, "packed must be [B,K,C,t,t], got ndim [4]");
  packed.ndim = 5;
  packed.shape[0] = 1;
  vt_expect_invalid(&c, "packed.shape[0] = [1] does not match base.shape[0] = [2]");
  packed.shape[0] = 2;
  packed.shape[2] = 4;
  vt_expect_invalid(&c, "packed.shape[2] = [4] does not match base.shape[1] = [3]");
  packed.shape[2] = 3;
  packed.shape[4] = 2;
  vt_expect_invalid(&c, "packed tiles must be square", "[4, 2]");
  packed.shape[3] = packed.shape[4] = 0;
  vt_expect_invalid(&c, "tile size inferred from packed.shape[3] = [0] must be > 0");
  packed.shape[3] = packed.shape[4] = 8; /* 12 % 8 */
  vt_expect_invalid(&c, "base H, W = [8, 12] are not divisible by tile [8]");
  packed.shape[3] = packed.shape[4] = 3; /* 8 % 3 */
  vt_expect_invalid(&c, "not divisible by tile [3]");
  vt_free(&c);
}
END_TEST

START_TEST(test_unpack_dtypes) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F16, APX_DTYPE_I32);
  apx_tensor base = *vt_tensor(&c, "base"), packed = *vt_tensor(&c, "packed");
  vt_set(&c, "base", &base);
  vt_set(&c, "packed", &packed);
  base.dtype = APX_DTYPE_I32;
  packed.dtype = APX_DTYPE_I32;
  vt_expect_invalid(&c, "base dtype [i32] must be f32, f16 or bf16");
  base.dtype = APX_DTYPE_F16;
  packed.dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "packed dtype [bf16] must equal base dtype [f16]");
  packed.dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "packed dtype [f32] must equal base dtype [f16]");
  vt_free(&c);
}
END_TEST

/* 4.A item 2 */
START_TEST(test_unpack_mode_and_alpha) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tileunpack_args *a = &c.args.tileunpack;
  a->mode = (apx_overlap_mode)2;
  vt_expect_invalid(&c, "tileunpack: mode = [2] is not");
  a->mode = (apx_overlap_mode)-1;
  vt_expect_invalid(&c, "mode = [-1]");
  a->mode = APX_OVERLAP_BLEND;
  a->blend_alpha = 1.5;
  vt_expect_invalid(&c, "tileunpack: blend_alpha = [1.5] is outside [0, 1]");
  a->blend_alpha = -0.25;
  vt_expect_invalid(&c, "blend_alpha = [-0.25] is outside [0, 1]");
  a->blend_alpha = NAN;
  vt_expect_invalid(&c, "blend_alpha = [", "nan]");
  a->blend_alpha = INFINITY;
  vt_expect_invalid(&c, "blend_alpha = [inf]");
  /* checked in override mode too, as the reference does */
  a->mode = APX_OVERLAP_OVERRIDE;
  a->blend_alpha = 1.0000001;
  vt_expect_invalid(&c, "blend_alpha = [1.0000001");
  a->blend_alpha = 0.0;
  vt_expect_valid(&c);
  a->mode = APX_OVERLAP_BLEND;
  a->blend_alpha = 1.0;
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* 4.A item 3: exactly one placement source, each well-formed. */
START_TEST(test_unpack_placement_source) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tileunpack_args *a = &c.args.tileunpack;
  apx_tensor origins = OWNED(APX_DTYPE_I64, 2, 3, 2);
  set_ints(&origins, (int64_t[]){0, 0, 4, 8, 1, 3, 2, 5, 4, 0, 0, 7}, 12);
  a->origins = &origins;
  vt_expect_invalid(&c, "exactly one of idx and origins", "[both]");
  vt_set(&c, "idx", NULL);
  vt_expect_valid(&c); /* origins need not be multiples of t */
  a->origins = NULL;
  vt_expect_invalid(&c, "exactly one of idx and origins", "[neither]");
  a->origins = &origins;

  apx_tensor bad = origins;
  a->origins = &bad;
  bad.ndim = 2;
  vt_expect_invalid(&c, "origins must be [B,K,2], got ndim [2]");
  bad.ndim = 3;
  bad.shape[2] = 3;
  vt_expect_invalid(&c, "origins has shape [2,3,3], expected [2,3,2]");
  bad.shape[2] = 2;
  bad.shape[1] = 4;
  vt_expect_invalid(&c, "origins has shape [2,4,2], expected [2,3,2]");
  bad.shape[1] = 3;
  bad.dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "origins dtype [f32] must be i32 or i64");
  a->origins = NULL;

  vt_set(&c, "idx", &c.t[vt_slot(&c, "idx")]);
  apx_tensor idx = *vt_tensor(&c, "idx");
  vt_set(&c, "idx", &idx);
  idx.shape[1] = 2;
  vt_expect_invalid(&c, "idx has shape [2,2], expected [2,3]");
  idx.shape[1] = 3;
  idx.ndim = 1;
  vt_expect_invalid(&c, "idx must be [B,K], got ndim [1]");
  idx.ndim = 2;
  idx.dtype = APX_DTYPE_F16;
  vt_expect_invalid(&c, "idx dtype [f16] must be i32 or i64");
  idx.dtype = APX_DTYPE_I64;
  tu_set(&idx, 4, 6);
  vt_expect_invalid(&c, "tileunpack: idx[1][1] = [6] is outside [0, 5]");
  tu_set(&idx, 4, -3);
  vt_expect_invalid(&c, "idx[1][1] = [-3] is outside [0, 5]");
  tu_free(&origins);
  vt_free(&c);
}
END_TEST

/* docs/ops.md, tileunpack (placement): origins in bounds, y0 >= 0, x0 >= 0,
 * y0 + t <= H, x0 + t <= W; i32 and i64. */
START_TEST(test_unpack_origins_bounds) {
  const apx_dtype idts[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  for (int d = 0; d < 2; d++) {
    vt_case c;
    vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_BF16, idts[d]);
    vt_set(&c, "idx", NULL);
    apx_tensor origins = OWNED(idts[d], 2, 3, 2);
    c.args.tileunpack.origins = &origins;
    const int64_t good[12] = {0, 0, 4, 8, 1, 3, 2, 5, 4, 0, 0, 7};
    set_ints(&origins, good, 12);
    vt_expect_valid(&c);
    /* (position, y0, x0) */
    const int64_t bad[5][3] = {{0, -1, 0}, {1, 0, -1}, {2, 5, 0}, {5, 0, 9}, {4, 100, 100}};
    for (int b = 0; b < 5; b++) {
      int64_t values[12];
      memcpy(values, good, sizeof values);
      values[2 * bad[b][0]] = bad[b][1];
      values[2 * bad[b][0] + 1] = bad[b][2];
      set_ints(&origins, values, 12);
      vt_expect_invalid(&c,
                        fmt("tileunpack: origins[%lld][%lld] = [%lld, %lld] is out of bounds",
                            (long long)(bad[b][0] / 3), (long long)(bad[b][0] % 3),
                            (long long)bad[b][1], (long long)bad[b][2]),
                        "0 <= y0 <= 4", "0 <= x0 <= 8");
    }
    set_ints(&origins, good, 12);
    tu_free(&origins);
    vt_free(&c);
  }
}
END_TEST

/* 4.A item 4: levels. */
START_TEST(test_unpack_levels) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tileunpack_args *a = &c.args.tileunpack;
  vt_set(&c, "levels", NULL);
  a->assume_priority_sorted = 0;
  vt_expect_invalid(&c, "tileunpack: levels must be provided when "
                        "assume_priority_sorted = [0]");
  a->assume_priority_sorted = 1;
  vt_expect_valid(&c);
  a->assume_priority_sorted = 0;
  vt_set(&c, "levels", &c.t[vt_slot(&c, "levels")]);
  vt_expect_valid(&c);

  apx_tensor levels = *vt_tensor(&c, "levels");
  vt_set(&c, "levels", &levels);
  levels.shape[1] = 2;
  vt_expect_invalid(&c, "levels has shape [2,2], expected [2,3]");
  levels.shape[1] = 3;
  levels.ndim = 3;
  levels.shape[2] = 1;
  vt_expect_invalid(&c, "levels has shape [2,3,1], expected [2,3]");
  levels.ndim = 2;
  levels.dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "levels dtype [f32] must be i32 or i64");
  vt_free(&c);
}
END_TEST

/* Reference key overflow rule, computed here independently:
 * order_bits = max(1, bit_length(K-1)), lmin over the whole tensor,
 * key = ((level - lmin) << order_bits) + k must be <= 2^31 - 1. */
static int keys_fit(const int64_t *levels, int64_t b_count, int64_t k_count) {
  int order_bits = 1;
  while (k_count - 1 >= ((int64_t)1 << order_bits))
    order_bits++;
  int64_t lmin = INT64_MAX;
  for (int64_t i = 0; i < b_count * k_count; i++)
    if (levels[i] < lmin)
      lmin = levels[i];
  for (int64_t i = 0; i < b_count * k_count; i++) {
    long double key =
        ((long double)levels[i] - (long double)lmin) * (long double)((int64_t)1 << order_bits) +
        (long double)(i % k_count);
    if (key > 2147483647.0L)
      return 0;
  }
  return 1;
}

START_TEST(test_unpack_priority_key_overflow) {
  /* K = 3 -> order_bits 2: the largest span at k = 2 is (2^31-1-2) >> 2 */
  const int64_t span_max = (INT32_MAX - 2) >> 2; /* 536870911 */
  struct {
    int64_t levels[6];
    const char *message; /* NULL: valid */
  } cases[] = {
      {{0, 0, span_max, 0, 0, 0}, NULL},
      {{0, 0, span_max + 1, 0, 0, 0}, "levels[0][2] = [536870912]"},
      {{0, span_max + 1, 0, 0, 0, 0}, "levels[0][1] = [536870912]"},
      {{-5, 0, 0, 0, 0, span_max - 5}, NULL},
      {{-5, 0, 0, 0, 0, span_max - 4}, "levels[1][2] = [536870907]"},
      {{INT64_MIN, 0, 0, 0, 0, INT64_MAX}, "levels[0][1] = [0]"},
      {{7, 7, 7, 7, 7, 7}, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    vt_case c;
    vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
    set_ints(vt_tensor(&c, "levels"), cases[i].levels, 6);
    ck_assert_int_eq(keys_fit(cases[i].levels, 2, 3), cases[i].message == NULL);
    if (cases[i].message)
      vt_expect_invalid(&c, cases[i].message, "overflow int32");
    else
      vt_expect_valid(&c);
    vt_free(&c);
  }
  /* K = 1 -> order_bits 1 (not 0): span 2^30 - 1 fits, 2^30 does not. */
  for (int64_t span = (1 << 30) - 1; span <= (1 << 30); span++) {
    vt_case c;
    vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I32);
    apx_tensor packed = OWNED(APX_DTYPE_F32, 2, 1, 3, 4, 4);
    apx_tensor idx = OWNED(APX_DTYPE_I32, 2, 1);
    apx_tensor levels = OWNED(APX_DTYPE_I32, 2, 1);
    int64_t lv[2] = {0, span};
    set_ints(&idx, (int64_t[]){1, 2}, 2);
    set_ints(&levels, lv, 2);
    vt_set(&c, "packed", &packed);
    vt_set(&c, "idx", &idx);
    vt_set(&c, "levels", &levels);
    ck_assert_int_eq(keys_fit(lv, 2, 1), span < (1 << 30));
    if (span < (1 << 30))
      vt_expect_valid(&c);
    else
      vt_expect_invalid(&c, "levels[1][0] = [1073741824]", "<< 1");
    tu_free(&packed);
    tu_free(&idx);
    tu_free(&levels);
    vt_free(&c);
  }
  /* Random level ranges against the independent rule, K = 5 (bits 3). */
  tu_rng rng = {tu_seed() ^ 0x51u};
  for (int trial = 0; trial < 40; trial++) {
    vt_case c;
    vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor packed = OWNED(APX_DTYPE_F32, 2, 5, 3, 4, 4);
    apx_tensor idx = OWNED(APX_DTYPE_I64, 2, 5);
    apx_tensor levels = OWNED(APX_DTYPE_I64, 2, 5);
    tu_fill_int(&rng, &idx, 0, 5);
    int64_t lo = tu_int(&rng, -(1 << 28), 1 << 28);
    int64_t width = ((int64_t)1 << 28) - 8 + tu_int(&rng, 0, 16);
    tu_fill_int(&rng, &levels, lo, lo + width);
    vt_set(&c, "packed", &packed);
    vt_set(&c, "idx", &idx);
    vt_set(&c, "levels", &levels);
    if (keys_fit(levels.data, 2, 5))
      vt_expect_valid(&c);
    else
      vt_expect_invalid(&c, "overflow int32");
    tu_free(&packed);
    tu_free(&idx);
    tu_free(&levels);
    vt_free(&c);
  }
}
END_TEST

START_TEST(test_unpack_out) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor out = *vt_tensor(&c, "out");
  vt_set(&c, "out", &out);
  out.shape[1] = 4;
  vt_expect_invalid(&c, "out has shape [2,4,8,12], expected [2,3,8,12]");
  out.shape[1] = 3;
  out.ndim = 5;
  out.shape[4] = 1;
  vt_expect_invalid(&c, "out has shape [2,3,8,12,1], expected [2,3,8,12]");
  out.ndim = 4;
  out.dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "out dtype [bf16] must equal base dtype [f32]");
  /* out aliasing base exactly is the in-place form */
  vt_set(&c, "out", vt_tensor(&c, "base"));
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* Section 3 rows K = 0 (copy of base) and B = 0. */
START_TEST(test_unpack_empty_is_valid) {
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F16, APX_DTYPE_I32);
  apx_tensor packed = OWNED(APX_DTYPE_F16, 2, 0, 3, 4, 4);
  apx_tensor idx = OWNED(APX_DTYPE_I32, 2, 0);
  apx_tensor levels = OWNED(APX_DTYPE_I32, 2, 0);
  vt_set(&c, "packed", &packed);
  vt_set(&c, "idx", &idx);
  vt_set(&c, "levels", &levels);
  vt_expect_valid(&c);
  apx_tensor base = OWNED(APX_DTYPE_F16, 0, 3, 8, 12);
  apx_tensor packed_b0 = OWNED(APX_DTYPE_F16, 0, 3, 3, 4, 4);
  apx_tensor idx_b0 = OWNED(APX_DTYPE_I32, 0, 3);
  apx_tensor out = OWNED(APX_DTYPE_F16, 0, 3, 8, 12);
  vt_set(&c, "base", &base);
  vt_set(&c, "packed", &packed_b0);
  vt_set(&c, "idx", &idx_b0);
  vt_set(&c, "levels", NULL);
  vt_set(&c, "out", &out);
  vt_expect_valid(&c);
  tu_free(&packed);
  tu_free(&idx);
  tu_free(&levels);
  tu_free(&base);
  tu_free(&packed_b0);
  tu_free(&idx_b0);
  tu_free(&out);
  vt_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_tile");
  TCase *tc = tcase_create("tile");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_pack_features_not_4d);
  tcase_add_test(tc, test_pack_idx_not_2d);
  tcase_add_test(tc, test_pack_batch_mismatch);
  tcase_add_test(tc, test_pack_tile_grid);
  tcase_add_test(tc, test_pack_dtypes);
  tcase_add_test(tc, test_pack_idx_out_of_range);
  tcase_add_test(tc, test_pack_message_example);
  tcase_add_test(tc, test_tilepack_out_shape_and_dtype);
  tcase_add_test(tc, test_pack_empty_is_valid);
  tcase_add_test(tc, test_pack_empty_grid);
  tcase_add_test(tc, test_fused_require_unique);
  tcase_add_test(tc, test_fused_unique_long_row);
  tcase_add_test(tc, test_fused_out_and_scalars);
  tcase_add_test(tc, test_unpack_shapes);
  tcase_add_test(tc, test_unpack_dtypes);
  tcase_add_test(tc, test_unpack_mode_and_alpha);
  tcase_add_test(tc, test_unpack_placement_source);
  tcase_add_test(tc, test_unpack_origins_bounds);
  tcase_add_test(tc, test_unpack_levels);
  tcase_add_test(tc, test_unpack_priority_key_overflow);
  tcase_add_test(tc, test_unpack_out);
  tcase_add_test(tc, test_unpack_empty_is_valid);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
