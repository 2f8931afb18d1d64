/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's FF path (docs/ff_infer.md): each model piece of
 * backends/cpu/ff_cpu.h against the double-precision loops of ff_ref.c
 * (the bounds of docs/ops.md, Rounding and parity), then cpu_ff_infer, compiled into this
 * test with fake core services (weights from ff_ref_random_params, the
 * core's own routing), bit for bit against the composition of those pieces
 * written out plainly here: every dtype, odd shapes, no L0 tile, no L1
 * tile, proxies absent / [B,1,H,W] / [B,H,W] in any float dtype, outputs
 * poisoned before each of two calls, threads 1 vs 2, plain vs AVX2 1x1
 * conv. Last, apx_ff_infer through the public API on a real context. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apx_ff_route.h"
#include "apx_half.h"
#include "ff_cpu.h"
#include "ff_ref.h"
#include "testutil.h"

static const apx_dtype dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};

/* ---- fake core services ------------------------------------------------------- */

/* The test's weights "handle" is its apx_ff_params: the content of the
 * fake cache's object. */
typedef struct cache_entry {
  const void *object;
  uint64_t key;
  void *prepared, *state;
  void (*release)(void *, uint64_t, void *);
} cache_entry;
static cache_entry cache[16];
static int cache_used, cache_makes;

static apx_status fake_cache(void *core, const void *object, uint64_t key,
                             apx_status (*make)(void *, const void *, uint64_t, void **),
                             void (*release)(void *, uint64_t, void *), void *state,
                             void **prepared) {
  (void)core;
  for (int i = 0; i < cache_used; i++)
    if (cache[i].object == object && cache[i].key == key) {
      *prepared = cache[i].prepared;
      return APX_OK;
    }
  ck_assert_int_lt(cache_used, 16);
  void *p = NULL;
  apx_status st = make(state, object, key, &p);
  if (st != APX_OK)
    return st;
  cache_makes++;
  cache[cache_used++] = (cache_entry){object, key, p, state, release};
  *prepared = p;
  return APX_OK;
}

static void cache_clear(void) {
  for (int i = 0; i < cache_used; i++)
    cache[i].release(cache[i].state, cache[i].key, cache[i].prepared);
  cache_used = 0;
}

static const apx_core_services fake_svc = {
    .size = sizeof(apx_core_services),
    .set_error = tu_set_error,
    .validate_mode = APX_VALIDATE_EAGER,
    .cache = fake_cache,
};

static const apx_ff_weights *as_weights(const apx_ff_params *p) {
  return (const apx_ff_weights *)(const void *)p;
}

static void use_isa(const char *isa) {
  if (isa)
    setenv("APEXX_CPU_ISA", isa, 1);
  else
    unsetenv("APEXX_CPU_ISA");
}

/* ---- tolerance checks ------------------------------------------------------------ */

static double worst_ratio; /* largest |err| / bound seen, reported per test */

/* |got - want| <= tol + tol*mag (+ ulps storage ulps of want) elementwise */
static void check_close(const char *what, apx_dtype dt, const float *got, const double *want,
                        const double *mag, int64_t n, double ulps) {
  const double tol = ff_ref_tol(dt);
  for (int64_t i = 0; i < n; i++) {
    double bound = tol + tol * mag[i] + ulps * ff_ref_ulp(dt, want[i]);
    double err = fabs((double)got[i] - want[i]);
    if (err / bound > worst_ratio)
      worst_ratio = err / bound;
    ck_assert_msg(err <= bound, "%s (%s)[%lld]: got %.9g, reference %.9g (err %.3g > bound %.3g)",
                  what, apx_dtype_name(dt), (long long)i, got[i], want[i], err, bound);
  }
}

static void fill_frame(tu_rng *r, apx_dtype dt, float *v, int64_t n, double scale) {
  for (int64_t i = 0; i < n; i++)
    v[i] = cpu_ff_rnd(dt, (float)(scale * tu_normal(r)));
}

/* ---- pieces -------------------------------------------------------------------- */

START_TEST(test_tokens) {
  tu_rng r = {tu_seed() + 1};
  const int64_t C = 7;
  for (int d = 0; d < 3; d++)
    for (int64_t t = 1; t <= 16; t += 3) {
      const apx_dtype dt = dtypes[d];
      const int64_t n = t * t;
      float *tile = malloc((size_t)(C * n) * sizeof(float)), tok[7];
      double want[7], mag[7];
      fill_frame(&r, dt, tile, C * n, 2.0);
      cpu_ff_tokens(dt, tile, C, n, tok);
      ff_ref_tokens(dt, tile, C, n, want, mag);
      check_close("tokens", dt, tok, want, mag, C, 0);
      for (int64_t c = 0; c < C; c++)
        ck_assert_float_eq(tok[c], cpu_ff_rnd(dt, tok[c]));
      free(tile);
    }
}
END_TEST

/* Tokens with the values the scan's sanitiser handles. */
static void fill_tokens(tu_rng *r, apx_dtype dt, float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    int kind = (int)tu_int(r, 0, 19);
    double x = kind == 0   ? NAN
               : kind == 1 ? INFINITY
               : kind == 2 ? -INFINITY
               : kind == 3 ? 2e4 * (tu_int(r, 0, 1) ? 1 : -1)
                           : 3.0 * tu_normal(r);
    v[i] = cpu_ff_rnd(dt, (float)x);
  }
}

/* y [K][C] of cpu_ff_scan_forward equals apx_tilessm_scan's forward
 * output (cpu backend) on the same tokens and the level's forward vectors. */
static void check_scan_forward_op(const cpu_ff_level *lv, apx_dtype dt, const float *tok, int64_t K,
                                  int64_t C, const float *y) {
  apx_context *ctx = tu_open_cpu_threads(1);
  ck_assert_ptr_nonnull(ctx);
  apx_tensor tokens = tu_host3(dt, 1, K, C), out = tu_host3(dt, 1, K, C);
  apx_tensor vec[4] = {tu_host1(APX_DTYPE_F32, C), tu_host1(APX_DTYPE_F32, C),
                       tu_host1(APX_DTYPE_F32, C), tu_host1(APX_DTYPE_F32, C)};
  const float *src[4] = {lv->decay[0], lv->input_gain[0], lv->output_gain[0], lv->state_bias[0]};
  for (int64_t i = 0; i < K * C; i++)
    tu_set(&tokens, i, tok[i]);
  for (int j = 0; j < 4; j++)
    for (int64_t c = 0; c < C; c++)
      tu_set(&vec[j], c, src[j][c]);
  apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
  a.tokens = &tokens;
  a.decay = &vec[0];
  a.input_gain = &vec[1];
  a.output_gain = &vec[2];
  a.state_bias = &vec[3];
  a.direction = APX_SCAN_FORWARD;
  a.out = &out;
  static const apx_call on_cpu = {"cpu", NULL};
  ck_assert_msg(apx_tilessm_scan(ctx, &a, &on_cpu) == APX_OK, "tilessm_scan: %s", apx_last_error());
  for (int64_t i = 0; i < K * C; i++)
    ck_assert_msg((float)tu_get(&out, i) == y[i],
                  "scan forward (%s)[%lld]: %.9g, tilessm_scan %.9g", apx_dtype_name(dt),
                  (long long)i, y[i], tu_get(&out, i));
  tu_free(&tokens);
  tu_free(&out);
  for (int j = 0; j < 4; j++)
    tu_free(&vec[j]);
  apx_close(ctx);
}

