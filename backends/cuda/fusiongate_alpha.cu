/* SPDX-License-Identifier: Apache-2.0 */
/* fusiongate_alpha on CUDA (docs/ops.md, fusiongate_alpha). Element-wise;
 * fp32 math, one rounding on store (docs/ops.md, Rounding and parity).
 *
 * Where the three pointers are 16-byte aligned and the map has at least
 * ALPHA_VEC_MIN elements a thread takes 8 elements at a time: 16-byte
 * loads and stores (two of them for an fp32 tensor), over n / 8 groups;
 * the last n % 8 elements one a thread. Otherwise one element a thread. The grid is one wave (8 blocks of 256 an SM, fewer
 * where the work is smaller) with a grid-stride loop, so every element is
 * written whatever n (docs/ops.md, Every output written). */
#include "cuda_backend.h"

#include <math.h>

#define ALPHA_THREADS 256
#define ALPHA_VEC 8
#define ALPHA_VEC_MIN ((int64_t)1 << 18)

/* Proxy sanitising in the proxy's own dtype: NaN -> 0, +inf -> 1,
 * -inf -> 0 (all exact; the widening to fp32 keeps NaN and inf), then the
 * cast to the output dtype. */
template <typename O> static __device__ __forceinline__ float prepare_proxy(float v) {
  if (isnan(v)) v = 0.0f;
  else if (isinf(v)) v = v > 0.0f ? 1.0f : 0.0f;
  return cuda_dt<O>::to_f(cuda_dt<O>::from_f(v));
}

/* sigmoid(w_b*b + w_u*u + bias) in fp32. __expf (the hardware exp2 of a
 * scaled argument) is within 2 + 1.17|z| ulps of exp; through the sigmoid
 * (error ratio times s(1-s)) that is below 1e-7 absolute, inside
 * docs/ops.md's bound for a transcendental. */
template <typename O>
static __device__ __forceinline__ float alpha_of(float b, float u, float w_b, float w_u,
                                                 float bias) {
  const float z = w_b * prepare_proxy<O>(b) + w_u * prepare_proxy<O>(u) + bias;
  return 1.0f / (1.0f + __expf(-z));
}

/* 8 elements of T at p (16-byte aligned) as 16-byte words: one for a
 * 2-byte dtype, two for fp32. */
template <typename T> struct alpha_vec {
  static constexpr int words = (int)(sizeof(T) * ALPHA_VEC / sizeof(uint4));
  uint4 w[words];
  __device__ __forceinline__ void load(const T *p) {
#pragma unroll
    for (int q = 0; q < words; q++) w[q] = reinterpret_cast<const uint4 *>(p)[q];
  }
  __device__ __forceinline__ void store(T *p) const {
#pragma unroll
    for (int q = 0; q < words; q++) reinterpret_cast<uint4 *>(p)[q] = w[q];
  }
  __device__ __forceinline__ float get(int j) const {
    return cuda_dt<T>::to_f(reinterpret_cast<const T *>(w)[j]);
  }
  __device__ __forceinline__ void set(int j, float v) {
    reinterpret_cast<T *>(w)[j] = cuda_dt<T>::from_f(v);
  }
};

template <typename P, typename O>
__global__ void __launch_bounds__(ALPHA_THREADS)
    fusiongate_alpha_vec(const P *__restrict__ boundary, const P *__restrict__ uncertainty,
                         O *__restrict__ out, int64_t n, float w_b, float w_u, float bias) {
  const int64_t groups = n / ALPHA_VEC;
  CUDA_FOR(g, groups) {
    alpha_vec<P> b, u;
    b.load(boundary + g * ALPHA_VEC);
    u.load(uncertainty + g * ALPHA_VEC);
    alpha_vec<O> o;
#pragma unroll
    for (int j = 0; j < ALPHA_VEC; j++) o.set(j, alpha_of<O>(b.get(j), u.get(j), w_b, w_u, bias));
    o.store(out + g * ALPHA_VEC);
  }
  /* the tail: fewer than 8 elements, one a thread */
  const int64_t i = groups * ALPHA_VEC + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = cuda_dt<O>::from_f(alpha_of<O>(cuda_dt<P>::load(boundary + i),
                                            cuda_dt<P>::load(uncertainty + i), w_b, w_u, bias));
}

