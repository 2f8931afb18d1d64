/* SPDX-License-Identifier: Apache-2.0 */
/* FF weights handles (docs/ff_weights.md): the safetensors reader and
 * writer, the seeded generator, and the cache of what each backend derives
 * from a handle (dtype conversions, device copies). */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "apx_half.h"
#include "apx_splitmix.h"
#include "ff_internal.h"
#include "internal.h"

/* ---- the tensors of one level (FFHeavyPath), in the fixed order ---- */

/* How the seeded generator fills a tensor (docs/ff_weights.md). */
typedef enum ff_init {
  FF_INIT_ZERO,
  FF_INIT_ONE,
  FF_INIT_UNIFORM_C, /* U[-1/sqrt(C), 1/sqrt(C)) */
  FF_INIT_UNIFORM_9  /* U[-1/3, 1/3): the depthwise 3x3 conv, fan_in 9 */
} ff_init;

/* An expected dimension: k > 0 stands for k*C, k <= 0 for the constant -k. */
typedef struct ff_tensor_spec {
  const char *suffix; /* the name after "l0_path." / "l1_path." */
  int ndim;
  int dims[4];
  ff_init init;
  size_t field; /* offset in apx_ff_level_params: a const float * slot, or a
                   float for a 0-d tensor */
} ff_tensor_spec;

#define FIELD_(member) offsetof(apx_ff_level_params, member)
/* clang-format off */
static const ff_tensor_spec level_specs[] = {
  {"scan_bidirectional.merge_gate_logit",             1, {1},              FF_INIT_ZERO,      FIELD_(merge_gate_logit)},
  {"scan_bidirectional.forward_scan.decay_logit",     1, {1},              FF_INIT_ZERO,      FIELD_(scan_decay_logit[0])},
  {"scan_bidirectional.forward_scan.input_gain_raw",  1, {1},              FF_INIT_ZERO,      FIELD_(scan_input_gain_raw[0])},
  {"scan_bidirectional.forward_scan.output_gain_raw", 1, {1},              FF_INIT_ZERO,      FIELD_(scan_output_gain_raw[0])},
  {"scan_bidirectional.forward_scan.state_bias",      1, {1},              FF_INIT_ZERO,      FIELD_(scan_state_bias[0])},
  {"scan_bidirectional.backward_scan.decay_logit",    1, {1},              FF_INIT_ZERO,      FIELD_(scan_decay_logit[1])},
  {"scan_bidirectional.backward_scan.input_gain_raw", 1, {1},              FF_INIT_ZERO,      FIELD_(scan_input_gain_raw[1])},
  {"scan_bidirectional.backward_scan.output_gain_raw", 1, {1},              FF_INIT_ZERO,      FIELD_(scan_output_gain_raw[1])},
  {"scan_bidirectional.backward_scan.state_bias",     1, {1},              FF_INIT_ZERO,      FIELD_(scan_state_bias[1])},
  {"film.token_norm.weight",                          1, {1},              FF_INIT_ONE,       FIELD_(token_norm_weight)},
  {"film.token_norm.bias",                            1, {1},              FF_INIT_ZERO,      FIELD_(token_norm_bias)},
  {"film.mlp.0.weight",                               2, {1, 1},           FF_INIT_UNIFORM_C, FIELD_(mlp0_weight)},
  {"film.mlp.0.bias",                                 1, {1},              FF_INIT_UNIFORM_C, FIELD_(mlp0_bias)},
  {"film.mlp.2.weight",                               2, {2, 1},           FF_INIT_UNIFORM_C, FIELD_(mlp2_weight)},
  {"film.mlp.2.bias",                                 1, {2},              FF_INIT_UNIFORM_C, FIELD_(mlp2_bias)},
  {"refine.depthwise.weight",                         4, {1, -1, -3, -3},  FF_INIT_UNIFORM_9, FIELD_(dw_weight)},
  {"refine.depthwise.bias",                           1, {1},              FF_INIT_UNIFORM_9, FIELD_(dw_bias)},
  {"refine.pointwise.weight",                         4, {2, 1, -1, -1},   FF_INIT_UNIFORM_C, FIELD_(pw_weight)},
  {"refine.pointwise.bias",                           1, {2},              FF_INIT_UNIFORM_C, FIELD_(pw_bias)},
  {"refine.norm.weight",                              1, {2},              FF_INIT_ONE,       FIELD_(norm_weight)},
  {"refine.norm.bias",                                1, {2},              FF_INIT_ZERO,      FIELD_(norm_bias)},
  {"fusion_gate.boundary_log_weight",                 0, {0},              FF_INIT_ONE,       FIELD_(boundary_log_weight)},
  {"fusion_gate.uncertainty_log_weight",              0, {0},              FF_INIT_ONE,       FIELD_(uncertainty_log_weight)},
  {"fusion_gate.bias",                                0, {0},              FF_INIT_ZERO,      FIELD_(gate_bias)},
};
/* clang-format on */
#undef FIELD_

enum { LEVEL_TENSORS = (int)(sizeof level_specs / sizeof level_specs[0]) };
static const char *const level_prefix[2] = {"l0_path.", "l1_path."};
#define NAME_MAX_ 96 /* longest full name, with its NUL */
#define MAX_CHANNELS 65536
/* Limits on the JSON header (docs/ff_weights.md, Limits), checked by a scan
 * of the text before cJSON builds its tree: the tree takes up to ~40 bytes
 * per header byte, so the header is capped well below safetensors' own
 * 100 MB, and no array may hold more items than a shape can have dims. */
#define MAX_HEADER_BYTES ((uint64_t)16 << 20)
#define MAX_HEADER_VALUES 524288
#define MAX_HEADER_DEPTH 16
#define MAX_ARRAY_ITEMS 64
/* cJSON 1.7 reads a number through a 64-byte buffer: a longer one fails */
#define MAX_NUMBER_CHARS 63
#define STR_(x) #x
#define STR(x) STR_(x) /* a limit's value inside a message */
/* the longest tensor name a message quotes whole */
#define MESSAGE_NAME_BYTES 200

