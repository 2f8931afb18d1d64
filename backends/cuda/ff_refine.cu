/* cuda backend: one tile level of the FF path (docs/ff_infer.md "One
 * level", steps 1-9) and the pixels outside every tile.
 *
 * Per level, four kernels over the K selected tiles of each batch row:
 *   tokens     the mean of each tile's channel (a warp a channel);
 *   scan_film  a block a token: the bidirectional scan of its row up to
 *              it from both ends (forward and backward chains and the gated
 *              merge in one pass over the row's tokens), then LayerNorm,
 *              Linear C->C, SiLU, Linear C->2C, tanh: (gamma, beta);
 *   conv       a block a chunk of CUDA_FF_CHUNK pixels of a tile: FiLM on
 *              load, the depthwise 3x3 (zero outside the tile) into shared
 *              memory, the pointwise conv C->2C (fp32 FMA, a register tile
 *              of 8 outputs x 4 pixels a thread) into scratch, and the
 *              chunk's (count, mean, M2) for the GroupNorm;
 *   store      a block a chunk: the tile's mean and variance (Chan's merge of
 *              the chunks), GroupNorm, ReGLU, the residual, the fusion gate
 *              (alpha from the proxies inline) and the stores of heavy and
 *              detail. Tiles are unique in a row, so the override unpack is
 *              a plain write.
 * On sm_90, conv and store are one kernel, a cluster a tile: ff_fused_kernel,
 * or ff_tc_kernel for the default tiles of f16/bf16 frames (which at level 0
 * also writes level 1's tokens: no tokens kernel there).
 * Tokens, scan_film and the fused refine are launched programmatically
 * after the kernel before (cuda_launch_after; sm_90, $APEXX_CUDA_PDL). The
 * tokens kernel lets its successor start at its top; scan_film and the
 * refine after their wait, so that a refine block starts only once every
 * kernel before the scan launch is complete: ff_tc_kernel reads the ids,
 * tile states and its X (level 1: level 0's output) before its own wait,
 * and only FiLM after it. Each kernel loads its weights (scan_film: all of
 * them, into shared memory) before cuda_wait_prerequisites and reads what
 * earlier kernels of the frame wrote through L2 (__ldcg).
 * Values the definition rounds (rnd) are rounded here at the same points;
 * the sums run in fp32 in another order than the cpu backend's. */
#include "cuda_ff.h"

#include <cooperative_groups.h>

template <typename T> static __device__ __forceinline__ float rnd(float v) {
  return cuda_dt<T>::to_f(cuda_dt<T>::from_f(v));
}

static __device__ __forceinline__ float ff_sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. */
static __device__ float ff_block_sum(float v, float *sh32) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh32[w] = v;
  __syncthreads();
  float t = 0.0f;
  for (int i = 0; i < nw; i++) t += sh32[i];
  return t;
}

/* ---- fusion gate (5.B) ----------------------------------------------------- */

template <typename T>
static __device__ __forceinline__ float ff_proxy(const void *p, int dt, int64_t i) {
  if (!p) return 1.0f;
  float v = rnd<T>(cuda_load_any(p, dt, i));
  if (v != v) return 0.0f;
  if (isinf(v)) return v > 0 ? 1.0f : 0.0f;
  return v;
}

template <typename T>
static __device__ __forceinline__ float ff_alpha(float bp, float up, float wb, float wu,
                                                 float gb) {
  float z = __fadd_rn(__fadd_rn(__fmul_rn(wb, bp), __fmul_rn(wu, up)), gb);
  return rnd<T>(ff_sigmoid(z));
}

/* heavy = X + alpha*(U - X), fp32, rounded once (decision 3) */
template <typename T>
static __device__ __forceinline__ float ff_fuse(float x, float u, float a) {
  return rnd<T>(__fadd_rn(x, __fmul_rn(a, __fsub_rn(u, x))));
}

struct ff_geom {
  int64_t B, C, H, W, t, gw, K, kstride;
  const int *ids;
  int64_t tok_G; /* > 0: tok holds every tile of a row, [B,tok_G,C] by id;
                    0: [B,K,C] by position */
};

/* ---- pixels outside every L0 tile; alpha everywhere ---------------------------- */

#define FF_OUT_CPB 16 /* channels a work item */

struct ff_outside_args {
  const void *X;
  void *heavy, *detail, *alpha;
  int64_t C, H, W, t0, gw0, G0;
  const int *tile_state;
  const void *bp, *up;
  int bp_dt, up_dt;
  float wb0, wu0, gb0, wb1, wu1, gb1;
  int two;
  int early; /* the launch's outside blocks need nothing from the kernel before
                it (which lets the launch start only after its own wait: the
                routing is complete): they skip the wait */
};

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

