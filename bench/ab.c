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

#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define AB_DEFAULT_ROUNDS 10
#define AB_DEFAULT_PASSES 3
#define AB_DEFAULT_THRESHOLD 0.10
/* 99%: under load (the development VM at 8 to 15 on 2 cores) one of three
 * unchanged runs had a row "regressed" by its 95% interval after 10 rounds
 * (bench/results/README.md) */
#define AB_DEFAULT_CONFIDENCE 0.99
#define AB_MAX_ENV 16
#define AB_MAX_RUN_FLAGS 96
#define AB_MAX_ROUNDS 1000

/* ---- the two builds -------------------------------------------------------- */
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

static int is_executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int is_directory(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *joined(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (p)
    snprintf(p, len, "%s/%s", dir, name);
  return p;
}

/* Find the side's apexx-bench and backend directory. 0, or 1 after a
 * message. */
static int resolve_side(side *s, const char *given) {
  char resolved[PATH_MAX];
  if (!realpath(given, resolved) || !is_directory(resolved)) {
    fprintf(stderr, "apexx-bench ab: %s: [%s] is not a directory%s%s\n", s->label, given,
            errno ? ": " : "", errno ? strerror(errno) : "");
    return 1;
  }
  s->dir = strdup(resolved);
  char *tree_bench = joined(resolved, "bench/apexx-bench");
  char *prefix_bench = joined(resolved, "bin/apexx-bench");
  if (!s->dir || !tree_bench || !prefix_bench) {
    free(tree_bench);
    free(prefix_bench);
    fprintf(stderr, "apexx-bench ab: out of memory\n");
    return 1;
  }
  if (is_executable(tree_bench)) {
    s->bench = tree_bench;
    free(prefix_bench);
    s->layout = "build tree";
    char *libs = joined(resolved, "backends/.libs");
    if (libs && is_directory(libs)) {
      s->backend_dir = libs;
    } else {
      free(libs);
      s->backend_dir = joined(resolved, "backends");
    }
    return 0;
  }
  free(tree_bench);
  if (is_executable(prefix_bench)) {
    s->bench = prefix_bench;
    s->layout = "install prefix";
    static const char *const candidates[] = {"lib/apexx", "lib64/apexx"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !s->backend_dir; i++) {
      char *d = joined(resolved, candidates[i]);
      if (d && is_directory(d)) {
        s->backend_dir = d;
      } else {
        free(d);
      }
    }
    return 0;
  }
  free(prefix_bench);
  fprintf(stderr,
          "apexx-bench ab: %s: [%s] is neither a build tree (bench/apexx-bench) nor an "
          "install prefix (bin/apexx-bench)\n",
          s->label, given);
  return 1;
}

static void side_free(side *s) {
  free(s->dir);
  free(s->bench);
  free(s->backend_dir);
  cJSON_Delete(s->probe);
}

/* ---- one process ------------------------------------------------------------ */
typedef struct ab_run {
  const char *const *flags; /* RUN-FLAGS */
  int flag_count;
  char *work; /* the scratch directory */
  int quiet;
} ab_run;

/* LD_LIBRARY_PATH without the directories that hold a libapexx (the
 * build tree's libtool wrapper that runs ab puts its own first, and it
 * would win over the other side's run path), as "LD_LIBRARY_PATH=...";
 * NULL when nothing is left or memory runs out. */
static char *library_path_without_apexx(const char *value) {
  size_t len = strlen(value);
  char *out = malloc(len + sizeof "LD_LIBRARY_PATH=");
  char *copy = strdup(value);
  if (!out || !copy) {
    free(out);
    free(copy);
    return NULL;
  }
  strcpy(out, "LD_LIBRARY_PATH=");
  size_t prefix = strlen(out), at = prefix;
  char *save = NULL;
  for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
    char *so = joined(dir, "libapexx.so.0");
    int holds = so && access(so, F_OK) == 0;
    free(so);
    if (holds)
      continue;
    at += (size_t)sprintf(out + at, "%s%s", at > prefix ? ":" : "", dir);
  }
  free(copy);
  if (at == prefix) {
    free(out);
    return NULL;
  }
  return out;
}

/* The environment of a side's process: ours, without APEXX_BACKEND_DIR,
 * the directories of other libapexx builds in LD_LIBRARY_PATH and the
 * names the side sets, then those. The strings made here go to made[]
 * (at most 2) for the caller to free with the array. */
