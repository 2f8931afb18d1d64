/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench ab (docs/report.md, A/B; apexx-bench(1) "A/B"):
 *   apexx-bench ab A B [--rounds N] [--until-settled MAX] [--passes P]
 *                      [--threshold T] [--confidence C] [--statistic min|median]
 *                      [--order alternate|random] [--a-env NAME=VALUE]...
 *                      [--b-env NAME=VALUE]... [--output-json F] [--output-md F]
 *                      [--quiet] [-- RUN-FLAGS...]
 * A and B are builds: a build tree (bench/apexx-bench, backends/.libs) or
 * an install prefix (bin/apexx-bench, lib/apexx). Each round runs A's and
 * B's own apexx-bench once each, in separate processes, one right after the
 * other (A B, then B A: the order alternates so that a position effect
 * cancels), with RUN-FLAGS and --repetitions P; a process's value for a
 * row is its floor over the passes after the first (the first warms the
 * process: page faults, caches). Round i gives every row a pair (A_i, B_i)
 * measured within seconds of each other, so a machine that drifts or is
 * loaded for a while slows both; the verdict per row comes from the paired
 * ratios B_i/A_i (bench/verdict.c). A probe round first runs each side
 * once (one pass, not judged): it checks that both accept the flags, that
 * their profiles match, and that each runs its own libapexx.
 * Exit status: 0 every row unchanged or improved; 2 a row regressed,
 * missing in B or failed; 3 no failure but a row inconclusive; 1 bad
 * flags, a side that is not a build, a process that could not run, or
 * sides of different profiles. */
#include "config.h"

#include "ab.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AB_DEFAULT_ROUNDS 10
#define AB_DEFAULT_PASSES 3
#define AB_DEFAULT_THRESHOLD 0.10
/* 99%: under load (the development VM at 8 to 15 on 2 cores) one of three
 * unchanged runs had a row "regressed" by its 95% interval after 10 rounds
 * (bench/results/README.md) */
#define AB_DEFAULT_CONFIDENCE 0.99

/* ---- command line ---------------------------------------------------------- */
enum {
  O_ROUNDS = 400,
  O_UNTIL,
  O_PASSES,
  O_THRESHOLD,
  O_CONFIDENCE,
  O_STATISTIC,
  O_ORDER,
  O_A_ENV,
  O_B_ENV,
  O_OUTPUT_JSON,
  O_OUTPUT_MD,
  O_QUIET,
  O_HELP
};

static const struct option ab_flags[] = {{"rounds", required_argument, NULL, O_ROUNDS},
                                         {"until-settled", required_argument, NULL, O_UNTIL},
                                         {"passes", required_argument, NULL, O_PASSES},
                                         {"threshold", required_argument, NULL, O_THRESHOLD},
                                         {"confidence", required_argument, NULL, O_CONFIDENCE},
                                         {"statistic", required_argument, NULL, O_STATISTIC},
                                         {"order", required_argument, NULL, O_ORDER},
                                         {"a-env", required_argument, NULL, O_A_ENV},
                                         {"b-env", required_argument, NULL, O_B_ENV},
                                         {"output-json", required_argument, NULL, O_OUTPUT_JSON},
                                         {"output-md", required_argument, NULL, O_OUTPUT_MD},
                                         {"quiet", no_argument, NULL, O_QUIET},
                                         {"help", no_argument, NULL, O_HELP},
                                         {NULL, 0, NULL, 0}};

static void ab_usage(FILE *to) {
  fprintf(to,
          "usage: apexx-bench ab A B [--rounds N] [--until-settled MAX] [--passes P]\n"
          "         [--threshold T] [--confidence C] [--statistic min|median]\n"
          "         [--order alternate|random] [--a-env NAME=VALUE]... [--b-env NAME=VALUE]...\n"
          "         [--output-json F] [--output-md F] [--quiet] [-h | --help] [-- RUN-FLAGS...]\n"
          "A and B: build trees (bench/apexx-bench) or install prefixes (bin/apexx-bench).\n"
          "Each round runs A's and B's apexx-bench once each (alternating which goes first)\n"
          "with RUN-FLAGS and --repetitions P; the verdict per row is the paired ratio B/A\n"
          "with its sign-test interval: regressed, improved, unchanged or inconclusive.\n"
          "Defaults: 10 rounds, 3 passes (the first a warm-up), threshold 0.10, confidence\n"
          "0.99, statistic min (a process's floor). Exit: 0 pass, 2 regressed/missing/failed,\n"
          "3 inconclusive, 1 unusable input (apexx-bench(1), A/B).\n");
}

