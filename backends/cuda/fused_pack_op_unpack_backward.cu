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
 * marks nothing, so nothing is written out of bounds.
 *
 * Small index (B*K <= CUDA_INLINE_CHECK_MAX, tile grids of at most
 * FUSED_SMALL_TILES): one launch, fused_backward_small. Each block takes
 * FUSED_SMALL_CHUNK pixels of one (b, c) plane, marks its batch row's
 * tiles in shared memory itself (no memset, no mark kernel), checks the
 * ids itself in validate=device where they fit its bounds
 * (cuda_block_check: every block the same verdict before any store, as
 * grad_features may be grad_out), writes its gradients and leaves its four
 * sums; the block that finishes last adds the blocks' sums in (b, c,
 * chunk) order (cuda_ticket.cuh). Run to run the same bits. */
#include "cuda_backend.h"
#include "cuda_ticket.cuh"

#define FUSED_BACKWARD_THREADS 256
/* the one-launch form: tile grids up to this many tiles (a byte each in
 * shared memory), pixels a block */
#define FUSED_SMALL_TILES 8192
#define FUSED_SMALL_PER_THREAD 8
#define FUSED_SMALL_CHUNK (FUSED_BACKWARD_THREADS * FUSED_SMALL_PER_THREAD)
/* pixels of a thread loaded before any of them is stored */
#define FUSED_SMALL_BATCH 4

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

/* A selected pixel's gradient (docs/ops.md, fused_pack_op_unpack_backward)
 * from grad and the feature xv, its terms of the four scalars' sums added */
template <typename T>
static __device__ __forceinline__ T fused_grad_pixel(const fused_backward_geometry &g, float grad,
                                                     float xv, float sums[4]) {
  const float value = xv * g.vs + g.vb, gate = xv * g.gs + g.gb;
  const bool on = gate > 0.0f;
  const float relu = on ? gate : 0.0f, gated = on ? grad * value : 0.0f;
  sums[0] += grad * xv * relu;
  sums[1] += grad * relu;
  sums[2] += gated * xv;
  sums[3] += gated;
  return cuda_dt<T>::from_f(on ? grad * (g.vs * gate + value * g.gs) : grad * 0.0f);
}

template <typename T>
__global__ void __launch_bounds__(FUSED_BACKWARD_THREADS)
    fused_backward_plane(const T *__restrict__ grad_out, const T *__restrict__ features,
                         T *grad_features, const unsigned char *__restrict__ selected,
                         fused_backward_geometry g, float *__restrict__ partial,
                         const int *bad) {
  if (cuda_call_failed(bad)) return; /* grad_features may be grad_out: left untouched */
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
    gf[p] = fused_grad_pixel<T>(g, cuda_dt<T>::to_f(grad_t), cuda_dt<T>::load(x + p), sums);
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

/* cuda_block_sum of four values at once, in thread 0 (each the same tree
 * and so the same bits as cuda_block_sum alone; two barriers for all
 * four). */
static __device__ __forceinline__ void fused_block_sum4(float v[4]) {
  __shared__ float s_warp[4][32];
#pragma unroll
  for (int s = 0; s < 4; s++)
    for (int off = 16; off > 0; off >>= 1) v[s] += __shfl_down_sync(0xffffffffu, v[s], off);
  __syncthreads(); /* s_warp free from a previous call */
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int s = 0; s < 4; s++) s_warp[s][threadIdx.x >> 5] = v[s];
  __syncthreads();
  if (threadIdx.x == 0)
#pragma unroll
    for (int s = 0; s < 4; s++) {
      v[s] = 0.0f;
      for (unsigned w = 0; w < blockDim.x / 32; w++) v[s] += s_warp[s][w];
    }
}

/* The small form: block (bc, chunk) = blockIdx.x as bc * chunks + chunk;
 * plane < 2^31. partial: workspace, or NULL for the ticket's own. */
