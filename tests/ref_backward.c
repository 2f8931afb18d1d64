/* SPDX-License-Identifier: Apache-2.0 */
/* The backward ops' reference loops (ref_backward.h), from docs/ops.md. */
#include "ref_backward.h"

#include <math.h>
#include <stdlib.h>

#include "ref_tile.h"

ref_grad ref_grad_new(int64_t n) {
  ref_grad g = {n, calloc((size_t)(n ? n : 1), sizeof(double)),
                calloc((size_t)(n ? n : 1), sizeof(double))};
  if (!g.value || !g.mag)
    abort();
  return g;
}

void ref_grad_free(ref_grad *g) {
  free(g->value);
  free(g->mag);
  g->value = g->mag = NULL;
  g->n = 0;
}

double ref_grad_tolerance(apx_dtype dtype) {
  switch (dtype) {
  case APX_DTYPE_F16:
    return 2e-3;
  case APX_DTYPE_BF16:
    return 1.6e-2;
  default:
    return 1e-5;
  }
}

/* The largest finite value of a float dtype. */
static double max_finite(apx_dtype dtype) {
  return dtype == APX_DTYPE_F16 ? 65504.0 : dtype == APX_DTYPE_BF16 ? 3.3895313892515355e38
                                                                    : 3.4028234663852886e38;
}

int64_t ref_grad_mismatch(const apx_tensor *got, const ref_grad *want, double rtol, double atol) {
  for (int64_t i = 0; i < want->n; i++) {
    double v = ref_get(got, i), w = want->value[i], bound = atol + rtol * want->mag[i];
    /* a value the dtype cannot hold rounds to an infinity of its sign */
    if (isinf(v) && !isinf(w) && (v > 0) == (w > 0) && fabs(w) + bound >= max_finite(got->dtype))
      continue;
    if (isnan(w) ? !isnan(v) : !(fabs(v - w) <= bound))
      return i;
  }
  return -1;
}

/* ---- fusiongate_fuse_backward ---- */

void ref_fusiongate_fuse_backward(const apx_fusiongate_fuse_backward_args *a, ref_grad *grad_base,
                                  ref_grad *grad_detail, ref_grad *grad_alpha) {
  const int64_t B = a->base->shape[0], C = a->base->shape[1];
  const int64_t plane = a->base->shape[2] * a->base->shape[3];
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t p = 0; p < plane; p++) {
        int64_t i = (b * C + c) * plane + p, j = b * plane + p;
        double g = ref_get(a->grad_out, i), al = ref_get(a->alpha, j);
        double d = ref_get(a->detail, i), x = ref_get(a->base, i);
        if (a->grad_base) {
          grad_base->value[i] = g * (1.0 - al);
          grad_base->mag[i] = fabs(g) + fabs(g * al);
        }
        if (a->grad_detail) {
          grad_detail->value[i] = g * al;
          grad_detail->mag[i] = fabs(g * al);
        }
        if (a->grad_alpha) {
          grad_alpha->value[j] += g * (d - x);
          grad_alpha->mag[j] += fabs(g) * (fabs(d) + fabs(x));
        }
      }
}

/* ---- fusiongate_alpha_backward ---- */

static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* docs/ops.md, fusiongate_alpha: the sanitised proxy cast to the out dtype;
 * *passes = 1 where its derivative is 1 (a finite value). */
static double sanitised(float v, apx_dtype out_dtype, double *passes) {
  *passes = isfinite(v) ? 1.0 : 0.0;
  if (isnan(v))
    return 0.0;
  if (isinf(v))
    return v > 0 ? 1.0 : 0.0;
  return ref_fl(out_dtype, v);
}

