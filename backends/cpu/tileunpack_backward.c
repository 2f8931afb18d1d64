/* SPDX-License-Identifier: Apache-2.0 */
/* cpu tileunpack_backward, docs/ops.md, tileunpack_backward: the gradients of
 * tileunpack's base and packed.
 *
 * A pixel's weight for base and for each tile covering it depends only on
 * the placement and the priority, not on the values, so it is computed once
 * per batch row (a weight map [H,W] and a weight per tile pixel, fp32) by
 * visiting the row's tiles in descending key order:
 *   override: the first visitor of a pixel (the highest key) takes weight 1,
 *             the later ones 0; base keeps 1 where no tile came;
 *   blend:    a visitor takes a * m and leaves m * (1-a), m starting at 1;
 *             base keeps the final m = (1-a)^n.
 * Then every channel's gradients are grad_out times these weights (override:
 * a copy or a zero), each element written by one (b, c) item. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

typedef struct keyed {
  int64_t key, k;
} keyed;

static int compare_keyed(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  return (a->key > b->key) - (a->key < b->key);
}

/* The pixel origin of tile bk = b*K + k. */
static void origin_of(const apx_tileunpack_backward_args *args, int64_t bk, int64_t *y0,
                      int64_t *x0) {
  const int64_t t = args->tile, grid_w = args->grad_out->shape[3] / t;
  if (args->origins) {
    const int i64 = args->origins->dtype == APX_DTYPE_I64;
    *y0 = cpu_index_at(args->origins->data, i64, 2 * bk);
    *x0 = cpu_index_at(args->origins->data, i64, 2 * bk + 1);
  } else {
    const int64_t id = cpu_index_at(args->idx->data, args->idx->dtype == APX_DTYPE_I64, bk);
    *y0 = (id / grid_w) * t;
    *x0 = (id % grid_w) * t;
  }
}

/* The weights of batch row b: base_w [H*W], tile_w [K*t*t]. */
static void row_weights(const apx_tileunpack_backward_args *args, int64_t b, int64_t lmin,
                        int order_bits, float a, float one_minus_a, keyed *order, float *base_w,
                        float *tile_w) {
  const int64_t width = args->grad_out->shape[3], height = args->grad_out->shape[2];
  const int64_t t = args->tile, k_count = (args->idx ? args->idx : args->origins)->shape[1];
  const int blend = args->mode == APX_OVERLAP_BLEND;
  for (int64_t p = 0; p < height * width; p++)
    base_w[p] = 1.0f;
  for (int64_t k = 0; k < k_count; k++) {
    order[k].k = k;
    order[k].key = k;
    if (args->levels) {
      const int64_t level = cpu_index_at(args->levels->data,
                                         args->levels->dtype == APX_DTYPE_I64, b * k_count + k);
      order[k].key = (int64_t)(((uint64_t)(level - lmin) << order_bits) + (uint64_t)k);
    }
  }
  if (args->levels)
    qsort(order, (size_t)k_count, sizeof *order, compare_keyed); /* keys are distinct */
  for (int64_t r = k_count - 1; r >= 0; r--) {
    const int64_t k = order[r].k;
    int64_t y0, x0;
    origin_of(args, b * k_count + k, &y0, &x0);
    float *w = tile_w + k * t * t;
    for (int64_t dy = 0; dy < t; dy++)
      for (int64_t dx = 0; dx < t; dx++) {
        float *m = &base_w[(y0 + dy) * width + x0 + dx];
        if (blend) {
          w[dy * t + dx] = a * *m;
          *m = *m * one_minus_a;
        } else {
          w[dy * t + dx] = *m;
          *m = 0.0f;
        }
      }
  }
}

/* dst[i] = src[i] * w[i] (blend), or src[i] where w[i] is 1 and 0 where it
 * is 0 (override: a copy, bit for bit, or a zero, a run of equal weights at
 * a time). */
