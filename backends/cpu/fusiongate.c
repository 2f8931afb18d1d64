/* cpu fusiongate, spec/ops.md 5.A.
 *
 * alpha: sanitise each proxy in its own dtype (NaN->0, +inf->1, -inf->0),
 * cast to the out dtype, then with w = softplus evaluated in fp32:
 *   logits = fl(fl(fl(w_b*b) + fl(w_u*u)) + bias),  alpha = fl(sigmoid(logits))
 * every fl rounding to the out dtype (rounding model R), sigmoid rounded
 * to fp32.
 *
 * fuse: out = fl(base + fl(alpha*fl(detail - base))), alpha [B,1,H,W]
 * broadcast over C; out may alias base (elementwise, so in place is safe). */
#include <math.h>

#include "apx_half.h"
#include "tile_simd.h"

/* ---- alpha ------------------------------------------------------------------ */

/* PyTorch softplus (beta 1, threshold 20), evaluated in fp32. */
static float softplus_f32(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static inline __attribute__((always_inline)) float load_as_f32(const void *p, int64_t i,
                                                               apx_dtype dtype) {
  if (dtype == APX_DTYPE_F32) return ((const float *)p)[i];
  if (dtype == APX_DTYPE_F16) return apx_f16_to_f32(((const uint16_t *)p)[i]);
  return apx_bf16_to_f32(((const uint16_t *)p)[i]);
}

static inline __attribute__((always_inline)) float round_to(float v, apx_dtype dtype) {
  if (dtype == APX_DTYPE_F16) return apx_round_f16(v);
  if (dtype == APX_DTYPE_BF16) return apx_round_bf16(v);
  return v;
}

static inline __attribute__((always_inline)) void store_from_f32(void *p, int64_t i, float v,
                                                                 apx_dtype dtype) {
  if (dtype == APX_DTYPE_F32)
    ((float *)p)[i] = v;
  else if (dtype == APX_DTYPE_F16)
    ((uint16_t *)p)[i] = apx_f32_to_f16(v);
  else
    ((uint16_t *)p)[i] = apx_f32_to_bf16(v);
}

/* spec/ops.md 5.A step 1: values 0 and 1 are exact in every float dtype,
 * so sanitising in the proxy dtype is done on the widened value. */
static inline float sanitise(float v) {
  if (isnan(v)) return 0.0f;
  if (isinf(v)) return v > 0 ? 1.0f : 0.0f;
  return v;
}

/* Pixels per work item of alpha. */
#define ALPHA_BLOCK 4096

static inline __attribute__((always_inline)) void
alpha_loop(const cpu_state *st, const void *boundary, const void *uncertainty, void *out,
           int64_t n, float w_b, float w_u, float bias, apx_dtype in_dtype,
           apx_dtype out_dtype) {
  (void)st;
  const int64_t blocks = (n + ALPHA_BLOCK - 1) / ALPHA_BLOCK;
  CPU_OMP_FOR(st->threads, n * 8)
  for (int64_t block = 0; block < blocks; block++) {
    const int64_t end = (block + 1) * ALPHA_BLOCK < n ? (block + 1) * ALPHA_BLOCK : n;
    for (int64_t i = block * ALPHA_BLOCK; i < end; i++) {
      const float b = round_to(sanitise(load_as_f32(boundary, i, in_dtype)), out_dtype);
      const float u = round_to(sanitise(load_as_f32(uncertainty, i, in_dtype)), out_dtype);
      const float weighted_b = round_to(w_b * b, out_dtype);
      const float weighted_u = round_to(w_u * u, out_dtype);
      const float logits =
          round_to(round_to(weighted_b + weighted_u, out_dtype) + bias, out_dtype);
      /* sigmoid of the fp32 logits, evaluated in double and rounded once
       * to fp32: within half an fp32 ulp of the truth, where the fp32
       * formula 1/(1+expf(-x)) strays by 2 (the spec allows a storage
       * ulp). */
      const float alpha = (float)(1.0 / (1.0 + exp(-(double)logits)));
      store_from_f32(out, i, alpha, out_dtype);
    }
  }
}

#define ALPHA_CASE(in_dt, out_dt)                                              \
  case (in_dt) * APX_DTYPE_COUNT + (out_dt):                                   \
    alpha_loop(st, boundary, uncertainty, out, n, w_b, w_u, bias, in_dt, out_dt); \
    break;

apx_status cpu_fusiongate_alpha(void *state, const apx_fusiongate_alpha_args *args,
                                const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const void *boundary = args->boundary->data, *uncertainty = args->uncertainty->data;
  void *out = args->out->data;
  const int64_t n = cpu_numel(args->out);
  if (n == 0) return APX_OK;
  /* softplus as an fp32 tensor, then a host double that enters the fp32
   * math as fp32 (the same value); bias rounds from double to fp32. */
  const float w_b = softplus_f32((float)args->boundary_log_weight);
  const float w_u = softplus_f32((float)args->uncertainty_log_weight);
  const float bias = (float)args->bias;
  switch (args->boundary->dtype * APX_DTYPE_COUNT + args->out->dtype) {
    ALPHA_CASE(APX_DTYPE_F32, APX_DTYPE_F32)
    ALPHA_CASE(APX_DTYPE_F32, APX_DTYPE_F16)
    ALPHA_CASE(APX_DTYPE_F32, APX_DTYPE_BF16)
    ALPHA_CASE(APX_DTYPE_F16, APX_DTYPE_F32)
    ALPHA_CASE(APX_DTYPE_F16, APX_DTYPE_F16)
    ALPHA_CASE(APX_DTYPE_F16, APX_DTYPE_BF16)
    ALPHA_CASE(APX_DTYPE_BF16, APX_DTYPE_F32)
    ALPHA_CASE(APX_DTYPE_BF16, APX_DTYPE_F16)
    ALPHA_CASE(APX_DTYPE_BF16, APX_DTYPE_BF16)
  default:
    return st->svc->set_error(APX_ERR_INVALID_ARG,
                              "fusiongate_alpha: dtypes [%d] -> [%d] not handled",
                              (int)args->boundary->dtype, (int)args->out->dtype);
  }
  return APX_OK;
}

/* ---- fuse ------------------------------------------------------------------- */

/* Elements of one plane segment per work item: big enough to amortise the
 * call, small enough to balance planes over threads. */
#define FUSE_SEGMENT 16384

apx_status cpu_fusiongate_fuse(void *state, const apx_fusiongate_fuse_args *args,
                               const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const apx_tensor *base = args->base;
  const int64_t batch = base->shape[0], channels = base->shape[1];
  const int64_t plane = base->shape[2] * base->shape[3];
  const int64_t numel = cpu_numel(base);
  if (numel == 0) return APX_OK;
  const size_t elem = cpu_dtype_size(base->dtype);
  const cpu_tile_kernels *kernels = cpu_tile_kernels_for(base->dtype, cpu_tile_simd_level());
  const char *base_data = base->data, *detail = args->detail->data;
  const char *alpha = args->alpha->data;
  char *out = args->out->data;
  const int64_t segments = (plane + FUSE_SEGMENT - 1) / FUSE_SEGMENT;
  const int64_t items = batch * channels * segments;

  CPU_OMP_FOR(st->threads, numel)
  for (int64_t item = 0; item < items; item++) {
    const int64_t segment = item % segments, bc = item / segments;
    const int64_t b = bc / channels;
    const int64_t begin = segment * FUSE_SEGMENT;
    const int64_t count = plane - begin < FUSE_SEGMENT ? plane - begin : FUSE_SEGMENT;
    const size_t offset = (size_t)(bc * plane + begin) * elem;
    kernels->fuse(out + offset, base_data + offset, detail + offset,
                  alpha + (size_t)(b * plane + begin) * elem, (size_t)count);
  }
  return APX_OK;
}
