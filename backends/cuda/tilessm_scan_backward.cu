/* SPDX-License-Identifier: Apache-2.0 */
/* tilessm_scan_backward on CUDA (docs/ops.md, tilessm_scan_backward).
 * Both recurrences are affine with per-channel constants (the state
 * s = d*s + om*drv forward, the adjoint a = d*(a + og*gy) from the last
 * step back), so K is cut into chunks of SCAN_BWD_L tokens. A block owns
 * one batch row's 32 channels (one lane each, neighbours in c side by side
 * so that every access is coalesced) and all its chunks, a warp a run of
 * consecutive chunks: (1) each chunk's local forward end state and local
 * adjoint from zero, composed per warp into its run's affine maps (in
 * shared memory); (2) each warp folds the other runs' maps into its run's
 * true start state and entering adjoint, and walks its chunks back to give
 * each one its own (kept in a small [2][B][NC][C] workspace); (3) each
 * chunk again from its true values, the states in registers: grad_tokens,
 * and the sums of the [C] gradients per thread, then over the block's
 * warps in order. A second kernel, one thread per channel, adds the sums
 * over b in order and writes the [C] gradients, the initial state's and
 * the gate's (with B = 1 the block writes them itself: one launch). For
 * long K (more than SCAN_BWD_SPLIT_CPW chunks a warp) the chunks are cut
 * into segments, a block each, and (2)'s fold goes through global memory:
 * pass 1 each run's maps, pass 2 a thread a stream folding them in order,
 * pass 3 each run from its true values, its block's sums a segment's. No
 * atomics: the same bits run to run. fp32 math, one rounding per stored
 * value. */
#include "cuda_backend.h"

#include <math.h>

enum { P_DECAY, P_INPUT_GAIN, P_OUTPUT_GAIN, P_STATE_BIAS, P_GATE, P_COUNT };

/* Tokens a chunk (its states live in registers), the most warps a block
 * (16 warps of 32 channels), the chunks a warp of the K-across-blocks path
 * walks, and the runs pass 2 loads at once. */
enum { SCAN_BWD_L = 16, SCAN_BWD_MAX_WARPS = 16, SCAN_BWD_SPLIT_CPW = 2, SCAN_BWD_FOLD = 8 };

struct scan_bwd_args {
  const void *tokens, *grad_out, *decay, *input_gain, *output_gain, *state_bias;
  const void *init, *gate, *grad_final;
  int dt, decay_dt, ig_dt, og_dt, sb_dt, init_dt, gate_dt, grad_final_dt;
  int init_ndim, gate_rows; /* gate_rows: 0 (not gated), 1 ([C] or absent), B ([B,1,C]) */
  int64_t B, K, C;
  int64_t NC;   /* chunks: ceil(K / SCAN_BWD_L) */
  int64_t cpw;  /* chunks a warp */
  int64_t nseg; /* segments of a stream: 1, or the K-across-blocks path's */
  float lim;
  int direction, merge;
  void *grad_tokens;
  /* workspace: chunk [2][B][NC][C] (per chunk: the forward direction's
   * local adjoint, then its entering adjoint; the backward direction's
   * local end state, then its start state), partial
   * [P_COUNT][B][nseg][C], grad_init [B][2][C]; the K-across-blocks path's
   * runs [P_COUNT][B][R][C] (each run's maps) and starts [4][B][R][C]
   * (each run's true values), R = nseg * warps a block */
  float *chunk, *partial, *grad_init, *runs, *starts;
};

struct scan_bwd_out {
  void *grad[4]; /* decay, input_gain, output_gain, state_bias */
  int grad_dt[4];
  void *grad_init;
  int grad_init_dt, grad_init_per_direction;
  void *grad_gate;
  int grad_gate_dt;
};

/* docs/ops.md, tilessm_scan: the sanitised token and whether it passed
 * unchanged (finite and within [-lim, lim]: derivative 1). */
static __device__ __forceinline__ float sanitised_token(float x, float lim, float *passes) {
  *passes = isfinite(x) && x >= -lim && x <= lim ? 1.0f : 0.0f;
  if (x != x)
    return 0.0f;
  if (lim < x)
    return lim;
  if (-lim > x)
    return -lim;
  return x;
}

/* The gate as the merge uses it (cast, clamped; absent 0.5) and its
 * derivative's mask. */
static __device__ __forceinline__ float gate_at(const scan_bwd_args &a, int64_t b, int64_t c,
                                                float *passes) {
  *passes = 1.0f;
  if (!a.gate)
    return 0.5f;
  float g =
      cuda_round_any(cuda_load_any(a.gate, a.gate_dt, (a.gate_rows > 1 ? b : 0) * a.C + c), a.dt);
  *passes = g >= 0.0f && g <= 1.0f ? 1.0f : 0.0f;
  return g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g;
}

