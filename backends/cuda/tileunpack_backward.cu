/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack_backward on CUDA (docs/ops.md, tileunpack_backward): the
 * gradients of tileunpack's base and packed from grad_out.
 *
 * The weights depend on the placement and the priority only. A tile
 * pixel's weight is a * om^j (blend) or [j = 0] (override), j the number
 * of tiles over that pixel with a higher key; base's is om^n (blend) or
 * [n = 0], n the tiles over the pixel. Two kernels count them, one thread
 * per tile pixel and one per map pixel, each scanning its batch row's K
 * placements (no sort, no atomics), and form om^j by j products from 1, as
 * the cpu backend's descending visit does: the same fp32 weights, so the
 * results are the cpu backend's bits. Two more scale grad_out (override: a
 * copy or a zero). Where the sizes fit 32 bits (the usual case) the
 * placements are first decoded once into (y0, x0, key) and the counting
 * kernels read them from shared memory a block-sized chunk at a time, and
 * the scaling kernels run on 2-D grids whose positions are decoded with
 * 32-bit multiplies; the counts, the weights and so the bits are the same. The placements are checked by the pre-pass
 * (cuda_check_run: ids or origins in range, the levels' span; it also
 * gives the levels' minimum); origins are clamped into the map when read,
 * so nothing is read out of bounds whatever the values.
 *
 * A small index (B*K <= CUDA_INLINE_CHECK_MAX) takes one launch instead
 * of six (check, placements, two counting kernels, two scaling kernels):
 * tub_small. A block takes 256 pixels of batch row b (of the map for
 * grad_base, of the row's tiles for grad_packed) and TUB_SMALL_CHANNELS
 * channels: it decodes the row's placements into shared memory (the
 * levels' minimum found by the block itself), counts each pixel's tiles
 * as the counting kernels do, forms the weight by the same products, and
 * scales its channels' gradients with it: the same weights, so the same
 * bits. In validate=device every block checks the placements and levels
 * (cuda_block_check) before it stores anything. */
#include "cuda_backend.h"

#define TILEUNPACK_BACKWARD_THREADS 256
/* channels a block of the one-launch form */
#define TUB_SMALL_CHANNELS 16

struct tub_geometry {
  int64_t B, C, H, W, K, t;
  int blend, order_bits;
  float a, om;
  const void *idx, *origins, *levels;
  int idx64, origins64, levels64;
  const long long *lmin; /* device: the levels' minimum (levels only) */
};

static __device__ __forceinline__ void tub_origin(const tub_geometry &g, int64_t bk,
                                                  int64_t *y0, int64_t *x0) {
  if (g.origins) {
    *y0 = cuda_load_index(g.origins, g.origins64, 2 * bk);
    *x0 = cuda_load_index(g.origins, g.origins64, 2 * bk + 1);
  } else {
    const int64_t id = cuda_load_index(g.idx, g.idx64, bk), gw = g.W / g.t;
    *y0 = (id / gw) * g.t;
    *x0 = (id % gw) * g.t;
  }
  *y0 = *y0 < 0 ? 0 : *y0 > g.H - g.t ? g.H - g.t : *y0; /* bad values: reported, read in bounds */
  *x0 = *x0 < 0 ? 0 : *x0 > g.W - g.t ? g.W - g.t : *x0;
}

/* docs/ops.md, tileunpack (priority) */
static __device__ __forceinline__ int64_t tub_key(const tub_geometry &g, int64_t b, int64_t k) {
  if (!g.levels) return k;
  const int64_t level = cuda_load_index(g.levels, g.levels64, b * g.K + k);
  return (int64_t)(((uint64_t)(level - (int64_t)*g.lmin) << g.order_bits) + (uint64_t)k);
}

/* The tiles of row b over pixel (y, x) whose key exceeds `above` (-1: all). */
static __device__ int64_t tub_count(const tub_geometry &g, int64_t b, int64_t y, int64_t x,
                                    int64_t above) {
  int64_t n = 0;
  for (int64_t k = 0; k < g.K; k++) {
    int64_t y0, x0;
    tub_origin(g, b * g.K + k, &y0, &x0);
    if (y >= y0 && y < y0 + g.t && x >= x0 && x < x0 + g.t && (above < 0 || tub_key(g, b, k) > above))
      n++;
  }
  return n;
}

static __device__ __forceinline__ float tub_weight(const tub_geometry &g, int64_t j, float first) {
  if (!g.blend) return j == 0 ? 1.0f : 0.0f;
  float m = 1.0f;
  for (int64_t i = 0; i < j; i++) m = m * g.om;
  return first * m;
}

__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_base_weights(tub_geometry g, float *__restrict__ base_w) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= g.B * g.H * g.W) return;
  const int64_t b = i / (g.H * g.W), p = i % (g.H * g.W);
  base_w[i] = tub_weight(g, tub_count(g, b, p / g.W, p % g.W, -1), 1.0f);
}

