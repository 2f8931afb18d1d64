/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack's output pass (tileunpack.cu): every pixel group of the
 * output from its cell's tiles, through the winner map (ids) or the
 * sorted entries (tileunpack_index.cuh). */
#ifndef APX_CUDA_TILEUNPACK_CELLS_CUH
#define APX_CUDA_TILEUNPACK_CELLS_CUH

#include "tileunpack.h"

/* VEC elements of T moved as one aligned vector (16 bytes at most). */
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) unpack_pack { T v[VEC]; };

/* Blend of one tile over base: keep*base + alpha*tile in fp32, rounded
 * once (docs/ops.md, tileunpack; Rounding and parity). */
template <typename T, int VEC>
__device__ __forceinline__ unpack_pack<T, VEC> unpack_blend1(const unpack_pack<T, VEC> &base,
                                                            const unpack_pack<T, VEC> &tile,
                                                            float keep, float alpha) {
  unpack_pack<T, VEC> r;
#pragma unroll
  for (int j = 0; j < VEC; j++)
    r.v[j] = cuda_dt<T>::from_f(keep * cuda_dt<T>::to_f(base.v[j]) +
                                alpha * cuda_dt<T>::to_f(tile.v[j]));
  return r;
}

/* One group of VEC pixels of row y of plane (b, c), the general way: with
 * ids, the cell's winner (and count) is one load, and a cell with one
 * tile (or override) goes straight to a copy or blend of the tile row;
 * cells with several tiles (blend) or free origins walk the sorted
 * entries. */
template <typename T, int VEC, int BLEND>
__device__ __forceinline__ void unpack_group(const T *base, const T *__restrict__ packed, T *out,
                                             const unpack_cells_src &m,
                                             const unpack_geometry &g, int aliased,
                                             float alpha, int64_t plane, int64_t b, int64_t c,
                                             uint32_t i) {
  typedef unpack_pack<T, VEC> pack;
  const float keep = 1.0f - alpha;
  uint32_t yu = g.groups_per_row.div(i);
  int64_t y = yu, x = (int64_t)(i - yu * g.groups_per_row.d) * VEC;
  int64_t w = plane * g.plane_groups + i; /* this group's index in out */
  uint32_t cy = g.tile.div(yu), cx = g.tile.div((uint32_t)x);
  int64_t cell = (b * g.gh + cy) * g.gw + cx;
  const T *tile_row = nullptr; /* one tile covers the group, vector-aligned */
  int s0 = 0, n = 0;
  if (m.win && (!BLEND || m.count[cell] <= 1)) {
    unsigned long long wv = m.win[cell];
    if (wv) {
      int64_t k = (int64_t)((wv - 1) & m.kmask);
      tile_row = packed + (((b * g.K + k) * g.C + c) * g.t + (y - (int64_t)cy * g.t)) * g.t +
                 (x - (int64_t)cx * g.t);
    }
  } else {
    s0 = m.start[cell];
    n = m.start[cell + 1] - s0;
    if (n == 1) {
      int k = m.vals[s0];
      int2 o = m.origin32[b * g.K + k];
      if (o.x <= y && y < o.x + g.t && o.y <= x && x + VEC <= o.y + g.t &&
          (x - o.y) % VEC == 0) {
        tile_row = packed + (((b * g.K + k) * g.C + c) * g.t + (y - o.x)) * g.t + (x - o.y);
        n = 0;
      }
    }
  }
  if (tile_row) {
    pack v = *(const pack *)tile_row;
    if (BLEND) v = unpack_blend1(((const pack *)base)[w], v, keep, alpha);
    ((pack *)out)[w] = v;
    return;
  }
  if (n == 0) { /* nothing covers these pixels */
    if (!aliased) ((pack *)out)[w] = ((const pack *)base)[w];
    return;
  }
  /* several tiles, or one covering the group partly: override walks by
   * descending key (first cover wins) and moves the winner's bits (a copy:
   * never through fp32, which would change NaN payloads), blend composes
   * in fp32 by ascending key */
  pack cur, win;
  float acc[VEC];
  unsigned todo = (1u << VEC) - 1; /* override: pixels still without a winner */
  unsigned covered = 0;
  if (BLEND) {
    cur = ((const pack *)base)[w];
#pragma unroll
    for (int j = 0; j < VEC; j++) acc[j] = cuda_dt<T>::to_f(cur.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      acc[j] = 0.0f;
      win.v[j] = T();
    }
  }
  for (int q = 0; q < n; q++) {
    int s = BLEND ? s0 + q : s0 + n - 1 - q;
    int k = m.vals[s];
    int2 o = m.origin32[b * g.K + k];
    if (y < o.x || y >= o.x + g.t) continue;
    const T *row = packed + (((b * g.K + k) * g.C + c) * g.t + (y - o.x)) * g.t;
    if (o.y <= x && x + VEC <= o.y + g.t && (x - o.y) % VEC == 0 &&
        (BLEND || todo == (1u << VEC) - 1)) {
      pack p = *(const pack *)(row + (x - o.y));
      if (BLEND) {
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] = keep * acc[j] + alpha * cuda_dt<T>::to_f(p.v[j]);
      } else {
        win = p;
      }
      covered = (1u << VEC) - 1;
      todo = 0;
    } else {
#pragma unroll
      for (int j = 0; j < VEC; j++) {
        int64_t xj = x + j;
        if (xj < o.y || xj >= o.y + g.t || !(BLEND || (todo >> j & 1u))) continue;
        if (BLEND)
          acc[j] = keep * acc[j] + alpha * cuda_dt<T>::to_f(row[xj - o.y]);
        else
          win.v[j] = row[xj - o.y];
        covered |= 1u << j;
        todo &= ~(1u << j);
      }
    }
    if (!BLEND && todo == 0) break;
  }
  if (covered == 0 && aliased) return;
  if (!BLEND && covered != (1u << VEC) - 1) cur = ((const pack *)base)[w];
