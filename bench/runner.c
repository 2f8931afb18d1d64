/* SPDX-License-Identifier: Apache-2.0 */
/* The suite: every selected entry (an op with one setting of its mode) on
 * every configured backend. Per entry: generate the inputs on the host once
 * (seeded, inputs.c), record the default dispatch (apx_explain), run the cpu
 * backend once untimed as the parity reference, then per backend: copy the
 * inputs to its device, warm up, time `iters` calls with the backend's
 * timer, take the statistics, peak memory, and compare the output with the
 * cpu reference. Sizes, seeds and work counts are documented in
 * apexx-bench(1). */
#include "runner.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int runner_backend_selected(const run_state *rs, const char *name) {
  if (rs->opts->backend_count == 0)
    return 1;
  for (int i = 0; i < rs->opts->backend_count; i++) {
    if (strcmp(rs->opts->backends[i], name) == 0)
      return 1;
  }
  return 0;
}

void runner_progress(const run_state *rs, const entry_def *e, const char *backend, int i, int n) {
  if (rs->progress == PROGRESS_NONE)
    return;
  /* off a terminal (a CI log) no carriage returns: a line as each row
   * starts, so that a log cut short names the row it stopped in */
  if (rs->progress == PROGRESS_LINES) {
    if (i == 1) {
      fprintf(stderr, "[apexx-bench] %s.%s %s: %d calls\n", e->section, e->name, backend, n);
      fflush(stderr);
    }
    return;
  }
  fprintf(stderr, "\r\033[K[apexx-bench] %s.%s %s %d/%d", e->section, e->name, backend, i, n);
  if (i == n)
    fputc('\n', stderr);
  fflush(stderr);
}

cJSON *runner_row_skipped(const char *fmt, ...) {
  cJSON *row = cJSON_CreateObject();
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  cJSON_AddStringToObject(row, "status", "skipped");
  cJSON_AddStringToObject(row, "reason", reason);
  return row;
}

cJSON *runner_row_failed(run_state *rs, const char *fmt, ...) {
  cJSON *row = cJSON_CreateObject();
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  cJSON_AddStringToObject(row, "status", "failed");
  cJSON_AddStringToObject(row, "reason", reason);
  rs->any_failed = 1;
  return row;
}

const char *runner_backend_unusable_reason(const struct apx_backend_info *b, char *buf,
                                           size_t size) {
  snprintf(buf, size, "%s: %s", apx_backend_state_name(b->state),
           b->reason && *b->reason ? b->reason : "no reason given");
  return buf;
}

/* The pass-over sentence for `backend` in an explanation, else the error. */
const char *runner_passed_over_reason(const apx_explanation *ex, const char *backend) {
  for (int i = 0; i < ex->passed_over_count; i++) {
    if (ex->passed_over[i].backend && strcmp(ex->passed_over[i].backend, backend) == 0) {
      return ex->passed_over[i].reason;
    }
  }
  return apx_last_error();
}

cJSON *runner_explanation_json(apx_context *ctx, const entry_def *e, const bench_case *c,
                               const apx_tensor *ts, const char *tensors_on) {
  if (e->kind == KIND_COPY) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "tensors", tensors_on);
    cJSON_AddNullToObject(d, "backend");
    cJSON_AddStringToObject(d, "reason",
                            "not dispatched: apx_tensor_copy goes to the backend serving the "
                            "tensors' device");
    cJSON_AddArrayToObject(d, "passed_over");
    return d;
  }
  apx_explanation ex;
  memset(&ex, 0, sizeof ex);
  apx_status st = runner_invoke(ctx, e, c, ts, NULL, &ex);
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "tensors", tensors_on);
  if (st != APX_OK && st != APX_ERR_UNSUPPORTED) {
    cJSON_AddNullToObject(d, "backend");
    cJSON_AddStringToObject(d, "error", apx_last_error());
    cJSON_AddArrayToObject(d, "passed_over");
    return d;
  }
  bench_json_string_or_null(d, "backend", ex.backend);
  if (!ex.backend) {
    cJSON_AddStringToObject(d, "reason", "no backend can run this call");
  }
  cJSON *list = cJSON_AddArrayToObject(d, "passed_over");
  for (int i = 0; i < ex.passed_over_count && i < APX_MAX_BACKENDS; i++) {
    cJSON *p = cJSON_CreateObject();
    bench_json_string_or_null(p, "backend", ex.passed_over[i].backend);
    const char *code = apx_pass_over_name(ex.passed_over[i].code);
    cJSON_AddStringToObject(p, "code", code ? code : "unknown");
    bench_json_string_or_null(p, "reason", ex.passed_over[i].reason);
    cJSON_AddItemToArray(list, p);
  }
  return d;
}

