/* SPDX-License-Identifier: Apache-2.0 */
/* apexx plugin ABI: what a backend shared object exports.
 *
 * A backend is a shared object (a libtool module) exporting one function,
 * apx_backend_entry, that returns a pointer to a constant apx_backend_table.
 * The core dlopens it (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) only when the
 * configuration lists it, then checks, in this order and before touching
 * anything else: abi_version equals APX_BACKEND_ABI_VERSION (else state
 * abi_mismatch: a module built against another backend.h is rebuilt, see
 * Versioning), size is at least APX_BACKEND_TABLE_MIN_SIZE (else
 * abi_mismatch), name is non-NULL and equals the configuration's section name
 * (else name_mismatch), probe and init are non-NULL (else symbol_missing), and
 * the op table, when there is one, has a size of at least its own size field
 * (else abi_mismatch). It then calls probe (false: state unavailable with
 * the probe's reason; the module stays loaded, init is never called) and
 * init (failure: init_failed with the error text the backend set).
 *
 * Required entries: abi_version, size, name, device, probe, init. Everything
 * else may be NULL, with this meaning to the core:
 * - version: reported as "".
 * - fini: nothing to release.
 * - supports: every op the table has a function for, with any arguments the
 *   core's validation accepts.
 * - alloc, free, copy: for a backend whose device is not the host, the core
 *   serves apx_tensor_alloc, apx_tensor_free, apx_tensor_copy and
 *   apx_device_info for that device kind through the first loaded backend of
 *   the kind that has all three; without them the backend's ops still run on
 *   device memory that another backend allocated. Host memory is the core's
 *   own: a host backend's alloc, free, copy, peak_bytes, reset_peak and
 *   device_info are never called.
 * - sync: apx_sync skips the backend (its calls must be complete when they
 *   return, and it cannot report deferred errors).
 * - peak_bytes, reset_peak: apx_peak_memory returns APX_ERR_UNSUPPORTED;
 *   apx_reset_peak_memory does nothing.
 * - timer_begin, timer_end (both or neither): apx_timer_begin returns
 *   APX_ERR_UNSUPPORTED (apexx-bench then times on the host's clock).
 * - device_info: apx_device_info returns APX_ERR_UNSUPPORTED.
 * - graph_begin, graph_end, graph_replay, graph_free (all four or none; a
 *   table too small to hold them has none): apx_graph_begin returns
 *   APX_ERR_UNSUPPORTED for the backend.
 * - ops (no op table), an op function, or an op past the op table's size:
 *   the op is not provided; dispatch passes the backend over with
 *   op_unsupported and says which.
 *
 * Versioning (docs/architecture.md, Plugin ABI): every table is append-only
 * and carries its own size, as libfabric's fi_ops_* tables do. The op slots
 * live in their own table, apx_backend_ops, that the backend table points
 * to: a new op is appended there (APX_OP_MAP's order) and moves no other
 * field. The core uses a field only when its table's size covers it, so an
 * older backend (smaller tables) simply lacks the newer ops and fields, and
 * a newer one's extra slots are ignored. apx_core_services grows the same
 * way: a backend reads a service only when svc->size covers it, and a
 * service the core no longer offers keeps its slot, NULL (retired_ff). The ABI
 * version changes only when an existing field moves or changes meaning;
 * version 2 moved the op slots out of the backend table into apx_backend_ops
 * (a version 1 module is refused as abi_mismatch and must be rebuilt).
 *
 * Threading: the core holds no lock around a call into a backend. Op
 * functions, supports, alloc, free, copy, sync, peak_bytes, reset_peak, the
 * timer and device_info may be called from several threads at once on one
 * state (apexx contexts may be shared between threads), so a backend guards
 * whatever it shares between calls. init runs inside apx_open and fini
 * inside apx_close of the state's context; neither overlaps another call on
 * that state. Separate contexts load the same module once and call probe,
 * init and fini on their own states, possibly at the same time from
 * different threads: module-wide data must be thread-safe too. The cache
 * service's make runs under the object's lock. The module is never unloaded
 * (RTLD_NODELETE): helper threads it leaves idle (OpenMP's) may outlive
 * fini, its memory may not.
 *
 * What a backend may call and link: a backend calls no apx_* function of
 * libapexx. It sees this header, the static inline helpers below and the
 * apx_core_services table handed to init (configuration values, logging,
 * set_error, library loading with the core's checks, a cache for prepared
 * data of the call's objects), and
 * nothing else: the core loads modules with RTLD_LOCAL and may itself be
 * loaded that way (Python's ctypes), so libapexx's symbols need not be
 * visible to a module, and tests/test_symbols.sh checks that the shipped
 * modules need none. It exports only
 * apx_backend_entry (hidden visibility, -export-symbols-regex) and may link
 * the C and C++ runtimes, libm, libdl, pthreads, OpenMP and static libraries
 * (the cuda backend links the CUDA runtime statically). A library of an
 * optional device stack (libcuda, TensorRT) is dlopen'ed by the probe or
 * init, never linked, so the module loads on every machine and its probe
 * can say what is missing.
 *
 * Arguments: the core validates every op call before it reaches a backend
 * (shapes, dtypes, tile grid, aliasing, and the index ranges of host
 * tensors: docs/ops.md, Errors), so an op function may assume well-formed
 * arguments whose tensors all live on the backend's device kind. Index
 * tensors in device memory cannot be read by the core: a device backend
 * checks them itself according to apx_core_services.validate_mode
 * (docs/ops.md, Validation modes). A backend reports a failure with
 * svc->set_error (the message form of docs/ops.md, Errors); a call it
 * accepted and then failed is not retried on another backend. */
