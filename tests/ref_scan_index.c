/* SPDX-License-Identifier: Apache-2.0 */
#include "ref_scan_index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "apx_half.h"

static float get_f(const apx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case APX_DTYPE_F16: return apx_f16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_BF16: return apx_bf16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_F32: return ((const float *)t->data)[i];
  default: abort();
  }
}

static void set_f(const apx_tensor *t, int64_t i, float v) {
  switch (t->dtype) {
  case APX_DTYPE_F16: ((uint16_t *)t->data)[i] = apx_f32_to_f16(v); break;
  case APX_DTYPE_BF16: ((uint16_t *)t->data)[i] = apx_f32_to_bf16(v); break;
  case APX_DTYPE_F32: ((float *)t->data)[i] = v; break;
  default: abort();
  }
}

/* The R-model `fl` of dtype dt. */
static float fl(apx_dtype dt, float v) {
  switch (dt) {
  case APX_DTYPE_F16: return apx_round_f16(v);
  case APX_DTYPE_BF16: return apx_round_bf16(v);
  default: return v;
  }
}

static int64_t get_index(const apx_tensor *t, int64_t i) {
  return t->dtype == APX_DTYPE_I64 ? ((const int64_t *)t->data)[i]
                                   : ((const int32_t *)t->data)[i];
}


/* ---- TileSSM ---------------------------------------------------------- */

/* docs/ops.md, tilessm_scan sanitise, in the tokens dtype (lim is representable). */
static float sanitize(float x, float lim) {
  if (isnan(x)) x = 0.0f;
  else if (isinf(x)) x = x > 0 ? lim : -lim;
  if (x > lim) x = lim;
  if (x < -lim) x = -lim;
  return x;
}

/* One direction of one stream; y[k] and the final state in fp32. */
static float run_stream(const apx_tilessm_scan_args *a, int64_t b, int64_t c,
                        float init, int reverse, float *y) {
  const apx_dtype dt = a->tokens->dtype;
  const int64_t K = a->tokens->shape[1], C = a->tokens->shape[2];
  float lim = fl(dt, fabsf((float)a->clamp_value));
  float d = get_f(a->decay, c);
  if (d < 1e-6f) d = 1e-6f;
  if (d > 1.0f - 1e-6f) d = 1.0f - 1e-6f;
  float om = 1.0f - d;
  float ig = get_f(a->input_gain, c), og = get_f(a->output_gain, c);
  float sb = get_f(a->state_bias, c);
  float s = init;
  for (int64_t step = 0; step < K; step++) {
    int64_t k = reverse ? K - 1 - step : step;
    float x = sanitize(get_f(a->tokens, (b * K + k) * C + c), lim);
    float ix = ig * x;
    float drv = ix + sb;
    float ds = d * s;
    float od = om * drv;
    s = ds + od;
    float ys = og * s;
    y[k] = fl(dt, ys);
  }
  return s;
}

void ref_tilessm_scan(const apx_tilessm_scan_args *a) {
  const apx_dtype dt = a->tokens->dtype;
  const int64_t B = a->tokens->shape[0], K = a->tokens->shape[1], C = a->tokens->shape[2];
  float *yf = malloc((size_t)(K ? K : 1) * sizeof(float));
  float *yb = malloc((size_t)(K ? K : 1) * sizeof(float));
  if (!yf || !yb) abort();
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      float init_f = 0.0f, init_b = 0.0f;
      if (a->init_state) { /* cast to the tokens dtype first */
        if (a->init_state->ndim == 2) {
          init_f = init_b = fl(dt, get_f(a->init_state, b * C + c));
        } else {
          init_f = fl(dt, get_f(a->init_state, (b * 2 + 0) * C + c));
          init_b = fl(dt, get_f(a->init_state, (b * 2 + 1) * C + c));
        }
      }
      float final_f = 0.0f, final_b = 0.0f;
      if (a->direction != APX_SCAN_BACKWARD) final_f = run_stream(a, b, c, init_f, 0, yf);
      if (a->direction != APX_SCAN_FORWARD) final_b = run_stream(a, b, c, init_b, 1, yb);
      float g = 0.5f;
      if (a->direction == APX_SCAN_BIDIRECTIONAL && a->merge == APX_MERGE_GATED &&
          a->merge_gate) {
        int64_t gi = a->merge_gate->ndim == 3 ? b * C + c : c;
        g = fl(dt, get_f(a->merge_gate, gi));
        if (g < 0.0f) g = 0.0f;
        if (g > 1.0f) g = 1.0f;
      }
      for (int64_t k = 0; k < K; k++) {
        float y;
        if (a->direction == APX_SCAN_FORWARD) y = yf[k];
        else if (a->direction == APX_SCAN_BACKWARD) y = yb[k];
        else if (a->merge == APX_MERGE_SUM) y = fl(dt, yf[k] + yb[k]);
        else if (a->merge == APX_MERGE_AVG) y = fl(dt, 0.5f * fl(dt, yf[k] + yb[k]));
        else {
          float a1 = fl(dt, g * yf[k]);
          float omg = fl(dt, 1.0f - g);
          float a2 = fl(dt, omg * yb[k]);
          y = fl(dt, a1 + a2);
        }
        set_f(a->out, (b * K + k) * C + c, y);
      }
      if (a->final_state) {
        if (a->direction == APX_SCAN_BIDIRECTIONAL) {
          set_f(a->final_state, (b * 2 + 0) * C + c, fl(dt, final_f));
          set_f(a->final_state, (b * 2 + 1) * C + c, fl(dt, final_b));
        } else {
          float s = a->direction == APX_SCAN_FORWARD ? final_f : final_b;
          set_f(a->final_state, b * C + c, fl(dt, s));
        }
      }
    }
  free(yf);
  free(yb);
}

