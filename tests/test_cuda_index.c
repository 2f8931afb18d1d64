/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's indexing ops against the cpu backend, through the
 * public API (docs/ops.md, gather, index_select, scatter_add,
 * gather_backward): every data dtype (floats and integers), both index
 * dtypes, 1-D to 3-D, negative dims, empty indices, duplicates, scatter_add
 * in place, every scatter path (direct, small, rows, general, columns).
 * gather and index_select match bit for bit; scatter_add and
 * gather_backward integers exactly, floats within twice the bound of
 * docs/ops.md, Rounding and parity, and run-to-run bit-identical. Skipped (exit 77, the reason on stdout) where
 * the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

/* ---- gather / index_select -------------------------------------------------- */

static void gather_case(apx_dtype dt, apx_dtype it, int ndim, const int64_t *src_shape,
                        const int64_t *index_shape, int dim) {
  char what[160];
  snprintf(what, sizeof what, "gather %s/%s ndim %d dim %d", apx_dtype_name(dt),
           apx_dtype_name(it), ndim, dim);
  int d = dim < 0 ? dim + ndim : dim;
  apx_tensor src = tu_host(dt, ndim, src_shape), index = tu_host(it, ndim, index_shape);
  apx_tensor want = tu_host(dt, ndim, index_shape);
  for (int call = 0; call < 2; call++) {
    fill_data(&src);
    tu_fill_int(&rng, &index, 0, src_shape[d] - 1);
    apx_gather_args a = APX_GATHER_ARGS_INIT;
    a.src = &src;
    a.dim = dim;
    a.index = &index;
    a.out = &want;
    cc_case c = {what, APX_OP_GATHER, &a, {&a.src, &a.index}, {&a.out}, -1, 0};
    apx_tensor got[CC_MAX_OUTPUTS];
    cc_run(&c, got);
    expect_exact(&got[0], &want, what);
    tu_free(&got[0]);
  }
  tu_free(&src);
  tu_free(&index);
  tu_free(&want);
}

START_TEST(test_gather) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      int64_t s1[1] = {17}, i1[1] = {40};
      gather_case(data_dtypes[d], index_dtypes[i], 1, s1, i1, 0);
      int64_t s2[2] = {9, 7}, i2[2] = {12, 5};
      gather_case(data_dtypes[d], index_dtypes[i], 2, s2, i2, 0);
      gather_case(data_dtypes[d], index_dtypes[i], 2, s2, (int64_t[]){4, 11}, 1);
      int64_t s3[3] = {4, 6, 5}, i3[3] = {3, 9, 5};
      gather_case(data_dtypes[d], index_dtypes[i], 3, s3, i3, 1);
      gather_case(data_dtypes[d], index_dtypes[i], 3, s3, (int64_t[]){4, 6, 8}, -1);
      gather_case(data_dtypes[d], index_dtypes[i], 3, s3, (int64_t[]){2, 0, 5}, 0); /* empty */
    }
}
END_TEST

static void index_select_case(apx_dtype dt, apx_dtype it, int64_t M, int64_t D, int64_t N) {
  char what[160];
  snprintf(what, sizeof what, "index_select %s/%s M%lld D%lld N%lld", apx_dtype_name(dt),
           apx_dtype_name(it), (long long)M, (long long)D, (long long)N);
  apx_tensor src = tu_host2(dt, M, D), index = tu_host1(it, N), want = tu_host2(dt, N, D);
  for (int call = 0; call < 2; call++) {
    fill_data(&src);
    tu_fill_int(&rng, &index, 0, M - 1);
    apx_index_select_args a = APX_INDEX_SELECT_ARGS_INIT;
    a.src = &src;
    a.index = &index;
    a.out = &want;
    cc_case c = {what, APX_OP_INDEX_SELECT, &a, {&a.src, &a.index}, {&a.out}, -1, 0};
    apx_tensor got[CC_MAX_OUTPUTS];
    cc_run(&c, got);
    expect_exact(&got[0], &want, what);
    tu_free(&got[0]);
  }
  tu_free(&src);
  tu_free(&index);
  tu_free(&want);
}

