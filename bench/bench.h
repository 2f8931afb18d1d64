/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench internals shared by its files: the options of a run, the
 * seeded input generator, statistics and parity, the report writers and
 * compare. One job per file:
 *   main.c         entry point, subcommands, exit status, the passes of
 *                  --repetitions and their merge
 *   flags.c        run flags and the profile (defaults, validation, --help)
 *   inputs.c       splitmix64 + Box-Muller generator, tile ids, fills
 *   stats.c        p50/p95/mean/min and parity against the cpu backend
 *   runner*.c, entries.c, cases.c, measure.c
 *                  entries, rows per backend, timing, report "benchmarks"
 *                  (runner.h names each file's job)
 *   report_json.c  the JSON report (docs/report.md)
 *   files.c        safe file writes, bounded non-blocking reads
 *   report_md.c    the Markdown summary, rendered from the JSON report
 *   text.c         growing text buffers of the renderers
 *   json_index.c   hashed member lookups and name sets of the readers
 *   compare*.c     `compare` and `compare --emit-baseline`: noise-aware
 *                  verdicts, the Markdown comparison table (compare.h
 *                  names each file's job)
 *   verdict.c      paired and unpaired intervals of a time ratio, the four
 *                  verdicts (regressed, improved, unchanged, inconclusive)
 *   ab*.c          `ab A B`: two builds' suites run alternately in
 *                  separate processes, verdicts from the paired rounds
 *                  (ab.h names each file's job)
 *   history.c      `history DIR` and `--history DIR`: the per-commit store
 *                  and its SVG/HTML chart
 * Exit status: 0 ok, 1 bad flags/config/unusable input, 2 failed row or
 * regression. */
#ifndef APEXX_BENCH_H
#define APEXX_BENCH_H

#include <apexx/apexx.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define BENCH_EXIT_OK 0
#define BENCH_EXIT_USAGE 1 /* bad flags, bad config, unusable input */
#define BENCH_EXIT_FAILED 2 /* a row failed, or compare found a regression */
/* compare and ab: nothing failed, but a verdict is inconclusive (neither a
 * pass nor a failure: docs/report.md, Exit status) */
#define BENCH_EXIT_INCONCLUSIVE 3

#define BENCH_SCHEMA_MAJOR 1
#define BENCH_SCHEMA_MINOR 5
#define BENCH_BASELINE_KIND "apexx-bench-baseline"
#define BENCH_DEFAULT_REPETITIONS 5

/* ---- options of a run (flags.c) ----------------------------------------- */
#define BENCH_MAX_LIST 32

typedef struct bench_options {
  /* the profile (docs/report.md, config) */
  int64_t batch, channels, height, width, tile_size, kmax, steps;
  double budget_b1, budget_b2, budget_total;
  const char *requested_dtype; /* as given: fp16|bf16|fp32|fp8 */
  apx_dtype dtype;             /* effective (fp8 falls back to fp16) */
  uint64_t seed;
  int warmup, iters;
  int repetitions; /* independent repetitions of each row's timed loop */
  int cpu_time;    /* --timer cpu-time: host rows timed on the process's CPU
                      clock (CLOCK_PROCESS_CPUTIME_ID), device rows skipped */
  /* --profile: "default", "seed" or "large" (flags.c, the presets) */
  const char *profile;
  /* the tilessm and indexing shapes: tokens [scan_batch, steps,
   * scan_channels]; src [index_src_rows, index_width], index_rows rows
   * picked. The default profile derives them from the map (batch,
   * channels; B*H*W, C, B*kmax*t*t); the presets set them. */
  int64_t scan_batch, scan_channels;
  int64_t index_src_rows, index_width, index_rows;
  int graph_replay; /* --graph-replay: device rows timed by graph replay */
  int parity;       /* --parity (default on): rows compared with the cpu backend */
  /* selection: entry or section names; backend names (0 = all) */
  int op_count;
  const char *ops[BENCH_MAX_LIST];
  int backend_count;
  const char *backends[BENCH_MAX_LIST];
  /* files */
  const char *config_path;
  const char *output_json;
  const char *output_md;
  const char *ff_weights_path; /* --ff-weights, else NULL: seeded */
  /* ff_infer's FFModule options (docs/ff_infer.md, Options): --ff-order,
   * --ff-overlap, --ff-blend-alpha, --ff-scan, as the op descriptor's
   * value names (hilbert, override, 0.5, bidirectional by default) */
  const char *ff_order, *ff_overlap, *ff_scan;
  double ff_blend_alpha;
  const char *history_dir;     /* --history DIR, else NULL */
  /* TensorRT */
  const char *trt_plugin_lib; /* flag, else $APEXX_TRT_PLUGIN_LIB, else NULL */
  const char *trt_engine_path;
  int trt_input_shape_count;
  const char *trt_input_shapes[BENCH_MAX_LIST];
  int quiet;
  int progress; /* --progress 1, --no-progress 0, else -1: on a terminal unless --quiet */
} bench_options;

/* Parse a run's flags into *opts (defaults first). Returns 0 to run,
 * -1 after --help/--version were printed (exit 0), or 1 after printing a
 * message naming the bad flag and value to stderr (exit 1). */
int bench_parse_flags(int argc, char **argv, bench_options *opts);
void bench_print_usage(FILE *to);
/* Names of the entries and sections --ops accepts (runner.c). */
int bench_op_name_known(const char *name);
void bench_print_op_names(FILE *to);

/* ---- seeded inputs (inputs.c) ------------------------------------------- */
/* splitmix64 (Steele, Lea, Flood 2014); documented in apexx-bench(1). */
typedef struct bench_rng {
  uint64_t state;
} bench_rng;
uint64_t bench_rng_next(bench_rng *rng);
/* (next >> 11) * 2^-53: uniform in [0, 1) */
double bench_rng_uniform(bench_rng *rng);
/* Box-Muller: sqrt(-2 ln(1-u1)) * cos(2 pi u2), two uniforms per value */
double bench_rng_normal(bench_rng *rng);
/* floor(u * n): uniform integer in [0, n) */
int64_t bench_rng_below(bench_rng *rng, int64_t n);

/* Store v into element i of a host tensor (RNE via fp32 for f16/bf16). */
void bench_set(const apx_tensor *t, int64_t i, double v);
/* Element i of a host tensor as double. */
double bench_get(const apx_tensor *t, int64_t i);
void bench_fill_normal(bench_rng *rng, const apx_tensor *t, double scale,
                       double offset);
void bench_fill_uniform(bench_rng *rng, const apx_tensor *t, double lo,
                        double hi);
/* Tile ids [B,K]: per batch row the first K entries of a Fisher-Yates
 * permutation of 0..grid-1 (drawing j = floor(u*(i+1)) for i = grid-1..1),
 * sorted ascending. Returns 0, or -1 when K > grid. */
int bench_fill_tile_ids(bench_rng *rng, const apx_tensor *ids, int64_t grid);

/* ---- statistics and parity (stats.c) ------------------------------------ */
typedef struct bench_stats {
  int n;
  double p50_ms, p95_ms, mean_ms, min_ms, max_ms;
} bench_stats;
/* docs/report.md, Timing: p50 = median (mean of the two middle values for an
 * even n); p95 = sorted[floor(0.95*(n-1))]. samples is not modified.
 * Returns 0, or -1 when n < 1 or memory runs out. */
int bench_stats_compute(const double *samples_ms, int n, bench_stats *out);

/* Summary of a row's per-repetition medians: min, median, p95 (13.1's
 * rule), MAD (median absolute deviation from the median, unscaled). */
typedef struct bench_summary {
  int n;
  double min, median, p95, mad;
} bench_summary;
/* Returns 0, or -1 when n < 1 or memory runs out. */
int bench_summary_compute(const double *values, int n, bench_summary *out);
/* Two-sided p-value of the Mann-Whitney U test of a against b: exact (the
 * permutation distribution of U) without ties and when na + nb <= 60, else
 * the normal approximation with the tie correction and a continuity
 * correction. Returns NAN when a side is empty. */
double bench_mann_whitney_p(const double *a, int na, const double *b, int nb);

typedef struct bench_parity {
  double max_abs_err;  /* max |got - ref| */
  double max_rel_err;  /* max |got - ref| / max(|ref|, atol) */
  int ok;
  int64_t bad_count;   /* elements outside the bound */
  int64_t first_bad;   /* flat index of the first, -1 when none */
  int64_t nan_count;   /* elements with a NaN on either side */
  int non_finite;      /* a NaN anywhere, or an infinity on one side only */
  double atol, rtol;   /* the dtype's bound (before the factor) */
  int factor;          /* the bound's multiple of (atol + rtol*|ref|) */
  int extra_ulps;      /* storage ulps of ref added to the bound */
} bench_parity;
/* Tolerances of docs/ops.md, Rounding and parity for a dtype (atol = rtol); 0 for
 * integer dtypes. */
double bench_parity_tolerance(apx_dtype dtype);
/* Compare got with ref (host tensors of one dtype and numel). exact: every
 * element bit-identical (copy ops); else |got-ref| <= 2*(atol + rtol*|ref|)
 * plus extra_ulps storage ulps of ref (transcendentals). A NaN on either
 * side breaks parity, copy ops included; infinities must be equal. */
void bench_parity_compare(const apx_tensor *ref, const apx_tensor *got,
                          int exact, int extra_ulps, bench_parity *out);
/* The same with factor*(atol + rtol*|ref|) + extra_ulps ulps (factor >= 1):
 * ff_infer's 4 and 4 (docs/ff_infer.md, the cuda backend's parity). */
void bench_parity_compare_bound(const apx_tensor *ref, const apx_tensor *got, int exact,
                                int factor, int extra_ulps, bench_parity *out);

/* ---- report (report_json.c) --------------------------------------------- */
/* The build's `git rev-parse HEAD`, or NULL outside a checkout. */
const char *bench_git_sha(void);
/* Add a number, or null plus "<key>_reason" when v is NaN or infinite. */
void bench_json_number(cJSON *obj, const char *key, double v,
                       const char *reason_if_not_finite);
/* Add a string or null. */
void bench_json_string_or_null(cJSON *obj, const char *key, const char *s);
/* A run's id (schema 1.3): 32 hex digits from getrandom, into buf (>= 33
 * bytes); the history store keeps one line per id. */
void bench_run_id(char *buf, size_t size);
/* "2026-02-08T17:34:26Z" for now, into buf (>= 32 bytes). */
void bench_timestamp_utc(char *buf, size_t size);
/* schema_version, suite, timestamp_utc, producer, environment, config,
 * backends of a run; "status" and "benchmarks" are the runner's. */
cJSON *bench_report_begin(apx_context *ctx, const bench_options *opts);
/* Render the whole report; caller frees. */
char *bench_report_print(const cJSON *report);

/* ---- files (files.c) ------------------------------------------------------ */
/* Safe writes of an output path:
 *   "-", /dev/stdout, /dev/stderr (and /dev/fd/N, /proc/self/fd/N)
 *                             the descriptor itself
 *   a new path, regular file  a temporary file in the same directory,
 *                             fsync, then rename (atomic)
 *   a symlink to a regular file
 *                             the same beside its target, renamed onto
 *                             the target; the link stays a link
 *   a character or block device, a FIFO (or a symlink to one)
 *                             written in place, never replaced (a
 *                             dangling symlink, or a FIFO with no reader,
 *                             is refused)
 *   a directory, a socket     refused with a message
 * bench_write_temp prepares (the temporary file, or nothing for in-place
 * and stdout targets), bench_commit_temp finishes (rename, or the in-place
 * write): a pair of outputs prepares both and then commits both. A failure
 * leaves no temporary file and an existing regular file untouched.
 * Returns 0, or -1 with a message in err. */
typedef enum bench_write_mode {
  BENCH_WRITE_NONE,
  BENCH_WRITE_RENAME,
  BENCH_WRITE_IN_PLACE,
  BENCH_WRITE_STDOUT
} bench_write_mode;
typedef struct bench_pending_file {
  char *tmp_path;
  char *final_path;
  bench_write_mode mode;
  char *text; /* in-place and stdout targets: written at commit */
  int fd;     /* BENCH_WRITE_STDOUT: 1 or 2 */
} bench_pending_file;
/* Temporary files of earlier writes to path (".NAME.tmp.XXXXXX" beside it)
 * that their writer left behind (a kill), older than max_age_s; removed.
 * Returns how many were removed. */
int bench_clean_stale_temps(const char *path, double max_age_s);
int bench_write_temp(const char *path, const char *text,
                     bench_pending_file *pending, char *err, size_t err_size);
int bench_commit_temp(bench_pending_file *pending, char *err, size_t err_size);
void bench_discard_temp(bench_pending_file *pending);
int bench_write_atomic(const char *path, const char *text, char *err,
                       size_t err_size);
/* Write a JSON text and its Markdown together (either path may be NULL):
 * both are prepared first, then committed JSON first, so a failure while
 * preparing or committing the JSON leaves neither file written, and a
 * failure of the Markdown's commit says the JSON was written. Stale
 * temporaries beside both are removed first. 0, or -1 after a message on
 * stderr prefixed with tool. */
int bench_write_pair(const char *tool, const char *json_path, const char *json, const char *md_path,
                     const char *md);
/* "a FIFO", "a directory", "a character device", ... for messages. */
const char *bench_file_kind(mode_t mode);
/* The most apexx-bench reads of one report, baseline or compare summary,
 * and of a history store (docs/report.md, Input limits). */
#define BENCH_MAX_REPORT_BYTES ((size_t)16 << 20)
#define BENCH_MAX_STORE_BYTES ((size_t)64 << 20)
/* Read a whole regular file of at most max_bytes (NUL-terminated). The
 * open does not block (a FIFO is refused, never waited on); a FIFO, a
 * device, a directory or a socket is refused, and so is a file over
 * max_bytes, from its size before reading. `what` names the file in
 * messages ("a report"). NULL with a message in err. */
char *bench_read_file(const char *path, size_t max_bytes, const char *what, char *err,
                      size_t err_size);

/* ---- growing text (text.c) ----------------------------------------------- */
typedef struct bench_text {
  char *data; /* NUL-terminated once anything was appended */
  size_t len, cap;
  int failed; /* an append ran out of memory: the text is incomplete */
} bench_text;
/* Append printf-style (nothing more once an append failed). */
void bench_text_append(bench_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_text_vappend(bench_text *t, const char *fmt, va_list ap);
/* The text, the caller's to free; NULL (and the text freed) when an
 * append failed or nothing was appended. */
char *bench_text_finish(bench_text *t);

/* ---- lookups (json_index.c) ---------------------------------------------- */
/* A hash table keyed by (scope, name): the members of a report's large
 * objects, and sets of names a reader keeps, so that finding a row or a
 * metric costs the same in a report of 20,000 rows as in one of 20.
 * Names and values are borrowed: they must outlive the index. */
typedef struct bench_index {
  struct bench_index_slot *slots;
  size_t cap, count;
} bench_index;
void bench_index_init(bench_index *ix);
void bench_index_free(bench_index *ix);
/* Index the members of every object under node with more than a few
 * (smaller ones are searched directly); of a key given twice the first
 * is found, as cJSON finds it. 0, or -1 out of memory. */
int bench_index_tree(bench_index *ix, const cJSON *node);
/* obj's member key: through the index when obj was indexed, else by
 * cJSON_GetObjectItemCaseSensitive. NULL when absent or obj is not an
 * object. ix may be NULL. */
const cJSON *bench_index_member(const bench_index *ix, const cJSON *obj, const char *key);
/* Add (scope, name) -> value (value not NULL): 1 when new, 0 when held
 * already (the first value stays), -1 out of memory. */
int bench_index_add(bench_index *ix, const void *scope, const char *name, const void *value);
/* The value of (scope, name), or NULL. */
const void *bench_index_find(const bench_index *ix, const void *scope, const char *name);

/* ---- markdown (report_md.c) --------------------------------------------- */
/* The Markdown summary of a report: header, backends, one table per section
 * with backends as columns; skipped/failed cells show their reason. */
char *bench_render_markdown(const cJSON *report);

/* ---- runner (runner.c) --------------------------------------------------- */
/* Run every selected entry on every configured backend and add "status" and
 * "benchmarks" to report. Returns 0 when every row ran or was skipped with
 * a reason, 2 when a row failed, 1 when the run was aborted (the report is
 * then not to be written; message in err). */
int bench_run(apx_context *ctx, const bench_options *opts, cJSON *report,
              char *err, size_t err_size);

/* ---- the copy reference (reference.c) ------------------------------------ */
/* Calls a graph-replay sample holds (docs/report.md, Timing). */
#define BENCH_GRAPH_CALLS 20
/* Give every ok row with gb_per_s a `pct_of_copy`: its GB/s as a percentage
 * of the same backend's reference.copy row in this report (docs/report.md,
 * Rows), or null with a reason when that row did not run. Run once the
 * passes are merged. */
void bench_add_copy_shares(cJSON *report);

/* ---- intervals and verdicts (verdict.c) --------------------------------- */
/* docs/report.md, Verdicts. A ratio is B's time over A's (current over
 * baseline): above 1 is slower. */
typedef enum bench_verdict {
  BENCH_UNCHANGED,
  BENCH_REGRESSED,
  BENCH_IMPROVED,
  BENCH_INCONCLUSIVE
} bench_verdict;
/* "unchanged", "regressed", "improved", "inconclusive" */
const char *bench_verdict_name(bench_verdict v);

typedef struct bench_interval {
  int n;             /* pairs used (paired); the smaller side (unpaired) */
  double ratio;      /* the estimate of B/A; NAN without samples */
  double lo, hi;     /* its confidence interval; 0 and INFINITY when the
                        samples are too few for the level asked */
  double coverage;   /* the interval's exact coverage (>= the level asked;
                        the normal approximation's level for large unpaired
                        samples), 0 without an interval */
} bench_interval;

/* Paired samples a[i], b[i] (round i's two times): the median of the
 * ratios b[i]/a[i] and the sign test's interval for it, the widest pair of
 * order statistics whose coverage is at least `confidence` (in (0, 1)).
 * Pairs with a time <= 0 or not finite are left out (n counts the rest).
 * Returns 0, or -1 on a bad confidence or no memory. */
int bench_paired_interval(const double *a, const double *b, int n, double confidence,
                          bench_interval *out);
/* Independent samples a (baseline) and b (current): the Hodges-Lehmann
 * ratio (median of every b[j]/a[i]) and the Mann-Whitney interval for it
 * (exact null distribution up to na*nb = 3600, else the normal
 * approximation). Returns 0, or -1 on a bad confidence or no memory. */
int bench_unpaired_interval(const double *a, int na, const double *b, int nb, double confidence,
                            bench_interval *out);
/* The verdict for a practical threshold t (0.10: 10%): regressed when the
 * ratio >= 1 + t and the interval lies above 1; improved when the ratio
 * <= 1/(1 + t) and the interval lies below 1; unchanged when the interval
 * lies inside (1/(1 + t), 1 + t); else (no interval included)
 * inconclusive. */
bench_verdict bench_judge(const bench_interval *iv, double threshold);
/* The fewest pairs whose sign-test interval reaches `confidence` (6 for
 * 0.95). */
int bench_min_pairs(double confidence);
/* For inconclusive pairs a[i], b[i], an estimate of how many more pairs
 * would settle the verdict if they were drawn like these: the fewest m
 * whose sign-test interval, placed at the matching quantiles of the
 * present ratios, lies settled (at least 1, at most 100000 in all: an
 * estimate on the threshold itself needs that many); 0 when it is settled
 * now; -1 on a bad confidence or no memory. */
int bench_rounds_to_settle(const double *a, const double *b, int n, double threshold,
                           double confidence);

/* ---- compare (compare.c) ------------------------------------------------- */
int bench_compare_main(int argc, char **argv);
/* The differences that make two reports' times incomparable (profile,
 * dtype, timer, backend set, machine: compare's mismatches): how many, the
 * first into why. */
int bench_reports_mismatch(const cJSON *a, const cJSON *b, char *why, size_t why_size);

/* ---- ab (ab.c) --------------------------------------------------------------- */
/* apexx-bench ab A B [flags] [-- RUN-FLAGS]: two builds run alternately
 * on this machine, paired verdicts per row (docs/report.md, A/B). */
int bench_ab_main(int argc, char **argv);

/* ---- history (history.c) ------------------------------------------------- */
/* apexx-bench history DIR [REPORT...] [--output F] */
int bench_history_main(int argc, char **argv);
/* Append a report's summary to the store in dir and re-render its chart
 * (dir/index.html). Returns 0, or -1 with a message in err. */
int bench_history_append(const char *dir, const cJSON *report, char *err,
                         size_t err_size);

#endif
