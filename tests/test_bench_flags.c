/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench flag validation: every bad flag exits 1 with a message that
 * names the flag and the bad value, before any report is written; --help
 * and --version exit 0, -h as --help; --progress and --no-progress. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_bench_util.h"

typedef struct bad_flag {
  const char *argv[6];
  const char *must_mention[2]; /* substrings of stderr */
} bad_flag;

/* Tiny sizes so that a flag wrongly accepted still finishes quickly. */
static const bad_flag bad_flags[] = {
    {{"--batch", "0"}, {"--batch", "[0]"}},
    {{"--batch", "abc"}, {"--batch", "[abc]"}},
    {{"--channels", "-3"}, {"--channels", "[-3]"}},
    {{"--height", "12"}, {"--tile-size", "--height 12"}},
    {{"--width", "2x"}, {"--width", "[2x]"}},
    {{"--tile-size", "0"}, {"--tile-size", "[0]"}},
    {{"--kmax", "0"}, {"--kmax", "[0]"}},
    {{"--kmax", "99999"}, {"--kmax", "[99999]"}},
    {{"--steps", "0"}, {"--steps", "[0]"}},
    {{"--budget-b1", "-1"}, {"--budget-b1", "[-1]"}},
    {{"--budget-b2", "nan"}, {"--budget-b2", "[nan]"}},
    {{"--budget-total", "lots"}, {"--budget-total", "[lots]"}},
    {{"--dtype", "fp64"}, {"--dtype", "[fp64]"}},
    {{"--seed", "-1"}, {"--seed", "[-1]"}},
    {{"--seed", "9007199254740993"}, {"--seed", "[9007199254740993]"}},
    {{"--warmup", "-1"}, {"--warmup", "[-1]"}},
    {{"--iters", "0"}, {"--iters", "[0]"}},
    {{"--iters", "1.5"}, {"--iters", "[1.5]"}},
    {{"--timer", "wall"}, {"--timer", "[wall]"}},
    {{"--ops", "tilepack,nosuchop"}, {"--ops", "[nosuchop]"}},
    {{"--ops", ","}, {"--ops", "empty"}},
    {{"--backends", "cpu,nosuchbackend"}, {"--backends", "[nosuchbackend]"}},
    {{"--config", "/nonexistent/apexx.ini"}, {"/nonexistent/apexx.ini", "configuration"}},
    {{"--ff-order", "zigzag"}, {"--ff-order", "[zigzag]"}},
    {{"--ff-overlap", "max"}, {"--ff-overlap", "[max]"}},
    {{"--ff-blend-alpha", "1.5"}, {"--ff-blend-alpha", "[1.5] is outside [0, 1]"}},
    {{"--ff-blend-alpha", "nan"}, {"--ff-blend-alpha", "[nan]"}},
    {{"--ff-blend-alpha", "-0.1"}, {"--ff-blend-alpha", "[-0.1]"}},
    {{"--ff-scan", "backward"}, {"--ff-scan", "[backward]"}},
    {{"--trt-input-shape", "input"}, {"--trt-input-shape", "[input]"}},
    {{"--trt-input-shape", "input=1x0x3"}, {"--trt-input-shape", "[input=1x0x3]"}},
    {{"--trt-input-shape", "=1x3"}, {"--trt-input-shape", "[=1x3]"}},
    {{"--output-json", "/nonexistent-dir/r.json"}, {"--output-json", "/nonexistent-dir"}},
    {{"--output-md", "/nonexistent-dir/r.md"}, {"--output-md", "/nonexistent-dir"}},
    {{"--frobnicate"}, {"[--frobnicate]", "unknown flag"}},
    {{"--batch"}, {"--batch", "needs a value"}},
    {{"stray"}, {"[stray]", "unexpected argument"}},
};
#define BAD_FLAG_COUNT ((int)(sizeof bad_flags / sizeof bad_flags[0]))

