/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare on synthetic reports written here (schema 1.1 rows
 * with per-repetition medians, and 1.0 rows without): identical samples
 * pass, a 20% shift with tight samples regresses, the same shift inside
 * wide noise is inconclusive (exit 3, never unchanged), improvements,
 * missing rows, a failed current status, profile/dtype/backend/machine
 * mismatches (exit 1 unless --allow-mismatch; the host and the 1.3 machine
 * id included), stale baselines, 1.0 reports, the Markdown table,
 * unusable input (unreadable, malformed, wrong major, duplicate keys,
 * non-finite numbers, negative times), baseline files from --emit-baseline
 * the summary JSON, --statistic min (the per-repetition minima) and a
 * timer mismatch. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_bench_util.h"

#define REPS 7

/* A report with one tile_ops.tilepack cpu row whose repetitions are
 * centre * (1 + spread * k/(REPS-1) - spread/2), k = 0..REPS-1 (so the
 * median is centre), and a skipped cuda row. minor 0 writes a 1.0 row:
 * p50 = centre and p95 = centre * (1 + spread), no repetitions. */
static cJSON *make_report(int minor, double centre, double spread) {
  cJSON *r = cJSON_CreateObject();
  cJSON *sv = cJSON_AddObjectToObject(r, "schema_version");
  cJSON_AddNumberToObject(sv, "major", 1);
  cJSON_AddNumberToObject(sv, "minor", minor);
  cJSON_AddStringToObject(r, "suite", "apexx");
  cJSON_AddStringToObject(r, "timestamp_utc", "2026-01-01T00:00:00Z");
  cJSON *env = cJSON_AddObjectToObject(r, "environment");
  cJSON_AddStringToObject(env, "host", "box");
  cJSON_AddStringToObject(env, "cpu_model", "Test CPU");
  cJSON_AddNumberToObject(env, "cpu_cores", 2);
  cJSON_AddNullToObject(env, "gpu");
  cJSON_AddStringToObject(env, "library_version", "0.1.0");
  if (minor >= 1)
    cJSON_AddNumberToObject(env, "backend_abi_version", 1);
  cJSON *config = cJSON_AddObjectToObject(r, "config");
  cJSON_AddNumberToObject(config, "channels", 8);
  cJSON_AddStringToObject(config, "dtype", "fp16");
  cJSON *backends = cJSON_AddArrayToObject(config, "backends");
  cJSON_AddItemToArray(backends, cJSON_CreateString("cpu"));
  cJSON_AddItemToArray(backends, cJSON_CreateString("cuda"));
  cJSON_AddStringToObject(r, "status", "ok");
  cJSON *entry = cJSON_AddObjectToObject(
      cJSON_AddObjectToObject(cJSON_AddObjectToObject(r, "benchmarks"), "tile_ops"), "tilepack");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(entry, "work"), "throughput", "tiles_per_s");
  cJSON *rows = cJSON_AddObjectToObject(entry, "rows");
  cJSON *cpu = cJSON_AddObjectToObject(rows, "cpu");
  cJSON_AddStringToObject(cpu, "status", "ok");
  cJSON_AddNullToObject(cpu, "reason");
  cJSON_AddNumberToObject(cpu, "p50_ms", centre);
  cJSON_AddNumberToObject(cpu, "p95_ms", centre * (1 + spread));
  cJSON_AddNumberToObject(cpu, "tiles_per_s", 1.0 / centre);
  if (minor >= 1) {
    cJSON *reps = cJSON_AddObjectToObject(cpu, "repetitions");
    cJSON_AddNumberToObject(reps, "n", REPS);
    cJSON_AddNumberToObject(reps, "median_ms", centre);
    cJSON *med = cJSON_AddArrayToObject(reps, "medians_ms");
    for (int k = 0; k < REPS; k++) {
      double v = centre * (1 + spread * k / (REPS - 1) - spread / 2);
      cJSON_AddItemToArray(med, cJSON_CreateNumber(v));
    }
  }
  cJSON *cuda = cJSON_AddObjectToObject(rows, "cuda");
  cJSON_AddStringToObject(cuda, "status", "skipped");
  cJSON_AddStringToObject(cuda, "reason", "unavailable: no GPU");
  return r;
}

static char *dir;

static char *save(const char *name, cJSON *json) {
  char *path = bt_path(dir, name);
  bt_save_json(path, json);
  cJSON_Delete(json);
  return path;
}

/* Run compare with up to four extra arguments; returns the exit status. */
static int compare(bt_result *r, const char *base, const char *cur, const char *x1, const char *x2,
                   const char *x3, const char *x4) {
  const char *argv[10] = {"compare", base, cur, x1, x2, x3, x4, NULL};
  bt_run(r, NULL, argv);
  return r->status;
}

#define TILEPACK "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms"

static void setup(void) { dir = bt_tmpdir(); }
static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
}

START_TEST(identical_samples_pass) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, base, NULL, NULL, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "compare status=pass"));
  ck_assert_ptr_nonnull(
      strstr(r.out, "regressed=0 improved=0 unchanged=1 inconclusive=0 missing=0"));
  ck_assert_ptr_nonnull(strstr(r.out, " ratio=1 interval=["));
  ck_assert_ptr_nonnull(strstr(r.out, "metric=" TILEPACK " kind=time status=pass "
                                      "verdict=unchanged"));
  /* all 49 pairs tie: the test sees nothing */
  ck_assert_ptr_nonnull(strstr(r.out, " p=1 "));
  bt_result_free(&r);
  free(base);
}
END_TEST