/* Along dim of an ndim src (docs/ops.md, index_select). */
static void index_select_nd_case(apx_dtype dt, apx_dtype it, int ndim, const int64_t *src_shape,
                                 int dim, int64_t N) {
  char what[160];
  snprintf(what, sizeof what, "index_select %s/%s ndim %d dim %d N%lld", apx_dtype_name(dt),
           apx_dtype_name(it), ndim, dim, (long long)N);
  const int d = dim < 0 ? dim + ndim : dim;
  int64_t out_shape[APX_MAX_DIMS];
  memcpy(out_shape, src_shape, (size_t)ndim * sizeof(int64_t));
  out_shape[d] = N;
  apx_tensor src = tu_host(dt, ndim, src_shape), index = tu_host1(it, N);
  apx_tensor want = tu_host(dt, ndim, out_shape);
  fill_data(&src);
  tu_fill_int(&rng, &index, 0, src_shape[d] - 1);
  apx_index_select_args a = APX_INDEX_SELECT_ARGS_INIT;
  a.src = &src;
  a.index = &index;
  a.out = &want;
  a.dim = dim;
  cc_case c = {what, APX_OP_INDEX_SELECT, &a, {&a.src, &a.index}, {&a.out}, -1, 0};
  apx_tensor got[CC_MAX_OUTPUTS];
  cc_run(&c, got);
  expect_exact(&got[0], &want, what);
  tu_free(&got[0]);
  tu_free(&src);
  tu_free(&index);
  tu_free(&want);
}

START_TEST(test_index_select) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      index_select_case(data_dtypes[d], index_dtypes[i], 13, 3, 21);
      index_select_case(data_dtypes[d], index_dtypes[i], 64, 256, 100);
      index_select_case(data_dtypes[d], index_dtypes[i], 5, 9, 0);
      const int64_t s3[3] = {4, 6, 5}, s4[4] = {3, 2, 7, 33}, s1[1] = {17};
      index_select_nd_case(data_dtypes[d], index_dtypes[i], 3, s3, 1, 11);
      index_select_nd_case(data_dtypes[d], index_dtypes[i], 3, s3, -1, 8);
      index_select_nd_case(data_dtypes[d], index_dtypes[i], 4, s4, 2, 9);
      index_select_nd_case(data_dtypes[d], index_dtypes[i], 4, s4, -1, 40);
      index_select_nd_case(data_dtypes[d], index_dtypes[i], 1, s1, 0, 30);
      index_select_nd_case(data_dtypes[d], index_dtypes[i], 3, s3, 2, 0);
    }
}
END_TEST

/* Copy ops move bits: gather and index_select with a quarter of the values
 * NaN payloads, +-0 and subnormals (bit_specials), bitwise against the cpu
 * backend (tilepack and tileunpack: test_cuda_tile). */
START_TEST(test_copy_ops_move_bits) {
  bit_specials = 1;
  for (int d = 0; d < 3; d++) {
    apx_dtype dt = float_dtypes[d];
    for (int i = 0; i < 2; i++) {
      int64_t s3[3] = {4, 6, 5}, i3[3] = {3, 9, 5};
      gather_case(dt, index_dtypes[i], 3, s3, i3, 1);
      index_select_case(dt, index_dtypes[i], 13, 3, 21);
      index_select_case(dt, index_dtypes[i], 64, 256, 100);
    }
  }
  bit_specials = 0;
}
END_TEST

/* ---- scatter_add / gather_backward ----------------------------------------- */

/* Runs scatter_add (self != NULL) or gather_backward on both backends and
 * compares: integers exactly; floats within the bound with the magnitude
 * taken from the cpu backend's scatter_add of absolute values in f32. The
 * cuda result must also be run-to-run bit-identical (cc_case.repeat). */
