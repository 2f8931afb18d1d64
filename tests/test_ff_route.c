/* SPDX-License-Identifier: Apache-2.0 */
/* The host routing of apx_ff_infer (apx_ff_route_host, common/apx_ff_route.c;
 * docs/ff_infer.md, Routing) against a plain reference written here:
 * selection sorts over (score desc, id asc), the walks as the page words
 * them, quadtree children, and the Python hilbert_d for both id lists. The
 * default profile's golden numbers, ties, negative and infinite
 * utilities, every limit (b1, b2, kmax_l0, kmax_l1), the cases without L1
 * tiles, rows independent, f16 and bf16 utilities, and the orders checked
 * with apx_tile_order too. The router is the static library the backends
 * that route on the host link (tests/ff_route.mk links it the same way). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apx_ff_route.h"
#include "testutil.h"

/* The router with the tests' set_error (a backend passes its services'). */
static apx_status route_host(const apx_ff_infer_args *args, apx_ff_route *r) {
  tu_error_text[0] = '\0';
  return apx_ff_route_host(args, r, tu_set_error);
}

/* ---- the reference ---- */

/* hilbert_d as the Python source writes it (unmasked reflection). */
static uint64_t reference_hilbert(int64_t x, int64_t y, int64_t n) {
  uint64_t d = 0;
  for (int64_t s = n / 2; s > 0; s /= 2) {
    int64_t rx = (x & s) != 0, ry = (y & s) != 0;
    d += (uint64_t)(s * s) * (uint64_t)((3 * rx) ^ ry);
    if (ry == 0) {
      if (rx == 1) {
        x = s - 1 - x;
        y = s - 1 - y;
      }
      int64_t t = x;
      x = y;
      y = t;
    }
  }
  return d;
}

/* ids re-ordered by hilbert_d on a gh x gw grid (selection sort). */
static void reference_hilbert_order(int64_t *ids, int64_t count, int64_t gh, int64_t gw) {
  int64_t n = 1;
  while (n < (gh > gw ? gh : gw))
    n *= 2;
  for (int64_t i = 0; i < count; i++) {
    int64_t best = i;
    for (int64_t j = i + 1; j < count; j++)
      if (reference_hilbert(ids[j] % gw, ids[j] / gw, n) <
          reference_hilbert(ids[best] % gw, ids[best] / gw, n))
        best = j;
    int64_t t = ids[i];
    ids[i] = ids[best];
    ids[best] = t;
  }
}

/* (score desc, id asc) by selection sort; scores and ids permuted alike. */
static void reference_rank(double *score, int64_t *ids, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    int64_t best = i;
    for (int64_t j = i + 1; j < count; j++)
      if (score[j] > score[best] || (score[j] == score[best] && ids[j] < ids[best]))
        best = j;
    double s = score[i];
    score[i] = score[best];
    score[best] = s;
    int64_t t = ids[i];
    ids[i] = ids[best];
    ids[best] = t;
  }
}

/* The result of one row. */
typedef struct row_result {
  int64_t l0_count, l1_count;
  double b1_spent, b2_spent;
  int64_t l0_greedy[4096], l0_hilbert[4096], l1_hilbert[4 * 4096];
} row_result;

/* docs/ff_infer.md "Routing" for batch row b. */
static void reference_route(const apx_ff_infer_args *a, int64_t b, row_result *r) {
  int64_t gh0 = a->dense->shape[2] / a->tile_l0, gw0 = a->dense->shape[3] / a->tile_l0;
  int64_t g0 = gh0 * gw0;
  ck_assert_int_le(g0, 4096);
  double delta = a->cost_heavy - a->cost_cheap;
  if (delta < 1e-9)
    delta = 1e-9;
  static double score[4096];
  static int64_t ids[4096];
  for (int64_t i = 0; i < g0; i++) {
    score[i] = tu_get(a->utilities, b * g0 + i) / delta;
    ids[i] = i;
  }
  reference_rank(score, ids, g0);
  memset(r, 0, sizeof *r);
  for (int64_t i = 0; i < g0; i++) {
    if (r->l0_count >= a->kmax_l0)
      break;
    if (r->b1_spent + delta <= a->budget_b1 + 1e-9) {
      r->l0_greedy[r->l0_count++] = ids[i];
      r->b1_spent += delta;
    }
  }
  memcpy(r->l0_hilbert, r->l0_greedy, (size_t)r->l0_count * sizeof(int64_t));
  reference_hilbert_order(r->l0_hilbert, r->l0_count, gh0, gw0);

  if (a->enable_nesting && a->split_utilities && a->kmax_l1 > 0 && a->budget_b2 > 0 &&
      r->l0_count > 0) {
    for (int64_t i = 0; i < r->l0_count; i++) {
      ids[i] = r->l0_greedy[i];
      score[i] = tu_get(a->split_utilities, b * g0 + ids[i]) / 1.0;
    }
    reference_rank(score, ids, r->l0_count);
    int64_t gw1 = 2 * gw0;
    for (int64_t i = 0; i < r->l0_count; i++) {
      if (r->b2_spent + 1 <= a->budget_b2 + 1e-9 && r->l1_count + 4 <= a->kmax_l1) {
        r->b2_spent += 1;
        int64_t ty = ids[i] / gw0, tx = ids[i] % gw0;
        r->l1_hilbert[r->l1_count++] = (2 * ty) * gw1 + 2 * tx;
        r->l1_hilbert[r->l1_count++] = (2 * ty) * gw1 + 2 * tx + 1;
        r->l1_hilbert[r->l1_count++] = (2 * ty + 1) * gw1 + 2 * tx;
        r->l1_hilbert[r->l1_count++] = (2 * ty + 1) * gw1 + 2 * tx + 1;
      }
    }
    reference_hilbert_order(r->l1_hilbert, r->l1_count, 2 * gh0, gw1);
  }
}

