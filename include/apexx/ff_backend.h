/* SPDX-License-Identifier: Apache-2.0 */
/* The FF model for backends that run apx_ff_infer (docs/ff_infer.md): the
 * weights as a backend reads them, the kernel-form parameters derived from
 * them, and the routing of a call. A model is a client of the plugin ABI,
 * not part of it (docs/architecture.md, The FF model): backend.h knows no
 * FF type; the weights reach a backend through the generic prepared-data
 * cache of the services table (apx_core_services.cache), whose content for
 * an apx_ff_weights handle is its apx_ff_params.
 *
 * Routing is one implementation: its rules (the tile cost, the budgets'
 * slack, how many tiles each walk takes) are the inline functions below;
 * the in-tree backends' host router (common/apx_ff_route.h, a static
 * library the cpu backend links: no call into the core) and the cuda
 * backend's device router follow them. */
#ifndef APEXX_FF_BACKEND_H
#define APEXX_FF_BACKEND_H

#include <apexx/apexx.h>
#include <apexx/op_rules.h>
#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the weights ----
 * One tile level's weights (FFModule's l0_path or l1_path), fp32 host
 * arrays in PyTorch's layouts, C = apx_ff_params.channels. Index [0] of the
 * scan arrays is scan_bidirectional.forward_scan, [1] backward_scan. */
typedef struct apx_ff_level_params {
  const float *merge_gate_logit;        /* [C] */
  const float *scan_decay_logit[2];     /* [C] */
  const float *scan_input_gain_raw[2];  /* [C] */
  const float *scan_output_gain_raw[2]; /* [C] */
  const float *scan_state_bias[2];      /* [C] */
  const float *token_norm_weight;       /* [C] film.token_norm */
  const float *token_norm_bias;         /* [C] */
  const float *mlp0_weight;             /* [C,C] (out, in) film.mlp.0 */
  const float *mlp0_bias;               /* [C] */
  const float *mlp2_weight;             /* [2C,C] film.mlp.2 */
  const float *mlp2_bias;               /* [2C] */
  const float *dw_weight;               /* [C,1,3,3] refine.depthwise */
  const float *dw_bias;                 /* [C] */
  const float *pw_weight;               /* [2C,C,1,1] refine.pointwise */
  const float *pw_bias;                 /* [2C] */
  const float *norm_weight;             /* [2C] refine.norm (GroupNorm) */
  const float *norm_bias;               /* [2C] */
  float boundary_log_weight;            /* fusion_gate, 0-d */
  float uncertainty_log_weight;
  float gate_bias;
} apx_ff_level_params;

/* The fp32 host copy of a weights handle: the content that
 * apx_core_services.cache hands to a backend's make for an apx_ff_weights
 * object. It lives as long as the handle. */
typedef struct apx_ff_params {
  int64_t channels;
  apx_ff_level_params level[2]; /* [0] = l0_path, [1] = l1_path */
} apx_ff_params;

/* docs/ff_infer.md, One level: the kernel-form parameters derived from the
 * raw weights, in fp32 (a backend then rounds them to the frame's dtype):
 * decay = 1e-3 + 0.998*sigmoid(logit), gain = softplus(raw) + 1e-6,
 * merge gate = sigmoid(logit), fusion weights = softplus(log weight).
 * sigmoid and softplus are PyTorch's (include/apexx/op_rules.h). */
static inline float apx_ff_decay(float logit) {
  return 1e-3f + (0.999f - 1e-3f) * apx_sigmoidf(logit);
}
static inline float apx_ff_gain(float raw) { return apx_softplusf(raw) + 1e-6f; }

/* ---- routing (docs/ff_infer.md, Routing) ----
 * Per batch row: a greedy L0 selection by utility / delta under budget b1,
 * then a split stage that takes L0 parents by split utility under budget
 * b2, each bringing its four quadtree children (the L1 tiles); float64,
 * ties by the smaller id; both id lists also in Hilbert order. */

/* The budgets' slack and the smallest tile cost. */
#define APX_FF_BUDGET_SLACK 1e-9
#define APX_FF_MIN_DELTA 1e-9

/* The cost of one L0 tile: cost_heavy - cost_cheap, at least MIN_DELTA. */
static inline double apx_ff_tile_cost(const apx_ff_infer_args *args) {
  return fmax(args->cost_heavy - args->cost_cheap, APX_FF_MIN_DELTA);
}

/* Whether the call has a split stage at all. */
static inline int apx_ff_nesting(const apx_ff_infer_args *args) {
  return args->enable_nesting && args->split_utilities && args->kmax_l1 > 0 &&
         args->budget_b2 > 0;
}

/* How many tiles the walks take in every row of a validated call: every L0
 * tile costs the same delta and every parent 1, so the greedy walk takes
 * the first *k0 candidates (of G0, at most kmax_l0, within b1) and the
 * split stage the first *parents of them (within b2, 4 children each
 * within kmax_l1); *k0 rows of L0 ids and 4 * *parents L1 ids. */
static inline void apx_ff_walk_counts(const apx_ff_infer_args *args, int64_t *k0,
                                      int64_t *parents) {
  const int64_t t0 = args->tile_l0;
  const int64_t g0 = (args->dense->shape[2] / t0) * (args->dense->shape[3] / t0);
  const double delta = apx_ff_tile_cost(args);
  double spent = 0.0;
  int64_t n = 0;
  for (int64_t i = 0; i < g0 && n < args->kmax_l0; i++)
    if (spent + delta <= args->budget_b1 + APX_FF_BUDGET_SLACK) {
      spent += delta;
      n++;
    }
  *k0 = n;
  int64_t p = 0, children = 0;
  double spent2 = 0.0;
  if (apx_ff_nesting(args))
    for (int64_t i = 0; i < n; i++)
      if (spent2 + 1.0 <= args->budget_b2 + APX_FF_BUDGET_SLACK &&
          children + 4 <= args->kmax_l1) {
        spent2 += 1.0;
        children += 4;
        p++;
      }
  *parents = p;
}

#ifdef __cplusplus
}
#endif
#endif /* APEXX_FF_BACKEND_H */
