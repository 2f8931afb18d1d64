/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_fuse_backward on CUDA (docs/ops.md, fusiongate_fuse_backward).
 * One thread per pixel (b, p) walks the channels in order: it writes
 * grad_base and grad_detail of each channel and sums grad_alpha in fp32 in
 * channel order, so the sum has one order (no atomics): the same bits run
 * to run. Up to FUSE_BWD_SMALL pixels (too few threads to hide a walk of
 * C dependent steps) a pixel's channels are split over FUSE_BWD_GROUPS
 * threads instead: thread g takes channels g, g + GROUPS, ... in order,
 * and the GROUPS partial sums of grad_alpha are added in g order: one
 * order again. fp32 math, one rounding per stored value. */
#include "cuda_backend.h"

/* pixels up to which the channels are split over threads */
#define FUSE_BWD_SMALL (1 << 18)
#define FUSE_BWD_GROUPS 8

template <typename T>
__global__ void fusiongate_fuse_backward_kernel(const T *__restrict__ grad_out,
                                                const T *__restrict__ base,
                                                const T *__restrict__ detail,
                                                const T *__restrict__ alpha, T *grad_base,
                                                T *grad_detail, T *grad_alpha, int64_t B,
                                                int64_t C, int64_t plane) {
  CUDA_FOR(i, B * plane) {
    int64_t b = i / plane, p = i % plane;
    float a = cuda_dt<T>::load(alpha + i);
    float sum = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      int64_t at = (b * C + c) * plane + p;
      float g = cuda_dt<T>::load(grad_out + at);
      float ga = g * a;
      if (grad_base) grad_base[at] = cuda_dt<T>::from_f(g - ga);
      if (grad_detail) grad_detail[at] = cuda_dt<T>::from_f(ga);
      if (grad_alpha) sum += g * (cuda_dt<T>::load(detail + at) - cuda_dt<T>::load(base + at));
    }
    if (grad_alpha) grad_alpha[i] = cuda_dt<T>::from_f(sum);
  }
}

/* blockDim (32, FUSE_BWD_GROUPS): 32 pixels, threadIdx.y the channel group;
 * B * plane < 2^31 */
template <typename T>
__global__ void __launch_bounds__(32 * FUSE_BWD_GROUPS)
    fusiongate_fuse_backward_split(const T *__restrict__ grad_out, const T *__restrict__ base,
                                   const T *__restrict__ detail, const T *__restrict__ alpha,
                                   T *__restrict__ grad_base, T *__restrict__ grad_detail,
                                   T *__restrict__ grad_alpha, uint32_t pixels, int64_t C,
                                   cuda_fastdiv fplane) {
  __shared__ float part[FUSE_BWD_GROUPS][32];
  const uint32_t i = blockIdx.x * 32u + threadIdx.x;
  const bool on = i < pixels;
  float sum = 0.0f;
  if (on) {
    const uint32_t b = fplane.div(i), p = i - b * fplane.d;
    const int64_t plane = fplane.d;
    const float a = cuda_dt<T>::load(alpha + i);
#pragma unroll 4
    for (int64_t c = threadIdx.y; c < C; c += FUSE_BWD_GROUPS) {
      const int64_t at = ((int64_t)b * C + c) * plane + p;
      const float g = cuda_dt<T>::load(grad_out + at);
      const float ga = g * a;
      if (grad_base) grad_base[at] = cuda_dt<T>::from_f(g - ga);
      if (grad_detail) grad_detail[at] = cuda_dt<T>::from_f(ga);
      if (grad_alpha) sum += g * (cuda_dt<T>::load(detail + at) - cuda_dt<T>::load(base + at));
    }
  }
  if (!grad_alpha) return;
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || !on) return;
  float total = 0.0f;
#pragma unroll
  for (int g = 0; g < FUSE_BWD_GROUPS; g++) total += part[g][threadIdx.x];
  grad_alpha[i] = cuda_dt<T>::from_f(total);
}

template <typename T>
static void launch_fuse_backward(const apx_fusiongate_fuse_backward_args *a, cudaStream_t s) {
  int64_t B = a->base->shape[0], C = a->base->shape[1];
  int64_t plane = a->base->shape[2] * a->base->shape[3];
  if (B * plane <= FUSE_BWD_SMALL) {
    const uint32_t pixels = (uint32_t)(B * plane);
    fusiongate_fuse_backward_split<T><<<(pixels + 31) / 32, dim3(32, FUSE_BWD_GROUPS), 0, s>>>(
        (const T *)a->grad_out->data, (const T *)a->base->data, (const T *)a->detail->data,
        (const T *)a->alpha->data, a->grad_base ? (T *)a->grad_base->data : nullptr,
        a->grad_detail ? (T *)a->grad_detail->data : nullptr,
        a->grad_alpha ? (T *)a->grad_alpha->data : nullptr, pixels, C,
        cuda_fastdiv_make((uint32_t)plane));
    return;
  }
  cuda_geom g = cuda_geom_1d(B * plane, 256);
  fusiongate_fuse_backward_kernel<T><<<g.blocks, g.threads, 0, s>>>(
      (const T *)a->grad_out->data, (const T *)a->base->data, (const T *)a->detail->data,
      (const T *)a->alpha->data, a->grad_base ? (T *)a->grad_base->data : nullptr,
      a->grad_detail ? (T *)a->grad_detail->data : nullptr,
      a->grad_alpha ? (T *)a->grad_alpha->data : nullptr, B, C, plane);
}

apx_status cuda_fusiongate_fuse_backward(void *state, const apx_fusiongate_fuse_backward_args *a,
                                         const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, a->base->device_index);
  if (s != APX_OK) return s;
  if (a->base->shape[0] * a->base->shape[2] * a->base->shape[3] == 0) return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  switch (a->base->dtype) {
  case APX_DTYPE_F16: launch_fuse_backward<__half>(a, stream); break;
  case APX_DTYPE_BF16: launch_fuse_backward<__nv_bfloat16>(a, stream); break;
  default: launch_fuse_backward<float>(a, stream); break;
  }
  CUDA_LAUNCHED(st, "fusiongate_fuse_backward: launch");
  return APX_OK;
}