START_TEST(test_scan_merge) {
  tu_rng r = {tu_seed() + 2};
  for (int d = 0; d < 3; d++) {
    const apx_dtype dt = dtypes[d];
    const int64_t C = 9, K = 37;
    apx_ff_params params = ff_ref_random_params(&r, C);
    cpu_ff_prepared *prep = NULL;
    ck_assert_int_eq(cpu_ff_prepare(&params, dt, &prep), APX_OK);
    for (int l = 0; l < 2; l++) {
      const cpu_ff_level *lv = &prep->level[l];
      const apx_ff_level_params *w = &params.level[l];
      /* the derived vectors (docs/ff_infer.md): one storage ulp more for the
       * transcendentals; decay also clamped as 6.A says */
      for (int s = 0; s < 2; s++)
        for (int64_t c = 0; c < C; c++) {
          double dec = ff_ref_decay(dt, w->scan_decay_logit[s][c]);
          dec = dec > 1.0 - 1e-6 ? (double)(1.0f - 1e-6f) : dec;
          double m = fabs(dec);
          check_close("decay", dt, &lv->decay[s][c], &dec, &m, 1, 1);
          ck_assert_float_eq(lv->one_minus_decay[s][c], 1.0f - lv->decay[s][c]);
          double ig = ff_ref_gain(dt, w->scan_input_gain_raw[s][c]), igm = fabs(ig);
          check_close("input_gain", dt, &lv->input_gain[s][c], &ig, &igm, 1, 1);
          double og = ff_ref_gain(dt, w->scan_output_gain_raw[s][c]), ogm = fabs(og);
          check_close("output_gain", dt, &lv->output_gain[s][c], &og, &ogm, 1, 1);
          ck_assert_float_eq(lv->state_bias[s][c], cpu_ff_rnd(dt, w->scan_state_bias[s][c]));
        }
      float tok[37 * 9], mixed[37 * 9];
      double want[37 * 9], mag[37 * 9];
      fill_tokens(&r, dt, tok, K * C);
      cpu_ff_scan_merge(lv, dt, tok, K, C, mixed);
      ff_ref_scan_vectors v = {{lv->decay[0], lv->decay[1]},
                               {lv->input_gain[0], lv->input_gain[1]},
                               {lv->output_gain[0], lv->output_gain[1]},
                               {lv->state_bias[0], lv->state_bias[1]},
                               lv->gate};
      ff_ref_scan_merge(&v, dt, tok, K, C, want, mag);
      check_close("scan+merge", dt, mixed, want, mag, K * C, 0);
      /* scan_mode forward: the forward stream alone, against the double
       * loop and bit for bit against tilessm_scan (docs/ops.md) forward
       * with the level's forward vectors */
      cpu_ff_scan_forward(lv, dt, tok, K, C, mixed);
      ff_ref_scan_forward(&v, dt, tok, K, C, want, mag);
      check_close("scan forward", dt, mixed, want, mag, K * C, 0);
      check_scan_forward_op(lv, dt, tok, K, C, mixed);
      /* one step, one channel written out: gate 0.5-ish EMA of one token */
      cpu_ff_scan_merge(lv, dt, tok, 0, C, mixed); /* K = 0 writes nothing */
    }
    cpu_ff_prepared_free(prep);
    ff_ref_free(&params);
  }
}
END_TEST

START_TEST(test_film) {
  tu_rng r = {tu_seed() + 3};
  for (int d = 0; d < 3; d++) {
    const apx_dtype dt = dtypes[d];
    const int64_t C = 33;
    apx_ff_params params = ff_ref_random_params(&r, C);
    cpu_ff_prepared *prep = NULL;
    ck_assert_int_eq(cpu_ff_prepare(&params, dt, &prep), APX_OK);
    for (int rep = 0; rep < 6; rep++)
      for (int l = 0; l < 2; l++) {
        float mixed[33], work[3 * 33], gamma[33], beta[33];
        double g[33], gm[33], b[33], bm[33];
        if (rep == 0)
          fill_tokens(&r, dt, mixed, C); /* NaN, inf, beyond 1e4 */
        else
          fill_frame(&r, dt, mixed, C, rep);
        cpu_ff_film(&prep->level[l], dt, C, mixed, work, gamma, beta);
        ff_ref_film(&params.level[l], dt, C, mixed, g, gm, b, bm);
        check_close("film gamma", dt, gamma, g, gm, C, 1);
        check_close("film beta", dt, beta, b, bm, C, 0);
      }
    cpu_ff_prepared_free(prep);
    ff_ref_free(&params);
  }
}
END_TEST

/* The refine block (steps 5-6) on random tiles: the plain, the AVX2 and
 * (where the CPU has it) the AVX-512 1x1 conv give the same bits, and all
 * stay within the bound of the double loop. Shapes cover the kernels'
 * 64- and 16-column strips and their scalar tails. */
START_TEST(test_refine) {
  tu_rng r = {tu_seed() + 4};
  static const int64_t shapes[][2] = {{128, 16}, {40, 8}, {5, 4}, {7, 6},
                                      {9, 10},   {3, 2},  {2, 1}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int d = 0; d < 3; d++) {
      const apx_dtype dt = dtypes[d];
      const int64_t C = shapes[si][0], t = shapes[si][1], N = t * t;
      if (C == 128 && dt != APX_DTYPE_F32)
        continue; /* the large shape once */
      apx_ff_params params = ff_ref_random_params(&r, C);
      cpu_ff_prepared *prep = NULL;
      ck_assert_int_eq(cpu_ff_prepare(&params, dt, &prep), APX_OK);
      float *tile = malloc((size_t)(C * N) * sizeof(float));
      float *gamma = malloc((size_t)C * 2 * sizeof(float)), *beta = gamma + C;
      float *scratch = malloc(cpu_ff_refine_scratch(C, t) * sizeof(float));
      float *r0 = malloc((size_t)(C * N) * 2 * sizeof(float)), *r1 = r0 + C * N;
      double *want = malloc((size_t)(C * N) * 2 * sizeof(double)), *mag = want + C * N;
      fill_frame(&r, dt, tile, C * N, 1.5);
      for (int64_t c = 0; c < C; c++) {
        gamma[c] = cpu_ff_rnd(dt, (float)tanh(tu_normal(&r)));
        beta[c] = cpu_ff_rnd(dt, (float)(0.5 * tu_normal(&r)));
      }
      const int l = (int)(si % 2);
      cpu_ff_refine(&prep->level[l], dt, C, t, tile, gamma, beta, scratch, 0, r0);
      for (int simd = 1; simd <= cpu_ff_simd(); simd++) {
        cpu_ff_refine(&prep->level[l], dt, C, t, tile, gamma, beta, scratch, simd, r1);
        ck_assert_msg(!memcmp(r0, r1, (size_t)(C * N) * sizeof(float)),
                      "refine C=%lld t=%lld %s: plain and %s 1x1 conv differ", (long long)C,
                      (long long)t, apx_dtype_name(dt), simd == 2 ? "AVX-512" : "AVX2");
      }
      ff_ref_refine(&params.level[l], dt, C, t, tile, gamma, beta, want, mag);
      check_close("refine", dt, r0, want, mag, C * N, 0);
      free(tile);
      free(gamma);
      free(scratch);
      free(r0);
      free(want);
      cpu_ff_prepared_free(prep);
      ff_ref_free(&params);
    }
  fprintf(stderr, "test_refine: worst |err|/bound %.3g\n", worst_ratio);
}
END_TEST

