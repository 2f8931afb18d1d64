/* SPDX-License-Identifier: Apache-2.0 */
/* ff_infer (docs/ops.md, ff_infer; docs/ff_infer.md): route tiles by
 * utility, then the FF heavy path at tile level l0 on dense and at level l1
 * on its result. The descriptor and the op's own validation rules: the tile
 * grid, the scalar options, the order, overlap and scan modes, the weights,
 * and no NaN among host utilities. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "apx_half.h"
#include "internal.h"
#include "op_table.h"

enum {
  DENSE,
  UTILITIES,
  SPLIT_UTILITIES,
  BOUNDARY,
  UNCERTAINTY,
  WEIGHTS,
  TILE_L0,
  TILE_L1,
  KMAX_L0,
  KMAX_L1,
  BUDGET_B1,
  BUDGET_B2,
  COST_HEAVY,
  COST_CHEAP,
  ENABLE_NESTING,
  GRAPH_REPLAY,
  HEAVY,
  DETAIL,
  ALPHA,
  STATS,
  ORDER_MODE,
  OVERLAP_MODE,
  BLEND_ALPHA,
  SCAN_MODE
};

typedef apx_ff_infer_args args_t;

/* By value: apx_order_mode, apx_overlap_mode, apx_scan_direction (whose
 * APX_SCAN_BACKWARD, 1, the frame refuses: check_modes). */
static const char *const order_names[] = {"hilbert", "l2r", "r2l", "u2d", "d2u", "multi_direction"};
static const char *const overlap_names[] = {"override", "blend"};
static const char *const scan_names[] = {"forward", "backward", "bidirectional"};

