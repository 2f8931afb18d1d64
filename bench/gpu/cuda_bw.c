/* cuda_bw: a bandwidth table of the cuda backend. Times every op through the
 * public API (apx_timer_begin/end, CUDA events) at the large profile and
 * reports the fewest bytes the op must move (each input read once, each
 * output written once), the achieved GB/s and its share of a
 * device-to-device apx_tensor_copy timed in the same run; then the seed
 * (fixed baseline) profile's time per call. Not installed; run on a GPU
 * machine by bench/gpu/run-all.sh.
 *
 *   cuda_bw [--iters N] [--profile large|seed|both] [--json FILE]
 *
 * Large profile: tile ops B8 C256 512x512 t8 K2048 fp16; scan B8 K4096
 * C1024 fp16; gather/index_select/scatter_add on src (262144, 1024) fp16
 * with 65536 rows (scatter_add's index = row ids repeated along the row).
 * Seed profile: B1 C128 128x128 t8 K32 fp16; scan B1 K256 C128; indexing
 * src (4096, 128) with 256 rows. Inputs are random (never zeros). The
 * validate mode is the configuration's ($APEXX_CONFIG). */
#include <apexx/apexx.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static apx_context *ctx;
static const apx_call on_gpu = {"cuda", NULL};
static uint64_t rng_state = 0x5eed1234abcdull;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double next_uniform(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }

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

/* K distinct tile ids per row, B rows. */
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

/* ---- the ops as op_fn ---------------------------------------------------------- */

static apx_status run_copy(const void *a) {
  const apx_tensor *const *t = a;
  return apx_tensor_copy(ctx, t[0], t[1], &on_gpu);
}
static apx_status run_tilepack(const void *a) { return apx_tilepack(ctx, a, &on_gpu); }
static apx_status run_tileunpack(const void *a) { return apx_tileunpack(ctx, a, &on_gpu); }
static apx_status run_fused(const void *a) { return apx_fused_pack_op_unpack(ctx, a, &on_gpu); }
static apx_status run_alpha(const void *a) { return apx_fusiongate_alpha(ctx, a, &on_gpu); }
static apx_status run_fuse(const void *a) { return apx_fusiongate_fuse(ctx, a, &on_gpu); }
static apx_status run_scan(const void *a) { return apx_tilessm_scan(ctx, a, &on_gpu); }
static apx_status run_gather(const void *a) { return apx_gather(ctx, a, &on_gpu); }
static apx_status run_index_select(const void *a) { return apx_index_select(ctx, a, &on_gpu); }
static apx_status run_scatter_add(const void *a) { return apx_scatter_add(ctx, a, &on_gpu); }
static apx_status run_gather_backward(const void *a) {
  return apx_gather_backward(ctx, a, &on_gpu);
}

/* ---- report ---------------------------------------------------------------------- */

static FILE *json;
static int json_rows;
static double copy_gbps;

