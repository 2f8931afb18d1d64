/* SPDX-License-Identifier: Apache-2.0 */
/* What every path of scatter_add shares (scatter_add.cu): values to and
 * from the accumulator type, whether a kernel sits a device-decided call
 * out, and out = self (the kernel and its launch). */
#ifndef APX_CUDA_SCATTER_ADD_COMMON_CUH
#define APX_CUDA_SCATTER_ADD_COMMON_CUH

#include "scatter_add.h"

template <typename T> static __device__ __forceinline__ typename acc_of<T>::type to_acc(T v) {
  return (typename acc_of<T>::type)v;
}
template <> __device__ __forceinline__ float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> static __device__ __forceinline__ T from_acc(typename acc_of<T>::type v) {
  return (T)v;
}
template <> __device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
/* Does a kernel of a device-decided call sit this call out? Yes when the
 * check failed (validate=device), or when `vary` (the pre-pass's row note,
 * NULL: no choice) says the other path runs: kernels of the rows path want
 * constant rows (want_vary 0), the columns path's want varying rows. */
static __device__ __forceinline__ int path_skipped(const int *bad, const int *vary,
                                                   int want_vary) {
  if (cuda_call_failed(bad)) return 1;
  /* written by the check kernel before this kernel started (see
   * cuda_call_failed) */
  return vary != nullptr && (__ldg(vary) != 0) != want_vary;
}

/* out = self, or zeros without self, in 16-byte units where aligned; a
 * kernel rather than a memcpy so that a failed check leaves out untouched. */
template <typename U>
__global__ void start_out_kernel(const U *self, U *out, int64_t units, const int *bad,
                                 const int *vary) {
  if (path_skipped(bad, vary, 1)) return;
  CUDA_FOR(i, units) {
    U v;
    if (self) v = self[i];
    else memset(&v, 0, sizeof v);
    out[i] = v;
  }
}

/* At most `max_blocks` blocks (0: no cap) looping with a grid stride: a
 * kernel that usually returns at once (a device-decided call's path not
 * taken) costs a launch, not a launch of a block per 256 items. */
static cuda_geom capped_geom(int64_t n, unsigned threads, unsigned max_blocks) {
  cuda_geom g = cuda_geom_1d(n, threads);
  if (max_blocks > 0 && g.blocks > max_blocks) g.blocks = max_blocks;
  return g;
}

/* vary: NULL, or the row note of a device-decided call (then out is
 * started only when the columns path runs, by at most max_blocks blocks). */
static cudaError_t start_out(const void *self, void *out, size_t bytes, const int *bad,
                             const int *vary, unsigned max_blocks, cudaStream_t s) {
  if (self == out) return cudaSuccess;
  int wide = bytes % 16 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)self % 16 == 0;
  if (wide) {
    cuda_geom g = capped_geom((int64_t)(bytes / 16), 256, max_blocks);
    start_out_kernel<uint4><<<g.blocks, g.threads, 0, s>>>((const uint4 *)self, (uint4 *)out,
                                                           (int64_t)(bytes / 16), bad, vary);
  } else { /* element sizes are 2, 4 or 8: bytes is even, pointers 2-aligned */
    cuda_geom g = capped_geom((int64_t)(bytes / 2), 256, max_blocks);
    start_out_kernel<uint16_t><<<g.blocks, g.threads, 0, s>>>(
        (const uint16_t *)self, (uint16_t *)out, (int64_t)(bytes / 2), bad, vary);
  }
  return cudaGetLastError();
}

#endif /* APX_CUDA_SCATTER_ADD_COMMON_CUH */
