/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench output paths (bench/report_json.c safe writes): a regular
 * file is replaced atomically, a new path created, a symlink's regular
 * target replaced the same way (the link stays a link; a full disk leaves
 * the target as it was), /dev/null and a FIFO written in place (never
 * replaced), a dangling symlink, a FIFO without a reader and a directory
 * refused with a message, '-' is standard output; the JSON and Markdown of
 * a run or a compare are prepared together (no Markdown without its JSON), a failure says which
 * file was written, and stale temporary files of a killed run are removed. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_bench_util.h"

#define TINY                                                                                       \
  "--channels", "8", "--height", "16", "--width", "16", "--kmax", "2", "--steps", "8", "--iters",  \
      "2", "--warmup", "0", "--repetitions", "2", "--quiet", "--ops", "tilepack", "--backends",    \
      "cpu"

static char *dir, *report;

static cJSON *tiny_report(void) {
  cJSON *r = cJSON_CreateObject();
  cJSON *sv = cJSON_AddObjectToObject(r, "schema_version");
  cJSON_AddNumberToObject(sv, "major", 1);
  cJSON_AddNumberToObject(sv, "minor", 1);
  cJSON_AddStringToObject(r, "suite", "apexx");
  cJSON_AddStringToObject(r, "status", "ok");
  cJSON *rows = cJSON_AddObjectToObject(
      cJSON_AddObjectToObject(
          cJSON_AddObjectToObject(cJSON_AddObjectToObject(r, "benchmarks"), "tile_ops"),
          "tilepack"),
      "rows");
  cJSON *cpu = cJSON_AddObjectToObject(rows, "cpu");
  cJSON_AddStringToObject(cpu, "status", "ok");
  cJSON_AddNumberToObject(cpu, "p50_ms", 1.0);
  /* six passes: enough for compare to show "unchanged" against itself */
  cJSON *medians =
      cJSON_AddArrayToObject(cJSON_AddObjectToObject(cpu, "repetitions"), "medians_ms");
  for (int i = 0; i < 6; i++)
    cJSON_AddItemToArray(medians, cJSON_CreateNumber(1.0));
  return r;
}

static void setup(void) {
  dir = bt_tmpdir();
  report = bt_path(dir, "report.json");
  cJSON *r = tiny_report();
  bt_save_json(report, r);
  cJSON_Delete(r);
}

static void teardown(void) {
  bt_rm_rf(dir);
  free(dir);
  free(report);
}

/* compare REPORT REPORT --output-md target: exit status, output in *r */
static int write_md(bt_result *r, const char *target) {
  const char *argv[] = {"compare", report, report, "--quiet", "--output-md", target, NULL};
  bt_run(r, NULL, argv);
  return r->status;
}

static ino_t inode_of(const char *path) {
  struct stat st;
  ck_assert_int_eq(lstat(path, &st), 0);
  return st.st_ino;
}

START_TEST(regular_file_is_replaced_atomically) {
  char *target = bt_path(dir, "out.md");
  bt_write(target, "old\n");
  ino_t before = inode_of(target);
  bt_result r;
  ck_assert_int_eq(write_md(&r, target), 0);
  bt_result_free(&r);
  char *text = bt_read(target);
  ck_assert_ptr_nonnull(strstr(text, "# apexx-bench compare"));
  /* renamed over: a new inode, and nothing else left in the directory */
  ck_assert(inode_of(target) != before);
  ck_assert_int_eq(bt_dir_count(dir), 2);
  free(text);
  free(target);
}
END_TEST

START_TEST(new_path_is_created) {
  char *target = bt_path(dir, "new.md");
  bt_result r;
  ck_assert_int_eq(write_md(&r, target), 0);
  bt_result_free(&r);
  struct stat st;
  ck_assert_int_eq(lstat(target, &st), 0);
  ck_assert(S_ISREG(st.st_mode));
  ck_assert_int_eq(bt_dir_count(dir), 2);
  free(target);
}
END_TEST

