/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench on the build tree's configuration (cuda and trt are not
 * usable here): the report's schema (keys, types, no NaN or infinity,
 * skipped rows with reasons), numbers consistent with the profile, the
 * Markdown summary, and atomic writing (no file, partial or temporary, left
 * by a run that fails midway). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_bench_util.h"

/* The tiny profile of every run here (each run takes well under a second). */
#define TINY "--channels", "8", "--height", "32", "--width", "32", "--kmax", "2", \
             "--steps", "8", "--iters", "3", "--warmup", "1", "--quiet"

static const char *const sections[] = {"tile_ops", "tilessm", "indexing",
                                       "end_to_end_infer", "tensorrt"};
static const char *const section_entries[][13] = {
    {"tilepack", "tileunpack_override", "tileunpack_blend", "fused_pack_op_unpack",
     "fusiongate_alpha", "fusiongate_fuse", "tilepack_backward", "tileunpack_backward_override",
     "tileunpack_backward_blend", "fused_pack_op_unpack_backward", "fusiongate_alpha_backward",
     "fusiongate_fuse_backward", NULL},
    {"tilessm_forward", "tilessm_bidirectional", "tilessm_scan_backward_forward",
     "tilessm_scan_backward_bidirectional", NULL},
    {"gather", "index_select", "scatter_add", "gather_backward", "index_select_backward", NULL},
    {"ff_infer", "ff_infer_graph", "ff_infer_b8", "ff_infer_graph_b8", "ff_infer_b32",
     "ff_infer_graph_b32", NULL},
    {"tilessm_plugin", "engine", NULL}};

/* One run shared by the schema tests (Check forks per test; the report is
 * produced once in main). */
static char *report_dir, *report_json, *report_md;
static int report_status;
static char report_err[4096];

static cJSON *load_report(void) {
  cJSON *r = bt_load_json(report_json);
  ck_assert_msg(r != NULL, "report %s missing or malformed", report_json);
  return r;
}

static int is_string(const cJSON *v) { return cJSON_IsString(v) && v->valuestring; }

static int nonempty_string(const cJSON *v) {
  return is_string(v) && v->valuestring[0] != '\0';
}

/* Every number finite; every null value of key K has a string sibling
 * K_reason, except keys that are nullable by the schema's design. */
static void check_no_nan(const cJSON *node, const char *where) {
  static const char *const nullable[] = {
      "reason",         /* ok rows and ok backends */
      "git_sha",        /* has git_sha_reason, checked separately */
      "fp8_fallback_reason", "config_path", "trt_plugin_lib", "trt_engine_path",
      "backend",        /* dispatch with no backend: has "reason" */
      "value",          /* baseline files: skipped rows */
      "gpu", "parity", "library", "version", "device_name"};
  const cJSON *child;
  cJSON_ArrayForEach(child, node) {
    char here[512];
    snprintf(here, sizeof here, "%s.%s", where, child->string ? child->string : "[]");
    if (cJSON_IsNumber(child)) {
      ck_assert_msg(isfinite(child->valuedouble), "%s is not finite", here);
    } else if (cJSON_IsNull(child) && child->string) {
      int allowed = 0;
      for (size_t i = 0; i < sizeof nullable / sizeof nullable[0]; i++) {
        allowed |= strcmp(child->string, nullable[i]) == 0;
      }
      char reason_key[256];
      snprintf(reason_key, sizeof reason_key, "%s_reason", child->string);
      const cJSON *reason = cJSON_GetObjectItemCaseSensitive(node, reason_key);
      ck_assert_msg(allowed || nonempty_string(reason),
                    "%s is null without a %s string", here, reason_key);
    } else if (cJSON_IsObject(child) || cJSON_IsArray(child)) {
      check_no_nan(child, here);
    }
  }
}

START_TEST(run_exits_0_and_writes_both_files) {
  ck_assert_msg(report_status == 0, "exit %d: %s", report_status, report_err);
  ck_assert(bt_exists(report_json));
  ck_assert(bt_exists(report_md));
  /* only the two files: no temporary left beside them */
  ck_assert_int_eq(bt_dir_count(report_dir), 2);
}
END_TEST

START_TEST(top_level_schema) {
  cJSON *r = load_report();
  ck_assert_int_eq((int)bt_get(r, "schema_version.major")->valuedouble, 1);
  ck_assert_int_eq((int)bt_get(r, "schema_version.minor")->valuedouble, 5);
  ck_assert_str_eq(bt_get(r, "suite")->valuestring, "apexx");
  /* 1.3: a run id, 32 hex digits */
  const cJSON *run_id = bt_get(r, "run_id");
  ck_assert(nonempty_string(run_id));
  ck_assert_int_eq((int)strlen(run_id->valuestring), 32);
  ck_assert_int_eq((int)strspn(run_id->valuestring, "0123456789abcdef"), 32);
  const cJSON *ts = bt_get(r, "timestamp_utc");
  ck_assert(is_string(ts));
  /* YYYY-MM-DDTHH:MM:SSZ */
  ck_assert_int_eq((int)strlen(ts->valuestring), 20);
  ck_assert_int_eq(ts->valuestring[10], 'T');
  ck_assert_int_eq(ts->valuestring[19], 'Z');
  ck_assert_str_eq(bt_get(r, "producer.name")->valuestring, "apexx-bench");
  ck_assert(nonempty_string(bt_get(r, "producer.version")));
  const cJSON *sha = bt_get(r, "producer.git_sha");
  ck_assert(nonempty_string(sha) ||
            (cJSON_IsNull(sha) && nonempty_string(bt_get(r, "producer.git_sha_reason"))));
  ck_assert_str_eq(bt_get(r, "status")->valuestring, "ok");
  ck_assert(cJSON_IsObject(bt_get(r, "benchmarks")));
  check_no_nan(r, "report");
  cJSON_Delete(r);
}
END_TEST

