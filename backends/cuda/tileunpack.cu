/* tileunpack on CUDA (spec/ops.md 4.A): out = base with the packed tiles
 * written back by priority key = (level, k); override: the highest key
 * covering a pixel wins; blend: the covering tiles are composed in
 * ascending key order, cur = (1-a)*cur + a*tile, in fp32, rounded once.
 *
 * No atomics on pixels and no launch per tile: every tile is entered into
 * the t x t cells of the tile grid it overlaps (one cell for ids, up to four
 * for free origins) with the sort key (cell, priority); one radix sort
 * orders all entries; a pass marks where each cell's run starts; then one
 * pass over the output walks, for each pixel, its cell's run in key order.
 * The result does not depend on scheduling: same input, same bits. */
#include "cuda_backend.h"

#include <cub/device/device_radix_sort.cuh>

struct unpack_geometry {
  int64_t B, C, H, W, K, t, gh, gw, cells; /* cells = B*gh*gw */
  int64_t entries_per_tile;                /* 1 (ids) or 4 (origins) */
  int64_t entries;
  int order_bits;
  int end_bit;     /* bits of the sort key */
  int vec;         /* output elements per thread along x */
  int64_t planes;  /* B*C: the output pass's outer loop */
  int64_t plane_groups;      /* H*W/vec: its inner loop, < 2^31 */
  cuda_fastdiv groups_per_row; /* W/vec */
  cuda_fastdiv tile;           /* t */
  cuda_geom tiles_launch, entries_launch;
  cuda_geom2 out_launch;
};

/* Inputs of the entry builder. */
struct unpack_sources {
  const void *idx;     /* [B,K] ids, or NULL */
  const void *origins; /* [B,K,2] (y0,x0), or NULL */
  int placement_is64;
  const void *levels;  /* [B,K] or NULL */
  int levels_is64;
  const long long *lmin; /* device: minimum of levels */
};

/* One entry per (tile, overlapped cell); absent cells get the sentinel cell
 * `cells`, which sorts after every real one. Also writes the tile's origin
 * as int32 for the output pass. Invalid placements (only possible with
 * validate=off or after a failed check) become sentinels, so no later pass
 * indexes out of bounds. */
__global__ void unpack_entries_kernel(unpack_sources src, unpack_geometry g,
                                      unsigned long long *__restrict__ keys,
                                      int *__restrict__ vals, int2 *__restrict__ origin32) {
  const unsigned long long sentinel = (unsigned long long)g.cells << 32;
  CUDA_FOR(i, g.B * g.K) {
    int64_t b = i / g.K, k = i % g.K;
    int64_t y0, x0;
    if (src.idx) {
      int64_t id = cuda_load_index(src.idx, src.placement_is64, i);
      int ok = id >= 0 && id < g.gh * g.gw;
      y0 = ok ? (id / g.gw) * g.t : -1;
      x0 = ok ? (id % g.gw) * g.t : -1;
    } else {
      y0 = cuda_load_index(src.origins, src.placement_is64, 2 * i);
      x0 = cuda_load_index(src.origins, src.placement_is64, 2 * i + 1);
    }
    int valid = y0 >= 0 && x0 >= 0 && y0 + g.t <= g.H && x0 + g.t <= g.W;
    origin32[i] = make_int2(valid ? (int)y0 : 0, valid ? (int)x0 : 0);
    long long prio = k;
    if (src.levels) {
      long long level = (long long)cuda_load_index(src.levels, src.levels_is64, i);
      prio = (long long)(((unsigned long long)(level - *src.lmin) << g.order_bits) +
                         (unsigned long long)k);
    }
    unsigned long long low = (unsigned long long)(prio & 0xffffffffLL);
    for (int e = 0; e < g.entries_per_tile; e++) {
      int64_t cy = valid ? y0 / g.t + (e >> 1) : 0, cx = valid ? x0 / g.t + (e & 1) : 0;
      /* the tile reaches the next cell row/column only when not aligned */
      int present = valid && (e >> 1 ? y0 % g.t != 0 : 1) && (e & 1 ? x0 % g.t != 0 : 1) &&
                    cy < g.gh && cx < g.gw;
      int64_t at = i * g.entries_per_tile + e;
      keys[at] = present ? ((unsigned long long)((b * g.gh + cy) * g.gw + cx) << 32) | low
                         : sentinel;
      vals[at] = (int)k;
    }
  }
}

