/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx/config.c: the INI file through inih, lookup order, environment
 * overrides, errors with file:line, warnings for unknown keys. */
#include "coretest.h"

START_TEST(good_file_is_read) {
  const char *path = write_ini("[apexx]\norder = cpu\nvalidate = eager\n"
                               "[backend cpu]\nlibrary = apexx-cpu.so\nthreads = 1\n");
  apx_context *ctx = open_ok(path);
  ck_assert_str_eq(apx_config_source(ctx), path);
  ck_assert_str_eq(apx_config_warnings(ctx), "");
  ck_assert_int_eq(apx_backend_count(ctx), 1);
  const struct apx_backend_info *cpu = backend_named(ctx, "cpu");
  ck_assert_msg(cpu->state == APX_BACKEND_OK, "cpu: %s", cpu->reason);
  const char *order[APX_MAX_BACKENDS];
  int n = 0;
  ck_assert_int_eq(apx_op_order(ctx, APX_OP_TILEPACK, order, &n), APX_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(order[0], "cpu");
  apx_close(ctx);
  unlink(path);
}
END_TEST

START_TEST(malformed_line_names_file_and_line) {
  const char *path = write_ini("[apexx]\norder = cpu\nthis line is not ini\n[backend cpu]\n");
  apx_context *ctx = (apx_context *)1;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_ptr_null(ctx);
  char expect[300];
  snprintf(expect, sizeof expect, "%s:3:", path);
  ck_assert_contains(apx_last_error(), expect);
  unlink(path);
}
END_TEST

START_TEST(unknown_key_is_a_warning_with_its_line) {
  const char *path = write_ini("[backend cpu]\ncolour = blue\n[apexx]\norder = cpu\n"
                               "[op tilepak]\norder = cpu\n[weird]\nx = 1\n");
  apx_context *ctx = open_ok(path);
  char expect[300];
  snprintf(expect, sizeof expect, "%s:2: unknown key [colour]", path);
  ck_assert_contains(apx_config_warnings(ctx), expect);
  ck_assert_contains(apx_config_warnings(ctx), "unknown op [tilepak]");
  ck_assert_contains(apx_config_warnings(ctx), "unknown section [weird]");
  apx_close(ctx);
  unlink(path);
}
END_TEST

/* issue 30 item 12: a 17th backend section is an error whether or not it
 * has keys (one without keys was dropped: APX_OK and no such backend) */
START_TEST(seventeenth_backend_section_is_an_error) {
  char text[4096] = "";
  size_t len = 0;
  for (int i = 0; i < APX_MAX_BACKENDS; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "[backend b%d]\nenabled = no\n", i);
  char with[4096];
  for (int keys = 0; keys < 2; keys++) {
    snprintf(with, sizeof with, "%s[backend cpu]\n%s", text, keys ? "threads = 1\n" : "");
    const char *path = write_ini(with);
    apx_context *ctx = NULL;
    ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
    char expect[400];
    snprintf(expect, sizeof expect, "%s:%d: too many backends (at most 16), at [backend cpu]",
             path, 2 * APX_MAX_BACKENDS + 1); /* the header's line */
    ck_assert_contains(apx_last_error(), expect);
    unlink(path);
  }
  /* a section repeated after 16 is not a new backend */
  snprintf(with, sizeof with, "%s[backend b3]\n", text);
  const char *path = write_ini(with);
  apx_context *ctx = open_ok(path);
  ck_assert_int_eq(apx_backend_count(ctx), APX_MAX_BACKENDS);
  apx_close(ctx);
  unlink(path);
}
END_TEST

START_TEST(bad_values_are_errors_with_their_line) {
  static const struct {
    const char *text, *expect;
  } cases[] = {
      {"[backend cpu]\nenabled = maybe\n", ":2: enabled = [maybe]"},
      {"[apexx]\n\nvalidate = sometimes\n", ":3: validate = [sometimes]"},
      {"[backend cpu]\nthreads = many\n", ":2: threads = [many]"},
      {"[backend cuda]\ndevice = -3\n", ":2: device = [-3]"},
      {"[backend cpu]\n[apexx]\norder = cpu, ghost\n", "names backend [ghost]"},
      {"[backend cpu]\n[op gather]\norder = phantom\n", "[op gather] order names backend [phantom]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *path = write_ini(cases[i].text);
    apx_context *ctx = NULL;
    ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
    ck_assert_contains(apx_last_error(), cases[i].expect);
    ck_assert_contains(apx_last_error(), path);
    unlink(path);
  }
}
END_TEST

START_TEST(missing_explicit_file_is_an_error) {
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, "/nonexistent/apexx.ini"), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "/nonexistent/apexx.ini: cannot open");
}
END_TEST

START_TEST(apexx_config_env_is_used_and_recorded) {
  const char *path = write_ini("[apexx]\norder = cpu\n[backend cpu]\n");
  setenv("APEXX_CONFIG", path, 1);
  apx_context *ctx = open_ok(NULL);
  ck_assert_str_eq(apx_config_source(ctx), path);
  char expect[300];
  snprintf(expect, sizeof expect, "APEXX_CONFIG=%s", path);
  ck_assert_contains(apx_config_overrides(ctx), expect);
  apx_close(ctx);
  unlink(path);
}
END_TEST

