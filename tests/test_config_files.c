/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx/config.c: what a configuration path may be (a regular file,
 * opened once and checked on the descriptor; a character device such as
 * /dev/null is empty; a FIFO, a directory or a socket is refused without
 * blocking), whole lines (a long comment never turns into keys, a line too
 * long is an error naming that line), and parse time linear in the number
 * of keys. */
#define _GNU_SOURCE
#include "coretest.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

static char dir[256];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/apexx-files-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(const char *name) {
  static char path[400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

/* apx_open must fail with APX_ERR_CONFIG and a message holding both needles */
static void open_fails(const char *path, const char *needle1, const char *needle2) {
  apx_context *ctx = (apx_context *)1;
  ck_assert_int_eq(apx_open(&ctx, path), APX_ERR_CONFIG);
  ck_assert_ptr_null(ctx);
  ck_assert_contains(apx_last_error(), needle1);
  if (needle2) ck_assert_contains(apx_last_error(), needle2);
}

/* ---- what the path is ---- */

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "apx_open blocked on a FIFO\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

START_TEST(fifo_is_refused_without_blocking) {
  const char *path = in_dir("fifo.ini");
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  /* a blocked open would never return: fail instead (CK_FORK=no too) */
  signal(SIGALRM, on_alarm);
  alarm(10);
  open_fails(path, path, "is a FIFO, not a regular file");
  alarm(0);
  signal(SIGALRM, SIG_DFL);
}
END_TEST

START_TEST(directory_is_refused) {
  const char *path = in_dir("conf.d");
  ck_assert_int_eq(mkdir(path, 0755), 0);
  open_fails(path, path, "is a directory, not a regular file");
}
END_TEST

START_TEST(socket_is_refused) {
  const char *path = in_dir("sock.ini");
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_ge(s, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  ck_assert_uint_lt(strlen(path), sizeof addr.sun_path);
  strcpy(addr.sun_path, path);
  ck_assert_int_eq(bind(s, (struct sockaddr *)&addr, sizeof addr), 0);
  open_fails(path, path, "is a socket, not a regular file");
  close(s);
}
END_TEST

START_TEST(dev_null_is_an_empty_configuration) {
  /* /dev/null is world-writable (0666): never read, so never refused */
  apx_context *ctx = open_ok("/dev/null");
  ck_assert_str_eq(apx_config_source(ctx), "/dev/null");
  ck_assert_int_eq(apx_backend_count(ctx), 0);
  ck_assert_str_eq(apx_config_warnings(ctx), "");
  apx_close(ctx);
}
END_TEST

START_TEST(symlink_to_a_regular_file_is_read) {
  const char *target = write_ini("[apexx]\norder = cpu\n[backend cpu]\n");
  char link[400];
  snprintf(link, sizeof link, "%s", in_dir("link.ini"));
  ck_assert_int_eq(symlink(target, link), 0);
  apx_context *ctx = open_ok(link);
  ck_assert_int_eq(apx_backend_count(ctx), 1);
  ck_assert_int_eq(backend_named(ctx, "cpu")->state, APX_BACKEND_OK);
  apx_close(ctx);
}
END_TEST

START_TEST(world_writable_is_checked_on_the_file_read) {
  const char *path = write_ini("[apexx]\norder = cpu\n[backend cpu]\n");
  ck_assert_int_eq(chmod(path, 0666), 0);
  open_fails(path, path, "is world-writable");
  /* through a symlink: the file opened is the one checked */
  char link[400];
  snprintf(link, sizeof link, "%s", in_dir("link.ini"));
  ck_assert_int_eq(symlink(path, link), 0);
  open_fails(link, link, "is world-writable");
}
END_TEST

/* ---- whole lines ---- */

/* "[backend cpu]\n" then head + fill x 'x' + tail */
static char *long_line_config(const char *head, size_t fill, const char *tail) {
  size_t size = strlen(head) + fill + strlen(tail) + 64;
  char *text = malloc(size);
  ck_assert_ptr_nonnull(text);
  size_t n = (size_t)snprintf(text, size, "[backend cpu]\n%s", head);
  memset(text + n, 'x', fill);
  snprintf(text + n + fill, size - n - fill, "%s", tail);
  return text;
}

START_TEST(long_comment_tail_is_not_a_key) {
  /* inih's 200-byte buffer once cut these after byte 199: the tail was
   * parsed as a line of its own */
  static const char *tails[] = {"library = /some/evil.so\n", "enabled = no\n"};
  static const char *prefixes[] = {"; ", "# ", "   ; "};
  static const size_t fills[] = {197, 400, 5000, 60000};
  for (size_t t = 0; t < 2; t++)
    for (size_t p = 0; p < 3; p++)
      for (size_t f = 0; f < 4; f++) {
        char *text = long_line_config(prefixes[p], fills[f], tails[t]);
        const char *path = write_ini(text);
        free(text);
        apx_context *ctx = open_ok(path);
        const struct apx_backend_info *cpu = backend_named(ctx, "cpu");
        ck_assert_msg(cpu->state == APX_BACKEND_OK, "[%s] x %zu [%s]: cpu is %s: %s",
                      prefixes[p], fills[f], tails[t], apx_backend_state_name(cpu->state),
                      cpu->reason);
        ck_assert_msg(strstr(cpu->library, "evil") == NULL, "library %s", cpu->library);
        ck_assert_str_eq(apx_config_warnings(ctx), "");
        apx_close(ctx);
      }
}
END_TEST

START_TEST(comment_longer_than_64k_is_an_error_naming_its_line) {
  char *text = long_line_config("; ", 70000, "\nenabled = no\n");
  const char *path = write_ini(text);
  free(text);
  char expect[512];
  snprintf(expect, sizeof expect, "%s:2: line longer than 65536 bytes", path);
  open_fails(path, expect, NULL);
}
END_TEST

/* The limit N of "line longer than N bytes" for a value line. */
static long value_line_limit(void) {
  char *text = long_line_config("library = /", 5000, ".so\nenabled = yes\n");
  const char *path = write_ini(text);
  free(text);
  char expect[512];
  /* the error names line 2, the long line, not the line after it */
  snprintf(expect, sizeof expect, "%s:2: line longer than ", path);
  open_fails(path, expect, NULL);
  const char *at = strstr(apx_last_error(), expect) + strlen(expect);
  char *end;
  long limit = strtol(at, &end, 10);
  ck_assert_msg(end > at && strncmp(end, " bytes", 6) == 0, "%s", apx_last_error());
  return limit;
}

START_TEST(long_value_line_is_an_error_naming_its_own_line) {
  long limit = value_line_limit();
  ck_assert_int_ge(limit, 100);
  ck_assert_int_le(limit, 65536);
  /* exactly limit bytes is taken whole: the value is the path that is
   * looked up (not found) */
  const char *head = "library = /nonexistent/";
  for (long extra = 0; extra <= 1; extra++) {
    size_t fill = (size_t)(limit + extra) - strlen(head) - 3;
    char *text = long_line_config(head, fill, ".so\n");
    const char *path = write_ini(text);
    free(text);
    if (extra == 0) {
      apx_context *ctx = open_ok(path);
      const struct apx_backend_info *cpu = backend_named(ctx, "cpu");
      ck_assert_int_eq(cpu->state, APX_BACKEND_NOT_FOUND);
      ck_assert_uint_eq(strlen(cpu->library), (size_t)limit - strlen("library = "));
      apx_close(ctx);
    } else {
      char expect[512];
      snprintf(expect, sizeof expect, "%s:2: line longer than %ld bytes", path, limit);
      open_fails(path, expect, NULL);
    }
  }
}
END_TEST

START_TEST(nul_byte_is_an_error_naming_its_line) {
  const char *path = in_dir("nul.ini");
  static const char text[] = "[backend cpu]\nenabled = auto\nlibrary = a\0.so\n";
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(text, 1, sizeof text - 1, f), sizeof text - 1);
  fclose(f);
  char expect[512];
  snprintf(expect, sizeof expect, "%s:3: line contains a NUL byte", path);
  open_fails(path, expect, NULL);
}
END_TEST

START_TEST(last_line_without_newline_and_crlf_are_read) {
  const char *path = write_ini("[apexx]\r\norder = cpu\r\n[backend cpu]\r\nenabled = no");
  apx_context *ctx = open_ok(path);
  ck_assert_int_eq(backend_named(ctx, "cpu")->state, APX_BACKEND_DISABLED);
  apx_close(ctx);
}
END_TEST

/* ---- parse time ---- */

/* n distinct keys (each one a warning), plus one key repeated n/4 times;
 * short lines: 50k keys stay under the 1 MiB a configuration may hold */
static double open_seconds(int n) {
  size_t size = (size_t)n * 40 + 64;
  char *text = malloc(size);
  ck_assert_ptr_nonnull(text);
  size_t len = (size_t)snprintf(text, size, "[extra]\n");
  for (int i = 0; i < n; i++) {
    len += (size_t)snprintf(text + len, size - len, "k%d=%d\n", i, i);
    if (i % 4 == 0) len += (size_t)snprintf(text + len, size - len, "s=%d\n", i);
  }
  ck_assert_uint_le(len, 1024 * 1024);
  const char *path = write_ini(text);
  free(text);
  double best = 1e9;
  for (int run = 0; run < 2; run++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    apx_context *ctx = open_ok(path);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* one warning per line but the section header */
    const char *w = apx_config_warnings(ctx);
    int lines = 0;
    for (; *w; w++) lines += *w == '\n';
    ck_assert_int_eq(lines, n + (n + 3) / 4);
    apx_close(ctx);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (s < best) best = s;
  }
  unlink(path);
  return best;
}

/* issue 30 item 21: a configuration larger than 1 MiB is refused before
 * it is read (a 50 MB one took 1.1 GB); 1 MiB itself is read. */
START_TEST(configuration_over_one_mib_is_refused) {
  const size_t cap = 1024 * 1024;
  for (int over = 0; over < 2; over++) {
    const char *path = in_dir(over ? "big.ini" : "cap.ini");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    size_t len = 0;
    len += (size_t)fprintf(f, "[backend cpu]\nenabled = no\n");
    char comment[1024];
    memset(comment, 'x', sizeof comment);
    comment[0] = ';';
    comment[sizeof comment - 1] = '\n';
    while (len + sizeof comment <= cap) len += fwrite(comment, 1, sizeof comment, f);
    while (len < cap + (size_t)over) len += fwrite("\n", 1, 1, f);
    ck_assert_int_eq(fclose(f), 0);
    apx_context *ctx = NULL;
    apx_status st = apx_open(&ctx, path);
    if (over) {
      ck_assert_int_eq(st, APX_ERR_CONFIG);
      ck_assert_contains(apx_last_error(),
                         "refused: [1048577] bytes, more than a configuration may hold [1048576]");
    } else {
      ck_assert_msg(st == APX_OK, "%s", apx_last_error());
      ck_assert_int_eq(backend_named(ctx, "cpu")->state, APX_BACKEND_DISABLED);
      apx_close(ctx);
    }
  }
}
END_TEST

START_TEST(parse_time_is_linear_in_the_number_of_keys) {
  const char *saved = getenv("APEXX_LOG");
  char *saved_copy = saved ? strdup(saved) : NULL;
  setenv("APEXX_LOG", "off", 1);
  double small = open_seconds(12500);
  double large = open_seconds(50000);
  if (saved_copy) {
    setenv("APEXX_LOG", saved_copy, 1);
    free(saved_copy);
  } else {
    unsetenv("APEXX_LOG");
  }
  /* 4x the keys: about 4x the time when linear, 16x when quadratic (the
   * quadratic parse took 32 s for 100k keys); the bound on the time itself
   * is loose enough for valgrind */
  ck_assert_msg(large < 8 * small + 0.05, "12.5k keys: %.3f s, 50k keys: %.3f s", small, large);
  ck_assert_msg(large < 30.0, "50k keys took %.3f s", large);
}
END_TEST

int main(void) {
  Suite *s = suite_create("config_files");
  TCase *paths = tcase_create("paths");
  tcase_add_checked_fixture(paths, setup, teardown);
  tcase_set_timeout(paths, 20);
  tcase_add_test(paths, fifo_is_refused_without_blocking);
  tcase_add_test(paths, directory_is_refused);
  tcase_add_test(paths, socket_is_refused);
  tcase_add_test(paths, dev_null_is_an_empty_configuration);
  tcase_add_test(paths, symlink_to_a_regular_file_is_read);
  tcase_add_test(paths, world_writable_is_checked_on_the_file_read);
  suite_add_tcase(s, paths);
  TCase *lines = tcase_create("lines");
  tcase_add_checked_fixture(lines, setup, teardown);
  tcase_set_timeout(lines, 20);
  tcase_add_test(lines, long_comment_tail_is_not_a_key);
  tcase_add_test(lines, comment_longer_than_64k_is_an_error_naming_its_line);
  tcase_add_test(lines, long_value_line_is_an_error_naming_its_own_line);
  tcase_add_test(lines, nul_byte_is_an_error_naming_its_line);
  tcase_add_test(lines, last_line_without_newline_and_crlf_are_read);
  tcase_add_test(lines, configuration_over_one_mib_is_refused);
  suite_add_tcase(s, lines);
  TCase *speed = tcase_create("speed");
  tcase_set_timeout(speed, 60);
  tcase_add_test(speed, parse_time_is_linear_in_the_number_of_keys);
  suite_add_tcase(s, speed);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
