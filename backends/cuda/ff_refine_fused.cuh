/* SPDX-License-Identifier: Apache-2.0 */
/* The refine of a tile in one cluster (ff_refine.cu, sm_90), and its
 * pointwise conv on tensor cores (ff_pw_mma, shared with ff_tc_kernel). */
#ifndef APX_CUDA_FF_REFINE_FUSED_CUH
#define APX_CUDA_FF_REFINE_FUSED_CUH

#include <cooperative_groups.h>

#include "ff_refine_common.cuh"

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
    const float h = ff_fuse<T>(xv, ff_unpack<T>(a, xv, r), alp[0][q]);
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

#endif /* APX_CUDA_FF_REFINE_FUSED_CUH */
