/* apexx-bench compare (spec/report.md "Compare", 13.6):
 *   compare BASELINE CURRENT [--max-ratio R] [--max-abs-ms A]
 *           [--output-json F] [--quiet]
 *   compare --emit-baseline REPORT [-o F] [--metrics LIST]
 *           [--max-ratio R] [--max-abs-ms A]
 * BASELINE is a full report or a baseline file (kind "apexx-bench-baseline":
 * a list of dotted metric paths with values). Per metric: times (*_ms,
 * lower is better) fail when current > base*(1+R) + A; rates (*_per_s,
 * higher is better) fail when current < base/(1+R); other numbers (MB,
 * bytes) are lower-is-better with the ratio only. A metric missing from
 * CURRENT fails unless its row is skipped in both; CURRENT's status must be
 * the baseline's required status ("ok"). Exit 0 pass, 2 regression, 1
 * unusable input (unreadable, malformed, wrong schema major). */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_RATIO 0.50
#define DEFAULT_MAX_ABS_MS 0.0

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
  if (ends_with(path, "_ms")) return KIND_TIME;
  if (ends_with(path, "_per_s")) return KIND_RATE; /* gb_per_s included */
  return KIND_OTHER;
}

/* ---- documents ----------------------------------------------------------- */
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

/* Read, parse and classify a file; 0 or an exit status after a message. */
static int load_doc(const char *path, doc *d) {
  char err[1024];
  d->path = path;
  d->json = NULL;
  char *text = bench_read_file(path, err, sizeof err);
  if (!text) return unusable("%s", err);
  const char *end = NULL;
  d->json = cJSON_ParseWithOpts(text, &end, 1);
  if (!d->json) {
    long offset = end ? (long)(end - text) : -1;
    free(text);
    return unusable("[%s] is not valid JSON (error near byte %ld)", path, offset);
  }
  free(text);
  const cJSON *schema = cJSON_GetObjectItemCaseSensitive(d->json, "schema_version");
  const cJSON *major = cJSON_GetObjectItemCaseSensitive(schema, "major");
  if (!cJSON_IsObject(schema) || !cJSON_IsNumber(major)) {
    return unusable("[%s]: schema_version is not {major, minor} (not an apexx "
                    "report or baseline)", path);
  }
  if (major->valuedouble != BENCH_SCHEMA_MAJOR) {
    return unusable("[%s]: schema_version.major = [%g]; this apexx-bench reads "
                    "major %d", path, major->valuedouble, BENCH_SCHEMA_MAJOR);
  }
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(d->json, "kind");
  const cJSON *suite = cJSON_GetObjectItemCaseSensitive(d->json, "suite");
  if (cJSON_IsString(kind) && strcmp(kind->valuestring, BENCH_BASELINE_KIND) == 0) {
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(d->json, "metrics"))) {
      return unusable("[%s]: a baseline file needs a \"metrics\" array", path);
    }
    d->kind = DOC_BASELINE;
    return 0;
  }
  if (cJSON_IsString(suite) && strcmp(suite->valuestring, "apexx") == 0 &&
      cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(d->json, "benchmarks")) &&
      cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d->json, "status"))) {
    d->kind = DOC_REPORT;
    return 0;
  }
  return unusable("[%s] is neither an apexx report (suite \"apexx\", status, "
                  "benchmarks) nor a baseline file (kind \"%s\")",
                  path, BENCH_BASELINE_KIND);
}

/* Dotted path lookup: "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms". */
static const cJSON *lookup(const cJSON *root, const char *path) {
  char *copy = strdup(path);
  if (!copy) return NULL;
  const cJSON *node = root;
  char *save = NULL;
  for (char *seg = strtok_r(copy, ".", &save); seg && node;
       seg = strtok_r(NULL, ".", &save)) {
    node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, seg) : NULL;
  }
  free(copy);
  return node;
}

/* The row a metric path belongs to ("...rows.<backend>"), or NULL. */
static char *row_path_of(const char *path) {
  const char *rows = strstr(path, ".rows.");
  if (!rows) return NULL;
  const char *backend = rows + strlen(".rows.");
  size_t len = (size_t)(backend - path) + strcspn(backend, ".");
  return strndup(path, len);
}

