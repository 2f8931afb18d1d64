/* SPDX-License-Identifier: Apache-2.0 */
/* scatter_add on CUDA (scatter_add.cu): what its kernels are given and
 * the choices of paths and launch tuning, in one place. The kernels:
 * scatter_add_common.cuh (out = self, the accumulator types),
 * scatter_add_sort.cuh (the general, rows and columns paths),
 * scatter_add_small.cuh and scatter_add_direct.cuh (the small paths); the
 * launch switch: scatter_add.cu. */
#ifndef APX_CUDA_SCATTER_ADD_H
#define APX_CUDA_SCATTER_ADD_H

#include "cuda_backend.h"

/* Below this many index entries the general path's sort is a few short
 * launches and costs less than the rows path plus the gated columns path
 * of a device-decided call: such calls take the general path at once. */
#define ROWS_PATH_MIN (1 << 18)
/* The columns path sorts one column per block: it needs enough columns to
 * fill the GPU (at least one per multiprocessor) or columns short enough
 * that one block sorts one quickly. Other shapes take the general path. */
#define COLUMNS_PATH_MAX_ROWS 65536

/* The accumulator of an element type: fp32 for floats, unsigned (exact,
 * wrapping) for integers. */
template <typename T> struct acc_of { typedef float type; };
template <> struct acc_of<int32_t> { typedef uint32_t type; };
template <> struct acc_of<int64_t> { typedef uint64_t type; };
template <> struct acc_of<__half> { typedef float type; };
template <> struct acc_of<__nv_bfloat16> { typedef float type; };

struct scatter_shapes {
  int ndim, dim;
  int64_t index[APX_MAX_DIMS];
  int64_t src_stride[APX_MAX_DIMS];
  int64_t out_stride[APX_MAX_DIMS];
  int64_t out_dim;  /* out.shape[dim]: valid index values are [0, out_dim) */
  int64_t n;        /* index numel */
};

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

/* Destination rows a thread (rows_out_kernel): their loads in flight
 * together. */
#define ROWS_OUT_UNROLL 4

/* ---- the small path (scatter_add_small.cuh) ---------------------------------- */

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

/* ---- the direct path (scatter_add_direct.cuh) -------------------------------- */

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

#endif /* APX_CUDA_SCATTER_ADD_H */
