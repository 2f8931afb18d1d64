/* SPDX-License-Identifier: Apache-2.0 */
/* index_select_backward on CUDA (docs/ops.md, index_select_backward):
 * grad_src = zeros, then grad_src[..,index[i],..] += grad_out[..,i,..] along
 * dim for i in ascending order, over grad_src viewed as [outer, M, D] and
 * grad_out as [outer, N, D] around dim.
 *
 * No atomics, so the result is the same bits on every run and the cpu
 * backend's: the pairs (index[i], i) are sorted by destination row with
 * cub's stable radix sort (i stays ascending within a row; a bad value
 * gets the key M and sorts past every row), each row's run is found by a
 * binary search, and one thread per grad_src element (o, m, j) sums m's run
 * over grad_out's rows (o, i) in fp32 from zero (integers: exactly,
 * wrapping) and stores once (a 2-D grid over the rows (o, m) and j where the
 * rows fit 32 bits and D is at least a warp; a 1-D grid otherwise). The values are checked by the pre-pass
 * (cuda_check_run, every validate mode's rule); a bad one is never summed,
 * so nothing is read out of bounds.
 *
 * A short index (at most ISB_SMALL_N entries, over few enough rows:
 * ISB_SMALL_WORK) takes one launch instead of five (the pairs, the sort,
 * the starts, the sums, and the check): every block stages the index in
 * shared memory (a bad value as -1), and a warp per grad_src row (o, m)
 * finds the entries naming m a ballot of 32 at a time, in ascending i,
 * adding their rows (lanes over j) in the same order from zero: the same
 * sums, so the same bits. In validate=device the first block checks the
 * values as it stages them (cuda_check_own; grad_src is never an alias). */
#include <cub/cub.cuh>

#include "cuda_backend.h"

#define INDEX_SELECT_BACKWARD_THREADS 256
/* the one-launch form: at most this many index entries, and grad_src rows
 * times max(entries, 32) at most ISB_SMALL_WORK (a warp's ballots a row) */
#define ISB_SMALL_N 1024
#define ISB_SMALL_WORK (1 << 24)
/* columns a lane sums per pass over the entries (a warp: 128) */
#define ISB_SMALL_COLS 4

template <typename KEY>
__global__ void __launch_bounds__(INDEX_SELECT_BACKWARD_THREADS)
    isb_pairs(const void *__restrict__ index, int is64, int64_t n, int64_t M,
              KEY *__restrict__ keys, KEY *__restrict__ rows) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t v = cuda_load_index(index, is64, i);
  keys[i] = (KEY)(v >= 0 && v < M ? v : M);
  rows[i] = (KEY)i;
}

/* start[m] = the first sorted position whose key is >= m, m in [0, M]. */
template <typename KEY>
__global__ void __launch_bounds__(INDEX_SELECT_BACKWARD_THREADS)
    isb_starts(const KEY *__restrict__ keys, int64_t n, int64_t M, int64_t *__restrict__ start) {
  const int64_t m = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (m > M) return;
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if ((int64_t)keys[mid] < m)
      lo = mid + 1;
    else
      hi = mid;
  }
  start[m] = lo;
}

/* The sum of a float type in fp32, of an integer type exactly (unsigned:
 * two's complement wrap). */
template <typename T> struct isb_acc {
  typedef float type;
  static __device__ __forceinline__ float load(const T *p) { return cuda_dt<T>::load(p); }
  static __device__ __forceinline__ T store(float v) { return cuda_dt<T>::from_f(v); }
};
template <> struct isb_acc<int32_t> {
  typedef uint32_t type;
  static __device__ __forceinline__ uint32_t load(const int32_t *p) { return (uint32_t)*p; }
  static __device__ __forceinline__ int32_t store(uint32_t v) { return (int32_t)v; }
};
template <> struct isb_acc<int64_t> {
  typedef uint64_t type;
  static __device__ __forceinline__ uint64_t load(const int64_t *p) { return (uint64_t)*p; }
  static __device__ __forceinline__ int64_t store(uint64_t v) { return (int64_t)v; }
};

