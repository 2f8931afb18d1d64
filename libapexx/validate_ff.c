/* Argument validation of apx_ff_infer (docs/ops.md, ff_infer; docs/ff_infer.md;
 * include/apexx/apexx.h, apx_ff_infer_args).
 *
 * Same order and contract as validate.c: every tensor's well-formedness and
 * device first, then shapes and dtypes, the tile grid, the scalar options,
 * the weights, the outputs' shapes and dtypes, aliasing, and last the values
 * of host utilities (no NaN). The first failure wins with
 * APX_ERR_INVALID_ARG; nothing reads or writes output memory. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "validate.h"

#define OP "ff_infer"

#define TRY(expr)                                                                                  \
  do {                                                                                             \
    apx_status try_status_ = (expr);                                                               \
    if (try_status_ != APX_OK)                                                                     \
      return try_status_;                                                                          \
  } while (0)

static apx_status fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static apx_status fail(const char *fmt, ...) {
  char text[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return apx__error(APX_ERR_INVALID_ARG, OP ": %s", text);
}

/* A double as "%g" when that reads back exactly, else with 17 digits. */
static const char *double_text(char *buf, size_t size, double x) {
  snprintf(buf, size, "%g", x);
  if (isfinite(x) && strtod(buf, NULL) != x)
    snprintf(buf, size, "%.17g", x);
  return buf;
}

/* docs/ff_infer.md, Routing: NaN utilities cannot be ranked; ±inf can. */
static apx_status require_no_nan(const char *name, const apx_tensor *t) {
  int64_t rows = t->shape[0], cols = t->shape[1];
  for (int64_t b = 0; b < rows; b++)
    for (int64_t i = 0; i < cols; i++)
      if (isnan(apx__float_at(t, b * cols + i)))
        return fail("%s[%lld][%lld] = [nan] is NaN (utilities must be comparable)", name,
                    (long long)b, (long long)i);
  return APX_OK;
}

/* A finite scalar, and >= 0 when nonnegative. */
static apx_status require_scalar(const char *name, double x, int nonnegative) {
  char value[40];
  if (!isfinite(x))
    return fail("%s = [%s] must be finite%s", name, double_text(value, sizeof value, x),
                nonnegative ? " and >= 0" : "");
  if (nonnegative && x < 0)
    return fail("%s = [%s] must be >= 0", name, double_text(value, sizeof value, x));
  return APX_OK;
}

static apx_status require_flag(const char *name, int x) {
  if (x != 0 && x != 1)
    return fail("%s = [%d] must be 0 or 1", name, x);
  return APX_OK;
}

/* boundary / uncertainty: [B,1,H,W] or [B,H,W] matching dense, a float. */
static apx_status require_proxy(const apx__vstate *v, const char *name, const apx_tensor *proxy,
                                const apx_tensor *dense) {
  if (!proxy)
    return APX_OK;
  int64_t bhw[3];
  TRY(apx__vrequire_gate_map(v, name, proxy, bhw));
  if (bhw[0] != dense->shape[0] || bhw[1] != dense->shape[2] || bhw[2] != dense->shape[3])
    return fail("%s [B,H,W] = [%lld,%lld,%lld] must match dense batch and spatial shape "
                "[%lld,%lld,%lld]",
                name, (long long)bhw[0], (long long)bhw[1], (long long)bhw[2],
                (long long)dense->shape[0], (long long)dense->shape[2], (long long)dense->shape[3]);
  return apx__vrequire_float(v, name, proxy);
}

