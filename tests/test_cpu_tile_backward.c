/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's backward ops (docs/ops.md: tilepack_backward,
 * tileunpack_backward, fused_pack_op_unpack_backward, index_select_backward)
 * against plain float64 loops of their math written here, through the public
 * API with the cpu backend forced: random shapes, every float dtype x both
 * index dtypes, repeated ids, overlapping origins, levels (negative ones
 * too) with and without assume_priority_sorted, both unpack modes with
 * blend_alpha 0, 1 and random. Tolerances are docs/ops.md, Rounding and
 * parity's (a copy is compared bit for bit). Each case runs twice with
 * poisoned outputs and on 1 and 2 threads: the results must be the same
 * bits (deterministic). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const apx_call cpu_call = {"cpu", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};

static double tolerance(apx_dtype dt) {
  return dt == APX_DTYPE_F32 ? 1e-5 : dt == APX_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

static void set_index(const apx_tensor *t, int64_t i, int64_t v) {
  if (t->dtype == APX_DTYPE_I64)
    ((int64_t *)t->data)[i] = v;
  else
    ((int32_t *)t->data)[i] = (int32_t)v;
}

static int64_t get_index(const apx_tensor *t, int64_t i) {
  return t->dtype == APX_DTYPE_I64 ? ((int64_t *)t->data)[i] : ((int32_t *)t->data)[i];
}

/* v rounded to dt (a store and a load through a one-element tensor). */
static double round_to(apx_dtype dt, double v) {
  apx_tensor one = tu_host1(dt, 1);
  tu_set(&one, 0, v);
  double r = tu_get(&one, 0);
  tu_free(&one);
  return r;
}

/* |got - truth| <= tol + tol*mag for every element (docs/ops.md, parity). */
static void expect_close(const apx_tensor *got, const double *truth, const double *mag,
                         double rtol, const char *what) {
  const double tol = tolerance(got->dtype);
  for (int64_t i = 0; i < apx_tensor_numel(got); i++) {
    double g = tu_get(got, i), bound = tol + (rtol > 0 ? rtol : tol) * mag[i];
    ck_assert_msg(fabs(g - truth[i]) <= bound || (isnan(g) && isnan(truth[i])),
                  "%s: element %lld is %.9g, want %.9g (bound %.3g)", what, (long long)i, g,
                  truth[i], bound);
  }
}

/* Run `call` on contexts of 1 and 2 threads, twice each with the outputs
 * poisoned first: every run must give the bits of the first. */
typedef apx_status (*run_fn)(apx_context *ctx, const void *args);

static void run_deterministic(run_fn call, const void *args, const apx_tensor *const *outs,
                              int n_outs, const char *what) {
  apx_tensor first[4];
  for (int threads = 1; threads <= 2; threads++) {
    apx_context *ctx = tu_open_cpu_threads(threads);
    ck_assert_ptr_nonnull(ctx);
    for (int rep = 0; rep < 2; rep++) {
      for (int o = 0; o < n_outs; o++)
        tu_poison(outs[o]);
      apx_status st = call(ctx, args);
      ck_assert_msg(st == APX_OK, "%s: %s", what, apx_last_error());
      for (int o = 0; o < n_outs; o++) {
        ck_assert_msg(!tu_is_poisoned(outs[o]) || apx_tensor_numel(outs[o]) == 0,
                      "%s: output %d not written", what, o);
        if (threads == 1 && rep == 0)
          first[o] = tu_clone(outs[o]);
        else
          ck_assert_msg(tu_bytes_equal(&first[o], outs[o]),
                        "%s: output %d differs on %d threads, run %d", what, o, threads, rep);
      }
    }
    apx_close(ctx);
  }
  for (int o = 0; o < n_outs; o++)
    tu_free(&first[o]);
}

/* ---- tilepack_backward ------------------------------------------------------ */
static apx_status call_tilepack_backward(apx_context *ctx, const void *args) {
  return apx_tilepack_backward(ctx, args, &cpu_call);
}

START_TEST(tilepack_backward_parity) {
  tu_rng r = {tu_seed() + (uint64_t)_i};
  for (int n = 0; n < 12; n++) {
    const apx_dtype dt = float_dtypes[n % 3];
    const int64_t B = tu_int(&r, 1, 3), C = tu_int(&r, 1, 4), t = tu_int(&r, 1, 4);
    const int64_t gh = tu_int(&r, 1, 4), gw = tu_int(&r, 1, 4), K = tu_int(&r, 0, 9);
    const int64_t H = gh * t, W = gw * t, tiles = gh * gw;
    apx_tensor g = tu_host5(dt, B, K, C, t, t);
    apx_tensor idx = tu_host2(n % 2 ? APX_DTYPE_I64 : APX_DTYPE_I32, B, K);
    apx_tensor gf = tu_host4(dt, B, C, H, W);
    tu_fill_normal(&r, &g);
    for (int64_t i = 0; i < B * K; i++) /* repeats are likely: K up to 9 of 1..16 tiles */
      set_index(&idx, i, tu_int(&r, 0, tiles - 1));
    apx_tilepack_backward_args a = APX_TILEPACK_BACKWARD_ARGS_INIT;
    a.grad_out = &g;
    a.idx = &idx;
    a.grad_features = &gf;
    const apx_tensor *outs[] = {&gf};
    run_deterministic(call_tilepack_backward, &a, outs, 1, "tilepack_backward");
    double *truth = calloc((size_t)(B * C * H * W) + 1, sizeof(double));
    double *mag = calloc((size_t)(B * C * H * W) + 1, sizeof(double));
    for (int64_t b = 0; b < B; b++)
      for (int64_t k = 0; k < K; k++) {
        const int64_t id = get_index(&idx, b * K + k), y0 = id / gw * t, x0 = id % gw * t;
        for (int64_t c = 0; c < C; c++)
          for (int64_t dy = 0; dy < t; dy++)
            for (int64_t dx = 0; dx < t; dx++) {
              double v = tu_get(&g, (((b * K + k) * C + c) * t + dy) * t + dx);
              int64_t at = ((b * C + c) * H + y0 + dy) * W + x0 + dx;
              truth[at] += v;
              mag[at] += fabs(v);
            }
      }
    expect_close(&gf, truth, mag, 0, "tilepack_backward");
    free(truth);
    free(mag);
    tu_free(&g);
    tu_free(&idx);
    tu_free(&gf);
  }
}
END_TEST

/* ---- tileunpack_backward ---------------------------------------------------- */
static apx_status call_tileunpack_backward(apx_context *ctx, const void *args) {
  return apx_tileunpack_backward(ctx, args, &cpu_call);
}

/* The reference: per pixel, the covering tiles in ascending priority key
 * (key = ((level - lmin) << order_bits) + k, or k), then override (the
 * highest key takes the gradient, base none) or blend (base (1-a)^n, the
 * i-th of n tiles a*(1-a)^(n-1-i)). */
START_TEST(tileunpack_backward_parity) {
  tu_rng r = {tu_seed() + 77u * (uint64_t)_i};
  for (int n = 0; n < 24; n++) {
    const apx_dtype dt = float_dtypes[n % 3];
    const int blend = (n / 3) % 2, use_origins = (n / 6) % 2, use_levels = (n / 12) % 2;
    const int64_t B = tu_int(&r, 1, 2), C = tu_int(&r, 1, 3), t = tu_int(&r, 1, 4);
    const int64_t gh = tu_int(&r, 1, 3), gw = tu_int(&r, 1, 3), K = tu_int(&r, 0, 8);
    const int64_t H = gh * t, W = gw * t;
    const apx_dtype it = n % 2 ? APX_DTYPE_I64 : APX_DTYPE_I32;
    apx_tensor g = tu_host4(dt, B, C, H, W);
    apx_tensor idx = tu_host2(it, B, K), origins = tu_host3(it, B, K, 2),
               levels = tu_host2(it, B, K);
    apx_tensor gb = tu_host4(dt, B, C, H, W), gp = tu_host5(dt, B, K, C, t, t);
    tu_fill_normal(&r, &g);
    int64_t *y0 = malloc(sizeof(int64_t) * (size_t)(B * K + 1));
    int64_t *x0 = malloc(sizeof(int64_t) * (size_t)(B * K + 1));
    for (int64_t i = 0; i < B * K; i++) {
      const int64_t id = tu_int(&r, 0, gh * gw - 1);
      set_index(&idx, i, id);
      y0[i] = use_origins ? tu_int(&r, 0, H - t) : id / gw * t;
      x0[i] = use_origins ? tu_int(&r, 0, W - t) : id % gw * t;
      set_index(&origins, 2 * i, y0[i]);
      set_index(&origins, 2 * i + 1, x0[i]);
      set_index(&levels, i, tu_int(&r, -2, 2));
    }
    apx_tileunpack_backward_args a = APX_TILEUNPACK_BACKWARD_ARGS_INIT;
    a.grad_out = &g;
    a.idx = use_origins ? NULL : &idx;
    a.origins = use_origins ? &origins : NULL;
    a.levels = use_levels ? &levels : NULL;
    a.assume_priority_sorted = use_levels ? (int)tu_int(&r, 0, 1) : 1;
    a.mode = blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
    a.blend_alpha = n % 4 == 1 ? 0.0 : n % 4 == 3 ? 1.0 : tu_uniform(&r);
    a.tile = t;
    a.grad_base = &gb;
    a.grad_packed = &gp;
    const apx_tensor *outs[] = {&gb, &gp};
    run_deterministic(call_tileunpack_backward, &a, outs, 2, "tileunpack_backward");

    /* keys */
    int64_t lmin = 0, order_bits = 1;
    for (int64_t i = 0; i < B * K; i++)
      if (i == 0 || get_index(&levels, i) < lmin)
        lmin = get_index(&levels, i);
    while (K > 1 && ((int64_t)1 << order_bits) < K)
      order_bits++;
    const double alpha = round_to(dt, a.blend_alpha), om = round_to(dt, 1.0 - alpha);
    const int64_t plane = H * W;
    double *tb = malloc(sizeof(double) * (size_t)(B * C * plane + 1));
    double *tp = calloc((size_t)(B * K * C * t * t + 1), sizeof(double));
    double *mb = malloc(sizeof(double) * (size_t)(B * C * plane + 1));
    double *mp = calloc((size_t)(B * K * C * t * t + 1), sizeof(double));
    int64_t *cover = malloc(sizeof(int64_t) * (size_t)(K + 1));
    for (int64_t b = 0; b < B; b++)
      for (int64_t p = 0; p < plane; p++) {
        const int64_t y = p / W, x = p % W;
        int64_t n_cover = 0;
        for (int64_t k = 0; k < K; k++) /* covering tiles, then sorted by key */
          if (y >= y0[b * K + k] && y < y0[b * K + k] + t && x >= x0[b * K + k] &&
              x < x0[b * K + k] + t)
            cover[n_cover++] = k;
        int64_t key_of[64];
        for (int64_t i = 0; i < n_cover; i++)
          key_of[i] = use_levels ? ((get_index(&levels, b * K + cover[i]) - lmin) << order_bits) +
                                       cover[i]
                                 : cover[i];
        for (int64_t i = 1; i < n_cover; i++) /* insertion sort, ascending key */
          for (int64_t j = i; j > 0 && key_of[j - 1] > key_of[j]; j--) {
            int64_t s = key_of[j];
            key_of[j] = key_of[j - 1];
            key_of[j - 1] = s;
            s = cover[j];
            cover[j] = cover[j - 1];
            cover[j - 1] = s;
          }
        for (int64_t c = 0; c < C; c++) {
          const double gv = tu_get(&g, (b * C + c) * plane + p);
          const int64_t at = (b * C + c) * plane + p;
          tb[at] = blend ? gv * pow(om, (double)n_cover) : (n_cover ? 0.0 : gv);
          mb[at] = fabs(tb[at]);
          for (int64_t i = 0; i < n_cover; i++) {
            const int64_t k = cover[i];
            const int64_t pat =
                (((b * K + k) * C + c) * t + (y - y0[b * K + k])) * t + (x - x0[b * K + k]);
            tp[pat] = blend ? gv * alpha * pow(om, (double)(n_cover - 1 - i))
                            : (i == n_cover - 1 ? gv : 0.0);
            mp[pat] = fabs(tp[pat]);
          }
        }
      }
    if (!blend) { /* copies: bit for bit (the reference's values are the inputs') */
      for (int64_t i = 0; i < B * C * plane; i++)
        ck_assert_msg(tu_get(&gb, i) == tb[i], "override grad_base[%lld]", (long long)i);
      for (int64_t i = 0; i < B * K * C * t * t; i++)
        ck_assert_msg(tu_get(&gp, i) == tp[i], "override grad_packed[%lld]", (long long)i);
    }
    expect_close(&gb, tb, mb, 0, "tileunpack_backward grad_base");
    expect_close(&gp, tp, mp, 0, "tileunpack_backward grad_packed");
    free(tb);
    free(tp);
    free(mb);
    free(mp);
    free(cover);
    free(y0);
    free(x0);
    tu_free(&g);
    tu_free(&idx);
    tu_free(&origins);
    tu_free(&levels);
    tu_free(&gb);
    tu_free(&gp);
  }
}
END_TEST

/* ---- fused_pack_op_unpack_backward ------------------------------------------ */
static apx_status call_fused_backward(apx_context *ctx, const void *args) {
  return apx_fused_pack_op_unpack_backward(ctx, args, &cpu_call);
}

START_TEST(fused_backward_parity) {
  tu_rng r = {tu_seed() + 131u * (uint64_t)_i};
  for (int n = 0; n < 12; n++) {
    const apx_dtype dt = float_dtypes[n % 3];
    const int64_t B = tu_int(&r, 1, 2), C = tu_int(&r, 1, 3), t = tu_int(&r, 1, 4);
    const int64_t gh = tu_int(&r, 1, 3), gw = tu_int(&r, 1, 3), K = tu_int(&r, 0, 6);
    const int64_t H = gh * t, W = gw * t, plane = H * W;
    apx_tensor g = tu_host4(dt, B, C, H, W), x = tu_host4(dt, B, C, H, W);
    apx_tensor idx = tu_host2(n % 2 ? APX_DTYPE_I64 : APX_DTYPE_I32, B, K);
    apx_tensor gf = tu_host4(dt, B, C, H, W), gs = tu_host1(APX_DTYPE_F32, 4);
    tu_fill_normal(&r, &g);
    tu_fill_normal(&r, &x);
    for (int64_t i = 0; i < B * K; i++) /* repeats: require_unique = 0 */
      set_index(&idx, i, tu_int(&r, 0, gh * gw - 1));
    apx_fused_pack_op_unpack_backward_args a = APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;
    a.grad_out = &g;
    a.features = &x;
    a.idx = &idx;
    a.tile = t;
    a.value_scale = 2.0 * tu_normal(&r);
    a.value_bias = tu_normal(&r);
    a.gate_scale = 2.0 * tu_normal(&r);
    a.gate_bias = tu_normal(&r);
    a.require_unique = 0;
    a.grad_features = &gf;
    a.grad_scalars = n % 4 == 3 ? NULL : &gs;
    const apx_tensor *outs[] = {&gf, &gs};
    run_deterministic(call_fused_backward, &a, outs, a.grad_scalars ? 2 : 1,
                      "fused_pack_op_unpack_backward");
    const float vs = (float)a.value_scale, vb = (float)a.value_bias, gsc = (float)a.gate_scale,
                gbi = (float)a.gate_bias;
    double *tf = malloc(sizeof(double) * (size_t)(B * C * plane + 1));
    double *mf = malloc(sizeof(double) * (size_t)(B * C * plane + 1));
    double ts[4] = {0, 0, 0, 0}, ms[4] = {0, 0, 0, 0};
    for (int64_t b = 0; b < B; b++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t p = 0; p < plane; p++) {
          const int64_t at = (b * C + c) * plane + p, id = (p / W / t) * gw + (p % W) / t;
          int sel = 0;
          for (int64_t k = 0; k < K; k++)
            sel |= get_index(&idx, b * K + k) == id;
          const double gv = tu_get(&g, at), xv = tu_get(&x, at);
          if (!sel) {
            tf[at] = gv;
            mf[at] = 0;
            continue;
          }
          const double value = xv * vs + vb, gate = xv * gsc + gbi;
          const int on = (float)((float)xv * gsc + gbi) > 0.0f; /* the kernel's fp32 sign */
          tf[at] = on ? gv * (vs * gate + value * gsc) : 0.0;
          mf[at] = fabs(gv) * (fabs(vs) * (fabs(xv * gsc) + fabs(gbi)) +
                               (fabs(xv * vs) + fabs(vb)) * fabs(gsc));
          const double terms[4] = {on ? gv * xv * gate : 0, on ? gv * gate : 0,
                                   on ? gv * value * xv : 0, on ? gv * value : 0};
          const double term_mags[4] = {fabs(gv * xv) * (fabs(xv * gsc) + fabs(gbi)),
                                       fabs(gv) * (fabs(xv * gsc) + fabs(gbi)),
                                       fabs(gv * xv) * (fabs(xv * vs) + fabs(vb)),
                                       fabs(gv) * (fabs(xv * vs) + fabs(vb))};
          for (int s = 0; s < 4; s++) {
            ts[s] += terms[s];
            ms[s] += on ? term_mags[s] : 0;
          }
        }
    expect_close(&gf, tf, mf, 0, "fused_pack_op_unpack_backward grad_features");
    if (a.grad_scalars) /* fp32 sums over up to B*C*H*W terms */
      expect_close(&gs, ts, ms, 1e-4, "fused_pack_op_unpack_backward grad_scalars");
    free(tf);
    free(mf);
    tu_free(&g);
    tu_free(&x);
    tu_free(&idx);
    tu_free(&gf);
    tu_free(&gs);
  }
}
END_TEST

/* In place (grad_features = grad_out) with a repeated id: the tile's
 * gradient is transformed once, as its forward transforms it once. */
START_TEST(fused_backward_in_place_repeat) {
  apx_context *ctx = tu_open();
  apx_tensor g = tu_host4(APX_DTYPE_F32, 1, 1, 2, 4), x = tu_host4(APX_DTYPE_F32, 1, 1, 2, 4);
  apx_tensor idx = tu_host2(APX_DTYPE_I64, 1, 3);
  for (int64_t i = 0; i < 8; i++) {
    tu_set(&g, i, 1.0 + (double)i);
    tu_set(&x, i, 1.0);
  }
  set_index(&idx, 0, 1);
  set_index(&idx, 1, 1);
  set_index(&idx, 2, 1);
  apx_fused_pack_op_unpack_backward_args a = APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT;
  a.grad_out = &g;
  a.features = &x;
  a.idx = &idx;
  a.tile = 2;
  a.value_scale = 2.0; /* v = 2, gate = 1: d = 2*1 + 2*1 = 4 */
  a.require_unique = 0;
  a.grad_features = &g;
  ck_assert_int_eq(apx_fused_pack_op_unpack_backward(ctx, &a, &cpu_call), APX_OK);
  const double want[8] = {1, 2, 12, 16, 5, 6, 28, 32};
  for (int64_t i = 0; i < 8; i++)
    ck_assert_msg(tu_get(&g, i) == want[i], "element %lld is %g, want %g", (long long)i,
                  tu_get(&g, i), want[i]);
  tu_free(&g);
  tu_free(&x);
  tu_free(&idx);
  apx_close(ctx);
}
END_TEST

/* ---- index_select_backward -------------------------------------------------- */
static apx_status call_index_select_backward(apx_context *ctx, const void *args) {
  return apx_index_select_backward(ctx, args, &cpu_call);
}

START_TEST(index_select_backward_parity) {
  static const apx_dtype dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16, APX_DTYPE_I32,
                                     APX_DTYPE_I64};
  tu_rng r = {tu_seed() + 977u * (uint64_t)_i};
  for (int n = 0; n < 15; n++) {
    const apx_dtype dt = dtypes[n % 5];
    const int is_int = dt == APX_DTYPE_I32 || dt == APX_DTYPE_I64;
    const int64_t M = tu_int(&r, 1, 6), D = n == 14 ? 1500 : tu_int(&r, 0, 5),
                  N = tu_int(&r, 0, 12);
    apx_tensor g = tu_host2(dt, N, D), index = tu_host1(n % 2 ? APX_DTYPE_I64 : APX_DTYPE_I32, N);
    apx_tensor gs = tu_host2(dt, M, D);
    if (is_int)
      tu_fill_int(&r, &g, -1000, 1000);
    else
      tu_fill_normal(&r, &g);
    for (int64_t i = 0; i < N; i++)
      set_index(&index, i, tu_int(&r, 0, M - 1));
    apx_index_select_backward_args a = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
    a.grad_out = &g;
    a.index = &index;
    a.grad_src = &gs;
    const apx_tensor *outs[] = {&gs};
    run_deterministic(call_index_select_backward, &a, outs, 1, "index_select_backward");
    double *truth = calloc((size_t)(M * D + 1), sizeof(double));
    double *mag = calloc((size_t)(M * D + 1), sizeof(double));
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < D; j++) {
        double v = tu_get(&g, i * D + j);
        truth[get_index(&index, i) * D + j] += v;
        mag[get_index(&index, i) * D + j] += fabs(v);
      }
    if (is_int) {
      for (int64_t i = 0; i < M * D; i++)
        ck_assert_msg(tu_get(&gs, i) == truth[i], "index_select_backward int [%lld]",
                      (long long)i);
    } else {
      expect_close(&gs, truth, mag, 0, "index_select_backward");
    }
    free(truth);
    free(mag);
    tu_free(&g);
    tu_free(&index);
    tu_free(&gs);
  }
}
END_TEST

