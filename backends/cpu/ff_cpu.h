/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend's FF path (docs/ff_infer.md) in pieces: the prepared
 * weights and one function per model step, so that tests can check each
 * step against a plain double-precision loop and the whole call against
 * their composition. Internal to the cpu backend and its tests.
 *
 * Every piece works on fp32 arrays; `rnd` (the doc's rounding to the frame
 * dtype, identity for f32) is applied exactly where the doc marks it, and
 * pieces that return frame values return them rounded (as fp32 holding a
 * value of the frame dtype). */
#ifndef APX_CPU_FF_CPU_H
#define APX_CPU_FF_CPU_H

#include <stddef.h>
#include <stdint.h>

#include <apexx/ff_backend.h>

#include "apx_half.h"
#include "cpu.h"

/* One level's weights in the forms the kernels read, made once per
 * (weights, dtype) from the fp32 host copy (docs/ff_infer.md "One level"). */
typedef struct cpu_ff_level {
  /* scan vectors, [2][C] ([0] forward, [1] backward), rounded to the frame
   * dtype; decay then clamped to [1e-6, 1 - 1e-6] in fp32 (docs/ops.md, tilessm_scan) */
  const float *decay[2], *one_minus_decay[2], *input_gain[2], *output_gain[2], *state_bias[2];
  const float *gate, *one_minus_gate;               /* [C]: rnd(sigmoid(logit)), rnd(1 - gate) */
  const float *token_norm_weight, *token_norm_bias; /* [C] */
  const float *mlp0_t, *mlp0_bias;                  /* [C in][C out], [C] */
  const float *mlp2_t, *mlp2_bias;                  /* [C in][2C out], [2C] */
  const float *dw_weight, *dw_bias;                 /* [C][9], [C] */
  const float *pw_weight;                           /* [2C][C] (out, in) */
  const float *pw_packed;               /* [ceil(2C/CPU_FF_MR)][C][CPU_FF_MR], zero rows past 2C */
  const float *pw_bias;                 /* [2C] */
  const float *norm_weight, *norm_bias; /* [2C] */
  float w_boundary, w_uncertainty, gate_bias; /* softplus'd fusion weights, bias */
} cpu_ff_level;

typedef struct cpu_ff_prepared {
  int64_t channels;
  apx_dtype dtype;
  cpu_ff_level level[2];
  float *block; /* every array above lives in this one allocation */
} cpu_ff_prepared;

/* Rows of the refine block's 1x1-conv microkernel (the packing of pw). */
#define CPU_FF_MR 6

/* Build the prepared form of `params` for frame dtype `dtype` (f32, f16,
 * bf16). Returns APX_ERR_NO_MEMORY (no message set) when out of memory. */
apx_status cpu_ff_prepare(const apx_ff_params *params, apx_dtype dtype, cpu_ff_prepared **out);
void cpu_ff_prepared_free(cpu_ff_prepared *prepared);

/* 1 when FiLM and the refine block take their AVX2 instantiation (AVX2,
 * F16C and FMA: the backend's AVX2 level and FMA), 2 when the refine
 * block's 1x1 conv also takes its AVX-512 kernel (the backend's AVX-512
 * level), else 0. Every caller that tests it for non-zero takes AVX2. */
int cpu_ff_simd(void);

/* rnd(): round an fp32 value to the frame dtype and back. */
static inline float cpu_ff_rnd(apx_dtype dtype, float v) {
  return dtype == APX_DTYPE_F16    ? apx_round_f16(v)
         : dtype == APX_DTYPE_BF16 ? apx_round_bf16(v)
                                   : v;
}

/* Step 2: tok[c] = rnd(sum of tile[c][0..n) / n), tile [C][n]. */
void cpu_ff_tokens(apx_dtype dtype, const float *tile, int64_t channels, int64_t n, float *tok);

/* Step 3 (docs/ff_infer.md): cpu_ff_scan_merge, the bidirectional scan and
 * gated merge of tok [K][C] into mixed [K][C]; cpu_ff_scan_forward, the
 * forward stream alone (scan_mode forward), y = y_f. The output may not
 * alias tok. */
void cpu_ff_scan_forward(const cpu_ff_level *lv, apx_dtype dtype, const float *tok, int64_t steps,
                         int64_t channels, float *y);
void cpu_ff_scan_merge(const cpu_ff_level *lv, apx_dtype dtype, const float *tok, int64_t steps,
                       int64_t channels, float *mixed);

/* Step 4: FiLM parameters of one token. work holds 3C floats. cpu_ff_film
 * takes the instantiation cpu_ff_simd() says, cpu_ff_film_run the one simd
 * says (1 needs AVX2: the caller checks); the same bits either way. */
void cpu_ff_film(const cpu_ff_level *lv, apx_dtype dtype, int64_t channels, const float *mixed,
                 float *work, float *gamma, float *beta);
void cpu_ff_film_run(const cpu_ff_level *lv, apx_dtype dtype, int simd, int64_t channels,
                     const float *mixed, float *work, float *gamma, float *beta);

/* Steps 5 and 6 on one tile [C][t*t] (fp32 copies of the frame values):
 * FiLM apply, depthwise 3x3, 1x1 conv, GroupNorm, gated residual; r [C][t*t]
 * gets the rounded result. scratch holds cpu_ff_refine_scratch(C, t)
 * floats. simd: 0 runs the plain 1x1-conv loop (the reading copy), 1 the
 * AVX2 kernel, which needs a CPU with AVX2, FMA and F16C, 2 the AVX-512
 * one, which needs AVX-512F too (the same bits each; the caller checks).
 * r may be tile (it is read before r is written). */
size_t cpu_ff_refine_scratch(int64_t channels, int64_t t);
void cpu_ff_refine(const cpu_ff_level *lv, apx_dtype dtype, int64_t channels, int64_t t,
                   const float *tile, const float *gamma, const float *beta, float *scratch,
                   int simd, float *r);

/* Step 8, one pixel: a proxy value (already widened to fp32 from its own
 * dtype) cast to the frame dtype and sanitised (NaN->0, +inf->1, -inf->0). */
float cpu_ff_proxy(apx_dtype dtype, float v);
/* alpha = rnd(sigmoid(w_b*bp + w_u*up + gate_bias)) on sanitised proxies. */
float cpu_ff_alpha(const cpu_ff_level *lv, apx_dtype dtype, float bp, float up);
/* heavy = rnd(x + rnd(alpha * rnd(u - x))). */
static inline float cpu_ff_fuse(apx_dtype dtype, float x, float u, float alpha) {
  return cpu_ff_rnd(dtype, x + cpu_ff_rnd(dtype, alpha * cpu_ff_rnd(dtype, u - x)));
}

/* ---- the call's work (ff_infer.c) ---------------------------------------------- */

/* The work block cpu_state.ff_work keeps between calls; its data follows
 * the head, CPU_FF_WORK_HEAD bytes in. */
struct cpu_ff_work {
  size_t bytes; /* usable bytes after the head */
};
#define CPU_FF_WORK_HEAD ((size_t)64)

/* A batch runs in chunks of rows whose work stays at or under
 * cpu_ff_chunk_bytes where a row allows (CPU_FF_CHUNK_BYTES, two rows of
 * the default profile: the packed tiles one phase writes are still in the
 * caches when the next phase reads them; tests lower it to run every row
 * as a chunk of its own). */
#define CPU_FF_CHUNK_BYTES ((size_t)8 << 20)
extern size_t cpu_ff_chunk_bytes;

#endif
