/* SPDX-License-Identifier: Apache-2.0 */
/* The two-kernel refine of one FF level (ff_refine.cu), where the
 * one-cluster refine does not fit: conv (FiLM, depthwise, pointwise,
 * chunk statistics) into scratch, then store. */
#ifndef APX_CUDA_FF_REFINE_CONV_CUH
#define APX_CUDA_FF_REFINE_CONV_CUH

#include "ff_refine_common.cuh"

/* ---- refine: FiLM, depthwise, pointwise, chunk statistics --------------------- */

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
    const float h =
        ff_fuse<T>(xv, ff_unpack<T>(a, xv, r), ff_alpha<T>(bpv, upv, a.wb0, a.wu0, a.gb0));
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

#endif /* APX_CUDA_FF_REFINE_CONV_CUH */
