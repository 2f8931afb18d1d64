/* SPDX-License-Identifier: Apache-2.0 */
/* Tensors' memory, synchronisation, peaks, timers and device descriptions,
 * each through the backend that owns the device kind (host memory is the
 * core's own: 64-byte aligned, tracked for the peak figure). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define HOST_ALIGN 64u

/* Host blocks carry their size in a 64-byte header so free can account. */
static void *host_alloc(apx_context *ctx, size_t bytes) {
  size_t total = HOST_ALIGN + (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
  unsigned char *block = aligned_alloc(HOST_ALIGN, total);
  if (!block) return NULL;
  memcpy(block, &bytes, sizeof bytes);
  pthread_mutex_lock(&ctx->lock);
  ctx->host_bytes_in_use += bytes;
  if (ctx->host_bytes_in_use > ctx->host_peak_bytes) ctx->host_peak_bytes = ctx->host_bytes_in_use;
  pthread_mutex_unlock(&ctx->lock);
  return block + HOST_ALIGN;
}

static void host_free(apx_context *ctx, void *ptr) {
  unsigned char *block = (unsigned char *)ptr - HOST_ALIGN;
  size_t bytes;
  memcpy(&bytes, block, sizeof bytes);
  pthread_mutex_lock(&ctx->lock);
  ctx->host_bytes_in_use -= bytes;
  pthread_mutex_unlock(&ctx->lock);
  free(block);
}

static apx_status check_shape(const char *fn, apx_dtype dtype, int ndim,
                              const int64_t *shape, size_t *bytes) {
  if (!apx_dtype_name(dtype))
    return apx__error(APX_ERR_INVALID_ARG, "%s: dtype = [%d] is not an apx_dtype", fn, (int)dtype);
  if (ndim < 0 || ndim > APX_MAX_DIMS)
    return apx__error(APX_ERR_INVALID_ARG, "%s: ndim = [%d] is outside [0, %d]", fn, ndim,
                      APX_MAX_DIMS);
  if (ndim > 0 && !shape) return apx__error(APX_ERR_INVALID_ARG, "%s: shape = [NULL]", fn);
  uint64_t n = apx_dtype_size(dtype);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return apx__error(APX_ERR_INVALID_ARG, "%s: shape[%d] = [%lld] is negative", fn, i,
                        (long long)shape[i]);
    if (shape[i] && n > (UINT64_MAX >> 1) / (uint64_t)shape[i])
      return apx__error(APX_ERR_INVALID_ARG, "%s: shape[%d] = [%lld] overflows the size", fn, i,
                        (long long)shape[i]);
    n *= (uint64_t)shape[i];
  }
  *bytes = (size_t)n;
  return APX_OK;
}

APX_API apx_status apx_tensor_alloc(apx_context *ctx, apx_device device, int device_index,
                                    apx_dtype dtype, int ndim, const int64_t *shape,
                                    apx_tensor *out) {
  apx__clear_error();
  if (!ctx || !out) return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_alloc: NULL argument");
  size_t bytes;
  apx_status st = check_shape("apx_tensor_alloc", dtype, ndim, shape, &bytes);
  if (st != APX_OK) return st;
  if (!apx_device_name(device))
    return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_alloc: device = [%d] is not an apx_device",
                      (int)device);
  apx_tensor t = apx_tensor_host(NULL, dtype, ndim, shape);
  t.device = device;
  t.device_index = device == APX_DEVICE_HOST ? 0 : device_index;
  if (device == APX_DEVICE_HOST) {
    t.data = host_alloc(ctx, bytes);
    if (!t.data)
      return apx__error(APX_ERR_NO_MEMORY, "apx_tensor_alloc: %zu host bytes not available", bytes);
  } else {
    apx__backend *b = apx__backend_for_device(ctx, device);
    if (!b) return APX_ERR_UNSUPPORTED;
    /* docs/graph.md: a device allocation would break the thread's capture */
    st = apx__graph_waits_refused(ctx, "apx_tensor_alloc", b->config->name, NULL,
                                  "device memory is not allocated while it captures "
                                  "(allocate before apx_graph_begin)");
    if (st != APX_OK) return st;
    st = b->table->alloc(b->state_ptr, device_index, bytes, &t.data);
    if (st != APX_OK) return st;
  }
  *out = t;
  return APX_OK;
}

APX_API apx_status apx_tensor_free(apx_context *ctx, apx_tensor *t) {
  apx__clear_error();
  if (!ctx || !t) return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_free: NULL argument");
  if (!t->data) return APX_OK;
  if (t->device == APX_DEVICE_HOST) {
    host_free(ctx, t->data);
  } else {
    apx__backend *b = apx__backend_for_device(ctx, t->device);
    if (!b) return APX_ERR_UNSUPPORTED;
    apx_status st = apx__graph_waits_refused(ctx, "apx_tensor_free", b->config->name, NULL,
                                             "device memory is not freed while it captures "
                                             "(free it after apx_graph_end)");
    if (st != APX_OK) return st;
    b->table->free(b->state_ptr, t->device_index, t->data);
  }
  t->data = NULL;
  return APX_OK;
}

