/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench: the suite driver (docs/report.md, apexx-bench(1)).
 *   apexx-bench [flags]             run the suite, write JSON + Markdown
 *   apexx-bench compare BASE CUR    regression verdict (compare.c)
 *   apexx-bench history DIR [R...]  history store and chart (history.c)
 *   apexx-bench ab A B [-- FLAGS]   two builds run alternately, paired
 *                                   verdicts (ab.c)
 * Exit status: 0 every row ran or was skipped with a reason; 2 a row failed
 * (or, for compare, a regression); 1 bad flags, bad config, unusable input,
 * or a report that could not be written (then no file is left behind). */
#include "config.h"

#include "bench.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory of an output path (of a symlink's target: the temporary
 * goes there) must exist and be writable; checked before the suite runs so
 * a long run does not end in an unwritable file. A device or FIFO is
 * written in place: no directory to check. */
static int check_output_dir(const char *flag, const char *path) {
  if (!path || strcmp(path, "-") == 0) return 0;
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return 0;
  char *resolved = realpath(path, NULL);
  char *copy = strdup(resolved ? resolved : path);
  free(resolved);
  if (!copy) return 1;
  const char *dir = dirname(copy);
  int rc = 0;
  if (access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr, "apexx-bench: %s: [%s]: directory [%s] is not writable: %s\n",
            flag, path, dir, strerror(errno));
    rc = 1;
  }
  free(copy);
  return rc;
}

static int check_backends(apx_context *ctx, const bench_options *opts) {
  int count = apx_backend_count(ctx);
  for (int i = 0; i < opts->backend_count; i++) {
    int found = 0;
    for (int k = 0; k < count && !found; k++) {
      struct apx_backend_info info;
      found = apx_backend_info(ctx, k, &info) == APX_OK &&
              strcmp(info.name, opts->backends[i]) == 0;
    }
    if (!found) {
      fprintf(stderr, "apexx-bench: --backends: [%s] is not a configured backend "
                      "(configured:", opts->backends[i]);
      for (int k = 0; k < count; k++) {
        struct apx_backend_info info;
        if (apx_backend_info(ctx, k, &info) == APX_OK) {
          fprintf(stderr, " %s", info.name);
        }
      }
      fprintf(stderr, ")\n");
      return 1;
    }
  }
  return 0;
}

/* ---- repetitions as passes over the suite ------------------------------
 * --repetitions N runs the whole suite N times (passes) and gives each row
 * the N per-pass medians: repetitions spread over the run, so a burst of
 * load on a shared machine hits some repetitions of every row rather than
 * all repetitions of one (rows measured back to back share the machine's
 * state of those seconds). */
static cJSON *row_of(cJSON *report, const char *section, const char *entry,
                     const char *backend) {
  cJSON *s = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(report, "benchmarks"), section);
  cJSON *e = cJSON_GetObjectItemCaseSensitive(s, entry);
  return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "rows"),
                                          backend);
}

static int row_ok(const cJSON *row) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(row, "status");
  return cJSON_IsString(st) && strcmp(st->valuestring, "ok") == 0;
}

static void append_numbers(cJSON *to, const cJSON *from) {
  const cJSON *v;
  cJSON_ArrayForEach(v, from) {
    if (cJSON_IsNumber(v)) cJSON_AddItemToArray(to, cJSON_CreateNumber(v->valuedouble));
  }
}

/* Fold one more pass into report: per ok row, its repetition medians and
 * minimums, p95s and means are appended; a row that failed in this pass
 * replaces the earlier ok one. */
