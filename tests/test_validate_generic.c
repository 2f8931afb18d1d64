/* SPDX-License-Identifier: Apache-2.0 */
/* Validation rules every op shares (docs/architecture.md, The op table;
 * docs/ops.md, Errors and Aliasing): well-formed tensors, one device,
 * aliasing only where the API allows it and then exactly, no output memory
 * touched by a rejected call. Each rule is applied to every tensor of every
 * op's default valid case (test_validate_common.c). */
#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_validate_common.h"

static const apx_op_id all_ops[] = {
#define ALL_OPS_(upper, lower) APX_OP_##upper,
    APX_OP_MAP(ALL_OPS_)
#undef ALL_OPS_
};
#define N_OPS ((int)(sizeof all_ops / sizeof all_ops[0]))


/* Every op's default case passes validation in several dtype pairs. */
START_TEST(test_default_cases_are_valid) {
  const apx_dtype pairs[3][2] = {{APX_DTYPE_F32, APX_DTYPE_I64},
                                 {APX_DTYPE_F16, APX_DTYPE_I32},
                                 {APX_DTYPE_BF16, APX_DTYPE_I64}};
  for (int o = 0; o < N_OPS; o++)
    for (int p = 0; p < 3; p++) {
      vt_case c;
      vt_make(&c, all_ops[o], pairs[p][0], pairs[p][1]);
      vt_expect_valid(&c);
      vt_free(&c);
    }
}
END_TEST

START_TEST(test_required_tensor_null) {
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    for (int i = 0; i < c.count; i++) {
      if (!c.required[i])
        continue;
      *c.field[i] = NULL;
      vt_expect_invalid(&c, fmt("%s: %s is required", apx_op_name(c.op), c.names[i]), "[NULL]");
      *c.field[i] = &c.t[i];
    }
    vt_free(&c);
  }
}
END_TEST

/* Apply `mutate` to a copy of each slot tensor in turn and expect the
 * substrings that `expect` formats for it. */
typedef void (*mutate_fn)(apx_tensor *t);
static void each_slot(mutate_fn mutate,
                      const char *const *(*expect)(const char *name, const apx_tensor *t)) {
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    for (int i = 0; i < c.count; i++) {
      apx_tensor changed = c.t[i];
      mutate(&changed);
      *c.field[i] = &changed;
      const char *const *subs = expect(c.names[i], &changed);
      vt_expect_invalid(&c, subs[0], subs[1] ? subs[1] : subs[0]);
      *c.field[i] = &c.t[i];
    }
    vt_free(&c);
  }
}

static const char *subs_buf[2];