/* Step 8: proxies cast to the frame dtype then sanitised, alpha, fuse. */
START_TEST(test_gate) {
  tu_rng r = {tu_seed() + 5};
  for (int d = 0; d < 3; d++) {
    const apx_dtype dt = dtypes[d];
    apx_ff_params params = ff_ref_random_params(&r, 3);
    cpu_ff_prepared *prep = NULL;
    ck_assert_int_eq(cpu_ff_prepare(&params, dt, &prep), APX_OK);
    /* the cast comes first: 1e5 overflows f16 to inf, which becomes 1 */
    ck_assert_float_eq(cpu_ff_proxy(dt, 1e5f), dt == APX_DTYPE_F16 ? 1.0f : cpu_ff_rnd(dt, 1e5f));
    ck_assert_float_eq(cpu_ff_proxy(dt, NAN), 0.0f);
    ck_assert_float_eq(cpu_ff_proxy(dt, INFINITY), 1.0f);
    ck_assert_float_eq(cpu_ff_proxy(dt, -INFINITY), 0.0f);
    for (int i = 0; i < 2000; i++) {
      const int l = i % 2;
      const int absent = i % 3 == 0;
      float bp = absent ? 1.0f : cpu_ff_proxy(dt, (float)(2.0 * tu_uniform(&r) - 0.5));
      float up = absent ? 1.0f : cpu_ff_proxy(dt, (float)(2.0 * tu_uniform(&r) - 0.5));
      float a = cpu_ff_alpha(&prep->level[l], dt, bp, up);
      double mag, want = ff_ref_alpha(&params.level[l], dt, bp, up, &mag);
      check_close("alpha", dt, &a, &want, &mag, 1, 1);
      float x = cpu_ff_rnd(dt, (float)tu_normal(&r)), u = cpu_ff_rnd(dt, (float)tu_normal(&r));
      float h = cpu_ff_fuse(dt, x, u, a);
      double p = ff_ref_rnd(dt, (double)a * ff_ref_rnd(dt, (double)u - x));
      double hw = ff_ref_rnd(dt, x + p), hm = fabs(x) + fabs(p);
      check_close("fuse", dt, &h, &hw, &hm, 1, 0);
      ck_assert_float_eq(cpu_ff_fuse(dt, x, x, a), x); /* unselected pixels keep X */
    }
    cpu_ff_prepared_free(prep);
    ff_ref_free(&params);
  }
}
END_TEST

/* ---- the whole call against the composition of the pieces --------------------- */

typedef struct ff_case {
  int64_t B, C, H, W, t0;
  apx_dtype dt;
  int nesting, split;
  double b1, b2;
  int64_t kmax0, kmax1;
  int proxy_kind; /* 0 absent, 1 [B,1,H,W], 2 [B,H,W] */
  apx_dtype proxy_dt;
} ff_case;

/* docs/ff_infer.md, Options, as a case sets them (zero: the defaults). */
typedef struct ff_modes {
  apx_order_mode order;
  int blend; /* overlap_mode blend with blend_alpha */
  double blend_alpha;
  int scan_forward; /* scan_mode forward */
} ff_modes;

typedef struct ff_inputs {
  apx_tensor dense, util, split, boundary, uncertainty, heavy, detail, alpha;
  apx_ff_infer_args args;
} ff_inputs;

static void fill_proxy(tu_rng *r, const apx_tensor *t) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    int kind = (int)tu_int(r, 0, 49);
    double v = kind == 0 ? NAN : kind == 1 ? INFINITY : kind == 2 ? -INFINITY : tu_uniform(r);
    tu_set(t, i, v);
  }
}

static void make_inputs(tu_rng *r, const ff_case *fc, const apx_ff_params *params, ff_inputs *in) {
  const int64_t B = fc->B, C = fc->C, H = fc->H, W = fc->W;
  const int64_t G0 = (H / fc->t0) * (W / fc->t0);
  memset(in, 0, sizeof *in);
  in->dense = tu_host4(fc->dt, B, C, H, W);
  tu_fill_normal(r, &in->dense);
  in->util = tu_host2(APX_DTYPE_F32, B, G0);
  tu_fill_normal(r, &in->util);
  in->split = tu_host2(APX_DTYPE_F16, B, G0);
  tu_fill_normal(r, &in->split);
  if (fc->proxy_kind) {
    in->boundary = fc->proxy_kind == 1 ? tu_host4(fc->proxy_dt, B, 1, H, W)
                                       : tu_host3(fc->proxy_dt, B, H, W);
    in->uncertainty = tu_host4(APX_DTYPE_F32, B, 1, H, W);
    fill_proxy(r, &in->boundary);
    fill_proxy(r, &in->uncertainty);
  }
  in->heavy = tu_host4(fc->dt, B, C, H, W);
  in->detail = tu_host4(fc->dt, B, C, H, W);
  in->alpha = tu_host4(fc->dt, B, 1, H, W);
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = &in->dense;
  a.utilities = &in->util;
  a.split_utilities = fc->split ? &in->split : NULL;
  a.boundary = fc->proxy_kind ? &in->boundary : NULL;
  a.uncertainty = fc->proxy_kind ? &in->uncertainty : NULL;
  a.weights = as_weights(params);
  a.tile_l0 = fc->t0;
  a.tile_l1 = fc->t0 / 2;
  a.kmax_l0 = fc->kmax0;
  a.kmax_l1 = fc->kmax1;
  a.budget_b1 = fc->b1;
  a.budget_b2 = fc->b2;
  a.enable_nesting = fc->nesting;
  a.heavy = &in->heavy;
  a.detail = &in->detail;
  a.alpha = &in->alpha;
  in->args = a;
}

static void free_inputs(ff_inputs *in) {
  tu_free(&in->dense);
  tu_free(&in->util);
  tu_free(&in->split);
  if (in->boundary.data)
    tu_free(&in->boundary);
  if (in->uncertainty.data)
    tu_free(&in->uncertainty);
  tu_free(&in->heavy);
  tu_free(&in->detail);
  tu_free(&in->alpha);
}

static float *to_f32(const apx_tensor *t) {
  int64_t n = apx_tensor_numel(t);
  float *v = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++)
    v[i] = (float)tu_get(t, i);
  return v;
}

typedef struct route_buf {
  apx_ff_route route;
  int64_t *ints;
  double *dbl;
} route_buf;

