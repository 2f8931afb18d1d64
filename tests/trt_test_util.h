/* SPDX-License-Identifier: Apache-2.0 */
// What the plugin tests share: an error recorder that keeps every
// message, a plugin resource context that hands it out, and TensorRT
// tensor descriptors from a shape (linear format).
#ifndef APX_TESTS_TRT_TEST_UTIL_H
#define APX_TESTS_TRT_TEST_UTIL_H

#include <NvInferRuntime.h>
#include <string.h>

#include <string>
#include <vector>

namespace trt_test {

class Recorder final : public nvinfer1::IErrorRecorder {
 public:
  int32_t getNbErrors() const noexcept override { return (int32_t)messages.size(); }
  nvinfer1::ErrorCode getErrorCode(int32_t i) const noexcept override { return codes[(size_t)i]; }
  ErrorDesc getErrorDesc(int32_t i) const noexcept override { return messages[(size_t)i].c_str(); }
  bool hasOverflowed() const noexcept override { return false; }
  void clear() noexcept override {
    messages.clear();
    codes.clear();
  }
  bool reportError(nvinfer1::ErrorCode code, ErrorDesc desc) noexcept override {
    codes.push_back(code);
    messages.push_back(desc);
    return false;
  }
  RefCount incRefCount() noexcept override { return 1; }
  RefCount decRefCount() noexcept override { return 0; }
  std::vector<std::string> messages;
  std::vector<nvinfer1::ErrorCode> codes;
};

class Context final : public nvinfer1::IPluginResourceContext {
 public:
  explicit Context(nvinfer1::IErrorRecorder *r) : recorder(r) {}
  nvinfer1::IGpuAllocator *getGpuAllocator() const noexcept override { return nullptr; }
  nvinfer1::IErrorRecorder *getErrorRecorder() const noexcept override { return recorder; }
  nvinfer1::IErrorRecorder *recorder;
};

inline nvinfer1::Dims dims(std::vector<int64_t> d) {
  nvinfer1::Dims x;
  x.nbDims = (int32_t)d.size();
  for (size_t i = 0; i < d.size(); i++) x.d[i] = d[i];
  return x;
}

inline nvinfer1::PluginTensorDesc desc(std::vector<int64_t> d, nvinfer1::DataType t) {
  nvinfer1::PluginTensorDesc x;
  memset(&x, 0, sizeof x);
  x.dims = dims(d);
  x.type = t;
  x.format = nvinfer1::TensorFormat::kLINEAR;
  return x;
}

}  // namespace trt_test

#endif
