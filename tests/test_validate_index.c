/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the indexing ops, torch's rules (docs/ops.md, Indexing ops):
 * gather, index_select, scatter_add, gather_backward. Every rejection is
 * checked through the op and apx_explain with the outputs left poisoned
 * (test_validate_common.c). */
#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_validate_common.h"





/* An index tensor filled in [lo, hi]. */
static apx_tensor index_tensor(apx_dtype dtype, int ndim, const int64_t *shape, int64_t lo,
                               int64_t hi) {
  return vt_tensor_like(dtype, ndim, shape, lo, hi);
}

/* ---- gather (10.1) ---- */

START_TEST(test_gather_ndim_and_dim) {
  vt_case c;
  vt_make(&c, APX_OP_GATHER, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor si, *index = view_of(&c, "index", &si);
  index->ndim = 2;
  vt_expect_invalid(&c, "gather: index has ndim [2] but src has ndim [3]");
  index->ndim = 4;
  index->shape[3] = 1;
  vt_expect_invalid(&c, "gather: index has ndim [4] but src has ndim [3]");
  index->ndim = 3;
  c.args.gather.dim = 3;
  vt_expect_invalid(&c, "gather: dim = [3] is outside [-3, 2]");
  c.args.gather.dim = -4;
  vt_expect_invalid(&c, "dim = [-4] is outside [-3, 2]");
  c.args.gather.dim = -2; /* wraps to 1 */
  vt_expect_valid(&c);
  /* 0-d tensors have no dimension to index */
  apx_tensor s0 = OWNED(APX_DTYPE_F32, 1), i0 = OWNED(APX_DTYPE_I64, 1),
             o0 = OWNED(APX_DTYPE_F32, 1);
  s0.ndim = i0.ndim = o0.ndim = 0;
  vt_set(&c, "src", &s0);
  vt_set(&c, "index", &i0);
  vt_set(&c, "out", &o0);
  c.args.gather.dim = 0;
  vt_expect_invalid(&c, "src must have at least 1 dimension, got ndim [0]");
  tu_free(&s0);
  tu_free(&i0);
  tu_free(&o0);
  vt_free(&c);
}
END_TEST

/* index.size(d) <= src.size(d) for d != dim; index.size(dim) is free. */
START_TEST(test_gather_size_rule) {
  vt_case c;
  vt_make(&c, APX_OP_GATHER, APX_DTYPE_F32, APX_DTYPE_I32);
  const int64_t sizes[3][3] = {{4, 6, 5}, {2, 6, 6}, {3, 6, 5}};
  const int bad_dim[3] = {0, 2, -1};
  for (int s = 0; s < 3; s++) {
    apx_tensor index = index_tensor(APX_DTYPE_I32, 3, sizes[s], 0, 3);
    apx_tensor out = owned(APX_DTYPE_F32, 3, sizes[s]);
    vt_set(&c, "index", &index);
    vt_set(&c, "out", &out);
    if (bad_dim[s] >= 0)
      vt_expect_invalid(&c, fmt("index.shape[%d] = [%lld] is larger than src.shape[%d] = [%lld]",
                                bad_dim[s], (long long)sizes[s][bad_dim[s]], bad_dim[s],
                                (long long)c.t[vt_slot(&c, "src")].shape[bad_dim[s]]));
    else
      vt_expect_valid(&c); /* [3,6,5] into src [3,4,5] along dim 1 */
    tu_free(&index);
    tu_free(&out);
  }
  vt_free(&c);
}
END_TEST

START_TEST(test_gather_dtypes_and_out) {
  vt_case c;
  vt_make(&c, APX_OP_GATHER, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor si, *index = view_of(&c, "index", &si);
  index->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "index dtype [f32] must be i32 or i64");
  index->dtype = APX_DTYPE_I64;
  restore(&c, "index");
  apx_tensor so, *out = view_of(&c, "out", &so);
  out->shape[1] = 5;
  vt_expect_invalid(&c, "out has shape [2,5,5], expected [2,6,5]", "the shape of index");
  out->shape[1] = 6;
  out->dtype = APX_DTYPE_F16;
  vt_expect_invalid(&c, "out dtype [f16] must equal src dtype [f32]");
  restore(&c, "out");
  /* any of the five dtypes as data (docs/ops.md, gather: exact copies) */
  const apx_dtype data[5] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16, APX_DTYPE_I32,
                             APX_DTYPE_I64};
  for (int d = 0; d < 5; d++) {
    vt_case k;
    vt_make(&k, APX_OP_GATHER, data[d], APX_DTYPE_I32);
    vt_expect_valid(&k);
    vt_free(&k);
  }
  vt_free(&c);
}
END_TEST

