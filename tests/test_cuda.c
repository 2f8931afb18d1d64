/* The cuda backend against the cpu backend, through the public API: every
 * op (docs/ops.md, every op) on random inputs drawn afresh
 * for each of two calls, with the device output poisoned before each call;
 * every float dtype (and integer data for the indexing ops), both index
 * dtypes, odd shapes, duplicates, overlaps, K = 0, B > 1, outputs aliasing
 * inputs where the API allows. Copy ops must match bit for bit; the others
 * within twice the bound of docs/ops.md, Rounding and parity (each side
 * carries its own error).
 * Bad device indices: validate=device writes nothing and reports
 * APX_ERR_DEVICE at apx_sync; validate=eager returns APX_ERR_INVALID_ARG.
 *
 * Skipped (exit 77) where the cuda backend cannot run. CUDA does not
 * survive Check's fork, so the suite runs without forking. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static apx_context *ctx;       /* the build tree's config: validate = device */
static apx_context *ctx_eager; /* the same with validate = eager */
static tu_rng rng;
static const apx_call on_cpu = {"cpu", NULL};
static const apx_call on_gpu = {"cuda", NULL};
static const apx_dtype float_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
static const apx_dtype index_dtypes[] = {APX_DTYPE_I32, APX_DTYPE_I64};

#define CHECK_OK(expr, what)                                                   \
  do {                                                                         \
    apx_status check_st_ = (expr);                                             \
    ck_assert_msg(check_st_ == APX_OK, "%s: %s: %s: %s", (what), #expr,        \
                  apx_status_name(check_st_), apx_last_error());               \
  } while (0)

/* ---- device tensors --------------------------------------------------------- */

static apx_tensor dev_alloc(apx_context *c, apx_dtype dt, int ndim, const int64_t *shape) {
  apx_tensor t;
  CHECK_OK(apx_tensor_alloc(c, APX_DEVICE_CUDA, 0, dt, ndim, shape, &t), "dev_alloc");
  return t;
}

static apx_tensor to_dev(apx_context *c, const apx_tensor *h) {
  apx_tensor d = dev_alloc(c, h->dtype, h->ndim, h->shape);
  CHECK_OK(apx_tensor_copy(c, &d, h, NULL), "to_dev");
  return d;
}

static apx_tensor to_host(apx_context *c, const apx_tensor *d) {
  apx_tensor h = tu_host(d->dtype, d->ndim, d->shape);
  CHECK_OK(apx_tensor_copy(c, &h, d, NULL), "to_host");
  return h;
}

/* Fill a device tensor with 0xA5 bytes (NaN for every float dtype). */
static void dev_poison(apx_context *c, const apx_tensor *d) {
  apx_tensor h = tu_host(d->dtype, d->ndim, d->shape);
  tu_poison(&h);
  CHECK_OK(apx_tensor_copy(c, d, &h, NULL), "dev_poison");
  tu_free(&h);
}

static int dev_is_poisoned(apx_context *c, const apx_tensor *d) {
  apx_tensor h = to_host(c, d);
  int p = tu_is_poisoned(&h);
  tu_free(&h);
  return p;
}

static void dev_free(apx_context *c, apx_tensor *d) { apx_tensor_free(c, d); }

/* ---- comparisons ------------------------------------------------------------ */

static double tol_of(apx_dtype dt) {
  return dt == APX_DTYPE_F32 ? 1e-5 : dt == APX_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* One unit in the last place of dtype dt at magnitude |v|. */
static double ulp_of(apx_dtype dt, double v) {
  int e;
  frexp(fabs(v) > 0 ? fabs(v) : 1e-30, &e); /* |v| = m * 2^e, m in [0.5, 1) */
  int mant = dt == APX_DTYPE_F32 ? 23 : dt == APX_DTYPE_F16 ? 10 : 7;
  int emin = dt == APX_DTYPE_F16 ? -13 : -125;
  if (e < emin) e = emin;
  return ldexp(1.0, e - 1 - mant);
}

static void expect_exact(const apx_tensor *got, const apx_tensor *want, const char *what) {
  int64_t n = apx_tensor_numel(want);
  size_t es = apx_dtype_size(want->dtype);
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es) != 0)
      ck_abort_msg("%s: element %lld differs: cuda %.9g, cpu %.9g", what, (long long)i,
                   tu_get(got, i), tu_get(want, i));
}

/* |got - want| <= 2*(atol + rtol*mag) + extra_ulps*ulp (docs/ops.md, Rounding and parity, both
 * sides' errors); mag NULL means |want|. NaN must meet NaN, inf itself. */
static void expect_close(const apx_tensor *got, const apx_tensor *want, const double *mag,
                         double extra_ulps, const char *what) {
  int64_t n = apx_tensor_numel(want);
  double tol = tol_of(want->dtype);
  for (int64_t i = 0; i < n; i++) {
    double g = tu_get(got, i), w = tu_get(want, i);
    if (isnan(w) || isnan(g)) {
      ck_assert_msg(isnan(w) && isnan(g), "%s: element %lld: cuda %g, cpu %g", what,
                    (long long)i, g, w);
      continue;
    }
    if (isinf(w) || isinf(g)) {
      ck_assert_msg(g == w, "%s: element %lld: cuda %g, cpu %g", what, (long long)i, g, w);
      continue;
    }
    double m = mag ? mag[i] : fabs(w);
    double bound = 2.0 * (tol + tol * m) + extra_ulps * ulp_of(want->dtype, w);
    ck_assert_msg(fabs(g - w) <= bound, "%s: element %lld: cuda %.9g, cpu %.9g (bound %.3g)",
                  what, (long long)i, g, w, bound);
  }
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

/* Distinct ids per batch row in [0, tiles). */
static void fill_unique(const apx_tensor *idx, int64_t tiles) {
  int64_t B = idx->shape[0], K = idx->shape[1];
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)(tiles > 0 ? tiles : 1));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < tiles; i++) perm[i] = i;
    for (int64_t k = 0; k < K; k++) {
      int64_t j = tu_int(&rng, k, tiles - 1), s = perm[k];
      perm[k] = perm[j];
      perm[j] = s;
      set_index(idx, b * K + k, perm[k]);
    }
  }
  free(perm);
}

/* When set (test_copy_ops_move_bits), fill_values also writes raw bit
 * patterns no arithmetic path keeps: signaling and quiet NaNs with
 * payloads (either sign), +-0 and subnormals, so that a copy op moving
 * values through fp32 anywhere shows as a bitwise difference. */
static int bit_specials;

static void put_bit_special(const apx_tensor *t, int64_t i) {
  static const uint32_t f32[] = {0x7f800001u, 0xff812345u, 0x7fc00abcu, 0xffffffffu,
                                 0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu};
  static const uint16_t f16[] = {0x7c01u, 0xfd55u, 0x7e3fu, 0xffffu,
                                 0x0000u, 0x8000u, 0x0001u, 0x83ffu};
  static const uint16_t bf16[] = {0x7f81u, 0xff9au, 0x7fc1u, 0xffffu,
                                  0x0000u, 0x8000u, 0x0001u, 0x807fu};
  int k = (int)tu_int(&rng, 0, 7);
  if (t->dtype == APX_DTYPE_F32)
    memcpy((char *)t->data + 4 * i, &f32[k], 4);
  else if (t->dtype == APX_DTYPE_F16)
    memcpy((char *)t->data + 2 * i, &f16[k], 2);
  else if (t->dtype == APX_DTYPE_BF16)
    memcpy((char *)t->data + 2 * i, &bf16[k], 2);
}

/* N(0,1) values with a sprinkle of NaN, +-inf, -0 when specials. */
static void fill_values(const apx_tensor *t, int specials) {
  int64_t n = apx_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double v = tu_normal(&rng);
    if (specials) switch (tu_int(&rng, 0, 23)) {
      case 0: v = INFINITY; break;
      case 1: v = -INFINITY; break;
      case 2: v = NAN; break;
      case 3: v = -0.0; break;
      default: break;
      }
    tu_set(t, i, v);
    if (bit_specials && tu_int(&rng, 0, 3) == 0) put_bit_special(t, i);
  }
}

/* ---- tilepack ---------------------------------------------------------------- */

static void tilepack_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                          int64_t gw, int64_t t, int64_t K) {
  char what[200];
  snprintf(what, sizeof what, "tilepack %s/%s B%lld C%lld %lldx%lld t%lld K%lld",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K);
  apx_tensor f = tu_host4(dt, B, C, gh * t, gw * t), idx = tu_host2(it, B, K);
  apx_tensor want = tu_host5(dt, B, K, C, t, t);
  apx_tensor d_out = dev_alloc(ctx, dt, 5, want.shape);
  for (int call = 0; call < 2; call++) {
    fill_values(&f, 0);
    tu_fill_int(&rng, &idx, 0, gh * gw - 1); /* duplicates likely */
    apx_tilepack_args a = APX_TILEPACK_ARGS_INIT;
    a.features = &f;
    a.idx = &idx;
    a.tile = t;
    a.out = &want;
    CHECK_OK(apx_tilepack(ctx, &a, &on_cpu), what);
    apx_tensor d_f = to_dev(ctx, &f), d_idx = to_dev(ctx, &idx);
    dev_poison(ctx, &d_out);
    a.features = &d_f;
    a.idx = &d_idx;
    a.out = &d_out;
    CHECK_OK(apx_tilepack(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, &d_out);
    expect_exact(&got, &want, what);
    tu_free(&got);
    dev_free(ctx, &d_f);
    dev_free(ctx, &d_idx);
  }
  dev_free(ctx, &d_out);
  tu_free(&f);
  tu_free(&idx);
  tu_free(&want);
}

START_TEST(test_tilepack) {
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < 2; i++) {
      tilepack_case(float_dtypes[d], index_dtypes[i], 2, 3, 3, 5, 4, 7);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 5, 2, 3, 3, 9); /* odd t */
      tilepack_case(float_dtypes[d], index_dtypes[i], 2, 2, 2, 3, 16, 5);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 1, 2, 2, 32, 3);
      tilepack_case(float_dtypes[d], index_dtypes[i], 3, 4, 4, 4, 8, 0); /* K = 0 */
      /* large K, tiles taken in id order (a sort a batch row): K at the
       * sort's lower bound, between, at its upper bound (4096, 64 tiles:
       * each id many times) and one past it (k order) */
      tilepack_case(float_dtypes[d], index_dtypes[i], 3, 1, 16, 32, 8, 512);
      tilepack_case(float_dtypes[d], index_dtypes[i], 2, 3, 32, 40, 4, 700);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 2, 8, 8, 2, 4096);
      tilepack_case(float_dtypes[d], index_dtypes[i], 1, 2, 8, 8, 2, 4097);
    }
}
END_TEST

/* ---- tileunpack --------------------------------------------------------------- */

/* tileunpack blend in float64 (docs/ops.md, tileunpack): out = base; per batch row
 * the tiles in ascending key order, cur = (1-a)*cur + a*tile, a rounded to
 * the base dtype first; the result rounded once into `out`. */
