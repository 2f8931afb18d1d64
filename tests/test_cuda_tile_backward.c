/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's tilepack_backward, tileunpack_backward,
 * index_select_backward and fused_pack_op_unpack_backward (docs/ops.md,
 * each op's section) against the cpu backend through the public API: every dtype x both index dtypes, repeats (they accumulate),
 * K = 0 and N = 0 (zeros), tiles of 1 to 16, tilepack_backward's
 * bucketing past one block of ids, past its shared memory and past one
 * grid of rows, and misaligned pointers, each device call run twice
 * (the same bits: no atomics). Both backends add an element's gradients in
 * ascending k (or i) in fp32 from zero (integers exactly) and round once,
 * so the results must be the same bits. A bad index is refused under
 * validate = eager and reported by apx_sync under validate = device.
 * Exits 77 without a GPU (tests/cuda_case.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_case.h"

/* One cpu-vs-cuda case of an op with inputs grad_out and an index and one
 * output (want holds the cpu backend's result): the same bits, the device
 * call run twice. */
static void run_exact(const char *what, apx_op_id op, void *args, const apx_tensor **grad_out,
                      const apx_tensor **index, const apx_tensor **out, const apx_tensor *want) {
  cc_case c = {what, op, args, {grad_out, index}, {out}, -1, 1};
  apx_tensor got[CC_MAX_OUTPUTS];
  cc_run(&c, got);
  expect_exact(&got[0], want, what);
  tu_free(&got[0]);
}

/* ids drawn from [0, id_hi]; id_hi < 0: half the grid (many repeats,
 * some tiles unnamed) */
static void tilepack_backward_ids(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                                  int64_t gw, int64_t t, int64_t K, int64_t id_hi) {
  if (id_hi < 0) id_hi = gh * gw / 2;
  char what[180];
  snprintf(what, sizeof what, "tilepack_backward %s/%s B%lld C%lld %lldx%lld t%lld K%lld ids<=%lld",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K, (long long)id_hi);
  apx_tensor g = tu_host5(dt, B, K, C, t, t), idx = tu_host2(it, B, K);
  apx_tensor want = tu_host4(dt, B, C, gh * t, gw * t);
  fill_values(&g, 0);
  tu_fill_int(&rng, &idx, 0, id_hi);
  apx_tilepack_backward_args a = APX_TILEPACK_BACKWARD_ARGS_INIT;
  a.grad_out = &g;
  a.idx = &idx;
  a.grad_features = &want;
  run_exact(what, APX_OP_TILEPACK_BACKWARD, &a, &a.grad_out, &a.idx, &a.grad_features, &want);
  tu_free(&g);
  tu_free(&idx);
  tu_free(&want);
}

static void tilepack_backward_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                                   int64_t gw, int64_t t, int64_t K) {
  tilepack_backward_ids(dt, it, B, C, gh, gw, t, K, -1);
}

START_TEST(test_tilepack_backward) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      tilepack_backward_case(float_dtypes[d], index_dtypes[i], 2, 3, 4, 6, 4, 9);
      tilepack_backward_case(float_dtypes[d], index_dtypes[i], 1, 64, 16, 16, 8, 64);
      tilepack_backward_case(float_dtypes[d], index_dtypes[i], 3, 2, 2, 3, 16, 20);
      tilepack_backward_case(float_dtypes[d], index_dtypes[i], 2, 5, 3, 3, 1, 7);
      tilepack_backward_case(float_dtypes[d], index_dtypes[i], 2, 3, 4, 4, 2, 0);
    }
}
END_TEST

/* The bucketing kernel's paths (backends/cuda/tilepack_backward.cu): K past
 * one block of 1024 ids (several chunks, every warp's turn) with ~90
 * repeats of each id, whose fp32 sums show any other order; every id the
 * same; K not a multiple of a warp; more tile ids than its shared memory
 * holds (the counts in the workspace); more batch rows than one grid (the
 * grid-stride loop over rows). */
