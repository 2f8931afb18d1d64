/* Configuration: the INI file (inih), its lookup order, the built-in
 * default and the APEXX_* environment overrides (DESIGN.md,
 * "Configuration"). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#ifndef APEXX_BACKEND_DIR
#define APEXX_BACKEND_DIR "/usr/local/lib/apexx"
#endif
#ifndef APEXX_SYSCONF_INI
#define APEXX_SYSCONF_INI "/usr/local/etc/apexx/apexx.ini"
#endif

typedef struct parse_state {
  apx__config *cfg;
  const char *file;
  FILE *fp;
  int line;       /* lines read so far = the line the handler is called for */
  char error[512]; /* first semantic error, with its line */
  int error_line;
  char *warnings;
  size_t warnings_len;
} parse_state;

static void append_line(char **buf, size_t *len, const char *line) {
  size_t n = strlen(line);
  char *grown = realloc(*buf, *len + n + 2);
  if (!grown) return;
  memcpy(grown + *len, line, n);
  grown[*len + n] = '\n';
  grown[*len + n + 1] = '\0';
  *buf = grown;
  *len += n + 1;
}

static void warn_at(parse_state *ps, const char *fmt, const char *a, const char *b) {
  char msg[600], line[700];
  snprintf(msg, sizeof msg, fmt, a, b);
  snprintf(line, sizeof line, "%s:%d: %s", ps->file, ps->line, msg);
  append_line(&ps->warnings, &ps->warnings_len, line);
}

static int fail_at(parse_state *ps, const char *fmt, const char *a, const char *b) {
  if (!ps->error[0]) {
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a, b);
    snprintf(ps->error, sizeof ps->error, "%s:%d: %s", ps->file, ps->line, msg);
    ps->error_line = ps->line;
  }
  return 0;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

static apx__backend_config *backend_config(apx__config *cfg, const char *name,
                                           int create) {
  for (int i = 0; i < cfg->backend_count; i++)
    if (strcmp(cfg->backends[i].name, name) == 0) return &cfg->backends[i];
  if (!create || cfg->backend_count >= APX_MAX_BACKENDS) return NULL;
  apx__backend_config *b = &cfg->backends[cfg->backend_count++];
  memset(b, 0, sizeof *b);
  b->name = apx__strdup(name);
  b->library = apx__strdupf("apexx-%s.so", name);
  b->enabled = APX__ENABLED_AUTO;
  return b;
}

static void add_entry(apx__config *cfg, const char *section, const char *key,
                      const char *value, int line) {
  /* later entries win: replace an existing one */
  for (int i = 0; i < cfg->entry_count; i++) {
    apx__config_entry *e = &cfg->entries[i];
    if (strcmp(e->section, section) == 0 && strcmp(e->key, key) == 0) {
      free(e->value);
      e->value = apx__strdup(value);
      e->line = line;
      return;
    }
  }
  apx__config_entry *grown =
      realloc(cfg->entries, sizeof *grown * (size_t)(cfg->entry_count + 1));
  if (!grown) return;
  cfg->entries = grown;
  apx__config_entry *e = &cfg->entries[cfg->entry_count++];
  e->section = apx__strdup(section);
  e->key = apx__strdup(key);
  e->value = apx__strdup(value);
  e->line = line;
}

/* Split "a, b ,c" into names; returns the count or -1 on a bad name. */
static int parse_list(const char *value, char **out, int max, char *bad, size_t bad_size) {
  char *copy = apx__strdup(value);
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    char *name = trim(tok);
    if (!*name) continue;
    if (n >= max) {
      apx__strlcpy(bad, name, bad_size);
      for (int i = 0; i < n; i++) free(out[i]);
      free(copy);
      return -1;
    }
    out[n++] = apx__strdup(name);
  }
  free(copy);
  return n;
}

static void free_list(char **list, int *count) {
  for (int i = 0; i < *count; i++) free(list[i]);
  *count = 0;
}