static void blend_truth(const apx_tensor *base, const apx_tensor *packed, const apx_tensor *idx,
                        const apx_tensor *origins, const apx_tensor *levels, double alpha,
                        apx_tensor *out) {
  int64_t B = base->shape[0], C = base->shape[1], H = base->shape[2], W = base->shape[3];
  int64_t K = packed->shape[1], t = packed->shape[3], gw = W / t;
  apx_tensor a1 = tu_host1(base->dtype, 1);
  tu_set(&a1, 0, alpha);
  double a = tu_get(&a1, 0);
  tu_free(&a1);
  int64_t n = B * C * H * W;
  double *cur = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) cur[i] = tu_get(base, i);
  int ob = 1;
  while (K > 1 && ((int64_t)1 << ob) < K) ob++; /* max(1, bit_length(K-1)) */
  int64_t lmin = 0;
  for (int64_t i = 0; levels && i < B * K; i++) {
    int64_t v = get_index(levels, i);
    if (i == 0 || v < lmin) lmin = v;
  }
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(K > 0 ? K : 1));
  for (int64_t b = 0; b < B; b++) {
    for (int64_t k = 0; k < K; k++) order[k] = k;
    for (int64_t i = 1; i < K; i++) /* insertion sort by key (keys are distinct) */
      for (int64_t j = i; j > 0; j--) {
        int64_t ka = order[j - 1], kb = order[j];
        int64_t key_a = levels ? ((get_index(levels, b * K + ka) - lmin) << ob) + ka : ka;
        int64_t key_b = levels ? ((get_index(levels, b * K + kb) - lmin) << ob) + kb : kb;
        if (key_a <= key_b) break;
        order[j - 1] = kb;
        order[j] = ka;
      }
    for (int64_t r = 0; r < K; r++) {
      int64_t k = order[r], y0, x0;
      if (idx) {
        int64_t id = get_index(idx, b * K + k);
        y0 = id / gw * t;
        x0 = id % gw * t;
      } else {
        y0 = get_index(origins, (b * K + k) * 2);
        x0 = get_index(origins, (b * K + k) * 2 + 1);
      }
      for (int64_t c = 0; c < C; c++)
        for (int64_t dy = 0; dy < t; dy++)
          for (int64_t dx = 0; dx < t; dx++) {
            int64_t o = ((b * C + c) * H + y0 + dy) * W + x0 + dx;
            double v = tu_get(packed, (((b * K + k) * C + c) * t + dy) * t + dx);
            cur[o] = (1 - a) * cur[o] + a * v;
          }
    }
  }
  for (int64_t i = 0; i < n; i++) tu_set(out, i, cur[i]);
  free(order);
  free(cur);
}

/* tileunpack_case's levels: tu_fill_int(-2, 3) unless a test sets this
 * (levels at the int32 key's limit for the table kernel's own check) */
static void (*unpack_levels_fill)(const apx_tensor *levels);

/* Levels in [lo, lo + (INT32_MAX >> order_bits)] with both ends present
 * (they fit exactly: docs/ops.md, tileunpack (priority)), or with `past` one level a
 * step above that (rejected); returns the position of the largest. */
static int64_t fill_levels_at_limit(const apx_tensor *levels, int64_t lo, int past) {
  int64_t n = levels->shape[0] * levels->shape[1], K = levels->shape[1];
  int ob = 1;
  while (K > 1 && ((int64_t)1 << ob) < K) ob++; /* max(1, bit_length(K-1)) */
  int64_t span = INT32_MAX >> ob;
  for (int64_t i = 0; i < n; i++) set_index(levels, i, lo + tu_int(&rng, 0, span - 1));
  int64_t at_min = tu_int(&rng, 0, n - 1);
  int64_t at_max = n > 1 ? (at_min + tu_int(&rng, 1, n - 1)) % n : 0;
  if (n > 1) set_index(levels, at_min, lo);
  set_index(levels, at_max, lo + span + (past ? 1 : 0));
  return at_max;
}
/* near the bottom of the levels' dtype: the span's subtraction wraps nowhere */
static void levels_at_limit(const apx_tensor *levels) {
  fill_levels_at_limit(levels, levels->dtype == APX_DTYPE_I64 ? INT64_MIN + 3 : INT32_MIN + 3, 0);
}
/* all equal, at the dtype's bottom: span 0 */
static void levels_all_bottom(const apx_tensor *levels) {
  int64_t n = levels->shape[0] * levels->shape[1];
  for (int64_t i = 0; i < n; i++)
    set_index(levels, i, levels->dtype == APX_DTYPE_I64 ? INT64_MIN : INT32_MIN);
}

static void tileunpack_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh,
                            int64_t gw, int64_t t, int64_t K, int use_origins, int use_levels,
                            apx_overlap_mode mode, int alias) {
  char what[240];
  snprintf(what, sizeof what,
           "tileunpack %s/%s B%lld C%lld %lldx%lld t%lld K%lld origins=%d levels=%d %s alias=%d",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K, use_origins, use_levels,
           mode == APX_OVERLAP_BLEND ? "blend" : "override", alias);
  int64_t H = gh * t, W = gw * t;
  apx_tensor base = tu_host4(dt, B, C, H, W), packed = tu_host5(dt, B, K, C, t, t);
  apx_tensor idx = tu_host2(it, B, K), origins = tu_host3(it, B, K, 2);
  apx_tensor levels = tu_host2(it, B, K), want = tu_host4(dt, B, C, H, W);
  apx_tensor d_out = dev_alloc(ctx, dt, 4, want.shape);
  double alpha = tu_uniform(&rng);
  for (int call = 0; call < 2; call++) {
    fill_values(&base, 0);
    fill_values(&packed, 0);
    tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    for (int64_t i = 0; i < B * K; i++) {
      /* free origins: partial overlaps, sometimes aligned */
      int aligned = tu_int(&rng, 0, 3) == 0;
      int64_t y0 = tu_int(&rng, 0, H - t), x0 = tu_int(&rng, 0, W - t);
      if (aligned) {
        y0 -= y0 % t;
        x0 -= x0 % t;
      }
      set_index(&origins, 2 * i, y0);
      set_index(&origins, 2 * i + 1, x0);
    }
    if (unpack_levels_fill)
      unpack_levels_fill(&levels);
    else
      tu_fill_int(&rng, &levels, -2, 3);
    apx_tileunpack_args a = APX_TILEUNPACK_ARGS_INIT;
    a.base = &base;
    a.packed = &packed;
    a.idx = use_origins ? NULL : &idx;
    a.origins = use_origins ? &origins : NULL;
    a.levels = use_levels ? &levels : NULL;
    a.mode = mode;
    a.blend_alpha = alpha;
    a.out = &want;
    CHECK_OK(apx_tileunpack(ctx, &a, &on_cpu), what);
    apx_tensor d_base = to_dev(ctx, &base), d_packed = to_dev(ctx, &packed);
    apx_tensor d_place = to_dev(ctx, use_origins ? &origins : &idx);
    apx_tensor d_levels = to_dev(ctx, &levels);
    if (!alias) dev_poison(ctx, &d_out);
    a.base = &d_base;
    a.packed = &d_packed;
    a.idx = use_origins ? NULL : &d_place;
    a.origins = use_origins ? &d_place : NULL;
    a.levels = use_levels ? &d_levels : NULL;
    a.out = alias ? &d_base : &d_out;
    CHECK_OK(apx_tileunpack(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, a.out);
    if (mode == APX_OVERLAP_OVERRIDE) {
      expect_exact(&got, &want, what);
    } else {
      /* against the formula in float64 (docs/ops.md, Rounding and parity): the cpu backend rounds
       * every step to the storage dtype (model R), the cuda backend once,
       * so after many nested blends they may differ by more than either
       * differs from the truth */
      blend_truth(&base, &packed, use_origins ? NULL : &idx, use_origins ? &origins : NULL,
                  use_levels ? &levels : NULL, alpha, &want);
      /* nested blends stay within the largest input magnitude */
      double m = 0;
      for (int64_t i = 0; i < apx_tensor_numel(&base); i++) m = fmax(m, fabs(tu_get(&base, i)));
      for (int64_t i = 0; i < apx_tensor_numel(&packed); i++)
        m = fmax(m, fabs(tu_get(&packed, i)));
      int64_t n = apx_tensor_numel(&want);
      double *mag = malloc(sizeof(double) * (size_t)n);
      for (int64_t i = 0; i < n; i++) mag[i] = m;
      expect_close(&got, &want, mag, 0, what);
      free(mag);
    }
    tu_free(&got);
    dev_free(ctx, &d_base);
    dev_free(ctx, &d_packed);
    dev_free(ctx, &d_place);
    dev_free(ctx, &d_levels);
  }
  dev_free(ctx, &d_out);
  tu_free(&base);
  tu_free(&packed);
  tu_free(&idx);
  tu_free(&origins);
  tu_free(&levels);
  tu_free(&want);
}

START_TEST(test_tileunpack) {
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 16; combo++) {
      apx_dtype it = index_dtypes[combo & 1];
      int origins = (combo >> 1) & 1, levels = (combo >> 2) & 1;
      apx_overlap_mode mode = (combo >> 3) & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
      tileunpack_case(float_dtypes[d], it, 2, 3, 3, 4, 4, 9, origins, levels, mode, 0);
      tileunpack_case(float_dtypes[d], it, 1, 2, 2, 3, 3, 13, origins, levels, mode, combo & 1);
    }
  for (int d = 0; d < 3; d++) { /* K = 0, t = 8 and 16, many duplicates */
    tileunpack_case(float_dtypes[d], APX_DTYPE_I64, 2, 3, 2, 2, 8, 0, 0, 0, APX_OVERLAP_OVERRIDE,
                    0);
    tileunpack_case(float_dtypes[d], APX_DTYPE_I32, 2, 5, 4, 4, 8, 40, 0, 1,
                    APX_OVERLAP_OVERRIDE, 1);
    tileunpack_case(float_dtypes[d], APX_DTYPE_I32, 1, 3, 2, 2, 16, 30, 1, 1, APX_OVERLAP_BLEND,
                    0);
  }
  /* ids with K above the small-K form's 64: the winner map (override), the
   * map plus sorted entries for cells with several tiles (blend) */
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 4; combo++)
      tileunpack_case(float_dtypes[d], index_dtypes[combo & 1], 2, 5, 8, 9, 4, 100, 0,
                      combo >> 1, combo & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE,
                      combo == 3);
  /* small K but B*K above the in-kernel check's 1024 entries: the
   * small-K kernel after a separate pre-pass */
  tileunpack_case(APX_DTYPE_F16, APX_DTYPE_I32, 20, 2, 4, 4, 4, 60, 0, 1, APX_OVERLAP_BLEND, 0);
  tileunpack_case(APX_DTYPE_F32, APX_DTYPE_I64, 20, 2, 4, 4, 4, 60, 0, 0, APX_OVERLAP_OVERRIDE,
                  1);
  /* more channels than one thread's run (a remainder run), every form */
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 8; combo++) {
      int origins = combo & 1, levels = (combo >> 1) & 1;
      apx_overlap_mode mode = (combo >> 2) & 1 ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
      tileunpack_case(float_dtypes[d], APX_DTYPE_I64, 2, 37, 8, 6, 8, 30, origins, levels, mode,
                      combo == 0 || combo == 6);
    }
  /* the small-K table kernel's edges: more planes than the grid's 65535
   * rows (a block walks planes: staged tile slices reloaded, the table
   * rebuilt where the batch row changes, kept where it does not), and a
   * tile grid above its 2048 cells (the ranked small-K kernel) */
  for (int blend = 0; blend < 2; blend++) {
    apx_overlap_mode mode = blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
    tileunpack_case(APX_DTYPE_F16, APX_DTYPE_I32, 2, 40000, 1, 2, 2, 3, 0, 1, mode, !blend);
    tileunpack_case(APX_DTYPE_F32, APX_DTYPE_I64, 1, 70000, 1, 2, 2, 3, 0, 0, mode, blend);
    tileunpack_case(APX_DTYPE_BF16, APX_DTYPE_I64, 1, 2, 48, 48, 1, 50, 0, 1, mode, 0);
  }
}
END_TEST