/* ---- a routed call ---- */

typedef struct routed {
  apx_tensor dense, utilities, split;
  apx_ff_infer_args args;
  int64_t *l0_count, *l1_count, *l0_greedy, *l0_hilbert, *l1_hilbert, *l0_ordered, *l1_ordered;
  double *b1_spent, *b2_spent;
  apx_ff_route route;
} routed;

static tu_rng rng;
static void setup(void) { rng.s = tu_seed(); }

/* A call of batch B on an H x W map with the default options; utilities
 * and split utilities of dtype `dtype`, filled N(0,1). dense is described
 * only (routing reads its shape, never its data). */
static void make_call(routed *c, int64_t batch, int64_t h, int64_t w, int64_t tile,
                      apx_dtype dtype) {
  memset(c, 0, sizeof *c);
  c->args = (apx_ff_infer_args)APX_FF_INFER_ARGS_INIT;
  c->args.tile_l0 = tile;
  c->args.tile_l1 = tile / 2;
  int64_t g0 = (h / tile) * (w / tile);
  c->dense = apx_tensor_host(NULL, APX_DTYPE_F32, 4, (int64_t[]){batch, 4, h, w});
  c->utilities = tu_host2(dtype, batch, g0);
  c->split = tu_host2(dtype, batch, g0);
  tu_fill_normal(&rng, &c->utilities);
  tu_fill_normal(&rng, &c->split);
  c->args.dense = &c->dense;
  c->args.utilities = &c->utilities;
  c->args.split_utilities = &c->split;
  if (c->args.kmax_l0 > g0)
    c->args.kmax_l0 = g0;
  if (c->args.kmax_l1 > 4 * g0)
    c->args.kmax_l1 = 4 * g0;
}

static void free_call(routed *c) {
  tu_free(&c->utilities);
  tu_free(&c->split);
  free(c->l0_count);
  free(c->l1_count);
  free(c->l0_greedy);
  free(c->l0_hilbert);
  free(c->l1_hilbert);
  free(c->l0_ordered);
  free(c->l1_ordered);
  free(c->b1_spent);
  free(c->b2_spent);
}

/* Route c into fresh arrays poisoned with 0x5A. */
static void route(routed *c) {
  int64_t batch = c->dense.shape[0];
  size_t k0 = (size_t)(batch * c->args.kmax_l0), k1 = (size_t)(batch * c->args.kmax_l1);
  free(c->l0_count);
  free(c->l1_count);
  free(c->l0_greedy);
  free(c->l0_hilbert);
  free(c->l1_hilbert);
  free(c->l0_ordered);
  free(c->l1_ordered);
  free(c->b1_spent);
  free(c->b2_spent);
#define POISONED(n, type) memset(malloc(((n) + 1) * sizeof(type)), 0x5A, ((n) + 1) * sizeof(type))
  c->l0_count = POISONED((size_t)batch, int64_t);
  c->l1_count = POISONED((size_t)batch, int64_t);
  c->b1_spent = POISONED((size_t)batch, double);
  c->b2_spent = POISONED((size_t)batch, double);
  c->l0_greedy = POISONED(k0, int64_t);
  c->l0_hilbert = POISONED(k0, int64_t);
  c->l1_hilbert = POISONED(k1, int64_t);
  c->l0_ordered = POISONED(k0, int64_t);
  c->l1_ordered = POISONED(k1, int64_t);
#undef POISONED
  c->route = (apx_ff_route){c->l0_count,   c->l1_count,   c->b1_spent,   c->b2_spent,  c->l0_greedy,
                            c->l0_hilbert, c->l1_hilbert, c->l0_ordered, c->l1_ordered};
  apx_status st = route_host(&c->args, &c->route);
  ck_assert_msg(st == APX_OK, "apx_ff_route_host: %s", tu_error_text);
}

