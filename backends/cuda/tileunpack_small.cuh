/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack's one-launch form of small K (tileunpack.cu): a block ranks
 * its batch row's tiles by cell and finds a group's tiles by a binary
 * search. */
#ifndef APX_CUDA_TILEUNPACK_SMALL_CUH
#define APX_CUDA_TILEUNPACK_SMALL_CUH

#include "tileunpack_cells.cuh"

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

#endif /* APX_CUDA_TILEUNPACK_SMALL_CUH */
