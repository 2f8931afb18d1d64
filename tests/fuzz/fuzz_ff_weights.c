/* SPDX-License-Identifier: Apache-2.0 */
/* The safetensors reader: the input is written to a file and loaded with
 * apx_ff_weights_load; a handle that loads is freed. Out of memory is a
 * finding: the reader scans the header before cJSON reads it and takes a
 * cJSON failure on a scanned header for out of memory, so it must not
 * happen where memory is plentiful (a text the scan passes and cJSON
 * refuses would show here). */
#include <stdlib.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  apx_context *ctx = fuzz_cpu_context();
  const char *path = fuzz_file("weights.safetensors", data, size);
  apx_ff_weights *w = NULL;
  apx_status st = apx_ff_weights_load(ctx, path, &w);
  if (st == APX_OK) apx_ff_weights_free(ctx, w);
  if (st == APX_ERR_NO_MEMORY) abort();
  return 0;
}
