/* SPDX-License-Identifier: Apache-2.0 */
// apexx_trt_engine_run (include/apexx/trt_engine_runner.h): time a serialised
// TensorRT engine through the dlopened runtime; apexx_trt_plugin_run: build
// a network of one TileSSMScan plugin through the dlopened builder and time
// its engine. libnvinfer is found as the trt backend's probe finds it
// (nvinfer_open.h) and must be of the major these sources were compiled
// against (the interfaces' layouts differ between majors).
#include "config.h"

#include <apexx/trt_engine_runner.h>
#include "../nvinfer_open.h"
#include "apx_half.h"
#include "apx_splitmix.h"
#include "plugin.h"

#include <NvInfer.h>
#include <limits.h>
#include <math.h>
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

// The engine's device memory at its largest profile: getDeviceMemorySizeV2
// from TensorRT 10.1 (10.0 has only getDeviceMemorySize)
size_t engine_device_memory(const nvinfer1::ICudaEngine &engine) {
#if NV_TENSORRT_MAJOR > 10 || (NV_TENSORRT_MAJOR == 10 && NV_TENSORRT_MINOR >= 1)
  return static_cast<size_t>(engine.getDeviceMemorySizeV2());
#else
  return engine.getDeviceMemorySize();
#endif
}

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

// libnvinfer of the headers' major and a CUDA device: 0 with *lib open
// (the caller dlcloses lib->handle) and r->trt_version set; else 1 with
// the reason in r.
int open_tensorrt(NvinferLib *lib, apexx_trt_engine_result *r) {
  char why[1400];
  if (nvinfer_open(APEXX_TRT_DIR, lib, why, sizeof why) != 0)
    return set_reason(r, 1, "tensorrt_unavailable:%s", why);
  snprintf(r->trt_version, sizeof r->trt_version, "%d.%d.%d", lib->version / 10000,
           (lib->version / 100) % 100, lib->version % 100);
  if (lib->version / 10000 != NV_TENSORRT_MAJOR) {
    dlclose(lib->handle);
    lib->handle = nullptr;
    return set_reason(r, 1, "tensorrt_version_mismatch:libnvinfer %s, plugins built against %d.%d",
                      r->trt_version, NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR);
  }
  int devices = 0;
  if (cuda_device_count(&devices, why, sizeof why) != 0) {
    dlclose(lib->handle);
    lib->handle = nullptr;
    return set_reason(r, 1, "cuda_unavailable:%s", why);
  }
  return 0;
}

struct Closer {
  void *h;
  ~Closer() {
    if (h) dlclose(h);
  }
};

// An object of libnvinfer's factory `symbol` (createInferRuntime_INTERNAL,
// createInferBuilder_INTERNAL) for the logger; nullptr with the reason in
// r (skip: TensorRT without it, or a factory that returned none).
void *create_object(const NvinferLib &lib, const char *symbol, RunnerLogger *logger,
                    apexx_trt_engine_result *r) {
  void *sym = dlsym(lib.handle, symbol);
  if (!sym) {
    set_reason(r, 1, "tensorrt_unavailable:%s lacks %s", lib.path, symbol);
    return nullptr;
  }
  void *(*create)(void *, int32_t);
  memcpy(&create, &sym, sizeof create);
  void *object = create(static_cast<nvinfer1::ILogger *>(logger), NV_TENSORRT_VERSION);
  if (!object) set_reason(r, 1, "tensorrt_unavailable:%s returned none: %s", symbol, logger->last_error);
  return object;
}

// The creators of this library into a registry. Registering one already
// there (a second registration, or the builder's and the runtime's shared
// registry) fails harmlessly but logs an error: the logger's last error is
// cleared after, so that a later skip reason does not carry it.
void register_creators(nvinfer1::IPluginRegistry &registry, RunnerLogger *logger) {
  int32_t nb_creators = 0;
  nvinfer1::IPluginCreatorInterface *const *creators = getCreators(nb_creators);
  for (int i = 0; i < nb_creators; i++) registry.registerCreator(*creators[i], APX_TRT_NAMESPACE);
  logger->last_error[0] = '\0';
}