/* One chunk's tokens (sanitised; bit i of pass: token i's mask) and
 * grad_out, n <= L valid. */
struct scan_bwd_chunk {
  float x[SCAN_BWD_L], g[SCAN_BWD_L];
  unsigned pass;
};

static __device__ __forceinline__ void load_chunk(const scan_bwd_args &a, int64_t at, int n,
                                                  scan_bwd_chunk *ch) {
  ch->pass = 0;
#pragma unroll
  for (int i = 0; i < SCAN_BWD_L; i++) {
    ch->x[i] = ch->g[i] = 0.0f;
    if (i < n) {
      float passes;
      ch->x[i] = sanitised_token(cuda_load_any(a.tokens, a.dt, at + i * a.C), a.lim, &passes);
      ch->pass |= passes != 0.0f ? 1u << i : 0u;
      ch->g[i] = cuda_load_any(a.grad_out, a.dt, at + i * a.C);
    }
  }
}

/* d^n, as the steps multiply it */
static __device__ __forceinline__ float chunk_power(float d, int n) {
  float pw = 1.0f;
#pragma unroll
  for (int i = 0; i < SCAN_BWD_L; i++)
    if (i < n)
      pw *= d;
  return pw;
}

/* The [C] gradients, the initial state's and the gate's of channel c from
 * the sums per (b, c): the sums over b in order, then the stores (the
 * loads of a row first, so that they wait once, not once a store). */
