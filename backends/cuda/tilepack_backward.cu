/* SPDX-License-Identifier: Apache-2.0 */
/* tilepack_backward on CUDA (docs/ops.md, tilepack_backward): grad_features
 * = zeros, then grad_out[b,k] added onto tile idx[b,k] in ascending k.
 *
 * Two kernels and no float atomics, so the result is the same bits on every
 * run and the cpu backend's: (1) one block per batch row buckets its K ids
 * by tile id, a counting sort: counts per id (integer atomics: the count is
 * the same whatever their order), an exclusive scan into start[b][id], then
 * the k placed in ascending order inside their id's bucket (the block's
 * warps take turns, a warp ranking equal ids among its lanes with
 * __match_any_sync), so bucket id lists its k in ascending order:
 * order[b][start[b][id] .. start[b][id+1]-1]. The counts live in shared
 * memory where the row's tile ids fit (TILEPACK_BACKWARD_SMEM_TILES), in
 * the workspace otherwise. (2) each grad_features element sums its tile's
 * bucket in fp32 from zero, in that order, and is rounded once: a 2-D grid
 * over the map's rows (b, c, y) and x, positions decoded with 32-bit
 * multiplies where the rows fit, a thread taking 16 bytes of a row (one
 * bucket walk for 8 f16/bf16 or 4 f32 pixels) where the tile width and the
 * pointers' alignment allow, one pixel otherwise; a 1-D grid with 64-bit
 * division where the rows do not fit. The index values are checked by the pre-pass (cuda_check_run,
 * every validate mode's rule); the bucketing skips an id outside
 * [0, tiles), so whatever the values (validate = off) nothing is read or
 * written out of bounds.
 *
 * A small index (B*K <= CUDA_INLINE_CHECK_MAX) takes one launch instead
 * of three (check, bucketing, sum): tilepack_backward_small, a block per
 * band of the map (b, c, tile row ty: t rows of W pixels, contiguous).
 * Its first warp lists the row's k whose id lies in tile row ty, in
 * ascending k (a ballot of 32 ids at a time), in shared memory; each
 * thread then takes a pixel (16 bytes of pixels where the tile width and
 * the pointers allow) and adds the listed tiles over its column in list
 * order, from zero in fp32: the same sums in the same order, so the same
 * bits. In validate=device the first block checks every id
 * (cuda_check_own: grad_features is never an alias). */
#include "cuda_backend.h"

#define TILEPACK_BACKWARD_THREADS 256
/* the one-launch form's block (a band's pixels) */
#define TILEPACK_SMALL_THREADS 128

#define TILEPACK_BACKWARD_BUCKET_THREADS 1024
#define TILEPACK_BACKWARD_BUCKET_WARPS (TILEPACK_BACKWARD_BUCKET_THREADS / 32)
/* tile ids whose counts fit the default 48 KB of shared memory */
#define TILEPACK_BACKWARD_SMEM_TILES ((48 * 1024 - 8 * TILEPACK_BACKWARD_BUCKET_WARPS) / 8)

/* (1) row b = blockIdx.x (a grid-stride loop over rows): start[b][0 ..
 * tiles] (tiles + 1 entries) and order[b][0 .. K-1]; `counts` is the
 * row's tiles entries of global scratch, used when smem_counts is 0. */