static char **side_environment(const side *s, char **made, int *made_count) {
  int n = 0;
  while (environ[n])
    n++;
  char **envp = calloc((size_t)n + AB_MAX_ENV + 2, sizeof *envp);
  if (!envp)
    return NULL;
  int k = 0;
  *made_count = 0;
  for (int i = 0; i < n; i++) {
    const char *e = environ[i];
    int drop = strncmp(e, "APEXX_BACKEND_DIR=", 18) == 0;
    for (int j = 0; j < s->env_count && !drop; j++) {
      size_t name_len = strcspn(s->env[j], "=");
      drop = strncmp(e, s->env[j], name_len) == 0 && e[name_len] == '=';
    }
    if (!drop && strncmp(e, "LD_LIBRARY_PATH=", 16) == 0) {
      char *kept = library_path_without_apexx(e + 16);
      if (kept) {
        envp[k++] = kept;
        made[(*made_count)++] = kept;
      }
      continue;
    }
    if (!drop)
      envp[k++] = (char *)e;
  }
  if (s->backend_dir) {
    size_t len = strlen(s->backend_dir) + 32;
    char *v = malloc(len);
    if (v) {
      snprintf(v, len, "APEXX_BACKEND_DIR=%s", s->backend_dir);
      envp[k++] = v;
      made[(*made_count)++] = v;
    }
  }
  for (int j = 0; j < s->env_count; j++)
    envp[k++] = (char *)s->env[j];
  envp[k] = NULL;
  return envp;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last lines of a file, for a message. */
static void tail_of(const char *path, char *buf, size_t size) {
  char err[256];
  char *text = bench_read_file(path, BENCH_MAX_REPORT_BYTES, "a log", err, sizeof err);
  buf[0] = '\0';
  if (!text)
    return;
  size_t len = strlen(text);
  while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
    text[--len] = '\0';
  const char *from = len > size - 1 ? text + len - (size - 1) : text;
  snprintf(buf, size, "%s", from);
  free(text);
}

/* Run side s once with `passes` passes; its report, or NULL after a message
 * (a process that could not run, or exited 1: bad flags or configuration,
 * or no report). A run whose rows failed (exit 2) has a report. */
static cJSON *run_side(side *s, const ab_run *run, int passes, const char *tag) {
  char *report_path = NULL, *err_path = NULL;
  char passes_text[16];
  snprintf(passes_text, sizeof passes_text, "%d", passes);
  size_t len = strlen(run->work) + 64;
  report_path = malloc(len);
  err_path = malloc(len);
  const char **argv = calloc((size_t)run->flag_count + 8, sizeof *argv);
  char *made[3] = {NULL, NULL, NULL};
  int made_count = 0;
  char **envp = side_environment(s, made, &made_count);
  cJSON *report = NULL;
  if (!report_path || !err_path || !argv || !envp) {
    fprintf(stderr, "apexx-bench ab: out of memory\n");
    goto out;
  }
  snprintf(report_path, len, "%s/%s-%s.json", run->work, s->label, tag);
  snprintf(err_path, len, "%s/%s-%s.err", run->work, s->label, tag);
  int argc = 0;
  argv[argc++] = s->bench;
  for (int i = 0; i < run->flag_count; i++)
    argv[argc++] = run->flags[i];
  argv[argc++] = "--repetitions";
  argv[argc++] = passes_text;
  argv[argc++] = "--quiet";
  argv[argc++] = "--output-json";
  argv[argc++] = report_path;
  argv[argc] = NULL;

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  pid_t pid;
  double t0 = now_s();
  int rc = posix_spawn(&pid, s->bench, &actions, NULL, (char *const *)argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    fprintf(stderr, "apexx-bench ab: %s: cannot run [%s]: %s\n", s->label, s->bench, strerror(rc));
    goto out;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  s->seconds += now_s() - t0;
  char tail[1024];
  if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 2)) {
    tail_of(err_path, tail, sizeof tail);
    if (WIFEXITED(status)) {
      fprintf(stderr, "apexx-bench ab: %s: [%s] exited %d (%s run): %s\n", s->label, s->bench,
              WEXITSTATUS(status), tag, tail[0] ? tail : "no message");
    } else {
      fprintf(stderr, "apexx-bench ab: %s: [%s] was killed by signal %d (%s run)%s%s\n", s->label,
              s->bench, WIFSIGNALED(status) ? WTERMSIG(status) : 0, tag, tail[0] ? ": " : "", tail);
    }
    goto out;
  }
  char err[1024];
  char *text = bench_read_file(report_path, BENCH_MAX_REPORT_BYTES, "a report", err, sizeof err);
  report = text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
  free(text);
  const cJSON *suite = cJSON_GetObjectItemCaseSensitive(report, "suite");
  if (!cJSON_IsString(suite) || strcmp(suite->valuestring, "apexx") != 0 ||
      !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(report, "benchmarks"))) {
    fprintf(stderr, "apexx-bench ab: %s: [%s] wrote no readable report (%s run)%s%s\n", s->label,
            s->bench, tag, text ? "" : ": ", text ? "" : err);
    cJSON_Delete(report);
    report = NULL;
  }
  unlink(report_path);
  unlink(err_path);
