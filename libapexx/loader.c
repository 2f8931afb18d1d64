/* SPDX-License-Identifier: Apache-2.0 */
/* Loader: dlopen only the configured backends and check their table before
 * use (docs/architecture.md, Plugin ABI). Every backend ends in a state with a
 * reason; none of these failures is fatal to the others. */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff/ff_internal.h"
#include "internal.h"

static void set_state(apx__backend *b, apx_backend_state state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_state(apx__backend *b, apx_backend_state state, const char *fmt, ...) {
  b->state = state;
  char raw[4 * sizeof b->reason];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  apx__printable(b->reason, sizeof b->reason, raw); /* paths, dlerror text */
}

/* ---- the services handed to a backend ---- */
static const char *svc_config_get(void *core, const char *section, const char *key) {
  apx__backend *b = core;
  return apx__config_get(&b->ctx->config, section, key);
}

static void svc_log(void *core, apx_log_level level, const char *fmt, ...) {
  apx__backend *b = core;
  va_list ap;
  va_start(ap, fmt);
  apx__vlog(b->ctx, level, b->config->name, fmt, ap);
  va_end(ap);
}

static apx_status svc_set_error(apx_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  apx__verror(status, fmt, ap);
  va_end(ap);
  return status;
}

/* path as the backend gives it (its declared path key's value: absolute, or
 * relative to the working directory), opened once and checked (trust.c):
 * never through the dynamic linker's search path. */
static void *svc_open_library(void *core, const char *path, int flags, char *reason,
                              size_t reason_size) {
  apx__backend *b = core;
  int not_found;
  if (!path || !reason || reason_size == 0) return NULL;
  return apx__dlopen_checked(path, flags,
                             apx__config_get(&b->ctx->config, "apexx", "trusted_owner_uids"),
                             &not_found, reason, reason_size);
}

/* object is one the call holds (an apx_ff_weights handle the op pinned):
 * its apx__object is its first member (libapexx/cache.c). */
static apx_status svc_cache(void *core, const void *object, uint64_t key,
                            apx_status (*make)(void *state, const void *content, uint64_t key,
                                               void **prepared),
                            void (*release)(void *state, uint64_t key, void *prepared),
                            void *state, void **prepared) {
  return apx__object_cache((apx__object *)(uintptr_t)object, core, key, make, release, state,
                           prepared);
}

APX_API apx_status apx_library_open(apx_context *ctx, const char *path, void **handle) {
  apx__clear_error();
  if (handle) *handle = NULL;
  if (!ctx || !path || !handle)
    return apx__error(APX_ERR_INVALID_ARG, "apx_library_open: %s = [NULL]",
                      !ctx ? "ctx" : !path ? "path" : "handle");
  char reason[600];
  int not_found;
  *handle = apx__dlopen_checked(path, RTLD_NOW | RTLD_LOCAL,
                                apx__config_get(&ctx->config, "apexx", "trusted_owner_uids"),
                                &not_found, reason, sizeof reason);
  if (!*handle) return apx__error(APX_ERR_IO, "apx_library_open: [%s]: %s", path, reason);
  return APX_OK;
}

static char *resolve_path(const apx__config *cfg, const char *library) {
  if (!apx__library_name_ok(library)) return NULL;
  if (library[0] == '/') return apx__strdup(library);
  return apx__strdupf("%s/%s", cfg->backend_dir, library);
}

apx_status apx__backend_load(apx_context *ctx, apx__backend *b) {
  apx__backend_config *bc = b->config;
  b->ctx = ctx;
  b->path = resolve_path(&ctx->config, bc->library);
  if (!b->path) {
    set_state(b, APX_BACKEND_LOAD_FAILED,
              apx__library_name_ok(bc->library)
                  ? "out of memory resolving library [%s]"
                  : "library = [%s] has a \"..\" component (names resolve in backend_dir)",
              bc->library);
    return APX_OK;
  }
  if (bc->enabled == APX__ENABLED_NO) {
    set_state(b, APX_BACKEND_DISABLED, "disabled in the configuration (enabled = no)");
    return APX_OK;
  }
  /* RTLD_NODELETE: apx_close must not unmap code that is still running
   * elsewhere (idle OpenMP worker threads of the cpu kernels, a static CUDA
   * runtime's helper threads); a later apx_open reuses the mapping. */
  char why[sizeof b->reason];
  int not_found = 0;
  b->handle = apx__dlopen_checked(b->path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE,
                                  apx__config_get(&ctx->config, "apexx", "trusted_owner_uids"),
                                  &not_found, why, sizeof why);
  if (!b->handle) {
    if (not_found)
      set_state(b, APX_BACKEND_NOT_FOUND, "library %s %s", b->path, why);
    else
      set_state(b, APX_BACKEND_LOAD_FAILED, "%s: %s", b->path, why);
    return APX_OK;
  }
  dlerror();
  void *sym = dlsym(b->handle, APX_BACKEND_ENTRY_SYMBOL);
  const char *sym_err = dlerror();
  if (!sym || sym_err) {
    set_state(b, APX_BACKEND_SYMBOL_MISSING, "%s does not export %s (%s)", b->path,
              APX_BACKEND_ENTRY_SYMBOL, sym_err ? sym_err : "NULL symbol");
    apx__backend_unload(b);
    return APX_OK;
  }
  apx_backend_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry);
  const apx_backend_table *t = entry();
  if (!t) {
    set_state(b, APX_BACKEND_SYMBOL_MISSING, "%s returned no table", APX_BACKEND_ENTRY_SYMBOL);
    apx__backend_unload(b);
    return APX_OK;
  }
  /* ABI version and size first: nothing else in the table is trusted yet. */
  if (t->abi_version != APX_BACKEND_ABI_VERSION) {
    set_state(b, APX_BACKEND_ABI_MISMATCH,
              "ABI version [%u], core expects [%u]%s", (unsigned)t->abi_version,
              (unsigned)APX_BACKEND_ABI_VERSION,
              t->abi_version < APX_BACKEND_ABI_VERSION
                  ? " (built against an older include/apexx/backend.h: rebuild it against this "
                    "one; version 2 moved the op slots into apx_backend_ops)"
                  : "");
    apx__backend_unload(b);
    return APX_OK;
  }
  if (t->size < APX_BACKEND_TABLE_MIN_SIZE) {
    set_state(b, APX_BACKEND_ABI_MISMATCH, "table size [%u] is below the minimum [%u]",
              (unsigned)t->size, (unsigned)APX_BACKEND_TABLE_MIN_SIZE);
    apx__backend_unload(b);
    return APX_OK;
  }
  if (!t->name || strcmp(t->name, bc->name) != 0) {
    set_state(b, APX_BACKEND_NAME_MISMATCH, "library calls itself [%s], configured as [%s]",
              t->name ? t->name : "(null)", bc->name);
    apx__backend_unload(b);
    return APX_OK;
  }
  if (!t->probe || !t->init) {
    set_state(b, APX_BACKEND_SYMBOL_MISSING, "table lacks %s", !t->probe ? "probe" : "init");
    apx__backend_unload(b);
    return APX_OK;
  }
  const apx_backend_ops *ops = t->size >= offsetof(apx_backend_table, ops) + sizeof t->ops ? t->ops : NULL;
  if (ops && ops->size < sizeof ops->size) {
    set_state(b, APX_BACKEND_ABI_MISMATCH, "op table size [%u] is below [%u]",
              (unsigned)ops->size, (unsigned)sizeof ops->size);
    apx__backend_unload(b);
    return APX_OK;
  }
  if (ops && ops->size > sizeof *ops)
    apx__log(ctx, APX_LOG_INFO,
             "backend %s: its op table has [%u] bytes, this core knows [%u]: the ops past "
             "them are newer than this core and are not used",
             bc->name, (unsigned)ops->size, (unsigned)sizeof *ops);
  b->table = t;
  /* its section against the keys it declares: a bad value fails apx_open */
  apx_status key_status = apx__backend_keys_check(ctx, b);
  if (key_status != APX_OK) {
    set_state(b, APX_BACKEND_INIT_FAILED, "%s", apx_last_error());
    return key_status;
  }
  char reason[512] = "";
  b->device_desc[0] = '\0';
  if (!t->probe(reason, sizeof reason, b->device_desc, sizeof b->device_desc)) {
    reason[sizeof reason - 1] = '\0';
    set_state(b, APX_BACKEND_UNAVAILABLE, "%s", reason[0] ? reason : "probe failed (no reason given)");
    b->device_desc[0] = '\0';
    return APX_OK; /* stays loaded so apexx-info can show its version */
  }
  b->device_desc[sizeof b->device_desc - 1] = '\0';
  b->services.size = sizeof b->services;
  b->services.core = b;
  b->services.config_get = svc_config_get;
  b->services.log = svc_log;
  b->services.set_error = svc_set_error;
  b->services.validate_mode = ctx->config.validate;
  b->services.open_library = svc_open_library;
  b->services.config_int = apx__svc_config_int;
  b->services.config_bool = apx__svc_config_bool;
  b->services.config_string = apx__svc_config_string;
  b->services.device_index = bc->device_index;
  b->services.cache = svc_cache;
  apx__clear_error();
  apx_status st = t->init(&b->services, &b->state_ptr);
  if (st != APX_OK) {
    const char *msg = apx_last_error();
    set_state(b, APX_BACKEND_INIT_FAILED, "init failed: %s: %s", apx_status_name(st),
              msg[0] ? msg : "(no message)");
    b->state_ptr = NULL;
    apx__clear_error();
    return APX_OK;
  }
  set_state(b, APX_BACKEND_OK, "%s", "");
  return APX_OK;
}

