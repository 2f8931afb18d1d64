/* SPDX-License-Identifier: Apache-2.0 */
/* Regression tests of issue 16 (docs/reliability.md): modules the loader
 * must refuse without crashing or hanging (a truncated shared object, a
 * FIFO, a directory others can write), relative library names resolved in
 * backend_dir only, the open_library service the trt backend uses for
 * plugin_library, tile_order on huge grids, apx_tensor_numel on overflow,
 * and the API corners (NULL context, unknown backend, timer without
 * elapsed_ms, host device index, unknown APEXX_LOG). */
#define _GNU_SOURCE
#include "coretest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "testutil.h"

static char dir[256];
static char *backend_dir; /* $APEXX_BACKEND_DIR as make check set it */

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/apexx-reliability-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  if (!backend_dir && getenv("APEXX_BACKEND_DIR"))
    backend_dir = strdup(getenv("APEXX_BACKEND_DIR"));
}

static void teardown(void) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s'; rm -rf '%s'", dir, dir);
  ck_assert_int_eq(system(cmd), 0);
  /* tests unset it; with CK_FORK=no the next test runs in this process */
  if (backend_dir) setenv("APEXX_BACKEND_DIR", backend_dir, 1);
}

static const char *cpu_module(void) {
  static char path[1024];
  const char *d = backend_dir ? backend_dir : getenv("APEXX_BACKEND_DIR");
  ck_assert_msg(d != NULL, "APEXX_BACKEND_DIR is not set (run under make check)");
  snprintf(path, sizeof path, "%s/apexx-cpu.so", d);
  return path;
}

/* Copy the first `limit` bytes of src (all when limit < 0) to dst. */
static void copy_file(const char *src, const char *dst, long limit) {
  FILE *in = fopen(src, "rb");
  ck_assert_msg(in != NULL, "%s: %s", src, strerror(errno));
  FILE *out = fopen(dst, "wb");
  ck_assert_msg(out != NULL, "%s: %s", dst, strerror(errno));
  char buf[65536];
  long done = 0;
  size_t n;
  while ((limit < 0 || done < limit) &&
         (n = fread(buf, 1, limit < 0 || limit - done > (long)sizeof buf ? sizeof buf
                                                                        : (size_t)(limit - done),
                    in)) > 0) {
    ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    done += (long)n;
  }
  fclose(in);
  ck_assert_int_eq(fclose(out), 0);
  ck_assert_int_eq(chmod(dst, 0755), 0);
}

/* A config in dir naming `library` for [backend cpu] (plus extra lines). */
static const char *config_in(const char *where, const char *library, const char *extra) {
  static char path[512];
  snprintf(path, sizeof path, "%s/apexx.ini", where);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "[apexx]\norder = cpu\n%s\n[backend cpu]\nlibrary = %s\n", extra ? extra : "",
          library);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(chmod(path, 0644), 0);
  return path;
}

static const struct apx_backend_info *open_cpu(const char *config, apx_context **ctx) {
  *ctx = open_ok(config);
  return backend_named(*ctx, "cpu");
}

