/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: TileSSM scan (docs/ops.md, tilessm_scan).
 *
 * Each (b, c) stream is a sequential fp32 recurrence over K, but the C
 * streams of a batch row are independent and contiguous in memory, so the
 * kernels vectorise across C (one SIMD lane per stream) and walk K. Work is
 * split into jobs of (b, block of channels) shared among OpenMP threads; a
 * job runs its streams forward and/or backward and merges in place, so no
 * two threads ever touch the same output element.
 *
 * The portable loop below is the reading copy of the math; the AVX2 path
 * performs the same IEEE fp32 operations in the same order (no FMA: the
 * backend builds with -ffp-contract=off and this file enables no FMA
 * target), so both give identical bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "scan_index_simd.h"

/* Channels per job. A multiple of 8 (AVX2 lanes) so that only a row's last
 * block has a scalar tail. */
#define SCAN_MAX_BLOCK 64

typedef struct scan_ctx {
  apx_dtype dtype; /* tokens dtype: out and the merge use it too */
  const void *tokens;
  void *out;
  int64_t steps, channels;
  /* fp32 per-channel parameters [C] (docs/ops.md, tilessm_scan: converted straight to
   * fp32, decay clamped with fp32 constants) */
  const float *decay, *one_minus_decay, *input_gain, *output_gain, *state_bias;
  float lim;                /* |clamp_value| rounded to the tokens dtype */
  const float *init;        /* [B][2][C]: forward, backward initial state */
  float *final;             /* [B][2][C]: forward, backward final state */
  apx_scan_direction direction;
  apx_scan_merge merge;
  const float *gate;        /* gated merge: [B or 1][C], cast and clamped */
  int64_t gate_batch_stride; /* C for a [B,1,C] gate, 0 for [C] */
} scan_ctx;

/* docs/ops.md, tilessm_scan: NaN -> 0, +-inf -> +-lim, then clamp to [-lim, lim]. The
 * comparisons are written so that the SIMD min/max below match bit for bit
 * (-0 stays -0; with lim = 0 a negative token becomes -0). */
static inline float sanitize(float x, float lim) {
  if (x != x) return 0.0f;
  if (lim < x) return lim;
  if (-lim > x) return -lim;
  return x;
}

/* docs/ops.md, tilessm_scan merge, in the tokens dtype with R-model rounding. */
static inline float merge_pair(apx_dtype dt, apx_scan_merge mode, float yf,
                               float yb, float g) {
  switch (mode) {
  case APX_MERGE_SUM: return si_round(dt, yf + yb);
  case APX_MERGE_AVG: return si_round(dt, 0.5f * si_round(dt, yf + yb));
  default: {
    float gf = si_round(dt, g * yf);
    float one_minus_g = si_round(dt, 1.0f - g);
    float gb = si_round(dt, one_minus_g * yb);
    return si_round(dt, gf + gb);
  }
  }
}

/* Run streams c0 .. c0+n-1 of batch row b over all K, forward or reversed.
 * state[n] holds the fp32 states in and out. With merge_with_out the
 * previous content of out (the forward pass's y) is merged with this pass's
 * y; otherwise y is stored. */
static void scan_streams_portable(const scan_ctx *x, int64_t b, int64_t c0,
                                  int64_t n, int reverse, int merge_with_out,
                                  float *state) {
  const apx_dtype dt = x->dtype;
  const float lim = x->lim;
  const float *gate = x->gate ? x->gate + b * x->gate_batch_stride : NULL;
  for (int64_t step = 0; step < x->steps; step++) {
    int64_t k = reverse ? x->steps - 1 - step : step;
    int64_t row = (b * x->steps + k) * x->channels;
    for (int64_t j = 0; j < n; j++) {
      int64_t c = c0 + j;
      float tok = sanitize(si_load_f32(dt, x->tokens, row + c), lim);
      float in_term = x->input_gain[c] * tok;
      float drive = in_term + x->state_bias[c];
      float kept = x->decay[c] * state[j];
      float added = x->one_minus_decay[c] * drive;
      state[j] = kept + added;
      float y = si_round(dt, x->output_gain[c] * state[j]);
      if (merge_with_out)
        y = merge_pair(dt, x->merge, si_load_f32(dt, x->out, row + c), y,
                       gate ? gate[c] : 0.0f);
      si_store_f32(dt, x->out, row + c, y);
    }
  }
}