/* ---- fused_pack_op_unpack ----------------------------------------------------- */

static void fused_case(apx_dtype dt, apx_dtype it, int64_t B, int64_t C, int64_t gh, int64_t gw,
                       int64_t t, int64_t K, int unique, int alias) {
  char what[200];
  snprintf(what, sizeof what, "fused %s/%s B%lld C%lld %lldx%lld t%lld K%lld unique=%d alias=%d",
           apx_dtype_name(dt), apx_dtype_name(it), (long long)B, (long long)C, (long long)gh,
           (long long)gw, (long long)t, (long long)K, unique, alias);
  int64_t H = gh * t, W = gw * t;
  apx_tensor f = tu_host4(dt, B, C, H, W), idx = tu_host2(it, B, K);
  apx_tensor want = tu_host4(dt, B, C, H, W);
  apx_tensor d_out = dev_alloc(ctx, dt, 4, want.shape);
  for (int call = 0; call < 2; call++) {
    fill_values(&f, call);
    if (unique)
      fill_unique(&idx, gh * gw);
    else
      tu_fill_int(&rng, &idx, 0, gh * gw - 1);
    apx_fused_pack_op_unpack_args a = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT;
    a.features = &f;
    a.idx = &idx;
    a.tile = t;
    a.value_scale = tu_normal(&rng);
    a.value_bias = tu_normal(&rng);
    a.gate_scale = tu_normal(&rng);
    a.gate_bias = tu_normal(&rng);
    a.require_unique = unique;
    a.out = &want;
    CHECK_OK(apx_fused_pack_op_unpack(ctx, &a, &on_cpu), what);
    apx_tensor d_f = to_dev(ctx, &f), d_idx = to_dev(ctx, &idx);
    if (!alias) dev_poison(ctx, &d_out);
    a.features = &d_f;
    a.idx = &d_idx;
    a.out = alias ? &d_f : &d_out;
    CHECK_OK(apx_fused_pack_op_unpack(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, a.out);
    int64_t n = apx_tensor_numel(&f);
    double *mag = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      double x = tu_get(&f, i);
      mag[i] = (fabs(x * a.value_scale) + fabs(a.value_bias)) *
               (fabs(x * a.gate_scale) + fabs(a.gate_bias));
    }
    expect_close(&got, &want, mag, 0, what);
    free(mag);
    tu_free(&got);
    dev_free(ctx, &d_f);
    dev_free(ctx, &d_idx);
  }
  dev_free(ctx, &d_out);
  tu_free(&f);
  tu_free(&idx);
  tu_free(&want);
}

START_TEST(test_fused) {
  for (int d = 0; d < 3; d++)
    for (int combo = 0; combo < 8; combo++) {
      apx_dtype it = index_dtypes[combo & 1];
      int unique = (combo >> 1) & 1, alias = (combo >> 2) & 1;
      fused_case(float_dtypes[d], it, 2, 3, 3, 5, 4, unique ? 9 : 25, unique, alias);
      fused_case(float_dtypes[d], it, 1, 2, 2, 3, 3, unique ? 6 : 11, unique, alias);
      fused_case(float_dtypes[d], it, 2, 2, 2, 2, 16, unique ? 3 : 7, unique, alias);
    }
  fused_case(APX_DTYPE_F16, APX_DTYPE_I32, 2, 3, 4, 4, 8, 0, 1, 0); /* K = 0 */
  /* K above the one-launch form's 64: the owner map, and require_unique
   * through the pre-pass's id map */
  for (int combo = 0; combo < 8; combo++) {
    int unique = combo & 1, alias = (combo >> 1) & 1;
    fused_case(float_dtypes[combo % 3], index_dtypes[(combo >> 2) & 1], 2, 3, 12, 10, 4,
               unique ? 100 : 130, unique, alias);
  }
  /* a tile grid above the one-launch form's 8192 tiles (t = 1) */
  fused_case(APX_DTYPE_BF16, APX_DTYPE_I64, 1, 2, 100, 90, 1, 50, 1, 0);
}
END_TEST

/* ---- fusiongate --------------------------------------------------------------- */

START_TEST(test_fusiongate_alpha) {
  for (int pd = 0; pd < 3; pd++)
    for (int od = 0; od < 3; od++)
      for (int three_d = 0; three_d < 2; three_d++) {
        apx_dtype p = float_dtypes[pd], o = float_dtypes[od];
        char what[120];
        snprintf(what, sizeof what, "fusiongate_alpha proxies %s out %s %dd", apx_dtype_name(p),
                 apx_dtype_name(o), three_d ? 3 : 4);
        int64_t B = 2, H = 7, W = 13;
        int64_t shape4[4] = {B, 1, H, W}, shape3[3] = {B, H, W};
        apx_tensor bnd = three_d ? tu_host(p, 3, shape3) : tu_host(p, 4, shape4);
        apx_tensor unc = three_d ? tu_host(p, 3, shape3) : tu_host(p, 4, shape4);
        apx_tensor want = tu_host(o, 4, shape4);
        apx_tensor d_out = dev_alloc(ctx, o, 4, shape4);
        for (int call = 0; call < 2; call++) {
          fill_values(&bnd, 1);
          fill_values(&unc, 1);
          apx_fusiongate_alpha_args a = APX_FUSIONGATE_ALPHA_ARGS_INIT;
          a.boundary = &bnd;
          a.uncertainty = &unc;
          a.boundary_log_weight = tu_normal(&rng);
          a.uncertainty_log_weight = tu_normal(&rng);
          a.bias = tu_normal(&rng);
          a.out = &want;
          CHECK_OK(apx_fusiongate_alpha(ctx, &a, &on_cpu), what);
          apx_tensor d_b = to_dev(ctx, &bnd), d_u = to_dev(ctx, &unc);
          dev_poison(ctx, &d_out);
          a.boundary = &d_b;
          a.uncertainty = &d_u;
          a.out = &d_out;
          CHECK_OK(apx_fusiongate_alpha(ctx, &a, &on_gpu), what);
          CHECK_OK(apx_sync(ctx, &on_gpu), what);
          apx_tensor got = to_host(ctx, &d_out);
          /* a sigmoid: the term's magnitude is 1, plus one storage ulp */
          int64_t n = apx_tensor_numel(&want);
          double *mag = malloc(sizeof(double) * (size_t)n);
          for (int64_t i = 0; i < n; i++) mag[i] = 1.0;
          expect_close(&got, &want, mag, 1, what);
          free(mag);
          tu_free(&got);
          dev_free(ctx, &d_b);
          dev_free(ctx, &d_u);
        }
        dev_free(ctx, &d_out);
        tu_free(&bnd);
        tu_free(&unc);
        tu_free(&want);
      }
}
END_TEST

START_TEST(test_fusiongate_fuse) {
  static const int64_t sizes[][4] = {{2, 3, 5, 7}, {1, 4, 8, 8}, {2, 16, 16, 16}};
  for (int d = 0; d < 3; d++)
    for (int s = 0; s < 3; s++)
      for (int alias = 0; alias < 2; alias++) {
        apx_dtype dt = float_dtypes[d];
        const int64_t *sz = sizes[s];
        char what[120];
        snprintf(what, sizeof what, "fusiongate_fuse %s %lldx%lldx%lldx%lld alias=%d",
                 apx_dtype_name(dt), (long long)sz[0], (long long)sz[1], (long long)sz[2],
                 (long long)sz[3], alias);
        apx_tensor base = tu_host(dt, 4, sz), detail = tu_host(dt, 4, sz);
        apx_tensor alpha = tu_host4(dt, sz[0], 1, sz[2], sz[3]), want = tu_host(dt, 4, sz);
        apx_tensor d_out = dev_alloc(ctx, dt, 4, sz);
        for (int call = 0; call < 2; call++) {
          fill_values(&base, 0);
          fill_values(&detail, 0);
          tu_fill_uniform(&rng, &alpha, 0.0, 1.0);
          apx_fusiongate_fuse_args a = APX_FUSIONGATE_FUSE_ARGS_INIT;
          a.base = &base;
          a.detail = &detail;
          a.alpha = &alpha;
          a.out = &want;
          CHECK_OK(apx_fusiongate_fuse(ctx, &a, &on_cpu), what);
          apx_tensor d_base = to_dev(ctx, &base), d_detail = to_dev(ctx, &detail);
          apx_tensor d_alpha = to_dev(ctx, &alpha);
          if (!alias) dev_poison(ctx, &d_out);
          a.base = &d_base;
          a.detail = &d_detail;
          a.alpha = &d_alpha;
          a.out = alias ? &d_base : &d_out;
          CHECK_OK(apx_fusiongate_fuse(ctx, &a, &on_gpu), what);
          CHECK_OK(apx_sync(ctx, &on_gpu), what);
          apx_tensor got = to_host(ctx, a.out);
          int64_t n = apx_tensor_numel(&want), hw = sz[2] * sz[3];
          double *mag = malloc(sizeof(double) * (size_t)n);
          for (int64_t i = 0; i < n; i++) {
            double b = tu_get(&base, i), x = tu_get(&detail, i);
            double al = tu_get(&alpha, (i / (sz[1] * hw)) * hw + i % hw);
            mag[i] = fabs(b) + fabs(al) * (fabs(x) + fabs(b));
          }
          expect_close(&got, &want, mag, 0, what);
          free(mag);
          tu_free(&got);
          dev_free(ctx, &d_base);
          dev_free(ctx, &d_detail);
          dev_free(ctx, &d_alpha);
        }
        dev_free(ctx, &d_out);
        tu_free(&base);
        tu_free(&detail);
        tu_free(&alpha);
        tu_free(&want);
      }
}
END_TEST

/* ---- tilessm_scan -------------------------------------------------------------- */

