/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare's verdicts (docs/report.md, Compare and Verdicts): a
 * time by its interval (Mann-Whitney, the floors' reach, or a known
 * spread), a rate by its row's times, other numbers by the threshold;
 * --confirm, pooled CURRENT reports and --relative's speed factor. */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The checks of the earlier compare (--confirm) by path, into
 * cmp_doc_index: the first check of a path counts. 0, or -1 out of memory. */
int cmp_index_confirm(const cJSON *confirm) {
  const cJSON *check;
  cJSON_ArrayForEach(check, cmp_member(confirm, "checks")) {
    /* "path" since schema 1.3 ("metric" may name the floor) */
    const cJSON *m = cmp_member(check, "path");
    if (!cJSON_IsString(m))
      m = cmp_member(check, "metric");
    if (cJSON_IsString(m) && bench_index_add(&cmp_doc_index, confirm, m->valuestring, check) < 0)
      return -1;
  }
  return 0;
}

/* Was metric regressed in the earlier compare of --confirm? */
static int regressed_before(const rule *ru, const char *metric) {
  const cJSON *check = bench_index_find(&cmp_doc_index, ru->confirm, metric);
  const cJSON *v = cmp_member(check, "verdict");
  return cJSON_IsString(v) && strcmp(v->valuestring, "regressed") == 0;
}

int cmp_is_failure(const char *verdict) {
  return strcmp(verdict, "regressed") == 0 || strcmp(verdict, "missing") == 0 ||
         strcmp(verdict, "failed") == 0;
}

/* An interval from a noise band (not a test): [v - band, v + band] / b,
 * judged like a statistical one. */
static void band_interval(check *c, double b, double v, const char *rule_name) {
  c->iv.ratio = v / b;
  c->iv.lo = fmax(0.0, (v - c->band) / b);
  c->iv.hi = (v + c->band) / b;
  c->iv.coverage = 1.0; /* for bench_judge; not written as a coverage */
  c->interval_rule = rule_name;
}

static void evaluate_time(check *c, double r, double a, double alpha, double g) {
  /* relative to the suite's speed factor g: the baseline as if measured at
   * the current machine speed */
  double b = c->base.value * g, v = c->cur.value;
  c->allowed = b * (1.0 + r) + a;
  c->threshold = b > 0 ? r + a / b : r;
  if (!(b > 0)) {
    /* a zero baseline time has no ratio: only an absolute rule */
    c->verdict = v > c->allowed ? "regressed" : "inconclusive";
    return;
  }
  if (strcmp(cmp_rep_key, "mins_ms") == 0 && c->base.n >= FLOOR_REACH && c->cur.n >= FLOOR_REACH) {
    /* floors (the fastest repetitions) against each other: their ratio,
     * give or take both floors' reach; the repetitions' spread above the
     * floor is the machine's, not the code's (a shared machine's slow
     * seconds), so no rank test on it */
    c->band = fmax(c->base.spread * g, c->cur.spread);
    band_interval(c, b, v, "floor reach");
  } else if (c->base.n >= 2 && c->cur.n >= 2) {
    double *scaled = malloc((size_t)c->base.n * sizeof *scaled);
    if (scaled) {
      for (int i = 0; i < c->base.n; i++)
        scaled[i] = c->base.reps[i] * g;
      c->p_value = bench_mann_whitney_p(c->cur.reps, c->cur.n, scaled, c->base.n);
      if (bench_unpaired_interval(scaled, c->base.n, c->cur.reps, c->cur.n, 1.0 - alpha, &c->iv) ==
          0) {
        c->interval_rule = "mann-whitney";
      }
      free(scaled);
    }
    c->band = fmax(c->base.spread * g, c->cur.spread);
    if (!c->interval_rule) {
      c->verdict = "inconclusive"; /* out of memory: no interval */
      return;
    }
  } else {
    /* no test possible (1.0 reports, old baseline files): the known
     * spread as the band */
    double spread = NAN;
    int mad = 0;
    if (isfinite(c->base.spread)) {
      spread = c->base.spread * g;
      mad = c->base.spread_mad;
    }
    if (isfinite(c->cur.spread) && (!isfinite(spread) || c->cur.spread > spread)) {
      spread = c->cur.spread;
      mad = c->cur.spread_mad;
    }
    c->band = isfinite(spread) ? (mad ? MAD_BANDS * spread : spread) : NAN;
    if (isfinite(c->band)) {
      band_interval(c, b, v, "spread");
    } else {
      /* nothing known of the noise: a change beyond the threshold shows,
       * no change can be shown */
      c->iv.ratio = v / b;
      c->verdict = v > c->allowed          ? "regressed"
                   : v * (1.0 + r) + a < b ? "improved"
                                           : "inconclusive";
      return;
    }
  }
  c->verdict = bench_verdict_name(bench_judge(&c->iv, c->threshold));
}

/* A rate (work / p50) judged by its row's time samples, mirrored: a rate
 * regressed when the time did. The interval is the rate's ratio. */
