/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench ab's outputs (docs/report.md, A/B): the Markdown table and
 * the JSON report (suite apexx-ab) of a run. */
#include "config.h"

#include "ab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- output ---------------------------------------------------------------- */
static void format_ms(char *buf, size_t size, double v) {
  if (!isfinite(v)) {
    snprintf(buf, size, "-");
  } else if (v < 1.0) {
    snprintf(buf, size, "%.4g us", v * 1e3);
  } else {
    snprintf(buf, size, "%.4g ms", v);
  }
}

const char *ab_status_of(const ab_counts *c) {
  return c->regressed || c->missing || c->failed ? "fail"
         : c->inconclusive                       ? "inconclusive"
                                                 : "pass";
}

static void side_line(bench_text *b, const side *s) {
  const cJSON *sha = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(s->probe, "producer"), "git_sha");
  const cJSON *lib = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(s->probe, "environment"), "library_path");
  bench_text_append(b, "- %s: `%s` (%s, commit %.12s, libapexx `%s`)", s->label, s->dir, s->layout,
                    cJSON_IsString(sha) ? sha->valuestring : "unknown",
                    cJSON_IsString(lib) ? lib->valuestring : "not recorded");
  for (int i = 0; i < s->env_count; i++)
    bench_text_append(b, "%s`%s`", i ? ", " : "; environment ", s->env[i]);
  bench_text_append(b, "\n");
}

char *ab_render_markdown(const side *a, const side *b, const ab_rows *l, const ab_settings *st,
                         const ab_counts *c, int rounds_run, double elapsed) {
  bench_text m = {NULL, 0, 0, 0};
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(b->probe, "environment");
  bench_text_append(&m, "# apexx-bench ab\n\n");
  bench_text_append(&m,
                    "- verdict: **%s** (%d regressed, %d improved, %d unchanged, %d inconclusive, "
                    "%d missing, %d failed)\n",
                    ab_status_of(c), c->regressed, c->improved, c->unchanged, c->inconclusive,
                    c->missing, c->failed);
  side_line(&m, a);
  side_line(&m, b);
  bench_text_append(&m, "- machine: %s, %s x%d\n",
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(env, "host")),
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(env, "cpu_model")),
                    (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(env, "cpu_cores")));
  bench_text_append(&m,
                    "- %d rounds (%s), %d passes a process (the first a warm-up), a process's "
                    "%s; %.1f s (A %.1f s, B %.1f s in their processes)\n",
                    rounds_run, st->random_order ? "A and B in random order" : "A B, B A, ...",
                    st->passes, st->floor_statistic ? "floor (its fastest pass)" : "median pass",
                    elapsed, a->seconds, b->seconds);
  bench_text_append(&m,
                    "- rule: B/A is the median of the rounds' ratios with its %g%% sign-test "
                    "interval; regressed when B/A >= %g and the interval lies above 1, improved "
                    "when B/A <= %.4g and it lies below 1, unchanged when it lies inside "
                    "(%.4g, %g), else inconclusive\n\n",
                    100.0 * st->confidence, 1.0 + st->threshold, 1.0 / (1.0 + st->threshold),
                    1.0 / (1.0 + st->threshold), 1.0 + st->threshold);
  bench_text_append(&m, "| row | A | B | B/A | %g%% interval | verdict | note |\n",
                    100.0 * st->confidence);
  bench_text_append(&m, "| --- | ---: | ---: | ---: | --- | --- | --- |\n");
  for (int i = 0; i < l->count; i++) {
    const ab_row *r = &l->items[i];
    char av[32], bv[32], ratio[32] = "-", interval[64] = "-", note[160] = "";
    format_ms(av, sizeof av, ab_side_median(r->a, r->rounds));
    format_ms(bv, sizeof bv, ab_side_median(r->b, r->rounds));
    if (isfinite(r->iv.ratio))
      snprintf(ratio, sizeof ratio, "%.3f", r->iv.ratio);
    if (r->iv.coverage > 0)
      snprintf(interval, sizeof interval, "[%.3f, %.3f]", r->iv.lo, r->iv.hi);
    if (strcmp(r->verdict, "inconclusive") == 0) {
      snprintf(note, sizeof note, "%d pair(s); about %d more round(s) would settle it", r->iv.n,
               r->more_rounds);
    } else if (r->reason && (strcmp(r->verdict, "skipped") == 0 || ab_is_failure(r->verdict))) {
      snprintf(note, sizeof note, "%.150s", r->reason);
    } else if (strcmp(r->verdict, "missing") == 0) {
      snprintf(note, sizeof note, "ran in A, not in B");
    }
    const char *sep = strchr(r->key, '/');
    bench_text_append(&m, "| %.*s / %s | %s | %s | %s | %s | %s%s%s | %s |\n", (int)(sep - r->key),
                      r->key, sep + 1, av, bv, ratio, interval,
                      ab_is_failure(r->verdict) ? "**" : "", r->verdict,
                      ab_is_failure(r->verdict) ? "**" : "", note);
  }
  return bench_text_finish(&m);
}

static cJSON *numbers(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++)
    cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
  return a;
}