static int64_t spec_dim(const ff_tensor_spec *s, int d, int64_t c) {
  return s->dims[d] > 0 ? s->dims[d] * c : -(int64_t)s->dims[d];
}

static int64_t spec_numel(const ff_tensor_spec *s, int64_t c) {
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++)
    n *= spec_dim(s, d, c);
  return n;
}

static void spec_name(char *out, int level, const ff_tensor_spec *s) {
  snprintf(out, NAME_MAX_, "%s%s", level_prefix[level], s->suffix);
}

/* "[a, b, c]" */
static void format_dims(char *out, size_t size, int ndim, const int64_t *dims) {
  size_t used = (size_t)snprintf(out, size, "[");
  for (int d = 0; d < ndim && used < size; d++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", d ? ", " : "", (long long)dims[d]);
  if (used < size)
    snprintf(out + used, size - used, "]");
}

static void format_spec_dims(char *out, size_t size, const ff_tensor_spec *s, int64_t c) {
  int64_t dims[4];
  for (int d = 0; d < s->ndim; d++)
    dims[d] = spec_dim(s, d, c);
  format_dims(out, size, s->ndim, dims);
}

/* ---- the handle ---- */

typedef struct ff_cache_entry {
  void *core; /* the apx__backend that made it */
  apx_dtype dtype;
  int device_index;
  void *prepared;
  void (*release)(void *state, int device_index, void *prepared);
  void *state;
  struct ff_cache_entry *next;
} ff_cache_entry;

struct apx_ff_weights {
  apx_context *ctx;
  int64_t channels;
  float *data;        /* every tensor, in the fixed order, l0_path then l1_path */
  size_t level_count; /* floats of one level */
  apx_ff_params params;
  pthread_mutex_t cache_lock; /* guards cache */
  ff_cache_entry *cache;
  struct apx_ff_weights *prev, *next; /* ctx->ff_weights, under ctx->lock */
  int pins; /* calls reading the handle now (ff_infer, save), under ctx->lock */
};

static size_t level_floats(int64_t c) {
  size_t n = 0;
  for (int i = 0; i < LEVEL_TENSORS; i++)
    n += (size_t)spec_numel(&level_specs[i], c);
  return n;
}

/* Offset (in floats) of tensor i inside its level. */
static size_t spec_offset(int i, int64_t c) {
  size_t n = 0;
  for (int j = 0; j < i; j++)
    n += (size_t)spec_numel(&level_specs[j], c);
  return n;
}

/* A handle with room for C channels, not yet linked into the context. */
static apx_status weights_new(apx_context *ctx, const char *op, int64_t c, apx_ff_weights **out) {
  apx_ff_weights *w = calloc(1, sizeof *w);
  size_t per_level = level_floats(c);
  if (!w || per_level > SIZE_MAX / 2 / sizeof(float) ||
      !(w->data = malloc(2 * per_level * sizeof(float)))) {
    free(w);
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory for %lld channels", op, (long long)c);
  }
  pthread_mutex_init(&w->cache_lock, NULL);
  w->ctx = ctx;
  w->channels = c;
  w->level_count = per_level;
  *out = w;
  return APX_OK;
}

/* Point params at the tensors (and copy the 0-d ones) once data is final. */
static void weights_bind(apx_ff_weights *w) {
  w->params.channels = w->channels;
  for (int level = 0; level < 2; level++) {
    char *lp = (char *)&w->params.level[level];
    const float *base = w->data + (size_t)level * w->level_count;
    for (int i = 0; i < LEVEL_TENSORS; i++) {
      const ff_tensor_spec *s = &level_specs[i];
      const float *t = base + spec_offset(i, w->channels);
      if (s->ndim == 0)
        memcpy(lp + s->field, t, sizeof(float));
      else
        memcpy(lp + s->field, &t, sizeof t);
    }
  }
}

static void weights_destroy(apx_ff_weights *w);

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

/* A load or seeded make begins: refused once apx_close has begun. */
static apx_status make_begin(apx_context *ctx, const char *op) {
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

/* A make ends with status st (w made when APX_OK): w is linked into ctx,
 * or freed when apx_close began meanwhile. */
static apx_status make_end(apx_context *ctx, const char *op, apx_ff_weights *w, apx_status st) {
  pthread_mutex_lock(&ctx->lock);
  int closing = ctx->ff_closing;
  if (st == APX_OK && !closing)
    link_locked(ctx, w);
  if (--ctx->ff_making == 0)
    pthread_cond_broadcast(&ctx->ff_idle);
  pthread_mutex_unlock(&ctx->lock); /* ctx may be gone from here when closing */
  if (st != APX_OK || !closing)
    return st;
  weights_destroy(w);
  return apx__error(APX_ERR_INVALID_ARG, "%s: the context was closed during the call", op);
}

static apx_ff_weights *pin(apx_context *ctx, const apx_ff_weights *weights) {
  pthread_mutex_lock(&ctx->lock);
  apx_ff_weights *w = find_open(ctx, weights);
  if (w)
    w->pins++;
  pthread_mutex_unlock(&ctx->lock);
  return w;
}

static void unpin(apx_context *ctx, apx_ff_weights *w) {
  pthread_mutex_lock(&ctx->lock);
  if (--w->pins == 0)
    pthread_cond_broadcast(&ctx->ff_idle);
  pthread_mutex_unlock(&ctx->lock);
}

/* Detach every cache entry (of `core`, or all with core NULL) into a list
 * the caller releases outside the lock. */
static ff_cache_entry *cache_detach(apx_ff_weights *w, void *core) {
  ff_cache_entry *taken = NULL;
  pthread_mutex_lock(&w->cache_lock);
  for (ff_cache_entry **p = &w->cache; *p;) {
    ff_cache_entry *e = *p;
    if (!core || e->core == core) {
      *p = e->next;
      e->next = taken;
      taken = e;
    } else {
      p = &e->next;
    }
  }
  pthread_mutex_unlock(&w->cache_lock);
  return taken;
}

static void cache_release(ff_cache_entry *list) {
  while (list) {
    ff_cache_entry *next = list->next;
    if (list->release)
      list->release(list->state, list->device_index, list->prepared);
    free(list);
    list = next;
  }
}

/* Release the caches and the memory of a handle already unlinked. */
static void weights_destroy(apx_ff_weights *w) {
  cache_release(cache_detach(w, NULL));
  pthread_mutex_destroy(&w->cache_lock);
  free(w->data);
  free(w);
}

/* ---- services (backend.h) ---- */

const apx_ff_params *apx__ff_params(const apx_ff_weights *weights) {
  return weights ? &weights->params : NULL;
}

apx_status
apx__ff_cached(void *core, const apx_ff_weights *weights, apx_dtype dtype, int device_index,
               apx_status (*make)(void *, const apx_ff_params *, apx_dtype, int, void **),
               void (*release)(void *, int, void *), void *state, void **prepared) {
  if (!core)
    return apx__error(APX_ERR_INVALID_ARG, "ff_cached: core = [NULL]");
  if (!weights)
    return apx__error(APX_ERR_INVALID_ARG, "ff_cached: weights = [NULL]");
  if (!make)
    return apx__error(APX_ERR_INVALID_ARG, "ff_cached: make = [NULL]");
  if (!prepared)
    return apx__error(APX_ERR_INVALID_ARG, "ff_cached: prepared = [NULL]");
  *prepared = NULL;
  /* the cache is the handle's own mutable part; the weights stay const */
  apx_ff_weights *w = (apx_ff_weights *)weights;
  apx_status st = APX_OK;
  pthread_mutex_lock(&w->cache_lock);
  ff_cache_entry *e = w->cache;
  while (e && !(e->core == core && e->dtype == dtype && e->device_index == device_index))
    e = e->next;
  if (e) {
    *prepared = e->prepared;
  } else {
    void *made = NULL;
    st = make(state, &w->params, dtype, device_index, &made);
    if (st == APX_OK) {
      e = malloc(sizeof *e);
      if (!e) {
        if (release)
          release(state, device_index, made);
        st = apx__error(APX_ERR_NO_MEMORY, "ff_cached: out of memory");
      } else {
        *e = (ff_cache_entry){core, dtype, device_index, made, release, state, w->cache};
        w->cache = e;
        *prepared = made;
      }
    }
  }
  pthread_mutex_unlock(&w->cache_lock);
  return st;
}

void apx__ff_release_backend(void *core) {
  apx__backend *b = core;
  if (!b || !b->ctx)
    return;
  apx_context *ctx = b->ctx;
  ff_cache_entry *taken = NULL;
  pthread_mutex_lock(&ctx->lock);
  for (apx_ff_weights *w = ctx->ff_weights; w; w = w->next) {
    ff_cache_entry *list = cache_detach(w, core);
    while (list) {
      ff_cache_entry *next = list->next;
      list->next = taken;
      taken = list;
      list = next;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  cache_release(taken);
}

apx_status apx__ff_pin_args(apx_context *ctx, apx_op_id op, const void *args,
                            const apx_ff_weights **pinned) {
  *pinned = NULL;
  if (op != APX_OP_FF_INFER || !ctx || !args)
    return APX_OK;
  const apx_ff_weights *weights = ((const apx_ff_infer_args *)args)->weights;
  if (!weights) /* validation names it */
    return APX_OK;
  *pinned = pin(ctx, weights);
  if (!*pinned)
    return apx__error(APX_ERR_INVALID_ARG,
                      "ff_infer: weights [%p] are not an open handle of this context (freed, "
                      "or made by another context)",
                      (const void *)weights);
  return APX_OK;
}

void apx__ff_unpin(apx_context *ctx, const apx_ff_weights *pinned) {
  if (pinned)
    unpin(ctx, (apx_ff_weights *)pinned);
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
    weights_destroy(w);
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
  weights_destroy(w);
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
  if (channels < 1 || channels > MAX_CHANNELS)
    return apx__error(APX_ERR_INVALID_ARG, "%s: channels = [%lld] is outside [1, %d]", op,
                      (long long)channels, MAX_CHANNELS);
  apx_status st = make_begin(ctx, op);
  if (st != APX_OK)
    return st;
  apx_ff_weights *w;
  st = weights_new(ctx, op, channels, &w);
  if (st != APX_OK)
    return make_end(ctx, op, NULL, st);
  uint64_t state = seed;
  float *out = w->data;
  for (int level = 0; level < 2; level++) {
    for (int i = 0; i < LEVEL_TENSORS; i++) {
      const ff_tensor_spec *s = &level_specs[i];
      int64_t n = spec_numel(s, channels);
      double bound = s->init == FF_INIT_UNIFORM_C   ? 1.0 / sqrt((double)channels)
                     : s->init == FF_INIT_UNIFORM_9 ? 1.0 / 3.0
                                                    : 0.0;
      for (int64_t k = 0; k < n; k++) {
        if (s->init == FF_INIT_ZERO) {
          out[k] = 0.0f;
        } else if (s->init == FF_INIT_ONE) {
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
  weights_bind(w);
  st = make_end(ctx, op, w, APX_OK);
  if (st == APX_OK)
    *weights = w;
  return st;
}

/* ---- safetensors ---- */

/* Element size of a safetensors dtype in bytes, 0 when unknown (or not a
 * whole number of bytes). */
static int64_t dtype_size(const char *dtype) {
  static const struct {
    const char *name;
    int64_t size;
  } known[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
               {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
               {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(dtype, known[i].name) == 0)
      return known[i].size;
  return 0;
}

static int is_json_space(unsigned char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* One entry of the header, checked for form. */
typedef struct st_entry {
  const char *name;
  const char *dtype;
  int ndim;
  int64_t dims[8];
  int64_t numel;
  uint64_t begin, end; /* relative to the data section */
} st_entry;

static int entry_by_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int entry_by_begin(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item))
    return 0;
  double v = item->valuedouble;
  if (!(v >= 0.0) || v > 9007199254740992.0 || v != floor(v))
    return 0;
  *out = (uint64_t)v;
  return 1;
}

typedef struct loader {
  const char *op;
  const char *path;
  int fd;
  uint64_t file_bytes;
  uint64_t data_start; /* 8 + header length */
  char *header;
  cJSON *json;
  st_entry *entries;
  int entry_count;
  void *scratch; /* f16/bf16 bytes of one tensor */
  size_t scratch_bytes;
} loader;

/* Every rejection of a file's content or path: APX_ERR_INVALID_ARG with
 * the problem first and the file last, so that a long path cannot push the
 * problem out of the 1023-byte message. */
static apx_status bad_file(const loader *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static apx_status bad_file(const loader *ld, const char *fmt, ...) {
  char problem[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(problem, sizeof problem, fmt, ap);
  va_end(ap);
  return apx__error(APX_ERR_INVALID_ARG, "%s: %s (file [%s])", ld->op, problem, ld->path);
}

/* A tensor name as a message quotes it: whole up to MESSAGE_NAME_BYTES,
 * else its start and its length. Used inside one call's arguments (the
 * struct lives until the end of that expression). */
typedef struct quoted_name {
  char text[MESSAGE_NAME_BYTES + 40];
} quoted_name;

static quoted_name quote(const char *name) {
  quoted_name q;
  size_t n = strlen(name);
  if (n <= MESSAGE_NAME_BYTES)
    memcpy(q.text, name, n + 1);
  else
    snprintf(q.text, sizeof q.text, "%.*s... (%zu bytes)", MESSAGE_NAME_BYTES, name, n);
  return q;
}

/* ---- the header's text, scanned before cJSON reads it ----
 * Strict JSON (RFC 8259) within the limits above. cJSON accepts all of it,
 * so a scanned header that cJSON then fails on has run out of memory: no
 * second parse is needed to tell the two apart, and the error position is
 * the scan's own (cJSON's is one pointer for the whole process). */

typedef struct json_scan {
  const unsigned char *start, *at, *end;
  long items;          /* values and keys so far */
  const char *problem; /* the first failure */
  int over_limit;      /* the failure is a limit, not bad JSON */
} json_scan;

static int scan_fail(json_scan *s, const char *problem) {
  s->problem = problem;
  return 0;
}

static int scan_limit(json_scan *s, const char *problem) {
  s->over_limit = 1;
  return scan_fail(s, problem);
}

static void scan_space(json_scan *s) {
  while (s->at < s->end && is_json_space(*s->at))
    s->at++;
}

static int hex4(const unsigned char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned char ch = p[i];
    unsigned digit = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
                     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                     : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10)
                                              : 16u;
    if (digit == 16u)
      return 0;
    v = v << 4 | digit;
  }
  *out = v;
  return 1;
}

static int count_item(json_scan *s) {
  if (++s->items > MAX_HEADER_VALUES)
    return scan_limit(s, "more than " STR(MAX_HEADER_VALUES) " values and keys");
  return 1;
}

static int scan_string(json_scan *s) {
  if (!count_item(s))
    return 0;
  s->at++; /* the opening quote */
  while (s->at < s->end) {
    unsigned char ch = *s->at;
    if (ch == '"') {
      s->at++;
      return 1;
    }
    if (ch < 0x20)
      return scan_fail(s, "a control character inside a string");
    if (ch != '\\') {
      s->at++;
      continue;
    }
    if (s->end - s->at < 2)
      break;
    unsigned char esc = s->at[1];
    if (esc == '"' || esc == '\\' || esc == '/' || esc == 'b' || esc == 'f' || esc == 'n' ||
        esc == 'r' || esc == 't') {
      s->at += 2;
      continue;
    }
    unsigned code, low;
    if (esc != 'u')
      return scan_fail(s, "an unknown escape inside a string");
    if (s->end - s->at < 6 || !hex4(s->at + 2, &code))
      return scan_fail(s, "a \\u escape without four hex digits");
    /* a NUL would end the name cJSON hands back: "T\u0000x" would read as
     * "T" */
    if (code == 0)
      return scan_fail(s, "\\u0000 (NUL) inside a string");
    if (code >= 0xDC00 && code <= 0xDFFF)
      return scan_fail(s, "a \\u escape of a lone low surrogate");
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (s->end - s->at < 12 || s->at[6] != '\\' || s->at[7] != 'u' || !hex4(s->at + 8, &low) ||
          low < 0xDC00 || low > 0xDFFF)
        return scan_fail(s, "a \\u escape of a high surrogate without its low half");
      s->at += 12;
    } else {
      s->at += 6;
    }
  }
  return scan_fail(s, "a string that is not closed");
}

static int is_digit(const json_scan *s, const unsigned char *p) {
  return p < s->end && *p >= '0' && *p <= '9';
}

static int scan_number(json_scan *s) {
  const unsigned char *p = s->at;
  if (*p == '-')
    p++;
  if (!is_digit(s, p))
    return scan_fail(s, "a '-' without digits");
  if (*p == '0')
    p++;
  else
    while (is_digit(s, p))
      p++;
  if (p < s->end && *p == '.') {
    if (!is_digit(s, ++p))
      return scan_fail(s, "a number without digits after its '.'");
    while (is_digit(s, p))
      p++;
  }
  if (p < s->end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < s->end && (*p == '+' || *p == '-'))
      p++;
    if (!is_digit(s, p))
      return scan_fail(s, "a number without digits in its exponent");
    while (is_digit(s, p))
      p++;
  }
  if (p - s->at > MAX_NUMBER_CHARS)
    return scan_limit(s, "a number of more than " STR(MAX_NUMBER_CHARS) " characters");
  s->at = p;
  return 1;
}

static int scan_literal(json_scan *s, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(s->end - s->at) < n || memcmp(s->at, word, n) != 0)
    return scan_fail(s, "an unexpected character");
  s->at += n;
  return 1;
}

static int scan_value(json_scan *s, int depth) {
  scan_space(s);
  if (s->at >= s->end)
    return scan_fail(s, "the text ends where a value should start");
  unsigned char ch = *s->at;
  if (ch == '"')
    return scan_string(s);
  if (!count_item(s))
    return 0;
  if (ch == '{' || ch == '[') {
    if (depth >= MAX_HEADER_DEPTH)
      return scan_limit(s, "objects and arrays nested more than " STR(MAX_HEADER_DEPTH) " deep");
    int object = ch == '{';
    unsigned char close = object ? '}' : ']';
    s->at++;
    scan_space(s);
    if (s->at < s->end && *s->at == close) {
      s->at++;
      return 1;
    }
    for (int items = 1;; items++) {
      if (!object && items > MAX_ARRAY_ITEMS)
        return scan_limit(s, "an array of more than " STR(MAX_ARRAY_ITEMS) " items");
      if (object) {
        scan_space(s);
        if (s->at >= s->end || *s->at != '"')
          return scan_fail(s, "a key that is not a string");
        if (!scan_string(s))
          return 0;
        scan_space(s);
        if (s->at >= s->end || *s->at != ':')
          return scan_fail(s, "a key without ':'");
        s->at++;
      }
      if (!scan_value(s, depth + 1))
        return 0;
      scan_space(s);
      if (s->at < s->end && *s->at == ',') {
        s->at++;
        continue;
      }
      if (s->at < s->end && *s->at == close) {
        s->at++;
        return 1;
      }
      return scan_fail(s, object ? "no ',' or '}' after a member" : "no ',' or ']' after an item");
    }
  }
  if (ch == 't')
    return scan_literal(s, "true");
  if (ch == 'f')
    return scan_literal(s, "false");
  if (ch == 'n')
    return scan_literal(s, "null");
  if (ch == '-' || (ch >= '0' && ch <= '9'))
    return scan_number(s);
  return scan_fail(s, "an unexpected character");
}

/* The whole header: one value, then only white space. */
static apx_status scan_header(const loader *ld, size_t header_bytes) {
  json_scan s = {(const unsigned char *)ld->header, (const unsigned char *)ld->header,
                 (const unsigned char *)ld->header + header_bytes, 0, NULL, 0};
  if (scan_value(&s, 0)) {
    scan_space(&s);
    if (s.at == s.end)
      return APX_OK;
    return bad_file(ld, "the header has bytes after its JSON value (at byte %lld)",
                    (long long)(s.at - s.start));
  }
  if (s.over_limit)
    return bad_file(ld, "the header has %s (at byte %lld), over apexx's limit "
                        "(docs/ff_weights.md, Limits)",
                    s.problem, (long long)(s.at - s.start));
  return bad_file(ld, "the header is not JSON: %s at byte %lld", s.problem,
                  (long long)(s.at - s.start));
}

/* Check one header entry's form and its offsets against the file. */
static apx_status parse_entry(loader *ld, const cJSON *item, st_entry *e) {
  const char *name = item->string;
  e->name = name;
  if (!cJSON_IsObject(item))
    return bad_file(ld, "tensor [%s] is not a JSON object", quote(name).text);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!dtype)
    return bad_file(ld, "tensor [%s] has no dtype", quote(name).text);
  if (!cJSON_IsString(dtype))
    return bad_file(ld, "tensor [%s]: dtype is not a string", quote(name).text);
  e->dtype = dtype->valuestring;
  if (!cJSON_IsArray(shape))
    return bad_file(ld, "tensor [%s]: shape is missing or not a list", quote(name).text);
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > (int)(sizeof e->dims / sizeof e->dims[0]))
    return bad_file(ld, "tensor [%s]: shape has [%d] dimensions, more than %d", quote(name).text,
                    ndim, (int)(sizeof e->dims / sizeof e->dims[0]));
  e->ndim = ndim;
  e->numel = 1;
  int overflow = 0;
  for (int d = 0; d < ndim; d++) {
    uint64_t v;
    if (!json_uint(cJSON_GetArrayItem(shape, d), &v))
      return bad_file(ld, "tensor [%s]: shape[%d] is not a non-negative integer",
                      quote(name).text, d);
    e->dims[d] = (int64_t)v;
    if (v != 0 && (uint64_t)e->numel > (uint64_t)INT64_MAX / 8 / v)
      overflow = 1;
    if (!overflow)
      e->numel *= (int64_t)v;
  }
  if (overflow) {
    for (int d = 0; d < ndim; d++)
      if (e->dims[d] == 0)
        overflow = 0;
    if (overflow)
      return bad_file(ld, "tensor [%s]: shape has too many elements", quote(name).text);
    e->numel = 0;
  }
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
      !json_uint(cJSON_GetArrayItem(offsets, 0), &e->begin) ||
      !json_uint(cJSON_GetArrayItem(offsets, 1), &e->end))
    return bad_file(ld, "tensor [%s]: data_offsets is missing or not two non-negative integers",
                    quote(name).text);
  uint64_t data_bytes = ld->file_bytes - ld->data_start;
  if (e->begin > e->end)
    return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] end before they begin",
                    quote(name).text, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > data_bytes)
    return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] reach past the end of the data "
                        "[%llu bytes]",
                    quote(name).text, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)data_bytes);
  int64_t size = dtype_size(e->dtype);
  if (size && e->end - e->begin != (uint64_t)(e->numel * size))
    return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] hold %llu bytes, but %lld "
                        "elements of %s take %lld",
                    quote(name).text, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin), (long long)e->numel,
                    quote(e->dtype).text, (long long)(e->numel * size));
  return APX_OK;
}