/* An entry whose every row is skipped for one reason. */
cJSON *runner_run_all_skipped(run_state *rs, const entry_def *e, const bench_case *c,
                              const char *reason) {
  cJSON *ej = cJSON_CreateObject();
  cJSON_AddStringToObject(ej, "mode", runner_entry_mode(e, rs->opts));
  if (e->op == APX_OP_FF_INFER)
    cJSON_AddNumberToObject(ej, "batch", (double)runner_entry_batch(e, rs->opts));
  cJSON *d = cJSON_AddObjectToObject(ej, "dispatch");
  cJSON_AddNullToObject(d, "backend");
  cJSON_AddStringToObject(d, "reason", reason);
  cJSON_AddArrayToObject(d, "passed_over");
  cJSON_AddItemToObject(ej, "work", runner_work_json(e, c));
  cJSON *rows = cJSON_AddObjectToObject(ej, "rows");
  for (int i = 0; i < rs->backend_count; i++) {
    cJSON_AddItemToObject(rows, rs->backends[i].name, runner_row_skipped("%s", reason));
  }
  cJSON_AddObjectToObject(ej, "speedup_vs_cpu");
  return ej;
}

int runner_find_backend(const run_state *rs, const char *name) {
  for (int i = 0; i < rs->backend_count; i++) {
    if (strcmp(rs->backends[i].name, name) == 0)
      return i;
  }
  return -1;
}