/* ---- 1: a truncated module is load_failed, not SIGBUS ---- */
START_TEST(truncated_module_is_refused_with_the_reason) {
  char lib[512];
  snprintf(lib, sizeof lib, "%s/apexx-cpu.so", dir);
  copy_file(cpu_module(), lib, 40000);
  apx_context *ctx;
  const struct apx_backend_info *cpu = open_cpu(config_in(dir, lib, NULL), &ctx);
  ck_assert_int_eq(cpu->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(cpu->reason, "past the end of the file [40000 bytes] (truncated?)");
  apx_close(ctx);
}
END_TEST

/* the whole module copied the same way loads: the check passes real files */
START_TEST(complete_copy_of_the_module_loads) {
  char lib[512];
  snprintf(lib, sizeof lib, "%s/apexx-cpu.so", dir);
  copy_file(cpu_module(), lib, -1);
  apx_context *ctx;
  const struct apx_backend_info *cpu = open_cpu(config_in(dir, lib, NULL), &ctx);
  ck_assert_msg(cpu->state == APX_BACKEND_OK, "%s", cpu->reason);
  ck_assert_str_eq(cpu->library, lib);
  apx_close(ctx);
}
END_TEST

START_TEST(fifo_and_directory_modules_are_refused) {
  char fifo[512], sub[512];
  snprintf(fifo, sizeof fifo, "%s/fifo.so", dir);
  ck_assert_int_eq(mkfifo(fifo, 0644), 0);
  apx_context *ctx;
  const struct apx_backend_info *cpu = open_cpu(config_in(dir, fifo, NULL), &ctx);
  ck_assert_int_eq(cpu->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(cpu->reason, "not a regular file");
  apx_close(ctx);
  snprintf(sub, sizeof sub, "%s/sub.so", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  cpu = open_cpu(config_in(dir, sub, NULL), &ctx);
  ck_assert_int_eq(cpu->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(cpu->reason, "not a regular file");
  apx_close(ctx);
}
END_TEST

/* ---- 6: relative names resolve in backend_dir, ".." is refused ---- */
START_TEST(relative_library_resolves_in_backend_dir_only) {
  /* dir/sub/apexx-cpu.so exists, backend_dir (dir/empty) has no sub/:
   * run from dir, the name must not be found through the working dir */
  char sub[512], lib[600], empty[512], extra[600], cwd[1024];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  snprintf(lib, sizeof lib, "%s/apexx-cpu.so", sub);
  copy_file(cpu_module(), lib, -1);
  snprintf(empty, sizeof empty, "%s/empty", dir);
  ck_assert_int_eq(mkdir(empty, 0755), 0);
  snprintf(extra, sizeof extra, "backend_dir = %s", empty);
  unsetenv("APEXX_BACKEND_DIR");
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  ck_assert_int_eq(chdir(dir), 0);
  apx_context *ctx;
  const struct apx_backend_info *cpu =
      open_cpu(config_in(dir, "sub/apexx-cpu.so", extra), &ctx);
  ck_assert_int_eq(cpu->state, APX_BACKEND_NOT_FOUND);
  char want[700];
  snprintf(want, sizeof want, "%s/sub/apexx-cpu.so", empty);
  ck_assert_str_eq(cpu->library, want);
  apx_close(ctx);
  /* with backend_dir = dir the same name loads */
  snprintf(extra, sizeof extra, "backend_dir = %s", dir);
  cpu = open_cpu(config_in(dir, "sub/apexx-cpu.so", extra), &ctx);
  ck_assert_msg(cpu->state == APX_BACKEND_OK, "%s", cpu->reason);
  apx_close(ctx);
  /* ".." cannot climb out of backend_dir */
  snprintf(extra, sizeof extra, "backend_dir = %s", empty);
  cpu = open_cpu(config_in(dir, "../sub/apexx-cpu.so", extra), &ctx);
  ck_assert_int_eq(cpu->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(cpu->reason, "\"..\" component");
  apx_close(ctx);
  ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

/* ---- 7: directories others can write ---- */
START_TEST(module_in_a_directory_others_can_write_is_refused) {
  char open_dir[512], lib[600];
  snprintf(open_dir, sizeof open_dir, "%s/open", dir);
  ck_assert_int_eq(mkdir(open_dir, 0755), 0);
  snprintf(lib, sizeof lib, "%s/apexx-cpu.so", open_dir);
  copy_file(cpu_module(), lib, -1);
  ck_assert_int_eq(chmod(open_dir, 0777), 0);
  apx_context *ctx;
  const struct apx_backend_info *cpu = open_cpu(config_in(dir, lib, NULL), &ctx);
  ck_assert_int_eq(cpu->state, APX_BACKEND_LOAD_FAILED);
  ck_assert_contains(cpu->reason, "world-writable without the sticky bit");
  apx_close(ctx);
  /* the sticky bit (as on /tmp) keeps others from replacing the file */
  ck_assert_int_eq(chmod(open_dir, 01777), 0);
  cpu = open_cpu(config_in(dir, lib, NULL), &ctx);
  ck_assert_msg(cpu->state == APX_BACKEND_OK, "%s", cpu->reason);
  apx_close(ctx);
}
END_TEST

START_TEST(config_in_a_directory_others_can_write_is_refused) {
  char open_dir[512];
  snprintf(open_dir, sizeof open_dir, "%s/open", dir);
  ck_assert_int_eq(mkdir(open_dir, 0755), 0);
  const char *config = config_in(open_dir, "apexx-cpu.so", NULL);
  ck_assert_int_eq(chmod(open_dir, 0777), 0);
  apx_context *ctx = NULL;
  ck_assert_int_eq(apx_open(&ctx, config), APX_ERR_CONFIG);
  ck_assert_ptr_null(ctx);
  ck_assert_contains(apx_last_error(), "world-writable without the sticky bit");
  ck_assert_int_eq(chmod(open_dir, 0755), 0);
  ctx = open_ok(config);
  apx_close(ctx);
}
END_TEST

/* The open_library service (what the trt backend's plugin_library goes
 * through) applies the module checks; fixture-plugin fails init with the
 * service's reason. */
static const struct apx_backend_info *open_plugin(const char *plugin, apx_context **ctx) {
  char text[2048];
  snprintf(text, sizeof text,
           "[apexx]\norder = plugin\nbackend_dir = %s\n"
           "[backend plugin]\nlibrary = fixture-plugin.so\nplugin_library = %s\n",
           getenv("APEXX_TEST_MODULES"), plugin);
  char path[512];
  snprintf(path, sizeof path, "%s/plugin.ini", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  unsetenv("APEXX_BACKEND_DIR");
  *ctx = open_ok(path);
  return backend_named(*ctx, "plugin");
}

START_TEST(plugin_library_gets_the_module_checks) {
  ck_assert_ptr_nonnull(getenv("APEXX_TEST_MODULES"));
  char good[512], lib[600], open_dir[512];
  snprintf(good, sizeof good, "%s/fixture-alpha.so", getenv("APEXX_TEST_MODULES"));
  apx_context *ctx;
  const struct apx_backend_info *b = open_plugin(good, &ctx);
  ck_assert_msg(b->state == APX_BACKEND_OK, "%s", b->reason);
  apx_close(ctx);

  snprintf(lib, sizeof lib, "%s/plugin.so", dir);
  copy_file(good, lib, 2000);
  b = open_plugin(lib, &ctx);
  ck_assert_int_eq(b->state, APX_BACKEND_INIT_FAILED);
  ck_assert_contains(b->reason, "plugin_library not loaded");
  ck_assert_contains(b->reason, "(truncated?)");
  apx_close(ctx);

  copy_file(good, lib, -1);
  ck_assert_int_eq(chmod(lib, 0666), 0);
  b = open_plugin(lib, &ctx);
  ck_assert_int_eq(b->state, APX_BACKEND_INIT_FAILED);
  ck_assert_contains(b->reason, "world-writable");
  apx_close(ctx);

  snprintf(open_dir, sizeof open_dir, "%s/open", dir);
  ck_assert_int_eq(mkdir(open_dir, 0777), 0);
  ck_assert_int_eq(chmod(open_dir, 0777), 0);
  snprintf(lib, sizeof lib, "%s/plugin.so", open_dir);
  copy_file(good, lib, -1);
  b = open_plugin(lib, &ctx);
  ck_assert_int_eq(b->state, APX_BACKEND_INIT_FAILED);
  ck_assert_contains(b->reason, "without the sticky bit");
  apx_close(ctx);
}
END_TEST

/* ---- 3: huge grids and shapes ---- */
/* docs/ops.md, tile_order's hilbert_d (unmasked reflection) in unsigned 128 bits */
static unsigned __int128 hilbert_d(uint64_t x, uint64_t y, uint64_t n) {
  unsigned __int128 d = 0;
  for (uint64_t s = n / 2; s > 0; s /= 2) {
    uint64_t rx = (x & s) != 0, ry = (y & s) != 0;
    d += (unsigned __int128)s * s * ((3 * rx) ^ ry);
    if (ry == 0) {
      if (rx == 1) {
        x = s - 1 - x;
        y = s - 1 - y;
      }
      uint64_t t = x;
      x = y;
      y = t;
    }
  }
  return d;
}

START_TEST(hilbert_on_a_grid_above_2_62_returns) {
  apx_context *ctx = tu_open();
  ck_assert_ptr_nonnull(ctx);
  const int64_t gh = ((int64_t)1 << 62) + 1;
  int64_t ids_data[4] = {gh - 1, 0, 1, (int64_t)1 << 40};
  int64_t out_data[4];
  apx_tensor ids = apx_tensor_host(ids_data, APX_DTYPE_I64, 1, (int64_t[]){4});
  apx_tensor out = apx_tensor_host(out_data, APX_DTYPE_I64, 1, (int64_t[]){4});
  apx_tile_order_args args = {&ids, gh, 1, APX_ORDER_HILBERT, &out};
  ck_assert_int_eq(apx_tile_order(ctx, &args), APX_OK);
  /* the order of the spec's hilbert_d on the 2^63 grid (grid_w = 1: x = 0) */
  int64_t want[4];
  memcpy(want, ids_data, sizeof want);
  for (int i = 1; i < 4; i++)
    for (int j = i; j > 0 && hilbert_d(0, (uint64_t)want[j], (uint64_t)1 << 63) <
                                 hilbert_d(0, (uint64_t)want[j - 1], (uint64_t)1 << 63);
         j--) {
      int64_t t = want[j];
      want[j] = want[j - 1];
      want[j - 1] = t;
    }
  for (int i = 0; i < 4; i++) ck_assert_int_eq(out_data[i], want[i]);
  /* the largest grid: gh * gw <= INT64_MAX */
  args.grid_h = INT64_MAX;
  ids_data[0] = INT64_MAX - 1;
  ck_assert_int_eq(apx_tile_order(ctx, &args), APX_OK);
  apx_close(ctx);
}
END_TEST

START_TEST(numel_overflow_is_minus_one_and_rejected) {
  apx_tensor t = apx_tensor_host(NULL, APX_DTYPE_F32, 2, (int64_t[]){(int64_t)1 << 62, 8});
  ck_assert_int_eq(apx_tensor_numel(&t), -1);
  t.shape[1] = 1;
  ck_assert_int_eq(apx_tensor_numel(&t), (int64_t)1 << 62);
  t.shape[1] = -2;
  ck_assert_int_eq(apx_tensor_numel(&t), -1);
  /* validation rejects the overflowing shape before any backend runs */
  apx_context *ctx = tu_open();
  int64_t buf[8] = {0};
  apx_tensor ids = apx_tensor_host(buf, APX_DTYPE_I64, 2, (int64_t[]){(int64_t)1 << 62, 8});
  apx_tensor out = apx_tensor_host(buf, APX_DTYPE_I64, 1, (int64_t[]){1});
  apx_tile_order_args args = {&ids, 4, 4, APX_ORDER_HILBERT, &out};
  ck_assert_int_eq(apx_tile_order(ctx, &args), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "overflows");
  apx_close(ctx);
}
END_TEST

/* ---- 8: API corners ---- */
START_TEST(tile_order_needs_a_context) {
  int64_t data[2] = {1, 0}, out_data[2];
  apx_tensor ids = apx_tensor_host(data, APX_DTYPE_I64, 1, (int64_t[]){2});
  apx_tensor out = apx_tensor_host(out_data, APX_DTYPE_I64, 1, (int64_t[]){2});
  apx_tile_order_args args = {&ids, 1, 2, APX_ORDER_L2R, &out};
  ck_assert_int_eq(apx_tile_order(NULL, &args), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "ctx = [NULL]");
}
END_TEST

START_TEST(sync_with_an_unknown_backend_is_an_error) {
  apx_context *ctx = tu_open();
  apx_call call = {"no-such-backend", NULL};
  ck_assert_int_eq(apx_sync(ctx, &call), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "[no-such-backend] is not configured");
  call.backend = "cpu";
  ck_assert_int_eq(apx_sync(ctx, &call), APX_OK);
  ck_assert_int_eq(apx_sync(ctx, NULL), APX_OK);
  apx_close(ctx);
}
END_TEST

/* run under valgrind / LeakSanitizer, the timer must not leak */
START_TEST(timer_end_without_elapsed_frees_the_timer) {
  apx_context *ctx = tu_open();
  apx_timer *t = NULL;
  ck_assert_int_eq(apx_timer_begin(ctx, "cpu", NULL, &t), APX_OK);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(apx_timer_end(ctx, t, NULL), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "elapsed_ms = [NULL] (the timer is freed)");
  double ms = -1;
  ck_assert_int_eq(apx_timer_begin(ctx, "cpu", NULL, &t), APX_OK);
  ck_assert_int_eq(apx_timer_end(ctx, t, &ms), APX_OK);
  ck_assert(ms >= 0);
  apx_close(ctx);
}
END_TEST

START_TEST(host_device_info_only_for_index_0) {
  apx_context *ctx = tu_open();
  struct apx_device_info info;
  ck_assert_int_eq(apx_device_info(ctx, APX_DEVICE_HOST, 0, &info), APX_OK);
  ck_assert_int_gt(info.multiprocessors, 0);
  ck_assert_int_eq(apx_device_info(ctx, APX_DEVICE_HOST, 99, &info), APX_ERR_INVALID_ARG);
  ck_assert_contains(apx_last_error(), "index = [99]");
  ck_assert_int_eq(apx_device_info(ctx, APX_DEVICE_HOST, -1, &info), APX_ERR_INVALID_ARG);
  apx_close(ctx);
}
END_TEST

/* apx_open's warnings go to stderr (no sink can be set before it returns) */
static char *stderr_of_open(const char *level) {
  static char text[4096];
  char path[512];
  snprintf(path, sizeof path, "%s/stderr.txt", dir);
  fflush(stderr);
  int saved = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  dup2(fd, 2);
  close(fd);
  setenv("APEXX_LOG", level, 1);
  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, NULL);
  unsetenv("APEXX_LOG");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ck_assert_int_eq(st, APX_OK);
  apx_close(ctx);
  FILE *f = fopen(path, "r");
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  return text;
}

START_TEST(unknown_apexx_log_level_warns) {
  ck_assert_contains(stderr_of_open("garbage"),
                     "APEXX_LOG = [garbage] is not a level (off, error, warn, info, debug)");
  ck_assert_ptr_null(strstr(stderr_of_open("info"), "APEXX_LOG"));
}
END_TEST

Suite *reliability_suite(void) {
  Suite *s = suite_create("reliability");
  TCase *modules = tcase_create("modules");
  tcase_add_checked_fixture(modules, setup, teardown);
  tcase_set_timeout(modules, 30);
  tcase_add_test(modules, truncated_module_is_refused_with_the_reason);
  tcase_add_test(modules, complete_copy_of_the_module_loads);
  tcase_add_test(modules, fifo_and_directory_modules_are_refused);
  tcase_add_test(modules, relative_library_resolves_in_backend_dir_only);
  tcase_add_test(modules, module_in_a_directory_others_can_write_is_refused);
  tcase_add_test(modules, config_in_a_directory_others_can_write_is_refused);
  tcase_add_test(modules, plugin_library_gets_the_module_checks);
  suite_add_tcase(s, modules);
  TCase *shapes = tcase_create("shapes");
  tcase_set_timeout(shapes, 10);
  tcase_add_test(shapes, hilbert_on_a_grid_above_2_62_returns);
  tcase_add_test(shapes, numel_overflow_is_minus_one_and_rejected);
  suite_add_tcase(s, shapes);
  TCase *api = tcase_create("api");
  tcase_add_checked_fixture(api, setup, teardown);
  tcase_add_test(api, tile_order_needs_a_context);
  tcase_add_test(api, sync_with_an_unknown_backend_is_an_error);
  tcase_add_test(api, timer_end_without_elapsed_frees_the_timer);
  tcase_add_test(api, host_device_info_only_for_index_0);
  tcase_add_test(api, unknown_apexx_log_level_warns);
  suite_add_tcase(s, api);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(reliability_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  free(backend_dir);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