/* Read exactly `bytes` at `offset`. */
static apx_status read_at(loader *ld, void *dst, size_t bytes, uint64_t offset, const char *what) {
  char *p = dst;
  while (bytes > 0) {
    ssize_t got = pread(ld->fd, p, bytes, (off_t)offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got == 0)
      return bad_file(ld, "cannot read %s: the file ended early", what);
    if (got < 0)
      return apx__error(APX_ERR_IO, "%s: cannot read %s: %s (file [%s])", ld->op, what,
                        strerror(errno), ld->path);
    p += got;
    bytes -= (size_t)got;
    offset += (uint64_t)got;
  }
  return APX_OK;
}

/* Read the 8-byte length and the JSON header; check every entry's form,
 * the names' uniqueness and the offsets' disjointness. */
static apx_status read_header(loader *ld) {
  if (ld->file_bytes < 8)
    return bad_file(ld, "the file is [%llu] bytes, too short for the 8-byte header length",
                    (unsigned long long)ld->file_bytes);
  unsigned char len_bytes[8];
  apx_status st = read_at(ld, len_bytes, 8, 0, "the header length");
  if (st != APX_OK)
    return st;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; i--)
    header_bytes = header_bytes << 8 | len_bytes[i];
  if (header_bytes > ld->file_bytes - 8)
    return bad_file(ld, "header length [%llu] reaches past the end of the file [%llu bytes]",
                    (unsigned long long)header_bytes, (unsigned long long)ld->file_bytes);
  if (header_bytes > MAX_HEADER_BYTES)
    return bad_file(ld, "header length [%llu] is over apexx's limit of %llu bytes "
                        "(docs/ff_weights.md, Limits)",
                    (unsigned long long)header_bytes, (unsigned long long)MAX_HEADER_BYTES);
  ld->data_start = 8 + header_bytes;
  ld->header = malloc(header_bytes + 1);
  if (!ld->header)
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory for a header of %llu bytes", ld->op,
                      (unsigned long long)header_bytes);
  st = read_at(ld, ld->header, header_bytes, 8, "the header");
  if (st != APX_OK)
    return st;
  ld->header[header_bytes] = '\0';
  st = scan_header(ld, (size_t)header_bytes);
  if (st != APX_OK)
    return st;
  ld->json = cJSON_ParseWithLengthOpts(ld->header, header_bytes, NULL, 0);
  if (!ld->json) /* the scan found valid JSON within the limits */
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory reading a header of %llu bytes",
                      ld->op, (unsigned long long)header_bytes);
  if (!cJSON_IsObject(ld->json))
    return bad_file(ld, "the header is not a JSON object");

  int count = 0;
  for (const cJSON *item = ld->json->child; item; item = item->next)
    count++;
  ld->entries = calloc((size_t)count + 1, sizeof *ld->entries);
  if (!ld->entries)
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", ld->op);
  for (const cJSON *item = ld->json->child; item; item = item->next) {
    if (!item->string)
      return bad_file(ld, "the header has an unnamed entry");
    if (strcmp(item->string, "__metadata__") == 0) {
      if (!cJSON_IsObject(item))
        return bad_file(ld, "__metadata__ is not a JSON object");
      for (const cJSON *m = item->child; m; m = m->next)
        if (!cJSON_IsString(m))
          return bad_file(ld, "__metadata__ [%s] is not a string",
                          quote(m->string ? m->string : "").text);
      continue;
    }
    st = parse_entry(ld, item, &ld->entries[ld->entry_count]);
    if (st != APX_OK)
      return st;
    ld->entry_count++;
  }
  if (ld->entry_count > 1) {
    /* a name twice is reported as such before its bytes can overlap */
    qsort(ld->entries, (size_t)ld->entry_count, sizeof *ld->entries, entry_by_name);
    for (int i = 1; i < ld->entry_count; i++)
      if (strcmp(ld->entries[i - 1].name, ld->entries[i].name) == 0)
        return bad_file(ld, "tensor [%s] appears more than once in the header",
                        quote(ld->entries[i].name).text);
    qsort(ld->entries, (size_t)ld->entry_count, sizeof *ld->entries, entry_by_begin);
    const st_entry *last = NULL; /* the non-empty entry reaching furthest so far */
    for (int i = 0; i < ld->entry_count; i++) {
      const st_entry *e = &ld->entries[i];
      if (e->begin == e->end)
        continue;
      if (last && e->begin < last->end)
        return bad_file(ld, "tensor [%s]: data_offsets [%llu, %llu] overlap tensor [%s] [%llu, "
                            "%llu]",
                        quote(e->name).text, (unsigned long long)e->begin,
                        (unsigned long long)e->end, quote(last->name).text,
                        (unsigned long long)last->begin, (unsigned long long)last->end);
      if (!last || e->end > last->end)
        last = e;
    }
    qsort(ld->entries, (size_t)ld->entry_count, sizeof *ld->entries, entry_by_name);
  }
  return APX_OK;
}

