/* SPDX-License-Identifier: Apache-2.0 */
/* fused_pack_op_unpack on CUDA (docs/ops.md, fused_pack_op_unpack): out = features, except
 * every pixel x of a selected tile becomes
 *   (x*value_scale + value_bias) * max(x*gate_scale + gate_bias, 0)
 * in fp32, rounded once. The transform always reads the original value, as
 * the reference's pack -> transform -> unpack does, so a duplicated id
 * (allowed when require_unique is off) writes the same value once.
 *
 * Two launches after the pre-pass: a tile-owner map [B, gh*gw] (the
 * largest k naming each tile), then one pass over the output: every
 * element when out is a separate tensor (a copy with the transform applied
 * to owned tiles), only the owned tiles when out aliases features. Small
 * calls (few ids, a small tile grid) take one launch instead
 * (fused_small_kernel). */
#include "cuda_backend.h"

struct fused_geometry {
  int64_t B, C, H, W, K, t, gw, tiles; /* tiles = gh*gw */
  int vec;                             /* elements per thread along x */
  int64_t work;                        /* in-place: (b, k, c, dy, x-group) items */
  cuda_geom launch;                    /* in place */
  int64_t planes, plane_groups;        /* copy: B*C planes of H*W/vec groups */
  cuda_fastdiv groups_per_row, tile;
  cuda_geom2 copy_launch;
  cuda_geom owner_launch;
};

struct fused_params {
  float vs, vb, gs, gb;
};

static __device__ __forceinline__ float fused_transform(float x, const fused_params &p) {
  float value = x * p.vs + p.vb;
  float gate = x * p.gs + p.gb;
  float relu = gate > 0.0f ? gate : (gate != gate ? gate : 0.0f); /* NaN stays NaN */
  return value * relu;
}

template <typename I>
__global__ void fused_owner_kernel(const I *__restrict__ idx, int *__restrict__ owner,
                                   fused_geometry g, const int *bad) {
  if (cuda_call_failed(bad)) return;
  CUDA_FOR(i, g.B * g.K) {
    int64_t b = i / g.K, k = i % g.K;
    int64_t id = (int64_t)idx[i];
    if (id >= 0 && id < g.tiles) atomicMax(&owner[b * g.tiles + id], (int)k);
  }
}

/* Separate output: every element, VEC at a time along x (VEC divides t). */
template <typename T, int VEC>
__global__ void fused_copy_kernel(const T *__restrict__ in, T *__restrict__ out,
                                  const int *__restrict__ owner, fused_geometry g,
                                  fused_params p, const int *bad) {
  struct alignas(sizeof(T) * VEC) pack { T v[VEC]; };
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C;
    const int *owner_b = owner + b * g.tiles;
    CUDA_FOR_INNER(i, g.plane_groups) {
      uint32_t y = g.groups_per_row.div(i), x = (i - y * g.groups_per_row.d) * VEC;
      int64_t w = plane * g.plane_groups + i;
      /* the verdict is read with the data, not before it: a thread moves
       * one vector, and a flag load ahead of it added its latency to every
       * thread (reading is harmless; only the store must wait for it) */
      int selected = owner_b[g.tile.div(y) * g.gw + g.tile.div(x)] >= 0;
      pack v = ((const pack *)in)[w];
      if (cuda_call_failed(bad)) return;
      if (selected) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
          v.v[j] = cuda_dt<T>::from_f(fused_transform(cuda_dt<T>::to_f(v.v[j]), p));
      }
      ((pack *)out)[w] = v;
    }
  }
}

/* Aliased output: only the owned tiles, in place. Work items are
 * (b, k, c, dy, x-group). */
