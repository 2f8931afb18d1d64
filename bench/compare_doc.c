/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare's documents (docs/report.md, Compare): metric kinds
 * by path, reading and checking a report or baseline file (duplicate keys,
 * non-finite numbers, negative times, the schema), and dotted-path lookups
 * through the hashed members of the loaded documents. */
#include "compare.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *cmp_kind_name(metric_kind k) {
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

int cmp_ends_with(const char *s, const char *suffix) {
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

metric_kind cmp_kind_of_path(const char *path) {
  if (cmp_ends_with(path, "_ms"))
    return KIND_TIME;
  if (cmp_ends_with(path, "_per_s"))
    return KIND_RATE; /* gb_per_s included */
  return KIND_OTHER;
}

/* ---- documents ----------------------------------------------------------- */
/* The members of the loaded documents' large objects (bench.h, lookups):
 * every lookup below goes through it, so a metric costs the same in a
 * report of 20,000 rows as in one of 20. Objects compare builds itself
 * are not indexed and are searched directly. */
bench_index cmp_doc_index;

int cmp_unusable(const char *fmt, ...) {
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
      return cmp_unusable("[%s]: %s = [%g] is not a finite number", file, where, node->valuedouble);
    }
    if (times && node->valuedouble < 0) {
      return cmp_unusable("[%s]: %s = [%g] is a negative time", file, where, node->valuedouble);
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
      return cmp_unusable("[%s]: %s has the key \"%s\" twice", file,
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
                          ? (child->string && (cmp_ends_with(child->string, "_ms") ||
                                               strcmp(child->string, "value") == 0))
                          : times;
    /* a baseline file's "value" is a time when its path is */
    if (cJSON_IsObject(node) && child->string && strcmp(child->string, "value") == 0) {
      const cJSON *p = cmp_member(node, "path");
      child_times = cJSON_IsString(p) && cmp_ends_with(p->valuestring, "_ms");
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
int cmp_load_doc(const char *path, doc *d) {
  char err[1024];
  d->path = path;
  d->json = NULL;
  char *text =
      bench_read_file(path, BENCH_MAX_REPORT_BYTES, "a report or baseline", err, sizeof err);
  if (!text)
    return cmp_unusable("%s", err);
  const char *end = NULL;
  d->json = cJSON_ParseWithOpts(text, &end, 1);
  if (!d->json) {
    long offset = end ? (long)(end - text) : -1;
    free(text);
    return cmp_unusable("[%s] is not valid JSON (error near byte %ld)", path, offset);
  }
  free(text);
  char where[2048] = "";
  int rc = check_tree(path, d->json, where, 0, sizeof where, 0);
  if (rc)
    return rc;
  if (bench_index_tree(&cmp_doc_index, d->json) != 0)
    return cmp_unusable("[%s]: out of memory", path);
  const cJSON *schema = cmp_member(d->json, "schema_version");
  const cJSON *major = cmp_member(schema, "major");
  if (!cJSON_IsObject(schema) || !cJSON_IsNumber(major)) {
    return cmp_unusable("[%s]: schema_version is not {major, minor} (not an apexx "
                        "report or baseline)",
                        path);
  }
  if (major->valuedouble != BENCH_SCHEMA_MAJOR) {
    return cmp_unusable("[%s]: schema_version.major = [%g]; this apexx-bench reads "
                        "major %d",
                        path, major->valuedouble, BENCH_SCHEMA_MAJOR);
  }
  const cJSON *kind = cmp_member(d->json, "kind");
  const cJSON *suite = cmp_member(d->json, "suite");
  if (cJSON_IsString(kind) && strcmp(kind->valuestring, BENCH_BASELINE_KIND) == 0) {
    if (!cJSON_IsArray(cmp_member(d->json, "metrics"))) {
      return cmp_unusable("[%s]: a baseline file needs a \"metrics\" array", path);
    }
    d->kind = DOC_BASELINE;
    return 0;
  }
  if (cJSON_IsString(suite) && strcmp(suite->valuestring, "apexx") == 0 &&
      cJSON_IsObject(cmp_member(d->json, "benchmarks")) &&
      cJSON_IsString(cmp_member(d->json, "status"))) {
    d->kind = DOC_REPORT;
    return 0;
  }
  return cmp_unusable("[%s] is neither an apexx report (suite \"apexx\", status, "
                      "benchmarks) nor a baseline file (kind \"%s\")",
                      path, BENCH_BASELINE_KIND);
}

double cmp_schema_minor(const doc *d) {
  const cJSON *m = cmp_member(cmp_member(d->json, "schema_version"), "minor");
  return cJSON_IsNumber(m) ? m->valuedouble : 0.0;
}

/* Dotted path lookup: "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms". */
const cJSON *cmp_lookup(const cJSON *root, const char *path) {
  char *copy = strdup(path);
  if (!copy)
    return NULL;
  const cJSON *node = root;
  char *save = NULL;
  for (char *seg = strtok_r(copy, ".", &save); seg && node; seg = strtok_r(NULL, ".", &save)) {
    node = cJSON_IsObject(node) ? cmp_member(node, seg) : NULL;
  }
  free(copy);
  return node;
}

/* The row a metric path belongs to ("...rows.<backend>"), or NULL. */
char *cmp_row_path_of(const char *path) {
  const char *rows = strstr(path, ".rows.");
  if (!rows)
    return NULL;
  const char *backend = rows + strlen(".rows.");
  size_t len = (size_t)(backend - path) + strcspn(backend, ".");
  return strndup(path, len);
}

/* "ok", "skipped", "failed" of the row holding path, or NULL. */
const char *cmp_row_status(const cJSON *root, const char *path) {
  char *row_path = cmp_row_path_of(path);
  if (!row_path)
    return NULL;
  const cJSON *row = cmp_lookup(root, row_path);
  free(row_path);
  const cJSON *status = cmp_member(row, "status");
  return cJSON_IsString(status) ? status->valuestring : NULL;
}
