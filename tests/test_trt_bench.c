/* The plugin library as built (libapexx_trt_plugins.so, where configure
 * found TensorRT's headers) without a TensorRT runtime: its exported
 * symbols (the TensorRT entry points and apexx_trt_*, nothing of the cuda
 * objects inside), getCreators' list, and the engine runner's skip paths,
 * directly and through apexx-bench's tensorrt.engine row (stand-in
 * libnvinfer modules behind $APEXX_TRT_DIR). Where the library is not
 * built, only the bench's row for an unloadable library runs. */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../backends/trt/engine_runner.h"
#include "test_bench_util.h"

#define TINY "--channels", "8", "--height", "32", "--width", "32", "--kmax", "2", \
             "--steps", "8", "--iters", "3", "--warmup", "1", "--quiet"

static char plugin_lib[PATH_MAX];
static int have_plugin_lib;

/* dir/lib/libnvinfer.so.10 -> the fixture module `module` */
static void fake_prefix(const char *dir, const char *module) {
  char lib[PATH_MAX], link[PATH_MAX + 32], target[PATH_MAX];
  snprintf(lib, sizeof lib, "%s/lib", dir);
  mkdir(lib, 0700);
  snprintf(link, sizeof link, "%s/libnvinfer.so.10", lib);
  snprintf(target, sizeof target, "%s/%s", getenv("APEXX_TEST_MODULES"), module);
  unlink(link);
  ck_assert_int_eq(symlink(target, link), 0);
}

START_TEST(test_exports) {
  if (!have_plugin_lib) return;
  void *h = dlopen(plugin_lib, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != NULL, "%s", dlerror());
  ck_assert_ptr_nonnull(dlsym(h, "getCreators"));
  ck_assert_ptr_nonnull(dlsym(h, "setLoggerFinder"));
  ck_assert_ptr_nonnull(dlsym(h, APEXX_TRT_ENGINE_RUN_SYMBOL));
  void *abi = dlsym(h, "apexx_trt_abi_version");
  ck_assert_ptr_nonnull(abi);
  int (*abi_fn)(void);
  memcpy(&abi_fn, &abi, sizeof abi_fn);
  ck_assert_int_eq(abi_fn(), 1);
  /* the cuda objects inside stay local */
  ck_assert_ptr_null(dlsym(h, "apx_backend_entry"));
  ck_assert_ptr_null(dlsym(h, "cudaMalloc"));
  ck_assert_ptr_null(dlsym(h, "apx__trt_parse_fields"));
  /* getCreators(int32_t &): the reference is a pointer in the ABI */
  void *gc = dlsym(h, "getCreators");
  void *const *(*get_creators)(int32_t *);
  memcpy(&get_creators, &gc, sizeof get_creators);
  int32_t n = -1;
  void *const *list = get_creators(&n);
  ck_assert_int_eq(n, 3);
  for (int i = 0; i < n; i++) ck_assert_ptr_nonnull(list[i]);
  dlclose(h);
}
END_TEST

static int run_engine(const char *engine, apexx_trt_engine_result *res) {
  void *h = dlopen(plugin_lib, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != NULL, "%s", dlerror());
  void *sym = dlsym(h, APEXX_TRT_ENGINE_RUN_SYMBOL);
  apexx_trt_engine_run_fn run;
  memcpy(&run, &sym, sizeof run);
  apexx_trt_engine_request q;
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  q.engine_path = engine;
  q.warmup = 1;
  q.iters = 2;
  int rc = run(&q, res);
  dlclose(h);
  return rc;
}

