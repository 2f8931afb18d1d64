/* scatter_add on CUDA (docs/ops.md, scatter_add), and the accumulation
 * gather_backward shares (gather_backward.cu, cuda_scatter_accumulate).
 * out = self (zeros for gather_backward), then every
 * destination gets the sources that name it added in ascending linear
 * position of the index, accumulated in fp32 (floats) or exactly with
 * wrap-around (integers) and rounded once. No atomics: each destination is
 * owned by one thread, so the result is run-to-run bit-identical and equals
 * the cpu backend's sequential sum.
 *
 * Paths, one result:
 *  - direct (dim 0, 1-D or 2-D index of at most SMALL_MAX_ROWS rows, out of
 *    at most DIRECT_MAX_ROW_CHUNKS row chunks, a small index): one launch
 *    (validate=device: the check inside it for an out-of-place out, the
 *    range check beside it for an aliased one). Each block owns an out
 *    tile of 512 rows (256 for 64-bit values) x 8 columns, reads its
 *    columns of the index and src whole, counts each element's sources in
 *    shared memory and finishes it from self in ascending source row.
 *  - small (dim 0, 1-D or 2-D index of at most SMALL_MAX_ROWS rows, out of
 *    at most SMALL_MAX_GROUPS row groups): two launches. A prep kernel
 *    reads the index once and sorts each index column's entries by the out
 *    row group they name (a stable counting sort, one warp a column); then
 *    each block of the tile kernel owns an out tile of R rows x 32
 *    columns, starts each element from self (or zero), adds its sources in
 *    ascending source row and writes it once. validate=device checks the
 *    index inside these two kernels (no pre-pass). For small calls the
 *    general path's radix sort (four or five launches) costs far more
 *    than these two kernels (docs/performance.md). Taken where the direct
 *    path is not; the paths below serve every other call.
 *  - rows (dim 0, every index row constant, e.g. index_add-like use): the
 *    N source rows are sorted by destination row (stable radix sort, N
 *    keys); then one pass over out, where each element adds its row's run
 *    of source rows. Reads self and the named src rows once, writes out once.
 *  - general: every index position becomes a (destination, source offset)
 *    pair; a stable radix sort groups pairs by destination keeping index
 *    order; the first thread of each group sums the group.
 * The rows path needs to know that index rows are constant. For 1-D index
 * that is given. For a large 2-D (dim 0) index the pre-pass (one streaming
 * read of the index, which checks its range in the same pass) notes it in
 * device memory and the device decides, so that a call never
 * waits for the host (a call stays asynchronous and can be captured into a
 * CUDA graph): the rows path's kernels run, its output kernel only when
 * the rows are constant, and then the columns path, whose kernels only work
 * when they are not:
 *  - columns (the fallback of a device-decided call): one sort segment per
 *    index column q holding (index[i][q], i) for every row i; a segmented
 *    stable radix sort whose segment ends are set on the device (empty
 *    segments when the rows path was taken: a launch per pass whose blocks
 *    return at once); then out = self and the first entry of each run of
 *    equal destinations sums the run, as the general path does.
 * All paths add a destination's sources in ascending index position, in
 * the accumulator type, rounded once: the same bits whichever path runs.
 * validate=eager has already waited for the pre-pass, so there the host
 * reads the note and launches one path. */
#include "cuda_backend.h"

#include <limits.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

/* Below this many index entries the general path's sort is a few short
 * launches and costs less than the rows path plus the gated columns path
 * of a device-decided call: such calls take the general path at once. */
#define ROWS_PATH_MIN (1 << 18)
/* The columns path sorts one column per block: it needs enough columns to
 * fill the GPU (at least one per multiprocessor) or columns short enough
 * that one block sorts one quickly. Other shapes take the general path. */
#define COLUMNS_PATH_MAX_ROWS 65536

template <typename T> struct acc_of { typedef float type; };
template <> struct acc_of<int32_t> { typedef uint32_t type; };
template <> struct acc_of<int64_t> { typedef uint64_t type; };
template <> struct acc_of<__half> { typedef float type; };
template <> struct acc_of<__nv_bfloat16> { typedef float type; };

template <typename T> static __device__ __forceinline__ typename acc_of<T>::type to_acc(T v) {
  return (typename acc_of<T>::type)v;
}
template <> __device__ __forceinline__ float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> static __device__ __forceinline__ T from_acc(typename acc_of<T>::type v) {
  return (T)v;
}
template <> __device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

struct scatter_shapes {
  int ndim, dim;
  int64_t index[APX_MAX_DIMS];
  int64_t src_stride[APX_MAX_DIMS];
  int64_t out_stride[APX_MAX_DIMS];
  int64_t out_dim;  /* out.shape[dim]: valid index values are [0, out_dim) */
  int64_t n;        /* index numel */
};

/* Does a kernel of a device-decided call sit this call out? Yes when the
 * check failed (validate=device), or when `vary` (the pre-pass's row note,
 * NULL: no choice) says the other path runs: kernels of the rows path want
 * constant rows (want_vary 0), the columns path's want varying rows. */
static __device__ __forceinline__ int path_skipped(const int *bad, const int *vary,
                                                   int want_vary) {
  if (cuda_call_failed(bad)) return 1;
  /* written by the check kernel before this kernel started (see
   * cuda_call_failed) */
  return vary != nullptr && (__ldg(vary) != 0) != want_vary;
}

/* out = self, or zeros without self, in 16-byte units where aligned; a
 * kernel rather than a memcpy so that a failed check leaves out untouched. */
template <typename U>
__global__ void start_out_kernel(const U *self, U *out, int64_t units, const int *bad,
                                 const int *vary) {
  if (path_skipped(bad, vary, 1)) return;
  CUDA_FOR(i, units) {
    U v;
    if (self) v = self[i];
    else memset(&v, 0, sizeof v);
    out[i] = v;
  }
}

/* At most `max_blocks` blocks (0: no cap) looping with a grid stride: a
 * kernel that usually returns at once (a device-decided call's path not
 * taken) costs a launch, not a launch of a block per 256 items. */
static cuda_geom capped_geom(int64_t n, unsigned threads, unsigned max_blocks) {
  cuda_geom g = cuda_geom_1d(n, threads);
  if (max_blocks > 0 && g.blocks > max_blocks) g.blocks = max_blocks;
  return g;
}

/* vary: NULL, or the row note of a device-decided call (then out is
 * started only when the columns path runs, by at most max_blocks blocks). */
static cudaError_t start_out(const void *self, void *out, size_t bytes, const int *bad,
                             const int *vary, unsigned max_blocks, cudaStream_t s) {
  if (self == out) return cudaSuccess;
  int wide = bytes % 16 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)self % 16 == 0;
  if (wide) {
    cuda_geom g = capped_geom((int64_t)(bytes / 16), 256, max_blocks);
    start_out_kernel<uint4><<<g.blocks, g.threads, 0, s>>>((const uint4 *)self, (uint4 *)out,
                                                           (int64_t)(bytes / 16), bad, vary);
  } else { /* element sizes are 2, 4 or 8: bytes is even, pointers 2-aligned */
    cuda_geom g = capped_geom((int64_t)(bytes / 2), 256, max_blocks);
    start_out_kernel<uint16_t><<<g.blocks, g.threads, 0, s>>>(
        (const uint16_t *)self, (uint16_t *)out, (int64_t)(bytes / 2), bad, vary);
  }
  return cudaGetLastError();
}

/* ---- general path ---------------------------------------------------------- */

