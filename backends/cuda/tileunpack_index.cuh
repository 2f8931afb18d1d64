/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack's pre-pass kernels (tileunpack.cu): where each pixel finds
 * its tiles, the per-cell winner map of the ids form and the entries of
 * the sorted form (one per tile and overlapped cell) with each cell's
 * first entry after the sort. */
#ifndef APX_CUDA_TILEUNPACK_INDEX_CUH
#define APX_CUDA_TILEUNPACK_INDEX_CUH

#include "tileunpack.h"

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

#endif /* APX_CUDA_TILEUNPACK_INDEX_CUH */
