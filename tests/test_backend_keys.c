/* SPDX-License-Identifier: Apache-2.0 */
/* Keys a backend declares in its table (libapexx/keys.c): typed values
 * reach the backend, a bad value is a file:line configuration error, an
 * undeclared key is a warning (only for a backend whose table loaded), a
 * declared environment variable overrides the file and is shown among the
 * overrides, and apx_config_key lists every key with its source. The
 * fixture "keyed" (tests/fixtures/backend_fixture.c, FIXTURE_KEYS) fills
 * tilepack's output with level + 100*loud + 1000*strlen(greeting). */
#include "coretest.h"

static float features[64], out[64];
static int32_t idx[1];

/* Open with [backend keyed] holding `keys`; NULL on failure (status in *st). */
static apx_context *open_keyed(const char *keys, apx_status *st, const char **path) {
  char fmt[2048];
  snprintf(fmt, sizeof fmt,
           "[apexx]\nbackend_dir = %%s\norder = keyed\n[backend keyed]\n"
           "library = fixture-keyed.so\n%s",
           keys);
  unsetenv("APEXX_BACKEND_DIR");
  *path = write_ini_modules(fmt);
  apx_context *ctx = NULL;
  *st = apx_open(&ctx, *path);
  return ctx;
}

/* The marker the keyed backend's tilepack writes. */
static float marker(apx_context *ctx) {
  apx_tensor f = apx_tensor_host(features, APX_DTYPE_F32, 4, (int64_t[]){1, 1, 8, 8});
  apx_tensor i = apx_tensor_host(idx, APX_DTYPE_I32, 2, (int64_t[]){1, 1});
  apx_tensor o = apx_tensor_host(out, APX_DTYPE_F32, 5, (int64_t[]){1, 1, 1, 8, 8});
  apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
  a.features = &f;
  a.idx = &i;
  a.tile = 8;
  a.out = &o;
  out[0] = -1.0f;
  ck_assert_int_eq(apx_tilepack(ctx, &a, NULL), APX_OK);
  return out[0];
}

