/* SPDX-License-Identifier: Apache-2.0 */
/* An LD_PRELOAD library for checking apexx-bench's verdicts against a real
 * slowdown: it interposes apexx's public op functions (apx_tilepack, ...,
 * apx_ff_infer) so that a call takes (1 + APEXX_SLOWDOWN_FACTOR) times as
 * long. Results are the library's, bit for bit. APEXX_SLOWDOWN_OPS, a
 * comma-separated list, limits the slowdown to the calls it names: an op
 * (apx_op_name's: tileunpack) or one of apexx-bench's rows of an op with
 * settings (tileunpack_override, tileunpack_blend by the overlap mode;
 * tilessm_forward, tilessm_backward, tilessm_bidirectional by the
 * direction; tileunpack_backward_override, tileunpack_backward_blend;
 * tilessm_scan_backward_forward, tilessm_scan_backward_bidirectional).
 *
 * Host mode (default; host backends): the library's own function runs (the
 * core's argument and index checks, the dispatch and the backend's op),
 * then the calling thread spins for FACTOR times that call's wall time.
 * What a row of apexx-bench times is that call, so the row slows by FACTOR
 * whichever part of it is the core's and whichever the backend's.
 *
 * Device mode (APEXX_SLOWDOWN_DEVICE=cuda; the cuda backend): a device op's
 * work is not done when the call returns, and a graph replay does not call
 * the op at all. After each listed call the library enqueues a spin kernel
 * on the call's stream (one thread polling clock64, from PTX loaded through
 * the driver API: libcuda.so.1 at run time, no CUDA toolkit needed to
 * build this), so the stream's work, timed by events or captured into a
 * graph, grows by FACTOR times the op's device time. That time is measured
 * on the op's first calls outside a capture (apexx-bench's warm-up calls:
 * events around the call and its spin, the fastest of the 3rd to 5th
 * call, so give the rows at least 5 warm-up calls); until then the spin is
 * empty. APEXX_SLOWDOWN_DEVICE_US, when set, is the spin's length instead.
 * With FACTOR 0 the empty spin still runs: the other side of an A/B
 * carries the same extra launch, and the ratio is 1 + FACTOR.
 *
 * Built by `make check` (or make bench/apexx-slowdown.la); not installed
 * (make bench-check-seeded, bench/check-verdicts.sh, bench/gpu/ab-build.sh). */
#include <apexx/apexx.h>
#include <dlfcn.h>
#include <stdint.h>
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

/* Is a call of op `name` timed as row `row` (NULL: the op has one row)
 * listed in APEXX_SLOWDOWN_OPS (empty or unset: every op)? */
static int is_listed(const char *name, const char *row) {
  const char *list = getenv("APEXX_SLOWDOWN_OPS");
  return listed(list, name) || (row && list && *list && listed(list, row));
}

