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
/* Free every handle still open on the context (apx_close). */
void apx__ff_close_all(apx_context *ctx);

/* services.ff_route (ff_route.c) */
apx_status apx__ff_route(const apx_ff_infer_args *args, apx_ff_route *route);

#endif