/* Values in [0, src.size(dim)), no negative wrap; the bad one is named
 * with its full position. */
START_TEST(test_gather_index_values) {
  const apx_dtype idts[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  for (int d = 0; d < 2; d++) {
    vt_case c;
    vt_make(&c, APX_OP_GATHER, APX_DTYPE_F32, idts[d]);
    apx_tensor *index = vt_tensor(&c, "index");
    const int64_t bad[3] = {-1, 4, 1 << 30};
    const int64_t positions[3] = {0, 17, 59};
    for (int p = 0; p < 3; p++)
      for (int b = 0; b < 3; b++) {
        int64_t pos = positions[p];
        double saved = tu_get(index, pos);
        tu_set(index, pos, (double)bad[b]);
        vt_expect_invalid(&c, fmt("gather: index[%lld][%lld][%lld] = [%lld] is outside [0, 3] "
                                  "(src.shape[1] = [4])",
                                  (long long)(pos / 30), (long long)(pos / 5 % 6),
                                  (long long)(pos % 5), (long long)bad[b]));
        tu_set(index, pos, saved);
      }
    /* dim -1 wraps to 2 (size 5); index [2,4,7] may exceed it there */
    c.args.gather.dim = -1;
    apx_tensor wrapped = index_tensor(idts[d], 3, (int64_t[]){2, 4, 7}, 0, 4);
    apx_tensor out = OWNED(APX_DTYPE_F32, 2, 4, 7);
    vt_set(&c, "index", &wrapped);
    vt_set(&c, "out", &out);
    vt_expect_valid(&c);
    tu_set(&wrapped, 3, 5);
    tu_poison(&out);
    vt_expect_invalid(&c, "index[0][0][3] = [5] is outside [0, 4] (src.shape[2] = [5])");
    ck_assert(tu_is_poisoned(&out));
    tu_free(&wrapped);
    tu_free(&out);
    vt_free(&c);
  }
}
END_TEST

/* Empty index: fine, also into a zero-size dim; a non-empty index into a
 * zero-size dim is out of range. */
START_TEST(test_gather_empty) {
  vt_case c;
  vt_make(&c, APX_OP_GATHER, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor index = OWNED(APX_DTYPE_I64, 2, 0, 5), out = OWNED(APX_DTYPE_F32, 2, 0, 5);
  vt_set(&c, "index", &index);
  vt_set(&c, "out", &out);
  vt_expect_valid(&c);
  apx_tensor src0 = OWNED(APX_DTYPE_F32, 3, 0, 5);
  vt_set(&c, "src", &src0);
  vt_expect_valid(&c);
  apx_tensor index1 = OWNED(APX_DTYPE_I64, 2, 1, 5), out1 = OWNED(APX_DTYPE_F32, 2, 1, 5);
  memset(index1.data, 0, tu_bytes(&index1));
  vt_set(&c, "index", &index1);
  vt_set(&c, "out", &out1);
  vt_expect_invalid(&c, "index[0][0][0] = [0] is outside [0, -1] (src.shape[1] = [0])");
  ck_assert(tu_is_poisoned(&out1));
  tu_free(&index);
  tu_free(&out);
  tu_free(&src0);
  tu_free(&index1);
  tu_free(&out1);
  vt_free(&c);
}
END_TEST

/* ---- index_select (10.2) ---- */

START_TEST(test_index_select_shapes) {
  vt_case c;
  vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_BF16, APX_DTYPE_I64);
  apx_tensor ss, *src = view_of(&c, "src", &ss);
  src->ndim = 3;
  src->shape[2] = 1;
  vt_expect_invalid(&c, "index_select: out has shape [7,4], expected [7,4,1]",
                    "src's shape with N at dim");
  src->ndim = 0;
  vt_expect_invalid(&c, "index_select: src must have at least 1 dimension, got ndim [0]");
  restore(&c, "src");
  c.args.index_select.dim = 2;
  vt_expect_invalid(&c, "index_select: dim = [2] is outside [-2, 1] for ndim [2]");
  c.args.index_select.dim = -3;
  vt_expect_invalid(&c, "dim = [-3] is outside [-2, 1] for ndim [2]");
  c.args.index_select.dim = -2; /* dim 0 from the end: valid as given */
  vt_expect_valid(&c);
  c.args.index_select.dim = 0;
  apx_tensor si, *index = view_of(&c, "index", &si);
  index->ndim = 2;
  index->shape[1] = 1;
  vt_expect_invalid(&c, "index must be [N] (a vector), got ndim [2]");
  index->ndim = 1;
  index->dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "index dtype [bf16] must be i32 or i64");
  restore(&c, "index");
  apx_tensor so, *out = view_of(&c, "out", &so);
  out->shape[1] = 5;
  vt_expect_invalid(&c, "out has shape [7,5], expected [7,4]");
  out->shape[1] = 4;
  out->shape[0] = 6;
  vt_expect_invalid(&c, "out has shape [6,4], expected [7,4]");
  out->shape[0] = 7;
  out->dtype = APX_DTYPE_F16;
  vt_expect_invalid(&c, "out dtype [f16] must equal src dtype [bf16]");
  vt_free(&c);
}
END_TEST

