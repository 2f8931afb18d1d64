/* tileunpack on CUDA (docs/ops.md, tileunpack): out = base with the packed tiles
 * written back by priority key = (level, k); override: the highest key
 * covering a pixel wins; blend: the covering tiles are composed in
 * ascending key order, cur = (1-a)*cur + a*tile, in fp32, rounded once.
 *
 * No atomics on pixels and no launch per tile. With ids every tile sits on
 * exactly one cell of the tile grid, so a pre-pass takes the maximum key
 * per cell (atomicMax on a [B, gh*gw] map; the maximum does not depend on
 * the order): override needs nothing more, and blend uses it for cells
 * with one tile (it also counts tiles per cell). For cells with several
 * tiles (blend) and for free origins, every tile is entered into the t x t
 * cells it overlaps (up to four) with the sort key (cell, priority); one
 * radix sort orders all entries; a pass marks where each cell's run
 * starts. Then one output pass over the planes in address order: a thread
 * takes a vector of pixels of one row and either copies (blends) one tile
 * row segment or walks its cell's entries; override with ids takes four
 * such vectors per thread, their loads issued together (latency, see
 * unpack_cells_kernel). Small calls (ids, K <= 64) are one launch instead:
 * unpack_table_kernel (a per-block cell table, small tile grids) or
 * unpack_small_kernel. Same input, same bits. */
#include "cuda_backend.h"

#include <cub/device/device_radix_sort.cuh>

#include <limits.h>

#include <string.h>

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
  int units;       /* output groups per thread: UNPACK_UNITS (override with ids) or 1 */
  cuda_geom2 out_launch;     /* x: pixel groups of a plane, y: planes (b, c) */
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

/* Where a thread's pixel group finds its tiles: a per-cell winner map
 * (ids: the highest key per cell, built with atomicMax, and for blend the
 * number of tiles per cell) and/or the sorted entry list of the cell. */
struct unpack_cells_src {
  const unsigned long long *win; /* [cells]: key + 1, 0 = none (ids only) */
  const int *count;              /* [cells]: tiles on the cell (ids, blend) */
  unsigned long long kmask;      /* low bits of a key holding k */
  const int *start, *vals;       /* sorted entries per cell (NULL: override with ids) */
  const int2 *origin32;
};

/* Winner map of the ids form: per (b, tile cell) the largest priority key
 * (level - lmin) << order_bits | k, plus one (0 = no tile); the key's low
 * order_bits bits are k (k < 2^order_bits). With `count`, also the number
 * of tiles per cell. Out-of-range ids (validate=off or a failed check)
 * enter nothing. */
__global__ void unpack_winners_kernel(unpack_sources src, unpack_geometry g,
                                      unsigned long long *__restrict__ win,
                                      int *__restrict__ count) {
  CUDA_FOR(i, g.B * g.K) {
    int64_t b = i / g.K, k = i % g.K;
    int64_t id = cuda_load_index(src.idx, src.placement_is64, i);
    if (id < 0 || id >= g.gh * g.gw) continue;
    unsigned long long key = (unsigned long long)k;
    if (src.levels) {
      long long level = (long long)cuda_load_index(src.levels, src.levels_is64, i);
      key |= (unsigned long long)(level - *src.lmin) << g.order_bits;
    }
    atomicMax(win + b * g.gh * g.gw + id, key + 1);
    if (count) atomicAdd(count + b * g.gh * g.gw + id, 1);
  }
}

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

/* Pixel groups per thread on the winner-map path (ids): override holds
 * one row segment a group (unpack_cells_kernel), blend two, tile and base
 * (unpack_blend_ids_kernel, 79 registers with fp16). */
#define UNPACK_UNITS 4
#define UNPACK_BLEND_UNITS 4
#define UNPACK_THREADS 256

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

/* Small K with ids (at most UNPACK_SMALL_K tiles a batch row, the seed
 * profile's K = 32): no map, no sort, one launch instead of a memset, a
 * map kernel (blend: a sort and its passes) and the output pass; in
 * validate=device the kernel checks the ids and levels itself
 * (cuda_block_check), so there is no pre-pass either. A block ranks its
 * batch row's valid tiles by (cell, level, k) in shared memory (a thread
 * per tile counts the tiles before it); each thread then finds its
 * groups' cell runs by a binary search: override takes a run's last
 * entry, the largest (level, k); blend composes the run in order. A
 * thread takes UNITS groups (4 override, 2 blend), their loads issued
 * together. (A scan of all K ids per thread and a group a thread, the
 * first form, cost more than the data movement at the seed profile.)
 * Ids are cell-aligned and VEC divides t, so a tile covers the whole
 * group; ids out of range are left out. Tile grids of at most
 * UNPACK_TABLE_CELLS cells (the seed profile's) take unpack_table_kernel
 * below instead, which replaces the ranking by cell and the binary search
 * with a per-cell table. */
#define UNPACK_SMALL_K 64
#define UNPACK_RANK_PARTS 4
#define UNPACK_SMALL_BLEND_UNITS 2 /* four took up to 125 registers */

