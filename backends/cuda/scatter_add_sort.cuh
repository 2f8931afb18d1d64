/* SPDX-License-Identifier: Apache-2.0 */
/* scatter_add's paths through a radix sort (scatter_add.cu): the general
 * path's (destination, source) pairs and group sums, the rows path's keys,
 * run starts and output pass, the columns path's segments and sums. */
#ifndef APX_CUDA_SCATTER_ADD_SORT_CUH
#define APX_CUDA_SCATTER_ADD_SORT_CUH

#include "scatter_add_common.cuh"

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

#endif /* APX_CUDA_SCATTER_ADD_SORT_CUH */