#define FF_SF_THREADS 512

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
  /* a thread a (direction, channel): forward into xs, backward into hs */
  for (int64_t e = threadIdx.x; e < 2 * C; e += blockDim.x) {
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
    float m = rnd<T>(__fadd_rn(rnd<T>(__fmul_rn(gg, xs[c])),
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

#ifdef APEXX_FF_TIMELINE
FF_TL_HOST(cuda_ff_tl_refine)
#endif

/* ---- refine: FiLM, depthwise, pointwise, chunk statistics --------------------- */

#define FF_TO 8 /* outputs a thread */
#define FF_TP 4 /* pixels a thread */

template <typename T>
__global__ void __launch_bounds__(256)
ff_conv_kernel(const T *__restrict__ X, ff_geom g, cuda_ff_level lv,
               const float *__restrict__ film, float *__restrict__ pout,
               float *__restrict__ partials) {
  extern __shared__ float ff_dw_sh[]; /* [C][CHUNK] */
  __shared__ float sh32[32];
  const int chunk = blockIdx.x;
  const int64_t k = blockIdx.y, b = blockIdx.z, C = g.C, t = g.t, tt = t * t;
  const int nch = (int)((tt + CUDA_FF_CHUNK - 1) / CUDA_FF_CHUNK);
  const int id = g.ids[b * g.kstride + k];
  const int64_t ty = id / g.gw, tx = id % g.gw;
  const float *gam = film + (b * g.K + k) * 2 * C, *bet = gam + C;
  const int64_t px0 = (int64_t)chunk * CUDA_FF_CHUNK;
  /* depthwise 3x3 of m = (1 + gamma) X + beta, zero outside the tile */
  for (int64_t e = threadIdx.x; e < C * CUDA_FF_CHUNK; e += blockDim.x) {
    const int64_t c = e / CUDA_FF_CHUNK, q = e % CUDA_FF_CHUNK, px = px0 + q;
    float d = 0.0f;
    if (px < tt) {
      const int64_t y = px / t, x = px % t;
      const T *base = X + ((b * C + c) * g.H + ty * t) * g.W + tx * t;
      const float ga = 1.0f + gam[c], be = bet[c];
      d = lv.dwb[c];
      for (int i = 0; i < 3; i++) {
        const int64_t yy = y + i - 1;
        if (yy < 0 || yy >= t) continue;
        for (int j = 0; j < 3; j++) {
          const int64_t xx = x + j - 1;
          if (xx < 0 || xx >= t) continue;
          const float m = fmaf(ga, cuda_dt<T>::to_f(base[yy * g.W + xx]), be);
          d = fmaf(lv.dw[c * 9 + i * 3 + j], m, d);
        }
      }
    }
    ff_dw_sh[c * CUDA_FF_CHUNK + q] = d;
  }
  __syncthreads();
  const int og = threadIdx.x >> 3, pg = threadIdx.x & 7;
  const int valid_px = (int)(tt - px0 < CUDA_FF_CHUNK ? tt - px0 : CUDA_FF_CHUNK);
  float bn = 0.0f, bmean = 0.0f, bm2 = 0.0f; /* the block's running statistics */
  float *pbase = pout + (b * g.K + k) * 2 * C * tt;
  for (int64_t o0 = 0; o0 < 2 * C; o0 += 32 * FF_TO) {
    float acc[FF_TO][FF_TP];
    const int64_t ob = o0 + og * FF_TO;
#pragma unroll
    for (int i = 0; i < FF_TO; i++) {
      const float bias = ob + i < 2 * C ? lv.pwb[ob + i] : 0.0f;
#pragma unroll
      for (int j = 0; j < FF_TP; j++) acc[i][j] = bias;
    }
    if (ob < 2 * C) {
      const bool full = ob + FF_TO <= 2 * C && ((2 * C) & 3) == 0;
      for (int64_t c = 0; c < C; c++) {
        const float4 dv = *(const float4 *)&ff_dw_sh[c * CUDA_FF_CHUNK + pg * FF_TP];
        float w[FF_TO];
        const float *wr = lv.pwt + c * 2 * C + ob;
        if (full) {
          const float4 w0 = __ldg((const float4 *)wr), w1 = __ldg((const float4 *)(wr + 4));
          w[0] = w0.x; w[1] = w0.y; w[2] = w0.z; w[3] = w0.w;
          w[4] = w1.x; w[5] = w1.y; w[6] = w1.z; w[7] = w1.w;
        } else {
#pragma unroll
          for (int i = 0; i < FF_TO; i++) w[i] = ob + i < 2 * C ? __ldg(wr + i) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < FF_TO; i++) {
          acc[i][0] = fmaf(w[i], dv.x, acc[i][0]);
          acc[i][1] = fmaf(w[i], dv.y, acc[i][1]);
          acc[i][2] = fmaf(w[i], dv.z, acc[i][2]);
          acc[i][3] = fmaf(w[i], dv.w, acc[i][3]);
        }
      }
    }
    /* this pass's values: store, then (count, mean, M2) merged into the block's */
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < FF_TO; i++)
#pragma unroll
      for (int j = 0; j < FF_TP; j++) {
        const int q = pg * FF_TP + j;
        if (ob + i < 2 * C && q < valid_px) {
          pbase[(ob + i) * tt + px0 + q] = acc[i][j];
          s += acc[i][j];
        }
      }
    const int64_t o_end = o0 + 32 * FF_TO < 2 * C ? o0 + 32 * FF_TO : 2 * C;
    const float pn = (float)((o_end - o0) * valid_px);
    const float pmean = ff_block_sum(s, sh32) / pn;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < FF_TO; i++)
#pragma unroll
      for (int j = 0; j < FF_TP; j++) {
        const int q = pg * FF_TP + j;
        if (ob + i < 2 * C && q < valid_px) {
          const float dv = acc[i][j] - pmean;
          m2 += dv * dv;
        }
      }
    const float pm2 = ff_block_sum(m2, sh32);
    const float nn = bn + pn, delta = pmean - bmean;
    bmean += delta * pn / nn;
    bm2 += pm2 + delta * delta * bn * pn / nn;
    bn = nn;
  }
  if (threadIdx.x == 0) {
    float *pp = partials + ((b * g.K + k) * nch + chunk) * 3;
    pp[0] = bn;
    pp[1] = bmean;
    pp[2] = bm2;
  }
}

/* ---- GroupNorm, ReGLU, residual, fusion gate, stores --------------------------- */

struct ff_store_args {
  const void *X;       /* the level's input */
  void *heavy, *detail;
  const void *bp, *up;
  int bp_dt, up_dt;
  int mode;            /* CUDA_FF_STORE_* */
  float wb0, wu0, gb0; /* this level's gate */
  float wb1, wu1, gb1; /* level 1's gate (mode L0) */
  const int *tile_state;
  int64_t G0, gw0;
  /* level 0 of two on the tensor-core refine with tiles of 16 (ff_tc_kernel):
   * level 1's tokens, [B,4*G0,C] by level-1 tile id, written from each
   * parent tile's output; NULL: level 1 has its own tokens kernel */
  float *tok1;
};

template <typename T>
__global__ void __launch_bounds__(256)
ff_store_kernel(ff_geom g, cuda_ff_level lv, const float *__restrict__ film,
                const float *__restrict__ pin, const float *__restrict__ partials,
                ff_store_args a) {
  cuda_allow_dependents();
  __shared__ float s_mean, s_rstd;
  const int chunk = blockIdx.x;
  const int64_t k = blockIdx.y, b = blockIdx.z, C = g.C, t = g.t, tt = t * t;
  const int nch = (int)((tt + CUDA_FF_CHUNK - 1) / CUDA_FF_CHUNK);
  const int id = g.ids[b * g.kstride + k];
  const int64_t ty = id / g.gw, tx = id % g.gw;
  if (threadIdx.x == 0) {
    const float *pp = partials + (b * g.K + k) * nch * 3;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int i = 0; i < nch; i++) {
      const float pn = pp[3 * i], pmean = pp[3 * i + 1], pm2 = pp[3 * i + 2];
      const float nn = n + pn, delta = pmean - mean;
      mean += delta * pn / nn;
      m2 += pm2 + delta * delta * n * pn / nn;
      n = nn;
    }
    s_mean = mean;
    s_rstd = 1.0f / sqrtf(m2 / n + 1e-5f);
  }
  __syncthreads();
  const float mean = s_mean, rstd = s_rstd;
  const float *gam = film + (b * g.K + k) * 2 * C, *bet = gam + C;
  const float *pb = pin + (b * g.K + k) * 2 * C * tt;
  const int64_t px0 = (int64_t)chunk * CUDA_FF_CHUNK;
  const T *X = (const T *)a.X;
  T *heavy = (T *)a.heavy, *detail = (T *)a.detail;
  for (int64_t e = threadIdx.x; e < C * CUDA_FF_CHUNK; e += blockDim.x) {
    const int64_t c = e / CUDA_FF_CHUNK, q = e % CUDA_FF_CHUNK, px = px0 + q;
    if (px >= tt) continue;
    const int64_t y = ty * t + px / t, x = tx * t + px % t;
    const int64_t pix = (b * g.H + y) * g.W + x;
    const int64_t off = ((b * C + c) * g.H + y) * g.W + x;
    const float na = (pb[c * tt + px] - mean) * rstd * lv.nw[c] + lv.nb[c];
    const float nb = (pb[(C + c) * tt + px] - mean) * rstd * lv.nw[C + c] + lv.nb[C + c];
    const float xv = cuda_dt<T>::to_f(X[off]);
    const float m = fmaf(1.0f + gam[c], xv, bet[c]);
    const float r = rnd<T>(fmaf(na, fmaxf(nb, 0.0f), m));
    const float bpv = ff_proxy<T>(a.bp, a.bp_dt, pix), upv = ff_proxy<T>(a.up, a.up_dt, pix);
    const float h = ff_fuse<T>(xv, r, ff_alpha<T>(bpv, upv, a.wb0, a.wu0, a.gb0));
    if (a.mode == CUDA_FF_STORE_L0) {
      if (a.tile_state[b * a.G0 + id] == CUDA_FF_TILE_PARENT) {
        detail[off] = cuda_dt<T>::from_f(h); /* level 1's input */
      } else {
        const float h1 = ff_fuse<T>(h, h, ff_alpha<T>(bpv, upv, a.wb1, a.wu1, a.gb1));
        heavy[off] = cuda_dt<T>::from_f(h1);
        detail[off] = cuda_dt<T>::from_f(rnd<T>(__fsub_rn(h1, h)));
      }
    } else {
      heavy[off] = cuda_dt<T>::from_f(h);
      detail[off] = cuda_dt<T>::from_f(rnd<T>(__fsub_rn(h, xv)));
    }
  }
}

/* ---- the whole refine of a tile in one cluster (sm_90) --------------------------- */

/* A cluster per tile, a block per FF_CW consecutive pixels of it (the
 * tile's row-major order): the tile's input rows around them (fp32) in
 * shared memory, FiLM and the depthwise 3x3, the pointwise conv into shared
 * memory (f16/bf16 frames with C % 16 == 0: tensor cores, ff_pw_mma; else
 * fp32 FMA, a register tile of CW/4 outputs x 4 pixels a thread),
 * the tile's GroupNorm mean and variance (two passes, each block's sum
 * exchanged through distributed shared memory), then GroupNorm, ReGLU, the
 * residual, the fusion gate and the stores. The pointwise output never
 * leaves the chip. */
#define FF_FUSED_THREADS 256

/* rows of the tile a block of cw pixels reads (its own and the halo) */
static __host__ __device__ inline int ff_fused_rows(int t, int cw) {
  const int own = cw % t == 0 ? cw / t : (cw - 1) / t + 2;
  return own + 2 < t ? own + 2 : t;
}

/* input channels of the pointwise weights staged in shared memory at once */
#define FF_KC 8

/* The depthwise output's row stride in the tensor-core layout (uint32
 * words of two channels): 8 words of padding make a B fragment's 32 loads
 * hit 32 banks. */
#define FF_DS_PAD 8

/* floats of the fused kernel's dynamic shared memory */
static __host__ __device__ inline int64_t ff_fused_floats(int64_t C, int t, int cw) {
  const int64_t xs = (C * ff_fused_rows(t, cw) * t + 3) & ~(int64_t)3;
  return xs + C * (cw + FF_DS_PAD) + 2 * C * cw + FF_KC * 2 * C + 16 * C;
}

