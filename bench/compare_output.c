/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare's outputs (docs/report.md, Compare): the Markdown
 * table, the JSON summary (suite apexx-compare), and --emit-baseline's
 * baseline file. */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- output ---------------------------------------------------------------- */
/* The name a check is shown under: its path, except that a row's time
 * compared by its floor (--statistic min) reads floor_ms, not the p50_ms
 * the path names. */
void cmp_display_path(const check *c, char *buf, size_t size) {
  size_t len = strlen(c->path);
  if (c->kind == KIND_TIME && strcmp(cmp_rep_key, "mins_ms") == 0 &&
      cmp_ends_with(c->path, ".p50_ms")) {
    snprintf(buf, size, "%.*s.floor_ms", (int)(len - strlen(".p50_ms")), c->path);
  } else {
    snprintf(buf, size, "%s", c->path);
  }
}

/* "[1.02x, 1.31x]" or "-" */
static void format_interval(char *buf, size_t size, const check *c) {
  if (!c->interval_rule || !(c->iv.coverage > 0)) {
    snprintf(buf, size, "-");
  } else {
    snprintf(buf, size, "[%.3gx, %.3gx]", c->iv.lo, c->iv.hi);
  }
}

/* "tile_ops.tilepack / cpu / p50_ms" from a metric path. */
static void short_name(const char *path, char *buf, size_t size) {
  const char *p = strncmp(path, "benchmarks.", 11) == 0 ? path + 11 : path;
  const char *rows = strstr(p, ".rows.");
  if (!rows) {
    snprintf(buf, size, "%s", p);
    return;
  }
  const char *backend = rows + 6;
  size_t blen = strcspn(backend, ".");
  const char *metric = backend[blen] ? backend + blen + 1 : "row";
  snprintf(buf, size, "%.*s / %.*s / %s", (int)(rows - p), p, (int)blen, backend, metric);
}

static void format_value(char *buf, size_t size, double v, metric_kind k) {
  if (!isfinite(v)) {
    snprintf(buf, size, "-");
  } else if (k == KIND_TIME) {
    if (v < 1.0) {
      snprintf(buf, size, "%.4g us", v * 1e3);
    } else {
      snprintf(buf, size, "%.4g ms", v);
    }
  } else {
    snprintf(buf, size, "%.4g", v);
  }
}

double cmp_change_of(const check *c) {
  return (isfinite(c->cur.value) && isfinite(c->base.value) && c->base.value > 0)
             ? c->cur.value / c->base.value - 1.0
             : NAN;
}

static const char *verdict_label(const char *v) { return v; }

