/* An LD_PRELOAD library for checking `make bench-check` against a real
 * slowdown: it interposes apexx's public op functions (apx_tilepack, ...,
 * apx_ff_infer) so that a call takes (1 + APEXX_SLOWDOWN_FACTOR) times as
 * long: the library's own function runs (the core's argument and index
 * checks, the dispatch and the backend's op), then the calling thread
 * spins for FACTOR times that call's wall time. What a row of apexx-bench
 * times is that call, so the row slows by FACTOR whichever part of it is
 * the core's and whichever the backend's. Results are the library's, bit
 * for bit. For host backends (a device op's work is not done when the
 * call returns). APEXX_SLOWDOWN_OPS, a comma-separated list of op names
 * (apx_op_name's), limits the slowdown to those ops. Built by
 * `make bench-check-seeded`; not installed. */
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

/* The factor for op `name`: APEXX_SLOWDOWN_FACTOR (default 0.2) when the op
 * is listed, else 0. A bad factor ends the process with a message: a
 * seeded check that silently seeded nothing would pass for the wrong
 * reason. */
static double factor_of(const char *name) {
  const char *f = getenv("APEXX_SLOWDOWN_FACTOR");
  char *end = NULL;
  double v = f ? strtod(f, &end) : 0.2;
  if (f && (end == f || *end || !(v >= 0.0 && v <= 100.0))) {
    fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_FACTOR = [%s] is not in [0, 100]\n", f);
    exit(1);
  }
  return listed(getenv("APEXX_SLOWDOWN_OPS"), name) ? v : 0.0;
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

#define SLOWDOWN_WRAP_(upper, lower)                                           \
  apx_status apx_##lower(apx_context *ctx, const apx_##lower##_args *args,     \
                         const apx_call *call) {                               \
    typedef apx_status (*fn_t)(apx_context *, const apx_##lower##_args *,      \
                               const apx_call *);                              \
    static fn_t real;                                                          \
    static double factor = -1.0;                                               \
    if (!real) {                                                               \
      void *p = next_definition("apx_" #lower);                                \
      memcpy(&real, &p, sizeof real);                                          \
      factor = factor_of(#lower);                                              \
    }                                                                          \
    double t0 = now_s();                                                       \
    apx_status s = real(ctx, args, call);                                      \
    double t1 = now_s(), until = t1 + factor * (t1 - t0);                      \
    while (now_s() < until) {                                                  \
    }                                                                          \
    return s;                                                                  \
  }
APX_OP_MAP(SLOWDOWN_WRAP_)
#undef SLOWDOWN_WRAP_