void ref_fusiongate_alpha_backward(const apx_fusiongate_alpha_backward_args *a,
                                   ref_grad *grad_boundary, ref_grad *grad_uncertainty,
                                   ref_grad scalars[3]) {
  const int64_t n = ref_numel(a->grad_out);
  /* the weights as the op uses them: fp32 arguments */
  const double blw = (float)a->boundary_log_weight, ulw = (float)a->uncertainty_log_weight;
  const double w_b = softplus(blw), w_u = softplus(ulw), bias = (float)a->bias;
  const double chain[3] = {blw > 20.0 ? 1.0 : sigmoid(blw), ulw > 20.0 ? 1.0 : sigmoid(ulw), 1.0};
  for (int64_t i = 0; i < n; i++) {
    double pb, pu;
    double b = sanitised(ref_get(a->boundary, i), a->grad_out->dtype, &pb);
    double u = sanitised(ref_get(a->uncertainty, i), a->grad_out->dtype, &pu);
    double g = ref_get(a->grad_out, i);
    double z = w_b * b + w_u * u + bias;
    double t = g * sigmoid(z) * sigmoid(-z);
    /* fp32's error in z moves s*(1-s) by at most 0.1 of it (|s'(1-2s)| <= 0.1) */
    double t_mag = fabs(t) + 0.1 * fabs(g) * (fabs(w_b * b) + fabs(w_u * u) + fabs(bias));
    if (a->grad_boundary) {
      grad_boundary->value[i] = t * w_b * pb;
      grad_boundary->mag[i] = t_mag * w_b * pb;
    }
    if (a->grad_uncertainty) {
      grad_uncertainty->value[i] = t * w_u * pu;
      grad_uncertainty->mag[i] = t_mag * w_u * pu;
    }
    const double factor[3] = {b, u, 1.0};
    for (int j = 0; j < 3; j++) {
      scalars[j].value[0] += t * factor[j] * chain[j];
      scalars[j].mag[0] += t_mag * fabs(factor[j]) * chain[j];
    }
  }
}

/* ---- tilessm_scan_backward ---- */

/* Adds v (and |v| as its magnitude term) to g[i] when g is asked for. */
static void add(ref_grad *g, int64_t i, double v, double m) {
  if (!g->value)
    return;
  g->value[i] += v;
  g->mag[i] += m;
}

