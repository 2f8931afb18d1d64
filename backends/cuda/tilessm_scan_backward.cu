/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan_backward on CUDA (docs/ops.md, tilessm_scan_backward).
 * Both recurrences are affine with per-channel constants (the state
 * s = d*s + om*drv forward, the adjoint a = d*(a + og*gy) from the last
 * step back), so K is cut into chunks of SCAN_BWD_L tokens. A block owns
 * one batch row's 32 channels (one lane each, neighbours in c side by side
 * so that every access is coalesced) and all its chunks, a warp a run of
 * consecutive chunks: (1) each chunk's local forward end state and local
 * adjoint from zero, composed per warp into its run's affine maps (in
 * shared memory); (2) each warp folds the other runs' maps into its run's
 * true start state and entering adjoint, and walks its chunks back to give
 * each one its own (kept in a small [2][B][NC][C] workspace); (3) each
 * chunk again from its true values, the states in registers: grad_tokens,
 * and the sums of the [C] gradients per thread, then over the block's
 * warps in order. A second kernel, one thread per channel, adds the sums
 * over b in order and writes the [C] gradients, the initial state's and
 * the gate's (with B = 1 the block writes them itself: one launch). No
 * atomics: the same bits run to run. fp32 math, one rounding per stored
 * value. */
#include "cuda_backend.h"

#include <math.h>

enum { P_DECAY, P_INPUT_GAIN, P_OUTPUT_GAIN, P_STATE_BIAS, P_GATE, P_COUNT };

/* Tokens a chunk (its states live in registers), and the most warps a
 * block: 16 warps of 32 channels. */
enum { SCAN_BWD_L = 16, SCAN_BWD_MAX_WARPS = 16 };

struct scan_bwd_args {
  const void *tokens, *grad_out, *decay, *input_gain, *output_gain, *state_bias;
  const void *init, *gate, *grad_final;
  int dt, decay_dt, ig_dt, og_dt, sb_dt, init_dt, gate_dt, grad_final_dt;
  int init_ndim, gate_rows; /* gate_rows: 0 (not gated), 1 ([C] or absent), B ([B,1,C]) */
  int64_t B, K, C;
  int64_t NC;  /* chunks: ceil(K / SCAN_BWD_L) */
  int64_t cpw; /* chunks a warp */
  float lim;
  int direction, merge;
  void *grad_tokens;
  /* workspace: chunk [2][B][NC][C] (per chunk: the forward direction's
   * local adjoint, then its entering adjoint; the backward direction's
   * local end state, then its start state), partial [P_COUNT][B][C],
   * grad_init [B][2][C] */
  float *chunk, *partial, *grad_init;
};

struct scan_bwd_out {
  void *grad[4]; /* decay, input_gain, output_gain, state_bias */
  int grad_dt[4];
  void *grad_init;
  int grad_init_dt, grad_init_per_direction;
  void *grad_gate;
  int grad_gate_dt;
};

/* docs/ops.md, tilessm_scan: the sanitised token and whether it passed
 * unchanged (finite and within [-lim, lim]: derivative 1). */
static __device__ __forceinline__ float sanitised_token(float x, float lim, float *passes) {
  *passes = isfinite(x) && x >= -lim && x <= lim ? 1.0f : 0.0f;
  if (x != x)
    return 0.0f;
  if (lim < x)
    return lim;
  if (-lim > x)
    return -lim;
  return x;
}

/* The gate as the merge uses it (cast, clamped; absent 0.5) and its
 * derivative's mask. */
static __device__ __forceinline__ float gate_at(const scan_bwd_args &a, int64_t b, int64_t c,
                                                float *passes) {
  *passes = 1.0f;
  if (!a.gate)
    return 0.5f;
  float g =
      cuda_round_any(cuda_load_any(a.gate, a.gate_dt, (a.gate_rows > 1 ? b : 0) * a.C + c), a.dt);
  *passes = g >= 0.0f && g <= 1.0f ? 1.0f : 0.0f;
  return g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g;
}

/* One chunk's tokens (sanitised; bit i of pass: token i's mask) and
 * grad_out, n <= L valid. */
struct scan_bwd_chunk {
  float x[SCAN_BWD_L], g[SCAN_BWD_L];
  unsigned pass;
};