START_TEST(typed_values_reach_the_backend) {
  apx_status st;
  const char *path;
  apx_context *ctx = open_keyed("level = 7\ngreeting = hi\nloud = yes\n", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  ck_assert(marker(ctx) == 7.0f + 100.0f + 2000.0f);
  apx_close(ctx);
  /* nothing set: the declared defaults (greeting has none) */
  ctx = open_keyed("", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  ck_assert(marker(ctx) == 5.0f);
  ck_assert_str_eq(apx_config_warnings(ctx), "");
  apx_close(ctx);
  /* the bool's spellings */
  ctx = open_keyed("loud = On\n", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  ck_assert(marker(ctx) == 105.0f);
  apx_close(ctx);
}
END_TEST

START_TEST(bad_values_are_file_line_errors) {
  static const struct {
    const char *keys, *expect;
  } cases[] = {
      {"level = 11\n", ":6: level = [11] (in [backend keyed]) is not an integer in [1, 10]"},
      {"level = 0\n", ":6: level = [0]"},
      {"\nlevel = 3x\n", ":7: level = [3x]"},
      {"level = 99999999999999999999\n", "level = [99999999999999999999]"},
      {"loud = maybe\n", ":6: loud = [maybe] (in [backend keyed]) is not one of yes, no"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    apx_status st;
    const char *path;
    apx_context *ctx = open_keyed(cases[i].keys, &st, &path);
    ck_assert_int_eq(st, APX_ERR_CONFIG);
    ck_assert_ptr_null(ctx);
    ck_assert_contains(apx_last_error(), path);
    ck_assert_contains(apx_last_error(), cases[i].expect);
  }
}
END_TEST

START_TEST(undeclared_keys_warn_only_when_loaded) {
  apx_status st;
  const char *path;
  apx_context *ctx = open_keyed("colour = red\nlevel = 2\n", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  char expect[400];
  snprintf(expect, sizeof expect,
           "%s:6: unknown key [colour] in section [backend keyed] (the keyed backend declares "
           "no such key)",
           path);
  ck_assert_contains(apx_config_warnings(ctx), expect);
  ck_assert(marker(ctx) == 2.0f);
  apx_close(ctx);
  /* a module that is not there: its keys cannot be judged, no warning */
  char fmt[512];
  snprintf(fmt, sizeof fmt, "%s",
           "[apexx]\nbackend_dir = %s\n[backend ghost]\nlibrary = fixture-ghost.so\n"
           "greeting = hello\n");
  unsetenv("APEXX_BACKEND_DIR");
  ctx = open_ok(write_ini_modules(fmt));
  ck_assert_int_eq(backend_named(ctx, "ghost")->state, APX_BACKEND_NOT_FOUND);
  ck_assert_ptr_null(strstr(apx_config_warnings(ctx), "greeting"));
  apx_close(ctx);
}
END_TEST

START_TEST(environment_overrides_the_file) {
  setenv("APEXX_FIXTURE_LOUD", "1", 1);
  apx_status st;
  const char *path;
  apx_context *ctx = open_keyed("loud = no\n", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  ck_assert(marker(ctx) == 105.0f);
  ck_assert_contains(apx_config_overrides(ctx), "APEXX_FIXTURE_LOUD=1");
  apx_close(ctx);
  /* an empty variable is unset */
  setenv("APEXX_FIXTURE_LOUD", "", 1);
  ctx = open_keyed("loud = no\n", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  ck_assert(marker(ctx) == 5.0f);
  apx_close(ctx);
  setenv("APEXX_FIXTURE_LOUD", "perhaps", 1);
  ctx = open_keyed("", &st, &path);
  ck_assert_int_eq(st, APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "APEXX_FIXTURE_LOUD = [perhaps] (for [backend keyed] loud)");
  unsetenv("APEXX_FIXTURE_LOUD");
}
END_TEST

/* The listing apexx-info --keys prints. */
START_TEST(every_key_is_listed_with_its_source) {
  setenv("APEXX_FIXTURE_LOUD", "yes", 1);
  setenv("APEXX_FIXTURE_MOOD", "calm", 1);
  apx_status st;
  const char *path;
  apx_context *ctx = open_keyed("level = 3\n", &st, &path);
  ck_assert_msg(st == APX_OK, "%s", apx_last_error());
  int n = apx_config_key_count(ctx);
  int seen_level = 0, seen_loud = 0, seen_greeting = 0, seen_mood = 0, seen_library = 0,
      seen_order = 0;
  char level_source[300];
  snprintf(level_source, sizeof level_source, "%s:6", path);
  for (int i = 0; i < n; i++) {
    apx_config_key_info k;
    ck_assert_int_eq(apx_config_key(ctx, i, &k), APX_OK);
    ck_assert_ptr_nonnull(k.section);
    ck_assert_ptr_nonnull(k.source);
    if (k.key && !strcmp(k.section, "backend keyed") && !strcmp(k.key, "level")) {
      seen_level = 1;
      ck_assert_str_eq(k.type, "int");
      ck_assert_str_eq(k.range, "[1, 10]");
      ck_assert_str_eq(k.default_value, "5");
      ck_assert_str_eq(k.value, "3");
      ck_assert_str_eq(k.source, level_source);
      ck_assert_str_eq(k.owner, "keyed");
    } else if (k.key && !strcmp(k.key, "loud")) {
      seen_loud = 1;
      ck_assert_str_eq(k.value, "yes");
      ck_assert_str_eq(k.source, "environment (APEXX_FIXTURE_LOUD)");
      ck_assert_str_eq(k.env, "APEXX_FIXTURE_LOUD");
    } else if (k.key && !strcmp(k.key, "greeting")) {
      seen_greeting = 1;
      ck_assert_ptr_null(k.value);
      ck_assert_str_eq(k.source, "unset");
    } else if (!k.key && k.env && !strcmp(k.env, "APEXX_FIXTURE_MOOD")) {
      seen_mood = 1;
      ck_assert_str_eq(k.value, "calm");
      ck_assert_str_eq(k.type, "environment");
    } else if (k.key && !strcmp(k.section, "backend keyed") && !strcmp(k.key, "library")) {
      seen_library = 1;
      ck_assert_str_eq(k.owner, "core");
      ck_assert_str_eq(k.value, "fixture-keyed.so");
    } else if (k.key && !strcmp(k.section, "apexx") && !strcmp(k.key, "order")) {
      seen_order = 1;
      ck_assert_str_eq(k.value, "keyed");
    }
  }
  ck_assert(seen_level && seen_loud && seen_greeting && seen_mood && seen_library && seen_order);
  apx_config_key_info k;
  ck_assert_int_eq(apx_config_key(ctx, n, &k), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "i = [");
  ck_assert_int_eq(apx_config_key(ctx, -1, &k), APX_ERR_INVALID_ARG);
  ck_assert_int_eq(apx_config_key(NULL, 0, &k), APX_ERR_INVALID_ARG);
  ck_assert_int_eq(apx_config_key_count(NULL), 0);
  apx_close(ctx);
  unsetenv("APEXX_FIXTURE_LOUD");
  unsetenv("APEXX_FIXTURE_MOOD");
}
END_TEST

int main(void) {
  Suite *s = suite_create("backend_keys");
  TCase *tc = tcase_create("keys");
  tcase_add_test(tc, typed_values_reach_the_backend);
  tcase_add_test(tc, bad_values_are_file_line_errors);
  tcase_add_test(tc, undeclared_keys_warn_only_when_loaded);
  tcase_add_test(tc, environment_overrides_the_file);
  tcase_add_test(tc, every_key_is_listed_with_its_source);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