static void route_of(const apx_ff_infer_args *a, route_buf *rb) {
  const int64_t B = a->dense->shape[0];
  rb->ints = calloc((size_t)(2 * B + 2 * B * a->kmax_l0 + B * a->kmax_l1), sizeof(int64_t));
  rb->route.l0_ordered = rb->route.l1_ordered = NULL; /* compose orders with apx_tile_order */
  rb->dbl = calloc((size_t)(2 * B), sizeof(double));
  rb->route.l0_count = rb->ints;
  rb->route.l1_count = rb->ints + B;
  rb->route.l0_greedy = rb->ints + 2 * B;
  rb->route.l0_hilbert = rb->route.l0_greedy + B * a->kmax_l0;
  rb->route.l1_hilbert = rb->route.l0_hilbert + B * a->kmax_l0;
  rb->route.b1_spent = rb->dbl;
  rb->route.b2_spent = rb->dbl + B;
  ck_assert_int_eq(apx_ff_route_host(a, &rb->route, tu_set_error), APX_OK);
}

/* The ops the composition borrows from the public API (each tested on its
 * own: test_tile_order, test_cpu_tileunpack): a cpu context of one thread. */
static apx_context *compose_ctx;
static const apx_call compose_call = {"cpu", NULL};

/* ids[b*stride + 0..count[b]) of every row re-ordered by apx_tile_order in
 * `mode` on a gh x gw grid (docs/ff_infer.md, Options), -1 padded. */
static int64_t *ordered_ids(const int64_t *ids, int64_t B, int64_t stride, const int64_t *count,
                            int64_t gh, int64_t gw, apx_order_mode mode) {
  int64_t *out = malloc((size_t)(B * stride + 1) * sizeof(int64_t));
  for (int64_t i = 0; i < B * stride; i++)
    out[i] = -1;
  for (int64_t b = 0; b < B; b++) {
    if (count[b] == 0)
      continue;
    apx_tensor in =
        apx_tensor_host((void *)(ids + b * stride), APX_DTYPE_I64, 1, (int64_t[]){count[b]});
    apx_tensor row = apx_tensor_host(out + b * stride, APX_DTYPE_I64, 1, (int64_t[]){count[b]});
    apx_tile_order_args order = {&in, gh, gw, mode, &row};
    ck_assert_msg(apx_tile_order(compose_ctx, &order) == APX_OK, "tile_order: %s",
                  apx_last_error());
  }
  return out;
}

/* One level written out plainly: the tiles of ids (in that order) packed,
 * their tokens scanned in scan_mode's direction, each refined, then U =
 * apx_tileunpack(X, r, ids) in overlap_mode with blend_alpha, then H =
 * fuse(X, U) with the level's alpha. */
static void compose_level(const cpu_ff_level *lv, apx_dtype dt, const apx_ff_infer_args *a,
                          int64_t B, int64_t C, int64_t H, int64_t W, int64_t t, const float *X,
                          const int64_t *ids, int64_t stride, const int64_t *count, float *out,
                          float *alpha) {
  const int64_t N = t * t, gw = W / t, HW = H * W;
  float *U = malloc((size_t)(B * C * HW) * sizeof(float));
  memcpy(U, X, (size_t)(B * C * HW) * sizeof(float));
  for (int64_t b = 0; b < B; b++) {
    const int64_t K = count[b];
    float *P = malloc((size_t)(K * C * N + 4 * K * C + 3 * C + 1) * sizeof(float));
    float *tok = P + K * C * N, *mixed = tok + K * C, *gamma = mixed + K * C;
    float *beta = gamma + K * C, *work = beta + K * C;
    float *scratch = malloc(cpu_ff_refine_scratch(C, t) * sizeof(float));
    apx_tensor base = tu_host4(dt, 1, C, H, W), packed = tu_host5(dt, 1, K, C, t, t),
               idx = tu_host2(APX_DTYPE_I64, 1, K);
    for (int64_t i = 0; i < C * HW; i++)
      tu_set(&base, i, X[b * C * HW + i]);
    for (int64_t k = 0; k < K; k++) {
      const int64_t id = ids[b * stride + k], y0 = id / gw * t, x0 = id % gw * t;
      tu_set(&idx, k, (double)id);
      for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < t; y++)
          for (int64_t x = 0; x < t; x++)
            P[(k * C + c) * N + y * t + x] = X[((b * C + c) * H + y0 + y) * W + x0 + x];
      cpu_ff_tokens(dt, P + k * C * N, C, N, tok + k * C);
    }
    if (a->scan_mode == APX_SCAN_FORWARD)
      cpu_ff_scan_forward(lv, dt, tok, K, C, mixed);
    else
      cpu_ff_scan_merge(lv, dt, tok, K, C, mixed);
    for (int64_t k = 0; k < K; k++) {
      float *r = P + k * C * N;
      cpu_ff_film(lv, dt, C, mixed + k * C, work, gamma + k * C, beta + k * C);
      cpu_ff_refine(lv, dt, C, t, r, gamma + k * C, beta + k * C, scratch, 0, r);
      for (int64_t i = 0; i < C * N; i++)
        tu_set(&packed, k * C * N + i, r[i]);
    }
    if (K > 0) {
      apx_tileunpack_args unpack = APX_TILEUNPACK_ARGS_INIT;
      unpack.base = unpack.out = &base;
      unpack.packed = &packed;
      unpack.idx = &idx;
      unpack.mode = a->overlap_mode;
      unpack.blend_alpha = a->blend_alpha;
      ck_assert_msg(apx_tileunpack(compose_ctx, &unpack, &compose_call) == APX_OK, "tileunpack: %s",
                    apx_last_error());
      for (int64_t i = 0; i < C * HW; i++)
        U[b * C * HW + i] = (float)tu_get(&base, i);
    }
    tu_free(&base);
    tu_free(&packed);
    tu_free(&idx);
    free(P);
    free(scratch);
  }
  for (int64_t i = 0; i < B * HW; i++) {
    float bp = a->boundary ? cpu_ff_proxy(dt, (float)tu_get(a->boundary, i)) : 1.0f;
    float up = a->uncertainty ? cpu_ff_proxy(dt, (float)tu_get(a->uncertainty, i)) : 1.0f;
    alpha[i] = cpu_ff_alpha(lv, dt, bp, up);
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < HW; i++) {
        int64_t e = (b * C + c) * HW + i;
        out[e] = cpu_ff_fuse(dt, X[e], U[e], alpha[b * HW + i]);
      }
  free(U);
}

typedef struct composed {
  float *heavy, *detail, *alpha, *heavy_l0, *alpha0;
  route_buf rb;
} composed;