START_TEST(tight_20_percent_shift_regresses) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  char *cur = save("cur.json", make_report(1, 2.4, 0.02));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, NULL, NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=regressed"));
  ck_assert_ptr_nonnull(strstr(r.out, "change=+20.0%"));
  /* no overlap, 7 against 7: exact two-sided p = 2/C(14,7) = 2/3432 */
  char expect[64];
  snprintf(expect, sizeof expect, " p=%.3g ", 2.0 / 3432.0);
  ck_assert_msg(strstr(r.out, expect) != NULL, "%s not in %s", expect, r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "compare status=fail"));
  bt_result_free(&r);
  /* the practical threshold: a 20% shift passes under --max-ratio 0.25 */
  ck_assert_int_eq(compare(&r, base, cur, "--max-ratio", "0.25", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=unchanged"));
  bt_result_free(&r);
  /* and --max-abs-ms is an absolute floor: 2.0*1.05 + 0.5 > 2.4 */
  ck_assert_int_eq(compare(&r, base, cur, "--max-abs-ms", "0.5", NULL, NULL), 0);
  bt_result_free(&r);
  free(base);
  free(cur);
}
END_TEST

START_TEST(shift_inside_wide_noise_is_inconclusive) {
  /* repetitions spread over +/-60%: a 20% shift of the median can neither
   * be shown nor ruled out (the two sets interleave): inconclusive, exit 3,
   * never "unchanged" */
  char *base = save("base.json", make_report(1, 2.0, 1.2));
  char *cur = save("cur.json", make_report(1, 2.4, 1.2));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, "--output-md", "-", NULL, NULL), 3);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=inconclusive"));
  ck_assert_ptr_nonnull(strstr(r.out, "| inconclusive |"));
  ck_assert_ptr_nonnull(strstr(r.out, "compare status=inconclusive"));
  ck_assert_ptr_nonnull(strstr(r.out, "compare note: 1 time(s) inconclusive"));
  ck_assert_ptr_null(strstr(r.out, "verdict=unchanged"));
  bt_result_free(&r);
  free(base);
  free(cur);
}
END_TEST

START_TEST(improvement_is_reported_and_passes) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  char *cur = save("cur.json", make_report(1, 1.5, 0.02));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, NULL, NULL, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=improved"));
  ck_assert_ptr_nonnull(strstr(r.out, "regressed=0 improved=1"));
  bt_result_free(&r);
  free(base);
  free(cur);
}
END_TEST

