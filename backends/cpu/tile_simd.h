/* SPDX-License-Identifier: Apache-2.0 */
/* Shared helpers of the cpu backend's tile ops (tilepack, tileunpack,
 * fused_pack_op_unpack, fusiongate_alpha, fusiongate_fuse): streaming stores
 * and the elementwise row kernels of rounding model R (docs/ops.md, Rounding and parity).
 *
 * Every row kernel exists three times: a portable scalar loop over
 * apx_half.h (the reading copy), and AVX2+F16C and AVX-512F loops chosen at
 * run time. All give identical bits: the arithmetic is the same IEEE fp32
 * operation sequence, vcvtps2ph with imm 0 rounds to nearest even and keeps
 * subnormals, and bf16 rounding is done with integer ops exactly like
 * apx_f32_to_bf16 (never VCVTNEPS2BF16, which flushes subnormals).
 * cpu_isa_level (cpu.h) picks the loop. */
#ifndef APX_CPU_TILE_SIMD_H
#define APX_CPU_TILE_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

/* ---- streaming (non-temporal) stores ------------------------------------------
 * Large outputs that are not read back soon are written with non-temporal
 * stores: that saves the read for ownership of every output line, a third
 * of a copy's memory traffic. tilepack streams its tiles; tileunpack and
 * fused build their output in place instead (they read it back while
 * building it), and assembling bands in a buffer to stream them out
 * costs more than the saved reads (docs/performance.md, cpu tile ops). */
#if defined(__x86_64__)
#include <emmintrin.h>
#define CPU_HAVE_STREAM 1
#else
#define CPU_HAVE_STREAM 0
#endif

/* Outputs at least this big are streamed. */
#define CPU_STREAM_MIN_BYTES ((int64_t)8 << 20)

/* May an output of total_bytes at data, written in pieces that each start
 * at a multiple of piece_bytes from data, be streamed? */
static inline int cpu_stream_ok(const void *data, int64_t total_bytes, size_t piece_bytes) {
  return CPU_HAVE_STREAM && total_bytes >= CPU_STREAM_MIN_BYTES && piece_bytes % 16 == 0 &&
         (uintptr_t)data % 16 == 0;
}

/* The name ff_model.c calls cpu_isa_level by (cpu.h: the backend's one
 * ISA selector). */
static inline cpu_simd_level cpu_tile_simd_level(void) { return cpu_isa_level(); }

/* Elementwise kernels over n contiguous elements of one float dtype, with
 * the R-model rounding of that dtype after every operation (plain fp32 for
 * f32). Scalars are fp32 values (already rounded as the op's spec says). */
typedef struct cpu_tile_kernels {
  /* docs/ops.md, tileunpack blend over a rows x cols block (strides in elements):
   * cur = fl(fl(one_minus_a*cur) + fl(a*tile)). */
  void (*blend)(void *cur, size_t cur_stride, const void *tile, size_t tile_stride, size_t rows,
                size_t cols, float a, float one_minus_a);
  /* docs/ops.md, fusiongate_fuse over n elements:
   * out = fl(base + fl(alpha*fl(detail - base))). out may equal base. */
  void (*fuse)(void *out, const void *base, const void *detail, const void *alpha, size_t n);
  /* docs/ops.md, fused_pack_op_unpack on the runs of selected tiles of a band: for each of
   * `rows` rows (row stride `stride` elements) and each run k, the columns
   * [runs[2k]*t, runs[2k+1]*t):
   * out = fl(fl(fl(x*vs)+vb) * relu(fl(fl(x*gs)+gb))), relu(g) = g < 0 ?
   * 0 : g (NaN and -0 pass through, like torch's clamp_min). out may equal
   * in. */
  void (*affine_reglu_runs)(void *out, const void *in, size_t stride, size_t rows,
                            const int64_t *runs, size_t run_count, size_t t, float vs, float vb,
                            float gs, float gb);
  /* Widen n elements of this dtype to fp32 (exact). */
  void (*to_f32)(float *dst, const void *src, size_t n);
  /* docs/ops.md, fusiongate_alpha into n elements of this (the out) dtype, from
   * sanitised proxies widened to fp32 (b, u are cast to this dtype first):
   * out = fl(sigmoid(fl(fl(fl(w_b*b) + fl(w_u*u)) + bias))), the sigmoid
   * evaluated in double and rounded to fp32. */
  void (*alpha)(void *out, const float *b, const float *u, size_t n, float w_b, float w_u,
                float bias);
} cpu_tile_kernels;

/* Kernels of float dtype `dtype` (f32, f16, bf16) at SIMD level `level`. */
const cpu_tile_kernels *cpu_tile_kernels_for(int dtype, cpu_simd_level level);

#endif
