/* SPDX-License-Identifier: Apache-2.0 */
/* apexx: tile-sparse vision kernels behind one C API.
 *
 * This is the header a user reads first. A context (apx_open) reads the INI
 * configuration, dlopens the configured backends and probes them; every op
 * call is validated here in the core, then dispatched to the first backend of
 * the op's order that can run it. Op math: docs/ops.md. Config and dispatch:
 * apexx.ini(5) and docs/config.md. The docs/ files are installed in the
 * documentation directory ($(docdir)). */
#ifndef APEXX_APEXX_H
#define APEXX_APEXX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APEXX_VERSION_MAJOR 0
#define APEXX_VERSION_MINOR 1
#define APEXX_VERSION_PATCH 0
#define APEXX_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define APX_API __attribute__((visibility("default")))
#else
#define APX_API
#endif

/* ---- status codes --------------------------------------------------------
 * One X-macro list gives the enum, apx_status_name() and default messages. */
#define APX_STATUS_MAP(X)                                                      \
  X(OK, 0, "success")                                                          \
  X(ERR_INVALID_ARG, 1, "invalid argument")                                    \
  X(ERR_UNSUPPORTED, 2, "no backend can run this call")                        \
  X(ERR_NO_MEMORY, 3, "out of memory")                                         \
  X(ERR_CONFIG, 4, "configuration error")                                      \
  X(ERR_BACKEND, 5, "backend error")                                           \
  X(ERR_DEVICE, 6, "device error reported at synchronisation")                \
  X(ERR_IO, 7, "input/output error (a file could not be read or written)")

typedef enum apx_status {
#define APX_STATUS_ENUM_(name, value, text) APX_##name = value,
  APX_STATUS_MAP(APX_STATUS_ENUM_)
#undef APX_STATUS_ENUM_
} apx_status;

/* Name of a status code ("APX_ERR_INVALID_ARG"); "APX_UNKNOWN" otherwise. */
APX_API const char *apx_status_name(apx_status status);

/* The calling thread's message for its last failed apexx call, e.g.
 * "tilepack: idx[0][3] = [300] is outside [0, 255]". Never NULL; valid until
 * the same thread's next apexx call. One printable line of valid UTF-8, at
 * most 1023 bytes: control bytes and bytes that are not UTF-8 from names
 * and paths read as \n, \t, \xHH. */
APX_API const char *apx_last_error(void);

/* Library version "MAJOR.MINOR.PATCH" (may differ from the header's). */
APX_API const char *apx_version(void);

/* ---- tensors -------------------------------------------------------------- */
#define APX_MAX_DIMS 8

#define APX_DTYPE_MAP(X)                                                       \
  X(F32, f32, 4)                                                               \
  X(F16, f16, 2)                                                               \
  X(BF16, bf16, 2)                                                             \
  X(I32, i32, 4)                                                               \
  X(I64, i64, 8)

typedef enum apx_dtype {
#define APX_DTYPE_ENUM_(upper, lower, size) APX_DTYPE_##upper,
  APX_DTYPE_MAP(APX_DTYPE_ENUM_)
#undef APX_DTYPE_ENUM_
  APX_DTYPE_COUNT
} apx_dtype;

typedef enum apx_device { APX_DEVICE_HOST = 0, APX_DEVICE_CUDA = 1 } apx_device;

/* A dense, row-major (NCHW) view of memory the caller owns or got from
 * apx_tensor_alloc. The struct is plain data: copy it freely. */
typedef struct apx_tensor {
  void *data;
  apx_dtype dtype;
  apx_device device;
  int device_index; /* CUDA ordinal; 0 for host */
  int ndim;
  int64_t shape[APX_MAX_DIMS];
} apx_tensor;

/* "f32", "f16", "bf16", "i32", "i64"; NULL for an unknown value. */
APX_API const char *apx_dtype_name(apx_dtype dtype);
/* Bytes per element; 0 for an unknown dtype. */
APX_API size_t apx_dtype_size(apx_dtype dtype);
/* "host" or "cuda"; NULL for an unknown value. */
APX_API const char *apx_device_name(apx_device device);
/* Number of elements (product of shape; 1 for ndim 0). -1 when a dimension
 * is negative or the product overflows int64 (validation rejects both);
 * 0 for NULL or an ndim outside [0, APX_MAX_DIMS]. */
APX_API int64_t apx_tensor_numel(const apx_tensor *t);
/* Describe a host tensor over caller memory (no allocation). An ndim
 * outside [0, APX_MAX_DIMS] is kept as given, with no dimension copied, and
 * names itself in apx_last_error(): every op then refuses the tensor
 * (APX_ERR_INVALID_ARG, "... has ndim [9], outside [0, 8]"). A NULL shape
 * with ndim > 0 gives dimensions of -1, refused the same way
 * ("apx_tensor_host: shape = [NULL] with ndim [2]"). */
APX_API apx_tensor apx_tensor_host(void *data, apx_dtype dtype, int ndim,
                                   const int64_t *shape);

/* ---- context --------------------------------------------------------------- */
typedef struct apx_context apx_context;

/* Per-call options. NULL means all defaults. `backend` forces one backend
 * (an error naming why if it cannot run the call); `stream` is a
 * cudaStream_t for device backends (NULL = the default stream). */
typedef struct apx_call {
  const char *backend;
  void *stream;
} apx_call;
#define APX_CALL_INIT {NULL, NULL}

/* Read the configuration (config_path, else $APEXX_CONFIG, else the installed
 * apexx.ini, else the built-in default), load and probe every configured
 * backend. A backend that fails to load or probe is recorded with a reason,
 * not fatal, unless its section says `enabled = yes`. Returns
 * APX_ERR_CONFIG for a malformed or unsafe file; *ctx is NULL on failure. */
APX_API apx_status apx_open(apx_context **ctx, const char *config_path);

/* Finalise every backend and unload it; frees all strings the context handed
 * out. ctx may be NULL. Tensors still allocated are leaked, not freed.
 * Lifetime with threads: a context may be shared by threads, but apx_close
 * must not overlap any other call on it, and no call may start after it:
 * join (or otherwise order) every thread using ctx first. apexx cannot
 * detect a call that starts on a freed context. It does wait for FF
 * weights loads, seeded makes and ff_infer calls already inside the library
 * (a load that finishes meanwhile fails with APX_ERR_INVALID_ARG and makes
 * no handle), then frees the weights handles left open. The Python binding
 * enforces this itself (Context.close waits for calls in flight). */
APX_API void apx_close(apx_context *ctx);