START_TEST(missing_and_new_rows) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  /* the current report lost the cpu row's time */
  cJSON *c = make_report(1, 2.0, 0.02);
  cJSON *cpu = (cJSON *)bt_get(c, "benchmarks.tile_ops.tilepack.rows.cpu");
  cJSON_DeleteItemFromObject(cpu, "p50_ms");
  char *lost = save("lost.json", c);
  bt_result r;
  ck_assert_int_eq(compare(&r, base, lost, NULL, NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=missing"));
  ck_assert_ptr_nonnull(strstr(r.out, "missing=1"));
  bt_result_free(&r);
  /* with --relative too: no current value, no change, no nan */
  ck_assert_int_eq(compare(&r, base, lost, "--relative", NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=missing"));
  ck_assert_ptr_null(strstr(r.out, "nan"));
  ck_assert_ptr_null(strstr(r.out, "change=-100"));
  bt_result_free(&r);
  /* a row the baseline does not know: the baseline is stale (a note) */
  c = make_report(1, 2.0, 0.02);
  cJSON *rows = (cJSON *)bt_get(c, "benchmarks.tile_ops.tilepack.rows");
  cJSON *extra = cJSON_AddObjectToObject(rows, "gpu2");
  cJSON_AddStringToObject(extra, "status", "ok");
  cJSON_AddNumberToObject(extra, "p50_ms", 1.0);
  char *more = save("more.json", c);
  ck_assert_int_eq(compare(&r, base, more, NULL, NULL, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "compare baseline_stale: lacks 1 row(s)"));
  ck_assert_ptr_nonnull(strstr(r.out, "tile_ops.tilepack.rows.gpu2"));
  bt_result_free(&r);
  /* a failed current status fails */
  c = make_report(1, 2.0, 0.02);
  cJSON_ReplaceItemInObject(c, "status", cJSON_CreateString("failed"));
  char *failed = save("failed.json", c);
  ck_assert_int_eq(compare(&r, base, failed, NULL, NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "metric=__status__ status=fail"));
  bt_result_free(&r);
  free(base);
  free(lost);
  free(more);
  free(failed);
}
END_TEST

START_TEST(mismatches_exit_1_unless_allowed) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  static const struct {
    const char *path, *key, *mention;
    int number;
  } cases[] = {{"config", "channels", "profile: channels", 1},
               {"config", "dtype", "dtype: dtype", 0},
               {"config", "backends", "backend set", 0},
               {"environment", "cpu_model", "machine: cpu_model", 0},
               /* a report without the key was of the default profile */
               {"config", "profile", "profile: profile baseline=\"default\"", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cJSON *c = make_report(1, 2.0, 0.02);
    cJSON *holder = (cJSON *)bt_get(c, cases[i].path);
    cJSON_DeleteItemFromObject(holder, cases[i].key);
    if (cases[i].number) {
      cJSON_AddNumberToObject(holder, cases[i].key, 128);
    } else {
      cJSON_AddStringToObject(holder, cases[i].key, "other");
    }
    char *cur = save("cur.json", c);
    bt_result r;
    ck_assert_int_eq(compare(&r, base, cur, NULL, NULL, NULL, NULL), 1);
    ck_assert_msg(strstr(r.err, cases[i].mention) != NULL, "case %zu: %s", i, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "--allow-mismatch"));
    bt_result_free(&r);
    ck_assert_int_eq(compare(&r, base, cur, "--allow-mismatch", NULL, NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(r.err, "mismatch (allowed)"));
    bt_result_free(&r);
    free(cur);
  }
  /* another host is another machine (a cloned VM keeps the CPU model):
   * the times say nothing about this one */
  cJSON *c = make_report(1, 2.0, 0.02);
  cJSON_ReplaceItemInObject((cJSON *)bt_get(c, "environment"), "host",
                            cJSON_CreateString("ci-runner-7"));
  char *cur = save("cur.json", c);
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, NULL, NULL, NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "mismatch: machine: host"));
  ck_assert_ptr_nonnull(strstr(r.err, "apexx-bench ab"));
  bt_result_free(&r);
  free(cur);
  /* 1.3: the machine ids (same host name, same CPU: a clone) */
  cJSON *b13 = make_report(1, 2.0, 0.02);
  cJSON_AddStringToObject((cJSON *)bt_get(b13, "environment"), "machine_id", "00000000000000aa");
  char *base13 = save("base13.json", b13);
  cJSON *c13 = make_report(1, 2.0, 0.02);
  cJSON_AddStringToObject((cJSON *)bt_get(c13, "environment"), "machine_id", "00000000000000bb");
  char *clone = save("clone.json", c13);
  ck_assert_int_eq(compare(&r, base13, clone, NULL, NULL, NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "mismatch: machine: machine_id"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base13, clone, "--allow-mismatch", NULL, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base13, base13, NULL, NULL, NULL, NULL), 0);
  bt_result_free(&r);
  free(base13);
  free(clone);
  free(base);
}
END_TEST

START_TEST(schema_1_0_reports_are_accepted) {
  /* 1.0 rows: no repetitions; p95 - p50 is the noise band */
  char *old = save("old.json", make_report(0, 2.0, 0.02));
  char *old_slow = save("old_slow.json", make_report(0, 2.4, 0.02));
  char *old_wide = save("old_wide.json", make_report(0, 2.4, 1.0));
  char *now = save("now.json", make_report(1, 2.0, 0.02));
  bt_result r;
  ck_assert_int_eq(compare(&r, old, old, NULL, NULL, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, old, old_slow, NULL, NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=regressed"));
  bt_result_free(&r);
  /* p95 is 2x the median: 0.4 ms of change is inside that band, and so
   * would be a change of the threshold's size: inconclusive */
  ck_assert_int_eq(compare(&r, old, old_wide, NULL, NULL, NULL, NULL), 3);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=inconclusive"));
  bt_result_free(&r);
  /* a 1.0 baseline against a 1.1 report: accepted, flagged stale */
  ck_assert_int_eq(compare(&r, old, now, NULL, NULL, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "baseline_stale: recorded with schema 1.0"));
  ck_assert_ptr_nonnull(strstr(r.out, "baseline_stale: records no backend_abi_version"));
  ck_assert_ptr_nonnull(strstr(r.out, "make bench-baseline"));
  bt_result_free(&r);
  free(old);
  free(old_slow);
  free(old_wide);
  free(now);
}
END_TEST

START_TEST(markdown_table) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  char *cur = save("cur.json", make_report(1, 2.4, 0.02));
  char *md = bt_path(dir, "cmp.md");
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, "--output-md", md, "--quiet", NULL), 2);
  bt_result_free(&r);
  char *text = bt_read(md);
  ck_assert_ptr_nonnull(text);
  ck_assert_ptr_nonnull(strstr(text, "# apexx-bench compare"));
  ck_assert_ptr_nonnull(strstr(text, "- verdict: **fail** (1 regressed, 0 improved"));
  ck_assert_ptr_nonnull(strstr(text, "| metric | baseline | current | change | interval | "
                                     "verdict | p-value / noise band |"));
  ck_assert_ptr_nonnull(strstr(text, "| --- | ---: | ---: | ---: | --- | --- | --- |"));
  /* 2.0 ms and 2.4 ms, +20.0%, bold verdict, p and the band:
   * band = 1.4826 * MAD; MAD of the 7 evenly spaced values is 2 steps of
   * centre*spread/6, the larger side's centre being 2.4 */
  double band = 1.4826 * 2.0 * 2.4 * 0.02 / 6.0 / 2.0 * 100.0;
  char row[256];
  snprintf(row, sizeof row, "| tile_ops.tilepack / cpu / p50_ms | 2 ms | 2.4 ms | +20.0%% | [1.");
  ck_assert_msg(strstr(text, row) != NULL, "%s not in\n%s", row, text);
  snprintf(row, sizeof row, "x] | **regressed** | p=%.3g, +/-%.1f%% |", 2.0 / 3432.0, band);
  ck_assert_msg(strstr(text, row) != NULL, "%s not in\n%s", row, text);
  ck_assert_ptr_nonnull(strstr(text, "| tile_ops.tilepack / cuda / row | - | - | - | - | "
                                     "skipped | - |"));
  free(text);
  /* '-' is standard output, after the check lines */
  ck_assert_int_eq(compare(&r, base, base, "--output-md", "-", NULL, NULL), 0);
  char *table = strstr(r.out, "# apexx-bench compare");
  ck_assert_ptr_nonnull(table);
  ck_assert_ptr_nonnull(strstr(table, "| unchanged | p=1, +/-"));
  ck_assert(!bt_exists("-"));
  bt_result_free(&r);
  free(base);
  free(cur);
  free(md);
}
END_TEST