template <typename I>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_BUCKET_THREADS)
    tilepack_backward_bucket(const I *__restrict__ idx, int64_t B, int64_t K, int64_t tiles,
                             int smem_counts, unsigned long long *__restrict__ counts_ws,
                             int64_t *__restrict__ start, int64_t *__restrict__ order) {
  extern __shared__ unsigned long long smem_cnt[];
  __shared__ unsigned long long warp_sums[TILEPACK_BACKWARD_BUCKET_WARPS];
  const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
  const unsigned nthreads = blockDim.x, nwarps = nthreads >> 5;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    unsigned long long *cnt = smem_counts ? smem_cnt : counts_ws + b * tiles;
    const I *row = idx + b * K;
    int64_t *row_start = start + b * (tiles + 1), *row_order = order + b * K;
    for (int64_t i = tid; i < tiles; i += nthreads) cnt[i] = 0;
    __syncthreads();
    for (int64_t k = tid; k < K; k += nthreads) {
      const int64_t id = (int64_t)row[k];
      if (id >= 0 && id < tiles) atomicAdd(&cnt[id], 1ull);
    }
    __syncthreads();
    /* exclusive scan: thread tid owns ids [tid*per, (tid+1)*per) */
    const int64_t per = (tiles + nthreads - 1) / nthreads;
    const int64_t lo = (int64_t)tid * per < tiles ? (int64_t)tid * per : tiles;
    const int64_t hi = lo + per < tiles ? lo + per : tiles;
    unsigned long long mine = 0;
    for (int64_t i = lo; i < hi; i++) mine += cnt[i];
    unsigned long long incl = mine;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      unsigned long long v = __shfl_up_sync(0xffffffffu, incl, d);
      if ((int)lane >= d) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    unsigned long long before = incl - mine;
    for (unsigned w = 0; w < warp; w++) before += warp_sums[w];
    /* counts -> each bucket's first free slot, and the starts */
    for (int64_t i = lo; i < hi; i++) {
      const unsigned long long c = cnt[i];
      row_start[i] = (int64_t)before;
      cnt[i] = before;
      before += c;
    }
    if (tid == nthreads - 1) row_start[tiles] = (int64_t)before;
    __syncthreads();
    /* stable placement: chunks of nthreads k in order, the warps of a
     * chunk in turn; equal ids in a warp take consecutive slots by lane */
    for (int64_t base = 0; base < K; base += nthreads) {
      const int64_t k = base + tid, left = (K - base + 31) / 32;
      const unsigned turns = left < (int64_t)nwarps ? (unsigned)left : nwarps;
      int64_t id = k < K ? (int64_t)row[k] : -1;
      if (id < 0 || id >= tiles) id = -1;
      const unsigned peers = __match_any_sync(0xffffffffu, (unsigned long long)id);
      const unsigned below = peers & ((1u << lane) - 1u);
      const unsigned rank = __popc(below);
      for (unsigned w = 0; w < turns; w++) {
        unsigned long long slot = 0;
        if (warp == w && id >= 0) {
          slot = cnt[id] + rank;
          row_order[slot] = k;
        }
        __syncwarp();
        if (warp == w && id >= 0 && below == 0) cnt[id] += (unsigned long long)__popc(peers);
        __syncthreads();
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_THREADS)
    tilepack_backward_sum(const T *__restrict__ grad_out, T *__restrict__ grad_features,
                          const int64_t *__restrict__ start, const int64_t *__restrict__ order,
                          int64_t C, int64_t H, int64_t W, int64_t K, int64_t t, int64_t numel) {
  const int64_t tiles = (H / t) * (W / t);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t x = i % W, y = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);
    const int64_t id = (y / t) * (W / t) + x / t, dy = y % t, dx = x % t;
    const int64_t *bucket = start + b * (tiles + 1) + id, *ks = order + b * K;
    float sum = 0.0f;
    for (int64_t j = bucket[0], end = bucket[1]; j < end; j++)
      sum += cuda_dt<T>::load(grad_out + (((b * K + ks[j]) * C + c) * t + dy) * t + dx);
    grad_features[i] = cuda_dt<T>::from_f(sum);
  }
}

