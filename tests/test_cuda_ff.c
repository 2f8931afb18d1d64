/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's FF path (apx_ff_infer, docs/ff_infer.md) against the
 * cpu backend, through the public API: heavy, detail and alpha on the
 * default profile and odd shapes (B > 1, small C, non-square grids, one
 * level only, no L0 tile), f32/f16/bf16, two calls on fresh inputs with the
 * device outputs poisoned before each; the device routing (stats) equal to
 * the host routing on quantised utilities (ties) with negative values;
 * graph replay bit-equal to eager launches, after new input contents and
 * after a new shape; a NaN utility reported at apx_sync (validate=device)
 * and at once (validate=eager, outputs untouched); a stream other than the
 * default one (when a shared cudart can be loaded); the FFModule's options
 * (docs/ff_infer.md, Options): all 24 combinations of order_mode,
 * overlap_mode and scan_mode against the cpu backend in every dtype (the
 * routing equal), on each refine, with blend_alpha 0, 1 and between;
 * blend_alpha 1 bit-equal to override and 0 leaving dense; graph replay
 * keyed by the options; every option taken by the cuda backend.
 *
 * Tolerance: each side carries its own error; the cuda backend sums the
 * token means, LayerNorm, the FiLM matrices, the depthwise and pointwise
 * convolutions and the GroupNorm statistics in another fp32 order (with
 * FMA), so a value rounded at an rnd point may land one storage ulp away,
 * and level 1 reads level 0's result. The bound is |cuda - cpu| <=
 * 4*(tol + tol*|cpu|) + 4 ulp(cpu), tol = 1e-5 (f32; the sums over 2C*t*t
 * terms get 1e-4), 2e-3 (f16), 1.6e-2 (bf16).
 *
 * Skipped (exit 77) where the cuda backend cannot run; no fork (CUDA). */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static apx_context *ctx;       /* validate = device (the build tree's config) */
static apx_context *ctx_eager; /* validate = eager */
static tu_rng rng;
static const apx_call on_cpu = {"cpu", NULL};
static const apx_call on_gpu = {"cuda", NULL};

#define CHECK_OK(expr, what)                                                   \
  do {                                                                         \
    apx_status check_st_ = (expr);                                             \
    ck_assert_msg(check_st_ == APX_OK, "%s: %s: %s: %s", (what), #expr,        \
                  apx_status_name(check_st_), apx_last_error());               \
  } while (0)

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

static double tol_of(apx_dtype dt) {
  return dt == APX_DTYPE_F32 ? 1e-4 : dt == APX_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

static double ulp_of(apx_dtype dt, double v) {
  int e;
  frexp(fabs(v) > 0 ? fabs(v) : 1e-30, &e);
  int mant = dt == APX_DTYPE_F32 ? 23 : dt == APX_DTYPE_F16 ? 10 : 7;
  int emin = dt == APX_DTYPE_F16 ? -13 : -125;
  if (e < emin) e = emin;
  return ldexp(1.0, e - 1 - mant);
}

/* The bound of the header; prints the worst error/bound ratio. */
static void expect_close(const apx_tensor *got, const apx_tensor *want, const char *what) {
  int64_t n = apx_tensor_numel(want);
  double tol = tol_of(want->dtype), worst = 0.0;
  int64_t worst_i = -1;
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
    double bound = 4.0 * (tol + tol * fabs(w)) + 4.0 * ulp_of(want->dtype, w);
    double r = fabs(g - w) / bound;
    if (r > worst) {
      worst = r;
      worst_i = i;
    }
    ck_assert_msg(fabs(g - w) <= bound, "%s: element %lld: cuda %.9g, cpu %.9g (bound %.3g)",
                  what, (long long)i, g, w, bound);
  }
  printf("# %s: worst |err|/bound %.3f at %lld\n", what, worst, (long long)worst_i);
}

static void expect_same_bits(const apx_tensor *a, const apx_tensor *b, const char *what) {
  ck_assert_msg(tu_bytes_equal(a, b), "%s: results differ", what);
}

/* ---- one case ------------------------------------------------------------------- */

typedef struct ff_case {
  apx_dtype dt;
  int64_t B, C, H, W, t0, kmax0, kmax1;
  double b1, b2, cost_heavy, cost_cheap;
  int nesting, split, proxies, quantised;
  /* the FFModule's options (docs/ff_infer.md, Options); zero: the defaults
   * (hilbert, override, bidirectional); blend_alpha is read with blend */
  int order, blend, scan_fwd;
  double blend_alpha;
} ff_case;

/* the options' fields of an ff_case at the defaults */
#define FF_DEFAULTS 0, 0, 0, 0.5

typedef struct ff_io {
  apx_tensor dense, util, split, bp, up; /* host */
  apx_tensor heavy, detail, alpha;       /* host (cpu results) */
  int64_t *sel0, *sel1, *l0, *l1;
  double *sp1, *sp2;
  apx_ff_stats stats;
} ff_io;

static int64_t g0_of(const ff_case *c) { return (c->H / c->t0) * (c->W / c->t0); }

static void io_make(const ff_case *c, ff_io *io) {
  memset(io, 0, sizeof *io);
  int64_t G0 = g0_of(c);
  io->dense = tu_host4(c->dt, c->B, c->C, c->H, c->W);
  io->util = tu_host2(APX_DTYPE_F32, c->B, G0);
  io->split = tu_host2(c->dt, c->B, G0);
  io->bp = tu_host4(c->dt, c->B, 1, c->H, c->W);
  io->up = tu_host3(APX_DTYPE_F32, c->B, c->H, c->W);
  io->heavy = tu_host4(c->dt, c->B, c->C, c->H, c->W);
  io->detail = tu_host4(c->dt, c->B, c->C, c->H, c->W);
  io->alpha = tu_host4(c->dt, c->B, 1, c->H, c->W);
  io->sel0 = calloc((size_t)c->B + 1, 8);
  io->sel1 = calloc((size_t)c->B + 1, 8);
  io->sp1 = calloc((size_t)c->B + 1, 8);
  io->sp2 = calloc((size_t)c->B + 1, 8);
  io->l0 = calloc((size_t)(c->B * c->kmax0) + 1, 8);
  io->l1 = calloc((size_t)(c->B * c->kmax1) + 1, 8);
  io->stats.selected_l0 = io->sel0;
  io->stats.selected_l1 = io->sel1;
  io->stats.budget_b1_spent = io->sp1;
  io->stats.budget_b2_spent = io->sp2;
  io->stats.l0_ids = io->l0;
  io->stats.l1_ids = io->l1;
}