/* start[c] = first sorted entry of cell c; start[cells] = entries in real
 * cells. Every cell index in [0, cells] is written exactly once. */
__global__ void unpack_starts_kernel(const unsigned long long *__restrict__ keys,
                                     unpack_geometry g, int *__restrict__ start) {
  CUDA_FOR(s, g.entries) {
    int64_t cell = (int64_t)(keys[s] >> 32);
    int64_t prev = s == 0 ? -1 : (int64_t)(keys[s - 1] >> 32);
    for (int64_t c = prev + 1; c <= cell && c <= g.cells; c++) start[c] = (int)s;
    if (s == g.entries - 1)
      for (int64_t c = cell + 1; c <= g.cells; c++) start[c] = (int)g.entries;
  }
}

template <typename T, int VEC, int BLEND>
__global__ void unpack_out_kernel(const T *base, const T *__restrict__ packed, T *out,
                                  const int *__restrict__ start, const int *__restrict__ vals,
                                  const int2 *__restrict__ origin32, unpack_geometry g,
                                  int aliased, float alpha, const int *bad) {
  if (cuda_call_failed(bad)) return;
  struct alignas(sizeof(T) * VEC) pack { T v[VEC]; };
  const float keep = 1.0f - alpha;
  CUDA_FOR_OUTER(plane, g.planes) {
   int64_t b = plane / g.C, c = plane % g.C;
   CUDA_FOR_INNER(i, g.plane_groups) {
    uint32_t yu = g.groups_per_row.div(i);
    int64_t y = yu, x = (int64_t)(i - yu * g.groups_per_row.d) * VEC;
    int64_t w = plane * g.plane_groups + i; /* this group's index in out */
    int64_t cell = (b * g.gh + g.tile.div(yu)) * g.gw + g.tile.div((uint32_t)x);
    int s0 = start[cell], s1 = start[cell + 1];
    if (s0 == s1 && aliased) continue; /* nothing covers these pixels */
    pack cur;
    if (s0 == s1) {
      ((pack *)out)[w] = ((const pack *)base)[w];
      continue;
    }
    float acc[VEC];
    unsigned todo = (1u << VEC) - 1; /* override: pixels still without a winner */
    unsigned covered = 0;
    if (BLEND) { /* blending starts from base; override reads it only if needed */
      cur = ((const pack *)base)[w];
#pragma unroll
      for (int j = 0; j < VEC; j++) acc[j] = cuda_dt<T>::to_f(cur.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; j++) acc[j] = 0.0f;
    }
    for (int n = 0; n < s1 - s0; n++) {
      int s = BLEND ? s0 + n : s1 - 1 - n; /* blend: ascending key; override: descending */
      int k = vals[s];
      int2 o = origin32[b * g.K + k];
      if (y < o.x || y >= o.x + g.t) continue;
      const T *row = packed + (((b * g.K + k) * g.C + c) * g.t + (y - o.x)) * g.t;
      if (o.y <= x && x + VEC <= o.y + g.t && (x - o.y) % VEC == 0 &&
          (BLEND || todo == (1u << VEC) - 1)) {
        pack p = *(const pack *)(row + (x - o.y));
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          float v = cuda_dt<T>::to_f(p.v[j]);
          acc[j] = BLEND ? keep * acc[j] + alpha * v : v;
        }
        covered = (1u << VEC) - 1;
        todo = 0;
      } else {
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          int64_t xj = x + j;
          if (xj < o.y || xj >= o.y + g.t || !(BLEND || (todo >> j & 1u))) continue;
          float v = cuda_dt<T>::to_f(row[xj - o.y]);
          acc[j] = BLEND ? keep * acc[j] + alpha * v : v;
          covered |= 1u << j;
          todo &= ~(1u << j);
        }
      }
      if (!BLEND && todo == 0) break;
    }
    if (covered == 0 && aliased) continue;
    if (!BLEND && covered != (1u << VEC) - 1) cur = ((const pack *)base)[w];
#pragma unroll
    for (int j = 0; j < VEC; j++)
      if (covered >> j & 1u) cur.v[j] = cuda_dt<T>::from_f(acc[j]);
    ((pack *)out)[w] = cur;
   }
  }
}