static cJSON *side_json(const side *s) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "path", s->dir);
  cJSON_AddStringToObject(j, "layout", s->layout);
  cJSON_AddStringToObject(j, "apexx_bench", s->bench);
  bench_json_string_or_null(j, "backend_dir", s->backend_dir);
  const cJSON *producer = cJSON_GetObjectItemCaseSensitive(s->probe, "producer");
  if (producer)
    cJSON_AddItemToObject(j, "producer", cJSON_Duplicate(producer, 1));
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(s->probe, "environment");
  static const char *const keys[] = {"library_version", "library_path"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(env, keys[i]);
    if (v)
      cJSON_AddItemToObject(j, keys[i], cJSON_Duplicate(v, 1));
  }
  cJSON *e = cJSON_AddArrayToObject(j, "env");
  for (int i = 0; i < s->env_count; i++)
    cJSON_AddItemToArray(e, cJSON_CreateString(s->env[i]));
  cJSON_AddNumberToObject(j, "process_seconds", s->seconds);
  return j;
}

cJSON *ab_report_json(const side *a, const side *b, const ab_rows *l, const ab_settings *st,
                      const ab_counts *c, int rounds_run, double elapsed, const ab_run *run) {
  cJSON *r = cJSON_CreateObject();
  cJSON *schema = cJSON_AddObjectToObject(r, "schema_version");
  cJSON_AddNumberToObject(schema, "major", BENCH_SCHEMA_MAJOR);
  cJSON_AddNumberToObject(schema, "minor", BENCH_SCHEMA_MINOR);
  cJSON_AddStringToObject(r, "suite", "apexx-ab");
  char id[40], stamp[32];
  bench_run_id(id, sizeof id);
  cJSON_AddStringToObject(r, "run_id", id);
  bench_timestamp_utc(stamp, sizeof stamp);
  cJSON_AddStringToObject(r, "timestamp_utc", stamp);
  cJSON *producer = cJSON_AddObjectToObject(r, "producer");
  cJSON_AddStringToObject(producer, "name", "apexx-bench");
  cJSON_AddStringToObject(producer, "version", PACKAGE_VERSION);
  bench_json_string_or_null(producer, "git_sha", bench_git_sha());
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(b->probe, "environment");
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(b->probe, "config");
  if (env)
    cJSON_AddItemToObject(r, "environment", cJSON_Duplicate(env, 1));
  if (config)
    cJSON_AddItemToObject(r, "config", cJSON_Duplicate(config, 1));
  cJSON *s = cJSON_AddObjectToObject(r, "settings");
  cJSON_AddNumberToObject(s, "rounds", rounds_run);
  cJSON_AddNumberToObject(s, "rounds_asked", st->rounds);
  if (st->until_settled)
    cJSON_AddNumberToObject(s, "until_settled", st->until_settled);
  else
    cJSON_AddNullToObject(s, "until_settled");
  cJSON_AddNumberToObject(s, "passes", st->passes);
  cJSON_AddStringToObject(s, "statistic", st->floor_statistic ? "floor" : "median");
  cJSON_AddStringToObject(s, "order", st->random_order ? "random" : "alternate");
  cJSON_AddNumberToObject(s, "threshold", st->threshold);
  cJSON_AddNumberToObject(s, "confidence", st->confidence);
  cJSON *flags = cJSON_AddArrayToObject(s, "run_flags");
  for (int i = 0; i < run->flag_count; i++)
    cJSON_AddItemToArray(flags, cJSON_CreateString(run->flags[i]));
  cJSON_AddNumberToObject(s, "elapsed_s", elapsed);
  cJSON *sides = cJSON_AddObjectToObject(r, "sides");
  cJSON_AddItemToObject(sides, "a", side_json(a));
  cJSON_AddItemToObject(sides, "b", side_json(b));
  cJSON_AddStringToObject(r, "status", ab_status_of(c));
  cJSON *counts = cJSON_AddObjectToObject(r, "verdicts");
  cJSON_AddNumberToObject(counts, "regressed", c->regressed);
  cJSON_AddNumberToObject(counts, "improved", c->improved);
  cJSON_AddNumberToObject(counts, "unchanged", c->unchanged);
  cJSON_AddNumberToObject(counts, "inconclusive", c->inconclusive);
  cJSON_AddNumberToObject(counts, "missing", c->missing);
  cJSON_AddNumberToObject(counts, "failed", c->failed);
  cJSON_AddNumberToObject(counts, "skipped", c->skipped);
  cJSON_AddNumberToObject(counts, "new", c->added);
  cJSON *rows = cJSON_AddObjectToObject(r, "rows");
  for (int i = 0; i < l->count; i++) {
    const ab_row *row = &l->items[i];
    cJSON *j = cJSON_AddObjectToObject(rows, row->key);
    cJSON_AddStringToObject(j, "verdict", row->verdict);
    if (row->reason)
      cJSON_AddStringToObject(j, "reason", row->reason);
    cJSON_AddItemToObject(j, "a_ms", numbers(row->a, row->rounds));
    cJSON_AddItemToObject(j, "b_ms", numbers(row->b, row->rounds));
    bench_json_number(j, "a_median_ms", ab_side_median(row->a, row->rounds), "no value in A");
    bench_json_number(j, "b_median_ms", ab_side_median(row->b, row->rounds), "no value in B");
    cJSON_AddNumberToObject(j, "pairs", row->iv.n);
    bench_json_number(j, "ratio", row->iv.ratio, "no pair of values");
    int has = row->iv.coverage > 0;
    bench_json_number(j, "interval_low", has ? row->iv.lo : NAN,
                      "too few pairs for an interval at this confidence");
    bench_json_number(j, "interval_high", has ? row->iv.hi : NAN,
                      "too few pairs for an interval at this confidence");
    cJSON_AddNumberToObject(j, "interval_coverage", row->iv.coverage);
    if (strcmp(row->verdict, "inconclusive") == 0)
      cJSON_AddNumberToObject(j, "rounds_to_settle", row->more_rounds);
  }
  return r;
}
