/* tilessm_scan on CUDA (spec/ops.md 6.A): per stream (b,c), with fp32 state
 *   x = sanitize(tokens[b,k,c]); s = d*s + (1-d)*(ig*x + sb); y = og*s
 * forward, backward (k descending) or both, merged (sum, avg, gated); only
 * outputs are rounded, once, to the tokens dtype (decision 3).
 *
 * Parallel over K as well as (B,C): a chunked scan. K is cut into chunks
 * of L steps; (1) each chunk is scanned from a zero state, giving its
 * local final state h_j; (2) one thread per stream combines the chunks:
 * S_{j+1} = d^L * S_j + h_j (the recurrence is linear), which gives every
 * chunk's true initial state and the final state; (3) each chunk is scanned
 * again from its true initial state, writing y. Within a chunk (3) repeats
 * the sequential recurrence exactly; only the chunk boundary states carry
 * the extra rounding of d^L*S + h, a few fp32 ulps. When K fits one chunk,
 * step (3) alone runs. */
#include "cuda_backend.h"

struct ssm_params {
  const void *decay, *input_gain, *output_gain, *state_bias;
  int dt_decay, dt_input_gain, dt_output_gain, dt_state_bias;
  const void *init;  /* NULL, [B,C] (init_dirs 1) or [B,2,C] (init_dirs 2) */
  int dt_init, init_dirs;
  const void *gate;  /* NULL, [C] or [B,1,C] (gate_batched) */
  int dt_gate, gate_batched;
  int dt_tokens;     /* the dtype init state and gate are cast to first */
  float lim;         /* |clamp_value| rounded to the tokens dtype */
};

struct ssm_geometry {
  int64_t B, K, C;
  int64_t L, chunks; /* chunk length and count (chunks = ceil(K/L)) */
  int direction, merge;
  cuda_geom per_chunk;  /* B*chunks*C threads */
  cuda_geom per_stream; /* B*C threads */
};

struct ssm_chan {
  float d, om, ig, og, sb;
};

static __device__ __forceinline__ ssm_chan load_chan(const ssm_params &p, int64_t c) {
  ssm_chan ch;
  const float lo = 1e-6f, hi = (float)(1.0 - 1e-6); /* fp32 constants, spec 6.A */
  float d = cuda_load_any(p.decay, p.dt_decay, c);
  ch.d = d < lo ? lo : (d > hi ? hi : d);
  ch.om = 1.0f - ch.d;
  ch.ig = cuda_load_any(p.input_gain, p.dt_input_gain, c);
  ch.og = cuda_load_any(p.output_gain, p.dt_output_gain, c);
  ch.sb = cuda_load_any(p.state_bias, p.dt_state_bias, c);
  return ch;
}

/* Initial state of direction dir (0 forward, 1 backward), cast to the
 * tokens dtype first (spec/ops.md 6.A "Init state split"). */
static __device__ __forceinline__ float init_state(const ssm_params &p, int64_t b, int dir,
                                                   int64_t c, int64_t C) {
  if (!p.init) return 0.0f;
  int64_t i = p.init_dirs == 2 ? (b * 2 + dir) * C + c : b * C + c;
  return cuda_round_any(cuda_load_any(p.init, p.dt_init, i), p.dt_tokens);
}

/* NaN -> 0, +-inf -> +-lim, clamp to [-lim, lim]: exact in the tokens
 * dtype because lim is representable there. */
static __device__ __forceinline__ float sanitize(float x, float lim) {
  if (x != x) return 0.0f;
  return x > lim ? lim : (x < -lim ? -lim : x);
}

template <typename T>
static __device__ __forceinline__ float step(const T *tokens, int64_t i, const ssm_chan &ch,
                                             float lim, float s) {
  float x = sanitize(cuda_dt<T>::load(tokens + i), lim);
  float drive = ch.ig * x + ch.sb;
  return ch.d * s + ch.om * drive;
}