static void io_free(ff_io *io) {
  tu_free(&io->dense);
  tu_free(&io->util);
  tu_free(&io->split);
  tu_free(&io->bp);
  tu_free(&io->up);
  tu_free(&io->heavy);
  tu_free(&io->detail);
  tu_free(&io->alpha);
  free(io->sel0);
  free(io->sel1);
  free(io->sp1);
  free(io->sp2);
  free(io->l0);
  free(io->l1);
}

/* Fresh inputs: dense N(0,1); utilities N(0,1) (negative ones included),
 * quantised to quarters for ties; proxies in [-0.5, 1.5). */
static void io_fill(const ff_case *c, ff_io *io) {
  tu_fill_normal(&rng, &io->dense);
  int64_t n = apx_tensor_numel(&io->util);
  for (int64_t i = 0; i < n; i++) {
    double u = tu_normal(&rng), s = tu_normal(&rng);
    if (c->quantised) {
      u = floor(u * 4.0) / 4.0;
      s = floor(s * 2.0) / 2.0;
    }
    tu_set(&io->util, i, u);
    tu_set(&io->split, i, s);
  }
  tu_fill_uniform(&rng, &io->bp, -0.5, 1.5);
  tu_fill_uniform(&rng, &io->up, -0.5, 1.5);
}

static apx_ff_infer_args args_of(const ff_case *c, const apx_ff_weights *w, const apx_tensor *dense,
                                 const apx_tensor *util, const apx_tensor *split,
                                 const apx_tensor *bp, const apx_tensor *up,
                                 const apx_tensor *heavy, const apx_tensor *detail,
                                 const apx_tensor *alpha) {
  apx_ff_infer_args a = APX_FF_INFER_ARGS_INIT;
  a.dense = dense;
  a.utilities = util;
  a.split_utilities = c->split ? split : NULL;
  a.boundary = c->proxies ? bp : NULL;
  a.uncertainty = c->proxies ? up : NULL;
  a.weights = w;
  a.tile_l0 = c->t0;
  a.tile_l1 = c->t0 / 2;
  a.kmax_l0 = c->kmax0;
  a.kmax_l1 = c->kmax1;
  a.budget_b1 = c->b1;
  a.budget_b2 = c->b2;
  a.cost_heavy = c->cost_heavy;
  a.cost_cheap = c->cost_cheap;
  a.enable_nesting = c->nesting;
  a.order_mode = (apx_order_mode)c->order;
  a.overlap_mode = c->blend ? APX_OVERLAP_BLEND : APX_OVERLAP_OVERRIDE;
  if (c->blend)
    a.blend_alpha = c->blend_alpha;
  a.scan_mode = c->scan_fwd ? APX_SCAN_FORWARD : APX_SCAN_BIDIRECTIONAL;
  a.heavy = heavy;
  a.detail = detail;
  a.alpha = alpha;
  return a;
}

static void compare_stats(const ff_case *c, const ff_io *want, const ff_io *got, const char *what) {
  for (int64_t b = 0; b < c->B; b++) {
    ck_assert_msg(got->sel0[b] == want->sel0[b] && got->sel1[b] == want->sel1[b],
                  "%s: row %lld: selected cuda (%lld, %lld), host (%lld, %lld)", what,
                  (long long)b, (long long)got->sel0[b], (long long)got->sel1[b],
                  (long long)want->sel0[b], (long long)want->sel1[b]);
    ck_assert_msg(memcmp(&got->sp1[b], &want->sp1[b], 8) == 0 &&
                      memcmp(&got->sp2[b], &want->sp2[b], 8) == 0,
                  "%s: row %lld: spent cuda (%.17g, %.17g), host (%.17g, %.17g)", what,
                  (long long)b, got->sp1[b], got->sp2[b], want->sp1[b], want->sp2[b]);
  }
  for (int64_t i = 0; i < c->B * c->kmax0; i++)
    ck_assert_msg(got->l0[i] == want->l0[i], "%s: l0_ids[%lld]: cuda %lld, host %lld", what,
                  (long long)i, (long long)got->l0[i], (long long)want->l0[i]);
  for (int64_t i = 0; i < c->B * c->kmax1; i++)
    ck_assert_msg(got->l1[i] == want->l1[i], "%s: l1_ids[%lld]: cuda %lld, host %lld", what,
                  (long long)i, (long long)got->l1[i], (long long)want->l1[i]);
}

static const char *const order_names[] = {"hilbert", "l2r", "r2l", "u2d", "d2u",
                                          "multi_direction"};

