/* tilessm_scan on CUDA (docs/ops.md, tilessm_scan): per stream (b,c), with fp32 state
 *   x = sanitize(tokens[b,k,c]); s = d*s + (1-d)*(ig*x + sb); y = og*s
 * forward, backward (k descending) or both, merged (sum, avg, gated); only
 * outputs are rounded, once, to the tokens dtype (docs/ops.md, Rounding and parity).
 *
 * Two schemes, both parallel over K as well as (B,C). When B*C fills the
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

struct ssm_chan {
  float d, om, ig, og, sb;
};

/* A channel's parameters from their fp32 values: decay clamped. */
static __device__ __forceinline__ ssm_chan ssm_chan_of(float d, float ig, float og, float sb) {
  ssm_chan ch;
  const float lo = 1e-6f, hi = (float)(1.0 - 1e-6); /* fp32 constants, docs/ops.md, tilessm_scan */
  ch.d = d < lo ? lo : (d > hi ? hi : d);
  ch.om = 1.0f - ch.d;
  ch.ig = ig;
  ch.og = og;
  ch.sb = sb;
  return ch;
}

static __device__ __forceinline__ ssm_chan load_chan(const ssm_params &p, int64_t c) {
  return ssm_chan_of(cuda_load_any(p.decay, p.dt_decay, c),
                     cuda_load_any(p.input_gain, p.dt_input_gain, c),
                     cuda_load_any(p.output_gain, p.dt_output_gain, c),
                     cuda_load_any(p.state_bias, p.dt_state_bias, c));
}

/* Element i of a float tensor of dtype dt (fp16 and bf16: 2 bytes,
 * anything else fp32, as cuda_load_any reads) as raw bits, and those bits
 * as fp32 (exact). Split so that a prologue can issue all its loads
 * before it converts any: a load whose conversion sits in the same dtype
 * branch waits for its data before the next load issues. The load is two
 * unconditional 2-byte loads, the low and high halves of an fp32 (the
 * same half twice for a 2-byte dtype): no branch and no predicated pair
 * of loads into one register, whose write-after-write hazard made ptxas
 * wait for every load in flight. The conversion is predicated PTX, opaque
 * to cicc: branches or selects on dt there, a dozen per prologue in each
 * of the block kernel's 36 instantiations, took cicc from 5 s to 40-60 s
 * for this file. Inputs never alias outputs (the core checks), so the
 * read-only path is safe. */
struct ssm_bits {
  uint32_t lo, hi;
};

static __device__ __forceinline__ ssm_bits ssm_load_bits(const void *p, int dt, int64_t i) {
  const int wide = dt != APX_DTYPE_F16 && dt != APX_DTYPE_BF16;
  const unsigned short *q = (const unsigned short *)p + (wide ? 2 * i : i);
  ssm_bits r;
  r.lo = __ldg(q);
  r.hi = __ldg(q + wide);
  return r;
}

static __device__ __forceinline__ float ssm_bits_to_f(ssm_bits r, int dt) {
  /* fp16: widen the low half; bf16: fp32's top half (shift by 16); fp32:
   * the halves joined */
  const int f16 = dt == APX_DTYPE_F16;
  const uint32_t shift = dt == APX_DTYPE_BF16 ? 16 : 0;
  float x;
  asm("{\n\t.reg .pred h;\n\t.reg .b16 l;\n\t.reg .b32 t;\n\t"
      "setp.ne.s32 h, %3, 0;\n\t"
      "cvt.u16.u32 l, %1;\n\t"
      "prmt.b32 t, %1, %2, 0x5410;\n\t"
      "@h cvt.f32.f16 %0, l;\n\t"
      "@!h shl.b32 %0, t, %4;\n\t}"
      : "=f"(x)
      : "r"(r.lo), "r"(r.hi), "r"(f16), "r"(shift));
  return x;
}

/* Initial state of direction dir (0 forward, 1 backward), cast to the
 * tokens dtype first (docs/ops.md, tilessm_scan: init_state). */
/* Not inlined: its dtype switches, inlined per channel into the scan
 * kernels' prologues, made NVVM take minutes per kernel (nvcc 13.0). */
