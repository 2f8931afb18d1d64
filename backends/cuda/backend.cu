/* SPDX-License-Identifier: Apache-2.0 */
/* apexx-cuda.so: the plugin table, probe, state, device memory, copies,
 * synchronisation, event timers and device description (the plugin ABI:
 * include/apexx/backend.h). Ops live one per file beside this one.
 *
 * The module links cudart statically and no libcuda: the driver is reached
 * through the runtime, so the module dlopens on a machine without one and
 * the probe, not the loader, says what is missing. */
#include "config.h"

#include "cuda_backend.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>

#define CUDA_BACKEND_VERSION "0.1.0"

#include "arch_match.h"

/* ---- the allocation-size table (caller holds st->lock) ------------------ */

static size_t slot_of(const void *p, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)p;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (size_t)(h & (cap - 1));
}

static int sizes_grow(cuda_state *st) {
  size_t cap = st->sizes_cap ? st->sizes_cap * 2 : 256;
  cuda_state::cuda_alloc_entry *t =
      (cuda_state::cuda_alloc_entry *)calloc(cap, sizeof *t);
  if (!t) return 0;
  for (size_t i = 0; i < st->sizes_cap; i++) {
    if (!st->sizes[i].ptr) continue;
    size_t j = slot_of(st->sizes[i].ptr, cap);
    while (t[j].ptr) j = (j + 1) & (cap - 1);
    t[j] = st->sizes[i];
  }
  free(st->sizes);
  st->sizes = t;
  st->sizes_cap = cap;
  return 1;
}

static int sizes_put(cuda_state *st, void *p, size_t bytes) {
  if ((st->sizes_used + 1) * 2 > st->sizes_cap && !sizes_grow(st)) return 0;
  size_t j = slot_of(p, st->sizes_cap);
  while (st->sizes[j].ptr) j = (j + 1) & (st->sizes_cap - 1);
  st->sizes[j].ptr = p;
  st->sizes[j].bytes = bytes;
  st->sizes_used++;
  return 1;
}

/* Remove p; returns its size (0 when unknown). Backward-shift deletion
 * keeps the probe chains intact. */
static size_t sizes_take(cuda_state *st, void *p) {
  if (!st->sizes_cap) return 0;
  size_t mask = st->sizes_cap - 1, j = slot_of(p, st->sizes_cap);
  while (st->sizes[j].ptr && st->sizes[j].ptr != p) j = (j + 1) & mask;
  if (!st->sizes[j].ptr) return 0;
  size_t bytes = st->sizes[j].bytes;
  st->sizes[j].ptr = NULL;
  st->sizes_used--;
  for (size_t k = (j + 1) & mask; st->sizes[k].ptr; k = (k + 1) & mask) {
    size_t home = slot_of(st->sizes[k].ptr, st->sizes_cap);
    /* move k back into the hole j when its home is not in (j, k] */
    int in_range = j < k ? (home > j && home <= k) : (home > j || home <= k);
    if (!in_range) {
      st->sizes[j] = st->sizes[k];
      st->sizes[k].ptr = NULL;
      j = k;
    }
  }
  return bytes;
}

