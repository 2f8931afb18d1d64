/* SPDX-License-Identifier: Apache-2.0 */
/* cpu fused_pack_op_unpack, docs/ops.md, fused_pack_op_unpack: out = features, except every
 * pixel x of a selected tile becomes
 *   fl(fl(fl(x*vs)+vb) * relu(fl(fl(x*gs)+gb)))   (rounding model R,
 * scalars entering as fp32). The reference packs, transforms and unpacks
 * (override, key = k); since every tile of an id holds the same value
 * computed from the original input, the result only depends on the SET of
 * selected ids. So the ids are reduced to a per-batch mask of the tile grid
 * first: a duplicate id (require_unique = 0) is transformed once, also when
 * out is features (in place, where transforming twice would be wrong).
 *
 * Work items are (b, c, tile row): each copies its band of t rows (not
 * when out is features) and then transforms the runs of consecutive
 * selected tiles of its tile row, reading features, writing out; the band
 * is still in L1/L2 for the second touch. */
#include <stdlib.h>
#include <string.h>

#include "tile_simd.h"

/* One call's tensors, runs and scalars. */
typedef struct {
  const cpu_tile_kernels *kernels;
  const char *src;
  char *dst;
  const int64_t *runs;
  const int32_t *run_count;
  int in_place;
  size_t band_bytes;
  int64_t width, t, grid_h, channels, max_runs;
  float vs, vb, gs, gb;
} fused_bands;

/* Work item `item`: band ty of plane (b, c). */
static void fused_band(const fused_bands *c, int64_t item) {
  const int64_t ty = item % c->grid_h;
  const int64_t b = item / (c->channels * c->grid_h);
  const size_t offset = (size_t)item * c->band_bytes;
  const char *in_band = c->src + offset;
  char *out_band = c->dst + offset;
  const int64_t *row_runs = c->runs + (size_t)((b * c->grid_h + ty) * c->max_runs) * 2;
  const int32_t n = c->run_count[b * c->grid_h + ty];
  /* Copy the whole band first (one memcpy, cheaper than one per gap
   * between runs), then overwrite the runs with the transform of the
   * ORIGINAL input, which stays in features (or, in place, is read
   * before it is written). */
  if (!c->in_place)
    memcpy(out_band, in_band, c->band_bytes);
  c->kernels->affine_reglu_runs(out_band, in_band, (size_t)c->width, (size_t)c->t, row_runs,
                                (size_t)n, (size_t)c->t, c->vs, c->vb, c->gs, c->gb);
}

apx_status cpu_fused_pack_op_unpack(void *state, const apx_fused_pack_op_unpack_args *args,
                                    const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *features = args->features, *idx = args->idx;
  const int64_t batch = features->shape[0], channels = features->shape[1];
  const int64_t height = features->shape[2], width = features->shape[3];
  const int64_t t = args->tile, tiles = idx->shape[1];
  if (apx_backend_numel(features) == 0)
    return APX_OK;
  const int64_t grid_h = height / t, grid_w = width / t;
  const size_t elem = apx_backend_dtype_size(features->dtype);
  const int idx_i64 = idx->dtype == APX_DTYPE_I64;

  /* runs[(b*grid_h + ty)*max_runs + r] = (first tx, one past last tx) */
  const int64_t max_runs = (grid_w + 1) / 2;
  const size_t tile_rows = (size_t)(batch * grid_h);
  unsigned char *selected = calloc((size_t)(grid_h * grid_w), 1);
  int32_t *run_count = calloc(tile_rows, sizeof(int32_t));
  int64_t *runs = malloc(tile_rows * (size_t)max_runs * 2 * sizeof(int64_t));
  if (!selected || !run_count || !runs) {
    free(selected);
    free(run_count);
    free(runs);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "fused_pack_op_unpack: out of host memory for the tile "
                              "mask (grid %lldx%lld)",
                              (long long)grid_h, (long long)grid_w);
  }
  for (int64_t b = 0; b < batch; b++) {
    memset(selected, 0, (size_t)(grid_h * grid_w));
    for (int64_t k = 0; k < tiles; k++)
      selected[cpu_index_at(idx->data, idx_i64, b * tiles + k)] = 1;
    for (int64_t ty = 0; ty < grid_h; ty++) {
      const unsigned char *row = selected + ty * grid_w;
      int64_t *row_runs = runs + (size_t)((b * grid_h + ty) * max_runs) * 2;
      int32_t n = 0;
      for (int64_t tx = 0; tx < grid_w;) {
        if (!row[tx]) {
          tx++;
          continue;
        }
        int64_t end = tx;
        while (end < grid_w && row[end])
          end++;
        row_runs[2 * n] = tx;
        row_runs[2 * n + 1] = end;
        n++;
        tx = end;
      }
      run_count[b * grid_h + ty] = n;
    }
  }

  const cpu_tile_kernels *kernels = cpu_tile_kernels_for(features->dtype, cpu_isa_level());
  /* docs/ops.md, fused_pack_op_unpack: Python float scalars enter the fp32 math as fp32 */
  const float vs = (float)args->value_scale, vb = (float)args->value_bias;
  const float gs = (float)args->gate_scale, gb = (float)args->gate_bias;
  const char *src = features->data;
  char *dst = args->out->data;
  const size_t row_bytes = (size_t)width * elem;
  const fused_bands c = {kernels,          src,   dst,    runs, run_count, dst == src,
                         (size_t)t * row_bytes, width, t, grid_h, channels, max_runs,
                         vs,               vb,    gs,     gb};
  const int64_t items = batch * channels * grid_h;
  const int64_t work = apx_backend_numel(features);
  /* about 32 KiB of output per hand-out */
  const int64_t chunk = c.band_bytes >= 32768 ? 1 : (int64_t)(32768 / c.band_bytes);
  CPU_FOR_ITEMS(st, work, chunk, item, items, fused_band(&c, item));
  free(selected);
  free(run_count);
  free(runs);
  return APX_OK;
}
