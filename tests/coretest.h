/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the core suites: write a config file, open it. */
#ifndef APX_CORETEST_H
#define APX_CORETEST_H

#include <apexx/apexx.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The .ini files write_ini made, removed when the process that made them
 * exits (a forked test's files by that test's process). */
#define CORETEST_MAX_INI 256
static char coretest_ini[CORETEST_MAX_INI][256];
static pid_t coretest_ini_pid[CORETEST_MAX_INI];
static int coretest_ini_count;

static inline void coretest_remove_ini(void) {
  for (int i = 0; i < coretest_ini_count; i++)
    if (coretest_ini_pid[i] == getpid()) unlink(coretest_ini[i]);
}

/* Write text to a fresh temporary .ini file; returns its path (static). */
static inline const char *write_ini(const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "/tmp/apexx-test-XXXXXX.ini");
  int fd = mkstemps(path, 4);
  ck_assert_int_ge(fd, 0);
  if (coretest_ini_count == 0) atexit(coretest_remove_ini);
  if (coretest_ini_count < CORETEST_MAX_INI) {
    snprintf(coretest_ini[coretest_ini_count], sizeof coretest_ini[0], "%s", path);
    coretest_ini_pid[coretest_ini_count++] = getpid();
  }
  FILE *f = fdopen(fd, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return path;
}

/* "%s" in text is replaced with the directory of the check-only modules. */
static inline const char *write_ini_modules(const char *fmt) {
  static char text[4096];
  const char *dir = getenv("APEXX_TEST_MODULES");
  ck_assert_msg(dir != NULL, "APEXX_TEST_MODULES is not set (run under make check)");
  snprintf(text, sizeof text, fmt, dir);
  return write_ini(text);
}

static inline apx_context *open_ok(const char *path) {
  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, path);
  ck_assert_msg(st == APX_OK, "apx_open(%s): %s: %s", path ? path : "NULL", apx_status_name(st),
                apx_last_error());
  return ctx;
}

static inline const struct apx_backend_info *backend_named(apx_context *ctx, const char *name) {
  static struct apx_backend_info info;
  for (int i = 0; i < apx_backend_count(ctx); i++) {
    ck_assert_int_eq(apx_backend_info(ctx, i, &info), APX_OK);
    if (strcmp(info.name, name) == 0) return &info;
  }
  ck_abort_msg("backend %s not configured", name);
  return NULL;
}

/* apx_open(path) with stderr (the log sink while a context opens)
 * captured into log, a buffer of log_size bytes. */
static inline apx_status open_capturing_log(const char *path, apx_context **ctx, char *log,
                                            size_t log_size) {
  fflush(stderr);
  char name[] = "/tmp/apexx-log-XXXXXX";
  int fd = mkstemp(name);
  ck_assert_int_ge(fd, 0);
  unlink(name);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_eq(dup2(fd, 2), 2);
  apx_status st = apx_open(ctx, path);
  fflush(stderr);
  ck_assert_int_eq(dup2(saved, 2), 2);
  close(saved);
  ssize_t n = pread(fd, log, log_size - 1, 0);
  close(fd);
  log[n > 0 ? n : 0] = '\0';
  return st;
}

#define ck_assert_contains(hay, needle)                                        \
  ck_assert_msg(strstr((hay), (needle)) != NULL, "expected [%s] in [%s]", (needle), (hay))

#endif
