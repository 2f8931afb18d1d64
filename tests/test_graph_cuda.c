/* SPDX-License-Identifier: Apache-2.0 */
/* Graph capture on the cuda backend (docs/graph.md): a captured sequence of
 * every op replays bit for bit what the same calls give when made eagerly,
 * on every replay, reading the inputs' contents at replay time; capture
 * runs nothing; refused calls (apx_sync, device allocation, validate =
 * eager index checks) leave the capture intact; a bad device index met in a replay comes back
 * from the next apx_sync. Skipped (exit 77, the reason on stdout) where the
 * cuda backend cannot run. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_case.h"

enum { B = 2, C = 16, H = 32, W = 32, T = 8, K = 5, S = 64, M = 512, N = 100 };
#define TILES ((H / T) * (W / T))

/* The device tensors of the sequence: inputs, then the outputs. */
enum {
  IN_FEATURES, IN_DETAIL, IN_IDX, IN_BOUNDARY, IN_UNCERTAINTY, IN_TOKENS, IN_DECAY, IN_GAIN_IN,
  IN_GAIN_OUT, IN_BIAS, IN_SRC, IN_INDEX, IN_ROWS, IN_COUNT,
  OUT_PACKED = IN_COUNT, OUT_UNPACKED, OUT_FUSED, OUT_ALPHA, OUT_FUSE, OUT_SCAN, OUT_GATHER,
  OUT_SELECT, OUT_SCATTER, OUT_GRAD, T_COUNT
};

typedef struct seq {
  apx_tensor t[T_COUNT];
} seq;

static apx_tensor host_input(int i) {
  apx_tensor h;
  switch (i) {
  case IN_FEATURES:
  case IN_DETAIL:
    h = tu_host4(APX_DTYPE_F16, B, C, H, W);
    break;
  case IN_IDX:
    h = tu_host2(APX_DTYPE_I32, B, K);
    fill_unique(&h, TILES);
    return h;
  case IN_BOUNDARY:
  case IN_UNCERTAINTY:
    h = tu_host4(APX_DTYPE_F16, B, 1, H, W);
    tu_fill_uniform(&rng, &h, 0.0, 1.0);
    return h;
  case IN_TOKENS:
    h = tu_host3(APX_DTYPE_F32, B, S, C);
    break;
  case IN_DECAY:
  case IN_GAIN_IN:
  case IN_GAIN_OUT:
  case IN_BIAS:
    h = tu_host1(APX_DTYPE_F32, C);
    tu_fill_uniform(&rng, &h, 0.1, 0.9);
    return h;
  case IN_SRC:
    h = tu_host2(APX_DTYPE_F32, M, C);
    break;
  case IN_INDEX:
    h = tu_host2(APX_DTYPE_I64, N, C);
    tu_fill_int(&rng, &h, 0, M - 1);
    return h;
  default: /* IN_ROWS */
    h = tu_host1(APX_DTYPE_I64, N);
    tu_fill_int(&rng, &h, 0, M - 1);
    return h;
  }
  fill_values(&h, 0);
  return h;
}

static void seq_alloc(seq *q) {
  for (int i = 0; i < IN_COUNT; i++) {
    apx_tensor h = host_input(i);
    q->t[i] = to_dev(ctx, &h);
    tu_free(&h);
  }
  const int64_t map[4] = {B, C, H, W}, packed[5] = {B, K, C, T, T}, plane[4] = {B, 1, H, W};
  const int64_t tokens[3] = {B, S, C}, rows[2] = {N, C}, table[2] = {M, C};
  q->t[OUT_PACKED] = dev_alloc(ctx, APX_DTYPE_F16, 5, packed);
  q->t[OUT_UNPACKED] = dev_alloc(ctx, APX_DTYPE_F16, 4, map);
  q->t[OUT_FUSED] = dev_alloc(ctx, APX_DTYPE_F16, 4, map);
  q->t[OUT_ALPHA] = dev_alloc(ctx, APX_DTYPE_F16, 4, plane);
  q->t[OUT_FUSE] = dev_alloc(ctx, APX_DTYPE_F16, 4, map);
  q->t[OUT_SCAN] = dev_alloc(ctx, APX_DTYPE_F32, 3, tokens);
  q->t[OUT_GATHER] = dev_alloc(ctx, APX_DTYPE_F32, 2, rows);
  q->t[OUT_SELECT] = dev_alloc(ctx, APX_DTYPE_F32, 2, rows);
  q->t[OUT_SCATTER] = dev_alloc(ctx, APX_DTYPE_F32, 2, table);
  q->t[OUT_GRAD] = dev_alloc(ctx, APX_DTYPE_F32, 2, table);
}