START_TEST(bad_flag_exits_1_naming_flag_and_value) {
  const bad_flag *b = &bad_flags[_i];
  /* a tiny profile first, the bad flag last (so "--batch" alone really
   * lacks its value): whatever fails must be the flag under test */
  const char *argv[16] = {"--quiet", "--iters", "1", "--warmup", "0", "--ops",
                          "tilepack"};
  int n = 7;
  for (int i = 0; b->argv[i]; i++) argv[n++] = b->argv[i];
  argv[n] = NULL;
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 1, "%s %s: exit %d, stderr: %s", b->argv[0],
                b->argv[1] ? b->argv[1] : "", r.status, r.err);
  for (int k = 0; k < 2 && b->must_mention[k]; k++) {
    ck_assert_msg(strstr(r.err, b->must_mention[k]) != NULL,
                  "%s: stderr lacks [%s]: %s", b->argv[0], b->must_mention[k], r.err);
  }
  /* nothing but the message: no report on stdout */
  ck_assert_msg(strstr(r.out, "schema_version") == NULL, "report printed: %s", r.out);
  bt_result_free(&r);
}
END_TEST

START_TEST(help_and_version_exit_0) {
  bt_result r;
  const char *help[] = {"--help", NULL};
  bt_run(&r, NULL, help);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(strstr(r.out, "usage: apexx-bench"));
  ck_assert_ptr_nonnull(strstr(r.out, "--trt-input-shape"));
  bt_result_free(&r);
  const char *version[] = {"--version", NULL};
  bt_run(&r, NULL, version);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(strstr(r.out, "apexx-bench 0."));
  bt_result_free(&r);
}
END_TEST

/* -h is --help for the run and for compare, ab and history. */
START_TEST(short_h_is_help) {
  static const char *const commands[] = {NULL, "compare", "ab", "history"};
  const char *command = commands[_i];
  bt_result h, help;
  const char *argv_h[] = {command ? command : "-h", "-h", NULL};
  const char *argv_help[] = {command ? command : "--help", "--help", NULL};
  if (!command)
    argv_h[1] = argv_help[1] = NULL;
  bt_run(&h, NULL, argv_h);
  bt_run(&help, NULL, argv_help);
  ck_assert_msg(h.status == 0, "apexx-bench %s -h exited %d: %s", command ? command : "",
                h.status, h.err);
  ck_assert_int_eq(help.status, 0);
  ck_assert_ptr_nonnull(strstr(h.out, "usage: apexx-bench"));
  ck_assert_str_eq(h.out, help.out);
  ck_assert_str_eq(h.err, "");
  bt_result_free(&h);
  bt_result_free(&help);
}
END_TEST

/* Progress off a terminal (the test's pipe): none by default or with
 * --no-progress last, a line per row as it starts with --progress last
 * (also with --quiet), no carriage return or escape sequence. */
typedef struct progress_case {
  const char *flags[3];
  int shown;
} progress_case;

static const progress_case progress_cases[] = {
    {{NULL}, 0},
    {{"--progress"}, 1},
    {{"--no-progress"}, 0},
    {{"--progress", "--no-progress"}, 0},
    {{"--no-progress", "--progress"}, 1},
    {{"--quiet", "--progress"}, 1},
    {{"--quiet"}, 0},
};