/* Row b of the route equals the reference, padding included. */
static void check_row(const routed *c, int64_t b) {
  static row_result want;
  reference_route(&c->args, b, &want);
  int64_t k0 = c->args.kmax_l0, k1 = c->args.kmax_l1;
  ck_assert_int_eq(c->l0_count[b], want.l0_count);
  ck_assert_int_eq(c->l1_count[b], want.l1_count);
  ck_assert_msg(c->b1_spent[b] == want.b1_spent, "row %lld: b1 spent %.17g, want %.17g",
                (long long)b, c->b1_spent[b], want.b1_spent);
  ck_assert_msg(c->b2_spent[b] == want.b2_spent, "row %lld: b2 spent %.17g, want %.17g",
                (long long)b, c->b2_spent[b], want.b2_spent);
  for (int64_t k = 0; k < k0; k++) {
    int64_t g = k < want.l0_count ? want.l0_greedy[k] : -1;
    int64_t h = k < want.l0_count ? want.l0_hilbert[k] : -1;
    ck_assert_msg(c->l0_greedy[b * k0 + k] == g, "row %lld l0_greedy[%lld] = %lld, want %lld",
                  (long long)b, (long long)k, (long long)c->l0_greedy[b * k0 + k], (long long)g);
    ck_assert_msg(c->l0_hilbert[b * k0 + k] == h, "row %lld l0_hilbert[%lld] = %lld, want %lld",
                  (long long)b, (long long)k, (long long)c->l0_hilbert[b * k0 + k], (long long)h);
  }
  for (int64_t k = 0; k < k1; k++) {
    int64_t h = k < want.l1_count ? want.l1_hilbert[k] : -1;
    ck_assert_msg(c->l1_hilbert[b * k1 + k] == h, "row %lld l1_hilbert[%lld] = %lld, want %lld",
                  (long long)b, (long long)k, (long long)c->l1_hilbert[b * k1 + k], (long long)h);
  }
}

static void check_all_rows(const routed *c) {
  for (int64_t b = 0; b < c->dense.shape[0]; b++)
    check_row(c, b);
}

/* ids[0..n) re-ordered by apx_tile_order in `mode` equal want[0..n), and
 * want[n..kmax) is -1 padding. Returns how many neighbours in the result
 * share a key (ties, which keep the input order). */
static int64_t check_tile_order(apx_context *ctx, const int64_t *ids, int64_t n, int64_t kmax,
                                int64_t gh, int64_t gw, apx_order_mode mode, const int64_t *want,
                                const char *what) {
  int64_t *copy = malloc((size_t)(n + 1) * sizeof *copy);
  memcpy(copy, ids, (size_t)n * sizeof *copy);
  apx_tensor in = apx_tensor_host(copy, APX_DTYPE_I64, 1, (int64_t[]){n});
  apx_tensor out = tu_host1(APX_DTYPE_I64, n);
  apx_tile_order_args order = {&in, gh, gw, mode, &out};
  ck_assert_int_eq(apx_tile_order(ctx, &order), APX_OK);
  int64_t ties = 0;
  for (int64_t k = 0; k < n; k++) {
    ck_assert_msg((int64_t)tu_get(&out, k) == want[k], "%s (mode %d)[%lld] = %lld, want %lld", what,
                  (int)mode, (long long)k, (long long)want[k], (long long)tu_get(&out, k));
    if (k > 0 && mode == APX_ORDER_MULTI_DIRECTION) {
      int64_t a = want[k - 1], b = want[k];
      ties += (a / gw) * gw + (a % gw) * gh == (b / gw) * gw + (b % gw) * gh;
    }
  }
  for (int64_t k = n; k < kmax; k++)
    ck_assert_int_eq(want[k], -1);
  tu_free(&out);
  free(copy);
  return ties;
}

/* docs/ff_infer.md, Options: l0_ordered is the greedy list and l1_ordered
 * the Hilbert L1 list each re-ordered by apx_tile_order in the call's
 * order_mode (stably: multi_direction's ties, checked to occur, keep the
 * greedy or Hilbert order); the Hilbert lists and the selection do not
 * depend on the mode. */
