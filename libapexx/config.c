/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration: the INI file (inih), its lookup order, the built-in
 * default and the APEXX_* environment overrides (docs/architecture.md,
 * Configuration lookup; docs/config.md). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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

/* The longest line read at all (a comment may be this long); a line that
 * is not a comment must also fit inih's line buffer. */
#define MAX_LINE 65536
/* The largest configuration read (docs/config.md): parsing keeps every
 * entry, so memory grows with the file (about 20 bytes per byte of short
 * distinct keys). */
#define MAX_CONFIG_BYTES (1024 * 1024)

typedef struct parse_state {
  apx__config *cfg;
  const char *file;
  FILE *fp;
  int line;       /* lines read so far = the line the handler is called for */
  char error[512]; /* first semantic error, with its line */
  int error_line;
  int read_failed;
  char *warnings;
  size_t warnings_len;
  char *buf; /* the line being read */
  size_t buf_size;
  size_t entry_cap;    /* allocated cfg->entries */
  char *dir;           /* the file's directory, resolved: relative backend_dir */
  size_t bytes_read;
  int *slots;          /* (section, key) hash: entry index + 1, 0 = free */
  size_t slot_count;   /* a power of two, or 0 */
  int nomem;           /* an allocation failed: apx__config_load fails */
} parse_state;

/* Note a failed allocation; 0 (the handler's failure) for the caller. */
static int out_of_memory(parse_state *ps) {
  ps->nomem = 1;
  return 0;
}

/* Capacity of a buffer of len bytes grown by append_line: the smallest
 * power of two above len (at least 64), so appending stays linear. */
static size_t text_capacity(size_t len) {
  size_t cap = 64;
  while (cap <= len) cap *= 2;
  return cap;
}

/* Append line (made one printable line: keys, values and names come from
 * the file and the environment) and a newline; 0 when out of memory (the
 * buffer unchanged). */
static int append_line(char **buf, size_t *len, const char *text) {
  char line[1400];
  size_t n = apx__printable(line, sizeof line, text);
  size_t need = *len + n + 2;
  if (!*buf || need > text_capacity(*len)) {
    char *grown = realloc(*buf, text_capacity(need - 1));
    if (!grown) return 0;
    *buf = grown;
  }
  memcpy(*buf + *len, line, n);
  (*buf)[*len + n] = '\n';
  (*buf)[*len + n + 1] = '\0';
  *len += n + 1;
  return 1;
}

static void warn_at(parse_state *ps, const char *fmt, const char *a, const char *b) {
  char msg[600], line[700];
  snprintf(msg, sizeof msg, fmt, a, b);
  snprintf(line, sizeof line, "%s:%d: %s", ps->file, ps->line, msg);
  if (!append_line(&ps->warnings, &ps->warnings_len, line)) out_of_memory(ps);
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
  if (!b->name || !b->library) { /* out of memory: no section made */
    free(b->name);
    free(b->library);
    cfg->backend_count--;
    return NULL;
  }
  b->enabled = APX__ENABLED_AUTO;
  return b;
}

