/* SPDX-License-Identifier: Apache-2.0 */
/* Stream-ordered op workspace from the device's pool (cuda_state.h;
 * backend.cu allocates and frees it). */
#ifndef APX_CUDA_WORKSPACE_H
#define APX_CUDA_WORKSPACE_H

#include <apexx/backend.h>
#include <cuda_runtime.h>
#include <stddef.h>

struct cuda_state;

/* ---- workspace ---------------------------------------------------------- */

/* Stream-ordered scratch memory from the device's pool
 * (cudaMallocFromPoolAsync), freed on the stream. */
struct cuda_workspace {
  void *ptr;
  cudaStream_t stream;
};
apx_status cuda_ws_alloc(cuda_state *st, cudaStream_t stream, size_t bytes,
                         cuda_workspace *ws, const char *what);
void cuda_ws_free(cuda_workspace *ws);

/* Bytes rounded up so that consecutive carve-outs stay 256-byte aligned. */
static inline size_t cuda_align_up(size_t n) { return (n + 255u) & ~(size_t)255u; }

#endif /* APX_CUDA_WORKSPACE_H */