static __device__ __forceinline__ void ff_mma_bf16(float (&c)[4], const uint32_t a0,
                                                   const uint32_t a1, const uint32_t a2,
                                                   const uint32_t a3, const uint32_t b0,
                                                   const uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* d as bf16 hi + lo (hi = bf16(d), lo = bf16(d - hi); lo = 0 where hi is
 * not finite) */
static __device__ __forceinline__ void ff_split_bf16(float d, __nv_bfloat16 &hi,
                                                     __nv_bfloat16 &lo) {
  hi = __float2bfloat16_rn(d);
  const float h = __bfloat162float(hi);
  lo = __float2bfloat16_rn(isfinite(h) ? d - h : 0.0f);
}

/* A warp's A fragments (hi, lo) of row tile mt, k steps k0..k0+7 (those
 * below KT) */
static __device__ __forceinline__ void ff_pw_load(const uint4 *pwf, int mt, int k0, int KT,
                                                  uint4 (&ah)[8], uint4 (&al)[8]) {
  const uint4 *ap = pwf + ((size_t)mt * KT * 32 + (threadIdx.x & 31)) * 2;
#pragma unroll
  for (int i = 0; i < 8; i++)
    if (k0 + i < KT) {
      ah[i] = __ldg(ap + (k0 + i) * 64);
      al[i] = __ldg(ap + (k0 + i) * 64 + 1);
    }
}

/* The pointwise conv of a block's CW pixels on tensor cores:
 * ps[o*PSS + q] = pwb[o] + sum_c W[o][c] d[c][q], each product as
 * W_lo d_hi + W_hi d_lo + W_hi d_hi (bf16 x bf16, exact in fp32; what it
 * leaves out, W_lo d_lo and the splits' remainders, is below 3 * 2^-16 of
 * |W d|), the sum in the fp32 accumulators (mma.m16n8k16). A warp a 16-row
 * tile of outputs at a time, all CW pixels; its A fragments straight from
 * the prepared copy (lv.pwf), 8 k steps in flight (the next chunk's loaded
 * while this one runs); ah, al hold the warp's first 8 (ff_pw_load of row
 * tile warp, k0 0, loaded early). dh,
 * dl: [C/2][CW + FF_DS_PAD] words, word (c/2, q) holds channels c, c+1 of
 * pixel q. Returns the sum of the thread's outputs (all CW pixels). */
template <int CW, int PSS = CW>
static __device__ __forceinline__ float ff_pw_mma(const cuda_ff_level &lv, int C,
                                                  const uint32_t *dh, const uint32_t *dl,
                                                  float *ps, uint4 (&ah)[8], uint4 (&al)[8]) {
  constexpr int NT = CW / 8, DS = CW + FF_DS_PAD;
  float sum = 0.0f;
  const int warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, tq = lane & 3, KT = C / 16, MT = C / 8;
  for (int mt = warp; mt < MT; mt += nwarp) {
    float acc[NT][4];
    const float bias0 = __ldg(lv.pwb + mt * 16 + gq), bias1 = __ldg(lv.pwb + mt * 16 + gq + 8);
#pragma unroll
    for (int n = 0; n < NT; n++) {
      acc[n][0] = acc[n][1] = bias0;
      acc[n][2] = acc[n][3] = bias1;
    }
    for (int k0 = 0; k0 < KT; k0 += 8) {
      /* the warp's next chunk of 8 k steps: its fragment i loaded into
       * slot i as soon as this chunk's step i has used it */
      const int nk = k0 + 8 < KT ? k0 + 8 : 0, nm = k0 + 8 < KT ? mt : mt + nwarp;
      const uint4 *np = lv.pwf + ((size_t)nm * KT * 32 + lane) * 2;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        if (k0 + i < KT) {
          const int r0 = ((k0 + i) * 8 + tq) * DS + gq, r1 = r0 + 4 * DS;
#pragma unroll
          for (int n = 0; n < NT; n++) {
            const uint32_t bh0 = dh[r0 + n * 8], bh1 = dh[r1 + n * 8];
            const uint32_t bl0 = dl[r0 + n * 8], bl1 = dl[r1 + n * 8];
            ff_mma_bf16(acc[n], al[i].x, al[i].y, al[i].z, al[i].w, bh0, bh1);
            ff_mma_bf16(acc[n], ah[i].x, ah[i].y, ah[i].z, ah[i].w, bl0, bl1);
            ff_mma_bf16(acc[n], ah[i].x, ah[i].y, ah[i].z, ah[i].w, bh0, bh1);
          }
        }
        if (nm < MT && nk + i < KT) {
          ah[i] = __ldg(np + (nk + i) * 64);
          al[i] = __ldg(np + (nk + i) * 64 + 1);
        }
      }
    }
    float *o0 = ps + (mt * 16 + gq) * PSS + 2 * tq, *o1 = o0 + 8 * PSS;
#pragma unroll
    for (int n = 0; n < NT; n++) {
      *(float2 *)(o0 + n * 8) = make_float2(acc[n][0], acc[n][1]);
      *(float2 *)(o1 + n * 8) = make_float2(acc[n][2], acc[n][3]);
      sum += (acc[n][0] + acc[n][1]) + (acc[n][2] + acc[n][3]);
    }
  }
  return sum;
}

/* TT: the tile size where the launch fixes it (the index arithmetic by
 * constants), 0: g.t */
