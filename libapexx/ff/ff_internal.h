/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx internals of the FF model (libapexx/ff/; docs/ff_weights.md,
 * docs/architecture.md, The FF model): the weights handle and its tensors
 * (weights.c), the safetensors reader (load.c, its header's scan in
 * json_scan.c) and writer (save.c). The routing is not in the core: the
 * backends route themselves (common/apx_ff_route.h, the cuda backend's
 * ff_route.cu) by the rules of include/apexx/ff_backend.h. */
#ifndef APX_CORE_FF_INTERNAL_H
#define APX_CORE_FF_INTERNAL_H

#include <apexx/apexx.h>
#include <apexx/ff_backend.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* ---- the tensors of one level (FFHeavyPath), in the fixed order ---- */

/* How the seeded generator fills a tensor (docs/ff_weights.md). */
typedef enum apx__ff_init {
  APX__FF_INIT_ZERO,
  APX__FF_INIT_ONE,
  APX__FF_INIT_UNIFORM_C, /* U[-1/sqrt(C), 1/sqrt(C)) */
  APX__FF_INIT_UNIFORM_9  /* U[-1/3, 1/3): the depthwise 3x3 conv, fan_in 9 */
} apx__ff_init;

/* An expected dimension: k > 0 stands for k*C, k <= 0 for the constant -k. */
typedef struct apx__ff_tensor_spec {
  const char *suffix; /* the name after "l0_path." / "l1_path." */
  int ndim;
  int dims[4];
  apx__ff_init init;
  size_t field; /* offset in apx_ff_level_params: a const float * slot, or a
                   float for a 0-d tensor */
} apx__ff_tensor_spec;

#define APX__FF_LEVEL_TENSORS 24
extern const apx__ff_tensor_spec apx__ff_level_specs[APX__FF_LEVEL_TENSORS];
extern const char *const apx__ff_level_prefix[2];
#define APX__FF_NAME_MAX 96 /* longest full name, with its NUL */
#define APX__FF_MAX_CHANNELS 65536

int64_t apx__ff_spec_dim(const apx__ff_tensor_spec *s, int d, int64_t c);
int64_t apx__ff_spec_numel(const apx__ff_tensor_spec *s, int64_t c);
/* "l0_path.SUFFIX" into out[APX__FF_NAME_MAX]. */
void apx__ff_spec_name(char *out, int level, const apx__ff_tensor_spec *s);
/* "[a, b, c]" */
void apx__ff_format_dims(char *out, size_t size, int ndim, const int64_t *dims);
void apx__ff_format_spec_dims(char *out, size_t size, const apx__ff_tensor_spec *s, int64_t c);

/* ---- the handle ---- */
struct apx_ff_weights {
  apx__object object; /* first: its prepared data (services.cache, content
                         &params) */
  apx_context *ctx;
  int64_t channels;
  float *data;        /* every tensor, in the fixed order, l0_path then l1_path */
  size_t level_count; /* floats of one level */
  apx_ff_params params;
  struct apx_ff_weights *prev, *next; /* ctx->ff_weights, under ctx->lock */
  int pins; /* calls reading the handle now (ff_infer, save), under ctx->lock */
};

/* A handle with room for C channels, not yet linked into the context. */
apx_status apx__ff_weights_new(apx_context *ctx, const char *op, int64_t c, apx_ff_weights **out);
/* Point params at the tensors (and copy the 0-d ones) once data is final. */
void apx__ff_weights_bind(apx_ff_weights *w);
/* Release the prepared data and the memory of a handle already unlinked. */
void apx__ff_weights_destroy(apx_ff_weights *w);

/* ---- lifetime: the context's open handles (docs/ff_weights.md, Lifetime) ---- */
/* A load or seeded make begins: refused once apx_close has begun. */
apx_status apx__ff_make_begin(apx_context *ctx, const char *op);
/* A make ends with status st (w made when APX_OK): w is linked into ctx,
 * or freed when apx_close began meanwhile. */
apx_status apx__ff_make_end(apx_context *ctx, const char *op, apx_ff_weights *w, apx_status st);
/* The open handle `weights` of ctx, held until apx__ff_unpin_handle; NULL
 * when it is not one (freed, or of another context). */
apx_ff_weights *apx__ff_pin_handle(apx_context *ctx, const apx_ff_weights *weights);
void apx__ff_unpin_handle(apx_context *ctx, apx_ff_weights *w);

/* ---- the core's hooks (loader.c, context.c, ops.c, dispatch.c) ---- */
/* Release every prepared entry that backend `core` (an apx__backend *) made,
 * on every live handle of its context; called before the backend's fini. */
void apx__ff_release_backend(void *core);
/* Free every handle still open on the context (apx_close), after the
 * makes and pinned calls in progress end; later makes are refused. */
void apx__ff_close_all(apx_context *ctx);
/* A call whose op takes weights (an apx_ff_weights handle argument of its
 * descriptor d, NULL for an unknown op) pins them for its duration: *pinned is the handle, found in
 * ctx's open handles without dereferencing it (APX_ERR_INVALID_ARG when it
 * is not there: freed, or of another context), NULL when the op takes none
 * or they are NULL. A free waits for the pins. */
apx_status apx__ff_pin_args(apx_context *ctx, const apx_op_desc *d, const void *args,
                            const apx_ff_weights **pinned);
void apx__ff_unpin(apx_context *ctx, const apx_ff_weights *pinned);

/* ---- the safetensors header's limits (docs/ff_weights.md, Limits) ----
 * Checked by a scan of the text before cJSON builds its tree (json_scan.c):
 * the tree takes up to ~40 bytes per header byte, so the header is capped
 * well below safetensors' own 100 MB, and no array may hold more items than
 * a shape can have dims. */
#define APX__FF_MAX_HEADER_BYTES ((uint64_t)16 << 20)
#define APX__FF_MAX_HEADER_VALUES 524288
#define APX__FF_MAX_HEADER_DEPTH 16
#define APX__FF_MAX_ARRAY_ITEMS 64
/* cJSON 1.7 reads a number through a 64-byte buffer: a longer one fails */
#define APX__FF_MAX_NUMBER_CHARS 63

/* Strict JSON (RFC 8259) within those limits: 1 when text[0..bytes) is one
 * JSON value then only white space; else 0 with the problem ("an
 * unexpected character"), its byte position and whether it is a limit
 * rather than bad JSON. */
int apx__ff_json_scan(const char *text, size_t bytes, const char **problem, size_t *at,
                      int *over_limit);

#endif
