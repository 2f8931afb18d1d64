/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's FF path: the fixed-order fp32 sums and the 8-lane
 * vector helpers (GCC vector extensions, rnd() on 8 lanes) that its model
 * steps (ff_model.c) and its frame passes (ff_infer.c) share. Internal to
 * the cpu backend; every function is inline, so each instantiation (the
 * baseline and the AVX2 one) compiles its own copy. */
#ifndef APX_CPU_FF_SIMD_H
#define APX_CPU_FF_SIMD_H

#include <stdint.h>
#include <string.h>

#include "ff_cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define FF_HAVE_X86 1
#else
#define FF_HAVE_X86 0
#endif

/* fp32 sum of v[0..n) in a fixed order whatever the instruction set: 32
 * lanes (lane l adds v[i + l] for i = 0, 32, 64 ...; GCC vector
 * extensions, which are elementwise IEEE on every target), combined in a
 * fixed tree (v4_tree over eight 4-lane groups), then the tail in order. */
typedef float ff_v4 __attribute__((vector_size(16)));

static inline float v4_tree(const ff_v4 *a) {
  ff_v4 v = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  return (v[0] + v[1]) + (v[2] + v[3]);
}

/* Eight fp32 lanes (GCC vector extensions: two SSE registers in the
 * baseline instantiation, one AVX register in the AVX2 one; elementwise
 * IEEE either way, and -ffp-contract=off keeps a*b+c two roundings). The
 * hot elementwise loops are written with them so that they vectorise at
 * any optimisation level. */
typedef float ff_v8 __attribute__((vector_size(32)));
typedef int32_t ff_i8 __attribute__((vector_size(32)));
/* unaligned, aliasing view for loads and stores (macros, not functions:
 * a function returning an AVX-sized vector changes the baseline ABI) */
typedef float ff_v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define V8_LOAD(p) (*(const ff_v8u *)(const void *)(p))
#define V8_STORE(p, v) (*(ff_v8u *)(void *)(p) = (v))
#define V8_SET(x) ((ff_v8){(x), (x), (x), (x), (x), (x), (x), (x)})
/* g < 0 ? +0 : g lanewise (NaN and -0 pass through) */
#define V8_RELU(g) ((ff_v8)((ff_i8)(g) & ~((g) < V8_SET(0.0f))))

/* rnd() on 8 lanes in place (GCC vector integer and float operations,
 * the same bits as apx_round_f16 / apx_round_bf16 for every input):
 * bf16: NaN quietened with its payload cut, else round to nearest even on
 * the 16 dropped bits. f16: NaN quietened with its payload cut, inf kept;
 * magnitudes below 2^-14 (f16 subnormals) rounded to a multiple of 2^-24
 * by adding and taking off 0.5 (exact round to nearest even there), sign
 * kept; the rest rounded to nearest even on the 13 dropped bits, a result
 * of 2^16 or more being inf. */
typedef uint32_t ff_u8 __attribute__((vector_size(32)));
#define U8_SET(x) ((ff_u8){(x), (x), (x), (x), (x), (x), (x), (x)})

static inline __attribute__((always_inline)) void v8_rnd(apx_dtype dt, ff_v8 *v) {
  if (dt == APX_DTYPE_F32)
    return;
  const ff_u8 u = (ff_u8)*v, mag = u & U8_SET(0x7fffffffu), sign = u & U8_SET(0x80000000u);
  const ff_u8 nan = (ff_u8)(mag > U8_SET(0x7f800000u));
  ff_u8 r;
  if (dt == APX_DTYPE_BF16) {
    r = (u + U8_SET(0x7fffu) + ((u >> 16) & U8_SET(1u))) & U8_SET(0xffff0000u);
    r = (r & ~nan) | (((u & U8_SET(0xffff0000u)) | U8_SET(0x400000u)) & nan);
  } else {
    ff_u8 n = (mag + U8_SET(0xfffu) + ((mag >> 13) & U8_SET(1u))) & U8_SET(0xffffe000u);
    const ff_u8 over = (ff_u8)(n >= U8_SET(0x47800000u));
    n = (over & U8_SET(0x7f800000u)) | (~over & n);
    const ff_v8 half = V8_SET(0.5f);
    const ff_u8 sub = (ff_u8)(((ff_v8)mag + half) - half);
    const ff_u8 tiny = (ff_u8)(mag < U8_SET(0x38800000u));
    const ff_u8 special = (ff_u8)(mag >= U8_SET(0x7f800000u));
    r = (tiny & sub) | (~tiny & n);
    r = (special & ((mag & U8_SET(0xffffe000u)) | (nan & U8_SET(0x400000u)))) | (~special & r);
    r |= sign;
  }
  *v = (ff_v8)r;
}

