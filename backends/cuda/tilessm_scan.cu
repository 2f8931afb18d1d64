/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan on CUDA (docs/ops.md, tilessm_scan): per stream (b,c), with fp32 state
 *   x = sanitize(tokens[b,k,c]); s = d*s + (1-d)*(ig*x + sb); y = og*s
 * forward, backward (k descending) or both, merged (sum, avg, gated); only
 * outputs are rounded, once, to the tokens dtype (docs/ops.md, Rounding and parity).
 *
 * A bidirectional scan whose K fits a block's shared memory takes the
 * staged scan (tilessm_scan_staged.cuh): one block per (b, 16 bytes of
 * channels) holds the stream's K on chip, scans it both ways and merges,
 * in one launch. Otherwise two schemes, both parallel over K as well as
 * (B,C). When B*C fills the
 * device (or K is short), the block scan further down: one block per
 * (b, channel group) walks K in rounds, its warps scanning consecutive
 * pieces of a round and combining them through shared memory, so tokens
 * are read once, in one launch. Otherwise (few long streams), a chunked
 * scan over the whole device: K is cut into chunks
 * of L steps; (1) each chunk is scanned from a zero state, giving its
 * local final state h_j; (2) one thread per stream combines the chunks:
 * S_{j+1} = d^L * S_j + h_j (the recurrence is linear), which gives every
 * chunk's true initial state and the final state; (3) each chunk is scanned
 * again from its true initial state, writing y. Within a chunk (3) repeats
 * the sequential recurrence exactly; only the chunk boundary states carry
 * the extra rounding of d^L*S + h, a few fp32 ulps. When K fits one chunk,
 * step (3) alone runs.
 *
 * Speed: a thread scans two adjacent channels (one 4- or 8-byte load per
 * step) when C is even, except in a block scan of few blocks (latency-
 * bound: one channel a thread halves each thread's serial work); step (2)
 * gives each stream a warp (a shuffle scan of the chunks' affine maps), so
 * at most 64 chunks cost a few steps. */
/* Layers: tilessm_scan.h (the kernels' arguments, launch tuning), the
 * kernels in tilessm_scan_common.cuh, tilessm_scan_chunked.cuh,
 * tilessm_scan_block.cuh and tilessm_scan_staged.cuh; here the choice of
 * scan, the launches and the op's entry. */
#include "cuda_backend.h"

#include "tilessm_scan.h"
#include "tilessm_scan_common.cuh"
#include "tilessm_scan_chunked.cuh"
#include "tilessm_scan_block.cuh"
#include "tilessm_scan_staged.cuh"

/* Chunk length: as long as possible (fewer boundary roundings, less
 * re-reading) while B*chunks*lanes threads still fill the device; at most
 * 64 chunks per stream (the combine's warp: two chunks a lane). */
static ssm_geometry geometry(const apx_tilessm_scan_args *a, int64_t B, int sm_count) {
  ssm_geometry g;
  g.B = B;
  g.K = a->tokens->shape[1];
  g.C = a->tokens->shape[2];
  g.direction = (int)a->direction;
  g.merge = (int)a->merge;
  size_t elem = apx_backend_dtype_size(a->tokens->dtype);
  g.V = g.C % 2 == 0 && (uintptr_t)a->tokens->data % (2 * elem) == 0 &&
                (uintptr_t)a->out->data % (2 * elem) == 0
            ? 2
            : 1;
  g.lanes = g.C / g.V;
  int64_t streams = g.B * g.lanes;
  int64_t want_threads = (int64_t)(sm_count > 0 ? sm_count : 132) * 1024;
  int64_t L = 256;
  while (L > 8 && streams * ((g.K + L - 1) / L) < want_threads && (g.K + L / 2 - 1) / (L / 2) <= 64)
    L /= 2;
  if (g.K <= L) L = g.K > 0 ? g.K : 1;
  g.L = L;
  g.chunks = g.K > 0 ? (g.K + L - 1) / L : 0;
  g.per_chunk = cuda_geom_1d(g.B * g.chunks * g.lanes, 128);
  g.per_carry = cuda_geom_1d(g.B * g.C * 32, 128);
  return g;
}

template <typename T, int V>
static void launch_scan(const ssm_geometry &g, const ssm_params &p, const T *tokens, T *out,
                        float *carry_f, float *carry_b, float *y_back, T *final_state,
                        cudaStream_t s) {
  if (g.chunks > 1) {
    ssm_local_kernel<T, V><<<g.per_chunk.blocks, g.per_chunk.threads, 0, s>>>(tokens, p, g,
                                                                             carry_f, carry_b);
    ssm_carry_kernel<T><<<g.per_carry.blocks, g.per_carry.threads, 0, s>>>(p, g, carry_f,
                                                                          carry_b, final_state);
  }
  ssm_out_kernel<T, V><<<g.per_chunk.blocks, g.per_chunk.threads, 0, s>>>(
      tokens, out, p, g, carry_f, carry_b, y_back, final_state);
}

/* The block scan fits when it has enough blocks to fill the device or few
 * rounds to walk; otherwise (few long streams) the chunked scan. */
static int use_block_scan(const ssm_geometry &g, size_t elem, int sm_count) {
  if (g.K == 0) return 0;
  int64_t blocks = g.B * ((g.C + 32 * g.V - 1) / (32 * g.V));
  int64_t per_round = (int64_t)SSM_WARPS * (elem == 4 ? 8 : 16);
  int64_t rounds = (g.K + per_round - 1) / per_round;
  return blocks >= (sm_count > 0 ? sm_count : 132) / 2 || rounds <= 8;
}

template <typename T, int V, int L>
static void launch_block_len(const ssm_geometry &g, const ssm_params &p, const T *tokens,
                             T *out, float *y_back, T *final_state, cudaStream_t s) {
  const int LM = ssm_block_len<T>::L > 8 ? ssm_block_len<T>::L / 2 : ssm_block_len<T>::L;
  int64_t blocks = g.B * ((g.C + 32 * V - 1) / (32 * V));
  unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)); /* block-stride loop */
  if (g.direction == APX_SCAN_BIDIRECTIONAL) {
    ssm_block_kernel<T, V, L, SSM_TO_SCRATCH><<<grid, SSM_WARPS * 32, 0, s>>>(
        tokens, out, p, g.B, g.K, g.C, 1, g.merge, y_back, final_state);
    ssm_block_kernel<T, V, LM, SSM_MERGE><<<grid, SSM_WARPS * 32, 0, s>>>(
        tokens, out, p, g.B, g.K, g.C, 0, g.merge, y_back, final_state);
  } else {
    ssm_block_kernel<T, V, L, SSM_PLAIN><<<grid, SSM_WARPS * 32, 0, s>>>(
        tokens, out, p, g.B, g.K, g.C, g.direction == APX_SCAN_BACKWARD, g.merge, y_back,
        final_state);
  }
}

