/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: tilessm_scan_backward (docs/ops.md, tilessm_scan_backward).
 *
 * Per stream (b, c) and direction: the forward recurrence again, keeping
 * each state (fp32), then the adjoint from the last step back to the first:
 *   a  = grad of the final state (0 when none is given)
 *   for each step j of the scan, last to first (token k, state s_j):
 *     a        += og * gy_k             (gy: grad_out through the merge)
 *     g_og     += gy_k * s_j
 *     gdrv      = om * a
 *     g_x[k]   += gdrv                  (times ig and the token's mask below)
 *     g_decay  += a * (s_{j-1} - drv_k)
 *     a         = d * a
 *   grad of the initial state = a.
 * A job is one batch row and a block of channels: the channels are
 * independent and contiguous, so the inner loops run across them. Every
 * per-channel sum is first a per-(b, c) sum in the step order above (the
 * forward direction's before the backward's), then a sum over b in order,
 * all fp32: the same bits for any thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "scan_index_simd.h"

/* Channels per job. */
#define SCAN_BWD_BLOCK 64

typedef struct scan_bwd {
  apx_dtype dtype; /* tokens dtype */
  const void *tokens, *grad_out;
  int64_t batch, steps, channels;
  /* fp32 per-channel parameters [C] as the forward uses them */
  const float *decay, *one_minus_decay, *input_gain, *output_gain, *state_bias;
  float lim;         /* |clamp_value| rounded to the tokens dtype */
  const float *init; /* [B][2][C] forward, backward initial state */
  const float *grad_final; /* [B][2][C] */
  apx_scan_direction direction;
  apx_scan_merge merge;
  const float *gate;  /* [B or 1][C] cast and clamped (gated merge) */
  int64_t gate_batch_stride;
  /* outputs of the jobs */
  float *grad_x;                /* [B][K][C] sum of gdrv over the directions */
  float *partial;               /* [5][B][C]: decay, ig, og, sb, gate sums per (b, c) */
  float *grad_init;             /* [B][2][C] */
} scan_bwd;

enum { P_DECAY, P_INPUT_GAIN, P_OUTPUT_GAIN, P_STATE_BIAS, P_GATE, P_COUNT };

/* docs/ops.md, tilessm_scan: the sanitised token (NaN -> 0, +-inf -> +-lim,
 * clamped to [-lim, lim]) and whether it passed unchanged (derivative 1:
 * finite and within the limits, PyTorch's nan_to_num and clamp). */
static inline float sanitised_token(float x, float lim, float *passes) {
  *passes = isfinite(x) && x >= -lim && x <= lim ? 1.0f : 0.0f;
  if (x != x)
    return 0.0f;
  if (lim < x)
    return lim;
  if (-lim > x)
    return -lim;
  return x;
}

/* The token at step j of direction dir. */
static inline int64_t token_of(const scan_bwd *x, int dir, int64_t j) {
  return dir ? x->steps - 1 - j : j;
}

/* The forward recurrence of direction dir over streams c0 .. c0+n-1 of row
 * b: states[j*n + i] = s_j. */
static void run_states(const scan_bwd *x, int64_t b, int64_t c0, int64_t n, int dir,
                       float *states) {
  const int64_t C = x->channels;
  float s[SCAN_BWD_BLOCK], passes;
  memcpy(s, x->init + (b * 2 + dir) * C + c0, (size_t)n * sizeof(float));
  for (int64_t j = 0; j < x->steps; j++) {
    int64_t row = (b * x->steps + token_of(x, dir, j)) * C;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = c0 + i;
      float tok = sanitised_token(si_load_f32(x->dtype, x->tokens, row + c), x->lim, &passes);
      float drive = x->input_gain[c] * tok + x->state_bias[c];
      s[i] = x->decay[c] * s[i] + x->one_minus_decay[c] * drive;
      states[j * n + i] = s[i];
    }
  }
}

/* y of direction dir at token k as the forward's merge read it (rounded to
 * the tokens dtype). */
static inline float y_at(const scan_bwd *x, const float *states, int dir, int64_t k, int64_t n,
                         int64_t i, int64_t c) {
  int64_t j = dir ? x->steps - 1 - k : k;
  return si_round(x->dtype, x->output_gain[c] * states[j * n + i]);
}