template <typename T, typename I, int VEC>
__global__ void fused_inplace_kernel(T *data, const I *__restrict__ idx,
                                     const int *__restrict__ owner, fused_geometry g,
                                     fused_params p, const int *bad) {
  if (cuda_call_failed(bad)) return;
  struct alignas(sizeof(T) * VEC) pack { T v[VEC]; };
  const int64_t groups = g.t / VEC;
  CUDA_FOR(w, g.work) {
    int64_t xg = w % groups;
    int64_t r = w / groups;
    int64_t dy = r % g.t;
    r /= g.t;
    int64_t c = r % g.C;
    r /= g.C;
    int64_t k = r % g.K, b = r / g.K;
    int64_t id = (int64_t)idx[b * g.K + k];
    if (id < 0 || id >= g.tiles || owner[b * g.tiles + id] != (int)k) continue;
    int64_t y = (id / g.gw) * g.t + dy, x = (id % g.gw) * g.t + xg * VEC;
    pack *at = (pack *)(data + ((b * g.C + c) * g.H + y) * g.W + x);
    pack v = *at;
#pragma unroll
    for (int j = 0; j < VEC; j++)
      v.v[j] = cuda_dt<T>::from_f(fused_transform(cuda_dt<T>::to_f(v.v[j]), p));
    *at = v;
  }
}

/* Small calls (K <= FUSED_SMALL_K, a tile grid of at most FUSED_SMALL_TILES
 * tiles): one launch and no workspace. Each block marks the tiles its
 * batch row selects in a shared bitmap (duplicates set the same bit: the
 * transform reads the original value either way) and, in validate=device,
 * checks the whole id tensor itself first (cuda_block_check), so a call
 * is this one kernel (seed profile: a check, a memset, the owner map and
 * the copy were four). Aliased output: only selected groups are touched. */
#define FUSED_SMALL_K 64
#define FUSED_SMALL_TILES 8192
#define FUSED_SMALL_UNITS 4

template <typename T, typename I, int VEC>
__global__ void fused_small_kernel(const T *in, T *out, const I *__restrict__ idx,
                                   fused_geometry g, fused_params p, int aliased,
                                   cuda_inline_check ic, const int *bad) {
  struct alignas(sizeof(T) * VEC) pack { T v[VEC]; };
  __shared__ unsigned s_sel[FUSED_SMALL_TILES / 32];
  if (cuda_block_check(ic) || cuda_call_failed(bad)) return;
  const int words = (int)((g.tiles + 31) / 32);
  int64_t marked_b = -1;
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C;
    if (b != marked_b) { /* block-uniform */
      __syncthreads();   /* the previous row's bitmap is no longer read */
      for (int j = threadIdx.x; j < words; j += blockDim.x) s_sel[j] = 0;
      __syncthreads();
      for (int k = threadIdx.x; k < (int)g.K; k += blockDim.x) {
        int64_t id = (int64_t)idx[b * g.K + k];
        if (id >= 0 && id < g.tiles) atomicOr(&s_sel[id >> 5], 1u << (id & 31));
      }
      __syncthreads();
      marked_b = b;
    }
    /* FUSED_SMALL_UNITS groups a thread, spaced one block apart: the
     * loads of all, then the stores (fewer blocks repeat the prologue) */
    const uint32_t n = (uint32_t)g.plane_groups, span = blockDim.x * FUSED_SMALL_UNITS;
    for (uint32_t i0 = blockIdx.x * span + threadIdx.x; i0 < n; i0 += gridDim.x * span) {
      pack v[FUSED_SMALL_UNITS];
      unsigned sel = 0, todo = 0; /* bit u: group u selected / to be stored */
#pragma unroll
      for (int u = 0; u < FUSED_SMALL_UNITS; u++) {
        uint32_t i = i0 + u * blockDim.x;
        if (i >= n) continue;
        uint32_t y = g.groups_per_row.div(i), x = (i - y * g.groups_per_row.d) * VEC;
        uint32_t tile = g.tile.div(y) * (uint32_t)g.gw + g.tile.div(x);
        unsigned selected = s_sel[tile >> 5] >> (tile & 31) & 1u;
        if (!selected && aliased) continue;
        v[u] = ((const pack *)in)[plane * g.plane_groups + i];
        sel |= selected << u;
        todo |= 1u << u;
      }
#pragma unroll
      for (int u = 0; u < FUSED_SMALL_UNITS; u++) {
        if (!(todo >> u & 1u)) continue;
        if (sel >> u & 1u) {
#pragma unroll
          for (int j = 0; j < VEC; j++)
            v[u].v[j] = cuda_dt<T>::from_f(fused_transform(cuda_dt<T>::to_f(v[u].v[j]), p));
        }
        ((pack *)out)[plane * g.plane_groups + i0 + u * blockDim.x] = v[u];
      }
    }
  }
}