/* The (destination, source offset) pairs, and in the same launch (one
 * fewer per call, which is what small calls cost) out = self or zeros in
 * `units` units of U (0: nothing to start, out is self), unless the check
 * failed. */
template <typename KEY, typename U>
__global__ void scatter_pairs_kernel(const void *__restrict__ index, int index64,
                                     scatter_shapes g, KEY sentinel, KEY *__restrict__ keys,
                                     KEY *__restrict__ src_off, const U *self, U *out,
                                     int64_t units, const int *bad) {
  if (!cuda_call_failed(bad)) {
    CUDA_FOR(i, units) {
      U v;
      if (self) v = self[i];
      else memset(&v, 0, sizeof v);
      out[i] = v;
    }
  }
  CUDA_FOR(p, g.n) {
    int64_t rest = p, dst = 0, so = 0;
    int64_t v = cuda_load_index(index, index64, p);
    for (int d = g.ndim - 1; d >= 0; d--) {
      int64_t c = rest % g.index[d];
      rest /= g.index[d];
      so += c * g.src_stride[d];
      dst += (d == g.dim ? v : c) * g.out_stride[d];
    }
    keys[p] = v >= 0 && v < g.out_dim ? (KEY)dst : sentinel; /* validate=off safety */
    src_off[p] = (KEY)so;
  }
}

template <typename T, typename KEY>
__global__ void scatter_groups_kernel(const KEY *__restrict__ keys,
                                      const KEY *__restrict__ src_off, const T *__restrict__ src,
                                      T *out, int64_t n, KEY sentinel, const int *bad) {
  if (cuda_call_failed(bad)) return;
  CUDA_FOR(s, n) {
    KEY key = keys[s];
    if (key == sentinel || (s > 0 && keys[s - 1] == key)) continue;
    typename acc_of<T>::type acc = to_acc<T>(out[key]);
    for (int64_t q = s; q < n && keys[q] == key; q++) acc += to_acc<T>(src[src_off[q]]);
    out[key] = from_acc<T>(acc);
  }
}

/* ---- rows path ------------------------------------------------------------- */

struct rows_geometry {
  int64_t N;          /* index rows */
  int64_t M;          /* destination rows */
  int64_t cols;       /* out row length */
  int64_t idx_cols;   /* index row length (columns the index covers) */
  int64_t src_row;    /* src row length */
  int vec;            /* columns per thread */
  cuda_geom keys_launch, starts_launch;
  cuda_geom2 out_launch; /* y: destination rows, x: column groups */
};

__global__ void rows_keys_kernel(const void *__restrict__ index, int index64, rows_geometry g,
                                 unsigned *__restrict__ keys, unsigned *__restrict__ rows) {
  CUDA_FOR(i, g.N) {
    int64_t v = cuda_load_index(index, index64, i * g.idx_cols);
    keys[i] = v >= 0 && v < g.M ? (unsigned)v : (unsigned)g.M; /* validate=off safety */
    rows[i] = (unsigned)i;
  }
}

/* start[m] = first sorted source row of destination row m; start[M] = end. */
__global__ void rows_starts_kernel(const unsigned *__restrict__ keys, rows_geometry g,
                                   int *__restrict__ start) {
  CUDA_FOR(s, g.N) {
    int64_t key = keys[s];
    int64_t prev = s == 0 ? -1 : (int64_t)keys[s - 1];
    for (int64_t m = prev + 1; m <= key && m <= g.M; m++) start[m] = (int)s;
    if (s == g.N - 1)
      for (int64_t m = key + 1; m <= g.M; m++) start[m] = (int)g.N;
  }
}

/* Destination rows a thread (rows_out_kernel): their loads in flight
 * together. */
#define ROWS_OUT_UNROLL 4

/* Thread (x: column group, y: a run of ROWS_OUT_UNROLL destination rows)
 * finishes its group of each row: self (or zero), then the row's source
 * rows in ascending order (the stable sort's), one rounding, one store.
 * Each row's self and first source (the common case: one or none) are
 * loaded for all the thread's rows before any is used, the chain start ->
 * rows -> src of each row in flight beside the others'; further sources
 * are added in a loop. An aliased out skips what no source names. */
template <typename T, int VEC>
__global__ void rows_out_kernel(const T *self, const T *__restrict__ src, T *out,
                                const int *__restrict__ start, const unsigned *__restrict__ rows,
                                rows_geometry g, int aliased, const int *bad, const int *vary) {
  if (path_skipped(bad, vary, 0)) return;
  constexpr int RU = ROWS_OUT_UNROLL;
  struct alignas(sizeof(T) * VEC) pack { T v[VEC]; };
  typedef typename acc_of<T>::type A;
  const int64_t groups = g.cols / VEC;
  const int64_t runs = (g.M + RU - 1) / RU;
  CUDA_FOR_OUTER(mr, runs) {
    const int64_t m0 = mr * RU;
    int s0[RU], s1[RU];
#pragma unroll
    for (int j = 0; j < RU; j++) {
      const int64_t m = m0 + j < g.M ? m0 + j : g.M - 1;
      s0[j] = start[m];
      s1[j] = start[m + 1];
    }
    CUDA_FOR_INNER(gi, groups) {
      const int64_t q = (int64_t)gi * VEC;
      const bool reached = q < g.idx_cols; /* columns the index does not reach: self */
      pack base[RU], first[RU];
#pragma unroll
      for (int j = 0; j < RU; j++) {
        const int64_t e = (m0 + j) * g.cols + q;
        const bool here = m0 + j < g.M;
        const bool has = here && reached && s0[j] < s1[j];
        if (self && here && (has || !aliased)) base[j] = *(const pack *)(self + e);
        else memset(&base[j], 0, sizeof base[j]);
        if (has) first[j] = *(const pack *)(src + (int64_t)rows[s0[j]] * g.src_row + q);
        else memset(&first[j], 0, sizeof first[j]);
      }
#pragma unroll
      for (int j = 0; j < RU; j++) {
        const int64_t e = (m0 + j) * g.cols + q;
        const bool has = m0 + j < g.M && reached && s0[j] < s1[j];
        if (m0 + j >= g.M || (!has && aliased)) continue;
        A acc[VEC];
#pragma unroll
        for (int c = 0; c < VEC; c++) acc[c] = to_acc<T>(base[j].v[c]);
        if (has) {
#pragma unroll
          for (int c = 0; c < VEC; c++) acc[c] += to_acc<T>(first[j].v[c]);
          for (int s = s0[j] + 1; s < s1[j]; s++) { /* ascending source row */
            pack v = *(const pack *)(src + (int64_t)rows[s] * g.src_row + q);
#pragma unroll
            for (int c = 0; c < VEC; c++) acc[c] += to_acc<T>(v.v[c]);
          }
        }
        pack o;
#pragma unroll
        for (int c = 0; c < VEC; c++) o.v[c] = from_acc<T>(acc[c]);
        *(pack *)(out + e) = o;
      }
    }
  }
}

/* ---- columns path ---------------------------------------------------------- */

/* Segment q (index column q) of the column-major copy: entries
 * [q*N, (q+1)*N), or empty when the rows are constant (the rows path runs
 * and the segmented sort's blocks return at once). With varying rows, the
 * copy: key = index[i][q] (M, past every valid row, for an out-of-range
 * value: validate=off safety), value = i, in ascending i. */
