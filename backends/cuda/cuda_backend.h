/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend's internals shared between its files; each .cu
 * includes this header. Its parts, by what they do:
 *   cuda_state.h          state, devices, error reporting (CUDA_TRY)
 *   cuda_geom.h           launch geometry, division in kernels
 *   cuda_launch.h         programmatic launches after the kernel before
 *   cuda_dtype.cuh        element access by dtype in kernels
 *   cuda_check.h          index checks: records and host calls
 *   cuda_check_device.cuh index checks: verdicts on the device
 *   cuda_workspace.h      stream-ordered workspace
 * and here the entry points one file of the backend gives another.
 * Op math: docs/ops.md; plugin contract: include/apexx/backend.h. */
#ifndef APX_CUDA_BACKEND_H
#define APX_CUDA_BACKEND_H

#include <apexx/backend.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "cuda_state.h"
#include "cuda_geom.h"
#include "cuda_launch.h"
#include "cuda_dtype.cuh"
#include "cuda_check.h"
#include "cuda_check_device.cuh"
#include "cuda_workspace.h"

/* ff_infer.cu: may the FF path run these args (channels, L0 grid)? And
 * the release of its graph replay cache at fini. */
int cuda_ff_supports(cuda_state *st, const apx_ff_infer_args *a, apx_pass_over_code *code,
                     char *reason, size_t reason_size);
void cuda_ff_fini(cuda_state *st);

/* graph.cu: capture of the backend's launches into a CUDA graph, shared by
 * apx_graph_* and ff_infer's graph replay. begin starts a thread-local
 * capture on `stream`, or on a new non-blocking stream when it is NULL
 * (*own = 1: the caller destroys it after end); a stream already being
 * captured is APX_ERR_INVALID_ARG. end ends the capture and instantiates it
 * into *exec; with launched != APX_OK (a launch inside failed) it only
 * discards the capture and returns launched. `what` prefixes messages. */
apx_status cuda_capture_begin(cuda_state *st, cudaStream_t stream, cudaStream_t *capture,
                              int *own, const char *what);
apx_status cuda_capture_end(cuda_state *st, cudaStream_t capture, apx_status launched,
                            cudaGraphExec_t *exec, const char *what);
/* The table's graph entries (include/apexx/backend.h). */
apx_status cuda_graph_begin(void *state, int device_index, void *stream, void **graph,
                            void **capture_stream);
apx_status cuda_graph_end(void *state, void *graph);
apx_status cuda_graph_replay(void *state, void *graph, void *stream);
void cuda_graph_free(void *state, void *graph);

/* ---- ops (one file each, <op>.cu) ------------------------------------------------ */
#define CUDA_OP_DECL_(upper, lower)                                            \
  apx_status cuda_##lower(void *state, const apx_##lower##_args *args,         \
                          const apx_call *call);
APX_OP_MAP(CUDA_OP_DECL_)
#undef CUDA_OP_DECL_

/* scatter_add.cu: out = self (NULL: zeros) with src added along `dim` at
 * index (scatter_add; gather_backward with self NULL, gather_backward.cu).
 * `op` names the op in errors and index checks. */
apx_status cuda_scatter_accumulate(cuda_state *st, apx_op_id op, const apx_tensor *self,
                                   const apx_tensor *index, const apx_tensor *src,
                                   const apx_tensor *out, int dim, const apx_call *call);

#endif /* APX_CUDA_BACKEND_H */
