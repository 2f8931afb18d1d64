/* SPDX-License-Identifier: Apache-2.0 */
/* cpu tilepack, docs/ops.md, tilepack: a pure copy, bit-exact in every dtype.
 *   out[b,k,c,dy,dx] = features[b, c, ty*t+dy, tx*t+dx], (ty,tx) of idx[b,k]
 * Tiles are packed in the order the ids are given; duplicates are copied
 * twice.
 *
 * Reading tile by tile across all channels touches C planes per tile, a
 * TLB and cache miss per row. So the work is cut like tileunpack's: items
 * are (b, c, band of tile rows); an item first brings what it will read of
 * its band of the feature plane into cache (a sequential copy of the whole
 * band when its tiles cover much of it, else prefetches of their rows),
 * then copies the rows of the tiles that lie in the band to their packed
 * places. */
#include <stdlib.h>
#include <string.h>

#include "tile_simd.h"

/* Rows of one plane per band: about this many bytes (at least a tile row),
 * and the per-thread buffer a dense band is copied into. */
#define BAND_TARGET_BYTES (64u * 1024u)
#define BAND_BUFFER BAND_TARGET_BYTES

static inline __attribute__((always_inline)) void
pack_band(char *packed, const char *band_src, const int64_t *tiles_of_band, int64_t count,
          const int64_t *x0_of, int64_t band_y0, const int64_t *y0_of, size_t tile_block,
          size_t row_bytes, size_t src_row_stride, int64_t t, size_t elem) {
  for (int64_t i = 0; i < count; i++) {
    const int64_t item = tiles_of_band[i]; /* b*K + k */
    const char *src =
        band_src + (size_t)(y0_of[item] - band_y0) * src_row_stride + (size_t)x0_of[item] * elem;
    char *dst = packed + (size_t)item * tile_block;
    for (int64_t dy = 0; dy < t; dy++)
      memcpy(dst + (size_t)dy * row_bytes, src + (size_t)dy * src_row_stride, row_bytes);
  }
}

#if CPU_HAVE_STREAM
/* pack_band with 16-byte streaming stores; rows are a multiple of 16 bytes
 * and every destination is 16-byte aligned (checked by the caller). */
static inline __attribute__((always_inline)) void
pack_band_stream(char *packed, const char *band_src, const int64_t *tiles_of_band, int64_t count,
                 const int64_t *x0_of, int64_t band_y0, const int64_t *y0_of, size_t tile_block,
                 size_t row_bytes, size_t src_row_stride, int64_t t, size_t elem) {
  for (int64_t i = 0; i < count; i++) {
    const int64_t item = tiles_of_band[i];
    const char *src =
        band_src + (size_t)(y0_of[item] - band_y0) * src_row_stride + (size_t)x0_of[item] * elem;
    char *dst = packed + (size_t)item * tile_block;
    for (int64_t dy = 0; dy < t; dy++)
      for (size_t off = 0; off < row_bytes; off += 16)
        _mm_stream_si128(
            (__m128i *)(dst + (size_t)dy * row_bytes + off),
            _mm_loadu_si128((const __m128i *)(src + (size_t)dy * src_row_stride + off)));
  }
}
#endif

