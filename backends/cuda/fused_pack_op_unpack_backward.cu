/* SPDX-License-Identifier: Apache-2.0 */
/* fused_pack_op_unpack_backward on CUDA (docs/ops.md,
 * fused_pack_op_unpack_backward). At a pixel x of a selected tile, in fp32:
 * v = x*vs + vb, g = x*gs + gb, grad_features = grad * (g > 0 ? vs*g + v*gs
 * : 0); elsewhere grad_features = grad (a copy). Three kernels, no float
 * atomics: (1) one thread per (b, k) marks tile idx[b,k] selected (a
 * repeated id stores the same byte again); (2) one block per (b, c) plane
 * writes its gradients and reduces the plane's four scalar sums in a fixed
 * tree; (3) one thread adds the planes' sums in (b, c) order and rounds
 * once. Run to run the same bits; against the cpu backend within the parity
 * bound (its plane sums run in row-major order, and the compiler may
 * contract vs*g + v*gs here). The index values are checked by the pre-pass
 * (cuda_check_run: ranges, and uniqueness with require_unique); a bad id
 * marks nothing, so nothing is written out of bounds. */
#include "cuda_backend.h"

#define FUSED_BACKWARD_THREADS 256

template <typename I>
__global__ void __launch_bounds__(FUSED_BACKWARD_THREADS)
    fused_backward_mark(const I *__restrict__ idx, int64_t B, int64_t K, int64_t tiles,
                        unsigned char *__restrict__ selected) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * K) return;
  const int64_t id = (int64_t)idx[i];
  if (id >= 0 && id < tiles) selected[(i / K) * tiles + id] = 1;
}

struct fused_backward_geometry {
  int64_t C, H, W, t, tiles;
  float vs, vb, gs, gb;
};

template <typename T>
__global__ void __launch_bounds__(FUSED_BACKWARD_THREADS)
    fused_backward_plane(const T *__restrict__ grad_out, const T *__restrict__ features,
                         T *grad_features, const unsigned char *__restrict__ selected,
                         fused_backward_geometry g, float *__restrict__ partial) {
  const int64_t bc = blockIdx.x, b = bc / g.C, plane = g.H * g.W;
  const T *go = grad_out + bc * plane, *x = features + bc * plane;
  T *gf = grad_features + bc * plane; /* may be grad_out: each element reads its own */
  const unsigned char *sel = selected + b * g.tiles;
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t p = threadIdx.x; p < plane; p += blockDim.x) {
    const int64_t y = p / g.W, xx = p % g.W;
    const T grad_t = go[p];
    if (!sel[(y / g.t) * (g.W / g.t) + xx / g.t]) {
      gf[p] = grad_t;
      continue;
    }
    const float grad = cuda_dt<T>::to_f(grad_t), xv = cuda_dt<T>::load(x + p);
    const float value = xv * g.vs + g.vb, gate = xv * g.gs + g.gb;
    const bool on = gate > 0.0f;
    gf[p] = cuda_dt<T>::from_f(on ? grad * (g.vs * gate + value * g.gs) : grad * 0.0f);
    const float relu = on ? gate : 0.0f, gated = on ? grad * value : 0.0f;
    sums[0] += grad * xv * relu;
    sums[1] += grad * relu;
    sums[2] += gated * xv;
    sums[3] += gated;
  }
  if (!partial) return; /* the scalars' gradients were not asked for */
  __shared__ float red[4][FUSED_BACKWARD_THREADS];
  for (int s = 0; s < 4; s++) red[s][threadIdx.x] = sums[s];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) { /* a fixed tree */
    if (threadIdx.x < half)
      for (int s = 0; s < 4; s++) red[s][threadIdx.x] += red[s][threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int s = 0; s < 4; s++) partial[4 * bc + s] = red[s][0];
}

