/* SPDX-License-Identifier: Apache-2.0 */
/* Strings that live as long as their context (apx__intern): the reasons of
 * apx_explain, the values of apx_config_key. A leaf of libapexx: it calls
 * only the string helpers of error.c. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *apx__intern(apx_context *ctx, const char *s) {
  const char *found = NULL;
  pthread_mutex_lock(&ctx->lock);
  for (int i = 0; i < ctx->interned_count && !found; i++)
    if (strcmp(ctx->interned[i], s) == 0)
      found = ctx->interned[i];
  if (!found) {
    if (ctx->interned_count == ctx->interned_cap) {
      int cap = ctx->interned_cap ? ctx->interned_cap * 2 : 32;
      char **grown = realloc(ctx->interned, sizeof *grown * (size_t)cap);
      if (grown) {
        ctx->interned = grown;
        ctx->interned_cap = cap;
      }
    }
    if (ctx->interned_count < ctx->interned_cap) {
      char *copy = apx__strdup(s);
      if (copy)
        ctx->interned[ctx->interned_count++] = copy;
      found = copy;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  return found ? found : "(out of memory)";
}