static void set_line(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_line(char *buf, size_t size, const char *fmt, ...) {
  if (!buf || size == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

apx_status cuda_fail(const cuda_state *st, cudaError_t err, const char *what) {
  apx_status status = APX_ERR_BACKEND;
  switch (err) {
  case cudaErrorMemoryAllocation: status = APX_ERR_NO_MEMORY; break;
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchTimeout:
  case cudaErrorECCUncorrectable: status = APX_ERR_DEVICE; break;
  default: break;
  }
  return st->svc->set_error(status, "cuda: %s: %s (%s)", what, cudaGetErrorName(err),
                            cudaGetErrorString(err));
}

/* ---- which code a device runs ---------------------------------------------- */

/* A kernel of the module that does nothing: the driver loads (or
 * JIT-compiles) its code for a device when asked for its attributes, as
 * it would any kernel of the module (every .cu is built for the same
 * archs). */
static __global__ void cuda_code_probe_kernel() {}

/* Can device `device` (cc major.minor) run the module's code? configure's
 * list (APEXX_CUDA_ARCHS, arch_match.c) first, then the driver: it may
 * still refuse (a PTX newer than the driver can JIT). On success
 * *code_arch is the arch of the code it runs (major * 10 + minor: 80 for
 * compute_80 JIT-compiled on an H100), what the sm_90 paths are chosen by;
 * else `reason` says why, naming the cc and the module's archs. */
static int code_for_device(int device, int major, int minor, int *code_arch, char *chosen,
                           size_t chosen_size, char *reason, size_t reason_size) {
  if (!cuda_arch_match(major, minor, APEXX_CUDA_ARCHS, chosen, chosen_size, code_arch, reason,
                       reason_size))
    return 0;
  cudaFuncAttributes fa;
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&fa, cuda_code_probe_kernel);
  if (current != device) cudaSetDevice(current);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    set_line(reason, reason_size,
             "the driver cannot load the module's code (it carries [%s]) for cc %d.%d: %s: %s",
             APEXX_CUDA_ARCHS, major, minor, cudaGetErrorName(err), cudaGetErrorString(err));
    return 0;
  }
  *code_arch = fa.ptxVersion > 0 ? fa.ptxVersion : fa.binaryVersion;
  return 1;
}

/* ---- probe ---------------------------------------------------------------- */

static int cuda_probe(char *reason, size_t reason_size, char *device_desc,
                      size_t device_desc_size) {
  set_line(reason, reason_size, "%s", "");
  set_line(device_desc, device_desc_size, "%s", "");
  /* Look for the driver ourselves first: cudart's own message for a missing
   * driver does not say which library it wanted. */
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    const char *why = dlerror(); /* copied at once: it is global and fleeting */
    set_line(reason, reason_size, "no CUDA driver: libcuda.so.1 not found (%s)",
             why ? why : "dlopen failed");
    return 0;
  }
  dlclose(driver);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    set_line(reason, reason_size, "no CUDA device (%s)",
             err == cudaSuccess ? "the driver reports 0 devices" : cudaGetErrorString(err));
    return 0;
  }
  if (err != cudaSuccess) {
    set_line(reason, reason_size, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
    return 0;
  }
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    set_line(reason, reason_size, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
    return 0;
  }
  char chosen[32], why[400];
  int code_arch = 0;
  if (!code_for_device(0, prop.major, prop.minor, &code_arch, chosen, sizeof chosen, why,
                       sizeof why)) {
    set_line(reason, reason_size, "device 0 (%s): %s", prop.name, why);
    return 0;
  }
  set_line(device_desc, device_desc_size, "%s, cc %d.%d, %d SMs, code %s%s%s", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, chosen,
           strncmp(chosen, "compute_", 8) == 0 ? " (JIT)" : "",
           count > 1 ? " (device 0 of several)" : "");
  return 1;
}

/* ---- state ---------------------------------------------------------------- */