/* "ok", "skipped", "failed" of the row holding path, or NULL. */
static const char *row_status(const cJSON *root, const char *path) {
  char *row_path = row_path_of(path);
  if (!row_path) return NULL;
  const cJSON *row = lookup(root, row_path);
  free(row_path);
  const cJSON *status = cJSON_GetObjectItemCaseSensitive(row, "status");
  return cJSON_IsString(status) ? status->valuestring : NULL;
}

/* ---- the metrics of a baseline ------------------------------------------ */
typedef struct check {
  char *path;
  metric_kind kind;
  double baseline; /* NAN for a row marker */
  double max_ratio, max_abs_ms; /* NAN: use the command line's */
  int baseline_row_skipped;
  const char *status; /* pass, fail, missing, skipped, new, absent */
  double current, allowed;
} check;

typedef struct check_list {
  int count, cap;
  check *items;
} check_list;

static check *add_check(check_list *l, const char *path, metric_kind kind,
                        double value) {
  if (l->count == l->cap) {
    int cap = l->cap ? l->cap * 2 : 64;
    check *grown = realloc(l->items, (size_t)cap * sizeof *grown);
    if (!grown) return NULL;
    l->items = grown;
    l->cap = cap;
  }
  check *c = &l->items[l->count++];
  memset(c, 0, sizeof *c);
  c->path = strdup(path);
  c->kind = kind;
  c->baseline = value;
  c->max_ratio = c->max_abs_ms = NAN;
  c->current = c->allowed = NAN;
  return c;
}

static void free_checks(check_list *l) {
  for (int i = 0; i < l->count; i++) free(l->items[i].path);
  free(l->items);
}

/* Metric names taken from a report's ok rows: p50_ms, p95_ms, the entry's
 * throughput and gb_per_s unless --metrics names others. */
typedef struct metric_names {
  int count;
  const char *names[BENCH_MAX_LIST];
} metric_names;

static int wanted(const metric_names *m, const char *name, const char *throughput) {
  if (m->count == 0) {
    return strcmp(name, "p50_ms") == 0 || strcmp(name, "p95_ms") == 0 ||
           strcmp(name, "gb_per_s") == 0 ||
           (throughput && strcmp(name, throughput) == 0);
  }
  for (int i = 0; i < m->count; i++) {
    if (strcmp(m->names[i], name) == 0) return 1;
    if (strcmp(m->names[i], "throughput") == 0 && throughput &&
        strcmp(name, throughput) == 0) {
      return 1;
    }
  }
  return 0;
}

/* Walk benchmarks.<section>.<entry>.rows.<backend> of a report. */
static int checks_from_report(const cJSON *report, const metric_names *m,
                              check_list *out) {
  const cJSON *section, *entry, *row, *metric;
  char path[1024];
  cJSON_ArrayForEach(section, cJSON_GetObjectItemCaseSensitive(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      const cJSON *work = cJSON_GetObjectItemCaseSensitive(entry, "work");
      const cJSON *tp = cJSON_GetObjectItemCaseSensitive(work, "throughput");
      const char *throughput = cJSON_IsString(tp) ? tp->valuestring : NULL;
      cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(entry, "rows")) {
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(row, "status");
        snprintf(path, sizeof path, "benchmarks.%s.%s.rows.%s", section->string,
                 entry->string, row->string);
        if (!cJSON_IsString(status) || strcmp(status->valuestring, "ok") != 0) {
          check *c = add_check(out, path, KIND_ROW, NAN);
          if (!c) return -1;
          c->baseline_row_skipped = 1;
          continue;
        }
        cJSON_ArrayForEach(metric, row) {
          if (!wanted(m, metric->string, throughput)) continue;
          snprintf(path, sizeof path, "benchmarks.%s.%s.rows.%s.%s",
                   section->string, entry->string, row->string, metric->string);
          if (!cJSON_IsNumber(metric)) continue; /* null: nothing to hold to */
          if (!add_check(out, path, kind_of_path(path), metric->valuedouble)) {
            return -1;
          }
        }
      }
    }
  }
  return 0;
}

