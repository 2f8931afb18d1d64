/* SPDX-License-Identifier: Apache-2.0 */
/* cuda backend: the FF path's routing on the device (docs/ff_infer.md,
 * Routing): one block per batch row, float64 scores,
 * ranks by (score desc, id asc), the greedy and split walks, quadtree
 * children, the Hilbert order of level 1's ids (the stats' list) and
 * both levels' ids in the call's order_mode (docs/ff_infer.md, Options:
 * apx_tile_order's keys, a stable sort). Every tile costs the same
 * delta, so the walks take a prefix of the sorted candidates: the counts
 * are known on the host (cuda_ff_frame.K0, .P) and the block places each
 * candidate by its rank. NaN utilities are reported through the device's
 * deferred error record (validate = device) and in the row's nan_pos (read
 * by the host under validate = eager); a NaN ranks as -inf so that the
 * outputs stay well formed. */
#include "cuda_ff.h"

/* docs/ops.md, tile_order: the Hilbert index of (x, y) on an n x n grid, n a power
 * of two (masked reflection); n <= 32768 here (G0 <= CUDA_FF_MAX_G0, the L1
 * grid twice as wide), so the index fits 32 bits. */
static __device__ unsigned ff_hilbert_d(unsigned x, unsigned y, unsigned n) {
  unsigned d = 0;
  for (unsigned s = n / 2; s > 0; s /= 2) {
    unsigned rx = (x & s) != 0, ry = (y & s) != 0;
    d += s * s * ((3 * rx) ^ ry);
    if (ry == 0) {
      if (rx == 1) {
        x = (s - 1) - (x & (s - 1));
        y = (s - 1) - (y & (s - 1));
      }
      unsigned t = x;
      x = y;
      y = t;
    }
  }
  return d;
}

static __device__ unsigned ff_pow2_at_least(unsigned v) {
  unsigned n = 1;
  while (n < v) n *= 2;
  return n;
}

/* apx_order_key (include/apexx/op_rules.h) on the device, for the grids
 * the router sorts: gh * gw <= 4 * CUDA_FF_MAX_G0 cells, so every key fits
 * 32 bits (multi_direction's below 2 * gh * gw). n: the Hilbert side. */
static __device__ unsigned ff_order_key(int mode, unsigned id, unsigned gh, unsigned gw,
                                        unsigned n) {
  const unsigned ty = id / gw, tx = id % gw;
  switch (mode) {
  case APX_ORDER_L2R: return ty * gw + tx;
  case APX_ORDER_R2L: return ty * gw + (gw - 1 - tx);
  case APX_ORDER_U2D: return tx * gh + ty;
  case APX_ORDER_D2U: return tx * gh + (gh - 1 - ty);
  case APX_ORDER_MULTI_DIRECTION: return ty * gw + tx * gh;
  default: return ff_hilbert_d(tx, ty, n);
  }
}

/* The position of entry q (key kq) of key[0..K) in the stable sort by key:
 * equal keys (multi_direction's only) keep their order in the list. */
static __device__ __forceinline__ int ff_stable_rank(const unsigned *key, int K, int q,
                                                     unsigned kq) {
  int rank = 0;
#pragma unroll 8
  for (int j = 0; j < K; j++) rank += key[j] < kq || (key[j] == kq && j < q);
  return rank;
}

/* a before b in (score desc, id asc); a NaN score (inf / inf) sorts
 * first, as the host's order has it */
static __device__ __forceinline__ bool ff_before(double sa, int ia, double sb, int ib) {
  const bool an = sa != sa, bn = sb != sb;
  if (an != bn) return an;
  if (!an && sa != sb) return sa > sb;
  return ia < ib;
}

struct ff_route_params {
  int64_t B, G0, gw0, gh0, kmax0, kmax1, K0, P;
  double delta, b1, b2;
  int split_on;
  int order; /* apx_order_mode of the levels' id lists (cuda_ff_frame.order) */
  const void *util, *split;
  int util_dt, split_dt;
  cuda_ff_route_dev r;
  cuda_error_record *record; /* validate = device: publish NaN here */
  /* level 0's tokens of every tile (blocks 1.. of each row) */
  const void *X;
  float *tok_all; /* [B,G0,C]; NULL: none */
  int64_t C, H, W, t0;
  int vec; /* rows read 16 bytes at a time (ff_tokens_all) */
};