/* cuda (device tensors, stats) against cpu (host copies), two calls. */
static void run_case(const ff_case *c, const char *name) {
  char what[256];
  char overlap[48] = "override";
  if (c->blend)
    snprintf(overlap, sizeof overlap, "blend %.17g", c->blend_alpha);
  snprintf(what, sizeof what, "%s %s B%lld C%lld %lldx%lld t%lld %s %s %s", name,
           apx_dtype_name(c->dt), (long long)c->B, (long long)c->C, (long long)c->H,
           (long long)c->W, (long long)c->t0, order_names[c->order], overlap,
           c->scan_fwd ? "forward" : "bidirectional");
  apx_ff_weights *w = NULL;
  CHECK_OK(apx_ff_weights_seeded(ctx, c->C, 1000 + (uint64_t)c->C, &w), what);
  ff_io want, got;
  io_make(c, &want);
  io_make(c, &got);
  apx_tensor d_heavy = dev_alloc(ctx, c->dt, 4, want.heavy.shape);
  apx_tensor d_detail = dev_alloc(ctx, c->dt, 4, want.detail.shape);
  apx_tensor d_alpha = dev_alloc(ctx, c->dt, 4, want.alpha.shape);
  for (int call = 0; call < 2; call++) {
    io_fill(c, &want);
    apx_ff_infer_args a = args_of(c, w, &want.dense, &want.util, &want.split, &want.bp, &want.up,
                                  &want.heavy, &want.detail, &want.alpha);
    a.stats = &want.stats;
    CHECK_OK(apx_ff_infer(ctx, &a, &on_cpu), what);
    apx_tensor d_dense = to_dev(ctx, &want.dense), d_util = to_dev(ctx, &want.util);
    apx_tensor d_split = to_dev(ctx, &want.split), d_bp = to_dev(ctx, &want.bp);
    apx_tensor d_up = to_dev(ctx, &want.up);
    dev_poison(ctx, &d_heavy);
    dev_poison(ctx, &d_detail);
    dev_poison(ctx, &d_alpha);
    a = args_of(c, w, &d_dense, &d_util, &d_split, &d_bp, &d_up, &d_heavy, &d_detail, &d_alpha);
    a.stats = &got.stats;
    CHECK_OK(apx_ff_infer(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    compare_stats(c, &want, &got, what);
    apx_tensor h = to_host(ctx, &d_heavy), d = to_host(ctx, &d_detail), al = to_host(ctx, &d_alpha);
    char sub[300];
    snprintf(sub, sizeof sub, "%s call %d heavy", what, call);
    expect_close(&h, &want.heavy, sub);
    snprintf(sub, sizeof sub, "%s call %d detail", what, call);
    expect_close(&d, &want.detail, sub);
    snprintf(sub, sizeof sub, "%s call %d alpha", what, call);
    expect_close(&al, &want.alpha, sub);
    tu_free(&h);
    tu_free(&d);
    tu_free(&al);
    apx_tensor_free(ctx, &d_dense);
    apx_tensor_free(ctx, &d_util);
    apx_tensor_free(ctx, &d_split);
    apx_tensor_free(ctx, &d_bp);
    apx_tensor_free(ctx, &d_up);
  }
  apx_tensor_free(ctx, &d_heavy);
  apx_tensor_free(ctx, &d_detail);
  apx_tensor_free(ctx, &d_alpha);
  io_free(&want);
  io_free(&got);
  apx_ff_weights_free(ctx, w);
}

static ff_case default_case(apx_dtype dt) {
  ff_case c = {dt, 1, 128, 128, 128, 16, 32, 64, 16.0, 8.0, 1.0, 0.2, 1, 1, 1, 0, FF_DEFAULTS};
  return c;
}

START_TEST(test_default_profile) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  for (int i = 0; i < 3; i++) {
    ff_case c = default_case(dts[i]);
    run_case(&c, "default");
  }
}
END_TEST

START_TEST(test_odd_shapes) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  for (int i = 0; i < 3; i++) {
    apx_dtype dt = dts[i];
    /* B 2, C 5, a 6x4 grid of 8-pixel tiles, quantised utilities */
    ff_case a = {dt, 2, 5, 48, 32, 8, 10, 24, 7.5, 3.0, 1.0, 0.25, 1, 1, 1, 1, FF_DEFAULTS};
    run_case(&a, "odd");
    /* C 3, 5x3 grid of 4-pixel tiles, no split utilities: one level */
    ff_case b = {dt, 3, 3, 20, 12, 4, 15, 8, 4.0, 2.0, 2.0, 1.0, 1, 0, 0, 1, FF_DEFAULTS};
    run_case(&b, "one level");
    /* nesting off; C 40 (not a multiple of 8 outputs per thread), t 12 */
    ff_case d = {dt, 1, 40, 36, 48, 12, 12, 16, 5.0, 4.0, 1.0, 0.2, 0, 1, 1, 0, FF_DEFAULTS};
    run_case(&d, "nesting off");
    /* no L0 tile: budget below one tile's cost */
    ff_case e = {dt, 2, 4, 16, 16, 4, 8, 8, 0.5, 2.0, 1.0, 0.2, 1, 1, 1, 0, FF_DEFAULTS};
    run_case(&e, "dense path");
    /* kmax_l1 smaller than 4 x parents; C 200 (two output passes) */
    ff_case f = {dt, 1, 200, 32, 32, 8, 16, 6, 16.0, 8.0, 1.0, 0.2, 1, 1, 0, 1, FF_DEFAULTS};
    run_case(&f, "kmax_l1 6");
    /* C 384: level 0's refine over 2 kernels (too much shared memory for one
     * cluster a tile), level 1's in one */
    ff_case g = {dt, 1, 384, 32, 32, 16, 4, 16, 16.0, 8.0, 1.0, 0.2, 1, 1, 1, 0, FF_DEFAULTS};
    run_case(&g, "C 384");
    /* C 48: f16/bf16 take the tensor-core pointwise with 3 k steps of 16
     * channels and 6 row tiles of outputs (fewer than the block's warps) */
    ff_case h = {dt, 2, 48, 32, 32, 8, 8, 16, 6.0, 3.0, 1.0, 0.2, 1, 1, 1, 0, FF_DEFAULTS};
    run_case(&h, "C 48");
  }
}
END_TEST

/* The default tile sizes with other shapes: f16/bf16 take the tensor-core
 * refine of tiles 16 and 8 (ff_tc_kernel) with B 2 and C 32 (2 k steps, 4
 * row tiles of outputs: fewer than the block's warps), level 1's tokens
 * from level 0's refine in both rows; then one level (nesting off); then
 * a batch of 8. */
START_TEST(test_tc_shapes) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  for (int i = 0; i < 3; i++) {
    ff_case a = {dts[i], 2, 32, 64, 64, 16, 8, 16, 6.0, 3.0, 1.0, 0.2, 1, 1, 1, 0, FF_DEFAULTS};
    run_case(&a, "tc two levels");
    ff_case b = {dts[i], 2, 32, 64, 48, 16, 6, 8, 4.0, 2.0, 1.0, 0.2, 0, 1, 1, 0, FF_DEFAULTS};
    run_case(&b, "tc one level");
    /* B 8 x 16 level-1 tiles x 2 blocks: more blocks than SMs, level 1
     * still on the tensor cores in 16-pixel blocks */
    ff_case c = {dts[i], 8, 32, 64, 64, 16, 8, 16, 6.0, 3.0, 1.0, 0.2, 1, 1, 1, 0, FF_DEFAULTS};
    run_case(&c, "tc batch 8");
  }
}
END_TEST

