/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx/dispatch.c: per-op order, forced backends, device match, supports(),
 * and a stable code plus a sentence for every backend passed over. */
#include "coretest.h"

#include <apexx/backend.h>
#include <stddef.h>

static float features[1 * 1 * 8 * 8], out[1 * 1 * 1 * 8 * 8];
static int32_t idx[1];
static apx_tensor f_t, i_t, o_t;
static apx_tilepack_args pack;

static void setup_pack(apx_dtype dtype, apx_device device) {
  memset(features, 0, sizeof features);
  for (size_t k = 0; k < sizeof out / sizeof out[0]; k++) out[k] = -1.0f;
  f_t = apx_tensor_host(features, dtype, 4, (int64_t[]){1, 1, 8, 8});
  i_t = apx_tensor_host(idx, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  o_t = apx_tensor_host(out, dtype, 5, (int64_t[]){1, 1, 1, 8, 8});
  f_t.device = i_t.device = o_t.device = device;
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &f_t;
  a.idx = &i_t;
  a.tile = 8;
  a.out = &o_t;
  pack = a;
}

static apx_context *open_with(const char *extra) {
  char fmt[4096];
  snprintf(fmt, sizeof fmt,
           "[apexx]\nbackend_dir = %%s\n%s\n"
           "[backend alpha]\nlibrary = fixture-alpha.so\n"
           "[backend beta]\nlibrary = fixture-beta.so\n"
           "[backend probe]\nlibrary = fixture-probe.so\n"
           "[backend off]\nlibrary = fixture-alpha.so\nenabled = no\n"
           "[backend missing]\nlibrary = fixture-missing.so\n",
           extra);
  unsetenv("APEXX_BACKEND_DIR");
  return open_ok(write_ini_modules(fmt));
}

static const apx_pass_over *passed(const apx_explanation *e, const char *backend) {
  for (int i = 0; i < e->passed_over_count; i++)
    if (strcmp(e->passed_over[i].backend, backend) == 0) return &e->passed_over[i];
  ck_abort_msg("%s was not passed over", backend);
  return NULL;
}

START_TEST(first_in_order_wins) {
  apx_context *ctx = open_with("order = alpha, beta");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_OK);
  ck_assert(out[0] == 111.0f);
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, NULL, &e), APX_OK);
  ck_assert_str_eq(e.backend, "alpha");
  ck_assert_int_eq(e.passed_over_count, 0);
  apx_close(ctx);
  ctx = open_with("order = beta, alpha");
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_OK);
  ck_assert(out[0] == 222.0f);
  apx_close(ctx);
}
END_TEST

START_TEST(supports_declines_with_dtype_unsupported) {
  apx_context *ctx = open_with("order = alpha, beta");
  setup_pack(APX_DTYPE_F16, APX_DEVICE_HOST);
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, NULL, &e), APX_OK);
  ck_assert_str_eq(e.backend, "beta");
  const apx_pass_over *p = passed(&e, "alpha");
  ck_assert_int_eq(p->code, APX_PASS_DTYPE_UNSUPPORTED);
  ck_assert_str_eq(p->reason, "dtype_unsupported:alpha takes no f16");
  apx_close(ctx);
}
END_TEST

START_TEST(missing_op_is_op_unsupported) {
  apx_context *ctx = open_with("order = beta, alpha");
  float base[64], packed[64], merged[64];
  int32_t ids[1] = {0};
  apx_tensor b = apx_tensor_host(base, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tensor p = apx_tensor_host(packed, APX_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 8, 8});
  apx_tensor i = apx_tensor_host(ids, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  apx_tensor o = apx_tensor_host(merged, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  memset(base, 0, sizeof base);
  memset(packed, 0, sizeof packed);
  apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
  a.base = &b;
  a.packed = &p;
  a.idx = &i;
  a.out = &o;
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEUNPACK, &a, NULL, &e), APX_OK);
  ck_assert_str_eq(e.backend, "alpha");
  ck_assert_int_eq(passed(&e, "beta")->code, APX_PASS_OP_UNSUPPORTED);
  ck_assert_str_eq(passed(&e, "beta")->reason, "op_unsupported:beta does not implement tileunpack");
  ck_assert_int_eq(apx_tileunpack(ctx, &a, NULL), APX_OK);
  ck_assert(merged[5] == 111.0f);
  apx_close(ctx);
}
END_TEST

