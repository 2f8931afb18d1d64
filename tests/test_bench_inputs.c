/* SPDX-License-Identifier: Apache-2.0 */
/* The files apexx-bench reads (bench/report_json.c bench_read_file, its
 * callers in compare.c, history.c and ab.c): a FIFO, a directory or a
 * device given as a report, a --confirm summary, a history report or the
 * history store itself is refused at once with a message naming it (it
 * was opened blocking: a FIFO hung the command for good); a file over the
 * size cap is refused from its size before it is read, a file at the cap
 * is read; compare's time grows linearly with the rows (it grew with
 * their square: every metric's lookup walked the section). */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_bench_util.h"

/* docs/report.md, Input limits */
#define REPORT_CAP (16L << 20)
/* a hang is a failure, not a stuck suite */
static const bt_limits quick = {30, 0};

static char *dir, *report;

/* A report of `rows` entries in one section, each with one ok cpu row of
 * five per-pass medians; the text is padded with spaces to pad_to bytes
 * when that is larger. */
static void write_report(const char *path, int rows, long pad_to) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "{\"schema_version\": {\"major\": 1, \"minor\": 3}, \"suite\": \"apexx\",\n"
             " \"status\": \"ok\", \"benchmarks\": {\"tile_ops\": {\n");
  for (int i = 0; i < rows; i++) {
    double t = 1.0 + 0.001 * (i % 97);
    fprintf(f,
            "%s  \"entry%06d\": {\"work\": {\"throughput\": \"tiles_per_s\"}, \"rows\": {\"cpu\": "
            "{\"status\": \"ok\", \"p50_ms\": %.6f, \"repetitions\": {\"n\": 5, \"medians_ms\": "
            "[%.6f, %.6f, %.6f, %.6f, %.6f], \"mins_ms\": [%.6f, %.6f, %.6f, %.6f, %.6f]}}}}\n",
            i ? "," : "", i, t, t * 0.99, t * 0.995, t, t * 1.005, t * 1.01, t * 0.9, t * 0.91,
            t * 0.92, t * 0.93, t * 0.94);
  }
  fprintf(f, "}}}\n");
  long len = ftell(f);
  for (; len < pad_to; len++)
    fputc(' ', f);
  ck_assert_int_eq(fclose(f), 0);
}

static void setup(void) {
  dir = bt_tmpdir();
  report = bt_path(dir, "report.json");
  write_report(report, 2, 0);
}

static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
  free(report);
}

/* status 1 and a message naming path as a FIFO, within the time limit */
static void refused_as_fifo(const char *const *argv, const char *path, const char *what) {
  bt_result r;
  bt_run_limited(&r, NULL, argv, &quick);
  ck_assert_msg(r.status == 1, "%s: exit %d (142: hung until the alarm): %s", what, r.status,
                r.err);
  char named[1024];
  snprintf(named, sizeof named, "[%s] is a FIFO, not a regular file", path);
  ck_assert_msg(strstr(r.err, named) != NULL, "%s: %s", what, r.err);
  bt_result_free(&r);
}

START_TEST(fifo_inputs_are_refused_at_once) {
  char *fifo = bt_path(dir, "fifo");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  const char *baseline[] = {"compare", fifo, report, NULL};
  refused_as_fifo(baseline, fifo, "compare FIFO REPORT");
  const char *current[] = {"compare", report, fifo, NULL};
  refused_as_fifo(current, fifo, "compare REPORT FIFO");
  const char *confirm[] = {"compare", report, report, "--confirm", fifo, "--quiet", NULL};
  refused_as_fifo(confirm, fifo, "compare --confirm FIFO");
  const char *emit[] = {"compare", "--emit-baseline", fifo, NULL};
  refused_as_fifo(emit, fifo, "compare --emit-baseline FIFO");
  char *store = bt_path(dir, "store");
  const char *history[] = {"history", store, fifo, NULL};
  refused_as_fifo(history, fifo, "history DIR FIFO");
  /* the store's own file a FIFO: history DIR, history DIR REPORT */
  char *fifo_store = bt_path(dir, "fifo-store");
  char *lines = bt_path(fifo_store, "history.jsonl");
  ck_assert_int_eq(mkdir(fifo_store, 0700), 0);
  ck_assert_int_eq(mkfifo(lines, 0600), 0);
  const char *render[] = {"history", fifo_store, NULL};
  refused_as_fifo(render, lines, "history DIR (history.jsonl a FIFO)");
  const char *append[] = {"history", fifo_store, report, NULL};
  refused_as_fifo(append, lines, "history DIR REPORT (history.jsonl a FIFO)");
  free(lines);
  free(fifo_store);
  free(store);
  free(fifo);
}
END_TEST