/* issue 30 item 20: a relative backend_dir starts at the configuration's
 * directory, whatever the working directory; a relative
 * $APEXX_BACKEND_DIR is refused. */
START_TEST(relative_backend_dir_resolves_in_the_config_directory) {
  char *saved_dir = strdup(getenv("APEXX_BACKEND_DIR"));
  char cwd[4096];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  char top[] = "/tmp/apexx-reldir-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(top));
  char cmd[2048], sub[600], config[600], decoy[600];
  /* top/conf/apexx.ini with backend_dir = mods; the module in top/conf/mods;
   * a decoy directory top/mods (where the working directory would lead) */
  snprintf(cmd, sizeof cmd,
           "mkdir -p '%s/conf/mods' '%s/mods' && cp '%s/fixture-alpha.so' '%s/conf/mods/' && "
           "cp '%s/fixture-beta.so' '%s/mods/fixture-alpha.so'",
           top, top, getenv("APEXX_TEST_MODULES"), top, getenv("APEXX_TEST_MODULES"), top);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(sub, sizeof sub, "%s/conf/mods/fixture-alpha.so", top);
  snprintf(config, sizeof config, "%s/conf/apexx.ini", top);
  FILE *f = fopen(config, "w");
  ck_assert_ptr_nonnull(f);
  fputs("[apexx]\nbackend_dir = mods\n[backend alpha]\nlibrary = fixture-alpha.so\n", f);
  fclose(f);
  unsetenv("APEXX_BACKEND_DIR");
  ck_assert_int_eq(chdir(top), 0);
  /* the file named absolutely, and relatively from top */
  const char *paths[] = {config, "conf/apexx.ini"};
  for (int p = 0; p < 2; p++) {
    apx_context *ctx = open_ok(paths[p]);
    const struct apx_backend_info *alpha = backend_named(ctx, "alpha");
    ck_assert_msg(alpha->state == APX_BACKEND_OK, "alpha: %s", alpha->reason);
    ck_assert_str_eq(alpha->library, sub);
    apx_close(ctx);
  }
  /* a relative APEXX_BACKEND_DIR: refused, naming it */
  snprintf(decoy, sizeof decoy, "mods");
  setenv("APEXX_BACKEND_DIR", decoy, 1);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, config), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "APEXX_BACKEND_DIR = [mods] is not an absolute path");
  ck_assert_int_eq(chdir(cwd), 0);
  setenv("APEXX_BACKEND_DIR", saved_dir, 1); /* for the next tests under CK_FORK=no */
  free(saved_dir);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* issue 30 item 20: a value of APEXX_CPU_ISA or APEXX_CPU_SIMD the cpu
 * backend does not know is a warning naming the variable and the value. */
START_TEST(unknown_cpu_isa_values_are_warned) {
  const char *path = write_ini("[backend cpu]\n");
  static const struct {
    const char *isa, *simd, *expect;
  } cases[] = {
      {"avx9000", NULL, "cpu: APEXX_CPU_ISA = [avx9000] is not one of portable, avx2: ignored"},
      {NULL, "of", "cpu: APEXX_CPU_SIMD = [of] is not one of off, avx2: ignored"},
      {"AVX2", "0", "APEXX_CPU_ISA = [AVX2] is not one of portable, avx2; APEXX_CPU_SIMD = [0]"},
      {"portable", "off", NULL},
      {"avx2", "", NULL},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    if (cases[c].isa) setenv("APEXX_CPU_ISA", cases[c].isa, 1);
    if (cases[c].simd) setenv("APEXX_CPU_SIMD", cases[c].simd, 1);
    apx_context *ctx = NULL;
    char log[8192];
    apx_status st = open_capturing_log(path, &ctx, log, sizeof log);
    unsetenv("APEXX_CPU_ISA");
    unsetenv("APEXX_CPU_SIMD");
    ck_assert_msg(st == APX_OK, "%s", apx_last_error());
    ck_assert_int_eq(backend_named(ctx, "cpu")->state, APX_BACKEND_OK);
    if (cases[c].expect)
      ck_assert_contains(log, cases[c].expect);
    else
      ck_assert_msg(strstr(log, "APEXX_CPU") == NULL, "case %zu warned: %s", c, log);
    apx_close(ctx);
  }
  unlink(path);
}
END_TEST

START_TEST(backend_dir_env_overrides_the_file) {
  const char *path = write_ini("[apexx]\nbackend_dir = /nonexistent/dir\n[backend cpu]\n");
  apx_context *ctx = open_ok(path); /* APEXX_BACKEND_DIR set by make check */
  ck_assert_int_eq(backend_named(ctx, "cpu")->state, APX_BACKEND_OK);
  ck_assert_contains(apx_config_overrides(ctx), "APEXX_BACKEND_DIR=");
  apx_close(ctx);
  char *saved = strdup(getenv("APEXX_BACKEND_DIR"));
  unsetenv("APEXX_BACKEND_DIR");
  ctx = open_ok(path);
  const struct apx_backend_info *cpu = backend_named(ctx, "cpu");
  ck_assert_int_eq(cpu->state, APX_BACKEND_NOT_FOUND);
  ck_assert_contains(cpu->reason, "/nonexistent/dir/apexx-cpu.so not found");
  apx_close(ctx);
  setenv("APEXX_BACKEND_DIR", saved, 1); /* for the next tests under CK_FORK=no */
  free(saved);
  unlink(path);
}
END_TEST

