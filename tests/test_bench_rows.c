/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench rows that fail or skip, through deliberately broken backends
 * ($APEXX_TEST_MODULES/fixture-*.so): a backend whose output breaks parity
 * with the cpu backend (failed row, status failed, exit 2); one that leaves
 * its output unwritten (poison: failed); a "cpu" backend that leaves its
 * output unwritten, refused as the parity reference (docs/ops.md, Every
 * output written); a probe that fails, an op a backend lacks and a dtype it declines
 * (skipped, with the backend's own reason). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_bench_util.h"

static char *dir;

/* A fixture's path; a different buffer for each of the last four calls
 * (two may share a format). */
static const char *module(const char *name) {
  static char paths[4][4096];
  static int next;
  char *path = paths[next++ % 4];
  const char *modules = getenv("APEXX_TEST_MODULES");
  snprintf(path, sizeof paths[0], "%s/%s", modules ? modules : ".", name);
  if (!modules || access(path, R_OK) != 0) {
    printf("SKIP: fixture %s is not built (APEXX_TEST_MODULES)\n", path);
    exit(77);
  }
  return path;
}

/* An ini in the scratch directory: the real cpu backend (from
 * $APEXX_BACKEND_DIR, as make check sets it) plus fixtures. */
static char *write_config(const char *body) {
  char *path = bt_path(dir, "apexx.ini");
  bt_write(path, body);
  return path;
}

static cJSON *run_json(const char *config, const char *dtype, const char *ops,
                       int expect_status, bt_result *r) {
  char *json = bt_path(dir, "report.json");
  const char *argv[] = {"--config", config, "--dtype", dtype, "--ops", ops,
                        "--channels", "8", "--height", "16", "--width", "16",
                        "--kmax", "2", "--iters", "2", "--warmup", "1",
                        "--quiet", "--output-json", json, NULL};
  bt_run(r, NULL, argv);
  ck_assert_msg(r->status == expect_status, "exit %d (expected %d): %s", r->status,
                expect_status, r->err);
  cJSON *j = bt_load_json(json);
  ck_assert_msg(j != NULL, "no report written: %s", r->err);
  free(json);
  return j;
}

static const char *str(const cJSON *root, const char *path) {
  const cJSON *v = bt_get(root, path);
  ck_assert_msg(cJSON_IsString(v), "%s is not a string", path);
  return v->valuestring;
}

static void setup(void) { dir = bt_tmpdir(); }
static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
}

/* A configuration of the cpu backend and fixture-beta, in that order */
static char *beta_config(void) {
  char body[8192];
  snprintf(body, sizeof body,
           "[apexx]\norder = cpu, beta\n[backend cpu]\nlibrary = apexx-cpu.so\n"
           "[backend beta]\nlibrary = %s\n",
           module("fixture-beta.so"));
  return write_config(body);
}

START_TEST(parity_break_fails_the_row_and_the_run) {
  /* beta's tilepack fills f32 outputs with 222: not the cpu's answer */
  char *config = beta_config();
  bt_result r;
  cJSON *j = run_json(config, "fp32", "tilepack,tileunpack_override", 2, &r);
  ck_assert_str_eq(str(j, "status"), "failed");
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.cpu.status"), "ok");
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.beta.status"), "failed");
  const char *reason = str(j, "benchmarks.tile_ops.tilepack.rows.beta.reason");
  ck_assert_msg(strstr(reason, "parity") && strstr(reason, "bit-exactness") &&
                    strstr(reason, "[222]"),
                "%s", reason);
  ck_assert(cJSON_IsFalse(bt_get(j, "benchmarks.tile_ops.tilepack.rows.beta.parity.ok")));
  /* beta has no tileunpack: skipped with the pass-over sentence */
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tileunpack_override.rows.beta.status"),
                   "skipped");
  ck_assert_ptr_nonnull(
      strstr(str(j, "benchmarks.tile_ops.tileunpack_override.rows.beta.reason"),
             "op_unsupported"));
  /* the dispatch record names the chosen backend */
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.dispatch.backend"), "cpu");
  ck_assert_ptr_nonnull(strstr(r.err, "status failed"));
  cJSON_Delete(j);
  bt_result_free(&r);
  free(config);
}
END_TEST