static const st_entry *find_entry(const loader *ld, const char *name) {
  st_entry key = {.name = name};
  if (ld->entry_count == 0)
    return NULL;
  return bsearch(&key, ld->entries, (size_t)ld->entry_count, sizeof key, entry_by_name);
}

/* A required tensor: present, a supported dtype, the expected shape. */
static apx_status check_required(const loader *ld, const char *name, const ff_tensor_spec *s,
                                 int64_t c, const st_entry **out) {
  const st_entry *e = find_entry(ld, name);
  if (!e)
    return bad_file(ld, "tensor [%s] is missing", name);
  if (strcmp(e->dtype, "F32") != 0 && strcmp(e->dtype, "F16") != 0 && strcmp(e->dtype, "BF16") != 0)
    return bad_file(ld, "tensor [%s]: dtype [%s] is not F32, F16 or BF16", name,
                    quote(e->dtype).text);
  int same = e->ndim == s->ndim;
  for (int d = 0; same && d < s->ndim; d++)
    same = e->dims[d] == spec_dim(s, d, c);
  if (!same) {
    char got[160], want[96];
    format_dims(got, sizeof got, e->ndim, e->dims);
    format_spec_dims(want, sizeof want, s, c);
    return bad_file(ld, "tensor [%s] has shape %s, expected %s for C = %lld", name, got, want,
                    (long long)c);
  }
  *out = e;
  return APX_OK;
}

