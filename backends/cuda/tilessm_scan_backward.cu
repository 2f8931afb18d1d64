/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan_backward on CUDA (docs/ops.md, tilessm_scan_backward).
 * One thread per stream (b, c), neighbours in c side by side so that every
 * access of a step is coalesced: it runs the forward recurrence of each
 * direction again (fp32 states kept in the workspace), then the adjoint
 * from the last step back, the token terms in token order, and writes its
 * grad_tokens and its per-(b, c) sums. A second kernel, one thread per
 * channel, adds the sums over b in order and writes the [C] gradients, the
 * initial state's and the gate's. No atomics: the same bits run to run,
 * in the order of the cpu backend's loops. fp32 math, one rounding per
 * stored value. */
#include "cuda_backend.h"

#include <math.h>

enum { P_DECAY, P_INPUT_GAIN, P_OUTPUT_GAIN, P_STATE_BIAS, P_GATE, P_COUNT };

struct scan_bwd_args {
  const void *tokens, *grad_out, *decay, *input_gain, *output_gain, *state_bias;
  const void *init, *gate, *grad_final;
  int dt, decay_dt, ig_dt, og_dt, sb_dt, init_dt, gate_dt, grad_final_dt;
  int init_ndim, gate_rows; /* gate_rows: 0 (not gated), 1 ([C] or absent), B ([B,1,C]) */
  int64_t B, K, C;
  float lim;
  int direction, merge;
  void *grad_tokens;
  /* workspace: states [2][B][K][C], gdrv [B][K][C], partial [P_COUNT][B][C],
   * grad_init [B][2][C] */
  float *states, *gdrv, *partial, *grad_init;
};

/* docs/ops.md, tilessm_scan: the sanitised token and whether it passed
 * unchanged (finite and within [-lim, lim]: derivative 1). */
static __device__ __forceinline__ float sanitised_token(float x, float lim, float *passes) {
  *passes = isfinite(x) && x >= -lim && x <= lim ? 1.0f : 0.0f;
  if (x != x) return 0.0f;
  if (lim < x) return lim;
  if (-lim > x) return -lim;
  return x;
}

/* The gate as the merge uses it (cast, clamped; absent 0.5) and its
 * derivative's mask. */
static __device__ __forceinline__ float gate_at(const scan_bwd_args &a, int64_t b, int64_t c,
                                                float *passes) {
  *passes = 1.0f;
  if (!a.gate) return 0.5f;
  float g = cuda_round_any(cuda_load_any(a.gate, a.gate_dt, (a.gate_rows > 1 ? b : 0) * a.C + c),
                           a.dt);
  *passes = g >= 0.0f && g <= 1.0f ? 1.0f : 0.0f;
  return g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g;
}