#if FF_HAVE_X86
/* f16's rnd() with F16C (vcvtps2ph with round to nearest even, then
 * vcvtph2ps: the same bits as apx_round_f16, NaN quietened with its payload
 * cut). Only the AVX2 instantiations call it (hw = 1); not always_inline,
 * so that the baseline ones compile (their hw is 0: the call is dead). */
__attribute__((target("avx2,f16c"))) static inline void v8_rnd_f16c(ff_v8 *v) {
  __m256 x;
  memcpy(&x, v, sizeof x);
  x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  memcpy(v, &x, sizeof x);
}
#define FF_RND8(dt, hw, p) ((hw) && (dt) == APX_DTYPE_F16 ? v8_rnd_f16c(p) : v8_rnd((dt), (p)))

/* 8 f16 values to fp32 and 8 fp32 values of f16 back, with F16C: exact
 * both ways (NaN quietened, payload kept: apx_half.h's bits). For the AVX2
 * instantiations only, as v8_rnd_f16c. */
__attribute__((target("avx2,f16c"))) static inline void v8_f16_to_f32_f16c(const uint16_t *src,
                                                                           float *dst) {
  __m128i h;
  memcpy(&h, src, sizeof h);
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(h));
}
__attribute__((target("avx2,f16c"))) static inline void v8_f32_to_f16_f16c(const float *src,
                                                                           uint16_t *dst) {
  const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
  memcpy(dst, &h, sizeof h);
}
#else
#define FF_RND8(dt, hw, p) v8_rnd((dt), (p))
#endif

/* rnd(expr) lanewise: an expression through a local (hw: F16C may be used) */
#define V8_RND(dt, hw, expr)                                                                       \
  __extension__({                                                                                  \
    ff_v8 r_ = (expr);                                                                             \
    FF_RND8((dt), (hw), &r_);                                                                      \
    r_;                                                                                            \
  })

/* The 32 lanes of sum_f32 as four 8-lane accumulators: lanes 0-7 of a[m]
 * are the 4-lane accumulators 2m and 2m+1; v4_tree combines them. */
static inline __attribute__((always_inline)) float v8x4_tree(const ff_v8 *a) {
  ff_v4 q[8];
  memcpy(q, a, sizeof q);
  return v4_tree(q);
}

static inline __attribute__((always_inline)) float sum_f32(const float *v, int64_t n) {
  ff_v8 a[4], a0 = V8_SET(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 += V8_LOAD(v + i);
    a1 += V8_LOAD(v + i + 8);
    a2 += V8_LOAD(v + i + 16);
    a3 += V8_LOAD(v + i + 24);
  }
  a[0] = a0;
  a[1] = a1;
  a[2] = a2;
  a[3] = a3;
  float s = v8x4_tree(a);
  for (; i < n; i++)
    s += v[i];
  return s;
}

/* sum of (v - mean)^2 in the order of sum_f32 */
static inline __attribute__((always_inline)) float sum_sq_dev_f32(const float *v, int64_t n,
                                                                  float mean) {
  ff_v8 a[4], a0 = V8_SET(0.0f), a1 = a0, a2 = a0, a3 = a0;
  const ff_v8 mu = V8_SET(mean);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const ff_v8 d0 = V8_LOAD(v + i) - mu, d1 = V8_LOAD(v + i + 8) - mu;
    const ff_v8 d2 = V8_LOAD(v + i + 16) - mu, d3 = V8_LOAD(v + i + 24) - mu;
    a0 += d0 * d0;
    a1 += d1 * d1;
    a2 += d2 * d2;
    a3 += d3 * d3;
  }
  a[0] = a0;
  a[1] = a1;
  a[2] = a2;
  a[3] = a3;
  float s = v8x4_tree(a);
  for (; i < n; i++) {
    float d = v[i] - mean;
    s += d * d;
  }
  return s;
}

#endif /* APX_CPU_FF_SIMD_H */