template <typename T, int CW, int TT>
__global__ void __launch_bounds__(FF_FUSED_THREADS, 2)
ff_fused_kernel(const T *X, ff_geom g, cuda_ff_level lv, const float *film, ff_store_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cuda_allow_dependents();
  FF_TL((TT ? TT : (int)g.t) == 8 ? FF_TL_REFINE1 : FF_TL_REFINE0);
  cg::cluster_group cl = cg::this_cluster();
  constexpr int TP = 4, NPG = CW / TP, NOG = FF_FUSED_THREADS / NPG, TO = NPG;
  extern __shared__ float4 ff_fused_sh4[];
  float *sm = (float *)ff_fused_sh4;
  __shared__ float sh32[32];
  __shared__ float cred[2];
  __shared__ float alp[2][CW];
  const int C = (int)g.C, t = TT ? TT : (int)g.t, tt = t * t, R = ff_fused_rows(t, CW);
  const int C2 = 2 * C, tid = threadIdx.x, nt = FF_FUSED_THREADS;
  const int S = (int)cl.num_blocks(), rank = (int)cl.block_rank();
  const int64_t k = blockIdx.y, b = blockIdx.z;
  const int p0 = rank * CW;
  /* valid pixels of the block: all where CW divides the tile */
  const int nv = TT && TT * TT % CW == 0 ? CW : tt - p0 < CW ? tt - p0 : CW;
  float *xs = sm;                          /* [C][R*t]: X at rows row0..row1 of the tile */
  /* depthwise output: [C][CW] (FMA), or bf16 hi and lo words [C/2][CW +
   * FF_DS_PAD] each (tensor cores) */
  float *ds = xs + ((C * R * t + 3) & ~3);
  float *ps = ds + C * (CW + FF_DS_PAD);   /* [2C][CW]: pointwise output */
  float *ws = ps + C2 * CW;                /* [FF_KC][2C]: pointwise weights */
  float *dwt = ws + FF_KC * C2;            /* [C][9] depthwise weights */
  float *dwb = dwt + 9 * C, *ga = dwb + C, *be = ga + C; /* [C] each */
  float *nw = be + C, *nb = nw + C2;       /* [2C] each */
  /* the weights (constant): before the wait for the kernels before */
  for (int e = tid; e < 9 * C; e += nt) dwt[e] = lv.dw[e];
  for (int e = tid; e < C2; e += nt) {
    nw[e] = lv.nw[e];
    nb[e] = lv.nb[e];
  }
  for (int c = tid; c < C; c += nt) dwb[c] = lv.dwb[c];
  /* the tensor-core pointwise: the warp's first A fragments (constant)
   * in flight from here on */
  const bool tc = lv.pwf != nullptr;
  uint4 ah[8], al[8];
  if (tc && tid / 32 < C / 8) ff_pw_load(lv.pwf, tid / 32, 0, C / 16, ah, al);
  /* (cuda_launch_after) the routing, FiLM and (level 1) X come from the
   * kernels before: read through L2 after their completion */
  cuda_wait_prerequisites();
  FF_TL_WAITED();
  const int id = __ldcg(g.ids + b * g.kstride + k);
  const int ty = id / (int)g.gw, tx = id % (int)g.gw;
  const int row0 = p0 / t - 1 > 0 ? p0 / t - 1 : 0;
  const int row1 = (p0 + nv - 1) / t + 1 < t - 1 ? (p0 + nv - 1) / t + 1 : t - 1;
  const int nrt = (row1 - row0 + 1) * t;
  const float *gam = film + (b * g.K + k) * 2 * C, *bet = gam + C;
  const int64_t HW = g.H * g.W;
  const int64_t y0 = (int64_t)ty * t, x0 = (int64_t)tx * t;
  const T *xb = X + b * g.C * HW + y0 * g.W + x0;
  for (int c = tid; c < C; c += nt) {
    ga[c] = 1.0f + __ldcg(gam + c);
    be[c] = __ldcg(bet + c);
  }
  /* over R rows a channel (a constant stride with TT), those past row1
   * skipped */
  const int RT = R * t;
#pragma unroll 16
  for (int e = tid; e < C * RT; e += nt) {
    const int c = e / RT, q = e - c * RT;
    if (q < nrt)
      xs[c * RT + q] =
          cuda_dt<T>::to_f(__ldcg(xb + (int64_t)c * HW + (int64_t)(row0 + q / t) * g.W + q % t));
  }
  const int stm =
      a.mode == CUDA_FF_STORE_L0 ? __ldcg(a.tile_state + b * a.G0 + id) : CUDA_FF_TILE_L0;
  if (tid < nv) { /* the gate of each pixel: level 0's and level 1's */
    const int px = p0 + tid;
    const int64_t pix = b * HW + (y0 + px / t) * g.W + x0 + px % t;
    const float bpv = ff_proxy<T>(a.bp, a.bp_dt, pix), upv = ff_proxy<T>(a.up, a.up_dt, pix);
    alp[0][tid] = ff_alpha<T>(bpv, upv, a.wb0, a.wu0, a.gb0);
    alp[1][tid] = ff_alpha<T>(bpv, upv, a.wb1, a.wu1, a.gb1);
  }
  __syncthreads();
  __nv_bfloat16 *dsh = (__nv_bfloat16 *)ds, *dsl = dsh + C * (CW + FF_DS_PAD);
  /* depthwise 3x3 of m = (1 + gamma) X + beta, zero outside the tile */
#pragma unroll 4
  for (int e = tid; e < C * CW; e += nt) {
    const int c = e / CW, q = e - c * CW;
    float d = 0.0f;
    if (q < nv) {
      const int px = p0 + q, y = px / t, x = px % t;
      const float gc = ga[c], bc = be[c];
      const float *xr = xs + c * R * t, *wc = dwt + 9 * c;
      d = dwb[c];
#pragma unroll
      for (int i = 0; i < 3; i++) {
        const int yy = y + i - 1;
        if (yy < 0 || yy >= t) continue;
#pragma unroll
        for (int j = 0; j < 3; j++) {
          const int xx = x + j - 1;
          if (xx < 0 || xx >= t) continue;
          const float m = fmaf(gc, xr[(yy - row0) * t + xx], bc);
          d = fmaf(wc[i * 3 + j], m, d);
        }
      }
    }
    if (tc) {
      const int w = ((c >> 1) * (CW + FF_DS_PAD) + q) * 2 + (c & 1);
      ff_split_bf16(d, dsh[w], dsl[w]);
    } else {
      ds[e] = d;
    }
  }
  if (tc) {
    __syncthreads(); /* ds written */
    (void)ff_pw_mma<CW>(lv, C, (const uint32_t *)dsh, (const uint32_t *)dsl, ps, ah, al);
  }
  /* else: pointwise C -> 2C, the weights staged FF_KC input channels at a
   * time */
  const int og = tid / NPG, pg = tid % NPG;
  const bool vec = (C2 & 3) == 0;
  for (int o0 = 0; !tc && o0 < C2; o0 += NOG * TO) {
    const int ob = o0 + og * TO;
    const bool mine = ob < C2, full = vec && ob + TO <= C2;
    float acc[TO][TP];
#pragma unroll
    for (int i = 0; i < TO; i++) {
      const float bias = ob + i < C2 ? lv.pwb[ob + i] : 0.0f;
#pragma unroll
      for (int j = 0; j < TP; j++) acc[i][j] = bias;
    }
    for (int c0 = 0; c0 < C; c0 += FF_KC) {
      const int kc = C - c0 < FF_KC ? C - c0 : FF_KC;
      const float *src = lv.pwt + (int64_t)c0 * C2;
      __syncthreads(); /* ds written; the previous chunk consumed */
      if (vec) {
        for (int e = tid; e < kc * C2 / 4; e += nt)
          ((float4 *)ws)[e] = __ldg((const float4 *)src + e);
      } else {
        for (int e = tid; e < kc * C2; e += nt) ws[e] = __ldg(src + e);
      }
      __syncthreads();
      if (!mine) continue;
#pragma unroll 2
      for (int cc = 0; cc < kc; cc++) {
        const float4 dv = *(const float4 *)&ds[(c0 + cc) * CW + pg * TP];
        const float *wr = ws + cc * C2 + ob;
        float w[TO];
        if (full) {
#pragma unroll
          for (int i = 0; i < TO; i += 4) {
            const float4 w4 = *(const float4 *)(wr + i);
            w[i] = w4.x;
            w[i + 1] = w4.y;
            w[i + 2] = w4.z;
            w[i + 3] = w4.w;
          }
        } else {
#pragma unroll
          for (int i = 0; i < TO; i++) w[i] = ob + i < C2 ? wr[i] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < TO; i++) {
          acc[i][0] = fmaf(w[i], dv.x, acc[i][0]);
          acc[i][1] = fmaf(w[i], dv.y, acc[i][1]);
          acc[i][2] = fmaf(w[i], dv.z, acc[i][2]);
          acc[i][3] = fmaf(w[i], dv.w, acc[i][3]);
        }
      }
    }
    if (mine) {
#pragma unroll
      for (int i = 0; i < TO; i++)
        if (ob + i < C2)
          *(float4 *)&ps[(ob + i) * CW + pg * TP] =
              make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
  }
  __syncthreads();
  /* GroupNorm over the tile: the mean, then the mean of the squared
   * deviations; each block's sum through the cluster, added in rank order */
  const float n_all = (float)C2 * (float)tt;
  float s = 0.0f;
#pragma unroll 4
  for (int e = tid; e < C2 * nv; e += nt) {
    const int o = e / nv, q = e - o * nv;
    s += ps[o * CW + q];
  }
  s = ff_block_sum(s, sh32);
  if (tid == 0) cred[0] = s;
  cl.sync();
  float tot = 0.0f;
  for (int i = 0; i < S; i++) tot += *cl.map_shared_rank(&cred[0], i);
  const float mean = tot / n_all;
  float m2 = 0.0f;
#pragma unroll 4
  for (int e = tid; e < C2 * nv; e += nt) {
    const int o = e / nv, q = e - o * nv;
    const float dv = ps[o * CW + q] - mean;
    m2 += dv * dv;
  }
  m2 = ff_block_sum(m2, sh32);
  if (tid == 0) cred[1] = m2;
  cl.sync();
  tot = 0.0f;
  for (int i = 0; i < S; i++) tot += *cl.map_shared_rank(&cred[1], i);
  const float rstd = 1.0f / sqrtf(tot / n_all + 1e-5f);
  /* ReGLU, residual, fusion gate, stores */
  T *heavy = (T *)a.heavy, *detail = (T *)a.detail;
#pragma unroll 2
  for (int e = tid; e < C * nv; e += nt) {
    const int c = e / nv, q = e - c * nv, px = p0 + q, y = px / t, x = px % t;
    const int64_t off = ((b * g.C + c) * g.H + y0 + y) * g.W + x0 + x;
    const float na = (ps[c * CW + q] - mean) * rstd * nw[c] + nb[c];
    const float nbv = (ps[(C + c) * CW + q] - mean) * rstd * nw[C + c] + nb[C + c];
    const float xv = xs[c * R * t + (y - row0) * t + x];
    const float m = fmaf(ga[c], xv, be[c]);
    const float r = rnd<T>(fmaf(na, fmaxf(nbv, 0.0f), m));
    const float h = ff_fuse<T>(xv, r, alp[0][q]);
    if (a.mode == CUDA_FF_STORE_L0) {
      if (stm == CUDA_FF_TILE_PARENT) {
        detail[off] = cuda_dt<T>::from_f(h); /* level 1's input */
      } else {
        const float h1 = ff_fuse<T>(h, h, alp[1][q]);
        heavy[off] = cuda_dt<T>::from_f(h1);
        detail[off] = cuda_dt<T>::from_f(rnd<T>(__fsub_rn(h1, h)));
      }
    } else {
      heavy[off] = cuda_dt<T>::from_f(h);
      detail[off] = cuda_dt<T>::from_f(rnd<T>(__fsub_rn(h, xv)));
    }
  }
  cl.sync(); /* no block leaves while another may read its cred */
#else
  (void)X; (void)g; (void)lv; (void)film; (void)a;
  __trap();
#endif
}

/* ---- the fused refine of the default tiles on tensor cores (sm_90) ------------------ */

/* ff_fused_kernel's arithmetic for the tile sizes the launch fixes (TT 16
 * with 32-pixel blocks, TT 8 with 16: CW a multiple of TT, every pixel of a
 * block inside the tile), f16/bf16 frames with C % 16 == 0 and X, heavy and
 * detail 16-byte aligned, laid out for fewer instructions a warp:
 *  - X's rows by 16-byte loads (8 values), into [C][XS] fp32 rows;
 *  - the depthwise a thread a (channel, 8 pixels of a row): the three input
 *    rows' 10 values of m in registers, the taps in the definition's order
 *    (those outside the tile left out);
 *  - the pointwise on tensor cores (ff_pw_mma), its output rows PSS floats
 *    apart (conflict-free stores and row reads);
 *  - the GroupNorm statistics: each block's mean (the sum of the mma's
 *    accumulators) and sum of squared deviations from it (a second pass),
 *    merged over the cluster in rank order by Chan's formula, one exchange;
 *  - the epilogue a thread a (channel, 8 pixels of a row), 16-byte stores.
 * Level 0 of two with tiles of 16 (a.tok1): each parent tile also writes
 * level 1's tokens, the means of its four 8x8 quadrants of the output (the
 * values level 1 reads): each block's sums of its rows' halves pushed to
 * the quadrant's block through distributed shared memory, added there in
 * order. */
template <int CW, int TT> struct ff_tc_geom {
  static_assert(CW % TT == 0 && (TT * TT) % CW == 0 && TT % 8 == 0, "tc refine tiles");
  static constexpr int OWN = CW / TT;                         /* rows a block owns */
  static constexpr int R = OWN + 2 < TT ? OWN + 2 : TT;       /* with the halo */
  static constexpr int VR = TT / 8;                           /* 8-value runs a row */
  static constexpr int XS = R * TT + 4;                       /* xs row stride */
  static constexpr int PSS = CW + 8;                          /* ps row stride */
  static constexpr int DS = CW + FF_DS_PAD;                   /* depthwise word stride */
};

/* floats of ff_tc_kernel's dynamic shared memory */
template <int CW, int TT> static inline int64_t ff_tc_floats(int64_t C) {
  typedef ff_tc_geom<CW, TT> G;
  return C * G::XS + C * G::DS + 2 * C * G::PSS + 16 * C + 8 * C;
}

template <typename T> static __device__ __forceinline__ float ff_bits_f(unsigned u);
template <> __device__ __forceinline__ float ff_bits_f<__half>(unsigned u) {
  return __half2float(__ushort_as_half((unsigned short)u));
}
template <> __device__ __forceinline__ float ff_bits_f<__nv_bfloat16>(unsigned u) {
  return __bfloat162float(__ushort_as_bfloat16((unsigned short)u));
}
template <typename T> static __device__ __forceinline__ unsigned ff_f_bits(float v);
template <> __device__ __forceinline__ unsigned ff_f_bits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ unsigned ff_f_bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* 8 values of a 2-byte T at p (16-byte aligned), through L2 */
template <typename T>
static __device__ __forceinline__ void ff_load8(const T *p, float (&f)[8]) {
  const uint4 v = __ldcg((const uint4 *)p);
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = ff_bits_f<T>(w[i] & 0xffffu);
    f[2 * i + 1] = ff_bits_f<T>(w[i] >> 16);
  }
}