__global__ void columns_keys_kernel(const void *__restrict__ index, int index64, rows_geometry g,
                                    const int *vary, int *__restrict__ seg_begin,
                                    int *__restrict__ seg_end, unsigned *__restrict__ keys,
                                    unsigned *__restrict__ rows) {
  const int on = __ldg(vary) != 0;
  CUDA_FOR(q, g.idx_cols) {
    seg_begin[q] = (int)(q * g.N);
    seg_end[q] = (int)(on ? (q + 1) * g.N : q * g.N);
  }
  if (!on) return;
  CUDA_FOR(p, g.N * g.idx_cols) { /* p: row-major position in the index */
    int64_t i = p / g.idx_cols, q = p - i * g.idx_cols;
    int64_t v = cuda_load_index(index, index64, p);
    keys[q * g.N + i] = v >= 0 && v < g.M ? (unsigned)v : (unsigned)g.M;
    rows[q * g.N + i] = (unsigned)i;
  }
}

/* The first entry of each run of one destination in a sorted column sums
 * the run (ascending i: the sort is stable) on top of out (= self). */
template <typename T>
__global__ void columns_out_kernel(const unsigned *__restrict__ keys,
                                   const unsigned *__restrict__ rows, const T *__restrict__ src,
                                   T *out, rows_geometry g, const int *bad, const int *vary) {
  if (path_skipped(bad, vary, 1)) return;
  CUDA_FOR(p, g.N * g.idx_cols) { /* p: position in the sorted column-major copy */
    int64_t q = p / g.N, s = p - q * g.N;
    unsigned key = keys[p];
    if (key == (unsigned)g.M || (s > 0 && keys[p - 1] == key)) continue;
    int64_t e = (int64_t)key * g.cols + q;
    typename acc_of<T>::type acc = to_acc<T>(out[e]);
    for (int64_t t = p; t < (q + 1) * g.N && keys[t] == key; t++)
      acc += to_acc<T>(src[(int64_t)rows[t] * g.src_row + q]);
    out[e] = from_acc<T>(acc);
  }
}

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
#define SMALL_MAX_ROWS 256
#define SMALL_COLS 32 /* one column per lane of a tile block */
#define SMALL_THREADS 256
#define SMALL_WARPS (SMALL_THREADS / 32)
/* The accumulator tile's bytes: 128 rows of fp32/u32, 64 rows of u64. */
#define SMALL_ACC_BYTES 16384
/* A list entry: source row << SMALL_ROW_BITS | row within the tile. */
#define SMALL_ROW_BITS 7
/* Row groups of out (G rows each: 16, 8 for 64-bit values): the prep's
 * per-column histogram lives in shared memory (32 KB a block) and the
 * offsets take groups + 1 ints a column. */
#define SMALL_MAX_GROUPS 1024
/* Index columns a prep block sorts, one warp each. */
#define PREP_COLS 8
#define PREP_THREADS (PREP_COLS * 32)
/* Prep blocks: every tile block reads each one's verdict (validate=device),
 * at most 4 loads a thread. */
#define SMALL_MAX_PREP_BLOCKS 1024
/* A prep key that names no row: the value is outside [0, M). */
#define SMALL_NO_ENTRY 0xffffu

template <typename T> static __host__ __device__ constexpr int small_rows() {
  return SMALL_ACC_BYTES / (SMALL_COLS * (int)sizeof(typename acc_of<T>::type));
}
static_assert(small_rows<float>() <= (1 << SMALL_ROW_BITS) &&
                  small_rows<int64_t>() % SMALL_WARPS == 0 &&
                  small_rows<float>() % SMALL_WARPS == 0,
              "small path: tile rows fit a list entry and split over the warps");
static_assert(((SMALL_MAX_ROWS - 1) << SMALL_ROW_BITS | ((1 << SMALL_ROW_BITS) - 1)) <= 0xffff,
              "small path: a list entry fits 16 bits");
static_assert((int64_t)SMALL_MAX_GROUPS * (small_rows<float>() / SMALL_WARPS) <
                  (int64_t)SMALL_NO_ENTRY,
              "small path: a valid row id fits a 16-bit prep key below SMALL_NO_ENTRY");
static_assert(SMALL_MAX_ROWS * PREP_COLS % PREP_THREADS == 0 &&
                  SMALL_MAX_PREP_BLOCKS <= 4 * SMALL_THREADS,
              "small path: prep loads and verdict reads split evenly");


struct small_geometry {
  int N;            /* index rows, 1..SMALL_MAX_ROWS */
  int M;            /* out rows, <= SMALL_MAX_GROUPS * G: valid index values are [0, M) */
  int row_chunks;   /* ceil(M / R): the tile kernel's grid.x */
  int groups;       /* ceil(M / G), <= SMALL_MAX_GROUPS */
  int64_t idx_cols; /* index row length (1 for 1-D) */
  int64_t src_row;  /* src row length, >= idx_cols */
  int64_t cols;     /* out (and self) row length, >= idx_cols */
};

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

/* ---- direct path ----------------------------------------------------------- */

/* A small call whose index is cheap to read several times is one launch
 * (and, with validate=device and an aliased out, the range check beside
 * it): block (x:
 * column chunk, y: row chunk) owns out rows [r0, r0 + RB) and columns
 * [q0, q0 + DIRECT_COLS), a thread a row. It loads the index and src
 * columns of its chunk whole (index row i to thread i) and self under its
 * rows; then each index entry that names a row of the tile takes a place
 * in its out element's list in shared memory (a shared atomic counts, the
 * first DIRECT_LIST places keep the source row); then each thread finishes
 * its row: self, then each element's sources in ascending source row (the
 * list sorted, at most DIRECT_LIST; a longer list, rare with spread
 * values, walks the chunk's keys once for the whole row), one rounding,
 * one store. Every block of a column chunk reads that chunk's index
 * columns: DIRECT_MAX_INDEX_READS bounds what the row chunks read in all
 * (at the seed shape, index 256 x 128 and out 4096 x 128, 8 x 256 KB of
 * L2 reads, less than the prep/tile path's two dependent kernels cost).
 * validate=device: an out-of-place call's first row chunk checks the
 * entries it loaded and publishes the least bad position
 * (direct_first_bad); an aliased call reads the verdict of the range
 * check beside it. What was tried: docs/performance.md, scatter_add. */
/* columns a thread: 8 (4 doubles the blocks and halves each thread's
 * work; the choice is in docs/performance.md, scatter_add) */
#define DIRECT_COLS 8
static_assert(DIRECT_COLS == 4 || DIRECT_COLS == 8, "direct path: 4 or 8 columns a thread");
#define DIRECT_LIST 4 /* source rows kept a slot: one byte each (N <= 256) */
#define DIRECT_MAX_ROW_CHUNKS 16
#define DIRECT_MAX_INDEX_READS (8 << 20) /* bytes over all blocks */
/* out rows a block, a thread each: 512 with 4-byte accumulators, 256 with
 * 8-byte ones (shared memory: 8 bytes a slot, plus N x DIRECT_COLS sources
 * and keys, <= 48 KB) */
template <typename T> static __host__ __device__ constexpr int direct_rows() {
  return sizeof(typename acc_of<T>::type) == 8 ? 256 : 512;
}
static_assert(SMALL_MAX_ROWS <= 256, "direct path: an index row a thread, a source row a byte");

struct direct_geometry {
  int N;            /* index rows, 1..SMALL_MAX_ROWS */
  int M;            /* out rows: valid index values are [0, M) */
  int64_t idx_cols; /* index row length (1 for 1-D) */
  int64_t src_row;  /* src row length, >= idx_cols */
  int64_t cols;     /* out (and self) row length, >= idx_cols */
  /* 16-byte loads and stores of a row's DIRECT_COLS elements where the
   * tensor's base and row length allow them (and the chunk is whole) */
  int vec_index, vec_src, vec_self, vec_out;
};

