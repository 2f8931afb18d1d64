/* SPDX-License-Identifier: Apache-2.0 */
/* The plugin library as built (libapexx_trt_plugins.so, where configure
 * found TensorRT's headers) without a TensorRT runtime: its exported
 * symbols (the TensorRT entry points and apexx_trt_*, nothing of the cuda
 * objects inside), getCreators' list, and the skip paths of the engine
 * runner and the TileSSMScan plugin runner, directly and through
 * apexx-bench's tensorrt.engine and tensorrt.tilessm_plugin rows (stand-in
 * libnvinfer modules behind $APEXX_TRT_DIR). Where the library is not
 * built, only the bench's rows for an unloadable library run. */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <apexx/trt_engine_runner.h>
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
  ck_assert_ptr_nonnull(dlsym(h, APEXX_TRT_PLUGIN_RUN_SYMBOL));
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
  const char *argv[] = {TINY,        "--ops",
                        "engine",    "--trt-plugin-lib",
                        fake_lib,    "--trt-engine-path",
                        engine,      "--trt-input-shape",
                        "x=1x3x8x8", "--output-json",
                        "-",         NULL};
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
    const char *argv2[] = {TINY,       "--ops",
                           "engine",   "--trt-plugin-lib",
                           plugin_lib, "--trt-engine-path",
                           engine,     "--output-json",
                           "-",        NULL};
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

static int run_plugin(const apexx_trt_plugin_request *q, apexx_trt_engine_result *res) {
  void *h = dlopen(plugin_lib, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != NULL, "%s", dlerror());
  void *sym = dlsym(h, APEXX_TRT_PLUGIN_RUN_SYMBOL);
  ck_assert_ptr_nonnull(sym);
  apexx_trt_plugin_run_fn run;
  memcpy(&run, &sym, sizeof run);
  int rc = run(q, res);
  dlclose(h);
  return rc;
}

/* apexx_trt_plugin_run without TensorRT: its request checks first, then
 * the reasons of the TensorRT it finds. */