static void weigh(apx_dtype dt, int blend, const void *src, int64_t src_at, void *dst,
                  int64_t dst_at, const float *w, int64_t n) {
  if (blend) {
    for (int64_t i = 0; i < n; i++)
      cpu_store_float(dt, dst, dst_at + i, cpu_load_float(dt, src, src_at + i) * w[i]);
    return;
  }
  const size_t es = apx_backend_dtype_size(dt);
  for (int64_t i = 0; i < n;) {
    const int keep = w[i] != 0.0f;
    int64_t j = i + 1;
    while (j < n && (w[j] != 0.0f) == keep)
      j++;
    char *d = (char *)dst + (size_t)(dst_at + i) * es;
    if (keep)
      memcpy(d, (const char *)src + (size_t)(src_at + i) * es, (size_t)(j - i) * es);
    else
      memset(d, 0, (size_t)(j - i) * es);
    i = j;
  }
}

/* One call's arguments and weights. */
typedef struct {
  const apx_tileunpack_backward_args *args;
  int blend;
  apx_dtype dt;
  const float *base_w, *tile_w;
  int64_t channels, plane, k_count, t, width;
} weighed;

/* Work item bc: grad_base's plane (b, c). */
static void base_plane(const weighed *c, int64_t bc) {
  const int64_t b = bc / c->channels;
  weigh(c->dt, c->blend, c->args->grad_out->data, bc * c->plane, c->args->grad_base->data,
        bc * c->plane, c->base_w + b * c->plane, c->plane);
}

/* Work item bkc: grad_packed[b,k,c], which reads grad_out[b,c] at the
 * tile's pixels. */
static void packed_tile(const weighed *c, int64_t bkc) {
  const int64_t t = c->t, ch = bkc % c->channels, bk = bkc / c->channels, b = bk / c->k_count;
  int64_t y0, x0;
  origin_of(c->args, bk, &y0, &x0);
  for (int64_t dy = 0; dy < t; dy++)
    weigh(c->dt, c->blend, c->args->grad_out->data,
          (b * c->channels + ch) * c->plane + (y0 + dy) * c->width + x0,
          c->args->grad_packed->data, (bkc * t + dy) * t, c->tile_w + (bk * t + dy) * t, t);
}

apx_status cpu_tileunpack_backward(void *state, const apx_tileunpack_backward_args *args,
                                   const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *g = args->grad_out;
  const int64_t batch = g->shape[0], channels = g->shape[1];
  const int64_t plane = g->shape[2] * g->shape[3], t = args->tile;
  const int64_t k_count = (args->idx ? args->idx : args->origins)->shape[1];
  if (apx_backend_numel(g) == 0)
    return APX_OK;
  float *base_w = malloc((size_t)(batch * plane) * sizeof(float));
  float *tile_w = malloc((size_t)(batch * k_count * t * t > 0 ? batch * k_count * t * t : 1) *
                         sizeof(float));
  keyed *order = malloc((size_t)(k_count > 0 ? k_count : 1) * sizeof(keyed));
  if (!base_w || !tile_w || !order) {
    free(base_w);
    free(tile_w);
    free(order);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "tileunpack_backward: out of host memory for the weights "
                              "(B*H*W = [%lld])",
                              (long long)(batch * plane));
  }
  /* docs/ops.md, tileunpack (blend): a rounded to the dtype, 1-a too */
  const apx_dtype dt = g->dtype;
  const float a = cpu_round_double_to_dtype(args->blend_alpha, dt);
  float one_minus_a = 1.0f - a;
  if (dt == APX_DTYPE_F16)
    one_minus_a = apx_round_f16(one_minus_a);
  if (dt == APX_DTYPE_BF16)
    one_minus_a = apx_round_bf16(one_minus_a);
  int64_t lmin = 0;
  int order_bits = 1;
  if (args->levels)
    cpu_unpack_priority(args->levels, &lmin, &order_bits);
  for (int64_t b = 0; b < batch; b++)
    row_weights(args, b, lmin, order_bits, a, one_minus_a, order, base_w + b * plane,
                tile_w + b * k_count * t * t);

  const weighed c = {args,     args->mode == APX_OVERLAP_BLEND, dt, base_w, tile_w,
                     channels, plane, k_count, t, g->shape[3]};
  CPU_FOR_ITEMS(st, apx_backend_numel(g), 1, bc, batch * channels, base_plane(&c, bc));
  CPU_FOR_ITEMS(st, apx_backend_numel(g), 1, bkc, batch * k_count * channels,
                packed_tile(&c, bkc));
  free(base_w);
  free(tile_w);
  free(order);
  return APX_OK;
}