START_TEST(test_order_modes) {
  const int64_t shapes[3][3] = {{64, 64, 8}, {64, 160, 16}, {96, 32, 8}};
  apx_context *order_ctx = tu_open();
  ck_assert_ptr_nonnull(order_ctx);
  int64_t ties = 0;
  for (int s = 0; s < 3; s++) {
    routed hilbert;
    make_call(&hilbert, 2, shapes[s][0], shapes[s][1], shapes[s][2], APX_DTYPE_F32);
    hilbert.args.budget_b1 = 100;
    hilbert.args.budget_b2 = 100;
    route(&hilbert);
    const int64_t k0 = hilbert.args.kmax_l0, k1 = hilbert.args.kmax_l1;
    ck_assert(!memcmp(hilbert.l0_ordered, hilbert.l0_hilbert, (size_t)(2 * k0) * sizeof(int64_t)));
    ck_assert(!memcmp(hilbert.l1_ordered, hilbert.l1_hilbert, (size_t)(2 * k1) * sizeof(int64_t)));
    const int64_t gh0 = shapes[s][0] / shapes[s][2], gw0 = shapes[s][1] / shapes[s][2];
    for (int m = 0; m < 6; m++) {
      routed c = hilbert;
      c.l0_count = c.l1_count = c.l0_greedy = c.l0_hilbert = c.l1_hilbert = NULL;
      c.l0_ordered = c.l1_ordered = NULL;
      c.b1_spent = c.b2_spent = NULL;
      c.args.order_mode = (apx_order_mode)m;
      route(&c);
      ck_assert(!memcmp(c.l0_greedy, hilbert.l0_greedy, (size_t)(2 * k0) * sizeof(int64_t)));
      ck_assert(!memcmp(c.l0_hilbert, hilbert.l0_hilbert, (size_t)(2 * k0) * sizeof(int64_t)));
      ck_assert(!memcmp(c.l1_hilbert, hilbert.l1_hilbert, (size_t)(2 * k1) * sizeof(int64_t)));
      for (int64_t b = 0; b < 2; b++) {
        ck_assert_int_gt(c.l1_count[b], 4);
        ties += check_tile_order(order_ctx, c.l0_greedy + b * k0, c.l0_count[b], k0, gh0, gw0,
                                 (apx_order_mode)m, c.l0_ordered + b * k0, "l0_ordered");
        ties += check_tile_order(order_ctx, c.l1_hilbert + b * k1, c.l1_count[b], k1, 2 * gh0,
                                 2 * gw0, (apx_order_mode)m, c.l1_ordered + b * k1, "l1_ordered");
      }
      c.utilities = c.split = (apx_tensor){0};
      free_call(&c);
    }
    free_call(&hilbert);
  }
  ck_assert_int_gt(ties, 0);
  apx_close(order_ctx);
}
END_TEST

/* ---- the default profile (docs/ff_infer.md) ---- */

/* 128x128, tile 16: G0 64, kmax 32/64, b1 16, b2 8, costs 1/0.2, whatever
 * the utilities: 20 L0 tiles (20 additions of 0.8), 8 parents, 32 L1. */
START_TEST(test_default_profile) {
  const apx_dtype dtypes[3] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  double twenty_deltas = 0.0;
  for (int i = 0; i < 20; i++)
    twenty_deltas += 1.0 - 0.2;
  ck_assert(twenty_deltas == 16.000000000000004);
  for (int trial = 0; trial < 6; trial++) {
    routed c;
    make_call(&c, 1, 128, 128, 16, dtypes[trial % 3]);
    ck_assert_int_eq(c.utilities.shape[1], 64);
    ck_assert_int_eq(c.args.kmax_l0, 32);
    ck_assert_int_eq(c.args.kmax_l1, 64);
    route(&c);
    ck_assert_int_eq(c.l0_count[0], 20);
    ck_assert(c.b1_spent[0] == 16.000000000000004);
    ck_assert_int_eq(c.l1_count[0], 32);
    ck_assert(c.b2_spent[0] == 8.0);
    check_row(&c, 0);
    /* the 20 tiles are the 20 largest utilities */
    for (int64_t id = 0; id < 64; id++) {
      int64_t larger = 0;
      for (int64_t j = 0; j < 64; j++) {
        double uj = tu_get(&c.utilities, j), ui = tu_get(&c.utilities, id);
        larger += uj > ui || (uj == ui && j < id);
      }
      int selected = 0;
      for (int k = 0; k < 20; k++)
        selected |= c.l0_greedy[k] == id;
      ck_assert_int_eq(selected, larger < 20);
    }
    free_call(&c);
  }
}
END_TEST

/* The L0 and L1 lists are what apx_tile_order gives (Hilbert) for the same
 * ids on the L0 and L1 grids, and every L1 id is a child of a selected L0
 * tile, each parent's four children together. */
