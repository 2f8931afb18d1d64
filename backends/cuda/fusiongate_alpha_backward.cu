/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_alpha_backward on CUDA (docs/ops.md, fusiongate_alpha_backward).
 * The proxies' gradients element-wise; the scalars' sums with one order
 * (no atomics) in one launch: a block per chunk of pixels (each thread
 * its pixels in order, then a fixed tree over the block's threads) leaves
 * the chunk's three sums, and the block that finishes last adds the
 * chunks' sums in chunk order (a strided share a thread, then a fixed
 * tree) and writes the three gradients (cuda_ticket.cuh). A chunk is a
 * pixel a thread for small maps (blocks enough to fill the device), 16 a
 * thread beyond ALPHA_BWD_SMALL pixels. fp32 math, one rounding per stored
 * value; the same bits run to run. */
#include "cuda_backend.h"

#include <math.h>

#include "cuda_ticket.cuh"

#define ALPHA_BWD_THREADS 256
/* pixels a thread beyond ALPHA_BWD_SMALL pixels (a chunk of 4096) */
#define ALPHA_BWD_PER_THREAD 16
/* up to here a pixel a thread (at most 512 chunks: their sums fit a ticket) */
#define ALPHA_BWD_SMALL (1 << 17)

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
  int64_t n, chunk; /* pixels, pixels a block */
  float w_b, w_u, bias;
  int sums;         /* a scalar's gradient asked for */
  float *partial;   /* [chunks][3] in workspace; NULL: the ticket's own */
  unsigned ticket;
  void *g_blw, *g_ulw, *g_bias; /* the scalars' gradients (NULL: not asked) */
  int blw_dt, ulw_dt, bias_dt;
  float chain_b, chain_u; /* softplus' derivatives at the log weights */
};

__global__ void __launch_bounds__(ALPHA_BWD_THREADS)
    fusiongate_alpha_backward_kernel(alpha_bwd_args a) {
  const int64_t begin = (int64_t)blockIdx.x * a.chunk;
  const int64_t end = begin + a.chunk < a.n ? begin + a.chunk : a.n;
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
  if (!a.sums) return; /* uniform over the grid */
  float *partial = cuda_ticket_partials(a.ticket, a.partial);
  tb = cuda_block_sum(tb);
  tu = cuda_block_sum(tu);
  tt = cuda_block_sum(tt);
  if (threadIdx.x == 0) {
    partial[blockIdx.x * 3 + 0] = tb;
    partial[blockIdx.x * 3 + 1] = tu;
    partial[blockIdx.x * 3 + 2] = tt;
  }
  if (!cuda_ticket_last_block(a.ticket)) return;
  tb = cuda_ticket_sum(partial + 0, gridDim.x, 3);
  tu = cuda_ticket_sum(partial + 1, gridDim.x, 3);
  tt = cuda_ticket_sum(partial + 2, gridDim.x, 3);
  if (threadIdx.x != 0) return;
  if (a.g_blw) cuda_store_any(a.g_blw, a.blw_dt, 0, tb * a.chain_b);
  if (a.g_ulw) cuda_store_any(a.g_ulw, a.ulw_dt, 0, tu * a.chain_u);
  if (a.g_bias) cuda_store_any(a.g_bias, a.bias_dt, 0, tt);
}

apx_status cuda_fusiongate_alpha_backward(void *state, const apx_fusiongate_alpha_backward_args *a,
                                          const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, a->boundary->device_index);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  const int64_t n = apx_backend_numel(a->grad_out);
  const int64_t chunk =
      ALPHA_BWD_THREADS * (n <= ALPHA_BWD_SMALL ? (int64_t)1 : (int64_t)ALPHA_BWD_PER_THREAD);
  const int64_t chunks = (n + chunk - 1) / chunk;
  const apx_tensor *gb = a->grad_boundary_log_weight, *gu = a->grad_uncertainty_log_weight,
                   *gbias = a->grad_bias;
  const int sums = gb || gu || gbias;
  if (n == 0 && !sums) return APX_OK;
  /* one block even for no pixels: the sums' gradients are then zeros */
  const int64_t blocks = chunks > 0 ? chunks : 1;
  if (blocks > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "fusiongate_alpha_backward: [%lld] pixels exceed the grid",
                              (long long)n);
  cuda_workspace ws = {nullptr, stream};
  if (sums && blocks * 3 > CUDA_TICKET_PARTIALS) {
    s = cuda_ws_alloc(st, stream, cuda_align_up((size_t)blocks * 3 * sizeof(float)), &ws,
                      "fusiongate_alpha_backward: workspace");
    if (s != APX_OK) return s;
  }
  alpha_bwd_args k;
  memset(&k, 0, sizeof k);
  k.grad_out = a->grad_out->data;
  k.boundary = a->boundary->data;
  k.uncertainty = a->uncertainty->data;
  k.grad_boundary = a->grad_boundary ? a->grad_boundary->data : nullptr;
  k.grad_uncertainty = a->grad_uncertainty ? a->grad_uncertainty->data : nullptr;
  k.g_dt = (int)a->grad_out->dtype;
  k.in_dt = (int)a->boundary->dtype;
  k.n = n;
  k.chunk = chunk;
  /* softplus and its derivative evaluated in fp32 (include/apexx/op_rules.h) */
  k.w_b = apx_softplusf((float)a->boundary_log_weight);
  k.w_u = apx_softplusf((float)a->uncertainty_log_weight);
  k.bias = (float)a->bias;
  k.sums = sums;
  k.partial = (float *)ws.ptr;
  k.ticket = sums ? cuda_ticket_take() : 0;
  k.g_blw = gb ? gb->data : nullptr;
  k.blw_dt = gb ? (int)gb->dtype : 0;
  k.g_ulw = gu ? gu->data : nullptr;
  k.ulw_dt = gu ? (int)gu->dtype : 0;
  k.g_bias = gbias ? gbias->data : nullptr;
  k.bias_dt = gbias ? (int)gbias->dtype : 0;
  k.chain_b = apx_softplus_gradf((float)a->boundary_log_weight);
  k.chain_u = apx_softplus_gradf((float)a->uncertainty_log_weight);
  fusiongate_alpha_backward_kernel<<<(unsigned)blocks, ALPHA_BWD_THREADS, 0, stream>>>(k);
  cudaError_t err = cudaGetLastError();
  if (ws.ptr) cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "fusiongate_alpha_backward: launch");
  return APX_OK;
}
