/* SPDX-License-Identifier: Apache-2.0 */
/* Row kernels of the cpu tile ops: portable scalar loops (the reading copy
 * of rounding model R, docs/ops.md, Rounding and parity) and AVX2+F16C loops chosen at run
 * time that give the same bits. See tile_simd.h. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include "tile_simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apx_half.h"
#include "scan_index_simd.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAVE_X86 1
#include <immintrin.h>
#else
#define CPU_HAVE_X86 0
#endif

/* ---- scalar loops ----------------------------------------------------------
 * One always-inline body per kernel, instantiated per dtype with constant
 * `dtype` so the conversions inline and the switch disappears. `fl` is the
 * R-model rounding to storage and back. */
#define DT_F32 APX_DTYPE_F32
#define DT_F16 APX_DTYPE_F16
#define DT_BF16 APX_DTYPE_BF16

/* The conversions of scan_index_simd.h (si_load_f32, si_store_f32,
 * si_round) in the argument order of these loops. */
static inline __attribute__((always_inline)) float load_dt(const void *p, size_t i, int dtype) {
  return si_load_f32((apx_dtype)dtype, p, (int64_t)i);
}

static inline __attribute__((always_inline)) void store_dt(void *p, size_t i, float v, int dtype) {
  si_store_f32((apx_dtype)dtype, p, (int64_t)i, v);
}

static inline __attribute__((always_inline)) float fl_dt(float v, int dtype) {
  return si_round((apx_dtype)dtype, v);
}

static inline __attribute__((always_inline)) void blend_body(void *cur, const void *tile,
                                                             size_t begin, size_t n, float a,
                                                             float one_minus_a, int dtype) {
  for (size_t i = begin; i < n; i++) {
    float p1 = fl_dt(one_minus_a * load_dt(cur, i, dtype), dtype);
    float p2 = fl_dt(a * load_dt(tile, i, dtype), dtype);
    store_dt(cur, i, p1 + p2, dtype);
  }
}

static inline __attribute__((always_inline)) void fuse_body(void *out, const void *base,
                                                            const void *detail, const void *alpha,
                                                            size_t begin, size_t n, int dtype) {
  for (size_t i = begin; i < n; i++) {
    float b = load_dt(base, i, dtype);
    float d = fl_dt(load_dt(detail, i, dtype) - b, dtype);
    float p = fl_dt(load_dt(alpha, i, dtype) * d, dtype);
    store_dt(out, i, b + p, dtype);
  }
}

static inline __attribute__((always_inline)) void affine_reglu_body(void *out, const void *in,
                                                                    size_t begin, size_t n,
                                                                    float vs, float vb, float gs,
                                                                    float gb, int dtype) {
  for (size_t i = begin; i < n; i++) {
    float x = load_dt(in, i, dtype);
    float value = fl_dt(fl_dt(x * vs, dtype) + vb, dtype);
    float gate = fl_dt(fl_dt(x * gs, dtype) + gb, dtype);
    /* torch.relu = clamp_min(g, 0) = std::max(g, 0): NaN and -0 pass */
    float relu = gate < 0.0f ? 0.0f : gate;
    store_dt(out, i, value * relu, dtype);
  }
}