/* Routing alone: many rows, large grids, ties (stats against the host). */
START_TEST(test_routing) {
  ff_case cases[] = {
      {APX_DTYPE_F32, 5, 1, 128, 128, 4, 300, 400, 200.0, 90.0, 1.0, 0.5, 1, 1, 0, 1, FF_DEFAULTS},
      {APX_DTYPE_F16, 3, 2, 64, 96, 4, 384, 40, 1e9, 1e9, 1.0, 0.2, 1, 1, 0, 1, FF_DEFAULTS},
      {APX_DTYPE_BF16, 4, 1, 40, 24, 2, 240, 960, 60.0, 30.0, 0.5, 0.2, 1, 1, 0, 1, FF_DEFAULTS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], "routing");
}
END_TEST

/* ---- graph replay and streams --------------------------------------------------- */

typedef int (*stream_create_fn)(void **stream);
typedef int (*stream_destroy_fn)(void *stream);

/* A stream from a shared cudart, NULL when none loads. */
static void *make_stream(void **lib) {
  static const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                "libcudart.so.11.0"};
  *lib = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !*lib; i++)
    *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!*lib) return NULL;
  stream_create_fn create = (stream_create_fn)dlsym(*lib, "cudaStreamCreate");
  void *s = NULL;
  if (!create || create(&s) != 0) return NULL;
  return s;
}

static void drop_stream(void *lib, void *s) {
  if (!lib) return;
  stream_destroy_fn destroy = (stream_destroy_fn)dlsym(lib, "cudaStreamDestroy");
  if (s && destroy) destroy(s);
  dlclose(lib);
}

/* graph_replay against eager launches on `call`: first call (capture),
 * a hit, new contents behind the same pointers, a new shape. */
static void graph_on(const apx_call *call, const char *name) {
  ff_case c = default_case(APX_DTYPE_F16);
  apx_ff_weights *w = NULL;
  CHECK_OK(apx_ff_weights_seeded(ctx, c.C, 123, &w), name);
  for (int shape = 0; shape < 2; shape++) {
    if (shape == 1) {
      c.B = 2;
      c.H = 96;
    }
    ff_io io;
    io_make(&c, &io);
    apx_tensor d_dense = dev_alloc(ctx, c.dt, 4, io.dense.shape);
    apx_tensor d_util = dev_alloc(ctx, APX_DTYPE_F32, 2, io.util.shape);
    apx_tensor d_split = dev_alloc(ctx, c.dt, 2, io.split.shape);
    apx_tensor d_bp = dev_alloc(ctx, c.dt, 4, io.bp.shape), d_up = dev_alloc(ctx, APX_DTYPE_F32, 3, io.up.shape);
    apx_tensor e_out[3], g_out[3];
    const apx_tensor *shapes[3] = {&io.heavy, &io.detail, &io.alpha};
    for (int i = 0; i < 3; i++) {
      e_out[i] = dev_alloc(ctx, c.dt, 4, shapes[i]->shape);
      g_out[i] = dev_alloc(ctx, c.dt, 4, shapes[i]->shape);
    }
    for (int round = 0; round < 3; round++) {
      char what[200];
      snprintf(what, sizeof what, "%s: shape %d round %d", name, shape, round);
      io_fill(&c, &io);
      CHECK_OK(apx_tensor_copy(ctx, &d_dense, &io.dense, NULL), what);
      CHECK_OK(apx_tensor_copy(ctx, &d_util, &io.util, NULL), what);
      CHECK_OK(apx_tensor_copy(ctx, &d_split, &io.split, NULL), what);
      CHECK_OK(apx_tensor_copy(ctx, &d_bp, &io.bp, NULL), what);
      CHECK_OK(apx_tensor_copy(ctx, &d_up, &io.up, NULL), what);
      for (int i = 0; i < 3; i++) {
        dev_poison(ctx, &e_out[i]);
        dev_poison(ctx, &g_out[i]);
      }
      apx_ff_infer_args a = args_of(&c, w, &d_dense, &d_util, &d_split, &d_bp, &d_up, &e_out[0],
                                    &e_out[1], &e_out[2]);
      CHECK_OK(apx_ff_infer(ctx, &a, call), what);
      a.heavy = &g_out[0];
      a.detail = &g_out[1];
      a.alpha = &g_out[2];
      a.graph_replay = 1;
      CHECK_OK(apx_ff_infer(ctx, &a, call), what);
      if (round == 2) CHECK_OK(apx_ff_infer(ctx, &a, call), what); /* a second replay */
      CHECK_OK(apx_sync(ctx, call), what);
      for (int i = 0; i < 3; i++) {
        apx_tensor he = to_host(ctx, &e_out[i]), hg = to_host(ctx, &g_out[i]);
        ck_assert_msg(!tu_is_poisoned(&hg), "%s: graph output %d not written", what, i);
        expect_same_bits(&hg, &he, what);
        tu_free(&he);
        tu_free(&hg);
      }
    }
    for (int i = 0; i < 3; i++) {
      apx_tensor_free(ctx, &e_out[i]);
      apx_tensor_free(ctx, &g_out[i]);
    }
    apx_tensor_free(ctx, &d_dense);
    apx_tensor_free(ctx, &d_util);
    apx_tensor_free(ctx, &d_split);
    apx_tensor_free(ctx, &d_bp);
    apx_tensor_free(ctx, &d_up);
    io_free(&io);
  }
  apx_ff_weights_free(ctx, w);
}

START_TEST(test_graph_replay) { graph_on(&on_gpu, "graph, default stream"); }
END_TEST