START_TEST(test_tilepack_backward_buckets) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      apx_dtype dt = float_dtypes[d], it = index_dtypes[i];
      tilepack_backward_ids(dt, it, 2, 3, 8, 8, 2, 3000, 31);
      tilepack_backward_ids(dt, it, 2, 2, 4, 4, 4, 1500, 0);
      tilepack_backward_ids(dt, it, 3, 2, 5, 7, 2, 33, 34);
      tilepack_backward_ids(dt, it, 2, 1, 80, 80, 1, 5000, 6399);
      tilepack_backward_ids(dt, it, 1, 1, 100, 90, 1, 2049, 8999);
    }
  tilepack_backward_ids(APX_DTYPE_F32, APX_DTYPE_I32, 65537, 2, 1, 2, 1, 3, -1);
}
END_TEST

/* The one-launch form of a small index (B*K <= 1024,
 * backends/cuda/tilepack_backward.cu) and its switch-over: B*K = 1024
 * (one launch) and 1025 (the bucketing), every id in one tile row (the
 * band lists of the others empty), tiles of 16, a tile row of several
 * tiles with repeats, and more bands than one grid (the grid-stride loop). */
START_TEST(test_tilepack_backward_small) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      apx_dtype dt = float_dtypes[d], it = index_dtypes[i];
      tilepack_backward_ids(dt, it, 1, 2, 4, 8, 2, 1024, 31);
      tilepack_backward_ids(dt, it, 5, 2, 4, 8, 2, 205, 31);
      tilepack_backward_ids(dt, it, 4, 3, 6, 5, 8, 256, 4);
      tilepack_backward_ids(dt, it, 2, 3, 3, 4, 16, 40, -1);
    }
  tilepack_backward_ids(APX_DTYPE_F16, APX_DTYPE_I32, 1, 4100, 16, 2, 1, 20, -1);
}
END_TEST

/* grad_out and grad_features off 16-byte alignment (by 1 and 3 elements,
 * then each alone): the one-pixel-a-thread path where the 16-byte one
 * would otherwise run (t = 8), the cpu backend's bits, nothing written
 * outside grad_features. */
START_TEST(test_tilepack_backward_misaligned) {
  static const int64_t offs[][2] = {{1, 3}, {0, 1}, {3, 0}, {0, 0}};
  for (int d = 0; d < 3; d++)
    for (int f = 0; f < 4; f++) {
      apx_dtype dt = float_dtypes[d];
      const int64_t B = 2, C = 3, gh = 4, gw = 5, t = 8, K = 30;
      char what[160];
      snprintf(what, sizeof what, "tilepack_backward %s misaligned grad_out +%lld grad_features +%lld",
               apx_dtype_name(dt), (long long)offs[f][0], (long long)offs[f][1]);
      apx_tensor g = tu_host5(dt, B, K, C, t, t), idx = tu_host2(APX_DTYPE_I64, B, K);
      apx_tensor want = tu_host4(dt, B, C, gh * t, gw * t);
      fill_values(&g, 0);
      tu_fill_int(&rng, &idx, 0, gh * gw - 1);
      apx_tilepack_backward_args a = APX_TILEPACK_BACKWARD_ARGS_INIT;
      a.grad_out = &g;
      a.idx = &idx;
      a.grad_features = &want;
      CHECK_OK(apx_tilepack_backward(ctx, &a, &on_cpu), what);
      const int64_t n_g = apx_tensor_numel(&g), n_f = apx_tensor_numel(&want);
      int64_t len[2] = {n_g + offs[f][0] + 8, n_f + offs[f][1] + 8};
      apx_tensor gbuf = dev_alloc(ctx, dt, 1, &len[0]), fbuf = dev_alloc(ctx, dt, 1, &len[1]);
      dev_poison(ctx, &fbuf);
      apx_tensor dg = dev_view(&gbuf, offs[f][0], g.ndim, g.shape);
      apx_tensor dgf = dev_view(&fbuf, offs[f][1], want.ndim, want.shape);
      apx_tensor didx = to_dev(ctx, &idx);
      CHECK_OK(apx_tensor_copy(ctx, &dg, &g, NULL), what);
      a.grad_out = &dg;
      a.idx = &didx;
      a.grad_features = &dgf;
      CHECK_OK(apx_tilepack_backward(ctx, &a, &on_gpu), what);
      CHECK_OK(apx_sync(ctx, &on_gpu), what);
      apx_tensor got = to_host(ctx, &dgf);
      expect_exact(&got, &want, what);
      expect_untouched_around(ctx, &fbuf, offs[f][1], n_f, what);
      tu_free(&got);
      dev_free(ctx, &didx);
      dev_free(ctx, &gbuf);
      dev_free(ctx, &fbuf);
      tu_free(&g);
      tu_free(&idx);
      tu_free(&want);
    }
}
END_TEST

