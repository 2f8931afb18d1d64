/* SPDX-License-Identifier: Apache-2.0 */
/* Host routing of the FF path (docs/ff_infer.md,
 * Routing): per batch row, a greedy L0 selection by utility under budget
 * b1, a split stage choosing L0 parents under budget b2 whose quadtree
 * children are the L1 tiles, and both id lists in Hilbert order. float64
 * throughout, ties broken by the smaller id; O(G0 log G0) per row. */
#include "config.h"

#include <apexx/op_rules.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "apx_half.h"
#include "ff_internal.h"
#include "internal.h"

/* docs/ff_infer.md: the budgets' slack and the smallest tile cost. */
#define BUDGET_SLACK 1e-9
#define MIN_DELTA 1e-9

typedef struct scored_tile {
  double score;
  int64_t id;
} scored_tile;

/* (score desc, id asc). Validated utilities hold no NaN, but a score can
 * still be NaN (inf / inf with an infinite delta); it sorts first, as the
 * largest, so the order stays total. */
static int compare_scored(const void *pa, const void *pb) {
  const scored_tile *a = pa, *b = pb;
  int a_nan = isnan(a->score), b_nan = isnan(b->score);
  if (a_nan != b_nan)
    return a_nan ? -1 : 1;
  if (!a_nan && a->score != b->score)
    return a->score > b->score ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

typedef struct hilbert_tile {
  uint64_t hi, lo;
  int64_t id;
} hilbert_tile;

static int compare_hilbert(const void *pa, const void *pb) {
  const hilbert_tile *a = pa, *b = pb;
  if (a->hi != b->hi)
    return a->hi < b->hi ? -1 : 1;
  if (a->lo != b->lo)
    return a->lo < b->lo ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

/* ids[0..count) re-ordered as apx_tile_order with APX_ORDER_HILBERT on a
 * grid_h x grid_w grid; scratch holds count entries. */
static void hilbert_sort(int64_t *ids, int64_t count, int64_t grid_h, int64_t grid_w,
                         hilbert_tile *scratch) {
  uint64_t n = apx_hilbert_side((uint64_t)(grid_h > grid_w ? grid_h : grid_w));
  for (int64_t i = 0; i < count; i++) {
    uint64_t ty = (uint64_t)ids[i] / (uint64_t)grid_w, tx = (uint64_t)ids[i] % (uint64_t)grid_w;
    apx_hilbert_key(tx, ty, n, &scratch[i].hi, &scratch[i].lo);
    scratch[i].id = ids[i];
  }
  qsort(scratch, (size_t)count, sizeof *scratch, compare_hilbert);
  for (int64_t i = 0; i < count; i++)
    ids[i] = scratch[i].id;
}

static int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

apx_status apx__ff_route(const apx_ff_infer_args *args, apx_ff_route *route) {
  if (!args || !route || !args->dense || !args->utilities || args->dense->ndim != 4)
    return apx__error(APX_ERR_INVALID_ARG, "ff_infer: routing needs validated arguments");
  const apx_tensor *utilities = args->utilities, *split = args->split_utilities;
  if (utilities->device != APX_DEVICE_HOST || (split && split->device != APX_DEVICE_HOST))
    return apx__error(APX_ERR_INVALID_ARG,
                      "ff_infer: host routing needs host utilities, got them on [%s:%d]",
                      apx_device_name(utilities->device), utilities->device_index);

  const int64_t batch = args->dense->shape[0];
  const int64_t grid_h0 = args->dense->shape[2] / args->tile_l0;
  const int64_t grid_w0 = args->dense->shape[3] / args->tile_l0;
  const int64_t tiles_l0 = grid_h0 * grid_w0;
  const int64_t grid_w1 = 2 * grid_w0;
  const int64_t kmax_l0 = args->kmax_l0, kmax_l1 = args->kmax_l1;
  const double delta = fmax(args->cost_heavy - args->cost_cheap, MIN_DELTA);
  const int nesting = args->enable_nesting && split && kmax_l1 > 0 && args->budget_b2 > 0;

  /* scratch: every L0 candidate; the selected L0 ids in walk order; the
   * Hilbert sort of up to max(kmax_l0, kmax_l1) ids */
  scored_tile *candidates = malloc((size_t)max_i64(tiles_l0, 1) * sizeof *candidates);
  int64_t *taken = malloc((size_t)max_i64(kmax_l0, 1) * sizeof *taken);
  int64_t *children = malloc((size_t)max_i64(kmax_l1, 1) * sizeof *children);
  hilbert_tile *keys = malloc((size_t)max_i64(max_i64(kmax_l0, kmax_l1), 1) * sizeof *keys);
  if (!candidates || !taken || !children || !keys) {
    free(candidates);
    free(taken);
    free(children);
    free(keys);
    return apx__error(APX_ERR_NO_MEMORY, "ff_infer: no memory to route [%lld] tiles",
                      (long long)tiles_l0);
  }

  for (int64_t b = 0; b < batch; b++) {
    /* L0 greedy: the whole candidate list is walked; a tile that does not
     * fit the remaining budget is skipped, not the end of the walk. */
    for (int64_t id = 0; id < tiles_l0; id++) {
      candidates[id].score = apx_float_at(utilities, b * tiles_l0 + id) / delta;
      candidates[id].id = id;
    }
    qsort(candidates, (size_t)tiles_l0, sizeof *candidates, compare_scored);
    int64_t count_l0 = 0;
    double spent_b1 = 0.0;
    for (int64_t i = 0; i < tiles_l0 && count_l0 < kmax_l0; i++) {
      if (spent_b1 + delta <= args->budget_b1 + BUDGET_SLACK) {
        taken[count_l0++] = candidates[i].id;
        spent_b1 += delta;
      }
    }

    /* split stage: parents among the selected tiles by split utility, each
     * costing 1 of b2 and bringing its four quadtree children */
    int64_t count_l1 = 0;
    double spent_b2 = 0.0;
    if (nesting && count_l0 > 0) {
      for (int64_t i = 0; i < count_l0; i++) {
        candidates[i].score = apx_float_at(split, b * tiles_l0 + taken[i]) / 1.0;
        candidates[i].id = taken[i];
      }
      qsort(candidates, (size_t)count_l0, sizeof *candidates, compare_scored);
      for (int64_t i = 0; i < count_l0; i++) {
        if (spent_b2 + 1.0 <= args->budget_b2 + BUDGET_SLACK && count_l1 + 4 <= kmax_l1) {
          spent_b2 += 1.0;
          int64_t ty = candidates[i].id / grid_w0, tx = candidates[i].id % grid_w0;
          int64_t top = (2 * ty) * grid_w1 + 2 * tx, bottom = (2 * ty + 1) * grid_w1 + 2 * tx;
          children[count_l1++] = top;
          children[count_l1++] = top + 1;
          children[count_l1++] = bottom;
          children[count_l1++] = bottom + 1;
        }
      }
      hilbert_sort(children, count_l1, 2 * grid_h0, grid_w1, keys);
    }

    if (route->l0_count)
      route->l0_count[b] = count_l0;
    if (route->l1_count)
      route->l1_count[b] = count_l1;
    if (route->b1_spent)
      route->b1_spent[b] = spent_b1;
    if (route->b2_spent)
      route->b2_spent[b] = spent_b2;
    if (route->l0_greedy)
      for (int64_t k = 0; k < kmax_l0; k++)
        route->l0_greedy[b * kmax_l0 + k] = k < count_l0 ? taken[k] : -1;
    if (route->l0_hilbert) {
      hilbert_sort(taken, count_l0, grid_h0, grid_w0, keys);
      for (int64_t k = 0; k < kmax_l0; k++)
        route->l0_hilbert[b * kmax_l0 + k] = k < count_l0 ? taken[k] : -1;
    }
    if (route->l1_hilbert)
      for (int64_t k = 0; k < kmax_l1; k++)
        route->l1_hilbert[b * kmax_l1 + k] = k < count_l1 ? children[k] : -1;
  }

  free(candidates);
  free(taken);
  free(children);
  free(keys);
  return APX_OK;
}
