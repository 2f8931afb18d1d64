/* apexx-bench compare on synthetic reports written here: pass, time and
 * rate regressions at and past the allowed bound, --max-abs-ms, missing
 * metrics, rows skipped in both, a failed current status, unusable input
 * (unreadable, malformed, wrong schema major), baseline files from
 * --emit-baseline with per-metric tolerances, and the summary JSON. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_bench_util.h"

/* A minimal apexx report: tile_ops.tilepack with a cpu row (p50, p95,
 * tiles_per_s, gb_per_s) and a cuda row that is ok (with p50) or skipped. */
static cJSON *make_report(double p50, double p95, double tiles_per_s,
                          const char *status, int cuda_ok, double cuda_p50) {
  cJSON *r = cJSON_CreateObject();
  cJSON *sv = cJSON_AddObjectToObject(r, "schema_version");
  cJSON_AddNumberToObject(sv, "major", 1);
  cJSON_AddNumberToObject(sv, "minor", 0);
  cJSON_AddStringToObject(r, "suite", "apexx");
  cJSON_AddStringToObject(r, "timestamp_utc", "2026-01-01T00:00:00Z");
  cJSON *config = cJSON_AddObjectToObject(r, "config");
  cJSON_AddNumberToObject(config, "channels", 8);
  cJSON_AddStringToObject(r, "status", status);
  cJSON *entry = cJSON_AddObjectToObject(
      cJSON_AddObjectToObject(cJSON_AddObjectToObject(r, "benchmarks"), "tile_ops"),
      "tilepack");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(entry, "work"), "throughput",
                          "tiles_per_s");
  cJSON *rows = cJSON_AddObjectToObject(entry, "rows");
  cJSON *cpu = cJSON_AddObjectToObject(rows, "cpu");
  cJSON_AddStringToObject(cpu, "status", "ok");
  cJSON_AddNullToObject(cpu, "reason");
  if (!isnan(p50)) cJSON_AddNumberToObject(cpu, "p50_ms", p50);
  if (!isnan(p95)) cJSON_AddNumberToObject(cpu, "p95_ms", p95);
  cJSON_AddNumberToObject(cpu, "tiles_per_s", tiles_per_s);
  cJSON_AddNumberToObject(cpu, "gb_per_s", 1.0);
  cJSON *cuda = cJSON_AddObjectToObject(rows, "cuda");
  if (cuda_ok) {
    cJSON_AddStringToObject(cuda, "status", "ok");
    cJSON_AddNumberToObject(cuda, "p50_ms", cuda_p50);
  } else {
    cJSON_AddStringToObject(cuda, "status", "skipped");
    cJSON_AddStringToObject(cuda, "reason", "unavailable: no GPU");
  }
  return r;
}

static char *dir;

static char *save(const char *name, cJSON *json) {
  char *path = bt_path(dir, name);
  bt_save_json(path, json);
  cJSON_Delete(json);
  return path;
}

/* Run compare; returns the exit status, output in *r (caller frees). */
static int compare(bt_result *r, const char *base, const char *cur,
                   const char *extra1, const char *extra2) {
  const char *argv[8] = {"compare", base, cur, extra1, extra2, NULL};
  if (!extra1) argv[3] = NULL;
  bt_run(r, NULL, argv);
  return r->status;
}

static void setup(void) { dir = bt_tmpdir(); }
static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
}

START_TEST(identical_reports_pass) {
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, base, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "compare status=pass"));
  /* p50, p95, tiles_per_s, gb_per_s, the skipped cuda row */
  ck_assert_ptr_nonnull(strstr(r.out, "metrics=5 failed=0"));
  ck_assert_ptr_nonnull(
      strstr(r.out, "metric=benchmarks.tile_ops.tilepack.rows.cpu.p50_ms kind=time "
                    "status=pass"));
  bt_result_free(&r);
  free(base);
}
END_TEST

START_TEST(time_at_the_bound_passes_past_it_fails) {
  /* default ratio 0.5: allowed = 2.0*1.5 + 0 = 3.0 (exact in binary) */
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *at = save("at.json", make_report(3.0, 3.0, 1000, "ok", 0, 0));
  char *past = save("past.json", make_report(3.001, 3.0, 1000, "ok", 0, 0));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, at, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, past, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "compare status=fail"));
  ck_assert_ptr_nonnull(strstr(r.out, "rows.cpu.p50_ms kind=time status=fail"));
  bt_result_free(&r);
  /* --max-abs-ms widens the bound: 3.0 + 0.01 */
  ck_assert_int_eq(compare(&r, base, past, "--max-abs-ms", "0.01"), 0);
  bt_result_free(&r);
  /* --max-ratio too: 2.0*2 = 4.0 */
  char *slow = save("slow.json", make_report(3.9, 3.0, 1000, "ok", 0, 0));
  ck_assert_int_eq(compare(&r, base, slow, NULL, NULL), 2);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, slow, "--max-ratio", "1.0"), 0);
  bt_result_free(&r);
  free(base);
  free(at);
  free(past);
  free(slow);
}
END_TEST