START_TEST(environment_and_config) {
  cJSON *r = load_report();
  ck_assert(nonempty_string(bt_get(r, "environment.host")));
  ck_assert(nonempty_string(bt_get(r, "environment.cpu_model")));
  ck_assert(bt_get(r, "environment.cpu_cores")->valuedouble >= 1);
  /* 1.3: the machine's identity (16 hex digits) and what it hashes, the
   * libapexx that ran (this build's) */
  const cJSON *id = bt_get(r, "environment.machine_id");
  ck_assert(nonempty_string(id));
  ck_assert_int_eq((int)strlen(id->valuestring), 16);
  ck_assert_int_eq((int)strspn(id->valuestring, "0123456789abcdef"), 16);
  ck_assert_ptr_nonnull(strstr(bt_get(r, "environment.machine_id_from")->valuestring, "host"));
  ck_assert(bt_get(r, "environment.memory_mb")->valuedouble > 0);
  const cJSON *lib = bt_get(r, "environment.library_path");
  ck_assert(nonempty_string(lib));
  ck_assert_ptr_nonnull(strstr(lib->valuestring, "libapexx"));
  ck_assert_ptr_nonnull(strstr(lib->valuestring, getenv("APEXX_BUILDDIR")));
  ck_assert(cJSON_IsArray(bt_get(r, "environment.config_files")));
  /* make check sets APEXX_CONFIG: it is the file read and an override */
  const char *config = getenv("APEXX_CONFIG");
  if (config) {
    const cJSON *first = cJSON_GetArrayItem(bt_get(r, "environment.config_files"), 0);
    ck_assert(is_string(first));
    ck_assert_str_eq(first->valuestring, config);
    ck_assert_str_eq(bt_get(r, "environment.overrides.APEXX_CONFIG")->valuestring, config);
  }
  const cJSON *gpu = bt_get(r, "environment.gpu");
  ck_assert(cJSON_IsObject(gpu) ||
            (cJSON_IsNull(gpu) && nonempty_string(bt_get(r, "environment.gpu_reason"))));
  ck_assert_str_eq(bt_get(r, "environment.effective_dtype")->valuestring, "fp16");
  /* config echoes the profile given on the command line */
  static const struct {
    const char *key;
    double value;
  } expect[] = {{"batch", 1},        {"channels", 8},     {"height", 32},
                {"width", 32},       {"tile_size", 8},    {"kmax", 2},
                {"steps", 8},        {"budget_b1", 16},   {"budget_b2", 8},
                {"budget_total", 32}, {"seed", 123},      {"warmup", 1},
                {"iters", 3},        {"repetitions", 5}};
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    char path[64];
    snprintf(path, sizeof path, "config.%s", expect[i].key);
    const cJSON *v = bt_get(r, path);
    ck_assert_msg(cJSON_IsNumber(v) && v->valuedouble == expect[i].value,
                  "%s is not %g", path, expect[i].value);
  }
  ck_assert_str_eq(bt_get(r, "config.dtype")->valuestring, "fp16");
  ck_assert(cJSON_IsArray(bt_get(r, "config.ops")));
  ck_assert(cJSON_IsArray(bt_get(r, "config.backends")));
  ck_assert(cJSON_IsArray(bt_get(r, "config.trt_input_shapes")));
  ck_assert(cJSON_IsNull(bt_get(r, "config.trt_plugin_lib")) ||
            is_string(bt_get(r, "config.trt_plugin_lib")));
  cJSON_Delete(r);
}
END_TEST

static const cJSON *backend_named(const cJSON *r, const char *name) {
  const cJSON *b;
  cJSON_ArrayForEach(b, bt_get(r, "backends")) {
    if (strcmp(bt_get(b, "name")->valuestring, name) == 0) return b;
  }
  return NULL;
}

START_TEST(backends_listed_with_state_and_reason) {
  cJSON *r = load_report();
  const cJSON *list = bt_get(r, "backends");
  ck_assert(cJSON_IsArray(list));
  ck_assert_int_ge(cJSON_GetArraySize(list), 1);
  const cJSON *b;
  cJSON_ArrayForEach(b, list) {
    ck_assert(nonempty_string(bt_get(b, "name")));
    ck_assert(nonempty_string(bt_get(b, "state")));
    ck_assert(nonempty_string(bt_get(b, "device")));
    if (strcmp(bt_get(b, "state")->valuestring, "ok") == 0) {
      ck_assert(cJSON_IsNull(bt_get(b, "reason")));
    } else {
      ck_assert_msg(nonempty_string(bt_get(b, "reason")), "%s has no reason",
                    bt_get(b, "name")->valuestring);
    }
  }
  const cJSON *cpu = backend_named(r, "cpu");
  ck_assert_ptr_nonnull(cpu);
  ck_assert_str_eq(bt_get(cpu, "state")->valuestring, "ok");
  cJSON_Delete(r);
}
END_TEST

