/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-cpu-bench: times every op of the cpu backend through the public API
 * (`make bench-cpu`; not part of make check, not installed).
 *
 * Two profiles, each in fp32 and fp16 (index tensors int64):
 *   seed: B1 C128 128x128 t8 K32; scan B1 K256 C128; indexing on a
 *         [16384, 128] source (the map's pixels x channels) with 2048 rows
 *         (the pixels of 32 tiles of 8x8);
 *   mid:  B4 C128 256x256 t8 K512 (half the tiles); scan B4 K1024 C256;
 *         indexing on [262144, 256] with 65536 rows.
 * Rows are distinct and drawn at random; gather, scatter_add and
 * gather_backward use the row ids repeated along each row (torch's
 * idx[:, None].expand(N, D)), dim 0. Inputs come from a seeded splitmix64.
 *
 * For each op it prints the median wall time of the calls, the minimal
 * bytes moved (every input byte the op needs read once, every output byte
 * written once), the bandwidth that implies and its share of a memcpy
 * measured in the same run (all cores, 256 MiB, read + written bytes,
 * median of 10). Usage: apexx-cpu-bench [-o FILE] [--quick] [--only WORD]
 * (--quick: 3 timed calls per op; --only: ops whose name contains WORD). */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <apexx/apexx.h>

#include "apx_half.h"
#include "apx_splitmix.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static const apx_call cpu_call = {"cpu", NULL};

/* ---- seeded data (splitmix64) -------------------------------------------- */
static uint64_t rng_state = 0x5eed5eedULL;

/* uniform in [-1, 1) */
static float rng_signed_unit(void) {
  return (float)((double)(apx_splitmix64(&rng_state) >> 11) * 0x1.0p-52 - 1.0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- host tensors ---------------------------------------------------------- */
#define MAX_TENSORS 8

typedef struct bench_case {
  apx_tensor t[MAX_TENSORS];
  int count;
} bench_case;

static apx_tensor *new_tensor(bench_case *bc, apx_dtype dt, int ndim, const int64_t *shape) {
  apx_tensor *t = &bc->t[bc->count++];
  *t = apx_tensor_host(NULL, dt, ndim, shape);
  size_t bytes = (size_t)apx_tensor_numel(t) * apx_dtype_size(dt);
  t->data = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!t->data) {
    fprintf(stderr, "apexx-cpu-bench: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  memset(t->data, 0, bytes);
  return t;
}

static void free_case(bench_case *bc) {
  for (int i = 0; i < bc->count; i++) free(bc->t[i].data);
  bc->count = 0;
}

static size_t tensor_bytes(const apx_tensor *t) {
  return (size_t)apx_tensor_numel(t) * apx_dtype_size(t->dtype);
}

/* values in [lo, hi) */
static void fill_uniform(const apx_tensor *t, float lo, float hi) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    float v = lo + (hi - lo) * 0.5f * (rng_signed_unit() + 1.0f);
    if (t->dtype == APX_DTYPE_F16) ((uint16_t *)t->data)[i] = apx_f32_to_f16(v);
    else if (t->dtype == APX_DTYPE_BF16) ((uint16_t *)t->data)[i] = apx_f32_to_bf16(v);
    else ((float *)t->data)[i] = v;
  }
}

/* `count` distinct ids in [0, range) per row of a [rows, count] i64 tensor */
static void fill_distinct(const apx_tensor *t, int64_t rows, int64_t count, int64_t range) {
  int64_t *perm = malloc((size_t)range * sizeof *perm);
  if (!perm) exit(1);
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t i = 0; i < range; i++) perm[i] = i;
    for (int64_t i = 0; i < count; i++) {
      int64_t j = i + (int64_t)(apx_splitmix64(&rng_state) % (uint64_t)(range - i));
      int64_t tmp = perm[i];
      perm[i] = perm[j];
      perm[j] = tmp;
      ((int64_t *)t->data)[r * count + i] = perm[i];
    }
  }
  free(perm);
}

/* ---- timing ------------------------------------------------------------------ */
typedef apx_status (*op_runner)(apx_context *ctx, const void *args);

#define RUNNER(op)                                                             \
  static apx_status run_##op(apx_context *ctx, const void *args) {             \
    return apx_##op(ctx, (const apx_##op##_args *)args, &cpu_call);            \
  }
