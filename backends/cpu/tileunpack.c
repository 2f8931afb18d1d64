/* SPDX-License-Identifier: Apache-2.0 */
/* cpu tileunpack, docs/ops.md, tileunpack: out = base with the packed tiles written
 * back in priority-key order.
 *
 * key[b,k] = ((level - lmin) << order_bits) + k with levels, else k.
 * override: per pixel the covering tile with the highest key wins; blend:
 * tiles are blended in ascending key order, cur = fl(fl(fl(1-a)*cur) +
 * fl(a*tile)) with a rounded to the base dtype first (rounding model R).
 *
 * Both modes are one rule: visit the tiles of a batch row in ascending key
 * order and apply each (copy or blend) onto the output, so a later (higher
 * key) tile overwrites or blends over an earlier one. That is exact for any
 * overlap, duplicates included. For parallelism and cache reuse the output
 * is cut into (b, c, band of rows) items: each item copies its band of
 * base (unless out is base), then applies, in key order, the rows of the
 * tiles that cross the band. Items write disjoint memory, so they run in
 * parallel, and a band is sized to stay in cache between the copy and the
 * tile writes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apx_half.h"
#include "tile_simd.h"

/* A band of about this many bytes of one output plane is one work item. */
#define BAND_TARGET_BYTES (128u * 1024u)

typedef struct keyed_tile {
  int64_t key;
  int64_t k;
} keyed_tile;

static int compare_keyed_tile(const void *pa, const void *pb) {
  const keyed_tile *a = pa, *b = pb;
  return (a->key > b->key) - (a->key < b->key);
}

/* Bit length of a non-negative value, Python's int.bit_length. */
static int bit_length(int64_t v) {
  int bits = 0;
  while (v > 0) {
    bits++;
    v >>= 1;
  }
  return bits;
}

void cpu_unpack_priority(const apx_tensor *levels, int64_t *lmin, int *order_bits) {
  const int i64 = levels->dtype == APX_DTYPE_I64;
  const int64_t n = apx_backend_numel(levels), tiles = levels->shape[1];
  *lmin = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t level = cpu_index_at(levels->data, i64, i);
    if (i == 0 || level < *lmin)
      *lmin = level;
  }
  *order_bits = bit_length(tiles - 1);
  if (*order_bits < 1)
    *order_bits = 1;
}

typedef struct unpack_plan {
  int64_t batch, channels, height, width, tiles, t;
  size_t elem;
  int64_t band_rows, bands;
  int64_t *y0, *x0;    /* [B*K] pixel origins */
  int64_t *band_start; /* [B*bands + 1] offsets into band_tiles */
  int64_t *band_tiles; /* k values, per (b, band) in ascending key order */
} unpack_plan;

static void plan_free(unpack_plan *plan) {
  free(plan->y0);
  free(plan->x0);
  free(plan->band_start);
  free(plan->band_tiles);
}