/* Every entry of every section, every row well-formed. */
START_TEST(every_row_ran_or_was_skipped_with_reason) {
  cJSON *r = load_report();
  for (int s = 0; s < 5; s++) {
    for (int e = 0; section_entries[s][e]; e++) {
      char path[256];
      snprintf(path, sizeof path, "benchmarks.%s.%s", sections[s], section_entries[s][e]);
      const cJSON *entry = bt_get(r, path);
      ck_assert_msg(cJSON_IsObject(entry), "%s missing", path);
      ck_assert_msg(cJSON_IsObject(bt_get(entry, "dispatch")), "%s.dispatch", path);
      ck_assert(cJSON_IsArray(bt_get(entry, "dispatch.passed_over")));
      ck_assert(cJSON_IsObject(bt_get(entry, "speedup_vs_cpu")));
      const char *throughput = bt_get(entry, "work.throughput")->valuestring;
      const cJSON *rows = bt_get(entry, "rows");
      ck_assert_msg(cJSON_GetArraySize(rows) >= 1, "%s has no rows", path);
      const cJSON *row;
      cJSON_ArrayForEach(row, rows) {
        const char *status = bt_get(row, "status")->valuestring;
        if (strcmp(status, "ok") != 0) {
          ck_assert_msg(strcmp(status, "skipped") == 0, "%s.%s %s: %s", path,
                        row->string, status, bt_get(row, "reason")->valuestring);
          ck_assert_msg(nonempty_string(bt_get(row, "reason")), "%s.%s: no reason",
                        path, row->string);
          /* an unusable backend's rows carry its state and reason */
          const cJSON *b = backend_named(r, row->string);
          if (b && strcmp(bt_get(b, "state")->valuestring, "ok") != 0) {
            ck_assert_msg(strstr(bt_get(row, "reason")->valuestring,
                                 bt_get(b, "reason")->valuestring) != NULL ||
                              s >= 3,
                          "%s.%s reason does not carry the backend's", path,
                          row->string);
          }
          continue;
        }
        ck_assert_msg(s < 4, "%s.%s ran but has no op", path, row->string);
        const char *num_keys[] = {"p50_ms", "p95_ms", "mean_ms", "min_ms", "max_ms",
                                  "bytes_moved", "iters"};
        for (size_t k = 0; k < sizeof num_keys / sizeof num_keys[0]; k++) {
          const cJSON *v = bt_get(row, num_keys[k]);
          ck_assert_msg(cJSON_IsNumber(v) && v->valuedouble >= 0, "%s.%s.%s", path,
                        row->string, num_keys[k]);
        }
        double p50 = bt_get(row, "p50_ms")->valuedouble;
        double p95 = bt_get(row, "p95_ms")->valuedouble;
        double mean = bt_get(row, "mean_ms")->valuedouble;
        double min = bt_get(row, "min_ms")->valuedouble;
        double max = bt_get(row, "max_ms")->valuedouble;
        ck_assert(min <= p50 && p50 <= max && min <= p95 && p95 <= max);
        ck_assert(min <= mean && mean <= max);
        ck_assert_int_eq((int)bt_get(row, "iters")->valuedouble, 3);
        /* throughput = work / p50 (docs/report.md, Timing), GB/s = bytes / p50 */
        const cJSON *tp = bt_get(row, throughput);
        double work = bt_get(entry, "work.count")->valuedouble;
        double bytes = bt_get(row, "bytes_moved")->valuedouble;
        if (p50 > 0) {
          ck_assert_msg(cJSON_IsNumber(tp), "%s.%s.%s", path, row->string, throughput);
          ck_assert(fabs(tp->valuedouble - work / (p50 / 1000.0)) <=
                    1e-9 * tp->valuedouble);
          ck_assert(fabs(bt_get(row, "gb_per_s")->valuedouble -
                         bytes / (p50 / 1000.0) / 1e9) <= 1e-9 * bytes);
        }
        const cJSON *parity = bt_get(row, "parity");
        ck_assert_msg(cJSON_IsObject(parity), "%s.%s parity", path, row->string);
        ck_assert(cJSON_IsTrue(bt_get(parity, "ok")));
        ck_assert_str_eq(bt_get(parity, "against")->valuestring, "cpu");
        ck_assert(cJSON_IsNumber(bt_get(parity, "max_abs_err")));
        ck_assert(cJSON_IsNumber(bt_get(parity, "max_rel_err")));
      }
    }
  }
  /* ff_infer on the cpu: the routing of the tiny profile (32x32, G0 = 4
   * L0 tiles, kmax 2/4, b1 16, b2 8, tile cost 0.8): 2 L0 tiles, then one
   * parent (kmax_l1 4 leaves room for its 4 children only) */
  const cJSON *ff = bt_get(r, "benchmarks.end_to_end_infer.ff_infer.rows.cpu");
  ck_assert_str_eq(bt_get(ff, "status")->valuestring, "ok");
  ck_assert(bt_get(ff, "selected_l0_per_call")->valuedouble == 2);
  ck_assert(bt_get(ff, "selected_l1_per_call")->valuedouble == 4);
  ck_assert(bt_get(ff, "budget_b1_spent")->valuedouble == 0.8 + 0.8);
  ck_assert(bt_get(ff, "budget_b2_spent")->valuedouble == 1.0);
  ck_assert(bt_get(ff, "flops")->valuedouble > 0);
  const cJSON *graph = bt_get(r, "benchmarks.end_to_end_infer.ff_infer_graph.rows.cpu");
  ck_assert_str_eq(bt_get(graph, "status")->valuestring, "skipped");
  ck_assert(strncmp(bt_get(graph, "reason")->valuestring, "not_applicable:", 15) == 0);
  /* no plugin library given: the TensorRT plugin row says so */
  if (!getenv("APEXX_TRT_PLUGIN_LIB")) {
    ck_assert_str_eq(
        bt_get(r, "benchmarks.tensorrt.tilessm_plugin.rows.trt.reason")->valuestring,
        "missing_plugin_library");
  }
  ck_assert_str_eq(bt_get(r, "benchmarks.tensorrt.engine.rows.trt.reason")->valuestring,
                   "missing_trt_engine_path");
  cJSON_Delete(r);
}
END_TEST

/* bytes_moved and the work counts against the profile, computed here from
 * the documented sizes (apexx-bench(1), SIZES). */