template <typename T, int VEC, int BLEND, int UNITS>
__global__ void __launch_bounds__(UNPACK_THREADS)
    unpack_small_kernel(const T *base, const T *__restrict__ packed, T *out, unpack_sources src,
                        unpack_geometry g, int aliased, float alpha, cuda_inline_check ic,
                        const int *bad) {
  typedef unpack_pack<T, VEC> pack;
  __shared__ long long s_id[UNPACK_SMALL_K], s_lv[UNPACK_SMALL_K];
  __shared__ int s_cell[UNPACK_SMALL_K], s_k[UNPACK_SMALL_K]; /* ranked by (cell, level, k) */
  static_assert(UNPACK_SMALL_K * UNPACK_RANK_PARTS <= UNPACK_THREADS,
                "a rank part a thread: UNPACK_RANK_PARTS threads a tile");
  const uint32_t npg = (uint32_t)g.plane_groups, span = blockDim.x * UNITS;
  /* base under this block's first groups, when out is separate: every
   * group there needs it but override's covered ones (a few wasted reads),
   * and its loads are harmless, so they are in flight during the check
   * and the ranking below */
  pack cur[UNITS]; /* base under the groups of an iteration */
  bool use_pre = !aliased && blockIdx.y < g.planes && blockIdx.x * span + threadIdx.x < npg;
  if (use_pre) {
#pragma unroll
    for (int j = 0; j < UNITS; j++) {
      uint32_t i = blockIdx.x * span + threadIdx.x + j * blockDim.x;
      if (i < npg) cur[j] = ((const pack *)base)[(int64_t)blockIdx.y * g.plane_groups + i];
    }
  }
  if (cuda_block_check(ic) || cuda_call_failed(bad)) return;
  const int K = (int)g.K;
  const long long cells = g.gh * g.gw;
  const float keep = 1.0f - alpha;
  const int64_t kstride = g.C * g.t * g.t; /* packed: from tile k to tile k+1 */
  int64_t ranked_b = -1;
  int n = 0; /* valid tiles of batch row ranked_b */
  CUDA_FOR_OUTER(plane, g.planes) {
    int64_t b = plane / g.C, c = plane % g.C;
    if (b != ranked_b) { /* block-uniform */
      __syncthreads();   /* the previous row's ranking is no longer read */
      for (int k = threadIdx.x; k < K; k += blockDim.x) {
        s_id[k] = (long long)cuda_load_index(src.idx, src.placement_is64, b * g.K + k);
        s_lv[k] = src.levels ? (long long)cuda_load_index(src.levels, src.levels_is64, b * g.K + k)
                             : 0;
      }
      __syncthreads();
      /* tile k's rank: UNPACK_RANK_PARTS adjacent lanes count the tiles
       * before it among every UNPACK_RANK_PARTS-th tile each, then add
       * (one thread counting all K kept the block at the barrier) */
      const int k = threadIdx.x / UNPACK_RANK_PARTS, part = threadIdx.x % UNPACK_RANK_PARTS;
      int valid = 0, rank = 0;
      long long id = 0;
      if (k < K) {
        id = s_id[k];
        long long lv = s_lv[k];
        valid = id >= 0 && id < cells;
        for (int j = part; valid && j < K; j += UNPACK_RANK_PARTS) {
          long long jid = s_id[j], jl = s_lv[j];
          if (jid < 0 || jid >= cells) continue;
          rank += jid < id || (jid == id && (jl < lv || (jl == lv && j < k)));
        }
      }
#pragma unroll
      for (int off = 1; off < UNPACK_RANK_PARTS; off <<= 1) /* lanes of one tile */
        rank += __shfl_xor_sync(0xffffffffu, rank, off);
      const int lead = valid && part == 0;
      n = __syncthreads_count(lead);
      if (lead) {
        s_cell[rank] = (int)id;
        s_k[rank] = k;
      }
      __syncthreads();
      ranked_b = b;
    }
    /* UNITS groups a thread, spaced one block apart (as unpack_cells_kernel
     * does): all runs looked up, then all loads issued, then the stores */
    for (uint32_t i0 = blockIdx.x * span + threadIdx.x; i0 < npg; i0 += gridDim.x * span) {
      int first[UNITS], end[UNITS];
      const T *row0[UNITS];
#pragma unroll
      for (int j = 0; j < UNITS; j++) { /* 1: the cell's run, from shared memory */
        uint32_t i = min(i0 + j * blockDim.x, npg - 1);
        uint32_t yu = g.groups_per_row.div(i), xu = (i - yu * g.groups_per_row.d) * VEC;
        uint32_t cy = g.tile.div(yu), cx = g.tile.div(xu);
        int cell = (int)(cy * (uint32_t)g.gw + cx);
        int lo = 0, hi = n; /* the first entry at or after this cell */
        while (lo < hi) {
          int mid = (lo + hi) >> 1;
          if (s_cell[mid] < cell) lo = mid + 1;
          else hi = mid;
        }
        int e = lo;
        while (e < n && s_cell[e] == cell) e++;
        first[j] = lo;
        end[j] = e;
        /* this group's row segment inside tile 0 of (b, c) */
        row0[j] = packed + ((b * g.K * g.C + c) * g.t + (yu - cy * g.t)) * g.t + (xu - cx * g.t);
      }
      pack v[UNITS];
#pragma unroll
      for (int j = 0; j < UNITS; j++) { /* 2: the loads */
        uint32_t i = i0 + j * blockDim.x;
        if (i >= npg) continue;
        int64_t w = plane * g.plane_groups + i;
        int covered = end[j] > first[j];
        /* the block's first groups have theirs from before the check */
        if (!use_pre && (BLEND || !covered) && (covered || !aliased))
          cur[j] = ((const pack *)base)[w];
        if (covered)
          v[j] = *(const pack *)(row0[j] + s_k[BLEND ? first[j] : end[j] - 1] * kstride);
      }
      use_pre = false;
#pragma unroll
      for (int j = 0; j < UNITS; j++) { /* 3: blend's composition, the stores */
        uint32_t i = i0 + j * blockDim.x;
        if (i >= npg) continue;
        int64_t w = plane * g.plane_groups + i;
        int covered = end[j] > first[j];
        if (!covered) {
          if (!aliased) ((pack *)out)[w] = cur[j];
          continue;
        }
        if constexpr (!BLEND) {
          ((pack *)out)[w] = v[j];
        } else {
          float acc[VEC];
#pragma unroll
          for (int q = 0; q < VEC; q++)
            acc[q] = keep * cuda_dt<T>::to_f(cur[j].v[q]) + alpha * cuda_dt<T>::to_f(v[j].v[q]);
          for (int r = first[j] + 1; r < end[j]; r++) { /* further tiles on the cell */
            pack t = *(const pack *)(row0[j] + s_k[r] * kstride);
#pragma unroll
            for (int q = 0; q < VEC; q++)
              acc[q] = keep * acc[q] + alpha * cuda_dt<T>::to_f(t.v[q]);
          }
#pragma unroll
          for (int q = 0; q < VEC; q++) cur[j].v[q] = cuda_dt<T>::from_f(acc[q]);
          ((pack *)out)[w] = cur[j];
        }
      }
    }
  }
}