static void merge_pass(cJSON *report, cJSON *pass) {
  cJSON *section, *entry, *row;
  cJSON_ArrayForEach(section, cJSON_GetObjectItemCaseSensitive(pass, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(entry, "rows")) {
        cJSON *into = row_of(report, section->string, entry->string, row->string);
        if (!into || !row_ok(into)) continue;
        if (!row_ok(row)) {
          const cJSON *st = cJSON_GetObjectItemCaseSensitive(row, "status");
          if (cJSON_IsString(st) && strcmp(st->valuestring, "failed") == 0) {
            cJSON *rows = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(report, "benchmarks"),
                        section->string),
                    entry->string),
                "rows");
            cJSON_ReplaceItemInObjectCaseSensitive(rows, row->string,
                                                   cJSON_Duplicate(row, 1));
          }
          continue;
        }
        cJSON *reps = cJSON_GetObjectItemCaseSensitive(into, "repetitions");
        const cJSON *more = cJSON_GetObjectItemCaseSensitive(row, "repetitions");
        append_numbers(cJSON_GetObjectItemCaseSensitive(reps, "medians_ms"),
                       cJSON_GetObjectItemCaseSensitive(more, "medians_ms"));
        append_numbers(cJSON_GetObjectItemCaseSensitive(reps, "mins_ms"),
                       cJSON_GetObjectItemCaseSensitive(more, "mins_ms"));
        static const char *const kept[] = {"p95_ms", "mean_ms", "min_ms", "max_ms"};
        for (size_t k = 0; k < 4; k++) {
          char key[32];
          snprintf(key, sizeof key, "pass_%s", kept[k]);
          cJSON *list = cJSON_GetObjectItemCaseSensitive(reps, key);
          if (!list) {
            list = cJSON_AddArrayToObject(reps, key);
            const cJSON *first = cJSON_GetObjectItemCaseSensitive(into, kept[k]);
            if (cJSON_IsNumber(first)) {
              cJSON_AddItemToArray(list, cJSON_CreateNumber(first->valuedouble));
            }
          }
          const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, kept[k]);
          if (cJSON_IsNumber(v)) cJSON_AddItemToArray(list, cJSON_CreateNumber(v->valuedouble));
        }
      }
    }
  }
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(pass, "status");
  if (cJSON_IsString(st) && strcmp(st->valuestring, "failed") == 0) {
    cJSON_ReplaceItemInObjectCaseSensitive(report, "status", cJSON_CreateString("failed"));
  }
}

static double list_stat(const cJSON *list, int which) {
  int n = cJSON_GetArraySize(list), k = 0;
  if (n < 1) return NAN;
  double *v = malloc((size_t)n * sizeof *v);
  if (!v) return NAN;
  const cJSON *item;
  cJSON_ArrayForEach(item, list) {
    if (cJSON_IsNumber(item)) v[k++] = item->valuedouble;
  }
  double out = NAN, sum = 0;
  bench_summary sm;
  if (k > 0 && bench_summary_compute(v, k, &sm) == 0) {
    for (int i = 0; i < k; i++) sum += v[i];
    out = which == 0 ? sm.median : which == 1 ? sm.min : which == 2 ? sum / k : v[0];
    if (which == 3) {
      for (int i = 0; i < k; i++) out = v[i] > out ? v[i] : out;
    }
  }
  free(v);
  return out;
}

static void set_number(cJSON *obj, const char *key, double v) {
  if (!isfinite(v)) return;
  if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
    cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_CreateNumber(v));
  } else {
    cJSON_AddNumberToObject(obj, key, v);
  }
}

/* After the passes: each ok row's summary over its per-pass medians; p50_ms
 * becomes their median (throughputs and speedups follow it), p95_ms the
 * median of the passes' p95, mean_ms their mean, min_ms and max_ms the
 * extremes. */