template <typename X> struct alignas(sizeof(X) * DIRECT_COLS < 16 ? sizeof(X) * DIRECT_COLS : 16)
    direct_row {
  X v[DIRECT_COLS];
};

/* The DIRECT_COLS elements at p, of which the first n (<= DIRECT_COLS)
 * exist; the others zero bits (never used). */
template <typename X>
static __device__ __forceinline__ direct_row<X> direct_load(const X *p, int n, int vec) {
  direct_row<X> r;
  if (vec && n == DIRECT_COLS) return *(const direct_row<X> *)p;
  memset(&r, 0, sizeof r);
#pragma unroll
  for (int c = 0; c < DIRECT_COLS; c++)
    if (c < n) r.v[c] = p[c];
  return r;
}

/* The four bytes of w in ascending order (a sorting network). */
static __device__ __forceinline__ unsigned direct_sort4(unsigned w) {
  unsigned b0 = w & 0xffu, b1 = w >> 8 & 0xffu, b2 = w >> 16 & 0xffu, b3 = w >> 24;
  unsigned x;
#define DIRECT_CX(a, b) (x = min(a, b), b = max(a, b), a = x)
  DIRECT_CX(b0, b1);
  DIRECT_CX(b2, b3);
  DIRECT_CX(b0, b2);
  DIRECT_CX(b1, b3);
  DIRECT_CX(b1, b2);
#undef DIRECT_CX
  return b0 | b1 << 8 | b2 << 16 | b3 << 24;
}

/* validate=device in the direct kernel of an out-of-place call: the
 * blocks of the first row chunk between them load every index entry (one
 * block a column chunk), so each of their warps that holds index rows
 * publishes the least bad position among its rows' entries
 * (cuda_warp_publish), after its stores: no block waits for another. The
 * thread's row is t, its DIRECT_COLS values ix of which n_idx exist. */
template <typename I>
static __device__ __forceinline__ unsigned long long direct_first_bad(const direct_row<I> &ix,
                                                                      int n_idx,
                                                                      const direct_geometry &g,
                                                                      int64_t q0, int t) {
  unsigned long long first = ULLONG_MAX;
  if (t < g.N)
    for (int c = DIRECT_COLS - 1; c >= 0; c--) {
      const int64_t x = (int64_t)ix.v[c];
      if (c < n_idx && (x < 0 || x >= g.M)) first = (unsigned long long)(t * g.idx_cols + q0 + c);
    }
  return first;
}

/* Step 5 of the direct kernel: thread t's out row, every element
 * (docs/ops.md, Every output written): self, then its sources in ascending source row, one
 * rounding, one store at `at`. */
template <typename T>
static __device__ __forceinline__ void direct_finish_row(const int *s_direct,
                                                         const direct_geometry &g,
                                                         const direct_row<T> &start, int t,
                                                         bool from_self, int n_out, T *at) {
  typedef typename acc_of<T>::type A;
  constexpr int RB = direct_rows<T>(), CB = DIRECT_COLS, SLOTS = RB * CB;
  const int *s_count = s_direct;
  const unsigned *s_list = (const unsigned *)(s_direct + SLOTS);
  const A *s_src = (const A *)(s_direct + 2 * SLOTS);
  const short *s_key = (const short *)(s_src + g.N * CB);
  const direct_row<int> count = ((const direct_row<int> *)s_count)[t];
  const direct_row<unsigned> list = ((const direct_row<unsigned> *)s_list)[t];
  A acc[CB];
  bool walk = false;  /* an element with more than DIRECT_LIST sources */
  bool single = true; /* no element with more than one */
#pragma unroll
  for (int c = 0; c < CB; c++) {
    acc[c] = from_self ? to_acc<T>(start.v[c]) : (A)0;
    walk |= count.v[c] > DIRECT_LIST;
    single &= count.v[c] <= 1;
  }
  if (single) { /* the common case with spread values: no order to find */
#pragma unroll
    for (int c = 0; c < CB; c++)
      if (count.v[c] != 0) acc[c] += s_src[(int)(list.v[c] & 0xffu) * CB + c];
  } else {
    if (walk) { /* rare with spread values: the chunk's keys once, every column */
      for (int i = 0; i < g.N; i++) {
        const direct_row<short> key = ((const direct_row<short> *)s_key)[i];
        const direct_row<A> v = ((const direct_row<A> *)s_src)[i];
#pragma unroll
        for (int c = 0; c < CB; c++)
          if (count.v[c] > DIRECT_LIST && key.v[c] == t) acc[c] += v.v[c];
      }
    }
#pragma unroll
    for (int c = 0; c < CB; c++) {
      const int n = count.v[c];
      if (n == 0 || n > DIRECT_LIST) continue;
      /* the places in ascending source row (empty places, 0xff, sort last) */
      const unsigned rows = direct_sort4(list.v[c]);
#pragma unroll
      for (int k = 0; k < DIRECT_LIST; k++)
        if (k < n) acc[c] += s_src[(int)(rows >> 8 * k & 0xffu) * CB + c];
    }
  }
  direct_row<T> o;
#pragma unroll
  for (int c = 0; c < CB; c++) o.v[c] = from_acc<T>(acc[c]);
  if (g.vec_out && n_out == CB) {
    *(direct_row<T> *)at = o;
  } else {
#pragma unroll
    for (int c = 0; c < CB; c++)
      if (c < n_out) at[c] = o.v[c];
  }
}

template <typename T, typename I>
__global__ void __launch_bounds__(direct_rows<T>())
    scatter_direct_kernel(const I *__restrict__ index, const T *self, const T *__restrict__ src,
                          T *out, direct_geometry g, const int *bad, cuda_inline_check ic) {
  typedef typename acc_of<T>::type A;
  constexpr int RB = direct_rows<T>(), CB = DIRECT_COLS, SLOTS = RB * CB;
  static_assert(DIRECT_LIST == 4, "a slot's list is one 32-bit word");
  /* s_count[slot]: the entries naming the slot's out element; s_list[slot]:
   * the source rows of the first DIRECT_LIST of them (bytes, in arrival
   * order; 0xff: none); then, per index row i, its DIRECT_COLS sources and
   * keys (row within the tile, -1: none here) */
  extern __shared__ __align__(16) int s_direct[];
  int *s_count = s_direct;
  unsigned *s_list = (unsigned *)(s_direct + SLOTS);
  A *s_src = (A *)(s_direct + 2 * SLOTS);
  short *s_key = (short *)(s_src + g.N * CB);
  const int t = threadIdx.x;
  const int64_t q0 = (int64_t)blockIdx.x * CB, r0 = (int64_t)blockIdx.y * RB, m = r0 + t;
  const int n_out = (int)min((int64_t)CB, g.cols - q0);
  const int n_idx = (int)max((int64_t)0, min((int64_t)CB, g.idx_cols - q0));

  /* 1: every load this block needs, issued together: self under the
   * thread's row, its index row and src row */
  direct_row<T> start;
  if (self && m < g.M) start = direct_load(self + m * g.cols + q0, n_out, g.vec_self);
  direct_row<I> ix;
  direct_row<T> sv;
  if (t < g.N) {
    ix = direct_load(index + t * g.idx_cols + q0, n_idx, g.vec_index);
    sv = direct_load(src + t * g.src_row + q0, n_idx, g.vec_src);
  }
  /* 2: counts 0, lists empty (the thread's row's slots) */
#pragma unroll
  for (int j = 0; j < CB / 4; j++) {
    ((int4 *)s_count)[CB / 4 * t + j] = make_int4(0, 0, 0, 0);
    ((int4 *)s_list)[CB / 4 * t + j] = make_int4(-1, -1, -1, -1);
  }
  __syncthreads();

  /* 3: the thread's index row: keys and sources to shared memory, its
   * entries into their slots' lists. Values outside this tile's rows (or
   * outside [0, M): validate=off reads and writes nothing for them) are no
   * key. */
  if (t < g.N) {
    direct_row<short> key;
    direct_row<A> v;
    int place[CB];
    /* the atomics first, all in flight, then the list entries */
#pragma unroll
    for (int c = 0; c < CB; c++) {
      const int64_t x = (int64_t)ix.v[c];
      const bool here = c < n_idx && x >= r0 && x < r0 + RB && x < g.M;
      key.v[c] = here ? (short)(x - r0) : (short)-1;
      v.v[c] = to_acc<T>(sv.v[c]);
      place[c] = here ? atomicAdd(&s_count[(int)(x - r0) * CB + c], 1) : DIRECT_LIST;
    }
#pragma unroll
    for (int c = 0; c < CB; c++)
      if (place[c] < DIRECT_LIST)
        ((unsigned char *)s_list)[(key.v[c] * CB + c) * DIRECT_LIST + place[c]] =
            (unsigned char)t;
    ((direct_row<short> *)s_key)[t] = key;
    ((direct_row<A> *)s_src)[t] = v;
  }
  __syncthreads();
  /* validate=device with the check launched beside this kernel
   * (cuda_launch_after, an aliased out): its verdict before the first
   * store */
  cuda_wait_prerequisites();
  if (m < g.M && !cuda_call_failed_after_wait(bad))
    direct_finish_row<T>(s_direct, g, start, t, self != nullptr, n_out, out + m * g.cols + q0);
  /* validate=device in this kernel (an out-of-place out): the first row
   * chunk's warps with index rows (warp-uniform) */
  if (ic.record && blockIdx.y == 0 && (t & ~31) < g.N)
    cuda_warp_publish(ic, direct_first_bad(ix, n_idx, g, q0, t));
}