// Time warmup + iters calls of enqueueV3 with CUDA events on a new stream:
// p50, p95 and mean of the timed ones into r. 0, or -1 with the reason.
int time_enqueue(nvinfer1::IExecutionContext *context, int warmup, int iters,
                 const RunnerLogger &logger, apexx_trt_engine_result *r) {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<float> times;
  int rc = 0;
  if (cudaStreamCreate(&stream) != cudaSuccess || cudaEventCreate(&start) != cudaSuccess ||
      cudaEventCreate(&stop) != cudaSuccess) {
    rc = set_reason(r, -1, "cuda stream or event creation failed");
    goto done;
  }
  for (int i = 0; i < warmup + iters; i++) {
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
    if (i >= warmup) times.push_back(ms);
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    double sum = 0;
    for (float t : times) sum += t;
    r->mean_ms = sum / (double)times.size();
    r->p50_ms = times[(times.size() - 1) / 2];
    r->p95_ms = times[(size_t)((double)(times.size() - 1) * 0.95)];
  }
done:
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (stream) cudaStreamDestroy(stream);
  return rc;
}

int engine_run(const apexx_trt_engine_request *q, apexx_trt_engine_result *r) {
  if (!q || q->size < sizeof *q || !q->engine_path)
    return set_reason(r, -1, "bad_request: no engine path or an older request struct");
  snprintf(r->mode, sizeof r->mode, "modern_io_tensors");

  NvinferLib lib;
  if (open_tensorrt(&lib, r) != 0) return 1;
  Closer closer{lib.handle};
  RunnerLogger logger;
  nvinfer1::IRuntime *runtime = static_cast<nvinfer1::IRuntime *>(
      create_object(lib, "createInferRuntime_INTERNAL", &logger, r));
  if (!runtime) return 1;
  // the engine may hold apexx's plugins: their creators first
  register_creators(runtime->getPluginRegistry(), &logger);

  int rc = 0;
  nvinfer1::ICudaEngine *engine = nullptr;
  nvinfer1::IExecutionContext *context = nullptr;
  Buffers buffers;
  std::vector<char> blob;
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
  rc = time_enqueue(context, q->warmup, q->iters, logger, r);
  if (rc != 0) goto done;
  r->peak_memory_mb = (double)(io_bytes + engine_device_memory(*engine)) / (1024.0 * 1024.0);
done:
  delete context;
  delete engine;
  delete runtime;
  return rc;
}