char *cmp_render_markdown(const doc *base, const doc *cur, const check_list *l, const outcome *o,
                          const rule *ru, int failed) {
  bench_text md = {NULL, 0, 0, 0};
#define EMIT(...) bench_text_append(&md, __VA_ARGS__)
  EMIT("# apexx-bench compare\n\n");
  EMIT("- verdict: **%s** (%d regressed, %d improved, %d unchanged, %d inconclusive, "
       "%d missing, %d failed)\n",
       failed            ? "fail"
       : o->inconclusive ? "inconclusive"
                         : "pass",
       o->regressed, o->improved, o->unchanged, o->inconclusive, o->missing, o->failed);
  EMIT("- baseline: `%s`\n- current: `%s`\n", base->path, cur->path);
  EMIT("- status: `%s` (required `%s`)\n", o->current_status ? o->current_status : "n/a",
       o->required);
  if (strcmp(cmp_rep_key, "mins_ms") == 0) {
    EMIT("- rule: times are floors (floor_ms: a time's fastest repetition); the "
         "interval is the floors' ratio give or take both floors' reach (the gap "
         "from the fastest to the %d%s fastest repetition); regressed when the "
         "ratio is at least %g (x %g + %g ms) and the interval lies above 1, "
         "unchanged when the interval lies inside the threshold, else "
         "inconclusive\n",
         FLOOR_REACH, FLOOR_REACH == 3 ? "rd" : "th", 1.0 + ru->max_ratio, 1.0 + ru->max_ratio,
         ru->max_abs_ms);
  } else {
    EMIT("- rule: the ratio of the per-repetition medians (Hodges-Lehmann) with "
         "its %g%% Mann-Whitney interval; regressed when the ratio is at least "
         "%g (x %g + %g ms) and the interval lies above 1, unchanged when the "
         "interval lies inside the threshold, else inconclusive\n",
         100.0 * (1.0 - ru->alpha), 1.0 + ru->max_ratio, 1.0 + ru->max_ratio, ru->max_abs_ms);
  }
  if (ru->scale != 1.0) {
    EMIT("- relative: the suite runs %.3gx the baseline's times here (median over "
         "the rows); each row is judged against its baseline time x %.3g, and "
         "change shows the raw ratio (relative change in parentheses)\n",
         ru->scale, ru->scale);
  }
  for (int i = 0; i < o->stale.count; i++) {
    EMIT("- **stale baseline**: %s\n", o->stale.items[i]);
  }
  for (int i = 0; i < o->mismatch.count; i++) {
    EMIT("- mismatch (allowed): %s\n", o->mismatch.items[i]);
  }
  EMIT("\n| metric | baseline | current | change | interval | verdict | p-value / noise band |\n");
  EMIT("| --- | ---: | ---: | ---: | --- | --- | --- |\n");
  for (int i = 0; i < l->count; i++) {
    const check *c = &l->items[i];
    char name[1100], bv[64], cv[64], ch[32] = "-", pv[96] = "-", shown[1024], iv[64];
    cmp_display_path(c, shown, sizeof shown);
    short_name(shown, name, sizeof name);
    format_interval(iv, sizeof iv, c);
    format_value(bv, sizeof bv, c->base.value, c->kind);
    format_value(cv, sizeof cv, c->cur.value, c->kind);
    double change = cmp_change_of(c);
    if (isfinite(change) && c->relative != 1.0) {
      snprintf(ch, sizeof ch, "%+.1f%% (%+.1f%%)", 100.0 * change,
               100.0 * ((change + 1.0) / c->relative - 1.0));
    } else if (isfinite(change)) {
      snprintf(ch, sizeof ch, "%+.1f%%", 100.0 * change);
    }
    if (isfinite(c->p_value) || isfinite(c->band)) {
      char p[32] = "", band[48] = "";
      if (isfinite(c->p_value))
        snprintf(p, sizeof p, "p=%.3g", c->p_value);
      if (isfinite(c->band) && c->base.value > 0) {
        snprintf(band, sizeof band, "%s+/-%.1f%%", *p ? ", " : "", 100.0 * c->band / c->base.value);
      }
      snprintf(pv, sizeof pv, "%s%s", p, band);
    }
    const char *v = verdict_label(c->verdict);
    EMIT("| %s | %s | %s | %s | %s | %s%s%s | %s |\n", name, bv, cv, ch, iv,
         cmp_is_failure(c->verdict) ? "**" : "", v, cmp_is_failure(c->verdict) ? "**" : "", pv);
  }
#undef EMIT
  return bench_text_finish(&md);
}

