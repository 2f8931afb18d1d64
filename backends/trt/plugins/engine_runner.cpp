// apexx_trt_engine_run (backends/trt/engine_runner.h): time a serialised
// TensorRT engine through the dlopened runtime. libnvinfer is found as the
// trt backend's probe finds it (nvinfer_open.h) and must be of the major
// these sources were compiled against (the interfaces' layouts differ
// between majors).
#include "config.h"

#include "../engine_runner.h"
#include "../nvinfer_open.h"
#include "apx_half.h"
#include "apx_splitmix.h"
#include "plugin.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <new>
#include <vector>

extern "C" nvinfer1::IPluginCreatorInterface *const *getCreators(int32_t &nb_creators);

namespace {

class RunnerLogger final : public nvinfer1::ILogger {
 public:
  void log(Severity severity, const char *msg) noexcept override {
    if (severity <= Severity::kERROR) snprintf(last_error, sizeof last_error, "%s", msg);
  }
  char last_error[512] = "";
};

int set_reason(apexx_trt_engine_result *r, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int set_reason(apexx_trt_engine_result *r, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->reason, sizeof r->reason, fmt, ap);
  va_end(ap);
  return rc;
}

size_t dtype_bytes(nvinfer1::DataType t) {
  switch (t) {
  case nvinfer1::DataType::kFLOAT:
  case nvinfer1::DataType::kINT32: return 4;
  case nvinfer1::DataType::kHALF:
  case nvinfer1::DataType::kBF16: return 2;
  case nvinfer1::DataType::kINT8:
  case nvinfer1::DataType::kUINT8:
  case nvinfer1::DataType::kBOOL:
  case nvinfer1::DataType::kFP8: return 1;
  case nvinfer1::DataType::kINT64: return 8;
  default: return 0;
  }
}

// "name=AxBx..." for `name`: 1 with dims filled, 0 when absent.
int shape_for(const apexx_trt_engine_request *q, const char *name, nvinfer1::Dims *dims) {
  size_t len = strlen(name);
  for (int i = 0; i < q->input_shape_count; i++) {
    const char *s = q->input_shapes[i];
    if (!s || strncmp(s, name, len) != 0 || s[len] != '=') continue;
    const char *p = s + len + 1;
    dims->nbDims = 0;
    while (*p && dims->nbDims < nvinfer1::Dims::MAX_DIMS) {
      char *end = nullptr;
      long long v = strtoll(p, &end, 10);
      if (end == p) break;
      dims->d[dims->nbDims++] = v;
      p = *end == 'x' ? end + 1 : end;
      if (end == p) break;
    }
    return 1;
  }
  return 0;
}

// Seeded input values: floats in [-1, 1], integers and booleans 0 (ids
// and indices stay in range).
void fill_host(std::vector<unsigned char> &buf, nvinfer1::DataType t, uint64_t *rng) {
  size_t n = buf.size() / (dtype_bytes(t) ? dtype_bytes(t) : 1);
  for (size_t i = 0; i < n; i++) {
    float v = (float)(apx_splitmix64_uniform(rng) * 2.0 - 1.0);
    if (t == nvinfer1::DataType::kFLOAT) {
      memcpy(&buf[i * 4], &v, 4);
    } else if (t == nvinfer1::DataType::kHALF) {
      uint16_t h = apx_f32_to_f16(v);
      memcpy(&buf[i * 2], &h, 2);
    } else if (t == nvinfer1::DataType::kBF16) {
      uint16_t h = apx_f32_to_bf16(v);
      memcpy(&buf[i * 2], &h, 2);
    }
  }
}

struct Buffers {
  std::vector<void *> device;
  ~Buffers() {
    for (void *p : device) cudaFree(p);
  }
};

}  // namespace

