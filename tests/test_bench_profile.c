/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench's presets and bandwidth reference (apexx-bench(1) PROFILES,
 * docs/report.md): --profile seed and large set the documented shapes and
 * later flags change them; the reference.copy row runs whenever an op
 * does and every ok row's pct_of_copy is its GB/s over that row's; host
 * rows are not graph-replayed; --parity off leaves parity null with a
 * reason; bad values exit 1 naming the flag. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_bench_util.h"

typedef struct run {
  char *dir, *json, *md;
  cJSON *report;
} run;

/* Run apexx-bench with the flags (cpu only, one quick pass) and load its
 * report; the run must succeed. */
static void bench(run *r, const char *const *flags) {
  r->dir = bt_tmpdir();
  r->json = bt_path(r->dir, "r.json");
  r->md = bt_path(r->dir, "r.md");
  const char *argv[40] = {"--quiet",      "--backends", "cpu",   "--iters",       "2",
                          "--warmup",     "0",          "--repetitions", "1",
                          "--output-json", r->json,     "--output-md",   r->md};
  int n = 13;
  for (int i = 0; flags[i]; i++) argv[n++] = flags[i];
  argv[n] = NULL;
  bt_result res;
  bt_run(&res, NULL, argv);
  ck_assert_msg(res.status == 0, "apexx-bench exited %d: %s", res.status, res.err);
  bt_result_free(&res);
  r->report = bt_load_json(r->json);
  ck_assert_ptr_nonnull(r->report);
}

static void run_free(run *r) {
  cJSON_Delete(r->report);
  bt_rm_rf(r->dir);
  free(r->dir), free(r->json), free(r->md);
}

static double num(const cJSON *root, const char *path) {
  const cJSON *v = bt_get(root, path);
  ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", path);
  return v->valuedouble;
}

static void expect_shape(const cJSON *root, const char *path, const long *dims, int n) {
  const cJSON *shape = bt_get(root, path);
  ck_assert_msg(cJSON_GetArraySize(shape) == n, "%s has %d dims", path,
                cJSON_GetArraySize(shape));
  for (int i = 0; i < n; i++)
    ck_assert_msg((long)cJSON_GetArrayItem(shape, i)->valuedouble == dims[i],
                  "%s[%d] = %g, not %ld", path, i, cJSON_GetArrayItem(shape, i)->valuedouble,
                  dims[i]);
}

START_TEST(seed_profile_shapes) {
  run r;
  const char *flags[] = {"--profile", "seed", "--ops", "index_select,tilessm_forward", NULL};
  bench(&r, flags);
  const cJSON *j = r.report;
  ck_assert_str_eq(bt_get(j, "config.profile")->valuestring, "seed");
  ck_assert(cJSON_IsTrue(bt_get(j, "config.graph_replay")));
  ck_assert_int_eq((int)num(j, "config.channels"), 128);
  ck_assert_int_eq((int)num(j, "config.height"), 128);
  ck_assert_int_eq((int)num(j, "config.kmax"), 32);
  const long src[] = {4096, 128}, index[] = {256}, tokens[] = {1, 256, 128};
  expect_shape(j, "benchmarks.indexing.index_select.tensors.src.shape", src, 2);
  expect_shape(j, "benchmarks.indexing.index_select.tensors.index.shape", index, 1);
  expect_shape(j, "benchmarks.tilessm.tilessm_forward.tensors.tokens.shape", tokens, 3);
  /* host rows keep the backend's timer under --graph-replay */
  ck_assert_str_eq(bt_get(j, "benchmarks.indexing.index_select.rows.cpu.timer")->valuestring,
                   "backend");
  ck_assert_ptr_null(bt_get(j, "benchmarks.indexing.index_select.rows.cpu.graph_calls"));
  char *md = bt_read(r.md);
  ck_assert_ptr_nonnull(strstr(md, "profile: `seed`"));
  free(md);
  run_free(&r);
}
END_TEST

START_TEST(large_profile_and_overrides) {
  run r;
  /* the large preset's scan and indexing shapes, with a small map given
   * after it (flags change the preset, whatever their order) */
  const char *flags[] = {"--channels", "4",  "--height", "16",   "--width", "16",
                         "--profile", "large", "--kmax", "2", "--ops", "copy", NULL};
  bench(&r, flags);
  const cJSON *j = r.report;
  ck_assert_str_eq(bt_get(j, "config.profile")->valuestring, "large");
  ck_assert(cJSON_IsFalse(bt_get(j, "config.graph_replay")));
  ck_assert_int_eq((int)num(j, "config.batch"), 8);
  ck_assert_int_eq((int)num(j, "config.channels"), 4);
  ck_assert_int_eq((int)num(j, "config.tile_size"), 8);
  ck_assert_int_eq((int)num(j, "config.steps"), 4096);
  ck_assert_int_eq((int)num(j, "config.scan_batch"), 8);
  ck_assert_int_eq((int)num(j, "config.scan_channels"), 1024);
  ck_assert_int_eq((int)num(j, "config.index_src_rows"), 262144);
  ck_assert_int_eq((int)num(j, "config.index_width"), 1024);
  ck_assert_int_eq((int)num(j, "config.index_rows"), 65536);
  /* --ops copy: the reference alone, on the [8, 4, 16, 16] map */
  const long map[] = {8, 4, 16, 16};
  expect_shape(j, "benchmarks.reference.copy.tensors.src.shape", map, 4);
  ck_assert_ptr_null(bt_get(j, "benchmarks.tile_ops"));
  run_free(&r);
}
END_TEST

