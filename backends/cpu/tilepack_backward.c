/* SPDX-License-Identifier: Apache-2.0 */
/* cpu tilepack_backward, docs/ops.md, tilepack_backward: grad_features =
 * zeros, then grad_out[b,k] added onto tile idx[b,k] for k = 0 .. K-1.
 *
 * Each (b, c, row of tiles) of grad_features is one work item that owns
 * its pixels, written row by row: a pixel of a tile no k names is zero; a
 * named one is the sum in fp32 from zero of the packed gradients of the k
 * that name its id, in ascending k (a list per (b, id) built first),
 * rounded once. Items write disjoint memory, so the result is the same for
 * any thread count. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* One call's tensors, lists and extents. */
typedef struct {
  const apx_tensor *g, *gf;
  const int64_t *first, *next;
  apx_dtype dt;
  size_t es;
  int64_t channels, height, width, grid_w, grid_h, tiles, k_count, t;
} pack_rows;

/* Work item r: the pixels of one (b, c, row of tiles) of grad_features. */
static void pack_row(const pack_rows *c, int64_t r) {
  const int64_t t = c->t, width = c->width, k_count = c->k_count;
  const int64_t gy = r % c->grid_h, bc = r / c->grid_h;
  const int64_t b = bc / c->channels, ch = bc % c->channels;
  for (int64_t dy = 0; dy < t; dy++) {
    const int64_t row0 = (bc * c->height + gy * t + dy) * width;
    for (int64_t gx = 0; gx < c->grid_w; gx++) {
      const int64_t k0 = c->first[b * c->tiles + gy * c->grid_w + gx], at = row0 + gx * t;
      if (k0 < 0) { /* +0.0 is all zero bits in every float dtype */
        memset((char *)c->gf->data + (size_t)at * c->es, 0, (size_t)t * c->es);
        continue;
      }
      for (int64_t dx = 0; dx < t; dx++) {
        float sum = 0.0f;
        for (int64_t k = k0; k >= 0; k = c->next[b * k_count + k])
          sum += cpu_load_float(c->dt, c->g->data,
                                (((b * k_count + k) * c->channels + ch) * t + dy) * t + dx);
        cpu_store_float(c->dt, c->gf->data, at + dx, sum);
      }
    }
  }
}

apx_status cpu_tilepack_backward(void *state, const apx_tilepack_backward_args *args,
                                 const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *g = args->grad_out, *gf = args->grad_features;
  const int64_t batch = gf->shape[0], channels = gf->shape[1], height = gf->shape[2],
                width = gf->shape[3];
  const int64_t k_count = g->shape[1], t = g->shape[3];
  if (apx_backend_numel(gf) == 0)
    return APX_OK;
  const int64_t grid_w = width / t, tiles = (height / t) * grid_w;
  /* first[b*tiles + id]: the smallest k naming id in row b (-1: none);
   * next[b*K + k]: the next larger k naming the same id. */
  int64_t *first = malloc((size_t)(batch * tiles) * sizeof(int64_t));
  int64_t *last = malloc((size_t)(batch * tiles) * sizeof(int64_t));
  int64_t *next = malloc((size_t)(batch * k_count > 0 ? batch * k_count : 1) * sizeof(int64_t));
  if (!first || !last || !next) {
    free(first);
    free(last);
    free(next);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tilepack_backward: out of host memory for the tile lists "
                              "(B*tiles = [%lld])",
                              (long long)(batch * tiles));
  }
  const int i64 = args->idx->dtype == APX_DTYPE_I64;
  for (int64_t i = 0; i < batch * tiles; i++)
    first[i] = last[i] = -1;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t k = 0; k < k_count; k++) {
      const int64_t slot = b * tiles + cpu_index_at(args->idx->data, i64, b * k_count + k);
      next[b * k_count + k] = -1;
      if (last[slot] < 0)
        first[slot] = k;
      else
        next[b * k_count + last[slot]] = k;
      last[slot] = k;
    }

  const apx_dtype dt = g->dtype;
  const size_t es = apx_backend_dtype_size(dt);
  const int64_t grid_h = height / t, rows = batch * channels * grid_h;
  const pack_rows c = {g,      gf,     first, next,    dt, es, channels, height,
                       width,  grid_w, grid_h, tiles, k_count, t};
  CPU_FOR_ITEMS(st, apx_backend_numel(gf), 1, r, rows, pack_row(&c, r));
  free(first);
  free(last);
  free(next);
  return APX_OK;
}