template <typename T>
static __device__ __forceinline__ void ff_store8(T *p, const float (&f)[8]) {
  uint4 v;
  v.x = ff_f_bits<T>(f[0]) | ff_f_bits<T>(f[1]) << 16;
  v.y = ff_f_bits<T>(f[2]) | ff_f_bits<T>(f[3]) << 16;
  v.z = ff_f_bits<T>(f[4]) | ff_f_bits<T>(f[5]) << 16;
  v.w = ff_f_bits<T>(f[6]) | ff_f_bits<T>(f[7]) << 16;
  *(uint4 *)p = v;
}

static __device__ __forceinline__ void ff_read8(const float *p, float (&f)[8]) {
  const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

/* ff_proxy in two steps: the bits of element i of a proxy (0 where it is
 * absent), loaded without using them; then its value as ff_proxy has it */
static __device__ __forceinline__ uint32_t ff_proxy_bits(const void *p, int dt, int64_t i) {
  if (!p) return 0;
  if (dt == APX_DTYPE_F16 || dt == APX_DTYPE_BF16) return __ldg((const unsigned short *)p + i);
  return __ldg((const unsigned *)p + i);
}
template <typename T>
static __device__ __forceinline__ float ff_proxy_of(bool present, int dt, uint32_t bits) {
  if (!present) return 1.0f;
  float v = dt == APX_DTYPE_F16    ? __half2float(__ushort_as_half((unsigned short)bits))
            : dt == APX_DTYPE_BF16 ? __bfloat162float(__ushort_as_bfloat16((unsigned short)bits))
                                   : __uint_as_float(bits);
  v = rnd<T>(v);
  if (v != v) return 0.0f;
  if (isinf(v)) return v > 0 ? 1.0f : 0.0f;
  return v;
}

static __device__ __forceinline__ void ff_cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
static __device__ __forceinline__ void ff_cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

template <typename T, int CW, int TT>
__global__ void __launch_bounds__(FF_FUSED_THREADS, 2)
ff_tc_kernel(const T *X, ff_geom g, cuda_ff_level lv, const float *film, ff_store_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  typedef ff_tc_geom<CW, TT> G;
  constexpr int OWN = G::OWN, R = G::R, VR = G::VR, XS = G::XS, PSS = G::PSS, DS = G::DS;
  constexpr int nt = FF_FUSED_THREADS;
  FF_TL(TT == 8 ? FF_TL_REFINE1 : FF_TL_REFINE0);
  cg::cluster_group cl = cg::this_cluster();
  extern __shared__ float4 ff_fused_sh4[];
  float *sm = (float *)ff_fused_sh4;
  __shared__ float sh32[32];
  __shared__ float cred[2];
  __shared__ float stat[2];
  __shared__ __align__(16) float alp[2][CW];
  const int C = (int)g.C, C2 = 2 * C, tid = threadIdx.x;
  const int S = (int)cl.num_blocks(), rank = (int)cl.block_rank();
  const int64_t k = blockIdx.y, b = blockIdx.z;
  const int p0 = rank * CW, yb = p0 / TT; /* the block's first row */
  float *xs = sm;                                         /* [C][XS] */
  uint32_t *dh = (uint32_t *)(xs + C * XS), *dl = dh + (C / 2) * DS; /* [C/2][DS] */
  float *ps = (float *)(dl + (C / 2) * DS);               /* [2C][PSS] */
  float *dwt = ps + C2 * PSS, *dwb = dwt + 9 * C, *ga = dwb + C, *be = ga + C;
  float *nw = be + C, *nb = nw + C2;
  float *tq = nb + C2;                                    /* [8][C] quadrant parts */
  /* the weights (constant): before the wait for the kernels before */
  for (int e = tid; e < 9 * C; e += nt) dwt[e] = lv.dw[e];
  for (int e = tid; e < C2; e += nt) {
    nw[e] = lv.nw[e];
    nb[e] = lv.nb[e];
  }
  for (int c = tid; c < C; c += nt) dwb[c] = lv.dwb[c];
  uint4 ah[8], al[8];
  if (tid / 32 < C / 8) ff_pw_load(lv.pwf, tid / 32, 0, C / 16, ah, al);
  /* The routing's ids and tile states and level 1's X (level 0's output)
   * come from kernels complete before this launch began (the scan/FiLM
   * launch before it lets it start after its own wait): read here, before
   * the wait, through L2 */
  const int id = __ldcg(g.ids + b * g.kstride + k);
  const int ty = id / (int)g.gw, tx = id % (int)g.gw;
  const int row0 = yb > 0 ? yb - 1 : 0;
  const int nrow = (yb + OWN < TT ? yb + OWN : TT - 1) - row0 + 1;
  const float *gam = film + (b * g.K + k) * 2 * C, *bet = gam + C;
  const int64_t HW = g.H * g.W, W = g.W;
  const int64_t y0 = (int64_t)ty * TT, x0 = (int64_t)tx * TT;
  /* the gate's proxies of the block's pixels: their bits loaded here, in
   * flight with X's */
  uint32_t bbits = 0, ubits = 0;
  if (tid < CW) {
    const int px = p0 + tid;
    const int64_t pix = b * HW + (y0 + px / TT) * W + x0 + px % TT;
    bbits = ff_proxy_bits(a.bp, a.bp_dt, pix);
    ubits = ff_proxy_bits(a.up, a.up_dt, pix);
  }
  const int stm =
      a.mode == CUDA_FF_STORE_L0 ? __ldcg(a.tile_state + b * a.G0 + id) : CUDA_FF_TILE_L0;
  /* X at rows row0.. of the tile, 8 values a load */
  const T *xb = X + b * g.C * HW + (y0 + row0) * W + x0;
#pragma unroll 4
  for (int e = tid; e < C * R * VR; e += nt) {
    const int c = e / (R * VR), rv = e - c * (R * VR), r = rv / VR, v = rv - r * VR;
    if (r < nrow) {
      float f[8];
      ff_load8<T>(xb + (int64_t)c * HW + (int64_t)r * W + v * 8, f);
      float *dst = xs + c * XS + r * TT + v * 8;
      *(float4 *)dst = make_float4(f[0], f[1], f[2], f[3]);
      *(float4 *)(dst + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
  }
  if (tid < CW) { /* the gate of each pixel: level 0's and level 1's */
    const float bpv = ff_proxy_of<T>(a.bp != nullptr, a.bp_dt, bbits);
    const float upv = ff_proxy_of<T>(a.up != nullptr, a.up_dt, ubits);
    alp[0][tid] = ff_alpha<T>(bpv, upv, a.wb0, a.wu0, a.gb0);
    alp[1][tid] = ff_alpha<T>(bpv, upv, a.wb1, a.wu1, a.gb1);
  }
  /* (cuda_launch_after) FiLM comes from the kernel before: read through L2
   * after its completion */
  cuda_wait_prerequisites();
  FF_TL_WAITED();
  /* the next launch may start only now (the routing complete: level 1's
   * scan launch runs its outside blocks beside this kernel, ff_outside_args
   * early) */
  cuda_allow_dependents();
  for (int c = tid; c < C; c += nt) {
    ga[c] = 1.0f + __ldcg(gam + c);
    be[c] = __ldcg(bet + c);
  }
  __syncthreads();
  FF_TL_PHASE(0);
  /* depthwise 3x3 of m = (1 + gamma) X + beta, zero outside the tile: a
   * thread a (channel, 8 pixels of a row) */
  __nv_bfloat16 *dsh = (__nv_bfloat16 *)dh, *dsl = (__nv_bfloat16 *)dl;
  for (int e = tid; e < C * OWN * VR; e += nt) {
    const int c = e / (OWN * VR), rv = e - c * (OWN * VR), r = rv / VR, xo = (rv - r * VR) * 8;
    const int y = yb + r;
    const float gc = ga[c], bc = be[c];
    const float *wc = dwt + 9 * c;
    float d[8];
    const float bias = dwb[c];
#pragma unroll
    for (int j = 0; j < 8; j++) d[j] = bias;
#pragma unroll
    for (int i = 0; i < 3; i++) {
      const int yy = y + i - 1;
      if (yy < 0 || yy >= TT) continue;
      const float *xr = xs + c * XS + (yy - row0) * TT + xo;
      float xv[8], m[10];
      ff_read8(xr, xv);
#pragma unroll
      for (int j = 0; j < 8; j++) m[j + 1] = fmaf(gc, xv[j], bc);
      m[0] = xo > 0 ? fmaf(gc, xr[-1], bc) : 0.0f;
      m[9] = xo + 8 < TT ? fmaf(gc, xr[8], bc) : 0.0f;
      const float w0 = wc[3 * i], w1 = wc[3 * i + 1], w2 = wc[3 * i + 2];
#pragma unroll
      for (int j = 0; j < 8; j++) {
        if (j > 0 || xo > 0) d[j] = fmaf(w0, m[j], d[j]);
        d[j] = fmaf(w1, m[j + 1], d[j]);
        if (j < 7 || xo + 8 < TT) d[j] = fmaf(w2, m[j + 2], d[j]);
      }
    }
    const int q0 = r * TT + xo;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int w = ((c >> 1) * DS + q0 + j) * 2 + (c & 1);
      ff_split_bf16(d[j], dsh[w], dsl[w]);
    }
  }
  __syncthreads(); /* dh, dl written */
  FF_TL_PHASE(1);
  float s = ff_pw_mma<CW, PSS>(lv, C, dh, dl, ps, ah, al);
  /* GroupNorm over the tile: this block's mean, then its sum of squared
   * deviations from it; merged over the cluster */
  const float nblk = (float)C2 * (float)CW;
  const float bmean = ff_block_sum(s, sh32) / nblk; /* (its barriers: ps written) */
  FF_TL_PHASE(2);
  float m2 = 0.0f;
#pragma unroll 4
  for (int e = tid; e < C2 * (CW / 4); e += nt) {
    const int o = e / (CW / 4), v = e - o * (CW / 4);
    const float4 p = *(const float4 *)(ps + o * PSS + v * 4);
    const float d0 = p.x - bmean, d1 = p.y - bmean, d2 = p.z - bmean, d3 = p.w - bmean;
    m2 += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
  }
  m2 = ff_block_sum(m2, sh32);
  if (tid == 0) {
    cred[0] = bmean;
    cred[1] = m2;
  }
  FF_TL_PHASE(3);
  cl.sync();
  if (tid < 32) { /* Chan's merge of the blocks' (mean, M2), in rank order */
    float rm = 0.0f, r2 = 0.0f;
    if (tid < S) {
      const float *rc = cl.map_shared_rank(cred, tid);
      rm = rc[0];
      r2 = rc[1];
    }
    float n = 0.0f, mean = 0.0f, M2 = 0.0f;
    for (int i = 0; i < S; i++) {
      const float pm = __shfl_sync(0xffffffffu, rm, i), pq = __shfl_sync(0xffffffffu, r2, i);
      const float nn = n + nblk, delta = pm - mean;
      mean += delta * nblk / nn;
      M2 += pq + delta * delta * n * nblk / nn;
      n = nn;
    }
    if (tid == 0) {
      stat[0] = mean;
      stat[1] = 1.0f / sqrtf(M2 / n + 1e-5f);
    }
  }
  __syncthreads();
  ff_cluster_arrive(); /* this block reads no other block's cred any more */
  FF_TL_PHASE(4);
  const float mean = stat[0], rstd = stat[1];
  /* ReGLU, residual, fusion gate, stores: a thread a (channel, 8 pixels of
   * a row) */
  T *heavy = (T *)a.heavy, *detail = (T *)a.detail;
  const bool parent = a.mode == CUDA_FF_STORE_L0 && stm == CUDA_FF_TILE_PARENT;
  const bool tok = TT == 16 && CW == 32 && parent && a.tok1 != nullptr;
  for (int e = tid; e < C * OWN * VR; e += nt) {
    const int c = e / (OWN * VR), rv = e - c * (OWN * VR), r = rv / VR, xo = (rv - r * VR) * 8;
    const int y = yb + r, q0 = r * TT + xo;
    const float gc = ga[c], bc = be[c], nwa = nw[c], nba = nb[c], nwb = nw[C + c],
                nbb = nb[C + c];
    float pa[8], pb[8], xv[8], a0[8], a1[8], hv[8], dv[8];
    ff_read8(ps + c * PSS + q0, pa);
    ff_read8(ps + (C + c) * PSS + q0, pb);
    ff_read8(xs + c * XS + (y - row0) * TT + xo, xv);
    ff_read8(&alp[0][q0], a0);
    ff_read8(&alp[1][q0], a1);
    float tsum = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const float na = (pa[j] - mean) * rstd * nwa + nba;
      const float nbv = (pb[j] - mean) * rstd * nwb + nbb;
      const float m = fmaf(gc, xv[j], bc);
      const float rr = rnd<T>(fmaf(na, fmaxf(nbv, 0.0f), m));
      const float h = ff_fuse<T>(xv[j], rr, a0[j]);
      if (a.mode == CUDA_FF_STORE_L0) {
        if (parent) {
          dv[j] = h; /* level 1's input */
          tsum += h;
        } else {
          hv[j] = ff_fuse<T>(h, h, a1[j]);
          dv[j] = rnd<T>(__fsub_rn(hv[j], h));
        }
      } else {
        hv[j] = h;
        dv[j] = rnd<T>(__fsub_rn(h, xv[j]));
      }
    }
    const int64_t off = ((b * g.C + c) * g.H + y0 + y) * W + x0 + xo;
    ff_store8<T>(detail + off, dv);
    if (!parent) ff_store8<T>(heavy + off, hv);
    /* tile row 2 rank + r, columns xo..xo+7: quadrant (rank / 4, xo / 8),
     * its part (rank % 4) * 2 + r, to the quadrant's block */
    if (tok) cl.map_shared_rank(tq, (rank / 4) * 4 + xo / 8)[((rank % 4) * 2 + r) * C + c] = tsum;
  }
  FF_TL_PHASE(5);
  ff_cluster_wait();
  if (tok) {
    cl.sync(); /* the quadrant sums pushed */
    if (rank % 4 < 2) { /* the block of quadrant (rank / 4, rank % 4) */
      const int qy = rank / 4, qx = rank % 4;
      const int64_t gw1 = 2 * g.gw;
      const int64_t child = (2 * (int64_t)ty + qy) * gw1 + 2 * (int64_t)tx + qx;
      float *out = a.tok1 + (b * 4 * a.G0 + child) * C;
      for (int c = tid; c < C; c += nt) {
        float sq = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) sq += tq[i * C + c];
        out[c] = rnd<T>(__fdiv_rn(sq, 64.0f));
      }
    }
  }
#else
  (void)X; (void)g; (void)lv; (void)film; (void)a;
  __trap();
#endif
}

