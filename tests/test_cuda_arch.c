/* SPDX-License-Identifier: Apache-2.0 */
/* Which code of the cuda backend's module a device runs
 * (backends/cuda/arch_match.c; docs/gpus.md): the default list on every
 * card of the table, the PTX-only and SASS-only builds of
 * bench/gpu/arch-check.sh, SASS before PTX, arch- and family-specific
 * entries, and the reasons for no code, a malformed list or a bad compute
 * capability. No CUDA needed: the probe's decision is this function. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/cuda/arch_match.h"

#define DEFAULT_LIST "sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 compute_120"

static char chosen[64], reason[512];
static int code_arch;

static int match(int major, int minor, const char *list) {
  memset(chosen, 'x', sizeof chosen - 1);
  chosen[sizeof chosen - 1] = '\0';
  memset(reason, 'x', sizeof reason - 1);
  reason[sizeof reason - 1] = '\0';
  code_arch = -1;
  return cuda_arch_match(major, minor, list, chosen, sizeof chosen, &code_arch, reason,
                         sizeof reason);
}

/* the device runs `want` (code arch `arch`) from `list` */
static void expect_runs(int major, int minor, const char *list, const char *want, int arch) {
  ck_assert_msg(match(major, minor, list) == 1, "cc %d.%d, [%s]: %s", major, minor, list, reason);
  ck_assert_str_eq(chosen, want);
  ck_assert_int_eq(code_arch, arch);
  ck_assert_str_eq(reason, "");
}

/* nothing in `list` runs on the device: the reason names its cc and the list */
static void expect_none(int major, int minor, const char *list) {
  char cc[16];
  ck_assert_int_eq(match(major, minor, list), 0);
  ck_assert_str_eq(chosen, "");
  ck_assert_int_eq(code_arch, 0);
  snprintf(cc, sizeof cc, "cc %d.%d", major, minor);
  ck_assert_msg(strstr(reason, cc) != NULL, "[%s] lacks [%s]", reason, cc);
  ck_assert_msg(strstr(reason, list) != NULL, "[%s] lacks [%s]", reason, list);
  ck_assert_msg(strstr(reason, "--with-cuda-arch") != NULL, "[%s]", reason);
}

START_TEST(test_default_list) {
  /* T4, A100, A10, Orin (8.7: sm_86's SASS), L4, H100/H200, B200, B300
   * (10.3), RTX 50x0 (12.0), GB10 (12.1) */
  expect_runs(7, 5, DEFAULT_LIST, "sm_75", 75);
  expect_runs(8, 0, DEFAULT_LIST, "sm_80", 80);
  expect_runs(8, 6, DEFAULT_LIST, "sm_86", 86);
  expect_runs(8, 7, DEFAULT_LIST, "sm_86", 86);
  expect_runs(8, 9, DEFAULT_LIST, "sm_89", 89);
  expect_runs(9, 0, DEFAULT_LIST, "sm_90", 90);
  expect_runs(10, 0, DEFAULT_LIST, "sm_100", 100);
  expect_runs(10, 3, DEFAULT_LIST, "sm_100", 100);
  expect_runs(12, 0, DEFAULT_LIST, "sm_120", 120);
  expect_runs(12, 1, DEFAULT_LIST, "sm_120", 120);
  /* a later card JIT-compiles the PTX */
  expect_runs(13, 0, DEFAULT_LIST, "compute_120", 120);
  /* V100 (7.0; CUDA 13 builds nothing for it) and Thor (11.0: below the
   * PTX, no SASS of its major) */
  expect_none(7, 0, DEFAULT_LIST);
  expect_none(6, 1, DEFAULT_LIST);
  expect_none(11, 0, DEFAULT_LIST);
  ck_assert(strstr(reason, "build with 110 in --with-cuda-arch") != NULL);
}
END_TEST

START_TEST(test_ptx_only) {
  /* arch-check.sh's PTX-only builds on an H200: the older paths, JIT */
  expect_runs(9, 0, "compute_75", "compute_75", 75);
  expect_runs(7, 5, "compute_75", "compute_75", 75);
  expect_runs(12, 0, "compute_75", "compute_75", 75);
  expect_runs(9, 0, "compute_80", "compute_80", 80);
  expect_runs(8, 0, "compute_80", "compute_80", 80);
  expect_none(7, 5, "compute_80");
  expect_none(7, 0, "compute_75");
  /* the newest PTX that fits */
  expect_runs(9, 0, "compute_75 compute_90 compute_100", "compute_90", 90);
}
END_TEST

