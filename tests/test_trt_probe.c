/* SPDX-License-Identifier: Apache-2.0 */
/* The trt backend's probe (backends/trt/nvinfer_open.h) through the public
 * API: its reason names the libnvinfer names and places tried, a library
 * without getInferLibVersion, a TensorRT older than 10 (stand-in libraries
 * from tests/fixtures/trt_nvinfer_fixture.c behind $APEXX_TRT_DIR), and,
 * past a usable libnvinfer, a build without TensorRT's headers, headers of
 * another major, or the CUDA driver or device it lacks. Skips
 * (exit 77) where a real libnvinfer is on the linker path: the reasons
 * then differ by design. */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char tmpdir[1024];

/* The trt backend's info in a context opened with APEXX_TRT_DIR=dir. */
static void trt_info(const char *dir, struct apx_backend_info *out, apx_context **ctx) {
  setenv("APEXX_TRT_DIR", dir, 1);
  *ctx = tu_open();
  unsetenv("APEXX_TRT_DIR");
  int n = apx_backend_count(*ctx);
  for (int i = 0; i < n; i++) {
    struct apx_backend_info b;
    ck_assert_int_eq(apx_backend_info(*ctx, i, &b), APX_OK);
    if (strcmp(b.name, "trt") == 0) {
      *out = b;
      return;
    }
  }
  ck_abort_msg("no trt backend in the configuration");
}

/* <tmpdir>/<name>/lib/libnvinfer.so.10 -> the fixture module `module`;
 * returns <tmpdir>/<name> in buf. */
static const char *fake_prefix(const char *name, const char *module, char *buf, size_t size) {
  const char *modules = getenv("APEXX_TEST_MODULES");
  ck_assert_ptr_nonnull(modules);
  snprintf(buf, size, "%s/%s", tmpdir, name);
  mkdir(buf, 0700);
  char lib[1300], link[1400], target[PATH_MAX];
  snprintf(lib, sizeof lib, "%s/lib", buf);
  mkdir(lib, 0700);
  snprintf(link, sizeof link, "%s/libnvinfer.so.10", lib);
  snprintf(target, sizeof target, "%s/%s", modules, module);
  unlink(link);
  ck_assert_msg(symlink(target, link) == 0, "symlink %s", link);
  return buf;
}

START_TEST(test_not_found_names_what_was_tried) {
  apx_context *ctx;
  struct apx_backend_info b;
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/no-tensorrt-here", tmpdir);
  trt_info(dir, &b, &ctx);
  ck_assert_int_ne(b.state, APX_BACKEND_OK);
  char want[1500];
  snprintf(want, sizeof want,
           "TensorRT not found: tried libnvinfer.so.10, libnvinfer.so.11 in %s/lib "
           "($APEXX_TRT_DIR), ",
           dir);
  ck_assert_msg(strstr(b.reason, want) != NULL, "reason [%s]", b.reason);
  ck_assert_msg(strstr(b.reason, "the dynamic linker's path (last: libnvinfer.so.11") != NULL,
                "reason [%s]", b.reason);
  printf("trt probe reason here: %s\n", b.reason);
  apx_close(ctx);
}
END_TEST

START_TEST(test_library_without_version) {
  apx_context *ctx;
  struct apx_backend_info b;
  char dir[1200];
  trt_info(fake_prefix("nover", "fixture-nvinfer-nover.so", dir, sizeof dir), &b, &ctx);
  ck_assert_int_ne(b.state, APX_BACKEND_OK);
  ck_assert_msg(strstr(b.reason, "/nover/lib/libnvinfer.so.10 lacks getInferLibVersion: not a "
                                 "TensorRT library") != NULL,
                "reason [%s]", b.reason);
  apx_close(ctx);
}
END_TEST

START_TEST(test_too_old) {
  apx_context *ctx;
  struct apx_backend_info b;
  char dir[1200];
  trt_info(fake_prefix("old", "fixture-nvinfer-old.so", dir, sizeof dir), &b, &ctx);
  ck_assert_int_ne(b.state, APX_BACKEND_OK);
  ck_assert_msg(strstr(b.reason, "/old/lib/libnvinfer.so.10 is TensorRT 8.6.1: apexx needs 10 "
                                 "or newer") != NULL,
                "reason [%s]", b.reason);
  apx_close(ctx);
}
END_TEST

/* A usable libnvinfer: a probe-only build says it was built without the
 * headers; a full build checks the major against its headers', then asks
 * the CUDA driver for a device. */
START_TEST(test_usable_library) {
  apx_context *ctx;
  struct apx_backend_info b;
  char dir[1200];
  trt_info(fake_prefix("v10", "fixture-nvinfer-10.so", dir, sizeof dir), &b, &ctx);
  const char *headers = APEXX_TEST_TRT_HEADERS; /* tests/trt.mk */
  if (!*headers) {
    ck_assert_int_ne(b.state, APX_BACKEND_OK);
    ck_assert_msg(strstr(b.reason, "/v10/lib/libnvinfer.so.10 (TensorRT 10.13.0) found, but this "
                                   "trt backend was built without TensorRT's headers: ") != NULL,
                  "reason [%s]", b.reason);
  } else if (atoi(headers) != 10) {
    ck_assert_int_ne(b.state, APX_BACKEND_OK);
    char want[200];
    snprintf(want, sizeof want,
             "libnvinfer.so.10 is TensorRT 10.13.0, but apexx's plugins were built against "
             "TensorRT %s headers",
             headers);
    ck_assert_msg(strstr(b.reason, want) != NULL, "reason [%s]", b.reason);
  } else {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver) {
      ck_assert_int_ne(b.state, APX_BACKEND_OK);
      ck_assert_msg(strncmp(b.reason, "no CUDA driver: ", 16) == 0, "reason [%s]", b.reason);
    } else {
      dlclose(driver);
      if (b.state == APX_BACKEND_OK)
        ck_assert_msg(strstr(b.device_name, "TensorRT 10.13.0") != NULL, "desc [%s]",
                      b.device_name);
      else
        ck_assert_msg(strncmp(b.reason, "no CUDA device: ", 16) == 0, "reason [%s]", b.reason);
    }
  }
  apx_close(ctx);
}
END_TEST

int main(void) {
  for (int i = 0; i < 2; i++) {
    const char *name = i ? "libnvinfer.so.11" : "libnvinfer.so.10";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      dlclose(h);
      printf("SKIP: %s is on the linker path: the probe finds a real TensorRT\n", name);
      return 77;
    }
  }
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/apexx-trt-probe-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return EXIT_FAILURE;
  }
  Suite *s = suite_create("trt_probe");
  TCase *tc = tcase_create("trt_probe");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_not_found_names_what_was_tried);
  tcase_add_test(tc, test_library_without_version);
  tcase_add_test(tc, test_too_old);
  tcase_add_test(tc, test_usable_library);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
