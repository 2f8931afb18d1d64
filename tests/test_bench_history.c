/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench history: reports appended to DIR/history.jsonl keyed by
 * commit and machine, and DIR/index.html rendered with one SVG chart per op
 * and backend (median per run, the noise band, regressions marked); a run
 * with --history appends itself; a report the store holds already (its
 * run_id, or its text before schema 1.3) is not appended twice; bad input
 * exits 1; an append that fails (a full disk) leaves the store as it was,
 * a torn last line is not glued to the next record, and the page escapes
 * every text a report gives it. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_bench_util.h"

#define REPS 5

/* A 1.1 report of commit sha whose tilepack/cpu repetitions are centre
 * times (1 + 0.01*(k-2)), k = 0..4, and whose gather/cpu row is at 3 ms. */
static cJSON *make_report(const char *sha, const char *cpu_model, double centre) {
  cJSON *r = cJSON_CreateObject();
  cJSON *sv = cJSON_AddObjectToObject(r, "schema_version");
  cJSON_AddNumberToObject(sv, "major", 1);
  cJSON_AddNumberToObject(sv, "minor", 1);
  cJSON_AddStringToObject(r, "suite", "apexx");
  cJSON_AddStringToObject(r, "timestamp_utc", "2026-01-01T00:00:00Z");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "producer"), "git_sha", sha);
  cJSON *env = cJSON_AddObjectToObject(r, "environment");
  cJSON_AddStringToObject(env, "cpu_model", cpu_model);
  cJSON_AddNumberToObject(env, "cpu_cores", 2);
  cJSON_AddStringToObject(r, "status", "ok");
  cJSON *bench = cJSON_AddObjectToObject(r, "benchmarks");
  static const char *const names[2][2] = {{"tile_ops", "tilepack"}, {"indexing", "gather"}};
  for (int e = 0; e < 2; e++) {
    cJSON *section = cJSON_GetObjectItem(bench, names[e][0]);
    if (!section)
      section = cJSON_AddObjectToObject(bench, names[e][0]);
    cJSON *rows = cJSON_AddObjectToObject(cJSON_AddObjectToObject(section, names[e][1]), "rows");
    cJSON *cpu = cJSON_AddObjectToObject(rows, "cpu");
    double c = e == 0 ? centre : 3.0;
    cJSON_AddStringToObject(cpu, "status", "ok");
    cJSON_AddNumberToObject(cpu, "p50_ms", c);
    cJSON *med = cJSON_AddArrayToObject(cJSON_AddObjectToObject(cpu, "repetitions"), "medians_ms");
    for (int k = 0; k < REPS; k++) {
      cJSON_AddItemToArray(med, cJSON_CreateNumber(c * (1 + 0.01 * (k - 2))));
    }
    cJSON *cuda = cJSON_AddObjectToObject(rows, "cuda");
    cJSON_AddStringToObject(cuda, "status", "skipped");
  }
  return r;
}

static char *dir;

static void setup(void) { dir = bt_tmpdir(); }
static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
}

static char *save(const char *name, cJSON *json) {
  char *path = bt_path(dir, name);
  bt_save_json(path, json);
  cJSON_Delete(json);
  return path;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
    n++;
  return n;
}

