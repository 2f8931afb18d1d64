/* SPDX-License-Identifier: Apache-2.0 */
/* tileunpack (docs/ops.md, tileunpack): out = base with the packed tiles
 * written back at idx's tiles or origins' pixel origins, in priority key
 * order (level, k): the highest key wins (override) or the tiles blend in
 * ascending key order (blend). */
#include "config.h"

#include <apexx/op_rules.h>
#include <stdint.h>

#include "op_table.h"

enum { BASE, PACKED, IDX, ORIGINS, LEVELS, MODE, BLEND_ALPHA, ASSUME_SORTED, OUT };

static const char *const mode_names[] = {"override", "blend"};

static const apx_op_arg args_of[] = {
    APX__TENSOR(apx_tileunpack_args, base, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1,
                "[B,C,H,W]"),
    APX__TENSOR(apx_tileunpack_args, packed, APX_ARG_INPUT, 0, 5, APX_DTYPES_ANY, BASE, -1,
                "[B,K,C,t,t]"),
    APX__TENSOR(apx_tileunpack_args, idx, APX_ARG_INDEX, 1, 2, APX_DTYPES_INDEX, -1, -1, "[B,K]"),
    APX__TENSOR(apx_tileunpack_args, origins, APX_ARG_INDEX, 1, 3, APX_DTYPES_INDEX, -1, -1,
                "[B,K,2]"),
    APX__TENSOR(apx_tileunpack_args, levels, APX_ARG_INDEX, 1, 0, APX_DTYPES_INDEX, -1, -1,
                "[B,K]"),
    APX__ENUM(apx_tileunpack_args, mode, mode_names),
    APX__OPTION(apx_tileunpack_args, blend_alpha, APX_ARG_DOUBLE),
    APX__OPTION(apx_tileunpack_args, assume_priority_sorted, APX_ARG_FLAG),
    APX__TENSOR(apx_tileunpack_args, out, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, BASE, BASE,
                "the shape of base"),
};

static const apx_tileunpack_args init = APX_TILEUNPACK_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  if (arg != OUT)
    return NULL;
  apx__shape_of(((const apx_tileunpack_args *)args)->base, ndim, shape);
  return "the shape of base";
}

static int index_range(const void *args, int arg, int64_t *lo, int64_t *hi, char *why,
                       size_t why_size) {
  const apx_tileunpack_args *a = args;
  (void)why;
  (void)why_size;
  if (arg != IDX)
    return 0; /* origins and levels: check_values */
  *lo = 0;
  *hi = apx_tile_id_max(a->base, a->packed->shape[3]);
  return 1;
}

/* docs/ops.md, tileunpack: the placement and priority rules, from mode on
 * (shared with tileunpack_backward). k_count < 0: K is idx's or origins'
 * shape[1] (the backward has no packed). */
apx_status apx__tileunpack_check_placement(apx__vstate *v, const apx_tensor *map, int64_t k_count,
                                           const char *k_rule, const apx_tensor *idx,
                                           const apx_tensor *origins, const apx_tensor *levels,
                                           int mode, double blend_alpha,
                                           int assume_priority_sorted) {
  if (mode != APX_OVERLAP_OVERRIDE && mode != APX_OVERLAP_BLEND)
    return apx__vfail(v,
                      "mode = [%d] is not APX_OVERLAP_OVERRIDE (0) or "
                      "APX_OVERLAP_BLEND (1)",
                      mode);
  if (!(blend_alpha >= 0.0 && blend_alpha <= 1.0)) { /* NaN fails too */
    char value[40];
    return apx__vfail(v, "blend_alpha = [%s] is outside [0, 1]",
                      apx__vdouble_text(value, sizeof value, blend_alpha));
  }
  int64_t batch = map->shape[0];
  if (idx && origins)
    return apx__vfail(v, "exactly one of idx and origins must be given, got [both]");
  if (!idx && !origins)
    return apx__vfail(v, "exactly one of idx and origins must be given, got [neither]");
  if (k_count < 0)
    k_count = (idx ? idx : origins)->shape[1];
  if (idx) {
    int64_t want[2] = {batch, k_count};
    APX__TRY(apx__vrequire_shape(v, "idx", idx, 2, want, k_rule ? k_rule : "[B,K]"));
  } else {
    int64_t want[3] = {batch, k_count, 2};
    APX__TRY(apx__vrequire_shape(v, "origins", origins, 3, want, k_rule ? k_rule : "[B,K,2]"));
  }
  if (!levels && !assume_priority_sorted)
    return apx__vfail(v, "levels must be provided when assume_priority_sorted = [%d]",
                      assume_priority_sorted);
  if (levels) {
    int64_t want[2] = {batch, k_count};
    APX__TRY(apx__vrequire_shape(v, "levels", levels, 2, want, "[B,K]"));
  }
  return APX_OK;
}