static inline float sigmoid_f32(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

static inline __attribute__((always_inline)) void to_f32_body(float *dst, const void *src,
                                                              size_t begin, size_t n, int dtype) {
  for (size_t i = begin; i < n; i++)
    dst[i] = load_dt(src, i, dtype);
}

static inline __attribute__((always_inline)) float alpha_logits(float b, float u, float w_b,
                                                                float w_u, float bias, int dtype) {
  const float weighted_b = fl_dt(w_b * fl_dt(b, dtype), dtype);
  const float weighted_u = fl_dt(w_u * fl_dt(u, dtype), dtype);
  return fl_dt(fl_dt(weighted_b + weighted_u, dtype) + bias, dtype);
}

static inline __attribute__((always_inline)) void alpha_body(void *out, const float *b,
                                                             const float *u, size_t begin, size_t n,
                                                             float w_b, float w_u, float bias,
                                                             int dtype) {
  for (size_t i = begin; i < n; i++)
    store_dt(out, i, sigmoid_f32(alpha_logits(b[i], u[i], w_b, w_u, bias, dtype)), dtype);
}

static inline __attribute__((always_inline)) size_t elem_size(int dtype) {
  return dtype == DT_F32 ? 4 : 2;
}

#define SCALAR_KERNELS(suffix, dtype)                                                              \
  static void blend_##suffix(void *cur, size_t cur_stride, const void *tile, size_t tile_stride,   \
                             size_t rows, size_t cols, float a, float one_minus_a) {               \
    for (size_t r = 0; r < rows; r++)                                                              \
      blend_body((char *)cur + r * cur_stride * elem_size(dtype),                                  \
                 (const char *)tile + r * tile_stride * elem_size(dtype), 0, cols, a, one_minus_a, \
                 dtype);                                                                           \
  }                                                                                                \
  static void fuse_##suffix(void *out, const void *base, const void *detail, const void *alpha,    \
                            size_t n) {                                                            \
    fuse_body(out, base, detail, alpha, 0, n, dtype);                                              \
  }                                                                                                \
  static void affine_reglu_runs_##suffix(void *out, const void *in, size_t stride, size_t rows,    \
                                         const int64_t *runs, size_t run_count, size_t t,          \
                                         float vs, float vb, float gs, float gb) {                 \
    for (size_t r = 0; r < rows; r++)                                                              \
      for (size_t k = 0; k < run_count; k++)                                                       \
        affine_reglu_body((char *)out + r * stride * elem_size(dtype),                             \
                          (const char *)in + r * stride * elem_size(dtype),                        \
                          (size_t)runs[2 * k] * t, (size_t)runs[2 * k + 1] * t, vs, vb, gs, gb,    \
                          dtype);                                                                  \
  }                                                                                                \
  static void to_f32_##suffix(float *dst, const void *src, size_t n) {                             \
    to_f32_body(dst, src, 0, n, dtype);                                                            \
  }                                                                                                \
  static void alpha_##suffix(void *out, const float *b, const float *u, size_t n, float w_b,       \
                             float w_u, float bias) {                                              \
    alpha_body(out, b, u, 0, n, w_b, w_u, bias, dtype);                                            \
  }                                                                                                \
  static const cpu_tile_kernels kernels_##suffix = {                                               \
      blend_##suffix, fuse_##suffix, affine_reglu_runs_##suffix, to_f32_##suffix, alpha_##suffix};

SCALAR_KERNELS(f32, DT_F32)
SCALAR_KERNELS(f16, DT_F16)
SCALAR_KERNELS(bf16, DT_BF16)

/* ---- AVX2 + F16C -----------------------------------------------------------
 * 8 lanes per step; the tail (n % 8) runs the scalar body, which gives the
 * same bits. */
#if CPU_HAVE_X86
#define SIMD_TARGET __attribute__((target("avx2,f16c")))

/* f16: vcvtph2ps is exact; vcvtps2ph with imm 0 rounds to nearest even,
 * keeps subnormals and quiets NaN like apx_f32_to_f16. */
SIMD_TARGET static inline __m256 load8_f16(const void *p, size_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
SIMD_TARGET static inline void store8_f16(void *p, size_t i, __m256 v) {
  _mm_storeu_si128((__m128i *)((uint16_t *)p + i), _mm256_cvtps_ph(v, 0));
}
SIMD_TARGET static inline __m256 fl8_f16(__m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, 0));
}

/* bf16: the bits of apx_f32_to_bf16, in integer lanes (VCVTNEPS2BF16 would
 * flush subnormals). Returns fp32 bits whose low half is zero. */