/* (2) over rows r = (b*C + c)*H + y and x in the row; rows < 2^31 */
template <typename T>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_THREADS)
    tilepack_backward_rows(const T *__restrict__ grad_out, T *__restrict__ grad_features,
                           const int64_t *__restrict__ start, const int64_t *__restrict__ order,
                           cuda_fastdiv fH, cuda_fastdiv fC, cuda_fastdiv ft, int64_t rows,
                           uint32_t W, uint32_t gw, int64_t K, int64_t tiles) {
  const int64_t C = fC.d, t = ft.d;
  CUDA_FOR_OUTER(r, rows) {
    const uint32_t bc = fH.div((uint32_t)r), y = (uint32_t)r - bc * fH.d;
    const uint32_t b = fC.div(bc), c = bc - b * fC.d;
    const uint32_t ty = ft.div(y), dy = y - ty * ft.d;
    const int64_t *head = start + (int64_t)b * (tiles + 1) + (int64_t)ty * gw;
    const int64_t *ks = order + (int64_t)b * K;
    const T *src = grad_out + ((int64_t)b * K * C + c) * t * t + (int64_t)dy * t;
    T *dst = grad_features + r * W;
    CUDA_FOR_INNER(x, W) {
      const uint32_t tx = ft.div(x), dx = x - tx * ft.d;
      float sum = 0.0f;
      for (int64_t j = head[tx], end = head[tx + 1]; j < end; j++)
        sum += cuda_dt<T>::load(src + ks[j] * C * t * t + dx);
      dst[x] = cuda_dt<T>::from_f(sum);
    }
  }
}

/* (2) as tilepack_backward_rows, 16 bytes of a row a thread (V elements,
 * V = 16 / element size), where t is a multiple of V and grad_out and
 * grad_features are 16-byte aligned: every tile row's V-element piece then
 * starts 16-byte aligned in both, and one bucket walk serves V pixels. */
template <typename T>
__global__ void __launch_bounds__(TILEPACK_BACKWARD_THREADS)
    tilepack_backward_rows_vec(const T *__restrict__ grad_out, T *__restrict__ grad_features,
                               const int64_t *__restrict__ start,
                               const int64_t *__restrict__ order, cuda_fastdiv fH,
                               cuda_fastdiv fC, cuda_fastdiv ft, int64_t rows, uint32_t W,
                               uint32_t gw, int64_t K, int64_t tiles) {
  constexpr int V = (int)(sizeof(uint4) / sizeof(T));
  const int64_t C = fC.d, t = ft.d;
  const uint32_t pieces = W / V;
  CUDA_FOR_OUTER(r, rows) {
    const uint32_t bc = fH.div((uint32_t)r), y = (uint32_t)r - bc * fH.d;
    const uint32_t b = fC.div(bc), c = bc - b * fC.d;
    const uint32_t ty = ft.div(y), dy = y - ty * ft.d;
    const int64_t *head = start + (int64_t)b * (tiles + 1) + (int64_t)ty * gw;
    const int64_t *ks = order + (int64_t)b * K;
    const T *src = grad_out + ((int64_t)b * K * C + c) * t * t + (int64_t)dy * t;
    T *dst = grad_features + r * W;
    CUDA_FOR_INNER(p, pieces) {
      const uint32_t x = p * V, tx = ft.div(x), dx = x - tx * ft.d;
      float sum[V];
#pragma unroll
      for (int e = 0; e < V; e++) sum[e] = 0.0f;
      for (int64_t j = head[tx], end = head[tx + 1]; j < end; j++) {
        const uint4 w = *reinterpret_cast<const uint4 *>(src + ks[j] * C * t * t + dx);
        const T *v = reinterpret_cast<const T *>(&w);
#pragma unroll
        for (int e = 0; e < V; e++) sum[e] += cuda_dt<T>::to_f(v[e]);
      }
      uint4 o;
      T *ov = reinterpret_cast<T *>(&o);
#pragma unroll
      for (int e = 0; e < V; e++) ov[e] = cuda_dt<T>::from_f(sum[e]);
      *reinterpret_cast<uint4 *>(dst + x) = o;
    }
  }
}

/* The one-launch form: bands = B*C*gh (a grid-stride loop), V pixels a
 * thread (1, or 16 bytes' worth where t % V == 0 and both tensors are
 * 16-byte aligned), t*W < 2^31, B*K <= CUDA_INLINE_CHECK_MAX. */
