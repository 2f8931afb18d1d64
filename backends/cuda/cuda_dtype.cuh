/* SPDX-License-Identifier: Apache-2.0 */
/* Element access in the cuda backend's kernels: fp32, f16 and bf16
 * through one fp32 interface (cuda_dt), a float or an index of a dtype
 * known only at run time. */
#ifndef APX_CUDA_DTYPE_CUH
#define APX_CUDA_DTYPE_CUH

#include <apexx/backend.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* ---- dtype access in kernels ------------------------------------------ */

template <typename T> struct cuda_dt;
template <> struct cuda_dt<float> {
  static __device__ __forceinline__ float load(const float *p) { return *p; }
  static __device__ __forceinline__ float to_f(float v) { return v; }
  static __device__ __forceinline__ float from_f(float v) { return v; }
};
template <> struct cuda_dt<__half> {
  static __device__ __forceinline__ float load(const __half *p) { return __half2float(*p); }
  static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct cuda_dt<__nv_bfloat16> {
  static __device__ __forceinline__ float load(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
  }
  static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float v) {
    return __float2bfloat16_rn(v);
  }
};

/* Load element i of a float tensor of runtime dtype dt as fp32 (exact). */
static __device__ __forceinline__ float cuda_load_any(const void *p, int dt, int64_t i) {
  switch (dt) {
  case APX_DTYPE_F16: return __half2float(((const __half *)p)[i]);
  case APX_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

/* Store fp32 v into element i of a float tensor of dtype dt, rounded once. */
static __device__ __forceinline__ void cuda_store_any(void *p, int dt, int64_t i, float v) {
  switch (dt) {
  case APX_DTYPE_F16: ((__half *)p)[i] = __float2half_rn(v); break;
  case APX_DTYPE_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
  default: ((float *)p)[i] = v; break;
  }
}

/* Round an fp32 value to storage dtype dt and back (a cast of an input). */
static __device__ __forceinline__ float cuda_round_any(float v, int dt) {
  switch (dt) {
  case APX_DTYPE_F16: return __half2float(__float2half_rn(v));
  case APX_DTYPE_BF16: return __bfloat162float(__float2bfloat16_rn(v));
  default: return v;
  }
}

/* Load an index of either width. */
static __device__ __forceinline__ int64_t cuda_load_index(const void *p, int is64, int64_t i) {
  return is64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

#endif /* APX_CUDA_DTYPE_CUH */
