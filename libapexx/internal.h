/* SPDX-License-Identifier: Apache-2.0 */
/* libapexx internals shared across libapexx/ files (apx__ prefix). */
#ifndef APX_CORE_INTERNAL_H
#define APX_CORE_INTERNAL_H

#include <apexx/apexx.h>
#include <apexx/backend.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ---- errors (libapexx/error.c) ---- */
/* Set the calling thread's last-error text (printf format) and return st. */
apx_status apx__error(apx_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
apx_status apx__verror(apx_status st, const char *fmt, va_list ap);
/* Clear the thread's last error (at the start of each API call). */
void apx__clear_error(void);
/* src as one printable line of valid UTF-8 in dst (size bytes with the
 * NUL): newline, CR and tab as \n \r \t; other control bytes, DEL, C1
 * controls, U+2028/U+2029 and bytes that are not UTF-8 as \xHH. Cut
 * before the first character or escape that does not fit whole. Returns
 * the length written. Every message (apx__error) and log line passes
 * through it. */
size_t apx__printable(char *dst, size_t size, const char *src);

/* ---- small string helpers (libapexx/error.c) ---- */
char *apx__strdup(const char *s);
/* printf into a fresh heap string; NULL on allocation failure. */
char *apx__strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Copy at most size-1 bytes and NUL-terminate. */
void apx__strlcpy(char *dst, const char *src, size_t size);
/* Environment lookup that ignores the environment in setuid programs. */
const char *apx__getenv(const char *name);

/* ---- configuration (libapexx/config.c) ---- */
typedef struct apx__config_entry {
  char *section; /* "apexx", "backend cpu", "op tilessm_scan", ... */
  char *key;
  char *value;
  int line;
} apx__config_entry;

typedef enum apx__enabled { APX__ENABLED_AUTO, APX__ENABLED_YES, APX__ENABLED_NO } apx__enabled;

typedef struct apx__backend_config {
  char *name;    /* section "backend NAME" */
  char *library; /* as configured */
  apx__enabled enabled;
  int device_index;
} apx__backend_config;

typedef struct apx__config {
  char *source;     /* file read, "" for the built-in default */
  char *overrides;  /* "NAME=value\n"... */
  char *warnings;   /* "file:line: ...\n"... */
  char *backend_dir;
  apx_validate_mode validate;
  char *forced_backend; /* $APEXX_BACKEND, or NULL */
  int backend_count;
  apx__backend_config backends[APX_MAX_BACKENDS];
  int order_count;
  char *order[APX_MAX_BACKENDS];
  int op_order_count[APX_OP_COUNT]; /* 0 = use the global order */
  char *op_order[APX_OP_COUNT][APX_MAX_BACKENDS];
  int entry_count;
  apx__config_entry *entries;
} apx__config;

/* Read the configuration by the lookup order of docs/architecture.md,
 * Configuration lookup (explicit path,
 * $APEXX_CONFIG, installed file, built-in default) and apply the
 * environment overrides. APX_ERR_CONFIG with "file:line: message" on a
 * malformed or unsafe file. */
apx_status apx__config_load(apx__config *cfg, const char *path);
void apx__config_free(apx__config *cfg);
/* Raw value of section/key after overrides, or NULL. */
const char *apx__config_get(const apx__config *cfg, const char *section,
                            const char *key);

/* ---- opening shared objects (libapexx/trust.c) ---- */
struct stat;
/* Refuse a file other users can write: NULL when safe, else a sentence
 * (static storage per thread). */
const char *apx__unsafe_file_reason(const char *path);
/* The same, also trusting owners listed in trusted_uids ("1001, 1002", the
 * [apexx] trusted_owner_uids key; NULL for none). Both trust files under a
 * directory of $APEXX_TRUSTED_DIRS; world-writable files stay refused. */
const char *apx__unsafe_file_reason_trusting(const char *path, const char *trusted_uids);
/* The rules of apx__unsafe_file_reason_trusting on st, the status of path
 * (an open descriptor's, which the caller checks); real_path names the same
 * file for the APEXX_TRUSTED_DIRS lookup. */
const char *apx__unsafe_stat_reason(const struct stat *st, const char *path,
                                    const char *real_path, const char *trusted_uids);

/* path (resolved) lies under a directory of $APEXX_TRUSTED_DIRS (absolute
 * paths separated by ':', read with secure_getenv), or is one with
 * or_itself. path may be an open descriptor's /proc/self/fd/N. */
int apx__in_trusted_dir(const char *path, int or_itself);
/* Others in the group of st (the status of path) may write it and are
 * trusted to: the group is root's (gid 0), the owner's personal group, or
 * path lies under APEXX_TRUSTED_DIRS (or is one, with or_itself). */
int apx__group_write_trusted(const struct stat *st, const char *path, int or_itself);
/* A directory above path (resolved) that others can write without the
 * sticky bit: NULL when none, else a sentence (static storage per thread). */
const char *apx__unsafe_dir_reason(const char *path);
/* 0 when fd (file_size bytes) holds an ELF shared object of this machine
 * whose segments lie inside the file and whose dynamic section, tables
 * and relocations stay inside its PT_LOAD segments (libapexx/elf_check.c);
 * else -1 with the reason. */
int apx__elf_check(int fd, uint64_t file_size, char *reason, size_t reason_size);
/* Not empty, and no ".." component in a relative name. */
int apx__library_name_ok(const char *name);
/* dlopen(path, flags) after opening it once and checking the descriptor: a
 * regular file, not writable by others (nor a directory above it), owner
 * trusted, ELF headers inside the file; maps /proc/self/fd/N. NULL with the
 * reason (and *not_found for a missing file) on refusal or failure. */
void *apx__dlopen_checked(const char *path, int flags, const char *trusted_uids,
                          int *not_found, char *reason, size_t reason_size);

/* ---- backends and the context (libapexx/loader.c, libapexx/context.c) ---- */
/* A declared backend key resolved (libapexx/keys.c). */
typedef struct apx__key_value {
  const apx_backend_key *decl;
  char *value; /* the text in effect, NULL when unset */
  int64_t ival;
  int bval;
  char source[300]; /* "default", "file:line", "environment (VAR)", "unset" */
} apx__key_value;

typedef struct apx__backend {
  apx__backend_config *config;
  char *path; /* resolved library path */
  apx_backend_state state;
  char reason[512];
  char device_desc[256];
  void *handle;
  const apx_backend_table *table;
  void *state_ptr;
  apx_core_services services;
  struct apx_context *ctx;
  apx__key_value *keys; /* the table's declared keys, resolved */
  int key_count;
} apx__backend;

struct apx_context {
  apx__config config;
  int backend_count;
  apx__backend backends[APX_MAX_BACKENDS];
  apx_log_fn log_fn;
  void *log_user;
  apx_log_level log_level;
  pthread_mutex_t lock; /* guards the interned strings and host peaks */
  char **interned;
  int interned_count, interned_cap;
  uint64_t host_bytes_in_use, host_peak_bytes;
  struct apx_ff_weights *ff_weights; /* open weights handles (ff_weights.c),
                                        a list guarded by lock */
  pthread_cond_t ff_idle; /* ff_weights.c: a make ended or a handle's last pin
                             went (with lock) */
  int ff_making;          /* loads and seeded makes in progress (under lock) */
  int ff_closing;         /* apx_close has begun (under lock) */
  struct apx_graph *graphs; /* graph.c: the context's graphs, guarded by lock */
  int captures_open;        /* graphs capturing now (atomic: read unlocked) */
};

/* Load, check, probe and init one backend; always ends with a state and a
 * reason. */
/* Load, check, probe and init one backend. Its failures are its state; the
 * return is non-OK (message set) only for what fails apx_open: a declared
 * key's bad value (APX_ERR_CONFIG) or no memory. */
apx_status apx__backend_load(apx_context *ctx, apx__backend *b);
/* keys.c: check b's section against its table's declared keys (unknown
 * keys warned), resolve them; the services' typed getters; release. */
apx_status apx__backend_keys_check(apx_context *ctx, apx__backend *b);
void apx__backend_keys_free(apx__backend *b);
int apx__svc_config_int(void *core, const char *key, int64_t *out);
int apx__svc_config_bool(void *core, const char *key, int *out);
int apx__svc_config_string(void *core, const char *key, const char **out);
/* config.c: append a warning line / an override NAME=value; 0 when out of
 * memory. */
int apx__config_warn(apx__config *cfg, const char *line);
int apx__config_note_override(apx__config *cfg, const char *name, const char *value);
void apx__backend_unload(apx__backend *b);
apx__backend *apx__backend_find(apx_context *ctx, const char *name);
/* 1 when the backend has an op table whose size covers the op's slot and
 * the slot is set. */
int apx__backend_has_op(const apx__backend *b, apx_op_id op);
/* Why it has not (the op table is missing, ends before the op's slot, or
 * the slot is NULL), written into buf. */
const char *apx__backend_lacks_op(const apx__backend *b, apx_op_id op, char *buf, size_t size);
/* The loaded backend serving memory of `device`, or NULL (message set). */
apx__backend *apx__backend_for_device(apx_context *ctx, apx_device device);

/* A copy of s that lives as long as ctx (deduplicated; libapexx/intern.c);
 * "(out of memory)" when no copy can be made. */
const char *apx__intern(apx_context *ctx, const char *s);

/* ---- objects with prepared data (libapexx/cache.c) ----
 * A core object a backend may keep prepared data of (services.cache): the
 * first member of the object's struct (apx_ff_weights), so that the
 * service finds it from the object's address. */
typedef struct apx__cache_entry apx__cache_entry;
typedef struct apx__object {
  const void *content;      /* what a backend's make receives */
  pthread_mutex_t lock;     /* guards entries; make runs under it */
  apx__cache_entry *entries;
} apx__object;
void apx__object_init(apx__object *o, const void *content);
/* services.cache on object o for backend `core` (an apx__backend *). */
apx_status apx__object_cache(apx__object *o, void *core, uint64_t key,
                             apx_status (*make)(void *state, const void *content, uint64_t key,
                                                void **prepared),
                             void (*release)(void *state, uint64_t key, void *prepared),
                             void *state, void **prepared);
/* Move the entries backend `core` made (all with core NULL) onto the
 * front of list and return it; apx__cache_release releases such a list
 * (outside the locks: a release may call into its backend). */
apx__cache_entry *apx__object_take(apx__object *o, void *core, apx__cache_entry *list);
void apx__cache_release(apx__cache_entry *list);
/* Release every entry and the lock (the object is being freed). */
void apx__object_destroy(apx__object *o);

/* ---- logging (libapexx/log.c) ---- */
void apx__log(apx_context *ctx, apx_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void apx__vlog(apx_context *ctx, apx_log_level level, const char *prefix,
               const char *fmt, va_list ap);
apx_log_level apx__log_level_from_env(void);
/* $APEXX_LOG when it is set but names no level (it then means warn), else NULL. */
const char *apx__log_env_unknown(void);

/* ---- graph capture (libapexx/graph.c) ---- */
/* Free every graph the caller left (apx_close). */
void apx__graph_close_all(apx_context *ctx);
/* APX_ERR_INVALID_ARG (message set) when a call of fn on backend (NULL:
 * any) would wait for `stream` while a graph captures it, or, for stream
 * NULL, while the calling thread captures; `what` says how it waits
 * ("waits for the stream"). APX_OK otherwise; no lock when nothing is
 * being captured. */
apx_status apx__graph_waits_refused(apx_context *ctx, const char *fn, const char *backend,
                                    void *stream, const char *what);

/* ---- dispatch (libapexx/dispatch.c) ---- */
/* Validate, then choose the backend for op; fills *expl when non-NULL. */
apx_status apx__dispatch(apx_context *ctx, apx_op_id op, const void *args,
                         const apx_call *call, apx__backend **chosen,
                         apx_explanation *expl);

#endif