template <typename T, typename I, int V>
__global__ void __launch_bounds__(TILEPACK_SMALL_THREADS)
    tilepack_backward_small(const T *__restrict__ grad_out, T *__restrict__ grad_features,
                            const I *__restrict__ idx, int64_t bands, int64_t C, int64_t gh,
                            int W, int K, int t, cuda_inline_check ic) {
  __shared__ int s_k[CUDA_INLINE_CHECK_MAX], s_tx[CUDA_INLINE_CHECK_MAX];
  __shared__ int s_len;
  const int lane = (int)(threadIdx.x & 31);
  const int gw = W / t;
  const int64_t tiles = gh * gw;
  if (ic.record && blockIdx.x == 0) /* whole warps: cuda_warp_publish */
    for (int64_t base = 0; base < ic.desc.count; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      const bool bad = i < ic.desc.count && cuda_entry_out_of_range(ic.desc, i);
      cuda_warp_publish(ic, bad ? (unsigned long long)i : ~0ULL);
    }
  const int band_px = t * W, pieces = band_px / V;
  for (int64_t band = blockIdx.x; band < bands; band += gridDim.x) {
    const int64_t bc = band / gh, b = bc / C, c = bc - b * C;
    const int ty = (int)(band - bc * gh);
    __syncthreads(); /* the previous band's list is no longer read */
    if (threadIdx.x < 32) {
      int len = 0;
      for (int base = 0; base < K; base += 32) {
        const int k = base + lane;
        const int64_t id = k < K ? (int64_t)idx[b * K + k] : -1;
        const bool mine = id >= 0 && id < tiles && id / gw == ty;
        const unsigned hits = __ballot_sync(0xffffffffu, mine);
        if (mine) {
          const int at = len + __popc(hits & ((1u << lane) - 1u));
          s_k[at] = k;
          s_tx[at] = (int)(id - (int64_t)ty * gw);
        }
        len += __popc(hits);
      }
      if (lane == 0) s_len = len;
    }
    __syncthreads();
    const int len = s_len;
    const T *src = grad_out + (b * K * C + c) * t * t; /* tile k: + k*C*t*t */
    T *dst = grad_features + band * band_px;
    for (int q = threadIdx.x; q < pieces; q += blockDim.x) {
      const int e = q * V, dy = e / W, x = e - dy * W, tx = x / t, dx = x - tx * t;
      float sum[V];
#pragma unroll
      for (int v = 0; v < V; v++) sum[v] = 0.0f;
      for (int j = 0; j < len; j++) {
        if (s_tx[j] != tx) continue;
        const T *at = src + (int64_t)s_k[j] * C * t * t + dy * t + dx;
        if (V == 1) {
          sum[0] += cuda_dt<T>::load(at);
        } else {
          const uint4 w = *reinterpret_cast<const uint4 *>(at);
          const T *wv = reinterpret_cast<const T *>(&w);
#pragma unroll
          for (int v = 0; v < V; v++) sum[v] += cuda_dt<T>::to_f(wv[v]);
        }
      }
      if (V == 1) {
        dst[e] = cuda_dt<T>::from_f(sum[0]);
      } else {
        uint4 o;
        T *ov = reinterpret_cast<T *>(&o);
#pragma unroll
        for (int v = 0; v < V; v++) ov[v] = cuda_dt<T>::from_f(sum[v]);
        *reinterpret_cast<uint4 *>(dst + e) = o;
      }
    }
  }
}