static void compose(const apx_ff_params *params, const apx_ff_infer_args *a, composed *out) {
  const apx_dtype dt = a->dense->dtype;
  const int64_t B = a->dense->shape[0], C = a->dense->shape[1], H = a->dense->shape[2],
                W = a->dense->shape[3], HW = H * W;
  cpu_ff_prepared *prep = NULL;
  ck_assert_int_eq(cpu_ff_prepare(params, dt, &prep), APX_OK);
  route_of(a, &out->rb);
  const apx_ff_route *rt = &out->rb.route;
  compose_ctx = tu_open_cpu_threads(1);
  ck_assert_ptr_nonnull(compose_ctx);
  const int64_t gh0 = H / a->tile_l0, gw0 = W / a->tile_l0;
  /* docs/ff_infer.md, Options: the greedy L0 list and the Hilbert L1 list,
   * each in order_mode's order */
  int64_t *ids0 = ordered_ids(rt->l0_greedy, B, a->kmax_l0, rt->l0_count, gh0, gw0, a->order_mode);
  int64_t *ids1 =
      ordered_ids(rt->l1_hilbert, B, a->kmax_l1, rt->l1_count, 2 * gh0, 2 * gw0, a->order_mode);
  if (a->order_mode == APX_ORDER_HILBERT) /* the frame's lists before the options */
    ck_assert(!memcmp(ids0, rt->l0_hilbert, (size_t)(B * a->kmax_l0) * sizeof(int64_t)));
  float *dense = to_f32(a->dense);
  out->heavy_l0 = malloc((size_t)(B * C * HW) * sizeof(float));
  out->heavy = malloc((size_t)(B * C * HW) * sizeof(float));
  out->detail = malloc((size_t)(B * C * HW) * sizeof(float));
  out->alpha0 = malloc((size_t)(B * HW) * sizeof(float));
  out->alpha = malloc((size_t)(B * HW) * sizeof(float));
  float *h1 = malloc((size_t)(B * C * HW) * sizeof(float));
  float *alpha1 = malloc((size_t)(B * HW) * sizeof(float));
  compose_level(&prep->level[0], dt, a, B, C, H, W, a->tile_l0, dense, ids0, a->kmax_l0,
                rt->l0_count, out->heavy_l0, out->alpha0);
  compose_level(&prep->level[1], dt, a, B, C, H, W, a->tile_l1, out->heavy_l0, ids1, a->kmax_l1,
                rt->l1_count, h1, alpha1);
  free(ids0);
  free(ids1);
  apx_close(compose_ctx);
  compose_ctx = NULL;
  for (int64_t b = 0; b < B; b++) {
    const int with_l1 = rt->l1_count[b] > 0;
    for (int64_t i = b * C * HW; i < (b + 1) * C * HW; i++) {
      out->heavy[i] = with_l1 ? h1[i] : out->heavy_l0[i];
      out->detail[i] = cpu_ff_rnd(dt, with_l1 ? h1[i] - out->heavy_l0[i] : out->heavy_l0[i] - dense[i]);
    }
    memcpy(out->alpha + b * HW, (with_l1 ? alpha1 : out->alpha0) + b * HW,
           (size_t)HW * sizeof(float));
  }
  free(h1);
  free(alpha1);
  free(dense);
  cpu_ff_prepared_free(prep);
}

static void composed_free(composed *c) {
  free(c->heavy);
  free(c->detail);
  free(c->alpha);
  free(c->heavy_l0);
  free(c->alpha0);
  free(c->rb.ints);
  free(c->rb.dbl);
}

/* Bit equality of a tensor with fp32 values of its dtype. */
static void check_equal(const char *what, const apx_tensor *t, const float *want) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    float got = (float)tu_get(t, i);
    ck_assert_msg(got == want[i] || (isnan(got) && isnan(want[i])),
                  "%s (%s)[%lld]: cpu_ff_infer %.9g, composition %.9g", what,
                  apx_dtype_name(t->dtype), (long long)i, got, want[i]);
  }
}

static apx_status run_backend(const ff_inputs *in, int threads) {
  cpu_state st = {.svc = &fake_svc, .threads = threads};
  tu_poison(&in->heavy);
  tu_poison(&in->detail);
  tu_poison(&in->alpha);
  apx_status s = cpu_ff_infer(&st, &in->args, NULL);
  ck_assert_msg(s == APX_OK, "cpu_ff_infer: %s", tu_error_text);
  cpu_ff_work_free(&st);
  return s;
}

/* Run one case with the options of `modes` (NULL: the defaults): the
 * backend (threads 1 and 2, portable, AVX2 and native kernels, each on
 * poisoned outputs) equals the composition bit for bit. The options touch
 * no kernel the ISA picks, so a case with them runs two of the six
 * (threads 1 portable, threads 2 native). */
static void run_case_modes(tu_rng *r, const ff_case *fc, const ff_modes *modes, composed *keep) {
  apx_ff_params params = ff_ref_random_params(r, fc->C);
  ff_inputs in;
  make_inputs(r, fc, &params, &in);
  if (modes) {
    in.args.order_mode = modes->order;
    if (modes->blend) {
      in.args.overlap_mode = APX_OVERLAP_BLEND;
      in.args.blend_alpha = modes->blend_alpha;
    }
    if (modes->scan_forward)
      in.args.scan_mode = APX_SCAN_FORWARD;
  }
  composed want;
  compose(&params, &in.args, &want);
  static const char *const isas[] = {"portable", "avx2", NULL};
  for (int threads = 1; threads <= 2; threads++)
    for (int isa = 0; isa < 3; isa++) {
      if (modes && isa != (threads == 1 ? 0 : 2))
        continue;
      use_isa(isas[isa]);
      /* two threads: each batch row a chunk of its own */
      cpu_ff_chunk_bytes = threads == 2 ? 1 : CPU_FF_CHUNK_BYTES;
      run_backend(&in, threads);
      check_equal("heavy", &in.heavy, want.heavy);
      check_equal("detail", &in.detail, want.detail);
      check_equal("alpha", &in.alpha, want.alpha);
    }
  use_isa(NULL);
  cpu_ff_chunk_bytes = CPU_FF_CHUNK_BYTES;
  cache_clear();
  if (keep)
    *keep = want;
  else
    composed_free(&want);
  free_inputs(&in);
  ff_ref_free(&params);
}

static void run_case(tu_rng *r, const ff_case *fc, composed *keep) {
  run_case_modes(r, fc, NULL, keep);
}

