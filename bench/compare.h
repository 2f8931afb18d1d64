/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench compare's files share these (docs/report.md, Compare):
 *   compare.c          the command line and the run of a comparison
 *   compare_doc.c      reading and checking a report or baseline file,
 *                      dotted-path lookups, metric kinds
 *   compare_checks.c   a metric's samples, the checks a baseline holds,
 *                      the --ops / --metrics subset
 *   compare_verdict.c  each check's verdict
 *   compare_mismatch.c what makes two reports incomparable, a baseline stale
 *   compare_output.c   the Markdown table, the JSON summary, --emit-baseline
 * Names shared between them start with cmp_. */
#ifndef APX_BENCH_COMPARE_H
#define APX_BENCH_COMPARE_H

#include "bench.h"

#define MAD_TO_SIGMA 1.4826
#define MAD_BANDS 3.0
/* --statistic min: the noise band of a floor is how far its FLOOR_REACH-th
 * fastest repetition lies above the fastest */
#define FLOOR_REACH 3

typedef enum metric_kind { KIND_TIME, KIND_RATE, KIND_OTHER, KIND_ROW } metric_kind;

typedef enum doc_kind { DOC_REPORT, DOC_BASELINE } doc_kind;

typedef struct doc {
  const char *path;
  cJSON *json;
  doc_kind kind;
} doc;

typedef struct sampled {
  double value;   /* the statistic compared: median of the repetitions */
  int n;          /* repetitions, 0 when none */
  double *reps;   /* per-repetition cmp_rep_key values (malloc'd), NULL when none */
  double spread;  /* absolute noise estimate, NAN when none */
  int spread_mad; /* spread is 1.4826*MAD (else p95 - p50 of a 1.0 row) */
} sampled;

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
  double p_value, band;      /* band: absolute, NAN when unknown */
  double relative;           /* the speed factor the verdict used (1: none) */
  double threshold;          /* the practical threshold as a ratio: R + A/baseline */
  bench_interval iv;         /* the ratio current/baseline and its interval */
  const char *interval_rule; /* how iv was found, NULL when there is none */
  double allowed;
} check;

typedef struct check_list {
  int count, cap;
  check *items;
} check_list;

/* Metric names taken from a report's ok rows: p50_ms (the time) unless
 * --metrics names others ("throughput" names the entry's). */
typedef struct metric_names {
  int count;
  const char *names[BENCH_MAX_LIST];
} metric_names;

typedef struct rule {
  double max_ratio, max_abs_ms, alpha;
  const cJSON *confirm; /* --confirm: an earlier compare's checks, or NULL */
  double scale;         /* --relative: the suite's speed factor, else 1 */
  const cJSON *more[8]; /* further CURRENT reports pooled with the first */
  int more_count;
} rule;

typedef struct text_list {
  int count;
  char items[16][512];
} text_list;

typedef struct outcome {
  int regressed, improved, unchanged, inconclusive, missing, failed, unconfirmed, other;
  int status_ok;
  const char *required, *current_status;
  text_list mismatch, notes, stale;
} outcome;

/* The entry or section names of --ops. */
typedef struct op_names {
  int count;
  const char *names[BENCH_MAX_LIST];
} op_names;

/* ---- documents (compare_doc.c) ------------------------------------------- */
const char *cmp_kind_name(metric_kind k);
int cmp_ends_with(const char *s, const char *suffix);
metric_kind cmp_kind_of_path(const char *path);
/* The members of the loaded documents' large objects (bench.h, lookups):
 * every lookup goes through it, so a metric costs the same in a report of
 * 20,000 rows as in one of 20. Objects compare builds itself are not
 * indexed and are searched directly. bench_compare_main makes and frees
 * it around each comparison. */
extern bench_index cmp_doc_index;
static inline const cJSON *cmp_member(const cJSON *obj, const char *key) {
  return bench_index_member(&cmp_doc_index, obj, key);
}
/* "unusable input" on stderr; returns BENCH_EXIT_USAGE. */
int cmp_unusable(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Read, parse and classify a file; 0 or an exit status after a message. */
int cmp_load_doc(const char *path, doc *d);
double cmp_schema_minor(const doc *d);
/* Dotted path lookup: "benchmarks.tile_ops.tilepack.rows.cpu.p50_ms". */
const cJSON *cmp_lookup(const cJSON *root, const char *path);
/* The row a metric path belongs to ("...rows.<backend>", malloc'd), or NULL. */
char *cmp_row_path_of(const char *path);
/* "ok", "skipped", "failed" of the row holding path, or NULL. */
const char *cmp_row_status(const cJSON *root, const char *path);

/* ---- checks (compare_checks.c) ------------------------------------------- */
/* The per-repetition statistic compared: "medians_ms" or (--statistic min)
 * "mins_ms", the key of a row's repetitions object. */
extern const char *cmp_rep_key;
void cmp_sampled_free(sampled *s);
int cmp_compare_doubles(const void *x, const void *y);
/* A metric of a report: the number at path, and for a row's p50_ms its
 * repetitions (1.1) or its p95 - p50 (1.0). 0, or -1 when absent. */
int cmp_sampled_from_report(const cJSON *report, const char *path, sampled *s);
void cmp_free_checks(check_list *l);
/* Walk benchmarks.<section>.<entry>.rows.<backend> of a report. 0, or -1
 * out of memory. */
int cmp_checks_from_report(const cJSON *report, const metric_names *m, check_list *out);
/* A baseline file's metrics; 0 or an exit status after a message. */
int cmp_checks_from_baseline(const doc *d, check_list *out);
/* Keep the checks of the subset; an exit status (after a message) when
 * none is left. */
int cmp_keep_subset(check_list *l, const op_names *ops, const metric_names *m, int baseline_file);

/* ---- verdicts (compare_verdict.c) ---------------------------------------- */
/* The checks of the earlier compare (--confirm) by path, into
 * cmp_doc_index. 0, or -1 out of memory. */
int cmp_index_confirm(const cJSON *confirm);
int cmp_is_failure(const char *verdict);
/* The verdict of c against the current report (and ru's pooled ones). */
void cmp_evaluate(check *c, const cJSON *current, const rule *ru);
/* --relative: the median over the rows of current/baseline time; 1 when
 * fewer than three rows have repetitions on both sides. */
double cmp_suite_speed_factor(const check_list *l, const cJSON *current, int *rows);

/* ---- comparability (compare_mismatch.c) ---------------------------------- */
/* Differences that make timings incomparable (mismatches) and those that
 * only qualify them (notes). */
void cmp_find_mismatches(const doc *base, const doc *cur, int subset, text_list *mismatch,
                         text_list *notes);
void cmp_find_staleness(const doc *base, const doc *cur, const check_list *l, text_list *stale);

/* ---- outputs (compare_output.c) ------------------------------------------ */
/* The name a check is shown under (floor_ms for a floor). */
void cmp_display_path(const check *c, char *buf, size_t size);
/* current/baseline - 1, or NAN. */
double cmp_change_of(const check *c);
char *cmp_render_markdown(const doc *base, const doc *cur, const check_list *l, const outcome *o,
                          const rule *ru, int failed);
cJSON *cmp_summary_json(const doc *base, const doc *cur, const check_list *l, const outcome *o,
                        const rule *ru, int failed);
/* compare --emit-baseline REPORT [-o out_path]: an exit status. */
int cmp_emit_baseline(const char *report_path, const char *out_path, const metric_names *m,
                      double max_ratio, double max_abs_ms);

#endif