RUNNER(tilepack)
RUNNER(tileunpack)
RUNNER(fused_pack_op_unpack)
RUNNER(fusiongate_alpha)
RUNNER(fusiongate_fuse)
RUNNER(tilessm_scan)
RUNNER(gather)
RUNNER(index_select)
RUNNER(scatter_add)
RUNNER(gather_backward)

static int quick;      /* --quick: fewer iterations (smoke test) */
static const char *only; /* --only WORD: time only ops whose name contains it */
static double memcpy_gbps;
static FILE *table_out; /* -o FILE, or NULL */
static int failures;

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  if (table_out) {
    va_start(ap, fmt);
    vfprintf(table_out, fmt, ap);
    va_end(ap);
  }
  fflush(stdout);
}

/* Median seconds per call: one warm-up call, then up to 15 calls or about
 * 1.2 s, at least 3. Returns a negative value when the op fails. */
static double time_op(apx_context *ctx, op_runner run, const void *args, const char *name) {
  if (only && !strstr(name, only)) return -2.0;
  apx_status st = run(ctx, args);
  if (st != APX_OK) {
    fprintf(stderr, "apexx-cpu-bench: %s: %s: %s\n", name, apx_status_name(st),
            apx_last_error());
    failures++;
    return -1.0;
  }
  double samples[15];
  int n = 0, max_n = quick ? 3 : 15;
  double start = now_s();
  while (n < max_n && (n < 3 || now_s() - start < 1.2)) {
    double t0 = now_s();
    run(ctx, args);
    samples[n++] = now_s() - t0;
  }
  return median(samples, n);
}

/* Median seconds of apx_explain on the same args: the core's validation
 * (for indexing ops it reads every host index value) without the kernel. */
static double time_validation(apx_context *ctx, apx_op_id op, const void *args) {
  apx_explanation e;
  double samples[5];
  for (int i = 0; i < 5; i++) {
    double t0 = now_s();
    apx_explain(ctx, op, args, &cpu_call, &e);
    samples[i] = now_s() - t0;
  }
  return median(samples, 5);
}

static void report(const char *profile, const char *op, apx_dtype dt, const char *shape,
                   double seconds, double bytes, const char *extra) {
  if (seconds == -2.0) return; /* not selected */
  if (seconds < 0) {
    emit("| %-5s | %-26s | %-4s | %-30s | %10s | %9s | %7s | %6s | %s |\n", profile, op,
         apx_dtype_name(dt), shape, "failed", "", "", "", "");
    return;
  }
  double gbps = bytes / seconds * 1e-9;
  emit("| %-5s | %-26s | %-4s | %-30s | %10.1f | %9.2f | %7.2f | %5.1f%% | %s |\n", profile,
       op, apx_dtype_name(dt), shape, seconds * 1e6, bytes * 1e-6, gbps,
       100.0 * gbps / memcpy_gbps, extra ? extra : "");
}

/* ---- memcpy reference ---------------------------------------------------------- */
static void measure_memcpy(void) {
  const size_t bytes = (size_t)256 << 20;
  char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
  if (!a || !b) exit(1);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double samples[10];
  for (int rep = -1; rep < 10; rep++) {
    double t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel
#endif
    {
      int team = 1, me = 0;
#ifdef _OPENMP
      team = omp_get_num_threads();
      me = omp_get_thread_num();
#endif
      size_t lo = bytes / (size_t)team * (size_t)me;
      size_t hi = me == team - 1 ? bytes : bytes / (size_t)team * (size_t)(me + 1);
      memcpy(b + lo, a + lo, hi - lo);
    }
    if (rep >= 0) samples[rep] = now_s() - t0;
  }
  memcpy_gbps = 2.0 * (double)bytes / median(samples, 10) * 1e-9;
  free(a);
  free(b);
}

/* ---- profiles -------------------------------------------------------------------- */
typedef struct profile {
  const char *name;
  int64_t B, C, H, W, t, K;        /* tile ops */
  int64_t scan_B, scan_K, scan_C; /* TileSSM */
  int64_t rows_src, width, rows;  /* indexing: src [rows_src, width], rows picked */
} profile;