/* ---- host ------------------------------------------------------------------ */

struct scatter_call {
  apx_op_id op;
  const apx_tensor *self; /* NULL: zeros (gather_backward) */
  const apx_tensor *index, *src, *out;
  int dim;
};

static void strides_of(const apx_tensor *t, int64_t *stride) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= t->shape[d];
  }
}

/* dim 0, and every dimension after 1 equal in index, src and out: then
 * column q of an index row is offset q in the src row and the out row. */
static int rows_eligible(const scatter_call *c) {
  if (c->dim != 0) return 0;
  for (int d = 2; d < c->index->ndim; d++)
    if (c->index->shape[d] != c->src->shape[d] || c->index->shape[d] != c->out->shape[d])
      return 0;
  return 1;
}

/* The rows path; with `vary` (the pre-pass's row note in device memory) a
 * device-decided call: the rows path's output kernel runs only for
 * constant rows, and the columns path follows, working only for varying
 * rows. */
template <typename T>
static apx_status run_rows(cuda_state *st, const scatter_call *c, const int *bad,
                           const int *vary, cudaStream_t s) {
  rows_geometry g;
  int64_t tail = 1; /* product of dims >= 2 */
  for (int d = 2; d < c->index->ndim; d++) tail *= c->index->shape[d];
  g.N = c->index->shape[0];
  g.M = c->out->shape[0];
  g.cols = c->out->ndim > 1 ? c->out->shape[1] * tail : 1;
  g.idx_cols = c->index->ndim > 1 ? c->index->shape[1] * tail : 1;
  g.src_row = c->src->ndim > 1 ? c->src->shape[1] * tail : 1;
  g.keys_launch = cuda_geom_1d(g.N, 256);
  g.starts_launch = cuda_geom_1d(g.N, 256);
  int vec = (int)(16 / sizeof(T));
  const void *ptrs[3] = {c->self ? c->self->data : nullptr, c->src->data, c->out->data};
  for (;;) {
    int ok = g.cols % vec == 0 && g.idx_cols % vec == 0 && g.src_row % vec == 0;
    for (int i = 0; i < 3; i++) ok = ok && (uintptr_t)ptrs[i] % (vec * sizeof(T)) == 0;
    if (ok || vec == 1) break;
    vec /= 2;
  }
  g.vec = vec;
  int64_t groups = g.cols / vec;
  g.out_launch = cuda_geom_2d((g.M + ROWS_OUT_UNROLL - 1) / ROWS_OUT_UNROLL, groups,
                              groups >= 256 ? 256 : (groups >= 128 ? 128 : 64));
  if (groups > 0x7fffffffLL)
    return st->svc->set_error(APX_ERR_UNSUPPORTED,
                              "scatter_add: rows of [%lld] elements are beyond the cuda "
                              "backend's 2^31",
                              (long long)g.cols);
  size_t sort_bytes = 0;
  int end_bit = 1;
  while (end_bit < 32 && ((uint64_t)1 << end_bit) <= (uint64_t)g.M) end_bit++;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, (const unsigned *)nullptr, (unsigned *)nullptr,
      (const unsigned *)nullptr, (unsigned *)nullptr, g.N, 0, end_bit, s);
  if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: sort size");
  /* the columns path: n = N * idx_cols entries (< 2^31, see scatter_run) in
   * idx_cols segments; both sorts share the scratch (one after the other) */
  int64_t n = vary ? g.N * g.idx_cols : 0;
  if (vary) {
    /* the double-buffer form: the sort ping-pongs between our two buffers
     * (the other form adds 2n entries of its own scratch) */
    size_t seg_sort_bytes = 0;
    cub::DoubleBuffer<unsigned> no_keys(nullptr, nullptr), no_rows(nullptr, nullptr);
    err = cub::DeviceSegmentedRadixSort::SortPairs(nullptr, seg_sort_bytes, no_keys, no_rows,
                                                   (int)n, (int)g.idx_cols, (int *)nullptr,
                                                   (int *)nullptr, 0, end_bit, s);
    if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: sort size");
    if (seg_sort_bytes > sort_bytes) sort_bytes = seg_sort_bytes;
  }
  size_t nb = cuda_align_up((size_t)g.N * sizeof(unsigned));
  size_t start_bytes = cuda_align_up((size_t)(g.M + 1) * sizeof(int));
  size_t cb = cuda_align_up((size_t)n * sizeof(unsigned));
  size_t seg_bytes = vary ? cuda_align_up((size_t)g.idx_cols * sizeof(int)) : 0;
  cuda_workspace ws;
  apx_status status = cuda_ws_alloc(
      st, s, 4 * nb + start_bytes + 4 * cb + 2 * seg_bytes + cuda_align_up(sort_bytes), &ws,
      "scatter_add: workspace");
  if (status != APX_OK) return status;
  char *p = (char *)ws.ptr;
  unsigned *keys_in = (unsigned *)p, *keys_out = (unsigned *)(p + nb);
  unsigned *rows_in = (unsigned *)(p + 2 * nb), *rows_out = (unsigned *)(p + 3 * nb);
  int *start = (int *)(p + 4 * nb);
  char *q = p + 4 * nb + start_bytes;
  unsigned *col_keys_in = (unsigned *)q, *col_keys_out = (unsigned *)(q + cb);
  unsigned *col_rows_in = (unsigned *)(q + 2 * cb), *col_rows_out = (unsigned *)(q + 3 * cb);
  int *seg_begin = (int *)(q + 4 * cb), *seg_end = (int *)(q + 4 * cb + seg_bytes);
  void *tmp = q + 4 * cb + 2 * seg_bytes;
  rows_keys_kernel<<<g.keys_launch.blocks, g.keys_launch.threads, 0, s>>>(
      c->index->data, c->index->dtype == APX_DTYPE_I64, g, keys_in, rows_in);
  err = cudaGetLastError();
  if (err == cudaSuccess)
    err = cub::DeviceRadixSort::SortPairs(tmp, sort_bytes, keys_in, keys_out, rows_in, rows_out,
                                          g.N, 0, end_bit, s);
  if (err == cudaSuccess) {
    rows_starts_kernel<<<g.starts_launch.blocks, g.starts_launch.threads, 0, s>>>(keys_out, g,
                                                                                 start);
    int aliased = c->self && c->self->data == c->out->data;
    const T *self = c->self ? (const T *)c->self->data : nullptr;
    const T *src = (const T *)c->src->data;
    T *out = (T *)c->out->data;
    dim3 grid = g.out_launch.grid, block = g.out_launch.block;
    switch (g.vec) {
    case 8: rows_out_kernel<T, 8><<<grid, block, 0, s>>>(self, src, out, start, rows_out, g, aliased, bad, vary); break;
    case 4: rows_out_kernel<T, 4><<<grid, block, 0, s>>>(self, src, out, start, rows_out, g, aliased, bad, vary); break;
    case 2: rows_out_kernel<T, 2><<<grid, block, 0, s>>>(self, src, out, start, rows_out, g, aliased, bad, vary); break;
    default: rows_out_kernel<T, 1><<<grid, block, 0, s>>>(self, src, out, start, rows_out, g, aliased, bad, vary); break;
    }
    err = cudaGetLastError();
  }
  if (err == cudaSuccess && vary) { /* the columns path, for varying rows */
    /* one wave of blocks: with constant rows these kernels only return */
    unsigned wave = 8u * (unsigned)(st->dev[c->out->device_index].sm_count > 0
                                        ? st->dev[c->out->device_index].sm_count
                                        : 132);
    cuda_geom launch = capped_geom(n, 256, wave);
    columns_keys_kernel<<<launch.blocks, launch.threads, 0, s>>>(
        c->index->data, c->index->dtype == APX_DTYPE_I64, g, vary, seg_begin, seg_end,
        col_keys_in, col_rows_in);
    err = cudaGetLastError();
    /* the sorted copy ends in Current() of each (the host knows which: the
     * number of passes follows from end_bit) */
    cub::DoubleBuffer<unsigned> col_keys(col_keys_in, col_keys_out);
    cub::DoubleBuffer<unsigned> col_rows(col_rows_in, col_rows_out);
    if (err == cudaSuccess)
      err = cub::DeviceSegmentedRadixSort::SortPairs(tmp, sort_bytes, col_keys, col_rows, (int)n,
                                                     (int)g.idx_cols, seg_begin, seg_end, 0,
                                                     end_bit, s);
    if (err == cudaSuccess) {
      size_t bytes = (size_t)apx_backend_numel(c->out) * sizeof(T);
      err = start_out(c->self ? c->self->data : nullptr, c->out->data, bytes, bad, vary, wave,
                      s);
    }
    if (err == cudaSuccess) {
      columns_out_kernel<T><<<launch.blocks, launch.threads, 0, s>>>(
          col_keys.Current(), col_rows.Current(), (const T *)c->src->data, (T *)c->out->data, g,
          bad, vary);
      err = cudaGetLastError();
    }
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: launch");
  return APX_OK;
}