START_TEST(test_infer_composition) {
  tu_rng r = {tu_seed() + 6};
  const ff_case cases[] = {
      /* B, C, H, W, t0, dt, nesting, split, b1, b2, kmax0, kmax1, proxy, proxy dt */
      {1, 16, 64, 64, 16, APX_DTYPE_F32, 1, 1, 6, 3, 12, 16, 1, APX_DTYPE_F32},
      {2, 5, 32, 48, 8, APX_DTYPE_F32, 1, 1, 4, 2, 10, 9, 2, APX_DTYPE_F16},
      {2, 5, 32, 48, 8, APX_DTYPE_F16, 1, 1, 4, 2, 10, 9, 0, APX_DTYPE_F32},
      {2, 5, 32, 48, 8, APX_DTYPE_BF16, 1, 1, 4, 2, 10, 9, 1, APX_DTYPE_BF16},
      {1, 12, 48, 32, 16, APX_DTYPE_F16, 1, 1, 3, 1, 6, 24, 2, APX_DTYPE_BF16},
      {3, 3, 24, 24, 6, APX_DTYPE_BF16, 1, 1, 20, 20, 16, 64, 1, APX_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&r, &cases[i], NULL);
}
END_TEST

static const char *const order_names[] = {"hilbert", "l2r", "r2l", "u2d", "d2u", "multi_direction"};

/* docs/ff_infer.md, Options: all 24 combinations of order_mode (6),
 * overlap_mode (override, blend) and scan_mode (bidirectional, forward) in
 * every dtype, bit for bit against the composition (apx_tile_order for the
 * order, the forward piece or the scan and merge, apx_tileunpack in the
 * mode); each combination other than the defaults changes heavy, on the
 * same inputs (the options are not ignored). The 4x4 L0 grid makes
 * multi_direction's keys tie. */
START_TEST(test_infer_modes) {
  static const double alphas[] = {0.3, 0.75, 0.5, 0.0625};
  int combos = 0;
  for (int d = 0; d < 3; d++) {
    const tu_rng start = {tu_seed() + 12 + (uint64_t)d};
    float *heavy_default = NULL;
    for (int combo = 0; combo < 24; combo++) {
      const ff_case fc = {2, 5, 32, 32, 8, dtypes[d], 1, 1, 7, 3, 10, 12, 1, APX_DTYPE_F32};
      const ff_modes m = {(apx_order_mode)(combo % 6), combo / 6 % 2, alphas[combo % 4],
                          combo / 12};
      tu_rng r = start; /* the same weights and inputs for every combination */
      composed want;
      run_case_modes(&r, &fc, &m, &want);
      const size_t bytes = (size_t)(fc.B * fc.C * fc.H * fc.W) * sizeof(float);
      if (combo == 0) {
        heavy_default = malloc(bytes);
        memcpy(heavy_default, want.heavy, bytes);
      } else {
        ck_assert_msg(memcmp(heavy_default, want.heavy, bytes) != 0,
                      "%s: order %s, %s, scan %s: heavy equals the default frame's",
                      apx_dtype_name(fc.dt), order_names[m.order], m.blend ? "blend" : "override",
                      m.scan_forward ? "forward" : "bidirectional");
      }
      composed_free(&want);
      combos++;
    }
    free(heavy_default);
  }
  ck_assert_int_eq(combos, 72);
}
END_TEST

/* blend_alpha in blend mode: 0, 1 and values between, every dtype, against
 * the composition; alpha 0 keeps every level's X (heavy = dense, detail =
 * 0), alpha 1 is the override frame bit for bit (finite values). */
START_TEST(test_infer_blend_alpha) {
  static const double alphas[] = {0.0, 1.0, 0.5, 0.125, 0.9, 1.0 / 3.0};
  for (int d = 0; d < 3; d++) {
    const tu_rng start = {tu_seed() + 20 + (uint64_t)d};
    ff_case fc = {2, 6, 32, 48, 8, dtypes[d], 1, 1, 6, 3, 9, 16, 2, APX_DTYPE_F16};
    composed over;
    tu_rng r = start;
    run_case(&r, &fc, &over);
    const int64_t n = fc.B * fc.C * fc.H * fc.W;
    for (size_t i = 0; i < sizeof alphas / sizeof alphas[0]; i++) {
      const ff_modes m = {i < 2 ? APX_ORDER_HILBERT : (apx_order_mode)(i % 6), 1, alphas[i], 0};
      r = start;
      composed want;
      run_case_modes(&r, &fc, &m, &want);
      if (alphas[i] == 0.0) {
        r = start;
        apx_ff_params params = ff_ref_random_params(&r, fc.C);
        ff_inputs in;
        make_inputs(&r, &fc, &params, &in);
        check_equal("heavy (blend_alpha 0)", &in.dense, want.heavy);
        for (int64_t e = 0; e < n; e++)
          ck_assert_msg(want.detail[e] == 0.0f, "detail[%lld] = %g", (long long)e, want.detail[e]);
        free_inputs(&in);
        ff_ref_free(&params);
      }
      if (alphas[i] == 1.0) {
        ck_assert(!memcmp(want.heavy, over.heavy, (size_t)n * sizeof(float)));
        ck_assert(!memcmp(want.detail, over.detail, (size_t)n * sizeof(float)));
      }
      composed_free(&want);
    }
    composed_free(&over);
  }
}
END_TEST

/* b1 = 0: no L0 tile, so no L1 tile: heavy = dense, detail = 0, alpha =
 * level 0's alpha, for finite dense. */
START_TEST(test_infer_no_l0_tile) {
  tu_rng r = {tu_seed() + 7};
  for (int d = 0; d < 3; d++) {
    ff_case fc = {2, 4, 16, 32, 8, dtypes[d], 1, 1, 0.0, 4, 8, 16, 1, APX_DTYPE_F16};
    apx_ff_params params = ff_ref_random_params(&r, fc.C);
    ff_inputs in;
    make_inputs(&r, &fc, &params, &in);
    run_backend(&in, 2);
    const int64_t n = apx_tensor_numel(&in.dense), HW = fc.H * fc.W;
    ck_assert(tu_bytes_equal(&in.heavy, &in.dense));
    for (int64_t i = 0; i < n; i++)
      ck_assert_msg(tu_get(&in.detail, i) == 0.0, "detail[%lld] = %g", (long long)i,
                    tu_get(&in.detail, i));
    for (int64_t i = 0; i < fc.B * HW; i++) {
      double mag, bp = cpu_ff_proxy(fc.dt, (float)tu_get(&in.boundary, i));
      double up = cpu_ff_proxy(fc.dt, (float)tu_get(&in.uncertainty, i));
      double want = ff_ref_alpha(&params.level[0], fc.dt, bp, up, &mag);
      float got = (float)tu_get(&in.alpha, i);
      check_close("alpha (no L0 tile)", fc.dt, &got, &want, &mag, 1, 1);
    }
    cache_clear();
    free_inputs(&in);
    ff_ref_free(&params);
  }
}
END_TEST

/* Nesting off: no L1 tile, heavy = heavy_l0 and detail = heavy_l0 - dense,
 * so level 1's weights have no effect; with nesting on they do. */
START_TEST(test_infer_no_l1_tile) {
  tu_rng r = {tu_seed() + 8};
  for (int d = 0; d < 3; d++) {
    ff_case fc = {2, 6, 32, 32, 8, dtypes[d], 0, 1, 5, 3, 10, 16, 0, APX_DTYPE_F32};
    composed want;
    run_case(&r, &fc, &want);
    for (int64_t b = 0; b < fc.B; b++)
      ck_assert_int_eq(want.rb.route.l1_count[b], 0);
    ck_assert(!memcmp(want.heavy, want.heavy_l0,
                      (size_t)(fc.B * fc.C * fc.H * fc.W) * sizeof(float)));
    ck_assert(!memcmp(want.alpha, want.alpha0, (size_t)(fc.B * fc.H * fc.W) * sizeof(float)));
    composed_free(&want);

    for (int nesting = 0; nesting < 2; nesting++) {
      fc.nesting = nesting;
      apx_ff_params params = ff_ref_random_params(&r, fc.C);
      ff_inputs in;
      make_inputs(&r, &fc, &params, &in);
      run_backend(&in, 1);
      apx_tensor heavy = tu_clone(&in.heavy);
      /* other level-1 weights */
      float *pw = (float *)params.level[1].pw_bias;
      for (int64_t o = 0; o < 2 * fc.C; o++)
        pw[o] += 0.5f;
      params.level[1].gate_bias += 1.0f;
      cache_clear();
      run_backend(&in, 1);
      ck_assert_int_eq(tu_bytes_equal(&heavy, &in.heavy), !nesting);
      tu_free(&heavy);
      cache_clear();
      free_inputs(&in);
      ff_ref_free(&params);
    }
  }
}
END_TEST

/* Repeated calls give the same bits; the prepared weights are made once
 * per dtype; another set of weights gives other outputs. */
START_TEST(test_infer_repeat_and_weights) {
  tu_rng r = {tu_seed() + 9};
  ff_case fc = {1, 8, 32, 32, 8, APX_DTYPE_F32, 1, 1, 5, 3, 10, 16, 1, APX_DTYPE_F32};
  apx_ff_params params = ff_ref_random_params(&r, fc.C), other = ff_ref_random_params(&r, fc.C);
  ff_inputs in;
  make_inputs(&r, &fc, &params, &in);
  cache_makes = 0;
  run_backend(&in, 2);
  apx_tensor heavy = tu_clone(&in.heavy), detail = tu_clone(&in.detail);
  run_backend(&in, 2);
  ck_assert(tu_bytes_equal(&heavy, &in.heavy));
  ck_assert(tu_bytes_equal(&detail, &in.detail));
  ck_assert_int_eq(cache_makes, 1);
  in.args.weights = as_weights(&other);
  run_backend(&in, 2);
  ck_assert(!tu_bytes_equal(&heavy, &in.heavy));
  ck_assert_int_eq(cache_makes, 2);
  tu_free(&heavy);
  tu_free(&detail);
  cache_clear();
  free_inputs(&in);
  ff_ref_free(&params);
  ff_ref_free(&other);
}
END_TEST

/* The stats arrays are the route's. */
START_TEST(test_infer_stats) {
  tu_rng r = {tu_seed() + 10};
  ff_case fc = {2, 4, 32, 32, 8, APX_DTYPE_F32, 1, 1, 5, 3, 10, 16, 0, APX_DTYPE_F32};
  apx_ff_params params = ff_ref_random_params(&r, fc.C);
  ff_inputs in;
  make_inputs(&r, &fc, &params, &in);
  int64_t sel0[2], sel1[2], ids0[2 * 10], ids1[2 * 16];
  double b1[2], b2[2];
  apx_ff_stats stats = {sel0, sel1, b1, b2, ids0, ids1};
  in.args.stats = &stats;
  run_backend(&in, 2);
  route_buf rb;
  route_of(&in.args, &rb);
  for (int b = 0; b < 2; b++) {
    ck_assert_int_eq(sel0[b], rb.route.l0_count[b]);
    ck_assert_int_eq(sel1[b], rb.route.l1_count[b]);
    ck_assert(b1[b] == rb.route.b1_spent[b] && b2[b] == rb.route.b2_spent[b]);
  }
  ck_assert(!memcmp(ids0, rb.route.l0_greedy, sizeof ids0));
  ck_assert(!memcmp(ids1, rb.route.l1_hilbert, sizeof ids1));
  ck_assert_int_gt(sel1[0] + sel1[1], 0);
  free(rb.ints);
  free(rb.dbl);
  cache_clear();
  free_inputs(&in);
  ff_ref_free(&params);
}
END_TEST

/* o: the inputs of in with outputs of their own (copies of in's). */
static void with_own_outputs(const ff_inputs *in, ff_inputs *o) {
  *o = *in;
  o->heavy = tu_clone(&in->heavy);
  o->detail = tu_clone(&in->detail);
  o->alpha = tu_clone(&in->alpha);
  o->args.heavy = &o->heavy;
  o->args.detail = &o->detail;
  o->args.alpha = &o->alpha;
}

static int outputs_equal(const ff_inputs *a, const ff_inputs *b) {
  return tu_bytes_equal(&a->heavy, &b->heavy) && tu_bytes_equal(&a->detail, &b->detail) &&
         tu_bytes_equal(&a->alpha, &b->alpha);
}

static void free_outputs(ff_inputs *o) {
  tu_free(&o->heavy);
  tu_free(&o->detail);
  tu_free(&o->alpha);
}

typedef struct infer_job {
  cpu_state *st;
  const ff_inputs *in, *want;
  ff_inputs out;
  int rounds, failed, unequal;
} infer_job;

/* rounds calls on the shared state, each compared with the single call's
 * bytes (no ck_assert off the test's thread: counted, checked after join) */
static void *infer_rounds(void *arg) {
  infer_job *j = arg;
  for (int i = 0; i < j->rounds; i++) {
    tu_poison(&j->out.heavy);
    tu_poison(&j->out.detail);
    tu_poison(&j->out.alpha);
    if (cpu_ff_infer(j->st, &j->out.args, NULL) != APX_OK)
      j->failed++;
    else if (!outputs_equal(&j->out, j->want))
      j->unequal++;
  }
  return NULL;
}

/* The work block kept in the state between calls (cpu_state.ff_work):
 * calls on one state, a batch after a smaller one (the block grows), a
 * smaller after it (the block is reused as it is), each batch twice, and
 * batches in chunks of one row and of all rows, all bit for bit the bytes of
 * a single call on a fresh state; then two threads calling on one state at
 * once, each result again equal to its single call's. */
START_TEST(test_infer_kept_block) {
  tu_rng r = {tu_seed() + 12};
  const ff_case big = {3, 8, 32, 48, 8, APX_DTYPE_F16, 1, 1, 5, 3, 10, 16, 1, APX_DTYPE_BF16};
  ff_case small = big;
  small.B = 1;
  small.dt = APX_DTYPE_F32;
  apx_ff_params params = ff_ref_random_params(&r, big.C);
  ff_inputs in_big, in_small;
  make_inputs(&r, &big, &params, &in_big);
  make_inputs(&r, &small, &params, &in_small);
  /* the single calls, each on a fresh state (fills the fake cache first:
   * it is not made for concurrent use) */
  run_backend(&in_big, 2);
  ff_inputs want_big, want_small;
  with_own_outputs(&in_big, &want_big);
  run_backend(&in_small, 2);
  with_own_outputs(&in_small, &want_small);

  cpu_state st = {.svc = &fake_svc, .threads = 2};
  const ff_inputs *order[] = {&in_small, &in_big, &in_big, &in_small, &in_small, &in_big};
  const struct cpu_ff_work *kept = NULL;
  size_t kept_bytes = 0; /* kept's, read while it was live */
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const int is_big = order[i] == &in_big;
    /* the big batch's second call: one row a chunk */
    cpu_ff_chunk_bytes = i == 2 ? 1 : CPU_FF_CHUNK_BYTES;
    tu_poison(&order[i]->heavy);
    tu_poison(&order[i]->detail);
    tu_poison(&order[i]->alpha);
    ck_assert_int_eq(cpu_ff_infer(&st, &order[i]->args, NULL), APX_OK);
    ck_assert_msg(outputs_equal(order[i], is_big ? &want_big : &want_small),
                  "call %zu (%s batch) differs from its single call", i, is_big ? "big" : "small");
    const struct cpu_ff_work *now = atomic_load(&st.ff_work);
    ck_assert_ptr_nonnull(now);
    if (i == 1)
      ck_assert_uint_gt(now->bytes, kept_bytes); /* grown for the larger batch */
    if (i >= 2)
      ck_assert_ptr_eq(now, kept); /* large enough: reused as it is */
    kept = now;
    kept_bytes = now->bytes;
  }
  cpu_ff_chunk_bytes = CPU_FF_CHUNK_BYTES;

  /* two threads at once on one state, each with its own outputs */
  infer_job jobs[2] = {{.st = &st, .in = &in_big, .want = &want_big, .rounds = 8},
                       {.st = &st, .in = &in_small, .want = &want_small, .rounds = 8}};
  pthread_t tid[2];
  for (int k = 0; k < 2; k++) {
    with_own_outputs(jobs[k].in, &jobs[k].out);
    ck_assert_int_eq(pthread_create(&tid[k], NULL, infer_rounds, &jobs[k]), 0);
  }
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(pthread_join(tid[k], NULL), 0);
    ck_assert_msg(jobs[k].failed == 0 && jobs[k].unequal == 0,
                  "thread %d: %d calls failed, %d differ from the single call", k, jobs[k].failed,
                  jobs[k].unequal);
    free_outputs(&jobs[k].out);
  }
  ck_assert_ptr_nonnull(atomic_load(&st.ff_work));
  cpu_ff_work_free(&st);
  ck_assert_ptr_null(atomic_load(&st.ff_work));
  cpu_ff_work_free(&st); /* nothing kept: a no-op */

  free_outputs(&want_big);
  free_outputs(&want_small);
  cache_clear();
  free_inputs(&in_big);
  free_inputs(&in_small);
  ff_ref_free(&params);
}
END_TEST