/* docs/ff_weights.md: a weight must be finite; the first one that is not
 * is named by its index in the tensor's shape. */
static apx_status check_finite(const loader *ld, const st_entry *e, const float *v) {
  for (int64_t k = 0; k < e->numel; k++) {
    if (isfinite(v[k]))
      continue;
    int64_t index[8], rest = k;
    for (int d = e->ndim - 1; d >= 0; d--) {
      index[d] = rest % e->dims[d];
      rest /= e->dims[d];
    }
    char at[160];
    format_dims(at, sizeof at, e->ndim, index);
    return bad_file(ld, "tensor [%s] holds %s at index %s (element %lld); weights must be finite",
                    e->name, isnan(v[k]) ? "NaN" : v[k] > 0 ? "+inf" : "-inf", at, (long long)k);
  }
  return APX_OK;
}

/* Read one tensor's bytes and convert them to fp32 in dst. */
static apx_status read_tensor(loader *ld, const st_entry *e, float *dst) {
  size_t n = (size_t)e->numel;
  uint64_t offset = ld->data_start + e->begin;
  char what[NAME_MAX_ + 32];
  snprintf(what, sizeof what, "tensor [%s]", e->name);
  if (strcmp(e->dtype, "F32") == 0) {
    apx_status st = read_at(ld, dst, n * 4, offset, what);
    if (st != APX_OK)
      return st;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t k = 0; k < n; k++) {
      const unsigned char *b = (const unsigned char *)&dst[k];
      dst[k] = apx_bits_f32((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                            (uint32_t)b[3] << 24);
    }
#endif
    return check_finite(ld, e, dst);
  }
  if (n * 2 > ld->scratch_bytes) {
    free(ld->scratch);
    ld->scratch = malloc(n * 2);
    ld->scratch_bytes = ld->scratch ? n * 2 : 0;
    if (!ld->scratch)
      return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", ld->op);
  }
  apx_status st = read_at(ld, ld->scratch, n * 2, offset, what);
  if (st != APX_OK)
    return st;
  const unsigned char *b = ld->scratch;
  int bf16 = strcmp(e->dtype, "BF16") == 0;
  for (size_t k = 0; k < n; k++) {
    uint16_t h = (uint16_t)(b[2 * k] | b[2 * k + 1] << 8);
    dst[k] = bf16 ? apx_bf16_to_f32(h) : apx_f16_to_f32(h);
  }
  return check_finite(ld, e, dst);
}