#ifndef APEXX_BACKEND_H
#define APEXX_BACKEND_H

#include <apexx/apexx.h>
#include <apexx/op_rules.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APX_BACKEND_ABI_VERSION 2u
#define APX_BACKEND_ENTRY_SYMBOL "apx_backend_entry"

/* How device index tensors are checked (the [apexx] validate key). */
typedef enum apx_validate_mode {
  /* A check on the stream; on a bad index the next sync returns
   * APX_ERR_DEVICE with the message, outputs that alias an input are left
   * untouched and out-of-place outputs may hold any values (so the check may
   * run inside the op's own kernel). No kernel may read or write out of
   * bounds. Default. */
  APX_VALIDATE_DEVICE = 0,
  /* Synchronise inside the call and return APX_ERR_INVALID_ARG at once. */
  APX_VALIDATE_EAGER = 1,
  /* No check: out-of-range device indices are undefined behaviour. */
  APX_VALIDATE_OFF = 2
} apx_validate_mode;

/* ---- helpers a backend shares with the core ----
 * static inline, so a backend module needs no symbol of libapexx and loads
 * wherever libapexx loads (also dlopen'ed with RTLD_LOCAL, where the core's
 * symbols are not visible to the modules it loads). */

/* Bytes per element (apx_dtype_size without the library; the sizes of
 * APX_DTYPE_MAP); 0 if unknown. */
static inline size_t apx_backend_dtype_size(apx_dtype dtype) {
  switch (dtype) {
#define APX_BACKEND_DTYPE_SIZE_(upper, lower, size)                            \
  case APX_DTYPE_##upper:                                                      \
    return size;
    APX_DTYPE_MAP(APX_BACKEND_DTYPE_SIZE_)
#undef APX_BACKEND_DTYPE_SIZE_
  default:
    return 0;
  }
}

/* Elements of a validated tensor (apx_tensor_numel without the library). */
static inline int64_t apx_backend_numel(const apx_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* An op's name, "tilepack", ... (apx_op_name without the library; the one
 * table of names, from APX_OP_MAP); NULL for an unknown id. */
