/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: fusiongate_alpha_backward (docs/ops.md, fusiongate_alpha_backward).
 *
 * Per pixel, in fp32: the proxies sanitised and cast to grad_out's dtype as
 * the forward does (b, u), z = w_b*b + w_u*u + bias,
 * t = g*sigmoid'(z) (sigmoid_slope); grad_boundary = t*w_b and grad_uncertainty = t*w_u where
 * the proxy was finite (0 where it was sanitised). The scalars' gradients
 * are sums of t*b, t*u and t over fixed blocks of pixels, each block in 16
 * lanes (pixel p of the block into lane p % 16, in pixel order) whose sums
 * are then added in lane order, then over the blocks in order, times
 * softplus' of the log weights: the same bits for any thread count.
 *
 * A chunk of pixels goes through three passes over fp32 rows on the stack:
 * the proxies and -|z|; exp of the row (glibc libmvec's vector expf on the
 * AVX2 and AVX-512 paths, expf on the portable one); t, the sums and the
 * gradients. */
#include <math.h>

#include "scan_index_simd.h"

/* Pixels per block of the scalar sums (fixed: it sets the order of the
 * sums), per pass through the fp32 rows on the stack, and lanes of the
 * block sums (both multiples of it). */
#define ALPHA_BWD_BLOCK 4096
#define ALPHA_BWD_CHUNK 512
#define ALPHA_BWD_LANES 16

#if SI_HAVE_X86 && defined(__GLIBC__)
#define ALPHA_BWD_MVEC 1
/* glibc libmvec's expf in the x86-64 vector function ABI (its AVX2 and
 * AVX-512 variants; libm.so's linker script brings libmvec.so.1 in). */
__attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256 x);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512 x);
#else
#define ALPHA_BWD_MVEC 0
#endif

/* One call's constants. */
typedef struct {
  apx_dtype in_dt, g_dt;
  cpu_simd_level level;
  int64_t n;
  float w_b, w_u, bias;
  const char *grad_out, *boundary, *uncertainty;
  char *grad_b, *grad_u;
  size_t in_elem, g_elem;
  float *partial; /* [blocks][3] or NULL */
} alpha_bwd;

/* A chunk's fp32 rows: the inputs, the sanitised proxies and whether each
 * passed through (1) or was sanitised (0), then e = -|z| and exp(e). */
typedef struct {
  float g[ALPHA_BWD_CHUNK], b[ALPHA_BWD_CHUNK], u[ALPHA_BWD_CHUNK];
  float pb[ALPHA_BWD_CHUNK], pu[ALPHA_BWD_CHUNK], e[ALPHA_BWD_CHUNK];
} alpha_rows;

/* The forward's sanitised, cast proxy (docs/ops.md, fusiongate_alpha) and
 * whether the value passed through (its derivative 1, else 0). */
static inline float sanitised(float v, apx_dtype out_dtype, float *passes) {
  *passes = isfinite(v) ? 1.0f : 0.0f;
  if (isnan(v))
    return 0.0f;
  if (isinf(v))
    return v > 0 ? 1.0f : 0.0f;
  return si_round(out_dtype, v);
}

/* Pass 1, pixels [0, count): the proxies sanitised and e = -|z|. */
static void proxies_portable(const alpha_bwd *c, alpha_rows *r, int64_t count) {
  for (int64_t p = 0; p < count; p++) {
    r->b[p] = sanitised(r->b[p], c->g_dt, &r->pb[p]);
    r->u[p] = sanitised(r->u[p], c->g_dt, &r->pu[p]);
    r->e[p] = -fabsf(c->w_b * r->b[p] + c->w_u * r->u[p] + c->bias);
  }
}

/* Pass 3 from a = exp(-|z|) in r->e: sigmoid'(z) = sigmoid(z)*sigmoid(-z) =
 * a/(1 + a)^2 (a in [0, 1]: no overflow, and no cancellation, which
 * s*(1 - s) would have for large z); t = g*sigmoid'(z); lane sums; the
 * gradients into r->b and r->u. */
static void slopes_portable(const alpha_bwd *c, alpha_rows *r, int64_t count,
                            float sums[3][ALPHA_BWD_LANES]) {
  for (int64_t p = 0; p < count; p++) {
    const float a = r->e[p], d = 1.0f + a;
    const float t = r->g[p] * (a / (d * d));
    const int lane = (int)(p % ALPHA_BWD_LANES);
    sums[0][lane] += t * r->b[p];
    sums[1][lane] += t * r->u[p];
    sums[2][lane] += t;
    r->b[p] = t * c->w_b * r->pb[p];
    r->u[p] = t * c->w_u * r->pu[p];
  }
}

#if SI_HAVE_X86
/* The forward's sanitising on 8 lanes: NaN -> 0, +inf -> 1, -inf -> 0, else
 * cast to dt; *passes = 1 where v is finite. */