START_TEST(work_and_bytes_follow_the_profile) {
  cJSON *r = load_report();
  const double B = 1, C = 8, H = 32, W = 32, t = 8, K = 2, S = 8, f16 = 2, i32 = 4;
  const double M = B * H * W, N = B * K * t * t, D = C;
  static const char *const paths[] = {"tile_ops.tilepack",
                                      "tile_ops.tileunpack_override",
                                      "tile_ops.fusiongate_alpha",
                                      "tile_ops.fusiongate_fuse",
                                      "tilessm.tilessm_forward",
                                      "indexing.gather",
                                      "indexing.index_select",
                                      "indexing.scatter_add",
                                      "indexing.gather_backward",
                                      "end_to_end_infer.ff_infer",
                                      "tile_ops.tilepack_backward",
                                      "tile_ops.tileunpack_backward_override",
                                      "tile_ops.tileunpack_backward_blend",
                                      "tile_ops.fused_pack_op_unpack_backward",
                                      "tile_ops.fusiongate_alpha_backward",
                                      "tile_ops.fusiongate_fuse_backward",
                                      "tilessm.tilessm_scan_backward_forward",
                                      "tilessm.tilessm_scan_backward_bidirectional",
                                      "indexing.index_select_backward"};
  const double work[] = {B * K,         B * K,     B * H * W, B * C * H * W, B * S * C,
                         N * D,         N * D,     M * D,     M * D,         B,
                         B * K,         B * K,     B * K,     B * K,         B * H * W,
                         B * C * H * W, B * S * C, B * S * C, M * D};
  /* docs/report.md, Sections and entries: the backward entries' bytes */
  const double tiles = B * K * C * t * t, map = B * C * H * W, plane = B * H * W, f32 = 4;
  const double bytes[] = {
      /* tilepack: the selected tiles, ids, packed out */
      B * K * C * t * t * f16 + B * K * i32 + B * K * C * t * t * f16,
      /* tileunpack: base, packed, ids, levels, out */
      B * C * H * W * f16 * 2 + B * K * C * t * t * f16 + 2 * B * K * i32,
      /* alpha: two proxies and alpha */
      3 * B * H * W * f16,
      /* fuse: base, detail, alpha, out */
      3 * B * C * H * W * f16 + B * H * W * f16,
      /* scan: tokens, 4 vectors, out */
      2 * B * S * C * f16 + 4 * C * f16,
      /* gather: N*D src elements, index, out */
      N * D * f16 + N * D * i32 + N * D * f16,
      /* index_select: N rows of src, index, out */
      N * D * f16 + N * i32 + N * D * f16,
      /* scatter_add: self, index, src, out */
      M * D * f16 + N * D * i32 + N * D * f16 + M * D * f16,
      /* gather_backward: grad_out, index, grad_src */
      N * D * f16 + N * D * i32 + M * D * f16,
      /* ff_infer: dense, utilities and split utilities [B, G0], two
       * proxies; heavy, detail, alpha */
      3 * B * C * H * W * f16 + 2 * B * (H / 16) * (W / 16) * f16 + 3 * B * H * W * f16,
      /* tilepack_backward: grad_out (the tiles), ids, grad_features (the map) */
      tiles * f16 + B * K * i32 + map * f16,
      /* tileunpack_backward: grad_out, ids, levels, grad_base, grad_packed */
      2 * map * f16 + 2 * B * K * i32 + tiles * f16, 2 * map * f16 + 2 * B * K * i32 + tiles * f16,
      /* fused_pack_op_unpack_backward: grad_out, the selected tiles of
       * features, ids, grad_features, grad_scalars (4 f32) */
      2 * map * f16 + tiles * f16 + B * K * i32 + 4 * f32,
      /* fusiongate_alpha_backward: grad_out, two proxies, their gradients,
       * the three 0-d f32 gradients */
      5 * plane * f16 + 3 * f32,
      /* fusiongate_fuse_backward: grad_out, base, detail, alpha and their
       * gradients */
      5 * map * f16 + 2 * plane * f16,
      /* tilessm_scan_backward: grad_out, tokens, grad_tokens, four vectors
       * and their gradients */
      3 * B * S * C * f16 + 8 * C * f16, 3 * B * S * C * f16 + 8 * C * f16,
      /* index_select_backward: grad_out, index, grad_src */
      N * D * f16 + N * i32 + M * D * f16};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    char path[128];
    snprintf(path, sizeof path, "benchmarks.%s.work.count", paths[i]);
    ck_assert_msg(bt_get(r, path)->valuedouble == work[i], "%s = %g, expected %g",
                  path, bt_get(r, path)->valuedouble, work[i]);
    snprintf(path, sizeof path, "benchmarks.%s.rows.cpu.bytes_moved", paths[i]);
    ck_assert_msg(bt_get(r, path)->valuedouble == bytes[i], "%s = %g, expected %g",
                  path, bt_get(r, path)->valuedouble, bytes[i]);
  }
  cJSON_Delete(r);
}
END_TEST

/* 1.5: every backward entry names its op, takes grad_out, and its cpu
 * row's parity covers every gradient: the rule states the bound of each
 * gradient that is a sum (docs/report.md, Parity). */