static void finish_passes(cJSON *report, int passes) {
  cJSON *section, *entry, *row;
  cJSON_ArrayForEach(section, cJSON_GetObjectItemCaseSensitive(report, "benchmarks")) {
    cJSON_ArrayForEach(entry, section) {
      cJSON *rows = cJSON_GetObjectItemCaseSensitive(entry, "rows");
      cJSON_ArrayForEach(row, rows) {
        if (!row_ok(row)) continue;
        cJSON *reps = cJSON_GetObjectItemCaseSensitive(row, "repetitions");
        cJSON *medians = cJSON_GetObjectItemCaseSensitive(reps, "medians_ms");
        int n = cJSON_GetArraySize(medians);
        double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
        int k = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, medians) {
          if (v && cJSON_IsNumber(item)) v[k++] = item->valuedouble;
        }
        bench_summary sm;
        if (!v || k < 1 || bench_summary_compute(v, k, &sm) != 0) {
          free(v);
          continue;
        }
        free(v);
        set_number(reps, "n", k);
        set_number(reps, "min_ms", sm.min);
        set_number(reps, "median_ms", sm.median);
        set_number(reps, "p95_ms", sm.p95);
        set_number(reps, "mad_ms", sm.mad);
        cJSON_AddNumberToObject(reps, "passes", passes);
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(row, "p50_ms");
        double scale = cJSON_IsNumber(old) && sm.median > 0 ? old->valuedouble / sm.median
                                                              : NAN;
        set_number(row, "p50_ms", sm.median);
        /* rates were work / p50: they follow the new p50 */
        cJSON *field;
        cJSON_ArrayForEach(field, row) {
          size_t len = field->string ? strlen(field->string) : 0;
          if (cJSON_IsNumber(field) && isfinite(scale) && len > 6 &&
              strcmp(field->string + len - 6, "_per_s") == 0) {
            cJSON_SetNumberValue(field, field->valuedouble * scale);
          }
        }
        set_number(row, "p95_ms",
                   list_stat(cJSON_GetObjectItemCaseSensitive(reps, "pass_p95_ms"), 0));
        set_number(row, "mean_ms",
                   list_stat(cJSON_GetObjectItemCaseSensitive(reps, "pass_mean_ms"), 2));
        set_number(row, "min_ms",
                   list_stat(cJSON_GetObjectItemCaseSensitive(reps, "pass_min_ms"), 1));
        set_number(row, "max_ms",
                   list_stat(cJSON_GetObjectItemCaseSensitive(reps, "pass_max_ms"), 3));
        static const char *const drop[] = {"pass_p95_ms", "pass_mean_ms", "pass_min_ms",
                                           "pass_max_ms"};
        for (size_t d = 0; d < 4; d++) cJSON_DeleteItemFromObjectCaseSensitive(reps, drop[d]);
      }
      /* speedups over the cpu row from the new p50s */
      cJSON *speedup = cJSON_GetObjectItemCaseSensitive(entry, "speedup_vs_cpu");
      const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(rows, "cpu");
      const cJSON *cpu_p50 = cJSON_GetObjectItemCaseSensitive(cpu, "p50_ms");
      cJSON *sp;
      cJSON_ArrayForEach(sp, speedup) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rows, sp->string), "p50_ms");
        if (cJSON_IsNumber(p) && cJSON_IsNumber(cpu_p50) && p->valuedouble > 0) {
          cJSON_SetNumberValue(sp, cpu_p50->valuedouble / p->valuedouble);
        }
      }
    }
  }
}