static void bench_tile_ops(apx_context *ctx, const profile *p, apx_dtype dt) {
  const int64_t B = p->B, C = p->C, H = p->H, W = p->W, t = p->t, K = p->K;
  const int64_t tiles = (H / t) * (W / t);
  char shape[64];
  snprintf(shape, sizeof shape, "B%lld C%lld %lldx%lld t%lld K%lld", (long long)B,
           (long long)C, (long long)H, (long long)W, (long long)t, (long long)K);
  bench_case bc = {0};
  int64_t fshape[4] = {B, C, H, W}, ishape[2] = {B, K}, pshape[5] = {B, K, C, t, t};
  int64_t ashape[4] = {B, 1, H, W};
  apx_tensor *features = new_tensor(&bc, dt, 4, fshape);
  apx_tensor *idx = new_tensor(&bc, APX_DTYPE_I64, 2, ishape);
  apx_tensor *packed = new_tensor(&bc, dt, 5, pshape);
  apx_tensor *out = new_tensor(&bc, dt, 4, fshape);
  fill_uniform(features, -1.0f, 1.0f);
  fill_distinct(idx, B, K, tiles);
  const double map_bytes = (double)tensor_bytes(features);
  const double tiles_bytes = (double)tensor_bytes(packed), idx_bytes = (double)tensor_bytes(idx);

  apx_tilepack_args pack = APX_TILEPACK_ARGS_INIT;
  pack.features = features, pack.idx = idx, pack.tile = t, pack.out = packed;
  /* reads only the selected tiles */
  report(p->name, "tilepack", dt, shape, time_op(ctx, run_tilepack, &pack, "tilepack"),
         2 * tiles_bytes + idx_bytes, NULL);

  apx_tileunpack_args unpack = APX_TILEUNPACK_ARGS_INIT;
  unpack.base = features, unpack.packed = packed, unpack.idx = idx, unpack.out = out;
  report(p->name, "tileunpack override", dt, shape,
         time_op(ctx, run_tileunpack, &unpack, "tileunpack override"),
         2 * map_bytes + tiles_bytes + idx_bytes, NULL);
  unpack.mode = APX_OVERLAP_BLEND;
  report(p->name, "tileunpack blend", dt, shape,
         time_op(ctx, run_tileunpack, &unpack, "tileunpack blend"),
         2 * map_bytes + tiles_bytes + idx_bytes, NULL);

  apx_fused_pack_op_unpack_args fused = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
  fused.features = features, fused.idx = idx, fused.tile = t, fused.out = out;
  fused.value_scale = 1.5, fused.value_bias = 0.25, fused.gate_scale = 0.75;
  report(p->name, "fused_pack_op_unpack", dt, shape,
         time_op(ctx, run_fused_pack_op_unpack, &fused, "fused_pack_op_unpack"),
         2 * map_bytes + idx_bytes, NULL);
  free_case(&bc);

  apx_tensor *boundary = new_tensor(&bc, dt, 4, ashape);
  apx_tensor *uncertainty = new_tensor(&bc, dt, 4, ashape);
  apx_tensor *alpha = new_tensor(&bc, dt, 4, ashape);
  apx_tensor *base = new_tensor(&bc, dt, 4, fshape);
  apx_tensor *detail = new_tensor(&bc, dt, 4, fshape);
  apx_tensor *fused_out = new_tensor(&bc, dt, 4, fshape);
  fill_uniform(boundary, 0.0f, 1.0f);
  fill_uniform(uncertainty, 0.0f, 1.0f);
  fill_uniform(base, -1.0f, 1.0f);
  fill_uniform(detail, -1.0f, 1.0f);
  apx_fusiongate_alpha_args ga = APX_FUSIONGATE_ALPHA_ARGS_INIT;
  ga.boundary = boundary, ga.uncertainty = uncertainty, ga.out = alpha;
  report(p->name, "fusiongate_alpha", dt, shape,
         time_op(ctx, run_fusiongate_alpha, &ga, "fusiongate_alpha"),
         3.0 * (double)tensor_bytes(alpha), NULL);
  apx_fusiongate_fuse_args gf = APX_FUSIONGATE_FUSE_ARGS_INIT;
  gf.base = base, gf.detail = detail, gf.alpha = alpha, gf.out = fused_out;
  report(p->name, "fusiongate_fuse", dt, shape,
         time_op(ctx, run_fusiongate_fuse, &gf, "fusiongate_fuse"),
         3 * map_bytes + (double)tensor_bytes(alpha), NULL);
  free_case(&bc);
}