APX_API apx_status apx_tensor_copy(apx_context *ctx, const apx_tensor *dst,
                                   const apx_tensor *src, const apx_call *call) {
  apx__clear_error();
  if (!ctx || !dst || !src)
    return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_copy: NULL argument");
  if (dst->dtype != src->dtype)
    return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_copy: dst dtype [%s] differs from src [%s]",
                      apx_dtype_name(dst->dtype) ? apx_dtype_name(dst->dtype) : "?",
                      apx_dtype_name(src->dtype) ? apx_dtype_name(src->dtype) : "?");
  size_t dst_bytes, src_bytes;
  apx_status st = check_shape("apx_tensor_copy: dst", dst->dtype, dst->ndim, dst->shape, &dst_bytes);
  if (st == APX_OK) st = check_shape("apx_tensor_copy: src", src->dtype, src->ndim, src->shape, &src_bytes);
  if (st != APX_OK) return st;
  if (dst_bytes != src_bytes)
    return apx__error(APX_ERR_INVALID_ARG,
                      "apx_tensor_copy: dst has [%lld] elements, src [%lld]",
                      (long long)apx_tensor_numel(dst), (long long)apx_tensor_numel(src));
  if (dst_bytes == 0) return APX_OK;
  if (!dst->data || !src->data)
    return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_copy: %s data = [NULL]",
                      !dst->data ? "dst" : "src");
  if (dst->device == APX_DEVICE_HOST && src->device == APX_DEVICE_HOST) {
    memmove(dst->data, src->data, dst_bytes);
    return APX_OK;
  }
  apx_device device = dst->device != APX_DEVICE_HOST ? dst->device : src->device;
  if (dst->device != APX_DEVICE_HOST && src->device != APX_DEVICE_HOST && dst->device != src->device)
    return apx__error(APX_ERR_INVALID_ARG, "apx_tensor_copy: %s to %s is not supported",
                      apx_device_name(src->device), apx_device_name(dst->device));
  apx__backend *b = apx__backend_for_device(ctx, device);
  if (!b) return APX_ERR_UNSUPPORTED;
  /* docs/graph.md: a capture records device-to-device copies only */
  void *stream = call ? call->stream : NULL;
  if (!stream || dst->device == APX_DEVICE_HOST || src->device == APX_DEVICE_HOST) {
    st = apx__graph_waits_refused(ctx, "apx_tensor_copy", b->config->name, stream,
                                  stream ? "a copy with host memory cannot be captured"
                                         : "a copy without a stream waits for the device");
    if (st != APX_OK) return st;
  }
  return b->table->copy(b->state_ptr, dst->data, dst->device, dst->device_index, src->data,
                        src->device, src->device_index, dst_bytes, call ? call->stream : NULL);
}

APX_API apx_status apx_sync(apx_context *ctx, const apx_call *call) {
  apx__clear_error();
  if (!ctx) return apx__error(APX_ERR_INVALID_ARG, "apx_sync: ctx = [NULL]");
  if (call && call->backend && !apx__backend_find(ctx, call->backend))
    return apx__error(APX_ERR_INVALID_ARG, "apx_sync: backend = [%s] is not configured",
                      call->backend);
  apx_status first = apx__graph_waits_refused(ctx, "apx_sync", call ? call->backend : NULL,
                                              call ? call->stream : NULL,
                                              "apx_sync waits for the device");
  if (first != APX_OK) return first;
  char message[1024] = "";
  for (int i = 0; i < ctx->backend_count; i++) {
    apx__backend *b = &ctx->backends[i];
    if (call && call->backend && strcmp(call->backend, b->config->name) != 0) continue;
    if (b->state != APX_BACKEND_OK || !b->table->sync) continue;
    apx_status st = b->table->sync(b->state_ptr, b->config->device_index,
                                   call ? call->stream : NULL);
    if (st != APX_OK && first == APX_OK) {
      first = st;
      apx__strlcpy(message, apx_last_error(), sizeof message);
    }
  }
  if (first != APX_OK) return apx__error(first, "%s", message);
  return APX_OK;
}

static apx_status named_backend(apx_context *ctx, const char *fn, const char *name,
                                apx__backend **out) {
  apx__backend *b = name ? apx__backend_find(ctx, name) : NULL;
  *out = NULL;
  if (!b)
    return apx__error(APX_ERR_INVALID_ARG, "%s: backend = [%s] is not configured", fn,
                      name ? name : "NULL");
  if (b->state != APX_BACKEND_OK)
    return apx__error(APX_ERR_UNSUPPORTED, "%s: backend %s is %s: %s", fn, name,
                      apx_backend_state_name(b->state), b->reason);
  *out = b;
  return APX_OK;
}