void ref_tilessm_scan_backward(const apx_tilessm_scan_backward_args *a,
                               ref_grad grads[REF_SCAN_GRADS]) {
  enum { G_TOKENS, G_DECAY, G_IG, G_OG, G_SB, G_INIT, G_GATE };
  const apx_dtype dt = a->tokens->dtype;
  const int64_t B = a->tokens->shape[0], K = a->tokens->shape[1], C = a->tokens->shape[2];
  const int bidir = a->direction == APX_SCAN_BIDIRECTIONAL;
  const int gated = bidir && a->merge == APX_MERGE_GATED;
  const double lim = ref_fl(dt, (float)fabs(a->clamp_value));
  double *s = malloc((size_t)(K + 1) * 2 * sizeof(double)); /* s[dir][j+1], s[dir][0] = init */
  double *x = malloc((size_t)(K ? K : 1) * sizeof(double));
  double *x_passes = malloc((size_t)(K ? K : 1) * sizeof(double));
  if (!s || !x || !x_passes)
    abort();
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      double d = ref_get(a->decay, c), d_passes = d >= 1e-6f && d <= 1.0f - 1e-6f;
      d = d < 1e-6f ? 1e-6f : d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
      const double om = 1.0 - d;
      const double ig = ref_get(a->input_gain, c), og = ref_get(a->output_gain, c);
      const double sb = ref_get(a->state_bias, c);
      double gate = 0.5, gate_passes = 1.0;
      int64_t gate_at = 0;
      if (gated && a->merge_gate) {
        gate_at = a->merge_gate->ndim == 3 ? b * C + c : c;
        gate = ref_fl(dt, ref_get(a->merge_gate, gate_at));
        gate_passes = gate >= 0.0 && gate <= 1.0;
        gate = gate < 0.0 ? 0.0 : gate > 1.0 ? 1.0 : gate;
      }
      for (int64_t k = 0; k < K; k++) {
        float v = ref_get(a->tokens, (b * K + k) * C + c);
        x_passes[k] = isfinite(v) && v >= -lim && v <= lim;
        x[k] = isnan(v) ? 0.0 : v > lim ? lim : v < -lim ? -lim : v;
      }
      /* the forward states of both directions, in double */
      for (int dir = 0; dir < 2; dir++) {
        double init = 0.0;
        if (a->init_state)
          init = ref_fl(dt, ref_get(a->init_state,
                                    a->init_state->ndim == 3 ? (b * 2 + dir) * C + c : b * C + c));
        s[dir * (K + 1)] = init;
        for (int64_t j = 0; j < K; j++) {
          int64_t k = dir ? K - 1 - j : j;
          s[dir * (K + 1) + j + 1] = d * s[dir * (K + 1) + j] + om * (ig * x[k] + sb);
        }
      }
      for (int dir = 0; dir < 2; dir++) {
        if ((dir == 0 && a->direction == APX_SCAN_BACKWARD) ||
            (dir == 1 && a->direction == APX_SCAN_FORWARD))
          continue;
        const int fs_dir = bidir ? dir : 0;
        double adj = 0.0, adj_mag = 0.0;
        if (a->grad_final_state) {
          adj = ref_get(a->grad_final_state, bidir ? (b * 2 + fs_dir) * C + c : b * C + c);
          adj_mag = fabs(adj);
        }
        for (int64_t j = K - 1; j >= 0; j--) {
          int64_t k = dir ? K - 1 - j : j, at = (b * K + k) * C + c;
          double g = ref_get(a->grad_out, at), share = 1.0;
          if (bidir)
            share = a->merge == APX_MERGE_AVG ? 0.5 : a->merge == APX_MERGE_GATED
                                                          ? (dir ? 1.0 - gate : gate)
                                                          : 1.0;
          double gy = share * g, sj = s[dir * (K + 1) + j + 1], sp = s[dir * (K + 1) + j];
          double drive = ig * x[k] + sb;
          adj += og * gy;
          adj_mag += fabs(og * gy);
          add(&grads[G_OG], c, gy * sj, fabs(gy * sj));
          double gdrv = om * adj;
          add(&grads[G_TOKENS], at, ig * gdrv * x_passes[k], fabs(ig) * om * adj_mag * x_passes[k]);
          add(&grads[G_IG], c, gdrv * x[k], om * adj_mag * fabs(x[k]));
          add(&grads[G_SB], c, gdrv, om * adj_mag);
          add(&grads[G_DECAY], c, adj * (sp - drive) * d_passes,
              adj_mag * (fabs(sp) + fabs(ig * x[k]) + fabs(sb)) * d_passes);
          adj *= d;
          adj_mag *= d;
        }
        if (grads[G_INIT].value) {
          /* [B,2,C] (given, or absent and bidirectional) per direction, else [B,C] */
          int per_dir = a->init_state ? a->init_state->ndim == 3 : bidir;
          add(&grads[G_INIT], per_dir ? (b * 2 + dir) * C + c : b * C + c, adj, adj_mag);
        }
      }
      if (gated && grads[G_GATE].value)
        for (int64_t k = 0; k < K; k++) {
          double g = ref_get(a->grad_out, (b * K + k) * C + c);
          double yf = ref_fl(dt, (float)(og * s[k + 1]));
          double yb = ref_fl(dt, (float)(og * s[(K + 1) + (K - 1 - k) + 1]));
          int64_t gi = a->merge_gate && a->merge_gate->ndim == 3 ? b * C + c : c;
          add(&grads[G_GATE], gi, g * (yf - yb) * gate_passes,
              fabs(g) * (fabs(yf) + fabs(yb)) * gate_passes);
        }
    }
  free(s);
  free(x);
  free(x_passes);
}