/* Open the shared library at path (absolute, or relative to the working
 * directory) with dlopen(RTLD_NOW | RTLD_LOCAL) after the checks the core
 * applies to backend modules: one open descriptor is checked and loaded, a
 * regular file that neither it nor a directory above it lets other users
 * write, with a trusted owner ([apexx] trusted_owner_uids) and ELF headers
 * inside the file (docs/architecture.md, Plugin ABI). *handle is for dlsym
 * and dlclose. APX_ERR_INVALID_ARG for a NULL argument; APX_ERR_IO, with
 * "apx_library_open: [path]: reason" and *handle NULL, when the file is
 * missing, refused or not loadable. For tools that run a plugin library's
 * own entry (apexx-bench's TensorRT engine runner). */
APX_API apx_status apx_library_open(apx_context *ctx, const char *path, void **handle);

/* ---- logging --------------------------------------------------------------- */
typedef enum apx_log_level {
  APX_LOG_OFF = 0,
  APX_LOG_ERROR = 1,
  APX_LOG_WARN = 2,
  APX_LOG_INFO = 3,
  APX_LOG_DEBUG = 4
} apx_log_level;

/* message: one printable line of UTF-8 (escaped as apx_last_error's). */
typedef void (*apx_log_fn)(void *user, apx_log_level level, const char *message);

/* Route the context's log lines to fn (NULL restores the default: stderr,
 * level from $APEXX_LOG, warn by default). Lines emitted during apx_open
 * go to the default sink. */
APX_API void apx_set_log(apx_context *ctx, apx_log_fn fn, void *user);

/* Warnings collected while reading the configuration (unknown keys ...),
 * one per line; "" when none. Lives as long as ctx. */
APX_API const char *apx_config_warnings(const apx_context *ctx);

/* Configuration files that were read ("" when the built-in default was used)
 * and the APEXX_* overrides in effect ("NAME=value" separated by '\n'). */
APX_API const char *apx_config_source(const apx_context *ctx);
APX_API const char *apx_config_overrides(const apx_context *ctx);

/* One configuration key or variable, as apexx-info --keys lists them: the
 * core's keys ([apexx], and library/enabled/device of every backend
 * section), then each configured backend's declared keys and the
 * environment variables it reads itself (key NULL). Strings live as long as
 * ctx; value is NULL when unset. */
typedef struct apx_config_key_info {
  const char *section;       /* "apexx" or "backend NAME" */
  const char *key;           /* NULL for a variable the backend reads itself */
  const char *owner;         /* "core" or the backend's name */
  const char *type;          /* string, path, int, bool, enum, list, environment */
  const char *range;         /* "[0, 4096]", "yes, no", ... or "" */
  const char *default_value; /* NULL: unset by default */
  const char *help;
  const char *env;    /* the environment variable that sets it, or NULL */
  const char *value;  /* in effect, or NULL */
  const char *source; /* "default", "FILE:LINE", "environment (VAR)", "unset" */
} apx_config_key_info;

/* How many keys apx_config_key lists; fill *info for key i (0-based). */
APX_API int apx_config_key_count(const apx_context *ctx);
APX_API apx_status apx_config_key(apx_context *ctx, int i, apx_config_key_info *info);

/* ---- backends -------------------------------------------------------------- */
#define APX_BACKEND_STATE_MAP(X)                                               \
  X(OK, ok)                                                                    \
  X(DISABLED, disabled)                                                        \
  X(NOT_FOUND, not_found)                                                      \
  X(LOAD_FAILED, load_failed)                                                  \
  X(SYMBOL_MISSING, symbol_missing)                                            \
  X(ABI_MISMATCH, abi_mismatch)                                                \
  X(NAME_MISMATCH, name_mismatch)                                              \
  X(UNAVAILABLE, unavailable)                                                  \
  X(INIT_FAILED, init_failed)

typedef enum apx_backend_state {
#define APX_BACKEND_STATE_ENUM_(upper, lower) APX_BACKEND_##upper,
  APX_BACKEND_STATE_MAP(APX_BACKEND_STATE_ENUM_)
#undef APX_BACKEND_STATE_ENUM_
  APX_BACKEND_STATE_COUNT
} apx_backend_state;

/* "ok", "disabled", ...; NULL for an unknown value. */
APX_API const char *apx_backend_state_name(apx_backend_state state);

/* Spelled `struct apx_backend_info` (the function below has the same name). */
struct apx_backend_info {
  const char *name;    /* config section name: "cpu", "cuda", "trt", ... */
  const char *library; /* resolved path of the shared object */
  const char *version; /* backend's version; "" when not loaded */
  apx_device device;   /* device kind it serves (host when not loaded) */
  const char *device_name; /* probe's description of the device; "" if none */
  apx_backend_state state;
  const char *reason; /* one line; "" when ok */
};

/* Number of configured backends, in configuration order. */
APX_API int apx_backend_count(const apx_context *ctx);
/* Fill *info for backend i (0-based). Strings live as long as ctx. */
APX_API apx_status apx_backend_info(const apx_context *ctx, int i,
                                    struct apx_backend_info *info);

/* Spelled `struct apx_device_info` (the function below has the same name). */
struct apx_device_info {
  char name[256];
  int compute_major, compute_minor; /* 0 on host */
  int driver_version, runtime_version; /* CUDA encoding (12040 = 12.4); 0 */
  uint64_t total_memory_bytes;
  int multiprocessors;
};

/* Describe device `index` of kind `device` through the backend serving it. */
APX_API apx_status apx_device_info(apx_context *ctx, apx_device device,
                                   int index, struct apx_device_info *info);

/* ---- memory ---------------------------------------------------------------- */
/* Allocate a dense tensor on `device` (host memory is 64-byte aligned; device
 * memory comes from the backend serving that device). Contents undefined. */
APX_API apx_status apx_tensor_alloc(apx_context *ctx, apx_device device,
                                    int device_index, apx_dtype dtype, int ndim,
                                    const int64_t *shape, apx_tensor *out);
/* Free memory from apx_tensor_alloc and clear t->data. NULL data is a no-op. */
APX_API apx_status apx_tensor_free(apx_context *ctx, apx_tensor *t);
/* Copy src into dst (same dtype and numel, any host/device pair).
 * Synchronous unless call->stream is set. */
APX_API apx_status apx_tensor_copy(apx_context *ctx, const apx_tensor *dst,
                                   const apx_tensor *src, const apx_call *call);
/* Wait for the call's stream on every loaded device backend (or only
 * call->backend) and return a deferred device error (APX_ERR_DEVICE). */
APX_API apx_status apx_sync(apx_context *ctx, const apx_call *call);