SIMD_TARGET static inline __m256i round_bits_bf16(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  __m256i quiet_nan = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  return _mm256_and_si256(rounded, _mm256_set1_epi32((int)0xffff0000u));
}
SIMD_TARGET static inline __m256 load8_bf16(const void *p, size_t i) {
  __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
SIMD_TARGET static inline void store8_bf16(void *p, size_t i, __m256 v) {
  __m256i hi = _mm256_srli_epi32(round_bits_bf16(v), 16);
  __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
  _mm_storeu_si128((__m128i *)((uint16_t *)p + i), packed);
}
SIMD_TARGET static inline __m256 fl8_bf16(__m256 v) {
  return _mm256_castsi256_ps(round_bits_bf16(v));
}

SIMD_TARGET static inline __m256 load8_f32(const void *p, size_t i) {
  return _mm256_loadu_ps((const float *)p + i);
}
SIMD_TARGET static inline void store8_f32(void *p, size_t i, __m256 v) {
  _mm256_storeu_ps((float *)p + i, v);
}
SIMD_TARGET static inline __m256 fl8_f32(__m256 v) { return v; }

#define AVX2_KERNELS(suffix, dtype)                                                                \
  SIMD_TARGET static void blend_row_##suffix##_avx2(                                               \
      void *cur, const void *tile, size_t n, __m256 va, __m256 vu, float a, float one_minus_a) {   \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8) {                                                                   \
      __m256 p1 = fl8_##suffix(_mm256_mul_ps(vu, load8_##suffix(cur, i)));                         \
      __m256 p2 = fl8_##suffix(_mm256_mul_ps(va, load8_##suffix(tile, i)));                        \
      store8_##suffix(cur, i, _mm256_add_ps(p1, p2));                                              \
    }                                                                                              \
    blend_body(cur, tile, i, n, a, one_minus_a, dtype);                                            \
  }                                                                                                \
  SIMD_TARGET static void blend_##suffix##_avx2(void *cur, size_t cur_stride, const void *tile,    \
                                                size_t tile_stride, size_t rows, size_t cols,      \
                                                float a, float one_minus_a) {                      \
    const __m256 va = _mm256_set1_ps(a), vu = _mm256_set1_ps(one_minus_a);                         \
    for (size_t r = 0; r < rows; r++)                                                              \
      blend_row_##suffix##_avx2((char *)cur + r * cur_stride * elem_size(dtype),                   \
                                (const char *)tile + r * tile_stride * elem_size(dtype), cols, va, \
                                vu, a, one_minus_a);                                               \
  }                                                                                                \
  SIMD_TARGET static void fuse_##suffix##_avx2(void *out, const void *base, const void *detail,    \
                                               const void *alpha, size_t n) {                      \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8) {                                                                   \
      __m256 b = load8_##suffix(base, i);                                                          \
      __m256 d = fl8_##suffix(_mm256_sub_ps(load8_##suffix(detail, i), b));                        \
      __m256 p = fl8_##suffix(_mm256_mul_ps(load8_##suffix(alpha, i), d));                         \
      store8_##suffix(out, i, _mm256_add_ps(b, p));                                                \
    }                                                                                              \
    fuse_body(out, base, detail, alpha, i, n, dtype);                                              \
  }                                                                                                \
  /* one 8-lane step of docs/ops.md fused_pack_op_unpack, element i */                             \
  SIMD_TARGET static inline void reglu8_##suffix(void *out, const void *in, size_t i, __m256 vvs,  \
                                                 __m256 vvb, __m256 vgs, __m256 vgb) {             \
    __m256 x = load8_##suffix(in, i);                                                              \
    __m256 value = fl8_##suffix(_mm256_add_ps(fl8_##suffix(_mm256_mul_ps(x, vvs)), vvb));          \
    __m256 gate = fl8_##suffix(_mm256_add_ps(fl8_##suffix(_mm256_mul_ps(x, vgs)), vgb));           \
    /* max_ps returns its second operand for NaN and for +-0 pairs: the                            \
     * scalar `g < 0 ? 0 : g` */                                                                   \
    __m256 relu = _mm256_max_ps(_mm256_setzero_ps(), gate);                                        \
    store8_##suffix(out, i, _mm256_mul_ps(value, relu));                                           \
  }                                                                                                \
  SIMD_TARGET static void affine_reglu_runs_##suffix##_avx2(                                       \
      void *out, const void *in, size_t stride, size_t rows, const int64_t *runs,                  \
      size_t run_count, size_t t, float vs, float vb, float gs, float gb) {                        \
    const __m256 vvs = _mm256_set1_ps(vs), vvb = _mm256_set1_ps(vb);                               \
    const __m256 vgs = _mm256_set1_ps(gs), vgb = _mm256_set1_ps(gb);                               \
    for (size_t r = 0; r < rows; r++) {                                                            \
      char *o = (char *)out + r * stride * elem_size(dtype);                                       \
      const char *x = (const char *)in + r * stride * elem_size(dtype);                            \
      for (size_t k = 0; k < run_count; k++) {                                                     \
        size_t i = (size_t)runs[2 * k] * t;                                                        \
        const size_t end = (size_t)runs[2 * k + 1] * t;                                            \
        for (; i + 8 <= end; i += 8)                                                               \
          reglu8_##suffix(o, x, i, vvs, vvb, vgs, vgb);                                            \
        affine_reglu_body(o, x, i, end, vs, vb, gs, gb, dtype);                                    \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  SIMD_TARGET static void to_f32_##suffix##_avx2(float *dst, const void *src, size_t n) {          \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8)                                                                     \
      _mm256_storeu_ps(dst + i, load8_##suffix(src, i));                                           \
    to_f32_body(dst, src, i, n, dtype);                                                            \
  }                                                                                                \
  SIMD_TARGET static void alpha_##suffix##_avx2(void *out, const float *b, const float *u,         \
                                                size_t n, float w_b, float w_u, float bias) {      \
    const __m256 vwb = _mm256_set1_ps(w_b), vwu = _mm256_set1_ps(w_u);                             \
    const __m256 vbias = _mm256_set1_ps(bias);                                                     \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8) {                                                                   \
      __m256 wb = fl8_##suffix(_mm256_mul_ps(vwb, fl8_##suffix(_mm256_loadu_ps(b + i))));          \
      __m256 wu = fl8_##suffix(_mm256_mul_ps(vwu, fl8_##suffix(_mm256_loadu_ps(u + i))));          \
      __m256 logits = fl8_##suffix(_mm256_add_ps(fl8_##suffix(_mm256_add_ps(wb, wu)), vbias));     \
      float lane[8];                                                                               \
      _mm256_storeu_ps(lane, logits);                                                              \
      for (int j = 0; j < 8; j++)                                                                  \
        lane[j] = sigmoid_f32(lane[j]);                                                            \
      store8_##suffix(out, i, _mm256_loadu_ps(lane));                                              \
    }                                                                                              \
    alpha_body(out, b, u, i, n, w_b, w_u, bias, dtype);                                            \
  }                                                                                                \
  static const cpu_tile_kernels kernels_##suffix##_avx2 = {                                        \
      blend_##suffix##_avx2, fuse_##suffix##_avx2, affine_reglu_runs_##suffix##_avx2,              \
      to_f32_##suffix##_avx2, alpha_##suffix##_avx2};

AVX2_KERNELS(f32, DT_F32)
AVX2_KERNELS(f16, DT_F16)
AVX2_KERNELS(bf16, DT_BF16)

/* ---- AVX-512F -----------------------------------------------------------------
 * The same kernels 16 lanes wide. AVX-512F has the F16C conversions for
 * zmm (same rounding: imm 0 = nearest even, subnormals kept); on the EPYC
 * this was tuned on they convert at twice the AVX2 rate, which is what
 * bounds the f16 kernels (5 roundings per element in affine_reglu). A
 * tail shorter than 16 (as a t = 8 tile row) runs the AVX2 loop. */
#define SIMD512_TARGET __attribute__((target("avx512f,avx2,f16c")))

SIMD512_TARGET static inline __m512 load16_f16(const void *p, size_t i) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
}
SIMD512_TARGET static inline void store16_f16(void *p, size_t i, __m512 v) {
  _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), _mm512_cvtps_ph(v, 0));
}
SIMD512_TARGET static inline __m512 fl16_f16(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, 0));
}

