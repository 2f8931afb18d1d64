/* SPDX-License-Identifier: Apache-2.0 */
/* Milliseconds per frame of apx_ff_infer on the cpu backend with seeded
 * weights (apx_ff_weights_seeded) and the default routing: a timing tool,
 * not a test. Usage: bench_cpu_ff [C H W tile_l0 dtype iterations threads];
 * defaults 128 128 128 16 f32 50 all-cores (docs/ff_infer.md's default profile).
 * Prints the wall time's p50, min and p90 and the process CPU time of the
 * cheapest frame; APEXX_BENCH_CEILINGS=1 adds the machine's memcpy bandwidth
 * and one core's FMA peak (docs/performance.md); APEXX_BENCH_DIGEST=1 adds an
 * FNV-1a digest of the last frame's heavy, detail and alpha bytes, so that
 * two builds' outputs can be compared bit for bit. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The machine's ceilings, measured in the same run: memcpy bandwidth over 16
 * MiB (best of 10, read + write bytes counted) and the peak of independent
 * fp32 FMAs on one core, with 8-lane (AVX2) and, where the CPU has it,
 * 16-lane (AVX-512F) vectors, timed by the thread's CPU time (other
 * processes' load then costs the figure little). */
static double thread_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double memcpy_gbs(void) {
  const size_t n = (size_t)16 << 20;
  char *a = malloc(n), *b = malloc(n);
  memset(a, 1, n);
  memset(b, 2, n);
  double best = 1e30;
  for (int i = 0; i < 10; i++) {
    double t = now_ms();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
    t = now_ms() - t;
    best = t < best ? t : best;
  }
  volatile char sink = a[n / 2] + b[n / 3];
  (void)sink;
  free(a);
  free(b);
  return 2.0 * (double)n / (best * 1e6);
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static double fma_gflops_avx2(void) {
  /* ten independent chains (FMA latency 4-5 cycles, two pipes), named so
   * that they stay in registers */
  const __m256 m = _mm256_set1_ps(0.999999f), k = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(0.f), a1 = _mm256_set1_ps(1.f), a2 = _mm256_set1_ps(2.f),
         a3 = _mm256_set1_ps(3.f), a4 = _mm256_set1_ps(4.f), a5 = _mm256_set1_ps(5.f),
         a6 = _mm256_set1_ps(6.f), a7 = _mm256_set1_ps(7.f), a8 = _mm256_set1_ps(8.f),
         a9 = _mm256_set1_ps(9.f);
  const long iters = 20000000;
  double t = thread_ms();
  for (long it = 0; it < iters; it++) {
    a0 = _mm256_fmadd_ps(a0, m, k);
    a1 = _mm256_fmadd_ps(a1, m, k);
    a2 = _mm256_fmadd_ps(a2, m, k);
    a3 = _mm256_fmadd_ps(a3, m, k);
    a4 = _mm256_fmadd_ps(a4, m, k);
    a5 = _mm256_fmadd_ps(a5, m, k);
    a6 = _mm256_fmadd_ps(a6, m, k);
    a7 = _mm256_fmadd_ps(a7, m, k);
    a8 = _mm256_fmadd_ps(a8, m, k);
    a9 = _mm256_fmadd_ps(a9, m, k);
  }
  t = thread_ms() - t;
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(a8, a9));
  float s[8];
  _mm256_storeu_ps(s, sum);
  volatile float sink = s[0];
  (void)sink;
  return (double)iters * 10 * 16 / (t * 1e6);
}

__attribute__((target("avx512f"))) static double fma_gflops_avx512(void) {
  /* twelve independent chains, unrolled so that they stay in registers */
  const __m512 m = _mm512_set1_ps(0.999999f), k = _mm512_set1_ps(1e-7f);
  __m512 a[12];
  for (int i = 0; i < 12; i++)
    a[i] = _mm512_set1_ps((float)i);
  const long iters = 20000000;
  double t = thread_ms();
  for (long it = 0; it < iters; it++) {
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, k);
  }
  t = thread_ms() - t;
  __m512 sum = a[0];
  for (int i = 1; i < 12; i++)
    sum = _mm512_add_ps(sum, a[i]);
  volatile float sink = _mm512_reduce_add_ps(sum);
  (void)sink;
  return (double)iters * 12 * 32 / (t * 1e6);
}
#endif

/* vector_bits 256 (AVX2) or 512 (AVX-512F); 0 where the CPU lacks it */
static double fma_gflops(int vector_bits) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (vector_bits == 256 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return fma_gflops_avx2();
  if (vector_bits == 512 && __builtin_cpu_supports("avx512f"))
    return fma_gflops_avx512();
#endif
  (void)vector_bits;
  return 0.0;
}

/* CPU time of the process (all its threads): under a shared machine's load
 * the single-thread figure of work done, where wall time counts the waits. */
