/* SPDX-License-Identifier: Apache-2.0 */
/* tilepack_backward on CUDA (docs/ops.md, tilepack_backward): grad_features
 * = zeros, then grad_out[b,k] added onto tile idx[b,k] in ascending k.
 *
 * Two kernels and no atomics, so the result is the same bits on every run
 * and the cpu backend's: (1) one thread per (b, tile id) walks idx[b,:] in
 * ascending k and links the k that name its id (first[b*tiles + id],
 * next[b*K + k]; each k belongs to one id, so no two threads write one
 * entry); (2) one thread per grad_features element sums its tile's list in
 * fp32 from zero, in that order, and rounds once (a 2-D grid over the map's
 * rows (b, c, y) and x, its position decoded with 32-bit multiplies where the
 * rows fit; a 1-D grid with 64-bit division otherwise). The index values are
 * checked by the pre-pass (cuda_check_run, every validate mode's rule); the
 * kernels only compare ids for equality, so a bad id is never followed and
 * nothing is read out of bounds whatever the values. */
#include "cuda_backend.h"

#define TILEPACK_BACKWARD_THREADS 256

template <typename I>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_THREADS)
    tilepack_backward_link(const I *__restrict__ idx, int64_t B, int64_t K, int64_t tiles,
                           int64_t *__restrict__ first, int64_t *__restrict__ next) {
  const int64_t slot = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (slot >= B * tiles) return;
  const int64_t b = slot / tiles, id = slot % tiles;
  int64_t last = -1;
  first[slot] = -1;
  for (int64_t k = 0; k < K; k++) {
    if ((int64_t)idx[b * K + k] != id) continue;
    next[b * K + k] = -1;
    if (last < 0)
      first[slot] = k;
    else
      next[b * K + last] = k;
    last = k;
  }
}

template <typename T>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_THREADS)
    tilepack_backward_sum(const T *__restrict__ grad_out, T *__restrict__ grad_features,
                          const int64_t *__restrict__ first, const int64_t *__restrict__ next,
                          int64_t C, int64_t H, int64_t W, int64_t K, int64_t t, int64_t numel) {
  const int64_t tiles = (H / t) * (W / t);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t x = i % W, y = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);
    const int64_t id = (y / t) * (W / t) + x / t, dy = y % t, dx = x % t;
    float sum = 0.0f;
    for (int64_t k = first[b * tiles + id]; k >= 0; k = next[b * K + k])
      sum += cuda_dt<T>::load(grad_out + (((b * K + k) * C + c) * t + dy) * t + dx);
    grad_features[i] = cuda_dt<T>::from_f(sum);
  }
}

/* (2) over rows r = (b*C + c)*H + y and x in the row; rows < 2^31 */
template <typename T>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_THREADS)
    tilepack_backward_rows(const T *__restrict__ grad_out, T *__restrict__ grad_features,
                           const int64_t *__restrict__ first, const int64_t *__restrict__ next,
                           cuda_fastdiv fH, cuda_fastdiv fC, cuda_fastdiv ft, int64_t rows,
                           uint32_t W, uint32_t gw, int64_t K, int64_t tiles) {
  const int64_t C = fC.d, t = ft.d;
  CUDA_FOR_OUTER(r, rows) {
    const uint32_t bc = fH.div((uint32_t)r), y = (uint32_t)r - bc * fH.d;
    const uint32_t b = fC.div(bc), c = bc - b * fC.d;
    const uint32_t ty = ft.div(y), dy = y - ty * ft.d;
    const int64_t *head = first + (int64_t)b * tiles + (int64_t)ty * gw;
    const int64_t *link = next + (int64_t)b * K;
    const T *src = grad_out + ((int64_t)b * K * C + c) * t * t + (int64_t)dy * t;
    T *dst = grad_features + r * W;
    CUDA_FOR_INNER(x, W) {
      const uint32_t tx = ft.div(x), dx = x - tx * ft.d;
      float sum = 0.0f;
      for (int64_t k = head[tx]; k >= 0; k = link[k])
        sum += cuda_dt<T>::load(src + k * C * t * t + dx);
      dst[x] = cuda_dt<T>::from_f(sum);
    }
  }
}

