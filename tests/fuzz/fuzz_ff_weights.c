/* The safetensors reader: the input is written to a file and loaded with
 * apx_ff_weights_load; a handle that loads is freed. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  apx_context *ctx = fuzz_cpu_context();
  const char *path = fuzz_file("weights.safetensors", data, size);
  apx_ff_weights *w = NULL;
  if (apx_ff_weights_load(ctx, path, &w) == APX_OK) apx_ff_weights_free(ctx, w);
  return 0;
}
