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
 * Values the definition rounds (rnd) are rounded here at the same points;
 * the sums run in fp32 in another order than the cpu backend's. */
#include "cuda_ff.h"

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
};

/* ---- tokens ------------------------------------------------------------------- */

template <typename T>
__global__ void ff_tokens_kernel(const T *__restrict__ X, ff_geom g, float *__restrict__ tok) {
  const int64_t k = blockIdx.x, b = blockIdx.y;
  const int64_t c = (int64_t)blockIdx.z * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (c >= g.C) return;
  const int id = g.ids[b * g.kstride + k];
  const int64_t ty = id / g.gw, tx = id % g.gw, tt = g.t * g.t;
  const T *base = X + ((b * g.C + c) * g.H + ty * g.t) * g.W + tx * g.t;
  float s = 0.0f;
  for (int64_t e = lane; e < tt; e += 32) s += cuda_dt<T>::to_f(base[(e / g.t) * g.W + e % g.t]);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) tok[(b * g.K + k) * g.C + c] = rnd<T>(__fdiv_rn(s, (float)tt));
}

/* ---- scan (6.A) + FiLM parameters (8) ----------------------------------------- */

template <typename T>
static __device__ __forceinline__ float ff_sanitise_tok(float x, float lim) {
  if (x != x) return 0.0f;
  return fminf(fmaxf(x, -lim), lim); /* +-inf clamp to +-lim */
}

template <typename T>
__global__ void ff_scan_film_kernel(ff_geom g, cuda_ff_level lv, const float *__restrict__ tok,
                                    float *__restrict__ film) {
  extern __shared__ float ff_sf_sh[];
  float *xs = ff_sf_sh;       /* [C] normalised token */
  float *hs = xs + g.C;       /* [C] hidden */
  __shared__ float sh32[32];
  const int64_t k = blockIdx.x, b = blockIdx.y, C = g.C, K = g.K;
  const float lim = rnd<T>(1e4f);
  const float *row = tok + b * K * C;
  float lsum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float y[2];
    for (int dir = 0; dir < 2; dir++) {
      const float d = fminf(fmaxf(lv.decay[dir][c], 1e-6f), 1.0f - 1e-6f);
      const float om = __fsub_rn(1.0f, d), ig = lv.ig[dir][c], sb = lv.sb[dir][c];
      float s = 0.0f;
      if (dir == 0) {
        for (int64_t j = 0; j <= k; j++) {
          float x = ff_sanitise_tok<T>(row[j * C + c], lim);
          float drv = __fadd_rn(__fmul_rn(ig, x), sb);
          s = __fadd_rn(__fmul_rn(d, s), __fmul_rn(om, drv));
        }
      } else {
        for (int64_t j = K - 1; j >= k; j--) {
          float x = ff_sanitise_tok<T>(row[j * C + c], lim);
          float drv = __fadd_rn(__fmul_rn(ig, x), sb);
          s = __fadd_rn(__fmul_rn(d, s), __fmul_rn(om, drv));
        }
      }
      y[dir] = rnd<T>(__fmul_rn(lv.og[dir][c], s));
    }
    const float gg = lv.gate[c];
    float m = rnd<T>(__fadd_rn(rnd<T>(__fmul_rn(gg, y[0])),
                               rnd<T>(__fmul_rn(rnd<T>(__fsub_rn(1.0f, gg)), y[1]))));
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
    xs[c] = (xs[c] - mean) * rstd * lv.ln_w[c] + lv.ln_b[c];
  __syncthreads();
  for (int64_t o = threadIdx.x; o < C; o += blockDim.x) {
    float acc = lv.b0[o];
    for (int64_t c = 0; c < C; c++) acc = fmaf(lv.w0t[c * C + o], xs[c], acc);
    hs[o] = acc * ff_sigmoid(acc);
  }
  __syncthreads();
  float *out = film + (b * K + k) * 2 * C;
  for (int64_t j = threadIdx.x; j < 2 * C; j += blockDim.x) {
    float acc = lv.b2[j];
    for (int64_t c = 0; c < C; c++) acc = fmaf(lv.w2t[c * 2 * C + j], hs[c], acc);
    out[j] = j < C ? rnd<T>(tanhf(acc)) : rnd<T>(acc);
  }
}

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
};