static __device__ __noinline__ float init_state(const ssm_params &p, int64_t b, int dir,
                                                   int64_t c, int64_t C) {
  if (!p.init) return 0.0f;
  int64_t i = p.init_dirs == 2 ? (b * 2 + dir) * C + c : b * C + c;
  return cuda_round_any(cuda_load_any(p.init, p.dt_init, i), p.dt_tokens);
}

/* NaN -> 0, +-inf -> +-lim, clamp to [-lim, lim]: exact in the tokens
 * dtype because lim is representable there. */
static __device__ __forceinline__ float sanitize(float x, float lim) {
  if (x != x) return 0.0f;
  return x > lim ? lim : (x < -lim ? -lim : x);
}

/* V consecutive channels of one token row: `raw` is their storage (one
 * 2-, 4- or 8-byte word), to_f widens it to fp32; load = one read-only
 * vector load and to_f; store rounds each channel once. */
template <typename T, int V> struct ssm_vec;
template <typename T> struct ssm_vec<T, 1> {
  typedef T raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) { x[0] = cuda_dt<T>::to_f(r); }
  static __device__ __forceinline__ void load(const T *p, float *x) { to_f(__ldg(p), x); }
  static __device__ __forceinline__ void store(T *p, const float *y) {
    *p = cuda_dt<T>::from_f(y[0]);
  }
};
template <> struct ssm_vec<__half, 2> {
  typedef __half2 raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) {
    x[0] = __low2float(r);
    x[1] = __high2float(r);
  }
  static __device__ __forceinline__ void load(const __half *p, float *x) {
    to_f(__ldg((const raw *)p), x);
  }
  static __device__ __forceinline__ void store(__half *p, const float *y) {
    *(raw *)p = __halves2half2(__float2half_rn(y[0]), __float2half_rn(y[1]));
  }
};
template <> struct ssm_vec<__nv_bfloat16, 2> {
  typedef __nv_bfloat162 raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) {
    x[0] = __low2float(r);
    x[1] = __high2float(r);
  }
  static __device__ __forceinline__ void load(const __nv_bfloat16 *p, float *x) {
    to_f(__ldg((const raw *)p), x);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16 *p, const float *y) {
    *(raw *)p = __halves2bfloat162(__float2bfloat16_rn(y[0]), __float2bfloat16_rn(y[1]));
  }
};
template <> struct ssm_vec<float, 2> {
  typedef float2 raw;
  static __device__ __forceinline__ void to_f(raw r, float *x) {
    x[0] = r.x;
    x[1] = r.y;
  }
  static __device__ __forceinline__ void load(const float *p, float *x) {
    to_f(__ldg((const raw *)p), x);
  }
  static __device__ __forceinline__ void store(float *p, const float *y) {
    *(raw *)p = make_float2(y[0], y[1]);
  }
};

/* One step of V streams: s = d*s + (1-d)*(ig*x + sb) on sanitised x. */
template <int V>
static __device__ __forceinline__ void step(const float *x, const ssm_chan *ch, float lim,
                                            float *s) {
#pragma unroll
  for (int v = 0; v < V; v++) {
    float drive = ch[v].ig * sanitize(x[v], lim) + ch[v].sb;
    s[v] = ch[v].d * s[v] + ch[v].om * drive;
  }
}

/* (1) local scans from a zero state. */
template <typename T, int V>
__global__ void ssm_local_kernel(const T *__restrict__ tokens, ssm_params p, ssm_geometry g,
                                 float *__restrict__ carry_f, float *__restrict__ carry_b) {
  CUDA_FOR(w, g.B * g.chunks * g.lanes) {
    int64_t c = (w % g.lanes) * V, j = (w / g.lanes) % g.chunks, b = w / (g.lanes * g.chunks);
    int64_t k0 = j * g.L, k1 = k0 + g.L < g.K ? k0 + g.L : g.K;
    ssm_chan ch[V];
#pragma unroll
    for (int v = 0; v < V; v++) ch[v] = load_chan(p, c + v);
    int64_t at = (b * g.chunks + j) * g.C + c;
    if (g.direction != APX_SCAN_BACKWARD) {
      float s[V] = {}, x[V];
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        ssm_vec<T, V>::load(tokens + (b * g.K + k) * g.C + c, x);
        step<V>(x, ch, p.lim, s);
      }
#pragma unroll
      for (int v = 0; v < V; v++) carry_f[at + v] = s[v];
    }
    if (g.direction != APX_SCAN_FORWARD) {
      float s[V] = {}, x[V];
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        ssm_vec<T, V>::load(tokens + (b * g.K + k) * g.C + c, x);
        step<V>(x, ch, p.lim, s);
      }
#pragma unroll
      for (int v = 0; v < V; v++) carry_b[at + v] = s[v];
    }
  }
}

