/* cuda_bw: a bandwidth table of the cuda backend. Times every op through the
 * public API (apx_timer_begin/end, CUDA events) at the large profile and
 * reports the fewest bytes the op must move (each input read once, each
 * output written once), the achieved GB/s and its share of a
 * device-to-device apx_tensor_copy timed in the same run; then the seed
 * (fixed baseline) profile's time per call. Not installed; run on a GPU
 * machine by bench/gpu/run-all.sh.
 *
 * Large timing: the median over the samples of LARGE_CALLS back-to-back
 * calls between two events, per call (the host queues the next call while
 * the GPU runs the current one, so the host's per-call work between an
 * op's kernels does not show as idle GPU time; the copy is timed alike).
 *
 * Seed timing is GPU time per call, not the host's launch rate: each op's
 * SEED_CALLS back-to-back calls are captured on a non-default stream into a
 * CUDA graph, and replays of the graph are timed with events (per call =
 * elapsed / calls). An op whose calls cannot be captured (it synchronises
 * the host inside, as validate=eager does) falls back to events around
 * SEED_CALLS back-to-back calls; the "timing" column says which. The CUDA
 * driver (libcuda.so.1) is opened at run time, so this program still
 * builds without CUDA and links only libapexx.
 *
 *   cuda_bw [--iters N] [--profile large|seed|both] [--json FILE]
 *
 * Large profile: tile ops B8 C256 512x512 t8 K2048 fp16; scan B8 K4096
 * C1024 fp16; gather/index_select/scatter_add on src (262144, 1024) fp16
 * with 65536 rows (scatter_add's index = row ids repeated along the row).
 * Seed profile: B1 C128 128x128 t8 K32 fp16; scan B1 K256 C128; indexing
 * src (4096, 128) with 256 rows. Inputs are random (never zeros). The
 * validate mode is the configuration's ($APEXX_CONFIG); CUDA_BW_ONLY=a,b
 * times only the ops whose names contain one of the words;
 * CUDA_BW_SORTED_IDS=1 gives the tile ops each row's ids in ascending
 * order (a diagnostic: the tables use random order). */
#include <apexx/apexx.h>
#include "apx_splitmix.h"
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static apx_context *ctx;
static const apx_call on_gpu = {"cuda", NULL};
/* The call every timed op is made with: on_gpu, or the graph stream while
 * a seed row is captured and replayed. */
static apx_call op_call = {"cuda", NULL};
static uint64_t rng_state = 0x5eed1234abcdull;

static uint64_t next_u64(void) { return apx_splitmix64(&rng_state); }

static double next_uniform(void) { return apx_splitmix64_uniform(&rng_state); }

static void die(const char *what, apx_status st) {
  fprintf(stderr, "cuda_bw: %s: %s: %s\n", what, apx_status_name(st), apx_last_error());
  exit(1);
}

#define TRY(expr, what)                                                        \
  do {                                                                         \
    apx_status try_st_ = (expr);                                               \
    if (try_st_ != APX_OK) die((what), try_st_);                               \
  } while (0)

/* fp16 bits of a float (round to nearest even; the values here are normal). */
static uint16_t to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
  int32_t e = (int32_t)exp - 112;
  if (e <= 0) return (uint16_t)sign;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t h = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

static apx_tensor dev_tensor(apx_dtype dt, int ndim, const int64_t *shape) {
  apx_tensor t;
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, dt, ndim, shape, &t), "alloc");
  return t;
}

/* Fill a device fp16/fp32 tensor with uniform values in [lo, hi): a host
 * pattern of up to 4 Mi elements copied over it piece by piece. */
static void fill_float(const apx_tensor *t, double lo, double hi) {
  int64_t n = apx_tensor_numel(t), chunk = n < (4 << 20) ? n : (4 << 20);
  size_t es = apx_dtype_size(t->dtype);
  if (n == 0) return;
  void *pattern = malloc((size_t)chunk * es);
  for (int64_t i = 0; i < chunk; i++) {
    float v = (float)(lo + (hi - lo) * next_uniform());
    if (t->dtype == APX_DTYPE_F16)
      ((uint16_t *)pattern)[i] = to_f16(v);
    else
      ((float *)pattern)[i] = v;
  }
  for (int64_t at = 0; at < n; at += chunk) {
    int64_t len = n - at < chunk ? n - at : chunk;
    apx_tensor dst = apx_tensor_host((char *)t->data + at * (int64_t)es, t->dtype, 1, &len);
    dst.device = APX_DEVICE_CUDA;
    dst.device_index = t->device_index;
    apx_tensor src = apx_tensor_host(pattern, t->dtype, 1, &len);
    TRY(apx_tensor_copy(ctx, &dst, &src, NULL), "fill");
  }
  free(pattern);
}

