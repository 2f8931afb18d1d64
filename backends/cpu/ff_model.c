/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend, FF path: one function per model step (ff_cpu.h;
 * docs/ff_infer.md, One level): token means, the scan (the forward stream
 * alone, or both streams and their gated merge), FiLM parameters, the
 * refine block, the fusion gate's proxy and alpha; FiLM and the refine
 * block in a baseline and an AVX2 instantiation, chosen at run time
 * (cpu_ff_simd).
 *
 * The hot part is the refine block's 1x1 conv, a [2C x C] x [C x t*t]
 * product per tile: pw_plain is the reading copy, pw_avx2 (AVX2+FMA) and
 * pw_avx512 (AVX-512F) the kernels chosen at run time; all evaluate every
 * output as the same fma chain (bias first, then c ascending), so they give
 * the same bits. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "ff_cpu.h"
#include "ff_simd.h"
#include "tile_simd.h"

void cpu_ff_tokens(apx_dtype dtype, const float *tile, int64_t channels, int64_t n, float *tok) {
  for (int64_t c = 0; c < channels; c++)
    tok[c] = cpu_ff_rnd(dtype, sum_f32(tile + c * n, n) / (float)n);
}

/* docs/ops.md, tilessm_scan: NaN -> 0, +-inf -> +-lim, then clamp to [-lim, lim]. */
static inline float scan_sanitize(float x, float lim) {
  if (x != x)
    return 0.0f;
  if (lim < x)
    return lim;
  if (-lim > x)
    return -lim;
  return x;
}

void cpu_ff_scan_forward(const cpu_ff_level *lv, apx_dtype dt, const float *tok, int64_t steps,
                         int64_t channels, float *y) {
  const float lim = cpu_ff_rnd(dt, 1e4f); /* the clamp in the tokens dtype (docs/ops.md) */
  const int64_t C = channels;
  for (int64_t c = 0; c < C; c++) {
    float s = 0.0f;
    for (int64_t k = 0; k < steps; k++) {
      float x = scan_sanitize(tok[k * C + c], lim);
      float drive = lv->input_gain[0][c] * x + lv->state_bias[0][c];
      s = lv->decay[0][c] * s + lv->one_minus_decay[0][c] * drive;
      y[k * C + c] = cpu_ff_rnd(dt, lv->output_gain[0][c] * s);
    }
  }
}

void cpu_ff_scan_merge(const cpu_ff_level *lv, apx_dtype dt, const float *tok, int64_t steps,
                       int64_t channels, float *mixed) {
  const float lim = cpu_ff_rnd(dt, 1e4f);
  const int64_t C = channels;
  cpu_ff_scan_forward(lv, dt, tok, steps, channels, mixed); /* yf, merged in place below */
  for (int64_t c = 0; c < C; c++) {
    float s = 0.0f;
    for (int64_t k = steps - 1; k >= 0; k--) {
      float x = scan_sanitize(tok[k * C + c], lim);
      float drive = lv->input_gain[1][c] * x + lv->state_bias[1][c];
      s = lv->decay[1][c] * s + lv->one_minus_decay[1][c] * drive;
      float yb = cpu_ff_rnd(dt, lv->output_gain[1][c] * s);
      float yf = mixed[k * C + c];
      float gf = cpu_ff_rnd(dt, lv->gate[c] * yf);
      float gb = cpu_ff_rnd(dt, lv->one_minus_gate[c] * yb);
      mixed[k * C + c] = cpu_ff_rnd(dt, gf + gb);
    }
  }
}

/* FiLM's body, instantiated for the baseline and for AVX2 (the same IEEE
 * operations per output, wider vectors: the same bits). */
