/* SPDX-License-Identifier: Apache-2.0 */
/* Backend configuration keys: each backend declares the keys of its
 * [backend NAME] section (apx_backend_table.keys); the core checks the
 * section against the declaration when the module's table loads, resolves
 * each key (environment variable, file, declared default), hands the
 * backend typed values through its services, and lists every key with its
 * source for apexx-info --keys (apx_config_key). The core's own keys are
 * described here too. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* ---- the core's own keys ---- */
typedef struct core_key {
  const char *section; /* "apexx", or "backend" for every [backend NAME] */
  const char *name;
  const char *type;
  const char *range;
  const char *default_value;
  const char *help;
  const char *env;
} core_key;

static const core_key core_keys[] = {
    {"apexx", "backend_dir", "path", "", APEXX_BACKEND_DIR,
     "directory of the backend modules (relative: from the configuration's directory); "
     "relative library names resolve here",
     "APEXX_BACKEND_DIR"},
    {"apexx", "order", "list", "configured backend names", NULL,
     "dispatch order of every op (then the backends it leaves out)", NULL},
    {"apexx", "validate", "enum", "device, eager, off", "device",
     "where index arguments are checked (docs/ops.md, Validation modes)", NULL},
    {"apexx", "trusted_owner_uids", "list", "user ids", NULL,
     "owners besides root and you whose configs and libraries are trusted (root-owned "
     "config only)",
     NULL},
    {"backend", "library", "path", "", NULL,
     "the backend's module: absolute, or a name in backend_dir", NULL},
    {"backend", "enabled", "enum", "auto, yes, no", "auto",
     "no: not loaded; yes: apx_open fails unless it is ok", NULL},
    {"backend", "device", "int", "[0, 1024]", "0",
     "device ordinal of a device backend's own work", NULL},
};
#define CORE_KEY_COUNT ((int)(sizeof core_keys / sizeof core_keys[0]))

/* The variables the core reads that set no key. */
static const apx_backend_env core_env[] = {
    {"APEXX_CONFIG", "the configuration file (after apx_open's own argument)"},
    {"APEXX_BACKEND", "a backend every call is forced to (a call's own backend wins)"},
    {"APEXX_LOG", "log level: off, error, warn, info, debug (default warn)"},
    {"APEXX_TRUSTED_DIRS", "colon-separated directories whose files other non-root owners "
                           "may own and any group may write"},
};
#define CORE_ENV_COUNT ((int)(sizeof core_env / sizeof core_env[0]))

static const char *const key_type_names[] = {"string", "path", "int", "bool"};

static const char *type_name(apx_key_type t) {
  return (unsigned)t < sizeof key_type_names / sizeof key_type_names[0] ? key_type_names[t]
                                                                        : "string";
}

/* A bool's text: 1 or 0, -1 when it is none of the words. */
static int parse_bool(const char *v) {
  static const char *const yes[] = {"yes", "true", "on", "1"};
  static const char *const no[] = {"no", "false", "off", "0"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp(v, yes[i]) == 0) return 1;
    if (strcasecmp(v, no[i]) == 0) return 0;
  }
  return -1;
}

/* Check text against decl into kv; 0, or -1 with the reason in why. */
static int parse_value(const apx_backend_key *decl, const char *text, apx__key_value *kv,
                       char *why, size_t why_size) {
  switch (decl->type) {
  case APX_KEY_INT: {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < decl->min || v > decl->max) {
      snprintf(why, why_size, "is not an integer in [%lld, %lld]", (long long)decl->min,
               (long long)decl->max);
      return -1;
    }
    kv->ival = (int64_t)v;
    return 0;
  }
  case APX_KEY_BOOL: {
    int b = parse_bool(text);
    if (b < 0) {
      snprintf(why, why_size, "is not one of yes, no, true, false, on, off, 1, 0");
      return -1;
    }
    kv->bval = b;
    return 0;
  }
  default:
    return 0;
  }
}

static const apx__config_entry *find_entry(const apx__config *cfg, const char *section,
                                           const char *key) {
  for (int i = 0; i < cfg->entry_count; i++)
    if (strcmp(cfg->entries[i].section, section) == 0 && strcmp(cfg->entries[i].key, key) == 0)
      return &cfg->entries[i];
  return NULL;
}