static size_t entry_hash(const char *section, const char *key) {
  size_t h = 1469598103934665603u; /* FNV-1a over "section\0key" */
  for (const char *p = section; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  h = (h ^ 0xffu) * 1099511628211u;
  for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211u;
  return h;
}

/* The slot holding (section, key), or the free slot where it would go. */
static int *entry_slot(parse_state *ps, const char *section, const char *key) {
  size_t mask = ps->slot_count - 1;
  for (size_t i = entry_hash(section, key) & mask;; i = (i + 1) & mask) {
    int *slot = &ps->slots[i];
    if (*slot == 0) return slot;
    const apx__config_entry *e = &ps->cfg->entries[*slot - 1];
    if (strcmp(e->section, section) == 0 && strcmp(e->key, key) == 0) return slot;
  }
}

/* Keep the hash at most half full; 0 when out of memory. */
static int reserve_slots(parse_state *ps, size_t entries) {
  if (ps->slot_count >= 2 * entries + 2) return 1;
  size_t count = ps->slot_count ? ps->slot_count : 64;
  while (count < 2 * entries + 2) count *= 2;
  int *slots = calloc(count, sizeof *slots);
  if (!slots) return 0;
  free(ps->slots);
  ps->slots = slots;
  ps->slot_count = count;
  for (int i = 0; i < ps->cfg->entry_count; i++)
    *entry_slot(ps, ps->cfg->entries[i].section, ps->cfg->entries[i].key) = i + 1;
  return 1;
}

static void add_entry(parse_state *ps, const char *section, const char *key,
                      const char *value, int line) {
  apx__config *cfg = ps->cfg;
  if (!reserve_slots(ps, (size_t)cfg->entry_count + 1)) {
    out_of_memory(ps);
    return;
  }
  int *slot = entry_slot(ps, section, key);
  if (*slot) { /* later entries win: replace the existing one */
    apx__config_entry *e = &cfg->entries[*slot - 1];
    char *copy = apx__strdup(value);
    if (!copy) {
      out_of_memory(ps);
      return;
    }
    free(e->value);
    e->value = copy;
    e->line = line;
    return;
  }
  if ((size_t)cfg->entry_count == ps->entry_cap) {
    size_t cap = ps->entry_cap ? 2 * ps->entry_cap : 16;
    apx__config_entry *grown = realloc(cfg->entries, sizeof *grown * cap);
    if (!grown) {
      out_of_memory(ps);
      return;
    }
    cfg->entries = grown;
    ps->entry_cap = cap;
  }
  apx__config_entry *e = &cfg->entries[cfg->entry_count];
  e->section = apx__strdup(section);
  e->key = apx__strdup(key);
  e->value = apx__strdup(value);
  e->line = line;
  if (!e->section || !e->key || !e->value) {
    free(e->section);
    free(e->key);
    free(e->value);
    out_of_memory(ps);
    return;
  }
  *slot = ++cfg->entry_count;
}

/* Split "a, b ,c" into names; returns the count, -1 on a bad name or -2
 * when out of memory. */
static int parse_list(const char *value, char **out, int max, char *bad, size_t bad_size) {
  char *copy = apx__strdup(value);
  if (!copy) return -2;
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
    out[n] = apx__strdup(name);
    if (!out[n]) {
      for (int i = 0; i < n; i++) free(out[i]);
      free(copy);
      return -2;
    }
    n++;
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
    /* relative to the file's own directory, never the working directory */
    cfg->backend_dir = value[0] && value[0] != '/' && ps->dir
                           ? apx__strdupf("%s/%s", strcmp(ps->dir, "/") ? ps->dir : "", value)
                           : apx__strdup(value);
    if (!cfg->backend_dir) return out_of_memory(ps);
  } else if (strcmp(key, "order") == 0) {
    char bad[128];
    free_list(cfg->order, &cfg->order_count);
    int n = parse_list(value, cfg->order, APX_MAX_BACKENDS, bad, sizeof bad);
    if (n == -2) return out_of_memory(ps);
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
  if (!b && ps->cfg->backend_count < APX_MAX_BACKENDS) return out_of_memory(ps);
  if (!b) return fail_at(ps, "too many backends (at most 16), at [backend %s]%s", name, "");
  if (strcmp(key, "library") == 0) {
    if (!*value) return fail_at(ps, "library of [backend %s] is empty%s", name, "");
    char *copy = apx__strdup(value);
    if (!copy) return out_of_memory(ps);
    free(b->library);
    b->library = copy;
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
  }
  /* any other key belongs to the backend: checked against the keys its
   * table declares when it loads (libapexx/keys.c) */
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
  if (n == -2) return out_of_memory(ps);
  if (n < 0) return fail_at(ps, "order lists more than 16 backends, at [%s]%s", bad, "");
  ps->cfg->op_order_count[op] = n;
  return 1;
}

static int ini_handler_fn(void *user, const char *section, const char *key,
                          const char *value) {
  parse_state *ps = user;
  add_entry(ps, section, key, value, ps->line);
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

/* The file grew past MAX_CONFIG_BYTES after open_config checked its size:
 * -2 for read_line, the error noted. */
static long grew_past_the_cap(parse_state *ps) {
  char limit[32];
  snprintf(limit, sizeof limit, "%d", MAX_CONFIG_BYTES);
  ps->line++;
  fail_at(ps, "the file grew past %s bytes while it was read (the most a configuration may "
          "hold)%s", limit, "");
  return -2;
}

/* One line of the file into ps->buf, without its '\n': its length, or -1
 * at the end of the file, -2 on an error (noted in ps). Reading stops at
 * MAX_LINE bytes, so a huge line costs no more memory than that. */
static long read_line(parse_state *ps) {
  size_t len = 0;
  int c;
  while ((c = getc(ps->fp)) != EOF && c != '\n') {
    if (++ps->bytes_read > MAX_CONFIG_BYTES) return grew_past_the_cap(ps);
    if (len >= MAX_LINE) {
      char limit[32];
      snprintf(limit, sizeof limit, "%d", MAX_LINE);
      ps->line++;
      fail_at(ps, "line longer than %s bytes%s", limit, "");
      return -2;
    }
    if (len + 1 >= ps->buf_size) {
      size_t size = ps->buf_size ? 2 * ps->buf_size : 256;
      char *grown = realloc(ps->buf, size);
      if (!grown) {
        ps->line++;
        out_of_memory(ps);
        return -2;
      }
      ps->buf = grown;
      ps->buf_size = size;
    }
    ps->buf[len++] = (char)c;
  }
  if (c == EOF && ferror(ps->fp)) {
    ps->read_failed = 1;
    return -2;
  }
  if (c == '\n' && ++ps->bytes_read > MAX_CONFIG_BYTES) return grew_past_the_cap(ps);
  if (c == EOF && len == 0) return -1;
  ps->line++;
  if (!ps->buf) return 0; /* an empty line first: nothing allocated yet */
  ps->buf[len] = '\0';
  return (long)len;
}

/* A comment line by inih's rule: after a UTF-8 byte order mark (first line
 * only) and blanks, ';' or '#'. */
static int is_comment(const parse_state *ps, const char *s) {
  if (ps->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
  while (isspace((unsigned char)*s)) s++;
  return *s == ';' || *s == '#';
}

/* inih reads through this: whole lines only, so the tail of a line longer
 * than inih's buffer never becomes a line of its own. A comment of any
 * length (up to MAX_LINE) reaches inih as ";"; any other line must fit
 * inih's buffer (num bytes with its '\n' and '\0'), else it is an error
 * naming that line. The handler learns its line number here. This also
 * notes "[backend NAME]" headers: inih calls the handler only for keys,
 * and a backend section may have none (every key has a default). */
static char *line_reader(char *str, int num, void *stream) {
  parse_state *ps = stream;
  long len = read_line(ps);
  if (len < 0) return NULL;
  const char *line = ps->buf ? ps->buf : "";
  if (is_comment(ps, line)) {
    apx__strlcpy(str, ";\n", (size_t)num);
    return str;
  }
  if (strlen(line) != (size_t)len) {
    fail_at(ps, "line contains a NUL byte%s%s", "", "");
    return NULL;
  }
  if (len + 2 > num) {
    char limit[32];
    snprintf(limit, sizeof limit, "%d", num - 2);
    fail_at(ps, "line longer than %s bytes%s (the most inih takes in a line that is not "
            "a comment)", limit, "");
    return NULL;
  }
  memcpy(str, line, (size_t)len);
  str[len] = '\n';
  str[len + 1] = '\0';
  const char *start = line;
  while (isspace((unsigned char)*start)) start++;
  if (*start == '[') {
    char *header = apx__strdup(start);
    if (!header) {
      out_of_memory(ps);
      return NULL;
    }
    char *h = trim(header);
    size_t hlen = h ? strlen(h) : 0;
    if (hlen > 2 && h[hlen - 1] == ']') {
      h[hlen - 1] = '\0';
      char *section = trim(h + 1);
      const char *name = strncmp(section, "backend ", 8) == 0 ? trim(section + 8) : "";
      for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
          /* it names the module, log lines, apexx-info's rows */
          fail_at(ps, "backend name [%s] has a control byte%s", name, "");
          free(header);
          return NULL;
        }
      if (*name && !backend_config(ps->cfg, name, 1)) {
        if (ps->cfg->backend_count < APX_MAX_BACKENDS)
          out_of_memory(ps);
        else /* a section with no keys is a backend too: never dropped */
          fail_at(ps, "too many backends (at most 16), at [backend %s]%s", name, "");
        free(header);
        return NULL;
      }
    }
    free(header);
  }
  return str;
}

static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  return "not a regular file";
}

static apx_status config_nomem(const char *path) {
  return apx__error(APX_ERR_NO_MEMORY, "apx_open: out of memory reading the configuration [%s]",
                    path ? path : "built-in default");
}

/* Open the configuration once and check the open descriptor: a regular
 * file that other users cannot edit, or a character device (/dev/null),
 * which is an empty configuration and is never read. O_NONBLOCK keeps a
 * FIFO from blocking the open. Returns the stream to parse (NULL for a
 * character device) with *st its status and *dir its directory (resolved,
 * malloc'd), or APX_ERR_CONFIG. */
static apx_status open_config(const char *path, int explicit_path, FILE **out,
                              struct stat *st, char **dir) {
  *out = NULL;
  *dir = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    struct stat lst;
    if (err == ENXIO && stat(path, &lst) == 0 && !S_ISREG(lst.st_mode)) /* a socket */
      return apx__error(APX_ERR_CONFIG, "%s: refused: [%s] is %s, not a regular file",
                        path, path, file_kind(lst.st_mode));
    return apx__error(APX_ERR_CONFIG, "%s: cannot open%s: %s", path,
                      explicit_path ? "" : " installed configuration", strerror(err));
  }
  if (fstat(fd, st) != 0) {
    int err = errno;
    close(fd);
    return apx__error(APX_ERR_CONFIG, "%s: cannot stat: %s", path, strerror(err));
  }
  if (S_ISCHR(st->st_mode)) {
    close(fd);
    return APX_OK;
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    return apx__error(APX_ERR_CONFIG, "%s: refused: [%s] is %s, not a regular file", path,
                      path, file_kind(st->st_mode));
  }
  if (st->st_size > MAX_CONFIG_BYTES) {
    close(fd);
    return apx__error(APX_ERR_CONFIG, "%s: refused: [%lld] bytes, more than a configuration may "
                      "hold [%d]", path, (long long)st->st_size, MAX_CONFIG_BYTES);
  }
  char fd_path[64];
  snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", fd);
  /* without /proc the path itself */
  const char *unsafe =
      apx__unsafe_stat_reason(st, path, access(fd_path, F_OK) == 0 ? fd_path : path, NULL);
  if (unsafe) {
    close(fd);
    return apx__error(APX_ERR_CONFIG, "%s: refused: %s (other users could edit it)", path,
                      unsafe);
  }
  /* the file's directory, as the descriptor resolves (without /proc, as
   * the path does): a relative backend_dir starts there */
  char *real = realpath(access(fd_path, F_OK) == 0 ? fd_path : path, NULL);
  if (!real) {
    int err = errno;
    close(fd);
    if (err == ENOMEM) return config_nomem(path);
    return apx__error(APX_ERR_CONFIG, "%s: cannot resolve its directory: %s", path,
                      strerror(err));
  }
  char *slash = strrchr(real, '/');
  if (slash == real)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  *dir = real;
  int flags = fcntl(fd, F_GETFL);
  FILE *fp = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ? NULL
                                                                       : fdopen(fd, "r");
  if (!fp) {
    int err = errno;
    close(fd);
    free(*dir);
    *dir = NULL;
    if (err == ENOMEM) return config_nomem(path);
    return apx__error(APX_ERR_CONFIG, "%s: cannot open%s: %s", path,
                      explicit_path ? "" : " installed configuration", strerror(err));
  }
  *out = fp;
  return APX_OK;
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

/* 0 when out of memory. */
static int note_override(apx__config *cfg, size_t *len, const char *name,
                         const char *value) {
  char line[1200];
  snprintf(line, sizeof line, "%s=%s", name, value);
  return append_line(&cfg->overrides, len, line);
}

/* Every string a loaded configuration must have was allocated. */
static int config_complete(const apx__config *cfg) {
  if (!cfg->source || !cfg->warnings) return 0;
  for (int i = 0; i < cfg->backend_count; i++)
    if (!cfg->backends[i].name || !cfg->backends[i].library) return 0;
  for (int i = 0; i < cfg->order_count; i++)
    if (!cfg->order[i]) return 0;
  return 1;
}


apx_status apx__config_load(apx__config *cfg, const char *path) {
  memset(cfg, 0, sizeof *cfg);
  cfg->validate = APX_VALIDATE_DEVICE;
  size_t overrides_len = 0;
  int noted = 1; /* every override line was noted */
  const char *env_config = apx__getenv("APEXX_CONFIG");
  if (!path && env_config && *env_config) {
    path = env_config;
    noted &= note_override(cfg, &overrides_len, "APEXX_CONFIG", env_config);
  }
  int explicit_path = path != NULL;
  if (!path && access(APEXX_SYSCONF_INI, F_OK) == 0) path = APEXX_SYSCONF_INI;

  if (!path) {
    cfg->source = apx__strdup("");
    cfg->warnings = apx__strdup("");
    set_builtin_default(cfg);
    if (!config_complete(cfg) || cfg->backend_count != 3) return config_nomem(path);
  } else {
    cfg->source = apx__strdup(path);
    if (!cfg->source) return config_nomem(path);
    parse_state ps;
    memset(&ps, 0, sizeof ps);
    ps.cfg = cfg;
    ps.file = path;
    struct stat cfg_stat;
    apx_status opened = open_config(path, explicit_path, &ps.fp, &cfg_stat, &ps.dir);
    if (opened != APX_OK) return opened;
    int rc = 0;
    if (ps.fp) {
      rc = ini_parse_stream(line_reader, &ps, ini_handler_fn, &ps);
      fclose(ps.fp);
    }
    free(ps.buf);
    free(ps.slots);
    free(ps.dir);
    cfg->warnings = ps.warnings;
    if (ps.nomem || rc == -2) return config_nomem(path); /* inih's -2: its own allocation */
    if (ps.error[0] && (rc <= 0 || rc >= ps.error_line))
      return apx__error(APX_ERR_CONFIG, "%s", ps.error);
    if (rc > 0)
      return apx__error(APX_ERR_CONFIG, "%s:%d: malformed line (expected [section], "
                        "key = value, or a comment)", path, rc);
    if (rc < 0 || ps.read_failed) return apx__error(APX_ERR_CONFIG, "%s: cannot read", path);
    if (apx__config_get(cfg, "apexx", "trusted_owner_uids") && cfg_stat.st_uid != 0)
      return apx__error(APX_ERR_CONFIG,
                        "%s: [apexx] trusted_owner_uids is honoured only in a "
                        "configuration owned by root", path);
    if (cfg->order_count == 0) /* no order key: configuration order */
      for (int i = 0; i < cfg->backend_count; i++)
        cfg->order[cfg->order_count++] = apx__strdup(cfg->backends[i].name);
  }
  if (!cfg->warnings) cfg->warnings = apx__strdup("");
  if (!config_complete(cfg)) return config_nomem(path);

  apx_status st = check_order_names(cfg, cfg->order, cfg->order_count, "[apexx] order");
  for (int op = 0; st == APX_OK && op < APX_OP_COUNT; op++) {
    char where[64];
    snprintf(where, sizeof where, "[op %s] order", apx_op_name((apx_op_id)op));
    st = check_order_names(cfg, cfg->op_order[op], cfg->op_order_count[op], where);
  }
  if (st != APX_OK) return st;

  const char *env_dir = apx__getenv("APEXX_BACKEND_DIR");
  if (env_dir && *env_dir && env_dir[0] != '/')
    return apx__error(APX_ERR_CONFIG,
                      "APEXX_BACKEND_DIR = [%s] is not an absolute path (a relative one would "
                      "resolve against the working directory)",
                      env_dir);
  if (env_dir && *env_dir) {
    free(cfg->backend_dir);
    cfg->backend_dir = apx__strdup(env_dir);
    if (!cfg->backend_dir) return config_nomem(path);
    noted &= note_override(cfg, &overrides_len, "APEXX_BACKEND_DIR", env_dir);
  }
  if (!cfg->backend_dir) cfg->backend_dir = apx__strdup(APEXX_BACKEND_DIR);
  if (!cfg->backend_dir) return config_nomem(path);

  const char *env_backend = apx__getenv("APEXX_BACKEND");
  if (env_backend && *env_backend) {
    if (!backend_config(cfg, env_backend, 0))
      return apx__error(APX_ERR_CONFIG,
                        "APEXX_BACKEND = [%s] names no configured backend", env_backend);
    cfg->forced_backend = apx__strdup(env_backend);
    if (!cfg->forced_backend) return config_nomem(path);
    noted &= note_override(cfg, &overrides_len, "APEXX_BACKEND", env_backend);
  }
  const char *env_log = apx__getenv("APEXX_LOG");
  if (env_log && *env_log) noted &= note_override(cfg, &overrides_len, "APEXX_LOG", env_log);
  if (!cfg->overrides) cfg->overrides = apx__strdup("");
  if (!noted || !cfg->overrides) return config_nomem(path);
  return APX_OK;
}

const char *apx__config_get(const apx__config *cfg, const char *section,
                            const char *key) {
  if (!section || !key) return NULL;
  if (strcmp(section, "apexx") == 0 && strcmp(key, "backend_dir") == 0)
    return cfg->backend_dir;
  for (int i = 0; i < cfg->entry_count; i++)
    if (strcmp(cfg->entries[i].section, section) == 0 &&
        strcmp(cfg->entries[i].key, key) == 0)
      return cfg->entries[i].value;
  return NULL;
}

/* Append "line\n" to a finished buffer (its capacity is unknown here: the
 * buffer is reallocated to the exact size); 0 when out of memory. */
static int append_after_load(char **buf, const char *line) {
  size_t len = *buf ? strlen(*buf) : 0, n = strlen(line);
  char *grown = realloc(*buf, len + n + 2);
  if (!grown) return 0;
  memcpy(grown + len, line, n);
  grown[len + n] = '\n';
  grown[len + n + 1] = '\0';
  *buf = grown;
  return 1;
}

int apx__config_warn(apx__config *cfg, const char *text) {
  char line[1400];
  apx__printable(line, sizeof line, text);
  return append_after_load(&cfg->warnings, line);
}

int apx__config_note_override(apx__config *cfg, const char *name, const char *value) {
  char text[1200], line[1400];
  snprintf(text, sizeof text, "%s=%s", name, value);
  apx__printable(line, sizeof line, text);
  return append_after_load(&cfg->overrides, line);
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