static int parse_int(const char *flag, const char *text, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (!*text || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "apexx-bench ab: --%s: [%s] is not an integer in [%d, %d]\n", flag, text, lo,
            hi);
    return 1;
  }
  *out = (int)v;
  return 0;
}

static int parse_fraction(const char *flag, const char *text, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (!*text || *end || errno || !isfinite(v) || !(v > lo && v < hi)) {
    fprintf(stderr, "apexx-bench ab: --%s: [%s] is not a number in (%g, %g)\n", flag, text, lo, hi);
    return 1;
  }
  *out = v;
  return 0;
}

static int add_env(side *s, const char *flag, const char *item) {
  size_t name_len = strcspn(item, "=");
  if (name_len == 0 || item[name_len] != '=') {
    fprintf(stderr, "apexx-bench ab: --%s: [%s] is not NAME=VALUE\n", flag, item);
    return 1;
  }
  if (s->env_count == AB_MAX_ENV) {
    fprintf(stderr, "apexx-bench ab: --%s: at most %d variables\n", flag, AB_MAX_ENV);
    return 1;
  }
  s->env[s->env_count++] = item;
  return 0;
}

/* RUN-FLAGS that ab sets itself. */
static int run_flag_refused(const char *flag) {
  static const char *const own[] = {"--repetitions", "--output-json", "--output-md", "--history",
                                    "--quiet"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
    size_t n = strlen(own[i]);
    if (strncmp(flag, own[i], n) == 0 && (flag[n] == '\0' || flag[n] == '='))
      return 1;
  }
  return 0;
}

static int write_text(const char *flag, const char *path, const char *text) {
  char err[1024];
  if (!text) {
    fprintf(stderr, "apexx-bench ab: %s: out of memory\n", flag);
    return 1;
  }
  if (bench_write_atomic(path, text, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench ab: %s: %s\n", flag, err);
    return 1;
  }
  return 0;
}

/* Check the probe reports: the same profile, each side its own libapexx. */
static int check_sides(const side *a, const side *b) {
  char why[600];
  if (bench_reports_mismatch(a->probe, b->probe, why, sizeof why) != 0) {
    fprintf(stderr,
            "apexx-bench ab: A and B did not measure the same thing: %s (their run "
            "flags are the same: the builds' defaults differ)\n",
            why);
    return 1;
  }
  const char *la = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(a->probe, "environment"), "library_path"));
  const char *lb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(b->probe, "environment"), "library_path"));
  if (la && lb && strcmp(la, lb) == 0 && strcmp(a->dir, b->dir) != 0) {
    fprintf(stderr,
            "apexx-bench ab: A [%s] and B [%s] both ran the libapexx [%s]: one side "
            "does not load its own library (its run path, or LD_LIBRARY_PATH)\n",
            a->dir, b->dir, la);
    return 1;
  }
  return 0;
}

/* ab's flags (those before "--") into st, the sides' environments and
 * the outputs; -1 to go on, else the exit status (after a message, or
 * after --help's usage). optind is left at the first operand. */
