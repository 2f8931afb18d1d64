/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the apexx-bench suites: run the built binary
 * ($APEXX_BUILDDIR/bench/apexx-bench) with fork+exec, capture its exit
 * status and output, scratch directories, JSON files. */
#ifndef APX_TEST_BENCH_UTIL_H
#define APX_TEST_BENCH_UTIL_H

#include <cjson/cJSON.h>

typedef struct bt_result {
  int status;      /* exit status, or 128+signal when killed */
  char *out;       /* captured stdout */
  char *err;       /* captured stderr */
  double cpu_s;    /* the child's user + system CPU time */
  long max_rss_kb; /* the child's peak resident set */
} bt_result;

/* Limits of one child: seconds of wall time (SIGALRM: status 142), the
 * largest file it may write (RLIMIT_FSIZE, as a full disk; SIGXFSZ is
 * left at its default in the child); 0 is no limit. */
typedef struct bt_limits {
  unsigned seconds;
  long long file_size;
} bt_limits;

/* Path of the built apexx-bench; exits 77 with a reason when unknown. */
const char *bt_bench(void);
/* Run apexx-bench with argv (NULL-terminated, without argv[0]); env is a
 * NULL-terminated list of "NAME=value" set in the child (may be NULL). */
void bt_run(bt_result *r, const char *const *env, const char *const *argv);
void bt_run_limited(bt_result *r, const char *const *env, const char *const *argv,
                    const bt_limits *limits);
void bt_result_free(bt_result *r);

/* A fresh scratch directory under $TMPDIR (or /tmp); caller frees and
 * removes it with bt_rm_rf. */
char *bt_tmpdir(void);
void bt_rm_rf(const char *dir);
/* dir/name, malloc'd */
char *bt_path(const char *dir, const char *name);
int bt_exists(const char *path);
/* Number of entries in dir other than . and .. */
int bt_dir_count(const char *dir);
char *bt_read(const char *path);
void bt_write(const char *path, const char *text);
/* Parse a JSON file; NULL when unreadable or malformed. */
cJSON *bt_load_json(const char *path);
void bt_save_json(const char *path, const cJSON *json);
/* Dotted-path lookup in a JSON tree. */
const cJSON *bt_get(const cJSON *root, const char *path);

#endif
