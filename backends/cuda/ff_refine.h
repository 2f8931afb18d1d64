/* SPDX-License-Identifier: Apache-2.0 */
/* One tile level of the FF path on CUDA (ff_refine.cu): what its kernels
 * are given and the launch tuning, in one place. The kernels:
 * ff_refine_common.cuh (rounding, block sums, the fusion gate),
 * ff_refine_scan.cuh (tokens, scan + FiLM, the outside pass),
 * ff_refine_conv.cuh (the two-kernel refine), ff_refine_fused.cuh and
 * ff_refine_tc.cuh (the refine of a tile in one cluster, sm_90); the
 * launch switch: ff_refine.cu. */
#ifndef APX_CUDA_FF_REFINE_H
#define APX_CUDA_FF_REFINE_H

#include "cuda_ff.h"

struct ff_geom {
  int64_t B, C, H, W, t, gw, K, kstride;
  const int *ids;
  int64_t tok_G; /* > 0: tok holds every tile of a row, [B,tok_G,C] by id;
                    0: [B,K,C] by position */
  int scan_fwd;  /* scan_mode forward: mixed = the forward stream's output */
};

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

/* The two-kernel refine's register tile (ff_conv_kernel) */
#define FF_TO 8 /* outputs a thread */
#define FF_TP 4 /* pixels a thread */

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
  /* overlap_mode blend: the refined tile r blended over the level's X,
   * U = rnd(rnd(blend_om * X) + rnd(blend_a * r)), before the fusion gate;
   * 0: override (U = r) */
  int blend;
  float blend_a, blend_om;
};

/* The refine of a tile in one cluster (ff_fused_kernel, ff_tc_kernel) */
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

/* ff_tc_kernel's layout for the tile sizes the launch fixes */
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

#endif /* APX_CUDA_FF_REFINE_H */