static fused_geometry geometry(const apx_fused_pack_op_unpack_args *a, int aliased) {
  fused_geometry g;
  g.B = a->features->shape[0];
  g.C = a->features->shape[1];
  g.H = a->features->shape[2];
  g.W = a->features->shape[3];
  g.K = a->idx->shape[1];
  g.t = a->tile;
  g.gw = g.W / g.t;
  g.tiles = (g.H / g.t) * g.gw;
  size_t elem = apx_backend_dtype_size(a->features->dtype);
  int vec = (int)(16 / elem);
  while (vec > 1 && (g.t % vec != 0 || (uintptr_t)a->features->data % (vec * elem) != 0 ||
                     (uintptr_t)a->out->data % (vec * elem) != 0))
    vec /= 2;
  g.vec = vec;
  g.work = g.B * g.K * g.C * g.t * (g.t / vec);
  g.launch = cuda_geom_1d(aliased ? g.work : 0, 256);
  g.planes = g.B * g.C;
  g.plane_groups = g.H * (g.W / vec);
  g.groups_per_row = cuda_fastdiv_make((uint32_t)(g.W / vec));
  g.tile = cuda_fastdiv_make((uint32_t)g.t);
  g.copy_launch = cuda_geom_2d(g.planes, g.plane_groups, 256);
  g.owner_launch = cuda_geom_1d(g.B * g.K, 256);
  return g;
}

template <typename T, typename I, int VEC>
static void launch_main(const fused_geometry &g, const apx_fused_pack_op_unpack_args *a,
                        int aliased, const int *owner, fused_params p, const int *bad,
                        cudaStream_t s) {
  if (aliased)
    fused_inplace_kernel<T, I, VEC><<<g.launch.blocks, g.launch.threads, 0, s>>>(
        (T *)a->out->data, (const I *)a->idx->data, owner, g, p, bad);
  else
    fused_copy_kernel<T, VEC><<<g.copy_launch.grid, g.copy_launch.block, 0, s>>>(
        (const T *)a->features->data, (T *)a->out->data, owner, g, p, bad);
}

template <typename T, typename I, int VEC>
static void launch_small(const fused_geometry &g, const apx_fused_pack_op_unpack_args *a,
                         int aliased, fused_params p, const cuda_inline_check &ic,
                         const int *bad, cudaStream_t s) {
  cuda_geom2 l =
      cuda_geom_2d(g.planes, (g.plane_groups + FUSED_SMALL_UNITS - 1) / FUSED_SMALL_UNITS, 256);
  fused_small_kernel<T, I, VEC><<<l.grid, l.block, 0, s>>>(
      (const T *)a->features->data, (T *)a->out->data, (const I *)a->idx->data, g, p, aliased,
      ic, bad);
}

/* owner NULL: the small form (ic: its in-kernel check) */
template <typename T, typename I>
static void launch_all(const fused_geometry &g, const apx_fused_pack_op_unpack_args *a,
                       int aliased, int *owner, fused_params p, const cuda_inline_check &ic,
                       const int *bad, cudaStream_t s) {
  if (!owner) {
    switch (g.vec) {
    case 8: launch_small<T, I, 8>(g, a, aliased, p, ic, bad, s); break;
    case 4: launch_small<T, I, 4>(g, a, aliased, p, ic, bad, s); break;
    case 2: launch_small<T, I, 2>(g, a, aliased, p, ic, bad, s); break;
    default: launch_small<T, I, 1>(g, a, aliased, p, ic, bad, s); break;
    }
    return;
  }
  fused_owner_kernel<I><<<g.owner_launch.blocks, g.owner_launch.threads, 0, s>>>(
      (const I *)a->idx->data, owner, g, bad);
  switch (g.vec) {
  case 8: launch_main<T, I, 8>(g, a, aliased, owner, p, bad, s); break;
  case 4: launch_main<T, I, 4>(g, a, aliased, owner, p, bad, s); break;
  case 2: launch_main<T, I, 2>(g, a, aliased, owner, p, bad, s); break;
  default: launch_main<T, I, 1>(g, a, aliased, owner, p, bad, s); break;
  }
}

