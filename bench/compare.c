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
#include "compare.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_RATIO 0.10
#define DEFAULT_MAX_ABS_MS 0.0
#define DEFAULT_ALPHA 0.05

/* The command line. */
typedef struct compare_opts {
  rule ru;
  int relative, emit, quiet, allow_mismatch;
  const char *output, *output_md, *confirm_path;
  metric_names m;
  op_names ops;
} compare_opts;

/* The documents of one comparison: BASELINE, CURRENT, further CURRENT
 * reports pooled with it, --confirm's summary. */
typedef struct inputs {
  doc base, cur;
  doc more[8];
  int more_count;
  cJSON *confirm;
} inputs;

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

/* --metrics or --ops LIST into names (ops: each must be an entry or a
 * section); 0, or an exit status after a message. */
static int parse_names(const char *flag, char *arg, const char **names, int *count, int ops) {
  *count = 0;
  char *save = NULL;
  for (char *p = arg;; p = NULL) {
    char *item = strtok_r(p, ",", &save);
    if (!item)
      break;
    if (*count == BENCH_MAX_LIST) {
      fprintf(stderr, "apexx-bench compare: --%s: too many names\n", flag);
      return BENCH_EXIT_USAGE;
    }
    if (ops && !bench_op_name_known(item)) {
      fprintf(stderr, "apexx-bench compare: --ops: [%s] is not an entry or section (", item);
      bench_print_op_names(stderr);
      fprintf(stderr, ")\n");
      return BENCH_EXIT_USAGE;
    }
    names[(*count)++] = item;
  }
  if (*count == 0) {
    fprintf(stderr, "apexx-bench compare: --%s: [%s] is an empty list\n", flag, arg);
    return BENCH_EXIT_USAGE;
  }
  return 0;
}

/* The flags into o; -1 to go on, else the exit status (after a message,
 * or after --help's usage). optind is left at the first operand. */