template <typename T, typename KEY>
static apx_status run_general(cuda_state *st, const scatter_call *c, const int *bad,
                              cudaStream_t s) {
  scatter_shapes g;
  g.ndim = c->index->ndim;
  g.dim = c->dim;
  for (int d = 0; d < g.ndim; d++) g.index[d] = c->index->shape[d];
  strides_of(c->src, g.src_stride);
  strides_of(c->out, g.out_stride);
  g.out_dim = c->out->shape[c->dim];
  g.n = apx_backend_numel(c->index);
  int64_t out_n = apx_backend_numel(c->out);
  KEY sentinel = (KEY)out_n;
  int end_bit = 1;
  while (end_bit < (int)(8 * sizeof(KEY)) && ((uint64_t)1 << end_bit) <= (uint64_t)out_n)
    end_bit++;
  size_t sort_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, (const KEY *)nullptr, (KEY *)nullptr, (const KEY *)nullptr,
      (KEY *)nullptr, g.n, 0, end_bit, s);
  if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: sort size");
  size_t nb = cuda_align_up((size_t)g.n * sizeof(KEY));
  cuda_workspace ws;
  apx_status status =
      cuda_ws_alloc(st, s, 4 * nb + cuda_align_up(sort_bytes), &ws, "scatter_add: workspace");
  if (status != APX_OK) return status;
  char *p = (char *)ws.ptr;
  KEY *keys_in = (KEY *)p, *keys_out = (KEY *)(p + nb);
  KEY *off_in = (KEY *)(p + 2 * nb), *off_out = (KEY *)(p + 3 * nb);
  void *tmp = p + 4 * nb;
  /* out starts as self (or zeros), in 16-byte units where aligned (element
   * sizes are 2, 4 or 8: bytes is even, pointers 2-aligned); the groups
   * add on top */
  const void *self = c->self ? c->self->data : nullptr;
  void *out = c->out->data;
  size_t bytes = (size_t)out_n * apx_backend_dtype_size(c->out->dtype);
  int wide = bytes % 16 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)self % 16 == 0;
  int64_t units = self == out ? 0 : (int64_t)(bytes / (wide ? 16 : 2));
  cuda_geom launch = cuda_geom_1d(g.n, 256);
  cuda_geom prepare = cuda_geom_1d(units > g.n ? units : g.n, 256);
  const int index64 = c->index->dtype == APX_DTYPE_I64;
  if (wide)
    scatter_pairs_kernel<KEY, uint4><<<prepare.blocks, prepare.threads, 0, s>>>(
        c->index->data, index64, g, sentinel, keys_in, off_in, (const uint4 *)self,
        (uint4 *)out, units, bad);
  else
    scatter_pairs_kernel<KEY, uint16_t><<<prepare.blocks, prepare.threads, 0, s>>>(
        c->index->data, index64, g, sentinel, keys_in, off_in, (const uint16_t *)self,
        (uint16_t *)out, units, bad);
  err = cudaGetLastError();
  if (err == cudaSuccess)
    err = cub::DeviceRadixSort::SortPairs(tmp, sort_bytes, keys_in, keys_out, off_in, off_out,
                                          g.n, 0, end_bit, s);
  if (err == cudaSuccess) {
    scatter_groups_kernel<T, KEY><<<launch.blocks, launch.threads, 0, s>>>(
        keys_out, off_out, (const T *)c->src->data, (T *)c->out->data, g.n, sentinel, bad);
    err = cudaGetLastError();
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: launch");
  return APX_OK;
}

/* A small call's shape, for the direct and the small path: dim 0, a 1-D
 * or 2-D index of 1 to SMALL_MAX_ROWS rows (else 0). Column q of an index
 * row is offset q in the src row and the out row. */
struct rows_shape {
  int64_t N, M;     /* index rows; out rows (valid index values are [0, M)) */
  int64_t idx_cols; /* index row length (1 for 1-D) */
  int64_t src_row;  /* src row length, >= idx_cols */
  int64_t cols;     /* out (and self) row length, >= idx_cols */
};