static __device__ void channel_outputs(const scan_bwd_args &a, const scan_bwd_out &o, int64_t c) {
  const int64_t B = a.B, C = a.C;
  float d = cuda_load_any(a.decay, a.decay_dt, c);
  const float decay_passes = d >= 1e-6f && d <= 1.0f - 1e-6f ? 1.0f : 0.0f;
  const int per_row = a.gate_rows > 1;
  const int64_t S = a.nseg;
  float sum[P_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, passes = 1.0f;
  for (int64_t b = 0; b < B; b++)
    for (int64_t seg = 0; seg < S; seg++)
      for (int p = 0; p < P_COUNT; p++)
        sum[p] += a.partial[(((int64_t)p * B + b) * S + seg) * C + c];
  if (a.gate_rows && !per_row)
    gate_at(a, 0, c, &passes);
  for (int p = 0; p < 4; p++)
    if (o.grad[p])
      cuda_store_any(o.grad[p], o.grad_dt[p], c, p == P_DECAY ? sum[p] * decay_passes : sum[p]);
  if (o.grad_init)
    for (int64_t b = 0; b < B; b++) {
      float gf = a.grad_init[(b * 2 + 0) * C + c], gb = a.grad_init[(b * 2 + 1) * C + c];
      if (o.grad_init_per_direction) {
        cuda_store_any(o.grad_init, o.grad_init_dt, (b * 2 + 0) * C + c, gf);
        cuda_store_any(o.grad_init, o.grad_init_dt, (b * 2 + 1) * C + c, gb);
      } else {
        cuda_store_any(o.grad_init, o.grad_init_dt, b * C + c, gf + gb);
      }
    }
  if (o.grad_gate) {
    /* [B,1,C]: per row; [C]: the sum over b; zeros when no gate is read */
    if (!per_row) {
      cuda_store_any(o.grad_gate, o.grad_gate_dt, c, a.gate_rows ? sum[P_GATE] * passes : 0.0f);
    } else {
      for (int64_t r = 0; r < B; r++) {
        float row_passes, row_sum = 0.0f;
        gate_at(a, r, c, &row_passes);
        for (int64_t seg = 0; seg < S; seg++)
          row_sum += a.partial[(((int64_t)P_GATE * B + r) * S + seg) * C + c];
        cuda_store_any(o.grad_gate, o.grad_gate_dt, r * C + c, row_sum * row_passes);
      }
    }
  }
}

/* One lane's stream: batch row b, channel c (a lane past C reads channel
 * C - 1 and walks nothing), its constants and its chunk workspace. */
struct scan_bwd_lane {
  int64_t b, c, cl, row;
  int live;
  float d, om, ig, og, sb, share0, share1;
  float *adj0, *st1; /* [0][b][.][c] and [1][b][.][c] of the chunk workspace */
};

static __device__ __forceinline__ scan_bwd_lane lane_at(const scan_bwd_args &a, int64_t b,
                                                        int64_t c) {
  scan_bwd_lane L;
  const int64_t C = a.C;
  L.b = b;
  L.c = c;
  L.live = c < C;
  L.cl = L.live ? c : C - 1;
  float d = cuda_load_any(a.decay, a.decay_dt, L.cl);
  d = d < 1e-6f ? 1e-6f : d;
  d = d > 1.0f - 1e-6f ? 1.0f - 1e-6f : d;
  L.d = d;
  L.om = 1.0f - d;
  L.ig = cuda_load_any(a.input_gain, a.ig_dt, L.cl);
  L.og = cuda_load_any(a.output_gain, a.og_dt, L.cl);
  L.sb = cuda_load_any(a.state_bias, a.sb_dt, L.cl);
  float gate_passes; /* channel_outputs applies it */
  const float gate = a.gate_rows ? gate_at(a, b, L.cl, &gate_passes) : 0.5f;
  /* this direction's share of grad_out through the merge */
  const int bidir = a.direction == APX_SCAN_BIDIRECTIONAL;
  L.share0 = L.share1 = 1.0f;
  if (bidir && a.merge == APX_MERGE_AVG)
    L.share0 = L.share1 = 0.5f;
  if (bidir && a.merge == APX_MERGE_GATED) {
    L.share0 = gate;
    L.share1 = 1.0f - gate;
  }
  L.adj0 = a.chunk + b * a.NC * C + c;
  L.st1 = a.chunk + (a.B + b) * a.NC * C + c;
  L.row = b * a.K * C + c;
  return L;
}

/* The initial states (init0, init1) and grad_final_state (gf0, gf1) of a
 * lane's stream. */
static __device__ __forceinline__ void edge_values(const scan_bwd_args &a, const scan_bwd_lane &L,
                                                   float edge[4]) {
  const int64_t b = L.b, C = a.C, cl = L.cl;
  const int bidir = a.direction == APX_SCAN_BIDIRECTIONAL;
  edge[0] = edge[1] = edge[2] = edge[3] = 0.0f;
  if (a.init) {
    edge[0] = cuda_round_any(
        cuda_load_any(a.init, a.init_dt, a.init_ndim == 3 ? (b * 2 + 0) * C + cl : b * C + cl),
        a.dt);
    edge[1] = cuda_round_any(
        cuda_load_any(a.init, a.init_dt, a.init_ndim == 3 ? (b * 2 + 1) * C + cl : b * C + cl),
        a.dt);
  }
  if (a.grad_final) {
    edge[2] =
        cuda_load_any(a.grad_final, a.grad_final_dt, bidir ? (b * 2 + 0) * C + cl : b * C + cl);
    edge[3] =
        cuda_load_any(a.grad_final, a.grad_final_dt, bidir ? (b * 2 + 1) * C + cl : b * C + cl);
  }
}

/* Step (1) over the chunks [lo, hi): each chunk from zero, its forward
 * local adjoint and backward local end state kept in the chunk workspace;
 * the run's maps composed in step order into map[] (P, forward state,
 * forward adjoint, backward state, backward adjoint). */
static __device__ __forceinline__ void walk_local(const scan_bwd_args &a, const scan_bwd_lane &L,
                                                  int64_t lo, int64_t hi, float map[P_COUNT]) {
  const int64_t K = a.K, C = a.C;
  const int runs0 = a.direction != APX_SCAN_BACKWARD, runs1 = a.direction != APX_SCAN_FORWARD;
  const float d = L.d, om = L.om, ig = L.ig, og = L.og, sb = L.sb;
  float P = 1.0f, Rf0 = 0.0f, Ra0 = 0.0f, Rf1 = 0.0f, Ra1 = 0.0f;
  for (int64_t ch = lo; ch < hi; ch++) {
    const int64_t k0 = ch * SCAN_BWD_L;
    const int n = (int)(K - k0 < SCAN_BWD_L ? K - k0 : SCAN_BWD_L);
    scan_bwd_chunk t;
    load_chunk(a, L.row + k0 * C, n, &t);
    float lf0 = 0.0f, la0 = 0.0f, lf1 = 0.0f, la1 = 0.0f;
    if (runs0) {
#pragma unroll
      for (int i = 0; i < SCAN_BWD_L; i++)
        if (i < n)
          lf0 = d * lf0 + om * (ig * t.x[i] + sb);
#pragma unroll
      for (int i = SCAN_BWD_L - 1; i >= 0; i--)
        if (i < n)
          la0 = d * (la0 + og * (L.share0 * t.g[i]));
    }
    if (runs1) {
#pragma unroll
      for (int i = SCAN_BWD_L - 1; i >= 0; i--)
        if (i < n)
          lf1 = d * lf1 + om * (ig * t.x[i] + sb);
#pragma unroll
      for (int i = 0; i < SCAN_BWD_L; i++)
        if (i < n)
          la1 = d * (la1 + og * (L.share1 * t.g[i]));
    }
    const float pw = chunk_power(d, n);
    L.adj0[ch * C] = la0;
    L.st1[ch * C] = lf1;
    /* forward state and backward adjoint travel up the chunks, the
     * forward adjoint and backward state down */
    Rf0 = pw * Rf0 + lf0;
    Ra1 = pw * Ra1 + la1;
    Ra0 = Ra0 + P * la0;
    Rf1 = Rf1 + P * lf1;
    P *= pw;
  }
  map[0] = P;
  map[1] = Rf0;
  map[2] = Ra0;
  map[3] = Rf1;
  map[4] = Ra1;
}

/* Steps (2b) and (3) over the chunks [lo, hi) from the run's true values
 * (s0: forward start state, a1: backward entering adjoint, both at lo;
 * a0: forward entering adjoint, s1: backward start state, both at hi):
 * grad_tokens stored, the [C] gradients' terms added to sums[]. */
static __device__ __forceinline__ void walk_true(const scan_bwd_args &a, const scan_bwd_lane &L,
                                                 int64_t lo, int64_t hi, float s0, float a1,
                                                 float a0, float s1, float sums[P_COUNT]) {
  const int64_t K = a.K, C = a.C;
  const int runs0 = a.direction != APX_SCAN_BACKWARD, runs1 = a.direction != APX_SCAN_FORWARD;
  const float d = L.d, om = L.om, ig = L.ig, og = L.og, sb = L.sb;
  float *adj0 = L.adj0, *st1 = L.st1;
  const int64_t row = L.row;

  /* (2b) each chunk's entering forward adjoint and backward start state,
   * the run's chunks from the last down */
  {
    float t0 = a0, t1 = s1;
    for (int64_t ch = hi - 1; ch >= lo; ch--) {
      const int64_t k0 = ch * SCAN_BWD_L;
      const int n = (int)(K - k0 < SCAN_BWD_L ? K - k0 : SCAN_BWD_L);
      const float pw = chunk_power(d, n);
      const float la0 = adj0[ch * C], lf1 = st1[ch * C];
      adj0[ch * C] = t0;
      st1[ch * C] = t1;
      t0 = pw * t0 + la0;
      t1 = pw * t1 + lf1;
    }
  }

  /* (3) each chunk from its true values, in token order */
  for (int64_t ch = lo; ch < hi; ch++) {
    const int64_t k0 = ch * SCAN_BWD_L;
    const int n = (int)(K - k0 < SCAN_BWD_L ? K - k0 : SCAN_BWD_L);
    scan_bwd_chunk t;
    load_chunk(a, row + k0 * C, n, &t);
    float sf[SCAN_BWD_L], sbk[SCAN_BWD_L], gdrv[SCAN_BWD_L];
#pragma unroll
    for (int i = 0; i < SCAN_BWD_L; i++)
      sf[i] = sbk[i] = gdrv[i] = 0.0f;
    if (runs0) {
      const float start = s0;
      float s = start;
#pragma unroll
      for (int i = 0; i < SCAN_BWD_L; i++)
        if (i < n) {
          s = d * s + om * (ig * t.x[i] + sb);
          sf[i] = s;
        }
      float adj = adj0[ch * C];
#pragma unroll
      for (int i = SCAN_BWD_L - 1; i >= 0; i--)
        if (i < n) {
          const float gy = L.share0 * t.g[i];
          adj += og * gy;
          sums[P_OUTPUT_GAIN] += gy * sf[i];
          gdrv[i] = om * adj;
          const float prev = i > 0 ? sf[i > 0 ? i - 1 : 0] : start;
          sums[P_DECAY] += adj * (prev - (ig * t.x[i] + sb));
          adj = d * adj;
        }
      s0 = s; /* the next chunk's start */
    }
    if (runs1) {
      const float start = st1[ch * C];
      float s = start;
#pragma unroll
      for (int i = SCAN_BWD_L - 1; i >= 0; i--)
        if (i < n) {
          s = d * s + om * (ig * t.x[i] + sb);
          sbk[i] = s;
        }
      float adj = a1;
#pragma unroll
      for (int i = 0; i < SCAN_BWD_L; i++)
        if (i < n) {
          const float gy = L.share1 * t.g[i];
          adj += og * gy;
          sums[P_OUTPUT_GAIN] += gy * sbk[i];
          gdrv[i] += om * adj;
          const float prev = i < n - 1 ? sbk[i < SCAN_BWD_L - 1 ? i + 1 : i] : start;
          sums[P_DECAY] += adj * (prev - (ig * t.x[i] + sb));
          adj = d * adj;
        }
      a1 = adj; /* the next chunk's entering adjoint */
    }
    /* the token terms, in token order */
#pragma unroll
    for (int i = 0; i < SCAN_BWD_L; i++)
      if (i < n) {
        sums[P_INPUT_GAIN] += gdrv[i] * t.x[i];
        sums[P_STATE_BIAS] += gdrv[i];
        if (a.gate_rows) {
          const float yf = cuda_round_any(og * sf[i], a.dt), yb = cuda_round_any(og * sbk[i], a.dt);
          sums[P_GATE] += t.g[i] * (yf - yb);
        }
        if (a.grad_tokens)
          cuda_store_any(a.grad_tokens, a.dt, row + (k0 + i) * C,
                         ig * gdrv[i] * (t.pass >> i & 1u ? 1.0f : 0.0f));
      }
  }
}

/* The block's sums over its warps in order, into partial[.][b][seg][c];
 * run[] is free on entry and on return. */
static __device__ __forceinline__ void block_sums(const scan_bwd_args &a, const scan_bwd_lane &L,
                                                  int64_t seg, const float sums[P_COUNT],
                                                  float run[P_COUNT][SCAN_BWD_MAX_WARPS][32]) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, NW = blockDim.x >> 5;
  for (int p = 0; p < P_COUNT; p++)
    run[p][w][lane] = sums[p];
  __syncthreads();
  if (w == 0 && L.live)
    for (int p = 0; p < P_COUNT; p++) {
      float sum = 0.0f;
      for (int v = 0; v < NW; v++)
        sum += run[p][v][lane];
      a.partial[(((int64_t)p * a.B + L.b) * a.nseg + seg) * a.C + L.c] = sum;
    }
  __syncthreads(); /* run[] is read */
}