/* docs/ops.md, index_select_backward along any dim of an ndim 1..4 grad_src,
 * dim from either end: each grad_out element added at its coordinates with
 * the one at dim through index, in doubles. */
START_TEST(index_select_backward_any_dim) {
  static const apx_dtype dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16, APX_DTYPE_I32,
                                     APX_DTYPE_I64};
  tu_rng r = {tu_seed() + 983u};
  for (int n = 0; n < 60; n++) {
    const apx_dtype dt = dtypes[n % 5];
    const int is_int = dt == APX_DTYPE_I32 || dt == APX_DTYPE_I64;
    const int ndim = (int)tu_int(&r, 1, 4), dim = (int)tu_int(&r, 0, ndim - 1);
    int64_t src_shape[4], out_shape[4];
    for (int d = 0; d < ndim; d++)
      src_shape[d] = tu_int(&r, 1, 5);
    const int64_t N = tu_int(&r, 0, 9);
    memcpy(out_shape, src_shape, sizeof src_shape);
    out_shape[dim] = N;
    apx_tensor g = tu_host(dt, ndim, out_shape), gs = tu_host(dt, ndim, src_shape);
    apx_tensor index = tu_host1(n % 2 ? APX_DTYPE_I64 : APX_DTYPE_I32, N);
    if (is_int)
      tu_fill_int(&r, &g, -1000, 1000);
    else
      tu_fill_normal(&r, &g);
    for (int64_t i = 0; i < N; i++)
      set_index(&index, i, tu_int(&r, 0, src_shape[dim] - 1));
    apx_index_select_backward_args a = APX_INDEX_SELECT_BACKWARD_ARGS_INIT;
    a.grad_out = &g;
    a.index = &index;
    a.grad_src = &gs;
    a.dim = n % 3 == 0 ? dim - ndim : dim;
    const apx_tensor *outs[] = {&gs};
    run_deterministic(call_index_select_backward, &a, outs, 1, "index_select_backward");
    const int64_t numel_g = apx_tensor_numel(&g), numel_gs = apx_tensor_numel(&gs);
    double *truth = calloc((size_t)numel_gs + 1, sizeof(double));
    double *mag = calloc((size_t)numel_gs + 1, sizeof(double));
    for (int64_t p = 0; p < numel_g; p++) {
      int64_t coord[4], rest = p, at = 0;
      for (int d = ndim - 1; d >= 0; d--) {
        coord[d] = rest % out_shape[d];
        rest /= out_shape[d];
      }
      coord[dim] = get_index(&index, coord[dim]);
      for (int d = 0; d < ndim; d++)
        at = at * src_shape[d] + coord[d];
      truth[at] += tu_get(&g, p);
      mag[at] += fabs(tu_get(&g, p));
    }
    if (is_int) {
      for (int64_t i = 0; i < numel_gs; i++)
        ck_assert_msg(tu_get(&gs, i) == truth[i], "index_select_backward int ndim %d dim %d [%lld]",
                      ndim, a.dim, (long long)i);
    } else {
      expect_close(&gs, truth, mag, 0, "index_select_backward any dim");
    }
    free(truth);
    free(mag);
    tu_free(&g);
    tu_free(&index);
    tu_free(&gs);
  }
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cpu_tile_backward");
  TCase *tc = tcase_create("parity");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, tilepack_backward_parity, 0, 3);
  tcase_add_loop_test(tc, tileunpack_backward_parity, 0, 3);
  tcase_add_loop_test(tc, fused_backward_parity, 0, 3);
  tcase_add_test(tc, fused_backward_in_place_repeat);
  tcase_add_loop_test(tc, index_select_backward_parity, 0, 3);
  tcase_add_test(tc, index_select_backward_any_dim);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