/* A device index tensor from host values. */
static apx_tensor dev_index(apx_dtype dt, int ndim, const int64_t *shape, const int64_t *values) {
  apx_tensor d = dev_tensor(dt, ndim, shape);
  int64_t n = apx_tensor_numel(&d);
  void *h = malloc((size_t)(n > 0 ? n : 1) * apx_dtype_size(dt));
  for (int64_t i = 0; i < n; i++) {
    if (dt == APX_DTYPE_I64)
      ((int64_t *)h)[i] = values[i];
    else
      ((int32_t *)h)[i] = (int32_t)values[i];
  }
  apx_tensor src = apx_tensor_host(h, dt, ndim, shape);
  TRY(apx_tensor_copy(ctx, &d, &src, NULL), "index copy");
  free(h);
  return d;
}

static int cmp_id(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* K distinct tile ids per row, B rows (CUDA_BW_SORTED_IDS=1: each row in
 * ascending order, the spatial order, to see what DRAM locality the tile
 * ops could gain from processing tiles in id order). */
static int64_t *unique_ids(int64_t B, int64_t K, int64_t tiles) {
  int64_t *ids = malloc(sizeof(int64_t) * (size_t)(B * K));
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)tiles);
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < tiles; i++) perm[i] = i;
    for (int64_t k = 0; k < K; k++) {
      int64_t j = k + (int64_t)(next_u64() % (uint64_t)(tiles - k)), s = perm[k];
      perm[k] = perm[j];
      perm[j] = s;
      ids[b * K + k] = perm[k];
    }
    const char *sorted = getenv("CUDA_BW_SORTED_IDS");
    if (sorted && strcmp(sorted, "1") == 0) qsort(ids + b * K, (size_t)K, sizeof *ids, cmp_id);
  }
  free(perm);
  return ids;
}

typedef apx_status (*op_fn)(const void *args);

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median milliseconds of one call over `iters` timed calls (after warm-up);
 * with batch > 1 each timing covers `batch` back-to-back calls and the
 * result is per call (launch gaps overlap, as in a pipeline). */
static double time_op(op_fn fn, const void *args, int iters, int batch) {
  for (int i = 0; i < 3; i++) TRY(fn(args), "warm-up");
  TRY(apx_sync(ctx, &on_gpu), "warm-up sync");
  double *ms = malloc(sizeof(double) * (size_t)iters);
  for (int i = 0; i < iters; i++) {
    apx_timer *t = NULL;
    TRY(apx_timer_begin(ctx, "cuda", &on_gpu, &t), "timer_begin");
    for (int j = 0; j < batch; j++) TRY(fn(args), "op");
    TRY(apx_timer_end(ctx, t, &ms[i]), "timer_end");
    ms[i] /= batch;
  }
  TRY(apx_sync(ctx, &on_gpu), "sync");
  qsort(ms, (size_t)iters, sizeof(double), cmp_double);
  double median = ms[iters / 2];
  free(ms);
  return median;
}

/* ---- CUDA graph replay (seed profile) ------------------------------------------- */

/* The few CUDA driver entry points the replay needs, opened from libcuda.so.1
 * (the driver the cuda backend's runtime uses; a graph captured from the
 * backend's launches is a driver object). Types as in cuda.h. */
typedef int cu_result;
typedef struct cu_driver {
  cu_result (*init)(unsigned flags);
  cu_result (*device_get)(int *device, int ordinal);
  cu_result (*primary_ctx_retain)(void **ctx, int device);
  cu_result (*ctx_set_current)(void *ctx);
  cu_result (*stream_create)(void **stream, unsigned flags);
  cu_result (*stream_destroy)(void *stream);
  cu_result (*stream_synchronize)(void *stream);
  cu_result (*begin_capture)(void *stream, int mode);
  cu_result (*end_capture)(void *stream, void **graph);
  cu_result (*graph_instantiate)(void **exec, void *graph, unsigned long long flags);
  cu_result (*graph_launch)(void *exec, void *stream);
  cu_result (*graph_exec_destroy)(void *exec);
  cu_result (*graph_destroy)(void *graph);
  cu_result (*error_string)(cu_result error, const char **text);
  cu_result (*ctx_set_limit)(int limit, size_t value);
  cu_result (*ctx_get_limit)(size_t *value, int limit);
} cu_driver;