out:
  for (int i = 0; i < made_count; i++)
    free(made[i]);
  free(envp);
  free(argv);
  free(report_path);
  free(err_path);
  return report;
}

/* The scratch directory and what a failed process left in it (its
 * stderr, a partial report): plain files only, made by this run. */
static void remove_scratch(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      char *p = joined(dir, e->d_name);
      if (p)
        unlink(p);
      free(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* ---- rows --------------------------------------------------------------- */
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

static ab_row *row_for(ab_rows *l, const char *key) {
  for (int i = 0; i < l->count; i++) {
    if (strcmp(l->items[i].key, key) == 0)
      return &l->items[i];
  }
  if (l->count == l->cap) {
    int cap = l->cap ? 2 * l->cap : 32;
    ab_row *grown = realloc(l->items, (size_t)cap * sizeof *grown);
    if (!grown)
      return NULL;
    l->items = grown;
    l->cap = cap;
  }
  ab_row *r = &l->items[l->count];
  memset(r, 0, sizeof *r);
  r->key = strdup(key);
  if (!r->key)
    return NULL;
  l->count++;
  return r;
}

static int grow_rounds(ab_row *r, int rounds) {
  if (r->rounds >= rounds)
    return 0;
  double *a = realloc(r->a, (size_t)rounds * sizeof *a);
  if (!a)
    return -1;
  r->a = a;
  double *b = realloc(r->b, (size_t)rounds * sizeof *b);
  if (!b)
    return -1;
  r->b = b;
  for (int i = r->rounds; i < rounds; i++)
    r->a[i] = r->b[i] = NAN;
  r->rounds = rounds;
  return 0;
}

static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* A process's value for a row: the floor (smallest per-pass minimum) or
 * the median of the per-pass medians, over the passes after the first
 * (all of them when there is one). NAN when the row has none. */
static double process_value(const cJSON *row, int floor_statistic) {
  const cJSON *reps = cJSON_GetObjectItemCaseSensitive(row, "repetitions");
  const cJSON *list =
      cJSON_GetObjectItemCaseSensitive(reps, floor_statistic ? "mins_ms" : "medians_ms");
  if (!cJSON_IsArray(list) && floor_statistic)
    list = cJSON_GetObjectItemCaseSensitive(reps, "medians_ms"); /* before mins_ms were kept */
  int n = cJSON_GetArraySize(list);
  if (!cJSON_IsArray(list) || n < 1) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, floor_statistic ? "min_ms" : "p50_ms");
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
  }
  double *v = malloc((size_t)n * sizeof *v);
  if (!v)
    return NAN;
  int k = 0, index = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, list) {
    if ((n == 1 || index > 0) && cJSON_IsNumber(item))
      v[k++] = item->valuedouble;
    index++;
  }
  double out = NAN;
  if (k > 0) {
    qsort(v, (size_t)k, sizeof *v, compare_doubles);
    out = floor_statistic ? v[0] : (k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]));
  }
  free(v);
  return out;
}

/* Fold one side's report of round `round` into the rows. */
static int fold_report(ab_rows *l, const cJSON *report, int is_b, int round, int floor_statistic) {
  const cJSON *section, *entry, *row;
  char key[512];
  cJSON_ArrayForEach(section, cJSON_GetObjectItemCaseSensitive(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(entry, "rows")) {
        snprintf(key, sizeof key, "%s.%s/%s", section->string, entry->string, row->string);
        ab_row *r = row_for(l, key);
        if (!r || grow_rounds(r, round + 1) != 0)
          return -1;
        const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "status"));
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "reason"));
        int ok = status && strcmp(status, "ok") == 0;
        int failed = status && strcmp(status, "failed") == 0;
        *(is_b ? &r->seen_b : &r->seen_a) += 1;
        if (failed)
          *(is_b ? &r->failed_b : &r->failed_a) += 1;
        if (!ok && reason && (!r->reason || is_b)) {
          free(r->reason);
          r->reason = strdup(reason);
        }
        if (ok) {
          double v = process_value(row, floor_statistic);
          if (isfinite(v)) {
            *(is_b ? &r->ok_b : &r->ok_a) += 1;
            (is_b ? r->b : r->a)[round] = v;
          }
        }
      }
    }
  }
  return 0;
}