static int parse_ab_flags(int dashes, char **argv, ab_settings *st, side *a, side *b,
                          const char **output_json, const char **output_md, int *quiet) {
  opterr = 0;
  optind = 1;
  for (;;) {
    int c = getopt_long(dashes, argv, ":h", ab_flags, NULL);
    if (c == -1)
      break;
    int bad = 0;
    switch (c) {
    case O_ROUNDS:
      bad = parse_int("rounds", optarg, 1, AB_MAX_ROUNDS, &st->rounds);
      break;
    case O_UNTIL:
      bad = parse_int("until-settled", optarg, 1, AB_MAX_ROUNDS, &st->until_settled);
      break;
    case O_PASSES:
      bad = parse_int("passes", optarg, 1, 1000, &st->passes);
      break;
    case O_THRESHOLD:
      bad = parse_fraction("threshold", optarg, 0.0, 10.0, &st->threshold);
      break;
    case O_CONFIDENCE:
      bad = parse_fraction("confidence", optarg, 0.5, 1.0, &st->confidence);
      break;
    case O_STATISTIC:
      if (strcmp(optarg, "min") == 0) {
        st->floor_statistic = 1;
      } else if (strcmp(optarg, "median") == 0) {
        st->floor_statistic = 0;
      } else {
        fprintf(stderr, "apexx-bench ab: --statistic: [%s] is neither min nor median\n", optarg);
        bad = 1;
      }
      break;
    case O_ORDER:
      if (strcmp(optarg, "alternate") == 0) {
        st->random_order = 0;
      } else if (strcmp(optarg, "random") == 0) {
        st->random_order = 1;
      } else {
        fprintf(stderr, "apexx-bench ab: --order: [%s] is neither alternate nor random\n", optarg);
        bad = 1;
      }
      break;
    case O_A_ENV:
      bad = add_env(a, "a-env", optarg);
      break;
    case O_B_ENV:
      bad = add_env(b, "b-env", optarg);
      break;
    case O_OUTPUT_JSON:
    case O_OUTPUT_MD:
      if (!*optarg) {
        fprintf(stderr, "apexx-bench ab: %s: [] is an empty path\n", argv[optind - 1]);
        bad = 1;
      }
      *(c == O_OUTPUT_JSON ? output_json : output_md) = optarg;
      break;
    case O_QUIET:
      *quiet = 1;
      break;
    case 'h':
    case O_HELP:
      ab_usage(stdout);
      return BENCH_EXIT_OK;
    case ':':
      fprintf(stderr, "apexx-bench ab: %s: needs a value\n", argv[optind - 1]);
      bad = 1;
      break;
    default:
      fprintf(stderr, "apexx-bench ab: unknown flag [%s] (run flags go after --; see --help)\n",
              argv[optind - 1]);
      bad = 1;
      break;
    }
    if (bad)
      return BENCH_EXIT_USAGE;
  }
  return -1;
}

/* The operands A B before "--" and the run flags after it into run;
 * -1 to go on, else the exit status after a message. */
static int check_operands(int argc, char **argv, int dashes, const ab_settings *st, ab_run *run) {
  if (dashes - optind != 2) {
    fprintf(stderr,
            "apexx-bench ab: needs two builds A and B before -- (got %d operand(s)%s%s%s); "
            "the run flags go after -- (apexx-bench ab A B -- --backends cpu ...)\n",
            dashes - optind, dashes - optind > 2 ? ": [" : "",
            dashes - optind > 2 ? argv[optind + 2] : "", dashes - optind > 2 ? "] is a third" : "");
    return BENCH_EXIT_USAGE;
  }
  if (dashes < argc) {
    run->flags = (const char *const *)argv + dashes + 1;
    run->flag_count = argc - dashes - 1;
  }
  if (run->flag_count > AB_MAX_RUN_FLAGS) {
    fprintf(stderr, "apexx-bench ab: at most %d run flags\n", AB_MAX_RUN_FLAGS);
    return BENCH_EXIT_USAGE;
  }
  for (int i = 0; i < run->flag_count; i++) {
    if (run_flag_refused(run->flags[i])) {
      fprintf(stderr,
              "apexx-bench ab: run flag [%s]: ab sets it (--passes sets the repetitions; "
              "--output-json and --output-md are ab's own)\n",
              run->flags[i]);
      return BENCH_EXIT_USAGE;
    }
  }
  if (st->until_settled && st->until_settled < st->rounds) {
    fprintf(stderr, "apexx-bench ab: --until-settled: [%d] is fewer than --rounds [%d]\n",
            st->until_settled, st->rounds);
    return BENCH_EXIT_USAGE;
  }
  return -1;
}

/* run->work: a scratch directory under $TMPDIR (or /tmp); 0, or -1
 * (after a message when it cannot be made). */
