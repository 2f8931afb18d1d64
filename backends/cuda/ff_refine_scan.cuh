/* SPDX-License-Identifier: Apache-2.0 */
/* The kernels of one FF level before its refine (ff_refine.cu): the
 * pixels outside every L0 tile, the tiles' tokens, the scan and FiLM. */
#ifndef APX_CUDA_FF_REFINE_SCAN_CUH
#define APX_CUDA_FF_REFINE_SCAN_CUH

#include "ff_refine_common.cuh"

/* ---- pixels outside every L0 tile; alpha everywhere ---------------------------- */

/* Block blk of nblk of row b: work items (channel group, pixel), pixels
 * fastest. */
template <typename T>
static __device__ void ff_outside_body(const ff_outside_args &o, int64_t b, int64_t blk,
                                       int64_t nblk) {
  const int64_t HW = o.H * o.W, nz = (o.C + FF_OUT_CPB - 1) / FF_OUT_CPB;
  const T *X = (const T *)o.X;
  T *heavy = (T *)o.heavy, *detail = (T *)o.detail, *alpha = (T *)o.alpha;
  for (int64_t it = blk * blockDim.x + threadIdx.x; it < HW * nz; it += nblk * blockDim.x) {
    const int64_t z = it / HW, i = it % HW;
    const int64_t y = i / o.W, x = i % o.W, pix = b * HW + i;
    const float bpv = ff_proxy<T>(o.bp, o.bp_dt, pix), upv = ff_proxy<T>(o.up, o.up_dt, pix);
    const float a0 = ff_alpha<T>(bpv, upv, o.wb0, o.wu0, o.gb0);
    const float a1 = o.two ? ff_alpha<T>(bpv, upv, o.wb1, o.wu1, o.gb1) : a0;
    if (z == 0) alpha[pix] = cuda_dt<T>::from_f(a1);
    if (__ldcg(o.tile_state + b * o.G0 + (y / o.t0) * o.gw0 + x / o.t0) != CUDA_FF_TILE_OUT)
      continue;
    const int64_t c0 = z * FF_OUT_CPB;
    const int nc = (int)(c0 + FF_OUT_CPB < o.C ? FF_OUT_CPB : o.C - c0);
    const int64_t off0 = (b * o.C + c0) * HW + i;
    /* the channels' loads first, all in flight (heavy and detail may
     * alias nothing the loads read, but the compiler cannot know) */
    float xv[FF_OUT_CPB];
#pragma unroll
    for (int j = 0; j < FF_OUT_CPB; j++)
      xv[j] = j < nc ? cuda_dt<T>::to_f(X[off0 + j * HW]) : 0.0f;
#pragma unroll
    for (int j = 0; j < FF_OUT_CPB; j++) {
      if (j >= nc) break;
      const float h0 = ff_fuse<T>(xv[j], xv[j], a0);
      float h = h0, base = xv[j];
      if (o.two) {
        h = ff_fuse<T>(h0, h0, a1);
        base = h0;
      }
      heavy[off0 + j * HW] = cuda_dt<T>::from_f(h);
      detail[off0 + j * HW] = cuda_dt<T>::from_f(rnd<T>(__fsub_rn(h, base)));
    }
  }
}

template <typename T> __global__ void ff_outside_kernel(ff_outside_args o) {
  FF_TL(FF_TL_OUTSIDE);
  ff_outside_body<T>(o, blockIdx.y, blockIdx.x, gridDim.x);
}

/* ---- tokens ------------------------------------------------------------------- */

template <typename T>
__global__ void ff_tokens_kernel(const T *X, ff_geom g, float *__restrict__ tok) {
  cuda_allow_dependents();
  FF_TL(FF_TL_TOKENS);
  /* (cuda_launch_after) X and the ids come from the kernels before */
  cuda_wait_prerequisites();
  FF_TL_WAITED();
  const int64_t k = blockIdx.x, b = blockIdx.y;
  const int64_t c = (int64_t)blockIdx.z * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (c >= g.C) return;
  const int id = __ldcg(g.ids + b * g.kstride + k);
  const int64_t ty = id / g.gw, tx = id % g.gw, tt = g.t * g.t;
  const T *base = X + ((b * g.C + c) * g.H + ty * g.t) * g.W + tx * g.t;
  float s = 0.0f;
  for (int64_t e = lane; e < tt; e += 32)
    s += cuda_dt<T>::to_f(__ldcg(base + (e / g.t) * g.W + e % g.t));
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) tok[(b * g.K + k) * g.C + c] = rnd<T>(__fdiv_rn(s, (float)tt));
}