/* ---- indexing --------------------------------------------------------- */

/* Flat offset in t of coordinates coord (row-major over t's shape). */
static int64_t offset_of(const apx_tensor *t, const int64_t *coord) {
  int64_t off = 0;
  for (int d = 0; d < t->ndim; d++) off = off * t->shape[d] + coord[d];
  return off;
}

/* Coordinates of flat position p of shape t. */
static void coords_of(const apx_tensor *t, int64_t p, int64_t *coord) {
  for (int d = t->ndim - 1; d >= 0; d--) {
    coord[d] = p % t->shape[d];
    p /= t->shape[d];
  }
}

void ref_gather(const apx_gather_args *a) {
  int dim = a->dim < 0 ? a->dim + a->index->ndim : a->dim;
  size_t es = apx_dtype_size(a->src->dtype);
  int64_t coord[APX_MAX_DIMS];
  const int64_t count = apx_tensor_numel(a->index);
  for (int64_t p = 0; p < count; p++) {
    coords_of(a->index, p, coord);
    coord[dim] = get_index(a->index, p);
    memcpy((char *)a->out->data + (size_t)p * es,
           (const char *)a->src->data + (size_t)offset_of(a->src, coord) * es, es);
  }
}

/* Each element of out from its coordinates, the one at dim through index. */
void ref_index_select(const apx_index_select_args *a) {
  const int dim = a->dim < 0 ? a->dim + a->src->ndim : a->dim;
  const int64_t n = apx_tensor_numel(a->out);
  const size_t es = apx_dtype_size(a->src->dtype);
  int64_t coord[APX_MAX_DIMS];
  for (int64_t p = 0; p < n; p++) {
    coords_of(a->out, p, coord);
    coord[dim] = get_index(a->index, coord[dim]);
    memcpy((char *)a->out->data + (size_t)p * es,
           (const char *)a->src->data + (size_t)offset_of(a->src, coord) * es, es);
  }
}

/* out = (self or zeros) + src at index along dim. */
static void scatter(const apx_tensor *self, int dim, const apx_tensor *index,
                    const apx_tensor *src, const apx_tensor *out) {
  dim = dim < 0 ? dim + index->ndim : dim;
  const apx_dtype dt = out->dtype;
  const int64_t n = apx_tensor_numel(out);
  const int is_float = dt == APX_DTYPE_F32 || dt == APX_DTYPE_F16 || dt == APX_DTYPE_BF16;
  float *facc = malloc((size_t)(n ? n : 1) * sizeof(float));
  uint64_t *iacc = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
  if (!facc || !iacc) abort();
  for (int64_t i = 0; i < n; i++) {
    if (is_float) facc[i] = self ? get_f(self, i) : 0.0f;
    else if (!self) iacc[i] = 0;
    else if (dt == APX_DTYPE_I64) iacc[i] = (uint64_t)((const int64_t *)self->data)[i];
    else iacc[i] = (uint64_t)(int64_t)((const int32_t *)self->data)[i];
  }
  int64_t coord[APX_MAX_DIMS];
  const int64_t count = apx_tensor_numel(index);
  for (int64_t p = 0; p < count; p++) {
    coords_of(index, p, coord);
    int64_t s = offset_of(src, coord);
    coord[dim] = get_index(index, p);
    int64_t d = offset_of(out, coord);
    if (is_float) facc[d] += get_f(src, s);
    else if (dt == APX_DTYPE_I64) iacc[d] += (uint64_t)((const int64_t *)src->data)[s];
    else iacc[d] += (uint64_t)(int64_t)((const int32_t *)src->data)[s];
  }
  for (int64_t i = 0; i < n; i++) {
    if (is_float) set_f(out, i, facc[i]);
    else if (dt == APX_DTYPE_I64) ((int64_t *)out->data)[i] = (int64_t)iacc[i];
    else ((int32_t *)out->data)[i] = (int32_t)(uint32_t)iacc[i]; /* wraps */
  }
  free(facc);
  free(iacc);
}

void ref_scatter_add(const apx_scatter_add_args *a) {
  scatter(a->self, a->dim, a->index, a->src, a->out);
}

void ref_gather_backward(const apx_gather_backward_args *a) {
  scatter(NULL, a->dim, a->index, a->grad_out, a->grad_src);
}
