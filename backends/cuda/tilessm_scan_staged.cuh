/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan's one-pass bidirectional scan (tilessm_scan.cu): one block
 * per (b, 16 bytes of channels) stages that stream's whole K in shared
 * memory, scans it forward and backward and merges, reading the tokens
 * once and writing out once, in one launch. */
#ifndef APX_CUDA_TILESSM_SCAN_STAGED_CUH
#define APX_CUDA_TILESSM_SCAN_STAGED_CUH

#include "tilessm_scan_common.cuh"

/* ---- the staged bidirectional scan ---------------------------------------
 *
 * A block owns E = 16 / sizeof(T) channels of one batch row (one 16-byte
 * word of each token row) and SSM_STAGED_SEGS * E threads: thread t scans
 * channel t % E over segment t / E of K (seg steps, a multiple of Q; the
 * last non-empty segment may be short, those after it are empty).
 *   1. The block copies the rows [K, E] into shared memory (16-byte loads
 *      where tokens, out and C allow, else element by element); row r
 *      lives in 16-byte slot r + r / seg, so that the four (fp32: eight)
 *      segments a warp reads at once fall into different banks.
 *   2. Each thread walks its segment in sub-chunks of Q steps held in
 *      registers: each sub-chunk's forward and backward states from zero,
 *      composed into the segment's maps (forward: S -> d^len*S + Hf;
 *      backward: S -> d^len*S + Hb, Hb = sum_j d^(jQ) hb_j); the sub-chunks'
 *      forward states stay in shared memory.
 *   3. Each thread folds the segments before it (forward) and after it
 *      (backward) onto the initial states: its segment's true start states;
 *      then the sub-chunks' forward start states (S_{j+1} = d^Q*S_j + hf_j).
 *   4. The sub-chunks from last to first: the backward recurrence over the
 *      sub-chunk (continuing its running state) into Q registers, then the
 *      forward one from the sub-chunk's start state, merged in fp32 and
 *      rounded once into the token's own slot (no thread reads it again).
 *   5. The block copies the rows back out.
 * Within a sub-chunk both recurrences are the sequential ones; the states
 * at segment and sub-chunk boundaries carry the extra rounding of
 * d^len*S + h (a few fp32 ulps), as the block and chunked scans' chunk
 * boundaries do. */
#define SSM_STAGED_SEGS 32

/* The dynamic shared memory of a block: the rows (K + SEGS slots of 16
 * bytes), each thread's segment maps (2 floats) and its sub-chunks' states
 * (K-dependent: seg / Q floats). */
static inline size_t ssm_staged_smem(int64_t K, size_t elem, int64_t seg, int q) {
  const int64_t nt = SSM_STAGED_SEGS * (int64_t)(16 / elem);
  return (size_t)(K + SSM_STAGED_SEGS) * 16 + (size_t)nt * 4 * (size_t)(2 + seg / q);
}

/* Three blocks an SM (K = 4096 of 16-bit tokens: 75 KB of shared memory
 * each) where K is long; with 8-step sub-chunks (K <= 256: latency-bound,
 * few blocks) two, whose 128 registers avoid a spill. */
