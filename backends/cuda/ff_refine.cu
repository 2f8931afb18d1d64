/* SPDX-License-Identifier: Apache-2.0 */
/* cuda backend: one tile level of the FF path (docs/ff_infer.md "One
 * level", steps 1-9) and the pixels outside every tile.
 *
 * Per level, four kernels over the K selected tiles of each batch row:
 *   tokens     the mean of each tile's channel (a warp a channel);
 *   scan_film  a block a token: the bidirectional scan of its row up to
 *              it from both ends (forward and backward chains and the gated
 *              merge in one pass over the row's tokens; scan_mode forward:
 *              the forward chain alone), then LayerNorm,
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
 *              a plain write (blend: one blend over X, ff_unpack).
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
/* Layers: ff_refine.h (the kernels' arguments, launch tuning), the
 * kernels in ff_refine_common.cuh, ff_refine_scan.cuh,
 * ff_refine_conv.cuh, ff_refine_fused.cuh and ff_refine_tc.cuh; here the
 * launch switch and the level's entries. */
#include "cuda_ff.h"

#include <cooperative_groups.h>

#include "ff_refine.h"
#include "ff_refine_common.cuh"
#include "ff_refine_scan.cuh"
#include "ff_refine_conv.cuh"
#include "ff_refine_fused.cuh"
#include "ff_refine_tc.cuh"

#ifdef APEXX_FF_TIMELINE
FF_TL_HOST(cuda_ff_tl_refine)
#endif

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
  /* the cluster kernels are built for sm_90 on (older code: __trap) */
  if (st->dev[dev].code_arch < 90 || K <= 0 || t <= 0) return 0;
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const int64_t tt = t * t, sms = st->dev[dev].sm_count > 0 ? st->dev[dev].sm_count : 132;
  /* 16-pixel blocks where 32-pixel ones would leave SMs idle */
  int cw = f->B * K * ((tt + 31) / 32) < sms && (tt + 15) / 16 <= 8 ? 16 : 32;
  /* tiles whose 16-pixel form runs on the tensor cores and whose 32-pixel
   * form does not keep 16-pixel blocks at any batch */
  if (cw == 32 && (tt + 15) / 16 <= 8 && (f->dt == APX_DTYPE_F16 || f->dt == APX_DTYPE_BF16) &&
      tc_smem(f->C, t, 16) > 0 && tc_smem(f->C, t, 32) == 0)
    cw = 16;
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
  g.scan_fwd = f->scan_fwd;
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
  const unsigned sf_threads = cuda_ff_sf_threads(f->C);
  const unsigned n_out = outside ? outside_blocks(f, sf_threads) : 0;
  /* the row's tokens staged in shared memory where they take 32 KiB at
   * most; the C -> C layer's weights where they take 64 KiB at most (C <=
   * 128, even: 16-byte copies); each only where it fits the device's
   * shared memory a block (99 KiB on cc 8.6, 8.9 and 12.x, 64 KiB on 7.5;
   * 1 KiB kept for the static arrays) */
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, f->dev) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    optin = 48 * 1024;
  }
  const size_t room = cuda_ff_smem_room((size_t)optin);
  size_t sf_smem = cuda_ff_sf_smem_bytes(f->C);
  const size_t stage_bytes = sizeof(float) * (size_t)((K * f->C + 3) / 4 * 4);
  const int stage = K * f->C <= 8192 && sf_smem + stage_bytes <= room;
  if (stage) sf_smem += stage_bytes;
  const size_t w0_bytes = sizeof(float) * (size_t)(f->C * f->C);
  int wstage = f->C <= 128 && f->C % 2 == 0 && sf_smem + w0_bytes <= room ? 1 : 0;
  if (wstage) sf_smem += w0_bytes;
  /* the C -> 2C layer's weights too where they fit and the launch has no
   * outside blocks (which get the same shared memory: two a multiprocessor
   * beside level 0's refine) */
  if (wstage && n_out == 0 && sf_smem + 2 * w0_bytes <= room) {
    wstage |= 2;
    sf_smem += 2 * w0_bytes;
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
  a.blend = f->blend;
  a.blend_a = f->blend_a;
  a.blend_om = f->blend_om;
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
  const size_t smem = cuda_ff_conv_smem_bytes(f->C);
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
