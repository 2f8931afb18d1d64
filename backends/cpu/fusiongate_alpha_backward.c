/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: fusiongate_alpha_backward (docs/ops.md, fusiongate_alpha_backward).
 *
 * Per pixel, in fp32: the proxies sanitised and cast to grad_out's dtype as
 * the forward does (b, u), z = w_b*b + w_u*u + bias,
 * t = g*sigmoid'(z) (sigmoid_slope); grad_boundary = t*w_b and grad_uncertainty = t*w_u where
 * the proxy was finite (0 where it was sanitised). The scalars' gradients
 * are sums of t*b, t*u and t over fixed blocks of pixels (each block in
 * pixel order), then over the blocks in order, times softplus' of the log
 * weights: the same bits for any thread count. */
#include <math.h>

#include "scan_index_simd.h"

/* Pixels per block of the scalar sums (fixed: it sets the order of the
 * sums) and per pass through the fp32 rows on the stack. */
#define ALPHA_BWD_BLOCK 4096
#define ALPHA_BWD_CHUNK 512

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

/* sigmoid'(z) = sigmoid(z)*sigmoid(-z) = a/(1 + a)^2 with a = exp(-|z|) in
 * [0, 1]: one exponential, no overflow, and no cancellation (s*(1 - s)
 * would cancel for large z) */
static inline float sigmoid_slope(float z) {
  const float a = expf(-fabsf(z)), d = 1.0f + a;
  return a / (d * d);
}

apx_status cpu_fusiongate_alpha_backward(void *state,
                                         const apx_fusiongate_alpha_backward_args *args,
                                         const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const apx_dtype in_dt = args->boundary->dtype, g_dt = args->grad_out->dtype;
  const int64_t n = apx_backend_numel(args->grad_out);
  const si_isa isa = si_isa_level();
  const float w_b = apx_softplusf((float)args->boundary_log_weight);
  const float w_u = apx_softplusf((float)args->uncertainty_log_weight);
  const float bias = (float)args->bias;
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
  const char *grad_out = args->grad_out->data;
  const char *boundary = args->boundary->data, *uncertainty = args->uncertainty->data;
  char *grad_b = args->grad_boundary ? args->grad_boundary->data : NULL;
  char *grad_u = args->grad_uncertainty ? args->grad_uncertainty->data : NULL;
  const size_t in_elem = apx_backend_dtype_size(in_dt), g_elem = apx_backend_dtype_size(g_dt);

  CPU_OMP_FOR(st->threads, n)
  for (int64_t block = 0; block < blocks; block++) {
    float g[ALPHA_BWD_CHUNK], b[ALPHA_BWD_CHUNK], u[ALPHA_BWD_CHUNK];
    float sum_tb = 0.0f, sum_tu = 0.0f, sum_t = 0.0f;
    const int64_t end = (block + 1) * ALPHA_BWD_BLOCK < n ? (block + 1) * ALPHA_BWD_BLOCK : n;
    for (int64_t i = block * ALPHA_BWD_BLOCK; i < end; i += ALPHA_BWD_CHUNK) {
      const int64_t count = end - i < ALPHA_BWD_CHUNK ? end - i : ALPHA_BWD_CHUNK;
      si_row_to_f32(isa, g_dt, grad_out + (size_t)i * g_elem, g, count);
      si_row_to_f32(isa, in_dt, boundary + (size_t)i * in_elem, b, count);
      si_row_to_f32(isa, in_dt, uncertainty + (size_t)i * in_elem, u, count);
      for (int64_t p = 0; p < count; p++) {
        float b_passes, u_passes;
        float bv = sanitised(b[p], g_dt, &b_passes), uv = sanitised(u[p], g_dt, &u_passes);
        float z = w_b * bv + w_u * uv + bias;
        float t = g[p] * sigmoid_slope(z);
        sum_tb += t * bv;
        sum_tu += t * uv;
        sum_t += t;
        b[p] = t * w_b * b_passes;
        u[p] = t * w_u * u_passes;
      }
      if (grad_b)
        si_row_from_f32(isa, in_dt, b, grad_b + (size_t)i * in_elem, count);
      if (grad_u)
        si_row_from_f32(isa, in_dt, u, grad_u + (size_t)i * in_elem, count);
    }
    if (partial) {
      partial[block * 3 + 0] = sum_tb;
      partial[block * 3 + 1] = sum_tu;
      partial[block * 3 + 2] = sum_t;
    }
  }

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