static int is_core_backend_key(const char *key) {
  for (int i = 0; i < CORE_KEY_COUNT; i++)
    if (strcmp(core_keys[i].section, "backend") == 0 && strcmp(core_keys[i].name, key) == 0)
      return 1;
  return 0;
}

void apx__backend_keys_free(apx__backend *b) {
  for (int i = 0; i < b->key_count; i++) free(b->keys[i].value);
  free(b->keys);
  b->keys = NULL;
  b->key_count = 0;
}

/* The declared keys and variables of a table whose size covers them. */
static void declared(const apx_backend_table *t, const apx_backend_key **keys, int *count,
                     const apx_backend_env **env, int *env_count) {
  *keys = NULL;
  *count = 0;
  *env = NULL;
  *env_count = 0;
  if (t->size >= offsetof(apx_backend_table, key_count) + sizeof t->key_count && t->keys) {
    *keys = t->keys;
    *count = t->key_count > 256 ? 256 : (int)t->key_count;
  }
  if (t->size >= offsetof(apx_backend_table, env_count) + sizeof t->env_count && t->env_vars) {
    *env = t->env_vars;
    *env_count = t->env_count > 256 ? 256 : (int)t->env_count;
  }
}

apx_status apx__backend_keys_check(apx_context *ctx, apx__backend *b) {
  apx__config *cfg = &ctx->config;
  const apx_backend_key *keys;
  const apx_backend_env *env;
  int count, env_count;
  declared(b->table, &keys, &count, &env, &env_count);
  (void)env;
  (void)env_count;
  char section[160];
  snprintf(section, sizeof section, "backend %s", b->config->name);
  const char *file = cfg->source && cfg->source[0] ? cfg->source : "(built-in default)";

  /* keys of the section the backend does not declare: a warning each */
  for (int i = 0; i < cfg->entry_count; i++) {
    const apx__config_entry *e = &cfg->entries[i];
    if (strcmp(e->section, section) != 0 || is_core_backend_key(e->key)) continue;
    int known = 0;
    for (int k = 0; k < count && !known; k++) known = keys[k].name && !strcmp(keys[k].name, e->key);
    if (!known) {
      char line[700];
      snprintf(line, sizeof line, "%s:%d: unknown key [%s] in section [%s] (the %s backend "
               "declares no such key)",
               file, e->line, e->key, section, b->config->name);
      if (!apx__config_warn(cfg, line))
        return apx__error(APX_ERR_NO_MEMORY, "apx_open: out of memory");
      apx__log(ctx, APX_LOG_WARN, "%s", line);
    }
  }

  if (count == 0) return APX_OK;
  apx__key_value *kv = calloc((size_t)count, sizeof *kv);
  if (!kv) return apx__error(APX_ERR_NO_MEMORY, "apx_open: out of memory");
  b->keys = kv;
  b->key_count = count;
  for (int k = 0; k < count; k++) {
    const apx_backend_key *d = &keys[k];
    kv[k].decl = d;
    if (!d->name) continue;
    const char *text = NULL;
    const char *from_env = d->env ? apx__getenv(d->env) : NULL;
    const apx__config_entry *e = find_entry(cfg, section, d->name);
    char where[600];
    if (from_env && *from_env) {
      text = from_env;
      snprintf(kv[k].source, sizeof kv[k].source, "environment (%s)", d->env);
      snprintf(where, sizeof where, "%s = [%s] (for [%s] %s)", d->env, from_env, section,
               d->name);
      if (!apx__config_note_override(cfg, d->env, from_env))
        return apx__error(APX_ERR_NO_MEMORY, "apx_open: out of memory");
    } else if (e && (e->value[0] || (d->type != APX_KEY_STRING && d->type != APX_KEY_PATH))) {
      /* (an empty string or path in the file leaves the key unset) */
      text = e->value;
      snprintf(kv[k].source, sizeof kv[k].source, "%s:%d", file, e->line);
      snprintf(where, sizeof where, "%s:%d: %s = [%s] (in [%s])", file, e->line, d->name,
               e->value, section);
    } else if (d->default_value) {
      text = d->default_value;
      snprintf(kv[k].source, sizeof kv[k].source, "default");
      snprintf(where, sizeof where, "the %s backend's default %s = [%s]", b->config->name,
               d->name, d->default_value);
    } else {
      snprintf(kv[k].source, sizeof kv[k].source, "unset");
      continue;
    }
    char why[200];
    if (parse_value(d, text, &kv[k], why, sizeof why) != 0) {
      /* "file:line: threads = [x] (in [backend cpu]) is not an integer in [0, 4096]" */
      return apx__error(APX_ERR_CONFIG, "%s %s", where, why);
    }
    kv[k].value = apx__strdup(text);
    if (!kv[k].value) return apx__error(APX_ERR_NO_MEMORY, "apx_open: out of memory");
  }
  return APX_OK;
}

