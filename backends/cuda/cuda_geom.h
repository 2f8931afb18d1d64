/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's launch geometry: how a kernel's threads cover its
 * work (1-D and 2-D grids with grid-stride loops) and division by a
 * run-time constant in kernels (cuda_fastdiv). */
#ifndef APX_CUDA_GEOM_H
#define APX_CUDA_GEOM_H

#include <cuda_runtime.h>
#include <stdint.h>

/* n / d and n % d for n, d < 2^31 with a multiply and a shift
 * (Granlund-Montgomery, as PyTorch's IntDivider): 64-bit division by a
 * run-time value costs dozens of instructions per element. */
struct cuda_fastdiv {
  uint32_t d, m, s;
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (__umulhi(n, m) + n) >> s;
  }
  __device__ __forceinline__ uint32_t mod(uint32_t n) const { return n - div(n) * d; }
};

static inline cuda_fastdiv cuda_fastdiv_make(uint32_t d) {
  cuda_fastdiv f;
  f.d = d ? d : 1;
  f.s = 0;
  while (f.s < 32 && ((uint64_t)1 << f.s) < f.d) f.s++;
  f.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << f.s) - f.d)) / f.d + 1);
  return f;
}

/* ---- launch geometry ---------------------------------------------------- */

/* One 1-D launch over n work items: blocks of `threads`, the grid capped at
 * what the hardware takes; kernels loop with a grid stride so any n is
 * covered (docs/ops.md, Every output written: every output element is written). */
struct cuda_geom {
  unsigned blocks;
  unsigned threads;
};

static inline cuda_geom cuda_geom_1d(int64_t n, unsigned threads) {
  cuda_geom g;
  g.threads = threads;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 0x7fffffffLL) blocks = 0x7fffffffLL;
  g.blocks = (unsigned)blocks;
  return g;
}

/* A 2-D launch: y runs over `outer` items (a grid-stride loop beyond
 * 65535), x over `inner` items, inner < 2^31, so that kernels decode their
 * position inside one outer item with 32-bit arithmetic. */
struct cuda_geom2 {
  dim3 grid, block;
};

static inline cuda_geom2 cuda_geom_2d(int64_t outer, int64_t inner, unsigned threads) {
  cuda_geom2 g;
  int64_t bx = (inner + threads - 1) / threads;
  if (bx < 1) bx = 1;
  if (bx > 0x7fffffffLL) bx = 0x7fffffffLL;
  int64_t by = outer < 1 ? 1 : (outer > 65535 ? 65535 : outer);
  g.grid = dim3((unsigned)bx, (unsigned)by, 1);
  g.block = dim3(threads, 1, 1);
  return g;
}

#define CUDA_FOR_OUTER(o, n) for (int64_t o = blockIdx.y; o < (n); o += gridDim.y)
#define CUDA_FOR_INNER(i, n)                                                   \
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (uint32_t)(n);  \
       i += gridDim.x * blockDim.x)

/* Grid-stride loop over [0, n) with a 64-bit counter. */
#define CUDA_FOR(i, n)                                                         \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);    \
       i += (int64_t)gridDim.x * blockDim.x)

#endif /* APX_CUDA_GEOM_H */
