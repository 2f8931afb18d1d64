/* A wrapper module for checking `make bench-check` against a real slowdown:
 * it loads a host backend (APEXX_SLOWDOWN_LIBRARY, an apexx-cpu.so), hands
 * out that backend's table under its own name, and wraps every op so that a
 * call takes (1 + APEXX_SLOWDOWN_FACTOR) times as long: the inner op runs,
 * then the calling thread spins for FACTOR times the op's own wall time.
 * Results are the inner backend's, bit for bit. Only for host backends (the
 * op's work is done when it returns). APEXX_SLOWDOWN_OPS, a comma-separated
 * list of op names (apx_op_name's), limits the slowdown to those ops.
 * Built by `make bench-check-seeded`; not installed. */
#include <apexx/backend.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static apx_backend_table wrapped;
static apx_backend_table inner;
static double factor;

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

static void spin_until(double t) {
  while (now_s() < t) {
  }
}

#define SLOWDOWN_WRAP_(upper, lower)                                           \
  static apx_status slow_##lower(void *state, const apx_##lower##_args *args,  \
                                 const apx_call *call) {                       \
    double t0 = now_s();                                                       \
    apx_status s = inner.lower(state, args, call);                             \
    double t1 = now_s();                                                       \
    spin_until(t1 + factor * (t1 - t0));                                       \
    return s;                                                                  \
  }
APX_OP_MAP(SLOWDOWN_WRAP_)
#undef SLOWDOWN_WRAP_

/* The inner table, or NULL with a line on stderr (the loader then reports
 * "returned no table"). */
static const apx_backend_table *load_inner(void) {
  const char *path = getenv("APEXX_SLOWDOWN_LIBRARY");
  const char *f = getenv("APEXX_SLOWDOWN_FACTOR");
  if (!path || !*path) {
    fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_LIBRARY is not set\n");
    return NULL;
  }
  char *end = NULL;
  factor = f ? strtod(f, &end) : 0.2;
  if (f && (end == f || *end || !(factor >= 0.0 && factor <= 100.0))) {
    fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_FACTOR = [%s] is not in [0, 100]\n", f);
    return NULL;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "apexx-slowdown: %s\n", dlerror());
    return NULL;
  }
  void *sym = dlsym(h, APX_BACKEND_ENTRY_SYMBOL);
  apx_backend_entry_fn entry;
  if (!sym) {
    fprintf(stderr, "apexx-slowdown: %s does not export %s\n", path, APX_BACKEND_ENTRY_SYMBOL);
    return NULL;
  }
  memcpy(&entry, &sym, sizeof entry);
  const apx_backend_table *t = entry();
  if (!t || t->abi_version != APX_BACKEND_ABI_VERSION || t->size != sizeof inner) {
    fprintf(stderr, "apexx-slowdown: %s was built for another backend ABI\n", path);
    return NULL;
  }
  return t;
}

APX_BACKEND_EXPORT const apx_backend_table *apx_backend_entry(void) {
  if (!wrapped.name) {
    const apx_backend_table *t = load_inner();
    if (!t) return NULL;
    const char *ops = getenv("APEXX_SLOWDOWN_OPS");
    inner = *t;
    wrapped = inner;
#define SLOWDOWN_SET_(upper, lower) \
  if (inner.lower && listed(ops, #lower)) wrapped.lower = slow_##lower;
    APX_OP_MAP(SLOWDOWN_SET_)
#undef SLOWDOWN_SET_
  }
  return &wrapped;
}