static __device__ void ff_publish_nan(cuda_error_record *record, const char *arg, int64_t B,
                                      int64_t G0, unsigned long long pos) {
  cuda_check_desc d;
  memset(&d, 0, sizeof d);
  d.op = APX_OP_FF_INFER;
  for (int i = 0; i < 15 && arg[i]; i++) d.arg[i] = arg[i];
  d.ndim = 2;
  d.shape[0] = B;
  d.shape[1] = G0;
  d.count = B * G0;
  cuda_check_result r;
  memset(&r, 0, sizeof r);
  r.bad = 1;
  r.kind = CUDA_BAD_NAN;
  r.pos = pos;
  cuda_check_publish(record, d, r);
}

/* The sum, in order, of the values of T in 16 bytes. */
template <typename T> static __device__ __forceinline__ float ff_sum16(uint4 v);
template <> __device__ __forceinline__ float ff_sum16<float>(uint4 v) {
  return ((__uint_as_float(v.x) + __uint_as_float(v.y)) + __uint_as_float(v.z)) +
         __uint_as_float(v.w);
}
template <> __device__ __forceinline__ float ff_sum16<__half>(uint4 v) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __half22float2(*(const __half2 *)&w[i]);
    s = (s + f.x) + f.y;
  }
  return s;
}
template <> __device__ __forceinline__ float ff_sum16<__nv_bfloat16>(uint4 v) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[i]);
    s = (s + f.x) + f.y;
  }
  return s;
}

/* Level 0's token of tile id, channel c of every tile of the row: a warp
 * a (tile, channel), the mean of its t0 x t0 values, rounded; with p.vec
 * (t0 and W multiples of 16 bytes of T, X 16-byte aligned) each lane reads
 * 16 bytes of a row at a time. */
template <typename T>
static __device__ void ff_tokens_all(const ff_route_params &p, int64_t b, int64_t blk) {
  const int64_t item = blk * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (item >= p.G0 * p.C) return;
  const int64_t id = item / p.C, c = item % p.C, t = p.t0;
  const int64_t ty = id / p.gw0, tx = id % p.gw0;
  const T *base = (const T *)p.X + ((b * p.C + c) * p.H + ty * t) * p.W + tx * t;
  const int tt = (int)(t * t), ti = (int)t;
  float s = 0.0f;
  if (p.vec) {
    constexpr int V = 16 / (int)sizeof(T);
    const int nv = ti / V; /* 16-byte runs a row */
    for (int e = lane; e < tt / V; e += 32) {
      const int r = e / nv;
      s += ff_sum16<T>(*(const uint4 *)(base + (int64_t)r * p.W + (e - r * nv) * V));
    }
  } else {
#pragma unroll 4
    for (int e = lane; e < tt; e += 32)
      s += cuda_dt<T>::to_f(base[(int64_t)(e / ti) * p.W + e % ti]);
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0)
    p.tok_all[(b * p.G0 + id) * p.C + c] =
        cuda_dt<T>::to_f(cuda_dt<T>::from_f(__fdiv_rn(s, (float)tt)));
}

/* L0: the rank of each candidate (q lanes of a warp a candidate, each
 * over every q-th other, the counts added by shuffles); the first K0 are
 * taken, sel[rank] (ff_route_kernel's blocks 0 and 1; block 1 marks their
 * tile states). */
