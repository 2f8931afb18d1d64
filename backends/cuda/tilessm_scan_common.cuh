/* SPDX-License-Identifier: Apache-2.0 */
/* What both scans of tilessm_scan share on the device (tilessm_scan.cu):
 * a channel's parameters, the initial state, token loads and stores, one
 * step of the recurrence. */
#ifndef APX_CUDA_TILESSM_SCAN_COMMON_CUH
#define APX_CUDA_TILESSM_SCAN_COMMON_CUH

#include "tilessm_scan.h"

struct ssm_chan {
  float d, om, ig, og, sb;
};

/* A channel's parameters from their fp32 values: decay clamped. */
static __device__ __forceinline__ ssm_chan ssm_chan_of(float d, float ig, float og, float sb) {
  ssm_chan ch;
  const float lo = 1e-6f, hi = (float)(1.0 - 1e-6); /* fp32 constants, docs/ops.md, tilessm_scan */
  ch.d = d < lo ? lo : (d > hi ? hi : d);
  ch.om = 1.0f - ch.d;
  ch.ig = ig;
  ch.og = og;
  ch.sb = sb;
  return ch;
}

static __device__ __forceinline__ ssm_chan load_chan(const ssm_params &p, int64_t c) {
  return ssm_chan_of(cuda_load_any(p.decay, p.dt_decay, c),
                     cuda_load_any(p.input_gain, p.dt_input_gain, c),
                     cuda_load_any(p.output_gain, p.dt_output_gain, c),
                     cuda_load_any(p.state_bias, p.dt_state_bias, c));
}

/* Element i of a float tensor of dtype dt (fp16 and bf16: 2 bytes,
 * anything else fp32, as cuda_load_any reads) as raw bits, and those bits
 * as fp32 (exact). Split so that a prologue can issue all its loads
 * before it converts any: a load whose conversion sits in the same dtype
 * branch waits for its data before the next load issues. The load is two
 * unconditional 2-byte loads, the low and high halves of an fp32 (the
 * same half twice for a 2-byte dtype): no branch and no predicated pair
 * of loads into one register, whose write-after-write hazard made ptxas
 * wait for every load in flight. The conversion is predicated PTX, opaque
 * to cicc: branches or selects on dt there, a dozen per prologue in each
 * of the block kernel's 36 instantiations, took cicc from 5 s to 40-60 s
 * for this file. Inputs never alias outputs (the core checks), so the
 * read-only path is safe. */
struct ssm_bits {
  uint32_t lo, hi;
};

static __device__ __forceinline__ ssm_bits ssm_load_bits(const void *p, int dt, int64_t i) {
  const int wide = dt != APX_DTYPE_F16 && dt != APX_DTYPE_BF16;
  const unsigned short *q = (const unsigned short *)p + (wide ? 2 * i : i);
  ssm_bits r;
  r.lo = __ldg(q);
  r.hi = __ldg(q + wide);
  return r;
}

static __device__ __forceinline__ float ssm_bits_to_f(ssm_bits r, int dt) {
  /* fp16: widen the low half; bf16: fp32's top half (shift by 16); fp32:
   * the halves joined */
  const int f16 = dt == APX_DTYPE_F16;
  const uint32_t shift = dt == APX_DTYPE_BF16 ? 16 : 0;
  float x;
  asm("{\n\t.reg .pred h;\n\t.reg .b16 l;\n\t.reg .b32 t;\n\t"
      "setp.ne.s32 h, %3, 0;\n\t"
      "cvt.u16.u32 l, %1;\n\t"
      "prmt.b32 t, %1, %2, 0x5410;\n\t"
      "@h cvt.f32.f16 %0, l;\n\t"
      "@!h shl.b32 %0, t, %4;\n\t}"
      : "=f"(x)
      : "r"(r.lo), "r"(r.hi), "r"(f16), "r"(shift));
  return x;
}

/* Initial state of direction dir (0 forward, 1 backward), cast to the
 * tokens dtype first (docs/ops.md, tilessm_scan: init_state). */
/* Not inlined: its dtype switches, inlined per channel into the scan
 * kernels' prologues, made NVVM take minutes per kernel (nvcc 13.0). */
static __device__ __noinline__ float init_state(const ssm_params &p, int64_t b, int dir,
                                                   int64_t c, int64_t C) {
  if (!p.init) return 0.0f;
  int64_t i = p.init_dirs == 2 ? (b * 2 + dir) * C + c : b * C + c;
  return cuda_round_any(cuda_load_any(p.init, p.dt_init, i), p.dt_tokens);
}

/* NaN -> 0, +-inf -> +-lim, clamp to [-lim, lim]: exact in the tokens
 * dtype because lim is representable there. */
static __device__ __forceinline__ float sanitize(float x, float lim) {
  if (x != x) return 0.0f;
  return x > lim ? lim : (x < -lim ? -lim : x);
}

/* V consecutive channels of one token row: `raw` is their storage (one
 * 2-, 4- or 8-byte word), to_f widens it to fp32; load = one read-only
 * vector load and to_f; store rounds each channel once. */
template <typename T, int V> struct ssm_vec;
template <typename T> struct ssm_vec<T, 1> {
  typedef T raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) { x[0] = cuda_dt<T>::to_f(r); }
  static __device__ __forceinline__ void load(const T *p, float *x) { to_f(__ldg(p), x); }
  static __device__ __forceinline__ void store(T *p, const float *y) {
    *p = cuda_dt<T>::from_f(y[0]);
  }
};
template <> struct ssm_vec<__half, 2> {
  typedef __half2 raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) {
    x[0] = __low2float(r);
    x[1] = __high2float(r);
  }
  static __device__ __forceinline__ void load(const __half *p, float *x) {
    to_f(__ldg((const raw *)p), x);
  }
  static __device__ __forceinline__ void store(__half *p, const float *y) {
    *(raw *)p = __halves2half2(__float2half_rn(y[0]), __float2half_rn(y[1]));
  }
};
template <> struct ssm_vec<__nv_bfloat16, 2> {
  typedef __nv_bfloat162 raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) {
    x[0] = __low2float(r);
    x[1] = __high2float(r);
  }
  static __device__ __forceinline__ void load(const __nv_bfloat16 *p, float *x) {
    to_f(__ldg((const raw *)p), x);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16 *p, const float *y) {
    *(raw *)p = __halves2bfloat162(__float2bfloat16_rn(y[0]), __float2bfloat16_rn(y[1]));
  }
};
template <> struct ssm_vec<float, 2> {
  typedef float2 raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) {
    x[0] = r.x;
    x[1] = r.y;
  }
  static __device__ __forceinline__ void load(const float *p, float *x) {
    to_f(__ldg((const raw *)p), x);
  }
  static __device__ __forceinline__ void store(float *p, const float *y) {
    *(raw *)p = make_float2(y[0], y[1]);
  }
};

/* d^len by repeated multiplication (the block scans' chunk maps). */
static __device__ __forceinline__ float ssm_pow(float d, int len) {
  float a = 1.0f;
  for (int i = 0; i < len; i++) a *= d;
  return a;
}

/* One step of V streams: s = d*s + (1-d)*(ig*x + sb) on sanitised x. */
template <int V>
static __device__ __forceinline__ void step(const float *x, const ssm_chan *ch, float lim,
                                            float *s) {
#pragma unroll
  for (int v = 0; v < V; v++) {
    float drive = ch[v].ig * sanitize(x[v], lim) + ch[v].sb;
    s[v] = ch[v].d * s[v] + ch[v].om * drive;
  }
}

#endif /* APX_CUDA_TILESSM_SCAN_COMMON_CUH */
