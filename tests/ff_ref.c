/* SPDX-License-Identifier: Apache-2.0 */
/* Double-precision reference pieces of the FF path, see ff_ref.h. */
#include "config.h"

#include "ff_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apx_half.h"

static float *rand_array(tu_rng *r, int64_t n, double mean, double scale) {
  float *a = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++)
    a[i] = (float)(mean + scale * tu_normal(r));
  return a;
}

apx_ff_params ff_ref_random_params(tu_rng *r, int64_t C) {
  apx_ff_params p;
  memset(&p, 0, sizeof p);
  p.channels = C;
  const double fan = 1.0 / sqrt((double)C);
  for (int l = 0; l < 2; l++) {
    apx_ff_level_params *w = &p.level[l];
    w->merge_gate_logit = rand_array(r, C, 0.0, 1.0);
    for (int s = 0; s < 2; s++) {
      w->scan_decay_logit[s] = rand_array(r, C, 0.0, 2.0);
      w->scan_input_gain_raw[s] = rand_array(r, C, 0.0, 1.0);
      w->scan_output_gain_raw[s] = rand_array(r, C, 0.0, 1.0);
      w->scan_state_bias[s] = rand_array(r, C, 0.0, 0.3);
    }
    w->token_norm_weight = rand_array(r, C, 1.0, 0.2);
    w->token_norm_bias = rand_array(r, C, 0.0, 0.2);
    w->mlp0_weight = rand_array(r, C * C, 0.0, fan);
    w->mlp0_bias = rand_array(r, C, 0.0, fan);
    w->mlp2_weight = rand_array(r, 2 * C * C, 0.0, fan);
    w->mlp2_bias = rand_array(r, 2 * C, 0.0, fan);
    w->dw_weight = rand_array(r, 9 * C, 0.0, 1.0 / 3.0);
    w->dw_bias = rand_array(r, C, 0.0, 1.0 / 3.0);
    w->pw_weight = rand_array(r, 2 * C * C, 0.0, fan);
    w->pw_bias = rand_array(r, 2 * C, 0.0, fan);
    w->norm_weight = rand_array(r, 2 * C, 1.0, 0.2);
    w->norm_bias = rand_array(r, 2 * C, 0.0, 0.2);
    w->boundary_log_weight = (float)(1.0 + 0.5 * tu_normal(r));
    w->uncertainty_log_weight = (float)(1.0 + 0.5 * tu_normal(r));
    w->gate_bias = (float)(0.5 * tu_normal(r));
  }
  return p;
}

void ff_ref_free(apx_ff_params *p) {
  for (int l = 0; l < 2; l++) {
    apx_ff_level_params *w = &p->level[l];
    free((void *)w->merge_gate_logit);
    for (int s = 0; s < 2; s++) {
      free((void *)w->scan_decay_logit[s]);
      free((void *)w->scan_input_gain_raw[s]);
      free((void *)w->scan_output_gain_raw[s]);
      free((void *)w->scan_state_bias[s]);
    }
    free((void *)w->token_norm_weight);
    free((void *)w->token_norm_bias);
    free((void *)w->mlp0_weight);
    free((void *)w->mlp0_bias);
    free((void *)w->mlp2_weight);
    free((void *)w->mlp2_bias);
    free((void *)w->dw_weight);
    free((void *)w->dw_bias);
    free((void *)w->pw_weight);
    free((void *)w->pw_bias);
    free((void *)w->norm_weight);
    free((void *)w->norm_bias);
  }
  memset(p, 0, sizeof *p);
}

double ff_ref_rnd(apx_dtype dt, double v) {
  float f = (float)v;
  if (dt == APX_DTYPE_F16)
    return apx_round_f16(f);
  if (dt == APX_DTYPE_BF16)
    return apx_round_bf16(f);
  return f;
}

double ff_ref_ulp(apx_dtype dt, double v) {
  int mant = dt == APX_DTYPE_F16 ? 10 : dt == APX_DTYPE_BF16 ? 7 : 23;
  double a = fabs(v);
  if (a < 1e-30)
    a = 1e-30;
  int e;
  frexp(a, &e);
  return ldexp(1.0, e - 1 - mant);
}

double ff_ref_tol(apx_dtype dt) {
  return dt == APX_DTYPE_F16 ? 2e-3 : dt == APX_DTYPE_BF16 ? 1.6e-2 : 1e-5;
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus_d(double x) { return x > 20.0 ? x : log1p(exp(x)); }

double ff_ref_decay(apx_dtype dt, float logit) {
  return ff_ref_rnd(dt, 1e-3 + 0.998 * sigmoid_d(logit));
}
double ff_ref_gain(apx_dtype dt, float raw) { return ff_ref_rnd(dt, softplus_d(raw) + 1e-6); }

void ff_ref_tokens(apx_dtype dt, const float *tile, int64_t C, int64_t n, double *tok,
                   double *mag) {
  for (int64_t c = 0; c < C; c++) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
      s += tile[c * n + i];
      m += fabs(tile[c * n + i]);
    }
    tok[c] = ff_ref_rnd(dt, s / (double)n);
    mag[c] = m / (double)n;
  }
}