/* apx_backend_provides: a loaded table's ops; an unloaded backend none */
START_TEST(backend_provides_its_table_ops) {
  apx_context *ctx = open_with("order = alpha, beta");
  ck_assert_ptr_null(apx_forced_backend(ctx));
  int found_beta = 0;
  for (int i = 0; i < apx_backend_count(ctx); i++) {
    struct apx_backend_info info;
    ck_assert_int_eq(apx_backend_info(ctx, i, &info), APX_OK);
    int has_pack = -1, has_unpack = -1;
    ck_assert_int_eq(apx_backend_provides(ctx, i, APX_OP_TILEPACK, &has_pack), APX_OK);
    ck_assert_int_eq(apx_backend_provides(ctx, i, APX_OP_TILEUNPACK, &has_unpack), APX_OK);
    if (strcmp(info.name, "beta") == 0) {
      found_beta = 1;
      ck_assert_int_eq(has_pack, 1);
      ck_assert_int_eq(has_unpack, 0); /* FIXTURE_NO_UNPACK */
    } else if (strcmp(info.name, "alpha") == 0) {
      ck_assert_int_eq(has_pack, 1);
      ck_assert_int_eq(has_unpack, 1);
    } else if (strcmp(info.name, "missing") == 0) {
      ck_assert_int_eq(has_pack, 0); /* not loaded */
    }
    if (i == 0) {
      int has;
      ck_assert_int_eq(apx_backend_provides(ctx, i, (apx_op_id)APX_OP_COUNT, &has),
                       APX_ERR_INVALID_ARG);
      ck_assert_ptr_nonnull(strstr(apx_last_error(), "op = ["));
      ck_assert_int_eq(apx_backend_provides(ctx, i, APX_OP_TILEPACK, NULL), APX_ERR_INVALID_ARG);
    }
  }
  ck_assert(found_beta);
  int has;
  ck_assert_int_eq(apx_backend_provides(ctx, apx_backend_count(ctx), APX_OP_TILEPACK, &has),
                   APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(apx_last_error(), "i = ["));
  ck_assert_int_eq(apx_backend_provides(NULL, 0, APX_OP_TILEPACK, &has), APX_ERR_INVALID_ARG);
  ck_assert_ptr_null(apx_forced_backend(NULL));
  apx_close(ctx);
}
END_TEST

START_TEST(per_op_order_overrides_global) {
  apx_context *ctx = open_with("order = alpha, beta\n[op tilepack]\norder = beta, alpha");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_OK);
  ck_assert(out[0] == 222.0f);
  apx_close(ctx);
}
END_TEST

START_TEST(forced_by_call_and_environment) {
  apx_context *ctx = open_with("order = alpha, beta");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  apx_call call = {"beta", NULL};
  ck_assert_int_eq(apx_tilepack(ctx, &pack, &call), APX_OK);
  ck_assert(out[0] == 222.0f);
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, &call, &e), APX_OK);
  ck_assert_int_eq(passed(&e, "alpha")->code, APX_PASS_NOT_FORCED);
  ck_assert_str_eq(passed(&e, "alpha")->reason, "not_forced:the call forces backend beta");
  apx_close(ctx);

  setenv("APEXX_BACKEND", "beta", 1);
  ctx = open_with("order = alpha, beta");
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_OK);
  ck_assert(out[0] == 222.0f);
  ck_assert_str_eq(apx_forced_backend(ctx), "beta");
  apx_call call_alpha = {"alpha", NULL}; /* the call wins over the environment */
  ck_assert_int_eq(apx_tilepack(ctx, &pack, &call_alpha), APX_OK);
  ck_assert(out[0] == 111.0f);
  apx_close(ctx);
  unsetenv("APEXX_BACKEND"); /* CK_FORK=no runs the next tests in this process */
}
END_TEST