APX_TRT_EXPORT int apexx_trt_engine_run(const apexx_trt_engine_request *q,
                                        apexx_trt_engine_result *r) {
  if (!r) return -1;
  memset(r, 0, sizeof *r);
  if (!q || q->size < sizeof *q || !q->engine_path)
    return set_reason(r, -1, "bad_request: no engine path or an older request struct");
  snprintf(r->mode, sizeof r->mode, "modern_io_tensors");

  NvinferLib lib;
  char why[1400];
  if (nvinfer_open(APEXX_TRT_DIR, &lib, why, sizeof why) != 0)
    return set_reason(r, 1, "tensorrt_unavailable:%s", why);
  snprintf(r->trt_version, sizeof r->trt_version, "%d.%d.%d", lib.version / 10000,
           (lib.version / 100) % 100, lib.version % 100);
  struct Closer {
    void *h;
    ~Closer() { dlclose(h); }
  } closer{lib.handle};
  if (lib.version / 10000 != NV_TENSORRT_MAJOR)
    return set_reason(r, 1, "tensorrt_version_mismatch:libnvinfer %s, plugins built against %d.%d",
                      r->trt_version, NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR);
  int devices = 0;
  if (cuda_device_count(&devices, why, sizeof why) != 0)
    return set_reason(r, 1, "cuda_unavailable:%s", why);

  void *sym = dlsym(lib.handle, "createInferRuntime_INTERNAL");
  if (!sym) return set_reason(r, 1, "tensorrt_unavailable:%s lacks createInferRuntime_INTERNAL",
                              lib.path);
  void *(*create_runtime)(void *, int32_t);
  memcpy(&create_runtime, &sym, sizeof create_runtime);
  RunnerLogger logger;
  nvinfer1::IRuntime *runtime =
      static_cast<nvinfer1::IRuntime *>(create_runtime(&logger, NV_TENSORRT_VERSION));
  if (!runtime) return set_reason(r, 1, "runtime_create_failed:%s", logger.last_error);

  // the engine may hold apexx's plugins: their creators first
  int32_t nb_creators = 0;
  nvinfer1::IPluginCreatorInterface *const *creators = getCreators(nb_creators);
  for (int i = 0; i < nb_creators; i++)
    runtime->getPluginRegistry().registerCreator(*creators[i], APX_TRT_NAMESPACE);

  int rc = 0;
  nvinfer1::ICudaEngine *engine = nullptr;
  nvinfer1::IExecutionContext *context = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  Buffers buffers;
  std::vector<char> blob;
  std::vector<float> times;
  uint64_t rng = q->seed;
  size_t io_bytes = 0;
  FILE *f = fopen(q->engine_path, "rb");
  if (!f) {
    rc = set_reason(r, 1, "engine_not_found:%s", q->engine_path);
    goto done;
  }
  {
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) blob.insert(blob.end(), chunk, chunk + got);
    fclose(f);
  }
  engine = runtime->deserializeCudaEngine(blob.data(), blob.size());
  if (!engine) {
    rc = set_reason(r, 1, "engine_deserialize_failed%s%s", logger.last_error[0] ? ":" : "",
                    logger.last_error);
    goto done;
  }
  context = engine->createExecutionContext();
  if (!context) {
    rc = set_reason(r, 1, "context_create_failed:%s", logger.last_error);
    goto done;
  }
  // inputs' shapes first (outputs' shapes follow from them)
  for (int i = 0; i < engine->getNbIOTensors(); i++) {
    const char *name = engine->getIOTensorName(i);
    if (engine->getTensorIOMode(name) != nvinfer1::TensorIOMode::kINPUT) continue;
    nvinfer1::Dims dims = engine->getTensorShape(name);
    nvinfer1::Dims given;
    int have = shape_for(q, name, &given);
    for (int d = 0; d < dims.nbDims; d++) {
      if (dims.d[d] >= 0) continue;
      if (have && given.nbDims == dims.nbDims) {
        dims.d[d] = given.d[d];
      } else {
        dims.d[d] = 1;
        char line[300];
        snprintf(line, sizeof line,
                 "trt engine: input %s dim %d is dynamic and not given (--trt-input-shape): 1",
                 name, d);
        if (q->warn) q->warn(q->user, line);
      }
    }
    if (!context->setInputShape(name, dims)) {
      rc = set_reason(r, 1, "unresolved_tensor_shape:%s", name);
      goto done;
    }
    if (r->frames == 0) r->frames = dims.nbDims > 0 ? dims.d[0] : 1;
  }
  for (int i = 0; i < engine->getNbIOTensors(); i++) {
    const char *name = engine->getIOTensorName(i);
    nvinfer1::DataType t = engine->getTensorDataType(name);
    size_t elem = dtype_bytes(t);
    if (!elem) {
      rc = set_reason(r, 1, "unsupported_dtype:%d", static_cast<int>(t));
      goto done;
    }
    nvinfer1::Dims dims = context->getTensorShape(name);
    size_t count = 1;
    for (int d = 0; d < dims.nbDims; d++) {
      if (dims.d[d] < 0) {
        rc = set_reason(r, 1, "unresolved_tensor_shape:%s", name);
        goto done;
      }
      count *= (size_t)dims.d[d];
    }
    size_t bytes = count * elem;
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
      rc = set_reason(r, -1, "cudaMalloc %s (%zu bytes): %s", name, bytes, cudaGetErrorString(e));
      goto done;
    }
    buffers.device.push_back(p);
    io_bytes += bytes;
    if (engine->getTensorIOMode(name) == nvinfer1::TensorIOMode::kINPUT) {
      std::vector<unsigned char> host(bytes, 0);
      fill_host(host, t, &rng);
      e = cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice);
      if (e != cudaSuccess) {
        rc = set_reason(r, -1, "cudaMemcpy %s: %s", name, cudaGetErrorString(e));
        goto done;
      }
    }
    if (!context->setTensorAddress(name, p)) {
      rc = set_reason(r, -1, "setTensorAddress %s: %s", name, logger.last_error);
      goto done;
    }
  }
  if (cudaStreamCreate(&stream) != cudaSuccess || cudaEventCreate(&start) != cudaSuccess ||
      cudaEventCreate(&stop) != cudaSuccess) {
    rc = set_reason(r, -1, "cuda stream or event creation failed");
    goto done;
  }
  for (int i = 0; i < q->warmup + q->iters; i++) {
    cudaEventRecord(start, stream);
    if (!context->enqueueV3(stream)) {
      rc = set_reason(r, -1, "enqueueV3 failed: %s", logger.last_error);
      goto done;
    }
    cudaEventRecord(stop, stream);
    cudaError_t e = cudaEventSynchronize(stop);
    if (e != cudaSuccess) {
      rc = set_reason(r, -1, "enqueueV3: %s", cudaGetErrorString(e));
      goto done;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i >= q->warmup) times.push_back(ms);
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    double sum = 0;
    for (float t : times) sum += t;
    r->mean_ms = sum / (double)times.size();
    r->p50_ms = times[(times.size() - 1) / 2];
    r->p95_ms = times[(size_t)((double)(times.size() - 1) * 0.95)];
  }
  r->peak_memory_mb = (double)(io_bytes + (size_t)engine->getDeviceMemorySizeV2()) / (1024.0 * 1024.0);
done:
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (stream) cudaStreamDestroy(stream);
  delete context;
  delete engine;
  delete runtime;
  return rc;
}