START_TEST(test_sass_only) {
  /* arch-check.sh's mismatched module: sm_100 only, run on an H200 */
  expect_none(9, 0, "sm_100");
  ck_assert(strstr(reason, "no code for this device's cc 9.0") != NULL);
  ck_assert(strstr(reason, "[sm_100]") != NULL);
  ck_assert(strstr(reason, "build with 90 in --with-cuda-arch") != NULL);
  expect_runs(10, 0, "sm_100", "sm_100", 100);
  expect_runs(10, 3, "sm_100", "sm_100", 100);
  expect_none(12, 0, "sm_100"); /* SASS never crosses a major */
  expect_none(8, 6, "sm_89");   /* nor runs below its minor */
  expect_runs(8, 9, "sm_80 sm_86", "sm_86", 86);
}
END_TEST

START_TEST(test_sass_before_ptx) {
  expect_runs(9, 0, "sm_90 compute_90", "sm_90", 90);
  expect_runs(10, 0, "sm_90 compute_90", "compute_90", 90);
  /* a fitting SASS wins over a newer fitting PTX */
  expect_runs(8, 6, "compute_86 sm_80", "sm_80", 80);
  /* order and spacing do not matter */
  expect_runs(8, 9, "  sm_89   sm_75  compute_75 ", "sm_89", 89);
}
END_TEST

START_TEST(test_specific_variants) {
  expect_runs(9, 0, "sm_90a", "sm_90a", 90);
  expect_none(10, 0, "sm_90a");
  expect_none(10, 0, "compute_90a"); /* arch-specific PTX: its own cc only */
  expect_runs(9, 0, "compute_90a", "compute_90a", 90);
  expect_runs(10, 3, "sm_100f compute_100f", "sm_100f", 100);
  expect_runs(10, 3, "compute_100f", "compute_100f", 100);
  expect_none(12, 0, "sm_100f compute_100f"); /* family PTX: its major only */
}
END_TEST

START_TEST(test_bad_lists) {
  const char *bad[] = {"sm_9",      "sm_090", "gfx90a", "sm_90b", "compute_", "sm_1000",
                       "sm_90,sm_100", "90",  "SM_90"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(match(9, 0, bad[i]), 0);
    ck_assert_str_eq(chosen, "");
    ck_assert_msg(strstr(reason, "that is not sm_XY or compute_XY") != NULL, "%s: [%s]", bad[i],
                  reason);
  }
  /* the bad entry is named, in brackets */
  ck_assert_int_eq(match(9, 0, "sm_90 sm_x0 compute_90"), 0);
  ck_assert(strstr(reason, "an entry [sm_x0]") != NULL);
  ck_assert_int_eq(match(9, 0, ""), 0);
  ck_assert(strstr(reason, "arch list is empty") != NULL);
  ck_assert_int_eq(match(9, 0, "   "), 0);
  ck_assert(strstr(reason, "arch list is empty") != NULL);
  ck_assert_int_eq(match(9, 0, NULL), 0);
  ck_assert(strstr(reason, "arch list is empty") != NULL);
}
END_TEST

START_TEST(test_bad_cc) {
  const int cc[][2] = {{0, 0}, {-1, 0}, {9, -1}, {9, 10}};
  for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) {
    ck_assert_int_eq(match(cc[i][0], cc[i][1], DEFAULT_LIST), 0);
    ck_assert(strstr(reason, "is not one") != NULL);
  }
}
END_TEST

START_TEST(test_buffers) {
  /* NULL or empty buffers, and a short reason cut but terminated */
  ck_assert_int_eq(cuda_arch_match(9, 0, DEFAULT_LIST, NULL, 0, NULL, NULL, 0), 1);
  ck_assert_int_eq(cuda_arch_match(9, 0, "sm_100", NULL, 0, NULL, NULL, 0), 0);
  char small[8];
  ck_assert_int_eq(cuda_arch_match(9, 0, "sm_100", small, 0, NULL, small, sizeof small), 0);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  char tiny[4];
  ck_assert_int_eq(cuda_arch_match(10, 0, "sm_100", tiny, sizeof tiny, NULL, NULL, 0), 1);
  ck_assert_str_eq(tiny, "sm_");
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_arch");
  TCase *tc = tcase_create("cuda_arch");
  tcase_add_test(tc, test_default_list);
  tcase_add_test(tc, test_ptx_only);
  tcase_add_test(tc, test_sass_only);
  tcase_add_test(tc, test_sass_before_ptx);
  tcase_add_test(tc, test_specific_variants);
  tcase_add_test(tc, test_bad_lists);
  tcase_add_test(tc, test_bad_cc);
  tcase_add_test(tc, test_buffers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