/* Peak bytes allocated through backend `name` since its last reset. */
APX_API apx_status apx_peak_memory(apx_context *ctx, const char *backend,
                                   uint64_t *peak_bytes);
APX_API apx_status apx_reset_peak_memory(apx_context *ctx, const char *backend);

/* A timer on a backend's clock (CUDA events on cuda, a monotonic clock on
 * cpu). begin records a start on call's stream; end records the stop, waits
 * for it, stores the elapsed milliseconds and frees the timer. */
typedef struct apx_timer apx_timer;
APX_API apx_status apx_timer_begin(apx_context *ctx, const char *backend,
                                   const apx_call *call, apx_timer **timer);
APX_API apx_status apx_timer_end(apx_context *ctx, apx_timer *timer,
                                 double *elapsed_ms);

/* ---- graph capture (docs/graph.md) -----------------------------------------
 * Record a sequence of calls once and replay it (a CUDA graph on cuda), as
 * cudaStreamBeginCapture / torch.cuda.graph do:
 *
 *   apx_graph *g;
 *   apx_graph_begin(ctx, &call, &g);          // capture on call's backend
 *   apx_tilepack(ctx, &a, apx_graph_call(g)); // recorded, not run
 *   ...
 *   apx_graph_end(ctx, g);                    // instantiate
 *   apx_graph_replay(ctx, g, &call);          // run them all, as recorded
 *   apx_graph_free(ctx, g);
 *
 * Captured calls are recorded with their tensors' pointers and arguments:
 * a replay reads the inputs' current contents and writes the same outputs,
 * so those tensors must stay allocated until the graph is freed. Only calls
 * that never wait for the host can be captured: an op call under validate =
 * eager, apx_sync or a timer on the capture's stream, apx_ff_infer with
 * stats, and device allocations and frees from the capturing thread fail
 * with APX_ERR_INVALID_ARG and leave the capture intact. A device
 * index error of a replayed call comes back from the next apx_sync, as for
 * an eager call. A backend without graphs (cpu) returns APX_ERR_UNSUPPORTED
 * from apx_graph_begin. */
typedef struct apx_graph apx_graph;

/* Start capturing on call->backend (NULL: $APEXX_BACKEND, else the first
 * loaded backend that can capture) and call->stream (NULL: a stream the
 * graph creates; the default stream cannot be captured). Calls made with
 * apx_graph_call(*graph) from this thread are then recorded until
 * apx_graph_end, which this thread must call. One capture per stream. */
APX_API apx_status apx_graph_begin(apx_context *ctx, const apx_call *call,
                                   apx_graph **graph);
/* The call options that capture into graph: its backend and stream. Lives
 * as long as graph; NULL for NULL. */
APX_API const apx_call *apx_graph_call(const apx_graph *graph);
/* End the capture and make the graph ready to replay. A failure (a captured
 * call failed inside the backend, or the capture was invalidated) leaves the
 * graph unusable; it is freed with apx_graph_free either way. */
APX_API apx_status apx_graph_end(apx_context *ctx, apx_graph *graph);
/* Run the captured calls on call->stream (NULL: the default stream), in
 * order after the stream's earlier work; returns without waiting. Replays
 * of one graph run one after another even on different streams. */
APX_API apx_status apx_graph_replay(apx_context *ctx, apx_graph *graph,
                                    const apx_call *call);
/* End a capture still open, release the graph. NULL is a no-op. A graph
 * must be freed before its context closes (apx_close frees any left). */
APX_API void apx_graph_free(apx_context *ctx, apx_graph *graph);

/* ---- ops ------------------------------------------------------------------- */
/* Op ids for apx_explain and the backend vtable; tile_order is a host op in
 * core and has no id. New ops go at the end. */
#define APX_OP_MAP(X)                                                          \
  X(TILEPACK, tilepack)                                                        \
  X(TILEUNPACK, tileunpack)                                                    \
  X(FUSED_PACK_OP_UNPACK, fused_pack_op_unpack)                                \
  X(FUSIONGATE_ALPHA, fusiongate_alpha)                                        \
  X(FUSIONGATE_FUSE, fusiongate_fuse)                                          \
  X(TILESSM_SCAN, tilessm_scan)                                                \
  X(GATHER, gather)                                                            \
  X(INDEX_SELECT, index_select)                                                \
  X(SCATTER_ADD, scatter_add)                                                  \
  X(GATHER_BACKWARD, gather_backward)                                          \
  X(FF_INFER, ff_infer)                                                        \
  X(FUSIONGATE_FUSE_BACKWARD, fusiongate_fuse_backward)                        \
  X(FUSIONGATE_ALPHA_BACKWARD, fusiongate_alpha_backward)                      \
  X(TILESSM_SCAN_BACKWARD, tilessm_scan_backward)                              \
  X(TILEPACK_BACKWARD, tilepack_backward)                                      \
  X(TILEUNPACK_BACKWARD, tileunpack_backward)                                  \
  X(FUSED_PACK_OP_UNPACK_BACKWARD, fused_pack_op_unpack_backward)              \
  X(INDEX_SELECT_BACKWARD, index_select_backward)

typedef enum apx_op_id {
#define APX_OP_ENUM_(upper, lower) APX_OP_##upper,
  APX_OP_MAP(APX_OP_ENUM_)
#undef APX_OP_ENUM_
  APX_OP_COUNT
} apx_op_id;

/* "tilepack", ...; NULL for an unknown id. */
APX_API const char *apx_op_name(apx_op_id op);
/* The id of an op name, or -1. */
APX_API int apx_op_from_name(const char *name);

/* docs/ops.md, tilepack. out[b,k,c,dy,dx] = features[b,c,ty*t+dy,tx*t+dx], ids in
 * the given order. features [B,C,H,W] f32|f16|bf16; idx [B,K] i32|i64 in
 * [0, gh*gw); out [B,K,C,t,t], dtype of features. */
typedef struct apx_tilepack_args {
  const apx_tensor *features;
  const apx_tensor *idx;
  int64_t tile;
  const apx_tensor *out;
} apx_tilepack_args;
#define APX_TILEPACK_ARGS_INIT {NULL, NULL, 8, NULL}
APX_API apx_status apx_tilepack(apx_context *ctx, const apx_tilepack_args *args,
                                const apx_call *call);

typedef enum apx_overlap_mode {
  APX_OVERLAP_OVERRIDE = 0,
  APX_OVERLAP_BLEND = 1
} apx_overlap_mode;