/* A bad index value in a call whose grad_out, index and output fields are
 * `fields`: validate = eager refuses it at once, validate = device reports
 * it at the next apx_sync, both with `message`. */
static void expect_bad_index(apx_op_id op, void *args, const apx_tensor **fields[3],
                             const apx_tensor *grad_out, const apx_tensor *index, int out_ndim,
                             const int64_t *out_shape, const char *message) {
  for (int mode = 0; mode < 2; mode++) {
    apx_context *c = mode ? ctx : ctx_eager;
    apx_tensor dg = to_dev(c, grad_out), dindex = to_dev(c, index);
    apx_tensor dout = dev_alloc(c, grad_out->dtype, out_ndim, out_shape);
    *fields[0] = &dg;
    *fields[1] = &dindex;
    *fields[2] = &dout;
    apx_status st = cc_call_op(c, op, args, &on_gpu);
    if (mode == 1) {
      ck_assert_int_eq(st, APX_OK);
      st = apx_sync(c, &on_gpu);
      ck_assert_int_eq(st, APX_ERR_DEVICE);
    } else {
      ck_assert_int_eq(st, APX_ERR_INVALID_ARG);
    }
    ck_assert_msg(strstr(apx_last_error(), message), "message [%s]", apx_last_error());
    dev_free(c, &dg);
    dev_free(c, &dindex);
    dev_free(c, &dout);
  }
}

/* idx[1][2] = [12] in a 3x4 grid */
START_TEST(test_tilepack_backward_bad_id) {
  apx_tensor g = tu_host5(APX_DTYPE_F32, 2, 3, 2, 4, 4), idx = tu_host2(APX_DTYPE_I64, 2, 3);
  fill_values(&g, 0);
  const int64_t ids[6] = {0, 1, 11, 4, 5, 12}, shape[4] = {2, 2, 12, 16};
  for (int64_t i = 0; i < 6; i++) set_index(&idx, i, ids[i]);
  apx_tilepack_backward_args a = APX_TILEPACK_BACKWARD_ARGS_INIT;
  const apx_tensor **fields[3] = {&a.grad_out, &a.idx, &a.grad_features};
  expect_bad_index(APX_OP_TILEPACK_BACKWARD, &a, fields, &g, &idx, 4, shape,
                   "tilepack_backward: idx[1][2] = [12] is outside [0, 11]");
  tu_free(&g);
  tu_free(&idx);
}
END_TEST

static void index_select_backward_case(apx_dtype dt, apx_dtype it, int64_t M, int64_t D,
                                       int64_t N) {
  char what[160];
  snprintf(what, sizeof what, "index_select_backward %s/%s M%lld D%lld N%lld",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)M, (long long)D, (long long)N);
  apx_tensor g = tu_host2(dt, N, D), index = tu_host1(it, N), want = tu_host2(dt, M, D);
  fill_data(&g);
  tu_fill_int(&rng, &index, 0, M > 2 ? M - 2 : M - 1); /* the last row unnamed */
  apx_index_select_backward_args a = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
  a.grad_out = &g;
  a.index = &index;
  a.grad_src = &want;
  run_exact(what, APX_OP_INDEX_SELECT_BACKWARD, &a, &a.grad_out, &a.index, &a.grad_src, &want);
  tu_free(&g);
  tu_free(&index);
  tu_free(&want);
}