template <typename P, typename O>
__global__ void __launch_bounds__(ALPHA_THREADS)
    fusiongate_alpha_scalar(const P *__restrict__ boundary, const P *__restrict__ uncertainty,
                            O *__restrict__ out, int64_t n, float w_b, float w_u, float bias) {
  CUDA_FOR(i, n) {
    out[i] = cuda_dt<O>::from_f(alpha_of<O>(cuda_dt<P>::load(boundary + i),
                                            cuda_dt<P>::load(uncertainty + i), w_b, w_u, bias));
  }
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* w = PyTorch softplus (beta 1, threshold 20) evaluated in fp32, as the
 * reference does on an fp32 tensor (apx_softplusf, include/apexx/op_rules.h). */
template <typename P, typename O>
static void launch_alpha(const apx_fusiongate_alpha_args *a, int64_t n, int sm_count,
                         cudaStream_t s) {
  float w_b = apx_softplusf((float)a->boundary_log_weight);
  float w_u = apx_softplusf((float)a->uncertainty_log_weight);
  const P *bnd = (const P *)a->boundary->data, *unc = (const P *)a->uncertainty->data;
  O *out = (O *)a->out->data;
  /* below ALPHA_VEC_MIN elements one element a thread: a call that small is
   * latency-bound, and eight times the warps hide more of it */
  const int vec = n >= ALPHA_VEC_MIN && aligned16(bnd) && aligned16(unc) && aligned16(out);
  /* work items: 8-element groups (the tail's < 8 elements ride on the
   * first threads), or elements */
  const int64_t items = vec ? (n + ALPHA_VEC - 1) / ALPHA_VEC : n;
  cuda_geom g = cuda_geom_1d(items, ALPHA_THREADS);
  const unsigned wave = 8u * (unsigned)(sm_count > 0 ? sm_count : 132);
  if (g.blocks > wave) g.blocks = wave;
  if (vec)
    fusiongate_alpha_vec<P, O><<<g.blocks, g.threads, 0, s>>>(bnd, unc, out, n, w_b, w_u,
                                                              (float)a->bias);
  else
    fusiongate_alpha_scalar<P, O><<<g.blocks, g.threads, 0, s>>>(bnd, unc, out, n, w_b, w_u,
                                                                 (float)a->bias);
}

template <typename P>
static void launch_alpha_out(const apx_fusiongate_alpha_args *a, int64_t n, int sm_count,
                             cudaStream_t s) {
  switch (a->out->dtype) {
  case APX_DTYPE_F16: launch_alpha<P, __half>(a, n, sm_count, s); break;
  case APX_DTYPE_BF16: launch_alpha<P, __nv_bfloat16>(a, n, sm_count, s); break;
  default: launch_alpha<P, float>(a, n, sm_count, s); break;
  }
}

apx_status cuda_fusiongate_alpha(void *state, const apx_fusiongate_alpha_args *a,
                                 const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  const int dev = a->boundary->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  int64_t n = apx_backend_numel(a->out);
  if (n == 0) return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  const int sms = st->dev[dev].sm_count;
  switch (a->boundary->dtype) {
  case APX_DTYPE_F16: launch_alpha_out<__half>(a, n, sms, stream); break;
  case APX_DTYPE_BF16: launch_alpha_out<__nv_bfloat16>(a, n, sms, stream); break;
  default: launch_alpha_out<float>(a, n, sms, stream); break;
  }
  CUDA_LAUNCHED(st, "fusiongate_alpha: launch");
  return APX_OK;
}