START_TEST(default_profile_derives_shapes) {
  run r;
  const char *flags[] = {"--batch", "2", "--channels", "8", "--height", "16", "--width", "16",
                         "--kmax", "3", "--steps", "5", "--ops", "gather,tilessm_forward", NULL};
  bench(&r, flags);
  const cJSON *j = r.report;
  ck_assert_str_eq(bt_get(j, "config.profile")->valuestring, "default");
  /* M = B*H*W, D = C, N = B*kmax*t*t; tokens [B, steps, C] */
  const long src[] = {2 * 16 * 16, 8}, out[] = {2 * 3 * 8 * 8, 8}, tokens[] = {2, 5, 8};
  expect_shape(j, "benchmarks.indexing.gather.tensors.src.shape", src, 2);
  expect_shape(j, "benchmarks.indexing.gather.tensors.out.shape", out, 2);
  expect_shape(j, "benchmarks.tilessm.tilessm_forward.tensors.tokens.shape", tokens, 3);
  run_free(&r);
}
END_TEST

START_TEST(copy_reference_and_shares) {
  run r;
  const char *flags[] = {"--channels", "8", "--height", "32", "--width", "32", "--kmax", "4",
                         "--ops", "tilepack,fusiongate_fuse", NULL};
  bench(&r, flags);
  const cJSON *j = r.report;
  const cJSON *copy = bt_get(j, "benchmarks.reference.copy.rows.cpu");
  ck_assert_str_eq(bt_get(copy, "status")->valuestring, "ok");
  ck_assert(cJSON_IsTrue(bt_get(copy, "parity.ok")));
  /* one read and one write of the [1, 8, 32, 32] f16 map */
  ck_assert_double_eq(num(copy, "bytes_moved"), 2.0 * 8 * 32 * 32 * 2);
  ck_assert_double_eq_tol(num(copy, "pct_of_copy"), 100.0, 1e-9);
  ck_assert_ptr_null(bt_get(j, "benchmarks.reference.copy.op"));
  const char *rows[] = {"benchmarks.tile_ops.tilepack.rows.cpu",
                        "benchmarks.tile_ops.fusiongate_fuse.rows.cpu"};
  for (int i = 0; i < 2; i++) {
    const cJSON *row = bt_get(j, rows[i]);
    double want = 100.0 * num(row, "gb_per_s") / num(copy, "gb_per_s");
    ck_assert_msg(fabs(num(row, "pct_of_copy") - want) <= 1e-9 * want, "%s: %g%%, not %g%%",
                  rows[i], num(row, "pct_of_copy"), want);
  }
  char *md = bt_read(r.md);
  ck_assert_ptr_nonnull(strstr(md, "## Reference (copy bandwidth)"));
  ck_assert_ptr_nonnull(strstr(md, "% of copy)"));
  free(md);
  run_free(&r);
}
END_TEST

START_TEST(parity_off_computes_no_reference) {
  run r;
  const char *flags[] = {"--parity", "off", "--ops", "tilepack", NULL};
  bench(&r, flags);
  const cJSON *j = r.report;
  ck_assert(cJSON_IsFalse(bt_get(j, "config.parity")));
  const cJSON *row = bt_get(j, "benchmarks.tile_ops.tilepack.rows.cpu");
  ck_assert_str_eq(bt_get(row, "status")->valuestring, "ok");
  ck_assert(cJSON_IsNull(bt_get(row, "parity")));
  ck_assert_str_eq(bt_get(row, "parity_reason")->valuestring,
                   "--parity off: no cpu reference computed");
  run_free(&r);
}
END_TEST

START_TEST(bad_profile_values) {
  static const char *const cases[][4] = {
      {"--profile", "huge", "--profile", "[huge]"},
      {"--graph-replay", "maybe", "--graph-replay", "[maybe]"},
      {"--parity", "sometimes", "--parity", "[sometimes]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *argv[] = {"--quiet", cases[i][0], cases[i][1], NULL};
    bt_result res;
    bt_run(&res, NULL, argv);
    ck_assert_int_eq(res.status, 1);
    ck_assert_msg(strstr(res.err, cases[i][2]) && strstr(res.err, cases[i][3]), "stderr: %s",
                  res.err);
    bt_result_free(&res);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("bench_profile");
  TCase *tc = tcase_create("profile");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, seed_profile_shapes);
  tcase_add_test(tc, large_profile_and_overrides);
  tcase_add_test(tc, default_profile_derives_shapes);
  tcase_add_test(tc, copy_reference_and_shares);
  tcase_add_test(tc, parity_off_computes_no_reference);
  tcase_add_test(tc, bad_profile_values);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