/* (1) local scans from a zero state. */
template <typename T>
__global__ void ssm_local_kernel(const T *__restrict__ tokens, ssm_params p, ssm_geometry g,
                                 float *__restrict__ carry_f, float *__restrict__ carry_b) {
  CUDA_FOR(w, g.B * g.chunks * g.C) {
    int64_t c = w % g.C, j = (w / g.C) % g.chunks, b = w / (g.C * g.chunks);
    int64_t k0 = j * g.L, k1 = k0 + g.L < g.K ? k0 + g.L : g.K;
    ssm_chan ch = load_chan(p, c);
    if (g.direction != APX_SCAN_BACKWARD) {
      float s = 0.0f;
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) s = step(tokens, (b * g.K + k) * g.C + c, ch, p.lim, s);
      carry_f[w] = s;
    }
    if (g.direction != APX_SCAN_FORWARD) {
      float s = 0.0f;
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--)
        s = step(tokens, (b * g.K + k) * g.C + c, ch, p.lim, s);
      carry_b[w] = s;
    }
  }
}

/* (2) combine chunks per stream: the carries become the chunks' initial
 * states; writes final_state. Also used alone when K = 0. */
template <typename T>
__global__ void ssm_carry_kernel(ssm_params p, ssm_geometry g, float *carry_f, float *carry_b,
                                 T *__restrict__ final_state) {
  CUDA_FOR(w, g.B * g.C) {
    int64_t c = w % g.C, b = w / g.C;
    ssm_chan ch = load_chan(p, c);
    float a_full = 1.0f, a_last = 1.0f;
    int64_t last_len = g.K - (g.chunks - 1) * g.L;
    for (int64_t i = 0; i < g.L; i++) a_full *= ch.d;
    for (int64_t i = 0; i < last_len && g.chunks > 0; i++) a_last *= ch.d;
    float final_f = 0.0f, final_b = 0.0f;
    if (g.direction != APX_SCAN_BACKWARD) {
      float s = init_state(p, b, 0, c, g.C);
#pragma unroll 8
      for (int64_t j = 0; j < g.chunks; j++) {
        int64_t at = (b * g.chunks + j) * g.C + c;
        float h = carry_f[at];
        carry_f[at] = s;
        s = (j == g.chunks - 1 ? a_last : a_full) * s + h;
      }
      final_f = s;
    }
    if (g.direction != APX_SCAN_FORWARD) {
      float s = init_state(p, b, 1, c, g.C);
#pragma unroll 8
      for (int64_t j = g.chunks - 1; j >= 0; j--) {
        int64_t at = (b * g.chunks + j) * g.C + c;
        float h = carry_b[at];
        carry_b[at] = s;
        s = (j == g.chunks - 1 ? a_last : a_full) * s + h;
      }
      final_b = s;
    }
    if (!final_state) continue;
    if (g.direction == APX_SCAN_BIDIRECTIONAL) {
      final_state[(b * 2 + 0) * g.C + c] = cuda_dt<T>::from_f(final_f);
      final_state[(b * 2 + 1) * g.C + c] = cuda_dt<T>::from_f(final_b);
    } else {
      final_state[b * g.C + c] =
          cuda_dt<T>::from_f(g.direction == APX_SCAN_FORWARD ? final_f : final_b);
    }
  }
}

static __device__ __forceinline__ float merge_gate(const ssm_params &p, int64_t b, int64_t c,
                                                   int64_t C) {
  if (!p.gate) return 0.5f;
  float v = cuda_round_any(cuda_load_any(p.gate, p.dt_gate, p.gate_batched ? b * C + c : c),
                           p.dt_tokens);
  return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}

/* (3) scan each chunk from its true initial state and write y; with one
 * chunk the initial states are the init state and this kernel also writes
 * final_state. Bidirectional: the backward outputs of the chunk go to an
 * fp32 scratch first, then the forward pass merges them. */