// A standard normal value from the stream (Box-Muller over two uniforms).
double normal(uint64_t *rng) {
  double u1 = apx_splitmix64_uniform(rng), u2 = apx_splitmix64_uniform(rng);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// The TileSSMScan network's inputs, in the plugin's order, and how their
// values are drawn: a * N(0,1) when normal, else U(a, b).
struct ScanInput {
  const char *name;
  int rank; // 3: [B, S, C]; 1: [C]
  bool normal;
  double a, b;
};
const ScanInput kScanInputs[] = {
    {"tokens", 3, true, 1.0, 0.0},         {"decay", 1, false, 0.1, 0.9},
    {"input_gain", 1, false, 0.05, 1.55},  {"output_gain", 1, false, 0.05, 1.55},
    {"state_bias", 1, true, 0.1, 0.0},
};
constexpr int kScanInputCount = 5;

// Everything the plugin run creates, released in reverse order.
struct PluginRun {
  nvinfer1::IBuilder *builder = nullptr;
  nvinfer1::IPluginV3 *plugin = nullptr;
  nvinfer1::INetworkDefinition *network = nullptr;
  nvinfer1::IBuilderConfig *config = nullptr;
  nvinfer1::IHostMemory *plan = nullptr;
  nvinfer1::IRuntime *runtime = nullptr;
  nvinfer1::ICudaEngine *engine = nullptr;
  nvinfer1::IExecutionContext *context = nullptr;
  ~PluginRun() {
    delete context;
    delete engine;
    delete runtime;
    delete plan;
    delete config;
    delete network;
    delete plugin; // the application's: TensorRT does not own it
    delete builder;
  }
};

int plugin_run(const apexx_trt_plugin_request *q, apexx_trt_engine_result *r) {
  if (!q || q->size < sizeof *q)
    return set_reason(r, -1, "bad_request: no request or an older request struct");
  if (q->batch < 1 || q->steps < 1 || q->channels < 1 || q->batch > INT32_MAX ||
      q->steps > INT32_MAX || q->channels > INT32_MAX ||
      (double)q->batch * (double)q->steps * (double)q->channels > (double)(INT64_C(1) << 40))
    return set_reason(r, -1,
                      "bad_request: batch [%lld], steps [%lld], channels [%lld] are not "
                      "each in [1, 2^31) with a product of at most 2^40",
                      (long long)q->batch, (long long)q->steps, (long long)q->channels);
  if (q->warmup < 0 || q->iters < 1)
    return set_reason(r, -1, "bad_request: warmup [%d] < 0 or iters [%d] < 1", q->warmup,
                      q->iters);
  snprintf(r->mode, sizeof r->mode, "plugin_network");
  r->frames = q->batch;

  NvinferLib lib;
  if (open_tensorrt(&lib, r) != 0) return 1;
  Closer closer{lib.handle};
  RunnerLogger logger;
  PluginRun run;
  run.builder = static_cast<nvinfer1::IBuilder *>(
      create_object(lib, "createInferBuilder_INTERNAL", &logger, r));
  if (!run.builder) return 1;
  nvinfer1::IPluginRegistry &registry = run.builder->getPluginRegistry();
  register_creators(registry, &logger);
  nvinfer1::IPluginCreatorInterface *found =
      registry.getCreator("TileSSMScan", APX_TRT_PLUGIN_VERSION, APX_TRT_NAMESPACE);
  if (!found || strcmp(found->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") != 0)
    return set_reason(r, 1, "tilessm_plugin_creator_not_registered");
  auto *creator = static_cast<nvinfer1::IPluginCreatorV3One *>(found);

  // the seed's attributes: direction 0 (forward), clamp_value 1e4; and the
  // five inputs (no init_state)
  int32_t direction = 0, num_inputs = kScanInputCount;
  float clamp_value = 1e4f;
  nvinfer1::PluginField fields[3] = {
      nvinfer1::PluginField("direction", &direction, nvinfer1::PluginFieldType::kINT32, 1),
      nvinfer1::PluginField("clamp_value", &clamp_value, nvinfer1::PluginFieldType::kFLOAT32, 1),
      nvinfer1::PluginField("num_inputs", &num_inputs, nvinfer1::PluginFieldType::kINT32, 1)};
  nvinfer1::PluginFieldCollection fc;
  fc.nbFields = 3;
  fc.fields = fields;
  run.plugin = creator->createPlugin("tilessm_scan", &fc, nvinfer1::TensorRTPhase::kBUILD);
  if (!run.plugin)
    return set_reason(r, 1, "engine_build_failed:createPlugin: %s", logger.last_error);

  // fp16 inputs fix the plugin's dtype: a strongly typed network (TensorRT
  // 11's networks always are, and its flag is deprecated there)
#if NV_TENSORRT_MAJOR < 11
  const nvinfer1::NetworkDefinitionCreationFlags flags =
      1U << static_cast<uint32_t>(nvinfer1::NetworkDefinitionCreationFlag::kSTRONGLY_TYPED);
#else
  const nvinfer1::NetworkDefinitionCreationFlags flags = 0;
#endif
  run.network = run.builder->createNetworkV2(flags);
  if (!run.network)
    return set_reason(r, 1, "engine_build_failed:createNetworkV2: %s", logger.last_error);
  nvinfer1::ITensor *inputs[kScanInputCount];
  for (int i = 0; i < kScanInputCount; i++) {
    nvinfer1::Dims dims{};
    if (kScanInputs[i].rank == 3) {
      dims.nbDims = 3;
      dims.d[0] = q->batch;
      dims.d[1] = q->steps;
      dims.d[2] = q->channels;
    } else {
      dims.nbDims = 1;
      dims.d[0] = q->channels;
    }
    inputs[i] = run.network->addInput(kScanInputs[i].name, nvinfer1::DataType::kHALF, dims);
    if (!inputs[i])
      return set_reason(r, 1, "engine_build_failed:addInput %s: %s", kScanInputs[i].name,
                        logger.last_error);
  }
  nvinfer1::IPluginV3Layer *layer =
      run.network->addPluginV3(inputs, kScanInputCount, nullptr, 0, *run.plugin);
  if (!layer || !layer->getOutput(0))
    return set_reason(r, 1, "engine_build_failed:addPluginV3: %s", logger.last_error);
  nvinfer1::ITensor *y = layer->getOutput(0);
  (void)y->setName("y");
  run.network->markOutput(*y);
  run.config = run.builder->createBuilderConfig();
  if (!run.config)
    return set_reason(r, 1, "engine_build_failed:createBuilderConfig: %s", logger.last_error);
  run.config->setMemoryPoolLimit(nvinfer1::MemoryPoolType::kWORKSPACE, size_t{1} << 20);
  run.plan = run.builder->buildSerializedNetwork(*run.network, *run.config);
  if (!run.plan || !run.plan->data() || run.plan->size() == 0)
    return set_reason(r, 1, "engine_build_returned_none%s%s", logger.last_error[0] ? ":" : "",
                      logger.last_error);

  run.runtime = static_cast<nvinfer1::IRuntime *>(
      create_object(lib, "createInferRuntime_INTERNAL", &logger, r));
  if (!run.runtime) return 1;
  register_creators(run.runtime->getPluginRegistry(), &logger);
  run.engine = run.runtime->deserializeCudaEngine(run.plan->data(), run.plan->size());
  if (!run.engine)
    return set_reason(r, 1, "engine_deserialize_failed%s%s", logger.last_error[0] ? ":" : "",
                      logger.last_error);
  run.context = run.engine->createExecutionContext();
  if (!run.context) return set_reason(r, 1, "context_create_failed:%s", logger.last_error);

  // the inputs from one seeded stream, in the plugin's order; then y
  Buffers buffers;
  uint64_t rng = q->seed;
  size_t io_bytes = 0;
  for (int i = 0; i <= kScanInputCount; i++) {
    const char *name = i < kScanInputCount ? kScanInputs[i].name : "y";
    size_t count = (size_t)q->channels;
    if (i == kScanInputCount || kScanInputs[i].rank == 3) count *= (size_t)(q->batch * q->steps);
    if (run.engine->getTensorDataType(name) != nvinfer1::DataType::kHALF)
      return set_reason(r, -1, "engine tensor %s is not fp16 (dtype %d)", name,
                        static_cast<int>(run.engine->getTensorDataType(name)));
    size_t bytes = count * 2;
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
      return set_reason(r, -1, "cudaMalloc %s (%zu bytes): %s", name, bytes, cudaGetErrorString(e));
    buffers.device.push_back(p);
    io_bytes += bytes;
    if (i < kScanInputCount) {
      const ScanInput &in = kScanInputs[i];
      std::vector<uint16_t> host(count);
      for (size_t k = 0; k < count; k++) {
        double v = in.normal ? in.a * normal(&rng)
                             : in.a + (in.b - in.a) * apx_splitmix64_uniform(&rng);
        host[k] = apx_f32_to_f16((float)v);
      }
      e = cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice);
      if (e != cudaSuccess)
        return set_reason(r, -1, "cudaMemcpy %s: %s", name, cudaGetErrorString(e));
    }
    if (!run.context->setTensorAddress(name, p))
      return set_reason(r, -1, "setTensorAddress %s: %s", name, logger.last_error);
  }
  int rc = time_enqueue(run.context, q->warmup, q->iters, logger, r);
  if (rc != 0) return rc;
  r->peak_memory_mb =
      (double)(io_bytes + engine_device_memory(*run.engine)) / (1024.0 * 1024.0);
  return 0;
}

}  // namespace

APX_TRT_EXPORT int apexx_trt_engine_run(const apexx_trt_engine_request *q,
                                        apexx_trt_engine_result *r) {
  if (!r) return -1;
  memset(r, 0, sizeof *r);
  try {
    return engine_run(q, r);
  } catch (...) {
    return set_reason(r, -1, "out_of_memory: a host allocation of the engine runner failed");
  }
}

APX_TRT_EXPORT int apexx_trt_plugin_run(const apexx_trt_plugin_request *q,
                                        apexx_trt_engine_result *r) {
  if (!r) return -1;
  memset(r, 0, sizeof *r);
  try {
    return plugin_run(q, r);
  } catch (...) {
    return set_reason(r, -1, "out_of_memory: a host allocation of the plugin runner failed");
  }
}