#define CU_STREAM_NON_BLOCKING 1u
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1

static cu_driver cu;
static void *graph_stream; /* NULL: graphs unavailable, every row times by events */
static char graph_unavailable[256];

static const char *cu_error_text(cu_result r) {
  const char *text = NULL;
  if (cu.error_string && cu.error_string(r, &text) == 0 && text) return text;
  return "unknown CUDA driver error";
}

/* Open the driver, make device 0's primary context (the one the cuda
 * backend's runtime uses) current and create the capture stream. */
static void graph_setup(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(graph_unavailable, sizeof graph_unavailable, "dlopen(libcuda.so.1): %s", dlerror());
    return;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"cuInit", (void **)&cu.init},
      {"cuDeviceGet", (void **)&cu.device_get},
      {"cuDevicePrimaryCtxRetain", (void **)&cu.primary_ctx_retain},
      {"cuCtxSetCurrent", (void **)&cu.ctx_set_current},
      {"cuStreamCreate", (void **)&cu.stream_create},
      {"cuStreamDestroy_v2", (void **)&cu.stream_destroy},
      {"cuStreamSynchronize", (void **)&cu.stream_synchronize},
      {"cuStreamBeginCapture_v2", (void **)&cu.begin_capture},
      {"cuStreamEndCapture", (void **)&cu.end_capture},
      {"cuGraphInstantiateWithFlags", (void **)&cu.graph_instantiate},
      {"cuGraphLaunch", (void **)&cu.graph_launch},
      {"cuGraphExecDestroy", (void **)&cu.graph_exec_destroy},
      {"cuGraphDestroy", (void **)&cu.graph_destroy},
      {"cuGetErrorString", (void **)&cu.error_string},
      {"cuCtxSetLimit", (void **)&cu.ctx_set_limit},
      {"cuCtxGetLimit", (void **)&cu.ctx_get_limit},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(graph_unavailable, sizeof graph_unavailable, "libcuda.so.1 lacks %s",
               syms[i].name);
      return;
    }
  }
  int device = 0;
  void *pctx = NULL, *stream = NULL;
  cu_result r = cu.init(0);
  if (r == 0) r = cu.device_get(&device, 0);
  if (r == 0) r = cu.primary_ctx_retain(&pctx, device);
  if (r == 0) r = cu.ctx_set_current(pctx);
  /* non-blocking: no implicit ordering with the legacy default stream that
   * the fills and the events fallback use */
  if (r == 0) r = cu.stream_create(&stream, CU_STREAM_NON_BLOCKING);
  if (r != 0) {
    snprintf(graph_unavailable, sizeof graph_unavailable, "driver setup: %s", cu_error_text(r));
    return;
  }
  graph_stream = stream;
}

/* An experiment knob: CUDA_BW_L2_FETCH=<bytes> sets the context's L2 fetch
 * granularity hint (CU_LIMIT_MAX_L2_FETCH_GRANULARITY) before the run and
 * prints what the driver reports before and after, to tell whether an
 * op's traffic is set by DRAM over-fetch (tilepack's 16-byte tile rows). */
static void l2_fetch_setup(const char *want) {
  size_t before = 0, after = 0;
  if (!graph_stream || cu.ctx_get_limit(&before, 0x05) != 0 ||
      cu.ctx_set_limit(0x05, (size_t)strtoul(want, NULL, 10)) != 0 ||
      cu.ctx_get_limit(&after, 0x05) != 0) {
    fprintf(stderr, "cuda_bw: CUDA_BW_L2_FETCH=%s could not be applied%s%s\n", want,
            graph_stream ? "" : ": ", graph_unavailable);
    exit(1);
  }
  printf("L2 fetch granularity: %zu bytes before, %zu after (CUDA_BW_L2_FETCH=%s)\n", before,
         after, want);
}