static __device__ __forceinline__ void load_chunk(const scan_bwd_args &a, int64_t at, int n,
                                                  scan_bwd_chunk *ch) {
  ch->pass = 0;
#pragma unroll
  for (int i = 0; i < SCAN_BWD_L; i++) {
    ch->x[i] = ch->g[i] = 0.0f;
    if (i < n) {
      float passes;
      ch->x[i] = sanitised_token(cuda_load_any(a.tokens, a.dt, at + i * a.C), a.lim, &passes);
      ch->pass |= passes != 0.0f ? 1u << i : 0u;
      ch->g[i] = cuda_load_any(a.grad_out, a.dt, at + i * a.C);
    }
  }
}

/* d^n, as the steps multiply it */
static __device__ __forceinline__ float chunk_power(float d, int n) {
  float pw = 1.0f;
#pragma unroll
  for (int i = 0; i < SCAN_BWD_L; i++)
    if (i < n)
      pw *= d;
  return pw;
}

/* The [C] gradients, the initial state's and the gate's of channel c from
 * the sums per (b, c): the sums over b in order, then the stores (the
 * loads of a row first, so that they wait once, not once a store). */
static __device__ void channel_outputs(const scan_bwd_args &a, const scan_bwd_out &o, int64_t c) {
  const int64_t B = a.B, C = a.C;
  float d = cuda_load_any(a.decay, a.decay_dt, c);
  const float decay_passes = d >= 1e-6f && d <= 1.0f - 1e-6f ? 1.0f : 0.0f;
  const int per_row = a.gate_rows > 1;
  float sum[P_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, passes = 1.0f;
  for (int64_t b = 0; b < B; b++)
    for (int p = 0; p < P_COUNT; p++)
      sum[p] += a.partial[((int64_t)p * B + b) * C + c];
  if (a.gate_rows && !per_row)
    gate_at(a, 0, c, &passes);
  for (int p = 0; p < 4; p++)
    if (o.grad[p])
      cuda_store_any(o.grad[p], o.grad_dt[p], c, p == P_DECAY ? sum[p] * decay_passes : sum[p]);
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
    if (!per_row) {
      cuda_store_any(o.grad_gate, o.grad_gate_dt, c, a.gate_rows ? sum[P_GATE] * passes : 0.0f);
    } else {
      for (int64_t r = 0; r < B; r++) {
        float row_passes;
        gate_at(a, r, c, &row_passes);
        cuda_store_any(o.grad_gate, o.grad_gate_dt, r * C + c,
                       a.partial[((int64_t)P_GATE * B + r) * C + c] * row_passes);
      }
    }
  }
}

/* Block: one batch row's 32 channels (lane = channel) and all its chunks,
 * warp w the chunks [w*cpw, (w+1)*cpw). fused: B = 1, the block writes the
 * outputs of channel_outputs itself. */