__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_tile_weights(tub_geometry g, float *__restrict__ tile_w) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= g.B * g.K * g.t * g.t) return;
  const int64_t bk = i / (g.t * g.t), d = i % (g.t * g.t), b = bk / g.K, k = bk % g.K;
  int64_t y0, x0;
  tub_origin(g, bk, &y0, &x0);
  const int64_t above = tub_count(g, b, y0 + d / g.t, x0 + d % g.t, tub_key(g, b, k));
  /* blend: a * m, m = om^above (the cpu backend's a * m) */
  tile_w[i] = g.blend ? g.a * tub_weight(g, above, 1.0f) : tub_weight(g, above, 1.0f);
}

template <typename T>
static __device__ __forceinline__ T tub_scale(const tub_geometry &g, T grad, float w) {
  if (g.blend) return cuda_dt<T>::from_f(cuda_dt<T>::to_f(grad) * w);
  return w != 0.0f ? grad : cuda_dt<T>::from_f(0.0f);
}

template <typename T>
__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_apply(tub_geometry g, const T *__restrict__ grad_out, const float *__restrict__ base_w,
              const float *__restrict__ tile_w, T *__restrict__ grad_base,
              T *__restrict__ grad_packed) {
  const int64_t plane = g.H * g.W, n_base = g.B * g.C * plane;
  const int64_t n_packed = g.B * g.K * g.C * g.t * g.t;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_base + n_packed;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (i < n_base) {
      const int64_t b = i / (g.C * plane);
      grad_base[i] = tub_scale<T>(g, grad_out[i], base_w[b * plane + i % plane]);
      continue;
    }
    const int64_t e = i - n_base, d = e % (g.t * g.t), bkc = e / (g.t * g.t);
    const int64_t c = bkc % g.C, bk = bkc / g.C, b = bk / g.K;
    int64_t y0, x0;
    tub_origin(g, bk, &y0, &x0);
    const T grad = grad_out[(b * g.C + c) * plane + (y0 + d / g.t) * g.W + x0 + d % g.t];
    grad_packed[e] = tub_scale<T>(g, grad, tile_w[bk * g.t * g.t + d]);
  }
}

/* ---- the fast path: placements decoded once ------------------------------ */

struct tub_place_t {
  int y0, x0;
  long long key;
};

__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_place(tub_geometry g, tub_place_t *__restrict__ pl) {
  const int64_t bk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (bk >= g.B * g.K) return;
  int64_t y0, x0;
  tub_origin(g, bk, &y0, &x0);
  pl[bk].y0 = (int)y0;
  pl[bk].x0 = (int)x0;
  pl[bk].key = (long long)tub_key(g, bk / g.K, bk % g.K);
}

/* The tiles of a chunk-loaded row over (y, x) whose key exceeds `above`
 * (-1: all): every thread of the block calls it (it synchronises). */
static __device__ __forceinline__ int64_t tub_count_shared(const tub_place_t *__restrict__ row,
                                                           int64_t K, int t, int y, int x,
                                                           long long above) {
  __shared__ tub_place_t sh[TILEUNPACK_BACKWARD_THREADS];
  int64_t n = 0;
  for (int64_t k0 = 0; k0 < K; k0 += TILEUNPACK_BACKWARD_THREADS) {
    __syncthreads();
    if (k0 + threadIdx.x < K) sh[threadIdx.x] = row[k0 + threadIdx.x];
    __syncthreads();
    const int lim = K - k0 < TILEUNPACK_BACKWARD_THREADS ? (int)(K - k0) : TILEUNPACK_BACKWARD_THREADS;
    for (int kk = 0; kk < lim; kk++)
      n += (unsigned)(y - sh[kk].y0) < (unsigned)t && (unsigned)(x - sh[kk].x0) < (unsigned)t &&
           sh[kk].key > above;
  }
  return n;
}

