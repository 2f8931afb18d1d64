/* SPDX-License-Identifier: Apache-2.0 */
/* scatter_add's direct path (scatter_add.cu): one launch, each block
 * reading its columns of the index and src whole. */
#ifndef APX_CUDA_SCATTER_ADD_DIRECT_CUH
#define APX_CUDA_SCATTER_ADD_DIRECT_CUH

#include "scatter_add_common.cuh"

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

#endif /* APX_CUDA_SCATTER_ADD_DIRECT_CUH */