SI_TARGET_AVX2 static inline __m256 sanitised8(__m256 v, apx_dtype dt, __m256 *passes) {
  const __m256 one = _mm256_set1_ps(1.0f), inf = _mm256_set1_ps(INFINITY);
  const __m256 abs_v = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256 finite = _mm256_cmp_ps(abs_v, inf, _CMP_LT_OQ);
  const __m256 pos_inf = _mm256_and_ps(_mm256_cmp_ps(v, inf, _CMP_EQ_OQ), one);
  *passes = _mm256_and_ps(finite, one);
  return _mm256_blendv_ps(pos_inf, si8_round(dt, v), finite);
}

SI_TARGET_AVX2 static void proxies_avx2(const alpha_bwd *c, alpha_rows *r, int64_t count) {
  const __m256 wb = _mm256_set1_ps(c->w_b), wu = _mm256_set1_ps(c->w_u);
  const __m256 bias = _mm256_set1_ps(c->bias), sign = _mm256_set1_ps(-0.0f);
  for (int64_t p = 0; p < count; p += 8) {
    __m256 pb, pu;
    const __m256 b = sanitised8(_mm256_loadu_ps(r->b + p), c->g_dt, &pb);
    const __m256 u = sanitised8(_mm256_loadu_ps(r->u + p), c->g_dt, &pu);
    const __m256 z = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(wb, b), _mm256_mul_ps(wu, u)), bias);
    _mm256_storeu_ps(r->b + p, b);
    _mm256_storeu_ps(r->u + p, u);
    _mm256_storeu_ps(r->pb + p, pb);
    _mm256_storeu_ps(r->pu + p, pu);
    _mm256_storeu_ps(r->e + p, _mm256_or_ps(z, sign));
  }
}

/* slopes_portable on 16 pixels an iteration: lanes 0-7 and 8-15 of the
 * sums in two registers each. */
SI_TARGET_AVX2 static void slopes_avx2(const alpha_bwd *c, alpha_rows *r, int64_t count,
                                       float sums[3][ALPHA_BWD_LANES]) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 wb = _mm256_set1_ps(c->w_b), wu = _mm256_set1_ps(c->w_u);
  __m256 acc[3][2];
  for (int j = 0; j < 3; j++)
    for (int h = 0; h < 2; h++)
      acc[j][h] = _mm256_loadu_ps(sums[j] + 8 * h);
  for (int64_t p = 0; p < count; p += ALPHA_BWD_LANES)
    for (int h = 0; h < 2; h++) {
      const int64_t q = p + 8 * h;
      const __m256 a = _mm256_loadu_ps(r->e + q), d = _mm256_add_ps(one, a);
      const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(r->g + q),
                                     _mm256_div_ps(a, _mm256_mul_ps(d, d)));
      const __m256 b = _mm256_loadu_ps(r->b + q), u = _mm256_loadu_ps(r->u + q);
      acc[0][h] = _mm256_add_ps(acc[0][h], _mm256_mul_ps(t, b));
      acc[1][h] = _mm256_add_ps(acc[1][h], _mm256_mul_ps(t, u));
      acc[2][h] = _mm256_add_ps(acc[2][h], t);
      _mm256_storeu_ps(r->b + q, _mm256_mul_ps(_mm256_mul_ps(t, wb), _mm256_loadu_ps(r->pb + q)));
      _mm256_storeu_ps(r->u + q, _mm256_mul_ps(_mm256_mul_ps(t, wu), _mm256_loadu_ps(r->pu + q)));
    }
  for (int j = 0; j < 3; j++)
    for (int h = 0; h < 2; h++)
      _mm256_storeu_ps(sums[j] + 8 * h, acc[j][h]);
}
#endif

#if ALPHA_BWD_MVEC
SI_TARGET_AVX2 static void exp_avx2(float *e, int64_t count) {
  for (int64_t p = 0; p < count; p += 8)
    _mm256_storeu_ps(e + p, _ZGVdN8v_expf(_mm256_loadu_ps(e + p)));
}

__attribute__((target("avx512f"))) static void exp_avx512(float *e, int64_t count) {
  for (int64_t p = 0; p < count; p += 16)
    _mm512_storeu_ps(e + p, _ZGVeN16v_expf(_mm512_loadu_ps(e + p)));
}
#endif

/* Pass 2: e = exp(e) on [0, count), count a multiple of ALPHA_BWD_LANES. */
static void exp_row(cpu_simd_level level, float *e, int64_t count) {
#if ALPHA_BWD_MVEC
  if (level >= CPU_SIMD_AVX512) {
    exp_avx512(e, count);
    return;
  }
  if (level >= CPU_SIMD_AVX2) {
    exp_avx2(e, count);
    return;
  }
#endif
  (void)level;
  for (int64_t p = 0; p < count; p++)
    e[p] = expf(e[p]);
}

