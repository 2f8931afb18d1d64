/* SPDX-License-Identifier: Apache-2.0 */
/* FF weights handles (docs/ff_weights.md): the tensors of a level, the
 * handle and its fp32 data, its lifetime among the context's open handles,
 * the seeded generator; the prepared data backends keep of a handle is the
 * generic cache of libapexx/cache.c. The file formats: load.c, save.c. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apx_splitmix.h"
#include "ff_internal.h"

/* ---- the tensors of one level (FFHeavyPath), in the fixed order ---- */

#define FIELD_(member) offsetof(apx_ff_level_params, member)
/* clang-format off */
const apx__ff_tensor_spec apx__ff_level_specs[APX__FF_LEVEL_TENSORS] = {
  {"scan_bidirectional.merge_gate_logit",             1, {1},              APX__FF_INIT_ZERO,      FIELD_(merge_gate_logit)},
  {"scan_bidirectional.forward_scan.decay_logit",     1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_decay_logit[0])},
  {"scan_bidirectional.forward_scan.input_gain_raw",  1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_input_gain_raw[0])},
  {"scan_bidirectional.forward_scan.output_gain_raw", 1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_output_gain_raw[0])},
  {"scan_bidirectional.forward_scan.state_bias",      1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_state_bias[0])},
  {"scan_bidirectional.backward_scan.decay_logit",    1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_decay_logit[1])},
  {"scan_bidirectional.backward_scan.input_gain_raw", 1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_input_gain_raw[1])},
  {"scan_bidirectional.backward_scan.output_gain_raw", 1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_output_gain_raw[1])},
  {"scan_bidirectional.backward_scan.state_bias",     1, {1},              APX__FF_INIT_ZERO,      FIELD_(scan_state_bias[1])},
  {"film.token_norm.weight",                          1, {1},              APX__FF_INIT_ONE,       FIELD_(token_norm_weight)},
  {"film.token_norm.bias",                            1, {1},              APX__FF_INIT_ZERO,      FIELD_(token_norm_bias)},
  {"film.mlp.0.weight",                               2, {1, 1},           APX__FF_INIT_UNIFORM_C, FIELD_(mlp0_weight)},
  {"film.mlp.0.bias",                                 1, {1},              APX__FF_INIT_UNIFORM_C, FIELD_(mlp0_bias)},
  {"film.mlp.2.weight",                               2, {2, 1},           APX__FF_INIT_UNIFORM_C, FIELD_(mlp2_weight)},
  {"film.mlp.2.bias",                                 1, {2},              APX__FF_INIT_UNIFORM_C, FIELD_(mlp2_bias)},
  {"refine.depthwise.weight",                         4, {1, -1, -3, -3},  APX__FF_INIT_UNIFORM_9, FIELD_(dw_weight)},
  {"refine.depthwise.bias",                           1, {1},              APX__FF_INIT_UNIFORM_9, FIELD_(dw_bias)},
  {"refine.pointwise.weight",                         4, {2, 1, -1, -1},   APX__FF_INIT_UNIFORM_C, FIELD_(pw_weight)},
  {"refine.pointwise.bias",                           1, {2},              APX__FF_INIT_UNIFORM_C, FIELD_(pw_bias)},
  {"refine.norm.weight",                              1, {2},              APX__FF_INIT_ONE,       FIELD_(norm_weight)},
  {"refine.norm.bias",                                1, {2},              APX__FF_INIT_ZERO,      FIELD_(norm_bias)},
  {"fusion_gate.boundary_log_weight",                 0, {0},              APX__FF_INIT_ONE,       FIELD_(boundary_log_weight)},
  {"fusion_gate.uncertainty_log_weight",              0, {0},              APX__FF_INIT_ONE,       FIELD_(uncertainty_log_weight)},
  {"fusion_gate.bias",                                0, {0},              APX__FF_INIT_ZERO,      FIELD_(gate_bias)},
};
/* clang-format on */
#undef FIELD_
_Static_assert(sizeof apx__ff_level_specs / sizeof apx__ff_level_specs[0] == APX__FF_LEVEL_TENSORS,
               "APX__FF_LEVEL_TENSORS counts the table");
