/* SPDX-License-Identifier: Apache-2.0 */
/* The tensorrt section's rows (docs/trt.md): a serialized engine and the
 * TileSSMScan plugin, run by the plugin library's runners
 * (include/apexx/trt_engine_runner.h) on the trt backend only. */
#include "runner.h"

#include <apexx/trt_engine_runner.h>
#include <dlfcn.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void trt_engine_warning(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "apexx-bench: warning: %s\n", line);
}

/* The trt row of a runner's result (rc as apexx_trt_engine_run_fn):
 * skipped or failed with its reason, else ok with the timings, the file it
 * ran (path_key) and throughput_key = work / p50 in seconds; *ran set when
 * it ran. */
static cJSON *trt_result_row(run_state *rs, int rc, const apexx_trt_engine_result *res,
                             const char *path_key, const char *path, const char *throughput_key,
                             double work, int *ran) {
  const bench_options *o = rs->opts;
  *ran = 0;
  if (rc == 1)
    return runner_row_skipped("%s", res->reason);
  if (rc != 0)
    return runner_row_failed(rs, "%s", res->reason);
  *ran = 1;
  rs->rows_measured++;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "status", "ok");
  cJSON_AddNullToObject(row, "reason");
  cJSON_AddStringToObject(row, path_key, path);
  cJSON_AddStringToObject(row, "mode", res->mode);
  cJSON_AddStringToObject(row, "tensorrt_version", res->trt_version);
  bench_json_number(row, "p50_ms", res->p50_ms, NULL);
  bench_json_number(row, "p95_ms", res->p95_ms, NULL);
  bench_json_number(row, "mean_ms", res->mean_ms, NULL);
  cJSON_AddNumberToObject(row, "iters", o->iters);
  cJSON_AddNumberToObject(row, "warmup", o->warmup);
  cJSON_AddStringToObject(row, "timer", "cuda_events");
  bench_json_number(row, "peak_memory_mb", res->peak_memory_mb, NULL);
  if (res->p50_ms > 0)
    bench_json_number(row, throughput_key, work / (res->p50_ms / 1000.0), NULL);
  else
    bench_json_number(row, throughput_key, NAN, "p50_ms is 0: below the timer's resolution");
  return row;
}

/* The plugin library: --trt-plugin-lib, else [backend trt] plugin_library
 * in effect ($APEXX_TRT_PLUGIN_LIB, the configuration's value or the
 * installed library); NULL when neither names one. */
static const char *trt_plugin_path(const run_state *rs) {
  if (rs->opts->trt_plugin_lib)
    return rs->opts->trt_plugin_lib;
  for (int i = 0, n = apx_config_key_count(rs->ctx); i < n; i++) {
    apx_config_key_info k;
    if (apx_config_key(rs->ctx, i, &k) == APX_OK && k.key &&
        strcmp(k.section, "backend trt") == 0 && strcmp(k.key, "plugin_library") == 0)
      return k.value;
  }
  return NULL;
}

/* tensorrt.engine with an engine file: the engine runner of the plugin
 * library (include/apexx/trt_engine_runner.h, docs/trt.md), opened with the
 * core's checks (apx_library_open). The library stays loaded (TensorRT and
 * the cuda kernels keep state in it). Its skip reasons are the report's
 * (docs/report.md, Rows), plus tensorrt_unavailable: with the probe's
 * reason where TensorRT or the library is missing. */
static cJSON *trt_engine_row(run_state *rs, const char *path, int *ran) {
  const bench_options *o = rs->opts;
  const char *lib = trt_plugin_path(rs);
  *ran = 0;
  if (!lib)
    return runner_row_skipped("tensorrt_unavailable:plugin library not loaded: neither "
                              "--trt-plugin-lib nor [backend trt] plugin_library names one");
  void *h = NULL;
  if (apx_library_open(rs->ctx, lib, &h) != APX_OK)
    return runner_row_skipped("tensorrt_unavailable:plugin library not loaded: %s",
                              apx_last_error());
  void *sym = dlsym(h, APEXX_TRT_ENGINE_RUN_SYMBOL);
  if (!sym)
    return runner_row_skipped("tensorrt_unavailable:%s lacks %s", lib, APEXX_TRT_ENGINE_RUN_SYMBOL);
  apexx_trt_engine_run_fn run;
  memcpy(&run, &sym, sizeof run);
  apexx_trt_engine_request q;
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  q.engine_path = path;
  q.input_shapes = o->trt_input_shapes;
  q.input_shape_count = o->trt_input_shape_count;
  q.warmup = o->warmup;
  q.iters = o->iters;
  q.seed = o->seed;
  q.warn = trt_engine_warning;
  apexx_trt_engine_result res;
  int rc = run(&q, &res);
  return trt_result_row(rs, rc, &res, "engine_path", path, "frames_per_s", (double)res.frames, ran);
}

