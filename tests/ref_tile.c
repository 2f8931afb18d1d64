/* SPDX-License-Identifier: Apache-2.0 */
/* Reference loops of the tile ops: one element at a time, straight from
 * docs/ops.md, with no attempt at speed. See ref_tile.h. */
#include "ref_tile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apx_half.h"

int64_t ref_numel(const apx_tensor *t) { return apx_tensor_numel(t); }

float ref_get(const apx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case APX_DTYPE_F32:
    return ((const float *)t->data)[i];
  case APX_DTYPE_F16:
    return apx_f16_to_f32(((const uint16_t *)t->data)[i]);
  case APX_DTYPE_BF16:
    return apx_bf16_to_f32(((const uint16_t *)t->data)[i]);
  default:
    abort();
  }
}

void ref_set(const apx_tensor *t, int64_t i, float v) {
  switch (t->dtype) {
  case APX_DTYPE_F32:
    ((float *)t->data)[i] = v;
    break;
  case APX_DTYPE_F16:
    ((uint16_t *)t->data)[i] = apx_f32_to_f16(v);
    break;
  case APX_DTYPE_BF16:
    ((uint16_t *)t->data)[i] = apx_f32_to_bf16(v);
    break;
  default:
    abort();
  }
}

float ref_fl(apx_dtype dtype, float v) {
  switch (dtype) {
  case APX_DTYPE_F32:
    return v;
  case APX_DTYPE_F16:
    return apx_round_f16(v);
  case APX_DTYPE_BF16:
    return apx_round_bf16(v);
  default:
    abort();
  }
}

int64_t ref_index(const apx_tensor *t, int64_t i) {
  if (t->dtype == APX_DTYPE_I64)
    return ((const int64_t *)t->data)[i];
  return ((const int32_t *)t->data)[i];
}

static int64_t ordered_bits(apx_dtype dtype, const void *p, int64_t i, int *is_nan) {
  if (dtype == APX_DTYPE_F32) {
    uint32_t u;
    memcpy(&u, (const char *)p + 4 * i, 4);
    *is_nan = (u & 0x7fffffffu) > 0x7f800000u;
    return (u >> 31) ? -(int64_t)(u & 0x7fffffffu) - 1 : (int64_t)u;
  }
  uint16_t h;
  memcpy(&h, (const char *)p + 2 * i, 2);
  uint16_t inf = dtype == APX_DTYPE_F16 ? 0x7c00u : 0x7f80u;
  *is_nan = (h & 0x7fffu) > inf;
  return (h >> 15) ? -(int64_t)(h & 0x7fffu) - 1 : (int64_t)h;
}

int64_t ref_ulp_distance(apx_dtype dtype, const void *a, const void *b, int64_t i) {
  int nan_a, nan_b;
  int64_t oa = ordered_bits(dtype, a, i, &nan_a), ob = ordered_bits(dtype, b, i, &nan_b);
  if (nan_a || nan_b)
    return nan_a && nan_b ? 0 : INT64_MAX;
  return oa > ob ? oa - ob : ob - oa;
}

int64_t ref_first_mismatch(const apx_tensor *got, const apx_tensor *want, int64_t tol_ulp) {
  int64_t n = ref_numel(want);
  for (int64_t i = 0; i < n; i++)
    if (ref_ulp_distance(want->dtype, got->data, want->data, i) > tol_ulp)
      return i;
  return -1;
}

void ref_use_isa_path(int path) {
  if (path == 0)
    setenv("APEXX_CPU_ISA", "portable", 1);
  else if (path == 1)
    setenv("APEXX_CPU_ISA", "avx2", 1);
  else
    unsetenv("APEXX_CPU_ISA");
}

const char *ref_isa_path_name(int path) {
  return path == 0 ? "portable" : path == 1 ? "avx2 (or less)" : "native";
}

/* A scratch copy of a tensor's shape with its own memory. */
static apx_tensor scratch_like(const apx_tensor *like) {
  apx_tensor t = *like;
  size_t bytes = (size_t)ref_numel(like) * apx_dtype_size(like->dtype);
  t.data = malloc(bytes ? bytes : 1);
  if (!t.data)
    abort();
  return t;
}

static void copy_into(const apx_tensor *dst, const apx_tensor *src) {
  memmove(dst->data, src->data, (size_t)ref_numel(src) * apx_dtype_size(src->dtype));
}

