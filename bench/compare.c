/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare (docs/report.md, Compare, apexx-bench(1)):
 *   compare BASELINE CURRENT [--max-ratio R] [--max-abs-ms A] [--alpha P]
 *           [--allow-mismatch] [--output-json F] [--output-md F] [--quiet]
 *   compare --emit-baseline REPORT [-o F] [--metrics LIST]
 *           [--max-ratio R] [--max-abs-ms A]
 * BASELINE is a full report or a baseline file (kind "apexx-bench-baseline":
 * dotted metric paths with values and, since schema 1.1, the row's
 * per-repetition medians). From a report, every row contributes its time
 * (p50_ms: the median of the per-repetition medians when the row has them);
 * --metrics adds others.
 *
 * Verdict of a time (lower is better), with b and c the two medians:
 *   both sides have >= 2 repetitions: Mann-Whitney U on the per-repetition
 *     medians, two-sided p. "regressed" when p < alpha and
 *     c > b*(1+R) + A; "improved" when p < alpha and c*(1+R) + A < b;
 *     else "unchanged" (noise). The noise band is 1.4826*MAD, the larger
 *     of the two sides.
 *   otherwise (1.0 reports, old baseline files): the practical rule, and
 *     when a spread is known (MAD of one side, or p95 - p50 of a 1.0 row)
 *     the difference must exceed three times it (MAD) or once (p95 - p50).
 * Rates (*_per_s) and other numbers get the practical rule only, in their
 * direction. "missing" (a metric the current report lacks, unless its row
 * is skipped in both), "failed" (the current row failed), "regressed" and a
 * current status other than the required one fail (exit 2).
 * Profile, dtype, backend set or machine differences are unusable input
 * (exit 1) unless --allow-mismatch. A baseline recorded before schema 1.1,
 * by another library or backend ABI version, or without rows the current
 * report has, is flagged stale (a note, not a failure).
 * More than one CURRENT report (runs of one build): each time's
 * repetitions are pooled over them (make bench-check's reruns).
 * --relative: times are judged against baseline*g, g the median over the
 * rows of current/baseline (the machine's speed now against then: a shared
 * machine slows every row at once); a row's own slowdown still shows, a
 * slowdown of the whole suite is reported as g, not as regressions.
 * --statistic min: a time is its floor, the smallest of its per-repetition
 * minima (mins_ms), and the noise band is the floor's reach (how far the
 * FLOOR_REACH-th smallest lies above it; the wider of the two reports'): a
 * regression is a floor above the practical threshold by more than that
 * band, with no rank test. On a machine shared with other jobs the
 * repetitions' minima move with its state for seconds at a time (up to 1.9x
 * on the development VM), so their median and any test on them follow the
 * neighbours; the floor over many repetitions spread across the run moves
 * by a few percent, and a real slowdown moves it in full.
 * --confirm SUMMARY (an earlier compare's --output-json): a time that
 * regressed now but not in that compare is "unconfirmed" (not a failure);
 * make bench-check chains its attempts this way, so a row fails only when
 * it regressed in every run.
 * Unusable input (exit 1): unreadable, malformed JSON, duplicate keys,
 * wrong schema major, a non-finite number, a negative time. */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_RATIO 0.10
#define DEFAULT_MAX_ABS_MS 0.0
#define DEFAULT_ALPHA 0.05
#define MAD_TO_SIGMA 1.4826
#define MAD_BANDS 3.0
/* --statistic min: the noise band of a floor is how far its FLOOR_REACH-th
 * fastest repetition lies above the fastest */
#define FLOOR_REACH 3

typedef enum metric_kind { KIND_TIME, KIND_RATE, KIND_OTHER, KIND_ROW } metric_kind;

static const char *kind_name(metric_kind k) {
  switch (k) {
  case KIND_TIME:
    return "time";
  case KIND_RATE:
    return "rate";
  case KIND_ROW:
    return "row";
  default:
    return "lower_is_better";
  }
}

static int ends_with(const char *s, const char *suffix) {
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

static metric_kind kind_of_path(const char *path) {
  if (ends_with(path, "_ms"))
    return KIND_TIME;
  if (ends_with(path, "_per_s"))
    return KIND_RATE; /* gb_per_s included */
  return KIND_OTHER;
}

/* ---- documents ----------------------------------------------------------- */
/* The members of the loaded documents' large objects (bench.h, lookups):
 * every lookup below goes through it, so a metric costs the same in a
 * report of 20,000 rows as in one of 20. Objects compare builds itself
 * are not indexed and are searched directly. */
static bench_index doc_index;

static const cJSON *member(const cJSON *obj, const char *key) {
  return bench_index_member(&doc_index, obj, key);
}

typedef enum doc_kind { DOC_REPORT, DOC_BASELINE } doc_kind;

typedef struct doc {
  const char *path;
  cJSON *json;
  doc_kind kind;
} doc;

static int unusable(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int unusable(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "apexx-bench compare: unusable input: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return BENCH_EXIT_USAGE;
}

static int compare_names(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* A key obj holds twice (the first such in sorted order), or NULL. Small
 * objects pairwise, large ones sorted: n log n. */
static const char *duplicate_key(const cJSON *obj) {
  int n = 0;
  const cJSON *child;
  cJSON_ArrayForEach(child, obj) { n++; }
  if (n <= 16) {
    for (child = obj->child; child; child = child->next) {
      for (const cJSON *prev = obj->child; prev != child; prev = prev->next) {
        if (strcmp(prev->string, child->string) == 0)
          return child->string;
      }
    }
    return NULL;
  }
  const char **names = malloc((size_t)n * sizeof *names);
  if (!names)
    return NULL; /* out of memory: the duplicate goes unnoticed, the first is read */
  int k = 0;
  cJSON_ArrayForEach(child, obj) { names[k++] = child->string; }
  qsort(names, (size_t)n, sizeof *names, compare_names);
  const char *twice = NULL;
  for (int i = 1; i < n && !twice; i++) {
    if (strcmp(names[i - 1], names[i]) == 0)
      twice = names[i];
  }
  free(names);
  return twice;
}

/* Duplicate keys (cJSON keeps both and finds the first), numbers that are
 * not finite (1e999 parses as infinity) and negative times anywhere in the
 * tree. 0, or an exit status after a message naming the place. */
static int check_tree(const char *file, const cJSON *node, char *where, size_t where_len,
                      size_t where_size, int times) {
  if (cJSON_IsNumber(node)) {
    if (!isfinite(node->valuedouble)) {
      return unusable("[%s]: %s = [%g] is not a finite number", file, where, node->valuedouble);
    }
    if (times && node->valuedouble < 0) {
      return unusable("[%s]: %s = [%g] is a negative time", file, where, node->valuedouble);
    }
    return 0;
  }
  if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
    return 0;
  const cJSON *child;
  int index = 0;
  if (cJSON_IsObject(node)) {
    const char *twice = duplicate_key(node);
    if (twice) {
      return unusable("[%s]: %s has the key \"%s\" twice", file,
                      where_len ? where : "the top level", twice);
    }
  }
  cJSON_ArrayForEach(child, node) {
    if (cJSON_IsObject(node)) {
      snprintf(where + where_len, where_size - where_len, "%s%s", where_len ? "." : "",
               child->string);
    } else {
      snprintf(where + where_len, where_size - where_len, "[%d]", index);
    }
    int child_times = cJSON_IsObject(node)
                          ? (child->string && (ends_with(child->string, "_ms") ||
                                               strcmp(child->string, "value") == 0))
                          : times;
    /* a baseline file's "value" is a time when its path is */
    if (cJSON_IsObject(node) && child->string && strcmp(child->string, "value") == 0) {
      const cJSON *p = member(node, "path");
      child_times = cJSON_IsString(p) && ends_with(p->valuestring, "_ms");
    }
    int rc = check_tree(file, child, where, strlen(where), where_size, child_times);
    where[where_len] = '\0';
    if (rc)
      return rc;
    index++;
  }
  return 0;
}

/* Read, parse and classify a file; 0 or an exit status after a message. */
static int load_doc(const char *path, doc *d) {
  char err[1024];
  d->path = path;
  d->json = NULL;
  char *text =
      bench_read_file(path, BENCH_MAX_REPORT_BYTES, "a report or baseline", err, sizeof err);
  if (!text)
    return unusable("%s", err);
  const char *end = NULL;
  d->json = cJSON_ParseWithOpts(text, &end, 1);
  if (!d->json) {
    long offset = end ? (long)(end - text) : -1;
    free(text);
    return unusable("[%s] is not valid JSON (error near byte %ld)", path, offset);
  }
  free(text);
  char where[2048] = "";
  int rc = check_tree(path, d->json, where, 0, sizeof where, 0);
  if (rc)
    return rc;
  if (bench_index_tree(&doc_index, d->json) != 0)
    return unusable("[%s]: out of memory", path);
  const cJSON *schema = member(d->json, "schema_version");
  const cJSON *major = member(schema, "major");
  if (!cJSON_IsObject(schema) || !cJSON_IsNumber(major)) {
    return unusable("[%s]: schema_version is not {major, minor} (not an apexx "
                    "report or baseline)",
                    path);
  }
  if (major->valuedouble != BENCH_SCHEMA_MAJOR) {
    return unusable("[%s]: schema_version.major = [%g]; this apexx-bench reads "
                    "major %d",
                    path, major->valuedouble, BENCH_SCHEMA_MAJOR);
  }
  const cJSON *kind = member(d->json, "kind");
  const cJSON *suite = member(d->json, "suite");
  if (cJSON_IsString(kind) && strcmp(kind->valuestring, BENCH_BASELINE_KIND) == 0) {
    if (!cJSON_IsArray(member(d->json, "metrics"))) {
      return unusable("[%s]: a baseline file needs a \"metrics\" array", path);
    }
    d->kind = DOC_BASELINE;
    return 0;
  }
  if (cJSON_IsString(suite) && strcmp(suite->valuestring, "apexx") == 0 &&
      cJSON_IsObject(member(d->json, "benchmarks")) && cJSON_IsString(member(d->json, "status"))) {
    d->kind = DOC_REPORT;
    return 0;
  }
  return unusable("[%s] is neither an apexx report (suite \"apexx\", status, "
                  "benchmarks) nor a baseline file (kind \"%s\")",
                  path, BENCH_BASELINE_KIND);
}

static double schema_minor(const doc *d) {
  const cJSON *m = member(member(d->json, "schema_version"), "minor");
  return cJSON_IsNumber(m) ? m->valuedouble : 0.0;
}

/* Dotted path lookup: "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms". */
static const cJSON *lookup(const cJSON *root, const char *path) {
  char *copy = strdup(path);
  if (!copy)
    return NULL;
  const cJSON *node = root;
  char *save = NULL;
  for (char *seg = strtok_r(copy, ".", &save); seg && node; seg = strtok_r(NULL, ".", &save)) {
    node = cJSON_IsObject(node) ? member(node, seg) : NULL;
  }
  free(copy);
  return node;
}

/* The row a metric path belongs to ("...rows.<backend>"), or NULL. */
static char *row_path_of(const char *path) {
  const char *rows = strstr(path, ".rows.");
  if (!rows)
    return NULL;
  const char *backend = rows + strlen(".rows.");
  size_t len = (size_t)(backend - path) + strcspn(backend, ".");
  return strndup(path, len);
}

/* "ok", "skipped", "failed" of the row holding path, or NULL. */
static const char *row_status(const cJSON *root, const char *path) {
  char *row_path = row_path_of(path);
  if (!row_path)
    return NULL;
  const cJSON *row = lookup(root, row_path);
  free(row_path);
  const cJSON *status = member(row, "status");
  return cJSON_IsString(status) ? status->valuestring : NULL;
}

/* ---- samples of a metric ------------------------------------------------- */
/* The per-repetition statistic compared: "medians_ms" or (--statistic min)
 * "mins_ms", the key of a row's repetitions object. */
static const char *rep_key = "medians_ms";

typedef struct sampled {
  double value;   /* the statistic compared: median of the repetitions */
  int n;          /* repetitions, 0 when none */
  double *reps;   /* per-repetition rep_key values (malloc'd), NULL when none */
  double spread;  /* absolute noise estimate, NAN when none */
  int spread_mad; /* spread is 1.4826*MAD (else p95 - p50 of a 1.0 row) */
} sampled;

static void sampled_free(sampled *s) {
  free(s->reps);
  s->reps = NULL;
  s->n = 0;
}

static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The repetitions object of a row (or of a baseline metric) into s. */
static void read_repetitions(const cJSON *reps, sampled *s) {
  const cJSON *medians = member(reps, rep_key);
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
  if (strcmp(rep_key, "mins_ms") == 0) {
    /* the floor: the fastest repetition; its reach, how far the
     * FLOOR_REACH-th fastest lies above it (a floor met by one lucky
     * repetition only is a wide band) */
    double *sorted = malloc((size_t)k * sizeof *sorted);
    if (!sorted) {
      s->spread = NAN;
      return;
    }
    memcpy(sorted, v, (size_t)k * sizeof *sorted);
    qsort(sorted, (size_t)k, sizeof *sorted, compare_doubles);
    s->value = sorted[0];
    s->spread = k >= FLOOR_REACH ? sorted[FLOOR_REACH - 1] - sorted[0] : NAN;
    s->spread_mad = 0;
    free(sorted);
  }
}

/* A metric of a report: the number at path, and for a row's p50_ms its
 * repetitions (1.1) or its p95 - p50 (1.0). 0, or -1 when absent. */
static int sampled_from_report(const cJSON *report, const char *path, sampled *s) {
  memset(s, 0, sizeof *s);
  s->spread = NAN;
  const cJSON *v = lookup(report, path);
  if (!cJSON_IsNumber(v))
    return -1;
  s->value = v->valuedouble;
  /* a rate of a row (work / p50) carries the row's time samples */
  int rate = kind_of_path(path) == KIND_RATE;
  if (!ends_with(path, ".p50_ms") && !rate)
    return 0;
  char *row_path = row_path_of(path);
  const cJSON *row = row_path ? lookup(report, row_path) : NULL;
  free(row_path);
  read_repetitions(member(row, "repetitions"), s);
  if (rate) {
    s->value = v->valuedouble;
    s->spread = NAN;
    return 0;
  }
  const cJSON *min = member(row, "min_ms");
  if (s->n == 0 && strcmp(rep_key, "mins_ms") == 0 && cJSON_IsNumber(min)) {
    s->value = min->valuedouble; /* a 1.0 row: its minimum over the iterations */
  }
  if (s->n == 0) {
    const cJSON *p95 = member(row, "p95_ms");
    if (cJSON_IsNumber(p95) && p95->valuedouble >= s->value) {
      s->spread = p95->valuedouble - s->value;
    }
  }
  return 0;
}

/* ---- the metrics of a baseline ------------------------------------------ */
typedef struct check {
  char *path;
  metric_kind kind;
  sampled base;
  double max_ratio, max_abs_ms; /* NAN: use the command line's */
  int baseline_row_skipped;
  /* results */
  const char *verdict; /* regressed, improved, unchanged, missing, failed,
                          skipped, new, absent */
  sampled cur;
  double p_value, band; /* band: absolute, NAN when unknown */
  double relative;      /* the speed factor the verdict used (1: none) */
  double threshold;     /* the practical threshold as a ratio: R + A/baseline */
  bench_interval iv;    /* the ratio current/baseline and its interval */
  const char *interval_rule; /* how iv was found, NULL when there is none */
  double allowed;
} check;

typedef struct check_list {
  int count, cap;
  check *items;
} check_list;

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

static void free_checks(check_list *l) {
  for (int i = 0; i < l->count; i++) {
    free(l->items[i].path);
    sampled_free(&l->items[i].base);
    sampled_free(&l->items[i].cur);
  }
  free(l->items);
}

/* Metric names taken from a report's ok rows: p50_ms (the time) unless
 * --metrics names others ("throughput" names the entry's). */
typedef struct metric_names {
  int count;
  const char *names[BENCH_MAX_LIST];
} metric_names;

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
static int checks_from_report(const cJSON *report, const metric_names *m, check_list *out) {
  const cJSON *section, *entry, *row, *metric;
  char path[1024];
  cJSON_ArrayForEach(section, member(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      const cJSON *work = member(entry, "work");
      const cJSON *tp = member(work, "throughput");
      const char *throughput = cJSON_IsString(tp) ? tp->valuestring : NULL;
      cJSON_ArrayForEach(row, member(entry, "rows")) {
        const cJSON *status = member(row, "status");
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
          check *c = add_check(out, path, kind_of_path(path));
          if (!c)
            return -1;
          sampled_from_report(report, path, &c->base);
        }
      }
    }
  }
  return 0;
}

static int checks_from_baseline(const doc *d, check_list *out) {
  const cJSON *item;
  int i = 0;
  cJSON_ArrayForEach(item, member(d->json, "metrics")) {
    const cJSON *path = member(item, "path");
    const cJSON *value = member(item, "value");
    const cJSON *rs = member(item, "row_status");
    if (!cJSON_IsString(path) || !*path->valuestring) {
      return unusable("[%s]: metrics[%d] has no \"path\" string", d->path, i);
    }
    int skipped_row = cJSON_IsString(rs) && strcmp(rs->valuestring, "ok") != 0;
    if (!skipped_row && !cJSON_IsNumber(value)) {
      return unusable("[%s]: metrics[%d] (%s) has no numeric \"value\"", d->path, i,
                      path->valuestring);
    }
    check *c =
        add_check(out, path->valuestring, skipped_row ? KIND_ROW : kind_of_path(path->valuestring));
    if (!c)
      return unusable("out of memory");
    c->baseline_row_skipped = skipped_row;
    if (!skipped_row) {
      c->base.value = value->valuedouble;
      const cJSON *reps = member(item, "repetitions");
      read_repetitions(reps, &c->base);
      if (c->base.n > 0 && (strcmp(rep_key, "medians_ms") == 0 || c->kind != KIND_TIME))
        c->base.value = value->valuedouble;
      if (c->kind == KIND_RATE)
        c->base.spread = NAN;
      if (c->base.n == 0 && strcmp(rep_key, "mins_ms") == 0 && c->kind == KIND_TIME) {
        return unusable("[%s]: metrics[%d] (%s) has no per-repetition minima (mins_ms) for "
                        "--statistic min: record the baseline again (make bench-baseline) "
                        "or compare with --statistic median",
                        d->path, i, path->valuestring);
      }
    }
    const cJSON *r = member(item, "max_ratio");
    const cJSON *a = member(item, "max_abs_ms");
    if (cJSON_IsNumber(r))
      c->max_ratio = r->valuedouble;
    if (cJSON_IsNumber(a))
      c->max_abs_ms = a->valuedouble;
    i++;
  }
  return 0;
}

/* ---- evaluation ------------------------------------------------------------ */
typedef struct rule {
  double max_ratio, max_abs_ms, alpha;
  const cJSON *confirm; /* --confirm: an earlier compare's checks, or NULL */
  double scale;         /* --relative: the suite's speed factor, else 1 */
  const cJSON *more[8]; /* further CURRENT reports pooled with the first */
  int more_count;
} rule;

/* The checks of the earlier compare (--confirm) by path, into
 * doc_index: the first check of a path counts. 0, or -1 out of memory. */
static int index_confirm(const cJSON *confirm) {
  const cJSON *check;
  cJSON_ArrayForEach(check, member(confirm, "checks")) {
    /* "path" since schema 1.3 ("metric" may name the floor) */
    const cJSON *m = member(check, "path");
    if (!cJSON_IsString(m))
      m = member(check, "metric");
    if (cJSON_IsString(m) && bench_index_add(&doc_index, confirm, m->valuestring, check) < 0)
      return -1;
  }
  return 0;
}

/* Was metric regressed in the earlier compare of --confirm? */
static int regressed_before(const rule *ru, const char *metric) {
  const cJSON *check = bench_index_find(&doc_index, ru->confirm, metric);
  const cJSON *v = member(check, "verdict");
  return cJSON_IsString(v) && strcmp(v->valuestring, "regressed") == 0;
}

static int is_failure(const char *verdict) {
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
  if (strcmp(rep_key, "mins_ms") == 0 && c->base.n >= FLOOR_REACH &&
      c->cur.n >= FLOOR_REACH) {
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

static void evaluate(check *c, const cJSON *current, const rule *ru) {
  double r = isnan(c->max_ratio) ? ru->max_ratio : c->max_ratio;
  double a = isnan(c->max_abs_ms) ? ru->max_abs_ms : c->max_abs_ms;
  c->max_ratio = r;
  c->max_abs_ms = a;
  const char *cur_row = row_status(current, c->path);
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
  int found = sampled_from_report(current, c->path, &c->cur) == 0;
  if (found && ru->more_count > 0) {
    /* pooled: the repetitions of every CURRENT report of this metric */
    for (int k = 0; k < ru->more_count; k++) {
      sampled extra;
      if (sampled_from_report(ru->more[k], c->path, &extra) != 0)
        continue;
      if (extra.n > 0 && c->cur.n > 0) {
        double *grown = realloc(c->cur.reps, (size_t)(c->cur.n + extra.n) * sizeof *grown);
        if (grown) {
          memcpy(grown + c->cur.n, extra.reps, (size_t)extra.n * sizeof *grown);
          c->cur.reps = grown;
          c->cur.n += extra.n;
        }
      }
      sampled_free(&extra);
    }
    bench_summary sum;
    if (c->kind == KIND_TIME && c->cur.n > 0 &&
        bench_summary_compute(c->cur.reps, c->cur.n, &sum) == 0) {
      c->cur.value = sum.median;
      c->cur.spread = MAD_TO_SIGMA * sum.mad;
      if (strcmp(rep_key, "mins_ms") == 0 && c->cur.n >= FLOOR_REACH) {
        /* the pooled floor and its reach */
        double *sorted = malloc((size_t)c->cur.n * sizeof *sorted);
        if (sorted) {
          memcpy(sorted, c->cur.reps, (size_t)c->cur.n * sizeof *sorted);
          qsort(sorted, (size_t)c->cur.n, sizeof *sorted, compare_doubles);
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
static double suite_speed_factor(const check_list *l, const cJSON *current, int *rows) {
  double *ratios = malloc((size_t)(l->count + 1) * sizeof *ratios);
  int n = 0;
  for (int i = 0; ratios && i < l->count; i++) {
    const check *c = &l->items[i];
    if (c->kind != KIND_TIME || c->base.n < 2 || !(c->base.value > 0))
      continue;
    sampled cur;
    if (sampled_from_report(current, c->path, &cur) == 0 && cur.n >= 2 && cur.value > 0) {
      ratios[n++] = cur.value / c->base.value;
    }
    sampled_free(&cur);
  }
  double g = 1.0;
  if (n >= 3) {
    qsort(ratios, (size_t)n, sizeof *ratios, compare_doubles);
    g = n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  }
  free(ratios);
  *rows = n;
  return g;
}

/* ---- mismatch and staleness ------------------------------------------------ */
typedef struct text_list {
  int count;
  char items[16][512];
} text_list;

static void add_text(text_list *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_text(text_list *t, const char *fmt, ...) {
  if (t->count == 16)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->items[t->count++], sizeof t->items[0], fmt, ap);
  va_end(ap);
}

/* Where a document keeps a machine key: a report's environment, a
 * baseline file's source. */
static const cJSON *machine_item(const doc *d, const char *key) {
  const char *holder = d->kind == DOC_REPORT ? "environment" : "source";
  return member(member(d->json, holder), key);
}

static void differ(text_list *t, const char *what, const char *key, const cJSON *b,
                   const cJSON *c) {
  if (!b || !c || cJSON_Compare(b, c, 1))
    return;
  char *bs = cJSON_PrintUnformatted(b), *cs = cJSON_PrintUnformatted(c);
  add_text(t, "%s: %s baseline=%s current=%s", what, key, bs ? bs : "?", cs ? cs : "?");
  free(bs);
  free(cs);
}

/* Differences that make timings incomparable (mismatches) and those that
 * only qualify them (notes). */
static void find_mismatches(const doc *base, const doc *cur, int subset, text_list *mismatch,
                            text_list *notes) {
  static const char *const profile[] = {"batch",         "channels",       "height",
                                        "width",         "tile_size",      "kmax",
                                        "steps",         "budget_b1",      "budget_b2",
                                        "budget_total",  "seed",           "ops",
                                        "scan_batch",    "scan_channels",  "index_src_rows",
                                        "index_width",   "index_rows",     "graph_replay"};
  static const char *const settings[] = {"warmup", "iters", "repetitions"};
  const cJSON *bc = member(base->json, "config");
  const cJSON *cc = member(cur->json, "config");
  for (size_t i = 0; i < sizeof profile / sizeof profile[0]; i++) {
    /* --ops checks a subset: the runs' own selections may differ */
    if (subset && strcmp(profile[i], "ops") == 0)
      continue;
    differ(mismatch, "profile", profile[i], member(bc, profile[i]), member(cc, profile[i]));
  }
  /* a report before --profile was of the default profile */
  cJSON *default_profile = cJSON_CreateString("default");
  const cJSON *bp = member(bc, "profile");
  const cJSON *cp = member(cc, "profile");
  differ(mismatch, "profile", "profile", bp ? bp : default_profile, cp ? cp : default_profile);
  cJSON_Delete(default_profile);
  differ(mismatch, "dtype", "dtype", member(bc, "dtype"), member(cc, "dtype"));
  /* a report before the timer key was timed by the backend */
  cJSON *backend_timer = cJSON_CreateString("backend");
  const cJSON *bt = member(bc, "timer");
  const cJSON *ct = member(cc, "timer");
  differ(mismatch, "timer", "timer", bt ? bt : backend_timer, ct ? ct : backend_timer);
  cJSON_Delete(backend_timer);
  differ(mismatch, "backend set", "backends", member(bc, "backends"), member(cc, "backends"));
  differ(mismatch, "machine", "cpu_model", machine_item(base, "cpu_model"),
         machine_item(cur, "cpu_model"));
  differ(mismatch, "machine", "cpu_cores", machine_item(base, "cpu_cores"),
         machine_item(cur, "cpu_cores"));
  const cJSON *bg = machine_item(base, "gpu"), *cg = machine_item(cur, "gpu");
  if (bg && cg) {
    differ(mismatch, "machine", "gpu.name", cJSON_IsObject(bg) ? member(bg, "name") : bg,
           cJSON_IsObject(cg) ? member(cg, "name") : cg);
  }
  /* the machine's identity (1.3: host, CPU, memory, machine-id and the
   * network devices' addresses): an absolute comparison holds on one
   * machine only. Without it on both sides (older reports) the host name
   * stands in: cloned VMs and containers share CPU models, and a renamed
   * host cannot be told from another one. */
  const cJSON *bid = machine_item(base, "machine_id"), *cid = machine_item(cur, "machine_id");
  if (bid && cid) {
    differ(mismatch, "machine", "machine_id", bid, cid);
    differ(mismatch, "machine", "memory_mb", machine_item(base, "memory_mb"),
           machine_item(cur, "memory_mb"));
  }
  differ(mismatch, "machine", "host", machine_item(base, "host"), machine_item(cur, "host"));
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    differ(notes, "measurement", settings[i], member(bc, settings[i]), member(cc, settings[i]));
  }
}

int bench_reports_mismatch(const cJSON *a, const cJSON *b, char *why, size_t why_size) {
  doc da = {"A", (cJSON *)a, DOC_REPORT}, db = {"B", (cJSON *)b, DOC_REPORT};
  text_list mismatch, notes;
  memset(&mismatch, 0, sizeof mismatch);
  memset(&notes, 0, sizeof notes);
  find_mismatches(&da, &db, 0, &mismatch, &notes);
  if (mismatch.count && why_size)
    snprintf(why, why_size, "%s", mismatch.items[0]);
  return mismatch.count;
}

/* The rows the checks name ("...rows.<backend>", a check's own path for a
 * row check), into rows (scope l); the strings are kept in *owned (caller
 * frees each and the array). 0, or -1 out of memory. */
static int index_rows(const check_list *l, bench_index *rows, char ***owned) {
  *owned = calloc((size_t)l->count + 1, sizeof **owned);
  if (!*owned)
    return -1;
  for (int i = 0; i < l->count; i++) {
    char *row = row_path_of(l->items[i].path);
    if (!row)
      row = strdup(l->items[i].path);
    if (!row)
      return -1;
    (*owned)[i] = row;
    if (bench_index_add(rows, l, row, row) < 0)
      return -1;
  }
  return 0;
}

static void find_staleness(const doc *base, const doc *cur, const check_list *l, text_list *stale) {
  if (schema_minor(base) < 1) {
    add_text(stale,
             "recorded with schema 1.%g (before repetitions: no noise "
             "estimate)",
             schema_minor(base));
  }
  static const char *const versions[] = {"backend_abi_version", "library_version"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *b = machine_item(base, versions[i]);
    const cJSON *c = machine_item(cur, versions[i]);
    if (!c)
      continue;
    if (!b) {
      add_text(stale, "records no %s (current %s)", versions[i],
               cJSON_IsString(c) ? c->valuestring : "");
      if (cJSON_IsNumber(c)) {
        snprintf(stale->items[stale->count - 1], sizeof stale->items[0],
                 "records no %s (current %g)", versions[i], c->valuedouble);
      }
    } else if (!cJSON_Compare(b, c, 1)) {
      char *bs = cJSON_PrintUnformatted(b), *cs = cJSON_PrintUnformatted(c);
      add_text(stale, "%s %s, current %s", versions[i], bs ? bs : "?", cs ? cs : "?");
      free(bs);
      free(cs);
    }
  }
  /* rows of the current suite the baseline does not know */
  int missing = 0;
  char first[512] = "";
  const cJSON *section, *entry, *row;
  char path[1024];
  bench_index rows;
  bench_index_init(&rows);
  char **owned = NULL;
  if (index_rows(l, &rows, &owned) != 0) {
    add_text(stale, "not checked for rows the baseline lacks: out of memory");
    goto out;
  }
  cJSON_ArrayForEach(section, member(cur->json, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, member(entry, "rows")) {
        snprintf(path, sizeof path, "benchmarks.%s.%s.rows.%s", section->string, entry->string,
                 row->string);
        if (!bench_index_find(&rows, l, path)) {
          if (!missing++)
            snprintf(first, sizeof first, "%.400s", path + 11);
        }
      }
    }
  }
out:
  for (int i = 0; owned && i < l->count; i++)
    free(owned[i]);
  free(owned);
  bench_index_free(&rows);
  if (missing) {
    add_text(stale, "lacks %d row(s) of the current suite (first: %s)", missing, first);
  }
}

/* ---- output ---------------------------------------------------------------- */
/* The name a check is shown under: its path, except that a row's time
 * compared by its floor (--statistic min) reads floor_ms, not the p50_ms
 * the path names. */
static void display_path(const check *c, char *buf, size_t size) {
  size_t len = strlen(c->path);
  if (c->kind == KIND_TIME && strcmp(rep_key, "mins_ms") == 0 && ends_with(c->path, ".p50_ms")) {
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

static double change_of(const check *c) {
  return (isfinite(c->cur.value) && isfinite(c->base.value) && c->base.value > 0)
             ? c->cur.value / c->base.value - 1.0
             : NAN;
}

static const char *verdict_label(const char *v) { return v; }

typedef struct outcome {
  int regressed, improved, unchanged, inconclusive, missing, failed, unconfirmed, other;
  int status_ok;
  const char *required, *current_status;
  text_list mismatch, notes, stale;
} outcome;

static char *render_markdown(const doc *base, const doc *cur, const check_list *l, const outcome *o,
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
  if (strcmp(rep_key, "mins_ms") == 0) {
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
    display_path(c, shown, sizeof shown);
    short_name(shown, name, sizeof name);
    format_interval(iv, sizeof iv, c);
    format_value(bv, sizeof bv, c->base.value, c->kind);
    format_value(cv, sizeof cv, c->cur.value, c->kind);
    double change = change_of(c);
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
         is_failure(c->verdict) ? "**" : "", v, is_failure(c->verdict) ? "**" : "", pv);
  }
#undef EMIT
  return bench_text_finish(&md);
}

static cJSON *summary_json(const doc *base, const doc *cur, const check_list *l, const outcome *o,
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
  cJSON_AddStringToObject(s, "statistic", strcmp(rep_key, "mins_ms") == 0 ? "min" : "median");
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
    display_path(c, shown, sizeof shown);
    cJSON_AddStringToObject(j, "metric", shown);
    cJSON_AddStringToObject(j, "path", c->path);
    cJSON_AddStringToObject(j, "kind", kind_name(c->kind));
    cJSON_AddStringToObject(j, "status", is_failure(c->verdict) ? "fail" : "pass");
    cJSON_AddStringToObject(j, "verdict", c->verdict);
    if (c->kind != KIND_ROW) {
      bench_json_number(j, "baseline", c->base.value, "no baseline value");
      bench_json_number(j, "allowed", c->allowed, "no current value");
      bench_json_number(j, "current", c->cur.value, "missing from the current report");
      bench_json_number(j, "regression_ratio", change_of(c), "baseline <= 0 or current missing");
      bench_json_number(j, "p_value", c->p_value,
                        strcmp(rep_key, "mins_ms") == 0
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
static int emit_baseline(const char *report_path, const char *out_path, const metric_names *m,
                         double max_ratio, double max_abs_ms) {
  doc d;
  int rc = load_doc(report_path, &d);
  if (rc != 0) {
    cJSON_Delete(d.json);
    return rc;
  }
  if (d.kind != DOC_REPORT) {
    cJSON_Delete(d.json);
    return unusable("[%s] is a baseline file; --emit-baseline reads a report", report_path);
  }
  check_list l = {0, 0, NULL};
  if (checks_from_report(d.json, m, &l) != 0) {
    cJSON_Delete(d.json);
    free_checks(&l);
    return unusable("out of memory");
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
  const cJSON *env = member(d.json, "environment");
  static const char *const report_keys[] = {"timestamp_utc", "producer"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *v = member(d.json, report_keys[i]);
    if (v)
      cJSON_AddItemToObject(source, report_keys[i], cJSON_Duplicate(v, 1));
  }
  static const char *const env_keys[] = {"host",      "cpu_model",       "cpu_cores",
                                         "memory_mb", "machine_id",      "machine_id_from",
                                         "gpu",       "library_version", "backend_abi_version"};
  for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
    const cJSON *v = member(env, env_keys[i]);
    if (v)
      cJSON_AddItemToObject(source, env_keys[i], cJSON_Duplicate(v, 1));
  }
  const cJSON *config = member(d.json, "config");
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
      const char *st = row_status(d.json, c->path);
      cJSON_AddStringToObject(item, "row_status", st ? st : "skipped");
      const cJSON *row = lookup(d.json, c->path);
      const cJSON *reason = member(row, "reason");
      if (cJSON_IsString(reason))
        cJSON_AddStringToObject(item, "reason", reason->valuestring);
    } else {
      cJSON_AddNumberToObject(item, "value", c->base.value);
      if (c->base.n > 0) {
        /* both per-repetition statistics, whichever --statistic reads */
        char *row_path = row_path_of(c->path);
        const cJSON *row = row_path ? lookup(d.json, row_path) : NULL;
        free(row_path);
        const cJSON *row_reps = member(row, "repetitions");
        cJSON *reps = cJSON_AddObjectToObject(item, "repetitions");
        cJSON_AddNumberToObject(reps, "n", c->base.n);
        static const char *const keys[] = {"medians_ms", "mins_ms"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
          const cJSON *a = member(row_reps, keys[k]);
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
  free_checks(&l);
  if (!text)
    return unusable("out of memory");
  rc = BENCH_EXIT_OK;
  char err[1024];
  if (bench_write_atomic(out_path ? out_path : "-", text, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench compare: --emit-baseline: %s\n", err);
    rc = BENCH_EXIT_USAGE;
  }
  free(text);
  return rc;
}

/* ---- subsets (--ops, --metrics) ------------------------------------------- */
/* The entry or section names of --ops. */
typedef struct op_names {
  int count;
  const char *names[BENCH_MAX_LIST];
} op_names;

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
static int keep_subset(check_list *l, const op_names *ops, const metric_names *m,
                       int baseline_file) {
  int kept = 0;
  for (int i = 0; i < l->count; i++) {
    check *c = &l->items[i];
    if (in_ops(ops, c->path) && (!baseline_file || metric_wanted(m, c))) {
      l->items[kept++] = *c;
    } else {
      free(c->path);
      sampled_free(&c->base);
    }
  }
  l->count = kept;
  if (kept == 0 && (ops->count || m->count)) {
    return unusable("--ops/--metrics: the baseline has no metric of the subset asked for");
  }
  return 0;
}

/* ---- command line ---------------------------------------------------------- */
enum {
  C_MAX_RATIO = 300,
  C_MAX_ABS_MS,
  C_ALPHA,
  C_ALLOW_MISMATCH,
  C_OUTPUT_JSON,
  C_OUTPUT_MD,
  C_CONFIRM,
  C_RELATIVE,
  C_EMIT,
  C_METRICS,
  C_QUIET,
  C_STATISTIC,
  C_OPS,
  C_HELP
};

static const struct option compare_flags[] = {
    {"max-ratio", required_argument, NULL, C_MAX_RATIO},
    {"max-abs-ms", required_argument, NULL, C_MAX_ABS_MS},
    {"alpha", required_argument, NULL, C_ALPHA},
    {"allow-mismatch", no_argument, NULL, C_ALLOW_MISMATCH},
    {"output-json", required_argument, NULL, C_OUTPUT_JSON},
    {"output", required_argument, NULL, C_OUTPUT_JSON},
    {"output-md", required_argument, NULL, C_OUTPUT_MD},
    {"confirm", required_argument, NULL, C_CONFIRM},
    {"relative", no_argument, NULL, C_RELATIVE},
    {"emit-baseline", no_argument, NULL, C_EMIT},
    {"metrics", required_argument, NULL, C_METRICS},
    {"quiet", no_argument, NULL, C_QUIET},
    {"statistic", required_argument, NULL, C_STATISTIC},
    {"ops", required_argument, NULL, C_OPS},
    {"help", no_argument, NULL, C_HELP},
    {NULL, 0, NULL, 0}};

static int parse_tolerance(const char *flag, const char *value, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (*value == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0 || v > hi) {
    fprintf(stderr,
            "apexx-bench compare: --%s: [%s] must be a finite number in "
            "[0, %g]\n",
            flag, value, hi);
    return 1;
  }
  *out = v;
  return 0;
}

static int compare_main(int argc, char **argv);

int bench_compare_main(int argc, char **argv) {
  bench_index_init(&doc_index);
  int rc = compare_main(argc, argv);
  /* the documents are freed: their pointers must not match later ones */
  bench_index_free(&doc_index);
  return rc;
}

static int compare_main(int argc, char **argv) {
  rule ru = {NAN, NAN, DEFAULT_ALPHA, NULL, 1.0, {NULL}, 0};
  int relative = 0;
  const char *output = NULL, *output_md = NULL, *confirm_path = NULL;
  int emit = 0, quiet = 0, allow_mismatch = 0;
  metric_names m = {0, {NULL}};
  op_names ops = {0, {NULL}};
  opterr = 0;
  optind = 1;
  rep_key = "medians_ms";
  for (;;) {
    int index = -1;
    int c = getopt_long(argc, argv, ":o:", compare_flags, &index);
    if (c == -1)
      break;
    switch (c) {
    case C_MAX_RATIO:
      if (parse_tolerance("max-ratio", optarg, 1e6, &ru.max_ratio))
        return BENCH_EXIT_USAGE;
      break;
    case C_MAX_ABS_MS:
      if (parse_tolerance("max-abs-ms", optarg, 1e9, &ru.max_abs_ms))
        return BENCH_EXIT_USAGE;
      break;
    case C_ALPHA:
      if (parse_tolerance("alpha", optarg, 1.0, &ru.alpha))
        return BENCH_EXIT_USAGE;
      break;
    case C_ALLOW_MISMATCH:
      allow_mismatch = 1;
      break;
    case C_CONFIRM:
      confirm_path = optarg;
      break;
    case C_RELATIVE:
      relative = 1;
      break;
    case 'o':
    case C_OUTPUT_JSON:
    case C_OUTPUT_MD:
      if (*optarg == '\0') {
        fprintf(stderr, "apexx-bench compare: %s: [] is an empty path\n", argv[optind - 1]);
        return BENCH_EXIT_USAGE;
      }
      if (c == C_OUTPUT_MD) {
        output_md = optarg;
      } else {
        output = optarg;
      }
      break;
    case C_EMIT:
      emit = 1;
      break;
    case C_METRICS: {
      m.count = 0;
      char *save = NULL;
      for (char *p = optarg;; p = NULL) {
        char *item = strtok_r(p, ",", &save);
        if (!item)
          break;
        if (m.count == BENCH_MAX_LIST) {
          fprintf(stderr, "apexx-bench compare: --metrics: too many names\n");
          return BENCH_EXIT_USAGE;
        }
        m.names[m.count++] = item;
      }
      if (m.count == 0) {
        fprintf(stderr, "apexx-bench compare: --metrics: [%s] is an empty list\n", optarg);
        return BENCH_EXIT_USAGE;
      }
      break;
    }
    case C_QUIET:
      quiet = 1;
      break;
    case C_OPS: {
      ops.count = 0;
      char *save = NULL;
      for (char *p = optarg;; p = NULL) {
        char *item = strtok_r(p, ",", &save);
        if (!item)
          break;
        if (ops.count == BENCH_MAX_LIST) {
          fprintf(stderr, "apexx-bench compare: --ops: too many names\n");
          return BENCH_EXIT_USAGE;
        }
        if (!bench_op_name_known(item)) {
          fprintf(stderr, "apexx-bench compare: --ops: [%s] is not an entry or section (", item);
          bench_print_op_names(stderr);
          fprintf(stderr, ")\n");
          return BENCH_EXIT_USAGE;
        }
        ops.names[ops.count++] = item;
      }
      if (ops.count == 0) {
        fprintf(stderr, "apexx-bench compare: --ops: [%s] is an empty list\n", optarg);
        return BENCH_EXIT_USAGE;
      }
      break;
    }
    case C_STATISTIC:
      if (strcmp(optarg, "median") == 0) {
        rep_key = "medians_ms";
      } else if (strcmp(optarg, "min") == 0) {
        rep_key = "mins_ms";
      } else {
        fprintf(stderr, "apexx-bench compare: --statistic: [%s] is neither median nor min\n",
                optarg);
        return BENCH_EXIT_USAGE;
      }
      break;
    case C_HELP:
      bench_print_usage(stdout);
      return BENCH_EXIT_OK;
    case ':':
      fprintf(stderr, "apexx-bench compare: %s: needs a value\n", argv[optind - 1]);
      return BENCH_EXIT_USAGE;
    default:
      fprintf(stderr, "apexx-bench compare: unknown flag [%s] (see --help)\n", argv[optind - 1]);
      return BENCH_EXIT_USAGE;
    }
  }
  int positional = argc - optind;
  if (emit) {
    if (positional != 1) {
      fprintf(stderr,
              "apexx-bench compare --emit-baseline: needs exactly one "
              "REPORT (got %d arguments)\n",
              positional);
      return BENCH_EXIT_USAGE;
    }
    return emit_baseline(argv[optind], output, &m, ru.max_ratio, ru.max_abs_ms);
  }
  if (positional < 2 || positional > 10) {
    fprintf(stderr,
            "apexx-bench compare: needs BASELINE and one to nine CURRENT "
            "reports (got %d arguments; see --help)\n",
            positional);
    return BENCH_EXIT_USAGE;
  }
  if (isnan(ru.max_ratio))
    ru.max_ratio = DEFAULT_MAX_RATIO;
  if (isnan(ru.max_abs_ms))
    ru.max_abs_ms = DEFAULT_MAX_ABS_MS;

  doc base = {NULL, NULL, DOC_REPORT}, cur = {NULL, NULL, DOC_REPORT};
  int rc = load_doc(argv[optind], &base);
  if (rc == 0)
    rc = load_doc(argv[optind + 1], &cur);
  if (rc == 0 && cur.kind != DOC_REPORT) {
    rc = unusable("[%s] is a baseline file; CURRENT must be a report", cur.path);
  }
  /* further CURRENT reports: their repetitions are pooled with CURRENT's;
   * each must be comparable with the first */
  doc more[8];
  int more_count = 0;
  for (int k = optind + 2; rc == 0 && k < argc; k++) {
    doc *m = &more[more_count];
    rc = load_doc(argv[k], m);
    if (rc == 0 && m->kind != DOC_REPORT) {
      rc = unusable("[%s] is a baseline file; CURRENT must be a report", m->path);
    }
    if (m->json)
      more_count++;
    if (rc == 0) {
      text_list mm, notes;
      memset(&mm, 0, sizeof mm);
      memset(&notes, 0, sizeof notes);
      find_mismatches(&cur, m, 0, &mm, &notes);
      if (mm.count) {
        rc = unusable("[%s] and [%s] cannot be pooled: %s", cur.path, m->path, mm.items[0]);
      }
    }
  }
  for (int k = 0; k < more_count; k++)
    ru.more[k] = more[k].json;
  ru.more_count = more_count;
  cJSON *confirm = NULL;
  if (rc == 0 && confirm_path) {
    char err[1024];
    char *text =
        bench_read_file(confirm_path, BENCH_MAX_REPORT_BYTES, "a compare summary", err, sizeof err);
    int readable = text != NULL;
    confirm = text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
    free(text);
    const cJSON *suite = member(confirm, "suite");
    if (!cJSON_IsString(suite) || strcmp(suite->valuestring, "apexx-compare") != 0 ||
        !cJSON_IsArray(member(confirm, "checks"))) {
      rc = unusable("--confirm: [%s] is not a compare summary (--output-json of an "
                    "earlier compare)%s%s",
                    confirm_path, readable ? "" : ": ", readable ? "" : err);
    } else if (bench_index_tree(&doc_index, confirm) != 0 || index_confirm(confirm) != 0) {
      rc = unusable("--confirm: [%s]: out of memory", confirm_path);
    }
    ru.confirm = confirm;
  }
  check_list l = {0, 0, NULL};
  outcome o;
  memset(&o, 0, sizeof o);
  o.required = "ok";
  if (rc == 0) {
    if (base.kind == DOC_REPORT) {
      if (checks_from_report(base.json, &m, &l) != 0)
        rc = unusable("out of memory");
    } else {
      rc = checks_from_baseline(&base, &l);
      const cJSON *req = member(base.json, "required_status");
      if (cJSON_IsString(req))
        o.required = req->valuestring;
    }
    if (rc == 0)
      rc = keep_subset(&l, &ops, &m, base.kind == DOC_BASELINE);
  }
  if (rc == 0) {
    find_mismatches(&base, &cur, ops.count > 0, &o.mismatch, &o.notes);
    for (int i = 0; i < o.notes.count; i++) {
      fprintf(stderr, "apexx-bench compare: note: %s\n", o.notes.items[i]);
    }
    for (int i = 0; i < o.mismatch.count; i++) {
      fprintf(stderr, "apexx-bench compare: %s: %s\n",
              allow_mismatch ? "mismatch (allowed)" : "mismatch", o.mismatch.items[i]);
    }
    int other_machine = 0;
    for (int i = 0; i < o.mismatch.count; i++)
      other_machine |= strncmp(o.mismatch.items[i], "machine:", 8) == 0;
    if (o.mismatch.count && !allow_mismatch) {
      rc = unusable("the reports are not comparable (%d mismatch(es) above); "
                    "pass --allow-mismatch to compare anyway%s",
                    o.mismatch.count,
                    other_machine ? ". Times recorded on another machine say nothing about "
                                    "this one: compare two builds on one machine with "
                                    "apexx-bench ab (make bench-ab)"
                                  : "");
    }
  }
  if (rc != 0) {
    free_checks(&l);
    cJSON_Delete(base.json);
    cJSON_Delete(cur.json);
    cJSON_Delete(confirm);
    for (int k = 0; k < more_count; k++)
      cJSON_Delete(more[k].json);
    return rc;
  }
  find_staleness(&base, &cur, &l, &o.stale);
  int speed_rows = 0;
  if (relative) {
    ru.scale = suite_speed_factor(&l, cur.json, &speed_rows);
    printf("compare relative: suite speed factor %.4g (current/baseline, median "
           "over %d rows); times are judged against the baseline times %.4g\n",
           ru.scale, speed_rows, ru.scale);
  }

  const cJSON *cs = member(cur.json, "status");
  o.current_status = cJSON_IsString(cs) ? cs->valuestring : NULL;
  o.status_ok = o.current_status && strcmp(o.current_status, o.required) == 0;
  int failed = o.status_ok ? 0 : 1;
  if (!quiet) {
    printf("check metric=__status__ status=%s expected=%s current=%s\n",
           o.status_ok ? "pass" : "fail", o.required, o.current_status ? o.current_status : "n/a");
  }
  for (int i = 0; i < l.count; i++) {
    check *c = &l.items[i];
    evaluate(c, cur.json, &ru);
    const char *v = c->verdict;
    if (is_failure(v))
      failed++;
    if (strcmp(v, "regressed") == 0)
      o.regressed++;
    else if (strcmp(v, "improved") == 0)
      o.improved++;
    else if (strcmp(v, "unchanged") == 0)
      o.unchanged++;
    else if (strcmp(v, "inconclusive") == 0)
      o.inconclusive++;
    else if (strcmp(v, "missing") == 0)
      o.missing++;
    else if (strcmp(v, "failed") == 0)
      o.failed++;
    else if (strcmp(v, "unconfirmed") == 0)
      o.unconfirmed++;
    else
      o.other++;
    if (quiet && !is_failure(v) && strcmp(v, "inconclusive") != 0)
      continue;
    char shown[1024];
    display_path(c, shown, sizeof shown);
    printf("check metric=%s kind=%s status=%s verdict=%s", shown, kind_name(c->kind),
           is_failure(v) ? "fail" : "pass", v);
    if (c->kind != KIND_ROW) {
      printf(" baseline=%.6g", c->base.value);
      if (isfinite(c->allowed)) {
        printf(" %s=%.6g", c->kind == KIND_RATE ? "allowed_min" : "allowed_max", c->allowed);
      }
      int absent = strcmp(v, "missing") == 0; /* no current value to show */
      if (isfinite(c->cur.value) && !absent)
        printf(" current=%.6g", c->cur.value);
      double change = absent ? NAN : change_of(c);
      if (isfinite(change))
        printf(" change=%+.1f%%", 100.0 * change);
      if (c->relative > 0 && c->relative != 1.0 && isfinite(change)) {
        printf(" relative_change=%+.1f%%", 100.0 * ((change + 1.0) / c->relative - 1.0));
      }
      if (isfinite(c->iv.ratio) && !absent)
        printf(" ratio=%.4g", c->iv.ratio);
      if (c->interval_rule && c->iv.coverage > 0 && !absent)
        printf(" interval=[%.4g,%.4g]", c->iv.lo, c->iv.hi);
      if (isfinite(c->p_value))
        printf(" p=%.3g", c->p_value);
      if (isfinite(c->band) && c->base.value > 0) {
        printf(" noise=+/-%.1f%%", 100.0 * c->band / c->base.value);
      }
    }
    printf("\n");
  }
  for (int i = 0; i < o.stale.count; i++) {
    printf("compare baseline_stale: %s\n", o.stale.items[i]);
  }
  if (o.stale.count) {
    printf("compare note: the baseline is stale; record a new one (make "
           "bench-baseline, or apexx-bench compare --emit-baseline REPORT -o "
           "FILE)\n");
  }
  printf("compare status=%s metrics=%d failed=%d regressed=%d improved=%d "
         "unchanged=%d inconclusive=%d missing=%d max_ratio=%g max_abs_ms=%g alpha=%g "
         "statistic=%s baseline=%s current=%s\n",
         failed           ? "fail"
         : o.inconclusive ? "inconclusive"
                          : "pass",
         l.count, failed, o.regressed, o.improved, o.unchanged, o.inconclusive, o.missing,
         ru.max_ratio, ru.max_abs_ms, ru.alpha,
         strcmp(rep_key, "mins_ms") == 0 ? "floor" : "median", base.path, cur.path);
  if (o.inconclusive && !failed) {
    printf("compare note: %d time(s) inconclusive: the samples could neither show a "
           "change of the threshold's size nor rule one out (more repetitions, or "
           "apexx-bench ab on one machine); exit %d\n",
           o.inconclusive, BENCH_EXIT_INCONCLUSIVE);
  }
  if (confirm_path) {
    printf("compare confirm=%s unconfirmed=%d (regressed now, not in the earlier "
           "run)\n",
           confirm_path, o.unconfirmed);
  }
  fflush(stdout);

  rc = failed ? BENCH_EXIT_FAILED : o.inconclusive ? BENCH_EXIT_INCONCLUSIVE : BENCH_EXIT_OK;
  if (output || output_md) {
    /* the Markdown is written only with the JSON (bench_write_pair): it
     * was written though the JSON had failed */
    char *json = NULL, *md = NULL;
    if (output) {
      cJSON *summary = summary_json(&base, &cur, &l, &o, &ru, failed);
      json = bench_report_print(summary);
      cJSON_Delete(summary);
    }
    if (output_md)
      md = render_markdown(&base, &cur, &l, &o, &ru, failed);
    if ((output && !json) || (output_md && !md)) {
      fprintf(stderr, "apexx-bench compare: out of memory rendering the outputs; neither "
                      "file was written\n");
      rc = BENCH_EXIT_USAGE;
    } else if (bench_write_pair("apexx-bench compare", output, json, output_md, md) != 0) {
      rc = BENCH_EXIT_USAGE;
    }
    free(json);
    free(md);
  }
  free_checks(&l);
  cJSON_Delete(base.json);
  cJSON_Delete(cur.json);
  cJSON_Delete(confirm);
  for (int k = 0; k < more_count; k++)
    cJSON_Delete(more[k].json);
  return rc;
}