START_TEST(symlink_is_written_through) {
  char *sub = bt_path(dir, "elsewhere");
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  char *real = bt_path(sub, "real.md"), *link = bt_path(dir, "link.md");
  bt_write(real, "old\n");
  ino_t before = inode_of(real);
  ck_assert_int_eq(symlink(real, link), 0);
  bt_result r;
  ck_assert_int_eq(write_md(&r, link), 0);
  bt_result_free(&r);
  struct stat st;
  ck_assert_int_eq(lstat(link, &st), 0);
  ck_assert(S_ISLNK(st.st_mode));
  char *text = bt_read(real);
  ck_assert_ptr_nonnull(strstr(text, "# apexx-bench compare"));
  free(text);
  /* the target was replaced by a rename beside it, not rewritten */
  ck_assert(inode_of(real) != before);
  ck_assert_int_eq(bt_dir_count(sub), 1);
  /* a dangling symlink: refused, its target not created */
  char *dangling = bt_path(dir, "dangling.md"), *nowhere = bt_path(dir, "nowhere.md");
  ck_assert_int_eq(symlink(nowhere, dangling), 0);
  ck_assert_int_eq(write_md(&r, dangling), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "symlink to a missing file"));
  ck_assert(!bt_exists(nowhere));
  bt_result_free(&r);
  free(real);
  free(link);
  free(dangling);
  free(nowhere);
  free(sub);
}
END_TEST

/* issue 30 item 8: a full disk (the file size limit) while writing through
 * a symlink left the target truncated and half-written: broken JSON */
START_TEST(symlink_target_survives_a_full_disk) {
  char *real = bt_path(dir, "real.json"), *link = bt_path(dir, "link.json");
  bt_write(real, "{\"previous\": true}\n");
  ck_assert_int_eq(symlink(real, link), 0);
  /* the summary is over 1,000 bytes, the check lines under */
  const bt_limits full = {30, 1000};
  const char *argv[] = {"compare", report, report, "--quiet", "--output-json", link, NULL};
  bt_result r;
  bt_run_limited(&r, NULL, argv, &full);
  ck_assert_msg(r.status == 1, "exit %d (153: killed by SIGXFSZ): %s", r.status, r.err);
  ck_assert_msg(strstr(r.err, "File too large"), "%s", r.err);
  bt_result_free(&r);
  char *text = bt_read(real);
  ck_assert_str_eq(text, "{\"previous\": true}\n");
  free(text);
  struct stat st;
  ck_assert_int_eq(lstat(link, &st), 0);
  ck_assert(S_ISLNK(st.st_mode));
  /* no temporary left: report.json, real.json, link.json */
  ck_assert_int_eq(bt_dir_count(dir), 3);
  /* without the limit: whole JSON through the link */
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
  cJSON *json = bt_load_json(real);
  ck_assert_ptr_nonnull(json);
  cJSON_Delete(json);
  free(real);
  free(link);
}
END_TEST

/* issue 30 item 19: compare's Markdown was written though its JSON failed */
START_TEST(compare_writes_the_markdown_only_with_the_json) {
  char *md = bt_path(dir, "c.md"), *json = bt_path(dir, "c.json");
  char *dangling = bt_path(dir, "gone");
  ck_assert_int_eq(symlink(dangling, json), 0);
  const char *argv[] = {"compare", report,        report, "--quiet", "--output-json",
                        json,      "--output-md", md,     NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "--output-json") && strstr(r.err, "neither file was written"), "%s",
                r.err);
  bt_result_free(&r);
  ck_assert_msg(!bt_exists(md), "the Markdown was written without its JSON");
  /* the JSON's commit fails on a full disk: the Markdown stays unwritten */
  ck_assert_int_eq(unlink(json), 0);
  const bt_limits full = {30, 1000};
  bt_run_limited(&r, NULL, argv, &full);
  ck_assert_int_eq(r.status, 1);
  ck_assert_msg(strstr(r.err, "File too large"), "%s", r.err);
  bt_result_free(&r);
  ck_assert(!bt_exists(md) && !bt_exists(json));
  ck_assert_int_eq(bt_dir_count(dir), 1); /* report.json */
  free(md);
  free(json);
  free(dangling);
}
END_TEST