START_TEST(unusable_input_exits_1) {
  char *good = save("good.json", make_report(1, 2.0, 0.02));
  char *missing = bt_path(dir, "nope.json");
  char *malformed = bt_path(dir, "bad.json");
  bt_write(malformed, "{\"schema_version\": {\"major\": 1,");
  cJSON *m2 = make_report(1, 2.0, 0.02);
  cJSON_ReplaceItemInObject((cJSON *)bt_get(m2, "schema_version"), "major", cJSON_CreateNumber(2));
  char *major2 = save("major2.json", m2);
  /* issue 16 item 9: duplicate keys, infinity, negative times */
  char *dup = bt_path(dir, "dup.json");
  char *good_text = bt_read(good);
  char *brace = strchr(good_text, '{');
  size_t head = (size_t)(brace - good_text) + 1;
  char *dup_text = malloc(strlen(good_text) + 64);
  memcpy(dup_text, good_text, head);
  strcpy(dup_text + head, "\"status\": \"failed\",");
  strcat(dup_text, good_text + head);
  bt_write(dup, dup_text);
  char *inf = bt_path(dir, "inf.json");
  char *p50 = strstr(good_text, "\"p50_ms\":");
  ck_assert_ptr_nonnull(p50);
  char *inf_text = malloc(strlen(good_text) + 64);
  size_t at = (size_t)(p50 - good_text) + strlen("\"p50_ms\":");
  memcpy(inf_text, good_text, at);
  strcpy(inf_text + at, " 1e999");
  strcat(inf_text, good_text + at + strcspn(good_text + at, ",}"));
  bt_write(inf, inf_text);
  cJSON *neg = make_report(1, 2.0, 0.02);
  cJSON_ReplaceItemInObject((cJSON *)bt_get(neg, "benchmarks.tile_ops.tilepack.rows.cpu"), "p50_ms",
                            cJSON_CreateNumber(-1.0));
  char *negative = save("neg.json", neg);
  static const char *const mentions[] = {"cannot read",
                                         "not valid JSON",
                                         "major = [2]",
                                         "the key \"status\" twice",
                                         "is not a finite number",
                                         "negative time"};
  const char *files[] = {missing, malformed, major2, dup, inf, negative};
  for (size_t i = 0; i < 6; i++) {
    bt_result r;
    /* as CURRENT and as BASELINE */
    ck_assert_msg(compare(&r, good, files[i], NULL, NULL, NULL, NULL) == 1, "case %zu", i);
    ck_assert_msg(strstr(r.err, mentions[i]) != NULL, "case %zu: %s", i, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "unusable input"));
    bt_result_free(&r);
    ck_assert_msg(compare(&r, files[i], good, NULL, NULL, NULL, NULL) == 1, "case %zu", i);
    bt_result_free(&r);
  }
  free(good_text);
  free(dup_text);
  free(inf_text);
  free(good);
  free(missing);
  free(malformed);
  free(major2);
  free(dup);
  free(inf);
  free(negative);
}
END_TEST

START_TEST(emitted_baseline_keeps_repetitions) {
  char *report = save("report.json", make_report(1, 2.0, 0.02));
  char *baseline = bt_path(dir, "baseline.json");
  const char *emit[] = {"compare", "--emit-baseline", report, "-o", baseline, NULL};
  bt_result r;
  bt_run(&r, NULL, emit);
  ck_assert_msg(r.status == 0, "emit: %s", r.err);
  bt_result_free(&r);
  cJSON *b = bt_load_json(baseline);
  ck_assert_ptr_nonnull(b);
  ck_assert_str_eq(bt_get(b, "kind")->valuestring, "apexx-bench-baseline");
  ck_assert_int_eq((int)bt_get(b, "schema_version.minor")->valuedouble, 5);
  ck_assert_int_eq((int)bt_get(b, "source.backend_abi_version")->valuedouble, 1);
  const cJSON *metrics = bt_get(b, "metrics");
  /* the time of the cpu row and the skipped cuda row */
  ck_assert_int_eq(cJSON_GetArraySize(metrics), 2);
  const cJSON *first = cJSON_GetArrayItem(metrics, 0);
  ck_assert_str_eq(bt_get(first, "path")->valuestring, TILEPACK);
  ck_assert(bt_get(first, "value")->valuedouble == 2.0);
  ck_assert_int_eq(cJSON_GetArraySize(bt_get(first, "repetitions.medians_ms")), REPS);
  cJSON_Delete(b);
  char *slow = save("slow.json", make_report(1, 2.4, 0.02));
  ck_assert_int_eq(compare(&r, baseline, report, NULL, NULL, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=unchanged"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, baseline, slow, NULL, NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=regressed"));
  bt_result_free(&r);
  /* a baseline file cannot be CURRENT */
  ck_assert_int_eq(compare(&r, report, baseline, NULL, NULL, NULL, NULL), 1);
  bt_result_free(&r);
  free(report);
  free(baseline);
  free(slow);
}
END_TEST