static int bit_length(uint64_t v) {
  int n = 0;
  while (v) {
    n++;
    v >>= 1;
  }
  return n;
}

static unpack_geometry geometry(const apx_tileunpack_args *a) {
  unpack_geometry g;
  g.B = a->base->shape[0];
  g.C = a->base->shape[1];
  g.H = a->base->shape[2];
  g.W = a->base->shape[3];
  g.K = a->packed->shape[1];
  g.t = a->packed->shape[3];
  g.gh = g.H / g.t;
  g.gw = g.W / g.t;
  g.cells = g.B * g.gh * g.gw;
  g.entries_per_tile = a->origins ? 4 : 1;
  g.entries = g.B * g.K * g.entries_per_tile;
  /* spec/ops.md 4.A: order_bits = max(1, bit_length(K-1)) */
  int ob = g.K > 1 ? bit_length((uint64_t)(g.K - 1)) : 1;
  g.order_bits = ob < 1 ? 1 : ob;
  g.end_bit = 32 + bit_length((uint64_t)g.cells);
  size_t elem = cuda_dtype_size(a->base->dtype);
  int vec = (int)(16 / elem);
  while (vec > 1 && (g.t % vec != 0 || (uintptr_t)a->base->data % (vec * elem) != 0 ||
                     (uintptr_t)a->out->data % (vec * elem) != 0 ||
                     (uintptr_t)a->packed->data % (vec * elem) != 0))
    vec /= 2;
  g.vec = vec;
  g.planes = g.B * g.C;
  g.plane_groups = g.H * (g.W / vec);
  g.groups_per_row = cuda_fastdiv_make((uint32_t)(g.W / vec));
  g.tile = cuda_fastdiv_make((uint32_t)g.t);
  g.tiles_launch = cuda_geom_1d(g.B * g.K, 256);
  g.entries_launch = cuda_geom_1d(g.entries, 256);
  g.out_launch = cuda_geom_2d(g.planes, g.plane_groups, 256);
  return g;
}

template <typename T, int VEC>
static void launch_out(const unpack_geometry &g, const apx_tileunpack_args *a, const int *start,
                       const int *vals, const int2 *origin32, float alpha, const int *bad,
                       cudaStream_t s) {
  int aliased = a->out->data == a->base->data;
  dim3 grid = g.out_launch.grid, block = g.out_launch.block;
  if (a->mode == APX_OVERLAP_BLEND)
    unpack_out_kernel<T, VEC, 1><<<grid, block, 0, s>>>(
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, start, vals,
        origin32, g, aliased, alpha, bad);
  else
    unpack_out_kernel<T, VEC, 0><<<grid, block, 0, s>>>(
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, start, vals,
        origin32, g, aliased, alpha, bad);
}

template <typename T>
static void launch_out_typed(const unpack_geometry &g, const apx_tileunpack_args *a,
                             const int *start, const int *vals, const int2 *origin32,
                             float alpha, const int *bad, cudaStream_t s) {
  switch (g.vec) {
  case 8: launch_out<T, 8>(g, a, start, vals, origin32, alpha, bad, s); break;
  case 4: launch_out<T, 4>(g, a, start, vals, origin32, alpha, bad, s); break;
  case 2: launch_out<T, 2>(g, a, start, vals, origin32, alpha, bad, s); break;
  default: launch_out<T, 1>(g, a, start, vals, origin32, alpha, bad, s); break;
  }
}