static apx_status load_file(loader *ld, apx_context *ctx, apx_ff_weights **out) {
  ld->fd = open(ld->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
  if (ld->fd < 0)
    return bad_file(ld, "cannot open the file: %s", strerror(errno));
  struct stat sb;
  if (fstat(ld->fd, &sb) != 0)
    return bad_file(ld, "cannot examine the file: %s", strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return bad_file(ld, "the path is not a regular file");
  ld->file_bytes = (uint64_t)sb.st_size;
  apx_status st = read_header(ld);
  if (st != APX_OK)
    return st;

  /* C comes from the first tensor; every other shape follows from it */
  const ff_tensor_spec *first = &level_specs[0];
  char name[NAME_MAX_];
  spec_name(name, 0, first);
  const st_entry *e = find_entry(ld, name);
  if (!e)
    return bad_file(ld, "tensor [%s] is missing", name);
  if (e->ndim != 1 || e->dims[0] < 1 || e->dims[0] > MAX_CHANNELS) {
    char got[160];
    format_dims(got, sizeof got, e->ndim, e->dims);
    return bad_file(ld, "tensor [%s] has shape %s, expected [C] with C in [1, %d]", name, got,
                    MAX_CHANNELS);
  }
  int64_t c = e->dims[0];
  const st_entry *found[2][LEVEL_TENSORS];
  for (int level = 0; level < 2; level++)
    for (int i = 0; i < LEVEL_TENSORS; i++) {
      spec_name(name, level, &level_specs[i]);
      st = check_required(ld, name, &level_specs[i], c, &found[level][i]);
      if (st != APX_OK)
        return st;
    }

  apx_ff_weights *w;
  st = weights_new(ctx, ld->op, c, &w);
  if (st != APX_OK)
    return st;
  float *dst = w->data;
  for (int level = 0; level < 2 && st == APX_OK; level++)
    for (int i = 0; i < LEVEL_TENSORS && st == APX_OK; i++) {
      st = read_tensor(ld, found[level][i], dst);
      dst += found[level][i]->numel;
    }
  if (st != APX_OK) {
    weights_destroy(w);
    return st;
  }
  weights_bind(w);
  *out = w;
  return APX_OK;
}

APX_API apx_status apx_ff_weights_load(apx_context *ctx, const char *path,
                                       apx_ff_weights **weights) {
  static const char op[] = "apx_ff_weights_load";
  apx__clear_error();
  if (weights)
    *weights = NULL;
  if (!ctx)
    return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", op);
  if (!path)
    return apx__error(APX_ERR_INVALID_ARG, "%s: path = [NULL]", op);
  if (!weights)
    return apx__error(APX_ERR_INVALID_ARG, "%s: weights = [NULL]", op);
  apx_status st = make_begin(ctx, op);
  if (st != APX_OK)
    return st;
  loader ld = {.op = op, .path = path, .fd = -1};
  apx_ff_weights *w = NULL;
  st = load_file(&ld, ctx, &w);
  if (ld.fd >= 0)
    close(ld.fd);
  cJSON_Delete(ld.json);
  free(ld.header);
  free(ld.entries);
  free(ld.scratch);
  st = make_end(ctx, op, w, st);
  if (st == APX_OK)
    *weights = w;
  return st;
}

/* ---- the writer ---- */

/* A failed write, sync or rename is APX_ERR_IO (a full disk, a quota, a
 * file size limit, a device error); a path that cannot name a file there
 * is the caller's argument. */
static apx_status save_failed(int err, const char *op, const char *what, const char *path) {
  int bad_path = err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM ||
                 err == EISDIR || err == ENAMETOOLONG || err == ELOOP || err == EROFS;
  return apx__error(bad_path ? APX_ERR_INVALID_ARG : APX_ERR_IO, "%s: cannot %s: %s (file [%s])",
                    op, what, strerror(err), path);
}

static apx_status write_all(int fd, const void *src, size_t bytes, const char *op,
                            const char *path) {
  const char *p = src;
  while (bytes > 0) {
    ssize_t put = write(fd, p, bytes);
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      return apx__error(APX_ERR_IO, "%s: cannot write: %s (file [%s])", op, strerror(errno),
                        path);
    p += put;
    bytes -= (size_t)put;
  }
  return APX_OK;
}

/* The header: every tensor as F32 at its place in the buffer, padded with
 * spaces to a multiple of 8 bytes. */
static char *make_header(const apx_ff_weights *w, size_t *length) {
  size_t cap = 256 + 2 * LEVEL_TENSORS * (NAME_MAX_ + 128), used = 0;
  char *h = malloc(cap);
  if (!h)
    return NULL;
  used += (size_t)snprintf(h + used, cap - used, "{\"__metadata__\":{\"format\":\"pt\"}");
  uint64_t offset = 0;
  for (int level = 0; level < 2; level++)
    for (int i = 0; i < LEVEL_TENSORS; i++) {
      const ff_tensor_spec *s = &level_specs[i];
      char name[NAME_MAX_], dims[96];
      spec_name(name, level, s);
      format_spec_dims(dims, sizeof dims, s, w->channels);
      for (char *p = dims; *p; p++) /* compact JSON, as safetensors writes it */
        if (*p == ' ')
          memmove(p, p + 1, strlen(p));
      uint64_t bytes = (uint64_t)spec_numel(s, w->channels) * 4;
      used += (size_t)snprintf(h + used, cap - used,
                               ",\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%llu,"
                               "%llu]}",
                               name, dims, (unsigned long long)offset,
                               (unsigned long long)(offset + bytes));
      offset += bytes;
    }
  used += (size_t)snprintf(h + used, cap - used, "}");
  while (used % 8 != 0)
    h[used++] = ' ';
  h[used] = '\0';
  *length = used;
  return h;
}

static apx_status write_file(int fd, const apx_ff_weights *w, const char *op, const char *path) {
  size_t header_bytes;
  char *header = make_header(w, &header_bytes);
  if (!header)
    return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", op);
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; i++)
    len_bytes[i] = (unsigned char)((uint64_t)header_bytes >> (8 * i));
  apx_status st = write_all(fd, len_bytes, 8, op, path);
  if (st == APX_OK)
    st = write_all(fd, header, header_bytes, op, path);
  free(header);
  size_t n = 2 * w->level_count;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (size_t k = 0; k < n && st == APX_OK; k++) {
    uint32_t u = apx_f32_bits(w->data[k]);
    unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 24)};
    st = write_all(fd, b, 4, op, path);
  }