template <typename T, int V>
static void launch_block(const ssm_geometry &g, const ssm_params &p, const T *tokens, T *out,
                         float *y_back, T *final_state, cudaStream_t s) {
  const int L = ssm_block_len<T>::L;
  if (g.K > 2 * SSM_WARPS * L)
    launch_block_len<T, V, 2 * L>(g, p, tokens, out, y_back, final_state, s);
  else
    launch_block_len<T, V, L>(g, p, tokens, out, y_back, final_state, s);
}

/* The staged bidirectional scan (tilessm_scan_staged.cuh): where a
 * stream's K fits a block's shared memory, both directions and the merge
 * in one launch reading the tokens once. Sub-chunks of 8 steps for short
 * K (segments of at most 8 steps: every thread busy), else 16. */
struct ssm_staged_plan {
  int q, seg;
  size_t smem;
};

static int staged_plan(int dev, const ssm_geometry &g, size_t elem, ssm_staged_plan *pl) {
  if (g.direction != APX_SCAN_BIDIRECTIONAL || g.K <= 0 || g.K > (1 << 20)) return 0;
  /* the largest dynamic shared memory a block may opt into, a device */
  static int optin[CUDA_MAX_DEVICES];
  int lim = __atomic_load_n(&optin[dev], __ATOMIC_ACQUIRE);
  if (lim == 0) {
    if (cudaDeviceGetAttribute(&lim, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    __atomic_store_n(&optin[dev], lim, __ATOMIC_RELEASE);
  }
  const int64_t per = (g.K + SSM_STAGED_SEGS - 1) / SSM_STAGED_SEGS;
  pl->q = per <= 8 ? 8 : 16;
  pl->seg = (int)((per + pl->q - 1) / pl->q * pl->q);
  pl->smem = ssm_staged_smem(g.K, elem, pl->seg, pl->q);
  return pl->smem <= (size_t)lim;
}

template <typename T, int Q>
static apx_status launch_staged_q(cuda_state *st, int dev, const ssm_geometry &g,
                                  const ssm_params &p, const T *tokens, T *out, T *final_state,
                                  const ssm_staged_plan &pl, cudaStream_t s) {
  /* the largest dynamic shared memory set so far, a device; the carveout
   * at its largest, so that three 75 KB blocks share an SM */
  static int smem_set[CUDA_MAX_DEVICES];
  if (pl.smem > 48 * 1024 && (int)pl.smem > __atomic_load_n(&smem_set[dev], __ATOMIC_ACQUIRE)) {
    CUDA_TRY(st,
             cudaFuncSetAttribute(ssm_staged_kernel<T, Q>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem),
             "tilessm_scan: staged scan shared memory");
    CUDA_TRY(st,
             cudaFuncSetAttribute(ssm_staged_kernel<T, Q>,
                                  cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared),
             "tilessm_scan: staged scan carveout");
    __atomic_store_n(&smem_set[dev], (int)pl.smem, __ATOMIC_RELEASE);
  }
  const int E = 16 / (int)sizeof(T);
  const int64_t blocks = g.B * ((g.C + E - 1) / E);
  unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)); /* block-stride loop */
  /* 16-byte row words: every row's group 16-byte aligned */
  const int vec = g.C % E == 0 && (uintptr_t)tokens % 16 == 0 && (uintptr_t)out % 16 == 0;
  ssm_staged_kernel<T, Q><<<grid, SSM_STAGED_SEGS * E, pl.smem, s>>>(
      tokens, out, p, g.B, (int)g.K, g.C, pl.seg, g.merge, vec, final_state);
  return APX_OK;
}

