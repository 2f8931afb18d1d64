/* SPDX-License-Identifier: Apache-2.0 */
/* The Markdown summary, rendered from the JSON report so the two never
 * disagree: a header, the backends, then one table per section with an
 * entry per line and the backends as columns. A skipped or failed cell
 * shows its reason. Numbers: ms with 4 decimals, rates with 4 significant
 * digits, null as n/a (the reference's habits, docs/report.md, Markdown summary). */
#include "bench.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Table cells: '|' would end the cell and a newline the row. */
static void sb_cell_text(bench_text *sb, const char *s) {
  for (const char *p = s ? s : ""; *p; p++) {
    if (*p == '|') {
      bench_text_append(sb, "\\|");
    } else if (*p == '\n' || *p == '\r') {
      bench_text_append(sb, " ");
    } else {
      bench_text_append(sb, "%c", *p);
    }
  }
}

static const cJSON *get(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static const char *str(const cJSON *obj, const char *key, const char *dflt) {
  const cJSON *v = get(obj, key);
  return cJSON_IsString(v) ? v->valuestring : dflt;
}

static void fmt_number(char *buf, size_t size, const cJSON *v, const char *fmt) {
  if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
    snprintf(buf, size, fmt, v->valuedouble);
  } else {
    snprintf(buf, size, "n/a");
  }
}

static const char *section_title(const char *name) {
  if (strcmp(name, "tile_ops") == 0) return "Tile Ops";
  if (strcmp(name, "tilessm") == 0) return "TileSSM";
  if (strcmp(name, "indexing") == 0) return "Indexing";
  if (strcmp(name, "end_to_end_infer") == 0) return "End-to-End Infer";
  if (strcmp(name, "tensorrt") == 0) return "TensorRT";
  if (strcmp(name, "reference") == 0) return "Reference (copy bandwidth)";
  return name;
}

static void header(bench_text *sb, const cJSON *report) {
  const cJSON *producer = get(report, "producer");
  const cJSON *env = get(report, "environment");
  const cJSON *config = get(report, "config");
  bench_text_append(sb, "# apexx benchmark report\n\n");
  bench_text_append(sb, "- status: `%s`\n", str(report, "status", "n/a"));
  bench_text_append(sb, "- timestamp_utc: `%s`\n", str(report, "timestamp_utc", "n/a"));
  bench_text_append(sb, "- producer: `%s %s` (git `%s`, libapexx `%s`)\n",
                    str(producer, "name", "?"), str(producer, "version", "?"),
                    str(producer, "git_sha", "n/a"), str(env, "library_version", "?"));
  char cores[32];
  fmt_number(cores, sizeof cores, get(env, "cpu_cores"), "%.0f");
  bench_text_append(sb, "- host: `%s` (%s)\n", str(env, "host", "?"), str(env, "os", "?"));
  bench_text_append(sb, "- cpu: `%s`, %s cores\n", str(env, "cpu_model", "?"), cores);
  const cJSON *gpu = get(env, "gpu");
  if (cJSON_IsObject(gpu)) {
    bench_text_append(sb, "- gpu: `%s`, cc %s, driver %s, runtime %s\n", str(gpu, "name", "?"),
                      str(gpu, "compute_capability", "?"), str(gpu, "driver_version", "?"),
                      str(gpu, "runtime_version", "?"));
  } else {
    bench_text_append(sb, "- gpu: none (%s)\n", str(env, "gpu_reason", "n/a"));
  }
  bench_text_append(sb, "- requested_dtype: `%s`, effective_dtype: `%s`\n",
                    str(env, "requested_dtype", "?"), str(env, "effective_dtype", "?"));
  if (cJSON_IsTrue(get(env, "fp8_requested"))) {
    bench_text_append(sb, "- fp8: `fallback` reason=`%s`\n", str(env, "fp8_fallback_reason", "?"));
  }
  static const char *const fields[] = {"batch", "channels", "height", "width",
                                       "tile_size", "kmax", "steps", "budget_b1",
                                       "budget_b2", "budget_total", "seed",
                                       "warmup", "iters"};
  bench_text_append(sb, "- profile: `%s`", str(config, "profile", "default"));
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    char v[64];
    fmt_number(v, sizeof v, get(config, fields[i]), "%.10g");
    bench_text_append(sb, "%s %s=%s", i ? "," : "", fields[i], v);
  }
  /* schema 1.2: the scan and indexing shapes, graph replay */
  if (get(config, "scan_channels")) {
    static const char *const shapes[] = {"scan_batch", "scan_channels", "index_src_rows",
                                         "index_width", "index_rows"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      char v[64];
      fmt_number(v, sizeof v, get(config, shapes[i]), "%.10g");
      bench_text_append(sb, ", %s=%s", shapes[i], v);
    }
    bench_text_append(sb, ", graph_replay=%s",
                      cJSON_IsTrue(get(config, "graph_replay")) ? "on" : "off");
  }
  bench_text_append(sb, "\n");
  const cJSON *files = get(env, "config_files");
  bench_text_append(sb, "- config files:");
  int any = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, files) {
    if (cJSON_IsString(f))
      bench_text_append(sb, " `%s`", f->valuestring), any = 1;
  }
  bench_text_append(sb, "%s\n", any ? "" : " (built-in default)");
  const cJSON *overrides = get(env, "overrides");
  if (cJSON_GetArraySize(overrides) > 0) {
    bench_text_append(sb, "- overrides:");
    cJSON_ArrayForEach(f, overrides) {
      bench_text_append(sb, " `%s=%s`", f->string, cJSON_IsString(f) ? f->valuestring : "");
    }
    bench_text_append(sb, "\n");
  }
}

