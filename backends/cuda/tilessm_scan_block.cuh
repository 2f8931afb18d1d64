/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan's block scan (tilessm_scan.cu): one block per (b, channel
 * group) walks K in rounds. */
#ifndef APX_CUDA_TILESSM_SCAN_BLOCK_CUH
#define APX_CUDA_TILESSM_SCAN_BLOCK_CUH

#include "tilessm_scan_common.cuh"

/* ---- the block scan: one block per (b, channel group), K in rounds ------
 *
 * A block of SSM_WARPS warps owns 32*V channels of one batch row and walks
 * K in rounds of SSM_WARPS*L steps: in a round, warp w loads its L steps
 * (all loads in flight at once, and the next round's loads are issued
 * before this round's outputs are computed), scans them from a zero state
 * (h_w), publishes h_w in shared memory, folds the warps before it onto the
 * running state (s_in = d^L*s + h, the chunk map, exactly as the chunked
 * scan's carries) and scans its steps again from s_in, writing y. Tokens
 * are read from memory once and every y written once: the op's minimal
 * bytes, in one launch. Within a warp's L steps the recurrence is the
 * sequential one; only the chunk boundary states carry the extra rounding
 * of d^L*S + h (a few fp32 ulps, as the chunked scan's).
 *
 * It needs B*ceil(C/(32V)) blocks to fill the device or few rounds; the
 * chunked scan above serves few long streams. Modes: plain forward or
 * backward; the backward half of a bidirectional scan writing fp32 outputs
 * to a scratch; the forward half merging them (one rounding on store). */

