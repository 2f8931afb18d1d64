/* SPDX-License-Identifier: Apache-2.0 */
/* Run-time SIMD selection and dtype <-> fp32 row conversions shared by the
 * cpu backend's scan and indexing kernels (tilessm_scan.c, gather.c,
 * index_select.c, scatter_add.c).
 *
 * Every SIMD helper here gives the same bits as the portable apx_half.h
 * conversions: F16C converts fp16 exactly (RNE, subnormals kept, NaN quieted
 * the same way); bf16 rounding is done with integer arithmetic, never with
 * AVX-512 VCVTNEPS2BF16 (which flushes subnormals and so differs). */
#ifndef APX_CPU_SCAN_INDEX_SIMD_H
#define APX_CPU_SCAN_INDEX_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <apexx/apexx.h>
#include <apexx/backend.h>

#include "apx_half.h"
#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define SI_HAVE_X86 1
#include <immintrin.h>
#define SI_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#else
#define SI_HAVE_X86 0
#endif

typedef enum si_isa { SI_ISA_PORTABLE = 0, SI_ISA_AVX2 = 1 } si_isa;

/* The instruction set the kernels use (cpu_isa_level, the backend's one
 * selector: AVX-512 runs the AVX2 loops here). */
static inline si_isa si_isa_level(void) {
#if SI_HAVE_X86
  if (cpu_isa_level() >= CPU_SIMD_AVX2) return SI_ISA_AVX2;
#endif
  return SI_ISA_PORTABLE;
}

static inline int si_is_float(apx_dtype dt) {
  return dt == APX_DTYPE_F32 || dt == APX_DTYPE_F16 || dt == APX_DTYPE_BF16;
}

/* Element i of a float tensor as fp32 (exact). */
static inline __attribute__((always_inline)) float si_load_f32(apx_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case APX_DTYPE_F16: return apx_f16_to_f32(((const uint16_t *)p)[i]);
  case APX_DTYPE_BF16: return apx_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

/* Store fp32 v into element i of a float tensor, RNE. */
static inline __attribute__((always_inline)) void si_store_f32(apx_dtype dt, void *p, int64_t i, float v) {
  switch (dt) {
  case APX_DTYPE_F16: ((uint16_t *)p)[i] = apx_f32_to_f16(v); break;
  case APX_DTYPE_BF16: ((uint16_t *)p)[i] = apx_f32_to_bf16(v); break;
  default: ((float *)p)[i] = v; break;
  }
}

/* R-model `fl`: round fp32 v to dtype dt and back (identity for fp32). */
static inline __attribute__((always_inline)) float si_round(apx_dtype dt, float v) {
  switch (dt) {
  case APX_DTYPE_F16: return apx_round_f16(v);
  case APX_DTYPE_BF16: return apx_round_bf16(v);
  default: return v;
  }
}

#if SI_HAVE_X86
/* ---- AVX2 + F16C: 8 fp32 lanes ---- */
SI_TARGET_AVX2 static inline __m256 si8_load(apx_dtype dt, const void *p) {
  switch (dt) {
  case APX_DTYPE_F16:
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  case APX_DTYPE_BF16:
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
  default: return _mm256_loadu_ps((const float *)p);
  }
}

/* fp32 bits -> bf16 bits in the low half of each 32-bit lane, as
 * apx_f32_to_bf16 (RNE; NaN quieted with bit 6 of the bf16 set). */
SI_TARGET_AVX2 static inline __m256i si8_bf16_bits(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

SI_TARGET_AVX2 static inline __m128i si8_pack16(__m256i lanes) {
  /* lanes hold values <= 0xffff, so the unsigned saturation never bites */
  __m256i packed = _mm256_packus_epi32(lanes, lanes);
  packed = _mm256_permute4x64_epi64(packed, 0x08);
  return _mm256_castsi256_si128(packed);
}

SI_TARGET_AVX2 static inline void si8_store(apx_dtype dt, void *p, __m256 v) {
  switch (dt) {
  case APX_DTYPE_F16:
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    break;
  case APX_DTYPE_BF16:
    _mm_storeu_si128((__m128i *)p, si8_pack16(si8_bf16_bits(v)));
    break;
  default: _mm256_storeu_ps((float *)p, v); break;
  }
}

/* R-model `fl` on 8 lanes. */
SI_TARGET_AVX2 static inline __m256 si8_round(apx_dtype dt, __m256 v) {
  switch (dt) {
  case APX_DTYPE_F16:
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  case APX_DTYPE_BF16:
    return _mm256_castsi256_ps(_mm256_slli_epi32(si8_bf16_bits(v), 16));
  default: return v;
  }
}

SI_TARGET_AVX2 static inline void si_row_to_f32_avx2(apx_dtype dt, const void *src,
                                              float *dst, int64_t n) {
  size_t es = apx_backend_dtype_size(dt);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, si8_load(dt, (const char *)src + (size_t)i * es));
  for (; i < n; i++) dst[i] = si_load_f32(dt, src, i);
}

SI_TARGET_AVX2 static inline void si_row_from_f32_avx2(apx_dtype dt, const float *src,
                                                void *dst, int64_t n) {
  size_t es = apx_backend_dtype_size(dt);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    si8_store(dt, (char *)dst + (size_t)i * es, _mm256_loadu_ps(src + i));
  for (; i < n; i++) si_store_f32(dt, dst, i, src[i]);
}

/* dst[i] += fp32(src[i]) for a float row. */
SI_TARGET_AVX2 static inline void si_row_accumulate_avx2(apx_dtype dt, const void *src,
                                                  float *dst, int64_t n) {
  size_t es = apx_backend_dtype_size(dt);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i),
                                            si8_load(dt, (const char *)src + (size_t)i * es)));
  for (; i < n; i++) dst[i] += si_load_f32(dt, src, i);
}
#endif