START_TEST(test_runner_skip_reasons) {
  if (!have_plugin_lib) return;
  char *dir = bt_tmpdir();
  char *engine = bt_path(dir, "model.engine");
  bt_write(engine, "not an engine");
  apexx_trt_engine_result res;
  /* no TensorRT: the probe's reason */
  setenv("APEXX_TRT_DIR", dir, 1);
  ck_assert_int_eq(run_engine(engine, &res), 1);
  ck_assert_msg(strncmp(res.reason, "tensorrt_unavailable:TensorRT not found: tried "
                                    "libnvinfer.so.10, libnvinfer.so.11 in ",
                        82) == 0,
                "[%s]", res.reason);
  /* a TensorRT older than 10 */
  fake_prefix(dir, "fixture-nvinfer-old.so");
  ck_assert_int_eq(run_engine(engine, &res), 1);
  ck_assert_msg(strstr(res.reason, "is TensorRT 8.6.1: apexx needs 10 or newer") != NULL, "[%s]",
                res.reason);
  /* a usable version: the headers' major must match, then a device */
  fake_prefix(dir, "fixture-nvinfer-10.so");
  ck_assert_int_eq(run_engine(engine, &res), 1);
  ck_assert_msg(strncmp(res.reason, "tensorrt_version_mismatch:libnvinfer 10.13.0", 44) == 0 ||
                    strncmp(res.reason, "cuda_unavailable:", 17) == 0 ||
                    strstr(res.reason, "lacks createInferRuntime_INTERNAL") != NULL,
                "[%s]", res.reason);
  ck_assert_str_eq(res.trt_version, "10.13.0");
  unsetenv("APEXX_TRT_DIR");
  /* a bad request */
  apexx_trt_engine_request q;
  memset(&q, 0, sizeof q);
  void *h = dlopen(plugin_lib, RTLD_NOW | RTLD_LOCAL);
  void *sym = dlsym(h, APEXX_TRT_ENGINE_RUN_SYMBOL);
  apexx_trt_engine_run_fn run;
  memcpy(&run, &sym, sizeof run);
  ck_assert_int_eq(run(&q, &res), -1);
  ck_assert(strncmp(res.reason, "bad_request", 11) == 0);
  ck_assert_int_eq(run(NULL, NULL), -1);
  dlclose(h);
  free(engine);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

/* apexx-bench --trt-engine-path with an existing file: the row says why
 * it could not run, the run still exits 0. */
START_TEST(test_bench_engine_row) {
  char *dir = bt_tmpdir();
  char *engine = bt_path(dir, "model.engine");
  bt_write(engine, "not an engine");
  char *fake_lib = bt_path(dir, "libnot-a-plugin.so");
  bt_write(fake_lib, "not a library");
  const char *argv[] = {TINY, "--ops", "engine", "--trt-plugin-lib", fake_lib,
                        "--trt-engine-path", engine, "--trt-input-shape", "x=1x3x8x8", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  cJSON *j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  const cJSON *row = bt_get(j, "benchmarks.tensorrt.engine.rows.trt");
  ck_assert_ptr_nonnull(row);
  ck_assert_str_eq(bt_get(row, "status")->valuestring, "skipped");
  ck_assert_msg(strncmp(bt_get(row, "reason")->valuestring,
                        "tensorrt_unavailable:plugin library not loaded: ", 48) == 0,
                "[%s]", bt_get(row, "reason")->valuestring);
  ck_assert_int_eq(cJSON_GetArraySize(bt_get(j, "benchmarks.tensorrt.engine.rows")), 1);
  cJSON_Delete(j);
  bt_result_free(&r);
  if (have_plugin_lib) {
    char env_dir[PATH_MAX + 32];
    snprintf(env_dir, sizeof env_dir, "APEXX_TRT_DIR=%s", dir);
    const char *env[] = {env_dir, NULL};
    const char *argv2[] = {TINY, "--ops", "engine", "--trt-plugin-lib", plugin_lib,
                           "--trt-engine-path", engine, NULL};
    bt_run(&r, env, argv2);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    j = cJSON_Parse(r.out);
    ck_assert_ptr_nonnull(j);
    const char *reason = bt_get(j, "benchmarks.tensorrt.engine.rows.trt.reason")->valuestring;
    ck_assert_msg(strncmp(reason, "tensorrt_unavailable:TensorRT not found: tried ", 47) == 0,
                  "[%s]", reason);
    cJSON_Delete(j);
    bt_result_free(&r);
  }
  free(fake_lib);
  free(engine);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

int main(void) {
  const char *build = getenv("APEXX_BUILDDIR");
  if (build) {
    snprintf(plugin_lib, sizeof plugin_lib, "%s/backends/trt/.libs/libapexx_trt_plugins.so",
             build);
    have_plugin_lib = access(plugin_lib, R_OK) == 0;
  }
  if (!have_plugin_lib)
    printf("note: %s not built (configure found no TensorRT headers): its cases pass over\n",
           plugin_lib);
  for (int i = 0; i < 2; i++) {
    void *h = dlopen(i ? "libnvinfer.so.11" : "libnvinfer.so.10", RTLD_NOW | RTLD_LOCAL);
    if (h) {
      dlclose(h);
      printf("SKIP: a real libnvinfer is on the linker path\n");
      return 77;
    }
  }
  Suite *s = suite_create("trt_bench");
  TCase *tc = tcase_create("trt_bench");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_exports);
  tcase_add_test(tc, test_runner_skip_reasons);
  tcase_add_test(tc, test_bench_engine_row);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
