/* fusiongate_alpha and fusiongate_fuse on CUDA (docs/ops.md, fusiongate_alpha and fusiongate_fuse).
 * Element-wise; fp32 math, one rounding on store (docs/ops.md, Rounding and parity). The grid
 * covers every element (no block-size/grid mismatch:
 * docs/ops.md, Every output written). */
#include "cuda_backend.h"

#include <math.h>

/* ---- alpha -------------------------------------------------------------- */

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

/* PyTorch softplus (beta 1, threshold 20), evaluated in fp32 as the
 * reference does on an fp32 tensor. */
static float softplus_f32(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

template <typename P, typename O>
static void launch_alpha(const apx_fusiongate_alpha_args *a, int64_t n, cudaStream_t s) {
  cuda_geom g = cuda_geom_1d(n, 256);
  float w_b = softplus_f32((float)a->boundary_log_weight);
  float w_u = softplus_f32((float)a->uncertainty_log_weight);
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
  int64_t n = cuda_numel(a->out);
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

/* ---- fuse --------------------------------------------------------------- */

/* out = base + alpha*(detail - base), alpha [B,1,H,W] broadcast over C.
 * VEC elements per thread along H*W (16-byte accesses when HW allows);
 * VEC = 1 otherwise. */
template <typename T, int VEC>
__global__ void fusiongate_fuse_kernel(const T *base, const T *__restrict__ detail,
                                       const T *__restrict__ alpha, T *out, int64_t groups,
                                       int64_t C, int64_t hw_groups) {
  struct alignas(sizeof(T) * VEC) pack { T v[VEC]; };
  CUDA_FOR(g, groups) {
    int64_t p = g % hw_groups; /* group within the H*W plane */
    int64_t b = g / (hw_groups * C);
    pack pb = ((const pack *)base)[g];
    pack pd = ((const pack *)detail)[g];
    pack pa = ((const pack *)alpha)[b * hw_groups + p];
    pack po;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      float vb = cuda_dt<T>::to_f(pb.v[j]);
      float vd = cuda_dt<T>::to_f(pd.v[j]);
      float va = cuda_dt<T>::to_f(pa.v[j]);
      po.v[j] = cuda_dt<T>::from_f(vb + va * (vd - vb));
    }
    ((pack *)out)[g] = po;
  }
}

template <typename T>
static void launch_fuse(const apx_fusiongate_fuse_args *a, cudaStream_t s) {
  int64_t B = a->base->shape[0], C = a->base->shape[1];
  int64_t HW = a->base->shape[2] * a->base->shape[3];
  const int vec = (int)(16 / sizeof(T));
  int wide = HW % vec == 0;
  const void *ptrs[4] = {a->base->data, a->detail->data, a->alpha->data, a->out->data};
  for (int i = 0; i < 4; i++) wide = wide && (uintptr_t)ptrs[i] % 16 == 0;
  if (wide) {
    int64_t groups = B * C * HW / vec;
    cuda_geom g = cuda_geom_1d(groups, 256);
    if (sizeof(T) == 4)
      fusiongate_fuse_kernel<T, 4><<<g.blocks, g.threads, 0, s>>>(
          (const T *)ptrs[0], (const T *)ptrs[1], (const T *)ptrs[2], (T *)ptrs[3], groups, C,
          HW / 4);
    else
      fusiongate_fuse_kernel<T, 8><<<g.blocks, g.threads, 0, s>>>(
          (const T *)ptrs[0], (const T *)ptrs[1], (const T *)ptrs[2], (T *)ptrs[3], groups, C,
          HW / 8);
  } else {
    int64_t groups = B * C * HW;
    cuda_geom g = cuda_geom_1d(groups, 256);
    fusiongate_fuse_kernel<T, 1><<<g.blocks, g.threads, 0, s>>>(
        (const T *)ptrs[0], (const T *)ptrs[1], (const T *)ptrs[2], (T *)ptrs[3], groups, C, HW);
  }
}

apx_status cuda_fusiongate_fuse(void *state, const apx_fusiongate_fuse_args *a,
                                const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, a->base->device_index);
  if (s != APX_OK) return s;
  if (cuda_numel(a->out) == 0) return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  switch (a->base->dtype) {
  case APX_DTYPE_F16: launch_fuse<__half>(a, stream); break;
  case APX_DTYPE_BF16: launch_fuse<__nv_bfloat16>(a, stream); break;
  default: launch_fuse<float>(a, stream); break;
  }
  CUDA_LAUNCHED(st, "fusiongate_fuse: launch");
  return APX_OK;
}