START_TEST(rate_regression_fails) {
  /* rates: fail when current < base/(1+R) = 1000/1.5 = 666.67 */
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *ok = save("ok.json", make_report(2.0, 3.0, 667, "ok", 0, 0));
  char *slow = save("slow.json", make_report(2.0, 3.0, 666, "ok", 0, 0));
  char *faster = save("faster.json", make_report(0.5, 0.5, 5000, "ok", 0, 0));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, ok, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, slow, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "rows.cpu.tiles_per_s kind=rate status=fail"));
  bt_result_free(&r);
  /* getting faster is never a regression */
  ck_assert_int_eq(compare(&r, base, faster, NULL, NULL), 0);
  bt_result_free(&r);
  free(base);
  free(ok);
  free(slow);
  free(faster);
}
END_TEST

START_TEST(missing_metric_fails) {
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *cur = save("cur.json", make_report(2.0, NAN, 1000, "ok", 0, 0));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "rows.cpu.p95_ms kind=time status=missing"));
  bt_result_free(&r);
  free(base);
  free(cur);
}
END_TEST

START_TEST(skipped_in_both_passes_skipped_now_fails) {
  /* cuda skipped in both: fine; cuda ran in the baseline but is skipped
   * now: its p50 is missing */
  char *skipped = save("skipped.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *ran = save("ran.json", make_report(2.0, 3.0, 1000, "ok", 1, 0.5));
  bt_result r;
  ck_assert_int_eq(compare(&r, skipped, skipped, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "rows.cuda kind=row status=skipped"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, ran, skipped, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "rows.cuda.p50_ms kind=time status=missing"));
  bt_result_free(&r);
  /* skipped in the baseline, running now: nothing to hold it to */
  ck_assert_int_eq(compare(&r, skipped, ran, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "rows.cuda kind=row status=new"));
  bt_result_free(&r);
  free(skipped);
  free(ran);
}
END_TEST

START_TEST(failed_current_status_fails) {
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *cur = save("cur.json", make_report(2.0, 3.0, 1000, "failed", 0, 0));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, NULL, NULL), 2);
  ck_assert_ptr_nonnull(
      strstr(r.out, "metric=__status__ status=fail expected=ok current=failed"));
  bt_result_free(&r);
  free(base);
  free(cur);
}
END_TEST

START_TEST(unusable_input_exits_1) {
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *malformed = bt_path(dir, "malformed.json");
  bt_write(malformed, "{\"schema_version\": {\"major\": 1, \"minor\": 0}, \"suite\": ");
  cJSON *v2 = make_report(2.0, 3.0, 1000, "ok", 0, 0);
  cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(v2, "schema_version"),
                                         "major", cJSON_CreateNumber(2));
  char *major2 = save("major2.json", v2);
  /* the reference suite's integer schema_version is not ours */
  cJSON *ref = make_report(2.0, 3.0, 1000, "ok", 0, 0);
  cJSON_ReplaceItemInObjectCaseSensitive(ref, "schema_version", cJSON_CreateNumber(1));
  char *reference = save("reference.json", ref);
  char *missing = bt_path(dir, "does-not-exist.json");
  char *not_report = bt_path(dir, "array.json");
  bt_write(not_report, "{\"schema_version\": {\"major\": 1, \"minor\": 0}}");
  const struct {
    const char *base, *cur, *mention;
  } cases[] = {{base, malformed, "not valid JSON"},
               {malformed, base, "not valid JSON"},
               {base, major2, "schema_version.major = [2]"},
               {major2, base, "schema_version.major = [2]"},
               {base, reference, "schema_version is not"},
               {missing, base, "cannot read"},
               {base, missing, "cannot read"},
               {base, not_report, "neither an apexx report"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    bt_result r;
    ck_assert_msg(compare(&r, cases[i].base, cases[i].cur, NULL, NULL) == 1,
                  "case %zu: exit %d", i, r.status);
    ck_assert_msg(strstr(r.err, cases[i].mention) != NULL, "case %zu: %s", i, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "unusable input"));
    bt_result_free(&r);
  }
  free(base);
  free(malformed);
  free(major2);
  free(reference);
  free(missing);
  free(not_report);
}
END_TEST