static inline __attribute__((always_inline)) void film_body(const cpu_ff_level *lv, apx_dtype dt,
                                                            int64_t channels, const float *mixed,
                                                            float *work, float *gamma,
                                                            float *beta) {
  const int64_t C = channels;
  float *x = work, *h = work + C, *o = work + 2 * C; /* o spans 2C: h's tail is reused */
  (void)o;
  for (int64_t c = 0; c < C; c++) {
    float v = mixed[c];
    v = v != v ? 0.0f : v;
    v = v > 1e4f ? 1e4f : v < -1e4f ? -1e4f : v;
    x[c] = v;
  }
  /* LayerNorm over C: mean, biased variance, eps 1e-5, affine */
  const float mean = sum_f32(x, C) / (float)C;
  const float var = sum_sq_dev_f32(x, C, mean) / (float)C;
  const float sd = sqrtf(var + 1e-5f);
  for (int64_t c = 0; c < C; c++)
    x[c] = ((x[c] - mean) / sd) * lv->token_norm_weight[c] + lv->token_norm_bias[c];
  /* h = mlp0 x + b: each output accumulates c ascending (weights stored
   * transposed so the inner loop runs over outputs) */
  memcpy(h, lv->mlp0_bias, (size_t)C * sizeof(float));
  const int64_t C8 = C - C % 8;
  for (int64_t c = 0; c < C; c++) {
    const float *wr = lv->mlp0_t + c * C;
    const float xc = x[c];
    const ff_v8 xv = V8_SET(xc);
    for (int64_t j = 0; j < C8; j += 8)
      V8_STORE(h + j, V8_LOAD(h + j) + V8_LOAD(wr + j) * xv);
    for (int64_t j = C8; j < C; j++)
      h[j] += wr[j] * xc;
  }
  for (int64_t j = 0; j < C; j++)
    h[j] = h[j] * apx_sigmoidf(h[j]); /* SiLU */
  /* o = mlp2 h + b (2C outputs): gamma, then beta, accumulated in place */
  memcpy(gamma, lv->mlp2_bias, (size_t)C * sizeof(float));
  memcpy(beta, lv->mlp2_bias + C, (size_t)C * sizeof(float));
  for (int64_t c = 0; c < C; c++) {
    const float *wr = lv->mlp2_t + c * 2 * C;
    const float hc = h[c];
    const ff_v8 hv = V8_SET(hc);
    for (int64_t j = 0; j < C8; j += 8) {
      V8_STORE(gamma + j, V8_LOAD(gamma + j) + V8_LOAD(wr + j) * hv);
      V8_STORE(beta + j, V8_LOAD(beta + j) + V8_LOAD(wr + C + j) * hv);
    }
    for (int64_t j = C8; j < C; j++) {
      gamma[j] += wr[j] * hc;
      beta[j] += wr[C + j] * hc;
    }
  }
  for (int64_t j = 0; j < C; j++) {
    gamma[j] = cpu_ff_rnd(dt, tanhf(gamma[j]));
    beta[j] = cpu_ff_rnd(dt, beta[j]);
  }
}

static void film_base(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, const float *mixed,
                      float *work, float *gamma, float *beta) {
  film_body(lv, dt, channels, mixed, work, gamma, beta);
}

#if FF_HAVE_X86
__attribute__((target("avx2"))) static void film_avx2(const cpu_ff_level *lv, apx_dtype dt,
                                                      int64_t channels, const float *mixed,
                                                      float *work, float *gamma, float *beta) {
  film_body(lv, dt, channels, mixed, work, gamma, beta);
}
#endif

void cpu_ff_film_run(const cpu_ff_level *lv, apx_dtype dt, int simd, int64_t channels,
                     const float *mixed, float *work, float *gamma, float *beta) {
#if FF_HAVE_X86
  if (simd) {
    film_avx2(lv, dt, channels, mixed, work, gamma, beta);
    return;
  }
#endif
  (void)simd;
  film_base(lv, dt, channels, mixed, work, gamma, beta);
}

void cpu_ff_film(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, const float *mixed,
                 float *work, float *gamma, float *beta) {
  cpu_ff_film_run(lv, dt, cpu_ff_simd(), channels, mixed, work, gamma, beta);
}

/* 1x1 conv, the reading copy: p[o][j] = fma chain of pw[o][c] * d[c][j] over
 * c ascending, starting from the bias. */
static void pw_plain(const cpu_ff_level *lv, int64_t C, int64_t N, const float *d, float *p) {
  for (int64_t o = 0; o < 2 * C; o++)
    for (int64_t j = 0; j < N; j++) {
      float acc = lv->pw_bias[o];
      for (int64_t c = 0; c < C; c++)
        acc = fmaf(lv->pw_weight[o * C + c], d[c * N + j], acc);
      p[o * N + j] = acc;
    }
}

