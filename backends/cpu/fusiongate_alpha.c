/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: fusiongate_alpha (docs/ops.md, fusiongate_alpha).
 *
 * Sanitise each proxy in its own dtype (NaN->0, +inf->1, -inf->0), cast to
 * the out dtype, then with w = softplus evaluated in fp32:
 *   logits = fl(fl(fl(w_b*b) + fl(w_u*u)) + bias),  alpha = fl(sigmoid(logits))
 * every fl rounding to the out dtype (rounding model R), sigmoid rounded
 * to fp32. */
#include <math.h>

#include "tile_simd.h"

/* Pixels per work item, and per pass through the fp32 staging buffers. */
#define ALPHA_BLOCK 4096
#define ALPHA_CHUNK 256

/* docs/ops.md, fusiongate_alpha (sanitising), on the proxy values widened to fp32 (exact):
 * 0 and 1 are exact in every float dtype, so this is sanitising in the
 * proxy's own dtype. */
static void sanitise(float *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(v[i]))
      v[i] = 0.0f;
    else if (isinf(v[i]))
      v[i] = v[i] > 0 ? 1.0f : 0.0f;
  }
}

/* One call's tensors and constants. */
typedef struct {
  const char *boundary, *uncertainty;
  char *out;
  int64_t n;
  float w_b, w_u, bias;
  const cpu_tile_kernels *in_kernels, *out_kernels;
  size_t in_elem, out_elem;
} alpha_call;

/* Pixels [block * ALPHA_BLOCK, +ALPHA_BLOCK) of the call. */
static void alpha_block(const alpha_call *c, int64_t block) {
  float b[ALPHA_CHUNK], u[ALPHA_CHUNK];
  const int64_t end = (block + 1) * ALPHA_BLOCK < c->n ? (block + 1) * ALPHA_BLOCK : c->n;
  for (int64_t i = block * ALPHA_BLOCK; i < end; i += ALPHA_CHUNK) {
    const size_t count = (size_t)(end - i < ALPHA_CHUNK ? end - i : ALPHA_CHUNK);
    c->in_kernels->to_f32(b, c->boundary + (size_t)i * c->in_elem, count);
    c->in_kernels->to_f32(u, c->uncertainty + (size_t)i * c->in_elem, count);
    sanitise(b, count);
    sanitise(u, count);
    c->out_kernels->alpha(c->out + (size_t)i * c->out_elem, b, u, count, c->w_b, c->w_u, c->bias);
  }
}

apx_status cpu_fusiongate_alpha(void *state, const apx_fusiongate_alpha_args *args,
                                const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const char *boundary = args->boundary->data, *uncertainty = args->uncertainty->data;
  char *out = args->out->data;
  const int64_t n = apx_backend_numel(args->out);
  if (n == 0)
    return APX_OK;
  /* softplus (PyTorch's, beta 1, threshold 20: apx_softplusf) as an fp32
   * tensor, then a host double that enters the fp32
   * math as fp32 (the same value); bias rounds from double to fp32. */
  const float w_b = apx_softplusf((float)args->boundary_log_weight);
  const float w_u = apx_softplusf((float)args->uncertainty_log_weight);
  const float bias = (float)args->bias;
  const cpu_simd_level level = cpu_isa_level();
  const cpu_tile_kernels *in_kernels = cpu_tile_kernels_for(args->boundary->dtype, level);
  const cpu_tile_kernels *out_kernels = cpu_tile_kernels_for(args->out->dtype, level);
  const size_t in_elem = apx_backend_dtype_size(args->boundary->dtype);
  const size_t out_elem = apx_backend_dtype_size(args->out->dtype);
  const int64_t blocks = (n + ALPHA_BLOCK - 1) / ALPHA_BLOCK;

  const alpha_call c = {boundary, uncertainty, out,         n,       w_b,     w_u,
                        bias,     in_kernels,  out_kernels, in_elem, out_elem};
  CPU_FOR_ITEMS(st, n, 1, block, blocks, alpha_block(&c, block));
  return APX_OK;
}
