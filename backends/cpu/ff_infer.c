/* cpu backend: the end-to-end FF path, docs/ff_infer.md (spec/ops.md 8, 9).
 *
 * Per call: route on the host (services.ff_route), then level 0 on dense
 * and level 1 on its result. A level runs in phases, each parallel over
 * independent items (tiles, tokens, rows), so the bits do not depend on the
 * thread count: pack and token means per tile, the scan per batch row,
 * FiLM parameters per token, the refine block per tile (its result written
 * at the tile's pixels of the level's output buffer), then one pass over
 * the whole map that fuses X with the unpacked map. heavy_l0 lives in the
 * `detail` output until the last pass turns it into detail = heavy -
 * heavy_l0.
 *
 * The hot part is the refine block's 1x1 conv, a [2C x C] x [C x t*t]
 * product per tile: pw_plain is the reading copy, pw_avx2 the AVX2+FMA
 * kernel chosen at run time; both evaluate every output as the same fma
 * chain (bias first, then c ascending), so they give the same bits. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ff_cpu.h"
#include "tile_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define FF_HAVE_X86 1
#else
#define FF_HAVE_X86 0
#endif

/* ---- prepared weights -------------------------------------------------------- */

static size_t level_floats(int64_t C) {
  size_t c = (size_t)C, blocks = (c * 2 + CPU_FF_MR - 1) / CPU_FF_MR;
  return 10 * c + 2 * c + 2 * c + c * c + c + 2 * c * c + 2 * c + 9 * c + c + 2 * c * c +
         blocks * CPU_FF_MR * c + 2 * c + 4 * c;
}

static float *take(float **cursor, size_t n) {
  float *p = *cursor;
  *cursor += n;
  return p;
}

static void prepare_level(const apx_ff_level_params *w, apx_dtype dt, int64_t C, float **cur,
                          cpu_ff_level *lv) {
  for (int s = 0; s < 2; s++) {
    float *decay = take(cur, C), *omd = take(cur, C), *ig = take(cur, C), *og = take(cur, C),
          *sb = take(cur, C);
    for (int64_t c = 0; c < C; c++) {
      /* docs/ff_infer.md: derived in fp32, rounded once; the scan then
       * clamps decay with fp32 bounds (spec/ops.md 6.A) */
      float d = cpu_ff_rnd(dt, apx_ff_decay(w->scan_decay_logit[s][c]));
      d = d < 1e-6f ? 1e-6f : d;
      d = d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
      decay[c] = d;
      omd[c] = 1.0f - d;
      ig[c] = cpu_ff_rnd(dt, apx_ff_gain(w->scan_input_gain_raw[s][c]));
      og[c] = cpu_ff_rnd(dt, apx_ff_gain(w->scan_output_gain_raw[s][c]));
      sb[c] = cpu_ff_rnd(dt, w->scan_state_bias[s][c]);
    }
    lv->decay[s] = decay;
    lv->one_minus_decay[s] = omd;
    lv->input_gain[s] = ig;
    lv->output_gain[s] = og;
    lv->state_bias[s] = sb;
  }
  float *gate = take(cur, C), *omg = take(cur, C);
  for (int64_t c = 0; c < C; c++) {
    gate[c] = cpu_ff_rnd(dt, apx_ff_sigmoidf(w->merge_gate_logit[c]));
    omg[c] = cpu_ff_rnd(dt, 1.0f - gate[c]); /* spec/ops.md 6.A gated merge */
  }
  lv->gate = gate;
  lv->one_minus_gate = omg;

  float *lnw = take(cur, C), *lnb = take(cur, C);
  memcpy(lnw, w->token_norm_weight, (size_t)C * sizeof(float));
  memcpy(lnb, w->token_norm_bias, (size_t)C * sizeof(float));
  lv->token_norm_weight = lnw;
  lv->token_norm_bias = lnb;

  float *m0 = take(cur, (size_t)(C * C)), *m0b = take(cur, C);
  for (int64_t o = 0; o < C; o++)
    for (int64_t c = 0; c < C; c++)
      m0[c * C + o] = w->mlp0_weight[o * C + c];
  memcpy(m0b, w->mlp0_bias, (size_t)C * sizeof(float));
  lv->mlp0_t = m0;
  lv->mlp0_bias = m0b;

  float *m2 = take(cur, (size_t)(2 * C * C)), *m2b = take(cur, 2 * C);
  for (int64_t o = 0; o < 2 * C; o++)
    for (int64_t c = 0; c < C; c++)
      m2[c * 2 * C + o] = w->mlp2_weight[o * C + c];
  memcpy(m2b, w->mlp2_bias, (size_t)(2 * C) * sizeof(float));
  lv->mlp2_t = m2;
  lv->mlp2_bias = m2b;

  float *dw = take(cur, (size_t)(9 * C)), *dwb = take(cur, C);
  memcpy(dw, w->dw_weight, (size_t)(9 * C) * sizeof(float));
  memcpy(dwb, w->dw_bias, (size_t)C * sizeof(float));
  lv->dw_weight = dw;
  lv->dw_bias = dwb;

  const int64_t rows = 2 * C, blocks = (rows + CPU_FF_MR - 1) / CPU_FF_MR;
  float *pw = take(cur, (size_t)(rows * C));
  float *packed = take(cur, (size_t)(blocks * CPU_FF_MR * C));
  memcpy(pw, w->pw_weight, (size_t)(rows * C) * sizeof(float));
  for (int64_t ob = 0; ob < blocks; ob++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < CPU_FF_MR; i++) {
        int64_t o = ob * CPU_FF_MR + i;
        packed[(ob * C + c) * CPU_FF_MR + i] = o < rows ? pw[o * C + c] : 0.0f;
      }
  lv->pw_weight = pw;
  lv->pw_packed = packed;

  float *pwb = take(cur, 2 * C), *nw = take(cur, 2 * C), *nb = take(cur, 2 * C);
  memcpy(pwb, w->pw_bias, (size_t)(2 * C) * sizeof(float));
  memcpy(nw, w->norm_weight, (size_t)(2 * C) * sizeof(float));
  memcpy(nb, w->norm_bias, (size_t)(2 * C) * sizeof(float));
  lv->pw_bias = pwb;
  lv->norm_weight = nw;
  lv->norm_bias = nb;

  lv->w_boundary = apx_ff_softplusf(w->boundary_log_weight);
  lv->w_uncertainty = apx_ff_softplusf(w->uncertainty_log_weight);
  lv->gate_bias = w->gate_bias;
}