static int handle_apexx_key(parse_state *ps, const char *key, const char *value) {
  apx__config *cfg = ps->cfg;
  if (strcmp(key, "backend_dir") == 0) {
    free(cfg->backend_dir);
    cfg->backend_dir = apx__strdup(value);
  } else if (strcmp(key, "order") == 0) {
    char bad[128];
    free_list(cfg->order, &cfg->order_count);
    int n = parse_list(value, cfg->order, APX_MAX_BACKENDS, bad, sizeof bad);
    if (n < 0) return fail_at(ps, "order lists more than 16 backends, at [%s]%s", bad, "");
    cfg->order_count = n;
  } else if (strcmp(key, "trusted_owner_uids") == 0) {
    /* kept as an entry; honoured for the backend libraries only when the
     * file itself is owned by root (apx__config_load checks) */
  } else if (strcmp(key, "validate") == 0) {
    if (strcmp(value, "device") == 0)
      cfg->validate = APX_VALIDATE_DEVICE;
    else if (strcmp(value, "eager") == 0)
      cfg->validate = APX_VALIDATE_EAGER;
    else if (strcmp(value, "off") == 0)
      cfg->validate = APX_VALIDATE_OFF;
    else
      return fail_at(ps, "validate = [%s] is not one of device, eager, off%s", value, "");
  } else {
    warn_at(ps, "unknown key [%s] in section [apexx]%s", key, "");
  }
  return 1;
}

static int handle_backend_key(parse_state *ps, const char *name, const char *key,
                              const char *value) {
  apx__backend_config *b = backend_config(ps->cfg, name, 1);
  if (!b) return fail_at(ps, "too many backends (at most 16), at [backend %s]%s", name, "");
  if (strcmp(key, "library") == 0) {
    if (!*value) return fail_at(ps, "library of [backend %s] is empty%s", name, "");
    free(b->library);
    b->library = apx__strdup(value);
  } else if (strcmp(key, "enabled") == 0) {
    if (strcmp(value, "auto") == 0)
      b->enabled = APX__ENABLED_AUTO;
    else if (strcmp(value, "yes") == 0)
      b->enabled = APX__ENABLED_YES;
    else if (strcmp(value, "no") == 0)
      b->enabled = APX__ENABLED_NO;
    else
      return fail_at(ps, "enabled = [%s] is not one of auto, yes, no (in [backend %s])",
                     value, name);
  } else if (strcmp(key, "device") == 0) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < 0 || v > 1024)
      return fail_at(ps, "device = [%s] is not a device ordinal (in [backend %s])", value, name);
    b->device_index = (int)v;
  } else if (strcmp(key, "threads") == 0) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < 0 || v > 4096)
      return fail_at(ps, "threads = [%s] is not a count in [0, 4096] (in [backend %s])",
                     value, name);
  } else if (strcmp(key, "plugin_library") != 0) {
    warn_at(ps, "unknown key [%s] in section [backend %s]", key, name);
  }
  return 1;
}

static int handle_op_key(parse_state *ps, const char *op_name, const char *key,
                         const char *value) {
  int op = apx_op_from_name(op_name);
  if (op < 0) {
    warn_at(ps, "unknown op [%s] in section [op %s]", op_name, op_name);
    return 1;
  }
  if (strcmp(key, "order") != 0) {
    warn_at(ps, "unknown key [%s] in section [op %s]", key, op_name);
    return 1;
  }
  char bad[128];
  free_list(ps->cfg->op_order[op], &ps->cfg->op_order_count[op]);
  int n = parse_list(value, ps->cfg->op_order[op], APX_MAX_BACKENDS, bad, sizeof bad);
  if (n < 0) return fail_at(ps, "order lists more than 16 backends, at [%s]%s", bad, "");
  ps->cfg->op_order_count[op] = n;
  return 1;
}