/* Along dim of an ndim grad_src [.., M at dim, ..]. */
static void index_select_backward_nd_case(apx_dtype dt, apx_dtype it, int ndim,
                                          const int64_t *src_shape, int dim, int64_t N) {
  char what[160];
  snprintf(what, sizeof what, "index_select_backward %s/%s ndim %d dim %d N%lld",
           apx_dtype_name(dt), apx_dtype_name(it), ndim, dim, (long long)N);
  const int d = dim < 0 ? dim + ndim : dim;
  int64_t out_shape[APX_MAX_DIMS];
  memcpy(out_shape, src_shape, (size_t)ndim * sizeof(int64_t));
  out_shape[d] = N;
  apx_tensor g = tu_host(dt, ndim, out_shape), index = tu_host1(it, N);
  apx_tensor want = tu_host(dt, ndim, src_shape);
  fill_data(&g);
  tu_fill_int(&rng, &index, 0, src_shape[d] - 1);
  apx_index_select_backward_args a = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
  a.grad_out = &g;
  a.index = &index;
  a.grad_src = &want;
  a.dim = dim;
  run_exact(what, APX_OP_INDEX_SELECT_BACKWARD, &a, &a.grad_out, &a.index, &a.grad_src, &want);
  tu_free(&g);
  tu_free(&index);
  tu_free(&want);
}

START_TEST(test_index_select_backward) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      const int64_t s3[3] = {4, 6, 5}, s4[4] = {3, 2, 7, 33};
      index_select_backward_nd_case(data_dtypes[d], index_dtypes[i], 3, s3, 1, 20);
      index_select_backward_nd_case(data_dtypes[d], index_dtypes[i], 3, s3, -1, 9);
      index_select_backward_nd_case(data_dtypes[d], index_dtypes[i], 4, s4, 2, 15);
      index_select_backward_nd_case(data_dtypes[d], index_dtypes[i], 4, s4, 0, 0);
      index_select_backward_case(data_dtypes[d], index_dtypes[i], 13, 3, 21);
      index_select_backward_case(data_dtypes[d], index_dtypes[i], 64, 256, 1000);
      index_select_backward_case(data_dtypes[d], index_dtypes[i], 1, 5, 300);
      index_select_backward_case(data_dtypes[d], index_dtypes[i], 5, 9, 0);
    }
}
END_TEST

/* The one-launch form of a short index (backends/cuda/index_select_backward.cu:
 * at most 1024 entries, rows * max(entries, 32) <= 2^24) and its
 * switch-overs: 1024 entries (one launch) and 1025 (the sort), 16384 rows
 * of 1024 entries (one launch) and 20000 rows of 1000 (the sort), rows
 * wider than one pass of a warp (300 columns), and columns fewer than a
 * warp. */
START_TEST(test_index_select_backward_small) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      apx_dtype dt = data_dtypes[d], it = index_dtypes[i];
      index_select_backward_case(dt, it, 50, 40, 1024);
      index_select_backward_case(dt, it, 50, 40, 1025);
      index_select_backward_case(dt, it, 7, 300, 200);
      index_select_backward_case(dt, it, 3000, 5, 33);
    }
  index_select_backward_case(APX_DTYPE_F32, APX_DTYPE_I32, 16384, 2, 1024);
  index_select_backward_case(APX_DTYPE_F32, APX_DTYPE_I64, 20000, 2, 1000);
}
END_TEST

/* index[2] = [5] into 5 rows */
START_TEST(test_index_select_backward_bad_index) {
  apx_tensor g = tu_host2(APX_DTYPE_F32, 4, 3), index = tu_host1(APX_DTYPE_I32, 4);
  fill_values(&g, 0);
  const int64_t rows[4] = {0, 4, 5, 1}, shape[2] = {5, 3};
  for (int64_t i = 0; i < 4; i++) set_index(&index, i, rows[i]);
  apx_index_select_backward_args a = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
  const apx_tensor **fields[3] = {&a.grad_out, &a.index, &a.grad_src};
  expect_bad_index(APX_OP_INDEX_SELECT_BACKWARD, &a, fields, &g, &index, 2, shape,
                   "index_select_backward: index[2] = [5] is outside [0, 4]");
  tu_free(&g);
  tu_free(&index);
}
END_TEST

/* tileunpack_backward: both backends weigh a pixel by a * om^j (blend) or
 * [j = 0] (override) with om^j formed by j products from 1: the same bits,
 * for ids and overlapping origins, with and without levels. */
