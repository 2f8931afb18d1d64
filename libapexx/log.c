/* SPDX-License-Identifier: Apache-2.0 */
/* Logging: a per-context sink, stderr by default, level from $APEXX_LOG. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static const char *const level_names[] = {"off", "error", "warn", "info", "debug"};

apx_log_level apx__log_level_from_env(void) {
  const char *v = apx__getenv("APEXX_LOG");
  if (!v || !*v) return APX_LOG_WARN;
  for (int i = 0; i < 5; i++)
    if (strcasecmp(v, level_names[i]) == 0) return (apx_log_level)i;
  return APX_LOG_WARN;
}

const char *apx__log_env_unknown(void) {
  const char *v = apx__getenv("APEXX_LOG");
  if (!v || !*v) return NULL;
  for (int i = 0; i < 5; i++)
    if (strcasecmp(v, level_names[i]) == 0) return NULL;
  return v;
}

static const char *level_name(apx_log_level level) {
  switch (level) {
  case APX_LOG_ERROR: return "error";
  case APX_LOG_WARN: return "warning";
  case APX_LOG_INFO: return "info";
  case APX_LOG_DEBUG: return "debug";
  default: return "";
  }
}

void apx__vlog(apx_context *ctx, apx_log_level level, const char *prefix,
               const char *fmt, va_list ap) {
  apx_log_level threshold = ctx ? ctx->log_level : apx__log_level_from_env();
  if (level == APX_LOG_OFF || level > threshold) return;
  char raw[4096], line[1024];
  int n = 0;
  if (prefix) n = snprintf(raw, sizeof raw, "%s: ", prefix);
  if (n < 0 || (size_t)n >= sizeof raw) n = 0;
  vsnprintf(raw + n, sizeof raw - (size_t)n, fmt, ap);
  /* one printable line whatever the arguments held (names from files) */
  apx__printable(line, sizeof line, raw);
  if (ctx && ctx->log_fn) {
    ctx->log_fn(ctx->log_user, level, line);
    return;
  }
  fprintf(stderr, "apexx: %s: %s\n", level_name(level), line);
}

void apx__log(apx_context *ctx, apx_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  apx__vlog(ctx, level, NULL, fmt, ap);
  va_end(ap);
}

APX_API void apx_set_log(apx_context *ctx, apx_log_fn fn, void *user) {
  if (!ctx) return;
  ctx->log_fn = fn;
  ctx->log_user = user;
}