static apx_status cuda_init(const apx_core_services *svc, void **state) {
  cuda_state *st = new (std::nothrow) cuda_state();
  if (!st) return svc->set_error(APX_ERR_NO_MEMORY, "cuda: out of host memory");
  st->svc = svc;
  st->validate_mode = svc->validate_mode;
  /* cuda_keys, checked and typed by the core (older cores: the defaults) */
  int has_typed = svc->size >= offsetof(apx_core_services, device_index) + sizeof svc->device_index;
  int pdl = 1;
  if (has_typed && svc->config_bool) svc->config_bool(svc->core, "pdl", &pdl);
  st->pdl = pdl;
  pthread_mutex_init(&st->lock, NULL);
  cudaError_t err = cudaGetDeviceCount(&st->device_count);
  if (err != cudaSuccess) {
    apx_status s = cuda_fail(st, err, "init: cudaGetDeviceCount");
    pthread_mutex_destroy(&st->lock);
    delete st;
    return s;
  }
  if (st->device_count > CUDA_MAX_DEVICES) st->device_count = CUDA_MAX_DEVICES;
  st->default_device = 0;
  if (has_typed) {
    /* the core parsed `device`; whether this machine has that device is ours */
    int v = svc->device_index;
    if (v < 0 || v >= st->device_count) {
      int count = st->device_count;
      pthread_mutex_destroy(&st->lock);
      delete st;
      return svc->set_error(APX_ERR_CONFIG,
                            "cuda: [backend cuda] device = [%d] is not a device ordinal in "
                            "[0, %d]",
                            v, count - 1);
    }
    st->default_device = v;
  }
  apx_status s = cuda_use_device(st, st->default_device);
  if (s != APX_OK) {
    pthread_mutex_destroy(&st->lock);
    delete st;
    return s;
  }
  *state = st;
  return APX_OK;
}

static void cuda_fini(void *state) {
  cuda_state *st = (cuda_state *)state;
  if (!st) return;
  cuda_ff_fini(st);
  for (int d = 0; d < st->device_count; d++) {
    cuda_device_res *r = &st->dev[d];
    if (r->record || r->slots || r->pool) {
      cudaSetDevice(d);
      cudaFree(r->record);
      cudaFree(r->slots);
      if (r->pool) cudaMemPoolDestroy(r->pool); /* freed once its last block is */
    }
  }
  free(st->sizes);
  pthread_mutex_destroy(&st->lock);
  delete st;
}