static int make_scratch(ab_run *run) {
  const char *tmp = getenv("TMPDIR");
  size_t len = strlen(tmp && *tmp ? tmp : "/tmp") + 32;
  run->work = malloc(len);
  if (!run->work)
    return -1;
  snprintf(run->work, len, "%s/apexx-ab.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(run->work)) {
    fprintf(stderr, "apexx-bench ab: cannot make a scratch directory [%s]: %s\n", run->work,
            strerror(errno));
    free(run->work);
    run->work = NULL;
    return -1;
  }
  return 0;
}

/* Rounds done .. target-1: each side once a round, the order alternating
 * (or random), both reports folded into the rows; 0, or -1 after a
 * message. */
static int run_rounds(side *a, side *b, const ab_run *run, const ab_settings *st,
                      bench_rng *order_rng, ab_rows *rows, int *done, int target) {
  for (; *done < target; (*done)++) {
    int round = *done;
    int b_first = st->random_order ? (int)(bench_rng_next(order_rng) >> 63) : round % 2;
    side *first = b_first ? b : a, *second = b_first ? a : b;
    char tag[32];
    snprintf(tag, sizeof tag, "round%d", round);
    double r0 = ab_now_s();
    cJSON *one = ab_run_side(first, run, st->passes, tag);
    cJSON *two = one ? ab_run_side(second, run, st->passes, tag) : NULL;
    if (!one || !two) {
      cJSON_Delete(one);
      return -1;
    }
    int folded = ab_fold_report(rows, one, first == b, round, st->floor_statistic) == 0 &&
                 ab_fold_report(rows, two, second == b, round, st->floor_statistic) == 0;
    cJSON_Delete(one);
    cJSON_Delete(two);
    if (!folded) {
      fprintf(stderr, "apexx-bench ab: out of memory\n");
      return -1;
    }
    for (int i = 0; i < rows->count; i++) {
      if (ab_grow_rounds(&rows->items[i], round + 1) != 0) {
        fprintf(stderr, "apexx-bench ab: out of memory\n");
        return -1;
      }
    }
    if (!run->quiet) {
      fprintf(stderr, "apexx-bench ab: round %d/%d (%s first): %.1f s\n", round + 1, target,
              first->label, ab_now_s() - r0);
    }
  }
  return 0;
}

/* The rounds until the verdicts settle or --until-settled runs out (only
 * --rounds without it), judged into counts; *done the rounds run. 0, or
 * -1 after a message. */
static int run_until_settled(side *a, side *b, const ab_run *run, const ab_settings *st,
                             ab_rows *rows, ab_counts *counts, int *done) {
  bench_rng order_rng = {UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)time(NULL)};
  int target = st->rounds;
  *done = 0;
  memset(counts, 0, sizeof *counts);
  for (;;) {
    if (run_rounds(a, b, run, st, &order_rng, rows, done, target) != 0)
      return -1;
    ab_judge_rows(rows, st, *done, counts);
    /* more rounds settle inconclusive rows (and put a regression seen
     * early to more pairs: the run goes on while any row is unsettled) */
    if (!st->until_settled || counts->inconclusive == 0 || *done >= st->until_settled)
      break;
    /* two more rounds at a time: one of each order */
    target = *done + 2 > st->until_settled ? st->until_settled : *done + 2;
    if (!run->quiet) {
      fprintf(stderr, "apexx-bench ab: %d row(s) inconclusive after %d rounds (",
              counts->inconclusive, *done);
      int listed = 0;
      for (int i = 0; i < rows->count; i++) {
        if (strcmp(rows->items[i].verdict, "inconclusive") == 0)
          fprintf(stderr, "%s%s", listed++ ? ", " : "", rows->items[i].key);
      }
      fprintf(stderr, "): %d more\n", target - *done);
    }
  }
  return 0;
}

/* The outputs, the Markdown on stdout when no file takes it, the status
 * line; the exit status. */
