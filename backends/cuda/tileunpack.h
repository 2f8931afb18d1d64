/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack on CUDA (tileunpack.cu): what its kernels are given and the
 * launch tuning, in one place. The kernels: tileunpack_index.cuh (the
 * winner map and the sorted entries), tileunpack_cells.cuh (the output
 * pass), tileunpack_small.cuh and tileunpack_table.cuh (the one-launch
 * forms of small K); the launch switch: tileunpack.cu. */
#ifndef APX_CUDA_TILEUNPACK_H
#define APX_CUDA_TILEUNPACK_H

#include "cuda_backend.h"

struct unpack_geometry {
  int64_t B, C, H, W, K, t, gh, gw, cells; /* cells = B*gh*gw */
  int64_t entries_per_tile;                /* 1 (ids) or 4 (origins) */
  int64_t entries;
  int order_bits;
  int end_bit;     /* bits of the sort key */
  int vec;         /* output elements per thread along x */
  int64_t planes;  /* B*C: the output pass's outer loop */
  int64_t plane_groups;      /* H*W/vec: its inner loop, < 2^31 */
  cuda_fastdiv groups_per_row; /* W/vec */
  cuda_fastdiv tile;           /* t */
  cuda_geom tiles_launch, entries_launch;
  int units;       /* output groups per thread: UNPACK_UNITS (override with ids) or 1 */
  cuda_geom2 out_launch;     /* x: pixel groups of a plane, y: planes (b, c) */
};

/* Inputs of the entry builder. */
struct unpack_sources {
  const void *idx;     /* [B,K] ids, or NULL */
  const void *origins; /* [B,K,2] (y0,x0), or NULL */
  int placement_is64;
  const void *levels;  /* [B,K] or NULL */
  int levels_is64;
  const long long *lmin; /* device: minimum of levels */
};

/* Where a thread's pixel group finds its tiles: a per-cell winner map
 * (ids: the highest key per cell, built with atomicMax, and for blend the
 * number of tiles per cell) and/or the sorted entry list of the cell. */
struct unpack_cells_src {
  const unsigned long long *win; /* [cells]: key + 1, 0 = none (ids only) */
  const int *count;              /* [cells]: tiles on the cell (ids, blend) */
  unsigned long long kmask;      /* low bits of a key holding k */
  const int *start, *vals;       /* sorted entries per cell (NULL: override with ids) */
  const int2 *origin32;
};

/* ---- launch tuning ---------------------------------------------------------- */

/* Pixel groups per thread on the winner-map path (ids): override holds
 * one row segment a group (unpack_cells_kernel), blend two, tile and base
 * (unpack_blend_ids_kernel, 79 registers with fp16). */
#define UNPACK_UNITS 4
#define UNPACK_BLEND_UNITS 4
#define UNPACK_THREADS 256

/* The one-launch form of small K (unpack_small_kernel) */
#define UNPACK_SMALL_K 64
#define UNPACK_RANK_PARTS 4
#define UNPACK_SMALL_BLEND_UNITS 2 /* four took up to 125 registers */

/* Its table form on small tile grids (unpack_table_kernel) */
#define UNPACK_TABLE_CELLS 2048 /* dynamic shared memory: 8 bytes a cell (<= 20 KB in all) */
#define UNPACK_TABLE_UNITS 4

#endif /* APX_CUDA_TILEUNPACK_H */