static double scan_sanitize_d(double x, double lim) {
  if (isnan(x))
    return 0.0;
  return x > lim ? lim : x < -lim ? -lim : x;
}

/* One direction's scan of channel c into y, mag (dir 0 forward, 1 backward). */
static void scan_direction(const ff_ref_scan_vectors *v, apx_dtype dt, const float *tok, int64_t K,
                           int64_t C, int dir, int64_t c, double *y, double *mag) {
  const double lim = ff_ref_rnd(dt, 1e4);
  double s = 0, sm = 0;
  const double d = v->decay[dir][c], om = 1.0 - d;
  for (int64_t step = 0; step < K; step++) {
    int64_t k = dir ? K - 1 - step : step;
    double x = scan_sanitize_d(tok[k * C + c], lim);
    double drive = v->input_gain[dir][c] * x + v->state_bias[dir][c];
    double drive_mag = fabs(v->input_gain[dir][c] * x) + fabs(v->state_bias[dir][c]);
    s = d * s + om * drive;
    sm = d * sm + om * drive_mag;
    y[k * C + c] = ff_ref_rnd(dt, v->output_gain[dir][c] * s);
    mag[k * C + c] = fabs(v->output_gain[dir][c]) * sm;
  }
}

void ff_ref_scan_forward(const ff_ref_scan_vectors *v, apx_dtype dt, const float *tok, int64_t K,
                         int64_t C, double *y, double *mag) {
  for (int64_t c = 0; c < C; c++)
    scan_direction(v, dt, tok, K, C, 0, c, y, mag);
}

void ff_ref_scan_merge(const ff_ref_scan_vectors *v, apx_dtype dt, const float *tok, int64_t K,
                       int64_t C, double *mixed, double *mag) {
  double *yf = malloc((size_t)(4 * K * C + 1) * sizeof(double));
  double *yf_mag = yf + K * C, *yb = yf_mag + K * C, *yb_mag = yb + K * C;
  ff_ref_scan_forward(v, dt, tok, K, C, yf, yf_mag);
  for (int64_t c = 0; c < C; c++) {
    scan_direction(v, dt, tok, K, C, 1, c, yb, yb_mag);
    double g = v->gate[c], omg = ff_ref_rnd(dt, 1.0 - g);
    for (int64_t k = 0; k < K; k++) {
      const int64_t e = k * C + c;
      mixed[e] = ff_ref_rnd(dt, ff_ref_rnd(dt, g * yf[e]) + ff_ref_rnd(dt, omg * yb[e]));
      mag[e] = fabs(g) * yf_mag[e] + fabs(omg) * yb_mag[e];
    }
  }
  free(yf);
}

void ff_ref_film(const apx_ff_level_params *w, apx_dtype dt, int64_t C, const float *mixed,
                 double *gamma, double *gamma_mag, double *beta, double *beta_mag) {
  double *x = malloc((size_t)C * 4 * sizeof(double));
  double *h = x + C, *hm = h + C, *xm = hm + C;
  double mean = 0, var = 0;
  for (int64_t c = 0; c < C; c++) {
    double v = mixed[c];
    v = isnan(v) ? 0.0 : v > 1e4 ? 1e4 : v < -1e4 ? -1e4 : v;
    x[c] = v;
    mean += v;
  }
  mean /= (double)C;
  for (int64_t c = 0; c < C; c++)
    var += (x[c] - mean) * (x[c] - mean);
  var /= (double)C;
  const double sd = sqrt(var + 1e-5);
  for (int64_t c = 0; c < C; c++) {
    double xn = (x[c] - mean) / sd;
    xm[c] = (fabs(x[c]) + fabs(mean)) / sd * fabs(w->token_norm_weight[c]) +
            fabs(w->token_norm_bias[c]);
    x[c] = xn * w->token_norm_weight[c] + w->token_norm_bias[c];
  }
  for (int64_t o = 0; o < C; o++) {
    double s = w->mlp0_bias[o], m = fabs(w->mlp0_bias[o]);
    for (int64_t c = 0; c < C; c++) {
      s += (double)w->mlp0_weight[o * C + c] * x[c];
      m += fabs(w->mlp0_weight[o * C + c]) * xm[c];
    }
    h[o] = s * sigmoid_d(s);
    hm[o] = 1.1 * m; /* SiLU's slope is within [-0.1, 1.1] */
  }
  for (int64_t o = 0; o < 2 * C; o++) {
    double s = w->mlp2_bias[o], m = fabs(w->mlp2_bias[o]);
    for (int64_t c = 0; c < C; c++) {
      s += (double)w->mlp2_weight[o * C + c] * h[c];
      m += fabs(w->mlp2_weight[o * C + c]) * hm[c];
    }
    if (o < C) {
      gamma[o] = ff_ref_rnd(dt, tanh(s));
      gamma_mag[o] = m; /* tanh's slope is at most 1 */
    } else {
      beta[o - C] = ff_ref_rnd(dt, s);
      beta_mag[o - C] = m;
    }
  }
  free(x);
}