static __device__ __forceinline__ void ff_rank_l0(const ff_route_params &p, int64_t b,
                                                  const double *score, int *sel, int G0, int K0,
                                                  int tid, int nt, int l1_block) {
  int q = 1;
  while (q < 32 && 2 * q * G0 <= nt) q *= 2;
  const int per = nt / q, rounds = (G0 + per - 1) / per, sub = tid % q;
  for (int r = 0; r < rounds; r++) {
    const int i = r * per + tid / q;
    int rank = 0;
    if (i < G0) {
      const double si = score[i];
#pragma unroll 8
      for (int j = sub; j < G0; j += q) rank += ff_before(score[j], j, si, i);
    }
    for (int off = q / 2; off > 0; off >>= 1) rank += __shfl_xor_sync(0xffffffffu, rank, off);
    if (i < G0 && sub == 0 && rank < K0) {
      sel[rank] = i;
      if (l1_block) p.r.tile_state[b * p.G0 + i] = CUDA_FF_TILE_L0;
    }
  }
}

/* Blocks 0 and 1 of row blockIdx.y route the row, side by side: each
 * ranks the L0 candidates (the same arithmetic, so the same selection);
 * block 0 then writes level 0's ids (greedy and order_mode order), the counts
 * and the NaN verdict, block 1 the tile states and the split stage (level
 * 1's parents and ids). The others compute level 0's tokens of every tile
 * (their means do not depend on the routing). */