template <typename T, typename I>
static void launch_small(const apx_tilepack_backward_args *a, const cuda_inline_check &ic,
                         cudaStream_t s) {
  const apx_tensor *gf = a->grad_features;
  const int64_t B = gf->shape[0], C = gf->shape[1], H = gf->shape[2], W = gf->shape[3];
  const int64_t K = a->grad_out->shape[1], t = a->grad_out->shape[3];
  const int64_t bands = B * C * (H / t);
  const unsigned blocks = bands < 65536 ? (unsigned)bands : 65536u;
  const T *go = (const T *)a->grad_out->data;
  T *out = (T *)gf->data;
  const I *idx = (const I *)a->idx->data;
  constexpr int V = (int)(sizeof(uint4) / sizeof(T));
  if (t % V == 0 && ((uintptr_t)go & 15u) == 0 && ((uintptr_t)out & 15u) == 0)
    tilepack_backward_small<T, I, V><<<blocks, TILEPACK_SMALL_THREADS, 0, s>>>(
        go, out, idx, bands, C, H / t, (int)W, (int)K, (int)t, ic);
  else
    tilepack_backward_small<T, I, 1><<<blocks, TILEPACK_SMALL_THREADS, 0, s>>>(
        go, out, idx, bands, C, H / t, (int)W, (int)K, (int)t, ic);
}

template <typename T>
static void launch_small_idx(const apx_tilepack_backward_args *a, const cuda_inline_check &ic,
                             cudaStream_t s) {
  if (a->idx->dtype == APX_DTYPE_I64)
    launch_small<T, int64_t>(a, ic, s);
  else
    launch_small<T, int32_t>(a, ic, s);
}