static void row(const char *profile, const char *op, double ms, double bytes, double target_pct,
                double target_us) {
  double gbps = bytes / (ms * 1e-3) / 1e9;
  double pct = copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0;
  const char *verdict = "";
  if (target_pct > 0) verdict = pct >= target_pct ? "ok" : "MISS";
  if (target_us > 0) verdict = ms * 1e3 <= target_us ? "ok" : "MISS";
  char target[32] = "";
  if (target_pct > 0) snprintf(target, sizeof target, ">= %.0f%%", target_pct);
  if (target_us > 0) snprintf(target, sizeof target, "<= %.0f us", target_us);
  printf("| %-5s | %-22s | %10.1f | %9.3f | %7.1f | %5.1f%% | %-9s | %-4s |\n", profile, op,
         ms * 1e3, bytes / 1e6, gbps, pct, target, verdict);
  if (json)
    fprintf(json,
            "%s\n    {\"profile\": \"%s\", \"op\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, "
            "\"gb_per_s\": %.2f, \"pct_of_copy\": %.2f, \"target\": \"%s\", \"verdict\": "
            "\"%s\"}",
            json_rows++ ? "," : "", profile, op, ms * 1e3, bytes, gbps, pct, target, verdict);
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
  double ms = time_op(run_copy, copy_args, iters, batch);
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
  ms = time_op(run_tilepack, &pack, iters, batch);
  row(name, "tilepack", ms, 2 * tile_elems * es + idx_bytes, large ? 75 : 0, large ? 0 : 6);

  apx_tileunpack_args un = APX_TILEUNPACK_ARGS_INIT;
  un.base = &features;
  un.packed = &packed;
  un.idx = &idx;
  un.out = &out;
  /* unique ids: base read where not covered, tiles read where covered,
   * out written: two passes over the image */
  ms = time_op(run_tileunpack, &un, iters, batch);
  row(name, "tileunpack override", ms, 2 * numel * es + idx_bytes, large ? 85 : 0,
      large ? 0 : 6);
  un.mode = APX_OVERLAP_BLEND;
  un.blend_alpha = 0.25;
  ms = time_op(run_tileunpack, &un, iters, batch);
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
  ms = time_op(run_fused, &fu, iters, batch);
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
  ms = time_op(run_alpha, &al, iters, batch);
  row(name, "fusiongate_alpha", ms, 3 * plane * es, 0, large ? 0 : 6);
  apx_fusiongate_fuse_args fz = APX_FUSIONGATE_FUSE_ARGS_INIT;
  fz.base = &features;
  fz.detail = &detail;
  fz.alpha = &alpha;
  fz.out = &out;
  ms = time_op(run_fuse, &fz, iters, batch);
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
  ms = time_op(run_scan, &sc, iters, batch);
  row(name, "tilessm forward", ms, scan_bytes, large ? 50 : 0, large ? 0 : 6);
  sc.direction = APX_SCAN_BIDIRECTIONAL;
  ms = time_op(run_scan, &sc, iters, batch);
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
  ms = time_op(run_gather, &ga, iters, batch);
  row(name, "gather", ms, 2 * rows_bytes + full_index_bytes, large ? 85 : 0, large ? 0 : 6);
  apx_index_select_args is = APX_INDEX_SELECT_ARGS_INIT;
  is.src = &src;
  is.index = &rows_index;
  is.out = &rows_out;
  ms = time_op(run_index_select, &is, iters, batch);
  row(name, "index_select", ms, 2 * rows_bytes + ip.N * 8.0, large ? 85 : 0, large ? 0 : 6);
  apx_scatter_add_args sa = APX_SCATTER_ADD_ARGS_INIT;
  sa.self = &src;
  sa.index = &full_index;
  sa.src = &rows_out;
  sa.out = &big_out;
  ms = time_op(run_scatter_add, &sa, iters, batch);
  row(name, "scatter_add", ms, 2 * big_bytes + rows_bytes + full_index_bytes, large ? 50 : 0,
      large ? 0 : 6);
  apx_gather_backward_args gb = APX_GATHER_BACKWARD_ARGS_INIT;
  gb.grad_out = &rows_out;
  gb.index = &full_index;
  gb.grad_src = &big_out;
  ms = time_op(run_gather_backward, &gb, iters, batch);
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
  printf("cuda_bw on %s (cc %d.%d, %d SMs), validate mode from %s\n\n", dev.name,
         dev.compute_major, dev.compute_minor, dev.multiprocessors,
         getenv("APEXX_CONFIG") ? getenv("APEXX_CONFIG") : "the default configuration");
  if (json_path) {
    json = fopen(json_path, "w");
    if (!json) perror(json_path);
    else fprintf(json, "{\"device\": \"%s\", \"rows\": [", dev.name);
  }
  printf("| prof. | op                     |    time us |  min MB   |  GB/s   | %% copy | target    | ok?  |\n");
  printf("| ----- | ---------------------- | ---------- | --------- | ------- | ------ | --------- | ---- |\n");
  if (strcmp(profile, "seed") != 0) {
    tile_profile tp = {8, 256, 512, 512, 8, 2048};
    scan_profile sp = {8, 4096, 1024};
    index_profile ip = {262144, 1024, 65536};
    run_profile("large", tp, sp, ip, iters, 1, 1);
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