static void tileunpack_backward_case(apx_dtype dt, apx_dtype it, int blend, int use_origins,
                                     int use_levels, int64_t B, int64_t C, int64_t gh,
                                     int64_t gw, int64_t t, int64_t K) {
  char what[200];
  snprintf(what, sizeof what, "tileunpack_backward %s/%s %s%s%s B%lld C%lld t%lld K%lld",
           apx_dtype_name(dt), apx_dtype_name(it), blend ? "blend" : "override",
           use_origins ? " origins" : " ids", use_levels ? " levels" : "", (long long)B,
           (long long)C, (long long)t, (long long)K);
  const int64_t H = gh * t, W = gw * t;
  apx_tensor g = tu_host4(dt, B, C, H, W), idx = tu_host2(it, B, K);
  apx_tensor origins = tu_host3(it, B, K, 2), levels = tu_host2(it, B, K);
  apx_tensor want_base = tu_host4(dt, B, C, H, W), want_packed = tu_host5(dt, B, K, C, t, t);
  fill_values(&g, 0);
  tu_fill_int(&rng, &idx, 0, gh * gw - 1);
  for (int64_t i = 0; i < B * K; i++) {
    set_index(&origins, 2 * i, tu_int(&rng, 0, H - t));
    set_index(&origins, 2 * i + 1, tu_int(&rng, 0, W - t));
  }
  tu_fill_int(&rng, &levels, -2, 2);
  apx_tileunpack_backward_args a = APX_TILEUNPACK_BACKWARD_ARGS_INIT;
  a.grad_out = &g;
  a.idx = use_origins ? NULL : &idx;
  a.origins = use_origins ? &origins : NULL;
  a.levels = use_levels ? &levels : NULL;
  a.mode = blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
  a.blend_alpha = 0.3;
  a.tile = t;
  a.grad_base = &want_base;
  a.grad_packed = &want_packed;
  cc_case c = {what, APX_OP_TILEUNPACK_BACKWARD, &a,
               {&a.grad_out, &a.idx, &a.origins, &a.levels},
               {&a.grad_base, &a.grad_packed}, -1, 1};
  apx_tensor got[CC_MAX_OUTPUTS];
  cc_run(&c, got);
  expect_exact(&got[0], &want_base, what);
  expect_exact(&got[1], &want_packed, what);
  tu_free(&got[0]);
  tu_free(&got[1]);
  tu_free(&g);
  tu_free(&idx);
  tu_free(&origins);
  tu_free(&levels);
  tu_free(&want_base);
  tu_free(&want_packed);
}

START_TEST(test_tileunpack_backward) {
  for (int d = 0; d < 3; d++)
    for (int mode = 0; mode < 8; mode++) {
      const int blend = mode & 1, origins = (mode >> 1) & 1, levels = (mode >> 2) & 1;
      const apx_dtype it = index_dtypes[mode % 2];
      tileunpack_backward_case(float_dtypes[d], it, blend, origins, levels, 2, 3, 4, 6, 4, 9);
      tileunpack_backward_case(float_dtypes[d], it, blend, origins, levels, 1, 16, 16, 16, 8,
                               64);
      tileunpack_backward_case(float_dtypes[d], it, blend, origins, levels, 2, 2, 3, 3, 2, 0);
    }
}
END_TEST

/* The one-launch form of a small index (B*K <= 1024,
 * backends/cuda/tileunpack_backward.cu) and its switch-over, in every
 * mode: B*K = 1024 (one launch) and 1025 (the six-kernel path), channels
 * not a multiple of its 16-channel groups (21: a full group and a part;
 * 3, 9: a part), tiles of 1, 3 and 16, and 256-pixel blocks starting
 * inside a row (W 15: a map block counts only the tiles over its rows). */
START_TEST(test_tileunpack_backward_small) {
  for (int d = 0; d < 3; d++)
    for (int mode = 0; mode < 8; mode++) {
      const int blend = mode & 1, origins = (mode >> 1) & 1, levels = (mode >> 2) & 1;
      const apx_dtype dt = float_dtypes[d], it = index_dtypes[(mode >> 1) % 2];
      tileunpack_backward_case(dt, it, blend, origins, levels, 1, 3, 16, 16, 2, 1024);
      tileunpack_backward_case(dt, it, blend, origins, levels, 5, 3, 16, 16, 2, 205);
      tileunpack_backward_case(dt, it, blend, origins, levels, 2, 21, 5, 7, 1, 30);
      tileunpack_backward_case(dt, it, blend, origins, levels, 1, 9, 3, 2, 16, 12);
      tileunpack_backward_case(dt, it, blend, origins, levels, 2, 5, 9, 5, 3, 40);
    }
}
END_TEST