START_TEST(test_orders_match_tile_order) {
  const int64_t shapes[3][3] = {{128, 128, 16}, {64, 160, 16}, {96, 32, 8}};
  apx_context *order_ctx = tu_open();
  ck_assert_ptr_nonnull(order_ctx);
  for (int s = 0; s < 3; s++) {
    routed c;
    make_call(&c, 2, shapes[s][0], shapes[s][1], shapes[s][2], APX_DTYPE_F32);
    c.args.budget_b1 = 100;
    c.args.budget_b2 = 100;
    route(&c);
    int64_t gh0 = shapes[s][0] / shapes[s][2], gw0 = shapes[s][1] / shapes[s][2];
    for (int64_t b = 0; b < 2; b++) {
      int64_t k0 = c.args.kmax_l0, k1 = c.args.kmax_l1;
      int64_t n0 = c.l0_count[b], n1 = c.l1_count[b];
      ck_assert_int_gt(n0, 0);
      ck_assert_int_gt(n1, 0);
      apx_tensor ids = apx_tensor_host(c.l0_greedy + b * k0, APX_DTYPE_I64, 1, (int64_t[]){n0});
      apx_tensor out = tu_host1(APX_DTYPE_I64, n0);
      apx_tile_order_args order = {&ids, gh0, gw0, APX_ORDER_HILBERT, &out};
      ck_assert_int_eq(apx_tile_order(order_ctx, &order), APX_OK);
      for (int64_t k = 0; k < n0; k++)
        ck_assert_int_eq((int64_t)tu_get(&out, k), c.l0_hilbert[b * k0 + k]);
      tu_free(&out);

      /* the L1 ids reversed, re-ordered on the L1 grid */
      int64_t *shuffled = malloc((size_t)n1 * sizeof *shuffled);
      for (int64_t k = 0; k < n1; k++)
        shuffled[k] = c.l1_hilbert[b * k1 + n1 - 1 - k];
      ids = apx_tensor_host(shuffled, APX_DTYPE_I64, 1, (int64_t[]){n1});
      out = tu_host1(APX_DTYPE_I64, n1);
      order = (apx_tile_order_args){&ids, 2 * gh0, 2 * gw0, APX_ORDER_HILBERT, &out};
      ck_assert_int_eq(apx_tile_order(order_ctx, &order), APX_OK);
      for (int64_t k = 0; k < n1; k++)
        ck_assert_int_eq((int64_t)tu_get(&out, k), c.l1_hilbert[b * k1 + k]);
      tu_free(&out);
      free(shuffled);

      for (int64_t k = 0; k < n1; k++) {
        int64_t id = c.l1_hilbert[b * k1 + k], ty = id / (2 * gw0), tx = id % (2 * gw0);
        int64_t parent = (ty / 2) * gw0 + tx / 2, found = 0, siblings = 0;
        for (int64_t j = 0; j < n0; j++)
          found += c.l0_greedy[b * k0 + j] == parent;
        for (int64_t j = 0; j < n1; j++) {
          int64_t other = c.l1_hilbert[b * k1 + j];
          siblings += (other / (2 * gw0)) / 2 == ty / 2 && (other % (2 * gw0)) / 2 == tx / 2;
        }
        ck_assert_int_eq(found, 1);
        ck_assert_int_eq(siblings, 4);
      }
    }
    check_all_rows(&c);
    free_call(&c);
  }
  apx_close(order_ctx);
}
END_TEST

/* ---- against the reference ---- */

/* Random utilities with many ties (a few quantised values), negative
 * values, random budgets and limits; every row checked. */
START_TEST(test_random_against_reference) {
  const apx_dtype dtypes[3] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  for (int trial = 0; trial < 60; trial++) {
    int64_t tile = 2 * tu_int(&rng, 1, 4);
    int64_t h = tile * tu_int(&rng, 1, 9), w = tile * tu_int(&rng, 1, 9);
    routed c;
    make_call(&c, tu_int(&rng, 1, 3), h, w, tile, dtypes[trial % 3]);
    int64_t g0 = c.utilities.shape[1];
    if (trial % 2 == 0) /* ties: values in {-2, -1.5, ..., 2} */
      for (int64_t i = 0; i < g0 * c.dense.shape[0]; i++) {
        tu_set(&c.utilities, i, 0.5 * (double)tu_int(&rng, -4, 4));
        tu_set(&c.split, i, 0.5 * (double)tu_int(&rng, -2, 2));
      }
    c.args.kmax_l0 = tu_int(&rng, 0, g0);
    c.args.kmax_l1 = tu_int(&rng, 0, 4 * g0);
    c.args.budget_b1 = 0.25 * (double)tu_int(&rng, 0, 4 * g0);
    c.args.budget_b2 = 0.5 * (double)tu_int(&rng, 0, 2 * g0);
    c.args.cost_heavy = tu_uniform(&rng) * 2;
    c.args.cost_cheap = tu_uniform(&rng);
    c.args.enable_nesting = trial % 5 != 4;
    route(&c);
    check_all_rows(&c);
    free_call(&c);
  }
}
END_TEST