static void bench_scan(apx_context *ctx, const profile *p, apx_dtype dt) {
  const int64_t B = p->scan_B, K = p->scan_K, C = p->scan_C;
  char shape[64];
  snprintf(shape, sizeof shape, "B%lld K%lld C%lld", (long long)B, (long long)K, (long long)C);
  bench_case bc = {0};
  int64_t tshape[3] = {B, K, C}, cshape[1] = {C};
  apx_tensor *tokens = new_tensor(&bc, dt, 3, tshape);
  apx_tensor *out = new_tensor(&bc, dt, 3, tshape);
  apx_tensor *vec[4];
  for (int i = 0; i < 4; i++) vec[i] = new_tensor(&bc, dt, 1, cshape);
  fill_uniform(tokens, -3.0f, 3.0f);
  fill_uniform(vec[0], 0.05f, 0.95f);
  fill_uniform(vec[1], 0.5f, 1.5f);
  fill_uniform(vec[2], 0.5f, 1.5f);
  fill_uniform(vec[3], -0.1f, 0.1f);
  apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
  a.tokens = tokens, a.decay = vec[0], a.input_gain = vec[1], a.output_gain = vec[2];
  a.state_bias = vec[3], a.out = out;
  const double bytes = 2.0 * (double)tensor_bytes(tokens) + 4.0 * (double)tensor_bytes(vec[0]);
  const double tokens_n = (double)(B * K * C);
  char extra[64];
  a.direction = APX_SCAN_FORWARD;
  double s = time_op(ctx, run_tilessm_scan, &a, "tilessm_scan forward");
  snprintf(extra, sizeof extra, "%.2f G tokens/s", s > 0 ? tokens_n / s * 1e-9 : 0.0);
  report(p->name, "tilessm_scan forward", dt, shape, s, bytes, extra);
  a.direction = APX_SCAN_BIDIRECTIONAL;
  a.merge = APX_MERGE_AVG;
  s = time_op(ctx, run_tilessm_scan, &a, "tilessm_scan bidirectional");
  snprintf(extra, sizeof extra, "%.2f G tokens/s (avg merge)",
           s > 0 ? tokens_n / s * 1e-9 : 0.0);
  report(p->name, "tilessm_scan bidirectional", dt, shape, s, bytes, extra);
  free_case(&bc);
}

static void bench_indexing(apx_context *ctx, const profile *p, apx_dtype dt) {
  const int64_t M = p->rows_src, D = p->width, N = p->rows;
  char shape[64];
  snprintf(shape, sizeof shape, "(%lld, %lld) %lld rows", (long long)M, (long long)D,
           (long long)N);
  bench_case bc = {0};
  int64_t sshape[2] = {M, D}, ishape[2] = {N, D}, rshape[1] = {N};
  apx_tensor *src = new_tensor(&bc, dt, 2, sshape);
  apx_tensor *rows = new_tensor(&bc, APX_DTYPE_I64, 1, rshape);
  apx_tensor *index = new_tensor(&bc, APX_DTYPE_I64, 2, ishape);
  apx_tensor *small = new_tensor(&bc, dt, 2, ishape);
  apx_tensor *big_out = new_tensor(&bc, dt, 2, sshape);
  fill_uniform(src, -1.0f, 1.0f);
  fill_uniform(small, -1.0f, 1.0f);
  fill_distinct(rows, 1, N, M);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < D; j++)
      ((int64_t *)index->data)[i * D + j] = ((int64_t *)rows->data)[i];
  const double src_b = (double)tensor_bytes(src), small_b = (double)tensor_bytes(small);
  const double index_b = (double)tensor_bytes(index), rows_b = (double)tensor_bytes(rows);

  char note[128];
  double s;
  /* the core reads every host index value before the kernel runs: show
   * its share and the kernel's bandwidth without it */