template <typename T>
static void launch_sum(const apx_tilepack_backward_args *a, const int64_t *first,
                       const int64_t *next, cudaStream_t s) {
  const apx_tensor *gf = a->grad_features;
  const int64_t numel = apx_backend_numel(gf);
  const int64_t C = gf->shape[1], H = gf->shape[2], W = gf->shape[3];
  const int64_t K = a->grad_out->shape[1], t = a->grad_out->shape[3];
  const int64_t rows = gf->shape[0] * C * H;
  if (rows < 0x7fffffffLL && W < 0x7fffffffLL && C < 0x7fffffffLL) {
    /* threads: W rounded up to a warp, at most a block's 256 */
    const unsigned threads =
        W >= TILEPACK_BACKWARD_THREADS ? TILEPACK_BACKWARD_THREADS : (unsigned)((W + 31) / 32 * 32);
    cuda_geom2 g2 = cuda_geom_2d(rows, W, threads);
    tilepack_backward_rows<T><<<g2.grid, g2.block, 0, s>>>(
        (const T *)a->grad_out->data, (T *)gf->data, first, next,
        cuda_fastdiv_make((uint32_t)H), cuda_fastdiv_make((uint32_t)C),
        cuda_fastdiv_make((uint32_t)t), rows, (uint32_t)W, (uint32_t)(W / t), K,
        (H / t) * (W / t));
    return;
  }
  cuda_geom g = cuda_geom_1d(numel, TILEPACK_BACKWARD_THREADS);
  tilepack_backward_sum<T><<<g.blocks, g.threads, 0, s>>>(
      (const T *)a->grad_out->data, (T *)gf->data, first, next, gf->shape[1], gf->shape[2],
      gf->shape[3], a->grad_out->shape[1], a->grad_out->shape[3], numel);
}

apx_status cuda_tilepack_backward(void *state, const apx_tilepack_backward_args *a,
                                  const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  const int dev = a->grad_out->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  const apx_tensor *gf = a->grad_features;
  if (apx_backend_numel(gf) == 0) return APX_OK;
  const int64_t B = gf->shape[0], K = a->grad_out->shape[1], t = a->grad_out->shape[3];
  const int64_t tiles = (gf->shape[2] / t) * (gf->shape[3] / t);
  if (K > 0) {
    s = cuda_check_index_values(st, dev, stream, APX_OP_TILEPACK_BACKWARD, "idx", a->idx, 0,
                                tiles - 1, 0);
    if (s != APX_OK) return s;
  }
  cuda_workspace ws;
  const size_t first_bytes = cuda_align_up((size_t)(B * tiles) * sizeof(int64_t));
  s = cuda_ws_alloc(st, stream, first_bytes + (size_t)(B * K + 1) * sizeof(int64_t), &ws,
                    "tilepack_backward: the tile lists");
  if (s != APX_OK) return s;
  int64_t *first = (int64_t *)ws.ptr, *next = (int64_t *)((char *)ws.ptr + first_bytes);
  cuda_geom g = cuda_geom_1d(B * tiles, TILEPACK_BACKWARD_THREADS);
  if (a->idx->dtype == APX_DTYPE_I64)
    tilepack_backward_link<int64_t><<<g.blocks, g.threads, 0, stream>>>(
        (const int64_t *)a->idx->data, B, K, tiles, first, next);
  else
    tilepack_backward_link<int32_t><<<g.blocks, g.threads, 0, stream>>>(
        (const int32_t *)a->idx->data, B, K, tiles, first, next);
  switch (gf->dtype) {
  case APX_DTYPE_F16: launch_sum<__half>(a, first, next, stream); break;
  case APX_DTYPE_BF16: launch_sum<__nv_bfloat16>(a, first, next, stream); break;
  default: launch_sum<float>(a, first, next, stream); break;
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tilepack_backward: launch");
  return APX_OK;
}
