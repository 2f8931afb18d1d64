/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: fusiongate_fuse_backward (docs/ops.md, fusiongate_fuse_backward).
 *
 * With g = grad_out, per element in fp32 and rounded once:
 *   grad_base = g - g*alpha,  grad_detail = g*alpha,
 *   grad_alpha[b,p] = sum over c = 0 .. C-1 of g*(detail - base).
 * A work item is one batch row and one segment of pixels: it walks the
 * channels in order and keeps the segment's grad_alpha sums in fp32, so
 * every sum has one order whatever the thread count. */
#include "scan_index_simd.h"

/* Pixels per work item (its fp32 rows live on the stack). */
#define FUSE_BWD_SEGMENT 1024

apx_status cpu_fusiongate_fuse_backward(void *state,
                                        const apx_fusiongate_fuse_backward_args *args,
                                        const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const apx_tensor *base = args->base;
  const apx_dtype dt = base->dtype;
  const int64_t batch = base->shape[0], channels = base->shape[1];
  const int64_t plane = base->shape[2] * base->shape[3];
  const int64_t numel = apx_backend_numel(base);
  const si_isa isa = si_isa_level();
  const size_t elem = apx_backend_dtype_size(dt);
  if (batch == 0 || plane == 0)
    return APX_OK;
  const int64_t segments = (plane + FUSE_BWD_SEGMENT - 1) / FUSE_BWD_SEGMENT;
  const int64_t items = batch * segments;
  const char *grad_out = args->grad_out->data, *base_data = base->data;
  const char *detail = args->detail->data, *alpha = args->alpha->data;
  char *grad_base = args->grad_base ? args->grad_base->data : NULL;
  char *grad_detail = args->grad_detail ? args->grad_detail->data : NULL;
  char *grad_alpha = args->grad_alpha ? args->grad_alpha->data : NULL;

  CPU_OMP_FOR(st->threads, numel)
  for (int64_t item = 0; item < items; item++) {
    float g[FUSE_BWD_SEGMENT], a[FUSE_BWD_SEGMENT], x[FUSE_BWD_SEGMENT], y[FUSE_BWD_SEGMENT];
    float sum[FUSE_BWD_SEGMENT];
    const int64_t b = item / segments, begin = (item % segments) * FUSE_BWD_SEGMENT;
    const int64_t n = plane - begin < FUSE_BWD_SEGMENT ? plane - begin : FUSE_BWD_SEGMENT;
    const size_t alpha_at = (size_t)(b * plane + begin) * elem;
    si_row_to_f32(isa, dt, alpha + alpha_at, a, n);
    for (int64_t p = 0; p < n; p++)
      sum[p] = 0.0f;
    for (int64_t c = 0; c < channels; c++) {
      const size_t at = (size_t)((b * channels + c) * plane + begin) * elem;
      si_row_to_f32(isa, dt, grad_out + at, g, n);
      if (grad_base || grad_detail) {
        for (int64_t p = 0; p < n; p++) {
          float ga = g[p] * a[p];
          x[p] = g[p] - ga;
          y[p] = ga;
        }
        if (grad_base)
          si_row_from_f32(isa, dt, x, grad_base + at, n);
        if (grad_detail)
          si_row_from_f32(isa, dt, y, grad_detail + at, n);
      }
      if (grad_alpha) {
        si_row_to_f32(isa, dt, detail + at, x, n);
        si_row_to_f32(isa, dt, base_data + at, y, n);
        for (int64_t p = 0; p < n; p++)
          sum[p] += g[p] * (x[p] - y[p]);
      }
    }
    if (grad_alpha)
      si_row_from_f32(isa, dt, sum, grad_alpha + alpha_at, n);
  }
  return APX_OK;
}
