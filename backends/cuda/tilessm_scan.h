/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan on CUDA (tilessm_scan.cu): what its kernels are given and
 * the launch tuning, in one place. The kernels: tilessm_scan_common.cuh
 * (a channel's parameters, token access, one step), tilessm_scan_chunked.cuh
 * (the chunked scan's three passes), tilessm_scan_block.cuh (the block
 * scan), tilessm_scan_staged.cuh (the one-pass bidirectional scan); the
 * launch switch: tilessm_scan.cu. */
#ifndef APX_CUDA_TILESSM_SCAN_H
#define APX_CUDA_TILESSM_SCAN_H

#include "cuda_backend.h"

struct ssm_params {
  const void *decay, *input_gain, *output_gain, *state_bias;
  int dt_decay, dt_input_gain, dt_output_gain, dt_state_bias;
  const void *init;  /* NULL, [B,C] (init_dirs 1) or [B,2,C] (init_dirs 2) */
  int dt_init, init_dirs;
  const void *gate;  /* NULL, [C] or [B,1,C] (gate_batched) */
  int dt_gate, gate_batched;
  int dt_tokens;     /* the dtype init state and gate are cast to first */
  float lim;         /* |clamp_value| rounded to the tokens dtype */
};

struct ssm_geometry {
  int64_t B, K, C;
  int64_t L, chunks; /* chunk length and count (chunks = ceil(K/L)) */
  int direction, merge;
  int V;             /* channels per thread: 2 (one 4- or 8-byte load) or 1 */
  int64_t lanes;     /* C / V */
  cuda_geom per_chunk;  /* B*chunks*lanes threads */
  cuda_geom per_carry;  /* one warp per stream: B*C*32 threads */
};

/* The block scan (tilessm_scan_block.cuh): warps a block, its modes */
#define SSM_WARPS 16
enum { SSM_PLAIN = 0, SSM_TO_SCRATCH = 1, SSM_MERGE = 2 };

/* Steps per warp and round: 16 for 16-bit tokens (16 registers of raw
 * tokens a round for V=2, twice that with the prefetch), 8 for fp32; twice
 * that when K takes more than two rounds (more bytes in flight and half
 * as many block-wide steps per token; a short K keeps more warps busy
 * with the shorter length). The merge pass holds the scratch outputs too:
 * half the length. */
template <typename T> struct ssm_block_len { enum { L = sizeof(T) == 4 ? 8 : 16 }; };

#endif /* APX_CUDA_TILESSM_SCAN_H */