/* The factor for such a call: APEXX_SLOWDOWN_FACTOR when listed, else 0. */
static double factor_of(const char *name, const char *row) {
  return is_listed(name, row) ? factor_value() : 0.0;
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

/* ---- device mode -----------------------------------------------------------
 * The driver API's few entry points, resolved from libcuda.so.1 on first
 * use; a failure ends the process with the reason. */
typedef int cu_result;
typedef void *cu_handle;
#define CU_DEVICE_ATTRIBUTE_CLOCK_RATE 13 /* kHz */
#define CALIBRATION_SKIP 2                /* the first calls load modules, warm caches */
#define CALIBRATION_CALLS 3               /* then the fastest of three */

static const char spin_ptx[] = ".version 7.0\n"
                               ".target sm_50\n"
                               ".address_size 64\n"
                               ".visible .entry apexx_slowdown_spin(.param .u64 cycles)\n"
                               "{\n"
                               "  .reg .pred %p;\n"
                               "  .reg .b64 %rd<5>;\n"
                               "  ld.param.u64 %rd1, [cycles];\n"
                               "  mov.u64 %rd2, %clock64;\n"
                               "SPIN:\n"
                               "  mov.u64 %rd3, %clock64;\n"
                               "  sub.s64 %rd4, %rd3, %rd2;\n"
                               "  setp.lt.u64 %p, %rd4, %rd1;\n"
                               "  @%p bra SPIN;\n"
                               "  ret;\n"
                               "}\n";

static struct {
  int ready;
  cu_result (*ctx_get_current)(cu_handle *);
  cu_result (*ctx_get_device)(int *);
  cu_result (*device_get_attribute)(int *, int, int);
  cu_result (*module_load_data)(cu_handle *, const void *);
  cu_result (*module_get_function)(cu_handle *, cu_handle, const char *);
  cu_result (*launch_kernel)(cu_handle, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, cu_handle, void **, void **);
  cu_result (*event_create)(cu_handle *, unsigned);
  cu_result (*event_record)(cu_handle, cu_handle);
  cu_result (*event_synchronize)(cu_handle);
  cu_result (*event_elapsed_time)(float *, cu_handle, cu_handle);
  cu_result (*stream_is_capturing)(cu_handle, int *);
  cu_handle spin, start, stop;
  double cycles_per_ms;
} cu;

static void cu_check(cu_result r, const char *what) {
  if (r != 0) {
    fprintf(stderr, "apexx-slowdown: %s failed: CUresult %d\n", what, r);
    exit(1);
  }
}

/* An entry point by name (a "|"-separated list: the first exported). */
static void cu_load(void *lib, void *field, size_t size, const char *names) {
  void *p = NULL;
  char name[64];
  for (const char *at = names; *at && !p;) {
    size_t len = strcspn(at, "|");
    snprintf(name, sizeof name, "%.*s", (int)len, at);
    p = dlsym(lib, name);
    at += len + (at[len] == '|');
  }
  if (!p) {
    fprintf(stderr, "apexx-slowdown: libcuda.so.1 has no %s\n", names);
    exit(1);
  }
  memcpy(field, &p, size);
}

/* Resolve the driver API and load the spin kernel into the current
 * context (the backend's, current after its first call on this thread). */
static void cu_setup(void) {
  if (cu.ready) return;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_DEVICE=cuda, but libcuda.so.1: %s\n",
            dlerror());
    exit(1);
  }
#define CU_LOAD_(field, name) cu_load(lib, &cu.field, sizeof cu.field, name)
  CU_LOAD_(ctx_get_current, "cuCtxGetCurrent");
  CU_LOAD_(ctx_get_device, "cuCtxGetDevice");
  CU_LOAD_(device_get_attribute, "cuDeviceGetAttribute");
  CU_LOAD_(module_load_data, "cuModuleLoadData");
  CU_LOAD_(module_get_function, "cuModuleGetFunction");
  CU_LOAD_(launch_kernel, "cuLaunchKernel");
  CU_LOAD_(event_create, "cuEventCreate");
  CU_LOAD_(event_record, "cuEventRecord");
  CU_LOAD_(event_synchronize, "cuEventSynchronize");
  CU_LOAD_(event_elapsed_time, "cuEventElapsedTime_v2|cuEventElapsedTime");
  CU_LOAD_(stream_is_capturing, "cuStreamIsCapturing");
#undef CU_LOAD_
  cu_handle ctx = NULL;
  cu_check(cu.ctx_get_current(&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    fprintf(stderr, "apexx-slowdown: no current CUDA context after the op's call "
                    "(APEXX_SLOWDOWN_DEVICE=cuda with a host backend?)\n");
    exit(1);
  }
  int device = 0, khz = 0;
  cu_check(cu.ctx_get_device(&device), "cuCtxGetDevice");
  cu_check(cu.device_get_attribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device),
           "cuDeviceGetAttribute(clock rate)");
  cu.cycles_per_ms = (double)khz;
  cu_handle module = NULL;
  cu_check(cu.module_load_data(&module, spin_ptx), "cuModuleLoadData(spin kernel)");
  cu_check(cu.module_get_function(&cu.spin, module, "apexx_slowdown_spin"),
           "cuModuleGetFunction");
  cu_check(cu.event_create(&cu.start, 0), "cuEventCreate");
  cu_check(cu.event_create(&cu.stop, 0), "cuEventCreate");
  cu.ready = 1;
}

/* One op row's calibration and spin. */
typedef struct device_slow {
  int calls;       /* calls timed so far (outside captures) */
  double best_ms;  /* the fastest counted, the spin's launch included */
  int timed;       /* calls counted */
  uint64_t cycles; /* the spin's length, 0 until calibrated */
} device_slow;