/* docs/ops.md, tileunpack. out = base with packed tiles written back in priority
 * key order (level, k), the highest key winning (override) or blended in
 * ascending key order (blend). Exactly one of idx [B,K] and origins [B,K,2]
 * (i32|i64, (y0,x0), any in-bounds pixel origin). levels [B,K] optional
 * (required when assume_priority_sorted is 0). out may alias base exactly. */
typedef struct apx_tileunpack_args {
  const apx_tensor *base;
  const apx_tensor *packed;
  const apx_tensor *idx;
  const apx_tensor *origins;
  const apx_tensor *levels;
  apx_overlap_mode mode;
  double blend_alpha;
  int assume_priority_sorted;
  const apx_tensor *out;
} apx_tileunpack_args;
#define APX_TILEUNPACK_ARGS_INIT                                               \
  {NULL, NULL, NULL, NULL, NULL, APX_OVERLAP_OVERRIDE, 0.5, 1, NULL}
APX_API apx_status apx_tileunpack(apx_context *ctx,
                                  const apx_tileunpack_args *args,
                                  const apx_call *call);

/* docs/ops.md, fused_pack_op_unpack. out = features, except every pixel x of a selected tile
 * becomes (x*value_scale + value_bias) * max(x*gate_scale + gate_bias, 0).
 * With require_unique, a repeated id in a batch row is rejected.
 * out may alias features exactly. */
typedef struct apx_fused_pack_op_unpack_args {
  const apx_tensor *features;
  const apx_tensor *idx;
  int64_t tile;
  double value_scale, value_bias, gate_scale, gate_bias;
  int require_unique;
  const apx_tensor *out;
} apx_fused_pack_op_unpack_args;
#define APX_FUSED_PACK_OP_UNPACK_ARGS_INIT                                     \
  {NULL, NULL, 8, 1.0, 0.0, 1.0, 0.0, 1, NULL}
APX_API apx_status apx_fused_pack_op_unpack(
    apx_context *ctx, const apx_fused_pack_op_unpack_args *args,
    const apx_call *call);

/* docs/ops.md, fusiongate_alpha. out [B,1,H,W] = sigmoid(softplus(blw)*b +
 * softplus(ulw)*u + bias) after sanitising the proxies (NaN->0, +inf->1,
 * -inf->0) in their own dtype. boundary, uncertainty [B,1,H,W] or [B,H,W],
 * one float dtype; out any float dtype (the proxies are cast to it). */
typedef struct apx_fusiongate_alpha_args {
  const apx_tensor *boundary;
  const apx_tensor *uncertainty;
  double boundary_log_weight, uncertainty_log_weight, bias;
  const apx_tensor *out;
} apx_fusiongate_alpha_args;
#define APX_FUSIONGATE_ALPHA_ARGS_INIT {NULL, NULL, 1.0, 1.0, 0.0, NULL}
APX_API apx_status apx_fusiongate_alpha(apx_context *ctx,
                                        const apx_fusiongate_alpha_args *args,
                                        const apx_call *call);

/* docs/ops.md, fusiongate_fuse. out = base + alpha*(detail - base), alpha
 * [B,1,H,W] or [B,H,W] broadcast over C; one float dtype. out may alias
 * base exactly (the reference's inplace=True). */
typedef struct apx_fusiongate_fuse_args {
  const apx_tensor *base;
  const apx_tensor *detail;
  const apx_tensor *alpha;
  const apx_tensor *out;
} apx_fusiongate_fuse_args;
#define APX_FUSIONGATE_FUSE_ARGS_INIT {NULL, NULL, NULL, NULL}
APX_API apx_status apx_fusiongate_fuse(apx_context *ctx,
                                       const apx_fusiongate_fuse_args *args,
                                       const apx_call *call);

typedef enum apx_scan_direction {
  APX_SCAN_FORWARD = 0,
  APX_SCAN_BACKWARD = 1,
  APX_SCAN_BIDIRECTIONAL = 2
} apx_scan_direction;

typedef enum apx_scan_merge {
  APX_MERGE_SUM = 0,
  APX_MERGE_AVG = 1,
  APX_MERGE_GATED = 2
} apx_scan_merge;

/* docs/ops.md, tilessm_scan. Linear recurrence per (b,c) stream over K with fp32
 * state. tokens [B,K,C] f32|f16|bf16; decay, input_gain, output_gain,
 * state_bias [C] any float dtype; init_state* [B,C] or [B,2,C];
 * merge_gate* [C] or [B,1,C] (gated merge only); out [B,K,C] and
 * final_state* ([B,C], or [B,2,C] when bidirectional) in the tokens dtype. */
typedef struct apx_tilessm_scan_args {
  const apx_tensor *tokens;
  const apx_tensor *decay;
  const apx_tensor *input_gain;
  const apx_tensor *output_gain;
  const apx_tensor *state_bias;
  const apx_tensor *init_state;
  const apx_tensor *merge_gate;
  double clamp_value;
  apx_scan_direction direction;
  apx_scan_merge merge;
  const apx_tensor *out;
  const apx_tensor *final_state;
} apx_tilessm_scan_args;
#define APX_TILESSM_SCAN_ARGS_INIT                                             \
  {NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1e4, APX_SCAN_FORWARD,            \
   APX_MERGE_AVG, NULL, NULL}
APX_API apx_status apx_tilessm_scan(apx_context *ctx,
                                    const apx_tilessm_scan_args *args,
                                    const apx_call *call);

/* docs/ops.md, gather, torch.gather: out[..i..] = src[..index[..i..] along
 * dim..]. index same ndim as src, i32|i64, every value in [0, src[dim]);
 * out has index's shape and src's dtype (any dtype). dim may be negative. */
typedef struct apx_gather_args {
  const apx_tensor *src;
  int dim;
  const apx_tensor *index;
  const apx_tensor *out;
} apx_gather_args;
#define APX_GATHER_ARGS_INIT {NULL, 0, NULL, NULL}
APX_API apx_status apx_gather(apx_context *ctx, const apx_gather_args *args,
                              const apx_call *call);

/* docs/ops.md, index_select, torch.index_select(src, dim, index): out is src
 * with the extent at dim replaced by N, out[..,i,..] = src[..,index[i],..] (i
 * at position dim). src any ndim >= 1, any dtype; dim in [-ndim, ndim),
 * negative counts from the end; index [N] i32|i64 in [0, src.shape[dim]). dim
 * was appended in libapexx 1 (-version-info 1:0:0); rows of [M,D] are dim 0. */
typedef struct apx_index_select_args {
  const apx_tensor *src;
  const apx_tensor *index;
  const apx_tensor *out;
  int dim;
} apx_index_select_args;
#define APX_INDEX_SELECT_ARGS_INIT {NULL, NULL, NULL, 0}
APX_API apx_status apx_index_select(apx_context *ctx,
                                    const apx_index_select_args *args,
                                    const apx_call *call);