apx_status cuda_tileunpack(void *state, const apx_tileunpack_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->base->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  unpack_geometry g = geometry(a);
  size_t elem = cuda_dtype_size(a->base->dtype);
  int64_t numel = g.B * g.C * g.H * g.W;
  if (numel == 0) return APX_OK;
  int aliased = a->out->data == a->base->data;
  if (g.H * g.W > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "tileunpack: H*W = [%lld] is beyond the cuda backend's 2^31 "
                              "pixels per plane",
                              (long long)(g.H * g.W));
  if (g.K == 0) { /* output = copy of base (spec/ops.md 3) */
    if (!aliased)
      CUDA_TRY(st, cudaMemcpyAsync(a->out->data, a->base->data, (size_t)numel * elem,
                                   cudaMemcpyDeviceToDevice, stream),
               "tileunpack: copy");
    return APX_OK;
  }

  /* pre-pass: ids or origins in range, levels' span within the int32 key */
  cuda_check_desc d;
  if (a->idx) {
    cuda_check_init(&d, APX_OP_TILEUNPACK, "idx", a->idx);
    d.lo = 0;
    d.hi = g.gh * g.gw - 1;
  } else {
    cuda_check_init(&d, APX_OP_TILEUNPACK, "origins", a->origins);
    d.pairs = 1;
    d.count = g.B * g.K;
    d.lo = 0;
    d.hi = g.H - g.t;
    d.lo2 = 0;
    d.hi2 = g.W - g.t;
  }
  if (a->levels) {
    d.levels = a->levels->data;
    d.levels_is64 = a->levels->dtype == APX_DTYPE_I64;
    d.levels_count = g.B * g.K;
    d.order_bits = g.order_bits;
    d.key_k = g.K;
  }
  cuda_checked chk;
  s = cuda_check_run(st, dev, stream, &d, a->levels != NULL, &chk);
  if (s != APX_OK) return s;

  /* workspace: keys and values twice (sort in/out), origins, cell starts,
   * the sort's own scratch */
  size_t n = (size_t)g.entries;
  size_t sort_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, (const unsigned long long *)nullptr, (unsigned long long *)nullptr,
      (const int *)nullptr, (int *)nullptr, (int64_t)n, 0, g.end_bit, stream);
  if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack: sort size");
  size_t key_bytes = cuda_align_up(n * sizeof(unsigned long long));
  size_t val_bytes = cuda_align_up(n * sizeof(int));
  size_t origin_bytes = cuda_align_up((size_t)(g.B * g.K) * sizeof(int2));
  size_t start_bytes = cuda_align_up((size_t)(g.cells + 1) * sizeof(int));
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream,
                    2 * key_bytes + 2 * val_bytes + origin_bytes + start_bytes +
                        cuda_align_up(sort_bytes),
                    &ws, "tileunpack: workspace");
  if (s != APX_OK) return s;
  char *p = (char *)ws.ptr;
  unsigned long long *keys_in = (unsigned long long *)p;
  p += key_bytes;
  unsigned long long *keys_out = (unsigned long long *)p;
  p += key_bytes;
  int *vals_in = (int *)p;
  p += val_bytes;
  int *vals_out = (int *)p;
  p += val_bytes;
  int2 *origin32 = (int2 *)p;
  p += origin_bytes;
  int *start = (int *)p;
  p += start_bytes;
  void *sort_tmp = p;

  unpack_sources src;
  src.idx = a->idx ? a->idx->data : nullptr;
  src.origins = a->origins ? a->origins->data : nullptr;
  src.placement_is64 = (a->idx ? a->idx->dtype : a->origins->dtype) == APX_DTYPE_I64;
  src.levels = a->levels ? a->levels->data : nullptr;
  src.levels_is64 = a->levels && a->levels->dtype == APX_DTYPE_I64;
  src.lmin = chk.lmin;
  unpack_entries_kernel<<<g.tiles_launch.blocks, g.tiles_launch.threads, 0, stream>>>(
      src, g, keys_in, vals_in, origin32);
  err = cudaGetLastError();
  if (err == cudaSuccess)
    err = cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys_in, keys_out, vals_in,
                                          vals_out, (int64_t)n, 0, g.end_bit, stream);
  if (err == cudaSuccess) {
    unpack_starts_kernel<<<g.entries_launch.blocks, g.entries_launch.threads, 0, stream>>>(
        keys_out, g, start);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    /* the reference rounds alpha to the base dtype first (a 0-d tensor) */
    float alpha = (float)a->blend_alpha;
    switch (a->base->dtype) {
    case APX_DTYPE_F16:
      alpha = __half2float(__float2half_rn(alpha));
      launch_out_typed<__half>(g, a, start, vals_out, origin32, alpha, chk.bad, stream);
      break;
    case APX_DTYPE_BF16:
      alpha = __bfloat162float(__float2bfloat16_rn(alpha));
      launch_out_typed<__nv_bfloat16>(g, a, start, vals_out, origin32, alpha, chk.bad, stream);
      break;
    default:
      launch_out_typed<float>(g, a, start, vals_out, origin32, alpha, chk.bad, stream);
      break;
    }
    err = cudaGetLastError();
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack: launch");
  return APX_OK;
}