/* (A, H) maps a state S to A*S + H; `first` then `second`. */
static __device__ __forceinline__ void compose(float &a1, float &h1, float a2, float h2) {
  h1 = a2 * h1 + h2;
  a1 = a2 * a1;
}

/* Combine the chunks of one direction of one stream, one warp: lane l owns
 * `per` consecutive chunks in scan order; each lane composes its chunks,
 * a warp scan composes the lanes, then each lane walks its chunks from its
 * true initial state, replacing every carry by that chunk's initial state.
 * Returns the final state (every lane). */
static __device__ float combine_dir(float *carry, const ssm_geometry &g, int64_t b, int64_t c,
                                    int backward, float s0, float a_full, float a_last) {
  const int lane = threadIdx.x & 31;
  const int64_t per = (g.chunks + 31) / 32;
  const int64_t n0 = lane * per, n1 = n0 + per < g.chunks ? n0 + per : g.chunks;
  float A = 1.0f, H = 0.0f;
  for (int64_t n = n0; n < n1; n++) {
    int64_t j = backward ? g.chunks - 1 - n : n;
    float a = j == g.chunks - 1 ? a_last : a_full;
    compose(A, H, a, carry[(b * g.chunks + j) * g.C + c]);
  }
  /* inclusive scan over lanes, then shift to exclusive */
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    float pa = __shfl_up_sync(0xffffffffu, A, off), ph = __shfl_up_sync(0xffffffffu, H, off);
    if (lane >= off) { /* (pa, ph) comes first */
      H = A * ph + H;
      A = A * pa;
    }
  }
  float ea = __shfl_up_sync(0xffffffffu, A, 1), eh = __shfl_up_sync(0xffffffffu, H, 1);
  float fa = __shfl_sync(0xffffffffu, A, 31), fh = __shfl_sync(0xffffffffu, H, 31);
  float s = lane == 0 ? s0 : ea * s0 + eh;
  for (int64_t n = n0; n < n1; n++) {
    int64_t j = backward ? g.chunks - 1 - n : n;
    int64_t at = (b * g.chunks + j) * g.C + c;
    float h = carry[at];
    carry[at] = s;
    s = (j == g.chunks - 1 ? a_last : a_full) * s + h;
  }
  return fa * s0 + fh;
}

/* (2) combine chunks per stream: the carries become the chunks' initial
 * states; writes final_state. One warp per stream. Also used alone when
 * K = 0 (no chunks: the final state is the init state). */
template <typename T>
__global__ void ssm_carry_kernel(ssm_params p, ssm_geometry g, float *carry_f, float *carry_b,
                                 T *__restrict__ final_state) {
  const int lane = threadIdx.x & 31;
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < g.B * g.C;
       w += ((int64_t)gridDim.x * blockDim.x) / 32) {
    int64_t c = w % g.C, b = w / g.C;
    ssm_chan ch = load_chan(p, c);
    float a_full = 1.0f, a_last = 1.0f;
    int64_t last_len = g.K - (g.chunks - 1) * g.L;
    for (int64_t i = 0; i < g.L; i++) a_full *= ch.d;
    for (int64_t i = 0; i < last_len && g.chunks > 0; i++) a_last *= ch.d;
    float final_f = init_state(p, b, 0, c, g.C), final_b = init_state(p, b, 1, c, g.C);
    if (g.chunks > 0) {
      if (g.direction != APX_SCAN_BACKWARD)
        final_f = combine_dir(carry_f, g, b, c, 0, final_f, a_full, a_last);
      if (g.direction != APX_SCAN_FORWARD)
        final_b = combine_dir(carry_b, g, b, c, 1, final_b, a_full, a_last);
    }
    if (!final_state || lane != 0) continue;
    if (g.direction == APX_SCAN_BIDIRECTIONAL) {
      final_state[(b * 2 + 0) * g.C + c] = cuda_dt<T>::from_f(final_f);
      final_state[(b * 2 + 1) * g.C + c] = cuda_dt<T>::from_f(final_b);
    } else {
      final_state[b * g.C + c] =
          cuda_dt<T>::from_f(g.direction == APX_SCAN_FORWARD ? final_f : final_b);
    }
  }
}