static void set_ndim_9(apx_tensor *t) { t->ndim = 9; }
static const char *const *expect_ndim_9(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s has ndim [9]", name);
  subs_buf[1] = "outside [0, 8]";
  return subs_buf;
}
static void set_ndim_negative(apx_tensor *t) { t->ndim = -1; }
static const char *const *expect_ndim_negative(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s has ndim [-1]", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
/* A 0-d tensor (a scalar gradient) becomes [-2]. */
static void set_negative_dim(apx_tensor *t) {
  if (t->ndim == 0)
    t->ndim = 1;
  t->shape[t->ndim - 1] = -2;
}
static const char *const *expect_negative_dim(const char *name, const apx_tensor *t) {
  subs_buf[0] = fmt("%s.shape[%d] = [-2] is negative", name, t->ndim - 1);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_bad_dtype(apx_tensor *t) { t->dtype = (apx_dtype)99; }
static const char *const *expect_bad_dtype(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s has unknown dtype [99]", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_bad_device(apx_tensor *t) { t->device = (apx_device)7; }
static const char *const *expect_bad_device(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s has unknown device kind [7]", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_null_data(apx_tensor *t) { t->data = NULL; }
static const char *const *expect_null_data(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s.data is [NULL]", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_misaligned(apx_tensor *t) { t->data = (char *)t->data + 1; }
static const char *const *expect_misaligned(const char *name, const apx_tensor *t) {
  subs_buf[0] = fmt("%s.data = [", name);
  subs_buf[1] = fmt("is not aligned to its element size [%zu]", apx_dtype_size(t->dtype));
  return subs_buf;
}
static void set_host_index(apx_tensor *t) { t->device_index = 2; }
static const char *const *expect_host_index(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s is a host tensor with device_index [2]", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_negative_index(apx_tensor *t) {
  t->device = APX_DEVICE_CUDA;
  t->device_index = -1;
}
static const char *const *expect_negative_index(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s.device_index = [-1] is negative", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_huge(apx_tensor *t) {
  t->ndim = 3;
  t->shape[0] = t->shape[1] = t->shape[2] = (int64_t)1 << 31;
}
static const char *const *expect_huge(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s shape [2147483648,2147483648,2147483648] is too large", name);
  subs_buf[1] = NULL;
  return subs_buf;
}
static void set_huge_bytes(apx_tensor *t) {
  /* 2^62 elements fit int64, their bytes (>= 2 each) do not */
  t->ndim = 2;
  t->shape[0] = t->shape[1] = (int64_t)1 << 31;
}
static const char *const *expect_huge_bytes(const char *name, const apx_tensor *t) {
  (void)t;
  subs_buf[0] = fmt("%s shape [2147483648,2147483648] is too large", name);
  subs_buf[1] = "byte size overflows";
  return subs_buf;
}

START_TEST(test_malformed_tensors) {
  each_slot(set_ndim_9, expect_ndim_9);
  each_slot(set_ndim_negative, expect_ndim_negative);
  each_slot(set_negative_dim, expect_negative_dim);
  each_slot(set_bad_dtype, expect_bad_dtype);
  each_slot(set_bad_device, expect_bad_device);
  each_slot(set_null_data, expect_null_data);
  each_slot(set_misaligned, expect_misaligned);
  each_slot(set_host_index, expect_host_index);
  each_slot(set_negative_index, expect_negative_index);
  each_slot(set_huge, expect_huge);
  each_slot(set_huge_bytes, expect_huge_bytes);
}
END_TEST

/* A NULL data pointer is fine for a tensor without elements. */
START_TEST(test_null_data_of_empty_tensor) {
  vt_case c;
  vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor index = apx_tensor_host(NULL, APX_DTYPE_I64, 1, (int64_t[]){0});
  apx_tensor out = apx_tensor_host(NULL, APX_DTYPE_F32, 2, (int64_t[]){0, 4});
  vt_set(&c, "index", &index);
  vt_set(&c, "out", &out);
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* apx_tensor_host with ndim outside [0, 8] keeps it instead of building a
 * clamped 8-dim tensor: the thread's error names it, and every op refuses
 * the tensor with its range error (issue 30 item 18). */
START_TEST(test_tensor_host_keeps_a_bad_ndim) {
  int64_t shape[9] = {2, 4, 1, 1, 1, 1, 1, 1, 1};
  float data[8] = {0};
  apx_tensor nine = apx_tensor_host(data, APX_DTYPE_F32, 9, shape);
  ck_assert_int_eq(nine.ndim, 9);
  ck_assert_str_eq(apx_last_error(), "apx_tensor_host: ndim = [9] is outside [0, 8]");
  apx_tensor negative = apx_tensor_host(data, APX_DTYPE_F32, -1, shape);
  ck_assert_int_eq(negative.ndim, -1);
  ck_assert_str_eq(apx_last_error(), "apx_tensor_host: ndim = [-1] is outside [0, 8]");
  apx_tensor two = apx_tensor_host(data, APX_DTYPE_F32, 2, shape);
  ck_assert(two.ndim == 2 && two.shape[0] == 2 && two.shape[1] == 4 && two.data == data);
  vt_case c;
  vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_F32, APX_DTYPE_I64);
  vt_set(&c, "src", &nine);
  vt_expect_invalid(&c, "src has ndim [9]", "outside [0, 8]");
  vt_set(&c, "src", &negative);
  vt_expect_invalid(&c, "src has ndim [-1]", "outside [0, 8]");
  vt_free(&c);
}
END_TEST

/* A NULL shape with ndim > 0 was read (SIGSEGV): dimensions of -1, named
 * in the thread's error, refused by every op. */
START_TEST(test_tensor_host_null_shape) {
  float data[1] = {0};
  apx_tensor t = apx_tensor_host(data, APX_DTYPE_F32, 2, NULL);
  ck_assert_str_eq(apx_last_error(), "apx_tensor_host: shape = [NULL] with ndim [2]");
  ck_assert(t.ndim == 2 && t.shape[0] == -1 && t.shape[1] == -1);
  ck_assert_int_eq(apx_tensor_numel(&t), -1);
  apx_tensor scalar = apx_tensor_host(data, APX_DTYPE_F32, 0, NULL); /* no shape to read */
  ck_assert_int_eq(apx_tensor_numel(&scalar), 1);
  vt_case c;
  vt_make(&c, APX_OP_INDEX_SELECT, APX_DTYPE_F32, APX_DTYPE_I64);
  vt_set(&c, "src", &t);
  vt_expect_invalid(&c, "src", "-1");
  vt_free(&c);
}
END_TEST

/* One tensor on another device kind than the rest. */
START_TEST(test_device_kind_mismatch) {
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    for (int i = 0; i < c.count; i++) {
      apx_tensor changed = c.t[i];
      changed.device = APX_DEVICE_CUDA;
      *c.field[i] = &changed;
      vt_expect_invalid(&c, "[cuda:0]", "[host:0]", "must be on one device");
      *c.field[i] = &c.t[i];
    }
    vt_free(&c);
  }
}
END_TEST

/* All on cuda, one on another ordinal. Host memory stands in for device
 * memory: validation must not read it (and rejects the call before any
 * backend could). */
START_TEST(test_device_index_mismatch) {
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor on_cuda[VT_MAX_SLOTS];
    for (int i = 0; i < c.count; i++) {
      on_cuda[i] = c.t[i];
      on_cuda[i].device = APX_DEVICE_CUDA;
      *c.field[i] = &on_cuda[i];
    }
    for (int i = 0; i < c.count; i++) {
      on_cuda[i].device_index = 1;
      vt_expect_invalid(&c, "[cuda:1]", "[cuda:0]", "must be on one device");
      on_cuda[i].device_index = 0;
    }
    vt_free(&c);
  }
}
END_TEST

/* Index values in device memory are the device backend's job: the core
 * must not read them (here: host memory holding out-of-range values). */
START_TEST(test_device_index_values_not_read) {
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor on_cuda[VT_MAX_SLOTS];
    for (int i = 0; i < c.count; i++) {
      on_cuda[i] = c.t[i];
      on_cuda[i].device = APX_DEVICE_CUDA;
      *c.field[i] = &on_cuda[i];
      if (c.t[i].dtype == APX_DTYPE_I64)
        tu_set(&c.t[i], 0, 1e9);
    }
    apx_explanation expl;
    apx_status st = apx_explain(vt_ctx, c.op, &c.args, NULL, &expl);
    ck_assert_msg(st != APX_ERR_INVALID_ARG, "%s on cuda rejected: %s", apx_op_name(c.op),
                  apx_last_error());
    vt_free(&c);
  }
}
END_TEST

/* Every (output, input) pair: a partial overlap is rejected; the same data
 * pointer is accepted only for the aliases the API names. */
START_TEST(test_output_input_overlap) {
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    for (int out = 0; out < c.count; out++) {
      if (!c.is_output[out])
        continue;
      for (int in = 0; in < c.count; in++) {
        if (c.is_output[in])
          continue;
        size_t in_bytes = tu_bytes(&c.t[in]), out_bytes = tu_bytes(&c.t[out]);
        size_t size = in_bytes + out_bytes + 64;
        unsigned char *buffer = aligned_alloc(64, (size + 63) / 64 * 64);
        unsigned char *expected = malloc(size);
        memcpy(buffer, c.t[in].data, in_bytes);
        memset(buffer + in_bytes, 0xA5, size - in_bytes);
        memcpy(expected, buffer, size);
        apx_tensor in_view = c.t[in], out_view = c.t[out];
        in_view.data = buffer;
        *c.field[in] = &in_view;
        *c.field[out] = &out_view;

        size_t step = apx_dtype_size(out_view.dtype);
        out_view.data = buffer + step; /* partial overlap */
        if (c.alias_of[out] == in)
          vt_expect_invalid(&c, fmt("%s [", c.names[out]), fmt("overlaps %s [", c.names[in]),
                            "not an exact alias");
        else
          vt_expect_invalid(&c, fmt("%s [", c.names[out]), fmt("overlaps %s [", c.names[in]),
                            "may not alias");
        ck_assert(memcmp(buffer, expected, size) == 0);

        out_view.data = buffer; /* same pointer */
        if (c.alias_of[out] == in) {
          vt_expect_valid(&c);
        } else {
          vt_expect_invalid(&c, fmt("overlaps %s [", c.names[in]));
          ck_assert(memcmp(buffer, expected, size) == 0);
        }
        *c.field[in] = &c.t[in];
        *c.field[out] = &c.t[out];
        free(buffer);
        free(expected);
      }
    }
    vt_free(&c);
  }
}
END_TEST

/* The two outputs of the scan may not overlap each other. */
START_TEST(test_output_output_overlap) {
  vt_case c;
  vt_make(&c, APX_OP_TILESSM_SCAN, APX_DTYPE_F32, APX_DTYPE_I64);
  apx_tensor final_state = *vt_tensor(&c, "final_state");
  final_state.data = (char *)vt_tensor(&c, "out")->data + 8;
  vt_set(&c, "final_state", &final_state);
  vt_expect_invalid(&c, "final_state [", "overlaps out [");
  vt_free(&c);
}
END_TEST

/* Inputs may overlap each other (they are only read). */
START_TEST(test_inputs_may_overlap) {
  vt_case c;
  vt_make(&c, APX_OP_FUSIONGATE_FUSE, APX_DTYPE_F32, APX_DTYPE_I64);
  vt_set(&c, "detail", vt_tensor(&c, "base"));
  vt_expect_valid(&c);
  vt_free(&c);
}
END_TEST

/* Validation neither reads nor writes output memory: outputs live on pages
 * without any access rights; the call is rejected by the last check of
 * each op (an index value, or else an input overlapping the output). */
START_TEST(test_output_memory_untouched) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (int o = 0; o < N_OPS; o++) {
    vt_case c;
    vt_make(&c, all_ops[o], APX_DTYPE_F32, APX_DTYPE_I64);
    apx_tensor views[VT_MAX_SLOTS];
    void *regions[VT_MAX_SLOTS] = {0};
    size_t region_bytes[VT_MAX_SLOTS] = {0};
    int first_out = -1, index_slot = -1;
    for (int i = 0; i < c.count; i++) {
      if (c.t[i].dtype == APX_DTYPE_I64 && index_slot < 0 && strcmp(c.names[i], "levels") != 0)
        index_slot = i;
      if (!c.is_output[i])
        continue;
      region_bytes[i] = (tu_bytes(&c.t[i]) + page - 1) / page * page;
      regions[i] = mmap(NULL, region_bytes[i], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ck_assert(regions[i] != MAP_FAILED);
      views[i] = c.t[i];
      views[i].data = regions[i];
      *c.field[i] = &views[i];
      if (first_out < 0)
        first_out = i;
    }
    apx_tensor in_view;
    if (index_slot >= 0) {
      tu_set(&c.t[index_slot], c.t[index_slot].ndim ? 1 : 0, 1e9);
      vt_expect_invalid(&c, "[1000000000]");
    } else {
      /* an input of the output's dtype reaching into its region */
      int in = 0;
      while (c.is_output[in])
        in++;
      in_view = c.t[in];
      in_view.data = (char *)regions[first_out] + 4;
      *c.field[in] = &in_view;
      vt_expect_invalid(&c, "overlaps");
    }
    for (int i = 0; i < c.count; i++)
      if (regions[i])
        munmap(regions[i], region_bytes[i]);
    /* the case's own outputs were never passed: reset before freeing */
    vt_free(&c);
  }
}
END_TEST

START_TEST(test_bad_op_id_and_null_args) {
  apx_explanation expl;
  ck_assert_int_eq(apx_explain(vt_ctx, (apx_op_id)99, NULL, NULL, &expl), APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(apx_last_error(), "99"));
  for (int o = 0; o < N_OPS; o++) {
    ck_assert_int_eq(vt_call(all_ops[o], NULL, NULL), APX_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(apx_last_error(), "args"));
    ck_assert_ptr_nonnull(strstr(apx_last_error(), "NULL"));
    ck_assert_int_eq(apx_explain(vt_ctx, all_ops[o], NULL, NULL, &expl), APX_ERR_INVALID_ARG);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate_generic");
  TCase *tc = tcase_create("generic");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_default_cases_are_valid);
  tcase_add_test(tc, test_required_tensor_null);
  tcase_add_test(tc, test_malformed_tensors);
  tcase_add_test(tc, test_null_data_of_empty_tensor);
  tcase_add_test(tc, test_tensor_host_keeps_a_bad_ndim);
  tcase_add_test(tc, test_tensor_host_null_shape);
  tcase_add_test(tc, test_device_kind_mismatch);
  tcase_add_test(tc, test_device_index_mismatch);
  tcase_add_test(tc, test_device_index_values_not_read);
  tcase_add_test(tc, test_output_input_overlap);
  tcase_add_test(tc, test_output_output_overlap);
  tcase_add_test(tc, test_inputs_may_overlap);
  tcase_add_test(tc, test_output_memory_untouched);
  tcase_add_test(tc, test_bad_op_id_and_null_args);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
