/* SPDX-License-Identifier: Apache-2.0 */
/* What the kernels of one FF level share (ff_refine.cu): rounding to
 * the frame's dtype, sums over a block, and the fusion gate. */
#ifndef APX_CUDA_FF_REFINE_COMMON_CUH
#define APX_CUDA_FF_REFINE_COMMON_CUH

#include "ff_refine.h"

template <typename T> static __device__ __forceinline__ float rnd(float v) {
  return cuda_dt<T>::to_f(cuda_dt<T>::from_f(v));
}

static __device__ __forceinline__ float ff_sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. */
static __device__ float ff_block_sum(float v, float *sh32) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh32[w] = v;
  __syncthreads();
  float t = 0.0f;
  for (int i = 0; i < nw; i++) t += sh32[i];
  return t;
}

/* ---- fusion gate (5.B) ----------------------------------------------------- */

template <typename T>
static __device__ __forceinline__ float ff_proxy(const void *p, int dt, int64_t i) {
  if (!p) return 1.0f;
  float v = rnd<T>(cuda_load_any(p, dt, i));
  if (v != v) return 0.0f;
  if (isinf(v)) return v > 0 ? 1.0f : 0.0f;
  return v;
}

template <typename T>
static __device__ __forceinline__ float ff_alpha(float bp, float up, float wb, float wu,
                                                 float gb) {
  float z = __fadd_rn(__fadd_rn(__fmul_rn(wb, bp), __fmul_rn(wu, up)), gb);
  return rnd<T>(ff_sigmoid(z));
}

/* heavy = X + alpha*(U - X), fp32, rounded once (decision 3) */
template <typename T>
static __device__ __forceinline__ float ff_fuse(float x, float u, float a) {
  return rnd<T>(__fadd_rn(x, __fmul_rn(a, __fsub_rn(u, x))));
}

/* Step 7 at a pixel of a selected tile: override (U = r) or blend
 * (docs/ff_infer.md, Options; a level's tiles are distinct cells, so each
 * pixel is blended once) */
template <typename T>
static __device__ __forceinline__ float ff_unpack(const ff_store_args &a, float x, float r) {
  if (!a.blend) return r;
  return rnd<T>(__fadd_rn(rnd<T>(__fmul_rn(a.blend_om, x)), rnd<T>(__fmul_rn(a.blend_a, r))));
}

#endif /* APX_CUDA_FF_REFINE_COMMON_CUH */