/* A tileunpack_backward call whose placements or levels are bad, under
 * validate = eager (refused at once) and validate = device (reported by
 * apx_sync), each with `message`. */
static void tileunpack_backward_rejected(const apx_tensor *idx, const apx_tensor *levels,
                                         int64_t C, int64_t gh, int64_t gw, int64_t t,
                                         const char *message) {
  const int64_t B = idx->shape[0], K = idx->shape[1];
  apx_tensor g = tu_host4(APX_DTYPE_F32, B, C, gh * t, gw * t);
  fill_values(&g, 0);
  const int64_t packed_shape[5] = {B, K, C, t, t};
  for (int mode = 0; mode < 2; mode++) {
    apx_context *c = mode ? ctx : ctx_eager;
    apx_tensor dg = to_dev(c, &g), didx = to_dev(c, idx);
    apx_tensor dlev = levels ? to_dev(c, levels) : didx;
    apx_tensor dbase = dev_alloc(c, APX_DTYPE_F32, 4, g.shape);
    apx_tensor dpacked = dev_alloc(c, APX_DTYPE_F32, 5, packed_shape);
    apx_tileunpack_backward_args a = APX_TILEUNPACK_BACKWARD_ARGS_INIT;
    a.grad_out = &dg;
    a.idx = &didx;
    a.levels = levels ? &dlev : NULL;
    a.tile = t;
    a.grad_base = &dbase;
    a.grad_packed = &dpacked;
    apx_status st = apx_tileunpack_backward(c, &a, &on_gpu);
    if (mode == 1) {
      ck_assert_int_eq(st, APX_OK);
      st = apx_sync(c, &on_gpu);
      ck_assert_int_eq(st, APX_ERR_DEVICE);
    } else {
      ck_assert_int_eq(st, APX_ERR_INVALID_ARG);
    }
    ck_assert_msg(strstr(apx_last_error(), message), "B%lld K%lld: message [%s], want [%s]",
                  (long long)B, (long long)K, apx_last_error(), message);
    dev_free(c, &dg);
    dev_free(c, &didx);
    if (levels) dev_free(c, &dlev);
    dev_free(c, &dbase);
    dev_free(c, &dpacked);
  }
  tu_free(&g);
}

/* A bad id, and levels one step past the int32 priority key, on the
 * one-launch form (B*K <= 1024: every block's own check) and on the
 * six-kernel path (a pre-pass). */
START_TEST(test_tileunpack_backward_bad) {
  static const int64_t sizes[2][2] = {{2, 9}, {5, 205}}; /* B, K */
  for (int v = 0; v < 2; v++) {
    const int64_t B = sizes[v][0], K = sizes[v][1], gh = 4, gw = 4, t = 2;
    apx_tensor idx = tu_host2(APX_DTYPE_I32, B, K), levels = tu_host2(APX_DTYPE_I32, B, K);
    tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    set_index(&idx, K + 5, gh * gw); /* idx[1][5] */
    tileunpack_backward_rejected(&idx, NULL, 3, gh, gw, t,
                                 "tileunpack_backward: idx[1][5] = [16] is outside [0, 15]");
    tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    fill_levels_at_limit(&levels, -7, 1);
    tileunpack_backward_rejected(&idx, &levels, 3, gh, gw, t, "tileunpack_backward: levels span");
    tu_free(&idx);
    tu_free(&levels);
  }
}
END_TEST

/* fused_pack_op_unpack_backward: grad_features within the parity bound of
 * the derivative's terms (docs/ops.md, Rounding and parity; the compiler
 * may contract vs*g + v*gs), the scalars' sums within it times the number
 * of terms (the planes' sums run in another order than the cpu backend's).
 * Features are kept away from the gate's kink, where a contracted
 * x*gs + gb could take the other side. */
