/* SPDX-License-Identifier: Apache-2.0 */
/* scatter_add's small path (scatter_add.cu): a prep kernel sorts each
 * index column's entries by out row group, a tile kernel finishes each
 * element once. */
#ifndef APX_CUDA_SCATTER_ADD_SMALL_CUH
#define APX_CUDA_SCATTER_ADD_SMALL_CUH

#include "scatter_add_common.cuh"

/* ---- small path ------------------------------------------------------------ */

/* A small call (dim 0, 1-D or 2-D index of at most SMALL_MAX_ROWS rows and
 * at most SMALL_MAX_GROUPS out row groups) is two launches and no wait for
 * the host in any validate mode:
 *  1. prep: reads the index once. A warp per index column counting-sorts
 *     the column's entries by out row group (G = R / 8 rows, the rows one
 *     thread of the tile kernel owns; R = small_rows<T>() rows, one tile's
 *     height), stably (ascending source row inside a group), into
 *     workspace: per column the groups' start offsets and the sorted
 *     entries (source row << SMALL_ROW_BITS | row within the tile).
 *     Values outside [0, M) are left out (validate=off safety); with
 *     validate=device each block also leaves the least linear position of
 *     a bad value among its entries (the pre-pass's verdict, split by
 *     block).
 *  2. tile: each block owns an out tile of R rows x SMALL_COLS columns;
 *     each thread starts its G elements from self (or zero), adds the
 *     entries of its column and group (all of them name its rows), in
 *     list order, and writes every element once. validate=device: every block reads
 *     all prep blocks' verdicts before any store. It is launched
 *     programmatically (sm_90): its self loads overlap the prep kernel.
 * The index is read once, and a thread reads only its own rows' entries
 * (sorting by tile instead had a thread walk its whole column of the
 * tile; docs/performance.md, scatter_add). */

/* The lanes of the warp holding the same key as this lane (all lanes take
 * part; key < 2^SMALL_KEY_BITS): one ballot a key bit, a fixed cost.
 * MATCH.ANY costs more, a ballot per distinct key far more (a step of 32
 * random index values names ~30 groups). */
#define SMALL_KEY_BITS 11
#define SMALL_NO_GROUP ((1u << SMALL_KEY_BITS) - 1u)
static_assert(SMALL_MAX_GROUPS < SMALL_NO_GROUP, "small path: a group fits a peer key");
static __device__ __forceinline__ unsigned small_peers(unsigned key) {
  unsigned peers = 0xffffffffu;
#pragma unroll
  for (int b = 0; b < SMALL_KEY_BITS; b++) {
    const unsigned m = __ballot_sync(0xffffffffu, key >> b & 1u);
    peers &= key >> b & 1u ? m : ~m;
  }
  return peers;
}

/* Block b sorts index columns [b * PREP_COLS, (b + 1) * PREP_COLS), warp w
 * column b * PREP_COLS + w. Workspace per column q: offsets[q * (groups +
 * 1) + k] = first list position of row group k (the last one: the column's
 * entries in range), list[q * N + ...] = its entries, group by group,
 * ascending source row inside a group. first_bad (validate=device, NULL
 * otherwise): [block] = the least row-major position of a value outside
 * [0, M) among the block's entries, ~0 when none. Every block writes its
 * slot on every call, so nothing needs a reset between calls. */