template <typename T, int V, int L, int MODE>
__global__ void __launch_bounds__(SSM_WARPS * 32)
ssm_block_kernel(const T *__restrict__ tokens, T *__restrict__ out, ssm_params p, int64_t B,
                 int64_t K, int64_t C, int backward, int merge, float *__restrict__ y_back,
                 T *__restrict__ final_state) {
  typedef ssm_vec<T, V> vec;
  typedef typename vec::raw R;
  __shared__ float h_sh[2][SSM_WARPS][32 * V];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t groups = (C + 32 * V - 1) / (32 * V);
  const int64_t per_round = (int64_t)SSM_WARPS * L;
  const int64_t rounds = (K + per_round - 1) / per_round;
  const int dir = MODE == SSM_MERGE ? 0 : (MODE == SSM_TO_SCRATCH ? 1 : backward);
  /* (b, group) of bg: a 32-bit division where it fits (a 64-bit one by a
   * run-time value is a long call on the prologue's critical path) */
  const bool div32 = B * groups <= (int64_t)UINT32_MAX;
  for (int64_t bg = blockIdx.x; bg < B * groups; bg += gridDim.x) {
    const int64_t b = div32 ? (int64_t)((uint32_t)bg / (uint32_t)groups) : bg / groups;
    const int64_t c = (bg - b * groups) * 32 * V + lane * V;
    const bool active = c < C; /* V = 2 only when C is even: c + 1 < C too */
    const int64_t cc = active ? c : 0;
    /* step n of the scan order is token k = n (forward) or K-1-n */
    auto at = [&](int64_t n) -> int64_t {
      return (b * K + (dir ? K - 1 - n : n)) * C + cc;
    };
    R cur[L], nxt[L];
    /* consecutive steps are C elements apart, backwards for dir 1 */
    const int64_t stride = dir ? -C : C;
    /* how many of the L steps from scan step n0 this thread walks (0 when
     * inactive): one 32-bit compare per step, not a 64-bit one */
    auto steps = [&](int64_t n0) -> int {
      const int64_t rest = K - n0;
      return !active || rest <= 0 ? 0 : (rest >= L ? L : (int)rest);
    };
    /* token addresses by a running pointer: an add per step (multiplying
     * i * stride in 64 bits took a dozen instructions a load, issued
     * before the first scan step) */
    auto load_round = [&](int64_t r, R *x) {
      const int64_t n0 = r * per_round + (int64_t)w * L;
      const int cnt = steps(n0);
      const T *q = tokens + at(n0 < K ? n0 : 0);
#pragma unroll
      for (int i = 0; i < L; i++, q += stride)
        if (i < cnt) x[i] = __ldg((const R *)q);
    };
    /* Every global load of the prologue is issued before any is used:
     * the first round's tokens, then the raw bits of the parameters, the
     * init state and the gate of the thread's V channels; only then the
     * dtype conversions. (Converting each value as it loads, through
     * cuda_load_any's switch or the noinline init_state, made each load
     * wait for the one before: a chain of memory round trips.) */
    if (rounds > 0) load_round(0, cur);
    ssm_bits raw_d[V], raw_ig[V], raw_og[V], raw_sb[V], raw_init[V], raw_gate[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      const int64_t cv = cc + (active ? v : 0);
      raw_d[v] = ssm_load_bits(p.decay, p.dt_decay, cv);
      raw_ig[v] = ssm_load_bits(p.input_gain, p.dt_input_gain, cv);
      raw_og[v] = ssm_load_bits(p.output_gain, p.dt_output_gain, cv);
      raw_sb[v] = ssm_load_bits(p.state_bias, p.dt_state_bias, cv);
      /* without init state or gate, a harmless load of the decay
       * instead, unused: no branch between the loads */
      raw_init[v] = ssm_load_bits(p.init ? p.init : p.decay, p.init ? p.dt_init : p.dt_decay,
                                  !p.init ? cv
                                  : p.init_dirs == 2 ? (b * 2 + dir) * C + cv
                                                     : b * C + cv);
      raw_gate[v] = ssm_bits{0, 0};
      if (MODE == SSM_MERGE)
        raw_gate[v] = ssm_load_bits(p.gate ? p.gate : p.decay, p.gate ? p.dt_gate : p.dt_decay,
                                    p.gate && p.gate_batched ? b * C + cv : cv);
    }
    ssm_chan ch[V];
    float carry[V], aL[V], gate[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      ch[v] = ssm_chan_of(ssm_bits_to_f(raw_d[v], p.dt_decay),
                          ssm_bits_to_f(raw_ig[v], p.dt_input_gain),
                          ssm_bits_to_f(raw_og[v], p.dt_output_gain),
                          ssm_bits_to_f(raw_sb[v], p.dt_state_bias));
      /* init state and gate: cast to the tokens dtype T first (as
       * init_state and merge_gate do) */
      carry[v] = p.init && active
                     ? cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_init[v], p.dt_init)))
                     : 0.0f;
      aL[v] = ssm_pow(ch[v].d, L);
      gate[v] = 0.5f;
      if (MODE == SSM_MERGE && p.gate && active) {
        float gv = cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_gate[v], p.dt_gate)));
        gate[v] = gv < 0.0f ? 0.0f : (gv > 1.0f ? 1.0f : gv);
      }
    }
    for (int64_t r = 0; r < rounds; r++) {
      const int64_t n0 = r * per_round + (int64_t)w * L;
      const int cnt = steps(n0);
      float h[V] = {}, x[V];
#pragma unroll
      for (int i = 0; i < L; i++)
        if (i < cnt) {
          vec::to_f(cur[i], x);
          step<V>(x, ch, p.lim, h);
        }
      float *mine = h_sh[r & 1][w];
#pragma unroll
      for (int v = 0; v < V; v++) mine[lane * V + v] = h[v];
      if (r + 1 < rounds) load_round(r + 1, nxt);
      float yb[MODE == SSM_MERGE ? L : 1][V];
      if (MODE == SSM_MERGE) {
        const float *q = y_back + at(n0 < K ? n0 : 0);
#pragma unroll
        for (int i = 0; i < L; i++, q += stride)
          if (i < cnt)
#pragma unroll
            for (int v = 0; v < V; v++) yb[i][v] = q[v];
      }
      __syncthreads();
      /* fold the round's chunks in scan order: s_in for this warp, the
       * carry for the next round */
      float s[V];
#pragma unroll
      for (int v = 0; v < V; v++) s[v] = carry[v];
      float s_in[V];
      if (r + 1 < rounds) { /* every chunk of the round is L steps long */
#pragma unroll
        for (int i = 0; i < SSM_WARPS; i++) {
          if (i == w)
#pragma unroll
            for (int v = 0; v < V; v++) s_in[v] = s[v];
#pragma unroll
          for (int v = 0; v < V; v++) s[v] = aL[v] * s[v] + h_sh[r & 1][i][lane * V + v];
        }
      } else { /* the last round: chunks 0..last, last maybe short, the rest empty */
        const int64_t rest = K - r * per_round; /* in [1, per_round] */
        const int last = (int)((rest - 1) / L), last_len = (int)(rest - (int64_t)last * L);
        float a_last[V];
#pragma unroll
        for (int v = 0; v < V; v++) a_last[v] = last_len == L ? aL[v] : ssm_pow(ch[v].d, last_len);
        /* every chunk's h read first (empty chunks published h = 0 this
         * round, so all reads are of written values), then the fold in the
         * warps' order, the same arithmetic as above. Unrolled, without
         * the per-chunk 64-bit length and d^len loop of before; ptxas
         * still issues one shared load per link of the chain (nvcc 13.0,
         * sm_90) but gives these kernels fewer registers. */
        float hv[SSM_WARPS][V];
#pragma unroll
        for (int i = 0; i < SSM_WARPS; i++)
#pragma unroll
          for (int v = 0; v < V; v++) hv[i][v] = h_sh[r & 1][i][lane * V + v];
#pragma unroll
        for (int i = 0; i < SSM_WARPS; i++) {
          if (i == w)
#pragma unroll
            for (int v = 0; v < V; v++) s_in[v] = s[v];
          if (i <= last)
#pragma unroll
            for (int v = 0; v < V; v++)
              s[v] = (i == last ? a_last[v] : aL[v]) * s[v] + hv[i][v];
        }
      }
#pragma unroll
      for (int v = 0; v < V; v++) carry[v] = s[v];
      /* this warp's steps again, from its true initial state */
      const int64_t e0 = at(n0 < K ? n0 : 0);
      T *o = out + e0;
      float *ob = y_back + e0;
#pragma unroll
      for (int i = 0; i < L; i++, o += stride, ob += stride)
        if (i < cnt) {
          vec::to_f(cur[i], x);
          step<V>(x, ch, p.lim, s_in);
          float y[V];
#pragma unroll
          for (int v = 0; v < V; v++) y[v] = ch[v].og * s_in[v];
          if (MODE == SSM_TO_SCRATCH) {
#pragma unroll
            for (int v = 0; v < V; v++) ob[v] = y[v];
          } else {
            if (MODE == SSM_MERGE)
#pragma unroll
              for (int v = 0; v < V; v++) {
                if (merge == APX_MERGE_SUM) y[v] = y[v] + yb[i][v];
                else if (merge == APX_MERGE_AVG) y[v] = 0.5f * (y[v] + yb[i][v]);
                else y[v] = gate[v] * y[v] + (1.0f - gate[v]) * yb[i][v];
              }
            ssm_vec<T, V>::store(o, y);
          }
        }
#pragma unroll
      for (int i = 0; i < L; i++) cur[i] = nxt[i];
    }
    if (final_state && active && w == 0) {
#pragma unroll
      for (int v = 0; v < V; v++) {
        int64_t fs = MODE == SSM_PLAIN ? b * C + cc + v : (b * 2 + dir) * C + cc + v;
        final_state[fs] = cuda_dt<T>::from_f(carry[v]);
      }
    }
    __syncthreads(); /* h_sh is reused by the next (b, group) */
  }
}

#endif /* APX_CUDA_TILESSM_SCAN_BLOCK_CUH */