#if SI_HAVE_X86
/* Copy with non-temporal stores: for outputs much larger than the caches,
 * writing around them saves the read-for-ownership of every line. */
SI_TARGET_AVX2 static inline void si_stream_copy_avx2(void *dst, const void *src,
                                                      size_t bytes) {
  char *d = dst;
  const char *s = src;
  size_t head = (32 - ((uintptr_t)d & 31)) & 31;
  if (head > bytes) head = bytes;
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 128; d += 128, s += 128, bytes -= 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)s);
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + 64));
    __m256i e = _mm256_loadu_si256((const __m256i *)(s + 96));
    _mm256_stream_si256((__m256i *)d, a);
    _mm256_stream_si256((__m256i *)(d + 32), b);
    _mm256_stream_si256((__m256i *)(d + 64), c);
    _mm256_stream_si256((__m256i *)(d + 96), e);
  }
  memcpy(d, s, bytes);
}

SI_TARGET_AVX2 static inline void si_stream_zero_avx2(void *dst, size_t bytes) {
  char *d = dst;
  size_t head = (32 - ((uintptr_t)d & 31)) & 31;
  if (head > bytes) head = bytes;
  memset(d, 0, head);
  d += head, bytes -= head;
  const __m256i z = _mm256_setzero_si256();
  for (; bytes >= 32; d += 32, bytes -= 32) _mm256_stream_si256((__m256i *)d, z);
  memset(d, 0, bytes);
}
#endif

/* Do the n index values at p (int64 when idx64, else int32) all equal
 * p[0]? Four 32-byte compares per step, one test at the end of the row. */
SI_TARGET_AVX2 static inline int si_index_row_uniform_avx2(const void *p, int idx64, int64_t n) {
  const char *s = p;
  const size_t bytes = (size_t)n * (idx64 ? 8u : 4u);
  const __m256i first = idx64 ? _mm256_set1_epi64x(*(const int64_t *)p)
                              : _mm256_set1_epi32(*(const int32_t *)p);
  __m256i diff = _mm256_setzero_si256();
  size_t off = 0;
  for (; off + 128 <= bytes; off += 128) {
    __m256i a = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + off)), first);
    __m256i b = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + off + 32)), first);
    __m256i c = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + off + 64)), first);
    __m256i e = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + off + 96)), first);
    diff = _mm256_or_si256(diff, _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, e)));
  }
  for (; off + 32 <= bytes; off += 32)
    diff = _mm256_or_si256(diff,
                           _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(s + off)), first));
  if (!_mm256_testz_si256(diff, diff))
    return 0;
  /* the last values, fewer than 32 bytes */
  if (idx64) {
    const int64_t *q = p, v = q[0];
    for (int64_t j = (int64_t)(off / 8); j < n; j++)
      if (q[j] != v)
        return 0;
  } else {
    const int32_t *q = p, v = q[0];
    for (int64_t j = (int64_t)(off / 4); j < n; j++)
      if (q[j] != v)
        return 0;
  }
  return 1;
}