/* The adjoint of direction dir (see the top of the file); adds its gdrv into
 * grad_x and its sums into sums[P_*][i]. */
static void run_adjoint(const scan_bwd *x, int64_t b, int64_t c0, int64_t n, int dir,
                        const float *states, float sums[P_COUNT][SCAN_BWD_BLOCK]) {
  const int64_t C = x->channels, K = x->steps;
  const int bidir = x->direction == APX_SCAN_BIDIRECTIONAL;
  const float *gate = x->gate ? x->gate + b * x->gate_batch_stride : NULL;
  float a[SCAN_BWD_BLOCK], passes;
  memcpy(a, x->grad_final + (b * 2 + dir) * C + c0, (size_t)n * sizeof(float));
  for (int64_t j = K - 1; j >= 0; j--) {
    int64_t k = token_of(x, dir, j);
    int64_t row = (b * K + k) * C;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = c0 + i;
      /* docs/ops.md, tilessm_scan_backward: grad_out through the merge */
      float gy = si_load_f32(x->dtype, x->grad_out, row + c);
      if (bidir) {
        if (x->merge == APX_MERGE_AVG)
          gy = 0.5f * gy;
        else if (x->merge == APX_MERGE_GATED)
          gy = dir ? (1.0f - gate[c]) * gy : gate[c] * gy;
      }
      float s = states[j * n + i];
      float s_prev = j > 0 ? states[(j - 1) * n + i] : x->init[(b * 2 + dir) * C + c];
      float tok = sanitised_token(si_load_f32(x->dtype, x->tokens, row + c), x->lim, &passes);
      float drive = x->input_gain[c] * tok + x->state_bias[c];
      a[i] += x->output_gain[c] * gy;
      sums[P_OUTPUT_GAIN][i] += gy * s;
      float gdrv = x->one_minus_decay[c] * a[i];
      x->grad_x[row + c] += gdrv;
      sums[P_DECAY][i] += a[i] * (s_prev - drive);
      a[i] = x->decay[c] * a[i];
    }
  }
  memcpy(x->grad_init + (b * 2 + dir) * C + c0, a, (size_t)n * sizeof(float));
}

static void scan_bwd_job(const scan_bwd *x, int64_t b, int64_t c0, int64_t n, float *states_f,
                         float *states_b) {
  const int64_t C = x->channels, K = x->steps;
  float sums[P_COUNT][SCAN_BWD_BLOCK];
  float passes;
  memset(sums, 0, sizeof sums);
  for (int64_t k = 0; k < K; k++)
    memset(x->grad_x + (b * K + k) * C + c0, 0, (size_t)n * sizeof(float));
  const int forward = x->direction != APX_SCAN_BACKWARD;
  const int backward = x->direction != APX_SCAN_FORWARD;
  if (forward)
    run_states(x, b, c0, n, 0, states_f);
  if (backward)
    run_states(x, b, c0, n, 1, states_b);
  if (forward)
    run_adjoint(x, b, c0, n, 0, states_f, sums);
  if (backward)
    run_adjoint(x, b, c0, n, 1, states_b, sums);
  /* the sums over k of the token terms, in token order */
  for (int64_t k = 0; k < K; k++) {
    int64_t row = (b * K + k) * C;
    for (int64_t i = 0; i < n; i++) {
      int64_t c = c0 + i;
      float tok = sanitised_token(si_load_f32(x->dtype, x->tokens, row + c), x->lim, &passes);
      float gdrv = x->grad_x[row + c];
      sums[P_INPUT_GAIN][i] += gdrv * tok;
      sums[P_STATE_BIAS][i] += gdrv;
      if (x->gate) {
        float yf = y_at(x, states_f, 0, k, n, i, c), yb = y_at(x, states_b, 1, k, n, i, c);
        sums[P_GATE][i] += si_load_f32(x->dtype, x->grad_out, row + c) * (yf - yb);
      }
      x->grad_x[row + c] = x->input_gain[c] * gdrv * passes;
    }
  }
  for (int p = 0; p < P_COUNT; p++)
    memcpy(x->partial + ((size_t)p * x->batch + b) * C + c0, sums[p], (size_t)n * sizeof(float));
}

/* Job `job`: row b's channels [c0, c0 + n), a block of them, with its own
 * two state rows of job_states. */