static int small_shape(const scatter_call *c, rows_shape *sh) {
  const apx_tensor *ix = c->index;
  memset(sh, 0, sizeof *sh);
  if (c->dim != 0 || ix->ndim < 1 || ix->ndim > 2) return 0;
  sh->N = ix->shape[0];
  sh->M = c->out->shape[0];
  sh->idx_cols = ix->ndim > 1 ? ix->shape[1] : 1;
  sh->src_row = c->src->ndim > 1 ? c->src->shape[1] : 1;
  sh->cols = c->out->ndim > 1 ? c->out->shape[1] : 1;
  return sh->N >= 1 && sh->N <= SMALL_MAX_ROWS && sh->idx_cols >= 1;
}

/* A small shape out of at most SMALL_MAX_GROUPS row groups, at most
 * SMALL_MAX_PREP_BLOCKS prep blocks, and the column chunks fit grid.y. */
static int small_eligible(const scatter_call *c) {
  rows_shape sh;
  if (!small_shape(c, &sh)) return 0;
  int64_t R = c->out->dtype == APX_DTYPE_I64 ? small_rows<int64_t>() : small_rows<float>();
  int64_t groups = (sh.M + R / SMALL_WARPS - 1) / (R / SMALL_WARPS);
  int64_t prep_blocks = (sh.idx_cols + PREP_COLS - 1) / PREP_COLS;
  int64_t col_chunks = (sh.cols + SMALL_COLS - 1) / SMALL_COLS;
  return groups >= 1 && groups <= SMALL_MAX_GROUPS && prep_blocks <= SMALL_MAX_PREP_BLOCKS &&
         col_chunks <= 65535;
}

/* validate=eager runs the pre-pass and waits for it (a bad index returns
 * its message here, as in every other path); validate=device checks in the
 * two kernels (no pre-pass launch); validate=off checks nothing. Every
 * tile block reads all prep blocks' verdicts (written before the tile
 * kernel's wait), so an aliased out stays untouched too. */
template <typename T>
static apx_status run_small(cuda_state *st, const scatter_call *c, cudaStream_t s) {
  const int R = small_rows<T>();
  const int dev = c->out->device_index;
  rows_shape sh;
  (void)small_shape(c, &sh); /* small_eligible */
  small_geometry g;
  g.N = (int)sh.N;
  g.M = (int)sh.M;
  g.row_chunks = (g.M + R - 1) / R;
  g.groups = (g.M + R / SMALL_WARPS - 1) / (R / SMALL_WARPS);
  g.idx_cols = sh.idx_cols;
  g.src_row = sh.src_row;
  g.cols = sh.cols;
  cuda_check_desc d;
  cuda_check_init(&d, c->op, "index", c->index);
  d.lo = 0;
  d.hi = g.M - 1;
  if (st->validate_mode == APX_VALIDATE_EAGER) {
    cuda_checked chk;
    apx_status status = cuda_check_run(st, dev, s, &d, 0, &chk);
    if (status != APX_OK) return status;
  }
  /* the description the pre-pass would publish (cuda_check_run's
   * settings for a plain range check), so that the message is the same */
  d.check_range = 1;
  const int check = st->validate_mode == APX_VALIDATE_DEVICE;
  if (check) cuda_check_stamp(st, dev, &d);
  const int prep_blocks = (int)((g.idx_cols + PREP_COLS - 1) / PREP_COLS);
  size_t bad_bytes = check ? cuda_align_up((size_t)prep_blocks * sizeof(unsigned long long)) : 0;
  size_t off_bytes = cuda_align_up((size_t)g.idx_cols * (size_t)(g.groups + 1) * sizeof(int));
  size_t list_bytes = cuda_align_up((size_t)g.idx_cols * (size_t)g.N * sizeof(uint16_t));
  cuda_workspace ws;
  apx_status status =
      cuda_ws_alloc(st, s, bad_bytes + off_bytes + list_bytes, &ws, "scatter_add: workspace");
  if (status != APX_OK) return status;
  char *p = (char *)ws.ptr;
  unsigned long long *first_bad = check ? (unsigned long long *)p : nullptr;
  int *offsets = (int *)(p + bad_bytes);
  uint16_t *list = (uint16_t *)(p + bad_bytes + off_bytes);
  if (c->index->dtype == APX_DTYPE_I64)
    scatter_prep_kernel<small_rows<T>(), int64_t><<<prep_blocks, PREP_THREADS, 0, s>>>(
        (const int64_t *)c->index->data, g, offsets, list, first_bad);
  else
    scatter_prep_kernel<small_rows<T>(), int32_t><<<prep_blocks, PREP_THREADS, 0, s>>>(
        (const int32_t *)c->index->data, g, offsets, list, first_bad);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) {
    const T *self = c->self ? (const T *)c->self->data : nullptr;
    const int *off_arg = offsets;
    const uint16_t *list_arg = list;
    const unsigned long long *bad_arg = first_bad;
    const dim3 grid((unsigned)g.row_chunks, (unsigned)((g.cols + SMALL_COLS - 1) / SMALL_COLS));
    err = cuda_launch_after(st, dev, 1, grid, dim3(SMALL_THREADS), 0, s, scatter_tile_kernel<T>,
                            off_arg, list_arg, g, self, (const T *)c->src->data,
                            (T *)c->out->data, bad_arg, prep_blocks, st->dev[dev].record, d);
    if (err == cudaSuccess) err = cudaGetLastError();
  }
  cuda_ws_free(&ws); /* stream-ordered: after the tile kernel */
  if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: launch");
  return APX_OK;
}

/* A small shape out of at most DIRECT_MAX_ROW_CHUNKS row chunks, with an
 * index whose reads by all row chunks stay within DIRECT_MAX_INDEX_READS. */
static int direct_eligible(const scatter_call *c) {
  rows_shape sh;
  if (!small_shape(c, &sh)) return 0;
  int64_t RB = c->out->dtype == APX_DTYPE_I64 ? direct_rows<int64_t>() : direct_rows<float>();
  int64_t row_chunks = (sh.M + RB - 1) / RB;
  int64_t index_bytes = sh.N * sh.idx_cols * (int64_t)apx_backend_dtype_size(c->index->dtype);
  return row_chunks >= 1 && row_chunks <= DIRECT_MAX_ROW_CHUNKS &&
         index_bytes <= DIRECT_MAX_INDEX_READS / row_chunks &&
         (sh.cols + DIRECT_COLS - 1) / DIRECT_COLS <= INT_MAX;
}

static int direct_vec(const apx_tensor *t, int64_t row) {
  size_t bytes = (size_t)row * apx_backend_dtype_size(t->dtype);
  return (uintptr_t)t->data % 16 == 0 && bytes % 16 == 0;
}

/* validate=device: an out-of-place call's kernel checks the index itself
 * (cuda_check_own, direct_first_bad); an aliased call's range check is a
 * kernel of its own, this one started beside it (cuda_launch_after),
 * reading its verdict before the first store, so that out stays untouched.
 * validate=eager: the pre-pass, waited for. */