/* docs/ops.md, scatter_add. out = self; out[..index[i]..] += src[i] along dim for
 * every position i of index. Floats accumulate in fp32 per destination in
 * ascending index order from self's value and round once (deterministic);
 * integers accumulate exactly (wrapping). out may alias self exactly. */
typedef struct apx_scatter_add_args {
  const apx_tensor *self;
  int dim;
  const apx_tensor *index;
  const apx_tensor *src;
  const apx_tensor *out;
} apx_scatter_add_args;
#define APX_SCATTER_ADD_ARGS_INIT {NULL, 0, NULL, NULL, NULL}
APX_API apx_status apx_scatter_add(apx_context *ctx,
                                   const apx_scatter_add_args *args,
                                   const apx_call *call);

/* docs/ops.md, gather_backward. grad_src = zeros (shape of grad_src) scatter_add
 * grad_out along dim at index; grad_out has index's shape. */
typedef struct apx_gather_backward_args {
  const apx_tensor *grad_out;
  int dim;
  const apx_tensor *index;
  const apx_tensor *grad_src;
} apx_gather_backward_args;
#define APX_GATHER_BACKWARD_ARGS_INIT {NULL, 0, NULL, NULL}
APX_API apx_status apx_gather_backward(apx_context *ctx,
                                       const apx_gather_backward_args *args,
                                       const apx_call *call);

/* ---- backward ops (docs/ops.md: each beside its forward) ------------------------ */
/* docs/ops.md, tilepack_backward. grad_features = zeros, then every packed
 * gradient grad_out[b,k] added onto its tile idx[b,k] in K order (repeated ids
 * accumulate), fp32 sums rounded once. grad_out [B,K,C,t,t] f32|f16|bf16 (t =
 * grad_out.shape[3]); idx [B,K] as tilepack's; grad_features [B,C,H,W] in
 * grad_out's dtype, the shape of tilepack's features (the caller's). */
typedef struct apx_tilepack_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *idx;
  const apx_tensor *grad_features;
} apx_tilepack_backward_args;
#define APX_TILEPACK_BACKWARD_ARGS_INIT {NULL, NULL, NULL}
APX_API apx_status apx_tilepack_backward(apx_context *ctx,
                                         const apx_tilepack_backward_args *args,
                                         const apx_call *call);

/* docs/ops.md, tileunpack_backward. The gradients of tileunpack's base and
 * packed from grad_out [B,C,H,W], with the forward's placement (idx or
 * origins), levels, mode, blend_alpha and assume_priority_sorted, and its
 * tile size t: grad_base [B,C,H,W] and grad_packed [B,K,C,t,t], in grad_out's
 * dtype. override: a pixel's gradient goes to the tile that won it, else to
 * base; blend: weighted by the blends over it, in the same priority order. */
typedef struct apx_tileunpack_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *idx;
  const apx_tensor *origins;
  const apx_tensor *levels;
  apx_overlap_mode mode;
  double blend_alpha;
  int assume_priority_sorted;
  int64_t tile;
  const apx_tensor *grad_base;
  const apx_tensor *grad_packed;
} apx_tileunpack_backward_args;
#define APX_TILEUNPACK_BACKWARD_ARGS_INIT                                      \
  {NULL, NULL, NULL, NULL, APX_OVERLAP_OVERRIDE, 0.5, 1, 8, NULL, NULL}
APX_API apx_status apx_tileunpack_backward(
    apx_context *ctx, const apx_tileunpack_backward_args *args,
    const apx_call *call);

/* docs/ops.md, fused_pack_op_unpack_backward. grad_features = grad_out times
 * the forward's derivative at features (1 outside the selected tiles), with
 * the forward's idx, tile, scalars and require_unique. grad_scalars* [4] float:
 * the gradients of value_scale, value_bias, gate_scale, gate_bias (NULL: not
 * asked for). grad_features may alias grad_out exactly. */
typedef struct apx_fused_pack_op_unpack_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *features;
  const apx_tensor *idx;
  int64_t tile;
  double value_scale, value_bias, gate_scale, gate_bias;
  int require_unique;
  const apx_tensor *grad_features;
  const apx_tensor *grad_scalars;
} apx_fused_pack_op_unpack_backward_args;
#define APX_FUSED_PACK_OP_UNPACK_BACKWARD_ARGS_INIT                            \
  {NULL, NULL, NULL, 8, 1.0, 0.0, 1.0, 0.0, 1, NULL, NULL}
APX_API apx_status apx_fused_pack_op_unpack_backward(
    apx_context *ctx, const apx_fused_pack_op_unpack_backward_args *args,
    const apx_call *call);

/* docs/ops.md, index_select_backward. grad_src = zeros, then grad_src[..,index[i],
 * ..] += grad_out[..,i,..] along dim for i in ascending order (fp32 sums from
 * zero, rounded once; integers exactly). grad_out any ndim >= 1, any dtype, N
 * at dim; index [N] i32|i64 in [0, M); grad_src index_select's src shape (the
 * caller's), M at dim, grad_out's extents elsewhere. dim as index_select's
 * (appended in libapexx 1). */
typedef struct apx_index_select_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *index;
  const apx_tensor *grad_src;
  int dim;
} apx_index_select_backward_args;
#define APX_INDEX_SELECT_BACKWARD_ARGS_INIT {NULL, NULL, NULL, 0}
APX_API apx_status apx_index_select_backward(
    apx_context *ctx, const apx_index_select_backward_args *args,
    const apx_call *call);

/* docs/ops.md, tile_order: the orders of apx_tile_order and apx_ff_infer. */
typedef enum apx_order_mode {
  APX_ORDER_HILBERT = 0,
  APX_ORDER_L2R = 1,
  APX_ORDER_R2L = 2,
  APX_ORDER_U2D = 3,
  APX_ORDER_D2U = 4,
  APX_ORDER_MULTI_DIRECTION = 5
} apx_order_mode;

/* ---- end-to-end FF inference (docs/ff_infer.md; docs/ops.md, ff_infer) ---------- */
/* Learned weights of the FF module (both tile levels), opaque. A handle
 * belongs to the context that made it and must be freed before it closes.
 * Backends convert it once per dtype and device they run it with and keep
 * the result in the handle (no per-call conversion or upload).
 * Lifetime with threads (docs/ff_weights.md, Lifetime): a handle may be
 * used by several threads at once. Every call that takes one (ff_infer,
 * apx_explain of ff_infer, save, free) first looks it up among its
 * context's open handles without dereferencing it, so a freed handle or
 * one of another context is refused with APX_ERR_INVALID_ARG ("... are not
 * an open handle of this context"); the call then holds the handle until it
 * returns, and apx_ff_weights_free waits for such calls before freeing. A
 * freed handle's address may be reused by a later handle, which a stale
 * pointer would then name: free a handle only when no thread will pass it
 * again. */