/* ---- verdicts -------------------------------------------------------------- */
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

static void judge_rows(ab_rows *l, const ab_settings *st, int rounds_run, ab_counts *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < l->count; i++) {
    ab_row *r = &l->items[i];
    memset(&r->iv, 0, sizeof r->iv);
    r->iv.ratio = NAN;
    r->iv.hi = INFINITY;
    r->more_rounds = 0;
    if (r->failed_a || r->failed_b) {
      r->verdict = "failed";
      c->failed++;
    } else if (r->ok_a && r->ok_b < rounds_run) {
      /* ran in A, not (always) in B */
      r->verdict = "missing";
      c->missing++;
    } else if (r->ok_b && !r->ok_a) {
      r->verdict = "new";
      c->added++;
    } else if (!r->ok_a && !r->ok_b) {
      r->verdict = "skipped";
      c->skipped++;
    } else {
      double *a = malloc((size_t)r->rounds * sizeof *a), *b = malloc((size_t)r->rounds * sizeof *b);
      int n = 0;
      for (int k = 0; a && b && k < r->rounds; k++) {
        if (isfinite(r->a[k]) && isfinite(r->b[k])) {
          a[n] = r->a[k];
          b[n] = r->b[k];
          n++;
        }
      }
      bench_verdict v = BENCH_INCONCLUSIVE;
      if (a && b && bench_paired_interval(a, b, n, st->confidence, &r->iv) == 0)
        v = bench_judge(&r->iv, st->threshold);
      if (v == BENCH_INCONCLUSIVE && a && b)
        r->more_rounds = bench_rounds_to_settle(a, b, n, st->threshold, st->confidence);
      free(a);
      free(b);
      r->verdict = bench_verdict_name(v);
      switch (v) {
      case BENCH_REGRESSED:
        c->regressed++;
        break;
      case BENCH_IMPROVED:
        c->improved++;
        break;
      case BENCH_UNCHANGED:
        c->unchanged++;
        break;
      default:
        c->inconclusive++;
        break;
      }
    }
  }
}

static int is_failure(const char *verdict) {
  return strcmp(verdict, "regressed") == 0 || strcmp(verdict, "missing") == 0 ||
         strcmp(verdict, "failed") == 0;
}

/* The median over the rounds of one side's values of a row. */
static double side_median(const double *v, int n) {
  double *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
  int k = 0;
  for (int i = 0; copy && i < n; i++) {
    if (isfinite(v[i]))
      copy[k++] = v[i];
  }
  double out = NAN;
  if (k > 0) {
    qsort(copy, (size_t)k, sizeof *copy, compare_doubles);
    out = k % 2 ? copy[k / 2] : 0.5 * (copy[k / 2 - 1] + copy[k / 2]);
  }
  free(copy);
  return out;
}

/* ---- output ---------------------------------------------------------------- */
static void format_ms(char *buf, size_t size, double v) {
  if (!isfinite(v)) {
    snprintf(buf, size, "-");
  } else if (v < 1.0) {
    snprintf(buf, size, "%.4g us", v * 1e3);
  } else {
    snprintf(buf, size, "%.4g ms", v);
  }
}

static const char *status_of(const ab_counts *c) {
  return c->regressed || c->missing || c->failed ? "fail"
         : c->inconclusive                       ? "inconclusive"
                                                 : "pass";
}

static void side_line(bench_text *b, const side *s) {
  const cJSON *sha = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(s->probe, "producer"), "git_sha");
  const cJSON *lib = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(s->probe, "environment"), "library_path");
  bench_text_append(b, "- %s: `%s` (%s, commit %.12s, libapexx `%s`)", s->label, s->dir, s->layout,
                    cJSON_IsString(sha) ? sha->valuestring : "unknown",
                    cJSON_IsString(lib) ? lib->valuestring : "not recorded");
  for (int i = 0; i < s->env_count; i++)
    bench_text_append(b, "%s`%s`", i ? ", " : "; environment ", s->env[i]);
  bench_text_append(b, "\n");
}