/* Block `block` of the call: its gradients and its three sums. */
static void alpha_block(const alpha_bwd *c, int64_t block) {
  alpha_rows r;
  float sums[3][ALPHA_BWD_LANES] = {{0.0f}};
  const int64_t end = (block + 1) * ALPHA_BWD_BLOCK < c->n ? (block + 1) * ALPHA_BWD_BLOCK : c->n;
  const si_isa isa = c->level >= CPU_SIMD_AVX2 ? SI_ISA_AVX2 : SI_ISA_PORTABLE;
  for (int64_t i = block * ALPHA_BWD_BLOCK; i < end; i += ALPHA_BWD_CHUNK) {
    const int64_t count = end - i < ALPHA_BWD_CHUNK ? end - i : ALPHA_BWD_CHUNK;
    /* the rows padded with zeros to whole lanes: a padded pixel's t is +0,
     * which leaves a sum (never -0: it starts at +0) unchanged */
    const int64_t padded = (count + ALPHA_BWD_LANES - 1) / ALPHA_BWD_LANES * ALPHA_BWD_LANES;
    si_row_to_f32(isa, c->g_dt, c->grad_out + (size_t)i * c->g_elem, r.g, count);
    si_row_to_f32(isa, c->in_dt, c->boundary + (size_t)i * c->in_elem, r.b, count);
    si_row_to_f32(isa, c->in_dt, c->uncertainty + (size_t)i * c->in_elem, r.u, count);
    for (int64_t p = count; p < padded; p++)
      r.g[p] = r.b[p] = r.u[p] = 0.0f;
#if SI_HAVE_X86
    if (isa == SI_ISA_AVX2) {
      proxies_avx2(c, &r, padded);
      exp_row(c->level, r.e, padded);
      slopes_avx2(c, &r, padded, sums);
    } else
#endif
    {
      proxies_portable(c, &r, padded);
      exp_row(c->level, r.e, padded);
      slopes_portable(c, &r, padded, sums);
    }
    if (c->grad_b)
      si_row_from_f32(isa, c->in_dt, r.b, c->grad_b + (size_t)i * c->in_elem, count);
    if (c->grad_u)
      si_row_from_f32(isa, c->in_dt, r.u, c->grad_u + (size_t)i * c->in_elem, count);
  }
  if (c->partial)
    for (int j = 0; j < 3; j++) {
      float total = 0.0f;
      for (int lane = 0; lane < ALPHA_BWD_LANES; lane++)
        total += sums[j][lane];
      c->partial[block * 3 + j] = total;
    }
}

apx_status cpu_fusiongate_alpha_backward(void *state,
                                         const apx_fusiongate_alpha_backward_args *args,
                                         const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const int64_t n = apx_backend_numel(args->grad_out);
  const int64_t blocks = (n + ALPHA_BWD_BLOCK - 1) / ALPHA_BWD_BLOCK;
  const int sums = args->grad_boundary_log_weight || args->grad_uncertainty_log_weight ||
                   args->grad_bias;
  /* [blocks][3]: sum of t*b, t*u, t per block */
  float *partial = NULL;
  if (sums && blocks > 0) {
    partial = malloc((size_t)blocks * 3 * sizeof(float));
    if (!partial)
      return st->svc->set_error(APX_ERR_NO_MEMORY,
                                "fusiongate_alpha_backward: cannot allocate %zu bytes of scratch",
                                (size_t)blocks * 3 * sizeof(float));
  }
  const apx_dtype in_dt = args->boundary->dtype, g_dt = args->grad_out->dtype;
  const alpha_bwd c = {
      .in_dt = in_dt,
      .g_dt = g_dt,
      .level = cpu_isa_level(),
      .n = n,
      .w_b = apx_softplusf((float)args->boundary_log_weight),
      .w_u = apx_softplusf((float)args->uncertainty_log_weight),
      .bias = (float)args->bias,
      .grad_out = args->grad_out->data,
      .boundary = args->boundary->data,
      .uncertainty = args->uncertainty->data,
      .grad_b = args->grad_boundary ? args->grad_boundary->data : NULL,
      .grad_u = args->grad_uncertainty ? args->grad_uncertainty->data : NULL,
      .in_elem = apx_backend_dtype_size(in_dt),
      .g_elem = apx_backend_dtype_size(g_dt),
      .partial = partial,
  };
  CPU_FOR_ITEMS(st, n, 1, block, blocks, alpha_block(&c, block));

  if (sums) {
    float total[3] = {0.0f, 0.0f, 0.0f};
    for (int64_t block = 0; block < blocks; block++)
      for (int j = 0; j < 3; j++)
        total[j] += partial[block * 3 + j];
    const apx_tensor *scalar_grads[3] = {args->grad_boundary_log_weight,
                                         args->grad_uncertainty_log_weight, args->grad_bias};
    const float chain[3] = {apx_softplus_gradf((float)args->boundary_log_weight),
                            apx_softplus_gradf((float)args->uncertainty_log_weight), 1.0f};
    for (int j = 0; j < 3; j++)
      if (scalar_grads[j])
        si_store_f32(scalar_grads[j]->dtype, scalar_grads[j]->data, 0, total[j] * chain[j]);
  }
  free(partial);
  return APX_OK;
}
