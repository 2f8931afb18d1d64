/* SPDX-License-Identifier: Apache-2.0 */
/* An LD_PRELOAD library for checking apexx-bench's verdicts against a real
 * slowdown: it interposes apexx's public op functions (apx_tilepack, ...,
 * apx_ff_infer) so that a call takes (1 + APEXX_SLOWDOWN_FACTOR) times as
 * long: the library's own function runs (the core's argument and index
 * checks, the dispatch and the backend's op), then the calling thread
 * spins for FACTOR times that call's wall time. What a row of apexx-bench
 * times is that call, so the row slows by FACTOR whichever part of it is
 * the core's and whichever the backend's. Results are the library's, bit
 * for bit. For host backends (a device op's work is not done when the
 * call returns). APEXX_SLOWDOWN_OPS, a comma-separated list, limits the
 * slowdown to the calls it names: an op (apx_op_name's: tileunpack) or
 * one of apexx-bench's rows of an op with settings (tileunpack_override,
 * tileunpack_blend by the overlap mode; tilessm_forward, tilessm_backward,
 * tilessm_bidirectional by the direction). Built by `make check`; not
 * installed (make bench-check-seeded, bench/check-verdicts.sh). */
#include <apexx/apexx.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Is op `name` in the comma-separated list (NULL or empty: every op)? */
static int listed(const char *list, const char *name) {
  if (!list || !*list) return 1;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return 1;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* APEXX_SLOWDOWN_FACTOR (default 0.2). A bad factor ends the process with
 * a message: a seeded check that silently seeded nothing would pass for
 * the wrong reason. */
static double factor_value(void) {
  const char *f = getenv("APEXX_SLOWDOWN_FACTOR");
  char *end = NULL;
  double v = f ? strtod(f, &end) : 0.2;
  if (f && (end == f || *end || !(v >= 0.0 && v <= 100.0))) {
    fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_FACTOR = [%s] is not in [0, 100]\n", f);
    exit(1);
  }
  return v;
}

/* The factor for a call of op `name` timed as row `row` (NULL: the op has
 * one row): the factor when the op or the row is listed, else 0. */
static double factor_of(const char *name, const char *row) {
  const char *list = getenv("APEXX_SLOWDOWN_OPS");
  int on = listed(list, name) || (row && list && *list && listed(list, row));
  return on ? factor_value() : 0.0;
}

/* The next definition of `symbol` after this library (libapexx's). */
static void *next_definition(const char *symbol) {
  void *p = dlsym(RTLD_NEXT, symbol);
  if (!p) {
    fprintf(stderr, "apexx-slowdown: no %s after this library: %s\n", symbol, dlerror());
    exit(1);
  }
  return p;
}

/* The apexx-bench row a call is timed as, for the ops whose rows differ
 * by a setting (bench/runner.c's entries); an index into the op's rows,
 * or -1 for an op with one row. */
#define SLOWDOWN_ROWS_MAX 3
#define ONE_ROW_(lower)                                                                            \
  static int row_index_##lower(const apx_##lower##_args *args) {                                   \
    (void)args;                                                                                    \
    return -1;                                                                                     \
  }                                                                                                \
  static const char *const rows_##lower[SLOWDOWN_ROWS_MAX] = {NULL, NULL, NULL};
ONE_ROW_(tilepack)
ONE_ROW_(fused_pack_op_unpack)
ONE_ROW_(fusiongate_alpha)
ONE_ROW_(fusiongate_fuse)
ONE_ROW_(gather)
ONE_ROW_(index_select)
ONE_ROW_(scatter_add)
ONE_ROW_(gather_backward)
ONE_ROW_(ff_infer)
#undef ONE_ROW_
static const char *const rows_tileunpack[SLOWDOWN_ROWS_MAX] = {"tileunpack_override",
                                                               "tileunpack_blend", NULL};
static int row_index_tileunpack(const apx_tileunpack_args *args) {
  return args && args->mode == APX_OVERLAP_BLEND ? 1 : 0;
}
static const char *const rows_tilessm_scan[SLOWDOWN_ROWS_MAX] = {
    "tilessm_forward", "tilessm_backward", "tilessm_bidirectional"};
static int row_index_tilessm_scan(const apx_tilessm_scan_args *args) {
  if (!args)
    return 0;
  return args->direction == APX_SCAN_BIDIRECTIONAL ? 2
         : args->direction == APX_SCAN_BACKWARD    ? 1
                                                   : 0;
}

#define SLOWDOWN_WRAP_(upper, lower)                                                               \
  apx_status apx_##lower(apx_context *ctx, const apx_##lower##_args *args, const apx_call *call) { \
    typedef apx_status (*fn_t)(apx_context *, const apx_##lower##_args *, const apx_call *);       \
    static fn_t real;                                                                              \
    static double factor = -1.0, row_factor[SLOWDOWN_ROWS_MAX];                                    \
    if (!real) {                                                                                   \
      void *p = next_definition("apx_" #lower);                                                    \
      memcpy(&real, &p, sizeof real);                                                              \
      factor = factor_of(#lower, NULL);                                                            \
      for (int r = 0; r < SLOWDOWN_ROWS_MAX; r++) {                                                \
        row_factor[r] = rows_##lower[r] ? factor_of(#lower, rows_##lower[r]) : factor;             \
      }                                                                                            \
    }                                                                                              \
    int row = row_index_##lower(args);                                                             \
    double f = row >= 0 ? row_factor[row] : factor;                                                \
    double t0 = now_s();                                                                           \
    apx_status s = real(ctx, args, call);                                                          \
    double t1 = now_s(), until = t1 + f * (t1 - t0);                                               \
    while (now_s() < until) {                                                                      \
    }                                                                                              \
    return s;                                                                                      \
  }
APX_OP_MAP(SLOWDOWN_WRAP_)
#undef SLOWDOWN_WRAP_