static void backends_table(bench_text *sb, const cJSON *report) {
  bench_text_append(sb, "\n## Backends\n\n");
  bench_text_append(sb, "| backend | state | version | device | library | reason |\n");
  bench_text_append(sb, "| --- | --- | --- | --- | --- | --- |\n");
  const cJSON *b;
  cJSON_ArrayForEach(b, get(report, "backends")) {
    bench_text_append(sb, "| %s | %s | %s | %s | ", str(b, "name", "?"), str(b, "state", "?"),
                      str(b, "version", ""), str(b, "device", ""));
    sb_cell_text(sb, str(b, "library", ""));
    bench_text_append(sb, " | ");
    sb_cell_text(sb, str(b, "reason", ""));
    bench_text_append(sb, " |\n");
  }
}

/* Column order: the report's backends, then any other row name. */
static int collect_columns(const cJSON *report, const cJSON *section,
                           const char **cols, int max) {
  int n = 0;
  const cJSON *b, *entry, *row;
  cJSON_ArrayForEach(b, get(report, "backends")) {
    const char *name = str(b, "name", NULL);
    if (!name || n == max) continue;
    int used = 0;
    cJSON_ArrayForEach(entry, section) {
      if (get(get(entry, "rows"), name)) used = 1;
    }
    if (used) cols[n++] = name;
  }
  cJSON_ArrayForEach(entry, section) {
    cJSON_ArrayForEach(row, get(entry, "rows")) {
      int seen = 0;
      for (int i = 0; i < n; i++) seen |= strcmp(cols[i], row->string) == 0;
      if (!seen && n < max) cols[n++] = row->string;
    }
  }
  return n;
}

