/* SPDX-License-Identifier: Apache-2.0 */
// The apexx TensorRT plugins (libapexx_trt_plugins.so): what the plugin
// class, the per-op enqueue files, the kernels' access and the engine runner
// share. The plugins are IPluginV3 with the OneCore, OneBuild and OneRuntime
// capabilities; their attribute, serialisation and shape rules are the pure
// units of backends/trt/trt_units.h, their kernels the cuda backend's (its
// objects are linked into this library and driven through its own backend
// table, so the math and the device-side index checks are the same code).
#ifndef APX_TRT_PLUGIN_H
#define APX_TRT_PLUGIN_H

#include <NvInferRuntime.h>
#include <apexx/backend.h>
#include <cuda_runtime_api.h>

#include "../trt_units.h"

#define APX_TRT_EXPORT extern "C" __attribute__((visibility("default")))

namespace apexx_trt {

// One enqueue call, as the per-op files see it.
struct EnqueueCall {
  const apx__trt_params *params;
  const nvinfer1::PluginTensorDesc *in;
  const nvinfer1::PluginTensorDesc *out;
  int nb_inputs;
  int nb_outputs;
  void const *const *inputs;
  void *const *outputs;
  void *workspace;
  cudaStream_t stream;
  char *err;
  size_t err_size;
};

// The cuda backend linked into this library, initialised once per process
// (validation mode from $APEXX_TRT_VALIDATE: device by default, eager or
// off), and under validate = device the latch of the enqueue's device
// (host-mapped memory: a failure found on the device, docs/trt.md).
struct Kernels {
  const apx_backend_table *table;
  void *state;
  apx_validate_mode validate;
  int device;
  void *latch_host, *latch_device;
};
// 0 with *k set; -1 with the reason in err.
int kernels_get(Kernels *k, char *err, size_t err_size);
// The calling thread's message of the cuda backend's last failure.
const char *kernels_last_error();

// An apx_tensor over a TensorRT tensor on the current CUDA device.
// -1 with the message for a dtype apexx does not take.
int tensor_of(const nvinfer1::PluginTensorDesc &desc, const void *data, apx_tensor *t,
              char *err, size_t err_size);
// Dims of TensorRT in the units' struct.
apx__trt_dims dims_of(const nvinfer1::Dims &d);

// A failure's message: to the plugin's error recorder when TensorRT gave
// one (attachToContext), else to the logger found through setLoggerFinder,
// else to stderr.
void report_error(nvinfer1::IErrorRecorder *recorder, nvinfer1::ErrorCode code,
                  const char *message);
void log_warning(const char *message);

// What every enqueue does first: the input count, the shape rules over the
// run-time dims (outputs included), the dtypes, apx_tensor views of the
// inputs and outputs, and the kernels. 0, or -1 with the message in c.err.
int enqueue_prepare(const EnqueueCall &c, apx_tensor *ins, apx_tensor *outs, Kernels *k);
// After an op of the cuda backend failed: its message into c.err; -1.
int enqueue_failed(const EnqueueCall &c);
// After the ops of an enqueue: under validate = device the latch kernel on
// the stream (a failure the ops found reaches the next enqueue). 0, or -1
// with the message in c.err.
int enqueue_finish(const EnqueueCall &c, const Kernels &k);

// Per-op enqueue bodies (tilepack.cpp, tileunpack_fusion.cpp,
// tilessm_scan.cpp): 0, or -1 with the message in c.err.
int enqueue_tilepack(const EnqueueCall &c);
int enqueue_tileunpack_fusion(const EnqueueCall &c);
int enqueue_tilessm_scan(const EnqueueCall &c);

}  // namespace apexx_trt

#endif
