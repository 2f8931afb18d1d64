/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack's one-launch form of small K on small tile grids
 * (tileunpack.cu): a per-block cell table in shared memory, and the
 * kernel's own index check. */
#ifndef APX_CUDA_TILEUNPACK_TABLE_CUH
#define APX_CUDA_TILEUNPACK_TABLE_CUH

#include <limits.h>

#include "tileunpack_cells.cuh"

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

#endif /* APX_CUDA_TILEUNPACK_TABLE_CUH */