static __device__ __noinline__ float merge_gate(const ssm_params &p, int64_t b, int64_t c,
                                                   int64_t C) {
  if (!p.gate) return 0.5f;
  float v = cuda_round_any(cuda_load_any(p.gate, p.dt_gate, p.gate_batched ? b * C + c : c),
                           p.dt_tokens);
  return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}

/* (3) scan each chunk from its true initial state and write y; with one
 * chunk the initial states are the init state and this kernel also writes
 * final_state. Bidirectional: the backward outputs of the chunk go to an
 * fp32 scratch first, then the forward pass merges them. */
template <typename T, int V>
__global__ void ssm_out_kernel(const T *__restrict__ tokens, T *__restrict__ out, ssm_params p,
                               ssm_geometry g, const float *__restrict__ start_f,
                               const float *__restrict__ start_b, float *__restrict__ y_back,
                               T *__restrict__ final_state) {
  CUDA_FOR(w, g.B * g.chunks * g.lanes) {
    int64_t c = (w % g.lanes) * V, j = (w / g.lanes) % g.chunks, b = w / (g.lanes * g.chunks);
    int64_t k0 = j * g.L, k1 = k0 + g.L < g.K ? k0 + g.L : g.K;
    int64_t at = (b * g.chunks + j) * g.C + c;
    int single = g.chunks == 1;
    ssm_chan ch[V];
    float sf[V], sb[V], x[V], y[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      ch[v] = load_chan(p, c + v);
      sf[v] = sb[v] = 0.0f;
      if (g.direction != APX_SCAN_BACKWARD)
        sf[v] = single ? init_state(p, b, 0, c + v, g.C) : start_f[at + v];
      if (g.direction != APX_SCAN_FORWARD)
        sb[v] = single ? init_state(p, b, 1, c + v, g.C) : start_b[at + v];
    }
    if (g.direction == APX_SCAN_FORWARD) {
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sf);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = ch[v].og * sf[v];
        ssm_vec<T, V>::store(out + i, y);
      }
      if (single && final_state)
#pragma unroll
        for (int v = 0; v < V; v++) final_state[b * g.C + c + v] = cuda_dt<T>::from_f(sf[v]);
    } else if (g.direction == APX_SCAN_BACKWARD) {
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sb);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = ch[v].og * sb[v];
        ssm_vec<T, V>::store(out + i, y);
      }
      if (single && final_state)
#pragma unroll
        for (int v = 0; v < V; v++) final_state[b * g.C + c + v] = cuda_dt<T>::from_f(sb[v]);
    } else {
#pragma unroll 8
      for (int64_t k = k1 - 1; k >= k0; k--) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sb);
#pragma unroll
        for (int v = 0; v < V; v++) y_back[i + v] = ch[v].og * sb[v];
      }
      float gate[V];
#pragma unroll
      for (int v = 0; v < V; v++) gate[v] = merge_gate(p, b, c + v, g.C);
#pragma unroll 8
      for (int64_t k = k0; k < k1; k++) {
        int64_t i = (b * g.K + k) * g.C + c;
        ssm_vec<T, V>::load(tokens + i, x);
        step<V>(x, ch, p.lim, sf);
#pragma unroll
        for (int v = 0; v < V; v++) {
          float yf = ch[v].og * sf[v], yb = y_back[i + v];
          if (g.merge == APX_MERGE_SUM) y[v] = yf + yb;
          else if (g.merge == APX_MERGE_AVG) y[v] = 0.5f * (yf + yb);
          else y[v] = gate[v] * yf + (1.0f - gate[v]) * yb;
        }
        ssm_vec<T, V>::store(out + i, y);
      }
      if (single && final_state)
#pragma unroll
        for (int v = 0; v < V; v++) {
          final_state[(b * 2 + 0) * g.C + c + v] = cuda_dt<T>::from_f(sf[v]);
          final_state[(b * 2 + 1) * g.C + c + v] = cuda_dt<T>::from_f(sb[v]);
        }
    }
  }
}