static char *render_markdown(const side *a, const side *b, const ab_rows *l, const ab_settings *st,
                             const ab_counts *c, int rounds_run, double elapsed) {
  bench_text m = {NULL, 0, 0, 0};
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(b->probe, "environment");
  bench_text_append(&m, "# apexx-bench ab\n\n");
  bench_text_append(&m,
                    "- verdict: **%s** (%d regressed, %d improved, %d unchanged, %d inconclusive, "
                    "%d missing, %d failed)\n",
                    status_of(c), c->regressed, c->improved, c->unchanged, c->inconclusive,
                    c->missing, c->failed);
  side_line(&m, a);
  side_line(&m, b);
  bench_text_append(&m, "- machine: %s, %s x%d\n",
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(env, "host")),
                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(env, "cpu_model")),
                    (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(env, "cpu_cores")));
  bench_text_append(&m,
                    "- %d rounds (%s), %d passes a process (the first a warm-up), a process's "
                    "%s; %.1f s (A %.1f s, B %.1f s in their processes)\n",
                    rounds_run, st->random_order ? "A and B in random order" : "A B, B A, ...",
                    st->passes, st->floor_statistic ? "floor (its fastest pass)" : "median pass",
                    elapsed, a->seconds, b->seconds);
  bench_text_append(&m,
                    "- rule: B/A is the median of the rounds' ratios with its %g%% sign-test "
                    "interval; regressed when B/A >= %g and the interval lies above 1, improved "
                    "when B/A <= %.4g and it lies below 1, unchanged when it lies inside "
                    "(%.4g, %g), else inconclusive\n\n",
                    100.0 * st->confidence, 1.0 + st->threshold, 1.0 / (1.0 + st->threshold),
                    1.0 / (1.0 + st->threshold), 1.0 + st->threshold);
  bench_text_append(&m, "| row | A | B | B/A | %g%% interval | verdict | note |\n",
                    100.0 * st->confidence);
  bench_text_append(&m, "| --- | ---: | ---: | ---: | --- | --- | --- |\n");
  for (int i = 0; i < l->count; i++) {
    const ab_row *r = &l->items[i];
    char av[32], bv[32], ratio[32] = "-", interval[64] = "-", note[160] = "";
    format_ms(av, sizeof av, side_median(r->a, r->rounds));
    format_ms(bv, sizeof bv, side_median(r->b, r->rounds));
    if (isfinite(r->iv.ratio))
      snprintf(ratio, sizeof ratio, "%.3f", r->iv.ratio);
    if (r->iv.coverage > 0)
      snprintf(interval, sizeof interval, "[%.3f, %.3f]", r->iv.lo, r->iv.hi);
    if (strcmp(r->verdict, "inconclusive") == 0) {
      snprintf(note, sizeof note, "%d pair(s); about %d more round(s) would settle it", r->iv.n,
               r->more_rounds);
    } else if (r->reason && (strcmp(r->verdict, "skipped") == 0 || is_failure(r->verdict))) {
      snprintf(note, sizeof note, "%.150s", r->reason);
    } else if (strcmp(r->verdict, "missing") == 0) {
      snprintf(note, sizeof note, "ran in A, not in B");
    }
    const char *sep = strchr(r->key, '/');
    bench_text_append(&m, "| %.*s / %s | %s | %s | %s | %s | %s%s%s | %s |\n", (int)(sep - r->key),
                      r->key, sep + 1, av, bv, ratio, interval, is_failure(r->verdict) ? "**" : "",
                      r->verdict, is_failure(r->verdict) ? "**" : "", note);
  }
  return bench_text_finish(&m);
}

static cJSON *numbers(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++)
    cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
  return a;
}

static cJSON *side_json(const side *s) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "path", s->dir);
  cJSON_AddStringToObject(j, "layout", s->layout);
  cJSON_AddStringToObject(j, "apexx_bench", s->bench);
  bench_json_string_or_null(j, "backend_dir", s->backend_dir);
  const cJSON *producer = cJSON_GetObjectItemCaseSensitive(s->probe, "producer");
  if (producer)
    cJSON_AddItemToObject(j, "producer", cJSON_Duplicate(producer, 1));
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(s->probe, "environment");
  static const char *const keys[] = {"library_version", "library_path"};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(env, keys[i]);
    if (v)
      cJSON_AddItemToObject(j, keys[i], cJSON_Duplicate(v, 1));
  }
  cJSON *e = cJSON_AddArrayToObject(j, "env");
  for (int i = 0; i < s->env_count; i++)
    cJSON_AddItemToArray(e, cJSON_CreateString(s->env[i]));
  cJSON_AddNumberToObject(j, "process_seconds", s->seconds);
  return j;
}