#if FF_HAVE_X86
/* The same products, register-blocked: CPU_FF_MR rows (the packed weights)
 * by 16 columns (two AVX2 vectors) per microkernel; columns past the last
 * multiple of 16 go through the scalar fma chain. */
__attribute__((target("avx2,fma"))) static void pw_avx2(const cpu_ff_level *lv, int64_t C,
                                                        int64_t N, const float *d, float *p) {
  const int64_t rows = 2 * C, blocks = (rows + CPU_FF_MR - 1) / CPU_FF_MR;
  const int64_t n16 = N - N % 16;
  for (int64_t j0 = 0; j0 < n16; j0 += 16)
    for (int64_t ob = 0; ob < blocks; ob++) {
      const float *a = lv->pw_packed + ob * C * CPU_FF_MR;
      const int64_t o0 = ob * CPU_FF_MR;
      const int64_t mr = rows - o0 < CPU_FF_MR ? rows - o0 : CPU_FF_MR;
      /* twelve named accumulators: GCC keeps them in registers */
      float bias[CPU_FF_MR];
      for (int i = 0; i < CPU_FF_MR; i++)
        bias[i] = i < mr ? lv->pw_bias[o0 + i] : 0.0f;
      __m256 c00 = _mm256_set1_ps(bias[0]), c01 = c00, c10 = _mm256_set1_ps(bias[1]), c11 = c10;
      __m256 c20 = _mm256_set1_ps(bias[2]), c21 = c20, c30 = _mm256_set1_ps(bias[3]), c31 = c30;
      __m256 c40 = _mm256_set1_ps(bias[4]), c41 = c40, c50 = _mm256_set1_ps(bias[5]), c51 = c50;
      const float *dc = d + j0;
      for (int64_t c = 0; c < C; c++, dc += N, a += CPU_FF_MR) {
        const __m256 b0 = _mm256_loadu_ps(dc), b1 = _mm256_loadu_ps(dc + 8);
        __m256 ai = _mm256_broadcast_ss(a + 0);
        c00 = _mm256_fmadd_ps(ai, b0, c00);
        c01 = _mm256_fmadd_ps(ai, b1, c01);
        ai = _mm256_broadcast_ss(a + 1);
        c10 = _mm256_fmadd_ps(ai, b0, c10);
        c11 = _mm256_fmadd_ps(ai, b1, c11);
        ai = _mm256_broadcast_ss(a + 2);
        c20 = _mm256_fmadd_ps(ai, b0, c20);
        c21 = _mm256_fmadd_ps(ai, b1, c21);
        ai = _mm256_broadcast_ss(a + 3);
        c30 = _mm256_fmadd_ps(ai, b0, c30);
        c31 = _mm256_fmadd_ps(ai, b1, c31);
        ai = _mm256_broadcast_ss(a + 4);
        c40 = _mm256_fmadd_ps(ai, b0, c40);
        c41 = _mm256_fmadd_ps(ai, b1, c41);
        ai = _mm256_broadcast_ss(a + 5);
        c50 = _mm256_fmadd_ps(ai, b0, c50);
        c51 = _mm256_fmadd_ps(ai, b1, c51);
      }
      float *po = p + o0 * N + j0;
      const __m256 out[CPU_FF_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                        {c30, c31}, {c40, c41}, {c50, c51}};
      for (int i = 0; i < mr; i++) {
        _mm256_storeu_ps(po + i * N, out[i][0]);
        _mm256_storeu_ps(po + i * N + 8, out[i][1]);
      }
    }
  for (int64_t o = 0; o < rows && n16 < N; o++) {
    const float *a = lv->pw_packed + (o / CPU_FF_MR) * C * CPU_FF_MR + o % CPU_FF_MR;
    for (int64_t j = n16; j < N; j++) {
      float acc = lv->pw_bias[o];
      for (int64_t c = 0; c < C; c++)
        acc = fmaf(a[c * CPU_FF_MR], d[c * N + j], acc);
      p[o * N + j] = acc;
    }
  }
}