/* Magnitude of each output: the scan run on absolute values (the sum of the
 * absolute values of every term that reaches y), in double, plus the fp32
 * state's rounding error expressed in that unit. Decision 3's bound
 * (rtol * mag) is one formula's; the state carries the rounding errors of
 * every step before it, each decayed as its term is: a term j steps back
 * has gone through j + 1 steps of three roundings (d*s, om*drv, their sum),
 * so a side's error is up to 3u * og * W with W = sum of (j + 1) * d^j *
 * |term|, W_k = d*W_{k-1} + |s_k| (u = 2^-24; ~1/(1-d) times mag for
 * decays near 1, where the cpu's own sequential scan differs from the
 * float64 truth by more than rtol * mag; test seed 20261126, f32, K 1001:
 * cuda and cpu 6.3e-5 apart at |y| 2.1). */
static void scan_magnitude(const apx_tilessm_scan_args *a, double *mag) {
  int64_t B = a->tokens->shape[0], K = a->tokens->shape[1], C = a->tokens->shape[2];
  double lim = fabs(a->clamp_value);
  double state_err = 3.0 * ldexp(1.0, -24) / tol_of(a->tokens->dtype);
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      double d = tu_get(a->decay, c);
      d = d < 1e-6 ? 1e-6 : d > 1 - 1e-6 ? 1 - 1e-6 : d;
      double ig = fabs(tu_get(a->input_gain, c)), og = fabs(tu_get(a->output_gain, c));
      double sb = fabs(tu_get(a->state_bias, c));
      for (int dir = 0; dir < 2; dir++) {
        int used = a->direction == APX_SCAN_BIDIRECTIONAL || (int)a->direction == dir;
        if (!used) continue;
        double s = 0, w = 0;
        if (a->init_state)
          s = fabs(tu_get(a->init_state,
                          a->init_state->ndim == 3 ? (b * 2 + dir) * C + c : b * C + c));
        w = s;
        for (int64_t n = 0; n < K; n++) {
          int64_t k = dir == 0 ? n : K - 1 - n;
          double x = fabs(tu_get(a->tokens, (b * K + k) * C + c));
          if (isnan(x) || x > lim) x = isnan(x) ? 0 : lim;
          s = d * s + (1 - d) * (ig * x + sb);
          w = d * w + s;
          double y = og * s + state_err * og * w;
          int64_t i = (b * K + k) * C + c;
          mag[i] = (dir == 0 || a->direction != APX_SCAN_BIDIRECTIONAL) ? y : mag[i] + y;
        }
      }
    }
}

static void tilessm_case(apx_dtype dt, int64_t B, int64_t K, int64_t C, apx_scan_direction dir,
                         apx_scan_merge merge, int init_kind, int gate_kind, int with_final) {
  char what[200];
  snprintf(what, sizeof what, "tilessm %s B%lld K%lld C%lld dir=%d merge=%d init=%d gate=%d",
           apx_dtype_name(dt), (long long)B, (long long)K, (long long)C, (int)dir, (int)merge,
           init_kind, gate_kind);
  int bidir = dir == APX_SCAN_BIDIRECTIONAL;
  apx_tensor tokens = tu_host3(dt, B, K, C), want = tu_host3(dt, B, K, C);
  /* the parameter vectors in assorted dtypes (they may differ) */
  apx_tensor decay = tu_host1(float_dtypes[(B + 0) % 3], C);
  apx_tensor ig = tu_host1(float_dtypes[(B + 1) % 3], C);
  apx_tensor og = tu_host1(float_dtypes[(B + 2) % 3], C);
  apx_tensor sb = tu_host1(APX_DTYPE_F32, C);
  apx_tensor init = init_kind == 2 ? tu_host3(APX_DTYPE_F32, B, 2, C) : tu_host2(dt, B, C);
  apx_tensor gate = gate_kind == 2 ? tu_host3(dt, B, 1, C) : tu_host1(APX_DTYPE_F32, C);
  apx_tensor fs_want = bidir ? tu_host3(dt, B, 2, C) : tu_host2(dt, B, C);
  apx_tensor d_out = dev_alloc(ctx, dt, 3, want.shape);
  apx_tensor d_fs = dev_alloc(ctx, dt, fs_want.ndim, fs_want.shape);
  for (int call = 0; call < 2; call++) {
    fill_values(&tokens, call);
    tu_fill_uniform(&rng, &decay, 0.0, 1.0);
    tu_fill_uniform(&rng, &ig, 0.2, 1.5);
    tu_fill_uniform(&rng, &og, 0.2, 1.5);
    fill_values(&sb, 0);
    fill_values(&init, 0);
    tu_fill_uniform(&rng, &gate, -0.2, 1.2);
    apx_tilessm_scan_args a = APX_TILESSM_SCAN_ARGS_INIT;
    a.tokens = &tokens;
    a.decay = &decay;
    a.input_gain = &ig;
    a.output_gain = &og;
    a.state_bias = &sb;
    a.init_state = init_kind ? &init : NULL;
    a.merge_gate = gate_kind ? &gate : NULL;
    a.clamp_value = call ? 1e4 : 2.5;
    a.direction = dir;
    a.merge = merge;
    a.out = &want;
    a.final_state = with_final ? &fs_want : NULL;
    CHECK_OK(apx_tilessm_scan(ctx, &a, &on_cpu), what);
    apx_tensor d_tokens = to_dev(ctx, &tokens), d_decay = to_dev(ctx, &decay);
    apx_tensor d_ig = to_dev(ctx, &ig), d_og = to_dev(ctx, &og), d_sb = to_dev(ctx, &sb);
    apx_tensor d_init = to_dev(ctx, &init), d_gate = to_dev(ctx, &gate);
    dev_poison(ctx, &d_out);
    dev_poison(ctx, &d_fs);
    apx_tilessm_scan_args g = a;
    g.tokens = &d_tokens;
    g.decay = &d_decay;
    g.input_gain = &d_ig;
    g.output_gain = &d_og;
    g.state_bias = &d_sb;
    g.init_state = init_kind ? &d_init : NULL;
    g.merge_gate = gate_kind ? &d_gate : NULL;
    g.out = &d_out;
    g.final_state = with_final ? &d_fs : NULL;
    CHECK_OK(apx_tilessm_scan(ctx, &g, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, &d_out);
    int64_t n = apx_tensor_numel(&want);
    double *mag = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    scan_magnitude(&a, mag);
    expect_close(&got, &want, mag, 0, what);
    free(mag);
    tu_free(&got);
    if (with_final) {
      apx_tensor fs = to_host(ctx, &d_fs);
      /* a state's magnitude: bounded by the largest term reaching it */
      int64_t m = apx_tensor_numel(&fs_want);
      double *fmag = malloc(sizeof(double) * (size_t)m);
      for (int64_t i = 0; i < m; i++) fmag[i] = 4.0 * fmax(a.clamp_value, 1.0);
      expect_close(&fs, &fs_want, fmag, 0, what);
      free(fmag);
      tu_free(&fs);
    }
    dev_free(ctx, &d_tokens);
    dev_free(ctx, &d_decay);
    dev_free(ctx, &d_ig);
    dev_free(ctx, &d_og);
    dev_free(ctx, &d_sb);
    dev_free(ctx, &d_init);
    dev_free(ctx, &d_gate);
  }
  dev_free(ctx, &d_out);
  dev_free(ctx, &d_fs);
  tu_free(&tokens);
  tu_free(&want);
  tu_free(&decay);
  tu_free(&ig);
  tu_free(&og);
  tu_free(&sb);
  tu_free(&init);
  tu_free(&gate);
  tu_free(&fs_want);
}

START_TEST(test_tilessm) {
  for (int d = 0; d < 3; d++)
    for (int dir = 0; dir < 3; dir++)
      for (int merge = 0; merge < 3; merge++) {
        if (dir != APX_SCAN_BIDIRECTIONAL && merge != APX_MERGE_AVG) continue;
        apx_dtype dt = float_dtypes[d];
        /* short (one block-scan round), long (the chunked scan: few
         * streams, many steps) */
        tilessm_case(dt, 2, 37, 5, dir, merge, merge % 3, merge == APX_MERGE_GATED ? 1 : 0, 1);
        tilessm_case(dt, 1, 3001, 3, dir, merge, (merge + 1) % 3,
                     merge == APX_MERGE_GATED ? 2 : 0, 1);
        tilessm_case(dt, 3, 1, 4, dir, merge, 2, 0, merge & 1);
        tilessm_case(dt, 2, 0, 3, dir, merge, 1, 0, 1); /* K = 0: state = init */
        /* even C: two channels per thread, the block scan in two rounds */
        tilessm_case(dt, 2, 300, 6, dir, merge, (merge + 2) % 3,
                     merge == APX_MERGE_GATED ? 2 : 0, 1);
        /* the block scan over 4 (16-bit) or 8 (fp32) rounds, the last one
         * ending inside a warp's steps, with a partly filled channel group:
         * odd C (one channel a lane) and even C (two) */
        tilessm_case(dt, 2, 1001, 67, dir, merge, merge % 3, merge == APX_MERGE_GATED ? 1 : 0,
                     1);
        tilessm_case(dt, 2, 1001, 66, dir, merge, (merge + 1) % 3,
                     merge == APX_MERGE_GATED ? 2 : 0, merge & 1);
        /* enough streams (2*B*ceil(C/64) above the SM count) that the
         * block scan keeps two channels a thread, the large profile's
         * form; the shapes above take one channel a thread */
        tilessm_case(dt, 67, 40, 128, dir, merge, (merge + 2) % 3,
                     merge == APX_MERGE_GATED ? 1 : 0, 1);
      }
  /* the same over two rounds of 32-step warps (K > 512) */
  tilessm_case(APX_DTYPE_F16, 67, 600, 128, APX_SCAN_FORWARD, APX_MERGE_AVG, 1, 0, 1);
}
END_TEST

/* ---- gather / index_select -------------------------------------------------- */

static const apx_dtype data_dtypes[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16,
                                        APX_DTYPE_I32, APX_DTYPE_I64};

static void fill_data(const apx_tensor *t) {
  if (t->dtype == APX_DTYPE_I32 || t->dtype == APX_DTYPE_I64)
    tu_fill_int(&rng, t, -1000000, 1000000);
  else
    fill_values(t, 0);
}

static void gather_case(apx_dtype dt, apx_dtype it, int ndim, const int64_t *src_shape,
                        const int64_t *index_shape, int dim) {
  char what[160];
  snprintf(what, sizeof what, "gather %s/%s ndim %d dim %d", apx_dtype_name(dt),
           apx_dtype_name(it), ndim, dim);
  int d = dim < 0 ? dim + ndim : dim;
  apx_tensor src = tu_host(dt, ndim, src_shape), index = tu_host(it, ndim, index_shape);
  apx_tensor want = tu_host(dt, ndim, index_shape);
  apx_tensor d_out = dev_alloc(ctx, dt, ndim, index_shape);
  for (int call = 0; call < 2; call++) {
    fill_data(&src);
    tu_fill_int(&rng, &index, 0, src_shape[d] - 1);
    apx_gather_args a = APX_GATHER_ARGS_INIT;
    a.src = &src;
    a.dim = dim;
    a.index = &index;
    a.out = &want;
    CHECK_OK(apx_gather(ctx, &a, &on_cpu), what);
    apx_tensor d_src = to_dev(ctx, &src), d_index = to_dev(ctx, &index);
    dev_poison(ctx, &d_out);
    a.src = &d_src;
    a.index = &d_index;
    a.out = &d_out;
    CHECK_OK(apx_gather(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, &d_out);
    expect_exact(&got, &want, what);
    tu_free(&got);
    dev_free(ctx, &d_src);
    dev_free(ctx, &d_index);
  }
  dev_free(ctx, &d_out);
  tu_free(&src);
  tu_free(&index);
  tu_free(&want);
}

START_TEST(test_gather) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      int64_t s1[1] = {17}, i1[1] = {40};
      gather_case(data_dtypes[d], index_dtypes[i], 1, s1, i1, 0);
      int64_t s2[2] = {9, 7}, i2[2] = {12, 5};
      gather_case(data_dtypes[d], index_dtypes[i], 2, s2, i2, 0);
      gather_case(data_dtypes[d], index_dtypes[i], 2, s2, (int64_t[]){4, 11}, 1);
      int64_t s3[3] = {4, 6, 5}, i3[3] = {3, 9, 5};
      gather_case(data_dtypes[d], index_dtypes[i], 3, s3, i3, 1);
      gather_case(data_dtypes[d], index_dtypes[i], 3, s3, (int64_t[]){4, 6, 8}, -1);
      gather_case(data_dtypes[d], index_dtypes[i], 3, s3, (int64_t[]){2, 0, 5}, 0); /* empty */
    }
}
END_TEST

