/* SPDX-License-Identifier: Apache-2.0 */
/* cpu fused_pack_op_unpack_backward, docs/ops.md,
 * fused_pack_op_unpack_backward. At a pixel x of a selected tile, in fp32:
 *   v = x*vs + vb,  g8 = x*gs + gb,  on = g8 > 0
 *   grad_features = grad * (on ? vs*g8 + v*gs : 0)
 * elsewhere grad_features = grad, copied bit for bit. The scalars'
 * gradients are sums over the selected pixels, in fp32: each (b, c) plane
 * in row-major order, then the planes in (b, c) order. A repeated id
 * selects its tile once, as in the forward. grad_features may be grad_out:
 * each element reads only its own grad. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* One call's tensors, tile mask and scalars. */
typedef struct {
  const apx_tensor *g, *x, *grad_features;
  const unsigned char *selected;
  float *partial; /* [planes][4] */
  apx_dtype dt;
  size_t es;
  int in_place;
  float vs, vb, gs, gb;
  int64_t channels, height, width, plane, tiles, grid_w, t;
} fused_planes;

/* Work item bc: plane (b, c) of grad_features and its four partial sums. */
static void fused_plane(const fused_planes *c, int64_t bc) {
  const apx_dtype dt = c->dt;
  const size_t es = c->es;
  const float vs = c->vs, vb = c->vb, gs = c->gs, gb = c->gb;
  const int64_t b = bc / c->channels, t = c->t;
  float d_vs = 0.0f, d_vb = 0.0f, d_gs = 0.0f, d_gb = 0.0f;
  for (int64_t y = 0; y < c->height; y++)
    for (int64_t xx = 0; xx < c->width; xx++) {
      const int64_t i = bc * c->plane + y * c->width + xx;
      if (!c->selected[b * c->tiles + (y / t) * c->grid_w + xx / t]) {
        if (!c->in_place)
          memcpy((char *)c->grad_features->data + (size_t)i * es,
                 (const char *)c->g->data + (size_t)i * es, es);
        continue;
      }
      const float grad = cpu_load_float(dt, c->g->data, i), xv = cpu_load_float(dt, c->x->data, i);
      const float value = xv * vs + vb, gate = xv * gs + gb;
      const int on = gate > 0.0f;
      cpu_store_float(dt, c->grad_features->data, i,
                      on ? grad * (vs * gate + value * gs) : grad * 0.0f);
      const float relu = on ? gate : 0.0f, gated = on ? grad * value : 0.0f;
      d_vs += grad * xv * relu;
      d_vb += grad * relu;
      d_gs += gated * xv;
      d_gb += gated;
    }
  c->partial[4 * bc] = d_vs;
  c->partial[4 * bc + 1] = d_vb;
  c->partial[4 * bc + 2] = d_gs;
  c->partial[4 * bc + 3] = d_gb;
}

apx_status cpu_fused_pack_op_unpack_backward(void *state,
                                             const apx_fused_pack_op_unpack_backward_args *args,
                                             const apx_call *call) {
  (void)call;
  cpu_state *st = state;
  const apx_tensor *g = args->grad_out, *x = args->features;
  const int64_t batch = g->shape[0], channels = g->shape[1], height = g->shape[2],
                width = g->shape[3], t = args->tile;
  const int64_t k_count = args->idx->shape[1];
  const int64_t grid_w = t > 0 ? width / t : 0, tiles = t > 0 ? (height / t) * grid_w : 0;
  const int64_t planes = batch * channels, plane = height * width;
  unsigned char *selected = calloc((size_t)(batch * tiles > 0 ? batch * tiles : 1), 1);
  float *partial = calloc((size_t)(planes > 0 ? planes : 1) * 4, sizeof(float));
  if (!selected || !partial) {
    free(selected);
    free(partial);
    return st->svc->set_error(APX_ERR_NO_MEMORY,
                              "fused_pack_op_unpack_backward: out of host memory for the tile "
                              "masks (B*tiles = [%lld])",
                              (long long)(batch * tiles));
  }
  const int i64 = args->idx->dtype == APX_DTYPE_I64;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t k = 0; k < k_count; k++)
      selected[b * tiles + cpu_index_at(args->idx->data, i64, b * k_count + k)] = 1;

  /* docs/ops.md, fused_pack_op_unpack: the scalars enter as fp32 */
  const float vs = (float)args->value_scale, vb = (float)args->value_bias;
  const float gs = (float)args->gate_scale, gb = (float)args->gate_bias;
  const apx_dtype dt = g->dtype;
  const size_t es = apx_backend_dtype_size(dt);
  const int in_place = args->grad_features->data == g->data;
  const fused_planes c = {g,      x,    args->grad_features, selected, partial, dt, es,
                          in_place, vs, vb,   gs,       gb,      channels, height,
                          width,  plane, tiles, grid_w,  t};
  CPU_FOR_ITEMS(st, apx_backend_numel(g), 1, bc, planes, fused_plane(&c, bc));
  if (args->grad_scalars) {
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t bc = 0; bc < planes; bc++)
      for (int s = 0; s < 4; s++)
        sums[s] += partial[4 * bc + s];
    for (int s = 0; s < 4; s++)
      cpu_store_float(args->grad_scalars->dtype, args->grad_scalars->data, s, sums[s]);
  }
  free(selected);
  free(partial);
  return APX_OK;
}