/* The same products with AVX-512F: CPU_FF_MR rows by 64 columns (four
 * 16-lane vectors, 24 accumulators of the 32 registers) per microkernel,
 * then strips of 16 columns (one vector a row), then the scalar fma chain
 * for the last N % 16 columns. Every output is still the fma chain bias
 * first, c ascending: the bits of pw_plain. The loops over the rows and
 * vectors are unrolled so that GCC keeps the accumulators in registers. */
#define PW512_ROWS(acc, width, a)                                                              \
  _Pragma("GCC unroll 8") for (int i = 0; i < CPU_FF_MR; i++) {                                    \
    const __m512 ai = _mm512_set1_ps((a)[i]);                                                      \
    _Pragma("GCC unroll 4") for (int v = 0; v < (width); v++)                                      \
        acc[i][v] = _mm512_fmadd_ps(ai, b[v], acc[i][v]);                                          \
  }

__attribute__((target("avx512f"))) static void pw_avx512(const cpu_ff_level *lv, int64_t C,
                                                         int64_t N, const float *d, float *p) {
  const int64_t rows = 2 * C, blocks = (rows + CPU_FF_MR - 1) / CPU_FF_MR;
  const int64_t n64 = N - N % 64, n16 = N - N % 16;
  for (int64_t j0 = 0; j0 < n16;) {
    const int width = j0 < n64 ? 4 : 1;
    for (int64_t ob = 0; ob < blocks; ob++) {
      const int64_t o0 = ob * CPU_FF_MR;
      const int64_t mr = rows - o0 < CPU_FF_MR ? rows - o0 : CPU_FF_MR;
      __m512 acc[CPU_FF_MR][4], b[4];
      _Pragma("GCC unroll 8") for (int i = 0; i < CPU_FF_MR; i++) {
        const __m512 bias = _mm512_set1_ps(i < mr ? lv->pw_bias[o0 + i] : 0.0f);
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) acc[i][v] = bias;
      }
      const float *a = lv->pw_packed + ob * C * CPU_FF_MR, *dc = d + j0;
      if (width == 4) {
        for (int64_t c = 0; c < C; c++, dc += N, a += CPU_FF_MR) {
          _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) b[v] = _mm512_loadu_ps(dc + 16 * v);
          PW512_ROWS(acc, 4, a)
        }
      } else {
        for (int64_t c = 0; c < C; c++, dc += N, a += CPU_FF_MR) {
          b[0] = _mm512_loadu_ps(dc);
          PW512_ROWS(acc, 1, a)
        }
      }
      float *po = p + o0 * N + j0;
      _Pragma("GCC unroll 8") for (int i = 0; i < CPU_FF_MR; i++)
          _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) if (i < mr && v < width)
              _mm512_storeu_ps(po + i * N + 16 * v, acc[i][v]);
    }
    j0 += 16 * width;
  }
  for (int64_t o = 0; o < rows && n16 < N; o++) {
    const float *a = lv->pw_packed + (o / CPU_FF_MR) * C * CPU_FF_MR + o % CPU_FF_MR;
    for (int64_t j = n16; j < N; j++) {
      float acc = lv->pw_bias[o];
      for (int64_t c = 0; c < C; c++)
        acc = fmaf(a[c * CPU_FF_MR], d[c * N + j], acc);
      p[o * N + j] = acc;
    }
  }
}
#undef PW512_ROWS
#endif

size_t cpu_ff_refine_scratch(int64_t channels, int64_t t) {
  const size_t C = (size_t)channels, N = (size_t)(t * t), P = (size_t)((t + 2) * (t + 2));
  return C * P + C * N + 2 * C * N;
}

/* The refine block's body, instantiated for the baseline instruction set
 * and for AVX2 (wider vectors of the same IEEE operations, no contraction:
 * the same bits). */