/* Capture `calls` back-to-back calls of fn on the graph stream. Returns the
 * instantiated graph, or NULL with the reason in why (the capture is ended
 * and discarded either way, so the stream is usable afterwards). */
static void *capture_calls(op_fn fn, const void *args, int calls, char *why, size_t why_size) {
  void *graph = NULL, *exec = NULL;
  cu_result r = cu.begin_capture(graph_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != 0) {
    snprintf(why, why_size, "begin capture: %s", cu_error_text(r));
    return NULL;
  }
  apx_status st = APX_OK;
  for (int j = 0; j < calls && st == APX_OK; j++) st = fn(args);
  char op_error[160] = "";
  if (st != APX_OK) snprintf(op_error, sizeof op_error, "%s", apx_last_error());
  r = cu.end_capture(graph_stream, &graph);
  if (st != APX_OK) {
    snprintf(why, why_size, "a call failed under capture: %s: %s", apx_status_name(st), op_error);
  } else if (r != 0) {
    snprintf(why, why_size, "end capture: %s", cu_error_text(r));
  } else {
    r = cu.graph_instantiate(&exec, graph, 0);
    if (r != 0) {
      snprintf(why, why_size, "instantiate: %s", cu_error_text(r));
      exec = NULL;
    }
  }
  if (graph) cu.graph_destroy(graph);
  return exec;
}

/* Median GPU milliseconds of one call: graph replays of `batch` captured
 * calls timed by events on the graph stream. Returns a negative value when
 * the op cannot be captured (reason in why). */
static double time_op_graph(op_fn fn, const void *args, int iters, int batch, char *why,
                            size_t why_size) {
  if (!graph_stream) {
    snprintf(why, why_size, "%s", graph_unavailable);
    return -1;
  }
  const apx_call on_stream = {"cuda", graph_stream};
  op_call.stream = graph_stream;
  /* warm-up by ordinary calls on the stream: every kernel the op uses is
   * loaded and every lazily created resource exists before the capture */
  for (int i = 0; i < 3; i++) TRY(fn(args), "warm-up");
  TRY(apx_sync(ctx, &on_stream), "warm-up sync");
  void *exec = capture_calls(fn, args, batch, why, why_size);
  if (!exec) {
    apx_sync(ctx, &on_stream); /* clears whatever the failed capture left */
    return -1;
  }
  enum { replays_per_sample = 5 };
  for (int i = 0; i < 3; i++) {
    cu_result r = cu.graph_launch(exec, graph_stream);
    if (r != 0) {
      snprintf(why, why_size, "graph launch: %s", cu_error_text(r));
      cu.graph_exec_destroy(exec);
      apx_sync(ctx, &on_stream);
      return -1;
    }
  }
  TRY(apx_sync(ctx, &on_stream), "graph warm-up sync");
  double *ms = malloc(sizeof(double) * (size_t)iters);
  for (int i = 0; i < iters; i++) {
    apx_timer *t = NULL;
    TRY(apx_timer_begin(ctx, "cuda", &on_stream, &t), "timer_begin");
    for (int j = 0; j < replays_per_sample; j++) {
      cu_result r = cu.graph_launch(exec, graph_stream);
      if (r != 0) {
        fprintf(stderr, "cuda_bw: graph launch: %s\n", cu_error_text(r));
        exit(1);
      }
    }
    TRY(apx_timer_end(ctx, t, &ms[i]), "timer_end");
    ms[i] /= (double)replays_per_sample * batch;
  }
  /* a bad index found in a replay (validate=device) surfaces here */
  TRY(apx_sync(ctx, &on_stream), "graph sync");
  cu.graph_exec_destroy(exec);
  qsort(ms, (size_t)iters, sizeof(double), cmp_double);
  double median = ms[iters / 2];
  free(ms);
  return median;
}

/* How the row's time was taken ("graph" or "events"), for the report. */
static const char *timing_method;
/* back-to-back calls per large-profile sample */
#define LARGE_CALLS 5

/* CUDA_BW_ONLY="a,b": time only the rows whose op name contains one of
 * the comma-separated words (and the copy baseline), e.g. under ncu. */
static int op_wanted(const char *op) {
  const char *only = getenv("CUDA_BW_ONLY");
  if (!only || !*only || !strncmp(op, "copy", 4)) return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", only);
  for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save))
    if (*w && strstr(op, w)) return 1;
  return 0;
}