static void index_select_case(apx_dtype dt, apx_dtype it, int64_t M, int64_t D, int64_t N) {
  char what[160];
  snprintf(what, sizeof what, "index_select %s/%s M%lld D%lld N%lld", apx_dtype_name(dt),
           apx_dtype_name(it), (long long)M, (long long)D, (long long)N);
  apx_tensor src = tu_host2(dt, M, D), index = tu_host1(it, N), want = tu_host2(dt, N, D);
  apx_tensor d_out = dev_alloc(ctx, dt, 2, want.shape);
  for (int call = 0; call < 2; call++) {
    fill_data(&src);
    tu_fill_int(&rng, &index, 0, M - 1);
    apx_index_select_args a = APX_INDEX_SELECT_ARGS_INIT;
    a.src = &src;
    a.index = &index;
    a.out = &want;
    CHECK_OK(apx_index_select(ctx, &a, &on_cpu), what);
    apx_tensor d_src = to_dev(ctx, &src), d_index = to_dev(ctx, &index);
    dev_poison(ctx, &d_out);
    a.src = &d_src;
    a.index = &d_index;
    a.out = &d_out;
    CHECK_OK(apx_index_select(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, &d_out);
    expect_exact(&got, &want, what);
    tu_free(&got);
    dev_free(ctx, &d_src);
    dev_free(ctx, &d_index);
  }
  dev_free(ctx, &d_out);
  tu_free(&src);
  tu_free(&index);
  tu_free(&want);
}

START_TEST(test_index_select) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      index_select_case(data_dtypes[d], index_dtypes[i], 13, 3, 21);
      index_select_case(data_dtypes[d], index_dtypes[i], 64, 256, 100);
      index_select_case(data_dtypes[d], index_dtypes[i], 5, 9, 0);
    }
}
END_TEST

/* Copy ops move bits: tilepack, tileunpack override (ids and origins,
 * levels or not, aliased or not: every kernel form), gather and
 * index_select, with a quarter of the values NaN payloads, +-0 and
 * subnormals (bit_specials), bitwise against the cpu backend. */
START_TEST(test_copy_ops_move_bits) {
  bit_specials = 1;
  for (int d = 0; d < 3; d++) {
    apx_dtype dt = float_dtypes[d];
    for (int i = 0; i < 2; i++) {
      tilepack_case(dt, index_dtypes[i], 2, 3, 3, 4, 4, 9);
      int64_t s3[3] = {4, 6, 5}, i3[3] = {3, 9, 5};
      gather_case(dt, index_dtypes[i], 3, s3, i3, 1);
      index_select_case(dt, index_dtypes[i], 13, 3, 21);
      index_select_case(dt, index_dtypes[i], 64, 256, 100);
    }
    for (int combo = 0; combo < 8; combo++) {
      apx_dtype it = index_dtypes[combo & 1];
      int origins = (combo >> 1) & 1, levels = (combo >> 2) & 1;
      tileunpack_case(dt, it, 2, 3, 3, 4, 4, 9, origins, levels, APX_OVERLAP_OVERRIDE, 0);
      tileunpack_case(dt, it, 1, 2, 2, 3, 3, 13, origins, levels, APX_OVERLAP_OVERRIDE, 1);
      tileunpack_case(dt, it, 2, 37, 8, 6, 8, 30, origins, levels, APX_OVERLAP_OVERRIDE,
                      combo == 0);
      tileunpack_case(dt, it, 2, 5, 8, 9, 4, 100, origins, levels, APX_OVERLAP_OVERRIDE, 0);
    }
  }
  bit_specials = 0;
}
END_TEST

/* ---- scatter_add / gather_backward ----------------------------------------- */

/* Runs scatter_add (self != NULL) or gather_backward on both backends and
 * compares: integers exactly; floats within the bound with the magnitude
 * taken from the cpu backend's scatter_add of absolute values in f32. The
 * cuda result must also be run-to-run bit-identical. */
static void scatter_case(apx_dtype dt, apx_dtype it, int ndim, const int64_t *self_shape,
                         const int64_t *index_shape, const int64_t *src_shape, int dim,
                         int backward, int alias, int const_rows) {
  char what[200];
  snprintf(what, sizeof what, "%s %s/%s ndim %d dim %d alias=%d const_rows=%d",
           backward ? "gather_backward" : "scatter_add", apx_dtype_name(dt), apx_dtype_name(it),
           ndim, dim, alias, const_rows);
  int d = dim < 0 ? dim + ndim : dim;
  apx_tensor self = tu_host(dt, ndim, self_shape), index = tu_host(it, ndim, index_shape);
  apx_tensor src = tu_host(dt, ndim, backward ? index_shape : src_shape);
  apx_tensor want = tu_host(dt, ndim, self_shape);
  apx_tensor d_out = dev_alloc(ctx, dt, ndim, self_shape);
  int is_int = dt == APX_DTYPE_I32 || dt == APX_DTYPE_I64;
  for (int call = 0; call < 2; call++) {
    fill_data(&self);
    fill_data(&src);
    int64_t n = apx_tensor_numel(&index);
    int64_t row = ndim > 1 && index_shape[0] > 0 ? n / index_shape[0] : 1;
    /* few destinations: many duplicates */
    int64_t hi = self_shape[d] > 6 ? self_shape[d] / 3 : self_shape[d] - 1;
    for (int64_t i = 0; i < n; i++)
      set_index(&index, i,
                const_rows && i % row ? get_index(&index, i - i % row) : tu_int(&rng, 0, hi));
    apx_tensor d_self = to_dev(ctx, &self), d_index = to_dev(ctx, &index);
    apx_tensor d_src = to_dev(ctx, &src);
    if (backward) {
      apx_gather_backward_args a = APX_GATHER_BACKWARD_ARGS_INIT;
      a.grad_out = &src;
      a.dim = dim;
      a.index = &index;
      a.grad_src = &want;
      CHECK_OK(apx_gather_backward(ctx, &a, &on_cpu), what);
      dev_poison(ctx, &d_out);
      a.grad_out = &d_src;
      a.index = &d_index;
      a.grad_src = &d_out;
      CHECK_OK(apx_gather_backward(ctx, &a, &on_gpu), what);
    } else {
      apx_scatter_add_args a = APX_SCATTER_ADD_ARGS_INIT;
      a.self = &self;
      a.dim = dim;
      a.index = &index;
      a.src = &src;
      a.out = &want;
      CHECK_OK(apx_scatter_add(ctx, &a, &on_cpu), what);
      if (!alias) dev_poison(ctx, &d_out);
      a.self = &d_self;
      a.index = &d_index;
      a.src = &d_src;
      a.out = alias ? &d_self : &d_out;
      CHECK_OK(apx_scatter_add(ctx, &a, &on_gpu), what);
    }
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor got = to_host(ctx, alias && !backward ? &d_self : &d_out);
    if (is_int) {
      expect_exact(&got, &want, what);
    } else {
      /* magnitude: the same scatter of |self| and |src| in f32 on the cpu */
      apx_tensor aself = tu_host(APX_DTYPE_F32, ndim, self_shape);
      apx_tensor asrc = tu_host(APX_DTYPE_F32, ndim, src.shape);
      apx_tensor amag = tu_host(APX_DTYPE_F32, ndim, self_shape);
      for (int64_t i = 0; i < apx_tensor_numel(&self); i++)
        tu_set(&aself, i, backward ? 0.0 : fabs(tu_get(&self, i)));
      for (int64_t i = 0; i < apx_tensor_numel(&src); i++)
        tu_set(&asrc, i, fabs(tu_get(&src, i)));
      apx_scatter_add_args m = APX_SCATTER_ADD_ARGS_INIT;
      m.self = &aself;
      m.dim = dim;
      m.index = &index;
      m.src = &asrc;
      m.out = &amag;
      CHECK_OK(apx_scatter_add(ctx, &m, &on_cpu), what);
      int64_t on = apx_tensor_numel(&want);
      double *mag = malloc(sizeof(double) * (size_t)on);
      for (int64_t i = 0; i < on; i++) mag[i] = tu_get(&amag, i);
      expect_close(&got, &want, mag, 0, what);
      free(mag);
      tu_free(&aself);
      tu_free(&asrc);
      tu_free(&amag);
    }
    /* run-to-run: the same inputs again give the same bits */
    if (!alias) {
      apx_tensor again;
      if (backward) {
        apx_gather_backward_args a = APX_GATHER_BACKWARD_ARGS_INIT;
        a.grad_out = &d_src;
        a.dim = dim;
        a.index = &d_index;
        a.grad_src = &d_out;
        dev_poison(ctx, &d_out);
        CHECK_OK(apx_gather_backward(ctx, &a, &on_gpu), what);
      } else {
        apx_scatter_add_args a = APX_SCATTER_ADD_ARGS_INIT;
        a.self = &d_self;
        a.dim = dim;
        a.index = &d_index;
        a.src = &d_src;
        a.out = &d_out;
        dev_poison(ctx, &d_out);
        CHECK_OK(apx_scatter_add(ctx, &a, &on_gpu), what);
      }
      again = to_host(ctx, &d_out);
      ck_assert_msg(tu_bytes_equal(&again, &got), "%s: not run-to-run bit-identical", what);
      tu_free(&again);
    }
    tu_free(&got);
    dev_free(ctx, &d_self);
    dev_free(ctx, &d_index);
    dev_free(ctx, &d_src);
  }
  dev_free(ctx, &d_out);
  tu_free(&self);
  tu_free(&index);
  tu_free(&src);
  tu_free(&want);
}