template <typename T, typename I>
__global__ void __launch_bounds__(FUSED_BACKWARD_THREADS)
    fused_backward_small(const T *grad_out, const T *__restrict__ features, T *grad_features,
                         const I *__restrict__ idx, int64_t K, fused_backward_geometry g,
                         uint32_t chunks, cuda_fastdiv fW, cuda_fastdiv ft, cuda_inline_check ic,
                         const int *bad, void *grad_scalars, int scalars_dt, float *partial,
                         unsigned ticket) {
  __shared__ unsigned char sel[FUSED_SMALL_TILES];
  if (cuda_block_check(ic) || cuda_call_failed(bad)) return; /* every block alike */
  const uint32_t bc = blockIdx.x / chunks, chunk = blockIdx.x - bc * chunks;
  const int64_t b = (int64_t)bc / g.C, plane = g.H * g.W;
  for (int64_t i = threadIdx.x; i < g.tiles; i += blockDim.x) sel[i] = 0;
  __syncthreads();
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const int64_t id = (int64_t)idx[b * K + k];
    if (id >= 0 && id < g.tiles) sel[id] = 1;
  }
  __syncthreads();
  const T *go = grad_out + (int64_t)bc * plane, *x = features + (int64_t)bc * plane;
  T *gf = grad_features + (int64_t)bc * plane; /* may be grad_out: each element reads its own */
  const uint32_t gw = fW.d / ft.d;
  /* A batch's loads before its stores: grad_features may be grad_out (no
   * __restrict__), so a store between them would keep each pixel's loads
   * waiting for the pixel before's store. Each element is read and written
   * by one thread only. */
  const uint32_t p0 = chunk * FUSED_SMALL_CHUNK + threadIdx.x;
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int e0 = 0; e0 < FUSED_SMALL_PER_THREAD; e0 += FUSED_SMALL_BATCH) {
    T grad_t[FUSED_SMALL_BATCH], x_t[FUSED_SMALL_BATCH];
    bool in_tile[FUSED_SMALL_BATCH];
#pragma unroll
    for (int e = 0; e < FUSED_SMALL_BATCH; e++) {
      const uint32_t p = p0 + (e0 + e) * FUSED_BACKWARD_THREADS;
      in_tile[e] = false;
      if (p >= (uint32_t)plane) continue;
      const uint32_t y = fW.div(p), xx = p - y * fW.d;
      grad_t[e] = go[p];
      in_tile[e] = sel[ft.div(y) * gw + ft.div(xx)] != 0;
      if (in_tile[e]) x_t[e] = x[p];
    }
#pragma unroll
    for (int e = 0; e < FUSED_SMALL_BATCH; e++) {
      const uint32_t p = p0 + (e0 + e) * FUSED_BACKWARD_THREADS;
      if (p >= (uint32_t)plane) break;
      if (!in_tile[e]) {
        gf[p] = grad_t[e];
        continue;
      }
      gf[p] = fused_grad_pixel<T>(g, cuda_dt<T>::to_f(grad_t[e]), cuda_dt<T>::to_f(x_t[e]), sums);
    }
  }
  if (!grad_scalars) return; /* uniform over the grid */
  float *part = cuda_ticket_partials(ticket, partial);
  fused_block_sum4(sums);
  if (threadIdx.x == 0)
#pragma unroll
    for (int s = 0; s < 4; s++) part[4 * blockIdx.x + s] = sums[s];
  if (!cuda_ticket_last_block(ticket)) return;
  /* the blocks' partials in block order, each thread's four sums at once
   * (as cuda_ticket_sum for each, in one pass) */
  float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) {
    const float *q = part + (size_t)4 * i;
    const float q0 = __ldcg(q), q1 = __ldcg(q + 1), q2 = __ldcg(q + 2), q3 = __ldcg(q + 3);
    total[0] += q0;
    total[1] += q1;
    total[2] += q2;
    total[3] += q3;
  }
  fused_block_sum4(total);
  if (threadIdx.x == 0)
#pragma unroll
    for (int s = 0; s < 4; s++) cuda_store_any(grad_scalars, scalars_dt, s, total[s]);
}

/* The index check of the call: ids within the tile grid, unique in a row
 * with require_unique */
static void fused_check_desc(const apx_fused_pack_op_unpack_backward_args *a,
                             const fused_backward_geometry &g, int64_t K, cuda_check_desc *d) {
  cuda_check_init(d, APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, "idx", a->idx);
  d->lo = 0;
  d->hi = g.tiles - 1;
  if (a->require_unique) d->unique_row = K;
}