template <typename T, int Q>
__global__ void __launch_bounds__(SSM_STAGED_SEGS *(16 / sizeof(T)), Q == 8 ? 2 : 3)
    ssm_staged_kernel(const T *__restrict__ tokens, T *__restrict__ out, ssm_params p, int64_t B,
                      int K, int64_t C, int seg, int merge, int vec, T *__restrict__ final_state) {
  enum { E = 16 / sizeof(T), NT = SSM_STAGED_SEGS * E };
  extern __shared__ uint4 ssm_staged_sh[];
  uint4 *rows = ssm_staged_sh;
  T *xs = (T *)rows;                                    /* element e of slot q: xs[q * E + e] */
  float *seg_f = (float *)(rows + K + SSM_STAGED_SEGS); /* [SEGS][E]: Hf, then read by others */
  float *seg_b = seg_f + NT;                            /* [SEGS][E]: Hb */
  float *sub_f = seg_b + NT; /* [seg/Q][NT]: a sub-chunk's hf, then its start state */
  const int t = threadIdx.x, e = t % E, s = t / E;
  const int n = seg / Q;
  const int64_t groups = (C + E - 1) / E;
  const int k0 = s * seg; /* the segment's first step */
  const int len = K - k0 <= 0 ? 0 : (K - k0 < seg ? K - k0 : seg);
  const int base = k0 + s;                                   /* its first row's slot */
  const int last = (K - 1) / seg, last_len = K - last * seg; /* the last non-empty segment */
  for (int64_t bg = blockIdx.x; bg < B * groups; bg += gridDim.x) {
    const int64_t b = bg / groups, c0 = (bg - b * groups) * E;
    const int64_t c = c0 + e;
    const bool active = c < C;
    const int64_t cv = active ? c : c0;
    /* the channel's parameters, init states and gate: their loads issued
     * first, converted after the rows' (tilessm_scan_common.cuh,
     * ssm_load_bits) */
    const int64_t i_f = !p.init ? cv : p.init_dirs == 2 ? (b * 2) * C + cv : b * C + cv;
    const int64_t i_b = !p.init ? cv : p.init_dirs == 2 ? (b * 2 + 1) * C + cv : b * C + cv;
    const ssm_bits raw_d = ssm_load_bits(p.decay, p.dt_decay, cv);
    const ssm_bits raw_ig = ssm_load_bits(p.input_gain, p.dt_input_gain, cv);
    const ssm_bits raw_og = ssm_load_bits(p.output_gain, p.dt_output_gain, cv);
    const ssm_bits raw_sb = ssm_load_bits(p.state_bias, p.dt_state_bias, cv);
    const ssm_bits raw_if =
        ssm_load_bits(p.init ? p.init : p.decay, p.init ? p.dt_init : p.dt_decay, i_f);
    const ssm_bits raw_ib =
        ssm_load_bits(p.init ? p.init : p.decay, p.init ? p.dt_init : p.dt_decay, i_b);
    const ssm_bits raw_g = ssm_load_bits(p.gate ? p.gate : p.decay, p.gate ? p.dt_gate : p.dt_decay,
                                         p.gate && p.gate_batched ? b * C + cv : cv);
    /* 1. stage the rows: sm_80 on, every row's 16 bytes by cp.async (all
     * of the block's rows in flight at once, no registers held; waited for
     * after the parameters' conversions); before sm_80, four rows a thread
     * at a time through registers, their loads issued before the stores */
    const T *src = tokens + b * (int64_t)K * C + c0;
    if (vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      const unsigned sh_rows = (unsigned)__cvta_generic_to_shared(rows);
#pragma unroll 4
      for (int r = t; r < K; r += NT)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                         sh_rows + 16u * (unsigned)(r + r / seg)),
                     "l"(src + (int64_t)r * C)
                     : "memory");
      asm volatile("cp.async.commit_group;" ::: "memory");
#else
#pragma unroll 1
      for (int r0 = 0; r0 < K; r0 += 4 * NT) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int r = r0 + u * NT + t;
          if (r < K) v[u] = __ldg((const uint4 *)(src + (int64_t)r * C));
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int r = r0 + u * NT + t;
          if (r < K) rows[r + r / seg] = v[u];
        }
      }
#endif
    } else {
#pragma unroll 1
      for (int i = t; i < K * E; i += NT) {
        const int r = i / E, e2 = i - r * E;
        xs[(r + r / seg) * E + e2] =
            c0 + e2 < C ? src[(int64_t)r * C + e2] : cuda_dt<T>::from_f(0.0f);
      }
    }
    const ssm_chan ch = ssm_chan_of(
        ssm_bits_to_f(raw_d, p.dt_decay), ssm_bits_to_f(raw_ig, p.dt_input_gain),
        ssm_bits_to_f(raw_og, p.dt_output_gain), ssm_bits_to_f(raw_sb, p.dt_state_bias));
    /* init state and gate: cast to the tokens dtype first */
    const float init_f =
        p.init ? cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_if, p.dt_init))) : 0.0f;
    const float init_b =
        p.init ? cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_ib, p.dt_init))) : 0.0f;
    float gate = 0.5f;
    if (p.gate) {
      const float gv = cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_g, p.dt_gate)));
      gate = gv < 0.0f ? 0.0f : (gv > 1.0f ? 1.0f : gv);
    }
    const float aQ = ssm_pow(ch.d, Q);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (vec) asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
    __syncthreads();
    /* A sub-chunk's work comes in two forms: full (Q steps, unrolled, the
     * drives in registers) and short (the last of the last segment: rolled
     * loops, one step at a time; unrolled and predicated, it took ptxas
     * to 150 registers). */
    /* the drive of the token in slot row `at`'s channel */
    auto drive = [&](int at) {
      return ch.ig * sanitize(cuda_dt<T>::to_f(xs[at * E + e]), p.lim) + ch.sb;
    };
    /* 2. the segment's maps and its sub-chunks' forward states */
    float Hf = 0.0f, Hb = 0.0f, P = 1.0f;