START_TEST(test_scatter_add) {
  for (int d = 0; d < 5; d++)
    for (int i = 0; i < 2; i++) {
      apx_dtype dt = data_dtypes[d], it = index_dtypes[i];
      int64_t self1[1] = {11}, idx1[1] = {60};
      scatter_case(dt, it, 1, self1, idx1, (int64_t[]){70}, 0, 0, 0, 0);
      int64_t self2[2] = {9, 7}, idx2[2] = {30, 5}, src2[2] = {31, 7};
      for (int alias = 0; alias < 2; alias++) {
        scatter_case(dt, it, 2, self2, idx2, src2, 0, 0, alias, 0);
        scatter_case(dt, it, 2, self2, idx2, src2, 0, 0, alias, 1);
      }
      scatter_case(dt, it, 2, self2, (int64_t[]){6, 20}, (int64_t[]){7, 21}, 1, 0, 0, 0);
      int64_t self3[3] = {3, 8, 4}, idx3[3] = {3, 25, 4};
      scatter_case(dt, it, 3, self3, idx3, (int64_t[]){3, 25, 4}, -2, 0, 0, 0);
      scatter_case(dt, it, 3, self3, (int64_t[]){0, 8, 4}, (int64_t[]){3, 25, 4}, 0, 0, 0, 0);
      scatter_case(dt, it, 2, self2, idx2, NULL, 0, 1, 0, 0);
      scatter_case(dt, it, 3, self3, idx3, NULL, 1, 1, 0, 0);
      /* the direct path's multi-block shapes: several row chunks (512
       * rows, 256 for i64), column chunks of 8 (70 wide: a partial one,
       * element loads), src wider than the index (unaligned rows); slots
       * of one, two and more sources (values up to M / 3) */
      int64_t self4[2] = {1000, 70}, idx4[2] = {200, 40}, src4[2] = {210, 45};
      scatter_case(dt, it, 2, self4, idx4, src4, 0, 0, 0, 0);
      scatter_case(dt, it, 2, self4, idx4, src4, 0, 0, 1, 1);
      scatter_case(dt, it, 2, self4, idx4, NULL, 0, 1, 0, 0);
      /* the bench's seed shape (16-byte loads, sources in three row
       * chunks), and out rows at the direct path's bound (16 row chunks;
       * i64 takes the prep/tile path there) */
      int64_t self7[2] = {4096, 128}, idx7[2] = {256, 128};
      scatter_case(dt, it, 2, self7, idx7, idx7, 0, 0, 0, 0);
      int64_t self8[2] = {8192, 16}, idx8[2] = {256, 16};
      scatter_case(dt, it, 2, self8, idx8, idx8, 0, 0, 1, 0);
      /* 25 column chunks, src as wide as the index only */
      int64_t self9[2] = {600, 200}, idx9[2] = {50, 150};
      scatter_case(dt, it, 2, self9, idx9, idx9, 0, 0, 0, 0);
      /* validate=device: 150 column chunks, checked in the kernel; 4000,
       * checked beside it */
      int64_t self10[2] = {300, 1200}, idx10[2] = {256, 1200};
      scatter_case(dt, it, 2, self10, idx10, idx10, 0, 0, 0, 0);
      int64_t self11[2] = {16, 32000}, idx11[2] = {4, 32000};
      scatter_case(dt, it, 2, self11, idx11, idx11, 0, 0, 0, 0);
      /* the prep/tile path (out rows beyond the direct path's 16 row
       * chunks): out rows at its bound (1024 row groups of 16 rows; i64,
       * 8-row groups, takes the sort paths there) with 256 index rows */
      int64_t self5[2] = {16384, 3}, idx5[2] = {256, 3};
      scatter_case(dt, it, 2, self5, idx5, idx5, 0, 0, 0, 0);
      /* the same at 129 columns (17 prep blocks, 5 column chunks) */
      int64_t self6[2] = {16384, 129}, idx6[2] = {256, 129};
      scatter_case(dt, it, 2, self6, idx6, idx6, 0, 0, 0, 0);
    }
}
END_TEST

/* Large enough for the rows path's synchronised choice (constant rows) and
 * for the general path's multi-pass sort (varying rows). */
START_TEST(test_scatter_add_large) {
  int64_t self2[2] = {300, 512}, idx2[2] = {600, 512}, src2[2] = {600, 512};
  for (int d = 0; d < 3; d++)
    for (int rows = 0; rows < 2; rows++)
      scatter_case(float_dtypes[d], APX_DTYPE_I64, 2, self2, idx2, src2, 0, 0, 0, rows);
  scatter_case(APX_DTYPE_F16, APX_DTYPE_I32, 2, self2, idx2, src2, 0, 0, 1, 1);
  scatter_case(APX_DTYPE_BF16, APX_DTYPE_I32, 2, self2, idx2, NULL, 0, 1, 0, 1);
}
END_TEST

/* ---- bad device indices ------------------------------------------------------- */

/* One op with one bad device index value, under validate=device (nothing
 * written, APX_ERR_DEVICE at the next sync, then cleared) and
 * validate=eager (APX_ERR_INVALID_ARG at once, nothing written). */
typedef apx_status (*bad_call_fn)(apx_context *c, void *args);

static void expect_rejected(const char *what, bad_call_fn fn, void *args_device,
                            void *args_eager, const apx_tensor *out_device,
                            const apx_tensor *out_eager, const char *needle) {
  dev_poison(ctx, out_device);
  apx_status st = fn(ctx, args_device);
  if (st == APX_OK) {
    st = apx_sync(ctx, &on_gpu);
    ck_assert_msg(st == APX_ERR_DEVICE, "%s (device): sync gave %s, want APX_ERR_DEVICE", what,
                  apx_status_name(st));
  } else {
    ck_abort_msg("%s (device): the call gave %s: %s", what, apx_status_name(st),
                 apx_last_error());
  }
  ck_assert_msg(strstr(apx_last_error(), needle) != NULL, "%s (device): message [%s] lacks [%s]",
                what, apx_last_error(), needle);
  ck_assert_msg(dev_is_poisoned(ctx, out_device), "%s (device): output was written", what);
  CHECK_OK(apx_sync(ctx, &on_gpu), "the device error is reported once");

  dev_poison(ctx_eager, out_eager);
  st = fn(ctx_eager, args_eager);
  ck_assert_msg(st == APX_ERR_INVALID_ARG, "%s (eager): gave %s, want APX_ERR_INVALID_ARG",
                what, apx_status_name(st));
  ck_assert_msg(strstr(apx_last_error(), needle) != NULL, "%s (eager): message [%s] lacks [%s]",
                what, apx_last_error(), needle);
  ck_assert_msg(dev_is_poisoned(ctx_eager, out_eager), "%s (eager): output was written", what);
  CHECK_OK(apx_sync(ctx_eager, &on_gpu), "eager leaves no deferred error");
}

static apx_status call_tilepack(apx_context *c, void *a) {
  return apx_tilepack(c, a, &on_gpu);
}
static apx_status call_tileunpack(apx_context *c, void *a) {
  return apx_tileunpack(c, a, &on_gpu);
}
static apx_status call_fused(apx_context *c, void *a) {
  return apx_fused_pack_op_unpack(c, a, &on_gpu);
}
static apx_status call_gather(apx_context *c, void *a) { return apx_gather(c, a, &on_gpu); }
static apx_status call_index_select(apx_context *c, void *a) {
  return apx_index_select(c, a, &on_gpu);
}
static apx_status call_scatter_add(apx_context *c, void *a) {
  return apx_scatter_add(c, a, &on_gpu);
}
static apx_status call_gather_backward(apx_context *c, void *a) {
  return apx_gather_backward(c, a, &on_gpu);
}

/* Device tensors of one shape in both contexts. */
typedef struct twin {
  apx_tensor dev, eager;
} twin;

static twin twin_of(const apx_tensor *h) {
  twin t = {to_dev(ctx, h), to_dev(ctx_eager, h)};
  return t;
}

static void twin_free(twin *t) {
  dev_free(ctx, &t->dev);
  dev_free(ctx_eager, &t->eager);
}

/* scatter_add with index [N, cols] over self [M, cols] in f32, values in
 * range but -1 at `first` and M + 1 at `second`, which comes first in
 * row-major order: rejected in both modes with `message`. */
static void scatter_first_of_two(apx_dtype it, int64_t M, int64_t N, int64_t cols,
                                 int64_t first, int64_t second, const char *message) {
  apx_tensor widx = tu_host2(it, N, cols), wsrc = tu_host2(APX_DTYPE_F32, N, cols);
  apx_tensor wself = tu_host2(APX_DTYPE_F32, M, cols);
  tu_fill_int(&rng, &widx, 0, M - 1);
  set_index(&widx, first, -1);
  set_index(&widx, second, M + 1);
  fill_values(&wsrc, 0);
  fill_values(&wself, 0);
  twin twidx = twin_of(&widx), twsrc = twin_of(&wsrc), twself = twin_of(&wself);
  twin twout = twin_of(&wself);
  apx_scatter_add_args wd = APX_SCATTER_ADD_ARGS_INIT, we;
  wd.self = &twself.dev;
  wd.index = &twidx.dev;
  wd.src = &twsrc.dev;
  wd.out = &twout.dev;
  we = wd;
  we.self = &twself.eager;
  we.index = &twidx.eager;
  we.src = &twsrc.eager;
  we.out = &twout.eager;
  expect_rejected("scatter_add first of two", call_scatter_add, &wd, &we, &twout.dev,
                  &twout.eager, message);
  twin_free(&twidx);
  twin_free(&twsrc);
  twin_free(&twself);
  twin_free(&twout);
  tu_free(&widx);
  tu_free(&wsrc);
  tu_free(&wself);
}

/* tileunpack with ids idx [B,K] (and levels) on a 4x4 grid of 4x4 tiles,
 * fp16, C = 2: rejected in both modes with `needle`. B*K <= 256: the
 * table kernel's own check (validate=device); above: the check kernel
 * beside it. */
static void tileunpack_rejected(const char *what, const apx_tensor *idx,
                                const apx_tensor *levels, apx_overlap_mode mode,
                                const char *needle) {
  int64_t B = idx->shape[0], K = idx->shape[1];
  apx_tensor base = tu_host4(APX_DTYPE_F16, B, 2, 16, 16);
  apx_tensor packed = tu_host5(APX_DTYPE_F16, B, K, 2, 4, 4);
  fill_values(&base, 0);
  fill_values(&packed, 0);
  twin tb = twin_of(&base), tp = twin_of(&packed), ti = twin_of(idx), to = twin_of(&base);
  twin tl = levels ? twin_of(levels) : tb;
  apx_tileunpack_args d = APX_TILEUNPACK_ARGS_INIT, e;
  d.base = &tb.dev;
  d.packed = &tp.dev;
  d.idx = &ti.dev;
  d.levels = levels ? &tl.dev : NULL;
  d.mode = mode;
  d.out = &to.dev;
  e = d;
  e.base = &tb.eager;
  e.packed = &tp.eager;
  e.idx = &ti.eager;
  e.levels = levels ? &tl.eager : NULL;
  e.out = &to.eager;
  expect_rejected(what, call_tileunpack, &d, &e, &to.dev, &to.eager, needle);
  if (levels) twin_free(&tl);
  twin_free(&tb);
  twin_free(&tp);
  twin_free(&ti);
  twin_free(&to);
  tu_free(&base);
  tu_free(&packed);
}