#if SI_HAVE_X86
/* The same loop on 8 streams per vector, nv vectors (nv*8 <= SCAN_MAX_BLOCK). */
SI_TARGET_AVX2 static inline __attribute__((always_inline)) void
scan_streams_avx2_impl(const scan_ctx *x, int64_t b, int64_t c0, int64_t nv,
                       int reverse, int merge_with_out, float *state,
                       const apx_dtype dt) {
  const size_t es = apx_backend_dtype_size(dt);
  const __m256 lim = _mm256_set1_ps(x->lim);
  const __m256 neg_lim = _mm256_set1_ps(-x->lim);
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const float *gate = x->gate ? x->gate + b * x->gate_batch_stride : NULL;
  __m256 s[SCAN_MAX_BLOCK / 8];
  for (int64_t v = 0; v < nv; v++) s[v] = _mm256_loadu_ps(state + 8 * v);
  for (int64_t step = 0; step < x->steps; step++) {
    int64_t k = reverse ? x->steps - 1 - step : step;
    int64_t row = (b * x->steps + k) * x->channels + c0;
    const char *tok_row = (const char *)x->tokens + (size_t)row * es;
    char *out_row = (char *)x->out + (size_t)row * es;
    for (int64_t v = 0; v < nv; v++) {
      int64_t c = c0 + 8 * v;
      __m256 tok = si8_load(dt, tok_row + (size_t)(8 * v) * es);
      tok = _mm256_and_ps(tok, _mm256_cmp_ps(tok, tok, _CMP_ORD_Q));
      tok = _mm256_min_ps(lim, tok);     /* lim < tok ? lim : tok */
      tok = _mm256_max_ps(neg_lim, tok); /* -lim > tok ? -lim : tok */
      __m256 in_term = _mm256_mul_ps(_mm256_loadu_ps(x->input_gain + c), tok);
      __m256 drive = _mm256_add_ps(in_term, _mm256_loadu_ps(x->state_bias + c));
      __m256 kept = _mm256_mul_ps(_mm256_loadu_ps(x->decay + c), s[v]);
      __m256 added = _mm256_mul_ps(_mm256_loadu_ps(x->one_minus_decay + c), drive);
      s[v] = _mm256_add_ps(kept, added);
      /* y is rounded to the tokens dtype by the store; the merge needs it
       * rounded first */
      __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x->output_gain + c), s[v]);
      char *out_p = out_row + (size_t)(8 * v) * es;
      if (merge_with_out) {
        y = si8_round(dt, y);
        __m256 yf = si8_load(dt, out_p);
        /* merge_pair's roundings, the last one done by the store */
        switch (x->merge) {
        case APX_MERGE_SUM: y = _mm256_add_ps(yf, y); break;
        case APX_MERGE_AVG: y = _mm256_mul_ps(half, si8_round(dt, _mm256_add_ps(yf, y))); break;
        default: {
          __m256 g = _mm256_loadu_ps(gate + c);
          __m256 gf = si8_round(dt, _mm256_mul_ps(g, yf));
          __m256 gb = si8_round(dt, _mm256_mul_ps(si8_round(dt, _mm256_sub_ps(one, g)), y));
          y = _mm256_add_ps(gf, gb);
        }
        }
      }
      si8_store(dt, out_p, y);
    }
  }
  for (int64_t v = 0; v < nv; v++) _mm256_storeu_ps(state + 8 * v, s[v]);
}

SI_TARGET_AVX2 static void scan_streams_avx2(const scan_ctx *x, int64_t b,
                                             int64_t c0, int64_t nv, int reverse,
                                             int merge_with_out, float *state) {
  switch (x->dtype) {
  case APX_DTYPE_F16:
    scan_streams_avx2_impl(x, b, c0, nv, reverse, merge_with_out, state, APX_DTYPE_F16);
    break;
  case APX_DTYPE_BF16:
    scan_streams_avx2_impl(x, b, c0, nv, reverse, merge_with_out, state, APX_DTYPE_BF16);
    break;
  default:
    scan_streams_avx2_impl(x, b, c0, nv, reverse, merge_with_out, state, APX_DTYPE_F32);
    break;
  }
}
#endif

/* One pass over streams [c0, c0+n) of row b: vector lanes first, then the
 * scalar tail, both with the same math. */