/* APEXX_SLOWDOWN_DEVICE_US: the spin's length in microseconds, or -1. */
static double fixed_us(void) {
  const char *v = getenv("APEXX_SLOWDOWN_DEVICE_US");
  if (!v || !*v)
    return -1.0;
  char *end = NULL;
  double us = strtod(v, &end);
  if (end == v || *end || !(us >= 0.0 && us <= 1e7)) {
    fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_DEVICE_US = [%s] is not in [0, 1e7]\n", v);
    exit(1);
  }
  return us;
}

static int device_mode(void) {
  static int mode = -1;
  if (mode < 0) {
    const char *d = getenv("APEXX_SLOWDOWN_DEVICE");
    if (d && *d && strcmp(d, "cuda") != 0) {
      fprintf(stderr, "apexx-slowdown: APEXX_SLOWDOWN_DEVICE = [%s] is not cuda\n", d);
      exit(1);
    }
    mode = d && *d ? 1 : 0;
  }
  return mode;
}

/* Before a call: start timing it when it is a calibration call (the
 * driver is set up by the op's first call, which is not one). */
static int device_before(device_slow *d, cu_handle stream) {
  if (!cu.ready || d->timed >= CALIBRATION_CALLS || fixed_us() >= 0.0)
    return 0;
  int capture = 0;
  cu_check(cu.stream_is_capturing(stream, &capture), "cuStreamIsCapturing");
  if (capture) return 0;
  cu_check(cu.event_record(cu.start, stream), "cuEventRecord");
  return 1;
}

/* After a call: the spin kernel on the call's stream, then, for a
 * calibration call, the time of call and spin. */
static void device_after(device_slow *d, double factor, cu_handle stream, int timing) {
  cu_setup();
  double us = fixed_us();
  if (us >= 0.0 && factor > 0.0)
    d->cycles = (uint64_t)(us * 1e-3 * cu.cycles_per_ms);
  uint64_t cycles = d->cycles;
  void *args[] = {&cycles};
  cu_check(cu.launch_kernel(cu.spin, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL),
           "cuLaunchKernel(spin)");
  if (!timing) {
    if (d->calls == 0) d->calls = 1; /* the set-up call: not timed */
    return;
  }
  float ms = 0.0f;
  cu_check(cu.event_record(cu.stop, stream), "cuEventRecord");
  cu_check(cu.event_synchronize(cu.stop), "cuEventSynchronize");
  cu_check(cu.event_elapsed_time(&ms, cu.start, cu.stop), "cuEventElapsedTime");
  if (d->calls++ < CALIBRATION_SKIP) return;
  if (d->timed++ == 0 || ms < d->best_ms)
    d->best_ms = ms;
  if (d->timed == CALIBRATION_CALLS) {
    d->cycles = (uint64_t)(factor * d->best_ms * cu.cycles_per_ms);
    fprintf(stderr, "apexx-slowdown: device time %.4f ms a call; spin %llu cycles (x%g)\n",
            d->best_ms, (unsigned long long)d->cycles, factor);
  }
}

/* The apexx-bench row a call is timed as, for the ops whose rows differ
 * by a setting (bench/entries.c's entries); every other op has one row. */
#define SLOWDOWN_ROWS_MAX 3
static const char *const rows_tileunpack[SLOWDOWN_ROWS_MAX] = {"tileunpack_override",
                                                               "tileunpack_blend", NULL};
static const char *const rows_tilessm_scan[SLOWDOWN_ROWS_MAX] = {
    "tilessm_forward", "tilessm_backward", "tilessm_bidirectional"};
static const char *const rows_tileunpack_backward[SLOWDOWN_ROWS_MAX] = {
    "tileunpack_backward_override", "tileunpack_backward_blend", NULL};
/* the backward direction has no row of its own */
static const char *const rows_tilessm_scan_backward[SLOWDOWN_ROWS_MAX] = {
    "tilessm_scan_backward_forward", NULL, "tilessm_scan_backward_bidirectional"};
static const char *const one_row[SLOWDOWN_ROWS_MAX] = {NULL, NULL, NULL};

