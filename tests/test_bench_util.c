/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* asprintf */
#include "test_bench_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

const char *bt_bench(void) {
  static char path[4096];
  const char *builddir = getenv("APEXX_BUILDDIR");
  if (!builddir || !*builddir) {
    printf("SKIP: APEXX_BUILDDIR is not set (run under make check)\n");
    exit(77);
  }
  snprintf(path, sizeof path, "%s/bench/apexx-bench", builddir);
  if (access(path, X_OK) != 0) {
    printf("SKIP: %s is not built\n", path);
    exit(77);
  }
  return path;
}

char *bt_read(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (len + 1 == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

void bt_write(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    abort();
  }
  fputs(text, f);
  fclose(f);
}

void bt_run(bt_result *r, const char *const *env, const char *const *argv) {
  bt_run_limited(r, env, argv, NULL);
}

void bt_run_limited(bt_result *r, const char *const *env, const char *const *argv,
                    const bt_limits *limits) {
  const char *bench = bt_bench();
  char *dir = bt_tmpdir();
  char *out_path = bt_path(dir, "stdout"), *err_path = bt_path(dir, "stderr");
  int argc = 0;
  while (argv[argc]) argc++;
  const char **full = calloc((size_t)argc + 2, sizeof *full);
  full[0] = bench;
  for (int i = 0; i < argc; i++) full[i + 1] = argv[i];
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
    if (limits && limits->file_size > 0) {
      struct rlimit rl = {(rlim_t)limits->file_size, (rlim_t)limits->file_size};
      if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        _exit(125);
    }
    /* a pending alarm survives execv */
    if (limits && limits->seconds > 0)
      alarm(limits->seconds);
    execv(bench, (char *const *)full);
    _exit(127);
  }
  int wstatus = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &wstatus, 0, &ru) < 0 && errno == EINTR) {
  }
  r->cpu_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
             (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
  r->max_rss_kb = ru.ru_maxrss;
  r->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  r->out = bt_read(out_path);
  r->err = bt_read(err_path);
  if (!r->out) r->out = strdup("");
  if (!r->err) r->err = strdup("");
  free(full);
  free(out_path);
  free(err_path);
  bt_rm_rf(dir);
  free(dir);
}

void bt_result_free(bt_result *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

char *bt_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  char *tmpl = NULL;
  if (asprintf(&tmpl, "%s/apexx-bench-test.XXXXXX", base && *base ? base : "/tmp") < 0) {
    abort();
  }
  if (!mkdtemp(tmpl)) {
    fprintf(stderr, "mkdtemp %s: %s\n", tmpl, strerror(errno));
    abort();
  }
  return tmpl;
}

void bt_rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    unlink(dir);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p = bt_path(dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
      bt_rm_rf(p);
    } else {
      unlink(p);
    }
    free(p);
  }
  closedir(d);
  rmdir(dir);
}

char *bt_path(const char *dir, const char *name) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", dir, name) < 0) abort();
  return p;
}

int bt_exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

int bt_dir_count(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  }
  closedir(d);
  return n;
}

cJSON *bt_load_json(const char *path) {
  char *text = bt_read(path);
  if (!text) return NULL;
  cJSON *json = cJSON_ParseWithOpts(text, NULL, 1);
  free(text);
  return json;
}

void bt_save_json(const char *path, const cJSON *json) {
  char *text = cJSON_Print(json);
  bt_write(path, text);
  free(text);
}

const cJSON *bt_get(const cJSON *root, const char *path) {
  char *copy = strdup(path);
  const cJSON *node = root;
  char *save = NULL;
  for (char *seg = strtok_r(copy, ".", &save); seg && node;
       seg = strtok_r(NULL, ".", &save)) {
    node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, seg) : NULL;
  }
  free(copy);
  return node;
}