START_TEST(append_and_chart) {
  char *a = save("a.json", make_report("aaaaaaa1111", "Test CPU", 2.0));
  char *b = save("b.json", make_report("bbbbbbb2222", "Test CPU", 2.02));
  char *c = save("c.json", make_report("ccccccc3333", "Test CPU", 2.4)); /* +19% */
  char *other = save("o.json", make_report("ddddddd4444", "Other CPU", 1.0));
  char *store = bt_path(dir, "hist");
  const char *argv[] = {"history", store, a, b, NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
  /* a later call appends */
  const char *argv2[] = {"history", store, c, other, NULL};
  bt_run(&r, NULL, argv2);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);

  char *lines_path = bt_path(store, "history.jsonl");
  char *lines = bt_read(lines_path);
  ck_assert_ptr_nonnull(lines);
  ck_assert_int_eq(count(lines, "\n"), 4);
  /* keyed by commit and machine, in append order */
  char *pa = strstr(lines, "\"commit\":\"aaaaaaa1111\"");
  char *pc = strstr(lines, "\"commit\":\"ccccccc3333\"");
  ck_assert(pa && pc && pa < pc);
  ck_assert_int_eq(count(lines, "\"machine\":\"Test CPU x2\""), 3);
  ck_assert_int_eq(count(lines, "\"machine\":\"Other CPU x2\""), 1);
  /* the first line parses and holds the row's summary */
  char *nl = strchr(lines, '\n');
  *nl = '\0';
  cJSON *first = cJSON_Parse(lines);
  ck_assert_ptr_nonnull(first);
  const cJSON *row = bt_get(first, "rows");
  row = cJSON_GetObjectItem(row, "tile_ops.tilepack/cpu");
  ck_assert_ptr_nonnull(row);
  ck_assert(fabs(cJSON_GetObjectItem(row, "median_ms")->valuedouble - 2.0) < 1e-12);
  ck_assert_int_eq((int)cJSON_GetObjectItem(row, "n")->valuedouble, REPS);
  /* MAD of 0.98c..1.02c in steps of 0.01c is 0.01c */
  ck_assert(fabs(cJSON_GetObjectItem(row, "mad_ms")->valuedouble - 0.02) < 1e-9);
  ck_assert_ptr_null(cJSON_GetObjectItem(bt_get(first, "rows"), "tile_ops.tilepack/cuda"));
  cJSON_Delete(first);

  char *html_path = bt_path(store, "index.html");
  char *html = bt_read(html_path);
  ck_assert_ptr_nonnull(html);
  ck_assert_ptr_nonnull(strstr(html, "<!DOCTYPE html>"));
  ck_assert_ptr_nonnull(strstr(html, "4 run(s), 2 machine(s), 2 row(s)"));
  /* one chart per op and backend, self-contained (no script, no link) */
  ck_assert_int_eq(count(html, "<svg "), 2);
  ck_assert_ptr_nonnull(strstr(html, "data-key=\"tile_ops.tilepack/cpu\""));
  ck_assert_ptr_nonnull(strstr(html, "data-key=\"indexing.gather/cpu\""));
  ck_assert_ptr_null(strstr(html, "<script"));
  ck_assert_ptr_null(strstr(html, "http://www.w3.org/2000/svg\" href"));
  /* per chart: a band and a median line for each machine */
  ck_assert_int_eq(count(html, "class=\"band\""), 4);
  ck_assert_int_eq(count(html, "class=\"median\""), 4);
  /* commits label the runs; only c regressed (tilepack, +19% on tight
   * repetitions); gather stayed flat */
  ck_assert_ptr_nonnull(strstr(html, ">ccccccc</text>"));
  ck_assert_int_eq(count(html, "class=\"regression\""), 1);
  char *tilepack = strstr(html, "data-key=\"tile_ops.tilepack/cpu\"");
  char *gather = strstr(html, "data-key=\"indexing.gather/cpu\"");
  char *ring = strstr(html, "class=\"regression\"");
  ck_assert(tilepack < ring && (gather < tilepack || ring < gather));
  ck_assert_ptr_nonnull(strstr(html, "ccccccc3333 2400 us (regressed)"));
  free(html);
  free(html_path);
  free(lines);
  free(lines_path);
  free(store);
  free(a);
  free(b);
  free(c);
  free(other);
}
END_TEST