template <typename T>
static void launch_sum(const apx_tilepack_backward_args *a, const int64_t *start,
                       const int64_t *order, cudaStream_t s) {
  const apx_tensor *gf = a->grad_features;
  const int64_t numel = apx_backend_numel(gf);
  const int64_t C = gf->shape[1], H = gf->shape[2], W = gf->shape[3];
  const int64_t K = a->grad_out->shape[1], t = a->grad_out->shape[3];
  const int64_t rows = gf->shape[0] * C * H;
  if (rows < 0x7fffffffLL && W < 0x7fffffffLL && C < 0x7fffffffLL) {
    const int64_t V = (int64_t)(16 / sizeof(T));
    if (t % V == 0 && ((uintptr_t)a->grad_out->data & 15u) == 0 &&
        ((uintptr_t)gf->data & 15u) == 0) {
      const int64_t pieces = W / V;
      const unsigned threads = pieces >= TILEPACK_BACKWARD_THREADS
                                   ? TILEPACK_BACKWARD_THREADS
                                   : (unsigned)((pieces + 31) / 32 * 32);
      cuda_geom2 g2 = cuda_geom_2d(rows, pieces, threads);
      tilepack_backward_rows_vec<T><<<g2.grid, g2.block, 0, s>>>(
          (const T *)a->grad_out->data, (T *)gf->data, start, order,
          cuda_fastdiv_make((uint32_t)H), cuda_fastdiv_make((uint32_t)C),
          cuda_fastdiv_make((uint32_t)t), rows, (uint32_t)W, (uint32_t)(W / t), K,
          (H / t) * (W / t));
      return;
    }
    /* threads: W rounded up to a warp, at most a block's 256 */
    const unsigned threads =
        W >= TILEPACK_BACKWARD_THREADS ? TILEPACK_BACKWARD_THREADS : (unsigned)((W + 31) / 32 * 32);
    cuda_geom2 g2 = cuda_geom_2d(rows, W, threads);
    tilepack_backward_rows<T><<<g2.grid, g2.block, 0, s>>>(
        (const T *)a->grad_out->data, (T *)gf->data, start, order,
        cuda_fastdiv_make((uint32_t)H), cuda_fastdiv_make((uint32_t)C),
        cuda_fastdiv_make((uint32_t)t), rows, (uint32_t)W, (uint32_t)(W / t), K,
        (H / t) * (W / t));
    return;
  }
  cuda_geom g = cuda_geom_1d(numel, TILEPACK_BACKWARD_THREADS);
  tilepack_backward_sum<T><<<g.blocks, g.threads, 0, s>>>(
      (const T *)a->grad_out->data, (T *)gf->data, start, order, gf->shape[1], gf->shape[2],
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
  if (B * K <= CUDA_INLINE_CHECK_MAX && t * gf->shape[3] < 0x7fffffffLL) {
    cuda_inline_check ic;
    memset(&ic, 0, sizeof ic);
    if (K > 0) {
      cuda_check_desc d;
      cuda_check_init(&d, APX_OP_TILEPACK_BACKWARD, "idx", a->idx);
      d.lo = 0;
      d.hi = tiles - 1;
      if (!cuda_check_own(st, dev, &d, &ic)) {
        cuda_checked chk; /* eager: checked (and refused) here; off: nothing */
        s = cuda_check_run(st, dev, stream, &d, 0, &chk);
        if (s != APX_OK) return s;
      }
    }
    switch (gf->dtype) {
    case APX_DTYPE_F16: launch_small_idx<__half>(a, ic, stream); break;
    case APX_DTYPE_BF16: launch_small_idx<__nv_bfloat16>(a, ic, stream); break;
    default: launch_small_idx<float>(a, ic, stream); break;
    }
    CUDA_LAUNCHED(st, "tilepack_backward: launch");
    return APX_OK;
  }
  if (K > 0) {
    s = cuda_check_index_values(st, dev, stream, APX_OP_TILEPACK_BACKWARD, "idx", a->idx, 0,
                                tiles - 1, 0);
    if (s != APX_OK) return s;
  }
  /* the workspace: start [B][tiles+1], order [B][K] (at least one entry),
   * and the counts [B][tiles] where they do not fit shared memory */
  const int smem_counts = tiles <= TILEPACK_BACKWARD_SMEM_TILES;
  cuda_workspace ws;
  const size_t start_bytes = cuda_align_up((size_t)(B * (tiles + 1)) * sizeof(int64_t));
  const size_t order_bytes = cuda_align_up((size_t)(B * K + 1) * sizeof(int64_t));
  const size_t counts_bytes = smem_counts ? 0 : (size_t)(B * tiles) * sizeof(unsigned long long);
  s = cuda_ws_alloc(st, stream, start_bytes + order_bytes + counts_bytes, &ws,
                    "tilepack_backward: the tile buckets");
  if (s != APX_OK) return s;
  int64_t *start = (int64_t *)ws.ptr, *order = (int64_t *)((char *)ws.ptr + start_bytes);
  unsigned long long *counts =
      smem_counts ? NULL : (unsigned long long *)((char *)ws.ptr + start_bytes + order_bytes);
  /* threads: the larger of K and tiles rounded up to a warp, 32 to 1024 */
  const int64_t span = K > tiles ? K : tiles;
  const unsigned threads = span >= TILEPACK_BACKWARD_BUCKET_THREADS
                               ? TILEPACK_BACKWARD_BUCKET_THREADS
                               : (unsigned)((span + 31) / 32 * 32 < 32 ? 32 : (span + 31) / 32 * 32);
  const unsigned rows = B < 65535 ? (unsigned)B : 65535u;
  const size_t smem = smem_counts ? (size_t)tiles * sizeof(unsigned long long) : 0;
  if (a->idx->dtype == APX_DTYPE_I64)
    tilepack_backward_bucket<int64_t><<<rows, threads, smem, stream>>>(
        (const int64_t *)a->idx->data, B, K, tiles, smem_counts, counts, start, order);
  else
    tilepack_backward_bucket<int32_t><<<rows, threads, smem, stream>>>(
        (const int32_t *)a->idx->data, B, K, tiles, smem_counts, counts, start, order);
  switch (gf->dtype) {
  case APX_DTYPE_F16: launch_sum<__half>(a, start, order, stream); break;
  case APX_DTYPE_BF16: launch_sum<__nv_bfloat16>(a, start, order, stream); break;
  default: launch_sum<float>(a, start, order, stream); break;
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tilepack_backward: launch");
  return APX_OK;
}