static apx_status check(apx__vstate *v, const void *args) {
  const apx_tileunpack_args *a = args;
  const apx_tensor *base = a->base, *packed = a->packed;
  APX__TRY(apx__vrequire_dim_match(v, "packed", packed, 0, "base", base, 0, "batch B"));
  APX__TRY(apx__vrequire_dim_match(v, "packed", packed, 2, "base", base, 1, "channels C"));
  if (packed->shape[3] != packed->shape[4])
    return apx__vfail(v, "packed tiles must be square, got packed.shape[3], [4] = [%lld, %lld]",
                      (long long)packed->shape[3], (long long)packed->shape[4]);
  APX__TRY(apx__vrequire_tile_grid(v, "tile size inferred from packed.shape[3]", packed->shape[3],
                                   "base", base));
  return apx__tileunpack_check_placement(
      v, base, packed->shape[1], a->idx ? "[B,K] with K = packed.shape[1]"
                                        : "[B,K,2] with K = packed.shape[1]",
      a->idx, a->origins, a->levels, (int)a->mode, a->blend_alpha, a->assume_priority_sorted);
}

static int bit_length(int64_t x) {
  /* Python's int.bit_length: of |x|. */
  uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
  int n = 0;
  while (u) {
    n++;
    u >>= 1;
  }
  return n;
}

/* docs/ops.md, tileunpack (priority): key = ((level - lmin) << order_bits) + k must fit
 * int32; order_bits = max(1, bit_length(K-1)); lmin over the whole tensor. */
static apx_status require_priority_keys_fit(const apx__vstate *v, const apx_tensor *levels) {
  int64_t n = apx__vnumel(levels), k_count = levels->shape[1];
  if (n == 0)
    return APX_OK;
  int order_bits = bit_length(k_count - 1);
  if (order_bits < 1)
    order_bits = 1;
  int64_t lmin = INT64_MAX;
  for (int64_t i = 0; i < n; i++) {
    int64_t level = apx__vindex_at(levels, i);
    if (level < lmin)
      lmin = level;
  }
  /* (level - lmin) fits uint64; a key fits int32 iff the shifted span plus
   * k does, and order_bits <= 63 so the shift bound is exact. */
  for (int64_t i = 0; i < n; i++) {
    int64_t level = apx__vindex_at(levels, i);
    uint64_t span = (uint64_t)level - (uint64_t)lmin;
    int64_t k = i % k_count;
    int fits = span <= ((uint64_t)INT32_MAX >> order_bits) &&
               (span << order_bits) + (uint64_t)k <= (uint64_t)INT32_MAX;
    if (!fits) {
      char pos[160];
      return apx__vfail(v,
                        "levels%s = [%lld] makes priority key ((level - lmin) << %d) "
                        "+ k overflow int32 (lmin = [%lld], k = [%lld]); reduce the "
                        "level range or K",
                        apx__vposition_text(pos, sizeof pos, levels, i), (long long)level,
                        order_bits, (long long)lmin, (long long)k);
    }
  }
  return APX_OK;
}

/* docs/ops.md, tileunpack (placement): y0 >= 0, x0 >= 0, y0 + t <= H, x0 + t <= W. */
static apx_status require_origins_in_bounds(const apx__vstate *v, const apx_tensor *origins,
                                            int64_t tile, int64_t h, int64_t w) {
  int64_t tiles = apx__vnumel(origins) / 2; /* [B, N, 2] */
  for (int64_t i = 0; i < tiles; i++) {
    int64_t y0 = apx__vindex_at(origins, 2 * i), x0 = apx__vindex_at(origins, 2 * i + 1);
    if (y0 < 0 || x0 < 0 || y0 > h - tile || x0 > w - tile) {
      char pos[160];
      apx_tensor rows = *origins;
      rows.ndim = 2; /* position of the (y0, x0) pair */
      return apx__vfail(v,
                        "origins%s = [%lld, %lld] is out of bounds: a tile [%lld] "
                        "in a [%lld x %lld] map needs 0 <= y0 <= %lld and "
                        "0 <= x0 <= %lld",
                        apx__vposition_text(pos, sizeof pos, &rows, i), (long long)y0,
                        (long long)x0, (long long)tile, (long long)h, (long long)w,
                        (long long)(h - tile), (long long)(w - tile));
    }
  }
  return APX_OK;
}

/* docs/ops.md, tileunpack: on host tensors, every origin in bounds and every
 * priority key fitting int32 (shared with tileunpack_backward). */
apx_status apx__tileunpack_check_values(apx__vstate *v, const apx_tensor *map, int64_t tile,
                                        const apx_tensor *origins, const apx_tensor *levels) {
  if (origins)
    APX__TRY(require_origins_in_bounds(v, origins, tile, map->shape[2], map->shape[3]));
  if (levels)
    APX__TRY(require_priority_keys_fit(v, levels));
  return APX_OK;
}

static apx_status check_values(apx__vstate *v, const void *args) {
  const apx_tileunpack_args *a = args;
  return apx__tileunpack_check_values(v, a->base, a->packed->shape[3], a->origins, a->levels);
}

const apx__op apx__op_tileunpack = {
    .desc = {APX__OP_DESC(TILEUNPACK, tileunpack, apx_tileunpack_args, init, args_of,
                          APX_OP_CAP_INDEX_TENSORS | APX_OP_CAP_DEVICE_CHECKS,
                          "write packed tiles back into a copy of base at idx's tiles or origins"),
             .output_shape = output_shape, .index_range = index_range},
    .check = check,
    .check_values = check_values,
};