START_TEST(test_stream) {
  void *lib = NULL;
  void *s = make_stream(&lib);
  if (!s) {
    printf("# test_stream: no shared cudart to make a stream; the default stream only\n");
    drop_stream(lib, NULL);
    return;
  }
  apx_call call = {"cuda", s};
  graph_on(&call, "graph, own stream");
  /* and cuda against cpu on that stream */
  ff_case c = default_case(APX_DTYPE_BF16);
  c.B = 2;
  c.H = 64;
  apx_ff_weights *w = NULL;
  CHECK_OK(apx_ff_weights_seeded(ctx, c.C, 77, &w), "stream");
  ff_io io;
  io_make(&c, &io);
  io_fill(&c, &io);
  apx_ff_infer_args a = args_of(&c, w, &io.dense, &io.util, &io.split, &io.bp, &io.up, &io.heavy,
                                &io.detail, &io.alpha);
  CHECK_OK(apx_ff_infer(ctx, &a, &on_cpu), "stream cpu");
  apx_tensor d_dense = to_dev(ctx, &io.dense), d_util = to_dev(ctx, &io.util);
  apx_tensor d_split = to_dev(ctx, &io.split), d_bp = to_dev(ctx, &io.bp), d_up = to_dev(ctx, &io.up);
  apx_tensor d_h = dev_alloc(ctx, c.dt, 4, io.heavy.shape), d_d = dev_alloc(ctx, c.dt, 4, io.detail.shape);
  apx_tensor d_a = dev_alloc(ctx, c.dt, 4, io.alpha.shape);
  dev_poison(ctx, &d_h);
  dev_poison(ctx, &d_d);
  dev_poison(ctx, &d_a);
  a = args_of(&c, w, &d_dense, &d_util, &d_split, &d_bp, &d_up, &d_h, &d_d, &d_a);
  CHECK_OK(apx_ff_infer(ctx, &a, &call), "stream cuda");
  CHECK_OK(apx_sync(ctx, &call), "stream sync");
  apx_tensor h = to_host(ctx, &d_h), d = to_host(ctx, &d_d), al = to_host(ctx, &d_a);
  expect_close(&h, &io.heavy, "stream heavy");
  expect_close(&d, &io.detail, "stream detail");
  expect_close(&al, &io.alpha, "stream alpha");
  tu_free(&h);
  tu_free(&d);
  tu_free(&al);
  apx_tensor *all[] = {&d_dense, &d_util, &d_split, &d_bp, &d_up, &d_h, &d_d, &d_a};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) apx_tensor_free(ctx, all[i]);
  io_free(&io);
  apx_ff_weights_free(ctx, w);
  drop_stream(lib, s);
}
END_TEST

/* ---- NaN utilities ----------------------------------------------------------------- */

static void nan_on(apx_context *c_ctx, int eager, int in_split) {
  ff_case c = {APX_DTYPE_F16, 2, 8, 32, 32, 8, 8, 16, 6.0, 2.0, 1.0, 0.2, 1, 1, 0, 0, FF_DEFAULTS};
  const char *what = eager ? "nan eager" : "nan device";
  apx_ff_weights *w = NULL;
  CHECK_OK(apx_ff_weights_seeded(c_ctx, c.C, 5, &w), what);
  ff_io io;
  io_make(&c, &io);
  io_fill(&c, &io);
  tu_set(in_split ? &io.split : &io.util, 1 * g0_of(&c) + 3, NAN); /* [1][3] */
  apx_tensor d_dense = to_dev(c_ctx, &io.dense), d_util = to_dev(c_ctx, &io.util);
  apx_tensor d_split = to_dev(c_ctx, &io.split);
  apx_tensor d_h = dev_alloc(c_ctx, c.dt, 4, io.heavy.shape), d_d = dev_alloc(c_ctx, c.dt, 4, io.detail.shape);
  apx_tensor d_a = dev_alloc(c_ctx, c.dt, 4, io.alpha.shape);
  dev_poison(c_ctx, &d_h);
  dev_poison(c_ctx, &d_d);
  dev_poison(c_ctx, &d_a);
  apx_ff_infer_args a = args_of(&c, w, &d_dense, &d_util, &d_split, NULL, NULL, &d_h, &d_d, &d_a);
  const char *needle = in_split ? "split_utilities[1][3] = [nan]" : "utilities[1][3] = [nan]";
  apx_status s = apx_ff_infer(c_ctx, &a, &on_gpu);
  if (eager) {
    ck_assert_msg(s == APX_ERR_INVALID_ARG, "%s: got %s", what, apx_status_name(s));
    ck_assert_msg(strstr(apx_last_error(), needle) && strstr(apx_last_error(), "ff_infer"),
                  "%s: message [%s] lacks [%s]", what, apx_last_error(), needle);
    ck_assert_msg(dev_is_poisoned(c_ctx, &d_h) && dev_is_poisoned(c_ctx, &d_d) &&
                      dev_is_poisoned(c_ctx, &d_a),
                  "%s: an output was written", what);
    CHECK_OK(apx_sync(c_ctx, &on_gpu), what);
  } else {
    ck_assert_msg(s == APX_OK, "%s: call: %s: %s", what, apx_status_name(s), apx_last_error());
    s = apx_sync(c_ctx, &on_gpu);
    ck_assert_msg(s == APX_ERR_DEVICE, "%s: sync got %s", what, apx_status_name(s));
    ck_assert_msg(strstr(apx_last_error(), needle) && strstr(apx_last_error(), "ff_infer"),
                  "%s: message [%s] lacks [%s]", what, apx_last_error(), needle);
    CHECK_OK(apx_sync(c_ctx, &on_gpu), "the error is reported once");
  }
  apx_tensor *all[] = {&d_dense, &d_util, &d_split, &d_h, &d_d, &d_a};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) apx_tensor_free(c_ctx, all[i]);
  io_free(&io);
  apx_ff_weights_free(c_ctx, w);
}

START_TEST(test_nan_utilities) {
  nan_on(ctx, 0, 0);
  nan_on(ctx, 0, 1);
  nan_on(ctx_eager, 1, 0);
  nan_on(ctx_eager, 1, 1);
}
END_TEST