/* The table kernel's own check (validate=device, B*K <= 256: each warp
 * reduces its entries, every thread merges the warps' shares) against
 * the exact check's verdict and message: the bad entry in the last warp,
 * K not a multiple of 32, the first of two bad ids, levels one step past
 * the key's limit (i32 and i64, near the dtypes' ends), a bad id beside a
 * bad span (the id is named), and the same beyond 256 entries (the check
 * kernel beside). Good inputs at the limit: test_tileunpack_limits. */
START_TEST(test_tileunpack_own_check) {
  char msg[256];
  for (int i = 0; i < 2; i++) {
    apx_dtype it = index_dtypes[i];
    apx_overlap_mode mode = i ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
    const int64_t shapes[3][2] = {{4, 64}, {3, 37}, {5, 52}}; /* 256, 111, 260 entries */
    for (int s = 0; s < 3; s++) {
      int64_t B = shapes[s][0], K = shapes[s][1];
      apx_tensor idx = tu_host2(it, B, K), levels = tu_host2(it, B, K);
      char what[96];
      /* an id past the grid at the very last entry */
      tu_fill_int(&rng, &idx, 0, 15);
      set_index(&idx, B * K - 1, 16);
      snprintf(what, sizeof what, "own check B%lld K%lld last id", (long long)B, (long long)K);
      snprintf(msg, sizeof msg, "idx[%lld][%lld] = [16] is outside [0, 15]", (long long)(B - 1),
               (long long)(K - 1));
      tileunpack_rejected(what, &idx, NULL, mode, msg);
      /* two bad ids: the first in row-major order is named */
      tu_fill_int(&rng, &idx, 0, 15);
      set_index(&idx, 1 * K + 5, -1);
      set_index(&idx, (B - 1) * K + K - 2, 99);
      snprintf(what, sizeof what, "own check B%lld K%lld first of two", (long long)B,
               (long long)K);
      tileunpack_rejected(what, &idx, NULL, mode, "idx[1][5] = [-1] is outside [0, 15]");
      /* levels one step past the int32 key near the bottom of their dtype */
      tu_fill_int(&rng, &idx, 0, 15);
      int64_t lo = it == APX_DTYPE_I64 ? INT64_MIN + 3 : INT32_MIN + 3;
      int64_t at_max = fill_levels_at_limit(&levels, lo, 1);
      int ob = 1;
      while (((int64_t)1 << ob) < K) ob++;
      long long top = (long long)(lo + (INT32_MAX >> ob) + 1);
      snprintf(what, sizeof what, "own check B%lld K%lld span", (long long)B, (long long)K);
      snprintf(msg, sizeof msg,
               "levels span [%lld, %lld]: the priority key ((level - lmin) << %d) + k "
               "overflows int32 at level [%lld], k = [%lld]",
               (long long)lo, top, ob, top, (long long)(at_max % K));
      tileunpack_rejected(what, &idx, &levels, mode, msg);
      /* a bad id and a bad span: the id is named */
      set_index(&idx, 2 * K + 3, 16);
      snprintf(what, sizeof what, "own check B%lld K%lld id and span", (long long)B,
               (long long)K);
      tileunpack_rejected(what, &idx, &levels, mode, "idx[2][3] = [16] is outside [0, 15]");
      tu_free(&idx);
      tu_free(&levels);
    }
    /* the widest spans: the dtype's two ends (i64: lmax - lmin wraps in
     * int64), one warp (the seed's K = 32) and one tile a row */
    const int64_t few[2][2] = {{1, 32}, {2, 1}};
    for (int s = 0; s < 2; s++) {
      int64_t B = few[s][0], K = few[s][1];
      apx_tensor idx = tu_host2(it, B, K), levels = tu_host2(it, B, K);
      tu_fill_int(&rng, &idx, 0, 15);
      tu_fill_int(&rng, &levels, -2, 3);
      int64_t lmin = it == APX_DTYPE_I64 ? INT64_MIN : INT32_MIN;
      int64_t lmax = it == APX_DTYPE_I64 ? INT64_MAX : INT32_MAX;
      set_index(&levels, 0, lmax);
      set_index(&levels, B * K - 1, lmin);
      snprintf(msg, sizeof msg, "levels span [%lld, %lld]", (long long)lmin, (long long)lmax);
      tileunpack_rejected("own check dtype ends", &idx, &levels, mode, msg);
      tu_free(&idx);
      tu_free(&levels);
    }
  }
}
END_TEST

/* Good levels at the key's limit (both ends present) and all equal at the
 * dtype's bottom, through the own check (B*K <= 256, one warp and eight,
 * K not a multiple of 32) and beyond it (260 entries): accepted, the
 * output as the cpu backend's. */
START_TEST(test_tileunpack_limits) {
  void (*fills[2])(const apx_tensor *) = {levels_at_limit, levels_all_bottom};
  for (int f = 0; f < 2; f++) {
    unpack_levels_fill = fills[f];
    for (int i = 0; i < 2; i++) {
      apx_dtype it = index_dtypes[i];
      for (int blend = 0; blend < 2; blend++) {
        apx_overlap_mode mode = blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
        tileunpack_case(APX_DTYPE_F16, it, 1, 4, 16, 16, 8, 32, 0, 1, mode, 0);
        tileunpack_case(APX_DTYPE_F16, it, 4, 2, 4, 4, 4, 64, 0, 1, mode, blend);
        tileunpack_case(APX_DTYPE_BF16, it, 3, 2, 4, 4, 4, 37, 0, 1, mode, 0);
        tileunpack_case(APX_DTYPE_F32, it, 5, 2, 4, 4, 4, 52, 0, 1, mode, 0);
      }
    }
  }
  unpack_levels_fill = NULL;
}
END_TEST