template <typename T>
__global__ void ssm_out_kernel(const T *__restrict__ tokens, T *__restrict__ out, ssm_params p,
                               ssm_geometry g, const float *__restrict__ start_f,
                               const float *__restrict__ start_b, float *__restrict__ y_back,
                               T *__restrict__ final_state) {
  CUDA_FOR(w, g.B * g.chunks * g.C) {
    int64_t c = w % g.C, j = (w / g.C) % g.chunks, b = w / (g.C * g.chunks);
    int64_t k0 = j * g.L, k1 = k0 + g.L < g.K ? k0 + g.L : g.K;
    int single = g.chunks == 1;
    ssm_chan ch = load_chan(p, c);
    float sf = 0.0f, sb = 0.0f;
    if (g.direction != APX_SCAN_BACKWARD) sf = single ? init_state(p, b, 0, c, g.C) : start_f[w];
    if (g.direction != APX_SCAN_FORWARD) sb = single ? init_state(p, b, 1, c, g.C) : start_b[w];
    if (g.direction == APX_SCAN_FORWARD) {
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        int64_t i = (b * g.K + k) * g.C + c;
        sf = step(tokens, i, ch, p.lim, sf);
        out[i] = cuda_dt<T>::from_f(ch.og * sf);
      }
      if (single && final_state) final_state[b * g.C + c] = cuda_dt<T>::from_f(sf);
    } else if (g.direction == APX_SCAN_BACKWARD) {
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        int64_t i = (b * g.K + k) * g.C + c;
        sb = step(tokens, i, ch, p.lim, sb);
        out[i] = cuda_dt<T>::from_f(ch.og * sb);
      }
      if (single && final_state) final_state[b * g.C + c] = cuda_dt<T>::from_f(sb);
    } else {
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        int64_t i = (b * g.K + k) * g.C + c;
        sb = step(tokens, i, ch, p.lim, sb);
        y_back[i] = ch.og * sb;
      }
      float gate = merge_gate(p, b, c, g.C);
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        int64_t i = (b * g.K + k) * g.C + c;
        sf = step(tokens, i, ch, p.lim, sf);
        float yf = ch.og * sf, yb = y_back[i], y;
        if (g.merge == APX_MERGE_SUM) y = yf + yb;
        else if (g.merge == APX_MERGE_AVG) y = 0.5f * (yf + yb);
        else y = gate * yf + (1.0f - gate) * yb;
        out[i] = cuda_dt<T>::from_f(y);
      }
      if (single && final_state) {
        final_state[(b * 2 + 0) * g.C + c] = cuda_dt<T>::from_f(sf);
        final_state[(b * 2 + 1) * g.C + c] = cuda_dt<T>::from_f(sb);
      }
    }
  }
}

/* Chunk length: as long as possible (fewer boundary roundings, less
 * re-reading) while B*chunks*C threads still fill the device. */
static ssm_geometry geometry(const apx_tilessm_scan_args *a, int sm_count) {
  ssm_geometry g;
  g.B = a->tokens->shape[0];
  g.K = a->tokens->shape[1];
  g.C = a->tokens->shape[2];
  g.direction = (int)a->direction;
  g.merge = (int)a->merge;
  int64_t streams = g.B * g.C;
  int64_t want_threads = (int64_t)(sm_count > 0 ? sm_count : 132) * 1024;
  int64_t L = 256;
  while (L > 8 && streams * ((g.K + L - 1) / L) < want_threads) L /= 2;
  if (g.K <= L) L = g.K > 0 ? g.K : 1;
  g.L = L;
  g.chunks = g.K > 0 ? (g.K + L - 1) / L : 0;
  g.per_chunk = cuda_geom_1d(g.B * g.chunks * g.C, 128);
  g.per_stream = cuda_geom_1d(streams, 128);
  return g;
}

