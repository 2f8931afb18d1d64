/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_alpha_backward on CUDA (docs/ops.md, fusiongate_alpha_backward).
 * The proxies' gradients element-wise; the scalars' sums in two passes with
 * one order (no atomics): a block per 4096-pixel chunk (each thread its
 * pixels in order, then a fixed tree over the block's threads) writes the
 * chunk's three sums, and one thread adds the chunks in order. fp32 math,
 * one rounding per stored value; the same bits run to run. */
#include "cuda_backend.h"

#include <math.h>

#define ALPHA_BWD_CHUNK 4096
#define ALPHA_BWD_THREADS 256

/* The forward's sanitised proxy cast to grad_out's dtype; *passes = 1
 * where the value was finite (its derivative), else 0. */
static __device__ __forceinline__ float sanitised(float v, int g_dt, float *passes) {
  *passes = isfinite(v) ? 1.0f : 0.0f;
  if (isnan(v)) return 0.0f;
  if (isinf(v)) return v > 0.0f ? 1.0f : 0.0f;
  return cuda_round_any(v, g_dt);
}

static __device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct alpha_bwd_args {
  const void *grad_out, *boundary, *uncertainty;
  void *grad_boundary, *grad_uncertainty;
  int g_dt, in_dt;
  int64_t n;
  float w_b, w_u, bias;
  float *partial; /* [chunks][3], NULL: no scalar asked for */
};

__global__ void __launch_bounds__(ALPHA_BWD_THREADS)
    fusiongate_alpha_backward_kernel(alpha_bwd_args a) {
  __shared__ float sums[3][ALPHA_BWD_THREADS];
  const int64_t begin = (int64_t)blockIdx.x * ALPHA_BWD_CHUNK;
  const int64_t end = begin + ALPHA_BWD_CHUNK < a.n ? begin + ALPHA_BWD_CHUNK : a.n;
  float tb = 0.0f, tu = 0.0f, tt = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += ALPHA_BWD_THREADS) {
    float pb, pu;
    float b = sanitised(cuda_load_any(a.boundary, a.in_dt, i), a.g_dt, &pb);
    float u = sanitised(cuda_load_any(a.uncertainty, a.in_dt, i), a.g_dt, &pu);
    float z = a.w_b * b + a.w_u * u + a.bias;
    /* s*(1 - s) as sigmoid(z)*sigmoid(-z): 1 - s would cancel for large z */
    float t = cuda_load_any(a.grad_out, a.g_dt, i) * (sigmoid(z) * sigmoid(-z));
    tb += t * b;
    tu += t * u;
    tt += t;
    if (a.grad_boundary) cuda_store_any(a.grad_boundary, a.in_dt, i, t * a.w_b * pb);
    if (a.grad_uncertainty) cuda_store_any(a.grad_uncertainty, a.in_dt, i, t * a.w_u * pu);
  }
  if (!a.partial) return;
  sums[0][threadIdx.x] = tb;
  sums[1][threadIdx.x] = tu;
  sums[2][threadIdx.x] = tt;
  __syncthreads();
  for (int half = ALPHA_BWD_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      for (int j = 0; j < 3; j++) sums[j][threadIdx.x] += sums[j][threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int j = 0; j < 3; j++) a.partial[blockIdx.x * 3 + j] = sums[j][0];
}

/* One thread: the chunks' sums in order, times the chain factors. */
__global__ void fusiongate_alpha_backward_scalars(const float *partial, int64_t chunks,
                                                  void *g_blw, int blw_dt, void *g_ulw,
                                                  int ulw_dt, void *g_bias, int bias_dt,
                                                  float chain_b, float chain_u) {
  float total[3] = {0.0f, 0.0f, 0.0f};
  for (int64_t c = 0; c < chunks; c++)
    for (int j = 0; j < 3; j++) total[j] += partial[c * 3 + j];
  if (g_blw) cuda_store_any(g_blw, blw_dt, 0, total[0] * chain_b);
  if (g_ulw) cuda_store_any(g_ulw, ulw_dt, 0, total[1] * chain_u);
  if (g_bias) cuda_store_any(g_bias, bias_dt, 0, total[2]);
}

apx_status cuda_fusiongate_alpha_backward(void *state, const apx_fusiongate_alpha_backward_args *a,
                                          const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, a->boundary->device_index);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  const int64_t n = apx_backend_numel(a->grad_out);
  const int64_t chunks = (n + ALPHA_BWD_CHUNK - 1) / ALPHA_BWD_CHUNK;
  const int sums = a->grad_boundary_log_weight || a->grad_uncertainty_log_weight || a->grad_bias;
  if (n == 0 && !sums) return APX_OK;
  cuda_workspace ws = {nullptr, stream};
  if (sums && chunks > 0) {
    s = cuda_ws_alloc(st, stream, cuda_align_up((size_t)chunks * 3 * sizeof(float)), &ws,
                      "fusiongate_alpha_backward: workspace");
    if (s != APX_OK) return s;
  }
  alpha_bwd_args k;
  k.grad_out = a->grad_out->data;
  k.boundary = a->boundary->data;
  k.uncertainty = a->uncertainty->data;
  k.grad_boundary = a->grad_boundary ? a->grad_boundary->data : nullptr;
  k.grad_uncertainty = a->grad_uncertainty ? a->grad_uncertainty->data : nullptr;
  k.g_dt = (int)a->grad_out->dtype;
  k.in_dt = (int)a->boundary->dtype;
  k.n = n;
  /* softplus and its derivative evaluated in fp32 (include/apexx/op_rules.h) */
  k.w_b = apx_softplusf((float)a->boundary_log_weight);
  k.w_u = apx_softplusf((float)a->uncertainty_log_weight);
  k.bias = (float)a->bias;
  k.partial = (float *)ws.ptr;
  if (chunks > 0)
    fusiongate_alpha_backward_kernel<<<(unsigned)chunks, ALPHA_BWD_THREADS, 0, stream>>>(k);
  if (sums) {
    const apx_tensor *gb = a->grad_boundary_log_weight, *gu = a->grad_uncertainty_log_weight,
                     *gbias = a->grad_bias;
    fusiongate_alpha_backward_scalars<<<1, 1, 0, stream>>>(
        k.partial, chunks, gb ? gb->data : nullptr, gb ? (int)gb->dtype : 0,
        gu ? gu->data : nullptr, gu ? (int)gu->dtype : 0, gbias ? gbias->data : nullptr,
        gbias ? (int)gbias->dtype : 0, apx_softplus_gradf((float)a->boundary_log_weight),
        apx_softplus_gradf((float)a->uncertainty_log_weight));
  }
  cudaError_t err = cudaGetLastError();
  if (ws.ptr) cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "fusiongate_alpha_backward: launch");
  return APX_OK;
}