/* Small K with ids on a small tile grid (at most UNPACK_TABLE_CELLS cells a
 * batch row, the seed profile's 256): the seed form. Each block builds its
 * batch row's cell table in shared memory, one 64-bit word a cell whose
 * bit r says that the tile of priority rank r covers it (rank: the tile's
 * place among the row's K tiles by (level, k), so a cell's tiles in key
 * order are its word's bits from low to high, whatever the duplicates):
 * override reads the highest bit, blend composes from the lowest. A pixel
 * group then costs one shared load (and one for the rank's k) instead of
 * unpack_small_kernel's binary search, and the prologue is a clear, one
 * ranking pass (four threads a tile, levels only) and a shared atomicOr
 * per tile between two barriers. Everything that needs no table is loaded
 * first, all loads in flight together: base under the block's first
 * groups, the row's ids and levels (with own_check below, all B*K of
 * them) and, when the K tiles' slices of the plane's channel fit one
 * vector a thread (`staged`: K*t*t/VEC <= UNPACK_THREADS, the seed
 * profile's 256 x 16 bytes), those slices, kept in shared memory, so that
 * no global load waits for the table. validate=device with B*K <=
 * UNPACK_THREADS checks the index on the way (own_check,
 * unpack_check_share); otherwise the verdict comes from a check kernel
 * beside this one or cuda_block_check, before the first store either way.
 * UNPACK_TABLE_UNITS groups a thread in both modes, their loads issued
 * together: one wave of 256-thread blocks at the seed profile. */
#define UNPACK_TABLE_CELLS 2048 /* dynamic shared memory: 8 bytes a cell (<= 20 KB in all) */
#define UNPACK_TABLE_UNITS 4

/* The table kernel's own check (validate=device, B*K <= UNPACK_THREADS):
 * thread e holds entry e, each warp reduces its entries to one share
 * before the table build's barrier, and after it every thread merges the
 * shares itself, so the verdict costs no launch, no flag and no barrier
 * of its own (a check kernel beside it, or cuda_block_check with its own
 * barriers, cost more at the seed profile). Every block merges every
 * share, so every block reaches the same verdict before any store and an
 * aliased out stays untouched; a suspect verdict is confirmed and
 * published by cuda_block_check. A share: whether an id is out of range, and the levels'
 * minimum, maximum and the largest k at that maximum (docs/ops.md, tileunpack
 * step 4, the statistics of cuda_check_result_of). */
typedef cuda_block_partial unpack_check_share; /* pos 0: an id outside [0, gh*gw - 1] */

/* The least (greatest) of a warp's 64-bit values in every lane. sm_80 on:
 * the high halves' extreme (signed), then the extreme low half (unsigned)
 * among the lanes that hold it: two redux instructions where a shuffle
 * tree takes ten shuffles and five compares. */
static __device__ __forceinline__ long long unpack_warp_min(long long v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int hi = __reduce_min_sync(0xffffffffu, (int)(v >> 32));
  const unsigned lo =
      __reduce_min_sync(0xffffffffu, (int)(v >> 32) == hi ? (unsigned)v : 0xffffffffu);
  return (long long)(((unsigned long long)(unsigned)hi << 32) | lo);
#else
  for (int off = 16; off > 0; off >>= 1) {
    const long long o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o < v ? o : v;
  }
  return v;
#endif
}