void apx__backend_unload(apx__backend *b) {
  if (b->table && b->state == APX_BACKEND_OK) apx__ff_release_backend(b);
  if (b->table && b->state == APX_BACKEND_OK && b->table->fini) b->table->fini(b->state_ptr);
  b->state_ptr = NULL;
  b->table = NULL;
  apx__backend_keys_free(b);
  if (b->handle) dlclose(b->handle);
  b->handle = NULL;
}

apx__backend *apx__backend_find(apx_context *ctx, const char *name) {
  for (int i = 0; i < ctx->backend_count; i++)
    if (strcmp(ctx->backends[i].config->name, name) == 0) return &ctx->backends[i];
  return NULL;
}

/* The backend's op table, NULL when it has none (or its table is too small
 * to hold the pointer). */
static const apx_backend_ops *ops_of(const apx_backend_table *t) {
  return t && t->size >= offsetof(apx_backend_table, ops) + sizeof t->ops ? t->ops : NULL;
}

int apx__backend_has_op(const apx__backend *b, apx_op_id op) {
  const apx_backend_ops *ops = ops_of(b->table);
  if (!ops) return 0;
  switch (op) {
#define HAS_OP_(upper, lower)                                                  \
  case APX_OP_##upper:                                                         \
    return ops->size >= offsetof(apx_backend_ops, lower) + sizeof ops->lower && \
           ops->lower != NULL;
    APX_OP_MAP(HAS_OP_)
#undef HAS_OP_
  default:
    return 0;
  }
}