/* ---- host side ------------------------------------------------------------------- */

static size_t fused_smem(int64_t C, int64_t t, int cw) {
  return sizeof(float) * (size_t)ff_fused_floats(C, (int)t, cw);
}

/* ff_tc_kernel's dynamic shared memory for tiles t of cw-pixel blocks; 0
 * where it has no form for them */
static size_t tc_smem(int64_t C, int64_t t, int cw) {
  if (cw == 32 && t == 16) return sizeof(float) * (size_t)ff_tc_floats<32, 16>(C);
  if (cw == 16 && t == 8) return sizeof(float) * (size_t)ff_tc_floats<16, 8>(C);
  return 0;
}

/* Does level `level` (input X, tiles t) run ff_tc_kernel? */
static int tc_path(const cuda_ff_frame *f, const cuda_ff_prepared *w, int level, const void *X,
                   int64_t t) {
  const int cw = f->cw[level];
  const uintptr_t al = (uintptr_t)X | (uintptr_t)f->heavy | (uintptr_t)f->detail;
  return (f->dt == APX_DTYPE_F16 || f->dt == APX_DTYPE_BF16) && w->level[level].pwf &&
         tc_smem(f->C, t, cw) > 0 && (al & 15) == 0;
}

int cuda_ff_tok1(const cuda_ff_frame *f, const cuda_ff_prepared *w) {
  return f->K0 > 0 && f->K1 > 0 && f->t0 == 16 && f->cw[0] == 32 &&
         tc_path(f, w, 0, f->dense, f->t0);
}