static inline const char *apx_backend_op_name(apx_op_id op) {
  switch (op) {
#define APX_BACKEND_OP_NAME_(upper, lower)                                     \
  case APX_OP_##upper:                                                         \
    return #lower;
    APX_OP_MAP(APX_BACKEND_OP_NAME_)
#undef APX_BACKEND_OP_NAME_
  default:
    return NULL;
  }
}

/* ---- configuration keys a backend declares --------------------------------
 * A backend lists the keys of its [backend NAME] section in its table
 * (apx_backend_table.keys). The core checks the section against the list
 * when the module loads (before probe): a declared key's value must parse
 * as its type and lie in its range, else apx_open fails with APX_ERR_CONFIG
 * and "file:line: KEY = [value] is not ..."; a key the list lacks is a
 * warning (only for a backend whose table loaded: an absent module's keys
 * cannot be judged). A key with an environment variable takes that
 * variable's value when it is set and not empty, read by the core with
 * secure_getenv (ignored in setuid programs) and shown among the overrides.
 * The backend then reads typed, checked values through the services'
 * config_int / config_bool / config_string. The core's own keys of every
 * backend section (library, enabled, device) are not declared. */
typedef enum apx_key_type {
  APX_KEY_STRING = 0, /* any text */
  APX_KEY_PATH = 1,   /* a file path (text, not checked for existence) */
  APX_KEY_INT = 2,    /* a decimal integer in [min, max] */
  APX_KEY_BOOL = 3    /* yes/no, true/false, on/off, 1/0 */
} apx_key_type;

typedef struct apx_backend_key {
  const char *name;          /* the key, e.g. "threads" */
  apx_key_type type;
  int64_t min, max;          /* APX_KEY_INT: the inclusive range */
  const char *default_value; /* as it would be written in the file; NULL:
                                unset by default */
  const char *help;          /* one line for apexx-info --keys */
  const char *env;           /* environment variable that overrides the key,
                                or NULL */
} apx_backend_key;

/* An environment variable a backend reads itself (in probe, which has no
 * services, or per call), with secure_getenv: declared so that apexx-info
 * --keys lists it with its value. */
typedef struct apx_backend_env {
  const char *name; /* e.g. "APEXX_CPU_ISA" */
  const char *help; /* one line */
} apx_backend_env;