/* base's weights: y = row b, x = pixel p in H*W */
__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_base_weights_fast(tub_geometry g, const tub_place_t *__restrict__ pl, cuda_fastdiv fW,
                          float *__restrict__ base_w) {
  const uint32_t HW = (uint32_t)(g.H * g.W);
  CUDA_FOR_OUTER(b, g.B) {
    for (uint32_t p0 = blockIdx.x * blockDim.x; p0 < HW; p0 += gridDim.x * blockDim.x) {
      const uint32_t p = p0 + threadIdx.x, y = fW.div(p), x = p - y * fW.d;
      const int64_t n = tub_count_shared(pl + b * g.K, g.K, (int)g.t, (int)y, (int)x, -1);
      if (p < HW) base_w[b * HW + p] = tub_weight(g, n, 1.0f);
    }
  }
}

/* the tiles' weights: y = row b, x = k*t*t + d */
__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_tile_weights_fast(tub_geometry g, const tub_place_t *__restrict__ pl, cuda_fastdiv ftt,
                          cuda_fastdiv ft, float *__restrict__ tile_w) {
  const uint32_t n_row = (uint32_t)(g.K * g.t * g.t);
  CUDA_FOR_OUTER(b, g.B) {
    for (uint32_t i0 = blockIdx.x * blockDim.x; i0 < n_row; i0 += gridDim.x * blockDim.x) {
      const uint32_t i = i0 + threadIdx.x, k = ftt.div(i), d = i - k * ftt.d;
      const uint32_t dy = ft.div(d), dx = d - dy * ft.d;
      const bool on = i < n_row;
      const tub_place_t me = pl[b * g.K + (on ? k : 0)];
      const int64_t above = tub_count_shared(pl + b * g.K, g.K, (int)g.t, me.y0 + (int)dy,
                                             me.x0 + (int)dx, me.key);
      if (on) tile_w[b * n_row + i] = g.blend ? g.a * tub_weight(g, above, 1.0f) : tub_weight(g, above, 1.0f);
    }
  }
}

/* grad_base: y = plane (b, c), x = pixel */
template <typename T>
__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_apply_base(tub_geometry g, const T *__restrict__ grad_out, const float *__restrict__ base_w,
                   cuda_fastdiv fC, T *__restrict__ grad_base) {
  const uint32_t HW = (uint32_t)(g.H * g.W);
  CUDA_FOR_OUTER(bc, g.B * g.C) {
    const float *w = base_w + (int64_t)fC.div((uint32_t)bc) * HW;
    CUDA_FOR_INNER(p, HW) grad_base[bc * HW + p] = tub_scale<T>(g, grad_out[bc * HW + p], w[p]);
  }
}

/* grad_packed: y = (b, k, c), x = d in t*t */
template <typename T>
__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_apply_packed(tub_geometry g, const T *__restrict__ grad_out, const float *__restrict__ tile_w,
                     const tub_place_t *__restrict__ pl, cuda_fastdiv fC, cuda_fastdiv fK,
                     cuda_fastdiv ft, T *__restrict__ grad_packed) {
  const uint32_t tt = (uint32_t)(g.t * g.t);
  const int64_t plane = g.H * g.W;
  CUDA_FOR_OUTER(bkc, g.B * g.K * g.C) {
    const uint32_t bk = fC.div((uint32_t)bkc), c = (uint32_t)bkc - bk * fC.d, b = fK.div(bk);
    const tub_place_t o = pl[bk];
    const T *src = grad_out + ((int64_t)b * g.C + c) * plane + (int64_t)o.y0 * g.W + o.x0;
    CUDA_FOR_INNER(d, tt) {
      const uint32_t dy = ft.div(d), dx = d - dy * ft.d;
      grad_packed[bkc * tt + d] = tub_scale<T>(g, src[(int64_t)dy * g.W + dx], tile_w[(int64_t)bk * tt + d]);
    }
  }
}

