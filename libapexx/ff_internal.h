/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx internals of the end-to-end FF path (apx__ff_ prefix):
 * weights handles (ff_weights.c), host routing (ff_route.c) and argument
 * validation (validate_ff.c). */
#ifndef APX_CORE_FF_INTERNAL_H
#define APX_CORE_FF_INTERNAL_H

#include <apexx/apexx.h>
#include <apexx/backend.h>

/* services.ff_params / services.ff_cached (ff_weights.c) */
const apx_ff_params *apx__ff_params(const apx_ff_weights *weights);
apx_status apx__ff_cached(void *core, const apx_ff_weights *weights, apx_dtype dtype,
                          int device_index,
                          apx_status (*make)(void *state, const apx_ff_params *params,
                                             apx_dtype dtype, int device_index, void **prepared),
                          void (*release)(void *state, int device_index, void *prepared),
                          void *state, void **prepared);
/* Release every cached entry that backend `core` (an apx__backend *) made,
 * on every live handle of its context; called before the backend's fini. */
void apx__ff_release_backend(void *core);
/* Free every handle still open on the context (apx_close), after the
 * makes and pinned calls in progress end; later makes are refused. */
void apx__ff_close_all(apx_context *ctx);
/* A call that reads the weights of `args` (ff_infer) pins them for its
 * duration: *pinned is the handle, found in ctx's open handles without
 * dereferencing it (APX_ERR_INVALID_ARG when it is not there: freed, or of
 * another context), NULL when the op takes none or they are NULL. A free
 * waits for the pins. */
apx_status apx__ff_pin_args(apx_context *ctx, apx_op_id op, const void *args,
                            const apx_ff_weights **pinned);
void apx__ff_unpin(apx_context *ctx, const apx_ff_weights *pinned);

/* services.ff_route (ff_route.c) */
apx_status apx__ff_route(const apx_ff_infer_args *args, apx_ff_route *route);

#endif
