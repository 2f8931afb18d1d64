/* SPDX-License-Identifier: Apache-2.0 */
/* Graph capture: the apx_graph_* table entries (docs/graph.md) and the
 * capture helpers that ff_infer's graph replay shares. A capture records
 * the backend's launches on one stream into a CUDA graph
 * (cudaStreamBeginCapture in thread-local mode: only the capturing thread
 * is barred from calls that would break it); the core has already refused
 * the apexx calls that wait for the host inside a capture. */
#include "cuda_backend.h"

#include <stdio.h>

#include <new>

apx_status cuda_capture_begin(cuda_state *st, cudaStream_t stream, cudaStream_t *capture,
                              int *own, const char *what) {
  char step[160];
  *capture = stream;
  *own = 0;
  if (!stream) {
    /* the legacy default stream cannot be captured: a private one, whose
     * graph is launched on the caller's stream */
    snprintf(step, sizeof step, "%s: creating the capture stream", what);
    CUDA_TRY(st, cudaStreamCreateWithFlags(capture, cudaStreamNonBlocking), step);
    *own = 1;
  } else {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    snprintf(step, sizeof step, "%s: cudaStreamIsCapturing", what);
    CUDA_TRY(st, cudaStreamIsCapturing(stream, &cs), step);
    if (cs != cudaStreamCaptureStatusNone)
      return st->svc->set_error(APX_ERR_INVALID_ARG,
                                "%s: stream [%p] is already being captured (by apexx or the "
                                "caller: captures do not nest)",
                                what, (void *)stream);
  }
  cudaError_t err = cudaStreamBeginCapture(*capture, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    if (*own) cudaStreamDestroy(*capture);
    *capture = NULL;
    *own = 0;
    snprintf(step, sizeof step, "%s: cudaStreamBeginCapture", what);
    return cuda_fail(st, err, step);
  }
  return APX_OK;
}

apx_status cuda_capture_end(cuda_state *st, cudaStream_t capture, apx_status launched,
                            cudaGraphExec_t *exec, const char *what) {
  char step[200];
  *exec = NULL;
  cudaGraph_t graph = NULL;
  cudaError_t err = cudaStreamEndCapture(capture, &graph);
  if (launched != APX_OK) {
    /* the launch's message stays the error */
    if (graph) cudaGraphDestroy(graph);
    return launched;
  }
  if (err != cudaSuccess || !graph) {
    if (graph) cudaGraphDestroy(graph);
    snprintf(step, sizeof step,
             "%s: cudaStreamEndCapture (the capture was invalidated: a call inside it "
             "waited for the host or failed)",
             what);
    return cuda_fail(st, err != cudaSuccess ? err : cudaErrorStreamCaptureInvalidated, step);
  }
  err = cudaGraphInstantiate(exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    *exec = NULL;
    snprintf(step, sizeof step, "%s: cudaGraphInstantiate", what);
    return cuda_fail(st, err, step);
  }
  return APX_OK;
}

/* ---- apx_graph_* ------------------------------------------------------------ */

struct cuda_graph {
  int device;
  cudaStream_t capture; /* the stream captured */
  int own_stream;       /* capture was created here */
  int capturing;
  cudaGraphExec_t exec;
  pthread_mutex_t lock; /* CUDA graph objects are not internally synchronised */
};

apx_status cuda_graph_begin(void *state, int device_index, void *stream, void **graph,
                            void **capture_stream) {
  cuda_state *st = (cuda_state *)state;
  *graph = NULL;
  *capture_stream = NULL;
  apx_status rc = cuda_use_device(st, device_index);
  if (rc != APX_OK) return rc;
  cuda_graph *g = new (std::nothrow) cuda_graph();
  if (!g) return st->svc->set_error(APX_ERR_NO_MEMORY, "graph_begin: out of host memory");
  g->device = device_index;
  rc = cuda_capture_begin(st, (cudaStream_t)stream, &g->capture, &g->own_stream, "graph_begin");
  if (rc != APX_OK) {
    delete g;
    return rc;
  }
  g->capturing = 1;
  pthread_mutex_init(&g->lock, NULL);
  *graph = g;
  *capture_stream = (void *)g->capture;
  return APX_OK;
}

apx_status cuda_graph_end(void *state, void *graph) {
  cuda_state *st = (cuda_state *)state;
  cuda_graph *g = (cuda_graph *)graph;
  cudaSetDevice(g->device);
  g->capturing = 0;
  return cuda_capture_end(st, g->capture, APX_OK, &g->exec, "graph_end");
}

apx_status cuda_graph_replay(void *state, void *graph, void *stream) {
  cuda_state *st = (cuda_state *)state;
  cuda_graph *g = (cuda_graph *)graph;
  apx_status rc = cuda_use_device(st, g->device);
  if (rc != APX_OK) return rc;
  pthread_mutex_lock(&g->lock);
  cudaError_t err = cudaGraphLaunch(g->exec, (cudaStream_t)stream);
  pthread_mutex_unlock(&g->lock);
  if (err != cudaSuccess) return cuda_fail(st, err, "graph_replay: cudaGraphLaunch");
  return APX_OK;
}

void cuda_graph_free(void *state, void *graph) {
  (void)state;
  cuda_graph *g = (cuda_graph *)graph;
  if (!g) return;
  cudaSetDevice(g->device);
  if (g->capturing) {
    cudaGraph_t partial = NULL;
    cudaStreamEndCapture(g->capture, &partial);
    if (partial) cudaGraphDestroy(partial);
  }
  /* both are released once work in flight completes */
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->own_stream) cudaStreamDestroy(g->capture);
  pthread_mutex_destroy(&g->lock);
  delete g;
}