static void fused_backward_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                                int64_t gw, int64_t t, int64_t K, int unique, int in_place) {
  char what[160];
  snprintf(what, sizeof what, "fused_pack_op_unpack_backward %s/%s B%lld C%lld t%lld K%lld%s%s",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)t,
           (long long)K, unique ? " unique" : "", in_place ? " in place" : "");
  const int64_t H = gh * t, W = gw * t, n = B * C * H * W;
  apx_tensor g = tu_host4(dt, B, C, H, W), x = tu_host4(dt, B, C, H, W);
  apx_tensor idx = tu_host2(it, B, K), want = tu_host4(dt, B, C, H, W);
  apx_tensor scalars = tu_host1(APX_DTYPE_F32, 4);
  const double vs = 1.5, vb = 0.25, gs = -0.75, gb = 0.125;
  fill_values(&g, 0);
  fill_values(&x, 0);
  for (int64_t i = 0; i < n; i++) { /* |x*gs + gb| >= 0.01 */
    double v = tu_get(&x, i), gate = v * gs + gb;
    if (fabs(gate) < 0.01) tu_set(&x, i, v + 0.05);
  }
  if (unique)
    fill_unique(&idx, gh * gw);
  else
    tu_fill_int(&rng, &idx, 0, gh * gw - 1);
  apx_fused_pack_op_unpack_backward_args a = APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;
  a.grad_out = &g;
  a.features = &x;
  a.idx = &idx;
  a.tile = t;
  a.value_scale = vs;
  a.value_bias = vb;
  a.gate_scale = gs;
  a.gate_bias = gb;
  a.require_unique = unique;
  a.grad_features = &want;
  a.grad_scalars = &scalars;
  cc_case c = {what, APX_OP_FUSED_PACK_OP_UNPACK_BACKWARD, &a,
               {&a.grad_out, &a.features, &a.idx}, {&a.grad_features, &a.grad_scalars},
               in_place ? 0 : -1, !in_place};
  apx_tensor got[CC_MAX_OUTPUTS];
  cc_run(&c, got);
  double *mag = malloc(sizeof(double) * (size_t)(n + 1));
  double scalar_mag[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    const double gv = fabs(tu_get(&g, i)), xv = fabs(tu_get(&x, i));
    const double value = xv * fabs(vs) + fabs(vb), gate = xv * fabs(gs) + fabs(gb);
    mag[i] = gv * (fabs(vs) * gate + value * fabs(gs));
    scalar_mag[0] += gv * xv * gate;
    scalar_mag[1] += gv * gate;
    scalar_mag[2] += gv * value * xv;
    scalar_mag[3] += gv * value;
  }
  expect_close(&got[0], &want, mag, 0, what);
  for (int s = 0; s < 4; s++) /* fp32 sums of up to n terms: n*2^-24 relative */
    scalar_mag[s] *= 1.0 + (double)n * 6e-8 / tol_of(APX_DTYPE_F32);
  expect_close(&got[1], &scalars, scalar_mag, 0, what);
  free(mag);
  tu_free(&got[0]);
  tu_free(&got[1]);
  tu_free(&g);
  tu_free(&x);
  tu_free(&idx);
  tu_free(&want);
  tu_free(&scalars);
}

START_TEST(test_fused_backward) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      fused_backward_case(float_dtypes[d], index_dtypes[i], 2, 3, 4, 6, 4, 9, 0, 0);
      fused_backward_case(float_dtypes[d], index_dtypes[i], 2, 3, 4, 6, 4, 9, 1, 0);
      fused_backward_case(float_dtypes[d], index_dtypes[i], 1, 64, 16, 16, 8, 64, 1, 0);
      fused_backward_case(float_dtypes[d], index_dtypes[i], 2, 2, 3, 3, 2, 0, 1, 0);
    }
}
END_TEST

/* The one-launch form (B*K <= 1024, at most 8192 tiles:
 * backends/cuda/fused_pack_op_unpack_backward.cu) and its switch-overs:
 * B*K = 1024 and 1025, 8281 tiles (the mask kernels), planes of several
 * 2048-pixel chunks, more than 1024 blocks (their sums in workspace), and
 * uniqueness over rows longer than the in-kernel check's 64 (a pre-pass). */