static int ini_handler_fn(void *user, const char *section, const char *key,
                          const char *value) {
  parse_state *ps = user;
  add_entry(ps->cfg, section, key, value, ps->line);
  if (strcmp(section, "apexx") == 0) return handle_apexx_key(ps, key, value);
  if (strncmp(section, "backend ", 8) == 0) {
    char name[128];
    apx__strlcpy(name, section + 8, sizeof name);
    char *n = trim(name);
    if (!*n) return fail_at(ps, "section [%s] names no backend%s", section, "");
    return handle_backend_key(ps, n, key, value);
  }
  if (strncmp(section, "op ", 3) == 0) {
    char name[128];
    apx__strlcpy(name, section + 3, sizeof name);
    return handle_op_key(ps, trim(name), key, value);
  }
  if (!*section) {
    warn_at(ps, "key [%s] outside any section is ignored%s", key, "");
    return 1;
  }
  warn_at(ps, "unknown section [%s] (key [%s] ignored)", section, key);
  return 1;
}

/* inih reads through this so that the handler knows its line number. It
 * also notes "[backend NAME]" headers: inih calls the handler only for
 * keys, and a backend section may have none (every key has a default). */
static char *counting_reader(char *str, int num, void *stream) {
  parse_state *ps = stream;
  char *r = fgets(str, num, ps->fp);
  if (!r) return r;
  ps->line++;
  char header[256];
  apx__strlcpy(header, str, sizeof header);
  char *h = trim(header);
  size_t len = strlen(h);
  if (len > 2 && h[0] == '[' && h[len - 1] == ']') {
    h[len - 1] = '\0';
    char *section = trim(h + 1);
    if (strncmp(section, "backend ", 8) == 0 && *trim(section + 8))
      backend_config(ps->cfg, trim(section + 8), 1);
  }
  return r;
}

/* uid listed in "1001, 1002" (commas or blanks); a malformed item never
 * matches. */
static int uid_listed(const char *list, uid_t uid) {
  for (const char *p = list; p && *p;) {
    while (*p == ',' || isspace((unsigned char)*p)) p++;
    if (!*p) break;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p) return 0;
    if (errno == 0 && (*end == '\0' || *end == ',' || isspace((unsigned char)*end)) &&
        (uid_t)v == uid && v == (unsigned long)(uid_t)v)
      return 1;
    p = end;
    while (*p && *p != ',' && !isspace((unsigned char)*p)) p++;
  }
  return 0;
}

/* path (resolved) lies under a directory of $APEXX_TRUSTED_DIRS (absolute
 * paths separated by ':'; read with secure_getenv). */
static int in_trusted_dir(const char *path) {
  const char *dirs = apx__getenv("APEXX_TRUSTED_DIRS");
  if (!dirs || !*dirs) return 0;
  char *real = realpath(path, NULL);
  if (!real) return 0;
  int found = 0;
  for (const char *p = dirs; *p && !found;) {
    size_t len = strcspn(p, ":");
    char dir[4096];
    if (len > 0 && len < sizeof dir && p[0] == '/') {
      memcpy(dir, p, len);
      dir[len] = '\0';
      char *real_dir = realpath(dir, NULL);
      if (real_dir) {
        size_t dl = strlen(real_dir);
        found = strncmp(real, real_dir, dl) == 0 &&
                (real[dl] == '/' || (dl == 1 && real_dir[0] == '/'));
        free(real_dir);
      }
    }
    p += len;
    if (*p == ':') p++;
  }
  free(real);
  return found;
}

