/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_alpha on CUDA (docs/ops.md, fusiongate_alpha). Element-wise;
 * fp32 math, one rounding on store (docs/ops.md, Rounding and parity). The
 * grid covers every element (no block-size/grid mismatch: docs/ops.md,
 * Every output written). */
#include "cuda_backend.h"

#include <math.h>

/* Proxy sanitising in the proxy's own dtype: NaN -> 0, +inf -> 1,
 * -inf -> 0 (all exact), then the cast to the output dtype. */
template <typename P, typename O>
static __device__ __forceinline__ float prepare_proxy(const P *p, int64_t i) {
  float v = cuda_dt<P>::load(p + i);
  if (isnan(v)) v = 0.0f;
  else if (isinf(v)) v = v > 0.0f ? 1.0f : 0.0f;
  return cuda_dt<O>::to_f(cuda_dt<O>::from_f(v));
}

template <typename P, typename O>
__global__ void fusiongate_alpha_kernel(const P *__restrict__ boundary,
                                        const P *__restrict__ uncertainty, O *__restrict__ out,
                                        int64_t n, float w_b, float w_u, float bias) {
  CUDA_FOR(i, n) {
    float b = prepare_proxy<P, O>(boundary, i);
    float u = prepare_proxy<P, O>(uncertainty, i);
    float z = w_b * b + w_u * u + bias;
    out[i] = cuda_dt<O>::from_f(1.0f / (1.0f + expf(-z)));
  }
}

/* w = PyTorch softplus (beta 1, threshold 20) evaluated in fp32, as the
 * reference does on an fp32 tensor (apx_softplusf, include/apexx/op_rules.h). */
template <typename P, typename O>
static void launch_alpha(const apx_fusiongate_alpha_args *a, int64_t n, cudaStream_t s) {
  cuda_geom g = cuda_geom_1d(n, 256);
  float w_b = apx_softplusf((float)a->boundary_log_weight);
  float w_u = apx_softplusf((float)a->uncertainty_log_weight);
  fusiongate_alpha_kernel<P, O><<<g.blocks, g.threads, 0, s>>>(
      (const P *)a->boundary->data, (const P *)a->uncertainty->data, (O *)a->out->data, n, w_b,
      w_u, (float)a->bias);
}

template <typename P>
static void launch_alpha_out(const apx_fusiongate_alpha_args *a, int64_t n, cudaStream_t s) {
  switch (a->out->dtype) {
  case APX_DTYPE_F16: launch_alpha<P, __half>(a, n, s); break;
  case APX_DTYPE_BF16: launch_alpha<P, __nv_bfloat16>(a, n, s); break;
  default: launch_alpha<P, float>(a, n, s); break;
  }
}

apx_status cuda_fusiongate_alpha(void *state, const apx_fusiongate_alpha_args *a,
                                 const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, a->boundary->device_index);
  if (s != APX_OK) return s;
  int64_t n = apx_backend_numel(a->out);
  if (n == 0) return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  switch (a->boundary->dtype) {
  case APX_DTYPE_F16: launch_alpha_out<__half>(a, n, stream); break;
  case APX_DTYPE_BF16: launch_alpha_out<__nv_bfloat16>(a, n, stream); break;
  default: launch_alpha_out<float>(a, n, stream); break;
  }
  CUDA_LAUNCHED(st, "fusiongate_alpha: launch");
  return APX_OK;
}