apx_status cpu_tilepack(void *state, const apx_tilepack_args *args, const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *features = args->features, *idx = args->idx;
  if (apx_backend_numel(args->out) == 0)
    return APX_OK;
  const int64_t batch = features->shape[0], channels = features->shape[1];
  const int64_t height = features->shape[2], width = features->shape[3];
  const int64_t t = args->tile, tiles = idx->shape[1];
  const int64_t grid_h = height / t, grid_w = width / t;
  const size_t elem = apx_backend_dtype_size(features->dtype);
  const size_t row_bytes = (size_t)t * elem;
  const size_t src_row_stride = (size_t)width * elem;
  const size_t plane_bytes = (size_t)height * src_row_stride;
  const int idx_i64 = idx->dtype == APX_DTYPE_I64;

  /* band = a run of whole tile rows */
  int64_t band_tile_rows = (int64_t)BAND_TARGET_BYTES / (int64_t)(t * src_row_stride);
  if (band_tile_rows < 1)
    band_tile_rows = 1;
  if (band_tile_rows > grid_h)
    band_tile_rows = grid_h;
  const int64_t bands = (grid_h + band_tile_rows - 1) / band_tile_rows;

  /* bucket the (b,k) items by (b, band), keeping k order */
  const size_t items = (size_t)(batch * tiles);
  int64_t *y0 = malloc(items * sizeof(int64_t));
  int64_t *x0 = malloc(items * sizeof(int64_t));
  int64_t *bucket_start = calloc((size_t)(batch * bands + 1), sizeof(int64_t));
  int64_t *bucketed = malloc(items * sizeof(int64_t));
  int64_t *fill = malloc((size_t)(batch * bands) * sizeof(int64_t));
  if (!y0 || !x0 || !bucket_start || !bucketed || !fill) {
    free(y0), free(x0), free(bucket_start), free(bucketed), free(fill);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tilepack: out of host memory for the tile plan (B*K = %lld)",
                              (long long)items);
  }
  for (size_t i = 0; i < items; i++) {
    const int64_t id = cpu_index_at(idx->data, idx_i64, (int64_t)i);
    y0[i] = (id / grid_w) * t;
    x0[i] = (id % grid_w) * t;
    bucket_start[1 + (int64_t)i / tiles * bands + id / grid_w / band_tile_rows]++;
  }
  for (int64_t i = 1; i <= batch * bands; i++)
    bucket_start[i] += bucket_start[i - 1];
  memcpy(fill, bucket_start, (size_t)(batch * bands) * sizeof(int64_t));
  for (size_t i = 0; i < items; i++)
    bucketed[fill[(int64_t)i / tiles * bands + y0[i] / t / band_tile_rows]++] = (int64_t)i;

  const char *src = features->data;
  char *packed = args->out->data;
  const size_t tile_block = (size_t)t * row_bytes; /* one channel of one tile */
  const size_t item_block = (size_t)channels * tile_block;
  const int64_t work_items = batch * channels * bands;
  const int64_t work = apx_backend_numel(args->out);
  (void)work;

  /* a large output is written with streaming stores (tile_simd.h) */
  const int stream = cpu_stream_ok(packed, apx_backend_numel(args->out) * (int64_t)elem, row_bytes);

  CPU_OMP_PARALLEL(st->threads, work) {
    /* on the heap: 64 KiB may be much of a small thread stack */
    char *band_buffer = aligned_alloc(64, BAND_BUFFER);
    CPU_OMP_LOOP
    for (int64_t w = 0; w < work_items; w++) {
      const int64_t band = w % bands, bc = w / bands;
      const int64_t b = bc / channels, c = bc % channels;
      const int64_t band_y0 = band * band_tile_rows * t;
      int64_t band_y1 = band_y0 + band_tile_rows * t;
      if (band_y1 > height)
        band_y1 = height;
      const int64_t first = bucket_start[b * bands + band];
      const int64_t count = bucket_start[b * bands + band + 1] - first;
      if (count == 0)
        continue;
      const char *band_src = src + (size_t)bc * plane_bytes + (size_t)band_y0 * src_row_stride;
      const size_t band_bytes = (size_t)(band_y1 - band_y0) * src_row_stride;
      /* Dense band: copy it whole to a buffer first. That read is
       * sequential, so the hardware prefetchers stream it at full speed,
       * and the gather below then reads L1/L2. Sparse band (or one too
       * big for the buffer, or no buffer): prefetch just the tile rows. */
      if ((size_t)count * (size_t)t * row_bytes * 4 >= band_bytes && band_bytes <= BAND_BUFFER &&
          band_buffer) {
        memcpy(band_buffer, band_src, band_bytes);
        band_src = band_buffer;
      } else {
        for (int64_t i = 0; i < count; i++) {
          const int64_t item = bucketed[first + i];
          const char *tile_src =
              band_src + (size_t)(y0[item] - band_y0) * src_row_stride + (size_t)x0[item] * elem;
          for (int64_t dy = 0; dy < t; dy++) {
            __builtin_prefetch(tile_src + (size_t)dy * src_row_stride, 0, 3);
            __builtin_prefetch(tile_src + (size_t)dy * src_row_stride + row_bytes - 1, 0, 3);
          }
        }
      }
      /* the packed tile of (b,k) channel c starts at item*item_block + c*tile_block */
      char *packed_c = packed + (size_t)c * tile_block;
#if CPU_HAVE_STREAM
      if (stream) {
        switch (row_bytes) {
        case 16:
          pack_band_stream(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block,
                           16, src_row_stride, t, elem);
          break;
        case 32:
          pack_band_stream(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block,
                           32, src_row_stride, t, elem);
          break;
        default:
          pack_band_stream(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block,
                           row_bytes, src_row_stride, t, elem);
          break;
        }
        continue;
      }
#endif
      switch (row_bytes) {
      case 16:
        pack_band(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block, 16,
                  src_row_stride, t, elem);
        break;
      case 32:
        pack_band(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block, 32,
                  src_row_stride, t, elem);
        break;
      case 64:
        pack_band(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block, 64,
                  src_row_stride, t, elem);
        break;
      default:
        pack_band(packed_c, band_src, bucketed + first, count, x0, band_y0, y0, item_block,
                  row_bytes, src_row_stride, t, elem);
        break;
      }
    }
    if (stream)
      cpu_stream_fence();
    free(band_buffer);
  }
  free(y0), free(x0), free(bucket_start), free(bucketed), free(fill);
  return APX_OK;
}