START_TEST(dev_null_stays_a_device) {
  bt_result r;
  ck_assert_int_eq(write_md(&r, "/dev/null"), 0);
  bt_result_free(&r);
  struct stat st;
  ck_assert_int_eq(lstat("/dev/null", &st), 0);
  ck_assert(S_ISCHR(st.st_mode));
  /* a run's JSON too (the issue's --output-md /dev/stdout as root) */
  const char *argv[] = {TINY, "--output-json", "/dev/null", "--output-md", "/dev/null", NULL};
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
  ck_assert_int_eq(lstat("/dev/null", &st), 0);
  ck_assert(S_ISCHR(st.st_mode));
}
END_TEST

START_TEST(dev_stdout_keeps_earlier_output) {
  /* stdout is a regular file here (bt_run's capture): the table must follow
   * the check lines, not overwrite or truncate them */
  const char *argv[] = {"compare", report, report, "--output-md", "/dev/stdout", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  char *verdict = strstr(r.out, "compare status=pass");
  char *table = strstr(r.out, "# apexx-bench compare");
  ck_assert(verdict && table && verdict < table);
  bt_result_free(&r);
  const char *argv2[] = {"compare", report, report, "--quiet", "--output-md", "/dev/stderr", NULL};
  bt_run(&r, NULL, argv2);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(strstr(r.err, "# apexx-bench compare"));
  ck_assert_ptr_null(strstr(r.out, "# apexx-bench compare"));
  bt_result_free(&r);
  struct stat st;
  ck_assert_int_eq(lstat("/dev/stdout", &st), 0);
  ck_assert(S_ISLNK(st.st_mode));
}
END_TEST

START_TEST(fifo_is_written_in_place) {
  char *fifo = bt_path(dir, "pipe");
  char *got = bt_path(dir, "got.txt");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  /* without a reader: refused at once, not a hang */
  bt_result r;
  ck_assert_int_eq(write_md(&r, fifo), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "no reader"));
  bt_result_free(&r);
  /* with a reader: the text arrives through the FIFO. The reader holds it
   * open read-write (so it is open before the writer comes and never sees
   * an early end of file) and stops after 300 ms without data. */
  int ready[2];
  ck_assert_int_eq(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    int in = open(fifo, O_RDWR);
    int out = open(got, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || write(ready[1], "r", 1) != 1)
      _exit(1);
    char buf[4096];
    int received = 0;
    struct pollfd pfd = {in, POLLIN, 0};
    while (poll(&pfd, 1, received ? 300 : 20000) > 0) {
      ssize_t n = read(in, buf, sizeof buf);
      if (n <= 0 || write(out, buf, (size_t)n) != n)
        break;
      received = 1;
    }
    _exit(0);
  }
  char byte;
  ck_assert_int_eq(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  close(ready[1]);
  ck_assert_int_eq(write_md(&r, fifo), 0);
  bt_result_free(&r);
  int status = 0;
  waitpid(pid, &status, 0);
  char *text = bt_read(got);
  ck_assert_ptr_nonnull(text);
  ck_assert_ptr_nonnull(strstr(text, "# apexx-bench compare"));
  struct stat st;
  ck_assert_int_eq(lstat(fifo, &st), 0);
  ck_assert(S_ISFIFO(st.st_mode));
  free(text);
  free(fifo);
  free(got);
}
END_TEST

START_TEST(directory_is_refused) {
  char *sub = bt_path(dir, "sub");
  char *inner = bt_path(sub, "keep");
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  bt_write(inner, "x");
  bt_result r;
  ck_assert_int_eq(write_md(&r, sub), 1);
  ck_assert_ptr_nonnull(strstr(r.err, "is a directory"));
  bt_result_free(&r);
  ck_assert(bt_exists(inner));
  ck_assert_int_eq(bt_dir_count(sub), 1);
  free(sub);
  free(inner);
}
END_TEST

START_TEST(dash_is_stdout) {
  char *cwd = getcwd(NULL, 0);
  ck_assert_int_eq(chdir(dir), 0);
  bt_result r;
  ck_assert_int_eq(write_md(&r, "-"), 0);
  ck_assert_ptr_nonnull(strstr(r.out, "# apexx-bench compare"));
  ck_assert(!bt_exists("-"));
  bt_result_free(&r);
  /* a run: JSON to stdout, the wrote_* lines to stderr */
  const char *argv[] = {TINY, "--output-json", "-", NULL};
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  cJSON *json = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(json);
  cJSON_Delete(json);
  ck_assert(!bt_exists("-"));
  bt_result_free(&r);
  ck_assert_int_eq(chdir(cwd), 0);
  free(cwd);
}
END_TEST

/* issue 16 item 10: the pair, and stale temporaries */
START_TEST(pair_is_prepared_together) {
  char *json = bt_path(dir, "r.json"), *md = bt_path(dir, "r.md");
  char *dangling = bt_path(dir, "gone"), *fifo = bt_path(dir, "pipe");
  bt_write(json, "previous\n");
  /* the Markdown target cannot be prepared: neither file changes */
  ck_assert_int_eq(symlink(dangling, md), 0);
  const char *argv[] = {TINY, "--output-json", json, "--output-md", md, NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_int_eq(r.status, 1);
  ck_assert_ptr_nonnull(strstr(r.err, "--output-md"));
  bt_result_free(&r);
  char *text = bt_read(json);
  ck_assert_str_eq(text, "previous\n");
  free(text);
  /* the Markdown's commit fails after the JSON's: the message says which */
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  const char *argv2[] = {TINY, "--output-json", json, "--output-md", fifo, NULL};
  bt_run(&r, NULL, argv2);
  ck_assert_int_eq(r.status, 1);
  ck_assert_ptr_nonnull(strstr(r.err, "was written, the Markdown"));
  bt_result_free(&r);
  /* no temporary file left behind in either case: r.json, r.md, pipe */
  ck_assert_int_eq(bt_dir_count(dir), 4); /* + report.json of the fixture */
  free(json);
  free(md);
  free(dangling);
  free(fifo);
}
END_TEST

START_TEST(stale_temps_are_removed) {
  char *json = bt_path(dir, "r.json");
  char *stale = bt_path(dir, ".r.json.tmp.AbC123");
  char *fresh = bt_path(dir, ".r.json.tmp.XyZ789");
  char *other = bt_path(dir, ".other.json.tmp.AbC123");
  bt_write(stale, "half a report");
  bt_write(fresh, "a write in progress");
  bt_write(other, "not ours");
  struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
  ck_assert_int_eq(utimes(stale, old), 0);
  ck_assert_int_eq(utimes(other, old), 0);
  const char *argv[] = {TINY, "--output-json", json, NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  bt_result_free(&r);
  ck_assert(!bt_exists(stale));
  ck_assert(bt_exists(fresh));
  ck_assert(bt_exists(other));
  ck_assert(bt_exists(json));
  free(json);
  free(stale);
  free(fresh);
  free(other);
}
END_TEST

int main(void) {
  bt_bench();
  signal(SIGPIPE, SIG_IGN);
  Suite *s = suite_create("safe_write");
  TCase *tc = tcase_create("paths");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, regular_file_is_replaced_atomically);
  tcase_add_test(tc, new_path_is_created);
  tcase_add_test(tc, symlink_is_written_through);
  tcase_add_test(tc, symlink_target_survives_a_full_disk);
  tcase_add_test(tc, compare_writes_the_markdown_only_with_the_json);
  tcase_add_test(tc, dev_null_stays_a_device);
  tcase_add_test(tc, dev_stdout_keeps_earlier_output);
  tcase_add_test(tc, fifo_is_written_in_place);
  tcase_add_test(tc, directory_is_refused);
  tcase_add_test(tc, dash_is_stdout);
  tcase_add_test(tc, pair_is_prepared_together);
  tcase_add_test(tc, stale_temps_are_removed);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
