/* SPDX-License-Identifier: Apache-2.0 */
/* apx_tile_order and apx_order_mode_from_name (docs/ops.md, tile_order): the golden
 * Hilbert orders, every mode against a plain reference (the spec's key
 * formulas and a stable insertion sort), stability, both index dtypes, in
 * place, and rejected calls that leave out untouched. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static apx_context *ctx;
static void setup(void) { ctx = tu_open(); }
static void teardown(void) {
  apx_close(ctx);
  ctx = NULL;
}

/* ---- the reference ---- */

/* hilbert_d exactly as the Python source writes it (unmasked reflection),
 * in 128 bits so that any grid the API accepts fits. */
static unsigned __int128 reference_hilbert(int64_t x, int64_t y, int64_t n) {
  unsigned __int128 d = 0;
  for (int64_t s = n / 2; s > 0; s /= 2) {
    int64_t rx = (x & s) != 0, ry = (y & s) != 0;
    d += (unsigned __int128)s * (unsigned __int128)s * (unsigned __int128)((3 * rx) ^ ry);
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

static unsigned __int128 reference_key(apx_order_mode mode, int64_t id, int64_t gh, int64_t gw) {
  int64_t ty = id / gw, tx = id % gw;
  int64_t n = 1;
  while (n < (gh > gw ? gh : gw))
    n *= 2;
  switch (mode) {
  case APX_ORDER_HILBERT:
    return reference_hilbert(tx, ty, n);
  /* (major, minor) pairs as major * 2^64 + minor */
  case APX_ORDER_L2R:
    return ((unsigned __int128)ty << 64) | (uint64_t)tx;
  case APX_ORDER_R2L:
    return ((unsigned __int128)ty << 64) | (uint64_t)(gw - 1 - tx);
  case APX_ORDER_U2D:
    return ((unsigned __int128)tx << 64) | (uint64_t)ty;
  case APX_ORDER_D2U:
    return ((unsigned __int128)tx << 64) | (uint64_t)(gh - 1 - ty);
  case APX_ORDER_MULTI_DIRECTION:
    return 2 * ((unsigned __int128)ty * (uint64_t)gw + (unsigned __int128)tx * (uint64_t)gh) +
           (uint64_t)gw + (uint64_t)gh - 2;
  }
  ck_abort_msg("bad mode");
  return 0;
}

/* Stable insertion sort of ids by key. */
static void reference_order(apx_order_mode mode, const int64_t *ids, int64_t count, int64_t gh,
                            int64_t gw, int64_t *out) {
  unsigned __int128 *keys = malloc((size_t)(count ? count : 1) * sizeof *keys);
  for (int64_t i = 0; i < count; i++) {
    int64_t id = ids[i];
    unsigned __int128 key = reference_key(mode, id, gh, gw);
    int64_t j = i;
    while (j > 0 && keys[j - 1] > key) {
      keys[j] = keys[j - 1];
      out[j] = out[j - 1];
      j--;
    }
    keys[j] = key;
    out[j] = id;
  }
  free(keys);
}

/* ---- helpers ---- */

static apx_tensor ids_tensor(apx_dtype dtype, const int64_t *values, int64_t count) {
  apx_tensor t = tu_host1(dtype, count);
  for (int64_t i = 0; i < count; i++) {
    if (dtype == APX_DTYPE_I64)
      ((int64_t *)t.data)[i] = values[i];
    else
      ((int32_t *)t.data)[i] = (int32_t)values[i];
  }
  return t;
}

static int64_t id_at(const apx_tensor *t, int64_t i) {
  return t->dtype == APX_DTYPE_I64 ? ((int64_t *)t->data)[i] : ((int32_t *)t->data)[i];
}

/* Run the op (out separate, then in place) and compare with `want`. */
static void check_order(apx_order_mode mode, apx_dtype dtype, const int64_t *ids, int64_t count,
                        int64_t gh, int64_t gw, const int64_t *want) {
  apx_tensor in = ids_tensor(dtype, ids, count);
  apx_tensor out = tu_host1(dtype, count);
  tu_poison(&out);
  apx_tile_order_args a = APX_TILE_ORDER_ARGS_INIT;
  a.ids = &in;
  a.out = &out;
  a.grid_h = gh;
  a.grid_w = gw;
  a.mode = mode;
  apx_status st = apx_tile_order(ctx, &a);
  ck_assert_msg(st == APX_OK, "tile_order failed: %s", apx_last_error());
  for (int64_t i = 0; i < count; i++) {
    ck_assert_msg(id_at(&out, i) == want[i], "mode %d grid %lldx%lld: out[%lld] = %lld, want %lld",
                  (int)mode, (long long)gh, (long long)gw, (long long)i, (long long)id_at(&out, i),
                  (long long)want[i]);
    ck_assert_int_eq(id_at(&in, i), ids[i]); /* ids untouched */
  }
  /* in place: out aliases ids exactly */
  a.out = &in;
  st = apx_tile_order(ctx, &a);
  ck_assert_msg(st == APX_OK, "in-place tile_order failed: %s", apx_last_error());
  for (int64_t i = 0; i < count; i++)
    ck_assert_msg(id_at(&in, i) == want[i], "in place: out[%lld] = %lld, want %lld", (long long)i,
                  (long long)id_at(&in, i), (long long)want[i]);
  tu_free(&in);
  tu_free(&out);
}

/* ---- golden orders ---- */

START_TEST(test_hilbert_golden) {
  static const int64_t g2x2[] = {0, 2, 3, 1};
  static const int64_t g4x4[] = {0, 1, 5, 4, 8, 12, 13, 9, 10, 14, 15, 11, 7, 6, 2, 3};
  static const int64_t g8x8[] = {0,  8,  9,  1,  2,  3,  11, 10, 18, 19, 27, 26, 25, 17, 16, 24,
                                 32, 33, 41, 40, 48, 56, 57, 49, 50, 58, 59, 51, 43, 42, 34, 35,
                                 36, 37, 45, 44, 52, 60, 61, 53, 54, 62, 63, 55, 47, 46, 38, 39,
                                 31, 23, 22, 30, 29, 28, 20, 21, 13, 12, 4,  5,  6,  14, 15, 7};
  static const int64_t g1x3[] = {0, 1, 2};
  static const int64_t g2x3[] = {0, 1, 4, 3, 5, 2};
  static const int64_t g3x2[] = {0, 1, 3, 2, 4, 5};
  struct {
    int64_t gh, gw;
    const int64_t *want;
  } golden[] = {{2, 2, g2x2}, {4, 4, g4x4}, {8, 8, g8x8}, {1, 3, g1x3}, {2, 3, g2x3}, {3, 2, g3x2}};
  const apx_dtype dtypes[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  tu_rng rng = {tu_seed()};
  for (size_t g = 0; g < sizeof golden / sizeof golden[0]; g++) {
    int64_t count = golden[g].gh * golden[g].gw;
    int64_t ids[64];
    for (int64_t i = 0; i < count; i++)
      ids[i] = i;
    for (int d = 0; d < 2; d++) {
      check_order(APX_ORDER_HILBERT, dtypes[d], ids, count, golden[g].gh, golden[g].gw,
                  golden[g].want);
      /* the order of a full grid does not depend on the input order */
      int64_t shuffled[64];
      memcpy(shuffled, ids, sizeof shuffled);
      for (int64_t i = count - 1; i > 0; i--) {
        int64_t j = tu_int(&rng, 0, i), t = shuffled[i];
        shuffled[i] = shuffled[j];
        shuffled[j] = t;
      }
      check_order(APX_ORDER_HILBERT, dtypes[d], shuffled, count, golden[g].gh, golden[g].gw,
                  golden[g].want);
      /* and the reference agrees with the golden list */
      int64_t ref[64];
      reference_order(APX_ORDER_HILBERT, shuffled, count, golden[g].gh, golden[g].gw, ref);
      ck_assert(memcmp(ref, golden[g].want, (size_t)count * sizeof ref[0]) == 0);
    }
  }
  /* 1x1 grid: n = 1 */
  check_order(APX_ORDER_HILBERT, APX_DTYPE_I64, (int64_t[]){0, 0}, 2, 1, 1, (int64_t[]){0, 0});
}
END_TEST

/* The scan orders on a 2x3 grid, written out. */
START_TEST(test_scan_orders_golden) {
  const int64_t ids[6] = {0, 1, 2, 3, 4, 5};
  check_order(APX_ORDER_L2R, APX_DTYPE_I64, ids, 6, 2, 3, (int64_t[]){0, 1, 2, 3, 4, 5});
  check_order(APX_ORDER_R2L, APX_DTYPE_I64, ids, 6, 2, 3, (int64_t[]){2, 1, 0, 5, 4, 3});
  check_order(APX_ORDER_U2D, APX_DTYPE_I64, ids, 6, 2, 3, (int64_t[]){0, 3, 1, 4, 2, 5});
  check_order(APX_ORDER_D2U, APX_DTYPE_I64, ids, 6, 2, 3, (int64_t[]){3, 0, 4, 1, 5, 2});
  /* multi_direction keys 2*(ty*3 + tx*2) + 3: 3 7 11 9 13 17 */
  check_order(APX_ORDER_MULTI_DIRECTION, APX_DTYPE_I64, ids, 6, 2, 3,
              (int64_t[]){0, 1, 3, 2, 4, 5});
}
END_TEST

/* Every mode on random grids and random id lists with duplicates, against
 * the reference; both dtypes. */
START_TEST(test_modes_against_reference) {
  tu_rng rng = {tu_seed() ^ 0x7157u};
  const apx_dtype dtypes[2] = {APX_DTYPE_I32, APX_DTYPE_I64};
  for (int trial = 0; trial < 300; trial++) {
    apx_order_mode mode = (apx_order_mode)(trial % 6);
    int64_t gh = tu_int(&rng, 1, 13), gw = tu_int(&rng, 1, 13);
    int64_t count = tu_int(&rng, 0, 48);
    int64_t ids[48], want[48];
    for (int64_t i = 0; i < count; i++)
      ids[i] = tu_int(&rng, 0, gh * gw - 1);
    reference_order(mode, ids, count, gh, gw, want);
    check_order(mode, dtypes[trial % 2], ids, count, gh, gw, want);
  }
}
END_TEST

/* Large grids (Hilbert n up to 2^40, keys beyond 64 bits). */
START_TEST(test_large_grids) {
  tu_rng rng = {tu_seed() ^ 0xb16u};
  const int64_t grids[4][2] = {{1, (int64_t)1 << 40},
                               {(int64_t)1 << 33, 3},
                               {(int64_t)1 << 31, (int64_t)1 << 31},
                               {3037000499, 3037000499}};
  for (int g = 0; g < 4; g++)
    for (int m = 0; m < 6; m++) {
      int64_t gh = grids[g][0], gw = grids[g][1];
      int64_t ids[40], want[40];
      for (int i = 0; i < 40; i++)
        ids[i] = tu_int(&rng, 0, gh * gw - 1);
      ids[39] = ids[3]; /* a duplicate */
      reference_order((apx_order_mode)m, ids, 40, gh, gw, want);
      check_order((apx_order_mode)m, APX_DTYPE_I64, ids, 40, gh, gw, want);
    }
}
END_TEST

/* Equal keys keep the input order (docs/ops.md, tile_order: every sort is stable).
 * On a 3x3 grid the anti-diagonal 2, 4, 6 shares one multi_direction key. */
START_TEST(test_stability) {
  check_order(APX_ORDER_MULTI_DIRECTION, APX_DTYPE_I32, (int64_t[]){6, 4, 2}, 3, 3, 3,
              (int64_t[]){6, 4, 2});
  check_order(APX_ORDER_MULTI_DIRECTION, APX_DTYPE_I64, (int64_t[]){4, 2, 8, 6, 0}, 5, 3, 3,
              (int64_t[]){0, 4, 2, 6, 8});
  /* duplicates stay in place relative to each other (count preserved) */
  check_order(APX_ORDER_HILBERT, APX_DTYPE_I64, (int64_t[]){1, 0, 1, 2, 0}, 5, 2, 2,
              (int64_t[]){0, 0, 2, 1, 1});
  /* a long list of one key: the identity permutation */
  int64_t same[200];
  for (int i = 0; i < 200; i++)
    same[i] = (i % 2) ? 2 : 6;
  int64_t want[200];
  memcpy(want, same, sizeof want);
  /* 2 and 6 share key 4+... on 3x3: ty*3+tx*3 = 6 for both */
  check_order(APX_ORDER_MULTI_DIRECTION, APX_DTYPE_I64, same, 200, 3, 3, want);
}
END_TEST

START_TEST(test_empty) {
  apx_tensor in = tu_host1(APX_DTYPE_I64, 0), out = tu_host1(APX_DTYPE_I64, 0);
  apx_tile_order_args a = APX_TILE_ORDER_ARGS_INIT;
  a.ids = &in;
  a.out = &out;
  a.grid_h = a.grid_w = 4;
  ck_assert_int_eq(apx_tile_order(ctx, &a), APX_OK);
  tu_free(&in);
  tu_free(&out);
}
END_TEST

/* ---- rejected calls ---- */

static void expect_rejected(const apx_tile_order_args *a, const apx_tensor *out, const char *s1,
                            const char *s2) {
  apx_status st = apx_tile_order(ctx, a);
  ck_assert_msg(st == APX_ERR_INVALID_ARG, "tile_order returned %s (%s)", apx_status_name(st),
                apx_last_error());
  const char *message = apx_last_error();
  ck_assert_msg(strstr(message, s1) != NULL, "message [%s] lacks [%s]", message, s1);
  if (s2)
    ck_assert_msg(strstr(message, s2) != NULL, "message [%s] lacks [%s]", message, s2);
  if (out)
    ck_assert_msg(tu_is_poisoned(out), "out was written by a rejected call");
}

START_TEST(test_errors) {
  const int64_t values[6] = {0, 5, 15, 3, 9, 1};
  apx_tensor ids = ids_tensor(APX_DTYPE_I32, values, 6);
  apx_tensor out = tu_host1(APX_DTYPE_I32, 6);
  tu_poison(&out);
  apx_tile_order_args a = APX_TILE_ORDER_ARGS_INIT;
  a.ids = &ids;
  a.out = &out;
  a.grid_h = a.grid_w = 4;

  a.mode = (apx_order_mode)6;
  expect_rejected(&a, &out, "tile_order: mode = [6]", NULL);
  a.mode = (apx_order_mode)-1;
  expect_rejected(&a, &out, "mode = [-1]", NULL);
  a.mode = APX_ORDER_HILBERT;

  a.grid_h = 0;
  expect_rejected(&a, &out, "tile_order: grid_h = [0] must be > 0", NULL);
  a.grid_h = 4;
  a.grid_w = -2;
  expect_rejected(&a, &out, "grid_w = [-2] must be > 0", NULL);
  a.grid_w = INT64_MAX / 2;
  expect_rejected(&a, &out, "grid_h * grid_w", "overflows");
  a.grid_w = 4;

  /* ids out of range: whole tensor, both ends */
  ((int32_t *)ids.data)[3] = 20;
  expect_rejected(&a, &out, "tile_order: ids[3] = [20] is outside [0, 15]", NULL);
  ((int32_t *)ids.data)[3] = 16;
  expect_rejected(&a, &out, "ids[3] = [16] is outside [0, 15]", NULL);
  ((int32_t *)ids.data)[3] = 3;
  ((int32_t *)ids.data)[5] = -1;
  expect_rejected(&a, &out, "ids[5] = [-1] is outside [0, 15]", NULL);
  ((int32_t *)ids.data)[5] = 1;
  a.grid_h = 2; /* 15 is now out of a 2x4 grid */
  expect_rejected(&a, &out, "ids[2] = [15] is outside [0, 7]", NULL);
  a.grid_h = 4;

  /* tensors */
  a.ids = NULL;
  expect_rejected(&a, &out, "ids is required", NULL);
  a.ids = &ids;
  a.out = NULL;
  expect_rejected(&a, NULL, "out is required", NULL);
  a.out = &out;
  apx_tensor bad = ids;
  a.ids = &bad;
  bad.dtype = APX_DTYPE_F32;
  expect_rejected(&a, &out, "ids dtype [f32] must be i32 or i64", NULL);
  bad.dtype = APX_DTYPE_I32;
  bad.ndim = 2;
  bad.shape[0] = 2;
  bad.shape[1] = 3;
  expect_rejected(&a, &out, "ids must be [K], got ndim [2]", NULL);
  a.ids = &ids;
  apx_tensor out64 = tu_host1(APX_DTYPE_I64, 6);
  tu_poison(&out64);
  a.out = &out64;
  expect_rejected(&a, &out64, "out dtype [i64] must equal ids dtype [i32]", NULL);
  tu_free(&out64);
  apx_tensor out5 = tu_host1(APX_DTYPE_I32, 5);
  tu_poison(&out5);
  a.out = &out5;
  expect_rejected(&a, &out5, "out has shape [5], expected [6]", NULL);
  tu_free(&out5);
  a.out = &out;
  /* device tensors: tile_order is a host op */
  apx_tensor on_cuda = ids, out_cuda = out;
  on_cuda.device = out_cuda.device = APX_DEVICE_CUDA;
  a.ids = &on_cuda;
  a.out = &out_cuda;
  expect_rejected(&a, &out, "host", "[cuda:0]");
  a.out = &out;
  expect_rejected(&a, &out, "must be on one device", NULL);
  a.ids = &ids;
  /* out overlapping ids other than exactly */
  apx_tensor shifted = ids;
  shifted.data = (int32_t *)ids.data + 1;
  shifted.shape[0] = 5;
  apx_tensor ids5 = ids;
  ids5.shape[0] = 5;
  a.ids = &ids5;
  a.out = &shifted;
  expect_rejected(&a, NULL, "overlaps ids", "not an exact alias");
  ck_assert_int_eq(((int32_t *)ids.data)[1], 5);
  ck_assert_int_eq(((int32_t *)ids.data)[5], 1);
  a.ids = &ids;
  a.out = &out;
  ck_assert_int_eq(apx_tile_order(ctx, NULL), APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(apx_last_error(), "args"));

  /* and the valid call still works */
  ck_assert_int_eq(apx_tile_order(ctx, &a), APX_OK);
  tu_free(&ids);
  tu_free(&out);
}
END_TEST

START_TEST(test_mode_names) {
  struct {
    const char *name;
    int mode;
  } names[] = {
      {"hilbert", APX_ORDER_HILBERT},
      {"HILBERT", APX_ORDER_HILBERT},
      {"  Hilbert\t\n", APX_ORDER_HILBERT},
      {"multi_direction", APX_ORDER_MULTI_DIRECTION},
      {"Multi_Direction ", APX_ORDER_MULTI_DIRECTION},
      {"l2r", APX_ORDER_L2R},
      {"lr", APX_ORDER_L2R},
      {"scan_lr", APX_ORDER_L2R},
      {"SCAN_LR", APX_ORDER_L2R},
      {"r2l", APX_ORDER_R2L},
      {"rl", APX_ORDER_R2L},
      {"scan_rl", APX_ORDER_R2L},
      {"u2d", APX_ORDER_U2D},
      {"ud", APX_ORDER_U2D},
      {"scan_ud", APX_ORDER_U2D},
      {"d2u", APX_ORDER_D2U},
      {"du", APX_ORDER_D2U},
      {" scan_du", APX_ORDER_D2U},
      {"", -1},
      {"  ", -1},
      {"hilbertx", -1},
      {"hilber", -1},
      {"scan", -1},
      {"multi direction", -1},
      {"l2r2", -1},
      {"zorder", -1},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    ck_assert_msg(apx_order_mode_from_name(names[i].name) == names[i].mode, "[%s] -> %d, want %d",
                  names[i].name, apx_order_mode_from_name(names[i].name), names[i].mode);
  ck_assert_int_eq(apx_order_mode_from_name(NULL), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tile_order");
  TCase *tc = tcase_create("tile_order");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_hilbert_golden);
  tcase_add_test(tc, test_scan_orders_golden);
  tcase_add_test(tc, test_modes_against_reference);
  tcase_add_test(tc, test_large_grids);
  tcase_add_test(tc, test_stability);
  tcase_add_test(tc, test_empty);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_mode_names);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