static void scan_pass(const scan_ctx *x, si_isa isa, int64_t b, int64_t c0,
                      int64_t n, int reverse, int merge_with_out, float *state) {
  int64_t done = 0;
#if SI_HAVE_X86
  if (isa >= SI_ISA_AVX2 && n >= 8) {
    scan_streams_avx2(x, b, c0, n / 8, reverse, merge_with_out, state);
    done = n / 8 * 8;
  }
#endif
  (void)isa;
  if (done < n)
    scan_streams_portable(x, b, c0 + done, n - done, reverse, merge_with_out,
                          state + done);
}

static void scan_job(const scan_ctx *x, si_isa isa, int64_t b, int64_t c0,
                     int64_t n) {
  float state[SCAN_MAX_BLOCK];
  const int64_t C = x->channels;
  const float *init_f = x->init + (b * 2 + 0) * C + c0;
  const float *init_b = x->init + (b * 2 + 1) * C + c0;
  float *final_f = x->final + (b * 2 + 0) * C + c0;
  float *final_b = x->final + (b * 2 + 1) * C + c0;
  if (x->direction == APX_SCAN_BACKWARD) {
    memcpy(state, init_b, (size_t)n * sizeof(float));
    scan_pass(x, isa, b, c0, n, 1, 0, state);
    memcpy(final_b, state, (size_t)n * sizeof(float));
    return;
  }
  memcpy(state, init_f, (size_t)n * sizeof(float));
  scan_pass(x, isa, b, c0, n, 0, 0, state);
  memcpy(final_f, state, (size_t)n * sizeof(float));
  if (x->direction == APX_SCAN_BIDIRECTIONAL) {
    /* out now holds yf (already in the tokens dtype, so exact); the
     * backward pass merges into it */
    memcpy(state, init_b, (size_t)n * sizeof(float));
    scan_pass(x, isa, b, c0, n, 1, 1, state);
    memcpy(final_b, state, (size_t)n * sizeof(float));
  }
}

void cpu_scan_vectors(const apx_tilessm_scan_args *args, float *decay, float *one_minus_decay,
                      float *input_gain, float *output_gain, float *state_bias,
                      float *decay_passes) {
  const int64_t C = args->tokens->shape[2];
  for (int64_t c = 0; c < C; c++) {
    /* docs/ops.md, tilessm_scan: straight to fp32; both clamp bounds fp32 constants */
    float d = si_load_f32(args->decay->dtype, args->decay->data, c);
    if (decay_passes) decay_passes[c] = d >= 1e-6f && d <= 1.0f - 1e-6f ? 1.0f : 0.0f;
    d = d < 1e-6f ? 1e-6f : d;
    d = d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
    decay[c] = d;
    one_minus_decay[c] = 1.0f - d;
    input_gain[c] = si_load_f32(args->input_gain->dtype, args->input_gain->data, c);
    output_gain[c] = si_load_f32(args->output_gain->dtype, args->output_gain->data, c);
    state_bias[c] = si_load_f32(args->state_bias->dtype, args->state_bias->data, c);
  }
}

void cpu_scan_init(const apx_tilessm_scan_args *args, float *init) {
  /* docs/ops.md, tilessm_scan: init_state is cast to the tokens dtype first; [B,C]
   * seeds both directions, [B,2,C] gives forward then backward */
  const apx_dtype dt = args->tokens->dtype;
  const int64_t B = args->tokens->shape[0], C = args->tokens->shape[2];
  const apx_tensor *init_t = args->init_state;
  for (int64_t b = 0; b < B; b++)
    for (int dir = 0; dir < 2; dir++)
      for (int64_t c = 0; c < C; c++) {
        float v = 0.0f;
        if (init_t) {
          int64_t i = init_t->ndim == 3 ? (b * 2 + dir) * C + c : b * C + c;
          v = si_round(dt, si_load_f32(init_t->dtype, init_t->data, i));
        }
        init[(b * 2 + dir) * C + c] = v;
      }
}

void cpu_scan_gate(const apx_tilessm_scan_args *args, int64_t rows, float *gate,
                   float *gate_passes) {
  /* cast to the tokens dtype, clamp to [0, 1]; absent = 0.5 */
  const apx_dtype dt = args->tokens->dtype;
  for (int64_t i = 0; i < rows * args->tokens->shape[2]; i++) {
    float g = 0.5f;
    if (args->merge_gate)
      g = si_round(dt, si_load_f32(args->merge_gate->dtype, args->merge_gate->data, i));
    if (gate_passes) gate_passes[i] = g >= 0.0f && g <= 1.0f ? 1.0f : 0.0f;
    g = g < 0.0f ? 0.0f : g;
    g = g > 1.0f ? 1.0f : g;
    gate[i] = g;
  }
}

