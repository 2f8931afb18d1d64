/* FF weights handles: safetensors reader, seeded generator, per-backend
 * cache. (skeleton, being written) */
#include "config.h"

#include "ff_internal.h"
#include "internal.h"

const apx_ff_params *apx__ff_params(const apx_ff_weights *weights) { (void)weights; return NULL; }
apx_status apx__ff_cached(void *core, const apx_ff_weights *weights, apx_dtype dtype,
                          int device_index,
                          apx_status (*make)(void *, const apx_ff_params *, apx_dtype, int, void **),
                          void (*release)(void *, int, void *), void *state, void **prepared) {
  (void)core; (void)weights; (void)dtype; (void)device_index; (void)make; (void)release;
  (void)state; (void)prepared;
  return apx__error(APX_ERR_UNSUPPORTED, "ff weights: not built yet");
}
void apx__ff_release_backend(void *core) { (void)core; }
void apx__ff_close_all(apx_context *ctx) { (void)ctx; }
APX_API apx_status apx_ff_weights_load(apx_context *ctx, const char *path, apx_ff_weights **w) {
  (void)ctx; (void)path; (void)w;
  return apx__error(APX_ERR_UNSUPPORTED, "apx_ff_weights_load: not built yet");
}
APX_API apx_status apx_ff_weights_seeded(apx_context *ctx, int64_t c, uint64_t seed, apx_ff_weights **w) {
  (void)ctx; (void)c; (void)seed; (void)w;
  return apx__error(APX_ERR_UNSUPPORTED, "apx_ff_weights_seeded: not built yet");
}
APX_API apx_status apx_ff_weights_save(apx_context *ctx, const apx_ff_weights *w, const char *path) {
  (void)ctx; (void)w; (void)path;
  return apx__error(APX_ERR_UNSUPPORTED, "apx_ff_weights_save: not built yet");
}
APX_API int64_t apx_ff_weights_channels(const apx_ff_weights *w) { (void)w; return 0; }
APX_API void apx_ff_weights_free(apx_context *ctx, apx_ff_weights *w) { (void)ctx; (void)w; }