START_TEST(backward_rows_check_every_gradient) {
  cJSON *r = load_report();
  static const struct {
    const char *path, *op, *gradients[6], *rule;
  } entries[] = {
      {"tile_ops.tilepack_backward", "tilepack_backward", {"grad_features"}, "bit-exact (copy op)"},
      {"tile_ops.tileunpack_backward_override",
       "tileunpack_backward",
       {"grad_base", "grad_packed"},
       "bit-exact (copy op)"},
      {"tile_ops.tileunpack_backward_blend",
       "tileunpack_backward",
       {"grad_base", "grad_packed"},
       "|err| <= 2*(atol + rtol*|ref|)"},
      {"tile_ops.fused_pack_op_unpack_backward",
       "fused_pack_op_unpack_backward",
       {"grad_features", "grad_scalars"},
       "|err| <= 2*(atol + rtol*|ref|); grad_scalars (sums of 1024 terms): 64*(atol + "
       "rtol*|ref|)"},
      {"tile_ops.fusiongate_alpha_backward",
       "fusiongate_alpha_backward",
       {"grad_boundary", "grad_uncertainty", "grad_boundary_log_weight",
        "grad_uncertainty_log_weight", "grad_bias"},
       "|err| <= 2*(atol + rtol*|ref|) + 1 ulp; grad_boundary_log_weight, "
       "grad_uncertainty_log_weight, grad_bias (sums of 1024 terms): 64*(atol + rtol*|ref|) + "
       "1 ulp"},
      {"tile_ops.fusiongate_fuse_backward",
       "fusiongate_fuse_backward",
       {"grad_base", "grad_detail", "grad_alpha"},
       "|err| <= 2*(atol + rtol*|ref|); grad_alpha (sums of 8 terms): 6*(atol + rtol*|ref|)"},
      {"tilessm.tilessm_scan_backward_forward",
       "tilessm_scan_backward",
       {"grad_tokens", "grad_decay", "grad_input_gain", "grad_output_gain", "grad_state_bias"},
       "|err| <= 2*(atol + rtol*|ref|); grad_decay, grad_input_gain, grad_output_gain, "
       "grad_state_bias (sums of 8 terms): 6*(atol + rtol*|ref|)"},
      {"tilessm.tilessm_scan_backward_bidirectional",
       "tilessm_scan_backward",
       {"grad_tokens", "grad_decay", "grad_input_gain", "grad_output_gain", "grad_state_bias"},
       "|err| <= 2*(atol + rtol*|ref|); grad_decay, grad_input_gain, grad_output_gain, "
       "grad_state_bias (sums of 16 terms): 8*(atol + rtol*|ref|)"},
      {"indexing.index_select_backward",
       "index_select_backward",
       {"grad_src"},
       "|err| <= 2*(atol + rtol*|ref|)"},
  };
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, "benchmarks.%s", entries[i].path);
    const cJSON *e = bt_get(r, path);
    ck_assert_msg(cJSON_IsObject(e), "%s missing", path);
    ck_assert_str_eq(bt_get(e, "op")->valuestring, entries[i].op);
    ck_assert_msg(cJSON_IsObject(bt_get(e, "tensors.grad_out")), "%s takes no grad_out", path);
    for (int k = 0; k < 6 && entries[i].gradients[k]; k++) {
      snprintf(path, sizeof path, "benchmarks.%s.tensors.%s", entries[i].path,
               entries[i].gradients[k]);
      ck_assert_msg(cJSON_IsObject(bt_get(r, path)), "%s missing", path);
    }
    snprintf(path, sizeof path, "benchmarks.%s.rows.cpu", entries[i].path);
    const cJSON *row = bt_get(r, path);
    ck_assert_msg(strcmp(bt_get(row, "status")->valuestring, "ok") == 0, "%s: %s", path,
                  bt_get(row, "status")->valuestring);
    ck_assert_str_eq(bt_get(row, "parity.against")->valuestring, "cpu");
    ck_assert(cJSON_IsTrue(bt_get(row, "parity.ok")));
    ck_assert_msg(strcmp(bt_get(row, "parity.rule")->valuestring, entries[i].rule) == 0,
                  "%s.parity.rule = [%s], expected [%s]", path,
                  bt_get(row, "parity.rule")->valuestring, entries[i].rule);
    ck_assert(bt_get(row, "pct_of_copy")->valuedouble > 0);
  }
  cJSON_Delete(r);
}
END_TEST

/* 1.4: the frame at batches 1 (the profile's), 8 and 32: each entry states
 * its batch, its tensors and work are the batch's, the cpu row is ok with
 * the routing of every batch row (the tiny profile's 2 L0 and 4 L1 tiles
 * a row, as in every_row_ran_or_was_skipped_with_reason), its bytes the
 * batch's share of the B=1 frame's and its share of the run's copy; the
 * graph-replay entries' cpu rows are not applicable. */
START_TEST(ff_infer_rows_at_batches_1_8_32) {
  cJSON *r = load_report();
  static const struct {
    const char *eager, *graph;
    double batch;
  } entries[] = {{"ff_infer", "ff_infer_graph", 1},
                 {"ff_infer_b8", "ff_infer_graph_b8", 8},
                 {"ff_infer_b32", "ff_infer_graph_b32", 32}};
  const double bytes_b1 =
      bt_get(r, "benchmarks.end_to_end_infer.ff_infer.rows.cpu.bytes_moved")->valuedouble;
  ck_assert(bytes_b1 > 0);
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    const double B = entries[i].batch;
    char path[160];
    for (int g = 0; g < 2; g++) {
      const char *name = g ? entries[i].graph : entries[i].eager;
      snprintf(path, sizeof path, "benchmarks.end_to_end_infer.%s", name);
      const cJSON *e = bt_get(r, path);
      ck_assert_msg(cJSON_IsObject(e), "%s missing", path);
      ck_assert_msg(bt_get(e, "batch")->valuedouble == B, "%s.batch = %g, expected %g", path,
                    bt_get(e, "batch")->valuedouble, B);
      ck_assert_str_eq(bt_get(e, "work.throughput")->valuestring, "frames_per_s");
      ck_assert(bt_get(e, "work.count")->valuedouble == B);
      const cJSON *dense = bt_get(e, "tensors.dense.shape");
      ck_assert_int_eq(cJSON_GetArraySize(dense), 4);
      ck_assert(cJSON_GetArrayItem(dense, 0)->valuedouble == B);
      ck_assert(cJSON_GetArrayItem(bt_get(e, "tensors.heavy.shape"), 0)->valuedouble == B);
      const cJSON *row = bt_get(e, "rows.cpu");
      if (g) {
        ck_assert_str_eq(bt_get(row, "status")->valuestring, "skipped");
        ck_assert(strncmp(bt_get(row, "reason")->valuestring, "not_applicable:", 15) == 0);
        continue;
      }
      ck_assert_msg(strcmp(bt_get(row, "status")->valuestring, "ok") == 0, "%s.rows.cpu: %s",
                    path, bt_get(row, "status")->valuestring);
      ck_assert(bt_get(row, "selected_l0_per_call")->valuedouble == 2 * B);
      ck_assert(bt_get(row, "selected_l1_per_call")->valuedouble == 4 * B);
      ck_assert(bt_get(row, "bytes_moved")->valuedouble == B * bytes_b1);
      const double fps = bt_get(row, "frames_per_s")->valuedouble;
      ck_assert(fps > 0);
      ck_assert_msg(fabs(fps - B / (bt_get(row, "p50_ms")->valuedouble / 1000)) <= 1e-9 * fps,
                    "%s frames_per_s %g is not B / p50", path, fps);
      ck_assert(bt_get(row, "gb_per_s")->valuedouble > 0);
      ck_assert(bt_get(row, "pct_of_copy")->valuedouble > 0);
      ck_assert(cJSON_IsTrue(bt_get(row, "parity.ok")));
    }
  }
  cJSON_Delete(r);
}
END_TEST