START_TEST(test_index_select_values) {
  const apx_dtype idts[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  for (int d = 0; d < 2; d++) {
    vt_case c;
    vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_I32, idts[d]);
    apx_tensor *index = vt_tensor(&c, "index");
    const int64_t bad[3] = {-1, 5, -2147483647};
    for (int64_t pos = 0; pos < 7; pos += 3)
      for (int b = 0; b < 3; b++) {
        double saved = tu_get(index, pos);
        tu_set(index, pos, (double)bad[b]);
        vt_expect_invalid(&c, fmt("index_select: index[%lld] = [%lld] is outside [0, 4] "
                                  "(src.shape[0] = [5])",
                                  (long long)pos, (long long)bad[b]));
        tu_set(index, pos, saved);
      }
    vt_free(&c);
  }
  /* dim 1 (also as -1): src [5,4] -> out [5,7], values in [0, 3] naming
   * src.shape[1] */
  for (int from_end = 0; from_end < 2; from_end++) {
    vt_case c;
    vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_I32, APX_DTYPE_I64);
    apx_tensor out = OWNED(APX_DTYPE_I32, 5, 7);
    vt_set(&c, "out", &out);
    c.args.index_select.dim = from_end ? -1 : 1;
    apx_tensor *index = vt_tensor(&c, "index");
    for (int64_t pos = 0; pos < 7; pos++)
      tu_set(index, pos, (double)(pos % 4));
    vt_expect_valid(&c);
    tu_set(index, 2, 4);
    vt_expect_invalid(&c, "index_select: index[2] = [4] is outside [0, 3] (src.shape[1] = [4])");
    tu_set(index, 2, 2);
    apx_tensor wrong = OWNED(APX_DTYPE_I32, 7, 4);
    vt_set(&c, "out", &wrong);
    vt_expect_invalid(&c, "out has shape [7,4], expected [5,7]");
    tu_free(&wrong);
    tu_free(&out);
    vt_free(&c);
  }
  /* empty index -> [0,D] */
  vt_case c;
  vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_F32, APX_DTYPE_I32);
  apx_tensor index = OWNED(APX_DTYPE_I32, 0), out = OWNED(APX_DTYPE_F32, 0, 4);
  vt_set(&c, "index", &index);
  vt_set(&c, "out", &out);
  vt_expect_valid(&c);
  tu_free(&index);
  tu_free(&out);
  vt_free(&c);
}
END_TEST