static __device__ __forceinline__ long long unpack_warp_max(long long v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int hi = __reduce_max_sync(0xffffffffu, (int)(v >> 32));
  const unsigned lo = __reduce_max_sync(0xffffffffu, (int)(v >> 32) == hi ? (unsigned)v : 0u);
  return (long long)(((unsigned long long)(unsigned)hi << 32) | lo);
#else
  for (int off = 16; off > 0; off >>= 1) {
    const long long o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
#endif
}

static __device__ __forceinline__ int unpack_warp_max_int(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
#endif
}

/* This warp's share; every lane of the warp calls it. `mine`: the lane
 * holds an entry, out of range (`out`) or not, at level lv (when
 * `levels`) and place k along K. */
static __device__ __forceinline__ unpack_check_share unpack_warp_share(bool mine, bool out,
                                                                       long long lv, int k,
                                                                       bool levels) {
  unpack_check_share s;
  s.pos = __any_sync(0xffffffffu, mine && out) ? 0 : ~0ULL;
  s.lmin = LLONG_MAX;
  s.lmax = LLONG_MIN;
  s.kat = -1;
  if (levels) { /* uniform */
    s.lmin = unpack_warp_min(mine ? lv : LLONG_MAX);
    s.lmax = unpack_warp_max(mine ? lv : LLONG_MIN);
    s.kat = unpack_warp_max_int(mine && lv == s.lmax ? k : -1);
  }
  return s;
}

/* The verdict from the shares of the warps that hold entries (nw >= 1):
 * an id out of range, or (levels) a span that does not fit the int32 key
 * (cuda_levels_fit, the check kernel's rule). */
static __device__ __forceinline__ bool unpack_check_fails(const unpack_check_share *shares,
                                                          int nw, bool levels, int order_bits) {
  unpack_check_share all = shares[0];
  for (int w = 1; w < nw; w++) cuda_partial_merge(all, shares[w]);
  if (all.pos != ~0ULL || !levels) return all.pos != ~0ULL;
  return !cuda_levels_fit(all.lmin, all.lmax, all.kat, order_bits);
}

template <typename T, int VEC, int BLEND>
__global__ void __launch_bounds__(UNPACK_THREADS)
    unpack_table_kernel(const T *base, const T *__restrict__ packed, T *out, unpack_sources src,
                        unpack_geometry g, int aliased, float alpha, int staged,
                        cuda_inline_check ic, const int *bad) {
  typedef unpack_pack<T, VEC> pack;
  constexpr int UNITS = UNPACK_TABLE_UNITS;
  /* launched with UNPACK_THREADS threads: a thread's groups lie a constant
   * apart, one address and immediate offsets */
  constexpr uint32_t NT = UNPACK_THREADS, span = NT * UNITS;
  /* [gh*gw] cell words (bit r: the tile of rank r covers the cell), then,
   * when staged, from the next 16-byte boundary, the plane's K tile
   * slices as packs: tile k's pack r at k*slice + r */
  extern __shared__ __align__(16) unsigned long long s_cover[];
  __shared__ long long s_lv[UNPACK_SMALL_K];
  __shared__ int s_id[UNPACK_SMALL_K];      /* the tile's cell, -1: out of range */
  __shared__ int s_by_rank[UNPACK_SMALL_K]; /* rank -> k */
  __shared__ unpack_check_share s_check[UNPACK_THREADS / 32]; /* own_check: a share a warp */
  static_assert(UNPACK_SMALL_K <= 64, "a rank is a bit of a 64-bit word");
  static_assert(UNPACK_SMALL_K * UNPACK_RANK_PARTS <= UNPACK_THREADS,
                "a rank part a thread: UNPACK_RANK_PARTS threads a tile");
  const uint32_t npg = (uint32_t)g.plane_groups;
  const int K = (int)g.K, cells = (int)(g.gh * g.gw), tid = (int)threadIdx.x;
  const uint32_t t = (uint32_t)g.t;
  const uint32_t slice = t * t / VEC; /* packs of one tile's channel slice */
  const int nstage = staged ? K * (int)slice : 0; /* staged: at most UNPACK_THREADS */
  pack *s_stage = (pack *)(s_cover + ((cells + 1) & ~1));
  const int64_t kstride = g.C * g.t * g.t; /* packed: from tile k to tile k+1 */
  /* where group i of a plane lies: its cell, and its offset inside that
   * cell's tile (row and column of its first pixel; a multiple of VEC) */
  auto locate = [&](uint32_t i, uint32_t &cell, uint32_t &in_tile) {
    uint32_t y = g.groups_per_row.div(i), x = (i - y * g.groups_per_row.d) * VEC;
    uint32_t cy = g.tile.div(y), cx = g.tile.div(x);
    cell = cy * (uint32_t)g.gw + cx;
    in_tile = (y - cy * t) * t + (x - cx * t);
  };
  /* validate=device with every entry one thread's: the check rides on the
   * first table build (unpack_check_share), no check kernel beside this
   * one (bad is NULL) */
  const int64_t entries = g.B * g.K;
  const bool own_check = ic.record != nullptr && entries <= (int64_t)NT;
  /* thread k < K holds tile k's cell (-1: out of range, only possible in
   * validate=off or after a failed check, and then never entered) and
   * level; with own_check the first load_row has threads up to B*K load
   * (b*K + tid) mod B*K: each entry once, and the row's tile tid at
   * thread tid < K, as without (k = tid % K either way) */
  int my_id = -1;
  long long my_lv = 0;
  bool my_out = false; /* own_check: this thread's id is out of range */
  auto load_row = [&](int64_t b, int64_t loaders) {
    if (tid < loaders) {
      int64_t e = b * g.K + tid;
      if (e >= entries) e -= entries;
      const int64_t id = cuda_load_index(src.idx, src.placement_is64, e);
      my_out = id < 0 || id >= cells;
      my_id = my_out ? -1 : (int)id;
      my_lv = src.levels ? (long long)cuda_load_index(src.levels, src.levels_is64, e) : 0;
    }
  };
  /* staged: thread e < nstage holds pack e of the plane's slices */
  pack my_stage;
  auto load_stage = [&](int64_t plane) {
    if (tid < nstage) {
      const int64_t b = plane / g.C, c = plane % g.C;
      const uint32_t k = (uint32_t)tid / slice, r = (uint32_t)tid - k * slice;
      my_stage = ((const pack *)(packed + ((b * g.K + k) * g.C + c) * g.t * g.t))[r];
    }
  };
  /* 1: loads that need no verdict: base under the block's first groups
   * when out is separate (every group there needs it but override's
   * covered ones, a few wasted reads), the first plane's ids and levels
   * (own_check: every row's) and its tile slices */
  pack cur[UNITS]; /* base under the groups of an iteration */
  const uint32_t ifirst = blockIdx.x * span + tid;
  bool use_pre = !aliased && blockIdx.y < g.planes && ifirst < npg;
  if (use_pre) {
    const pack *at = (const pack *)base + (int64_t)blockIdx.y * g.plane_groups + ifirst;
#pragma unroll
    for (int j = 0; j < UNITS; j++)
      if (ifirst + j * NT < npg) cur[j] = at[j * NT];
  }
  load_row((int64_t)blockIdx.y / g.C, own_check ? entries : (int64_t)K);
  if (staged) load_stage(blockIdx.y);
  const float keep = 1.0f - alpha;
  int64_t built_b = -1;
  bool first = true, waited = false;
  /* validate=device in this kernel: the exact check is to run (always
   * without own_check, else when the shares say bad) */
  bool suspect = !own_check;
  CUDA_FOR_OUTER(plane, g.planes) {
    const int64_t b = plane / g.C, c = plane % g.C;
    const bool new_row = b != built_b; /* block-uniform, as `staged` */
    if (!first) { /* (only when planes > gridDim.y) */
      __syncthreads(); /* the previous plane's table and slices are no longer read */
      if (new_row) load_row(b, K);
      if (staged) load_stage(plane);
    }
    first = false;
    /* 3: the row's table, the plane's slices */
    if (new_row || staged) {
      if (new_row) {
        for (int e = tid; e < cells; e += NT) s_cover[e] = 0;
        if (tid < K) {
          s_id[tid] = my_id;
          s_lv[tid] = my_lv;
        }
        if (own_check && built_b < 0) { /* the first row: the warps' shares, before the barrier */
          const unpack_check_share sh = unpack_warp_share(tid < entries, my_out, my_lv, tid % K,
                                                          src.levels != nullptr);
          if ((tid & 31) == 0 && tid < entries) s_check[tid >> 5] = sh;
        }
      }
      if (tid < nstage) s_stage[tid] = my_stage;
      __syncthreads();
      if (own_check && built_b < 0) /* every thread merges the shares */
        suspect = unpack_check_fails(s_check, (int)((entries + 31) >> 5), src.levels != nullptr,
                                     g.order_bits);
    }
    if (new_row) {
      /* tile k's rank by (level, k) among all K tiles of the row (a
       * permutation of 0..K-1; without levels the rank is k): with
       * levels, UNPACK_RANK_PARTS adjacent lanes count the tiles before
       * it among every UNPACK_RANK_PARTS-th tile each, then add */
      const int k = tid / UNPACK_RANK_PARTS, part = tid % UNPACK_RANK_PARTS;
      int rank = k;
      if (src.levels) { /* kernel argument: uniform, so the shuffles see every lane */
        rank = 0;
        if (k < K) {
          const long long lv = s_lv[k];
#pragma unroll
          for (int q = 0; q < UNPACK_SMALL_K / UNPACK_RANK_PARTS; q++) {
            const int j = part + q * UNPACK_RANK_PARTS;
            if (j < K) {
              const long long jl = s_lv[j];
              rank += jl < lv || (jl == lv && j < k);
            }
          }
        }
#pragma unroll
        for (int off = 1; off < UNPACK_RANK_PARTS; off <<= 1) /* lanes of one tile */
          rank += __shfl_xor_sync(0xffffffffu, rank, off);
      }
      if (k < K && part == 0) {
        s_by_rank[rank] = k;
        const int id = s_id[k];
        if (id >= 0) atomicOr(&s_cover[id], 1ull << rank);
      }
      __syncthreads();
      built_b = b;
    }
    /* the verdict before the first store (block-uniform): own_check's
     * from the warps' shares, which every thread merges (every block
     * reads every entry, so all reach the same one); when bad, the exact
     * check names the first bad entry (block (0,0,0) publishes it, the
     * message as from the check kernel) and no block stores anything.
     * Else validate=device with the check a kernel beside this one
     * (cuda_launch_after): everything above needed no verdict; wait for
     * it. */
    if (!waited) {
      if (ic.record) {
        /* the exact check is the rule (the shares only say when to run it) */
        if (suspect && cuda_block_check(ic)) return;
      } else {
        cuda_wait_prerequisites();
        if (cuda_call_failed_after_wait(bad)) return;
      }
      waited = true;
    }
    /* this plane's groups; its pixels in tile 0 of (b, c), + k * kstride
     * for tile k */
    const pack *base_p = (const pack *)base + plane * g.plane_groups;
    pack *out_p = (pack *)out + plane * g.plane_groups;
    const T *packed_bc = packed + (b * g.K * g.C + c) * g.t * g.t;
    /* tile k's pack at in_tile (a multiple of VEC) */
    auto tile_pack = [&](int k, uint32_t in_tile) -> pack {
      return staged ? s_stage[k * slice + in_tile / VEC]
                    : *(const pack *)(packed_bc + k * kstride + in_tile);
    };
    for (uint32_t i0 = blockIdx.x * span + threadIdx.x; i0 < npg; i0 += gridDim.x * span) {
      /* 4: each group's first tile from the table: override the cell's
       * highest key, blend its lowest (-1: no tile); blend notes cells
       * with more tiles. Groups past npg are clamped to npg - 1 (npg >=
       * 1) so that this needs no branch. */
      int kf[UNITS];
      uint32_t in_tile[UNITS];
      unsigned more = 0; /* blend: bit j: further tiles on group j's cell */
#pragma unroll
      for (int j = 0; j < UNITS; j++) {
        uint32_t cell;
        locate(min(i0 + j * NT, npg - 1), cell, in_tile[j]);
        const unsigned long long m = s_cover[cell];
        kf[j] = m ? s_by_rank[BLEND ? __ffsll((long long)m) - 1 : 63 - __clzll((long long)m)]
                  : -1;
        if (BLEND && (m & (m - 1))) more |= 1u << j;
      }
      /* 5: the loads: the first tile's row segment; base where it is
       * needed (blend always, override where no tile covers the group;
       * nothing when out is base and no tile covers it); the block's
       * first groups have base from step 1 */
      pack v[UNITS];
#pragma unroll
      for (int j = 0; j < UNITS; j++) {
        if (i0 + j * NT >= npg) continue;
        const int covered = kf[j] >= 0;
        if (!use_pre && (BLEND || !covered) && (covered || !aliased)) cur[j] = base_p[i0 + j * NT];
        if (covered) v[j] = tile_pack(kf[j], in_tile[j]);
      }
      use_pre = false;
      /* 6: blend's composition in ascending key order, one rounding;
       * the stores */
#pragma unroll
      for (int j = 0; j < UNITS; j++) {
        const uint32_t i = i0 + j * NT;
        if (i >= npg) continue;
        if (kf[j] < 0) {
          if (!aliased) out_p[i] = cur[j];
          continue;
        }
        if constexpr (!BLEND) {
          out_p[i] = v[j];
        } else {
          float acc[VEC];
#pragma unroll
          for (int q = 0; q < VEC; q++)
            acc[q] = keep * cuda_dt<T>::to_f(cur[j].v[q]) + alpha * cuda_dt<T>::to_f(v[j].v[q]);
          if (more >> j & 1u) { /* further tiles on the cell (rare) */
            uint32_t cell, off;
            locate(i, cell, off);
            unsigned long long m = s_cover[cell];
            m &= m - 1; /* the lowest key is composed above */
            while (m) {
              const int r = __ffsll((long long)m) - 1;
              m &= m - 1;
              const pack p = tile_pack(s_by_rank[r], off);
#pragma unroll
              for (int q = 0; q < VEC; q++)
                acc[q] = keep * acc[q] + alpha * cuda_dt<T>::to_f(p.v[q]);
            }
          }
#pragma unroll
          for (int q = 0; q < VEC; q++) cur[j].v[q] = cuda_dt<T>::from_f(acc[q]);
          out_p[i] = cur[j];
        }
      }
    }
  }
}

/* A failed launch leaves its error for the caller's cudaGetLastError. */
template <typename T, int VEC>
static void launch_small(const cuda_state *st, int dev, const unpack_geometry &g,
                         const apx_tileunpack_args *a, const unpack_sources &src,
                         const cuda_inline_check &ic, float alpha, const int *bad,
                         cudaStream_t s) {
  int aliased = a->out->data == a->base->data;
  int blend = a->mode == APX_OVERLAP_BLEND;
  if (g.gh * g.gw <= UNPACK_TABLE_CELLS) { /* the seed form */
    cuda_geom2 l = cuda_geom_2d(
        g.planes, (g.plane_groups + UNPACK_TABLE_UNITS - 1) / UNPACK_TABLE_UNITS, UNPACK_THREADS);
    /* the cell words, rounded up to 16 bytes, then the staged slices */
    int64_t slices = g.K * (g.t * g.t / VEC);
    int staged = slices <= UNPACK_THREADS;
    size_t smem = (size_t)((g.gh * g.gw + 1) & ~(int64_t)1) * sizeof(unsigned long long) +
                  (staged ? (size_t)slices * sizeof(unpack_pack<T, VEC>) : 0);
    /* beside the check kernel when there is one (validate=device) */
    const int beside = bad != nullptr;
    (void)cuda_launch_after(
        st, dev, beside, l.grid, l.block, smem, s,
        blend ? unpack_table_kernel<T, VEC, 1> : unpack_table_kernel<T, VEC, 0>,
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, src, g, aliased,
        alpha, staged, ic, bad);
    return;
  }
  int units = blend ? UNPACK_SMALL_BLEND_UNITS : UNPACK_UNITS;
  cuda_geom2 l = cuda_geom_2d(g.planes, (g.plane_groups + units - 1) / units, UNPACK_THREADS);
  if (blend)
    unpack_small_kernel<T, VEC, 1, UNPACK_SMALL_BLEND_UNITS><<<l.grid, l.block, 0, s>>>(
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, src, g, aliased,
        alpha, ic, bad);
  else
    unpack_small_kernel<T, VEC, 0, UNPACK_UNITS><<<l.grid, l.block, 0, s>>>(
        (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, src, g, aliased,
        alpha, ic, bad);
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
  /* docs/ops.md, tileunpack: order_bits = max(1, bit_length(K-1)) */
  int ob = g.K > 1 ? bit_length((uint64_t)(g.K - 1)) : 1;
  g.order_bits = ob < 1 ? 1 : ob;
  g.end_bit = 32 + bit_length((uint64_t)g.cells);
  size_t elem = apx_backend_dtype_size(a->base->dtype);
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
  /* with ids the output pass reads the winner map (cuda_tileunpack:
   * use_win), the case of the several-groups-per-thread form */
  g.units = !a->idx ? 1 : (a->mode == APX_OVERLAP_OVERRIDE ? UNPACK_UNITS : UNPACK_BLEND_UNITS);
  g.out_launch =
      cuda_geom_2d(g.planes, (g.plane_groups + g.units - 1) / g.units, UNPACK_THREADS);
  return g;
}

template <typename T, int VEC, int BLEND, int UNITS>
static void launch_out_units(const unpack_geometry &g, const apx_tileunpack_args *a,
                             const unpack_cells_src &m, float alpha, const int *bad,
                             cudaStream_t s) {
  int aliased = a->out->data == a->base->data;
  unpack_cells_kernel<T, VEC, BLEND, UNITS><<<g.out_launch.grid, g.out_launch.block, 0, s>>>(
      (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, m, g, aliased,
      alpha, bad);
}

/* UNITS > 1 reads the winner map (and blend's counts): only with m.win
 * (ids); the grid was sized for g.units groups per thread. The one-group
 * form covers any grid (grid-stride loops). */
template <typename T, int VEC>
static void launch_out(const cuda_state *st, int dev, const unpack_geometry &g,
                       const apx_tileunpack_args *a, const unpack_cells_src &m,
                       const unpack_sources *small, const cuda_inline_check &ic, float alpha,
                       const int *bad, cudaStream_t s) {
  if (small)
    launch_small<T, VEC>(st, dev, g, a, *small, ic, alpha, bad, s);
  else if (a->mode == APX_OVERLAP_BLEND) {
    if (g.units == UNPACK_BLEND_UNITS && m.win && m.count && m.start) {
      int aliased = a->out->data == a->base->data;
      unpack_blend_ids_kernel<T, VEC, UNPACK_BLEND_UNITS>
          <<<g.out_launch.grid, g.out_launch.block, 0, s>>>(
              (const T *)a->base->data, (const T *)a->packed->data, (T *)a->out->data, m, g,
              aliased, alpha, bad);
    } else
      launch_out_units<T, VEC, 1, 1>(g, a, m, alpha, bad, s);
  } else {
    if (g.units == UNPACK_UNITS && m.win)
      launch_out_units<T, VEC, 0, UNPACK_UNITS>(g, a, m, alpha, bad, s);
    else
      launch_out_units<T, VEC, 0, 1>(g, a, m, alpha, bad, s);
  }
}

template <typename T>
static void launch_out_typed(const cuda_state *st, int dev, const unpack_geometry &g,
                             const apx_tileunpack_args *a, const unpack_cells_src &m,
                             const unpack_sources *small, const cuda_inline_check &ic,
                             float alpha, const int *bad, cudaStream_t s) {
  switch (g.vec) {
  case 8: launch_out<T, 8>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  case 4: launch_out<T, 4>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  case 2: launch_out<T, 2>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  default: launch_out<T, 1>(st, dev, g, a, m, small, ic, alpha, bad, s); break;
  }
}

/* The output pass for any dtype: the map/sort form (m), or the small-K
 * form when `small` gives its sources; alpha is rounded to the base dtype
 * first, as the reference does (a 0-d tensor). */
static void launch_out_any(const cuda_state *st, int dev, const unpack_geometry &g,
                           const apx_tileunpack_args *a, const unpack_cells_src &m,
                           const unpack_sources *small, const cuda_inline_check &ic,
                           const int *bad, cudaStream_t stream) {
  float alpha = (float)a->blend_alpha;
  switch (a->base->dtype) {
  case APX_DTYPE_F16:
    alpha = __half2float(__float2half_rn(alpha));
    launch_out_typed<__half>(st, dev, g, a, m, small, ic, alpha, bad, stream);
    break;
  case APX_DTYPE_BF16:
    alpha = __bfloat162float(__float2bfloat16_rn(alpha));
    launch_out_typed<__nv_bfloat16>(st, dev, g, a, m, small, ic, alpha, bad, stream);
    break;
  default: launch_out_typed<float>(st, dev, g, a, m, small, ic, alpha, bad, stream); break;
  }
}

apx_status cuda_tileunpack(void *state, const apx_tileunpack_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->base->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  unpack_geometry g = geometry(a);
  size_t elem = apx_backend_dtype_size(a->base->dtype);
  int64_t numel = g.B * g.C * g.H * g.W;
  if (numel == 0) return APX_OK;
  int aliased = a->out->data == a->base->data;
  if (g.H * g.W > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "tileunpack: H*W = [%lld] is beyond the cuda backend's 2^31 "
                              "pixels per plane",
                              (long long)(g.H * g.W));
  if (g.K == 0) { /* output = copy of base (docs/ops.md, tileunpack) */
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
  /* small K with ids: the one-launch form, which needs no levels minimum */
  const int small = a->idx != NULL && g.K <= UNPACK_SMALL_K;
  const int table = small && g.gh * g.gw <= UNPACK_TABLE_CELLS;
  const int device_mode = st->validate_mode == APX_VALIDATE_DEVICE;
  /* validate=device, the table form and an entry a thread: the table
   * kernel checks in its table build (own_check, its ic from
   * cuda_check_inline below, which takes B*K <= 1024); with more entries
   * on sm_90 the check is a kernel of its own and the table kernel starts
   * beside it (launch_small), which cost less than cuda_block_check inside
   * the kernel at the seed profile */
  const int own_check = table && device_mode && g.B * g.K <= UNPACK_THREADS;
  const int check_beside = table && device_mode && !own_check && cuda_pdl_ok(st, dev);
  cuda_inline_check ic;
  memset(&ic, 0, sizeof ic);
  cuda_checked chk;
  memset(&chk, 0, sizeof chk);
  if (!small || check_beside || !cuda_check_inline(st, dev, &d, &ic)) {
    s = cuda_check_run(st, dev, stream, &d, a->levels != NULL && !small, &chk);
    if (s != APX_OK) return s;
  }

  unpack_sources src;
  src.idx = a->idx ? a->idx->data : nullptr;
  src.origins = a->origins ? a->origins->data : nullptr;
  src.placement_is64 = (a->idx ? a->idx->dtype : a->origins->dtype) == APX_DTYPE_I64;
  src.levels = a->levels ? a->levels->data : nullptr;
  src.levels_is64 = a->levels && a->levels->dtype == APX_DTYPE_I64;
  src.lmin = chk.lmin;
  unpack_cells_src m;
  memset(&m, 0, sizeof m);
  if (small) {
    launch_out_any(st, dev, g, a, m, &src, ic, chk.bad, stream);
    CUDA_LAUNCHED(st, "tileunpack: launch");
    return APX_OK;
  }
  cudaError_t err = cudaSuccess;
  /* ids: a winner map (override needs nothing else: the maximum key per
   * cell does not depend on the order); blend with ids also counts tiles
   * per cell and keeps the sorted entries for cells with several tiles;
   * origins: the sorted entries only */
  int use_win = a->idx != NULL;
  int use_count = use_win && a->mode == APX_OVERLAP_BLEND;
  int use_sort = !(use_win && a->mode == APX_OVERLAP_OVERRIDE);
  size_t n = (size_t)g.entries;
  size_t sort_bytes = 0;
  if (use_sort) {
    err = cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, (const unsigned long long *)nullptr, (unsigned long long *)nullptr,
        (const int *)nullptr, (int *)nullptr, (int64_t)n, 0, g.end_bit, stream);
    if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack: sort size");
  }
  size_t win_bytes = use_win ? cuda_align_up((size_t)g.cells * sizeof(unsigned long long)) : 0;
  size_t count_bytes = use_count ? cuda_align_up((size_t)g.cells * sizeof(int)) : 0;
  size_t key_bytes = use_sort ? cuda_align_up(n * sizeof(unsigned long long)) : 0;
  size_t val_bytes = use_sort ? cuda_align_up(n * sizeof(int)) : 0;
  size_t origin_bytes = use_sort ? cuda_align_up((size_t)(g.B * g.K) * sizeof(int2)) : 0;
  size_t start_bytes = use_sort ? cuda_align_up((size_t)(g.cells + 1) * sizeof(int)) : 0;
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream,
                    win_bytes + count_bytes + 2 * key_bytes + 2 * val_bytes + origin_bytes +
                        start_bytes + (use_sort ? cuda_align_up(sort_bytes) : 0),
                    &ws, "tileunpack: workspace");
  if (s != APX_OK) return s;
  char *p = (char *)ws.ptr;
  unsigned long long *win = (unsigned long long *)p;
  p += win_bytes;
  int *count = (int *)p;
  p += count_bytes;
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

  if (use_win) { /* the map and the counts are adjacent: one memset */
    err = cudaMemsetAsync(win, 0, win_bytes + count_bytes, stream);
    if (err == cudaSuccess) {
      unpack_winners_kernel<<<g.tiles_launch.blocks, g.tiles_launch.threads, 0, stream>>>(
          src, g, win, use_count ? count : nullptr);
      err = cudaGetLastError();
    }
    m.win = win;
    m.count = use_count ? count : nullptr;
    m.kmask = ((unsigned long long)1 << g.order_bits) - 1;
  }
  if (err == cudaSuccess && use_sort) {
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
    m.start = start;
    m.vals = vals_out;
    m.origin32 = origin32;
  }
  if (err == cudaSuccess) {
    launch_out_any(st, dev, g, a, m, nullptr, ic, chk.bad, stream);
    err = cudaGetLastError();
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tileunpack: launch");
  return APX_OK;
}