template <typename T>
static void tub_launch_fast(const tub_geometry &g, const void *go, void *gb, void *gp,
                            const float *base_w, const float *tile_w, const tub_place_t *pl,
                            cudaStream_t s) {
  const unsigned T_ = TILEUNPACK_BACKWARD_THREADS;
  cuda_geom2 a = cuda_geom_2d(g.B * g.C, g.H * g.W, T_);
  tub_apply_base<T><<<a.grid, a.block, 0, s>>>(g, (const T *)go, base_w,
                                                cuda_fastdiv_make((uint32_t)g.C), (T *)gb);
  if (g.K == 0) return;
  const int64_t tt = g.t * g.t;
  const unsigned tp = tt >= T_ ? T_ : (unsigned)((tt + 31) / 32 * 32);
  cuda_geom2 b = cuda_geom_2d(g.B * g.K * g.C, tt, tp);
  tub_apply_packed<T><<<b.grid, b.block, 0, s>>>(
      g, (const T *)go, tile_w, pl, cuda_fastdiv_make((uint32_t)g.C),
      cuda_fastdiv_make((uint32_t)g.K), cuda_fastdiv_make((uint32_t)g.t), (T *)gp);
}

/* ---- the one-launch form of a small index ------------------------------- */

/* blocks [0, base_blocks): grad_base, block = (b * groups + group) *
 * base_chunks + chunk over H*W; the others: grad_packed, the same over
 * K*t*t with tile_chunks. B*K <= CUDA_INLINE_CHECK_MAX, sizes as
 * tub_fits_fast. */
template <typename T>
__global__ void __launch_bounds__(TILEUNPACK_BACKWARD_THREADS)
    tub_small(tub_geometry g, const T *__restrict__ grad_out, T *__restrict__ grad_base,
              T *__restrict__ grad_packed, uint32_t base_blocks, uint32_t base_chunks,
              uint32_t tile_chunks, uint32_t groups, cuda_fastdiv fW, cuda_fastdiv ft,
              cuda_inline_check ic, const int *bad) {
  __shared__ tub_place_t s_pl[CUDA_INLINE_CHECK_MAX];
  __shared__ unsigned s_rows[CUDA_INLINE_CHECK_MAX / 32];
  __shared__ long long s_lmin;
  if (cuda_block_check(ic) || cuda_call_failed(bad)) return; /* every block alike */
  const bool packed = blockIdx.x >= base_blocks;
  const uint32_t blk = packed ? blockIdx.x - base_blocks : blockIdx.x;
  const uint32_t chunks = packed ? tile_chunks : base_chunks;
  const uint32_t rest = blk / chunks, chunk = blk - rest * chunks;
  const uint32_t b = rest / groups, group = rest - b * groups;
  const int K = (int)g.K, t = (int)g.t;
  const int64_t c0 = (int64_t)group * TUB_SMALL_CHANNELS;
  const int cn = g.C - c0 < TUB_SMALL_CHANNELS ? (int)(g.C - c0) : TUB_SMALL_CHANNELS;
  const int64_t HW = g.H * g.W;
  const uint32_t i = chunk * blockDim.x + threadIdx.x;
  if (!packed) {
    /* A map pixel's count needs the origins only (no keys, so no levels'
     * minimum), and only of the tiles over the block's rows [y_lo, y_hi]:
     * a bit each in s_rows (ballots, a word a warp), the others can cover
     * none of its pixels. The count is the same. */
    const uint32_t i0 = chunk * blockDim.x;
    const uint32_t last = i0 + blockDim.x <= (uint32_t)HW ? i0 + blockDim.x - 1 : (uint32_t)HW - 1;
    const int y_lo = (int)fW.div(i0), y_hi = (int)fW.div(last);
    const int words = (K + 31) >> 5;
    for (int k0 = 0; k0 < K; k0 += blockDim.x) { /* uniform: every lane at the ballot */
      const int k = k0 + (int)threadIdx.x;
      bool over = false;
      if (k < K) {
        int64_t y0, x0;
        tub_origin(g, (int64_t)b * K + k, &y0, &x0);
        s_pl[k].y0 = (int)y0;
        s_pl[k].x0 = (int)x0;
        over = (int)y0 <= y_hi && (int)y0 + t > y_lo;
      }
      const unsigned word = __ballot_sync(0xffffffffu, over);
      const int w = (k0 >> 5) + (int)(threadIdx.x >> 5);
      if ((threadIdx.x & 31) == 0 && w < words) s_rows[w] = word;
    }
    __syncthreads();
    if (i >= (uint32_t)HW) return;
    const int y = (int)fW.div(i), x = (int)(i - (uint32_t)y * fW.d);
    int n = 0;
    for (int w = 0; w < words; w++)
      for (unsigned m = s_rows[w]; m != 0; m &= m - 1) {
        const int k = (w << 5) + __ffs((int)m) - 1;
        n += (unsigned)(y - s_pl[k].y0) < (unsigned)t && (unsigned)(x - s_pl[k].x0) < (unsigned)t;
      }
    const float wt = tub_weight(g, (int64_t)n, 1.0f);
    const int64_t at = ((int64_t)b * g.C + c0) * HW + i;
#pragma unroll
    for (int c = 0; c < TUB_SMALL_CHANNELS; c++)
      if (c < cn) grad_base[at + c * HW] = tub_scale<T>(g, grad_out[at + c * HW], wt);
    return;
  }
  if (g.levels) { /* the levels' minimum over the tensor (docs/ops.md, tileunpack (priority)) */
    if (threadIdx.x == 0) s_lmin = LLONG_MAX;
    __syncthreads();
    long long m = LLONG_MAX;
    for (int64_t e = threadIdx.x; e < g.B * g.K; e += blockDim.x) {
      const long long v = (long long)cuda_load_index(g.levels, g.levels64, e);
      m = v < m ? v : m;
    }
    atomicMin(&s_lmin, m);
    __syncthreads();
  }
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    int64_t y0, x0;
    tub_origin(g, (int64_t)b * K + k, &y0, &x0);
    long long key = k;
    if (g.levels) {
      const int64_t level = cuda_load_index(g.levels, g.levels64, (int64_t)b * K + k);
      key = (long long)(((uint64_t)(level - (int64_t)s_lmin) << g.order_bits) + (uint64_t)k);
    }
    s_pl[k].y0 = (int)y0;
    s_pl[k].x0 = (int)x0;
    s_pl[k].key = key;
  }
  __syncthreads();
  const uint32_t tt = (uint32_t)(t * t);
  if (i >= (uint32_t)K * tt) return;
  const uint32_t k = i / tt, d = i - k * tt, dy = ft.div(d), dx = d - dy * ft.d;
  const tub_place_t me = s_pl[k];
  const int y = me.y0 + (int)dy, x = me.x0 + (int)dx;
  int64_t above = 0;
  for (int j = 0; j < K; j++)
    above += (unsigned)(y - s_pl[j].y0) < (unsigned)t && (unsigned)(x - s_pl[j].x0) < (unsigned)t &&
             s_pl[j].key > me.key;
  /* blend: a * m, m = om^above (the cpu backend's a * m) */
  const float w = g.blend ? g.a * tub_weight(g, above, 1.0f) : tub_weight(g, above, 1.0f);
  const int64_t src = ((int64_t)b * g.C + c0) * HW + (int64_t)y * g.W + x;
  const int64_t dst = (((int64_t)b * K + k) * g.C + c0) * tt + d;