static cJSON *report_json(const side *a, const side *b, const ab_rows *l, const ab_settings *st,
                          const ab_counts *c, int rounds_run, double elapsed, const ab_run *run) {
  cJSON *r = cJSON_CreateObject();
  cJSON *schema = cJSON_AddObjectToObject(r, "schema_version");
  cJSON_AddNumberToObject(schema, "major", BENCH_SCHEMA_MAJOR);
  cJSON_AddNumberToObject(schema, "minor", BENCH_SCHEMA_MINOR);
  cJSON_AddStringToObject(r, "suite", "apexx-ab");
  char id[40], stamp[32];
  bench_run_id(id, sizeof id);
  cJSON_AddStringToObject(r, "run_id", id);
  bench_timestamp_utc(stamp, sizeof stamp);
  cJSON_AddStringToObject(r, "timestamp_utc", stamp);
  cJSON *producer = cJSON_AddObjectToObject(r, "producer");
  cJSON_AddStringToObject(producer, "name", "apexx-bench");
  cJSON_AddStringToObject(producer, "version", PACKAGE_VERSION);
  bench_json_string_or_null(producer, "git_sha", bench_git_sha());
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(b->probe, "environment");
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(b->probe, "config");
  if (env)
    cJSON_AddItemToObject(r, "environment", cJSON_Duplicate(env, 1));
  if (config)
    cJSON_AddItemToObject(r, "config", cJSON_Duplicate(config, 1));
  cJSON *s = cJSON_AddObjectToObject(r, "settings");
  cJSON_AddNumberToObject(s, "rounds", rounds_run);
  cJSON_AddNumberToObject(s, "rounds_asked", st->rounds);
  if (st->until_settled)
    cJSON_AddNumberToObject(s, "until_settled", st->until_settled);
  else
    cJSON_AddNullToObject(s, "until_settled");
  cJSON_AddNumberToObject(s, "passes", st->passes);
  cJSON_AddStringToObject(s, "statistic", st->floor_statistic ? "floor" : "median");
  cJSON_AddStringToObject(s, "order", st->random_order ? "random" : "alternate");
  cJSON_AddNumberToObject(s, "threshold", st->threshold);
  cJSON_AddNumberToObject(s, "confidence", st->confidence);
  cJSON *flags = cJSON_AddArrayToObject(s, "run_flags");
  for (int i = 0; i < run->flag_count; i++)
    cJSON_AddItemToArray(flags, cJSON_CreateString(run->flags[i]));
  cJSON_AddNumberToObject(s, "elapsed_s", elapsed);
  cJSON *sides = cJSON_AddObjectToObject(r, "sides");
  cJSON_AddItemToObject(sides, "a", side_json(a));
  cJSON_AddItemToObject(sides, "b", side_json(b));
  cJSON_AddStringToObject(r, "status", status_of(c));
  cJSON *counts = cJSON_AddObjectToObject(r, "verdicts");
  cJSON_AddNumberToObject(counts, "regressed", c->regressed);
  cJSON_AddNumberToObject(counts, "improved", c->improved);
  cJSON_AddNumberToObject(counts, "unchanged", c->unchanged);
  cJSON_AddNumberToObject(counts, "inconclusive", c->inconclusive);
  cJSON_AddNumberToObject(counts, "missing", c->missing);
  cJSON_AddNumberToObject(counts, "failed", c->failed);
  cJSON_AddNumberToObject(counts, "skipped", c->skipped);
  cJSON_AddNumberToObject(counts, "new", c->added);
  cJSON *rows = cJSON_AddObjectToObject(r, "rows");
  for (int i = 0; i < l->count; i++) {
    const ab_row *row = &l->items[i];
    cJSON *j = cJSON_AddObjectToObject(rows, row->key);
    cJSON_AddStringToObject(j, "verdict", row->verdict);
    if (row->reason)
      cJSON_AddStringToObject(j, "reason", row->reason);
    cJSON_AddItemToObject(j, "a_ms", numbers(row->a, row->rounds));
    cJSON_AddItemToObject(j, "b_ms", numbers(row->b, row->rounds));
    bench_json_number(j, "a_median_ms", side_median(row->a, row->rounds), "no value in A");
    bench_json_number(j, "b_median_ms", side_median(row->b, row->rounds), "no value in B");
    cJSON_AddNumberToObject(j, "pairs", row->iv.n);
    bench_json_number(j, "ratio", row->iv.ratio, "no pair of values");
    int has = row->iv.coverage > 0;
    bench_json_number(j, "interval_low", has ? row->iv.lo : NAN,
                      "too few pairs for an interval at this confidence");
    bench_json_number(j, "interval_high", has ? row->iv.hi : NAN,
                      "too few pairs for an interval at this confidence");
    cJSON_AddNumberToObject(j, "interval_coverage", row->iv.coverage);
    if (strcmp(row->verdict, "inconclusive") == 0)
      cJSON_AddNumberToObject(j, "rounds_to_settle", row->more_rounds);
  }
  return r;
}

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
          "         [--output-json F] [--output-md F] [--quiet] [-- RUN-FLAGS...]\n"
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
  opterr = 0;
  optind = 1;
  for (;;) {
    int c = getopt_long(dashes, argv, ":", ab_flags, NULL);
    if (c == -1)
      break;
    int bad = 0;
    switch (c) {
    case O_ROUNDS:
      bad = parse_int("rounds", optarg, 1, AB_MAX_ROUNDS, &st.rounds);
      break;
    case O_UNTIL:
      bad = parse_int("until-settled", optarg, 1, AB_MAX_ROUNDS, &st.until_settled);
      break;
    case O_PASSES:
      bad = parse_int("passes", optarg, 1, 1000, &st.passes);
      break;
    case O_THRESHOLD:
      bad = parse_fraction("threshold", optarg, 0.0, 10.0, &st.threshold);
      break;
    case O_CONFIDENCE:
      bad = parse_fraction("confidence", optarg, 0.5, 1.0, &st.confidence);
      break;
    case O_STATISTIC:
      if (strcmp(optarg, "min") == 0) {
        st.floor_statistic = 1;
      } else if (strcmp(optarg, "median") == 0) {
        st.floor_statistic = 0;
      } else {
        fprintf(stderr, "apexx-bench ab: --statistic: [%s] is neither min nor median\n", optarg);
        bad = 1;
      }
      break;
    case O_ORDER:
      if (strcmp(optarg, "alternate") == 0) {
        st.random_order = 0;
      } else if (strcmp(optarg, "random") == 0) {
        st.random_order = 1;
      } else {
        fprintf(stderr, "apexx-bench ab: --order: [%s] is neither alternate nor random\n", optarg);
        bad = 1;
      }
      break;
    case O_A_ENV:
      bad = add_env(&a, "a-env", optarg);
      break;
    case O_B_ENV:
      bad = add_env(&b, "b-env", optarg);
      break;
    case O_OUTPUT_JSON:
    case O_OUTPUT_MD:
      if (!*optarg) {
        fprintf(stderr, "apexx-bench ab: %s: [] is an empty path\n", argv[optind - 1]);
        bad = 1;
      }
      *(c == O_OUTPUT_JSON ? &output_json : &output_md) = optarg;
      break;
    case O_QUIET:
      quiet = 1;
      break;
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
  /* the operands left before "--": A and B */
  if (dashes - optind != 2) {
    fprintf(stderr,
            "apexx-bench ab: needs two builds A and B before -- (got %d operand(s)%s%s%s); "
            "the run flags go after -- (apexx-bench ab A B -- --backends cpu ...)\n",
            dashes - optind, dashes - optind > 2 ? ": [" : "",
            dashes - optind > 2 ? argv[optind + 2] : "", dashes - optind > 2 ? "] is a third" : "");
    return BENCH_EXIT_USAGE;
  }
  const char *dir_a = argv[optind], *dir_b = argv[optind + 1];
  ab_run run = {NULL, 0, NULL, quiet};
  if (dashes < argc) {
    run.flags = (const char *const *)argv + dashes + 1;
    run.flag_count = argc - dashes - 1;
  }
  if (run.flag_count > AB_MAX_RUN_FLAGS) {
    fprintf(stderr, "apexx-bench ab: at most %d run flags\n", AB_MAX_RUN_FLAGS);
    return BENCH_EXIT_USAGE;
  }
  for (int i = 0; i < run.flag_count; i++) {
    if (run_flag_refused(run.flags[i])) {
      fprintf(stderr,
              "apexx-bench ab: run flag [%s]: ab sets it (--passes sets the repetitions; "
              "--output-json and --output-md are ab's own)\n",
              run.flags[i]);
      return BENCH_EXIT_USAGE;
    }
  }
  if (st.until_settled && st.until_settled < st.rounds) {
    fprintf(stderr, "apexx-bench ab: --until-settled: [%d] is fewer than --rounds [%d]\n",
            st.until_settled, st.rounds);
    return BENCH_EXIT_USAGE;
  }
  int rc = BENCH_EXIT_USAGE;
  ab_rows rows = {NULL, 0, 0};
  if (resolve_side(&a, dir_a) || resolve_side(&b, dir_b))
    goto out;
  const char *tmp = getenv("TMPDIR");
  size_t len = strlen(tmp && *tmp ? tmp : "/tmp") + 32;
  run.work = malloc(len);
  if (!run.work)
    goto out;
  snprintf(run.work, len, "%s/apexx-ab.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(run.work)) {
    fprintf(stderr, "apexx-bench ab: cannot make a scratch directory [%s]: %s\n", run.work,
            strerror(errno));
    free(run.work);
    run.work = NULL;
    goto out;
  }
  double t0 = now_s();
  /* the probe round: flags, profiles, identity; not judged */
  a.probe = run_side(&a, &run, 1, "probe");
  if (a.probe)
    b.probe = run_side(&b, &run, 1, "probe");
  if (!a.probe || !b.probe || check_sides(&a, &b) != 0)
    goto out;
  a.seconds = b.seconds = 0.0;
  if (!quiet) {
    fprintf(stderr, "apexx-bench ab: A %s, B %s; %d rounds%s of %d passes\n", a.dir, b.dir,
            st.rounds, st.until_settled ? " (more until settled)" : "", st.passes);
  }
  bench_rng order_rng = {UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)time(NULL)};
  int target = st.rounds, done = 0;
  ab_counts counts;
  memset(&counts, 0, sizeof counts);
  for (;;) {
    for (; done < target; done++) {
      int b_first = st.random_order ? (int)(bench_rng_next(&order_rng) >> 63) : done % 2;
      side *first = b_first ? &b : &a, *second = b_first ? &a : &b;
      char tag[32];
      snprintf(tag, sizeof tag, "round%d", done);
      double r0 = now_s();
      cJSON *one = run_side(first, &run, st.passes, tag);
      cJSON *two = one ? run_side(second, &run, st.passes, tag) : NULL;
      if (!one || !two) {
        cJSON_Delete(one);
        goto out;
      }
      int folded = fold_report(&rows, one, first == &b, done, st.floor_statistic) == 0 &&
                   fold_report(&rows, two, second == &b, done, st.floor_statistic) == 0;
      cJSON_Delete(one);
      cJSON_Delete(two);
      if (!folded) {
        fprintf(stderr, "apexx-bench ab: out of memory\n");
        goto out;
      }
      for (int i = 0; i < rows.count; i++) {
        if (grow_rounds(&rows.items[i], done + 1) != 0) {
          fprintf(stderr, "apexx-bench ab: out of memory\n");
          goto out;
        }
      }
      if (!quiet) {
        fprintf(stderr, "apexx-bench ab: round %d/%d (%s first): %.1f s\n", done + 1, target,
                first->label, now_s() - r0);
      }
    }
    judge_rows(&rows, &st, done, &counts);
    /* more rounds settle inconclusive rows (and put a regression seen
     * early to more pairs: the run goes on while any row is unsettled) */
    if (!st.until_settled || counts.inconclusive == 0 || done >= st.until_settled)
      break;
    /* two more rounds at a time: one of each order */
    target = done + 2 > st.until_settled ? st.until_settled : done + 2;
    if (!quiet) {
      fprintf(stderr, "apexx-bench ab: %d row(s) inconclusive after %d rounds (",
              counts.inconclusive, done);
      int listed = 0;
      for (int i = 0; i < rows.count; i++) {
        if (strcmp(rows.items[i].verdict, "inconclusive") == 0)
          fprintf(stderr, "%s%s", listed++ ? ", " : "", rows.items[i].key);
      }
      fprintf(stderr, "): %d more\n", target - done);
    }
  }
  double elapsed = now_s() - t0;
  char *md = render_markdown(&a, &b, &rows, &st, &counts, done, elapsed);
  cJSON *report = report_json(&a, &b, &rows, &st, &counts, done, elapsed, &run);
  char *json = report ? bench_report_print(report) : NULL;
  cJSON_Delete(report);
  rc = counts.regressed || counts.missing || counts.failed ? BENCH_EXIT_FAILED
       : counts.inconclusive                               ? BENCH_EXIT_INCONCLUSIVE
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
         status_of(&counts), rows.count, counts.regressed, counts.improved, counts.unchanged,
         counts.inconclusive, counts.missing, counts.failed, done, elapsed);
  if (counts.inconclusive && rc == BENCH_EXIT_INCONCLUSIVE) {
    printf("ab note: %d row(s) inconclusive: neither a change of %g%% nor its absence is "
           "shown; more rounds (--rounds, --until-settled) or a quieter machine settle them; "
           "exit %d\n",
           counts.inconclusive, 100.0 * st.threshold, BENCH_EXIT_INCONCLUSIVE);
  }
  fflush(stdout);
  free(md);
  free(json);
  if (write_failed)
    rc = BENCH_EXIT_USAGE;
out:
  for (int i = 0; i < rows.count; i++) {
    free(rows.items[i].key);
    free(rows.items[i].a);
    free(rows.items[i].b);
    free(rows.items[i].reason);
  }
  free(rows.items);
  if (run.work) {
    remove_scratch(run.work);
    free(run.work);
  }
  side_free(&a);
  side_free(&b);
  return rc;
}