START_TEST(summary_json_records_each_check) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  char *cur = save("cur.json", make_report(1, 2.4, 0.02));
  char *summary = bt_path(dir, "summary.json");
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, "--output-json", summary, NULL, NULL), 2);
  bt_result_free(&r);
  cJSON *s = bt_load_json(summary);
  ck_assert_ptr_nonnull(s);
  ck_assert_str_eq(bt_get(s, "status")->valuestring, "fail");
  ck_assert_int_eq((int)bt_get(s, "verdicts.regressed")->valuedouble, 1);
  int found = 0;
  const cJSON *check;
  cJSON_ArrayForEach(check, bt_get(s, "checks")) {
    const cJSON *metric = bt_get(check, "metric");
    if (strcmp(metric->valuestring, TILEPACK) != 0)
      continue;
    found = 1;
    ck_assert_str_eq(bt_get(check, "verdict")->valuestring, "regressed");
    ck_assert(bt_get(check, "baseline")->valuedouble == 2.0);
    ck_assert(bt_get(check, "current")->valuedouble == 2.4);
    ck_assert(fabs(bt_get(check, "p_value")->valuedouble - 2.0 / 3432.0) < 1e-12);
    ck_assert_int_eq((int)bt_get(check, "current_repetitions")->valuedouble, REPS);
  }
  ck_assert(found);
  cJSON_Delete(s);
  free(base);
  free(cur);
  free(summary);
}
END_TEST