static void row_cell(bench_text *sb, const cJSON *entry, const cJSON *row, const char *backend) {
  if (!row) {
    bench_text_append(sb, "n/a");
    return;
  }
  const char *status = str(row, "status", "?");
  if (strcmp(status, "ok") != 0) {
    bench_text_append(sb, "%s: ", strcmp(status, "failed") == 0 ? "**FAILED**" : status);
    sb_cell_text(sb, str(row, "reason", "no reason"));
    return;
  }
  char p50[32], p95[32], rate[32], gbs[32];
  fmt_number(p50, sizeof p50, get(row, "p50_ms"), "%.4f");
  fmt_number(p95, sizeof p95, get(row, "p95_ms"), "%.4f");
  fmt_number(gbs, sizeof gbs, get(row, "gb_per_s"), "%.4g");
  const char *rate_key = str(get(entry, "work"), "throughput", "");
  fmt_number(rate, sizeof rate, get(row, rate_key), "%.4g");
  char unit[32];
  snprintf(unit, sizeof unit, "%.*s/s", (int)strcspn(rate_key, "_"), rate_key);
  bench_text_append(sb, "p50 %s ms, p95 %s ms, %s %s, %s GB/s", p50, p95, rate, unit, gbs);
  const cJSON *share = get(row, "pct_of_copy");
  if (cJSON_IsNumber(share))
    bench_text_append(sb, " (%.1f%% of copy)", share->valuedouble);
  if (strcmp(str(row, "timer", ""), "graph_replay") == 0)
    bench_text_append(sb, ", graph replay");
  const cJSON *mem = get(row, "peak_memory_mb");
  if (cJSON_IsNumber(mem))
    bench_text_append(sb, ", peak %.2f MB", mem->valuedouble);
  const cJSON *l0 = get(row, "selected_l0_per_call");
  if (cJSON_IsNumber(l0)) {
    /* the end-to-end path: its routing and arithmetic rate */
    char l1[32], b1[40], b2[40], tflops[32];
    fmt_number(l1, sizeof l1, get(row, "selected_l1_per_call"), "%.0f");
    fmt_number(b1, sizeof b1, get(row, "budget_b1_spent"), "%.17g");
    fmt_number(b2, sizeof b2, get(row, "budget_b2_spent"), "%.17g");
    fmt_number(tflops, sizeof tflops, get(row, "tflop_per_s"), "%.3g");
    bench_text_append(sb, ", tiles L0 %.0f / L1 %s, b1 spent %s, b2 spent %s, %s TFLOP/s",
                      l0->valuedouble, l1, b1, b2, tflops);
  }
  const cJSON *parity = get(row, "parity");
  if (cJSON_IsObject(parity)) {
    char abs_err[32];
    fmt_number(abs_err, sizeof abs_err, get(parity, "max_abs_err"), "%.3g");
    bench_text_append(sb, ", parity %s (max abs %s)",
                      cJSON_IsTrue(get(parity, "ok")) ? "ok" : "BROKEN", abs_err);
  } else {
    bench_text_append(sb, ", parity n/a");
  }
  const cJSON *speedup = get(get(entry, "speedup_vs_cpu"), backend);
  if (cJSON_IsNumber(speedup))
    bench_text_append(sb, ", x%.2f vs cpu", speedup->valuedouble);
}

static void dispatch_cell(bench_text *sb, const cJSON *entry) {
  const cJSON *d = get(entry, "dispatch");
  const char *backend = str(d, "backend", NULL);
  bench_text_append(sb, "%s", backend ? backend : "none");
  const cJSON *p;
  int first = 1;
  cJSON_ArrayForEach(p, get(d, "passed_over")) {
    bench_text_append(sb, "%s%s (%s)", first ? "; passed over " : ", ", str(p, "backend", "?"),
                      str(p, "code", "?"));
    first = 0;
  }
  if (!backend && str(d, "reason", NULL)) {
    bench_text_append(sb, ": ");
    sb_cell_text(sb, str(d, "reason", ""));
  }
}

static void section_table(bench_text *sb, const cJSON *report, const cJSON *section) {
  const char *cols[APX_MAX_BACKENDS + 8];
  int ncols = collect_columns(report, section, cols,
                              (int)(sizeof cols / sizeof cols[0]));
  bench_text_append(sb, "\n## %s\n\n| entry | dispatch |", section_title(section->string));
  for (int i = 0; i < ncols; i++)
    bench_text_append(sb, " %s |", cols[i]);
  bench_text_append(sb, "\n| --- | --- |");
  for (int i = 0; i < ncols; i++)
    bench_text_append(sb, " --- |");
  bench_text_append(sb, "\n");
  const cJSON *entry;
  cJSON_ArrayForEach(entry, section) {
    bench_text_append(sb, "| %s | ", entry->string);
    dispatch_cell(sb, entry);
    bench_text_append(sb, " |");
    for (int i = 0; i < ncols; i++) {
      bench_text_append(sb, " ");
      row_cell(sb, entry, get(get(entry, "rows"), cols[i]), cols[i]);
      bench_text_append(sb, " |");
    }
    bench_text_append(sb, "\n");
  }
}

char *bench_render_markdown(const cJSON *report) {
  bench_text sb = {NULL, 0, 0, 0};
  header(&sb, report);
  backends_table(&sb, report);
  const cJSON *section;
  cJSON_ArrayForEach(section, get(report, "benchmarks")) {
    section_table(&sb, report, section);
  }
  bench_text_append(&sb, "\nTimes are the backend's own timer per call (p50 median, p95 = "
                         "sorted[floor(0.95*(n-1))]; \"graph replay\": a replay of 20 captured "
                         "calls, divided by 20). %% of copy is the row's GB/s over the same "
                         "backend's reference copy in this run. Parity is against the cpu "
                         "backend: copy ops bit-exact, ff_infer |err| <= 4*(atol + rtol*|ref|) "
                         "+ 4 ulp, others |err| <= 2*(atol + rtol*|ref|).\n");
  if (sb.failed) {
    free(sb.data);
    return NULL;
  }
  return sb.data;
}