int cuda_ff_fused_width(cuda_state *st, int dev, const cuda_ff_frame *f, int64_t t, int64_t K) {
  if (st->dev[dev].cc_major < 9 || K <= 0 || t <= 0) return 0;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const int64_t tt = t * t, sms = st->dev[dev].sm_count > 0 ? st->dev[dev].sm_count : 132;
  /* 16-pixel blocks where 32-pixel ones would leave SMs idle */
  int cw = f->B * K * ((tt + 31) / 32) < sms && (tt + 15) / 16 <= 8 ? 16 : 32;
  if ((tt + cw - 1) / cw > 8) return 0; /* a portable cluster: at most 8 blocks */
  /* static shared memory: sh32, cred, alp (and the tc kernel's stat) */
  size_t smem = fused_smem(f->C, t, cw);
  const size_t tsm = tc_smem(f->C, t, cw);
  if (tsm > smem) smem = tsm;
  if (smem + sizeof(float) * (36 + 2 * 32) > (size_t)optin) return 0;
  return cw;
}

/* Launch a refine kernel over the level's tiles: a cluster of S blocks a
 * tile, programmatically after the scan/FiLM launch (plainly where that is
 * refused, as cuda_launch_after falls back). */
template <typename T>
static apx_status launch_refine(cuda_state *st, int dev, cudaStream_t s, unsigned S, size_t smem,
                                void (*kernel)(const T *, ff_geom, cuda_ff_level, const float *,
                                               ff_store_args),
                                const T *X, const ff_geom &g, const cuda_ff_level &lv,
                                const float *film, const ff_store_args &a) {
  cudaLaunchAttribute attr[2] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = S;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg =
      cuda_launch_config(dim3(S, (unsigned)g.K, (unsigned)g.B), dim3(FF_FUSED_THREADS), smem, s, attr);
  cfg.numAttrs = cuda_pdl_ok(st, dev) ? 2 : 1;
  cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, X, g, lv, film, a);
  if (err != cudaSuccess && cfg.numAttrs == 2) {
    (void)cudaGetLastError();
    cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, kernel, X, g, lv, film, a);
  }
  CUDA_TRY(st, err, "ff_infer: refine launch");
  return APX_OK;
}