START_TEST(markdown_has_a_table_per_section) {
  char *md = bt_read(report_md);
  ck_assert_ptr_nonnull(md);
  const char *expect[] = {"# apexx benchmark report", "- status: `ok`", "## Backends",
                          "## Tile Ops", "## TileSSM", "## Indexing",
                          "## End-to-End Infer", "## TensorRT",
                          "| entry | dispatch | cpu |", "| tilepack | cpu",
                          "| ff_infer | cpu", "skipped: not_applicable:",
                          "skipped: missing_trt_engine_path"};
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    ck_assert_msg(strstr(md, expect[i]) != NULL, "markdown lacks [%s]", expect[i]);
  }
  /* the same entries in the same order as the JSON */
  const char *a = strstr(md, "| tilepack |"), *b = strstr(md, "| gather_backward |");
  ck_assert(a && b && a < b);
  free(md);
}
END_TEST

/* ---- atomic writes ------------------------------------------------------ */

START_TEST(fault_injection_leaves_no_file) {
  char *dir = bt_tmpdir();
  char *json = bt_path(dir, "r.json"), *md = bt_path(dir, "r.md");
  const char *env[] = {"APEXX_BENCH_FAIL_AFTER=3", NULL};
  const char *argv[] = {TINY, "--backends", "cpu", "--output-json", json,
                        "--output-md", md, NULL};
  bt_result r;
  bt_run(&r, env, argv);
  ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
  ck_assert_ptr_nonnull(strstr(r.err, "APEXX_BENCH_FAIL_AFTER"));
  ck_assert_ptr_nonnull(strstr(r.err, "no report written"));
  ck_assert_int_eq(bt_dir_count(dir), 0);
  bt_result_free(&r);
  free(json);
  free(md);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(failed_run_keeps_the_previous_report) {
  char *dir = bt_tmpdir();
  char *json = bt_path(dir, "r.json");
  bt_write(json, "previous report\n");
  const char *env[] = {"APEXX_BENCH_FAIL_AFTER=0", NULL};
  const char *argv[] = {TINY, "--output-json", json, NULL};
  bt_result r;
  bt_run(&r, env, argv);
  ck_assert_int_eq(r.status, 1);
  char *text = bt_read(json);
  ck_assert_str_eq(text, "previous report\n");
  ck_assert_int_eq(bt_dir_count(dir), 1);
  free(text);
  bt_result_free(&r);
  free(json);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(unwritable_target_leaves_neither_file) {
  /* the JSON target is a directory: its rename fails after both files were
   * written to temporaries; the Markdown must not appear alone */
  char *dir = bt_tmpdir();
  char *json = bt_path(dir, "r.json"), *md = bt_path(dir, "r.md");
  char *inner = bt_path(json, "keep");
  ck_assert_int_eq(mkdir(json, 0755), 0);
  bt_write(inner, "x");
  const char *argv[] = {TINY, "--ops", "tilepack", "--output-json", json,
                        "--output-md", md, NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
  ck_assert_ptr_nonnull(strstr(r.err, "--output-json"));
  ck_assert(!bt_exists(md));
  ck_assert_int_eq(bt_dir_count(dir), 1); /* only the directory itself */
  ck_assert(bt_exists(inner));
  bt_result_free(&r);
  free(inner);
  free(json);
  free(md);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

START_TEST(table_to_stdout_json_when_asked) {
  /* no output file named: the Markdown summary, for a reader */
  const char *table[] = {TINY, "--ops", "gather", "--backends", "cpu", NULL};
  bt_result r;
  bt_run(&r, NULL, table);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(strstr(r.out, "# apexx benchmark report"));
  ck_assert_ptr_nonnull(strstr(r.out, "| gather |"));
  ck_assert_ptr_null(cJSON_Parse(r.out));
  bt_result_free(&r);
  /* JSON only when asked for */
  const char *argv[] = {TINY, "--ops", "gather", "--backends", "cpu", "--output-json", "-", NULL};
  bt_run(&r, NULL, argv);
  ck_assert_int_eq(r.status, 0);
  cJSON *j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(bt_get(j, "suite")->valuestring, "apexx");
  /* only the selected entry; other backends not measured, said so */
  ck_assert_ptr_null(bt_get(j, "benchmarks.tile_ops"));
  ck_assert_str_eq(bt_get(j, "benchmarks.indexing.gather.rows.cpu.status")->valuestring,
                   "ok");
  const cJSON *row;
  cJSON_ArrayForEach(row, bt_get(j, "benchmarks.indexing.gather.rows")) {
    if (strcmp(row->string, "cpu") == 0) continue;
    ck_assert_str_eq(bt_get(row, "status")->valuestring, "skipped");
  }
  cJSON_Delete(j);
  bt_result_free(&r);
}
END_TEST

/* --ff-order, --ff-overlap, --ff-blend-alpha, --ff-scan reach ff_infer
 * (as its descriptor's value names: a name it lacks would fail the row)
 * and the report's config (1.4); without them, the defaults. */
START_TEST(ff_options_are_recorded) {
  const char *with[] = {
      TINY,         "--ops",     "ff_infer",     "--backends",    "cpu",
      "--ff-order", "SCAN_RL",   "--ff-overlap", "blend",         "--ff-blend-alpha",
      "0.25",       "--ff-scan", "forward",      "--output-json", "-",
      NULL};
  const char *without[] = {TINY,  "--ops",         "ff_infer", "--backends",
                           "cpu", "--output-json", "-",        NULL};
  const char *const want[2][3] = {{"r2l", "blend", "forward"},
                                  {"hilbert", "override", "bidirectional"}};
  const double alpha[2] = {0.25, 0.5};
  for (int run = 0; run < 2; run++) {
    bt_result r;
    bt_run(&r, NULL, run == 0 ? with : without);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    cJSON *j = cJSON_Parse(r.out);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(bt_get(j, "config.ff_order_mode")->valuestring, want[run][0]);
    ck_assert_str_eq(bt_get(j, "config.ff_overlap_mode")->valuestring, want[run][1]);
    ck_assert_str_eq(bt_get(j, "config.ff_scan_mode")->valuestring, want[run][2]);
    ck_assert(bt_get(j, "config.ff_blend_alpha")->valuedouble == alpha[run]);
    const cJSON *row = bt_get(j, "benchmarks.end_to_end_infer.ff_infer.rows.cpu");
    ck_assert_msg(strcmp(bt_get(row, "status")->valuestring, "ok") == 0, "ff_infer: %s",
                  cJSON_PrintUnformatted(row));
    cJSON_Delete(j);
    bt_result_free(&r);
  }
}
END_TEST

START_TEST(cpu_time_timer_is_recorded) {
  const char *argv[] = {TINY,      "--ops",    "gather",        "--backends", "cpu",
                        "--timer", "cpu-time", "--output-json", "-",          NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(bt_get(j, "config.timer")->valuestring, "cpu-time");
  ck_assert_str_eq(bt_get(j, "benchmarks.indexing.gather.rows.cpu.timer")->valuestring,
                   "process_cpu_time");
  ck_assert(bt_get(j, "benchmarks.indexing.gather.rows.cpu.p50_ms")->valuedouble > 0);
  cJSON_Delete(j);
  bt_result_free(&r);
}
END_TEST

START_TEST(fp8_falls_back_to_fp16_with_reason) {
  const char *argv[] = {TINY, "--ops", "tilepack", "--dtype", "fp8", "--output-json", "-", NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_int_eq(r.status, 0);
  cJSON *j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(bt_get(j, "environment.requested_dtype")->valuestring, "fp8");
  ck_assert_str_eq(bt_get(j, "environment.effective_dtype")->valuestring, "fp16");
  ck_assert(nonempty_string(bt_get(j, "environment.fp8_fallback_reason")));
  cJSON_Delete(j);
  bt_result_free(&r);
}
END_TEST

/* Same seed, same inputs: the outputs are the same bytes, so the cpu row's
 * parity (against an untimed cpu call) is exact for every dtype. */
START_TEST(dtypes_run_with_exact_cpu_parity) {
  const char *dtypes[] = {"fp32", "bf16"};
  for (int i = 0; i < 2; i++) {
    const char *argv[] = {TINY,     "--backends", "cpu",           "--dtype", dtypes[i],
                          "--seed", "7",          "--output-json", "-",       NULL};
    bt_result r;
    bt_run(&r, NULL, argv);
    ck_assert_msg(r.status == 0, "%s: exit %d: %s", dtypes[i], r.status, r.err);
    cJSON *j = cJSON_Parse(r.out);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(bt_get(j, "config.dtype")->valuestring, dtypes[i]);
    ck_assert_int_eq((int)bt_get(j, "config.seed")->valuedouble, 7);
    ck_assert(bt_get(j, "benchmarks.tilessm.tilessm_forward.rows.cpu.parity.max_abs_err")
                  ->valuedouble == 0.0);
    cJSON_Delete(j);
    bt_result_free(&r);
  }
}
END_TEST

/* The TensorRT section's skip reasons follow the reference's: no plugin
 * library, an engine path that does not exist; with a plugin library the
 * trt backend's own state decides. */
START_TEST(tensorrt_reasons) {
  char *dir = bt_tmpdir();
  char *plugin = bt_path(dir, "libplugin.so");
  bt_write(plugin, "not really a plugin");
  const char *argv[] = {TINY,
                        "--ops",
                        "tensorrt",
                        "--trt-plugin-lib",
                        plugin,
                        "--trt-engine-path",
                        "no-such.engine",
                        "--trt-input-shape",
                        "input=1x3x16x16",
                        "--output-json",
                        "-",
                        NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
  cJSON *j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(bt_get(j, "config.trt_plugin_lib")->valuestring, plugin);
  ck_assert_str_eq(cJSON_GetArrayItem(bt_get(j, "config.trt_input_shapes"), 0)->valuestring,
                   "input=1x3x16x16");
  const char *engine = bt_get(j, "benchmarks.tensorrt.engine.rows.trt.reason")->valuestring;
  ck_assert_msg(strncmp(engine, "engine_not_found:/", 18) == 0 &&
                    strstr(engine, "/no-such.engine") != NULL,
                "%s", engine);
  const cJSON *row = bt_get(j, "benchmarks.tensorrt.tilessm_plugin.rows.trt");
  ck_assert_ptr_nonnull(row);
  /* the plugin file exists: the reason is no longer the missing library */
  if (strcmp(bt_get(row, "status")->valuestring, "skipped") == 0) {
    ck_assert_str_ne(bt_get(row, "reason")->valuestring, "missing_plugin_library");
  }
  /* only the trt backend has rows in this section */
  ck_assert_int_eq(cJSON_GetArraySize(bt_get(j, "benchmarks.tensorrt.engine.rows")), 1);
  cJSON_Delete(j);
  bt_result_free(&r);
  /* the environment variable stands in for the flag; a missing file is a
   * missing library */
  const char *env[] = {"APEXX_TRT_PLUGIN_LIB=/nonexistent/libplugin.so", NULL};
  const char *argv2[] = {TINY, "--ops", "tilessm_plugin", "--output-json", "-", NULL};
  bt_run(&r, env, argv2);
  ck_assert_int_eq(r.status, 0);
  j = cJSON_Parse(r.out);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(bt_get(j, "config.trt_plugin_lib")->valuestring,
                   "/nonexistent/libplugin.so");
  ck_assert_str_eq(
      bt_get(j, "benchmarks.tensorrt.tilessm_plugin.rows.trt.reason")->valuestring,
      "missing_plugin_library");
  cJSON_Delete(j);
  bt_result_free(&r);
  free(plugin);
  bt_rm_rf(dir);
  free(dir);
}
END_TEST

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* schema 1.1: every ok row has the per-pass medians of --repetitions
 * (default 5), and p50_ms is their median */
START_TEST(rows_keep_their_repetitions) {
  cJSON *r = load_report();
  int rows = 0;
  const cJSON *section, *entry, *row;
  cJSON_ArrayForEach(section, bt_get(r, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, cJSON_GetObjectItem(entry, "rows")) {
        if (strcmp(cJSON_GetObjectItem(row, "status")->valuestring, "ok") != 0) continue;
        const cJSON *reps = cJSON_GetObjectItem(row, "repetitions");
        ck_assert_msg(cJSON_IsObject(reps), "%s.%s", entry->string, row->string);
        const cJSON *med = cJSON_GetObjectItem(reps, "medians_ms");
        ck_assert_int_eq(cJSON_GetArraySize(med), 5);
        ck_assert_int_eq((int)cJSON_GetObjectItem(reps, "n")->valuedouble, 5);
        double v[5];
        for (int i = 0; i < 5; i++) v[i] = cJSON_GetArrayItem(med, i)->valuedouble;
        qsort(v, 5, sizeof v[0], cmp_double);
        ck_assert(cJSON_GetObjectItem(row, "p50_ms")->valuedouble == v[2]);
        ck_assert(cJSON_GetObjectItem(reps, "median_ms")->valuedouble == v[2]);
        ck_assert(cJSON_GetObjectItem(reps, "min_ms")->valuedouble == v[0]);
        ck_assert(cJSON_GetObjectItem(reps, "mad_ms")->valuedouble >= 0);
        ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(reps, "mins_ms")), 5);
        rows++;
      }
    }
  }
  ck_assert_int_gt(rows, 5);
  cJSON_Delete(r);
}
END_TEST

int main(void) {
  bt_bench();
  report_dir = bt_tmpdir();
  report_json = bt_path(report_dir, "report.json");
  report_md = bt_path(report_dir, "report.md");
  const char *argv[] = {TINY, "--output-json", report_json, "--output-md", report_md,
                        NULL};
  bt_result r;
  bt_run(&r, NULL, argv);
  report_status = r.status;
  snprintf(report_err, sizeof report_err, "%s", r.err);
  bt_result_free(&r);

  Suite *s = suite_create("bench_report");
  TCase *schema = tcase_create("schema");
  tcase_set_timeout(schema, 30);
  tcase_add_test(schema, run_exits_0_and_writes_both_files);
  tcase_add_test(schema, rows_keep_their_repetitions);
  tcase_add_test(schema, top_level_schema);
  tcase_add_test(schema, environment_and_config);
  tcase_add_test(schema, backends_listed_with_state_and_reason);
  tcase_add_test(schema, every_row_ran_or_was_skipped_with_reason);
  tcase_add_test(schema, work_and_bytes_follow_the_profile);
  tcase_add_test(schema, markdown_has_a_table_per_section);
  tcase_add_test(schema, ff_infer_rows_at_batches_1_8_32);
  tcase_add_test(schema, backward_rows_check_every_gradient);
  suite_add_tcase(s, schema);
  TCase *files = tcase_create("files");
  tcase_set_timeout(files, 30);
  tcase_add_test(files, fault_injection_leaves_no_file);
  tcase_add_test(files, failed_run_keeps_the_previous_report);
  tcase_add_test(files, unwritable_target_leaves_neither_file);
  tcase_add_test(files, table_to_stdout_json_when_asked);
  tcase_add_test(files, cpu_time_timer_is_recorded);
  tcase_add_test(files, ff_options_are_recorded);
  tcase_add_test(files, fp8_falls_back_to_fp16_with_reason);
  tcase_add_test(files, dtypes_run_with_exact_cpu_parity);
  tcase_add_test(files, tensorrt_reasons);
  suite_add_tcase(s, files);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  bt_rm_rf(report_dir);
  free(report_json);
  free(report_md);
  free(report_dir);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
