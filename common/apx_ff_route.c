/* SPDX-License-Identifier: Apache-2.0 */
/* The FF path's host routing (common/apx_ff_route.h; docs/ff_infer.md,
 * Routing): per batch row, a greedy L0 selection by utility under budget
 * b1, a split stage choosing L0 parents under budget b2 whose quadtree
 * children are the L1 tiles, and both id lists in Hilbert order and in the
 * call's order_mode (docs/ff_infer.md, Options). float64
 * throughout, ties broken by the smaller id; O(G0 log G0) per row. Not part
 * of libapexx: it uses only the C library and the inline rules of
 * include/apexx/ff_backend.h and op_rules.h. */
#include "config.h"

#include <apexx/ff_backend.h>
#include <apexx/op_rules.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "apx_ff_route.h"
#include "apx_half.h"

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

typedef struct ordered_tile {
  uint64_t hi, lo;
  int64_t pos, id;
} ordered_tile;

/* (key, input position): a stable sort (docs/ops.md, tile_order). */
static int compare_ordered(const void *pa, const void *pb) {
  const ordered_tile *a = pa, *b = pb;
  if (a->hi != b->hi)
    return a->hi < b->hi ? -1 : 1;
  if (a->lo != b->lo)
    return a->lo < b->lo ? -1 : 1;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* ids[0..count) re-ordered as apx_tile_order does in `mode` on a grid_h x
 * grid_w grid; scratch holds count entries. */
static void order_sort(int64_t *ids, int64_t count, int64_t grid_h, int64_t grid_w,
                       apx_order_mode mode, ordered_tile *scratch) {
  uint64_t n = apx_hilbert_side((uint64_t)(grid_h > grid_w ? grid_h : grid_w));
  for (int64_t i = 0; i < count; i++) {
    apx_order_key(mode, (uint64_t)ids[i], (uint64_t)grid_h, (uint64_t)grid_w, n, &scratch[i].hi,
                  &scratch[i].lo);
    scratch[i].pos = i;
    scratch[i].id = ids[i];
  }
  qsort(scratch, (size_t)count, sizeof *scratch, compare_ordered);
  for (int64_t i = 0; i < count; i++)
    ids[i] = scratch[i].id;
}

/* row[0..kmax) = ids[0..count) in `mode`'s order, then -1s. */
static void write_ordered(int64_t *row, int64_t kmax, const int64_t *ids, int64_t count,
                          int64_t grid_h, int64_t grid_w, apx_order_mode mode,
                          ordered_tile *scratch) {
  for (int64_t k = 0; k < kmax; k++)
    row[k] = k < count ? ids[k] : -1;
  order_sort(row, count, grid_h, grid_w, mode, scratch);
}

static int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The scratch of one call: every L0 candidate; the selected L0 ids in walk
 * order; the L1 children; the sorts of up to max(kmax_l0, kmax_l1) ids. */
typedef struct route_scratch {
  scored_tile *candidates;
  int64_t *taken, *children;
  ordered_tile *keys;
} route_scratch;

static void scratch_free(route_scratch *s) {
  free(s->candidates);
  free(s->taken);
  free(s->children);
  free(s->keys);
}

static int scratch_alloc(route_scratch *s, int64_t tiles_l0, int64_t kmax_l0, int64_t kmax_l1) {
  s->candidates = malloc((size_t)max_i64(tiles_l0, 1) * sizeof *s->candidates);
  s->taken = malloc((size_t)max_i64(kmax_l0, 1) * sizeof *s->taken);
  s->children = malloc((size_t)max_i64(kmax_l1, 1) * sizeof *s->children);
  s->keys = malloc((size_t)max_i64(max_i64(kmax_l0, kmax_l1), 1) * sizeof *s->keys);
  if (s->candidates && s->taken && s->children && s->keys)
    return 1;
  scratch_free(s);
  return 0;
}

/* Row b's arrays of *route from its walks. */
static void write_row(const apx_ff_infer_args *args, apx_ff_route *route, int64_t b,
                      int64_t count_l0, int64_t count_l1, double spent_b1, double spent_b2,
                      const route_scratch *s, int64_t grid_h0, int64_t grid_w0) {
  const int64_t kmax_l0 = args->kmax_l0, kmax_l1 = args->kmax_l1;
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
      route->l0_greedy[b * kmax_l0 + k] = k < count_l0 ? s->taken[k] : -1;
  const apx_order_mode order = args->order_mode;
  const int64_t grid_h1 = 2 * grid_h0, grid_w1 = 2 * grid_w0;
  if (route->l0_hilbert)
    write_ordered(route->l0_hilbert + b * kmax_l0, kmax_l0, s->taken, count_l0, grid_h0, grid_w0,
                  APX_ORDER_HILBERT, s->keys);
  if (route->l0_ordered)
    write_ordered(route->l0_ordered + b * kmax_l0, kmax_l0, s->taken, count_l0, grid_h0, grid_w0,
                  order, s->keys);
  /* s->children are in Hilbert order already */
  if (route->l1_hilbert)
    for (int64_t k = 0; k < kmax_l1; k++)
      route->l1_hilbert[b * kmax_l1 + k] = k < count_l1 ? s->children[k] : -1;
  if (route->l1_ordered)
    write_ordered(route->l1_ordered + b * kmax_l1, kmax_l1, s->children, count_l1, grid_h1, grid_w1,
                  order, s->keys);
}

apx_status apx_ff_route_host(const apx_ff_infer_args *args, apx_ff_route *route,
                             apx_status (*set_error)(apx_status status, const char *fmt, ...)) {
  if (!args || !route || !args->dense || !args->utilities || args->dense->ndim != 4)
    return set_error(APX_ERR_INVALID_ARG, "ff_infer: routing needs validated arguments");
  const apx_tensor *utilities = args->utilities, *split = args->split_utilities;
  if (utilities->device != APX_DEVICE_HOST || (split && split->device != APX_DEVICE_HOST))
    return set_error(APX_ERR_INVALID_ARG,
                     "ff_infer: host routing needs host utilities, got them on [cuda:%d]",
                     utilities->device_index);

  const int64_t batch = args->dense->shape[0];
  const int64_t grid_h0 = args->dense->shape[2] / args->tile_l0;
  const int64_t grid_w0 = args->dense->shape[3] / args->tile_l0;
  const int64_t tiles_l0 = grid_h0 * grid_w0, grid_w1 = 2 * grid_w0;
  const int64_t kmax_l0 = args->kmax_l0, kmax_l1 = args->kmax_l1;
  const double delta = apx_ff_tile_cost(args);
  const int nesting = apx_ff_nesting(args);
  route_scratch s;
  if (!scratch_alloc(&s, tiles_l0, kmax_l0, kmax_l1))
    return set_error(APX_ERR_NO_MEMORY, "ff_infer: no memory to route [%lld] tiles",
                     (long long)tiles_l0);

  for (int64_t b = 0; b < batch; b++) {
    /* L0 greedy: the whole candidate list is walked; a tile that does not
     * fit the remaining budget is skipped, not the end of the walk. */
    for (int64_t id = 0; id < tiles_l0; id++) {
      s.candidates[id].score = apx_float_at(utilities, b * tiles_l0 + id) / delta;
      s.candidates[id].id = id;
    }
    qsort(s.candidates, (size_t)tiles_l0, sizeof *s.candidates, compare_scored);
    int64_t count_l0 = 0;
    double spent_b1 = 0.0;
    for (int64_t i = 0; i < tiles_l0 && count_l0 < kmax_l0; i++) {
      if (spent_b1 + delta <= args->budget_b1 + APX_FF_BUDGET_SLACK) {
        s.taken[count_l0++] = s.candidates[i].id;
        spent_b1 += delta;
      }
    }

    /* split stage: parents among the selected tiles by split utility, each
     * costing 1 of b2 and bringing its four quadtree children */
    int64_t count_l1 = 0;
    double spent_b2 = 0.0;
    if (nesting && count_l0 > 0) {
      for (int64_t i = 0; i < count_l0; i++) {
        s.candidates[i].score = apx_float_at(split, b * tiles_l0 + s.taken[i]) / 1.0;
        s.candidates[i].id = s.taken[i];
      }
      qsort(s.candidates, (size_t)count_l0, sizeof *s.candidates, compare_scored);
      for (int64_t i = 0; i < count_l0; i++) {
        if (spent_b2 + 1.0 <= args->budget_b2 + APX_FF_BUDGET_SLACK && count_l1 + 4 <= kmax_l1) {
          spent_b2 += 1.0;
          int64_t ty = s.candidates[i].id / grid_w0, tx = s.candidates[i].id % grid_w0;
          int64_t top = (2 * ty) * grid_w1 + 2 * tx, bottom = (2 * ty + 1) * grid_w1 + 2 * tx;
          s.children[count_l1++] = top;
          s.children[count_l1++] = top + 1;
          s.children[count_l1++] = bottom;
          s.children[count_l1++] = bottom + 1;
        }
      }
      order_sort(s.children, count_l1, 2 * grid_h0, grid_w1, APX_ORDER_HILBERT, s.keys);
    }
    write_row(args, route, b, count_l0, count_l1, spent_b1, spent_b2, &s, grid_h0, grid_w0);
  }
  scratch_free(&s);
  return APX_OK;
}
