/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_fuse on CUDA (docs/ops.md, fusiongate_fuse). Element-wise;
 * fp32 math, one rounding on store (docs/ops.md, Rounding and parity). The
 * grid covers every element (no block-size/grid mismatch: docs/ops.md,
 * Every output written). */
#include "cuda_backend.h"

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
  if (apx_backend_numel(a->out) == 0) return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  switch (a->base->dtype) {
  case APX_DTYPE_F16: launch_fuse<__half>(a, stream); break;
  case APX_DTYPE_BF16: launch_fuse<__nv_bfloat16>(a, stream); break;
  default: launch_fuse<float>(a, stream); break;
  }
  CUDA_LAUNCHED(st, "fusiongate_fuse: launch");
  return APX_OK;
}