template <int R, typename I>
__global__ void __launch_bounds__(PREP_THREADS)
    scatter_prep_kernel(const I *__restrict__ index, small_geometry g,
                        int *__restrict__ offsets, uint16_t *__restrict__ list,
                        unsigned long long *__restrict__ first_bad) {
  /* the block's index columns as row ids (SMALL_NO_ENTRY: out of range);
   * rows of 5 words so that the lanes of a warp reading one column (one
   * row each) hit distinct banks */
  __shared__ uint16_t key[SMALL_MAX_ROWS][PREP_COLS + 2];
  /* per warp: the group histogram, then each group's next list position */
  __shared__ int cursor[PREP_COLS][SMALL_MAX_GROUPS + 1];
  constexpr int G = R / SMALL_WARPS;
  __shared__ unsigned long long warp_bad[PREP_COLS];
  constexpr int LOADS = SMALL_MAX_ROWS * PREP_COLS / PREP_THREADS;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int64_t c0 = (int64_t)blockIdx.x * PREP_COLS;
  cuda_allow_dependents();

  /* entry k of the block's rows x PREP_COLS slab is row k / PREP_COLS,
   * column k % PREP_COLS: consecutive threads read consecutive columns of
   * a row. All loads are issued before any is used. */
  int64_t v[LOADS];
#pragma unroll
  for (int j = 0; j < LOADS; j++) {
    const int k = t + j * PREP_THREADS, i = k / PREP_COLS;
    const int64_t q = c0 + k % PREP_COLS;
    v[j] = i < g.N && q < g.idx_cols ? (int64_t)__ldg(index + i * g.idx_cols + q) : 0;
  }
  unsigned long long first = ~0ULL;
#pragma unroll
  for (int j = 0; j < LOADS; j++) {
    const int k = t + j * PREP_THREADS, i = k / PREP_COLS, c = k % PREP_COLS;
    if (i < g.N) {
      const bool in = v[j] >= 0 && v[j] < g.M;
      key[i][c] = in ? (uint16_t)v[j] : (uint16_t)SMALL_NO_ENTRY;
      /* a thread's entries come in ascending position: its first bad one
       * is its least (columns past idx_cols loaded 0: in range) */
      if (!in && first == ~0ULL) first = (unsigned long long)(i * g.idx_cols + c0 + c);
    }
  }
  if (first_bad) { /* kernel-uniform */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      unsigned long long o = __shfl_down_sync(0xffffffffu, first, off);
      first = o < first ? o : first;
    }
    if (lane == 0) warp_bad[warp] = first;
  }
  __syncthreads();
  if (first_bad && t == 0) {
    unsigned long long b = warp_bad[0];
#pragma unroll
    for (int w = 1; w < PREP_COLS; w++) b = warp_bad[w] < b ? warp_bad[w] : b;
    first_bad[blockIdx.x] = b;
  }

  const int64_t q = c0 + warp;
  if (q >= g.idx_cols) return; /* warp-uniform; no block barrier follows */
  const int chunks = g.groups; /* histogram bins: row groups */
  int *cur = cursor[warp];
  for (int k = lane; k <= chunks; k += 32) cur[k] = 0;
  __syncwarp();
  /* shared atomics: with the seed shape's random rows a step of 32 names
   * ~30 groups, so they seldom collide (counting by peers cost more: run
   * 17 and 19) */
  for (int i = lane; i < g.N; i += 32) {
    const unsigned e = key[i][warp];
    if (e != SMALL_NO_ENTRY) atomicAdd(&cur[e / G], 1);
  }
  __syncwarp();

  /* exclusive scan of the histogram, 32 groups a step; entry `chunks`
   * (never counted: e / G < chunks) ends as the column's total */
  int *off = offsets + q * (chunks + 1);
  int carry = 0;
  for (int k0 = 0; k0 <= chunks; k0 += 32) { /* warp-uniform */
    const int k = k0 + lane;
    const int x = k <= chunks ? cur[k] : 0;
    int incl = x;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += y;
    }
    if (k <= chunks) {
      cur[k] = carry + incl - x;
      off[k] = carry + incl - x;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  __syncwarp();

  /* the entries into place, 32 source rows a step in ascending order: a
   * lane's place is its group's cursor plus the lanes below it with the
   * same group; the lowest lane of each group then advances the cursor */
  uint16_t *col = list + q * g.N;
  const unsigned below = (1u << lane) - 1u;
  for (int i0 = 0; i0 < g.N; i0 += 32) { /* warp-uniform */
    const int i = i0 + lane;
    const unsigned e = i < g.N ? (unsigned)key[i][warp] : SMALL_NO_ENTRY;
    const int chunk = e != SMALL_NO_ENTRY ? (int)(e / G) : -1;
    const unsigned peers = small_peers(chunk >= 0 ? (unsigned)chunk : SMALL_NO_GROUP);
    const int base = chunk >= 0 ? cur[chunk] : 0;
    __syncwarp(); /* every lane has read its cursor before any moves */
    if (chunk >= 0) {
      col[base + __popc(peers & below)] = (uint16_t)(i << SMALL_ROW_BITS | (int)(e % R));
      if ((peers & below) == 0) cur[chunk] = base + __popc(peers);
    }
    __syncwarp();
  }
}

/* Block (x: row chunk, y: column chunk) owns out rows [r0, r0 + R) and
 * columns [q0, q0 + 32). Thread (warp w, lane c) owns column q0 + c of the
 * R / 8 rows [w * R / 8, (w + 1) * R / 8) of the tile: it starts them from
 * self, adds their sources and writes them, so out may alias self (each
 * element is read, then written, by one thread) and no atomics or block
 * barriers are needed (its accumulators in shared memory are its own).
 * self and out are not __restrict__ for that reason.
 * first_bad (validate=device, NULL otherwise): the prep blocks' verdicts,
 * written by the prep kernel, whose completion and writes this kernel
 * waits for (cuda_wait_prerequisites) before it reads them or the lists: no
 * fence and no counter are needed. Every block reads all of them and,
 * when any is bad, stores nothing; block (0, 0) publishes the least
 * position, which is the first bad entry in row-major order: the prep
 * blocks' entries partition the index. */