#pragma unroll
  for (int c = 0; c < TUB_SMALL_CHANNELS; c++)
    if (c < cn) grad_packed[dst + c * tt] = tub_scale<T>(g, grad_out[src + c * HW], w);
}

/* The one-launch form (tub_small) for g (ic: its in-kernel check, or none). */
template <typename T>
static apx_status tub_launch_small(cuda_state *st, const tub_geometry &g, const void *go, void *gb,
                                   void *gp, const cuda_inline_check &ic, cudaStream_t s) {
  const unsigned T_ = TILEUNPACK_BACKWARD_THREADS;
  const int64_t groups = (g.C + TUB_SMALL_CHANNELS - 1) / TUB_SMALL_CHANNELS;
  const int64_t base_chunks = (g.H * g.W + T_ - 1) / T_;
  const int64_t tile_chunks = (g.K * g.t * g.t + T_ - 1) / T_;
  const int64_t base_blocks = g.B * groups * base_chunks, tile_blocks = g.B * groups * tile_chunks;
  tub_small<T><<<(unsigned)(base_blocks + tile_blocks), T_, 0, s>>>(
      g, (const T *)go, (T *)gb, (T *)gp, (uint32_t)base_blocks, (uint32_t)base_chunks,
      (uint32_t)(tile_chunks > 0 ? tile_chunks : 1), (uint32_t)groups,
      cuda_fastdiv_make((uint32_t)g.W), cuda_fastdiv_make((uint32_t)g.t), ic, nullptr);
  CUDA_LAUNCHED(st, "tileunpack_backward: launch");
  return APX_OK;
}

/* whether every count and position of the fast path fits 32 bits */
static int tub_fits_fast(const tub_geometry &g) {
  const int64_t lim = 0x7fffffffLL;
  return g.H < lim / (g.W > 0 ? g.W : 1) && g.B * g.C < lim && g.B * g.K * g.C < lim &&
         g.K * g.t * g.t < lim && g.H < lim && g.W < lim;
}