static const apx__key_value *lookup(const apx__backend *b, const char *key, apx_key_type type,
                                    int string_like) {
  if (!key) return NULL;
  for (int k = 0; k < b->key_count; k++) {
    const apx__key_value *kv = &b->keys[k];
    if (!kv->decl->name || strcmp(kv->decl->name, key) != 0 || !kv->value) continue;
    if (string_like ? (kv->decl->type == APX_KEY_STRING || kv->decl->type == APX_KEY_PATH)
                    : kv->decl->type == type)
      return kv;
  }
  return NULL;
}

int apx__svc_config_int(void *core, const char *key, int64_t *out) {
  const apx__key_value *kv = lookup(core, key, APX_KEY_INT, 0);
  if (!kv || !out) return 0;
  *out = kv->ival;
  return 1;
}

int apx__svc_config_bool(void *core, const char *key, int *out) {
  const apx__key_value *kv = lookup(core, key, APX_KEY_BOOL, 0);
  if (!kv || !out) return 0;
  *out = kv->bval;
  return 1;
}

int apx__svc_config_string(void *core, const char *key, const char **out) {
  const apx__key_value *kv = lookup(core, key, APX_KEY_STRING, 1);
  if (!kv || !out) return 0;
  *out = kv->value;
  return 1;
}

/* ---- the listing: apx_config_key ---- */

/* The backend sections' keys, in order: for backend i, the core's backend
 * keys, then its declared keys, then its declared environment variables. */
static int backend_rows(const apx__backend *b, int *declared_keys, int *env_vars) {
  const apx_backend_key *keys = NULL;
  const apx_backend_env *env = NULL;
  int count = 0, env_count = 0;
  if (b->table) declared(b->table, &keys, &count, &env, &env_count);
  *declared_keys = count;
  *env_vars = env_count;
  int core_backend = 0;
  for (int i = 0; i < CORE_KEY_COUNT; i++) core_backend += !strcmp(core_keys[i].section, "backend");
  return core_backend + count + env_count;
}

APX_API int apx_config_key_count(const apx_context *ctx) {
  if (!ctx) return 0;
  int n = CORE_ENV_COUNT;
  for (int i = 0; i < CORE_KEY_COUNT; i++) n += !strcmp(core_keys[i].section, "apexx");
  for (int i = 0; i < ctx->backend_count; i++) {
    int d, e;
    n += backend_rows(&ctx->backends[i], &d, &e);
  }
  return n;
}

/* info's source and value for a key found in the file (or not). */
static void file_source(apx_context *ctx, const char *section, const char *key,
                        const char *env, apx_config_key_info *info) {
  const apx__config *cfg = &ctx->config;
  const char *from_env = env ? apx__getenv(env) : NULL;
  const apx__config_entry *e = find_entry(cfg, section, key);
  if (e && !e->value[0]) e = NULL; /* an empty value: unset */
  char buf[700];
  if (from_env && *from_env) {
    info->value = apx__intern(ctx, from_env);
    snprintf(buf, sizeof buf, "environment (%s)", env);
    info->source = apx__intern(ctx, buf);
  } else if (e) {
    info->value = e->value;
    snprintf(buf, sizeof buf, "%s:%d", cfg->source && cfg->source[0] ? cfg->source : "(built-in default)", e->line);
    info->source = apx__intern(ctx, buf);
  } else if (info->default_value) {
    info->value = info->default_value;
    info->source = "default";
  } else {
    info->value = NULL;
    info->source = "unset";
  }
}