static void create_device_res(cuda_state *st, int device_index) {
  cuda_device_res *r = &st->dev[device_index];
  cudaError_t err = cudaSetDevice(device_index);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&r->sm_count, cudaDevAttrMultiProcessorCount, device_index);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&r->cc_major, cudaDevAttrComputeCapabilityMajor, device_index);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&r->cc_minor, cudaDevAttrComputeCapabilityMinor, device_index);
  if (err == cudaSuccess) {
    char chosen[32];
    r->no_code = !code_for_device(device_index, r->cc_major, r->cc_minor, &r->code_arch, chosen,
                                  sizeof chosen, r->no_code_reason, sizeof r->no_code_reason);
    if (r->no_code) {
      r->init_error = cudaErrorNoKernelImageForDevice;
      return;
    }
  }
  if (err == cudaSuccess) err = cudaMalloc((void **)&r->record, sizeof(cuda_error_record));
  if (err == cudaSuccess) err = cudaMemset(r->record, 0, sizeof(cuda_error_record));
  if (err == cudaSuccess)
    err = cudaMalloc((void **)&r->slots, sizeof(cuda_check_slot) * CUDA_CHECK_SLOTS);
  if (err == cudaSuccess)
    err = cudaMemset(r->slots, 0, sizeof(cuda_check_slot) * CUDA_CHECK_SLOTS);
  if (err == cudaSuccess) {
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_index;
    err = cudaMemPoolCreate(&r->pool, &props);
    if (err != cudaSuccess) r->pool = NULL;
  }
  if (err == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    err = cudaMemPoolSetAttribute(r->pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  r->init_error = err;
}

apx_status cuda_use_device(cuda_state *st, int device_index) {
  if (device_index < 0 || device_index >= st->device_count)
    return st->svc->set_error(APX_ERR_INVALID_ARG,
                              "cuda: device_index = [%d] is outside [0, %d]", device_index,
                              st->device_count - 1);
  cuda_device_res *r = &st->dev[device_index];
  pthread_mutex_lock(&st->lock);
  if (!r->created) {
    create_device_res(st, device_index);
    r->created = 1;
  }
  pthread_mutex_unlock(&st->lock);
  if (r->no_code)
    return st->svc->set_error(APX_ERR_BACKEND, "cuda: device [%d]: %s", device_index,
                              r->no_code_reason);
  if (r->init_error != cudaSuccess) return cuda_fail(st, r->init_error, "device setup");
  CUDA_TRY(st, cudaSetDevice(device_index), "cudaSetDevice");
  return APX_OK;
}

/* ---- which calls it takes ------------------------------------------------- */

/* Every op takes f32/f16/bf16 floats and i32/i64 indices (the core's dtype
 * rules); gather, index_select and scatter_add also take integer data. The
 * core has already checked all of that, so nothing is refused here beyond
 * what the core lets through: a NULL supports would say the same. */
static int cuda_supports(void *state, apx_op_id op, const void *args,
                         apx_pass_over_code *code, char *reason, size_t reason_size) {
  if (op == APX_OP_FF_INFER)
    return cuda_ff_supports((cuda_state *)state, (const apx_ff_infer_args *)args, code, reason,
                            reason_size);
  if ((int)op < 0 || op >= APX_OP_COUNT) {
    *code = APX_PASS_OP_UNSUPPORTED;
    set_line(reason, reason_size, "op_unsupported:cuda has no op %d", (int)op);
    return 0;
  }
  return 1;
}

/* ---- memory --------------------------------------------------------------- */

static apx_status cuda_alloc(void *state, int device_index, size_t bytes, void **ptr) {
  cuda_state *st = (cuda_state *)state;
  *ptr = NULL;
  apx_status s = cuda_use_device(st, device_index);
  if (s != APX_OK) return s;
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    if (err == cudaErrorMemoryAllocation)
      return st->svc->set_error(APX_ERR_NO_MEMORY,
                                "cuda: cudaMalloc of [%zu] bytes on device [%d] failed: %s",
                                bytes, device_index, cudaGetErrorString(err));
    return cuda_fail(st, err, "alloc: cudaMalloc");
  }
  pthread_mutex_lock(&st->lock);
  int recorded = sizes_put(st, p, bytes);
  pthread_mutex_unlock(&st->lock);
  if (!recorded) {
    cudaFree(p);
    return st->svc->set_error(APX_ERR_NO_MEMORY, "cuda: out of host memory");
  }
  cuda_device_res *r = &st->dev[device_index];
  uint64_t now = r->in_use_bytes.fetch_add(bytes) + bytes;
  uint64_t peak = r->peak_bytes.load();
  while (now > peak && !r->peak_bytes.compare_exchange_weak(peak, now)) {
  }
  *ptr = p;
  return APX_OK;
}

static void cuda_free(void *state, int device_index, void *ptr) {
  cuda_state *st = (cuda_state *)state;
  if (!ptr || device_index < 0 || device_index >= st->device_count) return;
  pthread_mutex_lock(&st->lock);
  size_t bytes = sizes_take(st, ptr);
  pthread_mutex_unlock(&st->lock);
  cudaSetDevice(device_index);
  cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess)
    st->svc->log(st->svc->core, APX_LOG_WARN, "cuda: cudaFree: %s (%s)", cudaGetErrorName(err),
                 cudaGetErrorString(err));
  st->dev[device_index].in_use_bytes.fetch_sub(bytes);
}