template <typename T>
__global__ void __launch_bounds__(256)
ff_store_kernel(ff_geom g, cuda_ff_level lv, const float *__restrict__ film,
                const float *__restrict__ pin, const float *__restrict__ partials,
                ff_store_args a) {
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

/* ---- pixels outside every L0 tile; alpha everywhere ---------------------------- */

#define FF_OUT_CPB 16 /* channels a thread */

template <typename T>
__global__ void ff_outside_kernel(const T *__restrict__ X, T *__restrict__ heavy,
                                  T *__restrict__ detail, T *__restrict__ alpha, int64_t C,
                                  int64_t H, int64_t W, int64_t t0, int64_t gw0, int64_t G0,
                                  const int *__restrict__ tile_state, const void *bp, int bp_dt,
                                  const void *up, int up_dt, float wb0, float wu0, float gb0,
                                  float wb1, float wu1, float gb1, int two) {
  const int64_t b = blockIdx.y;
  const int64_t HW = H * W;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < HW;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t y = i / W, x = i % W, pix = b * HW + i;
    const float bpv = ff_proxy<T>(bp, bp_dt, pix), upv = ff_proxy<T>(up, up_dt, pix);
    const float a0 = ff_alpha<T>(bpv, upv, wb0, wu0, gb0);
    const float a1 = two ? ff_alpha<T>(bpv, upv, wb1, wu1, gb1) : a0;
    if (blockIdx.z == 0) alpha[pix] = cuda_dt<T>::from_f(a1);
    if (tile_state[b * G0 + (y / t0) * gw0 + x / t0] != CUDA_FF_TILE_OUT) continue;
    const int64_t c0 = (int64_t)blockIdx.z * FF_OUT_CPB;
    const int64_t c1 = c0 + FF_OUT_CPB < C ? c0 + FF_OUT_CPB : C;
    for (int64_t c = c0; c < c1; c++) {
      const int64_t off = (b * C + c) * HW + i;
      const float xv = cuda_dt<T>::to_f(X[off]);
      const float h0 = ff_fuse<T>(xv, xv, a0);
      float h = h0, base = xv;
      if (two) {
        h = ff_fuse<T>(h0, h0, a1);
        base = h0;
      }
      heavy[off] = cuda_dt<T>::from_f(h);
      detail[off] = cuda_dt<T>::from_f(rnd<T>(__fsub_rn(h, base)));
    }
  }
}

/* ---- host side ------------------------------------------------------------------- */

template <typename T>
static apx_status level_run_t(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                              const cuda_ff_prepared *w, int level, int store_mode,
                              const void *X, int64_t t, int64_t gw, const int *ids,
                              int64_t kstride, int64_t K, const int *tile_state,
                              const cuda_ff_level_scratch *sc) {
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
  const cuda_ff_level &lv = w->level[level];
  const T *Xt = (const T *)X;
  dim3 gt((unsigned)K, (unsigned)f->B, (unsigned)((f->C + 7) / 8));
  ff_tokens_kernel<T><<<gt, 256, 0, s>>>(Xt, g, sc->tok);
  CUDA_LAUNCHED(st, "ff_infer: tokens launch");
  /* a thread an output of the C -> 2C layer where it fits */
  int64_t sf = (2 * f->C + 31) / 32 * 32;
  unsigned sf_threads = (unsigned)(sf < 64 ? 64 : sf > 512 ? 512 : sf);
  ff_scan_film_kernel<T><<<dim3((unsigned)K, (unsigned)f->B), sf_threads,
                           2 * sizeof(float) * (size_t)f->C, s>>>(g, lv, sc->tok, sc->film);
  CUDA_LAUNCHED(st, "ff_infer: scan/FiLM launch");
  const int64_t tt = t * t, nch = (tt + CUDA_FF_CHUNK - 1) / CUDA_FF_CHUNK;
  size_t smem = sizeof(float) * (size_t)f->C * CUDA_FF_CHUNK;
  if (smem > 48 * 1024)
    CUDA_TRY(st, cudaFuncSetAttribute(ff_conv_kernel<T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "ff_infer: refine shared memory");
  dim3 gc((unsigned)nch, (unsigned)K, (unsigned)f->B);
  ff_conv_kernel<T><<<gc, 256, smem, s>>>(Xt, g, lv, sc->film, sc->p, sc->partials);
  CUDA_LAUNCHED(st, "ff_infer: refine launch");
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
  ff_store_kernel<T><<<gc, 256, 0, s>>>(g, lv, sc->film, sc->p, sc->partials, a);
  CUDA_LAUNCHED(st, "ff_infer: store launch");
  return APX_OK;
}

apx_status cuda_ff_level_run(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                             const cuda_ff_prepared *w, int level, int store_mode,
                             const void *X, int64_t t, int64_t gw, const int *ids,
                             int64_t kstride, int64_t K, const int *tile_state,
                             const cuda_ff_level_scratch *sc) {
  if (K <= 0 || f->B <= 0) return APX_OK;
  switch (f->dt) {
  case APX_DTYPE_F16:
    return level_run_t<__half>(st, s, f, w, level, store_mode, X, t, gw, ids, kstride, K,
                               tile_state, sc);
  case APX_DTYPE_BF16:
    return level_run_t<__nv_bfloat16>(st, s, f, w, level, store_mode, X, t, gw, ids, kstride,
                                      K, tile_state, sc);
  default:
    return level_run_t<float>(st, s, f, w, level, store_mode, X, t, gw, ids, kstride, K,
                              tile_state, sc);
  }
}

template <typename T>
static apx_status outside_t(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                            const cuda_ff_prepared *w, const int *tile_state) {
  const int64_t HW = f->H * f->W;
  int64_t bx = (HW + 255) / 256;
  if (bx > 65535) bx = 65535;
  dim3 grid((unsigned)(bx < 1 ? 1 : bx), (unsigned)f->B,
            (unsigned)((f->C + FF_OUT_CPB - 1) / FF_OUT_CPB));
  const cuda_ff_level &l0 = w->level[0], &l1 = w->level[1];
  ff_outside_kernel<T><<<grid, 256, 0, s>>>(
      (const T *)f->dense, (T *)f->heavy, (T *)f->detail, (T *)f->alpha, f->C, f->H, f->W, f->t0,
      f->gw0, f->G0, tile_state, f->bp, (int)f->bp_dt, f->up, (int)f->up_dt, l0.wb, l0.wu, l0.gb,
      l1.wb, l1.wu, l1.gb, f->K1 > 0 ? 1 : 0);
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