static int report_run(const side *a, const side *b, const ab_rows *rows, const ab_settings *st,
                      const ab_counts *counts, int done, double elapsed, const ab_run *run,
                      const char *output_json, const char *output_md) {
  char *md = ab_render_markdown(a, b, rows, st, counts, done, elapsed);
  cJSON *report = ab_report_json(a, b, rows, st, counts, done, elapsed, run);
  char *json = report ? bench_report_print(report) : NULL;
  cJSON_Delete(report);
  int rc = counts->regressed || counts->missing || counts->failed ? BENCH_EXIT_FAILED
           : counts->inconclusive                                 ? BENCH_EXIT_INCONCLUSIVE
                                                                  : BENCH_EXIT_OK;
  int write_failed = 0;
  if (output_json)
    write_failed |= write_text("--output-json", output_json, json);
  if (output_md)
    write_failed |= write_text("--output-md", output_md, md);
  if (!output_md && md && !(output_json && strcmp(output_json, "-") == 0))
    fputs(md, stdout);
  printf("ab status=%s rows=%d regressed=%d improved=%d unchanged=%d inconclusive=%d missing=%d "
         "failed=%d rounds=%d elapsed_s=%.1f\n",
         ab_status_of(counts), rows->count, counts->regressed, counts->improved, counts->unchanged,
         counts->inconclusive, counts->missing, counts->failed, done, elapsed);
  if (counts->inconclusive && rc == BENCH_EXIT_INCONCLUSIVE) {
    printf("ab note: %d row(s) inconclusive: neither a change of %g%% nor its absence is "
           "shown; more rounds (--rounds, --until-settled) or a quieter machine settle them; "
           "exit %d\n",
           counts->inconclusive, 100.0 * st->threshold, BENCH_EXIT_INCONCLUSIVE);
  }
  fflush(stdout);
  free(md);
  free(json);
  return write_failed ? BENCH_EXIT_USAGE : rc;
}

static void free_rows(ab_rows *rows) {
  for (int i = 0; i < rows->count; i++) {
    free(rows->items[i].key);
    free(rows->items[i].a);
    free(rows->items[i].b);
    free(rows->items[i].reason);
  }
  free(rows->items);
}

int bench_ab_main(int argc, char **argv) {
  ab_settings st = {AB_DEFAULT_ROUNDS,
                    0,
                    AB_DEFAULT_PASSES,
                    AB_DEFAULT_THRESHOLD,
                    AB_DEFAULT_CONFIDENCE,
                    1,
                    0,
                    0};
  side a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.label = "A";
  b.label = "B";
  const char *output_json = NULL, *output_md = NULL;
  int quiet = 0;
  /* ab's flags and A B before "--", the run flags after it */
  int dashes = 1;
  while (dashes < argc && strcmp(argv[dashes], "--") != 0)
    dashes++;
  int rc = parse_ab_flags(dashes, argv, &st, &a, &b, &output_json, &output_md, &quiet);
  if (rc >= 0)
    return rc;
  ab_run run = {NULL, 0, NULL, quiet};
  rc = check_operands(argc, argv, dashes, &st, &run);
  if (rc >= 0)
    return rc;
  const char *dir_a = argv[optind], *dir_b = argv[optind + 1];
  rc = BENCH_EXIT_USAGE;
  ab_rows rows = {NULL, 0, 0};
  if (ab_resolve_side(&a, dir_a) || ab_resolve_side(&b, dir_b) || make_scratch(&run) != 0)
    goto out;
  double t0 = ab_now_s();
  /* the probe round: flags, profiles, identity; not judged */
  a.probe = ab_run_side(&a, &run, 1, "probe");
  if (a.probe)
    b.probe = ab_run_side(&b, &run, 1, "probe");
  if (!a.probe || !b.probe || check_sides(&a, &b) != 0)
    goto out;
  a.seconds = b.seconds = 0.0;
  if (!quiet) {
    fprintf(stderr, "apexx-bench ab: A %s, B %s; %d rounds%s of %d passes\n", a.dir, b.dir,
            st.rounds, st.until_settled ? " (more until settled)" : "", st.passes);
  }
  ab_counts counts;
  int done = 0;
  if (run_until_settled(&a, &b, &run, &st, &rows, &counts, &done) != 0)
    goto out;
  rc = report_run(&a, &b, &rows, &st, &counts, done, ab_now_s() - t0, &run, output_json, output_md);
out:
  free_rows(&rows);
  if (run.work) {
    ab_remove_scratch(run.work);
    free(run.work);
  }
  ab_side_free(&a);
  ab_side_free(&b);
  return rc;
}