START_TEST(confirm_needs_the_earlier_regression) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  char *cur = save("cur.json", make_report(1, 2.4, 0.02));
  char *first = bt_path(dir, "first.json"), *second = bt_path(dir, "second.json");
  bt_result r;
  /* an earlier compare without the regression: now "unconfirmed", a pass */
  ck_assert_int_eq(compare(&r, base, base, "--output-json", first, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, cur, "--confirm", first, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=unconfirmed"));
  ck_assert_ptr_nonnull(strstr(r.out, "unconfirmed=1"));
  bt_result_free(&r);
  /* an earlier compare with it: confirmed, a failure */
  ck_assert_int_eq(compare(&r, base, cur, "--output-json", second, NULL, NULL), 2);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, cur, "--confirm", second, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=regressed"));
  bt_result_free(&r);
  /* not a compare summary */
  ck_assert_int_eq(compare(&r, base, cur, "--confirm", base, NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "not a compare summary"));
  bt_result_free(&r);
  free(base);
  free(cur);
  free(first);
  free(second);
}
END_TEST

/* Rows tilepack, tileunpack and gather scaled by the three factors. */
static cJSON *three_rows(double fa, double fb, double fc) {
  cJSON *r = make_report(1, 2.0 * fa, 0.02);
  cJSON *ops = (cJSON *)bt_get(r, "benchmarks.tile_ops");
  static const char *const names[] = {"tileunpack", "gather"};
  double f[] = {fb, fc};
  for (int i = 0; i < 2; i++) {
    cJSON *other = make_report(1, 2.0 * f[i], 0.02);
    cJSON *entry =
        cJSON_DetachItemFromObject((cJSON *)bt_get(other, "benchmarks.tile_ops"), "tilepack");
    cJSON_AddItemToObject(ops, names[i], entry);
    cJSON_Delete(other);
  }
  return r;
}

START_TEST(relative_judges_against_the_suite_speed) {
  char *base = save("base.json", three_rows(1, 1, 1));
  char *slower = save("slower.json", three_rows(1.5, 1.5, 1.5));
  char *one = save("one.json", three_rows(1.8, 1.5, 1.5));
  bt_result r;
  /* the whole suite 50% slower: three regressions in absolute terms */
  ck_assert_int_eq(compare(&r, base, slower, NULL, NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "regressed=3"));
  bt_result_free(&r);
  /* relative: the speed factor, no regression */
  ck_assert_int_eq(compare(&r, base, slower, "--relative", NULL, NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "suite speed factor 1.5 "));
  ck_assert_ptr_nonnull(strstr(r.out, "regressed=0"));
  bt_result_free(&r);
  /* one row 20% slower than the rest: caught */
  ck_assert_int_eq(compare(&r, base, one, "--relative", NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "regressed=1"));
  ck_assert_ptr_nonnull(strstr(r.out, "change=+80.0% relative_change=+20.0%"));
  bt_result_free(&r);
  free(base);
  free(slower);
  free(one);
}
END_TEST

START_TEST(several_currents_are_pooled) {
  char *base = save("base.json", make_report(1, 2.0, 0.02));
  char *slow = save("slow.json", make_report(1, 2.4, 0.02));
  char *slow2 = save("slow2.json", make_report(1, 2.4, 0.02));
  char *same = save("same.json", make_report(1, 2.0, 0.02));
  cJSON *o = make_report(1, 2.0, 0.02);
  cJSON_ReplaceItemInObject((cJSON *)bt_get(o, "config"), "channels", cJSON_CreateNumber(64));
  char *other = save("other.json", o);
  bt_result r;
  /* one slow run among three: the pooled runs disagree, neither a
   * regression nor no change can be shown */
  const char *argv[] = {"compare", base, slow, same, same, NULL};
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 3, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=inconclusive"));
  bt_result_free(&r);
  /* three unchanged runs: unchanged */
  const char *argv1[] = {"compare", base, same, same, same, NULL};
  bt_run(&r, NULL, argv1);
  ck_assert_msg(r.status == 0, "%s", r.out);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=unchanged"));
  bt_result_free(&r);
  /* two slow runs of two: still a regression, on 14 repetitions */
  const char *argv2[] = {"compare", base, slow, slow2, "--output-json", NULL, NULL};
  char *summary = bt_path(dir, "s.json");
  argv2[5] = summary;
  bt_run(&r, NULL, argv2);
  ck_assert_int_eq(r.status, 2);
  bt_result_free(&r);
  cJSON *sj = bt_load_json(summary);
  const cJSON *check;
  int found = 0;
  cJSON_ArrayForEach(check, bt_get(sj, "checks")) {
    if (strcmp(bt_get(check, "metric")->valuestring, TILEPACK) != 0)
      continue;
    found = 1;
    ck_assert_int_eq((int)bt_get(check, "current_repetitions")->valuedouble, 2 * REPS);
    ck_assert_str_eq(bt_get(check, "verdict")->valuestring, "regressed");
  }
  ck_assert(found);
  cJSON_Delete(sj);
  /* runs of different profiles cannot be pooled */
  const char *argv3[] = {"compare", base, same, other, NULL};
  bt_run(&r, NULL, argv3);
  ck_assert_int_eq(r.status, 1);
  ck_assert_ptr_nonnull(strstr(r.err, "cannot be pooled"));
  bt_result_free(&r);
  free(base);
  free(slow);
  free(slow2);
  free(same);
  free(other);
  free(summary);
}
END_TEST

/* Add per-repetition minima centre * (1 + spread * k/(REPS-1) - spread/2)
 * to the tilepack cpu row of a 1.1 report. */
static cJSON *with_mins(cJSON *r, double centre, double spread) {
  cJSON *reps = (cJSON *)bt_get(r, "benchmarks.tile_ops.tilepack.rows.cpu.repetitions");
  cJSON *mins = cJSON_AddArrayToObject(reps, "mins_ms");
  for (int k = 0; k < REPS; k++) {
    cJSON_AddItemToArray(mins, cJSON_CreateNumber(centre * (1 + spread * k / (REPS - 1) - spread / 2)));
  }
  return r;
}

START_TEST(statistic_min_compares_the_minima) {
  char *base = save("base.json", with_mins(make_report(1, 2.0, 0.02), 1.0, 0.02));
  /* the medians grew by half, the minima did not */
  char *noisy = save("noisy.json", with_mins(make_report(1, 3.0, 0.02), 1.0, 0.02));
  /* the minima grew by a fifth, the medians did not */
  char *slower = save("slower.json", with_mins(make_report(1, 2.0, 0.02), 1.2, 0.02));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, noisy, NULL, NULL, NULL, NULL), 2);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, noisy, "--statistic", "min", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=unchanged"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, slower, NULL, NULL, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, slower, "--statistic", "min", "--output-md", "-"), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=regressed"));
  ck_assert_ptr_nonnull(strstr(r.out, "change=+20.0%"));
  /* floors are labelled as floors, not as the p50 the path names */
  ck_assert_ptr_nonnull(strstr(r.out, "floor_ms: a time's fastest repetition"));
  ck_assert_ptr_nonnull(
      strstr(r.out, "check metric=benchmarks.tile_ops.tilepack.rows.cpu.floor_ms "));
  ck_assert_ptr_nonnull(strstr(r.out, "| tile_ops.tilepack / cpu / floor_ms |"));
  ck_assert_ptr_null(strstr(r.out, "p50_ms"));
  bt_result_free(&r);
  /* a baseline file keeps both statistics */
  char *baseline = bt_path(dir, "baseline.json");
  const char *emit[] = {"compare", "--emit-baseline", base, "-o", baseline, NULL};
  bt_run(&r, NULL, emit);
  ck_assert_msg(r.status == 0, "emit: %s", r.err);
  bt_result_free(&r);
  cJSON *b = bt_load_json(baseline);
  ck_assert_int_eq(cJSON_GetArraySize(bt_get(cJSON_GetArrayItem(bt_get(b, "metrics"), 0),
                                             "repetitions.mins_ms")),
                   REPS);
  ck_assert_int_eq(compare(&r, baseline, slower, "--statistic", "min", NULL, NULL), 2);
  bt_result_free(&r);
  /* without them, --statistic min cannot judge: unusable input */
  cJSON_DeleteItemFromObject(
      (cJSON *)bt_get(cJSON_GetArrayItem(bt_get(b, "metrics"), 0), "repetitions"), "mins_ms");
  char *old = save("old-baseline.json", b);
  ck_assert_int_eq(compare(&r, old, slower, "--statistic", "min", NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "mins_ms"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, old, slower, "--statistic", "median", NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_ne(compare(&r, base, slower, "--statistic", "mean", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.err, "[mean]"));
  bt_result_free(&r);
  free(base);
  free(noisy);
  free(slower);
  free(baseline);
  free(old);
}
END_TEST

/* The tilepack cpu row's per-repetition minima set to v[0..REPS-1]. */
static cJSON *with_min_list(cJSON *r, const double *v) {
  cJSON *reps = (cJSON *)bt_get(r, "benchmarks.tile_ops.tilepack.rows.cpu.repetitions");
  cJSON *mins = cJSON_AddArrayToObject(reps, "mins_ms");
  for (int k = 0; k < REPS; k++) cJSON_AddItemToArray(mins, cJSON_CreateNumber(v[k]));
  return r;
}

/* --statistic min judges floors: the fastest repetition, with the gap to
 * the third fastest as the noise band. */
START_TEST(statistic_min_judges_the_floor) {
  double base_v[REPS], state_v[REPS], slow_v[REPS], lucky_v[REPS];
  for (int k = 0; k < REPS; k++) {
    /* the baseline: its floor 1.0 met by every other repetition, the rest
     * slowed by the machine */
    base_v[k] = k % 2 ? 1.8 : 1.0 + 0.001 * k;
    /* the machine slow in all but three repetitions: the same floor */
    state_v[k] = k < 3 ? 1.0 + 0.002 * k : 1.9;
    /* the code 20% slower: every repetition, the floor too */
    slow_v[k] = 1.2 * base_v[k];
    /* one lucky repetition at 1.0, the next fastest at 1.3 (a floor
     * nothing else reaches: its band is wide) */
    lucky_v[k] = k == 0 ? 1.0 : 1.3 + 0.01 * k;
  }
  char *base = save("base.json", with_min_list(make_report(1, 2.0, 0.02), base_v));
  char *state = save("state.json", with_min_list(make_report(1, 3.0, 0.02), state_v));
  char *slow = save("slow.json", with_min_list(make_report(1, 2.0, 0.02), slow_v));
  char *lucky = save("lucky.json", with_min_list(make_report(1, 2.0, 0.02), lucky_v));
  bt_result r;
  /* the medians of the minima differ by 1.8 / 1.0 against each other, the
   * floors by 0.2% */
  ck_assert_int_eq(compare(&r, base, state, "--statistic", "min", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=unchanged"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, slow, "--statistic", "min", NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=regressed"));
  ck_assert_ptr_nonnull(strstr(r.out, "change=+20.0%"));
  bt_result_free(&r);
  /* the slow run as the baseline: the lucky floor is 17% lower, but inside
   * the lucky run's own reach (0.3): not an improvement, and no change
   * cannot be shown either */
  ck_assert_int_eq(compare(&r, slow, lucky, "--statistic", "min", NULL, NULL), 3);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=inconclusive"));
  bt_result_free(&r);
  /* and faster by more than the reach: improved */
  ck_assert_int_eq(compare(&r, slow, base, "--statistic", "min", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=improved"));
  bt_result_free(&r);
  free(base);
  free(state);
  free(slow);
  free(lucky);
}
END_TEST

/* The tilepack cpu row's per-repetition medians set to v[0..n-1] (p50 the
 * median of them). */
static cJSON *with_medians(cJSON *r, const double *v, int n) {
  cJSON *cpu = (cJSON *)bt_get(r, "benchmarks.tile_ops.tilepack.rows.cpu");
  cJSON *reps = (cJSON *)bt_get(cpu, "repetitions");
  cJSON *list = cJSON_CreateArray();
  for (int k = 0; k < n; k++)
    cJSON_AddItemToArray(list, cJSON_CreateNumber(v[k]));
  cJSON_ReplaceItemInObject(reps, "medians_ms", list);
  cJSON_ReplaceItemInObject(reps, "n", cJSON_CreateNumber(n));
  return r;
}

/* The reproduction: two 5-repetition runs, the baseline with one
 * outlier pass; tilepack 0.029 -> 12.0 ms was "unchanged (noise)" at
 * +41,711.6%, p = 0.095. Now: never unchanged. */
START_TEST(outlier_in_a_five_repetition_baseline) {
  double base_v[5] = {0.029, 0.029, 15.0, 0.030, 0.029};
  double cur_v[5] = {12.0, 12.1, 11.9, 12.0, 12.2};
  char *base = save("base.json", with_medians(make_report(1, 0.029, 0.0), base_v, 5));
  char *cur = save("cur.json", with_medians(make_report(1, 12.0, 0.0), cur_v, 5));
  bt_result r;
  int rc = compare(&r, base, cur, NULL, NULL, NULL, NULL);
  ck_assert_msg(strstr(r.out, "verdict=unchanged") == NULL, "%s", r.out);
  ck_assert_int_eq(rc, 3);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=inconclusive"));
  ck_assert_ptr_nonnull(strstr(r.out, "change=+41279.3%"));
  bt_result_free(&r);
  /* 3 repetitions a side, +124%: not unchanged either */
  double b3[3] = {0.029, 0.030, 0.029}, c3[3] = {0.065, 0.066, 0.064};
  char *base3 = save("base3.json", with_medians(make_report(1, 0.029, 0.0), b3, 3));
  char *cur3 = save("cur3.json", with_medians(make_report(1, 0.065, 0.0), c3, 3));
  rc = compare(&r, base3, cur3, NULL, NULL, NULL, NULL);
  ck_assert_msg(strstr(r.out, "verdict=unchanged") == NULL, "%s", r.out);
  ck_assert(rc == 2 || rc == 3);
  bt_result_free(&r);
  free(base);
  free(cur);
  free(base3);
  free(cur3);
}
END_TEST

/* --ops checks a subset of rows against a full baseline; --metrics picks
 * metrics of a baseline file; a rate is judged by its row's times. */
START_TEST(subsets_and_rates) {
  cJSON *full = three_rows(1, 1, 1);
  cJSON_AddStringToObject((cJSON *)bt_get(full, "config"), "ops", "all");
  char *base = save("base.json", full);
  cJSON *c = make_report(1, 2.0, 0.02);
  cJSON_AddStringToObject((cJSON *)bt_get(c, "config"), "ops", "tilepack");
  char *only = save("only.json", c);
  bt_result r;
  /* the full baseline: the other rows are missing, the selection differs */
  ck_assert_int_eq(compare(&r, base, only, NULL, NULL, NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "profile: ops"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, only, "--allow-mismatch", NULL, NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "verdict=missing"));
  bt_result_free(&r);
  /* --ops tilepack: the tilepack rows alone, and the selections may differ */
  ck_assert_int_eq(compare(&r, base, only, "--ops", "tilepack", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "metrics=2 "));
  ck_assert_ptr_null(strstr(r.out, "gather"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, only, "--ops", "no_such_op", NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "[no_such_op] is not an entry or section"));
  bt_result_free(&r);
  /* a rate: the current run 20% slower, its tiles_per_s lower; judged by
   * the row's times, with the rate's interval */
  char *report = save("report.json", make_report(1, 2.0, 0.02));
  char *slow = save("slow.json", make_report(1, 2.4, 0.02));
  char *baseline = bt_path(dir, "baseline.json");
  const char *emit[] = {"compare", "--emit-baseline", report, "--metrics", "p50_ms,throughput",
                        "-o",      baseline,          NULL};
  bt_run(&r, NULL, emit);
  ck_assert_msg(r.status == 0, "emit: %s", r.err);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, baseline, slow, "--metrics", "throughput", NULL, NULL), 2);
  ck_assert_ptr_nonnull(strstr(r.out, "metric=benchmarks.tile_ops.tilepack.rows.cpu.tiles_per_s "
                                      "kind=rate status=fail verdict=regressed"));
  ck_assert_ptr_null(strstr(r.out, "p50_ms kind=time"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, baseline, report, "--metrics", "throughput", NULL, NULL), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "kind=rate status=pass verdict=unchanged"));
  bt_result_free(&r);
  free(base);
  free(only);
  free(report);
  free(slow);
  free(baseline);
}
END_TEST