START_TEST(parity_checks_every_output_of_a_backward_row) {
  /* beta's fusiongate_fuse_backward fills grad_base with 222 and gives
   * grad_detail and grad_alpha right: the row fails on its first output,
   * not the last (the case's c->output) */
  char *config = beta_config();
  bt_result r;
  cJSON *j = run_json(config, "fp32", "fusiongate_fuse_backward", 2, &r);
  const char *at = "benchmarks.tile_ops.fusiongate_fuse_backward.rows";
  char path[256];
  snprintf(path, sizeof path, "%s.cpu.status", at);
  ck_assert_str_eq(str(j, path), "ok");
  snprintf(path, sizeof path, "%s.beta.status", at);
  ck_assert_str_eq(str(j, path), "failed");
  snprintf(path, sizeof path, "%s.beta.reason", at);
  const char *reason = str(j, path);
  ck_assert_msg(strstr(reason, "parity: 2048 element(s) of grad_base break") &&
                    strstr(reason, "[222]"),
                "%s", reason);
  snprintf(path, sizeof path, "%s.beta.parity.ok", at);
  ck_assert(cJSON_IsFalse(bt_get(j, path)));
  /* the right outputs add no bad element: only grad_base's B*C*H*W */
  snprintf(path, sizeof path, "%s.beta.parity.bad_elements", at);
  ck_assert(bt_get(j, path)->valuedouble == 2048);
  snprintf(path, sizeof path, "%s.beta.parity.rule", at);
  ck_assert_str_eq(str(j, path), "|err| <= 2*(atol + rtol*|ref|); grad_alpha (sums of 8 "
                                 "terms): 6*(atol + rtol*|ref|)");
  cJSON_Delete(j);
  bt_result_free(&r);
  free(config);
}
END_TEST

START_TEST(unwritten_output_fails_the_row) {
  /* beta writes nothing for f16: its output keeps the 0xA5 poison */
  char *config = beta_config();
  bt_result r;
  cJSON *j = run_json(config, "fp16", "tilepack", 2, &r);
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.beta.status"), "failed");
  ck_assert_ptr_nonnull(strstr(str(j, "benchmarks.tile_ops.tilepack.rows.beta.reason"),
                               "parity"));
  cJSON_Delete(j);
  bt_result_free(&r);
  free(config);
}
END_TEST

START_TEST(unwritten_cpu_reference_is_refused) {
  /* a "cpu" backend that writes nothing for f16: both of its calls keep
   * their different poisons, so it cannot be the reference and its own row
   * fails; with f32 (it writes 7.0 everywhere) it is a usable reference */
  char body[8192];
  snprintf(body, sizeof body, "[apexx]\norder = cpu\n[backend cpu]\nlibrary = %s\n",
           module("fixture-bench-cpu.so"));
  char *config = write_config(body);
  bt_result r;
  cJSON *j = run_json(config, "fp16", "tilepack", 2, &r);
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.cpu.status"), "failed");
  ck_assert_msg(strstr(str(j, "benchmarks.tile_ops.tilepack.rows.cpu.reason"),
                       "cpu reference unusable") != NULL,
                "%s", str(j, "benchmarks.tile_ops.tilepack.rows.cpu.reason"));
  cJSON_Delete(j);
  bt_result_free(&r);
  j = run_json(config, "fp32", "tilepack", 0, &r);
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.cpu.status"), "ok");
  cJSON_Delete(j);
  bt_result_free(&r);
  free(config);
}
END_TEST