/* One block a stream group: one batch row's 32 channels (lane = channel)
 * and all its chunks, warp w the chunks [w*cpw, (w+1)*cpw), the runs'
 * maps folded in shared memory. fused: B = 1, the block writes the
 * outputs of channel_outputs itself. */
__global__ void __launch_bounds__(32 * SCAN_BWD_MAX_WARPS)
    tilessm_scan_backward_chunks(scan_bwd_args a, scan_bwd_out o, int fused) {
  /* per warp: its run's map (P, forward state, forward adjoint, backward
   * state, backward adjoint), later its sums */
  __shared__ float run[P_COUNT][SCAN_BWD_MAX_WARPS][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, NW = blockDim.x >> 5;
  const int64_t C = a.C, NC = a.NC, groups = (C + 31) / 32;
  const int runs0 = a.direction != APX_SCAN_BACKWARD, runs1 = a.direction != APX_SCAN_FORWARD;
  for (int64_t blk = blockIdx.x; blk < a.B * groups; blk += gridDim.x) {
    const int64_t b = blk / groups;
    const scan_bwd_lane L = lane_at(a, b, (blk % groups) * 32 + lane);
    int64_t lo = (int64_t)w * a.cpw, hi = lo + a.cpw;
    if (lo > NC)
      lo = NC;
    if (hi > NC)
      hi = NC;
    /* a lane past C walks nothing and stores nothing */
    if (!L.live)
      hi = lo;
    /* the initial states and grad_final_state (read before (1): their
     * loads wait with the chunks') */
    float edge[4];
    edge_values(a, L, edge);

    /* (1) the warp's run */
    float map[P_COUNT];
    walk_local(a, L, lo, hi, map);
    for (int q = 0; q < P_COUNT; q++)
      run[q][w][lane] = map[q];
    __syncthreads();

    /* (2) the other runs folded in: this run's true start states and
     * entering adjoints */
    float s0 = edge[0], a1 = edge[3], a0 = edge[2], s1 = edge[1];
    for (int v = 0; v < w; v++) {
      s0 = run[0][v][lane] * s0 + run[1][v][lane];
      a1 = run[0][v][lane] * a1 + run[4][v][lane];
    }
    for (int v = NW - 1; v > w; v--) {
      a0 = run[0][v][lane] * a0 + run[2][v][lane];
      s1 = run[0][v][lane] * s1 + run[3][v][lane];
    }
    if (w == 0) {
      /* the gradients of the initial states: each adjoint through every run */
      float gi0 = run[0][0][lane] * a0 + run[2][0][lane], gi1 = edge[3];
      for (int v = 0; v < NW; v++)
        gi1 = run[0][v][lane] * gi1 + run[4][v][lane];
      if (L.live) {
        a.grad_init[(b * 2 + 0) * C + L.c] = runs0 ? gi0 : 0.0f;
        a.grad_init[(b * 2 + 1) * C + L.c] = runs1 ? gi1 : 0.0f;
      }
    }
    __syncthreads(); /* run[] is read; the sums reuse it */

    /* (2b) and (3) */
    float sums[P_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    walk_true(a, L, lo, hi, s0, a1, a0, s1, sums);
    block_sums(a, L, 0, sums, run);
    if (fused && w == 0 && L.live)
      channel_outputs(a, o, L.c);
  }
}

/* K across blocks, pass 1: a block per (stream group, segment of
 * nseg's), warp w of segment seg the run r = seg*NW + w, the chunks
 * [r*cpw, (r+1)*cpw): step (1), its map to runs[.][b][r][c]. */
__global__ void __launch_bounds__(32 * SCAN_BWD_MAX_WARPS)
    tilessm_scan_backward_runs(scan_bwd_args a) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, NW = blockDim.x >> 5;
  const int64_t C = a.C, NC = a.NC, groups = (C + 31) / 32, R = a.nseg * NW;
  for (int64_t blk = blockIdx.x; blk < a.B * groups * a.nseg; blk += gridDim.x) {
    const int64_t seg = blk % a.nseg, bg = blk / a.nseg, b = bg / groups;
    const scan_bwd_lane L = lane_at(a, b, (bg % groups) * 32 + lane);
    if (!L.live)
      continue;
    const int64_t r = seg * NW + w;
    int64_t lo = r * a.cpw, hi = lo + a.cpw;
    lo = lo > NC ? NC : lo;
    hi = hi > NC ? NC : hi;
    float map[P_COUNT];
    walk_local(a, L, lo, hi, map);
    for (int q = 0; q < P_COUNT; q++)
      a.runs[(((int64_t)q * a.B + b) * R + r) * C + L.c] = map[q];
  }
}

/* Pass 2, one thread per stream (b, c): the runs' maps folded in order,
 * each run's true values to starts[.][b][r][c] (forward start state,
 * backward entering adjoint, forward entering adjoint, backward start
 * state), the initial states' gradients to grad_init. The loads of
 * SCAN_BWD_FOLD runs are issued before their folds. */
__global__ void tilessm_scan_backward_fold(scan_bwd_args a, int64_t R) {
  const int64_t B = a.B, C = a.C;
  const int runs0 = a.direction != APX_SCAN_BACKWARD, runs1 = a.direction != APX_SCAN_FORWARD;
  CUDA_FOR(i, B * C) {
    const int64_t b = i / C, c = i % C;
    scan_bwd_lane L;
    L.b = b;
    L.cl = c;
    float edge[4];
    edge_values(a, L, edge);
    const float *map = a.runs + b * R * C + c;
    float *start = a.starts + b * R * C + c;
    const int64_t q_stride = B * R * C;
    float s0 = edge[0], a1 = edge[3], a0 = edge[2], s1 = edge[1];
    for (int64_t r0 = 0; r0 < R; r0 += SCAN_BWD_FOLD) {
      float pu[SCAN_BWD_FOLD], f0[SCAN_BWD_FOLD], b1[SCAN_BWD_FOLD];
      float pd[SCAN_BWD_FOLD], b0[SCAN_BWD_FOLD], f1[SCAN_BWD_FOLD];
#pragma unroll
      for (int j = 0; j < SCAN_BWD_FOLD; j++) {
        pu[j] = pd[j] = 1.0f;
        f0[j] = b1[j] = b0[j] = f1[j] = 0.0f;
        if (r0 + j < R) {
          const int64_t up = (r0 + j) * C, down = (R - 1 - r0 - j) * C;
          pu[j] = map[up];
          f0[j] = map[q_stride + up];
          b1[j] = map[4 * q_stride + up];
          pd[j] = map[down];
          b0[j] = map[2 * q_stride + down];
          f1[j] = map[3 * q_stride + down];
        }
      }
#pragma unroll
      for (int j = 0; j < SCAN_BWD_FOLD; j++)
        if (r0 + j < R) {
          const int64_t up = (r0 + j) * C, down = (R - 1 - r0 - j) * C;
          start[up] = s0;
          start[q_stride + up] = a1;
          start[2 * q_stride + down] = a0;
          start[3 * q_stride + down] = s1;
          s0 = pu[j] * s0 + f0[j];
          a1 = pu[j] * a1 + b1[j];
          a0 = pd[j] * a0 + b0[j];
          s1 = pd[j] * s1 + f1[j];
        }
    }
    a.grad_init[(b * 2 + 0) * C + c] = runs0 ? a0 : 0.0f;
    a.grad_init[(b * 2 + 1) * C + c] = runs1 ? a1 : 0.0f;
  }
}

/* Pass 3, the blocks of pass 1: each run from its true values (steps (2b)
 * and (3)), the sums over the block's warps to partial[.][b][seg][c]. */
__global__ void __launch_bounds__(32 * SCAN_BWD_MAX_WARPS)
    tilessm_scan_backward_segments(scan_bwd_args a) {
  __shared__ float run[P_COUNT][SCAN_BWD_MAX_WARPS][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, NW = blockDim.x >> 5;
  const int64_t C = a.C, NC = a.NC, groups = (C + 31) / 32, R = a.nseg * NW;
  for (int64_t blk = blockIdx.x; blk < a.B * groups * a.nseg; blk += gridDim.x) {
    const int64_t seg = blk % a.nseg, bg = blk / a.nseg, b = bg / groups;
    const scan_bwd_lane L = lane_at(a, b, (bg % groups) * 32 + lane);
    const int64_t r = seg * NW + w;
    int64_t lo = r * a.cpw, hi = lo + a.cpw;
    lo = lo > NC ? NC : lo;
    hi = hi > NC ? NC : hi;
    float sums[P_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (L.live) {
      const float *start = a.starts + (b * R + r) * C + L.c;
      const int64_t q_stride = a.B * R * C;
      walk_true(a, L, lo, hi, start[0], start[q_stride], start[2 * q_stride], start[3 * q_stride],
                sums);
    }
    block_sums(a, L, seg, sums, run);
  }
}

/* One thread per channel: channel_outputs. */
__global__ void tilessm_scan_backward_channels(scan_bwd_args a, scan_bwd_out o) {
  CUDA_FOR(c, a.C) channel_outputs(a, o, c);
}

apx_status cuda_tilessm_scan_backward(void *state, const apx_tilessm_scan_backward_args *args,
                                      const apx_call *call) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, args->tokens->device_index);
  if (s != APX_OK)
    return s;
  const apx_tensor *tokens = args->tokens;
  const int64_t B = tokens->shape[0], K = tokens->shape[1], C = tokens->shape[2];
  if (C == 0)
    return APX_OK;
  cudaStream_t stream = cuda_stream(call);
  const int gated = args->direction == APX_SCAN_BIDIRECTIONAL && args->merge == APX_MERGE_GATED;

  scan_bwd_args a;
  memset(&a, 0, sizeof a);
  a.tokens = tokens->data;
  a.grad_out = args->grad_out->data;
  a.decay = args->decay->data;
  a.input_gain = args->input_gain->data;
  a.output_gain = args->output_gain->data;
  a.state_bias = args->state_bias->data;
  a.dt = (int)tokens->dtype;
  a.decay_dt = (int)args->decay->dtype;
  a.ig_dt = (int)args->input_gain->dtype;
  a.og_dt = (int)args->output_gain->dtype;
  a.sb_dt = (int)args->state_bias->dtype;
  if (args->init_state) {
    a.init = args->init_state->data;
    a.init_dt = (int)args->init_state->dtype;
    a.init_ndim = args->init_state->ndim;
  }
  if (gated) {
    a.gate_rows = args->merge_gate && args->merge_gate->ndim == 3 ? (int)B : 1;
    if (args->merge_gate) {
      a.gate = args->merge_gate->data;
      a.gate_dt = (int)args->merge_gate->dtype;
    }
  }
  if (args->grad_final_state) {
    a.grad_final = args->grad_final_state->data;
    a.grad_final_dt = (int)args->grad_final_state->dtype;
  }
  a.B = B;
  a.K = K;
  a.C = C;
  /* docs/ops.md, tilessm_scan: |clamp_value| rounded to the tokens dtype */
  float lim = (float)fabs(args->clamp_value);
  a.lim = tokens->dtype == APX_DTYPE_F16    ? __half2float(__float2half_rn(lim))
          : tokens->dtype == APX_DTYPE_BF16 ? __bfloat162float(__float2bfloat16_rn(lim))
                                            : lim;
  a.direction = (int)args->direction;
  a.merge = (int)args->merge;
  a.grad_tokens = args->grad_tokens ? args->grad_tokens->data : nullptr;

  /* the chunks, and warps enough that each walks at most a few; K across
   * blocks (segments of warps * SCAN_BWD_SPLIT_CPW chunks, a block each)
   * when a block a stream group would give its warps more than
   * SCAN_BWD_SPLIT_CPW chunks each */
  const int64_t NC = (K + SCAN_BWD_L - 1) / SCAN_BWD_L;
  const int64_t max_warps = SCAN_BWD_MAX_WARPS;
  const int split = NC > max_warps * SCAN_BWD_SPLIT_CPW;
  const int64_t warps = NC < 1 ? 1 : NC < max_warps ? NC : max_warps;
  a.NC = NC;
  a.cpw = split ? (int64_t)SCAN_BWD_SPLIT_CPW : (NC + warps - 1) / warps;
  a.nseg = split ? (NC + warps * a.cpw - 1) / (warps * a.cpw) : 1;
  const int64_t R = split ? a.nseg * warps : 0; /* runs a stream */

  const size_t bc = (size_t)(B * C);
  const size_t chunk_bytes = cuda_align_up(2 * (size_t)NC * bc * sizeof(float));
  const size_t partial_bytes = cuda_align_up(P_COUNT * (size_t)a.nseg * bc * sizeof(float));
  const size_t init_bytes = cuda_align_up(2 * bc * sizeof(float));
  const size_t runs_bytes = cuda_align_up(P_COUNT * (size_t)R * bc * sizeof(float));
  const size_t starts_bytes = cuda_align_up(4 * (size_t)R * bc * sizeof(float));
  const size_t bytes =
      256 + chunk_bytes + partial_bytes + init_bytes + (split ? runs_bytes + starts_bytes : 0);
  cuda_workspace ws;
  s = cuda_ws_alloc(st, stream, bytes, &ws, "tilessm_scan_backward: workspace");
  if (s != APX_OK)
    return s;
  char *p = (char *)ws.ptr;
  a.chunk = (float *)p;
  p += chunk_bytes;
  a.partial = (float *)p;
  p += partial_bytes;
  a.grad_init = (float *)p;
  p += init_bytes;
  if (split) {
    a.runs = (float *)p;
    p += runs_bytes;
    a.starts = (float *)p;
  }

  scan_bwd_out o;
  memset(&o, 0, sizeof o);
  const apx_tensor *vector_grads[4] = {args->grad_decay, args->grad_input_gain,
                                       args->grad_output_gain, args->grad_state_bias};
  for (int i = 0; i < 4; i++) {
    o.grad[i] = vector_grads[i] ? vector_grads[i]->data : nullptr;
    o.grad_dt[i] = vector_grads[i] ? (int)vector_grads[i]->dtype : 0;
  }
  if (args->grad_init_state) {
    o.grad_init = args->grad_init_state->data;
    o.grad_init_dt = (int)args->grad_init_state->dtype;
    o.grad_init_per_direction = args->grad_init_state->ndim == 3;
  }
  if (args->grad_merge_gate) {
    o.grad_gate = args->grad_merge_gate->data;
    o.grad_gate_dt = (int)args->grad_merge_gate->dtype;
  }
  const int fused = B == 1 && !split;
  if (B > 0 && !split) {
    int64_t blocks = B * ((C + 31) / 32);
    if (blocks > 0x7fffffffLL)
      blocks = 0x7fffffffLL;
    tilessm_scan_backward_chunks<<<(unsigned)blocks, (unsigned)(32 * warps), 0, stream>>>(a, o,
                                                                                          fused);
  }
  if (B > 0 && split) {
    int64_t blocks = B * ((C + 31) / 32) * a.nseg;
    if (blocks > 0x7fffffffLL)
      blocks = 0x7fffffffLL;
    tilessm_scan_backward_runs<<<(unsigned)blocks, (unsigned)(32 * warps), 0, stream>>>(a);
    cuda_geom gf = cuda_geom_1d(B * C, 128);
    tilessm_scan_backward_fold<<<gf.blocks, gf.threads, 0, stream>>>(a, R);
    tilessm_scan_backward_segments<<<(unsigned)blocks, (unsigned)(32 * warps), 0, stream>>>(a);
  }
  if (!fused) {
    cuda_geom gc = cuda_geom_1d(C, 128);
    tilessm_scan_backward_channels<<<gc.blocks, gc.threads, 0, stream>>>(a, o);
  }
  cudaError_t err = cudaGetLastError();
  cuda_ws_free(&ws);
  if (err != cudaSuccess)
    return cuda_fail(st, err, "tilessm_scan_backward: launch");
  return APX_OK;
}