/* All-negative utilities are ranked like any others (not excluded), and
 * ±inf are ordinary values. */
START_TEST(test_negative_and_infinite_utilities) {
  routed c;
  make_call(&c, 1, 64, 64, 8, APX_DTYPE_F32);
  for (int64_t i = 0; i < 64; i++) {
    tu_set(&c.utilities, i, -1.0 - (double)((i * 37) % 64));
    tu_set(&c.split, i, -(double)i);
  }
  tu_set(&c.utilities, 40, INFINITY);
  tu_set(&c.utilities, 41, -INFINITY);
  tu_set(&c.split, 63, INFINITY);
  c.args.budget_b1 = 100;
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 32);
  ck_assert_int_eq(c.l0_greedy[0], 40);
  /* -1 - (i*37 % 64) is largest (-1) at i = 0, then -2 at i = 45 */
  ck_assert_int_eq(c.l0_greedy[1], 0);
  ck_assert_int_eq(c.l0_greedy[2], 45);
  check_row(&c, 0);
  free_call(&c);
}
END_TEST

/* Ties go to the smaller id, for L0 and for the parents. */
START_TEST(test_ties_by_id) {
  routed c;
  make_call(&c, 1, 64, 64, 16, APX_DTYPE_BF16);
  for (int64_t i = 0; i < 16; i++) {
    tu_set(&c.utilities, i, 1.0);
    tu_set(&c.split, i, 0.0);
  }
  c.args.kmax_l0 = 5;
  c.args.kmax_l1 = 8; /* two parents */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 5);
  for (int k = 0; k < 5; k++)
    ck_assert_int_eq(c.l0_greedy[k], k);
  /* parents 0 and 1 of the 4x4 grid: L1 ids on the 8x8 grid */
  int64_t want[8] = {0, 1, 8, 9, 2, 3, 10, 11};
  reference_hilbert_order(want, 8, 8, 8);
  ck_assert_int_eq(c.l1_count[0], 8);
  for (int k = 0; k < 8; k++)
    ck_assert_int_eq(c.l1_hilbert[k], want[k]);
  check_row(&c, 0);
  free_call(&c);
}
END_TEST

/* ---- the limits ---- */

START_TEST(test_budget_b1_exhausted_early) {
  routed c;
  make_call(&c, 1, 128, 128, 16, APX_DTYPE_F32);
  c.args.budget_b1 = 2.5; /* 3 tiles of 0.8 */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 3);
  ck_assert_int_eq(c.l1_count[0], 12);
  ck_assert(c.b2_spent[0] == 3.0);
  check_row(&c, 0);
  c.args.budget_b1 = 2.4; /* 0.8 three times is 2.4000000000000004, within the slack */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 3);
  c.args.budget_b1 = 2.399; /* outside it */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 2);
  check_row(&c, 0);
  free_call(&c);
}
END_TEST

START_TEST(test_kmax_l0_limit) {
  routed c;
  make_call(&c, 1, 128, 128, 16, APX_DTYPE_F32);
  c.args.kmax_l0 = 5;
  c.args.budget_b1 = 1000;
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 5);
  ck_assert_int_eq(c.l1_count[0], 20);
  /* the arrays hold [B, kmax_l0]: the word after them is not written */
  ck_assert_uint_eq((uint64_t)c.l0_greedy[5], 0x5A5A5A5A5A5A5A5Aull);
  ck_assert_uint_eq((uint64_t)c.l0_hilbert[5], 0x5A5A5A5A5A5A5A5Aull);
  check_row(&c, 0);
  c.args.kmax_l0 = 64; /* every tile */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 64);
  check_row(&c, 0);
  free_call(&c);
}
END_TEST

