/* SPDX-License-Identifier: Apache-2.0 */
/* Per-frame time of apx_ff_infer on the cuda backend at the default profile
 * (B 1, C 128, 128x128, fp16, tile 16/8, kmax 32/64, b1 16, b2 8, costs
 * 1/0.2; weights apx_ff_weights_seeded(ctx, 128, 123); inputs N(0,1),
 * proxies uniform in [0,1)), eager launches and with graph_replay, and the
 * peak of the backend's allocations (apx_peak_memory), and the frame's
 * minimal bytes and FLOPs against a device copy measured in the same run
 * (256 MiB, apx_tensor_copy) and the card's dense f16 tensor peak (a
 * datasheet figure, FF_TIME_PEAK_TFLOPS, default 989 for the H100 SXM).
 * Public API only;
 * exit 77 where the cuda backend cannot run.
 *   bench/gpu/ff_time [iterations]   (default 200) */
#include <apexx/apexx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x5eed;
static double uniform(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

#define TRY(expr)                                                              \
  do {                                                                         \
    apx_status s_ = (expr);                                                    \
    if (s_ != APX_OK) {                                                        \
      fprintf(stderr, "ff_time: %s: %s: %s\n", #expr, apx_status_name(s_), apx_last_error()); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* A device tensor of f32 values from fill(), converted by apx_tensor_copy's
 * dtype rules: the host side is written in the tensor's own dtype. */
static apx_tensor device_random(apx_context *ctx, apx_dtype dt, int ndim, const int64_t *shape,
                                double lo, double hi) {
  apx_tensor d, h32;
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, dt, ndim, shape, &d));
  int64_t n = apx_tensor_numel(&d);
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * uniform());
  h32 = apx_tensor_host(v, APX_DTYPE_F32, ndim, shape);
  if (dt == APX_DTYPE_F32) {
    TRY(apx_tensor_copy(ctx, &d, &h32, NULL));
  } else { /* f16 / bf16 bits by rounding on the host (RNE) */
    uint16_t *b = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, &v[i], 4);
      if (dt == APX_DTYPE_BF16) {
        b[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      } else { /* values in [-8, 8): normal fp16 range, RNE */
        float f = v[i];
        int sign = f < 0;
        if (sign) f = -f;
        uint16_t hb = 0;
        if (f >= 6.103515625e-05f) {
          int e = 0;
          float m = f;
          while (m >= 2.0f) { m /= 2.0f; e++; }
          while (m < 1.0f) { m *= 2.0f; e--; }
          float frac = (m - 1.0f) * 1024.0f;
          uint32_t q = (uint32_t)frac;
          float r = frac - (float)q;
          if (r > 0.5f || (r == 0.5f && (q & 1))) q++;
          if (q == 1024) { q = 0; e++; }
          hb = (uint16_t)(((e + 15) << 10) | q);
        }
        b[i] = (uint16_t)(hb | (sign << 15));
      }
    }
    apx_tensor h16 = apx_tensor_host(b, dt, ndim, shape);
    TRY(apx_tensor_copy(ctx, &d, &h16, NULL));
    free(b);
  }
  free(v);
  return d;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 200;
  if (iters < 1) iters = 1;
  apx_context *ctx = NULL;
  TRY(apx_open(&ctx, NULL));
  struct apx_backend_info info;
  int found = 0;
  for (int i = 0; i < apx_backend_count(ctx); i++)
    if (apx_backend_info(ctx, i, &info) == APX_OK && strcmp(info.name, "cuda") == 0 &&
        info.state == APX_BACKEND_OK) {
      found = 1;
      break;
    }
  if (!found) {
    printf("SKIP: no usable cuda backend\n");
    apx_close(ctx);
    return 77;
  }
  const apx_dtype dt = APX_DTYPE_F16;
  const int64_t B = 1, C = 128, H = 128, W = 128, G0 = (H / 16) * (W / 16);
  apx_ff_weights *w = NULL;
  TRY(apx_ff_weights_seeded(ctx, C, 123, &w));
  TRY(apx_reset_peak_memory(ctx, "cuda"));
  const int64_t s_dense[4] = {B, C, H, W}, s_util[2] = {B, G0}, s_proxy[4] = {B, 1, H, W};
  apx_tensor dense = device_random(ctx, dt, 4, s_dense, -3.0, 3.0);
  apx_tensor util = device_random(ctx, APX_DTYPE_F32, 2, s_util, -1.0, 1.0);
  apx_tensor split = device_random(ctx, APX_DTYPE_F32, 2, s_util, -1.0, 1.0);
  apx_tensor bp = device_random(ctx, dt, 4, s_proxy, 0.0, 1.0);
  apx_tensor up = device_random(ctx, dt, 4, s_proxy, 0.0, 1.0);
  apx_tensor heavy, detail, alpha;
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, dt, 4, s_dense, &heavy));
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, dt, 4, s_dense, &detail));
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, dt, 4, s_proxy, &alpha));
  const uint64_t io_bytes = (uint64_t)(3 * B * C * H * W * 2 + 3 * B * H * W * 2 + 2 * B * G0 * 4);
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &dense;
  a.utilities = &util;
  a.split_utilities = &split;
  a.boundary = &bp;
  a.uncertainty = &up;
  a.weights = w;
  a.heavy = &heavy;
  a.detail = &detail;
  a.alpha = &alpha;
  apx_call call = {"cuda", NULL};
  int64_t sel0 = 0, sel1 = 0;
  double sp1 = 0, sp2 = 0;
  apx_ff_stats stats = {&sel0, &sel1, &sp1, &sp2, NULL, NULL};
  a.stats = &stats;
  TRY(apx_ff_infer(ctx, &a, &call));
  a.stats = NULL;
  printf("device: %s\n", info.device_name);
  printf("profile: B 1, C 128, 128x128, f16; L0 %lld tiles (b1 spent %.17g), L1 %lld tiles "
         "(b2 spent %.17g)\n",
         (long long)sel0, sp1, (long long)sel1, sp2);
  double frame_us[2] = {0, 0};
  for (int replay = 0; replay < 2; replay++) {
    a.graph_replay = replay;
    for (int i = 0; i < 20; i++) TRY(apx_ff_infer(ctx, &a, &call));
    TRY(apx_sync(ctx, &call));
    /* per frame: one timer around `iters` back-to-back frames, and the
     * median of single-frame timers */
    apx_timer *t = NULL;
    double ms = 0.0;
    TRY(apx_timer_begin(ctx, "cuda", &call, &t));
    for (int i = 0; i < iters; i++) TRY(apx_ff_infer(ctx, &a, &call));
    TRY(apx_timer_end(ctx, t, &ms));
    double *one = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
      TRY(apx_timer_begin(ctx, "cuda", &call, &t));
      TRY(apx_ff_infer(ctx, &a, &call));
      TRY(apx_timer_end(ctx, t, &one[i]));
    }
    for (int i = 1; i < iters; i++) /* insertion sort */
      for (int j = i; j > 0 && one[j] < one[j - 1]; j--) {
        double x = one[j];
        one[j] = one[j - 1];
        one[j - 1] = x;
      }
    frame_us[replay] = 1000.0 * ms / iters;
    printf("%s: %.1f us/frame back to back (%d frames), median single frame %.1f us\n",
           replay ? "graph_replay" : "eager", 1000.0 * ms / iters, iters,
           1000.0 * one[iters / 2]);
    free(one);
  }
  TRY(apx_sync(ctx, &call));
  uint64_t peak = 0;
  TRY(apx_peak_memory(ctx, "cuda", &peak));
  printf("peak device memory (apx allocations): %llu bytes; inputs + outputs %llu bytes\n",
         (unsigned long long)peak, (unsigned long long)io_bytes);
  /* the same run's device copy: 256 MiB read and written, ten times */
  const int64_t s_copy[1] = {(int64_t)128 << 20};
  apx_tensor c_src, c_dst;
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, APX_DTYPE_F16, 1, s_copy, &c_src));
  TRY(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, APX_DTYPE_F16, 1, s_copy, &c_dst));
  TRY(apx_tensor_copy(ctx, &c_dst, &c_src, NULL));
  apx_timer *ct = NULL;
  double copy_ms = 0.0;
  TRY(apx_timer_begin(ctx, "cuda", &call, &ct));
  for (int i = 0; i < 10; i++) TRY(apx_tensor_copy(ctx, &c_dst, &c_src, NULL));
  TRY(apx_timer_end(ctx, ct, &copy_ms));
  const double copy_gbs = 2.0 * (double)s_copy[0] * 2.0 * 10.0 / (copy_ms * 1e-3) / 1e9;
  apx_tensor_free(ctx, &c_src);
  apx_tensor_free(ctx, &c_dst);
  /* FLOPs per level (multiply-add = 2): as apexx-bench's ff rows count them */
  double flops = 0.0;
  for (int level = 0; level < 2; level++) {
    double k = (double)(level ? sel1 : sel0), t = level ? 8.0 : 16.0, c = (double)C;
    double px = k * t * t, map_px = (double)(B * H * W);
    flops += px * c + k * (8.0 * c + 6.0 * c * c) + px * c * 22.0 + px * 4.0 * c * c +
             px * 2.0 * c * 6.0 + map_px * (10.0 + c * 4.0);
  }
  const char *peak_env = getenv("FF_TIME_PEAK_TFLOPS");
  const double peak_tflops = peak_env ? atof(peak_env) : 989.0;
  printf("device copy (same run): %.0f GB/s\n", copy_gbs);
  printf("frame minimal bytes %.2f MB, FLOPs %.3g\n", (double)io_bytes / 1e6, flops);
  for (int replay = 0; replay < 2; replay++) {
    double gbs = (double)io_bytes / (frame_us[replay] * 1e-6) / 1e9;
    double tflops = flops / (frame_us[replay] * 1e-6) / 1e12;
    printf("%s: %.1f GB/s = %.1f%% of copy; %.2f TFLOP/s = %.2f%% of %.0f TFLOP/s\n",
           replay ? "graph_replay" : "eager", gbs, 100.0 * gbs / copy_gbs, tflops,
           100.0 * tflops / peak_tflops, peak_tflops);
  }
  apx_tensor *all[] = {&dense, &util, &split, &bp, &up, &heavy, &detail, &alpha};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) apx_tensor_free(ctx, all[i]);
  apx_ff_weights_free(ctx, w);
  apx_close(ctx);
  return 0;
}
