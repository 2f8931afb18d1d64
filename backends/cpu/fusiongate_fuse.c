/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: fusiongate_fuse (docs/ops.md, fusiongate_fuse).
 *
 * out = fl(base + fl(alpha*fl(detail - base))), alpha [B,1,H,W] broadcast
 * over C; out may alias base (elementwise, so in place is safe). */
#include "tile_simd.h"

/* Elements of one plane segment per work item: big enough to amortise the
 * call, small enough to balance planes over threads. */
#define FUSE_SEGMENT 16384

/* Work item `item`: one segment of one (b, c) plane. */
static void fuse_item(const cpu_tile_kernels *kernels, char *out, const char *base_data,
                      const char *detail, const char *alpha, int64_t item, int64_t segments,
                      int64_t channels, int64_t plane, size_t elem) {
  const int64_t segment = item % segments, bc = item / segments;
  const int64_t b = bc / channels;
  const int64_t begin = segment * FUSE_SEGMENT;
  const int64_t count = plane - begin < FUSE_SEGMENT ? plane - begin : FUSE_SEGMENT;
  const size_t offset = (size_t)(bc * plane + begin) * elem;
  kernels->fuse(out + offset, base_data + offset, detail + offset,
                alpha + (size_t)(b * plane + begin) * elem, (size_t)count);
}

apx_status cpu_fusiongate_fuse(void *state, const apx_fusiongate_fuse_args *args,
                               const apx_call *call) {
  (void)call;
  const cpu_state *st = state;
  const apx_tensor *base = args->base;
  const int64_t batch = base->shape[0], channels = base->shape[1];
  const int64_t plane = base->shape[2] * base->shape[3];
  const int64_t numel = apx_backend_numel(base);
  if (numel == 0)
    return APX_OK;
  const size_t elem = apx_backend_dtype_size(base->dtype);
  const cpu_tile_kernels *kernels = cpu_tile_kernels_for(base->dtype, cpu_isa_level());
  const char *base_data = base->data, *detail = args->detail->data;
  const char *alpha = args->alpha->data;
  char *out = args->out->data;
  const int64_t segments = (plane + FUSE_SEGMENT - 1) / FUSE_SEGMENT;
  const int64_t items = batch * channels * segments;

  CPU_FOR_ITEMS(st, numel, 1, item, items,
                fuse_item(kernels, out, base_data, detail, alpha, item, segments, channels, plane,
                          elem));
  return APX_OK;
}
