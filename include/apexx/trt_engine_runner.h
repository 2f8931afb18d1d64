/* SPDX-License-Identifier: Apache-2.0 */
/* The engine runner of libapexx_trt_plugins.so (docs/trt.md, The engine
 * runner), for apexx-bench and other tools: plain C, reached by opening the
 * library with apx_library_open (the core's checks) and dlsym of
 * APEXX_TRT_ENGINE_RUN_SYMBOL or APEXX_TRT_PLUGIN_RUN_SYMBOL, so a caller
 * needs neither TensorRT's headers nor a link to the plugin library.
 *
 * It deserialises a TensorRT engine through the dlopened runtime
 * (createInferRuntime_INTERNAL of libnvinfer, the plugins' creators
 * registered first), sets each input's shape (dynamic dims from
 * input_shapes "name=AxBx...", else 1 with a warning), fills the inputs
 * with seeded values (floats in [-1, 1], integers 0), and times
 * enqueueV3 with CUDA events. */
#ifndef APEXX_TRT_ENGINE_RUNNER_H
#define APEXX_TRT_ENGINE_RUNNER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define APEXX_TRT_ENGINE_RUN_SYMBOL "apexx_trt_engine_run"
#define APEXX_TRT_PLUGIN_RUN_SYMBOL "apexx_trt_plugin_run"

typedef struct apexx_trt_engine_request {
  uint32_t size; /* sizeof(apexx_trt_engine_request) of the caller */
  const char *engine_path;
  const char *const *input_shapes; /* "name=AxBx...", input_shape_count of them */
  int input_shape_count;
  int warmup;
  int iters;
  uint64_t seed;
  /* one line per warning (an unresolved dynamic dim set to 1); may be NULL */
  void (*warn)(void *user, const char *line);
  void *user;
} apexx_trt_engine_request;

typedef struct apexx_trt_engine_result {
  double p50_ms, p95_ms, mean_ms;
  double peak_memory_mb; /* the engine's device memory plus the I/O buffers */
  int64_t frames;        /* the first input's leading dim (frames_per_s);
                            the plugin run's batch */
  char mode[32];         /* "modern_io_tensors"; the plugin run's "plugin_network" */
  char trt_version[32];  /* libnvinfer's, "10.13.0" */
  /* when not run: the row's skip reason (docs/report.md, Rows),
   * "engine_deserialize_failed",
   * "unsupported_dtype:<n>", "unresolved_tensor_shape:<name>",
   * "tensorrt_unavailable:<probe reason>", ... */
  char reason[1024];
} apexx_trt_engine_result;

/* 0: ran, *result filled; 1: skipped (TensorRT or a device missing, an
 * engine it cannot run), result->reason set; -1: failed while running
 * (a CUDA or enqueue error), result->reason set. */
typedef int (*apexx_trt_engine_run_fn)(const apexx_trt_engine_request *request,
                                       apexx_trt_engine_result *result);

/* apexx_trt_plugin_run: a network of one TileSSMScan plugin (the creator
 * of this library, namespace "apexx", version "1"; direction 0,
 * clamp_value 1e4, num_inputs 5) over fp16 inputs tokens [batch, steps,
 * channels] and decay, input_gain, output_gain, state_bias [channels],
 * its output y marked; built with buildSerializedNetwork (a 1 MiB
 * workspace), deserialised, the inputs filled from the seeded splitmix64
 * stream (tokens N(0,1), decay U(0.1,0.9), gains U(0.05,1.55), state_bias
 * 0.1*N(0,1)), enqueueV3 timed with CUDA events. The result is
 * apexx_trt_engine_result with mode "plugin_network" and frames = batch;
 * skip reasons: "tensorrt_unavailable:...", "tensorrt_version_mismatch:...",
 * "cuda_unavailable:...", "tilessm_plugin_creator_not_registered",
 * "engine_build_failed:<what>", "engine_build_returned_none",
 * "engine_deserialize_failed". */
typedef struct apexx_trt_plugin_request {
  uint32_t size; /* sizeof(apexx_trt_plugin_request) of the caller */
  int64_t batch, steps, channels;
  int warmup;
  int iters;
  uint64_t seed;
} apexx_trt_plugin_request;

/* 0, 1 or -1 as apexx_trt_engine_run_fn. */
typedef int (*apexx_trt_plugin_run_fn)(const apexx_trt_plugin_request *request,
                                       apexx_trt_engine_result *result);

#ifdef __cplusplus
}
#endif

#endif

