/* SPDX-License-Identifier: Apache-2.0 */
/* apexx op rules that the core and the backends both apply, static inline so
 * a backend module needs no symbol of libapexx (docs/architecture.md, The
 * op table). The core's op descriptors (libapexx/op/) use them for
 * validation; a device backend uses them to check index tensors the core
 * cannot read. */
#ifndef APEXX_OP_RULES_H
#define APEXX_OP_RULES_H

#include <apexx/apexx.h>
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

#ifdef __cplusplus
}
#endif
#endif /* APEXX_OP_RULES_H */