template <typename T, int CW, int TT>
static apx_status launch_fused(cuda_state *st, int dev, cudaStream_t s, const T *X,
                               const ff_geom &g, const cuda_ff_level &lv, const float *film,
                               const ff_store_args &a) {
  const size_t smem = fused_smem(g.C, g.t, CW);
  /* the largest dynamic shared memory set so far, a device */
  static int smem_set[CUDA_MAX_DEVICES];
  if (smem > 40 * 1024 && (int)smem > __atomic_load_n(&smem_set[dev], __ATOMIC_ACQUIRE)) {
    CUDA_TRY(st, cudaFuncSetAttribute(ff_fused_kernel<T, CW, TT>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "ff_infer: refine shared memory");
    __atomic_store_n(&smem_set[dev], (int)smem, __ATOMIC_RELEASE);
  }
  const int64_t tt = g.t * g.t;
  const unsigned S = (unsigned)((tt + CW - 1) / CW);
  return launch_refine<T>(st, dev, s, S, smem, ff_fused_kernel<T, CW, TT>, X, g, lv, film, a);
}

template <typename T, int CW, int TT>
static apx_status launch_tc(cuda_state *st, int dev, cudaStream_t s, const T *X, const ff_geom &g,
                            const cuda_ff_level &lv, const float *film, const ff_store_args &a) {
  const size_t smem = tc_smem(g.C, TT, CW);
  /* the largest dynamic shared memory set so far, a device */
  static int smem_set[CUDA_MAX_DEVICES];
  if (smem > 40 * 1024 && (int)smem > __atomic_load_n(&smem_set[dev], __ATOMIC_ACQUIRE)) {
    CUDA_TRY(st, cudaFuncSetAttribute(ff_tc_kernel<T, CW, TT>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "ff_infer: refine shared memory");
    __atomic_store_n(&smem_set[dev], (int)smem, __ATOMIC_RELEASE);
  }
  const unsigned S = (unsigned)(TT * TT / CW);
  return launch_refine<T>(st, dev, s, S, smem, ff_tc_kernel<T, CW, TT>, X, g, lv, film, a);
}

static ff_outside_args outside_args(const cuda_ff_frame *f, const cuda_ff_prepared *w,
                                    const int *tile_state) {
  ff_outside_args o;
  memset(&o, 0, sizeof o);
  const cuda_ff_level &l0 = w->level[0], &l1 = w->level[1];
  o.X = f->dense;
  o.heavy = f->heavy;
  o.detail = f->detail;
  o.alpha = f->alpha;
  o.C = f->C;
  o.H = f->H;
  o.W = f->W;
  o.t0 = f->t0;
  o.gw0 = f->gw0;
  o.G0 = f->G0;
  o.tile_state = tile_state;
  o.bp = f->bp;
  o.up = f->up;
  o.bp_dt = (int)f->bp_dt;
  o.up_dt = (int)f->up_dt;
  o.wb0 = l0.wb;
  o.wu0 = l0.wu;
  o.gb0 = l0.gb;
  o.wb1 = l1.wb;
  o.wu1 = l1.wu;
  o.gb1 = l1.gb;
  o.two = f->K1 > 0 ? 1 : 0;
  return o;
}

/* blocks of a row's outside pass: a work item a thread, at most 4096 */
static unsigned outside_blocks(const cuda_ff_frame *f, int64_t threads) {
  int64_t n = ((f->H * f->W) * ((f->C + FF_OUT_CPB - 1) / FF_OUT_CPB) + threads - 1) / threads;
  return (unsigned)(n < 1 ? 1 : n > 4096 ? 4096 : n);
}

template <typename T>
static apx_status level_run_t(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                              const cuda_ff_prepared *w, int level, int store_mode,
                              const void *X, int64_t t, int64_t gw, const int *ids,
                              int64_t kstride, int64_t K, const int *tile_state,
                              const cuda_ff_level_scratch *sc, int64_t tok_G, int outside) {
  ff_geom g;
  g.B = f->B;
  g.C = f->C;
  g.H = f->H;
  g.W = f->W;
  g.t = t;
  g.gw = gw;
  g.K = K;
  g.kstride = kstride;
  g.ids = ids;
  g.tok_G = tok_G;
  const cuda_ff_level &lv = w->level[level];
  const T *Xt = (const T *)X;
  if (!tok_G) {
    dim3 gt((unsigned)K, (unsigned)f->B, (unsigned)((f->C + 7) / 8));
    CUDA_TRY(st, cuda_launch_after(st, f->dev, 1, gt, dim3(256), 0, s, ff_tokens_kernel<T>, Xt, g,
                                   sc->tok),
             "ff_infer: tokens launch");
  }
  /* about four threads an output of the C -> C layer, two of the C -> 2C
   * one (FF_SF_THREADS at most) */
  int64_t sf = (4 * f->C + 31) / 32 * 32;
  unsigned sf_threads = (unsigned)(sf < 64 ? 64 : sf > FF_SF_THREADS ? FF_SF_THREADS : sf);
  const unsigned n_out = outside ? outside_blocks(f, sf_threads) : 0;
  /* the row's tokens staged in shared memory where they take 32 KiB at
   * most; the C -> C layer's weights where they take 64 KiB at most (C <=
   * 128, even: 16-byte copies) */
  const int stage = K * f->C <= 8192;
  int wstage = f->C <= 128 && f->C % 2 == 0 ? 1 : 0;
  const size_t C4 = (size_t)((f->C + 3) / 4 * 4);
  size_t sf_smem = sizeof(float) * (2 * C4 + sf_threads + 14 * C4 +
                                    (stage ? (size_t)((K * f->C + 3) / 4 * 4) : 0) +
                                    (wstage ? (size_t)(f->C * f->C) : 0));
  /* the C -> 2C layer's weights too where they fit and the launch has no
   * outside blocks (which get the same shared memory: two a multiprocessor
   * beside level 0's refine) */
  int optin = 0;
  if (wstage && n_out == 0 &&
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, f->dev) ==
          cudaSuccess &&
      sf_smem + sizeof(float) * 2 * (size_t)(f->C * f->C) + 1024 <= (size_t)optin) {
    wstage |= 2;
    sf_smem += sizeof(float) * 2 * (size_t)(f->C * f->C);
  }
  /* the largest dynamic shared memory set so far, a device */
  static int sf_smem_set[CUDA_MAX_DEVICES];
  if (sf_smem > 48 * 1024 &&
      (int)sf_smem > __atomic_load_n(&sf_smem_set[f->dev], __ATOMIC_ACQUIRE)) {
    CUDA_TRY(st, cudaFuncSetAttribute(ff_scan_film_kernel<T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sf_smem),
             "ff_infer: scan/FiLM shared memory");
    __atomic_store_n(&sf_smem_set[f->dev], (int)sf_smem, __ATOMIC_RELEASE);
  }
  ff_outside_args oa = outside_args(f, w, tile_state);
  /* level 1 with its tokens from level 0's ff_tc_kernel: that kernel is
   * the one before this launch, and lets it start after its own wait */
  oa.early = level == 1 && tok_G > 0;
  CUDA_TRY(st, cuda_launch_after(st, f->dev, 1, dim3((unsigned)K + n_out, (unsigned)f->B),
                                 dim3(sf_threads), sf_smem, s, ff_scan_film_kernel<T>, g, lv,
                                 (const float *)sc->tok, sc->film, oa, (int)n_out, stage,
                                 wstage),
           "ff_infer: scan/FiLM launch");
  ff_store_args a;
  memset(&a, 0, sizeof a);
  a.X = X;
  a.heavy = f->heavy;
  a.detail = f->detail;
  a.bp = f->bp;
  a.up = f->up;
  a.bp_dt = (int)f->bp_dt;
  a.up_dt = (int)f->up_dt;
  a.mode = store_mode;
  a.wb0 = lv.wb;
  a.wu0 = lv.wu;
  a.gb0 = lv.gb;
  a.wb1 = w->level[1].wb;
  a.wu1 = w->level[1].wu;
  a.gb1 = w->level[1].gb;
  a.tile_state = tile_state;
  a.G0 = f->G0;
  a.gw0 = f->gw0;
  const int cw = f->cw[level];
  /* the default profile's tiles (16 at level 0, 8 at level 1) with their
   * sizes fixed at compile time; f16/bf16 on tensor cores in ff_tc_kernel */
  if constexpr (sizeof(T) == 2) {
    if (tc_path(f, w, level, X, t)) {
      if (store_mode == CUDA_FF_STORE_L0 && cuda_ff_tok1(f, w)) a.tok1 = sc->tok1;
      if (cw == 32) return launch_tc<T, 32, 16>(st, f->dev, s, Xt, g, lv, sc->film, a);
      return launch_tc<T, 16, 8>(st, f->dev, s, Xt, g, lv, sc->film, a);
    }
  }
  if (cw == 32 && t == 16) return launch_fused<T, 32, 16>(st, f->dev, s, Xt, g, lv, sc->film, a);
  if (cw == 32) return launch_fused<T, 32, 0>(st, f->dev, s, Xt, g, lv, sc->film, a);
  if (cw == 16 && t == 8) return launch_fused<T, 16, 8>(st, f->dev, s, Xt, g, lv, sc->film, a);
  if (cw == 16) return launch_fused<T, 16, 0>(st, f->dev, s, Xt, g, lv, sc->film, a);
  const int64_t tt = t * t, nch = (tt + CUDA_FF_CHUNK - 1) / CUDA_FF_CHUNK;
  size_t smem = sizeof(float) * (size_t)f->C * CUDA_FF_CHUNK;
  if (smem > 40 * 1024) /* with the static shared memory, over the default 48 KiB */
    CUDA_TRY(st, cudaFuncSetAttribute(ff_conv_kernel<T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "ff_infer: refine shared memory");
  dim3 gc((unsigned)nch, (unsigned)K, (unsigned)f->B);
  ff_conv_kernel<T><<<gc, 256, smem, s>>>(Xt, g, lv, sc->film, sc->p, sc->partials);
  CUDA_LAUNCHED(st, "ff_infer: refine launch");
  ff_store_kernel<T><<<gc, 256, 0, s>>>(g, lv, sc->film, sc->p, sc->partials, a);
  CUDA_LAUNCHED(st, "ff_infer: store launch");
  return APX_OK;
}

apx_status cuda_ff_level_run(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                             const cuda_ff_prepared *w, int level, int store_mode,
                             const void *X, int64_t t, int64_t gw, const int *ids,
                             int64_t kstride, int64_t K, const int *tile_state,
                             const cuda_ff_level_scratch *sc, int64_t tok_G, int outside) {
  if (K <= 0 || f->B <= 0) return APX_OK;
  switch (f->dt) {
  case APX_DTYPE_F16:
    return level_run_t<__half>(st, s, f, w, level, store_mode, X, t, gw, ids, kstride, K,
                               tile_state, sc, tok_G, outside);
  case APX_DTYPE_BF16:
    return level_run_t<__nv_bfloat16>(st, s, f, w, level, store_mode, X, t, gw, ids, kstride,
                                      K, tile_state, sc, tok_G, outside);
  default:
    return level_run_t<float>(st, s, f, w, level, store_mode, X, t, gw, ids, kstride, K,
                              tile_state, sc, tok_G, outside);
  }
}

template <typename T>
static apx_status outside_t(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                            const cuda_ff_prepared *w, const int *tile_state) {
  ff_outside_kernel<T><<<dim3(outside_blocks(f, 256), (unsigned)f->B), 256, 0, s>>>(
      outside_args(f, w, tile_state));
  CUDA_LAUNCHED(st, "ff_infer: outside launch");
  return APX_OK;
}

apx_status cuda_ff_outside(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                           const cuda_ff_prepared *w, const int *tile_state) {
  if (f->B <= 0 || f->H * f->W <= 0) return APX_OK;
  switch (f->dt) {
  case APX_DTYPE_F16: return outside_t<__half>(st, s, f, w, tile_state);
  case APX_DTYPE_BF16: return outside_t<__nv_bfloat16>(st, s, f, w, tile_state);
  default: return outside_t<float>(st, s, f, w, tile_state);
  }
}