#pragma unroll 1
    for (int j = 0; j < n; j++) {
      const int cnt = len - j * Q < Q ? len - j * Q : Q;
      if (cnt <= 0) break;
      const int at = base + j * Q;
      float f = 0.0f, h = 0.0f;
      if (cnt == Q) {
        float dr[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) dr[i] = drive(at + i);
#pragma unroll
        for (int i = 0; i < Q; i++) f = ch.d * f + ch.om * dr[i];
#pragma unroll
        for (int i = Q - 1; i >= 0; i--) h = ch.d * h + ch.om * dr[i];
      } else {
#pragma unroll 1
        for (int i = 0; i < cnt; i++) f = ch.d * f + ch.om * drive(at + i);
#pragma unroll 1
        for (int i = cnt - 1; i >= 0; i--) h = ch.d * h + ch.om * drive(at + i);
      }
      sub_f[j * NT + t] = f;
      Hf = (cnt == Q ? aQ : ssm_pow(ch.d, cnt)) * Hf + f;
      Hb = P * h + Hb;
      P *= aQ;
    }
    seg_f[t] = Hf;
    seg_b[t] = Hb;
    __syncthreads();
    /* 3. fold the other segments onto the initial states: every segment
     * before this one is full (d^seg = aQ^n), the last one may be short */
    const float aS = ssm_pow(aQ, n);
    const float aLast = ssm_pow(aQ, last_len / Q) * ssm_pow(ch.d, last_len % Q);
    float Sf = init_f, Sb = init_b;
#pragma unroll 4
    for (int j = 0; j < s; j++) Sf = aS * Sf + seg_f[j * E + e];
    if (last > s) Sb = aLast * Sb + seg_b[last * E + e];
#pragma unroll 4
    for (int j = last - 1; j > s; j--) Sb = aS * Sb + seg_b[j * E + e];
#pragma unroll 1
    for (int j = 0; j < n; j++) {
      const int cnt = len - j * Q < Q ? len - j * Q : Q;
      if (cnt <= 0)
        break;
      const float f = sub_f[j * NT + t];
      sub_f[j * NT + t] = Sf;
      Sf = aQ * Sf + f; /* a short sub-chunk is the last: Sf unused after it */
    }
    /* 4. the sub-chunks from last to first, both directions, merged */
    auto merged = [&](float yf, float yb) {
      if (merge == APX_MERGE_SUM) return yf + yb;
      if (merge == APX_MERGE_AVG) return 0.5f * (yf + yb);
      return gate * yf + (1.0f - gate) * yb;
    };
    float fin_f = 0.0f;
#pragma unroll 1
    for (int j = n - 1; j >= 0; j--) {
      const int cnt = len - j * Q < Q ? len - j * Q : Q;
      if (cnt <= 0) continue;
      const int at = base + j * Q;
      float sf = sub_f[j * NT + t], yb[Q];
      if (cnt == Q) {
        float dr[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) dr[i] = drive(at + i);
#pragma unroll
        for (int i = Q - 1; i >= 0; i--) {
          Sb = ch.d * Sb + ch.om * dr[i];
          yb[i] = ch.og * Sb;
        }
#pragma unroll
        for (int i = 0; i < Q; i++) {
          sf = ch.d * sf + ch.om * dr[i];
          xs[(at + i) * E + e] = cuda_dt<T>::from_f(merged(ch.og * sf, yb[i]));
        }
      } else {
#pragma unroll 1
        for (int i = cnt - 1; i >= 0; i--) {
          Sb = ch.d * Sb + ch.om * drive(at + i);
          yb[i] = ch.og * Sb;
        }
#pragma unroll 1
        for (int i = 0; i < cnt; i++) {
          sf = ch.d * sf + ch.om * drive(at + i);
          xs[(at + i) * E + e] = cuda_dt<T>::from_f(merged(ch.og * sf, yb[i]));
        }
      }
      if (j * Q + cnt == len) fin_f = sf; /* the segment's last step */
    }
    __syncthreads();
    /* 5. the rows out */
    T *dst = out + b * (int64_t)K * C + c0;
    if (vec) {
      for (int r = t; r < K; r += NT)
        *(uint4 *)(dst + (int64_t)r * C) = rows[r + r / seg];
    } else {
#pragma unroll 1
      for (int i = t; i < K * E; i += NT) {
        const int r = i / E, e2 = i - r * E;
        if (c0 + e2 < C)
          dst[(int64_t)r * C + e2] = xs[(r + r / seg) * E + e2];
      }
    }
    if (final_state && active) {
      if (s == last)
        final_state[(b * 2) * C + c] = cuda_dt<T>::from_f(fin_f);
      if (s == 0)
        final_state[(b * 2 + 1) * C + c] = cuda_dt<T>::from_f(Sb);
    }
    __syncthreads(); /* the rows are reused by the next (b, group) */
  }
}

#endif /* APX_CUDA_TILESSM_SCAN_STAGED_CUH */
