/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench ab's rows (docs/report.md, A/B): each report's rows folded
 * into per-round pairs (a process's floor or median over its passes after
 * the first), and each row's verdict from its paired ratios B/A
 * (bench/verdict.c). */
#include "ab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ab_row *row_for(ab_rows *l, const char *key) {
  for (int i = 0; i < l->count; i++) {
    if (strcmp(l->items[i].key, key) == 0)
      return &l->items[i];
  }
  if (l->count == l->cap) {
    int cap = l->cap ? 2 * l->cap : 32;
    ab_row *grown = realloc(l->items, (size_t)cap * sizeof *grown);
    if (!grown)
      return NULL;
    l->items = grown;
    l->cap = cap;
  }
  ab_row *r = &l->items[l->count];
  memset(r, 0, sizeof *r);
  r->key = strdup(key);
  if (!r->key)
    return NULL;
  l->count++;
  return r;
}

static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* A process's value for a row: the floor (smallest per-pass minimum) or
 * the median of the per-pass medians, over the passes after the first
 * (all of them when there is one). NAN when the row has none. */
static double process_value(const cJSON *row, int floor_statistic) {
  const cJSON *reps = cJSON_GetObjectItemCaseSensitive(row, "repetitions");
  const cJSON *list =
      cJSON_GetObjectItemCaseSensitive(reps, floor_statistic ? "mins_ms" : "medians_ms");
  if (!cJSON_IsArray(list) && floor_statistic)
    list = cJSON_GetObjectItemCaseSensitive(reps, "medians_ms"); /* before mins_ms were kept */
  int n = cJSON_GetArraySize(list);
  if (!cJSON_IsArray(list) || n < 1) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, floor_statistic ? "min_ms" : "p50_ms");
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
  }
  double *v = malloc((size_t)n * sizeof *v);
  if (!v)
    return NAN;
  int k = 0, index = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, list) {
    if ((n == 1 || index > 0) && cJSON_IsNumber(item))
      v[k++] = item->valuedouble;
    index++;
  }
  double out = NAN;
  if (k > 0) {
    qsort(v, (size_t)k, sizeof *v, compare_doubles);
    out = floor_statistic ? v[0] : (k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]));
  }
  free(v);
  return out;
}

int ab_grow_rounds(ab_row *r, int rounds) {
  if (r->rounds >= rounds)
    return 0;
  double *a = realloc(r->a, (size_t)rounds * sizeof *a);
  if (!a)
    return -1;
  r->a = a;
  double *b = realloc(r->b, (size_t)rounds * sizeof *b);
  if (!b)
    return -1;
  r->b = b;
  for (int i = r->rounds; i < rounds; i++)
    r->a[i] = r->b[i] = NAN;
  r->rounds = rounds;
  return 0;
}

/* Fold one side's report of round `round` into the rows. */
int ab_fold_report(ab_rows *l, const cJSON *report, int is_b, int round, int floor_statistic) {
  const cJSON *section, *entry, *row;
  char key[512];
  cJSON_ArrayForEach(section, cJSON_GetObjectItemCaseSensitive(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(entry, "rows")) {
        snprintf(key, sizeof key, "%s.%s/%s", section->string, entry->string, row->string);
        ab_row *r = row_for(l, key);
        if (!r || ab_grow_rounds(r, round + 1) != 0)
          return -1;
        const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "status"));
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "reason"));
        int ok = status && strcmp(status, "ok") == 0;
        int failed = status && strcmp(status, "failed") == 0;
        *(is_b ? &r->seen_b : &r->seen_a) += 1;
        if (failed)
          *(is_b ? &r->failed_b : &r->failed_a) += 1;
        if (!ok && reason && (!r->reason || is_b)) {
          free(r->reason);
          r->reason = strdup(reason);
        }
        if (ok) {
          double v = process_value(row, floor_statistic);
          if (isfinite(v)) {
            *(is_b ? &r->ok_b : &r->ok_a) += 1;
            (is_b ? r->b : r->a)[round] = v;
          }
        }
      }
    }
  }
  return 0;
}

void ab_judge_rows(ab_rows *l, const ab_settings *st, int rounds_run, ab_counts *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < l->count; i++) {
    ab_row *r = &l->items[i];
    memset(&r->iv, 0, sizeof r->iv);
    r->iv.ratio = NAN;
    r->iv.hi = INFINITY;
    r->more_rounds = 0;
    if (r->failed_a || r->failed_b) {
      r->verdict = "failed";
      c->failed++;
    } else if (r->ok_a && r->ok_b < rounds_run) {
      /* ran in A, not (always) in B */
      r->verdict = "missing";
      c->missing++;
    } else if (r->ok_b && !r->ok_a) {
      r->verdict = "new";
      c->added++;
    } else if (!r->ok_a && !r->ok_b) {
      r->verdict = "skipped";
      c->skipped++;
    } else {
      double *a = malloc((size_t)r->rounds * sizeof *a), *b = malloc((size_t)r->rounds * sizeof *b);
      int n = 0;
      for (int k = 0; a && b && k < r->rounds; k++) {
        if (isfinite(r->a[k]) && isfinite(r->b[k])) {
          a[n] = r->a[k];
          b[n] = r->b[k];
          n++;
        }
      }
      bench_verdict v = BENCH_INCONCLUSIVE;
      if (a && b && bench_paired_interval(a, b, n, st->confidence, &r->iv) == 0)
        v = bench_judge(&r->iv, st->threshold);
      if (v == BENCH_INCONCLUSIVE && a && b)
        r->more_rounds = bench_rounds_to_settle(a, b, n, st->threshold, st->confidence);
      free(a);
      free(b);
      r->verdict = bench_verdict_name(v);
      switch (v) {
      case BENCH_REGRESSED:
        c->regressed++;
        break;
      case BENCH_IMPROVED:
        c->improved++;
        break;
      case BENCH_UNCHANGED:
        c->unchanged++;
        break;
      default:
        c->inconclusive++;
        break;
      }
    }
  }
}

int ab_is_failure(const char *verdict) {
  return strcmp(verdict, "regressed") == 0 || strcmp(verdict, "missing") == 0 ||
         strcmp(verdict, "failed") == 0;
}

/* The median over the rounds of one side's values of a row. */
double ab_side_median(const double *v, int n) {
  double *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
  int k = 0;
  for (int i = 0; copy && i < n; i++) {
    if (isfinite(v[i]))
      copy[k++] = v[i];
  }
  double out = NAN;
  if (k > 0) {
    qsort(copy, (size_t)k, sizeof *copy, compare_doubles);
    out = k % 2 ? copy[k / 2] : 0.5 * (copy[k / 2 - 1] + copy[k / 2]);
  }
  free(copy);
  return out;
}
