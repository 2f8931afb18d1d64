/* SPDX-License-Identifier: Apache-2.0 */
/* The context: configuration and the loaded backends. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff/ff_internal.h"
#include "internal.h"

APX_API apx_status apx_open(apx_context **out, const char *config_path) {
  apx__clear_error();
  if (!out) return apx__error(APX_ERR_INVALID_ARG, "apx_open: ctx = [NULL]");
  *out = NULL;
  apx_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return apx__error(APX_ERR_NO_MEMORY, "apx_open: out of memory");
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_cond_init(&ctx->ff_idle, NULL);
  ctx->log_level = apx__log_level_from_env();
  /* a configuration in a directory others can write (no sticky bit) could
   * be replaced by them: refused like a world-writable file */
  const char *env_config = apx__getenv("APEXX_CONFIG");
  const char *cfg_path = config_path ? config_path
                         : env_config && *env_config ? env_config
                                                     : APEXX_SYSCONF_INI;
  const char *unsafe_dir = apx__unsafe_dir_reason(cfg_path);
  apx_status st =
      !unsafe_dir ? apx__config_load(&ctx->config, config_path)
      : strncmp(unsafe_dir, "out of memory", 13) == 0
          ? apx__error(APX_ERR_NO_MEMORY, "apx_open: %s", unsafe_dir)
          : apx__error(APX_ERR_CONFIG, "%s: refused: %s (other users could replace it)",
                       cfg_path, unsafe_dir);
  if (st != APX_OK) {
    /* keep the message: freeing does not touch the thread's error */
    apx__config_free(&ctx->config);
    pthread_cond_destroy(&ctx->ff_idle);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
    return st;
  }
  if (ctx->config.warnings[0]) {
    /* one log line per warning */
    char *copy = apx__strdup(ctx->config.warnings);
    for (char *save = NULL, *line = copy ? strtok_r(copy, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save))
      apx__log(ctx, APX_LOG_WARN, "%s", line);
    free(copy);
  }
  const char *bad_level = apx__log_env_unknown();
  if (bad_level)
    apx__log(ctx, APX_LOG_WARN,
             "APEXX_LOG = [%s] is not a level (off, error, warn, info, debug); using warn",
             bad_level);
  ctx->backend_count = ctx->config.backend_count;
  for (int i = 0; i < ctx->backend_count; i++) {
    apx__backend *b = &ctx->backends[i];
    b->config = &ctx->config.backends[i];
    apx_status load_status = apx__backend_load(ctx, b);
    if (load_status != APX_OK) {
      /* a bad value of a declared key (or no memory): the whole open fails */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", apx_last_error());
      ctx->backend_count = i + 1;
      apx_close(ctx);
      return apx__error(load_status, "%s", msg);
    }
    /* a module that is there but cannot be used is a warning; one that is
     * switched off, not installed or has no device here is expected */
    apx_log_level level = APX_LOG_WARN;
    if (b->state == APX_BACKEND_DISABLED) level = APX_LOG_DEBUG;
    if (b->state == APX_BACKEND_NOT_FOUND || b->state == APX_BACKEND_UNAVAILABLE)
      level = APX_LOG_INFO;
    if (b->state != APX_BACKEND_OK)
      apx__log(ctx, level, "backend %s: %s: %s", b->config->name,
               apx_backend_state_name(b->state), b->reason);
  }
  for (int i = 0; i < ctx->backend_count; i++) {
    apx__backend *b = &ctx->backends[i];
    if (b->config->enabled == APX__ENABLED_YES && b->state != APX_BACKEND_OK) {
      char msg[900];
      snprintf(msg, sizeof msg, "backend %s has enabled = yes but is %s: %s",
               b->config->name, apx_backend_state_name(b->state), b->reason);
      apx_close(ctx);
      return apx__error(APX_ERR_BACKEND, "%s", msg);
    }
  }
  apx__clear_error();
  *out = ctx;
  return APX_OK;
}

APX_API void apx_close(apx_context *ctx) {
  if (!ctx) return;
  apx__ff_close_all(ctx); /* handles the caller left open, with their caches */
  apx__graph_close_all(ctx); /* graphs likewise, before their backends go */
  for (int i = ctx->backend_count - 1; i >= 0; i--) {
    apx__backend_unload(&ctx->backends[i]);
    free(ctx->backends[i].path);
  }
  for (int i = 0; i < ctx->interned_count; i++) free(ctx->interned[i]);
  free(ctx->interned);
  apx__config_free(&ctx->config);
  pthread_cond_destroy(&ctx->ff_idle);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
}

APX_API const char *apx_config_warnings(const apx_context *ctx) {
  return ctx ? ctx->config.warnings : "";
}

APX_API const char *apx_config_source(const apx_context *ctx) {
  return ctx ? ctx->config.source : "";
}

APX_API const char *apx_config_overrides(const apx_context *ctx) {
  return ctx ? ctx->config.overrides : "";
}

APX_API int apx_backend_count(const apx_context *ctx) {
  return ctx ? ctx->backend_count : 0;
}

APX_API apx_status apx_backend_info(const apx_context *ctx, int i,
                                    struct apx_backend_info *info) {
  apx__clear_error();
  if (!ctx || !info) return apx__error(APX_ERR_INVALID_ARG, "apx_backend_info: NULL argument");
  if (i < 0 || i >= ctx->backend_count)
    return apx__error(APX_ERR_INVALID_ARG, "apx_backend_info: i = [%d] is outside [0, %d]", i,
                      ctx->backend_count - 1);
  const apx__backend *b = &ctx->backends[i];
  info->name = b->config->name;
  info->library = b->path ? b->path : "";
  info->version = b->table && b->table->version ? b->table->version : "";
  info->device = b->table ? b->table->device : APX_DEVICE_HOST;
  info->device_name = b->device_desc;
  info->state = b->state;
  info->reason = b->reason;
  return APX_OK;
}