static const char *const *rows_of(apx_op_id op) {
  return op == APX_OP_TILEUNPACK              ? rows_tileunpack
         : op == APX_OP_TILESSM_SCAN          ? rows_tilessm_scan
         : op == APX_OP_TILEUNPACK_BACKWARD   ? rows_tileunpack_backward
         : op == APX_OP_TILESSM_SCAN_BACKWARD ? rows_tilessm_scan_backward
                                              : one_row;
}

/* An index into rows_of(op), or -1 for an op with one row. */
static int row_index(apx_op_id op, const void *args) {
  if (op == APX_OP_TILEUNPACK) {
    const apx_tileunpack_args *a = args;
    return a && a->mode == APX_OVERLAP_BLEND ? 1 : 0;
  }
  if (op == APX_OP_TILESSM_SCAN) {
    const apx_tilessm_scan_args *a = args;
    if (!a)
      return 0;
    return a->direction == APX_SCAN_BIDIRECTIONAL ? 2 : a->direction == APX_SCAN_BACKWARD ? 1 : 0;
  }
  if (op == APX_OP_TILEUNPACK_BACKWARD) {
    const apx_tileunpack_backward_args *a = args;
    return a && a->mode == APX_OVERLAP_BLEND ? 1 : 0;
  }
  if (op == APX_OP_TILESSM_SCAN_BACKWARD) {
    const apx_tilessm_scan_backward_args *a = args;
    if (!a)
      return 0;
    return a->direction == APX_SCAN_BIDIRECTIONAL ? 2 : a->direction == APX_SCAN_BACKWARD ? 1 : 0;
  }
  return -1;
}

/* Host mode: spin for f times the call's wall time. Device mode (listed
 * calls only): the spin kernel after the call, timed while calibrating. */
#define SLOWDOWN_WRAP_(upper, lower)                                                               \
  apx_status apx_##lower(apx_context *ctx, const apx_##lower##_args *args, const apx_call *call) { \
    typedef apx_status (*fn_t)(apx_context *, const apx_##lower##_args *, const apx_call *);       \
    static fn_t real;                                                                              \
    static double factor = -1.0, row_factor[SLOWDOWN_ROWS_MAX];                                    \
    static int on, row_on[SLOWDOWN_ROWS_MAX];                                                      \
    static device_slow device[SLOWDOWN_ROWS_MAX + 1];                                              \
    if (!real) {                                                                                   \
      void *p = next_definition("apx_" #lower);                                                    \
      memcpy(&real, &p, sizeof real);                                                              \
      factor = factor_of(#lower, NULL);                                                            \
      on = is_listed(#lower, NULL);                                                                \
      for (int r = 0; r < SLOWDOWN_ROWS_MAX; r++) {                                                \
        const char *row_name = rows_of(APX_OP_##upper)[r];                                         \
        row_factor[r] = row_name ? factor_of(#lower, row_name) : factor;                           \
        row_on[r] = row_name ? is_listed(#lower, row_name) : on;                                   \
      }                                                                                            \
    }                                                                                              \
    int row = row_index(APX_OP_##upper, args);                                                     \
    double f = row >= 0 ? row_factor[row] : factor;                                                \
    if (device_mode()) {                                                                           \
      if (!(row >= 0 ? row_on[row] : on))                                                          \
        return real(ctx, args, call);                                                              \
      device_slow *d = &device[row >= 0 ? row : SLOWDOWN_ROWS_MAX];                                \
      cu_handle stream = call ? call->stream : NULL;                                               \
      int timing = device_before(d, stream);                                                       \
      apx_status s = real(ctx, args, call);                                                        \
      if (s == APX_OK)                                                                             \
        device_after(d, f, stream, timing);                                                        \
      return s;                                                                                    \
    }                                                                                              \
    double t0 = now_s();                                                                           \
    apx_status s = real(ctx, args, call);                                                          \
    double t1 = now_s(), until = t1 + f * (t1 - t0);                                               \
    while (now_s() < until) {                                                                      \
    }                                                                                              \
    return s;                                                                                      \
  }
APX_OP_MAP(SLOWDOWN_WRAP_)
#undef SLOWDOWN_WRAP_