APX_API apx_status apx_peak_memory(apx_context *ctx, const char *backend, uint64_t *peak_bytes) {
  apx__clear_error();
  if (!ctx || !peak_bytes) return apx__error(APX_ERR_INVALID_ARG, "apx_peak_memory: NULL argument");
  apx__backend *b;
  apx_status st = named_backend(ctx, "apx_peak_memory", backend, &b);
  if (st != APX_OK) return st;
  if (b->table->device == APX_DEVICE_HOST) {
    pthread_mutex_lock(&ctx->lock);
    *peak_bytes = ctx->host_peak_bytes;
    pthread_mutex_unlock(&ctx->lock);
    return APX_OK;
  }
  if (!b->table->peak_bytes)
    return apx__error(APX_ERR_UNSUPPORTED, "apx_peak_memory: backend %s does not track peaks", backend);
  *peak_bytes = b->table->peak_bytes(b->state_ptr, b->config->device_index);
  return APX_OK;
}

APX_API apx_status apx_reset_peak_memory(apx_context *ctx, const char *backend) {
  apx__clear_error();
  if (!ctx) return apx__error(APX_ERR_INVALID_ARG, "apx_reset_peak_memory: ctx = [NULL]");
  apx__backend *b;
  apx_status st = named_backend(ctx, "apx_reset_peak_memory", backend, &b);
  if (st != APX_OK) return st;
  if (b->table->device == APX_DEVICE_HOST) {
    pthread_mutex_lock(&ctx->lock);
    ctx->host_peak_bytes = ctx->host_bytes_in_use;
    pthread_mutex_unlock(&ctx->lock);
    return APX_OK;
  }
  if (b->table->reset_peak) b->table->reset_peak(b->state_ptr, b->config->device_index);
  return APX_OK;
}

struct apx_timer {
  apx__backend *backend;
  void *handle;
};

APX_API apx_status apx_timer_begin(apx_context *ctx, const char *backend, const apx_call *call,
                                   apx_timer **timer) {
  apx__clear_error();
  if (!ctx || !timer) return apx__error(APX_ERR_INVALID_ARG, "apx_timer_begin: NULL argument");
  *timer = NULL;
  apx__backend *b;
  apx_status st = named_backend(ctx, "apx_timer_begin", backend, &b);
  if (st != APX_OK) return st;
  /* a timer's end waits for its stream */
  st = apx__graph_waits_refused(ctx, "apx_timer_begin", b->config->name,
                                call ? call->stream : NULL, "a timer waits for its stream");
  if (st != APX_OK) return st;
  if (!b->table->timer_begin || !b->table->timer_end)
    return apx__error(APX_ERR_UNSUPPORTED, "apx_timer_begin: backend %s has no timer", backend);
  apx_timer *t = calloc(1, sizeof *t);
  if (!t) return apx__error(APX_ERR_NO_MEMORY, "apx_timer_begin: out of memory");
  t->backend = b;
  st = b->table->timer_begin(b->state_ptr, b->config->device_index,
                                        call ? call->stream : NULL, &t->handle);
  if (st != APX_OK) {
    free(t);
    return st;
  }
  *timer = t;
  return APX_OK;
}

APX_API apx_status apx_timer_end(apx_context *ctx, apx_timer *timer, double *elapsed_ms) {
  apx__clear_error();
  if (!timer) return apx__error(APX_ERR_INVALID_ARG, "apx_timer_end: timer = [NULL]");
  /* the timer is freed on every path: the caller cannot free it */
  apx__backend *b = timer->backend;
  double ignored;
  apx_status st = b->table->timer_end(b->state_ptr, timer->handle,
                                      elapsed_ms ? elapsed_ms : &ignored);
  free(timer);
  if (!ctx || !elapsed_ms)
    return apx__error(APX_ERR_INVALID_ARG, "apx_timer_end: %s = [NULL] (the timer is freed)",
                      !ctx ? "ctx" : "elapsed_ms");
  return st;
}

static void host_cpu_name(char *name, size_t size) {
  apx__strlcpy(name, "unknown CPU", size);
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *colon = strchr(line, ':');
      if (colon) {
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        colon[strcspn(colon, "\n")] = '\0';
        apx__strlcpy(name, colon, size);
      }
      break;
    }
  }
  fclose(f);
}

APX_API apx_status apx_device_info(apx_context *ctx, apx_device device, int index,
                                   struct apx_device_info *info) {
  apx__clear_error();
  if (!ctx || !info) return apx__error(APX_ERR_INVALID_ARG, "apx_device_info: NULL argument");
  memset(info, 0, sizeof *info);
  if (device == APX_DEVICE_HOST) {
    if (index != 0)
      return apx__error(APX_ERR_INVALID_ARG,
                        "apx_device_info: index = [%d] for host (the host is device 0)", index);
    host_cpu_name(info->name, sizeof info->name);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) info->total_memory_bytes = (uint64_t)pages * (uint64_t)page;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    info->multiprocessors = cores > 0 ? (int)cores : 1;
    return APX_OK;
  }
  apx__backend *b = apx__backend_for_device(ctx, device);
  if (!b) return APX_ERR_UNSUPPORTED;
  if (!b->table->device_info)
    return apx__error(APX_ERR_UNSUPPORTED, "apx_device_info: backend %s cannot describe devices",
                      b->config->name);
  return b->table->device_info(b->state_ptr, index, info);
}