/* ---- scan (6.A) + FiLM parameters (8) ----------------------------------------- */

template <typename T>
static __device__ __forceinline__ float ff_sanitise_tok(float x, float lim) {
  if (x != x) return 0.0f;
  return fminf(fmaxf(x, -lim), lim); /* +-inf clamp to +-lim */
}

/* Blocks x >= K of a row (the level that carries the outside pass) do the
 * outside pass instead. */
template <typename T>
__global__ void __launch_bounds__(FF_SF_THREADS, 2)
ff_scan_film_kernel(ff_geom g, cuda_ff_level lv, const float *tok, float *__restrict__ film,
                    ff_outside_args o, int n_out, int stage, int wstage) {
  FF_TL((int64_t)blockIdx.x >= g.K ? FF_TL_OUTSIDE_EARLY : g.t == 8 ? FF_TL_SCAN1 : FF_TL_SCAN0);
  extern __shared__ float ff_sf_sh[];
  /* each array padded to a multiple of 4 floats: the unrolled loops below
   * read 16 bytes at a time */
  float *xs = ff_sf_sh;                    /* [C] normalised token */
  float *hs = xs + ((g.C + 3) & ~(int64_t)3); /* [C] hidden */
  float *red = hs + ((g.C + 3) & ~(int64_t)3); /* [blockDim.x] partial sums */
  float *tk = red + ((blockDim.x + 3) & ~3u);  /* stage: [K][C] the row's tokens */
  /* wstage: [C][C] the C -> C layer's weights (w0t), copied (cp.async)
   * before the wait: constant */
  float *w0s = tk + (stage ? (g.K * g.C + 3) & ~(int64_t)3 : 0);
  /* wstage & 2: [C][2C] the C -> 2C layer's weights (w2t), the same way */
  float *w2s = w0s + ((wstage & 1) ? g.C * g.C : 0);
  /* the level's vectors, [C] each padded (b2: [2C]): decay, input gain,
   * state bias, output gain (forward, backward), merge gate, LayerNorm
   * weight and bias, b0, b2; copied before the wait */
  const int64_t C4 = (g.C + 3) & ~(int64_t)3;
  float *cst = w2s + ((wstage & 2) ? 2 * g.C * g.C : 0);
  if ((int64_t)blockIdx.x < g.K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    auto copy = [&](float *dst, const float *src, int n4) {
      const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
      for (int e = threadIdx.x; e < n4; e += blockDim.x)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(base + 16u * (unsigned)e),
                     "l"(src + 4 * (size_t)e)
                     : "memory");
    };
#else
    auto copy = [&](float *dst, const float *src, int n4) {
      for (int e = threadIdx.x; e < n4; e += blockDim.x)
        ((float4 *)dst)[e] = __ldg((const float4 *)src + e);
    };
#endif
    /* the vectors first, a copy group of their own (the scan waits for it
     * alone), then the weights; nothing here blocks the thread */
    auto vec = [&](int q, const float *src, int64_t n) {
      for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        const unsigned d = (unsigned)__cvta_generic_to_shared(cst + q * C4 + e);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src + e) : "memory");
#else
        cst[q * C4 + e] = __ldg(src + e);