START_TEST(test_kmax_l1_limit) {
  routed c;
  make_call(&c, 1, 128, 128, 16, APX_DTYPE_F32);
  c.args.kmax_l1 = 6; /* room for one parent */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 20);
  ck_assert_int_eq(c.l1_count[0], 4);
  ck_assert(c.b2_spent[0] == 1.0);
  ck_assert_int_eq(c.l1_hilbert[4], -1);
  ck_assert_int_eq(c.l1_hilbert[5], -1);
  ck_assert_uint_eq((uint64_t)c.l1_hilbert[6], 0x5A5A5A5A5A5A5A5Aull);
  check_row(&c, 0);
  /* the parent is the selected tile of largest split utility */
  int64_t best = c.l0_greedy[0];
  for (int k = 1; k < 20; k++) {
    int64_t id = c.l0_greedy[k];
    if (tu_get(&c.split, id) > tu_get(&c.split, best) ||
        (tu_get(&c.split, id) == tu_get(&c.split, best) && id < best))
      best = id;
  }
  int64_t min_child = c.l1_hilbert[0];
  for (int k = 1; k < 4; k++)
    if (c.l1_hilbert[k] < min_child)
      min_child = c.l1_hilbert[k];
  ck_assert_int_eq(min_child, (2 * (best / 8)) * 16 + 2 * (best % 8));
  free_call(&c);
}
END_TEST

START_TEST(test_budget_b2_fraction) {
  routed c;
  make_call(&c, 1, 128, 128, 16, APX_DTYPE_F32);
  c.args.budget_b2 = 2.5; /* two parents */
  route(&c);
  ck_assert_int_eq(c.l1_count[0], 8);
  ck_assert(c.b2_spent[0] == 2.0);
  check_row(&c, 0);
  free_call(&c);
}
END_TEST

/* No L1 tile: nesting off, no split utilities, b2 = 0, kmax_l1 = 0, or no
 * L0 tile (b1 = 0). */
START_TEST(test_no_l1_tiles) {
  for (int variant = 0; variant < 5; variant++) {
    routed c;
    make_call(&c, 2, 128, 128, 16, APX_DTYPE_F32);
    switch (variant) {
    case 0:
      c.args.enable_nesting = 0;
      break;
    case 1:
      c.args.split_utilities = NULL;
      break;
    case 2:
      c.args.budget_b2 = 0;
      break;
    case 3:
      c.args.kmax_l1 = 0;
      break;
    case 4:
      c.args.budget_b1 = 0;
      break;
    }
    route(&c);
    for (int64_t b = 0; b < 2; b++) {
      ck_assert_int_eq(c.l0_count[b], variant == 4 ? 0 : 20);
      ck_assert_int_eq(c.l1_count[b], 0);
      ck_assert(c.b2_spent[b] == 0.0);
      for (int64_t k = 0; k < c.args.kmax_l1; k++)
        ck_assert_int_eq(c.l1_hilbert[b * c.args.kmax_l1 + k], -1);
      if (variant == 4) {
        ck_assert(c.b1_spent[b] == 0.0);
        for (int64_t k = 0; k < c.args.kmax_l0; k++) {
          ck_assert_int_eq(c.l0_greedy[b * c.args.kmax_l0 + k], -1);
          ck_assert_int_eq(c.l0_hilbert[b * c.args.kmax_l0 + k], -1);
        }
      }
    }
    check_all_rows(&c);
    free_call(&c);
  }
}
END_TEST

/* cost_heavy == cost_cheap: every tile costs 1e-9, kmax_l0 is the limit. */
START_TEST(test_equal_costs) {
  routed c;
  make_call(&c, 1, 128, 128, 16, APX_DTYPE_F32);
  c.args.cost_heavy = c.args.cost_cheap = 0.5;
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 32);
  ck_assert(c.b1_spent[0] > 31.5e-9 && c.b1_spent[0] < 32.5e-9);
  check_row(&c, 0);
  c.args.budget_b1 = 0; /* 1e-9 <= 0 + 1e-9: one tile */
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 1);
  check_row(&c, 0);
  c.args.cost_heavy = 0.1; /* cheaper than cheap: also 1e-9 */
  c.args.budget_b1 = 16;
  route(&c);
  ck_assert_int_eq(c.l0_count[0], 32);
  check_row(&c, 0);
  free_call(&c);
}
END_TEST

/* Each batch row is routed on its own: B = 3 equals three B = 1 calls. */
START_TEST(test_rows_independent) {
  routed all;
  make_call(&all, 3, 64, 96, 8, APX_DTYPE_F16);
  all.args.budget_b1 = 10;
  route(&all);
  int64_t g0 = all.utilities.shape[1], k0 = all.args.kmax_l0, k1 = all.args.kmax_l1;
  for (int64_t b = 0; b < 3; b++) {
    routed one;
    make_call(&one, 1, 64, 96, 8, APX_DTYPE_F16);
    one.args.budget_b1 = 10;
    for (int64_t i = 0; i < g0; i++) {
      tu_set(&one.utilities, i, tu_get(&all.utilities, b * g0 + i));
      tu_set(&one.split, i, tu_get(&all.split, b * g0 + i));
    }
    route(&one);
    ck_assert_int_eq(one.l0_count[0], all.l0_count[b]);
    ck_assert_int_eq(one.l1_count[0], all.l1_count[b]);
    ck_assert(memcmp(one.l0_greedy, all.l0_greedy + b * k0, (size_t)k0 * sizeof(int64_t)) == 0);
    ck_assert(memcmp(one.l0_hilbert, all.l0_hilbert + b * k0, (size_t)k0 * sizeof(int64_t)) == 0);
    ck_assert(memcmp(one.l1_hilbert, all.l1_hilbert + b * k1, (size_t)k1 * sizeof(int64_t)) == 0);
    free_call(&one);
  }
  check_all_rows(&all);
  free_call(&all);
}
END_TEST