/* bf16 as round_bits_bf16, 16 lanes. */
SIMD512_TARGET static inline __m512i round_bits16_bf16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __m512i quiet_nan = _mm512_or_si512(u, _mm512_set1_epi32(0x400000));
  __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
  return _mm512_and_si512(rounded, _mm512_set1_epi32((int)0xffff0000u));
}
SIMD512_TARGET static inline __m512 load16_bf16(const void *p, size_t i) {
  __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
SIMD512_TARGET static inline void store16_bf16(void *p, size_t i, __m512 v) {
  __m512i hi = _mm512_srli_epi32(round_bits16_bf16(v), 16);
  _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), _mm512_cvtepi32_epi16(hi));
}
SIMD512_TARGET static inline __m512 fl16_bf16(__m512 v) {
  return _mm512_castsi512_ps(round_bits16_bf16(v));
}

SIMD512_TARGET static inline __m512 load16_f32(const void *p, size_t i) {
  return _mm512_loadu_ps((const float *)p + i);
}
SIMD512_TARGET static inline void store16_f32(void *p, size_t i, __m512 v) {
  _mm512_storeu_ps((float *)p + i, v);
}
SIMD512_TARGET static inline __m512 fl16_f32(__m512 v) { return v; }

#define AVX512_KERNELS(suffix, dtype)                                                              \
  SIMD512_TARGET static void blend_row_##suffix##_avx512(                                          \
      void *cur, const void *tile, size_t n, __m512 va, __m512 vu, float a, float one_minus_a) {   \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                 \
      __m512 p1 = fl16_##suffix(_mm512_mul_ps(vu, load16_##suffix(cur, i)));                       \
      __m512 p2 = fl16_##suffix(_mm512_mul_ps(va, load16_##suffix(tile, i)));                      \
      store16_##suffix(cur, i, _mm512_add_ps(p1, p2));                                             \
    }                                                                                              \
    /* tails of 8+ (a t = 8 tile row) take the AVX2 loop */                                        \
    blend_row_##suffix##_avx2((char *)cur + i * elem_size(dtype),                                  \
                              (const char *)tile + i * elem_size(dtype), n - i, _mm256_set1_ps(a), \
                              _mm256_set1_ps(one_minus_a), a, one_minus_a);                        \
  }                                                                                                \
  SIMD512_TARGET static void blend_##suffix##_avx512(                                              \
      void *cur, size_t cur_stride, const void *tile, size_t tile_stride, size_t rows,             \
      size_t cols, float a, float one_minus_a) {                                                   \
    if (cols < 16) { /* rows too short for 16 lanes: the AVX2 kernel, no per-row hop */            \
      blend_##suffix##_avx2(cur, cur_stride, tile, tile_stride, rows, cols, a, one_minus_a);       \
      return;                                                                                      \
    }                                                                                              \
    const __m512 va = _mm512_set1_ps(a), vu = _mm512_set1_ps(one_minus_a);                         \
    for (size_t r = 0; r < rows; r++)                                                              \
      blend_row_##suffix##_avx512((char *)cur + r * cur_stride * elem_size(dtype),                 \
                                  (const char *)tile + r * tile_stride * elem_size(dtype), cols,   \
                                  va, vu, a, one_minus_a);                                         \
  }                                                                                                \
  SIMD512_TARGET static void fuse_##suffix##_avx512(                                               \
      void *out, const void *base, const void *detail, const void *alpha, size_t n) {              \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                 \
      __m512 b = load16_##suffix(base, i);                                                         \
      __m512 d = fl16_##suffix(_mm512_sub_ps(load16_##suffix(detail, i), b));                      \
      __m512 p = fl16_##suffix(_mm512_mul_ps(load16_##suffix(alpha, i), d));                       \
      store16_##suffix(out, i, _mm512_add_ps(b, p));                                               \
    }                                                                                              \
    fuse_##suffix##_avx2((char *)out + i * elem_size(dtype),                                       \
                         (const char *)base + i * elem_size(dtype),                                \
                         (const char *)detail + i * elem_size(dtype),                              \
                         (const char *)alpha + i * elem_size(dtype), n - i);                       \
  }                                                                                                \
  SIMD512_TARGET static void affine_reglu_runs_##suffix##_avx512(                                  \
      void *out, const void *in, size_t stride, size_t rows, const int64_t *runs,                  \
      size_t run_count, size_t t, float vs, float vb, float gs, float gb) {                        \
    const __m512 vvs = _mm512_set1_ps(vs), vvb = _mm512_set1_ps(vb);                               \
    const __m512 vgs = _mm512_set1_ps(gs), vgb = _mm512_set1_ps(gb);                               \
    const __m256 vvs8 = _mm256_set1_ps(vs), vvb8 = _mm256_set1_ps(vb);                             \
    const __m256 vgs8 = _mm256_set1_ps(gs), vgb8 = _mm256_set1_ps(gb);                             \
    const __m512 zero = _mm512_setzero_ps();                                                       \
    for (size_t r = 0; r < rows; r++) {                                                            \
      char *o = (char *)out + r * stride * elem_size(dtype);                                       \
      const char *x = (const char *)in + r * stride * elem_size(dtype);                            \
      for (size_t k = 0; k < run_count; k++) {                                                     \
        size_t i = (size_t)runs[2 * k] * t;                                                        \
        const size_t end = (size_t)runs[2 * k + 1] * t;                                            \
        for (; i + 16 <= end; i += 16) {                                                           \
          __m512 v = load16_##suffix(x, i);                                                        \
          __m512 value = fl16_##suffix(_mm512_add_ps(fl16_##suffix(_mm512_mul_ps(v, vvs)), vvb));  \
          __m512 gate = fl16_##suffix(_mm512_add_ps(fl16_##suffix(_mm512_mul_ps(v, vgs)), vgb));   \
          /* max_ps: the second operand for NaN and +-0 pairs, as the scalar */                    \
          store16_##suffix(o, i, _mm512_mul_ps(value, _mm512_max_ps(zero, gate)));                 \
        }                                                                                          \
        for (; i + 8 <= end; i += 8) /* a t = 8 tile: one AVX2 step */                             \
          reglu8_##suffix(o, x, i, vvs8, vvb8, vgs8, vgb8);                                        \
        affine_reglu_body(o, x, i, end, vs, vb, gs, gb, dtype);                                    \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  SIMD512_TARGET static void to_f32_##suffix##_avx512(float *dst, const void *src, size_t n) {     \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16)                                                                   \
      _mm512_storeu_ps(dst + i, load16_##suffix(src, i));                                          \
    to_f32_##suffix##_avx2(dst + i, (const char *)src + i * elem_size(dtype), n - i);              \
  }                                                                                                \
  SIMD512_TARGET static void alpha_##suffix##_avx512(void *out, const float *b, const float *u,    \
                                                     size_t n, float w_b, float w_u, float bias) { \
    const __m512 vwb = _mm512_set1_ps(w_b), vwu = _mm512_set1_ps(w_u);                             \
    const __m512 vbias = _mm512_set1_ps(bias);                                                     \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                 \
      __m512 wb = fl16_##suffix(_mm512_mul_ps(vwb, fl16_##suffix(_mm512_loadu_ps(b + i))));        \
      __m512 wu = fl16_##suffix(_mm512_mul_ps(vwu, fl16_##suffix(_mm512_loadu_ps(u + i))));        \
      __m512 logits = fl16_##suffix(_mm512_add_ps(fl16_##suffix(_mm512_add_ps(wb, wu)), vbias));   \
      float lane[16];                                                                              \
      _mm512_storeu_ps(lane, logits);                                                              \
      for (int j = 0; j < 16; j++)                                                                 \
        lane[j] = sigmoid_f32(lane[j]);                                                            \
      store16_##suffix(out, i, _mm512_loadu_ps(lane));                                             \
    }                                                                                              \
    alpha_##suffix##_avx2((char *)out + i * elem_size(dtype), b + i, u + i, n - i, w_b, w_u,       \
                          bias);                                                                   \
  }                                                                                                \
  static const cpu_tile_kernels kernels_##suffix##_avx512 = {                                      \
      blend_##suffix##_avx512, fuse_##suffix##_avx512, affine_reglu_runs_##suffix##_avx512,        \
      to_f32_##suffix##_avx512, alpha_##suffix##_avx512};