static apx_status check_ff_infer(apx__vstate *v, const apx_ff_infer_args *a) {
  TRY(apx__vcheck_tensor(v, "dense", a->dense, 1));
  TRY(apx__vcheck_tensor(v, "utilities", a->utilities, 1));
  TRY(apx__vcheck_tensor(v, "split_utilities", a->split_utilities, 0));
  TRY(apx__vcheck_tensor(v, "boundary", a->boundary, 0));
  TRY(apx__vcheck_tensor(v, "uncertainty", a->uncertainty, 0));
  TRY(apx__vcheck_tensor(v, "heavy", a->heavy, 1));
  TRY(apx__vcheck_tensor(v, "detail", a->detail, 1));
  TRY(apx__vcheck_tensor(v, "alpha", a->alpha, 1));
  if (!a->weights)
    return fail("weights is required, got [NULL]");

  const apx_tensor *dense = a->dense;
  TRY(apx__vrequire_ndim(v, "dense", dense, 4, "[B,C,H,W]"));
  TRY(apx__vrequire_float(v, "dense", dense));
  int64_t batch = dense->shape[0], channels = dense->shape[1];
  int64_t height = dense->shape[2], width = dense->shape[3];

  /* docs/ops.md, ff_infer: two tile levels, each L0 tile splitting into 2x2 L1 tiles */
  int64_t t0 = a->tile_l0;
  if (t0 < 2 || t0 % 2 != 0)
    return fail("tile_l0 = [%lld] must be even and >= 2", (long long)t0);
  if (height % t0 != 0 || width % t0 != 0)
    return fail("dense H, W = [%lld, %lld] are not divisible by tile_l0 [%lld]", (long long)height,
                (long long)width, (long long)t0);
  if (a->tile_l1 != t0 / 2)
    return fail("tile_l1 = [%lld] must be tile_l0 / 2 = [%lld]", (long long)a->tile_l1,
                (long long)(t0 / 2));
  int64_t tiles_l0, tiles_l1;
  if (__builtin_mul_overflow(height / t0, width / t0, &tiles_l0) ||
      __builtin_mul_overflow(tiles_l0, (int64_t)4, &tiles_l1))
    return fail("dense H, W = [%lld, %lld] make too many tiles of [%lld] (overflows int64)",
                (long long)height, (long long)width, (long long)t0);

  int64_t want_u[2] = {batch, tiles_l0};
  TRY(apx__vrequire_shape(v, "utilities", a->utilities, 2, want_u,
                          "[B,G0], G0 = (H/tile_l0)*(W/tile_l0)"));
  TRY(apx__vrequire_float(v, "utilities", a->utilities));
  if (a->split_utilities) {
    TRY(apx__vrequire_shape(v, "split_utilities", a->split_utilities, 2, want_u,
                            "[B,G0], G0 = (H/tile_l0)*(W/tile_l0)"));
    TRY(apx__vrequire_float(v, "split_utilities", a->split_utilities));
  }
  TRY(require_proxy(v, "boundary", a->boundary, dense));
  TRY(require_proxy(v, "uncertainty", a->uncertainty, dense));

  if (a->kmax_l0 < 0 || a->kmax_l0 > tiles_l0)
    return fail("kmax_l0 = [%lld] is outside [0, %lld] (G0 = [%lld] L0 tiles)",
                (long long)a->kmax_l0, (long long)tiles_l0, (long long)tiles_l0);
  if (a->kmax_l1 < 0 || a->kmax_l1 > tiles_l1)
    return fail("kmax_l1 = [%lld] is outside [0, %lld] (4*G0 L1 tiles)", (long long)a->kmax_l1,
                (long long)tiles_l1);
  TRY(require_scalar("budget_b1", a->budget_b1, 1));
  TRY(require_scalar("budget_b2", a->budget_b2, 1));
  TRY(require_scalar("cost_heavy", a->cost_heavy, 0));
  TRY(require_scalar("cost_cheap", a->cost_cheap, 0));
  TRY(require_flag("enable_nesting", a->enable_nesting));
  TRY(require_flag("graph_replay", a->graph_replay));

  int64_t weight_channels = apx_ff_weights_channels(a->weights);
  if (weight_channels != channels)
    return fail("weights have [%lld] channels but dense has C = [%lld]", (long long)weight_channels,
                (long long)channels);

  TRY(apx__vrequire_shape(v, "heavy", a->heavy, 4, dense->shape, "the shape of dense"));
  TRY(apx__vrequire_same_dtype(v, "heavy", a->heavy, "dense", dense));
  TRY(apx__vrequire_shape(v, "detail", a->detail, 4, dense->shape, "the shape of dense"));
  TRY(apx__vrequire_same_dtype(v, "detail", a->detail, "dense", dense));
  int64_t want_alpha[4] = {batch, 1, height, width};
  TRY(apx__vrequire_shape(v, "alpha", a->alpha, 4, want_alpha, "[B,1,H,W]"));
  TRY(apx__vrequire_same_dtype(v, "alpha", a->alpha, "dense", dense));

  static const char *const in_names[5] = {"dense", "utilities", "split_utilities", "boundary",
                                          "uncertainty"};
  const apx_tensor *ins[5] = {dense, a->utilities, a->split_utilities, a->boundary, a->uncertainty};
  static const char *const out_names[3] = {"heavy", "detail", "alpha"};
  const apx_tensor *outs[3] = {a->heavy, a->detail, a->alpha};
  for (int o = 0; o < 3; o++) {
    for (int i = 0; i < 5; i++)
      TRY(apx__vrequire_no_overlap(v, out_names[o], outs[o], in_names[i], ins[i], 0));
    for (int p = 0; p < o; p++)
      TRY(apx__vrequire_no_overlap(v, out_names[o], outs[o], out_names[p], outs[p], 0));
  }

  /* Device utilities are checked by the device router (docs/ff_infer.md). */
  if (v->site.device == APX_DEVICE_HOST) {
    TRY(require_no_nan("utilities", a->utilities));
    if (a->split_utilities)
      TRY(require_no_nan("split_utilities", a->split_utilities));
  }
  return APX_OK;
}

apx_status apx__validate_ff_infer(const apx_ff_infer_args *args, apx__site *site) {
  apx__vstate v = {OP, {APX_DEVICE_HOST, 0}, 0, NULL};
  if (!args)
    return fail("args is [NULL]");
  apx_status st = check_ff_infer(&v, args);
  if (st == APX_OK && site)
    *site = v.site;
  return st;
}
