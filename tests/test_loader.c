/* libapexx/loader.c against deliberately broken backends: each ends in its
 * state with a reason, and none stops the others from loading. */
#include "coretest.h"

static apx_context *open_fixtures(void) {
  const char *path = write_ini_modules(
      "[apexx]\nbackend_dir = %s\norder = alpha\n"
      "[backend alpha]\nlibrary = fixture-alpha.so\n"
      "[backend nosym]\nlibrary = fixture-nosym.so\n"
      "[backend abi]\nlibrary = fixture-abi.so\n"
      "[backend small]\nlibrary = fixture-small.so\n"
      "[backend name]\nlibrary = fixture-name.so\n"
      "[backend probe]\nlibrary = fixture-probe.so\n"
      "[backend init]\nlibrary = fixture-init.so\n"
      "[backend missing]\nlibrary = fixture-missing.so\n"
      "[backend garbage]\nlibrary = GARBAGE\n"
      "[backend off]\nlibrary = fixture-alpha.so\nenabled = no\n");
  /* the garbage library is addressed by absolute path */
  static char text[8192];
  FILE *f = fopen(path, "r");
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  char garbage[600];
  snprintf(garbage, sizeof garbage, "%s/not-a-library.so", getenv("APEXX_TEST_FIXTURES"));
  char *at = strstr(text, "GARBAGE");
  char rewritten[8192];
  snprintf(rewritten, sizeof rewritten, "%.*s%s%s", (int)(at - text), text, garbage, at + 7);
  unlink(path);
  unsetenv("APEXX_BACKEND_DIR"); /* backend_dir of the file must count */
  return open_ok(write_ini(rewritten));
}

static void expect_state(apx_context *ctx, const char *name, apx_backend_state state,
                         const char *reason_part) {
  const struct apx_backend_info *b = backend_named(ctx, name);
  ck_assert_msg(b->state == state, "%s: state %s, expected %s (%s)", name,
                apx_backend_state_name(b->state), apx_backend_state_name(state), b->reason);
  if (reason_part)
    ck_assert_contains(b->reason, reason_part);
  else
    ck_assert_str_eq(b->reason, "");
}

START_TEST(each_defect_has_its_state_and_reason) {
  apx_context *ctx = open_fixtures();
  expect_state(ctx, "alpha", APX_BACKEND_OK, NULL);
  expect_state(ctx, "nosym", APX_BACKEND_SYMBOL_MISSING, "does not export apx_backend_entry");
  expect_state(ctx, "abi", APX_BACKEND_ABI_MISMATCH, "ABI version [99], core expects [1]");
  expect_state(ctx, "small", APX_BACKEND_ABI_MISMATCH, "table size [8] is below the minimum");
  expect_state(ctx, "name", APX_BACKEND_NAME_MISMATCH,
               "library calls itself [impostor], configured as [name]");
  expect_state(ctx, "probe", APX_BACKEND_UNAVAILABLE, "fixture probe says no: widget missing");
  expect_state(ctx, "init", APX_BACKEND_INIT_FAILED, "fixture init failed: no widgets");
  expect_state(ctx, "missing", APX_BACKEND_NOT_FOUND, "fixture-missing.so not found");
  expect_state(ctx, "garbage", APX_BACKEND_LOAD_FAILED, "not a loadable shared object");
  expect_state(ctx, "off", APX_BACKEND_DISABLED, "enabled = no");
  apx_close(ctx);
}
END_TEST

START_TEST(info_reports_library_version_and_device) {
  apx_context *ctx = open_fixtures();
  const struct apx_backend_info *alpha = backend_named(ctx, "alpha");
  ck_assert_contains(alpha->library, "fixture-alpha.so");
  ck_assert_str_eq(alpha->version, "9.9.9-fixture");
  ck_assert_int_eq(alpha->device, APX_DEVICE_HOST);
  ck_assert_str_eq(alpha->device_name, "fixture device");
  struct apx_backend_info info;
  ck_assert_int_eq(apx_backend_info(ctx, apx_backend_count(ctx), &info), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "outside");
  apx_close(ctx);
}
END_TEST

START_TEST(a_working_backend_runs_beside_broken_ones) {
  apx_context *ctx = open_fixtures();
  float features[1 * 1 * 8 * 8] = {0}, out[1 * 1 * 1 * 8 * 8];
  int32_t idx[1] = {0};
  apx_tensor f = apx_tensor_host(features, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tensor i = apx_tensor_host(idx, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  apx_tensor o = apx_tensor_host(out, APX_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 8, 8});
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &f;
  a.idx = &i;
  a.tile = 8;
  a.out = &o;
  ck_assert_int_eq(apx_tilepack(ctx, &a, NULL), APX_OK);
  ck_assert(out[0] == 111.0f && out[63] == 111.0f); /* alpha's marker */
  apx_close(ctx);
}
END_TEST

START_TEST(library_writable_by_others_is_refused) {
  char dir[] = "/tmp/apexx-mod-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char src[600], dst[700], cmd[2200];
  snprintf(src, sizeof src, "%s/fixture-alpha.so", getenv("APEXX_TEST_MODULES"));
  snprintf(dst, sizeof dst, "%s/fixture-alpha.so", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 0777 '%s'", src, dst, dst);
  ck_assert_int_eq(system(cmd), 0);
  char text[2048];
  snprintf(text, sizeof text, "[backend alpha]\nlibrary = %s\n", dst);
  apx_context *ctx = open_ok(write_ini(text));
  expect_state(ctx, "alpha", APX_BACKEND_LOAD_FAILED, "world-writable");
  apx_close(ctx);
  unlink(dst);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("loader");
  TCase *tc = tcase_create("loader");
  tcase_add_test(tc, each_defect_has_its_state_and_reason);
  tcase_add_test(tc, info_reports_library_version_and_device);
  tcase_add_test(tc, a_working_backend_runs_beside_broken_ones);
  tcase_add_test(tc, library_writable_by_others_is_refused);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