/* ---- the block scan: one block per (b, channel group), K in rounds ------
 *
 * A block of SSM_WARPS warps owns 32*V channels of one batch row and walks
 * K in rounds of SSM_WARPS*L steps: in a round, warp w loads its L steps
 * (all loads in flight at once, and the next round's loads are issued
 * before this round's outputs are computed), scans them from a zero state
 * (h_w), publishes h_w in shared memory, folds the warps before it onto the
 * running state (s_in = d^L*s + h, the chunk map, exactly as the chunked
 * scan's carries) and scans its steps again from s_in, writing y. Tokens
 * are read from memory once and every y written once: the op's minimal
 * bytes, in one launch. Within a warp's L steps the recurrence is the
 * sequential one; only the chunk boundary states carry the extra rounding
 * of d^L*S + h (a few fp32 ulps, as the chunked scan's).
 *
 * It needs B*ceil(C/(32V)) blocks to fill the device or few rounds; the
 * chunked scan above serves few long streams. Modes: plain forward or
 * backward; the backward half of a bidirectional scan writing fp32 outputs
 * to a scratch; the forward half merging them (one rounding on store). */
#define SSM_WARPS 16
enum { SSM_PLAIN = 0, SSM_TO_SCRATCH = 1, SSM_MERGE = 2 };

/* d^len by repeated multiplication (the chunked scan's a_full/a_last). */
static __device__ __forceinline__ float ssm_pow(float d, int len) {
  float a = 1.0f;
  for (int i = 0; i < len; i++) a *= d;
  return a;
}