#pragma unroll
  for (int j = 0; j < VEC; j++)
    if (covered >> j & 1u) cur.v[j] = BLEND ? cuda_dt<T>::from_f(acc[j]) : win.v[j];
  ((pack *)out)[w] = cur;
}

/* The output pass: VEC pixels of one row of one plane per group, the
 * planes on grid y (so that blocks sweep memory in address order), x over
 * the groups of a plane. UNITS = 1 (free origins): a thread takes one
 * group and runs unpack_group. UNITS > 1 (ids: the winner map): a group
 * is a chain of two dependent loads (the map, then the tile row or base)
 * and a store, which left the SMs waiting on latency (override far below
 * copy bandwidth with one group a thread, docs/performance.md); so a thread takes UNITS groups spaced one block
 * apart (i0 + j*blockDim.x) and issues all map loads, then all data
 * loads, then all stores, each warp's addresses at each step j being
 * those of the one-group form (override; blend with ids has its own
 * kernel below). */
template <typename T, int VEC, int BLEND, int UNITS>
__global__ void __launch_bounds__(UNPACK_THREADS)
    unpack_cells_kernel(const T *base, const T *__restrict__ packed, T *out,
                        unpack_cells_src m, unpack_geometry g, int aliased, float alpha,
                        const int *bad) {
  if (cuda_call_failed(bad)) return;
  /* n < 2^31 and the grid stride (gridDim.x*span, the first multiple of
   * span >= n) is at most 2^31, so i0 + j*blockDim.x and i0 + stride stay
   * below 2^32 in 32 bits */
  const uint32_t n = (uint32_t)g.plane_groups;
  const uint32_t span = blockDim.x * UNITS;
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C, c = plane % g.C;
    /* block bx covers groups [bx*span, bx*span + span) of each grid
     * stride; thread x takes x + j*blockDim.x of it: each group once */
    for (uint32_t i0 = blockIdx.x * span + threadIdx.x; i0 < n; i0 += gridDim.x * span) {
      if constexpr (UNITS == 1) {
        unpack_group<T, VEC, BLEND>(base, packed, out, m, g, aliased, alpha, plane, b, c, i0);
      } else {
        typedef unpack_pack<T, VEC> pack;
        static_assert(UNITS == 1 || !BLEND, "blend with ids: unpack_blend_ids_kernel");
        /* 1: the map loads; groups past n are clamped to n - 1 (n >= 1)
         * so that these need no branch */
        unsigned long long wv[UNITS];
#pragma unroll
        for (int j = 0; j < UNITS; j++) {
          uint32_t i = min(i0 + j * blockDim.x, n - 1);
          uint32_t yu = g.groups_per_row.div(i), xu = (i - yu * g.groups_per_row.d) * VEC;
          int64_t cell = (b * g.gh + g.tile.div(yu)) * g.gw + g.tile.div(xu);
          wv[j] = m.win[cell];
        }
        /* 2: the data loads: the winning tile's row, or base where no
         * tile covers the group (nothing when out is base) */
        pack v[UNITS];
        unsigned store = 0; /* bit j: group j is written */
#pragma unroll
        for (int j = 0; j < UNITS; j++) {
          uint32_t i = i0 + j * blockDim.x;
          if (i >= n) continue;
          if (wv[j]) {
            uint32_t yu = g.groups_per_row.div(i), xu = (i - yu * g.groups_per_row.d) * VEC;
            uint32_t cy = g.tile.div(yu), cx = g.tile.div(xu);
            int64_t k = (int64_t)((wv[j] - 1) & m.kmask);
            v[j] = *(const pack *)(packed + (((b * g.K + k) * g.C + c) * g.t + (yu - cy * g.t)) *
                                                g.t + (xu - cx * g.t));
            store |= 1u << j;
          } else if (!aliased) {
            v[j] = ((const pack *)base)[plane * g.plane_groups + i];
            store |= 1u << j;
          }
        }
        /* 3: the stores */
#pragma unroll
        for (int j = 0; j < UNITS; j++)
          if (store >> j & 1u) ((pack *)out)[plane * g.plane_groups + i0 + j * blockDim.x] = v[j];
      }
    }
  }
}