static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* FNV-1a, 64 bits, over a tensor's bytes */
static uint64_t digest(uint64_t h, const apx_tensor *t) {
  const unsigned char *p = t->data;
  for (size_t i = 0; i < (size_t)apx_tensor_numel(t) * apx_dtype_size(t->dtype); i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

int main(int argc, char **argv) {
  const int64_t C = argc > 1 ? atoll(argv[1]) : 128, H = argc > 2 ? atoll(argv[2]) : 128;
  const int64_t W = argc > 3 ? atoll(argv[3]) : 128, t0 = argc > 4 ? atoll(argv[4]) : 16;
  const char *dname = argc > 5 ? argv[5] : "f32";
  const int iters = argc > 6 ? atoi(argv[6]) : 50, threads = argc > 7 ? atoi(argv[7]) : 0;
  apx_dtype dt = !strcmp(dname, "f16")    ? APX_DTYPE_F16
                 : !strcmp(dname, "bf16") ? APX_DTYPE_BF16
                                          : APX_DTYPE_F32;
  apx_context *ctx = threads > 0 ? tu_open_cpu_threads(threads) : tu_open();
  apx_ff_weights *w = NULL;
  if (!ctx || apx_ff_weights_seeded(ctx, C, 123 + 17, &w) != APX_OK) {
    fprintf(stderr, "bench_cpu_ff: %s\n", apx_last_error());
    return 1;
  }
  const int64_t G0 = (H / t0) * (W / t0);
  tu_rng r = {123 + 101};
  apx_tensor dense = tu_host4(dt, 1, C, H, W), util = tu_host2(dt, 1, G0),
             split = tu_host2(dt, 1, G0), bnd = tu_host4(dt, 1, 1, H, W),
             unc = tu_host4(dt, 1, 1, H, W), heavy = tu_host4(dt, 1, C, H, W),
             detail = tu_host4(dt, 1, C, H, W), alpha = tu_host4(dt, 1, 1, H, W);
  tu_fill_normal(&r, &dense);
  tu_fill_normal(&r, &util);
  tu_fill_normal(&r, &split);
  tu_fill_uniform(&r, &bnd, 0, 1);
  tu_fill_uniform(&r, &unc, 0, 1);
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &dense;
  a.utilities = &util;
  a.split_utilities = &split;
  a.boundary = &bnd;
  a.uncertainty = &unc;
  a.weights = w;
  a.tile_l0 = t0;
  a.tile_l1 = t0 / 2;
  a.kmax_l0 = G0 < 32 ? G0 : 32;
  a.kmax_l1 = 2 * a.kmax_l0;
  a.heavy = &heavy;
  a.detail = &detail;
  a.alpha = &alpha;
  int64_t sel0 = 0, sel1 = 0;
  apx_ff_stats stats = {&sel0, &sel1, NULL, NULL, NULL, NULL};
  a.stats = &stats;
  static const apx_call cpu_call = {"cpu", NULL};
  double *ms = malloc((size_t)iters * sizeof(double)), cpu_best = 1e30;
  for (int i = -3; i < iters; i++) {
    double t = now_ms(), c = cpu_ms();
    if (apx_ff_infer(ctx, &a, &cpu_call) != APX_OK) {
      fprintf(stderr, "bench_cpu_ff: %s\n", apx_last_error());
      return 1;
    }
    c = cpu_ms() - c;
    if (i >= 0) {
      ms[i] = now_ms() - t;
      cpu_best = c < cpu_best ? c : cpu_best;
    }
  }
  qsort(ms, (size_t)iters, sizeof(double), cmp_double);
  printf("ff_infer cpu %s B=1 C=%lld %lldx%lld tile %lld/%lld: L0 %lld, L1 %lld tiles; "
         "p50 %.2f ms, min %.2f ms, p90 %.2f ms per frame (%d iterations); min cpu time %.2f ms\n",
         dname, (long long)C, (long long)H, (long long)W, (long long)t0, (long long)t0 / 2,
         (long long)sel0, (long long)sel1, ms[iters / 2], ms[0], ms[iters * 9 / 10], iters,
         cpu_best);
  if (getenv("APEXX_BENCH_CEILINGS"))
    printf("ceilings: memcpy 16 MiB %.1f GB/s (read+write), one core's fp32 FMA peak %.1f "
           "GFLOP/s (8 lanes), %.1f (16 lanes; 0: no AVX-512F)\n",
           memcpy_gbs(), fma_gflops(256), fma_gflops(512));
  if (getenv("APEXX_BENCH_DIGEST"))
    printf("digest heavy/detail/alpha %016llx\n",
           (unsigned long long)digest(digest(digest(0xcbf29ce484222325ull, &heavy), &detail),
                                      &alpha));
  free(ms);
  apx_ff_weights_free(ctx, w);
  apx_close(ctx);
  return 0;
}