#else
  if (st == APX_OK)
    st = write_all(fd, w->data, n * sizeof(float), op, path);
#endif
  if (st == APX_OK && fsync(fd) != 0)
    st = apx__error(APX_ERR_IO, "%s: cannot sync: %s (file [%s])", op, strerror(errno), path);
  return st;
}

/* apx_ff_weights_save of a pinned handle. */
static apx_status save_pinned(const apx_ff_weights *weights, const char *path) {
  static const char op[] = "apx_ff_weights_save";
  static atomic_uint temp_counter;
  struct stat sb;
  if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return apx__error(APX_ERR_INVALID_ARG, "%s: the target exists and is not a regular file (file [%s])",
                      op, path);
  /* a new file beside the target (same file system), renamed over it */
  char *temp = NULL;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    free(temp);
    temp = apx__strdupf("%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&temp_counter, 1u));
    if (!temp)
      return apx__error(APX_ERR_NO_MEMORY, "%s: out of memory", op);
    fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0) {
    apx_status st = save_failed(errno, op, "create the temporary file", temp);
    free(temp);
    return st;
  }
  apx_status st = write_file(fd, weights, op, path);
  if (close(fd) != 0 && st == APX_OK)
    st = apx__error(APX_ERR_IO, "%s: cannot write: %s (file [%s])", op, strerror(errno), path);
  if (st == APX_OK && rename(temp, path) != 0)
    st = save_failed(errno, op, "rename the temporary file over the target", path);
  if (st != APX_OK)
    unlink(temp);
  free(temp);
  return st;
}

APX_API apx_status apx_ff_weights_save(apx_context *ctx, const apx_ff_weights *weights,
                                       const char *path) {
  static const char op[] = "apx_ff_weights_save";
  apx__clear_error();
  if (!ctx)
    return apx__error(APX_ERR_INVALID_ARG, "%s: ctx = [NULL]", op);
  if (!weights)
    return apx__error(APX_ERR_INVALID_ARG, "%s: weights = [NULL]", op);
  if (!path)
    return apx__error(APX_ERR_INVALID_ARG, "%s: path = [NULL]", op);
  apx_ff_weights *w = pin(ctx, weights);
  if (!w)
    return apx__error(APX_ERR_INVALID_ARG,
                      "%s: weights [%p] are not an open handle of this context (freed, or made "
                      "by another context)",
                      op, (const void *)weights);
  apx_status st = save_pinned(w, path);
  unpin(ctx, w);
  return st;
}
