/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: fusiongate_fuse_backward (docs/ops.md, fusiongate_fuse_backward).
 *
 * With g = grad_out, per element in fp32 and rounded once:
 *   grad_base = g - g*alpha,  grad_detail = g*alpha,
 *   grad_alpha[b,p] = sum over c = 0 .. C-1 of g*(detail - base).
 * A work item is one batch row and one segment of pixels: it walks the
 * channels in order, reading each channel's rows of the segment in place
 * (8 lanes at a time on the AVX2 path), and keeps the segment's grad_alpha
 * sums in fp32, so every sum has one order whatever the thread count and
 * the segment size. */
#include "scan_index_simd.h"

/* Pixels per work item (its fp32 alpha row and sums live on the stack):
 * long contiguous rows of every channel keep the hardware prefetchers
 * streaming. */
#define FUSE_BWD_SEGMENT 8192

/* One call's tensors. */
typedef struct {
  apx_dtype dt;
  size_t elem;
  si_isa isa;
  int64_t channels, plane, segments;
  const char *grad_out, *base, *detail, *alpha;
  char *grad_base, *grad_detail, *grad_alpha;
} fuse_bwd;

/* Pixels [p, n) of one channel's rows (byte offset `at` into every
 * tensor), a = alpha's fp32 row, sum += g*(detail - base). */
static inline __attribute__((always_inline)) void fuse_row_scalar(const fuse_bwd *c, size_t at,
                                                                  const float *a, float *sum,
                                                                  int64_t p, int64_t n) {
  const apx_dtype dt = c->dt;
  for (; p < n; p++) {
    const float g = si_load_f32(dt, c->grad_out + at, p);
    const float ga = g * a[p];
    if (c->grad_base)
      si_store_f32(dt, c->grad_base + at, p, g - ga);
    if (c->grad_detail)
      si_store_f32(dt, c->grad_detail + at, p, ga);
    if (c->grad_alpha)
      sum[p] += g * (si_load_f32(dt, c->detail + at, p) - si_load_f32(dt, c->base + at, p));
  }
}

#if SI_HAVE_X86
static inline __attribute__((always_inline)) SI_TARGET_AVX2 void
fuse_row_avx2_dt(const fuse_bwd *c, apx_dtype dt, size_t at, const float *a, float *sum,
                 int64_t n) {
  const char *g = c->grad_out + at, *d = c->detail + at, *b = c->base + at;
  char *gb = c->grad_base ? c->grad_base + at : NULL;
  char *gd = c->grad_detail ? c->grad_detail + at : NULL;
  const size_t es = c->elem;
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    const size_t off = (size_t)p * es;
    const __m256 gv = si8_load(dt, g + off);
    const __m256 ga = _mm256_mul_ps(gv, _mm256_loadu_ps(a + p));
    if (gb)
      si8_store(dt, gb + off, _mm256_sub_ps(gv, ga));
    if (gd)
      si8_store(dt, gd + off, ga);
    if (c->grad_alpha)
      _mm256_storeu_ps(sum + p,
                       _mm256_add_ps(_mm256_loadu_ps(sum + p),
                                     _mm256_mul_ps(gv, _mm256_sub_ps(si8_load(dt, d + off),
                                                                     si8_load(dt, b + off)))));
  }
  fuse_row_scalar(c, at, a, sum, p, n);
}

/* One instantiation a dtype, so that the conversions' switch leaves the loop. */
SI_TARGET_AVX2 static void fuse_row_avx2(const fuse_bwd *c, size_t at, const float *a, float *sum,
                                         int64_t n) {
  switch (c->dt) {
  case APX_DTYPE_F16: fuse_row_avx2_dt(c, APX_DTYPE_F16, at, a, sum, n); break;
  case APX_DTYPE_BF16: fuse_row_avx2_dt(c, APX_DTYPE_BF16, at, a, sum, n); break;
  default: fuse_row_avx2_dt(c, APX_DTYPE_F32, at, a, sum, n); break;
  }
}
#endif

static void fuse_item(const fuse_bwd *c, int64_t item) {
  float a[FUSE_BWD_SEGMENT], sum[FUSE_BWD_SEGMENT];
  const int64_t b = item / c->segments, begin = (item % c->segments) * FUSE_BWD_SEGMENT;
  const int64_t n = c->plane - begin < FUSE_BWD_SEGMENT ? c->plane - begin : FUSE_BWD_SEGMENT;
  const size_t alpha_at = (size_t)(b * c->plane + begin) * c->elem;
  si_row_to_f32(c->isa, c->dt, c->alpha + alpha_at, a, n);
  if (c->grad_alpha)
    memset(sum, 0, (size_t)n * sizeof(float));
  for (int64_t ch = 0; ch < c->channels; ch++) {
    const size_t at = (size_t)((b * c->channels + ch) * c->plane + begin) * c->elem;
#if SI_HAVE_X86
    if (c->isa == SI_ISA_AVX2) {
      fuse_row_avx2(c, at, a, sum, n);
      continue;
    }
#endif
    fuse_row_scalar(c, at, a, sum, 0, n);
  }
  if (c->grad_alpha)
    si_row_from_f32(c->isa, c->dt, sum, c->grad_alpha + alpha_at, n);
}

apx_status cpu_fusiongate_fuse_backward(void *state,
                                        const apx_fusiongate_fuse_backward_args *args,
                                        const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const apx_tensor *base = args->base;
  const int64_t batch = base->shape[0];
  const int64_t plane = base->shape[2] * base->shape[3];
  const int64_t numel = apx_backend_numel(base);
  if (batch == 0 || plane == 0)
    return APX_OK;
  const int64_t segments = (plane + FUSE_BWD_SEGMENT - 1) / FUSE_BWD_SEGMENT;
  const int64_t items = batch * segments;
  const fuse_bwd c = {
      .dt = base->dtype,
      .elem = apx_backend_dtype_size(base->dtype),
      .isa = si_isa_level(),
      .channels = base->shape[1],
      .plane = plane,
      .segments = segments,
      .grad_out = args->grad_out->data,
      .base = base->data,
      .detail = args->detail->data,
      .alpha = args->alpha->data,
      .grad_base = args->grad_base ? args->grad_base->data : NULL,
      .grad_detail = args->grad_detail ? args->grad_detail->data : NULL,
      .grad_alpha = args->grad_alpha ? args->grad_alpha->data : NULL,
  };
  /* one item runs on the calling thread whatever its size (work 0) */
  CPU_FOR_ITEMS(st, items == 1 ? 0 : numel, 1, item, items, fuse_item(&c, item));
  return APX_OK;
}