apx_status cpu_ff_prepare(const apx_ff_params *params, apx_dtype dtype, cpu_ff_prepared **out) {
  const int64_t C = params->channels;
  cpu_ff_prepared *p = calloc(1, sizeof *p);
  float *block = malloc(2 * level_floats(C) * sizeof(float));
  if (!p || !block) {
    free(p);
    free(block);
    return APX_ERR_NO_MEMORY;
  }
  p->channels = C;
  p->dtype = dtype;
  p->block = block;
  float *cur = block;
  for (int l = 0; l < 2; l++)
    prepare_level(&params->level[l], dtype, C, &cur, &p->level[l]);
  *out = p;
  return APX_OK;
}

void cpu_ff_prepared_free(cpu_ff_prepared *prepared) {
  if (!prepared)
    return;
  free(prepared->block);
  free(prepared);
}

/* ---- model pieces ------------------------------------------------------------ */

/* fp32 sum of v[0..n) in a fixed order whatever the instruction set: 32
 * lanes (eight 4-wide accumulators, GCC vector extensions, which are
 * elementwise IEEE on every target), combined in a fixed tree, then the
 * tail in order. */
typedef float ff_v4 __attribute__((vector_size(16)));

static inline ff_v4 v4_load(const float *p) {
  ff_v4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

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

static inline __attribute__((always_inline)) float sum_f32(const float *v, int64_t n) {
  ff_v4 a[8] = {{0}};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 8; l++)
      a[l] += v4_load(v + i + 4 * l);
  float s = v4_tree(a);
  for (; i < n; i++)
    s += v[i];
  return s;
}