typedef struct apx_ff_weights apx_ff_weights;

/* Read a safetensors file whose tensor names are the state_dict() keys of
 * the seed's FFModule(channels=C) (docs/ff_weights.md): float32, float16 or
 * bfloat16 tensors; other tensors in the file are ignored. Rejects a
 * malformed file, a header over apexx's limits (16 MiB, docs/ff_weights.md,
 * Limits), a missing tensor, a wrong shape or a weight that is NaN or
 * infinite with APX_ERR_INVALID_ARG naming the problem, the tensor (and the
 * first bad index) and the file, in that order; a failed read of the file
 * is APX_ERR_IO. */
APX_API apx_status apx_ff_weights_load(apx_context *ctx, const char *path,
                                       apx_ff_weights **weights);
/* Weights for `channels` channels from the documented generator (splitmix64
 * of `seed`, docs/ff_weights.md): the same (channels, seed) gives the same
 * weights on every machine. channels in [1, 65536]. */
APX_API apx_status apx_ff_weights_seeded(apx_context *ctx, int64_t channels,
                                         uint64_t seed,
                                         apx_ff_weights **weights);
/* Write the weights as a safetensors file (float32, FFModule names);
 * atomically replaces a regular file or creates a new one. A failed write
 * (a full disk, a quota, a file size limit) is APX_ERR_IO with the system's
 * text, leaving the old file and no temporary. */
APX_API apx_status apx_ff_weights_save(apx_context *ctx,
                                       const apx_ff_weights *weights,
                                       const char *path);
/* Channel count C of the weights; 0 for NULL. */
APX_API int64_t apx_ff_weights_channels(const apx_ff_weights *weights);
/* Release the handle and every backend's converted copy, after the calls
 * using it on other threads return. NULL is a no-op; a handle that is not
 * open on ctx (freed already, or of another context) is left alone with a
 * warning in ctx's log. ctx NULL: the handle's own context. */
APX_API void apx_ff_weights_free(apx_context *ctx, apx_ff_weights *weights);

/* Routing results of one apx_ff_infer call, in caller-owned host arrays
 * (each pointer optional). For a call on a device the arrays are filled
 * before apx_ff_infer returns, which then synchronises its stream: leave
 * stats NULL in frames that must not wait (or that are captured). */
typedef struct apx_ff_stats {
  int64_t *selected_l0;   /* [B] L0 tiles selected per batch row */
  int64_t *selected_l1;   /* [B] L1 tiles (children) selected */
  double *budget_b1_spent; /* [B] */
  double *budget_b2_spent; /* [B] */
  int64_t *l0_ids; /* [B, kmax_l0]: greedy order, padded with -1 */
  int64_t *l1_ids; /* [B, kmax_l1]: Hilbert order, padded with -1 */
} apx_ff_stats;

/* docs/ops.md, ff_infer (docs/ff_infer.md): route tiles by utility, then run
 * the FF heavy path at tile level l0 on dense and at level l1 on its result
 * (pack in order_mode's order, Hilbert by default; token mean; scan_mode's
 * scan, by default bidirectional with the merge gate; FiLM; refine block;
 * overlap_mode's unpack, override by default; fusion gate).
 * dense [B,C,H,W] f32|f16|bf16; utilities, split_utilities* [B,G0] any float
 * dtype, G0 = (H/tile_l0)*(W/tile_l0), no NaN; boundary*, uncertainty*
 * [B,1,H,W] or [B,H,W] (absent: 1.0); heavy, detail [B,C,H,W] and alpha
 * [B,1,H,W] in dense's dtype, distinct from every input. tile_l1 =
 * tile_l0/2; kmax_l0 <= G0, kmax_l1 <= 4*G0; budgets >= 0; weights with C
 * channels. graph_replay (cuda): a call whose shapes, pointers and options
 * equal the previous such call on the same stream replays a captured CUDA
 * graph instead of launching kernels (the first call captures).
 * order_mode an apx_order_mode, overlap_mode an apx_overlap_mode,
 * blend_alpha in [0, 1] (not NaN; read in blend mode, checked always),
 * scan_mode APX_SCAN_BIDIRECTIONAL or APX_SCAN_FORWARD: anything else is
 * APX_ERR_INVALID_ARG naming the option and its value. */
typedef struct apx_ff_infer_args {
  const apx_tensor *dense;
  const apx_tensor *utilities;
  const apx_tensor *split_utilities;
  const apx_tensor *boundary;
  const apx_tensor *uncertainty;
  const apx_ff_weights *weights;
  int64_t tile_l0, tile_l1;
  int64_t kmax_l0, kmax_l1;
  double budget_b1, budget_b2;
  double cost_heavy, cost_cheap;
  int enable_nesting;
  int graph_replay;
  const apx_tensor *heavy;
  const apx_tensor *detail;
  const apx_tensor *alpha;
  apx_ff_stats *stats;
  /* The FFModule's options (docs/ff_infer.md, Options), appended with
   * libapexx.so.1: the order both levels pack and scan their ids in, the
   * levels' unpack (override, or blend with blend_alpha in [0, 1]) and
   * their scan (APX_SCAN_BIDIRECTIONAL with the gated merge, or
   * APX_SCAN_FORWARD: the forward stream alone; APX_SCAN_BACKWARD is
   * refused). The defaults are the frame before these options. */
  apx_order_mode order_mode;
  apx_overlap_mode overlap_mode;
  double blend_alpha;
  apx_scan_direction scan_mode;
} apx_ff_infer_args;
#define APX_FF_INFER_ARGS_INIT                                                                     \
  {                                                                                                \
    NULL, NULL, NULL, NULL, NULL, NULL, 16, 8, 32, 64, 16.0, 8.0, 1.0, 0.2, 1, 0, NULL, NULL,      \
        NULL, NULL, APX_ORDER_HILBERT, APX_OVERLAP_OVERRIDE, 0.5, APX_SCAN_BIDIRECTIONAL           \
  }
APX_API apx_status apx_ff_infer(apx_context *ctx, const apx_ff_infer_args *args,
                                const apx_call *call);

