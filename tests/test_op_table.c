/* SPDX-License-Identifier: Apache-2.0 */
/* The op table (apx_op_describe; libapexx/op_table.c, libapexx/op/) against
 * the validation suites' own statement of every op (the valid cases of
 * tests/test_validate_common.c: names, outputs, optional tensors, exact
 * aliases, shapes), so that the two cannot drift: the descriptor's
 * arguments, its output shapes and index ranges on the valid case, its
 * initial values (the ARGS_INIT macros), its capability bits, output
 * shapes of empty arguments (no crash, zeros) and apx_op_run. */
#include <check.h>
#include <stddef.h>
#include <string.h>

#include "test_validate_common.h"

static const apx_op_arg *arg_named(const apx_op_desc *d, const char *name, int *index) {
  for (int i = 0; i < d->arg_count; i++)
    if (strcmp(d->args[i].name, name) == 0) {
      if (index)
        *index = i;
      return &d->args[i];
    }
  return NULL;
}

static int is_tensor(apx_arg_kind kind) {
  return kind == APX_ARG_INPUT || kind == APX_ARG_INDEX || kind == APX_ARG_OUTPUT;
}

START_TEST(every_op_is_described) {
  for (int op = 0; op < APX_OP_COUNT; op++) {
    const apx_op_desc *d = apx_op_describe((apx_op_id)op);
    ck_assert_msg(d != NULL, "op %d has no descriptor", op);
    ck_assert_int_eq(d->id, op);
    ck_assert_str_eq(d->name, apx_op_name((apx_op_id)op));
    ck_assert_uint_ge(d->size, sizeof(apx_op_desc));
    ck_assert_msg(d->summary && d->summary[0], "%s has no summary", d->name);
    ck_assert_msg(d->arg_count > 0 && d->args, "%s has no arguments", d->name);
    for (int i = 0; i < d->arg_count; i++) {
      const apx_op_arg *a = &d->args[i];
      ck_assert_msg(a->offset < d->args_size, "%s.%s: offset outside the struct", d->name, a->name);
      if (i > 0)
        ck_assert_msg(a->offset > d->args[i - 1].offset, "%s.%s: not in the struct's order",
                      d->name, a->name);
      ck_assert_int_lt(a->same_dtype_as, d->arg_count);
      ck_assert_int_lt(a->alias_of, d->arg_count);
      if (a->kind == APX_ARG_ENUM)
        ck_assert_msg(a->enum_count > 0 && a->enum_names, "%s.%s: enum without names", d->name,
                      a->name);
      if (a->kind == APX_ARG_HANDLE || a->kind == APX_ARG_RESULT)
        ck_assert_msg(a->type_name != NULL, "%s.%s: pointer without type", d->name, a->name);
      if (is_tensor(a->kind))
        ck_assert_msg(a->layout && a->layout[0], "%s.%s: tensor without layout", d->name, a->name);
    }
  }
  ck_assert_ptr_null(apx_op_describe(APX_OP_COUNT));
  ck_assert_ptr_null(apx_op_describe((apx_op_id)-1));
}
END_TEST

/* The descriptor's tensors are the case's, with the same roles. */
START_TEST(arguments_match_the_cases) {
  vt_case c;
  vt_make(&c, (apx_op_id)_i, APX_DTYPE_F32, APX_DTYPE_I64);
  const apx_op_desc *d = apx_op_describe(c.op);
  for (int s = 0; s < c.count; s++) {
    int at = -1;
    const apx_op_arg *a = arg_named(d, c.names[s], &at);
    ck_assert_msg(a != NULL, "%s: the case's %s is not in the descriptor", d->name, c.names[s]);
    ck_assert_msg(is_tensor(a->kind), "%s.%s is no tensor", d->name, a->name);
    ck_assert_msg((a->kind == APX_ARG_OUTPUT) == c.is_output[s], "%s.%s: output or not", d->name,
                  a->name);
    ck_assert_msg(a->optional == !c.required[s], "%s.%s: optional or not", d->name, a->name);
    ck_assert_msg((char *)c.field[s] - (char *)&c.args == (ptrdiff_t)a->offset, "%s.%s: offset %zu",
                  d->name, a->name, a->offset);
    const char *alias = c.alias_of[s] >= 0 ? c.names[c.alias_of[s]] : NULL;
    const char *described = a->alias_of >= 0 ? d->args[a->alias_of].name : NULL;
    ck_assert_msg((alias == NULL) == (described == NULL) &&
                      (!alias || strcmp(alias, described) == 0),
                  "%s.%s: alias_of %s, the case says %s", d->name, a->name,
                  described ? described : "none", alias ? alias : "none");
  }
  /* a tensor the case leaves out is optional (tileunpack's origins) */
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    int in_case = 0;
    for (int s = 0; s < c.count; s++)
      in_case |= strcmp(c.names[s], a->name) == 0;
    if (is_tensor(a->kind) && !in_case)
      ck_assert_msg(a->optional, "%s.%s: required but not in the valid case", d->name, a->name);
  }
  vt_free(&c);
}
END_TEST