static int checks_from_baseline(const doc *d, check_list *out) {
  const cJSON *item;
  int i = 0;
  cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(d->json, "metrics")) {
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(item, "path");
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(item, "value");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(item, "row_status");
    if (!cJSON_IsString(path) || !*path->valuestring) {
      return unusable("[%s]: metrics[%d] has no \"path\" string", d->path, i);
    }
    int skipped_row = cJSON_IsString(rs) && strcmp(rs->valuestring, "ok") != 0;
    if (!skipped_row && !cJSON_IsNumber(value)) {
      return unusable("[%s]: metrics[%d] (%s) has no numeric \"value\"", d->path,
                      i, path->valuestring);
    }
    check *c = add_check(out, path->valuestring,
                         skipped_row ? KIND_ROW : kind_of_path(path->valuestring),
                         skipped_row ? NAN : value->valuedouble);
    if (!c) return unusable("out of memory");
    c->baseline_row_skipped = skipped_row;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(item, "max_ratio");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(item, "max_abs_ms");
    if (cJSON_IsNumber(r)) c->max_ratio = r->valuedouble;
    if (cJSON_IsNumber(a)) c->max_abs_ms = a->valuedouble;
    i++;
  }
  return 0;
}

/* ---- evaluation ------------------------------------------------------------ */
static void evaluate(check *c, const cJSON *current, double max_ratio,
                     double max_abs_ms) {
  double r = isnan(c->max_ratio) ? max_ratio : c->max_ratio;
  double a = isnan(c->max_abs_ms) ? max_abs_ms : c->max_abs_ms;
  c->max_ratio = r;
  c->max_abs_ms = a;
  const char *cur_row = row_status(current, c->path);
  if (c->kind == KIND_ROW) {
    /* the baseline's row was skipped: nothing to hold the current row to */
    if (!cur_row) {
      c->status = "absent";
    } else if (strcmp(cur_row, "skipped") == 0) {
      c->status = "skipped";
    } else if (strcmp(cur_row, "ok") == 0) {
      c->status = "new";
    } else {
      c->status = "fail";
    }
    return;
  }
  const cJSON *v = lookup(current, c->path);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
    c->status = (c->baseline_row_skipped && cur_row &&
                 strcmp(cur_row, "skipped") == 0)
                    ? "skipped"
                    : "missing";
    return;
  }
  c->current = v->valuedouble;
  switch (c->kind) {
  case KIND_TIME:
    c->allowed = c->baseline * (1.0 + r) + a;
    c->status = c->current <= c->allowed ? "pass" : "fail";
    break;
  case KIND_RATE:
    c->allowed = c->baseline / (1.0 + r);
    c->status = c->current >= c->allowed ? "pass" : "fail";
    break;
  default:
    c->allowed = c->baseline * (1.0 + r);
    c->status = c->current <= c->allowed ? "pass" : "fail";
    break;
  }
}

static int is_failure(const char *status) {
  return strcmp(status, "fail") == 0 || strcmp(status, "missing") == 0;
}

static void print_number(const char *key, double v) {
  if (isfinite(v)) {
    printf(" %s=%.6g", key, v);
  } else {
    printf(" %s=n/a", key);
  }
}

/* Profiles that differ make timings incomparable: say so (not fatal). */
static void note_config_differences(const cJSON *base_config,
                                    const cJSON *cur_config) {
  static const char *const keys[] = {"batch", "channels", "height", "width",
                                     "tile_size", "kmax", "steps", "dtype",
                                     "warmup", "iters"};
  if (!cJSON_IsObject(base_config) || !cJSON_IsObject(cur_config)) return;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(base_config, keys[i]);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cur_config, keys[i]);
    if (b && c && !cJSON_Compare(b, c, 1)) {
      char *bs = cJSON_PrintUnformatted(b), *cs = cJSON_PrintUnformatted(c);
      fprintf(stderr,
              "apexx-bench compare: note: profiles differ: %s baseline=%s "
              "current=%s\n",
              keys[i], bs ? bs : "?", cs ? cs : "?");
      free(bs);
      free(cs);
    }
  }
}