static void seq_free(seq *q) {
  for (int i = 0; i < T_COUNT; i++) dev_free(ctx, &q->t[i]);
}

static void poison_outputs(const seq *q) {
  for (int i = OUT_PACKED; i < T_COUNT; i++) dev_poison(ctx, &q->t[i]);
}

/* Every op once, in an order where later calls read earlier outputs. */
static apx_status seq_run(apx_context *c, const seq *q, const apx_call *call) {
  const apx_tensor *t = q->t;
  apx_status st;
  apx_tilepack_args pack = APX_TILEPACK_ARGS_INIT;
  pack.features = &t[IN_FEATURES], pack.idx = &t[IN_IDX], pack.tile = T;
  pack.out = &t[OUT_PACKED];
  if ((st = apx_tilepack(c, &pack, call)) != APX_OK) return st;
  apx_tileunpack_args un = APX_TILEUNPACK_ARGS_INIT;
  un.base = &t[IN_DETAIL], un.packed = &t[OUT_PACKED], un.idx = &t[IN_IDX];
  un.mode = APX_OVERLAP_BLEND, un.blend_alpha = 0.25, un.out = &t[OUT_UNPACKED];
  if ((st = apx_tileunpack(c, &un, call)) != APX_OK) return st;
  apx_fused_pack_op_unpack_args fu = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
  fu.features = &t[IN_FEATURES], fu.idx = &t[IN_IDX], fu.tile = T;
  fu.value_scale = 1.1, fu.gate_bias = 0.2, fu.out = &t[OUT_FUSED];
  if ((st = apx_fused_pack_op_unpack(c, &fu, call)) != APX_OK) return st;
  apx_fusiongate_alpha_args al = APX_FUSIONGATE_ALPHA_ARGS_INIT;
  al.boundary = &t[IN_BOUNDARY], al.uncertainty = &t[IN_UNCERTAINTY], al.out = &t[OUT_ALPHA];
  if ((st = apx_fusiongate_alpha(c, &al, call)) != APX_OK) return st;
  apx_fusiongate_fuse_args fz = APX_FUSIONGATE_FUSE_ARGS_INIT;
  fz.base = &t[OUT_UNPACKED], fz.detail = &t[OUT_FUSED], fz.alpha = &t[OUT_ALPHA];
  fz.out = &t[OUT_FUSE];
  if ((st = apx_fusiongate_fuse(c, &fz, call)) != APX_OK) return st;
  apx_tilessm_scan_args sc = APX_TILESSM_SCAN_ARGS_INIT;
  sc.tokens = &t[IN_TOKENS], sc.decay = &t[IN_DECAY], sc.input_gain = &t[IN_GAIN_IN];
  sc.output_gain = &t[IN_GAIN_OUT], sc.state_bias = &t[IN_BIAS];
  sc.direction = APX_SCAN_BIDIRECTIONAL, sc.out = &t[OUT_SCAN];
  if ((st = apx_tilessm_scan(c, &sc, call)) != APX_OK) return st;
  apx_gather_args ga = APX_GATHER_ARGS_INIT;
  ga.src = &t[IN_SRC], ga.index = &t[IN_INDEX], ga.out = &t[OUT_GATHER];
  if ((st = apx_gather(c, &ga, call)) != APX_OK) return st;
  apx_index_select_args is = APX_INDEX_SELECT_ARGS_INIT;
  is.src = &t[IN_SRC], is.index = &t[IN_ROWS], is.out = &t[OUT_SELECT];
  if ((st = apx_index_select(c, &is, call)) != APX_OK) return st;
  apx_scatter_add_args sa = APX_SCATTER_ADD_ARGS_INIT;
  sa.self = &t[IN_SRC], sa.index = &t[IN_INDEX], sa.src = &t[OUT_GATHER];
  sa.out = &t[OUT_SCATTER];
  if ((st = apx_scatter_add(c, &sa, call)) != APX_OK) return st;
  apx_gather_backward_args gb = APX_GATHER_BACKWARD_ARGS_INIT;
  gb.grad_out = &t[OUT_SELECT], gb.index = &t[IN_INDEX], gb.grad_src = &t[OUT_GRAD];
  return apx_gather_backward(c, &gb, call);
}

static const char *const out_names[T_COUNT] = {
    [OUT_PACKED] = "tilepack",       [OUT_UNPACKED] = "tileunpack",
    [OUT_FUSED] = "fused_pack_op_unpack", [OUT_ALPHA] = "fusiongate_alpha",
    [OUT_FUSE] = "fusiongate_fuse",  [OUT_SCAN] = "tilessm_scan",
    [OUT_GATHER] = "gather",         [OUT_SELECT] = "index_select",
    [OUT_SCATTER] = "scatter_add",   [OUT_GRAD] = "gather_backward"};