static void scan_bwd_item(const scan_bwd *x, int64_t job, int64_t blocks_per_row, int64_t block,
                          int64_t C, int64_t K, float *job_states) {
  const int64_t b = job / blocks_per_row, c0 = (job % blocks_per_row) * block;
  const int64_t n = C - c0 < block ? C - c0 : block;
  float *states = job_states + (size_t)job * 2 * (size_t)(K * block);
  scan_bwd_job(x, b, c0, n, states, states + K * block);
}

apx_status cpu_tilessm_scan_backward(void *state, const apx_tilessm_scan_backward_args *args,
                                     const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *tokens = args->tokens;
  const apx_dtype dt = tokens->dtype;
  const int64_t B = tokens->shape[0], K = tokens->shape[1], C = tokens->shape[2];
  const int gated = args->direction == APX_SCAN_BIDIRECTIONAL && args->merge == APX_MERGE_GATED;
  const int64_t gate_rows = gated ? (args->merge_gate && args->merge_gate->ndim == 3 ? B : 1) : 0;
  if (C == 0)
    return APX_OK;

  /* params [5][C], init and grad_final and grad_init [B][2][C] each, the
   * gate [rows][C], grad_x [B][K][C], partial [5][B][C], then the states of
   * every job ([jobs][2][K][block]) */
  const int64_t block = C < SCAN_BWD_BLOCK ? C : SCAN_BWD_BLOCK;
  const int64_t blocks_per_row = (C + block - 1) / block, jobs = B * blocks_per_row;
  size_t floats = (size_t)C * 5 + (size_t)B * 2 * (size_t)C * 3 + (size_t)gate_rows * (size_t)C +
                  (size_t)(B * K * C) + (size_t)P_COUNT * (size_t)(B * C) +
                  (size_t)jobs * 2 * (size_t)K * (size_t)block;
  float *buf = malloc((floats ? floats : 1) * sizeof(float));
  if (!buf)
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tilessm_scan_backward: cannot allocate %zu bytes of scratch",
                              floats * sizeof(float));
  float *decay = buf, *one_minus_decay = buf + C, *input_gain = buf + 2 * C;
  float *output_gain = buf + 3 * C, *state_bias = buf + 4 * C;
  float *init = buf + 5 * C, *grad_final = init + B * 2 * C, *grad_init = grad_final + B * 2 * C;
  float *gate = grad_init + B * 2 * C;
  float *grad_x = gate + gate_rows * C;
  float *partial = grad_x + B * K * C;
  float *job_states = partial + P_COUNT * B * C;

  /* docs/ops.md, tilessm_scan: the forward's parameters, with the masks of
   * the decay's and the gate's clamps */
  float *clamp_passes = malloc((size_t)C * sizeof(float));
  float *gate_passes = gated ? malloc((size_t)(gate_rows * C) * sizeof(float)) : NULL;
  if (!clamp_passes || (gated && !gate_passes)) {
    free(clamp_passes);
    free(gate_passes);
    free(buf);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tilessm_scan_backward: cannot allocate %zu bytes of scratch",
                              (size_t)(C + gate_rows * C) * sizeof(float));
  }
  const apx_tilessm_scan_args forward = {
      tokens,          args->decay,      args->input_gain, args->output_gain,
      args->state_bias, args->init_state, args->merge_gate, args->clamp_value,
      args->direction, args->merge,      NULL,             NULL};
  cpu_scan_vectors(&forward, decay, one_minus_decay, input_gain, output_gain, state_bias,
                   clamp_passes);
  cpu_scan_init(&forward, init);
  if (gated) cpu_scan_gate(&forward, gate_rows, gate, gate_passes);
  /* grad_final_state: [B,2,C] bidirectional, else [B,C] of the one direction */
  const apx_tensor *init_t = args->init_state, *gfs = args->grad_final_state;
  const int bidir = args->direction == APX_SCAN_BIDIRECTIONAL;
  for (int64_t b = 0; b < B; b++)
    for (int dir = 0; dir < 2; dir++)
      for (int64_t c = 0; c < C; c++) {
        float g = 0.0f;
        if (gfs && (bidir || dir == (args->direction == APX_SCAN_BACKWARD)))
          g = si_load_f32(gfs->dtype, gfs->data, bidir ? (b * 2 + dir) * C + c : b * C + c);
        grad_final[(b * 2 + dir) * C + c] = g;
      }

  scan_bwd x = {
      .dtype = dt,
      .tokens = tokens->data,
      .grad_out = args->grad_out->data,
      .batch = B,
      .steps = K,
      .channels = C,
      .decay = decay,
      .one_minus_decay = one_minus_decay,
      .input_gain = input_gain,
      .output_gain = output_gain,
      .state_bias = state_bias,
      .lim = si_round(dt, (float)fabs(args->clamp_value)),
      .init = init,
      .grad_final = grad_final,
      .direction = args->direction,
      .merge = args->merge,
      .gate = gated ? gate : NULL,
      .gate_batch_stride = gate_rows > 1 ? C : 0,
      .grad_x = grad_x,
      .partial = partial,
      .grad_init = grad_init,
  };

  /* a team of one runs here: entering a parallel region costs a team's
   * setup even when its if clause is false */
  if (cpu_team_size(st, 6 * B * K * C) <= 1) {
    for (int64_t job = 0; job < jobs; job++)
      scan_bwd_item(&x, job, blocks_per_row, block, C, K, job_states);
  } else {
    CPU_OMP_FOR(st->threads, 6 * B * K * C)
    for (int64_t job = 0; job < jobs; job++)
      scan_bwd_item(&x, job, blocks_per_row, block, C, K, job_states);
  }

  /* the stores: each gradient rounded once to its dtype */
  if (args->grad_tokens)
    for (int64_t i = 0; i < B * K * C; i++)
      si_store_f32(dt, args->grad_tokens->data, i, grad_x[i]);
  const apx_tensor *vector_grads[4] = {args->grad_decay, args->grad_input_gain,
                                       args->grad_output_gain, args->grad_state_bias};
  for (int p = 0; p < 4; p++) {
    if (!vector_grads[p])
      continue;
    for (int64_t c = 0; c < C; c++) {
      float sum = 0.0f;
      for (int64_t b = 0; b < B; b++)
        sum += partial[((size_t)p * B + b) * C + c];
      if (p == P_DECAY)
        sum *= clamp_passes[c];
      si_store_f32(vector_grads[p]->dtype, vector_grads[p]->data, c, sum);
    }
  }
  const apx_tensor *gis = args->grad_init_state;
  if (gis) {
    /* [B,2,C] per direction; [B,C] both directions' (forward first) or the
     * one direction's */
    int per_direction = init_t ? init_t->ndim == 3 : bidir;
    for (int64_t b = 0; b < B; b++)
      for (int64_t c = 0; c < C; c++) {
        float gf = grad_init[(b * 2 + 0) * C + c], gb = grad_init[(b * 2 + 1) * C + c];
        if (per_direction) {
          si_store_f32(gis->dtype, gis->data, (b * 2 + 0) * C + c,
                       args->direction == APX_SCAN_BACKWARD ? 0.0f : gf);
          si_store_f32(gis->dtype, gis->data, (b * 2 + 1) * C + c,
                       args->direction == APX_SCAN_FORWARD ? 0.0f : gb);
        } else {
          float g = args->direction == APX_SCAN_FORWARD    ? gf
                    : args->direction == APX_SCAN_BACKWARD ? gb
                                                           : gf + gb;
          si_store_f32(gis->dtype, gis->data, b * C + c, g);
        }
      }
  }
  const apx_tensor *gmg = args->grad_merge_gate;
  if (gmg) {
    /* [B,1,C]: per row; [C] (or no gate read): the sum over b; zeros when
     * the merge reads no gate */
    int per_row = gated && gate_rows > 1;
    for (int64_t r = 0; r < (per_row ? B : 1); r++)
      for (int64_t c = 0; c < C; c++) {
        float sum = 0.0f;
        if (gated) {
          for (int64_t b = per_row ? r : 0; b < (per_row ? r + 1 : B); b++)
            sum += partial[((size_t)P_GATE * B + b) * C + c];
          sum *= gate_passes[r * C + c];
        }
        si_store_f32(gmg->dtype, gmg->data, r * C + c, sum);
      }
  }
  free(gate_passes);
  free(clamp_passes);
  free(buf);
  return APX_OK;
}