template <typename T>
static apx_status run(cuda_state *st, const apx_tilessm_scan_args *a, const ssm_geometry &g,
                      const ssm_params &p, cudaStream_t s) {
  T *final_state = a->final_state ? (T *)a->final_state->data : nullptr;
  const T *tokens = (const T *)a->tokens->data;
  T *out = (T *)a->out->data;
  int dirs = g.direction == APX_SCAN_BIDIRECTIONAL ? 2 : 1;
  size_t carry_bytes = cuda_align_up((size_t)(g.B * g.chunks * g.C) * sizeof(float));
  size_t yb_bytes = g.direction == APX_SCAN_BIDIRECTIONAL
                        ? cuda_align_up((size_t)(g.B * g.K * g.C) * sizeof(float))
                        : 0;
  int multi = g.chunks > 1;
  cuda_workspace ws;
  apx_status status = cuda_ws_alloc(st, s, (multi ? carry_bytes * dirs : 0) + yb_bytes, &ws,
                                    "tilessm_scan: workspace");
  if (status != APX_OK) return status;
  char *base = (char *)ws.ptr;
  float *carry_f = nullptr, *carry_b = nullptr, *y_back = nullptr;
  if (multi) {
    if (g.direction != APX_SCAN_BACKWARD) {
      carry_f = (float *)base;
      base += carry_bytes;
    }
    if (g.direction != APX_SCAN_FORWARD) {
      carry_b = (float *)base;
      base += carry_bytes;
    }
  }
  if (yb_bytes) y_back = (float *)base;
  if (g.chunks == 0) {
    if (final_state)
      ssm_carry_kernel<T><<<g.per_stream.blocks, g.per_stream.threads, 0, s>>>(
          p, g, carry_f, carry_b, final_state);
  } else {
    if (multi) {
      ssm_local_kernel<T><<<g.per_chunk.blocks, g.per_chunk.threads, 0, s>>>(tokens, p, g,
                                                                             carry_f, carry_b);
      ssm_carry_kernel<T><<<g.per_stream.blocks, g.per_stream.threads, 0, s>>>(
          p, g, carry_f, carry_b, final_state);
    }
    ssm_out_kernel<T><<<g.per_chunk.blocks, g.per_chunk.threads, 0, s>>>(
        tokens, out, p, g, carry_f, carry_b, y_back, final_state);
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tilessm_scan: launch");
  return APX_OK;
}

apx_status cuda_tilessm_scan(void *state, const apx_tilessm_scan_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->tokens->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  ssm_geometry g = geometry(a, st->dev[dev].sm_count);
  if (g.B * g.C == 0) return APX_OK;
  ssm_params p;
  memset(&p, 0, sizeof p);
  p.decay = a->decay->data;
  p.dt_decay = a->decay->dtype;
  p.input_gain = a->input_gain->data;
  p.dt_input_gain = a->input_gain->dtype;
  p.output_gain = a->output_gain->data;
  p.dt_output_gain = a->output_gain->dtype;
  p.state_bias = a->state_bias->data;
  p.dt_state_bias = a->state_bias->dtype;
  if (a->init_state) {
    p.init = a->init_state->data;
    p.dt_init = a->init_state->dtype;
    p.init_dirs = a->init_state->ndim == 3 ? 2 : 1;
  }
  if (a->merge_gate && a->direction == APX_SCAN_BIDIRECTIONAL && a->merge == APX_MERGE_GATED) {
    p.gate = a->merge_gate->data;
    p.dt_gate = a->merge_gate->dtype;
    p.gate_batched = a->merge_gate->ndim == 3;
  }
  p.dt_tokens = a->tokens->dtype;
  /* lim = |clamp_value| as fp32, then rounded to the tokens dtype: bf16
   * gives 9984 for 1e4 (spec/ops.md 6.A). */
  float lim = (float)fabs(a->clamp_value);
  if (p.dt_tokens == APX_DTYPE_F16) lim = __half2float(__float2half_rn(lim));
  else if (p.dt_tokens == APX_DTYPE_BF16) lim = __bfloat162float(__float2bfloat16_rn(lim));
  p.lim = lim;
  switch (a->tokens->dtype) {
  case APX_DTYPE_F16: return run<__half>(st, a, g, p, stream);
  case APX_DTYPE_BF16: return run<__nv_bfloat16>(st, a, g, p, stream);
  default: return run<float>(st, a, g, p, stream);
  }
}