START_TEST(other_non_regular_inputs_are_refused) {
  bt_result r;
  const char *directory[] = {"compare", dir, report, NULL};
  bt_run_limited(&r, NULL, directory, &quick);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "is a directory, not a regular file"), "%s", r.err);
  bt_result_free(&r);
  const char *device[] = {"compare", report, "/dev/null", NULL};
  bt_run_limited(&r, NULL, device, &quick);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "[/dev/null] is a character device, not a regular file"), "%s",
                r.err);
  bt_result_free(&r);
  char *missing = bt_path(dir, "missing.json");
  const char *absent[] = {"compare", missing, report, NULL};
  bt_run_limited(&r, NULL, absent, &quick);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "No such file or directory"), "%s", r.err);
  bt_result_free(&r);
  free(missing);
}
END_TEST

START_TEST(report_over_the_cap_is_refused_before_reading) {
  /* one byte over: a sparse file, refused by its size */
  char *big = bt_path(dir, "big.json");
  int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, REPORT_CAP + 1), 0);
  close(fd);
  bt_result r;
  const char *small[] = {"compare", report, report, "--quiet", NULL};
  bt_run_limited(&r, NULL, small, &quick);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  long small_rss_kb = r.max_rss_kb;
  bt_result_free(&r);
  const char *argv[] = {"compare", big, report, NULL};
  bt_run_limited(&r, NULL, argv, &quick);
  ck_assert_int_eq(r.status, 1);
  char want[512];
  snprintf(want, sizeof want, "[%s] is [%ld] bytes, more than a report or baseline may hold [%ld]",
           big, REPORT_CAP + 1, REPORT_CAP);
  ck_assert_msg(strstr(r.err, want), "%s", r.err);
  /* refused before reading: the file never in memory (16 MiB more) */
  ck_assert_msg(r.max_rss_kb < small_rss_kb + 8 * 1024,
                "peak RSS %ld kB, %ld kB for a small report", r.max_rss_kb, small_rss_kb);
  bt_result_free(&r);
  const char *history[] = {"history", dir, big, NULL};
  bt_run_limited(&r, NULL, history, &quick);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "more than a report may hold"), "%s", r.err);
  bt_result_free(&r);
  /* exactly at the cap: read */
  char *at_cap = bt_path(dir, "at-cap.json");
  write_report(at_cap, 2, REPORT_CAP);
  struct stat st;
  ck_assert_int_eq(stat(at_cap, &st), 0);
  ck_assert_int_eq(st.st_size, REPORT_CAP);
  const char *argv2[] = {"compare", at_cap, report, "--quiet", NULL};
  bt_run_limited(&r, NULL, argv2, &quick);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
  free(at_cap);
  free(big);
}
END_TEST