template <typename T, typename KEY>
__global__ void __launch_bounds__(INDEX_SELECT_BACKWARD_THREADS)
    isb_sum(const T *__restrict__ grad_out, T *__restrict__ grad_src,
            const KEY *__restrict__ rows, const int64_t *__restrict__ start, int64_t N,
            int64_t M, int64_t D, int64_t numel) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < numel;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = e / D, j = e % D, o = r / M, m = r - o * M;
    typename isb_acc<T>::type sum = 0;
    for (int64_t p = start[m]; p < start[m + 1]; p++)
      sum += isb_acc<T>::load(grad_out + (o * N + (int64_t)rows[p]) * D + j);
    grad_src[e] = isb_acc<T>::store(sum);
  }
}

/* isb_sum over rows r = o*M + m (r < 2^31) and j in [0, D) */
template <typename T, typename KEY>
__global__ void __launch_bounds__(INDEX_SELECT_BACKWARD_THREADS)
    isb_sum_rows(const T *__restrict__ grad_out, T *__restrict__ grad_src,
                 const KEY *__restrict__ rows, const int64_t *__restrict__ start, int64_t N,
                 cuda_fastdiv fM, int64_t n_rows, uint32_t D) {
  CUDA_FOR_OUTER(r, n_rows) {
    const uint32_t o = fM.div((uint32_t)r), m = (uint32_t)r - o * fM.d;
    const int64_t p0 = start[m], p1 = start[m + 1];
    const T *src = grad_out + (int64_t)o * N * D;
    T *dst = grad_src + r * D;
    CUDA_FOR_INNER(j, D) {
      typename isb_acc<T>::type sum = 0;
      for (int64_t p = p0; p < p1; p++) sum += isb_acc<T>::load(src + (int64_t)rows[p] * D + j);
      dst[j] = isb_acc<T>::store(sum);
    }
  }
}

/* The one-launch form: rows = outer * M < 2^19 (ISB_SMALL_WORK), n <= ISB_SMALL_N. */
template <typename T>
__global__ void __launch_bounds__(INDEX_SELECT_BACKWARD_THREADS)
    isb_small(const T *__restrict__ grad_out, T *__restrict__ grad_src,
              const void *__restrict__ index, int is64, int n, int M, int64_t D, int rows,
              cuda_inline_check ic) {
  typedef typename isb_acc<T>::type acc;
  __shared__ int s_row[ISB_SMALL_N];
  for (int base = 0; base < n; base += blockDim.x) { /* whole warps: cuda_warp_publish */
    const int i = base + (int)threadIdx.x;
    const int64_t v = i < n ? cuda_load_index(index, is64, i) : 0;
    const bool bad = i < n && (v < 0 || v >= M);
    if (i < n) s_row[i] = bad ? -1 : (int)v;
    if (ic.record && blockIdx.x == 0) cuda_warp_publish(ic, bad ? (unsigned long long)i : ~0ULL);
  }
  __syncthreads();
  const int lane = (int)(threadIdx.x & 31), warps = (int)(blockDim.x >> 5);
  for (int r = (int)blockIdx.x * warps + (int)(threadIdx.x >> 5); r < rows;
       r += (int)gridDim.x * warps) {
    const int o = r / M, m = r - o * M;
    const T *src = grad_out + (int64_t)o * n * D;
    T *dst = grad_src + (int64_t)r * D;
    for (int64_t j0 = 0; j0 < D; j0 += 32 * ISB_SMALL_COLS) {
      acc sum[ISB_SMALL_COLS];
#pragma unroll
      for (int q = 0; q < ISB_SMALL_COLS; q++) sum[q] = 0;
      for (int base = 0; base < n; base += 32) {
        unsigned hits = __ballot_sync(0xffffffffu, base + lane < n && s_row[base + lane] == m);
        while (hits) { /* ascending i */
          const int i = base + __ffs(hits) - 1;
          hits &= hits - 1u;
          const T *row = src + (int64_t)i * D + j0 + lane;
#pragma unroll
          for (int q = 0; q < ISB_SMALL_COLS; q++)
            if (j0 + lane + 32 * q < D) sum[q] += isb_acc<T>::load(row + 32 * q);
        }
      }
#pragma unroll
      for (int q = 0; q < ISB_SMALL_COLS; q++)
        if (j0 + lane + 32 * q < D) dst[j0 + lane + 32 * q] = isb_acc<T>::store(sum[q]);
    }
  }
}