/* Origins, key order and the per-band tile lists. */
static int plan_build(unpack_plan *plan, const apx_tileunpack_args *args) {
  const apx_tensor *base = args->base, *packed = args->packed;
  memset(plan, 0, sizeof *plan);
  plan->batch = base->shape[0];
  plan->channels = base->shape[1];
  plan->height = base->shape[2];
  plan->width = base->shape[3];
  plan->tiles = packed->shape[1];
  plan->t = packed->shape[3];
  plan->elem = apx_backend_dtype_size(base->dtype);
  const int64_t batch = plan->batch, tiles = plan->tiles, t = plan->t;
  const int64_t row_bytes = plan->width * (int64_t)plan->elem;
  int64_t band_rows = row_bytes > 0 ? (int64_t)BAND_TARGET_BYTES / row_bytes : plan->height;
  if (band_rows < t)
    band_rows = t;
  if (band_rows > plan->height)
    band_rows = plan->height;
  if (band_rows < 1)
    band_rows = 1;
  plan->band_rows = band_rows;
  plan->bands = (plan->height + band_rows - 1) / band_rows;

  const size_t placements = (size_t)(batch * tiles);
  plan->y0 = malloc((placements ? placements : 1) * sizeof(int64_t));
  plan->x0 = malloc((placements ? placements : 1) * sizeof(int64_t));
  plan->band_start = calloc((size_t)(batch * plan->bands + 1), sizeof(int64_t));
  /* a tile crosses at most 2 bands, since band_rows >= t */
  plan->band_tiles = malloc((placements ? 2 * placements : 1) * sizeof(int64_t));
  keyed_tile *order = malloc((tiles ? (size_t)tiles : 1) * sizeof(keyed_tile));
  if (!plan->y0 || !plan->x0 || !plan->band_start || !plan->band_tiles || !order) {
    free(order);
    return 0;
  }

  if (args->origins) {
    const int i64 = args->origins->dtype == APX_DTYPE_I64;
    for (size_t i = 0; i < placements; i++) {
      plan->y0[i] = cpu_index_at(args->origins->data, i64, 2 * (int64_t)i);
      plan->x0[i] = cpu_index_at(args->origins->data, i64, 2 * (int64_t)i + 1);
    }
  } else {
    const int i64 = args->idx->dtype == APX_DTYPE_I64;
    const int64_t grid_w = plan->width / t;
    for (size_t i = 0; i < placements; i++) {
      int64_t id = cpu_index_at(args->idx->data, i64, (int64_t)i);
      plan->y0[i] = (id / grid_w) * t;
      plan->x0[i] = (id % grid_w) * t;
    }
  }

  /* docs/ops.md, tileunpack (priority): keys from levels (then assume_priority_sorted
   * is ignored), else key = k. lmin over the whole tensor. The core has
   * checked that every key fits int32. */
  const int has_levels = args->levels != NULL;
  int64_t lmin = 0;
  int order_bits = 1;
  if (has_levels)
    cpu_unpack_priority(args->levels, &lmin, &order_bits);

  /* Each batch row's tiles in ascending key order (keys are distinct, k
   * being part of them), then bucketed by band keeping that order. */
  int64_t *sorted_k = malloc((placements ? placements : 1) * sizeof(int64_t));
  int64_t *fill = malloc((size_t)(batch > 0 ? batch * plan->bands : 1) * sizeof(int64_t));
  if (!sorted_k || !fill) {
    free(sorted_k);
    free(fill);
    free(order);
    return 0;
  }
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t k = 0; k < tiles; k++) {
      order[k].k = k;
      order[k].key = k;
      if (has_levels) {
        const int64_t level =
            cpu_index_at(args->levels->data, args->levels->dtype == APX_DTYPE_I64, b * tiles + k);
        order[k].key = (int64_t)(((uint64_t)(level - lmin) << order_bits) + (uint64_t)k);
      }
    }
    if (has_levels)
      qsort(order, (size_t)tiles, sizeof *order, compare_keyed_tile);
    for (int64_t r = 0; r < tiles; r++)
      sorted_k[b * tiles + r] = order[r].k;
  }
  /* count the tiles crossing each (b, band), prefix-sum, fill */
  int64_t *count = plan->band_start + 1;
  for (size_t i = 0; i < placements; i++) {
    const int64_t b = (int64_t)i / tiles, y0 = plan->y0[b * tiles + sorted_k[i]];
    for (int64_t band = y0 / band_rows; band <= (y0 + t - 1) / band_rows; band++)
      count[b * plan->bands + band]++;
  }
  for (int64_t i = 1; i <= batch * plan->bands; i++)
    plan->band_start[i] += plan->band_start[i - 1];
  memcpy(fill, plan->band_start, (size_t)(batch * plan->bands) * sizeof(int64_t));
  for (size_t i = 0; i < placements; i++) {
    const int64_t b = (int64_t)i / tiles, k = sorted_k[i], y0 = plan->y0[b * tiles + k];
    for (int64_t band = y0 / band_rows; band <= (y0 + t - 1) / band_rows; band++)
      plan->band_tiles[fill[b * plan->bands + band]++] = k;
  }
  free(sorted_k);
  free(fill);
  free(order);
  return 1;
}

/* Blend parameters (docs/ops.md, tileunpack), fp32 values of the base dtype. */
typedef struct blend_params {
  const cpu_tile_kernels *kernels;
  float a, one_minus_a;
} blend_params;

/* Apply, in key order, the rows of the tiles crossing band `band` of plane
 * (b, c): copy them (blend NULL) or blend them in. Always inlined with
 * constant row_bytes and blend, so the common override copies are a few
 * moves per row. */
static inline __attribute__((always_inline)) void
apply_band(const unpack_plan *plan, char *out_plane, const char *packed, int64_t b, int64_t c,
           int64_t band, size_t row_bytes, const blend_params *blend) {
  const int64_t t = plan->t, width = plan->width;
  const int64_t r0 = band * plan->band_rows;
  const int64_t r1 = r0 + plan->band_rows < plan->height ? r0 + plan->band_rows : plan->height;
  const int64_t first = plan->band_start[b * plan->bands + band];
  const int64_t count = plan->band_start[b * plan->bands + band + 1] - first;
  for (int64_t i = 0; i < count; i++) {
    const int64_t k = plan->band_tiles[first + i];
    const int64_t y0 = plan->y0[b * plan->tiles + k], x0 = plan->x0[b * plan->tiles + k];
    const int64_t ya = y0 > r0 ? y0 : r0, yb = y0 + t < r1 ? y0 + t : r1;
    const char *tile =
        packed + (size_t)((b * plan->tiles + k) * plan->channels + c) * t * (size_t)t * plan->elem;
    if (blend) {
      blend->kernels->blend(out_plane + (size_t)(ya * width + x0) * plan->elem, (size_t)width,
                            tile + (size_t)((ya - y0) * t) * plan->elem, (size_t)t,
                            (size_t)(yb - ya), (size_t)t, blend->a, blend->one_minus_a);
    } else {
      for (int64_t y = ya; y < yb; y++)
        memcpy(out_plane + (size_t)(y * width + x0) * plan->elem,
               tile + (size_t)(y - y0) * row_bytes, row_bytes);
    }
  }
}