#endif
      }
    };
    vec(0, lv.decay[0], g.C);
    vec(1, lv.decay[1], g.C);
    vec(2, lv.ig[0], g.C);
    vec(3, lv.ig[1], g.C);
    vec(4, lv.sb[0], g.C);
    vec(5, lv.sb[1], g.C);
    vec(6, lv.og[0], g.C);
    vec(7, lv.og[1], g.C);
    vec(8, lv.gate, g.C);
    vec(9, lv.ln_w, g.C);
    vec(10, lv.ln_b, g.C);
    vec(11, lv.b0, g.C);
    vec(12, lv.b2, 2 * g.C);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
    if (wstage & 1) copy(w0s, lv.w0t, (int)(g.C * g.C / 4));
    if (wstage & 2) copy(w2s, lv.w2t, (int)(2 * g.C * g.C / 4));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
  }
  /* (cuda_launch_after) the tokens, ids and tile states come from the
   * kernels before: read through L2 after their completion (the outside
   * blocks of an early launch: beside the kernel before) */
  if (!o.early || (int64_t)blockIdx.x < g.K) cuda_wait_prerequisites();
  /* the refine launch after this one may start only now: the kernels
   * before this one are complete, so that the refine reads their outputs
   * (the ids, level 1's X) before its own wait */
  cuda_allow_dependents();
  FF_TL_WAITED();
  if ((int64_t)blockIdx.x >= g.K) {
    ff_outside_body<T>(o, blockIdx.y, blockIdx.x - g.K, n_out);
    return;
  }
  __shared__ float sh32[32];
  const int64_t k = blockIdx.x, b = blockIdx.y, C = g.C, K = g.K;
  const float lim = rnd<T>(1e4f);
  const int *ids = g.ids + b * g.kstride;
  if (stage) { /* the row's tokens at once, all loads in flight */
    const int Ci = (int)C, KC = (int)(K * C);
#pragma unroll 8
    for (int e = threadIdx.x; e < KC; e += blockDim.x) {
      const int j = e / Ci, c = e - j * Ci;
      tk[e] = __ldcg(g.tok_G ? tok + (b * g.tok_G + __ldcg(ids + j)) * C + c
                             : tok + (b * K + j) * C + c);
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;" ::: "memory"); /* the vectors */
#endif
  __syncthreads();
  FF_TL_PHASE(0);
  /* token j of the row, channel c */
  auto token = [&](int64_t j, int64_t c) -> float {
    if (stage) return tk[j * C + c];
    return __ldcg(g.tok_G ? tok + (b * g.tok_G + __ldcg(ids + j)) * C + c : tok + (b * K + j) * C + c);
  };
  /* a thread a (direction, channel): forward into xs, backward into hs
   * (scan_mode forward: the forward stream alone) */
  const int64_t nd = g.scan_fwd ? C : 2 * C;
  for (int64_t e = threadIdx.x; e < nd; e += blockDim.x) {
    const int dir = e >= C;
    const int64_t c = e - dir * C;
    const float d = fminf(fmaxf(cst[dir * C4 + c], 1e-6f), 1.0f - 1e-6f);
    const float om = __fsub_rn(1.0f, d), ig = cst[(2 + dir) * C4 + c],
                sb = cst[(4 + dir) * C4 + c];
    float s = 0.0f;
    if (dir == 0) {
#pragma unroll 8
      for (int64_t j = 0; j <= k; j++) {
        float x = ff_sanitise_tok<T>(token(j, c), lim);
        float drv = __fadd_rn(__fmul_rn(ig, x), sb);
        s = __fadd_rn(__fmul_rn(d, s), __fmul_rn(om, drv));
      }
    } else {
#pragma unroll 8
      for (int64_t j = K - 1; j >= k; j--) {
        float x = ff_sanitise_tok<T>(token(j, c), lim);
        float drv = __fadd_rn(__fmul_rn(ig, x), sb);
        s = __fadd_rn(__fmul_rn(d, s), __fmul_rn(om, drv));
      }
    }
    (dir ? hs : xs)[c] = rnd<T>(__fmul_rn(cst[(6 + dir) * C4 + c], s));
  }
  __syncthreads();
  FF_TL_PHASE(1);
  float lsum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float gg = cst[8 * C4 + c];
    /* the gated merge; scan_mode forward: mixed = the forward output */
    float m = g.scan_fwd ? xs[c]
                         : rnd<T>(__fadd_rn(rnd<T>(__fmul_rn(gg, xs[c])),
                                            rnd<T>(__fmul_rn(rnd<T>(__fsub_rn(1.0f, gg)), hs[c]))));
    /* FiLM input: NaN -> 0, +-inf -> +-1e4, clamp */
    m = m != m ? 0.0f : fminf(fmaxf(m, -1e4f), 1e4f);
    xs[c] = m;
    lsum += m;
  }
  const float mean = ff_block_sum(lsum, sh32) / (float)C;
  float lvar = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float dv = xs[c] - mean;
    lvar += dv * dv;
  }
  const float var = ff_block_sum(lvar, sh32) / (float)C;
  const float rstd = 1.0f / sqrtf(var + 1e-5f);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    xs[c] = (xs[c] - mean) * rstd * cst[9 * C4 + c] + cst[10 * C4 + c];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
  __syncthreads();
  FF_TL_PHASE(2);
  /* the two linear layers over the input-major weights: where the block
   * has more threads than the layer has outputs, np threads an output,
   * each over a contiguous part of the inputs (consecutive threads,
   * consecutive outputs: coalesced; the loads unrolled so that many are
   * in flight), the parts' sums added in order through shared memory */
  const int Ci = (int)C, nt = (int)blockDim.x, tid = (int)threadIdx.x;
  const int np1 = nt / Ci > 1 ? nt / Ci : 1, np2 = nt / (2 * Ci) > 1 ? nt / (2 * Ci) : 1;
  if (np1 > 1) {
    const int o = tid % Ci, part = tid / Ci, len = (Ci + np1 - 1) / np1;
    const int c0 = part * len, c1 = c0 + len < Ci ? c0 + len : Ci;
    float acc = 0.0f;
    if (part < np1 && (wstage & 1)) {
#pragma unroll 16
      for (int c = c0; c < c1; c++) acc = fmaf(w0s[c * Ci + o], xs[c], acc);
      red[part * Ci + o] = acc;
    } else if (part < np1) {
#pragma unroll 32
      for (int c = c0; c < c1; c++) acc = fmaf(__ldg(lv.w0t + (int64_t)c * Ci + o), xs[c], acc);
      red[part * Ci + o] = acc;
    }
    __syncthreads();
    if (tid < Ci) {
      acc = cst[11 * C4 + tid];
      for (int p = 0; p < np1; p++) acc = __fadd_rn(acc, red[p * Ci + tid]);
      hs[tid] = acc * ff_sigmoid(acc);
    }
  } else {
    const float *w0 = (wstage & 1) ? w0s : lv.w0t;
    for (int o = tid; o < Ci; o += nt) {
      float acc = cst[11 * C4 + o];
#pragma unroll 16
      for (int c = 0; c < Ci; c++) acc = fmaf(w0[(int64_t)c * Ci + o], xs[c], acc);
      hs[o] = acc * ff_sigmoid(acc);
    }
  }
  __syncthreads();
  FF_TL_PHASE(3);
  float *out = film + (b * K + k) * 2 * C;
  if (np2 > 1) {
    const int j = tid % (2 * Ci), part = tid / (2 * Ci), len = (Ci + np2 - 1) / np2;
    const int c0 = part * len, c1 = c0 + len < Ci ? c0 + len : Ci;
    float acc = 0.0f;
    if (part < np2 && (wstage & 2)) {
#pragma unroll 16
      for (int c = c0; c < c1; c++) acc = fmaf(w2s[c * 2 * Ci + j], hs[c], acc);
      red[part * 2 * Ci + j] = acc;
    } else if (part < np2) {
#pragma unroll 32
      for (int c = c0; c < c1; c++)
        acc = fmaf(__ldg(lv.w2t + (int64_t)c * 2 * Ci + j), hs[c], acc);
      red[part * 2 * Ci + j] = acc;
    }
    FF_TL_PHASE(4);
    __syncthreads();
    if (tid < 2 * Ci) {
      acc = cst[12 * C4 + tid];
      for (int p = 0; p < np2; p++) acc = __fadd_rn(acc, red[p * 2 * Ci + tid]);
      out[tid] = tid < Ci ? rnd<T>(tanhf(acc)) : rnd<T>(acc);
    }
  } else {
    const float *w2 = (wstage & 2) ? w2s : lv.w2t;
    for (int j = tid; j < 2 * Ci; j += nt) {
      float acc = cst[12 * C4 + j];
#pragma unroll 16
      for (int c = 0; c < Ci; c++) acc = fmaf(w2[(int64_t)c * 2 * Ci + j], hs[c], acc);
      out[j] = j < Ci ? rnd<T>(tanhf(acc)) : rnd<T>(acc);
    }
  }
}

#endif /* APX_CUDA_FF_REFINE_SCAN_CUH */