static const apx_op_arg args_of[] = {
    APX__TENSOR(args_t, dense, APX_ARG_INPUT, 0, 4, APX_DTYPES_FLOAT, -1, -1, "[B,C,H,W]"),
    APX__TENSOR(args_t, utilities, APX_ARG_INPUT, 0, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,G0], G0 = (H/tile_l0)*(W/tile_l0)"),
    APX__TENSOR(args_t, split_utilities, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,G0], G0 = (H/tile_l0)*(W/tile_l0)"),
    APX__TENSOR(args_t, boundary, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__TENSOR(args_t, uncertainty, APX_ARG_INPUT, 1, 0, APX_DTYPES_FLOAT, -1, -1,
                "[B,1,H,W] or [B,H,W]"),
    APX__POINTER(args_t, weights, APX_ARG_HANDLE, 0, "apx_ff_weights"),
    APX__OPTION(args_t, tile_l0, APX_ARG_INT64),
    APX__OPTION(args_t, tile_l1, APX_ARG_INT64),
    APX__OPTION(args_t, kmax_l0, APX_ARG_INT64),
    APX__OPTION(args_t, kmax_l1, APX_ARG_INT64),
    APX__OPTION(args_t, budget_b1, APX_ARG_DOUBLE),
    APX__OPTION(args_t, budget_b2, APX_ARG_DOUBLE),
    APX__OPTION(args_t, cost_heavy, APX_ARG_DOUBLE),
    APX__OPTION(args_t, cost_cheap, APX_ARG_DOUBLE),
    APX__OPTION(args_t, enable_nesting, APX_ARG_FLAG),
    APX__OPTION(args_t, graph_replay, APX_ARG_FLAG),
    APX__TENSOR(args_t, heavy, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, DENSE, -1,
                "the shape of dense"),
    APX__TENSOR(args_t, detail, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, DENSE, -1,
                "the shape of dense"),
    APX__TENSOR(args_t, alpha, APX_ARG_OUTPUT, 0, 4, APX_DTYPES_ANY, DENSE, -1, "[B,1,H,W]"),
    APX__POINTER(args_t, stats, APX_ARG_RESULT, 1, "apx_ff_stats"),
    APX__ENUM(args_t, order_mode, order_names),
    APX__ENUM(args_t, overlap_mode, overlap_names),
    APX__OPTION(args_t, blend_alpha, APX_ARG_DOUBLE),
    APX__ENUM(args_t, scan_mode, scan_names),
};

static const args_t init = APX_FF_INFER_ARGS_INIT;

static const char *output_shape(const void *args, int arg, int *ndim, int64_t shape[APX_MAX_DIMS]) {
  const apx_tensor *dense = ((const args_t *)args)->dense;
  if (arg != HEAVY && arg != DETAIL && arg != ALPHA)
    return NULL;
  *ndim = 4;
  for (int d = 0; d < 4; d++)
    shape[d] = apx__dim_or_0(dense, d);
  if (arg != ALPHA)
    return "the shape of dense";
  shape[1] = 1;
  return "[B,1,H,W]";
}

/* docs/graph.md: stats are copied home inside the call. */
static const char *waits_for_device(const void *args) {
  return ((const args_t *)args)->stats
             ? "ff_infer's stats wait for the device (leave stats NULL in captured calls)"
             : NULL;
}

/* A finite scalar, and >= 0 when nonnegative. */
static apx_status require_scalar(const apx__vstate *v, const char *name, double x,
                                 int nonnegative) {
  char value[40];
  if (!isfinite(x))
    return apx__vfail(v, "%s = [%s] must be finite%s", name,
                      apx__vdouble_text(value, sizeof value, x), nonnegative ? " and >= 0" : "");
  if (nonnegative && x < 0)
    return apx__vfail(v, "%s = [%s] must be >= 0", name, apx__vdouble_text(value, sizeof value, x));
  return APX_OK;
}

static apx_status require_flag(const apx__vstate *v, const char *name, int x) {
  if (x != 0 && x != 1)
    return apx__vfail(v, "%s = [%d] must be 0 or 1", name, x);
  return APX_OK;
}

/* docs/ff_infer.md, Options: the FFModule's order, overlap and scan modes
 * and blend_alpha (checked in either overlap mode, as tileunpack does). */
static apx_status check_modes(const apx__vstate *v, const args_t *a) {
  if ((unsigned)a->order_mode > (unsigned)APX_ORDER_MULTI_DIRECTION)
    return apx__vfail(v,
                      "order_mode = [%d] is not an apx_order_mode (0..5: hilbert, l2r, r2l, u2d, "
                      "d2u, multi_direction)",
                      (int)a->order_mode);
  if (a->overlap_mode != APX_OVERLAP_OVERRIDE && a->overlap_mode != APX_OVERLAP_BLEND)
    return apx__vfail(v,
                      "overlap_mode = [%d] is not APX_OVERLAP_OVERRIDE (0) or "
                      "APX_OVERLAP_BLEND (1)",
                      (int)a->overlap_mode);
  if (!(a->blend_alpha >= 0.0 && a->blend_alpha <= 1.0)) { /* NaN fails too */
    char value[40];
    return apx__vfail(v, "blend_alpha = [%s] is outside [0, 1]",
                      apx__vdouble_text(value, sizeof value, a->blend_alpha));
  }
  if (a->scan_mode != APX_SCAN_BIDIRECTIONAL && a->scan_mode != APX_SCAN_FORWARD)
    return apx__vfail(v,
                      "scan_mode = [%d]%s is not APX_SCAN_BIDIRECTIONAL (2) or APX_SCAN_FORWARD "
                      "(0), the FFModule's scan modes",
                      (int)a->scan_mode, a->scan_mode == APX_SCAN_BACKWARD ? " (backward)" : "");
  return APX_OK;
}

/* boundary / uncertainty: [B,1,H,W] or [B,H,W] matching dense. */
static apx_status require_proxy(const apx__vstate *v, const char *name, const apx_tensor *proxy,
                                const apx_tensor *dense) {
  if (!proxy)
    return APX_OK;
  int64_t bhw[3];
  APX__TRY(apx__vrequire_gate_map(v, name, proxy, bhw));
  if (bhw[0] != dense->shape[0] || bhw[1] != dense->shape[2] || bhw[2] != dense->shape[3])
    return apx__vfail(v,
                      "%s [B,H,W] = [%lld,%lld,%lld] must match dense batch and spatial shape "
                      "[%lld,%lld,%lld]",
                      name, (long long)bhw[0], (long long)bhw[1], (long long)bhw[2],
                      (long long)dense->shape[0], (long long)dense->shape[2],
                      (long long)dense->shape[3]);
  return APX_OK;
}

/* docs/ops.md, ff_infer: two tile levels, each L0 tile splitting into 2x2
 * L1 tiles; *tiles_l0 = G0. */
static apx_status check_grid(const apx__vstate *v, const args_t *a, int64_t *tiles_l0) {
  int64_t t0 = a->tile_l0, height = a->dense->shape[2], width = a->dense->shape[3];
  if (t0 < 2 || t0 % 2 != 0)
    return apx__vfail(v, "tile_l0 = [%lld] must be even and >= 2", (long long)t0);
  if (height % t0 != 0 || width % t0 != 0)
    return apx__vfail(v, "dense H, W = [%lld, %lld] are not divisible by tile_l0 [%lld]",
                      (long long)height, (long long)width, (long long)t0);
  if (a->tile_l1 != t0 / 2)
    return apx__vfail(v, "tile_l1 = [%lld] must be tile_l0 / 2 = [%lld]", (long long)a->tile_l1,
                      (long long)(t0 / 2));
  int64_t tiles_l1;
  if (__builtin_mul_overflow(height / t0, width / t0, tiles_l0) ||
      __builtin_mul_overflow(*tiles_l0, (int64_t)4, &tiles_l1))
    return apx__vfail(v,
                      "dense H, W = [%lld, %lld] make too many tiles of [%lld] (overflows int64)",
                      (long long)height, (long long)width, (long long)t0);
  return APX_OK;
}

static apx_status check(apx__vstate *v, const void *args) {
  const args_t *a = args;
  const apx_tensor *dense = a->dense;
  int64_t tiles_l0 = 0;
  APX__TRY(check_grid(v, a, &tiles_l0));
  int64_t want_u[2] = {dense->shape[0], tiles_l0};
  APX__TRY(apx__vrequire_shape(v, "utilities", a->utilities, 2, want_u,
                               "[B,G0], G0 = (H/tile_l0)*(W/tile_l0)"));
  if (a->split_utilities)
    APX__TRY(apx__vrequire_shape(v, "split_utilities", a->split_utilities, 2, want_u,
                                 "[B,G0], G0 = (H/tile_l0)*(W/tile_l0)"));
  APX__TRY(require_proxy(v, "boundary", a->boundary, dense));
  APX__TRY(require_proxy(v, "uncertainty", a->uncertainty, dense));
  if (a->kmax_l0 < 0 || a->kmax_l0 > tiles_l0)
    return apx__vfail(v, "kmax_l0 = [%lld] is outside [0, %lld] (G0 = [%lld] L0 tiles)",
                      (long long)a->kmax_l0, (long long)tiles_l0, (long long)tiles_l0);
  if (a->kmax_l1 < 0 || a->kmax_l1 > 4 * tiles_l0)
    return apx__vfail(v, "kmax_l1 = [%lld] is outside [0, %lld] (4*G0 L1 tiles)",
                      (long long)a->kmax_l1, (long long)(4 * tiles_l0));
  APX__TRY(require_scalar(v, "budget_b1", a->budget_b1, 1));
  APX__TRY(require_scalar(v, "budget_b2", a->budget_b2, 1));
  APX__TRY(require_scalar(v, "cost_heavy", a->cost_heavy, 0));
  APX__TRY(require_scalar(v, "cost_cheap", a->cost_cheap, 0));
  APX__TRY(require_flag(v, "enable_nesting", a->enable_nesting));
  APX__TRY(require_flag(v, "graph_replay", a->graph_replay));
  APX__TRY(check_modes(v, a));
  int64_t weight_channels = apx_ff_weights_channels(a->weights);
  if (weight_channels != dense->shape[1])
    return apx__vfail(v, "weights have [%lld] channels but dense has C = [%lld]",
                      (long long)weight_channels, (long long)dense->shape[1]);
  return APX_OK;
}

/* docs/ff_infer.md, Routing: NaN utilities cannot be ranked; ±inf can. */
static apx_status require_no_nan(const apx__vstate *v, const char *name, const apx_tensor *t) {
  int64_t rows = t->shape[0], cols = t->shape[1];
  for (int64_t b = 0; b < rows; b++)
    for (int64_t i = 0; i < cols; i++)
      if (isnan(apx_float_at(t, b * cols + i)))
        return apx__vfail(v, "%s[%lld][%lld] = [nan] is NaN (utilities must be comparable)", name,
                          (long long)b, (long long)i);
  return APX_OK;
}

/* Device utilities are checked by the device router (docs/ff_infer.md). */
static apx_status check_values(apx__vstate *v, const void *args) {
  const args_t *a = args;
  APX__TRY(require_no_nan(v, "utilities", a->utilities));
  return a->split_utilities ? require_no_nan(v, "split_utilities", a->split_utilities) : APX_OK;
}

const apx__op apx__op_ff_infer = {
    .desc = {APX__OP_DESC(FF_INFER, ff_infer, args_t, init, args_of, APX_OP_CAP_DEVICE_CHECKS,
                          "the FF module's inference: route tiles by utility, then the heavy path "
                          "at two tile levels"),
             .output_shape = output_shape},
    .check = check,
    .check_values = check_values,
    .waits_for_device = waits_for_device,
};