/* info of one of the core's keys in `section`, with its value and source. */
static void core_key_info(apx_context *ctx, const core_key *ck, const char *section,
                          apx_config_key_info *info) {
  info->key = ck->name;
  info->type = ck->type;
  info->range = ck->range;
  info->default_value = ck->default_value;
  info->help = ck->help;
  info->env = ck->env;
  info->owner = "core";
  file_source(ctx, section, ck->name, ck->env, info);
}

APX_API apx_status apx_config_key(apx_context *ctx, int i, apx_config_key_info *info) {
  apx__clear_error();
  if (!ctx || !info) return apx__error(APX_ERR_INVALID_ARG, "apx_config_key: NULL argument");
  int total = apx_config_key_count(ctx);
  if (i < 0 || i >= total)
    return apx__error(APX_ERR_INVALID_ARG, "apx_config_key: i = [%d] is outside [0, %d]", i,
                      total - 1);
  memset(info, 0, sizeof *info);
  int k = i;
  for (int c = 0; c < CORE_KEY_COUNT; c++) {
    if (strcmp(core_keys[c].section, "apexx") != 0) continue;
    if (k-- > 0) continue;
    const core_key *ck = &core_keys[c];
    info->section = "apexx";
    core_key_info(ctx, ck, "apexx", info);
    if (strcmp(ck->name, "backend_dir") == 0 && ctx->config.backend_dir)
      info->value = ctx->config.backend_dir;
    return APX_OK;
  }
  if (k < CORE_ENV_COUNT) {
    const apx_backend_env *v = &core_env[k];
    info->section = "apexx";
    info->owner = "core";
    info->type = "environment";
    info->range = "";
    info->help = v->help;
    info->env = v->name;
    const char *value = apx__getenv(v->name);
    info->value = value ? apx__intern(ctx, value) : NULL;
    info->source = value ? "environment" : "unset";
    return APX_OK;
  }
  k -= CORE_ENV_COUNT;
  for (int bi = 0; bi < ctx->backend_count; bi++) {
    const apx__backend *b = &ctx->backends[bi];
    int count, env_count;
    int rows = backend_rows(b, &count, &env_count);
    if (k >= rows) {
      k -= rows;
      continue;
    }
    char section[160];
    snprintf(section, sizeof section, "backend %s", b->config->name);
    info->section = apx__intern(ctx, section);
    for (int c = 0; c < CORE_KEY_COUNT; c++) {
      if (strcmp(core_keys[c].section, "backend") != 0) continue;
      if (k-- > 0) continue;
      core_key_info(ctx, &core_keys[c], section, info);
      return APX_OK;
    }
    const apx_backend_key *keys = NULL;
    const apx_backend_env *env = NULL;
    count = env_count = 0;
    if (b->table) declared(b->table, &keys, &count, &env, &env_count);
    info->owner = b->config->name;
    if (k < count) {
      const apx_backend_key *d = &keys[k];
      char range[96] = "";
      if (d->type == APX_KEY_INT)
        snprintf(range, sizeof range, "[%lld, %lld]", (long long)d->min, (long long)d->max);
      if (d->type == APX_KEY_BOOL) snprintf(range, sizeof range, "yes, no");
      info->key = d->name ? d->name : "";
      info->type = type_name(d->type);
      info->range = apx__intern(ctx, range);
      info->default_value = d->default_value;
      info->help = d->help ? d->help : "";
      info->env = d->env;
      file_source(ctx, section, info->key, d->env, info);
      return APX_OK;
    }
    k -= count;
    if (!env || k >= env_count) break;
    const apx_backend_env *v = &env[k];
    info->key = NULL; /* a variable the backend reads itself */
    info->type = "environment";
    info->range = "";
    info->help = v->help ? v->help : "";
    info->env = v->name;
    const char *value = v->name ? apx__getenv(v->name) : NULL;
    info->value = value ? apx__intern(ctx, value) : NULL;
    info->source = value ? "environment" : "unset";
    return APX_OK;
  }
  return apx__error(APX_ERR_INVALID_ARG, "apx_config_key: i = [%d] is outside [0, %d]", i,
                    total - 1);
}