START_TEST(test_bad_indices) {
  for (int i = 0; i < 2; i++) {
    apx_dtype it = index_dtypes[i];
    /* tilepack: idx[1][2] = 12 on a 3x4 grid */
    apx_tensor f = tu_host4(APX_DTYPE_F16, 2, 3, 12, 16), idx = tu_host2(it, 2, 5);
    fill_values(&f, 0);
    tu_fill_int(&rng, &idx, 0, 11);
    set_index(&idx, 1 * 5 + 2, 12);
    apx_tensor packed_h = tu_host5(APX_DTYPE_F16, 2, 5, 3, 4, 4);
    twin tf = twin_of(&f), tidx = twin_of(&idx), tp = twin_of(&packed_h);
    apx_tilepack_args pd = APX_TILEPACK_ARGS_INIT, pe;
    pd.features = &tf.dev;
    pd.idx = &tidx.dev;
    pd.tile = 4;
    pd.out = &tp.dev;
    pe = pd;
    pe.features = &tf.eager;
    pe.idx = &tidx.eager;
    pe.out = &tp.eager;
    expect_rejected("tilepack", call_tilepack, &pd, &pe, &tp.dev, &tp.eager,
                    "idx[1][2] = [12] is outside [0, 11]");

    /* tileunpack with ids, then with origins, then with levels too far apart */
    twin tbase = twin_of(&f);
    apx_tensor out_h = tu_host4(APX_DTYPE_F16, 2, 3, 12, 16);
    twin tout = twin_of(&out_h);
    apx_tileunpack_args ud = APX_TILEUNPACK_ARGS_INIT, ue;
    ud.base = &tbase.dev;
    ud.packed = &tp.dev;
    ud.idx = &tidx.dev;
    ud.out = &tout.dev;
    ue = ud;
    ue.base = &tbase.eager;
    ue.packed = &tp.eager;
    ue.idx = &tidx.eager;
    ue.out = &tout.eager;
    /* the packed twins are poisoned by now: fine, they are inputs here */
    expect_rejected("tileunpack idx", call_tileunpack, &ud, &ue, &tout.dev, &tout.eager,
                    "idx[1][2] = [12] is outside [0, 11]");
    apx_tensor origins = tu_host3(it, 2, 5, 2);
    tu_fill_int(&rng, &origins, 0, 8);
    set_index(&origins, (0 * 5 + 3) * 2 + 1, 13); /* x0 13 > W - t = 12 */
    twin tor = twin_of(&origins);
    ud.idx = ue.idx = NULL;
    ud.origins = &tor.dev;
    ue.origins = &tor.eager;
    expect_rejected("tileunpack origins", call_tileunpack, &ud, &ue, &tout.dev, &tout.eager,
                    "origins[0][3] = [");
    apx_tensor levels = tu_host2(APX_DTYPE_I64, 2, 5);
    tu_fill_int(&rng, &levels, 0, 3);
    set_index(&levels, 7, (int64_t)1 << 40);
    tu_fill_int(&rng, &origins, 0, 8);
    twin tor2 = twin_of(&origins), tlev = twin_of(&levels);
    ud.origins = &tor2.dev;
    ue.origins = &tor2.eager;
    ud.levels = &tlev.dev;
    ue.levels = &tlev.eager;
    expect_rejected("tileunpack levels", call_tileunpack, &ud, &ue, &tout.dev, &tout.eager,
                    "levels span");

    /* fused: a repeated id with require_unique */
    apx_tensor uid = tu_host2(it, 2, 4);
    fill_unique(&uid, 12);
    set_index(&uid, 1 * 4 + 3, get_index(&uid, 1 * 4 + 1));
    twin tuid = twin_of(&uid);
    apx_fused_pack_op_unpack_args fd = APX_FUSED_PACK_OP_UNPACK_ARGS_INIT, fe;
    fd.features = &tf.dev;
    fd.idx = &tuid.dev;
    fd.tile = 4;
    fd.out = &tout.dev;
    fe = fd;
    fe.features = &tf.eager;
    fe.idx = &tuid.eager;
    fe.out = &tout.eager;
    expect_rejected("fused require_unique", call_fused, &fd, &fe, &tout.dev, &tout.eager,
                    "idx[1][3] = [");
    /* the same with K = 80 (the pre-pass's id map, not the in-kernel
     * check): a repeat in row 1 and an out-of-range id after it */
    apx_tensor f96 = tu_host4(APX_DTYPE_F16, 2, 3, 40, 40), uid80 = tu_host2(it, 2, 80);
    fill_values(&f96, 0);
    fill_unique(&uid80, 100);
    set_index(&uid80, 1 * 80 + 50, get_index(&uid80, 1 * 80 + 7));
    set_index(&uid80, 1 * 80 + 60, 100);
    twin tf96 = twin_of(&f96), tuid80 = twin_of(&uid80), tout96 = twin_of(&f96);
    fd.features = &tf96.dev;
    fd.idx = &tuid80.dev;
    fd.out = &tout96.dev;
    fe.features = &tf96.eager;
    fe.idx = &tuid80.eager;
    fe.out = &tout96.eager;
    char repeat[96]; /* the message names both positions */
    snprintf(repeat, sizeof repeat, "idx[1][50] = [%lld] repeats idx[1][7]",
             (long long)get_index(&uid80, 1 * 80 + 7));
    expect_rejected("fused require_unique K80", call_fused, &fd, &fe, &tout96.dev,
                    &tout96.eager, repeat);
    /* tileunpack with ids and levels too far apart: the in-kernel check's
     * span (K = 5) */
    ud.origins = ue.origins = NULL;
    ud.idx = &tidx.dev;
    ue.idx = &tidx.eager;
    set_index(&idx, 1 * 5 + 2, 3); /* the range is fine now */
    twin tidx2 = twin_of(&idx);
    ud.idx = &tidx2.dev;
    ue.idx = &tidx2.eager;
    expect_rejected("tileunpack idx levels", call_tileunpack, &ud, &ue, &tout.dev, &tout.eager,
                    "levels span");
    ud.levels = ue.levels = NULL;
    twin_free(&tf96);
    twin_free(&tuid80);
    twin_free(&tout96);
    twin_free(&tidx2);
    tu_free(&f96);
    tu_free(&uid80);

    /* gather, index_select, scatter_add, gather_backward: -1 */
    apx_tensor src = tu_host2(APX_DTYPE_F32, 8, 6), gidx = tu_host2(it, 4, 6);
    fill_values(&src, 0);
    tu_fill_int(&rng, &gidx, 0, 7);
    set_index(&gidx, 3 * 6 + 1, -1);
    apx_tensor gout_h = tu_host2(APX_DTYPE_F32, 4, 6);
    twin tsrc = twin_of(&src), tgidx = twin_of(&gidx), tgout = twin_of(&gout_h);
    apx_gather_args gd = APX_GATHER_ARGS_INIT, ge;
    gd.src = &tsrc.dev;
    gd.index = &tgidx.dev;
    gd.out = &tgout.dev;
    ge = gd;
    ge.src = &tsrc.eager;
    ge.index = &tgidx.eager;
    ge.out = &tgout.eager;
    expect_rejected("gather", call_gather, &gd, &ge, &tgout.dev, &tgout.eager,
                    "index[3][1] = [-1] is outside [0, 7]");

    apx_tensor sidx = tu_host1(it, 4);
    tu_fill_int(&rng, &sidx, 0, 7);
    set_index(&sidx, 2, 8);
    twin tsidx = twin_of(&sidx);
    apx_index_select_args sd = APX_INDEX_SELECT_ARGS_INIT, se;
    sd.src = &tsrc.dev;
    sd.index = &tsidx.dev;
    sd.out = &tgout.dev;
    se = sd;
    se.src = &tsrc.eager;
    se.index = &tsidx.eager;
    se.out = &tgout.eager;
    expect_rejected("index_select", call_index_select, &sd, &se, &tgout.dev, &tgout.eager,
                    "index[2] = [8] is outside [0, 7]");

    apx_tensor sout_h = tu_host2(APX_DTYPE_F32, 8, 6);
    twin tsout = twin_of(&sout_h);
    apx_scatter_add_args ad = APX_SCATTER_ADD_ARGS_INIT, ae;
    ad.self = &tsrc.dev;
    ad.index = &tgidx.dev;
    ad.src = &tgout.dev;
    ad.out = &tsout.dev;
    ae = ad;
    ae.self = &tsrc.eager;
    ae.index = &tgidx.eager;
    ae.src = &tgout.eager;
    ae.out = &tsout.eager;
    expect_rejected("scatter_add", call_scatter_add, &ad, &ae, &tsout.dev, &tsout.eager,
                    "index[3][1] = [-1] is outside [0, 7]");

    /* scatter_add's direct path (8 out rows) and prep/tile path (16384):
     * two bad values, the later one in row-major order in the first index
     * columns; both modes name the first. The direct path with 3 column
     * chunks (24 index columns, the bad values in different blocks) and 25
     * (200), then 17 prep blocks (129) */
    scatter_first_of_two(it, 8, 4, 24, 3 * 24 + 1, 2 * 24 + 20,
                         "index[2][20] = [9] is outside [0, 7]");
    scatter_first_of_two(it, 8, 4, 200, 3 * 200 + 1, 2 * 200 + 190,
                         "index[2][190] = [9] is outside [0, 7]");
    scatter_first_of_two(it, 16384, 256, 129, 3 * 129 + 1, 2 * 129 + 120,
                         "index[2][120] = [16385] is outside [0, 16383]");
    /* validate=device's check in the direct kernel: the first row chunk's
     * blocks report their index columns (one block a column chunk of 8).
     * 200 columns, the bad values in chunks 0 and 23; 1200 columns (150
     * chunks), in chunks 149 and 2, then two in chunk 149 in rows 255 and
     * 100; and 4000 column chunks, too many blocks to be resident at once:
     * the check beside the kernel */
    scatter_first_of_two(it, 8, 256, 200, 200 * 200 + 1, 100 * 200 + 190,
                         "index[100][190] = [9] is outside [0, 7]");
    scatter_first_of_two(it, 8, 256, 1200, 307199, 192017,
                         "index[160][17] = [9] is outside [0, 7]");
    scatter_first_of_two(it, 8, 256, 1200, 307199, 100 * 1200 + 1196,
                         "index[100][1196] = [9] is outside [0, 7]");
    scatter_first_of_two(it, 8, 4, 32000, 3 * 32000 + 1, 2 * 32000 + 31990,
                         "index[2][31990] = [9] is outside [0, 7]");

    apx_gather_backward_args bd = APX_GATHER_BACKWARD_ARGS_INIT, be;
    bd.grad_out = &tgout.dev;
    bd.index = &tgidx.dev;
    bd.grad_src = &tsout.dev;
    be = bd;
    be.grad_out = &tgout.eager;
    be.index = &tgidx.eager;
    be.grad_src = &tsout.eager;
    expect_rejected("gather_backward", call_gather_backward, &bd, &be, &tsout.dev, &tsout.eager,
                    "index[3][1] = [-1] is outside [0, 7]");

    twin_free(&tf);
    twin_free(&tidx);
    twin_free(&tp);
    twin_free(&tbase);
    twin_free(&tout);
    twin_free(&tor);
    twin_free(&tor2);
    twin_free(&tlev);
    twin_free(&tuid);
    twin_free(&tsrc);
    twin_free(&tgidx);
    twin_free(&tgout);
    twin_free(&tsidx);
    twin_free(&tsout);
    tu_free(&f);
    tu_free(&idx);
    tu_free(&packed_h);
    tu_free(&out_h);
    tu_free(&origins);
    tu_free(&levels);
    tu_free(&uid);
    tu_free(&src);
    tu_free(&gidx);
    tu_free(&gout_h);
    tu_free(&sidx);
    tu_free(&sout_h);
  }
}
END_TEST

/* ---- memory, copies, timer, device info ---------------------------------------- */

START_TEST(test_memory_and_timer) {
  int64_t shape[1] = {1000};
  apx_tensor h = tu_host1(APX_DTYPE_F32, 1000), back = tu_host1(APX_DTYPE_F32, 1000);
  fill_values(&h, 0);
  CHECK_OK(apx_reset_peak_memory(ctx, "cuda"), "reset peak");
  apx_tensor a = dev_alloc(ctx, APX_DTYPE_F32, 1, shape), b = dev_alloc(ctx, APX_DTYPE_F32, 1, shape);
  uint64_t peak = 0;
  CHECK_OK(apx_peak_memory(ctx, "cuda", &peak), "peak");
  ck_assert_msg(peak >= 8000, "peak %llu < the 8000 bytes allocated", (unsigned long long)peak);
  apx_timer *timer = NULL;
  CHECK_OK(apx_timer_begin(ctx, "cuda", &on_gpu, &timer), "timer_begin");
  CHECK_OK(apx_tensor_copy(ctx, &a, &h, NULL), "h2d");
  CHECK_OK(apx_tensor_copy(ctx, &b, &a, NULL), "d2d");
  double ms = -1;
  CHECK_OK(apx_timer_end(ctx, timer, &ms), "timer_end");
  ck_assert_msg(ms >= 0 && ms < 10000, "timer gave %g ms", ms);
  CHECK_OK(apx_tensor_copy(ctx, &back, &b, NULL), "d2h");
  ck_assert_msg(tu_bytes_equal(&back, &h), "host -> device -> device -> host changed the data");
  struct apx_device_info info;
  CHECK_OK(apx_device_info(ctx, APX_DEVICE_CUDA, 0, &info), "device_info");
  ck_assert_msg(info.name[0] && info.compute_major > 0 && info.multiprocessors > 0 &&
                    info.total_memory_bytes > 0 && info.runtime_version > 0,
                "device_info incomplete: %s cc %d.%d", info.name, info.compute_major,
                info.compute_minor);
  dev_free(ctx, &a);
  dev_free(ctx, &b);
  tu_free(&h);
  tu_free(&back);
}
END_TEST

/* ---- setup --------------------------------------------------------------------- */

int main(void) {
  const char *device_name = NULL;
  ctx = tu_open_cuda_or_skip(&device_name);
  printf("# cuda device: %s\n", device_name);
  ctx_eager = tu_open_cuda_eager();
  rng.s = tu_seed() ^ 0xc0dau;

  /* four cases, so that a sanitizer run can pick one (CK_RUN_CASE) */
  Suite *s = suite_create("cuda");
  TCase *pack = tcase_create("tilepack"), *ops = tcase_create("ops");
  TCase *large = tcase_create("large"), *bad = tcase_create("validate");
  tcase_set_timeout(pack, 600);
  tcase_set_timeout(ops, 600);
  tcase_set_timeout(large, 600);
  tcase_set_timeout(bad, 600);
  tcase_add_test(ops, test_memory_and_timer);
  tcase_add_test(pack, test_tilepack);
  tcase_add_test(ops, test_tileunpack);
  tcase_add_test(ops, test_tileunpack_limits);
  tcase_add_test(ops, test_fused);
  tcase_add_test(ops, test_fusiongate_alpha);
  tcase_add_test(ops, test_fusiongate_fuse);
  tcase_add_test(ops, test_tilessm);
  tcase_add_test(ops, test_gather);
  tcase_add_test(ops, test_index_select);
  tcase_add_test(ops, test_copy_ops_move_bits);
  tcase_add_test(ops, test_scatter_add);
  tcase_add_test(large, test_scatter_add_large);
  tcase_add_test(bad, test_bad_indices);
  tcase_add_test(bad, test_tileunpack_own_check);
  suite_add_tcase(s, pack);
  suite_add_tcase(s, ops);
  suite_add_tcase(s, large);
  suite_add_tcase(s, bad);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* CUDA does not survive fork */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  apx_close(ctx_eager);
  apx_close(ctx);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