/* Services the core hands to init. The pointer stays valid until fini. */
typedef struct apx_core_services {
  uint32_t size; /* sizeof(apx_core_services) of the core; fields appended */
  void *core;    /* opaque; pass back to the functions below */
  /* Value of `key` in INI section `section` ("apexx", "backend cuda", ...)
   * after environment overrides, or NULL when unset. Lives until fini. */
  const char *(*config_get)(void *core, const char *section, const char *key);
  /* Log one line through the context's sink, prefixed with the backend. */
  void (*log)(void *core, apx_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;
  /* Set the calling thread's apx_last_error() text and return status, so a
   * backend writes `return svc->set_error(APX_ERR_DEVICE, "...", ...);`. */
  apx_status (*set_error)(apx_status status, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
      ;
  apx_validate_mode validate_mode;

  /* Retired, always NULL: ABI 2's FF services (ff_params, ff_cached,
   * ff_route), replaced by `cache` below and include/apexx/ff_backend.h.
   * They keep their place so that the fields after them do not move; a
   * module built against the earlier header finds them NULL and runs no
   * ff_infer (it checked them before use). */
  void (*retired_ff[3])(void);

  /* ---- appended for plugin libraries (check `size` before use) ---- */
  /* dlopen(path, flags) with the checks the core applies to backend
   * modules (a regular file, neither it nor a directory above it writable
   * by others, a trusted owner, ELF headers inside the file), on one open
   * descriptor. NULL with the reason in reason[reason_size] on refusal. */
  void *(*open_library)(void *core, const char *path, int flags, char *reason,
                        size_t reason_size);
  /* The backend's declared keys, checked and typed (see apx_backend_key):
   * the environment variable's value, else the file's, else the declared
   * default. Each returns 1 with *out set, or 0 when the key is unset (no
   * value and no default) or not declared as that type. config_string
   * serves string and path keys; its text lives until fini. */
  int (*config_int)(void *core, const char *key, int64_t *out);
  int (*config_bool)(void *core, const char *key, int *out);
  int (*config_string)(void *core, const char *key, const char **out);
  /* The section's `device` key (the device ordinal the core passes to the
   * backend's calls for this backend's own work; 0 when unset). */
  int device_index;

  /* ---- prepared data (check `size` before use) ----
   * The backend's prepared form of `object`, an object the current call
   * holds (the FF weights handle of apx_ff_infer), kept with the object
   * under a key the backend chooses (a dtype and a device, say): made once
   * by make(state, content, key, &prepared) under the object's lock, then
   * returned from the cache; release(state, key, prepared) runs when the
   * object is freed or the backend finalised. content is the object's
   * content for backends (for an apx_ff_weights handle its const
   * apx_ff_params *: include/apexx/ff_backend.h). make failing (message
   * set) caches nothing. */
  apx_status (*cache)(void *core, const void *object, uint64_t key,
                      apx_status (*make)(void *state, const void *content, uint64_t key,
                                         void **prepared),
                      void (*release)(void *state, uint64_t key, void *prepared), void *state,
                      void **prepared);
} apx_core_services;

/* One op function pointer type per op: (state, args, call). `call` is never
 * NULL when the core calls a backend (the core substitutes defaults). */
#define APX_BACKEND_OP_TYPEDEF_(upper, lower)                                  \
  typedef apx_status (*apx_##lower##_fn)(void *state,                          \
                                         const apx_##lower##_args *args,       \
                                         const apx_call *call);
APX_OP_MAP(APX_BACKEND_OP_TYPEDEF_)
#undef APX_BACKEND_OP_TYPEDEF_

/* The op slots: one function per op in APX_OP_MAP's order, NULL where the
 * backend does not provide the op. A table of its own with its own size,
 * so that new ops are appended here without moving anything else. */
typedef struct apx_backend_ops {
  uint32_t size; /* sizeof(apx_backend_ops) the backend was built with */
#define APX_BACKEND_OP_FIELD_(upper, lower) apx_##lower##_fn lower;
  APX_OP_MAP(APX_BACKEND_OP_FIELD_)
#undef APX_BACKEND_OP_FIELD_
} apx_backend_ops;

typedef struct apx_backend_table {
  uint32_t abi_version; /* APX_BACKEND_ABI_VERSION */
  uint32_t size;        /* sizeof(apx_backend_table) the backend was built with */
  const char *name;     /* must equal the config section's name */
  const char *version;  /* backend version string */
  apx_device device;    /* the device kind whose memory its ops read */

  /* Can this backend run on this machine? Cheap, stateless, safe to call
   * before init. Returns 1 when it can; else 0 with one line in `reason`
   * (e.g. "no CUDA driver: libcuda.so.1 not found"). On success it may
   * describe the device in `device_desc` ("NVIDIA H100 80GB HBM3, cc 9.0").
   * Both buffers are NUL-terminated within their sizes. */
  int (*probe)(char *reason, size_t reason_size, char *device_desc,
               size_t device_desc_size);

  /* Build the backend's state from its configuration section and the core's
   * services. On failure return non-OK after svc->set_error(). */
  apx_status (*init)(const apx_core_services *svc, void **state);
  /* Release everything init and later calls acquired. */
  void (*fini)(void *state);

  /* May the backend run op `op` with these (already validated) args? Returns
   * 1 if so; else 0, sets *code (APX_PASS_DTYPE_UNSUPPORTED,
   * APX_PASS_OP_UNSUPPORTED ...) and writes a sentence into `reason`.
   * NULL means "every op it has a function for, any args". */
  int (*supports)(void *state, apx_op_id op, const void *args,
                  apx_pass_over_code *code, char *reason, size_t reason_size);

  /* Memory on the backend's device kind. alloc returns at least `bytes`
   * (64-byte aligned on host); bytes == 0 gives a valid unique pointer or
   * NULL. free(NULL) is a no-op. */
  apx_status (*alloc)(void *state, int device_index, size_t bytes, void **ptr);
  void (*free)(void *state, int device_index, void *ptr);
  /* Copy between any pair of host and this backend's device. Synchronous
   * when stream is NULL, else ordered on the stream. */
  apx_status (*copy)(void *state, void *dst, apx_device dst_device,
                     int dst_index, const void *src, apx_device src_device,
                     int src_index, size_t bytes, void *stream);
  /* Wait for the stream (NULL = everything on the device) and return a
   * deferred error (APX_ERR_DEVICE, message set) once, then clear it. */
  apx_status (*sync)(void *state, int device_index, void *stream);
  /* Peak bytes held through alloc since the last reset_peak. */
  uint64_t (*peak_bytes)(void *state, int device_index);
  void (*reset_peak)(void *state, int device_index);

  /* Timer on the backend's clock: begin records a start on the stream and
   * returns a handle; end records the stop, waits, stores milliseconds and
   * frees the handle. */
  apx_status (*timer_begin)(void *state, int device_index, void *stream,
                            void **timer);
  apx_status (*timer_end)(void *state, void *timer, double *elapsed_ms);

  /* Describe device `index` for the report. */
  apx_status (*device_info)(void *state, int index,
                            struct apx_device_info *info);

  /* Its ops (apx_backend_ops); NULL: none. Static, like the table. */
  const apx_backend_ops *ops;

  /* The keys of its [backend NAME] section and the environment variables it
   * reads itself (see apx_backend_key); NULL/0 when none. */
  const apx_backend_key *keys;
  uint32_t key_count;
  const apx_backend_env *env_vars;
  uint32_t env_count;

  /* Graph capture (apx_graph_*): the four together, or all NULL (the core
   * then answers APX_ERR_UNSUPPORTED). graph_begin starts capturing the
   * backend's work on `stream` (NULL: a stream the backend creates for the
   * graph) on device device_index, stores the stream captured in
   * *capture_stream and an opaque handle in *graph; the core calls
   * graph_end from the same thread, after every captured call returned.
   * graph_end ends the capture and prepares the replay (failure: the handle
   * stays valid for graph_free). graph_replay runs it on `stream` (NULL:
   * the default stream) without waiting. graph_free ends a capture still
   * open and releases everything, its own stream too. The core serialises
   * nothing but begin/end of one handle: replays of one handle may come
   * from several threads at once. */
  apx_status (*graph_begin)(void *state, int device_index, void *stream,
                            void **graph, void **capture_stream);
  apx_status (*graph_end)(void *state, void *graph);
  apx_status (*graph_replay)(void *state, void *graph, void *stream);
  void (*graph_free)(void *state, void *graph);
} apx_backend_table;

/* The smallest table the core accepts: everything up to the op table. */
#define APX_BACKEND_TABLE_MIN_SIZE offsetof(apx_backend_table, ops)

/* Op `lower`'s function in a backend table (tilepack, ...), or NULL when the
 * table has no op table, its op table's size does not cover the slot, or the
 * slot is NULL. */
#define APX_BACKEND_OP(table, lower)                                           \
  ((table)->ops &&                                                             \
           (table)->ops->size >= offsetof(apx_backend_ops, lower) +            \
                                     sizeof((table)->ops->lower)               \
       ? (table)->ops->lower                                                   \
       : NULL)

/* The one symbol a backend exports. */
typedef const apx_backend_table *(*apx_backend_entry_fn)(void);

#if defined(__GNUC__)
#define APX_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define APX_BACKEND_EXPORT
#endif

#ifdef __cplusplus
}
#endif
#endif /* APEXX_BACKEND_H */