apx_status cpu_tilessm_scan(void *state, const apx_tilessm_scan_args *args,
                            const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *tokens = args->tokens;
  const apx_dtype dt = tokens->dtype;
  const int64_t B = tokens->shape[0], K = tokens->shape[1], C = tokens->shape[2];
  const si_isa isa = si_isa_level();
  /* no channel or no batch: out and final_state are empty (the loops over
   * the other dims would still count up to their extents, ~2^58 for a shape
   * the core accepts); no token and no final_state: nothing to write (the
   * [B][2][C] scratch of such a shape would be just as large) */
  if (B == 0 || C == 0 || (K == 0 && !args->final_state)) return APX_OK;

  /* per-channel fp32 vectors, then [B][2][C] init, final, and the gate */
  size_t param_floats = (size_t)C * 5;
  size_t state_floats = (size_t)B * 2 * (size_t)C;
  int gated = args->direction == APX_SCAN_BIDIRECTIONAL &&
              args->merge == APX_MERGE_GATED;
  int64_t gate_rows = 0;
  if (gated) gate_rows = args->merge_gate && args->merge_gate->ndim == 3 ? B : 1;
  size_t total = param_floats + 2 * state_floats + (size_t)gate_rows * (size_t)C;
  float *buf = malloc((total ? total : 1) * sizeof(float));
  if (!buf)
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tilessm_scan: cannot allocate %zu bytes of scratch",
                              total * sizeof(float));
  float *decay = buf, *one_minus_decay = buf + C, *input_gain = buf + 2 * C,
        *output_gain = buf + 3 * C, *state_bias = buf + 4 * C;
  float *init = buf + param_floats;
  float *final = init + state_floats;
  float *gate = gated ? final + state_floats : NULL;

  cpu_scan_vectors(args, decay, one_minus_decay, input_gain, output_gain, state_bias, NULL);
  cpu_scan_init(args, init);
  if (gated) cpu_scan_gate(args, gate_rows, gate, NULL);

  scan_ctx x = {
      .dtype = dt,
      .tokens = tokens->data,
      .out = args->out->data,
      .steps = K,
      .channels = C,
      .decay = decay,
      .one_minus_decay = one_minus_decay,
      .input_gain = input_gain,
      .output_gain = output_gain,
      .state_bias = state_bias,
      .lim = si_round(dt, (float)fabs(args->clamp_value)),
      .init = init,
      .final = final,
      .direction = args->direction,
      .merge = args->merge,
      .gate = gate,
      .gate_batch_stride = gate_rows > 1 ? C : 0,
  };

  /* Blocks of channels per job: as wide as SCAN_MAX_BLOCK, narrower when
   * that would leave threads idle. */
  const int threads = st->threads;
  int64_t block = SCAN_MAX_BLOCK;
  while (block > 8 && B * ((C + block - 1) / block) < 2 * threads) block /= 2;
  int64_t blocks_per_row = C > 0 ? (C + block - 1) / block : 0;
  int64_t jobs = B * blocks_per_row;
  /* a scan step weighs about two element copies in the thread policy */
  int parallel = jobs > 1 && cpu_team_size(st, 2 * B * K * C) > 1;
  (void)parallel;

#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
#endif
  for (int64_t job = 0; job < jobs; job++) {
    int64_t b = job / blocks_per_row;
    int64_t c0 = (job % blocks_per_row) * block;
    int64_t n = C - c0 < block ? C - c0 : block;
    scan_job(&x, isa, b, c0, n);
  }

  /* docs/ops.md, tilessm_scan: final_state rounded to the tokens dtype */
  const apx_tensor *fs = args->final_state;
  if (fs) {
    int bidir = args->direction == APX_SCAN_BIDIRECTIONAL;
    for (int64_t b = 0; b < B; b++)
      for (int dir = 0; dir < (bidir ? 2 : 1); dir++) {
        int src_dir = bidir ? dir : (args->direction == APX_SCAN_BACKWARD);
        for (int64_t c = 0; c < C; c++) {
          float v = si_round(dt, final[(b * 2 + src_dir) * C + c]);
          int64_t i = bidir ? (b * 2 + dir) * C + c : b * C + c;
          si_store_f32(fs->dtype, fs->data, i, v);
        }
      }
  }
  free(buf);
  return APX_OK;
}