static apx_status cuda_copy(void *state, void *dst, apx_device dst_device, int dst_index,
                            const void *src, apx_device src_device, int src_index,
                            size_t bytes, void *stream) {
  cuda_state *st = (cuda_state *)state;
  if (bytes == 0) return APX_OK;
  cudaMemcpyKind kind;
  int device_index;
  if (dst_device == APX_DEVICE_CUDA && src_device == APX_DEVICE_CUDA) {
    kind = cudaMemcpyDeviceToDevice;
    device_index = src_index;
  } else if (dst_device == APX_DEVICE_CUDA) {
    kind = cudaMemcpyHostToDevice;
    device_index = dst_index;
  } else if (src_device == APX_DEVICE_CUDA) {
    kind = cudaMemcpyDeviceToHost;
    device_index = src_index;
  } else {
    kind = cudaMemcpyHostToHost;
    device_index = st->default_device;
  }
  apx_status s = cuda_use_device(st, device_index);
  if (s != APX_OK) return s;
  if (kind == cudaMemcpyDeviceToDevice && dst_index != src_index) {
    if (stream) {
      CUDA_TRY(st, cudaMemcpyPeerAsync(dst, dst_index, src, src_index, bytes,
                                       (cudaStream_t)stream), "copy: cudaMemcpyPeerAsync");
    } else {
      CUDA_TRY(st, cudaMemcpyPeer(dst, dst_index, src, src_index, bytes), "copy: cudaMemcpyPeer");
    }
    return APX_OK;
  }
  if (stream) {
    CUDA_TRY(st, cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)stream),
             "copy: cudaMemcpyAsync");
  } else {
    CUDA_TRY(st, cudaMemcpy(dst, src, bytes, kind), "copy: cudaMemcpy");
  }
  return APX_OK;
}

static apx_status cuda_sync(void *state, int device_index, void *stream) {
  cuda_state *st = (cuda_state *)state;
  apx_status s = cuda_use_device(st, device_index);
  if (s != APX_OK) return s;
  if (stream) {
    CUDA_TRY(st, cudaStreamSynchronize((cudaStream_t)stream), "sync: cudaStreamSynchronize");
  } else {
    CUDA_TRY(st, cudaDeviceSynchronize(), "sync: cudaDeviceSynchronize");
  }
  return cuda_check_take_deferred(st, device_index, (cudaStream_t)stream);
}

static uint64_t cuda_peak_bytes(void *state, int device_index) {
  cuda_state *st = (cuda_state *)state;
  if (device_index < 0 || device_index >= st->device_count) return 0;
  return st->dev[device_index].peak_bytes.load();
}

static void cuda_reset_peak(void *state, int device_index) {
  cuda_state *st = (cuda_state *)state;
  if (device_index < 0 || device_index >= st->device_count) return;
  cuda_device_res *r = &st->dev[device_index];
  r->peak_bytes.store(r->in_use_bytes.load());
}

/* ---- timer: events on the call's stream ----------------------------------- */

struct cuda_timer {
  cudaEvent_t start, stop;
  cudaStream_t stream;
  int device_index;
};

static apx_status cuda_timer_begin(void *state, int device_index, void *stream, void **timer) {
  cuda_state *st = (cuda_state *)state;
  *timer = NULL;
  apx_status s = cuda_use_device(st, device_index);
  if (s != APX_OK) return s;
  cuda_timer *t = new (std::nothrow) cuda_timer();
  if (!t) return st->svc->set_error(APX_ERR_NO_MEMORY, "cuda: out of host memory");
  t->stream = (cudaStream_t)stream;
  t->device_index = device_index;
  cudaError_t err = cudaEventCreate(&t->start);
  if (err == cudaSuccess) {
    err = cudaEventCreate(&t->stop);
    if (err != cudaSuccess) cudaEventDestroy(t->start);
  }
  if (err == cudaSuccess) {
    err = cudaEventRecord(t->start, t->stream);
    if (err != cudaSuccess) {
      cudaEventDestroy(t->start);
      cudaEventDestroy(t->stop);
    }
  }
  if (err != cudaSuccess) {
    delete t;
    return cuda_fail(st, err, "timer_begin");
  }
  *timer = t;
  return APX_OK;
}

static apx_status cuda_timer_end(void *state, void *timer, double *elapsed_ms) {
  cuda_state *st = (cuda_state *)state;
  cuda_timer *t = (cuda_timer *)timer;
  *elapsed_ms = 0.0;
  if (!t) return st->svc->set_error(APX_ERR_INVALID_ARG, "cuda: timer_end: timer is NULL");
  cudaSetDevice(t->device_index);
  float ms = 0.0f;
  cudaError_t err = cudaEventRecord(t->stop, t->stream);
  if (err == cudaSuccess) err = cudaEventSynchronize(t->stop);
  if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, t->start, t->stop);
  cudaEventDestroy(t->start);
  cudaEventDestroy(t->stop);
  delete t;
  if (err != cudaSuccess) return cuda_fail(st, err, "timer_end");
  *elapsed_ms = ms;
  return APX_OK;
}