/* The ops whose one output has the caller's shape (no output_shape rule). */
static int caller_shaped(apx_op_id op) {
  return op == APX_OP_GATHER_BACKWARD || op == APX_OP_TILEPACK_BACKWARD ||
         op == APX_OP_INDEX_SELECT_BACKWARD;
}

/* Output shapes on the valid case are its outputs' shapes; on empty
 * arguments every dimension is 0 and nothing is read. */
START_TEST(output_shapes) {
  vt_case c;
  vt_make(&c, (apx_op_id)_i, APX_DTYPE_F16, APX_DTYPE_I32);
  const apx_op_desc *d = apx_op_describe(c.op);
  int derived = 0;
  for (int s = 0; s < c.count; s++) {
    if (!c.is_output[s])
      continue;
    int at = -1, ndim = -1;
    int64_t shape[APX_MAX_DIMS];
    arg_named(d, c.names[s], &at);
    const char *rule = d->output_shape ? d->output_shape(&c.args, at, &ndim, shape) : NULL;
    if (!rule) {
      /* only the gradients of gather's and index_select's src and of
       * tilepack's features have the caller's shape */
      ck_assert_msg(caller_shaped(c.op), "%s.%s: no output shape", d->name, c.names[s]);
      continue;
    }
    derived++;
    ck_assert_int_eq(ndim, c.t[s].ndim);
    for (int k = 0; k < ndim; k++)
      ck_assert_msg(shape[k] == c.t[s].shape[k], "%s.%s: dim %d is %lld, the case has %lld",
                    d->name, c.names[s], k, (long long)shape[k], (long long)c.t[s].shape[k]);
    ck_assert_ptr_null(d->output_shape(&c.args, 0, &ndim, shape)); /* arg 0 is an input */
  }
  ck_assert_int_eq(derived > 0, !caller_shaped(c.op));
  unsigned char empty[512];
  ck_assert_uint_le(d->args_size, sizeof empty);
  memset(empty, 0, sizeof empty);
  for (int i = 0; i < d->arg_count && d->output_shape; i++) {
    int ndim = -1;
    int64_t shape[APX_MAX_DIMS];
    if (d->args[i].kind != APX_ARG_OUTPUT || !d->output_shape(empty, i, &ndim, shape))
      continue;
    ck_assert_int_ge(ndim, 0);
    /* fused_pack_op_unpack_backward's grad_scalars is [4] whatever the inputs */
    const int fixed = c.op == APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD &&
                      strcmp(d->args[i].name, "grad_scalars") == 0;
    for (int k = 0; k < ndim; k++)
      ck_assert_msg(shape[k] == 0 || shape[k] == 1 || (fixed && shape[k] == 4),
                    "%s.%s: dim %d of empty args is %lld", d->name, d->args[i].name, k,
                    (long long)shape[k]);
  }
  vt_free(&c);
}
END_TEST

/* The ranges on the valid cases (test_validate_common.h: features
 * [2,3,8,12], tile 4: 6 tiles; gather src [3,4,5] dim 1; index_select src
 * [5,4]; scatter_add self [4,5] dim 0; gather_backward grad_src [3,4,5]
 * dim 1; the tile backward ops' maps [2,3,8,12], tile 4; index_select_backward
 * grad_src [5,4]). */
