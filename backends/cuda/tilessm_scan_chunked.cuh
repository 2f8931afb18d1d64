/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan's chunked scan over the whole device, for few long
 * streams (tilessm_scan.cu): local scans of the chunks, their combine per
 * stream, and the output pass. */
#ifndef APX_CUDA_TILESSM_SCAN_CHUNKED_CUH
#define APX_CUDA_TILESSM_SCAN_CHUNKED_CUH

#include "tilessm_scan_common.cuh"

/* (1) local scans from a zero state. */
template <typename T, int V>
__global__ void ssm_local_kernel(const T *__restrict__ tokens, ssm_params p, ssm_geometry g,
                                 float *__restrict__ carry_f, float *__restrict__ carry_b) {
  CUDA_FOR(w, g.B * g.chunks * g.lanes) {
    int64_t c = (w % g.lanes) * V, j = (w / g.lanes) % g.chunks, b = w / (g.lanes * g.chunks);
    int64_t k0 = j * g.L, k1 = k0 + g.L < g.K ? k0 + g.L : g.K;
    ssm_chan ch[V];
#pragma unroll
    for (int v = 0; v < V; v++) ch[v] = load_chan(p, c + v);
    int64_t at = (b * g.chunks + j) * g.C + c;
    if (g.direction != APX_SCAN_BACKWARD) {
      float s[V] = {}, x[V];
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        ssm_vec<T, V>::load(tokens + (b * g.K + k) * g.C + c, x);
        step<V>(x, ch, p.lim, s);
      }
#pragma unroll
      for (int v = 0; v < V; v++) carry_f[at + v] = s[v];
    }
    if (g.direction != APX_SCAN_FORWARD) {
      float s[V] = {}, x[V];
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        ssm_vec<T, V>::load(tokens + (b * g.K + k) * g.C + c, x);
        step<V>(x, ch, p.lim, s);
      }
#pragma unroll
      for (int v = 0; v < V; v++) carry_b[at + v] = s[v];
    }
  }
}

/* (A, H) maps a state S to A*S + H; `first` then `second`. */
static __device__ __forceinline__ void compose(float &a1, float &h1, float a2, float h2) {
  h1 = a2 * h1 + h2;
  a1 = a2 * a1;
}

/* Combine the chunks of one direction of one stream, one warp: lane l owns
 * `per` consecutive chunks in scan order; each lane composes its chunks,
 * a warp scan composes the lanes, then each lane walks its chunks from its
 * true initial state, replacing every carry by that chunk's initial state.
 * Returns the final state (every lane). */
static __device__ float combine_dir(float *carry, const ssm_geometry &g, int64_t b, int64_t c,
                                    int backward, float s0, float a_full, float a_last) {
  const int lane = threadIdx.x & 31;
  const int64_t per = (g.chunks + 31) / 32;
  const int64_t n0 = lane * per, n1 = n0 + per < g.chunks ? n0 + per : g.chunks;
  float A = 1.0f, H = 0.0f;
  for (int64_t n = n0; n < n1; n++) {
    int64_t j = backward ? g.chunks - 1 - n : n;
    float a = j == g.chunks - 1 ? a_last : a_full;
    compose(A, H, a, carry[(b * g.chunks + j) * g.C + c]);
  }
  /* inclusive scan over lanes, then shift to exclusive */
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    float pa = __shfl_up_sync(0xffffffffu, A, off), ph = __shfl_up_sync(0xffffffffu, H, off);
    if (lane >= off) { /* (pa, ph) comes first */
      H = A * ph + H;
      A = A * pa;
    }
  }
  float ea = __shfl_up_sync(0xffffffffu, A, 1), eh = __shfl_up_sync(0xffffffffu, H, 1);
  float fa = __shfl_sync(0xffffffffu, A, 31), fh = __shfl_sync(0xffffffffu, H, 31);
  float s = lane == 0 ? s0 : ea * s0 + eh;
  for (int64_t n = n0; n < n1; n++) {
    int64_t j = backward ? g.chunks - 1 - n : n;
    int64_t at = (b * g.chunks + j) * g.C + c;
    float h = carry[at];
    carry[at] = s;
    s = (j == g.chunks - 1 ? a_last : a_full) * s + h;
  }
  return fa * s0 + fh;
}

/* (2) combine chunks per stream: the carries become the chunks' initial
 * states; writes final_state. One warp per stream. Also used alone when
 * K = 0 (no chunks: the final state is the init state). */