template <typename T>
static void launch_typed(const fused_geometry &g, const apx_fused_pack_op_unpack_args *a,
                         int aliased, int *owner, fused_params p, const cuda_inline_check &ic,
                         const int *bad, cudaStream_t s) {
  if (a->idx->dtype == APX_DTYPE_I64)
    launch_all<T, int64_t>(g, a, aliased, owner, p, ic, bad, s);
  else
    launch_all<T, int32_t>(g, a, aliased, owner, p, ic, bad, s);
}

apx_status cuda_fused_pack_op_unpack(void *state, const apx_fused_pack_op_unpack_args *a,
                                     const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->features->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  int aliased = a->out->data == a->features->data;
  fused_geometry g = geometry(a, aliased);
  int64_t numel = g.B * g.C * g.H * g.W;
  if (numel == 0) return APX_OK;
  if (g.H * g.W > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "fused_pack_op_unpack: H*W = [%lld] is beyond the cuda backend's "
                              "2^31 pixels per plane",
                              (long long)(g.H * g.W));
  size_t elem = apx_backend_dtype_size(a->features->dtype);
  if (g.K == 0) { /* output = copy of features (docs/ops.md, fused_pack_op_unpack) */
    if (!aliased)
      CUDA_TRY(st, cudaMemcpyAsync(a->out->data, a->features->data, (size_t)numel * elem,
                                   cudaMemcpyDeviceToDevice, stream),
               "fused_pack_op_unpack: copy");
    return APX_OK;
  }
  cuda_check_desc d;
  cuda_check_init(&d, APX_OP_FUSED_PACK_OP_UNPACK, "idx", a->idx);
  d.lo = 0;
  d.hi = apx_tile_id_max(a->features, a->tile); /* include/apexx/op_rules.h */
  if (a->require_unique) d.unique_row = g.K;
  const int small = g.K <= FUSED_SMALL_K && g.tiles <= FUSED_SMALL_TILES;
  cuda_inline_check ic;
  memset(&ic, 0, sizeof ic);
  cuda_checked chk;
  memset(&chk, 0, sizeof chk);
  if (!small || !cuda_check_inline(st, dev, &d, &ic)) {
    s = cuda_check_run(st, dev, stream, &d, 0, &chk);
    if (s != APX_OK) return s;
  }

  cuda_workspace ws;
  ws.ptr = nullptr;
  int *owner = nullptr;
  cudaError_t err = cudaSuccess;
  if (!small) {
    s = cuda_ws_alloc(st, stream, (size_t)(g.B * g.tiles) * sizeof(int), &ws,
                      "fused_pack_op_unpack: owner map");
    if (s != APX_OK) return s;
    owner = (int *)ws.ptr;
    err = cudaMemsetAsync(owner, 0xff, (size_t)(g.B * g.tiles) * sizeof(int), stream);
    if (err != cudaSuccess) {
      cuda_ws_free(&ws);
      return cuda_fail(st, err, "fused_pack_op_unpack: owner map");
    }
  }
  fused_params p = {(float)a->value_scale, (float)a->value_bias, (float)a->gate_scale,
                    (float)a->gate_bias};
  switch (a->features->dtype) {
  case APX_DTYPE_F16: launch_typed<__half>(g, a, aliased, owner, p, ic, chk.bad, stream); break;
  case APX_DTYPE_BF16:
    launch_typed<__nv_bfloat16>(g, a, aliased, owner, p, ic, chk.bad, stream);
    break;
  default: launch_typed<float>(g, a, aliased, owner, p, ic, chk.bad, stream); break;
  }
  err = cudaGetLastError();
  if (ws.ptr) cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "fused_pack_op_unpack: launch");
  return APX_OK;
}
