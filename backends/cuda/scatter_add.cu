/* SPDX-License-Identifier: Apache-2.0 */
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
/* Layers: scatter_add.h (the kernels' arguments, the paths' bounds and
 * launch tuning), the kernels in scatter_add_common.cuh,
 * scatter_add_sort.cuh, scatter_add_small.cuh and scatter_add_direct.cuh;
 * here the choice of path, the launches and the op's entry. */
#include "cuda_backend.h"

#include <limits.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "scatter_add.h"
#include "scatter_add_common.cuh"
#include "scatter_add_sort.cuh"
#include "scatter_add_small.cuh"
#include "scatter_add_direct.cuh"

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