cJSON *cmp_summary_json(const doc *base, const doc *cur, const check_list *l, const outcome *o,
                        const rule *ru, int failed) {
  cJSON *s = cJSON_CreateObject();
  cJSON *schema = cJSON_AddObjectToObject(s, "schema_version");
  cJSON_AddNumberToObject(schema, "major", BENCH_SCHEMA_MAJOR);
  cJSON_AddNumberToObject(schema, "minor", BENCH_SCHEMA_MINOR);
  cJSON_AddStringToObject(s, "suite", "apexx-compare");
  char stamp[32];
  bench_timestamp_utc(stamp, sizeof stamp);
  cJSON_AddStringToObject(s, "timestamp_utc", stamp);
  cJSON_AddStringToObject(s, "status", failed ? "fail" : o->inconclusive ? "inconclusive" : "pass");
  cJSON_AddStringToObject(s, "baseline_file", base->path);
  cJSON_AddStringToObject(s, "current_file", cur->path);
  cJSON_AddStringToObject(s, "required_status", o->required);
  bench_json_string_or_null(s, "current_status", o->current_status);
  cJSON_AddNumberToObject(s, "max_ratio", ru->max_ratio);
  cJSON_AddNumberToObject(s, "max_abs_ms", ru->max_abs_ms);
  cJSON_AddNumberToObject(s, "alpha", ru->alpha);
  cJSON_AddStringToObject(s, "statistic", strcmp(cmp_rep_key, "mins_ms") == 0 ? "min" : "median");
  cJSON_AddNumberToObject(s, "speed_factor", ru->scale);
  cJSON_AddNumberToObject(s, "total_metrics", l->count);
  cJSON_AddNumberToObject(s, "failed_metrics", failed - (o->status_ok ? 0 : 1));
  cJSON *counts = cJSON_AddObjectToObject(s, "verdicts");
  cJSON_AddNumberToObject(counts, "regressed", o->regressed);
  cJSON_AddNumberToObject(counts, "improved", o->improved);
  cJSON_AddNumberToObject(counts, "unchanged", o->unchanged);
  cJSON_AddNumberToObject(counts, "inconclusive", o->inconclusive);
  cJSON_AddNumberToObject(counts, "missing", o->missing);
  cJSON_AddNumberToObject(counts, "failed", o->failed);
  cJSON_AddNumberToObject(counts, "unconfirmed", o->unconfirmed);
  cJSON *stale = cJSON_AddArrayToObject(s, "stale_baseline");
  for (int i = 0; i < o->stale.count; i++) {
    cJSON_AddItemToArray(stale, cJSON_CreateString(o->stale.items[i]));
  }
  cJSON *mm = cJSON_AddArrayToObject(s, "mismatches");
  for (int i = 0; i < o->mismatch.count; i++) {
    cJSON_AddItemToArray(mm, cJSON_CreateString(o->mismatch.items[i]));
  }
  cJSON *checks = cJSON_AddArrayToObject(s, "checks");
  cJSON *st = cJSON_CreateObject();
  cJSON_AddStringToObject(st, "metric", "__status__");
  cJSON_AddStringToObject(st, "status", o->status_ok ? "pass" : "fail");
  cJSON_AddStringToObject(st, "expected", o->required);
  bench_json_string_or_null(st, "current", o->current_status);
  cJSON_AddItemToArray(checks, st);
  for (int i = 0; i < l->count; i++) {
    const check *c = &l->items[i];
    cJSON *j = cJSON_CreateObject();
    char shown[1024];
    cmp_display_path(c, shown, sizeof shown);
    cJSON_AddStringToObject(j, "metric", shown);
    cJSON_AddStringToObject(j, "path", c->path);
    cJSON_AddStringToObject(j, "kind", cmp_kind_name(c->kind));
    cJSON_AddStringToObject(j, "status", cmp_is_failure(c->verdict) ? "fail" : "pass");
    cJSON_AddStringToObject(j, "verdict", c->verdict);
    if (c->kind != KIND_ROW) {
      bench_json_number(j, "baseline", c->base.value, "no baseline value");
      bench_json_number(j, "allowed", c->allowed, "no current value");
      bench_json_number(j, "current", c->cur.value, "missing from the current report");
      bench_json_number(j, "regression_ratio", cmp_change_of(c),
                        "baseline <= 0 or current missing");
      bench_json_number(j, "p_value", c->p_value,
                        strcmp(cmp_rep_key, "mins_ms") == 0
                            ? "no rank test: --statistic min compares floors"
                            : "fewer than 2 repetitions on a side");
      bench_json_number(j, "noise_band", c->band, "no spread recorded");
      bench_json_number(j, "ratio", c->iv.ratio, "no ratio: a side has no value");
      int has_interval = c->interval_rule && c->iv.coverage > 0;
      bench_json_number(j, "interval_low", has_interval ? c->iv.lo : NAN,
                        "no interval: too few repetitions, or one number a side");
      bench_json_number(j, "interval_high", has_interval ? c->iv.hi : NAN,
                        "no interval: too few repetitions, or one number a side");
      bench_json_string_or_null(j, "interval_rule", has_interval ? c->interval_rule : NULL);
      if (has_interval && strncmp(c->interval_rule, "mann-whitney", 12) == 0)
        cJSON_AddNumberToObject(j, "interval_coverage", c->iv.coverage);
      bench_json_number(j, "threshold", c->threshold, "not judged");
      cJSON_AddNumberToObject(j, "baseline_repetitions", c->base.n);
      cJSON_AddNumberToObject(j, "current_repetitions", c->cur.n);
      cJSON_AddNumberToObject(j, "max_ratio", c->max_ratio);
      if (c->kind == KIND_TIME)
        cJSON_AddNumberToObject(j, "max_abs_ms", c->max_abs_ms);
    }
    cJSON_AddItemToArray(checks, j);
  }
  return s;
}