/* ---- backward ops (docs/ops.md: each beside its forward) ---------------------- */
/* docs/ops.md, fusiongate_fuse_backward. With g = grad_out [B,C,H,W]:
 * grad_base = g - g*alpha, grad_detail = g*alpha, grad_alpha = the sum over
 * the channels of g*(detail - base), in fp32 in channel order, rounded once.
 * grad_out, base, detail one float dtype, alpha as in fusiongate_fuse; the
 * gradients in the shapes and dtypes of base, detail and alpha, each
 * optional (NULL: not computed), overlapping nothing. */
typedef struct apx_fusiongate_fuse_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *base;
  const apx_tensor *detail;
  const apx_tensor *alpha;
  const apx_tensor *grad_base;
  const apx_tensor *grad_detail;
  const apx_tensor *grad_alpha;
} apx_fusiongate_fuse_backward_args;
#define APX_FUSIONGATE_FUSE_BACKWARD_ARGS_INIT                                 \
  {NULL, NULL, NULL, NULL, NULL, NULL, NULL}
APX_API apx_status apx_fusiongate_fuse_backward(
    apx_context *ctx, const apx_fusiongate_fuse_backward_args *args,
    const apx_call *call);

/* docs/ops.md, fusiongate_alpha_backward. The gradients of fusiongate_alpha
 * with the same proxies and scalars, given grad_out [B,1,H,W] (any float
 * dtype): grad_boundary, grad_uncertainty in the proxies' shape and dtype
 * (0 where a proxy was sanitised), and the gradients of the three scalars
 * as 0-d tensors of any float dtype, sums over every pixel in a fixed
 * order (fp32, rounded once). Every output optional, overlapping nothing. */
typedef struct apx_fusiongate_alpha_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *boundary;
  const apx_tensor *uncertainty;
  double boundary_log_weight, uncertainty_log_weight, bias;
  const apx_tensor *grad_boundary;
  const apx_tensor *grad_uncertainty;
  const apx_tensor *grad_boundary_log_weight;
  const apx_tensor *grad_uncertainty_log_weight;
  const apx_tensor *grad_bias;
} apx_fusiongate_alpha_backward_args;
#define APX_FUSIONGATE_ALPHA_BACKWARD_ARGS_INIT                                \
  {NULL, NULL, NULL, 1.0, 1.0, 0.0, NULL, NULL, NULL, NULL, NULL}
APX_API apx_status apx_fusiongate_alpha_backward(
    apx_context *ctx, const apx_fusiongate_alpha_backward_args *args,
    const apx_call *call);

/* docs/ops.md, tilessm_scan_backward. The gradients of tilessm_scan with the
 * same inputs and options, given grad_out [B,K,C] and grad_final_state*
 * (final_state's shape), both in the tokens dtype: the reverse-time adjoint
 * scan of each stream, fp32 state, sums over b and k in a fixed order.
 * grad_tokens [B,K,C]; grad_decay, grad_input_gain, grad_output_gain,
 * grad_state_bias [C]; grad_init_state in init_state's shape (absent:
 * final_state's); grad_merge_gate in merge_gate's shape when the gated merge
 * reads it, else [C] (zeros unless gated); each in its input's dtype, each
 * optional, overlapping nothing. */
typedef struct apx_tilessm_scan_backward_args {
  const apx_tensor *grad_out;
  const apx_tensor *tokens;
  const apx_tensor *decay;
  const apx_tensor *input_gain;
  const apx_tensor *output_gain;
  const apx_tensor *state_bias;
  const apx_tensor *init_state;
  const apx_tensor *merge_gate;
  const apx_tensor *grad_final_state;
  double clamp_value;
  apx_scan_direction direction;
  apx_scan_merge merge;
  const apx_tensor *grad_tokens;
  const apx_tensor *grad_decay;
  const apx_tensor *grad_input_gain;
  const apx_tensor *grad_output_gain;
  const apx_tensor *grad_state_bias;
  const apx_tensor *grad_init_state;
  const apx_tensor *grad_merge_gate;
} apx_tilessm_scan_backward_args;
#define APX_TILESSM_SCAN_BACKWARD_ARGS_INIT                                    \
  {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1e4,                  \
   APX_SCAN_FORWARD, APX_MERGE_AVG, NULL, NULL, NULL, NULL, NULL, NULL, NULL}
APX_API apx_status apx_tilessm_scan_backward(
    apx_context *ctx, const apx_tilessm_scan_backward_args *args,
    const apx_call *call);

/* docs/ops.md, tile_order. A host op in core (no dispatch): out = ids re-ordered by
 * the mode's key, stably. ids and out [K] i32|i64 host tensors of one dtype
 * (out may alias ids exactly); every id in [0, grid_h*grid_w). */
typedef struct apx_tile_order_args {
  const apx_tensor *ids;
  int64_t grid_h, grid_w;
  apx_order_mode mode;
  const apx_tensor *out;
} apx_tile_order_args;
#define APX_TILE_ORDER_ARGS_INIT {NULL, 0, 0, APX_ORDER_HILBERT, NULL}
APX_API apx_status apx_tile_order(apx_context *ctx,
                                  const apx_tile_order_args *args);
/* Parse "hilbert", "l2r" (lr, scan_lr), ... case-insensitively; -1 if none. */
APX_API int apx_order_mode_from_name(const char *name);

/* ---- introspection --------------------------------------------------------- */
#define APX_PASS_OVER_MAP(X)                                                   \
  X(DISABLED, disabled)                                                        \
  X(NOT_LOADED, not_loaded)                                                    \
  X(UNAVAILABLE, unavailable)                                                  \
  X(OP_UNSUPPORTED, op_unsupported)                                            \
  X(DTYPE_UNSUPPORTED, dtype_unsupported)                                      \
  X(DEVICE_MISMATCH, device_mismatch)                                          \
  X(NOT_FORCED, not_forced)

typedef enum apx_pass_over_code {
#define APX_PASS_OVER_ENUM_(upper, lower) APX_PASS_##upper,
  APX_PASS_OVER_MAP(APX_PASS_OVER_ENUM_)
#undef APX_PASS_OVER_ENUM_
  APX_PASS_COUNT
} apx_pass_over_code;

/* "disabled", "not_loaded", ...; NULL for an unknown value. */
APX_API const char *apx_pass_over_name(apx_pass_over_code code);

typedef struct apx_pass_over {
  const char *backend;
  apx_pass_over_code code;
  const char *reason; /* "<code>:<detail>" sentence, docs/ops.md, Dispatch */
} apx_pass_over;

#define APX_MAX_BACKENDS 16