template <typename T>
__global__ void ff_route_kernel(ff_route_params p) {
  cuda_allow_dependents(); /* level 0's scan launch may start beside it */
  FF_TL(blockIdx.x > 1 ? FF_TL_ROUTE_TOK : FF_TL_ROUTE);
  if (blockIdx.x > 1) {
    ff_tokens_all<T>(p, blockIdx.y, blockIdx.x - 2);
    return;
  }
  const int l1_block = blockIdx.x == 1;
  extern __shared__ double ff_route_sh[];
  double *score = ff_route_sh;                    /* [G0] */
  double *score2 = score + p.G0;                  /* [K0] split scores */
  int *sel = (int *)(score2 + p.K0);              /* [K0] greedy order */
  int *child = sel + p.K0;                        /* [4P] */
  unsigned *key = (unsigned *)(child + 4 * p.P);  /* [max(K0, 4P)] sort keys */
  /* [G0] the split utilities, loaded with the utilities (G0 <= 4096) */
  float *splitv = (float *)(key + (p.K0 > 4 * p.P ? p.K0 : 4 * p.P));
  __shared__ unsigned long long s_nan[2];
  const int64_t b = blockIdx.y;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int G0 = (int)p.G0, K0 = (int)p.K0, P = (int)p.P;
  if (tid < 2) s_nan[tid] = ~0ULL;
  __syncthreads();
  for (int i = tid; i < G0; i += nt) {
    double u = (double)cuda_load_any(p.util, p.util_dt, b * p.G0 + i);
    if (u != u) {
      atomicMin(&s_nan[0], (unsigned long long)(b * p.G0 + i));
      u = -INFINITY;
    }
    score[i] = u / p.delta;
    if (l1_block) p.r.tile_state[b * p.G0 + i] = CUDA_FF_TILE_OUT;
    if (p.split) {
      float v = cuda_load_any(p.split, p.split_dt, b * p.G0 + i);
      if (v != v) atomicMin(&s_nan[1], (unsigned long long)(b * p.G0 + i));
      if (p.G0 <= 4096) splitv[i] = v;
    }
  }
  __syncthreads();
  FF_TL_PHASE(0);
  ff_rank_l0(p, b, score, sel, G0, K0, tid, nt, l1_block);
  FF_TL_PHASE(1);
  if (!l1_block) {
    if (tid == 0) {
      double spent = 0.0;
      for (int n = 0; n < K0; n++) spent += p.delta;
      p.r.l0_count[b] = K0;
      p.r.b1_spent[b] = spent;
      double spent2 = 0.0;
      for (int n = 0; n < P; n++) spent2 += 1.0;
      p.r.l1_count[b] = 4 * (int64_t)P;
      p.r.b2_spent[b] = spent2;
      p.r.nan_pos[2 * b] = s_nan[0];
      p.r.nan_pos[2 * b + 1] = s_nan[1];
      if (p.record && s_nan[0] != ~0ULL) ff_publish_nan(p.record, "utilities", p.B, p.G0, s_nan[0]);
      else if (p.record && s_nan[1] != ~0ULL)
        ff_publish_nan(p.record, "split_utilities", p.B, p.G0, s_nan[1]);
    }
    __syncthreads();
    FF_TL_PHASE(2);
    for (int q = tid; q < (int)p.kmax0; q += nt)
      p.r.l0_greedy[b * p.kmax0 + q] = q < K0 ? (int64_t)sel[q] : -1;
    /* L0 ids in the order_mode's order on the L0 grid: each key once, then
     * ranks (distinct keys but in multi_direction, whose ties keep the
     * greedy order) */
    const int gw0 = (int)p.gw0;
    const unsigned n0 = ff_pow2_at_least((unsigned)(p.gh0 > p.gw0 ? p.gh0 : p.gw0));
    if (p.order == APX_ORDER_HILBERT) {
      for (int q = tid; q < K0; q += nt) {
        const int id = sel[q];
        key[q] = ff_hilbert_d((unsigned)(id % gw0), (unsigned)(id / gw0), n0);
      }
      __syncthreads();
      for (int q = tid; q < K0; q += nt) {
        const int id = sel[q];
        const unsigned kq = key[q];
        int rank = 0;
#pragma unroll 8
        for (int j = 0; j < K0; j++) rank += key[j] < kq;
        p.r.l0_order[b * p.kmax0 + rank] = id;
      }
    } else {
      for (int q = tid; q < K0; q += nt)
        key[q] = ff_order_key(p.order, (unsigned)sel[q], (unsigned)p.gh0, (unsigned)gw0, n0);
      __syncthreads();
      for (int q = tid; q < K0; q += nt)
        p.r.l0_order[b * p.kmax0 + ff_stable_rank(key, K0, q, key[q])] = sel[q];
    }
    return;
  }
  /* block 1: the split scores of the selected tiles, then the split stage */
  __syncthreads();
  if (p.split_on)
    for (int q = tid; q < K0; q += nt) {
      const int id = sel[q];
      double v = p.G0 <= 4096 ? (double)splitv[id]
                              : (double)cuda_load_any(p.split, p.split_dt, b * p.G0 + id);
      score2[q] = v != v ? -INFINITY : v / 1.0;
    }
  if (!p.split_on || P == 0) {
    for (int q = tid; q < (int)p.kmax1; q += nt) p.r.l1_ids[b * p.kmax1 + q] = -1;
    return;
  }
  __syncthreads();
  FF_TL_PHASE(3);
  /* split stage: the first P selected tiles by (split score desc, id asc) */
  for (int q = tid; q < K0; q += nt) {
    int id = sel[q];
    double sq = score2[q];
    int rank = 0;
#pragma unroll 8
    for (int j = 0; j < K0; j++) rank += ff_before(score2[j], sel[j], sq, id);
    if (rank < P) {
      p.r.tile_state[b * p.G0 + id] = CUDA_FF_TILE_PARENT;
      int64_t ty = id / p.gw0, tx = id % p.gw0, gw1 = 2 * p.gw0;
      child[4 * rank + 0] = (int)((2 * ty) * gw1 + 2 * tx);
      child[4 * rank + 1] = (int)((2 * ty) * gw1 + 2 * tx + 1);
      child[4 * rank + 2] = (int)((2 * ty + 1) * gw1 + 2 * tx);
      child[4 * rank + 3] = (int)((2 * ty + 1) * gw1 + 2 * tx + 1);
    }
  }
  __syncthreads();
  FF_TL_PHASE(4);
  const int K1 = 4 * P;
  const int gw1 = 2 * (int)p.gw0, gh1 = 2 * (int)p.gh0;
  const unsigned n1 = ff_pow2_at_least((unsigned)(gh1 > gw1 ? gh1 : gw1));
  for (int q = tid; q < K1; q += nt) {
    const int id = child[q];
    key[q] = ff_hilbert_d((unsigned)(id % gw1), (unsigned)(id / gw1), n1);
  }
  __syncthreads();
  for (int q = tid; q < K1; q += nt) {
    const int id = child[q];
    const unsigned kq = key[q];
    int rank = 0;
#pragma unroll 8
    for (int j = 0; j < K1; j++) rank += key[j] < kq;
    if (p.order == APX_ORDER_HILBERT) p.r.l1_order[b * p.kmax1 + rank] = id;
    p.r.l1_ids[b * p.kmax1 + rank] = id;
  }
  if (p.order != APX_ORDER_HILBERT) {
    /* level 1's list: the Hilbert list (l1_ids, just written by this
     * block) re-ordered stably by the order_mode's keys on the L1 grid */
    const int64_t *hl = p.r.l1_ids + b * p.kmax1;
    __syncthreads();
    for (int q = tid; q < K1; q += nt)
      key[q] = ff_order_key(p.order, (unsigned)hl[q], (unsigned)gh1, (unsigned)gw1, n1);
    __syncthreads();
    for (int q = tid; q < K1; q += nt)
      p.r.l1_order[b * p.kmax1 + ff_stable_rank(key, K1, q, key[q])] = (int)hl[q];
  }
  FF_TL_PHASE(5);
  for (int q = K1 + tid; q < (int)p.kmax1; q += nt) p.r.l1_ids[b * p.kmax1 + q] = -1;
}