/* Run one op entry on every backend. Returns NULL when the run aborts. */
static cJSON *run_entry(run_state *rs, const entry_def *e) {
  apx_context *ctx = rs->ctx;
  bench_case c;
  char err[1024];
  if (runner_describe_case(e, rs->opts, &c, err, sizeof err) != 0) {
    snprintf(rs->err, rs->err_size, "%s", err);
    return NULL;
  }
  if (e->kind == KIND_TRT_ENGINE)
    return runner_run_trt_engine(rs, e, &c);
  if (e->op == APX_OP_FF_INFER) {
    const bench_options *o = rs->opts;
    if (o->height % 16 || o->width % 16 || o->kmax > (o->height / 16) * (o->width / 16))
      return runner_run_all_skipped(rs, e, &c,
                                    "profile: the end-to-end path needs height and width "
                                    "divisible by 16 (tile_l0) and kmax <= (H/16)*(W/16)");
    /* the fixed-batch entries: the profile's bound on a map (--batch's) */
    const double dense = (double)runner_entry_batch(e, o) * (double)o->channels *
                         (double)o->height * (double)o->width;
    if (dense > (double)(INT64_C(1) << 31)) {
      char why[256];
      snprintf(why, sizeof why,
               "profile: batch %lld makes batch*channels*height*width = %.0f exceed 2^31 "
               "elements",
               (long long)runner_entry_batch(e, o), dense);
      return runner_run_all_skipped(rs, e, &c, why);
    }
  }

  /* tensorrt.tilessm_plugin: only the trt backend, and only with a plugin
   * library, which is loaded before the backend's state is asked (loading
   * it needs neither TensorRT nor a device: a file that is no library is
   * cdll_load_failed wherever the row runs) */
  const char *trt_skip = NULL;
  char trt_reason[1024];
  if (e->kind == KIND_TRT_PLUGIN) {
    int trt = runner_find_backend(rs, "trt");
    void *plugin = NULL;
    if (!rs->opts->trt_plugin_lib) {
      trt_skip = "missing_plugin_library";
    } else if (trt < 0) {
      trt_skip = "not_configured: no [backend trt] section";
    } else if (access(rs->opts->trt_plugin_lib, R_OK) != 0) {
      trt_skip = "missing_plugin_library";
    } else if (apx_library_open(rs->ctx, rs->opts->trt_plugin_lib, &plugin) != APX_OK) {
      snprintf(trt_reason, sizeof trt_reason, "cdll_load_failed:%s", apx_last_error());
      trt_skip = trt_reason;
    } else if (rs->backends[trt].state != APX_BACKEND_OK) {
      trt_skip = runner_backend_unusable_reason(&rs->backends[trt], trt_reason, sizeof trt_reason);
    } else if (!runner_backend_selected(rs, "trt")) {
      trt_skip = "not_selected: excluded by --backends";
    }
    if (trt_skip) {
      cJSON *ej = runner_run_all_skipped(rs, e, &c, trt_skip);
      cJSON *rows = cJSON_GetObjectItemCaseSensitive(ej, "rows");
      for (int i = 0; i < rs->backend_count; i++) {
        if (strcmp(rs->backends[i].name, "trt") != 0) {
          cJSON_DeleteItemFromObjectCaseSensitive(rows, rs->backends[i].name);
        }
      }
      if (trt < 0)
        cJSON_AddItemToObject(rows, "trt", runner_row_skipped("%s", trt_skip));
      return ej;
    }
    return runner_run_trt_plugin(rs, e, &c, plugin);
  }

  cJSON *ej = cJSON_CreateObject();
  if (e->kind != KIND_COPY)
    cJSON_AddStringToObject(ej, "op", apx_op_name(e->op));
  cJSON_AddStringToObject(ej, "mode", runner_entry_mode(e, rs->opts));
  if (e->op == APX_OP_FF_INFER)
    cJSON_AddNumberToObject(ej, "batch", (double)runner_entry_batch(e, rs->opts));
  if (runner_generate_case(ctx, rs->opts, e, &c, err, sizeof err) != 0) {
    runner_free_case(ctx, &c);
    cJSON_Delete(ej);
    snprintf(rs->err, rs->err_size, "%s", err);
    return NULL;
  }
  cJSON_AddItemToObject(ej, "tensors", runner_tensors_json(&c));
  cJSON_AddItemToObject(ej, "work", runner_work_json(e, &c));
  apx_tensor ts[MAX_TENSORS];
  for (int i = 0; i < c.count; i++)
    ts[i] = c.t[i].host;
  cJSON_AddItemToObject(ej, "dispatch", runner_explanation_json(ctx, e, &c, ts, "host"));

  apx_tensor reference[MAX_TENSORS];
  memset(reference, 0, sizeof reference);
  char ref_reason[1024] = "";
  int have_ref = 0;
  if (rs->opts->parity) {
    have_ref = runner_cpu_reference(rs, e, &c, reference, ref_reason, sizeof ref_reason) == 0;
  } else {
    snprintf(ref_reason, sizeof ref_reason, "--parity off: no cpu reference computed");
  }

  cJSON *rows = cJSON_AddObjectToObject(ej, "rows");
  double p50[APX_MAX_BACKENDS];
  for (int i = 0; i < rs->backend_count; i++) {
    const struct apx_backend_info *b = &rs->backends[i];
    p50[i] = NAN;
    if (e->kind == KIND_TRT_PLUGIN && strcmp(b->name, "trt") != 0)
      continue;
    cJSON *row;
    char buf[1024];
    if (!runner_backend_selected(rs, b->name)) {
      row = runner_row_skipped("not_selected: excluded by --backends");
    } else if (b->state != APX_BACKEND_OK) {
      row = runner_row_skipped("%s", runner_backend_unusable_reason(b, buf, sizeof buf));
    } else if (runner_entry_replays(e) && b->device == APX_DEVICE_HOST) {
      /* the eager entry: the name without "_graph" */
      const char *graph = strstr(e->name, "_graph");
      const int head = graph ? (int)(graph - e->name) : (int)strlen(e->name);
      row = runner_row_skipped("not_applicable: graph replay replays CUDA graphs; the "
                               "%s backend runs every call eagerly (the %.*s%s row)",
                               b->name, head, e->name, graph ? graph + 6 : "");
    } else {
      row = runner_measure_row(rs, e, &c, b, have_ref ? reference : NULL, ref_reason, ej, &p50[i]);
      if (!row) {
        if (have_ref)
          runner_free_reference(ctx, &c, reference);
        runner_free_case(ctx, &c);
        cJSON_Delete(ej);
        return NULL;
      }
    }
    /* an unwritten cpu output fails the cpu row, whose own parity (against
     * itself) could not see it */
    if (i == rs->cpu_index && !have_ref && strncmp(ref_reason, "cpu reference unusable", 22) == 0 &&
        strcmp(cJSON_GetObjectItemCaseSensitive(row, "status")->valuestring, "ok") == 0) {
      cJSON_ReplaceItemInObjectCaseSensitive(row, "status", cJSON_CreateString("failed"));
      cJSON_ReplaceItemInObjectCaseSensitive(row, "reason", cJSON_CreateString(ref_reason));
      p50[i] = NAN;
      rs->any_failed = 1;
    }
    cJSON_AddItemToObject(rows, b->name, row);
  }
  /* speedup over the cpu row: cpu p50 / backend p50 */
  cJSON *speedup = cJSON_AddObjectToObject(ej, "speedup_vs_cpu");
  if (rs->cpu_index >= 0 && isfinite(p50[rs->cpu_index])) {
    for (int i = 0; i < rs->backend_count; i++) {
      if (i == rs->cpu_index || !isfinite(p50[i]) || p50[i] <= 0)
        continue;
      cJSON_AddNumberToObject(speedup, rs->backends[i].name, p50[rs->cpu_index] / p50[i]);
    }
  }
  if (have_ref)
    runner_free_reference(ctx, &c, reference);
  runner_free_case(ctx, &c);
  return ej;
}