template <typename T, int V, int L, int MODE>
__global__ void __launch_bounds__(SSM_WARPS * 32)
ssm_block_kernel(const T *__restrict__ tokens, T *__restrict__ out, ssm_params p, int64_t B,
                 int64_t K, int64_t C, int backward, int merge, float *__restrict__ y_back,
                 T *__restrict__ final_state) {
  typedef ssm_vec<T, V> vec;
  typedef typename vec::raw R;
  __shared__ float h_sh[2][SSM_WARPS][32 * V];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t groups = (C + 32 * V - 1) / (32 * V);
  const int64_t per_round = (int64_t)SSM_WARPS * L;
  const int64_t rounds = (K + per_round - 1) / per_round;
  const int dir = MODE == SSM_MERGE ? 0 : (MODE == SSM_TO_SCRATCH ? 1 : backward);
  /* (b, group) of bg: a 32-bit division where it fits (a 64-bit one by a
   * run-time value is a long call on the prologue's critical path) */
  const bool div32 = B * groups <= (int64_t)UINT32_MAX;
  for (int64_t bg = blockIdx.x; bg < B * groups; bg += gridDim.x) {
    const int64_t b = div32 ? (int64_t)((uint32_t)bg / (uint32_t)groups) : bg / groups;
    const int64_t c = (bg - b * groups) * 32 * V + lane * V;
    const bool active = c < C; /* V = 2 only when C is even: c + 1 < C too */
    const int64_t cc = active ? c : 0;
    /* step n of the scan order is token k = n (forward) or K-1-n */
    auto at = [&](int64_t n) -> int64_t {
      return (b * K + (dir ? K - 1 - n : n)) * C + cc;
    };
    R cur[L], nxt[L];
    /* consecutive steps are C elements apart, backwards for dir 1 */
    const int64_t stride = dir ? -C : C;
    /* how many of the L steps from scan step n0 this thread walks (0 when
     * inactive): one 32-bit compare per step, not a 64-bit one */
    auto steps = [&](int64_t n0) -> int {
      const int64_t rest = K - n0;
      return !active || rest <= 0 ? 0 : (rest >= L ? L : (int)rest);
    };
    /* token addresses by a running pointer: an add per step (multiplying
     * i * stride in 64 bits took a dozen instructions a load, issued
     * before the first scan step) */
    auto load_round = [&](int64_t r, R *x) {
      const int64_t n0 = r * per_round + (int64_t)w * L;
      const int cnt = steps(n0);
      const T *q = tokens + at(n0 < K ? n0 : 0);
#pragma unroll
      for (int i = 0; i < L; i++, q += stride)
        if (i < cnt) x[i] = __ldg((const R *)q);
    };
    /* Every global load of the prologue is issued before any is used:
     * the first round's tokens, then the raw bits of the parameters, the
     * init state and the gate of the thread's V channels; only then the
     * dtype conversions. (Converting each value as it loads, through
     * cuda_load_any's switch or the noinline init_state, made each load
     * wait for the one before: a chain of memory round trips.) */
    if (rounds > 0) load_round(0, cur);
    ssm_bits raw_d[V], raw_ig[V], raw_og[V], raw_sb[V], raw_init[V], raw_gate[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      const int64_t cv = cc + (active ? v : 0);
      raw_d[v] = ssm_load_bits(p.decay, p.dt_decay, cv);
      raw_ig[v] = ssm_load_bits(p.input_gain, p.dt_input_gain, cv);
      raw_og[v] = ssm_load_bits(p.output_gain, p.dt_output_gain, cv);
      raw_sb[v] = ssm_load_bits(p.state_bias, p.dt_state_bias, cv);
      /* without init state or gate, a harmless load of the decay
       * instead, unused: no branch between the loads */
      raw_init[v] = ssm_load_bits(p.init ? p.init : p.decay, p.init ? p.dt_init : p.dt_decay,
                                  !p.init ? cv
                                  : p.init_dirs == 2 ? (b * 2 + dir) * C + cv
                                                     : b * C + cv);
      raw_gate[v] = ssm_bits{0, 0};
      if (MODE == SSM_MERGE)
        raw_gate[v] = ssm_load_bits(p.gate ? p.gate : p.decay, p.gate ? p.dt_gate : p.dt_decay,
                                    p.gate && p.gate_batched ? b * C + cv : cv);
    }
    ssm_chan ch[V];
    float carry[V], aL[V], gate[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      ch[v] = ssm_chan_of(ssm_bits_to_f(raw_d[v], p.dt_decay),
                          ssm_bits_to_f(raw_ig[v], p.dt_input_gain),
                          ssm_bits_to_f(raw_og[v], p.dt_output_gain),
                          ssm_bits_to_f(raw_sb[v], p.dt_state_bias));
      /* init state and gate: cast to the tokens dtype T first (as
       * init_state and merge_gate do) */
      carry[v] = p.init && active
                     ? cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_init[v], p.dt_init)))
                     : 0.0f;
      aL[v] = ssm_pow(ch[v].d, L);
      gate[v] = 0.5f;
      if (MODE == SSM_MERGE && p.gate && active) {
        float gv = cuda_dt<T>::to_f(cuda_dt<T>::from_f(ssm_bits_to_f(raw_gate[v], p.dt_gate)));
        gate[v] = gv < 0.0f ? 0.0f : (gv > 1.0f ? 1.0f : gv);
      }
    }
    for (int64_t r = 0; r < rounds; r++) {
      const int64_t n0 = r * per_round + (int64_t)w * L;
      const int cnt = steps(n0);
      float h[V] = {}, x[V];
#pragma unroll
      for (int i = 0; i < L; i++)
        if (i < cnt) {
          vec::to_f(cur[i], x);
          step<V>(x, ch, p.lim, h);
        }
      float *mine = h_sh[r & 1][w];
#pragma unroll
      for (int v = 0; v < V; v++) mine[lane * V + v] = h[v];
      if (r + 1 < rounds) load_round(r + 1, nxt);
      float yb[MODE == SSM_MERGE ? L : 1][V];
      if (MODE == SSM_MERGE) {
        const float *q = y_back + at(n0 < K ? n0 : 0);
#pragma unroll
        for (int i = 0; i < L; i++, q += stride)
          if (i < cnt)
#pragma unroll
            for (int v = 0; v < V; v++) yb[i][v] = q[v];
      }
      __syncthreads();
      /* fold the round's chunks in scan order: s_in for this warp, the
       * carry for the next round */
      float s[V];
#pragma unroll
      for (int v = 0; v < V; v++) s[v] = carry[v];
      float s_in[V];
      if (r + 1 < rounds) { /* every chunk of the round is L steps long */
#pragma unroll
        for (int i = 0; i < SSM_WARPS; i++) {
          if (i == w)
#pragma unroll
            for (int v = 0; v < V; v++) s_in[v] = s[v];
#pragma unroll
          for (int v = 0; v < V; v++) s[v] = aL[v] * s[v] + h_sh[r & 1][i][lane * V + v];
        }
      } else { /* the last round: chunks 0..last, last maybe short, the rest empty */
        const int64_t rest = K - r * per_round; /* in [1, per_round] */
        const int last = (int)((rest - 1) / L), last_len = (int)(rest - (int64_t)last * L);
        float a_last[V];
#pragma unroll
        for (int v = 0; v < V; v++) a_last[v] = last_len == L ? aL[v] : ssm_pow(ch[v].d, last_len);
        /* every chunk's h read first (empty chunks published h = 0 this
         * round, so all reads are of written values), then the fold in the
         * warps' order, the same arithmetic as above. Unrolled, without
         * the per-chunk 64-bit length and d^len loop of before; ptxas
         * still issues one shared load per link of the chain (nvcc 13.0,
         * sm_90) but gives these kernels fewer registers. */
        float hv[SSM_WARPS][V];
#pragma unroll
        for (int i = 0; i < SSM_WARPS; i++)
#pragma unroll
          for (int v = 0; v < V; v++) hv[i][v] = h_sh[r & 1][i][lane * V + v];
#pragma unroll
        for (int i = 0; i < SSM_WARPS; i++) {
          if (i == w)
#pragma unroll
            for (int v = 0; v < V; v++) s_in[v] = s[v];
          if (i <= last)
#pragma unroll
            for (int v = 0; v < V; v++)
              s[v] = (i == last ? a_last[v] : aL[v]) * s[v] + hv[i][v];
        }
      }
#pragma unroll
      for (int v = 0; v < V; v++) carry[v] = s[v];
      /* this warp's steps again, from its true initial state */
      const int64_t e0 = at(n0 < K ? n0 : 0);
      T *o = out + e0;
      float *ob = y_back + e0;
#pragma unroll
      for (int i = 0; i < L; i++, o += stride, ob += stride)
        if (i < cnt) {
          vec::to_f(cur[i], x);
          step<V>(x, ch, p.lim, s_in);
          float y[V];
#pragma unroll
          for (int v = 0; v < V; v++) y[v] = ch[v].og * s_in[v];
          if (MODE == SSM_TO_SCRATCH) {
#pragma unroll
            for (int v = 0; v < V; v++) ob[v] = y[v];
          } else {
            if (MODE == SSM_MERGE)
#pragma unroll
              for (int v = 0; v < V; v++) {
                if (merge == APX_MERGE_SUM) y[v] = y[v] + yb[i][v];
                else if (merge == APX_MERGE_AVG) y[v] = 0.5f * (y[v] + yb[i][v]);
                else y[v] = gate[v] * y[v] + (1.0f - gate[v]) * yb[i][v];
              }
            ssm_vec<T, V>::store(o, y);
          }
        }
#pragma unroll
      for (int i = 0; i < L; i++) cur[i] = nxt[i];
    }
    if (final_state && active && w == 0) {
#pragma unroll
      for (int v = 0; v < V; v++) {
        int64_t fs = MODE == SSM_PLAIN ? b * C + cc + v : (b * 2 + dir) * C + cc + v;
        final_state[fs] = cuda_dt<T>::from_f(carry[v]);
      }
    }
    __syncthreads(); /* h_sh is reused by the next (b, group) */
  }
}

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

/* Steps per warp and round: 16 for 16-bit tokens (16 registers of raw
 * tokens a round for V=2, twice that with the prefetch), 8 for fp32; twice
 * that when K takes more than two rounds (more bytes in flight and half
 * as many block-wide steps per token; a short K keeps more warps busy
 * with the shorter length). The merge pass holds the scratch outputs too:
 * half the length. */
template <typename T> struct ssm_block_len { enum { L = sizeof(T) == 4 ? 8 : 16 }; };

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

template <typename T>
static apx_status run(cuda_state *st, const apx_tilessm_scan_args *a, const ssm_params &p,
                      cudaStream_t s) {
  const int64_t B = a->tokens->shape[0];
  int sm_count = st->dev[a->tokens->device_index].sm_count;
  ssm_geometry g = geometry(a, B, sm_count);
  T *final_state = a->final_state ? (T *)a->final_state->data : nullptr;
  const T *tokens = (const T *)a->tokens->data;
  T *out = (T *)a->out->data;
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