AVX512_KERNELS(f32, DT_F32)
AVX512_KERNELS(f16, DT_F16)
AVX512_KERNELS(bf16, DT_BF16)
#endif

const cpu_tile_kernels *cpu_tile_kernels_for(int dtype, cpu_simd_level level) {
#if CPU_HAVE_X86
  if (level == CPU_SIMD_AVX512) {
    switch (dtype) {
    case APX_DTYPE_F32:
      return &kernels_f32_avx512;
    case APX_DTYPE_F16:
      return &kernels_f16_avx512;
    case APX_DTYPE_BF16:
      return &kernels_bf16_avx512;
    default:
      return NULL;
    }
  }
  if (level == CPU_SIMD_AVX2) {
    switch (dtype) {
    case APX_DTYPE_F32:
      return &kernels_f32_avx2;
    case APX_DTYPE_F16:
      return &kernels_f16_avx2;
    case APX_DTYPE_BF16:
      return &kernels_bf16_avx2;
    default:
      return NULL;
    }
  }
#else
  (void)level;
#endif
  switch (dtype) {
  case APX_DTYPE_F32:
    return &kernels_f32;
  case APX_DTYPE_F16:
    return &kernels_f16;
  case APX_DTYPE_BF16:
    return &kernels_bf16;
  default:
    return NULL;
  }
}