START_TEST(forced_backend_that_cannot_run_is_an_error) {
  apx_context *ctx = open_with("order = alpha, beta");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  apx_call call = {"probe", NULL};
  ck_assert_int_eq(apx_tilepack(ctx, &pack, &call), APX_ERR_UNSUPPORTED);
  ck_assert_contains(apx_last_error(), "backend probe forced by the call cannot run it");
  ck_assert_contains(apx_last_error(), "widget missing");
  ck_assert(out[0] == -1.0f);
  apx_call ghost = {"ghost", NULL};
  ck_assert_int_eq(apx_tilepack(ctx, &pack, &ghost), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "backend [ghost] forced by the call is not configured");
  apx_close(ctx);
}
END_TEST

START_TEST(every_pass_over_is_recorded) {
  apx_context *ctx = open_with("order = probe, off, missing");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, NULL, &e), APX_OK);
  /* alpha and beta are appended after the order: alpha runs it */
  ck_assert_str_eq(e.backend, "alpha");
  ck_assert_int_eq(e.passed_over_count, 3);
  ck_assert_int_eq(passed(&e, "probe")->code, APX_PASS_UNAVAILABLE);
  ck_assert_str_eq(passed(&e, "probe")->reason, "unavailable:fixture probe says no: widget missing");
  ck_assert_int_eq(passed(&e, "off")->code, APX_PASS_DISABLED);
  ck_assert_int_eq(passed(&e, "missing")->code, APX_PASS_NOT_LOADED);
  ck_assert_contains(passed(&e, "missing")->reason, "not_loaded:not_found: library ");
  apx_close(ctx);
}
END_TEST

START_TEST(device_mismatch_and_no_backend_left) {
  apx_context *ctx = open_with("order = alpha, beta");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_CUDA); /* never dereferenced: no host backend takes it */
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, NULL, &e), APX_ERR_UNSUPPORTED);
  ck_assert_ptr_null(e.backend);
  ck_assert_int_eq(passed(&e, "alpha")->code, APX_PASS_DEVICE_MISMATCH);
  ck_assert_str_eq(passed(&e, "alpha")->reason,
                   "device_mismatch:tensors are in cuda memory, alpha serves host");
  ck_assert_int_eq(passed(&e, "probe")->code, APX_PASS_UNAVAILABLE);
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_ERR_UNSUPPORTED);
  ck_assert_contains(apx_last_error(), "tilepack: no backend can run this call");
  ck_assert_contains(apx_last_error(), "alpha: device_mismatch");
  ck_assert_contains(apx_last_error(), "off: disabled");
  ck_assert(out[0] == -1.0f);
  apx_close(ctx);
}
END_TEST

START_TEST(explain_validates_first) {
  apx_context *ctx = open_with("order = alpha, beta");
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  pack.tile = 3; /* 8 is not divisible by 3 */
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, NULL, &e), APX_ERR_INVALID_ARG);
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_ERR_INVALID_ARG);
  ck_assert(out[0] == -1.0f);
  ck_assert_int_eq(apx_explain(ctx, (apx_op_id)99, &pack, NULL, &e), APX_ERR_INVALID_ARG);
  apx_close(ctx);
}
END_TEST

/* The op table's own size (include/apexx/backend.h, Versioning): a backend
 * without one provides no op; one built against an older backend.h (its
 * op table ends before tileunpack) lacks tileunpack, even with the slot
 * set, and says so; one built against a newer backend.h (a slot past this
 * core's ops) loads and runs the ops this core knows. */