START_TEST(index_ranges) {
  static const struct {
    apx_op_id op;
    const char *arg;
    int64_t lo, hi;
    const char *why;
  } want[] = {
      {APX_OP_TILEPACK, "idx", 0, 5, ""},
      {APX_OP_TILEUNPACK, "idx", 0, 5, ""},
      {APX_OP_FUSED_PACK_OP_UNPACK, "idx", 0, 5, ""},
      {APX_OP_GATHER, "index", 0, 3, "src.shape[1] = [4]"},
      {APX_OP_INDEX_SELECT, "index", 0, 4, "src.shape[0] = [5]"},
      {APX_OP_SCATTER_ADD, "index", 0, 3, "self.shape[0] = [4]"},
      {APX_OP_GATHER_BACKWARD, "index", 0, 3, "grad_src.shape[1] = [4]"},
      {APX_OP_TILEPACK_BACKWARD, "idx", 0, 5, ""},
      {APX_OP_TILEUNPACK_BACKWARD, "idx", 0, 5, ""},
      {APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, "idx", 0, 5, ""},
      {APX_OP_INDEX_SELECT_BACKWARD, "index", 0, 4, "grad_src.shape[0] = [5]"},
  };
  for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
    vt_case c;
    vt_make(&c, want[w].op, APX_DTYPE_F32, APX_DTYPE_I64);
    const apx_op_desc *d = apx_op_describe(c.op);
    int at = -1;
    ck_assert_ptr_nonnull(arg_named(d, want[w].arg, &at));
    int64_t lo = -9, hi = -9;
    char why[64] = "";
    ck_assert_int_eq(d->index_range(&c.args, at, &lo, &hi, why, sizeof why), 1);
    ck_assert_int_eq(lo, want[w].lo);
    ck_assert_int_eq(hi, want[w].hi);
    ck_assert_str_eq(why, want[w].why);
    vt_free(&c);
  }
  /* tileunpack's levels follow their own rule; a non-index argument has none */
  vt_case c;
  vt_make(&c, APX_OP_TILEUNPACK, APX_DTYPE_F32, APX_DTYPE_I64);
  const apx_op_desc *d = apx_op_describe(APX_OP_TILEUNPACK);
  int levels = -1;
  int64_t lo, hi;
  char why[64];
  arg_named(d, "levels", &levels);
  ck_assert_int_eq(d->index_range(&c.args, levels, &lo, &hi, why, sizeof why), 0);
  ck_assert_int_eq(d->index_range(&c.args, 0, &lo, &hi, why, sizeof why), 0);
  vt_free(&c);
}
END_TEST

START_TEST(capabilities) {
  for (int op = 0; op < APX_OP_COUNT; op++) {
    const apx_op_desc *d = apx_op_describe((apx_op_id)op);
    int has_index = 0;
    for (int i = 0; i < d->arg_count; i++)
      has_index |= d->args[i].kind == APX_ARG_INDEX;
    ck_assert_msg(!!(d->caps & APX_OP_CAP_INDEX_TENSORS) == has_index, "%s: index bit", d->name);
    ck_assert_msg(!!(d->caps & APX_OP_CAP_EAGER_CAPTURE) == !(d->caps & APX_OP_CAP_DEVICE_CHECKS),
                  "%s: eager capture bit", d->name);
    /* every op with index tensors has its values checked on the device */
    if (has_index)
      ck_assert(d->caps & APX_OP_CAP_DEVICE_CHECKS);
    ck_assert_msg(!!d->index_range == has_index, "%s: index_range", d->name);
  }
  /* ff_infer checks its device utilities (no NaN) without index tensors */
  ck_assert(apx_op_describe(APX_OP_FF_INFER)->caps & APX_OP_CAP_DEVICE_CHECKS);
}
END_TEST