static apx_status cuda_device_info(void *state, int index, struct apx_device_info *info) {
  cuda_state *st = (cuda_state *)state;
  memset(info, 0, sizeof *info);
  if (index < 0 || index >= st->device_count)
    return st->svc->set_error(APX_ERR_INVALID_ARG, "cuda: device index = [%d] is outside [0, %d]",
                              index, st->device_count - 1);
  cudaDeviceProp prop;
  CUDA_TRY(st, cudaGetDeviceProperties(&prop, index), "device_info: cudaGetDeviceProperties");
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->total_memory_bytes = (uint64_t)prop.totalGlobalMem;
  info->multiprocessors = prop.multiProcessorCount;
  CUDA_TRY(st, cudaDriverGetVersion(&info->driver_version), "device_info: cudaDriverGetVersion");
  CUDA_TRY(st, cudaRuntimeGetVersion(&info->runtime_version),
           "device_info: cudaRuntimeGetVersion");
  return APX_OK;
}

/* ---- workspace -------------------------------------------------------------- */

apx_status cuda_ws_alloc(cuda_state *st, cudaStream_t stream, size_t bytes, cuda_workspace *ws,
                         const char *what) {
  ws->ptr = NULL;
  ws->stream = stream;
  if (bytes == 0) return APX_OK;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev); /* made current by cuda_use_device */
  if (err == cudaSuccess)
    err = cudaMallocFromPoolAsync(&ws->ptr, bytes, st->dev[dev].pool, stream);
  if (err != cudaSuccess) {
    ws->ptr = NULL;
    return cuda_fail(st, err, what);
  }
  return APX_OK;
}

void cuda_ws_free(cuda_workspace *ws) {
  if (ws->ptr) cudaFreeAsync(ws->ptr, ws->stream);
  ws->ptr = NULL;
}

/* ---- the table ------------------------------------------------------------ */

/* [backend cuda] keys (the core's `device` is not declared here). */
static const apx_backend_key cuda_keys[] = {
    {"pdl", APX_KEY_BOOL, 0, 0, "yes",
     "programmatic dependent launch between a call's kernels on cc >= 9.0", "APEXX_CUDA_PDL"},
};

/* Every op, in APX_OP_MAP's order: cuda_NAME in the files beside this one. */
static const apx_backend_ops cuda_ops = {
    (uint32_t)sizeof(apx_backend_ops),
#define CUDA_OP_ENTRY_(upper, lower) cuda_##lower,
    APX_OP_MAP(CUDA_OP_ENTRY_)
#undef CUDA_OP_ENTRY_
};

static const apx_backend_table cuda_table = {
    APX_BACKEND_ABI_VERSION,
    (uint32_t)sizeof(apx_backend_table),
    "cuda",
    CUDA_BACKEND_VERSION,
    APX_DEVICE_CUDA,
    cuda_probe,
    cuda_init,
    cuda_fini,
    cuda_supports,
    cuda_alloc,
    cuda_free,
    cuda_copy,
    cuda_sync,
    cuda_peak_bytes,
    cuda_reset_peak,
    cuda_timer_begin,
    cuda_timer_end,
    cuda_device_info,
    &cuda_ops,
    cuda_keys,
    (uint32_t)(sizeof cuda_keys / sizeof cuda_keys[0]),
    NULL,
    0,
    cuda_graph_begin,
    cuda_graph_end,
    cuda_graph_replay,
    cuda_graph_free,
};

extern "C" APX_BACKEND_EXPORT const apx_backend_table *apx_backend_entry(void) {
  return &cuda_table;
}