__global__ void tilessm_scan_backward_streams(scan_bwd_args a) {
  CUDA_FOR(i, a.B * a.C) {
    const int64_t b = i / a.C, c = i % a.C, K = a.K, C = a.C;
    float d = cuda_load_any(a.decay, a.decay_dt, c);
    d = d < 1e-6f ? 1e-6f : d;
    d = d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
    const float om = 1.0f - d;
    const float ig = cuda_load_any(a.input_gain, a.ig_dt, c);
    const float og = cuda_load_any(a.output_gain, a.og_dt, c);
    const float sb = cuda_load_any(a.state_bias, a.sb_dt, c);
    const int bidir = a.direction == APX_SCAN_BIDIRECTIONAL;
    float gate_passes, gate = a.gate_rows ? gate_at(a, b, c, &gate_passes) : 0.5f;
    (void)gate_passes; /* the channel kernel applies it */
    float passes, sums[P_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t k = 0; k < K; k++) a.gdrv[(b * K + k) * C + c] = 0.0f;
    for (int dir = 0; dir < 2; dir++) {
      if ((dir == 0 && a.direction == APX_SCAN_BACKWARD) ||
          (dir == 1 && a.direction == APX_SCAN_FORWARD))
        continue;
      float *states = a.states + (int64_t)dir * a.B * K * C;
      float init = 0.0f;
      if (a.init)
        init = cuda_round_any(
            cuda_load_any(a.init, a.init_dt, a.init_ndim == 3 ? (b * 2 + dir) * C + c : b * C + c),
            a.dt);
      /* the forward recurrence again; states indexed by token */
      float s = init;
      for (int64_t j = 0; j < K; j++) {
        int64_t k = dir ? K - 1 - j : j, at = (b * K + k) * C + c;
        float tok = sanitised_token(cuda_load_any(a.tokens, a.dt, at), a.lim, &passes);
        s = d * s + om * (ig * tok + sb);
        states[at] = s;
      }
      /* the adjoint, last step first */
      float adj = 0.0f;
      if (a.grad_final)
        adj = cuda_load_any(a.grad_final, a.grad_final_dt, bidir ? (b * 2 + dir) * C + c : b * C + c);
      for (int64_t j = K - 1; j >= 0; j--) {
        int64_t k = dir ? K - 1 - j : j, at = (b * K + k) * C + c;
        int64_t prev_k = dir ? k + 1 : k - 1;
        float gy = cuda_load_any(a.grad_out, a.dt, at);
        if (bidir) {
          if (a.merge == APX_MERGE_AVG) gy = 0.5f * gy;
          else if (a.merge == APX_MERGE_GATED) gy = dir ? (1.0f - gate) * gy : gate * gy;
        }
        float s_j = states[at];
        float s_prev = j > 0 ? states[(b * K + prev_k) * C + c] : init;
        float tok = sanitised_token(cuda_load_any(a.tokens, a.dt, at), a.lim, &passes);
        float drive = ig * tok + sb;
        adj += og * gy;
        sums[P_OUTPUT_GAIN] += gy * s_j;
        a.gdrv[at] += om * adj;
        sums[P_DECAY] += adj * (s_prev - drive);
        adj = d * adj;
      }
      a.grad_init[(b * 2 + dir) * C + c] = adj;
    }
    if (a.direction == APX_SCAN_FORWARD) a.grad_init[(b * 2 + 1) * C + c] = 0.0f;
    if (a.direction == APX_SCAN_BACKWARD) a.grad_init[(b * 2 + 0) * C + c] = 0.0f;
    /* the token terms, in token order */
    for (int64_t k = 0; k < K; k++) {
      int64_t at = (b * K + k) * C + c;
      float tok = sanitised_token(cuda_load_any(a.tokens, a.dt, at), a.lim, &passes);
      float gdrv = a.gdrv[at];
      sums[P_INPUT_GAIN] += gdrv * tok;
      sums[P_STATE_BIAS] += gdrv;
      if (a.gate_rows) {
        float yf = cuda_round_any(og * a.states[at], a.dt);
        float yb = cuda_round_any(og * a.states[a.B * K * C + at], a.dt);
        sums[P_GATE] += cuda_load_any(a.grad_out, a.dt, at) * (yf - yb);
      }
      if (a.grad_tokens) cuda_store_any(a.grad_tokens, a.dt, at, ig * gdrv * passes);
    }
    for (int p = 0; p < P_COUNT; p++) a.partial[((int64_t)p * a.B + b) * C + c] = sums[p];
  }
}

struct scan_bwd_out {
  void *grad[4]; /* decay, input_gain, output_gain, state_bias */
  int grad_dt[4];
  void *grad_init;
  int grad_init_dt, grad_init_per_direction;
  void *grad_gate;
  int grad_gate_dt;
};

/* One thread per channel: the sums over b in order, then the stores. */
__global__ void tilessm_scan_backward_channels(scan_bwd_args a, scan_bwd_out o) {
  CUDA_FOR(c, a.C) {
    const int64_t B = a.B, C = a.C;
    float d = cuda_load_any(a.decay, a.decay_dt, c);
    const float decay_passes = d >= 1e-6f && d <= 1.0f - 1e-6f ? 1.0f : 0.0f;
    for (int p = 0; p < 4; p++) {
      if (!o.grad[p]) continue;
      float sum = 0.0f;
      for (int64_t b = 0; b < B; b++) sum += a.partial[((int64_t)p * B + b) * C + c];
      if (p == P_DECAY) sum *= decay_passes;
      cuda_store_any(o.grad[p], o.grad_dt[p], c, sum);
    }
    if (o.grad_init)
      for (int64_t b = 0; b < B; b++) {
        float gf = a.grad_init[(b * 2 + 0) * C + c], gb = a.grad_init[(b * 2 + 1) * C + c];
        if (o.grad_init_per_direction) {
          cuda_store_any(o.grad_init, o.grad_init_dt, (b * 2 + 0) * C + c, gf);
          cuda_store_any(o.grad_init, o.grad_init_dt, (b * 2 + 1) * C + c, gb);
        } else {
          cuda_store_any(o.grad_init, o.grad_init_dt, b * C + c, gf + gb);
        }
      }
    if (o.grad_gate) {
      /* [B,1,C]: per row; [C]: the sum over b; zeros when no gate is read */
      int per_row = a.gate_rows > 1;
      for (int64_t r = 0; r < (per_row ? B : 1); r++) {
        float sum = 0.0f, passes = 1.0f;
        if (a.gate_rows) {
          for (int64_t b = per_row ? r : 0; b < (per_row ? r + 1 : B); b++)
            sum += a.partial[((int64_t)P_GATE * B + b) * C + c];
          gate_at(a, r, c, &passes);
        }
        cuda_store_any(o.grad_gate, o.grad_gate_dt, r * C + c, sum * passes);
      }
    }
  }
}

