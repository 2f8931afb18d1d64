/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-bench ab's two builds (docs/report.md, A/B): resolving a build tree
 * or an install prefix, and one process of a side: its own apexx-bench,
 * libapexx and backends, run with the round's flags into a report. */
#include "config.h"

#include "ab.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

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
int ab_resolve_side(side *s, const char *given) {
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

void ab_side_free(side *s) {
  free(s->dir);
  free(s->bench);
  free(s->backend_dir);
  cJSON_Delete(s->probe);
}

/* Whether dir holds a libapexx.so.N (any soname: the two sides may be
 * builds of different library versions). */
static int holds_libapexx(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int found = 0;
  for (struct dirent *e; !found && (e = readdir(d));)
    found = strncmp(e->d_name, "libapexx.so.", 12) == 0;
  closedir(d);
  return found;
}

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
    if (holds_libapexx(dir))
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

double ab_now_s(void) {
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
cJSON *ab_run_side(side *s, const ab_run *run, int passes, const char *tag) {
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
  double t0 = ab_now_s();
  int rc = posix_spawn(&pid, s->bench, &actions, NULL, (char *const *)argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    fprintf(stderr, "apexx-bench ab: %s: cannot run [%s]: %s\n", s->label, s->bench, strerror(rc));
    goto out;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  s->seconds += ab_now_s() - t0;
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
void ab_remove_scratch(const char *dir) {
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