/* Work item `item`, one (b, c, band): copy the band of base (unless out is
 * base), then apply its tiles. */
static void run_item(const unpack_plan *plan, const char *base, char *out, const char *packed,
                     const blend_params *blend, int64_t item) {
  const size_t plane_bytes = (size_t)(plan->height * plan->width) * plan->elem;
  const size_t band_bytes = (size_t)(plan->band_rows * plan->width) * plan->elem;
  const size_t row_bytes = (size_t)plan->t * plan->elem;
  const size_t tile_chunk = (size_t)plan->t * row_bytes; /* one channel of one tile */
  const int64_t band = item % plan->bands;
  const int64_t bc = item / plan->bands;
  const int64_t b = bc / plan->channels, c = bc % plan->channels;
  char *out_plane = out + (size_t)bc * plane_bytes;
  /* Ask for this band's packed tiles (scattered 128-256 byte chunks the
   * hardware cannot predict) first, so that their misses overlap the
   * sequential copy of the band below. */
  const int64_t first = plan->band_start[b * plan->bands + band];
  const int64_t count = plan->band_start[b * plan->bands + band + 1] - first;
  for (int64_t i = 0; i < count; i++) {
    const char *tile =
        packed + (size_t)((b * plan->tiles + plan->band_tiles[first + i]) * plan->channels + c) *
                     tile_chunk;
    for (size_t off = 0; off < tile_chunk; off += 64)
      __builtin_prefetch(tile + off, 0, 2);
  }
  if (out != base) {
    const size_t offset = (size_t)band * band_bytes;
    const size_t bytes = plane_bytes - offset < band_bytes ? plane_bytes - offset : band_bytes;
    memcpy(out_plane + offset, base + (size_t)bc * plane_bytes + offset, bytes);
  }
  if (blend) {
    apply_band(plan, out_plane, packed, b, c, band, row_bytes, blend);
    return;
  }
  switch (row_bytes) {
  case 16:
    apply_band(plan, out_plane, packed, b, c, band, 16, NULL);
    break;
  case 32:
    apply_band(plan, out_plane, packed, b, c, band, 32, NULL);
    break;
  case 64:
    apply_band(plan, out_plane, packed, b, c, band, 64, NULL);
    break;
  default:
    apply_band(plan, out_plane, packed, b, c, band, row_bytes, NULL);
    break;
  }
}

/* Every (b, c, band) item. */
static void run_items(const cpu_state *st, const unpack_plan *plan, const char *base, char *out,
                      const char *packed, const blend_params *blend) {
  const int64_t items = plan->batch * plan->channels * plan->bands;
  const int64_t work = plan->batch * plan->channels * plan->height * plan->width;
  CPU_FOR_ITEMS(st, work, 1, item, items, run_item(plan, base, out, packed, blend, item));
}

apx_status cpu_tileunpack(void *state, const apx_tileunpack_args *args, const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *base = args->base;
  char *out = args->out->data;
  const int64_t numel = apx_backend_numel(base);
  if (numel == 0)
    return APX_OK;

  unpack_plan plan;
  if (!plan_build(&plan, args)) {
    plan_free(&plan);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tileunpack: out of host memory for "
                              "the tile plan (B*K = %lld)",
                              (long long)(base->shape[0] * args->packed->shape[1]));
  }
  if (args->mode == APX_OVERLAP_BLEND) {
    /* docs/ops.md, tileunpack: a is a 0-d tensor of the base dtype, 1-a is rounded
     * to it too. */
    blend_params blend;
    blend.a = cpu_round_double_to_dtype(args->blend_alpha, base->dtype);
    blend.one_minus_a = 1.0f - blend.a;
    if (base->dtype == APX_DTYPE_F16)
      blend.one_minus_a = apx_round_f16(blend.one_minus_a);
    if (base->dtype == APX_DTYPE_BF16)
      blend.one_minus_a = apx_round_bf16(blend.one_minus_a);
    blend.kernels = cpu_tile_kernels_for(base->dtype, cpu_isa_level());
    run_items(st, &plan, base->data, out, args->packed->data, &blend);
  } else {
    run_items(st, &plan, base->data, out, args->packed->data, NULL);
  }
  plan_free(&plan);
  return APX_OK;
}