template <typename T>
static apx_status launch_small(cuda_state *st, const apx_index_select_backward_args *a,
                               const cuda_inline_check &ic, cudaStream_t s) {
  int64_t outer, M, D;
  apx_index_select_view(a->grad_src, a->dim, &outer, &M, &D);
  const int64_t rows = outer * M, warps = INDEX_SELECT_BACKWARD_THREADS / 32;
  int64_t blocks = (rows + warps - 1) / warps;
  if (blocks > 4096) blocks = 4096;
  isb_small<T><<<(unsigned)blocks, INDEX_SELECT_BACKWARD_THREADS, 0, s>>>(
      (const T *)a->grad_out->data, (T *)a->grad_src->data, a->index->data,
      a->index->dtype == APX_DTYPE_I64, (int)a->index->shape[0], (int)M, D, (int)rows, ic);
  CUDA_LAUNCHED(st, "index_select_backward: launch");
  return APX_OK;
}

template <typename T, typename KEY>
static void launch_sum(const void *go, void *gs, const KEY *rows, const int64_t *start,
                       int64_t outer, int64_t N, int64_t M, int64_t D, cudaStream_t s) {
  const int64_t n_rows = outer * M;
  if (n_rows < 0x7fffffffLL && D >= 32 && D < 0x7fffffffLL) {
    const unsigned threads = D >= INDEX_SELECT_BACKWARD_THREADS ? INDEX_SELECT_BACKWARD_THREADS
                                                                 : (unsigned)((D + 31) / 32 * 32);
    cuda_geom2 g = cuda_geom_2d(n_rows, D, threads);
    isb_sum_rows<T, KEY><<<g.grid, g.block, 0, s>>>((const T *)go, (T *)gs, rows, start, N,
                                                    cuda_fastdiv_make((uint32_t)M), n_rows,
                                                    (uint32_t)D);
    return;
  }
  cuda_geom g = cuda_geom_1d(n_rows * D, INDEX_SELECT_BACKWARD_THREADS);
  isb_sum<T, KEY><<<g.blocks, g.threads, 0, s>>>((const T *)go, (T *)gs, rows, start, N, M, D,
                                                 n_rows * D);
}

