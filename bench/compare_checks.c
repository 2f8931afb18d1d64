/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare's checks (docs/report.md, Compare): the samples of a
 * metric (a row's per-repetition medians or minima, or a 1.0 row's p95 -
 * p50), the metrics a baseline holds (every ok row of a report, or a
 * baseline file's list), and the subset --ops / --metrics keep. */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- samples of a metric ------------------------------------------------- */
/* The per-repetition statistic compared: "medians_ms" or (--statistic min)
 * "mins_ms", the key of a row's repetitions object. */
const char *cmp_rep_key = "medians_ms";

void cmp_sampled_free(sampled *s) {
  free(s->reps);
  s->reps = NULL;
  s->n = 0;
}

int cmp_compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The repetitions object of a row (or of a baseline metric) into s. */
static void read_repetitions(const cJSON *reps, sampled *s) {
  const cJSON *medians = cmp_member(reps, cmp_rep_key);
  int n = cJSON_GetArraySize(medians);
  if (!cJSON_IsArray(medians) || n < 1)
    return;
  double *v = malloc((size_t)n * sizeof *v);
  if (!v)
    return;
  int k = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, medians) {
    if (cJSON_IsNumber(item))
      v[k++] = item->valuedouble;
  }
  bench_summary sum;
  if (k < 1 || bench_summary_compute(v, k, &sum) != 0) {
    free(v);
    return;
  }
  s->reps = v;
  s->n = k;
  s->value = sum.median;
  s->spread = MAD_TO_SIGMA * sum.mad;
  s->spread_mad = 1;
  if (strcmp(cmp_rep_key, "mins_ms") == 0) {
    /* the floor: the fastest repetition; its reach, how far the
     * FLOOR_REACH-th fastest lies above it (a floor met by one lucky
     * repetition only is a wide band) */
    double *sorted = malloc((size_t)k * sizeof *sorted);
    if (!sorted) {
      s->spread = NAN;
      return;
    }
    memcpy(sorted, v, (size_t)k * sizeof *sorted);
    qsort(sorted, (size_t)k, sizeof *sorted, cmp_compare_doubles);
    s->value = sorted[0];
    s->spread = k >= FLOOR_REACH ? sorted[FLOOR_REACH - 1] - sorted[0] : NAN;
    s->spread_mad = 0;
    free(sorted);
  }
}

/* A metric of a report: the number at path, and for a row's p50_ms its
 * repetitions (1.1) or its p95 - p50 (1.0). 0, or -1 when absent. */
int cmp_sampled_from_report(const cJSON *report, const char *path, sampled *s) {
  memset(s, 0, sizeof *s);
  s->spread = NAN;
  const cJSON *v = cmp_lookup(report, path);
  if (!cJSON_IsNumber(v))
    return -1;
  s->value = v->valuedouble;
  /* a rate of a row (work / p50) carries the row's time samples */
  int rate = cmp_kind_of_path(path) == KIND_RATE;
  if (!cmp_ends_with(path, ".p50_ms") && !rate)
    return 0;
  char *row_path = cmp_row_path_of(path);
  const cJSON *row = row_path ? cmp_lookup(report, row_path) : NULL;
  free(row_path);
  read_repetitions(cmp_member(row, "repetitions"), s);
  if (rate) {
    s->value = v->valuedouble;
    s->spread = NAN;
    return 0;
  }
  const cJSON *min = cmp_member(row, "min_ms");
  if (s->n == 0 && strcmp(cmp_rep_key, "mins_ms") == 0 && cJSON_IsNumber(min)) {
    s->value = min->valuedouble; /* a 1.0 row: its minimum over the iterations */
  }
  if (s->n == 0) {
    const cJSON *p95 = cmp_member(row, "p95_ms");
    if (cJSON_IsNumber(p95) && p95->valuedouble >= s->value) {
      s->spread = p95->valuedouble - s->value;
    }
  }
  return 0;
}

static check *add_check(check_list *l, const char *path, metric_kind kind) {
  if (l->count == l->cap) {
    int cap = l->cap ? l->cap * 2 : 64;
    check *grown = realloc(l->items, (size_t)cap * sizeof *grown);
    if (!grown)
      return NULL;
    l->items = grown;
    l->cap = cap;
  }
  check *c = &l->items[l->count];
  memset(c, 0, sizeof *c);
  c->path = strdup(path);
  if (!c->path)
    return NULL;
  l->count++;
  c->kind = kind;
  c->base.value = c->base.spread = NAN;
  c->cur.value = c->cur.spread = NAN;
  c->max_ratio = c->max_abs_ms = NAN;
  c->p_value = c->band = c->allowed = c->threshold = NAN;
  c->iv.ratio = NAN;
  c->iv.hi = INFINITY;
  return c;
}

void cmp_free_checks(check_list *l) {
  for (int i = 0; i < l->count; i++) {
    free(l->items[i].path);
    cmp_sampled_free(&l->items[i].base);
    cmp_sampled_free(&l->items[i].cur);
  }
  free(l->items);
}

static int wanted(const metric_names *m, const char *name, const char *throughput) {
  if (m->count == 0)
    return strcmp(name, "p50_ms") == 0;
  for (int i = 0; i < m->count; i++) {
    if (strcmp(m->names[i], name) == 0)
      return 1;
    if (strcmp(m->names[i], "throughput") == 0 && throughput && strcmp(name, throughput) == 0) {
      return 1;
    }
  }
  return 0;
}