/* The seed profile's timing: graph replay, else events around `batch`
 * back-to-back calls (the method is left in timing_method). The large
 * profile keeps events around single calls. */
static double time_row(const char *op, op_fn fn, const void *args, int iters, int batch,
                       int large) {
  if (!op_wanted(op)) return -1;
  if (!large) {
    char why[512] = "";
    double ms = time_op_graph(fn, args, iters, batch, why, sizeof why);
    op_call.stream = NULL;
    if (ms >= 0) {
      timing_method = "graph";
      return ms;
    }
    fprintf(stderr, "cuda_bw: seed %s: no graph replay (%s); timed by events\n", op, why);
  }
  static char label[32];
  snprintf(label, sizeof label, batch > 1 ? "events x%d" : "events", batch);
  timing_method = label;
  return time_op(fn, args, iters, batch);
}

/* ---- the ops as op_fn ---------------------------------------------------------- */

static apx_status run_copy(const void *a) {
  const apx_tensor *const *t = a;
  return apx_tensor_copy(ctx, t[0], t[1], &op_call);
}
static apx_status run_tilepack(const void *a) { return apx_tilepack(ctx, a, &op_call); }
static apx_status run_tileunpack(const void *a) { return apx_tileunpack(ctx, a, &op_call); }
static apx_status run_fused(const void *a) { return apx_fused_pack_op_unpack(ctx, a, &op_call); }
static apx_status run_alpha(const void *a) { return apx_fusiongate_alpha(ctx, a, &op_call); }
static apx_status run_fuse(const void *a) { return apx_fusiongate_fuse(ctx, a, &op_call); }
static apx_status run_scan(const void *a) { return apx_tilessm_scan(ctx, a, &op_call); }
static apx_status run_gather(const void *a) { return apx_gather(ctx, a, &op_call); }
static apx_status run_index_select(const void *a) { return apx_index_select(ctx, a, &op_call); }
static apx_status run_scatter_add(const void *a) { return apx_scatter_add(ctx, a, &op_call); }
static apx_status run_gather_backward(const void *a) {
  return apx_gather_backward(ctx, a, &op_call);
}

/* ---- report ---------------------------------------------------------------------- */

static FILE *json;
static int json_rows;
static double copy_gbps;

static void row(const char *profile, const char *op, double ms, double bytes, double target_pct,
                double target_us) {
  if (ms < 0) return; /* not timed (CUDA_BW_ONLY) */
  double gbps = bytes / (ms * 1e-3) / 1e9;
  double pct = copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0;
  const char *verdict = "";
  if (target_pct > 0) verdict = pct >= target_pct ? "ok" : "MISS";
  if (target_us > 0) verdict = ms * 1e3 <= target_us ? "ok" : "MISS";
  char target[32] = "";
  if (target_pct > 0) snprintf(target, sizeof target, ">= %.0f%%", target_pct);
  if (target_us > 0) snprintf(target, sizeof target, "<= %.0f us", target_us);
  printf("| %-5s | %-22s | %10.1f | %9.3f | %7.1f | %5.1f%% | %-9s | %-4s | %-6s |\n", profile,
         op, ms * 1e3, bytes / 1e6, gbps, pct, target, verdict, timing_method);
  if (json)
    fprintf(json,
            "%s\n    {\"profile\": \"%s\", \"op\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, "
            "\"gb_per_s\": %.2f, \"pct_of_copy\": %.2f, \"target\": \"%s\", \"verdict\": "
            "\"%s\", \"timing\": \"%s\"}",
            json_rows++ ? "," : "", profile, op, ms * 1e3, bytes, gbps, pct, target, verdict,
            timing_method);
}

/* ---- profiles ---------------------------------------------------------------------- */

typedef struct tile_profile {
  int64_t B, C, H, W, t, K;
} tile_profile;

typedef struct scan_profile {
  int64_t B, K, C;
} scan_profile;

typedef struct index_profile {
  int64_t M, D, N;
} index_profile;