/* An entry that only the trt backend runs, with its one row: every other
 * backend's row dropped, the dispatch naming trt when the row ran, else
 * giving the row's reason. */
static cJSON *trt_only_entry(run_state *rs, const entry_def *e, const bench_case *c, cJSON *row,
                             int ran) {
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(row, "reason");
  cJSON *ej =
      runner_run_all_skipped(rs, e, c, cJSON_IsString(why) ? why->valuestring : "trt runner");
  cJSON *rows = cJSON_GetObjectItemCaseSensitive(ej, "rows");
  for (int i = 0; i < rs->backend_count; i++) {
    if (strcmp(rs->backends[i].name, "trt") != 0)
      cJSON_DeleteItemFromObjectCaseSensitive(rows, rs->backends[i].name);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(rows, "trt");
  cJSON_AddItemToObject(rows, "trt", row);
  if (ran) {
    cJSON *d = cJSON_GetObjectItemCaseSensitive(ej, "dispatch");
    cJSON_ReplaceItemInObjectCaseSensitive(d, "backend", cJSON_CreateString("trt"));
  }
  return ej;
}

static cJSON *run_trt_engine_file(run_state *rs, const entry_def *e, const bench_case *c,
                                  const char *path) {
  int ran = 0;
  cJSON *row = trt_engine_row(rs, path, &ran);
  return trt_only_entry(rs, e, c, row, ran);
}

/* tensorrt.tilessm_plugin with the plugin library loaded (handle h, kept
 * loaded as the engine row's) and the trt backend usable: the library's
 * apexx_trt_plugin_run (include/apexx/trt_engine_runner.h) builds a network of
 * one TileSSMScan plugin over fp16 tokens [scan_batch, steps,
 * scan_channels] and times its engine; tokens_per_s is
 * scan_batch * steps * scan_channels / p50. */
cJSON *runner_run_trt_plugin(run_state *rs, const entry_def *e, const bench_case *c, void *h) {
  const bench_options *o = rs->opts;
  int ran = 0;
  cJSON *row;
  void *sym = dlsym(h, APEXX_TRT_PLUGIN_RUN_SYMBOL);
  if (!sym) {
    row = runner_row_skipped("tensorrt_unavailable:%s lacks %s", o->trt_plugin_lib,
                             APEXX_TRT_PLUGIN_RUN_SYMBOL);
  } else {
    apexx_trt_plugin_run_fn run;
    memcpy(&run, &sym, sizeof run);
    apexx_trt_plugin_request q;
    memset(&q, 0, sizeof q);
    q.size = sizeof q;
    q.batch = o->scan_batch;
    q.steps = o->steps;
    q.channels = o->scan_channels;
    q.warmup = o->warmup;
    q.iters = o->iters;
    q.seed = o->seed;
    apexx_trt_engine_result res;
    int rc = run(&q, &res);
    row = trt_result_row(rs, rc, &res, "plugin_library", o->trt_plugin_lib, "tokens_per_s",
                         (double)o->scan_batch * (double)o->steps * (double)o->scan_channels, &ran);
  }
  return trt_only_entry(rs, e, c, row, ran);
}

cJSON *runner_run_trt_engine(run_state *rs, const entry_def *e, const bench_case *c) {
  const char *path = rs->opts->trt_engine_path;
  char reason[1200];
  struct stat st;
  if (!path) {
    snprintf(reason, sizeof reason, "missing_trt_engine_path");
  } else if (stat(path, &st) != 0) {
    char abs[1024];
    if (path[0] == '/' || !getcwd(abs, sizeof abs)) {
      snprintf(reason, sizeof reason, "engine_not_found:%s", path);
    } else {
      snprintf(reason, sizeof reason, "engine_not_found:%s/%s", abs, path);
    }
  } else {
    return run_trt_engine_file(rs, e, c, path);
  }
  cJSON *ej = runner_run_all_skipped(rs, e, c, reason);
  /* only the trt backend runs engines: other rows would say nothing */
  cJSON *rows = cJSON_GetObjectItemCaseSensitive(ej, "rows");
  for (int i = 0; i < rs->backend_count; i++) {
    if (strcmp(rs->backends[i].name, "trt") != 0) {
      cJSON_DeleteItemFromObjectCaseSensitive(rows, rs->backends[i].name);
    }
  }
  if (runner_find_backend(rs, "trt") < 0) {
    cJSON_AddItemToObject(rows, "trt",
                          runner_row_skipped("not_configured: no [backend trt] section"));
  }
  return ej;
}