__global__ void __launch_bounds__(32 * SCAN_BWD_MAX_WARPS)
    tilessm_scan_backward_chunks(scan_bwd_args a, scan_bwd_out o, int fused) {
  /* per warp: its run's map (P, forward state, forward adjoint, backward
   * state, backward adjoint), later its sums */
  __shared__ float run[P_COUNT][SCAN_BWD_MAX_WARPS][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, NW = blockDim.x >> 5;
  const int64_t K = a.K, C = a.C, NC = a.NC, groups = (C + 31) / 32;
  const int runs0 = a.direction != APX_SCAN_BACKWARD, runs1 = a.direction != APX_SCAN_FORWARD;
  const int bidir = a.direction == APX_SCAN_BIDIRECTIONAL;
  for (int64_t blk = blockIdx.x; blk < a.B * groups; blk += gridDim.x) {
    const int64_t b = blk / groups, c = (blk % groups) * 32 + lane;
    const int live = c < C;
    const int64_t cl = live ? c : C - 1; /* the channel a lane past C reads */
    float d = cuda_load_any(a.decay, a.decay_dt, cl);
    d = d < 1e-6f ? 1e-6f : d;
    d = d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
    const float om = 1.0f - d;
    const float ig = cuda_load_any(a.input_gain, a.ig_dt, cl);
    const float og = cuda_load_any(a.output_gain, a.og_dt, cl);
    const float sb = cuda_load_any(a.state_bias, a.sb_dt, cl);
    float gate_passes, gate = a.gate_rows ? gate_at(a, b, cl, &gate_passes) : 0.5f;
    /* this direction's share of grad_out through the merge */
    float share0 = 1.0f, share1 = 1.0f;
    if (bidir && a.merge == APX_MERGE_AVG)
      share0 = share1 = 0.5f;
    if (bidir && a.merge == APX_MERGE_GATED) {
      share0 = gate;
      share1 = 1.0f - gate;
    }
    int64_t lo = (int64_t)w * a.cpw, hi = lo + a.cpw;
    if (lo > NC)
      lo = NC;
    if (hi > NC)
      hi = NC;
    /* a lane past C walks nothing and stores nothing */
    if (!live)
      hi = lo;
    /* [0][b][.][c] and [1][b][.][c] of the chunk workspace */
    float *adj0 = a.chunk + b * NC * C + c;
    float *st1 = a.chunk + (a.B + b) * NC * C + c;
    const int64_t row = b * K * C + c;
    /* the initial states and grad_final_state (read before (1): their
     * loads wait with the chunks') */
    float init0 = 0.0f, init1 = 0.0f, gf0 = 0.0f, gf1 = 0.0f;
    if (a.init) {
      init0 = cuda_round_any(
          cuda_load_any(a.init, a.init_dt, a.init_ndim == 3 ? (b * 2 + 0) * C + cl : b * C + cl),
          a.dt);
      init1 = cuda_round_any(
          cuda_load_any(a.init, a.init_dt, a.init_ndim == 3 ? (b * 2 + 1) * C + cl : b * C + cl),
          a.dt);
    }
    if (a.grad_final) {
      gf0 = cuda_load_any(a.grad_final, a.grad_final_dt, bidir ? (b * 2 + 0) * C + cl : b * C + cl);
      gf1 = cuda_load_any(a.grad_final, a.grad_final_dt, bidir ? (b * 2 + 1) * C + cl : b * C + cl);
    }

    /* (1) each chunk from zero; the warp's run composed in step order */
    float P = 1.0f, Rf0 = 0.0f, Ra0 = 0.0f, Rf1 = 0.0f, Ra1 = 0.0f;
    for (int64_t ch = lo; ch < hi; ch++) {
      const int64_t k0 = ch * SCAN_BWD_L;
      const int n = (int)(K - k0 < SCAN_BWD_L ? K - k0 : SCAN_BWD_L);
      scan_bwd_chunk t;
      load_chunk(a, row + k0 * C, n, &t);
      float lf0 = 0.0f, la0 = 0.0f, lf1 = 0.0f, la1 = 0.0f;
      if (runs0) {
#pragma unroll
        for (int i = 0; i < SCAN_BWD_L; i++)
          if (i < n)
            lf0 = d * lf0 + om * (ig * t.x[i] + sb);
#pragma unroll
        for (int i = SCAN_BWD_L - 1; i >= 0; i--)
          if (i < n)
            la0 = d * (la0 + og * (share0 * t.g[i]));
      }
      if (runs1) {
#pragma unroll
        for (int i = SCAN_BWD_L - 1; i >= 0; i--)
          if (i < n)
            lf1 = d * lf1 + om * (ig * t.x[i] + sb);
#pragma unroll
        for (int i = 0; i < SCAN_BWD_L; i++)
          if (i < n)
            la1 = d * (la1 + og * (share1 * t.g[i]));
      }
      const float pw = chunk_power(d, n);
      adj0[ch * C] = la0;
      st1[ch * C] = lf1;
      /* forward state and backward adjoint travel up the chunks, the
       * forward adjoint and backward state down */
      Rf0 = pw * Rf0 + lf0;
      Ra1 = pw * Ra1 + la1;
      Ra0 = Ra0 + P * la0;
      Rf1 = Rf1 + P * lf1;
      P *= pw;
    }
    run[0][w][lane] = P;
    run[1][w][lane] = Rf0;
    run[2][w][lane] = Ra0;
    run[3][w][lane] = Rf1;
    run[4][w][lane] = Ra1;
    __syncthreads();

    /* (2) the other runs folded in: this run's true start states and
     * entering adjoints */
    float s0 = init0, a1 = gf1, a0 = gf0, s1 = init1;
    for (int v = 0; v < w; v++) {
      s0 = run[0][v][lane] * s0 + run[1][v][lane];
      a1 = run[0][v][lane] * a1 + run[4][v][lane];
    }
    for (int v = NW - 1; v > w; v--) {
      a0 = run[0][v][lane] * a0 + run[2][v][lane];
      s1 = run[0][v][lane] * s1 + run[3][v][lane];
    }
    if (w == 0) {
      /* the gradients of the initial states: each adjoint through every run */
      float gi0 = run[0][0][lane] * a0 + run[2][0][lane], gi1 = gf1;
      for (int v = 0; v < NW; v++)
        gi1 = run[0][v][lane] * gi1 + run[4][v][lane];
      if (live) {
        a.grad_init[(b * 2 + 0) * C + c] = runs0 ? gi0 : 0.0f;
        a.grad_init[(b * 2 + 1) * C + c] = runs1 ? gi1 : 0.0f;
      }
    }
    __syncthreads(); /* run[] is read; (3) reuses it for the sums */

    /* (2b) each chunk's entering forward adjoint and backward start state,
     * this run's chunks from the last down */
    {
      float t0 = a0, t1 = s1;
      for (int64_t ch = hi - 1; ch >= lo; ch--) {
        const int64_t k0 = ch * SCAN_BWD_L;
        const int n = (int)(K - k0 < SCAN_BWD_L ? K - k0 : SCAN_BWD_L);
        const float pw = chunk_power(d, n);
        const float la0 = adj0[ch * C], lf1 = st1[ch * C];
        adj0[ch * C] = t0;
        st1[ch * C] = t1;
        t0 = pw * t0 + la0;
        t1 = pw * t1 + lf1;
      }
    }

    /* (3) each chunk from its true values, in token order */
    float sums[P_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t ch = lo; ch < hi; ch++) {
      const int64_t k0 = ch * SCAN_BWD_L;
      const int n = (int)(K - k0 < SCAN_BWD_L ? K - k0 : SCAN_BWD_L);
      scan_bwd_chunk t;
      load_chunk(a, row + k0 * C, n, &t);
      float sf[SCAN_BWD_L], sbk[SCAN_BWD_L], gdrv[SCAN_BWD_L];
#pragma unroll
      for (int i = 0; i < SCAN_BWD_L; i++)
        sf[i] = sbk[i] = gdrv[i] = 0.0f;
      if (runs0) {
        const float start = s0;
        float s = start;
#pragma unroll
        for (int i = 0; i < SCAN_BWD_L; i++)
          if (i < n) {
            s = d * s + om * (ig * t.x[i] + sb);
            sf[i] = s;
          }
        float adj = adj0[ch * C];
#pragma unroll
        for (int i = SCAN_BWD_L - 1; i >= 0; i--)
          if (i < n) {
            const float gy = share0 * t.g[i];
            adj += og * gy;
            sums[P_OUTPUT_GAIN] += gy * sf[i];
            gdrv[i] = om * adj;
            const float prev = i > 0 ? sf[i > 0 ? i - 1 : 0] : start;
            sums[P_DECAY] += adj * (prev - (ig * t.x[i] + sb));
            adj = d * adj;
          }
        s0 = s; /* the next chunk's start */
      }
      if (runs1) {
        const float start = st1[ch * C];
        float s = start;
#pragma unroll
        for (int i = SCAN_BWD_L - 1; i >= 0; i--)
          if (i < n) {
            s = d * s + om * (ig * t.x[i] + sb);
            sbk[i] = s;
          }
        float adj = a1;
#pragma unroll
        for (int i = 0; i < SCAN_BWD_L; i++)
          if (i < n) {
            const float gy = share1 * t.g[i];
            adj += og * gy;
            sums[P_OUTPUT_GAIN] += gy * sbk[i];
            gdrv[i] += om * adj;
            const float prev = i < n - 1 ? sbk[i < SCAN_BWD_L - 1 ? i + 1 : i] : start;
            sums[P_DECAY] += adj * (prev - (ig * t.x[i] + sb));
            adj = d * adj;
          }
        a1 = adj; /* the next chunk's entering adjoint */
      }
      /* the token terms, in token order */
#pragma unroll
      for (int i = 0; i < SCAN_BWD_L; i++)
        if (i < n) {
          sums[P_INPUT_GAIN] += gdrv[i] * t.x[i];
          sums[P_STATE_BIAS] += gdrv[i];
          if (a.gate_rows) {
            const float yf = cuda_round_any(og * sf[i], a.dt),
                        yb = cuda_round_any(og * sbk[i], a.dt);
            sums[P_GATE] += t.g[i] * (yf - yb);
          }
          if (a.grad_tokens)
            cuda_store_any(a.grad_tokens, a.dt, row + (k0 + i) * C,
                           ig * gdrv[i] * (t.pass >> i & 1u ? 1.0f : 0.0f));
        }
    }
    (void)gate_passes; /* channel_outputs applies it */

    /* the block's sums over its warps in order */
    for (int p = 0; p < P_COUNT; p++)
      run[p][w][lane] = sums[p];
    __syncthreads();
    if (w == 0 && live) {
      for (int p = 0; p < P_COUNT; p++) {
        float sum = 0.0f;
        for (int v = 0; v < NW; v++)
          sum += run[p][v][lane];
        a.partial[((int64_t)p * a.B + b) * C + c] = sum;
      }
      if (fused)
        channel_outputs(a, o, c);
    }
    __syncthreads(); /* run[] is read before the next block's (1) */
  }
}

/* One thread per channel: channel_outputs. */
__global__ void tilessm_scan_backward_channels(scan_bwd_args a, scan_bwd_out o) {
  CUDA_FOR(c, a.C) channel_outputs(a, o, c);
}

apx_status cuda_tilessm_scan_backward(void *state, const apx_tilessm_scan_backward_args *args,
                                      const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, args->tokens->device_index);
  if (s != APX_OK)
    return s;
  const apx_tensor *tokens = args->tokens;
  const int64_t B = tokens->shape[0], K = tokens->shape[1], C = tokens->shape[2];
  if (C == 0)
    return APX_OK;
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
  a.lim = tokens->dtype == APX_DTYPE_F16    ? __half2float(__float2half_rn(lim))
          : tokens->dtype == APX_DTYPE_BF16 ? __bfloat162float(__float2bfloat16_rn(lim))
                                            : lim;
  a.direction = (int)args->direction;
  a.merge = (int)args->merge;
  a.grad_tokens = args->grad_tokens ? args->grad_tokens->data : nullptr;

  /* the chunks, and warps enough that each walks at most a few */
  const int64_t NC = (K + SCAN_BWD_L - 1) / SCAN_BWD_L;
  const int64_t max_warps = SCAN_BWD_MAX_WARPS;
  const int64_t warps = NC < 1 ? 1 : NC < max_warps ? NC : max_warps;
  a.NC = NC;
  a.cpw = (NC + warps - 1) / warps;

  const size_t bc = (size_t)(B * C);
  const size_t bytes = 256 + cuda_align_up(2 * (size_t)NC * bc * sizeof(float)) +
                       cuda_align_up(P_COUNT * bc * sizeof(float)) +
                       cuda_align_up(2 * bc * sizeof(float));
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream, bytes, &ws, "tilessm_scan_backward: workspace");
  if (s != APX_OK)
    return s;
  char *p = (char *)ws.ptr;
  a.chunk = (float *)p;
  p += cuda_align_up(2 * (size_t)NC * bc * sizeof(float));
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
  const int fused = B == 1;
  if (B > 0) {
    int64_t blocks = B * ((C + 31) / 32);
    if (blocks > 0x7fffffffLL)
      blocks = 0x7fffffffLL;
    tilessm_scan_backward_chunks<<<(unsigned)blocks, (unsigned)(32 * warps), 0, stream>>>(a, o,
                                                                                          fused);
  }
  if (!fused) {
    cuda_geom gc = cuda_geom_1d(C, 128);
    tilessm_scan_backward_channels<<<gc.blocks, gc.threads, 0, stream>>>(a, o);
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess)
    return cuda_fail(st, err, "tilessm_scan_backward: launch");
  return APX_OK;
}