START_TEST(unusable_backends_and_declined_dtypes_skip_with_reasons) {
  char body[8192];
  snprintf(body, sizeof body,
           "[apexx]\norder = cpu, alpha, probe\n[backend cpu]\nlibrary = apexx-cpu.so\n"
           "[backend alpha]\nlibrary = %s\n[backend probe]\nlibrary = %s\n",
           module("fixture-alpha.so"), module("fixture-probe.so"));
  char *config = write_config(body);
  bt_result r;
  /* alpha declines f16 tilepack; probe's probe fails */
  cJSON *j = run_json(config, "fp16", "tilepack", 0, &r);
  ck_assert_str_eq(str(j, "status"), "ok");
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.alpha.status"), "skipped");
  ck_assert_ptr_nonnull(
      strstr(str(j, "benchmarks.tile_ops.tilepack.rows.alpha.reason"), "takes no f16"));
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.rows.probe.status"), "skipped");
  ck_assert_msg(strstr(str(j, "benchmarks.tile_ops.tilepack.rows.probe.reason"),
                       "fixture probe says no: widget missing") != NULL,
                "%s", str(j, "benchmarks.tile_ops.tilepack.rows.probe.reason"));
  /* the dispatch record lists each pass-over with its code */
  const cJSON *p;
  int saw_alpha = 0, saw_probe = 0;
  cJSON_ArrayForEach(p, bt_get(j, "benchmarks.tile_ops.tilepack.dispatch.passed_over")) {
    const char *b = str(p, "backend"), *code = str(p, "code");
    if (strcmp(b, "alpha") == 0) saw_alpha = strcmp(code, "dtype_unsupported") == 0;
    if (strcmp(b, "probe") == 0) saw_probe = strcmp(code, "unavailable") == 0;
  }
  /* order is cpu first: cpu wins and the others are not needed, or listed */
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.dispatch.backend"), "cpu");
  (void)saw_alpha;
  (void)saw_probe;
  /* the backends list carries the probe's reason */
  const cJSON *b;
  int found = 0;
  cJSON_ArrayForEach(b, bt_get(j, "backends")) {
    if (strcmp(str(b, "name"), "probe") == 0) {
      found = 1;
      ck_assert_str_eq(str(b, "state"), "unavailable");
      ck_assert_ptr_nonnull(strstr(str(b, "reason"), "widget missing"));
    }
  }
  ck_assert(found);
  cJSON_Delete(j);
  bt_result_free(&r);
  free(config);
}
END_TEST

START_TEST(dispatch_records_every_pass_over) {
  /* alpha and probe ahead of cpu in the order: both are passed over, each
   * with its code, before cpu is chosen */
  char body[8192];
  snprintf(body, sizeof body,
           "[apexx]\norder = probe, alpha, cpu\n[backend cpu]\nlibrary = apexx-cpu.so\n"
           "[backend alpha]\nlibrary = %s\n[backend probe]\nlibrary = %s\n",
           module("fixture-alpha.so"), module("fixture-probe.so"));
  char *config = write_config(body);
  bt_result r;
  cJSON *j = run_json(config, "fp16", "tilepack", 0, &r);
  ck_assert_str_eq(str(j, "benchmarks.tile_ops.tilepack.dispatch.backend"), "cpu");
  const cJSON *p;
  int saw_alpha = 0, saw_probe = 0;
  cJSON_ArrayForEach(p, bt_get(j, "benchmarks.tile_ops.tilepack.dispatch.passed_over")) {
    const char *b = str(p, "backend"), *code = str(p, "code");
    ck_assert(strlen(str(p, "reason")) > 0);
    if (strcmp(b, "alpha") == 0) saw_alpha = strcmp(code, "dtype_unsupported") == 0;
    if (strcmp(b, "probe") == 0) saw_probe = strcmp(code, "unavailable") == 0;
  }
  char *dump = cJSON_Print(bt_get(j, "benchmarks.tile_ops.tilepack.dispatch"));
  ck_assert_msg(saw_alpha && saw_probe, "%s", dump);
  free(dump);
  cJSON_Delete(j);
  bt_result_free(&r);
  free(config);
}
END_TEST

int main(void) {
  bt_bench();
  Suite *s = suite_create("bench_rows");
  TCase *tc = tcase_create("rows");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, parity_break_fails_the_row_and_the_run);
  tcase_add_test(tc, parity_checks_every_output_of_a_backward_row);
  tcase_add_test(tc, unwritten_output_fails_the_row);
  tcase_add_test(tc, unwritten_cpu_reference_is_refused);
  tcase_add_test(tc, unusable_backends_and_declined_dtypes_skip_with_reasons);
  tcase_add_test(tc, dispatch_records_every_pass_over);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