template <typename KEY>
static apx_status run_keyed(cuda_state *st, const apx_index_select_backward_args *a,
                            cudaStream_t s) {
  int64_t outer, M, D;
  apx_index_select_view(a->grad_src, a->dim, &outer, &M, &D);
  const int64_t n = a->index->shape[0];
  int end_bit = 1;
  while (end_bit < (int)(8 * sizeof(KEY)) && ((uint64_t)1 << end_bit) <= (uint64_t)M) end_bit++;
  size_t sort_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, (const KEY *)nullptr, (KEY *)nullptr, (const KEY *)nullptr,
      (KEY *)nullptr, n, 0, end_bit, s);
  if (err != cudaSuccess) return cuda_fail(st, err, "index_select_backward: sort size");
  const size_t nb = cuda_align_up((size_t)(n > 0 ? n : 1) * sizeof(KEY));
  const size_t sb = cuda_align_up((size_t)(M + 1) * sizeof(int64_t));
  cuda_workspace ws;
  apx_status status = cuda_ws_alloc(st, s, 4 * nb + sb + cuda_align_up(sort_bytes), &ws,
                                    "index_select_backward: workspace");
  if (status != APX_OK) return status;
  char *p = (char *)ws.ptr;
  KEY *keys_in = (KEY *)p, *keys_out = (KEY *)(p + nb);
  KEY *rows_in = (KEY *)(p + 2 * nb), *rows_out = (KEY *)(p + 3 * nb);
  int64_t *start = (int64_t *)(p + 4 * nb);
  void *tmp = p + 4 * nb + sb;
  const unsigned T_ = INDEX_SELECT_BACKWARD_THREADS;
  if (n > 0) {
    cuda_geom g = cuda_geom_1d(n, T_);
    isb_pairs<KEY><<<g.blocks, g.threads, 0, s>>>(
        a->index->data, a->index->dtype == APX_DTYPE_I64, n, M, keys_in, rows_in);
    err = cudaGetLastError();
    if (err == cudaSuccess)
      err = cub::DeviceRadixSort::SortPairs(tmp, sort_bytes, keys_in, keys_out, rows_in,
                                            rows_out, n, 0, end_bit, s);
  }
  if (err == cudaSuccess) {
    cuda_geom g = cuda_geom_1d(M + 1, T_);
    isb_starts<KEY><<<g.blocks, g.threads, 0, s>>>(keys_out, n, M, start);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    const void *go = a->grad_out->data;
    void *gs = a->grad_src->data;
    switch (a->grad_out->dtype) {
    case APX_DTYPE_F16:
      launch_sum<__half, KEY>(go, gs, rows_out, start, outer, n, M, D, s);
      break;
    case APX_DTYPE_BF16:
      launch_sum<__nv_bfloat16, KEY>(go, gs, rows_out, start, outer, n, M, D, s);
      break;
    case APX_DTYPE_I32:
      launch_sum<int32_t, KEY>(go, gs, rows_out, start, outer, n, M, D, s);
      break;
    case APX_DTYPE_I64:
      launch_sum<int64_t, KEY>(go, gs, rows_out, start, outer, n, M, D, s);
      break;
    default:
      launch_sum<float, KEY>(go, gs, rows_out, start, outer, n, M, D, s);
      break;
    }
    err = cudaGetLastError();
  }
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "index_select_backward: launch");
  return APX_OK;
}

apx_status cuda_index_select_backward(void *state, const apx_index_select_backward_args *a,
                                      const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  const int dev = a->grad_out->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  if (apx_backend_numel(a->grad_src) == 0) return APX_OK;
  int64_t outer, M, D;
  apx_index_select_view(a->grad_src, a->dim, &outer, &M, &D);
  (void)D;
  const int64_t n = a->index->shape[0];
  const int64_t rows = outer * M;
  if (n <= ISB_SMALL_N && rows <= ISB_SMALL_WORK / (n > 32 ? n : 32)) {
    cuda_inline_check ic;
    memset(&ic, 0, sizeof ic);
    if (n > 0) {
      cuda_check_desc d;
      cuda_check_init(&d, APX_OP_INDEX_SELECT_BACKWARD, "index", a->index);
      d.lo = 0;
      d.hi = M - 1;
      if (!cuda_check_own(st, dev, &d, &ic)) {
        cuda_checked chk; /* eager: checked (and refused) here; off: nothing */
        s = cuda_check_run(st, dev, stream, &d, 0, &chk);
        if (s != APX_OK) return s;
      }
    }
    switch (a->grad_out->dtype) {
    case APX_DTYPE_F16: return launch_small<__half>(st, a, ic, stream);
    case APX_DTYPE_BF16: return launch_small<__nv_bfloat16>(st, a, ic, stream);
    case APX_DTYPE_I32: return launch_small<int32_t>(st, a, ic, stream);
    case APX_DTYPE_I64: return launch_small<int64_t>(st, a, ic, stream);
    default: return launch_small<float>(st, a, ic, stream);
    }
  }
  if (n > 0) {
    s = cuda_check_index_values(st, dev, stream, APX_OP_INDEX_SELECT_BACKWARD, "index",
                                a->index, 0, M - 1, 0);
    if (s != APX_OK) return s;
  }
  /* 32-bit keys and rows while M + 1 and N fit them (the sort moves half the bytes) */
  if (M < 0xffffffffLL && n <= 0xffffffffLL) return run_keyed<uint32_t>(st, a, stream);
  return run_keyed<unsigned long long>(st, a, stream);
}