static void scatter_case(apx_dtype dt, apx_dtype it, int ndim, const int64_t *self_shape,
                         const int64_t *index_shape, const int64_t *src_shape, int dim,
                         int backward, int alias, int const_rows) {
  char what[200];
  snprintf(what, sizeof what, "%s %s/%s ndim %d dim %d alias=%d const_rows=%d",
           backward ? "gather_backward" : "scatter_add", apx_dtype_name(dt), apx_dtype_name(it),
           ndim, dim, alias, const_rows);
  int d = dim < 0 ? dim + ndim : dim;
  apx_tensor self = tu_host(dt, ndim, self_shape), index = tu_host(it, ndim, index_shape);
  apx_tensor src = tu_host(dt, ndim, backward ? index_shape : src_shape);
  apx_tensor want = tu_host(dt, ndim, self_shape);
  int is_int = dt == APX_DTYPE_I32 || dt == APX_DTYPE_I64;
  for (int call = 0; call < 2; call++) {
    fill_data(&self);
    fill_data(&src);
    int64_t n = apx_tensor_numel(&index);
    int64_t row = ndim > 1 && index_shape[0] > 0 ? n / index_shape[0] : 1;
    /* few destinations: many duplicates */
    int64_t hi = self_shape[d] > 6 ? self_shape[d] / 3 : self_shape[d] - 1;
    for (int64_t i = 0; i < n; i++)
      set_index(&index, i,
                const_rows && i % row ? get_index(&index, i - i % row) : tu_int(&rng, 0, hi));
    apx_tensor got[CC_MAX_OUTPUTS];
    if (backward) {
      apx_gather_backward_args a = APX_GATHER_BACKWARD_ARGS_INIT;
      a.grad_out = &src;
      a.dim = dim;
      a.index = &index;
      a.grad_src = &want;
      cc_case c = {what, APX_OP_GATHER_BACKWARD, &a, {&a.grad_out, &a.index}, {&a.grad_src},
                   -1, 1};
      cc_run(&c, got);
    } else {
      apx_scatter_add_args a = APX_SCATTER_ADD_ARGS_INIT;
      a.self = &self;
      a.dim = dim;
      a.index = &index;
      a.src = &src;
      a.out = &want;
      cc_case c = {what, APX_OP_SCATTER_ADD, &a, {&a.self, &a.index, &a.src}, {&a.out},
                   alias ? 0 : -1, 1};
      cc_run(&c, got);
    }
    if (is_int) {
      expect_exact(&got[0], &want, what);
    } else {
      /* magnitude: the same scatter of |self| and |src| in f32 on the cpu */
      apx_tensor aself = tu_host(APX_DTYPE_F32, ndim, self_shape);
      apx_tensor asrc = tu_host(APX_DTYPE_F32, ndim, src.shape);
      apx_tensor amag = tu_host(APX_DTYPE_F32, ndim, self_shape);
      for (int64_t i = 0; i < apx_tensor_numel(&self); i++)
        tu_set(&aself, i, backward ? 0.0 : fabs(tu_get(&self, i)));
      for (int64_t i = 0; i < apx_tensor_numel(&src); i++)
        tu_set(&asrc, i, fabs(tu_get(&src, i)));
      apx_scatter_add_args m = APX_SCATTER_ADD_ARGS_INIT;
      m.self = &aself;
      m.dim = dim;
      m.index = &index;
      m.src = &asrc;
      m.out = &amag;
      CHECK_OK(apx_scatter_add(ctx, &m, &on_cpu), what);
      int64_t on = apx_tensor_numel(&want);
      double *mag = malloc(sizeof(double) * (size_t)on);
      for (int64_t i = 0; i < on; i++) mag[i] = tu_get(&amag, i);
      expect_close(&got[0], &want, mag, 0, what);
      free(mag);
      tu_free(&aself);
      tu_free(&asrc);
      tu_free(&amag);
    }
    tu_free(&got[0]);
  }
  tu_free(&self);
  tu_free(&index);
  tu_free(&src);
  tu_free(&want);
}