static int parse_flags(int argc, char **argv, compare_opts *o) {
  memset(o, 0, sizeof *o);
  o->ru = (rule){NAN, NAN, DEFAULT_ALPHA, NULL, 1.0, {NULL}, 0};
  opterr = 0;
  optind = 1;
  cmp_rep_key = "medians_ms";
  for (;;) {
    int index = -1;
    int c = getopt_long(argc, argv, ":ho:", compare_flags, &index);
    if (c == -1)
      break;
    switch (c) {
    case C_MAX_RATIO:
      if (parse_tolerance("max-ratio", optarg, 1e6, &o->ru.max_ratio))
        return BENCH_EXIT_USAGE;
      break;
    case C_MAX_ABS_MS:
      if (parse_tolerance("max-abs-ms", optarg, 1e9, &o->ru.max_abs_ms))
        return BENCH_EXIT_USAGE;
      break;
    case C_ALPHA:
      if (parse_tolerance("alpha", optarg, 1.0, &o->ru.alpha))
        return BENCH_EXIT_USAGE;
      break;
    case C_ALLOW_MISMATCH:
      o->allow_mismatch = 1;
      break;
    case C_CONFIRM:
      o->confirm_path = optarg;
      break;
    case C_RELATIVE:
      o->relative = 1;
      break;
    case 'o':
    case C_OUTPUT_JSON:
    case C_OUTPUT_MD:
      if (*optarg == '\0') {
        fprintf(stderr, "apexx-bench compare: %s: [] is an empty path\n", argv[optind - 1]);
        return BENCH_EXIT_USAGE;
      }
      if (c == C_OUTPUT_MD) {
        o->output_md = optarg;
      } else {
        o->output = optarg;
      }
      break;
    case C_EMIT:
      o->emit = 1;
      break;
    case C_METRICS:
      if (parse_names("metrics", optarg, o->m.names, &o->m.count, 0) != 0)
        return BENCH_EXIT_USAGE;
      break;
    case C_QUIET:
      o->quiet = 1;
      break;
    case C_OPS:
      if (parse_names("ops", optarg, o->ops.names, &o->ops.count, 1) != 0)
        return BENCH_EXIT_USAGE;
      break;
    case C_STATISTIC:
      if (strcmp(optarg, "median") == 0) {
        cmp_rep_key = "medians_ms";
      } else if (strcmp(optarg, "min") == 0) {
        cmp_rep_key = "mins_ms";
      } else {
        fprintf(stderr, "apexx-bench compare: --statistic: [%s] is neither median nor min\n",
                optarg);
        return BENCH_EXIT_USAGE;
      }
      break;
    case 'h':
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
  return -1;
}

/* --confirm SUMMARY: an earlier compare's --output-json, its checks
 * indexed by path. 0, or an exit status after a message. */
static int load_confirm(const char *path, cJSON **confirm) {
  char err[1024];
  char *text = bench_read_file(path, BENCH_MAX_REPORT_BYTES, "a compare summary", err, sizeof err);
  int readable = text != NULL;
  *confirm = text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
  free(text);
  const cJSON *suite = cmp_member(*confirm, "suite");
  if (!cJSON_IsString(suite) || strcmp(suite->valuestring, "apexx-compare") != 0 ||
      !cJSON_IsArray(cmp_member(*confirm, "checks"))) {
    return cmp_unusable("--confirm: [%s] is not a compare summary (--output-json of an "
                        "earlier compare)%s%s",
                        path, readable ? "" : ": ", readable ? "" : err);
  }
  if (bench_index_tree(&cmp_doc_index, *confirm) != 0 || cmp_index_confirm(*confirm) != 0)
    return cmp_unusable("--confirm: [%s]: out of memory", path);
  return 0;
}

/* BASELINE, CURRENT, further CURRENT reports (argv[first...]) and the
 * --confirm summary into in; 0, or an exit status after a message. */
static int load_inputs(int argc, char **argv, int first, compare_opts *opts, inputs *in) {
  int rc = cmp_load_doc(argv[first], &in->base);
  if (rc == 0)
    rc = cmp_load_doc(argv[first + 1], &in->cur);
  if (rc == 0 && in->cur.kind != DOC_REPORT) {
    rc = cmp_unusable("[%s] is a baseline file; CURRENT must be a report", in->cur.path);
  }
  /* further CURRENT reports: their repetitions are pooled with CURRENT's;
   * each must be comparable with the first */
  for (int k = first + 2; rc == 0 && k < argc; k++) {
    doc *m = &in->more[in->more_count];
    rc = cmp_load_doc(argv[k], m);
    if (rc == 0 && m->kind != DOC_REPORT) {
      rc = cmp_unusable("[%s] is a baseline file; CURRENT must be a report", m->path);
    }
    if (m->json)
      in->more_count++;
    if (rc == 0) {
      text_list mm, notes;
      memset(&mm, 0, sizeof mm);
      memset(&notes, 0, sizeof notes);
      cmp_find_mismatches(&in->cur, m, 0, &mm, &notes);
      if (mm.count) {
        rc = cmp_unusable("[%s] and [%s] cannot be pooled: %s", in->cur.path, m->path, mm.items[0]);
      }
    }
  }
  for (int k = 0; k < in->more_count; k++)
    opts->ru.more[k] = in->more[k].json;
  opts->ru.more_count = in->more_count;
  if (rc == 0 && opts->confirm_path) {
    rc = load_confirm(opts->confirm_path, &in->confirm);
    opts->ru.confirm = in->confirm;
  }
  return rc;
}

static void free_inputs(inputs *in) {
  cJSON_Delete(in->base.json);
  cJSON_Delete(in->cur.json);
  cJSON_Delete(in->confirm);
  for (int k = 0; k < in->more_count; k++)
    cJSON_Delete(in->more[k].json);
}

/* The checks of the baseline (a report's rows or a baseline file's
 * metrics), cut to the subset asked for. 0, or an exit status. */
static int select_checks(const compare_opts *opts, const inputs *in, check_list *l, outcome *o) {
  int rc = 0;
  if (in->base.kind == DOC_REPORT) {
    if (cmp_checks_from_report(in->base.json, &opts->m, l) != 0)
      rc = cmp_unusable("out of memory");
  } else {
    rc = cmp_checks_from_baseline(&in->base, l);
    const cJSON *req = cmp_member(in->base.json, "required_status");
    if (cJSON_IsString(req))
      o->required = req->valuestring;
  }
  if (rc == 0)
    rc = cmp_keep_subset(l, &opts->ops, &opts->m, in->base.kind == DOC_BASELINE);
  return rc;
}

/* The mismatches and notes on stderr; an exit status when a mismatch is
 * not allowed, else 0. */
static int check_comparable(const compare_opts *opts, const inputs *in, outcome *o) {
  cmp_find_mismatches(&in->base, &in->cur, opts->ops.count > 0, &o->mismatch, &o->notes);
  for (int i = 0; i < o->notes.count; i++) {
    fprintf(stderr, "apexx-bench compare: note: %s\n", o->notes.items[i]);
  }
  for (int i = 0; i < o->mismatch.count; i++) {
    fprintf(stderr, "apexx-bench compare: %s: %s\n",
            opts->allow_mismatch ? "mismatch (allowed)" : "mismatch", o->mismatch.items[i]);
  }
  int other_machine = 0;
  for (int i = 0; i < o->mismatch.count; i++)
    other_machine |= strncmp(o->mismatch.items[i], "machine:", 8) == 0;
  if (o->mismatch.count && !opts->allow_mismatch) {
    return cmp_unusable("the reports are not comparable (%d mismatch(es) above); "
                        "pass --allow-mismatch to compare anyway%s",
                        o->mismatch.count,
                        other_machine ? ". Times recorded on another machine say nothing about "
                                        "this one: compare two builds on one machine with "
                                        "apexx-bench ab (make bench-ab)"
                                      : "");
  }
  return 0;
}

/* One check's line on stdout. */
static void print_check(const check *c) {
  const char *v = c->verdict;
  char shown[1024];
  cmp_display_path(c, shown, sizeof shown);
  printf("check metric=%s kind=%s status=%s verdict=%s", shown, cmp_kind_name(c->kind),
         cmp_is_failure(v) ? "fail" : "pass", v);
  if (c->kind != KIND_ROW) {
    printf(" baseline=%.6g", c->base.value);
    if (isfinite(c->allowed)) {
      printf(" %s=%.6g", c->kind == KIND_RATE ? "allowed_min" : "allowed_max", c->allowed);
    }
    int absent = strcmp(v, "missing") == 0; /* no current value to show */
    if (isfinite(c->cur.value) && !absent)
      printf(" current=%.6g", c->cur.value);
    double change = absent ? NAN : cmp_change_of(c);
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

/* The status check and every check's verdict, counted into o and printed
 * (--quiet: the failing and inconclusive ones). Returns how many failed. */
static int judge_checks(const compare_opts *opts, const inputs *in, check_list *l, outcome *o) {
  const cJSON *cs = cmp_member(in->cur.json, "status");
  o->current_status = cJSON_IsString(cs) ? cs->valuestring : NULL;
  o->status_ok = o->current_status && strcmp(o->current_status, o->required) == 0;
  int failed = o->status_ok ? 0 : 1;
  if (!opts->quiet) {
    printf("check metric=__status__ status=%s expected=%s current=%s\n",
           o->status_ok ? "pass" : "fail", o->required,
           o->current_status ? o->current_status : "n/a");
  }
  for (int i = 0; i < l->count; i++) {
    check *c = &l->items[i];
    cmp_evaluate(c, in->cur.json, &opts->ru);
    const char *v = c->verdict;
    if (cmp_is_failure(v))
      failed++;
    if (strcmp(v, "regressed") == 0)
      o->regressed++;
    else if (strcmp(v, "improved") == 0)
      o->improved++;
    else if (strcmp(v, "unchanged") == 0)
      o->unchanged++;
    else if (strcmp(v, "inconclusive") == 0)
      o->inconclusive++;
    else if (strcmp(v, "missing") == 0)
      o->missing++;
    else if (strcmp(v, "failed") == 0)
      o->failed++;
    else if (strcmp(v, "unconfirmed") == 0)
      o->unconfirmed++;
    else
      o->other++;
    if (opts->quiet && !cmp_is_failure(v) && strcmp(v, "inconclusive") != 0)
      continue;
    print_check(c);
  }
  return failed;
}

/* The stale notes, the verdict line and its notes on stdout. */
static void print_totals(const compare_opts *opts, const inputs *in, const check_list *l,
                         const outcome *o, int failed) {
  for (int i = 0; i < o->stale.count; i++) {
    printf("compare baseline_stale: %s\n", o->stale.items[i]);
  }
  if (o->stale.count) {
    printf("compare note: the baseline is stale; record a new one (make "
           "bench-baseline, or apexx-bench compare --emit-baseline REPORT -o "
           "FILE)\n");
  }
  printf("compare status=%s metrics=%d failed=%d regressed=%d improved=%d "
         "unchanged=%d inconclusive=%d missing=%d max_ratio=%g max_abs_ms=%g alpha=%g "
         "statistic=%s baseline=%s current=%s\n",
         failed            ? "fail"
         : o->inconclusive ? "inconclusive"
                           : "pass",
         l->count, failed, o->regressed, o->improved, o->unchanged, o->inconclusive, o->missing,
         opts->ru.max_ratio, opts->ru.max_abs_ms, opts->ru.alpha,
         strcmp(cmp_rep_key, "mins_ms") == 0 ? "floor" : "median", in->base.path, in->cur.path);
  if (o->inconclusive && !failed) {
    printf("compare note: %d time(s) inconclusive: the samples could neither show a "
           "change of the threshold's size nor rule one out (more repetitions, or "
           "apexx-bench ab on one machine); exit %d\n",
           o->inconclusive, BENCH_EXIT_INCONCLUSIVE);
  }
  if (opts->confirm_path) {
    printf("compare confirm=%s unconfirmed=%d (regressed now, not in the earlier "
           "run)\n",
           opts->confirm_path, o->unconfirmed);
  }
  fflush(stdout);
}

/* --output-json and --output-md; 0, or -1 after a message. The Markdown
 * is written only with the JSON (bench_write_pair): it was written though
 * the JSON had failed. */
static int write_outputs(const compare_opts *opts, const inputs *in, const check_list *l,
                         const outcome *o, int failed) {
  if (!opts->output && !opts->output_md)
    return 0;
  char *json = NULL, *md = NULL;
  if (opts->output) {
    cJSON *summary = cmp_summary_json(&in->base, &in->cur, l, o, &opts->ru, failed);
    json = bench_report_print(summary);
    cJSON_Delete(summary);
  }
  if (opts->output_md)
    md = cmp_render_markdown(&in->base, &in->cur, l, o, &opts->ru, failed);
  int rc = 0;
  if ((opts->output && !json) || (opts->output_md && !md)) {
    fprintf(stderr, "apexx-bench compare: out of memory rendering the outputs; neither "
                    "file was written\n");
    rc = -1;
  } else if (bench_write_pair("apexx-bench compare", opts->output, json, opts->output_md, md) !=
             0) {
    rc = -1;
  }
  free(json);
  free(md);
  return rc;
}

static int compare_main(int argc, char **argv);

int bench_compare_main(int argc, char **argv) {
  bench_index_init(&cmp_doc_index);
  int rc = compare_main(argc, argv);
  /* the documents are freed: their pointers must not match later ones */
  bench_index_free(&cmp_doc_index);
  return rc;
}

static int compare_main(int argc, char **argv) {
  compare_opts opts;
  int rc = parse_flags(argc, argv, &opts);
  if (rc >= 0)
    return rc;
  int positional = argc - optind;
  if (opts.emit) {
    if (positional != 1) {
      fprintf(stderr,
              "apexx-bench compare --emit-baseline: needs exactly one "
              "REPORT (got %d arguments)\n",
              positional);
      return BENCH_EXIT_USAGE;
    }
    return cmp_emit_baseline(argv[optind], opts.output, &opts.m, opts.ru.max_ratio,
                             opts.ru.max_abs_ms);
  }
  if (positional < 2 || positional > 10) {
    fprintf(stderr,
            "apexx-bench compare: needs BASELINE and one to nine CURRENT "
            "reports (got %d arguments; see --help)\n",
            positional);
    return BENCH_EXIT_USAGE;
  }
  if (isnan(opts.ru.max_ratio))
    opts.ru.max_ratio = DEFAULT_MAX_RATIO;
  if (isnan(opts.ru.max_abs_ms))
    opts.ru.max_abs_ms = DEFAULT_MAX_ABS_MS;

  inputs in;
  memset(&in, 0, sizeof in);
  in.base.kind = in.cur.kind = DOC_REPORT;
  check_list l = {0, 0, NULL};
  outcome o;
  memset(&o, 0, sizeof o);
  o.required = "ok";
  rc = load_inputs(argc, argv, optind, &opts, &in);
  if (rc == 0)
    rc = select_checks(&opts, &in, &l, &o);
  if (rc == 0)
    rc = check_comparable(&opts, &in, &o);
  if (rc != 0) {
    cmp_free_checks(&l);
    free_inputs(&in);
    return rc;
  }
  cmp_find_staleness(&in.base, &in.cur, &l, &o.stale);
  int speed_rows = 0;
  if (opts.relative) {
    opts.ru.scale = cmp_suite_speed_factor(&l, in.cur.json, &speed_rows);
    printf("compare relative: suite speed factor %.4g (current/baseline, median "
           "over %d rows); times are judged against the baseline times %.4g\n",
           opts.ru.scale, speed_rows, opts.ru.scale);
  }
  int failed = judge_checks(&opts, &in, &l, &o);
  print_totals(&opts, &in, &l, &o, failed);
  rc = failed ? BENCH_EXIT_FAILED : o.inconclusive ? BENCH_EXIT_INCONCLUSIVE : BENCH_EXIT_OK;
  if (write_outputs(&opts, &in, &l, &o, failed) != 0)
    rc = BENCH_EXIT_USAGE;
  cmp_free_checks(&l);
  free_inputs(&in);
  return rc;
}