START_TEST(op_table_sizes) {
  unsetenv("APEXX_BACKEND_DIR");
  apx_context *ctx =
      open_ok(write_ini_modules("[apexx]\nbackend_dir = %s\norder = noops, olderops, newerops\n"
                                "[backend noops]\nlibrary = fixture-noops.so\n"
                                "[backend olderops]\nlibrary = fixture-olderops.so\n"
                                "[backend newerops]\nlibrary = fixture-newerops.so\n"));
  for (int i = 0; i < 3; i++) {
    struct apx_backend_info info;
    ck_assert_int_eq(apx_backend_info(ctx, i, &info), APX_OK);
    ck_assert_msg(info.state == APX_BACKEND_OK, "%s: %s", info.name, info.reason);
  }
  const int want[3][3] = {/* tilepack, tileunpack, gather */ {0, 0, 0}, {1, 0, 0}, {1, 1, 0}};
  const apx_op_id ops[3] = {APX_OP_TILEPACK, APX_OP_TILEUNPACK, APX_OP_GATHER};
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 3; k++) {
      int has = -1;
      ck_assert_int_eq(apx_backend_provides(ctx, i, ops[k], &has), APX_OK);
      ck_assert_msg(has == want[i][k], "backend %d op %s: provides %d", i, apx_op_name(ops[k]),
                    has);
    }
  setup_pack(APX_DTYPE_F32, APX_DEVICE_HOST);
  apx_explanation e;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEPACK, &pack, NULL, &e), APX_OK);
  ck_assert_str_eq(e.backend, "olderops");
  ck_assert_str_eq(passed(&e, "noops")->reason, "op_unsupported:noops has no op table");
  ck_assert_int_eq(apx_tilepack(ctx, &pack, NULL), APX_OK);
  ck_assert(out[0] == 444.0f);

  float base[64] = {0}, packed[64] = {0}, merged[64];
  int32_t ids[1] = {0};
  apx_tensor b = apx_tensor_host(base, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tensor p = apx_tensor_host(packed, APX_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 8, 8});
  apx_tensor i = apx_tensor_host(ids, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  apx_tensor o = apx_tensor_host(merged, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
  a.base = &b;
  a.packed = &p;
  a.idx = &i;
  a.out = &o;
  ck_assert_int_eq(apx_explain(ctx, APX_OP_TILEUNPACK, &a, NULL, &e), APX_OK);
  ck_assert_str_eq(e.backend, "newerops");
  ck_assert_int_eq(passed(&e, "olderops")->code, APX_PASS_OP_UNSUPPORTED);
  char want_reason[300];
  snprintf(want_reason, sizeof want_reason,
           "op_unsupported:olderops's op table ([%zu] bytes) ends before tileunpack (built "
           "against an older include/apexx/backend.h)",
           offsetof(apx_backend_ops, tileunpack));
  ck_assert_str_eq(passed(&e, "olderops")->reason, want_reason);
  ck_assert_int_eq(apx_tileunpack(ctx, &a, NULL), APX_OK);
  ck_assert(merged[0] == 555.0f);
  apx_close(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("dispatch");
  TCase *tc = tcase_create("dispatch");
  tcase_add_test(tc, first_in_order_wins);
  tcase_add_test(tc, supports_declines_with_dtype_unsupported);
  tcase_add_test(tc, missing_op_is_op_unsupported);
  tcase_add_test(tc, op_table_sizes);
  tcase_add_test(tc, backend_provides_its_table_ops);
  tcase_add_test(tc, per_op_order_overrides_global);
  tcase_add_test(tc, forced_by_call_and_environment);
  tcase_add_test(tc, forced_backend_that_cannot_run_is_an_error);
  tcase_add_test(tc, every_pass_over_is_recorded);
  tcase_add_test(tc, device_mismatch_and_no_backend_left);
  tcase_add_test(tc, explain_validates_first);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