START_TEST(test_fused_backward_small) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      apx_dtype dt = float_dtypes[d], it = index_dtypes[i];
      fused_backward_case(dt, it, 1, 2, 32, 32, 1, 1024, 0, 0);
      fused_backward_case(dt, it, 5, 2, 16, 16, 1, 205, 0, 0);
      fused_backward_case(dt, it, 1, 2, 91, 91, 1, 50, 0, 0);
      fused_backward_case(dt, it, 2, 3, 16, 16, 4, 20, 1, 0);
      fused_backward_case(dt, it, 1, 520, 16, 16, 4, 10, 0, 0);
      fused_backward_case(dt, it, 2, 3, 16, 16, 2, 100, 1, 0);
      fused_backward_case(dt, it, 2, 3, 16, 16, 4, 20, 1, 1);
      fused_backward_case(dt, it, 2, 3, 16, 16, 2, 100, 1, 1);
    }
}
END_TEST

/* A bad id in place (grad_features = grad_out), validate = device: the
 * one-launch form (every block the check's verdict before any store) and
 * the mask kernels' path (a pre-pass) leave grad_out untouched, and
 * apx_sync names the entry. */
START_TEST(test_fused_backward_bad_id_in_place) {
  static const int64_t sizes[2][2] = {{2, 9}, {2, 600}}; /* B, K: B*K <= 1024, > 1024 */
  for (int v = 0; v < 2; v++) {
    const int64_t B = sizes[v][0], C = 3, K = sizes[v][1], gh = 40, gw = 40, t = 2;
    apx_tensor g = tu_host4(APX_DTYPE_F32, B, C, gh * t, gw * t);
    apx_tensor x = tu_host4(APX_DTYPE_F32, B, C, gh * t, gw * t);
    apx_tensor idx = tu_host2(APX_DTYPE_I32, B, K);
    fill_values(&g, 0);
    fill_values(&x, 0);
    tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    set_index(&idx, K + 5, gh * gw); /* idx[1][5] */
    apx_tensor dg = to_dev(ctx, &g), dx = to_dev(ctx, &x), didx = to_dev(ctx, &idx);
    apx_tensor ds = dev_alloc(ctx, APX_DTYPE_F32, 1, (const int64_t[]){4});
    apx_fused_pack_op_unpack_backward_args a = APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;
    a.grad_out = &dg;
    a.features = &dx;
    a.idx = &didx;
    a.tile = t;
    a.require_unique = 0; /* the ids repeat */
    a.grad_features = &dg;
    a.grad_scalars = &ds;
    ck_assert_int_eq(apx_fused_pack_op_unpack_backward(ctx, &a, &on_gpu), APX_OK);
    ck_assert_int_eq(apx_sync(ctx, &on_gpu), APX_ERR_DEVICE);
    ck_assert_msg(strstr(apx_last_error(), "idx[1][5] = [1600] is outside [0, 1599]"),
                  "message [%s]", apx_last_error());
    apx_tensor back = to_host(ctx, &dg);
    expect_exact(&back, &g, "fused_pack_op_unpack_backward in place, a bad id");
    tu_free(&back);
    dev_free(ctx, &dg);
    dev_free(ctx, &dx);
    dev_free(ctx, &didx);
    dev_free(ctx, &ds);
    tu_free(&g);
    tu_free(&x);
    tu_free(&idx);
  }
}
END_TEST

static void add_tests(Suite *s) {
  TCase *tc = cc_tcase(s, "tile_backward");
  tcase_add_test(tc, test_tilepack_backward);
  tcase_add_test(tc, test_tilepack_backward_buckets);
  tcase_add_test(tc, test_tilepack_backward_misaligned);
  tcase_add_test(tc, test_tilepack_backward_bad_id);
  tcase_add_test(tc, test_tilepack_backward_small);
  tcase_add_test(tc, test_index_select_backward);
  tcase_add_test(tc, test_index_select_backward_bad_index);
  tcase_add_test(tc, test_index_select_backward_small);
  tcase_add_test(tc, test_fused_backward);
  tcase_add_test(tc, test_fused_backward_small);
  tcase_add_test(tc, test_fused_backward_bad_id_in_place);
  tcase_add_test(tc, test_tileunpack_backward);
  tcase_add_test(tc, test_tileunpack_backward_small);
  tcase_add_test(tc, test_tileunpack_backward_bad);
}

int main(void) { return cc_main("cuda_tile_backward", add_tests); }