template <typename T>
__global__ void ssm_carry_kernel(ssm_params p, ssm_geometry g, float *carry_f, float *carry_b,
                                 T *__restrict__ final_state) {
  const int lane = threadIdx.x & 31;
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < g.B * g.C;
       w += ((int64_t)gridDim.x * blockDim.x) / 32) {
    int64_t c = w % g.C, b = w / g.C;
    ssm_chan ch = load_chan(p, c);
    float a_full = 1.0f, a_last = 1.0f;
    int64_t last_len = g.K - (g.chunks - 1) * g.L;
    for (int64_t i = 0; i < g.L; i++) a_full *= ch.d;
    for (int64_t i = 0; i < last_len && g.chunks > 0; i++) a_last *= ch.d;
    float final_f = init_state(p, b, 0, c, g.C), final_b = init_state(p, b, 1, c, g.C);
    if (g.chunks > 0) {
      if (g.direction != APX_SCAN_BACKWARD)
        final_f = combine_dir(carry_f, g, b, c, 0, final_f, a_full, a_last);
      if (g.direction != APX_SCAN_FORWARD)
        final_b = combine_dir(carry_b, g, b, c, 1, final_b, a_full, a_last);
    }
    if (!final_state || lane != 0) continue;
    if (g.direction == APX_SCAN_BIDIRECTIONAL) {
      final_state[(b * 2 + 0) * g.C + c] = cuda_dt<T>::from_f(final_f);
      final_state[(b * 2 + 1) * g.C + c] = cuda_dt<T>::from_f(final_b);
    } else {
      final_state[b * g.C + c] =
          cuda_dt<T>::from_f(g.direction == APX_SCAN_FORWARD ? final_f : final_b);
    }
  }
}

static __device__ __noinline__ float merge_gate(const ssm_params &p, int64_t b, int64_t c,
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
template <typename T, int V>
__global__ void ssm_out_kernel(const T *__restrict__ tokens, T *__restrict__ out, ssm_params p,
                               ssm_geometry g, const float *__restrict__ start_f,
                               const float *__restrict__ start_b, float *__restrict__ y_back,
                               T *__restrict__ final_state) {
  CUDA_FOR(w, g.B * g.chunks * g.lanes) {
    int64_t c = (w % g.lanes) * V, j = (w / g.lanes) % g.chunks, b = w / (g.lanes * g.chunks);
    int64_t k0 = j * g.L, k1 = k0 + g.L < g.K ? k0 + g.L : g.K;
    int64_t at = (b * g.chunks + j) * g.C + c;
    int single = g.chunks == 1;
    ssm_chan ch[V];
    float sf[V], sb[V], x[V], y[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      ch[v] = load_chan(p, c + v);
      sf[v] = sb[v] = 0.0f;
      if (g.direction != APX_SCAN_BACKWARD)
        sf[v] = single ? init_state(p, b, 0, c + v, g.C) : start_f[at + v];
      if (g.direction != APX_SCAN_FORWARD)
        sb[v] = single ? init_state(p, b, 1, c + v, g.C) : start_b[at + v];
    }
    if (g.direction == APX_SCAN_FORWARD) {
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sf);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = ch[v].og * sf[v];
        ssm_vec<T, V>::store(out + i, y);
      }
      if (single && final_state)
#pragma unroll
        for (int v = 0; v < V; v++) final_state[b * g.C + c + v] = cuda_dt<T>::from_f(sf[v]);
    } else if (g.direction == APX_SCAN_BACKWARD) {
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sb);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = ch[v].og * sb[v];
        ssm_vec<T, V>::store(out + i, y);
      }
      if (single && final_state)
#pragma unroll
        for (int v = 0; v < V; v++) final_state[b * g.C + c + v] = cuda_dt<T>::from_f(sb[v]);
    } else {
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sb);
#pragma unroll
        for (int v = 0; v < V; v++) y_back[i + v] = ch[v].og * sb[v];
      }
      float gate[V];
#pragma unroll
      for (int v = 0; v < V; v++) gate[v] = merge_gate(p, b, c + v, g.C);
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sf);
#pragma unroll
        for (int v = 0; v < V; v++) {
          float yf = ch[v].og * sf[v], yb = y_back[i + v];
          if (g.merge == APX_MERGE_SUM) y[v] = yf + yb;
          else if (g.merge == APX_MERGE_AVG) y[v] = 0.5f * (yf + yb);
          else y[v] = gate[v] * yf + (1.0f - gate[v]) * yb;
        }
        ssm_vec<T, V>::store(out + i, y);
      }
      if (single && final_state)
#pragma unroll
        for (int v = 0; v < V; v++) {
          final_state[(b * 2 + 0) * g.C + c + v] = cuda_dt<T>::from_f(sf[v]);
          final_state[(b * 2 + 1) * g.C + c + v] = cuda_dt<T>::from_f(sb[v]);
        }
    }
  }
}

#endif /* APX_CUDA_TILESSM_SCAN_CHUNKED_CUH */