/* sum of (v - mean)^2 in the order of sum_f32 */
static inline __attribute__((always_inline)) float sum_sq_dev_f32(const float *v, int64_t n,
                                                                      float mean) {
  ff_v4 a[8] = {{0}};
  const ff_v4 mu = {mean, mean, mean, mean};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 8; l++) {
      ff_v4 d = v4_load(v + i + 4 * l) - mu;
      a[l] += d * d;
    }
  float s = v4_tree(a);
  for (; i < n; i++) {
    float d = v[i] - mean;
    s += d * d;
  }
  return s;
}

void cpu_ff_tokens(apx_dtype dtype, const float *tile, int64_t channels, int64_t n, float *tok) {
  for (int64_t c = 0; c < channels; c++)
    tok[c] = cpu_ff_rnd(dtype, sum_f32(tile + c * n, n) / (float)n);
}

/* spec/ops.md 6.A: NaN -> 0, +-inf -> +-lim, then clamp to [-lim, lim]. */
static inline float scan_sanitize(float x, float lim) {
  if (x != x)
    return 0.0f;
  if (lim < x)
    return lim;
  if (-lim > x)
    return -lim;
  return x;
}

void cpu_ff_scan_merge(const cpu_ff_level *lv, apx_dtype dt, const float *tok, int64_t steps,
                       int64_t channels, float *mixed) {
  const float lim = cpu_ff_rnd(dt, 1e4f); /* the clamp in the tokens dtype (6.A) */
  const int64_t C = channels;
  for (int64_t c = 0; c < C; c++) {
    float s = 0.0f;
    for (int64_t k = 0; k < steps; k++) {
      float x = scan_sanitize(tok[k * C + c], lim);
      float drive = lv->input_gain[0][c] * x + lv->state_bias[0][c];
      s = lv->decay[0][c] * s + lv->one_minus_decay[0][c] * drive;
      mixed[k * C + c] = cpu_ff_rnd(dt, lv->output_gain[0][c] * s);
    }
    s = 0.0f;
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

static int ff_simd(void);

/* FiLM's body, instantiated for the baseline and for AVX2 (the same IEEE
 * operations per output, wider vectors: the same bits). */
static inline __attribute__((always_inline)) void
film_body(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, const float *mixed, float *work,
          float *gamma, float *beta) {
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
    h[j] = h[j] * apx_ff_sigmoidf(h[j]); /* SiLU */
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

static void film_base(const cpu_ff_level *lv, apx_dtype dt, int64_t channels,
                      const float *mixed, float *work, float *gamma, float *beta) {
  film_body(lv, dt, channels, mixed, work, gamma, beta);
}

#if FF_HAVE_X86
__attribute__((target("avx2"))) static void film_avx2(const cpu_ff_level *lv, apx_dtype dt,
                                                      int64_t channels, const float *mixed,
                                                      float *work, float *gamma, float *beta) {
  film_body(lv, dt, channels, mixed, work, gamma, beta);
}
#endif

void cpu_ff_film(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, const float *mixed,
                 float *work, float *gamma, float *beta) {
#if FF_HAVE_X86
  if (ff_simd()) {
    film_avx2(lv, dt, channels, mixed, work, gamma, beta);
    return;
  }
#endif
  film_base(lv, dt, channels, mixed, work, gamma, beta);
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
                v3 = V8_SET(w3), v4 = V8_SET(w4), v5 = V8_SET(w5), v6 = V8_SET(w6),
                v7 = V8_SET(w7), vw8 = V8_SET(w8);
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
  if (simd)
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
    if (dt != APX_DTYPE_F32)
      for (int64_t i = 0; i < N; i++)
        out[i] = cpu_ff_rnd(dt, out[i]);
  }
}

static void refine_base(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t,
                        const float *tile, const float *gamma, const float *beta, float *scratch,
                        float *r) {
  refine_body(lv, dt, channels, t, tile, gamma, beta, scratch, 0, r);
}

#if FF_HAVE_X86
__attribute__((target("avx2,fma"))) static void
refine_avx2(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t, const float *tile,
            const float *gamma, const float *beta, float *scratch, float *r) {
  refine_body(lv, dt, channels, t, tile, gamma, beta, scratch, 1, r);
}
#endif

void cpu_ff_refine(const cpu_ff_level *lv, apx_dtype dt, int64_t channels, int64_t t,
                   const float *tile, const float *gamma, const float *beta, float *scratch,
                   int simd, float *r) {
#if FF_HAVE_X86
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
  return cpu_ff_rnd(dtype, apx_ff_sigmoidf(logit));
}

/* ---- frame access ------------------------------------------------------------ */

static inline float load_any(apx_dtype dt, const void *p, int64_t i) {
  if (dt == APX_DTYPE_F32)
    return ((const float *)p)[i];
  if (dt == APX_DTYPE_F16)
    return apx_f16_to_f32(((const uint16_t *)p)[i]);
  return apx_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* n elements from p + i into fp32 dst (exact) */
static void load_row(apx_dtype dt, const void *p, int64_t i, int64_t n, float *dst) {
  if (dt == APX_DTYPE_F32)
    memcpy(dst, (const float *)p + i, (size_t)n * sizeof(float));
  else if (dt == APX_DTYPE_F16)
    for (int64_t k = 0; k < n; k++)
      dst[k] = apx_f16_to_f32(((const uint16_t *)p)[i + k]);
  else
    for (int64_t k = 0; k < n; k++)
      dst[k] = apx_bf16_to_f32(((const uint16_t *)p)[i + k]);
}

/* n fp32 values (already values of dt) into p + i */
static void store_row(apx_dtype dt, void *p, int64_t i, int64_t n, const float *src) {
  if (dt == APX_DTYPE_F32)
    memcpy((float *)p + i, src, (size_t)n * sizeof(float));
  else if (dt == APX_DTYPE_F16)
    for (int64_t k = 0; k < n; k++)
      ((uint16_t *)p)[i + k] = apx_f32_to_f16(src[k]);
  else
    for (int64_t k = 0; k < n; k++)
      ((uint16_t *)p)[i + k] = apx_f32_to_bf16(src[k]);
}

static inline int ff_thread(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* ---- one call ---------------------------------------------------------------- */

typedef struct ff_call {
  const cpu_state *st;
  const cpu_ff_prepared *prep;
  apx_dtype dt;
  int64_t B, C, H, W;
  int simd;
  int threads;
} ff_call;

/* Steps 1-7 of level `li` with tile size t on the batch rows' tiles:
 * ids[b*ids_stride + k] for k < counts[b] (pack order) index the tile grid
 * of X; each tile's r is written at its pixels of `out` (frame dtype). */
static apx_status level_tiles(const ff_call *fc, int li, const void *X, void *out,
                              const int64_t *ids, int64_t ids_stride, const int64_t *counts,
                              int64_t t) {
  const cpu_ff_level *lv = &fc->prep->level[li];
  const apx_dtype dt = fc->dt;
  const int64_t B = fc->B, C = fc->C, H = fc->H, W = fc->W, N = t * t, grid_w = W / t;
  int64_t total = 0;
  for (int64_t b = 0; b < B; b++)
    total += counts[b];
  if (total == 0)
    return APX_OK;

  const size_t scratch = cpu_ff_refine_scratch(C, t);
  const size_t per_thread = scratch + (size_t)(C * N) + 3 * (size_t)C;
  int64_t *tiles = malloc((size_t)total * 2 * sizeof(int64_t) + (size_t)(B + 1) * sizeof(int64_t));
  float *packed = malloc(((size_t)total * (size_t)(C * N) + 4 * (size_t)total * (size_t)C +
                          (size_t)fc->threads * per_thread) *
                         sizeof(float));
  if (!tiles || !packed) {
    free(tiles);
    free(packed);
    return fc->st->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (level %d tiles)",
                                  li);
  }
  float *tok = packed + (size_t)total * (size_t)(C * N);
  float *mixed = tok + total * C, *gamma = mixed + total * C, *beta = gamma + total * C;
  float *thread_buf = beta + total * C;
  int64_t *first = tiles + 2 * total; /* [B+1]: each row's first tile */
  int64_t j = 0;
  for (int64_t b = 0; b < B; b++) {
    first[b] = j;
    for (int64_t k = 0; k < counts[b]; k++, j++) {
      tiles[2 * j] = b;
      tiles[2 * j + 1] = ids[b * ids_stride + k];
    }
  }
  first[B] = j;
  const int threads = fc->threads;

  /* 1-2. pack (exact fp32 copies) and token means, per tile */
  CPU_OMP_FOR(threads, total * C * N)
  for (int64_t i = 0; i < total; i++) {
    const int64_t b = tiles[2 * i], id = tiles[2 * i + 1];
    const int64_t y0 = (id / grid_w) * t, x0 = (id % grid_w) * t;
    float *P = packed + (size_t)i * (size_t)(C * N);
    for (int64_t c = 0; c < C; c++)
      for (int64_t y = 0; y < t; y++)
        load_row(dt, X, ((b * C + c) * H + y0 + y) * W + x0, t, P + c * N + y * t);
    cpu_ff_tokens(dt, P, C, N, tok + i * C);
  }
  /* 3. scan and merge, per batch row */
  CPU_OMP_FOR(threads, total * C * 64)
  for (int64_t b = 0; b < B; b++)
    if (counts[b] > 0)
      cpu_ff_scan_merge(lv, dt, tok + first[b] * C, counts[b], C, mixed + first[b] * C);
  /* 4. FiLM parameters, per token */
  CPU_OMP_FOR(threads, total * C * C * 3)
  for (int64_t i = 0; i < total; i++) {
    float *work = thread_buf + (size_t)ff_thread() * per_thread + scratch + (size_t)(C * N);
    cpu_ff_film(lv, dt, C, mixed + i * C, work, gamma + i * C, beta + i * C);
  }
  /* 5-7. FiLM apply, refine, unpack (override: ids are unique in a row) */
  CPU_OMP_FOR(threads, total * C * N * C)
  for (int64_t i = 0; i < total; i++) {
    float *buf = thread_buf + (size_t)ff_thread() * per_thread, *r = buf + scratch;
    const int64_t b = tiles[2 * i], id = tiles[2 * i + 1];
    const int64_t y0 = (id / grid_w) * t, x0 = (id % grid_w) * t;
    cpu_ff_refine(lv, dt, C, t, packed + (size_t)i * (size_t)(C * N), gamma + i * C, beta + i * C,
                  buf, fc->simd, r);
    for (int64_t c = 0; c < C; c++)
      for (int64_t y = 0; y < t; y++)
        store_row(dt, out, ((b * C + c) * H + y0 + y) * W + x0, t, r + c * N + y * t);
  }
  free(tiles);
  free(packed);
  return APX_OK;
}

/* Step 8's alpha of level li for every pixel of batch rows where want[b]
 * (all rows when want is NULL), into alpha [B][H*W] (fp32 holding frame
 * values). */
static void level_alpha(const ff_call *fc, int li, const apx_tensor *boundary,
                        const apx_tensor *uncertainty, const int64_t *want, float *alpha) {
  const cpu_ff_level *lv = &fc->prep->level[li];
  const apx_dtype dt = fc->dt;
  const int64_t HW = fc->H * fc->W, rows = fc->B * fc->H;
  CPU_OMP_FOR(fc->threads, rows * fc->W * 16)
  for (int64_t row = 0; row < rows; row++) {
    const int64_t b = row / fc->H;
    if (want && !want[b])
      continue;
    const int64_t i0 = row * fc->W;
    (void)HW;
    for (int64_t i = i0; i < i0 + fc->W; i++) {
      float bp = boundary ? cpu_ff_proxy(dt, load_any(boundary->dtype, boundary->data, i)) : 1.0f;
      float up =
          uncertainty ? cpu_ff_proxy(dt, load_any(uncertainty->dtype, uncertainty->data, i)) : 1.0f;
      alpha[i] = cpu_ff_alpha(lv, dt, bp, up);
    }
  }
}

/* heavy = rnd(x + rnd(alpha * rnd(u - x))) over n elements (alpha per
 * element); f32 needs no rounding and vectorises. */
static void fuse_row(apx_dtype dt, const float *x, const float *u, const float *a, float *h,
                     int64_t n) {
  if (dt == APX_DTYPE_F32)
    for (int64_t i = 0; i < n; i++)
      h[i] = x[i] + a[i] * (u[i] - x[i]);
  else
    for (int64_t i = 0; i < n; i++)
      h[i] = cpu_ff_fuse(dt, x[i], u[i], a[i]);
}

/* d = rnd(h - x) */
static void diff_row(apx_dtype dt, const float *h, const float *x, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    d[i] = h[i] - x[i];
  if (dt != APX_DTYPE_F32)
    for (int64_t i = 0; i < n; i++)
      d[i] = cpu_ff_rnd(dt, d[i]);
}

/* The unpacked map U of a row: X's row, with the selected tiles' pixels
 * (mask over the row's tile grid, tile size t) taken from `tiles`. */
static void unpacked_row(apx_dtype dt, const float *x, const void *tiles, int64_t at,
                         const unsigned char *mask_row, int64_t t, int64_t W, float *u) {
  memcpy(u, x, (size_t)W * sizeof(float));
  for (int64_t tx = 0; tx < W / t; tx++)
    if (mask_row[tx])
      load_row(dt, tiles, at + tx * t, t, u + tx * t);
}

/* One row of a whole-map pass in f32, straight on the frames (no rounding
 * to do): level 0 (last = 0) turns detail's row into fuse(dense, U0);
 * level 1 with L1 tiles turns heavy's into fuse(heavy_l0, U1) and detail's
 * into heavy - heavy_l0; level 1 without copies heavy_l0 and takes dense
 * off it. Instantiated for the baseline and for AVX2 (the same bits). */
static inline __attribute__((always_inline)) void
map_row_f32_body(int last, int with_l1, const float *dense, float *heavy, float *detail,
                 const unsigned char *mask_row, int64_t t, int64_t W, const float *a) {
  if (last && !with_l1) {
    for (int64_t i = 0; i < W; i++) {
      heavy[i] = detail[i];
      detail[i] = detail[i] - dense[i];
    }
    return;
  }
  for (int64_t x0 = 0; x0 < W; x0 += t) {
    const int selected = mask_row[x0 / t];
    if (!last) {
      if (selected)
        for (int64_t i = x0; i < x0 + t; i++)
          detail[i] = dense[i] + a[i] * (detail[i] - dense[i]);
      else
        for (int64_t i = x0; i < x0 + t; i++)
          detail[i] = dense[i] + a[i] * (dense[i] - dense[i]);
    } else if (selected) {
      for (int64_t i = x0; i < x0 + t; i++) {
        const float x = detail[i], h = x + a[i] * (heavy[i] - x);
        heavy[i] = h;
        detail[i] = h - x;
      }
    } else {
      for (int64_t i = x0; i < x0 + t; i++) {
        const float x = detail[i], h = x + a[i] * (x - x);
        heavy[i] = h;
        detail[i] = h - x;
      }
    }
  }
}

static void map_row_f32_base(int last, int with_l1, const float *dense, float *heavy,
                             float *detail, const unsigned char *mask_row, int64_t t, int64_t W,
                             const float *a) {
  map_row_f32_body(last, with_l1, dense, heavy, detail, mask_row, t, W, a);
}

#if FF_HAVE_X86
__attribute__((target("avx2"))) static void
map_row_f32_avx2(int last, int with_l1, const float *dense, float *heavy, float *detail,
                 const unsigned char *mask_row, int64_t t, int64_t W, const float *a) {
  map_row_f32_body(last, with_l1, dense, heavy, detail, mask_row, t, W, a);
}
#endif

/* The whole-map passes. Level 0 (last = 0): detail holds each L0 tile's r
 * at its pixels and becomes heavy_l0 = fuse(dense, U0). Level 1 (last = 1),
 * per batch row: with L1 tiles, heavy (holding their r) becomes fuse(heavy_l0,
 * U1) and detail = heavy - heavy_l0; without, heavy = heavy_l0 and detail
 * = heavy_l0 - dense. */
static apx_status map_pass(const ff_call *fc, int last, const void *dense, void *heavy,
                           void *detail, const unsigned char *mask, int64_t t,
                           const int64_t *l1_count, const float *alpha) {
  const apx_dtype dt = fc->dt;
  const int64_t B = fc->B, C = fc->C, H = fc->H, W = fc->W, grid_w = W / t;
  const int64_t grid = (H / t) * grid_w, rows = B * C * H;
  float *buf = NULL;
  if (dt != APX_DTYPE_F32) {
    buf = malloc((size_t)fc->threads * 3 * (size_t)W * sizeof(float));
    if (!buf)
      return fc->st->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (map pass)");
  }
  CPU_OMP_FOR_CHUNKED(fc->threads, rows * W, 16)
  for (int64_t row = 0; row < rows; row++) {
    const int64_t b = row / (C * H), y = row % H, at = row * W;
    const float *a = alpha + (b * H + y) * W;
    const unsigned char *mask_row = mask + b * grid + (y / t) * grid_w;
    const int with_l1 = last && l1_count[b] > 0;
    if (dt == APX_DTYPE_F32) {
      float *hr = (float *)heavy + at, *dr = (float *)detail + at;
      const float *xr = (const float *)dense + at;
#if FF_HAVE_X86
      if (fc->simd)
        map_row_f32_avx2(last, with_l1, xr, hr, dr, mask_row, t, W, a);
      else
#endif
        map_row_f32_base(last, with_l1, xr, hr, dr, mask_row, t, W, a);
      continue;
    }
    float *x = buf + (size_t)ff_thread() * 3 * (size_t)W, *u = x + W, *h = u + W;
    if (!last) {
      load_row(dt, dense, at, W, x);
      unpacked_row(dt, x, detail, at, mask_row, t, W, u);
      fuse_row(dt, x, u, a, h, W);
      store_row(dt, detail, at, W, h);
    } else if (with_l1) {
      load_row(dt, detail, at, W, x);
      unpacked_row(dt, x, heavy, at, mask_row, t, W, u);
      fuse_row(dt, x, u, a, h, W);
      store_row(dt, heavy, at, W, h);
      diff_row(dt, h, x, u, W);
      store_row(dt, detail, at, W, u);
    } else {
      load_row(dt, detail, at, W, h);
      load_row(dt, dense, at, W, x);
      store_row(dt, heavy, at, W, h);
      diff_row(dt, h, x, u, W);
      store_row(dt, detail, at, W, u);
    }
  }
  free(buf);
  return APX_OK;
}

static apx_status make_prepared(void *state, const apx_ff_params *params, apx_dtype dtype,
                                int device_index, void **prepared) {
  cpu_state *s = state;
  (void)device_index;
  cpu_ff_prepared *p = NULL;
  if (cpu_ff_prepare(params, dtype, &p) != APX_OK)
    return s->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (weights)");
  *prepared = p;
  return APX_OK;
}

static void release_prepared(void *state, int device_index, void *prepared) {
  (void)state;
  (void)device_index;
  cpu_ff_prepared_free(prepared);
}

static int ff_simd(void) {
#if FF_HAVE_X86
  if (cpu_tile_simd_level() >= CPU_SIMD_AVX2) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
  }
#endif
  return 0;
}

apx_status cpu_ff_infer(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  cpu_state *s = state;
  const apx_core_services *svc = s->svc;
  (void)call;
  if (svc->size < offsetof(apx_core_services, ff_route) + sizeof svc->ff_route || !svc->ff_params ||
      !svc->ff_cached || !svc->ff_route)
    return svc->set_error(APX_ERR_UNSUPPORTED,
                          "ff_infer: the core's services table lacks the ff services");
  const apx_tensor *dense = args->dense;
  ff_call fc = {.st = s,
                .dt = dense->dtype,
                .B = dense->shape[0],
                .C = dense->shape[1],
                .H = dense->shape[2],
                .W = dense->shape[3],
                .simd = ff_simd(),
                .threads = s->threads > 0 ? s->threads : 1};
  if (fc.dt != APX_DTYPE_F32 && fc.dt != APX_DTYPE_F16 && fc.dt != APX_DTYPE_BF16)
    return svc->set_error(APX_ERR_UNSUPPORTED, "ff_infer: dense dtype [%d] is not a float dtype",
                          (int)fc.dt);
  const apx_ff_params *params = svc->ff_params(args->weights);
  if (!params || params->channels != fc.C)
    return svc->set_error(APX_ERR_INVALID_ARG,
                          "ff_infer: weights have [%lld] channels, dense has %lld",
                          params ? (long long)params->channels : -1LL, (long long)fc.C);
  void *prepared = NULL;
  apx_status st = svc->ff_cached(svc->core, args->weights, fc.dt, 0, make_prepared,
                                 release_prepared, s, &prepared);
  if (st != APX_OK)
    return st;
  fc.prep = prepared;

  const int64_t B = fc.B, H = fc.H, W = fc.W, t0 = args->tile_l0, t1 = args->tile_l1;
  const int64_t k0 = args->kmax_l0, k1 = args->kmax_l1;
  const int64_t grid0 = (H / t0) * (W / t0), grid1 = (H / t1) * (W / t1);
  /* route arrays, masks and both levels' alpha in one block */
  size_t ints = (size_t)(2 * B + 2 * B * k0 + B * k1);
  size_t bytes = ints * sizeof(int64_t) + (size_t)(2 * B) * sizeof(double) +
                 (size_t)(2 * B * H * W) * sizeof(float) + (size_t)(B * (grid0 + grid1));
  char *block = malloc(bytes ? bytes : 1);
  if (!block)
    return svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (routing)");
  apx_ff_route route;
  route.l0_count = (int64_t *)block;
  route.l1_count = route.l0_count + B;
  route.l0_greedy = route.l1_count + B;
  route.l0_hilbert = route.l0_greedy + B * k0;
  route.l1_hilbert = route.l0_hilbert + B * k0;
  route.b1_spent = (double *)(route.l1_hilbert + B * k1);
  route.b2_spent = route.b1_spent + B;
  float *alpha0 = (float *)(route.b2_spent + B), *alpha1 = alpha0 + B * H * W;
  unsigned char *mask0 = (unsigned char *)(alpha1 + B * H * W), *mask1 = mask0 + B * grid0;
  st = svc->ff_route(args, &route);
  if (st != APX_OK) {
    free(block);
    return st;
  }
  memset(mask0, 0, (size_t)(B * (grid0 + grid1)));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t k = 0; k < route.l0_count[b]; k++)
      mask0[b * grid0 + route.l0_hilbert[b * k0 + k]] = 1;
    for (int64_t k = 0; k < route.l1_count[b]; k++)
      mask1[b * grid1 + route.l1_hilbert[b * k1 + k]] = 1;
  }

  void *heavy = args->heavy->data, *detail = args->detail->data;
  /* level 0 on dense: tiles' r into detail, then detail = heavy_l0 */
  st = level_tiles(&fc, 0, dense->data, detail, route.l0_hilbert, k0, route.l0_count, t0);
  if (st == APX_OK) {
    level_alpha(&fc, 0, args->boundary, args->uncertainty, NULL, alpha0);
    st = map_pass(&fc, 0, dense->data, heavy, detail, mask0, t0, NULL, alpha0);
  }
  /* level 1 on heavy_l0: tiles' r into heavy, then heavy and detail */
  if (st == APX_OK)
    st = level_tiles(&fc, 1, detail, heavy, route.l1_hilbert, k1, route.l1_count, t1);
  if (st == APX_OK) {
    level_alpha(&fc, 1, args->boundary, args->uncertainty, route.l1_count, alpha1);
    st = map_pass(&fc, 1, dense->data, heavy, detail, mask1, t1, route.l1_count, alpha1);
  }
  if (st == APX_OK) {
    /* alpha of level 1 where a row has L1 tiles, else of level 0 */
    for (int64_t b = 0; b < B; b++)
      store_row(fc.dt, args->alpha->data, b * H * W, H * W,
                (route.l1_count[b] > 0 ? alpha1 : alpha0) + b * H * W);
    apx_ff_stats *stats = args->stats;
    if (stats) {
      for (int64_t b = 0; b < B; b++) {
        if (stats->selected_l0)
          stats->selected_l0[b] = route.l0_count[b];
        if (stats->selected_l1)
          stats->selected_l1[b] = route.l1_count[b];
        if (stats->budget_b1_spent)
          stats->budget_b1_spent[b] = route.b1_spent[b];
        if (stats->budget_b2_spent)
          stats->budget_b2_spent[b] = route.b2_spent[b];
      }
      if (stats->l0_ids)
        memcpy(stats->l0_ids, route.l0_greedy, (size_t)(B * k0) * sizeof(int64_t));
      if (stats->l1_ids)
        memcpy(stats->l1_ids, route.l1_hilbert, (size_t)(B * k1) * sizeof(int64_t));
    }
  }
  free(block);
  return st;
}