static int run_suite(int argc, char **argv) {
  bench_options opts;
  int rc = bench_parse_flags(argc, argv, &opts);
  if (rc < 0) return BENCH_EXIT_OK; /* --help, --version */
  if (rc > 0) return BENCH_EXIT_USAGE;
  if (check_output_dir("--output-json", opts.output_json) ||
      check_output_dir("--output-md", opts.output_md)) {
    return BENCH_EXIT_USAGE;
  }
  /* the trt backend reads its plugin library from the environment
   * (docs/trt.md: [backend trt] plugin_library, or $APEXX_TRT_PLUGIN_LIB) */
  if (opts.trt_plugin_lib) setenv("APEXX_TRT_PLUGIN_LIB", opts.trt_plugin_lib, 1);

  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, opts.config_path);
  if (st != APX_OK) {
    fprintf(stderr, "apexx-bench: cannot open the configuration%s%s%s: %s: %s\n",
            opts.config_path ? " [" : "", opts.config_path ? opts.config_path : "",
            opts.config_path ? "]" : "", apx_status_name(st), apx_last_error());
    return BENCH_EXIT_USAGE;
  }
  if (check_backends(ctx, &opts) != 0) {
    apx_close(ctx);
    return BENCH_EXIT_USAGE;
  }

  cJSON *report = bench_report_begin(ctx, &opts);
  char err[1024] = "";
  /* one repetition per pass over the suite */
  bench_options pass_opts = opts;
  pass_opts.repetitions = 1;
  int run_rc = bench_run(ctx, &pass_opts, report, err, sizeof err);
  for (int p = 1; p < opts.repetitions && run_rc != 1; p++) {
    cJSON *pass = cJSON_CreateObject();
    int pass_rc = bench_run(ctx, &pass_opts, pass, err, sizeof err);
    if (pass_rc == 1) {
      run_rc = 1;
    } else {
      merge_pass(report, pass);
      if (pass_rc == 2) run_rc = 2;
    }
    cJSON_Delete(pass);
  }
  if (run_rc != 1) finish_passes(report, opts.repetitions);
  if (run_rc != 1) bench_add_copy_shares(report);
  apx_close(ctx);
  if (run_rc == 1) {
    fprintf(stderr, "apexx-bench: run aborted, no report written: %s\n", err);
    cJSON_Delete(report);
    return BENCH_EXIT_USAGE;
  }

  char *json = bench_report_print(report);
  char *markdown = bench_render_markdown(report);
  int history_rc = 0;
  if (opts.history_dir) {
    if (bench_history_append(opts.history_dir, report, err, sizeof err) != 0) {
      fprintf(stderr, "apexx-bench: --history: %s\n", err);
      history_rc = 1;
    } else if (!opts.quiet) {
      fprintf(stderr, "apexx-bench: history: appended to [%s]\n", opts.history_dir);
    }
  }
  cJSON_Delete(report);
  if (!json || !markdown) {
    fprintf(stderr, "apexx-bench: out of memory rendering the report\n");
    free(json);
    free(markdown);
    return BENCH_EXIT_USAGE;
  }
  int write_rc =
      bench_write_pair("apexx-bench", opts.output_json, json, opts.output_md, markdown) != 0;
  if (write_rc == 0) {
    /* neither file named: the Markdown summary for a reader; JSON only
     * when asked (--output-json -) */
    if (!opts.output_json && !opts.output_md)
      fputs(markdown, stdout);
    /* the wrote_* lines stay off standard output when a file went there */
    int to_stdout = (opts.output_json && strcmp(opts.output_json, "-") == 0) ||
                    (opts.output_md && strcmp(opts.output_md, "-") == 0);
    FILE *lines = to_stdout ? stderr : stdout;
    if (!opts.quiet) {
      if (opts.output_json) fprintf(lines, "wrote_json=%s\n", opts.output_json);
      if (opts.output_md) fprintf(lines, "wrote_md=%s\n", opts.output_md);
    }
  }
  free(json);
  free(markdown);
  if (write_rc != 0 || history_rc != 0) return BENCH_EXIT_USAGE;
  if (run_rc == 2) {
    fprintf(stderr, "apexx-bench: status failed: at least one row failed "
                    "(see the report's rows)\n");
  }
  return run_rc == 2 ? BENCH_EXIT_FAILED : BENCH_EXIT_OK;
}

int main(int argc, char **argv) {
  /* past the file size limit a write fails with EFBIG and is reported and
   * rolled back (history) or discarded (temporaries), as on a full disk;
   * SIGXFSZ would end the process in the middle of a record */
  signal(SIGXFSZ, SIG_IGN);
  if (argc >= 2 && strcmp(argv[1], "compare") == 0) {
    return bench_compare_main(argc - 1, argv + 1);
  }
  if (argc >= 2 && strcmp(argv[1], "history") == 0) {
    return bench_history_main(argc - 1, argv + 1);
  }
  if (argc >= 2 && strcmp(argv[1], "ab") == 0) {
    return bench_ab_main(argc - 1, argv + 1);
  }
  return run_suite(argc, argv);
}