const char *const apx__ff_level_prefix[2] = {"l0_path.", "l1_path."};

int64_t apx__ff_spec_dim(const apx__ff_tensor_spec *s, int d, int64_t c) {
  return s->dims[d] > 0 ? s->dims[d] * c : -(int64_t)s->dims[d];
}

int64_t apx__ff_spec_numel(const apx__ff_tensor_spec *s, int64_t c) {
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++)
    n *= apx__ff_spec_dim(s, d, c);
  return n;
}

void apx__ff_spec_name(char *out, int level, const apx__ff_tensor_spec *s) {
  snprintf(out, APX__FF_NAME_MAX, "%s%s", apx__ff_level_prefix[level], s->suffix);
}

void apx__ff_format_dims(char *out, size_t size, int ndim, const int64_t *dims) {
  size_t used = (size_t)snprintf(out, size, "[");
  for (int d = 0; d < ndim && used < size; d++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", d ? ", " : "", (long long)dims[d]);
  if (used < size)
    snprintf(out + used, size - used, "]");
}

void apx__ff_format_spec_dims(char *out, size_t size, const apx__ff_tensor_spec *s, int64_t c) {
  int64_t dims[4];
  for (int d = 0; d < s->ndim; d++)
    dims[d] = apx__ff_spec_dim(s, d, c);
  apx__ff_format_dims(out, size, s->ndim, dims);
}

/* ---- the handle ---- */

static size_t level_floats(int64_t c) {
  size_t n = 0;
  for (int i = 0; i < APX__FF_LEVEL_TENSORS; i++)
    n += (size_t)apx__ff_spec_numel(&apx__ff_level_specs[i], c);
  return n;
}

/* Offset (in floats) of tensor i inside its level. */
static size_t spec_offset(int i, int64_t c) {
  size_t n = 0;
  for (int j = 0; j < i; j++)
    n += (size_t)apx__ff_spec_numel(&apx__ff_level_specs[j], c);
  return n;
}

apx_status apx__ff_weights_new(apx_context *ctx, const char *op, int64_t c, apx_ff_weights **out) {
  apx_ff_weights *w = calloc(1, sizeof *w);
  size_t per_level = level_floats(c);
  if (!w || per_level > SIZE_MAX / 2 / sizeof(float) ||
      !(w->data = malloc(2 * per_level * sizeof(float)))) {
    free(w);
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory for %lld channels", op, (long long)c);
  }
  apx__object_init(&w->object, &w->params);
  w->ctx = ctx;
  w->channels = c;
  w->level_count = per_level;
  *out = w;
  return APX_OK;
}

void apx__ff_weights_bind(apx_ff_weights *w) {
  w->params.channels = w->channels;
  for (int level = 0; level < 2; level++) {
    char *lp = (char *)&w->params.level[level];
    const float *base = w->data + (size_t)level * w->level_count;
    for (int i = 0; i < APX__FF_LEVEL_TENSORS; i++) {
      const apx__ff_tensor_spec *s = &apx__ff_level_specs[i];
      const float *t = base + spec_offset(i, w->channels);
      if (s->ndim == 0)
        memcpy(lp + s->field, t, sizeof(float));
      else
        memcpy(lp + s->field, &t, sizeof t);
    }
  }
}

/* ---- lifetime: the context's open handles (under ctx->lock) ----
 * A handle is looked up among its context's open handles by address, never
 * dereferenced before it is found, so a call given a freed handle (or one
 * of another context) fails cleanly. A call that reads a handle pins it; a
 * free unlinks the handle first (no new pin finds it), then waits for the
 * pins to go. apx_close refuses new makes and waits for those in progress
 * before it frees what is left (docs/ff_weights.md, Lifetime). */

static apx_ff_weights *find_open(apx_context *ctx, const apx_ff_weights *weights) {
  for (apx_ff_weights *w = ctx->ff_weights; w; w = w->next)
    if (w == weights)
      return w;
  return NULL;
}

static void link_locked(apx_context *ctx, apx_ff_weights *w) {
  w->prev = NULL;
  w->next = ctx->ff_weights;
  if (ctx->ff_weights)
    ctx->ff_weights->prev = w;
  ctx->ff_weights = w;
}

static void unlink_locked(apx_context *ctx, apx_ff_weights *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    ctx->ff_weights = w->next;
  if (w->next)
    w->next->prev = w->prev;
  w->prev = w->next = NULL;
}

static void wait_unpinned_locked(apx_context *ctx, apx_ff_weights *w) {
  while (w->pins > 0)
    pthread_cond_wait(&ctx->ff_idle, &ctx->lock);
}

apx_status apx__ff_make_begin(apx_context *ctx, const char *op) {
  pthread_mutex_lock(&ctx->lock);
  int closing = ctx->ff_closing;
  if (!closing)
    ctx->ff_making++;
  pthread_mutex_unlock(&ctx->lock);
  if (closing)
    return apx__error(APX_ERR_INVALID_ARG, "%s: the context is closing (apx_close has begun)",
                      op);
  return APX_OK;
}

apx_status apx__ff_make_end(apx_context *ctx, const char *op, apx_ff_weights *w, apx_status st) {
  pthread_mutex_lock(&ctx->lock);
  int closing = ctx->ff_closing;
  if (st == APX_OK && !closing)
    link_locked(ctx, w);
  if (--ctx->ff_making == 0)
    pthread_cond_broadcast(&ctx->ff_idle);
  pthread_mutex_unlock(&ctx->lock); /* ctx may be gone from here when closing */
  if (st != APX_OK || !closing)
    return st;
  apx__ff_weights_destroy(w);
  return apx__error(APX_ERR_INVALID_ARG, "%s: the context was closed during the call", op);
}

apx_ff_weights *apx__ff_pin_handle(apx_context *ctx, const apx_ff_weights *weights) {
  pthread_mutex_lock(&ctx->lock);
  apx_ff_weights *w = find_open(ctx, weights);
  if (w)
    w->pins++;
  pthread_mutex_unlock(&ctx->lock);
  return w;
}

void apx__ff_unpin_handle(apx_context *ctx, apx_ff_weights *w) {
  pthread_mutex_lock(&ctx->lock);
  if (--w->pins == 0)
    pthread_cond_broadcast(&ctx->ff_idle);
  pthread_mutex_unlock(&ctx->lock);
}

void apx__ff_weights_destroy(apx_ff_weights *w) {
  apx__object_destroy(&w->object);
  free(w->data);
  free(w);
}

/* ---- the core's hooks ---- */

void apx__ff_release_backend(void *core) {
  apx__backend *b = core;
  if (!b || !b->ctx)
    return;
  apx_context *ctx = b->ctx;
  /* taken under the context's lock, which keeps the handles linked;
   * released outside it */
  apx__cache_entry *taken = NULL;
  pthread_mutex_lock(&ctx->lock);
  for (apx_ff_weights *w = ctx->ff_weights; w; w = w->next)
    taken = apx__object_take(&w->object, core, taken);
  pthread_mutex_unlock(&ctx->lock);
  apx__cache_release(taken);
}

apx_status apx__ff_pin_args(apx_context *ctx, const apx_op_desc *d, const void *args,
                            const apx_ff_weights **pinned) {
  *pinned = NULL;
  if (!d || !ctx || !args)
    return APX_OK;
  for (int i = 0; i < d->arg_count; i++) {
    const apx_op_arg *a = &d->args[i];
    if (a->kind != APX_ARG_HANDLE || strcmp(a->type_name, "apx_ff_weights") != 0)
      continue;
    const apx_ff_weights *weights;
    memcpy(&weights, (const char *)args + a->offset, sizeof weights);
    if (!weights) /* validation names it */
      return APX_OK;
    *pinned = apx__ff_pin_handle(ctx, weights);
    if (!*pinned)
      return apx__error(APX_ERR_INVALID_ARG,
                        "%s: %s [%p] are not an open handle of this context (freed, or made by "
                        "another context)",
                        d->name, a->name, (const void *)weights);
    return APX_OK; /* an op takes at most one weights handle */
  }
  return APX_OK;
}

void apx__ff_unpin(apx_context *ctx, const apx_ff_weights *pinned) {
  if (pinned)
    apx__ff_unpin_handle(ctx, (apx_ff_weights *)pinned);
}

void apx__ff_close_all(apx_context *ctx) {
  if (!ctx)
    return;
  int left_open = 0;
  pthread_mutex_lock(&ctx->lock);
  ctx->ff_closing = 1;
  while (ctx->ff_making > 0)
    pthread_cond_wait(&ctx->ff_idle, &ctx->lock);
  while (ctx->ff_weights) {
    apx_ff_weights *w = ctx->ff_weights;
    unlink_locked(ctx, w);
    wait_unpinned_locked(ctx, w);
    pthread_mutex_unlock(&ctx->lock);
    apx__ff_weights_destroy(w);
    left_open++;
    pthread_mutex_lock(&ctx->lock);
  }
  pthread_mutex_unlock(&ctx->lock);
  if (left_open)
    apx__log(ctx, APX_LOG_WARN, "apx_close: freed %d FF weights handle%s left open", left_open,
             left_open == 1 ? "" : "s");
}

/* ---- the public calls ---- */

APX_API int64_t apx_ff_weights_channels(const apx_ff_weights *weights) {
  return weights ? weights->channels : 0;
}

APX_API void apx_ff_weights_free(apx_context *ctx, apx_ff_weights *weights) {
  if (!weights)
    return;
  apx_context *owner = ctx ? ctx : weights->ctx;
  pthread_mutex_lock(&owner->lock);
  apx_ff_weights *w = find_open(owner, weights);
  if (w) {
    unlink_locked(owner, w);
    wait_unpinned_locked(owner, w);
  }
  pthread_mutex_unlock(&owner->lock);
  if (!w) {
    apx__log(owner, APX_LOG_WARN,
             "apx_ff_weights_free: weights [%p] are not an open handle of this context (freed "
             "already, or made by another context): left alone",
             (void *)weights);
    return;
  }
  apx__ff_weights_destroy(w);
}

APX_API apx_status apx_ff_weights_seeded(apx_context *ctx, int64_t channels, uint64_t seed,
                                         apx_ff_weights **weights) {
  static const char op[] = "apx_ff_weights_seeded";
  apx__clear_error();
  if (weights)
    *weights = NULL;
  if (!ctx)
    return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", op);
  if (!weights)
    return apx__error(APX_ERR_INVALID_ARG, "%s: weights = [NULL]", op);
  if (channels < 1 || channels > APX__FF_MAX_CHANNELS)
    return apx__error(APX_ERR_INVALID_ARG, "%s: channels = [%lld] is outside [1, %d]", op,
                      (long long)channels, APX__FF_MAX_CHANNELS);
  apx_status st = apx__ff_make_begin(ctx, op);
  if (st != APX_OK)
    return st;
  apx_ff_weights *w;
  st = apx__ff_weights_new(ctx, op, channels, &w);
  if (st != APX_OK)
    return apx__ff_make_end(ctx, op, NULL, st);
  uint64_t state = seed;
  float *out = w->data;
  for (int level = 0; level < 2; level++) {
    for (int i = 0; i < APX__FF_LEVEL_TENSORS; i++) {
      const apx__ff_tensor_spec *s = &apx__ff_level_specs[i];
      int64_t n = apx__ff_spec_numel(s, channels);
      double bound = s->init == APX__FF_INIT_UNIFORM_C   ? 1.0 / sqrt((double)channels)
                     : s->init == APX__FF_INIT_UNIFORM_9 ? 1.0 / 3.0
                                                    : 0.0;
      for (int64_t k = 0; k < n; k++) {
        if (s->init == APX__FF_INIT_ZERO) {
          out[k] = 0.0f;
        } else if (s->init == APX__FF_INIT_ONE) {
          out[k] = 1.0f;
        } else {
          /* splitmix64, the generator of docs/ff_weights.md */
          double u = apx_splitmix64_uniform(&state);
          out[k] = (float)((2.0 * u - 1.0) * bound);
        }
      }
      out += n;
    }
  }
  apx__ff_weights_bind(w);
  st = apx__ff_make_end(ctx, op, w, APX_OK);
  if (st == APX_OK)
    *weights = w;
  return st;
}