template <typename T>
__global__ void __launch_bounds__(SMALL_THREADS)
    scatter_tile_kernel(const int *offsets, const uint16_t *list, small_geometry g,
                        const T *self, const T *__restrict__ src, T *out,
                        const unsigned long long *first_bad, int prep_blocks,
                        cuda_error_record *record, cuda_check_desc d) {
  typedef typename acc_of<T>::type A;
  constexpr int R = small_rows<T>(), RW = R / SMALL_WARPS;
  constexpr int BATCH = 16; /* list entries whose src loads are in flight together */
  __shared__ A acc[R][SMALL_COLS];
  __shared__ unsigned long long s_first;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int chunk = blockIdx.x;
  const int64_t r0 = (int64_t)chunk * R, q = (int64_t)blockIdx.y * SMALL_COLS + lane;
  const int lo = warp * RW; /* this thread's first tile row */

  /* self first: it does not depend on the prep kernel, so with a
   * programmatic launch its loads are in flight while the prep runs */
  A start[RW];
#pragma unroll
  for (int j = 0; j < RW; j++) {
    const int64_t m = r0 + lo + j;
    start[j] = self && q < g.cols && m < g.M ? to_acc<T>(self[m * g.cols + q]) : (A)0;
  }
  cuda_wait_prerequisites();
  /* the run of this column's entries for this thread's row group, and the
   * verdicts. Everything the prep kernel wrote is read through L2
   * (__ldcg): with a programmatic launch this kernel was running while the
   * prep wrote, and the read-only path (ld.global.nc, which __restrict__
   * const would allow) assumes data constant for the kernel's lifetime. */
  const int group = chunk * SMALL_WARPS + warp;
  int s0 = 0, s1 = 0; /* no entries past idx_cols or M */
  if (q < g.idx_cols && group < g.groups) {
    const int *o = offsets + q * (g.groups + 1) + group;
    s0 = __ldcg(o);
    s1 = __ldcg(o + 1);
  }
  unsigned long long first = ~0ULL;
  if (first_bad)
    for (int b = threadIdx.x; b < prep_blocks; b += SMALL_THREADS) {
      const unsigned long long p = __ldcg(first_bad + b);
      first = p < first ? p : first;
    }
#pragma unroll
  for (int j = 0; j < RW; j++) acc[lo + j][lane] = start[j];

  /* validate=device: a bad index anywhere, and no block stores anything
   * (first_bad is kernel-uniform, so every thread reaches the barrier) */
  if (first_bad && __syncthreads_or(first != ~0ULL)) {
    if (blockIdx.x == 0 && blockIdx.y == 0) {
      if (threadIdx.x == 0) s_first = ~0ULL;
      __syncthreads();
      if (first != ~0ULL) atomicMin(&s_first, first);
      __syncthreads();
      if (threadIdx.x == 0)
        cuda_check_publish(record, d,
                           cuda_check_result_of(d, s_first, LLONG_MAX, LLONG_MIN, -1, 0));
    }
    return;
  }

  /* this thread's entries in list order (ascending source row; each names
   * one of its rows), BATCH at a time: the entries' loads, then their src
   * loads, then the adds, in order */
  const uint16_t *col = list + q * g.N;
  for (int s = s0; s < s1; s += BATCH) {
    int e[BATCH];
    A v[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; j++) e[j] = s + j < s1 ? (int)__ldcg(col + s + j) : -1;
#pragma unroll
    for (int j = 0; j < BATCH; j++)
      v[j] = e[j] >= 0 ? to_acc<T>(src[(int64_t)(e[j] >> SMALL_ROW_BITS) * g.src_row + q]) : (A)0;
#pragma unroll
    for (int j = 0; j < BATCH; j++)
      if (e[j] >= 0) acc[e[j] & ((1 << SMALL_ROW_BITS) - 1)][lane] += v[j];
  }

  /* every element of the tile once (docs/ops.md, Every output written), sources or not */
#pragma unroll
  for (int j = 0; j < RW; j++) {
    const int64_t m = r0 + lo + j;
    if (q < g.cols && m < g.M) out[m * g.cols + q] = from_acc<T>(acc[lo + j][lane]);
  }
}

#endif /* APX_CUDA_SCATTER_ADD_SMALL_CUH */