/* ---- 2.A tilepack ----------------------------------------------------------- */
void ref_tilepack(const apx_tilepack_args *args) {
  const apx_tensor *f = args->features, *idx = args->idx, *out = args->out;
  int64_t B = f->shape[0], C = f->shape[1], H = f->shape[2], W = f->shape[3];
  int64_t t = args->tile, K = idx->shape[1], gw = W / t;
  for (int64_t b = 0; b < B; b++)
    for (int64_t k = 0; k < K; k++) {
      int64_t id = ref_index(idx, b * K + k);
      int64_t ty = id / gw, tx = id % gw;
      for (int64_t c = 0; c < C; c++)
        for (int64_t dy = 0; dy < t; dy++)
          for (int64_t dx = 0; dx < t; dx++) {
            int64_t src = ((b * C + c) * H + ty * t + dy) * W + tx * t + dx;
            int64_t dst = (((b * K + k) * C + c) * t + dy) * t + dx;
            /* a copy: move the stored bits, not a float round trip */
            size_t es = apx_dtype_size(f->dtype);
            memcpy((char *)out->data + dst * es, (const char *)f->data + src * es, es);
          }
    }
}

/* ---- 4.A tileunpack --------------------------------------------------------- */

/* The storage value nearest to v (ties to an even bit pattern), found by
 * scanning every finite pattern: how a 0-d tensor materialises a double. */
static float nearest_storage_value(apx_dtype dtype, double v) {
  if (dtype == APX_DTYPE_F32)
    return (float)v;
  float best = 0;
  double best_err = INFINITY;
  unsigned best_bits = 0;
  for (unsigned bits = 0; bits < 0x10000u; bits++) {
    float x =
        dtype == APX_DTYPE_F16 ? apx_f16_to_f32((uint16_t)bits) : apx_bf16_to_f32((uint16_t)bits);
    if (!isfinite(x))
      continue;
    double err = fabs((double)x - v);
    if (err < best_err || (err == best_err && (bits & 1u) == 0 && (best_bits & 1u))) {
      best = x;
      best_err = err;
      best_bits = bits;
    }
  }
  return best;
}

void ref_tileunpack(const apx_tileunpack_args *args) {
  const apx_tensor *base = args->base, *P = args->packed;
  int64_t B = base->shape[0], C = base->shape[1], H = base->shape[2], W = base->shape[3];
  int64_t K = P->shape[1], t = P->shape[3], gw = W / t;
  apx_tensor acc = scratch_like(base);
  copy_into(&acc, base);

  /* keys: ((level - lmin) << order_bits) + k, or k */
  int order_bits = 1;
  if (K - 1 > 0) {
    order_bits = 0;
    for (int64_t v = K - 1; v > 0; v >>= 1)
      order_bits++;
  }
  int64_t lmin = 0;
  if (args->levels)
    for (int64_t i = 0; i < B * K; i++)
      if (i == 0 || ref_index(args->levels, i) < lmin)
        lmin = ref_index(args->levels, i);

  float a = 0, one_minus_a = 0;
  if (args->mode == APX_OVERLAP_BLEND) {
    a = nearest_storage_value(base->dtype, args->blend_alpha);
    one_minus_a = ref_fl(base->dtype, 1.0f - a);
  }
  int64_t *key = malloc(sizeof(int64_t) * (size_t)(K ? K : 1));
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(K ? K : 1));
  size_t es = apx_dtype_size(base->dtype);
  for (int64_t b = 0; b < B; b++) {
    for (int64_t k = 0; k < K; k++) {
      key[k] = args->levels ? ((ref_index(args->levels, b * K + k) - lmin) << order_bits) + k : k;
      order[k] = k;
    }
    /* stable insertion sort, ascending key */
    for (int64_t i = 1; i < K; i++)
      for (int64_t j = i; j > 0 && key[order[j - 1]] > key[order[j]]; j--) {
        int64_t s = order[j];
        order[j] = order[j - 1];
        order[j - 1] = s;
      }
    for (int64_t r = 0; r < K; r++) {
      int64_t k = order[r], y0, x0;
      if (args->origins) {
        y0 = ref_index(args->origins, (b * K + k) * 2);
        x0 = ref_index(args->origins, (b * K + k) * 2 + 1);
      } else {
        int64_t id = ref_index(args->idx, b * K + k);
        y0 = id / gw * t;
        x0 = id % gw * t;
      }
      for (int64_t c = 0; c < C; c++)
        for (int64_t dy = 0; dy < t; dy++)
          for (int64_t dx = 0; dx < t; dx++) {
            int64_t o = ((b * C + c) * H + y0 + dy) * W + x0 + dx;
            int64_t p = (((b * K + k) * C + c) * t + dy) * t + dx;
            if (args->mode == APX_OVERLAP_OVERRIDE) {
              memcpy((char *)acc.data + o * es, (const char *)P->data + p * es, es);
            } else {
              float p1 = ref_fl(base->dtype, one_minus_a * ref_get(&acc, o));
              float p2 = ref_fl(base->dtype, a * ref_get(P, p));
              ref_set(&acc, o, p1 + p2);
            }
          }
    }
  }
  copy_into(args->out, &acc);
  free(key);
  free(order);
  free(acc.data);
}