/* compare REPORT REPORT of `rows` rows: the child's CPU seconds */
static double compare_cpu_s(int rows) {
  char name[64];
  snprintf(name, sizeof name, "rows-%d.json", rows);
  char *path = bt_path(dir, name);
  write_report(path, rows, 0);
  bt_result r;
  const char *argv[] = {"compare", path, path, "--quiet", NULL};
  const bt_limits limits = {240, 0};
  bt_run_limited(&r, NULL, argv, &limits);
  ck_assert_msg(r.status == 0, "%d rows: exit %d: %.300s", rows, r.status, r.err);
  ck_assert_msg(strstr(r.out, "compare status=pass"), "%.300s", r.out);
  double cpu = r.cpu_s;
  bt_result_free(&r);
  free(path);
  return cpu;
}

START_TEST(rows_scale_linearly) {
  /* 4x the rows: linear is at most ~4x the CPU time (less: the process's
   * start is a constant), quadratic ~16x. On the development VM before:
   * 4,000 rows 0.68 s, 16,000 rows 9.3 s (x13.6); after 0.41 s, 1.09 s
   * (x2.7). */
  double small = compare_cpu_s(4000);
  double large = compare_cpu_s(16000);
  double floor_s = 0.05; /* the clock's grain */
  double ratio = large / (small > floor_s ? small : floor_s);
  ck_assert_msg(ratio < 8.0, "4,000 rows %.3f s, 16,000 rows %.3f s: x%.1f", small, large, ratio);
}
END_TEST

/* history DIR of a store of `runs` runs, each with a row key of its own:
 * the child's CPU seconds */
static double history_cpu_s(int runs) {
  char name[64];
  snprintf(name, sizeof name, "store-%d", runs);
  char *store = bt_path(dir, name);
  ck_assert_int_eq(mkdir(store, 0700), 0);
  char *lines = bt_path(store, "history.jsonl");
  FILE *f = fopen(lines, "w");
  ck_assert_ptr_nonnull(f);
  for (int k = 0; k < runs; k++) {
    fprintf(f,
            "{\"run_id\":\"r%06d\",\"commit\":\"c%06d\",\"machine\":\"m%d\",\"rows\":{"
            "\"tile_ops.e/cpu\":{\"median_ms\":1,\"mad_ms\":0.05,\"n\":3,\"medians_ms\":[1,1.1,"
            "0.9]},\"tile_ops.e%06d/cpu\":{\"median_ms\":2,\"n\":1}}}\n",
            k, k, k % 40, k);
  }
  ck_assert_int_eq(fclose(f), 0);
  char *page = bt_path(dir, "page.html");
  bt_result r;
  const char *argv[] = {"history", store, "--output", page, NULL};
  const bt_limits limits = {240, 0};
  bt_run_limited(&r, NULL, argv, &limits);
  ck_assert_msg(r.status == 0, "%d runs: exit %d: %.300s", runs, r.status, r.err);
  double cpu = r.cpu_s;
  bt_result_free(&r);
  free(page);
  free(lines);
  free(store);
  return cpu;
}

START_TEST(history_of_distinct_rows_scales_linearly) {
  /* every run adds a row key: each chart walked every run (rows x runs).
   * On the development VM before: 2,000 runs 13.5 s of CPU, 8,000 runs
   * stopped by the alarm at 240 s; after 0.32 s and 0.44 s. */
  double small = history_cpu_s(2000);
  double large = history_cpu_s(8000);
  double floor_s = 0.05;
  double ratio = large / (small > floor_s ? small : floor_s);
  ck_assert_msg(ratio < 8.0, "2,000 runs %.3f s, 8,000 runs %.3f s: x%.1f", small, large, ratio);
}
END_TEST

int main(void) {
  bt_bench();
  Suite *s = suite_create("bench_inputs");
  TCase *tc = tcase_create("inputs");
  tcase_set_timeout(tc, 600);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, fifo_inputs_are_refused_at_once);
  tcase_add_test(tc, other_non_regular_inputs_are_refused);
  tcase_add_test(tc, report_over_the_cap_is_refused_before_reading);
  tcase_add_test(tc, rows_scale_linearly);
  tcase_add_test(tc, history_of_distinct_rows_scales_linearly);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