START_TEST(progress_off_a_terminal) {
  const progress_case *pc = &progress_cases[_i];
  char *dir = bt_tmpdir();
  char *json = bt_path(dir, "r.json");
  const char *argv[25] = {"--ops", "tilepack", "--backends", "cpu", "--batch", "1",
                          "--channels", "4", "--height", "16", "--width", "16", "--kmax", "2",
                          "--warmup", "1", "--iters", "2", "--repetitions", "1",
                          "--output-json", json};
  int n = 22;
  for (int i = 0; i < 2 && pc->flags[i]; i++)
    argv[n++] = pc->flags[i];
  argv[n] = NULL;
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  ck_assert_msg(!strchr(r.err, '\r') && !strchr(r.err, '\033'),
                "terminal control characters off a terminal: [%s]", r.err);
  int lines = 0;
  for (const char *p = r.err; (p = strstr(p, "[apexx-bench] ")); p++, lines++) {
    char section[64], entry[64], backend[32];
    int calls = 0;
    ck_assert_msg(p == r.err || p[-1] == '\n', "progress not at a line's start: [%s]", r.err);
    ck_assert_msg(sscanf(p, "[apexx-bench] %63[a-z0-9_].%63[a-z0-9_] %31[a-z]: %d calls\n",
                         section, entry, backend, &calls) == 4,
                  "progress line [%.80s]", p);
    ck_assert_str_eq(backend, "cpu");
    ck_assert_int_eq(calls, 3); /* --warmup 1 + --iters 2 */
  }
  if (pc->shown) {
    ck_assert_ptr_nonnull(strstr(r.err, "[apexx-bench] tile_ops.tilepack cpu: 3 calls\n"));
    ck_assert_int_ge(lines, 1);
  } else {
    ck_assert_msg(lines == 0, "%s %s: progress shown: [%s]", pc->flags[0] ? pc->flags[0] : "",
                  pc->flags[1] ? pc->flags[1] : "", r.err);
  }
  bt_result_free(&r);
  bt_rm_rf(dir);
  free(json);
  free(dir);
}
END_TEST

START_TEST(bad_run_leaves_no_file) {
  /* a flag error found after the output flags were read writes nothing */
  char *dir = bt_tmpdir();
  char *json = bt_path(dir, "r.json");
  const char *argv[] = {"--output-json", json, "--ops", "tilepack,bogus", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_int_eq(r.status, 1);
  ck_assert_int_eq(bt_dir_count(dir), 0);
  bt_result_free(&r);
  free(json);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

typedef struct bad_compare {
  const char *argv[6];
  const char *must_mention;
} bad_compare;

static const bad_compare bad_compares[] = {
    {{"compare", "--max-ratio", "-1", "a", "b"}, "[-1]"},
    {{"compare", "--max-abs-ms", "x", "a", "b"}, "[x]"},
    {{"compare", "only-one.json"}, "BASELINE and one to nine CURRENT"},
    /* several CURRENT reports are pooled: here the first is unreadable */
    {{"compare", "a", "b", "c"}, "cannot read [a]"},
    {{"compare", "--bogus", "a", "b"}, "[--bogus]"},
    {{"compare", "--emit-baseline"}, "exactly one"},
};

START_TEST(bad_compare_flags_exit_1) {
  const bad_compare *b = &bad_compares[_i];
  bt_result r;
  bt_run(&r, NULL, b->argv);
  ck_assert_msg(r.status == 1, "%s: exit %d: %s", b->argv[1], r.status, r.err);
  ck_assert_msg(strstr(r.err, b->must_mention) != NULL, "stderr lacks [%s]: %s",
                b->must_mention, r.err);
  bt_result_free(&r);
}
END_TEST

int main(void) {
  bt_bench(); /* skip early when the binary is missing */
  Suite *s = suite_create("bench_flags");
  TCase *tc = tcase_create("flags");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, bad_flag_exits_1_naming_flag_and_value, 0, BAD_FLAG_COUNT);
  tcase_add_test(tc, help_and_version_exit_0);
  tcase_add_test(tc, bad_run_leaves_no_file);
  tcase_add_loop_test(tc, short_h_is_help, 0, 4);
  tcase_add_loop_test(tc, progress_off_a_terminal, 0,
                      (int)(sizeof progress_cases / sizeof progress_cases[0]));
  tcase_add_loop_test(tc, bad_compare_flags_exit_1, 0,
                      (int)(sizeof bad_compares / sizeof bad_compares[0]));
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