START_TEST(test_plugin_runner_skip_reasons) {
  if (!have_plugin_lib) return;
  char *dir = bt_tmpdir();
  apexx_trt_plugin_request q;
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  q.batch = 2;
  q.steps = 8;
  q.channels = 16;
  q.warmup = 1;
  q.iters = 2;
  q.seed = 7;
  apexx_trt_engine_result res;
  setenv("APEXX_TRT_DIR", dir, 1);
  ck_assert_int_eq(run_plugin(&q, &res), 1);
  ck_assert_msg(strncmp(res.reason, "tensorrt_unavailable:TensorRT not found: tried ", 47) == 0,
                "[%s]", res.reason);
  ck_assert_str_eq(res.mode, "plugin_network");
  ck_assert_int_eq(res.frames, 2);
  fake_prefix(dir, "fixture-nvinfer-10.so");
  ck_assert_int_eq(run_plugin(&q, &res), 1);
  ck_assert_msg(strncmp(res.reason, "tensorrt_version_mismatch:libnvinfer 10.13.0", 44) == 0 ||
                    strncmp(res.reason, "cuda_unavailable:", 17) == 0 ||
                    strstr(res.reason, "lacks createInferBuilder_INTERNAL") != NULL,
                "[%s]", res.reason);
  ck_assert_str_eq(res.trt_version, "10.13.0");
  unsetenv("APEXX_TRT_DIR");
  /* bad requests fail before TensorRT is looked for */
  apexx_trt_plugin_request bad = q;
  bad.channels = 0;
  ck_assert_int_eq(run_plugin(&bad, &res), -1);
  ck_assert_msg(strstr(res.reason, "channels [0]") != NULL, "[%s]", res.reason);
  bad = q;
  bad.iters = 0;
  ck_assert_int_eq(run_plugin(&bad, &res), -1);
  ck_assert_msg(strstr(res.reason, "iters [0]") != NULL, "[%s]", res.reason);
  bad = q;
  bad.size = 4;
  ck_assert_int_eq(run_plugin(&bad, &res), -1);
  ck_assert(strncmp(res.reason, "bad_request", 11) == 0);
  ck_assert_int_eq(run_plugin(NULL, &res), -1);
  ck_assert_int_eq(run_plugin(&q, NULL), -1);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

/* Is a backend of this name in the report's backend list? */
static int report_has_backend(const cJSON *j, const char *name) {
  const cJSON *b;
  cJSON_ArrayForEach(b, bt_get(j, "backends")) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(b, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return 1;
  }
  return 0;
}

/* apexx-bench's tensorrt.tilessm_plugin row with a plugin library given:
 * a file that is no shared object is cdll_load_failed (with the loader's
 * message), the built library loads and the row says why TensorRT cannot
 * run it; the run exits 0 and only the trt row is reported. */
START_TEST(test_bench_plugin_row) {
  char *dir = bt_tmpdir();
  char *fake_lib = bt_path(dir, "libnot-a-plugin.so");
  bt_write(fake_lib, "this is not an ELF shared object, only text that is long enough\n");
  const char *argv[] = {
      TINY, "--ops", "tilessm_plugin", "--trt-plugin-lib", fake_lib, "--output-json", "-", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  cJSON *j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  const cJSON *row = bt_get(j, "benchmarks.tensorrt.tilessm_plugin.rows.trt");
  ck_assert_ptr_nonnull(row);
  ck_assert_str_eq(bt_get(row, "status")->valuestring, "skipped");
  const char *reason = bt_get(row, "reason")->valuestring;
  if (report_has_backend(j, "trt")) {
    ck_assert_msg(strncmp(reason, "cdll_load_failed:", 17) == 0 && strstr(reason, fake_lib),
                  "[%s]", reason);
  } else {
    ck_assert_msg(strncmp(reason, "not_configured:", 15) == 0, "[%s]", reason);
  }
  ck_assert_str_eq(bt_get(j, "benchmarks.tensorrt.tilessm_plugin.dispatch.reason")->valuestring,
                   reason);
  ck_assert(cJSON_IsNull(bt_get(j, "benchmarks.tensorrt.tilessm_plugin.dispatch.backend")));
  ck_assert_int_eq(cJSON_GetArraySize(bt_get(j, "benchmarks.tensorrt.tilessm_plugin.rows")), 1);
  /* the work is the config's scan_batch * steps * scan_channels */
  ck_assert(bt_get(j, "benchmarks.tensorrt.tilessm_plugin.work.count")->valuedouble ==
            bt_get(j, "config.scan_batch")->valuedouble * bt_get(j, "config.steps")->valuedouble *
                bt_get(j, "config.scan_channels")->valuedouble);
  cJSON_Delete(j);
  bt_result_free(&r);
  if (have_plugin_lib) {
    /* the library loads; TensorRT is absent, so the trt backend's reason */
    char env_dir[PATH_MAX + 32];
    snprintf(env_dir, sizeof env_dir, "APEXX_TRT_DIR=%s", dir);
    const char *env[] = {env_dir, NULL};
    const char *argv2[] = {
        TINY, "--ops", "tilessm_plugin", "--trt-plugin-lib", plugin_lib, "--output-json",
        "-",  NULL};
    bt_run(&r, env, argv2);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    j = cJSON_Parse(r.out);
    ck_assert_ptr_nonnull(j);
    reason = bt_get(j, "benchmarks.tensorrt.tilessm_plugin.rows.trt.reason")->valuestring;
    ck_assert_msg(strncmp(reason, "cdll_load_failed:", 17) != 0 &&
                      strstr(reason, "TensorRT not found: tried ") != NULL,
                  "[%s]", reason);
    cJSON_Delete(j);
    bt_result_free(&r);
  }
  free(fake_lib);
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
  tcase_add_test(tc, test_plugin_runner_skip_reasons);
  tcase_add_test(tc, test_bench_plugin_row);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