/* Walk benchmarks.<section>.<entry>.rows.<backend> of a report. */
int cmp_checks_from_report(const cJSON *report, const metric_names *m, check_list *out) {
  const cJSON *section, *entry, *row, *metric;
  char path[1024];
  cJSON_ArrayForEach(section, cmp_member(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      const cJSON *work = cmp_member(entry, "work");
      const cJSON *tp = cmp_member(work, "throughput");
      const char *throughput = cJSON_IsString(tp) ? tp->valuestring : NULL;
      cJSON_ArrayForEach(row, cmp_member(entry, "rows")) {
        const cJSON *status = cmp_member(row, "status");
        snprintf(path, sizeof path, "benchmarks.%s.%s.rows.%s", section->string, entry->string,
                 row->string);
        if (!cJSON_IsString(status) || strcmp(status->valuestring, "ok") != 0) {
          check *c = add_check(out, path, KIND_ROW);
          if (!c)
            return -1;
          c->baseline_row_skipped = 1;
          continue;
        }
        cJSON_ArrayForEach(metric, row) {
          if (!wanted(m, metric->string, throughput))
            continue;
          if (!cJSON_IsNumber(metric))
            continue; /* null: nothing to hold to */
          snprintf(path, sizeof path, "benchmarks.%s.%s.rows.%s.%s", section->string, entry->string,
                   row->string, metric->string);
          check *c = add_check(out, path, cmp_kind_of_path(path));
          if (!c)
            return -1;
          cmp_sampled_from_report(report, path, &c->base);
        }
      }
    }
  }
  return 0;
}

int cmp_checks_from_baseline(const doc *d, check_list *out) {
  const cJSON *item;
  int i = 0;
  cJSON_ArrayForEach(item, cmp_member(d->json, "metrics")) {
    const cJSON *path = cmp_member(item, "path");
    const cJSON *value = cmp_member(item, "value");
    const cJSON *rs = cmp_member(item, "row_status");
    if (!cJSON_IsString(path) || !*path->valuestring) {
      return cmp_unusable("[%s]: metrics[%d] has no \"path\" string", d->path, i);
    }
    int skipped_row = cJSON_IsString(rs) && strcmp(rs->valuestring, "ok") != 0;
    if (!skipped_row && !cJSON_IsNumber(value)) {
      return cmp_unusable("[%s]: metrics[%d] (%s) has no numeric \"value\"", d->path, i,
                          path->valuestring);
    }
    check *c = add_check(out, path->valuestring,
                         skipped_row ? KIND_ROW : cmp_kind_of_path(path->valuestring));
    if (!c)
      return cmp_unusable("out of memory");
    c->baseline_row_skipped = skipped_row;
    if (!skipped_row) {
      c->base.value = value->valuedouble;
      const cJSON *reps = cmp_member(item, "repetitions");
      read_repetitions(reps, &c->base);
      if (c->base.n > 0 && (strcmp(cmp_rep_key, "medians_ms") == 0 || c->kind != KIND_TIME))
        c->base.value = value->valuedouble;
      if (c->kind == KIND_RATE)
        c->base.spread = NAN;
      if (c->base.n == 0 && strcmp(cmp_rep_key, "mins_ms") == 0 && c->kind == KIND_TIME) {
        return cmp_unusable("[%s]: metrics[%d] (%s) has no per-repetition minima (mins_ms) for "
                            "--statistic min: record the baseline again (make bench-baseline) "
                            "or compare with --statistic median",
                            d->path, i, path->valuestring);
      }
    }
    const cJSON *r = cmp_member(item, "max_ratio");
    const cJSON *a = cmp_member(item, "max_abs_ms");
    if (cJSON_IsNumber(r))
      c->max_ratio = r->valuedouble;
    if (cJSON_IsNumber(a))
      c->max_abs_ms = a->valuedouble;
    i++;
  }
  return 0;
}

/* Does path "benchmarks.SECTION.ENTRY..." belong to a named entry or
 * section? */
static int in_ops(const op_names *ops, const char *path) {
  if (ops->count == 0)
    return 1;
  const char *p = strncmp(path, "benchmarks.", 11) == 0 ? path + 11 : path;
  size_t section_len = strcspn(p, ".");
  const char *entry = p[section_len] ? p + section_len + 1 : "";
  size_t entry_len = strcspn(entry, ".");
  for (int i = 0; i < ops->count; i++) {
    size_t n = strlen(ops->names[i]);
    if ((n == section_len && strncmp(p, ops->names[i], n) == 0) ||
        (n == entry_len && strncmp(entry, ops->names[i], n) == 0)) {
      return 1;
    }
  }
  return 0;
}

/* A baseline file's metric against --metrics: its last path component,
 * or "throughput" for a rate other than gb_per_s (a report names the
 * entry's own key; a baseline file does not keep it). */
static int metric_wanted(const metric_names *m, const check *c) {
  if (m->count == 0 || c->kind == KIND_ROW)
    return 1;
  const char *dot = strrchr(c->path, '.');
  const char *name = dot ? dot + 1 : c->path;
  for (int i = 0; i < m->count; i++) {
    if (strcmp(m->names[i], name) == 0)
      return 1;
    if (strcmp(m->names[i], "throughput") == 0 && c->kind == KIND_RATE &&
        strcmp(name, "gb_per_s") != 0) {
      return 1;
    }
  }
  return 0;
}

/* Keep the checks of the subset; -1 (after a message) when none is left. */
int cmp_keep_subset(check_list *l, const op_names *ops, const metric_names *m, int baseline_file) {
  int kept = 0;
  for (int i = 0; i < l->count; i++) {
    check *c = &l->items[i];
    if (in_ops(ops, c->path) && (!baseline_file || metric_wanted(m, c))) {
      l->items[kept++] = *c;
    } else {
      free(c->path);
      cmp_sampled_free(&c->base);
    }
  }
  l->count = kept;
  if (kept == 0 && (ops->count || m->count)) {
    return cmp_unusable("--ops/--metrics: the baseline has no metric of the subset asked for");
  }
  return 0;
}