/* A long index: the range scan's blocks of 8192 values on the calling thread
 * (3 blocks and 5 values) and in a parallel region (2^20 + 3 values) report
 * the first value outside the range, wherever it is and however many follow. */
START_TEST(test_long_index_values) {
  const apx_dtype idts[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  const int64_t lens[2] = {3 * 8192 + 5, (1 << 20) + 3};
  for (int d = 0; d < 2; d++)
    for (int l = 0; l < 2; l++) {
      const int64_t n = lens[l];
      vt_case c;
      vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_I32, idts[d]);
      apx_tensor index = OWNED(idts[d], n), out = OWNED(APX_DTYPE_I32, n, 4);
      for (int64_t i = 0; i < n; i++)
        tu_set(&index, i, (double)(i % 5));
      vt_set(&c, "index", &index);
      vt_set(&c, "out", &out);
      vt_expect_valid(&c);
      const int64_t at[5] = {0, 8191, 8192, n / 2, n - 1};
      for (int k = 0; k < 5; k++) {
        tu_set(&index, at[k], 5);
        if (at[k] + 9000 < n)
          tu_set(&index, at[k] + 9000, -1); /* a later bad value, not the one named */
        vt_expect_invalid(&c, fmt("index_select: index[%lld] = [5] is outside [0, 4] "
                                  "(src.shape[0] = [5])",
                                  (long long)at[k]));
        tu_set(&index, at[k], (double)(at[k] % 5));
        if (at[k] + 9000 < n)
          tu_set(&index, at[k] + 9000, (double)((at[k] + 9000) % 5));
      }
      vt_expect_valid(&c);
      tu_free(&index);
      tu_free(&out);
      vt_free(&c);
    }
}
END_TEST

/* ---- scatter_add (10.3) ---- */

