/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's FF path (docs/ff_infer.md), shared between
 * ff_infer.cu (weights, scratch, the frame's launches, graph replay),
 * ff_route.cu (routing on the device) and ff_refine.cu (one tile level). */
#ifndef APX_CUDA_FF_H
#define APX_CUDA_FF_H

#include <apexx/ff_backend.h>

#include "cuda_backend.h"
#include "ff_smem.h"

/* Largest channel count the kernels take (shared-memory staging of a
 * token's C values and of a pixel chunk's C depthwise outputs). */
#define CUDA_FF_MAX_C 1024
/* Largest L0 grid the routing block sorts in shared memory. */
#define CUDA_FF_MAX_G0 16384

/* One level's weights on the device, fp32; the derived scan and gate
 * vectors already rounded to the frame's dtype (docs/ff_infer.md). The
 * matrices are stored input-major (w0t[c*C + o] = mlp0_weight[o, c],
 * pwt[c*2C + o] = pw_weight[o, c]): a thread an output reads them
 * coalesced. */
struct cuda_ff_level {
  const float *decay[2], *ig[2], *og[2], *sb[2];
  const float *gate;                  /* merge gate g, [C] */
  const float *ln_w, *ln_b;           /* [C] */
  const float *w0t, *b0;              /* [C*C], [C] */
  const float *w2t, *b2;              /* [C*2C], [2C] */
  const float *dw, *dwb;              /* [C*9], [C] */
  const float *pwt, *pwb;             /* [C*2C], [2C] */
  const float *nw, *nb;               /* [2C] */
  /* f16/bf16 frames with C % 16 == 0 (else NULL): pw_weight split into
   * bf16 hi + lo (hi = bf16(w), lo = bf16(w - hi)) in the A-fragment order
   * of mma.m16n8k16: [2C/16 row tiles][C/16 k steps][32 lanes][hi, lo]
   * (CUDA_FF_PWF_AT) */
  const uint4 *pwf;
  float wb, wu, gb;                   /* fusion gate: softplus weights, bias */
};

/* The uint32 word r (0..3, a0..a3) of lane l's A fragment of the 16x16
 * weight block (row tile mt, k step ks): rows g, g+8, g, g+8 and columns
 * 2q, 2q, 2q+8, 2q+8 (+1 in the high half), g = l / 4, q = l % 4. */
#define CUDA_FF_PWF_ROW(l, r) ((l) / 4 + 8 * ((r) & 1))
#define CUDA_FF_PWF_COL(l, r) (2 * ((l) % 4) + 8 * ((r) >> 1))

struct cuda_ff_prepared {
  void *dev;      /* one device allocation holding every array */
  size_t bytes;
  int64_t channels;
  cuda_ff_level level[2];
};

/* Per-tile state of the L0 grid the router writes (cuda_ff_route). */
enum { CUDA_FF_TILE_OUT = 0, CUDA_FF_TILE_L0 = 1, CUDA_FF_TILE_PARENT = 2 };

/* The routing's device outputs, carved from the frame's scratch. The first
 * six arrays are contiguous (one copy to the host for the stats). */
struct cuda_ff_route_dev {
  int64_t *l0_count, *l1_count;  /* [B] */
  double *b1_spent, *b2_spent;   /* [B] */
  int64_t *l0_greedy;            /* [B,kmax0], -1 padded */
  int64_t *l1_ids;               /* [B,kmax1], Hilbert order, -1 padded */
  unsigned long long *nan_pos;   /* [B,2]: first NaN of utilities / split
                                    utilities in the row, ~0 when none */
  int *l0_order;                 /* [B,kmax0]: level 0's ids in the call's
                                    order_mode (cuda_ff_frame.order) */
  int *l1_order;                 /* [B,kmax1]: level 1's, likewise */
  int *tile_state;               /* [B,G0] */
};

/* Host-side description of one frame. */
struct cuda_ff_frame {
  apx_dtype dt;
  int64_t B, C, H, W;
  int64_t t0, t1, gh0, gw0, G0;
  int64_t kmax0, kmax1;
  int64_t K0, P, K1; /* L0 tiles, parents, L1 tiles (the same in every row) */
  double delta, b1, b2;
  int split_on;      /* the split stage runs */
  int dev;           /* device index */
  int cw[2];         /* per level: pixels a block of the fused refine (16,
                        32), 0: the two-kernel refine (cuda_ff_fused_width) */
  const void *dense, *util, *split, *bp, *up;
  apx_dtype util_dt, split_dt, bp_dt, up_dt;
  void *heavy, *detail, *alpha;
  /* the FFModule's options (docs/ff_infer.md, Options); part of the graph
   * key with the rest of the frame */
  int order;            /* apx_order_mode of both levels' id lists */
  int scan_fwd;         /* scan_mode forward: no backward stream, no merge */
  int blend;            /* overlap_mode blend */
  float blend_a, blend_om; /* rnd(blend_alpha), rnd(1 - blend_a) (blend) */
};

/* Launch the router: one block per batch row; with tok_all (and K0 > 0)
 * more blocks write level 0's tokens of every tile, [B,G0,C]. */
apx_status cuda_ff_route(cuda_state *st, int device_index, cudaStream_t s,
                         const cuda_ff_frame *f, const cuda_ff_route_dev *r, float *tok_all);

/* Scratch of one level's compute, in floats. */
struct cuda_ff_level_scratch {
  float *tok;      /* [B,K,C], or [B,tok_G,C] by tile id (cuda_ff_level_run) */
  float *tok1;     /* [B,4*G0,C]: level 1's tokens by tile id, written by level
                      0's refine where cuda_ff_tok1 */
  float *film;     /* [B,K,2C]: gamma, beta */
  float *p;        /* [B,K,2C,t*t] the pointwise conv's output (two-kernel refine) */
  float *partials; /* [B,K,chunks,3] (count, mean, M2) (two-kernel refine) */
};

/* How a level stores its refined tiles. */
enum {
  CUDA_FF_STORE_SINGLE = 0, /* the only level: heavy, detail = heavy - X */
  CUDA_FF_STORE_L0 = 1,     /* level 0 of two: parents' pixels -> detail
                               (level 1's input), others final */
  CUDA_FF_STORE_L1 = 2      /* level 1: X = detail, in place */
};

/* Run one level (tokens, scan + FiLM, refine, store) over K tiles per row
 * whose ids (in the frame's order_mode) are ids[b*kstride + k] on a grid gw wide.
 * tok_G > 0: the tokens are already in sc->tok, [B,tok_G,C] by tile id (the
 * router's for level 0, level 0's refine's for level 1); 0: the level's
 * tokens kernel writes them, [B,K,C].
 * outside: the scan's launch also does the outside pass (cuda_ff_outside). */
apx_status cuda_ff_level_run(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                             const cuda_ff_prepared *w, int level, int store_mode,
                             const void *X, int64_t t, int64_t gw, const int *ids,
                             int64_t kstride, int64_t K, const int *tile_state,
                             const cuda_ff_level_scratch *sc, int64_t tok_G, int outside);

/* Does level 0's refine write level 1's tokens (sc->tok1)? (two levels,
 * tiles of 16 on the tensor-core refine) */
int cuda_ff_tok1(const cuda_ff_frame *f, const cuda_ff_prepared *w);

/* Pixels a block of the fused refine of a level takes (16 or 32: a
 * cluster per tile, sm_90), or 0 where the level needs the two-kernel
 * refine (more than 8 blocks a tile, shared memory, older devices). */
int cuda_ff_fused_width(cuda_state *st, int dev, const cuda_ff_frame *f, int64_t t, int64_t K);

/* Pixels outside every L0 tile, and alpha everywhere. */
apx_status cuda_ff_outside(cuda_state *st, cudaStream_t s, const cuda_ff_frame *f,
                           const cuda_ff_prepared *w, const int *tile_state);

/* Shared-memory bytes of the routing block. */
size_t cuda_ff_route_smem(const cuda_ff_frame *f);

/* Release the graph cache (backend fini). */
void cuda_ff_fini(cuda_state *st);

/* ---- the frame's block timeline (a diagnostic build: -DAPEXX_FF_TIMELINE) ----
 * Each kernel of the frame stamps, a block a record, the %globaltimer at its
 * start and after its wait (thread 0) and at its end (the last warp out);
 * the records of one frame are read by the host (cuda_ff_infer,
 * $APEXX_FF_TIMELINE, docs/performance.md "The frame's timeline"). Kinds
 * (the levels told apart by their tile size, 16 and 8: the default
 * profile's). Off (the default build): no code. */
enum {
  FF_TL_ROUTE, FF_TL_ROUTE_TOK, FF_TL_TOKENS, FF_TL_SCAN0, FF_TL_SCAN1, FF_TL_OUTSIDE_EARLY,
  FF_TL_REFINE0, FF_TL_REFINE1, FF_TL_OUTSIDE, FF_TL_KINDS
};
#define FF_TL_SLOTS 2048
struct ff_tl_rec {
  unsigned long long start, waited, end;
  unsigned sm, used;
  unsigned long long ph[6]; /* thread 0 at points of the kernel's body */
  unsigned long long cstart, cph[6]; /* thread 0's clock64 at start and those points */
};
#ifdef APEXX_FF_TIMELINE
static __device__ ff_tl_rec ff_tl_buf[FF_TL_KINDS * FF_TL_SLOTS];
static __device__ __forceinline__ unsigned long long ff_tl_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
struct ff_tl_scope {
  ff_tl_rec *r;
  __device__ explicit ff_tl_scope(int kind) {
    const unsigned blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r = blk < FF_TL_SLOTS ? &ff_tl_buf[kind * FF_TL_SLOTS + blk] : nullptr;
    if (r && threadIdx.x == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      r->start = ff_tl_now();
      r->cstart = clock64();
      r->sm = sm;
      r->used = 1;
    }
  }
  __device__ void waited() {
    if (r && threadIdx.x == 0) r->waited = ff_tl_now();
  }
  __device__ void phase(int i) {
    if (r && threadIdx.x == 0) {
      r->ph[i] = ff_tl_now();
      r->cph[i] = clock64();
    }
  }
  __device__ ~ff_tl_scope() {
    if (r && (threadIdx.x & 31) == 0) atomicMax(&r->end, ff_tl_now());
  }
};
#define FF_TL(kind) ff_tl_scope ff_tl_(kind)
#define FF_TL_WAITED() ff_tl_.waited()
#define FF_TL_PHASE(i) ff_tl_.phase(i)
/* A translation unit's records: cleared on s, and read (after a wait) */
#define FF_TL_HOST(name)                                                       \
  void name##_clear(cudaStream_t s) {                                          \
    void *p = NULL;                                                            \
    if (cudaGetSymbolAddress(&p, ff_tl_buf) == cudaSuccess)                    \
      cudaMemsetAsync(p, 0, sizeof ff_tl_buf, s);                              \
  }                                                                            \
  int name##_read(ff_tl_rec *h) {                                              \
    return cudaMemcpyFromSymbol(h, ff_tl_buf, sizeof ff_tl_buf) == cudaSuccess; \
  }
void cuda_ff_tl_route_clear(cudaStream_t s);
int cuda_ff_tl_route_read(ff_tl_rec *h);
void cuda_ff_tl_refine_clear(cudaStream_t s);
int cuda_ff_tl_refine_read(ff_tl_rec *h);
#else
#define FF_TL(kind) ((void)0)
#define FF_TL_WAITED() ((void)0)
#define FF_TL_PHASE(i) ((void)0)
#endif

#endif
