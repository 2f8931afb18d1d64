/* SPDX-License-Identifier: Apache-2.0 */
/* The refine of the default tiles of f16/bf16 frames on tensor cores
 * (ff_refine.cu, sm_90). */
#ifndef APX_CUDA_FF_REFINE_TC_CUH
#define APX_CUDA_FF_REFINE_TC_CUH

#include <cooperative_groups.h>

#include "ff_refine_fused.cuh"

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
      const float h = ff_fuse<T>(xv[j], ff_unpack<T>(a, xv[j], rr), a0[j]);
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

#endif /* APX_CUDA_FF_REFINE_TC_CUH */