START_TEST(test_scatter_add_ndim_and_dim) {
  vt_case c;
  vt_make(&c, APX_OP_SCATTER_ADD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor si, *index = view_of(&c, "index", &si);
  index->ndim = 1;
  vt_expect_invalid(&c, "scatter_add: index has ndim [1] but self has ndim [2]");
  index->ndim = 2;
  restore(&c, "index");
  apx_tensor ss, *src = view_of(&c, "src", &ss);
  src->ndim = 3;
  src->shape[2] = 1;
  vt_expect_invalid(&c, "scatter_add: src has ndim [3] but self has ndim [2]");
  restore(&c, "src");
  c.args.scatter_add.dim = 2;
  vt_expect_invalid(&c, "dim = [2] is outside [-2, 1]");
  c.args.scatter_add.dim = -3;
  vt_expect_invalid(&c, "dim = [-3] is outside [-2, 1]");
  c.args.scatter_add.dim = -2;
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* For all d: index.size(d) <= src.size(d); for d != dim: index.size(d) <=
 * self.size(d); index.size(dim) may exceed self.size(dim). */
START_TEST(test_scatter_add_size_rule) {
  vt_case c;
  vt_make(&c, APX_OP_SCATTER_ADD, APX_DTYPE_F32, APX_DTYPE_I64);
  /* self [4,5], src [6,4], dim 0 */
  struct {
    int64_t index[2];
    const char *message;
  } cases[] = {
      {{7, 3}, "index.shape[0] = [7] is larger than src.shape[0] = [6]"},
      {{6, 5}, "index.shape[1] = [5] is larger than src.shape[1] = [4]"},
      {{6, 4}, NULL}, /* 6 > self's 4 along dim: fine */
      {{2, 4}, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    apx_tensor index = index_tensor(APX_DTYPE_I64, 2, cases[i].index, 0, 3);
    vt_set(&c, "index", &index);
    if (cases[i].message)
      vt_expect_invalid(&c, cases[i].message);
    else
      vt_expect_valid(&c);
    tu_free(&index);
  }
  /* d != dim against self: self [4,3] with index [6,4] (src [6,4]) */
  apx_tensor self = OWNED(APX_DTYPE_F32, 4, 3), out = OWNED(APX_DTYPE_F32, 4, 3);
  apx_tensor index = index_tensor(APX_DTYPE_I64, 2, (int64_t[]){6, 4}, 0, 3);
  vt_set(&c, "self", &self);
  vt_set(&c, "out", &out);
  vt_set(&c, "index", &index);
  vt_expect_invalid(&c, "index.shape[1] = [4] is larger than self.shape[1] = [3]",
                    "only dim may be larger");
  ck_assert(tu_is_poisoned(&out));
  tu_free(&self);
  tu_free(&out);
  tu_free(&index);
  vt_free(&c);
}
END_TEST

START_TEST(test_scatter_add_dtypes_and_out) {
  vt_case c;
  vt_make(&c, APX_OP_SCATTER_ADD, APX_DTYPE_F16, APX_DTYPE_I32);
  apx_tensor ss, *src = view_of(&c, "src", &ss);
  src->dtype = APX_DTYPE_F32; /* fp16 self + fp32 src fails in torch too */
  vt_expect_invalid(&c, "src dtype [f32] must equal self dtype [f16]");
  src->dtype = APX_DTYPE_F16;
  restore(&c, "src");
  apx_tensor si, *index = view_of(&c, "index", &si);
  index->dtype = APX_DTYPE_F16;
  vt_expect_invalid(&c, "index dtype [f16] must be i32 or i64");
  restore(&c, "index");
  apx_tensor so, *out = view_of(&c, "out", &so);
  out->shape[0] = 5;
  vt_expect_invalid(&c, "out has shape [5,5], expected [4,5]", "the shape of self");
  out->shape[0] = 4;
  out->dtype = APX_DTYPE_BF16;
  vt_expect_invalid(&c, "out dtype [bf16] must equal self dtype [f16]");
  restore(&c, "out");
  /* in place: out aliases self exactly */
  vt_set(&c, "out", vt_tensor(&c, "self"));
  vt_expect_valid(&c);
  vt_free(&c);
  /* integer data works (torch: int32 verified) */
  const apx_dtype data[5] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16, APX_DTYPE_I32,
                             APX_DTYPE_I64};
  for (int d = 0; d < 5; d++) {
    vt_case k;
    vt_make(&k, APX_OP_SCATTER_ADD, data[d], APX_DTYPE_I64);
    vt_expect_valid(&k);
    vt_free(&k);
  }
}
END_TEST

START_TEST(test_scatter_add_values) {
  vt_case c;
  vt_make(&c, APX_OP_SCATTER_ADD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor *index = vt_tensor(&c, "index");
  const int64_t bad[2] = {-1, 4};
  for (int b = 0; b < 2; b++) {
    tu_set(index, 16, (double)bad[b]);
    vt_expect_invalid(&c, fmt("scatter_add: index[5][1] = [%lld] is outside [0, 3] "
                              "(self.shape[0] = [4])",
                              (long long)bad[b]));
  }
  tu_set(index, 16, 3);
  /* along dim 1 the bound is self's 5; index [4,3] fits self off dim */
  c.args.scatter_add.dim = 1;
  apx_tensor along1 = index_tensor(APX_DTYPE_I64, 2, (int64_t[]){4, 3}, 0, 4);
  vt_set(&c, "index", &along1);
  tu_set(&along1, 2, 4);
  vt_expect_valid(&c);
  restore(&c, "out");
  tu_poison(vt_tensor(&c, "out"));
  tu_set(&along1, 2, 5);
  vt_expect_invalid(&c, "index[0][2] = [5] is outside [0, 4] (self.shape[1] = [5])");
  tu_free(&along1);
  vt_free(&c);
  /* empty index: a no-op */
  vt_make(&c, APX_OP_SCATTER_ADD, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor empty = OWNED(APX_DTYPE_I64, 0, 4);
  vt_set(&c, "index", &empty);
  vt_expect_valid(&c);
  tu_free(&empty);
  vt_free(&c);
}
END_TEST

/* ---- gather_backward ---- */

START_TEST(test_gather_backward) {
  vt_case c;
  vt_make(&c, APX_OP_GATHER_BACKWARD, APX_DTYPE_F32, APX_DTYPE_I64);
  /* grad_out [2,6,5], index [2,6,5], grad_src [3,4,5], dim 1 */
  apx_tensor si, *index = view_of(&c, "index", &si);
  index->ndim = 2;
  vt_expect_invalid(&c, "gather_backward: index has ndim [2] but grad_src has ndim [3]");
  index->ndim = 3;
  index->dtype = APX_DTYPE_F32;
  vt_expect_invalid(&c, "index dtype [f32] must be i32 or i64");
  index->dtype = APX_DTYPE_I64;
  c.args.gather_backward.dim = 3;
  vt_expect_invalid(&c, "dim = [3] is outside [-3, 2]");
  c.args.gather_backward.dim = 1;
  restore(&c, "index");

  apx_tensor sg, *grad_out = view_of(&c, "grad_out", &sg);
  grad_out->shape[1] = 5;
  vt_expect_invalid(&c, "grad_out has shape [2,5,5], expected [2,6,5]", "the shape of index");
  grad_out->shape[1] = 6;
  grad_out->dtype = APX_DTYPE_F16;
  vt_expect_invalid(&c, "grad_src dtype [f32] must equal grad_out dtype [f16]");
  restore(&c, "grad_out");

  /* index (and grad_out) larger than grad_src off dim */
  apx_tensor big_index = index_tensor(APX_DTYPE_I64, 3, (int64_t[]){4, 6, 5}, 0, 3);
  apx_tensor big_grad = OWNED(APX_DTYPE_F32, 4, 6, 5);
  vt_set(&c, "index", &big_index);
  vt_set(&c, "grad_out", &big_grad);
  vt_expect_invalid(&c, "index.shape[0] = [4] is larger than grad_src.shape[0] = [3]");
  tu_free(&big_index);
  tu_free(&big_grad);
  restore(&c, "index");
  restore(&c, "grad_out");

  apx_tensor *values = vt_tensor(&c, "index");
  tu_set(values, 7, 4);
  vt_expect_invalid(&c, "gather_backward: index[0][1][2] = [4] is outside [0, 3] "
                        "(grad_src.shape[1] = [4])");
  tu_set(values, 7, -1);
  vt_expect_invalid(&c, "index[0][1][2] = [-1] is outside [0, 3]");
  tu_set(values, 7, 3);
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_index");
  TCase *tc = tcase_create("index");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_gather_ndim_and_dim);
  tcase_add_test(tc, test_gather_size_rule);
  tcase_add_test(tc, test_gather_dtypes_and_out);
  tcase_add_test(tc, test_gather_index_values);
  tcase_add_test(tc, test_gather_empty);
  tcase_add_test(tc, test_index_select_shapes);
  tcase_add_test(tc, test_index_select_values);
  tcase_add_test(tc, test_long_index_values);
  tcase_add_test(tc, test_scatter_add_ndim_and_dim);
  tcase_add_test(tc, test_scatter_add_size_rule);
  tcase_add_test(tc, test_scatter_add_dtypes_and_out);
  tcase_add_test(tc, test_scatter_add_values);
  tcase_add_test(tc, test_gather_backward);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