void ff_ref_refine(const apx_ff_level_params *w, apx_dtype dt, int64_t C, int64_t t,
                   const float *tile, const float *gamma, const float *beta, double *r,
                   double *mag) {
  const int64_t N = t * t;
  double *m = malloc((size_t)(C * N * 2 + 4 * C * N) * sizeof(double));
  double *mm = m + C * N, *d = mm + C * N, *dm = d + C * N, *p = dm + C * N;
  for (int64_t c = 0; c < C; c++)
    for (int64_t i = 0; i < N; i++) {
      double sc = 1.0 + (double)gamma[c];
      m[c * N + i] = sc * tile[c * N + i] + beta[c];
      mm[c * N + i] = fabs(sc * tile[c * N + i]) + fabs(beta[c]);
    }
  for (int64_t c = 0; c < C; c++)
    for (int64_t y = 0; y < t; y++)
      for (int64_t x = 0; x < t; x++) {
        double s = w->dw_bias[c], sm = fabs(w->dw_bias[c]);
        for (int64_t i = 0; i < 3; i++)
          for (int64_t j = 0; j < 3; j++) {
            int64_t yy = y + i - 1, xx = x + j - 1;
            if (yy < 0 || yy >= t || xx < 0 || xx >= t)
              continue;
            s += (double)w->dw_weight[c * 9 + i * 3 + j] * m[c * N + yy * t + xx];
            sm += fabs(w->dw_weight[c * 9 + i * 3 + j]) * mm[c * N + yy * t + xx];
          }
        d[c * N + y * t + x] = s;
        dm[c * N + y * t + x] = sm;
      }
  double *pmag = malloc((size_t)(2 * C * N) * sizeof(double));
  double sum = 0, sq = 0;
  for (int64_t o = 0; o < 2 * C; o++)
    for (int64_t i = 0; i < N; i++) {
      double s = w->pw_bias[o], sm = fabs(w->pw_bias[o]);
      for (int64_t c = 0; c < C; c++) {
        s += (double)w->pw_weight[o * C + c] * d[c * N + i];
        sm += fabs(w->pw_weight[o * C + c]) * dm[c * N + i];
      }
      p[o * N + i] = s;
      pmag[o * N + i] = sm;
      sum += s;
    }
  const double count = (double)(2 * C * N), mean = sum / count;
  for (int64_t i = 0; i < 2 * C * N; i++)
    sq += (p[i] - mean) * (p[i] - mean);
  const double sd = sqrt(sq / count + 1e-5);
  for (int64_t c = 0; c < C; c++)
    for (int64_t i = 0; i < N; i++) {
      double pa = p[c * N + i], pg = p[(C + c) * N + i];
      double na = (pa - mean) / sd * w->norm_weight[c] + w->norm_bias[c];
      double ng = (pg - mean) / sd * w->norm_weight[C + c] + w->norm_bias[C + c];
      double na_mag = (pmag[c * N + i] + fabs(mean)) / sd * fabs(w->norm_weight[c]) +
                      fabs(w->norm_bias[c]);
      double ng_mag = (pmag[(C + c) * N + i] + fabs(mean)) / sd * fabs(w->norm_weight[C + c]) +
                      fabs(w->norm_bias[C + c]);
      double g = ng < 0 ? 0 : ng;
      r[c * N + i] = ff_ref_rnd(dt, na * g + m[c * N + i]);
      mag[c * N + i] = na_mag * g + fabs(na) * ng_mag + mm[c * N + i];
    }
  free(pmag);
  free(m);
}

double ff_ref_alpha(const apx_ff_level_params *w, apx_dtype dt, double bp, double up,
                    double *mag) {
  double wb = softplus_d(w->boundary_log_weight), wu = softplus_d(w->uncertainty_log_weight);
  double z = wb * bp + wu * up + w->gate_bias;
  double a = sigmoid_d(z);
  *mag = 0.25 * (fabs(wb * bp) + fabs(wu * up) + fabs(w->gate_bias)) + a;
  return ff_ref_rnd(dt, a);
}