static inline __attribute__((always_inline)) void
refine_body(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t, const float *tile,
            const float *gamma, const float *beta, float *scratch, int simd, float *r) {
  const int64_t C = channels, N = t * t, tp = t + 2, P = tp * tp;
  const int hw = simd; /* the AVX2 instantiation: F16C too */
  float *mpad = scratch, *d = scratch + C * P, *p = d + C * N;

  const int64_t t8 = t - t % 8;
  /* 5. FiLM apply into a zero-bordered copy (the depthwise conv's padding):
   * only the border is cleared, the interior is written */
  for (int64_t c = 0; c < C; c++) {
    const float scale = 1.0f + gamma[c], shift = beta[c];
    const ff_v8 sv = V8_SET(scale), hv = V8_SET(shift);
    float *base = mpad + c * P;
    memset(base, 0, (size_t)tp * sizeof(float));
    memset(base + (t + 1) * tp, 0, (size_t)tp * sizeof(float));
    for (int64_t y = 0; y < t; y++) {
      const float *src = tile + c * N + y * t;
      float *dst = base + (y + 1) * tp + 1;
      dst[-1] = 0.0f;
      dst[t] = 0.0f;
      for (int64_t x = 0; x < t8; x += 8)
        V8_STORE(dst + x, sv * V8_LOAD(src + x) + hv);
      for (int64_t x = t8; x < t; x++)
        dst[x] = scale * src[x] + shift;
    }
  }
  /* 6a. depthwise 3x3: bias, then the nine taps in row-major order */
  for (int64_t c = 0; c < C; c++) {
    const float *w = lv->dw_weight + c * 9;
    const float bias = lv->dw_bias[c], w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4],
                w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    const ff_v8 bv = V8_SET(bias), v0 = V8_SET(w0), v1 = V8_SET(w1), v2 = V8_SET(w2),
                v3 = V8_SET(w3), v4 = V8_SET(w4), v5 = V8_SET(w5), v6 = V8_SET(w6), v7 = V8_SET(w7),
                vw8 = V8_SET(w8);
    for (int64_t y = 0; y < t; y++) {
      const float *m0 = mpad + c * P + y * tp, *m1 = m0 + tp, *m2 = m1 + tp;
      float *drow = d + c * N + y * t;
      for (int64_t x = 0; x < t8; x += 8) {
        ff_v8 acc = bv;
        acc = acc + v0 * V8_LOAD(m0 + x);
        acc = acc + v1 * V8_LOAD(m0 + x + 1);
        acc = acc + v2 * V8_LOAD(m0 + x + 2);
        acc = acc + v3 * V8_LOAD(m1 + x);
        acc = acc + v4 * V8_LOAD(m1 + x + 1);
        acc = acc + v5 * V8_LOAD(m1 + x + 2);
        acc = acc + v6 * V8_LOAD(m2 + x);
        acc = acc + v7 * V8_LOAD(m2 + x + 1);
        acc = acc + vw8 * V8_LOAD(m2 + x + 2);
        V8_STORE(drow + x, acc);
      }
      for (int64_t x = t8; x < t; x++) {
        float acc = bias;
        acc = acc + w0 * m0[x];
        acc = acc + w1 * m0[x + 1];
        acc = acc + w2 * m0[x + 2];
        acc = acc + w3 * m1[x];
        acc = acc + w4 * m1[x + 1];
        acc = acc + w5 * m1[x + 2];
        acc = acc + w6 * m2[x];
        acc = acc + w7 * m2[x + 1];
        acc = acc + w8 * m2[x + 2];
        drow[x] = acc;
      }
    }
  }
  /* 6b. 1x1 conv C -> 2C */
#if FF_HAVE_X86
  if (simd == 2)
    pw_avx512(lv, C, N, d, p);
  else if (simd)
    pw_avx2(lv, C, N, d, p);
  else
