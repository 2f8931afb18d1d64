/* SPDX-License-Identifier: Apache-2.0 */
/* apexx op rules that the core and the backends both apply, static inline so
 * a backend module needs no symbol of libapexx (docs/architecture.md, The
 * op table). The core's op descriptors (libapexx/op/) use them for
 * validation; a device backend uses them to check index tensors the core
 * cannot read. */
#ifndef APEXX_OP_RULES_H
#define APEXX_OP_RULES_H

#include <apexx/apexx.h>
#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* docs/ops.md, tilepack: the largest tile id of map [B,C,H,W] cut into
 * tile x tile tiles, (H/tile)*(W/tile) - 1; -1 for an empty grid, INT64_MAX
 * when the count overflows. The ids of tilepack, tileunpack and
 * fused_pack_op_unpack lie in [0, apx_tile_id_max(map, tile)]. tile > 0. */
static inline int64_t apx_tile_id_max(const apx_tensor *map, int64_t tile) {
  int64_t tiles;
  if (__builtin_mul_overflow(map->shape[2] / tile, map->shape[3] / tile, &tiles))
    return INT64_MAX;
  return tiles - 1;
}

/* PyTorch's sigmoid and softplus (threshold 20) in fp32: fusiongate_alpha's
 * fusion weights (docs/ops.md, fusiongate_alpha) and the FF path's derived
 * parameters (apx_ff_decay, apx_ff_gain). */
static inline float apx_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float apx_softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
/* The derivative of apx_softplusf: 1 above the threshold, else sigmoid(x)
 * (PyTorch's softplus_backward). */
static inline float apx_softplus_gradf(float x) { return x > 20.0f ? 1.0f : apx_sigmoidf(x); }

/* docs/ops.md, tile_order: the side of the Hilbert curve's square for a
 * grid of extent cells, the smallest power of two >= extent (1 for extent
 * <= 1; 2^63 at most). */
static inline uint64_t apx_hilbert_side(uint64_t extent) {
  uint64_t n = 1;
  while (n < extent && n <= UINT64_MAX / 2) n <<= 1;
  return n;
}

/* docs/ops.md, tile_order: the Hilbert index of cell (x = column, y = row)
 * on an n x n grid, n = apx_hilbert_side(...), as a 128-bit (hi, lo) pair:
 * hilbert_d in the masked form. Level s = 2^j contributes ((3*rx) ^ ry) *
 * s*s, i.e. two bits at position 2j, so d is assembled by OR-ing bit pairs;
 * n may reach 2^63, hence 128 bits. The order of apx_tile_order's hilbert
 * mode and of the FF routing's id lists. */
static inline void apx_hilbert_key(uint64_t x, uint64_t y, uint64_t n, uint64_t *hi,
                                   uint64_t *lo) {
  *hi = *lo = 0;
  if (n == 0) return;
  int level = __builtin_ctzll(n); /* n = 2^level, level <= 63 */
  for (int j = level - 1; j >= 0; j--) {
    uint64_t s = (uint64_t)1 << j;
    uint64_t rx = (x & s) != 0, ry = (y & s) != 0;
    uint64_t quadrant = (3u * rx) ^ ry;
    int bit = 2 * j;
    if (bit >= 64)
      *hi |= quadrant << (bit - 64);
    else
      *lo |= quadrant << bit;
    if (ry == 0) {
      if (rx == 1) {
        x = (s - 1) - (x & (s - 1));
        y = (s - 1) - (y & (s - 1));
      }
      uint64_t swap = x;
      x = y;
      y = swap;
    }
  }
}

/* docs/ops.md, index_select: t viewed as [outer, extent, inner] around dim
 * (negative counts from the end), for index_select and its backward: outer
 * the product of the extents before dim, extent t.shape[dim], inner the
 * product after it. dim must be in [-ndim, ndim) (the core's check). */
static inline void apx_index_select_view(const apx_tensor *t, int dim, int64_t *outer,
                                         int64_t *extent, int64_t *inner) {
  const int d = dim < 0 ? dim + t->ndim : dim;
  *outer = 1;
  *inner = 1;
  for (int k = 0; k < d; k++)
    *outer *= t->shape[k];
  for (int k = d + 1; k < t->ndim; k++)
    *inner *= t->shape[k];
  *extent = t->shape[d];
}

/* docs/ops.md, tile_order: the sort key of tile `id` on a grid_h x grid_w
 * grid in `mode`, as a 128-bit (hi, lo) pair (Hilbert on an n x n grid, n
 * = apx_hilbert_side(max(grid_h, grid_w))); equal keys keep their input
 * order. apx_tile_order's keys and the FF frame's (docs/ff_infer.md). An
 * unknown mode gives key 0. */
static inline void apx_order_key(apx_order_mode mode, uint64_t id, uint64_t grid_h, uint64_t grid_w,
                                 uint64_t hilbert_n, uint64_t *hi, uint64_t *lo) {
  uint64_t ty = id / grid_w, tx = id % grid_w;
  *hi = *lo = 0;
  switch (mode) {
  case APX_ORDER_HILBERT:
    apx_hilbert_key(tx, ty, hilbert_n, hi, lo);
    break;
  case APX_ORDER_L2R: /* (ty, tx) */
    *lo = ty * grid_w + tx;
    break;
  case APX_ORDER_R2L: /* (ty, gw-1-tx) */
    *lo = ty * grid_w + (grid_w - 1 - tx);
    break;
  case APX_ORDER_U2D: /* (tx, ty) */
    *lo = tx * grid_h + ty;
    break;
  case APX_ORDER_D2U: /* (tx, gh-1-ty) */
    *lo = tx * grid_h + (grid_h - 1 - ty);
    break;
  case APX_ORDER_MULTI_DIRECTION:
    /* The spec's key 2*(ty*gw + tx*gh) + gw + gh - 2 is an increasing
     * function of ty*gw + tx*gh, which stays below 2*gh*gw <= 2^64. */
    *lo = ty * grid_w + tx * grid_h;
    break;
  }
}

#ifdef __cplusplus
}
#endif
#endif /* APEXX_OP_RULES_H */