START_TEST(test_scatter_add) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      apx_dtype dt = data_dtypes[d], it = index_dtypes[i];
      int64_t self1[1] = {11}, idx1[1] = {60};
      scatter_case(dt, it, 1, self1, idx1, (int64_t[]){70}, 0, 0, 0, 0);
      int64_t self2[2] = {9, 7}, idx2[2] = {30, 5}, src2[2] = {31, 7};
      for (int alias = 0; alias < 2; alias++) {
        scatter_case(dt, it, 2, self2, idx2, src2, 0, 0, alias, 0);
        scatter_case(dt, it, 2, self2, idx2, src2, 0, 0, alias, 1);
      }
      scatter_case(dt, it, 2, self2, (int64_t[]){6, 20}, (int64_t[]){7, 21}, 1, 0, 0, 0);
      int64_t self3[3] = {3, 8, 4}, idx3[3] = {3, 25, 4};
      scatter_case(dt, it, 3, self3, idx3, (int64_t[]){3, 25, 4}, -2, 0, 0, 0);
      scatter_case(dt, it, 3, self3, (int64_t[]){0, 8, 4}, (int64_t[]){3, 25, 4}, 0, 0, 0, 0);
      scatter_case(dt, it, 2, self2, idx2, NULL, 0, 1, 0, 0);
      scatter_case(dt, it, 3, self3, idx3, NULL, 1, 1, 0, 0);
      /* the direct path's multi-block shapes: several row chunks (512
       * rows, 256 for i64), column chunks of 8 (70 wide: a partial one,
       * element loads), src wider than the index (unaligned rows); slots
       * of one, two and more sources (values up to M / 3) */
      int64_t self4[2] = {1000, 70}, idx4[2] = {200, 40}, src4[2] = {210, 45};
      scatter_case(dt, it, 2, self4, idx4, src4, 0, 0, 0, 0);
      scatter_case(dt, it, 2, self4, idx4, src4, 0, 0, 1, 1);
      scatter_case(dt, it, 2, self4, idx4, NULL, 0, 1, 0, 0);
      /* the bench's seed shape (16-byte loads, sources in three row
       * chunks), and out rows at the direct path's bound (16 row chunks;
       * i64 takes the prep/tile path there) */
      int64_t self7[2] = {4096, 128}, idx7[2] = {256, 128};
      scatter_case(dt, it, 2, self7, idx7, idx7, 0, 0, 0, 0);
      int64_t self8[2] = {8192, 16}, idx8[2] = {256, 16};
      scatter_case(dt, it, 2, self8, idx8, idx8, 0, 0, 1, 0);
      /* 25 column chunks, src as wide as the index only */
      int64_t self9[2] = {600, 200}, idx9[2] = {50, 150};
      scatter_case(dt, it, 2, self9, idx9, idx9, 0, 0, 0, 0);
      /* validate=device: 150 and 4000 column chunks, checked in the
       * kernel; out = self: checked beside it */
      int64_t self10[2] = {300, 1200}, idx10[2] = {256, 1200};
      scatter_case(dt, it, 2, self10, idx10, idx10, 0, 0, 0, 0);
      scatter_case(dt, it, 2, self10, idx10, idx10, 0, 0, 1, 0);
      int64_t self11[2] = {16, 32000}, idx11[2] = {4, 32000};
      scatter_case(dt, it, 2, self11, idx11, idx11, 0, 0, 0, 0);
      /* the prep/tile path (out rows beyond the direct path's 16 row
       * chunks): out rows at its bound (1024 row groups of 16 rows; i64,
       * 8-row groups, takes the sort paths there) with 256 index rows */
      int64_t self5[2] = {16384, 3}, idx5[2] = {256, 3};
      scatter_case(dt, it, 2, self5, idx5, idx5, 0, 0, 0, 0);
      /* the same at 129 columns (17 prep blocks, 5 column chunks) */
      int64_t self6[2] = {16384, 129}, idx6[2] = {256, 129};
      scatter_case(dt, it, 2, self6, idx6, idx6, 0, 0, 0, 0);
    }
}
END_TEST

/* Large enough for the rows path's synchronised choice (constant rows) and
 * for the general path's multi-pass sort (varying rows). */
START_TEST(test_scatter_add_large) {
  int64_t self2[2] = {300, 512}, idx2[2] = {600, 512}, src2[2] = {600, 512};
  for (int d = 0; d < 3; d++)
    for (int rows = 0; rows < 2; rows++)
      scatter_case(float_dtypes[d], APX_DTYPE_I64, 2, self2, idx2, src2, 0, 0, 0, rows);
  scatter_case(APX_DTYPE_F16, APX_DTYPE_I32, 2, self2, idx2, src2, 0, 0, 1, 1);
  scatter_case(APX_DTYPE_BF16, APX_DTYPE_I32, 2, self2, idx2, NULL, 0, 1, 0, 1);
}
END_TEST

static void add_tests(Suite *s) {
  TCase *ops = cc_tcase(s, "ops"), *large = cc_tcase(s, "large");
  tcase_add_test(ops, test_gather);
  tcase_add_test(ops, test_index_select);
  tcase_add_test(ops, test_copy_ops_move_bits);
  tcase_add_test(ops, test_scatter_add);
  tcase_add_test(large, test_scatter_add_large);
}

int main(void) { return cc_main("cuda_index", add_tests); }
