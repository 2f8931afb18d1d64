/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: the end-to-end FF path, docs/ff_infer.md (docs/ops.md, ff_infer).
 *
 * Per call: the prepared weights from the core's cache (services.cache, the
 * one call into the core; ff_prepare.c), the routing on the host
 * (apx_ff_route_host, common/apx_ff_route.h: linked in), then level 0 on
 * dense and level 1 on its result. A level runs in phases, each parallel
 * over independent items (tiles, tokens, rows), so the bits do not depend
 * on the thread count: pack and token means per tile, the scan per batch
 * row, FiLM parameters per token, the refine block per tile (its result
 * written at the tile's pixels of the level's output buffer), then one pass
 * over the whole map that fuses X with the unpacked map. heavy_l0 lives in
 * the `detail` output until the last pass turns it into detail = heavy -
 * heavy_l0. The model steps themselves are ff_model.c's. */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "apx_ff_route.h"
#include "ff_cpu.h"
#include "ff_simd.h"

/* ---- frame access ------------------------------------------------------------ */

static inline float load_any(apx_dtype dt, const void *p, int64_t i) {
  if (dt == APX_DTYPE_F32)
    return ((const float *)p)[i];
  if (dt == APX_DTYPE_F16)
    return apx_f16_to_f32(((const uint16_t *)p)[i]);
  return apx_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* 8 f16 / bf16 values <-> 8 fp32 lanes with GCC vector operations (the
 * same bits as apx_half.h, checked on every f16 and bf16 value): f16 to
 * fp32 scales the shifted magnitude by 2^112 (exact for normal and
 * subnormal values) and rebuilds inf and NaN (quiet); fp32 values of the
 * dtype back to f16 take the exponent down by 112, subnormals scaled by
 * 2^24, inf and NaN (payload cut, quiet); back to bf16 the top half, NaN
 * quietened. */
typedef uint16_t ff_h8 __attribute__((vector_size(16)));
typedef uint16_t ff_h8u __attribute__((vector_size(16), aligned(2), may_alias));

static inline __attribute__((always_inline)) void v8_from_half(apx_dtype dt, int hw,
                                                               const uint16_t *src, float *dst) {
#if FF_HAVE_X86
  if (hw && dt == APX_DTYPE_F16) {
    v8_f16_to_f32_f16c(src, dst);
    return;
  }
#endif
  (void)hw;
  const ff_u8 h = __builtin_convertvector(*(const ff_h8u *)(const void *)src, ff_u8);
  ff_u8 r;
  if (dt == APX_DTYPE_BF16) {
    r = h << 16;
  } else {
    const ff_u8 em = h & U8_SET(0x7fffu), man = h & U8_SET(0x3ffu);
    const ff_u8 fin = (ff_u8)((ff_v8)(em << 13) * V8_SET(0x1p112f));
    const ff_u8 special = (ff_u8)(em >= U8_SET(0x7c00u));
    const ff_u8 quiet = (ff_u8)(man != U8_SET(0u)) & U8_SET(0x400000u);
    r = (special & (U8_SET(0x7f800000u) | (man << 13) | quiet)) | (~special & fin);
    r |= (h & U8_SET(0x8000u)) << 16;
  }
  V8_STORE(dst, (ff_v8)r);
}

static inline __attribute__((always_inline)) void v8_to_half(apx_dtype dt, int hw, const float *src,
                                                             uint16_t *dst) {
#if FF_HAVE_X86
  if (hw && dt == APX_DTYPE_F16) {
    v8_f32_to_f16_f16c(src, dst);
    return;
  }
#endif
  (void)hw;
  const ff_u8 u = (ff_u8)V8_LOAD(src);
  ff_u8 r;
  if (dt == APX_DTYPE_BF16) {
    const ff_u8 nan = (ff_u8)((u & U8_SET(0x7fffffffu)) > U8_SET(0x7f800000u)) & U8_SET(0x40u);
    r = (u >> 16) | nan;
  } else {
    const ff_u8 mag = u & U8_SET(0x7fffffffu);
    const ff_u8 normal = (mag >> 13) - U8_SET(112u << 10);
    const ff_u8 sub = (ff_u8) __builtin_convertvector((ff_v8)mag * V8_SET(0x1p24f), ff_i8);
    const ff_u8 nan = (ff_u8)(mag > U8_SET(0x7f800000u)) & U8_SET(0x200u);
    const ff_u8 spec = U8_SET(0x7c00u) | ((mag >> 13) & U8_SET(0x3ffu)) | nan;
    const ff_u8 tiny = (ff_u8)(mag < U8_SET(0x38800000u));
    const ff_u8 special = (ff_u8)(mag >= U8_SET(0x7f800000u));
    r = (tiny & sub) | (~tiny & ~special & normal) | (special & spec);
    r |= (u >> 16) & U8_SET(0x8000u);
  }
  *(ff_h8u *)(void *)dst = __builtin_convertvector(r, ff_h8);
}

/* n elements from p + i into fp32 dst (exact; hw: F16C may be used) */
static inline __attribute__((always_inline)) void load_row(apx_dtype dt, int hw, const void *p,
                                                           int64_t i, int64_t n, float *dst) {
  if (dt == APX_DTYPE_F32) {
    memcpy(dst, (const float *)p + i, (size_t)n * sizeof(float));
    return;
  }
  const uint16_t *h = (const uint16_t *)p + i;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    v8_from_half(dt, hw, h + k, dst + k);
  for (; k < n; k++)
    dst[k] = dt == APX_DTYPE_F16 ? apx_f16_to_f32(h[k]) : apx_bf16_to_f32(h[k]);
}

/* n fp32 values (already values of dt) into p + i (hw: F16C may be used) */
static inline __attribute__((always_inline)) void store_row(apx_dtype dt, int hw, void *p,
                                                            int64_t i, int64_t n, const float *src) {
  if (dt == APX_DTYPE_F32) {
    memcpy((float *)p + i, src, (size_t)n * sizeof(float));
    return;
  }
  uint16_t *h = (uint16_t *)p + i;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    v8_to_half(dt, hw, src + k, h + k);
  for (; k < n; k++)
    h[k] = dt == APX_DTYPE_F16 ? apx_f32_to_f16(src[k]) : apx_f32_to_bf16(src[k]);
}

static inline int ff_thread(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* ---- one call ---------------------------------------------------------------- */

typedef struct ff_call {
  const cpu_state *st;
  const cpu_ff_prepared *prep;
  apx_dtype dt;
  int64_t B, C, H, W;
  int simd;
  int threads;
  const apx_tensor *boundary, *uncertainty; /* proxies, NULL when absent */
  int scan_forward;                         /* scan_mode forward: the forward stream alone */
  int blend;                                /* overlap_mode blend: r blended over the tile's X */
  float blend_a, blend_om;                  /* rnd(blend_alpha), rnd(1 - that) */
  size_t blend_at;                          /* where X's copy starts in a thread's scratch */
} ff_call;

/* Tiles of a batch row still to pack, per level: the thread that packs the
 * last one runs the row's scan (no barrier between the pack and the scan). */
typedef _Atomic int64_t ff_counter;
_Static_assert(sizeof(ff_counter) == sizeof(int64_t), "ff_counter lives in an int64 block");

/* One level's tiles over the call's batch rows: tile i is (b, id) =
 * (tiles[2i], tiles[2i+1]), rows' tiles consecutive in pack order (first[b]
 * .. first[b+1]); slot[b*grid + id] is the tile's index, -1 for a cell not
 * selected. P [total][C][t*t] holds the packed X (fp32 copies of frame
 * values), then the refine block's r in place. */
typedef struct ff_level_run {
  int64_t t, N, grid_w, total;
  int64_t *tiles, *first;
  int32_t *slot;
  float *P, *tok, *mixed, *gamma, *beta;
} ff_level_run;

/* n fp32 values of dt from p + i (exact) into dst; f32 inline (a tile row
 * is a few dozen bytes: a libc memcpy call per row costs more than it). */
static inline __attribute__((always_inline)) void load_short(apx_dtype dt, int hw, const void *p,
                                                             int64_t i, int64_t n, float *dst) {
  if (dt == APX_DTYPE_F32) {
    const float *s = (const float *)p + i;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
      V8_STORE(dst + k, V8_LOAD(s + k));
    for (; k < n; k++)
      dst[k] = s[k];
  } else {
    load_row(dt, hw, p, i, n, dst);
  }
}

/* Steps 1-2 of level 0 for tile i: pack dense's pixels, the token mean. */
static void pack0_tile(const ff_call *fc, const void *dense, ff_level_run *lr, int64_t i) {
  const apx_dtype dt = fc->dt;
  const int64_t C = fc->C, H = fc->H, W = fc->W, t = lr->t, N = lr->N;
  const int64_t b = lr->tiles[2 * i], id = lr->tiles[2 * i + 1];
  const int64_t y0 = (id / lr->grid_w) * t, x0 = (id % lr->grid_w) * t;
  float *P = lr->P + (size_t)i * (size_t)(C * N);
  const size_t esize = dt == APX_DTYPE_F32 ? 4 : 2;
  for (int64_t c = 0; c < C; c++) {
    /* the tile's rows are a stride apart that the hardware prefetchers do
     * not follow across pages: ask for channel c + 2's rows now */
    if (c + 2 < C)
      for (int64_t y = 0; y < t; y++)
        __builtin_prefetch((const char *)dense +
                           (size_t)(((b * C + c + 2) * H + y0 + y) * W + x0) * esize);
    for (int64_t y = 0; y < t; y++)
      load_short(dt, 0, dense, ((b * C + c) * H + y0 + y) * W + x0, t, P + c * N + y * t);
  }
  cpu_ff_tokens(dt, P, C, N, lr->tok + i * C);
}

/* out = fuse(x, u, a) over n values, 8 lanes at a time */
static inline __attribute__((always_inline)) void fuse_run(apx_dtype dt, int hw, const float *x,
                                                           const float *u, const float *a,
                                                           float *out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const ff_v8 xv = V8_LOAD(x + i);
    V8_STORE(
        out + i,
        V8_RND(dt, hw, xv + V8_RND(dt, hw, V8_LOAD(a + i) * V8_RND(dt, hw, V8_LOAD(u + i) - xv))));
  }
  for (; i < n; i++)
    out[i] = cpu_ff_fuse(dt, x[i], u[i], a[i]);
}

/* One L1 tile's pack (see pack_heavy_l0), instantiated for the baseline and
 * for AVX2 (the same bits). */
static inline __attribute__((always_inline)) void
pack_l1_tile_body(apx_dtype dt, int hw, const void *dense, int64_t b, int64_t C, int64_t H,
                  int64_t W, int64_t y0, int64_t x0, int64_t t, const ff_level_run *l0,
                  int64_t grid0, const float *alpha0, float *P) {
  const int64_t N = t * t, t0 = l0->t;
  for (int64_t y = 0; y < t; y++) {
    const int64_t Y = y0 + y;
    const int32_t s0 = l0->slot[b * grid0 + (Y / t0) * l0->grid_w + x0 / t0];
    const float *a = alpha0 + (b * H + Y) * W + x0;
    for (int64_t c = 0; c < C; c++) {
      float *h = P + c * N + y * t;
      if (c + 4 < C) /* channels are a page or more apart: fetch ahead */
        __builtin_prefetch((const char *)dense + (size_t)(((b * C + c + 4) * H + Y) * W + x0) *
                                                     (dt == APX_DTYPE_F32 ? 4 : 2));
      load_short(dt, hw, dense, ((b * C + c) * H + Y) * W + x0, t, h);
      const float *u = s0 < 0 ? h
                              : l0->P + ((size_t)s0 * (size_t)C + (size_t)c) * (size_t)l0->N +
                                    (Y % t0) * t0 + x0 % t0;
      fuse_run(dt, hw, h, u, a, h, t);
    }
  }
}

static void pack_l1_tile_base(apx_dtype dt, const void *dense, int64_t b, int64_t C, int64_t H,
                              int64_t W, int64_t y0, int64_t x0, int64_t t, const ff_level_run *l0,
                              int64_t grid0, const float *alpha0, float *P) {
  pack_l1_tile_body(dt, 0, dense, b, C, H, W, y0, x0, t, l0, grid0, alpha0, P);
}

#if FF_HAVE_X86
__attribute__((target("avx2,f16c"))) static void
pack_l1_tile_avx2(apx_dtype dt, const void *dense, int64_t b, int64_t C, int64_t H, int64_t W,
                  int64_t y0, int64_t x0, int64_t t, const ff_level_run *l0, int64_t grid0,
                  const float *alpha0, float *P) {
  pack_l1_tile_body(dt, 1, dense, b, C, H, W, y0, x0, t, l0, grid0, alpha0, P);
}
#endif

/* Steps 1-2 of level 1 for tile i: its X is heavy_l0 = fuse(dense, U0,
 * alpha0), which is computed here at the L1 tiles' pixels only (from dense
 * and level 0's r), never as a whole map. An L1 tile row lies in one L0
 * cell (t1 = t0/2, validated by the core). */
static void pack1_tile(const ff_call *fc, const void *dense, const ff_level_run *l0,
                       const float *alpha0, ff_level_run *lr, int64_t i) {
  const apx_dtype dt = fc->dt;
  const int64_t C = fc->C, H = fc->H, W = fc->W, t = lr->t, N = lr->N;
  const int64_t grid0 = (H / l0->t) * l0->grid_w;
  const int64_t b = lr->tiles[2 * i], id = lr->tiles[2 * i + 1];
  const int64_t y0 = (id / lr->grid_w) * t, x0 = (id % lr->grid_w) * t;
  float *P = lr->P + (size_t)i * (size_t)(C * N);
#if FF_HAVE_X86
  if (fc->simd)
    pack_l1_tile_avx2(dt, dense, b, C, H, W, y0, x0, t, l0, grid0, alpha0, P);
  else
#endif
    pack_l1_tile_base(dt, dense, b, C, H, W, y0, x0, t, l0, grid0, alpha0, P);
  cpu_ff_tokens(dt, P, C, N, lr->tok + i * C);
}

/* Step 3 of level li for batch row b: the scan over its tokens, in
 * scan_mode's direction. */
static void scan_row(const ff_call *fc, int li, ff_level_run *lr, int64_t b) {
  const int64_t C = fc->C, k = lr->first[b], K = lr->first[b + 1] - k;
  if (K == 0)
    return;
  if (fc->scan_forward)
    cpu_ff_scan_forward(&fc->prep->level[li], fc->dt, lr->tok + k * C, K, C, lr->mixed + k * C);
  else
    cpu_ff_scan_merge(&fc->prep->level[li], fc->dt, lr->tok + k * C, K, C, lr->mixed + k * C);
}

/* Step 7 in blend mode for one tile (docs/ff_infer.md, Options; docs/ops.md,
 * tileunpack, Blend): the level's tiles never overlap, so each pixel of a
 * selected tile is one blend over X, r = rnd(rnd(om * x) + rnd(a * r)); the
 * final pass then writes r as the override does. */
static void blend_tile(const ff_call *fc, const float *x, float *r, int64_t n) {
  const apx_dtype dt = fc->dt;
  for (int64_t i = 0; i < n; i++)
    r[i] = cpu_ff_rnd(dt, cpu_ff_rnd(dt, fc->blend_om * x[i]) + cpu_ff_rnd(dt, fc->blend_a * r[i]));
}

/* Steps 4-6 of level li for tile i: FiLM parameters, FiLM apply and the
 * refine block, r in place of the tile (in blend mode, step 7's blend over
 * the tile's X too). buf: the thread's scratch (cpu_ff_refine_scratch(C,
 * t) + 3C floats, then C*t*t for X in blend mode). */
static void refine_tile(const ff_call *fc, int li, ff_level_run *lr, int64_t i, float *buf) {
  const cpu_ff_level *lv = &fc->prep->level[li];
  const int64_t C = fc->C, N = lr->N, t = lr->t;
  float *P = lr->P + (size_t)i * (size_t)(C * N);
  float *x = buf + fc->blend_at;
  if (fc->blend)
    memcpy(x, P, (size_t)(C * N) * sizeof(float));
  cpu_ff_film_run(lv, fc->dt, fc->simd, C, lr->mixed + i * C, buf + cpu_ff_refine_scratch(C, t),
                  lr->gamma + i * C, lr->beta + i * C);
  cpu_ff_refine(lv, fc->dt, C, t, P, lr->gamma + i * C, lr->beta + i * C, buf, fc->simd, P);
  if (fc->blend)
    blend_tile(fc, x, P, C * N);
}

/* Step 8's alpha of level li for row `row` (b*H + y) of the [B][H][W] map,
 * into alpha (fp32 holding frame values). */
static void alpha_row(const ff_call *fc, int li, const apx_tensor *boundary,
                      const apx_tensor *uncertainty, int64_t row, float *alpha) {
  const cpu_ff_level *lv = &fc->prep->level[li];
  const apx_dtype dt = fc->dt;
  const int64_t i0 = row * fc->W;
  for (int64_t i = i0; i < i0 + fc->W; i++) {
    float bp = boundary ? cpu_ff_proxy(dt, load_any(boundary->dtype, boundary->data, i)) : 1.0f;
    float up =
        uncertainty ? cpu_ff_proxy(dt, load_any(uncertainty->dtype, uncertainty->data, i)) : 1.0f;
    alpha[i] = cpu_ff_alpha(lv, dt, bp, up);
  }
}

/* One row (b, c, y) of the final pass on fp32 values of the frame dtype, in
 * runs of t1 pixels (each in one L0 cell and one L1 cell): x = dense, U0 =
 * level 0's r (r0: the row of the tile at slot s0[cell], or x outside the
 * L0 tiles), U1 = level 1's r (likewise; X1 = heavy_l0 outside the L1
 * tiles). heavy_l0 = fuse(x, U0, a0); with L1 tiles in the batch row heavy
 * = fuse(heavy_l0, U1, a1) and detail = rnd(heavy - heavy_l0), without
 * heavy = heavy_l0 and detail = rnd(heavy_l0 - x). r0 and r1 point at the
 * row's channel c, row y % t of tile slot 0; tile slot k is k * tile_stride
 * floats on. */
typedef struct ff_row_src {
  const int32_t *s0, *s1; /* the row's cells of each grid (s1 NULL: no L1 tiles) */
  const float *r0, *r1;
  size_t stride0, stride1;
  int64_t t0, t1;
} ff_row_src;

static inline __attribute__((always_inline)) void
final_row_body(apx_dtype dt, int hw, const ff_row_src *rs, const float *x, const float *a0,
               const float *a1, float *heavy, float *detail, int64_t W) {
  const int64_t t0 = rs->t0, t1 = rs->t1;
  for (int64_t x0 = 0; x0 < W; x0 += t1) {
    const int32_t k0 = rs->s0[x0 / t0], k1 = rs->s1 ? rs->s1[x0 / t1] : -1;
    const float *u0 = k0 < 0 ? x + x0 : rs->r0 + (size_t)k0 * rs->stride0 + x0 % t0;
    const float *u1 = k1 < 0 ? NULL : rs->r1 + (size_t)k1 * rs->stride1;
    const float *xr = x + x0, *a0r = a0 + x0, *a1r = a1 + x0;
    float *h = heavy + x0, *d = detail + x0;
    int64_t i = 0;
    /* 8 lanes at a time (rnd: v8_rnd, nothing for f32) */
    for (; i + 8 <= t1; i += 8) {
      const ff_v8 xv = V8_LOAD(xr + i);
      const ff_v8 h0 = V8_RND(
          dt, hw, xv + V8_RND(dt, hw, V8_LOAD(a0r + i) * V8_RND(dt, hw, V8_LOAD(u0 + i) - xv)));
      if (rs->s1) {
        const ff_v8 uv = u1 ? (ff_v8)V8_LOAD(u1 + i) : h0;
        const ff_v8 hv =
            V8_RND(dt, hw, h0 + V8_RND(dt, hw, V8_LOAD(a1r + i) * V8_RND(dt, hw, uv - h0)));
        V8_STORE(h + i, hv);
        V8_STORE(d + i, V8_RND(dt, hw, hv - h0));
      } else {
        V8_STORE(h + i, h0);
        V8_STORE(d + i, V8_RND(dt, hw, h0 - xv));
      }
    }
    for (; i < t1; i++) {
      const float h0 = cpu_ff_fuse(dt, xr[i], u0[i], a0r[i]);
      if (rs->s1) {
        const float hv = cpu_ff_fuse(dt, h0, u1 ? u1[i] : h0, a1r[i]);
        h[i] = hv;
        d[i] = cpu_ff_rnd(dt, hv - h0);
      } else {
        h[i] = h0;
        d[i] = cpu_ff_rnd(dt, h0 - xr[i]);
      }
    }
  }
}

/* The row at element `at` of the frames: f32 straight on them, f16 and
 * bf16 through the fp32 row buffer rb (3W floats). */
static inline __attribute__((always_inline)) void
final_frame_row_body(apx_dtype dt, int hw, const ff_row_src *rs, const void *dense, void *heavy,
                     void *detail, int64_t at, const float *a0, const float *a1, int64_t W,
                     float *rb) {
  if (dt == APX_DTYPE_F32) {
    final_row_body(dt, hw, rs, (const float *)dense + at, a0, a1, (float *)heavy + at,
                   (float *)detail + at, W);
    return;
  }
  load_row(dt, hw, dense, at, W, rb);
  final_row_body(dt, hw, rs, rb, a0, a1, rb + W, rb + 2 * W, W);
  store_row(dt, hw, heavy, at, W, rb + W);
  store_row(dt, hw, detail, at, W, rb + 2 * W);
}

static void final_row_base(apx_dtype dt, const ff_row_src *rs, const void *dense, void *heavy,
                           void *detail, int64_t at, const float *a0, const float *a1, int64_t W,
                           float *rb) {
  final_frame_row_body(dt, 0, rs, dense, heavy, detail, at, a0, a1, W, rb);
}

#if FF_HAVE_X86
__attribute__((target("avx2,f16c"))) static void
final_row_avx2(apx_dtype dt, const ff_row_src *rs, const void *dense, void *heavy, void *detail,
               int64_t at, const float *a0, const float *a1, int64_t W, float *rb) {
  final_frame_row_body(dt, 1, rs, dense, heavy, detail, at, a0, a1, W, rb);
}
#endif

/* Steps 7-9 of both levels and the outputs for row `row` (b, c, y) of the
 * frame: U0 and U1 read from the levels' r, heavy_l0 formed on the fly,
 * heavy and detail written once. f32 rows are computed straight on the
 * frames; f16 and bf16 rows through fp32 row buffers (row_buf: the
 * thread's 3W floats). */
static void final_row(const ff_call *fc, const void *dense, void *heavy, void *detail,
                      const ff_level_run *l0, const ff_level_run *l1, const int64_t *l1_count,
                      const float *alpha0, const float *alpha1, int64_t row, float *row_buf) {
  const apx_dtype dt = fc->dt;
  const int64_t C = fc->C, H = fc->H, W = fc->W;
  const int64_t t0 = l0->t, t1 = l1->t, grid0 = (H / t0) * l0->grid_w,
                grid1 = (H / t1) * l1->grid_w;
  {
    const int64_t b = row / (C * H), c = row / H % C, y = row % H, at = row * W;
    const float *a0 = alpha0 + (b * H + y) * W, *a1 = alpha1 + (b * H + y) * W;
    const ff_row_src rs = {.s0 = l0->slot + b * grid0 + (y / t0) * l0->grid_w,
                           .s1 = l1_count[b] > 0 ? l1->slot + b * grid1 + (y / t1) * l1->grid_w
                                                 : NULL,
                           .r0 = l0->P + c * l0->N + (y % t0) * t0,
                           .r1 = l1->P + c * l1->N + (y % t1) * t1,
                           .stride0 = (size_t)(C * l0->N),
                           .stride1 = (size_t)(C * l1->N),
                           .t0 = t0,
                           .t1 = t1};
#if FF_HAVE_X86
    if (fc->simd)
      final_row_avx2(dt, &rs, dense, heavy, detail, at, a0, a1, W, row_buf);
    else
#endif
      final_row_base(dt, &rs, dense, heavy, detail, at, a0, a1, W, row_buf);
  }
}

#ifdef _OPENMP
#define FF_OMP_(x) _Pragma(#x)
#else
#define FF_OMP_(x)
#endif

/* The frame's tile and map work in one parallel region, four phases apart
 * by barriers (a barrier on a machine shared with other processes costs a
 * descheduled thread's whole wait, so there are as few as the data flow
 * allows):
 *   1. level 0's pack and tokens per tile (the last tile of a batch row
 *      runs the row's scan), both levels' alpha maps per row;
 *   2. level 0's FiLM and refine per tile, then the pack and tokens of its
 *      L1 children (level 1 reads heavy_l0 only inside its parent tile;
 *      the last child of a batch row runs the row's level 1 scan);
 *   3. level 1's FiLM and refine per tile;
 *   4. the final pass per row.
 * Every value is computed by the same code whichever thread runs it, so
 * the bits do not depend on the thread count. */
static void run_frame(const ff_call *fc, const void *dense, void *heavy, void *detail,
                      ff_level_run *lr, const int64_t *l1_count, float *alpha0, float *alpha1,
                      ff_counter *remaining, float *thread_buf, size_t per_thread, float *row_buf) {
  const int64_t B = fc->B, C = fc->C, H = fc->H, W = fc->W;
  const int64_t total0 = lr[0].total, total1 = lr[1].total, map_rows = B * H;
  const int64_t grid0 = (H / lr[0].t) * lr[0].grid_w, grid1 = (H / lr[1].t) * lr[1].grid_w;
  const int64_t frame_rows = B * C * H, chunk = 16;
  const int64_t frame_chunks = (frame_rows + chunk - 1) / chunk;
  (void)grid0;
  CPU_OMP_PARALLEL(fc->threads, frame_rows * W) {
    const int me = ff_thread();
    float *buf = thread_buf + (size_t)me * per_thread;
    float *rbuf = row_buf + (size_t)me * 3 * (size_t)W;
    /* 1. */
    FF_OMP_(omp for schedule(dynamic, 1))
    for (int64_t item = 0; item < total0 + 2 * map_rows; item++) {
      if (item < total0) {
        pack0_tile(fc, dense, &lr[0], item);
        const int64_t b = lr[0].tiles[2 * item];
        if (atomic_fetch_sub(&remaining[b], 1) == 1)
          scan_row(fc, 0, &lr[0], b);
      } else if (item < total0 + map_rows) {
        alpha_row(fc, 0, fc->boundary, fc->uncertainty, item - total0, alpha0);
      } else {
        const int64_t row = item - total0 - map_rows;
        if (l1_count[row / H] > 0)
          alpha_row(fc, 1, fc->boundary, fc->uncertainty, row, alpha1);
      }
    }
    /* 2. */
    FF_OMP_(omp for schedule(dynamic, 1))
    for (int64_t i = 0; i < total0; i++) {
      refine_tile(fc, 0, &lr[0], i, buf);
      if (total1 == 0)
        continue;
      /* the four L1 cells of this L0 cell (t1 = t0 / 2) */
      const int64_t b = lr[0].tiles[2 * i], id = lr[0].tiles[2 * i + 1];
      const int64_t ty = id / lr[0].grid_w, tx = id % lr[0].grid_w, gw1 = lr[1].grid_w;
      for (int q = 0; q < 4; q++) {
        const int64_t cell = (2 * ty + q / 2) * gw1 + 2 * tx + q % 2;
        const int32_t k = lr[1].slot[b * grid1 + cell];
        if (k < 0)
          continue;
        pack1_tile(fc, dense, &lr[0], alpha0, &lr[1], k);
        if (atomic_fetch_sub(&remaining[B + b], 1) == 1)
          scan_row(fc, 1, &lr[1], b);
      }
    }
    /* 3. */
    FF_OMP_(omp for schedule(dynamic, 1))
    for (int64_t i = 0; i < total1; i++)
      refine_tile(fc, 1, &lr[1], i, buf);
    /* 4. */
    FF_OMP_(omp for schedule(dynamic, 1) nowait)
    for (int64_t k = 0; k < frame_chunks; k++)
      for (int64_t row = k * chunk; row < frame_rows && row < (k + 1) * chunk; row++)
        final_row(fc, dense, heavy, detail, &lr[0], &lr[1], l1_count, alpha0, alpha1, row, rbuf);
  }
}

/* ---- the work block ---------------------------------------------------------- */

/* The call's tiles, slots, alpha maps, packed tiles and per-tile and
 * per-thread work live in one block kept in the backend's state from one
 * call to the next (cpu_state.ff_work): a fresh block per call is faulted
 * in page by page on every call (blocks above glibc's mmap ceiling are new
 * mappings each time). */

/* A block of at least `bytes`: the state's kept one when there is one and it
 * is large enough (taken, so that a concurrent call allocates its own), else
 * a new one (a kept block too small is freed). NULL when out of memory. */
static struct cpu_ff_work *work_take(cpu_state *s, size_t bytes) {
  struct cpu_ff_work *w = atomic_exchange(&s->ff_work, NULL);
  if (w && w->bytes >= bytes)
    return w;
  free(w);
  const size_t rounded = (bytes + CPU_FF_WORK_HEAD - 1) / CPU_FF_WORK_HEAD * CPU_FF_WORK_HEAD;
  w = aligned_alloc(CPU_FF_WORK_HEAD, CPU_FF_WORK_HEAD + rounded);
  if (w)
    w->bytes = rounded;
  return w;
}

/* Puts w back into the state; of it and a block another call put back
 * meanwhile, the larger is kept and the other freed. w's size is read
 * before w is published: once in the state, another call may take w and
 * free it. */
static void work_put(cpu_state *s, struct cpu_ff_work *w) {
  const size_t w_bytes = w->bytes;
  struct cpu_ff_work *old = atomic_exchange(&s->ff_work, w);
  if (!old)
    return;
  if (old->bytes > w_bytes) {
    struct cpu_ff_work *expected = w;
    if (atomic_compare_exchange_strong(&s->ff_work, &expected, old)) {
      free(w);
      return;
    }
  }
  free(old);
}

void cpu_ff_work_free(cpu_state *st) { free(atomic_exchange(&st->ff_work, NULL)); }

/* A chunk of the batch's rows run as one frame: rows [b0, b0 + nb) with
 * total0 and total1 tiles. The work of one chunk is laid out in a block by
 * ff_layout; the rows of a chunk are independent of the others' (routing,
 * scan and final pass are per row), so the bits do not depend on the
 * chunking. */
typedef struct ff_layout_in {
  int64_t nb, total0, total1, C, HW, W, N0, N1, grid0, grid1;
  int threads;
  size_t per_thread;
} ff_layout_in;

typedef struct ff_layout_out {
  ff_counter *remaining;
  float *alpha0, *alpha1, *thread_buf, *row_buf;
} ff_layout_out;

/* The bytes of the chunk's work; with a block (base not NULL), lr's arrays
 * and out's pointers set into it. */
static size_t ff_layout(const ff_layout_in *in, char *base, ff_level_run *lr, ff_layout_out *out) {
  const int64_t nb = in->nb, total0 = in->total0, total1 = in->total1, C = in->C;
  const size_t n_i64 = (size_t)(2 * total0 + 2 * total1 + 4 * nb + 2);
  const size_t n_i32 = (size_t)(nb * (in->grid0 + in->grid1)) + 1; /* + 1: keeps floats aligned */
  const size_t n_f32 = (size_t)(2 * nb * in->HW) +
                       (size_t)(total0 * C * in->N0 + total1 * C * in->N1) +
                       4 * (size_t)((total0 + total1) * C) + (size_t)in->threads * in->per_thread +
                       (size_t)in->threads * 3 * (size_t)in->W;
  const size_t bytes = n_i64 * sizeof(int64_t) + n_i32 * sizeof(int32_t) + n_f32 * sizeof(float);
  if (!base)
    return bytes;
  int64_t *work = (int64_t *)(void *)base;
  lr[0].tiles = work;
  lr[0].first = lr[0].tiles + 2 * total0;
  lr[1].tiles = lr[0].first + nb + 1;
  lr[1].first = lr[1].tiles + 2 * total1;
  out->remaining = (ff_counter *)(lr[1].first + nb + 1); /* [2][nb] */
  lr[0].slot = (int32_t *)(out->remaining + 2 * nb);
  lr[1].slot = lr[0].slot + nb * in->grid0;
  out->alpha0 = (float *)(lr[0].slot + n_i32);
  out->alpha1 = out->alpha0 + nb * in->HW;
  lr[0].P = out->alpha1 + nb * in->HW;
  lr[1].P = lr[0].P + total0 * C * in->N0;
  float *cur = lr[1].P + total1 * C * in->N1;
  for (int l = 0; l < 2; l++) {
    lr[l].tok = cur;
    lr[l].mixed = lr[l].tok + lr[l].total * C;
    lr[l].gamma = lr[l].mixed + lr[l].total * C;
    lr[l].beta = lr[l].gamma + lr[l].total * C;
    cur = lr[l].beta + lr[l].total * C;
  }
  out->thread_buf = cur;
  out->row_buf = cur + (size_t)in->threads * in->per_thread;
  return bytes;
}

size_t cpu_ff_chunk_bytes = CPU_FF_CHUNK_BYTES;

/* The chunks of the batch's rows: rows are added to a chunk while its work
 * stays within cpu_ff_chunk_bytes (a chunk has at least one row). chunk_end[k]
 * is the row after chunk k; returns the number of chunks and, in *bytes,
 * the largest chunk's work. */
static int64_t ff_chunks(ff_layout_in in, const apx_ff_route *route, int64_t B, int64_t *chunk_end,
                         size_t *bytes) {
  int64_t n = 0;
  *bytes = 0;
  for (int64_t b0 = 0; b0 < B;) {
    ff_layout_in c = in;
    c.nb = c.total0 = c.total1 = 0;
    size_t have = 0;
    int64_t b = b0;
    for (; b < B; b++) {
      ff_layout_in next = c;
      next.nb++;
      next.total0 += route->l0_count[b];
      next.total1 += route->l1_count[b];
      const size_t need = ff_layout(&next, NULL, NULL, NULL);
      if (c.nb > 0 && need > cpu_ff_chunk_bytes)
        break;
      c = next;
      have = need;
    }
    chunk_end[n++] = b;
    *bytes = have > *bytes ? have : *bytes;
    b0 = b;
  }
  return n;
}

/* The cache's make and release (services.cache): the key is the frame's
 * dtype, the content the handle's apx_ff_params. */
static apx_status make_prepared(void *state, const void *content, uint64_t key, void **prepared) {
  cpu_state *s = state;
  cpu_ff_prepared *p = NULL;
  if (cpu_ff_prepare(content, (apx_dtype)key, &p) != APX_OK)
    return s->svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (weights)");
  *prepared = p;
  return APX_OK;
}

static void release_prepared(void *state, uint64_t key, void *prepared) {
  (void)state;
  (void)key;
  cpu_ff_prepared_free(prepared);
}

/* A [B][1][H][W] map's rows from b0 on, as a tensor of its own (t NULL:
 * an unused zeroed one). */
static apx_tensor rows_from(const apx_tensor *t, int64_t b0, int64_t HW) {
  apx_tensor v;
  memset(&v, 0, sizeof v);
  if (!t)
    return v;
  v = *t;
  v.data = (char *)t->data + (size_t)(b0 * HW) * apx_backend_dtype_size(t->dtype);
  return v;
}

apx_status cpu_ff_infer(void *state, const apx_ff_infer_args *args, const apx_call *call) {
  cpu_state *s = state;
  const apx_core_services *svc = s->svc;
  (void)call;
  if (svc->size < offsetof(apx_core_services, cache) + sizeof svc->cache || !svc->cache)
    return svc->set_error(APX_ERR_UNSUPPORTED,
                          "ff_infer: the core's services table lacks the cache service");
  const apx_tensor *dense = args->dense;
  ff_call fc = {.st = s,
                .dt = dense->dtype,
                .B = dense->shape[0],
                .C = dense->shape[1],
                .H = dense->shape[2],
                .W = dense->shape[3],
                .simd = cpu_ff_simd(),
                .threads = s->threads > 0 ? s->threads : 1};
  if (fc.dt != APX_DTYPE_F32 && fc.dt != APX_DTYPE_F16 && fc.dt != APX_DTYPE_BF16)
    return svc->set_error(APX_ERR_UNSUPPORTED, "ff_infer: dense dtype [%d] is not a float dtype",
                          (int)fc.dt);
  void *prepared = NULL;
  apx_status st = svc->cache(svc->core, args->weights, (uint64_t)fc.dt, make_prepared,
                             release_prepared, s, &prepared);
  if (st != APX_OK)
    return st;
  fc.prep = prepared;
  if (fc.prep->channels != fc.C)
    return svc->set_error(APX_ERR_INVALID_ARG,
                          "ff_infer: weights have [%lld] channels, dense has %lld",
                          (long long)fc.prep->channels, (long long)fc.C);

  const int64_t B = fc.B, H = fc.H, W = fc.W, t0 = args->tile_l0, t1 = args->tile_l1;
  const int64_t k0 = args->kmax_l0, k1 = args->kmax_l1;
  const int64_t grid0 = (H / t0) * (W / t0), grid1 = (H / t1) * (W / t1);
  /* the route's arrays and the chunks' ends in one block */
  size_t ints = (size_t)(3 * B + 2 * B * k0 + 2 * B * k1);
  size_t bytes = ints * sizeof(int64_t) + (size_t)(2 * B) * sizeof(double);
  char *block = malloc(bytes ? bytes : 1);
  if (!block)
    return svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (routing)");
  apx_ff_route route;
  route.l0_count = (int64_t *)(void *)block;
  route.l1_count = route.l0_count + B;
  route.l0_greedy = route.l1_count + B;
  route.l0_hilbert = NULL;
  route.l0_ordered = route.l0_greedy + B * k0;
  route.l1_hilbert = route.l0_ordered + B * k0;
  route.l1_ordered = route.l1_hilbert + B * k1;
  int64_t *chunk_end = route.l1_ordered + B * k1;
  route.b1_spent = (double *)(chunk_end + B);
  route.b2_spent = route.b1_spent + B;
  st = apx_ff_route_host(args, &route, svc->set_error);
  if (st != APX_OK) {
    free(block);
    return st;
  }
  const int64_t HW = H * W, C = fc.C, N0 = t0 * t0, N1 = t1 * t1;
  fc.blend = args->overlap_mode == APX_OVERLAP_BLEND;
  fc.blend_at = cpu_ff_refine_scratch(C, t0 > t1 ? t0 : t1) + 3 * (size_t)C;
  const ff_layout_in shape = {.C = C,
                              .HW = HW,
                              .W = W,
                              .N0 = N0,
                              .N1 = N1,
                              .grid0 = grid0,
                              .grid1 = grid1,
                              .threads = fc.threads,
                              .per_thread = fc.blend_at + (fc.blend ? (size_t)(C * N0) : 0)};
  size_t work_bytes = 0;
  const int64_t chunks = ff_chunks(shape, &route, B, chunk_end, &work_bytes);
  struct cpu_ff_work *work = work_take(s, work_bytes);
  if (!work) {
    free(block);
    return svc->set_error(APX_ERR_NO_MEMORY, "ff_infer: out of memory (tiles)");
  }

  fc.scan_forward = args->scan_mode == APX_SCAN_FORWARD;
  /* docs/ops.md, tileunpack, Blend: a rounded to the dtype first */
  fc.blend_a = cpu_round_double_to_dtype(args->blend_alpha, fc.dt);
  fc.blend_om = cpu_ff_rnd(fc.dt, 1.0f - fc.blend_a);
  const size_t frame_row = (size_t)(C * HW) * apx_backend_dtype_size(fc.dt);
  for (int64_t k = 0, b0 = 0; k < chunks; b0 = chunk_end[k++]) {
    const int64_t nb = chunk_end[k] - b0;
    const int64_t *counts[2] = {route.l0_count + b0, route.l1_count + b0};
    const int64_t *ids[2] = {route.l0_ordered + b0 * k0, route.l1_ordered + b0 * k1};
    const int64_t kmax[2] = {k0, k1}, grids[2] = {grid0, grid1};
    ff_layout_in in = shape;
    in.nb = nb;
    for (int64_t b = 0; b < nb; b++) {
      in.total0 += counts[0][b];
      in.total1 += counts[1][b];
    }
    ff_level_run lr[2] = {{.t = t0, .N = N0, .grid_w = W / t0, .total = in.total0},
                          {.t = t1, .N = N1, .grid_w = W / t1, .total = in.total1}};
    ff_layout_out out;
    ff_layout(&in, (char *)work + CPU_FF_WORK_HEAD, lr, &out);
    for (int l = 0; l < 2; l++) {
      int64_t j = 0;
      memset(lr[l].slot, 0xff, (size_t)(nb * grids[l]) * sizeof(int32_t)); /* -1 */
      for (int64_t b = 0; b < nb; b++) {
        lr[l].first[b] = j;
        for (int64_t i = 0; i < counts[l][b]; i++, j++) {
          const int64_t id = ids[l][b * kmax[l] + i];
          lr[l].tiles[2 * j] = b;
          lr[l].tiles[2 * j + 1] = id;
          lr[l].slot[b * grids[l] + id] = (int32_t)j;
        }
      }
      lr[l].first[nb] = j;
      for (int64_t b = 0; b < nb; b++)
        atomic_init(&out.remaining[l * nb + b], (int64_t)counts[l][b]);
    }
    const apx_tensor boundary = rows_from(args->boundary, b0, HW),
                     uncertainty = rows_from(args->uncertainty, b0, HW);
    fc.boundary = args->boundary ? &boundary : NULL;
    fc.uncertainty = args->uncertainty ? &uncertainty : NULL;
    fc.B = nb;
    run_frame(&fc, (const char *)dense->data + (size_t)b0 * frame_row,
              (char *)args->heavy->data + (size_t)b0 * frame_row,
              (char *)args->detail->data + (size_t)b0 * frame_row, lr, counts[1], out.alpha0,
              out.alpha1, out.remaining, out.thread_buf, shape.per_thread, out.row_buf);
    /* alpha of level 1 where a row has L1 tiles, else of level 0 */
    for (int64_t b = 0; b < nb; b++)
      store_row(fc.dt, 0, args->alpha->data, (b0 + b) * HW, HW,
                (counts[1][b] > 0 ? out.alpha1 : out.alpha0) + b * HW);
  }
  work_put(s, work);
  apx_ff_stats *stats = args->stats;
  if (stats) {
    for (int64_t b = 0; b < B; b++) {
      if (stats->selected_l0)
        stats->selected_l0[b] = route.l0_count[b];
      if (stats->selected_l1)
        stats->selected_l1[b] = route.l1_count[b];
      if (stats->budget_b1_spent)
        stats->budget_b1_spent[b] = route.b1_spent[b];
      if (stats->budget_b2_spent)
        stats->budget_b2_spent[b] = route.b2_spent[b];
    }
    if (stats->l0_ids)
      memcpy(stats->l0_ids, route.l0_greedy, (size_t)(B * k0) * sizeof(int64_t));
    if (stats->l1_ids)
      memcpy(stats->l1_ids, route.l1_hilbert, (size_t)(B * k1) * sizeof(int64_t));
  }
  free(block);
  return APX_OK;
}