apx_status cuda_tilessm_scan_backward(void *state, const apx_tilessm_scan_backward_args *args,
                                      const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, args->tokens->device_index);
  if (s != APX_OK) return s;
  const apx_tensor *tokens = args->tokens;
  const int64_t B = tokens->shape[0], K = tokens->shape[1], C = tokens->shape[2];
  if (C == 0) return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  const int gated = args->direction == APX_SCAN_BIDIRECTIONAL && args->merge == APX_MERGE_GATED;

  scan_bwd_args a;
  memset(&a, 0, sizeof a);
  a.tokens = tokens->data;
  a.grad_out = args->grad_out->data;
  a.decay = args->decay->data;
  a.input_gain = args->input_gain->data;
  a.output_gain = args->output_gain->data;
  a.state_bias = args->state_bias->data;
  a.dt = (int)tokens->dtype;
  a.decay_dt = (int)args->decay->dtype;
  a.ig_dt = (int)args->input_gain->dtype;
  a.og_dt = (int)args->output_gain->dtype;
  a.sb_dt = (int)args->state_bias->dtype;
  if (args->init_state) {
    a.init = args->init_state->data;
    a.init_dt = (int)args->init_state->dtype;
    a.init_ndim = args->init_state->ndim;
  }
  if (gated) {
    a.gate_rows = args->merge_gate && args->merge_gate->ndim == 3 ? (int)B : 1;
    if (args->merge_gate) {
      a.gate = args->merge_gate->data;
      a.gate_dt = (int)args->merge_gate->dtype;
    }
  }
  if (args->grad_final_state) {
    a.grad_final = args->grad_final_state->data;
    a.grad_final_dt = (int)args->grad_final_state->dtype;
  }
  a.B = B;
  a.K = K;
  a.C = C;
  /* docs/ops.md, tilessm_scan: |clamp_value| rounded to the tokens dtype */
  float lim = (float)fabs(args->clamp_value);
  a.lim = tokens->dtype == APX_DTYPE_F16   ? __half2float(__float2half_rn(lim))
          : tokens->dtype == APX_DTYPE_BF16 ? __bfloat162float(__float2bfloat16_rn(lim))
                                           : lim;
  a.direction = (int)args->direction;
  a.merge = (int)args->merge;
  a.grad_tokens = args->grad_tokens ? args->grad_tokens->data : nullptr;

  const size_t bkc = (size_t)(B * K * C), bc = (size_t)(B * C);
  const size_t bytes = 256 + cuda_align_up(2 * bkc * sizeof(float)) + cuda_align_up(bkc * sizeof(float)) +
                       cuda_align_up(P_COUNT * bc * sizeof(float)) +
                       cuda_align_up(2 * bc * sizeof(float));
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream, bytes, &ws, "tilessm_scan_backward: workspace");
  if (s != APX_OK) return s;
  char *p = (char *)ws.ptr;
  a.states = (float *)p;
  p += cuda_align_up(2 * bkc * sizeof(float));
  a.gdrv = (float *)p;
  p += cuda_align_up(bkc * sizeof(float));
  a.partial = (float *)p;
  p += cuda_align_up(P_COUNT * bc * sizeof(float));
  a.grad_init = (float *)p;

  scan_bwd_out o;
  memset(&o, 0, sizeof o);
  const apx_tensor *vector_grads[4] = {args->grad_decay, args->grad_input_gain,
                                       args->grad_output_gain, args->grad_state_bias};
  for (int i = 0; i < 4; i++) {
    o.grad[i] = vector_grads[i] ? vector_grads[i]->data : nullptr;
    o.grad_dt[i] = vector_grads[i] ? (int)vector_grads[i]->dtype : 0;
  }
  if (args->grad_init_state) {
    o.grad_init = args->grad_init_state->data;
    o.grad_init_dt = (int)args->grad_init_state->dtype;
    o.grad_init_per_direction = args->grad_init_state->ndim == 3;
  }
  if (args->grad_merge_gate) {
    o.grad_gate = args->grad_merge_gate->data;
    o.grad_gate_dt = (int)args->grad_merge_gate->dtype;
  }
  if (B > 0) {
    cuda_geom g = cuda_geom_1d(B * C, 128);
    tilessm_scan_backward_streams<<<g.blocks, g.threads, 0, stream>>>(a);
  }
  cuda_geom gc = cuda_geom_1d(C, 128);
  tilessm_scan_backward_channels<<<gc.blocks, gc.threads, 0, stream>>>(a, o);
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tilessm_scan_backward: launch");
  return APX_OK;
}