static int evaluate_rate_from_times(check *c, double r, double alpha) {
  if (c->base.n < 2 || c->cur.n < 2)
    return -1;
  bench_interval t;
  if (bench_unpaired_interval(c->base.reps, c->base.n, c->cur.reps, c->cur.n, 1.0 - alpha, &t) != 0)
    return -1;
  c->threshold = r;
  c->verdict = bench_verdict_name(bench_judge(&t, r));
  c->iv = t;
  c->iv.ratio = 1.0 / t.ratio;
  c->iv.lo = isfinite(t.hi) && t.hi > 0 ? 1.0 / t.hi : 0.0;
  c->iv.hi = t.lo > 0 ? 1.0 / t.lo : INFINITY;
  c->interval_rule = "mann-whitney (of the row's times)";
  return 0;
}

void cmp_evaluate(check *c, const cJSON *current, const rule *ru) {
  double r = isnan(c->max_ratio) ? ru->max_ratio : c->max_ratio;
  double a = isnan(c->max_abs_ms) ? ru->max_abs_ms : c->max_abs_ms;
  c->max_ratio = r;
  c->max_abs_ms = a;
  const char *cur_row = cmp_row_status(current, c->path);
  if (c->kind == KIND_ROW) {
    /* the baseline's row was skipped: nothing to hold the current row to */
    if (!cur_row) {
      c->verdict = "absent";
    } else if (strcmp(cur_row, "skipped") == 0) {
      c->verdict = "skipped";
    } else if (strcmp(cur_row, "ok") == 0) {
      c->verdict = "new";
    } else {
      c->verdict = "failed";
    }
    return;
  }
  if (cur_row && strcmp(cur_row, "failed") == 0) {
    c->verdict = "failed";
    return;
  }
  int found = cmp_sampled_from_report(current, c->path, &c->cur) == 0;
  if (found && ru->more_count > 0) {
    /* pooled: the repetitions of every CURRENT report of this metric */
    for (int k = 0; k < ru->more_count; k++) {
      sampled extra;
      if (cmp_sampled_from_report(ru->more[k], c->path, &extra) != 0)
        continue;
      if (extra.n > 0 && c->cur.n > 0) {
        double *grown = realloc(c->cur.reps, (size_t)(c->cur.n + extra.n) * sizeof *grown);
        if (grown) {
          memcpy(grown + c->cur.n, extra.reps, (size_t)extra.n * sizeof *grown);
          c->cur.reps = grown;
          c->cur.n += extra.n;
        }
      }
      cmp_sampled_free(&extra);
    }
    bench_summary sum;
    if (c->kind == KIND_TIME && c->cur.n > 0 &&
        bench_summary_compute(c->cur.reps, c->cur.n, &sum) == 0) {
      c->cur.value = sum.median;
      c->cur.spread = MAD_TO_SIGMA * sum.mad;
      if (strcmp(cmp_rep_key, "mins_ms") == 0 && c->cur.n >= FLOOR_REACH) {
        /* the pooled floor and its reach */
        double *sorted = malloc((size_t)c->cur.n * sizeof *sorted);
        if (sorted) {
          memcpy(sorted, c->cur.reps, (size_t)c->cur.n * sizeof *sorted);
          qsort(sorted, (size_t)c->cur.n, sizeof *sorted, cmp_compare_doubles);
          c->cur.value = sorted[0];
          c->cur.spread = sorted[FLOOR_REACH - 1] - sorted[0];
          free(sorted);
        }
      }
    }
  }
  if (!found) {
    c->verdict = (c->baseline_row_skipped && cur_row && strcmp(cur_row, "skipped") == 0)
                     ? "skipped"
                     : "missing";
    return;
  }
  double b = c->base.value, v = c->cur.value;
  c->relative = ru->scale;
  switch (c->kind) {
  case KIND_TIME:
    evaluate_time(c, r, a, ru->alpha, ru->scale);
    if (ru->confirm && strcmp(c->verdict, "regressed") == 0 && !regressed_before(ru, c->path)) {
      c->verdict = "unconfirmed"; /* not regressed in the earlier run */
    }
    break;
  case KIND_RATE:
    c->allowed = b / (1.0 + r);
    if (evaluate_rate_from_times(c, r, ru->alpha) != 0) {
      /* one number a side: a change beyond the threshold shows, no change
       * can be shown */
      c->verdict = v < c->allowed ? "regressed" : v > b * (1.0 + r) ? "improved" : "inconclusive";
    }
    break;
  default:
    c->allowed = b * (1.0 + r);
    c->verdict = v > c->allowed ? "regressed" : v * (1.0 + r) < b ? "improved" : "unchanged";
    break;
  }
}

/* --relative: the median over the rows of current/baseline time (rows
 * with repetitions on both sides); 1 when fewer than three rows have it. */
double cmp_suite_speed_factor(const check_list *l, const cJSON *current, int *rows) {
  double *ratios = malloc((size_t)(l->count + 1) * sizeof *ratios);
  int n = 0;
  for (int i = 0; ratios && i < l->count; i++) {
    const check *c = &l->items[i];
    if (c->kind != KIND_TIME || c->base.n < 2 || !(c->base.value > 0))
      continue;
    sampled cur;
    if (cmp_sampled_from_report(current, c->path, &cur) == 0 && cur.n >= 2 && cur.value > 0) {
      ratios[n++] = cur.value / c->base.value;
    }
    cmp_sampled_free(&cur);
  }
  double g = 1.0;
  if (n >= 3) {
    qsort(ratios, (size_t)n, sizeof *ratios, cmp_compare_doubles);
    g = n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  }
  free(ratios);
  *rows = n;
  return g;
}