START_TEST(emitted_baseline_round_trip) {
  char *report = save("report.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *baseline = bt_path(dir, "baseline.json");
  const char *emit[] = {"compare", "--emit-baseline", report, "-o", baseline, NULL};
  bt_result r;
  bt_run(&r, NULL, emit);
  ck_assert_msg(r.status == 0, "emit: %s", r.err);
  bt_result_free(&r);
  cJSON *b = bt_load_json(baseline);
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(bt_get(b, "kind")->valuestring, "apexx-bench-baseline");
  ck_assert_int_eq((int)bt_get(b, "schema_version.major")->valuedouble, 1);
  const cJSON *metrics = bt_get(b, "metrics");
  ck_assert_int_eq(cJSON_GetArraySize(metrics), 5);
  const cJSON *first = cJSON_GetArrayItem(metrics, 0);
  ck_assert_str_eq(bt_get(first, "path")->valuestring,
                   "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms");
  ck_assert(bt_get(first, "value")->valuedouble == 2.0);

  char *slow = save("slow.json", make_report(5.0, 3.0, 1000, "ok", 0, 0));
  ck_assert_int_eq(compare(&r, baseline, report, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, baseline, slow, NULL, NULL), 2);
  bt_result_free(&r);
  /* a per-metric tolerance in the baseline file wins over the flags */
  cJSON_AddNumberToObject((cJSON *)first, "max_ratio", 2.0);
  bt_save_json(baseline, b);
  ck_assert_int_eq(compare(&r, baseline, slow, NULL, NULL), 0);
  bt_result_free(&r);
  /* a baseline path the current report lacks is missing */
  cJSON_ReplaceItemInObjectCaseSensitive(
      (cJSON *)first, "path",
      cJSON_CreateString("benchmarks.tile_ops.tilepack.rows.cpu.p99_ms"));
  bt_save_json(baseline, b);
  ck_assert_int_eq(compare(&r, baseline, report, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "p99_ms kind=time status=missing"));
  bt_result_free(&r);
  /* CURRENT must be a report, not a baseline file */
  ck_assert_int_eq(compare(&r, report, baseline, NULL, NULL), 1);
  bt_result_free(&r);
  cJSON_Delete(b);
  free(report);
  free(baseline);
  free(slow);
}
END_TEST

START_TEST(summary_json_records_each_check) {
  char *base = save("base.json", make_report(2.0, 3.0, 1000, "ok", 0, 0));
  char *cur = save("cur.json", make_report(4.0, 3.0, 1000, "ok", 0, 0));
  char *summary = bt_path(dir, "summary.json");
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, "--output-json", summary), 2);
  bt_result_free(&r);
  cJSON *s = bt_load_json(summary);
  ck_assert_ptr_nonnull(s);
  ck_assert_str_eq(bt_get(s, "status")->valuestring, "fail");
  ck_assert_int_eq((int)bt_get(s, "failed_metrics")->valuedouble, 1);
  ck_assert_int_eq((int)bt_get(s, "schema_version.major")->valuedouble, 1);
  const cJSON *check;
  int found = 0;
  cJSON_ArrayForEach(check, bt_get(s, "checks")) {
    if (strcmp(bt_get(check, "metric")->valuestring,
               "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms") != 0) {
      continue;
    }
    found = 1;
    ck_assert_str_eq(bt_get(check, "status")->valuestring, "fail");
    ck_assert(bt_get(check, "baseline")->valuedouble == 2.0);
    ck_assert(bt_get(check, "allowed")->valuedouble == 3.0);
    ck_assert(bt_get(check, "current")->valuedouble == 4.0);
    ck_assert(bt_get(check, "regression_ratio")->valuedouble == 1.0);
  }
  ck_assert(found);
  cJSON_Delete(s);
  free(base);
  free(cur);
  free(summary);
}
END_TEST

int main(void) {
  bt_bench();
  Suite *s = suite_create("bench_compare");
  TCase *tc = tcase_create("compare");
  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, identical_reports_pass);
  tcase_add_test(tc, time_at_the_bound_passes_past_it_fails);
  tcase_add_test(tc, rate_regression_fails);
  tcase_add_test(tc, missing_metric_fails);
  tcase_add_test(tc, skipped_in_both_passes_skipped_now_fails);
  tcase_add_test(tc, failed_current_status_fails);
  tcase_add_test(tc, unusable_input_exits_1);
  tcase_add_test(tc, emitted_baseline_round_trip);
  tcase_add_test(tc, summary_json_records_each_check);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