template <typename T>
static apx_status run(cuda_state *st, const apx_tilessm_scan_args *a, const ssm_params &p,
                      cudaStream_t s) {
  const int64_t B = a->tokens->shape[0];
  int sm_count = st->dev[a->tokens->device_index].sm_count;
  ssm_geometry g = geometry(a, B, sm_count);
  T *final_state = a->final_state ? (T *)a->final_state->data : nullptr;
  const T *tokens = (const T *)a->tokens->data;
  T *out = (T *)a->out->data;
  ssm_staged_plan pl;
  if (staged_plan(a->tokens->device_index, g, sizeof(T), &pl)) {
    const int dev = a->tokens->device_index;
    apx_status status =
        pl.q == 8 ? launch_staged_q<T, 8>(st, dev, g, p, tokens, out, final_state, pl, s)
                  : launch_staged_q<T, 16>(st, dev, g, p, tokens, out, final_state, pl, s);
    if (status != APX_OK) return status;
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? APX_OK : cuda_fail(st, err, "tilessm_scan: launch");
  }
  int dirs = g.direction == APX_SCAN_BIDIRECTIONAL ? 2 : 1;
  size_t carry_bytes = cuda_align_up((size_t)(g.B * g.chunks * g.C) * sizeof(float));
  size_t yb_bytes = g.direction == APX_SCAN_BIDIRECTIONAL
                        ? cuda_align_up((size_t)(g.B * g.K * g.C) * sizeof(float))
                        : 0;
  const int block = use_block_scan(g, sizeof(T), sm_count);
  /* Few (b, channel group) blocks (B*C small): one channel a thread, so
   * twice the blocks, each thread's serial work (prologue, two passes of
   * L steps) halved; the call is latency-bound there. The arithmetic of
   * each channel is the same for either V. */
  if (block && g.V == 2 && 2 * g.B * ((g.C + 63) / 64) <= (sm_count > 0 ? sm_count : 132)) {
    g.V = 1;
    g.lanes = g.C;
  }
  int multi = g.chunks > 1 && !block;
  cuda_workspace ws;
  apx_status status = cuda_ws_alloc(st, s, (multi ? carry_bytes * dirs : 0) + yb_bytes, &ws,
                                    "tilessm_scan: workspace");
  if (status != APX_OK) return status;
  char *base = (char *)ws.ptr;
  float *carry_f = nullptr, *carry_b = nullptr, *y_back = nullptr;
  if (multi) {
    if (g.direction != APX_SCAN_BACKWARD) {
      carry_f = (float *)base;
      base += carry_bytes;
    }
    if (g.direction != APX_SCAN_FORWARD) {
      carry_b = (float *)base;
      base += carry_bytes;
    }
  }
  if (yb_bytes) y_back = (float *)base;
  if (g.chunks == 0) {
    if (final_state)
      ssm_carry_kernel<T><<<g.per_carry.blocks, g.per_carry.threads, 0, s>>>(
          p, g, carry_f, carry_b, final_state);
  } else if (block) {
    if (g.V == 2) launch_block<T, 2>(g, p, tokens, out, y_back, final_state, s);
    else launch_block<T, 1>(g, p, tokens, out, y_back, final_state, s);
  } else if (g.V == 2) {
    launch_scan<T, 2>(g, p, tokens, out, carry_f, carry_b, y_back, final_state, s);
  } else {
    launch_scan<T, 1>(g, p, tokens, out, carry_f, carry_b, y_back, final_state, s);
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess) return cuda_fail(st, err, "tilessm_scan: launch");
  return APX_OK;
}