START_TEST(initial_values) {
  static const apx_tilepack_args tilepack = APX_TILEPACK_ARGS_INIT;
  static const apx_tileunpack_args tileunpack = APX_TILEUNPACK_ARGS_INIT;
  static const apx_fused_pack_op_unpack_args fused_pack_op_unpack =
      APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
  static const apx_fusiongate_alpha_args fusiongate_alpha = APX_FUSIONGATE_ALPHA_ARGS_INIT;
  static const apx_fusiongate_fuse_args fusiongate_fuse = APX_FUSIONGATE_FUSE_ARGS_INIT;
  static const apx_tilessm_scan_args tilessm_scan = APX_TILESSM_SCAN_ARGS_INIT;
  static const apx_gather_args gather = APX_GATHER_ARGS_INIT;
  static const apx_index_select_args index_select = APX_INDEX_SELECT_ARGS_INIT;
  static const apx_scatter_add_args scatter_add = APX_SCATTER_ADD_ARGS_INIT;
  static const apx_gather_backward_args gather_backward = APX_GATHER_BACKWARD_ARGS_INIT;
  static const apx_ff_infer_args ff_infer = APX_FF_INFER_ARGS_INIT;
  static const apx_fusiongate_fuse_backward_args fusiongate_fuse_backward =
      APX_FUSIONGATE_FUSE_BACKWARD_ARGS_INIT;
  static const apx_fusiongate_alpha_backward_args fusiongate_alpha_backward =
      APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT;
  static const apx_tilessm_scan_backward_args tilessm_scan_backward =
      APX_TILESSM_SCAN_BACKWARD_ARGS_INIT;
  static const apx_tilepack_backward_args tilepack_backward = APX_TILEPACK_BACKWARD_ARGS_INIT;
  static const apx_tileunpack_backward_args tileunpack_backward =
      APX_TILEUNPACK_BACKWARD_ARGS_INIT;
  static const apx_fused_pack_op_unpack_backward_args fused_pack_op_unpack_backward =
      APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;
  static const apx_index_select_backward_args index_select_backward =
      APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
  const void *inits[APX_OP_COUNT] = {
#define INIT_(upper, lower) [APX_OP_##upper] = &lower,
      APX_OP_MAP(INIT_)
#undef INIT_
  };
  size_t sizes[APX_OP_COUNT] = {
#define SIZE_(upper, lower) [APX_OP_##upper] = sizeof lower,
      APX_OP_MAP(SIZE_)
#undef SIZE_
  };
  for (int op = 0; op < APX_OP_COUNT; op++) {
    const apx_op_desc *d = apx_op_describe((apx_op_id)op);
    ck_assert_uint_eq(d->args_size, sizes[op]);
    /* field by field (padding bytes are unspecified) */
    for (int i = 0; i < d->arg_count; i++) {
      size_t end = i + 1 < d->arg_count ? d->args[i + 1].offset : d->args_size;
      size_t n = d->args[i].kind == APX_ARG_DOUBLE || d->args[i].kind == APX_ARG_INT64 ? 8
                 : is_tensor(d->args[i].kind) || d->args[i].kind == APX_ARG_HANDLE ||
                         d->args[i].kind == APX_ARG_RESULT
                     ? sizeof(void *)
                     : sizeof(int);
      ck_assert_uint_le(d->args[i].offset + n, end);
      ck_assert_msg(memcmp((const char *)d->args_init + d->args[i].offset,
                           (const char *)inits[op] + d->args[i].offset, n) == 0,
                    "%s.%s: initial value differs from the ARGS_INIT macro", d->name,
                    d->args[i].name);
    }
  }
}
END_TEST

/* apx_op_run is the op's entry: the same validation, the same result. */
START_TEST(run_by_id) {
  vt_case c;
  vt_make(&c, APX_OP_TILEPACK, APX_DTYPE_F32, APX_DTYPE_I32);
  apx_call cpu = {"cpu", NULL};
  ck_assert_int_eq(apx_op_run(vt_ctx, APX_OP_TILEPACK, &c.args, &cpu), APX_OK);
  int out = vt_slot(&c, "out");
  apx_tensor first = tu_clone(&c.t[out]);
  tu_poison(&c.t[out]);
  ck_assert_int_eq(apx_tilepack(vt_ctx, &c.args.tilepack, &cpu), APX_OK);
  ck_assert(tu_bytes_equal(&first, &c.t[out]));
  tu_free(&first);
  c.args.tilepack.tile = 5;
  ck_assert_int_eq(apx_op_run(vt_ctx, APX_OP_TILEPACK, &c.args, &cpu), APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(apx_last_error(), "tilepack: features H, W = [8, 12]"));
  ck_assert_int_eq(apx_op_run(vt_ctx, APX_OP_COUNT, &c.args, &cpu), APX_ERR_INVALID_ARG);
  ck_assert_str_eq(apx_last_error(), fmt("apx_op_run: op = [%d] is not an op id", APX_OP_COUNT));
  vt_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("op_table");
  TCase *tc = tcase_create("op_table");
  tcase_add_checked_fixture(tc, vt_setup, vt_teardown);
  tcase_add_test(tc, every_op_is_described);
  tcase_add_loop_test(tc, arguments_match_the_cases, 0, APX_OP_COUNT);
  tcase_add_loop_test(tc, output_shapes, 0, APX_OP_COUNT);
  tcase_add_test(tc, index_ranges);
  tcase_add_test(tc, capabilities);
  tcase_add_test(tc, initial_values);
  tcase_add_test(tc, run_by_id);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