/* ---- the FFModule's options (docs/ff_infer.md, Options) ------------------------ */

/* Every combination of order_mode (6), overlap_mode (2) and scan_mode (2)
 * against the cpu backend in every dtype, routing equal: B 2, C 32, a 4x4
 * grid of 16-pixel tiles (f16/bf16: the tensor-core refine with level 1's
 * tokens from level 0's refine; f32: the fused refine), quantised
 * utilities (multi_direction's equal keys on the square grids, ties in the
 * routing); blend_alpha cycles through 0.3, 0.75, 0, 1. */
START_TEST(test_modes_all) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  static const double alphas[] = {0.3, 0.75, 0.0, 1.0};
  for (int i = 0; i < 3; i++)
    for (int order = 0; order < 6; order++)
      for (int blend = 0; blend < 2; blend++)
        for (int fwd = 0; fwd < 2; fwd++) {
          ff_case c = {dts[i], 2, 32, 64, 64, 16, 8, 16, 6.0, 3.0, 1.0, 0.2, 1, 1, 1, 1,
                       order, blend, fwd, alphas[(2 * order + fwd + i) % 4]};
          run_case(&c, "modes");
        }
}
END_TEST

/* The combinations on non-square grids (u2d and d2u take the grid's
 * height, multi_direction's keys ty*gw + tx*gh): B 2, C 5, a 6x4 grid of
 * 8-pixel tiles (the fused refine of runtime tile sizes), f32 and bf16;
 * then one level (nesting off, a 3x4 grid of 12-pixel tiles, C 40) in f16. */
START_TEST(test_modes_grids) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_BF16};
  int n = 0;
  for (int i = 0; i < 2; i++)
    for (int order = 0; order < 6; order++)
      for (int blend = 0; blend < 2; blend++)
        for (int fwd = 0; fwd < 2; fwd++) {
          ff_case c = {dts[i], 2, 5, 48, 32, 8, 10, 24, 7.5, 3.0, 1.0, 0.25, 1, 1, 1, 1,
                       order, blend, fwd, n++ % 2 ? 0.6 : 0.2};
          run_case(&c, "modes grid");
        }
  for (int order = 0; order < 6; order++) {
    ff_case d = {APX_DTYPE_F16, 1, 40, 36, 48, 12, 12, 16, 5.0, 4.0, 1.0, 0.2, 0, 1, 1, 0,
                 order, order % 2, order / 3, 0.4};
    run_case(&d, "modes one level");
  }
}
END_TEST

/* The other refines and profiles with options: the default profile (f16:
 * the tensor-core refine of tiles 16 and 8 in 32- and 16-pixel blocks) and
 * C 384 (level 0's refine in two kernels), with blend_alpha 0, 1 and
 * between; the dense path (no L0 tile) in blend and forward. */
START_TEST(test_modes_profiles) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  static const struct {
    int order, blend, fwd;
    double alpha;
  } opts[] = {{APX_ORDER_L2R, 1, 1, 0.5},         {APX_ORDER_MULTI_DIRECTION, 1, 0, 0.0},
              {APX_ORDER_D2U, 1, 1, 1.0},         {APX_ORDER_HILBERT, 0, 1, 0.5},
              {APX_ORDER_R2L, 0, 0, 0.5},         {APX_ORDER_U2D, 1, 0, 0.125}};
  for (int i = 0; i < 3; i++)
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
      ff_case c = default_case(dts[i]);
      c.order = opts[k].order;
      c.blend = opts[k].blend;
      c.scan_fwd = opts[k].fwd;
      c.blend_alpha = opts[k].alpha;
      run_case(&c, "modes default profile");
      if (k % 2 == 0) {
        ff_case g = {dts[i], 1, 384, 32, 32, 16, 4, 16, 16.0, 8.0, 1.0, 0.2, 1, 1, 1, 0,
                     opts[k].order, opts[k].blend, opts[k].fwd, opts[k].alpha};
        run_case(&g, "modes C 384");
      }
    }
  ff_case e = {APX_DTYPE_F16, 2, 4, 16, 16, 4, 8, 8, 0.5, 2.0, 1.0, 0.2, 1, 1, 1, 0,
               APX_ORDER_D2U, 1, 1, 0.3};
  run_case(&e, "modes dense path");
}
END_TEST

/* cuda's own outputs for inputs io (device copies) under c. */
static void cuda_outputs(const ff_case *c, const apx_ff_weights *w, const ff_io *io,
                         apx_tensor out[3], const char *what) {
  apx_tensor d_dense = to_dev(ctx, &io->dense), d_util = to_dev(ctx, &io->util);
  apx_tensor d_split = to_dev(ctx, &io->split), d_bp = to_dev(ctx, &io->bp);
  apx_tensor d_up = to_dev(ctx, &io->up);
  apx_tensor d_h = dev_alloc(ctx, c->dt, 4, io->heavy.shape);
  apx_tensor d_d = dev_alloc(ctx, c->dt, 4, io->detail.shape);
  apx_tensor d_a = dev_alloc(ctx, c->dt, 4, io->alpha.shape);
  dev_poison(ctx, &d_h);
  dev_poison(ctx, &d_d);
  dev_poison(ctx, &d_a);
  apx_ff_infer_args a = args_of(c, w, &d_dense, &d_util, &d_split, &d_bp, &d_up, &d_h, &d_d, &d_a);
  CHECK_OK(apx_ff_infer(ctx, &a, &on_gpu), what);
  CHECK_OK(apx_sync(ctx, &on_gpu), what);
  out[0] = to_host(ctx, &d_h);
  out[1] = to_host(ctx, &d_d);
  out[2] = to_host(ctx, &d_a);
  apx_tensor *all[] = {&d_dense, &d_util, &d_split, &d_bp, &d_up, &d_h, &d_d, &d_a};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    apx_tensor_free(ctx, all[i]);
}

/* docs/ff_infer.md, Options: on finite values blend_alpha = 1 is the
 * override frame bit for bit, and blend_alpha = 0 leaves every level's X
 * (heavy = dense, detail = 0), on the cuda backend alone, in every dtype
 * and on each refine (tensor-core, fused, two kernels). */