/* Blend with ids (the winner map and the tile counts), UNITS groups a
 * thread as in unpack_cells_kernel: a cell with no tile copies base, one
 * tile blends its row over base, several compose their sorted entries in
 * ascending key. With ids every tile covers its whole cell, so that last
 * case is a short loop of whole-vector blends; the general walk
 * (unpack_group) inlined here held the kernel at 64 registers and low
 * occupancy, waiting on its loads. */
template <typename T, int VEC, int UNITS>
__global__ void __launch_bounds__(UNPACK_THREADS)
    unpack_blend_ids_kernel(const T *base, const T *__restrict__ packed, T *out,
                            unpack_cells_src m, unpack_geometry g, int aliased, float alpha,
                            const int *bad) {
  if (cuda_call_failed(bad)) return;
  typedef unpack_pack<T, VEC> pack;
  const float keep = 1.0f - alpha;
  const uint32_t n = (uint32_t)g.plane_groups, span = blockDim.x * UNITS;
  const uint32_t t = (uint32_t)g.t, gw = (uint32_t)g.gw, kmask = (uint32_t)m.kmask;
  const int64_t tile_stride = g.C * g.t * g.t; /* from tile k to tile k + 1 */
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C, c = plane % g.C;
    /* this batch row's cells (gh*gw < 2^31) and plane */
    const unsigned long long *win_b = m.win + b * g.gh * g.gw;
    const int *count_b = m.count + b * g.gh * g.gw;
    const T *packed_bc = packed + (b * g.K * g.C + c) * g.t * g.t; /* tile 0 of (b, c) */
    const pack *base_p = (const pack *)base + plane * g.plane_groups;
    pack *out_p = (pack *)out + plane * g.plane_groups;
    for (uint32_t i0 = blockIdx.x * span + threadIdx.x; i0 < n; i0 += gridDim.x * span) {
      /* 1: the groups' cells (past n: the last group, so no branch) and,
       * out of place, base, whose loads need no map and go out with the
       * map's */
      int cnt[UNITS];
      unsigned long long wv[UNITS];
      uint32_t off[UNITS]; /* the group's offset inside its cell's tile */
      pack cur[UNITS], v[UNITS];
#pragma unroll
      for (int j = 0; j < UNITS; j++) {
        uint32_t i = min(i0 + j * blockDim.x, n - 1);
        uint32_t yu = g.groups_per_row.div(i), xu = (i - yu * g.groups_per_row.d) * VEC;
        uint32_t cy = g.tile.div(yu), cx = g.tile.div(xu);
        uint32_t cell = cy * gw + cx;
        off[j] = (yu - cy * t) * t + (xu - cx * t);
        cnt[j] = count_b[cell];
        wv[j] = win_b[cell];
        if (!aliased) cur[j] = base_p[i];
      }
      /* 2: the tile row of a cell with one tile (and base under it, in
       * place) */
#pragma unroll
      for (int j = 0; j < UNITS; j++) {
        if (cnt[j] != 1) continue;
        if (aliased) cur[j] = base_p[min(i0 + j * blockDim.x, n - 1)];
        v[j] = *(const pack *)(packed_bc + (int64_t)((uint32_t)(wv[j] - 1) & kmask) * tile_stride +
                               off[j]);
      }
      /* 3: one rounding, the stores; cells with several tiles below */
      unsigned walk = 0;
#pragma unroll
      for (int j = 0; j < UNITS; j++) {
        uint32_t i = i0 + j * blockDim.x;
        if (i >= n) continue;
        if (cnt[j] > 1)
          walk |= 1u << j;
        else if (cnt[j] == 1)
          out_p[i] = unpack_blend1(cur[j], v[j], keep, alpha);
        else if (!aliased)
          out_p[i] = cur[j];
      }
      /* several tiles: their entries in ascending key over base (rare;
       * recomputed from the group so that nothing above is indexed at run
       * time, which would put it in local memory) */
      while (walk) {
        int j = __ffs(walk) - 1;
        walk &= walk - 1;
        uint32_t i = i0 + j * blockDim.x;
        uint32_t yu = g.groups_per_row.div(i), xu = (i - yu * g.groups_per_row.d) * VEC;
        uint32_t cy = g.tile.div(yu), cx = g.tile.div(xu);
        int64_t cell = b * g.gh * g.gw + cy * gw + cx;
        uint32_t in_tile = (yu - cy * t) * t + (xu - cx * t);
        int s0 = m.start[cell], s1 = m.start[cell + 1];
        pack p = base_p[i];
        float acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] = cuda_dt<T>::to_f(p.v[e]);
        for (int s = s0; s < s1; s++) {
          p = *(const pack *)(packed_bc + (int64_t)m.vals[s] * tile_stride + in_tile);
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[e] = keep * acc[e] + alpha * cuda_dt<T>::to_f(p.v[e]);
        }
#pragma unroll
        for (int e = 0; e < VEC; e++) p.v[e] = cuda_dt<T>::from_f(acc[e]);
        out_p[i] = p;
      }
    }
  }
}

#endif /* APX_CUDA_TILEUNPACK_CELLS_CUH */