START_TEST(timer_mismatch_exits_1) {
  cJSON *cpu_time = make_report(1, 2.0, 0.02);
  cJSON_AddStringToObject((cJSON *)bt_get(cpu_time, "config"), "timer", "cpu-time");
  char *base = save("base.json", cpu_time);
  /* a report without the key was timed by the backend */
  char *cur = save("cur.json", make_report(1, 2.0, 0.02));
  bt_result r;
  ck_assert_int_eq(compare(&r, base, cur, NULL, NULL, NULL, NULL), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "timer"));
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, cur, "--allow-mismatch", NULL, NULL, NULL), 0);
  bt_result_free(&r);
  ck_assert_int_eq(compare(&r, base, base, NULL, NULL, NULL, NULL), 0);
  bt_result_free(&r);
  free(base);
  free(cur);
}
END_TEST

int main(void) {
  bt_bench();
  Suite *s = suite_create("bench_compare");
  TCase *tc = tcase_create("compare");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, identical_samples_pass);
  tcase_add_test(tc, tight_20_percent_shift_regresses);
  tcase_add_test(tc, shift_inside_wide_noise_is_inconclusive);
  tcase_add_test(tc, improvement_is_reported_and_passes);
  tcase_add_test(tc, missing_and_new_rows);
  tcase_add_test(tc, mismatches_exit_1_unless_allowed);
  tcase_add_test(tc, schema_1_0_reports_are_accepted);
  tcase_add_test(tc, markdown_table);
  tcase_add_test(tc, unusable_input_exits_1);
  tcase_add_test(tc, emitted_baseline_keeps_repetitions);
  tcase_add_test(tc, summary_json_records_each_check);
  tcase_add_test(tc, confirm_needs_the_earlier_regression);
  tcase_add_test(tc, relative_judges_against_the_suite_speed);
  tcase_add_test(tc, several_currents_are_pooled);
  tcase_add_test(tc, statistic_min_compares_the_minima);
  tcase_add_test(tc, statistic_min_judges_the_floor);
  tcase_add_test(tc, timer_mismatch_exits_1);
  tcase_add_test(tc, outlier_in_a_five_repetition_baseline);
  tcase_add_test(tc, subsets_and_rates);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