static cJSON *summary_json(const doc *base, const doc *cur, const check_list *l,
                           const char *required, const char *current_status,
                           int status_ok, int failed, double max_ratio,
                           double max_abs_ms) {
  cJSON *s = cJSON_CreateObject();
  cJSON *schema = cJSON_AddObjectToObject(s, "schema_version");
  cJSON_AddNumberToObject(schema, "major", BENCH_SCHEMA_MAJOR);
  cJSON_AddNumberToObject(schema, "minor", BENCH_SCHEMA_MINOR);
  cJSON_AddStringToObject(s, "suite", "apexx-compare");
  char stamp[32];
  bench_timestamp_utc(stamp, sizeof stamp);
  cJSON_AddStringToObject(s, "timestamp_utc", stamp);
  cJSON_AddStringToObject(s, "status", failed ? "fail" : "pass");
  cJSON_AddStringToObject(s, "baseline_file", base->path);
  cJSON_AddStringToObject(s, "current_file", cur->path);
  cJSON_AddStringToObject(s, "required_status", required);
  bench_json_string_or_null(s, "current_status", current_status);
  cJSON_AddNumberToObject(s, "max_ratio", max_ratio);
  cJSON_AddNumberToObject(s, "max_abs_ms", max_abs_ms);
  cJSON_AddNumberToObject(s, "total_metrics", l->count);
  cJSON_AddNumberToObject(s, "failed_metrics", failed - (status_ok ? 0 : 1));
  cJSON *checks = cJSON_AddArrayToObject(s, "checks");
  cJSON *st = cJSON_CreateObject();
  cJSON_AddStringToObject(st, "metric", "__status__");
  cJSON_AddStringToObject(st, "status", status_ok ? "pass" : "fail");
  cJSON_AddStringToObject(st, "expected", required);
  bench_json_string_or_null(st, "current", current_status);
  cJSON_AddItemToArray(checks, st);
  for (int i = 0; i < l->count; i++) {
    const check *c = &l->items[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "metric", c->path);
    cJSON_AddStringToObject(j, "kind", kind_name(c->kind));
    cJSON_AddStringToObject(j, "status", c->status);
    if (c->kind != KIND_ROW) {
      bench_json_number(j, "baseline", c->baseline, "no baseline value");
      bench_json_number(j, "allowed", c->allowed, "no current value");
      bench_json_number(j, "current", c->current, "missing from the current report");
      double ratio = (isfinite(c->current) && c->baseline > 0)
                         ? c->current / c->baseline - 1.0
                         : NAN;
      bench_json_number(j, "regression_ratio", ratio,
                        "baseline <= 0 or current missing");
      cJSON_AddNumberToObject(j, "max_ratio", c->max_ratio);
      if (c->kind == KIND_TIME) cJSON_AddNumberToObject(j, "max_abs_ms", c->max_abs_ms);
    }
    cJSON_AddItemToArray(checks, j);
  }
  return s;
}

/* ---- emit-baseline --------------------------------------------------------- */
static int emit_baseline(const char *report_path, const char *out_path,
                         const metric_names *m, double max_ratio,
                         double max_abs_ms) {
  doc d;
  int rc = load_doc(report_path, &d);
  if (rc != 0) {
    cJSON_Delete(d.json);
    return rc;
  }
  if (d.kind != DOC_REPORT) {
    cJSON_Delete(d.json);
    return unusable("[%s] is a baseline file; --emit-baseline reads a report",
                    report_path);
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
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(d.json, "environment");
  static const char *const report_keys[] = {"timestamp_utc", "producer"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d.json, report_keys[i]);
    if (v) cJSON_AddItemToObject(source, report_keys[i], cJSON_Duplicate(v, 1));
  }
  static const char *const env_keys[] = {"host", "cpu_model", "cpu_cores", "gpu"};
  for (size_t i = 0; i < 4; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(env, env_keys[i]);
    if (v) cJSON_AddItemToObject(source, env_keys[i], cJSON_Duplicate(v, 1));
  }
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(d.json, "config");
  if (config) cJSON_AddItemToObject(b, "config", cJSON_Duplicate(config, 1));
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
      const cJSON *reason = cJSON_GetObjectItemCaseSensitive(row, "reason");
      if (cJSON_IsString(reason)) cJSON_AddStringToObject(item, "reason", reason->valuestring);
    } else {
      cJSON_AddNumberToObject(item, "value", c->baseline);
      if (isfinite(max_ratio)) cJSON_AddNumberToObject(item, "max_ratio", max_ratio);
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
  if (!text) return unusable("out of memory");
  rc = BENCH_EXIT_OK;
  if (out_path) {
    char err[1024];
    if (bench_write_atomic(out_path, text, err, sizeof err) != 0) {
      fprintf(stderr, "apexx-bench compare: --emit-baseline: %s\n", err);
      rc = BENCH_EXIT_USAGE;
    }
  } else {
    fputs(text, stdout);
  }
  free(text);
  return rc;
}