static void outputs_home(const seq *q, apx_tensor home[T_COUNT]) {
  for (int i = OUT_PACKED; i < T_COUNT; i++) home[i] = to_host(ctx, &q->t[i]);
}

static void expect_outputs(const seq *q, apx_tensor want[T_COUNT], const char *when) {
  for (int i = OUT_PACKED; i < T_COUNT; i++) {
    apx_tensor got = to_host(ctx, &q->t[i]);
    char what[128];
    snprintf(what, sizeof what, "%s: %s", when, out_names[i]);
    expect_exact(&got, &want[i], what);
    tu_free(&got);
  }
}

START_TEST(replay_equals_eager) {
  seq q;
  seq_alloc(&q);
  poison_outputs(&q);
  CHECK_OK(seq_run(ctx, &q, &on_gpu), "eager sequence");
  CHECK_OK(apx_sync(ctx, &on_gpu), "eager sync");
  apx_tensor eager[T_COUNT];
  outputs_home(&q, eager);

  poison_outputs(&q);
  apx_graph *g = NULL;
  CHECK_OK(apx_graph_begin(ctx, &on_gpu, &g), "graph_begin");
  const apx_call *gc = apx_graph_call(g);
  ck_assert_str_eq(gc->backend, "cuda");
  ck_assert_ptr_nonnull(gc->stream);
  CHECK_OK(seq_run(ctx, &q, gc), "captured sequence");
  /* refused inside the capture, which goes on */
  ck_assert_int_eq(apx_sync(ctx, gc), APX_ERR_INVALID_ARG);
  ck_assert_int_eq(apx_sync(ctx, NULL), APX_ERR_INVALID_ARG);
  const int64_t one[1] = {1};
  apx_tensor extra;
  ck_assert_int_eq(apx_tensor_alloc(ctx, APX_DEVICE_CUDA, 0, APX_DTYPE_F32, 1, one, &extra),
                   APX_ERR_INVALID_ARG);
  ck_assert_msg(strstr(apx_last_error(), "allocate before apx_graph_begin") != NULL,
                "message: %s", apx_last_error());
  ck_assert_int_eq(apx_tensor_free(ctx, &q.t[OUT_GRAD]), APX_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(q.t[OUT_GRAD].data);
  CHECK_OK(apx_graph_end(ctx, g), "graph_end");
  for (int i = OUT_PACKED; i < T_COUNT; i++)
    ck_assert_msg(dev_is_poisoned(ctx, &q.t[i]), "capture ran %s", out_names[i]);
  for (int r = 0; r < 3; r++) {
    poison_outputs(&q);
    CHECK_OK(apx_graph_replay(ctx, g, NULL), "replay");
    CHECK_OK(apx_sync(ctx, NULL), "replay sync");
    expect_outputs(&q, eager, r == 0 ? "first replay" : "later replay");
  }

  /* a replay reads the inputs as they are now */
  apx_tensor h = host_input(IN_FEATURES);
  CHECK_OK(apx_tensor_copy(ctx, &q.t[IN_FEATURES], &h, NULL), "new features");
  tu_free(&h);
  for (int i = OUT_PACKED; i < T_COUNT; i++) tu_free(&eager[i]);
  CHECK_OK(seq_run(ctx, &q, &on_gpu), "eager sequence, new features");
  CHECK_OK(apx_sync(ctx, &on_gpu), "eager sync");
  outputs_home(&q, eager);
  poison_outputs(&q);
  CHECK_OK(apx_graph_replay(ctx, g, NULL), "replay, new features");
  CHECK_OK(apx_sync(ctx, NULL), "replay sync");
  expect_outputs(&q, eager, "replay after new features");

  apx_graph_free(ctx, g);
  for (int i = OUT_PACKED; i < T_COUNT; i++) tu_free(&eager[i]);
  seq_free(&q);
}
END_TEST

START_TEST(eager_mode_refuses_index_checks) {
  const int64_t map[4] = {B, C, H, W}, packed[5] = {B, K, C, T, T};
  apx_tensor hf = host_input(IN_FEATURES), hi = host_input(IN_IDX);
  apx_tensor f = to_dev(ctx_eager, &hf), idx = to_dev(ctx_eager, &hi);
  apx_tensor out = dev_alloc(ctx_eager, APX_DTYPE_F16, 5, packed);
  apx_tensor sum = dev_alloc(ctx_eager, APX_DTYPE_F16, 4, map);
  apx_tensor ha = host_input(IN_BOUNDARY);
  apx_tensor alpha = to_dev(ctx_eager, &ha); /* device memory before the capture */
  apx_graph *g = NULL;
  CHECK_OK(apx_graph_begin(ctx_eager, &on_gpu, &g), "graph_begin");
  apx_tilepack_args pack = APX_TILEPACK_ARGS_INIT;
  pack.features = &f, pack.idx = &idx, pack.tile = T, pack.out = &out;
  ck_assert_int_eq(apx_tilepack(ctx_eager, &pack, apx_graph_call(g)), APX_ERR_INVALID_ARG);
  ck_assert_msg(strstr(apx_last_error(), "validate = eager") != NULL, "message: %s",
                apx_last_error());
  /* an op without indices waits for nothing under eager: captured */
  apx_fusiongate_fuse_args fz = APX_FUSIONGATE_FUSE_ARGS_INIT;
  fz.base = &f, fz.detail = &f, fz.alpha = &alpha, fz.out = &sum;
  CHECK_OK(apx_fusiongate_fuse(ctx_eager, &fz, apx_graph_call(g)), "captured fuse");
  CHECK_OK(apx_graph_end(ctx_eager, g), "graph_end after a refusal");
  dev_poison(ctx_eager, &sum);
  CHECK_OK(apx_graph_replay(ctx_eager, g, NULL), "replay");
  CHECK_OK(apx_sync(ctx_eager, NULL), "sync");
  apx_tensor replayed = to_host(ctx_eager, &sum);
  CHECK_OK(apx_fusiongate_fuse(ctx_eager, &fz, &on_gpu), "eager fuse");
  apx_tensor eager = to_host(ctx_eager, &sum);
  expect_exact(&replayed, &eager, "fusiongate_fuse replayed under validate = eager");
  apx_graph_free(ctx_eager, g);
  tu_free(&replayed), tu_free(&eager), tu_free(&hf), tu_free(&hi), tu_free(&ha);
  dev_free(ctx_eager, &f), dev_free(ctx_eager, &idx), dev_free(ctx_eager, &out);
  dev_free(ctx_eager, &sum), dev_free(ctx_eager, &alpha);
}
END_TEST

START_TEST(replayed_bad_index_reported_at_sync) {
  const int64_t packed[5] = {B, K, C, T, T};
  apx_tensor hf = host_input(IN_FEATURES), hi = host_input(IN_IDX);
  apx_tensor f = to_dev(ctx, &hf), idx = to_dev(ctx, &hi);
  apx_tensor out = dev_alloc(ctx, APX_DTYPE_F16, 5, packed);
  apx_graph *g = NULL;
  CHECK_OK(apx_graph_begin(ctx, &on_gpu, &g), "graph_begin");
  apx_tilepack_args pack = APX_TILEPACK_ARGS_INIT;
  pack.features = &f, pack.idx = &idx, pack.tile = T, pack.out = &out;
  CHECK_OK(apx_tilepack(ctx, &pack, apx_graph_call(g)), "captured tilepack");
  CHECK_OK(apx_graph_end(ctx, g), "graph_end");
  CHECK_OK(apx_graph_replay(ctx, g, NULL), "good replay");
  CHECK_OK(apx_sync(ctx, NULL), "good replay's sync");
  apx_tensor bad = tu_clone(&hi);
  set_index(&bad, 3, TILES + 7);
  CHECK_OK(apx_tensor_copy(ctx, &idx, &bad, NULL), "bad id in");
  CHECK_OK(apx_graph_replay(ctx, g, NULL), "bad replay");
  apx_status st = apx_sync(ctx, NULL);
  ck_assert_msg(st == APX_ERR_DEVICE, "sync after a bad replay: %s: %s", apx_status_name(st),
                apx_last_error());
  ck_assert_msg(strstr(apx_last_error(), "tilepack") != NULL, "message: %s", apx_last_error());
  CHECK_OK(apx_tensor_copy(ctx, &idx, &hi, NULL), "good ids back");
  CHECK_OK(apx_graph_replay(ctx, g, NULL), "replay after the error");
  CHECK_OK(apx_sync(ctx, NULL), "its sync");
  apx_graph_free(ctx, g);
  tu_free(&bad), tu_free(&hf), tu_free(&hi);
  dev_free(ctx, &f), dev_free(ctx, &idx), dev_free(ctx, &out);
}
END_TEST

static void add_tests(Suite *s) {
  TCase *tc = cc_tcase(s, "graph");
  tcase_add_test(tc, replay_equals_eager);
  tcase_add_test(tc, eager_mode_refuses_index_checks);
  tcase_add_test(tc, replayed_bad_index_reported_at_sync);
}

int main(void) { return cc_main("graph_cuda", add_tests); }