/* A services table too old for the cache service is refused. */
START_TEST(test_infer_old_services) {
  apx_core_services old = fake_svc;
  old.size = (uint32_t)offsetof(apx_core_services, cache);
  cpu_state st = {.svc = &old, .threads = 1};
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  ck_assert_int_eq(cpu_ff_infer(&st, &a, NULL), APX_ERR_UNSUPPORTED);
}
END_TEST

/* ---- through the public API ------------------------------------------------------ */

static apx_status public_call(apx_context *ctx, const apx_ff_weights *w, ff_inputs *in) {
  static const apx_call cpu_call = {"cpu", NULL};
  in->args.weights = w;
  tu_poison(&in->heavy);
  tu_poison(&in->detail);
  tu_poison(&in->alpha);
  return apx_ff_infer(ctx, &in->args, &cpu_call);
}

START_TEST(test_public_api) {
  tu_rng r = {tu_seed() + 11};
  apx_context *ctx = tu_open(), *one = tu_open_cpu_threads(1), *two = tu_open_cpu_threads(2);
  ck_assert(ctx && one && two);
  apx_ff_weights *w1 = NULL, *w2 = NULL, *w1_one = NULL, *w1_two = NULL;
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 8, 1, &w1), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(ctx, 8, 2, &w2), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(one, 8, 1, &w1_one), APX_OK);
  ck_assert_int_eq(apx_ff_weights_seeded(two, 8, 1, &w1_two), APX_OK);
  for (int d = 0; d < 3; d++) {
    ff_case fc = {2, 8, 32, 48, 8, dtypes[d], 1, 1, 5, 3, 10, 16, 2, APX_DTYPE_BF16};
    ff_inputs in;
    make_inputs(&r, &fc, NULL, &in);
    ck_assert_msg(public_call(ctx, w1, &in) == APX_OK, "apx_ff_infer: %s", apx_last_error());
    apx_tensor heavy = tu_clone(&in.heavy), detail = tu_clone(&in.detail),
               alpha = tu_clone(&in.alpha);
    ck_assert(!tu_is_poisoned(&in.heavy) && !tu_is_poisoned(&in.alpha));
    ck_assert_int_eq(public_call(ctx, w1, &in), APX_OK);
    ck_assert(tu_bytes_equal(&heavy, &in.heavy) && tu_bytes_equal(&detail, &in.detail) &&
              tu_bytes_equal(&alpha, &in.alpha));
    ck_assert_int_eq(public_call(one, w1_one, &in), APX_OK);
    ck_assert(tu_bytes_equal(&heavy, &in.heavy) && tu_bytes_equal(&detail, &in.detail));
    ck_assert_int_eq(public_call(two, w1_two, &in), APX_OK);
    ck_assert(tu_bytes_equal(&heavy, &in.heavy) && tu_bytes_equal(&detail, &in.detail));
    ck_assert_int_eq(public_call(ctx, w2, &in), APX_OK);
    ck_assert(!tu_bytes_equal(&heavy, &in.heavy));
    /* no L0 tile: heavy = dense, detail = 0 */
    in.args.budget_b1 = 0.0;
    ck_assert_int_eq(public_call(ctx, w1, &in), APX_OK);
    ck_assert(tu_bytes_equal(&in.heavy, &in.dense));
    for (int64_t i = 0; i < apx_tensor_numel(&in.detail); i++)
      ck_assert(tu_get(&in.detail, i) == 0.0);
    tu_free(&heavy);
    tu_free(&detail);
    tu_free(&alpha);
    free_inputs(&in);
  }
  apx_ff_weights_free(ctx, w1);
  apx_ff_weights_free(ctx, w2);
  apx_ff_weights_free(one, w1_one);
  apx_ff_weights_free(two, w1_two);
  apx_close(ctx);
  apx_close(one);
  apx_close(two);
}
END_TEST

static Suite *cpu_ff_suite(void) {
  Suite *s = suite_create("cpu_ff");
  TCase *tc = tcase_create("pieces");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_tokens);
  tcase_add_test(tc, test_scan_merge);
  tcase_add_test(tc, test_film);
  tcase_add_test(tc, test_refine);
  tcase_add_test(tc, test_gate);
  suite_add_tcase(s, tc);
  TCase *tc2 = tcase_create("infer");
  tcase_set_timeout(tc2, 120);
  tcase_add_test(tc2, test_infer_composition);
  tcase_add_test(tc2, test_infer_modes);
  tcase_add_test(tc2, test_infer_blend_alpha);
  tcase_add_test(tc2, test_infer_no_l0_tile);
  tcase_add_test(tc2, test_infer_no_l1_tile);
  tcase_add_test(tc2, test_infer_repeat_and_weights);
  tcase_add_test(tc2, test_infer_stats);
  tcase_add_test(tc2, test_infer_kept_block);
  tcase_add_test(tc2, test_infer_old_services);
  tcase_add_test(tc2, test_public_api);
  suite_add_tcase(s, tc2);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(cpu_ff_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
