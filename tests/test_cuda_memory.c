/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's memory, copies, timer and device info through the
 * public API: peak memory counts allocations, host -> device -> device ->
 * host keeps the bytes, a timer around them reads a sane time, the device
 * info is complete. Skipped (exit 77, the reason on stdout) where
 * the cuda backend cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

START_TEST(test_memory_and_timer) {
  int64_t shape[1] = {1000};
  apx_tensor h = tu_host1(APX_DTYPE_F32, 1000), back = tu_host1(APX_DTYPE_F32, 1000);
  fill_values(&h, 0);
  CHECK_OK(apx_reset_peak_memory(ctx, "cuda"), "reset peak");
  apx_tensor a = dev_alloc(ctx, APX_DTYPE_F32, 1, shape), b = dev_alloc(ctx, APX_DTYPE_F32, 1, shape);
  uint64_t peak = 0;
  CHECK_OK(apx_peak_memory(ctx, "cuda", &peak), "peak");
  ck_assert_msg(peak >= 8000, "peak %llu < the 8000 bytes allocated", (unsigned long long)peak);
  apx_timer *timer = NULL;
  CHECK_OK(apx_timer_begin(ctx, "cuda", &on_gpu, &timer), "timer_begin");
  CHECK_OK(apx_tensor_copy(ctx, &a, &h, NULL), "h2d");
  CHECK_OK(apx_tensor_copy(ctx, &b, &a, NULL), "d2d");
  double ms = -1;
  CHECK_OK(apx_timer_end(ctx, timer, &ms), "timer_end");
  ck_assert_msg(ms >= 0 && ms < 10000, "timer gave %g ms", ms);
  CHECK_OK(apx_tensor_copy(ctx, &back, &b, NULL), "d2h");
  ck_assert_msg(tu_bytes_equal(&back, &h), "host -> device -> device -> host changed the data");
  struct apx_device_info info;
  CHECK_OK(apx_device_info(ctx, APX_DEVICE_CUDA, 0, &info), "device_info");
  ck_assert_msg(info.name[0] && info.compute_major > 0 && info.multiprocessors > 0 &&
                    info.total_memory_bytes > 0 && info.runtime_version > 0,
                "device_info incomplete: %s cc %d.%d", info.name, info.compute_major,
                info.compute_minor);
  dev_free(ctx, &a);
  dev_free(ctx, &b);
  tu_free(&h);
  tu_free(&back);
}
END_TEST

static void add_tests(Suite *s) {
  TCase *ops = cc_tcase(s, "ops");
  tcase_add_test(ops, test_memory_and_timer);
}

int main(void) { return cc_main("cuda_memory", add_tests); }