static void run_profile(const char *name, tile_profile tp, scan_profile sp, index_profile ip,
                        int iters, int batch, int large) {
  const double es = 2.0; /* fp16 */
  int64_t fshape[4] = {tp.B, tp.C, tp.H, tp.W};
  int64_t tiles = (tp.H / tp.t) * (tp.W / tp.t);
  double numel = (double)tp.B * tp.C * tp.H * tp.W;
  double tile_elems = (double)tp.B * tp.K * tp.C * tp.t * tp.t;

  apx_tensor features = dev_tensor(APX_DTYPE_F16, 4, fshape);
  apx_tensor out = dev_tensor(APX_DTYPE_F16, 4, fshape);
  apx_tensor detail = dev_tensor(APX_DTYPE_F16, 4, fshape);
  fill_float(&features, -2, 2);
  fill_float(&detail, -2, 2);
  fill_float(&out, -1, 1);

  /* the copy baseline: one features-sized device-to-device copy */
  const apx_tensor *copy_args[2] = {&out, &features};
  double ms = time_row("copy (device to device)", run_copy, copy_args, iters, batch, large);
  if (large) copy_gbps = 2 * numel * es / (ms * 1e-3) / 1e9;
  row(name, "copy (device to device)", ms, 2 * numel * es, 0, 0);

  int64_t idx_shape[2] = {tp.B, tp.K};
  int64_t *ids = unique_ids(tp.B, tp.K, tiles);
  apx_tensor idx = dev_index(APX_DTYPE_I32, 2, idx_shape, ids);
  free(ids);
  int64_t pshape[5] = {tp.B, tp.K, tp.C, tp.t, tp.t};
  apx_tensor packed = dev_tensor(APX_DTYPE_F16, 5, pshape);
  fill_float(&packed, -2, 2);
  double idx_bytes = (double)tp.B * tp.K * 4;

  apx_tilepack_args pack = APX_TILEPACK_ARGS_INIT;
  pack.features = &features;
  pack.idx = &idx;
  pack.tile = tp.t;
  pack.out = &packed;
  ms = time_row("tilepack", run_tilepack, &pack, iters, batch, large);
  row(name, "tilepack", ms, 2 * tile_elems * es + idx_bytes, large ? 75 : 0, large ? 0 : 6);

  apx_tileunpack_args un = APX_TILEUNPACK_ARGS_INIT;
  un.base = &features;
  un.packed = &packed;
  un.idx = &idx;
  un.out = &out;
  /* unique ids: base read where not covered, tiles read where covered,
   * out written: two passes over the image */
  ms = time_row("tileunpack override", run_tileunpack, &un, iters, batch, large);
  row(name, "tileunpack override", ms, 2 * numel * es + idx_bytes, large ? 85 : 0,
      large ? 0 : 6);
  un.mode = APX_OVERLAP_BLEND;
  un.blend_alpha = 0.25;
  ms = time_row("tileunpack blend", run_tileunpack, &un, iters, batch, large);
  row(name, "tileunpack blend", ms, 2 * numel * es + tile_elems * es + idx_bytes,
      large ? 85 : 0, large ? 0 : 6);

  apx_fused_pack_op_unpack_args fu = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
  fu.features = &features;
  fu.idx = &idx;
  fu.tile = tp.t;
  fu.value_scale = 1.1;
  fu.value_bias = 0.1;
  fu.gate_scale = 0.9;
  fu.gate_bias = 0.2;
  fu.out = &out;
  ms = time_row("fused_pack_op_unpack", run_fused, &fu, iters, batch, large);
  row(name, "fused_pack_op_unpack", ms, 2 * numel * es + idx_bytes, large ? 85 : 0,
      large ? 0 : 6);

  int64_t ashape[4] = {tp.B, 1, tp.H, tp.W};
  apx_tensor bnd = dev_tensor(APX_DTYPE_F16, 4, ashape), unc = dev_tensor(APX_DTYPE_F16, 4, ashape);
  apx_tensor alpha = dev_tensor(APX_DTYPE_F16, 4, ashape);
  fill_float(&bnd, 0, 1);
  fill_float(&unc, 0, 1);
  double plane = (double)tp.B * tp.H * tp.W;
  apx_fusiongate_alpha_args al = APX_FUSIONGATE_ALPHA_ARGS_INIT;
  al.boundary = &bnd;
  al.uncertainty = &unc;
  al.out = &alpha;
  ms = time_row("fusiongate_alpha", run_alpha, &al, iters, batch, large);
  row(name, "fusiongate_alpha", ms, 3 * plane * es, 0, large ? 0 : 6);
  apx_fusiongate_fuse_args fz = APX_FUSIONGATE_FUSE_ARGS_INIT;
  fz.base = &features;
  fz.detail = &detail;
  fz.alpha = &alpha;
  fz.out = &out;
  ms = time_row("fusiongate_fuse", run_fuse, &fz, iters, batch, large);
  row(name, "fusiongate_fuse", ms, (3 * numel + plane) * es, large ? 85 : 0, large ? 0 : 6);
  apx_tensor_free(ctx, &bnd);
  apx_tensor_free(ctx, &unc);
  apx_tensor_free(ctx, &alpha);
  apx_tensor_free(ctx, &packed);
  apx_tensor_free(ctx, &idx);
  apx_tensor_free(ctx, &detail);
  apx_tensor_free(ctx, &out);
  apx_tensor_free(ctx, &features);

  /* scan */
  int64_t tshape[3] = {sp.B, sp.K, sp.C}, cshape[1] = {sp.C};
  apx_tensor tokens = dev_tensor(APX_DTYPE_F16, 3, tshape), y = dev_tensor(APX_DTYPE_F16, 3, tshape);
  apx_tensor vec[4];
  for (int i = 0; i < 4; i++) {
    vec[i] = dev_tensor(APX_DTYPE_F32, 1, cshape);
    fill_float(&vec[i], 0.1, 0.9);
  }
  fill_float(&tokens, -2, 2);
  apx_tilessm_scan_args sc = APX_TILESSM_SCAN_ARGS_INIT;
  sc.tokens = &tokens;
  sc.decay = &vec[0];
  sc.input_gain = &vec[1];
  sc.output_gain = &vec[2];
  sc.state_bias = &vec[3];
  sc.out = &y;
  double scan_bytes = 2.0 * sp.B * sp.K * sp.C * es;
  ms = time_row("tilessm forward", run_scan, &sc, iters, batch, large);
  row(name, "tilessm forward", ms, scan_bytes, large ? 50 : 0, large ? 0 : 6);
  sc.direction = APX_SCAN_BIDIRECTIONAL;
  ms = time_row("tilessm bidirectional", run_scan, &sc, iters, batch, large);
  row(name, "tilessm bidirectional", ms, scan_bytes, 0, 0);
  for (int i = 0; i < 4; i++) apx_tensor_free(ctx, &vec[i]);
  apx_tensor_free(ctx, &tokens);
  apx_tensor_free(ctx, &y);

  /* indexing: src (M, D), N rows */
  int64_t sshape[2] = {ip.M, ip.D}, oshape[2] = {ip.N, ip.D}, nshape[1] = {ip.N};
  apx_tensor src = dev_tensor(APX_DTYPE_F16, 2, sshape);
  apx_tensor rows_out = dev_tensor(APX_DTYPE_F16, 2, oshape);
  apx_tensor big_out = dev_tensor(APX_DTYPE_F16, 2, sshape);
  fill_float(&src, -2, 2);
  fill_float(&rows_out, -2, 2);
  int64_t *row_ids = malloc(sizeof(int64_t) * (size_t)ip.N);
  for (int64_t i = 0; i < ip.N; i++) row_ids[i] = (int64_t)(next_u64() % (uint64_t)ip.M);
  int64_t *full = malloc(sizeof(int64_t) * (size_t)(ip.N * ip.D));
  for (int64_t i = 0; i < ip.N; i++)
    for (int64_t j = 0; j < ip.D; j++) full[i * ip.D + j] = row_ids[i];
  apx_tensor rows_index = dev_index(APX_DTYPE_I64, 1, nshape, row_ids);
  apx_tensor full_index = dev_index(APX_DTYPE_I64, 2, oshape, full);
  free(full);
  free(row_ids);
  double rows_bytes = (double)ip.N * ip.D * es;
  double full_index_bytes = (double)ip.N * ip.D * 8, big_bytes = (double)ip.M * ip.D * es;

  apx_gather_args ga = APX_GATHER_ARGS_INIT;
  ga.src = &src;
  ga.index = &full_index;
  ga.out = &rows_out;
  ms = time_row("gather", run_gather, &ga, iters, batch, large);
  row(name, "gather", ms, 2 * rows_bytes + full_index_bytes, large ? 85 : 0, large ? 0 : 6);
  apx_index_select_args is = APX_INDEX_SELECT_ARGS_INIT;
  is.src = &src;
  is.index = &rows_index;
  is.out = &rows_out;
  ms = time_row("index_select", run_index_select, &is, iters, batch, large);
  row(name, "index_select", ms, 2 * rows_bytes + ip.N * 8.0, large ? 85 : 0, large ? 0 : 6);
  apx_scatter_add_args sa = APX_SCATTER_ADD_ARGS_INIT;
  sa.self = &src;
  sa.index = &full_index;
  sa.src = &rows_out;
  sa.out = &big_out;
  ms = time_row("scatter_add", run_scatter_add, &sa, iters, batch, large);
  row(name, "scatter_add", ms, 2 * big_bytes + rows_bytes + full_index_bytes, large ? 50 : 0,
      large ? 0 : 6);
  apx_gather_backward_args gb = APX_GATHER_BACKWARD_ARGS_INIT;
  gb.grad_out = &rows_out;
  gb.index = &full_index;
  gb.grad_src = &big_out;
  ms = time_row("gather_backward", run_gather_backward, &gb, iters, batch, large);
  row(name, "gather_backward", ms, big_bytes + rows_bytes + full_index_bytes, 0, 0);
  apx_tensor_free(ctx, &src);
  apx_tensor_free(ctx, &rows_out);
  apx_tensor_free(ctx, &big_out);
  apx_tensor_free(ctx, &rows_index);
  apx_tensor_free(ctx, &full_index);
}

