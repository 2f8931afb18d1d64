/* SPDX-License-Identifier: Apache-2.0 */
/* Portable fp16/bf16 <-> fp32 conversions with round-to-nearest-even and
 * subnormals kept (docs/ops.md, Rounding and parity: rounding model R).
 * Header-only, shared by the core, the backends, the bench and the tests
 * (common/: docs/architecture.md, Layout); not installed.
 * Every function is exact IEEE: the SIMD paths of the cpu backend are tested
 * against these. */
#ifndef APX_HALF_H
#define APX_HALF_H

#include <apexx/apexx.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t apx_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float apx_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* binary16 -> binary32, exact. */
static inline float apx_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) /* inf / nan (keep payload, quiet) */
    return apx_bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
  if (exp == 0) {
    if (man == 0) return apx_bits_f32(sign);
    /* subnormal: value = man * 2^-24, exact in fp32 */
    float v = (float)man * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return apx_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* binary32 -> binary16, round to nearest even, overflow to inf, subnormals
 * kept, NaN stays NaN (quiet). */
static inline uint16_t apx_f32_to_f16(float f) {
  uint32_t u = apx_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t exp = (u >> 23) & 0xffu;
  uint32_t man = u & 0x7fffffu;
  if (exp == 0xff) /* inf or nan */
    return (uint16_t)(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    /* subnormal or zero in fp16: shift the full mantissa (with hidden bit) */
    if (e < -10) return sign; /* < half of the smallest subnormal: rounds to 0 */
    uint32_t m = man | 0x800000u;
    uint32_t shift = (uint32_t)(14 - e); /* 14..24 */
    uint32_t half_val = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_val & 1u))) half_val++;
    return (uint16_t)(sign | half_val);
  }
  uint32_t half_val = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half_val & 1u))) half_val++;
  /* a carry out of the mantissa bumps the exponent, possibly to inf: right */
  return (uint16_t)(sign | half_val);
}

/* bfloat16 -> binary32, exact. */
static inline float apx_bf16_to_f32(uint16_t b) {
  return apx_bits_f32((uint32_t)b << 16);
}

/* binary32 -> bfloat16, round to nearest even, subnormals kept, NaN quiet. */
static inline uint16_t apx_f32_to_bf16(float f) {
  uint32_t u = apx_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return (uint16_t)(u >> 16);
}

/* Round an fp32 value to the storage dtype and back (R-model `fl`). */
static inline float apx_round_f16(float f) { return apx_f16_to_f32(apx_f32_to_f16(f)); }
static inline float apx_round_bf16(float f) { return apx_bf16_to_f32(apx_f32_to_bf16(f)); }

/* Element i of a host float tensor (f32, f16 or bf16) as a double, exactly. */
static inline double apx_float_at(const apx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case APX_DTYPE_F16:
    return (double)apx_f16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_BF16:
    return (double)apx_bf16_to_f32(((const uint16_t *)t->data)[i]);
  default:
    return (double)((const float *)t->data)[i];
  }
}

#endif /* APX_HALF_H */