#endif
    pw_plain(lv, C, N, d, p);
  /* 6c. GroupNorm, one group over the tile's 2C*t*t values */
  const int64_t count = 2 * C * N;
  const float mean = sum_f32(p, count) / (float)count;
  const float var = sum_sq_dev_f32(p, count, mean) / (float)count;
  const float sd = sqrtf(var + 1e-5f);
  /* 6d. r = rnd(n_a * relu(n_g) + m), row by row (r may be the tile: the
   * tile was read in step 5) */
  const ff_v8 meanv = V8_SET(mean), sdv = V8_SET(sd);
  for (int64_t c = 0; c < C; c++) {
    const float wa = lv->norm_weight[c], ba = lv->norm_bias[c];
    const float wg = lv->norm_weight[C + c], bg = lv->norm_bias[C + c];
    const ff_v8 wav = V8_SET(wa), bav = V8_SET(ba), wgv = V8_SET(wg), bgv = V8_SET(bg);
    const float *pa = p + c * N, *pg = p + (C + c) * N;
    float *out = r + c * N;
    for (int64_t y = 0; y < t; y++) {
      const float *m = mpad + c * P + (y + 1) * tp + 1;
      const int64_t o = y * t;
      for (int64_t x = 0; x < t8; x += 8) {
        ff_v8 na = ((V8_LOAD(pa + o + x) - meanv) / sdv) * wav + bav;
        ff_v8 ng = ((V8_LOAD(pg + o + x) - meanv) / sdv) * wgv + bgv;
        V8_STORE(out + o + x, na * V8_RELU(ng) + V8_LOAD(m + x));
      }
      for (int64_t x = t8; x < t; x++) {
        float na = ((pa[o + x] - mean) / sd) * wa + ba;
        float ng = ((pg[o + x] - mean) / sd) * wg + bg;
        ng = ng < 0.0f ? 0.0f : ng;
        out[o + x] = na * ng + m[x];
      }
    }
    if (dt != APX_DTYPE_F32) {
      int64_t i = 0;
      for (; i + 8 <= N; i += 8)
        V8_STORE(out + i, V8_RND(dt, hw, V8_LOAD(out + i)));
      for (; i < N; i++)
        out[i] = cpu_ff_rnd(dt, out[i]);
    }
  }
}

static void refine_base(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t,
                        const float *tile, const float *gamma, const float *beta, float *scratch,
                        float *r) {
  refine_body(lv, dt, channels, t, tile, gamma, beta, scratch, 0, r);
}

#if FF_HAVE_X86
__attribute__((target("avx2,fma,f16c"))) static void
refine_avx2(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t, const float *tile,
            const float *gamma, const float *beta, float *scratch, float *r) {
  refine_body(lv, dt, channels, t, tile, gamma, beta, scratch, 1, r);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) static void
refine_avx512(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t, const float *tile,
              const float *gamma, const float *beta, float *scratch, float *r) {
  refine_body(lv, dt, channels, t, tile, gamma, beta, scratch, 2, r);
}
#endif

void cpu_ff_refine(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t,
                   const float *tile, const float *gamma, const float *beta, float *scratch,
                   int simd, float *r) {
#if FF_HAVE_X86
  if (simd == 2) {
    refine_avx512(lv, dt, channels, t, tile, gamma, beta, scratch, r);
    return;
  }
  if (simd) {
    refine_avx2(lv, dt, channels, t, tile, gamma, beta, scratch, r);
    return;
  }
#endif
  (void)simd;
  refine_base(lv, dt, channels, t, tile, gamma, beta, scratch, r);
}

float cpu_ff_proxy(apx_dtype dtype, float v) {
  v = cpu_ff_rnd(dtype, v);
  if (v != v)
    return 0.0f;
  if (isinf(v))
    return v > 0 ? 1.0f : 0.0f;
  return v;
}

float cpu_ff_alpha(const cpu_ff_level *lv, apx_dtype dtype, float bp, float up) {
  float logit = lv->w_boundary * bp + lv->w_uncertainty * up + lv->gate_bias;
  return cpu_ff_rnd(dtype, apx_sigmoidf(logit));
}

/* The AVX2 instantiations' requirement: AVX2 and F16C (the backend's AVX2
 * level) and FMA; the AVX-512 1x1 conv's: the backend's AVX-512 level too. */
int cpu_ff_simd(void) {
#if FF_HAVE_X86
  const cpu_simd_level level = cpu_tile_simd_level();
  if (level >= CPU_SIMD_AVX2) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma"))
      return 0;
    return level >= CPU_SIMD_AVX512 ? 2 : 1;
  }
#endif
  return 0;
}