int main(int argc, char **argv) {
  int iters = 20;
  const char *profile = "both", *json_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--profile") && i + 1 < argc)
      profile = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc)
      json_path = argv[++i];
    else {
      fprintf(stderr, "usage: cuda_bw [--iters N] [--profile large|seed|both] [--json FILE]\n");
      return 1;
    }
  }
  if (iters < 1) iters = 1;
  TRY(apx_open(&ctx, NULL), "apx_open");
  struct apx_backend_info info;
  int ok = 0;
  for (int i = 0; i < apx_backend_count(ctx); i++)
    if (apx_backend_info(ctx, i, &info) == APX_OK && !strcmp(info.name, "cuda"))
      ok = info.state == APX_BACKEND_OK;
  if (!ok) {
    printf("SKIP: the cuda backend cannot run here\n");
    apx_close(ctx);
    return 77;
  }
  struct apx_device_info dev;
  TRY(apx_device_info(ctx, APX_DEVICE_CUDA, 0, &dev), "device_info");
  const char *l2_fetch = getenv("CUDA_BW_L2_FETCH");
  if (strcmp(profile, "large") != 0 || (l2_fetch && *l2_fetch)) graph_setup();
  if (l2_fetch && *l2_fetch) l2_fetch_setup(l2_fetch);
  printf("cuda_bw on %s (cc %d.%d, %d SMs), validate mode from %s\n\n", dev.name,
         dev.compute_major, dev.compute_minor, dev.multiprocessors,
         getenv("APEXX_CONFIG") ? getenv("APEXX_CONFIG") : "the default configuration");
  if (json_path) {
    json = fopen(json_path, "w");
    if (!json) perror(json_path);
    else fprintf(json, "{\"device\": \"%s\", \"rows\": [", dev.name);
  }
  printf("| prof. | op                     |    time us |  min MB   |  GB/s   | %% copy | target    | ok?  | timing |\n");
  printf("| ----- | ---------------------- | ---------- | --------- | ------- | ------ | --------- | ---- | ------ |\n");
  if (strcmp(profile, "seed") != 0) {
    tile_profile tp = {8, 256, 512, 512, 8, 2048};
    scan_profile sp = {8, 4096, 1024};
    index_profile ip = {262144, 1024, 65536};
    run_profile("large", tp, sp, ip, iters, LARGE_CALLS, 1);
  }
  if (strcmp(profile, "large") != 0) {
    tile_profile tp = {1, 128, 128, 128, 8, 32};
    scan_profile sp = {1, 256, 128};
    index_profile ip = {4096, 128, 256};
    run_profile("seed", tp, sp, ip, iters > 50 ? iters : 50, 20, 0);
  }
  if (json) {
    fprintf(json, "\n]}\n");
    fclose(json);
  }
  apx_close(ctx);
  return 0;
}