const char *apx__backend_lacks_op(const apx__backend *b, apx_op_id op, char *buf, size_t size) {
  const apx_backend_ops *ops = ops_of(b->table);
  size_t end = 0;
  switch (op) {
#define END_OF_(upper, lower)                                                  \
  case APX_OP_##upper:                                                         \
    end = offsetof(apx_backend_ops, lower) + sizeof ops->lower;                \
    break;
    APX_OP_MAP(END_OF_)
#undef END_OF_
  default:
    break;
  }
  if (!ops)
    snprintf(buf, size, "%s has no op table", b->config->name);
  else if (ops->size < end)
    snprintf(buf, size,
             "%s's op table ([%u] bytes) ends before %s (built against an older "
             "include/apexx/backend.h)",
             b->config->name, (unsigned)ops->size, apx_op_name(op));
  else
    snprintf(buf, size, "%s does not implement %s", b->config->name, apx_op_name(op));
  return buf;
}

apx__backend *apx__backend_for_device(apx_context *ctx, apx_device device) {
  for (int i = 0; i < ctx->backend_count; i++) {
    apx__backend *b = &ctx->backends[i];
    if (b->state == APX_BACKEND_OK && b->table->device == device && b->table->alloc &&
        b->table->free && b->table->copy)
      return b;
  }
  char reasons[1024] = "";
  size_t len = 0;
  for (int i = 0; i < ctx->backend_count && len < sizeof reasons; i++) {
    apx__backend *b = &ctx->backends[i];
    int n = snprintf(reasons + len, sizeof reasons - len, "; %s: %s%s%s", b->config->name,
                     apx_backend_state_name(b->state), b->reason[0] ? ": " : "", b->reason);
    if (n > 0) len += (size_t)n;
  }
  apx__error(APX_ERR_UNSUPPORTED, "no loaded backend serves %s memory%s",
             apx_device_name(device) ? apx_device_name(device) : "unknown", reasons);
  return NULL;
}
