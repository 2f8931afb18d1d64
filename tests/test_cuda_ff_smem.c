/* SPDX-License-Identifier: Apache-2.0 */
/* The FF frame's shared memory a block against the device's
 * (backends/cuda/ff_smem.c; docs/gpus.md): which frames the cuda backend
 * takes on cards of 64 KiB (cc 7.5), 99 KiB (8.6, 8.9, 12.x), 163 KiB
 * (8.0) and 227 KiB (9.0, 10.0) a block, and the reason naming the kernel
 * that does not fit. No CUDA needed: cuda_ff_supports' decision is this
 * function with the device's cudaDevAttrMaxSharedMemoryPerBlockOptin. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/cuda/ff_smem.h"

#define KIB 1024
#define T4 (64 * KIB)
#define L4 (99 * KIB)
#define A100 (163 * KIB)
#define H100 (227 * KIB)

static char reason[512];

static int fits(int64_t C, int64_t G0, int64_t K0, int64_t P, size_t optin) {
  memset(reason, 'x', sizeof reason - 1);
  reason[sizeof reason - 1] = '\0';
  return cuda_ff_smem_fits(C, G0, K0, P, optin, reason, sizeof reason);
}

/* refused, the reason naming `kernel` and the device's bytes */
static void expect_refused(int64_t C, int64_t G0, int64_t K0, int64_t P, size_t optin,
                           const char *kernel) {
  char dev[32];
  ck_assert_msg(fits(C, G0, K0, P, optin) == 0, "C %lld G0 %lld K0 %lld on %zu: fits",
                (long long)C, (long long)G0, (long long)K0, optin);
  ck_assert_msg(strstr(reason, kernel) != NULL, "[%s] lacks [%s]", reason, kernel);
  snprintf(dev, sizeof dev, "offers %zu", optin);
  ck_assert_msg(strstr(reason, dev) != NULL, "[%s] lacks [%s]", reason, dev);
}

static void expect_fits(int64_t C, int64_t G0, int64_t K0, int64_t P, size_t optin) {
  ck_assert_msg(fits(C, G0, K0, P, optin) == 1, "C %lld G0 %lld K0 %lld on %zu: %s",
                (long long)C, (long long)G0, (long long)K0, optin, reason);
  ck_assert_str_eq(reason, "");
}

START_TEST(test_default_frame_everywhere) {
  /* docs/ff_infer.md's default profile: C 128, G0 64, 20 L0 tiles, 8
   * parents */
  const size_t cards[] = {T4, L4, A100, H100};
  for (size_t i = 0; i < sizeof cards / sizeof cards[0]; i++) expect_fits(128, 64, 20, 8, cards[i]);
}
END_TEST

START_TEST(test_refine_channels) {
  /* the two-kernel refine takes C * 32 floats: 504 channels are the most
   * on a 64 KiB card, 784 on a 99 KiB one; every C the backend takes
   * (<= 1024) on 8.0 and 9.0 */
  expect_fits(504, 64, 20, 8, T4);
  expect_refused(505, 64, 20, 8, T4, "refine");
  ck_assert_msg(strstr(reason, "at most 504 fit") != NULL, "[%s]", reason);
  expect_fits(784, 64, 20, 8, L4);
  expect_refused(785, 64, 20, 8, L4, "refine");
  expect_fits(1024, 64, 20, 8, A100);
  expect_fits(1024, 64, 20, 8, H100);
  ck_assert_uint_eq(cuda_ff_conv_smem_bytes(128), 128 * 32 * sizeof(float));
}
END_TEST

START_TEST(test_routing_tiles) {
  /* 8 bytes a tile and a taken tile, 4 a walk entry, 4 a utility up to
   * 4096 tiles */
  ck_assert_uint_eq(cuda_ff_route_smem_bytes(64, 20, 8), 8 * 84 + 4 * (20 + 32 + 32) + 4 * 64);
  ck_assert_uint_eq(cuda_ff_route_smem_bytes(8192, 0, 0), 8 * 8192);
  /* a 1024x1024 map of 8-pixel tiles (G0 16384) routes on 9.0 and 8.0, not
   * on 8.6/8.9 (128 KiB of scores) */
  expect_fits(128, 16384, 32, 8, H100);
  expect_fits(128, 16384, 32, 8, A100);
  expect_refused(128, 16384, 32, 8, L4, "routing");
  ck_assert_msg(strstr(reason, "16384 L0 tiles") != NULL, "[%s]", reason);
  /* a 512x512 map of 8-pixel tiles (G0 4096): 64 tiles taken on every
   * card; all of them (128 KiB) on 8.0 and 9.0 only */
  expect_fits(128, 4096, 64, 16, T4);
  expect_refused(128, 4096, 4096, 1024, T4, "routing");
  expect_refused(128, 4096, 4096, 1024, L4, "routing");
  expect_fits(128, 4096, 4096, 1024, A100);
  /* every tile taken of G0 16384 needs 256 KiB + 192 KiB: no card */
  expect_refused(128, 16384, 16384, 4096, H100, "routing");
}
END_TEST

START_TEST(test_scan_film_threads) {
  ck_assert_uint_eq(cuda_ff_sf_threads(1), 64);
  ck_assert_uint_eq(cuda_ff_sf_threads(16), 64);
  ck_assert_uint_eq(cuda_ff_sf_threads(17), 96);
  ck_assert_uint_eq(cuda_ff_sf_threads(128), 512);
  ck_assert_uint_eq(cuda_ff_sf_threads(1024), 512);
  /* 16 floats a channel (C rounded up to 4) and one a thread */
  ck_assert_uint_eq(cuda_ff_sf_smem_bytes(128), sizeof(float) * (16 * 128 + 512));
  ck_assert_uint_eq(cuda_ff_sf_smem_bytes(5), sizeof(float) * (16 * 8 + 64));
  /* checked before the refine: on a 48 KiB device 1024 channels need
   * 66 KiB */
  expect_refused(1024, 64, 20, 8, 48 * KIB, "scan/FiLM");
}
END_TEST

START_TEST(test_room_and_reason_buffers) {
  ck_assert_uint_eq(cuda_ff_smem_room(0), 0);
  ck_assert_uint_eq(cuda_ff_smem_room(CUDA_FF_SMEM_STATIC), 0);
  ck_assert_uint_eq(cuda_ff_smem_room(T4), T4 - CUDA_FF_SMEM_STATIC);
  /* NULL and short reason buffers */
  ck_assert_int_eq(cuda_ff_smem_fits(1024, 64, 20, 8, T4, NULL, 0), 0);
  char small[8];
  memset(small, 'x', sizeof small);
  ck_assert_int_eq(cuda_ff_smem_fits(1024, 64, 20, 8, T4, small, sizeof small), 0);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  ck_assert_int_eq(cuda_ff_smem_fits(128, 64, 20, 8, 0, NULL, 0), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda_ff_smem");
  TCase *tc = tcase_create("smem");
  tcase_add_test(tc, test_default_frame_everywhere);
  tcase_add_test(tc, test_refine_channels);
  tcase_add_test(tc, test_routing_tiles);
  tcase_add_test(tc, test_scan_film_threads);
  tcase_add_test(tc, test_room_and_reason_buffers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
