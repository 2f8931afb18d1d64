/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend, FF path: the prepared weights (cpu_ff_prepare, ff_cpu.h;
 * docs/ff_infer.md, One level): per level the scan and gate vectors
 * derived in fp32 and rounded to the frame dtype once, the MLP weights
 * transposed, the 1x1 conv's weights packed for its microkernel, all in one
 * allocation. Made once per (weights, dtype) through the core's cache
 * (ff_infer.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ff_cpu.h"

static size_t level_floats(int64_t C) {
  size_t c = (size_t)C, blocks = (c * 2 + CPU_FF_MR - 1) / CPU_FF_MR;
  return 10 * c + 2 * c + 2 * c + c * c + c + 2 * c * c + 2 * c + 9 * c + c + 2 * c * c +
         blocks * CPU_FF_MR * c + 2 * c + 4 * c;
}

static float *take(float **cursor, size_t n) {
  float *p = *cursor;
  *cursor += n;
  return p;
}

static void prepare_level(const apx_ff_level_params *w, apx_dtype dt, int64_t C, float **cur,
                          cpu_ff_level *lv) {
  for (int s = 0; s < 2; s++) {
    float *decay = take(cur, C), *omd = take(cur, C), *ig = take(cur, C), *og = take(cur, C),
          *sb = take(cur, C);
    for (int64_t c = 0; c < C; c++) {
      /* docs/ff_infer.md: derived in fp32, rounded once; the scan then
       * clamps decay with fp32 bounds (docs/ops.md, tilessm_scan) */
      float d = cpu_ff_rnd(dt, apx_ff_decay(w->scan_decay_logit[s][c]));
      d = d < 1e-6f ? 1e-6f : d;
      d = d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
      decay[c] = d;
      omd[c] = 1.0f - d;
      ig[c] = cpu_ff_rnd(dt, apx_ff_gain(w->scan_input_gain_raw[s][c]));
      og[c] = cpu_ff_rnd(dt, apx_ff_gain(w->scan_output_gain_raw[s][c]));
      sb[c] = cpu_ff_rnd(dt, w->scan_state_bias[s][c]);
    }
    lv->decay[s] = decay;
    lv->one_minus_decay[s] = omd;
    lv->input_gain[s] = ig;
    lv->output_gain[s] = og;
    lv->state_bias[s] = sb;
  }
  float *gate = take(cur, C), *omg = take(cur, C);
  for (int64_t c = 0; c < C; c++) {
    gate[c] = cpu_ff_rnd(dt, apx_sigmoidf(w->merge_gate_logit[c]));
    omg[c] = cpu_ff_rnd(dt, 1.0f - gate[c]); /* docs/ops.md, tilessm_scan gated merge */
  }
  lv->gate = gate;
  lv->one_minus_gate = omg;

  float *lnw = take(cur, C), *lnb = take(cur, C);
  memcpy(lnw, w->token_norm_weight, (size_t)C * sizeof(float));
  memcpy(lnb, w->token_norm_bias, (size_t)C * sizeof(float));
  lv->token_norm_weight = lnw;
  lv->token_norm_bias = lnb;

  float *m0 = take(cur, (size_t)(C * C)), *m0b = take(cur, C);
  for (int64_t o = 0; o < C; o++)
    for (int64_t c = 0; c < C; c++)
      m0[c * C + o] = w->mlp0_weight[o * C + c];
  memcpy(m0b, w->mlp0_bias, (size_t)C * sizeof(float));
  lv->mlp0_t = m0;
  lv->mlp0_bias = m0b;

  float *m2 = take(cur, (size_t)(2 * C * C)), *m2b = take(cur, 2 * C);
  for (int64_t o = 0; o < 2 * C; o++)
    for (int64_t c = 0; c < C; c++)
      m2[c * 2 * C + o] = w->mlp2_weight[o * C + c];
  memcpy(m2b, w->mlp2_bias, (size_t)(2 * C) * sizeof(float));
  lv->mlp2_t = m2;
  lv->mlp2_bias = m2b;

  float *dw = take(cur, (size_t)(9 * C)), *dwb = take(cur, C);
  memcpy(dw, w->dw_weight, (size_t)(9 * C) * sizeof(float));
  memcpy(dwb, w->dw_bias, (size_t)C * sizeof(float));
  lv->dw_weight = dw;
  lv->dw_bias = dwb;

  const int64_t rows = 2 * C, blocks = (rows + CPU_FF_MR - 1) / CPU_FF_MR;
  float *pw = take(cur, (size_t)(rows * C));
  float *packed = take(cur, (size_t)(blocks * CPU_FF_MR * C));
  memcpy(pw, w->pw_weight, (size_t)(rows * C) * sizeof(float));
  for (int64_t ob = 0; ob < blocks; ob++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < CPU_FF_MR; i++) {
        int64_t o = ob * CPU_FF_MR + i;
        packed[(ob * C + c) * CPU_FF_MR + i] = o < rows ? pw[o * C + c] : 0.0f;
      }
  lv->pw_weight = pw;
  lv->pw_packed = packed;

  float *pwb = take(cur, 2 * C), *nw = take(cur, 2 * C), *nb = take(cur, 2 * C);
  memcpy(pwb, w->pw_bias, (size_t)(2 * C) * sizeof(float));
  memcpy(nw, w->norm_weight, (size_t)(2 * C) * sizeof(float));
  memcpy(nb, w->norm_bias, (size_t)(2 * C) * sizeof(float));
  lv->pw_bias = pwb;
  lv->norm_weight = nw;
  lv->norm_bias = nb;

  lv->w_boundary = apx_softplusf(w->boundary_log_weight);
  lv->w_uncertainty = apx_softplusf(w->uncertainty_log_weight);
  lv->gate_bias = w->gate_bias;
}

apx_status cpu_ff_prepare(const apx_ff_params *params, apx_dtype dtype, cpu_ff_prepared **out) {
  const int64_t C = params->channels;
  cpu_ff_prepared *p = calloc(1, sizeof *p);
  float *block = malloc(2 * level_floats(C) * sizeof(float));
  if (!p || !block) {
    free(p);
    free(block);
    return APX_ERR_NO_MEMORY;
  }
  p->channels = C;
  p->dtype = dtype;
  p->block = block;
  float *cur = block;
  for (int l = 0; l < 2; l++)
    prepare_level(&params->level[l], dtype, C, &cur, &p->level[l]);
  *out = p;
  return APX_OK;
}

void cpu_ff_prepared_free(cpu_ff_prepared *prepared) {
  if (!prepared)
    return;
  free(prepared->block);
  free(prepared);
}