template <typename T>
static apx_status run_direct(cuda_state *st, const scatter_call *c, cudaStream_t s) {
  typedef typename acc_of<T>::type A;
  const int RB = direct_rows<T>();
  const int dev = c->out->device_index;
  rows_shape sh;
  (void)small_shape(c, &sh); /* direct_eligible */
  direct_geometry g;
  g.N = (int)sh.N;
  g.M = (int)sh.M;
  g.idx_cols = sh.idx_cols;
  g.src_row = sh.src_row;
  g.cols = sh.cols;
  g.vec_index = direct_vec(c->index, g.idx_cols);
  g.vec_src = direct_vec(c->src, g.src_row);
  g.vec_self = c->self ? direct_vec(c->self, g.cols) : 0;
  g.vec_out = direct_vec(c->out, g.cols);
  const size_t smem = (size_t)2 * RB * DIRECT_COLS * sizeof(int) +
                      (size_t)g.N * DIRECT_COLS * (sizeof(A) + sizeof(short));
  const dim3 grid((unsigned)((g.cols + DIRECT_COLS - 1) / DIRECT_COLS),
                  (unsigned)((g.M + RB - 1) / RB));
  const int i64 = c->index->dtype == APX_DTYPE_I64;
  cudaError_t err;
  cuda_check_desc d;
  cuda_check_init(&d, c->op, "index", c->index);
  d.lo = 0;
  d.hi = g.M - 1;
  const int aliased = c->self && c->self->data == c->out->data;
  cuda_inline_check ic;
  memset(&ic, 0, sizeof ic);
  const int *bad = nullptr;
  if (aliased || !cuda_check_own(st, dev, &d, &ic)) {
    cuda_checked chk;
    apx_status status = cuda_check_run(st, dev, s, &d, 0, &chk);
    if (status != APX_OK) return status;
    bad = chk.bad;
  }
  const T *self = c->self ? (const T *)c->self->data : nullptr;
  if (i64)
    err = cuda_launch_after(st, dev, bad != nullptr, grid, dim3(RB), smem, s,
                            scatter_direct_kernel<T, int64_t>, (const int64_t *)c->index->data,
                            self, (const T *)c->src->data, (T *)c->out->data, g, bad, ic);
  else
    err = cuda_launch_after(st, dev, bad != nullptr, grid, dim3(RB), smem, s,
                            scatter_direct_kernel<T, int32_t>, (const int32_t *)c->index->data,
                            self, (const T *)c->src->data, (T *)c->out->data, g, bad, ic);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_fail(st, err, "scatter_add: launch");
  return APX_OK;
}

/* rows: 1 the rows path, 0 the general path, -1 the device decides
 * between the rows and the columns path from the row note `vary`. */
template <typename T>
static apx_status run_typed(cuda_state *st, const scatter_call *c, int rows, const int *bad,
                            const int *vary, cudaStream_t s) {
  if (rows) return run_rows<T>(st, c, bad, rows < 0 ? vary : nullptr, s);
  int64_t big = apx_backend_numel(c->out) > apx_backend_numel(c->src) ? apx_backend_numel(c->out)
                                                                      : apx_backend_numel(c->src);
  if (big < (int64_t)0xffffffffLL) return run_general<T, uint32_t>(st, c, bad, s);
  return run_general<T, unsigned long long>(st, c, bad, s);
}

static apx_status scatter_run(cuda_state *st, const scatter_call *c, const apx_call *call) {
  int dev = c->out->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  int64_t out_n = apx_backend_numel(c->out), n = apx_backend_numel(c->index);
  if (out_n == 0) return APX_OK;
  size_t bytes = (size_t)out_n * apx_backend_dtype_size(c->out->dtype);
  if (n == 0) { /* empty index: out = self (or zeros) */
    if (!c->self)
      CUDA_TRY(st, cudaMemsetAsync(c->out->data, 0, bytes, stream), "gather_backward: zero fill");
    else if (c->self->data != c->out->data)
      CUDA_TRY(st, cudaMemcpyAsync(c->out->data, c->self->data, bytes, cudaMemcpyDeviceToDevice,
                                   stream),
               "scatter_add: copy of self");
    return APX_OK;
  }
  /* the direct path: one launch, the range check beside it
   * (validate=device) or waited for before it (eager) */
  if (direct_eligible(c)) {
    switch (c->out->dtype) {
    case APX_DTYPE_F16: return run_direct<__half>(st, c, stream);
    case APX_DTYPE_BF16: return run_direct<__nv_bfloat16>(st, c, stream);
    case APX_DTYPE_I32: return run_direct<int32_t>(st, c, stream);
    case APX_DTYPE_I64: return run_direct<int64_t>(st, c, stream);
    default: return run_direct<float>(st, c, stream);
    }
  }
  /* the small path: two launches that check the index themselves
   * (validate=device) or after the waited-for pre-pass (eager) */
  if (small_eligible(c)) {
    switch (c->out->dtype) {
    case APX_DTYPE_F16: return run_small<__half>(st, c, stream);
    case APX_DTYPE_BF16: return run_small<__nv_bfloat16>(st, c, stream);
    case APX_DTYPE_I32: return run_small<int32_t>(st, c, stream);
    case APX_DTYPE_I64: return run_small<int64_t>(st, c, stream);
    default: return run_small<float>(st, c, stream);
    }
  }
  int eligible = rows_eligible(c);
  int64_t rows_n = c->index->shape[0];
  int64_t row_len = c->index->ndim > 1 ? n / rows_n : 1;
  /* ask the pre-pass whether the rows are constant where the rows path
   * pays: many entries, and a shape the columns path (the device-decided
   * fallback) sorts well; its int offsets need n < 2^31 */
  int ask_rows = eligible && row_len > 1 && n >= ROWS_PATH_MIN && n < 0x7fffffffLL &&
                 (row_len >= st->dev[dev].sm_count || rows_n <= COLUMNS_PATH_MAX_ROWS);
  cuda_check_desc d;
  cuda_check_init(&d, c->op, "index", c->index);
  d.lo = 0;
  d.hi = c->out->shape[c->dim] - 1;
  if (ask_rows) d.const_row = row_len;
  cuda_checked chk;
  s = cuda_check_run(st, dev, stream, &d, ask_rows, &chk);
  if (s != APX_OK) return s;
  int rows = eligible && row_len == 1;
  if (ask_rows && st->validate_mode == APX_VALIDATE_EAGER) {
    /* eager has waited for the pre-pass already: read the note, one path */
    int vary = 1;
    s = cuda_check_read_rows_vary(st, stream, &chk, &vary);
    if (s != APX_OK) return s;
    rows = !vary;
  } else if (ask_rows && chk.rows_vary) {
    rows = -1; /* the device decides: no wait for the host */
  }
  switch (c->out->dtype) {
  case APX_DTYPE_F16: return run_typed<__half>(st, c, rows, chk.bad, chk.rows_vary, stream);
  case APX_DTYPE_BF16:
    return run_typed<__nv_bfloat16>(st, c, rows, chk.bad, chk.rows_vary, stream);
  case APX_DTYPE_I32: return run_typed<int32_t>(st, c, rows, chk.bad, chk.rows_vary, stream);
  case APX_DTYPE_I64: return run_typed<int64_t>(st, c, rows, chk.bad, chk.rows_vary, stream);
  default: return run_typed<float>(st, c, rows, chk.bad, chk.rows_vary, stream);
  }
}

apx_status cuda_scatter_accumulate(cuda_state *st, apx_op_id op, const apx_tensor *self,
                                   const apx_tensor *index, const apx_tensor *src,
                                   const apx_tensor *out, int dim, const apx_call *call) {
  scatter_call c;
  c.op = op;
  c.self = self;
  c.index = index;
  c.src = src;
  c.out = out;
  c.dim = dim < 0 ? dim + out->ndim : dim;
  return scatter_run(st, &c, call);
}

apx_status cuda_scatter_add(void *state, const apx_scatter_add_args *a, const apx_call *call) {
  return cuda_scatter_accumulate((cuda_state *)state, APX_OP_SCATTER_ADD, a->self, a->index,
                                 a->src, a->out, a->dim, call);
}
