/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench ab's files share these (docs/report.md, A/B):
 *   ab.c          the command line and the rounds
 *   ab_side.c     the two builds and one process of a side
 *   ab_rows.c     rows folded into per-round pairs, the verdicts
 *   ab_output.c   the Markdown table and the JSON report
 * Names shared between them start with ab_. */
#ifndef APX_BENCH_AB_H
#define APX_BENCH_AB_H

#include "bench.h"

#define AB_MAX_ENV 16
#define AB_MAX_RUN_FLAGS 96
#define AB_MAX_ROUNDS 1000

typedef struct side {
  const char *label; /* "A" or "B" */
  char *dir;         /* the build, as resolved */
  char *bench;       /* its apexx-bench */
  char *backend_dir; /* APEXX_BACKEND_DIR for it; NULL: unset (its default) */
  const char *layout;
  const char *env[AB_MAX_ENV]; /* --a-env / --b-env */
  int env_count;
  cJSON *probe;   /* the probe round's report: identity, profile */
  double seconds; /* time spent in this side's processes */
} side;

typedef struct ab_run {
  const char *const *flags; /* RUN-FLAGS */
  int flag_count;
  char *work; /* the scratch directory */
  int quiet;
} ab_run;

typedef enum row_state { ROW_OK, ROW_SKIPPED, ROW_FAILED, ROW_ABSENT } row_state;

typedef struct ab_row {
  char *key;              /* "section.entry/backend" */
  double *a, *b;          /* per round, NAN where the round gave no pair */
  int rounds;             /* entries in a and b */
  int ok_a, ok_b;         /* rounds where the row was ok on each side */
  int failed_a, failed_b; /* rounds where it failed */
  int seen_a, seen_b;     /* rounds where the report had it at all */
  char *reason;           /* a skip or failure reason (B's first, else A's) */
  /* the verdict */
  const char *verdict;
  bench_interval iv;
  int more_rounds;
} ab_row;

typedef struct ab_rows {
  ab_row *items;
  int count, cap;
} ab_rows;

typedef struct ab_settings {
  int rounds, until_settled, passes;
  double threshold, confidence;
  int floor_statistic;
  int random_order;
  uint64_t order_seed;
} ab_settings;

typedef struct ab_counts {
  int regressed, improved, unchanged, inconclusive, missing, failed, skipped, added;
} ab_counts;

/* ---- the two builds (ab_side.c) ------------------------------------------ */
/* A build tree or an install prefix into s; 0, or -1 after a message. */
int ab_resolve_side(side *s, const char *given);
void ab_side_free(side *s);
/* The monotonic clock in seconds. */
double ab_now_s(void);
/* One process of side s: its apexx-bench with the run flags and passes;
 * its report, or NULL after a message (a process that could not run, or
 * no report). A run whose rows failed (exit 2) has a report. */
cJSON *ab_run_side(side *s, const ab_run *run, int passes, const char *tag);
/* The scratch directory and what a failed process left in it. */
void ab_remove_scratch(const char *dir);

/* ---- rows (ab_rows.c) ---------------------------------------------------- */
/* Every row at least `rounds` rounds long (NAN where no pair); 0 or -1. */
int ab_grow_rounds(ab_row *r, int rounds);
/* A side's report of one round into the rows; 0, or -1 out of memory. */
int ab_fold_report(ab_rows *l, const cJSON *report, int is_b, int round, int floor_statistic);
/* Every row's verdict after rounds_run rounds, counted into c. */
void ab_judge_rows(ab_rows *l, const ab_settings *st, int rounds_run, ab_counts *c);
int ab_is_failure(const char *verdict);
/* The median over the rounds of one side's values of a row. */
double ab_side_median(const double *v, int n);

/* ---- outputs (ab_output.c) ----------------------------------------------- */
/* "fail", "inconclusive" or "pass". */
const char *ab_status_of(const ab_counts *c);
char *ab_render_markdown(const side *a, const side *b, const ab_rows *l, const ab_settings *st,
                         const ab_counts *c, int rounds_run, double elapsed);
cJSON *ab_report_json(const side *a, const side *b, const ab_rows *l, const ab_settings *st,
                      const ab_counts *c, int rounds_run, double elapsed, const ab_run *run);

#endif