const char *apx__unsafe_file_reason_trusting(const char *path, const char *trusted_uids) {
  static __thread char reason[600];
  struct stat st;
  if (stat(path, &st) != 0) return NULL; /* absence is reported elsewhere */
  if (st.st_mode & S_IWOTH) {
    snprintf(reason, sizeof reason, "[%s] is world-writable", path);
    return reason;
  }
  if (st.st_uid != 0 && st.st_uid != geteuid() && !uid_listed(trusted_uids, st.st_uid) &&
      !in_trusted_dir(path)) {
    snprintf(reason, sizeof reason,
             "[%s] is owned by uid [%u], neither root nor the current user (to trust "
             "it, list its directory in APEXX_TRUSTED_DIRS or the uid in [apexx] "
             "trusted_owner_uids of a root-owned configuration)",
             path, (unsigned)st.st_uid);
    return reason;
  }
  return NULL;
}

const char *apx__unsafe_file_reason(const char *path) {
  return apx__unsafe_file_reason_trusting(path, NULL);
}

static void set_builtin_default(apx__config *cfg) {
  static const char *names[] = {"cuda", "trt", "cpu"};
  /* sections in the order of the shipped apexx.ini */
  backend_config(cfg, "cpu", 1);
  backend_config(cfg, "cuda", 1);
  backend_config(cfg, "trt", 1);
  for (int i = 0; i < 3; i++) cfg->order[cfg->order_count++] = apx__strdup(names[i]);
}

static apx_status check_order_names(apx__config *cfg, char **list, int count,
                                    const char *where) {
  for (int i = 0; i < count; i++)
    if (!backend_config(cfg, list[i], 0))
      return apx__error(APX_ERR_CONFIG,
                        "%s: %s names backend [%s], which has no [backend %s] section",
                        cfg->source[0] ? cfg->source : "built-in default", where,
                        list[i], list[i]);
  return APX_OK;
}

static void note_override(apx__config *cfg, size_t *len, const char *name,
                          const char *value) {
  char line[1200];
  snprintf(line, sizeof line, "%s=%s", name, value);
  append_line(&cfg->overrides, len, line);
}