START_TEST(test_blend_limits) {
  static const apx_dtype dts[] = {APX_DTYPE_F32, APX_DTYPE_F16, APX_DTYPE_BF16};
  for (int i = 0; i < 3; i++)
    for (int shape = 0; shape < 3; shape++) {
      ff_case c = default_case(dts[i]);
      if (shape == 1) { /* C 5, 8-pixel tiles */
        ff_case o = {dts[i], 2, 5, 48, 32, 8, 10, 24, 7.5, 3.0, 1.0, 0.25, 1, 1, 1, 1,
                     0, 0, 0, 0.5};
        c = o;
      } else if (shape == 2) { /* C 384: the two-kernel refine at level 0 */
        ff_case g = {dts[i], 1, 384, 32, 32, 16, 4, 16, 16.0, 8.0, 1.0, 0.2, 1, 1, 1, 0,
                     0, 0, 0, 0.5};
        c = g;
      }
      c.order = APX_ORDER_U2D;
      char what[160];
      snprintf(what, sizeof what, "blend limits %s shape %d", apx_dtype_name(c.dt), shape);
      apx_ff_weights *w = NULL;
      CHECK_OK(apx_ff_weights_seeded(ctx, c.C, 31 + (uint64_t)shape, &w), what);
      ff_io io;
      io_make(&c, &io);
      io_fill(&c, &io);
      apx_tensor over[3], one[3], zero[3];
      cuda_outputs(&c, w, &io, over, what);
      c.blend = 1;
      c.blend_alpha = 1.0;
      cuda_outputs(&c, w, &io, one, what);
      c.blend_alpha = 0.0;
      cuda_outputs(&c, w, &io, zero, what);
      for (int k = 0; k < 3; k++)
        expect_same_bits(&one[k], &over[k], what);
      /* the override frame changes the tiles: alpha 1 is not trivially X */
      int changed = 0;
      const int64_t n = apx_tensor_numel(&io.dense);
      for (int64_t e = 0; e < n; e++) {
        const double x = tu_get(&io.dense, e);
        changed |= tu_get(&over[0], e) != x;
        ck_assert_msg(tu_get(&zero[0], e) == x, "%s: alpha 0: heavy[%lld] = %.9g, dense %.9g",
                      what, (long long)e, tu_get(&zero[0], e), x);
        ck_assert_msg(tu_get(&zero[1], e) == 0.0, "%s: alpha 0: detail[%lld] = %.9g", what,
                      (long long)e, tu_get(&zero[1], e));
      }
      ck_assert_msg(changed, "%s: the override frame left heavy = dense", what);
      for (int k = 0; k < 3; k++) {
        tu_free(&over[k]);
        tu_free(&one[k]);
        tu_free(&zero[k]);
      }
      io_free(&io);
      apx_ff_weights_free(ctx, w);
    }
}
END_TEST

/* Graph replay with the options: the same pointers under another order,
 * scan, overlap mode or blend_alpha are a new graph (bit-equal to eager
 * launches of that call), then the first call's graph again. */
START_TEST(test_modes_graph) {
  ff_case c = default_case(APX_DTYPE_F16);
  c.B = 2;
  apx_ff_weights *w = NULL;
  CHECK_OK(apx_ff_weights_seeded(ctx, c.C, 99, &w), "modes graph");
  ff_io io;
  io_make(&c, &io);
  io_fill(&c, &io);
  apx_tensor d_dense = to_dev(ctx, &io.dense), d_util = to_dev(ctx, &io.util);
  apx_tensor d_split = to_dev(ctx, &io.split), d_bp = to_dev(ctx, &io.bp), d_up = to_dev(ctx, &io.up);
  apx_tensor e_out[3], g_out[3], prev[3];
  const apx_tensor *shapes[3] = {&io.heavy, &io.detail, &io.alpha};
  for (int i = 0; i < 3; i++) {
    e_out[i] = dev_alloc(ctx, c.dt, 4, shapes[i]->shape);
    g_out[i] = dev_alloc(ctx, c.dt, 4, shapes[i]->shape);
    prev[i] = tu_host(c.dt, 4, shapes[i]->shape);
  }
  static const struct {
    int order, blend, fwd;
    double alpha;
  } steps[] = {{APX_ORDER_HILBERT, 0, 0, 0.5}, {APX_ORDER_L2R, 0, 0, 0.5},
               {APX_ORDER_L2R, 0, 1, 0.5},     {APX_ORDER_L2R, 1, 1, 0.5},
               {APX_ORDER_L2R, 1, 1, 0.25},    {APX_ORDER_MULTI_DIRECTION, 1, 1, 0.25},
               {APX_ORDER_HILBERT, 0, 0, 0.5}};
  for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
    char what[160];
    snprintf(what, sizeof what, "modes graph step %zu (%s, %s %g, %s)", k,
             order_names[steps[k].order], steps[k].blend ? "blend" : "override", steps[k].alpha,
             steps[k].fwd ? "forward" : "bidirectional");
    c.order = steps[k].order;
    c.blend = steps[k].blend;
    c.scan_fwd = steps[k].fwd;
    c.blend_alpha = steps[k].alpha;
    for (int i = 0; i < 3; i++) {
      dev_poison(ctx, &e_out[i]);
      dev_poison(ctx, &g_out[i]);
    }
    apx_ff_infer_args a = args_of(&c, w, &d_dense, &d_util, &d_split, &d_bp, &d_up, &e_out[0],
                                  &e_out[1], &e_out[2]);
    CHECK_OK(apx_ff_infer(ctx, &a, &on_gpu), what);
    a.heavy = &g_out[0];
    a.detail = &g_out[1];
    a.alpha = &g_out[2];
    a.graph_replay = 1;
    CHECK_OK(apx_ff_infer(ctx, &a, &on_gpu), what);
    CHECK_OK(apx_ff_infer(ctx, &a, &on_gpu), what); /* a replay */
    CHECK_OK(apx_sync(ctx, &on_gpu), what);
    apx_tensor he = to_host(ctx, &e_out[0]), hg = to_host(ctx, &g_out[0]);
    /* each step changes heavy (a stale graph would not) */
    if (k > 0)
      ck_assert_msg(!tu_bytes_equal(&he, &prev[0]), "%s: heavy as in the step before", what);
    memcpy(prev[0].data, he.data, (size_t)apx_tensor_numel(&he) * apx_dtype_size(c.dt));
    tu_free(&he);
    tu_free(&hg);
    for (int i = 0; i < 3; i++) {
      he = to_host(ctx, &e_out[i]);
      hg = to_host(ctx, &g_out[i]);
      ck_assert_msg(!tu_is_poisoned(&hg), "%s: graph output %d not written", what, i);
      expect_same_bits(&hg, &he, what);
      tu_free(&he);
      tu_free(&hg);
    }
  }
  for (int i = 0; i < 3; i++) {
    apx_tensor_free(ctx, &e_out[i]);
    apx_tensor_free(ctx, &g_out[i]);
    tu_free(&prev[i]);
  }
  apx_tensor *all[] = {&d_dense, &d_util, &d_split, &d_bp, &d_up};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    apx_tensor_free(ctx, all[i]);
  io_free(&io);
  apx_ff_weights_free(ctx, w);
}
END_TEST