/* ---- command line ---------------------------------------------------------- */
enum { C_MAX_RATIO = 300, C_MAX_ABS_MS, C_OUTPUT_JSON, C_EMIT, C_METRICS, C_QUIET, C_HELP };

static const struct option compare_flags[] = {
    {"max-ratio", required_argument, NULL, C_MAX_RATIO},
    {"max-abs-ms", required_argument, NULL, C_MAX_ABS_MS},
    {"output-json", required_argument, NULL, C_OUTPUT_JSON},
    {"output", required_argument, NULL, C_OUTPUT_JSON},
    {"emit-baseline", no_argument, NULL, C_EMIT},
    {"metrics", required_argument, NULL, C_METRICS},
    {"quiet", no_argument, NULL, C_QUIET},
    {"help", no_argument, NULL, C_HELP},
    {NULL, 0, NULL, 0}};

static int parse_tolerance(const char *flag, const char *value, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (*value == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0) {
    fprintf(stderr, "apexx-bench compare: --%s: [%s] must be a finite number >= 0\n",
            flag, value);
    return 1;
  }
  *out = v;
  return 0;
}

int bench_compare_main(int argc, char **argv) {
  double max_ratio = NAN, max_abs_ms = NAN;
  const char *output = NULL;
  int emit = 0, quiet = 0;
  metric_names m = {0, {NULL}};
  opterr = 0;
  optind = 1;
  for (;;) {
    int index = -1;
    int c = getopt_long(argc, argv, ":o:", compare_flags, &index);
    if (c == -1) break;
    switch (c) {
    case C_MAX_RATIO:
      if (parse_tolerance("max-ratio", optarg, &max_ratio)) return BENCH_EXIT_USAGE;
      break;
    case C_MAX_ABS_MS:
      if (parse_tolerance("max-abs-ms", optarg, &max_abs_ms)) return BENCH_EXIT_USAGE;
      break;
    case 'o':
    case C_OUTPUT_JSON:
      if (*optarg == '\0') {
        fprintf(stderr, "apexx-bench compare: %s: [] is an empty path\n",
                argv[optind - 1]);
        return BENCH_EXIT_USAGE;
      }
      output = optarg;
      break;
    case C_EMIT:
      emit = 1;
      break;
    case C_METRICS: {
      m.count = 0;
      char *save = NULL;
      for (char *p = optarg;; p = NULL) {
        char *item = strtok_r(p, ",", &save);
        if (!item) break;
        if (m.count == BENCH_MAX_LIST) {
          fprintf(stderr, "apexx-bench compare: --metrics: too many names\n");
          return BENCH_EXIT_USAGE;
        }
        m.names[m.count++] = item;
      }
      if (m.count == 0) {
        fprintf(stderr, "apexx-bench compare: --metrics: [%s] is an empty list\n",
                optarg);
        return BENCH_EXIT_USAGE;
      }
      break;
    }
    case C_QUIET:
      quiet = 1;
      break;
    case C_HELP:
      bench_print_usage(stdout);
      return BENCH_EXIT_OK;
    case ':':
      fprintf(stderr, "apexx-bench compare: %s: needs a value\n", argv[optind - 1]);
      return BENCH_EXIT_USAGE;
    default:
      fprintf(stderr, "apexx-bench compare: unknown flag [%s] (see --help)\n",
              argv[optind - 1]);
      return BENCH_EXIT_USAGE;
    }
  }
  int positional = argc - optind;
  if (emit) {
    if (positional != 1) {
      fprintf(stderr, "apexx-bench compare --emit-baseline: needs exactly one "
                      "REPORT (got %d arguments)\n", positional);
      return BENCH_EXIT_USAGE;
    }
    return emit_baseline(argv[optind], output, &m, max_ratio, max_abs_ms);
  }
  if (positional != 2) {
    fprintf(stderr, "apexx-bench compare: needs BASELINE and CURRENT (got %d "
                    "arguments; see --help)\n", positional);
    return BENCH_EXIT_USAGE;
  }
  if (isnan(max_ratio)) max_ratio = DEFAULT_MAX_RATIO;
  if (isnan(max_abs_ms)) max_abs_ms = DEFAULT_MAX_ABS_MS;

  doc base = {NULL, NULL, DOC_REPORT}, cur = {NULL, NULL, DOC_REPORT};
  int rc = load_doc(argv[optind], &base);
  if (rc == 0) rc = load_doc(argv[optind + 1], &cur);
  if (rc == 0 && cur.kind != DOC_REPORT) {
    rc = unusable("[%s] is a baseline file; CURRENT must be a report", cur.path);
  }
  check_list l = {0, 0, NULL};
  const char *required = "ok";
  if (rc == 0) {
    if (base.kind == DOC_REPORT) {
      if (checks_from_report(base.json, &m, &l) != 0) rc = unusable("out of memory");
    } else {
      rc = checks_from_baseline(&base, &l);
      const cJSON *req = cJSON_GetObjectItemCaseSensitive(base.json, "required_status");
      if (cJSON_IsString(req)) required = req->valuestring;
    }
  }
  if (rc != 0) {
    free_checks(&l);
    cJSON_Delete(base.json);
    cJSON_Delete(cur.json);
    return rc;
  }
  note_config_differences(cJSON_GetObjectItemCaseSensitive(base.json, "config"),
                          cJSON_GetObjectItemCaseSensitive(cur.json, "config"));

  const cJSON *cs = cJSON_GetObjectItemCaseSensitive(cur.json, "status");
  const char *current_status = cJSON_IsString(cs) ? cs->valuestring : NULL;
  int status_ok = current_status && strcmp(current_status, required) == 0;
  int failed = status_ok ? 0 : 1;
  if (!quiet) {
    printf("check metric=__status__ status=%s expected=%s current=%s\n",
           status_ok ? "pass" : "fail", required,
           current_status ? current_status : "n/a");
  }
  for (int i = 0; i < l.count; i++) {
    check *c = &l.items[i];
    evaluate(c, cur.json, max_ratio, max_abs_ms);
    if (is_failure(c->status)) failed++;
    if (quiet && !is_failure(c->status)) continue;
    printf("check metric=%s kind=%s status=%s", c->path, kind_name(c->kind), c->status);
    if (c->kind != KIND_ROW) {
      print_number("baseline", c->baseline);
      print_number(c->kind == KIND_RATE ? "allowed_min" : "allowed_max", c->allowed);
      print_number("current", c->current);
      if (isfinite(c->current) && c->baseline > 0) {
        printf(" change=%+.1f%%", 100.0 * (c->current / c->baseline - 1.0));
      }
    }
    printf("\n");
  }
  printf("compare status=%s metrics=%d failed=%d max_ratio=%g max_abs_ms=%g "
         "baseline=%s current=%s\n",
         failed ? "fail" : "pass", l.count, failed, max_ratio, max_abs_ms,
         base.path, cur.path);

  rc = failed ? BENCH_EXIT_FAILED : BENCH_EXIT_OK;
  if (output) {
    cJSON *summary = summary_json(&base, &cur, &l, required, current_status,
                                  status_ok, failed, max_ratio, max_abs_ms);
    char *text = bench_report_print(summary);
    cJSON_Delete(summary);
    char err[1024];
    if (!text || bench_write_atomic(output, text, err, sizeof err) != 0) {
      fprintf(stderr, "apexx-bench compare: --output-json: %s\n",
              text ? err : "out of memory");
      rc = BENCH_EXIT_USAGE;
    }
    free(text);
  }
  free_checks(&l);
  cJSON_Delete(base.json);
  cJSON_Delete(cur.json);
  return rc;
}