START_TEST(output_flag_and_bad_input) {
  char *a = save("a.json", make_report("aaaaaaa1111", "Test CPU", 2.0));
  char *store = bt_path(dir, "hist");
  const char *argv[] = {"history", store, a, "--output", "-", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_ptr_nonnull(strstr(r.out, "<svg "));
  bt_result_free(&r);
  char *bad = bt_path(dir, "bad.json");
  bt_write(bad, "{\"suite\": \"something else\"}");
  const char *argv2[] = {"history", store, bad, NULL};
  bt_run(&r, NULL, argv2);
  ck_assert_int_eq(r.status, 1);
  ck_assert_ptr_nonnull(strstr(r.err, "is not an apexx report"));
  bt_result_free(&r);
  /* the store is a file: refused */
  const char *argv3[] = {"history", a, NULL};
  bt_run(&r, NULL, argv3);
  ck_assert_int_eq(r.status, 1);
  ck_assert_ptr_nonnull(strstr(r.err, "is not a directory"));
  bt_result_free(&r);
  free(a);
  free(bad);
  free(store);
}
END_TEST

START_TEST(a_held_report_is_not_appended_again) {
  cJSON *with_id = make_report("aaaaaaa1111", "Test CPU", 2.0);
  cJSON_AddStringToObject(with_id, "run_id", "0123456789abcdef0123456789abcdef");
  char *a = save("a.json", with_id);
  char *old = save("old.json", make_report("bbbbbbb2222", "Test CPU", 2.0));
  char *store = bt_path(dir, "hist");
  const char *argv[] = {"history", store, a, old, a, NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_ptr_nonnull(strstr(r.err, "holds run 0123456789abcdef0123456789abcdef already"));
  bt_result_free(&r);
  /* again, later: both held (the old one by its text's hash) */
  const char *argv2[] = {"history", store, old, a, NULL};
  bt_run(&r, NULL, argv2);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_ptr_nonnull(strstr(r.err, "holds run text:"));
  bt_result_free(&r);
  char *lines_path = bt_path(store, "history.jsonl");
  char *lines = bt_read(lines_path);
  ck_assert_int_eq(count(lines, "\n"), 2);
  ck_assert_int_eq(count(lines, "\"run_id\":\"0123456789abcdef0123456789abcdef\""), 1);
  ck_assert_int_eq(count(lines, "\"run_id\":\"text:"), 1);
  free(lines);
  free(lines_path);
  free(store);
  free(a);
  free(old);
}
END_TEST

START_TEST(run_with_history_flag_appends) {
  char *store = bt_path(dir, "hist");
  const char *argv[] = {"--channels",    "8",
                        "--height",      "16",
                        "--width",       "16",
                        "--kmax",        "2",
                        "--steps",       "8",
                        "--iters",       "2",
                        "--warmup",      "0",
                        "--repetitions", "3",
                        "--quiet",       "--ops",
                        "tilepack",      "--backends",
                        "cpu",           "--output-json",
                        "/dev/null",     "--history",
                        store,           NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
  char *lines_path = bt_path(store, "history.jsonl");
  char *lines = bt_read(lines_path);
  ck_assert_ptr_nonnull(lines);
  ck_assert_int_eq(count(lines, "\n"), 1);
  ck_assert_ptr_nonnull(strstr(lines, "\"tile_ops.tilepack/cpu\""));
  ck_assert_ptr_nonnull(strstr(lines, "\"n\":3"));
  char *html_path = bt_path(store, "index.html");
  ck_assert(bt_exists(html_path));
  free(html_path);
  free(lines);
  free(lines_path);
  free(store);
}
END_TEST

/* issue 30 item 8: a full disk (the file size limit) during an append left
 * a partial line, and the next run was glued onto it and lost */
/* Reports a and b (commits aaaaaaa1111, bbbbbbb2222) and a store holding
 * a's run. */
typedef struct one_run_store {
  char *a, *b, *store, *lines_path;
} one_run_store;

static void store_with_one_run(one_run_store *t) {
  t->a = save("a.json", make_report("aaaaaaa1111", "Test CPU", 2.0));
  t->b = save("b.json", make_report("bbbbbbb2222", "Test CPU", 2.1));
  t->store = bt_path(dir, "hist");
  t->lines_path = bt_path(t->store, "history.jsonl");
  const char *first[] = {"history", t->store, t->a, NULL};
  bt_result r;
  bt_run(&r, NULL, first);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
}

static void one_run_store_free(one_run_store *t) {
  free(t->a);
  free(t->b);
  free(t->store);
  free(t->lines_path);
}

START_TEST(full_disk_append_leaves_the_store_whole) {
  one_run_store t;
  store_with_one_run(&t);
  char *store = t.store, *b = t.b, *lines_path = t.lines_path;
  bt_result r;
  char *before = bt_read(lines_path);
  /* room for 10 more bytes: the record does not fit */
  const bt_limits full = {30, (long long)strlen(before) + 10};
  const char *second[] = {"history", store, b, NULL};
  bt_run_limited(&r, NULL, second, &full);
  ck_assert_msg(r.status == 1, "exit %d (153: killed by SIGXFSZ): %s", r.status, r.err);
  /* the errno's text, not "short write" */
  ck_assert_msg(strstr(r.err, "File too large") && strstr(r.err, "nothing appended"), "%s", r.err);
  bt_result_free(&r);
  char *after = bt_read(lines_path);
  ck_assert_str_eq(after, before);
  free(after);
  /* with room again: both runs, whole */
  bt_run(&r, NULL, second);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_msg(!strstr(r.err, "skipped"), "%s", r.err);
  bt_result_free(&r);
  after = bt_read(lines_path);
  ck_assert_int_eq(count(after, "\n"), 2);
  ck_assert_int_eq(count(after, "\"commit\":\"bbbbbbb2222\""), 1);
  free(after);
  free(before);
  one_run_store_free(&t);
}
END_TEST

/* a store whose last record was torn (its writer killed): the next record
 * starts on a line of its own */
START_TEST(torn_last_line_is_not_glued) {
  one_run_store t;
  store_with_one_run(&t);
  char *store = t.store, *b = t.b, *lines_path = t.lines_path;
  bt_result r;
  FILE *f = fopen(lines_path, "a");
  ck_assert_ptr_nonnull(f);
  fputs("{\"run_id\":\"torn\",\"rows\":{\"x", f);
  ck_assert_int_eq(fclose(f), 0);
  const char *second[] = {"history", store, b, "--output", "-", NULL};
  bt_run(&r, NULL, second);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_msg(strstr(r.out, "<p>2 run(s)"), "the page counts %.40s", strstr(r.out, "<p>"));
  bt_result_free(&r);
  char *lines = bt_read(lines_path);
  ck_assert_int_eq(count(lines, "\n"), 3);
  free(lines);
  one_run_store_free(&t);
}
END_TEST

/* issue 30 item 16: every text from a report is escaped in index.html (a
 * commit label "<!--abc" hid the chart, "</svg>" closed it) */
START_TEST(report_texts_are_escaped_in_the_page) {
  cJSON *report = make_report("<!--abc</svg><script>x</script>", "<b>M&M's\x1b[2J</b>", 2.0);
  cJSON *bench = cJSON_GetObjectItem(report, "benchmarks");
  cJSON_AddItemToObject(bench, "tile<ops>", cJSON_DetachItemFromObject(bench, "tile_ops"));
  char *a = save("a.json", report);
  char *store = bt_path(dir, "hist");
  const char *argv[] = {"history", store, a, "--output", "-", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_msg(!strstr(r.out, "<!--"), "an HTML comment opened by a commit label");
  ck_assert_int_eq(count(r.out, "</svg>"), count(r.out, "<svg "));
  ck_assert_ptr_null(strstr(r.out, "<script"));
  ck_assert_ptr_null(strstr(r.out, "<b>"));
  ck_assert_ptr_null(strstr(r.out, "\x1b"));
  ck_assert_ptr_nonnull(strstr(r.out, ">&lt;!--abc</text>")); /* the short label */
  ck_assert_ptr_nonnull(strstr(r.out, "&lt;b&gt;M&amp;M&#39;s\\x1b[2J&lt;/b&gt;"));
  ck_assert_ptr_nonnull(strstr(r.out, "tile&lt;ops&gt;.tilepack/cpu"));
  bt_result_free(&r);
  free(store);
  free(a);
}
END_TEST

int main(void) {
  bt_bench();
  Suite *s = suite_create("bench_history");
  TCase *tc = tcase_create("history");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, append_and_chart);
  tcase_add_test(tc, output_flag_and_bad_input);
  tcase_add_test(tc, run_with_history_flag_appends);
  tcase_add_test(tc, a_held_report_is_not_appended_again);
  tcase_add_test(tc, full_disk_append_leaves_the_store_whole);
  tcase_add_test(tc, torn_last_line_is_not_glued);
  tcase_add_test(tc, report_texts_are_escaped_in_the_page);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