/* ---- emit-baseline --------------------------------------------------------- */
int cmp_emit_baseline(const char *report_path, const char *out_path, const metric_names *m,
                      double max_ratio, double max_abs_ms) {
  doc d;
  int rc = cmp_load_doc(report_path, &d);
  if (rc != 0) {
    cJSON_Delete(d.json);
    return rc;
  }
  if (d.kind != DOC_REPORT) {
    cJSON_Delete(d.json);
    return cmp_unusable("[%s] is a baseline file; --emit-baseline reads a report", report_path);
  }
  check_list l = {0, 0, NULL};
  if (cmp_checks_from_report(d.json, m, &l) != 0) {
    cJSON_Delete(d.json);
    cmp_free_checks(&l);
    return cmp_unusable("out of memory");
  }
  cJSON *b = cJSON_CreateObject();
  cJSON *schema = cJSON_AddObjectToObject(b, "schema_version");
  cJSON_AddNumberToObject(schema, "major", BENCH_SCHEMA_MAJOR);
  cJSON_AddNumberToObject(schema, "minor", BENCH_SCHEMA_MINOR);
  cJSON_AddStringToObject(b, "kind", BENCH_BASELINE_KIND);
  char stamp[32];
  bench_timestamp_utc(stamp, sizeof stamp);
  cJSON_AddStringToObject(b, "created_utc", stamp);
  cJSON *source = cJSON_AddObjectToObject(b, "source");
  const cJSON *env = cmp_member(d.json, "environment");
  static const char *const report_keys[] = {"timestamp_utc", "producer"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *v = cmp_member(d.json, report_keys[i]);
    if (v)
      cJSON_AddItemToObject(source, report_keys[i], cJSON_Duplicate(v, 1));
  }
  static const char *const env_keys[] = {"host",      "cpu_model",       "cpu_cores",
                                         "memory_mb", "machine_id",      "machine_id_from",
                                         "gpu",       "library_version", "backend_abi_version"};
  for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
    const cJSON *v = cmp_member(env, env_keys[i]);
    if (v)
      cJSON_AddItemToObject(source, env_keys[i], cJSON_Duplicate(v, 1));
  }
  const cJSON *config = cmp_member(d.json, "config");
  if (config)
    cJSON_AddItemToObject(b, "config", cJSON_Duplicate(config, 1));
  cJSON_AddStringToObject(b, "required_status", "ok");
  cJSON *metrics = cJSON_AddArrayToObject(b, "metrics");
  for (int i = 0; i < l.count; i++) {
    const check *c = &l.items[i];
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "path", c->path);
    if (c->kind == KIND_ROW) {
      cJSON_AddNullToObject(item, "value");
      const char *st = cmp_row_status(d.json, c->path);
      cJSON_AddStringToObject(item, "row_status", st ? st : "skipped");
      const cJSON *row = cmp_lookup(d.json, c->path);
      const cJSON *reason = cmp_member(row, "reason");
      if (cJSON_IsString(reason))
        cJSON_AddStringToObject(item, "reason", reason->valuestring);
    } else {
      cJSON_AddNumberToObject(item, "value", c->base.value);
      if (c->base.n > 0) {
        /* both per-repetition statistics, whichever --statistic reads */
        char *row_path = cmp_row_path_of(c->path);
        const cJSON *row = row_path ? cmp_lookup(d.json, row_path) : NULL;
        free(row_path);
        const cJSON *row_reps = cmp_member(row, "repetitions");
        cJSON *reps = cJSON_AddObjectToObject(item, "repetitions");
        cJSON_AddNumberToObject(reps, "n", c->base.n);
        static const char *const keys[] = {"medians_ms", "mins_ms"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
          const cJSON *a = cmp_member(row_reps, keys[k]);
          if (cJSON_IsArray(a))
            cJSON_AddItemToObject(reps, keys[k], cJSON_Duplicate(a, 1));
        }
      }
      if (isfinite(max_ratio))
        cJSON_AddNumberToObject(item, "max_ratio", max_ratio);
      if (isfinite(max_abs_ms) && c->kind == KIND_TIME) {
        cJSON_AddNumberToObject(item, "max_abs_ms", max_abs_ms);
      }
    }
    cJSON_AddItemToArray(metrics, item);
  }
  char *text = bench_report_print(b);
  cJSON_Delete(b);
  cJSON_Delete(d.json);
  cmp_free_checks(&l);
  if (!text)
    return cmp_unusable("out of memory");
  rc = BENCH_EXIT_OK;
  char err[1024];
  if (bench_write_atomic(out_path ? out_path : "-", text, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench compare: --emit-baseline: %s\n", err);
    rc = BENCH_EXIT_USAGE;
  }
  free(text);
  return rc;
}