apx_status apx__config_load(apx__config *cfg, const char *path) {
  memset(cfg, 0, sizeof *cfg);
  cfg->validate = APX_VALIDATE_DEVICE;
  size_t overrides_len = 0;
  const char *env_config = apx__getenv("APEXX_CONFIG");
  if (!path && env_config && *env_config) {
    path = env_config;
    note_override(cfg, &overrides_len, "APEXX_CONFIG", env_config);
  }
  int explicit_path = path != NULL;
  if (!path && access(APEXX_SYSCONF_INI, F_OK) == 0) path = APEXX_SYSCONF_INI;

  if (!path) {
    cfg->source = apx__strdup("");
    set_builtin_default(cfg);
  } else {
    cfg->source = apx__strdup(path);
    const char *unsafe = apx__unsafe_file_reason(path);
    if (unsafe)
      return apx__error(APX_ERR_CONFIG, "%s: refused: %s (other users could edit it)",
                        path, unsafe);
    parse_state ps;
    memset(&ps, 0, sizeof ps);
    ps.cfg = cfg;
    ps.file = path;
    ps.fp = fopen(path, "r");
    if (!ps.fp)
      return apx__error(APX_ERR_CONFIG, "%s: cannot open%s: %s", path,
                        explicit_path ? "" : " installed configuration", strerror(errno));
    int rc = ini_parse_stream(counting_reader, &ps, ini_handler_fn, &ps);
    fclose(ps.fp);
    cfg->warnings = ps.warnings;
    if (ps.error[0] && (rc <= 0 || rc >= ps.error_line))
      return apx__error(APX_ERR_CONFIG, "%s", ps.error);
    if (rc > 0)
      return apx__error(APX_ERR_CONFIG, "%s:%d: malformed line (expected [section], "
                        "key = value, or a comment)", path, rc);
    if (rc < 0) return apx__error(APX_ERR_CONFIG, "%s: cannot read", path);
    struct stat cfg_stat;
    if (apx__config_get(cfg, "apexx", "trusted_owner_uids") &&
        (stat(path, &cfg_stat) != 0 || cfg_stat.st_uid != 0))
      return apx__error(APX_ERR_CONFIG,
                        "%s: [apexx] trusted_owner_uids is honoured only in a "
                        "configuration owned by root", path);
    if (cfg->order_count == 0) /* no order key: configuration order */
      for (int i = 0; i < cfg->backend_count; i++)
        cfg->order[cfg->order_count++] = apx__strdup(cfg->backends[i].name);
  }
  if (!cfg->warnings) cfg->warnings = apx__strdup("");

  apx_status st = check_order_names(cfg, cfg->order, cfg->order_count, "[apexx] order");
  for (int op = 0; st == APX_OK && op < APX_OP_COUNT; op++) {
    char where[64];
    snprintf(where, sizeof where, "[op %s] order", apx_op_name((apx_op_id)op));
    st = check_order_names(cfg, cfg->op_order[op], cfg->op_order_count[op], where);
  }
  if (st != APX_OK) return st;

  const char *env_dir = apx__getenv("APEXX_BACKEND_DIR");
  if (env_dir && *env_dir) {
    free(cfg->backend_dir);
    cfg->backend_dir = apx__strdup(env_dir);
    note_override(cfg, &overrides_len, "APEXX_BACKEND_DIR", env_dir);
  }
  if (!cfg->backend_dir) cfg->backend_dir = apx__strdup(APEXX_BACKEND_DIR);

  const char *env_backend = apx__getenv("APEXX_BACKEND");
  if (env_backend && *env_backend) {
    if (!backend_config(cfg, env_backend, 0))
      return apx__error(APX_ERR_CONFIG,
                        "APEXX_BACKEND = [%s] names no configured backend", env_backend);
    cfg->forced_backend = apx__strdup(env_backend);
    note_override(cfg, &overrides_len, "APEXX_BACKEND", env_backend);
  }
  const char *env_plugin = apx__getenv("APEXX_TRT_PLUGIN_LIB");
  if (env_plugin && *env_plugin) note_override(cfg, &overrides_len, "APEXX_TRT_PLUGIN_LIB", env_plugin);
  const char *env_log = apx__getenv("APEXX_LOG");
  if (env_log && *env_log) note_override(cfg, &overrides_len, "APEXX_LOG", env_log);
  if (!cfg->overrides) cfg->overrides = apx__strdup("");
  return APX_OK;
}

const char *apx__config_get(const apx__config *cfg, const char *section,
                            const char *key) {
  if (!section || !key) return NULL;
  if (strcmp(section, "apexx") == 0 && strcmp(key, "backend_dir") == 0)
    return cfg->backend_dir;
  if (strcmp(section, "backend trt") == 0 && strcmp(key, "plugin_library") == 0) {
    const char *env_plugin = apx__getenv("APEXX_TRT_PLUGIN_LIB");
    if (env_plugin && *env_plugin) return env_plugin;
  }
  for (int i = 0; i < cfg->entry_count; i++)
    if (strcmp(cfg->entries[i].section, section) == 0 &&
        strcmp(cfg->entries[i].key, key) == 0)
      return cfg->entries[i].value;
  return NULL;
}

void apx__config_free(apx__config *cfg) {
  free(cfg->source);
  free(cfg->overrides);
  free(cfg->warnings);
  free(cfg->backend_dir);
  free(cfg->forced_backend);
  for (int i = 0; i < cfg->backend_count; i++) {
    free(cfg->backends[i].name);
    free(cfg->backends[i].library);
  }
  free_list(cfg->order, &cfg->order_count);
  for (int op = 0; op < APX_OP_COUNT; op++)
    free_list(cfg->op_order[op], &cfg->op_order_count[op]);
  for (int i = 0; i < cfg->entry_count; i++) {
    free(cfg->entries[i].section);
    free(cfg->entries[i].key);
    free(cfg->entries[i].value);
  }
  free(cfg->entries);
  memset(cfg, 0, sizeof *cfg);
}