/* a and 1-a rounded to the dtype (docs/ops.md, tileunpack_backward): a as
 * the cuda forward rounds blend_alpha (through fp32; the cpu backend rounds
 * the double directly, which differs only where the fp32 value falls on a
 * tie of the dtype), 1-a in fp32 then to the dtype. */
static float tub_round(float v, apx_dtype dt) {
  if (dt == APX_DTYPE_F16) return __half2float(__float2half_rn(v));
  if (dt == APX_DTYPE_BF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

/* The index check of the call: ids or origins in range, and the levels'
 * priority keys (validate.cu) */
static void tub_check_desc(const apx_tileunpack_backward_args *a, const tub_geometry &g,
                           cuda_check_desc *d) {
  if (a->idx) {
    cuda_check_init(d, APX_OP_TILEUNPACK_BACKWARD, "idx", a->idx);
    d->lo = 0;
    d->hi = (g.H / g.t) * (g.W / g.t) - 1;
  } else {
    cuda_check_init(d, APX_OP_TILEUNPACK_BACKWARD, "origins", a->origins);
    d->pairs = 1;
    d->count = g.B * g.K;
    d->lo = 0;
    d->hi = g.H - g.t;
    d->lo2 = 0;
    d->hi2 = g.W - g.t;
  }
  if (a->levels) {
    d->levels = a->levels->data;
    d->levels_is64 = g.levels64;
    d->levels_count = g.B * g.K;
    d->order_bits = g.order_bits;
    d->key_k = g.K;
  }
}

apx_status cuda_tileunpack_backward(void *state, const apx_tileunpack_backward_args *a,
                                    const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  const int dev = a->grad_out->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  const apx_tensor *go = a->grad_out;
  if (apx_backend_numel(go) == 0) return APX_OK;
  tub_geometry g;
  memset(&g, 0, sizeof g);
  g.B = go->shape[0];
  g.C = go->shape[1];
  g.H = go->shape[2];
  g.W = go->shape[3];
  g.K = (a->idx ? a->idx : a->origins)->shape[1];
  g.t = a->tile;
  g.blend = a->mode == APX_OVERLAP_BLEND;
  g.a = tub_round((float)a->blend_alpha, go->dtype);
  g.om = tub_round(1.0f - g.a, go->dtype);
  g.idx = a->idx ? a->idx->data : nullptr;
  g.idx64 = a->idx && a->idx->dtype == APX_DTYPE_I64;
  g.origins = a->origins ? a->origins->data : nullptr;
  g.origins64 = a->origins && a->origins->dtype == APX_DTYPE_I64;
  g.levels = a->levels ? a->levels->data : nullptr;
  g.levels64 = a->levels && a->levels->dtype == APX_DTYPE_I64;
  int bits = 0;
  for (int64_t v = g.K - 1; v > 0; v >>= 1) bits++;
  g.order_bits = bits < 1 ? 1 : bits;
  if (g.B * g.K <= CUDA_INLINE_CHECK_MAX && g.K > 0 && tub_fits_fast(g) &&
      g.B * ((g.C + TUB_SMALL_CHANNELS - 1) / TUB_SMALL_CHANNELS) *
              ((g.H * g.W + g.K * g.t * g.t) / TILEUNPACK_BACKWARD_THREADS + 2) <
          0x7fffffffLL) {
    cuda_check_desc d;
    tub_check_desc(a, g, &d);
    cuda_inline_check ic;
    if (!cuda_check_inline(st, dev, &d, &ic)) {
      cuda_checked chk; /* eager: checked (and refused) here; off: nothing */
      s = cuda_check_run(st, dev, stream, &d, 0, &chk);
      if (s != APX_OK) return s;
    }
    switch (go->dtype) {
    case APX_DTYPE_F16:
      return tub_launch_small<__half>(st, g, go->data, a->grad_base->data, a->grad_packed->data,
                                      ic, stream);
    case APX_DTYPE_BF16:
      return tub_launch_small<__nv_bfloat16>(st, g, go->data, a->grad_base->data,
                                             a->grad_packed->data, ic, stream);
    default:
      return tub_launch_small<float>(st, g, go->data, a->grad_base->data, a->grad_packed->data,
                                     ic, stream);
    }
  }
  if (g.K > 0) {
    cuda_check_desc d;
    tub_check_desc(a, g, &d);
    cuda_checked chk;
    memset(&chk, 0, sizeof chk);
    s = cuda_check_run(st, dev, stream, &d, a->levels != NULL, &chk);
    if (s != APX_OK) return s;
    g.lmin = chk.lmin;
  }
  const size_t base_bytes = cuda_align_up((size_t)(g.B * g.H * g.W) * sizeof(float));
  const size_t tile_bytes = cuda_align_up((size_t)(g.B * g.K * g.t * g.t + 1) * sizeof(float));
  const int fast = tub_fits_fast(g);
  const size_t place_bytes = fast ? (size_t)(g.B * g.K + 1) * sizeof(tub_place_t) : 0;
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream, base_bytes + tile_bytes + place_bytes, &ws,
                    "tileunpack_backward: weights");
  if (s != APX_OK) return s;
  float *base_w = (float *)ws.ptr, *tile_w = (float *)((char *)ws.ptr + base_bytes);
  const unsigned T_ = TILEUNPACK_BACKWARD_THREADS;
  if (fast) {
    tub_place_t *pl = (tub_place_t *)((char *)ws.ptr + base_bytes + tile_bytes);
    if (g.K > 0) {
      cuda_geom gp = cuda_geom_1d(g.B * g.K, T_);
      tub_place<<<gp.blocks, gp.threads, 0, stream>>>(g, pl);
    }
    cuda_geom2 gb = cuda_geom_2d(g.B, g.H * g.W, T_);
    tub_base_weights_fast<<<gb.grid, gb.block, 0, stream>>>(
        g, pl, cuda_fastdiv_make((uint32_t)g.W), base_w);
    if (g.K > 0) {
      cuda_geom2 gt = cuda_geom_2d(g.B, g.K * g.t * g.t, T_);
      tub_tile_weights_fast<<<gt.grid, gt.block, 0, stream>>>(
          g, pl, cuda_fastdiv_make((uint32_t)(g.t * g.t)), cuda_fastdiv_make((uint32_t)g.t),
          tile_w);
    }
    switch (go->dtype) {
    case APX_DTYPE_F16:
      tub_launch_fast<__half>(g, go->data, a->grad_base->data, a->grad_packed->data, base_w,
                              tile_w, pl, stream);
      break;
    case APX_DTYPE_BF16:
      tub_launch_fast<__nv_bfloat16>(g, go->data, a->grad_base->data, a->grad_packed->data,
                                     base_w, tile_w, pl, stream);
      break;
    default:
      tub_launch_fast<float>(g, go->data, a->grad_base->data, a->grad_packed->data, base_w,
                             tile_w, pl, stream);
      break;
    }
    cudaError_t err = cudaGetLastError();
    cuda_ws_free(&ws);
    if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack_backward: launch");
    return APX_OK;
  }
  cuda_geom gb = cuda_geom_1d(g.B * g.H * g.W, T_);
  tub_base_weights<<<gb.blocks, gb.threads, 0, stream>>>(g, base_w);
  if (g.K > 0) {
    cuda_geom gt = cuda_geom_1d(g.B * g.K * g.t * g.t, T_);
    tub_tile_weights<<<gt.blocks, gt.threads, 0, stream>>>(g, tile_w);
  }
  cuda_geom ga = cuda_geom_1d(apx_backend_numel(go) + apx_backend_numel(a->grad_packed), T_);
  switch (go->dtype) {
  case APX_DTYPE_F16:
    tub_apply<__half><<<ga.blocks, ga.threads, 0, stream>>>(
        g, (const __half *)go->data, base_w, tile_w, (__half *)a->grad_base->data,
        (__half *)a->grad_packed->data);
    break;
  case APX_DTYPE_BF16:
    tub_apply<__nv_bfloat16><<<ga.blocks, ga.threads, 0, stream>>>(
        g, (const __nv_bfloat16 *)go->data, base_w, tile_w, (__nv_bfloat16 *)a->grad_base->data,
        (__nv_bfloat16 *)a->grad_packed->data);
    break;
  default:
    tub_apply<float><<<ga.blocks, ga.threads, 0, stream>>>(
        g, (const float *)go->data, base_w, tile_w, (float *)a->grad_base->data,
        (float *)a->grad_packed->data);
    break;
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack_backward: launch");
  return APX_OK;
}