int bench_run(apx_context *ctx, const bench_options *opts, cJSON *report, char *err,
              size_t err_size) {
  run_state rs;
  memset(&rs, 0, sizeof rs);
  rs.ctx = ctx;
  rs.opts = opts;
  rs.err = err;
  rs.err_size = err_size;
  rs.cpu_index = -1;
  rs.fail_after = -1;
  const char *fail_after = getenv("APEXX_BENCH_FAIL_AFTER");
  if (fail_after && *fail_after) {
    char *end = NULL;
    long v = strtol(fail_after, &end, 10);
    if (*end != '\0' || v < 0) {
      snprintf(err, err_size, "APEXX_BENCH_FAIL_AFTER: [%s] is not an integer >= 0", fail_after);
      return 1;
    }
    rs.fail_after = v;
  }
  int shown = opts->progress >= 0 ? opts->progress : !opts->quiet && isatty(STDERR_FILENO);
  rs.progress = !shown ? PROGRESS_NONE : isatty(STDERR_FILENO) ? PROGRESS_TERMINAL : PROGRESS_LINES;
  rs.backend_count = apx_backend_count(ctx);
  if (rs.backend_count > APX_MAX_BACKENDS)
    rs.backend_count = APX_MAX_BACKENDS;
  for (int i = 0; i < rs.backend_count; i++) {
    if (apx_backend_info(ctx, i, &rs.backends[i]) != APX_OK) {
      snprintf(err, err_size, "backend %d: %s", i, apx_last_error());
      return 1;
    }
    if (strcmp(rs.backends[i].name, "cpu") == 0)
      rs.cpu_index = i;
  }

  int want_ff = 0;
  for (int i = 0; i < E_COUNT; i++)
    want_ff |=
        runner_entries[i].op == APX_OP_FF_INFER && runner_entry_selected(opts, &runner_entries[i]);
  runner_ff_weights = NULL;
  if (want_ff) {
    apx_status st =
        opts->ff_weights_path
            ? apx_ff_weights_load(ctx, opts->ff_weights_path, &runner_ff_weights)
            : apx_ff_weights_seeded(ctx, opts->channels, opts->seed, &runner_ff_weights);
    if (st != APX_OK) {
      snprintf(err, err_size, "--ff-weights: %s", apx_last_error());
      return 1;
    }
    if (apx_ff_weights_channels(runner_ff_weights) != opts->channels) {
      snprintf(err, err_size, "--ff-weights: [%s] holds %lld channels, the profile has %lld",
               opts->ff_weights_path ? opts->ff_weights_path : "seeded",
               (long long)apx_ff_weights_channels(runner_ff_weights), (long long)opts->channels);
      apx_ff_weights_free(ctx, runner_ff_weights);
      runner_ff_weights = NULL;
      return 1;
    }
  }

  cJSON *benchmarks = cJSON_CreateObject();
  for (int s = 0; s < runner_section_count; s++) {
    cJSON *section = NULL;
    for (int i = 0; i < E_COUNT; i++) {
      const entry_def *e = &runner_entries[i];
      if (strcmp(e->section, runner_sections[s]) != 0 || !runner_entry_selected(opts, e))
        continue;
      if (!section)
        section = cJSON_AddObjectToObject(benchmarks, runner_sections[s]);
      cJSON *ej = run_entry(&rs, e);
      if (!ej) {
        cJSON_Delete(benchmarks);
        apx_ff_weights_free(ctx, runner_ff_weights);
        runner_ff_weights = NULL;
        return 1;
      }
      cJSON_AddItemToObject(section, e->name, ej);
    }
  }
  apx_ff_weights_free(ctx, runner_ff_weights);
  runner_ff_weights = NULL;
  cJSON_AddStringToObject(report, "status", rs.any_failed ? "failed" : "ok");
  cJSON_AddItemToObject(report, "benchmarks", benchmarks);
  return rs.any_failed ? 2 : 0;
}