__global__ void fused_backward_scalars(const float *__restrict__ partial, int64_t planes,
                                       void *grad_scalars, int dtype) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int s = 0; s < 4; s++) {
    float sum = 0.0f;
    for (int64_t bc = 0; bc < planes; bc++) sum += partial[4 * bc + s];
    switch (dtype) {
    case APX_DTYPE_F16: ((__half *)grad_scalars)[s] = __float2half_rn(sum); break;
    case APX_DTYPE_BF16: ((__nv_bfloat16 *)grad_scalars)[s] = __float2bfloat16_rn(sum); break;
    default: ((float *)grad_scalars)[s] = sum; break;
    }
  }
}

template <typename T>
static void launch_plane(const apx_fused_pack_op_unpack_backward_args *a,
                         const unsigned char *selected, const fused_backward_geometry &g,
                         float *partial, int64_t planes, cudaStream_t s) {
  fused_backward_plane<T><<<(unsigned)planes, FUSED_BACKWARD_THREADS, 0, s>>>(
      (const T *)a->grad_out->data, (const T *)a->features->data, (T *)a->grad_features->data,
      selected, g, partial);
}

apx_status cuda_fused_pack_op_unpack_backward(void *state,
                                              const apx_fused_pack_op_unpack_backward_args *a,
                                              const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  const int dev = a->grad_out->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  const apx_tensor *go = a->grad_out;
  const int64_t B = go->shape[0], C = go->shape[1], K = a->idx->shape[1];
  const int64_t planes = B * C;
  fused_backward_geometry g;
  g.C = C;
  g.H = go->shape[2];
  g.W = go->shape[3];
  g.t = a->tile;
  g.tiles = (g.H / g.t) * (g.W / g.t);
  /* docs/ops.md, fused_pack_op_unpack: the scalars enter as fp32 */
  g.vs = (float)a->value_scale;
  g.vb = (float)a->value_bias;
  g.gs = (float)a->gate_scale;
  g.gb = (float)a->gate_bias;
  if (planes > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "fused_pack_op_unpack_backward: B*C = [%lld] planes exceed the "
                              "grid's 2^31 blocks",
                              (long long)planes);
  if (K > 0 && B > 0) {
    s = cuda_check_index_values(st, dev, stream, APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, "idx",
                                a->idx, 0, g.tiles - 1, a->require_unique ? K : 0);
    if (s != APX_OK) return s;
  }
  const size_t mask_bytes = cuda_align_up((size_t)(B * g.tiles > 0 ? B * g.tiles : 1));
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream, mask_bytes + (size_t)(4 * planes + 1) * sizeof(float), &ws,
                    "fused_pack_op_unpack_backward: tile mask and sums");
  if (s != APX_OK) return s;
  unsigned char *selected = (unsigned char *)ws.ptr;
  float *partial = a->grad_scalars ? (float *)((char *)ws.ptr + mask_bytes) : nullptr;
  cudaError_t err = cudaMemsetAsync(selected, 0, mask_bytes, stream);
  if (err == cudaSuccess && B * K > 0) {
    cuda_geom m = cuda_geom_1d(B * K, FUSED_BACKWARD_THREADS);
    if (a->idx->dtype == APX_DTYPE_I64)
      fused_backward_mark<int64_t><<<m.blocks, m.threads, 0, stream>>>(
          (const int64_t *)a->idx->data, B, K, g.tiles, selected);
    else
      fused_backward_mark<int32_t><<<m.blocks, m.threads, 0, stream>>>(
          (const int32_t *)a->idx->data, B, K, g.tiles, selected);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess && planes > 0) {
    switch (go->dtype) {
    case APX_DTYPE_F16: launch_plane<__half>(a, selected, g, partial, planes, stream); break;
    case APX_DTYPE_BF16:
      launch_plane<__nv_bfloat16>(a, selected, g, partial, planes, stream);
      break;
    default: launch_plane<float>(a, selected, g, partial, planes, stream); break;
    }
    err = cudaGetLastError();
  }
  if (err == cudaSuccess && a->grad_scalars) {
    fused_backward_scalars<<<1, 1, 0, stream>>>(partial, planes, a->grad_scalars->data,
                                                (int)a->grad_scalars->dtype);
    err = cudaGetLastError();
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "fused_pack_op_unpack_backward: launch");
  return APX_OK;
}
