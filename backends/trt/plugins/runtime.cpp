/* SPDX-License-Identifier: Apache-2.0 */
// The plugins' access to the cuda backend's kernels, error reporting and
// TensorRT's logger. The cuda backend's objects are linked into this
// library: its table (apx_backend_entry of backends/cuda/backend.cu) is
// initialised once with the small services table below, which stands in
// for libapexx's (no configuration file, messages kept per thread).
#include "config.h"

#include "plugin.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

extern "C" const apx_backend_table *apx_backend_entry(void);
// the cuda backend's latch (backends/cuda/validate.cu)
extern "C" size_t apx__cuda_latch_size(void);
extern "C" apx_status apx__cuda_latch_enqueue(void *state, int device_index, void *stream,
                                              void *latch_device);
extern "C" int apx__cuda_latch_take(void *latch_host, char *msg, size_t msg_size);

namespace apexx_trt {
namespace {

thread_local char last_error[1024];

apx_status svc_set_error(apx_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
apx_status svc_set_error(apx_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

void svc_log(void *core, apx_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void svc_log(void *core, apx_log_level level, const char *fmt, ...) {
  (void)core;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (level <= APX_LOG_ERROR)
    report_error(nullptr, nvinfer1::ErrorCode::kINTERNAL_ERROR, line);
  else if (level == APX_LOG_WARN)
    log_warning(line);
}

const char *svc_config_get(void *core, const char *section, const char *key) {
  (void)core;
  (void)section;
  (void)key;
  return nullptr;
}

pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;
apx_core_services services;
Kernels kernels;
int kernels_ready;
// a latch a device (validate = device), made on the device's first enqueue
// and kept for the process
#define APX_TRT_MAX_DEVICES 64
struct Latch {
  void *host, *device;
};
Latch latches[APX_TRT_MAX_DEVICES];

std::atomic<nvinfer1::ILoggerFinder *> logger_finder{nullptr};

nvinfer1::ILogger *find_logger() {
  nvinfer1::ILoggerFinder *f = logger_finder.load();
  return f ? f->findLogger() : nullptr;
}

}  // namespace

int kernels_get(Kernels *k, char *err, size_t err_size) {
  pthread_mutex_lock(&kernels_lock);
  if (!kernels_ready) {
    const char *mode = secure_getenv("APEXX_TRT_VALIDATE");
    apx_validate_mode validate = APX_VALIDATE_DEVICE;
    if (mode && strcmp(mode, "off") == 0) {
      validate = APX_VALIDATE_OFF;
    } else if (mode && strcmp(mode, "eager") == 0) {
      validate = APX_VALIDATE_EAGER;
    } else if (mode && *mode && strcmp(mode, "device") != 0) {
      pthread_mutex_unlock(&kernels_lock);
      snprintf(err, err_size, "APEXX_TRT_VALIDATE = [%s] is not device, eager or off", mode);
      return -1;
    }
    memset(&services, 0, sizeof services);
    // the services before retired_ff: a core of the first ABI (no typed
    // keys, no cache), so the backend takes its defaults and runs no ff_infer
    services.size = (uint32_t)offsetof(apx_core_services, retired_ff);
    services.core = nullptr;
    services.config_get = svc_config_get;
    services.log = svc_log;
    services.set_error = svc_set_error;
    services.validate_mode = validate;
    const apx_backend_table *table = apx_backend_entry();
    void *state = nullptr;
    if (!table || table->abi_version != APX_BACKEND_ABI_VERSION || !table->init ||
        !APX_BACKEND_OP(table, tilepack) || !APX_BACKEND_OP(table, tileunpack) ||
        !APX_BACKEND_OP(table, fusiongate_fuse) || !APX_BACKEND_OP(table, tilessm_scan)) {
      pthread_mutex_unlock(&kernels_lock);
      snprintf(err, err_size, "the linked cuda backend lacks the plugins' ops");
      return -1;
    }
    last_error[0] = '\0';
    if (table->init(&services, &state) != APX_OK) {
      pthread_mutex_unlock(&kernels_lock);
      snprintf(err, err_size, "cuda backend: %s", last_error);
      return -1;
    }
    kernels.table = table;
    kernels.state = state;
    kernels.validate = validate;
    kernels_ready = 1;
  }
  *k = kernels;
  k->device = -1;
  k->latch_host = k->latch_device = nullptr;
  if (kernels.validate == APX_VALIDATE_DEVICE) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess && (device < 0 || device >= APX_TRT_MAX_DEVICES)) {
      pthread_mutex_unlock(&kernels_lock);
      snprintf(err, err_size, "CUDA device [%d] is past the plugins' %d", device,
               APX_TRT_MAX_DEVICES);
      return -1;
    }
    Latch *l = e == cudaSuccess ? &latches[device] : nullptr;
    if (l && !l->host) {
      e = cudaHostAlloc(&l->host, apx__cuda_latch_size(), cudaHostAllocMapped);
      if (e == cudaSuccess) {
        memset(l->host, 0, apx__cuda_latch_size());
        e = cudaHostGetDevicePointer(&l->device, l->host, 0);
        if (e != cudaSuccess) {
          cudaFreeHost(l->host);
          l->host = nullptr;
        }
      }
    }
    if (e != cudaSuccess) {
      pthread_mutex_unlock(&kernels_lock);
      snprintf(err, err_size, "validate = device: the device's latch: %s", cudaGetErrorString(e));
      return -1;
    }
    k->device = device;
    k->latch_host = l->host;
    k->latch_device = l->device;
  }
  pthread_mutex_unlock(&kernels_lock);
  return 0;
}

const char *kernels_last_error() { return last_error; }

int tensor_of(const nvinfer1::PluginTensorDesc &desc, const void *data, apx_tensor *t, char *err,
              size_t err_size) {
  memset(t, 0, sizeof *t);
  switch (desc.type) {
  case nvinfer1::DataType::kFLOAT: t->dtype = APX_DTYPE_F32; break;
  case nvinfer1::DataType::kHALF: t->dtype = APX_DTYPE_F16; break;
  case nvinfer1::DataType::kBF16: t->dtype = APX_DTYPE_BF16; break;
  case nvinfer1::DataType::kINT32: t->dtype = APX_DTYPE_I32; break;
  default:
    snprintf(err, err_size, "tensor dtype [%d] is not fp32, fp16, bf16 or int32",
             static_cast<int>(desc.type));
    return -1;
  }
  if (desc.dims.nbDims < 0 || desc.dims.nbDims > APX_MAX_DIMS) {
    snprintf(err, err_size, "tensor has [%d] dims", static_cast<int>(desc.dims.nbDims));
    return -1;
  }
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) {
    snprintf(err, err_size, "cudaGetDevice: %s", cudaGetErrorString(e));
    return -1;
  }
  t->data = const_cast<void *>(data);
  t->device = APX_DEVICE_CUDA;
  t->device_index = device;
  t->ndim = desc.dims.nbDims;
  for (int d = 0; d < t->ndim; d++) t->shape[d] = desc.dims.d[d];
  return 0;
}

apx__trt_dims dims_of(const nvinfer1::Dims &d) {
  apx__trt_dims out;
  memset(&out, 0, sizeof out);
  out.nb = d.nbDims < 0 || d.nbDims > APX_TRT_MAX_DIMS ? -1 : d.nbDims;
  for (int i = 0; i < out.nb; i++) out.d[i] = d.d[i];
  return out;
}

int enqueue_prepare(const EnqueueCall &c, apx_tensor *ins, apx_tensor *outs, Kernels *k) {
  const apx__trt_params *p = c.params;
  if (apx__trt_check_nb_inputs(p, c.nb_inputs, c.err, c.err_size) != 0) return -1;
  apx__trt_dims in[APX_TRT_MAX_IO], want[APX_TRT_MAX_IO];
  int in_types[APX_TRT_MAX_IO], out_types[APX_TRT_MAX_IO];
  for (int i = 0; i < c.nb_inputs; i++) {
    in[i] = dims_of(c.in[i].dims);
    in_types[i] = static_cast<int>(c.in[i].type);
  }
  if (apx__trt_infer_dims(p, in, c.nb_inputs, want, c.nb_outputs, 1, c.err, c.err_size) != 0 ||
      apx__trt_output_types(p, in_types, c.nb_inputs, out_types, c.nb_outputs, c.err,
                            c.err_size) != 0)
    return -1;
  for (int o = 0; o < c.nb_outputs; o++) {
    apx__trt_dims got = dims_of(c.out[o].dims);
    int same = got.nb == want[o].nb && static_cast<int>(c.out[o].type) == out_types[o];
    for (int d = 0; same && d < got.nb; d++) same = got.d[d] == want[o].d[d];
    if (!same) {
      snprintf(c.err, c.err_size, "output %d's dims or dtype differ from the shape rules", o);
      return -1;
    }
  }
  for (int i = 0; i < c.nb_inputs; i++) {
    if (c.in[i].format != nvinfer1::TensorFormat::kLINEAR) {
      snprintf(c.err, c.err_size, "input %d is not in the linear format", i);
      return -1;
    }
    if (tensor_of(c.in[i], c.inputs[i], &ins[i], c.err, c.err_size) != 0) return -1;
  }
  for (int o = 0; o < c.nb_outputs; o++) {
    if (tensor_of(c.out[o], c.outputs[o], &outs[o], c.err, c.err_size) != 0) return -1;
  }
  if (kernels_get(k, c.err, c.err_size) != 0) return -1;
  char msg[600];
  if (k->latch_host && apx__cuda_latch_take(k->latch_host, msg, sizeof msg)) {
    snprintf(c.err, c.err_size, "an earlier enqueue on CUDA device %d failed: %s", k->device, msg);
    return -1;
  }
  return 0;
}

int enqueue_failed(const EnqueueCall &c) {
  snprintf(c.err, c.err_size, "%s", last_error[0] ? last_error : "the cuda backend failed");
  return -1;
}

int enqueue_finish(const EnqueueCall &c, const Kernels &k) {
  if (!k.latch_device) return 0;
  if (apx__cuda_latch_enqueue(k.state, k.device, c.stream, k.latch_device) != APX_OK)
    return enqueue_failed(c);
  return 0;
}

void report_error(nvinfer1::IErrorRecorder *recorder, nvinfer1::ErrorCode code,
                  const char *message) {
  char line[1100];
  snprintf(line, sizeof line, "apexx: %s", message);
  if (recorder) {
    recorder->reportError(code, line);
    return;
  }
  nvinfer1::ILogger *logger = find_logger();
  if (logger)
    logger->log(nvinfer1::ILogger::Severity::kERROR, line);
  else
    fprintf(stderr, "%s\n", line);
}

void log_warning(const char *message) {
  char line[1100];
  snprintf(line, sizeof line, "apexx: %s", message);
  nvinfer1::ILogger *logger = find_logger();
  if (logger)
    logger->log(nvinfer1::ILogger::Severity::kWARNING, line);
  else
    fprintf(stderr, "%s\n", line);
}

}  // namespace apexx_trt

// TensorRT hands a plugin library its logger finder (IPluginRegistry's
// loadLibrary, trtexec --dynamicPlugins).
APX_TRT_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder *finder) {
  apexx_trt::logger_finder.store(finder);
}