typedef struct apx_explanation {
  const char *backend; /* chosen backend, NULL when none can run the call */
  int passed_over_count;
  apx_pass_over passed_over[APX_MAX_BACKENDS];
} apx_explanation;

/* The dispatch order of op: its [op NAME] order, else [apexx] order, then
 * any configured backend the order leaves out, in configuration order.
 * names receives up to APX_MAX_BACKENDS strings that live as long as ctx. */
APX_API apx_status apx_op_order(const apx_context *ctx, apx_op_id op,
                                const char **names, int *count);

/* Does configured backend i (0-based, as apx_backend_info) provide op? Sets
 * *provides to 1 when its loaded table has the op, else 0 (also for a
 * backend that did not load). */
APX_API apx_status apx_backend_provides(const apx_context *ctx, int i, apx_op_id op,
                                        int *provides);

/* The backend every call is forced to by APEXX_BACKEND, or NULL when none
 * (a call's own apx_call.backend still wins over it). */
APX_API const char *apx_forced_backend(const apx_context *ctx);

/* Which backend the call (op `op`, args of that op's struct type) would run
 * on, and why each other backend of the order was passed over. Validates
 * the arguments first (APX_ERR_INVALID_ARG as the op would). Returns
 * APX_ERR_UNSUPPORTED, with *out filled, when no backend can run it.
 * Strings live as long as ctx. */
APX_API apx_status apx_explain(apx_context *ctx, apx_op_id op, const void *args,
                               const apx_call *call, apx_explanation *out);

/* ---- op descriptors (docs/architecture.md, The op table) ------------------
 * Every op is described once, in the core: its arguments in the order of
 * its args struct (tensors with their role, dtype rule and layout; options
 * with their type), how its outputs' shapes follow from its inputs, the
 * range of its index tensors and what it can do. Validation, the Python
 * binding, apexx-bench and apexx-info read the description instead of
 * restating it. */
typedef enum apx_arg_kind {
  APX_ARG_INPUT = 0,  /* const apx_tensor *, read */
  APX_ARG_INDEX = 1,  /* const apx_tensor *, read: i32|i64 indices or
                         coordinates (a device backend checks their values) */
  APX_ARG_OUTPUT = 2, /* const apx_tensor *, written */
  APX_ARG_INT64 = 3,  /* int64_t */
  APX_ARG_DIM = 4,    /* int: a dimension, negative counts from the end */
  APX_ARG_DOUBLE = 5, /* double */
  APX_ARG_FLAG = 6,   /* int, 0 or 1 */
  APX_ARG_ENUM = 7,   /* an enum (stored as int): value i is enum_names[i] */
  APX_ARG_HANDLE = 8, /* a pointer to an object of type type_name */
  APX_ARG_RESULT = 9  /* a pointer to a caller's struct of type type_name that
                         the call fills (optional) */
} apx_arg_kind;

/* The dtype class a tensor argument must have. */
typedef enum apx_dtype_class {
  APX_DTYPES_ANY = 0,   /* any dtype */
  APX_DTYPES_FLOAT = 1, /* f32, f16 or bf16 */
  APX_DTYPES_INDEX = 2  /* i32 or i64 */
} apx_dtype_class;

/* One argument of an op. This struct is frozen: facts added later get an
 * array of their own in apx_op_desc. */
typedef struct apx_op_arg {
  const char *name;  /* the args struct's field; the name in messages */
  apx_arg_kind kind;
  size_t offset;     /* offsetof the field in the op's args struct */
  /* tensors (INPUT, INDEX, OUTPUT) */
  int optional;      /* may be NULL (absent); HANDLE and RESULT too */
  int ndim;          /* the rank it must have, or 0 when the op's own rule
                        says (one of several ranks, or another's rank) */
  apx_dtype_class dtypes;
  int same_dtype_as; /* argument index whose dtype it must equal, or -1 */
  int alias_of;      /* an output: the argument it may alias exactly, or -1 */
  const char *layout; /* "[B,C,H,W]"; the text of the op's shape rule */
  /* ENUM */
  const char *const *enum_names;
  int enum_count;
  /* HANDLE, RESULT: "apx_ff_weights", "apx_ff_stats" */
  const char *type_name;
} apx_op_arg;

/* Capability bits of an op. */
#define APX_OP_CAP_INDEX_TENSORS 0x1u /* has APX_ARG_INDEX arguments */
/* A device backend checks values the core cannot read in device memory
 * (indices, utilities) itself, by the [apexx] validate mode. */
#define APX_OP_CAP_DEVICE_CHECKS 0x2u
/* Capture-safe under validate = eager (nothing waits for the device to be
 * checked): the ops without device checks. */
#define APX_OP_CAP_EAGER_CAPTURE 0x4u

typedef struct apx_op_desc {
  uint32_t size;         /* sizeof(apx_op_desc) of the library; appended */
  apx_op_id id;
  const char *name;      /* "tilepack" */
  const char *summary;   /* one line */
  size_t args_size;      /* sizeof its args struct */
  const void *args_init; /* its APX_..._ARGS_INIT values, args_size bytes */
  int arg_count;
  const apx_op_arg *args; /* in the args struct's order */
  uint32_t caps;          /* APX_OP_CAP_* */
  /* The shape of output argument `arg` from the inputs in `args`: sets
   * *ndim and shape and returns the rule's text ("[B,K,C,t,t]", "the shape
   * of base"); NULL when the caller chooses the shape (gather_backward's
   * grad_src) or arg is no output. Safe on unvalidated args: a missing
   * input or dimension counts as 0 (validation then names the input). */
  const char *(*output_shape)(const void *args, int arg, int *ndim,
                              int64_t shape[APX_MAX_DIMS]);
  /* The range [lo, hi] of every value of index argument `arg` of validated
   * args, with where it comes from ("src.shape[1] = [4]", or "") in
   * why[why_size] (why_size 0: the range alone is asked, why is left as it
   * is); 0 when its values follow a rule of their own (tileunpack's origins
   * and levels: docs/ops.md). */
  int (*index_range)(const void *args, int arg, int64_t *lo, int64_t *hi,
                     char *why, size_t why_size);
} apx_op_desc;

/* The descriptor of op `op`; NULL for an unknown id. Read-only, static. */
APX_API const apx_op_desc *apx_op_describe(apx_op_id op);

/* Run op `op` with args of that op's struct type: the same as calling its
 * entry (apx_tilepack for APX_OP_TILEPACK, ...). */
APX_API apx_status apx_op_run(apx_context *ctx, apx_op_id op, const void *args,
                              const apx_call *call);

#ifdef __cplusplus
}
#endif
#endif /* APEXX_APEXX_H */