#ifdef APEXX_FF_TIMELINE
FF_TL_HOST(cuda_ff_tl_route)
#endif

size_t cuda_ff_route_smem(const cuda_ff_frame *f) {
  return cuda_ff_route_smem_bytes(f->G0, f->K0, f->P);
}

template <typename T>
static apx_status route_t(cuda_state *st, cudaStream_t s, const ff_route_params &p,
                         size_t smem, unsigned threads, unsigned tok_blocks) {
  if (smem > 48 * 1024)
    CUDA_TRY(st, cudaFuncSetAttribute(ff_route_kernel<T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "ff_infer: routing shared memory");
  ff_route_kernel<T><<<dim3(2 + tok_blocks, (unsigned)p.B), threads, smem, s>>>(p);
  CUDA_LAUNCHED(st, "ff_infer: routing launch");
  return APX_OK;
}

apx_status cuda_ff_route(cuda_state *st, int device_index, cudaStream_t s,
                         const cuda_ff_frame *f, const cuda_ff_route_dev *r, float *tok_all) {
  ff_route_params p;
  memset(&p, 0, sizeof p);
  p.B = f->B;
  p.G0 = f->G0;
  p.gw0 = f->gw0;
  p.gh0 = f->gh0;
  p.kmax0 = f->kmax0;
  p.kmax1 = f->kmax1;
  p.K0 = f->K0;
  p.P = f->P;
  p.delta = f->delta;
  p.b1 = f->b1;
  p.b2 = f->b2;
  p.split_on = f->split_on;
  p.order = f->order;
  p.util = f->util;
  p.util_dt = (int)f->util_dt;
  p.split = f->split;
  p.split_dt = (int)f->split_dt;
  p.r = *r;
  p.record = st->validate_mode == APX_VALIDATE_DEVICE ? st->dev[device_index].record : NULL;
  p.X = f->dense;
  p.C = f->C;
  p.H = f->H;
  p.W = f->W;
  p.t0 = f->t0;
  const int64_t V = f->dt == APX_DTYPE_F32 ? 4 : 8; /* values in 16 bytes */
  p.vec = f->t0 % V == 0 && f->W % V == 0 && ((uintptr_t)f->dense & 15) == 0;
  const unsigned threads = f->G0 >= 1024 ? 1024 : 256;
  unsigned tok_blocks = 0;
  if (tok_all && f->K0 > 0 && f->C > 0) {
    p.tok_all = tok_all;
    tok_blocks = (unsigned)((f->G0 * f->C + threads / 32 - 1) / (threads / 32));
  }
  const size_t smem = cuda_ff_route_smem(f);
  switch (f->dt) {
  case APX_DTYPE_F16: return route_t<__half>(st, s, p, smem, threads, tok_blocks);
  case APX_DTYPE_BF16: return route_t<__nv_bfloat16>(st, s, p, smem, threads, tok_blocks);
  default: return route_t<float>(st, s, p, smem, threads, tok_blocks);
  }
}