/* ---- 7 fused pack -> affine + ReGLU -> unpack ------------------------------- */
void ref_fused_pack_op_unpack(const apx_fused_pack_op_unpack_args *args) {
  const apx_tensor *f = args->features;
  int64_t B = f->shape[0], C = f->shape[1];
  int64_t t = args->tile, K = args->idx->shape[1];
  apx_dtype dt = f->dtype;
  /* pack (input order) */
  apx_tensor packed = *f;
  packed.ndim = 5;
  packed.shape[0] = B;
  packed.shape[1] = K;
  packed.shape[2] = C;
  packed.shape[3] = t;
  packed.shape[4] = t;
  packed.data = malloc((size_t)(B * K * C * t * t) * apx_dtype_size(dt) + 1);
  apx_tilepack_args pack = {f, args->idx, t, &packed};
  ref_tilepack(&pack);
  /* transform every packed element: scalars as fp32, R-model */
  float vs = (float)args->value_scale, vb = (float)args->value_bias;
  float gs = (float)args->gate_scale, gb = (float)args->gate_bias;
  for (int64_t i = 0; i < B * K * C * t * t; i++) {
    float x = ref_get(&packed, i);
    float value = ref_fl(dt, ref_fl(dt, x * vs) + vb);
    float gate = ref_fl(dt, ref_fl(dt, x * gs) + gb);
    float relu = gate < 0.0f ? 0.0f : gate; /* torch clamp_min: NaN, -0 pass */
    ref_set(&packed, i, value * relu);
  }
  /* unpack, override, key = k (ids only) */
  apx_tileunpack_args unpack = APX_TILEUNPACK_ARGS_INIT;
  unpack.base = f;
  unpack.packed = &packed;
  unpack.idx = args->idx;
  unpack.out = args->out;
  ref_tileunpack(&unpack);
  free(packed.data);
}

/* ---- 5.A fusiongate --------------------------------------------------------- */
static float sanitised(const apx_tensor *t, int64_t i) {
  float v = ref_get(t, i);
  if (v != v)
    return 0.0f;
  if (v == INFINITY)
    return 1.0f;
  if (v == -INFINITY)
    return 0.0f;
  return v;
}

void ref_fusiongate_alpha(const apx_fusiongate_alpha_args *args) {
  apx_dtype dt = args->out->dtype;
  /* softplus as PyTorch evaluates it on an fp32 tensor */
  float xb = (float)args->boundary_log_weight, xu = (float)args->uncertainty_log_weight;
  float wb = xb > 20.0f ? xb : log1pf(expf(xb));
  float wu = xu > 20.0f ? xu : log1pf(expf(xu));
  float bias = (float)args->bias;
  int64_t n = ref_numel(args->out);
  apx_tensor acc = scratch_like(args->out);
  for (int64_t i = 0; i < n; i++) {
    float b = ref_fl(dt, sanitised(args->boundary, i));
    float u = ref_fl(dt, sanitised(args->uncertainty, i));
    float logits = ref_fl(dt, ref_fl(dt, ref_fl(dt, wb * b) + ref_fl(dt, wu * u)) + bias);
    /* sigmoid in double, rounded once: the tests allow 1 storage ulp */
    ref_set(&acc, i, (float)(1.0 / (1.0 + exp(-(double)logits))));
  }
  copy_into(args->out, &acc);
  free(acc.data);
}

void ref_fusiongate_fuse(const apx_fusiongate_fuse_args *args) {
  const apx_tensor *base = args->base;
  apx_dtype dt = base->dtype;
  int64_t B = base->shape[0], C = base->shape[1], HW = base->shape[2] * base->shape[3];
  apx_tensor acc = scratch_like(base);
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t p = 0; p < HW; p++) {
        int64_t i = (b * C + c) * HW + p;
        float x = ref_get(base, i);
        float d = ref_fl(dt, ref_get(args->detail, i) - x);
        float q = ref_fl(dt, ref_get(args->alpha, b * HW + p) * d);
        ref_set(&acc, i, x + q);
      }
  copy_into(args->out, &acc);
  free(acc.data);
}