/* Copy (src != NULL) or zero a block; non-temporal when `stream`. Call
 * cpu_stream_fence() before other threads may read what was streamed. */
static inline void si_copy_block(si_isa isa, int stream, void *dst, const void *src,
                                 size_t bytes) {
#if SI_HAVE_X86
  if (stream && isa >= SI_ISA_AVX2) {
    if (src)
      si_stream_copy_avx2(dst, src, bytes);
    else
      si_stream_zero_avx2(dst, bytes);
    return;
  }
#endif
  (void)isa, (void)stream;
  if (src)
    memcpy(dst, src, bytes);
  else
    memset(dst, 0, bytes);
}

/* Outputs at least this large are written with non-temporal stores. */
#define SI_STREAM_MIN_BYTES ((size_t)16 << 20)

/* Row conversions with the portable fallback (same bits). */
static inline void si_row_to_f32(si_isa isa, apx_dtype dt, const void *src,
                                 float *dst, int64_t n) {
#if SI_HAVE_X86
  if (isa >= SI_ISA_AVX2) {
    si_row_to_f32_avx2(dt, src, dst, n);
    return;
  }
#endif
  (void)isa;
  if (dt == APX_DTYPE_F32) {
    memcpy(dst, src, (size_t)n * 4);
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = si_load_f32(dt, src, i);
}

static inline void si_row_from_f32(si_isa isa, apx_dtype dt, const float *src,
                                   void *dst, int64_t n) {
#if SI_HAVE_X86
  if (isa >= SI_ISA_AVX2) {
    si_row_from_f32_avx2(dt, src, dst, n);
    return;
  }
#endif
  (void)isa;
  if (dt == APX_DTYPE_F32) {
    memcpy(dst, src, (size_t)n * 4);
    return;
  }
  for (int64_t i = 0; i < n; i++) si_store_f32(dt, dst, i, src[i]);
}

static inline void si_row_accumulate(si_isa isa, apx_dtype dt, const void *src,
                                     float *dst, int64_t n) {
#if SI_HAVE_X86
  if (isa >= SI_ISA_AVX2) {
    si_row_accumulate_avx2(dt, src, dst, n);
    return;
  }
#endif
  (void)isa;
  for (int64_t i = 0; i < n; i++) dst[i] += si_load_f32(dt, src, i);
}

/* Does index row `row` (inner values) hold a single value? A wide compare
 * on AVX2: gather runs this on every row of an expanded index, where a
 * scalar loop (a value a cycle) cost as much as the copy. */
static inline int si_index_row_uniform(const void *index, int idx64, int64_t row, int64_t inner,
                                       si_isa isa) {
#if SI_HAVE_X86
  if (isa >= SI_ISA_AVX2 && inner > 0)
    return si_index_row_uniform_avx2((const char *)index + (size_t)(row * inner) * (idx64 ? 8 : 4),
                                     idx64, inner);
#endif
  (void)isa;
  if (idx64) {
    const int64_t *p = (const int64_t *)index + row * inner;
    int64_t first = p[0], diff = 0;
    for (int64_t j = 1; j < inner; j++) diff |= p[j] ^ first;
    return diff == 0;
  }
  const int32_t *p = (const int32_t *)index + row * inner;
  int32_t first = p[0], diff = 0;
  for (int64_t j = 1; j < inner; j++) diff |= p[j] ^ first;
  return diff == 0;
}

#endif /* APX_CPU_SCAN_INDEX_SIMD_H */