START_TEST(apexx_backend_env_forces_and_is_checked) {
  const char *path = write_ini("[apexx]\norder = cpu\n[backend cpu]\n");
  setenv("APEXX_BACKEND", "cpu", 1);
  apx_context *ctx = open_ok(path);
  ck_assert_contains(apx_config_overrides(ctx), "APEXX_BACKEND=cpu");
  apx_close(ctx);
  setenv("APEXX_BACKEND", "warp-drive", 1);
  ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "APEXX_BACKEND = [warp-drive]");
  unsetenv("APEXX_BACKEND"); /* CK_FORK=no runs the next tests in this process */
  unlink(path);
}
END_TEST

START_TEST(world_writable_file_is_refused) {
  const char *path = write_ini("[backend cpu]\n");
  ck_assert_int_eq(chmod(path, 0666), 0);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_contains(apx_last_error(), "world-writable");
  unlink(path);
}
END_TEST

START_TEST(builtin_default_without_any_file) {
  unsetenv("APEXX_CONFIG");
  apx_context *ctx = open_ok(NULL);
  if (access(APEXX_SYSCONF_INI, F_OK) == 0) {
    ck_assert_str_eq(apx_config_source(ctx), APEXX_SYSCONF_INI);
  } else {
    ck_assert_str_eq(apx_config_source(ctx), "");
    ck_assert_int_eq(apx_backend_count(ctx), 3);
    const char *order[APX_MAX_BACKENDS];
    int n = 0;
    ck_assert_int_eq(apx_op_order(ctx, APX_OP_GATHER, order, &n), APX_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(order[0], "cuda");
    ck_assert_str_eq(order[1], "trt");
    ck_assert_str_eq(order[2], "cpu");
  }
  /* the build tree's modules are found through APEXX_BACKEND_DIR */
  ck_assert_int_eq(backend_named(ctx, "cpu")->state, APX_BACKEND_OK);
  apx_close(ctx);
}
END_TEST

START_TEST(enabled_no_and_yes) {
  const char *path = write_ini("[backend cpu]\nenabled = no\n");
  apx_context *ctx = open_ok(path);
  const struct apx_backend_info *cpu = backend_named(ctx, "cpu");
  ck_assert_int_eq(cpu->state, APX_BACKEND_DISABLED);
  ck_assert_contains(cpu->reason, "enabled = no");
  apx_close(ctx);
  unlink(path);
  path = write_ini("[backend cpu]\n[backend ghost]\nlibrary = apexx-ghost.so\nenabled = yes\n");
  ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_BACKEND);
  ck_assert_contains(apx_last_error(), "backend ghost has enabled = yes but is not_found");
  ck_assert_ptr_null(ctx);
  unlink(path);
}
END_TEST

START_TEST(per_op_order) {
  const char *path = write_ini("[apexx]\norder = cpu, cuda\n[backend cpu]\n[backend cuda]\n"
                               "[op tilessm_scan]\norder = cuda\n");
  apx_context *ctx = open_ok(path);
  const char *order[APX_MAX_BACKENDS];
  int n = 0;
  ck_assert_int_eq(apx_op_order(ctx, APX_OP_TILESSM_SCAN, order, &n), APX_OK);
  ck_assert_int_eq(n, 2); /* cuda first, then cpu that the order left out */
  ck_assert_str_eq(order[0], "cuda");
  ck_assert_str_eq(order[1], "cpu");
  ck_assert_int_eq(apx_op_order(ctx, APX_OP_TILEPACK, order, &n), APX_OK);
  ck_assert_str_eq(order[0], "cpu");
  apx_close(ctx);
  unlink(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, good_file_is_read);
  tcase_add_test(tc, malformed_line_names_file_and_line);
  tcase_add_test(tc, unknown_key_is_a_warning_with_its_line);
  tcase_add_test(tc, bad_values_are_errors_with_their_line);
  tcase_add_test(tc, seventeenth_backend_section_is_an_error);
  tcase_add_test(tc, relative_backend_dir_resolves_in_the_config_directory);
  tcase_add_test(tc, unknown_cpu_isa_values_are_warned);
  tcase_add_test(tc, missing_explicit_file_is_an_error);
  tcase_add_test(tc, apexx_config_env_is_used_and_recorded);
  tcase_add_test(tc, backend_dir_env_overrides_the_file);
  tcase_add_test(tc, apexx_backend_env_forces_and_is_checked);
  tcase_add_test(tc, world_writable_file_is_refused);
  tcase_add_test(tc, builtin_default_without_any_file);
  tcase_add_test(tc, enabled_no_and_yes);
  tcase_add_test(tc, per_op_order);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