/* The one-launch form (fits: see the host code); 0 or the failure. */
template <typename T>
static apx_status launch_small(cuda_state *st, int dev,
                               const apx_fused_pack_op_unpack_backward_args *a,
                               const fused_backward_geometry &g, cudaStream_t s) {
  const int64_t B = a->grad_out->shape[0], K = a->idx->shape[1];
  const int64_t plane = g.H * g.W;
  const int64_t chunks = (plane + FUSED_SMALL_CHUNK - 1) / FUSED_SMALL_CHUNK;
  const int64_t blocks = B * g.C * chunks;
  cuda_inline_check ic;
  memset(&ic, 0, sizeof ic);
  cuda_checked chk;
  memset(&chk, 0, sizeof chk);
  if (K > 0 && B > 0) {
    cuda_check_desc d;
    fused_check_desc(a, g, K, &d);
    if (!cuda_check_inline(st, dev, &d, &ic)) {
      apx_status status = cuda_check_run(st, dev, s, &d, 0, &chk);
      if (status != APX_OK) return status;
    }
  }
  cuda_workspace ws = {nullptr, s};
  if (a->grad_scalars && blocks * 4 > CUDA_TICKET_PARTIALS) {
    apx_status status = cuda_ws_alloc(st, s, (size_t)blocks * 4 * sizeof(float), &ws,
                                      "fused_pack_op_unpack_backward: sums");
    if (status != APX_OK) return status;
  }
  const unsigned ticket = a->grad_scalars ? cuda_ticket_take() : 0;
  void *gs = a->grad_scalars ? a->grad_scalars->data : nullptr;
  const int gs_dt = a->grad_scalars ? (int)a->grad_scalars->dtype : 0;
  const cuda_fastdiv fW = cuda_fastdiv_make((uint32_t)g.W), ft = cuda_fastdiv_make((uint32_t)g.t);
  if (a->idx->dtype == APX_DTYPE_I64)
    fused_backward_small<T, int64_t><<<(unsigned)blocks, FUSED_BACKWARD_THREADS, 0, s>>>(
        (const T *)a->grad_out->data, (const T *)a->features->data, (T *)a->grad_features->data,
        (const int64_t *)a->idx->data, K, g, (uint32_t)chunks, fW, ft, ic, chk.bad, gs, gs_dt,
        (float *)ws.ptr, ticket);
  else
    fused_backward_small<T, int32_t><<<(unsigned)blocks, FUSED_BACKWARD_THREADS, 0, s>>>(
        (const T *)a->grad_out->data, (const T *)a->features->data, (T *)a->grad_features->data,
        (const int32_t *)a->idx->data, K, g, (uint32_t)chunks, fW, ft, ic, chk.bad, gs, gs_dt,
        (float *)ws.ptr, ticket);
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "fused_pack_op_unpack_backward: launch");
  return APX_OK;
}

template <typename T>
static void launch_plane(const apx_fused_pack_op_unpack_backward_args *a,
                         const unsigned char *selected, const fused_backward_geometry &g,
                         float *partial, int64_t planes, const int *bad, cudaStream_t s) {
  fused_backward_plane<T><<<(unsigned)planes, FUSED_BACKWARD_THREADS, 0, s>>>(
      (const T *)a->grad_out->data, (const T *)a->features->data, (T *)a->grad_features->data,
      selected, g, partial, bad);
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
  const int64_t plane = g.H * g.W;
  const int64_t small_blocks = planes * ((plane + FUSED_SMALL_CHUNK - 1) / FUSED_SMALL_CHUNK);
  if (B * K <= CUDA_INLINE_CHECK_MAX && g.tiles <= FUSED_SMALL_TILES && plane < 0x7fffffffLL &&
      small_blocks > 0 && small_blocks <= 0x7fffffffLL) {
    switch (go->dtype) {
    case APX_DTYPE_F16: return launch_small<__half>(st, dev, a, g, stream);
    case APX_DTYPE_BF16: return launch_small<__nv_bfloat16>(st, dev, a, g, stream);
    default: return launch_small<float>(st, dev, a, g, stream);
    }
  }
  cuda_checked chk; /* its verdict: the plane kernel stores nothing after a failure */
  memset(&chk, 0, sizeof chk);
  if (K > 0 && B > 0) {
    cuda_check_desc d;
    fused_check_desc(a, g, K, &d);
    s = cuda_check_run(st, dev, stream, &d, 0, &chk);
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
    case APX_DTYPE_F16:
      launch_plane<__half>(a, selected, g, partial, planes, chk.bad, stream);
      break;
    case APX_DTYPE_BF16:
      launch_plane<__nv_bfloat16>(a, selected, g, partial, planes, chk.bad, stream);
      break;
    default: launch_plane<float>(a, selected, g, partial, planes, chk.bad, stream); break;
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
