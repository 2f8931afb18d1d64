/* apexx-bench: the suite driver (spec/report.md, apexx-bench(1)).
 *   apexx-bench [flags]             run the suite, write JSON + Markdown
 *   apexx-bench compare BASE CUR    regression verdict (compare.c)
 *   apexx-bench history DIR [R...]  history store and chart (history.c)
 * Exit status: 0 every row ran or was skipped with a reason; 2 a row failed
 * (or, for compare, a regression); 1 bad flags, bad config, unusable input,
 * or a report that could not be written (then no file is left behind). */
#include "config.h"

#include "bench.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The directory of an output path must exist and be writable; checked
 * before the suite runs so a long run does not end in an unwritable file. */
static int check_output_dir(const char *flag, const char *path) {
  if (!path || strcmp(path, "-") == 0) return 0;
  char *copy = strdup(path);
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

/* Write the JSON and the Markdown together: both are prepared first
 * (temporary files beside regular targets), then both are committed, so a
 * failure while preparing leaves neither (older files untouched); a failure
 * of the second commit says exactly which file was written. Temporary files
 * an earlier killed run left beside the targets (older than ten minutes)
 * are removed. */
static int write_outputs(const bench_options *opts, const char *json,
                         const char *markdown) {
  char err[1024];
  bench_pending_file pj, pm;
  memset(&pj, 0, sizeof pj);
  memset(&pm, 0, sizeof pm);
  if (opts->output_json) bench_clean_stale_temps(opts->output_json, 600.0);
  if (opts->output_md) bench_clean_stale_temps(opts->output_md, 600.0);
  if (opts->output_json &&
      bench_write_temp(opts->output_json, json, &pj, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench: --output-json: %s\n", err);
    return 1;
  }
  if (opts->output_md &&
      bench_write_temp(opts->output_md, markdown, &pm, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench: --output-md: %s\n", err);
    bench_discard_temp(&pj);
    return 1;
  }
  if (bench_commit_temp(&pj, err, sizeof err) != 0) {
    fprintf(stderr, "apexx-bench: --output-json: %s; neither file was written\n",
            err);
    bench_discard_temp(&pm);
    return 1;
  }
  if (bench_commit_temp(&pm, err, sizeof err) != 0) {
    fprintf(stderr,
            "apexx-bench: --output-md: %s; the JSON [%s] was written, the "
            "Markdown [%s] was not (any older file there is unchanged)\n",
            err, opts->output_json ? opts->output_json : "-",
            opts->output_md);
    return 1;
  }
  return 0;
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
   * (DESIGN.md configuration: plugin_library or $APEXX_TRT_PLUGIN_LIB) */
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
  int run_rc = bench_run(ctx, &opts, report, err, sizeof err);
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
  int write_rc = write_outputs(&opts, json, markdown);
  if (write_rc == 0) {
    if (!opts.output_json) fputs(json, stdout);
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
  if (argc >= 2 && strcmp(argv[1], "compare") == 0) {
    return bench_compare_main(argc - 1, argv + 1);
  }
  if (argc >= 2 && strcmp(argv[1], "history") == 0) {
    return bench_history_main(argc - 1, argv + 1);
  }
  return run_suite(argc, argv);
}
