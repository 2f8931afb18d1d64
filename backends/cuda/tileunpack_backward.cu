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
 * copy or a zero). The placements are checked by the pre-pass
 * (cuda_check_run: ids or origins in range, the levels' span; it also
 * gives the levels' minimum); origins are clamped into the map when read,
 * so nothing is read out of bounds whatever the values. */
#include "cuda_backend.h"

#define TILEUNPACK_BACKWARD_THREADS 256

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

/* a and 1-a rounded to the dtype (docs/ops.md, tileunpack_backward): a as
 * the cuda forward rounds blend_alpha (through fp32; the cpu backend rounds
 * the double directly, which differs only where the fp32 value falls on a
 * tie of the dtype), 1-a in fp32 then to the dtype. */
static float tub_round(float v, apx_dtype dt) {
  if (dt == APX_DTYPE_F16) return __half2float(__float2half_rn(v));
  if (dt == APX_DTYPE_BF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
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
  if (g.K > 0) {
    cuda_check_desc d;
    if (a->idx) {
      cuda_check_init(&d, APX_OP_TILEUNPACK_BACKWARD, "idx", a->idx);
      d.lo = 0;
      d.hi = (g.H / g.t) * (g.W / g.t) - 1;
    } else {
      cuda_check_init(&d, APX_OP_TILEUNPACK_BACKWARD, "origins", a->origins);
      d.pairs = 1;
      d.count = g.B * g.K;
      d.lo = 0;
      d.hi = g.H - g.t;
      d.lo2 = 0;
      d.hi2 = g.W - g.t;
    }
    if (a->levels) {
      d.levels = a->levels->data;
      d.levels_is64 = g.levels64;
      d.levels_count = g.B * g.K;
      d.order_bits = g.order_bits;
      d.key_k = g.K;
    }
    cuda_checked chk;
    memset(&chk, 0, sizeof chk);
    s = cuda_check_run(st, dev, stream, &d, a->levels != NULL, &chk);
    if (s != APX_OK) return s;
    g.lmin = chk.lmin;
  }
  const size_t base_bytes = cuda_align_up((size_t)(g.B * g.H * g.W) * sizeof(float));
  const size_t tile_bytes = (size_t)(g.B * g.K * g.t * g.t + 1) * sizeof(float);
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream, base_bytes + tile_bytes, &ws, "tileunpack_backward: weights");
  if (s != APX_OK) return s;
  float *base_w = (float *)ws.ptr, *tile_w = (float *)((char *)ws.ptr + base_bytes);
  const unsigned T_ = TILEUNPACK_BACKWARD_THREADS;
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