#define VALIDATION_NOTE(op, args, what, bytes)                                 \
  do {                                                                         \
    double v_s = s >= 0 ? time_validation(ctx, op, args) : 0.0;                \
    double k_gbps = s > v_s ? (bytes) / (s - v_s) * 1e-9 : 0.0;                \
    snprintf(note, sizeof note,                                                \
             "%score validation %.0f us; without it %.2f GB/s = %.0f%%", what,  \
             v_s * 1e6, k_gbps, 100.0 * k_gbps / memcpy_gbps);                 \
  } while (0)
  apx_gather_args g = APX_GATHER_ARGS_INIT;
  g.src = src, g.dim = 0, g.index = index, g.out = small;
  s = time_op(ctx, run_gather, &g, "gather");
  VALIDATION_NOTE(APX_OP_GATHER, &g, "index [N,D] expanded; ", index_b + 2 * small_b);
  report(p->name, "gather", dt, shape, s, index_b + 2 * small_b, note);
  apx_index_select_args is = APX_INDEX_SELECT_ARGS_INIT;
  is.src = src, is.index = rows, is.out = small;
  s = time_op(ctx, run_index_select, &is, "index_select");
  VALIDATION_NOTE(APX_OP_INDEX_SELECT, &is, "", rows_b + 2 * small_b);
  report(p->name, "index_select", dt, shape, s, rows_b + 2 * small_b, note);
  fill_uniform(small, -1.0f, 1.0f);
  apx_scatter_add_args sa = APX_SCATTER_ADD_ARGS_INIT;
  sa.self = src, sa.dim = 0, sa.index = index, sa.src = small, sa.out = big_out;
  s = time_op(ctx, run_scatter_add, &sa, "scatter_add");
  VALIDATION_NOTE(APX_OP_SCATTER_ADD, &sa, "out of place; ", 2 * src_b + index_b + small_b);
  report(p->name, "scatter_add", dt, shape, s, 2 * src_b + index_b + small_b, note);
  apx_gather_backward_args gb = APX_GATHER_BACKWARD_ARGS_INIT;
  gb.grad_out = small, gb.dim = 0, gb.index = index, gb.grad_src = big_out;
  s = time_op(ctx, run_gather_backward, &gb, "gather_backward");
  VALIDATION_NOTE(APX_OP_GATHER_BACKWARD, &gb, "", src_b + index_b + small_b);
  report(p->name, "gather_backward", dt, shape, s, src_b + index_b + small_b, note);
#undef VALIDATION_NOTE
  free_case(&bc);
}

int main(int argc, char **argv) {
  const char *out_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "usage: apexx-cpu-bench [-o FILE] [--quick] [--only WORD]\n");
      return 1;
    }
  }
  if (out_path && *out_path) {
    table_out = fopen(out_path, "w");
    if (!table_out) {
      perror(out_path);
      return 1;
    }
  }
  apx_context *ctx = NULL;
  apx_status st = apx_open(&ctx, NULL);
  if (st != APX_OK) {
    fprintf(stderr, "apexx-cpu-bench: apx_open: %s: %s\n", apx_status_name(st),
            apx_last_error());
    return 1;
  }
  measure_memcpy();
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const char *wait_policy = getenv("OMP_WAIT_POLICY");
  emit("apexx cpu backend benchmark (apexx %s): memcpy %.2f GB/s (read + written, "
       "%d threads, 256 MiB, median of 10), OMP_WAIT_POLICY=%s\n\n",
       apx_version(), memcpy_gbps, threads, wait_policy ? wait_policy : "(unset)");
  emit("| prof  | op                         | type | shape                          | "
       "median us |   MB min | GB/s    | %%memcpy | note |\n");
  emit("|-------|----------------------------|------|--------------------------------|"
       "-----------|----------|---------|---------|------|\n");
  static const profile profiles[] = {
      {"seed", 1, 128, 128, 128, 8, 32, 1, 256, 128, 16384, 128, 2048},
      {"mid", 4, 128, 256, 256, 8, 512, 4, 1024, 256, 262144, 256, 65536},
  };
  static const apx_dtype dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16};
  for (size_t p = 0; p < sizeof profiles / sizeof profiles[0]; p++)
    for (size_t d = 0; d < 2; d++) {
      bench_tile_ops(ctx, &profiles[p], dtypes[d]);
      bench_scan(ctx, &profiles[p], dtypes[d]);
      bench_indexing(ctx, &profiles[p], dtypes[d]);
    }
  /* the machine may be shared: a second memcpy shows whether the
   * reference moved during the run */
  double first_gbps = memcpy_gbps;
  measure_memcpy();
  emit("\nmemcpy at the start %.2f GB/s, at the end %.2f GB/s\n", first_gbps, memcpy_gbps);
  apx_close(ctx);
  if (table_out) fclose(table_out);
  return failures ? 2 : 0;
}