apx_status cuda_tilessm_scan(void *state, const apx_tilessm_scan_args *a, const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  int dev = a->tokens->device_index;
  apx_status s = cuda_use_device(st, dev);
  if (s != APX_OK) return s;
  cudaStream_t stream = cuda_stream(call);
  if (a->tokens->shape[0] * a->tokens->shape[2] == 0) return APX_OK;
  ssm_params p;
  memset(&p, 0, sizeof p);
  p.decay = a->decay->data;
  p.dt_decay = a->decay->dtype;
  p.input_gain = a->input_gain->data;
  p.dt_input_gain = a->input_gain->dtype;
  p.output_gain = a->output_gain->data;
  p.dt_output_gain = a->output_gain->dtype;
  p.state_bias = a->state_bias->data;
  p.dt_state_bias = a->state_bias->dtype;
  if (a->init_state) {
    p.init = a->init_state->data;
    p.dt_init = a->init_state->dtype;
    p.init_dirs = a->init_state->ndim == 3 ? 2 : 1;
  }
  if (a->merge_gate && a->direction == APX_SCAN_BIDIRECTIONAL && a->merge == APX_MERGE_GATED) {
    p.gate = a->merge_gate->data;
    p.dt_gate = a->merge_gate->dtype;
    p.gate_batched = a->merge_gate->ndim == 3;
  }
  p.dt_tokens = a->tokens->dtype;
  /* lim = |clamp_value| as fp32, then rounded to the tokens dtype: bf16
   * gives 9984 for 1e4 (docs/ops.md, tilessm_scan). */
  float lim = (float)fabs(a->clamp_value);
  if (p.dt_tokens == APX_DTYPE_F16) lim = __half2float(__float2half_rn(lim));
  else if (p.dt_tokens == APX_DTYPE_BF16) lim = __bfloat162float(__float2bfloat16_rn(lim));
  p.lim = lim;
  switch (a->tokens->dtype) {
  case APX_DTYPE_F16: return run<__half>(st, a, p, stream);
  case APX_DTYPE_BF16: return run<__nv_bfloat16>(st, a, p, stream);
  default: return run<float>(st, a, p, stream);
  }
}
