/* cpu tilepack, spec/ops.md 2.A: a pure copy, bit-exact in every dtype.
 *   out[b,k,c,dy,dx] = features[b, c, ty*t+dy, tx*t+dx], (ty,tx) of idx[b,k]
 * Tiles are packed in the order the ids are given; duplicates are copied
 * twice. Work is split over (b,k): each item writes its own C*t*t block. */
#include <string.h>

#include "tile_simd.h"

/* Copy the C*t rows of one tile. `row_bytes` is a compile-time constant in
 * the common cases (see pack_rows), so each row is a few vector moves
 * instead of a memcpy call. */
static inline __attribute__((always_inline)) void
pack_one_tile(char *dst, const char *src, int64_t channels, int64_t t,
              size_t row_bytes, size_t src_row_stride, size_t src_plane_stride) {
  for (int64_t c = 0; c < channels; c++) {
    const char *plane = src + (size_t)c * src_plane_stride;
    for (int64_t dy = 0; dy < t; dy++) {
      memcpy(dst, plane + (size_t)dy * src_row_stride, row_bytes);
      dst += row_bytes;
    }
  }
}

static inline __attribute__((always_inline)) void
pack_rows(cpu_state *st, const apx_tilepack_args *args, size_t row_bytes) {
  const apx_tensor *features = args->features, *idx = args->idx;
  const int64_t batch = features->shape[0], channels = features->shape[1];
  const int64_t height = features->shape[2], width = features->shape[3];
  const int64_t t = args->tile, tiles = idx->shape[1];
  const int64_t grid_w = width / t;
  const size_t elem = apx_dtype_size(features->dtype);
  const size_t src_row_stride = (size_t)width * elem;
  const size_t src_plane_stride = (size_t)height * src_row_stride;
  const size_t tile_block = (size_t)channels * (size_t)t * row_bytes;
  const int idx_i64 = idx->dtype == APX_DTYPE_I64;
  const char *src = features->data;
  char *dst = args->out->data;
  const int64_t items = batch * tiles;
  const int64_t work = items * channels * t * t;
  (void)work;

  CPU_OMP_FOR(st->threads, work)
  for (int64_t item = 0; item < items; item++) {
    const int64_t b = item / tiles;
    const int64_t id = cpu_index_at(idx->data, idx_i64, item);
    const int64_t y0 = (id / grid_w) * t, x0 = (id % grid_w) * t;
    const char *tile_src = src + (size_t)b * channels * src_plane_stride +
                           (size_t)y0 * src_row_stride + (size_t)x0 * elem;
    pack_one_tile(dst + (size_t)item * tile_block, tile_src, channels, t,
                  row_bytes, src_row_stride, src_plane_stride);
  }
}

apx_status cpu_tilepack(void *state, const apx_tilepack_args *args,
                        const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const size_t row_bytes = (size_t)args->tile * apx_dtype_size(args->features->dtype);
  if (apx_tensor_numel(args->out) == 0) return APX_OK;
  /* One instantiation per common row size (t = 4, 8, 16, 32 in 2- and
   * 4-byte dtypes); the rest take the generic memcpy. */
  switch (row_bytes) {
  case 8: pack_rows(st, args, 8); break;
  case 16: pack_rows(st, args, 16); break;
  case 32: pack_rows(st, args, 32); break;
  case 64: pack_rows(st, args, 64); break;
  case 128: pack_rows(st, args, 128); break;
  default: pack_rows(st, args, row_bytes); break;
  }
  return APX_OK;
}