/* The cuda backend takes every option (apx_explain picks it for device
 * tensors); a value the core does not know is refused before any backend
 * with APX_ERR_INVALID_ARG naming the option. */
START_TEST(test_modes_explain) {
  ff_case c = {APX_DTYPE_F16, 1, 8, 32, 32, 8, 8, 16, 6.0, 2.0, 1.0, 0.2, 1, 1, 0, 0,
               0, 0, 0, 0.5};
  apx_ff_weights *w = NULL;
  CHECK_OK(apx_ff_weights_seeded(ctx, c.C, 5, &w), "weights");
  ff_io io;
  io_make(&c, &io);
  io_fill(&c, &io);
  apx_tensor d_dense = to_dev(ctx, &io.dense), d_util = to_dev(ctx, &io.util);
  apx_tensor d_split = to_dev(ctx, &io.split);
  apx_tensor d_h = dev_alloc(ctx, c.dt, 4, io.heavy.shape),
             d_d = dev_alloc(ctx, c.dt, 4, io.detail.shape);
  apx_tensor d_a = dev_alloc(ctx, c.dt, 4, io.alpha.shape);
  for (int order = 0; order < 6; order++)
    for (int blend = 0; blend < 2; blend++)
      for (int fwd = 0; fwd < 2; fwd++) {
        c.order = order;
        c.blend = blend;
        c.scan_fwd = fwd;
        c.blend_alpha = 0.7;
        apx_ff_infer_args a =
            args_of(&c, w, &d_dense, &d_util, &d_split, NULL, NULL, &d_h, &d_d, &d_a);
        apx_explanation e;
        CHECK_OK(apx_explain(ctx, APX_OP_FF_INFER, &a, &on_gpu, &e), order_names[order]);
        ck_assert_msg(e.backend && strcmp(e.backend, "cuda") == 0,
                      "%s blend %d forward %d: backend %s", order_names[order], blend, fwd,
                      e.backend ? e.backend : "none");
      }
  static const char *const needles[] = {"order_mode", "overlap_mode", "scan_mode",
                                        "blend_alpha"};
  for (int k = 0; k < 4; k++) {
    apx_ff_infer_args a = args_of(&c, w, &d_dense, &d_util, &d_split, NULL, NULL, &d_h, &d_d, &d_a);
    if (k == 0)
      a.order_mode = (apx_order_mode)6;
    if (k == 1)
      a.overlap_mode = (apx_overlap_mode)2;
    if (k == 2)
      a.scan_mode = APX_SCAN_BACKWARD;
    if (k == 3)
      a.blend_alpha = 1.5;
    apx_status s = apx_ff_infer(ctx, &a, &on_gpu);
    ck_assert_msg(s == APX_ERR_INVALID_ARG && strstr(apx_last_error(), needles[k]),
                  "bad %s: the call gave %s: %s", needles[k], apx_status_name(s),
                  apx_last_error());
  }
  apx_tensor *all[] = {&d_dense, &d_util, &d_split, &d_h, &d_d, &d_a};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    apx_tensor_free(ctx, all[i]);
  io_free(&io);
  apx_ff_weights_free(ctx, w);
}
END_TEST

/* ---- setup ---------------------------------------------------------------------- */

int main(void) {
  const char *device_name = NULL;
  ctx = tu_open_cuda_or_skip(&device_name);
  printf("# cuda device: %s\n", device_name);
  ctx_eager = tu_open_cuda_eager();
  rng.s = tu_seed() ^ 0xff1fu;

  Suite *s = suite_create("cuda_ff");
  TCase *cmp = tcase_create("compare"), *route = tcase_create("routing");
  TCase *graph = tcase_create("graph"), *bad = tcase_create("validate");
  TCase *modes = tcase_create("modes");
  tcase_set_timeout(cmp, 900);
  tcase_set_timeout(modes, 900);
  tcase_set_timeout(route, 600);
  tcase_set_timeout(graph, 600);
  tcase_set_timeout(bad, 600);
  tcase_add_test(cmp, test_default_profile);
  tcase_add_test(cmp, test_odd_shapes);
  tcase_add_test(cmp, test_tc_shapes);
  tcase_add_test(route, test_routing);
  tcase_add_test(graph, test_graph_replay);
  tcase_add_test(graph, test_stream);
  tcase_add_test(bad, test_nan_utilities);
  tcase_add_test(bad, test_modes_explain);
  tcase_add_test(modes, test_modes_all);
  tcase_add_test(modes, test_modes_grids);
  tcase_add_test(modes, test_modes_profiles);
  tcase_add_test(modes, test_blend_limits);
  tcase_add_test(modes, test_modes_graph);
  suite_add_tcase(s, cmp);
  suite_add_tcase(s, modes);
  suite_add_tcase(s, route);
  suite_add_tcase(s, graph);
  suite_add_tcase(s, bad);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  apx_close(ctx_eager);
  apx_close(ctx);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