/* f16 and bf16 utilities are converted exactly: the same values in f32
 * give the same route. */
START_TEST(test_half_utilities) {
  const apx_dtype halves[2] = {APX_DTYPE_F16, APX_DTYPE_BF16};
  for (int h = 0; h < 2; h++) {
    routed half, full;
    make_call(&half, 2, 128, 128, 16, halves[h]);
    make_call(&full, 2, 128, 128, 16, APX_DTYPE_F32);
    for (int64_t i = 0; i < 128; i++) {
      tu_set(&full.utilities, i, tu_get(&half.utilities, i));
      tu_set(&full.split, i, tu_get(&half.split, i));
    }
    route(&half);
    route(&full);
    ck_assert(memcmp(half.l0_greedy, full.l0_greedy, 64 * sizeof(int64_t)) == 0);
    ck_assert(memcmp(half.l1_hilbert, full.l1_hilbert, 128 * sizeof(int64_t)) == 0);
    check_all_rows(&half);
    free_call(&half);
    free_call(&full);
  }
}
END_TEST

/* Empty batch and map: nothing to route, nothing written out of bounds. */
START_TEST(test_empty) {
  routed c;
  make_call(&c, 0, 32, 32, 16, APX_DTYPE_F32);
  route(&c);
  free_call(&c);
  make_call(&c, 2, 0, 32, 16, APX_DTYPE_F32);
  c.args.kmax_l0 = c.args.kmax_l1 = 0;
  route(&c);
  ck_assert_int_eq(c.l0_count[1], 0);
  ck_assert_int_eq(c.l1_count[1], 0);
  free_call(&c);
}
END_TEST

/* Only the arrays given are written. */
START_TEST(test_partial_route_arrays) {
  routed c;
  make_call(&c, 2, 128, 128, 16, APX_DTYPE_F32);
  route(&c);
  int64_t hilbert[2 * 64];
  apx_ff_route partial = {0};
  partial.l1_hilbert = hilbert;
  ck_assert_int_eq(route_host(&c.args, &partial), APX_OK);
  ck_assert(memcmp(hilbert, c.l1_hilbert, sizeof hilbert) == 0);
  apx_ff_route none = {0};
  ck_assert_int_eq(route_host(&c.args, &none), APX_OK);
  free_call(&c);
}
END_TEST

START_TEST(test_rejects_what_it_cannot_route) {
  routed c;
  make_call(&c, 1, 128, 128, 16, APX_DTYPE_F32);
  apx_ff_route r = {0};
  ck_assert_int_eq(route_host(NULL, &r), APX_ERR_INVALID_ARG);
  ck_assert_int_eq(route_host(&c.args, NULL), APX_ERR_INVALID_ARG);
  c.utilities.device = APX_DEVICE_CUDA;
  ck_assert_int_eq(route_host(&c.args, &r), APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(tu_error_text, "host utilities"));
  c.utilities.device = APX_DEVICE_HOST;
  free_call(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ff_route");
  TCase *tc = tcase_create("route");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_default_profile);
  tcase_add_test(tc, test_orders_match_tile_order);
  tcase_add_test(tc, test_order_modes);
  tcase_add_test(tc, test_random_against_reference);
  tcase_add_test(tc, test_negative_and_infinite_utilities);
  tcase_add_test(tc, test_ties_by_id);
  tcase_add_test(tc, test_budget_b1_exhausted_early);
  tcase_add_test(tc, test_kmax_l0_limit);
  tcase_add_test(tc, test_kmax_l1_limit);
  tcase_add_test(tc, test_budget_b2_fraction);
  tcase_add_test(tc, test_no_l1_tiles);
  tcase_add_test(tc, test_equal_costs);
  tcase_add_test(tc, test_rows_independent);
  tcase_add_test(tc, test_half_utilities);
  tcase_add_test(tc, test_empty);
  tcase_add_test(tc, test_partial_route_arrays);
  tcase_add_test(tc, test_rejects_what_it_cannot_route);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
